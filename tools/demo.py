"""The main job, run inside the VM by `make demo` with nvsim and vgpu.ko loaded.

1. Show the simulated GPUs as the RM ABI reports them on the host's /dev.
2. Start vgpud with the example config (state under /tmp: the guest's root
   is read-only) and give three workloads a slice each through vgpuctl:
   4 GiB and 8 GiB on GPU 0, 2 GiB on GPU 1.
3. Each workload is the project's RM client opening its slice's virtual
   nodes: it asks the driver how much memory it has (what cudaMemGetInfo
   would say), allocates 256 MiB blocks until the driver says
   NV_ERR_NO_MEMORY, and holds them.
4. While all three hold their memory, print what each could allocate, what
   it saw, and what the host saw (vgpu.ko's accounting and the simulated
   driver's own FB counters); then release everything and stop cleanly.

Containers (runc/containerd) join this job with the container issue; until
then the workloads are plain processes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv" / "bin"
SOCKET = "/run/vgpu/vgpud.sock"
GiB = 1 << 30
SLICES = [("inference-a", 0, "4GiB"), ("training-b", 0, "8GiB"), ("batch-c", 1, "2GiB")]

WORKLOAD = r"""
import json, sys
from vgpu.nvclient import RmClient, RmError
prefix = sys.stdin.readline().strip()
c = RmClient(prefix)
g = c.open_gpus()[0]
seen = g.memory_summary()
held, chunk, stop = [], 256 << 20, "?"
while True:
    try:
        held.append(g.alloc(chunk))
    except RmError as e:
        stop = e.name
        break
after = g.memory_summary()
print(json.dumps({"gpus_seen": len(c.cards), "total_kib": seen["fb_total_kib"],
                  "free_kib": seen["fb_free_kib"], "allocated": len(held) * chunk,
                  "free_after_kib": after["fb_free_kib"], "stopped_by": stop}), flush=True)
sys.stdin.readline()
c.close()
"""


def gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def vgpuctl(*args: str) -> dict:
    r = subprocess.run([str(VENV / "vgpuctl"), "--json", *args], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        sys.exit(f"demo: vgpuctl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout) if r.stdout.strip() else {}


def nvsim_fb_used() -> dict[int, int]:
    used = {}
    for line in Path("/sys/kernel/debug/nvsim/state").read_text().splitlines():
        f = line.split()
        if f and f[0] == "gpu":
            used[int(f[1])] = int(f[5])
    return used


def show_fuse_view(container: str) -> None:
    """What the container issue's hook will bind-mount: vgpufs's view of one slice."""
    root = Path("/run/vgpu/fs") / container
    if not root.is_dir():
        print("\n(vgpufs is not mounted: no FUSE in this VM)")
        return
    print(f"\n==== vgpufs view of {container} ({root}) ====")
    for node in sorted((root / "dev").iterdir()):
        st = node.stat()
        print(f"  dev/{node.name:<12} char {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    for info in sorted((root / "proc/driver/nvidia/gpus").glob("*/information")):
        print(f"  {info.relative_to(root)}:")
        for line in info.read_text().splitlines():
            print(f"    {line}")


def main() -> int:
    print("==== the node's GPUs (simulated by nvsim), as the RM ABI reports them ====", flush=True)
    subprocess.run([str(VENV / "vgpu-nvclient"), "info"], check=True)

    tmp = Path(tempfile.mkdtemp(prefix="vgpu-demo-"))
    conf = tmp / "vgpud.toml"
    text = (REPO / "config" / "vgpud.example.toml").read_text()
    conf.write_text("\n".join(f'state_dir = "{tmp}/state"' if l.startswith("state_dir") else l
                              for l in text.splitlines()) + "\n")
    subprocess.run(["modprobe", "fuse"], capture_output=True)
    log = open(tmp / "vgpud.log", "w")
    daemon = subprocess.Popen([str(VENV / "vgpud"), "--config", str(conf)], stderr=log)
    workloads: list[subprocess.Popen] = []
    try:
        for _ in range(300):
            if os.path.exists(SOCKET):
                break
            if daemon.poll() is not None:
                sys.exit(f"demo: vgpud exited: {(tmp / 'vgpud.log').read_text()[-2000:]}")
            time.sleep(0.2)
        print(f"\n==== vgpud is up ({vgpuctl('status').get('version', '?')}); "
              f"creating three slices ====", flush=True)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        for name, gpu, memory in SLICES:
            w = subprocess.Popen([str(VENV / "python"), "-c", WORKLOAD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env)
            workloads.append(w)
            s = vgpuctl("create", name, "--pid", str(w.pid), "--gpu", str(gpu), "--memory", memory)
            sl = s["slice"]
            print(f"  {name}: slice {sl['slice_id']} on GPU {gpu} with {memory} "
                  f"(nodes /dev/vgpu/{sl['slice_id']}/), workload pid {w.pid}", flush=True)
            w.stdin.write(f"/dev/vgpu/{sl['slice_id']}/\n")
            w.stdin.flush()
        results = [json.loads(w.stdout.readline()) for w in workloads]
        host = nvsim_fb_used()
        listing = {s["container"]: s for s in vgpuctl("list")["slices"]}

        print("\n==== what each workload could do, and what the host saw (all holding) ====")
        header = ["CONTAINER", "GPU", "QUOTA", "ALLOCATED", "STOPPED BY", "SAW GPUS",
                  "SAW TOTAL", "SAW FREE AFTER", "VGPU.KO USED", "DRIVER FB USED (GPU)"]
        rows = []
        for (name, gpu, memory), r in zip(SLICES, results):
            g = listing[name]["gpus"][0]
            rows.append([name, str(gpu), gib(g["memory_limit"]), gib(r["allocated"]),
                         r["stopped_by"], str(r["gpus_seen"]), gib(r["total_kib"] << 10),
                         gib(r["free_after_kib"] << 10), gib(g["memory_used"]), gib(host[gpu])])
        widths = [max(len(x[i]) for x in [header] + rows) for i in range(len(header))]
        for row in [header] + rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        ok = all(r["allocated"] == listing[n]["gpus"][0]["memory_limit"] and
                 r["total_kib"] << 10 == listing[n]["gpus"][0]["memory_limit"] and
                 r["gpus_seen"] == 1 for (n, _, _), r in zip(SLICES, results))
        print(f"\nevery workload allocated exactly its quota and saw only its slice: "
              f"{'yes' if ok else 'NO'}")
        show_fuse_view(SLICES[0][0])
        for w in workloads:
            w.stdin.write("\n")
            w.stdin.flush()
            w.wait(60)
        # The workloads are gone: vgpud collects their slices by itself.
        t0 = time.monotonic()
        names = {n for n, _, _ in SLICES}
        while time.monotonic() - t0 < 60:
            left = names & {s["container"] for s in vgpuctl("list")["slices"]}
            if not left:
                break
            time.sleep(0.5)
        for name in sorted(left):
            vgpuctl("delete", name, "--force")
        print(f"\nthe workloads exited; vgpud collected their slices in "
              f"{time.monotonic() - t0:.1f} s" + (f" (deleted by hand: {sorted(left)})" if left else ""))
        print(f"released; the driver's FB in use now: "
              f"{', '.join(f'GPU {i}: {gib(v)}' for i, v in sorted(nvsim_fb_used().items()))}")
        return 0 if ok else 1
    finally:
        for w in workloads:
            if w.poll() is None:
                w.kill()
                w.wait()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
