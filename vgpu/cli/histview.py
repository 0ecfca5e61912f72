"""Usage history for people (docs/history.md): what ``vgpuctl history``
prints.  Standard library only (and vgpu.common.values), no I/O: every function
takes a *history document* and returns text.

The document's shape, its normalizer and its builders (``doc_from_rows``,
``expand_windows``, ``auto_step``) are vgpu.common.histdoc's, shared with
the daemon; they are importable from here too.

Here: ``render_terminal`` (sparklines), ``render_csv``, ``parse_time`` and
``check_range`` for ``--since``/``--until``, ``auto_step``; and the helpers
vgpu.cli.report shares (``normalize``, ``time_ticks``, ``summarize``...).
"""

from __future__ import annotations

import csv
import datetime
import io
import math
import re
import textwrap
import time
from typing import Any, Mapping, Sequence

from vgpu.common.histdoc import (IDENTITY, ROW_FIELDS, auto_step, doc_from_rows,  # noqa: F401
                                 expand_windows, local_time, normalize, number, windows_for)
from vgpu.common.values import BadValue, format_size

SPARKS = "▁▂▃▄▅▆▇█"

__all__ = [
    "IDENTITY", "ROW_FIELDS", "SPARKS", "normalize", "doc_from_rows", "expand_windows",
    "windows_for", "sparkline", "render_terminal", "render_csv", "parse_time",
    "check_range", "auto_step", "time_ticks", "summarize", "series_title", "labels_text",
    "fmt_share", "fmt_bytes", "fmt_time", "row_durations", "doc_span", "to_datetime",
    "CSV_HEADER",
]

# ------------------------------------------------------------ figures
def fmt_bytes(n: Any) -> str:
    """Human bytes ("7.5 GiB"), "-" when unknown."""
    n = number(n)
    if n is None:
        return "-"
    n = int(round(n))
    if abs(n) >= 1 << 20:
        # at most 3 significant digits: 7.52 GiB, 123 MiB
        for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
            if abs(n) >= mult:
                x = n / mult
                text = f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"
                if "." in text:
                    text = text.rstrip("0").rstrip(".")
                return f"{text} {unit}"
    return format_size(n)


def fmt_share(x: Any) -> str:
    """A fraction of one GPU as a percentage: 0.314 -> "31%", 0.05 -> "5%",
    0.004 -> "0.4%"."""
    x = number(x)
    if x is None:
        return "-"
    p = x * 100
    if p != 0 and abs(p) < 1:
        return f"{p:.1f}%"
    return f"{p:.0f}%"


