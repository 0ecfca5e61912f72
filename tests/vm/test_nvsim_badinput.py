"""Bad input: garbage for every escape, huge sizes, bad user pointers, other
clients' handles, and a long open/alloc/close loop.  Every call must be
answered (errno or status), nothing may leak, and the kernel must not warn."""

from __future__ import annotations

import ctypes
import errno
import os
import random

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmClient, RmError, raw_ioctl, raw_ioctl_ptr

MiB = 1 << 20
U64_MAX = (1 << 64) - 1
BAD_PTRS = [0x1, 0x1000, 0xFFFF_8000_0000_0000, U64_MAX - 7]


def _ids(escapes):
    return [A.ESCAPES[n][0] for n in escapes]


# SYS_PARAMS sets a driver-global value once (later different values are
# EBUSY): random bytes would leave it set for every later test.
ALL_ESCAPES = sorted(nr for nr in A.ESCAPES if nr != A.NV_ESC_SYS_PARAMS)


@pytest.mark.parametrize("nr", ALL_ESCAPES, ids=_ids(ALL_ESCAPES))
def test_garbage_for_every_escape(client, gpu0, state, nr):
    """Random bytes of the right size, on the control and on a GPU node, in a
    fresh client's world.  Allowed outcomes: an errno, a status, or success;
    the leak check after the test proves that anything made was released."""
    rng = random.Random(nr)
    size = 4 if nr == A.NV_ESC_ATTACH_GPUS_TO_FD else A.escape_size(nr)
    for fd in (client.fd, gpu0.fd):
        for _ in range(8):
            data = bytes(rng.getrandbits(8) for _ in range(size))
            try:
                raw_ioctl(fd, nr, data)
            except OSError as e:
                assert e.errno in (errno.EINVAL, errno.EFAULT, errno.EBADF, errno.ENOMEM,
                                   errno.EBUSY, errno.EPERM, errno.ENOTTY, errno.ENODEV), e
    assert state().fb_used(0) <= state().fb_total(0)


@pytest.mark.parametrize("nr", ALL_ESCAPES, ids=_ids(ALL_ESCAPES))
def test_garbage_with_real_handles(client, gpu0, nr):
    """Garbage whose first words are this client's real handles, so that the
    contents get past the handle lookups."""
    rng = random.Random(nr * 7)
    size = 4 if nr == A.NV_ESC_ATTACH_GPUS_TO_FD else A.escape_size(nr)
    head = b"".join(h.to_bytes(4, "little") for h in (client.hClient, gpu0.hDevice))
    for fd in (client.fd, gpu0.fd):
        for _ in range(6):
            data = (head + bytes(rng.getrandbits(8) for _ in range(size)))[:size]
            try:
                raw_ioctl(fd, nr, data)
            except OSError:
                pass


@pytest.mark.parametrize("nr", [A.NV_ESC_RM_ALLOC, A.NV_ESC_RM_CONTROL, A.NV_ESC_RM_FREE,
                                A.NV_ESC_RM_VID_HEAP_CONTROL, A.NV_ESC_CARD_INFO,
                                A.NV_ESC_IOCTL_XFER_CMD],
                         ids=_ids([A.NV_ESC_RM_ALLOC, A.NV_ESC_RM_CONTROL, A.NV_ESC_RM_FREE,
                                   A.NV_ESC_RM_VID_HEAP_CONTROL, A.NV_ESC_CARD_INFO,
                                   A.NV_ESC_IOCTL_XFER_CMD]))
def test_bad_ioctl_argument_pointer_is_efault(res, nr):
    fd = res.open("nvidiactl")
    for ptr in BAD_PTRS:
        with pytest.raises(OSError) as ei:
            raw_ioctl_ptr(fd, nr, A.escape_size(nr), ptr)
        assert ei.value.errno == errno.EFAULT


def test_truncated_params_are_einval(res):
    fd = res.open("nvidiactl")
    for nr in (A.NV_ESC_RM_ALLOC, A.NV_ESC_RM_CONTROL, A.NV_ESC_RM_VID_HEAP_CONTROL,
               A.NV_ESC_RM_DUP_OBJECT, A.NV_ESC_RM_MAP_MEMORY):
        for cut in (1, 4, 8):
            with pytest.raises(OSError) as ei:
                raw_ioctl(fd, nr, bytes(A.escape_size(nr) - cut))
            assert ei.value.errno == errno.EINVAL


