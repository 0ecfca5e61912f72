"""/dev/nvidia-uvm (nv-abi.md "UVM"): plain-integer commands, initialize
first, managed memory by mmap with file offset == virtual address."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import signal

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError, UvmFile, _ioctl_obj
from vmas import (MAP_FIXED, MREMAP_FIXED, MREMAP_MAYMOVE, check, dofork, libc, munmap, mremap,
                  punch, reserve, touch_in_child)

MiB = 1 << 20


@pytest.fixture
def uvm(res):
    u = UvmFile(os.environ.get("VGPU_DEV_PREFIX", "/dev"))
    res.uvms.append(u)
    return u


def _call(u, cmd, params):
    """A UVM ioctl; returns rmStatus (the status is the struct's last field)."""
    _ioctl_obj(u.fd, cmd, params)
    return params.rmStatus


def test_initialize(uvm):
    uvm.initialize()


def test_register_gpu_before_initialize_fails(uvm, client):
    p = A.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=client.fd, hClient=client.hClient)
    assert _call(uvm, A.UVM_REGISTER_GPU, p) == A.NV_ERR_ILLEGAL_ACTION


def test_register_gpu(uvm, client):
    uvm.initialize()
    uvm.register_gpu(b"\0" * 16, client.fd, client.hClient)


def test_register_gpu_ignores_rm_ctrl_fd(res, uvm, client):
    """As the real UVM driver (uvm_api_register_gpu): rmCtrlFd never reaches
    RM, and on a GPU without MIG neither does the client; real clients send
    -1."""
    other = res.client()
    uvm.initialize()
    uvm.register_gpu(b"\0" * 16, other.fd, client.hClient)
    uvm.register_gpu(b"\0" * 16, -1, client.hClient)


def test_map_external_keeps_fb_until_uvm_free(uvm, client, gpu0, state):
    """UVM dups the memory: the FB stays in use after the application's
    RM_FREE, until UVM_FREE of the range."""
    h, _ = client.alloc_vidmem(gpu0.hDevice, 256 * MiB)
    uvm.initialize()
    base = 0x7F0000000000
    uvm.map_external(base, 256 * MiB, client.fd, client.hClient, h)
    client.free(h)
    assert state().fb_used(0) == 256 * MiB
    uvm.free(base)
    assert state().fb_used(0) == 0


def test_map_external_released_on_uvm_close(res, client, gpu0, state):
    u = UvmFile(os.environ.get("VGPU_DEV_PREFIX", "/dev"))
    u.initialize()
    h, _ = client.alloc_vidmem(gpu0.hDevice, 64 * MiB)
    u.map_external(0x7E0000000000, 64 * MiB, client.fd, client.hClient, h)
    client.free_client()
    assert state().fb_used(0) == 64 * MiB
    u.close()
    assert state().fb_used(0) == 0


def test_map_external_beyond_the_object(uvm, client, gpu0):
    h, _ = client.alloc_vidmem(gpu0.hDevice, MiB)
    uvm.initialize()
    with pytest.raises(RmError) as ei:
        uvm.map_external(0x7F0000000000, 2 * MiB, client.fd, client.hClient, h)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT


def test_managed_mmap_before_initialize_fails(uvm):
    with pytest.raises(OSError) as ei:
        uvm.managed_mmap(2 * MiB)
    assert ei.value.errno == errno.EBADFD


def test_managed_mmap_offset_equals_address(uvm, state):
    uvm.initialize()
    addr = uvm.managed_mmap(4 * MiB)
    buf = (ctypes.c_char * 16).from_address(addr)
    buf[0:5] = b"hello"
    assert buf[0:5] == b"hello"
    end = (ctypes.c_char * 1).from_address(addr + 4 * MiB - 1)
    end[0] = b"z"
    assert state().mappings == 1
    uvm.munmap(addr)
    assert state().mappings == 0 and state().fb_used(0) == 0


