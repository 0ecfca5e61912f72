"""vgpud's admin API (docs/api.md) on the host: framing, validation and
dispatch, good and hostile requests, against the pure functions and against
a real Unix socket served in-process.

The kernel here is ``FakeKernel``, an in-memory stand-in for
vgpu.daemon.kernel.VgpuKernel with the same method names and Slice objects.  It is
used for the API layer only (these tests check the protocol, validation,
admission, reconciliation and GC decisions of the daemon, not vgpu.ko); the
VM tests (tests/vm/test_daemon_*.py) run the daemon against the real module
with no fakes.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from vgpu.daemon import api
from vgpu.abi import nvnames
from vgpu.daemon import slices as S
from vgpu.abi import uapi as U
from vgpu.daemon.api import ApiError, handle_line, parse_request
from vgpu.daemon.config import parse_config
from vgpu.daemon.inventory import GpuInfo, over_quota, synth_uuid
from vgpu.daemon.kernel import (AuditEntry, AuditRecord, Compute, GpuUsage, SchedInfo, Slice,
                         VgpuError, allow_keys)
from vgpu.daemon.slices import KernelPort, SliceManager
from vgpu.daemon.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
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
    """vgpu.daemon.kernel.TraceStream's interface over a socketpair: ``push``
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


@pytest.fixture
def env(tmp_path):
    cfg = parse_config(CONFIG.format(tmp=tmp_path), "test.toml")
    k = FakeKernel()
    mgr = SliceManager(cfg, "test.toml", KernelPort(factory=lambda: k), StateStore(tmp_path / "state"),
                       FakeInventory())
    mgr.load_state()
    return mgr, k, tmp_path


async def call(mgr, op, rid=1, **args):
    line = json.dumps({"v": 1, "id": rid, "op": op, "args": args}).encode()
    return json.loads(await handle_line(mgr, line))


# ------------------------------------------------------------ pure parsing
@pytest.mark.parametrize("line,code", [
    (b"garbage", "bad-request"),
    (b"", "bad-request"),
    (b"\xff\xfe", "bad-request"),
    (b"[1, 2]", "bad-request"),
    (b'"status"', "bad-request"),
    (b"null", "bad-request"),
    (b'{"op": "status"}', "bad-request"),                        # no version
    (b'{"v": 2, "op": "status"}', "unsupported-version"),
    (b'{"v": "1", "op": "status"}', "unsupported-version"),
    (b'{"v": true, "op": "status"}', "unsupported-version"),
    (b'{"v": 1, "op": "reboot"}', "unknown-op"),
    (b'{"v": 1, "op": 7}', "bad-request"),
    (b'{"v": 1}', "bad-request"),
    (b'{"v": 1, "op": "status", "args": []}', "bad-request"),
    (b'{"v": 1, "op": "status", "args": {"x": 1}}', "bad-request"),
    (b'{"v": 1, "op": "status", "extra": 1}', "bad-request"),
    (b'{"v": 1, "op": "status", "id": {"a": 1}}', "bad-request"),
    (b'{"v": 1, "op": "show"}', "bad-request"),
    (b'{"v": 1, "op": "show", "args": {"container": 5}}', "bad-request"),
    (b'{"v": 1, "op": "show", "args": {"container": ""}}', "bad-request"),
    (b'{"v": 1, "op": "show", "args": {"container": "a/b"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "memory": "8GB"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "memory": -1}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "memory": true}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "compute": "130%"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "compute": NaN}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "priority": "urgent"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "gpus": []}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "gpus": [0, 0]}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "pid": 0}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "pid": 1, "cgroup": "/x"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "labels": {"a": 1}}}', "bad-request"),
    (b'{"v": 1, "op": "delete", "args": {"container": "c", "force": "yes"}}', "bad-request"),
    (b"[" * 100000, "too-large"),
    (b"[" * 50000, "bad-request"),                                # deep nesting
])
def test_hostile_lines(line, code):
    with pytest.raises(ApiError) as ei:
        parse_request(line)
    assert ei.value.code == code, ei.value.message


def test_message_names_argument_and_quotes_value():
    with pytest.raises(ApiError) as ei:
        parse_request(b'{"v": 1, "op": "set-quota", "args": {"container": "c", "memory": "8GB"}}')
    assert "args.memory" in ei.value.message and '"8GB"' in ei.value.message
    with pytest.raises(ApiError) as ei:
        parse_request(b'{"v": 1, "op": "set-quota", "args": {"container": "c", "colour": 1}}')
    assert "args.colour" in ei.value.message


def test_good_request_and_id_echo():
    r = parse_request(b'{"v": 1, "id": "x7", "op": "set-quota", "args": {"container": "c1", '
                      b'"memory": "8GiB", "compute": "30%", "priority": "high"}}')
    assert (r.id, r.op) == ("x7", "set-quota")
    assert r.args == {"container": "c1", "memory": 8 * GiB, "compute": 30.0, "priority": "high"}
    assert parse_request(b'{"v": 1, "op": "status"}').args == {}
    assert parse_request(b'{"v": 1, "op": "status", "args": null}').args == {}


async def test_error_reply_echoes_id_and_supported(env):
    mgr, _, _ = env
    r = json.loads(await handle_line(mgr, b'{"v": 9, "id": 42, "op": "status"}'))
    assert r["ok"] is False and r["id"] == 42 and r["supported"] == [1]
    assert r["error"]["code"] == "unsupported-version"
    r = json.loads(await handle_line(mgr, b'{"v": 1, "id": 3, "op": "nope"}'))
    assert (r["id"], r["error"]["code"]) == (3, "unknown-op")


# ------------------------------------------------------------ dispatcher
async def test_create_show_set_delete(env):
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c1", memory="2GiB", labels={"vgpu.io/class": "x"})
    assert r["ok"], r
    s = r["result"]["slice"]
    assert s["gpus"][0]["memory_limit"] == 2 * GiB and s["compute"]["percent"] == 10
    assert s["devices"]["major"] == 240
    sid = s["slice_id"]
    assert k.slices_[sid].name == "c1"
    assert (await call(mgr, "create", container="c1"))["error"]["code"] == "exists"
    r = await call(mgr, "set-quota", container="c1", memory="3GiB", compute="30%")
    assert r["ok"] and k.slices_[sid].gpu(0).mem_limit == 3 * GiB
    assert r["result"]["slice"]["compute"]["percent"] == 30
    r = await call(mgr, "set-quota", container="c1", profile="small")
    assert r["result"]["slice"]["profile"] == "small"
    assert k.slices_[sid].gpu(0).mem_limit == 3 * GiB          # explicit memory wins
    assert (await call(mgr, "set-quota", container="c1", profile="huge"))["error"]["code"] == "bad-request"
    listed = (await call(mgr, "list"))["result"]["slices"]
    assert [x["container"] for x in listed] == ["c1"]
    state = json.loads((tmp / "state" / "state.json").read_text())
    assert state["slices"]["c1"]["slice_id"] == sid
    assert (await call(mgr, "delete", container="c1"))["ok"]
    assert sid not in k.slices_
    assert (await call(mgr, "show", container="c1"))["error"]["code"] == "not-found"
    assert (await call(mgr, "delete", container="c1"))["error"]["code"] == "not-found"


