"""Record a trace of one command's calls through a slice, straight from
vgpu.ko's trace group (no vgpud), and the project's first trace corpus.

    record.py --output FILE [--limit 64MiB] [--bind | --nvidia] -- CMD ARGS...
    record.py --corpus tests/data/traces

Runs as root where vgpu.ko is loaded (the VM: tools/vm/vm.py run
--load-nvsim -- .venv/bin/python tools/trace/record.py ...).  A slice is
made on GPU 0 with the given limit and traced; CMD runs with "{dev}" in its
arguments replaced by the slice's node directory, or, with --bind, in a
private mount namespace where the slice's nodes are bound over
/dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0 (for runtimes that open
fixed paths).  --nvidia adds what NVIDIA's own user space (libcuda,
nvidia-smi) needs of that namespace besides the nodes, as a container
slice has it: the nodes bound from a vgpudev mount of the slice (they
stat as NVIDIA's 195:255 and 195:N, which NVML checks, and open as
vgpu.ko's: docs/containers.md), /proc/driver/nvidia/params with
"ModifyDeviceFiles: 0", and /dev/char/195:255 and /dev/char/195:0 naming
the nodes, as the OCI hook makes them.  The file is what `vgpuctl trace` writes (docs/trace.md);
the header also names the workload and nvsim's parameters, so that a
replay can load nvsim the same way.

--corpus reloads nvsim for each workload of CORPUS (below), loads vgpu.ko
over it, records, and writes DIR/<name>.jsonl (plain text: the corpus is
reviewed and diffed as test data).  It needs nvsim loaded
and vgpu.ko not.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vgpu.abi import trace  # noqa: E402
from vgpu.abi import uapi  # noqa: E402
from vgpu.vgpuko.client import VgpuKernel    # noqa: E402
from vgpu.common.values import parse_size     # noqa: E402

NVSIM_PARAMS = Path("/sys/module/nvsim/parameters")
PY = str(ROOT / ".venv" / "bin" / "python")
NODE_DIR = Path("/dev/vgpu")

TINYGRAD = (
    "from tinygrad import Device, Tensor\n"
    "dev = Device['NV']\n"
    "data = [(i * 2654435761) % 2**31 for i in range(5000)]\n"
    "assert Tensor(data, device='NV').realize().tolist() == data\n"
    "print('tinygrad: init and copy ok', flush=True)\n")

#: Debian's 535.261.03 user space, unpacked by make deps (tools/nvuser.py)
NVUSER = (Path(os.environ.get("VGPU_CACHE", "/var/cache/vgpu")) / "nvidia-userspace"
          / "535.261.03")
NVLIB = NVUSER / "usr/lib/x86_64-linux-gnu/nvidia/current"

#: libcuda's start-up and device queries, through ctypes (no CUDA toolkit)
LIBCUDA = (
    "import ctypes, sys\n"
    "cu = ctypes.CDLL(sys.argv[1])\n"
    "def ck(r, what):\n"
    "    assert r == 0, f'{what} -> {r}'\n"
    "ck(cu.cuInit(0), 'cuInit')\n"
    "n, dev, tm = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()\n"
    "ck(cu.cuDeviceGetCount(ctypes.byref(n)), 'cuDeviceGetCount')\n"
    "ck(cu.cuDeviceGet(ctypes.byref(dev), 0), 'cuDeviceGet')\n"
    "ck(cu.cuDeviceTotalMem_v2(ctypes.byref(tm), dev), 'cuDeviceTotalMem')\n"
    "print(f'libcuda: {n.value} device(s), {tm.value} bytes', flush=True)\n")

#: libcuda's context: created, memory allocated, copied both ways, freed,
#: destroyed (the driver-API calls of tests/vm/test_cuda.py's sequence that
#: reach the driver without a module or a launch)
LIBCUDA_CONTEXT = LIBCUDA + (
    "ctx, p = ctypes.c_void_p(), ctypes.c_uint64()\n"
    "ck(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), 'cuCtxCreate')\n"
    "ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(8 << 20)), 'cuMemAlloc')\n"
    "src = (ctypes.c_ubyte * 4096)(*(list(range(256)) * 16))\n"
    "dst = (ctypes.c_ubyte * 4096)()\n"
    "ck(cu.cuMemcpyHtoD_v2(p, src, ctypes.c_size_t(4096)), 'cuMemcpyHtoD')\n"
    "ck(cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(4096)), 'cuMemcpyDtoH')\n"
    "assert bytes(src) == bytes(dst)\n"
    "ck(cu.cuMemFree_v2(p), 'cuMemFree')\n"
    "ck(cu.cuCtxDestroy_v2(ctx), 'cuCtxDestroy')\n"
    "print('libcuda: context ok', flush=True)\n")

#: nvidia-smi -q's sections whose calls a trace holds whole
NVSMI_SECTIONS = ("MEMORY,ECC,TEMPERATURE,CLOCK,COMPUTE,PIDS,PERFORMANCE,ACCOUNTING,"
                  "PAGE_RETIREMENT,ROW_REMAPPER,SUPPORTED_CLOCKS,VOLTAGE")

GH100_535 = {"num_gpus": "1", "fb_size": str(16 << 30), "driver_version": "535.261.03",
             "gpu_name": "NVIDIA nvsim H100", "fb_backing": "1"}

#: name -> (nvsim parameters, slice limit, command, bind over /dev:
#: False, "nodes" or "nvidia")
CORPUS = {
    "nvclient-info": ({}, "256MiB", [PY, "-m", "vgpu.abi.nvclient", "--dev-prefix", "{dev}", "info"],
                      False),
    "nvclient-probe": ({}, "64MiB", [PY, "-m", "vgpu.abi.nvclient", "--dev-prefix", "{dev}",
                                     "probe", "--chunk", "16MiB"], False),
    "nvclient-work": ({}, "256MiB", [PY, "-m", "vgpu.abi.nvclient", "--dev-prefix", "{dev}",
                                     "work", "--item-us", "100", "--items", "8"], False),
    "tinygrad-init-copy": ({"num_gpus": "1", "gpu_name": "NVIDIA GeForce RTX 3090",
                            "fb_backing": "1"}, "64MiB", [PY, "-c", TINYGRAD], "nodes"),
    "libcuda-535-init": (GH100_535, "4GiB", [PY, "-c", LIBCUDA, str(NVLIB / "libcuda.so.1")],
                         "nvidia"),
    "libcuda-535-context": (GH100_535, "4GiB", [PY, "-c", LIBCUDA_CONTEXT,
                                                str(NVLIB / "libcuda.so.1")], "nvidia"),
    # -q but POWER and UTILIZATION: they ask controls whose parameters are
    # over a record's 16 KiB (0x2080a637: 88024 bytes; docs/trace.md)
    "nvidia-smi-535": (GH100_535, "4GiB", [str(NVUSER / "usr/lib/nvidia/current/nvidia-smi"),
                                           "-q", "-d", NVSMI_SECTIONS], "nvidia"),
}


def nvsim_params() -> dict[str, str]:
    if not NVSIM_PARAMS.exists():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(NVSIM_PARAMS.iterdir())}


def slice_dir(sid: int) -> str:
    d = NODE_DIR / str(sid)
    for _ in range(40):
        if (d / "nvidiactl").exists():
            return str(d)
        time.sleep(0.05)
    raise SystemExit(f"record: {d}/nvidiactl did not appear")


def bound(cmd: list[str], dev: str, nvidia: bool = False) -> list[str]:
    """cmd in a private mount namespace with the slice's nodes over /dev's
    (and, with nvidia, what NVIDIA's user space needs besides: see --nvidia)."""
    steps = [f"mount --bind {dev}/{n} /dev/{n}" for n in ("nvidiactl", "nvidia-uvm", "nvidia0")]
    if nvidia:
        steps += ["mount -t tmpfs none /proc/driver", "mkdir /proc/driver/nvidia",
                  "printf 'ModifyDeviceFiles: 0\\n' > /proc/driver/nvidia/params",
                  "mkdir -p /dev/char", "ln -sf /dev/nvidiactl /dev/char/195:255",
                  "ln -sf /dev/nvidia0 /dev/char/195:0", f"export LD_LIBRARY_PATH={NVLIB}"]
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            " && ".join(steps) + ' && exec "$@"', "sh", *cmd]


