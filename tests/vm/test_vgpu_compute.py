"""Compute slicing through the virtual nodes (docs/compute.md 2-4): netlink
validation, TSG/channel tracking, and the scheduler measured against nvsim's
own busy accounting (/sys/kernel/debug/nvsim/busy), the independent truth.

Windows are 1-2 s and tolerances are wide: the VM runs under TCG on two
cores.  The strict figures come from the benchmark (bench/), not from here:
on a loaded host the workers' processes get the VM's CPUs late (their
queues run dry) and nvsim's ticks come late (a late tick charges its whole
delay to the TSG on the engine, PREEMPT takes effect at the next tick), so
what a slice achieves moves with the load.  What holds on any machine is
asserted: a fixed slice's cap is an upper bound (the scheduler's books,
GPU_TIME_NS, carry a late decision's excess into the next period), every
slice runs, and where the test is about weights, workers whose queues hold
seconds of work (DEEP) get their shares in the kernel's books whatever the
load.  Workers run until the test stops them (Workers.stop), after the
measurement: a worker whose time ran out inside a window would end it.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import time

import pytest

from nvsim_busy import BUSY, busy
from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu_fixtures import MiB, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check, vstate  # noqa: F401
from vgpu.vgpuko.messages import Compute
from vgpu.vgpuko.netlink import Nla, VgpuError
from vgpu.abi.nvclient import Channel, RmClient, RmError

FIXED, SHARE, BURST, NONE = (U.VGPU_COMPUTE_FIXED, U.VGPU_COMPUTE_SHARE,
                             U.VGPU_COMPUTE_BURST, U.VGPU_COMPUTE_NONE)
LOW, HIGH = U.VGPU_PRIORITY_LOW, U.VGPU_PRIORITY_HIGH
TOL = 0.10                     # share tolerance under TCG, one slice
PERIOD_US = 100_000
# Items long and queues deep enough that a Python client under TCG keeps
# its channel busy (refills are slow there): 40 ms queued.
ITEM_US, DEPTH = 5000, 8
# Items of 100 ms, 16 queued: 1.2 s of work stays queued between refills (a
# refill every 0.4 s of GPU time), so a worker the VM's CPUs reach late
# still wants the GPU all along; the engine and the scheduler switch at
# ticks, mid-item, whatever the item's length.
DEEP = dict(item_us=100_000, depth=16)
WORK_S = 60.0                  # until Workers.stop()
BAD_ERRNOS = {errno.EINVAL, errno.ERANGE}     # policy ranges answer ERANGE

needs_engine = pytest.mark.skipif(not BUSY.exists(), reason="nvsim has no engine (busy file)")


# ------------------------------------------------------------------ truth
def shares(pids, window: float, gpu: int = 0, slices=()) -> tuple[dict, float]:
    """Each pid's share of wall time over window seconds (nvsim's clock), and
    the GPU's total share.  With slices, also each slice's GPU_TIME_NS share
    (the kernel's own accounting), keyed by slice id: over the time from
    before the first read to after the last (CLOCK_MONOTONIC, the kernel's
    ktime), never more than the share over the slice's own two reads, so a
    slow read on a loaded VM cannot make a cap look exceeded."""
    t0 = time.monotonic_ns()
    ka = [s.get().gpu(0).gpu_time_ns for s in slices]
    a = busy()
    time.sleep(window)
    b = busy()
    kb = [s.get().gpu(0).gpu_time_ns for s in slices]
    kdt = time.monotonic_ns() - t0
    dt = b.gpus[gpu]["now_ns"] - a.gpus[gpu]["now_ns"]
    # a worker that ended inside the window would read as a negative share
    gone = [p for p in pids if (p, gpu) not in b.pids]
    assert not gone, f"workers {gone} had no channel at the window's end:\n{b.text}"
    per = {p: (b.pids[(p, gpu)] - a.pids.get((p, gpu), 0)) / dt for p in pids}
    for s, x, y in zip(slices, ka, kb):
        per[f"slice{s.id}"] = (y - x) / kdt
    return per, (b.gpus[gpu]["busy_ns"] - a.gpus[gpu]["busy_ns"]) / dt


# ----------------------------------------------------------------- workers
def _worker(prefix, item_us, depth, seconds, ready, go, token_q=None, ring_token=None):
    """A process with one channel on the slice's GPU 0, saturating it."""
    # a worker of a deleted slice may take SIGBUS on its doorbell: expected,
    # and pytest's faulthandler would print a "Fatal Python error" dump for it
    import faulthandler
    faulthandler.disable()
    c = RmClient(prefix)
    g = c.open_gpus()[0]
    ch = Channel(g)
    if token_q is not None:
        token_q.put(ch.token)
    ready.set()
    go.wait(30)
    end = time.monotonic() + seconds
    if ring_token is not None:
        # the attacker: queue its own work and keep ringing the victim's token
        n = ch.submit(item_us)
        while time.monotonic() < end:
            ch.ring(ring_token)
            time.sleep(0.0005)
        del n
    else:
        ch.run_work(item_us, depth, seconds=seconds, timeout=120)
    ch.close()
    c.close()


class Workers:
    def __init__(self):
        self.procs: list[mp.Process] = []
        self.go = mp.Event()
        self.ctx = mp.get_context("fork")

    def start(self, prefix, item_us=ITEM_US, depth=DEPTH, seconds=3.0, **kw) -> int:
        ready = self.ctx.Event()
        p = self.ctx.Process(target=_worker, args=(prefix, item_us, depth, seconds, ready,
                                                   self.go), kwargs=kw, daemon=True)
        p.start()
        assert ready.wait(30), "worker did not set up its channel"
        self.procs.append(p)
        return p.pid

    def run(self):
        self.go.set()

    def join(self, timeout=60):
        for p in self.procs:
            p.join(timeout)
            assert not p.is_alive(), f"worker {p.pid} still running (blocked?)"

    def kill(self):
        for p in self.procs:
            if p.is_alive():
                p.kill()
            p.join(10)

    def stop(self):
        """End workers started with WORK_S once the measurement is done
        (SIGKILL: the channels go with the process, as any client's)."""
        self.kill()
        for p in self.procs:
            assert not p.is_alive(), f"worker {p.pid} did not die"


@pytest.fixture
def workers():
    w = Workers()
    yield w
    w.kill()


@pytest.fixture(autouse=True)
def sched_default(kern):
    kern.sched_set(0, period_us=PERIOD_US, layers=U.VGPU_SCHED_L_ALL)
    yield
    kern.sched_set(0, period_us=PERIOD_US, layers=U.VGPU_SCHED_L_ALL)


def compute_slice(make_slice, kern, policy, bp, prio=LOW):
    sl = make_slice()
    kern.slice_set(sl.id, compute={0: Compute(policy, bp, prio)})
    return sl


# ---------------------------------------------------------------- netlink
BAD_COMPUTE = {
    "policy-4": Compute(4, 1000),
    "bp-0": Compute(FIXED, 0),
    "bp-10001": Compute(FIXED, 10001),
    "priority-2": Compute(SHARE, 1000, 2),
    "fixed-without-bp": Compute(FIXED, None),
}


@pytest.mark.parametrize("name", list(BAD_COMPUTE))
def test_bad_compute_refused_nothing_changed(kern, sl, name):
    # on SET a policy without bp keeps the slice's bp: only a NONE slice lacks one
    kern.slice_set(sl.id, compute={0: Compute(SHARE, 2500, LOW)} if name != "fixed-without-bp"
                   else {0: Compute(NONE)})
    with pytest.raises(VgpuError) as ei:
        kern.slice_set(sl.id, limits={0: 64 * MiB}, compute={0: BAD_COMPUTE[name]})
    assert ei.value.errno in BAD_ERRNOS
    assert ei.value.extack, "no extack message"
    g = sl.get().gpu(0)
    assert g.mem_limit == 256 * MiB
    if name != "fixed-without-bp":
        assert (g.compute_policy, g.compute_bp, g.priority) == (SHARE, 2500, LOW)
    else:
        assert (g.compute_policy, g.compute_bp) == (NONE, 0)
    # and on NEW: no slice made
    sid = sl.id + 50_000
    with pytest.raises(VgpuError) as ei:
        kern.slice_new(sid, [(0, MiB)], compute={0: BAD_COMPUTE[name]})
    assert ei.value.errno in BAD_ERRNOS and ei.value.extack
    assert sid not in {s.id for s in kern.slices()}


def test_reply_only_and_sched_attrs_refused(kern, sl):
    for attr in ("GPU_TIME_NS", "TSGS", "CHANNELS", "PAUSED", "DOORBELL_TRAPS"):
        t = getattr(U, f"VGPU_GPU_A_{attr}")
        with pytest.raises(VgpuError) as ei:
            kern.raw_request(U.VGPU_CMD_SLICE_SET, [
                Nla.u32(U.VGPU_A_SLICE_ID, sl.id),
                Nla.nest(U.VGPU_A_SLICE_GPUS, Nla.nest(U.VGPU_A_GPU,
                         Nla.u32(U.VGPU_GPU_A_INDEX, 0), Nla.u32(t, 1)))])
        assert ei.value.errno == errno.EINVAL and ei.value.extack, attr
    before = kern.sched_get(0)
    for kw in ({"period_us": 999}, {"period_us": 10_000_001}, {"layers": 4},
               {"layers": 0xFFFFFFFF}):
        with pytest.raises(VgpuError) as ei:
            kern.sched_set(0, **kw)
        assert ei.value.errno in BAD_ERRNOS and ei.value.extack, kw
    after = kern.sched_get(0)
    assert (after.period_us, after.layers) == (before.period_us, before.layers)
    with pytest.raises(VgpuError) as ei:
        kern.sched_set(200, period_us=50_000)
    assert ei.value.errno == errno.ENODEV
    with pytest.raises(VgpuError):
        kern.raw_request(U.VGPU_CMD_SCHED_SET, [Nla.u32(U.VGPU_A_SCHED_REAL_MINOR, 0),
                                                Nla.u64(U.VGPU_A_SCHED_SWITCHES, 1)])


def test_sched_set_get_dump(kern, sl):
    s = kern.sched_set(0, period_us=50_000, layers=U.VGPU_SCHED_L_TSG)
    assert (s.real_minor, s.period_us, s.layers) == (0, 50_000, U.VGPU_SCHED_L_TSG)
    s = kern.sched_set(0, period_us=10_000_000)
    assert (s.period_us, s.layers) == (10_000_000, U.VGPU_SCHED_L_TSG)
    g = kern.sched_get(0)
    assert (g.period_us, g.layers) == (10_000_000, U.VGPU_SCHED_L_TSG)
    assert 0 in {x.real_minor for x in kern.scheds()}
    assert g.cpu_ns >= 0 and g.switches >= 0


def test_compute_settings_on_new_and_set(kern, make_slice):
    sid = next(iter([make_slice().id])) + 60_000
    s = kern.slice_new(sid, [(0, MiB)], compute={0: Compute(BURST, 2000, HIGH)})
    try:
        g = s.gpu(0)
        assert (g.compute_policy, g.compute_bp, g.priority) == (BURST, 2000, HIGH)
        s = kern.slice_set(sid, compute={0: Compute(priority=LOW)})
        g = s.gpu(0)
        assert (g.compute_policy, g.compute_bp, g.priority) == (BURST, 2000, LOW)
        assert g.mem_limit == MiB
        s = kern.slice_set(sid, compute={0: Compute(NONE)})
        assert s.gpu(0).compute_policy == NONE
    finally:
        kern.slice_del(sid, force=True)


# --------------------------------------------------------------- tracking
def test_tracking_counts_follow_alloc_and_free(kern, sl, vstate):
    c = sl.client()
    g = c.open_gpus()[0]
    t1 = c.alloc_tsg(g.hDevice)
    assert (sl.get().gpu(0).tsgs, sl.get().gpu(0).channels) == (1, 0)
    ch1 = c.alloc_channel(t1)
    c.alloc_channel(t1)
    bare = c.alloc_channel(g.hDevice)          # a hidden TSG of its own
    gi = sl.get().gpu(0)
    assert (gi.tsgs, gi.channels) == (2, 3)
    c.free(ch1)
    assert (sl.get().gpu(0).tsgs, sl.get().gpu(0).channels) == (2, 2)
    c.free(bare)
    assert (sl.get().gpu(0).tsgs, sl.get().gpu(0).channels) == (1, 1)
    c.free(t1)                                 # the ancestor takes its channel
    assert (sl.get().gpu(0).tsgs, sl.get().gpu(0).channels) == (0, 0)
    t2 = c.alloc_tsg(g.hDevice)
    c.alloc_channel(t2)
    c.free(g.hDevice)                          # a further ancestor
    assert (sl.get().gpu(0).tsgs, sl.get().gpu(0).channels) == (0, 0)
    c2 = sl.client()
    g2 = c2.open_gpus()[0]
    c2.alloc_channel(c2.alloc_tsg(g2.hDevice))
    assert vstate().get("tsgs") >= 1
    sl.close_all()                             # last close
    assert (sl.get().gpu(0).tsgs, sl.get().gpu(0).channels) == (0, 0)
    assert vstate().get("tsgs") == 0 and vstate().get("userd_maps") == 0


def test_scheduling_controls_from_a_slice(kern, make_slice):
    sl = compute_slice(make_slice, kern, FIXED, 1)        # 0.01 %: almost always paused
    c = sl.client()
    g = c.open_gpus()[0]
    t = c.alloc_tsg(g.hDevice)
    c.alloc_channel(t)
    # A disable is refused; the TSG's own scheduling values are answered
    # NV_OK and not applied (kmod/vgpu/policy, rule 20): the scheduler's stay.
    with pytest.raises(RmError) as ei:
        c.tsg_schedule(t, False)
    assert ei.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    # (that nvsim's TSG state stays is test_vgpu_devices.py's check)
    c.tsg_preempt(t)
    c.tsg_set_timeslice(t, 100)
    c.tsg_set_interleave(t, A.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH)
    assert wait_until(lambda: sl.get().gpu(0).paused, 2.0)
    # enabling its own TSG is answered but gains nothing while paused
    c.tsg_schedule(t, True)
    tsgs = [x for (_, h), x in busy().tsgs.items() if h == t] if BUSY.exists() else []
    for x in tsgs:
        assert x["enabled"] == 0
    # a TSG made while paused starts off the runlist
    t2 = c.alloc_tsg(g.hDevice)
    c.alloc_channel(t2)
    c.tsg_schedule(t2, True)
    for (_, h), x in (busy().tsgs.items() if BUSY.exists() else ()):
        if h in (t, t2) and sl.get().gpu(0).paused:
            assert x["enabled"] == 0


# -------------------------------------------------------------- scheduler
@needs_engine
def test_fixed_cap_alone(kern, make_slice, workers):
    sl = compute_slice(make_slice, kern, FIXED, 3000)
    pid = workers.start(sl.prefix, seconds=WORK_S)
    workers.run()
    time.sleep(0.4)
    per, total = shares([pid], 1.5, slices=[sl])
    workers.stop()
    kshare = per[f"slice{sl.id}"]
    print(f"fixed 30% alone: achieved {per[pid]:.3f} (gpu {total:.3f}), "
          f"GPU_TIME share {kshare:.3f}")
    # The cap, an upper bound under any load: what the kernel granted and
    # what the engine ran (alone, the GPU idles while the slice is paused).
    # How close a saturating client comes to 30 % is bench/'s figure.
    assert kshare < 0.30 + TOL, per
    assert per[pid] < 0.30 + TOL, per
    # it ran, and GPU_TIME_NS counted it
    assert per[pid] > 0.02 and kshare > 0.02, per


@needs_engine
@pytest.mark.parametrize("policy,bps,want", [
    (FIXED, (3000, 7000), (0.30, 0.70)),
    (SHARE, (2500, 7500), (0.25, 0.75)),
], ids=["fixed-30-70", "share-1-3"])
def test_two_saturating_slices(kern, make_slice, workers, policy, bps, want):
    a = compute_slice(make_slice, kern, policy, bps[0])
    b = compute_slice(make_slice, kern, policy, bps[1])
    pa = workers.start(a.prefix, seconds=WORK_S, **DEEP)
    pb = workers.start(b.prefix, seconds=WORK_S, **DEEP)
    workers.run()
    time.sleep(0.5)
    s0 = kern.sched_get(0).switches
    per, total = shares([pa, pb], 2.0, slices=[a, b])
    switches = kern.sched_get(0).switches - s0
    workers.stop()
    ka, kb = per[f"slice{a.id}"], per[f"slice{b.id}"]
    print(f"{policy=} {bps}: achieved {per[pa]:.3f}/{per[pb]:.3f} (gpu {total:.3f}), "
          f"target {want}; GPU_TIME {ka:.3f}/{kb:.3f}; switches {switches}")
    # Both want the GPU all along (DEEP): the larger setting gets more, in
    # the kernel's books too.  How close the split comes to 30:70 or 1:3 is
    # bench/'s figure: a loaded host makes every decision late, the slice
    # taken off runs on until the next one, and both the engine's and the
    # kernel's split move toward even (1:3 read 0.37:0.52 beside two
    # `make test` runs and a CPU hog).
    assert kb > ka, per
    if policy == FIXED:                             # a cap is a cap
        assert ka < want[0] + TOL and kb < want[1] + TOL, per
        assert per[pa] < want[0] + TOL and per[pb] < want[1] + TOL, per
    # both ran, the slot changed hands, and the GPU was not left idle
    assert min(per[pa], per[pb], ka) > 0.02, per
    assert switches > 0
    assert ka + kb > 0.5, per


@needs_engine
def test_set_cap_takes_effect_within_two_periods(kern, make_slice, workers):
    sl = compute_slice(make_slice, kern, FIXED, 2000)
    pid = workers.start(sl.prefix, seconds=WORK_S, **DEEP)
    workers.run()
    time.sleep(0.4)
    k = f"slice{sl.id}"
    before, _ = shares([pid], 1.0, slices=[sl])
    kern.slice_set(sl.id, compute={0: Compute(FIXED, 6000)})
    time.sleep(2 * PERIOD_US / 1e6)
    after, _ = shares([pid], 1.0, slices=[sl])
    workers.stop()
    print(f"cap 20% -> 60%: achieved {before[pid]:.3f} -> {after[pid]:.3f}, "
          f"GPU_TIME {before[k]:.3f} -> {after[k]:.3f}")
    # each cap held (the kernel's books and the engine's), and the new one
    # let the worker, which wants the GPU all along (DEEP), have more
    assert before[k] < 0.20 + TOL and after[k] < 0.60 + TOL, (before, after)
    assert before[pid] < 0.20 + TOL and after[pid] < 0.60 + TOL, (before, after)
    # (the engine's figure: under load the kernel's books lagged it, 0.189 ->
    # 0.317 against the engine's 0.199 -> 0.755, an open question)
    assert after[pid] > before[pid] + 0.15, (before, after)
    assert before[pid] > 0.02 and after[pid] > 0.02, (before, after)


@needs_engine
def test_high_priority_starts_quickly(kern, make_slice, workers):
    low = compute_slice(make_slice, kern, SHARE, 5000, LOW)
    high = compute_slice(make_slice, kern, SHARE, 5000, HIGH)
    workers.start(low.prefix, seconds=4.0)
    workers.run()
    time.sleep(0.3)
    c = high.client()
    g = c.open_gpus()[0]
    lat = []
    with Channel(g) as ch:
        for _ in range(15):
            r = ch.run_work(2000, 1, items=1, timeout=30)
            lat.append(r["start_latency_us"]["max"])
            time.sleep(0.03)                   # idle between items
    workers.join()
    lat.sort()
    print(f"high priority start latency: median {lat[len(lat) // 2] / 1000:.2f} ms, "
          f"max {lat[-1] / 1000:.2f} ms (low slice saturating)")
    # a low slice holding the GPU for a whole period would show ~50-100 ms
    assert lat[len(lat) // 2] < 30_000


@needs_engine
def test_ringing_another_slices_token_gains_nothing(kern, make_slice, workers):
    victim = compute_slice(make_slice, kern, FIXED, 5000)
    thief = compute_slice(make_slice, kern, FIXED, 500)
    q = mp.get_context("fork").Queue()
    pv = workers.start(victim.prefix, seconds=WORK_S, token_q=q)
    token = q.get(timeout=10)
    pt = workers.start(thief.prefix, item_us=100_000, seconds=WORK_S, ring_token=token)
    workers.run()
    time.sleep(0.4)
    per, _ = shares([pv, pt], 1.5, slices=[victim, thief])
    workers.stop()
    kv, kt = per[f"slice{victim.id}"], per[f"slice{thief.id}"]
    print(f"token theft: victim {per[pv]:.3f} (target 0.50), thief {per[pt]:.3f} (cap 0.05); "
          f"GPU_TIME {kv:.3f}/{kt:.3f}")
    # the thief's ringing gains it nothing past its cap on the engine, nor
    # in the kernel's books (which charge a late decision's delay to the
    # holder and pay it back over the next periods: 8.6 % was seen in a
    # 1.5 s window on a loaded host, the engine's 0.0 %); the victim's own
    # work still runs
    assert per[pt] < 0.05 + TOL / 2 and kt < 0.05 + TOL, per
    assert kv < 0.50 + TOL and per[pv] < 0.50 + TOL, per
    assert per[pv] > 0.02, per


@needs_engine
@pytest.mark.parametrize("how", ["delete", "kill"])
def test_paused_slice_delete_or_kill_leaves_nothing(kern, make_slice, workers, vstate, how):
    sl = compute_slice(make_slice, kern, FIXED, 100)          # 1 %: paused nearly always
    pid = workers.start(sl.prefix, seconds=30.0)
    workers.run()
    assert wait_until(lambda: sl.get().gpu(0).doorbell_traps > 0 or sl.get().gpu(0).paused, 5)
    time.sleep(0.3)
    if how == "delete":
        kern.slice_del(sl.id, force=True)
    os.kill(pid, signal.SIGKILL)
    workers.join(20)
    assert wait_until(lambda: not vstate().leaks() and vstate().get("tsgs") == 0, 5), \
        vstate().text


@needs_engine
@pytest.mark.parametrize("layers", [U.VGPU_SCHED_L_TSG, U.VGPU_SCHED_L_DOORBELL],
                         ids=["tsg-only", "doorbell-only"])
def test_single_layer(kern, make_slice, workers, layers):
    """The layer benchmark's switch: TSG controls alone hold a fixed cap;
    doorbell gating alone traps (a channel with queued work keeps running,
    docs/compute.md 1, so it cannot hold the cap by itself)."""
    assert kern.sched_set(0, layers=layers).layers == layers
    sl = compute_slice(make_slice, kern, FIXED, 3000)
    pid = workers.start(sl.prefix, seconds=WORK_S)
    workers.run()
    time.sleep(0.4)
    per, _ = shares([pid], 1.5, slices=[sl])
    workers.stop()
    traps = sl.get().gpu(0).doorbell_traps
    kshare = per[f"slice{sl.id}"]
    print(f"layers {layers}: achieved {per[pid]:.3f} (GPU_TIME {kshare:.3f}), "
          f"doorbell traps {traps}")
    assert kshare < 0.30 + TOL and kshare > 0.02      # what the kernel granted
    if layers == U.VGPU_SCHED_L_TSG:
        # the TSG controls alone hold the cap on the engine, with no trap
        assert per[pid] < 0.30 + TOL and per[pid] > 0.02 and traps == 0, per
    else:
        assert traps > 0


# The debug kernel (README "The debug kernel") slows the scheduler thread
# several times over (KASAN, lockdep): a 2-point accuracy target is a
# figure of the production kernel, not a correctness check there.
not_on_debug_kernel = pytest.mark.skipif("-vgpu-debug" in os.uname().release,
                                         reason="an accuracy figure; the debug kernel's "
                                                "checkers slow the scheduler thread")


@needs_engine
@not_on_debug_kernel
def test_sixteen_mixed_slices(kern, make_slice, workers):
    """Many slices: 8 fixed 5 % beside 8 equal share slices (which split the
    other 60 %): every slice runs, the fixed ones keep to their caps.  Per-period
    ordering (ties broken by list order, debts forgotten at each period's
    end) gave the first share slices up to 11 % and the fixed ones 4 %."""
    fixed = [compute_slice(make_slice, kern, FIXED, 500) for _ in range(8)]
    share = [compute_slice(make_slice, kern, SHARE, 1000) for _ in range(8)]
    pids = [workers.start(s.prefix, seconds=WORK_S, **DEEP) for s in fixed + share]
    workers.run()
    time.sleep(1.5)
    s0 = kern.sched_get(0)
    per, total = shares(pids, 3.0, slices=fixed + share)
    s1 = kern.sched_get(0)
    got = [per[p] for p in pids]
    kgot = [per[f"slice{s.id}"] for s in fixed + share]
    print("16 slices: fixed " + " ".join(f"{x:.3f}" for x in got[:8]) +
          ", share " + " ".join(f"{x:.3f}" for x in got[8:]) +
          f" (gpu {total:.3f}); GPU_TIME fixed " + " ".join(f"{x:.3f}" for x in kgot[:8]) +
          ", share " + " ".join(f"{x:.3f}" for x in kgot[8:]) +
          f"; {s1.switches - s0.switches} switches, "
          f"scheduler CPU {(s1.cpu_ns - s0.cpu_ns) / 3e9:.1%} (emulated)")
    # How close each share comes to 5 % and 7.5 % is bench/compute_accuracy.py's
    # figure (bench/compute-report.md), not an assertion here: on a loaded
    # host the workers' processes do not keep their queues full (the VM's
    # CPUs are shared), the share policy is work-conserving, and nvsim's
    # late ticks charge their delay to the TSG on the engine: single shares
    # moved far from any band (fixed slices read 7.07 % on average, one
    # 10.7 %, a share slice 13.5 % while its siblings' workers waited for a
    # CPU; with 40 ms queued, one worker ran nothing in a 3 s window).  The
    # workers queue seconds of work (DEEP), and what holds on any machine is
    # the mechanism: every slice runs (on the engine and in the kernel's
    # books), and the kernel grants no fixed slice more than its cap (a late
    # decision's excess is carried into the next period: the average over
    # eight is within a point and a half).
    # Every slice runs: in the window, or (a slice whose worker the loaded
    # VM had not yet given a CPU to queue its work: one read 0.000 with 16
    # workers and 2 vCPUs beside two `make test` runs) soon after it, both
    # on the engine and in the kernel's books.  A slice the scheduler never
    # lets on stays at zero until the deadline.
    late = [i for i, (x, k) in enumerate(zip(got, kgot)) if x <= 0.005 or k <= 0.005]
    if late:
        print(f"16 slices: {len(late)} slice(s) had not run in the window: waiting")
        a = busy()
        ka = {i: (fixed + share)[i].get().gpu(0).gpu_time_ns for i in late}
        deadline = time.monotonic() + 60
        while late and time.monotonic() < deadline:
            time.sleep(0.5)
            b = busy()
            late = [i for i in late
                    if b.pids.get((pids[i], 0), 0) - a.pids.get((pids[i], 0), 0) < 5_000_000 or
                    (fixed + share)[i].get().gpu(0).gpu_time_ns - ka[i] < 5_000_000]
    workers.stop()
    assert not late, [(pids[i], got[i], kgot[i]) for i in late]
    assert max(kgot[:8]) < 0.05 + TOL / 2, kgot
    assert sum(kgot[:8]) / 8 < 0.05 + 0.015, kgot
    assert s1.switches - s0.switches >= 16, "every slice had the slot"


@needs_engine
def test_idle_high_holder_lets_the_thread_sleep(kern, make_slice):
    """A high-priority holder that ran dry with nobody else wanting the GPU:
    its grace ending is no reason to decide again (the thread once re-decided
    every 50 us here, a core's worth of CPU)."""
    high = compute_slice(make_slice, kern, SHARE, 5000, HIGH)
    compute_slice(make_slice, kern, SHARE, 5000, LOW)       # a member with no work
    c = high.client()
    g = c.open_gpus()[0]
    with Channel(g) as ch:
        ch.run_work(2000, 1, items=3, timeout=30)
        time.sleep(0.2)
        s0 = kern.sched_get(0)
        time.sleep(1.0)
        s1 = kern.sched_get(0)
    cpu = (s1.cpu_ns - s0.cpu_ns) / 1e9
    print(f"idle high holder: scheduler CPU {cpu:.1%} of a vCPU, "
          f"{s1.switches - s0.switches} switches")
    assert cpu < 0.05
    assert s1.switches == s0.switches


# ------------------------------------------------------------ dependants
# The driver frees a channel with the VA space or context share it depends
# on, and a TSG with its VA space (refAddDependant in kchannelConstruct_IMPL,
# kctxshareapiConstruct_IMPL, kchangrpapiConstruct_IMPL; nvsim models it):
# the channel is invalidated, its USERD kernel map torn down
# (clientUnmapResourceRefMappings), its handle kept.  vgpu.ko must drop it
# as the driver does: no scheduler read of the torn-down map (nvsim's map
# is a vmap the free unmaps: a read oopses), the channel cap, the TSG
# counts and the USERD charge back.
def _dep_channel(c, hdev, how, userd=0):
    vas = c.alloc(hdev, A.FERMI_VASPACE_A, A.NV_VASPACE_ALLOCATION_PARAMETERS())
    p = A.NV_CHANNEL_ALLOC_PARAMS(engineType=A.NV2080_ENGINE_TYPE_GR0,
                                  gpFifoEntries=A.NVSIM_GPFIFO_ENTRIES_DEFAULT)
    if how == "bare":
        p.hVASpace = vas
        return dict(vas=vas, ch=c.alloc(hdev, A.VOLTA_CHANNEL_GPFIFO_A, p))
    if how == "tsg-vaspace":
        tsg = c.alloc(hdev, A.KEPLER_CHANNEL_GROUP_A, A.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(
            engineType=A.NV2080_ENGINE_TYPE_GR0, hVASpace=vas))
        return dict(vas=vas, tsg=tsg, ch=c.alloc(tsg, A.VOLTA_CHANNEL_GPFIFO_A, p))
    tsg = c.alloc_tsg(hdev)
    cs = c.alloc(tsg, A.FERMI_CONTEXT_SHARE_A, A.NV_CTXSHARE_ALLOCATION_PARAMETERS(
        hVASpace=vas, flags=A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC))
    p.hContextShare = cs
    hclass = A.VOLTA_CHANNEL_GPFIFO_A
    if userd:
        import struct
        p.gpFifoEntries = 64
        struct.pack_into("<I", p._opaque0, 0, userd)          # hUserdMemory[0]
        hclass = _pb_channel_class()
    return dict(vas=vas, tsg=tsg, cs=cs, ch=c.alloc(tsg, hclass, p))


def _pb_channel_class() -> int:
    chip = [ln.split()[1] for ln in open("/sys/kernel/debug/nvsim/stats").read().splitlines()
            if ln.startswith("chip ")]
    return A.AMPERE_CHANNEL_GPFIFO_A if chip == ["GA102"] else A.HOPPER_CHANNEL_GPFIFO_A


@needs_engine
@pytest.mark.parametrize("how,free", [("ctxshare", "vas"), ("ctxshare", "cs"),
                                      ("bare", "vas"), ("tsg-vaspace", "vas")])
def test_channels_freed_as_dependants_are_dropped(kern, make_slice, workers, vstate, how, free):
    sl = compute_slice(make_slice, kern, FIXED, 5000)
    kern.slice_set(sl.id, max_channels=2)
    # the slice busy while it goes on: the scheduler polls its USERDs
    workers.start(sl.prefix, seconds=120.0)
    workers.run()
    c = sl.client()
    g = c.open_gpus()[0]
    base = sl.get().gpu(0)
    maps = vstate().get("userd_maps")
    # more rounds than the cap leaves room for: a stale channel would fill it
    for _ in range(4):
        o = _dep_channel(c, g.hDevice, how)
        gi = sl.get().gpu(0)
        assert (gi.tsgs, gi.channels) == (base.tsgs + 1, base.channels + 1)
        assert vstate().get("userd_maps") == maps + 1
        c.free(o[free], parent=o["tsg"] if free == "cs" else g.hDevice)
        time.sleep(0.25)                        # decisions read every USERD
        gi = sl.get().gpu(0)
        left_tsg = 1 if how == "ctxshare" else 0
        assert (gi.tsgs, gi.channels) == (base.tsgs + left_tsg, base.channels)
        assert vstate().get("userd_maps") == maps
        # the handles the driver invalidated are still its own until freed
        for k in ("ch", "cs", "tsg", "vas"):
            if k in o and k != free:
                c.free(o[k], parent=o["tsg"] if k in ("ch", "cs") and "tsg" in o
                       else g.hDevice)
    assert sl.get().gpu(0).channels == base.channels     # the worker's, still busy
    workers.kill()


def test_userd_charge_returns_when_its_channel_goes_as_a_dependant(make_slice):
    sl = make_slice(gpus=((0, 64 * MiB),))
    c = sl.client()
    g = c.gpu(0)
    mem = g.alloc(40 * MiB)
    o = _dep_channel(c, g.hDevice, "ctxshare", userd=mem)
    c.free(mem)
    assert sl.used(0) == 40 * MiB               # the channel holds it
    c.free(o["vas"], parent=g.hDevice)          # the channel goes with it
    assert sl.used(0) == 0
    assert sl.get().gpu(0).channels == 0
    g.alloc(40 * MiB)
    c.free(o["ch"], parent=o["tsg"])
    c.free(o["cs"], parent=o["tsg"])
    c.free(o["tsg"], parent=g.hDevice)


# ------------------------------------------------------- error notifiers
def test_error_notifier_memory_is_kept_while_its_channel_lives(make_slice):
    """kchannelGetNotifierInfo keeps the error notifier's memory descriptor
    without a reference (on GSP, its physical address), and the driver
    writes it later (GPFIFO_GET_WORK_SUBMIT_TOKEN through
    kchannelUpdateNotifierMem; on GSP, RC notifications): freeing the memory
    while the channel lives would let it write freed FB, uncharged.  The
    free is refused (NV_ERR_STATE_IN_USE) while the channel, or the TSG
    whose notifier its channels inherit, lives."""
    import struct
    sl = make_slice(gpus=((0, 64 * MiB),))
    c = sl.client()
    g = c.gpu(0)
    note, ecc, tnote = g.alloc(MiB), g.alloc(MiB), g.alloc(MiB)
    tsg = c.alloc(g.hDevice, A.KEPLER_CHANNEL_GROUP_A, A.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(
        engineType=A.NV2080_ENGINE_TYPE_GR0, hObjectError=tnote))
    p = A.NV_CHANNEL_ALLOC_PARAMS(engineType=A.NV2080_ENGINE_TYPE_GR0,
                                  gpFifoEntries=A.NVSIM_GPFIFO_ENTRIES_DEFAULT, hObjectError=note)
    struct.pack_into("<I", p._opaque1, 8, ecc)          # hObjectEccError @140
    ch = c.alloc(tsg, A.VOLTA_CHANNEL_GPFIFO_A, p)
    for h in (note, ecc, tnote):
        with pytest.raises(RmError) as e:
            c.free(h)
        assert e.value.status == A.NV_ERR_STATE_IN_USE
    with pytest.raises(RmError) as e:
        c.vid_heap_free(g.hDevice, note)
    assert e.value.status == A.NV_ERR_STATE_IN_USE
    assert sl.used(0) == 3 * MiB
    c.free(ch)
    c.free(note)
    c.free(ecc)
    with pytest.raises(RmError):
        c.free(tnote)                                   # the TSG still lives
    c.free(tsg)
    c.free(tnote)
    assert sl.used(0) == 0
    # an ancestor of both goes as one
    note = g.alloc(MiB)
    c.alloc(g.hDevice, A.VOLTA_CHANNEL_GPFIFO_A, A.NV_CHANNEL_ALLOC_PARAMS(
        engineType=A.NV2080_ENGINE_TYPE_GR0, gpFifoEntries=A.NVSIM_GPFIFO_ENTRIES_DEFAULT,
        hObjectError=note))
    c.free(g.hDevice)
    assert sl.used(0) == 0
