"""The tests that run inside the VM on NVIDIA's own driver (595.45.04, no
GPU: the RM core and the UVM driver only), loaded by
`tools/vm/vm.py run --load-nvidia DIR` from what `python3 -m
tools.realdrv.build` made.  Outside that, every test here is skipped with
the reason."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_collection_modifyitems(config, items):
    why = None
    if os.environ.get("VGPU_IN_VM") != "1":
        why = "runs only in the VM test bed (tools/vm/vm.py run --load-nvidia DIR)"
    elif not Path("/sys/module/nvidia").exists():
        why = "NVIDIA's nvidia.ko is not loaded (tools/vm/vm.py run --load-nvidia DIR)"
    if why:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=why))
