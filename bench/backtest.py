"""Backtest of demand forecasts against static schedule windows
(docs/forecast.md): offline, standard library only, a few seconds.

    .venv/bin/python bench/backtest.py [--days 35] [--seeds 1,2,3,4,5] [--traces diurnal,...]
        [--markdown bench/backtest-report.md]

Each trace (bench/traces.py) is replayed day by day from day 8: the models
(vgpu.common.forecast.Model, one per label and kind) have seen every sample before
the day, forecast its 24 hours, and three ways of setting the slices are
simulated on the day's 5-minute steps:

- **static**: the current mechanism, a schedule window.  Inference gets its
  "day" profile 08:00-20:00 Monday to Friday and its own profile otherwise;
  training gets what admission leaves.  Both profiles are sized from the
  first week (the history the forecasts start with too), as an operator
  would: the 99th percentile of the window's (resp. the other hours')
  samples, times 1 + MARGIN, within the guarantees below.
- **forecast**: every hour, inference's burst floor and memory quota are
  max(p95 * (1 + MARGIN), hi * (1 + HI_MARGIN)) of the forecast for this
  hour, the next (LEAD_H) and the one before (LAG_H), within the same
  guarantees; training gets what admission leaves.
- **oracle**: each step set from that step's actual demand (the best any
  setting can do: its waits are the unavoidable ones).

The scheduler model (docs/compute.md, as a fluid per step): one GPU of
capacity 1.0, both labels burst slices at the same kernel priority, floors
summing to 100 % (admission).  (With inference at kernel priority high it
would preempt training at once and never wait for GPU time in either mode;
the "high-priority label" is the one whose floor is raised first.)  Per priority class, the guaranteed class
first (each burst slice min(its usable demand, its floor)), then the share
class (what is left, by weight, to slices still wanting; work conserving).
Memory quotas are hard: inference's demand above its quota is unserved
(a wait), and training runs only the workers (WORKER_GIB, WORKER_GPU) that
fit in its quota.  A *wait* is a step where inference got less GPU than it
wanted or wanted more memory than its quota.

Why memory decides the low-priority figure: with work-conserving compute,
every GPU second inference does not use goes to training whatever the
floors say, so floors alone only move GPU time from one label to the other
(the two figures are zero-sum).  What a schedule wastes is a reservation:
memory held for the window's peak all window long, which keeps training
workers out.  Forecasts size the reservation hour by hour.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

if not __package__:      # run as a script (python bench/backtest.py): the checkout's packages
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# by the package's name (bench, a namespace package): tests/host/test_backtest.py
# imports this module as bench.backtest, with the repository root on sys.path
from bench import traces  # noqa: E402
from vgpu.common.forecast import Model  # noqa: E402

HIGH, LOW = 1, 0
GPU_GIB = 80.0
MARGIN = 0.15
LEAD_H = 1
#: and keep the last hour's settings an hour longer (ramps down are late too)
LAG_H = 1
#: the margin over the forecast's spike envelope (Point.hi), which already
#: holds the rare spikes that MARGIN covers for static profiles
HI_MARGIN = 0.05
#: never below: inference's and training's compute guarantees (burst floors)
GUARANTEE = {"inference": 0.2, "training": 0.2}
#: never below: memory quotas, GiB (training: two workers)
MEM_FLOOR = {"inference": 8.0, "training": 2 * traces.WORKER_GIB}
WINDOW = (8, 20)            # the static day window, local hours, Monday-Friday
TRAIN_DAYS = 7


# ------------------------------------------------------------------ scheduler
@dataclass
class Slice:
    demand: float
    policy: str      # "share" | "fixed" | "burst"
    pct: float       # 0..1: weight, cap or floor
    priority: int = LOW


def allocate(slices: list[Slice], capacity: float = 1.0) -> list[float]:
    """GPU time per slice for one step, as docs/compute.md's classes order
    it: high priority before low; within a priority the guaranteed class
    (fixed below its cap, burst below its floor), then the share class
    (share slices, burst slices above their floor) by weight, water-filled
    to each one's demand.  Fixed slices never pass their cap."""
    got = [0.0] * len(slices)
    avail = capacity
    for prio in (HIGH, LOW):
        idx = [i for i, s in enumerate(slices) if s.priority == prio]
        want = {i: min(slices[i].demand, slices[i].pct) for i in idx
                if slices[i].policy in ("fixed", "burst")}
        tot = sum(want.values())
        f = min(1.0, avail / tot) if tot > 0 else 0.0
        for i, w in want.items():
            got[i] = w * f
            avail -= w * f
        active = [i for i in idx if slices[i].policy in ("share", "burst")
                  and slices[i].demand - got[i] > 1e-12]
        while avail > 1e-12 and active:
            wsum = sum(max(slices[i].pct, 1e-4) for i in active)
            give = avail
            nxt = []
            for i in active:
                part = give * max(slices[i].pct, 1e-4) / wsum
                take = min(part, slices[i].demand - got[i])
                got[i] += take
                avail -= take
                if slices[i].demand - got[i] > 1e-12:
                    nxt.append(i)
            if len(nxt) == len(active):
                break
            active = nxt
    return got


