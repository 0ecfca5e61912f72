"""Demand forecasts from history (docs/forecast.md): pure Python, standard
library only, no I/O.

One ``Model`` per series (a label's GPU-time demand, a label's memory, a
long-lived slice's...).  Samples go in as ``(t, value)`` (t in Unix seconds,
value >= 0 in any unit); forecasts come out per time-of-week bucket::

    m = Model(bucket_s=3600, half_life_s=7 * 86400)
    for t, v in samples:
        m.add(t, v)
    pts = m.forecast(start, 24)          # [Point(t, p50, p95, lo, hi, confidence, source)]
    rec = recommend(pts, margin=0.15, floor=0.1, ceiling=0.9)
    json.dumps(m.to_dict()); Model.from_dict(d)

The model (docs/forecast.md):

- **Decaying histograms**, as the Kubernetes VPA recommender keeps them: a
  geometric bucketing of the value (first bucket ``first``, each next one
  ``ratio`` times wider), every sample weighted ``2 ** (age / half_life)``
  relative to the newest, so old behaviour fades by half every half-life.
  A percentile query walks the cumulative weight; inside the bucket it lands
  in, it answers the weighted mean of the values there, so a constant series
  forecasts exactly its constant.
- **By time of week**: one histogram per ``bucket_s`` slot of the week
  (168 hourly ones by default), one per slot of the day (any day) and one
  over all hours.  A slot with less than ``min_weight`` effective samples
  falls back to the time-of-day histogram, then to the all-hours one
  (``Point.source`` says which answered).
- **Shape times level**: the histograms hold the shape of the week, each
  day's samples divided by that day's level (its total over what the shape
  expected for its slots, mean against mean); the level is an exponentially
  weighted average of the days' levels (``level_alpha``), and forecasts are
  the shape's percentiles times the level.  A drifting load is followed
  within about a day; a step to a new level is not counted twice.
- **Days are judged before they count.**  Samples are held until their
  (local) day is over; a day whose level is off the current one by more
  than ``anomaly_ratio`` either way (a holiday, an outage) enters the
  histograms with ``anomaly_weight`` only and leaves the level alone,
  unless the day before was off the same way too (then it is a new regime,
  and it counts fully).
- **Tail**: how far samples rise above their slot's median (the positive
  residual), over all slots, in one more decaying histogram.  Rare spikes
  leave no mark on one slot's p95 but do on that one; ``Point.hi`` is
  ``max(p95, p50 + its tail_q quantile)``, the envelope a quota has to cover.

Confidence: ``n / (n + confidence_k)`` where n is the effective (decayed)
number of samples behind the answer, halved for the time-of-day fallback
and quartered for the all-hours one; ``lo``..``hi`` is the interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

__all__ = ["Histogram", "Model", "Point", "Recommendation", "recommend", "point_dict", "FORMAT"]

#: the version of ``Model.to_dict()``'s layout
FORMAT = 1
WEEK_S = 7 * 86400
DAY_S = 86400
#: 1970-01-01 was a Thursday: seconds to add to Unix time for weeks to start on Monday
_MONDAY = 3 * DAY_S
#: renormalise the weights when the newest one passes 2 ** this
_RENORM_EXP = 60.0


class Histogram:
    """A histogram of non-negative values with geometric buckets and
    weighted samples.  Bucket 0 holds [0, first), bucket i >= 1 holds
    [first * ratio ** (i - 1), first * ratio ** i).  Per bucket: the total
    weight and the weighted sum of the values (for the in-bucket mean).
    Weights are whatever the caller gives (``Model`` gives decaying ones)."""

    __slots__ = ("first", "ratio", "_lr", "b")

    def __init__(self, first: float = 1e-3, ratio: float = 1.05):
        if first <= 0 or ratio <= 1:
            raise ValueError("Histogram needs first > 0 and ratio > 1")
        self.first = float(first)
        self.ratio = float(ratio)
        self._lr = math.log(self.ratio)
        self.b: dict[int, list[float]] = {}

    def index(self, value: float) -> int:
        if value < self.first:
            return 0
        return 1 + int(math.log(value / self.first) / self._lr)

    def add(self, value: float, weight: float = 1.0) -> None:
        value = max(0.0, float(value))
        cell = self.b.setdefault(self.index(value), [0.0, 0.0])
        cell[0] += weight
        cell[1] += weight * value

    def total(self) -> float:
        return sum(c[0] for c in self.b.values())

    def mean(self) -> float | None:
        """The weighted mean, None when empty."""
        tot = self.total()
        return sum(c[1] for c in self.b.values()) / tot if tot > 0 else None

    def scale(self, factor: float) -> None:
        for c in self.b.values():
            c[0] *= factor
            c[1] *= factor

    def percentile(self, q: float) -> float | None:
        """The q-quantile (0..1) of the weighted samples, None when empty:
        the weighted mean of the bucket where the cumulative weight reaches
        q of the total."""
        tot = self.total()
        if tot <= 0:
            return None
        goal = min(max(q, 0.0), 1.0) * tot
        acc = 0.0
        keys = sorted(self.b)
        for k in keys:
            w, s = self.b[k]
            acc += w
            if acc >= goal - 1e-12 * tot and w > 0:
                return s / w
        w, s = self.b[keys[-1]]
        return s / w if w > 0 else 0.0

    def to_dict(self) -> dict:
        return {"first": self.first, "ratio": self.ratio,
                "b": {str(k): [c[0], c[1]] for k, c in sorted(self.b.items())}}

    @classmethod
    def from_dict(cls, d: dict) -> "Histogram":
        h = cls(d["first"], d["ratio"])
        h.b = {int(k): [float(c[0]), float(c[1])] for k, c in d["b"].items()}
        return h


@dataclass(frozen=True)
class Point:
    """A forecast for one bucket starting at t: the median (p50), the 95th
    percentile (p95), the interval lo (p10) .. hi (max of p95 and p50 plus
    the tail allowance), the confidence (0..1) and the histogram that
    answered ("week", "day", "all", or "none": no history, all zeros)."""
    t: float
    p50: float
    p95: float
    lo: float
    hi: float
    confidence: float
    source: str


@dataclass(frozen=True)
class Recommendation:
    """A quota: value = clamp(target * (1 + margin), floor, ceiling), where
    target is the highest ``use`` figure ("p95" or "hi") of the points;
    clamped names the bound that decided ("floor", "ceiling"), else None;
    confidence is the lowest of the points'."""
    value: float
    target: float
    clamped: str | None
    confidence: float


