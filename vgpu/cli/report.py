"""The usage report (docs/history.md): ``vgpuctl report --html FILE``
writes one self-contained HTML page from a history document (the shape
vgpu.cli.histview documents): inline CSS, inline SVG charts drawn here, no
script, no font, image or style from anywhere else (a Content-Security-
Policy of ``default-src 'none'`` says so to the browser too), so the file
can be mailed, archived or opened offline.

The page: a header (the range, the step, the time zone), a summary table
(one line per series: memory limit, use, peak against the limit, achieved
and target GPU time, refusals), then per series two charts over time:

- memory: the configured limit (a step line), the mean use and the band
  between the smallest and largest use of each bucket, refusals marked;
- GPU time: the target (``compute_bp``, a dashed step line) and the share
  achieved, as a fraction of one GPU;

with the schedule windows open for the series shaded (one colour per
profile, named in the legend) and axes labelled with times and units.

Every string from the document (container names, labels, profiles: hostile
input) is HTML-escaped.  Standard library only.
"""

from __future__ import annotations

import datetime
import html
import math
from typing import Any, Mapping, Sequence

from vgpu.cli.histview import (doc_span, expand_windows, fmt_bytes, fmt_share, fmt_time,
                               labels_text, normalize, row_durations, series_title, summarize,
                               time_ticks, to_datetime, windows_for)
from vgpu.common.values import format_size

__all__ = ["render_html", "sample_doc", "WINDOW_COLOURS"]

#: the shading of schedule windows, one per profile in order of appearance
WINDOW_COLOURS = ("#7c5cd6", "#e8a33d", "#1f9e9a", "#d6457f", "#6b8e23", "#8d6e63")
LIMIT = "#d9480f"
USED = "#1c6fd6"
ACHIEVED = "#2b8a3e"
TARGET = "#d9480f"
REFUSED = "#e03131"