OWNER_A = {"runtime": "runc", "root": "/run/containerd/runc/k8s.io", "namespace": "k8s.io",
           "pod": "0c4a1e6e-7a5b-4c33-9a0e-3d5f7b2b1c11"}


async def test_owner_reuse_and_delete(env):
    """Slices are owned (docs/api.md, "Owners"): the owner gets its slice
    back, a same-named container of another runc root or containerd
    namespace is refused it and cannot delete it; vgpuctl (no owner) can."""
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c1", memory="2GiB", owner=OWNER_A)
    assert r["ok"], r
    s = r["result"]["slice"]
    assert s["owner"] == OWNER_A and "reused" not in r["result"]
    # the same owner again (a hook wired twice): its slice, nothing new
    n_calls = len(k.calls)
    r = await call(mgr, "create", container="c1", memory="2GiB", owner=dict(OWNER_A))
    assert r["ok"] and r["result"]["reused"] is True
    assert r["result"]["slice"]["slice_id"] == s["slice_id"] and len(k.calls) == n_calls
    # another runtime root, another containerd namespace, another runtime,
    # no owner at all (vgpuctl): the name is taken, nothing is shared
    others = [dict(OWNER_A, root="/run/containerd/runc/default"),
              dict(OWNER_A, namespace="default"), dict(OWNER_A, runtime="crun"),
              {k_: v for k_, v in OWNER_A.items() if k_ != "pod"}]
    for other in others + [None]:
        args = {"owner": other} if other else {}
        r = await call(mgr, "create", container="c1", memory="2GiB", **args)
        assert r["error"]["code"] == "exists", (other, r)
        assert "k8s.io" in r["error"]["message"] and r["error"]["owner"] == OWNER_A
        if other:
            r = await call(mgr, "delete", container="c1", force=True, owner=other)
            assert r["error"]["code"] == "not-owner", (other, r)
            assert "left alone" in r["error"]["message"]
    assert s["slice_id"] in k.slices_ and len(mgr.records) == 1
    # persisted with the slice: a restarted daemon knows the owner
    state = json.loads((tmp / "state" / "state.json").read_text())
    assert state["slices"]["c1"]["owner"] == OWNER_A
    mgr2 = SliceManager(mgr.cfg, "test.toml", KernelPort(factory=lambda: k),
                        StateStore(tmp / "state"), FakeInventory())
    mgr2.load_state()
    assert mgr2.records["c1"]["owner"] == OWNER_A
    r = await call(mgr2, "delete", container="c1", owner=dict(OWNER_A, pod="other"))
    assert r["error"]["code"] == "not-owner"
    # the owner deletes it; an operator's slice (no owner) is the operator's
    assert (await call(mgr2, "delete", container="c1", force=True, owner=OWNER_A))["ok"]
    assert s["slice_id"] not in k.slices_
    assert (await call(mgr2, "create", container="cdi-1", memory="1GiB"))["ok"]
    assert (await call(mgr2, "delete", container="cdi-1", owner=OWNER_A))["error"]["code"] \
        == "not-owner"
    assert (await call(mgr2, "delete", container="cdi-1"))["ok"]       # vgpuctl delete


@pytest.mark.parametrize("owner,words", [
    ("runc", "is not an owner object"),
    ({}, "args.owner.runtime: missing"),
    ({"runtime": "runc", "user": "x"}, "args.owner.user: unknown owner field"),
    ({"runtime": ""}, "args.owner.runtime"),
    ({"runtime": "runc/../x"}, "args.owner.runtime"),
    ({"runtime": 7}, "is not a string"),
    ({"runtime": "runc", "root": "run/runc"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/run/runc/"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/run/../runc"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/run/\nrunc"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/" + "r" * 2000}, "normalized absolute path"),
    ({"runtime": "runc", "namespace": "k8s io"}, "containerd namespace"),
    ({"runtime": "runc", "namespace": "-x"}, "containerd namespace"),
    ({"runtime": "runc", "namespace": "a" * 77}, "containerd namespace"),
    ({"runtime": "runc", "pod": "uid with space"}, "pod uid"),
    ({"runtime": "runc", "pod": None}, "is not a string"),
])
async def test_bad_owner_is_refused_and_leaves_nothing(env, owner, words):
    mgr, k, tmp = env
    for op, args in (("create", {"container": "c9", "memory": "1GiB"}),
                     ("delete", {"container": "c9"})):
        r = await call(mgr, op, owner=owner, **args)
        assert r["error"]["code"] == "bad-request", r
        assert words in r["error"]["message"], r["error"]["message"]
    assert mgr.records == {} and k.calls == []
    assert not (tmp / "state" / "state.json").exists()


async def test_admission_and_placement(env):
    mgr, k, _ = env
    assert (await call(mgr, "create", container="big", memory="17GiB"))["error"]["code"] == "admission"
    a = (await call(mgr, "create", container="a", memory="10GiB"))["result"]["slice"]
    b = (await call(mgr, "create", container="b", memory="10GiB"))["result"]["slice"]
    assert {a["gpus"][0]["gpu"], b["gpus"][0]["gpu"]} == {0, 1}            # spread
    r = await call(mgr, "create", container="c", memory="8GiB")
    assert r["error"]["code"] == "admission", r
    r = await call(mgr, "set-quota", container="a", memory="17GiB")
    assert r["error"]["code"] == "admission"
    assert (await call(mgr, "set-quota", container="a", memory="16GiB"))["ok"]
    assert (await call(mgr, "create", container="g", gpus=[5]))["error"]["code"] == "not-found"
    f1 = await call(mgr, "create", container="f1", gpus=[0], memory=0, profile="fixed50")
    assert f1["ok"], f1
    f2 = await call(mgr, "create", container="f2", gpus=[0], memory=0, profile="fixed50")
    assert f2["ok"], f2
    f3 = await call(mgr, "create", container="f3", gpus=[0], memory=0, profile="fixed50")
    assert f3["error"]["code"] == "admission" and "100" in f3["error"]["message"] or "50" in f3["error"]["message"]


