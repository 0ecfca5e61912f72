"""Compute on the daemon side (vgpu.daemon.compute, vgpu.daemon.slices, vgpu.daemon.metrics,
vgpuctl): the settings -> kernel mapping, that every change reaches vgpu.ko
at once, the scheduler period/layers, the achieved-share arithmetic, the
metrics and the CLI's output.  The kernel is test_api's FakeKernel (an
in-memory stand-in); tests/vm/test_daemon_compute.py runs the same against
vgpu.ko."""

from __future__ import annotations

import errno
import json
import logging
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon_support import CONFIG, FakeInventory, FakeKernel, GiB, call
from vgpu.daemon import compute
from vgpu.abi import uapi
from vgpu.daemon.config import ConfigError, SliceSpec, parse_config
from vgpu.vgpuko.messages import Compute
from vgpu.vgpuko.netlink import VgpuError
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

FIXED, SHARE, BURST = uapi.VGPU_COMPUTE_FIXED, uapi.VGPU_COMPUTE_SHARE, uapi.VGPU_COMPUTE_BURST
HIGH, LOW = uapi.VGPU_PRIORITY_HIGH, uapi.VGPU_PRIORITY_LOW


def _mgr(tmp_path, text=CONFIG, kernel=None):
    cfg = parse_config(text.format(tmp=tmp_path), "test.toml")
    k = kernel or FakeKernel()
    mgr = SliceManager(cfg, "test.toml", KernelPort(factory=lambda: k),
                       StateStore(tmp_path / "state"), FakeInventory())
    mgr.load_state()
    return mgr, k


@pytest.fixture
def env(tmp_path):
    mgr, k = _mgr(tmp_path)
    return mgr, k, tmp_path


def kc(k, sid, i=0):
    g = k.slices_[sid].gpu(i)
    return (g.compute_policy, g.compute_bp, g.priority)


# ------------------------------------------------------------ the mapping
@pytest.mark.parametrize("eff, want", [
    ({"compute": 30.0, "policy": "fixed", "priority": "low"}, (FIXED, 3000, LOW)),
    ({"compute": 50, "policy": "share", "priority": "high"}, (SHARE, 5000, HIGH)),
    ({"compute": 12.345, "policy": "burst", "priority": "low"}, (BURST, 1234, LOW)),
    ({"compute": 12.355, "policy": "burst", "priority": "low"}, (BURST, 1236, LOW)),
    ({"compute": 100, "policy": "fixed", "priority": "low"}, (FIXED, 10000, LOW)),
    ({"compute": 0, "policy": "fixed", "priority": "low"}, (FIXED, 1, LOW)),      # clamped
    ({"compute": 0.004, "policy": "share", "priority": "low"}, (SHARE, 1, LOW)),
    ({"compute": None, "policy": "fixed", "priority": "high"}, (SHARE, 10000, HIGH)),  # unset
    ({"compute": None, "policy": None, "priority": None}, (SHARE, 10000, LOW)),
    ({"compute": 25}, (SHARE, 2500, LOW)),
])
def test_kernel_compute_mapping(eff, want):
    c = compute.kernel_compute(SliceSpec(**eff))
    assert (c.policy, c.bp, c.priority) == want
    assert compute.slice_compute(2, SliceSpec(**eff)) == {0: c, 1: c}


def test_percent_to_bp_and_bad_names():
    assert [compute.percent_to_bp(x) for x in (None, 0, 0.01, 33.333, 99.999, 100, 250)] == \
        [10000, 1, 1, 3333, 10000, 10000, 10000]
    with pytest.raises(ValueError, match=r'"lots" is not a policy \(share, fixed or burst\)'):
        compute.kernel_compute(SliceSpec(compute=5, policy="lots"))
    with pytest.raises(ValueError, match=r'"urgent" is not a priority \(high or low\)'):
        compute.kernel_compute(SliceSpec(compute=5, priority="urgent"))


