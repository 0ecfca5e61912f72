"""The hook's cgroups: which cgroup v2 a slice is bound to (the
container's own, or its pod's), whether a process is still the container
vgpud recorded, and the device cgroup rules for the slice's nodes."""
from __future__ import annotations

import os
import sys

from vgpu.cli.hook.cmdline import PROG, HookError
from vgpu.common.request import is_pod_cgroup, vgpu_major


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