# ---------------------------------------------------------------- huge sizes
def test_huge_sizes_through_every_path(client, gpu0, state):
    """More than the FB is NV_ERR_NO_MEMORY; a size that wraps when rounded
    up to RM's default 2 MiB page is refused NV_ERR_INVALID_ARGUMENT
    (nvsim_rm_round: RM's memmgrAllocDetermineAlignment_GM107 does not check
    the wrap; nvsim refuses it rather than allocate the wrapped size)."""
    for size, status in ((U64_MAX, A.NV_ERR_INVALID_ARGUMENT), (1 << 63, A.NV_ERR_NO_MEMORY),
                         (U64_MAX - 4095, A.NV_ERR_INVALID_ARGUMENT)):
        with pytest.raises(RmError) as ei:
            client.alloc_vidmem(gpu0.hDevice, size)
        assert ei.value.status == status, hex(size)
        with pytest.raises(RmError) as ei:
            client.vid_heap_alloc(gpu0.hDevice, size)
        assert ei.value.status == status, hex(size)
    assert state().fb_used(0) == 0


@pytest.mark.parametrize("limit", [U64_MAX, U64_MAX - 1, 1 << 63])
def test_alloc_memory_huge_limit(client, gpu0, state, limit):
    """limit = 2**64-1 would be a size of 0 after limit + 1 wraps."""
    with pytest.raises(RmError) as ei:
        client.alloc_memory(gpu0.fd, gpu0.hDevice, 0, limit=limit)
    assert ei.value.status in (A.NV_ERR_NO_MEMORY, A.NV_ERR_INVALID_ARGUMENT)
    assert state().fb_used(0) == 0 and state().objects == 1 + 2 * len(client.gpus)


def test_zero_sizes_take_nothing(client, gpu0, state):
    for fn in (lambda: client.alloc_vidmem(gpu0.hDevice, 0),
               lambda: client.vid_heap_alloc(gpu0.hDevice, 0)):
        try:
            fn()
        except RmError:
            pass
    assert state().fb_used(0) == 0


# ---------------------------------------------------------------- pointers
@pytest.mark.parametrize("ptr", BAD_PTRS)
def test_bad_alloc_params_pointer(client, gpu0, state, ptr):
    with pytest.raises(RmError) as ei:
        client.alloc(gpu0.hDevice, A.NV01_MEMORY_LOCAL_USER, A.NV_MEMORY_ALLOCATION_PARAMS(size=MiB),
                     params_ptr=ptr)
    assert ei.value.status != A.NV_OK
    assert state().fb_used(0) == 0


def test_null_alloc_params_for_memory(client, gpu0, state):
    with pytest.raises(RmError):
        client.alloc(gpu0.hDevice, A.NV01_MEMORY_LOCAL_USER, None)
    assert state().fb_used(0) == 0


@pytest.mark.parametrize("ptr", BAD_PTRS)
def test_bad_control_params_pointer(client, gpu0, ptr):
    with pytest.raises(RmError) as ei:
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                       A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(), params_ptr=ptr)
    assert ei.value.status != A.NV_OK


@pytest.mark.parametrize("ptr", BAD_PTRS + [0])
def test_bad_fb_info_v1_list_pointer(client, gpu0, ptr):
    p = A.NV2080_CTRL_FB_GET_INFO_PARAMS(fbInfoListSize=4, fbInfoList=ptr)
    with pytest.raises(RmError) as ei:
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO, p)
    assert ei.value.status != A.NV_OK


def test_fb_info_v1_huge_list_size(client, gpu0):
    lst = (A.NV2080_CTRL_FB_INFO * 4)()
    p = A.NV2080_CTRL_FB_GET_INFO_PARAMS(fbInfoListSize=0xFFFFFFFF, fbInfoList=ctypes.addressof(lst))
    with pytest.raises(RmError):
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO, p)


def test_bad_surface_info_list_pointer(client, gpu0):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    p = A.NV0041_CTRL_GET_SURFACE_INFO_PARAMS(surfaceInfoListSize=2, surfaceInfoList=0x10)
    with pytest.raises(RmError):
        client.control(h, A.NV0041_CTRL_CMD_GET_SURFACE_INFO, p)


def test_control_params_size_too_big(client, gpu0):
    with pytest.raises(RmError):
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, bytes(64),
                       size=0xFFFFFFFF)


