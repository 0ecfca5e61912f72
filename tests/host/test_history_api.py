"""vgpud's usage history and forecasts (vgpu.daemon.usage): the sampler over
the slice manager, the ``history`` and ``forecast`` API ops, the writer's
stats in ``status``, and the forecaster's limits (a fake clock and models:
off by default, recommend changes nothing, never below the configured
value, within admission and max_compute, lead time honoured, reset)."""
from __future__ import annotations

import time

import pytest
import trio

from daemon_support import CONFIG, FakeInventory, FakeKernel, GiB, call
from vgpu.common import forecast
from vgpu.daemon import history
from vgpu.daemon import usage
from vgpu.daemon.config import parse_config
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

FORECAST_CONFIG = CONFIG + """
[profiles.burst20]
memory = "2GiB"
compute = "20%"
policy = "burst"
max_compute = "70%"
forecast = "{mode}"
forecast_label = "team=web"
forecast_lead = "30m"
[profiles.other]
memory = "2GiB"
compute = "40%"
policy = "burst"
"""


def make_env(tmp_path, text=CONFIG):
    cfg = parse_config(text.format(tmp=tmp_path), "test.toml")
    k = FakeKernel()
    mgr = SliceManager(cfg, "test.toml", KernelPort(factory=lambda: k),
                       StateStore(tmp_path / "state"), FakeInventory())
    mgr.load_state()
    return mgr, k


