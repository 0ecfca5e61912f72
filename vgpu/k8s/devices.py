"""vgpu-device-plugin's devices, no I/O: the two extended resources
(``vgpu.io/memory-gib``, one device per GiB of a GPU's memory;
``vgpu.io/compute-percent``, 100 per GPU), the node as vgpud describes it,
the devices advertised, which devices of which GPU a container gets
(preferred: all of one GPU, by vgpud's placement policy) and the
annotations Allocate hands the container runtime, which the OCI hook turns
into the container's slice (the contract is vgpu.common.request's).

Standard library only, like NVIDIA's device plugin keeps its resource
manager apart from its gRPC server: vgpu.k8s.server serves these over the
kubelet's API, vgpu.k8s.deviceplugin is the program (docs/kubernetes.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from vgpu.common.request import CONTAINER_ANNOTATIONS, RUNTIME_GUARD_DEST, RUNTIME_GUARD_SOURCE
from vgpu.common.values import quote

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"

MEMORY = "vgpu.io/memory-gib"
COMPUTE = "vgpu.io/compute-percent"
#: resource -> (the kind part of its device IDs, its socket in the kubelet's directory)
RESOURCES = {MEMORY: ("mem", "vgpu-memory-gib.sock"),
             COMPUTE: ("pct", "vgpu-compute-percent.sock")}
COMPUTE_PER_GPU = 100
GiB = 1 << 30

# the annotations Allocate sets (the OCI hook reads them as the container's
# request; the contract is vgpu.common.request's)
ANN_MEMORY = CONTAINER_ANNOTATIONS["memory"]
ANN_GPUS = CONTAINER_ANNOTATIONS["gpus"]
ANN_COMPUTE = CONTAINER_ANNOTATIONS["compute"]
ANN_PROFILE = CONTAINER_ANNOTATIONS["profile"]

#: the most device IDs one request may name (a node with 8 GPUs of 141 GiB
#: at a factor of 16 has 18048 memory devices)
MAX_IDS = 65536

#: a device ID: the GPU's UUID, the kind, the device's number on that GPU.
#: By UUID, not index: the kubelet checkpoints the IDs it allocated, and an
#: index names another GPU once the node's GPUs are numbered otherwise (one
#: removed, a driver that enumerates in another order).
_ID_RE = re.compile(r"(?P<uuid>[^\s,]{1,128})-(?P<kind>mem|pct)-(?P<n>\d{1,7})\Z")


class Refused(Exception):
    """A kubelet request the plugin refuses: ``code``, the name of the gRPC
    status it is answered with (grpc.StatusCode's, e.g. "INVALID_ARGUMENT":
    this module loads no gRPC), and the message, which the kubelet shows in
    the pod's admission error."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- the node
@dataclass(frozen=True)
class Gpu:
    index: int
    memory_total: int              # bytes
    memory_allocated: int = 0      # bytes, the sum of its slices' quotas (vgpud's)
    uuid: str = ""                 # what its device IDs are named by
    numa: int | None = None        # its PCI device's NUMA node; None: unknown or none
    memory_outside: int = 0        # bytes held by slices the kubelet does not count
    compute_outside: float = 0.0   # percent reserved by them
    xid: int | None = None         # the critical XID that made it unhealthy (vgpud's fault)


