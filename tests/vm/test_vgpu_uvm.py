"""UVM managed ranges and the UVM file's charges through a slice
(kmod/vgpu/managed.c, uvm.c; docs/mediator.md "UVM lifetimes").

nvsim models the real UVM driver's managed VMAs (kernel-open/nvidia-uvm/
uvm.c: uvm_mmap, uvm_vm_open_managed, uvm_disable_vma): a copy made by fork
(MADV_DOFORK) or a move by mremap is disabled (its vm_ops swapped, every
fault SIGBUS) and the driver recognises its VMAs by vm_ops pointer.  The old
vm_ops wrapper of vgpu.ko never saw such a copy's close: the charge, the
vgpu file and the module stayed pinned for ever (finding 7).
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu_fixtures import MiB, gpu_uuid, in_child, nvsim_fb, read_vstate, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check, vstate  # noqa: F401
from vgpu.abi.nvclient import RmError, UvmFile
from vmas import (MREMAP_FIXED, MREMAP_MAYMOVE, dofork, munmap, mremap, punch, reserve,
                  touch_in_child)

def _uvm_mapped(sl) -> int:
    return sl.get().uvm_mapped


@pytest.fixture
def usl(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)], uvm_policy=U.VGPU_UVM_COUNT)
    u = sl.uvm()
    u.initialize()
    return sl, u


def test_managed_range_charged_while_mapped(usl):
    sl, u = usl
    addr = u.managed_mmap(8 * MiB)
    assert sl.used() == 8 * MiB
    assert _uvm_mapped(sl) == 8 * MiB
    assert read_vstate().get("ranges") == 1
    ctypes.memset(addr, 1, 4096)            # the driver's range works
    u.munmap(addr)
    assert sl.used() == 0, "the charge returns with the munmap, not later"
    assert _uvm_mapped(sl) == 0


def test_range_over_the_quota_refused(usl):
    sl, u = usl
    with pytest.raises(OSError) as ei:
        u.managed_mmap(65 * MiB)
    assert ei.value.errno == errno.ENOMEM
    assert sl.used() == 0


def test_partial_munmap_returns_that_part(usl):
    sl, u = usl
    addr = u.managed_mmap(8 * MiB)
    punch(addr + 2 * MiB, 2 * MiB)         # a hole: the VMA splits in two
    assert sl.used() == 6 * MiB
    ctypes.memset(addr, 1, 4096)            # both sides still the driver's
    ctypes.memset(addr + 6 * MiB, 1, 4096)
    punch(addr + 2 * MiB, 2 * MiB)         # the hole again: nothing more
    assert sl.used() == 6 * MiB
    u.munmap(addr)                          # the whole range, the hole with it
    assert sl.used() == 0


def test_mremap_move_returns_the_charge_and_pins_nothing(usl, vstate):
    """mremap moves the range: the driver disables the new VMA and destroys
    the range with the old one's close.  The charge returns, and nothing of
    the old wrapper stays behind (files, ranges: the leak check)."""
    sl, u = usl
    addr = u.managed_mmap(4 * MiB)
    u.ranges.clear()
    dst = reserve(4 * MiB)
    got = mremap(addr, 4 * MiB, 4 * MiB, MREMAP_MAYMOVE | MREMAP_FIXED, dst)
    assert got == dst
    assert sl.used() == 0
    dofork(dst, 4 * MiB)                    # so the child has it
    assert touch_in_child(dst) == signal.SIGBUS, "the moved copy is disabled"
    munmap(dst, 4 * MiB)
    u.close()
    assert wait_until(lambda: vstate().get("files") == 0 and vstate().get("ranges") == 0)


def test_mremap_shrink_returns_the_tail(usl):
    sl, u = usl
    addr = u.managed_mmap(4 * MiB)
    u.ranges.clear()
    got = mremap(addr, 4 * MiB, 1 * MiB)
    assert got == addr
    assert sl.used() == 1 * MiB
    munmap(addr, 1 * MiB)
    assert sl.used() == 0


def test_fork_copy_is_disabled_and_charged_once(usl):
    sl, u = usl
    addr = u.managed_mmap(4 * MiB)
    dofork(addr, 4 * MiB)
    assert touch_in_child(addr) == signal.SIGBUS
    assert sl.used() == 4 * MiB
    ctypes.memset(addr, 1, 4096)            # the parent's range still works
    u.munmap(addr)
    assert sl.used() == 0


def test_map_external_stays_charged_while_a_forked_copy_holds_the_va_space(make_slice, vstate):
    """A forked copy of a managed range (disabled, but mapped) holds the real
    UVM file, so the VA space and its external mappings (the driver's dup of
    the FB) outlive every descriptor of the parent.  The charge must stay
    until the real file is released, and return then."""
    sl = make_slice(gpus=[(0, 64 * MiB)], uvm_policy=U.VGPU_UVM_COUNT)
    c = sl.client()
    g = c.open_gpus()[0]
    u = sl.uvm()
    u.initialize()
    base = 0x7E0000000000
    h = g.alloc(16 * MiB)
    u.map_external(base, 16 * MiB, c.fd, c.hClient, h)
    c.free(h)
    addr = u.managed_mmap(2 * MiB)
    dofork(addr, 2 * MiB)

    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:                            # holds the copy, nothing else
        try:
            os.closerange(3, ready_w)
            os.closerange(ready_w + 1, go_r)
            os.closerange(go_r + 1, 65536)
            os.write(ready_w, b"1")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        assert os.read(ready_r, 1) == b"1"
        sl.close_all()                      # every descriptor and range of the parent
        assert nvsim_fb(0) == 16 * MiB, "nvsim: the VA space keeps the external mapping"
        assert sl.used() >= 16 * MiB, "the FB the driver still holds is uncharged"
        assert wait_until(lambda: vstate().get("reapers") == 1)
    finally:
        os.write(go_w, b"1")
        os.close(go_w)
        os.close(ready_r)
        os.waitpid(pid, 0)
    assert wait_until(lambda: nvsim_fb(0) == 0 and sl.used() == 0)
    assert wait_until(lambda: vstate().get("reapers") == 0 and vstate().get("files") == 0)


def test_exit_with_a_mapped_range_returns_everything(usl, vstate):
    """A process exits with a managed range mapped: MMU_NOTIFY_RELEASE keeps
    the charge until the real UVM file is released, which the exit does."""
    sl, _ = usl

    def child():
        u2 = UvmFile(sl.prefix)
        u2.initialize()
        u2.managed_mmap(4 * MiB)
        return sl.used()

    assert in_child(child)["ok"] == 4 * MiB
    assert wait_until(lambda: sl.used() == 0 and vstate().get("ranges") == 0
                      and vstate().get("reapers") == 0)


def test_mm_initialize_is_answered_nothing_to_do(usl, kern):
    """UVM_MM_INITIALIZE (CUDA's and tinygrad's second UVM file, naming the
    first) never reaches the driver, whose check of uvmFd no proxy passes
    (uvm_file_is_nvidia_uvm): vgpu.ko answers NV_WARN_NOTHING_TO_DO, the
    driver's answer for a VA space without an mm association, and the
    second file stays uninitialised (it can still become a VA space)."""
    sl, u = usl
    u2 = sl.uvm()
    p = A.UVM_MM_INITIALIZE_PARAMS(uvmFd=u.fd)
    u2.ioctl(A.UVM_MM_INITIALIZE, p)
    assert p.rmStatus == A.NV_WARN_NOTHING_TO_DO
    u2.initialize()
    addr = u2.managed_mmap(2 * MiB)
    assert sl.used() == 2 * MiB
    u2.munmap(addr)
    assert sl.used() == 0


def test_register_channel_only_for_the_named_files_client(make_slice):
    """UVM_REGISTER_CHANNEL (tinygrad registers each channel): the UVM
    driver retains hChannel of hClient through RM by handle and ignores
    rmCtrlFd, so vgpu.ko holds hClient to the control file rmCtrlFd names,
    of the same slice: another file's client is refused before the driver."""
    a = make_slice(gpus=[(0, 64 * MiB)])
    c, other = a.client(), a.client()
    c.open_gpus()
    other.open_gpus()
    u = a.uvm()
    u.initialize()
    p = A.UVM_REGISTER_CHANNEL_PARAMS(rmCtrlFd=c.fd, hClient=other.hClient, hChannel=0x1234)
    with pytest.raises(OSError) as ei:
        u.ioctl(A.UVM_REGISTER_CHANNEL, p)
    assert ei.value.errno == errno.EPERM


