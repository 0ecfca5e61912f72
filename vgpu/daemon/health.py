"""Per-GPU health, from NVML's XID events.

A GPU that reports a critical XID (an Xid the driver logs for a fault of the
GPU, its memory or its bus) is marked faulty for as long as vgpud runs:
``gpus`` reports it (``fault``), ``vgpuctl gpus`` shows it, and the device
plugin advertises that GPU's devices Unhealthy, so the kubelet places no new
container on it while the others stay schedulable (docs/kubernetes.md,
"Health").  Restarting vgpud (once the GPU was looked at, or reset)
clears it, as restarting NVIDIA's own device plugin does.

Which XIDs do not count: those the driver raises for an application's own
error, which say nothing of the GPU (the list NVIDIA's k8s-device-plugin
skips by default): 13 (graphics engine exception), 31 (GPU memory page
fault), 43 (GPU stopped processing), 45 (preemptive cleanup), 68 (video
decoder exception), 109 (context switch timeout).

Only where the inventory runs on NVML (a real driver with libnvidia-ml):
the RM-ABI inventory of the simulated GPU has no XID events, and there every
GPU stays healthy.  Verified against a stand-in for NVML only
(tests/host/test_health.py): no GPU here raises an XID.

Everything in ``XidWatch.run`` blocks; vgpud runs it in a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("vgpud.health")

#: XIDs of an application's own error (see the module doc): not the GPU's
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
#: how long one wait for an event lasts (ms): the longest a stop waits
WAIT_MS = 500


@dataclass(frozen=True)
class Fault:
    """A GPU's first critical XID since vgpud started: the XID and when
    (wall-clock seconds)."""
    xid: int
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {"xid": self.xid, "at": self.at}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class XidWatch:
    """Watches every GPU NVML lists for critical XIDs; ``on_fault(uuid,
    xid)`` for each one that counts (called from the watching thread).
    ``nvml``: the pynvml module (initialised by the inventory)."""

    def __init__(self, nvml: Any, on_fault: Callable[[str, int], None]):
        self.nvml = nvml
        self.on_fault = on_fault
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        """Register for XID events on every GPU and wait for them until
        stop(); returns early when no GPU can be watched or NVML fails (each
        said in the log)."""
        nv = self.nvml
        try:
            es = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            log.warning("GPU health: NVML has no event set (%s): XIDs are not watched", e)
            return
        try:
            watched = self._register(es)
            if not watched:
                return
            log.info("GPU health: watching XIDs of %s", ", ".join(watched))
            while not self.stopping.is_set():
                try:
                    ev = nv.nvmlEventSetWait_v2(es, WAIT_MS)
                except nv.NVMLError as e:
                    if getattr(e, "value", None) == nv.NVML_ERROR_TIMEOUT:
                        continue
                    log.warning("GPU health: waiting for XIDs failed (%s): no longer "
                                "watched; GPUs keep the health they had", e)
                    return
                self._event(ev)
        finally:
            try:
                nv.nvmlEventSetFree(es)
            except nv.NVMLError:
                pass

    def _register(self, es) -> list[str]:
        nv = self.nvml
        watched = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nv.nvmlDeviceGetUUID(h))
            try:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, es)
            except nv.NVMLError as e:
                log.warning("GPU %d (%s): no XID events (%s): its health is not watched",
                            i, uuid, e)
                continue
            watched.append(uuid)
        return watched

    def _event(self, ev) -> None:
        nv = self.nvml
        if ev.eventType != nv.nvmlEventTypeXidCriticalError:
            return
        xid = int(ev.eventData)
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(ev.device))
        except nv.NVMLError as e:
            log.warning("GPU health: XID %d on a GPU NVML cannot name (%s): ignored", xid, e)
            return
        if xid in APPLICATION_XIDS:
            log.info("GPU %s: XID %d, an application's error: the GPU stays healthy", uuid, xid)
            return
        log.error("GPU %s: XID %d: marked unhealthy until vgpud restarts (the device plugin "
                  "places no new container on it)", uuid, xid)
        self.on_fault(uuid, xid)


def record_fault(faults: dict[str, Fault], uuid: str, xid: int) -> None:
    """Keep a GPU's first fault (the one that made it unhealthy).  One dict
    store: safe from the watching thread under the GIL."""
    faults.setdefault(uuid, Fault(xid, time.time()))
