"""What vgpud's GC tick decides (vgpu.daemon.slices, vgpu.daemon.inventory):
reconciliation with vgpu.ko (adopt a stranger, recreate a lost slice,
correct a drifted one; [node] max_channels sent on create and recreate),
collection of slices whose container is gone (a dead pid, a missing
cgroup), and the over-quota comparison.  Against daemon_support's
FakeKernel (``env``); the reconcile of audit mode and tracing is in
test_audit.py and test_tracing.py.
"""

from __future__ import annotations

import subprocess

from vgpu.daemon import slices
from vgpu.daemon.config import parse_config
from vgpu.daemon.inventory import GpuInfo, over_quota
from vgpu.vgpuko.messages import GpuUsage, Slice
from vgpu.daemon.kport import KernelPort
from vgpu.daemon import liveness
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import CONFIG, FakeInventory, GiB, call


async def test_reconcile_adopt_recreate_correct(env):
    mgr, k, tmp = env
    await call(mgr, "create", container="want", memory="1GiB")
    await call(mgr, "create", container="changed", memory="1GiB")
    sid_want = mgr.records["want"].slice_id
    sid_changed = mgr.records["changed"].slice_id
    del k.slices_[sid_want]                                    # the kernel lost it
    k.slices_[sid_changed].gpu(0).mem_limit = 5               # drifted
    k.slice_new(900, [(1, 2 * GiB)], name="stranger")         # nobody wanted it
    # a restarted daemon: new manager on the same state and kernel
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"), FakeInventory())
    m2.load_state()
    counts = await m2.reconcile()
    assert counts == {"adopted": 1, "recreated": 1, "corrected": 1, "kept": 0}
    assert k.slices_[sid_want].name == "want"
    assert k.slices_[sid_changed].gpu(0).mem_limit == GiB
    assert m2.records["stranger"].memory == {0: 2 * GiB}
    assert m2.records["stranger"].gpus[0].gpu == 1
    counts = await m2.reconcile()
    assert counts["kept"] == 3 and counts["adopted"] == counts["recreated"] == 0
    s = (await call(m2, "create", container="new", memory="1GiB"))["result"]["slice"]
    assert s["slice_id"] not in (sid_want, sid_changed, 900)


async def test_max_channels_sent_on_create_and_recreate(env):
    """[node] max_channels reaches slice_new on create and when reconcile
    recreates a lost slice (default 256; 0, no cap, is sent as 0)."""
    mgr, k, tmp = env
    sent = []
    real_new = k.slice_new

    def spy(*a, **kw):
        sent.append(kw.get("max_channels"))
        return real_new(*a, **kw)

    k.slice_new = spy
    assert (await call(mgr, "create", container="c1", memory="1GiB"))["ok"]
    sid = mgr.records["c1"].slice_id
    assert sent == [256] and k.slices_[sid].max_channels == 256

    def manager(extra):
        cfg = parse_config(CONFIG.format(tmp=tmp) + extra, "test.toml")
        m = SliceManager(cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"),
                         FakeInventory())
        m.load_state()
        return m

    m2 = manager("[node]\nmax_channels = 32\n")
    del k.slices_[sid]                                         # the kernel lost it
    assert (await m2.reconcile())["recreated"] == 1
    assert sent == [256, 32] and k.slices_[sid].max_channels == 32
    assert (await call(m2, "create", container="c2", memory="1GiB"))["ok"]
    assert sent == [256, 32, 32]
    m3 = manager("[node]\nmax_channels = 0\n")
    assert (await call(m3, "create", container="c3", memory="1GiB"))["ok"]
    assert sent == [256, 32, 32, 0]


async def test_gc_dead_pid_and_missing_cgroup(env, tmp_path, monkeypatch):
    mgr, k, _ = env
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp_path))
    (tmp_path / "cg").mkdir()
    p = subprocess.Popen(["sleep", "30"])
    try:
        await call(mgr, "create", container="p", pid=p.pid)
        await call(mgr, "create", container="cg", cgroup="/cg")
        await call(mgr, "create", container="keep")
        (tmp_path / "cg").rmdir()                 # the container's cgroup is gone
        assert await mgr.collect() == ["cg"]
    finally:
        p.kill()
        p.wait()
    assert await mgr.collect() == ["p"]
    assert set(mgr.records) == {"keep"}
    assert [s.name for s in k.slices()] == ["keep"]
    assert (await call(mgr, "create", container="dead", pid=4194000))["error"]["code"] in ("not-found", "bad-request")


def test_over_quota_pure():
    g = GpuInfo(0, "GPU-x", "Sim", "0000:01:00.0", 16 * GiB, 0, 0, proc_memory={10: 3 * GiB, 11: GiB, 99: 8 * GiB})
    s = Slice(id=1, name="c", pids=[10, 11], gpus=[GpuUsage(index=0, real_minor=0, mem_limit=3 * GiB, mem_used=3 * GiB)])
    found = over_quota([("c", s)], [g])
    assert found == [{"container": "c", "gpu": 0, "real_minor": 0, "limit": 3 * GiB,
                      "driver_used": 4 * GiB, "kernel_used": 3 * GiB, "pids": [10, 11]}]
    s.gpus[0].mem_limit = 4 * GiB
    assert over_quota([("c", s)], [g]) == []