def test_managed_mmap_other_offset_fails(uvm):
    uvm.initialize()
    with pytest.raises(OSError) as ei:
        uvm.managed_mmap(2 * MiB, offset=0x10000)
    assert ei.value.errno == errno.EINVAL


def test_unknown_uvm_command(uvm):
    uvm.initialize()
    buf = bytearray(64)
    with pytest.raises(OSError):
        _ioctl_obj(uvm.fd, 0x7777, buf)


@pytest.mark.parametrize("which", ["devnull", "closed", "gpu-node"])
def test_register_gpu_any_rm_ctrl_fd(res, uvm, client, which):
    """The driver does not look at rmCtrlFd here (vgpu.ko is stricter)."""
    uvm.initialize()
    if which == "devnull":
        fd = res.open("/dev/null")
    elif which == "closed":
        fd = os.open("/dev/null", os.O_RDONLY)
        os.close(fd)
    else:
        fd = client.gpus[0].fd
    p = A.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=fd, hClient=client.hClient)
    assert _call(uvm, A.UVM_REGISTER_GPU, p) == A.NV_OK


def test_uvm_initialize_twice(uvm):
    """Again with the same flags is fine; with other flags it is refused, and
    the file keeps working either way."""
    uvm.initialize(flags=0)
    uvm.initialize(flags=0)
    with pytest.raises(RmError) as ei:
        uvm.initialize(flags=1)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT
    addr = uvm.managed_mmap(2 * MiB)
    uvm.munmap(addr)


def test_uvm_close_with_live_range(res, state):
    u = UvmFile(os.environ.get("VGPU_DEV_PREFIX", "/dev"))
    u.initialize()
    addr = u.managed_mmap(8 * MiB)
    (ctypes.c_char * 1).from_address(addr)[0] = b"x"
    u.close()                          # unmaps and closes
    assert state().mappings == 0


def test_rm_error_is_raised_for_uvm_status(uvm):
    with pytest.raises(RmError) as ei:
        uvm.register_gpu(b"\0" * 16, -1, 0)
    assert ei.value.status == A.NV_ERR_ILLEGAL_ACTION      # not initialized


# ---------------------------------------------------------------------------
# Managed VMAs as the real UVM driver keeps them (kernel-open/nvidia-uvm/
# uvm.c: uvm_vm_open_managed, uvm_disable_vma): a fork's copy and an mremap'd
# range are disabled, a split is not, and each VMA frees what it covers.

def _uvm_pages(state=None) -> int:
    """nvsim's count of managed pages handed out (debugfs stats)."""
    for line in open("/sys/kernel/debug/nvsim/stats").read().splitlines():
        f = line.split()
        if f and f[0] == "uvm_pages":
            return int(f[1])
    raise KeyError("uvm_pages")


def test_fork_copy_of_a_managed_range_is_disabled(uvm, state):
    uvm.initialize()
    addr = uvm.managed_mmap(2 * MiB)
    ctypes.memset(addr, 1, 1)
    dofork(addr, 2 * MiB)
    assert touch_in_child(addr) == signal.SIGBUS
    assert (ctypes.c_char * 1).from_address(addr)[0] == b"\x01", "the parent's range stays"
    uvm.munmap(addr)
    assert state().mappings == 0 and _uvm_pages(state) == 0


def test_mremap_move_of_a_managed_range_disables_it(uvm, state):
    uvm.initialize()
    addr = uvm.managed_mmap(2 * MiB)
    uvm.ranges.clear()
    ctypes.memset(addr, 1, 1)
    dst = reserve(2 * MiB)
    got = mremap(addr, 2 * MiB, 2 * MiB, MREMAP_MAYMOVE | MREMAP_FIXED, dst)
    assert got == dst
    dofork(dst, 2 * MiB)                                    # so the child has it
    assert touch_in_child(dst) == signal.SIGBUS
    assert _uvm_pages(state) == 0, "the old VMA's close freed the range's pages"
    munmap(dst, 2 * MiB)
    assert state().mappings == 0


