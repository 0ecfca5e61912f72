"""Mapping memory (nv-abi.md "mmap" and "Embedded file descriptors"): a new
fd, RM_MAP_MEMORY naming it, mmap at offset 0 with the mapped length."""

from __future__ import annotations

import errno
import mmap
import os

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError, raw_ioctl

MiB = 1 << 20
KiB = 1 << 10
RW = mmap.PROT_READ | mmap.PROT_WRITE


def _ctx(client, gpu, size=MiB):
    """Memory plus a new GPU fd carrying a mapping context for it."""
    h, _ = client.alloc_vidmem(gpu.hDevice, size)
    fd = client.open_node(gpu.node)
    cookie = client.map_memory(gpu.hDevice, h, size, fd)
    return h, fd, cookie


def test_map_read_write_unmap(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, 2 * MiB)
    with gpu0.map(h, 2 * MiB) as m:
        assert state().mappings == 2         # the context on the fd + the mmap
        m.mm[0:4] = b"nvsi"
        m.mm[2 * MiB - 4:2 * MiB] = b"m-ok"
        assert m.mm[0:4] == b"nvsi" and m.mm[-4:] == b"m-ok"
        assert m.cookie != 0
    assert state().mappings == 0
    assert state().fb_used(0) == 2 * MiB


def test_two_mappings_of_one_object(client, gpu0, state):
    """Each mapping needs its own fd; both work at once.  (nvsim backs each
    mmap with pages of its own: FB contents are not simulated.)"""
    h, _ = client.alloc_vidmem(gpu0.hDevice, 64 * KiB)
    with gpu0.map(h, 64 * KiB) as a, gpu0.map(h, 64 * KiB) as b:
        assert a.fd != b.fd and a.cookie != b.cookie
        a.mm[100:108] = b"12345678"
        b.mm[0:2] = b"ok"
        assert state().mappings == 4
    assert state().mappings == 0


@pytest.mark.parametrize("offset", [4 * KiB, 64 * KiB, MiB])
def test_mmap_offset_not_zero_is_einval(client, gpu0, offset):
    """The right length, a non-zero offset: refused for the offset alone."""
    h, fd, _ = _ctx(client, gpu0)
    with pytest.raises(OSError) as ei:
        mmap.mmap(fd, MiB, mmap.MAP_SHARED, RW, offset=offset)
    assert ei.value.errno == errno.EINVAL
    m = mmap.mmap(fd, MiB, mmap.MAP_SHARED, RW)      # offset 0 works on the same fd
    m.close()


@pytest.mark.parametrize("length", [64 * KiB, 2 * MiB])
def test_mmap_wrong_length_on_gpu_node_is_einval(client, gpu0, length):
    h, fd, _ = _ctx(client, gpu0, MiB)
    with pytest.raises(OSError) as ei:
        mmap.mmap(fd, length, mmap.MAP_SHARED, RW)
    assert ei.value.errno == errno.EINVAL


def test_second_map_on_same_fd_is_state_in_use(client, gpu0, state):
    h, fd, _ = _ctx(client, gpu0)
    h2, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    with pytest.raises(RmError) as ei:
        client.map_memory(gpu0.hDevice, h2, MiB, fd)
    assert ei.value.status == A.NV_ERR_STATE_IN_USE
    assert state().mappings == 1


def test_mmap_without_context_fails(client, gpu0):
    fd = client.open_node(gpu0.node)
    with pytest.raises(OSError):
        mmap.mmap(fd, MiB, mmap.MAP_SHARED, RW)


def test_unmap_then_close_clears_mapping(client, gpu0, state):
    h, fd, cookie = _ctx(client, gpu0)
    m = mmap.mmap(fd, MiB, mmap.MAP_SHARED, RW)
    m.close()
    client.unmap_memory(gpu0.hDevice, h, cookie)
    client.close_fd(fd)
    assert state().mappings == 0


def test_unmap_with_wrong_cookie(client, gpu0, state):
    h, fd, cookie = _ctx(client, gpu0)
    with pytest.raises(RmError):
        client.unmap_memory(gpu0.hDevice, h, cookie ^ 0x1000)
    assert state().mappings == 1


def test_free_memory_while_mapped(client, gpu0, state):
    """Freeing the memory object (or closing its fd) must not leave a live
    context behind; the leak check at the end verifies the rest."""
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    m = gpu0.map(h, MiB)
    m.mm[0] = 7
    client.free(h)
    m.close()
    s = state()
    assert s.fb_used(0) == 0 and s.mappings == 0


@pytest.mark.parametrize("which", ["devnull", "closed", "ctl-for-vidmem", "uvm"])
def test_map_memory_bad_fd(res, client, gpu0, state, which):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    if which == "devnull":
        fd = res.open("/dev/null")
    elif which == "closed":
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
    elif which == "uvm":
        fd = res.open("nvidia-uvm")
    else:
        fd = res.open("nvidiactl")
    if which == "ctl-for-vidmem":
        # vidmem maps through a GPU node; the control node is for sysmem
        try:
            client.map_memory(gpu0.hDevice, h, MiB, fd)
        except (RmError, OSError):
            return
        with pytest.raises(OSError):
            mmap.mmap(fd, MiB, mmap.MAP_SHARED, RW)
        return
    with pytest.raises((RmError, OSError)):
        client.map_memory(gpu0.hDevice, h, MiB, fd)
    assert state().mappings == 0


def test_map_beyond_object_is_refused(client, gpu0, state):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    fd = client.open_node(gpu0.node)
    with pytest.raises(RmError):
        client.map_memory(gpu0.hDevice, h, 2 * MiB, fd)
    with pytest.raises(RmError):
        client.map_memory(gpu0.hDevice, h, MiB, fd, offset=MiB)
    assert state().mappings == 0


def test_map_sysmem_through_ctl_node(client, gpu0, state):
    h, _ = client.alloc_memory(gpu0.fd, gpu0.hDevice, 64 * KiB, hclass=A.NV01_MEMORY_SYSTEM,
                               fd=client.open_node("nvidiactl"))
    fd = client.open_node("nvidiactl")
    client.map_memory(gpu0.hDevice, h, 64 * KiB, fd)
    m = mmap.mmap(fd, 64 * KiB, mmap.MAP_SHARED, RW)
    m[0:3] = b"abc"
    assert m[0:3] == b"abc"
    m.close()


def test_map_needs_the_owning_client(res, client, gpu0):
    other = res.client()
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    fd = other.open_node(gpu0.node)
    p = A.nv_ioctl_nvos33_parameters_with_fd()
    p.params.hClient, p.params.hDevice, p.params.hMemory, p.params.length = client.hClient, gpu0.hDevice, h, MiB
    p.fd = fd
    out = A.nv_ioctl_nvos33_parameters_with_fd.from_bytes(raw_ioctl(other.fd, A.NV_ESC_RM_MAP_MEMORY, p))
    assert out.params.status == A.NV_ERR_INVALID_CLIENT
