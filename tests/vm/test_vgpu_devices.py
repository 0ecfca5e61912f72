"""What a container sees through a slice's nodes: only its GPUs, renumbered;
embedded fds translated (mapping, sysmem contexts, UVM) and foreign fds
refused; the allow-list (unknown escapes, classes and controls, the TSG
scheduling controls); clean answers to malformed calls; and a long
open/alloc/close loop that leaves nothing behind."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import time
from pathlib import Path

import pytest

from vgpu.abi.nvclient import (RmClient, _ioctl_addr, raw_ioctl, raw_ioctl_ptr,
                           xfer_ioctl)
from vgpu.abi import nvabi as A
from vgpu_fixtures import MiB, RmError, gpu_uuid, nvsim_fb, read_vstate, real_cards, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401

U64_MAX = (1 << 64) - 1
BAD_PTRS = [0x1, 0x1000, 0xFFFF_8000_0000_0000, U64_MAX - 7]
CLEAN_ERRNOS = {errno.EINVAL, errno.EFAULT, errno.ENOTTY, errno.EPERM, errno.EBADF,
                errno.E2BIG, errno.ENOMEM, errno.EOPNOTSUPP, errno.EACCES, errno.ENODEV}


def _nvsim_ioctls() -> int:
    for line in open("/sys/kernel/debug/nvsim/stats"):
        f = line.split()
        if f and f[0] == "ioctls":
            return int(f[1])
    raise KeyError("ioctls")


# ------------------------------------------------------------- visibility
def test_slice_sees_only_its_gpu_renumbered(make_slice):
    real = real_cards()
    sl = make_slice(gpus=[(real[1].minor, 64 * MiB)])
    c = sl.client()
    assert len(c.cards) == 1
    card = c.cards[0]
    assert card.gpu_id == real[1].gpu_id
    assert card.minor == 0                              # the container's nvidia0
    assert (card.bus, card.slot) == (real[1].bus, real[1].slot)
    assert not os.path.exists(sl.path("nvidia1"))
    g = c.open_gpus()[0]                                # deviceId 0 -> real GPU 1
    h = g.alloc(8 * MiB)
    assert (nvsim_fb(0), nvsim_fb(1)) == (0, 8 * MiB)
    assert sl.used() == 8 * MiB
    c.free(h)


def test_card_info_large_array_only_slice_entries(make_slice):
    sl = make_slice(gpus=[(0, MiB), (1, MiB)])
    c = sl.client()
    arr = (A.nv_ioctl_card_info_t * 32)()
    _ioctl_addr(c.fd, A.nv_ioctl(A.NV_ESC_CARD_INFO, ctypes.sizeof(arr)), ctypes.addressof(arr))
    valid = [e for e in arr if e.valid]
    assert [e.minor_number for e in valid] == [0, 1]
    assert all(not e.valid for e in list(arr)[2:])


def test_device_outside_slice_refused(make_slice):
    real = real_cards()
    sl = make_slice(gpus=[(real[1].minor, 64 * MiB)])
    c = sl.client()
    c.attach_gpus([real[1].gpu_id])
    for dev_id in (1, 2, 31, 0xFFFFFFFF):
        with pytest.raises(RmError) as ei:
            c.alloc(c.hClient, A.NV01_DEVICE_0, A.NV0080_ALLOC_PARAMETERS(deviceId=dev_id))
        assert ei.value.status != A.NV_OK
    # nothing reached GPU 0's world
    assert nvsim_fb(0) == 0


def test_attach_foreign_gpu_refused(make_slice):
    real = real_cards()
    sl = make_slice(gpus=[(real[1].minor, 64 * MiB)])
    c = sl.client()
    with pytest.raises(OSError):
        c.attach_gpus([real[0].gpu_id])
    c.attach_gpus([real[1].gpu_id])


# ------------------------------------------------------------ embedded fds
def test_map_memory_through_virtual_nodes(make_slice):
    """RM_MAP_MEMORY naming a NEW fd of the slice's GPU node, then mmap of
    that fd (nvsim backs each mapping with its own pages: FB contents are
    not simulated, so only each mapping's own contents are checked)."""
    sl = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    h = g.alloc(2 * MiB)
    before = _nvsim_state_mappings()
    with g.map(h, 2 * MiB) as m, g.map(h, 2 * MiB) as m2:
        assert m.fd != m2.fd and m.cookie and m2.cookie
        assert _nvsim_state_mappings() == before + 4   # two contexts + two mmaps
        m.mm[0:8] = b"vgpu-mm!"
        m.mm[2 * MiB - 4:] = b"tail"
        m2.mm[0:2] = b"ok"
        assert m.mm[0:8] == b"vgpu-mm!" and m.mm[2 * MiB - 4:] == b"tail"
        assert m2.mm[0:2] == b"ok"
    assert _nvsim_state_mappings() == before
    assert sl.used() == 2 * MiB
    c.free(h)


def test_sysmem_context_on_virtual_ctl_fd(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    h, p = c.alloc_memory(g.fd, g.hDevice, 1 * MiB, hclass=A.NV01_MEMORY_SYSTEM)
    ctx_fd = p.fd                                      # a new fd on the slice's nvidiactl
    mm = mmap.mmap(ctx_fd, 1 * MiB, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    mm[0:4] = b"sys!"
    assert mm[0:4] == b"sys!"
    mm.close()
    assert sl.used() == 0
    c.free(h)


@pytest.mark.parametrize("which", ["devnull", "real-ctl", "real-gpu", "other-slice-gpu", "closed"])
def test_map_memory_foreign_fd_refused(make_slice, res, which):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    other = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    h = g.alloc(1 * MiB)
    if which == "devnull":
        fd = res.open("/dev/null")
    elif which == "real-ctl":
        fd = res.open("/dev/nvidiactl")
    elif which == "real-gpu":
        fd = res.open("/dev/nvidia0")
    elif which == "other-slice-gpu":
        fd = other.open("nvidia0")
    else:
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
    before = _nvsim_state_mappings()
    with pytest.raises((RmError, OSError)) as ei:
        c.map_memory(g.hDevice, h, 1 * MiB, fd)
    if isinstance(ei.value, RmError):
        assert ei.value.status != A.NV_OK
    else:
        assert ei.value.errno in CLEAN_ERRNOS
    assert _nvsim_state_mappings() == before
    c.free(h)


def _nvsim_state_mappings() -> int:
    for line in open("/sys/kernel/debug/nvsim/state"):
        f = line.split()
        if f and f[0] == "mappings":
            return int(f[1])
    return -1


@pytest.mark.parametrize("which", ["devnull", "real-ctl"])
def test_register_fd_foreign_refused(make_slice, res, which):
    sl = make_slice()
    c = sl.client()
    gfd = sl.open("nvidia0")
    fd = res.open("/dev/null" if which == "devnull" else "/dev/nvidiactl")
    with pytest.raises(OSError) as ei:
        raw_ioctl(gfd, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=fd))
    assert ei.value.errno in CLEAN_ERRNOS
    raw_ioctl(gfd, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=c.fd))


def test_uvm_register_gpu_with_virtual_ctl_fd(make_slice):
    sl = make_slice()
    c = sl.client()
    g = c.open_gpus()[0]
    u = sl.uvm()
    u.initialize()
    u.register_gpu(gpu_uuid(c, g), c.fd, c.hClient)


def test_uvm_register_gpu_with_no_ctl_fd(make_slice):
    """Real clients send rmCtrlFd -1 (the UVM driver ignores it here): the
    client must then be one of the slice's, whichever file made it."""
    sl = make_slice()
    other = make_slice()
    c = sl.client()
    uuid = gpu_uuid(c, c.open_gpus()[0])
    oc = other.client()
    u = sl.uvm()
    u.initialize()
    u.register_gpu(uuid, -1, c.hClient)
    with pytest.raises(OSError) as ei:
        u.register_gpu(uuid, -1, oc.hClient)
    assert ei.value.errno == errno.EPERM
    # No client at all (tinygrad): the driver reads one only under MIG.
    u2 = sl.uvm()
    u2.initialize()
    u2.register_gpu(uuid, -1, 0)


@pytest.mark.parametrize("which", ["devnull", "real-ctl"])
def test_uvm_register_gpu_foreign_fd_refused(make_slice, res, which):
    sl = make_slice()
    c = sl.client()
    c.open_gpus()
    u = sl.uvm()
    u.initialize()
    if which == "devnull":
        fd = res.open("/dev/null")
        h = c.hClient
    else:
        real = res.client()
        real.open_gpus()
        fd, h = real.fd, real.hClient
    with pytest.raises((RmError, OSError)):
        u.register_gpu(b"\0" * 16, fd, h)


def test_uvm_map_external_cannot_escape_the_quota(make_slice):
    """UVM_MAP_EXTERNAL_ALLOCATION dups the memory inside the driver: the FB
    stays allocated after the application's RM_FREE until UVM_FREE.  Freeing
    and allocating again must not let nvsim's fb_used pass the quota."""
    limit = 16 * MiB
    sl = make_slice(gpus=[(0, limit)])
    c = sl.client()
    g = c.open_gpus()[0]
    u = sl.uvm()
    u.initialize()
    base = 0x7F0000000000
    h = g.alloc(limit)
    u.map_external(base, limit, c.fd, c.hClient, h)
    c.free(h)
    assert nvsim_fb(0) == limit
    try:
        h2 = g.alloc(limit)
    except RmError as e:
        assert e.status == A.NV_ERR_NO_MEMORY
        h2 = None
    assert nvsim_fb(0) <= limit, "quota escaped through a UVM external mapping"
    if h2:
        c.free(h2)
    u.free(base)
    assert wait_until(lambda: nvsim_fb(0) == 0 and sl.used() == 0)


# ------------------------------------------------------------- allow-list
@pytest.mark.parametrize("nr", [0x00, 0x26, 0x30, 0x5F, 0x99, 0xC7, 219, 230, 255])
def test_unknown_escapes_refused_without_reaching_the_driver(sl, nr):
    fd = sl.open("nvidiactl")
    gfd = sl.open("nvidia0")
    for f in (fd, gfd):
        before = _nvsim_ioctls()
        with pytest.raises(OSError) as ei:
            raw_ioctl(f, nr, bytes(32))
        assert ei.value.errno in CLEAN_ERRNOS
        assert _nvsim_ioctls() == before, f"escape {nr:#x} reached nvsim"


def test_unknown_escape_inside_xfer_refused(sl):
    fd = sl.open("nvidiactl")
    before = _nvsim_ioctls()
    with pytest.raises(OSError):
        xfer_ioctl(fd, 0x99, bytes(32))
    with pytest.raises(OSError):                       # XFER inside XFER
        xfer_ioctl(fd, A.NV_ESC_IOCTL_XFER_CMD, bytes(16))
    assert _nvsim_ioctls() == before


# 0x90F2: no class has it (0x90F1, FERMI_VASPACE_A, is forwarded and nvsim
# makes it).
@pytest.mark.parametrize("hclass", [0x1234, 0xC0B5, A.NV_MEMORY_FABRIC, A.NV_MEMORY_MULTICAST_FABRIC,
                                    0x00FF, 0x90F2])
def test_unknown_classes_refused(sl, hclass):
    c = sl.client()
    g = c.open_gpus()[0]
    with pytest.raises(RmError) as ei:
        c.alloc(g.hDevice, hclass, bytes(64))
    assert ei.value.status != A.NV_OK
    assert nvsim_fb(0) == 0


@pytest.mark.parametrize("cmd", [0x20800999, 0x2080C001, 0x00800281 | 0xC000, 0x12345678,
                                 A.NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS, A.NVA06C_CTRL_CMD_MAKE_REALTIME])
def test_unknown_and_privileged_controls_refused(sl, cmd):
    c = sl.client()
    g = c.open_gpus()[0]
    with pytest.raises(RmError) as ei:
        c.control(g.hSubdevice, cmd, bytes(64))
    assert ei.value.status != A.NV_OK


def test_serialized_controls_and_allocs_refused(sl):
    c = sl.client()
    g = c.open_gpus()[0]
    with pytest.raises(RmError):
        c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(),
                  flags=A.NVOS54_FLAGS_FINN_SERIALIZED)
    with pytest.raises(RmError):
        c.alloc_vidmem(g.hDevice, MiB, rm_flags=A.NVOS64_FLAGS_FINN_SERIALIZED)
    assert sl.used() == 0 == nvsim_fb(0)


