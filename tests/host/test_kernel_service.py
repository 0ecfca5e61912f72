"""vgpud's kernel connection (vgpu.daemon.main.Daemon._kernel_service) through
vgpu.ko reloads, on the host: a fake module that can be unloaded and loaded
again (a new family id each time, as genl allocates them), with clients
that go stale as real ones do (every call of an old family answers ENOENT,
its event sockets go quiet without an error).  The VM test
(tests/vm/test_daemon_reload.py) does the same with rmmod/insmod.
"""

from __future__ import annotations

import errno
import logging
import socket

import pytest
import trio

from daemon_support import CONFIG, FakeInventory, FakeKernel, GiB, call
from daemon_support import until as _until
from vgpu.daemon import main
from vgpu.abi import uapi
from vgpu.daemon.config import parse_config
from vgpu.vgpuko.messages import Event
from vgpu.vgpuko.netlink import VgpuError, VgpuNotLoaded
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.ops import Ops
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore


class FakeEventStream:
    """vgpu.vgpuko.streams.EventStream's interface over a socketpair."""

    def __init__(self):
        self.r, self.w = socket.socketpair()
        self.r.setblocking(False)
        self.pending: list = []
        self.closed = False

    def push(self, ev) -> None:
        if self.closed:
            return
        self.pending.append(ev)
        self.w.send(b"x")

    def fileno(self) -> int:
        return self.r.fileno()

    def get(self, timeout=-1.0):
        try:
            while self.r.recv(4096):
                pass
        except BlockingIOError:
            pass
        return self.pending.pop(0) if self.pending else None

    def close(self) -> None:
        self.closed = True
        self.r.close()
        self.w.close()


class FakeModule:
    """vgpu.ko as its netlink family shows it: ``unload`` takes the slices
    and the family away (event sockets stay open and go quiet: genl drops
    their group membership silently), ``load`` registers a new family."""

    def __init__(self, loaded: bool = True):
        self.family_id = 0
        self.kernel: FakeKernel | None = None
        self.streams: list[FakeEventStream] = []
        self.clients = 0
        if loaded:
            self.load()

    def load(self) -> None:
        self.family_id += 1
        self.kernel = FakeKernel()

    def unload(self) -> None:
        self.kernel = None
        self.streams = []

    def event(self, ev: Event) -> None:
        for es in self.streams:
            es.push(ev)

    def client(self):
        """KernelPort's factory: VgpuKernel() against the module as it is now."""
        if self.kernel is None:
            raise VgpuNotLoaded()
        self.clients += 1
        return FakeClient(self)


class FakeClient:
    def __init__(self, mod: FakeModule):
        self.mod = mod
        self.family_id = mod.family_id
        self.kernel = mod.kernel
        self.mcast_groups = {uapi.VGPU_GENL_MCGRP_EVENTS: 5, uapi.VGPU_GENL_MCGRP_TRACE: 6}
        self.closed = False

    def is_current(self) -> bool:
        return self.mod.kernel is not None and self.mod.family_id == self.family_id

    def _live(self):
        assert not self.closed, "a call on a closed client"
        if not self.is_current():
            raise VgpuError(errno.ENOENT, op="genl")      # genl: no such family
        return self.kernel

    def subscribe(self, timeout=None):
        self._live()
        es = FakeEventStream()
        self.mod.streams.append(es)
        return es

    def __getattr__(self, name):
        fn = getattr(FakeKernel, name)

        def call(*a, **kw):
            return fn(self._live(), *a, **kw)
        return call

    def close(self):
        self.closed = True


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(main, "KERNEL_RETRY_MIN", 0.01)
    monkeypatch.setattr(main, "KERNEL_RETRY_MAX", 0.05)
    monkeypatch.setattr(main, "KERNEL_CHECK", 0.05)


def daemon(tmp_path, mod: FakeModule) -> main.Daemon:
    cfg = parse_config(CONFIG.format(tmp=tmp_path), "test.toml")
    d = main.Daemon(cfg, "test.toml")
    d.mgr = SliceManager(cfg, "test.toml", KernelPort(factory=mod.client),
                         StateStore(tmp_path / "state"), FakeInventory())
    d.mgr.load_state()
    return d