# ------------------------------------------------------- other clients
def test_handles_of_another_fd_are_invalid_client(res, state):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    h, _ = a.alloc_vidmem(ga.hDevice, MiB)
    calls = [
        lambda: b.alloc(ga.hDevice, A.NV01_MEMORY_LOCAL_USER,
                        A.NV_MEMORY_ALLOCATION_PARAMS(size=MiB), client=a.hClient),
        lambda: b.free(h, parent=ga.hDevice, client=a.hClient),
        lambda: b.control(ga.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                          A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(), client=a.hClient),
    ]
    for call in calls:
        with pytest.raises(RmError) as ei:
            call()
        assert ei.value.status == A.NV_ERR_INVALID_CLIENT
    p = A.NVOS32_PARAMETERS(hRoot=a.hClient, hObjectParent=ga.hDevice,
                            function=A.NVOS32_FUNCTION_INFO)
    with pytest.raises(RmError) as ei:
        b.vid_heap(p)
    assert ei.value.status == A.NV_ERR_INVALID_CLIENT
    assert state().fb_used(0) == MiB


def test_free_another_fds_client(res, state):
    a = res.client()
    b = res.client()
    p = A.NVOS00_PARAMETERS(hRoot=a.hClient, hObjectParent=0, hObjectOld=a.hClient)
    out = A.NVOS00_PARAMETERS.from_bytes(raw_ioctl(b.fd, A.NV_ESC_RM_FREE, p))
    assert out.status == A.NV_ERR_INVALID_CLIENT
    assert state().clients == 2


def test_alloc_memory_with_other_clients_handles(res, state):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    p = A.nv_ioctl_nvos02_parameters_with_fd()
    p.params.hRoot, p.params.hObjectParent, p.params.hObjectNew = a.hClient, ga.hDevice, 0x5CA00077
    p.params.hClass, p.params.limit, p.fd = A.NV01_MEMORY_LOCAL_USER, MiB - 1, gb.fd
    out = A.nv_ioctl_nvos02_parameters_with_fd.from_bytes(raw_ioctl(gb.fd, A.NV_ESC_RM_ALLOC_MEMORY, p))
    assert out.params.status == A.NV_ERR_INVALID_CLIENT
    assert state().fb_used(0) == 0


@pytest.mark.parametrize("which", ["devnull", "closed", "procfile", "gpu-node"])
def test_alloc_memory_bad_embedded_fd(res, client, gpu0, state, which):
    """System memory gets its mmap context on the file the embedded fd names,
    which must be an NVIDIA control file; anything else fails the call."""
    if which == "devnull":
        fd = res.open("/dev/null")
    elif which == "closed":
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
    elif which == "gpu-node":
        fd = res.open("nvidia0")
    else:
        fd = res.open("/proc/self/status", os.O_RDONLY)
    with pytest.raises((RmError, OSError)):
        client.alloc_memory(gpu0.fd, gpu0.hDevice, MiB, hclass=A.NV01_MEMORY_SYSTEM, fd=fd)
    assert state().fb_used(0) == 0 and state().mappings == 0


@pytest.mark.parametrize("which", ["devnull", "closed", "gpu-node", "negative"])
def test_register_fd_bad_ctl_fd(res, which):
    g = res.open("nvidia0")
    if which == "devnull":
        fd = res.open("/dev/null")
    elif which == "closed":
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
    elif which == "gpu-node":
        fd = res.open("nvidia0")            # a GPU node is not a control file
    else:
        fd = -1
    with pytest.raises(OSError) as ei:
        raw_ioctl(g, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=fd))
    assert ei.value.errno == errno.EINVAL


def test_register_fd_good_then_twice(res):
    c = res.client()
    g = res.open("nvidia0")
    raw_ioctl(g, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=c.fd))
    with pytest.raises(OSError):
        raw_ioctl(g, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=c.fd))


# ---------------------------------------------------------------- loops
def test_500_open_alloc_close_cycles(state):
    """500 lifecycles: open the control node, allocate a client (and every
    tenth time a device with FB), close.  Nothing may remain."""
    for i in range(500):
        fd = os.open("/dev/nvidiactl" if "VGPU_DEV_PREFIX" not in os.environ
                     else os.path.join(os.environ["VGPU_DEV_PREFIX"], "nvidiactl"), os.O_RDWR)
        try:
            p = A.NVOS21_PARAMETERS(hClass=A.NV01_ROOT_CLIENT)
            out = A.NVOS21_PARAMETERS.from_bytes(raw_ioctl(fd, A.NV_ESC_RM_ALLOC, p))
            assert out.status == A.NV_OK and out.hObjectNew
        finally:
            os.close(fd)
        if i % 50 == 0:
            c = RmClient()
            g, = c.open_gpus([0])
            c.alloc_vidmem(g.hDevice, 64 * MiB)
            c.close()
    s = state()
    assert s.objects == 0 and s.clients == 0 and s.fb_used(0) == 0
