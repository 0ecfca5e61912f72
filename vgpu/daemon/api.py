"""The server side of vgpud's admin API (docs/api.md, version 1).

Newline-delimited JSON on a Unix stream socket.  This module owns:

- the framing and its limits (``MAX_LINE`` bytes a request, ``READ_TIMEOUT``
  seconds for a request to arrive whole once its first byte came,
  ``IDLE_TIMEOUT`` seconds of silence before a connection is closed);
- request validation (``parse_request``: version, id, op, and every argument
  checked against ``OPS`` with a message that names the argument and quotes
  the value; the values vgpuctl, the hook and the config file also take are
  parsed by vgpu.common.values, see ``checked``) and reply encoding (``ok_reply`` /
  ``error_reply``);
- dispatch (``dispatch``: a validated request -> ``handler.run``);
- the socket server (``Server``, on ``trio.serve_listeners``): SO_PEERCRED
  check per connection, a cap on concurrent connections, per-connection
  deadlines, event and trace streams, and shutdown as one deadline (stop
  accepting, finish in-flight requests, cancel what is left).

The handler (vgpu.daemon.ops.Ops in the daemon, a fake in host tests) is any
object with ``async run(op, args)`` for every operation of ``OPS`` but the
streams, returning the result object, raising ``ApiError`` for refusals;
``subscribe()`` -> a trio receive channel of event dicts for ``events``; and
``trace(args, send, *, task_status)`` for ``trace``: started with
``nursery.start``, it reports the header object (or raises ApiError), then
puts each line's object on the send channel, closes it when the stream ends,
and stops its tracing when cancelled.

What it may call: the handler only.  It never talks to the kernel itself.
"""

from __future__ import annotations

import functools
import grp
import json
import logging
import math
import os
import pwd
import re
import socket
import stat
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from vgpu.common.rdma import HANDLES_MAX, OBJECTS_MAX, limit as rdma_limit
from vgpu.common.values import (CONTAINER_MAX, BadValue, parse_bool, parse_container, parse_duration,
                         parse_gpu, parse_gpus, parse_label, parse_labels, parse_percent, parse_pid, parse_policy, parse_priority,
                         parse_profile, parse_size, quote)

log = logging.getLogger("vgpud.api")

VERSION = 1
SUPPORTED = [1]
MAX_LINE = 65536
READ_TIMEOUT = 5.0
IDLE_TIMEOUT = 30.0
MAX_CONNECTIONS = 256
EVENT_QUEUE = 256            # events buffered per subscriber before it is dropped
# records buffered per tracer before its records are dropped: about a second
# of a busy CUDA start, a few MiB for typical records (16 KiB blobs are rare)
TRACE_QUEUE = 1024

CODES = ("bad-request", "unknown-op", "unsupported-version", "too-large", "permission",
         "not-found", "exists", "not-owner", "admission", "kernel", "unavailable", "internal")


class ApiError(Exception):
    """A refusal with an API error code; ``extra`` is merged into the error
    object (``supported`` for unsupported-version, for instance)."""

    def __init__(self, code: str, message: str, **extra):
        assert code in CODES, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


# ----------------------------------------------------------- validators
# Each takes the argument's name ("args.memory") and its value, and returns
# the value to use or raises ApiError("bad-request").  The values vgpuctl,
# the hook and the config file also take are parsed by vgpu.common.values, whose
# core text ('"4GB" is not a size: ...') follows the name.

def checked(parse: Callable[[Any], Any]) -> Callable[[str, Any], Any]:
    """The argument check of a vgpu.common.values parser: its BadValue becomes one
    bad-request, ``<name><where in the value>: <core text>``."""
    def check(name: str, v: Any) -> Any:
        try:
            return parse(v)
        except BadValue as e:
            raise ApiError("bad-request", f"{name}{e.at}: {e}") from None
    check.__name__ = check.__qualname__ = f"checked_{parse.__name__}"
    return check


def _gpu_list(v: Any) -> list:
    """The API's gpus: a JSON list (not the comma-separated text vgpuctl
    and the annotation take)."""
    if not isinstance(v, list):
        raise BadValue(v, "is not a list of GPU indexes or UUIDs")
    return parse_gpus(v)


v_container = checked(parse_container)
v_pid = checked(parse_pid)
v_size = checked(parse_size)
v_percent = checked(parse_percent)
v_priority = checked(parse_priority)
v_policy = checked(parse_policy)
v_profile = checked(parse_profile)
v_gpus = checked(_gpu_list)
v_labels = checked(parse_labels)
v_bool = checked(parse_bool)


