"""vgpufs: the per-container device and /proc view, a FUSE file system
served by vgpud's trio loop (pyfuse3).

Mounted at ``paths.fuse_mount`` (default /run/vgpu/private/fs) with
``fsname=vgpufs,subtype=vgpufs,dev,allow_other``, in a directory that is
root's and 0700 (``private_parent``: created so, or the mount is refused).
For each slice:

    <container>/                               dir 0500 (host only)
    <container>/dev/                           dir 0500 (host only)
    <container>/dev/nvidiactl                  c major:base+VGPU_MINOR_CTL   0666
    <container>/dev/nvidia-uvm                 c major:base+VGPU_MINOR_UVM   0666
    <container>/dev/nvidia<i>                  c major:base+VGPU_MINOR_GPU0+i
    <container>/proc/driver/nvidia/version                 0444 (dirs 0555)
    <container>/proc/driver/nvidia/params                  (ModifyDeviceFiles: 0)
    <container>/proc/driver/nvidia/gpus/<pci bus id>/information

Who gets in.  Containers get bind mounts of their nodes and their view
(the hook, as root, walks the private directory to make them); their
processes run as any uid, hence allow_other, 0666 nodes (as the real
/dev/nvidia*) and a world-readable view (as the real /proc/driver/nvidia).
Host users cannot walk through the 0700 parent; behind it, the host-only
directories (the root's list of tenants, a tenant's directory, dev/, proc/,
proc/driver/) answer lookups and opendir to the mounting uid alone
(``VgpuFs._allowed``, on the FUSE request's uid).

What a caller can cost (the FUSE loop shares vgpud's trio loop with the
admin API).  pyfuse3 reads requests one at a time (a lock around
wait_readable), so FUSE gets about one request per turn of the loop; every
handler is synchronous (never awaits) and a non-root caller's request
touches one slice's records (the root listing, O(slices), is host-only), so
a flood adds one bounded request per loop turn to the API's latency.  Open
view files hold their text until closed: at most ``MAX_OPEN_PER_SLICE`` per
slice (EMFILE past it).  Inodes exist only for valid paths.  A slow caller
holds nothing: replies never wait on it.

The dev/ nodes appear once the kernel has reported the slice's major and
base minor.  Everything is computed from the slice manager's in-memory
records on every request (no kernel call, no I/O in a handler), so entries
appear and vanish with slices and a file opened after a ``set-quota`` shows
the new limit.  Directory entries and file attributes are not cached
(timeouts 0); a file's text is fixed when it is opened (like a seq_file).
The char nodes' attributes are cached for a day: their rdev is tied to the
inode (a slice recreated with other minors gets a new inode), and a cached
attribute lets stat() of a bind-mounted node keep working if vgpud dies.

No ``default_permissions``: the kernel then asks vgpufs nothing when a char
node is opened (the open goes straight to vgpu.ko by rdev, and vgpu.ko
checks the caller's cgroup), which keeps bind-mounted nodes working across
a daemon restart.  Regular files refuse opens for writing themselves, and
the mode bits above are what the file system reports; the walls are the
0700 parent and ``_allowed``.

Restarts (LXCFS's lesson).  A container keeps bind mounts of the mount
vgpud had when the container started.  When vgpud dies its FUSE connection
is aborted: the mount point and every bind mount of it answer ENOTCONN
("Transport endpoint is not connected") for anything that needs the daemon.
On start vgpud lazily detaches (umount2 MNT_DETACH) any FUSE mount left at
the mount point and mounts afresh.  What that means for running containers:

- already-open device fds keep working (they belong to vgpu.ko);
- new opens of a bind-mounted char node keep working (no FUSE request is
  made for an open; stat() answers from the cached attributes for a day);
- the bind-mounted /proc/driver/nvidia files go stale (ENOTCONN) and the
  new mount does not repair them.  The OCI hook (or the operator) has to
  re-bind them for each running container after a daemon restart:
  ``nsenter --mount=/proc/<pid>/ns/mnt -- sh -c 'umount -l
  /proc/driver/nvidia; mount --bind /run/vgpu/private/fs/<container>/proc/driver/nvidia
  /proc/driver/nvidia'`` (likewise for the dev nodes if a fresh stat() is
  wanted).  Containers started after the restart are not affected.
  (vgpud re-binds them itself now: main.Daemon._rebind_views.)

The connection can also end while vgpud runs (aborted through fusectl,
unmounted from outside): ``run`` then returns, with ``ended`` saying why
(``_watch_mount`` catches an unmount that bind mounts keep alive), and
vgpud's fs service mounts afresh (main.Daemon._fs_service).

What it may call: vgpu.daemon.slices' manager read-only (records, kslices, gpus),
pyfuse3, trio.  Never the kernel, never blocking I/O in a handler.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import platform
import re
import stat
import subprocess
import time
from dataclasses import dataclass, field

import trio

try:                    # vgpufs needs it; the rest of vgpud runs without (VgpuFs.run refuses)
    import pyfuse3
except ImportError:     # pragma: no cover
    pyfuse3 = None

from vgpu.abi import uapi
from vgpu.common.request import FUSE_MOUNT
from vgpu.common.values import BadValue, parse_container

log = logging.getLogger("vgpud.fs")

# allow_other: the containers' processes run as any uid (without it FUSE
# answers EACCES to every uid but the mounter's, even through bind mounts).
# What keeps host users out instead is the 0700 directory above the mount
# point (private_parent) and, behind it, the owner-only host directories
# (VgpuFs._allowed).
MOUNT_OPTIONS = ("fsname=vgpufs", "subtype=vgpufs", "dev", "allow_other")
DEV_ATTR_TIMEOUT = 86400.0
#: seconds between checks that the mount point still has vgpufs mounted
MOUNT_CHECK = 2.0
MNT_DETACH = 2
#: files of one slice's view open at once (each holds its text until
#: closed): a container cannot grow vgpud's memory without bound
MAX_OPEN_PER_SLICE = 1024
#: the default mount point ([paths] fuse_mount): its parent is vgpud's, 0700
DEFAULT_MOUNT = FUSE_MOUNT

MINOR_CTL = getattr(uapi, "VGPU_MINOR_CTL", 0)
MINOR_UVM = getattr(uapi, "VGPU_MINOR_UVM", 1)
MINOR_GPU0 = getattr(uapi, "VGPU_MINOR_GPU0", 2)


# ------------------------------------------------------------------ model
@dataclass
class FsGpu:
    index: int                 # the container's index: nvidia<index>, Device Minor
    name: str
    uuid: str
    pci_bus_id: str            # 0000:01:00.0
    memory_limit: int          # bytes


@dataclass
class FsSlice:
    container: str
    slice_id: int
    major: int | None = None
    base_minor: int | None = None
    gpus: list[FsGpu] = field(default_factory=list)


class ManagerSource:
    """The FS's view of a vgpu.daemon.slices.SliceManager: pure reads of its
    in-memory records, the last kernel dump and the last inventory poll."""

    def __init__(self, mgr):
        self.mgr = mgr

    def driver_version(self) -> str:
        inv = getattr(self.mgr, "inventory", None)
        return getattr(inv, "driver_version", "") or ""

    def driver_params(self) -> str:
        """The host's /proc/driver/nvidia/params as the inventory last read
        it ("" when there is none, e.g. on nvsim)."""
        inv = getattr(self.mgr, "inventory", None)
        return getattr(inv, "driver_params", "") or ""

    def slices(self) -> dict[str, FsSlice]:
        """Every slice (the root directory's listing)."""
        hw = {g.index: g for g in self.mgr.gpus}
        out = {}
        for c, rec in list(self.mgr.records.items()):
            s = self._view(c, rec, hw)
            if s is not None:
                out[c] = s
        return out

    def slice(self, container: str) -> FsSlice | None:
        """One slice: what every lookup, getattr and open below a container's
        directory needs (the cost does not grow with the number of slices)."""
        rec = self.mgr.records.get(container)
        if rec is None:
            return None
        return self._view(container, rec, {g.index: g for g in self.mgr.gpus})

    def _view(self, c: str, rec, hw: dict) -> FsSlice | None:
        mgr = self.mgr
        ks = mgr.kslices.get(rec.slice_id)
        try:
            v = mgr.slice_view(rec, ks)
        except Exception as e:               # e.g. no memory quota resolvable
            log.debug("vgpufs: slice of %r: %s", c, e)
            return None
        s = FsSlice(c, v["slice_id"])
        if v.get("devices"):
            s.major = v["devices"]["major"]
            s.base_minor = v["devices"]["ctl_minor"]
        for g in v["gpus"]:
            h = hw.get(g.get("gpu"))
            if h is None:
                continue
            s.gpus.append(FsGpu(g["index"], h.name, g.get("uuid") or h.uuid,
                                h.pci_bus_id, int(g["memory_limit"] or 0)))
        return s


# ------------------------------------------------------------------ text
def _arch() -> str:
    m = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def version_text(driver_version: str, s: FsSlice) -> bytes:
    ver = driver_version or "unknown"
    return (f"NVRM version: NVIDIA UNIX {_arch()} Kernel Module  {ver}  "
            f"vgpu slice {s.slice_id} (container {s.container})\n"
            f"GCC version:  unknown (vgpufs view)\n").encode()


def information_text(g: FsGpu) -> bytes:
    mib = g.memory_limit // (1 << 20)
    return (f"Model: \t\t {g.name}\n"
            f"IRQ:   \t\t 0\n"
            f"GPU UUID: \t {g.uuid}\n"
            f"Video BIOS: \t ??.??.??.??.??\n"
            f"Bus Type: \t PCIe\n"
            f"Bus Location: \t {g.pci_bus_id.lower()}\n"
            f"Device Minor: \t {g.index}\n"
            f"Video Memory: \t {mib} MB\n"
            f"GPU Firmware: \t N/A\n"
            f"GPU Excluded:\t No\n").encode()


#: The numeric keys of /proc/driver/nvidia/params that say what may be done
#: to the device files, with the values a slice's view gives them.  The
#: driver prints its nv_parms[] table as "Name: %u" lines, then its string
#: keys as 'Name: "..."' (535.261.03 kernel-open/nvidia/nv-procfs.c,
#: nv_procfs_read_params; the keys and defaults: nv-reg.h, nv_parms[]).
#: NVIDIA's user space (libcuda, NVML: nvidia-modprobe-utils' mknod_helper,
#: compiled in) reads these before it looks at /dev/nvidiactl and
#: /dev/nvidia<N>; with ModifyDeviceFiles 1 (the default) a node whose rdev
#: is not (195, minor) is removed and re-made, or, where that fails (a
#: container), refused: cuInit answers CUDA_ERROR_NO_DEVICE and NVML "GPU
#: access blocked by the operating system".  A slice's nodes have vgpu.ko's
#: major, so the view says ModifyDeviceFiles 0: "nothing to do", the node
#: is used as it is (NVIDIA's container toolkit, libnvidia-container, gives
#: its containers a params file with ModifyDeviceFiles 0 for the same
#: reason).  UID, GID and mode say what vgpufs reports for the nodes
#: (root:root 0666, VgpuFs._attr); the driver prints the mode in decimal.
PARAMS_DEVICE_FILES = (("ModifyDeviceFiles", 0), ("DeviceFileUID", 0),
                       ("DeviceFileGID", 0), ("DeviceFileMode", 0o666))
_PARAM_NUMERIC = re.compile(r"^([^:]{1,31}): ([0-9]+)$")


def params_text(host: str = "") -> bytes:
    """A slice's /proc/driver/nvidia/params: the host's (``host``, the
    driver's own file as read at inventory time) with the device-file keys
    of PARAMS_DEVICE_FILES set, or those keys alone, in the driver's order
    and format, where the host has no such file (nvsim).  nvidia-modprobe-
    utils reads the file with fscanf("%31[^:]: %u\\n") and stops at the
    first line that is not a number, so a key the host lacks goes before
    its first string key, where the driver prints the numeric ones."""
    vals = dict(PARAMS_DEVICE_FILES)
    missing = dict(vals)
    lines = host.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):               # the numeric block (nv_parms[])
        m = _PARAM_NUMERIC.match(lines[i])
        if not m:
            break
        if m[1] in vals:
            out.append(f"{m[1]}: {vals[m[1]]}")
            missing.pop(m[1], None)
        else:
            out.append(lines[i])
        i += 1
    out += [f"{k}: {v}" for k, v in missing.items()]
    out += lines[i:]                    # the string keys, as the host has them
    return ("\n".join(out) + "\n").encode()