def labels_text(labels: Mapping[str, str]) -> str:
    """"k=v,k2=v2", sorted by key."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def series_title(s: Mapping, sep: str = "  ") -> str:
    """"web-1  slice 3  GPU 0" (the labels apart)."""
    parts = [s.get("container") or "?"]
    if s.get("slice_id") is not None:
        parts.append(f"slice {s['slice_id']}")
    gpu = s.get("gpu")
    parts.append(f"GPU {gpu}" if gpu is not None and gpu >= 0 else
                 f"GPU {s.get('gpu_uuid')}" if s.get("gpu_uuid") else "GPU ?")
    return sep.join(str(p) for p in parts)


def row_durations(rows: Sequence[Mapping]) -> list[float]:
    """How long each row stands for: its bucket (step), or for raw samples
    the time to the next one (at most three times the usual interval)."""
    ts = [r["t"] for r in rows]
    diffs = sorted(b - a for a, b in zip(ts, ts[1:]) if b > a)
    typical = diffs[len(diffs) // 2] if diffs else 60.0
    out = []
    for i, r in enumerate(rows):
        st = r.get("step")
        if st:
            out.append(float(st))
        elif i + 1 < len(rows) and 0 < ts[i + 1] - ts[i] <= 3 * typical:
            out.append(ts[i + 1] - ts[i])
        else:
            out.append(typical)
    return out


def summarize(s: Mapping) -> dict:
    """One series' figures: memory used (min, mean weighted by n, max),
    limit (min, max), peak use as a fraction of the limit, achieved share
    (min, mean over covered time, max), target (min, max; fraction of one
    GPU), refusals (sum, buckets with some, the last one's time), points."""
    rows = s.get("rows") or []

    def vals(f):
        return [r[f] for r in rows if r.get(f) is not None]

    used_mean = vals("mem_used")
    used_min = vals("mem_used_min") or used_mean
    used_max = vals("mem_used_max") or used_mean
    limits = [x for x in vals("mem_limit") if x > 0]
    w = [(r["mem_used"], r["n"] if r.get("n") and r["n"] > 0 else 1) for r in rows
         if r.get("mem_used") is not None]
    wsum = sum(n for _, n in w)
    mean = sum(v * n for v, n in w) / wsum if wsum else None
    ratio = []
    for r in rows:
        u = r.get("mem_used_max") if r.get("mem_used_max") is not None else r.get("mem_used")
        if u is not None and r.get("mem_limit"):
            ratio.append(u / r["mem_limit"])
    shares = vals("share")
    gt = sum(r["gpu_time_ns"] for r in rows if r.get("gpu_time_ns") is not None
             and r.get("covered_s"))
    cov = sum(r["covered_s"] for r in rows if r.get("gpu_time_ns") is not None
              and r.get("covered_s"))
    share_mean = gt / 1e9 / cov if cov else (sum(shares) / len(shares) if shares else None)
    targets = [bp / 10000 for bp in vals("compute_bp")]
    refs = [(r["t"], r["refusals"]) for r in rows if r.get("refusals")]
    return {
        "points": len(rows),
        "mem_used_min": min(used_min) if used_min else None,
        "mem_used_mean": mean,
        "mem_used_max": max(used_max) if used_max else None,
        "mem_limit_min": min(limits) if limits else None,
        "mem_limit_max": max(limits) if limits else None,
        "mem_peak_ratio": max(ratio) if ratio else None,
        "share_min": min(shares) if shares else None,
        "share_mean": share_mean,
        "share_max": max(shares) if shares else None,
        "target_min": min(targets) if targets else None,
        "target_max": max(targets) if targets else None,
        "refusals": sum(n for _, n in refs),
        "refusal_buckets": len(refs),
        "last_refusal": refs[-1][0] if refs else None,
        "first_t": rows[0]["t"] if rows else None,
        "last_t": rows[-1]["t"] if rows else None,
    }


def doc_span(doc: Mapping) -> tuple[float, float] | None:
    """The time range shown: the document's since/until, else the rows'."""
    lo, hi = doc.get("since"), doc.get("until")
    ts = [(r["t"], r["t"] + d) for s in doc["series"] if s["rows"]
          for r, d in zip(s["rows"], row_durations(s["rows"]))]
    if lo is None:
        lo = min((a for a, _ in ts), default=None)
    if hi is None:
        hi = max((b for _, b in ts), default=None)
    if lo is None or hi is None or hi <= lo:
        return None
    return float(lo), float(hi)


# ------------------------------------------------------------ sparklines
def sparkline(values: Sequence[float | None], lo: float = 0.0, hi: float | None = None) -> str:
    """One character per value, ▁ (lo) to █ (hi, default the largest
    value); None is a blank (no data).  Values outside [lo, hi] are clipped;
    when hi <= lo every value is ▁."""
    known = [v for v in values if v is not None]
    if hi is None:
        hi = max(known, default=lo)
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        elif hi <= lo:
            out.append(SPARKS[0])
        else:
            x = (min(max(v, lo), hi) - lo) / (hi - lo)
            out.append(SPARKS[int(round(x * (len(SPARKS) - 1)))])
    return "".join(out)


def _columns(rows: Sequence[Mapping], durs: Sequence[float], lo: float, hi: float, cols: int,
             field: str, how: str) -> list[float | None]:
    """The values of ``field`` resampled to ``cols`` columns over [lo, hi):
    a column takes the rows whose [t, t + duration) overlaps it, combined
    by ``how`` (max, mean, last); None where no row with a value does."""
    acc: list[list[float]] = [[] for _ in range(cols)]
    width = (hi - lo) / cols
    for r, d in zip(rows, durs):
        v = r.get(field)
        if v is None:
            continue
        a = int(math.floor((r["t"] - lo) / width))
        b = int(math.ceil((r["t"] + d - lo) / width)) - 1
        for c in range(max(a, 0), min(b, cols - 1) + 1):
            acc[c].append(v)
    out: list[float | None] = []
    for vs in acc:
        if not vs:
            out.append(None)
        elif how == "max":
            out.append(max(vs))
        elif how == "mean":
            out.append(sum(vs) / len(vs))
        else:
            out.append(vs[-1])
    return out


def _window_columns(ws: Sequence[Mapping], lo: float, hi: float, cols: int) -> str:
    width = (hi - lo) / cols
    cells = [False] * cols
    for w in ws:
        a = int(math.floor((w["start"] - lo) / width))
        b = int(math.ceil((w["end"] - lo) / width)) - 1
        for c in range(max(a, 0), min(b, cols - 1) + 1):
            cells[c] = True
    return "".join("━" if c else "·" for c in cells)


# ------------------------------------------------------------ times
def to_datetime(t: float, tz: datetime.tzinfo | None) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, tz)


