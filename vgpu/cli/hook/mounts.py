"""Mounts by fd: Mounter (the syscalls, ctypes) and mount_views, which
bind-mounts a slice's nodes and its /proc/driver/nvidia view into a rootfs,
every target resolved inside the root and refusing symlinks."""
from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from time import monotonic, sleep

from vgpu.cli.hook.cmdline import PROG, HookError

#: vgpu.ko's filesystem of a slice's nodes with NVIDIA's numbers (kmod/vgpu/devfs.c)
VGPU_DEVFS = "vgpudev"
VGPU_DEVFS_MAGIC = 0x76677064
NV_MAJOR = 195

#: statfs(2)'s f_type of procfs (linux/magic.h)
PROC_SUPER_MAGIC = 0x9FA0


class Mounter:
    """Mounts by syscall (ctypes).

    Mount targets are file descriptors, never paths.  A path handed to
    mount(2) is resolved again by the kernel after whatever check came
    before it, and inside a rootfs the image, or anything sharing a writable
    volume with it, can swap a directory for a symlink in between and land
    the mount outside the root (NVIDIA Container Toolkit CVE-2024-0132, runc
    CVE-2024-21626 and the 2025 runc mount races).  So a target is opened
    with openat2() inside the root, refusing a symlink anywhere on the path
    (resolve()); a missing one is created one component at a time relative
    to its parent's fd (make()); and the mount is attached to the target's
    fd with open_tree() + move_mount(), so what was checked is what is
    mounted on.  (runc mounts onto /proc/self/fd/N of such an fd instead:
    that needs a /proc it can trust in the hook's root, which the hook does
    not have after setns, and a read-only view would need a second,
    remount, call; the new mount API makes the detached copy read-only
    before it is attached.)  Linux 5.12 or later (mount_setattr)."""
    CLONE_NEWNS = 0x00020000
    # one syscall table for every architecture from 424 on (x86_64, aarch64, ...)
    SYS_PIDFD_SEND_SIGNAL, SYS_OPEN_TREE, SYS_MOVE_MOUNT = 424, 428, 429
    SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT, SYS_PIDFD_OPEN = 430, 431, 432, 434
    SYS_OPENAT2, SYS_MOUNT_SETATTR = 437, 442
    OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
    MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
    AT_FDCWD, AT_EMPTY_PATH, MNT_DETACH, AT_SYMLINK_NOFOLLOW = -100, 0x1000, 2, 0x100
    RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_IN_ROOT = 0x02, 0x04, 0x10
    MOUNT_ATTR_RDONLY = 0x1
    FSOPEN_CLOEXEC = FSMOUNT_CLOEXEC = 1
    FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6

    def __init__(self):
        self.ctypes = ctypes
        # the C library this Python is linked with (dlopen(NULL): no search
        # for its file, which ctypes.util would do with a subprocess at hand)
        self.libc = ctypes.CDLL(None, use_errno=True)
        # our own fd table in the host's /proc, opened while that is in
        # sight: umount() reaches a mount by fd through it after setns
        self.fd_dir = os.open("/proc/self/fd", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def _sys(self, nr: int, *args, what: str) -> int:
        r = self.libc.syscall(nr, *args)
        if r < 0:
            e = self.ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")
        return r

    # -------------------------------------------------------- processes
    def open_process(self, pid: int) -> tuple[int, int]:
        """(pidfd, fd of /proc/<pid>) of one and the same process.  The pidfd
        pins the process; the /proc directory, opened after it, is its too
        if the process is still alive afterwards (a pid is not reused before
        its process is reaped).  Both stay bound to it: a reused pid cannot
        slip in later."""
        pidfd = self._sys(self.SYS_PIDFD_OPEN, pid, 0, what=f"pidfd_open {pid}")
        try:
            procfd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            if not self.alive(pidfd):
                os.close(procfd)
                raise ProcessLookupError(3, f"process {pid} exited")
        except BaseException:
            os.close(pidfd)
            raise
        return pidfd, procfd

    def alive(self, pidfd: int) -> bool:
        """Whether the process behind pidfd is not yet reaped (its pid is still its own)."""
        if self.libc.syscall(self.SYS_PIDFD_SEND_SIGNAL, pidfd, 0, None, 0) == 0:
            return True
        e = self.ctypes.get_errno()
        if e == 3:                                          # ESRCH
            return False
        raise OSError(e, f"pidfd_send_signal: {os.strerror(e)}")

    def fs_type(self, fd: int) -> int:
        """f_type of the filesystem fd lies on (fstatfs; f_type, a long, is
        the first field of struct statfs, 120 bytes on x86_64)."""
        buf = self.ctypes.create_string_buffer(256)
        if self.libc.fstatfs(fd, buf) != 0:
            e = self.ctypes.get_errno()
            raise OSError(e, f"fstatfs: {os.strerror(e)}")
        return self.ctypes.c_long.from_buffer(buf).value

    def enter_mnt(self, pidfd: int) -> None:
        """setns into the mount namespace of the process pidfd pins (Linux 5.8)."""
        if self.libc.setns(pidfd, self.CLONE_NEWNS) != 0:
            e = self.ctypes.get_errno()
            raise OSError(e, f"setns into the mount namespace: {os.strerror(e)}")

    def setns_mnt(self, pid: int) -> None:
        """Enter ``pid``'s mount namespace and its root (as ``nsenter -m -r``):
        setns alone leaves us at the namespace's root mount, which is not the
        process's root when the runtime runs chrooted (the VM test bed)."""
        pidfd, procfd = self.open_process(pid)
        try:
            root = os.open("root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=procfd)
            try:
                self.enter_mnt(pidfd)
                os.fchdir(root)
                os.chroot(".")
                os.chdir("/")
            finally:
                os.close(root)
        finally:
            os.close(pidfd)
            os.close(procfd)

    # -------------------------------------------------------- targets
    def resolve(self, dirfd: int, path: str, flags: int = 0) -> int:
        """An O_PATH fd of ``path`` under ``dirfd``, resolved by the kernel
        with ``dirfd`` as the root (".." stops there) and no symlink or
        /proc magic link followed anywhere on the way (ELOOP)."""
        ct = self.ctypes
        how = (ct.c_uint64 * 3)(os.O_PATH | os.O_CLOEXEC | flags, 0,
                                self.RESOLVE_IN_ROOT | self.RESOLVE_NO_SYMLINKS
                                | self.RESOLVE_NO_MAGICLINKS)
        for _ in range(16):
            fd = self.libc.syscall(self.SYS_OPENAT2, dirfd, path.encode(), how, ct.sizeof(how))
            if fd >= 0:
                return fd
            e = ct.get_errno()
            if e != 11:           # EAGAIN: a rename or mount raced a ".." step; once more
                break
        raise OSError(e, os.strerror(e), path)

    def make(self, dirfd: int, name: str, mode: int, directory: bool = False) -> None:
        """Create the file or directory ``name`` (one component) in
        ``dirfd`` without following anything; an entry that is already
        there, a symlink included, is left for resolve() to judge."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"not one path component: {name!r}")
        try:
            if directory:
                os.mkdir(name, mode, dir_fd=dirfd)
            else:
                os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDONLY | os.O_NOFOLLOW
                                 | os.O_CLOEXEC, mode, dir_fd=dirfd))
        except FileExistsError:
            pass

    # -------------------------------------------------------- mounts
    def open_tree(self, path: str, rdonly: bool = False) -> int:
        """A detached copy of the mount at ``path`` (vgpufs: the host's, not
        the container's), as an fd that survives setns; read-only before it
        is attached anywhere with ``rdonly``."""
        fd = self._sys(self.SYS_OPEN_TREE, self.AT_FDCWD, path.encode(),
                       self.OPEN_TREE_CLONE | self.OPEN_TREE_CLOEXEC, what=f"open_tree {path}")
        try:
            if rdonly:
                self.set_rdonly(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def set_rdonly(self, fd: int) -> None:
        attr = (self.ctypes.c_uint64 * 4)(self.MOUNT_ATTR_RDONLY, 0, 0, 0)   # struct mount_attr
        self._sys(self.SYS_MOUNT_SETATTR, fd, b"", self.AT_EMPTY_PATH, attr,
                  self.ctypes.sizeof(attr), what="mount_setattr read-only")

    def attach(self, fd: int, target: int, what: str) -> None:
        """Attach the detached mount ``fd`` onto the ``target`` fd: no path."""
        self._sys(self.SYS_MOVE_MOUNT, fd, b"", target, b"",
                  self.MOVE_MOUNT_F_EMPTY_PATH | self.MOVE_MOUNT_T_EMPTY_PATH,
                  what=f"move_mount onto {what}")

    def bind(self, src: str, target: int, what: str, rdonly: bool = False) -> int:
        """Bind-mount ``src`` onto the ``target`` fd; the new mount's fd."""
        fd = self.open_tree(src, rdonly)
        try:
            self.attach(fd, target, what)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def tmpfs(self, target: int, what: str, **options: str) -> int:
        """A new tmpfs mounted onto the ``target`` fd; the new mount's fd."""
        fs = self._sys(self.SYS_FSOPEN, b"tmpfs", self.FSOPEN_CLOEXEC, what="fsopen tmpfs")
        try:
            for k, v in options.items():
                self._sys(self.SYS_FSCONFIG, fs, self.FSCONFIG_SET_STRING, k.encode(),
                          v.encode(), 0, what=f"tmpfs {k}={v}")
            self._sys(self.SYS_FSCONFIG, fs, self.FSCONFIG_CMD_CREATE, None, None, 0,
                      what="tmpfs")
            mnt = self._sys(self.SYS_FSMOUNT, fs, self.FSMOUNT_CLOEXEC, 0, what="fsmount tmpfs")
        finally:
            os.close(fs)
        try:
            self.attach(mnt, target, what)
        except BaseException:
            os.close(mnt)
            raise
        return mnt

    def devfs(self, slice_id: int) -> int:
        """A detached mount of vgpu.ko's "vgpudev" for the slice ``slice_id``
        (its nodes stat as NVIDIA's, open as vgpu.ko's: docs/containers.md,
        "NVIDIA's device numbers"); ENODEV from a vgpu.ko without it."""
        fs = self._sys(self.SYS_FSOPEN, VGPU_DEVFS.encode(), self.FSOPEN_CLOEXEC,
                       what=f"fsopen {VGPU_DEVFS}")
        try:
            self._sys(self.SYS_FSCONFIG, fs, self.FSCONFIG_SET_STRING, b"slice",
                      str(int(slice_id)).encode(), 0, what=f"{VGPU_DEVFS} slice={slice_id}")
            self._sys(self.SYS_FSCONFIG, fs, self.FSCONFIG_CMD_CREATE, None, None, 0,
                      what=f"{VGPU_DEVFS} slice={slice_id}")
            return self._sys(self.SYS_FSMOUNT, fs, self.FSMOUNT_CLOEXEC, 0,
                             what=f"fsmount {VGPU_DEVFS}")
        finally:
            os.close(fs)

    def clone_at(self, dirfd: int, name: str) -> int:
        """A detached bind mount of ``name`` (one component) under the
        attached mount ``dirfd`` (open_tree refuses a detached source on
        Linux 6.1: __do_loopback's check_mnt)."""
        return self._sys(self.SYS_OPEN_TREE, dirfd, name.encode(),
                         self.OPEN_TREE_CLONE | self.OPEN_TREE_CLOEXEC | self.AT_SYMLINK_NOFOLLOW,
                         what=f"open_tree {name}")

    def umount(self, fd: int, what: str) -> None:
        """Detach the mount whose root ``fd`` is.  umount2 takes only a path:
        the path is ``fd``'s own magic link in our fd table, looked up from
        self.fd_dir (the host's /proc), so nothing of the container's is
        resolved, and it works after setns, where / has no /proc of ours."""
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fchdir(self.fd_dir)
            if self.libc.umount2(str(fd).encode(), self.MNT_DETACH) != 0:
                e = self.ctypes.get_errno()
                raise OSError(e, f"umount {what}: {os.strerror(e)}")
        finally:
            os.fchdir(cwd)
            os.close(cwd)


def release_mounts(m: Mounter, cid: str, mounted: list[tuple[int, str]], fds: list[int],
                   undo: bool) -> None:
    """The end of a call that mounted: with ``undo`` (it failed part way),
    detach what it mounted (``mounted``: mount fd, where), newest first, a
    line for each that will not go; then close every fd it held."""
    if undo:
        for fd, where in reversed(mounted):
            try:
                m.umount(fd, where)
            except OSError as e:
                sys.stderr.write(f"{PROG}: container {cid}: could not undo the mount "
                                 f"on {where}: {e.strerror or e}\n")
    for fd, _ in mounted:
        os.close(fd)
    for fd in fds:
        os.close(fd)


def mount_views(cid: str, rootfs: str, fuse: str, m: Mounter, debug,
                name: str | None = None, slice_id: int | None = None) -> list[str]:
    """Bind-mount the slice's nodes and the vgpufs proc view of the slice
    ``name`` (default: the container's own, ``cid``) into the rootfs (in the
    current mount namespace).  Idempotent: a target that already is the
    slice's node is left alone.  Returns what it mounted.

    The nodes: with ``slice_id``, those of a vgpu.ko "vgpudev" mount of the
    slice (they open as vgpu.ko's minors and stat as NVIDIA's 195:N, which
    NVIDIA's libcuda and NVML require), plus /dev/char/195:<minor> links to
    them, as udev makes on a host; without it, or from a vgpu.ko without
    vgpudev, vgpufs's ``dev/`` (vgpu.ko's numbers: the node opens the same,
    NVIDIA's libraries refuse it).

    Every target is resolved inside the rootfs by fd and a symlink anywhere
    on its path is refused (see Mounter); on any failure what this call
    mounted is unmounted again."""
    src_dev = os.path.join(fuse, name or cid, "dev")
    src_proc = os.path.join(fuse, name or cid, "proc", "driver", "nvidia")
    devfs = None
    if slice_id is not None:
        try:
            devfs = m.devfs(slice_id)
        except OSError as e:
            if e.errno != errno.ENODEV:
                raise HookError(f"container {cid}: {e.strerror or e}") from None
            debug(f"vgpu.ko has no {VGPU_DEVFS}: the slice's vgpufs nodes (vgpu.ko's numbers)")
    names: list[str] = []
    if devfs is None:
        try:
            names = sorted(os.listdir(src_dev))
        except OSError as e:
            raise HookError(f"container {cid}: vgpufs has no nodes for it at {src_dev} "
                            f"({e.strerror or e}; is vgpud's filesystem mounted?)") from None
    rootfs = os.path.realpath(rootfs)     # the runtime's path (trusted); inside it: fds only
    fds: list[int] = [] if devfs is None else [devfs]   # closed at the end
    mounted: list[tuple[int, str]] = []   # (mount fd, where), undone on a failure

    def at(dirfd: int, rel: str, shown: str, flags: int = 0, optional: bool = False):
        """resolve(), with the errors a rootfs can cause said in its terms;
        None for a missing (or, with O_DIRECTORY, non-directory) optional one."""
        try:
            fd = m.resolve(dirfd, rel, flags)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise HookError(f"container {cid}: {shown} in the rootfs is a symlink or "
                                f"lies under one; refused (mount targets never follow "
                                f"symlinks)") from None
            if optional and e.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise OSError(e.errno, e.strerror, shown) from None
        fds.append(fd)
        return fd

    def node_target(dev: int, node: str) -> tuple[int, str]:
        shown = f"/dev/{node}"
        target = at(dev, node, shown, optional=True)
        if target is None:
            m.make(dev, node, 0o666)
            target = at(dev, node, shown)
        return target, shown

    done = []
    ok = False
    try:
        root = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds.append(root)
        dev = at(root, "dev", "/dev", os.O_DIRECTORY, optional=True)
        if dev is None:
            m.make(root, "dev", 0o755, directory=True)
            dev = at(root, "dev", "/dev", os.O_DIRECTORY)
        if devfs is not None:
            devfs_nodes(cid, m, devfs, dev, at, node_target, mounted, done)
        for name in names:
            src = os.path.join(src_dev, name)
            st = os.stat(src)
            if not stat.S_ISCHR(st.st_mode):
                continue
            target, shown = node_target(dev, name)
            tst = os.fstat(target)
            if stat.S_ISCHR(tst.st_mode) and tst.st_rdev == st.st_rdev:
                continue                  # already there (a second hook call)
            mounted.append((m.bind(src, target, shown), shown))
            done.append(shown)
        pdrv = at(root, "proc/driver", "/proc/driver", os.O_DIRECTORY, optional=True) \
            if os.path.isdir(src_proc) else None
        if pdrv is not None:
            shown = "/proc/driver/nvidia"
            target = at(pdrv, "nvidia", shown, os.O_DIRECTORY, optional=True)
            if target is not None:
                if not os.path.samestat(os.fstat(target), os.stat(src_proc)):
                    mounted.append((m.bind(src_proc, target, shown, rdonly=True), shown))
                    done.append(shown)
            else:
                # procfs cannot grow a directory: a small read-only tmpfs over
                # /proc/driver holding the slice's nvidia directory
                tmp = m.tmpfs(pdrv, "/proc/driver", source="vgpu", mode="0555", size="64k")
                mounted.append((tmp, "/proc/driver"))
                m.make(tmp, "nvidia", 0o555, directory=True)
                target = at(tmp, "nvidia", shown, os.O_DIRECTORY)
                mounted.append((m.bind(src_proc, target, shown, rdonly=True), shown))
                m.set_rdonly(tmp)
                done.append(shown)
        ok = True
    finally:
        release_mounts(m, cid, mounted, fds, undo=not ok)
    debug(f"mounted {' '.join(done) or 'nothing (already there)'} in {rootfs}")
    return done


def devfs_nodes(cid: str, m: Mounter, devfs: int, dev: int, at, node_target,
                mounted: list, done: list) -> None:
    """Bind each node of the detached vgpudev mount ``devfs`` onto the
    rootfs' /dev/<node> (``dev``: its fd) and link /dev/char/195:<minor>
    to the nodes NVIDIA numbers so.  open_tree() clones only from a mount
    of the current namespace (Linux 6.1), so the vgpudev mount is attached
    for the while on a fresh directory of the container's /dev and
    detached again (with the directory) before returning; the binds stay.
    A node already bound from a vgpudev mount of the same slice (same
    filesystem type, inode number, which is 2 + vgpu.ko's minor, and device
    number) is left alone."""
    stage = None
    for i in range(16):
        cand = f".vgpu-{os.getpid()}-{i}"
        try:
            os.mkdir(cand, 0o700, dir_fd=dev)
        except FileExistsError:
            continue
        stage = cand
        break
    if stage is None:
        raise HookError(f"container {cid}: no staging directory could be made in /dev")
    links: list[tuple[str, str]] = []
    attached = False
    try:
        sfd = at(dev, stage, f"/dev/{stage}", os.O_DIRECTORY)
        m.attach(devfs, sfd, f"/dev/{stage}")
        attached = True
        dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=devfs)
        try:
            names = sorted(os.listdir(dfd))
        finally:
            os.close(dfd)
        for node in names:
            st = os.stat(node, dir_fd=devfs, follow_symlinks=False)
            if not stat.S_ISCHR(st.st_mode):
                continue
            if os.major(st.st_rdev) == NV_MAJOR:
                links.append((f"{NV_MAJOR}:{os.minor(st.st_rdev)}", f"../{node}"))
            target, shown = node_target(dev, node)
            tst = os.fstat(target)
            if m.fs_type(target) == VGPU_DEVFS_MAGIC and \
                    (tst.st_ino, tst.st_rdev) == (st.st_ino, st.st_rdev):
                continue                  # already there (a second hook call)
            clone = m.clone_at(devfs, node)
            try:
                m.attach(clone, target, shown)
            except BaseException:
                os.close(clone)
                raise
            mounted.append((clone, shown))
            done.append(shown)
    finally:
        # the binds made stay (the caller undoes them on a failure); the
        # staging mount and its directory go in any case
        try:
            if attached:
                m.umount(devfs, f"/dev/{stage}")
            os.rmdir(stage, dir_fd=dev)
        except OSError as e:
            sys.stderr.write(f"{PROG}: container {cid}: could not remove /dev/{stage}: "
                             f"{e.strerror or e}\n")
    if not links:
        return
    char = at(dev, "char", "/dev/char", os.O_DIRECTORY, optional=True)
    if char is None:
        m.make(dev, "char", 0o755, directory=True)
        char = at(dev, "char", "/dev/char", os.O_DIRECTORY)
    for link, to in links:
        try:
            os.symlink(to, link, dir_fd=char)
            done.append(f"/dev/char/{link}")
        except FileExistsError:
            try:
                cur = os.readlink(link, dir_fd=char)
            except OSError:
                cur = None
            if cur != to:
                raise HookError(f"container {cid}: /dev/char/{link} exists and is not a link "
                                f"to {to}; refused") from None


def wait_for(path: str, limit: float) -> bool:
    end = monotonic() + limit
    while not os.path.exists(path):
        if monotonic() >= end:
            return False
        sleep(0.005)
    return True
