"""RDMA beside a slice (docs/rdma.md): what a slice was given (the
adapter, the nodes its container may open, the rdma cgroup's limits) and
setting those limits.  The adapter is chosen by vgpud
(vgpu.common.topology.choose); this module is what the hook needs too.

What the container is given is the adapter's uverbs
node(s) and /dev/infiniband/rdma_cm, each by its own major and minor
(no major-wide rule: another adapter's uverbs share the major), and the
rdma cgroup's ``rdma.max`` line for the adapter on the container's (or its
pod's) cgroup: ``hca_handle`` (user contexts: ibv_open_device) and
``hca_object`` (every verbs object: PDs, CQs, QPs, MRs, ...), which the
kernel refuses past (ib_uverbs: -EAGAIN from rdmacg_try_charge).  Standard
library only."""
from __future__ import annotations

import os

#: bounds on the limits a slice may ask for (the kernel takes up to
#: INT_MAX; these keep a typo from meaning "unlimited")
HANDLES_MAX = 1 << 16
OBJECTS_MAX = 1 << 24
_HCA_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def _node_name_ok(s: str) -> bool:
    """rdma_cm or uverbsN (N of 1 to 4 digits); no re on the hook's path."""
    return s == "rdma_cm" or (s.startswith("uverbs") and 1 <= len(s) - 6 <= 4
                              and s[6:].isascii() and s[6:].isdigit())


def _hca_ok(s: str) -> bool:
    """An adapter's name as the kernel's IB core makes them: 1 to 64 of
    [A-Za-z0-9_.-]."""
    return 1 <= len(s) <= 64 and all(c in _HCA_CHARS for c in s)


class RdmaGrant:
    """What a slice was given: the adapter, its nodes ((name under
    /dev/infiniband, major, minor)), and the rdma cgroup's limits.  (A
    plain class: the hook loads this module, and no dataclasses.)"""
    __slots__ = ("hca", "nodes", "handles", "objects")

    def __init__(self, hca: str, nodes: tuple[tuple[str, int, int], ...], handles: int,
                 objects: int):
        self.hca, self.nodes, self.handles, self.objects = hca, tuple(nodes), handles, objects

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RdmaGrant) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((self.hca, self.nodes, self.handles, self.objects))

    def __repr__(self) -> str:
        return f"RdmaGrant({self.to_json()!r})"

    def with_limits(self, handles: int, objects: int) -> "RdmaGrant":
        return RdmaGrant(self.hca, self.nodes, handles, objects)

    def rdma_max(self) -> str:
        """The line for the cgroup's rdma.max."""
        return f"{self.hca} hca_handle={self.handles} hca_object={self.objects}"

    def to_json(self) -> dict:
        return {"hca": self.hca, "nodes": [list(n) for n in self.nodes],
                "handles": self.handles, "objects": self.objects}

    @classmethod
    def from_json(cls, d: object) -> "RdmaGrant":
        """The inverse of to_json, checked (a state file, an API answer)."""
        if not isinstance(d, dict) or set(d) != {"hca", "nodes", "handles", "objects"}:
            raise ValueError(f"rdma: {d!r} is not a grant (hca, nodes, handles, objects)")
        hca, nodes = d["hca"], d["nodes"]
        if not hca_ok(hca):
            raise ValueError(f"rdma.hca: {hca!r} is not an adapter name")
        if not isinstance(nodes, list) or not nodes:
            raise ValueError(f"rdma.nodes: {nodes!r} is not a list of nodes")
        out = []
        for n in nodes:
            if not node_ok(n):
                raise ValueError(f"rdma.nodes: {n!r} is not [name, major, minor]")
            out.append((n[0], n[1], n[2]))
        return cls(hca, tuple(out), limit("rdma.handles", d["handles"], HANDLES_MAX),
                   limit("rdma.objects", d["objects"], OBJECTS_MAX))


def hca_ok(name: object) -> bool:
    """An adapter's name as /sys/class/infiniband lists it (mlx5_0, rxe0)."""
    return isinstance(name, str) and _hca_ok(name)


def node_ok(n: object) -> bool:
    """[name, major, minor] of a node under /dev/infiniband: uverbsN or
    rdma_cm, and numbers a dev_t holds."""
    return isinstance(n, (list, tuple)) and len(n) == 3 and isinstance(n[0], str) \
        and _node_name_ok(n[0]) and _uint(n[1], 1 << 12) and _uint(n[2], 1 << 20)


GRANT_KEYS = ("hca", "nodes", "handles", "objects")


