"""vgpud's footprint with many slices: RSS and idle CPU.

Run in the VM with vgpu.ko and several simulated GPUs:

    python3 tools/vm/vm.py run --load-nvsim --nvsim-params "num_gpus=8 fb_size=137438953472" \\
        --load-vgpu -- /work/main/.venv/bin/python bench/daemon_scale.py --slices 1000

Creates N slices directly through netlink (spread over the GPUs, 64 MiB
each), starts vgpud on a temporary config (tools/testbed/vgpud_launcher.py; it
adopts them at reconciliation, as it would after a restart), lets it settle, then samples its RSS and the
CPU it uses over --idle seconds of idleness, and the latency of one `list`
(a full kernel dump) and one `set-quota`.  Stops vgpud (SIGTERM) and deletes
the slices.  Prints one line per figure.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.testbed.vgpud_launcher import Api, Vgpud, config  # noqa: E402
from vgpu.vgpuko.client import VgpuKernel  # noqa: E402
from vgpu.abi.nvclient import RmClient  # noqa: E402


def rpc(path, op, **args):
    with Api(path, 300) as a:
        return a.call(op, **args)


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])           # utime + stime, ticks


def rss(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith(("VmRSS", "VmHWM")):
                k, v = ln.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slices", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--base-id", type=int, default=500000)
    a = ap.parse_args()
    with RmClient("/dev", alloc_client=False) as c:
        cards = [(x.minor, x.gpu_id) for x in c.cards]
    tmp = Path(tempfile.mkdtemp(prefix="vgpud-bench-"))
    # vgpufs at its default mount point (no fuse_mount), as before the launcher
    d = Vgpud(tmp, config(tmp, paths={"fuse_mount": None}, log={"level": "warning"},
                          gc={"interval": "10s"}, node={"oversubscribe_memory": True}),
              start_timeout=600)
    k = VgpuKernel(timeout=60)
    ids = []
    try:
        t0 = time.monotonic()
        for i in range(a.slices):
            minor, gid = cards[i % len(cards)]
            try:
                k.slice_new(a.base_id + i, [(minor, 64 << 20, gid)], name=f"bench-{i}")
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                print(f"vgpu.ko refused slice {i + 1}: {e} (its VGPU_MAX_SLICES); measuring with {i}")
                break
            ids.append(a.base_id + i)
        a.slices = len(ids)
        print(f"created {len(ids)} slices over {len(cards)} GPUs in {time.monotonic() - t0:.1f} s (netlink)")
        t0 = time.monotonic()
        d.start()
        proc, sock = d.proc, d.sock
        while True:
            assert proc.poll() is None, d.log()
            try:
                if rpc(sock, "status")["result"]["slices"] >= a.slices:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        print(f"vgpud ready with {a.slices} adopted slices in {time.monotonic() - t0:.1f} s")
        time.sleep(5)
        hz = os.sysconf("SC_CLK_TCK")
        c0, w0 = proc_stat(proc.pid), time.monotonic()
        time.sleep(a.idle)
        c1, w1 = proc_stat(proc.pid), time.monotonic()
        m = rss(proc.pid)
        print(f"idle CPU: {100.0 * (c1 - c0) / hz / (w1 - w0):.2f} % of a core over {w1 - w0:.0f} s")
        print(f"RSS: {m['VmRSS'] / 2**20:.1f} MiB (peak {m['VmHWM'] / 2**20:.1f} MiB)")
        t0 = time.monotonic()
        r = rpc(sock, "list")
        print(f"list of {len(r['result']['slices'])} slices: {1000 * (time.monotonic() - t0):.0f} ms")
        t0 = time.monotonic()
        r = rpc(sock, "set-quota", container="bench-7", memory="96MiB")
        assert r["ok"], r
        print(f"set-quota with {a.slices} slices: {1000 * (time.monotonic() - t0):.1f} ms")
        m = rss(proc.pid)
        print(f"RSS after list: {m['VmRSS'] / 2**20:.1f} MiB (peak {m['VmHWM'] / 2**20:.1f} MiB)")
    finally:
        try:
            d.stop(timeout=120)
        finally:
            for sid in ids:
                try:
                    k.slice_del(sid, force=True)
                except OSError:
                    pass
            k.close()


if __name__ == "__main__":
    main()