@pytest.mark.parametrize("ctrl", ["schedule", "timeslice", "preempt", "interleave"])
def test_tsg_scheduling_controls_never_reach_the_gpu(sl, ctrl):
    """The TSG's scheduling is the slice scheduler's (kmod/vgpu/policy, rule 20):
    a disable is refused; SET_TIMESLICE, PREEMPT and SET_INTERLEAVE_LEVEL
    are answered NV_OK (CUDA sets them at start-up) and not applied."""
    c = sl.client()
    g = c.open_gpus()[0]
    tsg = c.alloc_tsg(g.hDevice)
    fn = {"schedule": lambda: c.tsg_schedule(tsg, False),
          "timeslice": lambda: c.tsg_set_timeslice(tsg, 10),
          "preempt": lambda: c.tsg_preempt(tsg),
          "interleave": lambda: c.tsg_set_interleave(tsg, A.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH)}[ctrl]
    before = _tsg_line(c.hClient, tsg)
    if ctrl == "schedule":
        with pytest.raises(RmError) as ei:
            fn()
        assert ei.value.status != A.NV_OK
    else:
        fn()
    assert _tsg_line(c.hClient, tsg) == before
    c.free(tsg)


def _tsg_line(client, handle):
    for line in open("/sys/kernel/debug/nvsim/state"):
        f = line.split()
        if f and f[0] == "tsg" and int(f[4], 16) == client and int(f[6], 16) == handle:
            return f[7:]
    return None