def _time(v: Any) -> float:
    """A time as the API takes it: Unix seconds, a number (vgpuctl parses
    "-24h", "yesterday" and the like itself)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or not 0 <= v < 2 ** 33:
        raise BadValue(v, "is not a time (Unix seconds, a number)")
    return float(v)


def _step(v: Any) -> float:
    """A history step: seconds (a number) or a duration ("5m"), 1 s to 7 days."""
    if isinstance(v, bool):
        raise BadValue(v, "is not a step (seconds, or a duration such as 5m)")
    x = float(v) if isinstance(v, (int, float)) else parse_duration(v)
    if not math.isfinite(x) or not 1 <= x <= 7 * 86400:
        raise BadValue(v, "is out of range (1s to 7 days)")
    return x


def _label_sel(v: Any) -> str:
    """A forecast's label: "KEY=VALUE"."""
    k, x = parse_label(v)
    return f"{k}={x}"


def _hours(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 168:
        raise BadValue(v, "is not a whole number of hours from 1 to 168")
    return v


v_time = checked(_time)
v_step = checked(_step)
v_label_sel = checked(_label_sel)
v_hours = checked(_hours)
v_gpu = checked(parse_gpu)


def v_str(name: str, v: Any, maxlen: int = 4096) -> str:
    if not isinstance(v, str) or not v:
        raise ApiError("bad-request", f"{name}: {quote(v)} is not a non-empty string")
    if len(v) > maxlen or "\0" in v:
        raise ApiError("bad-request", f"{name}: {quote(v)} is too long or contains NUL")
    return v


# A slice's owner: who made it through the OCI hook (docs/api.md, "Owners").
# Container ids are unique only per runtime root, so the owner is what makes
# "the slice of container c1" mean one container.  Every field is compared
# as given, so each must have one spelling: strict charsets, a normalized
# absolute root.
_RUNTIME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")     # containerd's rule
_POD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
OWNER_FIELDS = ("runtime", "root", "namespace", "pod")
ROOT_MAX = 1024


def _owner_root(name: str, v: str) -> str:
    if not v.startswith("/") or len(v.encode()) > ROOT_MAX or \
            any(ord(c) < 0x20 or c == "\x7f" for c in v) or os.path.normpath(v) != v:
        raise ApiError("bad-request", f"{name}: {quote(v)} is not a normalized absolute path "
                       f"(at most {ROOT_MAX} bytes)")
    return v


def v_owner(name: str, v: Any) -> dict:
    """{"runtime", "root"?, "namespace"?, "pod"?}: the runtime's name, its
    state root, the containerd namespace, the pod's uid."""
    if not isinstance(v, dict):
        raise ApiError("bad-request", f"{name}: {quote(v)} is not an owner object "
                       f"({', '.join(OWNER_FIELDS)})")
    for k in v:
        if k not in OWNER_FIELDS:
            raise ApiError("bad-request", f"{name}.{k}: unknown owner field "
                           f"(known: {', '.join(OWNER_FIELDS)})")
    if "runtime" not in v:
        raise ApiError("bad-request", f"{name}.runtime: missing (the runtime's name, e.g. runc)")
    checks = {"runtime": (_RUNTIME_RE, "a runtime name (letters, digits, ._+-, at most 64)"),
              "namespace": (_NAMESPACE_RE, "a containerd namespace (letters, digits, ._- "
                            "between them, at most 76)"),
              "pod": (_POD_RE, "a pod uid (letters, digits, ._-, at most 128)")}
    out = {}
    for k in OWNER_FIELDS:                # one key order: owners compare equal as dicts
        if k not in v:
            continue
        x = v[k]
        if not isinstance(x, str):
            raise ApiError("bad-request", f"{name}.{k}: {quote(x)} is not a string")
        if k == "root":
            out[k] = _owner_root(f"{name}.{k}", x)
            continue
        rx, what = checks[k]
        if not rx.fullmatch(x) or (k == "namespace" and len(x) > 76):
            raise ApiError("bad-request", f"{name}.{k}: {quote(x)} is not {what}")
        out[k] = x
    return out


_RDMA_KEYS = ("hca", "handles", "objects")
_HCA_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def v_rdma(name: str, v: Any) -> dict:
    """A slice's RDMA (docs/rdma.md): true (the closest adapter, [rdma]'s
    limits), or {"hca"?: an adapter's name, "handles"?: 1..HANDLES_MAX,
    "objects"?: 1..OBJECTS_MAX}.  Returns the object (its keys as given)."""
    if v is True:
        return {}
    if not isinstance(v, dict):
        raise ApiError("bad-request", f"{name}: {quote(v)} is not true or an object "
                       f"({', '.join(_RDMA_KEYS)})")
    out: dict[str, Any] = {}
    for k, x in v.items():
        if k == "hca":
            if not isinstance(x, str) or not _HCA_RE.fullmatch(x):
                raise ApiError("bad-request", f"{name}.hca: {quote(x)} is not an RDMA "
                               f"adapter's name (letters, digits, _.-, at most 64)")
        elif k in ("handles", "objects"):
            try:
                x = rdma_limit(f"{name}.{k}", x, HANDLES_MAX if k == "handles" else OBJECTS_MAX)
            except ValueError as e:
                raise ApiError("bad-request", str(e)) from None
        else:
            raise ApiError("bad-request", f"{name}.{k}: unknown key (known: "
                           f"{', '.join(_RDMA_KEYS)})")
        out[k] = x
    return out


@dataclass(frozen=True)
class OpSpec:
    args: dict[str, Callable[[str, Any], Any]] = field(default_factory=dict)
    required: tuple[str, ...] = ()


QUOTA_ARGS = {"memory": v_size, "compute": v_percent, "priority": v_priority,
              "policy": v_policy, "profile": v_profile}

OPS: dict[str, OpSpec] = {
    "status": OpSpec(),
    "gpus": OpSpec(),
    "list": OpSpec(),
    "show": OpSpec({"container": v_container}, ("container",)),
    "create": OpSpec({"container": v_container, "cgroup": v_str, "pid": v_pid, "gpus": v_gpus,
                      "labels": v_labels, "from_image": v_bool, "owner": v_owner,
                      "rdma": v_rdma, **QUOTA_ARGS}, ("container",)),
    # create's request without a cgroup or pid: where create would put it
    "plan": OpSpec({"container": v_container, "gpus": v_gpus, "labels": v_labels,
                    "from_image": v_bool, "owner": v_owner, "rdma": v_rdma, **QUOTA_ARGS},
                   ("container",)),
    "set-quota": OpSpec({"container": v_container, "gpus": v_gpus, "rdma": v_rdma,
                         **QUOTA_ARGS}, ("container",)),
    "delete": OpSpec({"container": v_container, "force": v_bool, "owner": v_owner},
                     ("container",)),
    "attach": OpSpec({"container": v_container, "cgroup": v_str}, ("container", "cgroup")),
    "audit": OpSpec({"container": v_container}, ("container",)),
    "set-audit": OpSpec({"container": v_container, "audit": v_bool}, ("container", "audit")),
    "events": OpSpec(),
    "trace": OpSpec({"container": v_container}, ("container",)),
    "history": OpSpec({"container": v_container, "label": v_labels, "gpu": v_gpu,
                       "since": v_time, "until": v_time, "step": v_step}),
    "forecast": OpSpec({"label": v_label_sel, "hours": v_hours, "reset": v_bool,
                        "resume": v_bool}, ("label",)),
}
STREAM_OPS = ("events", "trace")     # answered on a connection of their own


@dataclass
class Request:
    id: Any
    op: str
    args: dict


def _scalar_id(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, str)) or (isinstance(v, float) and math.isfinite(v))


