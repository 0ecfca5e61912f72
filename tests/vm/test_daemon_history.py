"""vgpud's usage history in the VM, against vgpu.ko and nvsim (no fakes).

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_daemon_history.py

A real vgpud sampling every second ([history] interval = "1s"): a slice is
created, memory allocated in it through its device nodes, and the
``history`` operation must show samples with that memory in use and the
limit; after a restart of vgpud (SIGTERM, then start) the samples written
before are still there and new ones are added to the same series.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from daemon_fixtures import e2e_config, start
from polling import wait_until
from vgpu_fixtures import MiB, SliceEnv
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from daemon_fixtures import daemons  # noqa: F401
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="vgpud history tests run in the VM with nvsim and vgpu.ko loaded")


def _rows(a, since):
    doc = a.ok("history", container="t-h1", since=since, until=time.time() + 60, step=1)
    return [r for s in doc["series"] for r in s["rows"]], doc


def test_history_records_memory_and_survives_restart(tmp_path, daemons, kern):
    cfg = e2e_config(tmp_path)
    cfg["history"] = {"interval": "1s"}
    d = start(tmp_path, cfg)
    daemons.append(d)
    a = d.api()
    t0 = time.time() - 1
    sl = a.ok("create", container="t-h1", gpus=[0], memory="64MiB",
              labels={"team": "hist"})["slice"]
    sid = sl["slice_id"]
    env = SliceEnv(kern, kern.slice_get(sid))
    try:
        c = env.client()
        g = c.open_gpus()[0]
        hs = [g.alloc(16 * MiB), g.alloc(16 * MiB)]
        assert kern.slice_get(sid).gpu(0).mem_used == 32 * MiB
        assert wait_until(lambda: any(r["mem_used_max"] == 32 * MiB
                                      for r in _rows(a, t0)[0]), 60, 0.5), \
            ("no history sample with 32 MiB in use", _rows(a, t0)[1], d.log(4000))
        rows, doc = _rows(a, t0)
        [s] = doc["series"]
        assert (s["container"], s["slice_id"], s["labels"], s["gpu"]) == \
            ("t-h1", sid, {"team": "hist"}, 0)
        assert all(r["mem_limit"] == 64 * MiB for r in rows)
        st = a.ok("status")["history"]
        assert st["enabled"] and st["state"] == "ok" and st["written"] >= 1, st
        assert st["path"] == str(tmp_path / "state" / "history.db")
        # by label, as vgpuctl history --label asks
        by_label = a.ok("history", label={"team": "hist"}, since=t0, until=time.time() + 60)
        assert len(by_label["series"]) == 1
        before = len(rows)
        last_t = max(r["t"] for r in rows)
        a.close()

        # a restart: the file is kept, the series continues
        d.stop(signal.SIGTERM)
        d.start()
        a = d.api()
        rows2, doc2 = _rows(a, t0)
        assert len(rows2) >= before
        assert any(r["t"] <= last_t and r["mem_used_max"] == 32 * MiB for r in rows2)
        g.free(hs.pop())
        assert wait_until(lambda: any(r["t"] > last_t and r["mem_used_max"] == 16 * MiB
                                      for r in _rows(a, t0)[0]), 60, 0.5), \
            ("no sample after the restart with 16 MiB in use", _rows(a, t0)[1], d.log(4000))
        assert len(_rows(a, t0)[1]["series"]) == 1       # the same series
        a.close()
    finally:
        env.close_all()
