"""A trace recorded through a slice on NVIDIA's own driver (595.45.04, no
GPU), and vgpu-replay on that driver (docs/trace.md).

The record is what vgpu.ko sends while a client runs through the slice; the
replay makes the same calls through a fresh slice on the same driver and
must find every outcome as recorded.  That checks the replay's translations
on NVIDIA's RM core rather than on nvsim: the root client's handle asked in
hRoot (RS_COMPATABILITY_MODE), a handle vgpu.ko picked asked for by the
replay, a control whose three embedded strings are lists, and a client
freed and its file closed.  When VGPU_TRACE_OUT names a directory, the trace
is also written there (tools/trace/record.py's corpus comes from nvsim; this
is how a trace from NVIDIA's driver joins it).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import trace as T
from vgpu.abi.nvclient import RmClient
from vgpu_fixtures import MiB
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401


def workload(prefix: str) -> None:
    with RmClient(prefix) as c:                          # version, CARD_INFO, client (picked)
        n = 64
        bufs = [ctypes.create_string_buffer(n) for _ in range(3)]
        p = A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS(
            sizeOfStrings=n, pDriverVersionBuffer=ctypes.addressof(bufs[0]),
            pVersionBuffer=ctypes.addressof(bufs[1]), pTitleBuffer=ctypes.addressof(bufs[2]))
        c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION, p)
        assert bufs[0].value == b"595.45.04"
        c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, bytes(128))
        c.control(c.hClient, A.NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, bytes(384))
        h = c.alloc_client(handle=0xC1D0_0042)           # a second client, its handle chosen
        c.free(h, parent=0, client=h)


def record(kern, sl) -> list[dict]:
    ts = kern.trace_stream(timeout=5)
    try:
        kern.slice_set(sl.id, trace=True)
        workload(sl.prefix)
        recs = [r for r in ts.drain(1.0) if r.slice_id == sl.id]
    finally:
        kern.slice_set(sl.id, trace=False)
        ts.close()
    return [T.record_json(r) for r in recs]


def test_a_trace_on_nvidias_driver_replays_on_it(make_slice, kern, tmp_path):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    recs = record(kern, sl)
    names = [r.get("name") for r in recs if r["op"] == "ioctl"]
    assert "NV_ESC_CHECK_VERSION_STR" in names and "NV_ESC_RM_CONTROL" in names
    bv = [r for r in recs if r.get("item", {}).get("number") ==
          A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION]
    assert len(bv) == 1 and len(bv[0]["lists"]) == 3 and bv[0]["status"] == 0
    path = tmp_path / "realdrv-nv0000.jsonl"
    header = T.header_json("realdrv-nv0000", sl.id, [{"index": 0, "memory_limit": 64 * MiB}],
                           release="595.45.04",
                           started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    header["driver"] = "NVIDIA's nvidia.ko 595.45.04 with no GPU (tests/realdrv)"
    header["workload"] = "tests/realdrv/test_trace_through_vgpu.py: workload()"
    with open(path, "w") as f:
        f.write(T.dumps(header) + "\n")
        for r in recs:
            f.write(T.dumps(r) + "\n")
        f.write(T.dumps({"end": True, "records": len(recs), "lost": 0}) + "\n")
    out = os.environ.get("VGPU_TRACE_OUT")
    if out:
        shutil.copy(path, Path(out) / path.name)
    fresh = make_slice(gpus=[(0, 64 * MiB)])
    r = subprocess.run([sys.executable, "-m", "vgpu.abi.replay", "--nodes", fresh.prefix,
                        str(path)], capture_output=True, text=True, timeout=300)
    sys.stdout.write(r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 differ, 0 not replayed" in r.stdout
