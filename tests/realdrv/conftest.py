"""The tests that run inside the VM on NVIDIA's own driver (595.45.04, no
GPU: the RM core and the UVM driver only), loaded by
`tools/vm/vm.py run --load-nvidia DIR` from what `python3 -m
tools.realdrv.build` made.  Outside that, every test here is skipped with
the reason.

Tests through vgpu.ko reuse tests/vm's fixtures (vgpu_fixtures: slices,
clients, the vgpu.ko leak check after every test); nvsim's own leak check
(tests/vm/conftest.py) does not apply here.  A slice needs a GPU, and the
driver has none: the slices here name minor 0, whose node this conftest
makes as nvidia-modprobe would on a node with a GPU.  Opening it gets the
driver's own refusal (test_through_vgpu.py says which); everything on the
slice's nvidiactl and nvidia-uvm reaches NVIDIA's code.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

# tests/vm's helpers (vgpu_fixtures) are imported by their top-level names:
# pytest's pythonpath (pyproject.toml) puts tests/vm on sys.path

NV_MAJOR = 195


def _skip_reason() -> str | None:
    if os.environ.get("VGPU_IN_VM") != "1":
        return "runs only in the VM test bed (tools/vm/vm.py run --load-nvidia DIR)"
    if not Path("/sys/module/nvidia").exists():
        return "NVIDIA's nvidia.ko is not loaded (tools/vm/vm.py run --load-nvidia DIR)"
    return None


def pytest_collection_modifyitems(config, items):
    why = _skip_reason()
    for item in items:
        if why:
            item.add_marker(pytest.mark.skip(reason=why))
        elif "make_slice" in getattr(item, "fixturenames", ()) and \
                not Path("/sys/module/vgpu").exists():
            item.add_marker(pytest.mark.skip(
                reason="vgpu.ko not loaded (--load-vgpu --vgpu-ko build/realdrv/kmod/vgpu/vgpu.ko)"))


@pytest.fixture(scope="session", autouse=True)
def gpu0_node():
    """/dev/nvidia0 (195:0), for the slices' GPU 0, if the run is in the VM."""
    node = Path("/dev/nvidia0")
    if _skip_reason() is None and not node.exists():
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(NV_MAJOR, 0))
    yield
