"""``vgpuctl trace``'s recording (docs/trace.md): the output file (created,
gzip-compressed for .gz, stdout for "-"), each line written and flushed as
it comes, the records copied until --count, --seconds, a stop signal or the
stream's end, the sequence gaps counted, and SIGINT/SIGTERM held except
while waiting for vgpud, so that no line is half written before the trailer.
Standard library only."""
from __future__ import annotations

import contextlib
import gzip
import signal
import sys
import time

from vgpu.abi import trace
from vgpu.common import apiclient as ac

__all__ = ["copy_records", "open_output", "emit_line", "SeqGaps", "StopSignals"]


def copy_records(records, out, seqs, o, sig) -> tuple[str | None, Exception | None]:
    """Copy records to out until --count, --seconds, a stop signal, the
    stream's end or a failure of the stream -> (vgpud's reason for ending
    it, or None; the failure, or None)."""
    end = None if o.get("seconds") is None else time.monotonic() + o["seconds"]
    try:
        while o.get("count") is None or seqs.records < o["count"]:
            try:
                with sig.open():
                    item = records.read(end)
            except ac.ApiTimeout:
                if end is None:
                    raise
                return None, None                   # --seconds elapsed
            if item is None or item.get("end") is True:
                return (item or {}).get("reason"), None
            emit_line(out, trace.dumps(item))
            seqs.add(item.get("seq"))
    except KeyboardInterrupt:
        pass                                        # Ctrl-C or SIGTERM: a normal stop
    except ac.ClientError as e:
        return None, e                              # the trailer still goes first
    return None, None


def open_output(path: str, force: bool):
    """FILE, created (never replaced unless force), gzip-compressed when it
    ends in .gz; "-" is stdout."""
    if path == "-":
        return sys.stdout
    mode = "w" if force else "x"      # "x": a file made since our check is not clobbered
    if path.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def emit_line(out, line: str) -> None:
    out.write(line + "\n")
    out.flush()         # gzip: a sync flush, the file so far is readable after a crash


class SeqGaps:
    """Records written and the ones lost by their sequence numbers (as
    vgpu.abi.trace.Trace.lost counts them: every number missing between the
    lowest and the highest)."""

    def __init__(self):
        self.records = 0
        self.lo = self.hi = None

    def add(self, seq) -> None:
        self.records += 1
        if isinstance(seq, int) and not isinstance(seq, bool):
            self.lo = seq if self.lo is None else min(self.lo, seq)
            self.hi = seq if self.hi is None else max(self.hi, seq)

    def lost(self) -> int:
        if self.lo is None:
            return 0
        return max(0, self.hi - self.lo + 1 - self.records)


class StopSignals:
    """SIGINT and SIGTERM raise KeyboardInterrupt; with ``guard`` they are
    held (blocked) except inside ``open()``, and one that comes while they
    are held after the last ``open()`` is dropped: the stop is under way."""

    def __init__(self, guard: bool):
        self.signal = signal
        self.sigs = {signal.SIGINT, signal.SIGTERM}
        self.guard = guard and hasattr(signal, "pthread_sigmask")
        self.old: dict = {}

    def __enter__(self) -> "StopSignals":
        signal = self.signal
        try:
            self.old[signal.SIGTERM] = signal.signal(signal.SIGTERM, signal.default_int_handler)
        except ValueError:              # not the main thread: nothing to take over
            self.guard = False
            return self
        if self.guard:
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.sigs)
        return self

    def open(self):
        @contextlib.contextmanager
        def opened():
            if not self.guard:
                yield
                return
            try:
                # a signal held until now is raised here, by the unblocking
                self.signal.pthread_sigmask(self.signal.SIG_UNBLOCK, self.sigs)
                yield
            finally:
                self.signal.pthread_sigmask(self.signal.SIG_BLOCK, self.sigs)
        return opened()

    def __exit__(self, *exc) -> None:
        signal = self.signal
        if self.guard:
            # what is still held goes to a handler that ignores it
            held = {s: signal.signal(s, lambda *a: None) for s in self.sigs}
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
            for s, h in held.items():
                signal.signal(s, h)
        for s, h in self.old.items():
            signal.signal(s, h)
