"""What the runc-driven host tests share (test_hook_runc.py, test_hook.py,
test_hook_isolation.py, test_hook_mounts.py): a busybox bundle, a fake
vgpud and hook wrapper (the ``env`` fixture), vgpufs stand-in nodes, a runc
run through vgpu-runtime."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from tools.testbed.fake_vgpud import FakeVgpud

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNC = shutil.which("runc") or "/usr/sbin/runc"
BUSYBOX = shutil.which("busybox") or "/bin/busybox"


def make_bundle(tmp_path, name, annotations=None, args=("sh", "-c", "true")):
    b = tmp_path / name
    (b / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, b / "rootfs" / "bin" / "busybox")
    for c in ("sh", "ls", "cat", "true"):
        os.symlink("busybox", b / "rootfs" / "bin" / c)
    subprocess.run([RUNC, "spec"], cwd=b, check=True)
    config = json.loads((b / "config.json").read_text())
    config["process"]["terminal"] = False
    config["process"]["args"] = list(args)
    config["root"]["readonly"] = False
    if annotations:
        config["annotations"] = annotations
    (b / "config.json").write_text(json.dumps(config))
    return b


@pytest.fixture
def env(tmp_path):
    sock = tmp_path / "vgpud.sock"
    fs = tmp_path / "fs"
    fs.mkdir()
    hookbin = tmp_path / "vgpu-oci-hook"
    hookbin.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m vgpu.cli.hook "
                       f"--socket {sock} --fuse-mount {fs} --timeout 3 \"$@\"\n")
    hookbin.chmod(0o755)
    with FakeVgpud(sock) as fake:
        yield {"fake": fake, "fs": fs, "hook": str(hookbin), "root": str(tmp_path / "runc-root")}


def add_fake_nodes(fs, cid):
    """A vgpufs stand-in for one container: nodes (1:3, 1:5, 1:7) and a
    proc view with a version and one GPU's information file."""
    d = fs / cid / "dev"
    d.mkdir(parents=True)
    for name, minor in (("nvidiactl", 3), ("nvidia0", 5), ("nvidia-uvm", 7)):
        os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    p = fs / cid / "proc" / "driver" / "nvidia"
    (p / "gpus" / "0000:01:00.0").mkdir(parents=True)
    (p / "version").write_text(f"NVRM version: vgpu slice of {cid}\n")
    (p / "gpus" / "0000:01:00.0" / "information").write_text("Model: slice\n")


def runc_run(env, bundle, cid, wrapper=True):
    e = dict(os.environ, VGPU_RUNC=RUNC, VGPU_HOOK=env["hook"], PYTHONPATH=REPO)
    argv = ([sys.executable, "-m", "vgpu.cli.runtime"] if wrapper else [RUNC]) + \
        ["--root", env["root"], "run", "--bundle", str(bundle), cid]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=e, timeout=60)
    r.elapsed = time.monotonic() - t0
    return r


LIST = ("ls -l /dev | grep nvidia || echo NO-NODES; "
        "cat /proc/driver/nvidia/version 2>/dev/null || echo NO-PROC")
