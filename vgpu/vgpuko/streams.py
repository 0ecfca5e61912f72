"""Listeners to the vgpu family's multicast groups: ``EventStream`` (slice
events) and ``TraceStream`` (trace records), each on its own socket."""

from __future__ import annotations

import errno as _errno
import select
import socket
import time
from typing import Iterator

from vgpu.abi import uapi
from vgpu.vgpuko.messages import Event, TraceRecord, _decode, event_from_msg, trace_from_msg
from vgpu.vgpuko.netlink import (NETLINK_ADD_MEMBERSHIP, SO_RCVBUFFORCE, SOL_NETLINK,
                                 TRACE_RCVBUF, GenlSocket, VgpuError)


class _GroupStream:
    """A socket joined to one multicast group of the vgpu family, decoding
    messages of one command (``CMD``) with ``_item``; the subclasses say
    what an overrun (ENOBUFS: the socket's buffer was full, messages were
    lost) means for their listener."""

    CMD = -1

    def __init__(self, family_id: int, group: int, timeout: float | None = None,
                 rcvbuf: int | None = None):
        self.family_id = family_id
        self.timeout = timeout
        self._gs = GenlSocket(None)
        self._pending: list = []
        try:
            if rcvbuf is not None:
                try:    # past rmem_max needs CAP_NET_ADMIN, which a listener has anyway
                    self._gs.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
                except OSError:
                    self._gs.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self._gs.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
        except BaseException:
            self._gs.close()
            raise

    def close(self) -> None:
        self._gs.close()

    def fileno(self) -> int:
        return self._gs.sock.fileno()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _item(self, msg):
        raise NotImplementedError

    def _overrun(self) -> None:
        raise NotImplementedError

    def ready(self, limit: int | None = None) -> list:
        """The items that can be read without waiting, at most about limit
        of them (a datagram's messages come whole; None: until the socket is
        empty).  An event loop calls this once the socket is readable, and
        again, after a checkpoint, while it returns items."""
        out, self._pending = self._pending, []
        while limit is None or len(out) < limit:
            r, _, _ = select.select([self._gs.sock], [], [], 0)
            if not r:
                return out
            try:
                msgs = self._gs.recv_msgs()
            except OSError as e:
                if e.errno == _errno.ENOBUFS:
                    self._overrun()
                    continue
                raise
            for t, _f, _s, data in msgs:
                if t == self.family_id:
                    m = _decode(data)
                    if m["cmd"] == self.CMD:
                        item = self._item(m)
                        if item is not None:
                            out.append(item)
        return out

    def get(self, timeout: float | None = -1.0):
        """The next item, or None after timeout seconds (default: the
        stream's timeout; None waits forever)."""
        if timeout == -1.0:
            timeout = self.timeout
        end = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            left = None if end is None else max(0.0, end - time.monotonic())
            r, _, _ = select.select([self._gs.sock], [], [], left)
            if not r:
                return None
            self._pending = self.ready()
        return self._pending.pop(0)

    def drain(self, timeout: float = 0.2) -> list:
        out = []
        while (item := self.get(timeout)) is not None:
            out.append(item)
        return out

    def __iter__(self) -> Iterator:
        while (item := self.get()) is not None:
            yield item


class EventStream(_GroupStream):
    """Events of the vgpu family's "events" multicast group.  An overrun
    raises VgpuError(ENOBUFS): events were lost, and a listener that keeps
    state from them must read the slices again."""

    CMD = uapi.VGPU_CMD_EVENT

    def _item(self, msg) -> Event:
        return event_from_msg(msg)

    def _overrun(self) -> None:
        raise VgpuError(_errno.ENOBUFS, "event queue overrun: events lost", op="events")

    def wait_for(self, pred, timeout: float = 5.0) -> Event | None:
        """The first event for which pred(event) holds, within timeout."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ev = self.get(left)
            if ev is None:
                return None
            if pred(ev):
                return ev


class TraceStream(_GroupStream):
    """Records of the vgpu family's "trace" multicast group (docs/trace.md).

    A listener that falls behind loses records: the kernel's send fails for
    this socket, which sees ENOBUFS once; ``overruns`` counts those, and the
    records' sequence numbers show how many were lost."""

    CMD = uapi.VGPU_CMD_TRACE

    def __init__(self, family_id: int, group: int, timeout: float | None = None,
                 rcvbuf: int = TRACE_RCVBUF):
        self.overruns = 0
        super().__init__(family_id, group, timeout, rcvbuf)

    def _item(self, msg) -> TraceRecord | None:
        return trace_from_msg(msg)

    def _overrun(self) -> None:
        self.overruns += 1
