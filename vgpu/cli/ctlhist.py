"""vgpuctl history, report and forecast: the usage history (docs/history.md)
as text, CSV or an HTML page, and a label's forecast.  A module of its own
so that only these commands pay for the renderers' imports (vgpu.cli.histview,
vgpu.cli.report): the table in vgpu.cli.ctl names the commands, and the
--since/--until converter ``c_time``, by reference (``resolve`` in
vgpu.cli.ctlargv).  Standard library only."""
from __future__ import annotations

import os
import shutil
import sys
import time

from vgpu.cli import histview, report
from vgpu.cli.ctlargv import EXIT_ERROR, EXIT_OK, UsageError, invalid
from vgpu.cli.ctlrender import emit_json, err, fmt_time, pct_text, print_table, size_text
from vgpu.common.files import atomic_write
from vgpu.common.values import BadValue


def c_time(text: str) -> tuple[str, float]:
    """--since/--until: histview.parse_time's times (-24h, yesterday, 08:00,
    2026-12-01T08:00, @<unix seconds>); the text is kept for check_range's
    message."""
    return text, histview.parse_time(text)


def history_doc(client, o, columns: int = 120) -> dict:
    """The ``history`` op's document for the selectors and range of o
    (--since default -24h, --until now; --step default: a round step for
    ``columns`` columns)."""
    now = time.time()
    since_text, since = o.get("since", (None, now - 86400.0))
    until_text, until = o.get("until", (None, now))
    try:
        histview.check_range(since, until, since_text, until_text)
    except BadValue as e:
        label = "--until" if until_text is not None else "--since"
        raise invalid(label, e.value, e) from None
    step = o.get("step") or histview.auto_step(since, until, columns)
    args = {"since": since, "until": until, "step": step}
    for k, key in (("container", "container"), ("labels", "label"), ("gpu", "gpu")):
        if k in o:
            args[key] = o[k]
    return client.request("history", **args)


def cmd_history(client, o):
    if o.get("csv") and o["json"]:
        raise UsageError("history: give --json or --csv, not both")
    tty = sys.stdout.isatty()
    width = _term_width() if tty else 100
    doc = history_doc(client, o, max(40, width - 40))
    if o["json"]:
        return emit_json(doc)
    if o.get("csv"):
        sys.stdout.write(histview.render_csv(doc))
        return EXIT_OK
    if not doc.get("series"):
        print(f"no history between {fmt_time(doc.get('since'))} and "
              f"{fmt_time(doc.get('until'))} for this selection")
        return EXIT_OK
    sys.stdout.write(histview.render_terminal(doc, width, color=tty and
                                              not os.environ.get("NO_COLOR")))
    return EXIT_OK


def _term_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def cmd_report(client, o):
    doc = history_doc(client, o, 480)
    page = report.render_html(doc, generated=time.time())
    path = o["html"]
    if path == "-":
        sys.stdout.write(page)
        return EXIT_OK
    try:
        atomic_write(path, page)
    except OSError as e:
        err(f"report: cannot write {path}: {e.strerror or e}")
        return EXIT_ERROR
    if o["json"]:
        return emit_json({"path": path, "series": len(doc.get("series") or []),
                          "bytes": len(page.encode())})
    print(f"wrote {path} ({len(doc.get('series') or [])} series)")
    return EXIT_OK


def cmd_forecast(client, o):
    if o.get("reset") and o.get("resume"):
        raise UsageError("forecast: give --reset or --resume, not both")
    args = {"label": o["label"]}
    if o.get("reset") or o.get("resume"):
        if "hours" in o:
            raise UsageError("forecast: --hours has no use with --reset or --resume")
        args["reset" if o.get("reset") else "resume"] = True
        res = client.request("forecast", **args)
        if o["json"]:
            return emit_json(res)
        if o.get("reset"):
            done = res.get("restored") or []
            print(f"{o['label']}: configured values restored"
                  f"{' for ' + ', '.join(map(str, done)) if done else ' (nothing was adjusted)'}"
                  f"; no new adjustment until --resume or a restart of vgpud")
        else:
            print(f"{o['label']}: forecast adjustments resumed")
        return EXIT_OK
    if "hours" in o:
        args["hours"] = o["hours"]
    res = client.request("forecast", **args)
    if o["json"]:
        return emit_json(res)
    print_forecast(res)
    return EXIT_OK


def print_forecast(res: dict) -> None:
    h = res.get("history") or {}
    n = h.get("samples") or 0
    print(f"forecast for {res.get('label')}: {res.get('slices', 0)} slice(s) now; "
          f"history: {n} point(s)"
          + (f" from {fmt_time(h.get('first'))} to {fmt_time(h.get('last'))}" if n else ""))
    rows = []
    for p in res.get("points") or []:
        m, g = p.get("memory") or {}, p.get("gpu") or {}
        t = p.get("t")
        rows.append([time.strftime("%a %H:%M", time.localtime(t))
                     if isinstance(t, (int, float)) else "-",
                     histview.fmt_bytes(m.get("p50")), histview.fmt_bytes(m.get("p95")),
                     histview.fmt_share(g.get("p50")), histview.fmt_share(g.get("p95")),
                     f"{g.get('confidence', 0):.2f}" if isinstance(g.get("confidence"),
                                                                   (int, float)) else "-",
                     str(g.get("source", "-"))])
    if rows:
        print()
        print_table(["TIME", "MEM P50", "MEM P95", "GPU P50", "GPU P95", "CONF", "FROM"], rows)
    rec = res.get("recommended") or {}
    rm, rc = rec.get("memory") or {}, rec.get("compute") or {}
    print()
    print(f"recommended: memory {size_text(rm.get('bytes'))} for the label"
          + (f" ({size_text(rm.get('per_slice'))} a slice)" if rm.get("per_slice") is not None else "")
          + f", compute {pct_text(rc.get('percent'))} of a GPU"
          + (f" ({pct_text(rc.get('per_slice'))} a slice)" if rc.get("per_slice") is not None else "")
          + (f"; confidence {rc.get('confidence'):.2f}"
             if isinstance(rc.get("confidence"), (int, float)) else ""))
    adj = res.get("adjustments") or []
    if adj:
        print("adjusted now: " + ", ".join(f"{a.get('container')} compute "
                                           f"{pct_text(a.get('compute'))}" for a in adj))