class Model:
    """Time-of-week model of one series.  Parameters:

    bucket_s      width of a slot (divides the day), default one hour
    half_life_s   age at which a sample's weight halves, default a week
    first, ratio  the histograms' bucketing: pick ``first`` near the
                  smallest value that matters (1e-3 for a GPU fraction,
                  2**20 for bytes); ratio 1.05 is VPA's
    utc_offset_s  local time's offset: days and weeks start at local midnight
    min_weight    effective samples a slot needs before it answers alone
    anomaly_ratio, anomaly_weight   a day judged odd (see the module doc)
    level_alpha   weight of the newest day in the level (0: no level, raw histograms)
    tail_q        quantile of the positive residuals for ``Point.hi``
    confidence_k  effective samples at which confidence is 0.5 (before the
                  fallback's reduction); default one bucket of 5-minute samples
    """

    def __init__(self, bucket_s: int = 3600, half_life_s: float = WEEK_S, *,
                 first: float = 1e-3, ratio: float = 1.05, utc_offset_s: int = 0,
                 min_weight: float = 3.0, anomaly_ratio: float = 1.5,
                 anomaly_weight: float = 0.1, level_alpha: float = 0.3,
                 tail_q: float = 0.995, confidence_k: float | None = None):
        if bucket_s <= 0 or DAY_S % bucket_s:
            raise ValueError("bucket_s must divide a day")
        if half_life_s <= 0:
            raise ValueError("half_life_s must be > 0")
        if anomaly_ratio <= 1:
            raise ValueError("anomaly_ratio must be > 1")
        self.bucket_s = int(bucket_s)
        self.half_life_s = float(half_life_s)
        self.first, self.ratio = float(first), float(ratio)
        self.utc_offset_s = int(utc_offset_s)
        self.min_weight = float(min_weight)
        self.anomaly_ratio = float(anomaly_ratio)
        self.anomaly_weight = float(anomaly_weight)
        self.level_alpha = float(level_alpha)
        self.tail_q = float(tail_q)
        self.confidence_k = float(confidence_k if confidence_k is not None else bucket_s / 300)
        self.ref_t: float | None = None      # the time where a weight is 1
        self.last_t: float | None = None     # the newest sample's time
        self.week: dict[int, Histogram] = {}
        self.day: dict[int, Histogram] = {}
        self.all = self._hist()
        self.tail = self._hist()
        self.level = 1.0
        self.pending: list[tuple[float, float]] = []   # the current day's samples
        self.pending_day: int | None = None
        self.last_verdict = 0          # -1 / 0 / +1: the last committed day was low / normal / high
        self.days = 0                  # committed days
        self.anomalies: list[int] = []  # local day numbers judged odd (newest last, at most 64)

    # ------------------------------------------------------------- slots
    def _hist(self) -> Histogram:
        return Histogram(self.first, self.ratio)

    def _local(self, t: float) -> float:
        return t + self.utc_offset_s

    def day_of(self, t: float) -> int:
        """The local day number of t (days since 1970-01-01, local)."""
        return int(self._local(t) // DAY_S)

    def slot_of_week(self, t: float) -> int:
        """0 .. 7 * 86400 / bucket_s - 1, Monday 00:00 local is 0."""
        return int(((self._local(t) + _MONDAY) % WEEK_S) // self.bucket_s)

    def slot_of_day(self, t: float) -> int:
        return int((self._local(t) % DAY_S) // self.bucket_s)

    def _weight(self, t: float) -> float:
        if self.ref_t is None:
            self.ref_t = t
        e = (t - self.ref_t) / self.half_life_s
        if e > _RENORM_EXP:               # keep the numbers finite: move the reference
            f = 2.0 ** -e
            for h in (*self.week.values(), *self.day.values(), self.all, self.tail):
                h.scale(f)
            self.ref_t = t
            e = 0.0
        return 2.0 ** e

    def _now_weight(self) -> float:
        """The weight a sample at the newest time gets (to turn the decayed
        totals into effective sample counts)."""
        if self.ref_t is None or self.last_t is None:
            return 1.0
        return 2.0 ** ((self.last_t - self.ref_t) / self.half_life_s)

    # ------------------------------------------------------------- input
    def add(self, t: float, value: float) -> None:
        """One sample.  Samples of a day are held until a sample of a later
        day arrives (or ``flush()``), then judged and counted."""
        d = self.day_of(t)
        if self.pending_day is not None and d > self.pending_day:
            self._commit()
        if self.pending_day is None or d > self.pending_day:
            self.pending_day = d
        if d < self.pending_day:           # late sample of an already judged day
            self._put(t, value / self.level if self.level_alpha > 0 else value, 1.0)
        else:
            self.pending.append((float(t), float(value)))
        self.last_t = t if self.last_t is None else max(self.last_t, t)

    def extend(self, samples: Iterable[tuple[float, float]]) -> None:
        for t, v in samples:
            self.add(t, v)

    def flush(self) -> None:
        """Judge and count the held day now (a day cut short is judged on
        the slots it has)."""
        if self.pending:
            self._commit()
        self.pending_day = None

    def _put(self, t: float, value: float, factor: float) -> None:
        w = self._weight(t) * factor
        self.week.setdefault(self.slot_of_week(t), self._hist()).add(value, w)
        self.day.setdefault(self.slot_of_day(t), self._hist()).add(value, w)
        self.all.add(value, w)

    def _commit(self) -> None:
        samples, self.pending = self.pending, []
        if not samples:
            return
        # What the histograms expected for each sample's slot, in units of
        # the level: the median (residuals, for the tail) and the mean (the
        # day's total, for the verdict and the level: mean against mean).
        expected: dict[int, tuple[float, float, str]] = {}
        exp_sum = act_sum = 0.0
        judged = True
        for t, v in samples:
            s = self.slot_of_week(t)
            if s not in expected:
                e = self._pick(t)
                expected[s] = ((e[0].percentile(0.5) or 0.0, e[0].mean() or 0.0, e[1])
                               if e else (0.0, 0.0, "none"))
            med, mean, src = expected[s]
            if src != "week":
                judged = False
            exp_sum += mean
            act_sum += v
        verdict = 0
        ratio = None               # the day's own level
        if judged and exp_sum > 0 and act_sum > 0:
            ratio = act_sum / exp_sum
            if ratio > self.anomaly_ratio * self.level:
                verdict = 1
            elif ratio < self.level / self.anomaly_ratio:
                verdict = -1
        odd = verdict != 0 and self.last_verdict != verdict
        if not odd and ratio is not None and self.level_alpha > 0:
            a = self.level_alpha
            self.level = math.exp((1 - a) * math.log(self.level) + a * math.log(ratio))
        # the histograms hold the shape: each day divided by its own level
        # (by the current one while a day cannot be judged yet)
        div = (ratio if ratio is not None else self.level) if self.level_alpha > 0 else 1.0
        factor = self.anomaly_weight if odd else 1.0
        for t, v in samples:
            self._put(t, v / div, factor)
            if not odd:
                med, _, src = expected[self.slot_of_week(t)]
                if src != "none":
                    self.tail.add(max(0.0, v / div - med), self._weight(t))
        if odd:
            self.anomalies = (self.anomalies + [self.day_of(samples[0][0])])[-64:]
        self.last_verdict = verdict
        self.days += 1

    # ------------------------------------------------------------- output
    def _pick(self, t: float) -> tuple[Histogram, str] | None:
        now = self._now_weight()
        for h, name in ((self.week.get(self.slot_of_week(t)), "week"),
                        (self.day.get(self.slot_of_day(t)), "day"),
                        (self.all, "all")):
            if h is not None and h.total() / now >= self.min_weight:
                return h, name
        if self.all.total() > 0:
            return self.all, "all"
        return None

    def point(self, t: float, high: float = 0.95) -> Point:
        """The forecast for the slot containing t."""
        got = self._pick(t)
        if got is None:
            return Point(t, 0.0, 0.0, 0.0, 0.0, 0.0, "none")
        h, src = got
        lv = self.level
        p50 = (h.percentile(0.5) or 0.0) * lv
        p95 = (h.percentile(high) or 0.0) * lv
        lo = (h.percentile(0.10) or 0.0) * lv
        tail = self.tail.percentile(self.tail_q) or 0.0
        hi = max(p95, p50 + tail * lv)
        n = h.total() / self._now_weight()
        conf = n / (n + self.confidence_k) * {"week": 1.0, "day": 0.5, "all": 0.25}[src]
        return Point(t, p50, p95, lo, hi, round(conf, 4), src)

    def forecast(self, start: float, hours: int, high: float = 0.95) -> list[Point]:
        """Points for ``hours`` hours from ``start``, one per bucket
        (``hours * 3600 / bucket_s`` of them), each at its bucket's start."""
        n = int(hours * 3600 // self.bucket_s)
        t0 = start - (self._local(start) % self.bucket_s)
        return [self.point(t0 + i * self.bucket_s, high) for i in range(n)]

    def recommend(self, start: float, hours: int, **kw) -> "Recommendation":
        """``recommend(self.forecast(start, hours), **kw)``."""
        return recommend(self.forecast(start, hours), **kw)

    # ------------------------------------------------------------- persistence
    _PARAMS = ("bucket_s", "half_life_s", "first", "ratio", "utc_offset_s", "min_weight",
               "anomaly_ratio", "anomaly_weight", "level_alpha", "tail_q", "confidence_k")

    def to_dict(self) -> dict:
        """A JSON-ready dict of everything (parameters, histograms, the held day)."""
        return {
            "format": FORMAT,
            "params": {k: getattr(self, k) for k in self._PARAMS},
            "ref_t": self.ref_t, "last_t": self.last_t, "level": self.level,
            "week": {str(k): h.to_dict() for k, h in sorted(self.week.items())},
            "day": {str(k): h.to_dict() for k, h in sorted(self.day.items())},
            "all": self.all.to_dict(), "tail": self.tail.to_dict(),
            "pending": [list(p) for p in self.pending], "pending_day": self.pending_day,
            "last_verdict": self.last_verdict, "days": self.days,
            "anomalies": list(self.anomalies),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Model":
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown forecast model format {d.get('format')!r}")
        m = cls(**d["params"])
        m.ref_t, m.last_t, m.level = d["ref_t"], d["last_t"], float(d["level"])
        m.week = {int(k): Histogram.from_dict(h) for k, h in d["week"].items()}
        m.day = {int(k): Histogram.from_dict(h) for k, h in d["day"].items()}
        m.all = Histogram.from_dict(d["all"])
        m.tail = Histogram.from_dict(d["tail"])
        m.pending = [(float(t), float(v)) for t, v in d["pending"]]
        m.pending_day = d["pending_day"]
        m.last_verdict = int(d["last_verdict"])
        m.days = int(d["days"])
        m.anomalies = [int(x) for x in d["anomalies"]]
        return m


def recommend(points: Sequence[Point], *, margin: float = 0.15, floor: float = 0.0,
              ceiling: float = math.inf, use: str = "p95") -> Recommendation:
    """A quota covering the points: the highest ``use`` figure ("p95" or
    "hi") times 1 + margin, clamped to [floor, ceiling].  Memory: a label's
    memory series, floor/ceiling in bytes.  GPU time: its achieved-share
    series, floor the configured guarantee, ceiling what admission leaves."""
    if use not in ("p95", "hi"):
        raise ValueError(f"use must be p95 or hi, not {use!r}")
    if floor > ceiling:
        raise ValueError("floor above ceiling")
    target = max((getattr(p, use) for p in points), default=0.0)
    raw = target * (1.0 + margin)
    clamped = None
    if raw < floor:
        raw, clamped = floor, "floor"
    elif raw > ceiling:
        raw, clamped = ceiling, "ceiling"
    conf = min((p.confidence for p in points), default=0.0)
    return Recommendation(raw, target, clamped, conf)


def point_dict(p: Point) -> dict:
    """A Point as a JSON-ready dict (for vgpuctl forecast --json)."""
    return asdict(p)