async def test_set_quota_may_keep_or_shrink_on_an_overcommitted_gpu(env, tmp_path):
    """Slices admitted while oversubscription was on may still shrink (or
    keep their quota) after it is turned off; growing is refused."""
    mgr, k, _ = env
    strict = mgr.cfg
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path) + "[node]\noversubscribe_memory = true\n",
                           "test.toml")
    assert (await call(mgr, "create", container="a", gpus=[0], memory="12GiB"))["ok"]
    assert (await call(mgr, "create", container="b", gpus=[0], memory="12GiB"))["ok"]
    mgr.cfg = strict
    r = await call(mgr, "set-quota", container="b", memory="12GiB")
    assert r["ok"], r
    r = await call(mgr, "set-quota", container="b", memory="10GiB")
    assert r["ok"], r
    r = await call(mgr, "set-quota", container="b", memory="11GiB")
    assert r["error"]["code"] == "admission", r


async def test_kernel_refusal_and_unavailable(env, tmp_path):
    mgr, k, _ = env
    s = (await call(mgr, "create", container="c", memory="1GiB"))["result"]["slice"]
    k.slices_[s["slice_id"]].open_files = 1
    r = await call(mgr, "delete", container="c")
    assert r["error"]["code"] == "kernel" and "EBUSY" in r["error"]["message"]
    assert (await call(mgr, "delete", container="c", force=True))["ok"]

    from vgpu.daemon.kernel import VgpuNotLoaded

    def absent():
        raise VgpuNotLoaded()
    cfg = mgr.cfg
    m2 = SliceManager(cfg, "x", KernelPort(factory=absent), StateStore(tmp_path / "s2"), FakeInventory())
    assert (await call(m2, "create", container="c"))["error"]["code"] == "unavailable"
    st = (await call(m2, "status"))["result"]
    assert st["kernel"]["loaded"] is False and st["slices"] == 0


async def test_handler_bug_answers_internal(env, monkeypatch):
    mgr, _, _ = env

    async def boom(args):
        raise ZeroDivisionError("x")
    monkeypatch.setattr(mgr, "op_list", boom)
    r = await call(mgr, "list")
    assert r["error"]["code"] == "internal"


# ------------------------------------------------------- reconcile and GC
async def test_reconcile_adopt_recreate_correct(env):
    mgr, k, tmp = env
    await call(mgr, "create", container="want", memory="1GiB")
    await call(mgr, "create", container="changed", memory="1GiB")
    sid_want = mgr.records["want"]["slice_id"]
    sid_changed = mgr.records["changed"]["slice_id"]
    del k.slices_[sid_want]                                    # the kernel lost it
    k.slices_[sid_changed].gpu(0).mem_limit = 5               # drifted
    k.slice_new(900, [(1, 2 * GiB)], name="stranger")         # nobody wanted it
    # a restarted daemon: new manager on the same state and kernel
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"), FakeInventory())
    m2.load_state()
    counts = await m2.reconcile()
    assert counts == {"adopted": 1, "recreated": 1, "corrected": 1, "kept": 0}
    assert k.slices_[sid_want].name == "want"
    assert k.slices_[sid_changed].gpu(0).mem_limit == GiB
    assert m2.records["stranger"]["gpus"][0]["memory"] == 2 * GiB
    assert m2.records["stranger"]["gpus"][0]["gpu"] == 1
    counts = await m2.reconcile()
    assert counts["kept"] == 3 and counts["adopted"] == counts["recreated"] == 0
    s = (await call(m2, "create", container="new", memory="1GiB"))["result"]["slice"]
    assert s["slice_id"] not in (sid_want, sid_changed, 900)


async def test_max_channels_sent_on_create_and_recreate(env):
    """[node] max_channels reaches slice_new on create and when reconcile
    recreates a lost slice (default 256; 0, no cap, is sent as 0)."""
    mgr, k, tmp = env
    sent = []
    real_new = k.slice_new

    def spy(*a, **kw):
        sent.append(kw.get("max_channels"))
        return real_new(*a, **kw)

    k.slice_new = spy
    assert (await call(mgr, "create", container="c1", memory="1GiB"))["ok"]
    sid = mgr.records["c1"]["slice_id"]
    assert sent == [256] and k.slices_[sid].max_channels == 256

    def manager(extra):
        cfg = parse_config(CONFIG.format(tmp=tmp) + extra, "test.toml")
        m = SliceManager(cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"),
                         FakeInventory())
        m.load_state()
        return m

    m2 = manager("[node]\nmax_channels = 32\n")
    del k.slices_[sid]                                         # the kernel lost it
    assert (await m2.reconcile())["recreated"] == 1
    assert sent == [256, 32] and k.slices_[sid].max_channels == 32
    assert (await call(m2, "create", container="c2", memory="1GiB"))["ok"]
    assert sent == [256, 32, 32]
    m3 = manager("[node]\nmax_channels = 0\n")
    assert (await call(m3, "create", container="c3", memory="1GiB"))["ok"]
    assert sent == [256, 32, 32, 0]


async def test_gc_dead_pid_and_missing_cgroup(env, tmp_path, monkeypatch):
    mgr, k, _ = env
    monkeypatch.setattr(S, "CGROUP_ROOT", str(tmp_path))
    (tmp_path / "cg").mkdir()
    p = subprocess.Popen(["sleep", "30"])
    try:
        await call(mgr, "create", container="p", pid=p.pid)
        await call(mgr, "create", container="cg", cgroup="/cg")
        await call(mgr, "create", container="keep")
        (tmp_path / "cg").rmdir()                 # the container's cgroup is gone
        assert await mgr.collect() == ["cg"]
    finally:
        p.kill()
        p.wait()
    assert await mgr.collect() == ["p"]
    assert set(mgr.records) == {"keep"}
    assert [s.name for s in k.slices()] == ["keep"]
    assert (await call(mgr, "create", container="dead", pid=4194000))["error"]["code"] in ("not-found", "bad-request")


