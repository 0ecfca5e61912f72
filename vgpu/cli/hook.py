"""vgpu-oci-hook: the OCI hook that attaches a GPU slice to a container.

    vgpu-oci-hook [--socket PATH] [--timeout S] [--fuse-mount DIR] [--debug] [STAGE]

The runtime passes the container's state (JSON) on stdin; STAGE is the OCI
hook stage the hook was wired for (``createRuntime``, ``prestart``,
``poststop``, ...).  Without STAGE only a ``stopped`` state is understood
(poststop): a ``creating`` state comes with createRuntime, prestart and
createContainer alike, so the hook refuses to guess and act on its pid.

The hook never runs where the image can steer it: ``createContainer`` (run by
runc inside the container's mount namespace, working directory the rootfs,
with the container's environment when the entry sets none) is refused, every
shipped entry sets an explicit ``env``, and Python runs isolated (``-I``: no
PYTHONPATH, PYTHONWARNINGS, user site or working directory on sys.path).

A container asks for a slice with annotations ``vgpu.io/memory``,
``vgpu.io/compute``, ``vgpu.io/priority``, ``vgpu.io/policy``,
``vgpu.io/gpus`` and ``vgpu.io/profile`` (set by the pod or the operator;
``vgpu.io/container-<key>`` says the same).  In a Kubernetes pod (CRI
annotations) the pod's ``vgpu.io/<key>`` ask for ONE slice for the whole
pod, ``pod-<sandbox id>``, bound to the pod's cgroup and shared by all its
containers; a container with ``vgpu.io/container-<key>`` (the device
plugin's) gets its own instead; the sandbox (pause) container never gets
one.  vgpu.common.request holds the rule (container-hook/README.md, "Pods").
The image's environment (``VGPU_MEMORY``, ``VGPU_PROFILE``, ...) counts only
for a container with none of those annotations, and only when it names, with
``VGPU_PROFILE``, a profile of vgpud's config with ``allow_image_env = true``
(vgpud's ``status`` lists them); otherwise it is ignored.  A container that
asked for nothing costs a JSON parse of its state and config.json: nothing
is sent.  Its values are checked by vgpu.common.values, the parsers vgpud's API
uses too, before anything is sent.

- createRuntime / prestart (runtime namespace, before pivot_root): one
  ``create`` call to vgpud (container id, cgroup or pid, owner: see
  owner_of; the same owner's slice is handed back, anyone else's refused),
  then, inside the
  container's mount namespace (setns through a pidfd of pid), bind-mount
  ``<fuse_mount>/<id>/dev/*`` onto the rootfs' /dev/* and
  ``<fuse_mount>/<id>/proc/driver/nvidia`` onto /proc/driver/nvidia, and
  allow the vgpu major in the device cgroup (v1: devices.allow; v2: the rule
  must be in config.json, which vgpu-runtime adds).  Any failure deletes the
  slice again and fails the start with one line naming the container.
- createContainer: refused (exit 1, one line): see above.
- poststop: ``delete`` (force) of the container's slice, as its owner; a
  slice that is already gone is fine, one owned by someone else (a
  same-named container of another runtime root or namespace) is left alone.
  A pod's container leaves the pod's slice alone; the pod's sandbox
  deletes it.
- any other stage: nothing (exit 0; a line with --debug).

``vgpu-oci-hook --mount-slice SLICE createRuntime`` (the CDI flow, wired by
``vgpuctl cdi generate``): mount the existing slice SLICE's views into the
container (its /proc/driver/nvidia, which runc refuses as a config.json
mount "inside /proc"); no request is read, nothing is created or deleted.

``vgpu-oci-hook --cgroup DIR|--pid-start TICKS --rebind PID CONTAINER`` (run
by vgpud after it mounted vgpufs afresh, e.g. after a restart; stdin
unused): re-bind the container's /proc/driver/nvidia, whose bind mount
still points at the previous, dead FUSE connection, to the new mount,
inside the running container's mount namespace (open_tree + move_mount:
the container's root no longer shows the host's paths).  PID is pinned
with a pidfd and must be the container's (in its cgroup DIR or below, or
started at TICKS) before and after the hook enters its namespace through
that pidfd; otherwise nothing is touched.  Its /dev nodes need nothing:
char nodes open through vgpu.ko, not through FUSE.  Already-current views
are left alone.

Mount targets inside a rootfs are never resolved as strings: each is
opened with openat2() inside the root, refusing symlinks, and mounted on by
fd (see Mounter).

Every call to vgpud is bounded by --timeout (default 5 s).  Exit status:
0 success or nothing to do, 1 failure (one line on stderr), 2 usage.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import stat
import sys
from time import monotonic, sleep

from vgpu import __version__
from vgpu.common import apiclient as ac
from vgpu.common.request import (ANNOTATION_PREFIX, ENV_PREFIX, POD_UID_KEYS, Scope,
                                 ScopeError, honoured_scope, is_pod_cgroup, vgpu_major)
from vgpu.common.values import (BadValue, parse_compute, parse_container, parse_duration,
                                parse_gpus, parse_pid, parse_policy, parse_priority,
                                parse_profile, parse_size, quote)

PROG = "vgpu-oci-hook"
DEFAULT_FUSE_MOUNT = "/run/vgpu/private/fs"   # vgpud keeps its parent 0700 (docs/vgpufs.md)
#: vgpu.ko's filesystem of a slice's nodes with NVIDIA's numbers (kmod/vgpu/devfs.c)
VGPU_DEVFS = "vgpudev"
VGPU_DEVFS_MAGIC = 0x76677064
NV_MAJOR = 195
MAX_STATE = 1 << 20
STAGES = ("createRuntime", "createContainer", "prestart", "startContainer",
          "poststart", "poststop")
TIMEOUT_MAX = 3600.0    # --timeout's bound, in seconds

USAGE = f"""\
usage: {PROG} [--socket PATH] [--timeout S] [--fuse-mount DIR] [--debug] [STAGE]
       {PROG} [--fuse-mount DIR] [--debug] --mount-slice SLICE createRuntime
       {PROG} [--fuse-mount DIR] [--debug] --cgroup DIR|--pid-start TICKS --rebind PID CONTAINER