# ------------------------------------------------------------ history
async def test_history_samples_and_query(tmp_path):
    mgr, k = make_env(tmp_path)
    r = await call(mgr, "create", container="web", memory="2GiB", labels={"team": "web"})
    assert r["ok"], r
    sid = r["result"]["slice"]["slice_id"]
    mgr.history = svc = usage.HistoryService(mgr)
    assert svc.path == tmp_path / "state" / "history.db"
    svc.writer.start()
    t0 = float(int(time.time()) // 10 * 10 - 100)    # raw samples: the writer's clock is real
    for i, used in enumerate((GiB // 2, GiB, 3 * GiB // 2)):
        g = k.slices_[sid].gpus[0]
        g.mem_used = used
        g.gpu_time_ns += 5 * 10**9
        mgr.kdump_at = 0.0
        samples = await svc.collect(t0 + 10 * i)
        assert [s.mem_used for s in samples] == [used]
        assert samples[0].container == "web" and samples[0].labels == {"team": "web"}
        svc.writer.submit(samples)
    assert svc.writer.flush(5)
    r = await call(mgr, "history", container="web", since=t0 - 60, until=t0 + 60, step=10)
    assert r["ok"], r
    doc = r["result"]
    assert doc["since"] == t0 - 60 and doc["step"] == 10 and doc["windows"] == []
    [s] = doc["series"]
    assert (s["container"], s["slice_id"], s["labels"], s["gpu"]) == ("web", sid,
                                                                      {"team": "web"}, 0)
    assert [row["mem_used"] for row in s["rows"]] == [GiB // 2, GiB, 3 * GiB // 2]
    assert s["rows"][-1]["share"] == pytest.approx(0.5)
    # selectors: a label that matches, one that does not, a GPU
    r = await call(mgr, "history", label={"team": "web"}, since=t0 - 60, until=t0 + 60)
    assert len(r["result"]["series"]) == 1
    r = await call(mgr, "history", label={"team": "db"}, since=t0 - 60, until=t0 + 60)
    assert r["result"]["series"] == []
    r = await call(mgr, "history", gpu=1, since=t0 - 60, until=t0 + 60)
    assert r["result"]["series"] == []
    st = (await call(mgr, "status"))["result"]["history"]
    assert st["enabled"] and st["written"] == 3 and st["state"] == "ok"
    await trio.to_thread.run_sync(svc.writer.close, 5)


async def test_history_windows_and_defaults(tmp_path):
    text = CONFIG + """
[[schedule]]
label = "team=web"
profile = "small"
from = "08:00"
to = "20:00"
"""
    mgr, k = make_env(tmp_path, text)
    mgr.history = usage.HistoryService(mgr, clock=lambda: 1_764_662_400.0)
    r = await call(mgr, "history")               # no file yet: an empty document
    assert r["ok"], r
    doc = r["result"]
    assert doc["until"] == 1_764_662_400.0 and doc["since"] == doc["until"] - 86400
    assert doc["step"] >= 10 and doc["series"] == []
    assert doc["windows"] and all(w["profile"] == "small" and w["label"] == "team=web"
                                  for w in doc["windows"])


@pytest.mark.parametrize("args, words", [
    ({"since": "yesterday"}, 'args.since: "yesterday" is not a time'),
    ({"since": 100.0, "until": 50.0}, "args.until: 50.0 is not after args.since"),
    ({"step": 0}, "args.step: 0 is out of range"),
    ({"step": "5q"}, 'args.step: "5q" is not a duration'),
    ({"since": 0, "until": 10**6, "step": 1}, "args.step: 1.0 makes over"),
    ({"gpu": "0"}, "args.gpu"),
    ({"label": "team=web"}, "args.label"),
    ({"bogus": 1}, "args.bogus: unknown argument of history"),
])
async def test_history_bad_args(tmp_path, args, words):
    mgr, k = make_env(tmp_path)
    mgr.history = usage.HistoryService(mgr)
    r = await call(mgr, "history", **args)
    assert not r["ok"] and r["error"]["code"] == "bad-request", r
    assert words in r["error"]["message"], r


async def test_history_disabled_and_absent(tmp_path):
    mgr, k = make_env(tmp_path, CONFIG + "[history]\nenabled = false\n")
    assert (await call(mgr, "history"))["error"]["code"] == "unavailable"   # no service
    mgr.history = svc = usage.HistoryService(mgr)
    assert svc.writer is None and svc.stats() == {"enabled": False, "path": str(svc.path)}
    async with trio.open_nursery() as n:
        await n.start(svc.run)          # returns at once: nothing sampled
    assert (await call(mgr, "history"))["ok"]


async def test_sampler_service_in_a_nursery(tmp_path):
    """run(): started with nursery.start, samples each interval, closes the
    writer when cancelled; a kernel that is not there gives no sample."""
    mgr, k = make_env(tmp_path, CONFIG + '[history]\ninterval = "1s"\n')
    r = await call(mgr, "create", container="c1", memory="1GiB")
    assert r["ok"]
    mgr.history = svc = usage.HistoryService(mgr)
    async with trio.open_nursery() as n:
        await n.start(svc.run)
        with trio.fail_after(10):
            while svc.writer.stats()["submitted"] < 2:
                await trio.sleep(0.05)
        n.cancel_scope.cancel()
    assert svc.writer.stats()["state"] == "closed"
    mgr.kport.kernel = None
    assert await svc.collect(0.0) == []


# ------------------------------------------------------------ forecast op
def fill_week(path, label_value="web", days=8, busy=(9, 17), t_end=None):
    """A label's history: one slice busy (0.6 of a GPU, 6 GiB) during busy
    hours, idle (0.05, 1 GiB) otherwise, every 5 minutes, UTC."""
    t_end = t_end or 1_764_576_000.0            # Tuesday 2025-12-01 08:00 UTC
    st = history.HistoryStore(path)
    t = t_end - days * 86400
    gt = 0
    batch = []
    while t < t_end:
        hour = int(t % 86400 // 3600)
        busy_now = busy[0] <= hour < busy[1]
        share = 0.6 if busy_now else 0.05
        gt += int(share * 300 * 1e9)
        batch.append(history.Sample(t=t, slice_id=1, container="w1", gpu=0, gpu_uuid="",
                              mem_used=(6 if busy_now else 1) * GiB, mem_peak=6 * GiB,
                              mem_limit=8 * GiB, gpu_time_ns=gt, compute_bp=2000, refusals=0,
                              labels={"team": label_value}))
        t += 300
    st.add(batch)
    st.close()
    return t_end


async def test_forecast_op(tmp_path, monkeypatch):
    monkeypatch.setattr(usage, "utc_offset", lambda: 0)
    mgr, k = make_env(tmp_path)
    t_end = fill_week(tmp_path / "state" / "history.db")
    mgr.history = usage.HistoryService(mgr, clock=lambda: t_end)
    r = await call(mgr, "forecast", label="team=web", hours=12)
    assert r["ok"], r
    res = r["result"]
    assert res["label"] == "team=web" and len(res["points"]) == 12
    assert res["history"]["samples"] > 2000
    busy = [p for p in res["points"] if 9 <= int(p["t"] % 86400 // 3600) < 17]
    idle = [p for p in res["points"] if not 9 <= int(p["t"] % 86400 // 3600) < 17]
    assert busy and idle
    assert min(p["gpu"]["p50"] for p in busy) > 0.4 > max(p["gpu"]["p50"] for p in idle)
    assert min(p["memory"]["p50"] for p in busy) > 4 * GiB
    assert res["recommended"]["compute"]["percent"] == pytest.approx(
        res["recommended"]["compute"]["target"] * 115, rel=0.01)
    assert res["recommended"]["memory"]["bytes"] >= 6 * GiB
    # cached: a second ask reads nothing
    reads = []
    orig = mgr.history._read
    monkeypatch.setattr(mgr.history, "_read", lambda fn: reads.append(1) or orig(fn))
    assert (await call(mgr, "forecast", label="team=web"))["ok"]
    assert reads == []
    bad = await call(mgr, "forecast", label="team")
    assert bad["error"]["code"] == "bad-request" and '"team"' in bad["error"]["message"]
    bad = await call(mgr, "forecast", label="a=b", hours=500)
    assert "args.hours: 500" in bad["error"]["message"]


# ------------------------------------------------------------ acting
class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def busy_model(busy=(9, 17), level=0.6, idle=0.05, days=14, t_end=1_764_576_000.0):
    """A GPU-time model of a label busy at ``level`` during the busy hours (UTC)."""
    m = forecast.Model(usage.BUCKET_S, first=1e-3)
    t = t_end - days * 86400
    while t < t_end:
        h = int(t % 86400 // 3600)
        m.add(t, level if busy[0] <= h < busy[1] else idle)
        t += 300
    m.flush()
    return m


async def forecaster_env(tmp_path, mode="act", clock_t=None, model=None):
    mgr, k = make_env(tmp_path, FORECAST_CONFIG.replace("{mode}", mode))
    for c, prof, lab in (("w1", "burst20", {"team": "web"}), ("o1", "other", {"team": "db"})):
        r = await call(mgr, "create", container=c, profile=prof, labels=lab, gpus=[0])
        assert r["ok"], r
    m = model or busy_model()

    async def models(label):
        assert label == "team=web"
        return {"gpu": m, "memory": forecast.Model(usage.BUCKET_S), "samples": 1, "first": 0, "last": 0}
    # 03:00 UTC on the Wednesday after the model's history (which ends Tuesday 08:00)
    clock = Clock(clock_t if clock_t is not None else 1_764_576_000.0 + 19 * 3600)
    fc = usage.Forecaster(mgr, models, clock=clock)
    mgr.forecaster = fc
    events = mgr.subscribe()
    return mgr, k, fc, clock, events


def kernel_bp(k, mgr, c):
    return k.slices_[mgr.records[c].slice_id].gpus[0].compute_bp


def drain(events):
    out = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


async def test_forecast_off_by_default(tmp_path):
    cfg = parse_config(CONFIG.format(tmp=tmp_path), "t.toml")
    assert all(cfg.forecast_of(p).mode == "off" for p in cfg.profiles)
    mgr, k, fc, clock, events = await forecaster_env(tmp_path, mode="off")
    clock.t += 6 * 3600                           # 09:00: busy, but off
    assert await fc.tick() == 0 and mgr.overlay == {}
    assert [e for e in drain(events) if e["type"].startswith("forecast")] == []


async def test_forecast_lead_time_raise_and_lower(tmp_path):
    mgr, k, fc, clock, events = await forecaster_env(tmp_path)
    assert kernel_bp(k, mgr, "w1") == 2000
    # 03:00 -> nothing predicted within 30 minutes
    assert await fc.tick() == 0 and mgr.overlay == {}
    # 08:00: busy begins at 09:00, more than the lead away: still nothing
    clock.t += 5 * 3600
    assert await fc.tick() == 0 and mgr.overlay == {}
    # 08:31: within the lead time of 09:00: raised, ahead of the demand
    clock.t += 31 * 60
    assert await fc.tick() == 1
    up = mgr.overlay["w1"]
    assert 60 <= up <= 70                          # 0.6 * 1.15 = 69%, max_compute 70%
    assert kernel_bp(k, mgr, "w1") == round(up * 100)
    ev = [e for e in drain(events) if e["type"] == "forecast-adjust"]
    assert ev and ev[0]["container"] == "w1" and ev[0]["compute"] == up \
        and ev[0]["configured"] == 20
    # the record keeps what was asked: the overlay is not configuration
    assert mgr.records["w1"].explicit.compute is None
    assert mgr.eff(mgr.records["w1"], overlay=False).spec.compute == 20
    # the other profile (forecast off) is untouched
    assert "o1" not in mgr.overlay and kernel_bp(k, mgr, "o1") == 4000
    # 16:45: still busy within the lead (until 17:00)
    clock.t += 8 * 3600 + 14 * 60
    assert await fc.tick() == 0 and "w1" in mgr.overlay
    # 17:05: nothing predicted within the lead: back to the configured 20%
    clock.t += 20 * 60
    assert await fc.tick() == 1 and mgr.overlay == {}
    assert kernel_bp(k, mgr, "w1") == 2000


async def test_forecast_never_below_configured_and_within_admission(tmp_path):
    # demand below the configured 20% everywhere: never lowered under it
    mgr, k, fc, clock, events = await forecaster_env(tmp_path, model=busy_model(level=0.1,
                                                                                idle=0.01))
    clock.t += 6 * 3600
    assert await fc.tick() == 0 and mgr.overlay == {}
    assert kernel_bp(k, mgr, "w1") == 2000
    # admission: o1 reserves 40% and o2 35% of GPU 0 beside w1's 20%: w1 may take
    # at most 100 - 75 = 25%, not the 69% the forecast asks
    r = await call(mgr, "create", container="o2", memory="1GiB", compute="35%",
                   policy="burst", gpus=[0])
    assert r["ok"], r
    fc.models = fc_models(busy_model())
    await fc.tick()
    assert mgr.overlay == {"w1": 25}
    assert mgr.views()[0].compute_fixed == pytest.approx(100)
    # admission still holds for others: o2 cannot grow into what w1 took
    r = await call(mgr, "set-quota", container="o2", compute="40%")
    assert r["error"]["code"] == "admission", r
    await call(mgr, "delete", container="o2")
    await fc.tick()
    assert mgr.overlay == {"w1": 60}                # 100 - 40 (o1) = 60% left
    assert mgr.views()[0].compute_fixed <= 100


def fc_models(m):
    async def models(label):
        return {"gpu": m, "memory": forecast.Model(usage.BUCKET_S), "samples": 1, "first": 0, "last": 0}
    return models


async def test_forecast_max_compute_caps(tmp_path):
    mgr, k, fc, clock, events = await forecaster_env(tmp_path, model=busy_model(level=0.95))
    await call(mgr, "delete", container="o1")
    clock.t += 6 * 3600
    await fc.tick()
    assert mgr.overlay["w1"] == 70                  # the profile's max_compute


async def test_forecast_recommend_changes_nothing(tmp_path):
    mgr, k, fc, clock, events = await forecaster_env(tmp_path, mode="recommend")
    clock.t += 6 * 3600
    assert await fc.tick() == 0
    assert mgr.overlay == {} and kernel_bp(k, mgr, "w1") == 2000
    ev = [e for e in drain(events) if e["type"] == "forecast-recommend"]
    assert len(ev) == 1 and ev[0]["container"] == "w1" and ev[0]["compute"] > 20
    await fc.tick()                                 # said once, not every tick
    assert [e for e in drain(events) if e["type"] == "forecast-recommend"] == []


async def test_forecast_reset_and_mode_off_restore(tmp_path):
    mgr, k, fc, clock, events = await forecaster_env(tmp_path)
    clock.t += 6 * 3600
    await fc.tick()
    assert "w1" in mgr.overlay
    mgr.history = usage.HistoryService(mgr)
    r = await call(mgr, "forecast", label="team=web", reset=True)
    assert r["ok"] and r["result"]["restored"] == ["w1"], r
    assert mgr.overlay == {} and kernel_bp(k, mgr, "w1") == 2000
    await fc.tick()                                  # held: not raised again
    assert mgr.overlay == {}
    st = (await call(mgr, "status"))["result"]["forecast"]
    assert st == {"adjusted": [], "held": ["team=web"]}
    assert (await call(mgr, "forecast", label="team=web", resume=True))["ok"]
    await fc.tick()
    assert "w1" in mgr.overlay
    # the config's mode set to off (a reload): restored on the next tick
    mgr.cfg = parse_config(FORECAST_CONFIG.replace("{mode}", "off").format(tmp=tmp_path), "t")
    assert await fc.tick() == 1 and mgr.overlay == {}
    assert kernel_bp(k, mgr, "w1") == 2000


async def test_reload_turning_act_on_plans_at_once(tmp_path):
    """A reload that sets a profile's forecast to act plans at once (not at
    the next minute's round); one that sets it off restores at once."""
    from vgpu.daemon.main import Daemon
    mgr, k, fc, clock, events = await forecaster_env(tmp_path, mode="off")
    clock.t += 6 * 3600                              # inside the busy hours
    path = tmp_path / "vgpud.toml"
    d = Daemon(mgr.cfg, str(path), log_level_override="info")
    d.mgr = mgr
    path.write_text(FORECAST_CONFIG.replace("{mode}", "act").format(tmp=tmp_path))
    assert await d.reload()
    assert mgr.overlay.get("w1", 0) > 20 and kernel_bp(k, mgr, "w1") > 2000
    ev = [e for e in drain(events) if e["type"] == "forecast-adjust"]
    assert len(ev) == 1 and ev[0]["container"] == "w1"
    path.write_text(FORECAST_CONFIG.replace("{mode}", "off").format(tmp=tmp_path))
    assert await d.reload()
    assert mgr.overlay == {} and kernel_bp(k, mgr, "w1") == 2000


def test_plan_compute_limits():
    P = forecast.Point
    pts = [P(0, 0.5, 0.6, 0.4, 0.7, 0.9, "week")]
    assert usage.plan_compute(pts, 1, 20, 100) == pytest.approx(69)
    assert usage.plan_compute(pts, 2, 20, 100) == pytest.approx(34.5)
    assert usage.plan_compute(pts, 1, 20, 30) == 30
    assert usage.plan_compute(pts, 1, 80, 100) is None             # never below configured
    assert usage.plan_compute(pts, 1, 20, 10) is None              # ceiling under configured
    low = [P(0, 0.5, 0.6, 0.4, 0.7, 0.1, "all")]
    assert usage.plan_compute(low, 1, 20, 100) is None             # not confident
    assert usage.plan_compute([], 1, 20, 100) is None


async def test_broken_disk_is_a_warning(tmp_path, caplog):
    """A history file that cannot be made: the service starts, samples are
    kept for a retry, status says failing; nothing is raised into vgpud."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    mgr, k = make_env(tmp_path, CONFIG + f'[history]\ninterval = "1s"\npath = "{blocker}/h.db"\n')
    assert (await call(mgr, "create", container="c1", memory="1GiB"))["ok"]
    mgr.history = svc = usage.HistoryService(mgr)
    async with trio.open_nursery() as n:
        await n.start(svc.run)
        with trio.fail_after(10):
            while svc.writer.stats()["errors"] < 1:
                await trio.sleep(0.05)
        st = (await call(mgr, "status"))["result"]["history"]
        assert st["state"] == "failing" and st["last_error"], st
        r = await call(mgr, "history")
        assert r["ok"] and r["result"]["series"] == []          # no file: nothing to show
        n.cancel_scope.cancel()
    assert any("history" in rec.getMessage() for rec in caplog.records
               if rec.levelname == "WARNING")
