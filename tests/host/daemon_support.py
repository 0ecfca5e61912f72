"""What the host tests of vgpud share: ``FakeKernel``, an in-memory
stand-in for vgpu.vgpuko.client.VgpuKernel with the same method names and
Slice objects (with ``FakeTraceStream``, its trace group), ``FakeInventory``
(two 16 GiB GPUs), ``ThreadVgpud`` (vgpud's API server and operations in a
thread over those), ``FakeNvml`` (the NVML event calls of vgpu.daemon.health:
no GPU here raises an XID), ``CONFIG`` (a config template: ``{tmp}`` is the test's
directory), ``call`` (one request through vgpu.daemon.api.handle_line) and a
few client helpers for a real socket (``connect``, ``rpc``, ``readline``) and
for trio (``until``).

The fakes are for the daemon's API layer only (the protocol, validation,
admission, reconciliation and GC decisions of the daemon, not vgpu.ko); the
VM tests (tests/vm/test_daemon_*.py) run the daemon against the real module
with no fakes.  The ``env`` fixture (conftest.py) is a slice manager over
them.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import socket
import stat
import threading
from pathlib import Path
from types import SimpleNamespace

import pynvml
import trio

from vgpu.common.apiclient import ApiClient
from vgpu.daemon.ops import Ops
from vgpu.daemon.api import Server, handle_line
from vgpu.daemon.config import parse_config
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore
from vgpu.daemon.inventory import GpuInfo, synth_uuid
from vgpu.vgpuko.messages import AuditEntry, AuditRecord, Compute, GpuUsage, SchedInfo, Slice, allow_keys
from vgpu.vgpuko.netlink import VgpuError

GiB, MiB = 1 << 30, 1 << 20


class FakeKernel:
    """In-memory vgpu.ko (API-layer tests only)."""

    def __init__(self):
        self.slices_: dict[int, Slice] = {}
        self.calls: list[tuple] = []
        self.scheds_: dict[int, SchedInfo] = {}
        self.sched_calls: list[tuple] = []
        self.allow_: dict[int, list[int]] = {}          # slice id -> VGPU_A_ALLOW keys
        self.audit_: dict[int, list[AuditEntry]] = {}   # slice id -> its record
        self.audit_calls: list[tuple] = []
        self.trace_calls: list[tuple] = []              # (slice id, "new"|"set", on)
        self.streams: list[FakeTraceStream] = []        # every trace_stream() made
        self.has_trace = True

    def _apply_audit(self, s, audit, allow):
        if audit is not None or allow is not None:
            self.audit_calls.append((s.id, audit, None if allow is None else list(allow)))
        if audit is not None:
            s.audit = bool(audit)
        if allow is not None:
            self.allow_[s.id] = allow_keys(allow)        # the client's own checks
            s.allow_count = len(self.allow_[s.id])

    @staticmethod
    def _apply_compute(s, compute):
        for i, c in (compute or {}).items():
            c = Compute.of(c)
            g = s.gpu(i)
            if c.policy is not None:
                g.compute_policy = c.policy
            if c.bp is not None:
                g.compute_bp = c.bp
            if c.priority is not None:
                g.priority = c.priority

    @staticmethod
    def _cgroup_id(fd):
        # vgpu.ko: cgroup_get_from_fd (EBADF unless an open directory); the id is its inode
        try:
            st = os.fstat(fd)
        except OSError:
            raise VgpuError(errno.EBADF, op="cgroup fd") from None
        if not stat.S_ISDIR(st.st_mode):
            raise VgpuError(errno.EBADF, op="cgroup fd")
        return st.st_ino

    def slice_new(self, id, gpus, name=None, uvm_policy=None, flags=None, cgroup_fd=None,
                  compute=None, max_channels=None, audit=None, allow=None, trace=None):
        self.calls.append(("new", id))
        if id in self.slices_:
            raise VgpuError(errno.EEXIST, op="SLICE_NEW")
        cg = self._cgroup_id(cgroup_fd) if cgroup_fd is not None else 0
        s = Slice(id=id, name=name or "", major=240, base_minor=16 * len(self.slices_), cgroup_id=cg,
                  max_channels=max_channels or 0,
                  gpus=[GpuUsage(index=i, real_minor=g[0], mem_limit=g[1]) for i, g in enumerate(gpus)])
        self._apply_compute(s, compute)
        self._apply_audit(s, audit, allow)
        if trace is not None:
            self.trace_calls.append((id, "new", trace))
            s.trace = trace
        self.slices_[id] = s
        return s

    def slice_set(self, id, limits=None, uvm_policy=None, cgroup_fd=None, compute=None,
                  max_channels=None, audit=None, allow=None, trace=None):
        if trace is not None:
            self.trace_calls.append((id, "set", trace))
        self.calls.append(("set", id, dict(limits or {})))
        if compute:
            self.calls.append(("compute", id, {i: Compute.of(c) for i, c in compute.items()}))
        s = self.slice_get(id)
        self._apply_compute(s, compute)
        if max_channels is not None:
            s.max_channels = max_channels
        if cgroup_fd is not None:
            s.cgroup_id = self._cgroup_id(cgroup_fd)
        for i, b in (limits or {}).items():
            s.gpu(i).mem_limit = b
        self._apply_audit(s, audit, allow)
        if trace is not None:
            s.trace = trace
        return s

    def trace_stream(self, timeout=None):
        if not self.has_trace:
            raise VgpuError(errno.ENOENT, "family 'vgpu' has no multicast group 'trace'",
                            op="trace")
        ts = FakeTraceStream()
        self.streams.append(ts)
        return ts

    def trace(self, *records):
        """vgpu.ko sends records on the trace group: every listener gets them."""
        for ts in self.streams:
            ts.push(records)

    def audit_get(self, id):
        s = self.slice_get(id)
        return AuditRecord(slice_id=id, audit=s.audit, dropped=0 if id not in self.audit_ else 3,
                           entries=list(self.audit_.get(id, [])))

    def slice_del(self, id, force=False):
        self.calls.append(("del", id))
        s = self.slice_get(id)
        if s.open_files and not force:
            raise VgpuError(errno.EBUSY, op="SLICE_DEL")
        del self.slices_[id]

    def slice_get(self, id):
        if id not in self.slices_:
            raise VgpuError(errno.ENOENT, op="SLICE_GET")
        return self.slices_[id]

    def slices(self):
        return list(self.slices_.values())

    def sched_set(self, real_minor, period_us=None, layers=None):
        self.sched_calls.append((real_minor, period_us, layers))
        si = self.scheds_.setdefault(real_minor, SchedInfo(real_minor, 100_000, 3))
        if period_us is not None:
            si.period_us = period_us
        if layers is not None:
            si.layers = layers
        return si

    def sched_get(self, real_minor):
        if real_minor not in self.scheds_:
            raise VgpuError(errno.ENOENT, op="SCHED_GET")
        return self.scheds_[real_minor]

    def scheds(self):
        return list(self.scheds_.values())

    def close(self):
        pass


class FakeTraceStream:
    """vgpu.vgpuko.streams.TraceStream's interface over a socketpair: ``push``
    queues records and makes the fd readable; ``ready()`` takes them."""

    def __init__(self):
        self.r, self.w = socket.socketpair()
        self.r.setblocking(False)
        self.pending: list = []
        self.overruns = 0
        self.closed = False

    def push(self, records) -> None:
        if self.closed:
            return
        self.pending.extend(records)
        self.w.send(b"x")

    def fileno(self) -> int:
        return self.r.fileno()

    def ready(self, limit: int | None = None) -> list:
        if limit is None or len(self.pending) <= limit:
            try:
                while self.r.recv(4096):
                    pass
            except BlockingIOError:
                pass
        n = len(self.pending) if limit is None else limit
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def close(self) -> None:
        self.closed = True
        self.r.close()
        self.w.close()


class FakeInventory:
    source = "fake"
    driver_version = "595.45.04"
    nvml = None                     # no NVML: vgpud's gpu-health watches nothing

    def __init__(self, n=2, total=16 * GiB):
        self.gpus = [GpuInfo(i, synth_uuid(f"0000:0{i + 1}:00.0"), "Sim", f"0000:0{i + 1}:00.0",
                             total, 0, i, gpu_id=0x100 + i, uuid_synthesized=True) for i in range(n)]

    def poll(self, proc_memory=False):
        return self.gpus

    def close(self):
        pass


CONFIG = """
[paths]
socket = "{tmp}/s.sock"
state_dir = "{tmp}/state"
[defaults]
memory = "1GiB"
compute = "10%"
[profiles.small]
memory = "4GiB"
compute = "25%"
[profiles.fixed50]
memory = "2GiB"
compute = "50%"
policy = "fixed"
"""


async def call(mgr, op, rid=1, **args):
    line = json.dumps({"v": 1, "id": rid, "op": op, "args": args}).encode()
    return json.loads(await handle_line(Ops(mgr), line))


async def connect(path):
    return await trio.open_unix_socket(path)


async def rpc(stream, doc) -> dict:
    await stream.send_all(json.dumps(doc).encode() + b"\n")
    return json.loads(await readline(stream))


async def readline(stream) -> bytes:
    buf = b""
    with trio.fail_after(10):
        while not buf.endswith(b"\n"):
            d = await stream.receive_some(65536)
            if not d:
                break
            buf += d
    return buf


async def until(pred, timeout=10):
    with trio.fail_after(timeout):
        while not pred():
            await trio.sleep(0.01)


class FakeNvml:
    """The pynvml calls XidWatch makes.  ``events``: what nvmlEventSetWait_v2
    returns, in order (an exception instance is raised instead); an empty
    queue waits out the timeout and raises NVML_ERROR_TIMEOUT."""

    NVMLError = pynvml.NVMLError
    NVML_ERROR_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, uuids, unsupported=()):
        self.uuids = list(uuids)
        self.unsupported = set(unsupported)
        self.registered: list[int] = []
        self.events: queue.Queue = queue.Queue()
        self.freed = threading.Event()

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlEventSetFree(self, es):
        assert es == "set"
        self.freed.set()

    def nvmlDeviceGetCount(self):
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetUUID(self, h):
        return self.uuids[h[1]].encode()            # pynvml may give bytes

    def nvmlDeviceRegisterEvents(self, h, types, es):
        assert types == pynvml.nvmlEventTypeXidCriticalError and es == "set"
        if h[1] in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.registered.append(h[1])

    def nvmlEventSetWait_v2(self, es, timeout_ms):
        try:
            ev = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
        if isinstance(ev, BaseException):
            raise ev
        return ev

    def xid(self, gpu: int, xid: int, kind=pynvml.nvmlEventTypeXidCriticalError):
        self.events.put(SimpleNamespace(device=("handle", gpu), eventType=kind, eventData=xid))


class ThreadVgpud:
    """vgpud's admin API (the real server and operations) in a thread, over
    fakes of the kernel and the GPUs; ``inv.gpus`` may be changed, ``stop()``
    and ``start()`` again."""

    def __init__(self, tmp: Path, extra: str = "", n: int = 2, total: int = 16 * GiB):
        self.tmp = tmp
        self.sock = str(tmp / "s.sock")
        self.cfg = parse_config(CONFIG.format(tmp=tmp) + extra, "test.toml")
        self.inv = FakeInventory(n, total)
        self.kernel = FakeKernel()
        self.thread = None
        self.sysfs = tmp / "sys"            # the PCI tree and RDMA adapters: none, not the machine's

    def start(self) -> "ThreadVgpud":
        ready = threading.Event()

        async def main():
            mgr = SliceManager(self.cfg, "test.toml", KernelPort(factory=lambda: self.kernel),
                               StateStore(self.tmp / "state"), self.inv)
            mgr.load_state()
            mgr.sysfs = str(self.sysfs)
            self.mgr = mgr
            srv = Server(Ops(mgr), self.sock)
            async with trio.open_nursery() as n:
                await n.start(srv.run)
                self.token = trio.lowlevel.current_trio_token()
                self.scope = n.cancel_scope
                ready.set()

        self.thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
        self.thread.start()
        assert ready.wait(10)
        return self

    def stop(self) -> None:
        self.token.run_sync_soon(self.scope.cancel)
        self.thread.join(10)
        assert not self.thread.is_alive()

    def api(self) -> ApiClient:
        return ApiClient(self.sock)
