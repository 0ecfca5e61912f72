"""vgpu.ko as DKMS builds it on a node, loaded over NVIDIA's nvidia.ko.

`make test-vm-real` builds the vgpu.ko it loads (tools/realdrv/build.py's
build_vgpu) with kmod/dkms-build.sh and the nvidia_get_rm_ops line that
kmod/nvidia-symvers.sh reads from the driver's nvidia.ko, never from the
driver build's Module.symvers (a node has none once DKMS has cleaned up).
Here, in that run: the line read from nvidia.ko is the build's own
Module.symvers line, the vgpu.ko loaded was linked against it (its
__versions CRC), and the kernel took it over nvidia.ko (a CRC mismatch is
refused at load: "disagrees about version of symbol").
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYM = "nvidia_get_rm_ops"


def line(text: str) -> list[str]:
    for ln in text.splitlines():
        f = ln.split("\t")
        if len(f) >= 4 and f[1] == SYM:
            f[2] = os.path.basename(f[2])
            return f + [""] * (5 - len(f))
    raise AssertionError(f"no {SYM} in {text!r}")


@pytest.fixture(scope="module")
def drv() -> Path:
    d = os.environ.get("VGPU_LOAD_NVIDIA", "")
    if not d:
        pytest.skip("not the run on NVIDIA's driver (tools/vm/vm.py run --load-nvidia DIR)")
    return Path(d)


def test_line_read_from_the_loaded_nvidia_ko_is_its_builds_line(drv):
    r = subprocess.run(["sh", str(ROOT / "kmod" / "nvidia-symvers.sh"), str(drv / "nvidia.ko")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert line(r.stdout) == line((drv / "Module.symvers").read_text())


def test_loaded_vgpu_ko_was_built_by_dkms_build_against_that_line_and_loaded(drv):
    ko = Path(os.environ.get("VGPU_VGPU_KO", ""))
    if not ko.is_absolute():
        ko = ROOT / ko
    generated = ko.parent.parent / "nvidia.symvers"      # dkms-build.sh's, beside vgpu/
    assert generated.is_file(), f"{ko} was not built by dkms-build.sh from nvidia.ko"
    want = line((drv / "Module.symvers").read_text())
    assert line(generated.read_text()) == want
    v = subprocess.run(["modprobe", "--dump-modversions", str(ko)], capture_output=True,
                       text=True, check=True).stdout
    assert f"{want[0]}\t{SYM}" in v.splitlines(), v
    # loaded, and over nvidia.ko: the kernel recorded vgpu as its user
    assert Path("/sys/module/vgpu").is_dir()
    assert Path("/sys/module/nvidia/holders/vgpu").exists()
