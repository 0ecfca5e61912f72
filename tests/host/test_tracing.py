"""vgpud's tracing (docs/api.md, trace): the op's validation, the stream on
a real socket (header, the slice's records and no other's), the reference
count that turns a slice's tracing on and off, the end when the slice is
deleted, refusals, records dropped for a full channel only, a client that
stops reading, and the first reconcile's sweep of tracing a dead vgpud left
on.  Against daemon_support's FakeKernel (``env``).
"""

from __future__ import annotations

import json
import socket

import pytest
import trio

from vgpu.daemon import api
from vgpu.daemon import slices
from vgpu.abi import uapi
from vgpu.daemon.ops import Ops
from vgpu.daemon.api import ApiError, handle_line, parse_request
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import FakeInventory, GiB, call, connect, rpc, until


def _rec(sid, seq, op=uapi.VGPU_TRACE_IOCTL, **kw):
    from vgpu.vgpuko.messages import TraceRecord
    if op == uapi.VGPU_TRACE_IOCTL:
        kw = {"node": uapi.VGPU_MINOR_CTL, "nr": 0x2B, "size": 48, "item_kind": uapi.VGPU_AUDIT_CLASS,
              "item": 0x41, "verdict": uapi.VGPU_AUDIT_FORWARD, "args_in": bytes(48),
              "args_out": bytes(48), **kw}
    return TraceRecord(slice_id=sid, seq=seq, op=op, file=1, pid=77, tid=77, **kw)


class Lines:
    """A client's view of a stream connection: one JSON line at a time."""

    def __init__(self, stream):
        self.stream = stream
        self.buf = b""

    @classmethod
    async def open(cls, path, doc) -> "Lines":
        s = cls(await trio.open_unix_socket(path))
        await s.stream.send_all(json.dumps(doc).encode() + b"\n")
        return s

    async def get(self, timeout=10):
        with trio.fail_after(timeout):
            while b"\n" not in self.buf:
                d = await self.stream.receive_some(65536)
                if not d:
                    return None
                self.buf += d
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    async def aclose(self):
        await self.stream.aclose()


@pytest.mark.parametrize("line,words", [
    (b'{"v": 1, "op": "trace"}', "args.container: missing (required by trace)"),
    (b'{"v": 1, "op": "trace", "args": {"container": "a/b"}}', 'args.container: "a/b"'),
    (b'{"v": 1, "op": "trace", "args": {"container": "c", "count": 3}}',
     "args.count: unknown argument of trace (known: container)"),
])
def test_trace_op_validates_and_quotes(line, words):
    with pytest.raises(ApiError) as ei:
        parse_request(line)
    assert ei.value.code == "bad-request" and words in ei.value.message, ei.value.message
    r = parse_request(b'{"v": 1, "op": "trace", "args": {"container": "c1"}}')
    assert (r.op, r.args) == ("trace", {"container": "c1"})


async def test_trace_needs_a_stream_connection(env):
    mgr, _, _ = env
    r = json.loads(await handle_line(Ops(mgr), b'{"v": 1, "id": 4, "op": "trace", '
                                          b'"args": {"container": "c1"}}'))
    assert r["error"] == {"code": "bad-request", "message": "trace needs a stream connection"}