async def next_event(recv, type_: str, timeout: float = 5.0) -> dict:
    with trio.fail_after(timeout):
        async for ev in recv:
            if ev["type"] == type_:
                return ev


async def test_the_module_goes_and_comes_back(tmp_path, fast, caplog):
    caplog.set_level(logging.INFO)
    mod = FakeModule()
    d = daemon(tmp_path, mod)
    mgr = d.mgr
    async with trio.open_nursery() as n:
        await n.start(d._kernel_service)
        assert mgr.kport.kernel is not None and d.kernel_ready.is_set()
        r = await call(mgr, "create", container="c1", memory="2GiB", compute="25%")
        sid = r["result"]["slice"]["slice_id"]
        await call(mgr, "create", container="c2")
        subs = mgr.subscribe()
        mod.event(Event(uapi.VGPU_EVENT_ALLOC_REFUSED, slice_id=sid, gpu=0, size=GiB))
        ev = await next_event(subs, "alloc-refused")
        assert ev["container"] == "c1" and ev["size"] == GiB
        # a tracer of c1, on the old module's trace group
        send, recv = trio.open_memory_channel(16)
        await n.start(Ops(mgr).trace, {"container": "c1"}, send)
        assert sid in mgr.tracing.slices and mod.kernel.slices_[sid].trace is True
        old = mgr.kport.kernel

        mod.unload()
        # the client is forgotten first, then closed in the worker thread,
        # then the service clears kernel_ready: wait for all three
        await _until(lambda: mgr.kport.kernel is None and old.closed
                     and not d.kernel_ready.is_set())
        # the tracer ends, and says why
        with trio.fail_after(5):
            assert await recv.receive() == {"end": True, "reason": "vgpu.ko unloaded"}
            async for _ in recv:
                pytest.fail("the trace went on")
        assert not mgr.tracing.slices
        assert "lost vgpu.ko (unloaded)" in caplog.text
        assert "the tracers of 1 slice(s) ended" in caplog.text
        # while it is away: the API says so, the records stay
        r = await call(mgr, "set-quota", container="c1", memory="3GiB")
        assert r["error"]["code"] == "unavailable", r
        st = (await call(mgr, "status"))["result"]
        assert st["kernel"]["loaded"] is False and set(mgr.records) == {"c1", "c2"}
        await trio.sleep(0.3)                  # several retries: logged once
        assert caplog.text.count("vgpu.ko is not loaded; waiting for it") == 1

        mod.load()
        await _until(lambda: mgr.kport.kernel is not None and d.kernel_ready.is_set())
        k = mod.kernel
        assert set(k.slices_) == {sid, mgr.records["c2"].slice_id}
        assert k.slices_[sid].name == "c1" and k.slices_[sid].gpus[0].mem_limit == 2 * GiB
        assert k.slices_[sid].gpus[0].compute_bp == 2500
        assert k.slices_[sid].trace is False   # recreated untraced: its tracer is gone
        assert k.sched_calls, "the scheduler was set on the new module"
        assert "vgpu.ko reconnected: 2 slice(s) re-created" in caplog.text
        # events flow again, from the new module's group
        mod.event(Event(uapi.VGPU_EVENT_SLICE_EMPTIED, slice_id=sid))
        ev = await next_event(subs, "slice-emptied")
        assert ev["container"] == "c1"
        # the API works on the new module
        r = await call(mgr, "set-quota", container="c1", memory="3GiB")
        assert r["ok"], r
        assert k.slices_[sid].gpus[0].mem_limit == 3 * GiB
        n.cancel_scope.cancel()