def parse_request(line: bytes | str) -> Request:
    """One request line -> a validated Request.  Raises ApiError; its
    ``extra['id']`` carries the request id where one could be read."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE:
            raise ApiError("too-large", f"request of {len(line)} bytes exceeds {MAX_LINE}")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ApiError("bad-request", f"request is not UTF-8: {e.reason} at byte {e.start}") from None
    else:
        text = line
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise ApiError("bad-request", f"request is not JSON: {str(e)[:120]}") from None
    if not isinstance(doc, dict):
        raise ApiError("bad-request", f"request is not a JSON object but {type(doc).__name__} {quote(doc)}")
    rid = doc.get("id")
    if not _scalar_id(rid):
        raise ApiError("bad-request", f"id: {quote(rid)} is not a JSON scalar")
    try:
        return _validate(doc, rid)
    except ApiError as e:
        e.extra.setdefault("id", rid)
        raise


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _validate(doc: dict, rid: Any) -> Request:
    unknown = set(doc) - {"v", "id", "op", "args"}
    if unknown:
        raise ApiError("bad-request", f"unknown request field(s): {', '.join(sorted(map(quote, unknown)))}")
    if "v" not in doc:
        raise ApiError("bad-request", "v: missing (the protocol version, 1)")
    v = doc["v"]
    if isinstance(v, bool) or v not in SUPPORTED:
        raise ApiError("unsupported-version", f"v: protocol version {quote(v)} is not supported",
                       supported=list(SUPPORTED))
    op = doc.get("op")
    if not isinstance(op, str):
        raise ApiError("bad-request", f"op: {quote(op)} is not an operation name")
    spec = OPS.get(op)
    if spec is None:
        raise ApiError("unknown-op", f"op: unknown operation {quote(op)} (known: {', '.join(OPS)})")
    args = doc.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ApiError("bad-request", f"args: {quote(args)} is not an object")
    out = {}
    for k, val in args.items():
        check = spec.args.get(k)
        if check is None:
            raise ApiError("bad-request", f"args.{k}: unknown argument of {op}"
                           + (f" (known: {', '.join(spec.args)})" if spec.args else " (it takes none)"))
        out[k] = check(f"args.{k}", val)
    for k in spec.required:
        if k not in out:
            raise ApiError("bad-request", f"args.{k}: missing (required by {op})")
    if op == "create" and "cgroup" in out and "pid" in out:
        raise ApiError("bad-request", "args: give cgroup or pid, not both")
    return Request(rid, op, out)


# --------------------------------------------------------------- replies
def _dump(doc: dict) -> bytes:
    return (json.dumps(doc, separators=(",", ":"), ensure_ascii=False, default=str) + "\n").encode()


def ok_reply(rid: Any, result: dict) -> bytes:
    return _dump({"v": VERSION, "id": rid, "ok": True, "result": result})


def error_reply(rid: Any, code: str, message: str, **extra) -> bytes:
    err = {"code": code, "message": message}
    reply = {"v": VERSION, "id": rid, "ok": False, "error": err}
    sup = extra.pop("supported", None)
    if sup is not None:
        reply["supported"] = sup
        err["supported"] = sup
    err.update({k: v for k, v in extra.items() if k != "id"})
    return _dump(reply)


def event_line(event: dict) -> bytes:
    return _dump({"v": VERSION, "event": event})


async def dispatch(handler, req: Request) -> bytes:
    """Run one validated request (not ``events``) -> the reply line."""
    try:
        result = await handler.run(req.op, req.args)
        return ok_reply(req.id, result if result is not None else {})
    except ApiError as e:
        return error_reply(req.id, e.code, e.message, **e.extra)
    except trio.Cancelled:
        raise
    except Exception as e:          # a bug: answer it, log it, keep serving
        log.exception("internal error in %s", req.op)
        return error_reply(req.id, "internal", f"{type(e).__name__}: {e}")


async def handle_line(handler, line: bytes) -> bytes:
    """A raw request line -> the reply line (pure of sockets; events are not
    handled here)."""
    try:
        req = parse_request(line)
    except ApiError as e:
        return error_reply(e.extra.get("id"), e.code, e.message, **e.extra)
    if req.op in STREAM_OPS:
        return error_reply(req.id, "bad-request", f"{req.op} needs a stream connection")
    return await dispatch(handler, req)


# ---------------------------------------------------------------- socket
SO_PEERCRED = getattr(socket, "SO_PEERCRED", 17)


def peercred(sock) -> tuple[int, int, int]:
    """(pid, uid, gid) of the peer of a connected Unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


