"""The tracers of the slices (docs/trace.md): who listens to which slice's
trace, and the stream of one tracer.

Tracers are counted per slice: the first turns the slice's
VGPU_A_SLICE_TRACE on, the last one to leave turns it off, a slice recreated
while traced is recreated traced, and the first reconcile after vgpu.ko
appears turns off tracing nobody here asked for (a vgpud that died
mid-trace).  When vgpu.ko goes away every tracer ends ("vgpu.ko unloaded")
and its count is dropped.  Each tracer reads the "trace" group on a netlink
socket of its own from the event loop and hands its slice's records to the
API's writer through a bounded channel: a client too slow for it loses
records, never the daemon's time.

Kernel refusals are raised as the kernel port raises them; vgpu.daemon.ops
words them for the API.
"""

from __future__ import annotations

import datetime
import errno
import logging
import socket
from dataclasses import dataclass, field

import trio

from vgpu.abi.trace import header_json, record_json
from vgpu.daemon.kport import KernelUnavailable

log = logging.getLogger("vgpud.trace")

#: trace records decoded per turn of the event loop (pump)
TRACE_BATCH = 64


class _WriterGone(Exception):
    """A tracer's connection went away while its records were handed over."""


@dataclass
class SliceTrace:
    """The API's tracers of one slice: vgpu.ko traces it while ``count`` >
    0; ``gone`` is set when the daemon deletes (or loses) the slice, or
    vgpu.ko goes away (``why`` says which to the tracers)."""
    count: int = 0
    gone: trio.Event = field(default_factory=trio.Event)
    why: str = "slice deleted"


