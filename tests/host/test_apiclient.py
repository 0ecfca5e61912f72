"""vgpu.common.apiclient against the CLI tests' fake API server (fake_vgpud.py)
and against sockets that misbehave on purpose."""
import errno
import json
import socket
import threading
import time

import pytest

from tools.testbed.fake_vgpud import GIB, FakeVgpud
from vgpu.common import apiclient as ac


@pytest.fixture
def fake(tmp_path):
    with FakeVgpud(tmp_path / "vgpud.sock") as f:
        yield f


def test_socket_path_precedence(monkeypatch):
    monkeypatch.delenv("VGPU_SOCKET", raising=False)
    assert ac.socket_path() == "/run/vgpu/vgpud.sock"
    monkeypatch.setenv("VGPU_SOCKET", "/tmp/env.sock")
    assert ac.socket_path() == "/tmp/env.sock"
    assert ac.socket_path("/tmp/arg.sock") == "/tmp/arg.sock"
    assert ac.ApiClient().path == "/tmp/env.sock"


def test_request_framing_and_results(fake):
    with ac.ApiClient(fake.path) as c:
        assert c.request("status")["pid"] == 4242
        res = c.request("create", container="c1", memory=8 * GIB, compute=30, profile=None)
        assert res["slice"]["gpus"][0]["memory_limit"] == 8 * GIB
        assert c.request("show", container="c1")["slice"]["container"] == "c1"
    # one connection, versioned, increasing ids, None arguments left out,
    # no args object for an op without arguments
    assert fake.requests[0] == {"v": 1, "id": 1, "op": "status"}
    assert fake.requests[1] == {"v": 1, "id": 2, "op": "create",
                                "args": {"container": "c1", "memory": 8 * GIB, "compute": 30}}
    assert fake.requests[2]["id"] == 3
    assert len(fake._conns) == 1


def test_error_reply_raises_api_error(fake):
    with ac.ApiClient(fake.path) as c:
        with pytest.raises(ac.ApiError) as ei:
            c.request("show", container="nope")
        assert ei.value.code == "not-found"
        assert '"nope"' in ei.value.message
        # the connection is still usable after an error reply
        assert c.request("gpus")["gpus"][1]["index"] == 1


def test_missing_socket_is_daemon_unavailable(tmp_path):
    path = tmp_path / "none.sock"
    with pytest.raises(ac.DaemonUnavailable) as ei:
        ac.ApiClient(str(path)).request("status")
    assert str(ei.value) == f"vgpud is not running (no socket at {path})"


def test_stale_socket_is_daemon_unavailable(tmp_path):
    path = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()                     # the file stays, nobody listens
    with pytest.raises(ac.DaemonUnavailable, match="nothing listens"):
        ac.ApiClient(str(path)).request("status")


def test_eacces_is_permission_denied(tmp_path, monkeypatch):
    # the tests run as root, which no file mode stops: fake the errno
    class Refusing:
        def settimeout(self, t):
            pass

        def connect(self, addr):
            raise PermissionError(errno.EACCES, "Permission denied")

        def close(self):
            pass
    monkeypatch.setattr(ac, "_new_socket", Refusing)
    with pytest.raises(ac.PermissionDenied) as ei:
        ac.ApiClient(str(tmp_path / "x.sock")).request("status")
    assert "permission denied on" in str(ei.value)
    assert ei.value.code == "permission"


def test_permission_reply_is_permission_denied(fake):
    fake.deny = True
    with pytest.raises(ac.PermissionDenied, match="not root"):
        ac.ApiClient(fake.path).request("status")


def test_reply_timeout(fake):
    fake.silent = True
    c = ac.ApiClient(fake.path, timeout=0.2)
    t = time.monotonic()
    with pytest.raises(ac.ApiTimeout, match="did not answer status within 0.2 s"):
        c.request("status")
    assert time.monotonic() - t < 2


