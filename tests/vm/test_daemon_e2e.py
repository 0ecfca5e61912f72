"""vgpud end to end in the VM, against vgpu.ko and nvsim (no fakes).

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_daemon_e2e.py

Each test starts vgpud as a subprocess (tools/testbed/vgpud_launcher.py, through
daemon_fixtures.py) with a config whose paths are under tmp_path, talks to it
over its socket (the launcher's small stdlib client, so the test does not
depend on vgpuctl), allocates through the slice's device nodes
with vgpu.abi.nvclient, and stops the daemon (SIGTERM, or SIGKILL where that is
the point) before deleting the slices it made.  Python in the VM is slow
(TCG): timeouts are generous and the tests few.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daemon_fixtures import e2e_config, fill, start
from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu_fixtures import MiB, RmError, SliceEnv, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from daemon_fixtures import daemons  # noqa: F401
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="vgpud end-to-end tests run in the VM with nvsim and vgpu.ko loaded")


@pytest.fixture
def vgpud(tmp_path, daemons):
    """vgpud factory (tools/testbed/vgpud_launcher.py, e2e_config under tmp_path);
    at teardown every daemon is stopped and every kernel slice whose name
    starts with 't-' is deleted (``daemons``)."""
    def _start():
        d = start(tmp_path, e2e_config(tmp_path))
        daemons.append(d)
        return d
    return _start


def _env(kern, slice_id: int) -> SliceEnv:
    return SliceEnv(kern, kern.slice_get(slice_id))


# ------------------------------------------------------------------ tests
def test_quota_live_kill9_restart_sigterm(vgpud, kern):
    d = vgpud()
    a = d.api()
    sl = a.ok("create", container="t-c1", gpus=[0], memory="64MiB")["slice"]
    sid = sl["slice_id"]
    assert sl["gpus"][0]["memory_limit"] == 64 * MiB
    assert sl["compute"]["percent"] == 10
    assert kern.slice_get(sid).name == "t-c1"
    assert a.call("create", container="t-c1")["error"]["code"] == "exists"

    env = _env(kern, sid)
    try:
        c = env.client()
        g = c.open_gpus()[0]
        hs = fill(g, 16 * MiB)
        assert len(hs) == 4                        # exactly the 64 MiB quota
        # set-quota takes effect at once for the running client
        r = a.ok("set-quota", container="t-c1", memory="128MiB")["slice"]
        assert r["gpus"][0]["memory_limit"] == 128 * MiB
        hs += fill(g, 16 * MiB)
        assert len(hs) == 8
        # list / show report the kernel's real use
        shown = a.ok("show", container="t-c1")["slice"]["gpus"][0]
        assert shown["memory_used"] == 128 * MiB == kern.slice_get(sid).gpu(0).mem_used
        assert shown["refusals"] == 2
        listed = [s for s in a.ok("list")["slices"] if s["container"] == "t-c1"][0]
        assert listed["gpus"][0]["memory_used"] == 128 * MiB
        a.close()

        # kill -9 under allocation load: the client keeps its quota throughout
        stop = threading.Event()
        errors: list[str] = []

        def load():
            try:
                while not stop.is_set():
                    try:
                        h = g.alloc(16 * MiB)
                        errors.append(f"allocated past the quota: {h:#x}")
                        g.free(h)
                    except RmError as e:
                        if e.status != A.NV_ERR_NO_MEMORY:
                            errors.append(str(e))
                    c.free(hs[-1])
                    hs[-1] = g.alloc(16 * MiB)      # churn within the quota
            except Exception as e:                 # noqa: BLE001
                errors.append(repr(e))

        t = threading.Thread(target=load)
        t.start()
        time.sleep(0.5)
        d.stop(signal.SIGKILL)
        time.sleep(0.5)
        d.start()                                   # restart: reconciles
        stop.set()
        t.join(60)
        assert not errors, errors
        assert "kept 1" in d.log(), d.log(6000)
        info = kern.slice_get(sid)
        assert (info.name, info.gpu(0).mem_limit, info.gpu(0).mem_used) == ("t-c1", 128 * MiB, 128 * MiB)
        a = d.api()
        shown = a.ok("show", container="t-c1")["slice"]
        assert shown["slice_id"] == sid and shown["gpus"][0]["memory_limit"] == 128 * MiB
        # the restarted daemon still changes quotas of running clients
        a.ok("set-quota", container="t-c1", memory="144MiB")
        hs.append(g.alloc(16 * MiB))
        with pytest.raises(RmError):
            g.alloc(16 * MiB)
        # a profile quota, then admission refusal
        assert a.call("set-quota", container="t-c1", memory="1TiB")["error"]["code"] == "admission"
        assert a.call("show", container="nope")["error"]["code"] == "not-found"
        a.close()
        # SIGTERM: clean exit, the kernel slice stays and keeps enforcing
        assert d.stop(signal.SIGTERM) == 0, d.log()
        assert kern.slice_get(sid).gpu(0).mem_limit == 144 * MiB
        with pytest.raises(RmError):
            g.alloc(16 * MiB)
        state = json.loads((d.tmp / "state" / "state.json").read_text())
        assert state["slices"]["t-c1"]["slice_id"] == sid
    finally:
        env.close_all()


def test_gc_of_vanished_containers(vgpud, kern):
    d = vgpud()
    a = d.api()
    sleeper = subprocess.Popen(["sleep", "600"])
    cg = Path("/sys/fs/cgroup") / f"vgpu-test-{os.getpid()}"
    cg_ok = Path("/sys/fs/cgroup/cgroup.procs").exists()
    cg_proc = None
    try:
        a.ok("create", container="t-pid", pid=sleeper.pid, memory="16MiB")
        if cg_ok:
            cg.mkdir()
            cg_proc = subprocess.Popen(["sleep", "600"])
            (cg / "cgroup.procs").write_text(str(cg_proc.pid))
            a.ok("create", container="t-cg", cgroup=str(cg), memory="16MiB")
        a.ok("create", container="t-keep", memory="16MiB")      # no owner: never collected
        time.sleep(3)
        names = {s["container"] for s in a.ok("list")["slices"]}
        assert {"t-pid", "t-keep"} <= names
        sleeper.kill()
        sleeper.wait()
        if cg_proc is not None:
            cg_proc.kill()
            cg_proc.wait()
        gone = wait_until(lambda: not ({"t-pid", "t-cg"} & {s["container"] for s in a.ok("list")["slices"]}),
                          60, 0.5)
        assert gone, d.log()
        assert {s.name for s in kern.slices()} & {"t-pid", "t-cg"} == set()
        assert "t-keep" in {s["container"] for s in a.ok("list")["slices"]}
        a.ok("delete", container="t-keep")
        assert "t-keep" not in {s.name for s in kern.slices()}
        a.close()
        assert d.stop() == 0
    finally:
        for p in (sleeper, cg_proc):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        if cg.exists():
            wait_until(lambda: not (cg / "cgroup.procs").read_text().strip(), 5)
            cg.rmdir()


def test_hostile_clients_and_reload(vgpud, kern):
    d = vgpud()
    good = d.api()
    good.ok("create", container="t-h", memory="16MiB")
    conns = []
    try:
        # 100 parallel idle connections, half-open requests, garbage, huge lines
        for i in range(100):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            if i % 3 == 0:
                s.sendall(b'{"v": 1, "op": "sta')          # half a request, never finished
            conns.append(s)
        g = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        g.settimeout(60)
        g.connect(d.sock)
        g.sendall(b"\xff\xfe garbage\n[1,2]\n")
        f = g.makefile("rb")
        assert json.loads(f.readline())["error"]["code"] == "bad-request"
        assert json.loads(f.readline())["error"]["code"] == "bad-request"
        g.sendall(b"x" * (70 * 1024))
        assert json.loads(f.readline())["error"]["code"] == "too-large"
        assert f.readline() == b""                        # and closed
        g.close()
        t0 = time.monotonic()
        assert good.ok("status")["slices"] >= 1
        assert good.ok("show", container="t-h")["slice"]["gpus"][0]["memory_limit"] == 16 * MiB
        assert time.monotonic() - t0 < 30
        other = d.api()
        assert other.ok("list")["slices"]
        other.close()

        # SIGHUP with an invalid config: refused, the old one kept
        good_text = d.config.read_text()
        d.config.write_text(good_text.replace('memory = "32MiB"', 'memory = "32MB"'))
        d.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "reload refused" in d.log(), 60, 0.3), d.log()
        assert '"32MB" is not a size' in d.log()
        assert good.ok("status")
        # a valid change: logged, and applied to slices using the profile
        good.ok("set-quota", container="t-h", profile="small")
        d.config.write_text(good_text.replace('memory = "32MiB"', 'memory = "48MiB"'))
        d.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "profiles.small.memory: " in d.log(), 60, 0.3), d.log()
        sid = good.ok("show", container="t-h")["slice"]["slice_id"]
        # explicit memory (16MiB) still wins over the profile's
        assert kern.slice_get(sid).gpu(0).mem_limit == 16 * MiB
        good.ok("delete", container="t-h")
    finally:
        for s in conns:
            s.close()
        good.close()
    assert d.stop() == 0, d.log()


def _refused_subdevice_control() -> tuple[int, int]:
    """A control the release's policy refuses, on a subdevice, small params."""
    release = [ln.split(" ", 1)[1] for ln in
               Path("/sys/kernel/debug/nvsim/stats").read_text().splitlines()
               if ln.startswith("release ")][0]
    for line in (ROOT / "kmod/vgpu/policy" / f"{release}.tsv").read_text().splitlines()[1:]:
        kind, value, _name, size, verdict, *_ = line.split("\t")
        if kind == "control" and verdict == "refuse" and value.startswith("0x2080") \
                and size.isdigit() and 0 < int(size) <= 256:
            return int(value, 16), int(size)
    pytest.skip("no refused NV2080 control with small params")


