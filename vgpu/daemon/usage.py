"""vgpud's usage history and forecasts (docs/history.md,
docs/forecast.md): the service that samples every slice into the history
file, the API's ``history`` and ``forecast`` operations, and the forecaster
that acts on a profile's forecasts.

- ``HistoryService.run``: a service of the root nursery (``nursery.start``):
  every [history] interval, a kernel dump (``SliceManager.kdump``, at most
  interval / 2 old) becomes ``history.from_kernel`` samples with the
  records' containers, labels and host GPUs, handed to a
  ``history.HistoryWriter`` (its own thread: the trio loop never waits on
  the disk; a broken disk is a rate-limited warning, see history.py).  The
  epoch of the counters is vgpu.ko's generic netlink family id: a module
  reload gives the family a new id, so the history sees the counters
  restart even when they have climbed past their old values.
- ``HistoryService.query`` / ``forecast``: read through a separate
  read-only ``HistoryStore`` in a worker thread (``trio.to_thread``);
  forecast models (vgpu.common.forecast.Model, one for memory and one for GPU time
  per label) are cached and rebuilt every ``MODEL_TTL`` seconds.
- ``Forecaster``: every ``TICK`` seconds, for each profile whose
  ``forecast`` is "recommend" or "act" (config.ForecastSpec), the compute of
  its slices carrying ``forecast_label`` is planned from the label's
  forecast over [now, now + lead] (``plan_compute``): raised ``lead``
  seconds ahead of predicted demand, lowered back once none is predicted
  within the lead time; never below the configured value, never past the
  profile's max_compute nor (for policies that reserve compute) what
  admission leaves on the slice's GPUs.  An adjustment is an overlay on the
  effective settings (``SliceManager.overlay``), never written into the
  record or the config: ``reset`` (vgpuctl forecast --reset LABEL), a mode
  set to off, or a restart restores the configured values.  Every change is
  logged and published (``forecast-adjust``; ``forecast-recommend`` in
  recommend mode, which changes nothing).

What it may call: the slice manager, vgpu.daemon.history, vgpu.common.forecast,
vgpu.common.histdoc (the document's shape).
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from typing import Callable

import trio

from vgpu.common import forecast
from vgpu.common import histdoc
from vgpu.daemon import history
from vgpu.daemon import policy
from vgpu.daemon.api import ApiError
from vgpu.common.values import format_percent, quote

log = logging.getLogger("vgpud.history")

#: a query's most points (series x buckets) before it is refused
MAX_POINTS = 50000
#: columns auto_step aims at when a query gives no step
AUTO_COLUMNS = 240
#: seconds a forecast model is reused before it is rebuilt from the file
MODEL_TTL = 600.0
#: forecasts: the model's bucket, the history step it reads
BUCKET_S = 3600
#: the forecaster's period, the margin over the p95, the least confidence it acts
#: on, the smallest change (percentage points) it makes
TICK = 60.0
MARGIN = 0.15
MIN_CONFIDENCE = 0.3
HYSTERESIS = 1.0


def utc_offset() -> int:
    off = datetime.datetime.now().astimezone().utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def labels_match(labels: dict, sel: str) -> bool:
    k, _, v = sel.partition("=")
    return labels.get(k) == v


class HistoryService:
    """The history of one vgpud (cfg.history); ``writer`` is None when it is
    disabled."""

    def __init__(self, mgr, clock: Callable[[], float] = time.time):
        self.mgr = mgr
        self.clock = clock
        cfg = mgr.cfg
        h = cfg.history
        self.cfg = h
        self.path = h.db_path(cfg.paths.state_dir)
        self.store_kw = dict(raw_retention_s=h.raw_retention, agg_step_s=h.step,
                             agg_retention_s=h.retention, max_bytes=h.max_size,
                             max_gap_s=max(900.0, 3 * h.interval))
        self.writer = history.HistoryWriter(self.path, **self.store_kw) if h.enabled else None
        self.limiter = trio.CapacityLimiter(2)       # readers at once
        self.models: dict[str, tuple[float, dict]] = {}

    # ------------------------------------------------------------ sampling
    def epoch(self) -> str | None:
        k = self.mgr.kport.kernel
        fid = getattr(k, "family_id", None)
        return f"genl-{fid}" if isinstance(fid, int) else None

    async def collect(self, now: float) -> list:
        mgr = self.mgr
        if mgr.kport.kernel is None:
            return []
        ks_all = await mgr.kdump(max_age=self.cfg.interval / 2)
        epoch = self.epoch()
        out = []
        for ks in list(ks_all.values()):
            rec = mgr.records.get(mgr.by_id.get(ks.id))
            out.extend(history.from_kernel(ks, rec, now, epoch))
        return out

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.writer is None:
            log.info("history: disabled ([history] enabled = false)")
            task_status.started()
            return
        log.info("history: %s, a sample of every slice every %g s", self.path,
                 self.cfg.interval)
        await self.writer.run(self.collect, self.cfg.interval, task_status=task_status)

    def stats(self) -> dict:
        if self.writer is None:
            return {"enabled": False, "path": str(self.path)}
        return {"enabled": True, "interval_s": self.cfg.interval, **self.writer.stats()}

    # ------------------------------------------------------------ reading
    async def _read(self, fn):
        """fn(store) on a read-only store, in a worker thread; None when
        there is no file yet."""
        def work():
            if not self.path.exists():
                return None
            store = history.HistoryStore(self.path, readonly=True, **self.store_kw)
            try:
                return fn(store)
            finally:
                store.close()
        try:
            return await trio.to_thread.run_sync(work, limiter=self.limiter)
        except (history.HistoryError, OSError, history.sqlite3.Error) as e:
            raise ApiError("unavailable", f"history: {self.path}: {e}") from None

    async def query(self, args: dict) -> dict:
        """The ``history`` op: the history document (vgpu.common.histdoc)."""
        now = self.clock()
        until = args.get("until", now)
        since = args.get("since", until - 86400.0)
        if until <= since:
            raise ApiError("bad-request", f"args.until: {quote(until)} is not after "
                                          f"args.since ({quote(since)})")
        step = args.get("step")
        if step is None:
            step = histdoc.auto_step(since, until, AUTO_COLUMNS, least=self.cfg.interval)
        elif (until - since) / step > MAX_POINTS:
            raise ApiError("bad-request", f"args.step: {quote(step)} makes over {MAX_POINTS} "
                                          f"points of {until - since:g} s (give a larger step)")
        label = args.get("label")
        kw = dict(container=args.get("container"), label=label, gpu=args.get("gpu"),
                  since=since, until=until, step=step)
        rows = await self._read(lambda st: st.series(**kw)) or []
        if len(rows) > MAX_POINTS:
            raise ApiError("bad-request", f"the query matches {len(rows)} points (at most "
                                          f"{MAX_POINTS}): narrow it or give a larger step")
        windows = histdoc.expand_windows(self.mgr.cfg.schedule, since, until)
        return histdoc.doc_from_rows(rows, windows, since=since, until=until, step=step)

    # ------------------------------------------------------------ forecasts
    async def models_for(self, label: str) -> dict:
        """{"memory": Model, "gpu": Model, "samples": n, "first", "last"}
        of a label's demand, cached MODEL_TTL seconds."""
        hit = self.models.get(label)
        mono = trio.current_time()
        if hit is not None and mono - hit[0] < MODEL_TTL:
            return hit[1]
        off = utc_offset()

        def build(store):
            return build_models(store.demand(label=label, step=self.cfg.step), off)
        got = await self._read(build)
        if got is None:
            got = build_models([], off)
        self.models[label] = (mono, got)
        return got

    async def forecast(self, args: dict) -> dict:
        label, hours = args["label"], args.get("hours", 24)
        ms = await self.models_for(label)
        now = self.clock()
        mem = ms["memory"].forecast(now, hours)
        gpu = ms["gpu"].forecast(now, hours)
        n = sum(1 for r in self.mgr.records.values() if labels_match(r.labels, label))
        rm = forecast.recommend(mem, margin=MARGIN)
        rg = forecast.recommend(gpu, margin=MARGIN)

        def fig(p):
            return {"p50": p.p50, "p95": p.p95, "lo": p.lo, "hi": p.hi,
                    "confidence": p.confidence, "source": p.source}
        fc = getattr(self.mgr, "forecaster", None)
        return {
            "label": label, "hours": hours, "bucket_s": BUCKET_S, "slices": n,
            "history": {"samples": ms["samples"], "first": ms["first"], "last": ms["last"],
                        "days": ms["memory"].days},
            "points": [{"t": a.t, "memory": fig(a), "gpu": fig(b)} for a, b in zip(mem, gpu)],
            "recommended": {
                "memory": {"bytes": int(rm.value), "per_slice": int(rm.value / n) if n else None,
                           "target": rm.target, "confidence": rm.confidence},
                "compute": {"percent": round(rg.value * 100, 2),
                            "per_slice": round(rg.value * 100 / n, 2) if n else None,
                            "target": rg.target, "confidence": rg.confidence}},
            "adjustments": fc.adjustments(label) if fc is not None else [],
        }


