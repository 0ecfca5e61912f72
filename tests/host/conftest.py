"""Fixtures the host tests share.  Helpers and fakes are imported by name
from their modules (daemon_support.py, fake_vgpud.py), never from another
test file.
"""

from __future__ import annotations

import pytest

from daemon_support import CONFIG, FakeInventory, FakeKernel
from tools.testbed.fake_vgpud import FakeVgpud
from vgpu.daemon.config import parse_config
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore


@pytest.fixture
def env(tmp_path):
    """A slice manager on CONFIG (state under tmp_path) over a FakeKernel and
    a FakeInventory, its state loaded: (manager, kernel, tmp_path)."""
    cfg = parse_config(CONFIG.format(tmp=tmp_path), "test.toml")
    k = FakeKernel()
    mgr = SliceManager(cfg, "test.toml", KernelPort(factory=lambda: k), StateStore(tmp_path / "state"),
                       FakeInventory())
    mgr.load_state()
    mgr.sysfs = str(tmp_path / "sys")       # no adapter, not the machine's own
    return mgr, k, tmp_path


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A FakeVgpud on tmp_path/vgpud.sock, named by $VGPU_SOCKET for the
    CLI under test (test_apiclient and test_hook keep their own, without
    the variable: they test how the socket is found)."""
    with FakeVgpud(tmp_path / "vgpud.sock") as f:
        monkeypatch.setenv("VGPU_SOCKET", f.path)
        yield f
