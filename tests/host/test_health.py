"""Per-GPU health from XID events (vgpu.daemon.health) against a stand-in for
NVML: no GPU here raises an XID (nvsim's inventory is the RM ABI's).  The
stand-in answers through pynvml's own error classes and constants, so the
watch handles what pynvml raises."""

from __future__ import annotations

import threading

import pynvml
import trio

from vgpu.daemon import health
from vgpu.daemon.health import Fault, XidWatch, record_fault
from vgpu.daemon.main import Daemon

from daemon_support import FakeNvml, call


def run_watch(nv, faults):
    w = XidWatch(nv, lambda uuid, xid: record_fault(faults, uuid, xid))
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    return w, t


def test_a_critical_xid_marks_its_gpu_and_an_applications_does_not(monkeypatch):
    monkeypatch.setattr(health, "WAIT_MS", 20)
    nv = FakeNvml(["GPU-a", "GPU-b", "GPU-c"], unsupported={2})
    faults: dict[str, Fault] = {}
    w, t = run_watch(nv, faults)
    nv.xid(0, 31)                   # a page fault of an application: not the GPU's
    nv.xid(1, 43)
    nv.xid(0, 79, kind=pynvml.nvmlEventTypeSingleBitEccError)     # not an XID event
    nv.xid(1, 79)                   # fallen off the bus
    nv.xid(1, 48)                   # a later one: the first stays
    for _ in range(500):
        if "GPU-b" in faults and nv.events.empty():
            break
        threading.Event().wait(0.01)
    w.stop()
    t.join(5)
    assert not t.is_alive() and nv.freed.is_set()
    assert nv.registered == [0, 1]                        # GPU 2 could not be watched
    assert list(faults) == ["GPU-b"] and faults["GPU-b"].xid == 79, faults


def test_a_failing_wait_ends_the_watch_and_keeps_what_it_saw(monkeypatch, caplog):
    monkeypatch.setattr(health, "WAIT_MS", 20)
    nv = FakeNvml(["GPU-a"])
    faults: dict[str, Fault] = {"GPU-a": Fault(62, 1.0)}
    nv.events.put(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST))
    w, t = run_watch(nv, faults)
    t.join(5)
    assert not t.is_alive() and nv.freed.is_set()
    assert faults == {"GPU-a": Fault(62, 1.0)}
    assert "waiting for XIDs failed" in caplog.text and "no longer watched" in caplog.text


def test_no_gpu_that_can_be_watched_returns_at_once():
    nv = FakeNvml(["GPU-a"], unsupported={0})
    w, t = run_watch(nv, {})
    t.join(5)
    assert not t.is_alive() and nv.freed.is_set()


async def test_gpus_reports_a_fault(env):
    mgr, _, _ = env
    uuid = mgr.inventory.gpus[1].uuid
    record_fault(mgr.gpu_faults, uuid, 79)
    gpus = (await call(mgr, "gpus"))["result"]["gpus"]
    assert gpus[0]["fault"] is None
    assert gpus[1]["fault"]["xid"] == 79 and isinstance(gpus[1]["fault"]["at"], float)


async def test_the_daemons_health_service_watches_nvml_and_stops_when_cancelled(env, monkeypatch):
    """vgpud's gpu-health service: the watch runs in a worker thread; an XID
    lands in the manager; cancelling the service stops the thread within a
    wait, before the daemon goes on (and shuts NVML down)."""
    monkeypatch.setattr(health, "WAIT_MS", 50)
    mgr, _, _ = env
    uuids = [g.uuid for g in mgr.inventory.gpus]
    nv = FakeNvml(uuids)
    mgr.inventory.nvml = nv
    d = Daemon(mgr.cfg, "test.toml")
    d.mgr = mgr
    with trio.fail_after(20):
        async with trio.open_nursery() as n:
            await n.start(d._health_service)
            nv.xid(0, 94)           # a contained ECC error
            while uuids[0] not in mgr.gpu_faults:
                await trio.sleep(0.01)
            n.cancel_scope.cancel()
    assert nv.freed.is_set()
    assert mgr.gpu_faults[uuids[0]].xid == 94


async def test_without_nvml_the_health_service_watches_nothing(env):
    mgr, _, _ = env
    d = Daemon(mgr.cfg, "test.toml")
    d.mgr = mgr
    with trio.fail_after(5):
        async with trio.open_nursery() as n:
            await n.start(d._health_service)
    assert mgr.gpu_faults == {}

