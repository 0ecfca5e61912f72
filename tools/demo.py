"""The main job, run inside the VM by `make demo` with nvsim (two simulated
16 GiB GPUs) and vgpu.ko loaded.

1. Show the node's GPUs as the RM ABI reports them on the host's /dev.
2. Start vgpud with the example config (state under /tmp: the guest's root
   is read-only), vgpufs at /run/vgpu/private/fs, and a containerd of its own.
3. Run three containers through containerd (`ctr run --runc-binary
   vgpu-runtime`: the runtime wrapper wires the OCI hook into each
   container's config.json; the hook asks vgpud for a slice and bind-mounts
   the slice's virtual /dev/nvidia* and /proc/driver/nvidia):
       inference-a  4 GiB on GPU 0
       training-b   8 GiB on GPU 0
       batch-c      2 GiB on GPU 1
   Each container's workload is the project's RM client: it lists
   /dev/nvidia*, reads /proc/driver/nvidia, asks the driver how much memory
   it has (what cudaMemGetInfo would say), allocates 256 MiB blocks until
   the driver says NV_ERR_NO_MEMORY, and holds them.
4. While all three hold their memory, print what each could allocate, what
   it saw, and what the host saw (vgpu.ko's accounting and the simulated
   driver's own FB counters); raise one quota with `vgpuctl set-quota` and
   show the container's view follow; then let the containers exit: the
   hook's poststop releases each slice, and the driver's FB returns to 0.
Exits 0 when every container got exactly its quota and saw only its slice.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# tools/ is this script's directory, hence on sys.path
from vgpud_launcher import Vgpud, VgpudError, example_config

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv" / "bin"
PY = str(VENV / "python")
SOCKET = "/run/vgpu/vgpud.sock"
FUSE = "/run/vgpu/private/fs"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
GiB = 1 << 30
CHUNK = 256 << 20
CONTAINERS = [("inference-a", "0", "4GiB"), ("training-b", "0", "8GiB"), ("batch-c", "1", "2GiB")]
START_TIMEOUT = 240.0

# The workload, run inside each container (the repository is bind-mounted
# read-only; /shared is the demo's exchange directory).
WORKLOAD = r"""
import glob, json, os, sys, time
from vgpu.abi.nvclient import RmClient, RmError
name = sys.argv[1]
def proc_view():
    out = {}
    for f in glob.glob("/proc/driver/nvidia/gpus/*/information"):
        for line in open(f):
            k, _, v = line.partition(":")
            out.setdefault(k.strip(), v.strip())
    return out
def put(tag, d):
    with open(f"/shared/{name}.{tag}.tmp", "w") as f:
        json.dump(d, f)
    os.rename(f"/shared/{name}.{tag}.tmp", f"/shared/{name}.{tag}")
c = RmClient("/dev")
g = c.open_gpus()[0]
seen = g.memory_summary()
held, stop = [], "?"
while True:
    try:
        held.append(g.alloc(%(chunk)d))
    except RmError as e:
        stop = e.name
        break
put("result", {"dev": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")),
               "proc": proc_view(), "gpus_seen": len(c.cards),
               "total_kib": seen["fb_total_kib"], "allocated": len(held) * %(chunk)d,
               "free_after_kib": g.memory_summary()["fb_free_kib"], "stopped_by": stop})
while not os.path.exists(f"/shared/{name}.askview"):
    time.sleep(0.2)
put("view", {"proc": proc_view(), "total_kib": g.memory_summary()["fb_total_kib"]})
while not os.path.exists(f"/shared/{name}.go"):
    time.sleep(0.2)
c.close()
""" % {"chunk": CHUNK}

CONTAINERD_CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
"""


def gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def say(msg: str) -> None:
    print(msg, flush=True)


def poll(pred, timeout: float, interval: float = 0.3):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(interval)


def vgpuctl(*args: str) -> dict:
    r = subprocess.run([str(VENV / "vgpuctl"), "--json", *args], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"demo: vgpuctl {' '.join(args)} failed ({r.returncode}): "
                         f"{r.stderr.strip()}")
    return json.loads(r.stdout) if r.stdout.strip() else {}


def nvsim_fb_used() -> dict[int, int]:
    used = {}
    for line in Path("/sys/kernel/debug/nvsim/state").read_text().splitlines():
        f = line.split()
        if f and f[0] == "gpu":
            used[int(f[1])] = int(f[5])
    return used


def make_rootfs(path: Path) -> None:
    """An empty root with the host's /bin, /lib... symlinks and mount points:
    ctr bind-mounts /usr, /etc and the repository read-only over it."""
    for d in ("usr", "etc", "dev", "proc", "sys", "tmp", "shared", "run", "root"):
        (path / d).mkdir(parents=True, exist_ok=True)
    for d in ("bin", "sbin", "lib", "lib64"):
        src = Path("/") / d
        if src.is_symlink():
            os.symlink(os.readlink(src), path / d)
        elif src.is_dir():
            (path / d).mkdir(exist_ok=True)
    (path / str(REPO).lstrip("/")).mkdir(parents=True, exist_ok=True)
    if Path("/root/.pyenv").is_dir():
        (path / "root/.pyenv").mkdir(parents=True, exist_ok=True)


