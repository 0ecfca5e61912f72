"""NVIDIA's own nvidia-smi and libnvidia-ml (535.261.03, Debian non-free)
on nvsim, and pynvml making the same queries (docs/nvml.md).

nvsim must present release 535.261.03 (the user space refuses another
kernel release):

    tools/vm/vm.py run --load-nvsim \\
        --nvsim-params "num_gpus=2 fb_size=17179869184 driver_version=535.261.03" \\
        -- .venv/bin/python -m pytest -q tests/vm/test_nvidia_smi.py

A helper process holds FB and a compute object on GPU 0 (what makes a
process a "compute app" for NVML: GPU_GET_PIDS of the compute class); the
tests check what nvidia-smi and NVML print against nvsim's own accounting
(debugfs state).  Figures nvsim has no model of (temperature, power, clocks,
utilisation) are "N/A", as NVML prints them when the driver answers
NOT_SUPPORTED.

The tests named *_cuda_* make the compute app a real CUDA process instead:
NVIDIA's libcuda (cuda_lib.py) holding a context and a known cuMemAlloc
while nvidia-smi and pynvml look (CudaHolder).  cuCtxCreate needs nvsim's
fb_backing=1 (without it nvsim allocates a whole CPU mapping at mmap() and
refuses one above 64 MiB; libcuda maps a 104 MiB object: docs/cuda.md), so
they run in make test's test-vm-nvml part (mk/test.mk):

    tools/vm/vm.py run --load-nvsim --load-vgpu \\
        --nvsim-params "num_gpus=2 fb_size=17179869184 driver_version=535.261.03 fb_backing=1" \\
        -- .venv/bin/python -m pytest -q tests/vm/test_nvidia_smi.py tests/vm/test_vgpu_nvidia_smi.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cuda_lib import PRELUDE, libcuda_missing, nvidia_lib, nvidia_userspace

from conftest import read_state

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
RELEASE = "535.261.03"
MiB = 1 << 20
HOLD = 256 * MiB


def _presented() -> str:
    p = Path("/sys/module/nvsim/parameters/driver_version")
    return p.read_text().strip() if p.exists() else ""


def _reason() -> str | None:
    if nvidia_userspace() is None:
        return f"NVIDIA's {RELEASE} user space is not unpacked under $VGPU_CACHE"
    if _presented() != RELEASE:
        return f"nvsim must present driver_version={RELEASE} (it presents {_presented()!r})"
    return None


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")

# A process with FB and a compute object on one GPU, until stdin closes.
HOLDER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from vgpu.abi import nvabi as A
    from vgpu.abi.nvclient import RmClient
    c = RmClient(sys.argv[2])
    c.open_gpus()
    g = c.gpus[int(sys.argv[3])]
    g.alloc(int(sys.argv[4]))
    tsg = c.alloc_tsg(g.hDevice)
    c.alloc(tsg, A.FERMI_CONTEXT_SHARE_A, A.NV_CTXSHARE_ALLOCATION_PARAMETERS(
        flags=A.NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC))
    ch = c.alloc_channel(tsg, A.HOPPER_CHANNEL_GPFIFO_A)
    c.alloc(ch, A.HOPPER_COMPUTE_A, A.NV_GR_ALLOCATION_PARAMETERS())
    print("ready", flush=True)
    sys.stdin.read()
    c.close()
""")


