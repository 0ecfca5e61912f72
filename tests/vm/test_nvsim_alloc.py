"""The allocation paths (nv-abi.md "Classes", "Parameter layouts"): RM_ALLOC
in both forms, RM_ALLOC_MEMORY, VID_HEAP_CONTROL, and how each is counted
against the GPU's framebuffer."""

from __future__ import annotations

import ctypes

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError

MiB = 1 << 20
SIZE = 64 * MiB


def _fb(state, gpu=0):
    return state().fb_used(gpu)


@pytest.mark.parametrize("form", ["nvos21", "nvos64"])
def test_rm_alloc_vidmem_is_counted(client, gpu0, state, form):
    h, mp = client.alloc_vidmem(gpu0.hDevice, SIZE, form=form)
    assert _fb(state) == SIZE
    assert mp.size == SIZE                      # in/out: the real size written back
    assert client.surface_size(h) == SIZE
    client.free(h)
    assert _fb(state) == 0


def test_rm_alloc_under_subdevice(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hSubdevice, SIZE)
    assert _fb(state) == SIZE
    client.free(h)
    assert _fb(state) == 0


def test_nvos64_serialized_flag_is_not_supported(client, gpu0, state):
    with pytest.raises(RmError) as ei:
        client.alloc_vidmem(gpu0.hDevice, SIZE, rm_flags=A.NVOS64_FLAGS_FINN_SERIALIZED)
    assert ei.value.status == A.NV_ERR_NOT_SUPPORTED
    assert _fb(state) == 0


def test_rm_alloc_ignores_callers_params_size(client, gpu0, state):
    """The driver copies the class's own params size, whatever paramsSize says."""
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(size=SIZE)
    h = client.alloc(gpu0.hDevice, A.NV01_MEMORY_LOCAL_USER, mp, params_size=0)
    assert _fb(state) == SIZE
    assert client.surface_size(h) == SIZE


@pytest.mark.parametrize("hclass,counted", [(A.NV01_MEMORY_LOCAL_USER, True),
                                            (A.NV01_MEMORY_LOCAL_PRIVILEGED, True),
                                            (A.NV01_MEMORY_SYSTEM, False)],
                         ids=["0x40", "0x3F", "0x3E"])
def test_rm_alloc_memory_classes(client, gpu0, state, hclass, counted):
    h, p = client.alloc_memory(gpu0.fd, gpu0.hDevice, SIZE, hclass=hclass)
    assert p.params.status == A.NV_OK
    assert _fb(state) == (SIZE if counted else 0)
    assert state().objects >= 4     # client, device, subdevice, memory
    client.free(h)
    assert _fb(state) == 0


def test_rm_alloc_memory_bad_class(client, gpu0, state):
    before = state().objects
    with pytest.raises(RmError) as ei:
        client.alloc_memory(gpu0.fd, gpu0.hDevice, SIZE, hclass=A.NV01_DEVICE_0)
    assert ei.value.status in (A.NV_ERR_INVALID_CLASS, A.NV_ERR_INVALID_ARGUMENT)
    with pytest.raises(RmError):
        client.alloc_memory(gpu0.fd, gpu0.hDevice, SIZE, hclass=0x1234)
    assert _fb(state) == 0 and state().objects == before


@pytest.mark.parametrize("function", [A.NVOS32_FUNCTION_ALLOC_SIZE,
                                      A.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT,
                                      A.NVOS32_FUNCTION_ALLOC_SIZE_RANGE],
                         ids=["ALLOC_SIZE", "TILED_PITCH_HEIGHT", "SIZE_RANGE"])
def test_vid_heap_alloc_functions(client, gpu0, state, function):
    h, p = client.vid_heap_alloc(gpu0.hDevice, SIZE, function=function)
    assert p.status == A.NV_OK
    assert _fb(state) == SIZE
    assert client.surface_size(h) == SIZE
    client.vid_heap_free(gpu0.hDevice, h)
    assert _fb(state) == 0


def test_vid_heap_free_through_rm_free(client, gpu0, state):
    h, _ = client.vid_heap_alloc(gpu0.hDevice, SIZE)
    client.free(h)
    assert _fb(state) == 0


def test_vid_heap_virtual_flag_is_not_counted(client, gpu0, state):
    h, _ = client.vid_heap_alloc(gpu0.hDevice, SIZE, flags=A.NVOS32_ALLOC_FLAGS_VIRTUAL)
    assert _fb(state) == 0
    assert state().objects >= 4      # the object exists (class 0x50A0)
    client.free(h)


@pytest.mark.parametrize("function", [A.NVOS32_FUNCTION_ALLOC_SIZE,
                                      A.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT],
                         ids=["ALLOC_SIZE", "TILED_PITCH_HEIGHT"])
