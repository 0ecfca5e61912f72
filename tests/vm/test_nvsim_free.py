"""Freeing: an object, an ancestor with everything below it, the whole client,
and the cleanup done on the last close of a file (including a process killed
while it holds framebuffer)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmClient, RmError

MiB = 1 << 20
GiB = 1 << 30


def test_free_object_releases_fb(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, 100 * MiB)
    objs = state().objects
    client.free(h)
    s = state()
    assert s.fb_used(0) == 0 and s.objects == objs - 1


def test_free_twice_is_an_error(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    client.free(h)
    with pytest.raises(RmError) as ei:
        client.free(h, parent=gpu0.hDevice)
    assert ei.value.status in (A.NV_ERR_OBJECT_NOT_FOUND, A.NV_ERR_INVALID_OBJECT_HANDLE)


def test_free_device_frees_everything_below(client, gpu0, state):
    mem = [client.alloc_vidmem(gpu0.hDevice, 10 * MiB)[0],
           client.alloc_memory(gpu0.fd, gpu0.hDevice, 20 * MiB)[0],
           client.vid_heap_alloc(gpu0.hDevice, 30 * MiB)[0],
           client.alloc_vidmem(gpu0.hSubdevice, 40 * MiB)[0]]
    assert state().fb_used(0) == 100 * MiB
    objs = state().objects
    client.free(gpu0.hDevice)
    s = state()
    assert s.fb_used(0) == 0
    assert s.objects == objs - 2 - len(mem)        # device, subdevice, 4 memories
    for h in mem:
        with pytest.raises(RmError):
            client.surface_size(h)


def test_free_subdevice_keeps_device_memory(client, gpu0, state):
    a, _ = client.alloc_vidmem(gpu0.hDevice, 10 * MiB)
    client.alloc_vidmem(gpu0.hSubdevice, 20 * MiB)
    client.free(gpu0.hSubdevice)
    assert state().fb_used(0) == 10 * MiB
    assert client.surface_size(a) == 10 * MiB


def test_free_client_frees_all(client, gpu0, gpu1, state):
    client.alloc_vidmem(gpu0.hDevice, GiB)
    client.alloc_vidmem(gpu1.hDevice, 2 * GiB)
    client.free_client()
    s = state()
    assert s.fb_used(0) == 0 and s.fb_used(1) == 0
    assert s.objects == 0 and s.clients == 0


def test_free_client_only_frees_that_client(res, state):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    a.alloc_vidmem(ga.hDevice, GiB)
    b.alloc_vidmem(gb.hDevice, 2 * GiB)
    a.free_client()
    s = state()
    assert s.fb_used(0) == 2 * GiB and s.clients == 1


def test_close_ctl_fd_frees_clients(res, state):
    c = res.client()
    g, = c.open_gpus([0])
    c.alloc_vidmem(g.hDevice, GiB)
    c.alloc_memory(g.fd, g.hDevice, GiB)
    assert state().fb_used(0) == 2 * GiB
    c.close()
    s = state()
    assert s.fb_used(0) == 0 and s.clients == 0 and s.objects == 0


def test_several_clients_on_one_fd_all_freed_on_close(res, state):
    c = res.client()
    extra = [c.alloc_client() for _ in range(3)]
    assert len(set(extra) | {c.hClient}) == 4
    assert state().clients == 4
    c.close()
    assert state().clients == 0


def test_gpu_fd_close_keeps_client_alive(res, state):
    """Closing the GPU node does not free the client's objects (they live on
    the control file)."""
    c = res.client()
    g, = c.open_gpus([0])
    h, _ = c.alloc_vidmem(g.hDevice, GiB)
    c.close_fd(g.fd)
    assert state().fb_used(0) == GiB
    assert c.surface_size(h) == GiB


def test_killed_child_releases_everything(res, wait_state):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # child
        try:
            os.close(r)
            c = RmClient()
            g, = c.open_gpus([0])
            c.alloc_vidmem(g.hDevice, 3 * GiB)
            c.vid_heap_alloc(g.hDevice, GiB)
            m, _ = c.alloc_vidmem(g.hDevice, 1 * MiB)
            mp = g.map(m, MiB)          # keep it: a dropped Mapping unmaps
            mp.mm[0] = 1
            os.write(w, b"k")
            time.sleep(120)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 1) == b"k", "child failed before allocating"
        s = wait_state(lambda s: s.pid_used(pid, 0) == 4 * GiB + MiB)
        assert s.pid_used(pid, 0) == 4 * GiB + MiB
        assert s.fb_used(0) == 4 * GiB + MiB and s.mappings == 2   # context + mmap
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
    s = wait_state(lambda s: not s.leaks())
    assert s.fb_used(0) == 0 and s.pid_used(pid, 0) == 0
    assert s.objects == 0 and s.clients == 0 and s.mappings == 0


def test_child_exit_with_inherited_fd_keeps_parent_client(res, state):
    """A forked child that exits does not free the parent's client: the file
    is shared and only its last close frees."""
    c = res.client()
    g, = c.open_gpus([0])
    c.alloc_vidmem(g.hDevice, GiB)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert state().fb_used(0) == GiB and state().clients == 1
