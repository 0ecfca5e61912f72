"""What CUDA's and nvidia-smi's start-up ask of nvsim: the class list, GPU,
GID, build and GR info, VA spaces, context shares, engine objects, OS
descriptors and RM_MAP_MEMORY_DMA, each with the real driver's checks
(kmod/nvsim/README.md, "Start-up").

The default GPU is a GH100 ("NVIDIA nvsim H100").  The consumer model
("NVIDIA GeForce RTX 3090", a GA102) and an older release (535.288.01) are
tested by reloading nvsim with other parameters for one class of tests and
back afterwards (only while vgpu.ko is not loaded: it holds nvsim).
"""

from __future__ import annotations

import ctypes
import hashlib
import struct
from pathlib import Path

import pytest

import nvsim_reload
from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError, _libc, raw_ioctl

PARAMS = Path("/sys/module/nvsim/parameters")
STATS = Path("/sys/kernel/debug/nvsim/stats")
MiB = 1 << 20

HOPPER = {A.HOPPER_CHANNEL_GPFIFO_A, A.HOPPER_COMPUTE_A, A.HOPPER_DMA_COPY_A,
          A.HOPPER_USERMODE_A, A.HOPPER_A}
AMPERE_GA102 = {A.AMPERE_B, A.AMPERE_COMPUTE_B, A.AMPERE_DMA_COPY_B,
                A.AMPERE_CHANNEL_GPFIFO_A, A.AMPERE_USERMODE_A}
COMMON = {A.FERMI_VASPACE_A, A.FERMI_CONTEXT_SHARE_A, A.KEPLER_CHANNEL_GROUP_A,
          A.NV01_MEMORY_LOCAL_USER, A.NV01_MEMORY_SYSTEM, A.NV50_MEMORY_VIRTUAL,
          A.NV01_MEMORY_VIRTUAL, A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, A.NV01_DEVICE_0,
          A.NV20_SUBDEVICE_0, A.VOLTA_CHANNEL_GPFIFO_A, A.VOLTA_USERMODE_A}

# OS descriptor flags: PCI, cached, not contiguous, not mapped now
# (RmAllocOsDescriptor, osCreateOsDescriptorFromPageArray).
OSDESC_FLAGS = ((A.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS << A.NVOS02_FLAGS_PHYSICALITY_SHIFT)
                | (A.NVOS02_FLAGS_COHERENCY_CACHED << A.NVOS02_FLAGS_COHERENCY_SHIFT)
                | (A.NVOS02_FLAGS_MAPPING_NO_MAP << A.NVOS02_FLAGS_MAPPING_SHIFT))
DMA_OFFSET_FIXED = 1 << A.NVOS46_FLAGS_DMA_OFFSET_FIXED_SHIFT


def status_of(fn, *args, **kw) -> int:
    try:
        fn(*args, **kw)
        return A.NV_OK
    except RmError as e:
        return e.status


def stats() -> dict[str, str]:
    out = {}
    for line in STATS.read_text().splitlines():
        k, _, v = line.partition(" ")
        out.setdefault(k, v)
    return out


# ----------------------------------------------------------------- helpers
def classlist(c, hdevice, n: int | None = None, *, ptr: int | None = None):
    """NV0080 GET_CLASSLIST: the count (n None), else the list of n entries
    (returned with the numClasses the driver wrote)."""
    if n is None:
        p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS()
        c.control(hdevice, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, p)
        return p.numClasses
    arr = (ctypes.c_uint32 * max(n, 1))(*([0xDEADBEEF] * max(n, 1)))
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(
        numClasses=n, classList=ctypes.addressof(arr) if ptr is None else ptr)
    c.control(hdevice, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, p)
    return p.numClasses, list(arr[:n])


def full_classlist(c, hdevice) -> list[int]:
    n = classlist(c, hdevice)
    got, lst = classlist(c, hdevice, n)
    assert got == n
    return lst


def engine_classlist(c, hsub, engine: int) -> list[int]:
    p = A.NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS(engineType=engine)
    c.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST, p)
    arr = (ctypes.c_uint32 * max(p.numClasses, 1))()
    p.classList = ctypes.addressof(arr) if p.numClasses else 0
    c.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST, p)
    return list(arr[:p.numClasses])


def gpu_info_v2(c, hsub, indexes: list[int]) -> dict[int, int]:
    p = A.NV2080_CTRL_GPU_GET_INFO_V2_PARAMS(gpuInfoListSize=len(indexes))
    for i, ix in enumerate(indexes):
        p.gpuInfoList[i].index = ix
    c.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_INFO_V2, p)
    return {p.gpuInfoList[i].index: p.gpuInfoList[i].data for i in range(len(indexes))}


def gr_info(c, hsub, indexes: list[int], *, count: int | None = None):
    lst = (A.NV2080_CTRL_GR_INFO * max(len(indexes), 1))()
    for i, ix in enumerate(indexes):
        lst[i].index, lst[i].data = ix, 0xDEAD
    p = A.NV2080_CTRL_GR_GET_INFO_PARAMS(grInfoListSize=len(indexes) if count is None else count,
                                         grInfoList=ctypes.addressof(lst))
    c.control(hsub, A.NV2080_CTRL_CMD_GR_GET_INFO, p)
    return [(lst[i].index, lst[i].data) for i in range(len(indexes))]


def gid(c, hsub, flags: int):
    p = A.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(flags=flags)
    c.control(hsub, A.NV2080_CTRL_CMD_GPU_GET_GID_INFO, p)
    return bytes(p.data[:p.length])


def expected_uuid(chip_id: int, bus: int) -> bytes:
    """gpu_uuid.c, _nvGenerateUuid, with nvsim's PDI ("nvsim" | bus)."""
    msg = bytearray(bytes([0xc8, 0x16, 0xc9, 0xa3, 0x52, 0x24, 0x56, 0xbf, 0x9d, 0x9a, 0xac,
                           0x7e, 0xa7, 0x03, 0xfb, 0x5b]) + b"NVIDIA GPU" + bytes(12))
    msg[26] = 0x02
    struct.pack_into("<H", msg, 27, chip_id)
    msg[29] = 0x08
    struct.pack_into("<Q", msg, 30, 0x6E7673696D000000 | bus)
    u = bytearray(hashlib.sha1(bytes(msg)).digest()[:16])
    u[6] = (u[6] & 0x0F) | 0x50
    u[8] = (u[8] & 0x3F) | 0x80
    return bytes(u)


