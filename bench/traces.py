"""Synthetic but realistic demand traces for the forecast backtest
(docs/forecast.md).  Seeded, standard library only; bench/backtest.py replays them.

A trace is two labels on one GPU, sampled every ``step_s`` (5 minutes) for
``days`` days starting on a Monday 00:00 (local time = UTC here):

- ``inference`` (the high-priority label): an online service.  Its load
  follows the day (a morning and an afternoon hump, 07:00-23:00, quiet
  nights, weekends at 45 % of a weekday), with multiplicative noise and
  random spikes (a few a day, 10-40 minutes, +15-35 % of the GPU).  GPU-time
  demand is 0.55 x load of the GPU; memory is the weights (6 GiB) plus a KV
  cache that grows with load (up to 30 GiB), spikes included.
- ``training`` (the low-priority label): batch work in workers of
  ``WORKER_GIB`` GiB and ``WORKER_GPU`` of the GPU each.  By default an
  endless queue of sweeps: it would use the whole GPU (demand 1.0) and as
  many workers as fit.  Its memory demand is what its GPU demand needs.

Traces (``TRACES``): ``diurnal`` (the above), ``nightly`` (training is a
nightly job 21:00-06:00 wanting 90 % of the GPU plus daytime experiments at
30 %), ``holiday`` (the Wednesday of the fourth week has a weekend's load),
``trend`` (the service grows 10 % a week, compounding), ``mixed`` (all of
them at once).
"""
from __future__ import annotations

import calendar
import math
import random
from dataclasses import dataclass, field

#: Monday 2026-01-05 00:00 UTC
START = calendar.timegm((2026, 1, 5, 0, 0, 0))
STEP_S = 300
DAY_S = 86400
WORKER_GIB = 8.0
WORKER_GPU = 0.125
PEAK_GPU = 0.55
WEIGHTS_GIB = 6.0
KV_GIB = 30.0


@dataclass
class Trace:
    """``series[label][kind]``: per-step values, kind "gpu" (fraction of the
    GPU wanted) or "mem" (GiB wanted); ``t[i]`` the step's Unix time."""
    name: str
    about: str
    start: int
    step_s: int
    days: int
    t: list[int]
    series: dict[str, dict[str, list[float]]]
    holidays: list[int] = field(default_factory=list)   # day indexes

    @property
    def steps_per_day(self) -> int:
        return DAY_S // self.step_s


def _shape(hour: float) -> float:
    """0..1: the service's load by local hour (two humps, quiet nights)."""
    g = (math.exp(-((hour - 11.0) / 2.6) ** 2) + 0.95 * math.exp(-((hour - 16.5) / 3.0) ** 2))
    return min(1.0, g / 1.05)


def _spikes(rng: random.Random, n: int, per_day: float, step_s: int) -> list[float]:
    out = [0.0] * n
    steps_day = DAY_S // step_s
    i = 0
    rate = per_day / steps_day
    while i < n:
        i += max(1, int(rng.expovariate(rate)))
        if i >= n:
            break
        length = rng.randint(2, 8)                 # 10-40 minutes
        amp = rng.uniform(0.15, 0.35)
        for j in range(i, min(n, i + length)):
            out[j] = max(out[j], amp)
        i += length
    return out


def make(name: str = "diurnal", *, days: int = 35, seed: int = 1, step_s: int = STEP_S,
         trend_per_week: float = 0.0, holidays: tuple[int, ...] = (),
         nightly: bool = False, spikes_per_day: float = 3.0, noise: float = 0.08) -> Trace:
    """One trace; see the module doc for what the knobs model."""
    rng = random.Random(f"{name}:{seed}")
    n = days * DAY_S // step_s
    t = [START + i * step_s for i in range(n)]
    spk = _spikes(rng, n, spikes_per_day, step_s)
    gpu_h, mem_h, gpu_l, mem_l = [], [], [], []
    for i, ti in enumerate(t):
        day = (ti - START) // DAY_S
        hour = ((ti - START) % DAY_S) / 3600.0
        weekend = day % 7 >= 5 or day in holidays
        load = 0.1 + 0.9 * _shape(hour) * (0.45 if weekend else 1.0)
        load *= (1.0 + trend_per_week) ** ((ti - START) / (7 * DAY_S))
        load *= math.exp(rng.gauss(0.0, noise))
        g = min(1.0, PEAK_GPU * load + spk[i])
        gpu_h.append(g)
        mem_h.append(WEIGHTS_GIB + KV_GIB * min(1.6, load + spk[i] / PEAK_GPU * 0.5))
        if nightly:
            if hour >= 21 or hour < 6:
                lg = 0.9
            else:
                # an experiment runs in this hour or not (decided per hour)
                lg = 0.3 if random.Random(f"{name}:{seed}:{day}:{int(hour)}").random() < 0.7 else 0.0
        else:
            lg = 1.0
        gpu_l.append(lg)
        mem_l.append(WORKER_GIB * math.ceil(lg / WORKER_GPU - 1e-9))
    about = {
        "diurnal": "diurnal inference (noise, spikes) beside endless training sweeps",
        "nightly": "diurnal inference beside a nightly training job (21:00-06:00) and daytime experiments",
        "holiday": "diurnal inference with a weekday holiday (weekend load) in week 4",
        "trend": f"diurnal inference growing {trend_per_week:.0%} a week",
        "mixed": "trend, holiday and nightly training together",
    }.get(name, name)
    return Trace(name, about, START, step_s, days, t,
                 {"inference": {"gpu": gpu_h, "mem": mem_h},
                  "training": {"gpu": gpu_l, "mem": mem_l}}, list(holidays))


#: the backtest's traces: name -> keyword arguments of make()
TRACES = {
    "diurnal": {},
    "nightly": {"nightly": True},
    "holiday": {"holidays": (23,)},
    "trend": {"trend_per_week": 0.10},
    "mixed": {"trend_per_week": 0.10, "holidays": (23,), "nightly": True},
}


def all_traces(days: int = 35, seed: int = 1) -> list[Trace]:
    return [make(name, days=days, seed=seed, **kw) for name, kw in TRACES.items()]