# ---------------------------------------------------------- malformed calls
def test_wrong_sizes_refused(sl):
    fd = sl.open("nvidiactl")
    c = sl.client()
    for nr, size in [(A.NV_ESC_RM_ALLOC, 40), (A.NV_ESC_RM_ALLOC, 16), (A.NV_ESC_RM_FREE, 12),
                     (A.NV_ESC_RM_CONTROL, 48), (A.NV_ESC_RM_VID_HEAP_CONTROL, 180),
                     (A.NV_ESC_CHECK_VERSION_STR, 64), (A.NV_ESC_CARD_INFO, 71),
                     (A.NV_ESC_CARD_INFO, 0), (A.NV_ESC_IOCTL_XFER_CMD, 8),
                     (A.NV_ESC_ATTACH_GPUS_TO_FD, 0), (A.NV_ESC_ATTACH_GPUS_TO_FD, 6)]:
        with pytest.raises(OSError) as ei:
            raw_ioctl(fd, nr, bytes(size), size)
        assert ei.value.errno in CLEAN_ERRNOS, (nr, size, ei.value)
    assert c.hClient


@pytest.mark.parametrize("nr", [A.NV_ESC_RM_ALLOC, A.NV_ESC_RM_CONTROL, A.NV_ESC_RM_FREE,
                                A.NV_ESC_RM_VID_HEAP_CONTROL, A.NV_ESC_CARD_INFO,
                                A.NV_ESC_IOCTL_XFER_CMD, A.NV_ESC_CHECK_VERSION_STR])
