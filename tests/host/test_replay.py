"""vgpu-replay (vgpu/abi/replay.py, docs/trace.md "Replay"): the plan each record
turns into, the replayer's bookkeeping with a fake executor, the real
executor on plain files, and the command line on bad trace files."""

from __future__ import annotations

import ctypes
import errno
import gzip
import json
import mmap
import os

import pytest

from vgpu.abi import nvabi
from vgpu.abi import replay
from vgpu.abi import trace

PAGE = mmap.PAGESIZE
ROOT_H = 0xC1D00001
DEV_H = 0xCAF00002


def rec(op="ioctl", seq=1, file=1, node="ctl", ret=0, line=0, **kw) -> trace.Record:
    """A checked record, as read from a file."""
    d = {"seq": seq, "file": file, "node": node, "op": op, "ret": ret}
    for k, v in kw.items():
        d[k] = v.hex() if isinstance(v, (bytes, bytearray)) else v
    r = trace.parse_record(d, "test")
    r.line = line or seq
    return r


def io(nr, pin, pout=None, node="ctl", **kw) -> trace.Record:
    """An ioctl record from ctypes parameters before and after."""
    b = bytes(pin)
    out = bytes(pout) if pout is not None else None
    st = trace.status_of(nr, node == "uvm", len(b), out)
    if st is not None:
        kw.setdefault("status", st)
    return rec(nr=nr, size=len(b), node=node, **{"in": b}, **({"out": out} if out else {}), **kw)


def state() -> replay.State:
    """Files 1, 2 and 3 of the trace are the replay's fds 10, 20 and 30."""
    return replay.State(files={1: 10, 2: 20, 3: 30})


def u32(b, off):
    return int.from_bytes(b[off:off + 4], "little")


def u64(b, off):
    return int.from_bytes(b[off:off + 8], "little")


# -------------------------------------------------------------- handles
@pytest.mark.parametrize("cls", [nvabi.NV01_ROOT, nvabi.NV01_ROOT_NON_PRIV, nvabi.NV01_ROOT_CLIENT])
@pytest.mark.parametrize("form", [nvabi.NVOS64_PARAMETERS, nvabi.NVOS21_PARAMETERS])
def test_root_client_asks_for_the_recorded_handle_in_hroot(cls, form):
    pin = form(hRoot=0, hClass=cls)
    pout = form(hRoot=0, hObjectNew=ROOT_H, hClass=nvabi.NV01_ROOT_CLIENT)
    step = replay.plan(io(nvabi.NV_ESC_RM_ALLOC, pin, pout), state(), "/dev")
    assert isinstance(step, replay.Ioctl)
    p = form.from_bytes(step.args)
    assert (p.hRoot, p.hObjectNew) == (ROOT_H, 0)
    assert step.request == nvabi.nv_ioctl(nvabi.NV_ESC_RM_ALLOC, ctypes.sizeof(form))
    assert step.fd == 10 and not step.xfer and step.params is None


def test_root_client_with_a_chosen_handle_is_left_alone():
    pin = nvabi.NVOS64_PARAMETERS(hRoot=0x1234, hClass=nvabi.NV01_ROOT_CLIENT)
    pout = nvabi.NVOS64_PARAMETERS(hRoot=0x1234, hObjectNew=0x1234, hClass=nvabi.NV01_ROOT_CLIENT)
    step = replay.plan(io(nvabi.NV_ESC_RM_ALLOC, pin, pout), state(), "/dev")
    assert step.args == bytes(pin)


def test_failed_root_client_asks_for_nothing():
    pin = nvabi.NVOS64_PARAMETERS(hClass=nvabi.NV01_ROOT_CLIENT)
    pout = nvabi.NVOS64_PARAMETERS(hClass=nvabi.NV01_ROOT_CLIENT, status=nvabi.NV_ERR_INSUFFICIENT_RESOURCES)
    step = replay.plan(io(nvabi.NV_ESC_RM_ALLOC, pin, pout), state(), "/dev")
    assert nvabi.NVOS64_PARAMETERS.from_bytes(step.args).hRoot == 0


def test_rm_alloc_asks_for_the_handle_the_driver_chose_and_gets_a_params_buffer():
    cp = nvabi.NV0080_ALLOC_PARAMETERS(deviceId=0)
    pin = nvabi.NVOS64_PARAMETERS(hRoot=ROOT_H, hObjectParent=ROOT_H, hObjectNew=0,
                              hClass=nvabi.NV01_DEVICE_0, pAllocParms=0x7FFD0000,
                              paramsSize=ctypes.sizeof(cp))
    pout = nvabi.NVOS64_PARAMETERS.from_bytes(bytes(pin))
    pout.hObjectNew = DEV_H
    r = io(nvabi.NV_ESC_RM_ALLOC, pin, pout, params_ptr=0x7FFD0000, params_in=bytes(cp),
           params_out=bytes(cp))
    step = replay.plan(r, state(), "/dev")
    p = nvabi.NVOS64_PARAMETERS.from_bytes(step.args)
    assert (p.hRoot, p.hObjectNew) == (ROOT_H, DEV_H)
    assert step.params == replay.Params(16, bytes(cp), ctypes.sizeof(cp))


def test_a_handle_the_caller_chose_stays():
    pin = nvabi.NVOS64_PARAMETERS(hRoot=ROOT_H, hObjectParent=ROOT_H, hObjectNew=0x5C000001,
                              hClass=nvabi.NV01_DEVICE_0)
    pout = nvabi.NVOS64_PARAMETERS.from_bytes(bytes(pin))
    step = replay.plan(io(nvabi.NV_ESC_RM_ALLOC, pin, pout), state(), "/dev")
    assert step.args == bytes(pin)


