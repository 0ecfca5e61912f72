"""tools/realdrv: the one test-only patch to NVIDIA's driver, and where the
build looks for the kernel's headers."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.nvgen import vendor
from tools.realdrv import build

VENDOR = Path(os.environ.get("NVGEN_VENDOR", ROOT.parent / "shared" / "vendor"))


def test_the_patch_changes_nv_c_only_and_only_the_zero_gpu_condition():
    text = build.PATCH.read_text()
    files = re.findall(r"^\+\+\+ b/(\S+)", text, re.M)
    assert files == ["kernel-open/nvidia/nv.c"]
    added = [ln[1:] for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln[1:] for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    code = [ln for ln in added if ln.strip() and not ln.strip().startswith(("/*", "*"))]
    assert code == ["static int vgpu_test_no_gpu = 0;",
                    "module_param(vgpu_test_no_gpu, int, 0444);",
                    "    const NvBool is_nvswitch_present = os_is_nvswitch_present() || vgpu_test_no_gpu;"]
    assert removed == ["    const NvBool is_nvswitch_present = os_is_nvswitch_present();"]


def test_the_patch_applies_to_the_vendor_tree(tmp_path):
    archive = VENDOR / vendor.TREE_ARCHIVE
    if not archive.is_file():
        pytest.skip(f"vendor archive not here: {archive}")
    with tarfile.open(archive, "r:xz") as tar:
        member = tar.getmember("kernel-open/nvidia/nv.c")
        tar.extractall(tmp_path, members=[member],
                       **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    r = subprocess.run(["patch", "-p1", "--dry-run", "--forward", "-i", str(build.PATCH)],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_debian_headers_are_the_common_and_the_arch_directory():
    kvers = [p.name for p in Path("/lib/modules").iterdir()] if Path("/lib/modules").is_dir() else []
    kver = next((k for k in kvers if Path(f"/usr/src/linux-headers-{k}").is_dir()), None)
    if kver is None:
        pytest.skip("no kernel headers under /usr/src")
    src, out = build.header_dirs(kver)
    assert out == Path(f"/usr/src/linux-headers-{kver}")
    if kver.endswith("-amd64"):
        assert src == Path(f"/usr/src/linux-headers-{kver[:-len('-amd64')]}-common")


def test_the_cache_key_follows_the_patch(tmp_path, monkeypatch):
    archive = tmp_path / "a.tar.xz"
    archive.write_bytes(b"archive")
    k1 = build.key(archive)
    patch = tmp_path / "p.patch"
    patch.write_text(build.PATCH.read_text() + "\n")
    monkeypatch.setattr(build, "PATCH", patch)
    assert build.key(archive) != k1


def test_535s_patches_are_the_zero_gpu_one_and_where_needed_the_resize_one(tmp_path):
    """535.261.03: its own zero-GPU patch (the same three lines as 595's),
    and nv-pci.c's pci_resize_resource given a fourth argument only where
    the kernel's pci.h has exclude_bars (Debian's 6.1 by backport)."""
    zero, resize = build.ZERO_GPU["535.261.03"], build.KERNEL_PATCHES["535.261.03"][0][0]
    code = [ln[1:] for ln in zero.read_text().splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
            and ln[1:].strip() and not ln[1:].strip().startswith(("/*", "*"))]
    assert code == ["static int vgpu_test_no_gpu = 0;",
                    "module_param(vgpu_test_no_gpu, int, 0444);",
                    "    const NvBool is_nvswitch_present = os_is_nvswitch_present() || vgpu_test_no_gpu;"]
    assert re.findall(r"^\+\+\+ b/(\S+)", resize.read_text(), re.M) == ["kernel-open/nvidia/nv-pci.c"]
    kvers = [p.name for p in Path("/lib/modules").iterdir()] if Path("/lib/modules").is_dir() else []
    for kver in kvers:
        try:
            src, _ = build.header_dirs(kver)
        except SystemExit:
            continue
        has = "exclude_bars" in (src / "include/linux/pci.h").read_text(errors="replace")
        assert build.patches("535.261.03", kver) == [zero] + ([resize] if has else [])
        assert build.patches("595.45.04", kver) == [build.PATCH]


def test_535s_patches_apply_to_its_vendored_tree(tmp_path):
    archive = VENDOR / build.archive_name("535.261.03")
    if not archive.is_file():
        pytest.skip(f"vendor archive not here: {archive}")
    want = ["kernel-open/nvidia/nv.c", "kernel-open/nvidia/nv-pci.c"]
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(tmp_path, members=[tar.getmember(m) for m in want],
                       **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    for patch in (build.ZERO_GPU["535.261.03"], build.KERNEL_PATCHES["535.261.03"][0][0]):
        r = subprocess.run(["patch", "-p1", "--dry-run", "--forward", "-i", str(patch)],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