async def test_trace_stream_header_records_and_refcount(env):
    """Two tracers of one slice: the first turns its tracing on, both get
    its records (and no other slice's), and only the last to leave turns it
    off."""
    import re
    mgr, k, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        sid = (await call(mgr, "create", container="c1", memory="1GiB"))["result"]["slice"]["slice_id"]
        other = (await call(mgr, "create", container="c2"))["result"]["slice"]["slice_id"]
        a = await Lines.open(srv.path, {"v": 1, "id": 7, "op": "trace",
                                        "args": {"container": "c1"}})
        r = await a.get()
        assert r["ok"] and r["id"] == 7, r
        h = r["result"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", h.pop("started"))
        assert h == {"trace": 1, "container": "c1", "slice_id": sid, "release": "595.45.04",
                     "gpus": [{"index": 0, "memory_limit": GiB}], "host": socket.gethostname(),
                     "vgpu_version": slices.package_version()}
        assert k.slices_[sid].trace is True and k.trace_calls == [(sid, "set", True)]
        # the socket was joined before tracing was turned on
        assert len(k.streams) == 1
        k.trace(_rec(sid, 1, uapi.VGPU_TRACE_OPEN, node=uapi.VGPU_MINOR_CTL, open_flags=2),
                _rec(other, 1), _rec(sid, 2))
        got = [await a.get(), await a.get()]
        from vgpu.abi.trace import record_json
        assert got == [{"record": record_json(_rec(sid, 1, uapi.VGPU_TRACE_OPEN,
                                                   node=uapi.VGPU_MINOR_CTL, open_flags=2))},
                       {"record": record_json(_rec(sid, 2))}]
        assert got[1]["record"]["item"] == {"kind": "class", "number": 0x41,
                                            "name": "NV01_ROOT_CLIENT"}
        # a second tracer: no second SLICE_SET, and it sees what comes from now on
        b = await Lines.open(srv.path, {"v": 1, "id": 8, "op": "trace",
                                        "args": {"container": "c1"}})
        assert (await b.get())["ok"]
        assert k.trace_calls == [(sid, "set", True)] and mgr.tracing.slices[sid].count == 2
        k.trace(_rec(sid, 3))
        assert (await a.get())["record"]["seq"] == 3
        assert (await b.get())["record"]["seq"] == 3
        # the first leaves: still traced
        await a.aclose()
        await until(lambda: mgr.tracing.slices[sid].count == 1)
        assert k.slices_[sid].trace is True and k.trace_calls == [(sid, "set", True)]
        k.trace(_rec(sid, 4))
        assert (await b.get())["record"]["seq"] == 4
        # the last one says anything: its trace ends and tracing is off
        await b.stream.send_all(b"bye\n")
        assert await b.get() is None
        await until(lambda: sid not in mgr.tracing.slices)
        assert k.slices_[sid].trace is False
        assert k.trace_calls == [(sid, "set", True), (sid, "set", False)]
        assert all(ts.closed for ts in k.streams)
        # the connection served nothing else meanwhile: the server still answers
        c = await connect(srv.path)
        assert (await rpc(c, {"v": 1, "id": 1, "op": "status"}))["ok"]
        await c.aclose()
        await b.aclose()
        srv.stop()
        await srv.drain(1)


async def test_trace_ends_when_the_slice_is_deleted(env):
    mgr, k, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
        a = await Lines.open(srv.path, {"v": 1, "id": 1, "op": "trace",
                                        "args": {"container": "c1"}})
        assert (await a.get())["ok"]
        k.trace(_rec(sid, 1), _rec(sid, 2, uapi.VGPU_TRACE_CLOSE))
        assert (await a.get())["record"]["seq"] == 1
        assert (await call(mgr, "delete", container="c1"))["ok"]
        assert (await a.get())["record"]["op"] == "close"
        assert await a.get() == {"end": True, "reason": "slice deleted"}
        assert await a.get() is None
        # turning off a slice that went with its tracing (ENOENT) is no error
        await until(lambda: not mgr.tracing.slices)
        assert k.trace_calls[-1] == (sid, "set", False)
        await a.aclose()
        srv.stop()
        await srv.drain(1)


async def test_trace_refusals(env, tmp_path):
    mgr, k, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        a = await Lines.open(srv.path, {"v": 1, "id": 3, "op": "trace",
                                        "args": {"container": "ghost"}})
        r = await a.get()
        assert r["id"] == 3 and r["error"] == {"code": "not-found",
                                               "message": 'no slice for container "ghost"'}
        await a.aclose()
        assert not k.streams                             # nothing asked of the kernel
        # a vgpu.ko older than tracing: no "trace" group
        await call(mgr, "create", container="c1")
        k.has_trace = False
        a = await Lines.open(srv.path, {"v": 1, "id": 4, "op": "trace",
                                        "args": {"container": "c1"}})
        r = (await a.get())["error"]
        assert r["code"] == "kernel" and "vgpu.ko has no tracing" in r["message"]
        await a.aclose()
        # the slice is not in vgpu.ko now: not-found, and the socket it joined is closed
        k.has_trace = True
        del k.slices_[mgr.records["c1"].slice_id]
        a = await Lines.open(srv.path, {"v": 1, "id": 5, "op": "trace",
                                        "args": {"container": "c1"}})
        r = (await a.get())["error"]
        assert r["code"] == "not-found" and "is not in vgpu.ko now" in r["message"]
        assert k.streams[-1].closed and not mgr.tracing.slices
        await a.aclose()
        srv.stop()
        await srv.drain(1)
    # vgpu.ko not loaded: the error every op gives
    from vgpu.vgpuko.netlink import VgpuNotLoaded

    def absent():
        raise VgpuNotLoaded()
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=absent), StateStore(tmp_path / "s2"),
                      FakeInventory())
    m2.records = {"c1": mgr.records["c1"].changed()}
    async with trio.open_nursery() as n:
        with pytest.raises(ApiError) as ei:
            await n.start(Ops(m2).trace, {"container": "c1"}, trio.open_memory_channel(1)[0])
    assert ei.value.code == "unavailable" and ei.value.message == "vgpu.ko is not loaded"


