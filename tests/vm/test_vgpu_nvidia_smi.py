"""NVIDIA's nvidia-smi and libnvidia-ml 535.261.03 through a vgpu slice
(docs/nvml.md, "Through a slice"): a 4 GiB slice of a 16 GiB nvsim GPU.

    tools/vm/vm.py run --load-nvsim --load-vgpu \\
        --nvsim-params "num_gpus=2 fb_size=17179869184 driver_version=535.261.03" \\
        -- .venv/bin/python -m pytest -q tests/vm/test_vgpu_nvidia_smi.py

"Inside" is a private mount namespace with the slice's nodes bind-mounted
over /dev/nvidiactl, /dev/nvidia0 and /dev/nvidia-uvm, as the OCI hook
mounts them into a container: from a vgpu.ko "vgpudev" mount of the slice,
whose nodes open as vgpu.ko's minors and stat as NVIDIA's 195:255 and
195:N, which NVML requires (docs/containers.md, "NVIDIA's device numbers").
test_nvml_refuses_the_slices_device_numbers binds the slice's devtmpfs
nodes instead (vgpu.ko's own numbers), which NVML refuses.

The *_cuda_* tests run NVIDIA's libcuda as the slices' compute apps, each
in a mount and PID namespace of its own (as a container has), and
nvidia-smi/pynvml inside one of them (nsenter): they need nvsim's
fb_backing=1 (test_nvidia_smi.py, make test's test-vm-nvml part).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from test_nvidia_smi import (HOLD, MiB, PY, RELEASE, CudaHolder, Holder, csv,  # noqa: F401
                             mib, needs_cuda, nvidia_userspace, pynvml_query, read_state,
                             smi, smi_q_processes, smi_rows)
from test_nvidia_smi import pytestmark as _release_mark
from vgpu_fixtures import GiB, kern, make_slice, vgpu_leak_check  # noqa: F401

LIMIT = 4 * GiB

pytestmark = _release_mark


def inside(prefix: str) -> list[str]:
    """The command prefix that runs a program with the nodes in ``prefix``
    as /dev/nvidia* (a private mount namespace)."""
    binds = "".join(f"mount --bind {prefix}/{n} /dev/{n}; " for n in sorted(os.listdir(prefix)))
    return ["unshare", "-m", "sh", "-c", binds + 'exec "$@"', "sh"]


class DevSlice:
    """The slice with ``prefix`` its vgpudev mount (what the hook binds)."""

    def __init__(self, sl, prefix: str):
        self.sl, self.prefix = sl, prefix

    def used(self, index: int = 0) -> int:
        return self.sl.used(index)


@pytest.fixture
def slice4(make_slice, tmp_path):
    sl = make_slice(gpus=[(0, LIMIT)])
    d = tmp_path / "vgpudev"
    d.mkdir()
    subprocess.run(["mount", "-t", "vgpudev", "-o", f"slice={sl.id}", "none", str(d)],
                   check=True)
    h = Holder(sl.prefix, 0, HOLD)
    out = Holder("/dev", 0, 64 * MiB)       # a process outside the slice, same GPU
    yield DevSlice(sl, str(d)), h, out
    h.close()
    out.close()
    subprocess.run(["umount", str(d)], check=True)


def test_nvml_refuses_the_slices_device_numbers(slice4):
    """The slice's devtmpfs nodes (vgpu.ko's device numbers) instead of
    vgpudev's: NVML stats /dev/nvidiactl, finds vgpu.ko's numbers, and
    stops before any ioctl (docs/nvml.md)."""
    ds, _, _ = slice4
    exe, lib = nvidia_userspace()
    r = subprocess.run([*inside(ds.sl.prefix), str(exe), "-L"], capture_output=True,
                       text=True, env=dict(os.environ, LD_LIBRARY_PATH=str(lib)), timeout=300)
    assert r.returncode != 0
    assert "GPU access blocked by the operating system" in r.stdout + r.stderr


def test_slice_smi_shows_one_gpu_of_the_slices_size(slice4):
    sl, _, _ = slice4
    out = smi(wrap=inside(sl.prefix)).stdout
    assert out.count("NVIDIA nvsim H100") == 1
    assert f"{sl.used(0) // MiB}MiB / {LIMIT // MiB}MiB" in out.replace("/  ", "/ "), out
    assert sl.used(0) == HOLD


def test_slice_query_gpu(slice4):
    sl, _, _ = slice4
    rows = csv(smi("--query-gpu=name,memory.total,memory.used", "--format=csv",
                   wrap=inside(sl.prefix)).stdout)
    assert rows == [["NVIDIA nvsim H100", mib(LIMIT), mib(sl.used(0))]]


def test_slice_pynvml_memory(slice4):
    sl, h, _ = slice4
    q = pynvml_query(wrap=inside(sl.prefix))
    assert q["driver"] == RELEASE
    assert len(q["gpus"]) == 1
    g = q["gpus"][0]
    assert (g["total"], g["used"], g["free"]) == (LIMIT, sl.used(0), LIMIT - sl.used(0))
    # nvmlDeviceGetComputeRunningProcesses: the slice's process only (the
    # closed 0x20808161 NVML asks first is answered NV_ERR_NOT_SUPPORTED)
    assert g["procs"] == [[h.pid, HOLD]]


def test_slice_compute_apps_are_the_slices(slice4):
    """NVML asks the closed control 0x20808161 before GPU_GET_PIDS; no class
    of 535.261.03's RM exports it, so vgpu.ko answers NV_ERR_NOT_SUPPORTED
    as the driver does (NVML goes on), and lists the slice's process."""
    sl, h, _ = slice4
    rows = csv(smi("--query-compute-apps=pid,used_memory", "--format=csv",
                   wrap=inside(sl.prefix)).stdout)
    assert rows == [[str(h.pid), mib(HOLD)]]


