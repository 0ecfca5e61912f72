"""The ioctl fuzzer (docs/fuzzing.md) on a short budget, with a fixed seed.

tools/fuzz/run.py makes three slices with 32 MiB per GPU, runs nvfuzz on
them and on nvsim's own nodes at once, and checks that no charge passed its
quota in any sample, that what vgpu.ko charged equals what nvsim holds for
the fuzzers' processes (plus UVM managed ranges), and that vgpu.ko and nvsim
are back to zero after the slices are deleted.  `make fuzz` runs the same
with a larger budget and a new seed each time.

nvfuzz is built by run.py when build/nvfuzz is missing or older than its
sources (into a temporary directory: the repository is read-only here).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError
from vgpu_fixtures import (MiB, kern, make_slice, vgpu_leak_check,  # noqa: F401  (fixtures)
                           NVSIM_STATE)

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tools" / "fuzz" / "run.py"

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="runs in the VM with nvsim and vgpu.ko loaded (tools/vm/vm.py run --load-nvsim --load-vgpu)")


def run_fuzz(*args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True,
                       timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1]) if lines else {}
    return r, summary


def test_fuzz_short_budget():
    """20000 calls, seed 16: every check of run.py passes."""
    r, s = run_fuzz("--seed", "16", "--calls", "20000")
    assert r.returncode == 0, f"run.py found something:\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}"
    assert s["findings"] == 0
    assert s["calls"] >= 20000
    # the budget reached the surface: successes, refusals, faults, mappings
    assert s["kinds"]["ok"] > 1000, s["kinds"]
    assert s["kinds"]["efault"] > 0, s["kinds"]
    assert s["kinds"]["mmap"] > 0 and s["kinds"]["uvm"] > 0, s["kinds"]
    assert s["refusals"] > 0, "no allocation met a slice's quota"
    assert all(v > 200 for v in s["outcomes"].values()), s["outcomes"]
    # the charges were compared while every fuzzer held what it made
    # (over only after a UVM_MAP_EXTERNAL_ALLOCATION that may have failed:
    # its charge reference is kept whatever status came back, by design)
    assert s["held"] and all(
        h["charged"] == h["nvsim"] + h["uvm_mapped"] or
        (h["map_ext_unsure"] and h["charged"] > h["nvsim"] + h["uvm_mapped"])
        for h in s["held"].values()), s["held"]


# ---------------------------------------------------------------- findings
def _nvsim_pid_fb(pid: int, gpu: int) -> int:
    for line in NVSIM_STATE.read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "pid" and int(f[1]) == pid and int(f[3]) == gpu:
            return int(f[5])
    return 0


def _channel_class() -> int:
    chip = ""
    for line in Path("/sys/kernel/debug/nvsim/stats").read_text().splitlines():
        if line.startswith("chip "):
            chip = line.split()[1]
    return A.AMPERE_CHANNEL_GPFIFO_A if chip == "GA102" else A.HOPPER_CHANNEL_GPFIFO_A


def test_userd_memory_stays_charged_while_its_channel_lives(make_slice):
    """Found by the fuzzer (seed 7, --check-slice): a channel whose USERD is
    a memory object of the caller (hUserdMemory[0]) keeps that FB in the
    driver after the memory object is freed (the real driver's
    kchannelCreateUserdMemDesc refcounts the memory descriptor; nvsim holds
    a reference), but vgpu.ko returned the charge at the free: allocate,
    make a channel on it, free, repeat -- up to the channel cap times the
    quota, outside it.  The channel now holds the charge too."""
    sl = make_slice(gpus=((0, 64 * MiB),))
    c = sl.client()
    g = c.gpu(0)
    real = sl.get().gpu(0).real_minor
    tsg = c.alloc_tsg(g.hDevice)
    mem = g.alloc(40 * MiB)
    p = A.NV_CHANNEL_ALLOC_PARAMS(gpFifoEntries=64)
    struct.pack_into("<I", p._opaque0, 0, mem)          # hUserdMemory[0]
    ch = c.alloc(tsg, _channel_class(), p)
    assert sl.used(0) == 40 * MiB
    c.free(mem)
    # the GPU still holds the 40 MiB for this process, so must the quota
    assert _nvsim_pid_fb(os.getpid(), real) == 40 * MiB
    assert sl.used(0) == 40 * MiB
    with pytest.raises(RmError) as e:
        g.alloc(40 * MiB)                               # 80 MiB > 64 MiB
    assert e.value.status == A.NV_ERR_NO_MEMORY
    c.free(ch)
    assert _nvsim_pid_fb(os.getpid(), real) == 0
    assert sl.used(0) == 0


@pytest.mark.parametrize("nr,node,struct_", [
    (A.NV_ESC_REGISTER_FD, "nvidiactl", A.nv_ioctl_register_fd_t),
    (A.NV_ESC_RM_ALLOC_MEMORY, "nvidia0", A.nv_ioctl_nvos02_parameters_with_fd),
    (A.NV_ESC_RM_MAP_MEMORY, "nvidiactl", A.nv_ioctl_nvos33_parameters_with_fd),
], ids=["REGISTER_FD", "RM_ALLOC_MEMORY", "RM_MAP_MEMORY"])
def test_short_params_refused_before_they_are_read(make_slice, nr, node, struct_):
    """Found by the fuzzer on the debug kernel (KASAN slab-out-of-bounds in
    vgpu_ctl_ioctl): REGISTER_FD, RM_ALLOC_MEMORY and RM_MAP_MEMORY read the
    fd in their parameters before checking the ioctl's size, past the end of
    a kernel copy of fewer bytes.  Every shorter size is EINVAL; on the
    debug kernel the harness fails the run on any KASAN report."""
    import fcntl
    sl = make_slice(gpus=((0, 64 * MiB),))
    fd = sl.open(node)
    full = ctypes.sizeof(struct_)
    for size in range(1, full):
        buf = ctypes.create_string_buffer(b"\xff" * size, size)
        with pytest.raises(OSError) as e:
            fcntl.ioctl(fd, A.nv_ioctl(nr, size), buf)
        assert e.value.errno == errno.EINVAL, (size, e.value)
