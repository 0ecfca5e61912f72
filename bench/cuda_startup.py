#!/usr/bin/env python3
"""A user's workload through a slice against the same on nvsim directly:
NVIDIA's libcuda (535.261.03, Debian's user space) runs a fixed driver-API
sequence in a fresh process, and each phase is timed inside that process.

The sequence (one process, libcuda loaded by ctypes, tools/testbed/cuda.py):

  start-up   cuInit, cuDeviceGet, cuCtxCreate
  alloc      --allocs x cuMemAlloc of --chunk
  free       cuMemFree of each
  copy       --copies round trips: cuMemcpyHtoD then cuMemcpyDtoH of
             --copy-bytes, the bytes compared, the buffer freed
  destroy    cuCtxDestroy

"whole" is cuInit to cuCtxDestroy's return; "process" is the child's life
from fork to exit as the parent sees it (the interpreter's start and
libcuda's load included; through the slice also the mount namespace and
the bind mounts the OCI hook would make).  Each round runs the sequence
once directly and once through the slice, in a new process each, the
order alternating, so that drift hits both alike; the figures are medians
over the rounds, and the ratio is slice / direct of the medians (and the
median of the rounds' own ratios).  Target: whole <= 1.15x.

Then one more run of each, not timed, with every NVIDIA ioctl logged by
build/nvlog.so: the calls per run, by kind (RM control / alloc / free /
map / UVM ...) and by node.

Runs inside the VM with nvsim as a GH100 presenting 535.261.03 with
fb_backing=1 (what libcuda's cuCtxCreate needs) and vgpu.ko loaded
(`make bench-cuda`, bench/README.md).  Exit status 0 unless setup or a
run fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.testbed.cuda import (RELEASE, in_slice, libcuda_missing, nvlog_lines,  # noqa: E402
                                run_cuda)
from vgpu.vgpuko.client import VgpuKernel  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
PARAMS = Path("/sys/module/nvsim/parameters")

PHASES = ("startup", "alloc", "free", "copy", "destroy", "whole")

# The child's program (after tools/testbed/cuda.py's PRELUDE): perf_counter_ns
# between the phases, the same Python on both sides.
BODY = """
    import time
    T = time.perf_counter_ns
    t0 = T()
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    check('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    t1 = T()
    ptrs = []
    for i in range(ALLOCS):
        p = ctypes.c_uint64()
        check('cuMemAlloc_v2', ctypes.byref(p), ctypes.c_size_t(CHUNK))
        ptrs.append(p.value)
    t1a = T()
    for q in ptrs:
        check('cuMemFree_v2', ctypes.c_uint64(q))
    t2 = T()
    n = COPY_BYTES
    d = ctypes.c_uint64()
    check('cuMemAlloc_v2', ctypes.byref(d), ctypes.c_size_t(n))
    src = ctypes.create_string_buffer(bytes((i * 7 + 3) & 255 for i in range(256)) * (n // 256))
    dst = ctypes.create_string_buffer(n)
    ok = True
    for i in range(COPIES):
        ctypes.memset(dst, 0, n)
        check('cuMemcpyHtoD_v2', d, src, ctypes.c_size_t(n))
        check('cuMemcpyDtoH_v2', dst, d, ctypes.c_size_t(n))
        ok = ok and dst.raw == src.raw[:n]
    check('cuMemFree_v2', d)
    t3 = T()
    check('cuCtxDestroy_v2', ctx)
    t4 = T()
    out['copied'] = ok
    out['ns'] = [t1 - t0, t1a - t1, t2 - t1a, t3 - t2, t4 - t3, t4 - t0]
    out['ncalls'] = len(out.pop('calls'))
    print(json.dumps(out))
"""

# The direct side runs under the same wrapper as the slice's (a private mount
# namespace, then exec), less the bind mounts, so "process" differs by those.
DIRECT = ["unshare", "-m", "sh", "-c", 'exec "$@"', "sh"]


def body(args) -> str:
    return (f"    ALLOCS, CHUNK = {args.allocs}, {args.chunk}\n"
            f"    COPIES, COPY_BYTES = {args.copies}, {args.copy_bytes}\n" + BODY)


USAGE = ("ru_utime", "ru_stime", "ru_minflt", "ru_majflt", "ru_nvcsw", "ru_nivcsw")


def child_usage() -> list[float]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [getattr(r, k) for k in USAGE]


def tasks() -> dict[str, int]:
    """Every thread's CPU time (utime + stime, ticks) by 'comm/tid'."""
    out = {}
    for st in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        try:
            t = st.read_text()
        except OSError:
            continue
        comm = t[t.index("(") + 1:t.rindex(")")]
        f = t[t.rindex(")") + 2:].split()
        out[f"{comm}/{st.parent.name}"] = int(f[11]) + int(f[12])
    return out


def run_once(code: str, prefix: list[str], nvlog: Path | None = None) -> dict:
    u = child_usage()
    t = time.perf_counter_ns()
    r = run_cuda(code, argv_prefix=prefix, nvlog=nvlog, timeout=900)
    wall = time.perf_counter_ns() - t
    usage = [after - before for after, before in zip(child_usage(), u)]
    if r.returncode != 0:
        raise SystemExit(f"the sequence failed ({' '.join(prefix[:2])}...): "
                         f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.splitlines()[-1])
    if not out["copied"]:
        raise SystemExit("cuMemcpy round trip: the bytes read back differ")
    out["wall"] = wall
    # the child's own CPU time (user, system), page faults (minor, major)
    # and context switches (voluntary, involuntary), its threads' and the
    # wrapper's included
    out["usage"] = usage
    return out


def kind(line: str) -> str:
    """nvlog's line ('nvidiactl control h=... cmd=0x...') -> 'nvidiactl control'."""
    node, rest = line.split(" ", 1)
    word = rest.split(" ", 1)[0]
    if word.startswith("esc="):
        word = "escape " + word[4:]
    elif word.startswith("req="):
        word = "other"
    return f"{node} {word}"


def count(code: str, prefix: list[str], log: Path) -> tuple[collections.Counter,
                                                             collections.Counter]:
    """(the run's ioctls by kind, its RM controls by command)."""
    log.unlink(missing_ok=True)
    run_once(code, prefix, nvlog=log)
    lines = nvlog_lines(log)
    cmds = collections.Counter(ln.split(" cmd=")[1].split()[0] for ln in lines
                               if " control " in ln and " cmd=" in ln)
    return collections.Counter(kind(ln) for ln in lines), cmds


ESC = {0x27: "ALLOC_MEMORY", 0x29: "FREE", 0x2a: "CONTROL", 0x2b: "ALLOC",
       0x34: "DUP_OBJECT", 0x35: "SHARE", 0x4a: "VID_HEAP_CONTROL", 0x4e: "MAP_MEMORY",
       0x4f: "UNMAP_MEMORY", 0x57: "MAP_MEMORY_DMA", 0x58: "UNMAP_MEMORY_DMA",
       0x5e: "UPDATE_DEVICE_MAPPING_INFO", 0xc8: "CARD_INFO", 0xc9: "REGISTER_FD",
       0xce: "ALLOC_OS_EVENT", 0xcf: "FREE_OS_EVENT", 0xd2: "CHECK_VERSION_STR",
       0xd6: "SYS_PARAMS", 0xd7: "NUMA_INFO", 0xda: "WAIT_OPEN_COMPLETE"}
SYSCALL = re.compile(r"^(\d+)\s+(?:(\w+)\((.*)|<\.\.\. (\w+) resumed>(.*))$")
DONE = re.compile(r"= -?\w+.* <(\d+\.\d+)>$")


def strace_key(name: str, args: str) -> str:
    """ioctl(3</dev/nvidiactl>, _IOC(..., 0x46, 0x2a, 0x20), ...) -> 'nvidiactl CONTROL'."""
    fd = re.search(r"\d+<(/dev/[^>]*)>", args)
    node = os.path.basename(fd.group(1)) if fd else "-"
    if name != "ioctl":
        return f"{node} {name}" if fd else name
    ioc = re.search(r"_IOC\(([^)]*)\)", args)
    if ioc:
        typ, nr = ioc.group(1).split(", ")[1:3]
        return f"{node} {ESC.get(int(nr, 16), nr) if typ == '0x46' else 'ioctl ' + nr}"
    req = args.split(", ")[1] if ", " in args else "?"
    return f"{node} ioctl {req}"


def profile(code: str, prefix: list[str], log: Path) -> dict[str, list[float]]:
    """One run under strace -f -T: {key: [calls, seconds in the syscall]}
    for the ioctls, mmaps and munmaps of every thread."""
    log.unlink(missing_ok=True)
    run_once(code, [*prefix, "strace", "-f", "-qq", "-T", "-y", "-e",
                    "trace=ioctl,mmap,munmap", "-o", str(log)])
    acc: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    pending: dict[str, str] = {}
    for line in log.read_text().splitlines():
        m = SYSCALL.match(line)
        if not m:
            continue
        pid = m.group(1)
        if m.group(2):
            key = strace_key(m.group(2), m.group(3))
            rest = m.group(3)
            if rest.endswith("<unfinished ...>"):
                pending[pid] = key
                continue
        else:
            key, rest = pending.pop(pid, m.group(4)), m.group(5)
        t = DONE.search(rest)
        if t:
            acc[key][0] += 1
            acc[key][1] += float(t.group(1))
    return acc


def perf_top(code: str, prefix: list[str], data: Path, callers: str | None,
             n: int = 20) -> list[str]:
    """One run under perf record (cpu-clock samples of the child, kernel and
    user): the n symbols with most samples, as perf report prints them; with
    callers, also the call chains into that symbol (perf record -g)."""
    run_once(code, [*prefix, "perf", "record", "-q", "-e", "cpu-clock", "-F", "997",
                    *(["-g"] if callers else []), "-o", str(data), "--"])
    r = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "-q",
                        "-g", "none", "--sort", "dso,sym"],
                       capture_output=True, text=True, timeout=600)
    out = [ln.rstrip() for ln in r.stdout.splitlines() if ln.strip()][:n] or [r.stderr[-500:]]
    if callers:
        r = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "-q",
                            "--sort", "sym", "-S", callers, "-G", "-g", "caller,2,callee"],
                           capture_output=True, text=True, timeout=600)
        out += [f"callers of {callers}:"] + [ln.rstrip() for ln in r.stdout.splitlines()
                                             if ln.strip()][:60]
    return out


