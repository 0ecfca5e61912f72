"""NVIDIA's libcuda (535.261.03) through a vgpu.ko slice: cuInit and the
device queries, with cuDeviceTotalMem the slice's quota, cuCtxCreate with
the same answers as on nvsim directly (test_cuda.py), and the driver-API
sequence to cuCtxDestroy with the slice's quota figures: cuMemGetInfo's
total is the quota and cuMemAlloc fails CUDA_ERROR_OUT_OF_MEMORY at it.

nvsim is reloaded as one GH100 presenting 535.261.03 (test_cuda.py) with
vgpu.ko loaded over it for this module, so it runs in the VM group that
starts without vgpu.ko:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_cuda_slice.py

libcuda opens /dev/nvidiactl, /dev/nvidia0 and /dev/nvidia-uvm by path,
so the child runs in a private mount namespace (unshare -m) with the
slice's nodes bound over them, as the OCI hook binds them into a container:
from a vgpu.ko "vgpudev" mount of the slice, whose nodes open as vgpu.ko's
minors and stat as NVIDIA's (195, 255) and (195, 0), which libcuda checks
(docs/containers.md, "NVIDIA's device numbers"; with the nodes' own vgpu.ko
numbers cuInit fails, CUDA_ERROR_OPERATING_SYSTEM).  /proc/driver/nvidia/params
says "ModifyDeviceFiles: 0", as vgpufs's view does in a container.
"""

from __future__ import annotations

import json
import subprocess
import tempfile

import pytest

import nvsim_reload
from cuda_lib import in_slice, libcuda_missing, popen_cuda, run_cuda
from test_cuda import (DEVICE_QUERIES, GH100, IPC_EXPORTER, IPC_IMPORTER, IPC_SIZE,
                       assert_ctx_create_answers, ctx_create_calls, ipc_body, ipc_finish,
                       ipc_step, sequence_body)
from cuda_lib import control_status

MiB = 1 << 20
QUOTA = 512 * MiB
SLICE = 4242


def _reason() -> str | None:
    return nvsim_reload.skip_reason() or libcuda_missing()


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


@pytest.fixture(scope="module")
def slice_dir():
    """nvsim as GH100/535.261.03, vgpu.ko over it, one slice of QUOTA."""
    from vgpu.vgpuko.client import VgpuKernel
    from polling import wait_until
    from pathlib import Path

    with nvsim_reload.reloaded(GH100):
        ko = nvsim_reload.ko_path("VGPU_VGPU_KO", "kmod/vgpu/vgpu.ko")
        r = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        k = VgpuKernel(timeout=20)
        d = Path(tempfile.mkdtemp(prefix="vgpudev-"))
        try:
            k.slice_new(SLICE, gpus=[(0, QUOTA)])
            assert wait_until(Path(f"/dev/vgpu/{SLICE}/nvidiactl").exists, 5.0)
            subprocess.run(["mount", "-t", "vgpudev", "-o", f"slice={SLICE}", "none", str(d)],
                           check=True)
            try:
                yield d
            finally:
                subprocess.run(["umount", str(d)], check=True)
            k.slice_del(SLICE, force=True)
        finally:
            d.rmdir()
            k.close()
            subprocess.run(["rmmod", "vgpu"], check=True)


def test_cuinit_and_device_queries_in_a_slice(slice_dir):
    r = run_cuda(DEVICE_QUERIES, argv_prefix=in_slice(slice_dir))
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["count"] == 1
    assert out["name"] == "NVIDIA nvsim H100"
    # The slice's quota, not the GPU's 16 GiB (FB_GET_INFO rewritten).
    assert out["total"] == QUOTA
    assert (out["ccMajor"], out["ccMinor"]) == (9, 0)
    assert out["multiprocessors"] == 144
    # As on nvsim alone (test_cuda.py): CUDA does not offer dma-buf export,
    # which vgpu.ko refuses (docs/mediator.md, "GPUDirect RDMA").
    assert out["dmaBuf"] == 0


def test_ctx_create_in_a_slice(slice_dir, tmp_path):
    """The same answers through vgpu.ko: ACQUIRE/RELEASE_COMPUTE_MODE_
    RESERVATION and the CUDA performance limit (0x809909) are vgpu.ko's own
    NV_OK (virtualised: GPU-wide switches), NVC36F_CTRL_GET_CLASS_ENGINEID
    is forwarded, and the OS event allocated through the slice's GPU node
    reaches the driver."""
    ctx, lines = ctx_create_calls(tmp_path, argv_prefix=in_slice(slice_dir))
    assert_ctx_create_answers(lines)
    assert ctx == 0
    assert set(control_status(lines, 0x809909)) == {"0"}
    assert control_status(lines, 0x20800146) == ["0"]


