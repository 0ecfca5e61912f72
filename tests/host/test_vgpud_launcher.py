"""tools/testbed/vgpud_launcher.py, the one way tests, benchmarks and the demo start a
vgpud: the config builder and its TOML, a real vgpud started on the host
(no vgpu.ko here: it serves and waits for the module), stopped with SIGTERM,
and every failure reported with the daemon's log.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.testbed.vgpud_launcher import (BASE, EXAMPLE, Vgpud, VgpudError, config,
                                  example_config, render, running)


# ------------------------------------------------------------ config
def test_config_is_base_with_tmp_and_overrides(tmp_path):
    assert config(tmp_path) == {
        "paths": {"socket": f"{tmp_path}/vgpud.sock", "state_dir": f"{tmp_path}/state",
                  "fuse_mount": ""},
        "metrics": {"listen": ""}, "log": {"level": "info"}, "defaults": {"memory": "64MiB"}}
    c = config(tmp_path, paths={"fuse_mount": "{tmp}/fs"}, gc={"interval": "1s"},
               defaults={"compute": "10%"}, log=None,
               profiles={"trial": {"memory": "32MiB", "audit": True}})
    assert c["paths"]["fuse_mount"] == f"{tmp_path}/fs"
    assert c["defaults"] == {"memory": "64MiB", "compute": "10%"}        # merged, not replaced
    assert "log" not in c and c["gc"] == {"interval": "1s"}
    assert c["profiles"] == {"trial": {"memory": "32MiB", "audit": True}}
    assert "fuse_mount" not in config(tmp_path, paths={"fuse_mount": None})["paths"]
    assert BASE["paths"]["socket"] == "{tmp}/vgpud.sock"                # BASE itself untouched


def test_render_round_trips_and_vgpud_accepts_it(tmp_path):
    cfgs = [config(tmp_path),
            config(tmp_path, node={"oversubscribe_memory": True, "max_channels": 0},
                   scheduler={"period": "20ms", "layers": ["tsg"]},
                   profiles={"small": {"memory": "32MiB", "compute": 20.5},
                             "a.b": {"memory": 1 << 20}}),
            example_config(tmp_path)]
    for c in cfgs:
        assert tomllib.loads(render(c)) == c
    ex = example_config(tmp_path)
    assert ex["paths"]["state_dir"] == f"{tmp_path}/state"
    assert ex["schedule"] == tomllib.loads(EXAMPLE.read_text())["schedule"]
    # the e2e test edits the file as text: one key a line, as written here
    assert 'memory = "32MiB"' in render(cfgs[1]).splitlines()
    for i, c in enumerate(cfgs[:2] + [config(tmp_path, base=ex)]):
        p = tmp_path / f"c{i}.toml"
        p.write_text(render(c))
        r = subprocess.run([sys.executable, "-m", "vgpu.daemon.main", "--check-config", str(p)],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert r.returncode == 0, r.stderr


# ------------------------------------------------------------ a real vgpud
def test_starts_serves_and_stops_on_sigterm(tmp_path):
    with running(tmp_path) as d:
        assert d.config.read_text() == render(config(tmp_path))
        assert d.sock == f"{tmp_path}/vgpud.sock" and d.state_dir == tmp_path / "state"
        with d.api() as a:
            st = a.ok("status")
        assert st["pid"] == d.proc.pid and st["kernel"]["loaded"] is False
        proc = d.proc
    assert proc.returncode == 0                      # SIGTERM: a clean exit
    assert "SIGTERM" in d.log()
    # restarted on the same files, its log appended
    d.start()
    assert d.alive() and d.log().count("SIGTERM") == 1
    assert d.stop() == 0 and d.stop() == 0


def test_a_failure_inside_the_block_carries_the_log(tmp_path):
    with pytest.raises(ZeroDivisionError) as ei:
        with running(tmp_path):
            1 / 0
    assert any("vgpud's log" in n and "ready" in n for n in ei.value.__notes__)


def test_a_daemon_that_exits_is_reported_with_its_log(tmp_path):
    d = Vgpud(tmp_path, config(tmp_path, defaults={"memory": "8GB"}))
    with pytest.raises(VgpudError) as ei:
        d.start()
    assert "exited 1 while starting" in str(ei.value) and '"8GB"' in str(ei.value)


def test_not_ready_in_time_is_killed_and_reported(tmp_path):
    # no vgpu.ko on the host: vgpud waits for it for ever.  6 s: vgpud's
    # start-up (imports, about 0.5 s; 1.5 s on a loaded 2-core machine) must
    # be over before its log can say what it waits for
    d = Vgpud(tmp_path, wait_kernel=True, start_timeout=6)
    with pytest.raises(VgpudError) as ei:
        d.start()
    assert "not serving within 6 s" in str(ei.value) and "vgpu.ko is not loaded" in str(ei.value)
    assert not d.alive()


def test_sigkill_after_the_deadline(tmp_path):
    d = Vgpud(tmp_path)
    ready = tmp_path / "ready"
    with open(d.logf, "ab") as log:
        d.proc = subprocess.Popen(
            [sys.executable, "-c", "import pathlib, signal, sys, time\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             f"pathlib.Path({str(ready)!r}).touch()\nprint('stubborn', flush=True)\n"
             "time.sleep(60)\n"], stdout=log, stderr=log)
    end = time.monotonic() + 30
    while not ready.exists():                        # SIGTERM is ignored from now on
        assert d.proc.poll() is None and time.monotonic() < end, d.log()
        time.sleep(0.05)
    with pytest.raises(VgpudError) as ei:
        d.stop(timeout=0.5)
    assert "did not exit on SIGTERM within 0.5 s" in str(ei.value) and "stubborn" in str(ei.value)
    assert d.proc.returncode == -signal.SIGKILL
