"""vgpud's API server (vgpu.daemon.api.Server) on a real Unix socket,
served in-process: hostile and parallel clients, the line limit, timeouts,
stop and drain (a request in flight ends within the deadline, or is
cancelled), accept(2) out of descriptors, peer credentials, a stale socket
replaced and a live one refused.
"""

from __future__ import annotations

import errno
import json
import os
import socket

import pytest
import trio

from vgpu.daemon import api
from vgpu.daemon.ops import Ops

from daemon_support import connect, readline, rpc, until


async def test_socket_hostile_and_parallel(env):
    mgr, _, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"), read_timeout=0.5, idle_timeout=3.0)
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        assert oct(os.stat(srv.path).st_mode & 0o777) == "0o660"
        # 100 parallel idle connections and 30 half-open requests
        idle = [await connect(srv.path) for _ in range(100)]
        half = []
        for _ in range(30):
            s = await connect(srv.path)
            await s.send_all(b'{"v": 1, "op": "sta')
            half.append(s)
        good = await connect(srv.path)
        r = await rpc(good, {"v": 1, "id": 1, "op": "status"})
        assert r["ok"] and r["id"] == 1
        # several requests on one connection, answered in order
        await good.send_all(b'{"v":1,"id":"a","op":"list"}\n\n{"v":1,"id":"b","op":"gpus"}\n')
        got = b""
        with trio.fail_after(5):
            while got.count(b"\n") < 2:
                got += await good.receive_some(65536)
        assert [json.loads(x)["id"] for x in got.splitlines()] == ["a", "b"]
        # a huge line: too-large, then closed
        big = await connect(srv.path)
        await big.send_all(b"x" * (api.MAX_LINE + 10))
        r = json.loads(await readline(big))
        assert r["error"]["code"] == "too-large"
        assert await readline(big) == b""
        # the half-open ones time out with an error; the server still serves
        for s in half[:3]:
            r = json.loads(await readline(s))
            assert r["error"]["code"] == "bad-request" and "within" in r["error"]["message"]
        r = await rpc(good, {"v": 1, "id": 2, "op": "create", "args": {"container": "z"}})
        assert r["ok"], r
        # events stream
        ev = await connect(srv.path)
        assert (await rpc(ev, {"v": 1, "id": 9, "op": "events"}))["ok"]
        await rpc(good, {"v": 1, "id": 3, "op": "delete", "args": {"container": "z"}})
        e = json.loads(await readline(ev))
        assert e["event"]["type"] == "slice-deleted" and e["event"]["container"] == "z"
        await ev.aclose()
        for s in idle + half + [good, big]:
            await s.aclose()
        srv.stop()
        await srv.drain(1)
    assert not os.path.exists(srv.path)


async def test_socket_idle_timeout_and_drain(env):
    mgr, _, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"), idle_timeout=0.3)
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        s = await connect(srv.path)
        assert await readline(s) == b""              # closed after 0.3 s of silence
        s2 = await connect(srv.path)
        srv.stop()
        await srv.drain(1)
        with pytest.raises(OSError):
            socket.socket(socket.AF_UNIX).connect(srv.path)
        await s2.aclose()


class _SlowHandler:
    """``status`` takes ``delay`` seconds, or with no delay runs until the
    test sets ``release`` (and notes whether it was cancelled or returned);
    ``list`` is quick; ``events`` never sends anything."""

    def __init__(self, delay: float | None = None):
        self.delay = delay
        self.entered = trio.Event()
        self.release = trio.Event()
        self.cancelled = False
        self.returned = False
        self.subscribers = []

    async def run(self, op, args):
        return await {"status": self.status, "list": self.list}[op](args)

    async def status(self, args):
        self.entered.set()
        try:
            if self.delay is None:
                await self.release.wait()
            else:
                await trio.sleep(self.delay)
        except trio.Cancelled:
            self.cancelled = True
            raise
        self.returned = True
        return {"slow": True}

    async def list(self, args):
        return {"slices": []}

    def subscribe(self, n):
        send, recv = trio.open_memory_channel(n)
        self.subscribers.append(send)
        return recv


