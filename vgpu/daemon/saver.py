"""The state file kept up to date with the slice manager's records, owned
by the manager (``SliceManager.saver``): a save that fails is marked and
retried in the background, never failed to the caller.

A failure to write (disk full, a read-only or vanished directory: OSError)
does not fail the operation that saved: by the time a record changes,
vgpu.ko has already applied the change, and an API error would tell the
client it had not (a retry of a create then finds "exists", a retried
delete "not-found").  So the change stands, the state is marked unsaved
(``error``, shown by ``status``), a warning names the path and errno, and
``run`` (vgpud's state-saver task) writes it again with a back-off until
it succeeds.  Should vgpud die before that, the next one adopts the
kernel's slices that the file lacks (reconcile).
"""

from __future__ import annotations

import errno
import logging
import time
from typing import Callable

import trio

log = logging.getLogger("vgpud.slices")        # the manager's, whose part this is


class StateSaver:
    """Saves ``doc(pending)`` (the state document of the records, with a
    record written ahead) to ``store`` (vgpu.daemon.state.StateStore);
    ``lock``: the manager's, held by ``run`` while it saves again."""

    def __init__(self, store, lock: trio.Lock, doc: Callable[..., dict]):
        self.store = store
        self.lock = lock
        self._doc = doc
        #: the last failed save ({"errno", "message", "path", "since"}),
        #: None when the file is up to date
        self.error: dict | None = None
        self.failures = 0
        #: set while the file lags the records (``run`` waits on it)
        self.dirty = trio.Event()

    def save(self, pending=None) -> bool:
        """Write the state file; returns whether it was written (a failure
        is marked and retried by ``run``)."""
        doc = self._doc(pending)
        try:
            self.store.save(doc)
        except OSError as e:
            name = errno.errorcode.get(e.errno or 0, str(e.errno))
            new = {"errno": name, "message": e.strerror or str(e), "path": str(self.store.path)}
            if self.error is None or \
                    {k: self.error[k] for k in new} != new:
                log.warning("state: cannot save %s: %s (%s); vgpu.ko has the change, the "
                            "file does not: retrying in the background (vgpuctl status "
                            "shows it)", self.store.path, new["message"], name)
                new["since"] = self.error["since"] if self.error else time.time()
                self.error = new
            self.failures += 1
            self.dirty.set()
            return False
        if self.error is not None:
            log.warning("state: saved %s again after %d failed attempt(s) (%s since %s)",
                        self.store.path, self.failures, self.error["errno"],
                        time.strftime("%H:%M:%S", time.localtime(self.error["since"])))
        self.error = None
        self.failures = 0
        return True

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED,
                  delays: tuple[float, float] = (1.0, 30.0)) -> None:
        """vgpud's state-saver: while a save has failed, try again (under the
        manager's lock, so the file never lags a record that a concurrent
        operation is changing), first after delays[0] seconds, doubling up to
        delays[1]."""
        task_status.started()
        while True:
            await self.dirty.wait()
            delay = delays[0]
            while self.error is not None:
                await trio.sleep(delay)
                async with self.lock:
                    if self.error is not None and self.save():
                        break
                delay = min(delay * 2, delays[1])
            if self.error is None:
                self.dirty = trio.Event()


__all__ = ["StateSaver"]