def test_rm_alloc_memory_asks_for_hobjectnew():
    pin = nvabi.nv_ioctl_nvos02_parameters_with_fd()
    q = pin.params
    q.hRoot, q.hClass, q.limit = ROOT_H, nvabi.NV01_MEMORY_LOCAL_USER, 0xFFFFF
    pout = nvabi.nv_ioctl_nvos02_parameters_with_fd.from_bytes(bytes(pin))
    pout.params.hObjectNew = 0xCAF00010
    step = replay.plan(io(nvabi.NV_ESC_RM_ALLOC_MEMORY, pin, pout, node="gpu0", file=2), state(), "/dev")
    got = nvabi.nv_ioctl_nvos02_parameters_with_fd.from_bytes(step.args)
    assert got.params.hObjectNew == 0xCAF00010
    assert step.premap is None and step.fd == 20


def test_dup_object_asks_for_hobject_dest():
    pin = nvabi.NVOS55_PARAMETERS(hClient=ROOT_H, hParent=DEV_H, hObject=0, hClientSrc=ROOT_H,
                              hObjectSrc=0x5C000003)
    pout = nvabi.NVOS55_PARAMETERS.from_bytes(bytes(pin))
    pout.hObject = 0xCAF00011
    step = replay.plan(io(nvabi.NV_ESC_RM_DUP_OBJECT, pin, pout), state(), "/dev")
    assert nvabi.NVOS55_PARAMETERS.from_bytes(step.args).hObject == 0xCAF00011


@pytest.mark.parametrize("function,member", [
    (nvabi.NVOS32_FUNCTION_ALLOC_SIZE, "AllocSize"),
    (nvabi.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT, "AllocTiledPitchHeight"),
    (nvabi.NVOS32_FUNCTION_ALLOC_SIZE_RANGE, "AllocSizeRange"),
])
def test_vid_heap_alloc_asks_for_hmemory(function, member):
    pin = nvabi.NVOS32_PARAMETERS(hRoot=ROOT_H, hObjectParent=DEV_H, function=function)
    pout = nvabi.NVOS32_PARAMETERS.from_bytes(bytes(pin))
    getattr(pout.data, member).hMemory = 0xCAF00012
    step = replay.plan(io(nvabi.NV_ESC_RM_VID_HEAP_CONTROL, pin, pout), state(), "/dev")
    p = nvabi.NVOS32_PARAMETERS.from_bytes(step.args)
    assert getattr(p.data, member).hMemory == 0xCAF00012


def test_vid_heap_free_is_not_an_alloc():
    pin = nvabi.NVOS32_PARAMETERS(hRoot=ROOT_H, function=nvabi.NVOS32_FUNCTION_FREE)
    pout = nvabi.NVOS32_PARAMETERS.from_bytes(bytes(pin))
    pout.data.Free.hMemory = 0x99      # not a handle the driver picked
    step = replay.plan(io(nvabi.NV_ESC_RM_VID_HEAP_CONTROL, pin, pout), state(), "/dev")
    assert step.args == bytes(pin)


# ----------------------------------------------------------------- files
def test_fd_in_the_parameters_becomes_the_replays():
    r = io(nvabi.NV_ESC_REGISTER_FD, nvabi.nv_ioctl_register_fd_t(ctl_fd=7), node="gpu0", file=2,
           fd={"offset": 0, "file": 1})
    step = replay.plan(r, state(), "/dev")
    assert step.fd == 20 and nvabi.nv_ioctl_register_fd_t.from_bytes(step.args).ctl_fd == 10


def test_map_memory_fd_at_its_offset():
    p = nvabi.nv_ioctl_nvos33_parameters_with_fd(fd=9)
    r = io(nvabi.NV_ESC_RM_MAP_MEMORY, p, fd={"offset": 48, "file": 3})
    assert nvabi.nv_ioctl_nvos33_parameters_with_fd.from_bytes(replay.plan(r, state(), "/d").args).fd == 30


def test_fd_naming_a_file_never_opened_is_not_replayed():
    r = io(nvabi.NV_ESC_REGISTER_FD, nvabi.nv_ioctl_register_fd_t(ctl_fd=7), fd={"offset": 0, "file": 77})
    step = replay.plan(r, state(), "/dev")
    assert isinstance(step, replay.Skip) and "file 77 was never opened" in step.reason


def test_fd_offset_outside_the_parameters_is_not_replayed():
    r = io(nvabi.NV_ESC_REGISTER_FD, nvabi.nv_ioctl_register_fd_t(), fd={"offset": 2, "file": 1})
    step = replay.plan(r, state(), "/dev")
    assert isinstance(step, replay.Skip) and "offset 2" in step.reason


def test_call_on_a_file_never_opened_is_not_replayed():
    step = replay.plan(io(nvabi.NV_ESC_RM_FREE, nvabi.NVOS00_PARAMETERS(), file=5), state(), "/dev")
    assert step == replay.Skip("file 5 was never opened in the trace")


def test_open_paths_and_flags():
    st = replay.State()
    assert replay.plan(rec("open", node="ctl", open_flags=os.O_RDWR | os.O_NONBLOCK), st, "/n") == \
        replay.Open("/n/nvidiactl", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    assert replay.plan(rec("open", node="uvm", open_flags=os.O_RDWR), st, "/n") == \
        replay.Open("/n/nvidia-uvm", os.O_RDWR | os.O_CLOEXEC)
    r = rec("open", node="gpu3", open_flags=os.O_RDONLY | os.O_APPEND)
    assert replay.plan(r, st, "/n") == replay.Open("/n/nvidia3", os.O_RDWR | os.O_CLOEXEC)


def test_close_closes_the_replays_fd():
    assert replay.plan(rec("close", file=2), state(), "/dev") == replay.Close(20)


# ---------------------------------------------------------------- params
def test_control_params_buffer_sized_by_paramssize():
    pin = nvabi.NVOS54_PARAMETERS(hClient=ROOT_H, hObject=DEV_H, cmd=nvabi.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                              params=0x7FFD1000, paramsSize=1032)
    r = io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_ptr=0x7FFD1000, params_in=b"\x01\x00\x00\x00")
    step = replay.plan(r, state(), "/dev")
    assert step.params == replay.Params(16, b"\x01\x00\x00\x00", 1032)
    assert u64(step.args, 16) == 0x7FFD1000     # the executor puts its buffer there


