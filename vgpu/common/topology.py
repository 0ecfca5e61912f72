"""Where GPUs and RDMA adapters sit on the node's PCI tree, from sysfs, and
which adapter is closest to each GPU (docs/rdma.md, "Placement").

The distances are nvidia-smi topo's (NVML's nvmlGpuTopologyLevel_t), read
from the same facts: a device's sysfs directory lies under the chain of
bridges above it (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...),
and its numa_node file names its node.  For two devices:

- ``PIX``: under one PCIe switch (at most one bridge on each side below
  the deepest bridge they share);
- ``PXB``: under a tree of switches that does not reach the host bridge;
- ``PHB``: under the same host bridge (root complex), no bridge shared;
- ``NODE``: different host bridges of one NUMA node;
- ``SYS``: different NUMA nodes (the SMP interconnect), or a node unknown.

Standard library only: vgpud and vgpuctl import it."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from vgpu.common.rdma import RdmaGrant, read_attr

__all__ = ["LINKS", "Hca", "RdmaError", "bdf_of", "choose", "grant", "hcas", "link",
           "numa_node", "pair", "pci_chain", "pcie_root", "rdma_cm_node"]

#: the kernel's rdma_cm node, shared by every adapter (a misc device: its
#: numbers read from sysfs, never assumed)
RDMA_CM = "rdma_cm"


class RdmaError(ValueError):
    """A slice's RDMA that cannot be: no adapter, an unknown one."""

#: the distances, closest first
LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")

_BDF = re.compile(r"([0-9a-f]{1,8}):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\Z")
_SYSFS_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}\Z")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


def bdf_of(pci_bus_id: str) -> str | None:
    """sysfs's spelling ("0000:3b:00.0") of a PCI address as NVML writes it
    ("00000000:3B:00.0"); None for anything that is not one."""
    m = _BDF.match(pci_bus_id.strip().lower()) if isinstance(pci_bus_id, str) else None
    if m is None:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2)}"


def numa_node(pci_bus_id: str, sysfs: str = "/sys") -> int | None:
    """The NUMA node of a PCI device.  None where the kernel knows none (-1:
    one node, or no NUMA), the device is not there (nvsim's GPUs have no
    PCI device) or the id is no PCI address."""
    bdf = bdf_of(pci_bus_id)
    if bdf is None:
        return None
    try:
        with open(os.path.join(sysfs, "bus", "pci", "devices", bdf, "numa_node")) as f:
            n = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return n if n >= 0 else None


def pci_chain(pci_bus_id: str, sysfs: str = "/sys") -> tuple[str, ...] | None:
    """The host bridge and every bridge above a device, then the device:
    ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:08.0",
    "0000:05:00.0"), from where its sysfs directory lies; None when sysfs
    does not have it (or it lies under no host bridge)."""
    bdf = bdf_of(pci_bus_id)
    if bdf is None:
        return None
    p = os.path.join(sysfs, "bus", "pci", "devices", bdf)
    if not os.path.exists(p):
        return None
    parts = os.path.realpath(p).split(os.sep)
    for i, part in enumerate(parts):
        if _ROOT.match(part):
            chain = tuple(parts[i:])
            if len(chain) >= 2 and all(_SYSFS_BDF.match(x) for x in chain[1:]) \
                    and chain[-1] == bdf:
                return chain
            return None
    return None


def pcie_root(pci_bus_id: str, sysfs: str = "/sys") -> str | None:
    """The host bridge (root complex) above a device: "pci0000:00"."""
    chain = pci_chain(pci_bus_id, sysfs)
    return chain[0] if chain else None


def link(a: tuple[str, ...] | None, b: tuple[str, ...] | None,
         numa_a: int | None, numa_b: int | None) -> str:
    """The distance (one of LINKS) between two devices by their pci_chain
    and NUMA nodes."""
    if not a or not b:
        return "SYS"
    if a[0] != b[0]:
        return "NODE" if numa_a is not None and numa_a == numa_b else "SYS"
    # the bridges each has above it, below the host bridge
    ba, bb = a[1:-1], b[1:-1]
    shared = 0
    while shared < min(len(ba), len(bb)) and ba[shared] == bb[shared]:
        shared += 1
    if shared == 0:
        return "PHB"
    # below the deepest shared bridge: a switch's downstream port each (or
    # the device itself) is one switch; more is a tree of them
    if len(ba) - shared <= 1 and len(bb) - shared <= 1:
        return "PIX"
    return "PXB"


@dataclass(frozen=True)
class Hca:
    """An RDMA adapter (an entry of /sys/class/infiniband): its name
    ("mlx5_0", "rxe0"), its PCI address and chain (None for a software
    device such as rxe, which hangs off a netdev), NUMA node, and its
    uverbs character devices ((name, major, minor): /dev/infiniband/NAME)."""
    name: str
    pci: str | None
    chain: tuple[str, ...] | None
    numa: int | None
    uverbs: tuple[tuple[str, int, int], ...] = field(default=())


