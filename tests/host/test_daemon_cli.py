"""vgpud's command line (``python -m vgpu.daemon.main``): --check-config on
the example config and on a bad one, --help.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