@pytest.mark.parametrize("ptr", [0] + BAD_PTRS)
def test_bad_ioctl_argument_pointer(sl, nr, ptr):
    fd = sl.open("nvidiactl")
    size = 72 if nr == A.NV_ESC_CARD_INFO else A.escape_size(nr)
    with pytest.raises(OSError) as ei:
        raw_ioctl_ptr(fd, nr, size, ptr)
    assert ei.value.errno in (errno.EFAULT, errno.EINVAL)


@pytest.mark.parametrize("ptr", BAD_PTRS)
def test_bad_alloc_params_pointer(sl, ptr):
    c = sl.client()
    g = c.open_gpus()[0]
    with pytest.raises((RmError, OSError)):
        c.alloc(g.hDevice, A.NV01_MEMORY_LOCAL_USER, A.NV_MEMORY_ALLOCATION_PARAMS(size=MiB),
                params_ptr=ptr)
    assert sl.used() == 0 == nvsim_fb(0)


@pytest.mark.parametrize("ptr", BAD_PTRS + [0])
def test_bad_fb_info_v1_list_pointer(sl, ptr):
    c = sl.client()
    g = c.open_gpus()[0]
    p = A.NV2080_CTRL_FB_GET_INFO_PARAMS(fbInfoListSize=4, fbInfoList=ptr)
    with pytest.raises((RmError, OSError)):
        c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO, p)