def test_layers_names_and_flags():
    assert compute.layers_flags(None) is None
    assert compute.layers_flags(["tsg"]) == uapi.VGPU_SCHED_L_TSG
    assert compute.layers_flags(("tsg", "doorbell")) == uapi.VGPU_SCHED_L_ALL
    assert compute.layers_names(uapi.VGPU_SCHED_L_ALL) == ["tsg", "doorbell"]
    assert compute.layers_names(uapi.VGPU_SCHED_L_DOORBELL | 0x10) == ["doorbell", "0x10"]


# ------------------------------------------------------------ achieved share
def test_share_meter_arithmetic():
    m = compute.ShareMeter(window=5.0)
    assert m.share("a") is None
    m.add("a", 0, now=100.0)
    assert m.share("a") is None                        # one sample
    for t in range(1, 11):                              # 30% of each second
        m.add("a", int(t * 0.3e9), now=100.0 + t)
    assert m.share("a") == pytest.approx(0.3)
    # the window: only the last 5 s count
    for t in range(11, 16):
        m.add("a", int(3e9 + (t - 10) * 0.8e9), now=100.0 + t)
    assert m.share("a") == pytest.approx(0.8)
    # a counter going backwards (slice recreated) restarts the series
    m.add("a", 1000, now=116.0)
    assert m.share("a") is None
    m.add("a", 1000 + int(0.5e9), now=117.0)
    assert m.share("a") == pytest.approx(0.5)
    # idle: no GPU time, share 0
    m.add("b", 7, now=0.0)
    m.add("b", 7, now=2.0)
    assert m.share("b") == 0.0
    # samples closer than min_span give nothing yet
    m.add("c", 0, now=0.0)
    m.add("c", 10, now=0.05)
    assert m.share("c") is None
    m.forget(["a"])
    assert m.share("b") is None and m.share("a") is not None


def test_share_meter_keeps_bounded_history():
    m = compute.ShareMeter(window=5.0)
    for t in range(1000):
        m.add("k", t * 10**8, now=float(t))
    assert len(m._s["k"]) <= 7
    assert m.share("k") == pytest.approx(0.1)


# ------------------------------------------------------------ reaching the kernel
async def test_create_sends_compute(env):
    mgr, k, _ = env
    s = (await call(mgr, "create", container="f", memory="1GiB", compute="30%",
                    policy="fixed"))["result"]["slice"]
    assert kc(k, s["slice_id"]) == (FIXED, 3000, LOW)
    g = s["gpus"][0]["compute"]
    assert g == {"policy": "fixed", "percent": 30.0, "priority": "low", "gpu_time_s": 0.0,
                 "achieved_percent": None, "paused": False, "tsgs": 0, "channels": 0}
    d = (await call(mgr, "create", container="d", memory="1GiB"))["result"]["slice"]
    assert kc(k, d["slice_id"]) == (SHARE, 1000, LOW)            # [defaults] compute 10%


async def test_compute_unset_is_a_full_share(tmp_path):
    mgr, k = _mgr(tmp_path, CONFIG.replace('compute = "10%"\n', "", 1))
    s = (await call(mgr, "create", container="u", memory="1GiB", priority="high"))["result"]["slice"]
    assert s["compute"]["percent"] is None
    assert kc(k, s["slice_id"]) == (SHARE, 10000, HIGH)
    assert s["gpus"][0]["compute"]["percent"] == 100.0