def test_null_params_stay_null():
    pin = nvabi.NVOS54_PARAMETERS(cmd=nvabi.NV0080_CTRL_CMD_GPU_GET_NUM_SUBDEVICES, params=0, paramsSize=0)
    step = replay.plan(io(nvabi.NV_ESC_RM_CONTROL, pin, pin), state(), "/dev")
    assert step.params is None and step.guards == ()


def test_unrecorded_params_point_at_a_guard_page():
    pin = nvabi.NVOS54_PARAMETERS(cmd=nvabi.NV2080_CTRL_CMD_FB_GET_INFO_V2, params=0xDEAD0000, paramsSize=8)
    step = replay.plan(io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_ptr=0xDEAD0000), state(), "/dev")
    assert step.params is None and step.guards == (16,)


def test_paramssize_over_the_trace_limit_without_truncation_is_not_replayed():
    pin = nvabi.NVOS54_PARAMETERS(params=0x1000, paramsSize=1 << 30)
    step = replay.plan(io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_in=b"\0" * 8), state(), "/dev")
    assert isinstance(step, replay.Skip) and str(1 << 30) in step.reason


def test_nvos21_alloc_params_size_at_its_own_offset():
    pin = nvabi.NVOS21_PARAMETERS(hRoot=ROOT_H, hObjectNew=5, hClass=nvabi.NV20_SUBDEVICE_0,
                              pAllocParms=0x4000, paramsSize=4)
    step = replay.plan(io(nvabi.NV_ESC_RM_ALLOC, pin, pin, params_in=b"\0" * 4), state(), "/dev")
    assert step.params == replay.Params(16, b"\0" * 4, 4)


def test_an_xfer_recorded_with_its_header_points_at_the_guard_page():
    x = nvabi.nv_ioctl_xfer_t(cmd=nvabi.NV_ESC_RM_CONTROL, size=32, ptr=0x1234)
    step = replay.plan(io(nvabi.NV_ESC_IOCTL_XFER_CMD, x), state(), "/dev")
    assert step.guards == (8,) and not step.xfer


# --------------------------------------------------------- embedded lists
CL = nvabi.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS
CL_AT = CL.classList.offset                   # 8: after numClasses and its pad
GI = nvabi.NV2080_CTRL_GR_GET_INFO_PARAMS


def lst(offset=CL_AT, ptr=0x7FFD2000, lin=None, lout=None) -> dict:
    """A "lists" entry, as the file holds it."""
    d = {"offset": offset, "ptr": ptr}
    if lin is not None:
        d["in"] = lin.hex()
    if lout is not None:
        d["out"] = lout.hex()
    return d


def classlist(lists, n=3, ptr=0x7FFD2000, **kw) -> trace.Record:
    """RM_CONTROL GET_CLASSLIST of n classes, the list at ptr."""
    cp = CL(numClasses=n, classList=ptr)
    pin = nvabi.NVOS54_PARAMETERS(hClient=ROOT_H, hObject=DEV_H,
                              cmd=nvabi.NV0080_CTRL_CMD_GPU_GET_CLASSLIST,
                              params=0x7FFD1000, paramsSize=ctypes.sizeof(cp))
    kw.setdefault("params_in", bytes(cp))
    return io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_ptr=0x7FFD1000, lists=lists, **kw)


CLASSES = b"".join(c.to_bytes(4, "little") for c in (nvabi.NV01_ROOT, nvabi.NV01_DEVICE_0,
                                                      nvabi.NV20_SUBDEVICE_0))


def test_lists_are_parsed():
    r = classlist([lst(lin=b"\xef\xbe\xad\xde" * 3, lout=CLASSES)])
    assert r.lists == [(CL_AT, 0x7FFD2000, b"\xef\xbe\xad\xde" * 3, CLASSES)]
    r = classlist([lst(ptr=0)], ptr=0)
    assert r.lists == [(CL_AT, 0, None, None)]
    assert classlist(None).lists == [] and rec("open").lists == []


def test_a_list_gets_a_buffer_filled_with_in():
    """GR_GET_INFO's indexes are what the driver reads: the buffer holds them."""
    gp = GI(grInfoListSize=2, grInfoList=0x7FFD3000)
    idx = bytes(8) + (nvabi.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION).to_bytes(4, "little") + bytes(4)
    pin = nvabi.NVOS54_PARAMETERS(cmd=nvabi.NV2080_CTRL_CMD_GR_GET_INFO, params=0x7FFD1000,
                              paramsSize=ctypes.sizeof(gp))
    r = io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_ptr=0x7FFD1000, params_in=bytes(gp),
           lists=[lst(GI.grInfoList.offset, 0x7FFD3000, idx, idx[:12] + b"\x06\x08\0\0")])
    step = replay.plan(r, state(), "/dev")
    assert step.params == replay.Params(16, bytes(gp), ctypes.sizeof(gp),
                                   (replay.EmbeddedList(GI.grInfoList.offset, idx, 16),))


def test_a_list_with_only_out_gets_zeroes_of_its_size():
    step = replay.plan(classlist([lst(lout=CLASSES)]), state(), "/dev")
    assert step.params.lists == (replay.EmbeddedList(CL_AT, b"", 12),)
    assert step.params.guards == ()


def test_a_null_list_stays_null():
    """GET_CLASSLIST's first call asks for the count with a NULL list;
    a 0 in the file's lists is 0 in the call, whatever params_in held."""
    step = replay.plan(classlist([lst(ptr=0)], n=0, ptr=0), state(), "/dev")
    assert step.params.lists == () and u64(step.params.data, CL_AT) == 0
    cp = CL(numClasses=0, classList=0x4141414141)
    step = replay.plan(classlist([lst(ptr=0)], params_in=bytes(cp)), state(), "/dev")
    assert step.params.lists == () and u64(step.params.data, CL_AT) == 0


def test_a_list_the_recording_could_not_read_points_at_the_guard_page():
    step = replay.plan(classlist([lst(ptr=0x1000)], ptr=0x1000, unreadable=True), state(), "/dev")
    assert step.params.lists == () and step.params.guards == (CL_AT,)


