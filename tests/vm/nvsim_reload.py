"""nvsim reloaded with other module parameters (another chip, fb_backing)
for a test class or module, and loaded back as it was afterwards: one
helper for the VM tests that start without vgpu.ko (make test's reload-nvsim
run).  The leak check runs before the reload and before the way back."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARAMS = Path("/sys/module/nvsim/parameters")
# the parameters put back afterwards (the others go back to their defaults)
KEPT = ("num_gpus", "fb_size", "gpu_name", "driver_version", "block_us")

#: The chips the tests reload nvsim as.  fb_backing: the CPU's and the
#: engine's view of device memory are the same pages.
GA102 = {"num_gpus": "1", "gpu_name": "NVIDIA GeForce RTX 3090", "fb_backing": "1"}
#: a 16 GiB GH100 presenting 535.261.03, the release of Debian's NVIDIA user space
GH100 = {"num_gpus": "1", "fb_size": str(16 << 30), "driver_version": "535.261.03",
         "gpu_name": "NVIDIA nvsim H100", "fb_backing": "1"}


def skip_reason() -> str | None:
    if os.environ.get("VGPU_IN_VM") != "1" or not PARAMS.exists():
        return "needs nvsim loaded in the VM test bed"
    if Path("/sys/module/vgpu").exists():
        return "vgpu.ko is loaded: nvsim cannot be reloaded under it"
    return None


def ko_path(env: str, default: str) -> Path:
    """A module: $env, else default under the repository."""
    ko = Path(os.environ.get(env, default))
    return ko if ko.is_absolute() else ROOT / ko


def params() -> dict[str, str]:
    return {k: PARAMS.joinpath(k).read_text().strip() for k in KEPT}


def load(p: dict[str, str]) -> None:
    args = [f'{k}="{v}"' if " " in v else f"{k}={v}" for k, v in p.items()]
    r = subprocess.run(["insmod", str(ko_path("VGPU_NVSIM_KO", "kmod/nvsim/nvsim.ko")), *args],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"insmod {args}: {r.stderr}"


@contextlib.contextmanager
def reloaded(extra: dict[str, str]):
    """nvsim with the current parameters overridden by extra, for the block.

    nvsim is loaded back as it was however the block ends: a block that
    raises (a failed assertion, a strict xfail's expected failure) must not
    leave the next test nvsim as this one wanted it (another release: every
    control whose size differs between releases would then be refused
    NV_ERR_INVALID_PARAM_STRUCT, as RM's resControlLookup_IMPL refuses it).
    """
    from conftest import wait_no_leaks
    assert not wait_no_leaks()
    old = params()
    subprocess.run(["rmmod", "nvsim"], check=True)
    try:
        load({**old, **extra})
    except AssertionError:
        load(old)
        raise
    try:
        yield
    finally:
        leaks = wait_no_leaks()
        subprocess.run(["rmmod", "nvsim"], check=True)
        load(old)
    assert not leaks
