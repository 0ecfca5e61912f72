"""The tests that run inside the VM on NVIDIA's own 535.261.03 driver (no
GPU), with NVIDIA's own 535.261.03 user space (libcuda, NVML, nvidia-smi:
`make deps` unpacks Debian's packages into $VGPU_CACHE, tools/nvuser.py).
The VM loads the driver with `tools/vm/vm.py run --load-nvidia DIR` from
what `python3 -m tools.realdrv.build --release 535.261.03` made, and
vgpu.ko built against it (--vgpu-out).  Outside that, every test here is
skipped with the reason.

As in tests/realdrv, slices name GPU minor 0, whose node this conftest
makes as nvidia-modprobe would (the driver has no GPU).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

# tests/vm's helpers (vgpu_fixtures) are imported by their top-level names:
# pytest's pythonpath (pyproject.toml) puts tests/vm on sys.path

NV_MAJOR = 195
RELEASE = "535.261.03"


def _skip_reason() -> str | None:
    if os.environ.get("VGPU_IN_VM") != "1":
        return "runs only in the VM test bed (tools/vm/vm.py run --load-nvidia DIR)"
    v = Path("/sys/module/nvidia/version")
    if not v.exists():
        return "NVIDIA's nvidia.ko is not loaded (tools/vm/vm.py run --load-nvidia DIR)"
    if v.read_text().strip() != RELEASE:
        return f"the loaded nvidia.ko is {v.read_text().strip()}, not {RELEASE}"
    return None


def pytest_collection_modifyitems(config, items):
    why = _skip_reason()
    for item in items:
        if why:
            item.add_marker(pytest.mark.skip(reason=why))
        elif "make_slice" in getattr(item, "fixturenames", ()) and \
                not Path("/sys/module/vgpu").exists():
            item.add_marker(pytest.mark.skip(
                reason="vgpu.ko not loaded (--load-vgpu --vgpu-ko build/realdrv535/kmod/vgpu/vgpu.ko)"))


@pytest.fixture(scope="session", autouse=True)
def gpu0_node():
    """/dev/nvidia0 (195:0), for the slices' GPU 0, if the run is in the VM."""
    node = Path("/dev/nvidia0")
    if _skip_reason() is None and not node.exists():
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(NV_MAJOR, 0))
    yield
