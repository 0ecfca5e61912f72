"""Address-space helpers for the UVM tests (tests/vm/test_nvsim_uvm.py,
tests/vm/test_vgpu_uvm.py): libc's mmap, munmap, mremap and madvise with
errno, and a write from a forked child to see how a mapping answers there."""

from __future__ import annotations

import ctypes
import faulthandler
import mmap
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mmap.restype = ctypes.c_void_p
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.munmap.restype = ctypes.c_int
libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                        ctypes.c_void_p]
libc.mremap.restype = ctypes.c_void_p
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.madvise.restype = ctypes.c_int

MAP_FIXED = 0x10
MREMAP_MAYMOVE, MREMAP_FIXED = 1, 2
MADV_DOFORK = 11
MAP_FAILED = ctypes.c_void_p(-1).value
PROT_NONE = 0


def check(ret, what: str):
    """ret, or OSError with errno when it is a failure."""
    if ret in (None, MAP_FAILED) or ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def munmap(addr: int, length: int) -> None:
    check(libc.munmap(addr, length), "munmap")


def mremap(addr: int, old: int, new: int, flags: int = 0, dst: int | None = None) -> int:
    return check(libc.mremap(addr, old, new, flags, dst), "mremap")


def dofork(addr: int, length: int) -> None:
    """MADV_DOFORK: a child gets a copy (the UVM driver sets VM_DONTCOPY)."""
    check(libc.madvise(addr, length, MADV_DOFORK), "madvise")


def reserve(length: int) -> int:
    """Address space nobody uses (PROT_NONE), e.g. for a MREMAP_FIXED target."""
    return check(libc.mmap(None, length, PROT_NONE,
                           mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0), "mmap")


def punch(addr: int, length: int) -> None:
    """Unmap [addr, addr+length) by mapping PROT_NONE over it (MAP_FIXED
    unmaps first): the hole stays reserved, so nothing of the test's own
    process can land there before the final munmap of the whole range."""
    got = libc.mmap(addr, length, PROT_NONE,
                    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED, -1, 0)
    assert check(got, "mmap") == addr


def touch_in_child(addr: int) -> int:
    """Write one byte at addr in a forked child: the signal that ended it
    (0 if the write worked)."""
    pid = os.fork()
    if pid == 0:
        try:
            faulthandler.disable()          # a SIGBUS is what some tests expect
            ctypes.memset(addr, 0x5A, 1)
        finally:
            os._exit(0)
    _, st = os.waitpid(pid, 0)
    return os.WTERMSIG(st) if os.WIFSIGNALED(st) else 0
