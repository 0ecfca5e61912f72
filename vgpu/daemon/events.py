"""The events of vgpud's API (docs/api.md, "Events"), owned by the slice
manager (``SliceManager.events``): the subscribers' channels, the fan-out
of each event to them, and vgpu.ko's events as the API names them.

A subscriber that cannot keep up (its channel full) is dropped with a
warning, never waited for: publishing is synchronous and never blocks the
operation that publishes.
"""

from __future__ import annotations

import logging
import time

import trio

from vgpu.abi import uapi
from vgpu.common.values import format_size

log = logging.getLogger("vgpud.slices")        # the manager's, whose part this is


class EventBus:
    """The API's event subscribers and what is published to them."""

    def __init__(self):
        self._subs: set = set()

    def subscribe(self, size: int = 256):
        """A new subscriber: the receiving end of its channel (size events
        buffered)."""
        send, recv = trio.open_memory_channel(size)
        self._subs.add(send)
        return recv

    def publish(self, type_: str, container: str | None, **kw) -> None:
        ev = {"type": type_, "container": container, "time": time.time(), **kw}
        for s in list(self._subs):
            try:
                s.send_nowait(ev)
            except trio.WouldBlock:
                log.warning("event subscriber too slow: dropped")
                s.close()
                self._subs.discard(s)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subs.discard(s)

    def kernel(self, ev, container: str | None) -> str:
        """Publish an event of vgpu.ko (a messages.Event) of the slice of
        container (None: a slice no record has), under its API name, which
        is returned."""
        kw = {"slice_id": ev.slice_id}
        if ev.pid is not None:
            kw["pid"] = ev.pid
        if ev.gpu is not None:
            kw["gpu"] = ev.gpu
        if ev.size is not None:
            kw["size"] = ev.size
        t = uapi.EVENT_API_NAMES.get(ev.type, f"kernel-{ev.type}")
        if t == "alloc-refused":
            log.debug("allocation of %s refused in slice of %s (GPU %s)",
                      format_size(ev.size or 0), container, ev.gpu)
        if t == "slice-quarantined":
            log.warning("slice of %s quarantined: pid %s unmapped a call's parameter page "
                        "while the driver ran; every open and call of the slice is refused "
                        "until it is deleted", container, ev.pid)
        self.publish(t, container, **kw)
        return t


__all__ = ["EventBus"]
