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
   the driver says NV_ERR_NO_MEMORY, and holds them.  NVIDIA's own
   nvidia-smi (535.261.03, from `make deps`; nvsim presents that release)
   then runs inside each container while it holds them: one GPU, the quota as
   memory.total and memory.used, no other container's process.
4. While all three hold their memory, print what each could allocate, what
   it saw, and what the host saw (vgpu.ko's accounting and the simulated
   driver's own FB counters); raise one quota with `vgpuctl set-quota` and
   show the container's view follow; then let the containers exit: the
   hook's poststop releases each slice, and the driver's FB returns to 0.
5. GPU time through a day/night switch, with compressed time: two containers
   on GPU 0 (ctr with the annotations containerd's CRI gives a pod's
   container, so their slices carry the label io.kubernetes.pod.namespace=
   inference / =training), each keeping its channel full of 2 ms work items
   (vgpu-nvclient work).  The schedule's windows are rewritten around the
   present minute and vgpud reloaded (SIGHUP): by day inference gets
   inference-day (fixed 70%, high), training its own profile training-day
   (share 30%); by night inference-night (share 20%) and training-night
   (share 80%).  Each phase prints configured, expected (docs/compute.md's
   classes) and achieved GPU time (nvsim's own busy accounting over 5 s).
6. One forecast-driven adjustment: before vgpud starts, the history file is
   seeded with 21 past days of the inference label (0.6 of a GPU for 12 h a
   day starting at the next hour); inference-night then gets forecast =
   "act", lead 1 h (a reload, which plans at once): the forecast-adjust
   event, vgpuctl list with the raised compute, vgpuctl forecast, and the
   achieved GPU time under the raised weight.
Exits 0 when every container got exactly its quota and saw only its slice,
every achieved figure is within TOL points of the expected one, and the
forecast raised inference's compute.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# tools/ is this script's directory, hence on sys.path
from testbed.vgpud_launcher import Vgpud, VgpudError, example_config

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv" / "bin"
PY = str(VENV / "python")
SOCKET = "/run/vgpu/vgpud.sock"
FUSE = "/run/vgpu/private/fs"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
GiB = 1 << 30
CHUNK = 256 << 20
CONTAINERS = [("inference-a", "0", "4GiB"), ("training-b", "0", "8GiB"), ("batch-c", "1", "2GiB")]

#: NVIDIA's own nvidia-smi and libnvidia-ml of the release nvsim presents
#: (Debian's 535.261.03, unpacked by `make deps`: tools/nvuser.py), bound
#: read-only into each container: the CDI spec that injects a node's driver
#: libraries as a product is the node issue's, not this demo's
NVUSER = (Path(os.environ.get("VGPU_CACHE", "/var/cache/vgpu")) / "nvidia-userspace"
          / "535.261.03")
NVIDIA_SMI = NVUSER / "usr/lib/nvidia/current/nvidia-smi"
NVML_DIR = NVUSER / "usr/lib/x86_64-linux-gnu/nvidia/current"
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
smi = %(smi)r
if os.path.exists(smi):
    import subprocess
    env = dict(os.environ, LD_LIBRARY_PATH=%(lib)r)
    def run(*a):
        r = subprocess.run([smi, *a], capture_output=True, text=True, env=env, timeout=600)
        return {"rc": r.returncode, "out": r.stdout + r.stderr}
    put("smi", {"table": run(),
                "gpu": run("--query-gpu=index,name,memory.total,memory.used",
                           "--format=csv,noheader"),
                "apps": run("--query-compute-apps=pid,used_memory", "--format=csv,noheader")})
while not os.path.exists(f"/shared/{name}.askview"):
    time.sleep(0.2)
put("view", {"proc": proc_view(), "total_kib": g.memory_summary()["fb_total_kib"]})
while not os.path.exists(f"/shared/{name}.go"):
    time.sleep(0.2)
c.close()
""" % {"chunk": CHUNK, "smi": str(NVIDIA_SMI), "lib": str(NVML_DIR)}

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
        self.base_cfg = example_config(self.tmp, history={"path": "{tmp}/state/history.db"})
        seed_history(self.tmp / "state" / "history.db", time.time())
        self.vgpud = Vgpud(self.tmp, self.base_cfg, command=[str(VENV / "vgpud")],
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
        (self.shared / "w.py").write_text(WORKLOAD)
        self.ctr_run(name, {"vgpu.io/memory": memory, "vgpu.io/gpus": gpus},
                     f"exec > /shared/{name}.out 2>&1; exec {PY} /shared/w.py {name}")

    def ctr_run(self, name: str, annotations: dict[str, str], cmd: str) -> None:
        rootfs = self.tmp / "rootfs" / name
        make_rootfs(rootfs)
        mounts = []
        for src in ("/usr", "/etc", "/root/.pyenv", str(REPO), str(NVUSER)):
            if os.path.isdir(src):
                mounts += ["--mount", f"type=bind,src={src},dst={src},options=rbind:ro"]
        mounts += ["--mount", f"type=bind,src={self.shared},dst=/shared,options=rbind:rw",
                   "--mount", "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev"]
        ann = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
        r = self.ctr("run", "-d", "--rootfs", "--read-only", "--runc-binary", self.shim, *ann,
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

    def task_pids(self, name: str) -> list[int]:
        return [int(ln.split()[0]) for ln in self.ctr("task", "ps", name).stdout.splitlines()[1:]
                if ln.split() and ln.split()[0].isdigit()]

    def log_all(self, name: str) -> str:
        try:
            return (self.tmp / name).read_text(errors="replace")
        except OSError:
            return ""

    def task_status(self, name: str) -> str:
        for line in self.ctr("task", "ls").stdout.splitlines()[1:]:
            f = line.split()
            if f and f[0] == name:
                return f[-1]
        return ""

    def stop_containers(self) -> None:
        for name in self.started:
            self.ctr("task", "kill", "-s", "SIGKILL", name, timeout=60)
        def delete(name: str) -> None:
            poll(lambda: self.task_status(name) != "RUNNING", 60)
            self.ctr("task", "delete", name, timeout=60)
            self.ctr("container", "delete", name, timeout=60)
        with ThreadPoolExecutor(max(1, len(self.started))) as ex:
            list(ex.map(delete, self.started))
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


# ---------------------------------------------------------------- compute part
# Two containers on GPU 0, labelled as containerd's CRI labels a pod's
# container (namespace inference / training), each keeping its channel full
# of 2 ms work items.  Compressed time: the schedule's windows are rewritten
# around the present minute and the daemon reloaded (SIGHUP), which is what
# the clock passing 08:00 or 20:00 does to a node's schedule.
NS = "io.kubernetes.pod.namespace"
INF_LABEL, TRN_LABEL = f"{NS}=inference", f"{NS}=training"
# How far achieved may be from expected, in percentage points.  On an idle
# host the scheduler lands within 1 point under TCG (bench/compute-report.md);
# on a loaded one (another VM run beside the demo's, load average 5-6 on 2
# cores) the guest's scheduler thread wakes late, and figures 7-8 points off
# have been seen (a high-priority cap, two share weights over 5 s).  10 is
# under half the smallest difference
# between one workload's expected figures in two phases (23.7 points), so no
# phase can pass for another.
TOL = 10.0
WINDOW = 5.0              # seconds each phase is measured (the bench's window)
SETTLE = 1.5
LEAD = "1h"
HISTORY_DAYS = 21
WORK = "-m vgpu.abi.nvclient work --item-us 2000 --depth 16 --seconds 900"
COMPUTE = [("inference", "inference", {}),
           ("training", "training", {"vgpu.io/container-profile": "training-day"})]
PROFILES = {
    "inference-day": {"compute": "70%", "priority": "high", "policy": "fixed"},
    "inference-night": {"compute": "20%", "priority": "low", "policy": "share",
                        "max_compute": "80%"},
    "training-day": {"memory": "2GiB", "compute": "30%", "priority": "low", "policy": "share"},
    "training-night": {"compute": "80%", "priority": "low", "policy": "share"},
}


def seed_history(path: Path, now: float) -> None:
    """HISTORY_DAYS past days of the inference label in vgpud's history file
    (before vgpud starts): one slice using 0.6 of a GPU for twelve hours a
    day from the next hour on (its "morning" comes in under an hour), 0.05
    otherwise, a sample every 5 minutes."""
    sys.path.insert(0, str(REPO))
    from vgpu.daemon import history
    import datetime
    hour0 = (datetime.datetime.fromtimestamp(now).hour + 1) % 24
    t = now - HISTORY_DAYS * 86400
    gt, batch = 0, []
    while t < now - 300:
        busy = (datetime.datetime.fromtimestamp(t).hour - hour0) % 24 < 12
        share = 0.6 if busy else 0.05
        gt += int(share * 300e9)
        batch.append(history.Sample(t=t, slice_id=1000, container="inference-earlier", gpu=0,
                              mem_used=GiB, mem_peak=GiB, mem_limit=2 * GiB, gpu_time_ns=gt,
                              compute_bp=2000, labels={NS: "inference"}))
        t += 300
    st = history.HistoryStore(path)
    st.add(batch)
    st.compact(now)         # as vgpud keeps it: raw samples of the last day, aggregates before
    st.close()


def hhmm(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def compute_config(base: dict, night: bool, forecast: str = "off") -> dict:
    """The demo's profiles and windows: day [now - 6 h, now + 6 h) or night
    from the present minute on (the day window closed at it)."""
    now = time.time()
    if night:
        n = now - now % 60
        d = n + 12 * 3600
    else:
        d, n = now - 6 * 3600, now + 6 * 3600
    profiles = json.loads(json.dumps(PROFILES))
    profiles["inference-night"].update(forecast=forecast, forecast_label=INF_LABEL,
                                       forecast_lead=LEAD)
    cfg = json.loads(json.dumps(base))
    cfg.setdefault("profiles", {}).update(profiles)
    cfg["schedule"] = [
        {"label": INF_LABEL, "profile": "inference-day", "from": hhmm(d), "to": hhmm(n)},
        {"label": TRN_LABEL, "profile": "training-night", "from": hhmm(n), "to": hhmm(d)},
        {"label": INF_LABEL, "profile": "inference-night", "from": hhmm(n), "to": hhmm(d)}]
    return cfg


def reload(demo: Demo, cfg: dict) -> None:
    """Write the config, SIGHUP vgpud, wait until the reload is applied."""
    n = demo.log_all("vgpud.log").count("reload: applied")
    demo.vgpud.write_config(cfg)
    demo.vgpud.reload()
    if not poll(lambda: demo.log_all("vgpud.log").count("reload: applied") > n, 60):
        raise SystemExit(f"demo: vgpud did not apply the reload\n{demo.log('vgpud.log')}")


def busy() -> tuple[int, dict[int, int]]:
    """nvsim's own accounting on GPU 0: (now_ns, {tgid: busy_ns})."""
    now, per = 0, {}
    for line in Path("/sys/kernel/debug/nvsim/busy").read_text().splitlines():
        f = line.split()
        if f and f[0] == "gpu" and f[1] == "0":
            now = int(f[f.index("now_ns") + 1])
        elif f and f[0] == "pid" and f[2] == "0":
            per[int(f[1])] = per.get(int(f[1]), 0) + int(f[f.index("busy_ns") + 1])
    return now, per


def expected(settings: dict[str, dict]) -> dict[str, float]:
    """What docs/compute.md's classes give saturating slices: high before
    low; within a priority fixed caps and burst floors first, then the rest
    to share and burst slices by weight."""
    out = {n: 0.0 for n in settings}
    left = 100.0
    for prio in ("high", "low"):
        mem = {n: c for n, c in settings.items() if c["priority"] == prio}
        for n, c in mem.items():
            if c["policy"] in ("fixed", "burst"):
                out[n] = min(c["percent"], left)
                left -= out[n]
        w = {n: c["percent"] for n, c in mem.items() if c["policy"] in ("share", "burst")}
        if w:
            rest, tot = left, sum(w.values())
            for n, x in w.items():
                out[n] += rest * x / tot
            left = 0.0
    return out


def measure(demo: Demo, title: str) -> bool:
    pids = {n: demo.task_pids(n) for n, _, _ in COMPUTE}
    show = {n: demo.api.ok("show", container=n)["slice"] for n, _, _ in COMPUTE}
    settings = {n: show[n]["compute"] for n in show}
    want = expected(settings)
    t0, b0 = busy()
    time.sleep(WINDOW)
    t1, b1 = busy()
    say(f"\n==== {title}: configured vs achieved over {WINDOW:.0f} s (nvsim's busy time, "
        f"GPU 0) ====")
    rows, ok = [], True
    for n, _, _ in COMPUTE:
        got = sum(b1.get(p, 0) - b0.get(p, 0) for p in pids[n]) / (t1 - t0) * 100
        c = settings[n]
        diff = got - want[n]
        ok &= abs(diff) <= TOL
        rows.append([n, show[n]["profile"] or "-",
                     f"{c['policy']} {c['percent']:g}% {c['priority']}",
                     f"{want[n]:.1f}%", f"{got:.1f}%", f"{diff:+.1f} pt"])
    table(["WORKLOAD", "PROFILE IN FORCE", "CONFIGURED", "EXPECTED", "ACHIEVED", "OFF BY"], rows)
    if not ok:
        say(f"  FAILED: achieved is off by more than {TOL:g} points")
    return ok


def vgpuctl_text(*args: str) -> str:
    r = subprocess.run([str(VENV / "vgpuctl"), *args], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"demo: vgpuctl {' '.join(args)} failed ({r.returncode}): "
                         f"{r.stderr.strip()}")
    return r.stdout


def compute_part(demo: Demo) -> bool:
    t_start = time.monotonic()
    base = demo.base_cfg
    demo.api = demo.vgpud.api()
    say("\n==== GPU time: inference by day, training by night, on one GPU "
        "(compressed time) ====")
    reload(demo, compute_config(base, night=False))

    def start(name: str, ns: str, ann: dict) -> None:
        demo.ctr_run(name, {"io.kubernetes.cri.container-type": "container",
                            "io.kubernetes.cri.sandbox-namespace": ns,
                            "io.kubernetes.cri.sandbox-name": f"{ns}-0",
                            "io.kubernetes.cri.container-name": name,
                            "vgpu.io/container-memory": "2GiB",
                            "vgpu.io/container-gpus": "0", **ann},
                     f"exec > /shared/{name}.out 2>&1; exec {PY} {WORK}")
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(COMPUTE)) as ex:       # as a node starts two pods
        for f in [ex.submit(start, *c) for c in COMPUTE]:
            f.result()
    say(f"  two containers through ctr, as containerd's CRI runs a pod's container (started "
        f"together in {time.monotonic() - t0:.1f} s):")
    for name, ns, ann in COMPUTE:
        sl = demo.api.ok("show", container=name)["slice"]
        say(f"    {name}: label {NS}={ns}, slice {sl['slice_id']} on GPU 0; keeps its "
            f"channel full of 2 ms work items")
    say(f"  schedule (vgpud.toml, reloaded with SIGHUP): {INF_LABEL} gets inference-day by "
        f"day and inference-night by night; {TRN_LABEL} gets training-night by night "
        f"(training-day, its own profile, by day)")

    pids = {}

    def running() -> bool:
        for n, _, _ in COMPUTE:
            pids[n] = pids.get(n) or demo.task_pids(n)
        _, b = busy()
        return all(any(b.get(p, 0) > 0 for p in pids[n]) for n, _, _ in COMPUTE)
    if not poll(running, 120, 0.5):
        outs = "\n".join(f"{n}: {(demo.shared / f'{n}.out').read_text()[-1500:]}"
                         for n, _, _ in COMPUTE if (demo.shared / f"{n}.out").exists())
        raise SystemExit(f"demo: the GPU workloads did not start\n{outs}")
    time.sleep(SETTLE)
    ok = measure(demo, "day (08:00-20:00 moved around now)")

    reload(demo, compute_config(base, night=True))
    say(f"\n  ... night falls: the windows moved so that night opens at {hhmm(time.time())}, "
        f"vgpud reloaded")
    if not poll(lambda: demo.api.ok("show", container="inference")["slice"]["profile"]
                == "inference-night", 60):
        say("  FAILED: inference did not switch to inference-night")
        ok = False
    time.sleep(SETTLE)
    ok &= measure(demo, "night")

    say(f"\n==== a forecast-driven adjustment: inference-night gets forecast = \"act\", "
        f"forecast_lead = \"{LEAD}\" ====")
    say(f"  the history file was seeded before vgpud started with {HISTORY_DAYS} past days of "
        f"{INF_LABEL}: 0.6 of a GPU for 12 h a day from the next hour on, 0.05 otherwise")
    evlog = open(demo.tmp / "events.txt", "w")
    ev = subprocess.Popen([str(VENV / "vgpuctl"), "events"], stdout=evlog,
                          stderr=subprocess.STDOUT)
    evlog.close()
    try:
        time.sleep(1.0)
        reload(demo, compute_config(base, night=True, forecast="act"))
        raised = poll(lambda: (demo.api.ok("show", container="inference")["slice"]["compute"]
                               ["percent"] or 0) > 20.5, 90)
        poll(lambda: "forecast-adjust" in (demo.tmp / "events.txt").read_text(), 10)
    finally:
        ev.send_signal(signal.SIGINT)
        try:
            ev.wait(10)
        except subprocess.TimeoutExpired:
            ev.kill()
            ev.wait()
    lines = [ln for ln in (demo.tmp / "events.txt").read_text().splitlines()
             if "forecast" in ln]
    say("  vgpuctl events:")
    for ln in lines or ["(no forecast event)"]:
        say(f"    {ln}")
    if not raised or not lines:
        say("  FAILED: no forecast-adjust raised inference's compute")
        ok = False
    say("  vgpuctl list:")
    for ln in vgpuctl_text("list").splitlines():
        say(f"    {ln}")
    say(f"  vgpuctl forecast {INF_LABEL} --hours 3:")
    for ln in vgpuctl_text("forecast", INF_LABEL, "--hours", "3").splitlines():
        say(f"    {ln}")
    time.sleep(SETTLE)
    ok &= measure(demo, "night, after the forecast's raise")

    demo.stop_containers()
    gone = poll(lambda: not demo.api.ok("list")["slices"], 60)
    demo.api.close()
    say(f"\nthe containers were stopped and deleted; their slices released: "
        f"{'yes' if gone else 'NO'} (the GPU-time part took "
        f"{time.monotonic() - t_start:.0f} s)")
    return ok and bool(gone)


def smi_part(demo: "Demo") -> bool:
    """What NVIDIA's nvidia-smi printed inside each container while its
    workload held the quota: one GPU, the quota as the total and as the
    memory used, and no other slice's process."""
    say("\n==== NVIDIA's nvidia-smi (535.261.03) inside each container, while it holds "
        "its quota ====")
    res = demo.wait_results("smi", [n for n, _, _ in CONTAINERS])
    t = res["inference-a"]["table"]
    say("  inference-a$ nvidia-smi")
    say("\n".join("    " + ln for ln in t["out"].rstrip().splitlines()))
    ok = t["rc"] == 0
    rows = []
    for name, _, memory in CONTAINERS:
        q, a = res[name]["gpu"], res[name]["apps"]
        gpu_rows = [[f.strip() for f in ln.split(",")] for ln in q["out"].splitlines()
                    if ln.count(",") == 3] if q["rc"] == 0 else []
        apps = [ln.strip() for ln in a["out"].splitlines() if ln.strip()] if a["rc"] == 0 else []
        want = f"{int(memory[:-3]) * 1024} MiB"
        # used = the quota: the workload holds all of it.  Its process has no
        # compute context (memory only), and NVML's compute apps are the
        # processes with compute objects (GPU_GET_PIDS of a compute class,
        # gpuGetProcWithObject), so the list is empty here, as on the driver
        good = (len(gpu_rows) == 1 and gpu_rows[0][2] == want and gpu_rows[0][3] == want
                and not apps)
        ok &= good
        rows.append([name, memory, *(gpu_rows[0] if len(gpu_rows) == 1 else
                                     ["?", q["out"].strip()[:40], "?", "?"]),
                     "; ".join(apps) or a["out"].strip()[:40], "yes" if good else "NO"])
    table(["CONTAINER", "QUOTA", "GPU", "NAME", "MEMORY.TOTAL", "MEMORY.USED",
           "COMPUTE APPS (pid, memory)", "OK"], rows)
    say(f"nvidia-smi in every container showed one GPU with its quota as the total, all of it "
        f"used by its own workload, and no other container's process: {'yes' if ok else 'NO'}")
    return ok


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

        if NVIDIA_SMI.exists():
            ok &= smi_part(demo)
        else:
            say(f"\n(NVIDIA's nvidia-smi is not unpacked at {NVIDIA_SMI}: `make deps` "
                f"fetches it; its part is skipped)")

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
        ok &= compute_part(demo)
        say(f"\ndemo {'passed' if ok else 'FAILED'}")
        return 0 if ok else 1
    finally:
        demo.close()


if __name__ == "__main__":
    sys.exit(main())
