"""Audit mode and allow-lists in vgpud (docs/config.md, "Audit mode and
allow-lists"; docs/api.md, audit and set-audit): the ops' validation, a
profile's audit and allow_list sent when its slice is created and again
when it is recreated, set-audit persisted, the audit record as the API
returns it, its errors, and an adopted slice's mode.  Against
daemon_support's FakeKernel (``aenv``).
"""

from __future__ import annotations

import errno
import json

import pytest

from vgpu.abi import nvnames
from vgpu.abi import uapi
from vgpu.daemon.ops import Ops
from vgpu.daemon.api import ApiError, handle_line, parse_request
from vgpu.daemon.config import parse_config
from vgpu.vgpuko.messages import AuditEntry
from vgpu.vgpuko.netlink import VgpuError
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import CONFIG, FakeInventory, GiB, call


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
        AuditEntry(uapi.VGPU_AUDIT_UVM, 0x1, uapi.VGPU_AUDIT_NOT_IMPLEMENTED, 3, 0, 3),
        AuditEntry(uapi.VGPU_AUDIT_CONTROL, 0x20801301, uapi.VGPU_AUDIT_REWRITE, 4, 0, 0),
        AuditEntry(uapi.VGPU_AUDIT_ESCAPE, 0x5C, uapi.VGPU_AUDIT_REFUSE, 2, 0, 2),
        AuditEntry(uapi.VGPU_AUDIT_CLASS, 0x80, uapi.VGPU_AUDIT_FORWARD, 1, 0, 0),
        AuditEntry(uapi.VGPU_AUDIT_CONTROL, 0xFFFFFFF0, uapi.VGPU_AUDIT_REFUSE, 5, 5, 0),
        AuditEntry(uapi.VGPU_AUDIT_CONTROL, 0x20800145, uapi.VGPU_AUDIT_VIRTUALISE, 1, 0, 0),
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
    line = await handle_line(Ops(mgr), b'{"v": 1, "id": 1, "op": "audit", "args": {"container": "t1"}}')
    assert b'"number":92,' in line


async def test_audit_op_errors(aenv, monkeypatch):
    mgr, k, tmp = aenv
    assert (await call(mgr, "audit", container="ghost"))["error"]["code"] == "not-found"
    sid = (await call(mgr, "create", container="c1"))["result"]["slice"]["slice_id"]
    del k.slices_[sid]                                    # not in the kernel now
    r = await call(mgr, "audit", container="c1")
    assert r["error"]["code"] == "not-found" and f'slice {sid} of "c1" is not in vgpu.ko' \
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
    assert mgr.records["c1"].audit is None
    from vgpu.vgpuko.netlink import VgpuNotLoaded

    def absent():
        raise VgpuNotLoaded()
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=absent), StateStore(tmp / "s2"),
                      FakeInventory())
    m2.records = {"c1": mgr.records["c1"].changed()}
    assert (await call(m2, "audit", container="c1"))["error"]["code"] == "unavailable"


async def test_adopted_slice_keeps_its_audit_mode(aenv):
    mgr, k, _ = aenv
    k.slice_new(900, [(1, 2 * GiB)], name="stranger", audit=True)
    await mgr.reconcile()
    assert mgr.records["stranger"].audit is True
    s = (await call(mgr, "show", container="stranger"))["result"]["slice"]
    assert s["audit"] is True
