"""vgpuctl history's presentation (vgpu.cli.histview): the document shape
against HistoryStore's rows, sparklines, the terminal view, CSV, and the
--since/--until values."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
from collections import namedtuple

import pytest

from vgpu.cli import histview
from vgpu.cli.histview import SPARKS
from vgpu.daemon import history
from vgpu.common.values import BadValue

UTC = datetime.timezone.utc
CET = datetime.timezone(datetime.timedelta(hours=1))
GIB = 1 << 30
T0 = datetime.datetime(2026, 12, 1, 0, 0, tzinfo=UTC).timestamp()


def row(t, used=GIB, limit=8 * GIB, share=0.25, bp=3000, step=300.0, **kw):
    r = {"t": t, "step": step, "n": 30, "mem_used": float(used), "mem_used_min": used,
         "mem_used_max": used, "mem_used_p95": used, "mem_peak": used, "mem_limit": limit,
         "gpu_time_ns": None if share is None else int(share * step * 1e9),
         "covered_s": step if share is not None else 0.0, "share": share, "share_max": share,
         "compute_bp": bp, "refusals": 0, "resets": 0, "source": "merged"}
    r.update(kw)
    return r


def doc(*series, windows=(), since=None, until=None, step=300.0):
    return {"since": since, "until": until, "step": step, "series": list(series),
            "windows": list(windows)}


def series(name="web", rows=(), labels=None, gpu=0, sid=3):
    return {"container": name, "slice_id": sid, "labels": labels or {}, "gpu": gpu,
            "gpu_uuid": "GPU-1", "rows": list(rows)}


# ------------------------------------------------------------ the shape
def test_row_fields_are_history_rows_fields():
    # the document's names are HistoryStore.series()'s Row fields, split into
    # the series' identity and a row's own
    names = [f.name for f in dataclasses.fields(history.Row)]
    assert names == [*histview.IDENTITY, *histview.ROW_FIELDS]


def test_doc_from_store_rows(tmp_path):
    with history.HistoryStore(tmp_path / "h.db") as st:
        for k in range(13):
            st.add([history.Sample(t=T0 + 60 * k, slice_id=3, container="web", gpu=0,
                             gpu_uuid="GPU-1", mem_used=(k + 1) * GIB, mem_limit=16 * GIB,
                             gpu_time_ns=k * 15 * 10**9, compute_bp=3000,
                             labels={"vgpu.io/class": "inference"}),
                    history.Sample(t=T0 + 60 * k, slice_id=4, container="trainer", gpu=1,
                             mem_used=2 * GIB, mem_limit=4 * GIB, gpu_time_ns=k * 30 * 10**9)])
        rows = st.series(step=300.0)
    d = histview.doc_from_rows(rows, since=T0, until=T0 + 900, step=300.0)
    assert [(s["container"], s["gpu"], len(s["rows"])) for s in d["series"]] == [
        ("trainer", 1, 3), ("web", 0, 3)]
    web = d["series"][1]
    assert web["labels"] == {"vgpu.io/class": "inference"}
    assert web["rows"][1]["share"] == pytest.approx(0.25)
    assert web["rows"][0]["mem_used_max"] == 5 * GIB
    assert set(web["rows"][0]) == set(histview.ROW_FIELDS)
    text = histview.render_terminal(d, width=100, tz=UTC)
    assert "web  slice 3  GPU 0  vgpu.io/class=inference" in text
    assert "target 30%" in text and "limit 16 GiB" in text
    out = list(csv.DictReader(io.StringIO(histview.render_csv(d))))
    assert len(out) == 6 and out[3]["container"] == "web" and out[3]["time"] == \
        "2026-12-01T00:00:00Z"


def test_normalize_drops_what_is_not_a_number():
    d = histview.normalize({"series": [{"container": 7, "labels": {"a": 1}, "rows": [
        {"t": T0 + 60, "mem_used": "lots", "share": float("nan"), "compute_bp": True},
        {"t": "soon"}, "junk", {"t": T0, "mem_limit": 5}]}, "junk"],
        "windows": [{"profile": "p", "start": 10, "end": 5}, {"profile": "q", "start": 1,
                                                                "end": 2}]})
    s = d["series"][0]
    assert s["container"] == "7" and s["labels"] == {"a": "1"} and s["slice_id"] is None
    assert [r["t"] for r in s["rows"]] == [T0, T0 + 60]
    assert s["rows"][1]["mem_used"] is None and s["rows"][1]["share"] is None
    assert s["rows"][1]["compute_bp"] is None
    assert [w["profile"] for w in d["windows"]] == ["q"]
    with pytest.raises(ValueError, match="not a history document"):
        histview.normalize([1, 2])


# ------------------------------------------------------------ sparklines
def test_sparkline_scaling():
    assert histview.sparkline(list(range(8))) == SPARKS
    assert histview.sparkline([0, 7, 14], 0, 7) == "▁██"           # clipped at hi
    assert histview.sparkline([5, 10], 0, 20) == "▃▅"
    assert histview.sparkline([2, None, 4]) == "▅ █"               # None: a gap
    assert histview.sparkline([0, 0, 0]) == "▁▁▁"                  # hi == lo
    assert histview.sparkline([]) == ""
    assert histview.sparkline([None, None]) == "  "


def test_terminal_memory_and_limit_share_one_scale():
    rows = [row(T0 + 300 * k, used=(k + 1) * GIB, limit=8 * GIB) for k in range(8)]
    text = histview.render_terminal(doc(series(rows=rows)), width=44, tz=UTC)
    lines = text.splitlines()
    mem = next(ln for ln in lines if ln.startswith("  memory"))
    lim = next(ln for ln in lines if ln.startswith("  limit"))
    spark_mem = mem[12:].split()[0]
    assert spark_mem[0] == "▂" and spark_mem[-1] == "█"        # 1 GiB of 8: one step up
    assert set(lim[12:].split()[0]) == {"█"}
    assert "used 1 GiB / 4.5 GiB / 8 GiB" in text
    assert "peak 100%" in text


def test_terminal_few_points_fill_the_width_and_gaps_show():
    # three raw samples a minute apart: no holes between them ...
    rows = [row(T0 + 60 * k, step=0.0) for k in range(3)]
    text = histview.render_terminal(doc(series(rows=rows), step=None), width=80, tz=UTC)
    mem = next(ln for ln in text.splitlines() if ln.startswith("  memory"))
    assert " " not in mem[12:].split("  ")[0]
    # ... but an hour without data in a 3-hour range is a blank stretch
    rows = [row(T0 + 300 * k) for k in range(36) if not 12 <= k < 24]
    text = histview.render_terminal(doc(series(rows=rows), since=T0, until=T0 + 3 * 3600),
                              width=80, tz=UTC)
    mem = next(ln for ln in text.splitlines() if ln.startswith("  memory"))
    spark = mem[12:12 + 40]
    assert spark.startswith("▂▂▂") and spark.endswith("▂▂▂") and " " * 8 in spark


def test_terminal_width_units_and_windows():
    rows = [row(T0 + 300 * k, used=int(2.5 * GIB), share=0.5, bp=6000, refusals=k % 2)
            for k in range(48)]
    win = {"profile": "night", "label": "vgpu.io/class=training", "start": T0 + 2 * 3600,
           "end": T0 + 4 * 3600}
    other = dict(win, profile="day", label="vgpu.io/class=inference")
    d = doc(series(rows=rows, labels={"vgpu.io/class": "training"}), windows=[win, other],
            since=T0, until=T0 + 4 * 3600)
    for width in (60, 80, 132):
        text = histview.render_terminal(d, width=width, tz=UTC)
        assert max(len(ln) for ln in text.splitlines()) <= width, text
    text = histview.render_terminal(d, width=80, tz=UTC)
    assert "used 2.5 GiB / 2.5 GiB / 2.5 GiB" in text
    assert "got 50% / 50% / 50%" in text and "target 60%" in text
    assert "24 refused allocations in 24 buckets" in text
    wl = [ln for ln in text.splitlines() if ln.startswith("  window")]
    assert len(wl) == 1 and wl[0].endswith("night")          # "day" is another label's
    cells = wl[0][12:].split()[0]
    half = len(cells) // 2
    assert cells[:half].strip("·") == "" and set(cells[-half + 1:]) == {"━"}
    assert "2026-12-01 00:00 to 2026-12-01 04:00 (4h, 5m steps)" in text
    assert "\x1b[" not in text
    assert "\x1b[32m" in histview.render_terminal(d, width=80, color=True, tz=UTC)


def test_terminal_empty_things():
    assert histview.render_terminal(doc()) == "no history for this selection\n"
    assert "between 2026-12-01 00:00 and now" in histview.render_terminal(
        doc(since=T0), tz=UTC)
    text = histview.render_terminal(doc(series(name="idle"), series(rows=[row(T0)])), tz=UTC)
    assert "idle  slice 3  GPU 0\n  no samples in this range" in text
    # unknown GPU time and no target: no crash, dashes
    text = histview.render_terminal(doc(series(rows=[row(T0, share=None, bp=None)])), tz=UTC)
    assert "got - / - / -" in text and "target none" in text


def test_terminal_neutralises_control_characters():
    text = histview.render_terminal(doc(series(name="evil\x1b[2J\x07", rows=[row(T0)],
                                         labels={"k": "v\x1b]0;x"})), tz=UTC)
    assert "\x1b" not in text and "\x07" not in text
    assert "evil\\x1b[2J\\x07" in text


# ------------------------------------------------------------ CSV
def test_csv_header_quoting_and_unknowns():
    s = series(name='we"b,1', labels={"b": "x,y", "a": "1"},
               rows=[row(T0, share=None, bp=None), row(T0 + 300.5)])
    text = histview.render_csv(doc(s))
    lines = text.split("\n")
    assert lines[0] == ",".join(histview.CSV_HEADER)
    assert lines[0].startswith("container,slice_id,gpu,gpu_uuid,labels,time,t,step,n,mem_used,")
    assert lines[1].startswith('"we""b,1",3,0,GPU-1,"a=1,b=x,y",2026-12-01T00:00:00Z,')
    assert text.endswith("\n") and "\r" not in text
    recs = list(csv.DictReader(io.StringIO(text)))
    assert recs[0]["container"] == 'we"b,1' and recs[0]["labels"] == "a=1,b=x,y"
    assert recs[0]["share"] == "" and recs[0]["compute_bp"] == "" and recs[0]["gpu_time_ns"] == ""
    assert recs[0]["mem_used"] == str(GIB) and recs[0]["t"] == str(int(T0))
    assert recs[1]["time"] == "2026-12-01T00:05:00.500Z" and recs[1]["share"] == "0.25"


def test_csv_empty():
    assert histview.render_csv(doc()) == ",".join(histview.CSV_HEADER) + "\n"


# ------------------------------------------------------------ --since, --until
NOW = datetime.datetime(2026, 12, 4, 15, 30, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("text,want", [
    ("now", NOW),
    ("-24h", NOW - 86400),
    ("-90m", NOW - 5400),
    ("-1h30m", NOW - 5400),
    (" -7d ", NOW - 7 * 86400),
    ("-2w", NOW - 14 * 86400),
    ("+2h", NOW + 7200),
    ("24h ago", NOW - 86400),
    ("today", datetime.datetime(2026, 12, 4, tzinfo=UTC).timestamp()),
    ("Yesterday", datetime.datetime(2026, 12, 3, tzinfo=UTC).timestamp()),
    ("tomorrow", datetime.datetime(2026, 12, 5, tzinfo=UTC).timestamp()),
    ("08:00", datetime.datetime(2026, 12, 4, 8, tzinfo=UTC).timestamp()),
    ("2026-12-01", datetime.datetime(2026, 12, 1, tzinfo=UTC).timestamp()),
    ("2026-12-01T08:00", datetime.datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp()),
    ("2026-12-01 08:00:30", datetime.datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC).timestamp()),
    ("2026-12-01T08:00Z", datetime.datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp()),
    ("2026-12-01T08:00+01:00", datetime.datetime(2026, 12, 1, 7, tzinfo=UTC).timestamp()),
    ("@1764576000", 1764576000.0),
])
def test_parse_time(text, want):
    assert histview.parse_time(text, now=NOW, tz=UTC) == pytest.approx(want)


def test_parse_time_local_zone():
    # a time without a zone is the tz's wall clock
    assert histview.parse_time("2026-12-01T08:00", now=NOW, tz=CET) == \
        datetime.datetime(2026, 12, 1, 7, tzinfo=UTC).timestamp()
    assert histview.parse_time("yesterday", now=NOW, tz=CET) == \
        datetime.datetime(2026, 12, 2, 23, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("text,msg", [
    ("yesterdayy", '"yesterdayy" is not a time (use e.g. -24h'),
    ("24h", '"24h" is ambiguous (write -24h for 24h ago, +24h for ahead)'),
    ("-24x", '"-24x" is not a time'),
    ("-24h ago", '"-24h ago" is not a time'),
    ("2026-13-01", '"2026-13-01" is not a date and time (YYYY-MM-DD'),
    ("2026-12-01T25:00", '"2026-12-01T25:00" is not a date and time'),
    ("25:00", '"25:00" is not a clock time (00:00 to 23:59)'),
    ("@soon", '"@soon" is not a time'),
    ("", '"" is empty'),
    (None, "null is not a time"),
    (5, "5 is not a time"),
])
def test_parse_time_errors_quote_the_value(text, msg):
    with pytest.raises(BadValue) as e:
        histview.parse_time(text, now=NOW, tz=UTC)
    assert str(e.value).startswith(msg), str(e.value)
    assert e.value.value == text


def test_check_range():
    histview.check_range(NOW - 10, NOW)
    with pytest.raises(BadValue, match=r'^"-48h" is not after --since \(2026-12-02 15:30:00 is '
                                       r'not after 2026-12-03 15:30:00\)'):
        histview.check_range(NOW - 86400, NOW - 2 * 86400, "-24h", "-48h", tz=UTC)
    with pytest.raises(BadValue, match=r'^"tomorrow" is not in the past'):
        histview.check_range(NOW + 3600, NOW, "tomorrow", tz=UTC)


def test_auto_step():
    assert histview.auto_step(0, 86400, 288) == 300
    assert histview.auto_step(0, 86400, 100) == 900
    assert histview.auto_step(0, 600, 120) == 10
    assert histview.auto_step(0, 600, 120, least=300) == 300
    assert histview.auto_step(0, 365 * 86400, 100) == 4 * 86400


# ------------------------------------------------------------ windows
def test_expand_windows_wraps_and_days():
    sched = [{"label": "c=t", "profile": "night", "from": "20:00", "to": "08:00",
              "days": ["fri"]},
             {"label": "c=i", "profile": "day", "from": "08:00", "to": "20:00"}]
    fri = datetime.datetime(2026, 12, 4, tzinfo=UTC).timestamp()      # a Friday
    got = histview.expand_windows(sched, fri, fri + 2 * 86400, tz=UTC)
    assert [(w["profile"], (w["start"] - fri) / 3600, (w["end"] - fri) / 3600) for w in got] == [
        ("day", 8, 20), ("night", 20, 32), ("day", 32, 44)]
    # a window of the day before, still open at the start, is cut to it
    got = histview.expand_windows(sched, fri + 86400, fri + 86400 + 3600, tz=UTC)
    assert [(w["profile"], w["start"] - fri, w["end"] - fri) for w in got] == [
        ("night", 86400, 86400 + 3600)]
    # vgpu.daemon.config.Window's attributes do too
    Win = namedtuple("Win", "label profile start end days")
    w = Win("c=i", "day", datetime.time(8), datetime.time(9), frozenset({4}))
    assert len(histview.expand_windows([w], fri, fri + 7 * 86400, tz=UTC)) == 1
    with pytest.raises(BadValue, match='"8 pm" is not a clock time'):
        histview.expand_windows([{"profile": "x", "from": "8 pm", "to": "09:00"}], fri, fri + 1)


def test_windows_for_labels():
    ws = [{"profile": "a", "label": "k=v"}, {"profile": "b", "label": ""},
          {"profile": "c", "label": "k=w"}, {"profile": "d", "label": "k="}]
    assert [w["profile"] for w in histview.windows_for({"labels": {"k": "v"}}, ws)] == ["a", "b"]
    assert [w["profile"] for w in histview.windows_for({"labels": {"k": ""}}, ws)] == ["b", "d"]


def test_time_ticks_are_round_local_times():
    ticks = histview.time_ticks(T0 + 600, T0 + 86400 + 600, 8, tz=UTC)
    assert [lab for _, lab in ticks] == ["03:00", "06:00", "09:00", "12:00", "15:00", "18:00",
                                         "21:00", "Wed 02 Dec"]
    ticks = histview.time_ticks(T0, T0 + 86400, 8, tz=CET)
    assert ticks[0] == (T0 + 2 * 3600, "03:00")             # 03:00 CET, not UTC


def test_human_figures():
    assert histview.fmt_bytes(8 * GIB) == "8 GiB"
    assert histview.fmt_bytes(int(9.853 * GIB)) == "9.85 GiB"
    assert histview.fmt_bytes(int(22.74 * GIB)) == "22.7 GiB"
    assert histview.fmt_bytes(123.4 * (1 << 20)) == "123 MiB"
    assert histview.fmt_bytes(512) == "512 B" and histview.fmt_bytes(None) == "-"
    assert histview.fmt_share(0.314) == "31%" and histview.fmt_share(0.004) == "0.4%"
    assert histview.fmt_share(0) == "0%" and histview.fmt_share(None) == "-"