def _valid_name(n: str) -> bool:
    """Whether ``n`` can be a container's (a slice's) name: vgpu.common.values.parse_container."""
    try:
        parse_container(n)
    except BadValue:
        return False
    return True


def host_only(path: tuple) -> bool:
    """The directories no container is given: the root (every tenant's
    name), a tenant's directory and its dev/, proc/ and proc/driver/.
    Containers get bind mounts of the nodes and of proc/driver/nvidia only."""
    return len(path) <= 2 or path[1:] == ("proc", "driver")


# ------------------------------------------------------------------ tree
# A node: ("dir", [names]) | ("file", bytes) | ("chr", rdev)
NV = ("proc", "driver", "nvidia")


def resolve(path: tuple, slices: dict, version: str, params: str = ""):
    if not path:
        return ("dir", sorted(c for c in slices if _valid_name(c)))
    s = slices.get(path[0]) if _valid_name(path[0]) else None
    if s is None:
        return None
    rest = path[1:]
    if not rest:
        return ("dir", ["dev", "proc"])
    if rest[0] == "dev":
        nodes = {}
        if s.major is not None and s.base_minor is not None:
            nodes["nvidiactl"] = os.makedev(s.major, s.base_minor + MINOR_CTL)
            nodes["nvidia-uvm"] = os.makedev(s.major, s.base_minor + MINOR_UVM)
            for g in s.gpus:
                nodes[f"nvidia{g.index}"] = os.makedev(s.major, s.base_minor + MINOR_GPU0 + g.index)
        if len(rest) == 1:
            return ("dir", sorted(nodes))
        if len(rest) == 2 and rest[1] in nodes:
            return ("chr", nodes[rest[1]])
        return None
    if rest[0] != "proc":
        return None
    for i, part in enumerate(NV):
        if len(rest) == i + 1:
            return ("dir", [NV[i + 1]] if i + 1 < len(NV) else ["gpus", "params", "version"])
        if rest[i] != part:
            return None
    rest = rest[len(NV):]
    if rest == ("version",):
        return ("file", version_text(version, s))
    if rest == ("params",):
        return ("file", params_text(params))
    if rest[0] != "gpus":
        return None
    byp = {g.pci_bus_id.lower(): g for g in s.gpus}
    if len(rest) == 1:
        return ("dir", sorted(byp))
    g = byp.get(rest[1])
    if g is None:
        return None
    if len(rest) == 2:
        return ("dir", ["information"])
    if rest[2:] == ("information",):
        return ("file", information_text(g))
    return None