async def test_stop_lets_an_inflight_request_finish_within_the_deadline(tmp_path):
    """On stop: idle connections and streams end and new clients are refused
    at once; a request in flight is answered (it ends within the deadline),
    and the request queued behind it on its connection is not."""
    h = _SlowHandler()                   # status runs until h.release: no race with load
    srv = api.Server(h, str(tmp_path / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        idle = await connect(srv.path)
        ev = await connect(srv.path)
        assert (await rpc(ev, {"v": 1, "id": 0, "op": "events"}))["ok"]
        a = await connect(srv.path)
        await a.send_all(b'{"v":1,"id":1,"op":"status"}\n{"v":1,"id":2,"op":"list"}\n')
        with trio.fail_after(5):
            await h.entered.wait()
        t0 = trio.current_time()
        n.start_soon(srv.drain, 30.0)
        assert await readline(idle) == b""
        assert await readline(ev) == b""
        await until(lambda: not os.path.exists(srv.path))
        with pytest.raises(OSError):
            await trio.open_unix_socket(srv.path)
        assert not h.returned and not h.cancelled         # all that while status runs
        await trio.sleep(0.2)
        assert not h.returned and not h.cancelled         # drain waits for it
        h.release.set()
        r = json.loads(await readline(a))
        assert r == {"v": 1, "id": 1, "ok": True, "result": {"slow": True}}
        assert await readline(a) == b""                   # id 2 not served: closed
        for s in (idle, ev, a):
            await s.aclose()
    assert not h.cancelled and h.returned
    assert trio.current_time() - t0 < 20                  # the request's time, not the grace (30 s)


async def test_stop_cancels_a_request_that_overruns_the_deadline(tmp_path):
    h = _SlowHandler(60)
    srv = api.Server(h, str(tmp_path / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        a = await connect(srv.path)
        await a.send_all(b'{"v":1,"id":1,"op":"status"}\n')
        with trio.fail_after(5):
            await h.entered.wait()
        t0 = trio.current_time()
        await srv.drain(0.5)
        took = trio.current_time() - t0
        assert h.cancelled
        assert await readline(a) == b""                   # no reply: cancelled, closed
        await a.aclose()
    # the deadline, then the cancel: not the request's 60 s (a loaded
    # machine may add seconds; a wait for the request would add a minute)
    assert 0.45 < took < 30, took
    assert trio.current_time() - t0 < 30                  # run() had returned
    assert not os.path.exists(srv.path)


async def test_accept_out_of_fds_backs_off_and_recovers(env, caplog):
    """accept(2) failing with EMFILE (the process is out of descriptors) is
    logged and retried after a pause; the client waiting in the backlog is
    served once descriptors are free, and the server never stopped."""
    import resource
    mgr, _, tmp = env
    srv = api.Server(Ops(mgr), str(tmp / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        c = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)    # its fd is taken first
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.open(os.devnull, os.O_RDONLY)
        os.close(lowest_free)

        def emfiles():
            return [r for r in caplog.records
                    if r.name == "trio.serve_listeners" and r.exc_info
                    and isinstance(r.exc_info[1], OSError) and r.exc_info[1].errno == errno.EMFILE]
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        try:
            await c.connect(srv.path)                      # queued; accept(2) fails: EMFILE
            await until(lambda: len(emfiles()) >= 3, timeout=5)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        t = emfiles()
        assert t[2].created - t[0].created >= 0.15         # paused between tries, no spin
        s = trio.SocketStream(c)
        assert (await rpc(s, {"v": 1, "id": 1, "op": "status"}))["ok"]
        s2 = await connect(srv.path)
        assert (await rpc(s2, {"v": 1, "id": 2, "op": "list"}))["ok"]
        for x in (s, s2):
            await x.aclose()
        await srv.drain(1)


def test_peer_allowed():
    assert api.peer_allowed(0, 0, 1, None)
    assert not api.peer_allowed(1000, 1000, 1, None)
    assert api.peer_allowed(1000, 4242, 1, 4242)
    assert not api.peer_allowed(1000, 1000, os.getpid(), 4242)


def test_stale_socket_replaced_and_live_one_refused(tmp_path):
    p = str(tmp_path / "s.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)                                            # bound, not listening: stale
    s.close()
    srv = api.Server(None, p)
    srv._listen().close()
    live = socket.socket(socket.AF_UNIX)
    os.unlink(p)
    live.bind(p)
    live.listen(1)
    with pytest.raises(RuntimeError, match="another vgpud"):
        api.Server(None, p)._listen()
    live.close()