def uuid_string(u: bytes) -> str:
    h = u.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def vaspace(c, parent, **kw):
    p = A.NV_VASPACE_ALLOCATION_PARAMETERS(**kw)
    h = c.alloc(parent, A.FERMI_VASPACE_A, p)
    return h, p


def ctxshare(c, htsg, flags=A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC, hvas=0, subctx=0):
    p = A.NV_CTXSHARE_ALLOCATION_PARAMETERS(hVASpace=hvas, flags=flags, subctxId=subctx)
    h = c.alloc(htsg, A.FERMI_CONTEXT_SHARE_A, p)
    return h, p.subctxId


def channel(c, parent, hclass, engine=A.NV2080_ENGINE_TYPE_GR0):
    return c.alloc_channel(parent, hclass, engine_type=engine)


def virtual(c, hdevice, size):
    """NV50_MEMORY_VIRTUAL: (handle, its VA)."""
    h, mp = c.alloc_vidmem(hdevice, size, hclass=A.NV50_MEMORY_VIRTUAL)
    return h, mp.offset


def map_dma(c, hdevice, hdma, hmem, length, *, offset=0, dma_offset=0, flags=0, client=None):
    p = A.NVOS46_PARAMETERS(hClient=c.hClient if client is None else client, hDevice=hdevice,
                            hDma=hdma, hMemory=hmem, offset=offset, length=length,
                            flags=flags, dmaOffset=dma_offset)
    c.escape(A.NV_ESC_RM_MAP_MEMORY_DMA, p)
    return p.status, p.dmaOffset


def unmap_dma(c, hdevice, hdma, hmem, dma_offset, size=0):
    p = A.NVOS47_PARAMETERS(hClient=c.hClient, hDevice=hdevice, hDma=hdma, hMemory=hmem,
                            dmaOffset=dma_offset, size=size)
    c.escape(A.NV_ESC_RM_UNMAP_MEMORY_DMA, p)
    return p.status


class UserPages:
    """An anonymous private mapping (libc mmap), touched; unmapped on close."""

    PROT_READ, PROT_WRITE = 1, 2

    def __init__(self, size: int):
        self.size = size
        self.addr = _libc.mmap(None, size, self.PROT_READ | self.PROT_WRITE, 0x22, -1, 0)
        assert self.addr not in (None, ctypes.c_void_p(-1).value)
        ctypes.memset(self.addr, 0x5A, size)

    def readonly(self):
        assert _libc.mprotect(ctypes.c_void_p(self.addr), ctypes.c_size_t(self.size),
                              self.PROT_READ) == 0

    def close(self):
        if self.addr:
            _libc.munmap(self.addr, self.size)
            self.addr = 0


@pytest.fixture
def pages():
    made = []

    def make(size=64 * 1024):
        p = UserPages(size)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()


def os_desc(c, g, addr, size, *, flags=OSDESC_FLAGS, parent=None, limit=None):
    h, _ = c.alloc_memory(g.fd, g.hDevice if parent is None else parent, size,
                          hclass=A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, flags=flags,
                          pmemory=addr, limit=limit)
    return h


# ============================================================ class list
def test_classlist_count_only_then_list(client, gpu0):
    """A NULL classList returns the count (gpuGetClassList_IMPL); then the
    list, each class once, the chip's (an H100: Hopper classes)."""
    n = classlist(client, gpu0.hDevice)
    got, lst = classlist(client, gpu0.hDevice, n)
    assert got == n and len(set(lst)) == n
    assert HOPPER | COMMON <= set(lst)
    assert not (AMPERE_GA102 - {A.AMPERE_CHANNEL_GPFIFO_A, A.AMPERE_USERMODE_A}) & set(lst)
    assert A.BLACKWELL_CHANNEL_GPFIFO_A not in lst and A.KEPLER_CHANNEL_GPFIFO_A not in lst
    assert stats()["chip"] == "GH100"


def test_classlist_longer_list_keeps_the_rest(client, gpu0):
    n = classlist(client, gpu0.hDevice)
    got, lst = classlist(client, gpu0.hDevice, n + 3)
    assert got == n
    assert lst[n:] == [0xDEADBEEF] * 3


def test_classlist_same_on_both_gpus(client, gpu0, gpu1):
    assert full_classlist(client, gpu0.hDevice) == full_classlist(client, gpu1.hDevice)


def test_classlist_bad_input(client, gpu0):
    n = classlist(client, gpu0.hDevice)
    cmd = A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST
    # too short a list: NV_ERR_INVALID_PARAM_STRUCT, nothing copied back
    arr = (ctypes.c_uint32 * n)(*([7] * n))
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(numClasses=n - 1, classList=ctypes.addressof(arr))
    assert status_of(client.control, gpu0.hDevice, cmd, p) == A.NV_ERR_INVALID_PARAM_STRUCT
    assert list(arr) == [7] * n
    # a count without a list, a list without a count (rmapiParamsAcquire)
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(numClasses=4, classList=0)
    assert status_of(client.control, gpu0.hDevice, cmd, p) == A.NV_ERR_INVALID_ARGUMENT
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(numClasses=0, classList=ctypes.addressof(arr))
    assert status_of(client.control, gpu0.hDevice, cmd, p) == A.NV_ERR_INVALID_ARGUMENT
    # more than RMAPI_PARAM_COPY_MAX_PARAMS_SIZE
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(numClasses=(1 << 18) + 1,
                                               classList=ctypes.addressof(arr))
    assert status_of(client.control, gpu0.hDevice, cmd, p) == A.NV_ERR_INVALID_ARGUMENT
    # an unreadable list
    p = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(numClasses=n, classList=0x1000)
    assert status_of(client.control, gpu0.hDevice, cmd, p) == A.NV_ERR_INVALID_ADDRESS
    # a device control on a subdevice; a wrong paramsSize
    assert status_of(client.control, gpu0.hSubdevice, cmd,
                     A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS()) == A.NV_ERR_NOT_SUPPORTED
    assert status_of(client.control, gpu0.hDevice, cmd, bytes(8)) == A.NV_ERR_INVALID_PARAM_STRUCT


