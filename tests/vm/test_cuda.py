"""NVIDIA's CUDA driver library (libcuda.so.1 of 535.261.03, Debian's
libcuda1) on nvsim directly: cuInit and the device queries, cuCtxCreate
(the calls libcuda makes, logged by tools/nvlog, each answered as RM
answers it), and the driver-API sequence a user's program makes: memory
until CUDA_ERROR_OUT_OF_MEMORY, copies through the copy engine, pinned
host memory, streams and events, a PTX module JIT-compiled by
libnvidia-ptxjitcompiler and launched, the context destroyed.  nvsim
completes a launch's semaphores and fences without executing the kernel:
a launch test may check that the launch completes, never what the kernel
computed.

nvsim is reloaded as one GH100 presenting 535.261.03 with fb_backing=1,
and back afterwards, so this runs in the VM group without vgpu.ko:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_cuda.py

libcuda runs in a child process (ctypes, no CUDA toolkit); what it asked
of the driver and how nvsim answered is in docs/cuda.md and
kmod/nvsim/cuda.c.
"""

from __future__ import annotations

import json
import select
import subprocess

import pytest

import nvsim_reload
from cuda_lib import (control_status, libcuda_missing, nvlog_lines, popen_cuda, run_cuda,
                      sequence_body)

GiB = 1 << 30
GH100 = nvsim_reload.GH100


def _reason() -> str | None:
    return nvsim_reload.skip_reason() or libcuda_missing()


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


@pytest.fixture(scope="module", autouse=True)
def gh100_535():
    with nvsim_reload.reloaded(GH100):
        yield


DEVICE_QUERIES = """
    check('cuInit', 0)
    n = ctypes.c_int()
    check('cuDeviceGetCount', ctypes.byref(n)); out['count'] = n.value
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    check('cuDeviceGetName', name, 256, dev); out['name'] = name.value.decode()
    tm = ctypes.c_size_t()
    check('cuDeviceTotalMem_v2', ctypes.byref(tm), dev); out['total'] = tm.value
    # CUdevice_attribute: 1 MAX_THREADS_PER_BLOCK, 75/76 COMPUTE_CAPABILITY
    # MAJOR/MINOR, 41 UNIFIED_ADDRESSING, 33 PCI_BUS_ID, 50 PCI_DEVICE_ID
    # 16 MULTIPROCESSOR_COUNT, 124 DMA_BUF_SUPPORTED
    for k, a in (('maxThreadsPerBlock', 1), ('ccMajor', 75), ('ccMinor', 76),
                 ('unifiedAddressing', 41), ('pciBus', 33), ('pciDevice', 50),
                 ('multiprocessors', 16), ('dmaBuf', 124)):
        v = ctypes.c_int()
        check('cuDeviceGetAttribute', ctypes.byref(v), a, dev); out[k] = v.value
    uuid = ctypes.create_string_buffer(16)
    check('cuDeviceGetUuid', uuid, dev); out['uuid'] = uuid.raw.hex()
    print(json.dumps(out))
"""


def card0():
    """The GPU as the driver's CARD_INFO gives it (closed before libcuda runs)."""
    from vgpu.abi.nvclient import RmClient
    c = RmClient("/dev")
    try:
        return c.card_info()[0]
    finally:
        c.close()


def test_cuinit_and_device_queries():
    card = card0()
    r = run_cuda(DEVICE_QUERIES)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["count"] == 1
    assert out["name"] == "NVIDIA nvsim H100"
    assert out["total"] == 16 * GiB
    # GH100: compute capability 9.0 (GR_GET_INFO's SM version), 1024
    # threads per block, unified addressing (UVM).
    assert (out["ccMajor"], out["ccMinor"]) == (9, 0)
    assert out["maxThreadsPerBlock"] == 1024
    assert out["unifiedAddressing"] == 1
    # GH100 as nvsim presents it (arch.c): 8 GPCs x 9 TPCs x 2 SMs.  libcuda
    # multiplies GR_GET_INFO's SHADER_PIPE_SUB_COUNT (the TPC count, as
    # RM's own getGpcTpcInfo reads it) by LITTER_NUM_SM_PER_TPC; nvsim left
    # the first 0 and libcuda read 8.
    assert out["multiprocessors"] == 144
    # DMA_BUF_SUPPORTED: 0, although GPU_GET_INFO_V2's DMABUF_CAPABILITY
    # is _YES (nvsim exports dma-bufs: kmod/nvsim/dmabuf.c): libcuda
    # 535.261.03 decides by criteria of its own, not known here.
    assert out["dmaBuf"] == 0
    # The GPU's PCI address as CARD_INFO gives it, and a UUID.
    assert (out["pciBus"], out["pciDevice"]) == (card.bus, card.slot)
    assert len(out["uuid"]) == 32 and int(out["uuid"], 16) != 0