def fmt_time(t: float, tz: datetime.tzinfo | None = None, seconds: bool = False) -> str:
    return to_datetime(t, tz).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


_TICK_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
               86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400)


def time_ticks(lo: float, hi: float, most: int = 8,
               tz: datetime.tzinfo | None = None) -> list[tuple[float, str]]:
    """Round times in [lo, hi] for an axis, at most ``most`` of them,
    aligned to local wall-clock hours and midnights: [(t, label)], the label
    "HH:MM", or the date ("Tue 01 Dec") at a midnight."""
    span = hi - lo
    if span <= 0:
        return []
    step = next((s for s in _TICK_STEPS if span / s <= most), None)
    if step is None:
        step = math.ceil(span / most / 86400) * 86400
    start_day = to_datetime(lo, tz).date()
    out = []
    if step < 86400:
        d = start_day
        while True:
            midnight = local_time(d, datetime.time(0), tz)
            if midnight > hi:
                break
            nxt = local_time(d + datetime.timedelta(days=1), datetime.time(0), tz)
            k = 0
            while True:
                t = midnight + k * step
                if t >= nxt or t > hi:
                    break
                if t >= lo:
                    out.append(t)
                k += 1
            d += datetime.timedelta(days=1)
    else:
        days = int(step // 86400)
        d = start_day
        while True:
            t = local_time(d, datetime.time(0), tz)
            if t > hi:
                break
            if t >= lo:
                out.append(t)
            d += datetime.timedelta(days=days)
    res = []
    for t in out:
        x = to_datetime(t, tz)
        res.append((t, x.strftime("%a %d %b") if (x.hour, x.minute) == (0, 0)
                    else x.strftime("%H:%M")))
    return res


# ------------------------------------------------------------ the terminal
_C = {"used": "36", "limit": "2", "achieved": "32", "target": "33", "window": "35",
      "bad": "31", "title": "1", "dim": "2"}


def _paint(text: str, what: str, color: bool) -> str:
    return f"\x1b[{_C[what]}m{text}\x1b[0m" if color and text else text


def _clean(s: str) -> str:
    """Printable text for a terminal: control characters (escape
    sequences a container name could carry) shown as \\xNN."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256
                   else f"\\u{ord(c):04x}" for c in s)


def _axis(lo: float, hi: float, cols: int, tz) -> str:
    """A line of time labels under a sparkline of ``cols`` columns."""
    line = [" "] * cols
    ticks = time_ticks(lo, hi, max(2, cols // 8), tz)
    for t, label in ticks:
        c = int((t - lo) / (hi - lo) * cols)
        if c + len(label) > cols:
            continue
        if any(ch != " " for ch in line[max(0, c - 3):c + len(label) + 3]):
            continue
        line[c:c + len(label)] = label
    return "".join(line).rstrip()


def _range_of(a: Any, b: Any, fmt) -> str:
    if a is None:
        return "-"
    return fmt(a) if b is None or fmt(a) == fmt(b) else f"{fmt(a)}..{fmt(b)}"


def _figures(f: Mapping) -> dict[str, str]:
    """The figures beside each sparkline, from summarize()."""
    return {
        "memory": f"used {fmt_bytes(f['mem_used_min'])} / {fmt_bytes(f['mem_used_mean'])}"
                  f" / {fmt_bytes(f['mem_used_max'])}",
        "limit": f"limit {_range_of(f['mem_limit_min'], f['mem_limit_max'], fmt_bytes)}"
                 + (f", peak {fmt_share(f['mem_peak_ratio'])}"
                    if f["mem_peak_ratio"] is not None else ""),
        "GPU time": f"got {fmt_share(f['share_min'])} / {fmt_share(f['share_mean'])}"
                    f" / {fmt_share(f['share_max'])}",
        "target": "target " + (_range_of(f["target_min"], f["target_max"], fmt_share)
                               if f["target_min"] is not None else "none"),
    }


def render_terminal(doc: Mapping, width: int = 80, color: bool = False,
                    tz: datetime.tzinfo | None = None) -> str:
    """The document for a terminal ``width`` columns wide: per series a
    header (container, slice, GPU, labels), sparklines of memory used (the
    bucket maxima) and the limit on one scale, of the achieved and the
    target GPU time on another, the schedule windows open for it, with
    min/mean/max figures in human units, refusals, and a time axis.
    ``color``: ANSI colours.  Times in ``tz`` (None: local)."""
    d = normalize(doc)
    width = max(40, int(width))
    span = doc_span(d)
    lines = []
    if span is None:
        rng = ""
        if d["since"] is not None or d["until"] is not None:
            rng = " between " + " and ".join(
                fmt_time(x, tz) if x is not None else "now" for x in (d["since"], d["until"]))
        lines.append(f"no history{rng} for this selection")
        return "\n".join(lines) + "\n"
    lo, hi = span
    step = d["step"]
    head = f"history {fmt_time(lo, tz)} to {fmt_time(hi, tz)}"
    head += f" ({_human_span(hi - lo)}"
    head += f", {_human_span(step)} steps)" if step else ")"
    n = len(d["series"])
    head += f", {n} series" if n != 1 else ", 1 series"
    lines += [_paint(part, "title", color) for part in textwrap.wrap(head, width)]
    label_w = 12
    # the figures of every series first: one sparkline width for all, so
    # that their columns line up
    figs_of = [_figures(summarize(s)) if s["rows"] else {} for s in d["series"]]
    figw = max((len(v) for figs in figs_of for v in figs.values()), default=0)
    cols = width - label_w - figw - 2
    inline = cols >= 24
    if not inline:
        cols = width - label_w
    for s, figs in zip(d["series"], figs_of):
        lines.append("")
        title = _clean(series_title(s))
        if s["labels"]:
            title += "  " + _clean(labels_text(s["labels"]))
        lines.append(_paint(title[:width], "title", color))
        rows = s["rows"]
        if not rows:
            lines.append(" " * 2 + "no samples in this range")
            continue
        f = summarize(s)
        durs = row_durations(rows)
        ws = windows_for(s, d["windows"])
        mem_used = _columns(rows, durs, lo, hi, cols, "mem_used_max", "max")
        if all(v is None for v in mem_used):
            mem_used = _columns(rows, durs, lo, hi, cols, "mem_used", "max")
        mem_lim = _columns(rows, durs, lo, hi, cols, "mem_limit", "max")
        mtop = max((v for v in mem_used + mem_lim if v is not None), default=0.0)
        ach = _columns(rows, durs, lo, hi, cols, "share", "mean")
        tgt = [None if v is None else v / 10000
               for v in _columns(rows, durs, lo, hi, cols, "compute_bp", "max")]
        gtop = max((v for v in ach + tgt if v is not None), default=0.0)
        spark = [("memory", sparkline(mem_used, 0.0, mtop), "used"),
                 ("limit", sparkline(mem_lim, 0.0, mtop), "limit"),
                 ("GPU time", sparkline(ach, 0.0, gtop), "achieved"),
                 ("target", sparkline(tgt, 0.0, gtop), "target")]
        for name, line, kind in spark:
            text = "  " + name.ljust(label_w - 2) + _paint(line, kind, color)
            if inline:
                lines.append(text + "  " + figs[name])
            else:
                lines.append(text)
                lines.append(" " * label_w + figs[name])
        for prof in sorted({w["profile"] for w in ws}):
            mine = [w for w in ws if w["profile"] == prof]
            name = _clean(prof)
            text = ("  " + "window".ljust(label_w - 2)
                    + _paint(_window_columns(mine, lo, hi, cols), "window", color))
            if inline and label_w + cols + 2 + len(name) <= width:
                lines.append(text + "  " + name)
            else:
                lines.append(text)
                lines.append(" " * label_w + name[:width - label_w])
        if f["refusals"]:
            ref = (f"{f['refusals']} refused allocation{'s' if f['refusals'] != 1 else ''}"
                   f" in {f['refusal_buckets']} bucket{'s' if f['refusal_buckets'] != 1 else ''},"
                   f" last at {fmt_time(f['last_refusal'], tz)}")
            for i, part in enumerate(textwrap.wrap(ref, width - label_w)):
                lines.append(("  " + "refusals".ljust(label_w - 2) if i == 0 else " " * label_w)
                             + _paint(part, "bad", color))
        lines.append(" " * label_w + _paint(_axis(lo, hi, cols, tz), "dim", color))
    lines.append("")
    for part in textwrap.wrap("figures: min / mean / max; GPU time as a share of one GPU; "
                              "peak: the largest use as a share of the limit", width):
        lines.append(_paint(part, "dim", color))
    return "\n".join(lines) + "\n"


def _human_span(s: float) -> str:
    s = float(s)
    for unit, mult in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= mult:
            x = s / mult
            if x == int(x) or x >= 10:
                return f"{x:.0f}{unit}"
            return f"{x:.1f}{unit}"
    return f"{s:g}s"


# ------------------------------------------------------------ CSV
CSV_HEADER = ("container", "slice_id", "gpu", "gpu_uuid", "labels", "time", *ROW_FIELDS)


def render_csv(doc: Mapping) -> str:
    """One line per row of every series, the header ``CSV_HEADER``:
    the series' identity (labels as "k=v,k2=v2", sorted), ``time`` the row's
    time in ISO 8601 UTC, then the row's fields as numbers (empty when
    unknown).  RFC 4180 quoting; lines end with "\\n"."""
    d = normalize(doc)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for s in d["series"]:
        ident = [s["container"], _cell(s["slice_id"]), _cell(s["gpu"]), s["gpu_uuid"],
                 labels_text(s["labels"])]
        for r in s["rows"]:
            iso = datetime.datetime.fromtimestamp(r["t"], datetime.timezone.utc)
            iso_text = iso.strftime("%Y-%m-%dT%H:%M:%S") + (
                f".{iso.microsecond // 1000:03d}" if iso.microsecond else "") + "Z"
            w.writerow([*ident, iso_text, *(_cell(r.get(f)) for f in ROW_FIELDS)])
    return buf.getvalue()


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return str(v)


# ------------------------------------------------------------ --since, --until
_NOT_TIME = ("is not a time (use e.g. -24h, -30m, yesterday, 08:00, 2026-12-01T08:00, "
             "or @<unix seconds>)")
_REL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_REL = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_time(text: Any, now: float | None = None,
               tz: datetime.tzinfo | None = None) -> float:
    """Seconds since the epoch from what an operator types for --since and
    --until:

    - ``now``; ``-24h``, ``-90m``, ``-1h30m``, ``-7d``, ``-2w`` (ago; ``+2h``
      ahead; units s m h d w), also ``24h ago``;
    - ``today``, ``yesterday``, ``tomorrow``: that day's local midnight;
    - ``08:00`` (``HH:MM[:SS]``): today at that local time;
    - ``2026-12-01``, ``2026-12-01T08:00``, ``2026-12-01 08:00:30``, with an
      optional ``Z`` or ``+01:00`` (without one: local time);
    - ``@1764576000``: Unix seconds.

    Local means ``tz`` (None: the machine's zone).  Raises
    vgpu.common.values.BadValue quoting the value."""
    if not isinstance(text, str):
        raise BadValue(text, _NOT_TIME)
    now = time.time() if now is None else float(now)
    s = text.strip().lower()
    if not s:
        raise BadValue(text, "is empty (a time: -24h, yesterday, 2026-12-01T08:00...)")
    if s == "now":
        return now
    today = to_datetime(now, tz).date()
    days = {"today": 0, "yesterday": -1, "tomorrow": 1}
    if s in days:
        return local_time(today + datetime.timedelta(days=days[s]), datetime.time(0), tz)
    m = re.fullmatch(r"([-+])?\s*((?:\d+(?:\.\d+)?[smhdw])+)(\s+ago)?", s)
    if m:
        if m[1] and m[3]:
            raise BadValue(text, _NOT_TIME)
        secs = sum(float(n) * _REL_UNITS[u] for n, u in _REL.findall(m[2]))
        if not m[1] and not m[3]:
            raise BadValue(text, f"is ambiguous (write -{m[2]} for {m[2]} ago, "
                                 f"+{m[2]} for ahead)")
        return now + secs if m[1] == "+" else now - secs
    if s.startswith("@"):
        try:
            x = float(s[1:])
        except ValueError:
            raise BadValue(text, _NOT_TIME) from None
        if not math.isfinite(x):
            raise BadValue(text, _NOT_TIME)
        return x
    m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", s)
    if m:
        h, mi, se = int(m[1]), int(m[2]), int(m[3] or 0)
        if h > 23 or mi > 59 or se > 59:
            raise BadValue(text, "is not a clock time (00:00 to 23:59)")
        return local_time(today, datetime.time(h, mi, se), tz)
    if re.match(r"\d{4}-", s):
        iso = text.strip()
        if iso[-1:] in ("z", "Z"):
            iso = iso[:-1] + "+00:00"
        try:
            x = datetime.datetime.fromisoformat(iso)
        except ValueError:
            raise BadValue(text, "is not a date and time (YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], "
                                 "optionally Z or +HH:MM)") from None
        if x.tzinfo is None:
            x = x.replace(tzinfo=tz) if tz is not None else x
        return x.timestamp()
    raise BadValue(text, _NOT_TIME)


def check_range(since: float, until: float, since_text: str | None = None,
                until_text: str | None = None, tz: datetime.tzinfo | None = None) -> None:
    """Refuses an empty or reversed range: BadValue quoting --until's text
    (or --since's when --until was not given)."""
    if until > since:
        return
    if until_text is not None:
        raise BadValue(until_text, f"is not after --since ({fmt_time(until, tz, True)} is not "
                                   f"after {fmt_time(since, tz, True)})")
    raise BadValue(since_text if since_text is not None else since,
                   f"is not in the past ({fmt_time(since, tz, True)})")