def build_models(demand: list[dict], utc_offset_s: int = 0) -> dict:
    """Memory (the sum of the label's largest use per bucket, bytes) and GPU
    time (GPU-seconds per second) models of a label's demand rows
    (HistoryStore.demand)."""
    mem = forecast.Model(BUCKET_S, first=float(1 << 20), utc_offset_s=utc_offset_s)
    gpu = forecast.Model(BUCKET_S, first=1e-3, utc_offset_s=utc_offset_s)
    n = 0
    for d in demand:
        t = d["t"]
        if d.get("mem_used_max") is not None:
            mem.add(t, max(0.0, float(d["mem_used_max"])))
        if d.get("gpu_s_per_s") is not None:
            gpu.add(t, max(0.0, float(d["gpu_s_per_s"])))
        n += 1
    return {"memory": mem, "gpu": gpu, "samples": n,
            "first": demand[0]["t"] if demand else None,
            "last": demand[-1]["t"] if demand else None}


# ---------------------------------------------------------------- acting
def lead_points(model, now: float, lead: float) -> list:
    """The model's points of the buckets that overlap [now, now + lead]."""
    pts = model.forecast(now, math.ceil(lead / BUCKET_S) + 1)
    return [p for p in pts if p.t <= now + lead and p.t + BUCKET_S > now]