CTX_CREATE = """
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    out['ctx'] = call('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    if out['ctx'] == 0:
        check('cuCtxDestroy_v2', ctx)
    print(json.dumps(out))
"""

# uvm_ioctl.h
UVM_MAP_DYNAMIC_PARALLELISM_REGION = 65
UVM_ALLOC_SEMAPHORE_POOL = 68
UVM_VALIDATE_VA_RANGE = 72
UVM_UNREGISTER_CHANNEL = 28


def ctx_create_calls(tmp_path, argv_prefix=None):
    """cuCtxCreate under nvlog: (cuCtxCreate's CUresult, the calls)."""
    log = tmp_path / "nvlog.txt"
    r = run_cuda(CTX_CREATE, nvlog=log, argv_prefix=argv_prefix)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout.splitlines()[-1])["ctx"], nvlog_lines(log)


def assert_ctx_create_answers(lines):
    """The answers cuCtxCreate needed so far, each as RM gives it."""
    # 0x20800145 ACQUIRE_COMPUTE_MODE_RESERVATION (no header names it):
    # NV_OK under compute-mode rules NONE; without it cuCtxCreate failed
    # CUDA_ERROR_DEVICE_UNAVAILABLE.
    assert control_status(lines, 0x20800145) == ["0"]
    # NV0080 FIFO_GET_CHANNELLIST for each channel libcuda makes, NVC36F
    # GET_CLASS_ENGINEID for each engine object on them, GR_GET_CTX_BUFFER
    # _SIZE for each GR channel: all answered.
    for cmd in (0x80170d, 0xc36f0101, 0x20801218):
        st = control_status(lines, cmd)
        assert st and set(st) == {"0"}, (hex(cmd), st)
    # Its OS events through a GPU node it registered (NV_ESC_REGISTER_FD),
    # as RmIoctl takes event classes on any node; hSrcResource is the
    # parent, whatever libcuda put there (0): _fixupAllocParams.
    ev = [ln for ln in lines if ln.startswith("nvidia0 alloc ") and "class=0x79 " in ln]
    assert ev and all("status=0 ret=0" in ln for ln in ev), ev
    # A 104 MiB system-memory object mapped whole (nvsim refused CPU
    # mappings above 64 MiB even where the store faults pages in lazily).
    assert any(" map " in f" {ln}" and "length=0x6800000 " in ln and "status=0 ret=0" in ln
               for ln in lines)
    # Its semaphore pool (then mmap()ed through the UVM file over exactly
    # the range), the range validated, a dynamic parallelism region: each
    # answered (nvsim's unknown UVM commands fail -EINVAL).
    for cmd in (UVM_ALLOC_SEMAPHORE_POOL, UVM_VALIDATE_VA_RANGE,
                UVM_MAP_DYNAMIC_PARALLELISM_REGION):
        assert f"nvidia-uvm uvm cmd={cmd} ret=0 errno=0" in lines, cmd
    # No call fails before cuCtxDestroy's teardown (its first
    # UVM_UNREGISTER_CHANNEL, which nvsim does not answer yet) but the
    # controls libcuda goes on without (NV_ERR_NOT_SUPPORTED, or vgpu.ko's
    # refusal of 0x20808161 through a slice).
    teardown = lines.index(f"nvidia-uvm uvm cmd={UVM_UNREGISTER_CHANNEL} ret=-1 errno=22")
    failed = [ln for ln in lines[:teardown]
              if "ret=-1" in ln or ("status=" in ln and "status=0 " not in ln)]
    assert all(" control " in f" {ln}" for ln in failed), failed


