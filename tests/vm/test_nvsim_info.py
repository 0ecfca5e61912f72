"""Controls that report memory (nv-abi.md "Controls that report memory"):
FB_GET_INFO V1 and V2, VID_HEAP INFO, GET_SURFACE_INFO, GET_PIDS and
GET_PID_INFO."""

from __future__ import annotations

import os
import signal
import time

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmClient, RmError

MiB = 1 << 20
GiB = 1 << 30
KiB = 1 << 10

I_TOTAL = A.NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE
I_RAM = A.NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE
I_HEAP = A.NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE
I_FREE = A.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE
I_USABLE = A.NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE


def test_fb_info_v2_totals(gpu0, fb_size):
    fb = gpu0.fb_info([I_TOTAL, I_RAM, I_HEAP, I_FREE, I_USABLE])
    assert fb[I_TOTAL] == fb_size // KiB
    assert fb[I_RAM] == fb_size // KiB
    assert fb[I_USABLE] == fb_size // KiB
    assert fb[I_HEAP] == fb_size // KiB
    assert fb[I_FREE] == fb_size // KiB


def test_fb_info_v2_free_follows_allocations(client, gpu0, gpu1, fb_size):
    h, _ = client.alloc_vidmem(gpu0.hDevice, 3 * GiB)
    client.vid_heap_alloc(gpu0.hDevice, 512 * MiB)
    fb = gpu0.fb_info([I_TOTAL, I_FREE])
    assert fb[I_TOTAL] == fb_size // KiB
    assert fb[I_FREE] == (fb_size - 3 * GiB - 512 * MiB) // KiB
    assert gpu1.fb_info([I_FREE])[I_FREE] == fb_size // KiB
    client.free(h)
    assert gpu0.fb_info([I_FREE])[I_FREE] == (fb_size - 512 * MiB) // KiB


def test_fb_info_v1_matches_v2(client, gpu0):
    client.alloc_memory(gpu0.fd, gpu0.hDevice, 5 * GiB)
    idx = [I_TOTAL, I_RAM, I_HEAP, I_FREE, I_USABLE,
           A.NV2080_CTRL_FB_INFO_INDEX_MAPPABLE_HEAP_SIZE]
    assert gpu0.fb_info_v1(idx) == gpu0.fb_info(idx)


def test_fb_info_v2_list_size_too_big(client, gpu0):
    p = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=A.NV2080_CTRL_FB_INFO_MAX_LIST_SIZE + 1)
    with pytest.raises(RmError) as ei:
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p)
    assert ei.value.status in (A.NV_ERR_INVALID_ARGUMENT, A.NV_ERR_INVALID_PARAM_STRUCT)


def test_fb_info_wrong_params_size(client, gpu0):
    p = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=1)
    with pytest.raises(RmError) as ei:
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p, size=1024)
    assert ei.value.status == A.NV_ERR_INVALID_PARAM_STRUCT


def test_fb_info_on_device_handle_is_refused(client, gpu0):
    """NV2080 controls belong to the subdevice."""
    p = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=1)
    p.fbInfoList[0].index = I_TOTAL
    with pytest.raises(RmError):
        client.control(gpu0.hDevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p)


def test_vid_heap_info_bytes(client, gpu0, fb_size):
    assert gpu0.vid_heap_info() == (fb_size, fb_size)
    client.alloc_vidmem(gpu0.hDevice, 123 * MiB + 4096)
    total, free = gpu0.vid_heap_info()
    # RM's default page from 2 MiB up is 2 MiB: 124 MiB allocated
    assert total == fb_size and free == fb_size - 124 * MiB


def test_vid_heap_info_counts_all_clients(res, fb_size):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    a.alloc_vidmem(ga.hDevice, GiB)
    assert gb.vid_heap_info() == (fb_size, fb_size - GiB)


@pytest.mark.parametrize("path,allocated", [("rm-alloc", 3 * GiB + 6 * MiB),
                                            ("alloc-memory", 3 * GiB + 6 * MiB),
                                            ("vid-heap", 3 * GiB + 6 * MiB)])