def plan_compute(points: list, slices: int, configured: float, ceiling: float) -> float | None:
    """The compute percentage one of ``slices`` slices of a label should
    have for the forecast ``points`` (GPU-seconds per second of the whole
    label, over [now, now + lead]): the largest p95 split over the slices,
    plus MARGIN, clamped to [configured, ceiling]; None (the configured
    value) when that is not above it, or the forecast is not confident."""
    if not points or slices <= 0:
        return None
    if min(p.confidence for p in points) < MIN_CONFIDENCE:
        return None
    want = max(p.p95 for p in points) * (1.0 + MARGIN) * 100.0 / slices
    want = min(want, ceiling, 100.0)
    if want <= configured + HYSTERESIS / 2:
        return None
    return round(want, 2)


class Forecaster:
    """Acts on the forecasts of the profiles that ask for it (see the
    module's doc).  ``models(label)`` is an async function returning
    build_models' dict; ``clock`` the wall clock (both injectable for
    tests)."""

    def __init__(self, mgr, models, clock: Callable[[], float] = time.time):
        self.mgr = mgr
        self.models = models
        self.clock = clock
        self.held: set[str] = set()             # labels reset by the operator
        self.recommended: dict[str, float | None] = {}   # container -> last recommended

    def adjustments(self, label: str | None = None) -> list[dict]:
        out = []
        for c, pct in sorted(self.mgr.overlay.items()):
            rec = self.mgr.records.get(c)
            if rec is None or (label is not None and not labels_match(rec.labels, label)):
                continue
            out.append({"container": c, "compute": pct})
        return out

    def _ceiling(self, c: str, rec, spec, profile: str | None) -> float:
        cfg = self.mgr.cfg
        top = 100.0
        lim = cfg.limits.get(profile) if profile else None
        if lim is not None and lim.max_compute is not None:
            top = min(top, lim.max_compute)
        if policy.reserves_compute(spec.policy):
            views = self.mgr.views(exclude=c)
            for g in rec.gpus:
                v = views.get(g.gpu)
                if v is not None:
                    top = min(top, 100.0 - v.compute_fixed)
        return top

    async def tick(self) -> int:
        """One round: plan every slice of a forecasting profile; returns how
        many overlays changed (applied in "act" mode)."""
        mgr, cfg = self.mgr, self.mgr.cfg
        now = self.clock()
        wanted: dict[str, float | None] = {}
        why: dict[str, tuple] = {}
        groups: dict[tuple, list] = {}
        for c, rec in list(mgr.records.items()):
            try:
                base = mgr.eff(rec, overlay=False)
            except ValueError:
                continue
            fc = cfg.forecast_of(base.profile)
            if fc.mode == "off" or fc.label is None or not labels_match(rec.labels, fc.label):
                continue
            if base.spec.policy not in ("burst", "share") or base.spec.compute is None:
                continue
            groups.setdefault((fc.label, fc.mode, fc.lead), []).append((c, rec, base))
        for (label, mode, lead), members in groups.items():
            ms = await self.models(label)
            pts = lead_points(ms["gpu"], now, lead)
            n = sum(1 for r in mgr.records.values() if labels_match(r.labels, label))
            for c, rec, base in members:
                if label in self.held:
                    want = None
                else:
                    want = plan_compute(pts, n, base.spec.compute,
                                        self._ceiling(c, rec, base.spec, base.profile))
                if mode == "recommend":
                    if self.recommended.get(c, None) != want:
                        self.recommended[c] = want
                        log.info("forecast (recommend) %s: compute %s -> %s (label %s, lead "
                                 "%g s)", c, format_percent(base.spec.compute),
                                 format_percent(want if want is not None else base.spec.compute),
                                 label, lead)
                        mgr.publish("forecast-recommend", c, label=label,
                                    configured=base.spec.compute, compute=want)
                    continue
                wanted[c] = want
                why[c] = (label, base.spec.compute)
        changed = 0
        for c in list(mgr.overlay):
            if c not in wanted and c in mgr.records:
                wanted[c] = None                     # its profile no longer acts: restore
                why[c] = ("", None)
        for c, want in wanted.items():
            old = mgr.overlay.get(c)
            if want is None and old is None:
                continue
            if want is not None and old is not None and abs(want - old) < HYSTERESIS:
                continue
            label, conf = why.get(c, ("", None))
            if want is None:
                mgr.overlay.pop(c, None)
            else:
                mgr.overlay[c] = want
            changed += 1
            log.warning("forecast: %s compute %s -> %s (label %s, configured %s)", c,
                        "configured" if old is None else format_percent(old),
                        "configured" if want is None else format_percent(want), label or "-",
                        "-" if conf is None else format_percent(conf))
            mgr.publish("forecast-adjust", c, label=label or None, before=old, compute=want,
                        configured=conf)
        for c in list(mgr.overlay):
            if c not in mgr.records:
                mgr.overlay.pop(c)
        if changed:
            await mgr.apply_all("forecast")
        return changed

    async def reset(self, label: str) -> list[str]:
        """The operator's undo: drop the label's overlays and hold it (no new
        adjustment) until vgpud restarts or ``resume``; returns the containers
        restored."""
        self.held.add(label)
        gone = [c for c in list(self.mgr.overlay)
                if c in self.mgr.records and labels_match(self.mgr.records[c].labels, label)]
        for c in gone:
            before = self.mgr.overlay.pop(c)
            log.warning("forecast: %s compute restored to configured by the operator "
                        "(was %s; label %s held)", c, format_percent(before), label)
            self.mgr.publish("forecast-adjust", c, label=label, before=before, compute=None,
                             reason="reset")
        if gone:
            await self.mgr.apply_all("forecast-reset")
        return gone

    def resume(self, label: str) -> bool:
        if label in self.held:
            self.held.discard(label)
            return True
        return False

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(TICK)
            if not any(f.mode != "off" for f in self.mgr.cfg.forecasts.values()) \
                    and not self.mgr.overlay:
                continue
            try:
                await self.tick()
            except ApiError as e:
                log.warning("forecast: %s", e.message)
            except trio.TooSlowError:
                log.warning("forecast: the kernel did not answer in time")
            except Exception:
                log.exception("forecast tick")
