"""vgpud's command line (``python -m vgpu.daemon.main``): --check-config on
the example config and on a bad one, --help; and what a service that cannot
start does to the daemon (the API: it exits 1; metrics, vgpufs: it serves
without them).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tools.testbed.vgpud_launcher import Vgpud, config, render

ROOT = Path(__file__).resolve().parents[2]


def _vgpud(*args):
    return subprocess.run([sys.executable, "-m", "vgpu.daemon.main", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_check_config(tmp_path):
    r = _vgpud("--check-config", str(ROOT / "config" / "vgpud.example.toml"))
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[profiles.small]\nmemory = "4GB"\n')
    r = _vgpud("--check-config", str(bad))
    assert r.returncode == 1 and "profiles.small.memory" in r.stderr and '"4GB"' in r.stderr
    r = _vgpud("--help")
    assert r.returncode == 0 and "--check-config" in r.stdout and "SIGHUP" in r.stdout


# ------------------------------------------------------------ a service that cannot start
#: (config change, what the log says): the API is vital, vgpud exits 1
#: without it; without metrics or vgpufs it serves on (vgpu.daemon.main:
#: Daemon.services)
VITAL = {
    "socket": ({"paths": {"socket": "{tmp}/file/vgpud.sock"}}, "API socket: "),
    "group": ({"api": {"group": "no-such-group-vgpu"}}, "api.group: "),
}
OPTIONAL = {
    "metrics": ({"metrics": {"listen": "127.0.0.1:{port}"}}, "(metrics disabled)"),
    "vgpufs": ({"paths": {"fuse_mount": "{tmp}/file/fs"}}, "(container device views disabled)"),
}


@pytest.mark.parametrize("case", sorted(VITAL))
def test_vgpud_exits_1_when_its_api_cannot_start(tmp_path, case):
    change, words = VITAL[case]
    (tmp_path / "file").write_text("")              # not a directory
    path = tmp_path / "vgpud.toml"
    path.write_text(render(config(tmp_path, **change)))
    r = _vgpud("--config", str(path))
    assert r.returncode == 1, r.stderr
    assert words in r.stderr and " ready" not in r.stderr, r.stderr


@pytest.mark.parametrize("case", sorted(OPTIONAL))
def test_vgpud_serves_without_a_service_that_cannot_start(tmp_path, case):
    change, words = OPTIONAL[case]
    (tmp_path / "file").write_text("")
    with socket.socket() as taken:                  # a port that metrics cannot bind
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        change = json.loads(json.dumps(change).replace("{port}", port))
        d = Vgpud(tmp_path, config(tmp_path, **change)).start()
        try:
            with d.api() as api:
                assert api.ok("status")["pid"] == d.proc.pid
        finally:
            assert d.stop() == 0
    assert words in d.log() and " ready" in d.log(), d.log()
