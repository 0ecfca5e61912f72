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


# ------------------------------------------------------------ dependants
# resserv frees an object's dependants with it though they are not below it
# (refAddDependant, rs_resource.c; serverFreeResourceTree, rs_server.c): a
# channel depends on its context share and on the VA space it names, a
# context share and a TSG on their VA space (kchannelConstruct_IMPL,
# kctxshareapiConstruct_IMPL, kchangrpapiConstruct_IMPL).  One that is not
# below the freed object is invalidated: destructed, its handle kept until
# it is freed itself (clientFreeResource, bInvalidateOnly).
def _handle_exists(client, h) -> bool:
    p = A.NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS(
        hObject=h, index=A.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT)
    try:
        client.control(client.hClient, A.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, p)
    except RmError:
        return False
    return True


def _ctxshare_channel(client, dev):
    vas = client.alloc(dev, A.FERMI_VASPACE_A, A.NV_VASPACE_ALLOCATION_PARAMETERS())
    tsg = client.alloc_tsg(dev)
    cs = client.alloc(tsg, A.FERMI_CONTEXT_SHARE_A, A.NV_CTXSHARE_ALLOCATION_PARAMETERS(
        hVASpace=vas, flags=A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC))
    p = A.NV_CHANNEL_ALLOC_PARAMS(engineType=A.NV2080_ENGINE_TYPE_GR0,
                                  gpFifoEntries=A.NVSIM_GPFIFO_ENTRIES_DEFAULT,
                                  hContextShare=cs)
    ch = client.alloc(tsg, A.VOLTA_CHANNEL_GPFIFO_A, p)
    return vas, tsg, cs, ch


@pytest.mark.parametrize("what", ["vaspace", "ctxshare"])
def test_freeing_a_dependency_invalidates_the_channel(client, gpu0, state, what):
    objs = state().objects
    vas, tsg, cs, ch = _ctxshare_channel(client, gpu0.hDevice)
    assert state().tsg(client.hClient, tsg)["channels"] == 1
    client.free(vas if what == "vaspace" else cs, parent=gpu0.hDevice)
    # the channel is off its TSG, its handle stays, the resource is lost
    assert state().tsg(client.hClient, tsg)["channels"] == 0
    assert _handle_exists(client, ch)
    with pytest.raises(RmError) as ei:
        client.channel_schedule(ch, True)
    assert ei.value.status == A.NV_ERR_RESOURCE_LOST
    with pytest.raises(RmError) as ei:
        client.alloc_channel(tsg, handle=ch)
    assert ei.value.status == A.NV_ERR_INSERT_DUPLICATE_NAME
    # the handles go when freed themselves
    client.free(ch, parent=tsg)
    assert not _handle_exists(client, ch)
    client.free(tsg, parent=gpu0.hDevice)
    if what == "ctxshare":
        client.free(vas, parent=gpu0.hDevice)
    assert state().objects == objs


def test_freeing_a_bare_channels_vaspace_takes_its_hidden_tsg(client, gpu0, state):
    objs, tsgs = state().objects, len(state().tsgs)
    vas = client.alloc(gpu0.hDevice, A.FERMI_VASPACE_A, A.NV_VASPACE_ALLOCATION_PARAMETERS())
    p = A.NV_CHANNEL_ALLOC_PARAMS(engineType=A.NV2080_ENGINE_TYPE_GR0,
                                  gpFifoEntries=A.NVSIM_GPFIFO_ENTRIES_DEFAULT, hVASpace=vas)
    ch = client.alloc(gpu0.hDevice, A.VOLTA_CHANNEL_GPFIFO_A, p)
    assert len(state().tsgs) == tsgs + 1
    client.free(vas, parent=gpu0.hDevice)
    assert len(state().tsgs) == tsgs
    assert _handle_exists(client, ch)
    client.free(ch, parent=gpu0.hDevice)
    assert state().objects == objs


def test_freeing_the_device_frees_dependants_below_it(res, state):
    """A dependant below the freed object is freed, not invalidated."""
    c2 = res.client()
    g = c2.open_gpus()[0]
    objs = state().objects
    _ctxshare_channel(c2, g.hDevice)
    c2.free(g.hDevice)
    assert state().objects == objs - 2             # device and subdevice too