async def test_trace_drops_for_a_full_channel_only(env):
    """A tracer whose channel is full loses records (counted; its file shows
    the gaps), and gets the next ones once it has room again."""
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
    send, recv = trio.open_memory_channel(2)
    async with trio.open_nursery() as n:
        await n.start(Ops(mgr).trace, {"container": "c1"}, send)
        k.trace(*[_rec(sid, i) for i in range(1, 6)])
        await until(lambda: recv.statistics().current_buffer_used == 2)
        await trio.sleep(0.05)
        assert [recv.receive_nowait()["record"]["seq"] for _ in range(2)] == [1, 2]
        k.trace(_rec(sid, 6))
        assert (await recv.receive())["record"]["seq"] == 6
        n.cancel_scope.cancel()
    assert not mgr.tracing.slices and k.slices_[sid].trace is False


async def test_a_trace_client_that_stops_reading_is_dropped(env):
    mgr, k, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"), idle_timeout=0.5)
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
        a = await Lines.open(srv.path, {"v": 1, "id": 1, "op": "trace",
                                        "args": {"container": "c1"}})
        assert (await a.get())["ok"]
        big = bytes(16384)
        for i in range(1, 400):                      # ~13 MB of hex: more than any socket holds
            k.trace(_rec(sid, i, args_in=big, args_out=big, size=16384))
            if i % 50 == 0:
                await trio.sleep(0)
        # never read: after idle_timeout the connection (and its tracing) ends,
        # and the server lives on.  The tracer is gone from mgr.tracing before
        # the kernel call that turns tracing off returns (it runs in a
        # thread): wait for both, as a loaded machine shows the gap.
        await until(lambda: not mgr.tracing.slices and k.slices_[sid].trace is False)
        c = await connect(srv.path)
        assert (await rpc(c, {"v": 1, "id": 2, "op": "status"}))["ok"]
        await c.aclose()
        await a.aclose()
        srv.stop()
        await srv.drain(1)


async def test_reconcile_at_start_turns_off_orphaned_tracing(env):
    """A vgpud that died mid-trace left tracing on: the first reconcile
    after vgpu.ko appears turns it off; later ones leave tracing alone, and
    a slice recreated while traced is recreated traced."""
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
    k.slice_new(900, [(1, GiB)], name="stranger", trace=True)
    k.slices_[sid].trace = True
    k.trace_calls.clear()
    await mgr.reconcile()
    assert k.trace_calls == [] and k.slices_[900].trace is True
    await mgr.reconcile(startup=True)
    assert sorted(k.trace_calls) == [(sid, "set", False), (900, "set", False)]
    assert not k.slices_[sid].trace and not k.slices_[900].trace
    # a traced slice lost by the kernel comes back traced, and the startup
    # sweep leaves a slice that has a tracer alone
    send, recv = trio.open_memory_channel(8)
    async with trio.open_nursery() as n:
        await n.start(Ops(mgr).trace, {"container": "c1"}, send)
        del k.slices_[sid]
        k.trace_calls.clear()
        await mgr.reconcile(startup=True)
        assert k.trace_calls == [(sid, "new", True)] and k.slices_[sid].trace is True
        n.cancel_scope.cancel()
    assert k.slices_[sid].trace is False
