"""vgpuctl's start: `vgpuctl --help` and `vgpuctl list` from the process's
start to its exit, beside the bare interpreter start of the same
interpreter, interleaved so that drift of the machine hits all alike.  On the
host, no VM, no vgpu.ko:

    .venv/bin/python bench/cli_start.py [--runs 200] [--package DIR] [--compare DIR]

(--package: the directory whose vgpu package is measured, default this
checkout; --compare: another one, e.g. an older commit's, whose --help and
list run in the same loop, so that a loaded machine hits both alike:
`git archive ee7b375 vgpu | tar -x -C /tmp/base`, then --compare /tmp/base.)

`list` talks to tools/testbed/fake_vgpud.py (the CLI's test fake, on a socket
under a temporary directory, with three slices), so it is the CLI's own
cost plus one request/reply on a Unix socket, not vgpud's.  `list, no
vgpud` is the same command against a socket path where nothing listens
(exit status 3), the CLI's cost without the reply.

Two groups of rows:

- `venv`: the venv's `vgpuctl` console script (as a node runs it), this
  checkout's package first on PYTHONPATH, against `python -I -c pass` and
  `python -c pass`.  A development venv's editable install adds its import
  finder to every start, both the bare one and vgpuctl's (site imports
  pathlib, re, ... for it), so those modules cost vgpuctl nothing here;
- `no site`: `python -I -S` running vgpuctl's main from this checkout
  against `python -I -S -c pass`: every module vgpuctl needs beyond the
  interpreter's own is paid for, as on a node whose site imports none.

Beside the wall-clock medians, the median CPU time (user + system) of each
process: on a machine other work keeps busy, the wall-clock figures grow
with the wait for a CPU, the CPU times much less.

Target (issue 34): `vgpuctl --help` and `vgpuctl list` within 20 ms of the
bare `python -I -c pass` (median).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from bench.setquota import vgpuctl_cmd  # noqa: E402
from tools.testbed.fake_vgpud import FakeVgpud, make_slice  # noqa: E402

TARGET_MS = 20.0


def cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], env: dict, expect: int) -> tuple[float, float]:
    """-> (wall seconds, CPU seconds of the process, user + system)."""
    c = cpu_children()
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != expect:
        sys.exit(f"cli_start: {' '.join(cmd)} exited {r.returncode}, not {expect}: "
                 f"{r.stderr.decode().strip()}")
    return dt, cpu_children() - c


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, round(p / 100 * len(xs) + 0.5) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--package", default=REPO,
                    help="the directory holding the vgpu package to measure (default: this "
                         "checkout)")
    ap.add_argument("--compare", metavar="DIR",
                    help="also run --help and list of the vgpu package in DIR, interleaved")
    a = ap.parse_args()
    pkg = os.path.abspath(a.package)

    tmp = tempfile.mkdtemp(prefix="vgpuctl-start-")
    sock = os.path.join(tmp, "vgpud.sock")
    env = dict(os.environ, PYTHONPATH=pkg, VGPU_SOCKET=sock)
    env_none = dict(env, VGPU_SOCKET=os.path.join(tmp, "none.sock"))
    py = sys.executable
    ctl = vgpuctl_cmd(None)
    # the same main() without site: sys.path gets this checkout by hand
    nosite = [py, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {pkg!r}); "
              "from vgpu.cli.ctl import main; sys.exit(main())"]
    series = [  # (group, label, command, env, exit status)
        ("venv", "python -I -c pass", [py, "-I", "-c", "pass"], env, 0),
        ("venv", "python -c pass", [py, "-c", "pass"], env, 0),
        ("venv", "vgpuctl --help", [*ctl, "--help"], env, 0),
        ("venv", "vgpuctl list", [*ctl, "list"], env, 0),
        ("venv", "list, no vgpud", [*ctl, "list"], env_none, 3),
    ]
    if a.compare:
        other = dict(env, PYTHONPATH=os.path.abspath(a.compare))
        series += [
            ("venv", "--help, --compare", [*ctl, "--help"], other, 0),
            ("venv", "list, --compare", [*ctl, "list"], other, 0),
        ]
    series += [
        ("no site", "python -I -S -c pass", [py, "-I", "-S", "-c", "pass"], env, 0),
        ("no site", "vgpuctl --help", [*nosite, "--help"], env, 0),
        ("no site", "vgpuctl list", [*nosite, "list"], env, 0),
    ]
    times: list[list[float]] = [[] for _ in series]
    cpus: list[list[float]] = [[] for _ in series]
    with FakeVgpud(sock) as fake:
        for i, name in enumerate(("train-a", "infer-b", "notebook-c")):
            fake.slices[name] = make_slice(name, i + 1, {"gpus": [i % 2], "pid": 100 + i})
        for _ in range(5):                      # warm the page cache
            for _g, _l, cmd, e, rc in series:
                timed(cmd, e, rc)
        for _ in range(a.runs):
            for k, (_g, _l, cmd, e, rc) in enumerate(series):
                wall, cpu = timed(cmd, e, rc)
                times[k].append(wall)
                cpus[k].append(cpu)
    os.rmdir(tmp)

    print(f"runs: {a.runs}   vgpuctl: {' '.join(ctl)}   python: {py}\npackage: {pkg}"
          + (f"   --compare: {os.path.abspath(a.compare)}" if a.compare else ""))
    print(f"{'':<30}{'median ms':>10}{'p90 ms':>10}{'min ms':>10}{'+ms med':>10}"
          f"{'cpu ms':>10}{'+cpu ms':>10}")
    med = {}
    base = {"venv": None, "no site": None}
    cbase = {"venv": None, "no site": None}
    for (group, label, _c, _e, _rc), xs, cs in zip(series, times, cpus):
        m, c = statistics.median(xs) * 1e3, statistics.median(cs) * 1e3
        med[(group, label)] = m
        if base[group] is None:
            base[group], cbase[group] = m, c
        print(f"{group + ': ' + label:<30}{m:>10.2f}{pct(xs, 90) * 1e3:>10.2f}"
              f"{min(xs) * 1e3:>10.2f}{m - base[group]:>+10.2f}{c:>10.2f}{c - cbase[group]:>+10.2f}")
    for label in ("vgpuctl --help", "vgpuctl list"):
        added = med[("venv", label)] - base["venv"]
        print(f"{label} adds {added:.2f} ms (median) to `python -I -c pass`; "
              f"target < {TARGET_MS:.0f} ms: {'met' if added < TARGET_MS else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