def test_driver_api_sequence_in_a_slice(slice_dir):
    chunk = 2 * MiB
    r = run_cuda(sequence_body(chunk), argv_prefix=in_slice(slice_dir))
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = json.loads(r.stdout.splitlines()[-1])
    # The slice's quota is the total; what the context itself took (its
    # channels, context buffers) is charged to the slice, so free is less.
    assert out["total"] == QUOTA and 0 < out["free"] < QUOTA
    # CUDA_ERROR_OUT_OF_MEMORY at the quota: the allocations fill what was
    # free to within one 2 MiB piece, never beyond the quota.
    assert out["alloc_error"] == 2
    assert out["free"] - chunk < out["allocated"] <= out["free"]
    assert out["copied"]
    assert all(c[1] == 0 for c in out["calls"]), out["calls"]
    assert out["calls"][-1] == ["cuCtxDestroy_v2", 0]


# CUDA IPC: two slices besides SLICE, each holding two contexts' memory
# (about 480 MiB each through a slice) and the exported allocation.
IPC_SLICE, OTHER_SLICE = 4243, 4244


@pytest.fixture(scope="module")
def ipc_slices(slice_dir):
    """(IPC_SLICE's vgpudev directory, OTHER_SLICE's, the netlink client)."""
    from vgpu.vgpuko.client import VgpuKernel
    from polling import wait_until
    from pathlib import Path

    k = VgpuKernel(timeout=20)
    made, dirs = [], []
    try:
        for sid in (IPC_SLICE, OTHER_SLICE):
            k.slice_new(sid, gpus=[(0, 2048 * MiB)])
            made.append(sid)
            assert wait_until(Path(f"/dev/vgpu/{sid}/nvidiactl").exists, 5.0)
            d = Path(tempfile.mkdtemp(prefix="vgpudev-"))
            subprocess.run(["mount", "-t", "vgpudev", "-o", f"slice={sid}", "none", str(d)],
                           check=True)
            dirs.append(d)
        yield dirs[0], dirs[1], k
    finally:
        for d in dirs:
            subprocess.run(["umount", str(d)], check=True)
            d.rmdir()
        for sid in made:
            k.slice_del(sid, force=True)
        k.close()


def _used(k, sid: int) -> int:
    return k.slice_get(sid).gpu(0).mem_used


def test_ipc_within_a_slice(ipc_slices):
    """Both processes in one slice: the importer reads the exporter's
    pattern; the exported allocation's charge stays with the slice after the
    exporter's cuMemFree while the importer holds it (docs/mediator.md, Open
    item 8), and goes when it closes the handle."""
    d, _, k = ipc_slices
    a = popen_cuda(ipc_body(IPC_EXPORTER), argv_prefix=in_slice(d))
    b = None
    try:
        handle = ipc_step(a, None)["handle"]
        b = popen_cuda(ipc_body(IPC_IMPORTER), argv_prefix=in_slice(d))
        got = ipc_step(b, handle)
        assert got["open"] == 0, got
        assert got["same"]
        held = _used(k, IPC_SLICE)
        assert ipc_step(a)["calls"][-1] == ["cuMemFree_v2", 0]
        # The exporter freed its allocation: the importer still holds it,
        # and the slice is still charged for it.
        assert _used(k, IPC_SLICE) == held
        assert ipc_step(b)["calls"][-1] == ["cuIpcCloseMemHandle", 0]
        # The last importer closed it: the charge went back.
        assert _used(k, IPC_SLICE) == held - IPC_SIZE
        assert ipc_step(b)["done"]
        assert ipc_step(a)["done"]
    finally:
        for p in (a, b):
            if p is not None:
                ipc_finish(p)
    assert _used(k, IPC_SLICE) == 0


def test_ipc_from_another_slice_is_refused(ipc_slices):
    """A process of another slice cannot open the handle
    (CUDA_ERROR_NOT_PERMITTED), and nothing stays charged to either slice."""
    d, other, k = ipc_slices
    a = popen_cuda(ipc_body(IPC_EXPORTER), argv_prefix=in_slice(d))
    c = None
    try:
        handle = ipc_step(a, None)["handle"]
        c = popen_cuda(ipc_body(IPC_IMPORTER), argv_prefix=in_slice(other))
        got = ipc_step(c, handle)
        # vgpu.ko refuses the dup (the source is not in the caller's slice,
        # NV_ERR_INSUFFICIENT_PERMISSIONS): CUDA_ERROR_NOT_PERMITTED (800).
        assert got["open"] == 800 and got["done"], got
        assert ipc_step(a)["calls"][-1] == ["cuMemFree_v2", 0]
        assert ipc_step(a)["done"]
    finally:
        for p in (a, c):
            if p is not None:
                ipc_finish(p)
    assert _used(k, IPC_SLICE) == 0 and _used(k, OTHER_SLICE) == 0