def test_lists_of_a_call_without_params_buffer_are_not_followed():
    """params NULL in the call: nothing of the replay's is handed out."""
    cp = CL(numClasses=3, classList=0x7FFD2000)
    pin = nvabi.NVOS54_PARAMETERS(cmd=nvabi.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, params=0, paramsSize=16)
    r = io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_in=bytes(cp), lists=[lst(lin=CLASSES)])
    step = replay.plan(r, state(), "/dev")
    assert step.params is None and step.guards == ()


def test_a_cut_list_is_not_replayed():
    step = replay.plan(classlist([lst(lin=CLASSES[:4])], truncated=True), state(), "/dev")
    assert isinstance(step, replay.Skip) and "cut" in step.reason


def maps_line(addr: int) -> str:
    """/proc/self/maps' line of the mapping holding addr."""
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= addr < hi:
            return line
    return ""


def test_executor_patches_list_buffers_into_the_params_buffer():
    ex = replay.Executor()
    gp = GI(grInfoListSize=2, grInfoList=0x7FFD3000)
    idx = bytes(range(16))
    p = replay.Params(16, bytes(CL(numClasses=3, classList=0x7FFD2000)) + bytes(gp), 40,
                 (replay.EmbeddedList(CL_AT, b"", 12),
                  replay.EmbeddedList(16 + GI.grInfoList.offset, idx, 16)), (24 + 8,))
    held = []
    try:
        buf = ex.params_buffer(p, held)
        assert len(buf) == replay.MIN_BUFFER and len(held) == 2
        a, b = u64(buf.raw, CL_AT), u64(buf.raw, 16 + GI.grInfoList.offset)
        assert (a, b) == (held[0][0], held[1][0])
        assert ctypes.string_at(a, 12) == bytes(12) and ctypes.string_at(b, 16) == idx
        assert u64(buf.raw, 32) == ex.guard()
        assert u32(buf.raw, 0) == 3 and buf.raw[16:24] == bytes(gp)[:8]
        for addr, n in held:
            assert n == replay.MIN_BUFFER + PAGE
            assert maps_line(addr).split()[1].startswith("rw")
            # what the driver writes beyond the list's buffer faults, never
            # lands in the replay's own memory
            assert maps_line(addr + replay.MIN_BUFFER).split()[1] == "---p"
    finally:
        for addr, n in held:
            ex.munmap(addr, n)


def test_executor_unmaps_list_buffers_after_the_call(tmp_path):
    ex = replay.Executor()
    unmapped = []
    real = ex._munmap
    ex._munmap = lambda addr, n: unmapped.append((addr, n)) or real(addr, n)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        step = replay.plan(classlist([lst(lin=CLASSES)]), replay.State(files={1: fd}), "/dev")
        ret, _ = ex.ioctl(step)
        assert ret == -errno.ENOTTY and [n for _, n in unmapped] == [replay.MIN_BUFFER + PAGE]
    finally:
        os.close(fd)


# ------------------------------------------------------------------ XFER
def test_parameters_over_16383_bytes_go_through_xfer():
    r = io(nvabi.NV_ESC_CARD_INFO, b"\0" * 16384)
    step = replay.plan(r, state(), "/dev")
    assert step.xfer and step.nr == nvabi.NV_ESC_CARD_INFO and len(step.args) == 16384
    assert step.request == nvabi.nv_ioctl(nvabi.NV_ESC_IOCTL_XFER_CMD, 16)


def test_16383_bytes_go_plain():
    step = replay.plan(io(nvabi.NV_ESC_CARD_INFO, b"\0" * 16383), state(), "/dev")
    assert not step.xfer and step.request == nvabi.nv_ioctl(nvabi.NV_ESC_CARD_INFO, 16383)


def test_a_recorded_xfer_is_replayed_as_one():
    step = replay.plan(io(nvabi.NV_ESC_RM_FREE, nvabi.NVOS00_PARAMETERS(), xfer=True), state(), "/dev")
    assert step.xfer and step.request == nvabi.nv_ioctl(nvabi.NV_ESC_IOCTL_XFER_CMD, 16)


def test_uvm_request_is_the_command_number():
    p = nvabi.UVM_INITIALIZE_PARAMS(flags=0)
    step = replay.plan(io(nvabi.UVM_INITIALIZE, p, p, node="uvm", file=3), state(), "/dev")
    assert step.uvm and step.request == nvabi.UVM_INITIALIZE and step.args == bytes(p)


def test_uvm_fd_substitution():
    p = nvabi.UVM_MM_INITIALIZE_PARAMS(uvmFd=4)
    r = io(nvabi.UVM_MM_INITIALIZE, p, node="uvm", file=3,
           fd={"offset": nvabi.UVM_MM_INITIALIZE_PARAMS.uvmFd.offset, "file": 3})
    assert nvabi.UVM_MM_INITIALIZE_PARAMS.from_bytes(replay.plan(r, state(), "/d").args).uvmFd == 30


def test_cut_records_are_not_replayed():
    step = replay.plan(io(nvabi.NV_ESC_RM_FREE, nvabi.NVOS00_PARAMETERS(), truncated=True), state(), "/dev")
    assert step == replay.Skip("the record's parameters were cut at 16384 bytes")


def test_unreadable_parameters_are_not_replayed():
    """vgpu.ko's record of a call whose parameters it could not copy (or
    an XFER it could not unwrap): no 'in'."""
    r = rec(nr=nvabi.NV_ESC_IOCTL_XFER_CMD, size=16, unreadable=True)
    assert replay.plan(r, state(), "/dev") == replay.Skip("the recording could not read the parameters")


def test_unreadable_pointed_to_parameters_are_replayed_with_a_guard():
    """'unreadable' set by the copy of what params named: the call is
    replayed, its pointer naming what the replay cannot read either."""
    pin = nvabi.NVOS54_PARAMETERS(cmd=nvabi.NV2080_CTRL_CMD_FB_GET_INFO_V2, params=0x10, paramsSize=8)
    step = replay.plan(io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_ptr=0x10, unreadable=True),
                  state(), "/dev")
    assert isinstance(step, replay.Ioctl) and step.guards == (16,)