def record(output: str, cmd: list[str], limit: int, bind: bool | str, name: str) -> int:
    """Run cmd in a new traced slice; write the trace; the command's status."""
    k = VgpuKernel(timeout=20)
    sid = 900 + os.getpid() % 1000
    s = k.slice_new(sid, gpus=[(0, limit)], name=name)
    ts = k.trace_stream(timeout=None)
    recs = []
    devfs = None
    try:
        k.slice_set(sid, trace=True)
        dev = slice_dir(sid)
        argv = [a.replace("{dev}", dev) for a in cmd]
        if bind == "nvidia":
            devfs = tempfile.mkdtemp(prefix="vgpudev-")
            subprocess.run(["mount", "-t", "vgpudev", "-o", f"slice={sid}", "none", devfs],
                           check=True)
            argv = bound(argv, devfs, nvidia=True)
        elif bind:
            argv = bound(argv, dev)
        t0 = time.monotonic()
        child = subprocess.Popen(argv)
        while child.poll() is None:
            r = ts.get(0.2)
            if r is not None:
                recs.append(r)
        recs += ts.drain(1.0)
        took = time.monotonic() - t0
        k.slice_set(sid, trace=False)
    finally:
        ts.close()
        if devfs:
            subprocess.run(["umount", devfs], check=False)
            os.rmdir(devfs)
        k.slice_del(sid, force=True)
        k.close()
    recs = [r for r in recs if r.slice_id == sid]
    header = trace.header_json(name, sid, [{"index": 0, "memory_limit": limit}],
                           release=nvsim_params().get("driver_version", ""),
                           started=datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%dT%H:%M:%SZ"),
                           host=socket.gethostname())
    header["workload"] = " ".join(cmd).replace(PY, "python")
    header["nvsim"] = {k_: v for k_, v in nvsim_params().items()
                       if k_ in ("num_gpus", "gpu_name", "fb_backing", "fb_size", "driver_version")}
    seqs = [r.seq for r in recs]
    lost = sum(b - a - 1 for a, b in zip(seqs, seqs[1:]))
    opener = gzip.open if output.endswith(".gz") else open
    with opener(output, "wt", encoding="utf-8") as f:
        f.write(trace.dumps(header) + "\n")
        for r in recs:
            f.write(trace.dumps(trace.record_json(r)) + "\n")
        f.write(trace.dumps({"end": True, "records": len(recs), "lost": lost}) + "\n")
    print(f"record: {name}: {len(recs)} records, {lost} lost, {ts.overruns} overruns, "
          f"command exit {child.returncode} in {took:.1f} s -> {output}", file=sys.stderr)
    return child.returncode