def test_over_quota_pure():
    g = GpuInfo(0, "GPU-x", "Sim", "0000:01:00.0", 16 * GiB, 0, 0, proc_memory={10: 3 * GiB, 11: GiB, 99: 8 * GiB})
    s = Slice(id=1, name="c", pids=[10, 11], gpus=[GpuUsage(index=0, real_minor=0, mem_limit=3 * GiB, mem_used=3 * GiB)])
    found = over_quota([("c", s)], [g])
    assert found == [{"container": "c", "gpu": 0, "real_minor": 0, "limit": 3 * GiB,
                      "driver_used": 4 * GiB, "kernel_used": 3 * GiB, "pids": [10, 11]}]
    s.gpus[0].mem_limit = 4 * GiB
    assert over_quota([("c", s)], [g]) == []


async def test_metrics_render(env):
    from vgpu.daemon.metrics import render
    mgr, _, _ = env
    await call(mgr, "create", container="m1", memory="1GiB")
    await mgr.kdump()
    text = render(mgr)
    assert 'vgpu_slice_memory_limit_bytes{container="m1"' in text
    assert "vgpu_gpu_memory_total_bytes" in text and "vgpud_slices 1" in text
    assert 'vgpu_gpu_memory_allocated_bytes{gpu="0"' in text


# ------------------------------------------------------------ real socket
async def _serve(mgr, tmp, **kw):
    srv = api.Server(mgr, str(tmp / "api.sock"), **kw)
    return srv


async def _connect(path):
    return await trio.open_unix_socket(path)


async def _rpc(stream, doc) -> dict:
    await stream.send_all(json.dumps(doc).encode() + b"\n")
    return json.loads(await _readline(stream))


async def _readline(stream) -> bytes:
    buf = b""
    with trio.fail_after(10):
        while not buf.endswith(b"\n"):
            d = await stream.receive_some(65536)
            if not d:
                break
            buf += d
    return buf


async def test_socket_hostile_and_parallel(env):
    mgr, _, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"), read_timeout=0.5, idle_timeout=3.0)
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        assert oct(os.stat(srv.path).st_mode & 0o777) == "0o660"
        # 100 parallel idle connections and 30 half-open requests
        idle = [await _connect(srv.path) for _ in range(100)]
        half = []
        for _ in range(30):
            s = await _connect(srv.path)
            await s.send_all(b'{"v": 1, "op": "sta')
            half.append(s)
        good = await _connect(srv.path)
        r = await _rpc(good, {"v": 1, "id": 1, "op": "status"})
        assert r["ok"] and r["id"] == 1
        # several requests on one connection, answered in order
        await good.send_all(b'{"v":1,"id":"a","op":"list"}\n\n{"v":1,"id":"b","op":"gpus"}\n')
        got = b""
        with trio.fail_after(5):
            while got.count(b"\n") < 2:
                got += await good.receive_some(65536)
        assert [json.loads(x)["id"] for x in got.splitlines()] == ["a", "b"]
        # a huge line: too-large, then closed
        big = await _connect(srv.path)
        await big.send_all(b"x" * (api.MAX_LINE + 10))
        r = json.loads(await _readline(big))
        assert r["error"]["code"] == "too-large"
        assert await _readline(big) == b""
        # the half-open ones time out with an error; the server still serves
        for s in half[:3]:
            r = json.loads(await _readline(s))
            assert r["error"]["code"] == "bad-request" and "within" in r["error"]["message"]
        r = await _rpc(good, {"v": 1, "id": 2, "op": "create", "args": {"container": "z"}})
        assert r["ok"], r
        # events stream
        ev = await _connect(srv.path)
        assert (await _rpc(ev, {"v": 1, "id": 9, "op": "events"}))["ok"]
        await _rpc(good, {"v": 1, "id": 3, "op": "delete", "args": {"container": "z"}})
        e = json.loads(await _readline(ev))
        assert e["event"]["type"] == "slice-deleted" and e["event"]["container"] == "z"
        await ev.aclose()
        for s in idle + half + [good, big]:
            await s.aclose()
        srv.stop()
        await srv.drain(1)
    assert not os.path.exists(srv.path)


async def test_socket_idle_timeout_and_drain(env):
    mgr, _, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"), idle_timeout=0.3)
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        s = await _connect(srv.path)
        assert await _readline(s) == b""              # closed after 0.3 s of silence
        s2 = await _connect(srv.path)
        srv.stop()
        await srv.drain(1)
        with pytest.raises(OSError):
            socket.socket(socket.AF_UNIX).connect(srv.path)
        await s2.aclose()


class _SlowHandler:
    """``status`` takes ``delay`` seconds (and notes whether it was
    cancelled); ``list`` is quick; ``events`` never sends anything."""

    def __init__(self, delay: float):
        self.delay = delay
        self.entered = trio.Event()
        self.cancelled = False
        self.subscribers = []

    async def op_status(self, args):
        self.entered.set()
        try:
            await trio.sleep(self.delay)
        except trio.Cancelled:
            self.cancelled = True
            raise
        return {"slow": True}

    async def op_list(self, args):
        return {"slices": []}

    def subscribe(self, n):
        send, recv = trio.open_memory_channel(n)
        self.subscribers.append(send)
        return recv