def test_in_shorter_than_size_is_not_replayed():
    r = rec(nr=nvabi.NV_ESC_RM_FREE, size=16, **{"in": "00" * 8})
    step = replay.plan(r, state(), "/dev")
    assert step == replay.Skip("'in' holds 8 bytes, the call's size is 16")


def test_escape_nr_over_255_is_not_replayed():
    step = replay.plan(rec(nr=0x1234, size=0), state(), "/dev")
    assert isinstance(step, replay.Skip) and "0x1234" in step.reason


# ------------------------------------------------------------------ mmap
class FakeExecutor:
    """Answers with what a test queued; records every call made."""

    def __init__(self):
        self.calls = []
        self.ioctl_out = {}            # nr -> (ret, out bytes)
        self.mmap_ret = {}             # addr -> (ret, placed at)
        self.next_fd = 40

    def open(self, path, flags):
        self.calls.append(("open", path))
        self.next_fd += 1
        return 0, self.next_fd

    def close(self, fd):
        self.calls.append(("close", fd))
        return 0

    def mmap(self, m):
        self.calls.append(("mmap", m))
        return self.mmap_ret.get(m.addr, (0, m.addr))

    def munmap(self, addr, length):
        self.calls.append(("munmap", addr, length))

    def ioctl(self, c):
        self.calls.append(("ioctl", c))
        return self.ioctl_out.get(c.nr, (0, c.args))


def map_memory(linear_in_trace):
    p = nvabi.nv_ioctl_nvos33_parameters_with_fd(fd=7)
    p.params.hClient, p.params.hMemory, p.params.length = ROOT_H, 0x5C000010, 2 * PAGE
    out = nvabi.nv_ioctl_nvos33_parameters_with_fd.from_bytes(bytes(p))
    out.params.pLinearAddress = linear_in_trace
    return p, out


def test_mmap_offset_from_rm_map_memory_is_translated():
    ex = FakeExecutor()
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {1: 10, 2: 20}
    pin, pout = map_memory(0x5000)
    mine = nvabi.nv_ioctl_nvos33_parameters_with_fd.from_bytes(bytes(pout))
    mine.params.pLinearAddress = 0x9000
    ex.ioctl_out[nvabi.NV_ESC_RM_MAP_MEMORY] = (0, bytes(mine))
    c = rp.replay(io(nvabi.NV_ESC_RM_MAP_MEMORY, pin, pout, fd={"offset": 48, "file": 2}))
    assert c.result == "same" and rp.state.linear == {0x5000: 0x9000}

    step = replay.plan(rec("mmap", file=2, node="gpu0", addr=0x7F0000000000, length=2 * PAGE,
                      offset=0x5000, prot="rws"), rp.state, "/dev")
    assert step == replay.Mmap(0x7F0000000000, 2 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_SHARED | replay.MAP_FIXED_NOREPLACE, 20, 0x9000)
    # an offset no RM_MAP_MEMORY returned stays
    assert replay.plan(rec("mmap", file=2, node="gpu0", addr=PAGE * 16, length=PAGE, offset=0,
                      prot="r"), rp.state, "/dev").offset == 0
    # and RM_UNMAP_MEMORY names the replay's cookie
    un = nvabi.NVOS34_PARAMETERS(hClient=ROOT_H, pLinearAddress=0x5000)
    step = replay.plan(io(nvabi.NV_ESC_RM_UNMAP_MEMORY, un), rp.state, "/dev")
    assert nvabi.NVOS34_PARAMETERS.from_bytes(step.args).pLinearAddress == 0x9000


def test_uvm_mmap_offset_is_never_translated():
    st = state()
    st.linear = {0x7F0000000000: 0x1000}
    step = replay.plan(rec("mmap", file=3, node="uvm", addr=0x7F0000000000, length=PAGE,
                      offset=0x7F0000000000, prot="rws"), st, "/dev")
    assert step.offset == 0x7F0000000000


def test_private_mapping_without_s():
    step = replay.plan(rec("mmap", addr=PAGE * 32, length=PAGE, offset=0, prot="r"), state(), "/dev")
    assert step.flags == mmap.MAP_PRIVATE | replay.MAP_FIXED_NOREPLACE and step.prot == mmap.PROT_READ


@pytest.mark.parametrize("addr", [0, PAGE + 1])
def test_mmap_at_a_bad_address_is_not_replayed(addr):
    step = replay.plan(rec("mmap", addr=addr, length=PAGE, offset=0, prot="rws"), state(), "/dev")
    assert isinstance(step, replay.Skip) and "page-aligned" in step.reason


def test_mmap_whose_address_is_taken_is_not_replayed():
    ex = FakeExecutor()
    ex.mmap_ret[0x7F0000000000] = (-errno.EEXIST, 0)
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {1: 10}
    c = rp.replay(rec("mmap", addr=0x7F0000000000, length=PAGE, offset=0, prot="rws"))
    assert c.result == "not replayed" and "0x7f0000000000 is taken" in c.reason
    assert rp.state.maps == []


def test_mmap_placed_elsewhere_is_undone():
    ex = FakeExecutor()
    ex.mmap_ret[0x7F0000000000] = (0, 0x7F0000100000)
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {1: 10}
    c = rp.replay(rec("mmap", addr=0x7F0000000000, length=PAGE, offset=0, prot="rws"))
    assert c.result == "not replayed" and "MAP_FIXED_NOREPLACE" in c.reason
    assert ("munmap", 0x7F0000100000, PAGE) in ex.calls