def test_fb_info_bad_list_sizes(sl):
    c = sl.client()
    g = c.open_gpus()[0]
    lst = (A.NV2080_CTRL_FB_INFO * 4)()
    for n in (0xFFFFFFFF, 129, 1 << 20):
        p = A.NV2080_CTRL_FB_GET_INFO_PARAMS(fbInfoListSize=n, fbInfoList=ctypes.addressof(lst))
        with pytest.raises((RmError, OSError)):
            c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO, p)
        p2 = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=n)
        with pytest.raises((RmError, OSError)):
            c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p2)
    # a control whose paramsSize is not the struct's
    with pytest.raises((RmError, OSError)):
        c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, bytes(64))


def test_xfer_bad_sizes_and_pointers(sl):
    fd = sl.open("nvidiactl")
    c = sl.client()
    g = c.open_gpus()[0]
    p = A.NVOS32_PARAMETERS(hRoot=c.hClient, hObjectParent=g.hDevice, function=A.NVOS32_FUNCTION_INFO)
    for kw in ({"size": A.NV_ABSOLUTE_MAX_IOCTL_SIZE + 1}, {"size": 0}, {"size": 100},
               {"ptr": 0}, {"ptr": 0x1000}, {"ptr": U64_MAX - 7}, {"outer_size": 24}):
        with pytest.raises(OSError) as ei:
            xfer_ioctl(fd, A.NV_ESC_RM_VID_HEAP_CONTROL, p, **kw)
        assert ei.value.errno in CLEAN_ERRNOS, (kw, ei.value)
    out = A.NVOS32_PARAMETERS.from_bytes(xfer_ioctl(c.fd, A.NV_ESC_RM_VID_HEAP_CONTROL, p))
    assert out.status == A.NV_OK and out.total == 256 * MiB


def test_garbage_allocs_leave_nothing(sl):
    import random
    rng = random.Random(5)
    c = sl.client()
    g = c.open_gpus()[0]
    for _ in range(200):
        mp_ = A.NV_MEMORY_ALLOCATION_PARAMS.from_bytes(bytes(rng.getrandbits(8) for _ in range(128)))
        try:
            h = c.alloc(g.hDevice, rng.choice([A.NV01_MEMORY_LOCAL_USER, A.NV01_MEMORY_SYSTEM]), mp_)
            c.free(h)
        except (RmError, OSError):
            pass
        p = A.NVOS32_PARAMETERS.from_bytes(bytes(rng.getrandbits(8) for _ in range(184)))
        p.hRoot, p.hObjectParent = c.hClient, g.hDevice
        p.function = rng.choice([2, 6, 14, 3, 5, 99])
        try:
            raw_ioctl(c.fd, A.NV_ESC_RM_VID_HEAP_CONTROL, p)
        except OSError:
            pass
        assert nvsim_fb(0) <= 256 * MiB
    assert sl.used() == nvsim_fb(0)