def test_vid_heap_pci_attr_is_not_counted(client, gpu0, state, function):
    attr = A.NVOS32_ATTR_LOCATION_PCI << A.NVOS32_ATTR_LOCATION_SHIFT
    h, _ = client.vid_heap_alloc(gpu0.hDevice, SIZE, function=function, attr=attr)
    assert _fb(state) == 0
    client.free(h)


def test_vid_heap_attr_at_the_function_specific_offset(client, gpu0, state):
    """TILED_PITCH_HEIGHT keeps attr at 64, not 56: a PCI value at 56 is the
    height there and must not make the allocation sysmem."""
    p = A.NVOS32_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice,
                            function=A.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT)
    d = p.data.AllocTiledPitchHeight
    d.hMemory, d.size = client.new_handle(), SIZE
    d.height = A.NVOS32_ATTR_LOCATION_PCI << A.NVOS32_ATTR_LOCATION_SHIFT   # offset 56
    client.vid_heap(p)
    assert _fb(state) == SIZE


def test_unknown_class_is_invalid_class(client, gpu0, state):
    before = state().objects
    for hclass in (0x1234, 0xBEEF, 0x7FFF_FFFF):
        with pytest.raises(RmError) as ei:
            client.alloc(gpu0.hDevice, hclass, bytes(64))
        assert ei.value.status == A.NV_ERR_INVALID_CLASS
    assert state().objects == before


def test_bad_parent(client, gpu0, state):
    with pytest.raises(RmError) as ei:
        client.alloc_vidmem(0x5CA0DEAD, SIZE)
    assert ei.value.status in (A.NV_ERR_INVALID_OBJECT_PARENT, A.NV_ERR_OBJECT_NOT_FOUND,
                               A.NV_ERR_INVALID_OBJECT_HANDLE)
    assert _fb(state) == 0


def test_memory_under_client_is_invalid_parent(client, state):
    with pytest.raises(RmError) as ei:
        client.alloc_vidmem(client.hClient, SIZE)
    assert ei.value.status != A.NV_OK
    assert _fb(state) == 0


def test_duplicate_handle_is_refused(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, SIZE)
    before = state()
    with pytest.raises(RmError) as ei:
        client.alloc_vidmem(gpu0.hDevice, SIZE, handle=h)
    assert ei.value.status == A.NV_ERR_INSERT_DUPLICATE_NAME
    after = state()
    assert after.fb_used(0) == SIZE and after.objects == before.objects
    # and through the other two paths, and with a non-memory object's handle
    with pytest.raises(RmError) as ei:
        client.alloc_memory(gpu0.fd, gpu0.hDevice, SIZE, handle=h)
    assert ei.value.status == A.NV_ERR_INSERT_DUPLICATE_NAME
    with pytest.raises(RmError) as ei:
        client.vid_heap_alloc(gpu0.hDevice, SIZE, handle=gpu0.hSubdevice)
    assert ei.value.status == A.NV_ERR_INSERT_DUPLICATE_NAME
    with pytest.raises(RmError):
        client.alloc_vidmem(gpu0.hDevice, SIZE, handle=client.hClient)
    assert state().fb_used(0) == SIZE


def test_handle_zero_lets_the_driver_choose(client, gpu0, state):
    h1, _ = client.alloc_vidmem(gpu0.hDevice, SIZE, handle=0)
    h2, _ = client.alloc_vidmem(gpu0.hDevice, SIZE, handle=0)
    assert h1 and h2 and h1 != h2
    assert client.surface_size(h1) == SIZE
    assert _fb(state) == 2 * SIZE
    client.free(h1)
    assert _fb(state) == SIZE
    client.free(h2)
    assert _fb(state) == 0


def test_handle_zero_through_alloc_memory_and_vid_heap(client, gpu0, state):
    h1, _ = client.alloc_memory(gpu0.fd, gpu0.hDevice, SIZE, handle=0)
    h2, _ = client.vid_heap_alloc(gpu0.hDevice, SIZE, handle=0)
    assert h1 and h2 and h1 != h2
    assert _fb(state) == 2 * SIZE


def test_device_and_subdevice_handles_chosen_by_client(client, gpu0, state):
    assert gpu0.hDevice >> 24 == 0x5C and gpu0.hSubdevice >> 24 == 0x5C
    s = state()
    assert s.objects == 1 + 2 * len(client.gpus)


