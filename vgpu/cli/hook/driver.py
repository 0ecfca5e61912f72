"""The driver files' hook (``--cdi-link TARGET::LINK``, ``--cdi-ldconfig
DIR``, at createRuntime): after the runtime bound the driver's files into
the container (vgpu.common.driverfiles), make their SONAME links and the
container's ldcache, inside the container's root, before its process runs.

createRuntime runs in the runtime's namespaces after runc has made the
container's mounts, before pivot_root.  The hook enters the container's
mount namespace (setns through a pidfd, as mount_views) and:

- links: each LINK's directory is opened with openat2() inside the root,
  refusing a symlink anywhere on the path (Mounter.resolve), and the link
  is made by symlinkat() on that fd: nothing the image controls can move it
  outside the root.  A link already there with the same target is kept; a
  symlink with another target is replaced (the image's stale SONAME link);
  a file that is not a symlink is left alone (a warning line).
- ldconfig: NVIDIA's update-ldcache hook runs ldconfig on the mounted
  libraries' folders for the container's root.  Here the host's
  /sbin/ldconfig runs as a child that has chroot()ed into the container's
  root by fd (fchdir + chroot("."), in the container's mount namespace,
  where our binds are; the host's namespace does not have them) and is
  executed by an fd opened on the host before (fexecve), so the binary is
  the host's, and every path it opens, the symlinks in the image included,
  is resolved by the kernel inside the root.  ``ldconfig -r ROOT`` would do
  the chroot itself but only after loading, and a host-namespace run would
  not see the container's mounts.  The binary must have no program
  interpreter (static or static-pie, as Debian's and most distributions'
  are): a dynamic one would load the image's ld.so and libc inside the
  root, as root; such an ldconfig is refused, not run.
  Assumed: ldconfig parses the image's ELF files and ld.so.conf as root
  inside the chroot (as NVIDIA's hook does); the chroot keeps its paths in
  the root, it does not contain a hostile ldconfig.  It writes the
  container's /etc/ld.so.cache: a read-only /etc fails the start (one line
  with ldconfig's output); a root with no /etc at all (an image FROM
  scratch) gets the links but no ldcache (as NVIDIA's hook skips a
  container without ldconfig).
"""
from __future__ import annotations

import errno
import os
import select
import sys
from time import monotonic

from vgpu.cli.hook.cmdline import PROG, HookError
from vgpu.cli.hook.mounts import Mounter
from vgpu.common.elf import LDCONFIG, elf_is_static

#: signal.SIGKILL (Linux): the signal module imports enum, ~4 ms of every hook's start
SIGKILL = 9

#: bound on the container's ldconfig, in seconds (under the hook entry's
#: 60: vgpu.common.driverfiles.DRIVER_HOOK_TIMEOUT)
LDCONFIG_TIMEOUT = 45.0


def make_links(cid: str, m: Mounter, root: int, links: list[tuple[str, str]], debug) -> list[str]:
    """Each (target, link): the symlink ``link`` -> ``target`` inside the
    root fd ``root`` (see the module doc); what was made."""
    done = []
    for target, link in links:
        parent, name = os.path.split(link)
        try:
            d = m.resolve(root, parent.lstrip("/") or ".", os.O_DIRECTORY)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise HookError(f"container {cid}: {parent} in the rootfs is a symlink or "
                                f"lies under one; refused (no link {link})") from None
            raise HookError(f"container {cid}: {parent}: {e.strerror or e} (no link "
                            f"{link})") from None
        try:
            try:
                os.symlink(target, name, dir_fd=d)
                done.append(link)
                continue
            except FileExistsError:
                pass
            try:
                cur = os.readlink(name, dir_fd=d)
            except OSError:
                sys.stderr.write(f"{PROG}: container {cid}: warning: {link} is the image's "
                                 f"own file, not a link; left alone\n")
                continue
            if cur == target:
                continue
            # the image's link to something else: replaced (unlinkat never
            # follows the link it removes)
            os.unlink(name, dir_fd=d)
            os.symlink(target, name, dir_fd=d)
            done.append(link)
        except OSError as e:
            raise HookError(f"container {cid}: {link}: {e.strerror or e}") from None
        finally:
            os.close(d)
    debug(f"links {' '.join(done) or 'none new'}")
    return done


