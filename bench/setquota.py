"""`vgpuctl set-quota` end to end: from the CLI's start to its exit, which
comes after vgpud's reply, which vgpud sends once vgpu.ko has applied the
quota.  Against a running vgpud (--socket, or $VGPU_SOCKET), or one of its
own (--start-vgpud: tools/testbed/vgpud_launcher.py, on the example config with its
state under a temporary directory, stopped at the end); compared with the bare interpreter start (`python -c
pass`) of the same interpreter, so that the difference is what vgpuctl and
the set-quota path add.

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        .venv/bin/python bench/setquota.py --start-vgpud --runs 200

Unless --container names an existing slice, it creates one (bench-setquota,
for its own pid) and deletes it afterwards.  Each run alternates the memory
quota between two values so that every call really changes the kernel's
limit.  Target (a quota change is applied at once): median set-quota - median python start < 20 ms.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def timed(cmd: list[str], env: dict, check: bool = True) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if check and r.returncode != 0:
        sys.exit(f"setquota: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode().strip()}")
    return dt


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, round(p / 100 * len(xs) + 0.5) - 1))
    return xs[k]


def vgpuctl_cmd(explicit: str | None) -> list[str]:
    if explicit:
        return explicit.split()
    script = os.path.join(os.path.dirname(sys.executable), "vgpuctl")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "vgpu.cli.ctl"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--socket", help="vgpud's socket (default: $VGPU_SOCKET or /run/vgpu/vgpud.sock)")
    where.add_argument("--start-vgpud", action="store_true",
                       help="start a vgpud of its own for the run (tools/testbed/vgpud_launcher.py, "
                            "the example config)")
    ap.add_argument("--container", help="an existing slice to change (default: create one)")
    ap.add_argument("--vgpuctl", help="the command to run (default: the venv's vgpuctl)")
    ap.add_argument("--sizes", default="1GiB,2GiB", help="memory quotas to alternate")
    a = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("PYTHONPATH", REPO)
    if a.socket:
        env["VGPU_SOCKET"] = a.socket
    with contextlib.ExitStack() as stack:
        if a.start_vgpud:
            sys.path.insert(0, REPO)
            from tools.testbed.vgpud_launcher import example_config, running
            tmp = tempfile.mkdtemp(prefix="vgpud-setquota-")
            d = stack.enter_context(running(tmp, example_config(tmp), wait_kernel=True))
            env["VGPU_SOCKET"] = d.sock
        return measure(a, env)


def measure(a: argparse.Namespace, env: dict) -> int:
    ctl = vgpuctl_cmd(a.vgpuctl)
    sizes = a.sizes.split(",")
    name = a.container or "bench-setquota"
    created = False
    if not a.container:
        subprocess.run([*ctl, "delete", name, "--force"], env=env, capture_output=True)
        timed([*ctl, "create", name, "--pid", str(os.getpid()), "--memory", sizes[0]], env)
        created = True
    try:
        # warm the page cache and the daemon; interleave the two series so
        # that drift of the machine affects both alike
        for _ in range(5):
            timed([sys.executable, "-c", "pass"], env)
            timed([*ctl, "set-quota", name, "--memory", sizes[0]], env)
        bare, setq, helps = [], [], []
        for i in range(a.runs):
            bare.append(timed([sys.executable, "-c", "pass"], env))
            setq.append(timed([*ctl, "set-quota", name, "--memory", sizes[i % len(sizes)]], env))
            helps.append(timed([*ctl, "--help"], env))
    finally:
        if created:
            subprocess.run([*ctl, "delete", name, "--force"], env=env, capture_output=True)

    rows = [("python -c pass", bare), ("vgpuctl --help", helps),
            ("vgpuctl set-quota", setq)]
    print(f"runs: {a.runs}   vgpuctl: {' '.join(ctl)}   python: {sys.executable}")
    print(f"{'':<20}{'median ms':>10}{'p99 ms':>10}{'min ms':>10}")
    for label, xs in rows:
        print(f"{label:<20}{statistics.median(xs) * 1e3:>10.2f}{pct(xs, 99) * 1e3:>10.2f}"
              f"{min(xs) * 1e3:>10.2f}")
    added = (statistics.median(setq) - statistics.median(bare)) * 1e3
    added99 = (pct(setq, 99) - pct(bare, 99)) * 1e3
    print(f"set-quota adds {added:.2f} ms (median), {added99:.2f} ms (p99) beyond the "
          f"interpreter's start; target < 20 ms: {'met' if added < 20 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