class Holder:
    def __init__(self, prefix: str = "/dev", gpu: int = 0, size: int = HOLD, wrap=()):
        self.p = subprocess.Popen([*wrap, PY, "-c", HOLDER, str(ROOT), prefix, str(gpu), str(size)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            self.close()
            pytest.fail(f"holder did not start: {line!r}")
        self.pid = self.p.pid

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(60)


@pytest.fixture
def holder():
    h = Holder()
    yield h
    h.close()


def smi(*args: str, wrap=(), env=None) -> subprocess.CompletedProcess:
    exe, lib = nvidia_userspace()
    e = dict(os.environ, LD_LIBRARY_PATH=str(lib), **(env or {}))
    r = subprocess.run([*wrap, str(exe), *args], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, f"nvidia-smi {' '.join(args)}: rc {r.returncode}\n{r.stdout}{r.stderr}"
    return r


def csv(text: str) -> list[list[str]]:
    return [[f.strip() for f in line.split(",")] for line in text.strip().splitlines()[1:]]


def mib(n: int) -> str:
    return f"{n // MiB} MiB"


def test_smi_lists_each_gpu_with_its_memory(holder, fb_size, num_gpus):
    out = smi().stdout
    assert f"Driver Version: {RELEASE}" in out
    assert out.count("NVIDIA nvsim H100") == num_gpus
    used = [read_state().fb_used(i) for i in range(num_gpus)]
    for u in used:
        assert f"{u // MiB}MiB / {fb_size // MiB}MiB" in out, out
    # the holder is a compute app on GPU 0 with its FB; nvidia-smi itself
    # (no compute object) is not listed
    procs = [line.split() for line in out.splitlines()
             if re.match(r"\|\s+\d+\s+\S+\s+\S+\s+\d+\s+[MCG+]+\s", line)]
    assert len(procs) == 1, out
    f = procs[0]
    assert f[1] == "0" and int(f[4]) == holder.pid and f[5] == "C", procs
    assert f[-2] == f"{HOLD // MiB}MiB", procs


def test_smi_list_gpus(num_gpus):
    out = smi("-L").stdout.splitlines()
    assert len(out) == num_gpus
    for i, line in enumerate(out):
        assert re.fullmatch(rf"GPU {i}: NVIDIA nvsim H100 \(UUID: GPU-[0-9a-f-]{{36}}\)", line), line


def test_query_gpu(holder, fb_size, num_gpus):
    rows = csv(smi("--query-gpu=name,uuid,memory.total,memory.used,utilization.gpu",
                   "--format=csv").stdout)
    st = read_state()
    assert len(rows) == num_gpus
    for i, (name, uuid, total, used, util) in enumerate(rows):
        assert name == "NVIDIA nvsim H100" and uuid.startswith("GPU-")
        assert total == mib(fb_size)
        assert used == mib(st.fb_used(i))
        assert util == "[N/A]"            # nvsim has no utilisation counters
    assert rows[0][3] == mib(HOLD)


def test_query_compute_apps(holder):
    rows = csv(smi("--query-compute-apps=gpu_bus_id,pid,used_memory", "--format=csv").stdout)
    assert rows == [["00000000:10:00.0", str(holder.pid), mib(HOLD)]], rows


def test_query_compute_apps_none():
    assert csv(smi("--query-compute-apps=pid,used_memory", "--format=csv").stdout) == []


def test_smi_q(holder, fb_size):
    out = smi("-q").stdout
    assert re.search(rf"Driver Version\s+: {RELEASE}", out)
    assert re.search(r"Attached GPUs\s+: 2", out)
    assert re.search(r"Product Name\s+: NVIDIA nvsim H100", out)
    assert re.search(r"Product Architecture\s+: Hopper", out)
    assert re.search(r"Bus Id\s+: 00000000:10:00.0", out)
    fb = re.search(r"FB Memory Usage\s+Total\s+: (\d+) MiB\s+Reserved\s+: (\d+) MiB\s+"
                   r"Used\s+: (\d+) MiB\s+Free\s+: (\d+) MiB", out)
    assert fb, out
    assert int(fb[1]) == fb_size // MiB and int(fb[3]) == HOLD // MiB
    assert re.search(r"Compute Mode\s+: Default", out)
    assert re.search(r"Persistence Mode\s+: Disabled", out)


PYNVML = textwrap.dedent("""
    import json, pynvml as N
    N.nvmlInit()
    out = {"driver": N.nvmlSystemGetDriverVersion(), "gpus": []}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        m = N.nvmlDeviceGetMemoryInfo(h)
        try:
            util = N.nvmlDeviceGetUtilizationRates(h).gpu
        except N.NVMLError as e:
            util = str(e)
        try:
            procs = [[p.pid, p.usedGpuMemory]
                     for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
        except N.NVMLError as e:
            procs = str(e)
        out["gpus"].append({
            "name": N.nvmlDeviceGetName(h), "uuid": N.nvmlDeviceGetUUID(h),
            "total": m.total, "used": m.used, "free": m.free, "util": util,
            "procs": procs})
    N.nvmlShutdown()
    print(json.dumps(out))
""")


def pynvml_query(wrap=()) -> dict:
    _, lib = nvidia_userspace()
    r = subprocess.run([*wrap, PY, "-c", PYNVML], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, LD_LIBRARY_PATH=str(lib)))
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_pynvml(holder, fb_size, num_gpus):
    q = pynvml_query()
    st = read_state()
    uuids = smi("--query-gpu=uuid", "--format=csv,noheader").stdout.split()
    assert q["driver"] == RELEASE
    assert len(q["gpus"]) == num_gpus
    for i, g in enumerate(q["gpus"]):
        assert g["name"] == "NVIDIA nvsim H100" and g["uuid"] == uuids[i]
        assert g["total"] == fb_size and g["used"] == st.fb_used(i)
        assert g["free"] == fb_size - st.fb_used(i)
        assert g["util"] == "Not Supported"
    assert q["gpus"][0]["procs"] == [[holder.pid, HOLD]]
    assert q["gpus"][1]["procs"] == []


# ------------------------------------------------ a real CUDA process

def _cuda_reason() -> str | None:
    fb = Path("/sys/module/nvsim/parameters/fb_backing")
    if fb.exists() and fb.read_text().strip() not in ("Y", "1"):
        return ("libcuda's cuCtxCreate needs nvsim's fb_backing=1 (make test's "
                "test-vm-nvml part, mk/test.mk)")
    return libcuda_missing()


needs_cuda = pytest.mark.skipif(_cuda_reason() is not None, reason=_cuda_reason() or "")

# libcuda: a context on device 0 and one cuMemAlloc of argv[2] bytes, with
# cuMemGetInfo before and after it; then a line of json (readiness) and the
# context held until stdin closes.
CUDA_HOLDER = """
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    check('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check('cuMemGetInfo_v2', ctypes.byref(free), ctypes.byref(total))
    out['free_ctx'], out['total'] = free.value, total.value
    p = ctypes.c_uint64()
    check('cuMemAlloc_v2', ctypes.byref(p), ctypes.c_size_t(int(sys.argv[2])))
    check('cuMemGetInfo_v2', ctypes.byref(free), ctypes.byref(total))
    out['free'] = free.value
    out['pid'] = os.getpid()
    print(json.dumps(out), flush=True)
    sys.stdin.read()
    check('cuMemFree_v2', p)
    check('cuCtxDestroy_v2', ctx)
"""


class CudaHolder:
    """NVIDIA's libcuda in a child (under ``wrap``, e.g. a slice's
    namespaces) holding a context and ``size`` bytes of cuMemAlloc until
    close().  ``pid``: its host PID; ``ns_pid``: as it sees itself."""

    def __init__(self, size: int = HOLD, wrap=()):
        lib = nvidia_lib("libcuda.so.1")
        env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent))
        code = PRELUDE + textwrap.dedent(CUDA_HOLDER)
        self.p = subprocess.Popen([*wrap, sys.executable, "-c", code, str(lib), str(size)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        try:
            self.out = json.loads(line)
            assert "pid" in self.out
        except (ValueError, AssertionError):
            self.close()
            pytest.fail(f"libcuda holder did not start: {line!r} {self.p.stderr.read()}")
        self.ns_pid = self.out["pid"]
        self.pid = self.p.pid
        if wrap:
            # the python that unshare -f forked (sh exec'd it): its host PID
            kids = Path(f"/proc/{self.p.pid}/task/{self.p.pid}/children").read_text().split()
            assert len(kids) == 1, kids
            self.pid = int(kids[0])

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(120)
        assert self.p.returncode == 0, self.p.stderr.read()


@pytest.fixture
def cuda():
    h = CudaHolder()
    yield h
    h.close()


def smi_rows(out: str) -> list[list[str]]:
    """The process rows of nvidia-smi's table: GPU GI CI PID Type Name... Memory."""
    return [line.strip("| ").split() for line in out.splitlines()
            if re.match(r"\|\s+\d+\s+\S+\s+\S+\s+\d+\s+[MCG+]+\s", line)]


def smi_q_processes(out: str) -> list[tuple[int, str, int]]:
    """-q's Processes sections: (pid, type, used MiB) each."""
    return [(int(m[1]), m[2], int(m[3])) for m in re.finditer(
        r"Process ID\s+: (\d+)\s+Type\s+: (\S+)\s+Name\s+: .*?\s+"
        r"Used GPU Memory\s+: (\d+) MiB", out)]


@needs_cuda
def test_cuda_process_listed_with_nvsims_charge(cuda, fb_size, num_gpus):
    """A libcuda context and a 256 MiB cuMemAlloc: nvidia-smi (table, -q,
    --query-gpu, --query-compute-apps) and pynvml list the process on GPU 0
    with what nvsim charged it, context and allocation
    (GPU_GET_PIDS of the compute class: the context's compute objects;
    GPU_GET_PID_INFO: nvsim's per-process FB)."""
    st = read_state()
    charged = st.pid_used(cuda.pid, 0)
    # nvsim's per-process figure is the context's FB plus the allocation
    # (cuMemGetInfo's free fell by exactly the 2 MiB-aligned allocation),
    # and this process is GPU 0's only user.
    assert cuda.out["free_ctx"] - cuda.out["free"] == HOLD
    assert charged == st.fb_used(0) == cuda.out["total"] - cuda.out["free"] > HOLD
    assert cuda.out["total"] == fb_size

    out = smi().stdout
    assert f"{charged // MiB}MiB / {fb_size // MiB}MiB" in out, out
    rows = smi_rows(out)
    assert len(rows) == 1, out
    assert rows[0][0] == "0" and int(rows[0][3]) == cuda.pid and rows[0][4] == "C", rows
    assert rows[0][-1] == f"{charged // MiB}MiB", rows

    q = smi("-q").stdout
    assert smi_q_processes(q) == [(cuda.pid, "C", charged // MiB)], q
    fb = re.search(r"FB Memory Usage\s+Total\s+: (\d+) MiB\s+Reserved\s+: \d+ MiB\s+"
                   r"Used\s+: (\d+) MiB", q)
    assert fb and (int(fb[1]), int(fb[2])) == (fb_size // MiB, charged // MiB), q

    rows = csv(smi("--query-gpu=memory.total,memory.used,utilization.gpu",
                   "--format=csv").stdout)
    assert rows[0] == [mib(fb_size), mib(charged), "[N/A]"]
    assert rows[1:] == [[mib(fb_size), mib(0), "[N/A]"]] * (num_gpus - 1)
    rows = csv(smi("--query-compute-apps=pid,used_memory", "--format=csv").stdout)
    assert rows == [[str(cuda.pid), mib(charged)]]

    g = pynvml_query()["gpus"]
    assert (g[0]["total"], g[0]["used"], g[0]["util"]) == (fb_size, charged, "Not Supported")
    assert g[0]["procs"] == [[cuda.pid, charged]]
    assert all(x["procs"] == [] for x in g[1:])


@needs_cuda
def test_cuda_process_in_a_pid_namespace():
    """nvidia-smi in a PID namespace of its own (a container given the GPU's
    own nodes, no slice) beside a libcuda process of that namespace: it is
    listed under the PID the namespace gives it (1), and a compute app of
    the host is not listed: GPU_GET_PIDS names each client's process with
    pid_vnr in the caller's namespace and skips those it does not see
    (gpu_rmapi.c, _gpuConvertPid; os-interface.c, os_find_ns_pid).  nvsim
    listed host PIDs to everyone.  Its memory: GPU_GET_PID_INFO matches the
    PID it is given with each client's ProcID, the host tgid
    (gpuFindClientInfoWithPidIterator), so a namespace's PID finds no
    client and RM counts nothing."""
    host = Holder()
    h = CudaHolder(wrap=["unshare", "-m", "-p", "-f", "--mount-proc"])
    try:
        assert h.ns_pid == 1
        w = ["nsenter", "-t", str(h.pid), "-m", "-p", "-r", "-w"]
        rows = csv(smi("--query-compute-apps=pid,used_memory", "--format=csv", wrap=w).stdout)
        assert rows == [["1", mib(0)]], rows
        rows = csv(smi("--query-compute-apps=pid,used_memory", "--format=csv").stdout)
        st = read_state()
        assert sorted(rows) == sorted([[str(host.pid), mib(HOLD)],
                                       [str(h.pid), mib(st.pid_used(h.pid, 0))]]), rows
    finally:
        h.close()
        host.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