def test_audit_mode_through_vgpuctl(vgpud, kern, tmp_path):
    """A profile with audit = true: what the policy refuses reaches the
    driver and is recorded; `vgpuctl audit` shows it (--json) and writes it
    as an allow-list; `vgpuctl set-audit off` refuses it again."""
    from vgpu.abi import allowlist

    d = vgpud()
    a = d.api()
    sid = a.ok("create", container="t-audit", gpus=[0], profile="trial")["slice"]["slice_id"]
    assert kern.slice_get(sid).audit
    cmd, size = _refused_subdevice_control()
    env = _env(kern, sid)
    vgpuctl = [sys.executable, "-m", "vgpu.cli.ctl", "--socket", d.sock]
    try:
        c = env.client()
        g = c.open_gpus()[0]
        try:
            c.control(g.hSubdevice, cmd, bytes(size))
        except RmError as e:
            assert e.status != A.NV_ERR_INSUFFICIENT_PERMISSIONS
        allow = tmp_path / "trial.allow"
        r = subprocess.run(vgpuctl + ["audit", "t-audit", "--json", "--allow-list", str(allow)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        rec = json.loads(r.stdout)
        assert rec["audit"] is True
        hit = [e for e in rec["entries"] if e["kind"] == "control" and e["number"] == cmd]
        assert hit and hit[0]["verdict"] == "refuse" and hit[0]["let_through"] == 1, rec
        assert any(e["kind"] == "class" and e["verdict"] == "forward" for e in rec["entries"])
        assert (U.VGPU_AUDIT_CONTROL, cmd) in {it.pair for it in allowlist.load(allow)}
        # the terminal form names it
        r = subprocess.run(vgpuctl + ["audit", "t-audit"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and f"{cmd:#010x}" in r.stdout.lower(), r.stdout
        # off: refused again, and counted as refused
        r = subprocess.run(vgpuctl + ["set-audit", "t-audit", "off"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        with pytest.raises(RmError) as ei:
            c.control(g.hSubdevice, cmd, bytes(size))
        assert ei.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
        e = [e for e in a.ok("audit", container="t-audit")["entries"]
             if e["kind"] == "control" and e["number"] == cmd][0]
        assert (e["calls"], e["refused"], e["let_through"]) == (2, 1, 1)
        # a bad mode is refused with the value quoted
        r = subprocess.run(vgpuctl + ["set-audit", "t-audit", "maybe"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode != 0 and "maybe" in r.stderr
    finally:
        env.close_all()
        a.close()