def test_mmap_over_an_earlier_trace_mapping_unmaps_that_part_first():
    ex = FakeExecutor()
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {1: 10}
    base = 0x7F0000000000
    first = rec("mmap", seq=1, addr=base, length=4 * PAGE, offset=0, prot="rws")
    assert rp.replay(first).result == "same"
    second = rec("mmap", seq=2, addr=base + 2 * PAGE, length=4 * PAGE, offset=0, prot="rws")
    assert replay.plan(second, rp.state, "/dev").unmap == ((base + 2 * PAGE, base + 4 * PAGE),)
    rp.replay(second)
    assert rp.state.maps == [(base, base + 2 * PAGE), (base + 2 * PAGE, base + 6 * PAGE)]


def test_ranges():
    m = [(0, 10), (20, 30)]
    assert replay.overlaps(m, 5, 25) == [(5, 10), (20, 25)]
    assert replay.covered(m, 0, 10) and replay.covered(m, 22, 30) and not replay.covered(m, 5, 25)
    assert replay.covered([(0, 5), (5, 10)], 0, 10)
    assert replay.without(m, 5, 25) == [(0, 5), (25, 30)]
    assert replay.without(m, 2, 4) == [(0, 2), (4, 10), (20, 30)]


# --------------------------------------------------------- OS descriptors
def os_desc(pmem, limit):
    p = nvabi.nv_ioctl_nvos02_parameters_with_fd(fd=-1)
    q = p.params
    q.hRoot, q.hObjectParent, q.hObjectNew, q.hClass = ROOT_H, DEV_H, 0x5C000020, \
        nvabi.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR
    q.pMemory, q.limit = pmem, limit
    return io(nvabi.NV_ESC_RM_ALLOC_MEMORY, p, p, node="gpu0", file=2)


def test_os_descriptor_gets_anonymous_memory_first():
    step = replay.plan(os_desc(0x7E0000001000, 3 * PAGE - 1), state(), "/dev")
    assert step.premap == replay.Mmap(0x7E0000001000, 3 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | replay.MAP_FIXED_NOREPLACE,
                                 -1, 0)


def test_os_descriptor_premap_is_page_aligned():
    step = replay.plan(os_desc(0x7E0000001010, PAGE - 1), state(), "/dev")
    assert (step.premap.addr, step.premap.length) == (0x7E0000001000, 2 * PAGE)


def test_os_descriptor_over_trace_mappings_maps_nothing():
    st = state()
    st.maps = [(0x7E0000000000, 0x7E0000004000)]
    assert replay.plan(os_desc(0x7E0000001000, 2 * PAGE - 1), st, "/dev").premap is None


def test_os_descriptor_without_memory_or_too_big():
    assert replay.plan(os_desc(0, PAGE - 1), state(), "/dev").premap is None
    step = replay.plan(os_desc(0x7E0000000000, replay.MAX_OS_DESCRIPTOR), state(), "/dev")
    assert isinstance(step, replay.Skip) and "more than the replay maps" in step.reason


def test_os_descriptor_whose_address_is_taken_makes_no_call():
    ex = FakeExecutor()
    ex.mmap_ret[0x7E0000001000] = (-errno.EEXIST, 0)
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {2: 20}
    c = rp.replay(os_desc(0x7E0000001000, PAGE - 1))
    assert c.result == "not replayed" and "taken" in c.reason
    assert not [x for x in ex.calls if x[0] == "ioctl"]


def test_other_memory_classes_get_no_premap():
    p = nvabi.nv_ioctl_nvos02_parameters_with_fd()
    p.params.hClass, p.params.pMemory, p.params.limit = nvabi.NV01_MEMORY_SYSTEM, 0x7E0000000000, 4095
    r = io(nvabi.NV_ESC_RM_ALLOC_MEMORY, p, node="gpu0", file=2)
    assert replay.plan(r, state(), "/d").premap is None


# ------------------------------------------------------------ comparing
def test_outcomes_compared_by_ret_and_status():
    ex = FakeExecutor()
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {1: 10}
    pin = nvabi.NVOS00_PARAMETERS(hRoot=ROOT_H, hObjectOld=DEV_H)
    pout = nvabi.NVOS00_PARAMETERS.from_bytes(bytes(pin))
    assert rp.replay(io(nvabi.NV_ESC_RM_FREE, pin, pout)).result == "same"
    pout.status = nvabi.NV_ERR_OBJECT_NOT_FOUND
    c = rp.replay(io(nvabi.NV_ESC_RM_FREE, pin, pout))
    assert (c.result, c.ret, c.status) == ("differ", 0, nvabi.NV_OK)
    assert replay.call_text(c) == ("seq 1 (line 1) ctl NV_ESC_RM_FREE: recorded ret 0 "
                              "NV_ERR_OBJECT_NOT_FOUND, replayed ret 0 NV_OK")
    ex.ioctl_out[nvabi.NV_ESC_RM_FREE] = (-errno.EINVAL, bytes(pin))
    c = rp.replay(io(nvabi.NV_ESC_RM_FREE, pin, pin))
    assert c.result == "differ" and "replayed ret -22 EINVAL NV_OK" in replay.call_text(c)


def test_no_recorded_status_compares_ret_only():
    ex = FakeExecutor()
    rp = replay.Replayer("/dev", ex)
    rp.state.files = {1: 10}
    r = rec(nr=nvabi.NV_ESC_RM_FREE, size=16, **{"in": "00" * 16})     # no 'out' recorded
    assert r.status is None and rp.replay(r).result == "same"


def test_files_opened_and_closed():
    ex = FakeExecutor()
    rp = replay.Replayer("/n", ex)
    assert rp.replay(rec("open", file=5, node="gpu1")).result == "same"
    assert rp.state.files == {5: 41} and ex.calls[-1] == ("open", "/n/nvidia1")
    assert rp.replay(rec("close", seq=2, file=5, line=9)).result == "same"
    c = rp.replay(rec("close", seq=3, file=5))
    assert c.result == "not replayed" and c.reason == "file 5 was closed (line 9)"


def test_open_that_failed_in_the_recording_is_closed_again():
    ex = FakeExecutor()
    rp = replay.Replayer("/n", ex)
    c = rp.replay(rec("open", file=5, ret=-errno.EBUSY))
    assert c.result == "differ" and ex.calls[-1] == ("close", 41) and rp.state.files == {}