async def test_a_reload_between_two_checks_is_seen(tmp_path, fast, caplog, monkeypatch):
    """rmmod and insmod before the daemon looks: the family id differs."""
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(main, "KERNEL_CHECK", 0.5)
    mod = FakeModule()
    d = daemon(tmp_path, mod)
    mgr = d.mgr
    async with trio.open_nursery() as n:
        await n.start(d._kernel_service)
        await call(mgr, "create", container="c1", memory="2GiB")
        mod.unload()
        mod.load()
        await _until(lambda: mgr.kport.kernel is not None and
                     mgr.kport.kernel.family_id == mod.family_id and d.kernel_ready.is_set())
        assert [s.name for s in mod.kernel.slices()] == ["c1"]
        assert "vgpu.ko reconnected: 1 slice(s) re-created" in caplog.text
        # no "not loaded" wait: it was back at once
        assert "waiting for it" not in caplog.text
        n.cancel_scope.cancel()


async def test_a_failed_call_makes_the_service_look_at_once(tmp_path, fast, monkeypatch):
    monkeypatch.setattr(main, "KERNEL_CHECK", 60)
    mod = FakeModule()
    d = daemon(tmp_path, mod)
    mgr = d.mgr
    async with trio.open_nursery() as n:
        await n.start(d._kernel_service)
        await call(mgr, "create", container="c1")
        mod.unload()
        # the ticker's dump gets ENOENT from the old family id
        await mgr.kdump()
        await _until(lambda: mgr.kport.kernel is None, timeout=5)
        n.cancel_scope.cancel()


async def test_started_without_the_module(tmp_path, fast, caplog):
    caplog.set_level(logging.INFO)
    mod = FakeModule(loaded=False)
    d = daemon(tmp_path, mod)
    mgr = d.mgr
    async with trio.open_nursery() as n:
        await n.start(d._kernel_service)          # started: the module is absent
        assert mgr.kport.kernel is None
        r = await call(mgr, "create", container="c1")
        assert r["error"]["code"] == "unavailable"
        await trio.sleep(0.2)
        assert caplog.text.count("vgpu.ko is not loaded; waiting for it") == 1
        mod.load()
        await _until(lambda: d.kernel_ready.is_set())
        assert mod.clients == 1                   # one client, no leak of others
        r = await call(mgr, "create", container="c1")
        assert r["ok"], r
        # a first connection is no "reconnection"
        assert "reconnected" not in caplog.text
        n.cancel_scope.cancel()


async def test_an_api_call_that_connects_first_still_gets_a_reconcile(tmp_path, fast,
                                                                      monkeypatch):
    """The API connects on its own when vgpu.ko is back before the service
    retries: the service must still reconcile that module."""
    monkeypatch.setattr(main, "KERNEL_RETRY_MIN", 30)
    monkeypatch.setattr(main, "KERNEL_RETRY_MAX", 30)
    mod = FakeModule()
    d = daemon(tmp_path, mod)
    mgr = d.mgr
    async with trio.open_nursery() as n:
        await n.start(d._kernel_service)
        await call(mgr, "create", container="c1", memory="2GiB")
        mod.unload()
        await _until(lambda: mgr.kport.kernel is None)
        await trio.sleep(0.1)                      # the service waits out its 30 s back-off
        mod.load()
        r = await call(mgr, "create", container="c2")     # connects
        assert r["ok"], r
        await _until(lambda: d.kernel_ready.is_set() and "c1" in
                     {s.name for s in mod.kernel.slices()}, timeout=5)
        n.cancel_scope.cancel()


async def test_a_broken_event_socket_restarts_the_connection(tmp_path, fast, caplog):
    caplog.set_level(logging.INFO)
    mod = FakeModule()
    d = daemon(tmp_path, mod)
    mgr = d.mgr
    async with trio.open_nursery() as n:
        await n.start(d._kernel_service)
        es = mod.streams[0]

        def broken(timeout=-1.0):
            raise OSError(errno.EBADF, "broken")
        es.get = broken
        es.w.send(b"x")
        await _until(lambda: len(mod.streams) == 2 and d.kernel_ready.is_set())
        assert es.closed and "its event socket failed" in caplog.text
        subs = mgr.subscribe()
        mod.event(Event(uapi.VGPU_EVENT_DEVICE_OPENED, slice_id=1))
        await next_event(subs, "device-opened")
        n.cancel_scope.cancel()