def hcas(sysfs: str = "/sys") -> list[Hca]:
    """The node's RDMA adapters, by name; [] where the kernel has none."""
    base = os.path.join(sysfs, "class", "infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    verbs: dict[str, list[tuple[str, int, int]]] = {}
    vbase = os.path.join(sysfs, "class", "infiniband_verbs")
    try:
        vnames = sorted(os.listdir(vbase))
    except OSError:
        vnames = []
    for v in vnames:
        if not re.match(r"uverbs\d{1,4}\Z", v):
            continue
        ib = read_attr(os.path.join(vbase, v, "ibdev"))
        dev = read_attr(os.path.join(vbase, v, "dev"))
        m = re.match(r"(\d{1,4}):(\d{1,7})\Z", dev or "")
        if ib and m:
            verbs.setdefault(ib, []).append((v, int(m.group(1)), int(m.group(2))))
    out = []
    for n in names:
        if not _NAME.match(n):
            continue
        dev = os.path.join(base, n, "device")
        bdf = os.path.basename(os.path.realpath(dev)) if os.path.islink(dev) else None
        if bdf is not None and not _SYSFS_BDF.match(bdf):
            bdf = None                      # rxe: its device is the netdev's, or none
        chain = pci_chain(bdf, sysfs) if bdf else None
        out.append(Hca(n, bdf, chain, numa_node(bdf, sysfs) if bdf else None,
                       tuple(verbs.get(n, ()))))
    return out


def pair(gpus: list[tuple[int, str]], adapters: list[Hca],
         sysfs: str = "/sys") -> dict[int, tuple[str, str]]:
    """Each GPU's closest adapter: {gpu index: (adapter name, link)} for
    GPUs given as (index, PCI address).  Among the equally close, the one
    fewer GPUs were paired with so far, then by name, so that eight GPUs
    over eight adapters on switches of two and two get one each.  Software
    adapters (no PCI device: rxe) are as far as any (SYS) and are paired
    only where nothing else is; a node with no adapter pairs nothing."""
    out: dict[int, tuple[str, str]] = {}
    if not adapters:
        return out
    load = {h.name: 0 for h in adapters}
    for index, pci in sorted(gpus):
        chain, numa = pci_chain(pci, sysfs), numa_node(pci, sysfs)
        ranked = sorted(adapters, key=lambda h: (
            LINKS.index(link(chain, h.chain, numa, h.numa)), h.chain is None, load[h.name],
            h.name))
        best = ranked[0]
        load[best.name] += 1
        out[index] = (best.name, link(chain, best.chain, numa, best.numa))
    return out


def rdma_cm_node(sysfs: str = "/sys") -> tuple[str, int, int] | None:
    """/dev/infiniband/rdma_cm's numbers, from sysfs (the rdma_ucm
    module's misc device); None when the module is not loaded."""
    for p in (os.path.join(sysfs, "class", "misc", RDMA_CM, "dev"),
              os.path.join(sysfs, "class", "infiniband_cm", RDMA_CM, "dev")):
        try:
            with open(p) as f:
                m = re.match(r"(\d{1,4}):(\d{1,7})\Z", f.read(32).strip())
        except OSError:
            continue
        if m:
            return (RDMA_CM, int(m.group(1)), int(m.group(2)))
    return None


def choose(gpu_pci: str, adapters: list[Hca], use: dict[str, int],
           want: str | None = None, sysfs: str = "/sys") -> Hca:
    """The adapter for a slice on the GPU at ``gpu_pci``: ``want`` where
    named, else the closest (nvidia-smi topo's order), then the one fewer
    slices use (``use``: adapter -> RDMA slices), then by name.  An
    adapter without a uverbs node cannot be given (RdmaError)."""
    usable = [h for h in adapters if h.uverbs]
    if want is not None:
        for h in usable:
            if h.name == want:
                return h
        raise RdmaError(f"no RDMA adapter {want!r} with a uverbs device on this node "
                        f"(there are: {', '.join(h.name for h in usable) or 'none'})")
    if not usable:
        raise RdmaError("no RDMA adapter with a uverbs device on this node "
                        "(/sys/class/infiniband)")
    chain, numa = pci_chain(gpu_pci, sysfs), numa_node(gpu_pci, sysfs)
    return min(usable, key=lambda h: (
        LINKS.index(link(chain, h.chain, numa, h.numa)), h.chain is None,
        use.get(h.name, 0), h.name))


def grant(hca: Hca, handles: int, objects: int,
          sysfs: str = "/sys") -> RdmaGrant:
    """The grant of ``hca``: its uverbs nodes and rdma_cm where present."""
    nodes = list(hca.uverbs)
    cm = rdma_cm_node(sysfs)
    if cm is not None:
        nodes.append(cm)
    return RdmaGrant(hca.name, tuple(nodes), handles, objects)