async def test_stop_lets_an_inflight_request_finish_within_the_deadline(tmp_path):
    """On stop: idle connections and streams end and new clients are refused
    at once; a request in flight is answered (it ends within the deadline),
    and the request queued behind it on its connection is not."""
    h = _SlowHandler(0.4)
    srv = api.Server(h, str(tmp_path / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        idle = await _connect(srv.path)
        ev = await _connect(srv.path)
        assert (await _rpc(ev, {"v": 1, "id": 0, "op": "events"}))["ok"]
        a = await _connect(srv.path)
        await a.send_all(b'{"v":1,"id":1,"op":"status"}\n{"v":1,"id":2,"op":"list"}\n')
        with trio.fail_after(5):
            await h.entered.wait()
        t0 = trio.current_time()
        n.start_soon(srv.drain, 3.0)
        assert await _readline(idle) == b""
        assert await _readline(ev) == b""
        await _until(lambda: not os.path.exists(srv.path))
        with pytest.raises(OSError):
            await trio.open_unix_socket(srv.path)
        assert trio.current_time() - t0 < 0.3            # all that while status runs
        r = json.loads(await _readline(a))
        assert r == {"v": 1, "id": 1, "ok": True, "result": {"slow": True}}
        assert await _readline(a) == b""                   # id 2 not served: closed
        for s in (idle, ev, a):
            await s.aclose()
    assert not h.cancelled
    assert 0.3 < trio.current_time() - t0 < 2.0          # the request's time, not the grace


async def test_stop_cancels_a_request_that_overruns_the_deadline(tmp_path):
    h = _SlowHandler(60)
    srv = api.Server(h, str(tmp_path / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        a = await _connect(srv.path)
        await a.send_all(b'{"v":1,"id":1,"op":"status"}\n')
        with trio.fail_after(5):
            await h.entered.wait()
        t0 = trio.current_time()
        await srv.drain(0.5)
        took = trio.current_time() - t0
        assert h.cancelled
        assert await _readline(a) == b""                   # no reply: cancelled, closed
        await a.aclose()
    assert 0.45 < took < 1.0, took
    assert trio.current_time() - t0 < 1.5                 # run() had returned
    assert not os.path.exists(srv.path)


async def test_accept_out_of_fds_backs_off_and_recovers(env, caplog):
    """accept(2) failing with EMFILE (the process is out of descriptors) is
    logged and retried after a pause; the client waiting in the backlog is
    served once descriptors are free, and the server never stopped."""
    import resource
    mgr, _, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"))
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
            await _until(lambda: len(emfiles()) >= 3, timeout=5)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        t = emfiles()
        assert t[2].created - t[0].created >= 0.15         # paused between tries, no spin
        s = trio.SocketStream(c)
        assert (await _rpc(s, {"v": 1, "id": 1, "op": "status"}))["ok"]
        s2 = await _connect(srv.path)
        assert (await _rpc(s2, {"v": 1, "id": 2, "op": "list"}))["ok"]
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


# ------------------------------------------------------------ command line
def _vgpud(*args):
    return subprocess.run([sys.executable, "-m", "vgpu.daemon.main", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_check_config(tmp_path):
    r = _vgpud("--check-config", str(ROOT / "config" / "vgpud.example.toml"))
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[profiles.small]\nmemory = "4GB"\n')
    r = _vgpud("--check-config", str(bad))
    assert r.returncode == 1 and "profiles.small.memory" in r.stderr and '"4GB"' in r.stderr
    r = _vgpud("--help")
    assert r.returncode == 0 and "--check-config" in r.stdout and "SIGHUP" in r.stdout


async def test_create_binds_cgroup(env, tmp_path, monkeypatch):
    """A slice created with a cgroup is bound to it in vgpu.ko (an fd of the
    directory, relative to the cgroup root unless absolute under it); the fd
    is closed again; a missing or non-directory cgroup is a bad request."""
    mgr, k, _ = env
    monkeypatch.setattr(S, "CGROUP_ROOT", str(tmp_path))
    (tmp_path / "pod" / "c1").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    nfds = len(os.listdir("/proc/self/fd"))
    s = (await call(mgr, "create", container="c1", cgroup="pod/c1"))["result"]["slice"]
    assert k.slice_get(s["slice_id"]).cgroup_id == (tmp_path / "pod" / "c1").stat().st_ino
    s2 = (await call(mgr, "create", container="c2", cgroup=str(tmp_path / "pod")))["result"]["slice"]
    assert k.slice_get(s2["slice_id"]).cgroup_id == (tmp_path / "pod").stat().st_ino
    s3 = (await call(mgr, "create", container="c3"))["result"]["slice"]
    assert k.slice_get(s3["slice_id"]).cgroup_id == 0
    for bad in ("/no-such", "file"):
        r = await call(mgr, "create", container="bad", cgroup=bad)
        assert r["error"]["code"] == "bad-request", r
    assert "bad" not in mgr.records
    assert len(os.listdir("/proc/self/fd")) == nfds
    # recreated by reconcile: bound again
    del k.slices_[s["slice_id"]]
    counts = await mgr.reconcile()
    assert counts["recreated"] == 1
    assert k.slice_get(s["slice_id"]).cgroup_id == (tmp_path / "pod" / "c1").stat().st_ino


async def test_attach_binds_an_operators_slice_to_one_container_at_a_time(env, tmp_path,
                                                                          monkeypatch):
    """The CDI flow (issue 18 (2), (7)): vgpu.ko opens an unbound slice for
    host administrators only, so a container's hook attaches the operator's
    slice to the container's own cgroup.  One container at a time; a slice
    made for a container is never attached elsewhere; bad cgroups leave
    nothing; the attachment survives a reconcile and is not a reason to
    collect the operator's slice."""
    mgr, k, _ = env
    monkeypatch.setattr(S, "CGROUP_ROOT", str(tmp_path))
    for d in ("a", "b", "own"):
        (tmp_path / d).mkdir()
    (tmp_path / "a" / "cgroup.procs").write_text("101\n")   # a plain dir stands for a cgroup
    op = (await call(mgr, "create", container="op"))["result"]["slice"]
    assert k.slice_get(op["slice_id"]).cgroup_id == 0
    r = await call(mgr, "attach", container="op", cgroup="a")
    assert r["ok"], r
    assert r["result"]["slice"]["attached"] == "a"
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "a").stat().st_ino
    # another container while "a" still runs: refused, binding unchanged
    r = await call(mgr, "attach", container="op", cgroup="b")
    assert r["error"]["code"] == "exists" and "still run" in r["error"]["message"], r
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "a").stat().st_ino
    # "a" has ended: the next container gets it
    (tmp_path / "a" / "cgroup.procs").write_text("")
    assert (await call(mgr, "attach", container="op", cgroup="b"))["ok"]
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "b").stat().st_ino
    # not a container's slice, not a bad cgroup, not a missing slice
    own = (await call(mgr, "create", container="own", cgroup="own"))["result"]["slice"]
    r = await call(mgr, "attach", container="own", cgroup="b")
    assert r["error"]["code"] == "bad-request" and "made for a container" in r["error"]["message"]
    assert k.slice_get(own["slice_id"]).cgroup_id == (tmp_path / "own").stat().st_ino
    for bad in ("/no-such", ""):
        r = await call(mgr, "attach", container="op", cgroup=bad)
        assert r["error"]["code"] == "bad-request", r
    assert (await call(mgr, "attach", container="nope", cgroup="b"))["error"]["code"] == "not-found"
    assert mgr.records["op"]["attached"] == "b"
    # the operator's slice is not collected when its container goes
    assert "op" not in await mgr.collect()
    # recreated by reconcile: attached again while its container runs
    (tmp_path / "b" / "cgroup.procs").write_text("202\n")
    del k.slices_[op["slice_id"]]
    assert (await mgr.reconcile())["recreated"] >= 1
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "b").stat().st_ino


# ------------------------------------------------------------ issue 18 (3): profile limits
LIMITS = """
[profiles.small]
memory = "4GiB"
compute = "25%"
max_memory = "8GiB"
max_compute = "50%"
allow_priorities = ["low"]
allow_image_env = true
[profiles.fixed50]
memory = "2GiB"
compute = "50%"
policy = "fixed"
"""


async def test_create_is_held_to_its_profiles_limits(env, tmp_path):
    mgr, k, _ = env
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path).split("[profiles.small]")[0] + LIMITS,
                           "test.toml")
    for args, words in ((dict(memory="12GiB"), 'memory 12 GiB exceeds profile "small"\'s '
                                               'max_memory 8 GiB'),
                        (dict(compute="80%"), 'compute 80% exceeds profile "small"\'s '
                                              'max_compute 50%'),
                        (dict(priority="high"), 'priority "high" is not allowed by profile '
                                                '"small" (allow_priorities: low)')):
        r = await call(mgr, "create", container="x", profile="small", **args)
        assert r["error"]["code"] == "admission" and words in r["error"]["message"], r
    assert "x" not in mgr.records and k.slices_ == {}
    r = await call(mgr, "create", container="ok", profile="small", memory="8GiB")
    assert r["ok"], r
    # a request from the image's environment needs a profile that allows it
    r = await call(mgr, "create", container="img", profile="fixed50", from_image=True)
    assert r["error"]["code"] == "admission" and "allow_image_env" in r["error"]["message"], r
    r = await call(mgr, "create", container="img", from_image=True)
    assert r["error"]["code"] == "admission" and "none was named" in r["error"]["message"], r
    r = await call(mgr, "create", container="img", profile="small", from_image=True)
    assert r["ok"], r
    st = await call(mgr, "status")
    assert st["result"]["image_env_profiles"] == ["small"]
    # without limits (and without a profile) a request is held to capacity only
    assert (await call(mgr, "create", container="free", memory="12GiB"))["ok"]


