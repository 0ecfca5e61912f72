"""vgpu.ko unloaded and loaded again under a running vgpud, in the VM (no fakes).

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_daemon_reload.py

The daemon must notice the module going (its family id is stale, its event
socket goes quiet), wait for it, and when it is back re-create its slices
with their quotas, and hear the new module's events.  Nothing vgpud holds
pins vgpu.ko (netlink sockets do not; vgpufs holds no module reference), so
rmmod succeeds while it runs.  The session's ``kern`` client is pointed at
the new family afterwards, for the tests that run after this one.
"""

from __future__ import annotations

import json
import signal
import os
import subprocess
import threading

import pytest

import nvsim_reload
from daemon_fixtures import e2e_config, fill, start
from tools.testbed.vgpud_launcher import Api, Vgpud
from vgpu_fixtures import SliceEnv, run_rmmod, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401
from vgpu.vgpuko import client
from vgpu.abi import uapi as U
from vgpu.vgpuko.client import VgpuKernel

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="vgpud end-to-end tests run in the VM with nvsim and vgpu.ko loaded")

MiB = 1 << 20


def _insmod() -> None:
    ko = nvsim_reload.ko_path("VGPU_VGPU_KO", "kmod/vgpu/vgpu.ko")
    r = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
    assert r.returncode == 0, f"insmod {ko}: {r.stderr}"


def _refresh(k: VgpuKernel) -> None:
    """Point a client at the family registered now (the session's kern)."""
    k.family_id, k.mcast_groups = client._resolve_family(k._gs, U.VGPU_GENL_NAME)


class Events:
    """The daemon's ``events`` stream, read in a thread."""

    def __init__(self, d: Vgpud):
        self.api = Api(d.sock, timeout=600)
        self.api.f.write(json.dumps({"v": 1, "id": 1, "op": "events", "args": {}}).encode() + b"\n")
        self.api.f.flush()
        first = json.loads(self.api.f.readline())
        assert first.get("ok"), first
        self.got: list[dict] = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            for line in self.api.f:
                self.got.append(json.loads(line).get("event", {}))
        except (OSError, ValueError):
            pass

    def seen(self, type_: str, container: str) -> bool:
        return any(e.get("type") == type_ and e.get("container") == container for e in self.got)

    def close(self):
        self.api.s.shutdown(2)
        self.api.close()


def test_vgpu_ko_reloaded_under_a_running_vgpud(tmp_path, kern):
    d = start(tmp_path, e2e_config(tmp_path))
    ev = None
    try:
        a = d.api()
        s1 = a.ok("create", container="t-r1", gpus=[0], memory="64MiB")["slice"]["slice_id"]
        s2 = a.ok("create", container="t-r2", gpus=[0], memory="32MiB",
                  compute="20%")["slice"]["slice_id"]
        ev = Events(d)

        r = run_rmmod()
        assert r.returncode == 0, f"rmmod vgpu under vgpud: {r.stderr}\n{d.log(4000)}"
        try:
            assert wait_until(lambda: "lost vgpu.ko" in d.log(), 60), d.log(4000)
            st = a.ok("status")
            assert st["kernel"]["loaded"] is False
            assert a.call("set-quota", container="t-r1", memory="32MiB")["error"]["code"] == \
                "unavailable"
            assert d.proc.poll() is None
        finally:
            _insmod()
            _refresh(kern)

        assert wait_until(lambda: "vgpu.ko reconnected" in d.log(), 120), d.log(4000)
        assert "2 slice(s) re-created" in d.log(), d.log(4000)
        assert a.ok("status")["kernel"]["loaded"] is True
        got = {s.id: s for s in kern.slices()}
        assert got[s1].name == "t-r1" and got[s1].gpu(0).mem_limit == 64 * MiB
        assert got[s2].name == "t-r2" and got[s2].gpu(0).mem_limit == 32 * MiB
        assert got[s2].gpu(0).compute_bp == 2000

        # the quota applies in the re-created slice, and its events reach
        # the daemon's subscribers from the new module's group
        env = SliceEnv(kern, got[s1])
        try:
            g = env.client().open_gpus()[0]
            assert len(fill(g, 16 * MiB)) == 4            # exactly the 64 MiB quota
        finally:
            env.close_all()
        assert wait_until(lambda: ev.seen("alloc-refused", "t-r1"), 60), ev.got
        assert wait_until(lambda: ev.seen("slice-emptied", "t-r1"), 60), ev.got

        # the API works against the new module
        r = a.ok("set-quota", container="t-r1", memory="128MiB")["slice"]
        assert r["gpus"][0]["memory_limit"] == 128 * MiB == kern.slice_get(s1).gpu(0).mem_limit
        a.ok("delete", container="t-r1")
        a.ok("delete", container="t-r2")
        assert not [s for s in kern.slices() if s.name.startswith("t-r")]
        a.close()
        assert d.stop() == 0
        log = d.log()
        assert "Traceback" not in log, log
    finally:
        if ev is not None:
            ev.close()
        if d.proc is not None and d.proc.poll() is None:
            d.stop(signal.SIGKILL)
        if not os.path.exists("/sys/module/vgpu"):
            _insmod()
            _refresh(kern)
        for s in kern.slices():
            if s.name.startswith("t-r"):
                kern.slice_del(s.id, force=True)
