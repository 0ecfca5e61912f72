"""vgpu.cli.hook.sysmask: the RDMA adapters a slice was not given are
hidden from its container's /sys (docs/rdma.md).  The plan is read from a
sysfs-shaped tree of two PCI adapters and two soft ones; it is carried out
in a child with a private mount namespace (``unshare -m``), on a rootfs
whose /sys is a bind of that tree, so nothing outlives the test."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vgpu.cli.hook import sysmask

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PCI0 = "devices/pci0000:00/0000:00:01.0/0000:3b:00.0"
PCI1 = "devices/pci0000:00/0000:00:02.0/0000:3c:00.0"
VIRT = "devices/virtual"


def fake_sysfs(root) -> str:
    """mlx5_0 (uverbs0, umad0) and mlx5_1 (uverbs1, umad1) on two PCI
    functions, rxe0 (uverbs2) and rxe1 (uverbs3) virtual; the class
    directories' symlinks relative, as sysfs makes them."""
    sysd = root / "sys"
    devs = {  # class, entry, its directory, its adapter
        ("infiniband", "mlx5_0"): (f"{PCI0}/infiniband/mlx5_0", None),
        ("infiniband", "mlx5_1"): (f"{PCI1}/infiniband/mlx5_1", None),
        ("infiniband", "rxe0"): (f"{VIRT}/infiniband/rxe0", None),
        ("infiniband", "rxe1"): (f"{VIRT}/infiniband/rxe1", None),
        ("infiniband_verbs", "uverbs0"): (f"{PCI0}/infiniband_verbs/uverbs0", "mlx5_0"),
        ("infiniband_verbs", "uverbs1"): (f"{PCI1}/infiniband_verbs/uverbs1", "mlx5_1"),
        ("infiniband_verbs", "uverbs2"): (f"{VIRT}/infiniband_verbs/uverbs2", "rxe0"),
        ("infiniband_verbs", "uverbs3"): (f"{VIRT}/infiniband_verbs/uverbs3", "rxe1"),
        ("infiniband_mad", "umad0"): (f"{PCI0}/infiniband_mad/umad0", "mlx5_0"),
        ("infiniband_mad", "umad1"): (f"{PCI1}/infiniband_mad/umad1", "mlx5_1"),
    }
    for (cls, name), (rel, ibdev) in devs.items():
        d = sysd / rel
        d.mkdir(parents=True)
        (d / "node_guid").write_text(f"guid-of-{name}\n")
        if ibdev:
            (d / "ibdev").write_text(ibdev + "\n")
        c = sysd / "class" / cls
        c.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(d, c), c / name)
    (sysd / "class" / "infiniband_verbs" / "abi_version").write_text("6\n")
    (sysd / "class" / "infiniband_mad" / "abi_version").write_text("5\n")
    return str(sysd)


def test_the_plan_keeps_the_slices_adapter_and_hides_the_others(tmp_path):
    p = sysmask.plan("mlx5_0", fake_sysfs(tmp_path))
    # another PCI adapter's class devices go with their directory; soft
    # adapters' one by one (devices/virtual holds them all)
    assert p.hide == sorted([f"{PCI1}/infiniband", f"{PCI1}/infiniband_mad",
                             f"{PCI1}/infiniband_verbs", f"{VIRT}/infiniband/rxe0",
                             f"{VIRT}/infiniband/rxe1", f"{VIRT}/infiniband_verbs/uverbs2",
                             f"{VIRT}/infiniband_verbs/uverbs3"])
    links, files = p.classes["class/infiniband"]
    assert [n for n, _ in links] == ["mlx5_0"] and files == []
    links, files = p.classes["class/infiniband_verbs"]
    assert links == [("uverbs0", f"../../{PCI0}/infiniband_verbs/uverbs0")]
    assert files == [("abi_version", b"6\n")]
    assert [n for n, _ in p.classes["class/infiniband_mad"][0]] == ["umad0"]
    assert "class/infiniband_cm" not in p.classes            # no such class here


def test_a_soft_adapter_keeps_its_own_and_hides_its_sibling(tmp_path):
    p = sysmask.plan("rxe1", fake_sysfs(tmp_path))
    assert f"{VIRT}/infiniband/rxe0" in p.hide and f"{VIRT}/infiniband_verbs/uverbs2" in p.hide
    assert not any("rxe1" in h or "uverbs3" in h for h in p.hide)
    assert f"{PCI0}/infiniband" in p.hide and f"{PCI1}/infiniband_verbs" in p.hide
    assert [n for n, _ in p.classes["class/infiniband_verbs"][0]] == ["uverbs3"]


