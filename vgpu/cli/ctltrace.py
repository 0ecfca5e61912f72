"""vgpuctl trace: record a slice's calls to a file (docs/trace.md).  A
module of its own so that only this command pays for vgpu.abi.trace's
imports (ctypes, dataclasses, the RM names): the table in vgpu.cli.ctl
names ``cmd_trace`` by reference (``resolve`` in vgpu.cli.ctlargv).
Standard library only."""
from __future__ import annotations

import os
import sys

from vgpu.abi import trace
from vgpu.cli.ctlargv import EXIT_ERROR, EXIT_OK
from vgpu.cli.ctlrender import err, plural
from vgpu.cli.tracefile import SeqGaps, StopSignals, copy_records, emit_line, open_output
from vgpu.common.values import quote


def cmd_trace(client, o):
    """Record a slice's calls (docs/trace.md) to --output: the header, each
    record as it comes (flushed: a crash loses nothing written), and on any
    stop a trailer with the counts; then one summary line on stderr."""
    path = o["output"]
    if path != "-" and not o.get("force") and os.path.lexists(path):
        err(f"trace: {quote(path)} exists (--force overwrites it)")
        return EXIT_ERROR
    header, records = client.trace(o["container"])
    seqs = SeqGaps()
    with records:
        try:
            out = open_output(path, bool(o.get("force")))
        except OSError as e:
            err(f"trace: cannot write {quote(path)}: {e.strerror or e}")
            return EXIT_ERROR
        try:
            # A stop signal is taken only while waiting for vgpud, so that
            # no line is half written before the trailer; not on stdout,
            # whose reader may stop reading while Ctrl-C must still work
            with StopSignals(guard=out is not sys.stdout) as sig:
                emit_line(out, trace.dumps(header))
                reason, failure = copy_records(records, out, seqs, o, sig)
                records.close()                     # vgpud stops tracing now
                emit_line(out, trace.dumps({"end": True, "records": seqs.records,
                                    "lost": seqs.lost()}))
                if out is not sys.stdout:
                    out.close()
        except BrokenPipeError:
            raise                                   # main's: the reader went away
        except OSError as e:
            err(f"trace: writing {quote(path)}: {e.strerror or e}")
            return EXIT_ERROR
        finally:
            if out is not sys.stdout and not out.closed:
                try:
                    out.close()
                except OSError:
                    pass
    where = "stdout" if path == "-" else path
    sys.stderr.write(f"trace of {o['container']}: {plural(seqs.records, 'record')}, "
                     f"{seqs.lost()} lost -> {where}{f' ({reason})' if reason else ''}\n")
    if failure is not None:
        raise failure
    return EXIT_OK
