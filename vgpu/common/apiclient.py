"""A blocking client of vgpud's admin API (docs/api.md, version 1).

Used by vgpuctl and the OCI hook.  Standard library only (_socket, _json through vgpu.common.fastjson, os, time),
and cheap to import: both tools import it on every start.

    with ApiClient() as c:                       # $VGPU_SOCKET or the default
        slice_ = c.request("set-quota", container="c1", memory="8GiB")["slice"]
        record = c.request("audit", container="c1")     # {"audit", "entries": [...], ...}
        for ev in ApiClient().events():          # a second connection
            ...
        header, records = ApiClient().trace("c1")    # a connection of its own
        with records:
            for rec in records:                  # docs/trace.md's record objects,
                ...                              # then maybe {"end": true, "reason"}

Errors, all subclasses of ``ClientError``:

- ``DaemonUnavailable``: no socket, or nothing listening on it;
- ``PermissionDenied``: the socket refuses us (EACCES/EPERM), or the daemon
  answered with a ``permission`` error (it is also an ``ApiError``);
- ``ApiError(code, message)``: any other error reply;
- ``ApiTimeout``: connect, send or a reply took longer than ``timeout``;
- ``ConnectionLost`` / ``ProtocolError``: the daemon hung up mid-request, or
  sent something that is not a reply of this protocol.
"""

from __future__ import annotations

import errno
import os
from time import monotonic, sleep

from vgpu.common import fastjson

try:                    # the C module: socket.py (selectors, enum, array) costs
    import _socket      # ~3 ms on every vgpuctl start and adds nothing we use
except ImportError:     # pragma: no cover
    import socket as _socket

__all__ = [
    "DEFAULT_SOCKET", "VERSION", "MAX_LINE", "socket_path", "ApiClient", "TraceRecords",
    "ClientError", "DaemonUnavailable", "PermissionDenied", "ApiError",
    "ApiTimeout", "ConnectionLost", "ProtocolError",
]

DEFAULT_SOCKET = "/run/vgpu/vgpud.sock"
VERSION = 1
MAX_LINE = 65536            # the daemon's limit on a request line
MAX_REPLY = 64 << 20        # we refuse a reply line longer than this


class ClientError(Exception):
    """Base of everything this module raises."""


class DaemonUnavailable(ClientError):
    pass


class ApiTimeout(ClientError):
    pass


class ConnectionLost(ClientError):
    pass


class ProtocolError(ClientError):
    pass


class ApiError(ClientError):
    """An error reply: ``code`` (docs/api.md's list), ``message``, and the
    whole ``error`` object as ``detail``."""

    def __init__(self, code: str, message: str, detail: dict | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.detail = detail or {"code": code, "message": message}


class PermissionDenied(ApiError):
    def __init__(self, message: str, detail: dict | None = None):
        super().__init__("permission", message, detail)


def socket_path(explicit: str | None = None) -> str:
    """The API socket: ``explicit`` (``--socket``), else ``$VGPU_SOCKET``,
    else ``/run/vgpu/vgpud.sock``."""
    return explicit or os.environ.get("VGPU_SOCKET") or DEFAULT_SOCKET


def _error_from(err: object) -> ApiError:
    if not isinstance(err, dict):
        return ApiError("internal", f"malformed error reply: {err!r:.200}")
    code = str(err.get("code", "internal"))
    message = str(err.get("message", ""))
    if code == "permission":
        return PermissionDenied(message, err)
    return ApiError(code, message, err)


def _new_socket():
    return _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)


