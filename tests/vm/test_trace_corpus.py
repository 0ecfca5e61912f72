"""The trace corpus (tests/data/traces, docs/trace.md) replayed.

Each trace was recorded through a slice on nvsim (tools/trace/record.py
--corpus: the project's own clients, tinygrad's initialisation and
copy, and NVIDIA's libcuda start-up and nvidia-smi of 535.261.03).  Replayed through a slice made as the recorded one was, on nvsim
loaded as the header says, every call must come out as recorded: this
holds nvsim, vgpu.ko and the replay's translations (files, handles,
parameters, mmaps, OS-descriptor memory) to what they did when the trace
was made.  Replayed against nvsim alone, the quota's refusals are the
differences the replay reports: what vgpu.ko changed.

nvsim is reloaded for each trace, so this runs in the VM group that starts
without vgpu.ko:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_trace_corpus.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nvsim_reload
from vgpu.abi import trace as T
from vgpu.vgpuko.client import VgpuKernel

ROOT = Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests/data/traces").glob("*.jsonl"))

#: Differences the corpus found in this stop's merged nvsim and vgpu.ko and
#: that are not fixed yet: each is a strict xfail
#: naming what differs, so that fixing it turns the test red until the mark
#: goes.
KNOWN_DIFFERENCES: dict[str, str] = {}


def _corpus_params():
    for p in CORPUS:
        name = p.name.split(".")[0]
        why = KNOWN_DIFFERENCES.get(name)
        yield pytest.param(p, id=name, marks=[pytest.mark.xfail(strict=True, reason=why)]
                           if why else [])

pytestmark = pytest.mark.skipif(nvsim_reload.skip_reason() is not None,
                                reason=nvsim_reload.skip_reason() or "")


def replay(path: Path, nodes: str, *opts: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vgpu.abi.replay", *opts, "--nodes", nodes,
                           str(path)], capture_output=True, text=True, timeout=600)


def nvsim_of(t: T.Trace) -> dict[str, str]:
    """nvsim's parameters for a trace: its header's, and at least the
    release it was recorded on (a trace of NVIDIA's driver names no nvsim
    parameters; a call's paramsSize is that release's, which another
    release's RM refuses: resControlLookup_IMPL, rs_resource.c)."""
    p = {k: str(v) for k, v in t.header.get("nvsim", {}).items()}
    if t.header.get("release"):
        p.setdefault("driver_version", str(t.header["release"]))
    return p


def slice_nodes(sid: int) -> str:
    d = Path("/dev/vgpu") / str(sid)
    end = time.monotonic() + 5
    while not (d / "nvidiactl").exists():
        assert time.monotonic() < end, f"{d}/nvidiactl did not appear"
        time.sleep(0.05)
    return str(d)


def test_the_corpus_is_there():
    names = {p.name.split(".")[0] for p in CORPUS}
    assert {"nvclient-info", "nvclient-probe", "nvclient-work", "tinygrad-init-copy",
            "libcuda-535-init", "libcuda-535-context", "nvidia-smi-535"} <= names
    for p in CORPUS:
        t = T.load(str(p))
        assert t.records and t.lost() == 0 and t.trailer and t.trailer["lost"] == 0
        # a record cut at the trace's bound is not replayed (docs/trace.md)
        assert not [r.seq for r in t.records if r.truncated or r.unreadable], p.name


def test_nvsim_is_loaded_back_after_a_block_that_failed():
    """A trace's block that fails (a strict xfail's expected failure) must
    not leave the next trace nvsim as it wanted it: nvidia-smi-535's
    535.261.03 left so made realdrv-nv0000's GPU_GET_PROBED_IDS (384 bytes in
    595.45.04, 256 in 535.261.03) and nvclient-probe's FB_GET_INFO_V2 come
    back NV_ERR_INVALID_PARAM_STRUCT."""
    before = nvsim_reload.params()
    other = "535.261.03" if before["driver_version"] != "535.261.03" else "595.45.04"
    with pytest.raises(RuntimeError):
        with nvsim_reload.reloaded({"driver_version": other}):
            assert nvsim_reload.params()["driver_version"] == other
            raise RuntimeError("the block failed")
    assert nvsim_reload.params() == before


@pytest.mark.parametrize("path", list(_corpus_params()))
def test_replayed_through_a_slice_every_call_comes_out_as_recorded(path):
    t = T.load(str(path))
    with nvsim_reload.reloaded(nvsim_of(t)):
        ko = nvsim_reload.ko_path("VGPU_VGPU_KO", "kmod/vgpu/vgpu.ko")
        r = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        try:
            with VgpuKernel(timeout=20) as k:
                sid = 4000 + CORPUS.index(path)
                limits = [(g["index"], int(g["memory_limit"])) for g in t.header["gpus"]]
                k.slice_new(sid, gpus=[(idx, lim) for idx, lim in limits], name=path.stem)
                try:
                    r = replay(path, slice_nodes(sid))
                finally:
                    k.slice_del(sid, force=True)
            sys.stdout.write(r.stdout + r.stderr)
            assert r.returncode == 0, r.stdout + r.stderr
            assert " 0 differ" in r.stdout
        finally:
            subprocess.run(["rmmod", "vgpu"], check=True)


def test_replayed_on_nvsim_alone_the_quota_refusals_differ():
    path = ROOT / "tests/data/traces/nvclient-probe.jsonl"
    t = T.load(str(path))
    refused = [r for r in t.records if r.op == "ioctl" and r.status == 0x51]   # NV_ERR_NO_MEMORY
    assert len(refused) == 1
    with nvsim_reload.reloaded(nvsim_of(t)):
        r = replay(path, "/dev", "--json")
    sys.stdout.write(r.stdout + r.stderr)
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert (out["differ"], out["not_replayed"]) == (1, 0)
    (c,) = out["calls"]
    assert c["seq"] == refused[0].seq and c["result"] == "differ"
    assert "NV01_MEMORY_LOCAL_USER" in c["name"]
    assert c["recorded"] != c["replayed"]
