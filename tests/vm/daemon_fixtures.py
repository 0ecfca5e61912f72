"""What the vgpud tests (tests/vm/test_daemon_*.py) share: their daemons
come from tools/testbed/vgpud_launcher.py (the launcher the benchmarks and the demo
use too), with configs under the test's tmp_path, and are ready once their
socket answers for them with vgpu.ko loaded.

A test module imports what it uses by name, the fixtures included
(``daemons`` needs the ``kern`` fixture of vgpu_fixtures in the module too).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tools.testbed.vgpud_launcher import Vgpud, config
from vgpu_fixtures import RmError

START_TIMEOUT = 180.0      # Python under TCG is slow


def e2e_config(tmp: Path) -> dict:
    """test_daemon_e2e's (and test_daemon_reload's) config: vgpufs under
    tmp, GC every second, 64 MiB and 10% by default, profiles small (32 MiB,
    20%) and trial (32 MiB, audit mode)."""
    return config(tmp, paths={"fuse_mount": "{tmp}/fs"}, gc={"interval": "1s"},
                  defaults={"compute": "10%"},
                  profiles={"small": {"memory": "32MiB", "compute": "20%"},
                            "trial": {"memory": "32MiB", "audit": True}})


def start(tmp: Path, cfg: dict | None = None) -> Vgpud:
    """A vgpud on ``cfg`` (default: the launcher's base config), started and
    serving with vgpu.ko loaded."""
    return Vgpud(tmp, cfg, wait_kernel=True, start_timeout=START_TIMEOUT).start()


@pytest.fixture
def daemons(kern):
    """The daemons a test started (it appends them); at teardown each one
    still running is SIGKILLed and every kernel slice whose name starts with
    't-' is deleted."""
    made: list[Vgpud] = []
    yield made
    for d in made:
        if d.alive():
            d.stop(signal.SIGKILL)
    for s in kern.slices():
        if s.name.startswith("t-"):
            kern.slice_del(s.id, force=True)


def fill(gpu, chunk: int, limit: int = 64) -> list[int]:
    """Allocate ``chunk``-sized blocks on ``gpu`` until the driver refuses
    one (at most ``limit``); the handles."""
    hs = []
    for _ in range(limit):
        try:
            hs.append(gpu.alloc(chunk))
        except RmError:
            break
    return hs
