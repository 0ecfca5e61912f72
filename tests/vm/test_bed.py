"""The VM test bed itself: the guest is what the harness promises."""
import os
import platform
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("VGPU_IN_VM") != "1",
                                reason="runs inside the VM test bed (make test-vm)")


def test_guest_runs_the_kernel_the_modules_are_built_for():
    assert platform.release() == os.environ["VGPU_KVER"]


def test_host_root_is_read_only_and_tmp_is_writable(tmp_path):
    repo = Path(os.environ["VGPU_REPO"])
    with pytest.raises(OSError):
        (repo / "vm-write-probe").write_text("x")
    (tmp_path / "probe").write_text("x")
    assert (tmp_path / "probe").read_text() == "x"


def test_runs_as_root_with_debugfs():
    assert os.geteuid() == 0
    assert Path("/sys/kernel/debug").is_dir() and any(Path("/sys/kernel/debug").iterdir())


def test_nvsim_is_loaded_when_asked():
    if os.environ.get("VGPU_LOAD_NVSIM") != "1":
        pytest.skip("nvsim not requested")
    assert Path("/sys/module/nvsim").is_dir()
    assert Path("/dev/nvidiactl").is_char_device()