# ------------------------------------------------------------ audit mode
AUDIT_CONFIG = CONFIG + """
[profiles.trial]
memory = "2GiB"
audit = true
allow_list = "{tmp}/trial.allow"
[profiles.prod]
memory = "2GiB"
allow_list = "{tmp}/trial.allow"
"""
ALLOW = ("kind\tnumber\tname\ncontrol\t0x20800a3e\t\n"
         "escape\t0x5c\tNV_ESC_RM_EXPORT_OBJECT_TO_FD\n")
PAIRS = [(0, 0x5C), (2, 0x20800A3E)]


@pytest.fixture
def aenv(env):
    mgr, k, tmp = env
    (tmp / "trial.allow").write_text(ALLOW)
    mgr.cfg = parse_config(AUDIT_CONFIG.format(tmp=tmp), "test.toml")
    return mgr, k, tmp


@pytest.mark.parametrize("line,words", [
    (b'{"v": 1, "op": "audit"}', "args.container: missing (required by audit)"),
    (b'{"v": 1, "op": "audit", "args": {"container": "a/b"}}', 'args.container: "a/b"'),
    (b'{"v": 1, "op": "audit", "args": {"container": "c", "json": true}}',
     "args.json: unknown argument of audit (known: container)"),
    (b'{"v": 1, "op": "set-audit", "args": {"container": "c"}}',
     "args.audit: missing (required by set-audit)"),
    (b'{"v": 1, "op": "set-audit", "args": {"container": "c", "audit": "on"}}',
     'args.audit: "on" is not true or false'),
    (b'{"v": 1, "op": "set-audit", "args": {"container": "c", "audit": 1}}',
     "args.audit: 1 is not true or false"),
])
def test_audit_ops_validate_and_quote(line, words):
    with pytest.raises(ApiError) as ei:
        parse_request(line)
    assert ei.value.code == "bad-request" and words in ei.value.message, ei.value.message
    r = parse_request(b'{"v": 1, "op": "set-audit", "args": {"container": "c", "audit": false}}')
    assert (r.op, r.args) == ("set-audit", {"container": "c", "audit": False})


async def test_create_sends_the_profiles_audit_and_allow(aenv):
    """A slice of a profile with audit/allow_list is created with them; a
    slice of any other profile (or none) gets neither attribute, so a
    vgpu.ko older than audit mode still takes it."""
    mgr, k, tmp = aenv
    r = await call(mgr, "create", container="t1", profile="trial")
    assert r["ok"], r
    sid = r["result"]["slice"]["slice_id"]
    assert k.audit_calls == [(sid, True, PAIRS)]
    assert r["result"]["slice"]["audit"] is True and r["result"]["slice"]["allow_count"] == 2
    r = await call(mgr, "create", container="p1", profile="prod")
    assert k.audit_calls[-1] == (r["result"]["slice"]["slice_id"], None, PAIRS)
    assert r["result"]["slice"]["audit"] is False
    n = len(k.audit_calls)
    for c, args in (("s1", {"profile": "small"}), ("plain", {})):
        r = await call(mgr, "create", container=c, **args)
        assert r["ok"] and r["result"]["slice"]["audit"] is False
        assert r["result"]["slice"]["allow_count"] == 0
    assert len(k.audit_calls) == n
    # shown as the kernel has it
    s = (await call(mgr, "show", container="t1"))["result"]["slice"]
    assert (s["audit"], s["allow_count"]) == (True, 2)


async def test_set_audit_switches_persists_and_survives_recreate(aenv):
    mgr, k, tmp = aenv
    sid = (await call(mgr, "create", container="c1", profile="prod"))["result"]["slice"]["slice_id"]
    sub = mgr.subscribe()
    r = await call(mgr, "set-audit", container="c1", audit=True)
    assert r["ok"], r
    assert r["result"]["slice"]["audit"] is True and k.slices_[sid].audit is True
    assert k.audit_calls[-1] == (sid, True, None)          # the allow-list is left alone
    ev = sub.receive_nowait()
    assert (ev["type"], ev["container"], ev["audit"]) == ("slice-changed", "c1", True)
    state = json.loads((tmp / "state" / "state.json").read_text())
    assert state["slices"]["c1"]["audit"] is True
    # the kernel lost the slice: recreated with the operator's audit mode and
    # the profile's allow-list
    del k.slices_[sid]
    assert (await mgr.reconcile())["recreated"] == 1
    assert k.slices_[sid].audit is True and k.audit_calls[-1] == (sid, True, PAIRS)
    # off wins over the profile's audit = true, also when recreated
    r = await call(mgr, "create", container="t1", profile="trial")
    sid2 = r["result"]["slice"]["slice_id"]
    r = await call(mgr, "set-audit", container="t1", audit=False)
    assert r["result"]["slice"]["audit"] is False and k.slices_[sid2].audit is False
    del k.slices_[sid2]
    await mgr.reconcile()
    assert k.slices_[sid2].audit is False and k.audit_calls[-1] == (sid2, None, PAIRS)
    assert (await call(mgr, "set-audit", container="nope", audit=True))["error"]["code"] \
        == "not-found"


