"""vgpu-replay: make a trace's calls again and report every outcome that
differs (docs/trace.md, "Replay").

This module owns the replay: ``plan`` turns one record and the replay's
state (its files, the cookies RM_MAP_MEMORY returned, the ranges its mmaps
hold) into the call to make, without touching anything; ``Executor`` makes
that call through libc; ``Replayer`` runs the two and compares the outcome,
(ret, NV_STATUS), with the recorded one.

What it must never do: replace memory it did not map for the trace
(MAP_FIXED_NOREPLACE; munmap only of ranges a replayed mmap made), let
RM_CONTROL's params or RM_ALLOC's pAllocParms (or an embedded list the
record carries) name anything but its own buffer or an unreadable page,
hand the driver a buffer smaller than the driver may write, or trust a
field of the file (a trace comes from another machine).  An embedded list's
buffer is followed by an unreadable page, since how much the driver writes
there follows from counts in the parameters, which the file gives.  Other
pointers inside the parameters keep their recorded values and are not
followed; docs/trace.md says what that costs.

Standard library only: it runs in the test VM and on nodes being brought up.
"""

from __future__ import annotations

import dataclasses

import argparse
import ctypes
import errno
import gzip
import json
import mmap
import os
import sys
import zlib
from dataclasses import dataclass, field
from typing import Iterator

from vgpu import __version__
from vgpu.abi import nvabi
from vgpu.abi import nvnames
from vgpu.abi import trace
from vgpu.abi import uapi

PAGE = mmap.PAGESIZE
MAP_FIXED_NOREPLACE = 0x100000         # Linux 4.17; older kernels take it as a hint
PROT_NONE = 0
#: Every buffer handed to the driver is at least this big: a UVM command's
#: size is implied by the command, and a driver of another release may copy
#: out more than the recorded size (no UVM parameter block reaches 16 KiB).
MIN_BUFFER = uapi.VGPU_TRACE_MAX_PARAMS
#: The most anonymous memory one OS descriptor gets (the driver pins it all);
#: nvsim refuses more per descriptor anyway.
MAX_OS_DESCRIPTOR = 1 << 30

ROOT_CLASSES = (nvabi.NV01_ROOT, nvabi.NV01_ROOT_NON_PRIV, nvabi.NV01_ROOT_CLIENT)
#: NVOS32 functions that allocate: their member of NVOS32_PARAMETERS.data.
VID_HEAP_ALLOCS = {nvabi.NVOS32_FUNCTION_ALLOC_SIZE: nvabi.NVOS32_ALLOC_SIZE,
                   nvabi.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT: nvabi.NVOS32_ALLOC_TILED_PITCH_HEIGHT,
                   nvabi.NVOS32_FUNCTION_ALLOC_SIZE_RANGE: nvabi.NVOS32_ALLOC_SIZE_RANGE}

_OS02 = nvabi.NVOS02_PARAMETERS            # first member of nv_ioctl_nvos02_parameters_with_fd
_OS33 = nvabi.NVOS33_PARAMETERS            # first member of nv_ioctl_nvos33_parameters_with_fd
_SIZEOF = ctypes.sizeof


def _get(b: bytes, off: int, n: int) -> int:
    return int.from_bytes(b[off:off + n], "little")


def _put(b: bytearray, off: int, n: int, v: int) -> None:
    b[off:off + n] = v.to_bytes(n, "little")


def _page_up(n: int) -> int:
    return (n + PAGE - 1) & ~(PAGE - 1)


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Skip:
    """The record cannot be replayed; why."""
    reason: str


@dataclass(frozen=True)
class Open:
    path: str
    flags: int


@dataclass(frozen=True)
class Close:
    fd: int


@dataclass(frozen=True)
class Mmap:
    """mmap(addr, length, prot, flags, fd, offset) after munmap of each of
    ``unmap`` (ranges earlier trace mmaps made, which the recorded process
    must have given up since: its kernel put something new there)."""
    addr: int
    length: int
    prot: int
    flags: int
    fd: int
    offset: int
    unmap: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class EmbeddedList:
    """An embedded list: a buffer of the replay's own, at least ``size``
    bytes starting with ``data`` and followed by a page no one can read or
    write; its address goes in the 8 bytes at ``at`` of the params buffer."""
    at: int
    data: bytes
    size: int


