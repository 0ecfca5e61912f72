"""What the OCI hook adds to a container start, and vgpufs's latency.

    # in the VM, against vgpud + vgpufs + vgpu.ko + nvsim (the real path;
    # vgpud started by tools/testbed/vgpud_launcher.py):
    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        .venv/bin/python bench/container_start.py
    # on the host (no kernel module there): the hook against
    # tools/testbed/fake_vgpud.py and a directory of mknod'ed nodes
    .venv/bin/python bench/container_start.py

Start: `runc create` + `runc start` of a busybox container running `true`,
median and p90 of N (default 20) starts, for
  plain       runc, no hook (what any container costs);
  no-slice    through vgpu-runtime, a container that asks for nothing (the
              C fast path scans config.json and execs runc; no Python);
  slice       through vgpu-runtime with vgpu.io/memory: the fast path execs
              the Python slow path (python -IS), which wires the hook into
              config.json and execs runc; the createRuntime hook (the
              wrapper's own default entry, python -I -S -c) makes one API
              call creating the slice, bind mounts, device rule.
vgpu-runtime is built from container-hook/vgpu-runtime.c into the bench's
temporary directory, as `make install` builds it, with its slow path a
`#!python -IS` script as `make install` writes it.
The teardown (`runc delete`, which runs the poststop hook that releases the
slice) is reported apart.

vgpufs (VM only): lookup (stat of a slice's dev node), open+read+close of a
/proc/driver/nvidia information file, and readdir of the mount root with
many slices, warm (kernel caches hot) and cold (dentries dropped first).
Figures go to stdout; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.testbed.fake_vgpud import FakeVgpud  # noqa: E402
from tools.testbed.vgpud_launcher import Vgpud, VgpudError, config  # noqa: E402

PY = sys.executable
RUNC = shutil.which("runc") or "/usr/sbin/runc"
BUSYBOX = shutil.which("busybox") or "/bin/busybox"
IN_VM = os.environ.get("VGPU_IN_VM") == "1" and os.path.exists("/sys/module/vgpu")


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def fmt_ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.1f} ms   p90 {q(xs, 0.9) * 1e3:7.1f} ms"


def fmt_us(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1e6:8.1f} us   p99 {q(xs, 0.99) * 1e6:8.1f} us"
            f"   (n={len(xs)})")


class Env:
    """vgpud (VM) or the fake daemon (host), the socket and the node dir."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.sock = str(tmp / "vgpud.sock")
        self.fs = str(tmp / "fs")
        self.vgpud = None
        self.fake = None
        if IN_VM:
            self.vgpud = Vgpud(tmp, config(tmp, paths={"fuse_mount": "{tmp}/fs"},
                                           defaults={"memory": "16MiB"}),
                               wait_fuse=True, start_timeout=240)
            try:
                self.vgpud.start()
            except VgpudError as e:
                sys.exit(f"bench: {e}")
        else:
            os.mkdir(self.fs)
            self.fake = FakeVgpud(self.sock)
            self.fake.__enter__()

    def add_fake_nodes(self, cid: str) -> None:
        """Host mode: what vgpufs would show for the slice (char nodes of
        /dev/null's numbers, so that bind mounts and opens work)."""
        if IN_VM:
            return
        d = Path(self.fs) / cid / "dev"
        d.mkdir(parents=True)
        st = os.stat("/dev/null")
        for n in ("nvidiactl", "nvidia0", "nvidia-uvm"):
            os.mknod(d / n, 0o666 | 0o020000, st.st_rdev)

    def wrapper(self, repo: Path = REPO) -> str:
        """vgpu-runtime (C) and its slow path, as make install lays them out,
        from the checkout ``repo`` (this one, or --baseline's)."""
        tag = "" if repo == REPO else "-baseline"
        out = self.tmp / f"vgpu-runtime{tag}"
        if not out.exists():
            slow = self.tmp / f"vgpu-runtime-slow{tag}"
            slow.write_text(f"#!{PY} -IS\nimport sys\nsys.path.insert(0, {str(repo)!r})\n"
                            f"from vgpu.cli.runtime import main\nsys.exit(main())\n")
            slow.chmod(0o755)
            cc = shutil.which("cc") or shutil.which("gcc") or sys.exit("bench: needs cc")
            subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror",
                            f'-DVGPU_SLOW_PATH="{slow}"', "-o", str(out),
                            str(repo / "container-hook" / "vgpu-runtime.c")], check=True)
        return str(out)

    def env(self) -> dict:
        # no VGPU_HOOK: the wrapper writes its own default entry (python -I
        # -S -c ...), which gets VGPU_SOCKET and VGPU_FUSE_MOUNT from here
        e = dict(os.environ, VGPU_RUNC=RUNC, VGPU_SOCKET=self.sock, VGPU_FUSE_MOUNT=self.fs)
        e.pop("VGPU_HOOK", None)
        return e

    def close(self) -> None:
        if self.vgpud is not None:
            self.vgpud.stop()
        if self.fake is not None:
            self.fake.__exit__(None, None, None)


