"""bench/backtest.py (docs/forecast.md): the scheduler model, the traces and a
short replay where forecasts must beat the static windows."""
from __future__ import annotations

import pytest

# the repository root is on sys.path (pytest's pythonpath, pyproject.toml)
from bench import backtest, traces


def test_allocate_follows_the_classes_of_docs_compute():
    S = backtest.Slice
    # fixed is a cap, even on an idle GPU
    assert backtest.allocate([S(1.0, "fixed", 0.3)]) == pytest.approx([0.3])
    # burst: the floor first, then the rest by weight
    assert backtest.allocate([S(1.0, "burst", 0.7), S(1.0, "burst", 0.3)]) == pytest.approx([0.7, 0.3])
    # work conserving: a floor nobody uses goes to the other
    assert backtest.allocate([S(0.2, "burst", 0.7), S(1.0, "burst", 0.3)]) == pytest.approx([0.2, 0.8])
    # share: by weight, up to demand
    assert backtest.allocate([S(1.0, "share", 0.25), S(1.0, "share", 0.75)]) == pytest.approx([0.25, 0.75])
    assert backtest.allocate([S(0.1, "share", 0.25), S(1.0, "share", 0.75)]) == pytest.approx([0.1, 0.9])
    # high priority before low, whatever the low one's floor
    assert backtest.allocate([S(0.9, "share", 0.1, backtest.HIGH), S(1.0, "burst", 0.5)]) == pytest.approx([0.9, 0.1])


def test_traces_are_seeded_and_shaped():
    a, b = traces.make("diurnal", days=7, seed=3), traces.make("diurnal", days=7, seed=3)
    assert a.series == b.series
    assert a.series != traces.make("diurnal", days=7, seed=4).series
    g = a.series["inference"]["gpu"]
    assert len(g) == 7 * 288 and all(0 <= x <= 1 for x in g)
    noon = sum(g[12 * 12:13 * 12]) / 12
    night = sum(g[3 * 12:4 * 12]) / 12
    assert noon > 3 * night
    sat_noon = sum(g[5 * 288 + 12 * 12:5 * 288 + 13 * 12]) / 12
    assert sat_noon < 0.7 * noon
    h = traces.make("holiday", days=14, holidays=(9,))
    wed = h.series["inference"]["gpu"]
    assert sum(wed[9 * 288 + 144:9 * 288 + 156]) < 0.7 * sum(wed[2 * 288 + 144:2 * 288 + 156])
    tr = traces.make("trend", days=21, trend_per_week=0.1).series["inference"]["mem"]
    assert sum(tr[14 * 288:15 * 288]) > 1.1 * sum(tr[:288])


def test_forecasts_beat_static_windows_on_a_diurnal_trace():
    r = backtest.run_trace(traces.make("diurnal", days=14, seed=1))
    s, f, o = r["static"], r["forecast"], r["oracle"]
    assert s.steps == f.steps == 7 * 288
    assert f.waits < s.waits and f.unmet_gpu_h < s.unmet_gpu_h
    assert f.low_gpu_h > 1.05 * s.low_gpu_h
    # nobody beats the oracle
    assert o.waits <= f.waits and o.low_gpu_h >= f.low_gpu_h
    assert backtest.verdict(r) == (True, True)
    assert r["smape"]["gpu"] < 0.25


def test_the_report_says_what_produced_it():
    runs = backtest.run(days=10, seeds=(1, 2), names=("diurnal",))
    text = backtest.report(runs, "python bench/backtest.py --days 10")
    assert text.startswith("# Forecast backtest\n")
    assert "`python bench/backtest.py --days 10`" in text
    assert "| diurnal | forecast |" in text and "## Over seeds 1-2" in text