def test_split_managed_range_keeps_both_sides(uvm, state):
    uvm.initialize()
    addr = uvm.managed_mmap(4 * MiB)
    uvm.ranges.clear()
    for off in (0, MiB, 3 * MiB):
        ctypes.memset(addr + off, 1, 1)
    assert _uvm_pages(state) == 3
    punch(addr + MiB, MiB)                                  # a hole
    assert _uvm_pages(state) == 2, "the hole's VMA freed what it covered"
    for off in (0, 3 * MiB):                                # both sides still work
        ctypes.memset(addr + off, 2, 1)
    assert _uvm_pages(state) == 2
    munmap(addr, 4 * MiB)
    assert state().mappings == 0 and _uvm_pages(state) == 0


def test_managed_mmap_must_be_readable_and_writable(uvm):
    uvm.initialize()
    base = reserve(2 * MiB)
    try:
        with pytest.raises(OSError) as ei:
            check(libc.mmap(base, 2 * MiB, mmap.PROT_READ, mmap.MAP_SHARED | MAP_FIXED,
                            uvm.fd, base), "mmap")
        assert ei.value.errno == errno.EINVAL
    finally:
        munmap(base, 2 * MiB)


def test_external_ranges_as_the_uvm_driver(uvm, client, gpu0, state):
    """UVM's external ranges, as the UVM driver keeps them (uvm_map_external.c,
    uvm_va_range.c).
    A mapping lies in a range CREATE_EXTERNAL_RANGE made; ranges do not
    overlap; UVM_FREE takes only a range's start and takes its mappings with
    it; UNMAP_EXTERNAL unmaps one GPU's mappings in [base, base + length),
    splitting what its ends cut."""
    base = 0x7E0000000000
    uvm.initialize()
    h, _ = client.alloc_vidmem(gpu0.hDevice, 8 * MiB)
    p = A.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(
        flags=A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
    client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_GID_INFO, p)
    uuid = bytes(p.data[:16])
    assert uvm.map_external(base, 8 * MiB, client.fd, client.hClient, h, gpus=[uuid],
                            create_range=False, check=False) == A.NV_ERR_INVALID_ADDRESS
    uvm.create_external_range(base, 64 * MiB)
    assert uvm.create_external_range(base + 32 * MiB, 64 * MiB, check=False) == \
        A.NV_ERR_UVM_ADDRESS_IN_USE
    assert uvm.create_external_range(base + 4096, 0, check=False) == A.NV_ERR_INVALID_ADDRESS
    uvm.map_external(base + 8 * MiB, 8 * MiB, client.fd, client.hClient, h, gpus=[uuid])
    uvm.map_external(base + 16 * MiB, 8 * MiB, client.fd, client.hClient, h, gpus=[uuid])
    client.free(h)
    assert state().fb_used(0) == 8 * MiB
    # Not a range's start: refused, the mapping stays.
    assert uvm.free(base + 8 * MiB, check=False) == A.NV_ERR_INVALID_ADDRESS
    assert uvm.unmap_external(base + 8 * MiB, 8 * MiB, b"\xee" * 16, check=False) == \
        0x26                                            # NV_ERR_INVALID_DEVICE
    # A cut: half of the first mapping goes, the rest holds the memory.
    uvm.unmap_external(base + 8 * MiB, 4 * MiB, uuid)
    uvm.unmap_external(base + 16 * MiB, 8 * MiB, uuid)
    assert state().fb_used(0) == 8 * MiB
    uvm.unmap_external(base + 12 * MiB, 4 * MiB, uuid)
    assert state().fb_used(0) == 0
    h, _ = client.alloc_vidmem(gpu0.hDevice, 8 * MiB)
    uvm.map_external(base, 8 * MiB, client.fd, client.hClient, h, gpus=[uuid])
    client.free(h)
    assert state().fb_used(0) == 8 * MiB
    uvm.free(base)                                      # the range, with its mapping
    assert state().fb_used(0) == 0
    assert uvm.free(base, check=False) == A.NV_ERR_INVALID_ADDRESS