def test_item_names_come_from_the_numbers():
    r = io(nvabi.NV_ESC_RM_ALLOC, nvabi.NVOS64_PARAMETERS(), item={"kind": "class", "number": 0x2080,
                                                        "name": "\x1b[2Jevil"})
    assert replay.call_name(r) == "NV_ESC_RM_ALLOC class NV20_SUBDEVICE_0"
    assert replay.call_name(rec(nr=0x99, size=0)) == "escape 0x99"


# ------------------------------------------------------------ executor
def test_executor_mmap_never_replaces_memory():
    ex = replay.Executor()
    mine = mmap.mmap(-1, 2 * PAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mine))
    try:
        ret, _ = ex.mmap(replay.Mmap(addr, PAGE, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                                | replay.MAP_FIXED_NOREPLACE, -1, 0))
        assert ret == -errno.EEXIST
    finally:
        mine.close()


def test_executor_ioctl_on_a_plain_file(tmp_path):
    """Plumbing: a plain file answers every ioctl ENOTTY; the parameters,
    params buffer and XFER header are built without a driver."""
    ex = replay.Executor()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        pin = nvabi.NVOS54_PARAMETERS(params=0x1000, paramsSize=8)
        st = replay.State(files={1: fd})
        step = replay.plan(io(nvabi.NV_ESC_RM_CONTROL, pin, pin, params_in=b"\0" * 8), st, "/dev")
        ret, out = ex.ioctl(step)
        assert ret == -errno.ENOTTY and out[:16] == bytes(pin)[:16] and out[24:] == bytes(pin)[24:]
        assert u64(out, 16) not in (0, 0x1000)     # the replay's own buffer
        step = replay.plan(io(nvabi.NV_ESC_CARD_INFO, b"\0" * 16384), st, "/dev")
        ret, out = ex.ioctl(step)
        assert ret == -errno.ENOTTY and len(out) == 16384
        g = replay.plan(io(nvabi.NV_ESC_RM_CONTROL, nvabi.NVOS54_PARAMETERS(params=1, paramsSize=8)), st, "/dev")
        assert ex.ioctl(g)[0] == -errno.ENOTTY and ex.guard() == ex.guard()
    finally:
        os.close(fd)


