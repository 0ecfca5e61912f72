#!/usr/bin/env python3
"""What tracing a slice costs a call (docs/trace.md): the same ioctl through
a slice's node with the slice's tracing off, on with nobody listening, and
on with a listener draining the trace group, as medians over many calls.

Measured (each a single ioctl timed with perf_counter_ns around the libc
call on a prepared ctypes struct; the three states alternate in rounds so
drift hits all of them):

  version       CHECK_VERSION_STR (query): a direct escape, 72-byte params
  fb-info-v2    RM_CONTROL NV2080_CTRL_CMD_FB_GET_INFO_V2: params on a call
                page, a 776-byte pointed-to buffer copied twice more when traced

Runs inside the VM with nvsim and vgpu.ko loaded:

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        .venv/bin/python bench/trace_overhead.py [--calls 2000] [--rounds 5]

The listener is a process of its own, as vgpud is.  Under TCG the
absolute figures are the emulator's; the ratios are the point.  Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vgpu.abi import nvabi  # noqa: E402
from vgpu.vgpuko.client import VgpuKernel  # noqa: E402
from vgpu.abi.nvclient import RmClient, _libc  # noqa: E402

MiB = 1 << 20


def slice_dir(sid: int) -> str:
    d = Path("/dev/vgpu") / str(sid)
    for _ in range(100):
        if (d / "nvidiactl").exists():
            return str(d)
        time.sleep(0.02)
    raise SystemExit(f"{d}/nvidiactl did not appear")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per state and round")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    k = VgpuKernel(timeout=20)
    sid = 7700
    k.slice_new(sid, gpus=[(0, 256 * MiB)], name="trace-bench")
    received = [0]
    try:
        c = RmClient(slice_dir(sid))
        g = c.open_gpus()[0]
        ver = nvabi.nv_ioctl_rm_api_version_t(cmd=nvabi.NV_RM_API_VERSION_CMD_QUERY)
        ver_cmd = nvabi.nv_ioctl(nvabi.NV_ESC_CHECK_VERSION_STR, ctypes.sizeof(ver))
        fb = nvabi.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=8)
        for i in range(8):
            fb.fbInfoList[i].index = i
        ctl = nvabi.NVOS54_PARAMETERS(hClient=c.hClient, hObject=g.hSubdevice,
                                  cmd=nvabi.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                                  params=ctypes.addressof(fb), paramsSize=ctypes.sizeof(fb))
        ctl_cmd = nvabi.nv_ioctl(nvabi.NV_ESC_RM_CONTROL, ctypes.sizeof(ctl))
        calls = {"version": (ver_cmd, ver), "fb-info-v2": (ctl_cmd, ctl)}

        def timed(cmd, obj) -> list[int]:
            addr = ctypes.addressof(obj)
            out = []
            for _ in range(a.calls):
                t0 = time.perf_counter_ns()
                if _libc.ioctl(c.fd, cmd, ctypes.c_void_p(addr)) != 0:
                    raise SystemExit(f"ioctl {cmd:#x} failed")
                out.append(time.perf_counter_ns() - t0)
            return out

        def listener():
            """A process of its own draining the trace group (a thread
            would take the GIL from the timed loop); -> (pid, pipe)."""
            r, w = os.pipe()
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                n = 0
                stop = []
                signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
                try:
                    with VgpuKernel(timeout=5) as kk, kk.trace_stream(timeout=0.2) as ts:
                        os.write(ready_w, b"x")
                        while not stop:
                            n += len(ts.ready())
                            select.select([ts.fileno()], [], [], 0.2)
                        n += len(ts.ready())
                finally:
                    os.write(w, str(n).encode())
                    os._exit(0)
            os.close(w)
            os.read(ready_r, 1)
            os.close(ready_r)
            os.close(ready_w)
            return pid, r

        states = {"off": (False, False), "on, no listener": (True, False),
                  "on, listening": (True, True)}
        res = {(s, n): [] for s in states for n in calls}
        for _ in range(a.rounds):
            for s, (on, listen) in states.items():
                k.slice_set(sid, trace=on)
                lp = listener() if listen else None     # nobody listens otherwise
                for n, (cmd, obj) in calls.items():
                    res[(s, n)] += timed(cmd, obj)
                if lp is not None:
                    time.sleep(0.5)                     # let it drain what is queued
                    os.kill(lp[0], signal.SIGTERM)
                    received[0] += int(os.read(lp[1], 32) or b"0")
                    os.close(lp[1])
                    os.waitpid(lp[0], 0)
        k.slice_set(sid, trace=False)
        c.close()
    finally:
        k.slice_del(sid, force=True)
    print(f"{a.rounds} rounds x {a.calls} calls per state; median ns per call "
          f"(ratio to off); {received[0]} records received while listening")
    print(f"{'call':12} {'off':>10} {'on, no listener':>22} {'on, listening':>22}")
    for n in calls:
        off = statistics.median(res[("off", n)])
        row = [f"{off:10.0f}"]
        for s in ("on, no listener", "on, listening"):
            m = statistics.median(res[(s, n)])
            row.append(f"{m:13.0f} ({m / off:4.2f}x)")
        print(f"{n:12} " + " ".join(f"{x:>22}" if i else x for i, x in enumerate(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
