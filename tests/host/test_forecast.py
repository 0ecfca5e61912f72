"""vgpu.common.forecast (docs/forecast.md): traces whose answers are known."""
from __future__ import annotations

import calendar
import json
import math

import pytest

from vgpu.common.forecast import Histogram, Model, Point, recommend

#: Monday 2026-01-05 00:00 UTC
MON = calendar.timegm((2026, 1, 5, 0, 0, 0))
DAY = 86400
WEEK = 7 * DAY
STEP = 300


def feed(m: Model, days: int, f, start: int = MON) -> None:
    """Samples every 5 minutes for ``days`` days: f(t) -> value."""
    for i in range(days * DAY // STEP):
        t = start + i * STEP
        m.add(t, f(t))


def hour(t: int) -> float:
    return ((t - MON) % DAY) / 3600


def weekday(t: int) -> int:
    return ((t - MON) // DAY) % 7


def square(t: int) -> float:
    return 0.8 if 8 <= hour(t) < 20 else 0.1


# ------------------------------------------------------------------ histogram
def test_percentiles_of_a_known_distribution():
    h = Histogram(first=1e-3, ratio=1.05)
    n = 10000
    for i in range(n):
        h.add((i + 0.5) / n)          # uniform on (0, 1)
    for q in (0.05, 0.25, 0.5, 0.9, 0.95, 0.99):
        assert h.percentile(q) == pytest.approx(q, rel=0.05, abs=1e-3)
    assert h.mean() == pytest.approx(0.5, rel=1e-9)
    assert Histogram().percentile(0.5) is None


def test_percentiles_follow_the_weights():
    h = Histogram()
    h.add(1.0, weight=1.0)
    h.add(3.0, weight=3.0)
    assert h.percentile(0.2) == pytest.approx(1.0)
    assert h.percentile(0.3) == pytest.approx(3.0)


# ------------------------------------------------------------------ model
def test_a_constant_forecasts_the_constant():
    m = Model()
    feed(m, 21, lambda t: 0.4)
    pts = m.forecast(MON + 21 * DAY, 24)
    assert len(pts) == 24 and all(isinstance(p, Point) for p in pts)
    for p in pts:
        assert p.source == "week"
        assert p.p50 == pytest.approx(0.4, rel=1e-9)
        assert p.p95 == pytest.approx(0.4, rel=1e-9)
        assert p.lo == pytest.approx(0.4, rel=1e-9)
        assert p.hi == pytest.approx(0.4, rel=1e-9)
        assert 0.4 < p.confidence < 1
    assert m.level == pytest.approx(1.0)
    # more history, more confidence
    week = Model()
    feed(week, 7, lambda t: 0.4)
    assert week.point(MON + 21 * DAY).confidence < pts[0].confidence
    assert [p.t for p in pts] == [MON + 21 * DAY + h * 3600 for h in range(24)]


def test_a_daily_square_wave_is_forecast_hour_by_hour():
    m = Model()
    feed(m, 14, square)
    pts = m.forecast(MON + 14 * DAY + 1800, 48)     # starts at the hour's start
    assert pts[0].t == MON + 14 * DAY
    for h, p in enumerate(pts):
        want = 0.8 if 8 <= h % 24 < 20 else 0.1
        assert p.p50 == pytest.approx(want, rel=1e-9), h
        assert p.p95 == pytest.approx(want, rel=1e-9), h


def test_the_old_regime_fades_by_the_half_life():
    m = Model(half_life_s=DAY)
    feed(m, 1, lambda t: 1.0)
    feed(m, 1, lambda t: 3.0, start=MON + DAY)
    m.flush()
    # one day later the old samples weigh half as much: 1/3 of the total
    # (without decay they would be half of it)
    assert m.all.percentile(0.30) == pytest.approx(1.0)
    assert m.all.percentile(0.36) == pytest.approx(3.0)
    assert m.all.percentile(0.45) == pytest.approx(3.0)


def test_weights_stay_finite_over_many_half_lives():
    m = Model(half_life_s=3600)       # a day is 24 half-lives: renormalised on the way
    feed(m, 7, lambda t: 1.0 if (t - MON) < 6 * DAY else 2.0)
    m.flush()
    assert all(math.isfinite(c[0]) for c in m.all.b.values())
    assert m.all.percentile(0.5) == pytest.approx(2.0)
    assert m.all.percentile(0.01) == pytest.approx(2.0)    # the old regime has faded away


def test_sparse_history_falls_back_to_the_hour_of_day_then_to_all_hours():
    assert Model().point(MON) == Point(MON, 0.0, 0.0, 0.0, 0.0, 0.0, "none")
    # Monday only, and only its mornings (00:00-12:00)
    m2 = Model()
    for i in range(DAY // STEP):
        t = MON + i * STEP
        if hour(t) < 12:
            m2.add(t, 0.2 + 0.05 * int(hour(t)))
    m2.flush()
    mon10 = m2.point(MON + 7 * DAY + 10 * 3600)         # next Monday 10:00: its own slot
    wed10 = m2.point(MON + 9 * DAY + 10 * 3600)         # Wednesday 10:00: the hour of day
    wed15 = m2.point(MON + 9 * DAY + 15 * 3600)         # Wednesday 15:00: all hours
    assert mon10.source == "week" and mon10.p50 == pytest.approx(0.7)
    assert wed10.source == "day" and wed10.p50 == pytest.approx(0.7)
    assert wed15.source == "all" and 0.2 <= wed15.p50 <= 0.75
    assert mon10.confidence > wed10.confidence > wed15.confidence > 0


def weekly(t: int, holiday: int | None = None) -> float:
    """Weekdays peak at 0.8 from 08:00 to 20:00, weekends at 0.3; the day
    ``holiday`` (days since MON) is a weekend day."""
    d = (t - MON) // DAY
    off = weekday(t) >= 5 or d == holiday
    return (0.3 if off else 0.8) if 8 <= hour(t) < 20 else 0.1


@pytest.mark.parametrize("handled", [True, False])
def test_one_holiday_does_not_change_next_weeks_forecast(handled):
    # Wednesday of the third week is a holiday; the forecast for the next
    # Wednesday must still be a weekday's
    hol = 16
    m = Model() if handled else Model(anomaly_weight=1.0)
    feed(m, 21, lambda t: weekly(t, hol))
    wed = m.forecast(MON + 23 * DAY, 24)
    peak = [p.p50 for p in wed[8:20]]
    if handled:
        assert [d - MON // DAY for d in m.anomalies] == [hol]
        assert peak == pytest.approx([0.8] * 12, rel=1e-6)
        assert m.level == pytest.approx(1.0, rel=0.01)
    else:                 # the proof that the test can fail: the holiday's shape shows
        assert max(peak) < 0.76


def test_a_new_regime_is_not_an_anomaly_for_ever():
    m = Model()
    feed(m, 14, lambda t: 0.2)
    feed(m, 14, lambda t: 0.6, start=MON + 14 * DAY)
    m.flush()
    # only the first day of the new level was held back
    assert [d - MON // DAY for d in m.anomalies] == [14]
    assert m.level == pytest.approx(3.0, rel=0.02)
    assert m.forecast(MON + 28 * DAY, 24)[12].p50 == pytest.approx(0.6, rel=0.02)


def test_the_trend_level_follows_a_growing_load():
    growth = 0.10            # a week, compounding

    def f(t):
        return weekly(t) * (1 + growth) ** ((t - MON) / WEEK)
    err = {}
    for name, m in (("trend", Model()), ("flat", Model(level_alpha=0.0))):
        e = []
        for d in range(35):
            if d >= 14:          # a day ahead, from the third week on
                e += [abs(p.p50 - f(p.t + 1800)) / f(p.t + 1800) for p in m.forecast(MON + d * DAY, 24)]
            feed(m, 1, f, start=MON + d * DAY)
        err[name] = sum(e) / len(e)
        if name == "trend":
            assert m.level > 1.3
    assert err["trend"] < 0.08
    assert err["trend"] < 0.7 * err["flat"]


def test_spikes_widen_the_envelope_not_the_median():
    def f(t):
        i = (t - MON) // STEP
        return 0.9 if i % 97 == 0 else 0.3      # a rare spike, never twice in a slot's week
    m = Model()
    feed(m, 21, f)
    p = m.point(MON + 21 * DAY + 10 * 3600)
    assert p.p50 == pytest.approx(0.3, rel=1e-3)
    assert p.p95 == pytest.approx(0.3, rel=1e-3)
    assert p.hi == pytest.approx(0.9, rel=0.05)
    assert p.lo <= p.p50 <= p.p95 <= p.hi


# ------------------------------------------------------------------ recommend
def test_recommend_applies_the_margin_and_clamps():
    pts = [Point(0, 0.3, 0.5, 0.2, 0.7, 0.9, "week"), Point(3600, 0.2, 0.4, 0.1, 0.6, 0.6, "week")]
    r = recommend(pts, margin=0.2)
    assert (r.value, r.target, r.clamped, r.confidence) == (pytest.approx(0.6), 0.5, None, 0.6)
    assert recommend(pts, margin=0.2, use="hi").value == pytest.approx(0.84)
    assert recommend(pts, margin=0.2, ceiling=0.55).value == 0.55
    assert recommend(pts, margin=0.2, ceiling=0.55).clamped == "ceiling"
    r = recommend(pts, margin=0.2, floor=0.75, ceiling=0.9)
    assert (r.value, r.clamped) == (0.75, "floor")
    assert recommend([], floor=2.0).value == 2.0
    with pytest.raises(ValueError):
        recommend(pts, use="p99")
    with pytest.raises(ValueError):
        recommend(pts, floor=1.0, ceiling=0.5)


def test_model_recommend_for_the_next_day():
    m = Model(first=0.05)
    feed(m, 14, lambda t: 4.0 + 20.0 * (square(t) > 0.5))      # GiB
    r = m.recommend(MON + 14 * DAY, 24, margin=0.25, floor=8.0, ceiling=64.0)
    assert r.value == pytest.approx(30.0) and r.clamped is None
    night = m.recommend(MON + 14 * DAY, 6, margin=0.25, floor=8.0, ceiling=64.0)
    assert (night.value, night.clamped) == (8.0, "floor")


# ------------------------------------------------------------------ persistence
def test_round_trip_through_json():
    m = Model(bucket_s=1800, half_life_s=3 * DAY, utc_offset_s=3600)
    feed(m, 10, lambda t: weekly(t, 2) + 0.01 * ((t // STEP) % 7))
    m.add(MON + 10 * DAY + 600, 0.5)            # a held sample of a new day
    d = json.loads(json.dumps(m.to_dict()))
    m2 = Model.from_dict(d)
    assert m2.to_dict() == m.to_dict()
    start = MON + 11 * DAY
    assert m2.forecast(start, 24) == m.forecast(start, 24)
    for mm in (m, m2):
        feed(mm, 2, lambda t: 0.5, start=MON + 11 * DAY)
    assert m2.forecast(start + 2 * DAY, 24) == m.forecast(start + 2 * DAY, 24)
    with pytest.raises(ValueError):
        Model.from_dict({**d, "format": 99})


def test_bad_parameters_are_refused():
    for kw in ({"bucket_s": 7000}, {"half_life_s": 0}, {"anomaly_ratio": 1.0}):
        with pytest.raises(ValueError):
            Model(**kw)
    with pytest.raises(ValueError):
        Histogram(ratio=1.0)


def test_local_time_shifts_the_slots():
    m = Model(utc_offset_s=2 * 3600)
    assert m.slot_of_week(MON - 2 * 3600) == 0      # local Monday 00:00
    assert m.slot_of_day(MON) == 2
    assert Model().slot_of_week(MON + WEEK - 1) == 167