# ------------------------------------------------------------- lifecycles
def test_1000_open_alloc_close_cycles(sl, kern):
    """1000 x (open ctl + gpu, attach, client, device, 4 KiB of FB: a 64 KiB
    page in RM, close without freeing): nothing left in vgpu or nvsim, and
    the slice's use is 0."""
    card = RmClient(sl.prefix, alloc_client=False)
    gpu_id = card.cards[0].gpu_id
    card.close()
    ctl, gpu = sl.path("nvidiactl"), sl.path("nvidia0")
    attach = (ctypes.c_uint32 * 1)(gpu_id)
    attach_cmd = A.nv_ioctl(A.NV_ESC_ATTACH_GPUS_TO_FD, 4)
    alloc_cmd = A.nv_ioctl(A.NV_ESC_RM_ALLOC, ctypes.sizeof(A.NVOS64_PARAMETERS))
    t0 = time.monotonic()
    for i in range(1000):
        fd = os.open(ctl, os.O_RDWR)
        gfd = os.open(gpu, os.O_RDWR)
        try:
            _ioctl_addr(fd, attach_cmd, ctypes.addressof(attach))
            p = A.NVOS64_PARAMETERS(hClass=A.NV01_ROOT_CLIENT)
            _ioctl_addr(fd, alloc_cmd, ctypes.addressof(p))
            assert p.status == A.NV_OK
            hc = p.hObjectNew
            dp = A.NV0080_ALLOC_PARAMETERS(deviceId=0)
            p = A.NVOS64_PARAMETERS(hRoot=hc, hObjectParent=hc, hObjectNew=0x5C000001,
                                    hClass=A.NV01_DEVICE_0, pAllocParms=ctypes.addressof(dp),
                                    paramsSize=ctypes.sizeof(dp))
            _ioctl_addr(fd, alloc_cmd, ctypes.addressof(p))
            assert p.status == A.NV_OK, A.status_name(p.status)
            mp_ = A.NV_MEMORY_ALLOCATION_PARAMS(owner=1, size=4096)
            p = A.NVOS64_PARAMETERS(hRoot=hc, hObjectParent=0x5C000001, hObjectNew=0x5C000002,
                                    hClass=A.NV01_MEMORY_LOCAL_USER, pAllocParms=ctypes.addressof(mp_),
                                    paramsSize=ctypes.sizeof(mp_))
            _ioctl_addr(fd, alloc_cmd, ctypes.addressof(p))
            assert p.status == A.NV_OK, A.status_name(p.status)
        finally:
            os.close(gfd)
            os.close(fd)
    elapsed = time.monotonic() - t0
    print(f"1000 cycles in {elapsed:.1f}s")
    assert wait_until(lambda: sl.used() == 0 and nvsim_fb(0) == 0, 10)
    s = sl.get()
    assert s.open_files == 0 and s.gpu(0).allocs == 0 and s.gpu(0).mem_peak == 64 << 10  # RM's BIG page
    v = read_vstate()
    assert wait_until(lambda: not read_vstate().leaks(), 5), v.text


# ------------------------------------------------ device instances are the driver's
ROTATE = "/sys/kernel/debug/nvsim/instance_rotate"


@pytest.fixture
def rotated():
    """nvsim's device instances rotated by one: minor 0 is instance 1 and
    minor 1 instance 0 (set while nvsim holds no object)."""
    def _write(v: str) -> bool:
        try:
            with open(ROTATE, "w") as f:
                f.write(v)
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            return False
    assert wait_until(lambda: _write("1"), 5.0), "nvsim still holds objects"
    yield
    assert wait_until(lambda: _write("0"), 5.0), "nvsim still holds objects"


def test_device_id_is_the_drivers_device_instance(rotated, make_slice):
    """NV0080's deviceId names the driver's device instance
    (gpumgr's; NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 tells it per gpuId), which
    need not be the /dev minor.  vgpu.ko asks the driver at slice creation:
    with nvsim's instances rotated, a slice of real GPU 0 still puts its
    device, and its memory, on real GPU 0."""
    cards = {c.minor: c.gpu_id for c in real_cards()}
    with RmClient("/dev") as direct:
        p = A.NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS(gpuId=cards[0])
        direct.control(direct.hClient, A.NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, p)
        assert p.deviceInstance == 1          # nvsim's model, rotated
    sl = make_slice(gpus=[(0, 256 * MiB)])
    fb0, fb1 = nvsim_fb(0), nvsim_fb(1)
    c = sl.client()
    g = c.open_gpus()[0]
    g.alloc(8 * MiB)
    assert (nvsim_fb(0) - fb0, nvsim_fb(1) - fb1) == (8 * MiB, 0)
    c.close()


# --------------------------------------------- escapes the policy rewrites
def _status_code(fd: int, card) -> A.nv_ioctl_status_code_t:
    p = A.nv_ioctl_status_code_t(domain=card.domain, bus=card.bus, slot=card.slot)
    return A.nv_ioctl_status_code_t.from_buffer_copy(
        bytes(raw_ioctl(fd, A.NV_ESC_STATUS_CODE, p)))


