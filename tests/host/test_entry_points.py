"""Every console script answers --help with a usage text and status 0.

Their behaviour is tested elsewhere: vgpud in test_api.py, vgpuctl in
test_ctl.py, the OCI hook and vgpu-runtime in test_hook.py, vgpu-nvclient in
test_nvclient_unit.py and the VM suite, vgpu-replay in test_replay.py.
"""
import subprocess
import sys

import pytest

ENTRY_POINTS = ["vgpu.daemon.main", "vgpu.cli.ctl", "vgpu.cli.hook", "vgpu.cli.runtime", "vgpu.abi.nvclient", "vgpu.abi.replay"]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_exits_zero(module):
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout.lower()
