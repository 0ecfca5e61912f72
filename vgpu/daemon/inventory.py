"""GPU inventory of the node, for vgpud.

Two sources, tried in order:

- NVML (pynvml) where it initialises (a real NVIDIA driver with
  libnvidia-ml): name, UUID, PCI bus id, memory total/used, utilization,
  per-process used memory.
- The RM ABI through the project's own client (vgpu.abi.nvclient.RmClient on
  /dev/nvidiactl), which is what the simulated GPU (nvsim) offers: CARD_INFO
  for the PCI id, minor and gpu_id, GET_NAME_STRING (or the device-id table)
  for the name, FB_GET_INFO / VID_HEAP for memory, GET_PIDS + GET_PID_INFO for
  per-process FB.  RM has no UUID control in the subset nvsim implements, so
  the UUID is *synthesized*: ``GPU-`` + a name-based UUID (uuid5) of the PCI
  bus id, stable across restarts and reboots as long as the GPU stays in its
  slot (``uuid_synthesized`` is then true).

Everything here is blocking and is run by the daemon in a worker thread.  A
client is opened per poll and closed at once, so the daemon holds no RM
objects between polls.

``over_quota(...)`` is the pure comparison of the driver's per-process FB
with the kernel's per-slice figures (the double-fetch reconciliation).

What it may call: NVML, the RM ABI on the real device nodes; never vgpu.ko.
"""

from __future__ import annotations

import logging
import os
import uuid as _uuid
from dataclasses import dataclass, field, asdict

try:                    # NVIDIA's bindings (nvidia-ml-py); without them: the RM ABI
    import pynvml
except ImportError:     # pragma: no cover
    pynvml = None

from vgpu.abi.nvclient import NoDeviceError, RmClient, RmError, gpu_name

log = logging.getLogger("vgpud.inventory")

_NS = _uuid.UUID("6f1c3a52-8d0e-4c8e-9a57-76d6a3f0c1b2")   # vgpu's namespace for uuid5


def synth_uuid(pci_bus_id: str) -> str:
    return "GPU-" + str(_uuid.uuid5(_NS, "pci:" + pci_bus_id.lower()))


@dataclass
class GpuInfo:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total: int
    memory_used: int
    minor: int
    gpu_id: int | None = None
    utilization: float | None = None
    uuid_synthesized: bool = False
    proc_memory: dict[int, int] = field(default_factory=dict)   # pid -> FB bytes (driver)
    source: str = "rm"

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("proc_memory")
        return d


PARAMS_PATH = "/proc/driver/nvidia/params"


def read_params(path: str = PARAMS_PATH) -> str:
    """The driver's params file ("" where it has none: nvsim, no driver)."""
    try:
        with open(path, errors="replace") as f:
            return f.read(65536)
    except OSError:
        return ""


