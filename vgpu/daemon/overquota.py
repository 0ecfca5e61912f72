"""What vgpud does about a slice over its quota by the driver's count
(vgpu.daemon.inventory.over_quota finds them), owned by the slice manager
(``SliceManager.overquota``): as [node] over_quota_action says, log it,
publish an ``over-quota`` event too, or also kill the slice's processes.
Each (container, GPU) is logged and published once while it stays over
(a kill is repeated each time it is found)."""

from __future__ import annotations

import logging
import os
import signal

from vgpu.common.values import format_size
from vgpu.daemon.events import EventBus

log = logging.getLogger("vgpud.slices")        # the manager's, whose part this is


class OverQuota:
    def __init__(self, events: EventBus):
        self.events = events
        self._reported: set = set()

    def handle(self, found: list[dict], action: str) -> None:
        """Act on over_quota's findings (action: "log", "event" or "kill")."""
        keys = set()
        for f in found:
            key = (f["container"], f["gpu"])
            keys.add(key)
            if key in self._reported and action != "kill":
                continue
            self._reported.add(key)
            log.warning("over quota: slice of %s holds %s on GPU %d by the driver's count, "
                        "limit %s (kernel counts %s); pids %s", f["container"],
                        format_size(f["driver_used"]), f["gpu"], format_size(f["limit"]),
                        format_size(f["kernel_used"]), f["pids"])
            if action in ("event", "kill"):
                self.events.publish("over-quota", f["container"],
                                    **{k: v for k, v in f.items() if k != "container"})
            if action == "kill":
                for pid in f["pids"]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        log.warning("killed pid %d of %s (over quota)", pid, f["container"])
                    except OSError:
                        pass
        self._reported &= keys


__all__ = ["OverQuota"]