def test_an_entry_whose_adapter_cannot_be_told_is_hidden(tmp_path):
    sysd = fake_sysfs(tmp_path)
    os.unlink(os.path.join(sysd, VIRT, "infiniband_verbs", "uverbs3", "ibdev"))
    p = sysmask.plan("rxe1", sysd)
    assert f"{VIRT}/infiniband_verbs/uverbs3" in p.hide
    assert p.classes["class/infiniband_verbs"][0] == []


def test_no_adapter_no_plan(tmp_path):
    (tmp_path / "sys" / "class").mkdir(parents=True)
    assert not sysmask.plan("mlx5_0", str(tmp_path / "sys"))


APPLY = r"""
import json, os, subprocess, sys
from vgpu.cli.hook import sysmask
from vgpu.cli.hook.cmdline import HookError
from vgpu.cli.hook.mounts import Mounter
sysd, rootfs, keep, bind = sys.argv[1:5]
if bind == "1":
    subprocess.run(["mount", "--bind", sysd, os.path.join(rootfs, "sys")], check=True)
out = {}
try:
    out["done"] = sysmask.mask_adapters("c1", rootfs, Mounter(), sysmask.plan(keep, sysd),
                                        lambda m: None, fs_magic=None)
except HookError as e:
    out["error"] = str(e)
s = os.path.join(rootfs, "sys")
def ls(rel):
    try:
        return sorted(os.listdir(os.path.join(s, rel)))
    except OSError as e:
        return e.strerror
out["class"] = {c: ls("class/" + c) for c in ("infiniband", "infiniband_verbs")}
out["abi"] = open(os.path.join(s, "class/infiniband_verbs/abi_version")).read()
out["kept_guid"] = open(os.path.join(s, "class/infiniband/mlx5_0/node_guid")).read() \
    if os.path.exists(os.path.join(s, "class/infiniband/mlx5_0")) else None
out["other_pci"] = ls(sys.argv[5] + "/infiniband")
out["other_rxe"] = ls("devices/virtual/infiniband/rxe1")
out["kept_rxe_dir"] = ls("devices/virtual/infiniband")
try:
    open(os.path.join(s, "class/infiniband/x"), "w")
    out["write"] = "allowed"
except OSError as e:
    out["write"] = e.strerror
with open("/proc/self/mountinfo") as f:
    out["mounts"] = [ln.split()[4] for ln in f]
print(json.dumps(out))
"""


def in_private_ns(*args: str) -> dict:
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                        APPLY, *args], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


pytestmark_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces)")


@pytestmark_root
def test_the_container_sees_only_its_adapter(tmp_path):
    sysd = fake_sysfs(tmp_path)
    rootfs = tmp_path / "rootfs"
    (rootfs / "sys").mkdir(parents=True)
    out = in_private_ns(sysd, str(rootfs), "mlx5_0", "1", PCI1)
    assert "error" not in out, out
    assert out["class"] == {"infiniband": ["mlx5_0"], "infiniband_verbs": ["abi_version",
                                                                         "uverbs0"]}
    assert out["abi"] == "6\n" and out["kept_guid"] == "guid-of-mlx5_0\n"
    assert out["other_pci"] == [] and out["other_rxe"] == []
    assert out["kept_rxe_dir"] == ["rxe0", "rxe1"]     # names under virtual/: hidden inside
    assert out["write"] == "Read-only file system"
    # nothing of it shows on the host
    assert sorted(os.listdir(os.path.join(sysd, "class", "infiniband"))) == [
        "mlx5_0", "mlx5_1", "rxe0", "rxe1"]


@pytestmark_root
def test_a_symlinked_sys_in_the_rootfs_is_refused_and_nothing_stays(tmp_path):
    sysd = fake_sysfs(tmp_path)
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    os.symlink(sysd, rootfs / "sys")                 # the image's /sys points at the host's
    out = in_private_ns(sysd, str(rootfs), "mlx5_0", "0", PCI1)
    assert "symlink" in out["error"]
    assert not any(m.startswith(str(tmp_path)) for m in out["mounts"])
    assert len(out["class"]["infiniband"]) == 4        # untouched