class Inventory:
    """``poll()`` -> list[GpuInfo] (blocking).  ``dev_prefix`` is where the
    real device nodes are (default /dev)."""

    def __init__(self, dev_prefix: str = "/dev", use_nvml: bool = True):
        self.dev_prefix = dev_prefix
        self.source = None
        self.driver_version = ""         # the NVIDIA driver's version, from the last poll
        #: the driver's /proc/driver/nvidia/params, from the last poll ("" if
        #: none): vgpufs serves each slice a copy (vgpu.daemon.fs.params_text)
        self.driver_params = ""
        self.params_path = PARAMS_PATH
        self._nvml = None
        if use_nvml and pynvml is None:
            log.debug("NVML unavailable (no pynvml); using the RM ABI")
        elif use_nvml:
            try:
                pynvml.nvmlInit()
                self._nvml = pynvml
                self.source = "nvml"
            except Exception as e:               # no library, no driver: RM instead
                log.debug("NVML unavailable (%s); using the RM ABI", e)
        if self._nvml is None:
            self.source = "rm"

    @property
    def nvml(self):
        """The initialised pynvml module, or None (the RM ABI inventory)."""
        return self._nvml

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def poll(self, proc_memory: bool = True) -> list[GpuInfo]:
        self.driver_params = read_params(self.params_path)
        if self._nvml is not None:
            return self._poll_nvml(proc_memory)
        return self._poll_rm(proc_memory)

    # ----------------------------------------------------------------- NVML
    def _poll_nvml(self, proc_memory: bool) -> list[GpuInfo]:
        nv = self._nvml
        out = []
        try:
            v = nv.nvmlSystemGetDriverVersion()
            self.driver_version = v.decode() if isinstance(v, bytes) else v
        except Exception:
            pass
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            uuid = nv.nvmlDeviceGetUUID(h)
            pci = nv.nvmlDeviceGetPciInfo(h).busId
            name, uuid, pci = (x.decode() if isinstance(x, bytes) else x for x in (name, uuid, pci))
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                minor = nv.nvmlDeviceGetMinorNumber(h)
            except Exception:
                minor = i
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                util = None
            procs = {}
            if proc_memory:
                try:
                    for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                        procs[p.pid] = procs.get(p.pid, 0) + (p.usedGpuMemory or 0)
                except Exception:
                    pass
            out.append(GpuInfo(i, uuid, name, _norm_pci(pci), mem.total, mem.used, minor,
                               utilization=util, proc_memory=procs, source="nvml"))
        return out

    # ------------------------------------------------------------------- RM
    def _poll_rm(self, proc_memory: bool) -> list[GpuInfo]:
        try:
            client = RmClient(self.dev_prefix)
        except (NoDeviceError, FileNotFoundError):
            return []
        out = []
        self.driver_version = getattr(client, "version", "") or self.driver_version
        with client:
            gpus = client.open_gpus() if client.cards else []
            for g in gpus:
                c = g.card
                total = c.fb_size
                used = 0
                try:
                    t, free = g.vid_heap_info()
                    total = total or t
                    used = max(0, t - free)
                except (RmError, OSError) as e:
                    log.debug("VID_HEAP INFO on GPU %d: %s", c.index, e)
                procs: dict[int, int] = {}
                if proc_memory:
                    try:
                        pids = [p for p in g.pids() if p]
                        if pids:
                            procs = {p: b for p, b in g.pid_vidmem(pids[:32]).items() if b}
                            for k in range(32, len(pids), 32):
                                procs.update({p: b for p, b in g.pid_vidmem(pids[k:k + 32]).items() if b})
                    except (RmError, OSError) as e:
                        log.debug("per-process memory on GPU %d: %s", c.index, e)
                    procs.pop(os.getpid(), None)
                out.append(GpuInfo(c.index, synth_uuid(c.pci), gpu_name(c, g) or
                                   f"{c.vendor_id:04x}:{c.device_id:04x}", c.pci, total, used,
                                   c.minor, gpu_id=c.gpu_id, uuid_synthesized=True,
                                   proc_memory=procs, source="rm"))
        return out


def _norm_pci(bus_id: str) -> str:
    """NVML writes 00000000:01:00.0; keep the 4-digit domain form."""
    parts = bus_id.lower().split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


def over_quota(slices, gpus: list[GpuInfo], slack: int = 0) -> list[dict]:
    """Slices whose processes hold more FB, by the driver's own per-process
    figures, than the slice's limit on that GPU.

    slices: iterable of (container, kernel Slice) with .pids and .gpus
    (GpuUsage with real_minor and mem_limit).  Returns one dict per finding:
    container, gpu (container index), real_minor, limit, driver_used,
    kernel_used, pids (the slice's pids holding memory on that GPU)."""
    by_minor = {g.minor: g for g in gpus}
    found = []
    for container, ks in slices:
        if not ks.pids:
            continue
        for gu in ks.gpus:
            g = by_minor.get(gu.real_minor)
            if g is None or not g.proc_memory:
                continue
            holders = {p: g.proc_memory[p] for p in ks.pids if p in g.proc_memory}
            used = sum(holders.values())
            if used > gu.mem_limit + slack:
                found.append({"container": container, "gpu": gu.index, "real_minor": gu.real_minor,
                              "limit": gu.mem_limit, "driver_used": used,
                              "kernel_used": gu.mem_used, "pids": sorted(holders)})
    return found