class Tracing:
    def __init__(self, mgr):
        self.mgr = mgr
        self.slices: dict[int, SliceTrace] = {}     # slice id -> its tracers
        # held across the kernel call that turns a slice's tracing on or off:
        # a tracer leaving and one arriving must reach vgpu.ko in that order
        self.lock = trio.Lock()

    def traced(self) -> set[int]:
        return {sid for sid, st in self.slices.items() if st.count}

    def gone(self, sid: int) -> None:
        """Slice sid is deleted or moved: its tracers end."""
        st = self.slices.get(sid)
        if st is not None:
            st.gone.set()

    async def kernel_lost(self) -> int:
        """vgpu.ko went away: every tracer ends (their sockets' group is gone
        with the family: they would wait forever) and their counts go with
        them, so the slices are recreated untraced.  Returns the slices."""
        async with self.lock:                   # not while one turns tracing on
            n = len(self.slices)
            for st in self.slices.values():
                st.why = "vgpu.ko unloaded"
                st.gone.set()
            self.slices.clear()
        return n

    async def join(self, c: str, sid: int):
        """Count one more tracer of slice sid; the first turns its tracing
        on.  -> (its SliceTrace, the kernel's Slice if it was asked)."""
        ks = None
        async with self.lock:
            st = self.slices.get(sid)
            if st is None:
                st = SliceTrace()
                ks = await self.mgr.kport.call(lambda k: k.slice_set(sid, trace=True))
                # no checkpoint from the kernel's answer to here: a
                # cancellation cannot leave the slice traced and uncounted
                self.slices[sid] = st
                self.mgr.keep(ks)
                log.info("slice %d of %s: tracing on", sid, c)
            st.count += 1
        if self.mgr.by_id.get(sid) != c:
            st.gone.set()                           # deleted while we asked
        return st, ks

    async def leave(self, c: str, sid: int, st: SliceTrace) -> None:
        """One tracer fewer; the last one turns the slice's tracing off.
        Shielded: it runs when the tracer's connection is cancelled, and a
        slice must not stay traced because its client went away.  A tracer
        of a vgpu.ko that went away (``kernel_lost`` dropped its count)
        leaves nothing to turn off."""
        with trio.CancelScope(shield=True):
            async with self.lock:
                if self.slices.get(sid) is not st:
                    return
                st.count -= 1
                if st.count > 0:
                    return
                del self.slices[sid]
                try:
                    ks = await self.mgr.kport.call(lambda k: k.slice_set(sid, trace=False))
                except (KernelUnavailable, trio.TooSlowError) as ex:
                    log.error("slice %d of %s: turning tracing off: %s (the next start of "
                              "vgpud turns it off)", sid, c, ex or "timed out")
                    return
                except OSError as ex:
                    if ex.errno != errno.ENOENT:    # ENOENT: the slice went with its tracing
                        log.error("slice %d of %s: turning tracing off: %s", sid, c, ex)
                    return
                self.mgr.keep(ks)
                log.info("slice %d of %s: tracing off", sid, c)

    async def untrace_orphan(self, sid: int, ks) -> None:
        """Turn off the tracing of slice sid, which no tracer of this daemon
        wants: a vgpud that crashed mid-trace must not leave vgpu.ko copying
        every call of a slice forever."""
        try:
            new = await self.mgr.kport.call(lambda k: k.slice_set(sid, trace=False))
        except (KernelUnavailable, trio.TooSlowError) as ex:
            log.error("turning off the tracing of slice %d: %s", sid, ex)
            return
        except OSError as ex:
            if ex.errno != errno.ENOENT:
                log.error("turning off the tracing of slice %d: %s", sid, ex)
            return
        self.mgr.keep(new)
        log.warning("slice %d (%s) was traced with no tracer (a vgpud that stopped "
                    "mid-trace?): tracing turned off", sid,
                    (ks.name if ks is not None else "") or "no name")

    def header(self, rec, ks, release: str, vgpu_version: str) -> dict:
        """The trace file's header (docs/trace.md, vgpu.abi.trace.header_json):
        the slice's GPUs with their limits as vgpu.ko has them (as wanted
        when it was not asked), the driver release the inventory read."""
        ks = ks if ks is not None else self.mgr.kslices.get(rec.slice_id)
        if ks is not None and ks.gpus:
            gpus = [{"index": g.index, "memory_limit": g.mem_limit} for g in ks.gpus]
        else:
            try:
                lim = rec.limits(self.mgr.in_force(rec))
            except ValueError:
                lim = {}
            gpus = [{"index": i, "memory_limit": b} for i, b in sorted(lim.items())]
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return header_json(rec.container, rec.slice_id, gpus, release=release,
                           started=started, host=socket.gethostname(), vgpu_version=vgpu_version)

    async def pump(self, c: str, sid: int, ts, st: SliceTrace, send) -> None:
        """The kernel's records of slice sid -> ``send``, until cancelled or
        the slice is gone.  The socket is read on the event loop as soon as
        it is readable: its buffer is what the kernel fills, and the
        channel (bounded) is what the client's pace empties; a full channel
        drops the record for this tracer only (its file shows the gap).
        At most TRACE_BATCH records are decoded per turn, with a checkpoint
        between turns, so a burst from vgpu.ko does not hold the event loop
        (the API and vgpufs) for as long as it lasts."""
        sent = dropped = overruns = 0
        reason = None

        def take() -> bool:
            nonlocal sent, dropped, overruns
            batch = ts.ready(TRACE_BATCH)
            for r in batch:
                if r.slice_id != sid:
                    continue                        # another slice's tracer gets those
                try:
                    send.send_nowait({"record": record_json(r)})
                    sent += 1
                except trio.WouldBlock:
                    dropped += 1
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    raise _WriterGone from None
            if ts.overruns > overruns:
                if not overruns:
                    log.warning("trace of %s: the kernel's records came faster than vgpud "
                                "read them; some were lost (the file shows the gaps)", c)
                overruns = ts.overruns
            return len(batch) >= TRACE_BATCH      # more may be waiting

        try:
            async with send:
                async with trio.open_nursery() as n:
                    async def watch_gone():
                        await st.gone.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(watch_gone)
                    try:
                        while True:
                            await trio.lowlevel.wait_readable(ts.fileno())
                            while take():
                                await trio.sleep(0)
                    except _WriterGone:
                        pass
                    except OSError as ex:
                        reason = f"the trace socket failed: {ex}"
                    n.cancel_scope.cancel()
                if st.gone.is_set():
                    try:
                        while take():               # what the slice did before it went
                            pass
                    except (OSError, _WriterGone):
                        pass
                    reason = st.why
                if reason is not None:
                    try:
                        await send.send({"end": True, "reason": reason})
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
        finally:
            log.info("trace of %s (slice %d) ended%s: %d record(s) sent, %d dropped (client "
                     "too slow), %d socket overrun(s)", c, sid,
                     f" ({reason})" if reason else "", sent, dropped, overruns)
