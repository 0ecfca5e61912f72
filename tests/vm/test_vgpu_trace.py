"""Tracing a slice (docs/trace.md): vgpu.ko's records on the "trace" group.

Every open, ioctl, mmap and close of a traced slice's nodes is one record,
numbered from 1, with the parameters before and after, what the policy
judged, and the slice's file a descriptor in the parameters named.  A
slice not traced, or traced with nobody listening, sends nothing.  The
daemon and vgpuctl's side is tests/vm/test_daemon_trace.py.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import trace as T
from vgpu.abi import uapi as U
from vgpu.vgpuko.netlink import Nla, VgpuError
from vgpu.abi.nvclient import RmClient, raw_ioctl
from vgpu_fixtures import RmError, in_child
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401


@pytest.fixture
def traced(sl, kern):
    """(slice, stream): the slice traced, the stream joined first."""
    ts = kern.trace_stream(timeout=5)
    kern.slice_set(sl.id, trace=True)
    yield sl, ts
    try:
        kern.slice_set(sl.id, trace=False)
    except VgpuError:
        pass
    ts.close()


def mine(ts, sid):
    return [r for r in ts.drain(0.5) if r.slice_id == sid]


def ioctls(recs, name=None):
    out = [r for r in recs if r.op == U.VGPU_TRACE_IOCTL]
    if name is not None:
        nr = getattr(A, name)
        out = [r for r in out if r.nr == nr and r.node != U.VGPU_MINOR_UVM]
    return out


def test_slice_reply_carries_the_flag_and_the_attribute_is_checked(sl, kern):
    assert not kern.slice_get(sl.id).trace
    assert kern.slice_set(sl.id, trace=True).trace
    assert kern.slice_get(sl.id).trace
    assert not kern.slice_set(sl.id, trace=False).trace
    with pytest.raises(VgpuError) as e:
        kern.raw_request(U.VGPU_CMD_SLICE_SET, [Nla.u32(U.VGPU_A_SLICE_ID, sl.id),
                                                Nla.u8(U.VGPU_A_SLICE_TRACE, 2)])
    assert e.value.errno == errno.ERANGE
    with pytest.raises(VgpuError) as e:
        kern.raw_request(U.VGPU_CMD_SLICE_SET, [Nla.u32(U.VGPU_A_SLICE_ID, sl.id),
                                                Nla(U.VGPU_A_TRACE, [], flags=0x8000)])
    assert e.value.errno == errno.EINVAL
    assert not kern.slice_get(sl.id).trace


def test_a_client_start_up_is_recorded_call_by_call(traced):
    sl, ts = traced
    c = sl.client()
    g = c.gpu(0)
    info = g.fb_info()
    c.close()
    sl.clients.remove(c)
    recs = mine(ts, sl.id)
    assert [r.seq for r in recs] == list(range(recs[0].seq, recs[0].seq + len(recs)))
    assert recs[0].op == U.VGPU_TRACE_OPEN and recs[0].node == U.VGPU_MINOR_CTL
    assert recs[0].open_flags & os.O_RDWR
    assert all(r.pid == os.getpid() for r in recs)
    ctl_file = recs[0].file
    # the version check: direct, its answer as the caller got it
    v = ioctls(recs, "NV_ESC_CHECK_VERSION_STR")[0]
    assert v.item_kind == U.VGPU_AUDIT_ESCAPE and v.ret == 0
    assert len(v.args_in) == v.size == ctypes.sizeof(A.nv_ioctl_rm_api_version_t)
    # the root client: the class judged, hObjectNew written back
    a = ioctls(recs, "NV_ESC_RM_ALLOC")
    root = a[0]
    assert root.item_kind == U.VGPU_AUDIT_CLASS and root.item == A.NV01_ROOT_CLIENT
    assert root.verdict == U.VGPU_AUDIT_FORWARD or root.verdict == U.VGPU_AUDIT_REWRITE
    out = A.NVOS64_PARAMETERS.from_bytes(root.args_out)
    assert out.hObjectNew == c.hClient and out.status == 0
    assert T.status_of(root.nr, False, root.size, root.args_out) == 0
    # the device's alloc params: pointer and what it named
    dev = next(r for r in a if r.item == A.NV01_DEVICE_0)
    assert dev.params_ptr and dev.params_in is not None
    assert len(dev.params_in) == ctypes.sizeof(A.NV0080_ALLOC_PARAMETERS)
    # REGISTER_FD on the GPU file named the control file
    reg = ioctls(recs, "NV_ESC_REGISTER_FD")[0]
    assert reg.node == U.VGPU_MINOR_GPU0
    assert (reg.fd_offset, reg.fd_file) == (0, ctl_file)
    # the FB control: its command judged, its params before and after
    fb = [r for r in ioctls(recs, "NV_ESC_RM_CONTROL")
          if r.item == A.NV2080_CTRL_CMD_FB_GET_INFO_V2]
    assert fb and fb[0].item_kind == U.VGPU_AUDIT_CONTROL
    assert fb[0].verdict == U.VGPU_AUDIT_REWRITE
    assert fb[0].params_in != fb[0].params_out       # the answers were written
    assert info
    # the closes, last
    closes = [r for r in recs if r.op == U.VGPU_TRACE_CLOSE]
    assert {r.file for r in closes} == {r.file for r in recs if r.op == U.VGPU_TRACE_OPEN}


def test_mmap_is_recorded_as_asked(traced):
    sl, ts = traced
    c = sl.client()
    g = c.gpu(0)
    h = g.alloc(1 << 20)
    m = g.map(h, 1 << 20)
    mine(ts, sl.id)
    m2 = g.map(h, 1 << 20, prot=mmap.PROT_READ)
    recs = mine(ts, sl.id)
    mm = [r for r in recs if r.op == U.VGPU_TRACE_MMAP]
    assert len(mm) == 1
    r = mm[0]
    assert r.ret == 0 and r.length == 1 << 20 and r.offset == 0
    assert r.prot == U.VGPU_TRACE_PROT_READ | U.VGPU_TRACE_PROT_SHARED
    assert r.addr and r.addr % mmap.PAGESIZE == 0
    mp = ioctls(recs, "NV_ESC_RM_MAP_MEMORY")[0]
    assert mp.fd_file == r.file          # the new fd the map named is the mapped one
    m2.close()
    m.close()


def test_xfer_truncation_and_unreadable_parameters_are_flagged(traced):
    sl, ts = traced
    c = RmClient(sl.prefix, xfer=True)
    sl.clients.append(c)
    recs = mine(ts, sl.id)
    x = ioctls(recs, "NV_ESC_RM_ALLOC")[0]
    assert x.flags & U.VGPU_TRACE_F_XFER and x.item == A.NV01_ROOT_CLIENT
    # a control whose params are larger than a record keeps: cut, flagged
    big = ctypes.create_string_buffer(U.VGPU_TRACE_MAX_PARAMS + 4096)
    p = A.NVOS54_PARAMETERS(hClient=c.hClient, hObject=c.hClient,
                            cmd=A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
                            params=ctypes.addressof(big), paramsSize=len(big))
    raw_ioctl(c.fd, A.NV_ESC_RM_CONTROL, p)
    # one whose params pointer names nothing: flagged, and still recorded
    q = A.NVOS54_PARAMETERS(hClient=c.hClient, hObject=c.hClient,
                            cmd=A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
                            params=8, paramsSize=64)
    raw_ioctl(c.fd, A.NV_ESC_RM_CONTROL, q)
    recs = ioctls(mine(ts, sl.id), "NV_ESC_RM_CONTROL")
    assert recs[0].flags & U.VGPU_TRACE_F_TRUNCATED
    assert len(recs[0].params_in) == U.VGPU_TRACE_MAX_PARAMS
    assert recs[1].flags & U.VGPU_TRACE_F_UNREADABLE and recs[1].params_in is None
    assert recs[1].params_ptr == 8


def test_uvm_commands_and_the_fd_they_name(traced):
    sl, ts = traced
    c = sl.client()
    u = sl.uvm()
    u.initialize()
    # nvsim takes any UUID (test_nvsim_uvm); the status does not matter here
    try:
        u.register_gpu(b"\0" * 16, c.fd, c.hClient)
    except Exception:
        pass
    recs = mine(ts, sl.id)
    ctl_file = next(r.file for r in recs
                    if r.op == U.VGPU_TRACE_OPEN and r.node == U.VGPU_MINOR_CTL)
    uvm = [r for r in recs if r.node == U.VGPU_MINOR_UVM]
    assert uvm[0].op == U.VGPU_TRACE_OPEN
    init = next(r for r in uvm if r.op == U.VGPU_TRACE_IOCTL and r.nr == A.UVM_INITIALIZE)
    assert init.item_kind == U.VGPU_AUDIT_UVM and init.item == A.UVM_INITIALIZE
    assert init.size == ctypes.sizeof(A.UVM_INITIALIZE_PARAMS)
    assert T.status_of(init.nr, True, init.size, init.args_out) == 0
    reg = next(r for r in uvm if r.op == U.VGPU_TRACE_IOCTL and r.nr == A.UVM_REGISTER_GPU)
    assert (reg.fd_offset, reg.fd_file) == (A.UVM_REGISTER_GPU_PARAMS.rmCtrlFd.offset, ctl_file)


def test_nothing_is_sent_untraced_or_unheard(sl, kern):
    ts = kern.trace_stream(timeout=2)
    try:
        c = sl.client()
        c.gpu(0)
        assert mine(ts, sl.id) == []                   # not traced
        kern.slice_set(sl.id, trace=True)
        c.gpu(0).fb_info()
        first = mine(ts, sl.id)
        assert first
        last = first[-1].seq
    finally:
        ts.close()
    c.gpu(0).fb_info()                                 # traced, nobody listening
    ts = kern.trace_stream(timeout=2)
    try:
        c.gpu(0).fb_info()
        again = mine(ts, sl.id)
        assert again[0].seq == last + 1                # nothing was made meanwhile
    finally:
        kern.slice_set(sl.id, trace=False)
        ts.close()


def test_trace_group_needs_cap_net_admin(sl, kern):
    def join():
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        try:
            kern.trace_stream(timeout=1).close()
        except OSError as e:
            return e.errno
        return 0
    r = in_child(join)
    assert r.get("ok") in (errno.EPERM, errno.EACCES), r


def test_a_controls_lists_are_recorded_before_and_after(traced):
    sl, ts = traced
    c = sl.client()
    g = c.gpu(0)
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS()
    c.control(g.hDevice, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, p)    # the count
    n = p.numClasses
    assert n > 0
    lst = (ctypes.c_uint32 * n)()
    p.classList = ctypes.addressof(lst)
    c.control(g.hDevice, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, p)
    recs = [r for r in ioctls(mine(ts, sl.id), "NV_ESC_RM_CONTROL")
            if r.item == A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST]
    off = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS.classList.offset
    # a NULL list: its pointer only
    assert recs[0].lists == [(off, 0, None, None)]
    (o, ptr, before, after), = recs[1].lists
    assert (o, ptr) == (off, ctypes.addressof(lst))
    assert before == bytes(4 * n) and after == bytes(lst)
    assert not recs[1].flags & U.VGPU_TRACE_F_TRUNCATED


def test_a_record_stays_within_its_budget(traced):
    """Params and a list together past VGPU_TRACE_MAX_BLOBS: cut, flagged,
    and still one record (a netlink attribute holds less than 64 KiB)."""
    sl, ts = traced
    c = sl.client()
    g = c.gpu(0)
    n = 3 * U.VGPU_TRACE_MAX_PARAMS // 4             # 48 KiB of list
    lst = (ctypes.c_uint32 * n)()
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(numClasses=n, classList=ctypes.addressof(lst))
    try:
        c.control(g.hDevice, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, p)
    except RmError:
        pass
    r = [r for r in ioctls(mine(ts, sl.id), "NV_ESC_RM_CONTROL")
         if r.item == A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST][-1]
    assert r.flags & U.VGPU_TRACE_F_TRUNCATED
    (_o, _p, before, _after), = r.lists
    assert len(before) == U.VGPU_TRACE_MAX_PARAMS
    total = sum(len(b or b"") for b in (r.args_in, r.args_out, r.params_in, r.params_out,
                                         before, _after))
    assert total <= U.VGPU_TRACE_MAX_BLOBS
