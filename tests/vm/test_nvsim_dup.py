"""RM_DUP_OBJECT: a dup shares the framebuffer of its source, which stays
allocated until the last reference is freed."""

from __future__ import annotations

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError

MiB = 1 << 20
GiB = 1 << 30


def test_dup_into_another_client_shares_fb(res, state):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    h, _ = a.alloc_vidmem(ga.hDevice, GiB)
    objs = state().objects
    d = b.dup(gb.hDevice, a.hClient, h)
    s = state()
    assert s.fb_used(0) == GiB                 # counted once
    assert s.objects == objs + 1
    assert b.surface_size(d) == GiB
    a.free(h)
    assert state().fb_used(0) == GiB           # the dup keeps it alive
    assert b.surface_size(d) == GiB
    b.free(d)
    assert state().fb_used(0) == 0


def test_dup_outlives_source_client_close(res, state):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    h, _ = a.alloc_memory(ga.fd, ga.hDevice, 2 * GiB)
    b.dup(gb.hDevice, a.hClient, h)
    a.close()
    s = state()
    assert s.fb_used(0) == 2 * GiB and s.clients == 1
    b.close()
    assert state().fb_used(0) == 0


def test_dup_within_one_client(client, gpu0, state):
    h, _ = client.vid_heap_alloc(gpu0.hDevice, GiB)
    d = client.dup(gpu0.hSubdevice, client.hClient, h)
    assert d != h
    client.free(h)
    assert state().fb_used(0) == GiB
    client.free(d)
    assert state().fb_used(0) == 0


def test_dup_handle_zero_chosen_by_driver(client, gpu0):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    d = client.dup(gpu0.hDevice, client.hClient, h, handle=0)
    assert d and d != h
    assert client.surface_size(d) == MiB


def test_dup_freed_with_its_parent(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, GiB)
    client.dup(gpu0.hSubdevice, client.hClient, h)
    client.free(h)
    assert state().fb_used(0) == GiB
    client.free(gpu0.hSubdevice)
    assert state().fb_used(0) == 0


def test_dup_of_missing_object(client, gpu0, state):
    before = state().objects
    with pytest.raises(RmError) as ei:
        client.dup(gpu0.hDevice, client.hClient, 0x5CA0F00D)
    assert ei.value.status in (A.NV_ERR_OBJECT_NOT_FOUND, A.NV_ERR_INVALID_OBJECT_HANDLE)
    assert state().objects == before


def test_dup_from_unknown_client(client, gpu0):
    with pytest.raises(RmError) as ei:
        client.dup(gpu0.hDevice, 0xC1D0FFFF, 0x5C000001)
    assert ei.value.status in (A.NV_ERR_INVALID_CLIENT, A.NV_ERR_OBJECT_NOT_FOUND,
                               A.NV_ERR_INVALID_OBJECT_HANDLE)


def test_dup_onto_existing_handle(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    with pytest.raises(RmError):
        client.dup(gpu0.hDevice, client.hClient, h, handle=gpu0.hSubdevice)
    assert state().fb_used(0) == MiB


def test_pid_charge_follows_the_owner(res, state):
    """The FB stays charged to the allocating process while a dup holds it."""
    import os
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    h, _ = a.alloc_vidmem(ga.hDevice, GiB)
    b.dup(gb.hDevice, a.hClient, h)
    a.free(h)
    assert state().pid_used(os.getpid(), 0) == GiB