def test_surface_info_size(gpu0, path, allocated):
    """The surface's size is what the driver allocated: RM's 2 MiB default
    page on every path (NVOS02's 0x40 is RM_ALLOC with a DEFAULT page size,
    _rmAllocMemoryLocalUser)."""
    h = gpu0.alloc(3 * GiB + 5 * MiB, path)
    assert gpu0.client.surface_size(h) == allocated


def test_surface_info_of_non_memory_object(client, gpu0):
    with pytest.raises(RmError):
        client.surface_size(gpu0.hSubdevice)


def test_get_pids_lists_us(client, gpu0, gpu1):
    """Processes with a subdevice on the GPU are listed (ID_TYPE_CLASS with
    NV20_SUBDEVICE_0 means "with or without GPU contexts"), once each."""
    client.alloc_vidmem(gpu0.hDevice, 64 * MiB)
    client.alloc_vidmem(gpu0.hDevice, 64 * MiB)
    pids = gpu0.pids()
    assert pids.count(os.getpid()) == 1
    assert os.getpid() in gpu1.pids()


def test_get_pids_bad_id_type(client, gpu0):
    with pytest.raises(RmError) as ei:
        gpu0.pids(id_type=7)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT


def test_pid_info_video_memory(client, gpu0, gpu1):
    me = os.getpid()
    client.alloc_vidmem(gpu0.hDevice, 64 * MiB)
    client.alloc_memory(gpu0.fd, gpu0.hDevice, 32 * MiB)
    client.vid_heap_alloc(gpu1.hDevice, 16 * MiB)
    assert gpu0.pid_vidmem([me]) == {me: 96 * MiB}
    assert gpu1.pid_vidmem([me]) == {me: 16 * MiB}


def test_pid_info_of_unknown_pid_is_zero(client, gpu0):
    client.alloc_vidmem(gpu0.hDevice, 64 * MiB)
    assert gpu0.pid_vidmem([0x3FFFFFF0]).get(0x3FFFFFF0, 0) == 0


def test_pid_info_too_many_entries(client, gpu0):
    p = A.NV2080_CTRL_GPU_GET_PID_INFO_PARAMS(pidInfoListCount=A.NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES + 1)
    with pytest.raises(RmError) as ei:
        client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_PID_INFO, p)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT


def test_pids_of_two_processes(res, gpu0):
    """A second process (fork) with its own allocation shows up separately."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            c = RmClient()
            g, = c.open_gpus([0])
            c.alloc_vidmem(g.hDevice, 8 * MiB)
            os.write(w, b"k")
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"k"
        gpu0.client.alloc_vidmem(gpu0.hDevice, 4 * MiB)
        pids = gpu0.pids()
        assert pid in pids and os.getpid() in pids
        assert gpu0.pid_vidmem([pid, os.getpid()]) == {pid: 8 * MiB, os.getpid(): 4 * MiB}
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)


def test_control_unknown_cmd_on_subdevice(client, gpu0):
    with pytest.raises(RmError) as ei:
        client.control(gpu0.hSubdevice, 0x20809999, bytes(16))
    assert ei.value.status in (A.NV_ERR_NOT_SUPPORTED, A.NV_ERR_INVALID_COMMAND)


def test_control_unknown_object(client):
    with pytest.raises(RmError) as ei:
        client.control(0x5CA0BEEF, A.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                       A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS())
    assert ei.value.status in (A.NV_ERR_INVALID_OBJECT_HANDLE, A.NV_ERR_OBJECT_NOT_FOUND)


def test_fb_info_list_order_and_repeats(client, gpu0, fb_size):
    """Each entry is answered in place; the indexes are left as they were."""
    p = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=3)
    for i, ix in enumerate((I_FREE, I_TOTAL, I_FREE)):
        p.fbInfoList[i].index = ix
    p.fbInfoList[3].index, p.fbInfoList[3].data = I_TOTAL, 0xDEAD   # past listSize
    client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p)
    got = [(p.fbInfoList[i].index, p.fbInfoList[i].data) for i in range(4)]
    kib = fb_size // KiB
    assert got == [(I_FREE, kib), (I_TOTAL, kib), (I_FREE, kib), (I_TOTAL, 0xDEAD)]
