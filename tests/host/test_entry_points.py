"""The console scripts exist, answer --help, and refuse to pretend to work."""
import subprocess
import sys

import pytest

ENTRY_POINTS = ["vgpu.daemon", "vgpu.ctl", "vgpu.hook"]
# vgpuctl and vgpud are implemented (issue 4): their usage errors are tested in
# test_ctl.py and test_api.py (vgpud --check-config / --help).
PLACEHOLDERS = [m for m in ENTRY_POINTS if m not in ("vgpu.ctl", "vgpu.daemon")]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_exits_zero(module):
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    assert "usage:" in r.stdout


@pytest.mark.parametrize("module", PLACEHOLDERS)
def test_placeholder_says_not_implemented(module):
    r = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True)
    assert r.returncode == 2
    assert "not implemented" in r.stderr