async def test_set_quota_compute_priority_policy_reach_the_kernel_at_once(env):
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="c", memory="1GiB", compute="30%",
                      policy="fixed"))["result"]["slice"]["slice_id"]
    k.calls.clear()
    r = await call(mgr, "set-quota", container="c", compute="50%")
    assert r["ok"], r
    assert ("compute", sid, {0: Compute(FIXED, 5000, LOW)}) in k.calls
    assert kc(k, sid) == (FIXED, 5000, LOW)
    assert r["result"]["slice"]["gpus"][0]["compute"]["percent"] == 50.0
    await call(mgr, "set-quota", container="c", priority="high")
    assert kc(k, sid) == (FIXED, 5000, HIGH)
    await call(mgr, "set-quota", container="c", policy="burst")
    assert kc(k, sid) == (BURST, 5000, HIGH)
    r = await call(mgr, "set-quota", container="c", profile="small")     # explicit wins
    assert kc(k, sid) == (BURST, 5000, HIGH)
    # a memory-only change re-sends the same compute (idempotent)
    await call(mgr, "set-quota", container="c", memory="2GiB")
    assert kc(k, sid) == (BURST, 5000, HIGH) and k.slices_[sid].gpu(0).mem_limit == 2 * GiB


async def test_profile_change_on_reload_reaches_the_kernel(env, tmp_path):
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="p", profile="small"))["result"]["slice"]["slice_id"]
    assert kc(k, sid) == (SHARE, 2500, LOW)
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path).replace(
        'memory = "4GiB"\ncompute = "25%"', 'memory = "4GiB"\ncompute = "40%"\npriority = "high"'),
        "test.toml")
    k.calls.clear()
    assert await mgr.apply_all("reload") == 1
    assert kc(k, sid) == (SHARE, 4000, HIGH)
    # memory did not change: only compute was sent
    assert ("set", sid, {}) in k.calls
    assert await mgr.apply_all("reload") == 0


async def test_reconcile_corrects_compute(env, tmp_path):
    mgr, k, tmp = env
    sid = (await call(mgr, "create", container="r", memory="1GiB", compute="30%",
                      policy="fixed"))["result"]["slice"]["slice_id"]
    g = k.slices_[sid].gpu(0)
    g.compute_policy, g.compute_bp = uapi.VGPU_COMPUTE_NONE, 0         # drifted (e.g. reloaded module)
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"),
                      FakeInventory())
    m2.load_state()
    counts = await m2.reconcile()
    assert counts["corrected"] == 1 and kc(k, sid) == (FIXED, 3000, LOW)
    assert (await m2.reconcile())["kept"] == 1
    # recreated slices get their compute too
    del k.slices_[sid]
    assert (await m2.reconcile())["recreated"] == 1
    assert kc(k, sid) == (FIXED, 3000, LOW)


async def test_adopted_slice_keeps_its_compute(env):
    mgr, k, _ = env
    k.slice_new(900, [(0, GiB)], name="stranger", compute={0: Compute(FIXED, 2000, HIGH)})
    k.slice_new(901, [(1, GiB)], name="bare")                         # policy NONE
    counts = await mgr.reconcile()
    assert counts["adopted"] == 2
    assert mgr.records["stranger"].explicit == SliceSpec(compute=20.0, policy="fixed",
                                                         priority="high")
    assert kc(k, 900) == (FIXED, 2000, HIGH)
    assert kc(k, 901) == (SHARE, 1000, LOW)                           # given the defaults
    assert (await mgr.reconcile())["kept"] == 2


# ------------------------------------------------------------ the scheduler
SCHED = '\n[scheduler]\nperiod = "{period}"\n'


async def test_sched_period_at_start_and_reload(tmp_path):
    from vgpu.daemon.main import Daemon
    mgr, k = _mgr(tmp_path, CONFIG + SCHED.format(period="50ms"))
    assert await mgr.apply_sched("start") == 2
    assert k.sched_calls == [(0, 50_000, None), (1, 50_000, None)]     # layers: kernel default
    assert mgr.sched_supported is True
    # reload through the daemon: the new period reaches every sliced GPU
    path = tmp_path / "vgpud.toml"
    path.write_text((CONFIG + SCHED.format(period="20ms") + 'layers = ["tsg"]\n').format(tmp=tmp_path))
    d = Daemon(mgr.cfg, str(path), log_level_override="info")
    d.mgr = mgr
    k.sched_calls.clear()
    assert await d.reload()
    assert k.sched_calls == [(0, 20_000, uapi.VGPU_SCHED_L_TSG), (1, 20_000, uapi.VGPU_SCHED_L_TSG)]
    # the key removed: back to the kernel's default, both layers
    path.write_text((CONFIG + SCHED.format(period="20ms")).format(tmp=tmp_path))
    k.sched_calls.clear()
    assert await d.reload()
    assert k.sched_calls == [(0, 20_000, uapi.VGPU_SCHED_L_ALL), (1, 20_000, uapi.VGPU_SCHED_L_ALL)]
    # status and gpus show it
    st = (await call(mgr, "status"))["result"]["scheduler"]
    assert st == {"supported": True, "period_s": 0.02, "layers": None}
    g = (await call(mgr, "gpus"))["result"]["gpus"][0]["scheduler"]
    assert g == {"period_us": 20_000, "layers": ["tsg", "doorbell"], "switches": 0, "cpu_s": 0.0}


