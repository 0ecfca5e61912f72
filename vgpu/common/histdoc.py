"""The usage-history document (docs/history.md, "Looking at it"): what the
daemon's history operation answers and what ``vgpuctl history`` renders
(vgpu.cli.histview).  Standard library only, no I/O; shared by vgpud
(vgpu.daemon.usage builds documents with ``doc_from_rows``,
``expand_windows`` and ``auto_step``) and the CLI, so the daemon imports no
CLI code.

The document (JSON-able)::

    {"since": 1764576000.0, "until": 1764662400.0,  # the range asked for (s), or null
     "step": 300.0,                                 # the bucket size, or null (stored resolution)
     "series": [{"container": "web-1", "slice_id": 3,
                 "labels": {"vgpu.io/class": "inference"},
                 "gpu": 0, "gpu_uuid": "GPU-...",
                 "rows": [{"t": 1764576000.0, "step": 300.0, "n": 30,
                           "mem_used": 2.1e9, "mem_used_min": ..., "mem_used_max": ...,
                           "mem_used_p95": ..., "mem_peak": ..., "mem_limit": 8589934592,
                           "gpu_time_ns": ..., "covered_s": 300.0,
                           "share": 0.31, "share_max": 0.6, "compute_bp": 3000,
                           "refusals": 0, "resets": 0, "source": "merged"}, ...]}],
     "windows": [{"profile": "inference-day", "label": "vgpu.io/class=inference",
                  "start": 1764576000.0, "end": 1764619200.0}]}

A row has the fields of vgpu.daemon.history.Row less the series' identity
(container, slice_id, labels, gpu, gpu_uuid), with the same names and units:
bytes, seconds since the epoch, ``share`` the fraction of one GPU achieved,
``compute_bp`` the target in basis points (10000 = one whole GPU).  Any row
field may be missing or null (unknown).  ``normalize`` makes any JSON value
a well-formed document; ``doc_from_rows`` builds the document from
``HistoryStore.series()`` rows; ``expand_windows`` turns the config's
schedule (recurring windows) into the ``windows`` list.  A window with a
``label`` belongs to the series carrying that label; one without, to all.
``auto_step`` picks a bucket size for a range.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any, Iterable, Mapping, Sequence

from vgpu.common.values import BadValue, quote

__all__ = ["IDENTITY", "ROW_FIELDS", "normalize", "doc_from_rows", "expand_windows",
           "windows_for", "auto_step"]

IDENTITY = ("container", "slice_id", "labels", "gpu", "gpu_uuid")
#: a row's fields (the rest of Row), in CSV column order
ROW_FIELDS = ("t", "step", "n", "mem_used", "mem_used_min", "mem_used_max", "mem_used_p95",
              "mem_peak", "mem_limit", "gpu_time_ns", "covered_s", "share", "share_max",
              "compute_bp", "refusals", "resets", "source")
_NUMERIC = frozenset(ROW_FIELDS) - {"source"}


# ------------------------------------------------------------ the document
def number(v: Any) -> float | int | None:
    """A finite number, or None (anything else: missing, null, text, NaN)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


#: times outside [0, TIME_MAX) (before 1970, after 2242) are not times
TIME_MAX = float(1 << 33)