class _Conn:
    """One connection: newline framing with a deadline per reply."""

    def __init__(self, path: str, timeout: float | None):
        self.path = path
        self.timeout = timeout
        self.buf = bytearray()
        deadline = None if timeout is None else monotonic() + timeout
        pause = 0.005
        while True:
            self.sock = _new_socket()
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(path)
                return
            except BlockingIOError:
                # EAGAIN: the listener's backlog is full (a busy or hung
                # daemon).  A Unix socket with a timeout does not wait for
                # room, so we retry until the deadline.
                self.sock.close()
                if deadline is not None and monotonic() + pause > deadline:
                    raise ApiTimeout(f"vgpud did not accept a connection on {path} within "
                                     f"{timeout:g} s (its backlog is full)") from None
                sleep(pause)
                pause = min(pause * 2, 0.1)
            except BaseException as e:
                self.sock.close()
                raise self._connect_error(e) from None

    def _connect_error(self, e: BaseException) -> BaseException:
        if isinstance(e, FileNotFoundError):
            return DaemonUnavailable(f"vgpud is not running (no socket at {self.path})")
        if isinstance(e, ConnectionRefusedError):
            return DaemonUnavailable(
                f"vgpud is not running (nothing listens on {self.path})")
        if isinstance(e, PermissionError):
            return PermissionDenied(
                f"permission denied on {self.path} (run as root or as a member of "
                f"the group set as api.group in vgpud's config)")
        if isinstance(e, TimeoutError):
            return ApiTimeout(f"vgpud did not accept a connection on {self.path} "
                              f"within {self.timeout:g} s")
        if isinstance(e, NotADirectoryError) or (
                isinstance(e, OSError) and e.errno in (errno.ENOTSOCK, errno.ENOTDIR)):
            return DaemonUnavailable(f"vgpud is not running ({self.path} is not a socket)")
        if isinstance(e, OSError):
            return ClientError(f"cannot connect to {self.path}: {e.strerror or e}")
        return e

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise ApiTimeout(f"vgpud did not take the request within {self.timeout:g} s") from None
        except (BrokenPipeError, ConnectionResetError):
            # The daemon may have said why before it hung up (a permission
            # error is sent straight after accept): read it if it is there.
            try:
                line = self.readline(deadline=None, nowait=True)
            except ClientError:
                line = None
            if line:
                reply = _decode(line)
                if reply.get("ok") is False:
                    raise _error_from(reply.get("error")) from None
            raise ConnectionLost("vgpud closed the connection before taking the request") from None

    def readline(self, deadline: float | None, nowait: bool = False) -> bytes | None:
        """The next line (without its newline), or None at EOF.  With a
        ``deadline`` (time.monotonic() seconds) the whole line must arrive
        by then; each read is bounded by it."""
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return line
            if len(self.buf) > MAX_REPLY:
                raise ProtocolError(f"reply line longer than {MAX_REPLY} bytes")
            if nowait:
                self.sock.settimeout(0.0)
            elif deadline is not None:
                left = deadline - monotonic()
                if left <= 0:
                    raise TimeoutError()
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                data = b""
            except ConnectionResetError:
                data = b""
            finally:
                self.sock.settimeout(self.timeout)
            if not data:
                if self.buf:
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line
                return None
            self.buf += data


def _decode(line: bytes) -> dict:
    try:
        doc = fastjson.loads(line)
    except ValueError:
        raise ProtocolError(f"vgpud sent something that is not JSON: {line[:120]!r}") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"vgpud sent a reply that is not an object: {line[:120]!r}")
    return doc


class TraceRecords:
    """The records of a ``trace`` stream (``ApiClient.trace``), read one by
    one; ``close()`` (or leaving a ``with`` block) ends the trace.

    Each item is a record object (docs/trace.md); when vgpud ends the
    trace (the slice was deleted), the last item is its end marker
    ``{"end": true, "reason": ...}``, also kept as ``end``.  A stream that
    stops without one raises ConnectionLost (vgpud went away)."""

    def __init__(self, conn: "_Conn", timeout: float | None = None):
        self._conn: _Conn | None = conn
        self.timeout = timeout
        self.end: dict | None = None

    def __enter__(self) -> "TraceRecords":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        item = self.read()
        if item is None:
            raise StopIteration
        return item

    def read(self, deadline: float | None = None) -> dict | None:
        """The next record (or the end marker), None once the stream is
        over.  ``deadline`` (time.monotonic() seconds) bounds the wait,
        else the stream's ``timeout`` per record; past it: ApiTimeout."""
        if self._conn is None or self.end is not None:
            return None
        if deadline is None and self.timeout is not None:
            deadline = monotonic() + self.timeout
        try:
            line = self._conn.readline(deadline)
        except TimeoutError:
            raise ApiTimeout("no trace record from vgpud in time") from None
        except OSError as e:
            raise ConnectionLost(f"reading from vgpud: {e.strerror or e}") from None
        if line is None:
            self.close()
            raise ConnectionLost("vgpud closed the trace stream")
        doc = _decode(line)
        if isinstance(doc.get("record"), dict):
            return doc["record"]
        if doc.get("end") is True:
            self.end = doc
            self.close()
            return doc
        if doc.get("ok") is False:
            raise _error_from(doc.get("error"))
        raise ProtocolError(f"unexpected line in the trace stream: {line[:120]!r}")


