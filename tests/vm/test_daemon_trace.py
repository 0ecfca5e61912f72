"""`vgpuctl trace` end to end in the VM: vgpud, vgpu.ko and nvsim, no fakes.

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_daemon_trace.py

A slice is made through the API; two `vgpuctl trace` run against it (one
until SIGTERM, one with --count); a client makes calls through the slice's
nodes; the files are then read back with vgpu.abi.trace (the reader vgpu-replay
uses) and checked against what the client did.  vgpud's reference count is
checked in vgpu.ko itself: the slice stays traced while one tracer is left,
and is not traced once the last one ended, nor after a vgpud that was
killed mid-trace comes back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from daemon_fixtures import start
from tools.testbed.vgpud_launcher import Vgpud
from vgpu_fixtures import MiB, SliceEnv, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from daemon_fixtures import daemons  # noqa: F401
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401
from vgpu.abi import nvabi as A
from vgpu.abi import trace as T
from vgpu.abi.nvclient import RmClient

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="vgpud end-to-end tests run in the VM with nvsim and vgpu.ko loaded")


def _start(tmp: Path) -> Vgpud:
    """The launcher's base config: vgpufs off, 64 MiB by default."""
    return start(tmp)


def _trace(d: Vgpud, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vgpu.cli.ctl", "--socket", d.sock,
                             "--timeout", "60", "trace", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _text(path: Path) -> str:
    """What a trace file holds so far (a .gz one is sync-flushed, not ended)."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    if path.suffix == ".gz":
        try:
            data = zlib.decompressobj(wbits=31).decompress(data)
        except zlib.error:
            return ""
    return data.decode(errors="replace")


def _records(path: Path) -> list[dict]:
    lines = _text(path).splitlines()
    if lines and not _text(path).endswith("\n"):
        lines = lines[:-1]                                # a line being written
    out = []
    for ln in lines[1:]:
        doc = json.loads(ln)
        if "end" not in doc:
            out.append(doc)
    return out


def _done(p: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        raise AssertionError(f"vgpuctl trace did not stop:\n{err}")
    return p.returncode, err


def test_trace_through_vgpuctl(daemons, kern, tmp_path):
    d = _start(tmp_path)
    daemons.append(d)
    a = d.api()
    sid = a.ok("create", container="t-trace", gpus=[0], memory="64MiB")["slice"]["slice_id"]
    assert not kern.slice_get(sid).trace
    env = SliceEnv(kern, kern.slice_get(sid))
    full, first = tmp_path / "full.trace", tmp_path / "first.trace.gz"
    procs = []
    try:
        procs.append(_trace(d, "t-trace", "--output", str(full)))           # until SIGTERM
        procs.append(_trace(d, "t-trace", "--output", str(first), "--count", "3"))
        # both have their header: vgpud traces the slice for them
        assert wait_until(lambda: _text(full).count("\n") >= 1 and
                          _text(first).count("\n") >= 1, 120, 0.2), \
            "".join(p.stderr.read() for p in procs if p.poll() is not None) + d.log(3000)
        assert kern.slice_get(sid).trace

        c = env.client()
        g = c.open_gpus()[0]
        assert g.hSubdevice
        env.close_all()

        rc, err = _done(procs[1])
        assert rc == 0, err
        assert err == f"trace of t-trace: 3 records, 0 lost -> {first}\n"
        # one tracer is left: still traced
        assert kern.slice_get(sid).trace

        def all_closed():
            recs = _records(full)
            opens = sum(r["op"] == "open" for r in recs)
            return opens and opens == sum(r["op"] == "close" for r in recs)
        assert wait_until(all_closed, 60, 0.2), _text(full)[-3000:]
        procs[0].send_signal(signal.SIGTERM)
        rc, err = _done(procs[0])
        assert rc == 0, err
        # the last tracer left: vgpud turned tracing off
        assert wait_until(lambda: not kern.slice_get(sid).trace, 30, 0.2), d.log(3000)

        t = T.load(str(full))
        h = t.header
        assert (h["trace"], h["container"], h["slice_id"]) == (1, "t-trace", sid), h
        assert h["gpus"] == [{"index": 0, "memory_limit": 64 * MiB}], h
        with RmClient("/dev", alloc_client=False) as real:
            assert h["release"] == real.version, h           # what the daemon's inventory read
        assert h["host"] and h["vgpu_version"] and h["started"].endswith("Z")
        n = len(t.records)
        assert err == f"trace of t-trace: {n} records, 0 lost -> {full}\n"
        assert t.trailer == {"end": True, "records": n, "lost": 0}
        assert [r.seq for r in t.records] == list(range(1, n + 1))
        assert {r.op for r in t.records} >= {"open", "ioctl", "close"}
        assert (t.records[0].op, t.records[0].node) == ("open", "ctl")
        assert {r.node for r in t.records if r.op == "open"} == {"ctl", "gpu0"}
        assert all(r.ret == 0 for r in t.records if r.op in ("open", "close")), \
            [r.raw for r in t.records if r.ret]
        # RM_ALLOC: the policy judged the class; the driver's status came back
        allocs = [r for r in t.records if r.op == "ioctl" and r.nr == A.NV_ESC_RM_ALLOC]
        classes = {r.item["number"]: r for r in allocs if r.item and r.item["kind"] == "class"}
        for cls in (A.NV01_ROOT_CLIENT, A.NV01_DEVICE_0, A.NV20_SUBDEVICE_0):
            r = classes.get(cls)
            assert r is not None, [x.raw for x in allocs]
            assert r.name == "NV_ESC_RM_ALLOC" and r.verdict, r.raw
            assert r.status == 0 and r.raw["status_name"] == "NV_OK", r.raw
            assert r.args_in and r.args_out and len(r.args_out) == r.size, r.raw
        # the --count one: the first three, gzip-compressed
        t1 = T.load(str(first))
        assert t1.header["slice_id"] == sid
        assert [r.raw for r in t1.records] == [r.raw for r in t.records[:3]]
        assert t1.trailer == {"end": True, "records": 3, "lost": 0}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
        env.close_all()
        a.close()


def test_tracing_left_on_by_a_killed_vgpud_is_turned_off(daemons, kern, tmp_path):
    d = _start(tmp_path)
    daemons.append(d)
    a = d.api()
    sid = a.ok("create", container="t-orphan", gpus=[0])["slice"]["slice_id"]
    a.close()
    out = tmp_path / "orphan.trace"
    p = _trace(d, "t-orphan", "--output", str(out))
    try:
        assert wait_until(lambda: _text(out).count("\n") >= 1, 120, 0.2), d.log(3000)
        assert kern.slice_get(sid).trace
        d.stop(signal.SIGKILL)
        # vgpud went away mid-trace: the file still ends with its trailer
        rc, err = _done(p)
        assert rc == 1 and "vgpud closed the trace stream" in err, err
        assert T.load(str(out)).trailer == {"end": True, "records": 0, "lost": 0}
        assert kern.slice_get(sid).trace                    # nobody turned it off
        d2 = _start(tmp_path)
        daemons.append(d2)
        assert wait_until(lambda: not kern.slice_get(sid).trace, 60, 0.2), d2.log(3000)
        assert "tracing turned off" in d2.log()
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