# ------------------------------------------------------------------ settings
def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def inference_bounds() -> tuple[tuple[float, float], tuple[float, float]]:
    """(floor lo, hi), (memory lo, hi) for inference, from the guarantees."""
    return ((GUARANTEE["inference"], 1.0 - GUARANTEE["training"]),
            (MEM_FLOOR["inference"], GPU_GIB - MEM_FLOOR["training"]))


def in_window(t: float) -> bool:
    day = int((t - traces.START) // traces.DAY_S)
    hour = ((t - traces.START) % traces.DAY_S) / 3600
    return day % 7 < 5 and WINDOW[0] <= hour < WINDOW[1]


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def static_profiles(tr: traces.Trace) -> dict[bool, tuple[float, float]]:
    """{in window: (inference floor, inference memory)} sized on the first week."""
    (clo, chi), (mlo, mhi) = inference_bounds()
    n = TRAIN_DAYS * tr.steps_per_day
    out = {}
    for win in (True, False):
        g = [v for t, v in zip(tr.t[:n], tr.series["inference"]["gpu"][:n]) if in_window(t) == win]
        m = [v for t, v in zip(tr.t[:n], tr.series["inference"]["mem"][:n]) if in_window(t) == win]
        out[win] = (clamp(quantile(g, 0.99) * (1 + MARGIN), clo, chi),
                    clamp(quantile(m, 0.99) * (1 + MARGIN), mlo, mhi))
    return out


def forecast_settings(gpu_pts, mem_pts) -> list[tuple[float, float]]:
    """Per hour of the day: (inference floor, inference memory) from the
    forecast, covering this hour and the next LEAD_H."""
    (clo, chi), (mlo, mhi) = inference_bounds()
    out = []
    for h in range(len(gpu_pts)):
        sl = slice(max(0, h - LAG_H), min(len(gpu_pts), h + LEAD_H + 1))
        g = max(max(p.p95 * (1 + MARGIN), p.hi * (1 + HI_MARGIN)) for p in gpu_pts[sl])
        m = max(max(p.p95 * (1 + MARGIN), p.hi * (1 + HI_MARGIN)) for p in mem_pts[sl])
        out.append((clamp(g, clo, chi), clamp(m, mlo, mhi)))
    return out


# ------------------------------------------------------------------ one step
@dataclass
class Tally:
    steps: int = 0
    waits: int = 0
    unmet_gpu_h: float = 0.0      # GPU-hours inference wanted and did not get
    mem_waits: int = 0
    low_gpu_h: float = 0.0        # GPU-hours given to training
    high_gpu_h: float = 0.0
    idle_gpu_h: float = 0.0
    workers: int = 0              # training workers running at the last step
    worker_starts: int = 0
    changes: int = 0              # steps whose settings differ from the step before
    last: tuple[float, float] | None = None

    def step(self, dt_h: float, d_h: float, m_h: float, d_l: float,
             floor_h: float, mem_h: float) -> None:
        if self.last is not None and self.last != (floor_h, mem_h):
            self.changes += 1
        self.last = (floor_h, mem_h)
        mem_l = GPU_GIB - mem_h
        fit = math.floor(mem_l / traces.WORKER_GIB + 1e-9)
        workers = min(fit, math.ceil(d_l / traces.WORKER_GPU - 1e-9))
        # a worker that starts spends its first step loading (WARMUP)
        warm = min(workers, self.workers)
        self.worker_starts += max(0, workers - self.workers)
        self.workers = workers
        usable_l = min(d_l, warm * traces.WORKER_GPU)
        mem_short = m_h > mem_h + 1e-9
        # inference that does not fit in its memory quota runs at the quota's share
        usable_h = d_h * (min(1.0, mem_h / m_h) if mem_short else 1.0)
        gh, gl = allocate([Slice(usable_h, "burst", floor_h), Slice(usable_l, "burst", 1.0 - floor_h)])
        self.steps += 1
        short = d_h - gh
        if short > 1e-6 or mem_short:
            self.waits += 1
        self.mem_waits += mem_short
        self.unmet_gpu_h += max(0.0, short) * dt_h
        self.low_gpu_h += gl * dt_h
        self.high_gpu_h += gh * dt_h
        self.idle_gpu_h += max(0.0, 1.0 - gh - gl) * dt_h

    @property
    def wait_frac(self) -> float:
        return self.waits / self.steps if self.steps else 0.0


# ------------------------------------------------------------------ replay
def smape(pairs: list[tuple[float, float]]) -> float:
    s = [abs(f - a) / ((abs(f) + abs(a)) / 2) for f, a in pairs if abs(f) + abs(a) > 0]
    return sum(s) / len(s) if s else 0.0


def new_model(kind: str) -> Model:
    """The model of one inference series: hourly slots of the week, a week's
    half-life; ``first`` near the smallest value that matters (a GPU
    fraction, GiB)."""
    return Model(bucket_s=3600, half_life_s=7 * 86400, first=1e-3 if kind == "gpu" else 0.05)


MODES = ("static", "forecast", "oracle")


def run_trace(tr: traces.Trace) -> dict:
    """Replay one trace: the tallies of each mode (static, forecast, and the
    oracle that knows each step's demand: the best any setting can do) and
    the forecast errors."""
    spd = tr.steps_per_day
    per_h = spd // 24
    dt_h = tr.step_s / 3600
    (clo, chi), (mlo, mhi) = inference_bounds()
    models = {k: new_model(k) for k in ("gpu", "mem")}
    static = static_profiles(tr)
    tallies = {m: Tally() for m in MODES}
    err: dict[str, list] = {"gpu": [], "mem": []}
    naive: dict[str, list] = {"gpu": [], "mem": []}
    inf = tr.series["inference"]
    for day in range(tr.days):
        lo, hi = day * spd, (day + 1) * spd
        if day >= TRAIN_DAYS:
            pts = {k: models[k].forecast(tr.t[lo], 24) for k in models}
            fset = forecast_settings(pts["gpu"], pts["mem"])
            for k in ("gpu", "mem"):
                for h in range(24):
                    a = sum(inf[k][lo + h * per_h: lo + (h + 1) * per_h]) / per_h
                    err[k].append((pts[k][h].p50, a))
                    wk = lo - 7 * spd + h * per_h
                    naive[k].append((sum(inf[k][wk: wk + per_h]) / per_h, a))
            for i in range(lo, hi):
                d_h, m_h = inf["gpu"][i], inf["mem"][i]
                args = (dt_h, d_h, m_h, tr.series["training"]["gpu"][i])
                tallies["static"].step(*args, *static[in_window(tr.t[i])])
                tallies["forecast"].step(*args, *fset[(i - lo) // per_h])
                tallies["oracle"].step(*args, clamp(d_h, clo, chi), clamp(m_h, mlo, mhi))
        for i in range(lo, hi):
            models["gpu"].add(tr.t[i], inf["gpu"][i])
            models["mem"].add(tr.t[i], inf["mem"][i])
    return {
        "trace": tr, **tallies,
        "smape": {k: smape(v) for k, v in err.items()},
        "naive_smape": {k: smape(v) for k, v in naive.items()},
        "p95_abs": {k: quantile([abs(f - a) for f, a in v], 0.95) for k, v in err.items()},
        "static_profiles": static,
        "anomalies": {k: list(m.anomalies) for k, m in models.items()},
        "level": {k: m.level for k, m in models.items()},
    }


def verdict(r: dict) -> tuple[bool, bool]:
    """(forecast waits less and leaves no more GPU time unmet, forecast
    gives training more GPU time) than static."""
    s, f = r["static"], r["forecast"]
    return (f.waits < s.waits and f.unmet_gpu_h <= s.unmet_gpu_h, f.low_gpu_h > s.low_gpu_h)


def pct_change(new: float, old: float) -> str:
    if old == 0:
        return "n/a" if new == 0 else "+inf"
    return f"{(new - old) / old:+.1%}"


def _beaten(r: dict) -> str:
    w, u = verdict(r)
    if w and u:
        return "yes"
    return "no: " + " and ".join(x for x, ok in (("waits", w), ("training", u)) if not ok)


def report(runs: dict[int, list[dict]], cmd: str) -> str:
    seeds = sorted(runs)
    results = runs[seeds[0]]
    days = results[0]["trace"].days
    lines = [
        "# Forecast backtest",
        "",
        f"Produced by `{cmd}` (standard library only, seeded, deterministic).",
        "",
        f"Traces of {days} days at 5-minute steps (bench/traces.py); days {TRAIN_DAYS + 1}-{days} "
        "replayed, each forecast a day ahead from the days before it only.  The scheduler model, "
        "the static windows and the forecast-driven settings: bench/backtest.py's docstring and "
        f"docs/forecast.md.  GPU {GPU_GIB:.0f} GiB; margin {MARGIN:.0%} (static profiles, forecast "
        f"p95), {HI_MARGIN:.0%} over the forecast's spike envelope; lead {LEAD_H} h, lag {LAG_H} h; "
        f"guarantees: inference {GUARANTEE['inference']:.0%} / training "
        f"{GUARANTEE['training']:.0%} of the GPU, {MEM_FLOOR['inference']:.0f} / "
        f"{MEM_FLOOR['training']:.0f} GiB; training workers {traces.WORKER_GIB:.0f} GiB / "
        f"{traces.WORKER_GPU:.3f} GPU, one step to start.",
        "",
        f"## Forecast error (seed {seeds[0]}; inference, hourly means, the p50 forecast a day ahead)",
        "",
        "| trace | GPU sMAPE | GPU p95 abs err | memory sMAPE | memory p95 abs err (GiB) "
        "| same hour last week, sMAPE (GPU / memory) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['trace'].name} | {r['smape']['gpu']:.1%} | {r['p95_abs']['gpu']:.3f} "
                     f"| {r['smape']['mem']:.1%} | {r['p95_abs']['mem']:.2f} "
                     f"| {r['naive_smape']['gpu']:.1%} / {r['naive_smape']['mem']:.1%} |")
    lines += [
        "",
        f"## Static windows vs forecasts (seed {seeds[0]})",
        "",
        "Waits: 5-minute steps where inference got less GPU than it wanted or wanted more memory "
        "than its quota, as a share of the replayed steps (in brackets: steps, of which caused by "
        "memory).  The oracle sets each step from that step's actual demand: its waits are the "
        "unavoidable ones (demand above what the training guarantee leaves), its training figure "
        "the most any setting gives without a wait.  Unmet: GPU-hours inference wanted and did "
        "not get.  Training: GPU-hours given to the low-priority label.  Changes: steps whose "
        "settings differ from the step before.",
        "",
        "| trace | mode | waits | unmet GPU-h | training GPU-h | changes | worker starts |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for m in MODES:
            t = r[m]
            lines.append(f"| {r['trace'].name} | {m} | {t.wait_frac:.2%} ({t.waits}, {t.mem_waits}) "
                         f"| {t.unmet_gpu_h:.2f} | {t.low_gpu_h:.1f} | {t.changes} | {t.worker_starts} |")
    lines += [
        "",
        "| trace | waits, forecast vs static | avoidable waits (over the oracle's) | unmet GPU-h "
        "| training GPU-h | both beaten |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        s, f, o = r["static"], r["forecast"], r["oracle"]
        lines.append(f"| {r['trace'].name} | {pct_change(f.waits, s.waits)} "
                     f"| {s.waits - o.waits} -> {f.waits - o.waits} "
                     f"| {pct_change(f.unmet_gpu_h, s.unmet_gpu_h)} "
                     f"| {pct_change(f.low_gpu_h, s.low_gpu_h)} | {_beaten(r)} |")
    if len(seeds) > 1:
        lines += [
            "",
            f"## Over seeds {seeds[0]}-{seeds[-1]}",
            "",
            "Per trace: on how many seeds the forecast beat static on both figures, and the range "
            "of the changes (forecast vs static).",
            "",
            "| trace | both beaten | waits change | training GPU-h change | failures |",
            "|---|---|---|---|---|",
        ]
        for j, r0 in enumerate(results):
            rs = [runs[s][j] for s in seeds]
            wc = [(r["forecast"].waits - r["static"].waits) / max(1, r["static"].waits) for r in rs]
            tc = [(r["forecast"].low_gpu_h - r["static"].low_gpu_h) / r["static"].low_gpu_h for r in rs]
            fails = [f"seed {s}: {_beaten(r)[4:]}" for s, r in zip(seeds, rs) if _beaten(r) != "yes"]
            lines.append(f"| {r0['trace'].name} | {sum(_beaten(r) == 'yes' for r in rs)}/{len(rs)} "
                         f"| {min(wc):+.0%} .. {max(wc):+.0%} | {min(tc):+.1%} .. {max(tc):+.1%} "
                         f"| {'; '.join(fails) or '-'} |")
    lines += ["", "Traces:", ""]
    for r in results:
        tr = r["trace"]
        st = r["static_profiles"]
        odd = [str(d - traces.START // traces.DAY_S + 1) for d in r["anomalies"]["gpu"]]
        lines.append(f"- `{tr.name}`: {tr.about}.  Static profiles (sized on week 1): window "
                     f"{st[True][0]:.0%} / {st[True][1]:.0f} GiB, otherwise {st[False][0]:.0%} / "
                     f"{st[False][1]:.0f} GiB.  Days the GPU model judged odd (day 1 = the first "
                     f"Monday): {', '.join(odd) or 'none'}; final trend level {r['level']['gpu']:.2f}.")
    return "\n".join(lines) + "\n"


def run(days: int = 35, seeds: tuple[int, ...] = (1,), names: tuple[str, ...] = tuple(traces.TRACES)
        ) -> dict[int, list[dict]]:
    return {s: [run_trace(traces.make(n, days=days, seed=s, **traces.TRACES[n])) for n in names]
            for s in seeds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=int, default=35)
    ap.add_argument("--seeds", default="1", help="comma-separated; the first one's figures in full")
    ap.add_argument("--traces", default=",".join(traces.TRACES))
    ap.add_argument("--markdown", help="also write the report to this file")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    runs = run(a.days, tuple(int(x) for x in a.seeds.split(",")), tuple(a.traces.split(",")))
    args = argv if argv is not None else sys.argv[1:]
    cmd = " ".join([".venv/bin/python bench/backtest.py", *args])
    text = report(runs, cmd)
    print(text)
    print(f"({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