def grant_of_view(v: object) -> RdmaGrant:
    """The grant in a slice's ``rdma`` as vgpud's API shows it (the grant's
    keys beside what the view adds: ``used``, ``objects_by_type``); the
    grant's own keys are checked as from_json checks them."""
    if not isinstance(v, dict):
        raise ValueError(f"rdma: {v!r} is not a grant (hca, nodes, handles, objects)")
    return RdmaGrant.from_json({k: v[k] for k in GRANT_KEYS if k in v})


def _uint(x: object, top: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < top


def limit(name: str, v: object, top: int) -> int:
    if not _uint(v, top + 1) or v < 1:
        raise ValueError(f"{name}: {v!r} is not a whole number from 1 to {top}")
    return v


def write_rdma_max(cgroup_dir: str, g: RdmaGrant) -> None:
    """Set the grant's limits on a cgroup v2 directory (rdma.max; the rdma
    controller must be enabled for it, by its parent's subtree_control).
    OSError as the kernel says it."""
    _write_max(cgroup_dir, g.rdma_max())


def _write_max(cgroup_dir: str, line: str) -> None:
    fd = os.open(os.path.join(cgroup_dir, "rdma.max"), os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def enable_rdma_controller(cgroup_dir: str, v2root: str) -> None:
    """Make rdma.max exist in ``cgroup_dir``: "+rdma" in the
    subtree_control of every directory from the hierarchy's root down to
    its parent (a runtime enables only the controllers it uses; runc's
    cgroupfs driver leaves rdma out when config.json has no rdma limit).
    OSError where the kernel refuses (no rdma controller)."""
    root = os.path.realpath(v2root)
    target = os.path.realpath(cgroup_dir)
    if target != root and not target.startswith(root.rstrip("/") + "/"):
        raise OSError(f"{cgroup_dir} is not under {v2root}")
    parts = [p for p in target[len(root):].split("/") if p]
    d = root
    for p in parts:
        with open(os.path.join(d, "cgroup.subtree_control")) as f:
            on = f.read().split()
        if "rdma" not in on:
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("+rdma")
        d = os.path.join(d, p)


def read_usage(cgroup_dir: str, hca: str) -> dict | None:
    """What a cgroup holds of ``hca`` by the rdma cgroup's count
    (rdma.current: "rxe0 hca_handle=1 hca_object=4"): {"handles",
    "objects"}; None where the file or the adapter's line is missing."""
    try:
        with open(os.path.join(cgroup_dir, "rdma.current")) as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] != hca:
            continue
        kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        try:
            return {"handles": int(kv["hca_handle"]), "objects": int(kv["hca_object"])}
        except (KeyError, ValueError):
            return None
    return None


def stale_nodes(g: RdmaGrant, sysfs: str = "/sys") -> list[str]:
    """The grant's uverbs nodes that are no longer its adapter's: uverbs
    numbers are handed out as adapters appear, so after an adapter went and
    another came, uverbsN (and its major:minor) may be another adapter's.
    Each is checked against /sys/class/infiniband_verbs/<name>/{ibdev,dev};
    rdma_cm against the misc device's numbers.  Empty: all still hold."""
    bad = []
    for name, major, minor in g.nodes:
        if name == "rdma_cm":
            d = os.path.join(sysfs, "class", "misc", name)
            ib = None
        else:
            d = os.path.join(sysfs, "class", "infiniband_verbs", name)
            ib = read_attr(os.path.join(d, "ibdev"))
        dev = read_attr(os.path.join(d, "dev"))
        if dev != f"{major}:{minor}" or (name != "rdma_cm" and ib != g.hca):
            bad.append(f"{name} ({dev or 'absent'}{', ' + ib if ib and ib != g.hca else ''})")
    return bad


def read_attr(path: str, limit: int = 256) -> str | None:
    """A small sysfs attribute, stripped; None where it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(limit).strip()
    except OSError:
        return None


def cgroup_pids(cgroup_dir: str, limit: int = 1 << 16) -> set[int]:
    """The processes of a cgroup v2 directory and of every one below it
    (at most ``limit``)."""
    out: set[int] = set()
    for d, _dirs, files in os.walk(cgroup_dir):
        if "cgroup.procs" not in files:
            continue
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                out.update(int(x) for x in f.read().split() if x.isdigit())
        except OSError:
            continue
        if len(out) >= limit:
            break
    return out


def release_limits(cgroup_dir: str, hca: str) -> None:
    """Set a cgroup's limits on ``hca`` back to max before the cgroup goes.
    With every limit at max the kernel frees the cgroup's pool of the
    adapter at once (or at its last uncharge); a pool left with a limit
    when its cgroup is removed stays on the adapter's list, and the
    adapter's unregistration later corrupts it (docs/rdma.md, "A kernel
    bug").  OSError as the kernel says it."""
    _write_max(cgroup_dir, f"{hca} hca_handle=max hca_object=max")
