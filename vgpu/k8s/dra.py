"""What vgpu publishes to Kubernetes' Dynamic Resource Allocation
(resource.k8s.io/v1): the node's GPUs as one ResourceSlice whose devices
have consumable capacity (KEP-5075, ``DRAConsumableCapacity``: alpha in
1.34, beta in 1.36), so that kube-scheduler itself counts a slice's memory
and compute on the GPU that holds it (docs/kubernetes.md, "Dynamic
Resource Allocation").

This module only describes; it does no I/O.  ``resource_slice`` builds the
object from vgpud's ``status`` and ``gpus`` results (docs/api.md), the
shape deploy/dra/'s DeviceClass and claims select and consume;
vgpu.k8s.draplugin publishes it and prepares claims into slices.

One device per GPU vgpud slices, named ``gpu-<index>``:

- ``allowMultipleAllocations: true``: many claims share it, each consuming
  part of its capacities;
- capacity ``memory``: the GPU's memory in bytes, consumed in MiB steps
  (a claim that names none takes 1 GiB: ``requestPolicy.default``);
  ``compute``: 100 (percent of the GPU's time), consumed in steps of 1 (a
  claim that names none takes 0: a share of what is idle, no reservation);
- attributes, in the driver's domain unless qualified: ``index``, ``uuid``,
  ``productName``, ``driverVersion`` (a semantic version: NVIDIA's
  ``535.261.03`` is ``535.261.3``; absent where vgpud does not know it),
  ``pciBusID``, ``numaNode`` where known, and the standard
  ``resource.kubernetes.io/pcieRoot`` where sysfs names the GPU's PCI root
  (what a NIC's driver publishes too, so a claim can ask for both under one
  root), and ``rdmaAdapter`` and ``rdmaLink``: the RDMA adapter vgpud
  pairs with the GPU (the closest, vgpu.common.topology) and how close, in
  nvidia-smi topo's words (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``).
"""

from __future__ import annotations

import re
from typing import Any, Callable

#: the DRA driver name: the claims' devices say ``device.driver == DRIVER``
DRIVER = "gpu.vgpu.io"
#: the API version of what this module builds
API_VERSION = "resource.k8s.io/v1"
#: capacity names (in the driver's domain)
MEMORY, COMPUTE = "memory", "compute"
MiB, GiB = 1 << 20, 1 << 30
#: a claim's memory when it names none, and its granularity
MEMORY_DEFAULT, MEMORY_STEP = GiB, MiB
#: the API's limit on a device's attributes and capacities together
MAX_ATTRIBUTES_AND_CAPACITIES = 32
_SEMVER_PART = re.compile(r"\d+\Z")


def device_name(index: int) -> str:
    return f"gpu-{index}"


def semver(version: str) -> str | None:
    """NVIDIA's driver version as a semantic version (what a DRA ``version``
    attribute must be): leading zeros dropped ("535.261.03" ->
    "535.261.3"), a missing part 0; None for anything else."""
    parts = version.strip().split(".") if isinstance(version, str) else []
    if not 1 <= len(parts) <= 3 or not all(_SEMVER_PART.match(p) for p in parts):
        return None
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts)


def _device(g: dict, driver_version: str | None, numa: int | None,
            pcie_root: str | None) -> dict[str, Any]:
    attrs: dict[str, dict[str, Any]] = {
        "index": {"int": g["index"]},
        "uuid": {"string": g["uuid"]},
        "productName": {"string": g.get("name") or "unknown"},
    }
    if driver_version:
        attrs["driverVersion"] = {"version": driver_version}
    if isinstance(g.get("pci_bus_id"), str):
        attrs["pciBusID"] = {"string": g["pci_bus_id"]}
    if numa is not None:
        attrs["numaNode"] = {"int": numa}
    if pcie_root:
        attrs["resource.kubernetes.io/pcieRoot"] = {"string": pcie_root}
    hca = g.get("hca")
    if isinstance(hca, dict) and isinstance(hca.get("name"), str) \
            and isinstance(hca.get("link"), str):
        attrs["rdmaAdapter"] = {"string": hca["name"]}
        attrs["rdmaLink"] = {"string": hca["link"]}
    total = g["memory_total"]
    capacity = {
        MEMORY: {"value": str(total),
                 "requestPolicy": {"default": str(min(MEMORY_DEFAULT, total // MEMORY_STEP
                                                      * MEMORY_STEP)),
                                   "validRange": {"min": str(MEMORY_STEP),
                                                  "max": str(total // MEMORY_STEP
                                                             * MEMORY_STEP),
                                                  "step": str(MEMORY_STEP)}}},
        COMPUTE: {"value": "100",
                  "requestPolicy": {"default": "0",
                                    "validRange": {"min": "0", "max": "100", "step": "1"}}},
    }
    assert len(attrs) + len(capacity) <= MAX_ATTRIBUTES_AND_CAPACITIES
    return {"name": device_name(g["index"]), "allowMultipleAllocations": True,
            "attributes": attrs, "capacity": capacity}


def resource_slice(node_name: str, status: dict, gpus: dict, generation: int = 1,
                   numa_of: Callable[[str], int | None] = lambda pci: None,
                   pcie_root_of: Callable[[str], str | None] = lambda pci: None
                   ) -> dict[str, Any]:
    """The node's ResourceSlice (one pool named by the node, one slice in
    it) from vgpud's ``status`` and ``gpus`` results.  GPUs vgpud does not
    slice, and GPUs with a fault (an XID: vgpu.daemon.health), are left
    out: the scheduler then allocates nothing on them.  ``numa_of`` and
    ``pcie_root_of`` read sysfs for a PCI bus id (the caller's I/O).
    Raises ValueError for a reply without the fields it needs."""
    version = semver(status.get("driver_version") or "")
    devices = []
    for g in gpus.get("gpus") or []:
        if g.get("sliced", True) is False or g.get("fault"):
            continue
        if not isinstance(g.get("index"), int) or not isinstance(g.get("uuid"), str) \
                or not isinstance(g.get("memory_total"), int) or g["memory_total"] < 2 * MiB:
            raise ValueError(f"vgpud's gpus result has a GPU without index, uuid or "
                             f"memory_total: {g!r}")
        pci = g.get("pci_bus_id") if isinstance(g.get("pci_bus_id"), str) else None
        devices.append(_device(g, version, numa_of(pci) if pci else None,
                               pcie_root_of(pci) if pci else None))
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": sorted(devices, key=lambda d: d["attributes"]["index"]["int"]),
        },
    }