class ApiClient:
    """A client of vgpud's API.  ``request`` reuses one connection (opened
    on first use, reopened after an error); ``events`` opens its own.

    ``timeout`` (seconds, None for none) bounds the connect, the send, and
    the wait for each reply; the event stream waits for events without
    limit (``events(timeout=...)`` to bound that too)."""

    def __init__(self, path: str | None = None, timeout: float | None = 5.0):
        self.path = socket_path(path)
        self.timeout = timeout
        self._conn: _Conn | None = None
        self._next_id = 1

    # -- context manager
    def __enter__(self) -> "ApiClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _encode(self, op: str, args: dict) -> tuple[int, bytes]:
        rid = self._next_id
        self._next_id += 1
        req = {"v": VERSION, "id": rid, "op": op}
        if args:
            req["args"] = args
        data = (fastjson.dumps(req, ensure_ascii=False) + "\n").encode()
        if len(data) > MAX_LINE:
            raise ApiError("too-large", f"request of {len(data)} bytes exceeds {MAX_LINE}")
        return rid, data

    def _roundtrip(self, conn: _Conn, op: str, args: dict) -> dict:
        rid, data = self._encode(op, args)
        conn.send(data)
        deadline = None if self.timeout is None else monotonic() + self.timeout
        try:
            line = conn.readline(deadline)
        except TimeoutError:
            raise ApiTimeout(f"vgpud did not answer {op} within {self.timeout:g} s") from None
        except OSError as e:
            raise ConnectionLost(f"reading from vgpud: {e.strerror or e}") from None
        if line is None:
            raise ConnectionLost(f"vgpud closed the connection without answering {op}")
        reply = _decode(line)
        if reply.get("id") not in (rid, None):
            raise ProtocolError(f"reply id {reply.get('id')!r} does not match request id {rid}")
        if reply.get("ok") is True:
            result = reply.get("result", {})
            if not isinstance(result, dict):
                raise ProtocolError(f"result of {op} is not an object")
            return result
        if reply.get("ok") is False:
            raise _error_from(reply.get("error"))
        raise ProtocolError(f"vgpud sent a reply without \"ok\": {line[:120]!r}")

    def request(self, op: str, **args) -> dict:
        """Send one request and return its ``result`` object; raises the
        module's errors.  Arguments whose value is None are left out."""
        args = {k: v for k, v in args.items() if v is not None}
        if self._conn is None:
            self._conn = _Conn(self.path, self.timeout)
        try:
            return self._roundtrip(self._conn, op, args)
        except ApiError as e:
            if e.code in ("too-large", "permission", "bad-request"):
                self.close()        # the daemon may have closed it
            raise
        except BaseException:
            self.close()
            raise

    def events(self, timeout: float | None = None):
        """A generator of event objects (the ``event`` of each stream line)
        on a connection of its own; it ends when vgpud closes the stream.
        ``timeout`` bounds the wait for each event (``ApiTimeout``)."""
        conn = _Conn(self.path, self.timeout)
        try:
            self._roundtrip(conn, "events", {})
            while True:
                deadline = None if timeout is None else monotonic() + timeout
                try:
                    line = conn.readline(deadline)
                except TimeoutError:
                    raise ApiTimeout(f"no event from vgpud within {timeout:g} s") from None
                except OSError as e:
                    raise ConnectionLost(f"reading from vgpud: {e.strerror or e}") from None
                if line is None:
                    return
                if not line.strip():
                    continue
                doc = _decode(line)
                if "event" in doc:
                    yield doc["event"]
                elif doc.get("ok") is False:
                    raise _error_from(doc.get("error"))
                else:
                    raise ProtocolError(f"unexpected line in the event stream: {line[:120]!r}")
        finally:
            conn.close()

    def trace(self, container: str, timeout: float | None = None) -> tuple[dict, TraceRecords]:
        """Trace a container's slice on a connection of its own ->
        (the trace file's header object, TraceRecords).  vgpud traces the
        slice until the records are closed.  ``timeout`` bounds the wait for
        each record (ApiTimeout); the header comes within the client's."""
        conn = _Conn(self.path, self.timeout)
        try:
            header = self._roundtrip(conn, "trace", {"container": container})
        except BaseException:
            conn.close()
            raise
        return header, TraceRecords(conn, timeout)
