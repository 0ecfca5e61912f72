"""Hiding the RDMA adapters a slice was not given from its container's
/sys (docs/rdma.md, "What a container sees of the adapters").

A container's /sys is the host's device tree: sysfs is not namespaced for
RDMA devices (the rdma subsystem's "shared" netns mode, the default, shows
every adapter in every network namespace; "exclusive" mode moves a whole
adapter into one namespace, which slices sharing an adapter cannot use).
So `ibv_devices` in a container lists every adapter of the node and its
attributes (GUIDs, ports, firmware) are readable, even though only the
slice's adapter has a node and a device rule.  The hook, in the container's
mount namespace before pivot_root (createRuntime), covers:

- each other adapter's directories (its IB device, its uverbs, umad and
  issm class devices; their parent ``infiniband*`` directory under a PCI
  function where nothing of the slice's adapter lies below it) with an
  empty read-only tmpfs;
- each ``/sys/class/infiniband*`` directory with a read-only tmpfs holding
  only the slice's adapter's entries (the host's relative symlinks, which
  resolve in the container's /sys as on the host) and the class's own
  attribute files (``abi_version``: copied, they are constant).

The plan is read from the host's /sys before entering the container's
mount namespace (plan()); an entry whose adapter cannot be told (no
readable ``ibdev``) is hidden.  What stays visible: an adapter's network
interface where the container shares the host's network namespace, what
sysfs shows of the PCI function itself (/sys/bus/pci/devices/<bdf>:
vendor, device, its ``net/`` directory), and the names (not the contents)
of other soft adapters (rxe, siw) under /sys/devices/virtual/infiniband*,
a directory all of them share.  Every target is resolved inside
the rootfs by fd without following a symlink (Mounter.resolve); on any
failure what this call mounted is unmounted again."""
from __future__ import annotations

import errno
import os

from vgpu.cli.hook.cmdline import HookError
from vgpu.cli.hook.mounts import Mounter, release_mounts

#: the class directories of RDMA adapters (drivers/infiniband/core: the IB
#: device, uverbs, umad/issm, the old ucm)
CLASSES = ("infiniband", "infiniband_verbs", "infiniband_mad", "infiniband_cm")
#: statfs(2)'s f_type of sysfs (linux/magic.h)
SYSFS_MAGIC = 0x62656572
#: the most bytes of a class attribute file copied (abi_version is "6\n")
ATTR_MAX = 4096


class Plan:
    """What hiding the other adapters takes: ``hide``, /sys-relative
    directories covered with an empty tmpfs; ``classes``, per class
    directory (/sys-relative) the symlinks (name, target) and files
    (name, bytes) its tmpfs holds."""

    def __init__(self):
        self.hide: list[str] = []
        self.classes: dict[str, tuple[list[tuple[str, str]], list[tuple[str, bytes]]]] = {}

    def __bool__(self) -> bool:
        return bool(self.hide or self.classes)


def _read(path: str, limit: int = 256) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _adapter_of(cls: str, name: str, target: str) -> str | None:
    """The adapter a class entry belongs to: its name for infiniband, else
    its ``ibdev`` attribute; None where it cannot be read."""
    if cls == "infiniband":
        return name
    raw = _read(os.path.join(target, "ibdev"))
    return raw.decode(errors="replace").strip() if raw else None


def plan(keep: str, sysfs: str = "/sys") -> Plan:
    """Read the host's adapters under ``sysfs``: everything of an adapter
    other than ``keep`` goes into the plan's hidden directories, and the
    class directories keep only ``keep``'s entries."""
    p = Plan()
    sysfs = os.path.realpath(sysfs)
    hidden: list[str] = []
    kept: list[str] = []
    for cls in CLASSES:
        d = os.path.join(sysfs, "class", cls)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        links: list[tuple[str, str]] = []
        files: list[tuple[str, bytes]] = []
        for name in names:
            path = os.path.join(d, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                rel = os.path.relpath(target, sysfs)
                if rel.startswith(".."):
                    continue                       # not in sysfs: nothing to hide or keep
                if _adapter_of(cls, name, target) == keep:
                    links.append((name, os.readlink(path)))
                    kept.append(rel)
                else:
                    hidden.append(rel)
            elif os.path.isfile(path):
                data = _read(path, ATTR_MAX)
                if data is not None:
                    files.append((name, data))
        p.classes[f"class/{cls}"] = (links, files)
    for rel in hidden:
        # the directory of an adapter's class devices under its PCI
        # function (".../0000:3b:00.0/infiniband/mlx5_1") goes whole when
        # nothing kept lies below it; /sys/devices/virtual's (rxe, siw)
        # holds every soft adapter's and stays
        parent = os.path.dirname(rel)
        whole = (os.path.basename(parent) in CLASSES and not parent.startswith("devices/virtual/")
                 and not any(k == parent or k.startswith(parent + "/") for k in kept))
        target = parent if whole else rel
        if target not in p.hide:
            p.hide.append(target)
    # a covered directory under another covered one would not resolve
    p.hide = sorted(h for h in p.hide
                    if not any(o != h and h.startswith(o + "/") for o in p.hide))
    return p


def mask_adapters(cid: str, rootfs: str, m: Mounter, p: Plan, debug,
                  fs_magic: int | None = SYSFS_MAGIC) -> list[str]:
    """Carry out the plan ``p`` in the rootfs's /sys (in the current mount
    namespace: the container's).  A rootfs without a sysfs at /sys
    (``fs_magic``: None in tests, whose /sys is a directory tree) gets
    nothing.  Returns what it covered."""
    if not p:
        return []
    fds: list[int] = []
    mounted: list[tuple[int, str]] = []
    done: list[str] = []

    def at(dirfd: int, rel: str) -> int | None:
        try:
            fd = m.resolve(dirfd, rel, os.O_DIRECTORY)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            if e.errno == errno.ELOOP:
                raise HookError(f"container {cid}: /sys/{rel} in the rootfs is a symlink or "
                                f"lies under one; refused (mount targets never follow "
                                f"symlinks)") from None
            raise OSError(e.errno, e.strerror, f"/sys/{rel}") from None
        fds.append(fd)
        return fd

    ok = False
    try:
        root = os.open(os.path.realpath(rootfs), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds.append(root)
        sysd = at(root, "sys")
        if sysd is None or (fs_magic is not None and m.fs_type(sysd) != fs_magic):
            debug("no sysfs at /sys in the rootfs: no adapter to hide")
            ok = True
            return []
        for rel in p.hide:
            target = at(sysd, rel)
            if target is None:
                continue                           # gone since the plan
            tmp = m.tmpfs(target, f"/sys/{rel}", source="vgpu", mode="0555", size="4k")
            mounted.append((tmp, f"/sys/{rel}"))
            m.set_rdonly(tmp)
            done.append(f"/sys/{rel}")
        for rel, (links, files) in p.classes.items():
            target = at(sysd, rel)
            if target is None:
                continue
            tmp = m.tmpfs(target, f"/sys/{rel}", source="vgpu", mode="0755", size="64k")
            mounted.append((tmp, f"/sys/{rel}"))
            for name, link in links:
                os.symlink(link, name, dir_fd=tmp)
            for name, data in files:
                fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o444, dir_fd=tmp)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            m.set_rdonly(tmp)
            done.append(f"/sys/{rel}")
        ok = True
    finally:
        release_mounts(m, cid, mounted, fds, undo=not ok)
    debug(f"RDMA adapters hidden: {' '.join(done) or 'none'}")
    return done