def test_host_shows_each_slice_process_memory(slice4):
    """On the host (nvsim's own nodes) the slice's process is listed with
    its memory, beside the process outside the slice."""
    _, h, out = slice4
    rows = csv(smi("--query-compute-apps=pid,used_memory", "--format=csv").stdout)
    assert sorted(rows) == sorted([[str(h.pid), mib(HOLD)], [str(out.pid), mib(64 * MiB)]])


# ------------------------------------------------ real CUDA processes

CUDA_LIMIT = 2 * GiB
OTHER = 128 * MiB


def slice_ns(prefix: str) -> list[str]:
    """A new mount and PID namespace (as a container's) with the nodes of
    the vgpudev mount ``prefix`` as /dev/nvidia*, its own /proc, and
    /proc/driver/nvidia/params saying "ModifyDeviceFiles: 0" as vgpufs's
    view does (libcuda reads it: docs/cuda.md)."""
    binds = "".join(f"mount --bind {prefix}/{n} /dev/{n} && " for n in sorted(os.listdir(prefix)))
    script = (binds + "mount -t tmpfs none /proc/driver && mkdir /proc/driver/nvidia && "
              "printf 'ModifyDeviceFiles: 0\\n' > /proc/driver/nvidia/params && exec \"$@\"")
    return ["unshare", "-m", "-p", "-f", "--mount-proc", "sh", "-c", script, "sh"]


def nsenter(h: CudaHolder) -> list[str]:
    """Run in ``h``'s mount and PID namespaces (root and cwd as it sees them)."""
    return ["nsenter", "-t", str(h.pid), "-m", "-p", "-r", "-w"]


@pytest.fixture
def cuda_slices(make_slice, tmp_path):
    """Two slices of CUDA_LIMIT on GPU 0, each with a libcuda process in a
    namespace of its own: (slice A, A's process, slice B, B's process);
    A's holds HOLD of cuMemAlloc, B's OTHER."""
    made, holders = [], []
    try:
        for size in (HOLD, OTHER):
            sl = make_slice(gpus=[(0, CUDA_LIMIT)])
            d = tmp_path / f"vgpudev{sl.id}"
            d.mkdir()
            subprocess.run(["mount", "-t", "vgpudev", "-o", f"slice={sl.id}", "none", str(d)],
                           check=True)
            made.append((sl, d))
            holders.append(CudaHolder(size, wrap=slice_ns(str(d))))
        yield made[0][0], holders[0], made[1][0], holders[1]
    finally:
        for h in holders:
            h.close()
        for _, d in made:
            subprocess.run(["umount", str(d)], check=True)


@needs_cuda
def test_slice_cuda_process_inside(cuda_slices):
    """Inside slice A (A's process's namespaces): one GPU of A's quota and
    use, A's libcuda process under the PID its namespace gives it (1) with
    what nvsim charged it, and not B's process (also PID 1 in its own
    namespace, another charge): nvidia-smi's table, -q, --query-gpu,
    --query-compute-apps and pynvml."""
    a, ha, b, hb = cuda_slices
    st = read_state()
    charged, other = st.pid_used(ha.pid, 0), st.pid_used(hb.pid, 0)
    assert ha.ns_pid == hb.ns_pid == 1 and ha.pid != hb.pid
    # what each context and allocation took, charged to its slice
    assert charged > HOLD and other > OTHER and charged != other
    assert ha.out["total"] == CUDA_LIMIT and ha.out["free_ctx"] - ha.out["free"] == HOLD
    used = a.used(0)
    assert used >= charged and b.used(0) >= other
    w = nsenter(ha)

    out = smi(wrap=w).stdout
    assert out.count("NVIDIA nvsim H100") == 1
    assert f"{used // MiB}MiB / {CUDA_LIMIT // MiB}MiB" in out.replace("/  ", "/ "), out
    rows = smi_rows(out)
    assert [(r[3], r[4], r[-1]) for r in rows] == [("1", "C", f"{charged // MiB}MiB")], out
    assert smi_q_processes(smi("-q", wrap=w).stdout) == [(1, "C", charged // MiB)]

    rows = csv(smi("--query-gpu=memory.total,memory.used,utilization.gpu", "--format=csv",
                   wrap=w).stdout)
    assert rows == [[mib(CUDA_LIMIT), mib(used), "[N/A]"]]
    rows = csv(smi("--query-compute-apps=pid,used_memory", "--format=csv", wrap=w).stdout)
    assert rows == [["1", mib(charged)]]

    q = pynvml_query(wrap=w)
    assert len(q["gpus"]) == 1
    g = q["gpus"][0]
    assert (g["total"], g["used"], g["free"]) == (CUDA_LIMIT, used, CUDA_LIMIT - used)
    assert g["util"] == "Not Supported"
    assert g["procs"] == [[1, charged]]


@needs_cuda
def test_slice_cuda_processes_on_the_host(cuda_slices):
    """On the host (nvsim's own nodes): each slice's libcuda process under
    its host PID with what nvsim charged it, and the GPU's whole use."""
    _, ha, _, hb = cuda_slices
    st = read_state()
    want = sorted([[str(h.pid), mib(st.pid_used(h.pid, 0))] for h in (ha, hb)])
    assert csv(smi("--query-compute-apps=pid,used_memory", "--format=csv").stdout) == want
    out = smi().stdout
    assert sorted([r[3], r[-1]] for r in smi_rows(out)) == sorted(
        [str(h.pid), f"{st.pid_used(h.pid, 0) // MiB}MiB"] for h in (ha, hb)), out
    assert f"{st.fb_used(0) // MiB}MiB / " in out