class Demo:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="vgpu-demo-"))
        self.shared = self.tmp / "shared"
        self.shared.mkdir()
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.vgpud: Vgpud | None = None
        self.started: list[str] = []
        self.ctd_addr = str(self.tmp / "ctd" / "containerd.sock")

    # ------------------------------------------------------------- services
    def start_vgpud(self) -> None:
        """The venv's vgpud on the example config, its state under tmp (the
        guest's root is read-only); up once it answers and vgpufs is mounted."""
        self.vgpud = Vgpud(self.tmp, example_config(self.tmp), command=[str(VENV / "vgpud")],
                           wait_fuse=True, start_timeout=START_TIMEOUT)
        try:
            self.vgpud.start()
        except VgpudError as e:
            raise SystemExit(f"demo: {e}") from None

    def start_containerd(self) -> None:
        d = self.tmp / "ctd"
        d.mkdir()
        (d / "config.toml").write_text(CONTAINERD_CONFIG.format(d=d))
        # what containerd's runc options name as BinaryName on a real node
        # (/usr/local/bin/vgpu-runtime after `make install`): the C fast path
        # (`make runtime`), whose slow path is the package's Python wrapper
        fast = REPO / "build" / "vgpu-runtime"
        if not fast.exists():
            raise SystemExit(f"demo: {fast} is missing: `make runtime` builds it")
        shim = d / "vgpu-runtime"
        shim.write_text(f"#!/bin/sh\nexport VGPU_RUNC={RUNC} VGPU_SOCKET={SOCKET} "
                        f"VGPU_FUSE_MOUNT={FUSE} VGPU_RUNTIME_SLOW={VENV / 'vgpu-runtime'}\n"
                        f"exec {fast} \"$@\"\n")
        shim.chmod(0o755)
        self.shim = str(shim)
        log = open(self.tmp / "containerd.log", "wb")
        p = subprocess.Popen(["containerd", "--config", str(d / "config.toml")], stdout=log,
                             stderr=log)
        log.close()
        self.procs.append(("containerd", p))
        if not poll(lambda: p.poll() is None and self.ctr("version").returncode == 0,
                    START_TIMEOUT):
            raise SystemExit(f"demo: containerd did not come up:\n"
                             f"{self.log('containerd.log')}")

    def log(self, name: str) -> str:
        try:
            return (self.tmp / name).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", self.ctd_addr, *args], capture_output=True,
                              text=True, timeout=timeout)

    # ----------------------------------------------------------- containers
    def run_container(self, name: str, gpus: str, memory: str) -> None:
        rootfs = self.tmp / "rootfs" / name
        make_rootfs(rootfs)
        mounts = []
        for src in ("/usr", "/etc", "/root/.pyenv", str(REPO)):
            if os.path.isdir(src):
                mounts += ["--mount", f"type=bind,src={src},dst={src},options=rbind:ro"]
        mounts += ["--mount", f"type=bind,src={self.shared},dst=/shared,options=rbind:rw",
                   "--mount", "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev"]
        (self.shared / "w.py").write_text(WORKLOAD)
        cmd = f"exec > /shared/{name}.out 2>&1; exec {PY} /shared/w.py {name}"
        r = self.ctr("run", "-d", "--rootfs", "--read-only", "--runc-binary", self.shim,
                     "--annotation", f"vgpu.io/memory={memory}",
                     "--annotation", f"vgpu.io/gpus={gpus}",
                     "--env", "PATH=/usr/bin:/bin", "--env", f"PYTHONPATH={REPO}",
                     "--env", "PYTHONDONTWRITEBYTECODE=1", "--cwd", str(REPO),
                     *mounts, str(rootfs), name, "/bin/sh", "-c", cmd)
        if r.returncode != 0:
            raise SystemExit(f"demo: ctr run {name} failed: {r.stderr.strip()}\n"
                             f"{self.log('vgpud.log')}")
        self.started.append(name)

    def result(self, name: str, tag: str) -> dict | None:
        p = self.shared / f"{name}.{tag}"
        return json.loads(p.read_text()) if p.exists() else None

    def wait_results(self, tag: str, names: list[str]) -> dict[str, dict]:
        if not poll(lambda: all(self.result(n, tag) for n in names), START_TIMEOUT):
            missing = [n for n in names if not self.result(n, tag)]
            outs = "\n".join(f"{n}: {(self.shared / f'{n}.out').read_text()[-1500:]}"
                             for n in missing if (self.shared / f"{n}.out").exists())
            raise SystemExit(f"demo: no result from {missing}\n{outs}\n{self.log('vgpud.log')}")
        return {n: self.result(n, tag) for n in names}

    def task_status(self, name: str) -> str:
        for line in self.ctr("task", "ls").stdout.splitlines()[1:]:
            f = line.split()
            if f and f[0] == name:
                return f[-1]
        return ""

    def stop_containers(self) -> None:
        for name in self.started:
            self.ctr("task", "kill", "-s", "SIGKILL", name, timeout=60)
        for name in self.started:
            poll(lambda: self.task_status(name) != "RUNNING", 60)
            self.ctr("task", "delete", name, timeout=60)
            self.ctr("container", "delete", name, timeout=60)
        self.started.clear()

    def close(self) -> None:
        try:
            self.stop_containers()
        finally:
            for _, p in reversed(self.procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(60)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            if self.vgpud is not None:
                self.vgpud.stop(check=False)


def table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(x[i]) for x in [header] + rows) for i in range(len(header))]
    for row in [header] + rows:
        say("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def main() -> int:
    say("==== the node's GPUs (simulated by nvsim), as the RM ABI reports them ====")
    subprocess.run([str(VENV / "vgpu-nvclient"), "info"], check=True)
    demo = Demo()
    try:
        demo.start_vgpud()
        say(f"\n==== vgpud is up ({vgpuctl('status').get('version', '?')}), vgpufs at {FUSE}; "
            f"starting containerd ====")
        demo.start_containerd()
        say("\n==== three containers through containerd (ctr run --runc-binary vgpu-runtime) ====")
        for name, gpus, memory in CONTAINERS:
            t0 = time.monotonic()
            demo.run_container(name, gpus, memory)
            sl = vgpuctl("show", name)["slice"]
            say(f"  {name}: annotations vgpu.io/memory={memory} vgpu.io/gpus={gpus} -> "
                f"slice {sl['slice_id']} on GPU {gpus} (started in {time.monotonic() - t0:.1f} s)")
        names = [n for n, _, _ in CONTAINERS]
        res = demo.wait_results("result", names)
        host = nvsim_fb_used()
        listing = {s["container"]: s for s in vgpuctl("list")["slices"]}

        say("\n==== what each container could do, and what the host saw (all holding) ====")
        rows, ok = [], True
        for name, gpus, _ in CONTAINERS:
            r, g = res[name], listing[name]["gpus"][0]
            rows.append([name, gpus, gib(g["memory_limit"]), gib(r["allocated"]),
                         r["stopped_by"], " ".join(r["dev"]), str(r["gpus_seen"]),
                         gib(r["total_kib"] << 10), r["proc"].get("Video Memory", "?"),
                         gib(g["memory_used"]), gib(host[int(gpus)])])
            ok &= (r["allocated"] == g["memory_limit"] and r["total_kib"] << 10 == g["memory_limit"]
                   and r["gpus_seen"] == 1 and r["stopped_by"] == "NV_ERR_NO_MEMORY"
                   and r["dev"] == ["nvidia-uvm", "nvidia0", "nvidiactl"])
        table(["CONTAINER", "GPU", "QUOTA", "ALLOCATED", "STOPPED BY", "/dev IN CONTAINER",
               "GPUS", "SAW TOTAL", "/proc SAYS", "VGPU.KO USED", "DRIVER FB USED (GPU)"], rows)
        ok &= host == {0: 12 * GiB, 1: 2 * GiB}
        say(f"\nevery container allocated exactly its quota and saw only its slice: "
            f"{'yes' if ok else 'NO'}")

        say("\n==== vgpuctl set-quota batch-c --memory 3GiB (the container keeps running) ====")
        vgpuctl("set-quota", "batch-c", "--memory", "3GiB")
        (demo.shared / "batch-c.askview").write_text("")
        v = demo.wait_results("view", ["batch-c"])["batch-c"]
        say(f"  batch-c now sees {gib(v['total_kib'] << 10)} total; its /proc/driver/nvidia "
            f"says {v['proc'].get('Video Memory', '?')}")
        ok &= v["total_kib"] << 10 == 3 * GiB

        for name in names:
            (demo.shared / f"{name}.askview").write_text("")
            (demo.shared / f"{name}.go").write_text("")
        # the workloads exit; as an orchestrator does, delete each stopped
        # task: runc's delete runs the hook's poststop, which releases the slice
        poll(lambda: all(demo.task_status(n) == "STOPPED" for n in names), 120)
        t0 = time.monotonic()
        for name in names:
            demo.ctr("task", "delete", name, timeout=60)
            demo.ctr("container", "delete", name, timeout=60)
        demo.started.clear()
        gone = poll(lambda: not vgpuctl("list")["slices"], 60)
        say(f"\nthe containers exited and were deleted; the hook's poststop released their "
            f"slices ({'in %.1f s' % (time.monotonic() - t0) if gone else 'NOT all: ' + str(vgpuctl('list'))})")
        ok &= bool(gone)
        fb = nvsim_fb_used()
        say(f"the driver's FB in use now: "
            f"{', '.join(f'GPU {i}: {gib(v)}' for i, v in sorted(fb.items()))}")
        ok &= not any(fb.values())
        say(f"\ndemo {'passed' if ok else 'FAILED'}")
        return 0 if ok else 1
    finally:
        demo.close()


if __name__ == "__main__":
    sys.exit(main())
