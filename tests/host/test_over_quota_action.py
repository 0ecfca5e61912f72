"""What vgpud does about a slice over its quota by the driver's count
(SliceManager.check_over_quota, [node] over_quota_action): an event once
while it stays over, or its processes killed each time it is found.
Against daemon_support's FakeKernel and FakeInventory (``env``)."""

from __future__ import annotations

import os
import signal

import trio

from vgpu.daemon.config import parse_config

from daemon_support import CONFIG, GiB, call


async def _over(mgr, k, pid=4242):
    r = await call(mgr, "create", container="c", gpus=[0], memory="1GiB")
    sid = r["result"]["slice"]["slice_id"]
    k.slices_[sid].pids = [pid]
    mgr.inventory.gpus[0].proc_memory = {pid: 2 * GiB, 1: 8 * GiB}


async def test_over_quota_is_published_once_while_it_stays_over(env):
    mgr, k, tmp = env
    await _over(mgr, k)
    sub = mgr.subscribe()
    (f,) = await mgr.check_over_quota()
    assert (f["container"], f["gpu"], f["limit"], f["driver_used"], f["pids"]) == \
        ("c", 0, GiB, 2 * GiB, [4242])
    assert len(await mgr.check_over_quota()) == 1
    ev = sub.receive_nowait()
    assert ev["type"] == "over-quota" and ev["container"] == "c" and ev["pids"] == [4242]
    try:
        sub.receive_nowait()
        raise AssertionError("published twice")
    except trio.WouldBlock:
        pass
    # under quota again (another process holds FB, so the GPU is looked at),
    # then over: published again
    mgr.inventory.gpus[0].proc_memory = {1: 8 * GiB}
    assert await mgr.check_over_quota() == []
    mgr.inventory.gpus[0].proc_memory = {4242: 2 * GiB}
    await mgr.check_over_quota()
    assert sub.receive_nowait()["type"] == "over-quota"


async def test_kill_kills_each_time_it_is_found(env, monkeypatch):
    mgr, k, tmp = env
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp) + '[node]\nover_quota_action = "kill"\n',
                           "test.toml")
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    await _over(mgr, k)
    await mgr.check_over_quota()
    await mgr.check_over_quota()
    assert killed == [(4242, signal.SIGKILL)] * 2