@dataclass(frozen=True)
class Params:
    """A buffer of the replay's own, ``size`` bytes starting with ``data``;
    its address goes in the 8 bytes at ``at`` of the parameters.  ``lists``
    are the embedded lists the record carries; ``guards`` offsets in it of
    list pointers that must name unreadable memory (the recording could not
    read the list)."""
    at: int
    data: bytes
    size: int
    lists: tuple[EmbeddedList, ...] = ()
    guards: tuple[int, ...] = ()


@dataclass(frozen=True)
class Ioctl:
    """ioctl(fd, request, parameters).  With ``xfer`` the parameters travel
    through NV_ESC_IOCTL_XFER_CMD as escape ``nr``.  ``guards`` are offsets
    of pointers that must name unreadable memory (the recording could not
    read theirs); ``premap`` is anonymous memory to map first."""
    fd: int
    uvm: bool
    nr: int
    request: int
    args: bytes
    xfer: bool = False
    params: Params | None = None
    guards: tuple[int, ...] = ()
    premap: Mmap | None = None


Step = Skip | Open | Close | Mmap | Ioctl


@dataclass
class State:
    """What the replay made so far, as the plan needs it."""
    files: dict[int, int] = field(default_factory=dict)   # recorded file number -> fd
    gone: dict[int, str] = field(default_factory=dict)    # recorded file -> why not open
    linear: dict[int, int] = field(default_factory=dict)  # recorded pLinearAddress -> replayed
    maps: list[tuple[int, int]] = field(default_factory=list)   # [start, end) of trace mmaps
    #: recorded root-client handle -> the replay's, where the replay could
    #: not ask for the recorded one (vgpu.ko's own picks, below)
    clients: dict[int, int] = field(default_factory=dict)

    def fd_of(self, file: int) -> int | str:
        """The replay's fd for a recorded file, or why there is none."""
        fd = self.files.get(file)
        if fd is not None:
            return fd
        return f"file {file} {self.gone.get(file, 'was never opened in the trace')}"


