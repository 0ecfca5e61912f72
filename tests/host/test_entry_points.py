"""Every console script answers --help with a usage text and status 0.

Their behaviour is tested elsewhere: vgpud in test_api.py, vgpuctl in
test_ctl.py, the OCI hook and vgpu-runtime in test_hook.py, vgpu-nvclient in
test_nvclient_unit.py and the VM suite, vgpu-replay in test_replay.py.
"""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: pyproject.toml's [project.scripts]: name -> "module:main"
PYPROJECT_SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
ENTRY_POINTS = sorted(v.split(":")[0] for v in PYPROJECT_SCRIPTS.values())


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_exits_zero(module):
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout.lower()


SCRIPTS = {v.split(":")[0]: k for k, v in PYPROJECT_SCRIPTS.items() if k != "vgpu-runtime"}


@pytest.mark.parametrize("module", sorted(SCRIPTS))
def test_version_is_the_packages(module):
    import vgpu
    r = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{SCRIPTS[module]} {vgpu.__version__}\n"


def test_runtime_version_names_itself_then_runc(tmp_path):
    import vgpu
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\necho \"runc version 9.9 $*\"\n")
    fake.chmod(0o755)
    r = subprocess.run([sys.executable, "-m", "vgpu.cli.runtime", "--version"],
                       capture_output=True, text=True, env={"VGPU_RUNC": str(fake), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()[:2]
    assert first.startswith(f"vgpu-runtime {vgpu.__version__}") and second == "runc version 9.9 --version"


def test_make_install_scripts_run_the_console_scripts_modules():
    """make install writes the hook's and the wrapper's scripts itself (-I,
    isolated) over pip's console scripts: each must import the module that
    pyproject.toml's [project.scripts] names for it."""
    root = Path(__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    make = (root / "mk" / "install.mk").read_text()
    loop = re.search(r"for c in ((?:vgpu-[\w-]+:[\w.]+ ?)+); do \\\n.*\n"
                     r"\s*printf '#!%s -I\\nimport sys\\nfrom vgpu\.%s import main", make)
    assert loop, "make install's loop over the -I scripts is not found"
    pairs = dict(p.split(":") for p in loop.group(1).split())
    assert set(pairs) == {"vgpu-oci-hook", "vgpu-runtime"}
    for name, mod in pairs.items():
        assert scripts[name] == f"vgpu.{mod}:main", (name, mod)


def test_make_install_puts_every_console_script_on_path():
    """make install links every command of [project.scripts] into BINDIR
    (vgpu-runtime is compiled there instead): vgpu-device-plugin,
    vgpu-replay and vgpu-nvclient were once left in the venv only."""
    r = subprocess.run(["make", "-s", "--no-print-directory", "-f", "mk/install.mk",
                        "--eval", "print-commands: ; @echo $(VGPU_COMMANDS)", "print-commands"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(set(PYPROJECT_SCRIPTS) - {"vgpu-runtime"})
