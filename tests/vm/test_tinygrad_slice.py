"""tinygrad's NV backend through a slice, inside a container that
containerd starts through vgpu-runtime and the OCI hook, as on a node:
vgpud makes the slice from the container's annotations and the hook
mounts the slice's nodes as the container's /dev/nvidia*.

nvsim is reloaded as one GA102 with fb_backing=1 (test_tinygrad.py says
why), vgpu.ko loaded over it, for this module; so it runs in the VM group
that starts without vgpu.ko:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_tinygrad_slice.py

What it shows: Device['NV'] initialises and a buffer copy round-trips
through vgpu.ko (every RM and UVM call of tinygrad's mediated: OS-descriptor
memory, MM_INITIALIZE answered, UVM_REGISTER_GPU without a client,
UVM_REGISTER_CHANNEL, the SM debugger session on its own compute object),
allocations within the slice's quota work and one beyond it raises
tinygrad's own MemoryError (the driver's NV_ERR_NO_MEMORY, from vgpu.ko's
quota).  tinygrad 0.14.0's NV backend never asks the driver for the device's
memory size, so there is no reported size of tinygrad's to compare; what the
container's driver files report is the slice's (its /proc/driver/nvidia
information, printed and checked here as in test_containers.py).
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from container_support import (HAVE_CONTAINERD, SHOW, containerd, daemon, runc,  # noqa: F401
                             video_memory)
import nvsim_reload

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
MiB = 1 << 20
QUOTA = 64 * MiB


def _reason() -> str | None:
    if nvsim_reload.skip_reason():
        return nvsim_reload.skip_reason()
    if not HAVE_CONTAINERD:
        return "needs containerd and ctr"
    return None


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


@pytest.fixture(scope="module", autouse=True)
def ga102_with_vgpu():
    """nvsim as one GA102 with vgpu.ko over it; both back as they were after."""
    with nvsim_reload.reloaded(nvsim_reload.GA102):
        ko = nvsim_reload.ko_path("VGPU_VGPU_KO", "kmod/vgpu/vgpu.ko")
        r = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        yield
        subprocess.run(["rmmod", "vgpu"], check=True)


WORKLOAD = textwrap.dedent(f"""
    from tinygrad import Device, Tensor
    dev = Device['NV']
    print('arch', dev.arch, flush=True)
    data = [(i * 2654435761) % 2**31 for i in range(5000)]
    assert Tensor(data, device='NV').realize().tolist() == data
    print('roundtrip ok', flush=True)
    within = dev.allocator.alloc(8 << 20)
    print('within quota ok', flush=True)
    try:
        dev.allocator.alloc({2 * QUOTA})
    except MemoryError as e:
        print('beyond quota MemoryError', e, '| cause:', e.__cause__, flush=True)
    else:
        print('beyond quota allocated', flush=True)
    dev.allocator.free(within, 8 << 20)
""")


def test_tinygrad_in_a_containerd_container_with_a_slice(containerd, daemon):
    script = f"{SHOW}exec {PY} -c '{_quote(WORKLOAD)}'"
    r = containerd.run("tg-a", script,
                       {"vgpu.io/memory": f"{QUOTA // MiB}MiB", "vgpu.io/gpus": "0"},
                       detach=False, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{out[-6000:]}\n{daemon.log()}"
    assert video_memory(out) == [f"{QUOTA // MiB} MB"], out
    assert "arch sm_86" in out and "roundtrip ok" in out, out
    assert "within quota ok" in out, out
    assert "beyond quota MemoryError" in out and "NV_ERR_NO_MEMORY" in out, out
    # the container exited: its slice went with it
    assert not daemon.slices()


def _quote(s: str) -> str:
    """s inside single quotes for sh."""
    return s.replace("'", "'\"'\"'")
