"""NV_ESC_IOCTL_XFER_CMD (nr 211): the indirection every mediator must unwrap.
The driver copies `size` (<= 16384) bytes from `ptr` and dispatches on the
inner nr, applying the inner escape's own rules."""

from __future__ import annotations

import ctypes
import errno

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError, xfer_ioctl

MiB = 1 << 20


def _err(fn, *a, code=errno.EINVAL, **kw):
    with pytest.raises(OSError) as ei:
        fn(*a, **kw)
    assert ei.value.errno == code, f"expected {errno.errorcode[code]}, got {ei.value!r}"


def test_xfer_wraps_a_whole_client_setup(res, state):
    """Every escape of a CUDA-style setup, each through XFER."""
    c = res.client(xfer=True)
    g, = c.open_gpus([0])
    h, mp = c.alloc_vidmem(g.hDevice, 6 * MiB)        # RM's 2 MiB pages: no rounding
    assert mp.size == 6 * MiB
    assert state().fb_used(0) == 6 * MiB
    assert c.surface_size(h) == 6 * MiB
    h2, _ = c.vid_heap_alloc(g.hDevice, 4 * MiB)
    assert state().fb_used(0) == 10 * MiB
    c.free(h)
    c.free(h2)
    assert state().fb_used(0) == 0


def test_xfer_alloc_result_copied_back(client, gpu0, state):
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(size=MiB)
    p = A.NVOS64_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice, hObjectNew=0,
                            hClass=A.NV01_MEMORY_LOCAL_USER, pAllocParms=ctypes.addressof(mp),
                            paramsSize=ctypes.sizeof(mp))
    out = A.NVOS64_PARAMETERS.from_bytes(xfer_ioctl(client.fd, A.NV_ESC_RM_ALLOC, p))
    assert out.status == A.NV_OK and out.hObjectNew != 0
    assert state().fb_used(0) == MiB


def test_xfer_rm_alloc_memory_on_gpu_node(client, gpu0, state):
    p = A.nv_ioctl_nvos02_parameters_with_fd()
    q = p.params
    q.hRoot, q.hObjectParent, q.hObjectNew = client.hClient, gpu0.hDevice, client.new_handle()
    q.hClass, q.limit, p.fd = A.NV01_MEMORY_LOCAL_USER, MiB - 1, gpu0.fd
    out = A.nv_ioctl_nvos02_parameters_with_fd.from_bytes(xfer_ioctl(gpu0.fd, A.NV_ESC_RM_ALLOC_MEMORY, p))
    assert out.params.status == A.NV_OK
    assert state().fb_used(0) == MiB
    # and the device rule applies to the inner escape: not on the control node
    q.hObjectNew = client.new_handle()
    _err(xfer_ioctl, client.fd, A.NV_ESC_RM_ALLOC_MEMORY, p)
    assert state().fb_used(0) == MiB


def test_xfer_ctl_only_inner_on_gpu_node(client, gpu0, state):
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(size=MiB)
    p = A.NVOS64_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice,
                            hObjectNew=client.new_handle(), hClass=A.NV01_MEMORY_LOCAL_USER,
                            pAllocParms=ctypes.addressof(mp), paramsSize=ctypes.sizeof(mp))
    _err(xfer_ioctl, gpu0.fd, A.NV_ESC_RM_ALLOC, p)
    assert state().fb_used(0) == 0


@pytest.mark.parametrize("size", [0, A.NV_ABSOLUTE_MAX_IOCTL_SIZE + 1, 1 << 20, 0xFFFFFFFF])
def test_xfer_bad_inner_size(client, size):
    _err(xfer_ioctl, client.fd, A.NV_ESC_CARD_INFO, bytes(72), size=size)


def test_xfer_max_size_is_accepted(client, num_gpus):
    """16384 bytes is the limit itself: a CARD_INFO of 227 entries (16344
    bytes, a multiple of 72) goes through."""
    n = A.NV_ABSOLUTE_MAX_IOCTL_SIZE // 72
    out = xfer_ioctl(client.fd, A.NV_ESC_CARD_INFO, bytes(72 * n))
    valid = [out[i * 72] for i in range(n)]
    assert sum(valid) == num_gpus


def test_xfer_of_xfer_is_einval(client, gpu0, state):
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(size=MiB)
    inner = A.NVOS64_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice,
                                hObjectNew=client.new_handle(), hClass=A.NV01_MEMORY_LOCAL_USER,
                                pAllocParms=ctypes.addressof(mp), paramsSize=ctypes.sizeof(mp))
    buf = ctypes.create_string_buffer(inner.to_bytes())
    x = A.nv_ioctl_xfer_t(cmd=A.NV_ESC_RM_ALLOC, size=48, ptr=ctypes.addressof(buf))
    _err(xfer_ioctl, client.fd, A.NV_ESC_IOCTL_XFER_CMD, x)
    assert state().fb_used(0) == 0


@pytest.mark.parametrize("nr,size", [(A.NV_ESC_RM_ALLOC, 40), (A.NV_ESC_RM_FREE, 20),
                                     (A.NV_ESC_RM_CONTROL, 24), (A.NV_ESC_RM_VID_HEAP_CONTROL, 200)])
def test_xfer_inner_wrong_size(client, nr, size):
    _err(xfer_ioctl, client.fd, nr, bytes(size))


def test_xfer_outer_wrong_size(client):
    _err(xfer_ioctl, client.fd, A.NV_ESC_CARD_INFO, bytes(72), outer_size=24)


def test_xfer_bad_pointer_is_efault(client, state):
    _err(xfer_ioctl, client.fd, A.NV_ESC_CARD_INFO, bytes(72), ptr=0x10, code=errno.EFAULT)
    _err(xfer_ioctl, client.fd, A.NV_ESC_CARD_INFO, bytes(72), ptr=(1 << 63), code=errno.EFAULT)


def test_xfer_unknown_inner_escape(client):
    _err(xfer_ioctl, client.fd, 0x7E, bytes(16))


def test_xfer_rm_status_reported_inside(client, gpu0):
    """An RM failure inside XFER is reported in the inner status, ioctl 0."""
    p = A.NVOS21_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice,
                            hObjectNew=client.new_handle(), hClass=0x1234)
    out = A.NVOS21_PARAMETERS.from_bytes(xfer_ioctl(client.fd, A.NV_ESC_RM_ALLOC, p))
    assert out.status == A.NV_ERR_INVALID_CLASS
    with pytest.raises(RmError):
        client.xfer = True
        try:
            client.alloc(gpu0.hDevice, 0x1234)
        finally:
            client.xfer = False
