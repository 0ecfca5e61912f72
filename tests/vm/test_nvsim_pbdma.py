"""Channels whose GPFIFO ring and USERD live in client memory (kmod/nvsim/
pbdma.c): GPU VAs mapped by UVM, pushbuffers with host semaphores and the
copy engine's 1-D LAUNCH_DMA, set up the way tinygrad's NV backend does,
plus the start-up pieces tinygrad needs (PERF_BOOST, GT200_DEBUGGER,
UVM_CREATE_EXTERNAL_RANGE, UVM_REGISTER_CHANNEL, a channel's engine from
its TSG, device memory whose CPU mappings share bytes).

Runs on nvsim directly (its own nodes, whichever chip is loaded), reloaded
with fb_backing=1 for the module (CPU mappings and the engine share device
memory's pages) and back afterwards, so only while vgpu.ko is not loaded
(make test's run of the tests that reload nvsim).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import time

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import NV0080_ALLOC_PARAMETERS, NV2080_ALLOC_PARAMETERS, RmError, UvmFile, \
    raw_ioctl
import nvsim_reload
from polling import wait_until

STATS = "/sys/kernel/debug/nvsim/stats"
NV_ERR_INVALID_REQUEST = 0x3F          # nvstatuscodes.h
NV_ERR_INVALID_DEVICE = 0x26
UVM_CREATE_EXTERNAL_RANGE = 73         # uvm_ioctl.h

VA = 0x10_0000_0000                    # where the test maps its memory
AREA = 2 << 20
RING, USERD, PB, SEM, SRC, DST = 0x0, 0x1000, 0x2000, 0x10000, 0x20000, 0x30000
ENTRIES = 64


@pytest.fixture(scope="module", autouse=True)
def fb_backing():
    """nvsim reloaded with fb_backing=1 (same chip), and back afterwards."""
    if nvsim_reload.skip_reason():
        pytest.skip(nvsim_reload.skip_reason())
    with nvsim_reload.reloaded({"fb_backing": "1"}):
        yield


def chip() -> str:
    for line in open(STATS):
        if line.startswith("chip "):
            return line.split()[1]
    return "GH100"


def classes():
    """(channel, compute, copy) classes of the loaded chip."""
    if chip() == "GA102":
        return A.AMPERE_CHANNEL_GPFIFO_A, A.AMPERE_COMPUTE_B, A.AMPERE_DMA_COPY_B
    return A.HOPPER_CHANNEL_GPFIFO_A, A.HOPPER_COMPUTE_A, A.HOPPER_DMA_COPY_A


def nvm(subch: int, mthd: int, *args: int) -> list[int]:
    """An incrementing method header and its data (NVC56F_DMA_SEC_OP_INC_METHOD)."""
    return [(1 << 29) | (len(args) << 16) | (subch << 13) | (mthd >> 2), *args]


def host_release(addr: int, value: int, *, timestamp=False) -> list[int]:
    ex = 1 | (1 << 24) | ((1 << 25) if timestamp else 0)          # RELEASE, 64-bit
    return nvm(0, 0x5C, addr & 0xFFFFFFFF, addr >> 32, value & 0xFFFFFFFF, value >> 32, ex)


def host_acquire_geq(addr: int, value: int) -> list[int]:
    return nvm(0, 0x5C, addr & 0xFFFFFFFF, addr >> 32, value & 0xFFFFFFFF, value >> 32,
               3 | (1 << 24))                                       # ACQ_CIRC_GEQ, 64-bit


class Bed:
    """A client set up as tinygrad sets one up: a device with its own VA
    space registered with UVM, a TSG on GR0 with a context share in that VA
    space, 2 MiB of device memory mapped for the CPU and, through UVM, at VA
    for the GPU; channels with ring and USERD in that memory."""

    def __init__(self, res):
        c = self.c = res.client()          # no device yet: this one has its own VA mode
        self.card = c.card_info()[0]
        self.fd = c.open_node(f"nvidia{self.card.minor}")
        raw_ioctl(self.fd, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=c.fd))
        self.dev = c.alloc(c.hClient, A.NV01_DEVICE_0, NV0080_ALLOC_PARAMETERS(
            deviceId=0, vaMode=A.NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES))
        self.sub = c.alloc(self.dev, A.NV20_SUBDEVICE_0, NV2080_ALLOC_PARAMETERS())
        p = A.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(
            flags=A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
        c.control(self.sub, A.NV2080_CTRL_CMD_GPU_GET_GID_INFO, p)
        self.uuid = bytes(p.data[:16])
        self.vas = c.alloc(self.dev, A.FERMI_VASPACE_A, A.NV_VASPACE_ALLOCATION_PARAMETERS())
        self.uvm = UvmFile(os.environ.get("VGPU_DEV_PREFIX", "/dev"))
        res.uvms.append(self.uvm)
        self.uvm.initialize()
        self.uvm.register_gpu(self.uuid, -1, c.hClient)
        self.uvm.register_gpu_vaspace(self.uuid, c.fd, c.hClient, self.vas)
        self.tsg = c.alloc_tsg(self.dev, engine_type=A.NV2080_ENGINE_TYPE_GR0)
        self.cs = c.alloc(self.tsg, A.FERMI_CONTEXT_SHARE_A, A.NV_CTXSHARE_ALLOCATION_PARAMETERS(
            hVASpace=self.vas, flags=A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC))
        self.mem, _ = c.alloc_vidmem(self.dev, AREA)
        self.mm = self.map(self.mem, AREA)
        self.map_gpu(self.mem, VA, AREA)
        self.user, self.regs = None, None
        self.user = c.alloc_usermode(self.sub, A.VOLTA_USERMODE_A)
        self.regs = self.map(self.user, A.NVC361_USERMODE_REGION_SIZE, hdevice=self.sub)
        self.chan_class, self.compute_class, self.copy_class = classes()

    def map(self, hmem: int, length: int, hdevice: int | None = None) -> mmap.mmap:
        fd = self.c.open_node(f"nvidia{self.card.minor}")
        self.c.map_memory(self.dev if hdevice is None else hdevice, hmem, length, fd)
        return mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def map_gpu(self, hmem: int, va: int, length: int) -> None:
        # The external range the mapping goes in (uvm_map_external_allocation).
        self.uvm.create_external_range(va, length)
        p = A.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=va, length=length, rmCtrlFd=self.c.fd,
                                                 hClient=self.c.hClient, hMemory=hmem,
                                                 gpuAttributesCount=1)
        ctypes.memmove(p.perGpuAttributes, self.uuid, 16)       # [0].gpuUuid
        self.uvm._ioctl_tail(A.UVM_MAP_EXTERNAL_ALLOCATION, p, 24, 24)
        assert p.rmStatus == A.NV_OK, hex(p.rmStatus)

    def channel(self, ring: int = RING, userd: int = USERD, *, copy=True, **kw) -> "Chan":
        p = A.NV_CHANNEL_ALLOC_PARAMS(gpFifoOffset=VA + ring, gpFifoEntries=ENTRIES,
                                      hContextShare=self.cs, hObjectBuffer=self.mem, **kw)
        struct.pack_into("<I", p._opaque0, 0, self.mem)                # hUserdMemory[0]
        struct.pack_into("<Q", p._opaque0, 32, userd)                  # userdOffset[0]
        h = self.c.alloc(self.tsg, self.chan_class, p)
        if copy:
            self.c.alloc(h, self.copy_class, A.NVB0B5_ALLOCATION_PARAMETERS())
        return Chan(self, h, ring, userd)

    def schedule(self) -> None:
        self.c.tsg_schedule(self.tsg, True)

    def u64(self, off: int) -> int:
        return struct.unpack_from("<Q", self.mm, off)[0]

    def tsg_errors(self) -> int:
        for line in open("/sys/kernel/debug/nvsim/state"):
            f = line.split()
            if f[:1] == ["tsg"] and int(f[6], 16) == self.tsg:
                return int(f[f.index("errors") + 1])
        raise AssertionError("no tsg line")

    def close(self) -> None:
        self.mm.close()
        self.regs.close()


class Chan:
    def __init__(self, bed: Bed, h: int, ring: int, userd: int):
        self.bed, self.h, self.ring, self.userd = bed, h, ring, userd
        self.token = bed.c.work_submit_token(h)
        self.put = 0
        self.pb = PB + (ring // 0x100) * 0x800             # its own pushbuffer page

    def submit(self, words: list[int], *, ring: bool = True) -> None:
        mm = self.bed.mm
        struct.pack_into(f"<{len(words)}I", mm, self.pb, *words)
        va = VA + self.pb
        struct.pack_into("<Q", mm, self.ring + 8 * self.put,
                         (va & ~3) | (len(words) << 42) | (1 << 41))
        self.put = (self.put + 1) % ENTRIES
        struct.pack_into("<I", mm, self.userd + A.NVC36F_GPPUT_OFFSET, self.put)
        if ring:
            self.doorbell()

    def doorbell(self) -> None:
        struct.pack_into("<I", self.bed.regs, A.NVC361_NOTIFY_CHANNEL_PENDING, self.token)

    @property
    def gp_get(self) -> int:
        return struct.unpack_from("<I", self.bed.mm, self.userd + A.NVC36F_GPGET_OFFSET)[0]


@pytest.fixture
def bed(res):
    b = Bed(res)
    yield b
    b.close()


# ------------------------------------------------------------- the engine
def test_host_semaphore_and_copy(bed):
    ch = bed.channel()
    bed.schedule()
    src = bytes((i * 7 + 3) & 0xFF for i in range(5000))        # crosses pages
    bed.mm[SRC:SRC + len(src)] = src
    words = host_release(VA + SEM, 0x1_0000_0007, timestamp=True)
    words += nvm(4, 0x0, bed.copy_class)                         # SET_OBJECT
    words += nvm(4, 0x400, (VA + SRC) >> 32, (VA + SRC) & 0xFFFFFFFF,
                 (VA + DST) >> 32, (VA + DST) & 0xFFFFFFFF)     # OFFSET_IN/OUT
    words += nvm(4, 0x418, len(src))                             # LINE_LENGTH_IN
    words += nvm(4, 0x300, 2 | (1 << 7) | (1 << 8))               # LAUNCH_DMA, pitch
    words += nvm(4, 0x240, (VA + SEM + 0x40) >> 32, (VA + SEM + 0x40) & 0xFFFFFFFF, 42)
    words += nvm(4, 0x300, (1 << 2) | (2 << 3))                  # flush, four-word release
    t0 = time.monotonic_ns()
    ch.submit(words)
    assert wait_until(lambda: ch.gp_get == 1, 10), bed.tsg_errors()
    assert bed.u64(SEM) == 0x1_0000_0007
    assert bed.u64(SEM + 8) >= 1_000_000                         # the PTIMER (ns)
    assert bytes(bed.mm[DST:DST + len(src)]) == src
    assert bed.mm[DST + len(src)] == 0
    assert bed.u64(SEM + 0x40) == 42 and bed.u64(SEM + 0x48) > 0
    assert bed.tsg_errors() == 0
    assert time.monotonic_ns() > t0


def test_acquire_waits_for_the_cpu(bed):
    ch = bed.channel()
    bed.schedule()
    ch.submit(host_acquire_geq(VA + SEM, 5) + host_release(VA + SEM + 0x10, 1))
    time.sleep(0.3)
    assert ch.gp_get == 0 and bed.u64(SEM + 0x10) == 0
    struct.pack_into("<Q", bed.mm, SEM, 4)
    time.sleep(0.1)
    assert bed.u64(SEM + 0x10) == 0
    struct.pack_into("<Q", bed.mm, SEM, 5)                       # no doorbell needed
    assert wait_until(lambda: bed.u64(SEM + 0x10) == 1, 10)
    assert wait_until(lambda: ch.gp_get == 1, 5)


def test_back_to_back_rings_of_two_channels(bed):
    a = bed.channel(RING, USERD)
    b = bed.channel(0x4000, 0x5000)
    bed.schedule()
    a.submit(host_release(VA + SEM, 1))
    b.submit(host_release(VA + SEM + 0x20, 2))                  # within the same tick
    assert wait_until(lambda: bed.u64(SEM) == 1 and bed.u64(SEM + 0x20) == 2, 10)
    assert a.gp_get == 1 and b.gp_get == 1


def test_channel_without_context_share_runs_in_its_tsgs_va_space(bed):
    """libcuda 535's channels: a TSG made on the VA space UVM registered
    (hVASpace), channels in it with no hContextShare.  RM runs them in the
    TSG's legacy context share, whose VA space is the TSG's
    (kchannelConstruct_IMPL, kctxshareapiConstruct_IMPL), so their rings at
    UVM's GPU VAs are fetched: no MMU fault (GPFIFO)."""
    c = bed.c
    tsg = c.alloc(bed.dev, A.KEPLER_CHANNEL_GROUP_A, A.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(
        hVASpace=bed.vas, engineType=A.NV2080_ENGINE_TYPE_GR0))
    p = A.NV_CHANNEL_ALLOC_PARAMS(gpFifoOffset=VA + RING, gpFifoEntries=ENTRIES,
                                  hObjectBuffer=bed.mem)
    struct.pack_into("<I", p._opaque0, 0, bed.mem)                    # hUserdMemory[0]
    struct.pack_into("<Q", p._opaque0, 32, USERD)                     # userdOffset[0]
    ch = Chan(bed, c.alloc(tsg, bed.chan_class, p), RING, USERD)
    c.tsg_schedule(tsg, True)
    ch.submit(host_release(VA + SEM, 0x33))
    assert wait_until(lambda: bed.u64(SEM) == 0x33, 10)
    assert wait_until(lambda: ch.gp_get == 1, 5)