class OldKernel(FakeKernel):
    """vgpu.ko before compute: no SCHED commands, no compute attributes."""

    def sched_set(self, *a, **kw):
        raise VgpuError(errno.EOPNOTSUPP, op="SCHED_SET")

    def scheds(self):
        raise VgpuError(errno.EOPNOTSUPP, op="SCHED_GET")

    def slice_new(self, *a, compute=None, **kw):
        if compute:
            raise VgpuError(errno.EINVAL, op="SLICE_NEW", extack="unknown attribute")
        return super().slice_new(*a, **kw)

    def slice_set(self, *a, compute=None, **kw):
        if compute:
            raise VgpuError(errno.EINVAL, op="SLICE_SET", extack="unknown attribute")
        return super().slice_set(*a, **kw)


async def test_old_kernel_without_sched_does_not_stop_the_daemon(tmp_path, caplog):
    mgr, k = _mgr(tmp_path, kernel=OldKernel())
    with caplog.at_level(logging.WARNING, logger="vgpud.slices"):
        assert await mgr.apply_sched("start") == 0
        assert mgr.sched_supported is False
        r = await call(mgr, "create", container="o", memory="1GiB", compute="30%", policy="fixed")
        assert r["ok"], r
        assert (await call(mgr, "set-quota", container="o", compute="40%"))["ok"]
        await mgr.apply_sched("reload")
        assert (await call(mgr, "gpus"))["ok"]
        await mgr.reconcile()
    assert sum("no scheduler commands" in r.message for r in caplog.records) == 1
    st = (await call(mgr, "status"))["result"]
    assert st["scheduler"]["supported"] is False
    assert (await call(mgr, "show", container="o"))["result"]["slice"]["gpus"][0]["compute"][
        "policy"] == "none"


async def test_sched_probe_before_first_create(tmp_path):
    """A create before the kernel service probed the scheduler still learns
    whether compute may be sent."""
    mgr, k = _mgr(tmp_path, kernel=OldKernel())
    assert (await call(mgr, "create", container="o", memory="1GiB"))["ok"]
    assert mgr.sched_supported is False


def test_config_layers():
    cfg = parse_config('[scheduler]\nlayers = ["doorbell", "tsg"]\n')
    assert cfg.scheduler_layers == ("doorbell", "tsg")
    assert parse_config("").scheduler_layers is None
    for text, msg in [('layers = ["tsg", "fence"]', 'scheduler.layers[1]: "fence" is not a layer'),
                      ('layers = "tsg"', 'scheduler.layers: "tsg" is a string, not a list'),
                      ("layers = []", "scheduler.layers: [] names no layer"),
                      ('layers = ["tsg", "tsg"]', 'scheduler.layers[1]: "tsg" is named twice')]:
        with pytest.raises(ConfigError) as ei:
            parse_config("[scheduler]\n" + text + "\n", "f.toml")
        assert msg in str(ei.value), str(ei.value)
    from vgpu.daemon.config import describe_changes
    assert describe_changes(parse_config(""), cfg) == \
        ['scheduler.layers: kernel default -> ["doorbell", "tsg"]']