OCI hook: attach a vgpu slice to a container that asks for one (annotations
vgpu.io/memory, vgpu.io/compute, vgpu.io/priority, vgpu.io/policy,
vgpu.io/gpus, vgpu.io/profile; the image's VGPU_* environment only for a
profile whose config allows it).  Reads the OCI state JSON on stdin.

A pod's vgpu.io/* ask for one slice for the pod (pod-<sandbox id>), shared
by its containers; vgpu.io/container-* for the container's own.

stages: createRuntime|prestart (create the slice, mount its nodes),
        poststop (delete the slice); createContainer is refused (it runs
        with the image's environment); others do nothing.  Without STAGE
        only a "stopped" state is understood (poststop).

options:
  --socket PATH     vgpud's API socket (default $VGPU_SOCKET, else /run/vgpu/vgpud.sock)
  --timeout S       bound on each call to vgpud, in seconds (default 5)
  --fuse-mount DIR  where vgpufs is mounted (default $VGPU_FUSE_MOUNT, else {DEFAULT_FUSE_MOUNT})
  --debug           say what the hook does on stderr
  --mount-slice SLICE
                    CDI flow: mount the views of the existing slice SLICE
                    into the container (createRuntime); nothing is created
  --rebind PID CONTAINER
                    re-bind a running container's /proc/driver/nvidia view to
                    the current vgpufs mount (vgpud does this after a restart)
  --cgroup DIR, --pid-start TICKS
                    with --rebind: what PID must be to count as the container's
                    (in the cgroup v2 directory DIR or below; started at TICKS)
  --help            this text
  --version         the version of vgpu

exit status: 0 success or nothing to do, 1 failure, 2 usage error
"""


class HookError(Exception):
    """One line for stderr; the start fails."""


class Opts:
    socket = None
    timeout = 5.0
    fuse_mount = None
    debug = False
    stage = None
    rebind: tuple[int, str] | None = None
    rebind_cgroup: str | None = None      # what --rebind checks the pid against
    rebind_start: int | None = None
    mount_slice: str | None = None


def _invalid(label: str, text: str, e: BadValue) -> ValueError:
    return ValueError(f"invalid {label} {quote(text)}: {e.reason}")


def parse_argv(argv: list[str]) -> Opts:
    """The command line -> Opts; ValueError("<what is wrong>") for a usage
    error (values are checked by vgpu.common.values' parsers)."""
    o = Opts()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        name, eq, value = a.partition("=")
        if name in ("--socket", "--timeout", "--fuse-mount", "--mount-slice", "--cgroup",
                    "--pid-start"):
            if not eq:
                if i >= len(argv):
                    raise ValueError(f"{name} needs a value")
                value = argv[i]
                i += 1
            if name == "--timeout":
                try:
                    o.timeout = parse_duration(value)
                    if o.timeout > TIMEOUT_MAX:
                        raise BadValue(value, "is too long (at most 1h)")
                except BadValue as e:
                    raise _invalid(name, value, e) from None
            elif name == "--socket":
                o.socket = value
            elif name == "--mount-slice":
                try:
                    o.mount_slice = parse_container(value)
                except BadValue as e:
                    raise _invalid(name, value, e) from None
            elif name == "--cgroup":
                if not os.path.isabs(value):
                    raise ValueError(f'invalid --cgroup {quote(value)}: an absolute directory')
                o.rebind_cgroup = value
            elif name == "--pid-start":
                if not (value.isascii() and value.isdigit()):
                    raise ValueError(f'invalid --pid-start {quote(value)}: clock ticks since boot')
                o.rebind_start = int(value)
            else:
                o.fuse_mount = value
        elif a == "--debug":
            o.debug = True
        elif a == "--rebind":
            if i + 2 > len(argv):
                raise ValueError("--rebind needs PID and CONTAINER")
            pid, cid = argv[i], argv[i + 1]
            i += 2
            try:
                n = parse_pid(pid)
            except BadValue as e:
                raise _invalid("--rebind pid", pid, e) from None
            try:
                o.rebind = (n, parse_container(cid))
            except BadValue as e:
                raise _invalid("--rebind container", cid, e) from None
        elif a in ("--help", "-h"):
            raise SystemExit(sys.stdout.write(USAGE) and 0)
        elif a == "--version":
            raise SystemExit(sys.stdout.write(f"{PROG} {__version__}\n") and 0)
        elif a.startswith("-"):
            raise ValueError(f"unknown option {quote(a)}")
        elif o.stage is None:
            o.stage = a
        else:
            raise ValueError(f"unexpected argument {quote(a)}")
    return o


# ------------------------------------------------------------ the request
def read_state(data: bytes) -> dict:
    if not data.strip():
        raise HookError("no container state on stdin (expected the OCI state JSON)")
    try:
        state = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"cannot parse the container state on stdin: {e}") from None
    if not isinstance(state, dict) or not isinstance(state.get("id"), str) or not state["id"]:
        raise HookError("the container state on stdin is not an OCI state (no \"id\")")
    if not isinstance(state.get("bundle"), str) or not state["bundle"]:
        raise HookError(f"container {state['id']}: the state on stdin names no bundle")
    return state


def read_config(state: dict) -> dict:
    path = os.path.join(state["bundle"], "config.json")
    try:
        with open(path, "rb") as f:
            config = json.loads(f.read())
    except FileNotFoundError:
        raise HookError(f"container {state['id']}: no bundle config at {path}") from None
    except OSError as e:
        raise HookError(f"container {state['id']}: cannot read {path}: "
                        f"{e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"container {state['id']}: {path} is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise HookError(f"container {state['id']}: {path} is not an OCI config")
    return config


def _memory(s: str) -> int:
    n = parse_size(s)
    if n == 0:
        raise BadValue(s, "is zero (give a memory quota above 0)")
    return n


#: each request key's parser (vgpu.common.values'; the API checks them again)
PARSERS = {"memory": _memory, "compute": parse_compute, "priority": parse_priority,
           "policy": parse_policy, "profile": parse_profile, "gpus": parse_gpus}


def validate(raw: dict, source: str, names: dict | None = None) -> dict:
    """The request as create's args; raises ValueError("<name> <quoted>:
    <reason>"), the reason vgpu.common.values' (values are taken with blanks
    around them stripped); ``names``: the annotation each key came from
    (Scope.names), else vgpu.io/<key> or VGPU_<KEY> by ``source``."""
    def name(k):
        if names and k in names:
            return names[k]
        return ANNOTATION_PREFIX + k if source == "annotation" else ENV_PREFIX + k.upper()

    out = {}
    for k, v in raw.items():
        if not isinstance(v, str):
            raise ValueError(f"{name(k)} {quote(v)}: not a string")
        try:
            out[k] = PARSERS[k](v.strip())
        except BadValue as e:
            raise ValueError(f"{name(k)} {quote(v)}: {e.reason}") from None
    return out


# ------------------------------------------------------------ the host side
def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Where the unified (cgroup v2) hierarchy is mounted in this mount
    namespace: /sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified (or
    wherever the host put it) on a hybrid one, None on a v1-only host."""
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if right.split()[:1] == ["cgroup2"] and len(fields) > 4 and fields[3] == "/":
                    return fields[4].replace("\\040", " ")
    except OSError:
        pass
    return None


def cgroup_of(pid: int, mountinfo: str = "/proc/self/mountinfo") -> tuple[str | None, str | None]:
    """(v2 cgroup directory, v1 devices cgroup directory) of ``pid``; either
    may be None.  The v2 directory is found through the unified hierarchy's
    mount, so hybrid hosts (v1 controllers beside a unified hierarchy) bind
    as pure v2 hosts do."""
    v2 = v1dev = None
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    root = None
    for line in lines:
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hid == "0" and ctrls == "":
            root = root or cgroup2_mount(mountinfo)
            if root:
                v2 = root.rstrip("/") + path if path != "/" else root
        elif "devices" in ctrls.split(","):
            v1dev = "/sys/fs/cgroup/devices" + (path if path != "/" else "")
    return v2, v1dev


def own_cgroup(cid: str, pid: int, v2: str | None) -> str:
    """The v2 cgroup directory a slice is bound to: the container's own.

    vgpu.ko lets a bound slice's nodes open only from that cgroup and below,
    and an unbound one from no container at all, so every container slice
    must be bound, and to a cgroup no other container shares.  At
    createRuntime the container's init is the only process of its cgroup;
    a cgroup holding anything else (the host's root, the runtime's own
    service cgroup on a hybrid host whose runtime does not create one per
    container) would open the slice to them, so the start fails closed."""
    if v2 is None:
        raise HookError(f"container {cid}: no cgroup v2 (unified) hierarchy holds it: vgpu "
                        f"binds each slice to its container's cgroup v2 and does not start "
                        f"slices on cgroup v1-only hosts")
    try:
        with open(os.path.join(v2, "cgroup.procs")) as f:
            procs = {int(x) for x in f.read().split()}
    except (OSError, ValueError) as e:
        raise HookError(f"container {cid}: cannot read {v2}/cgroup.procs: "
                        f"{getattr(e, 'strerror', None) or e}") from None
    if os.path.realpath(v2) == os.path.realpath(cgroup2_mount() or "/") or procs - {pid}:
        raise HookError(f"container {cid}: its cgroup v2 {v2} is not its own (it holds "
                        f"{len(procs - {pid})} other process(es)); a slice bound there would "
                        f"open to them, so none is made")
    return v2


def pod_cgroup(cid: str, own: str, uid: str | None) -> str:
    """The v2 cgroup directory a pod's slice is bound to: the parent of the
    container's own (``own``, checked by own_cgroup), which must be the
    pod's as the kubelet names it (is_pod_cgroup: ``pod<uid>`` or
    ``kubepods-...-pod<uid>.slice``, the uid the CRI annotations give).
    vgpu.ko opens a bound slice's nodes from that cgroup and everything
    below it: every container of the pod, and no other pod's.  A parent of
    any other name (a runtime that does not nest containers in their pod's
    cgroup, a uid that is not this pod's) is refused: bound there, the
    slice would open to whatever else lives under it."""
    parent = os.path.dirname(own.rstrip("/"))
    if not uid or not is_pod_cgroup(os.path.basename(parent), uid):
        raise HookError(f"container {cid}: its cgroup's parent {parent} is not the cgroup of "
                        f"its pod (uid {uid!r}: the kubelet names it pod<uid> or "
                        f"kubepods-...-pod<uid>.slice); a pod slice bound there could open "
                        f"to other pods' containers, so none is made")
    if os.path.realpath(parent) == os.path.realpath(cgroup2_mount() or "/"):
        raise HookError(f"container {cid}: its pod's cgroup {parent} is the root of the "
                        f"hierarchy; no pod slice is bound there")
    return parent


def rootfs_of(state: dict, config: dict) -> str:
    root = config.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise HookError(f"container {state['id']}: config.json has no root.path")
    return os.path.join(state["bundle"], path) if not os.path.isabs(path) else path


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
        if not ok:
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


def config_allows(config: dict, major: int) -> bool:
    linux = config.get("linux") if isinstance(config.get("linux"), dict) else {}
    res = linux.get("resources") if isinstance(linux.get("resources"), dict) else {}
    devs = res.get("devices") if isinstance(res.get("devices"), list) else []
    allowed = False
    for d in devs:              # the last matching rule wins, as in runc
        if not isinstance(d, dict):
            continue
        t = d.get("type", "a")
        if t not in ("a", "c"):
            continue
        if d.get("major") not in (None, -1, major):
            continue
        if d.get("minor") not in (None, -1):
            continue
        allowed = bool(d.get("allow"))
    return allowed


def allow_devices(cid: str, config: dict, v1dev: str | None, slice_: dict, debug) -> None:
    """Let the container's device cgroup open the slice's own nodes: read and
    write of its minors, never mknod ("m"), so that no other slice's minor
    can be made inside it."""
    dev = slice_.get("devices") if isinstance(slice_.get("devices"), dict) else {}
    major = dev.get("major") if isinstance(dev.get("major"), int) else vgpu_major()
    if major is None:
        debug("no vgpu major known: device cgroup left alone")
        return
    minors = [m for m in [dev.get("ctl_minor"), dev.get("uvm_minor"), *(dev.get("gpu_minors") or [])]
              if isinstance(m, int) and not isinstance(m, bool) and m >= 0]
    if v1dev and os.path.exists(os.path.join(v1dev, "devices.allow")):
        if not minors:
            raise HookError(f"container {cid}: vgpud reported no minors for its slice")
        for m in minors:
            # one rule per write: the v1 devices controller takes one a time
            with open(os.path.join(v1dev, "devices.allow"), "w") as f:
                f.write(f"c {major}:{m} rw")
        debug(f"devices.allow c {major}:{{{','.join(map(str, minors))}}} rw in {v1dev}")
    elif not config_allows(config, major):
        # cgroup v2: runc's own eBPF program decides; only config.json's
        # rules (vgpu-runtime adds ours) can allow the major.
        sys.stderr.write(f"{PROG}: container {cid}: warning: config.json does not allow "
                         f"character major {major} (vgpu) and the device cgroup is v2; the "
                         f"container cannot open its GPU nodes (start it through "
                         f"vgpu-runtime)\n")


# ------------------------------------------------------------ the owner
#: runtimes' state roots when their command line gives no --root (as root)
DEFAULT_ROOTS = {"runc": "/run/runc", "crun": "/run/crun", "youki": "/run/youki"}


def runtime_argv(pid: int | None = None) -> tuple[list[str], str]:
    """(command line, working directory) of the runtime that runs the hook:
    runc runs hooks as its children (vgpu-runtime execs runc, so it is runc
    by then), so the parent, unless that is a wrapper of the hook (a shell
    script that does not exec): then the nearest of 4 ancestors that is a
    runtime we know or has a --root.  Host root's processes: the image
    cannot steer them."""
    pid = os.getppid() if pid is None else pid
    first = None
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/stat", "rb") as f:
                line = f.read()
            ppid = int(line[line.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
        first = first or (argv, cwd)
        if argv and (os.path.basename(argv[0]) in DEFAULT_ROOTS or
                     any(a == "--root" or a.startswith("--root=") for a in argv)):
            return argv, cwd
        if ppid <= 1:
            break
        pid = ppid
    return first or ([], "/")


def owner_of(state: dict, config: dict, argv: list[str], cwd: str = "/") -> dict:
    """Who the container's slice belongs to (docs/api.md, "Owners"):
    container ids are unique only per runtime root, so the runtime's name
    and root (--root, else its default), the containerd namespace (from the
    bundle path .../io.containerd.runtime.v2.task/<namespace>/<id>, or
    containerd's runc root /run/containerd/runc/<namespace>) and the pod's
    uid (CRI annotations) where there is one.  vgpud gives the slice back
    to this owner only and refuses its deletion by anyone else."""
    runtime = os.path.basename(argv[0]) if argv else ""
    root = None
    for i in range(1, len(argv)):           # runc's and crun's global option
        a = argv[i]
        if a == "--":
            break
        if a == "--root" and i + 1 < len(argv):
            root = argv[i + 1]
            break
        if a.startswith("--root="):
            root = a[len("--root="):]
            break
    root = root or DEFAULT_ROOTS.get(runtime)
    owner = {"runtime": runtime or "unknown"}
    if root:
        owner["root"] = os.path.normpath(os.path.join(cwd, root))
    m = re.search(r"/io\.containerd\.runtime\.v[12]\.(?:task|linux)/([^/]+)/[^/]+$",
                  os.path.normpath(state["bundle"])) or \
        re.search(r"/containerd/runc/([^/]+)$", owner.get("root", ""))
    if m:
        owner["namespace"] = m.group(1)
    ann = state.get("annotations")
    if not isinstance(ann, dict) or not ann:
        ann = config.get("annotations")
    for k in POD_UID_KEYS:
        v = ann.get(k) if isinstance(ann, dict) else None
        if isinstance(v, str) and v:
            owner["pod"] = v
            break
    return owner


# ------------------------------------------------------------ stages
def attach(state: dict, config: dict, o: Opts, debug, sc: Scope) -> int:
    """createRuntime/prestart of a container with a request: its own slice
    (sc.kind "container", bound to its own cgroup) or its pod's (sc.kind
    "pod": made by the first container of the pod, handed back to the
    others as the same owner's, bound to the pod's cgroup); then the
    slice's views are mounted into the container."""
    cid, name = state["id"], sc.name
    try:
        args = validate(sc.raw, sc.source, sc.names)
    except ValueError as e:
        raise HookError(f"container {cid}: bad {e}") from None
    if sc.source == "env":
        args["from_image"] = True     # vgpud re-checks the profile's allow_image_env
    if sc.labels:
        args["labels"] = dict(sc.labels)
    pid = state.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise HookError(f"container {cid}: the state on stdin has no pid")
    rootfs = rootfs_of(state, config)
    v2, v1dev = cgroup_of(pid)
    args["cgroup"] = own_cgroup(cid, pid, v2)
    if sc.kind == "pod":
        args["cgroup"] = pod_cgroup(cid, args["cgroup"], sc.pod_uid)
    owner = owner_of(state, config, *runtime_argv())
    client = ac.ApiClient(o.socket, o.timeout)
    created = ok = False
    try:
        try:
            res = client.request("create", container=name, owner=owner, **args)
        except ac.ApiError as e:
            if e.code != "exists":
                raise
            # a slice of that name that is not this container's (or this
            # pod's): never share it
            raise HookError(f"container {cid}: vgpud: {e.message} (this container: "
                            f"{' '.join(f'{k}={v}' for k, v in owner.items())})") from None
        slice_ = res["slice"]
        if res.get("reused"):
            # a pod's slice made by another of its containers, or our own
            # from a second hook call: the same owner's
            debug(f"slice {name} for {cid} exists already (same owner)")
        else:
            created = True
            debug(f"created slice {slice_.get('slice_id')} ({name}) for {cid} ({args}, "
                  f"owner {owner})")
        fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
        src = os.path.join(fuse, name, "dev")
        # vgpufs shows dev/ empty until vgpu.ko has reported the slice's minors
        if not wait_for(os.path.join(src, "nvidiactl"), min(o.timeout, 2.0)):
            raise HookError(f"container {cid}: vgpufs shows no nodes for {name} at {src} "
                            f"(is vgpud's filesystem mounted at {fuse}?)")
        m = Mounter()
        allow_devices(cid, config, v1dev, slice_, debug)
        m.setns_mnt(pid)
        sid = slice_.get("slice_id")
        mount_views(cid, rootfs, fuse, m, debug, name,
                    sid if isinstance(sid, int) and not isinstance(sid, bool) else None)
        ok = True
        return 0
    except ac.ClientError as e:
        raise HookError(f"container {cid}: vgpud: {e}") from None
    except OSError as e:
        raise HookError(f"container {cid}: {e.strerror or e}"
                        f"{' (' + e.filename + ')' if getattr(e, 'filename', None) else ''}") \
            from None
    finally:
        # A pod's slice stays: a sibling container may have been handed it
        # since we made it (and opened its nodes); the kubelet retries this
        # container, the sandbox's poststop or vgpud's GC ends the slice.
        if created and not ok and sc.kind == "pod":
            debug(f"slice {name} stays for the pod after {cid}'s failure")
        elif created and not ok:
            try:
                client.request("delete", container=name, force=True, owner=owner)
            except ac.ClientError as e:
                sys.stderr.write(f"{PROG}: container {cid}: could not delete its slice "
                                 f"{name} after the failure: {e}\n")
        client.close()


def wait_for(path: str, limit: float) -> bool:
    end = monotonic() + limit
    while not os.path.exists(path):
        if monotonic() >= end:
            return False
        sleep(0.005)
    return True


def creating_pid(state: dict) -> int:
    """The container's init pid from a createRuntime/prestart state, whose
    status is "creating" (runc) or "created" (older runtimes); any other
    state, or a pid that cannot be a new container's init, is refused
    rather than acted on."""
    cid, status, pid = state["id"], state.get("status"), state.get("pid")
    if status not in ("creating", "created"):
        raise HookError(f"container {cid}: a state with status {status!r} is not one of "
                        f"createRuntime or prestart (\"creating\"); the hook does not act on it")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        raise HookError(f"container {cid}: the state on stdin has no container pid "
                        f"(pid {pid!r})")
    return pid


def mount_slice(state: dict, config: dict, o: Opts, debug) -> int:
    """The CDI flow (``--mount-slice SLICE`` at createRuntime): the operator
    made the slice and the CDI spec gives the container its /dev nodes; the
    proc view cannot be a config.json mount (runc refuses mounts inside
    /proc), so the hook bind-mounts it in the container's mount namespace,
    before pivot_root, as attach() does.  Nothing is created or deleted."""
    cid, name = state["id"], o.mount_slice
    pid = creating_pid(state)
    fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
    rootfs = rootfs_of(state, config)
    # vgpu.ko opens an unbound slice for host administrators only: bind the
    # operator's slice to this container's own cgroup for as long as it runs
    cg = own_cgroup(cid, pid, cgroup_of(pid)[0])
    client = ac.ApiClient(o.socket, o.timeout)
    try:
        res = client.request("attach", container=name, cgroup=cg)
        debug(f"slice {name} attached to {cg}")
    except ac.ClientError as e:
        raise HookError(f"container {cid}: slice {name}: vgpud: {e}") from None
    finally:
        client.close()
    try:
        m = Mounter()
        m.setns_mnt(pid)
        sid = (res.get("slice") or {}).get("slice_id") if isinstance(res, dict) else None
        mount_views(name, rootfs, fuse, m, debug,
                    slice_id=sid if isinstance(sid, int) and not isinstance(sid, bool) else None)
    except OSError as e:
        raise HookError(f"container {cid}: slice {name}: {e.strerror or e}") from None
    return 0


def release(state: dict, config: dict, o: Opts, debug, name: str | None = None) -> int:
    """poststop: delete the slice ``name`` (the container's own; a pod's
    sandbox names its pod's) as its owner."""
    cid = state["id"]
    name = name or cid
    owner = owner_of(state, config, *runtime_argv())
    try:
        with ac.ApiClient(o.socket, o.timeout) as client:
            client.request("delete", container=name, force=True, owner=owner)
        debug(f"deleted the slice {name} of {cid}")
    except ac.ApiError as e:
        if e.code == "not-owner":
            # a same-named container of another runtime root or namespace
            # (or the operator's slice): not ours to delete
            sys.stderr.write(f"{PROG}: container {cid}: {e.message}\n")
            return 0
        if e.code != "not-found":
            raise HookError(f"container {cid}: vgpud: {e}") from None
        debug(f"{cid} had no slice {name} (already deleted, or never made)")
    except ac.ClientError as e:
        raise HookError(f"container {cid}: vgpud: {e} (the daemon collects the slice "
                        f"once the container's cgroup is gone)") from None
    return 0


def not_the_container(procfd: int, cgroup: str | None, start: int | None,
                      v2root: str | None) -> str | None:
    """Why the process whose /proc directory ``procfd`` is cannot be the
    container vgpud recorded, or None: it must be in the cgroup v2
    directory ``cgroup`` or below it (``v2root``: where the unified
    hierarchy is mounted) and/or have started at ``start`` (clock ticks
    since boot, /proc/<pid>/stat's 22nd field)."""
    def read(name: str) -> bytes:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=procfd)
        try:
            return os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    try:
        if start is not None:
            data = read("stat")
            got = int(data[data.rindex(b")") + 2:].split()[19])
            if got != start:
                return f"it started at tick {got}, the container's process at {start}"
        if cgroup is not None:
            rel = next((ln[3:] for ln in read("cgroup").decode().splitlines()
                        if ln.startswith("0::")), None)
            if rel is None or v2root is None:
                return "it is in no cgroup v2"
            have = os.path.normpath(v2root.rstrip("/") + rel)
            want = os.path.normpath(cgroup)
            if want == os.path.normpath(v2root):
                return f"{want} is the root of the hierarchy, every process is under it"
            if have != want and not have.startswith(want.rstrip("/") + "/"):
                return f"its cgroup is {have}, not {want}"
    except (OSError, ValueError, IndexError) as e:
        return f"cannot read its /proc entry ({getattr(e, 'strerror', None) or e})"
    return None


#: statfs(2)'s f_type of procfs (linux/magic.h)
PROC_SUPER_MAGIC = 0x9FA0


def rebind(pid: int, cid: str, fuse: str, m: Mounter, debug, cgroup: str | None = None,
           start: int | None = None) -> int:
    """Point a running container's /proc/driver/nvidia at the current vgpufs
    mount (see the module doc).  Returns 0 also when nothing was needed.

    vgpud names the container by a pid it read a moment before, and a pid
    can be reused.  So the process is pinned with a pidfd first and checked
    against what vgpud recorded of the container (its cgroup ``cgroup``,
    or the start time ``start`` of a slice made by pid) before its mount
    namespace is entered through that pidfd, and again after; with nothing
    to check against, or on a mismatch, nothing is touched."""
    src = os.path.join(fuse, cid, "proc", "driver", "nvidia")
    try:
        want = os.stat(src)
    except OSError as e:
        raise HookError(f"container {cid}: no vgpufs view at {src} ({e.strerror})") from None
    if cgroup is None and start is None:
        raise HookError(f"container {cid}: --rebind needs --cgroup or --pid-start to tell "
                        f"whether pid {pid} is still the container's; nothing re-bound")
    v2root = cgroup2_mount() if cgroup is not None else None    # the host's, before setns
    target = "/proc/driver/nvidia"
    try:
        pidfd, procfd = m.open_process(pid)
    except OSError as e:
        raise HookError(f"container {cid}: pid {pid}: {e.strerror or e}; nothing re-bound") \
            from None
    fds = [pidfd, procfd]

    def check(when: str) -> None:
        why = not_the_container(procfd, cgroup, start, v2root)
        if why is None and not m.alive(pidfd):
            why = "it exited"
        if why:
            raise HookError(f"container {cid}: pid {pid} is not the container's{when}: "
                            f"{why}; nothing re-bound")

    def resolve_target(root: int) -> int | None:
        try:
            fd = m.resolve(root, target.lstrip("/"), os.O_DIRECTORY)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise HookError(f"container {cid}: {target} in its root is a symlink or lies "
                            f"under one; refused") from None
        fds.append(fd)
        return fd

    try:
        check("")
        root = os.open("root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=procfd)
        fds.append(root)
        tree = m.open_tree(src, rdonly=True)    # the host's path, while we still see it
        fds.append(tree)
        m.enter_mnt(pidfd)
        check(" (after entering its mount namespace)")
        t = resolve_target(root)
        try:
            if t is None or os.path.samestat(os.fstat(t), want):
                debug(f"{cid}: {target} " + ("is not there" if t is None else
                                             "already shows the current vgpufs mount"))
                return 0
            if m.fs_type(t) == PROC_SUPER_MAGIC:
                # procfs itself, no view mounted on it: a process of the
                # slice's cgroup that was never given one (a pod's sandbox)
                debug(f"{cid}: pid {pid} has no view mounted on {target}; left alone")
                return 0
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
        # the stale bind of the old FUSE connection (ENOTCONN) or another view
        try:
            m.umount(t, target)
            t = resolve_target(root)            # what lies under it now
        except OSError as e:
            debug(f"{cid}: umount {target}: {e.strerror or e} (mounting over it)")
        if t is None:
            raise HookError(f"container {cid} (pid {pid}): {target} went away while its "
                            f"stale view was unmounted; nothing re-bound")
        m.attach(tree, t, target)
        debug(f"{cid}: re-bound {target} in pid {pid}'s mount namespace")
        return 0
    except OSError as e:
        raise HookError(f"container {cid}: re-binding its view in pid {pid}: "
                        f"{e.strerror or e}") from None
    finally:
        for fd in fds:
            os.close(fd)


def run(o: Opts, data: bytes) -> int:
    def debug(msg):
        if o.debug:
            sys.stderr.write(f"{PROG}: {msg}\n")

    state = read_state(data)
    cid, stage = state["id"], o.stage
    if stage is None:
        # Only "stopped" names its stage.  "creating" comes with
        # createRuntime and prestart (runtime namespace: the pid is the
        # container's) and with createContainer (inside the container, whose
        # pid may read as 1): guessing would act on a pid we do not know.
        status = state.get("status")
        if status in ("creating", "created"):
            raise HookError(f"container {cid}: no STAGE argument and a {status!r} state, "
                            f"which createRuntime, prestart and createContainer all send; "
                            f"wire the hook as \"vgpu-oci-hook createRuntime\" (and "
                            f"\"vgpu-oci-hook poststop\")")
        stage = "poststop" if status == "stopped" else f"(status {status})"
    if stage == "createContainer":
        # runc runs it inside the container: working directory the rootfs,
        # before pivot_root, with the image's environment when the entry has
        # no "env".  No stage of ours belongs there.
        raise HookError(f"container {cid}: refusing the createContainer stage: runc runs it "
                        f"inside the container with the image's environment; wire "
                        f"vgpu-oci-hook at createRuntime (or prestart) and poststop")
    if stage not in ("createRuntime", "prestart", "poststop"):
        debug(f"stage {stage}: nothing to do for container {cid}")
        return 0
    config = read_config(state)
    if o.mount_slice is not None:
        if stage == "poststop":
            debug(f"container {cid}: slice {o.mount_slice} is the operator's; nothing to do")
            return 0
        return mount_slice(state, config, o, debug)
    try:
        sc = honoured_scope(state, config, o.socket, o.timeout, debug, PROG)
    except ScopeError as e:
        raise HookError(f"container {cid}: {e}") from None
    if sc.kind == "sandbox":
        # a pod's pause container never gets a slice; its poststop ends the
        # pod's (the pod's containers' poststops leave it alone)
        if stage == "poststop" and sc.raw:
            return release(state, config, o, debug, sc.name)
        debug(f"container {cid} is a pod sandbox: no slice")
        return 0
    if not sc.raw:
        debug(f"container {cid} asked for no slice")
        return 0
    if stage == "poststop":
        if sc.kind == "pod":
            debug(f"container {cid}: the pod's slice {sc.name} stays (its sandbox's poststop "
                  f"deletes it)")
            return 0
        return release(state, config, o, debug, sc.name)
    creating_pid(state)
    return attach(state, config, o, debug, sc)


def main(argv: list[str] | None = None) -> int:
    try:
        o = parse_argv(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.stderr.write(f"{PROG}: {e}\n{USAGE.splitlines()[0]}\n")
        return 2
    if o.rebind is not None:
        fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
        debug = (lambda msg: sys.stderr.write(f"{PROG}: {msg}\n")) if o.debug else (lambda m: None)
        try:
            return rebind(*o.rebind, fuse, Mounter(), debug, o.rebind_cgroup, o.rebind_start)
        except HookError as e:
            sys.stderr.write(f"{PROG}: {e}\n")
            return 1
    try:
        data = sys.stdin.buffer.read(MAX_STATE + 1) if sys.stdin is not None else b""
        if len(data) > MAX_STATE:
            raise HookError(f"the container state on stdin is larger than {MAX_STATE} bytes")
        return run(o, data)
    except HookError as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