# ------------------------------------------------------------------ mounts
def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape") if "\\" in s else s


def fuse_mounts_at(mountpoint: str, mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """The FUSE file system types mounted exactly at mountpoint."""
    out = []
    try:
        with open(mountinfo) as f:
            for line in f:
                a, _, b = line.partition(" - ")
                fields = a.split()
                if len(fields) < 5 or _unescape(fields[4]) != mountpoint:
                    continue
                fstype = b.split()[0] if b.split() else ""
                if fstype == "fuse" or fstype.startswith("fuse."):
                    out.append(fstype)
    except OSError:
        pass
    return out


def _umount_detach(path: str) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.umount2(path.encode(), MNT_DETACH) == 0:
        return
    e = ctypes.get_errno()
    try:
        r = subprocess.run(["fusermount3", "-uz", path], capture_output=True, timeout=10)
        if r.returncode == 0:
            return
    except (OSError, subprocess.TimeoutExpired):
        pass
    raise OSError(e, f"umount2({path}, MNT_DETACH): {os.strerror(e)}")


def canonical(mountpoint: str) -> str:
    """Absolute, symlinks resolved in the parent (never stat the mount
    point itself: it may be a dead FUSE mount)."""
    mp = os.path.abspath(mountpoint)
    return os.path.join(os.path.realpath(os.path.dirname(mp)), os.path.basename(mp))


def clear_stale_mounts(mountpoint: str) -> int:
    """Lazily detach every FUSE mount stacked at mountpoint (a killed
    vgpud's, answering ENOTCONN); returns how many.  Reads only
    /proc/self/mountinfo, so a hung mount cannot block it."""
    mp = canonical(mountpoint)
    n = 0
    for _ in range(32):
        types = fuse_mounts_at(mp)
        if not types:
            break
        log.warning("vgpufs: detaching a stale %s mount at %s", types[-1], mp)
        _umount_detach(mp)
        n += 1
    return n


def private_parent(mountpoint: str) -> str:
    """Make sure the directory above the mount point keeps host users out:
    root's (the daemon's uid), mode 0700, created so when missing.  vgpufs is
    mounted allow_other and without default_permissions (see MOUNT_OPTIONS),
    so this directory is what stops a host user from listing every tenant,
    reading their views or opening their nodes; containers never pass through
    it (they get bind mounts of their own nodes and view).  An existing
    directory open to others is refused rather than changed: it may hold
    things that need its mode (e.g. the API socket's /run/vgpu)."""
    parent = os.path.dirname(canonical(mountpoint))
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
        os.chmod(parent, 0o700)              # makedirs' mode is under the umask
    st = os.stat(parent)
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(
            errno.EPERM, f"{parent}, the directory above the vgpufs mount point, is mode "
            f"{stat.S_IMODE(st.st_mode):04o} owned by uid {st.st_uid}: host users could reach "
            f"every container's nodes and views; mount vgpufs in a directory of its own, "
            f"owned by uid {os.geteuid()} with mode 0700 (the default [paths] fuse_mount "
            f"{DEFAULT_MOUNT} has one)")
    return parent


# ------------------------------------------------------------------ FS
def _make_ops_class():
    class Ops(pyfuse3.Operations):
        def __init__(self, fs):
            super().__init__()
            self.fs = fs

        # every handler: no blocking, unexpected errors become EIO
        def _guard(self, fn, *a):
            try:
                return fn(*a)
            except pyfuse3.FUSEError:
                raise
            except Exception:
                log.exception("vgpufs handler")
                raise pyfuse3.FUSEError(errno.EIO) from None

        async def lookup(self, parent_inode, name, ctx=None):
            return self._guard(self.fs.lookup, parent_inode, name, ctx)

        async def getattr(self, inode, ctx=None):
            return self._guard(self.fs.getattr, inode)

        async def forget(self, inode_list):
            self._guard(self.fs.forget, inode_list)

        async def opendir(self, inode, ctx):
            return self._guard(self.fs.opendir, inode, ctx)

        async def readdir(self, fh, start_id, token):
            self._guard(self.fs.readdir, fh, start_id, token)

        async def releasedir(self, fh):
            pass

        async def open(self, inode, flags, ctx):
            return self._guard(self.fs.open, inode, flags, ctx)

        async def read(self, fh, off, size):
            return self._guard(self.fs.read, fh, off, size)

        async def release(self, fh):
            self.fs.release(fh)

        async def statfs(self, ctx):
            s = pyfuse3.StatvfsData()
            s.f_bsize = s.f_frsize = 4096
            s.f_namemax = 255
            return s

    return Ops


class VgpuFs:
    """The file system.  ``source`` has ``slices() -> {container: FsSlice}``,
    ``driver_version() -> str`` and optionally ``driver_params() -> str``
    (the host's /proc/driver/nvidia/params); all are called on every
    request and must not block."""

    def __init__(self, source, mountpoint: str, options=MOUNT_OPTIONS):
        self.source = source
        self.mountpoint = canonical(str(mountpoint))
        self.options = set(options)
        self.t0 = time.time()
        self.ino_of: dict[tuple, int] = {}
        self.key_of: dict[int, tuple] = {}
        self.nlookup: dict[int, int] = {}
        self.files: dict[int, tuple[str, bytes]] = {}    # fh -> (container, text)
        self.open_files: dict[str, int] = {}             # container -> files open
        #: who may use the host-only directories (host_only): the mounter, root
        self.owner_uid = os.geteuid()
        self._next_ino = 2
        self._next_fh = 1
        self.mounted = trio.Event()
        #: why run() returned: None while it serves (or was cancelled)
        self.ended: str | None = None

    # ----------------------------------------------------------- inodes
    # An inode's key is its path plus, for char nodes, the rdev: a slice
    # recreated with other minors gets another inode (cached attrs stay right).
    def _key(self, path, node):
        return path + (("\0rdev", node[1]),) if node[0] == "chr" else path

    def _path(self, inode) -> tuple:
        if inode == pyfuse3.ROOT_INODE:
            return ()
        key = self.key_of.get(inode)
        if key is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return tuple(k for k in key if not isinstance(k, tuple))

    def _ino(self, key) -> int:
        ino = self.ino_of.get(key)
        if ino is None:
            ino = self._next_ino
            self._next_ino += 1
            self.ino_of[key] = ino
            self.key_of[ino] = key
        return ino

    def _node(self, path):
        src = self.source
        if path and hasattr(src, "slice"):
            one = src.slice(path[0]) if _valid_name(path[0]) else None
            slices = {} if one is None else {path[0]: one}
        else:
            slices = src.slices()
        params = src.driver_params() if hasattr(src, "driver_params") else ""
        return resolve(path, slices, src.driver_version(), params)

    def _allowed(self, ctx, *paths) -> None:
        """Host-only directories (host_only) answer their owner alone: a
        lookup in or of one, or opening one, is EACCES for any other uid.
        Behind the 0700 directory above the mount point this is a second
        wall, and it bounds what a caller can make vgpufs do: every request
        it may make names one slice (no listing of every tenant)."""
        if ctx is None or ctx.uid == self.owner_uid:
            return
        if any(host_only(p) for p in paths):
            raise pyfuse3.FUSEError(errno.EACCES)

    def _attr(self, ino, node, path):
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.generation = 0
        a.entry_timeout = 0
        a.attr_timeout = 0
        kind, val = node
        if kind == "dir":
            # the view (proc/driver/nvidia and below) is everyone's inside
            # the container, as the real /proc/driver/nvidia; the directories
            # above it are the host's (modes tell; _allowed enforces)
            a.st_mode = stat.S_IFDIR | (0o500 if host_only(path) else 0o555)
            a.st_nlink = 2
        elif kind == "file":
            a.st_mode = stat.S_IFREG | 0o444
            a.st_nlink = 1
            a.st_size = len(val)
        else:
            # as the real /dev/nvidia*: any uid inside the container opens
            # them (vgpu.ko then checks the opener's cgroup and its right to
            # the real node); on the host only root reaches them (0700 parent)
            a.st_mode = stat.S_IFCHR | 0o666
            a.st_nlink = 1
            a.st_rdev = val
            a.attr_timeout = DEV_ATTR_TIMEOUT
        a.st_uid = a.st_gid = 0
        a.st_blksize = 4096
        a.st_blocks = (a.st_size + 511) // 512
        ns = int(self.t0 * 1e9)
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = ns
        return a

    # ----------------------------------------------------------- handlers
    def lookup(self, parent, name: bytes, ctx=None):
        path = self._path(parent)
        n = os.fsdecode(name)
        if n == ".":
            new = path
        elif n == "..":
            new = path[:-1]
        else:
            new = path + (n,)
        self._allowed(ctx, path, new)
        node = self._node(new)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        ino = pyfuse3.ROOT_INODE if not new else self._ino(self._key(new, node))
        self.nlookup[ino] = self.nlookup.get(ino, 0) + 1
        return self._attr(ino, node, new)

    def getattr(self, inode):
        path = self._path(inode)
        node = self._node(path)
        if node is None or (path and self._key(path, node) != self.key_of.get(inode)):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(inode, node, path)

    def forget(self, inode_list):
        for ino, n in inode_list:
            left = self.nlookup.get(ino, 0) - n
            if left > 0:
                self.nlookup[ino] = left
                continue
            self.nlookup.pop(ino, None)
            key = self.key_of.pop(ino, None)
            if key is not None and self.ino_of.get(key) == ino:
                del self.ino_of[key]

    def opendir(self, inode, ctx=None):
        path = self._path(inode)
        self._allowed(ctx, path)
        node = self._node(path)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if node[0] != "dir":
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    def readdir(self, fh, start_id, token):
        path = self._path(fh)
        node = self._node(path)
        if node is None or node[0] != "dir":
            return
        for i, name in enumerate(node[1]):
            if i < start_id:
                continue
            child = path + (name,)
            cn = self._node(child)
            if cn is None:
                continue
            ino = self._ino(self._key(child, cn))
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._attr(ino, cn, child),
                                         i + 1):
                break
            self.nlookup[ino] = self.nlookup.get(ino, 0) + 1

    def open(self, inode, flags, ctx=None):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise pyfuse3.FUSEError(errno.EACCES)
        path = self._path(inode)
        node = self._node(path)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if node[0] != "file":
            raise pyfuse3.FUSEError(errno.EISDIR if node[0] == "dir" else errno.ENXIO)
        c = path[0]                 # every file is in one slice's view
        if self.open_files.get(c, 0) >= MAX_OPEN_PER_SLICE:
            raise pyfuse3.FUSEError(errno.EMFILE)
        self.open_files[c] = self.open_files.get(c, 0) + 1
        fh = self._next_fh
        self._next_fh += 1
        self.files[fh] = (c, node[1])
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)

    def read(self, fh, off, size):
        f = self.files.get(fh)
        if f is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        return f[1][off:off + size]

    def release(self, fh):
        f = self.files.pop(fh, None)
        if f is not None:
            left = self.open_files.get(f[0], 0) - 1
            if left > 0:
                self.open_files[f[0]] = left
            else:
                self.open_files.pop(f[0], None)

    # ----------------------------------------------------------- service
    async def _watch_mount(self, scope) -> None:
        """End the service (cancel ``scope``) when the mount point no longer
        has a vgpufs mount.  Unmounted from outside while containers hold
        bind mounts of it, the FUSE connection lives on (their bind mounts
        keep the superblock), so the loop alone would not notice; new
        containers would find an empty directory.  Reads only mountinfo."""
        while True:
            await trio.sleep(MOUNT_CHECK)
            if not fuse_mounts_at(self.mountpoint):
                self.ended = f"{self.mountpoint} is no longer mounted (unmounted from outside)"
                scope.cancel()
                return

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        """Mount, serve until cancelled, unmount.  Raises (before started)
        OSError/RuntimeError when it cannot mount."""
        if pyfuse3 is None:
            raise RuntimeError("pyfuse3 is not installed")
        if not os.path.exists("/dev/fuse"):
            raise OSError(errno.ENODEV, "/dev/fuse is missing (modprobe fuse)")
        clear_stale_mounts(self.mountpoint)       # before any stat of it
        private_parent(self.mountpoint)
        os.makedirs(self.mountpoint, mode=0o700, exist_ok=True)
        ops = _make_ops_class()(self)
        pyfuse3.init(ops, self.mountpoint, self.options)
        log.info("vgpufs mounted at %s", self.mountpoint)
        self.mounted.set()
        task_status.started()
        try:
            # Returns (rather than raise or wait forever) when the FUSE
            # connection ends under a running daemon, with ``ended`` saying
            # how; vgpud's fs service then mounts afresh (main.Daemon._fs_service)
            async with trio.open_nursery() as n:
                n.start_soon(self._watch_mount, n.cancel_scope)
                try:
                    await pyfuse3.main()
                    self.ended = "its FUSE connection ended (aborted, or unmounted from outside)"
                except Exception as e:          # the loop failed: not a reason to die
                    log.exception("vgpufs: the FUSE loop failed")
                    self.ended = f"its FUSE loop failed: {type(e).__name__}: {e}"
                n.cancel_scope.cancel()
        finally:
            try:
                pyfuse3.close(unmount=True)
            except Exception as e:
                log.warning("vgpufs: unmount: %s", e)
            log.info("vgpufs unmounted from %s", self.mountpoint)