# ------------------------------------------------------------ views and metrics
async def _busy(mgr, k, sid, shares, t0=1000.0):
    """Feed the meter: GPU time growing by shares[i] of each second."""
    g = k.slices_[sid].gpu(0)
    ns = 0
    mgr.sample(k.slices_[sid], now=t0)
    for i, sh in enumerate(shares, 1):
        ns += int(sh * 1e9)
        g.gpu_time_ns = ns
        mgr.sample(k.slices_[sid], now=t0 + i)


async def test_show_list_and_metrics_carry_target_and_achieved(env):
    from vgpu.daemon.metrics import render
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="m", gpus=[0], memory="1GiB", compute="30%",
                      policy="fixed"))["result"]["slice"]["slice_id"]
    await mgr.apply_sched()
    await _busy(mgr, k, sid, [0.3] * 6)
    g = k.slices_[sid].gpu(0)
    g.tsgs, g.channels, g.paused = 2, 3, True
    mgr.kslices[sid] = k.slices_[sid]
    view = mgr.slice_view(mgr.records["m"], k.slices_[sid])
    assert view["gpus"][0]["compute"] == {
        "policy": "fixed", "percent": 30.0, "priority": "low", "gpu_time_s": 1.8,
        "achieved_percent": 30.0, "paused": True, "tsgs": 2, "channels": 3}
    assert view["compute"] == {"percent": 30.0, "policy": "fixed", "priority": "low"}
    k.scheds_[0].switches, k.scheds_[0].cpu_ns = 77, 1_500_000
    await mgr.refresh_scheds()
    text = render(mgr)
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def value(metric, **labels):
        return [s.value for s in fams[metric.removesuffix("_total")].samples
                if s.name == metric and labels.items() <= s.labels.items()]

    lab = {"container": "m", "slice_id": str(sid), "gpu": "0", "uuid": mgr.gpus[0].uuid}
    assert value("vgpu_slice_gpu_time_seconds_total", **lab) == [1.8]
    assert value("vgpu_slice_compute_target_ratio", **lab) == [0.3]
    assert value("vgpu_slice_compute_achieved_ratio", **lab) == [pytest.approx(0.3)]
    glab = {"gpu": "0", "uuid": mgr.gpus[0].uuid, "name": "Sim"}
    assert value("vgpu_scheduler_switches_total", **glab) == [77]
    assert value("vgpu_scheduler_cpu_seconds_total", **glab) == [0.0015]
    for name, typ in [("vgpu_slice_gpu_time_seconds", "counter"),
                      ("vgpu_slice_compute_target_ratio", "gauge"),
                      ("vgpu_slice_compute_achieved_ratio", "gauge"),
                      ("vgpu_scheduler_switches", "counter"),
                      ("vgpu_scheduler_cpu_seconds", "counter")]:
        assert fams[name].type == typ


async def test_kdump_feeds_the_meter(env, monkeypatch):
    import vgpu.daemon.slices as S
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="x", memory="1GiB"))["result"]["slice"]["slice_id"]
    clock = [50.0]
    monkeypatch.setattr(S.time, "monotonic", lambda: clock[0])
    for i in range(4):
        k.slices_[sid].gpu(0).gpu_time_ns = int(i * 0.5e9)
        await mgr.kdump()
        clock[0] += 1.0
    k.slices_[sid].gpu(0).gpu_time_ns = int(2e9)          # list dumps once more, at 54 s
    listed = (await call(mgr, "list"))["result"]["slices"][0]
    assert listed["gpus"][0]["compute"]["achieved_percent"] == 50.0


# ------------------------------------------------------------ the CLI
def _run(capsys, *argv):
    from vgpu.cli import ctl
    rc = ctl.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


GPU_COMPUTE_KEYS = {"policy", "percent", "priority", "gpu_time_s", "achieved_percent", "paused",
                    "tsgs", "channels"}


