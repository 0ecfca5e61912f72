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
import faulthandler
import mmap
import os
import signal

import pytest

from vgpu_fixtures import *  # noqa: F401,F403
from vgpu_fixtures import in_child, read_vstate
from vgpu.nvclient import UvmFile

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int
_libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                         ctypes.c_void_p]
_libc.mremap.restype = ctypes.c_void_p
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int

MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
MADV_DOFORK = 11
MAP_FAILED = ctypes.c_void_p(-1).value


def _check(ret, what):
    if ret in (None, MAP_FAILED) or ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def _munmap(addr: int, length: int) -> None:
    _check(_libc.munmap(addr, length), "munmap")


def _reserve(length: int) -> int:
    """Address space nobody uses (PROT_NONE), for a MREMAP_FIXED target."""
    return _check(_libc.mmap(None, length, 0,
                             mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0), "mmap")


def _touch_in_child(addr: int) -> int:
    """Write one byte at addr in a forked child: its wait status's signal
    (0 if the write worked)."""
    pid = os.fork()
    if pid == 0:
        try:
            faulthandler.disable()          # the SIGBUS is expected
            ctypes.memset(addr, 0x5A, 1)
        finally:
            os._exit(0)
    _, st = os.waitpid(pid, 0)
    return os.WTERMSIG(st) if os.WIFSIGNALED(st) else 0


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


def _punch(addr: int, length: int) -> None:
    """Unmap [addr, addr+length) by mapping PROT_NONE over it (MAP_FIXED
    unmaps first): the hole stays reserved, so nothing of the test's own
    process can land there before the final munmap of the whole range."""
    got = _libc.mmap(addr, length, 0,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10, -1, 0)   # MAP_FIXED
    assert _check(got, "mmap") == addr


def test_partial_munmap_returns_that_part(usl):
    sl, u = usl
    addr = u.managed_mmap(8 * MiB)
    _punch(addr + 2 * MiB, 2 * MiB)         # a hole: the VMA splits in two
    assert sl.used() == 6 * MiB
    ctypes.memset(addr, 1, 4096)            # both sides still the driver's
    ctypes.memset(addr + 6 * MiB, 1, 4096)
    _punch(addr + 2 * MiB, 2 * MiB)         # the hole again: nothing more
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
    dst = _reserve(4 * MiB)
    got = _check(_libc.mremap(addr, 4 * MiB, 4 * MiB, MREMAP_MAYMOVE | MREMAP_FIXED, dst),
                 "mremap")
    assert got == dst
    assert sl.used() == 0
    _check(_libc.madvise(dst, 4 * MiB, MADV_DOFORK), "madvise")  # so the child has it
    assert _touch_in_child(dst) == signal.SIGBUS, "the moved copy is disabled"
    _munmap(dst, 4 * MiB)
    u.close()
    assert wait_until(lambda: vstate().get("files") == 0 and vstate().get("ranges") == 0)


def test_mremap_shrink_returns_the_tail(usl):
    sl, u = usl
    addr = u.managed_mmap(4 * MiB)
    u.ranges.clear()
    got = _check(_libc.mremap(addr, 4 * MiB, 1 * MiB, 0, None), "mremap")
    assert got == addr
    assert sl.used() == 1 * MiB
    _munmap(addr, 1 * MiB)
    assert sl.used() == 0


def test_fork_copy_is_disabled_and_charged_once(usl):
    sl, u = usl
    addr = u.managed_mmap(4 * MiB)
    _check(_libc.madvise(addr, 4 * MiB, MADV_DOFORK), "madvise")
    assert _touch_in_child(addr) == signal.SIGBUS
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
    _check(_libc.madvise(addr, 2 * MiB, MADV_DOFORK), "madvise")

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