def peer_allowed(uid: int, gid: int, pid: int, group_gid: int | None) -> bool:
    """uid 0, or the configured group as primary or supplementary group."""
    if uid == 0:
        return True
    if group_gid is None:
        return False
    if gid == group_gid:
        return True
    try:                                    # supplementary groups of the process
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith("Groups:"):
                    return str(group_gid) in ln.split()[1:]
    except OSError:
        pass
    try:
        name = pwd.getpwuid(uid).pw_name
        return name in grp.getgrgid(group_gid).gr_mem
    except (KeyError, OSError):
        return False


def resolve_group(name: str | None) -> int | None:
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise ValueError(f"group {name!r} does not exist") from None


class LineReader:
    """Newline framing over a trio stream with a byte limit."""

    def __init__(self, stream, limit: int = MAX_LINE):
        self.stream = stream
        self.limit = limit
        self.buf = bytearray()
        self.eof = False

    def has_partial(self) -> bool:
        return bool(self.buf)

    async def readline(self, idle: float, whole: float) -> bytes | None:
        """The next line without its newline; None at EOF.  Raises
        ApiError('too-large') past the limit, trio.TooSlowError on the
        idle timeout (no byte) or the whole-request timeout."""
        deadline_whole = None
        if self.buf:
            deadline_whole = trio.current_time() + whole
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                if i > self.limit:
                    raise ApiError("too-large", f"request line exceeds {self.limit} bytes")
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return line
            if len(self.buf) > self.limit:
                raise ApiError("too-large", f"request line exceeds {self.limit} bytes")
            if self.eof:
                if self.buf:
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line
                return None
            if deadline_whole is None:
                with trio.fail_after(idle):
                    data = await self.stream.receive_some(65536)
            else:
                with trio.fail_at(deadline_whole):
                    data = await self.stream.receive_some(65536)
            if not data:
                self.eof = True
            elif deadline_whole is None:
                deadline_whole = trio.current_time() + whole
                self.buf += data
            else:
                self.buf += data