def _time(v: Any) -> float | None:
    """A time (s since the epoch) that datetime can show, or None."""
    v = number(v)
    return float(v) if v is not None and 0 <= v < TIME_MAX else None


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def normalize(doc: Any) -> dict:
    """A clean copy of a history document: unknown keys dropped, numbers
    that are not finite numbers made None, rows without a time dropped and
    the rest sorted by time, labels as {str: str}, windows with end > start
    only.  Raises ValueError when ``doc`` is not a document at all."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"not a history document (an object with \"series\"): {quote(doc)}")
    series_in = doc.get("series") or []
    if not isinstance(series_in, list):
        raise ValueError("history document: \"series\" is not a list")
    out_series = []
    for s in series_in:
        if not isinstance(s, Mapping):
            continue
        labels = s.get("labels")
        labels = ({str(k): _text(v) for k, v in labels.items()}
                  if isinstance(labels, Mapping) else {})
        rows = []
        for r in s.get("rows") or []:
            if not isinstance(r, Mapping) or _time(r.get("t")) is None:
                continue
            row = {f: number(r.get(f)) for f in ROW_FIELDS if f in _NUMERIC}
            if row["step"] is not None and not 0 <= row["step"] < TIME_MAX:
                row["step"] = None
            row["source"] = _text(r.get("source"))
            rows.append(row)
        rows.sort(key=lambda r: r["t"])
        sid, gpu = number(s.get("slice_id")), number(s.get("gpu"))
        out_series.append({"container": _text(s.get("container")),
                           "slice_id": int(sid) if sid is not None else None,
                           "labels": labels,
                           "gpu": int(gpu) if gpu is not None else None,
                           "gpu_uuid": _text(s.get("gpu_uuid")), "rows": rows})
    windows = []
    for w in doc.get("windows") or []:
        if not isinstance(w, Mapping):
            continue
        a, b = _time(w.get("start")), _time(w.get("end"))
        if a is None or b is None or b <= a:
            continue
        windows.append({"profile": _text(w.get("profile")), "label": _text(w.get("label")),
                        "start": float(a), "end": float(b)})
    windows.sort(key=lambda w: (w["start"], w["profile"]))
    step = number(doc.get("step"))
    return {"since": _time(doc.get("since")), "until": _time(doc.get("until")),
            "step": step if step is not None and 0 < step < TIME_MAX else None,
            "series": out_series, "windows": windows}


def doc_from_rows(rows: Iterable[Any], windows: Iterable[Mapping] = (), *,
                  since: float | None = None, until: float | None = None,
                  step: float | None = None) -> dict:
    """The document of ``HistoryStore.series()`` rows (Row objects, or their
    ``to_json()`` dicts), one series per identity in the order first seen."""
    by_key: dict[tuple, dict] = {}
    for r in rows:
        d = r.to_json() if hasattr(r, "to_json") else dict(r)
        labels = d.get("labels") or {}
        key = (d.get("container"), d.get("slice_id"), tuple(sorted(labels.items())),
               d.get("gpu"), d.get("gpu_uuid"))
        s = by_key.get(key)
        if s is None:
            s = by_key[key] = {"container": d.get("container"), "slice_id": d.get("slice_id"),
                               "labels": dict(labels), "gpu": d.get("gpu"),
                               "gpu_uuid": d.get("gpu_uuid"), "rows": []}
        s["rows"].append({f: d.get(f) for f in ROW_FIELDS})
    return {"since": since, "until": until, "step": step, "series": list(by_key.values()),
            "windows": [dict(w) for w in windows]}


_DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _clock(v: Any) -> datetime.time:
    if isinstance(v, datetime.time):
        return v.replace(tzinfo=None)
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", str(v).strip())
    if not m or int(m[1]) > 23 or int(m[2]) > 59:
        raise BadValue(v, "is not a clock time (HH:MM)")
    return datetime.time(int(m[1]), int(m[2]))


def _days(v: Any) -> frozenset[int]:
    if v is None:
        return frozenset(range(7))
    out = set()
    for d in v:
        if isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 7:
            out.add(d)
        elif isinstance(d, str) and d.strip().lower()[:3] in _DAY_NAMES:
            out.add(_DAY_NAMES.index(d.strip().lower()[:3]))
        else:
            raise BadValue(d, "is not a day (0 = Monday, or mon ... sun)")
    return frozenset(out)


def local_time(d: datetime.date, t: datetime.time, tz: datetime.tzinfo | None) -> float:
    return datetime.datetime.combine(d, t, tzinfo=tz).timestamp()


def expand_windows(schedule: Iterable[Any], since: float, until: float,
                   tz: datetime.tzinfo | None = None) -> list[dict]:
    """The times the recurring schedule windows were open within
    [since, until): [{"profile", "label", "start", "end"}].  An entry is a
    vgpu.daemon.config.Window (label, profile, start, end, days) or a dict
    with "label", "profile", "from"/"to" (or "start"/"end": "HH:MM" or a
    datetime.time) and "days" (0 = Monday or names; default every day).
    Times are local wall-clock times (``tz``; None: the machine's); a window
    with to <= from wraps past midnight and belongs to the day it opens."""
    out = []
    lo_day = datetime.datetime.fromtimestamp(since, tz).date() - datetime.timedelta(days=1)
    hi_day = datetime.datetime.fromtimestamp(until, tz).date()
    for w in schedule:
        get = w.get if isinstance(w, Mapping) else (lambda k, d=None, w=w: getattr(w, k, d))
        start = _clock(get("from") if get("from") is not None else get("start"))
        end = _clock(get("to") if get("to") is not None else get("end"))
        days = _days(get("days"))
        d = lo_day
        while d <= hi_day:
            if d.weekday() in days:
                a = local_time(d, start, tz)
                b = local_time(d + datetime.timedelta(days=1) if end <= start else d, end, tz)
                a, b = max(a, since), min(b, until)
                if b > a:
                    out.append({"profile": _text(get("profile")), "label": _text(get("label")),
                                "start": a, "end": b})
            d += datetime.timedelta(days=1)
    out.sort(key=lambda x: (x["start"], x["profile"]))
    return out


def windows_for(series: Mapping, windows: Sequence[Mapping]) -> list[Mapping]:
    """The windows that apply to a series: those without a label and those
    whose "key=value" label the series carries."""
    out = []
    labels = series.get("labels") or {}
    for w in windows:
        lab = w.get("label") or ""
        if not lab:
            out.append(w)
            continue
        k, _, v = lab.partition("=")
        if labels.get(k) == v:
            out.append(w)
    return out


_STEPS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600,
          12 * 3600, 86400)


def auto_step(since: float, until: float, columns: int = 120, least: float = 0.0) -> float:
    """A round bucket size (s) that gives at most ``columns`` buckets over
    [since, until), at least ``least`` (the store's sampling interval or
    aggregate step); whole days beyond a day."""
    span = max(until - since, 1.0)
    want = max(span / max(columns, 1), least)
    for s in _STEPS:
        if s >= want:
            return float(s)
    return float(math.ceil(want / 86400) * 86400)