def test_unscheduled_tsg_does_not_run(bed):
    ch = bed.channel()
    ch.submit(host_release(VA + SEM, 9))
    time.sleep(0.3)
    assert ch.gp_get == 0
    bed.schedule()
    ch.doorbell()
    assert wait_until(lambda: bed.u64(SEM) == 9, 10)


def test_fault_stops_the_channel(bed):
    ch = bed.channel()
    bed.schedule()
    ch.submit(host_release(VA + AREA + 0x1000, 1))               # nothing mapped there
    assert wait_until(lambda: bed.tsg_errors() == 1, 10)
    assert ch.gp_get == 0
    ch.submit(host_release(VA + SEM, 1))
    time.sleep(0.2)
    assert bed.u64(SEM) == 0                                     # stopped for good


def test_compute_launch_is_an_error(bed):
    ch = bed.channel(copy=False)
    bed.c.alloc(ch.h, bed.compute_class, A.NV_GR_ALLOCATION_PARAMETERS())
    bed.schedule()
    ch.submit(nvm(1, 0x0, bed.compute_class) + nvm(1, 0x2B4, 0))  # SEND_PCAS_A
    assert wait_until(lambda: bed.tsg_errors() == 1, 10)


def test_compute_report_semaphore_releases(bed):
    """The compute class's SET_REPORT_SEMAPHORE_A..D (clc7c0.h): the GR
    engine's release, CUDA's fence behind its work, done when reached
    (nvsim runs no kernels); one word, then the four-word report
    {payload, 0, timestamp}.  It stopped the channel before ("compute work
    not simulated"), and NVIDIA's libcuda's cuCtxCreate with it."""
    ch = bed.channel(copy=False)
    bed.c.alloc(ch.h, bed.compute_class, A.NV_GR_ALLOCATION_PARAMETERS())
    bed.schedule()
    words = nvm(1, 0x0, bed.compute_class)
    words += nvm(1, 0x1B00, (VA + SEM) >> 32, (VA + SEM) & 0xFFFFFFFF, 0x1234, 1 << 28)
    words += nvm(1, 0x1B00, (VA + SEM + 0x40) >> 32, (VA + SEM + 0x40) & 0xFFFFFFFF, 77, 0)
    ch.submit(words)
    assert wait_until(lambda: ch.gp_get == 1, 10), bed.tsg_errors()
    assert bed.u64(SEM) == 0x1234
    assert bed.u64(SEM + 0x40) == 77 and bed.u64(SEM + 0x48) > 0
    assert bed.tsg_errors() == 0