def test_ctx_create(tmp_path):
    ctx, lines = ctx_create_calls(tmp_path)
    assert_ctx_create_answers(lines)
    assert ctx == 0
    # Its system memory in 4 KiB pages and its video memory in RM's default
    # page (2 MiB from 2 MiB up): the sizes RM reports, which libcuda gives
    # UVM_CREATE_EXTERNAL_RANGE (4 KiB-aligned or NV_ERR_INVALID_ADDRESS:
    # cuCtxCreate failed CUDA_ERROR_INVALID_VALUE on a 0x3aa410-byte object).
    heaps = [ln for ln in lines if " vidheap " in f" {ln}" and "status=0 " in ln]
    assert heaps
    for ln in heaps:
        size = int(ln.split(" size=")[1].split()[0], 16)
        assert size % 4096 == 0, ln
    # NV0080 PERF_CUDA_LIMIT_SET_CONTROL under its legacy number: NV_OK
    # (CUDA_ERROR_NOT_SUPPORTED without it).
    assert set(control_status(lines, 0x809909)) == {"0"}
    # cuCtxDestroy releases the reservation: NV_OK, it holds it.
    assert control_status(lines, 0x20800146) == ["0"]


def nvsim_channel_stops() -> list[str]:
    """nvsim's kernel log lines of channels its engine stopped (pbdma.c)."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if "nvsim: channel " in ln and " stopped: " in ln]


def test_ctx_create_channels_run(tmp_path):
    """The channels cuCtxCreate sets up run in nvsim's engine without
    stopping: their TSGs are made on the VA space UVM registered and the
    channels with no context share, so they run in the TSG's VA space (RM's
    legacy context share), where their GPFIFOs are mapped (UVM external
    mappings at 0x200600000 + n * 0x3000); their pushbuffers' copy-engine
    memsets (LAUNCH_DMA 0x586, REMAP_ENABLE with constants) and compute
    inline-to-memory writes are done.  Before, each stopped with "MMU fault
    (GPFIFO)", then "copy not simulated", then "compute work not
    simulated"."""
    before = len(nvsim_channel_stops())
    ctx, lines = ctx_create_calls(tmp_path)
    assert any(ln.startswith("nvidiactl alloc ") and "class=0xc86f " in ln for ln in lines)
    assert nvsim_channel_stops()[before:] == []


def test_driver_api_sequence():
    r = run_cuda(sequence_body(64 << 20))
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["total"] == 16 * GiB and 0 < out["free"] <= out["total"]
    # CUDA_ERROR_OUT_OF_MEMORY once what cuMemGetInfo called free is used,
    # in 64 MiB pieces: within one piece of it.
    assert out["alloc_error"] == 2
    assert out["free"] - (64 << 20) < out["allocated"] <= out["free"]
    # fb_backing=1: the copy engine's copies reach the same FB.
    assert out["copied"]
    # Every other call of the sequence answered CUDA_SUCCESS (check()
    # stops the child at the first that does not).
    assert all(c[1] == 0 for c in out["calls"]), out["calls"]
    assert out["calls"][-1] == ["cuCtxDestroy_v2", 0]


# CUDA IPC between two processes, as NCCL uses it within a node: the
# exporter allocates, writes a pattern and gives the importer the 64-byte
# handle through a pipe; each step waits for a line on stdin and answers
# one json line on stdout.
IPC_SIZE = 4 << 20

IPC_EXPORTER = """
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    check('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    d = ctypes.c_uint64()
    check('cuMemAlloc_v2', ctypes.byref(d), ctypes.c_size_t(SIZE))
    src = (ctypes.c_ubyte * SIZE).from_buffer_copy(PATTERN)
    check('cuMemcpyHtoD_v2', d, src, ctypes.c_size_t(SIZE))
    h = (ctypes.c_ubyte * 64)()
    check('cuIpcGetMemHandle', h, d)
    out['handle'] = bytes(h).hex()
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    check('cuMemFree_v2', d)
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    check('cuCtxDestroy_v2', ctx)
    out['done'] = True
    print(json.dumps(out), flush=True)
"""