async def test_audit_op_result(aenv):
    mgr, k, _ = aenv
    r = await call(mgr, "create", container="t1", profile="trial")
    sid = r["result"]["slice"]["slice_id"]
    r = await call(mgr, "audit", container="t1")
    assert r["ok"] and r["result"] == {"container": "t1", "slice_id": sid, "audit": True,
                                       "dropped": 0, "allow_count": 2, "entries": []}
    k.audit_[sid] = [
        AuditEntry(U.VGPU_AUDIT_UVM, 0x1, U.VGPU_AUDIT_NOT_IMPLEMENTED, 3, 0, 3),
        AuditEntry(U.VGPU_AUDIT_CONTROL, 0x20801301, U.VGPU_AUDIT_REWRITE, 4, 0, 0),
        AuditEntry(U.VGPU_AUDIT_ESCAPE, 0x5C, U.VGPU_AUDIT_REFUSE, 2, 0, 2),
        AuditEntry(U.VGPU_AUDIT_CLASS, 0x80, U.VGPU_AUDIT_FORWARD, 1, 0, 0),
        AuditEntry(U.VGPU_AUDIT_CONTROL, 0xFFFFFFF0, U.VGPU_AUDIT_REFUSE, 5, 5, 0),
        AuditEntry(U.VGPU_AUDIT_CONTROL, 0x20800145, U.VGPU_AUDIT_VIRTUALISE, 1, 0, 0),
    ]
    res = (await call(mgr, "audit", container="t1"))["result"]
    assert (res["audit"], res["dropped"], res["allow_count"]) == (True, 3, 2)
    assert res["entries"] == [
        {"kind": "escape", "number": 0x5C, "name": "NV_ESC_RM_EXPORT_OBJECT_TO_FD",
         "verdict": "refuse", "calls": 2, "refused": 0, "let_through": 2},
        {"kind": "class", "number": 0x80, "name": "NV01_DEVICE_0", "verdict": "forward",
         "calls": 1, "refused": 0, "let_through": 0},
        {"kind": "control", "number": 0x20800145, "name": nvnames.name("control", 0x20800145),
         "verdict": "virtualise", "calls": 1, "refused": 0, "let_through": 0},
        {"kind": "control", "number": 0x20801301, "name": "NV2080_CTRL_CMD_FB_GET_INFO",
         "verdict": "rewrite", "calls": 4, "refused": 0, "let_through": 0},
        {"kind": "control", "number": 0xFFFFFFF0, "name": "", "verdict": "refuse",
         "calls": 5, "refused": 5, "let_through": 0},
        {"kind": "uvm", "number": 0x1, "name": "UVM_RESERVE_VA", "verdict": "not-implemented",
         "calls": 3, "refused": 0, "let_through": 3},
    ]
    # the same record as the API line vgpuctl reads (numbers are JSON integers)
    line = await handle_line(mgr, b'{"v": 1, "id": 1, "op": "audit", "args": {"container": "t1"}}')
    assert b'"number":92,' in line


async def test_audit_op_errors(aenv, monkeypatch):
    mgr, k, tmp = aenv
    assert (await call(mgr, "audit", container="ghost"))["error"]["code"] == "not-found"
    sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
    del k.slices_[sid]                                    # not in the kernel now
    r = await call(mgr, "audit", container="c1")
    assert r["error"]["code"] == "not-found" and f"slice {sid} of 'c1' is not in vgpu.ko" \
        in r["error"]["message"]
    await mgr.reconcile()

    def old_module(*a, **kw):                             # genl: no such command
        raise VgpuError(errno.EOPNOTSUPP, op="AUDIT_GET")
    monkeypatch.setattr(k, "audit_get", old_module)
    r = await call(mgr, "audit", container="c1")
    assert r["error"]["code"] == "kernel" and "vgpu.ko has no audit mode (AUDIT_GET: " \
        "EOPNOTSUPP)" in r["error"]["message"] and r["error"]["errno"] == "EOPNOTSUPP"

    def refused(*a, **kw):
        raise VgpuError(errno.EINVAL, op="SLICE_SET", extack="Unknown attribute type")
    monkeypatch.setattr(k, "slice_set", refused)
    r = await call(mgr, "set-audit", container="c1", audit=True)
    assert r["error"]["code"] == "kernel" and "Unknown attribute type" in r["error"]["message"]
    assert "audit" not in mgr.records["c1"]
    from vgpu.daemon.kernel import VgpuNotLoaded

    def absent():
        raise VgpuNotLoaded()
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=absent), StateStore(tmp / "s2"),
                      FakeInventory())
    m2.records = {"c1": dict(mgr.records["c1"])}
    assert (await call(m2, "audit", container="c1"))["error"]["code"] == "unavailable"


async def test_adopted_slice_keeps_its_audit_mode(aenv):
    mgr, k, _ = aenv
    k.slice_new(900, [(1, 2 * GiB)], name="stranger", audit=True)
    await mgr.reconcile()
    assert mgr.records["stranger"]["audit"] is True
    s = (await call(mgr, "show", container="stranger"))["result"]["slice"]
    assert s["audit"] is True