def test_copy_engine_memset(bed):
    """LAUNCH_DMA with REMAP_ENABLE and constant components (clc8b5.h): the
    copy engine's memset, as UVM's hopper_memset_common pushes it and
    libcuda 535's cuCtxCreate does (0x586); an element is
    NUM_DST_COMPONENTS x COMPONENT_SIZE bytes of CONST_A/B, NO_WRITE
    leaves bytes.  It stopped the channel before ("copy not simulated")."""
    ch = bed.channel()
    bed.schedule()
    bed.mm[DST:DST + 0x3000] = b"\xee" * 0x3000
    words = nvm(4, 0x0, bed.copy_class)
    # 8-byte elements: CONST_A, CONST_B, four-byte components, two of them
    words += nvm(4, 0x700, 0x11223344, 0x55667788, 4 | (5 << 4) | (3 << 16) | (1 << 24))
    words += nvm(4, 0x408, (VA + DST) >> 32, (VA + DST) & 0xFFFFFFFF)   # OFFSET_OUT
    words += nvm(4, 0x418, 0x2001 // 8 + 1)                    # 0x401 elements: crosses pages
    words += nvm(4, 0x300, 2 | (1 << 2) | (1 << 7) | (1 << 8) | (1 << 10))
    # one-byte elements of CONST_B, then X written from CONST_A, Y not written
    words += nvm(4, 0x704, 0xA5, 5 | (0 << 16))
    words += nvm(4, 0x408, (VA + DST + 0x2100) >> 32, (VA + DST + 0x2100) & 0xFFFFFFFF)
    words += nvm(4, 0x418, 5)
    words += nvm(4, 0x300, 2 | (1 << 7) | (1 << 8) | (1 << 10))
    words += nvm(4, 0x700, 0x7F, 0, 4 | (6 << 4) | (1 << 24))   # CONST_A, NO_WRITE, 1-byte
    words += nvm(4, 0x408, (VA + DST + 0x2200) >> 32, (VA + DST + 0x2200) & 0xFFFFFFFF)
    words += nvm(4, 0x418, 3)
    words += nvm(4, 0x300, 2 | (1 << 7) | (1 << 8) | (1 << 10))
    ch.submit(words)
    assert wait_until(lambda: ch.gp_get == 1, 10), bed.tsg_errors()
    assert bytes(bed.mm[DST:DST + 0x2008]) == bytes.fromhex("4433221188776655") * 0x401
    assert bed.mm[DST + 0x2008] == 0xEE
    assert bytes(bed.mm[DST + 0x2100:DST + 0x2106]) == b"\xa5" * 5 + b"\xee"
    assert bytes(bed.mm[DST + 0x2200:DST + 0x2207]) == b"\x7f\xee" * 3 + b"\xee"
    assert bed.tsg_errors() == 0


def test_compute_inline_to_memory(bed):
    """The compute class's inline-to-memory (clc7c0.h LINE_LENGTH_IN ..
    LAUNCH_DMA, LOAD_INLINE_DATA), pitch layout: LINE_COUNT lines of
    LINE_LENGTH_IN bytes PITCH_OUT apart from the data words; libcuda 535
    writes its context's memory so.  It stopped the channel before
    ("compute work not simulated")."""
    ch = bed.channel(copy=False)
    bed.c.alloc(ch.h, bed.compute_class, A.NV_GR_ALLOCATION_PARAMETERS())
    bed.schedule()
    bed.mm[DST:DST + 0x200] = b"\xee" * 0x200
    words = nvm(1, 0x0, bed.compute_class)
    words += nvm(1, 0x180, 6, 2, (VA + DST) >> 32, (VA + DST) & 0xFFFFFFFF, 0x100)
    words += nvm(1, 0x1B0, 1 | (1 << 4))                          # pitch, flush only
    words += [(3 << 29) | (3 << 16) | (1 << 13) | (0x1B4 >> 2),   # non-incrementing
              0x04030201, 0x08070605, 0x0C0B0A09]
    ch.submit(words)
    assert wait_until(lambda: ch.gp_get == 1, 10), bed.tsg_errors()
    assert bytes(bed.mm[DST:DST + 7]) == bytes([1, 2, 3, 4, 5, 6, 0xEE])
    assert bytes(bed.mm[DST + 0x100:DST + 0x107]) == bytes([7, 8, 9, 10, 11, 12, 0xEE])
    assert bed.tsg_errors() == 0


def test_channel_with_client_userd_cannot_be_mapped(bed):
    ch = bed.channel()
    fd = bed.c.open_node(f"nvidia{bed.card.minor}")
    with pytest.raises(RmError) as ei:
        bed.c.map_memory(bed.dev, ch.h, 4096, fd)
    assert ei.value.status == NV_ERR_INVALID_REQUEST


def test_channel_allocation_checks(bed):
    c = bed.c
    ok = A.NV_CHANNEL_ALLOC_PARAMS(gpFifoOffset=VA, gpFifoEntries=ENTRIES, hContextShare=bed.cs)

    def status(userd_mem, userd_off, entries=ENTRIES, engine=0):
        p = A.NV_CHANNEL_ALLOC_PARAMS.from_buffer_copy(ok)
        p.gpFifoEntries, p.engineType = entries, engine
        struct.pack_into("<I", p._opaque0, 0, userd_mem)
        struct.pack_into("<Q", p._opaque0, 32, userd_off)
        try:
            c.free(c.alloc(bed.tsg, bed.chan_class, p))
            return A.NV_OK
        except RmError as e:
            return e.status

    assert status(bed.mem, AREA - 512) == A.NV_OK
    assert status(bed.mem, AREA - 256) == A.NV_ERR_INVALID_ARGUMENT      # USERD past the end
    assert status(bed.tsg, 0) == A.NV_ERR_OBJECT_NOT_FOUND                # not memory
    assert status(bed.mem, 0, entries=0x10000) == A.NV_OK
    assert status(bed.mem, 0, entries=0x20000) == A.NV_ERR_INVALID_ARGUMENT
    assert status(bed.mem, 0, entries=48) == A.NV_ERR_INVALID_ARGUMENT
    # kchannelConstruct: the TSG's engine; another one of its own is refused
    assert status(bed.mem, 0, engine=A.NV2080_ENGINE_TYPE_GR0) == A.NV_OK
    assert status(bed.mem, 0, engine=A.NV2080_ENGINE_TYPE_COPY0) == A.NV_ERR_INVALID_ARGUMENT


# ------------------------------------------------------------ memory
def test_device_memory_mappings_share_bytes(bed):
    other = bed.map(bed.mem, 0x1000)
    try:
        other[0x100:0x104] = b"\x01\x02\x03\x04"
        assert bytes(bed.mm[0x100:0x104]) == b"\x01\x02\x03\x04"
    finally:
        other.close()


# ------------------------------------------------------- start-up pieces
def test_perf_boost(bed):
    class P(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint32), ("duration", ctypes.c_uint32)]

    bed.c.control(bed.sub, 0x2080200A, P(flags=2 | (1 << 4), duration=0xFFFFFFFF))
    bed.c.control(bed.sub, 0x2080200A, P(flags=0, duration=3600))
    with pytest.raises(RmError) as ei:
        bed.c.control(bed.sub, 0x2080200A, P(flags=2, duration=3601))
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT


def test_gt200_debugger(bed):
    class P(ctypes.Structure):
        _fields_ = [("hDebuggerClient_Obsolete", ctypes.c_uint32), ("hAppClient", ctypes.c_uint32),
                    ("hClass3dObject", ctypes.c_uint32)]

    c = bed.c
    ch = bed.channel(copy=False)
    gr = c.alloc(ch.h, bed.compute_class, A.NV_GR_ALLOCATION_PARAMETERS())
    cp = c.alloc(ch.h, bed.copy_class, A.NVB0B5_ALLOCATION_PARAMETERS())

    def status(**kw):
        try:
            c.free(c.alloc(bed.dev, A.GT200_DEBUGGER, P(**kw)))
            return A.NV_OK
        except RmError as e:
            return e.status

    assert status(hAppClient=c.hClient, hClass3dObject=gr) == A.NV_OK
    assert status(hAppClient=0, hClass3dObject=gr) == A.NV_OK
    assert status(hDebuggerClient_Obsolete=c.hClient, hClass3dObject=gr) == A.NV_ERR_INVALID_ARGUMENT
    assert status(hAppClient=0xC1DFFFFF, hClass3dObject=gr) == A.NV_ERR_INVALID_CLIENT
    assert status(hClass3dObject=0xBAD) == A.NV_ERR_INVALID_OBJECT_PARENT
    assert status(hClass3dObject=cp) == A.NV_ERR_INVALID_OBJECT