def test_one_device_per_gpu_per_client(res, client, gpu0, state):
    """A second device object for the same GPU in one client is refused
    (INSUFFICIENT_RESOURCES, nvsim's reading of RM outside MIG); another
    client gets its own."""
    with pytest.raises(RmError) as ei:
        client.alloc(client.hClient, A.NV01_DEVICE_0, A.NV0080_ALLOC_PARAMETERS(deviceId=0))
    assert ei.value.status == A.NV_ERR_INSUFFICIENT_RESOURCES
    other = res.client()
    h = other.alloc(other.hClient, A.NV01_DEVICE_0, A.NV0080_ALLOC_PARAMETERS(deviceId=0))
    other.alloc_vidmem(h, SIZE)
    assert _fb(state) == SIZE
    other.free(h)
    assert _fb(state) == 0


def test_alloc_params_copied_back(client, gpu0, state):
    """NV_MEMORY_ALLOCATION_PARAMS comes back with the size the driver used
    (RM's default page from 2 MiB up is 2 MiB: the size rounded up to it),
    its limit, and the page size it picked in attr (HUGE, attr2 2MB)."""
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(size=SIZE + 1)
    client.alloc(gpu0.hDevice, A.NV01_MEMORY_LOCAL_USER, mp)
    assert mp.size == SIZE + 2 * MiB and mp.limit == SIZE + 2 * MiB - 1
    assert (mp.attr >> 23) & 3 == 3 and (mp.attr2 >> 20) & 3 == 1
    assert _fb(state) == SIZE + 2 * MiB


def test_virtual_class_is_not_counted(client, gpu0, state):
    vp = A.NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS(offset=0, limit=SIZE - 1)
    h = client.alloc(gpu0.hDevice, A.NV01_MEMORY_VIRTUAL, vp)
    assert _fb(state) == 0
    client.free(h)


def test_rm_alloc_sysmem_class_not_counted(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, SIZE, hclass=A.NV01_MEMORY_SYSTEM)
    assert _fb(state) == 0
    client.free(h)


def test_charged_to_the_calling_process(client, gpu0, gpu1, state):
    import os
    client.alloc_vidmem(gpu0.hDevice, SIZE)
    client.alloc_vidmem(gpu1.hDevice, 2 * SIZE)
    s = state()
    assert s.pid_used(os.getpid(), 0) == SIZE
    assert s.pid_used(os.getpid(), 1) == 2 * SIZE
    assert s.fb_used(1) == 2 * SIZE


def test_alloc_struct_status_not_errno(client, gpu0):
    """An RM failure is reported in the status field; the ioctl returns 0."""
    from vgpu.abi.nvclient import raw_ioctl
    p = A.NVOS21_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice,
                            hObjectNew=client.new_handle(), hClass=0x1234)
    out = A.NVOS21_PARAMETERS.from_bytes(raw_ioctl(client.fd, A.NV_ESC_RM_ALLOC, p))
    assert out.status == A.NV_ERR_INVALID_CLASS
    assert ctypes.sizeof(p) == 32


# NVOS32 attr PAGE_SIZE (24:23), attr2 PAGE_SIZE_HUGE (21:20): nvos.h
_PS = 23
_HUGE2 = 20


@pytest.mark.parametrize("size,attr,attr2,rounded", [
    (4097, 1 << _PS, 0, 8192),                          # 4KB
    (4096, 2 << _PS, 0, 64 << 10),                      # BIG: 64 KiB
    (4096, 3 << _PS, 0, 2 * MiB),                       # HUGE, attr2 DEFAULT: 2 MiB
    (4096, 3 << _PS, 1 << _HUGE2, 2 * MiB),             # HUGE 2MB
    (2 * MiB + 1, 3 << _PS, 2 << _HUGE2, 512 * MiB),    # HUGE 512MB (GH100)
    (12345, 0, 0, 64 << 10),                            # DEFAULT below 2 MiB: BIG
    (2 * MiB + 1, 0, 0, 4 * MiB),                       # DEFAULT from 2 MiB: HUGE
], ids=["4k", "big", "huge", "huge-2m", "huge-512m", "default", "default-huge"])
def test_page_size_attribute_rounds_like_rm(client, gpu0, state, size, attr, attr2, rounded):
    """RM rounds the size up to the page size it picked
    (memmgrDeterminePageSize, memmgrAllocDetermineAlignment_GM107) and
    writes the rounded size back (vidmemConstruct); the surface's size is
    the rounded one (GET_SURFACE_INFO PHYS_SIZE)."""
    h, mp = client.alloc_vidmem(gpu0.hDevice, size, attr=attr, attr2=attr2)
    assert mp.size == rounded
    assert _fb(state) == rounded
    assert client.surface_size(h) == rounded
    client.free(h)
    hv, p = client.vid_heap_alloc(gpu0.hDevice, size, attr=attr)
    if attr2 != 2 << _HUGE2:                            # vid heap: attr2 not set here
        assert p.data.AllocSize.size == rounded
        assert _fb(state) == rounded
    client.vid_heap_free(gpu0.hDevice, hv)
    assert _fb(state) == 0