def test_status_code_only_for_the_slices_gpus(make_slice):
    """NV_ESC_STATUS_CODE names any GPU by PCI address (escape.c,
    nv_get_adapter_state); through a slice, only its own GPUs answer (the
    others as an address the driver does not know: EINVAL)."""
    cards = {c.minor: c for c in real_cards()}
    sl = make_slice(gpus=[(1, 64 * MiB)])
    c = sl.client(alloc_client=False)
    assert _status_code(c.fd, cards[1]).status == 0
    with pytest.raises(OSError) as ei:
        _status_code(c.fd, cards[0])
    assert ei.value.errno == errno.EINVAL


def _nvsim_memblock() -> int:
    for line in open("/sys/kernel/debug/nvsim/stats").read().splitlines():
        f = line.split()
        if f and f[0] == "memblock_size":
            return int(f[1])
    raise KeyError("memblock_size")


def test_sys_params_never_reaches_the_driver(sl):
    """The driver keeps one NUMA memblock size for every client, set by the
    first (nv.c): a container's value is answered, not applied."""
    before = _nvsim_memblock()
    c = sl.client(alloc_client=False)
    p = A.nv_ioctl_sys_params_t(memblock_size=before + (123 << 20))
    raw_ioctl(c.fd, A.NV_ESC_SYS_PARAMS, p)
    assert _nvsim_memblock() == before


@pytest.mark.parametrize("cmd", [A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
                                 A.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS])
def test_gpu_id_lists_show_only_the_slices_gpus(make_slice, cmd):
    """nvsim lists both of its GPUs; a slice on the second sees that one
    only, first, the rest NV0000_CTRL_GPU_INVALID_ID, and no GPU excluded.
    (vgpu.ko asks through the kernel entry, so the driver's whole list is
    never on a page the caller's threads can read.)"""
    import struct
    from vgpu.abi import nvrel
    cards = real_cards()
    assert len(cards) >= 2
    with RmClient("/dev") as direct:
        base = {A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS: 128,
                A.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS: 384}[cmd]    # 595.45.04's structs
        size = nvrel.size(direct.version, "control", cmd, base)
        raw = direct.control(direct.hClient, cmd, bytes(size))
    ids = struct.unpack(f"={size // 4}I", raw)
    assert ids[:2] == (cards[0].gpu_id, cards[1].gpu_id)
    sl = make_slice(gpus=((cards[1].minor, 256 * MiB),))
    c = sl.client()
    got = struct.unpack(f"={size // 4}I", c.control(c.hClient, cmd, bytes(size)))
    invalid = A.NV0000_CTRL_GPU_INVALID_ID
    assert got[0] == cards[1].gpu_id
    assert set(got[1:32]) == {invalid}
    if cmd == A.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS:
        assert set(got[32:64]) == {invalid}          # excludedGpuIds


def _last_class() -> int:
    for line in Path("/sys/kernel/debug/nvsim/stats").read_text().splitlines():
        if line.startswith("last_class "):
            return int(line.split()[1], 16)
    raise AssertionError("nvsim stats lack last_class")


def test_debugger_session_only_on_the_callers_own_client(make_slice):
    """GT200_DEBUGGER (tinygrad makes one per compute channel) debugs
    hClass3dObject of hAppClient, which the driver looks up among every
    client (ksmdbgssnConstruct_IMPL): vgpu.ko passes only 0 or the caller's
    own client, so the object is the caller's; another slice's client is
    refused before the driver."""
    a, b = make_slice(), make_slice()
    ca, cb = a.client(), b.client()
    ga, gb = ca.open_gpus()[0], cb.open_gpus()[0]
    foreign = A.NV83DE_ALLOC_PARAMETERS(hAppClient=cb.hClient, hClass3dObject=gb.hSubdevice)
    with pytest.raises(RmError) as ei:
        ca.alloc(ga.hDevice, A.GT200_DEBUGGER, foreign)
    assert ei.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    assert _last_class() != A.GT200_DEBUGGER, "it reached the driver"
    for app in (0, ca.hClient):
        own = A.NV83DE_ALLOC_PARAMETERS(hAppClient=app, hClass3dObject=ga.hSubdevice)
        try:
            ca.free(ca.alloc(ga.hDevice, A.GT200_DEBUGGER, own))
        except RmError as e:            # a subdevice is no GR object: the driver's answer
            assert e.status != A.NV_ERR_INSUFFICIENT_PERMISSIONS, e
        assert _last_class() == A.GT200_DEBUGGER, "refused before the driver"