def test_engine_classlist(client, gpu0):
    s = gpu0.hSubdevice
    gr0 = engine_classlist(client, s, A.NV2080_ENGINE_TYPE_GR0)
    assert {A.HOPPER_A, A.HOPPER_COMPUTE_A, A.FERMI_TWOD_A, A.KEPLER_INLINE_TO_MEMORY_B} == set(gr0)
    assert engine_classlist(client, s, A.NV2080_ENGINE_TYPE_GR0 + 1) == [A.HOPPER_COMPUTE_A]
    assert engine_classlist(client, s, A.NV2080_ENGINE_TYPE_COPY0) == [A.HOPPER_DMA_COPY_A]
    assert engine_classlist(client, s, A.NV2080_ENGINE_TYPE_COPY9) == [A.HOPPER_DMA_COPY_A]
    p = A.NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS(engineType=A.NV2080_ENGINE_TYPE_NULL)
    assert status_of(client.control, s, A.NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST,
                     p) == A.NV_ERR_INVALID_ARGUMENT


def test_classes_the_gpu_does_not_list_are_refused(client, gpu0):
    """resservResourceFactory: NV_ERR_NOT_SUPPORTED for a class the GPU lacks."""
    tsg = client.alloc_tsg(gpu0.hDevice)
    assert status_of(client.alloc_channel, tsg, A.KEPLER_CHANNEL_GPFIFO_A) == A.NV_ERR_NOT_SUPPORTED
    assert status_of(client.alloc_usermode, gpu0.hSubdevice,
                     A.BLACKWELL_USERMODE_A) == A.NV_ERR_NOT_SUPPORTED
    ch = channel(client, tsg, A.HOPPER_CHANNEL_GPFIFO_A)
    assert status_of(client.alloc, ch, A.AMPERE_COMPUTE_B,
                     A.NV_GR_ALLOCATION_PARAMETERS()) == A.NV_ERR_NOT_SUPPORTED


# ============================================================== GPU info
def test_gpu_info_v2(client, gpu0):
    got = gpu_info_v2(client, gpu0.hSubdevice, [
        A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION, A.NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS,
        A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE, A.NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED,
        A.NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV0])
    assert got == {A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION: A.NV2080_CTRL_GR_INFO_SM_VERSION_9_00,
                   A.NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS: 1,
                   A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE: A.NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_DISABLED,
                   A.NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED: 0,
                   A.NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV0: 0}


@pytest.mark.parametrize("indexes,status", [
    ([], A.NV_ERR_INVALID_ARGUMENT),                                   # empty list
    ([0x03], A.NV_ERR_INVALID_ARGUMENT),                               # no such index
    ([A.NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE], A.NV_ERR_INVALID_ARGUMENT),
    ([A.NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS, A.NV2080_CTRL_GPU_INFO_INDEX_ECID_LO32],
     A.NV_ERR_NOT_SUPPORTED),                                         # not a GSP client
])
def test_gpu_info_v2_bad_input(client, gpu0, indexes, status):
    assert status_of(gpu_info_v2, client, gpu0.hSubdevice, indexes) == status


def test_gpu_info_v2_list_too_long(client, gpu0):
    p = A.NV2080_CTRL_GPU_GET_INFO_V2_PARAMS(gpuInfoListSize=A.NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE + 1)
    assert status_of(client.control, gpu0.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_INFO_V2,
                     p) == A.NV_ERR_INVALID_ARGUMENT


def test_gpu_info_v1_through_v2(client, gpu0):
    """The deprecated V1 (embedded list) answers through V2."""
    lst = (A.NV2080_CTRL_GPU_INFO * 2)()
    lst[0].index = A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION
    lst[1].index = A.NV2080_CTRL_GPU_INFO_INDEX_GPU_PROFILING_CAPABILITY
    p = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=2, gpuInfoList=ctypes.addressof(lst))
    client.control(gpu0.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_INFO, p)
    assert (lst[0].data, lst[1].data) == (A.NV2080_CTRL_GR_INFO_SM_VERSION_9_00, 1)
    cmd = A.NV2080_CTRL_CMD_GPU_GET_INFO
    big = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=A.NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE + 1,
                                            gpuInfoList=ctypes.addressof(lst))
    assert status_of(client.control, gpu0.hSubdevice, cmd, big) == A.NV_ERR_OUT_OF_RANGE
    null = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=1, gpuInfoList=0)
    assert status_of(client.control, gpu0.hSubdevice, cmd, null) == A.NV_ERR_INVALID_ARGUMENT
    empty = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=0, gpuInfoList=ctypes.addressof(lst))
    assert status_of(client.control, gpu0.hSubdevice, cmd, empty) == A.NV_ERR_INVALID_ARGUMENT
    bad = A.NV2080_CTRL_GPU_GET_INFO_PARAMS(gpuInfoListSize=1, gpuInfoList=0x1000)
    assert status_of(client.control, gpu0.hSubdevice, cmd, bad) == A.NV_ERR_INVALID_ADDRESS


# =================================================================== GID
def test_rc_watchdog_requests_are_counted_as_rm_counts_them(res):
    """The RC watchdog controls as krcWatchdogChangeState keeps them
    (kernel_rc_watchdog.c): a subdevice's request of one kind replaces its
    others, an enable with a disable standing anywhere (and the reverse) is
    NV_ERR_STATE_IN_USE, a release, or the subdevice's free, drops its
    requests.  libcuda's cuInit sends RELEASE then SOFT_DISABLE."""
    a, b = res.client(), res.client()
    a.open_gpus([0])
    b.open_gpus([0])
    sa, sb = a.gpus[0].hSubdevice, b.gpus[0].hSubdevice

    def rc(c, s, cmd):
        return status_of(c.control, s, cmd)
    assert rc(a, sa, A.NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS) == A.NV_OK
    assert rc(a, sa, A.NV2080_CTRL_CMD_RC_SOFT_DISABLE_WATCHDOG) == A.NV_OK
    assert rc(b, sb, A.NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG) == A.NV_OK   # soft: no conflict
    assert rc(a, sa, A.NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG) == A.NV_ERR_STATE_IN_USE
    assert rc(b, sb, A.NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG) == A.NV_OK   # again: one request
    assert rc(b, sb, A.NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS) == A.NV_OK
    assert rc(a, sa, A.NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG) == A.NV_OK
    assert rc(b, sb, A.NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG) == A.NV_ERR_STATE_IN_USE
    # the caller's own disable counts too
    assert rc(a, sa, A.NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG) == A.NV_ERR_STATE_IN_USE
    # the subdevice's free releases what it held
    a.free(sa)
    assert rc(b, sb, A.NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG) == A.NV_OK
    b.free(sb)


