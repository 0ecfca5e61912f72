"""The package's layers (docs/tour.md): vgpu.cli, vgpu.abi and vgpu.values
import the standard library only, so vgpuctl and the OCI hook start without
the daemon's dependencies, and nothing outside vgpu.daemon imports it."""
import json
import pathlib
import subprocess
import sys

import pytest

import vgpu

PKG = pathlib.Path(vgpu.__file__).parent

def loaded_after(stmt: str) -> set[str]:
    code = f"import sys, json; {stmt}; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout))


#: what the interpreter itself loads (site, the editable install's finder)
BASELINE = loaded_after("pass")


def modules(sub: str) -> list[str]:
    return sorted(f"vgpu.{sub}.{p.stem}" for p in (PKG / sub).glob("*.py"))


LIGHT = [*modules("cli"), *modules("abi"), "vgpu.values"]


def test_every_light_module_is_listed():
    assert "vgpu.cli.ctl" in LIGHT and "vgpu.cli.hook" in LIGHT and "vgpu.abi.uapi" in LIGHT


@pytest.mark.parametrize("module", LIGHT)
def test_light_module_loads_only_the_standard_library(module):
    # A fresh, isolated interpreter: what the import itself pulls in, not
    # what pytest has loaded.
    loaded = loaded_after(f"import {module}") - BASELINE
    foreign = sorted(m for m in loaded if m.split(".")[0] not in (*sys.stdlib_module_names, "vgpu"))
    assert not foreign, f"{module} pulls in {foreign}"
    daemon = sorted(m for m in loaded if m.startswith("vgpu.daemon"))
    assert not daemon, f"{module} pulls in the daemon's {daemon}"