# ------------------------------------------------ external ranges

BASE = 0x7E0000000000


@pytest.fixture
def ext(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    u = sl.uvm()
    u.initialize()
    return sl, c, g, u, gpu_uuid(c, g)


def test_cumemmap_sequence_returns_the_charge_without_closing(ext):
    """CUDA's virtual memory management (cuMemAddressReserve,
    cuMemMap at offsets, cuMemUnmap, cuMemAddressFree; PyTorch's expandable
    segments) is CREATE_EXTERNAL_RANGE, MAP_EXTERNAL at offsets within it,
    UNMAP_EXTERNAL, then UVM_FREE of the range's start.  The charges were
    keyed by map base and dropped only by a FREE of that base: each mapping
    but the first leaked until the UVM file closed."""
    sl, c, g, u, uuid = ext
    for _ in range(3):                          # no growth from round to round
        u.create_external_range(BASE, 64 * MiB)
        for i in range(4):
            h = g.alloc(8 * MiB)
            u.map_external(BASE + i * 8 * MiB, 8 * MiB, c.fd, c.hClient, h, gpus=[uuid])
            c.free(h)                           # cuMemRelease: the mapping holds it
        assert sl.used() == 32 * MiB == nvsim_fb(0)
        u.unmap_external(BASE, 8 * MiB, uuid)   # one mapping
        assert sl.used() == 24 * MiB == nvsim_fb(0)
        u.unmap_external(BASE + 8 * MiB, 24 * MiB, uuid)     # three at once
        assert nvsim_fb(0) == 0
        assert sl.used() == 0, "unmapped FB still charged"
        u.free(BASE)
        assert sl.used() == 0


def test_free_of_the_range_returns_every_mapping_in_it(ext):
    """UVM_FREE of a range's start destroys the range with every mapping in
    it (uvm_va_range.c, uvm_free): all their charges return."""
    sl, c, g, u, uuid = ext
    u.create_external_range(BASE, 32 * MiB)
    for i in range(3):
        h = g.alloc(4 * MiB)
        u.map_external(BASE + i * 8 * MiB, 4 * MiB, c.fd, c.hClient, h, gpus=[uuid])
        c.free(h)
    assert sl.used() == 12 * MiB == nvsim_fb(0)
    u.free(BASE)
    assert sl.used() == 0 == nvsim_fb(0)


def test_unmap_that_cuts_a_mapping_keeps_its_charge(ext):
    """An unmap whose end falls inside a mapping makes the driver split it,
    which can fail (uvm_ext_gpu_map_split): vgpu.ko cannot know what is
    left, so the mapping stays charged until its range is freed."""
    sl, c, g, u, uuid = ext
    u.create_external_range(BASE, 16 * MiB)
    h = g.alloc(8 * MiB)
    u.map_external(BASE, 8 * MiB, c.fd, c.hClient, h, gpus=[uuid])
    c.free(h)
    u.unmap_external(BASE, 4 * MiB, uuid)
    assert nvsim_fb(0) == 8 * MiB           # the upper half still maps it
    assert sl.used() == 8 * MiB
    u.unmap_external(BASE + 4 * MiB, 4 * MiB, uuid)
    assert nvsim_fb(0) == 0
    assert sl.used() == 8 * MiB, "returned on a cut vgpu.ko cannot see through"
    u.free(BASE)
    assert sl.used() == 0


def test_map_outside_an_external_range_takes_nothing(ext):
    """The driver maps only inside an external range
    (uvm_map_external_allocation: NV_ERR_INVALID_ADDRESS), and a range may
    not overlap another (NV_ERR_UVM_ADDRESS_IN_USE)."""
    sl, c, g, u, uuid = ext
    h = g.alloc(8 * MiB)
    st = u.map_external(BASE, 8 * MiB, c.fd, c.hClient, h, gpus=[uuid],
                        create_range=False, check=False)
    assert st == A.NV_ERR_INVALID_ADDRESS
    u.create_external_range(BASE, 16 * MiB)
    assert u.create_external_range(BASE + 8 * MiB, 16 * MiB, check=False) == \
        A.NV_ERR_UVM_ADDRESS_IN_USE
    c.free(h)
    assert sl.used() == 0 == nvsim_fb(0)
    u.free(BASE)


def test_uvm_register_gpu_names_only_the_slices_gpus(make_slice):
    """A slice's UVM reaches only its own GPUs: UVM_REGISTER_GPU names a GPU by UUID, any GPU of
    the host (the UVM driver retains and initialises it, and every other UVM
    command naming a GPU is confined to the registered ones).  A slice
    registers only its own GPUs; any other UUID, a real GPU outside the
    slice or none at all, gets the driver's answer for an unknown UUID, so
    the answer tells nothing about the host's GPUs."""
    s0 = make_slice(gpus=((0, 64 * MiB),))
    s1 = make_slice(gpus=((1, 64 * MiB),))
    c0, c1 = s0.client(), s1.client()
    uuid0 = gpu_uuid(c0, c0.open_gpus()[0])
    uuid1 = gpu_uuid(c1, c1.open_gpus()[0])
    assert uuid0 != uuid1
    u = s0.uvm()
    u.initialize()
    for other in (uuid1, b"\0" * 16, bytes(range(16))):
        with pytest.raises(RmError) as e:
            u.register_gpu(other, -1, c0.hClient)
        assert e.value.status == A.NV_ERR_GPU_UUID_NOT_FOUND, other.hex()
        with pytest.raises(RmError) as e:
            u.register_gpu(other, c0.fd, c0.hClient)
        assert e.value.status == A.NV_ERR_GPU_UUID_NOT_FOUND, other.hex()
    u.register_gpu(uuid0, -1, c0.hClient)
    # The slice's own GPUs, whichever: a slice of both registers either.
    both = make_slice(gpus=((0, 64 * MiB), (1, 64 * MiB)))
    cb = both.client()
    ub = both.uvm()
    ub.initialize()
    ub.register_gpu(uuid1, -1, cb.hClient)
    ub.register_gpu(uuid0, cb.fd, cb.hClient)


# uvm_ioctl.h (535.261.03 and 595.45.04 alike): plain integers and a status,
# nothing the driver follows (no pointer, descriptor or handle).
UVM_PAGEABLE_MEM_ACCESS, UVM_UNSET_PREFERRED_LOCATION = 39, 43


class _PageableMemAccess(ctypes.Structure):
    _fields_ = [("pageableMemAccess", ctypes.c_uint8), ("rmStatus", ctypes.c_uint32)]


class _UnsetPreferredLocation(ctypes.Structure):
    _fields_ = [("requestedBase", ctypes.c_uint64), ("length", ctypes.c_uint64),
                ("rmStatus", ctypes.c_uint32)]


def _uvm_answer(u, cmd: int, p) -> tuple[int, bytes]:
    try:
        u.ioctl(cmd, p)
        return 0, bytes(p)
    except OSError as e:
        return e.errno, bytes(p)


def test_policy_forwards_are_forwarded(usl):
    """UVM_PAGEABLE_MEM_ACCESS (libcuda's cuInit asks it) and
    UVM_UNSET_PREFERRED_LOCATION are "forward" in every release's policy,
    with no embedded column (kmod/vgpu/policy/*.tsv; nvrel_tables.h: flags 0):
    the slice's UVM node answers them as the driver does, never with
    vgpu.ko's -EPERM.  (The review's "embedded" reading came from the
    escape table, where 0x27 and 0x2b are RM_ALLOC_MEMORY and RM_ALLOC.)"""
    sl, u = usl
    direct = UvmFile(os.environ.get("VGPU_DEV_PREFIX", "/dev"))
    try:
        direct.initialize()
        for cmd, mk in ((UVM_PAGEABLE_MEM_ACCESS,
                         lambda: _PageableMemAccess(pageableMemAccess=0xff, rmStatus=0xdead)),
                        (UVM_UNSET_PREFERRED_LOCATION,
                         lambda: _UnsetPreferredLocation(requestedBase=0x7F0000000000,
                                                         length=2 * MiB, rmStatus=0xdead))):
            got = _uvm_answer(u, cmd, mk())
            assert got[0] != errno.EPERM, f"UVM command {cmd} refused by vgpu.ko"
            assert got == _uvm_answer(direct, cmd, mk()), f"UVM command {cmd}"
    finally:
        direct.close()
    p = _PageableMemAccess(pageableMemAccess=0xff, rmStatus=0xdead)
    u.ioctl(UVM_PAGEABLE_MEM_ACCESS, p)
    assert p.rmStatus == A.NV_OK and p.pageableMemAccess == 0
