"""vgpu.ko's netlink API (kmod/include/uapi/vgpu.h): slices made, changed,
listed and destroyed; strict validation of every bad request with the right
errno; admin-only; events; deletion and unloading while files are open."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from vgpu.vgpuko.netlink import Nla, VgpuError
from vgpu.abi.nvclient import RmClient, raw_ioctl  # noqa: F401
from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu_fixtures import MiB, RmError, real_cards, run_rmmod
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401

LIMIT = 256 * MiB


# ------------------------------------------------------------ good requests
def test_new_get_del(kern, make_slice):
    s = make_slice(gpus=[(0, LIMIT), (1, 2 * LIMIT)], name="ctr-abc")
    info = s.info
    assert info.name == "ctr-abc"
    assert [g.index for g in info.gpus] == [0, 1]
    assert [g.mem_limit for g in info.gpus] == [LIMIT, 2 * LIMIT]
    assert all(g.mem_used == 0 and g.mem_peak == 0 and g.allocs == 0 for g in info.gpus)
    assert info.major and info.base_minor is not None
    assert [g.minor for g in info.gpus] == [info.base_minor + U.VGPU_MINOR_GPU0 + i
                                            for i in range(2)]
    assert info.open_files == 0
    got = kern.slice_get(s.id)
    assert (got.id, got.name, got.major, got.base_minor) == (s.id, "ctr-abc", info.major,
                                                             info.base_minor)
    # the nodes are the slice's minors
    for name, dev in [("nvidiactl", info.ctl_devno), ("nvidia-uvm", info.uvm_devno),
                      ("nvidia0", info.gpu_devno(0)), ("nvidia1", info.gpu_devno(1))]:
        st = os.stat(s.path(name))
        assert os.major(st.st_rdev) == os.major(dev) and os.minor(st.st_rdev) == os.minor(dev), name
    kern.slice_del(s.id)
    with pytest.raises(VgpuError) as ei:
        kern.slice_get(s.id)
    assert ei.value.errno == errno.ENOENT


def test_dump_lists_all_slices_with_usage(kern, make_slice):
    a = make_slice(gpus=[(0, LIMIT)])
    b = make_slice(gpus=[(1, LIMIT)], name="b")
    c = make_slice(gpus=[(0, LIMIT), (1, LIMIT)])
    cl = b.client()
    g = cl.open_gpus()[0]
    h = g.alloc(8 * MiB)
    by_id = {x.id: x for x in kern.slices()}
    assert {a.id, b.id, c.id} <= set(by_id)
    assert by_id[b.id].gpu(0).mem_used == 8 * MiB
    assert by_id[b.id].gpu(0).allocs == 1
    assert by_id[b.id].open_files >= 2          # ctl + nvidia0
    assert os.getpid() in by_id[b.id].pids
    assert by_id[a.id].gpu(0).mem_used == 0 and by_id[a.id].pids == []
    assert len(by_id[c.id].gpus) == 2
    cl.free(h)
    assert kern.slice_get(b.id).gpu(0).mem_used == 0
    assert kern.slice_get(b.id).gpu(0).mem_peak == 8 * MiB


def test_set_changes_limit_and_policy(kern, sl):
    kern.slice_set(sl.id, limits={0: 64 * MiB})
    assert kern.slice_get(sl.id).gpu(0).mem_limit == 64 * MiB
    kern.slice_set(sl.id, uvm_policy=U.VGPU_UVM_REFUSE)
    assert kern.slice_get(sl.id).uvm_policy == U.VGPU_UVM_REFUSE
    kern.slice_set(sl.id, uvm_policy=U.VGPU_UVM_COUNT)
    assert kern.slice_get(sl.id).uvm_policy == U.VGPU_UVM_COUNT


def test_gpu_id_is_optional_and_checked(kern, make_slice):
    cards = real_cards()
    s = make_slice(gpus=[(cards[1].minor, LIMIT, cards[1].gpu_id)])
    assert s.info.gpus[0].gpu_id in (None, cards[1].gpu_id)


# ------------------------------------------------------------- bad requests
def _new_attrs(sid, gpus=((0, LIMIT),)):
    return [Nla.u32(U.VGPU_A_SLICE_ID, sid),
            Nla.nest(U.VGPU_A_SLICE_GPUS, *[
                Nla.nest(U.VGPU_A_GPU, Nla.u32(U.VGPU_GPU_A_REAL_MINOR, m),
                         Nla.u64(U.VGPU_GPU_A_MEM_LIMIT, lim)) for m, lim in gpus])]


def _refused(kern, cmd, attrs, errnos, **kw) -> VgpuError:
    with pytest.raises(VgpuError) as ei:
        kern.raw_request(cmd, attrs, **kw)
    assert ei.value.errno in errnos, ei.value
    return ei.value


def _no_slice(kern, sid):
    with pytest.raises(VgpuError) as ei:
        kern.slice_get(sid)
    assert ei.value.errno == errno.ENOENT


SID = 777001


def test_raw_request_good_path_works(kern):
    """The raw encoder itself is sound: the same attributes succeed."""
    try:
        kern.raw_request(U.VGPU_CMD_SLICE_NEW, _new_attrs(SID))
        assert kern.slice_get(SID).gpu(0).mem_limit == LIMIT
    finally:
        kern.slice_del(SID, force=True)


@pytest.mark.parametrize("case", [
    "missing-id", "zero-id", "missing-gpus", "empty-gpus", "gpu-missing-limit",
    "gpu-missing-minor", "id-too-short", "limit-too-short", "gpus-not-nested-flag",
    "unknown-attr", "unknown-gpu-attr", "unknown-flags", "bad-uvm-policy",
    "name-too-long", "name-not-terminated", "reply-only-attr",
])
def test_new_refused(kern, case):
    sid = SID + 1
    a = _new_attrs(sid)
    gpu = lambda *c: Nla.nest(U.VGPU_A_SLICE_GPUS, Nla.nest(U.VGPU_A_GPU, *c))  # noqa: E731
    minor = Nla.u32(U.VGPU_GPU_A_REAL_MINOR, 0)
    limit = Nla.u64(U.VGPU_GPU_A_MEM_LIMIT, LIMIT)
    EINVAL = {errno.EINVAL}
    cases = {
        "missing-id": ([a[1]], EINVAL),
        "zero-id": ([Nla.u32(U.VGPU_A_SLICE_ID, 0), a[1]], {errno.EINVAL, errno.ERANGE}),
        "missing-gpus": ([a[0]], EINVAL),
        "empty-gpus": ([a[0], Nla.nest(U.VGPU_A_SLICE_GPUS)], EINVAL),
        "gpu-missing-limit": ([a[0], gpu(minor)], EINVAL),
        "gpu-missing-minor": ([a[0], gpu(limit)], EINVAL),
        "id-too-short": ([Nla(U.VGPU_A_SLICE_ID, b"\x01\x00"), a[1]], {errno.EINVAL, errno.ERANGE}),
        "limit-too-short": ([a[0], gpu(minor, Nla(U.VGPU_GPU_A_MEM_LIMIT, b"\x01\0\0\0"))],
                            {errno.EINVAL, errno.ERANGE}),
        "gpus-not-nested-flag": ([a[0], Nla(U.VGPU_A_SLICE_GPUS,
                                            [Nla.nest(U.VGPU_A_GPU, minor, limit)], 0)], EINVAL),
        "unknown-attr": (a + [Nla.u32(U.VGPU_A_MAX + 1, 1)], EINVAL),
        "unknown-gpu-attr": ([a[0], gpu(minor, limit, Nla.u32(U.VGPU_GPU_A_MAX + 1, 0))], EINVAL),
        "unknown-flags": (a + [Nla.u32(U.VGPU_A_SLICE_FLAGS, 1 << 7)], EINVAL),
        "bad-uvm-policy": (a + [Nla.u32(U.VGPU_A_SLICE_UVM_POLICY, 7)], {errno.EINVAL, errno.ERANGE}),
        "name-too-long": (a + [Nla.string(U.VGPU_A_SLICE_NAME, "x" * U.VGPU_SLICE_NAME_MAX)],
                          {errno.EINVAL, errno.ERANGE}),
        "name-not-terminated": (a + [Nla.string(U.VGPU_A_SLICE_NAME, "abc", nul=False)], EINVAL),
        "reply-only-attr": (a + [Nla.u32(U.VGPU_A_SLICE_MAJOR, 1)], EINVAL),
    }
    attrs, errnos = cases[case]
    e = _refused(kern, U.VGPU_CMD_SLICE_NEW, attrs, errnos)
    assert e.extack or e.miss_type is not None, f"no extack for {case}: {e}"
    _no_slice(kern, sid)


def test_new_duplicate_id(kern, sl):
    _refused(kern, U.VGPU_CMD_SLICE_NEW, _new_attrs(sl.id), {errno.EEXIST})
    assert kern.slice_get(sl.id).gpu(0).mem_limit == 256 * MiB


def test_new_missing_real_device(kern):
    _refused(kern, U.VGPU_CMD_SLICE_NEW, _new_attrs(SID + 2, [(9, LIMIT)]), {errno.ENODEV})
    _no_slice(kern, SID + 2)


def test_new_too_many_gpus(kern):
    gpus = [(i % 2, MiB) for i in range(U.VGPU_MAX_SLICE_GPUS + 1)]
    _refused(kern, U.VGPU_CMD_SLICE_NEW, _new_attrs(SID + 3, gpus), {errno.E2BIG, errno.EINVAL})
    _no_slice(kern, SID + 3)


def test_set_refused(kern, sl):
    gpus = lambda *c: Nla.nest(U.VGPU_A_SLICE_GPUS, Nla.nest(U.VGPU_A_GPU, *c))  # noqa: E731
    sid = Nla.u32(U.VGPU_A_SLICE_ID, sl.id)
    _refused(kern, U.VGPU_CMD_SLICE_SET, [Nla.u32(U.VGPU_A_SLICE_ID, SID + 4)], {errno.ENOENT})
    _refused(kern, U.VGPU_CMD_SLICE_SET, [gpus(Nla.u32(U.VGPU_GPU_A_INDEX, 0))], {errno.EINVAL})
    # an index the slice does not have
    _refused(kern, U.VGPU_CMD_SLICE_SET,
             [sid, gpus(Nla.u32(U.VGPU_GPU_A_INDEX, 5), Nla.u64(U.VGPU_GPU_A_MEM_LIMIT, MiB))],
             {errno.EINVAL, errno.ENOENT, errno.ERANGE})
    _refused(kern, U.VGPU_CMD_SLICE_SET, [sid, Nla.u32(U.VGPU_A_MAX + 3, 0)], {errno.EINVAL})
    _refused(kern, U.VGPU_CMD_SLICE_SET, [sid, Nla.u32(U.VGPU_A_SLICE_UVM_POLICY, 99)],
             {errno.EINVAL, errno.ERANGE})
    assert kern.slice_get(sl.id).gpu(0).mem_limit == 256 * MiB


def test_del_refused(kern, sl):
    _refused(kern, U.VGPU_CMD_SLICE_DEL, [Nla.u32(U.VGPU_A_SLICE_ID, SID + 5)], {errno.ENOENT})
    _refused(kern, U.VGPU_CMD_SLICE_DEL, [], {errno.EINVAL})
    _refused(kern, U.VGPU_CMD_SLICE_DEL, [Nla.u32(U.VGPU_A_SLICE_ID, sl.id),
                                          Nla.u32(U.VGPU_A_SLICE_FLAGS, 1 << 5)], {errno.EINVAL})
    kern.slice_get(sl.id)


def test_get_unknown_and_bad(kern):
    _refused(kern, U.VGPU_CMD_SLICE_GET, [Nla.u32(U.VGPU_A_SLICE_ID, SID + 6)], {errno.ENOENT})
    _refused(kern, U.VGPU_CMD_SLICE_GET, [Nla.u32(U.VGPU_A_SLICE_ID, 0)],
             {errno.EINVAL, errno.ERANGE, errno.ENOENT})


def test_unknown_and_send_only_commands(kern):
    _refused(kern, U.VGPU_CMD_MAX + 1, [], {errno.EOPNOTSUPP})
    _refused(kern, U.VGPU_CMD_EVENT, [], {errno.EOPNOTSUPP, errno.EINVAL})
    _refused(kern, U.VGPU_CMD_UNSPEC, [], {errno.EOPNOTSUPP})


def test_garbage_payloads(kern):
    """Truncated attribute headers and lengths past the message."""
    hdr = struct.pack("=BBH", U.VGPU_CMD_SLICE_NEW, U.VGPU_GENL_VERSION, 0)
    for junk in (b"\x08\x00", struct.pack("=HHI", 200, U.VGPU_A_SLICE_ID, 1),
                 struct.pack("=HH", 3, U.VGPU_A_SLICE_ID)):
        try:
            kern.raw_request(U.VGPU_CMD_SLICE_NEW, payload=hdr + junk)
        except VgpuError as e:
            assert e.errno in (errno.EINVAL, errno.ERANGE), e
        else:
            pytest.fail(f"garbage {junk!r} accepted")


def test_non_admin_refused(kern, sl):
    """Without CAP_NET_ADMIN every command (dump included) is EPERM."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            from vgpu.vgpuko.client import VgpuKernel as K2
            out = []
            with K2(timeout=10) as k:
                for fn in (lambda: k.slices(), lambda: k.slice_get(sl.id),
                           lambda: k.slice_set(sl.id, limits={0: 1}),
                           lambda: k.slice_del(sl.id, force=True),
                           lambda: k.slice_new(SID + 7, gpus=[(0, MiB)])):
                    try:
                        fn()
                        out.append(0)
                    except VgpuError as e:
                        out.append(e.errno)
            os.write(w, repr(out).encode())
        except BaseException as e:  # noqa: BLE001
            os.write(w, f"error {e!r}".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, data
    assert eval(data) == [errno.EPERM] * 5, data
    assert kern.slice_get(sl.id).gpu(0).mem_limit == 256 * MiB
    _no_slice(kern, SID + 7)


# -------------------------------------------------------- deletion, unload
def test_delete_with_open_files_refused_unless_forced(kern, sl):
    c = sl.client()
    g = c.open_gpus()[0]
    h = g.alloc(4 * MiB)
    with pytest.raises(VgpuError) as ei:
        kern.slice_del(sl.id)
    assert ei.value.errno == errno.EBUSY
    assert kern.slice_get(sl.id).gpu(0).mem_used == 4 * MiB
    kern.slice_del(sl.id, force=True)
    # unlinked at once: gone from the API, its nodes stop opening ...
    with pytest.raises(VgpuError):
        kern.slice_get(sl.id)
    assert sl.id not in {s.id for s in kern.slices()}
    with pytest.raises(OSError):
        fd = os.open(sl.path("nvidiactl"), os.O_RDWR)
        os.close(fd)
    # ... and open files keep working until closed
    assert g.vid_heap_info()[0] > 0
    c.free(h)
    sl.close_all()


def test_rmmod_refused_while_a_file_is_open(sl):
    fd = sl.open("nvidiactl")
    r = run_rmmod()
    assert r.returncode != 0, "rmmod vgpu succeeded with a file open"
    assert os.path.exists("/sys/module/vgpu")
    # the open file still works
    p = A.nv_ioctl_rm_api_version_t(cmd=A.NV_RM_API_VERSION_CMD_QUERY)
    out = raw_ioctl(fd, A.NV_ESC_CHECK_VERSION_STR, p)
    assert A.nv_ioctl_rm_api_version_t.from_bytes(out).versionString
    sl.close_fd(fd)


# ------------------------------------------------------------------- events
def test_events(kern, sl):
    with kern.subscribe(timeout=5) as ev:
        kern.slice_set(sl.id, limits={0: 16 * MiB})
        c = sl.client()
        opened = ev.wait_for(lambda e: e.type == U.VGPU_EVENT_DEVICE_OPENED and e.slice_id == sl.id)
        assert opened is not None, "no DEVICE_OPENED event"
        assert opened.pid == os.getpid()
        g = c.open_gpus()[0]
        with pytest.raises(RmError) as ei:
            g.alloc(16 * MiB + 1)
        assert ei.value.status == A.NV_ERR_NO_MEMORY
        refused = ev.wait_for(lambda e: e.type == U.VGPU_EVENT_ALLOC_REFUSED)
        assert refused is not None, "no ALLOC_REFUSED event"
        # the size refused is what RM would allocate: 2 MiB pages from
        # 2 MiB up (vgpu_rm_rounded, reserved before the call)
        assert (refused.slice_id, refused.pid, refused.gpu, refused.size) == \
            (sl.id, os.getpid(), 0, 18 * MiB)
        assert kern.slice_get(sl.id).gpu(0).refusals == 1
        sl.close_all()
        emptied = ev.wait_for(lambda e: e.type == U.VGPU_EVENT_SLICE_EMPTIED and e.slice_id == sl.id)
        assert emptied is not None, "no SLICE_EMPTIED event"
        assert kern.slice_get(sl.id).open_files == 0