# ------------------------------------------------------------- command line
def write_trace(path, records, header=None):
    lines = [json.dumps(header or trace.header_json("c1", 1, []))]
    lines += [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_help_says_what_and_assumes(capsys):
    with pytest.raises(SystemExit) as ei:
        replay.main(["--help"])
    assert ei.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for words in ("vgpu-replay", "--nodes DIR", "--json", "--stop-at-first", "--verbose",
                  "one process", "not followed", "MAP_FIXED_NOREPLACE", "exit status"):
        assert words in out


@pytest.mark.parametrize("content,where", [
    ('{"trace": 1}\n{"seq": 1}\nnot json\n', ":2: op"),
    ('{"trace": 1}\n\n{"seq": 1, "op": "open", "file": 1, "node": "gpu9"}\n', ":3: node"),
    ('{"trace": 2}\n', ":1: not a vgpu trace header"),
    ('', ": empty"),
    ('{"trace": 1}\n{"seq": 1, "op": "ioctl", "file": 1, "node": "ctl", "nr": 1, "in": "zz"}\n',
     ":2: in: 'zz' is not hex"),
    ('{"trace": 1}\n\xff\xfe\n', ":2: not JSON"),
    ('{"trace": 1}\n{"seq": 1, "op": "mmap", "file": 1, "node": "ctl", "addr": -1, "length": 1}\n',
     ":2: addr"),
])
def test_bad_trace_exits_2_naming_the_line(tmp_path, capsys, content, where):
    p = tmp_path / "t.jsonl"
    p.write_bytes(content.encode("latin-1"))
    assert replay.main([str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vgpu-replay: ") and f"{p}{where}" in err


def ctl_rec(**kw) -> dict:
    """An RM_CONTROL record with 16 bytes of params_in, as the file holds it."""
    d = {"seq": 1, "op": "ioctl", "file": 1, "node": "ctl", "nr": nvabi.NV_ESC_RM_CONTROL,
         "size": 32, "in": "00" * 32, "params_ptr": 4096, "params_in": "00" * 16}
    d.update(kw)
    return d


@pytest.mark.parametrize("lists,where", [
    ({"offset": 8}, "lists: not a list"),
    ([{"offset": 8 * i, "ptr": 1} for i in range(9)], "lists: 9 lists, more than 8"),
    ([[8, 1]], "lists[0]: not {offset, ptr, in, out}"),
    ([{"ptr": 1}], "lists[0]: offset: missing"),
    ([{"offset": 8}], "lists[0]: ptr: missing"),
    ([{"offset": -8, "ptr": 1}], "lists[0]: offset: -8 is not an integer"),
    ([{"offset": 9, "ptr": 1}], "lists[0]: offset: 9 leaves no 8-byte pointer inside the 16 "
                                "bytes of params_in"),
    ([{"offset": 1 << 40, "ptr": 1}], "lists[0]: offset: 1099511627776 is not an integer"),
    ([{"offset": 0, "ptr": 1}, {"offset": 4, "ptr": 2}],
     "lists[1]: offset: 4 overlaps the list at offset 0"),
    ([{"offset": 8, "ptr": 1}, {"offset": 8, "ptr": 1}],
     "lists[1]: offset: 8 overlaps the list at offset 8"),
    ([{"offset": 8, "ptr": -1}], "lists[0]: ptr: -1 is not an integer"),
    ([{"offset": 8, "ptr": "0x10"}], "lists[0]: ptr: \"0x10\" is not an integer"),
    ([{"offset": 8, "ptr": 1, "in": "zz"}], "lists[0]: in: 'zz' is not hex"),
    ([{"offset": 8, "ptr": 1, "out": 5}], "lists[0]: out: not a hex string of at most 16384"),
    ([{"offset": 8, "ptr": 1, "out": "00" * 16385}],
     "lists[0]: out: not a hex string of at most 16384 bytes"),
])
def test_bad_lists_exit_2_naming_the_line(tmp_path, capsys, lists, where):
    (tmp_path / "nvidiactl").write_bytes(b"")
    t = write_trace(tmp_path / "t.jsonl", [
        {"seq": 1, "op": "open", "file": 1, "node": "ctl"}, ctl_rec(seq=2, lists=lists)])
    assert replay.main(["--nodes", str(tmp_path), t]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vgpu-replay: {t}:3: {where}"), err


def test_lists_without_params_in_exit_2(tmp_path, capsys):
    d = ctl_rec(lists=[{"offset": 0, "ptr": 1}])
    del d["params_in"]
    t = write_trace(tmp_path / "t.jsonl", [d])
    assert replay.main([t]) == 2
    assert f"{t}:2: lists: the record has no params_in" in capsys.readouterr().err


def test_eight_full_lists_fit_a_line():
    """The most a record may hold is under MAX_LINE."""
    big = "00" * 16384
    d = ctl_rec(**{"in": big, "out": big, "params_in": big, "params_out": big},
                lists=[{"offset": 8 * i, "ptr": 1, "in": big, "out": big} for i in range(8)])
    line = json.dumps(d)
    assert len(line) < trace.MAX_LINE
    tr = trace.parse_lines([json.dumps(trace.header_json("c", 1, [])), line])
    assert len(tr.records[0].lists) == 8


def test_overlong_line_exits_2(tmp_path, capsys):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"trace": 1}\n' + b" " * (trace.MAX_LINE + 10) + b"\n")
    assert replay.main([str(p)]) == 2
    assert f"{p}:2: line longer than" in capsys.readouterr().err


def test_missing_and_corrupt_gzip_files_exit_2(tmp_path, capsys):
    assert replay.main([str(tmp_path / "none.jsonl")]) == 2
    assert "No such file" in capsys.readouterr().err
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"trace": 1}\n')[:-6])
    assert replay.main([str(gz)]) == 2
    assert "gzip" in capsys.readouterr().err


def test_missing_node_exits_2(tmp_path, capsys):
    t = write_trace(tmp_path / "t.jsonl", [{"seq": 1, "op": "open", "file": 1, "node": "gpu0"}])
    assert replay.main(["--nodes", str(tmp_path), t]) == 2
    assert f"cannot open gpu0's node {tmp_path}/nvidia0" in capsys.readouterr().err


def plain_file_trace(tmp_path, free_ret):
    """A trace replayable on a plain file standing in for nvidiactl: it
    answers ENOTTY to every ioctl."""
    (tmp_path / "nvidiactl").write_bytes(b"")
    pin = nvabi.NVOS00_PARAMETERS(hRoot=ROOT_H, hObjectOld=ROOT_H).to_bytes().hex()
    return write_trace(tmp_path / "t.jsonl", [
        {"seq": 1, "op": "open", "file": 4, "node": "ctl", "open_flags": 2},
        {"seq": 2, "op": "ioctl", "file": 4, "node": "ctl", "nr": nvabi.NV_ESC_RM_FREE, "size": 16,
         "ret": free_ret, "in": pin, "out": pin, "status": 0},
        {"seq": 4, "op": "close", "file": 4, "node": "ctl"},
    ])


def test_replay_all_same(tmp_path, capsys):
    t = plain_file_trace(tmp_path, -errno.ENOTTY)
    assert replay.main(["--nodes", str(tmp_path), t]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == ["note: 1 records were lost in the recording (gaps in seq)",
                                "3 calls replayed, 0 differ, 0 not replayed"]


def test_replay_reports_the_difference(tmp_path, capsys):
    t = plain_file_trace(tmp_path, 0)
    assert replay.main(["--nodes", str(tmp_path), t]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("seq 2 (line 3) ctl NV_ESC_RM_FREE: recorded ret 0 NV_OK, "
                      "replayed ret -25 ENOTTY NV_OK")
    assert out[-1] == "3 calls replayed, 1 differ, 0 not replayed"


def test_verbose_and_stop_at_first(tmp_path, capsys):
    t = plain_file_trace(tmp_path, 0)
    assert replay.main(["--nodes", str(tmp_path), "--verbose", t]) == 1
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert replay.main(["--nodes", str(tmp_path), "--stop-at-first", t]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == ["stopped at the first report (1 records left)",
                        "2 calls replayed, 1 differ, 0 not replayed"]


def test_json_document(tmp_path, capsys):
    t = plain_file_trace(tmp_path, 0)
    assert replay.main(["--nodes", str(tmp_path), "--json", t]) == 1
    d = json.loads(capsys.readouterr().out)
    assert (d["records"], d["lost"], d["replayed"], d["differ"], d["not_replayed"],
            d["stopped"]) == (3, 1, 3, 1, 0, False)
    (c,) = d["calls"]
    assert c == {"seq": 2, "line": 3, "pid": 0, "file": 4, "node": "ctl", "op": "ioctl",
                 "name": "NV_ESC_RM_FREE", "result": "differ",
                 "recorded": {"ret": 0, "status": 0, "status_name": "NV_OK"},
                 "replayed": {"ret": -errno.ENOTTY, "status": 0, "status_name": "NV_OK"},
                 "reason": None}


def test_not_replayed_counts_and_exit_1(tmp_path, capsys):
    (tmp_path / "nvidiactl").write_bytes(b"")
    t = write_trace(tmp_path / "t.jsonl", [
        {"seq": 1, "op": "ioctl", "file": 9, "node": "ctl", "nr": nvabi.NV_ESC_RM_FREE, "size": 16,
         "in": "00" * 16, "truncated": True},
    ])
    assert replay.main(["--nodes", str(tmp_path), t]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["seq 1 (line 2) ctl NV_ESC_RM_FREE: not replayed: the record's parameters "
                   "were cut at 16384 bytes", "0 calls replayed, 0 differ, 1 not replayed"]