def test_timeout_bounds_the_whole_reply(tmp_path):
    """A daemon that trickles a byte at a time cannot hold us past the timeout."""
    path = str(tmp_path / "trickle.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def trickle():
        c, _ = srv.accept()
        c.recv(1000)
        try:
            for _ in range(100):
                c.sendall(b" ")
                time.sleep(0.05)
        except OSError:
            pass
        c.close()
    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    t = time.monotonic()
    with pytest.raises(ac.ApiTimeout):
        ac.ApiClient(path, timeout=0.3).request("status")
    assert time.monotonic() - t < 1.5
    srv.close()


def test_connect_timeout(tmp_path):
    """A listener whose backlog is full (a hung daemon) times the connect out."""
    path = str(tmp_path / "full.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(0)
    fillers = []
    try:
        for _ in range(4):              # fill the backlog without blocking
            f = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            f.setblocking(False)
            try:
                f.connect(path)
            except (BlockingIOError, OSError):
                f.close()
                break
            fillers.append(f)
        t = time.monotonic()
        with pytest.raises(ac.ApiTimeout, match="did not accept a connection"):
            ac.ApiClient(path, timeout=0.2).request("status")
        assert time.monotonic() - t < 2
    finally:
        for f in fillers:
            f.close()
        srv.close()


def test_hangup_without_reply(tmp_path):
    path = str(tmp_path / "hup.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def hup():
        c, _ = srv.accept()
        c.recv(1000)
        c.close()
    threading.Thread(target=hup, daemon=True).start()
    with pytest.raises(ac.ConnectionLost, match="without answering status"):
        ac.ApiClient(path).request("status")
    srv.close()


@pytest.mark.parametrize("reply, match", [
    (b"not json\n", "not JSON"),
    (b"[1]\n", "not an object"),
    (b'{"v": 1, "id": 99, "ok": true, "result": {}}\n', "does not match"),
    (b'{"v": 1, "id": 1}\n', "without \\\"ok\\\""),
])
def test_protocol_errors(tmp_path, reply, match):
    path = str(tmp_path / "bad.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def answer():
        c, _ = srv.accept()
        c.recv(1000)
        c.sendall(reply)
        time.sleep(0.2)
        c.close()
    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(ac.ProtocolError, match=match):
        ac.ApiClient(path).request("status")
    srv.close()


def test_too_large_request_is_refused_locally(fake):
    with pytest.raises(ac.ApiError) as ei:
        ac.ApiClient(fake.path).request("create", container="x" * 70000)
    assert ei.value.code == "too-large"
    assert fake.requests == []


def test_events_stream(fake):
    fake.events = [{"type": "slice-created", "container": "c1", "time": 1.0},
                   {"type": "alloc-refused", "container": "c1", "time": 2.0, "gpu": 0}]
    c = ac.ApiClient(fake.path)
    got = list(c.events())
    assert got == fake.events
    assert fake.requests == [{"v": 1, "id": 1, "op": "events"}]


def test_events_wait_timeout(fake):
    fake.hold_events = True
    c = ac.ApiClient(fake.path)
    with pytest.raises(ac.ApiTimeout, match="no event"):
        next(c.events(timeout=0.2))


def test_events_permission(fake):
    fake.deny = True
    with pytest.raises(ac.PermissionDenied):
        next(ac.ApiClient(fake.path).events())


def test_request_reconnects_after_lost_connection(fake):
    c = ac.ApiClient(fake.path)
    c.request("status")
    for s in list(fake._conns):          # the daemon restarts
        s.shutdown(socket.SHUT_RDWR)
    with pytest.raises(ac.ClientError):
        c.request("status")
    assert c.request("status")["pid"] == 4242


def test_uses_only_the_standard_library():
    import ast
    import sys
    tree = ast.parse(open(ac.__file__).read())
    mods = {n.module if isinstance(n, ast.ImportFrom) else a.name
            for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [None])}
    mods.discard("__future__")
    mods.discard("vgpu.common")            # fastjson: the json package's C half only
    assert all(m.split(".")[0] in sys.stdlib_module_names for m in mods), mods
    json.dumps(sorted(mods))


# ------------------------------------------------------------ trace
def _with_slice(fake, name="c1"):
    ac.ApiClient(fake.path).request("create", container=name)


def test_trace_stream(fake):
    from tools.testbed.fake_vgpud import make_trace_record
    _with_slice(fake)
    fake.trace_records = [make_trace_record(1, "open"), make_trace_record(2)]
    fake.trace_end = {"end": True, "reason": "slice deleted"}
    header, records = ac.ApiClient(fake.path).trace("c1")
    assert header["trace"] == 1 and header["container"] == "c1"
    with records:
        got = list(records)
    assert got == [*fake.trace_records, {"end": True, "reason": "slice deleted"}]
    assert records.end == {"end": True, "reason": "slice deleted"}
    assert records.read() is None                       # over: nothing more
    assert fake.requests[-1] == {"v": 1, "id": 1, "op": "trace", "args": {"container": "c1"}}


def test_trace_errors(fake):
    from tools.testbed.fake_vgpud import make_trace_record
    with pytest.raises(ac.ApiError) as ei:
        ac.ApiClient(fake.path).trace("ghost")
    assert ei.value.code == "not-found"
    _with_slice(fake)
    fake.trace_records = [make_trace_record(1)]
    _, records = ac.ApiClient(fake.path).trace("c1")
    assert records.read()["seq"] == 1
    with pytest.raises(ac.ConnectionLost, match="closed the trace stream"):
        records.read()                                   # no end line: vgpud went away
    fake.hold_trace = True
    _, records = ac.ApiClient(fake.path).trace("c1", timeout=0.2)
    with records:
        assert records.read()["seq"] == 1
        with pytest.raises(ac.ApiTimeout):
            records.read()
    assert fake.trace_closed.wait(5)                     # closing it hangs up