def overlaps(maps: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The parts of [start, end) that ranges in maps cover."""
    return [(max(s, start), min(e, end)) for s, e in maps if s < end and e > start]


def covered(maps: list[tuple[int, int]], start: int, end: int) -> bool:
    at = start
    for s, e in sorted(overlaps(maps, start, end)):
        if s > at:
            return False
        at = max(at, e)
    return at >= end


def without(maps: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """maps less [start, end)."""
    out = []
    for s, e in maps:
        if e <= start or s >= end:
            out.append((s, e))
            continue
        if s < start:
            out.append((s, start))
        if e > end:
            out.append((end, e))
    return out


def node_path(nodes: str, node: str) -> str:
    """A trace's node name -> its device node under nodes."""
    if node == trace.NODE_CTL:
        return os.path.join(nodes, "nvidiactl")
    if node == trace.NODE_UVM:
        return os.path.join(nodes, "nvidia-uvm")
    return os.path.join(nodes, "nvidia" + node[len("gpu"):])


def _mmap_prot(prot: str) -> tuple[int, int]:
    """A record's r/w/s letters -> (PROT_*, MAP_SHARED or MAP_PRIVATE)."""
    p = (mmap.PROT_READ if "r" in prot else 0) | (mmap.PROT_WRITE if "w" in prot else 0)
    return p, mmap.MAP_SHARED if "s" in prot else mmap.MAP_PRIVATE


def _plan_mmap(rec: trace.Record, st: State) -> Step:
    if rec.addr == 0 or rec.addr % PAGE:
        return Skip(f"mmap address {rec.addr:#x} is not a page-aligned user address")
    end = rec.addr + _page_up(rec.length)
    if end > 1 << 64:
        return Skip(f"mmap of {rec.length:#x} bytes at {rec.addr:#x} wraps")
    fd = st.fd_of(rec.file)
    if isinstance(fd, str):
        return Skip(fd)
    # UVM's offset is the address itself, never a cookie
    offset = rec.offset if rec.node == trace.NODE_UVM else st.linear.get(rec.offset, rec.offset)
    if offset >= 1 << 63:
        return Skip(f"mmap offset {offset:#x} is beyond off_t")
    prot, share = _mmap_prot(rec.prot)
    return Mmap(rec.addr, rec.length, prot, share | MAP_FIXED_NOREPLACE, fd, offset,
                tuple(overlaps(st.maps, rec.addr, end)))


# vgpu.ko's picks of root-client handles (kmod/vgpu: VGPU_CLIENT_HANDLE_BASE
# and the range above it), which it refuses to callers (a handle a tenant
# holds must never be one vgpu.ko picks for itself):
# a trace recorded through a slice holds them; the replay lets the driver
# pick again and translates the recorded handle in later calls.
VGPU_PICKS = (0xC1D80000, 0xC1E00000)


def _vgpu_pick(h: int) -> bool:
    return VGPU_PICKS[0] <= h < VGPU_PICKS[1]


def _translate(b: bytes | None, clients: dict[int, int]) -> bytes | None:
    """b with every 4-byte-aligned recorded client handle replaced by the
    replay's."""
    if not b or not clients:
        return b
    out = bytearray(b)
    for i in range(0, len(out) - 3, 4):
        h = _get(out, i, 4)
        if h in clients:
            _put(out, i, 4, clients[h])
    return bytes(out)


def _choose_handle(args: bytearray, out: bytes | None, at: int, made: int | None = None) -> None:
    """Where the recorded call let the driver pick a handle (0 at ``at``)
    and it made one (at ``made`` of the parameters after it, default
    ``at``), ask for that one."""
    made = at if made is None else made
    if out is not None and len(out) >= made + 4 and _get(args, at, 4) == 0:
        _put(args, at, 4, _get(out, made, 4))


def _plan_params(rec: trace.Record, args: bytearray, at: int,
                 size_at: int) -> Params | Skip | int | None:
    """RM_CONTROL's params / RM_ALLOC's pAllocParms, the pointer at ``at``:
    a buffer filled with params_in (a Params), the offset of a pointer that
    must name unreadable memory (an int), None for a NULL pointer, or why
    not (a Skip)."""
    if _get(args, at, 8) == 0:
        return None
    size = _get(args, size_at, 4)
    if rec.params_in is None:
        # The recording could not read the pointer, or had nothing to read:
        # the replay's pointer names nothing it could read either.
        return at
    if size > uapi.VGPU_TRACE_MAX_PARAMS:
        return Skip(f"paramsSize {size} is over {uapi.VGPU_TRACE_MAX_PARAMS} "
                    "and the record does not say it was cut")
    data, lists, guards = _plan_lists(rec)
    return Params(at, data, max(len(data), size), lists, guards)


def _plan_lists(rec: trace.Record) -> tuple[bytes, tuple[EmbeddedList, ...], tuple[int, ...]]:
    """params_in with its embedded lists: a NULL one stays NULL, one the
    record holds (in, or only out) gets a buffer of the replay's, one it
    lacks names unreadable memory.  trace.parse_record checked that each
    pointer lies inside params_in and apart from the others."""
    data = bytearray(rec.params_in or b"")
    lists: list[EmbeddedList] = []
    guards: list[int] = []
    for off, ptr, lin, lout in rec.lists:
        if ptr == 0:
            _put(data, off, 8, 0)
        elif lin is None and lout is None:
            guards.append(off)
        else:
            lists.append(EmbeddedList(off, lin or b"", max(len(lin or b""), len(lout or b""))))
    return bytes(data), tuple(lists), tuple(guards)


def _plan_os_descriptor(args: bytes, st: State) -> Mmap | Skip | None:
    """RM_ALLOC_MEMORY of an OS descriptor pins the caller's memory at
    pMemory: anonymous memory there first, unless trace mmaps cover it."""
    pmem = _get(args, _OS02.pMemory.offset, 8)
    limit = _get(args, _OS02.limit.offset, 8)
    if pmem == 0:
        return None
    if limit >= MAX_OS_DESCRIPTOR:
        return Skip(f"OS descriptor of {limit + 1:#x} bytes: more than the replay maps "
                    f"({MAX_OS_DESCRIPTOR:#x})")
    start = pmem & ~(PAGE - 1)
    end = _page_up(pmem + limit + 1)
    if covered(st.maps, start, end):
        return None
    return Mmap(start, end - start, mmap.PROT_READ | mmap.PROT_WRITE,
                mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0,
                tuple(overlaps(st.maps, start, end)))


def _plan_ioctl(rec: trace.Record, st: State) -> Step:
    uvm = rec.node == trace.NODE_UVM
    if rec.truncated:
        return Skip(f"the record's parameters were cut at {uapi.VGPU_TRACE_MAX_PARAMS} bytes")
    args = bytearray(rec.args_in or b"")
    if len(args) != rec.size:
        # "unreadable" alone may be about the pointed-to parameters, which
        # the replay reproduces (see _plan_params); these are the call's own
        if rec.unreadable:
            return Skip("the recording could not read the parameters")
        return Skip(f"'in' holds {len(args)} bytes, the call's size is {rec.size}")
    fd = st.fd_of(rec.file)
    if isinstance(fd, str):
        return Skip(fd)
    if rec.fd is not None:
        off, file = rec.fd
        if off + 4 > len(args):
            return Skip(f"fd offset {off} lies outside the {len(args)} bytes of parameters")
        named = st.fd_of(file)
        if isinstance(named, str):
            return Skip(f"the parameters name {named}")
        _put(args, off, 4, named)
    if uvm:
        return Ioctl(fd, True, rec.nr, rec.nr, bytes(args))

    nr, size, out = rec.nr, rec.size, rec.args_out
    if nr > 0xFF:
        return Skip(f"escape nr {nr:#x} does not fit _IOC_NR")
    guards: list[int] = []
    premap = None
    p: Params | Skip | int | None = None
    if nr == nvabi.NV_ESC_RM_ALLOC and size in (_SIZEOF(nvabi.NVOS21_PARAMETERS),
                                            _SIZEOF(nvabi.NVOS64_PARAMETERS)):
        st_ = nvabi.NVOS64_PARAMETERS if size == _SIZEOF(nvabi.NVOS64_PARAMETERS) else nvabi.NVOS21_PARAMETERS
        new = st_.hObjectNew.offset
        # a root client's handle is asked for in hRoot and made in hObjectNew
        root = _get(args, st_.hClass.offset, 4) in ROOT_CLASSES
        at = st_.hRoot.offset if root else new
        made = _get(out, new, 4) if out is not None and len(out) >= new + 4 else 0
        if not (root and _vgpu_pick(made)):
            _choose_handle(args, out, at, new)
        p = _plan_params(rec, args, st_.pAllocParms.offset, st_.paramsSize.offset)
    elif nr == nvabi.NV_ESC_RM_CONTROL and size == _SIZEOF(nvabi.NVOS54_PARAMETERS):
        p = _plan_params(rec, args, nvabi.NVOS54_PARAMETERS.params.offset,
                         nvabi.NVOS54_PARAMETERS.paramsSize.offset)
    elif nr == nvabi.NV_ESC_RM_ALLOC_MEMORY and size == _SIZEOF(nvabi.nv_ioctl_nvos02_parameters_with_fd):
        _choose_handle(args, out, _OS02.hObjectNew.offset)
        if _get(args, _OS02.hClass.offset, 4) == nvabi.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
            pm = _plan_os_descriptor(args, st)
            if isinstance(pm, Skip):
                return pm
            premap = pm
    elif nr == nvabi.NV_ESC_RM_DUP_OBJECT and size == _SIZEOF(nvabi.NVOS55_PARAMETERS):
        _choose_handle(args, out, nvabi.NVOS55_PARAMETERS.hObject.offset)
    elif nr == nvabi.NV_ESC_RM_VID_HEAP_CONTROL and size == _SIZEOF(nvabi.NVOS32_PARAMETERS):
        member = VID_HEAP_ALLOCS.get(_get(args, nvabi.NVOS32_PARAMETERS.function.offset, 4))
        if member is not None:
            _choose_handle(args, out, nvabi.NVOS32_PARAMETERS.data.offset + member.hMemory.offset)
    elif nr == nvabi.NV_ESC_RM_UNMAP_MEMORY and size == _SIZEOF(nvabi.NVOS34_PARAMETERS):
        at = nvabi.NVOS34_PARAMETERS.pLinearAddress.offset
        _put(args, at, 8, st.linear.get(_get(args, at, 8), _get(args, at, 8)))
    elif nr == nvabi.NV_ESC_IOCTL_XFER_CMD and size >= _SIZEOF(nvabi.nv_ioctl_xfer_t):
        # vgpu.ko records an XFER unwrapped, or without 'in' when it could
        # not be; one with 'in' comes from elsewhere, and its pointer must
        # not name the replay's memory
        guards.append(nvabi.nv_ioctl_xfer_t.ptr.offset)
    if isinstance(p, Skip):
        return p
    if isinstance(p, int):
        guards.append(p)
    params = p if isinstance(p, Params) else None

    xfer = rec.xfer or size > nvabi.NV_IOC_SIZE_MAX
    request = nvabi.nv_ioctl(nvabi.NV_ESC_IOCTL_XFER_CMD if xfer else nr,
                         _SIZEOF(nvabi.nv_ioctl_xfer_t) if xfer else size)
    return Ioctl(fd, False, nr, request, bytes(args), xfer, params, tuple(guards), premap)


def plan(rec: trace.Record, st: State, nodes: str) -> Step:
    """The call that replays rec, given what the replay made so far.  Pure:
    it reads st and changes nothing."""
    if rec.op == "open":
        if rec.file in st.files:
            return Skip(f"file {rec.file} is already open")
        flags = os.O_RDWR | os.O_CLOEXEC | (rec.open_flags & os.O_NONBLOCK)
        return Open(node_path(nodes, rec.node), flags)
    if rec.op == "close":
        fd = st.fd_of(rec.file)
        return Skip(fd) if isinstance(fd, str) else Close(fd)
    if rec.op == "mmap":
        return _plan_mmap(rec, st)
    return _plan_ioctl(rec, st)


# ---------------------------------------------------------------- the calls
class Executor:
    """Makes a planned call through libc; returns ret (0 or -errno) and,
    for an ioctl, the parameters after it."""

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self._ioctl = libc.ioctl
        self._ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
        self._ioctl.restype = ctypes.c_int
        self._mmap = libc.mmap
        self._mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        self._mmap.restype = ctypes.c_void_p
        self._munmap = libc.munmap
        self._munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._munmap.restype = ctypes.c_int
        self._mprotect = libc.mprotect
        self._mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._mprotect.restype = ctypes.c_int
        self._guard = 0

    def open(self, path: str, flags: int) -> tuple[int, int]:
        """(0, fd) or (-errno, -1)."""
        try:
            return 0, os.open(path, flags)
        except OSError as e:
            return -(e.errno or errno.EIO), -1

    def close(self, fd: int) -> int:
        try:
            os.close(fd)
        except OSError as e:
            return -(e.errno or errno.EIO)
        return 0

    def mmap(self, m: Mmap) -> tuple[int, int]:
        """(0, where the kernel put it) or (-errno, 0)."""
        for s, e in m.unmap:
            self._munmap(s, e - s)
        got = self._mmap(m.addr, m.length, m.prot, m.flags, m.fd, m.offset)
        if got is None or got == ctypes.c_void_p(-1).value:
            return -ctypes.get_errno(), 0
        return 0, got

    def munmap(self, addr: int, length: int) -> None:
        self._munmap(addr, length)

    def guard(self) -> int:
        """A page nothing can read or write: for pointers the recording
        could not follow either."""
        if not self._guard:
            got = self._mmap(None, PAGE, PROT_NONE,
                             mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            if got is None or got == ctypes.c_void_p(-1).value:
                raise OSError(ctypes.get_errno(), "mmap of a guard page failed")
            self._guard = got
        return self._guard

    def list_buffer(self, lst: EmbeddedList) -> tuple[int, int]:
        """Memory for an embedded list, filled with its data: (address,
        length of the mapping, for munmap).  At least MIN_BUFFER bytes, and
        the page after them can be neither read nor written: the driver
        writes as much as counts in the parameters say, and those come from
        the file."""
        n = _page_up(max(lst.size, len(lst.data), MIN_BUFFER))
        got = self._mmap(None, n + PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                         mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if got is None or got == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap of a list buffer failed")
        if self._mprotect(got + n, PAGE, PROT_NONE) != 0:
            e = ctypes.get_errno()
            self._munmap(got, n + PAGE)
            raise OSError(e, "mprotect of a list buffer's guard page failed")
        ctypes.memmove(got, lst.data, len(lst.data))
        return got, n + PAGE

    def params_buffer(self, p: Params, held: list[tuple[int, int]]) -> ctypes.Array:
        """The params buffer, with its lists' buffers (appended to held,
        for munmap once the call returned) and guards in it."""
        data = bytearray(p.data)
        for lst in p.lists:
            addr, n = self.list_buffer(lst)
            held.append((addr, n))
            _put(data, lst.at, 8, addr)
        for at in p.guards:
            _put(data, at, 8, self.guard())
        return ctypes.create_string_buffer(bytes(data), max(p.size, len(data), MIN_BUFFER))

    def ioctl(self, c: Ioctl) -> tuple[int, bytes]:
        held: list[tuple[int, int]] = []
        try:
            return self._ioctl_with(c, held)
        finally:
            for addr, n in held:
                self._munmap(addr, n)

    def _ioctl_with(self, c: Ioctl, held: list[tuple[int, int]]) -> tuple[int, bytes]:
        args = bytearray(c.args)
        pbuf = None
        if c.params is not None:
            pbuf = self.params_buffer(c.params, held)
            _put(args, c.params.at, 8, ctypes.addressof(pbuf))
        for at in c.guards:
            _put(args, at, 8, self.guard())
        buf = ctypes.create_string_buffer(bytes(args), max(len(args), MIN_BUFFER))
        if c.xfer:
            x = nvabi.nv_ioctl_xfer_t(cmd=c.nr, size=len(args), ptr=ctypes.addressof(buf))
            r = self._ioctl(c.fd, c.request, ctypes.addressof(x))
        else:
            r = self._ioctl(c.fd, c.request, ctypes.addressof(buf))
        ret = -ctypes.get_errno() if r < 0 else r
        return ret, bytes(buf.raw[:len(args)])


# ----------------------------------------------------------------- replaying
@dataclass
class Call:
    """One record and what its replay gave."""
    rec: trace.Record
    result: str                         # "same", "differ" or "not replayed"
    ret: int | None = None
    status: int | None = None
    reason: str = ""


class Replayer:
    """Replays records one by one; ``state`` is what it made so far."""

    def __init__(self, nodes: str, executor: Executor):
        self.nodes = nodes
        self.ex = executor
        self.state = State()

    def _compare(self, rec: trace.Record, ret: int, status: int | None) -> Call:
        same = ret == rec.ret and (rec.status is None or status == rec.status)
        return Call(rec, "same" if same else "differ", ret, status)

    def replay(self, rec: trace.Record) -> Call:
        st = self.state
        if st.clients and rec.op == "ioctl":
            rec = dataclasses.replace(rec, args_in=_translate(rec.args_in, st.clients),
                                      params_in=_translate(rec.params_in, st.clients))
        step = plan(rec, st, self.nodes)
        if isinstance(step, Skip):
            return Call(rec, "not replayed", reason=step.reason)
        if isinstance(step, Open):
            ret, fd = self.ex.open(step.path, step.flags)
            if ret == 0 and rec.ret == 0:
                st.files[rec.file] = fd
            elif ret == 0:
                self.ex.close(fd)        # the recorded open failed: nothing names it
            else:
                st.gone[rec.file] = f"could not be opened (line {rec.line})"
            return self._compare(rec, ret, None)
        if isinstance(step, Close):
            del st.files[rec.file]
            st.gone[rec.file] = f"was closed (line {rec.line})"
            return self._compare(rec, self.ex.close(step.fd), None)
        if isinstance(step, Mmap):
            ret, why = self._mmap(step)
            if why:
                return Call(rec, "not replayed", reason=why)
            return self._compare(rec, ret, None)
        if step.premap is not None:
            ret, why = self._mmap(step.premap)
            if why or ret:
                return Call(rec, "not replayed",
                            reason=why or f"anonymous memory for the OS descriptor at "
                                          f"{step.premap.addr:#x}: {_ret_text(ret)}")
        ret, out = self.ex.ioctl(step)
        status = trace.status_of(rec.nr, step.uvm, rec.size, out)
        self._note_client(rec, step, ret, out)
        if rec.nr == nvabi.NV_ESC_RM_MAP_MEMORY and not step.uvm and rec.args_out is not None:
            at = _OS33.pLinearAddress.offset
            if len(rec.args_out) >= at + 8 and len(out) >= at + 8:
                was, now = _get(rec.args_out, at, 8), _get(out, at, 8)
                if was and now:
                    st.linear[was] = now
        return self._compare(rec, ret, status)

    def _note_client(self, rec: trace.Record, step: Ioctl, ret: int, out: bytes) -> None:
        """A root client the recording got from vgpu.ko's picks, made again
        under the handle the replay got: later calls name the new one."""
        if step.uvm or rec.nr != nvabi.NV_ESC_RM_ALLOC or ret or rec.args_out is None:
            return
        if rec.size not in (_SIZEOF(nvabi.NVOS21_PARAMETERS), _SIZEOF(nvabi.NVOS64_PARAMETERS)):
            return
        st_ = nvabi.NVOS64_PARAMETERS if rec.size == _SIZEOF(nvabi.NVOS64_PARAMETERS) else nvabi.NVOS21_PARAMETERS
        new = st_.hObjectNew.offset
        if len(out) < new + 4 or len(rec.args_out) < new + 4 or \
                _get(out, st_.hClass.offset, 4) not in ROOT_CLASSES:
            return
        was, now = _get(rec.args_out, new, 4), _get(out, new, 4)
        if _vgpu_pick(was) and now and now != was:
            self.state.clients[was] = now

    def _mmap(self, m: Mmap) -> tuple[int, str]:
        """Make m and keep its range; (ret, why it could not be tried)."""
        st = self.state
        ret, got = self.ex.mmap(m)
        for s, e in m.unmap:
            st.maps = without(st.maps, s, e)
        if ret == -errno.EEXIST:
            return ret, f"address {m.addr:#x} is taken in the replay"
        if ret == 0 and got != m.addr:
            self.ex.munmap(got, m.length)
            return ret, (f"the kernel put the mapping at {got:#x}, not {m.addr:#x}: "
                         "it lacks MAP_FIXED_NOREPLACE")
        if ret == 0:
            end = m.addr + _page_up(m.length)
            st.maps = sorted(without(st.maps, m.addr, end) + [(m.addr, end)])
        return ret, ""


# -------------------------------------------------------------------- output
def _ret_text(ret: int) -> str:
    if ret < 0:
        return f"{ret} {errno.errorcode.get(-ret, '')}".rstrip()
    return str(ret)


def _outcome(ret: int | None, status: int | None) -> dict:
    return {"ret": ret, "status": status,
            "status_name": None if status is None else nvabi.status_name(status)}


def _outcome_text(ret: int, status: int | None) -> str:
    s = f"ret {_ret_text(ret)}"
    return s if status is None else f"{s} {nvabi.status_name(status)}"


def call_name(rec: trace.Record) -> str:
    """The call's names from its numbers (the file's names are not trusted:
    they would go to a terminal)."""
    if rec.op != "ioctl":
        return rec.op
    kind = "uvm" if rec.node == trace.NODE_UVM else "escape"
    name = nvnames.name(kind, rec.nr) or f"{kind} {rec.nr:#x}"
    it = rec.item
    if it is not None and it.get("kind") in ("class", "control"):
        n = it["number"]
        name += f" {it['kind']} {nvnames.name(it['kind'], n) or hex(n)}"
    return name


def call_json(c: Call) -> dict:
    r = c.rec
    return {"seq": r.seq, "line": r.line, "pid": r.pid, "file": r.file, "node": r.node,
            "op": r.op, "name": call_name(r), "result": c.result,
            "recorded": _outcome(r.ret, r.status),
            "replayed": None if c.result == "not replayed" else _outcome(c.ret, c.status),
            "reason": c.reason or None}


def call_text(c: Call) -> str:
    r = c.rec
    head = f"seq {r.seq} (line {r.line}) {r.node} {call_name(r)}:"
    if c.result == "not replayed":
        return f"{head} not replayed: {c.reason}"
    rec = _outcome_text(r.ret, r.status)
    if c.result == "same":
        return f"{head} {rec}"
    return f"{head} recorded {rec}, replayed {_outcome_text(c.ret, c.status)}"


# --------------------------------------------------------------------- input
def _lines(f) -> Iterator[bytes]:
    """A binary file's lines, none longer than trace.MAX_LINE + 1 bytes (a
    longer one comes as pieces, the first of which parse_lines refuses)."""
    while line := f.readline(trace.MAX_LINE + 1):
        yield line


def read_trace(path: str) -> trace.Trace:
    """Read and check a trace file (gzip when it ends in .gz).  TraceError
    names the line; OSError when the file cannot be read."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return trace.parse_lines(_lines(f), path)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise trace.TraceError(f"{path}: not a readable gzip file: {e}") from None


def _preflight(tr: trace.Trace, nodes: str) -> str | None:
    """Open (and close) each node the trace opened successfully: a missing
    node is a setup error, not a difference.  Returns the error, or None."""
    for node in sorted({r.node for r in tr.records if r.op == "open" and r.ret == 0}):
        path = node_path(nodes, node)
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK))
        except OSError as e:
            return f"cannot open {node}'s node {path}: {e.strerror}"
    return None


# ---------------------------------------------------------------------- main
DESCRIPTION = """\
Replay a trace recorded by `vgpuctl trace` (docs/trace.md): make every
recorded open, close, ioctl and mmap again, in sequence order, against the
driver's nodes, and report each call whose outcome (the return value and the
NV_STATUS in its parameters) differs from the recorded one, and each call
that could not be replayed (and why)."""

EPILOG = """\
translations:
  files        each recorded file is the replay's own open of the same node;
               a descriptor named in parameters becomes the replay's
  handles      where the driver picked a handle (a root client's, RM_ALLOC's,
               RM_ALLOC_MEMORY's, RM_DUP_OBJECT's, VID_HEAP's hMemory) the
               replay asks for the recorded one
  params       RM_CONTROL's params and RM_ALLOC's pAllocParms point at the
               replay's own buffer, filled with what was recorded; so do
               the embedded lists a record carries (a control's classList,
               grInfoList, ...), each followed by a page no one can touch
  mmap         at the recorded address, never replacing memory of the
               replay's own (MAP_FIXED_NOREPLACE; what an earlier replayed
               mmap holds there is unmapped first, as the recorded process
               must have done); a file offset that
               RM_MAP_MEMORY returned (as is RM_UNMAP_MEMORY's
               pLinearAddress) is the replay's cookie; OS-descriptor memory
               (class 0x71) gets anonymous memory at the recorded address
               first (up to 1 GiB each)

what a replay assumes and does not reproduce:
  - every call is made by this one process, in order: fork, exit and the
    calls' timing are not replayed;
  - memory the CPU wrote (pushbuffers, doorbells, what mapped memory holds)
    is not written again: no GPU work runs;
  - pointers inside the parameters other than the recorded lists keep
    their recorded values and are not followed; the driver reads or writes
    whatever this process has there, so replay traces you trust;
  - calls whose parameters were cut at 16 KiB, or could not be copied, are
    not replayed.

exit status: 0 when every call replayed with its recorded outcome, 1 when a
call differs or could not be replayed, 2 when the trace cannot be read or a
node it opens cannot be opened."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vgpu-replay", description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", metavar="FILE", help="the trace (JSON lines; .gz read as gzip)")
    ap.add_argument("--nodes", metavar="DIR", default="/dev",
                    help="where nvidiactl, nvidia-uvm and nvidiaN are (default /dev; "
                         "a slice's directory replays through vgpu.ko)")
    ap.add_argument("--json", action="store_true",
                    help="one JSON document: counts and the calls reported")
    ap.add_argument("--stop-at-first", action="store_true",
                    help="stop after the first call that differs or is not replayed")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="report every call, not only those that differ")
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return ap


def run(tr: trace.Trace, nodes: str, *, stop_at_first: bool = False,
        executor: Executor | None = None) -> tuple[list[Call], bool]:
    """Replay tr's records in sequence order; (every call, stopped early)."""
    rp = Replayer(nodes, executor or Executor())
    calls = []
    for rec in sorted(tr.records, key=lambda r: r.seq):
        c = rp.replay(rec)
        calls.append(c)
        if stop_at_first and c.result != "same":
            return calls, True
    return calls, False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        tr = read_trace(args.trace)
    except trace.TraceError as e:
        print(f"vgpu-replay: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"vgpu-replay: {args.trace}: {e.strerror or e}", file=sys.stderr)
        return 2
    err = _preflight(tr, args.nodes)
    if err:
        print(f"vgpu-replay: {err}", file=sys.stderr)
        return 2
    try:
        calls, stopped = run(tr, args.nodes, stop_at_first=args.stop_at_first)
    except OSError as e:          # the replay's own memory, not a call's outcome
        print(f"vgpu-replay: {e}", file=sys.stderr)
        return 2
    differ = sum(c.result == "differ" for c in calls)
    skipped = sum(c.result == "not replayed" for c in calls)
    replayed = len(calls) - skipped
    shown = [c for c in calls if args.verbose or c.result != "same"]
    if args.json:
        print(json.dumps({"trace": args.trace, "nodes": args.nodes,
                          "records": len(tr.records), "lost": tr.lost(),
                          "replayed": replayed, "differ": differ, "not_replayed": skipped,
                          "stopped": stopped, "calls": [call_json(c) for c in shown]},
                         indent=1))
    else:
        for c in shown:
            print(call_text(c))
        if tr.lost():
            print(f"note: {tr.lost()} records were lost in the recording (gaps in seq)")
        if stopped:
            print(f"stopped at the first report ({len(tr.records) - len(calls)} records left)")
        print(f"{replayed} calls replayed, {differ} differ, {skipped} not replayed")
    return 1 if differ or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
