"""Audit mode and the allow-list, end to end through netlink and a slice.

A slice in audit mode forwards what the release's policy refuses (it reaches
nvsim) and records every item its processes use with the policy's verdict;
out of audit mode only refusals are recorded; an allow-list entry lets one
refused item through without the rest of audit mode.  vgpuctl's side is
tested on the host (tests/host/test_ctl.py, test_audit_*) and in
test_daemon_e2e.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from vgpu.abi import uapi as U
from vgpu.vgpuko.netlink import Nla, VgpuError
from vgpu.abi.nvclient import RmError
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, nvsim_stat, sl, vgpu_leak_check  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
NV_ERR_INSUFFICIENT_PERMISSIONS = 0x1B


def policy_rows() -> list[tuple[str, int, str, str]]:
    release = nvsim_stat("release")
    out = []
    for line in (ROOT / "kmod/vgpu/policy" / f"{release}.tsv").read_text().splitlines()[1:]:
        kind, value, name, size, verdict, _reason, embedded = line.split("\t")
        if value != "?":
            out.append((kind, int(value, 16), size, verdict, embedded))
    return out


def refused_subdevice_control() -> tuple[int, int]:
    """A refused NV2080 control with a plain params size nvsim does not know."""
    for kind, value, size, verdict, _e in policy_rows():
        if kind == "control" and verdict == "refuse" and value >> 16 == 0x2080 and size.isdigit() \
                and 0 < int(size) <= 256:
            return value, int(size)
    pytest.skip("no refused NV2080 control with a small params struct")


def forwarded_subdevice_control() -> tuple[int, int]:
    for kind, value, size, verdict, embedded in policy_rows():
        if kind == "control" and verdict == "forward" and value >> 16 == 0x2080 and size.isdigit() \
                and 0 < int(size) <= 256 and embedded.startswith("-"):
            return value, int(size)
    pytest.skip("no forwarded NV2080 control with a small params struct")


def entries(kern, sid) -> dict[tuple[int, int], object]:
    rec = kern.audit_get(sid)
    return {(e.kind, e.number): e for e in rec.entries}


def call(c, obj, cmd, size) -> int:
    try:
        c.control(obj, cmd, bytes(size))
        return 0
    except RmError as e:
        return e.status


def test_enforcing_slice_records_refusals_only(sl, kern):
    c = sl.client()
    g = c.gpu(0)
    bad, bsize = refused_subdevice_control()
    good, gsize = forwarded_subdevice_control()
    assert call(c, g.hSubdevice, bad, bsize) == NV_ERR_INSUFFICIENT_PERMISSIONS
    call(c, g.hSubdevice, good, gsize)
    rec = kern.audit_get(sl.id)
    assert not rec.audit
    got = {(e.kind, e.number): e for e in rec.entries}
    e = got[(U.VGPU_AUDIT_CONTROL, bad)]
    assert (e.verdict, e.calls, e.refused, e.let_through) == (U.VGPU_AUDIT_REFUSE, 1, 1, 0)
    assert (U.VGPU_AUDIT_CONTROL, good) not in got


def test_audit_mode_forwards_what_the_policy_refuses_and_records_everything(sl, kern):
    kern.slice_set(sl.id, audit=True)
    c = sl.client()
    g = c.gpu(0)
    bad, bsize = refused_subdevice_control()
    good, gsize = forwarded_subdevice_control()
    st = call(c, g.hSubdevice, bad, bsize)
    assert st != NV_ERR_INSUFFICIENT_PERMISSIONS
    assert int(nvsim_stat("last_control"), 16) == bad      # it reached the driver
    call(c, g.hSubdevice, good, gsize)
    call(c, g.hSubdevice, good, gsize)
    got = entries(kern, sl.id)
    e = got[(U.VGPU_AUDIT_CONTROL, bad)]
    assert (e.verdict, e.calls, e.refused, e.let_through) == (U.VGPU_AUDIT_REFUSE, 1, 0, 1)
    e = got[(U.VGPU_AUDIT_CONTROL, good)]
    assert (e.verdict, e.calls, e.refused, e.let_through) == (U.VGPU_AUDIT_FORWARD, 2, 0, 0)
    # the classes and escapes the client's start-up used are there too
    kinds = {k for k, _ in got}
    assert {U.VGPU_AUDIT_ESCAPE, U.VGPU_AUDIT_CLASS, U.VGPU_AUDIT_CONTROL} <= kinds
    # off again: refused again, and recorded as refused
    kern.slice_set(sl.id, audit=False)
    assert call(c, g.hSubdevice, bad, bsize) == NV_ERR_INSUFFICIENT_PERMISSIONS
    e = entries(kern, sl.id)[(U.VGPU_AUDIT_CONTROL, bad)]
    assert (e.calls, e.refused, e.let_through) == (2, 1, 1)


def test_allow_list_lets_one_item_through(sl, kern):
    bad, bsize = refused_subdevice_control()
    info = kern.slice_set(sl.id, allow=[(U.VGPU_AUDIT_CONTROL, bad)])
    assert info.allow_count == 1 and not info.audit
    c = sl.client()
    g = c.gpu(0)
    assert call(c, g.hSubdevice, bad, bsize) != NV_ERR_INSUFFICIENT_PERMISSIONS
    assert int(nvsim_stat("last_control"), 16) == bad
    e = entries(kern, sl.id)[(U.VGPU_AUDIT_CONTROL, bad)]
    assert (e.refused, e.let_through) == (0, 1)
    # an empty list clears it
    assert kern.slice_set(sl.id, allow=[]).allow_count == 0
    assert call(c, g.hSubdevice, bad, bsize) == NV_ERR_INSUFFICIENT_PERMISSIONS


def _refused(kern, attrs, errnos):
    with pytest.raises(VgpuError) as ei:
        kern.raw_request(U.VGPU_CMD_SLICE_SET, attrs)
    assert ei.value.errno in errnos, ei.value
    assert ei.value.extack or ei.value.miss_type is not None, ei.value


@pytest.mark.parametrize("case", ["unknown-kind", "gpu-in-allow", "allow-outside", "audit-2",
                                  "reply-only-count", "too-many"])
def test_bad_audit_requests_are_refused(sl, kern, case):
    """What the kernel itself refuses (vgpu/vgpuko/client.py checks these too, so
    they go raw), each with an extack and nothing changed."""
    sid = Nla.u32(U.VGPU_A_SLICE_ID, sl.id)
    allow = lambda *e: Nla.nest(U.VGPU_A_SLICE_ALLOW, *e)  # noqa: E731
    key = lambda k, n: Nla.u64(U.VGPU_A_ALLOW, (k << 32) | n)  # noqa: E731
    EINVAL = {errno.EINVAL}
    attrs, errnos = {
        "unknown-kind": ([sid, allow(key(7, 1))], EINVAL),
        "gpu-in-allow": ([sid, allow(Nla.nest(U.VGPU_A_GPU, Nla.u32(U.VGPU_GPU_A_INDEX, 0)))], EINVAL),
        "allow-outside": ([sid, Nla.u64(U.VGPU_A_ALLOW, 1)], EINVAL),
        "audit-2": ([sid, Nla.u8(U.VGPU_A_SLICE_AUDIT, 2)], {errno.EINVAL, errno.ERANGE}),
        "reply-only-count": ([sid, Nla.u32(U.VGPU_A_SLICE_ALLOW_COUNT, 1)], EINVAL),
        "too-many": ([sid, allow(*[key(U.VGPU_AUDIT_CONTROL, i)
                                   for i in range(U.VGPU_MAX_ALLOW + 1)])], {errno.E2BIG}),
    }[case]
    _refused(kern, attrs, errnos)
    got = kern.slice_get(sl.id)
    assert (got.allow_count, got.audit) == (0, False)


def test_audit_get_of_no_slice(kern):
    with pytest.raises(VgpuError) as ei:
        kern.audit_get(0x7fff0000)
    assert ei.value.errno == errno.ENOENT


def test_allow_duplicates_count_once(sl, kern):
    bad, _ = refused_subdevice_control()
    key = (U.VGPU_AUDIT_CONTROL, bad)
    got = kern.raw_request(U.VGPU_CMD_SLICE_SET, [
        Nla.u32(U.VGPU_A_SLICE_ID, sl.id),
        Nla.nest(U.VGPU_A_SLICE_ALLOW, *[Nla.u64(U.VGPU_A_ALLOW, (key[0] << 32) | key[1])] * 3)])
    assert got is not None
    assert kern.slice_get(sl.id).allow_count == 1


def test_empty_record_dumps(sl, kern):
    rec = kern.audit_get(sl.id)
    assert rec.entries == [] and rec.dropped == 0