# The importer: the handle on stdin; it opens it (CU_IPC_MEM_LAZY_ENABLE_PEER
# _ACCESS), copies the memory back and compares; out['open'] is the CUresult
# of cuIpcOpenMemHandle (a refusal ends the program there, reported); then,
# a step each, cuIpcCloseMemHandle and cuCtxDestroy.
IPC_IMPORTER = """
    class Handle(ctypes.Structure):
        _fields_ = [('reserved', ctypes.c_ubyte * 64)]
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    check('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    h = Handle.from_buffer_copy(bytes.fromhex(sys.stdin.readline().strip()))
    d = ctypes.c_uint64()
    cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]
    out['open'] = call('cuIpcOpenMemHandle_v2', ctypes.byref(d), h, 1)
    if out['open'] == 0:
        dst = (ctypes.c_ubyte * SIZE)()
        check('cuMemcpyDtoH_v2', dst, d, ctypes.c_size_t(SIZE))
        out['same'] = bytes(dst) == PATTERN
        print(json.dumps(out), flush=True)
        sys.stdin.readline()
        check('cuIpcCloseMemHandle', d)
        print(json.dumps(out), flush=True)
        sys.stdin.readline()
    check('cuCtxDestroy_v2', ctx)
    out['done'] = True
    print(json.dumps(out), flush=True)
"""


def ipc_body(body: str, size: int = IPC_SIZE) -> str:
    return (f"    SIZE = {size}\n"
            "    PATTERN = bytes((i * 13 + 5) & 255 for i in range(256)) * (SIZE // 256)\n" + body)


def ipc_step(p, line: str | None = "go") -> dict:
    """Send p a line (None: nothing), and read its next json line."""
    if line is not None:
        p.stdin.write(line + "\n")
        p.stdin.flush()
    # A child that hangs fails the test rather than the run (the VM's limit).
    if not select.select([p.stdout], [], [], 600)[0]:
        p.kill()
        raise AssertionError(f"child silent for 600 s: {p.stderr.read()}")
    got = p.stdout.readline()
    if not got:
        p.wait(timeout=60)
        raise AssertionError(f"child exited {p.returncode}: {p.stderr.read()}")
    return json.loads(got)


def ipc_finish(p) -> None:
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    p.wait(timeout=120)


def test_ipc_between_two_processes(tmp_path):
    """cuIpcGetMemHandle in one process, cuIpcOpenMemHandle in another
    (the handle through a pipe): the importer reads the exporter's pattern
    (fb_backing=1: the same FB), closes it, and each frees its own.

    libcuda's export is NV_ESC_RM_SHARE of the memory object (type ALL,
    DUP_OBJECT); the import an RM_DUP_OBJECT from the exporter's client
    into the importer's device.  nvsim answered RM_SHARE
    NV_ERR_NOT_SUPPORTED, and cuIpcGetMemHandle failed
    CUDA_ERROR_NOT_SUPPORTED (801)."""
    a = popen_cuda(ipc_body(IPC_EXPORTER), nvlog=tmp_path / "a.txt")
    b = None
    try:
        handle = ipc_step(a, None)["handle"]
        b = popen_cuda(ipc_body(IPC_IMPORTER), nvlog=tmp_path / "b.txt")
        got = ipc_step(b, handle)
        assert got["open"] == 0, got
        assert got["same"]
        assert ipc_step(a)["calls"][-1] == ["cuMemFree_v2", 0]
        assert ipc_step(b)["calls"][-1] == ["cuIpcCloseMemHandle", 0]
        assert ipc_step(b)["done"]
        assert ipc_step(a)["done"]
    finally:
        for p in (a, b):
            if p is not None:
                ipc_finish(p)
    share = [ln for ln in nvlog_lines(tmp_path / "a.txt") if " share " in f" {ln}"]
    assert len(share) == 1 and "type=1 " in share[0] and "access=0x1 " in share[0], share
    assert "status=0 ret=0" in share[0], share
    client = share[0].split(" h=")[1].split("/")[0]
    mem = share[0].split(" h=")[1].split("/")[1].split()[0]
    dup = [ln for ln in nvlog_lines(tmp_path / "b.txt") if " dup " in f" {ln}"]
    assert any(f" src={client}/{mem} " in ln and "status=0 ret=0" in ln for ln in dup), dup