def test_uvm_external_range_and_register_channel(bed):
    u = bed.uvm

    class R(ctypes.Structure):
        _fields_ = [("base", ctypes.c_uint64), ("length", ctypes.c_uint64),
                    ("rmStatus", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]

    class C(ctypes.Structure):
        _fields_ = [("gpuUuid", ctypes.c_uint8 * 16), ("rmCtrlFd", ctypes.c_int32),
                    ("hClient", ctypes.c_uint32), ("hChannel", ctypes.c_uint32),
                    ("_pad", ctypes.c_uint32), ("base", ctypes.c_uint64),
                    ("length", ctypes.c_uint64), ("rmStatus", ctypes.c_uint32),
                    ("_pad1", ctypes.c_uint32)]

    def rng(base, length):
        p = R(base=base, length=length)
        u.ioctl(UVM_CREATE_EXTERNAL_RANGE, p)
        return p.rmStatus

    assert rng(0x20_0000_0000, 0x10000) == A.NV_OK
    assert rng(0x20_0000_0800, 0x1000) == A.NV_ERR_INVALID_ADDRESS
    assert rng(0x20_0000_0000, 0) == A.NV_ERR_INVALID_ADDRESS

    ch = bed.channel()

    def reg(uuid, hchannel, fd=-1):
        p = C(rmCtrlFd=fd, hClient=bed.c.hClient, hChannel=hchannel, base=0x30_0000_0000,
              length=0x4000000)
        ctypes.memmove(p.gpuUuid, uuid, 16)
        u.ioctl(A.UVM_REGISTER_CHANNEL, p)
        return p.rmStatus

    assert reg(bed.uuid, ch.h) == A.NV_OK                    # rmCtrlFd ignored (bug 1624521)
    assert reg(bed.uuid, bed.tsg) == A.NV_ERR_INVALID_OBJECT_HANDLE
    assert reg(b"\x01" * 16, ch.h) == NV_ERR_INVALID_DEVICE
