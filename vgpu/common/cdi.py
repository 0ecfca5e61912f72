"""The CDI spec of vgpu slices: ``vgpuctl cdi generate``'s document
(vgpu.cli.ctlcdi) and what vgpu-dra-plugin writes for a prepared claim
(vgpu.k8s.draplugin); docs/kubernetes.md, container-hook/README.md.
Standard library only."""
from __future__ import annotations

import os

from vgpu.common.driverfiles import DriverFiles, driver_edits
from vgpu.common.rdma import node_ok
from vgpu.common.request import HOOK_ENV

__all__ = ["ADMIN_CDI_KIND", "CDI_HOOK", "CDI_KIND", "CDI_VERSION", "admin_cdi_spec", "cdi_spec"]

#: the hook a spec wires in by default (make install's link)
CDI_HOOK = "/usr/local/bin/vgpu-oci-hook"
#: the spec's kind: its devices are vgpu.io/slice=<slice>
CDI_KIND = "vgpu.io/slice"
#: a whole GPU, unmediated: a DRA claim's admin access (vgpu.k8s.draplugin)
ADMIN_CDI_KIND = "vgpu.io/gpu"

#: the oldest CDI version whose fields the spec uses, so that consumers with
#: an older CDI library read it: podman 4.3 (Debian 12's) skips a spec of a
#: version it does not know ("unresolvable CDI devices") and, at 0.5.0,
#: refuses a device's ``annotations`` (added in 0.6.0), so the spec has none
#: (tests/vm/test_container_nvidia.py runs it through podman)
CDI_VERSION = "0.5.0"


def cdi_spec(slices: list, fuse_mount: str, hook: str = CDI_HOOK,
             socket: str | None = None, driver: DriverFiles | None = None,
             attach_pod: bool = False) -> dict:
    """A CDI spec (cdiVersion CDI_VERSION, kind vgpu.io/slice): one device per
    slice, named by its container, whose nodes are the slice's vgpufs nodes
    (hostPath) at /dev/nvidia*, and a createRuntime hook that bind-mounts
    the slice's proc view on /proc/driver/nvidia: runc refuses a config.json
    mount there ("inside /proc"), so the view cannot be a CDI mount.  The
    hook also attaches the slice to the container's cgroup through vgpud
    (``socket``, when not the default): vgpu.ko opens an unbound slice for
    host administrators only (``attach_pod``: to the cgroup of the
    container's pod, so that the pod's containers share it: a DRA claim).
    The hook entry's env is explicit (runc would otherwise choose it).

    With ``driver`` (vgpu.common.driverfiles.discover()), the spec's own
    containerEdits, which apply with any of its devices, bring the host
    driver's user space: each file bound read-only at its path, and the
    hook's createRuntime entry that makes the SONAME links and the
    container's ldcache (driverfiles.driver_edits: the edits vgpu-runtime
    puts into config.json too)."""
    devices = []
    for s in slices:
        cid = str(s.get("container", ""))
        if not cid:
            continue
        base = os.path.join(fuse_mount, cid)
        dev = s.get("devices") if isinstance(s.get("devices"), dict) else {}
        major = dev.get("major")
        nodes = []

        def node(name, minor):
            n = {"path": f"/dev/{name}", "hostPath": os.path.join(base, "dev", name),
                 "type": "c", "permissions": "rw"}
            if isinstance(major, int) and isinstance(minor, int):
                n["major"], n["minor"] = major, minor
            nodes.append(n)
        node("nvidiactl", dev.get("ctl_minor"))
        minors = dev.get("gpu_minors") if isinstance(dev.get("gpu_minors"), list) else []
        if not minors:
            minors = [None] * len(s.get("gpus") or [])
        for i, m in enumerate(minors):
            node(f"nvidia{i}", m)
        node("nvidia-uvm", dev.get("uvm_minor"))
        # the slice's RDMA adapter (docs/rdma.md): its uverbs node(s) and
        # rdma_cm, each a node of its own: a rule per node, not per major
        rd = s.get("rdma") if isinstance(s.get("rdma"), dict) else {}
        for n in rd.get("nodes") or []:
            if node_ok(n):
                nodes.append({"path": f"/dev/infiniband/{n[0]}",
                              "hostPath": f"/dev/infiniband/{n[0]}", "type": "c",
                              "major": n[1], "minor": n[2], "permissions": "rw"})
        devices.append({
            "name": cid,
            "containerEdits": {
                "deviceNodes": nodes,
                "hooks": [{"hookName": "createRuntime", "path": hook,
                           "args": ["vgpu-oci-hook", "--fuse-mount", fuse_mount,
                                    *(["--socket", socket] if socket else []),
                                    *(["--attach-pod"] if attach_pod else []),
                                    "--mount-slice", cid, "createRuntime"],
                           "env": list(HOOK_ENV), "timeout": 15}],
            },
        })
    spec = {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices}
    if driver is not None:
        edits = driver_edits(driver, (hook, ["vgpu-oci-hook"], list(HOOK_ENV)))
        if edits:
            spec["containerEdits"] = edits
    return spec


def admin_cdi_spec(name: str, minor: int, dev_dir: str = "/dev",
                   driver: DriverFiles | None = None, hook: str = CDI_HOOK) -> dict:
    """The CDI spec of one admin-access device ``name``: the driver's own
    /dev/nvidiactl and /dev/nvidia<minor>, at their paths (NVML finds a GPU
    by its minor), and no nvidia-uvm, so CUDA does not initialise; no
    slice, so nothing is counted or rewritten.  The runtime takes each
    node's major and minor from the host's file.  With ``driver``, the
    driver's user space as cdi_spec brings it (nvidia-smi, libnvidia-ml)."""
    nodes = [{"path": f"/dev/{n}", "hostPath": os.path.join(dev_dir, n), "type": "c",
              "permissions": "rw"} for n in ("nvidiactl", f"nvidia{int(minor)}")]
    spec = {"cdiVersion": CDI_VERSION, "kind": ADMIN_CDI_KIND,
            "devices": [{"name": name, "containerEdits": {"deviceNodes": nodes}}]}
    if driver is not None:
        edits = driver_edits(driver, (hook, ["vgpu-oci-hook"], list(HOOK_ENV)))
        if edits:
            spec["containerEdits"] = edits
    return spec