def bundle(tmp: Path, name: str, annotations: dict | None) -> Path:
    b = tmp / "bundles" / name
    (b / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, b / "rootfs" / "bin" / "busybox")
    for c in ("sh", "true"):
        os.symlink("busybox", b / "rootfs" / "bin" / c)
    subprocess.run([RUNC, "spec"], cwd=b, check=True)
    config = json.loads((b / "config.json").read_text())
    config["process"]["terminal"] = False
    config["process"]["args"] = ["true"]
    config["root"]["readonly"] = False
    if annotations:
        config["annotations"] = annotations
    (b / "config.json").write_text(json.dumps(config))
    return b


def children_cpu() -> float:
    """CPU seconds (user + system) of the children waited for so far: runc
    waits for its hooks, we wait for runc."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_blocking(argv: list[str], out, env: dict, limit: float = 120.0) -> int:
    """Run ``argv`` (stdout and stderr to the file ``out``) and wait for it
    in one blocking waitpid: its exit status.  Not subprocess.run(timeout=):
    with a timeout, Popen.wait polls waitpid with sleeps doubling from 0.5
    to 50 ms, so every time measured around it lands on that schedule's
    steps (0.5 + 1 + ... + 16 = 31.5 ms, 63.5 ms, then every 50 ms: the
    "two groups" of plain runc's starts and up to 50 ms added to a slice's
    in the figures before 2026-12-07).  The limit is kept by a timer that
    kills the child instead."""
    p = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=out)
    watchdog = threading.Timer(limit, p.kill)
    watchdog.start()
    try:
        return p.wait()
    finally:
        watchdog.cancel()


def start_once(e: Env, kind: str, i: int,
               baseline: Path | None = None) -> tuple[float, float, float]:
    """One start (create + start) and one delete of a container of
    ``kind``: (start s, delete s, start CPU s)."""
    root = str(e.tmp / "runc-root")
    cid = f"{kind}-{i}"
    slice_ = kind.startswith("slice")
    ann = {"vgpu.io/memory": "16MiB", "vgpu.io/gpus": "0"} if slice_ else None
    b = bundle(e.tmp, cid, ann)
    if slice_:
        e.add_fake_nodes(cid)
    pre = [RUNC, "--root", root] if kind == "plain" else \
        [e.wrapper(baseline if kind == "slice-base" else REPO), "--root", root]
    # the container inherits runc's stdio: a file, never a pipe (runc
    # create returns while the container holds it open)
    logp = e.tmp / "runc.out"
    env = e.env()
    c0 = children_cpu()
    t0 = time.perf_counter()
    for cmd in (["create", "--bundle", str(b), cid], ["start", cid]):
        with open(logp, "wb") as out:
            rc = run_blocking(pre + cmd, out, env)
        if rc != 0:
            sys.exit(f"bench: {kind} {cmd[0]} {cid}: {logp.read_text().strip()}")
    start = time.perf_counter() - t0
    cpu = children_cpu() - c0
    while json.loads(subprocess.run([RUNC, "--root", root, "state", cid], capture_output=True,
                                    text=True).stdout or "{}").get("status") == "running":
        time.sleep(0.01)
    t0 = time.perf_counter()
    with open(logp, "wb") as out:
        rc = run_blocking(pre + ["delete", cid], out, env)
    delete = time.perf_counter() - t0
    if rc != 0:
        sys.exit(f"bench: delete {cid}: {logp.read_text().strip()}")
    return start, delete, cpu


KINDS = ("plain", "no-slice", "slice")


def start_times(e: Env, n: int, baseline: Path | None = None
                ) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """n starts of each kind, the kinds interleaved (plain, no-slice, slice,
    plain, ...) so that a busy host weighs on all of them alike; with a
    ``baseline`` checkout, its slice path too ("slice-base")."""
    kinds = (*KINDS, "slice-base") if baseline else KINDS
    res: dict[str, tuple[list[float], list[float], list[float]]] = \
        {k: ([], [], []) for k in kinds}
    for i in range(n):
        for k in kinds:
            for got, x in zip(res[k], start_once(e, k, i, baseline)):
                got.append(x)
    return res


def fuse_latency(e: Env, n: int, slices: int) -> None:
    from vgpu.common.apiclient import ApiClient
    names = [f"fz-{i}" for i in range(slices)]
    with ApiClient(e.sock, 60) as c:
        for name in names:
            c.request("create", container=name, pid=os.getpid(), gpus=[0], memory="1MiB")
    try:
        root = Path(e.fs)
        end = time.monotonic() + 60
        while not (root / names[0] / "dev" / "nvidia0").exists() and time.monotonic() < end:
            time.sleep(0.1)
        node = root / names[0] / "dev" / "nvidia0"
        info = next((root / names[0] / "proc/driver/nvidia/gpus").glob("*/information"))

        def measure(fn, cold: bool, k: int) -> list[float]:
            out = []
            for _ in range(k):
                if cold:
                    with open("/proc/sys/vm/drop_caches", "w") as f:
                        f.write("2")
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return out

        def read_info():
            with open(info, "rb") as f:
                f.read()

        print(f"\nvgpufs ({slices} slices live), one call each:")
        for label, fn in (("lookup (stat dev/nvidia0)", lambda: os.stat(node)),
                          ("open+read+close information", read_info),
                          (f"readdir of the root ({slices} entries)", lambda: os.listdir(root))):
            print(f"  {label:<34} warm {fmt_us(measure(fn, False, n))}")
            print(f"  {'':<34} cold {fmt_us(measure(fn, True, max(20, n // 10)))}")
    finally:
        with ApiClient(e.sock, 60) as c:
            for name in names:
                c.request("delete", container=name, force=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="container starts per kind (default 20)")
    ap.add_argument("--fuse-calls", type=int, default=1000, help="vgpufs calls per figure")
    ap.add_argument("--fuse-slices", type=int, default=100, help="live slices for vgpufs figures")
    ap.add_argument("--baseline", metavar="DIR", type=Path,
                    help="another checkout (e.g. a git worktree of an older commit) whose "
                         "vgpu-runtime and hook are timed too, interleaved ('slice-base')")
    a = ap.parse_args()
    if a.baseline and not (a.baseline / "vgpu" / "cli" / "runtime.py").is_file():
        sys.exit(f"bench: --baseline {a.baseline}: not a vgpu checkout")
    if os.geteuid() != 0 or not os.access(RUNC, os.X_OK):
        sys.exit("bench: needs root and runc")
    tmp = Path(tempfile.mkdtemp(prefix="vgpu-bench-"))
    e = Env(tmp)
    try:
        where = "VM (TCG): vgpud + vgpufs + vgpu.ko" if IN_VM else "host: fake vgpud, mknod nodes"
        print(f"container start, {where}; runc create+start of busybox `true`, n={a.n}")
        res = start_times(e, a.n, a.baseline)
        for k, (s, d, c) in res.items():
            print(f"  {k:<10} start {fmt_ms(s)}   delete {fmt_ms(d)}   start CPU median "
                  f"{statistics.median(c) * 1e3:6.1f} ms")
        base = statistics.median(res["plain"][0])
        base_cpu = statistics.median(res["plain"][2])
        for k in res:
            if k == "plain":
                continue
            print(f"  {k}: the wrapper{'' if k == 'no-slice' else ' and hook'} add "
                  f"{(statistics.median(res[k][0]) - base) * 1e3:.1f} ms to the start (median), "
                  f"{(statistics.median(res[k][1]) - statistics.median(res['plain'][1])) * 1e3:.1f}"
                  f" ms to the delete, {(statistics.median(res[k][2]) - base_cpu) * 1e3:.1f} ms "
                  f"of CPU to the start")
        print(f"  load average {os.getloadavg()[0]:.2f} at the end")
        if IN_VM:
            fuse_latency(e, a.fuse_calls, a.fuse_slices)
    finally:
        e.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