def check_nvsim() -> str | None:
    if not PARAMS.exists():
        return "nvsim is not loaded"
    for k, ok in (("driver_version", (RELEASE,)), ("fb_backing", ("1", "Y"))):
        f = PARAMS / k
        got = f.read_text().strip() if f.exists() else "?"
        if got not in ok:
            return f"nvsim's {k} is {got}, libcuda needs {ok[0]} (see bench/README.md)"
    if not Path("/sys/module/vgpu").exists():
        return "vgpu.ko is not loaded (--load-vgpu)"
    return libcuda_missing()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="rounds (one run each side)")
    ap.add_argument("--allocs", type=int, default=100, help="cuMemAlloc/cuMemFree pairs")
    ap.add_argument("--chunk", type=int, default=2 * MiB, help="bytes per cuMemAlloc")
    ap.add_argument("--copies", type=int, default=10, help="HtoD+DtoH round trips")
    ap.add_argument("--copy-bytes", type=int, default=1 * MiB, help="bytes per cuMemcpy")
    ap.add_argument("--quota", type=int, default=4 * GiB, help="the slice's memory quota")
    ap.add_argument("--slice-id", type=int, default=4245)
    ap.add_argument("--no-count", action="store_true", help="skip the nvlog-counted runs")
    ap.add_argument("--perf", action="store_true",
                    help="also one run each under perf record: the top symbols")
    ap.add_argument("--perf-callers", metavar="SYM",
                    help="with --perf: record call graphs, print the callers of SYM")
    ap.add_argument("--strace", action="store_true",
                    help="also one run each under strace -f -T: time in each kind of call")
    args = ap.parse_args(argv)
    why = check_nvsim()
    if why:
        print(f"cuda_startup: {why}", file=sys.stderr)
        return 2
    code = body(args)

    k = VgpuKernel(timeout=20)
    d = Path(tempfile.mkdtemp(prefix="vgpudev-"))
    mounted = False
    try:
        k.slice_new(args.slice_id, gpus=[(0, args.quota)], name="bench-cuda")
        node = Path(f"/dev/vgpu/{args.slice_id}/nvidiactl")
        end = time.monotonic() + 10
        while not node.exists() and time.monotonic() < end:
            time.sleep(0.05)
        subprocess.run(["mount", "-t", "vgpudev", "-o", f"slice={args.slice_id}", "none", str(d)],
                       check=True)
        mounted = True
        sides = {"direct": DIRECT, "slice": in_slice(d)}

        # The counted runs first: untimed, they also warm the page cache
        # (libcuda's 30 MB, the interpreter) for both sides.
        counts = {}
        if not args.no_count:
            with tempfile.TemporaryDirectory() as tmp:
                for name, prefix in sides.items():
                    counts[name] = count(code, prefix, Path(tmp) / f"{name}.log")
        else:
            for prefix in sides.values():
                run_once(code, prefix)

        profiles = {}
        if args.strace:
            with tempfile.TemporaryDirectory() as tmp:
                for name, prefix in sides.items():
                    profiles[name] = profile(code, prefix, Path(tmp) / f"{name}.strace")

        perf = {}
        if args.perf:
            with tempfile.TemporaryDirectory() as tmp:
                for name, prefix in sides.items():
                    perf[name] = perf_top(code, prefix, Path(tmp) / f"{name}.data",
                                          args.perf_callers)

        others = {}
        for name, prefix in sides.items():
            before = tasks()
            run_once(code, prefix)
            after = tasks()
            others[name] = sorted(((after[k] - before.get(k, 0), k) for k in after
                                   if after[k] - before.get(k, 0) > 0
                                   and not k.startswith(("python", "unshare", "sh/"))),
                                  reverse=True)[:5]

        res = {name: [] for name in sides}
        order = list(sides)
        for i in range(args.rounds):
            for name in (order if i % 2 == 0 else order[::-1]):
                res[name].append(run_once(code, sides[name]))
            print(f"round {i + 1}/{args.rounds}: whole "
                  + ", ".join(f"{n} {res[n][-1]['ns'][5] / 1e6:.0f} ms" for n in order),
                  file=sys.stderr, flush=True)
        left = k.slice_get(args.slice_id).gpu(0).mem_used
    finally:
        if mounted:
            subprocess.run(["umount", str(d)], check=True)
        d.rmdir()
        try:
            k.slice_del(args.slice_id, force=True)
        finally:
            k.close()

    report(args, res, counts, left, profiles, others, perf)
    return 0