@dataclass(frozen=True)
class Node:
    """What vgpud said last: the GPUs it slices, its placement policy and
    whether it oversubscribes memory; ``up``: it answered the last poll."""
    gpus: tuple[Gpu, ...] = ()
    placement: str = "spread"
    oversubscribe: bool = False
    up: bool = False
    known: bool = False            # vgpud has answered at least once

    def gib(self, g: Gpu, factor: float) -> int:
        """Memory devices of GPU g: its whole GiB, times the factor when
        vgpud oversubscribes memory."""
        whole = g.memory_total // GiB
        return int(whole * factor) if self.oversubscribe else whole

    def count(self, kind: str, g: Gpu, factor: float) -> int:
        return self.gib(g, factor) if kind == "mem" else COMPUTE_PER_GPU

    def withdrawn(self, kind: str, g: Gpu, factor: float) -> int:
        """How many of GPU g's devices of this kind capacity taken outside
        Kubernetes holds (slices not made from the plugin's Allocate: made
        with vgpuctl, from pod annotations, ...): they are advertised
        Unhealthy, so the kubelet does not hand them out again."""
        n = self.count(kind, g, factor)
        if kind == "mem":
            gib = g.memory_outside / GiB
            want = gib * factor if self.oversubscribe else gib
        else:
            want = g.compute_outside
        return min(n, max(0, -int(-want // 1)))     # whole devices, rounded up

    def free_gib(self, g: Gpu, factor: float) -> int:
        """What vgpud has not allocated to slices on GPU g, in whole GiB (of
        the advertised, possibly oversubscribed, amount)."""
        return max(self.gib(g, factor) - -(-g.memory_allocated // GiB), 0)


def node_from_api(status: dict, gpus: dict, numa_of=lambda pci_bus_id: None) -> Node:
    """A Node from vgpud's ``status`` and ``gpus`` results (docs/api.md);
    GPUs vgpud does not slice (``sliced`` false) are left out.  ``numa_of``
    gives a GPU's NUMA node from its PCI bus id (the caller reads sysfs:
    this module does no I/O).  Raises ValueError for a reply without the
    fields it needs."""
    out = []
    for g in gpus.get("gpus") or []:
        if g.get("sliced", True) is False:
            continue
        idx, total, uuid = g.get("index"), g.get("memory_total"), g.get("uuid")
        if not isinstance(idx, int) or not isinstance(total, int) or \
                not isinstance(uuid, str) or not _ID_RE.match(f"{uuid}-mem-0"):
            raise ValueError(f"vgpud's gpus result has a GPU without index, memory_total or "
                             f"a UUID: {quote(g)}")
        pci = g.get("pci_bus_id")
        mo, co = g.get("memory_outside"), g.get("compute_outside")
        fault = g.get("fault")
        xid = fault.get("xid") if isinstance(fault, dict) else None
        if fault is not None and (not isinstance(xid, int) or isinstance(xid, bool)):
            xid = -1                # a fault we cannot read is still a fault
        out.append(Gpu(idx, total, int(g.get("memory_allocated") or 0), uuid,
                       numa_of(pci) if isinstance(pci, str) else None,
                       mo if isinstance(mo, int) and mo > 0 else 0,
                       float(co) if isinstance(co, (int, float)) and co > 0 else 0.0, xid))
    node = status.get("node") or {}
    return Node(gpus=tuple(sorted(out, key=lambda g: g.index)),
                placement=node.get("placement", "spread"),
                oversubscribe=bool(node.get("oversubscribe_memory", False)),
                up=True, known=True)


def device_id(g: Gpu, kind: str, n: int) -> str:
    return f"{g.uuid}-{kind}-{n}"


def devices(node: Node, kind: str, factor: float) -> list[tuple[str, str, int | None]]:
    """(ID, health, NUMA node) of every device of the resource with this ID
    kind: a GPU's last ``Node.withdrawn`` devices Unhealthy (capacity taken
    outside Kubernetes), all of a GPU with a critical XID (vgpud's
    ``fault``: vgpu.daemon.health), all of them while vgpud does not answer."""
    out = []
    for g in node.gpus:
        n = node.count(kind, g, factor)
        keep = 0 if g.xid is not None else n - node.withdrawn(kind, g, factor)
        out += [(device_id(g, kind, i), HEALTHY if node.up and i < keep else UNHEALTHY, g.numa)
                for i in range(n)]
    return out


def parse_ids(ids, kind: str, node: Node, factor: float, what: str) -> dict[int, list[int]]:
    """Device IDs the kubelet sent -> {gpu index: [n, ...]}; Refused
    (INVALID_ARGUMENT) naming the first bad one: not an ID of this
    resource, a GPU the node does not have, past the GPU's devices, named
    twice, or too many."""
    inv = "INVALID_ARGUMENT"
    if len(ids) > MAX_IDS:
        raise Refused(inv, f"{what}: {len(ids)} device IDs is more than {MAX_IDS}")
    gpus = {g.index: g for g in node.gpus}
    by_uuid = {g.uuid: g.index for g in node.gpus}
    out: dict[int, list[int]] = {}
    seen = set()
    for i in ids:
        m = _ID_RE.match(i)
        if m is None or m.group("kind") != kind:
            raise Refused(inv, f"{what}: {quote(i)} is not a device ID of this resource "
                          f"(<GPU UUID>-{kind}-<n>)")
        n = int(m.group("n"))
        if m.group("uuid") not in by_uuid:
            known = ", ".join(f"{g.uuid} (GPU {g.index})" for g in node.gpus) or "none"
            raise Refused(inv, f"{what}: {quote(i)} names GPU {m.group('uuid')}, which vgpud "
                          f"does not slice (GPUs: {known})")
        idx = by_uuid[m.group("uuid")]
        if n >= node.count(kind, gpus[idx], factor):
            raise Refused(inv, f"{what}: {quote(i)} is past GPU {idx}'s "
                          f"{node.count(kind, gpus[idx], factor)} devices")
        if i in seen:
            raise Refused(inv, f"{what}: {quote(i)} is named twice")
        seen.add(i)
        out.setdefault(idx, []).append(n)
    return out


def describe_gpus(node: Node, factor: float, avail: dict[int, list[int]] | None = None) -> str:
    """'GPU 0: 16 GiB, 8 GiB allocated to slices[, 8 devices available]; GPU 1: ...'"""
    parts = []
    for g in node.gpus:
        s = (f"GPU {g.index}: {node.gib(g, factor)} GiB, "
             f"{-(-g.memory_allocated // GiB)} GiB allocated to slices")
        if avail is not None:
            s += f", {len(avail.get(g.index, ()))} GiB available to pods"
        parts.append(s)
    return "; ".join(parts) or "vgpud slices no GPU"


def preferred(kind: str, available, must_include, size: int, node: Node,
              factor: float) -> list[str]:
    """GetPreferredAllocation for one container: ``size`` IDs from
    ``available`` (and every ID of ``must_include``), all of one GPU.

    Candidates are the GPUs with enough of the offered IDs; among them those
    vgpud also has the memory for come first, then vgpud's placement:
    spread (most devices available first) or binpack (fewest).  Ties go to
    the lower index.  Memory on no single GPU: Refused (RESOURCE_EXHAUSTED)
    naming the request and what each GPU has.  Compute that fits on no
    single GPU (but is at most 100%) is taken from several, in the same
    order: the scheduler counts compute per node, vgpud checks it per GPU.
    """
    what = f"{resource_of(kind)}: preferred allocation of {size}"
    if not node.known:
        raise Refused("UNAVAILABLE",
                      f"{what}: vgpud has not answered yet, so its GPUs are unknown")
    if size <= 0:
        raise Refused("INVALID_ARGUMENT",
                      f"{what}: the allocation size must be at least 1")
    avail = parse_ids(list(dict.fromkeys([*available, *must_include])), kind, node, factor,
                      what)
    must = parse_ids(list(must_include), kind, node, factor, what + " (must include)")
    if sum(len(v) for v in must.values()) > size:
        raise Refused("INVALID_ARGUMENT",
                      f"{what}: {sum(len(v) for v in must.values())} devices must be included, "
                      f"more than the {size} asked for")
    if kind == "pct" and size > COMPUTE_PER_GPU:
        raise Refused("INVALID_ARGUMENT",
                      f"{what}: compute {size}% is more than one GPU's {COMPUTE_PER_GPU}%")
    gpus = {g.index: g for g in node.gpus}
    cands = [i for i in avail if len(avail[i]) >= size and (not must or set(must) == {i})]

    def order(i: int):
        vgpud_fits = kind != "mem" or node.free_gib(gpus[i], factor) >= size
        n = len(avail[i])
        return (not vgpud_fits, n if node.placement == "binpack" else -n, i)

    if cands:
        best = min(cands, key=order)
        chosen = sorted(must.get(best, []))
        chosen += [n for n in sorted(avail[best]) if n not in chosen][:size - len(chosen)]
        return [device_id(gpus[best], kind, n) for n in chosen]
    if kind == "mem":
        if len(must) > 1:
            why = f"the devices it must include are on GPUs {', '.join(map(str, sorted(must)))}"
        elif must:
            why = f"the devices it must include are on GPU {next(iter(must))}, which lacks the rest"
        else:
            why = "no single GPU has that many available"
        raise Refused("RESOURCE_EXHAUSTED",
                      f"{what} GiB: a container's memory must come from one GPU and {why} "
                      f"({describe_gpus(node, factor, avail)})")
    out = [device_id(gpus[i], kind, n) for i in sorted(must) for n in sorted(must[i])]
    for i in sorted(avail, key=order):
        out += [device_id(gpus[i], kind, n) for n in sorted(avail[i])
                if device_id(gpus[i], kind, n) not in out]
    return out[:size]


def allocate(kind: str, ids, node: Node, factor: float, profile: str | None,
             index: int = 0) -> dict[str, str]:
    """Allocate for one container: the annotations of its request.  Memory
    devices must all be of one GPU (else Refused, FAILED_PRECONDITION, with
    the request, the GPUs and what each has); compute past one GPU's 100%
    is refused."""
    what = f"{resource_of(kind)}: container request {index}"
    if not node.known:
        raise Refused("UNAVAILABLE",
                      f"{what}: vgpud has not answered yet, so its GPUs are unknown")
    if not ids:
        raise Refused("INVALID_ARGUMENT", f"{what} names no device")
    by_gpu = parse_ids(list(ids), kind, node, factor, what)
    n = sum(len(v) for v in by_gpu.values())
    ann: dict[str, str] = {}
    if kind == "mem":
        if len(by_gpu) > 1:
            spread = ", ".join(f"{len(by_gpu[i])} GiB of GPU {i}" for i in sorted(by_gpu))
            raise Refused("FAILED_PRECONDITION",
                          f"{what}: {n} GiB spans GPUs ({spread}); a container's memory "
                          f"must come from one GPU and no single GPU had {n} GiB of devices "
                          f"free ({describe_gpus(node, factor)})")
        # the GPU by its UUID: the container is created later, and an index
        # could name another GPU by then (vgpud takes either: docs/api.md)
        ann[ANN_MEMORY] = f"{n}Gi"
        ann[ANN_GPUS] = {g.index: g.uuid for g in node.gpus}[next(iter(by_gpu))]
    else:
        if n > COMPUTE_PER_GPU:
            raise Refused("FAILED_PRECONDITION",
                          f"{what}: compute {n}% is more than one GPU's {COMPUTE_PER_GPU}%")
        ann[ANN_COMPUTE] = f"{n}%"
    if profile:
        ann[ANN_PROFILE] = profile
    return ann


#: what the file at the guard mount's source says (written by the plugin)
GUARD_TEXT = ("This container was given vgpu.io devices but started without vgpu-runtime.\n"
              "Set runtimeClassName: vgpu in its pod spec (docs/kubernetes.md).\n")


def guard_mount(source=RUNTIME_GUARD_SOURCE) -> tuple[str, str, bool]:
    """(container path, host path, read-only) of the mount Allocate adds to
    every container: vgpu-runtime takes it out; runc fails the start on it
    (vgpu.common.request.RUNTIME_GUARD_DEST)."""
    return RUNTIME_GUARD_DEST, str(source), True


def resource_of(kind: str) -> str:
    return next(r for r, (k, _) in RESOURCES.items() if k == kind)

