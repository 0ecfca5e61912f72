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

from cuda_lib import nvidia_userspace

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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