def open_ldconfig(cid: str, path: str = LDCONFIG) -> int:
    """An fd of the host's ldconfig, refused unless it is static (see the
    module doc)."""
    if not elf_is_static(path):
        raise HookError(f"container {cid}: {path} is not a static executable; the "
                        f"container's ldcache is not made with it (it would load the "
                        f"image's libraries as root)")
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise HookError(f"container {cid}: {path}: {e.strerror or e}") from None


def run_ldconfig(cid: str, root: int, ldconfig: int, dirs: list[str],
                 timeout: float = LDCONFIG_TIMEOUT) -> None:
    """The host's ldconfig (fd ``ldconfig``) chrooted into ``root`` (an fd
    of the container's root, in its mount namespace) on ``dirs``; its
    output joins the error when it fails."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                # the child: never returns
        try:
            os.close(r)
            os.dup2(w, 1)
            os.dup2(w, 2)
            os.fchdir(root)
            os.chroot(".")
            os.chdir("/")
            os.execve(ldconfig, ["ldconfig", *dirs], {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        except BaseException as e:              # noqa: BLE001 - report and leave
            try:
                os.write(2, f"{e}\n".encode())
            finally:
                os._exit(127)
    os.close(w)
    out = b""
    end = monotonic() + timeout
    try:
        while True:
            left = end - monotonic()
            if left <= 0:
                os.kill(pid, SIGKILL)
                os.waitpid(pid, 0)
                raise HookError(f"container {cid}: ldconfig ran longer than {timeout:g} s")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 4096)
                if not chunk:
                    break
                if len(out) < 8192:
                    out += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(r)
    if os.waitstatus_to_exitcode(status) != 0:
        text = " ".join(out.decode(errors="replace").split())[:600]
        raise HookError(f"container {cid}: ldconfig {' '.join(dirs)} in the container failed "
                        f"(exit {os.waitstatus_to_exitcode(status)}): {text}")


def has_etc(m: Mounter, root: int) -> bool:
    """Whether the root has an /etc directory (a symlink to one, resolved
    inside the root, counts: ldconfig runs chrooted)."""
    how = m.RESOLVE_IN_ROOT | m.RESOLVE_NO_MAGICLINKS
    ct = m.ctypes
    arg = (ct.c_uint64 * 3)(os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY, 0, how)
    fd = m.libc.syscall(m.SYS_OPENAT2, root, b"etc", arg, ct.sizeof(arg))
    if fd < 0:
        return False
    os.close(fd)
    return True


def driver_files(cid: str, pid: int, rootfs: str, links: list[tuple[str, str]],
                 dirs: list[str], debug, ldconfig_path: str = LDCONFIG) -> int:
    """The hook's work for the driver files (module doc)."""
    ldconfig = open_ldconfig(cid, ldconfig_path) if dirs else None
    try:
        m = Mounter()
        rootfs = os.path.realpath(rootfs)       # the runtime's path (trusted); inside: fds
        try:
            m.setns_mnt(pid)
            root = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise HookError(f"container {cid}: {e.strerror or e}") from None
        try:
            make_links(cid, m, root, links, debug)
            if ldconfig is not None and not has_etc(m, root):
                # an image with no /etc (FROM scratch) has no ldcache to
                # make; the links are there for a loader given the path
                debug(f"{rootfs} has no /etc: no ldcache made")
            elif ldconfig is not None:
                run_ldconfig(cid, root, ldconfig, dirs)
                debug(f"ldconfig {' '.join(dirs)} in {rootfs}")
        finally:
            os.close(root)
    finally:
        if ldconfig is not None:
            os.close(ldconfig)
    return 0