def reload_nvsim(params: dict[str, str]) -> None:
    for mod in ("vgpu", "nvsim"):
        if Path(f"/sys/module/{mod}").exists():
            subprocess.run(["rmmod", mod], check=True)
    args = [f'{k}="{v}"' if " " in v else f"{k}={v}" for k, v in params.items()]
    subprocess.run(["insmod", str(ROOT / "kmod/nvsim/nvsim.ko"), *args], check=True)
    subprocess.run(["insmod", str(ROOT / "kmod/vgpu/vgpu.ko")], check=True)


def corpus(out: Path, only: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    before = {k: v for k, v in nvsim_params().items()
              if k in ("num_gpus", "fb_size", "gpu_name", "driver_version", "block_us")}
    rc = 0
    try:
        for name, (params, limit, cmd, bind) in CORPUS.items():
            if only and name not in only:
                continue
            reload_nvsim({**before, **params})
            st = record(str(out / f"{name}.jsonl"), cmd, parse_size(limit), bind, name)
            # nvclient probe ends on the quota's refusal: that is its success
            rc |= 0 if st in (0, 1) and name == "nvclient-probe" or st == 0 else 1
    finally:
        reload_nvsim(before)
        subprocess.run(["rmmod", "vgpu"], check=False)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="record.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--output", help="the trace file (.gz: compressed)")
    ap.add_argument("--limit", default="256MiB", help="the slice's memory limit on GPU 0")
    ap.add_argument("--bind", action="store_true",
                    help="bind the slice's nodes over /dev's in a private mount namespace")
    ap.add_argument("--nvidia", action="store_true",
                    help="--bind, and what NVIDIA's libcuda and nvidia-smi need besides the nodes")
    ap.add_argument("--name", default="trace", help="the slice's (container's) name")
    ap.add_argument("--corpus", metavar="DIR", help="record every workload of CORPUS into DIR")
    ap.add_argument("--only", action="append", default=[], help="with --corpus: this workload")
    ap.add_argument("cmd", nargs="*")
    a = ap.parse_args(argv)
    if a.corpus:
        return corpus(Path(a.corpus), a.only)
    if not a.output or not a.cmd:
        ap.error("--output FILE and a command are needed (or --corpus DIR)")
    bind = "nvidia" if a.nvidia else "nodes" if a.bind else False
    return record(a.output, a.cmd, parse_size(a.limit), bind, a.name)


if __name__ == "__main__":
    sys.exit(main())