# ------------------------------------------------------------ trace
def _rec(sid, seq, op=U.VGPU_TRACE_IOCTL, **kw):
    from vgpu.daemon.kernel import TraceRecord
    if op == U.VGPU_TRACE_IOCTL:
        kw = {"node": U.VGPU_MINOR_CTL, "nr": 0x2B, "size": 48, "item_kind": U.VGPU_AUDIT_CLASS,
              "item": 0x41, "verdict": U.VGPU_AUDIT_FORWARD, "args_in": bytes(48),
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


async def _until(pred, timeout=10):
    with trio.fail_after(timeout):
        while not pred():
            await trio.sleep(0.01)


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
    r = json.loads(await handle_line(mgr, b'{"v": 1, "id": 4, "op": "trace", '
                                          b'"args": {"container": "c1"}}'))
    assert r["error"] == {"code": "bad-request", "message": "trace needs a stream connection"}


async def test_trace_stream_header_records_and_refcount(env):
    """Two tracers of one slice: the first turns its tracing on, both get
    its records (and no other slice's), and only the last to leave turns it
    off."""
    import re
    mgr, k, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"))
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
                     "vgpu_version": S._version()}
        assert k.slices_[sid].trace is True and k.trace_calls == [(sid, "set", True)]
        # the socket was joined before tracing was turned on
        assert len(k.streams) == 1
        k.trace(_rec(sid, 1, U.VGPU_TRACE_OPEN, node=U.VGPU_MINOR_CTL, open_flags=2),
                _rec(other, 1), _rec(sid, 2))
        got = [await a.get(), await a.get()]
        from vgpu.abi.trace import record_json
        assert got == [{"record": record_json(_rec(sid, 1, U.VGPU_TRACE_OPEN,
                                                   node=U.VGPU_MINOR_CTL, open_flags=2))},
                       {"record": record_json(_rec(sid, 2))}]
        assert got[1]["record"]["item"] == {"kind": "class", "number": 0x41,
                                            "name": "NV01_ROOT_CLIENT"}
        # a second tracer: no second SLICE_SET, and it sees what comes from now on
        b = await Lines.open(srv.path, {"v": 1, "id": 8, "op": "trace",
                                        "args": {"container": "c1"}})
        assert (await b.get())["ok"]
        assert k.trace_calls == [(sid, "set", True)] and mgr.tracing[sid].count == 2
        k.trace(_rec(sid, 3))
        assert (await a.get())["record"]["seq"] == 3
        assert (await b.get())["record"]["seq"] == 3
        # the first leaves: still traced
        await a.aclose()
        await _until(lambda: mgr.tracing[sid].count == 1)
        assert k.slices_[sid].trace is True and k.trace_calls == [(sid, "set", True)]
        k.trace(_rec(sid, 4))
        assert (await b.get())["record"]["seq"] == 4
        # the last one says anything: its trace ends and tracing is off
        await b.stream.send_all(b"bye\n")
        assert await b.get() is None
        await _until(lambda: sid not in mgr.tracing)
        assert k.slices_[sid].trace is False
        assert k.trace_calls == [(sid, "set", True), (sid, "set", False)]
        assert all(ts.closed for ts in k.streams)
        # the connection served nothing else meanwhile: the server still answers
        c = await _connect(srv.path)
        assert (await _rpc(c, {"v": 1, "id": 1, "op": "status"}))["ok"]
        await c.aclose()
        await b.aclose()
        srv.stop()
        await srv.drain(1)


async def test_trace_ends_when_the_slice_is_deleted(env):
    mgr, k, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
        a = await Lines.open(srv.path, {"v": 1, "id": 1, "op": "trace",
                                        "args": {"container": "c1"}})
        assert (await a.get())["ok"]
        k.trace(_rec(sid, 1), _rec(sid, 2, U.VGPU_TRACE_CLOSE))
        assert (await a.get())["record"]["seq"] == 1
        assert (await call(mgr, "delete", container="c1"))["ok"]
        assert (await a.get())["record"]["op"] == "close"
        assert await a.get() == {"end": True, "reason": "slice deleted"}
        assert await a.get() is None
        # turning off a slice that went with its tracing (ENOENT) is no error
        await _until(lambda: not mgr.tracing)
        assert k.trace_calls[-1] == (sid, "set", False)
        await a.aclose()
        srv.stop()
        await srv.drain(1)


async def test_trace_refusals(env, tmp_path):
    mgr, k, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"))
    async with trio.open_nursery() as n:
        await n.start(srv.run)
        a = await Lines.open(srv.path, {"v": 1, "id": 3, "op": "trace",
                                        "args": {"container": "ghost"}})
        r = await a.get()
        assert r["id"] == 3 and r["error"] == {"code": "not-found",
                                               "message": "no slice for container 'ghost'"}
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
        del k.slices_[mgr.records["c1"]["slice_id"]]
        a = await Lines.open(srv.path, {"v": 1, "id": 5, "op": "trace",
                                        "args": {"container": "c1"}})
        r = (await a.get())["error"]
        assert r["code"] == "not-found" and "is not in vgpu.ko now" in r["message"]
        assert k.streams[-1].closed and not mgr.tracing
        await a.aclose()
        srv.stop()
        await srv.drain(1)
    # vgpu.ko not loaded: the error every op gives
    from vgpu.daemon.kernel import VgpuNotLoaded

    def absent():
        raise VgpuNotLoaded()
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=absent), StateStore(tmp_path / "s2"),
                      FakeInventory())
    m2.records = {"c1": dict(mgr.records["c1"])}
    async with trio.open_nursery() as n:
        with pytest.raises(ApiError) as ei:
            await n.start(m2.trace, {"container": "c1"}, trio.open_memory_channel(1)[0])
    assert ei.value.code == "unavailable" and ei.value.message == "vgpu.ko is not loaded"


async def test_trace_drops_for_a_full_channel_only(env):
    """A tracer whose channel is full loses records (counted; its file shows
    the gaps), and gets the next ones once it has room again."""
    mgr, k, _ = env
    sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
    send, recv = trio.open_memory_channel(2)
    async with trio.open_nursery() as n:
        await n.start(mgr.trace, {"container": "c1"}, send)
        k.trace(*[_rec(sid, i) for i in range(1, 6)])
        await _until(lambda: recv.statistics().current_buffer_used == 2)
        await trio.sleep(0.05)
        assert [recv.receive_nowait()["record"]["seq"] for _ in range(2)] == [1, 2]
        k.trace(_rec(sid, 6))
        assert (await recv.receive())["record"]["seq"] == 6
        n.cancel_scope.cancel()
    assert not mgr.tracing and k.slices_[sid].trace is False


async def test_a_trace_client_that_stops_reading_is_dropped(env):
    mgr, k, tmp = env
    srv = api.Server(mgr, str(tmp / "api.sock"), idle_timeout=0.5)
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
        # and the server lives on
        await _until(lambda: not mgr.tracing)
        assert k.slices_[sid].trace is False
        c = await _connect(srv.path)
        assert (await _rpc(c, {"v": 1, "id": 2, "op": "status"}))["ok"]
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
        await n.start(mgr.trace, {"container": "c1"}, send)
        del k.slices_[sid]
        k.trace_calls.clear()
        await mgr.reconcile(startup=True)
        assert k.trace_calls == [(sid, "new", True)] and k.slices_[sid].trace is True
        n.cancel_scope.cancel()
    assert k.slices_[sid].trace is False
