"""vgpud killed between an operation's kernel call and its state save: what
the state file holds at that moment (a snapshot taken when the FakeKernel
call returns) is what a restarted vgpud starts from.  After the restart,
vgpud and the kernel agree, and repeating the cut operation (as the hook or
an operator does after an error) succeeds.  tests/vm/test_daemon_faults.py
SIGKILLs a real vgpud at random points; this pins the points down.
"""

from __future__ import annotations

import shutil

from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import FakeInventory, call

GiB = 1 << 30
OWNER = {"runtime": "runc", "namespace": "k8s.io"}


def _cut_at(mgr, k, method: str, snaps: list) -> None:
    """Snapshot the state file each time k.<method> returns."""
    real = getattr(k, method)

    def spy(*a, **kw):
        r = real(*a, **kw)
        snaps.append(mgr.store.path.read_bytes() if mgr.store.path.exists() else None)
        return r
    setattr(k, method, spy)


async def _restart(mgr, k, tmp, snap: bytes | None) -> SliceManager:
    d = tmp / "after"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    if snap is not None:
        (d / "state.json").write_bytes(snap)
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(d), FakeInventory())
    m2.load_state()
    await m2.reconcile(startup=True)
    return m2


def _agree(m, k) -> None:
    assert {r.slice_id: c for c, r in m.records.items()} == \
        {s.id: s.name for s in k.slices_.values()}


async def test_killed_after_slice_new(env):
    """The record is written ahead: the restarted vgpud keeps the slice as
    its owner's (not adopted as an operator's, owner-less, never collected),
    the hook's retried create gets it back, its delete is the owner's."""
    mgr, k, tmp = env
    snaps: list = []
    _cut_at(mgr, k, "slice_new", snaps)
    r = await call(mgr, "create", container="c1", memory="1GiB", owner=OWNER,
                   labels={"app": "web"})
    assert r["ok"]
    m2 = await _restart(mgr, k, tmp, snaps[0])
    _agree(m2, k)
    rec = m2.records["c1"]
    assert rec.owner == OWNER and not rec.adopted and rec.labels == {"app": "web"}
    again = await call(m2, "create", container="c1", memory="1GiB", owner=OWNER)
    assert again["ok"] and again["result"]["reused"], again
    assert (await call(m2, "delete", container="c1", owner=OWNER))["ok"]
    assert not k.slices_


async def test_killed_before_slice_new_answered(env):
    """The record written ahead, the kernel never got the slice (the kill
    came first): the restarted vgpud creates it; the retry gets it back."""
    mgr, k, tmp = env
    snaps: list = []
    real = k.slice_new

    def cut(*a, **kw):
        snaps.append(mgr.store.path.read_bytes())
        raise KeyboardInterrupt            # vgpud dies here
    k.slice_new = cut
    try:
        await call(mgr, "create", container="c1", memory="1GiB", owner=OWNER)
    except BaseException:                  # noqa: BLE001
        pass
    k.slice_new = real
    m2 = await _restart(mgr, k, tmp, snaps[0])
    _agree(m2, k)
    assert k.slices_[m2.records["c1"].slice_id].gpu(0).mem_limit == GiB
    again = await call(m2, "create", container="c1", memory="1GiB", owner=OWNER)
    assert again["ok"] and again["result"]["reused"]


async def test_a_refused_create_withdraws_its_record(env):
    mgr, k, tmp = env
    real = k.slice_new

    def refuse(*a, **kw):
        raise OSError(22, "refused (test)")
    k.slice_new = refuse
    r = await call(mgr, "create", container="c1", memory="1GiB")
    assert not r["ok"]
    k.slice_new = real
    m2 = await _restart(mgr, k, tmp, mgr.store.path.read_bytes())
    assert "c1" not in m2.records and not k.slices_


async def test_killed_after_set_quota_and_delete(env):
    """set-quota cut: the file's quota wins at restart (the kernel is set
    back); delete cut: the slice is created again from the file.  Either
    way vgpud and the kernel agree, and repeating the operation works."""
    mgr, k, tmp = env
    await call(mgr, "create", container="c1", memory="1GiB", owner=OWNER)
    snaps: list = []
    _cut_at(mgr, k, "slice_set", snaps)
    assert (await call(mgr, "set-quota", container="c1", memory="2GiB"))["ok"]
    m2 = await _restart(mgr, k, tmp, snaps[0])
    _agree(m2, k)
    sid = m2.records["c1"].slice_id
    assert k.slices_[sid].gpu(0).mem_limit == GiB
    assert (await call(m2, "set-quota", container="c1", memory="2GiB"))["ok"]
    assert k.slices_[sid].gpu(0).mem_limit == 2 * GiB

    snaps = []
    _cut_at(m2, k, "slice_del", snaps)
    assert (await call(m2, "delete", container="c1", owner=OWNER))["ok"]
    m3 = await _restart(m2, k, tmp, snaps[0])
    _agree(m3, k)
    assert m3.records["c1"].owner == OWNER
    assert (await call(m3, "delete", container="c1", owner=OWNER))["ok"]
    assert not k.slices_
