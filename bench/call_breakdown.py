#!/usr/bin/env python3
"""Where a call through vgpu.ko's node spends its time: the ops of
bench/vgpu_overhead.py (alloc+free, FB_GET_INFO_V2; pass-through untraced
only), each on nvsim directly and through a slice.  First the untraced
medians (direct and vgpu alternating), then ftrace's function_graph tracer
restricted to a few functions: once to print the tree of the syscall,
vgpu.ko's entry and paths, the call page, its zap or write-protect and TLB
flush, the refill, the fault handler, the driver's ioctl and the
kernel-entry size query as they nested (calls and microseconds per op,
inclusive: a function called k times per op counts the median of each of
its k calls); then once per part with only what that part needs, so that
the tracer's own hooks (about 1 to 3 us per traced call under TCG) inflate
it least, for the split of the time vgpu.ko adds:

  fault      the driver's ioctl on the call page less the same escape made
             directly: the copy-out's write fault, whole (exception,
             handler, pfn_mkwrite, return), and any difference in copies
  zap        the ring's reuse (zap or write-protect with its TLB flush, and
             a refill), per op
  call page  vgpu_call_page less the driver and the zap: slot, fill, copy
             back, keep (and one traced call's hooks)
  mediation  the untraced added time less those three: parameter copies,
             lookups, charges, locks, for an allocation the size query

With --host-figures (build/tcg_factor's output on the host, as `make
bench-compute` writes it) it also runs build/tcg_factor here and scales
each part by the emulation's factor for its kind into an estimate for the
host: the fault by the write fault's, the zap by a 16-page zap's, the rest
and the direct call by the syscall's (so nvsim's own work is taken to be
inflated as a syscall is).  Runs inside the VM with nvsim and vgpu.ko
loaded, as root (tracefs):

    gcc -O2 -Wall -o build/tcg_factor bench/tcg_factor.c
    build/tcg_factor > build/tcg-host.json
    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        .venv/bin/python bench/call_breakdown.py [--calls 800] \\
        [--host-figures build/tcg-host.json]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vgpu_overhead import GiB, Side, delete_slice  # noqa: E402
from vgpu.vgpuko.client import VgpuKernel  # noqa: E402

FUNCS = [
    "__x64_sys_ioctl", "vgpu_ioctl", "vgpu_rm_alloc_path", "vgpu_rm_free_path",
    "vgpu_control_path", "vgpu_call_lock", "vgpu_call_page", "unmap_mapping_range",
    "wp_shared_mapping_range", "flush_tlb_mm_range", "vgpu_call_populate", "nvsim_ioctl", "handle_mm_fault",
    "vgpu_call_pfn_mkwrite", "vgpu_rm_mem_size",
]
OPS = [("alloc+free", "alloc_free"), ("fb-info-v2", "fb_info"),
       ("passthrough", "passthrough")]
LINE = re.compile(r"^\s*\d+\)\s+(?:[+!#*@$]\s+)?([\d.]+)?\s*(?:us)?\s*\|\s*(.*)$")


def tracefs() -> Path:
    for p in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if Path(p, "current_tracer").exists():
            return Path(p)
    raise SystemExit("no tracefs: mount debugfs (or tracefs) as root")


def put(t: Path, name: str, value: str) -> None:
    with open(t / name, "w") as f:
        f.write(value)


def setup(t: Path) -> list[str]:
    avail = set()
    with open(t / "available_filter_functions") as f:
        for line in f:
            avail.add(line.split()[0])
    funcs = [fn for fn in FUNCS if fn in avail]
    put(t, "tracing_on", "0")
    put(t, "current_tracer", "nop")
    put(t, "set_ftrace_filter", "\n".join(funcs) + "\n")
    put(t, "set_ftrace_pid", str(os.getpid()))
    put(t, "buffer_size_kb", "16384")
    put(t, "current_tracer", "function_graph")
    for opt, val in (("funcgraph-tail", "1"), ("funcgraph-proc", "0"),
                     ("funcgraph-overhead", "1"), ("funcgraph-cpu", "1")):
        try:
            put(t, "options/" + opt, val)
        except OSError:
            pass
    return funcs


def teardown(t: Path) -> None:
    put(t, "tracing_on", "0")
    put(t, "current_tracer", "nop")
    put(t, "set_ftrace_filter", "\n")
    put(t, "set_ftrace_pid", "\n")


def parse(text: str) -> dict[tuple[str, ...], list[float]]:
    """Durations (us) by call path, in trace order."""
    stack: list[str] = []
    out: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for line in text.splitlines():
        if line.startswith("#") or "=>" in line:
            continue
        m = LINE.match(line)
        if not m:
            continue
        dur = m.group(1)
        body = re.sub(r" \[[\w-]+\]", "", m.group(2).strip())  # a module's name
        if body.endswith("() {"):
            stack.append(body[:-4])
        elif body.endswith("();") and dur:
            out[tuple(stack) + (body[:-3],)].append(float(dur))
        elif body.startswith("}") and dur:
            name = re.search(r"/\* (\S+) \*/", body)
            if name and stack and stack[-1] == name.group(1):
                out[tuple(stack)].append(float(dur))
                stack.pop()
            elif name and name.group(1) in stack:
                while stack and stack[-1] != name.group(1):
                    stack.pop()
                out[tuple(stack)].append(float(dur))
                stack.pop()
            else:
                stack.clear()
    return out


def traced(t: Path, fn, n: int) -> tuple[dict[tuple[str, ...], list[float]], float]:
    """The paths traced over n ops, and the median op as timed around it (us)."""
    for _ in range(20):
        fn()
    put(t, "trace", "")
    put(t, "tracing_on", "1")
    times = [fn() for _ in range(n)]
    put(t, "tracing_on", "0")
    with open(t / "trace") as f:
        text = f.read()
    with open(t / "per_cpu/cpu0/stats") as f:
        overrun = int(re.search(r"overrun: (\d+)", f.read()).group(1))
    if overrun:
        print(f"  (trace overrun: {overrun} events lost; use fewer --calls)")
    return parse(text), statistics.median(times) / 1e3


def est(durs: list[float], n: int) -> float:
    """us per op: a function called k times per op (k whole) is the sum of
    the medians of its 1st, 2nd... call of each op (the ops alternate
    strictly, so durs[i::k] is one kind of call); a rarer one (the ring's
    write-protect, once per 16) its total over the ops."""
    k = len(durs) / n
    if k >= 0.99 and abs(k - round(k)) < 0.02:
        k = round(k)
        return sum(statistics.median(durs[i::k]) for i in range(k))
    return sum(durs) / n


def total(paths, n: int, name: str, under: str | None = None) -> float:
    """us per op in the calls of name (only those below under, if given)."""
    s = 0.0
    for p, durs in paths.items():
        if p[-1] == name and (under is None or under in p[:-1]):
            s += est(durs, n)
    return s


def count(paths, n: int, name: str, under: str | None = None) -> float:
    return sum(len(d) for p, d in paths.items()
               if p[-1] == name and (under is None or under in p[:-1])) / n


def show(paths, n: int) -> None:
    for p in sorted(paths):
        durs = paths[p]
        if len(durs) < n / 100:
            continue    # strays: a timer's, the tracer's own start
        print(f"    {'  ' * (len(p) - 1)}{p[-1]:<{max(1, 34 - 2 * (len(p) - 1))}} "
              f"{len(durs) / n:6.3f}/op {est(durs, n):8.2f} us/op")


TREE = FUNCS
DRIVER = ["nvsim_ioctl"]
CALLPAGE = ["vgpu_call_page", "nvsim_ioctl", "unmap_mapping_range",
            "wp_shared_mapping_range", "vgpu_call_populate"]
FACTORS = Path(__file__).resolve().parents[1] / "build" / "tcg_factor"


def run_pass(t: Path, funcs: list[str], sides, meth: str, n: int):
    set_filter(t, funcs)
    return [traced(t, getattr(side, meth), n)[0] for side in sides]


def set_filter(t: Path, funcs: list[str]) -> None:
    put(t, "current_tracer", "nop")
    put(t, "set_ftrace_filter", "\n".join(funcs) + "\n")
    put(t, "current_tracer", "function_graph")


def tcg_factors(host_file: str | None) -> dict[str, float] | None:
    """VM / host for each figure of bench/tcg_factor.c (build/tcg_factor,
    run here; the host's output in host_file)."""
    if not host_file:
        return None
    import json
    import subprocess
    host = json.loads(Path(host_file).read_text())
    vm = json.loads(subprocess.run([str(FACTORS)], capture_output=True, text=True,
                                   check=True, timeout=900).stdout)
    print(f"\ntcg_factor, ns: host {host}\n                 VM   {vm}")
    f = {k: vm[k] / host[k] for k in host if host.get(k, 0) > 0 and vm.get(k, 0) > 0}
    print("tcg factors (VM / host): " + ", ".join(f"{k} {v:.1f}x" for k, v in f.items()))
    return f


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--calls", type=int, default=800, help="ops traced per op, side and pass")
    ap.add_argument("--untraced", type=int, default=2000, help="ops timed without the tracer")
    ap.add_argument("--host-figures", metavar="JSON",
                    help="build/tcg_factor's output on the host: scale each part by "
                         "the emulation's factor for its kind (fault, zap, the rest "
                         "as a syscall) into an estimate for the host")
    ap.add_argument("--slice-id", type=int, default=4243)
    args = ap.parse_args(argv)
    t = tracefs()
    n = args.calls
    factors = tcg_factors(args.host_figures)

    with VgpuKernel() as k:
        s = k.slice_new(args.slice_id, gpus=[(0, 8 * GiB)], name="breakdown")
        try:
            direct, virt = Side("/dev"), Side(f"/dev/vgpu/{s.id}")
            sides = (direct, virt)
            print(f"untraced: median of {args.untraced} ops, us (direct and vgpu alternating)")
            plain = {}
            for label, meth in OPS:
                fd_, fv = getattr(direct, meth), getattr(virt, meth)
                td, tv = [], []
                for _ in range(args.untraced):
                    td.append(fd_())
                    tv.append(fv())
                md, mv = statistics.median(td) / 1e3, statistics.median(tv) / 1e3
                plain[label] = (md, mv)
                print(f"  {label:<12} direct {md:8.1f}  vgpu {mv:8.1f}  "
                      f"added {mv - md:8.1f}  ratio {mv / md:.2f}x")
            funcs = setup(t)
            print(f"\ntraced ({' '.join(funcs)}), {n} ops each; us per op, inclusive "
                  f"(each traced call costs the tracer's hooks too)")
            try:
                for label, meth in OPS[:2]:
                    pd, pv = run_pass(t, [f for f in TREE if f in funcs], sides, meth, n)
                    print(f"\n  {label}, direct:")
                    show(pd, n)
                    print(f"  {label}, vgpu:")
                    show(pv, n)
                    # The split, from passes tracing only what each part
                    # needs, so that the tracer's hooks inflate it least.
                    dd, dv = run_pass(t, DRIVER, sides, meth, n)
                    per = [x for p, d in dd.items() if p[-1] == "nvsim_ioctl" for x in d]
                    k_ = max(1, round(len(per) / n))
                    # alloc+free: the alloc, the escape the call page carries
                    drv_direct = statistics.median(per[0::k_])
                    drv_cp = total(dv, n, "nvsim_ioctl")
                    _, cv = run_pass(t, [f for f in CALLPAGE if f in funcs], sides, meth, n)
                    cp = total(cv, n, "vgpu_call_page")
                    zap = (total(cv, n, "unmap_mapping_range", "vgpu_call_page") +
                           total(cv, n, "wp_shared_mapping_range", "vgpu_call_page") +
                           total(cv, n, "vgpu_call_populate", "vgpu_call_page"))
                    rest = cp - total(cv, n, "nvsim_ioctl", "vgpu_call_page") - zap
                    fault = drv_cp - drv_direct
                    md, mv = plain[label]
                    added = mv - md
                    med = added - fault - zap - rest
                    print(f"  {label}: the {added:.1f} us vgpu.ko adds (untraced), per op:")
                    print(f"    fault      {fault:6.1f}  the driver's escape on the call page "
                          f"{drv_cp:.1f} less the same made directly {drv_direct:.1f}")
                    nz = (count(cv, n, "unmap_mapping_range", "vgpu_call_page") +
                          count(cv, n, "wp_shared_mapping_range", "vgpu_call_page"))
                    print(f"    zap        {zap:6.1f}  the ring's reuse (zap or write-protect, "
                          f"TLB flush, refill), {nz:.3f} per op")
                    print(f"    call page  {rest:6.1f}  slot, fill, copy back, keep")
                    print(f"    mediation  {med:6.1f}  the rest: parameter copies, lookups, "
                          f"charges, locks, the size query")
                    if factors:
                        fs = factors.get("syscall_ns", 1)
                        fw = factors.get("wp_fault_ns", fs)
                        fz = factors.get("zap16_ns", fs)
                        hd = md / fs
                        ha = fault / fw + zap / fz + (rest + med) / fs
                        print(f"    on the host, scaled (fault /{fw:.1f}, zap /{fz:.1f}, "
                              f"the rest and the direct call /{fs:.1f}): direct {hd:.2f} us, "
                              f"added {ha:.2f} us (fault {fault / fw:.2f}, zap {zap / fz:.2f}, "
                              f"call page and mediation {(rest + med) / fs:.2f}): "
                              f"ratio {1 + ha / hd:.2f}x")
            finally:
                teardown(t)
            direct.close()
            virt.close()
        finally:
            delete_slice(k, s.id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