class Server:
    """The API listener: ``await nursery.start(server.run)``.

    Connections are served by ``trio.serve_listeners`` (which also backs off
    from accept's EMFILE/ENFILE/ENOMEM/ENOBUFS and closes each stream when
    its handler returns); what ends a connection ends only it.  Shutdown is
    one deadline: ``stop(grace)`` stops accepting at once, ends idle
    connections and streams at once, lets in-flight requests finish, and
    cancels whatever is left at ``now + grace`` (the deadline of the cancel
    scope the whole server runs in).  ``drain(timeout)`` is ``stop(timeout)``
    and waits until ``run`` has returned."""

    def __init__(self, handler, path: str, *, group: str | None = None, mode: int = 0o660,
                 idle_timeout: float = IDLE_TIMEOUT, read_timeout: float = READ_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS):
        self.handler = handler
        self.path = path
        self.group_gid = resolve_group(group)
        self.mode = mode
        self.idle_timeout = idle_timeout
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self.connections = 0
        self._scope = trio.CancelScope()      # the server's; its deadline is the shutdown's
        self._closing = trio.Event()          # stop(): no more accepts, no more requests
        self._stopped = trio.Event()          # run() has returned

    def _listen(self) -> socket.socket:
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, mode=0o755, exist_ok=True)
        try:
            st = os.lstat(self.path)
            if stat.S_ISSOCK(st.st_mode):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.settimeout(1.0)
                    probe.connect(self.path)
                except OSError:
                    os.unlink(self.path)            # stale socket of a dead daemon
                else:
                    raise RuntimeError(f"{self.path}: another vgpud is serving this socket")
                finally:
                    probe.close()
            else:
                raise RuntimeError(f"{self.path} exists and is not a socket")
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            old = os.umask(0o177)
            try:
                s.bind(self.path)
            finally:
                os.umask(old)
            if self.group_gid is not None:
                os.chown(self.path, -1, self.group_gid)
            os.chmod(self.path, self.mode)
            s.listen(128)
        except BaseException:
            s.close()
            raise
        return s

    def _unlink(self) -> None:
        try:
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        except OSError:
            pass

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED):
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(self._listen()))
        log.info("API listening on %s", self.path)
        try:
            with self._scope:
                async with trio.open_nursery() as connections:
                    async with trio.open_nursery() as accepting:
                        await accepting.start(functools.partial(
                            trio.serve_listeners, self._serve_conn, [listener],
                            handler_nursery=connections))
                        task_status.started()
                        await self._closing.wait()
                        accepting.cancel_scope.cancel()
                    # serve_listeners closed the listener: new clients are
                    # refused at once; the accepted ones finish their request
                    self._unlink()
        finally:
            with trio.CancelScope(shield=True):
                await listener.aclose()           # serve_listeners may not have started
            self._unlink()
            self._stopped.set()

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting and end idle connections and streams now; cancel
        in-flight requests still running after ``grace`` seconds.  A second
        call may only bring the deadline closer."""
        self._closing.set()
        self._scope.deadline = min(self._scope.deadline, trio.current_time() + grace)

    async def drain(self, timeout: float = 10.0) -> None:
        """``stop(timeout)`` and wait until the server has exited (by the
        deadline, give or take a handler's shielded clean-up)."""
        self.stop(timeout)
        await self._stopped.wait()

    async def _serve_conn(self, stream: trio.SocketStream):
        """serve_listeners' handler (it closes the stream after it): a
        connection's errors end the connection, never the server."""
        self.connections += 1
        try:
            await self._conn(stream)
        # except*: the connection's nursery wraps what its tasks raise; and a
        # client that stops reading (TooSlowError from _send) costs its
        # connection, never the server
        except* (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                 OSError) as eg:
            log.debug("connection dropped: %s", eg.exceptions[0])
        finally:
            self.connections -= 1

    async def _send(self, stream, data: bytes) -> None:
        with trio.fail_after(self.idle_timeout):
            await stream.send_all(data)

    async def _conn(self, stream: trio.SocketStream):
        try:
            pid, uid, gid = peercred(stream.socket)
        except OSError:
            pid = uid = gid = -1
        if not peer_allowed(uid, gid, pid, self.group_gid):
            log.warning("refused API connection from pid %d uid %d gid %d", pid, uid, gid)
            await self._send(stream, error_reply(None, "permission",
                                                 f"uid {uid} may not use vgpud (root or the API group only)"))
            return
        if self.connections > self.max_connections:
            await self._send(stream, error_reply(None, "unavailable",
                                                 f"too many connections ({self.max_connections}); retry"))
            return
        # held from a request's whole line to its reply: stop() ends the
        # connection when it is free (at once when it waits for a request
        # or streams), and the server's deadline cancels it if it never is
        busy = trio.Lock()
        async with trio.open_nursery() as n:
            async def close_when_stopping():
                await self._closing.wait()
                async with busy:
                    n.cancel_scope.cancel()
            n.start_soon(close_when_stopping)
            await self._requests(stream, busy)
            n.cancel_scope.cancel()

    async def _requests(self, stream: trio.SocketStream, busy: trio.Lock):
        reader = LineReader(stream)
        while True:
            try:
                line = await reader.readline(self.idle_timeout, self.read_timeout)
            except ApiError as e:
                await self._send(stream, error_reply(None, e.code, e.message))
                return
            except trio.TooSlowError:
                if reader.has_partial():
                    with trio.move_on_after(1):
                        await stream.send_all(error_reply(
                            None, "bad-request", f"request not complete within {self.read_timeout:g} s"))
                return
            if line is None:
                return
            if not line.strip():
                continue
            async with busy:
                try:
                    req = parse_request(line)
                except ApiError as e:
                    await self._send(stream, error_reply(e.extra.get("id"), e.code, e.message,
                                                         **e.extra))
                    continue
                if req.op not in STREAM_OPS:
                    await self._send(stream, await dispatch(self.handler, req))
                    continue
            # a stream is the connection's last request, and not in flight:
            # stop() ends it at once
            if req.op == "events":
                await self._events(stream, req)
            else:
                await self._trace(stream, req)
            return

    async def _events(self, stream, req: Request):
        recv = self.handler.subscribe(EVENT_QUEUE)
        async with recv:
            await self._send(stream, ok_reply(req.id, {}))
            async with trio.open_nursery() as n:
                async def watch_close():
                    # the client closes (or sends anything): end the stream
                    while True:
                        data = await stream.receive_some(4096)
                        if not data:
                            n.cancel_scope.cancel()
                            return
                n.start_soon(watch_close)
                async for ev in recv:
                    await self._send(stream, event_line(ev))
                n.cancel_scope.cancel()

    async def _trace(self, stream, req: Request):
        """A trace stream (docs/api.md, "Traces"): the handler's trace task
        fills a bounded channel, this task writes it to the client.  The
        trace ends when the client closes or sends anything, or when the
        handler ends it (its last line says why); cancelling the nursery
        stops the handler's tracing."""
        send, recv = trio.open_memory_channel(TRACE_QUEUE)
        async with trio.open_nursery() as n:
            try:
                header = await n.start(self.handler.trace, req.args, send)
            except ApiError as e:
                await self._send(stream, error_reply(req.id, e.code, e.message, **e.extra))
                return
            except Exception as e:          # a bug: answer it, log it, keep serving
                log.exception("internal error in trace")
                await self._send(stream, error_reply(req.id, "internal",
                                                     f"{type(e).__name__}: {e}"))
                return

            async def watch_close():
                try:
                    await stream.receive_some(4096)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                n.cancel_scope.cancel()
            n.start_soon(watch_close)
            try:
                await self._send(stream, ok_reply(req.id, header))
                async for item in recv:
                    await self._send(stream, _dump(item))
            except (trio.BrokenResourceError, trio.ClosedResourceError,
                    trio.TooSlowError) as e:
                log.info("trace of %s: client dropped (%s)", req.args.get("container"),
                         type(e).__name__)
            n.cancel_scope.cancel()