def report(args, res, counts, left, profiles, others, perf) -> None:
    def med(name, j):
        return statistics.median(r["ns"][j] if j < len(PHASES) else r["wall"]
                                 for r in res[name]) / 1e6

    def paired(j):
        return statistics.median(
            (a["ns"][j] if j < len(PHASES) else a["wall"]) /
            (b["ns"][j] if j < len(PHASES) else b["wall"])
            for a, b in zip(res["slice"], res["direct"]))

    print(f"libcuda {RELEASE} on nvsim directly and through a vgpu.ko slice: "
          f"medians of {args.rounds} rounds, ms; ratio slice/direct of the medians "
          f"(median of the rounds' ratios)")
    print(f"sequence: cuInit+cuCtxCreate, {args.allocs} x cuMemAlloc({args.chunk}) "
          f"then cuMemFree, {args.copies} x HtoD+DtoH of {args.copy_bytes} bytes, "
          f"cuCtxDestroy; {res['direct'][0]['ncalls']} driver-API calls")
    rows = [("phase", "direct", "slice", "ratio", "paired")]
    for j, p in enumerate((*PHASES, "process")):
        a, b = med("direct", j), med("slice", j)
        rows.append((p, f"{a:.1f}", f"{b:.1f}", f"{b / a:.2f}x", f"{paired(j):.2f}x"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  " + "  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    hz = os.sysconf("SC_CLK_TCK")
    print("the child's rusage, medians: user s, system s, minor faults, major faults, "
          "voluntary / involuntary context switches; other threads' CPU during one run")
    for n in res:
        u = [statistics.median(r["usage"][i] for r in res[n]) for i in range(len(USAGE))]
        top = ", ".join(f"{k} {t / hz:.1f} s" for t, k in others[n]) or "none"
        print(f"  {n:<6} user {u[0]:.1f} s, sys {u[1]:.1f} s, faults {u[2]:.0f}/{u[3]:.0f}, "
              f"switches {u[4]:.0f}/{u[5]:.0f}; others: {top}")
    whole = med("slice", 5) / med("direct", 5)
    verdict = "met" if whole <= 1.15 else f"missed by {whole - 1.15:.2f}x"
    print(f"target: whole sequence through a slice <= 1.15x of direct: {whole:.2f}x, {verdict}")
    print(f"the slice's memory charge after the runs: {left} bytes")
    if counts:
        cmds = {n: c[1] for n, c in counts.items()}
        counts = {n: c[0] for n, c in counts.items()}
        total = {n: sum(c.values()) for n, c in counts.items()}
        print(f"NVIDIA ioctls per run (nvlog): direct {total['direct']}, "
              f"slice {total['slice']}")
        keys = sorted(set(counts["direct"]) | set(counts["slice"]),
                      key=lambda x: -counts["direct"][x])
        for key in keys:
            a, b = counts["direct"][key], counts["slice"][key]
            print(f"  {key:<28} {a:>6} {b:>6}{'' if a == b else '   <-'}")
        diff = sorted(k for k in set(cmds["direct"]) | set(cmds["slice"])
                      if cmds["direct"][k] != cmds["slice"][k])
        print("RM controls whose count differs (direct, slice): "
              + (", ".join(f"{k} {cmds['direct'][k]}/{cmds['slice'][k]}" for k in diff) or "none"))
    if profiles:
        a, b = profiles["direct"], profiles["slice"]
        keys = sorted(set(a) | set(b), key=lambda x: -(b.get(x, [0, 0])[1] - a.get(x, [0, 0])[1]))
        ta, tb = (sum(v[1] for v in p.values()) for p in (a, b))
        print(f"time in the syscalls under strace -f -T (one run each; strace inflates it): "
              f"direct {ta * 1e3:.0f} ms, slice {tb * 1e3:.0f} ms; by slice - direct:")
        print(f"  {'call':<34} {'n direct':>8} {'n slice':>8} {'ms direct':>10} {'ms slice':>10}")
        for key in keys[:15]:
            na, sa = a.get(key, [0, 0.0])
            nb, sb = b.get(key, [0, 0.0])
            print(f"  {key:<34} {na:>8} {nb:>8} {sa * 1e3:>10.1f} {sb * 1e3:>10.1f}")
    for n, lines in perf.items():
        print(f"perf record, {n}: the top symbols (samples of the child process)")
        for ln in lines:
            print("  " + ln)
    print(json.dumps({"rounds": args.rounds,
                      "median_ms": {n: {p: med(n, j) for j, p in enumerate((*PHASES, "process"))}
                                    for n in res},
                      "ioctls": {n: sum(c.values()) for n, c in counts.items()}}))


if __name__ == "__main__":
    sys.exit(main())
