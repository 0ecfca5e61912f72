"""A slice's memory quota, from the API to vgpu.ko's limits: set on all its
GPUs or on named ones, kept over a profile change, saved and read back,
taken from the kernel for an adopted slice, and kept in one place in the
record (SliceRecord.memory), state files from before included.  Against
daemon_support's FakeKernel (``env``: two 16 GiB GPUs, [defaults] 1 GiB,
profile small 4 GiB)."""

from __future__ import annotations

import json

import pytest

from vgpu.daemon.config import SliceSpec, parse_config
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.records import GpuSlot, SliceRecord
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import CONFIG, FakeInventory, FakeKernel, GiB, call


def klimits(k, sid):
    return [g.mem_limit for g in k.slices_[sid].gpus]


def vlimits(r):
    return [g["memory_limit"] for g in r["result"]["slice"]["gpus"]]


def restarted(mgr, k, tmp):
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"),
                      FakeInventory())
    m2.load_state()
    return m2


async def test_set_quota_on_named_gpus_then_on_all(env):
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c", gpus=[0, 1], memory="2GiB")
    sid = r["result"]["slice"]["slice_id"]
    assert klimits(k, sid) == [2 * GiB, 2 * GiB]
    # one GPU only: the other keeps its quota
    r = await call(mgr, "set-quota", container="c", gpus=[1], memory="3GiB")
    assert vlimits(r) == [2 * GiB, 3 * GiB] == klimits(k, sid)
    # a GPU the slice is not on: refused, nothing changes
    r = await call(mgr, "create", container="d", gpus=[0], memory="1GiB")
    r = await call(mgr, "set-quota", container="d", gpus=[1], memory="3GiB")
    assert r["error"]["code"] == "not-found" and "is not on GPU(s) 1" in r["error"]["message"]
    # a profile does not take an asked quota away
    r = await call(mgr, "set-quota", container="c", profile="small")
    assert vlimits(r) == [2 * GiB, 3 * GiB] == klimits(k, sid)
    # the whole slice: both GPUs
    r = await call(mgr, "set-quota", container="c", memory="5GiB")
    assert vlimits(r) == [5 * GiB, 5 * GiB] == klimits(k, sid)
    # kept over a restart: the new daemon finds the kernel right
    m2 = restarted(mgr, k, tmp)
    assert (await m2.reconcile())["kept"] == 2
    r = await call(m2, "show", container="c")
    assert vlimits(r) == [5 * GiB, 5 * GiB]


async def test_a_gpu_without_its_own_quota_follows_the_profile(env):
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c", gpus=[0, 1])          # [defaults]: 1 GiB
    sid = r["result"]["slice"]["slice_id"]
    await call(mgr, "set-quota", container="c", gpus=[0], memory="3GiB")
    r = await call(mgr, "set-quota", container="c", profile="small")   # 4 GiB
    assert vlimits(r) == [3 * GiB, 4 * GiB] == klimits(k, sid)
    # what the state file holds: the GPU's own quota in its entry, nothing slice-wide
    doc = json.loads((tmp / "state" / "state.json").read_text())["slices"]["c"]
    assert [g.get("memory") for g in doc["gpus"]] == [3 * GiB, None]
    assert "memory" not in doc["explicit"]


async def test_an_adopted_slice_needs_no_default_memory(tmp_path):
    """A slice found in vgpu.ko under a config without [defaults] memory:
    its limits are its own quotas, so it is adopted, listed and counted
    like any other (not refused for a memory quota it does not need)."""
    cfg = parse_config(CONFIG.format(tmp=tmp_path).replace('memory = "1GiB"\n', ""), "t.toml")
    assert cfg.defaults.memory is None
    k = FakeKernel()
    mgr = SliceManager(cfg, "t.toml", KernelPort(factory=lambda: k),
                       StateStore(tmp_path / "state"), FakeInventory())
    mgr.load_state()
    k.slice_new(900, [(1, 2 * GiB)], name="stranger")
    assert (await mgr.reconcile())["adopted"] == 1
    assert mgr.records["stranger"].memory == {0: 2 * GiB}
    r = await call(mgr, "list")
    assert [vlimits({"result": {"slice": s}}) for s in r["result"]["slices"]] == [[2 * GiB]]
    gpus = (await call(mgr, "gpus"))["result"]["gpus"]
    assert [g["memory_allocated"] for g in gpus] == [0, 2 * GiB]
    r = await call(mgr, "set-quota", container="stranger", memory="3GiB")
    assert vlimits(r) == [3 * GiB] == klimits(k, 900)


async def test_create_without_any_memory_quota_is_refused(tmp_path):
    cfg = parse_config(CONFIG.format(tmp=tmp_path).replace('memory = "1GiB"\n', ""), "t.toml")
    k = FakeKernel()
    mgr = SliceManager(cfg, "t.toml", KernelPort(factory=lambda: k),
                       StateStore(tmp_path / "state"), FakeInventory())
    r = await call(mgr, "create", container="c")
    assert r["error"]["code"] == "bad-request"
    assert r["error"]["message"] == ("no memory quota: the request gives none, nor does its "
                                     "profile or [defaults]")
    assert not k.slices_
    assert (await call(mgr, "create", container="c", memory="1GiB"))["ok"]


def test_a_file_with_a_slice_wide_quota_is_read_per_gpu():
    """State files written before the quota had one home hold a slice-wide
    ``explicit.memory``: it becomes the quota of each GPU without one of
    its own, and is not written again."""
    rec = SliceRecord.from_json("c", {
        "slice_id": 3, "explicit": {"memory": 4 * GiB, "policy": "fixed"},
        "gpus": [{"gpu": 0}, {"gpu": 1, "memory": GiB}]})
    assert rec.memory == {0: 4 * GiB, 1: GiB}
    assert rec.explicit == SliceSpec(policy="fixed")
    out = rec.to_json()
    assert out["explicit"] == {"policy": "fixed"}
    assert out["gpus"] == [{"gpu": 0, "memory": 4 * GiB}, {"gpu": 1, "memory": GiB}]
    assert SliceRecord.from_json("c", out) == rec


def test_a_record_has_one_home_for_its_memory_quota():
    with pytest.raises(ValueError, match="SliceRecord.memory"):
        SliceRecord("c", 1, gpus=[GpuSlot(0)], explicit=SliceSpec(memory=GiB))
    rec = SliceRecord("c", 1, gpus=[GpuSlot(0), GpuSlot(1)], memory={0: GiB})
    assert rec.with_memory(2 * GiB) == {0: 2 * GiB, 1: 2 * GiB}
    assert rec.with_memory(2 * GiB, [1]) == {0: GiB, 1: 2 * GiB}
