"""DKMS without NVIDIA's Module.symvers: kmod/nvidia-symvers.sh reads the
Module.symvers line of nvidia_get_rm_ops from a built module, and
kmod/dkms-build.sh, as `make install-dkms` installs it, builds vgpu.ko
against that line.

On nvsim.ko (which exports nvidia_get_rm_ops as nvidia.ko does) wherever
`make modules` has run; on NVIDIA's own nvidia.ko where tools/realdrv's
cache holds a build for the kernel (`make test-vm-real` makes it; without
it those tests skip and say so, and tests/realdrv/test_symvers.py checks
the same in the VM run, which always has it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.realdrv import build as realdrv

SCRIPT = ROOT / "kmod" / "nvidia-symvers.sh"
NVSIM = ROOT / "kmod" / "nvsim"
SYM = "nvidia_get_rm_ops"


def gen(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          **kw)


def symvers_line(path: Path, sym: str = SYM) -> list[str]:
    """A Module.symvers line's fields, the module path as its basename
    (the directory is where it was built)."""
    for ln in path.read_text().splitlines():
        f = ln.split("\t")
        if len(f) >= 4 and f[1] == sym:
            f[2] = os.path.basename(f[2])
            return f + [""] * (5 - len(f))
    raise AssertionError(f"{path} has no {sym}")


def fields(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    f = lines[0].split("\t")
    f[2] = os.path.basename(f[2])
    return f


@pytest.fixture(scope="module")
def nvsim_ko() -> Path:
    ko = NVSIM / "nvsim.ko"
    if not ko.is_file() or not (NVSIM / "Module.symvers").is_file():
        pytest.skip("nvsim.ko not built (make modules)")
    if not shutil.which("readelf"):
        pytest.skip("no readelf (binutils)")
    return ko


@pytest.fixture(scope="module")
def realdrv_dir() -> Path:
    d = realdrv.cached()
    if d is None:
        pytest.skip(f"no NVIDIA driver build in {realdrv.cache_root()} for this kernel "
                    "(`make test-vm-real` builds it; tests/realdrv/test_symvers.py runs there)")
    return d


# ------------------------------------------------------------------ nvidia-symvers.sh
def test_line_read_from_nvsim_ko_is_its_module_symvers_line(nvsim_ko):
    r = gen(nvsim_ko)
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout) == symvers_line(NVSIM / "Module.symvers")
    assert r.stdout.split("\t")[2] == str(nvsim_ko)[:-3]      # the module path, no .ko


@pytest.mark.parametrize("comp", [("xz", ".xz"), ("zstd", ".zst"), ("gzip", ".gz")])
def test_compressed_modules_give_the_same_line(nvsim_ko, tmp_path, comp):
    tool, ext = comp
    if not shutil.which(tool):
        pytest.skip(f"no {tool}")
    z = tmp_path / f"nvsim.ko{ext}"
    with open(z, "wb") as out:
        subprocess.run([tool, "-c", str(nvsim_ko)], stdout=out, check=True)
    r = gen(z)
    assert r.returncode == 0, r.stderr
    assert fields(r.stdout) == symvers_line(NVSIM / "Module.symvers")
    assert r.stdout.split("\t")[2] == str(tmp_path / "nvsim")


def test_absent_module_is_a_clear_error(tmp_path):
    r = gen(tmp_path / "nvidia.ko")
    assert r.returncode == 1 and r.stdout == ""
    assert f"{tmp_path}/nvidia.ko: no such module file" in r.stderr


def test_module_that_does_not_export_the_symbol_is_a_clear_error(nvsim_ko):
    r = gen(nvsim_ko, "no_such_export")
    assert r.returncode == 1 and r.stdout == ""
    assert f"{nvsim_ko} does not export no_such_export" in r.stderr


def test_no_crc_is_an_error_unless_the_kernel_has_no_modversions(nvsim_ko, tmp_path):
    """A module built without CONFIG_MODVERSIONS has no __crc_ symbols:
    such a kernel checks no CRCs, and -n writes 0x00000000."""
    ko = tmp_path / "nocrc.ko"
    subprocess.run(["objcopy", f"--strip-symbol=__crc_{SYM}", str(nvsim_ko), str(ko)],
                   check=True)
    r = gen(ko)
    assert r.returncode == 1 and f"has no CRC for {SYM}" in r.stderr, r.stderr
    r = gen("-n", ko)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\t")[0] == "0x00000000"


# ------------------------------------------------------------------ NVIDIA's nvidia.ko
def test_line_read_from_nvidia_ko_is_its_builds_module_symvers_line(realdrv_dir):
    r = gen(realdrv_dir / "nvidia.ko")
    assert r.returncode == 0, r.stderr
    got, want = fields(r.stdout), symvers_line(realdrv_dir / "Module.symvers")
    print(f"generated: {got}\nreal:      {want}")
    assert got == want


def test_dkms_build_links_vgpu_ko_against_the_line_of_nvidia_ko(realdrv_dir, tmp_path):
    """The DKMS tree `make install-dkms` stages, built by its dkms-build.sh
    with NVIDIA's nvidia.ko as the only source (no Module.symvers
    anywhere): vgpu.ko's __versions entry is the real build's CRC."""
    kver = realdrv_dir.name.split("-", 1)[1].rsplit("-", 1)[0]
    if not Path(f"/lib/modules/{kver}/build").exists():
        pytest.skip(f"no kernel headers for {kver}")
    dest = tmp_path / "dest"
    r = subprocess.run(["make", "-s", "install-dkms", f"DESTDIR={dest}"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (src,) = (dest / "usr" / "src").iterdir()
    assert not list(src.rglob("Module.symvers"))
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_SYMVERS"}
    env.update(NVIDIA_KO=str(realdrv_dir / "nvidia.ko"), MAKEFLAGS=f"-j{os.cpu_count() or 2}")
    r = subprocess.run(["sh", str(src / "dkms-build.sh"), kver], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"vgpu: building against {src}/nvidia.symvers" in r.stdout, r.stdout
    want = symvers_line(realdrv_dir / "Module.symvers")
    assert symvers_line(src / "nvidia.symvers") == want
    ko = src / "vgpu" / "vgpu.ko"
    v = subprocess.run(["modprobe", "--dump-modversions", str(ko)], capture_output=True,
                       text=True, check=True).stdout
    assert f"{want[0]}\t{SYM}" in v.splitlines(), v
    dep = subprocess.run(["modinfo", "-F", "depends", str(ko)], capture_output=True,
                         text=True).stdout.split(",")
    assert "nvidia" in [d.strip() for d in dep]


def test_dkms_build_without_nvidia_ko_says_what_to_do(tmp_path):
    """No nvidia.ko and no Module.symvers for the kernel: the message says
    to install the driver first and how to name one by hand."""
    if os.path.exists("/etc/vgpu/nvidia-symvers") or list(Path("/var/lib").glob("dkms/nvidia*")) \
            or list(Path("/usr/src").glob("nvidia-*")):
        pytest.skip("this machine has an NVIDIA DKMS tree or /etc/vgpu/nvidia-symvers")
    shutil.copy2(ROOT / "kmod" / "dkms-build.sh", tmp_path)
    shutil.copy2(SCRIPT, tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_SYMVERS", "NVIDIA_KO")}
    r = subprocess.run(["sh", str(tmp_path / "dkms-build.sh"), "0.0.0-none"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "no nvidia.ko installed for kernel 0.0.0-none" in r.stderr, r.stderr
    assert "NVIDIA_KO=" in r.stderr and "/etc/vgpu/nvidia-symvers" in r.stderr