async def test_api_json_keys_are_stable(env):
    mgr, k, _ = env
    await call(mgr, "create", container="j", memory="1GiB")
    s = (await call(mgr, "list"))["result"]["slices"][0]
    assert set(s["gpus"][0]["compute"]) == GPU_COMPUTE_KEYS
    assert set(s["compute"]) == {"percent", "policy", "priority"}
    # while the kernel lacks the slice: the wanted values, nothing measured
    view = mgr.slice_view(mgr.records["j"], None)
    assert set(view["gpus"][0]["compute"]) == GPU_COMPUTE_KEYS
    assert view["gpus"][0]["compute"]["achieved_percent"] is None


def test_cli_show_top_gpus_status(fake, capsys):
    assert _run(capsys, "create", "--pid", "1", "--compute", "30%", "--policy", "fixed", "c1")[0] == 0
    rc, out, _ = _run(capsys, "show", "c1")
    assert rc == 0
    assert re.search(r"^GPU\s+POLICY\s+TARGET\s+PRIORITY\s+GPU TIME\s+ACHIEVED\s+PAUSED\s+TSGS\s+CHANNELS$",
                     out, re.M), out
    assert re.search(r"^0\s+fixed\s+30%\s+low\s+12\.500s\s+24\.5%\s+no\s+1\s+2$", out, re.M), out
    rc, out, _ = _run(capsys, "top", "--once")
    assert rc == 0
    head = next(ln for ln in out.splitlines() if ln.startswith("CONTAINER"))
    assert head.split()[6:8] == ["TARGET", "ACHIEVED"]
    row = next(ln for ln in out.splitlines() if ln.startswith("c1"))
    assert row.split()[6:8] == ["30%", "24.5%"]
    rc, out, _ = _run(capsys, "--json", "list")
    assert set(json.loads(out)["slices"][0]["gpus"][0]["compute"]) == GPU_COMPUTE_KEYS
    rc, out, _ = _run(capsys, "gpus")
    assert re.search(r"^GPU\s+SCHED PERIOD\s+LAYERS\s+SWITCHES\s+SCHED CPU$", out, re.M), out
    assert re.search(r"^1\s+100ms\s+tsg\+doorbell\s+1235\s+0\.250s$", out, re.M), out
    rc, out, _ = _run(capsys, "status")
    assert re.search(r"^scheduler:\s+period 100ms, layers kernel default$", out, re.M), out
    # set-quota --compute: the new target is what show prints
    assert _run(capsys, "set-quota", "c1", "--compute", "50%")[0] == 0
    assert fake.requests[-1]["args"] == {"container": "c1", "compute": 50}
    rc, out, _ = _run(capsys, "show", "c1")
    assert re.search(r"^0\s+fixed\s+50%\s+low\s", out, re.M), out


def test_render_top_without_compute_fields():
    """An older vgpud's list (no per-GPU compute): the slice's percent, '-'."""
    from vgpu.cli import ctlrender
    frame = {"status": {}, "gpus": [], "slices": [{
        "container": "old", "gpus": [{"index": 0, "memory_limit": GiB, "memory_used": 0}],
        "compute": {"percent": 20, "policy": "share", "priority": "low"}}]}
    row = next(ln for ln in ctlrender.render_top(frame) if ln.startswith("old"))
    assert row.split()[6:8] == ["20%", "-"]


async def test_sched_einval_with_a_message_is_not_an_old_kernel(tmp_path):
    class Picky(FakeKernel):
        def sched_set(self, *a, **kw):
            raise VgpuError(errno.EINVAL, op="SCHED_SET", extack="period out of range")
    mgr, k = _mgr(tmp_path, kernel=Picky())
    assert await mgr.apply_sched() == 0
    assert mgr.sched_supported is None and mgr.compute_enabled
    s = (await call(mgr, "create", container="c", memory="1GiB", compute="30%",
                    policy="fixed"))["result"]["slice"]
    assert kc(k, s["slice_id"]) == (FIXED, 3000, LOW)