W, H = 1120, 240
ML, MR, MT, MB = 78, 18, 16, 36

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:#222;background:#fafafa;margin:0;padding:24px 32px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 2px}
.meta{color:#555;margin:0 0 16px}.labels{color:#555;font-size:13px;margin:0 0 8px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 14px;margin:0 0 10px}
.card h3{font-size:14px;margin:0 0 4px;font-weight:600}
table{border-collapse:collapse;background:#fff;font-size:13px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f0f0f0;white-space:normal;vertical-align:bottom}td.l,th.l{text-align:left}
td.lab{white-space:normal;max-width:24em;text-align:left}
.wide{overflow-x:auto;max-width:100%}
td.bad{color:#c92a2a;font-weight:600}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:12.5px;color:#333;margin:2px 0 4px}
.sw{display:inline-block;width:22px;height:10px;margin-right:5px;vertical-align:middle;
 border-radius:2px}
.ln{display:inline-block;width:22px;height:0;margin-right:5px;vertical-align:middle;
 border-top:2.5px solid}
.dash{border-top-style:dashed}
svg{display:block;width:100%;height:auto}
svg text{font-size:12px;fill:#444}
.empty{color:#777;font-style:italic}
footer{color:#777;font-size:12px;margin-top:28px}
"""


def _e(s: Any) -> str:
    return html.escape("" if s is None else str(s), quote=True)


def _f(x: float) -> str:
    return f"{x:.1f}"


# ------------------------------------------------------------ scales
def _size_ticks(top: float) -> tuple[float, list[tuple[float, str]]]:
    """An axis 0..ymax in round binary sizes, at most 5 steps."""
    top = max(float(top), 1.0) * 1.06
    for unit in (1, 1 << 10, 1 << 20, 1 << 30, 1 << 40, 1 << 50):
        for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            step = m * unit
            if math.ceil(top / step) <= 5:
                n = math.ceil(top / step)
                return n * step, [(k * step, format_size(k * step)) for k in range(n + 1)]
    return top, [(0, "0"), (top, format_size(int(top)))]


def _share_ticks(top: float) -> tuple[float, list[tuple[float, str]]]:
    """An axis 0..ymax in round percentages (of one GPU), at most 5 steps."""
    top = max(float(top), 0.1) * 1.06
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0):
        if math.ceil(top / step) <= 5:
            n = math.ceil(top / step)
            return n * step, [(k * step, f"{k * step * 100:g}%") for k in range(n + 1)]
    return top, [(0, "0%"), (top, fmt_share(top))]


def _runs(rows: Sequence[Mapping], durs: Sequence[float], field: str) -> list[list[int]]:
    """Indexes of rows in unbroken runs: a run ends at a row without a value
    or before a gap longer than half a row's duration."""
    runs: list[list[int]] = []
    cur: list[int] = []
    for i, r in enumerate(rows):
        if r.get(field) is None:
            if cur:
                runs.append(cur)
            cur = []
            continue
        if cur:
            j = cur[-1]
            if r["t"] - (rows[j]["t"] + durs[j]) > 0.5 * durs[j]:
                runs.append(cur)
                cur = []
        cur.append(i)
    if cur:
        runs.append(cur)
    return runs


class _Plot:
    def __init__(self, lo: float, hi: float, ymax: float):
        self.lo, self.hi, self.ymax = lo, hi, ymax
        self.pw, self.ph = W - ML - MR, H - MT - MB

    def x(self, t: float) -> float:
        return ML + (min(max(t, self.lo), self.hi) - self.lo) / (self.hi - self.lo) * self.pw

    def y(self, v: float) -> float:
        v = min(max(v, 0.0), self.ymax)
        return MT + self.ph - v / self.ymax * self.ph


def _line(p: _Plot, rows, durs, field, scale=1.0, step=False) -> str:
    """Path data: per run, points at bucket centres (``step``: a level from
    each bucket's start to its end)."""
    parts = []
    for run in _runs(rows, durs, field):
        pts = []
        for i in run:
            v = rows[i][field] * scale
            if step:
                pts.append((p.x(rows[i]["t"]), p.y(v)))
                pts.append((p.x(rows[i]["t"] + durs[i]), p.y(v)))
            else:
                pts.append((p.x(rows[i]["t"] + durs[i] / 2), p.y(v)))
        if len(pts) == 1:
            x, y = pts[0]
            pts = [(x - 1.5, y), (x + 1.5, y)]
        parts.append("M" + " L".join(f"{_f(x)} {_f(y)}" for x, y in pts))
    return " ".join(parts)


def _band(p: _Plot, rows, durs, lo_field, hi_field) -> str:
    """Polygons between two fields, per run."""
    parts = []
    for run in _runs(rows, durs, hi_field):
        run = [i for i in run if rows[i].get(lo_field) is not None]
        if not run:
            continue
        top = [(p.x(rows[i]["t"] + durs[i] / 2), p.y(rows[i][hi_field])) for i in run]
        bot = [(p.x(rows[i]["t"] + durs[i] / 2), p.y(rows[i][lo_field])) for i in reversed(run)]
        if len(run) == 1:
            x = top[0][0]
            top = [(x - 1.5, top[0][1]), (x + 1.5, top[0][1])]
            bot = [(x + 1.5, bot[0][1]), (x - 1.5, bot[0][1])]
        parts.append("M" + " L".join(f"{_f(x)} {_f(y)}" for x, y in top + bot) + " Z")
    return " ".join(parts)


def _area(p: _Plot, rows, durs, field) -> str:
    """Polygons from 0 up to a field, per run."""
    parts = []
    for run in _runs(rows, durs, field):
        pts = [(p.x(rows[i]["t"] + durs[i] / 2), p.y(rows[i][field])) for i in run]
        if len(pts) == 1:
            pts = [(pts[0][0] - 1.5, pts[0][1]), (pts[0][0] + 1.5, pts[0][1])]
        y0 = p.y(0)
        parts.append(f"M{_f(pts[0][0])} {_f(y0)} L" + " L".join(f"{_f(x)} {_f(y)}" for x, y in pts)
                     + f" L{_f(pts[-1][0])} {_f(y0)} Z")
    return " ".join(parts)


def _xlabels(p: _Plot, tz) -> list[tuple[float, str, str]]:
    """The time axis: (x, label or "" when it would overlap another, text
    anchor).  Dates (midnights) win over hours; a label at the right end is
    anchored at its end so that it stays inside the chart."""
    ticks = []
    for t, label in time_ticks(p.lo, p.hi, 12, tz):
        x = p.x(t)
        w = 7.2 * len(label) + 8
        anchor = "end" if x + w / 2 > W - 2 else "start" if x - w / 2 < 2 else "middle"
        left = x - w if anchor == "end" else x if anchor == "start" else x - w / 2
        ticks.append([x, label, anchor, left, left + w])
    kept: list[list] = []
    for tk in sorted(ticks, key=lambda tk: tk[1][:1].isdigit()):
        if all(tk[4] <= k[3] or tk[3] >= k[4] for k in kept):
            kept.append(tk)
    return [(x, label if [x, label, a, l, r] in kept else "", a) for x, label, a, l, r in ticks]


def _frame(p: _Plot, yticks, ytitle: str, windows, colours, tz, desc: str,
           names: list[str]) -> list[str]:
    """The chart's start: background, shaded windows, grid, axes, labels;
    the windows' names go to ``names``, drawn last, over the data."""
    out = [f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="{_e(desc)}">',
           f"<title>{_e(desc)}</title>",
           f'<rect x="{ML}" y="{MT}" width="{p.pw}" height="{p.ph}" fill="#fff"/>']
    for w in windows:
        x0, x1 = p.x(w["start"]), p.x(w["end"])
        if x1 - x0 < 0.5:
            continue
        c = colours.get(w["profile"], "#999")
        out.append(f'<rect x="{_f(x0)}" y="{MT}" width="{_f(x1 - x0)}" height="{p.ph}" '
                   f'fill="{c}" fill-opacity="0.13"><title>{_e(w["profile"])}: '
                   f'{_e(fmt_time(w["start"], tz))} to {_e(fmt_time(w["end"], tz))}'
                   f'</title></rect>')
        if x1 - x0 > 7 * len(w["profile"]) + 12:
            names.append(f'<text x="{_f(x0 + 5)}" y="{MT + 13}" stroke="#fff" '
                         f'stroke-width="3" paint-order="stroke" '
                         f'style="fill:{c};font-size:11px">{_e(w["profile"])}</text>')
    for v, label in yticks:
        y = p.y(v)
        out.append(f'<line x1="{ML}" x2="{W - MR}" y1="{_f(y)}" y2="{_f(y)}" stroke="#e6e6e6"/>')
        out.append(f'<text x="{ML - 7}" y="{_f(y + 4)}" text-anchor="end">{_e(label)}</text>')
    for x, label, anchor in _xlabels(p, tz):
        out.append(f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{MT}" y2="{MT + p.ph + 5}" '
                   f'stroke="#eee"/>')
        if label:
            bold = ' style="font-weight:600"' if not label[:1].isdigit() else ""
            out.append(f'<text x="{_f(x)}" y="{MT + p.ph + 19}" text-anchor="{anchor}"{bold}>'
                       f'{_e(label)}</text>')
    out.append(f'<rect x="{ML}" y="{MT}" width="{p.pw}" height="{p.ph}" fill="none" '
               f'stroke="#bbb"/>')
    cy = MT + p.ph / 2
    out.append(f'<text transform="translate(16 {_f(cy)}) rotate(-90)" text-anchor="middle">'
               f'{_e(ytitle)}</text>')
    return out


#: more points than this in a chart are merged into this many time columns
MAX_POINTS = 1000


def _thin(rows: Sequence[Mapping], lo: float, hi: float,
          most: int = MAX_POINTS) -> tuple[list[dict], list[float]]:
    """The rows and their durations, merged into at most ``most`` columns
    of time when there are more (a chart has about that many pixels): per
    column the mean use (weighted by n), the smallest and largest use, the
    largest limit and target, the share over the covered time and the sum
    of refusals; a column without rows stays a gap."""
    durs = row_durations(rows)
    if len(rows) <= most:
        return list(rows), durs
    width = (hi - lo) / most
    cols: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        cols.setdefault(int((r["t"] - lo) // width), []).append(i)
    out, out_d = [], []
    for c in sorted(cols):
        idx = cols[c]
        part = [rows[i] for i in idx]

        def vals(f):
            return [r[f] for r in part if r.get(f) is not None]
        used = [(r["mem_used"], r["n"] if r.get("n") and r["n"] > 0 else 1) for r in part
                if r.get("mem_used") is not None]
        wsum = sum(n for _, n in used)
        cov = [(r["share"], r.get("covered_s") or 1.0) for r in part if r.get("share") is not None]
        csum = sum(c for _, c in cov)
        t0 = part[0]["t"]
        end = max(r["t"] + durs[i] for r, i in zip(part, idx))
        out.append({
            "t": t0, "step": end - t0,
            "mem_used": sum(v * n for v, n in used) / wsum if wsum else None,
            "mem_used_min": min(vals("mem_used_min"), default=None),
            "mem_used_max": max(vals("mem_used_max"), default=None),
            "mem_limit": max(vals("mem_limit"), default=None),
            "share": sum(v * c for v, c in cov) / csum if csum else None,
            "compute_bp": max(vals("compute_bp"), default=None),
            "refusals": sum(vals("refusals")) or None,
        })
        out_d.append(end - t0)
    return out, out_d


def _memory_chart(s, lo, hi, windows, colours, tz) -> str:
    rows, durs = _thin(s["rows"], lo, hi)
    top = max([r[f] for r in rows for f in ("mem_used_max", "mem_used", "mem_limit")
               if r.get(f) is not None] or [0])
    ymax, ticks = _size_ticks(top)
    p = _Plot(lo, hi, ymax)
    names: list[str] = []
    out = _frame(p, ticks, "memory", windows, colours, tz,
                 f"memory of {s['container']}: limit and use over time", names)
    band = _band(p, rows, durs, "mem_used_min", "mem_used_max")
    if band:
        out.append(f'<path d="{band}" fill="{USED}" fill-opacity="0.18" stroke="none"/>')
    used = _line(p, rows, durs, "mem_used")
    if used:
        out.append(f'<path d="{used}" fill="none" stroke="{USED}" stroke-width="1.6" '
                   f'stroke-linejoin="round"/>')
    lim = _line(p, rows, durs, "mem_limit", step=True)
    if lim:
        out.append(f'<path d="{lim}" fill="none" stroke="{LIMIT}" stroke-width="2.2"/>')
    for r, d in zip(rows, durs):
        if r.get("refusals"):
            x = p.x(r["t"] + d / 2)
            out.append(f'<path d="M{_f(x - 5)} {MT - 11} L{_f(x + 5)} {MT - 11} '
                       f'L{_f(x)} {MT - 2} Z" '
                       f'fill="{REFUSED}"><title>{int(r["refusals"])} refused at '
                       f'{_e(fmt_time(r["t"], tz))}</title></path>')
    out += names
    out.append("</svg>")
    return "\n".join(out)


def _gpu_chart(s, lo, hi, windows, colours, tz) -> str:
    rows, durs = _thin(s["rows"], lo, hi)
    vals = [r["share"] for r in rows if r.get("share") is not None]
    vals += [r["compute_bp"] / 10000 for r in rows if r.get("compute_bp") is not None]
    ymax, ticks = _share_ticks(max(vals or [0]))
    p = _Plot(lo, hi, ymax)
    names: list[str] = []
    out = _frame(p, ticks, "GPU time (of one GPU)", windows, colours, tz,
                 f"GPU time of {s['container']}: target and achieved over time", names)
    area = _area(p, rows, durs, "share")
    if area:
        out.append(f'<path d="{area}" fill="{ACHIEVED}" fill-opacity="0.16" stroke="none"/>')
    ach = _line(p, rows, durs, "share")
    if ach:
        out.append(f'<path d="{ach}" fill="none" stroke="{ACHIEVED}" stroke-width="1.6" '
                   f'stroke-linejoin="round"/>')
    tgt = _line(p, rows, durs, "compute_bp", scale=1 / 10000, step=True)
    if tgt:
        out.append(f'<path d="{tgt}" fill="none" stroke="{TARGET}" stroke-width="2.2" '
                   f'stroke-dasharray="7 4"/>')
    out += names
    out.append("</svg>")
    return "\n".join(out)


def _legend(items: list[tuple[str, str, str]]) -> str:
    """items: (kind "sw" | "ln" | "dash" | "tri", colour, text)."""
    out = ['<div class="legend">']
    for kind, colour, text in items:
        if kind == "sw":
            mark = f'<span class="sw" style="background:{colour};opacity:.45"></span>'
        elif kind == "band":
            mark = f'<span class="sw" style="background:{colour};opacity:.25"></span>'
        elif kind == "tri":
            mark = f'<span style="color:{colour};margin-right:5px">&#9660;</span>'
        else:
            extra = " dash" if kind == "dash" else ""
            mark = f'<span class="ln{extra}" style="border-color:{colour}"></span>'
        out.append(f"<span>{mark}{_e(text)}</span>")
    out.append("</div>")
    return "".join(out)


def _rng(a, b, fmt) -> str:
    if a is None:
        return "-"
    return fmt(a) if b is None or fmt(a) == fmt(b) else f"{fmt(a)} to {fmt(b)}"


def _summary_table(series, tz) -> str:
    head = ["container", "slice", "GPU", "labels", "points", "memory limit",
            "used mean / max", "peak / limit", "GPU time mean / max", "GPU time target",
            "refusals"]
    out = ['<div class="wide"><table><thead><tr>']
    out += [f'<th class="{"l" if i < 4 else ""}">{_e(h)}</th>' for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for s in series:
        f = summarize(s)
        gpu = s["gpu"] if s["gpu"] is not None and s["gpu"] >= 0 else (s["gpu_uuid"] or "?")
        peak = f["mem_peak_ratio"]
        cells = [
            ("l", s["container"] or "?"), ("l", "-" if s["slice_id"] is None else s["slice_id"]),
            ("l", gpu),
            ("lab", ", ".join(f"{k}={v}" for k, v in sorted(s["labels"].items())) or "-"),
            ("", f["points"]),
            ("", _rng(f["mem_limit_min"], f["mem_limit_max"], fmt_bytes)),
            ("", f'{fmt_bytes(f["mem_used_mean"])} / {fmt_bytes(f["mem_used_max"])}'),
            ("bad" if peak is not None and peak >= 0.95 else "", fmt_share(peak)),
            ("", f'{fmt_share(f["share_mean"])} / {fmt_share(f["share_max"])}'),
            ("", _rng(f["target_min"], f["target_max"], fmt_share)
             if f["target_min"] is not None else "none"),
            ("bad" if f["refusals"] else "", f["refusals"]),
        ]
        out.append("<tr>" + "".join(f'<td class="{c}">{_e(v)}</td>' for c, v in cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def render_html(doc: Mapping, title: str = "vgpu usage report",
                tz: datetime.tzinfo | None = None, generated: float | None = None) -> str:
    """The report page for a history document (vgpu.cli.histview), as one
    string of HTML.  Times in ``tz`` (None: the machine's zone);
    ``generated``: the time to print as the page's making (None: leave it
    out)."""
    d = normalize(doc)
    span = doc_span(d)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
           "style-src 'unsafe-inline'\">",
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(title)}</title>", f"<style>{CSS}</style>", "</head><body>",
           f"<h1>{_e(title)}</h1>"]
    if span is None:
        out.append('<p class="empty">No history for this selection.</p>')
        out.append("</body></html>")
        return "\n".join(out) + "\n"
    lo, hi = span
    zone = _zone(lo, tz)
    meta = f"{fmt_time(lo, tz)} to {fmt_time(hi, tz)}, times in {zone}"
    if d["step"]:
        meta += f"; buckets of {_e(_human(d['step']))}"
    meta += f"; {len(d['series'])} series"
    out.append(f'<p class="meta">{_e(meta)}</p>')

    # one colour per profile, in order of first appearance
    colours: dict[str, str] = {}
    for w in d["windows"]:
        if w["profile"] not in colours:
            colours[w["profile"]] = WINDOW_COLOURS[len(colours) % len(WINDOW_COLOURS)]
    if d["windows"]:
        seen = []
        for w in d["windows"]:
            key = (w["profile"], w["label"])
            if key not in seen:
                seen.append(key)
        out.append('<div class="card"><h3>Schedule windows</h3>' + _legend(
            [("sw", colours[p], f"{p}" + (f" (slices labelled {lab})" if lab else " (all slices)"))
             for p, lab in seen]) + "</div>")

    out.append("<h2>Summary</h2>")
    out.append('<p class="labels">GPU time is a share of one whole GPU; peak / limit is the '
               "largest use seen against the limit of the moment; refusals are allocations "
               "the memory limit refused.</p>")
    out.append(_summary_table(d["series"], tz))

    for s in d["series"]:
        out.append(f"<h2>{_e(series_title(s, ' · '))}</h2>")
        labels = labels_text(s["labels"])
        extra = [f"labels {labels}" if labels else "no labels"]
        if s["gpu_uuid"]:
            extra.append(s["gpu_uuid"])
        out.append(f'<p class="labels">{_e("; ".join(extra))}</p>')
        if not s["rows"]:
            out.append('<p class="empty">No samples in this range.</p>')
            continue
        ws = windows_for(s, d["windows"])
        wl = [("sw", colours[p], f"window {p}") for p in dict.fromkeys(w["profile"] for w in ws)]
        refused = any(r.get("refusals") for r in s["rows"])
        out.append('<div class="card"><h3>Memory: configured vs used</h3>')
        out.append(_legend([("ln", LIMIT, "configured (limit)"), ("ln", USED, "used (mean)"),
                            ("band", USED, "used (min to max in a bucket)")]
                           + ([("tri", REFUSED, "refused allocations")] if refused else [])
                           + wl))
        out.append(_memory_chart(s, lo, hi, ws, colours, tz))
        out.append("</div>")
        out.append('<div class="card"><h3>GPU time: target vs achieved</h3>')
        out.append(_legend([("dash", TARGET, "target (compute quota)"),
                            ("ln", ACHIEVED, "achieved")] + wl))
        out.append(_gpu_chart(s, lo, hi, ws, colours, tz))
        out.append("</div>")
    foot = "vgpu usage report"
    if generated is not None:
        foot += f", made {fmt_time(generated, tz, True)}"
    out.append(f"<footer>{_e(foot)}</footer>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _zone(t: float, tz: datetime.tzinfo | None) -> str:
    """"CET (UTC+01:00)", "UTC+01:00", "UTC"."""
    x = to_datetime(t, tz).astimezone(tz) if tz is None else to_datetime(t, tz)
    name = x.strftime("%Z")
    off = x.strftime("%z")
    off = f"UTC{off[:3]}:{off[3:]}" if off and off not in ("+0000", "-0000") else "UTC"
    return off if not name or name.startswith("UTC") or name == off else f"{name} ({off})"


def _human(s: float) -> str:
    for unit, mult in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= mult and s % mult == 0:
            return f"{int(s // mult)} {unit}"
    return f"{s:g} s"


# ------------------------------------------------------------ a sample
GIB = 1 << 30


def sample_doc(start: float, step: float = 300.0, hours: int = 24,
               tz: datetime.tzinfo | None = None) -> dict:
    """A day of synthetic history from ``start`` (best a local midnight)
    for trying the page out: two slices on GPU 0, "web" (labelled
    vgpu.io/class=inference) busy by day under an inference-day window
    08:00-20:00 that raises its limit and target, and "trainer"
    (vgpu.io/class=training) busy by night under a training-night window
    20:00-08:00; a few refusals for the trainer at the evening switch."""
    series = []
    specs = [
        ("web", 3, {"vgpu.io/class": "inference", "team": "search"}, True),
        ("trainer", 4, {"vgpu.io/class": "training"}, False),
    ]
    n = int(hours * 3600 // step)
    for name, sid, labels, by_day in specs:
        rows = []
        for k in range(n):
            t = start + k * step
            hour = to_datetime(t, tz).hour + to_datetime(t, tz).minute / 60
            day = 8 <= hour < 20
            mine = day if by_day else not day
            # a smooth daily bump for the one on duty, a floor for the other
            phase = ((hour - 8) % 12) / 12
            bump = math.sin(math.pi * phase)
            wobble = 0.5 + 0.5 * math.sin(k * 0.7 + sid)
            if by_day:
                limit = (24 if mine else 8) * GIB
                bp = 6000 if mine else 1500
                used = (5 + 13 * bump + 1.5 * wobble) * GIB if mine else (3 + 0.8 * wobble) * GIB
                share = 0.12 + 0.45 * bump + 0.05 * wobble if mine else 0.03 + 0.02 * wobble
            else:
                limit = (40 if mine else 12) * GIB
                bp = 8000 if mine else 2000
                used = (9 + 22 * bump + 2 * wobble) * GIB if mine else (10 + 1.2 * wobble) * GIB
                share = min(0.78, 0.6 + 0.15 * wobble) if mine else 0.18 + 0.03 * wobble
            used = min(used, limit)
            refusals = 2 if (not by_day and 20 <= hour < 20.25) else 0
            rows.append({"t": t, "step": step, "n": 30, "mem_used": used,
                         "mem_used_min": int(used * 0.9), "mem_used_max": int(min(used * 1.08,
                                                                                  limit)),
                         "mem_used_p95": int(used * 1.05), "mem_peak": int(used * 1.1),
                         "mem_limit": limit, "gpu_time_ns": int(share * step * 1e9),
                         "covered_s": step, "share": share, "share_max": min(1.0, share * 1.3),
                         "compute_bp": bp, "refusals": refusals, "resets": 0,
                         "source": "merged"})
        series.append({"container": name, "slice_id": sid, "labels": labels, "gpu": 0,
                       "gpu_uuid": "GPU-6b4c1a2e-0000-4000-8000-000000000000", "rows": rows})
    end = start + n * step
    windows = expand_windows(
        [{"profile": "inference-day", "label": "vgpu.io/class=inference",
          "from": "08:00", "to": "20:00"},
         {"profile": "training-night", "label": "vgpu.io/class=training",
          "from": "20:00", "to": "08:00"}], start, end, tz)
    return {"since": start, "until": end, "step": step, "series": series, "windows": windows}