def test_gid_binary_and_ascii_agree_and_follow_the_driver(client, gpu0, gpu1):
    b0 = gid(client, gpu0.hSubdevice, A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
    s0 = gid(client, gpu0.hSubdevice, A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_ASCII)
    assert len(b0) == A.NV2080_GPU_MAX_SHA1_BINARY_GID_LENGTH
    assert len(s0) == A.NV_UUID_STR_LEN and s0[-1] == 0
    assert s0[:-1].decode() == uuid_string(b0)
    assert b0 == expected_uuid(0x180, gpu0.card.bus)           # GH100
    assert (b0[6] >> 4, b0[8] >> 6) == (5, 2)                  # version 5, variant 1
    b1 = gid(client, gpu1.hSubdevice, A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
    assert b1 != b0


def test_gid_is_stable_across_clients(res):
    a, b = res.client(), res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    f = A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY
    assert gid(a, ga.hSubdevice, f) == gid(b, gb.hSubdevice, f)


@pytest.mark.parametrize("flags,status", [
    (1 << A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHIFT, A.NV_ERR_INVALID_FLAGS),   # not SHA1
    (A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_UGPU << A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_SHIFT,
     A.NV_ERR_NOT_SUPPORTED),                                                       # no uGPUs
    (2 << A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_SHIFT, A.NV_ERR_INVALID_PARAMETER),
])
def test_gid_bad_flags(client, gpu0, flags, status):
    assert status_of(gid, client, gpu0.hSubdevice, flags) == status


def test_uuid_from_gpu_id_is_the_gid(client, gpu0, gpu1):
    """NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID (cliresCtrlCmdGpuGetUuidFromGpuId_IMPL,
    gpumgrGetGpuUuidInfo): the GID's bytes or string by gpuId, SHA1 only; an
    unknown gpuId is NV_ERR_OBJECT_NOT_FOUND.  vgpu.ko learns each slice
    GPU's UUID through it (UVM_REGISTER_GPU's check)."""
    def uuid(gpu_id: int, flags: int) -> bytes:
        p = A.NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS(gpuId=gpu_id, flags=flags)
        client.control(client.hClient, A.NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID, p)
        return bytes(p.gpuUuid[:p.uuidStrLen])

    binary = A.NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_BINARY
    for g in (gpu0, gpu1):
        b = uuid(g.card.gpu_id, binary)
        assert b == gid(client, g.hSubdevice, A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
        s = uuid(g.card.gpu_id, 0)
        assert len(s) == A.NV_UUID_STR_LEN and s[:-1].decode() == uuid_string(b)
    assert status_of(uuid, 0xdead00, binary) == A.NV_ERR_OBJECT_NOT_FOUND
    assert status_of(uuid, gpu0.card.gpu_id,
                     binary | A.NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_TYPE_SHA256) == \
        A.NV_ERR_INVALID_ARGUMENT


# ========================================================= build version
def test_build_version_v2_is_the_release(client):
    p = A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS()
    client.control(client.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2, p)
    release = PARAMS.joinpath("driver_version").read_text().strip()
    assert p.driverVersionBuffer.decode() == release == client.version
    assert release in p.titleBuffer.decode() and p.driverBranch.decode()


def test_build_version_v1_sizes_then_strings(client):
    cmd = A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION
    p = A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS()
    client.control(client.hClient, cmd, p)          # NULL pointers: the size only
    n = p.sizeOfStrings
    bufs = [ctypes.create_string_buffer(n) for _ in range(3)]
    p = A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS(
        sizeOfStrings=n, pDriverVersionBuffer=ctypes.addressof(bufs[0]),
        pVersionBuffer=ctypes.addressof(bufs[1]), pTitleBuffer=ctypes.addressof(bufs[2]))
    client.control(client.hClient, cmd, p)
    assert bufs[0].value.decode() == client.version
    assert max(len(b.value) for b in bufs) + 1 == n
    # buffers said to be smaller than the longest string; unwritable buffers
    p.sizeOfStrings = n - 1
    assert status_of(client.control, client.hClient, cmd, p) == A.NV_ERR_INVALID_PARAM_STRUCT
    p.sizeOfStrings, p.pTitleBuffer = n, 0x1000
    assert status_of(client.control, client.hClient, cmd, p) == A.NV_ERR_INVALID_PARAM_STRUCT


def test_build_version_is_a_client_control(client, gpu0):
    assert status_of(client.control, gpu0.hSubdevice, A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
                     A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS()) == A.NV_ERR_NOT_SUPPORTED


# =============================================================== GR info
def test_gr_info(client, gpu0):
    got = dict(gr_info(client, gpu0.hSubdevice, [
        A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION, A.NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM,
        A.NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP, A.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS,
        A.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC, 0x35]))
    assert got == {A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION: 0x900,
                   A.NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM: 64,
                   A.NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP: 32,
                   A.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS: 8,
                   A.NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC: 2,
                   0x35: 0}      # in range, not set: 0


def test_gr_info_bad_input(client, gpu0):
    s, cmd = gpu0.hSubdevice, A.NV2080_CTRL_CMD_GR_GET_INFO
    assert status_of(gr_info, client, s, [A.NV2080_CTRL_GR_INFO_MAX_SIZE]) == A.NV_ERR_INVALID_ARGUMENT
    assert status_of(client.control, s, cmd, A.NV2080_CTRL_GR_GET_INFO_PARAMS(
        grInfoListSize=0, grInfoList=0)) == A.NV_ERR_INVALID_ARGUMENT
    assert status_of(client.control, s, cmd, A.NV2080_CTRL_GR_GET_INFO_PARAMS(
        grInfoListSize=1, grInfoList=0)) == A.NV_ERR_INVALID_ARGUMENT
    assert status_of(gr_info, client, s, [0], count=0) == A.NV_ERR_INVALID_ARGUMENT
    assert status_of(client.control, s, cmd, A.NV2080_CTRL_GR_GET_INFO_PARAMS(
        grInfoListSize=1, grInfoList=0x1000)) == A.NV_ERR_INVALID_ADDRESS


def test_gr_info_answers_at_most_max_size_entries(client, gpu0):
    n = A.NV2080_CTRL_GR_INFO_MAX_SIZE
    got = gr_info(client, gpu0.hSubdevice, [A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION] * (n + 1))
    assert got[n - 1] == (A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION, 0x900)
    assert got[n] == (A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION, 0xDEAD)


# ============================================================= VA spaces
def test_vaspace_defaults(client, gpu0, state):
    h, p = vaspace(client, gpu0.hDevice)
    assert (p.vaBase, p.vaSize) == (MiB, (1 << 57) - MiB)        # GH100: 57-bit VA
    before = state().objects
    h2, p2 = vaspace(client, gpu0.hSubdevice, vaBase=2 * MiB, vaSize=1 << 32)
    assert (p2.vaBase, p2.vaSize) == (2 * MiB, 1 << 32)
    assert state().objects == before + 1
    _, p3 = vaspace(client, gpu0.hDevice, index=A.NV_VASPACE_ALLOCATION_INDEX_GPU_DEVICE)
    assert p3.vaBase == MiB
    client.free(h2)
    client.free(h)


@pytest.mark.parametrize("kw,status", [
    (dict(bigPageSize=12345), A.NV_ERR_INVALID_ARGUMENT),
    (dict(index=A.NV_VASPACE_ALLOCATION_INDEX_GPU_HOST), A.NV_ERR_INVALID_ARGUMENT),
    (dict(index=A.NV_VASPACE_ALLOCATION_INDEX_GPU_GLOBAL), A.NV_ERR_INVALID_STATE),
    (dict(index=9), A.NV_ERR_INVALID_STATE),
    (dict(index=A.NV_VASPACE_ALLOCATION_INDEX_GPU_FLA), A.NV_ERR_NOT_SUPPORTED),
    (dict(flags=A.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING), A.NV_ERR_INVALID_ARGUMENT),
    (dict(flags=A.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_NVLINK_ATS), A.NV_ERR_INVALID_ARGUMENT),
    (dict(flags=A.NV_VASPACE_ALLOCATION_FLAGS_ENABLE_NVLINK_ATS
          | A.NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED), A.NV_ERR_NOT_SUPPORTED),
    (dict(vaBase=(1 << 64) - 4096, vaSize=8192), A.NV_ERR_INVALID_ARGUMENT),  # wraps
    (dict(vaSize=1 << 58), A.NV_ERR_INVALID_ARGUMENT),                     # past 57 bits
])
def test_vaspace_bad_input(client, gpu0, kw, status):
    assert status_of(vaspace, client, gpu0.hDevice, **kw) == status


def test_vaspace_parents_and_params(client, gpu0):
    assert status_of(vaspace, client, client.hClient) == A.NV_ERR_INVALID_OBJECT_PARENT
    assert status_of(client.alloc, gpu0.hDevice, A.FERMI_VASPACE_A, None) == A.NV_ERR_INVALID_ARGUMENT


def test_vaspace_and_device_va_modes(res):
    """deviceCtrl vaMode: SINGLE has no private VA spaces, MULTIPLE no default."""
    for mode, st_vas, st_ctx in [(A.NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE, A.NV_ERR_INVALID_STATE, 0),
                                 (A.NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES, 0,
                                  A.NV_ERR_INVALID_STATE)]:
        c = res.client()
        c.attach_gpus([c.cards[0].gpu_id])
        hdev = c.alloc(c.hClient, A.NV01_DEVICE_0, A.NV0080_ALLOC_PARAMETERS(deviceId=0, vaMode=mode))
        assert status_of(vaspace, c, hdev) == st_vas
        tsg = c.alloc_tsg(hdev)
        assert status_of(ctxshare, c, tsg) == st_ctx


# ========================================================= context shares
def test_ctxshare_subcontext_ids(client, gpu0):
    tsg = client.alloc_tsg(gpu0.hDevice)
    hvas, _ = vaspace(client, gpu0.hDevice)
    h0, id0 = ctxshare(client, tsg, A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC, hvas)
    assert id0 == 0
    assert status_of(ctxshare, client, tsg) == A.NV_ERR_NO_MEMORY          # 0 is taken
    _, hi = ctxshare(client, tsg, A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC)
    assert hi == 63
    _, lo = ctxshare(client, tsg, A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC_PREFER_LOWER)
    assert lo == (1 | 1 << 31)                                              # + _SUCCESS
    _, five = ctxshare(client, tsg, A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED, subctx=5)
    assert five == 5
    for sub in (5, 64):
        assert status_of(ctxshare, client, tsg, A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED,
                         subctx=sub) == A.NV_ERR_NO_MEMORY
    client.free(h0)
    assert ctxshare(client, tsg)[1] == 0                                    # 0 is free again


def test_ctxshare_bad_input(client, gpu0):
    tsg = client.alloc_tsg(gpu0.hDevice)
    assert status_of(ctxshare, client, tsg, 7) == A.NV_ERR_INVALID_ARGUMENT
    assert status_of(ctxshare, client, tsg, hvas=gpu0.hDevice) == A.NV_ERR_INVALID_OBJECT_HANDLE
    assert status_of(ctxshare, client, tsg, hvas=0x5CAFE) == A.NV_ERR_OBJECT_NOT_FOUND
    assert status_of(ctxshare, client, gpu0.hDevice) == A.NV_ERR_INVALID_OBJECT_PARENT
    assert status_of(client.alloc, tsg, A.FERMI_CONTEXT_SHARE_A, None) == A.NV_ERR_INVALID_ARGUMENT


# ========================================================= engine objects
def test_compute_and_copy_objects_on_a_channel(client, gpu0, state):
    tsg = client.alloc_tsg(gpu0.hDevice)
    ctxshare(client, tsg)
    gr = channel(client, tsg, A.HOPPER_CHANNEL_GPFIFO_A)
    before = state().objects
    hc = client.alloc(gr, A.HOPPER_COMPUTE_A, A.NV_GR_ALLOCATION_PARAMETERS())
    client.alloc(gr, A.HOPPER_DMA_COPY_A, A.NVB0B5_ALLOCATION_PARAMETERS())   # GRCE
    client.alloc(gr, A.HOPPER_A, None)                                      # params optional
    assert state().objects == before + 3
    client.free(hc)
    # kchannelConstruct_IMPL: a channel runs on its TSG's engine; another
    # engine type of its own is refused, and engine type 0 takes the TSG's.
    assert status_of(channel, client, tsg, A.HOPPER_CHANNEL_GPFIFO_A,
                     A.NV2080_ENGINE_TYPE_COPY0 + 2) == A.NV_ERR_INVALID_ARGUMENT
    inherit = channel(client, tsg, A.HOPPER_CHANNEL_GPFIFO_A, A.NV2080_ENGINE_TYPE_NULL)
    client.alloc(inherit, A.HOPPER_COMPUTE_A, A.NV_GR_ALLOCATION_PARAMETERS())
    ctsg = client.alloc_tsg(gpu0.hDevice, engine_type=A.NV2080_ENGINE_TYPE_COPY0 + 2)
    ce = channel(client, ctsg, A.HOPPER_CHANNEL_GPFIFO_A, A.NV2080_ENGINE_TYPE_COPY0 + 2)
    client.alloc(ce, A.HOPPER_DMA_COPY_A, A.NVB0B5_ALLOCATION_PARAMETERS())
    assert status_of(client.alloc, ce, A.HOPPER_COMPUTE_A, None) == A.NV_ERR_INVALID_CLASS
    client.free(tsg)            # the channels and their objects go with it
    client.free(ctsg)


def test_engine_object_bad_parents(client, gpu0):
    tsg = client.alloc_tsg(gpu0.hDevice)
    assert status_of(client.alloc, tsg, A.HOPPER_COMPUTE_A, None) == A.NV_ERR_INVALID_OBJECT_PARENT
    # A channel with no engine (in a TSG without one, which nvsim still
    # allows: README, "Differences found on NVIDIA's driver").
    ntsg = client.alloc_tsg(gpu0.hDevice, engine_type=A.NV2080_ENGINE_TYPE_NULL)
    nul = channel(client, ntsg, A.HOPPER_CHANNEL_GPFIFO_A, A.NV2080_ENGINE_TYPE_NULL)
    assert status_of(client.alloc, nul, A.HOPPER_COMPUTE_A, None) == A.NV_ERR_INVALID_OBJECT_PARENT
    g1tsg = client.alloc_tsg(gpu0.hDevice, engine_type=A.NV2080_ENGINE_TYPE_GR0 + 1)
    gr1 = channel(client, g1tsg, A.HOPPER_CHANNEL_GPFIFO_A, A.NV2080_ENGINE_TYPE_GR0 + 1)
    assert status_of(client.alloc, gr1, A.HOPPER_A, None) == A.NV_ERR_INVALID_CLASS  # 3D: GR0 only
    client.alloc(gr1, A.HOPPER_COMPUTE_A, None)


# ========================================================= OS descriptors
def test_os_descriptor_pins_user_pages(client, gpu0, pages, state):
    u = pages(256 * 1024)
    before = state()
    h = os_desc(client, gpu0, u.addr, u.size)
    assert client.surface_size(h) == u.size
    after = state()
    assert after.objects == before.objects + 1
    assert after.fb_used(0) == before.fb_used(0)                  # system memory, not FB
    # not CPU-mappable through RM_MAP_MEMORY (mapping_cpu.c)
    ctl = client.open_node("nvidiactl")
    assert status_of(client.map_memory, gpu0.hDevice, h, u.size, ctl) == A.NV_ERR_NOT_SUPPORTED
    client.free(h)


def test_os_descriptor_read_only_pages(client, gpu0, pages):
    u = pages()
    u.readonly()
    assert status_of(os_desc, client, gpu0, u.addr, u.size) == A.NV_ERR_INVALID_ADDRESS
    ro = OSDESC_FLAGS | (1 << A.NVOS02_FLAGS_ALLOC_USER_READ_ONLY_SHIFT)
    client.free(os_desc(client, gpu0, u.addr, u.size, flags=ro))


def test_os_descriptor_bad_input(client, gpu0, pages):
    u = pages()
    noncontig = OSDESC_FLAGS
    uncached = noncontig & ~(0xF << A.NVOS02_FLAGS_COHERENCY_SHIFT)
    contiguous = noncontig & ~(0xF << A.NVOS02_FLAGS_PHYSICALITY_SHIFT)   # 0: CONTIGUOUS
    cases = [
        (dict(addr=u.addr + 8), A.NV_ERR_NOT_SUPPORTED),                       # unaligned
        (dict(flags=noncontig & ~(3 << A.NVOS02_FLAGS_MAPPING_SHIFT)), A.NV_ERR_INVALID_FLAGS),
        (dict(flags=noncontig | (2 << A.NVOS02_FLAGS_LOCATION_SHIFT)), A.NV_ERR_INVALID_FLAGS),
        (dict(flags=noncontig | (2 << A.NVOS02_FLAGS_COHERENCY_SHIFT)), A.NV_ERR_INVALID_FLAGS),
        (dict(flags=uncached), A.NV_ERR_INVALID_FLAGS),                          # after pinning
        (dict(flags=contiguous), A.NV_ERR_INVALID_FLAGS),
        (dict(addr=0x10000), A.NV_ERR_INVALID_ADDRESS),                        # not mapped
        (dict(limit=(1 << 64) - 1), A.NV_ERR_INVALID_LIMIT),
        (dict(limit=0), A.NV_ERR_INVALID_PARAM_STRUCT),                        # after pinning
        (dict(parent=gpu0.hSubdevice), A.NV_ERR_INVALID_OBJECT_PARENT),
    ]
    for kw, status in cases:
        args = dict(addr=u.addr, flags=noncontig)
        args.update(kw)
        addr = args.pop("addr")
        assert status_of(os_desc, client, gpu0, addr, u.size, **args) == status, kw
    client.free(os_desc(client, gpu0, u.addr, u.size, flags=noncontig))


def test_os_descriptor_through_rm_alloc(client, gpu0, pages):
    """osdescConstruct/osCreateMemFromOsDescriptor: only the escape pins."""
    u = pages()
    P = A.NV_OS_DESC_MEMORY_ALLOCATION_PARAMS

    def alloc(**kw):
        return client.alloc(gpu0.hDevice, A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, P(**kw))
    assert status_of(alloc, descriptor=u.addr, limit=u.size - 1,
                     descriptorType=A.NVOS32_DESCRIPTOR_TYPE_VIRTUAL_ADDRESS) == A.NV_ERR_NOT_SUPPORTED
    assert status_of(alloc, descriptor=0, limit=u.size - 1) == A.NV_ERR_INVALID_PARAM_STRUCT
    assert status_of(alloc, descriptor=u.addr, limit=0) == A.NV_ERR_INVALID_PARAM_STRUCT
    assert status_of(alloc, descriptor=u.addr, limit=1,
                     descriptorType=A.NVOS32_DESCRIPTOR_TYPE_OS_PHYS_ADDR) == A.NV_ERR_NOT_SUPPORTED
    assert status_of(alloc, descriptor=u.addr, limit=1,
                     descriptorType=A.NVOS32_DESCRIPTOR_TYPE_OS_DMA_BUF_PTR) == A.NV_ERR_NOT_SUPPORTED
    assert status_of(alloc, descriptor=u.addr, limit=1, descriptorType=9) == A.NV_ERR_INVALID_ARGUMENT


# ======================================================= MAP_MEMORY_DMA
def test_map_memory_dma_into_virtual_memory(client, gpu0, pages, state):
    hv, va = virtual(client, gpu0.hDevice, 64 * MiB)
    assert va >= 1 << 32 and va % (2 * MiB) == 0
    hm, _ = client.alloc_vidmem(gpu0.hDevice, 4 * MiB)
    maps = state().mappings
    st, off = map_dma(client, gpu0.hDevice, hv, hm, 4 * MiB)
    assert (st, off) == (A.NV_OK, va)                          # relative 0: the base
    st, off2 = map_dma(client, gpu0.hDevice, hv, hm, 2 * MiB, offset=2 * MiB, dma_offset=8 * MiB)
    assert (st, off2) == (A.NV_OK, va + 8 * MiB)
    st, off3 = map_dma(client, gpu0.hDevice, hv, hm, MiB, dma_offset=va + 16 * MiB,
                       flags=DMA_OFFSET_FIXED)
    assert (st, off3) == (A.NV_OK, va + 16 * MiB)
    u = pages(MiB)
    ho = os_desc(client, gpu0, u.addr, u.size)
    assert map_dma(client, gpu0.hDevice, hv, ho, MiB, dma_offset=32 * MiB)[0] == A.NV_OK
    assert state().mappings == maps + 4
    # the same VA twice through the same device (refAddInterMapping)
    assert map_dma(client, gpu0.hDevice, hv, hm, MiB)[0] == A.NV_ERR_INVALID_ARGUMENT
    assert unmap_dma(client, gpu0.hDevice, hv, hm, off) == A.NV_OK
    assert unmap_dma(client, gpu0.hDevice, hv, hm, off) == A.NV_ERR_OBJECT_NOT_FOUND
    assert state().mappings == maps + 3
    client.free(hm)                                            # its mappings go with it
    assert state().mappings == maps + 1
    client.free(hv)
    assert state().mappings == maps


def test_map_memory_dma_partial_unmap(client, gpu0, state):
    hv, va = virtual(client, gpu0.hDevice, 16 * MiB)
    hm, _ = client.alloc_vidmem(gpu0.hDevice, 8 * MiB)
    maps = state().mappings
    assert map_dma(client, gpu0.hDevice, hv, hm, 8 * MiB)[0] == A.NV_OK
    # the middle: the mapping splits in two
    assert unmap_dma(client, gpu0.hDevice, hv, hm, va + 2 * MiB, MiB) == A.NV_OK
    assert state().mappings == maps + 2
    assert unmap_dma(client, gpu0.hDevice, hv, hm, va + 3 * MiB) == A.NV_OK   # the tail piece
    assert unmap_dma(client, gpu0.hDevice, hv, hm, va, 1 << 40) == A.NV_OK
    assert state().mappings == maps
    assert unmap_dma(client, gpu0.hDevice, hv, hm, va, (1 << 64) - 1) == A.NV_ERR_INVALID_ARGUMENT


def test_map_memory_dma_bad_input(client, gpu0, gpu1):
    hv, va = virtual(client, gpu0.hDevice, 16 * MiB)
    hm, _ = client.alloc_vidmem(gpu0.hDevice, 4 * MiB)
    hm1, _ = client.alloc_vidmem(gpu1.hDevice, 4 * MiB)
    hvas, _ = vaspace(client, gpu0.hDevice)
    d, s = gpu0.hDevice, gpu0.hSubdevice
    cases = [
        (dict(length=0), A.NV_ERR_INVALID_LIMIT),
        (dict(client=0x5CAFE), A.NV_ERR_INVALID_CLIENT),
        (dict(hdma=0x5CAFE), A.NV_ERR_OBJECT_NOT_FOUND),
        (dict(hmem=0x5CAFE), A.NV_ERR_OBJECT_NOT_FOUND),
        (dict(hdevice=0x5CAFE), A.NV_ERR_OBJECT_NOT_FOUND),
        (dict(hdevice=hm), A.NV_ERR_INVALID_OBJECT),                # not a device
        (dict(hmem=d), A.NV_ERR_INVALID_OBJECT_HANDLE),              # not memory
        (dict(length=4 * MiB + 1), A.NV_ERR_INVALID_LIMIT),
        (dict(offset=(1 << 64) - 4096), A.NV_ERR_INVALID_LIMIT),
        (dict(hdma=hvas), A.NV_ERR_INVALID_OBJECT_HANDLE),           # a VA space is no mapper
        (dict(hdma=hm), A.NV_ERR_INVALID_OBJECT_HANDLE),
        (dict(hdevice=s), A.NV_ERR_NOT_SUPPORTED),                   # 0x50A0 is broadcast only
        (dict(dma_offset=16 * MiB), A.NV_ERR_INVALID_OFFSET),
        (dict(dma_offset=va - 4096, flags=DMA_OFFSET_FIXED), A.NV_ERR_INVALID_OFFSET),
        (dict(dma_offset=14 * MiB), A.NV_ERR_INVALID_LIMIT),         # ends past the object
        (dict(hmem=hm1), A.NV_ERR_NOT_SUPPORTED),                    # another GPU's FB
    ]
    for kw, status in cases:
        args = dict(hdevice=d, hdma=hv, hmem=hm, length=4 * MiB)
        args.update(kw)
        hdevice, hdma, hmem, length = (args.pop(k) for k in ("hdevice", "hdma", "hmem", "length"))
        st, _ = map_dma(client, hdevice, hdma, hmem, length, **args)
        assert st == status, kw
    assert unmap_dma(client, d, 0x5CAFE, hm, va) == A.NV_ERR_OBJECT_NOT_FOUND


def test_map_memory_dma_escape_checks(client, gpu0):
    """The release's struct size exactly, and the control node only."""
    with pytest.raises(OSError):
        raw_ioctl(client.fd, A.NV_ESC_RM_MAP_MEMORY_DMA, bytes(56))
    with pytest.raises(OSError):
        raw_ioctl(gpu0.fd, A.NV_ESC_RM_MAP_MEMORY_DMA, bytes(ctypes.sizeof(A.NVOS46_PARAMETERS)))
    with pytest.raises(OSError):
        raw_ioctl(client.fd, A.NV_ESC_RM_UNMAP_MEMORY_DMA, bytes(40))


# ======================================================= other GPU models
@pytest.fixture(scope="class")
def reload_nvsim(request):
    """nvsim reloaded with the class's NVSIM_PARAMS, and back afterwards."""
    if nvsim_reload.skip_reason():
        pytest.skip(nvsim_reload.skip_reason())
    with nvsim_reload.reloaded(request.cls.NVSIM_PARAMS):
        yield


@pytest.mark.usefixtures("reload_nvsim")
class TestConsumerModel:
    """An "NVIDIA GeForce RTX 3090": a GA102, Ampere classes."""

    NVSIM_PARAMS = {"gpu_name": "NVIDIA GeForce RTX 3090"}

    def test_class_list_is_ga102s(self, client, gpu0):
        lst = full_classlist(client, gpu0.hDevice)
        assert AMPERE_GA102 | COMMON <= set(lst)
        assert not HOPPER & set(lst)
        assert stats()["chip"] == "GA102"
        assert client.cards[0].device_id == 0x2204

    def test_engines(self, client, gpu0):
        s = gpu0.hSubdevice
        assert set(engine_classlist(client, s, A.NV2080_ENGINE_TYPE_GR0)) == {
            A.AMPERE_B, A.AMPERE_COMPUTE_B, A.FERMI_TWOD_A, A.KEPLER_INLINE_TO_MEMORY_B}
        assert engine_classlist(client, s, A.NV2080_ENGINE_TYPE_GR0 + 1) == []
        assert engine_classlist(client, s, A.NV2080_ENGINE_TYPE_COPY0 + 4) == [A.AMPERE_DMA_COPY_B]
        assert engine_classlist(client, s, A.NV2080_ENGINE_TYPE_COPY0 + 5) == []

    def test_objects(self, client, gpu0):
        tsg = client.alloc_tsg(gpu0.hDevice)
        ch = channel(client, tsg, A.AMPERE_CHANNEL_GPFIFO_A)
        client.alloc(ch, A.AMPERE_COMPUTE_B, A.NV_GR_ALLOCATION_PARAMETERS())
        client.alloc(ch, A.AMPERE_DMA_COPY_B, A.NVB0B5_ALLOCATION_PARAMETERS())
        assert status_of(client.alloc, ch, A.HOPPER_COMPUTE_A, None) == A.NV_ERR_NOT_SUPPORTED
        assert status_of(channel, client, tsg, A.HOPPER_CHANNEL_GPFIFO_A) == A.NV_ERR_NOT_SUPPORTED
        _, p = vaspace(client, gpu0.hDevice)
        assert p.vaBase + p.vaSize == 1 << 49                          # 49-bit VA

    def test_info(self, client, gpu0):
        s = gpu0.hSubdevice
        assert gpu_info_v2(client, s, [A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE,
                                       A.NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED]) == {
            A.NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE: A.NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_UNSUPPORTED,
            A.NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED: 1}
        assert gr_info(client, s, [A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION]) == [
            (A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION, A.NV2080_CTRL_GR_INFO_SM_VERSION_8_06)]
        b = gid(client, s, A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
        assert b == expected_uuid(0x172, gpu0.card.bus)


@pytest.mark.usefixtures("reload_nvsim")
class TestRelease535:
    """nvsim presenting 535.288.01: that release's sizes and what it lacks."""

    NVSIM_PARAMS = {"driver_version": "535.288.01"}

    def test_a_class_the_release_lacks(self, client, gpu0):
        """Blackwell's usermode class is not in 535's resource list
        (NV_ERR_INVALID_CLASS, before the GPU's class check)."""
        assert client.version == "535.288.01"
        assert status_of(client.alloc_usermode, gpu0.hSubdevice,
                         A.BLACKWELL_USERMODE_A) == A.NV_ERR_INVALID_CLASS

    def test_build_version_v2_layout(self, client):
        raw = client.control(client.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2, bytes(776))
        assert raw[:256].rstrip(b"\0") == b"535.288.01"
        assert b"535.288.01" in raw[512:768]                           # titleBuffer

    def test_info_bounds(self, client, gpu0):
        s = gpu0.hSubdevice
        assert status_of(gr_info, client, s, [0x35]) == A.NV_ERR_INVALID_ARGUMENT
        assert gr_info(client, s, [0x34]) == [(0x34, 0)]
        assert status_of(gpu_info_v2, client, s, [0x40]) == A.NV_ERR_INVALID_ARGUMENT
        p = A.NV2080_CTRL_GPU_GET_INFO_V2_PARAMS(gpuInfoListSize=65)
        assert status_of(client.control, s, A.NV2080_CTRL_CMD_GPU_GET_INFO_V2, p) == \
            A.NV_ERR_INVALID_ARGUMENT

    def test_map_memory_dma_old_layouts(self, client, gpu0):
        hv, va = virtual(client, gpu0.hDevice, 16 * MiB)
        hm, _ = client.alloc_vidmem(gpu0.hDevice, 4 * MiB)
        hvas, p = vaspace(client, gpu0.hDevice)                       # 48-byte params
        assert p.vaBase == MiB
        # NVOS46 of 535: flags at 32, dmaOffset at 40, status at 48
        b = struct.pack("<IIIIQQI4xQI4x", client.hClient, gpu0.hDevice, hv, hm, 0, 4 * MiB, 0,
                        2 * MiB, 0xFFFF)
        out = raw_ioctl(client.fd, A.NV_ESC_RM_MAP_MEMORY_DMA, b)
        dma, st = struct.unpack_from("<QI", out, 40)
        assert (st, dma) == (A.NV_OK, va + 2 * MiB)
        with pytest.raises(OSError):
            raw_ioctl(client.fd, A.NV_ESC_RM_MAP_MEMORY_DMA, bytes(64))
        # NVOS47 of 535: dmaOffset at 24, status at 32, no size
        b = struct.pack("<IIIII4xQI4x", client.hClient, gpu0.hDevice, hv, hm, 0, dma, 0xFFFF)
        out = raw_ioctl(client.fd, A.NV_ESC_RM_UNMAP_MEMORY_DMA, b)
        assert struct.unpack_from("<I", out, 32)[0] == A.NV_OK
