"""Compute slicing accuracy: configured vs achieved GPU time, measured by the
simulated hardware (nvsim's own busy accounting), case by case and layer by
layer.

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu --timeout 1800 -- \\
        .venv/bin/python bench/compute_accuracy.py [--quick] [--markdown FILE|-]

`make bench-compute` runs it in the VM and writes bench/compute-report.md
(the table, with the date and the machine).

Each workload is the project's client (`vgpu-nvclient work`) in its own
process, opening a slice's virtual nodes /dev/vgpu/<id>/ and keeping DEPTH
work items of ITEM us queued on a channel (saturating unless DEPTH is too
small for the process to keep up).  Slices are made through vgpu.ko's
netlink API directly (vgpu.vgpuko.client), so the figures are the kernel
mechanism's; the daemon maps its config and `vgpuctl set-quota` to exactly
these calls.  Achieved share = the process's busy time in
/sys/kernel/debug/nvsim/busy over the window / the window's length.

Cases (the issue's list): fixed caps 30/70, 10/90, 50/50 at depths 1, 8, 64;
a lone fixed 30% on an otherwise idle GPU; share 1:3, and the light one's
share once the heavy one stops; priority (a high slice's start latency and
throughput while a low one saturates); a cap changed while running; a slice
ringing another's doorbell tokens; the 30/70 case with only the TSG layer,
only the doorbell layer, and both; 16 slices with mixed policies; the
scheduler's own CPU time.  Nothing is asserted: figures go to stdout (and
to a Markdown table with --markdown).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vgpu.abi import uapi  # noqa: E402
from vgpu.vgpuko.client import VgpuKernel     # noqa: E402
from vgpu.vgpuko.messages import Compute     # noqa: E402

PY = sys.executable
BUSY = Path("/sys/kernel/debug/nvsim/busy")
SCHED_STATS = Path("/sys/kernel/debug/vgpu/sched")
GPU = 0                 # the real GPU every case runs on
MiB = 1 << 20
POLICY = {"none": uapi.VGPU_COMPUTE_NONE, "share": uapi.VGPU_COMPUTE_SHARE,
          "fixed": uapi.VGPU_COMPUTE_FIXED, "burst": uapi.VGPU_COMPUTE_BURST}
LAYERS = {"both": uapi.VGPU_SCHED_L_ALL, "tsg": uapi.VGPU_SCHED_L_TSG,
          "doorbell": uapi.VGPU_SCHED_L_DOORBELL}
PRIO = {"low": uapi.VGPU_PRIORITY_LOW, "high": uapi.VGPU_PRIORITY_HIGH}


# ------------------------------------------------------------------ measuring
def busy() -> tuple[int, dict[int, int]]:
    """(now_ns, {tgid: busy_ns on GPU})."""
    now, per = 0, {}
    for line in BUSY.read_text().splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "gpu" and int(f[1]) == GPU:
            now = int(f[f.index("now_ns") + 1])
        elif f[0] == "pid" and int(f[2]) == GPU:
            per[int(f[1])] = per.get(int(f[1]), 0) + int(f[f.index("busy_ns") + 1])
    return now, per


def shares(pids: list[int], window: float) -> list[float]:
    t0, b0 = busy()
    time.sleep(window)
    t1, b1 = busy()
    return [(b1.get(p, 0) - b0.get(p, 0)) / (t1 - t0) for p in pids]


class Bench:
    def __init__(self, k: VgpuKernel, window: float, period_us: int):
        self.k = k
        self.window = window
        self.period_us = period_us
        self.next_id = 9000
        self.live: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.factors: dict[str, float] | None = None
        self.ceiling1: float | None = None
        self.profile = False
        self.perf: Path | None = None
        self.label = ""

    def slice(self, policy: str, pct: float, prio: str = "low") -> int:
        self.next_id += 1
        sid = self.next_id
        c = Compute(POLICY[policy], max(1, round(pct * 100)), PRIO[prio])
        self.k.slice_new(sid, gpus=[(GPU, 64 * MiB)], name=f"bench-{sid}", compute={0: c})
        self.live.append(sid)
        return sid

    def work(self, sid: int, depth: int, item_us: int = 1000, seconds: float = 600,
             items: int | None = None) -> subprocess.Popen:
        how = ["--items", str(items)] if items else ["--seconds", str(seconds)]
        p = subprocess.Popen([PY, "-m", "vgpu.abi.nvclient", "--dev-prefix", f"/dev/vgpu/{sid}/",
                              "--json", "work", "--item-us", str(item_us), "--depth", str(depth),
                              *how], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.procs.append(p)
        return p

    def warm(self, procs: list[subprocess.Popen], least: float = 1.5) -> None:
        """Until every workload has GPU time (process start is slow under
        emulation), then `least` seconds more."""
        end = time.monotonic() + 120
        while time.monotonic() < end:
            _, b = busy()
            if all(b.get(p.pid, 0) > 0 for p in procs):
                break
            for p in procs:
                if p.poll() is not None:
                    raise SystemExit(f"bench: a workload died: {p.stderr.read()[-2000:]}")
            time.sleep(0.2)
        time.sleep(least)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()
        self.procs.clear()
        for sid in self.live:
            try:
                self.k.slice_del(sid, force=True)
            except Exception:
                pass
        self.live.clear()
        time.sleep(0.2)

    def layers(self, layers: int) -> None:
        self.k.sched_set(GPU, period_us=self.period_us, layers=layers)


# ------------------------------------------------------------------ cases
ROWS: list[list[str]] = []


LABEL = [""]     # the build being measured, when --modules names several


def row(case: str, layer: str, configured: str, achieved: str, note: str = "") -> None:
    if LABEL[0]:
        case = f"[{LABEL[0]}] {case}"
    ROWS.append([case, layer, configured, achieved, note])
    print(f"  {case:<34} {layer:<9} configured {configured:<22} achieved {achieved:<26} {note}",
          flush=True)


def pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def case_ceiling(b: Bench) -> None:
    """What one depth-1 client reaches alone with no cap: under emulation the
    Python client needs 1-3 ms between a completion and its next
    submission, so this, not 100 %, is what a depth-1 slice can use."""
    s = b.slice("share", 100)
    p = b.work(s, 1)
    b.warm([p])
    (b.ceiling1,) = shares([p.pid], b.window)
    row("depth-1 client alone, no cap (its ceiling)", "both", "-", pct(b.ceiling1),
        "what a depth-1 slice can use under emulation")
    b.stop()


def case_caps(b: Bench, caps: tuple[int, int], depth: int, layer: str = "both") -> None:
    sa, sb = b.slice("fixed", caps[0]), b.slice("fixed", caps[1])
    pa, pb = b.work(sa, depth), b.work(sb, depth)
    b.warm([pa, pb])
    a, c = shares([pa.pid, pb.pid], b.window)
    err = max(abs(a * 100 - caps[0]), abs(c * 100 - caps[1]))
    note = f"max error {err:.1f} pt"
    if depth == 1 and a + c > 0:
        # client-bound: what the caps still decide is who gets what of it
        note += (f"; client-bound (one depth-1 client alone: "
                 f"{pct(b.ceiling1) if b.ceiling1 else '?'}); both under their caps: "
                 f"{'yes' if a * 100 <= caps[0] + 1 and c * 100 <= caps[1] + 1 else 'NO'}; "
                 f"split {pct(a / (a + c))} / {pct(c / (a + c))}")
    row(f"fixed {caps[0]}/{caps[1]} depth {depth}", layer, f"{caps[0]}% / {caps[1]}%",
        f"{pct(a)} / {pct(c)}", note)
    b.stop()


def case_alone(b: Bench, layer: str = "both") -> None:
    s = b.slice("fixed", 30)
    p = b.work(s, 8)
    b.warm([p])
    (a,) = shares([p.pid], b.window)
    row("fixed 30% alone (GPU otherwise idle)", layer, "30%", pct(a),
        f"error {abs(a * 100 - 30):.1f} pt")
    b.stop()


def case_share(b: Bench) -> None:
    sl, sh = b.slice("share", 25), b.slice("share", 75)
    pl, ph = b.work(sl, 8), b.work(sh, 8)
    b.warm([pl, ph])
    a, c = shares([pl.pid, ph.pid], b.window)
    row("share 1:3 both saturating", "both", "25% / 75%", f"{pct(a)} / {pct(c)}",
        f"max error {max(abs(a * 100 - 25), abs(c * 100 - 75)):.1f} pt")
    # the heavy one goes idle: how much does the light one get, period by period?
    ph.send_signal(signal.SIGSTOP)      # queued work drains, nothing new is submitted
    per = b.period_us / 1e6
    got = [shares([pl.pid], per)[0] for _ in range(4)]
    row("share 1:3, heavy idle: light's share", "both", ">= 95% within 2 periods",
        " / ".join(pct(x) for x in got), "periods 1..4 after the heavy one stopped")
    ph.send_signal(signal.SIGCONT)
    b.stop()


def case_priority(b: Bench, item_us: int = 1000, rounds: int = 5) -> None:
    """A high slice's 1 ms items at depth 1, alone and beside a saturating low
    slice, in alternating rounds (the low client stopped, then running):
    under emulation the client's own pace drifts by 10-20 % from run to run,
    so each figure is the median of its rounds, measured side by side."""
    n = max(50, int(b.window * 100))
    sh = b.slice("share", 50, "high")
    sl = b.slice("share", 50, "low")
    pl = b.work(sl, 8)
    b.warm([pl])

    def high() -> dict:
        p = b.work(sh, 1, item_us, items=n)
        out, _ = p.communicate(timeout=600)
        b.procs.remove(p)
        return json.loads(out)

    alone, beside = [], []
    for _ in range(rounds):
        pl.send_signal(signal.SIGSTOP)      # its queue drains: the high one is alone
        time.sleep(0.5)
        alone.append(high())
        pl.send_signal(signal.SIGCONT)
        time.sleep(0.5)
        beside.append(high())

    def med(runs: list[dict], f) -> float:
        return statistics.median(f(r) for r in runs)

    def rate(r: dict) -> float:
        return r["items"] / r["wall_s"]

    lat = {q: med(beside, lambda r: r["start_latency_us"][q]) for q in ("median", "p99")}
    lat_a = {q: med(alone, lambda r: r["start_latency_us"][q]) for q in ("median", "p99")}
    row("priority: high 1 ms items vs low saturating", "both",
        "start <= 2 ms median, 5 ms p99",
        f"{lat['median'] / 1000:.2f} ms / {lat['p99'] / 1000:.2f} ms",
        f"median of {rounds} rounds of {n} items; alone: {lat_a['median'] / 1000:.2f} / "
        f"{lat_a['p99'] / 1000:.2f} ms")
    ratios = [rate(w) / rate(a) for a, w in zip(alone, beside)]
    # What the scheduler costs the high slice is the wait before each item
    # starts; the rest of an item's cycle is the client's own pace.
    cycle = med(alone, lambda r: r["wall_s"] / r["items"]) * 1e6
    added = med(beside, lambda r: r["start_latency_us"]["mean"]) - \
        med(alone, lambda r: r["start_latency_us"]["mean"])
    row("priority: high's throughput vs alone", "both", ">= 95%",
        f"{pct(statistics.median(ratios))} items/s; {pct(cycle / (cycle + max(added, 0)))} "
        "from start waits",
        f"items/s ratio per round (client-paced, noisy under emulation): "
        + ", ".join(f"{x * 100:.0f}%" for x in ratios)
        + f"; mean start wait {added / 1000:+.2f} ms per {cycle / 1000:.2f} ms item cycle")
    b.stop()


def case_change(b: Bench) -> None:
    s = b.slice("fixed", 30)
    p = b.work(s, 8)
    b.warm([p])
    before = shares([p.pid], b.window / 2)[0]
    b.k.slice_set(s, compute={0: Compute(uapi.VGPU_COMPUTE_FIXED, 6000)})
    per = b.period_us / 1e6
    got = [shares([p.pid], per)[0] for _ in range(4)]
    after = shares([p.pid], b.window / 2)[0]
    row("cap 30% -> 60% while running", "both", "30% then 60% within 2 periods",
        f"{pct(before)} -> {pct(after)}", "per period after: " + " / ".join(pct(x) for x in got))
    b.stop()


RINGER = r"""
import struct, sys, time
from vgpu.abi.nvclient import RmClient
c = RmClient(sys.argv[1])
g = c.open_gpus()[0]
_, um = g.usermode()
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for token in range(1, 64):
        um.mm[0x90:0x94] = struct.pack("<I", token)
"""

def case_ring(b: Bench) -> None:
    va, vb = b.slice("fixed", 30), b.slice("fixed", 30)
    pa, pb = b.work(va, 8), b.work(vb, 8)
    b.warm([pa, pb])
    base = shares([pa.pid, pb.pid], b.window)
    # a third slice with no work of its own rings every token it can guess
    r = b.slice("fixed", 10)
    ringer = subprocess.Popen([PY, "-c", RINGER, f"/dev/vgpu/{r}/", str(b.window * 3)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b.procs.append(ringer)
    time.sleep(2)
    if ringer.poll() is not None:
        row("doorbell ringing of others' tokens", "both", "-", "not run",
            ringer.stderr.read().strip()[-200:])
        b.stop()
        return
    got = shares([pa.pid, pb.pid, ringer.pid], b.window)
    row("doorbell ringing of others' tokens", "both", "victims 30% / 30%, ringer 0%",
        f"{pct(got[0])} / {pct(got[1])}, ringer {pct(got[2])}",
        f"without ringing: {pct(base[0])} / {pct(base[1])}")
    b.stop()


# ------------------------------------------------------------------ emulation
TCG_FACTOR = REPO / "build" / "tcg_factor"


def tcg_factors(host_file: str | None) -> dict[str, float] | None:
    """How many times slower this VM runs a syscall, a timer sleep's CPU and
    a pipe wake-up than the host did (bench/tcg_factor.c; the host's figures
    come from --host-figures, written by `make bench-compute`)."""
    if not host_file or not TCG_FACTOR.exists():
        return None
    host = json.loads(Path(host_file).read_text())
    vm = json.loads(subprocess.run([str(TCG_FACTOR)], capture_output=True, text=True,
                                   check=True, timeout=600).stdout)
    f = {k: vm[k] / host[k] for k in host if host.get(k, 0) > 0 and k in vm}
    print("tcg factors (VM / host): " + ", ".join(f"{k} {v:.1f}x" for k, v in f.items()),
          flush=True)
    return f or None


def sched_stats() -> dict[str, int]:
    """GPU 0's scheduler line and the RM call counts of debugfs vgpu/sched
    ({} with a vgpu.ko that has no such file)."""
    out: dict[str, int] = {}
    try:
        text = SCHED_STATS.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "sched" and int(f[1]) != GPU:
            continue
        pairs = f[2:] if f and f[0] == "sched" else f
        out.update({k: int(v) for k, v in zip(pairs[::2], pairs[1::2])})
    return out


def thread_switches() -> int:
    """The scheduler thread's voluntary context switches (each sleep: its
    own waits and any RM call that sleeps), or 0."""
    tid = subprocess.run(["pgrep", "-x", f"vgpu-sched/{GPU}"], capture_output=True,
                         text=True).stdout.split()
    try:
        for line in Path(f"/proc/{tid[0]}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    except (IndexError, OSError):
        pass
    return 0


def breakdown(d: dict[str, int], cpu_ns: int, sw: int, seconds: float) -> str:
    """Where the thread's CPU went, per switch (from two sched_stats)."""
    if not d or "loops" not in d:
        return "no vgpu/sched counters in this vgpu.ko"
    n = max(sw, 1)

    def us(k: str) -> str:
        return f"{d[k] / n / 1000:.0f}"

    # the PREEMPT may sleep (nvsim before 2026-12): its wall time is not CPU
    busy = d["decide_ns"] - d["finish_ns"] + d.get("zap_ns", 0) + d["poll_ns"]
    return (f"per switch: {d['loops'] / n:.1f} wake-ups ({d['kicks'] / n:.2f} kicks), "
            f"{d['sleeps'] / n:.1f} sleeps (voluntary context switches), "
            f"{d['decisions'] / n:.2f} decisions, {d['polls'] / n:.1f} polls, "
            f"{d['rm_schedule'] / n:.2f} GPFIFO_SCHEDULE + {d['rm_preempt'] / n:.2f} PREEMPT "
            f"RM calls, {d['zaps'] / n:.2f} zaps; us per switch: decisions {us('decide_ns')} "
            f"(wishes {us('wants_ns')}, switch's SCHEDULE calls {us('switch_ns')}, "
            f"PREEMPT {(d['finish_ns'] - d.get('zap_ns', 0)) / n / 1000:.0f} wall, "
            f"zaps {us('zap_ns') if 'zap_ns' in d else '?'}, others' pause {us('others_ns')}), "
            f"polls {us('poll_ns')}, the rest (sleep/wake-up paths, the PREEMPT's CPU, "
            f"interrupts between the parts) "
            f"{(cpu_ns - busy) / n / 1000:.0f} of {cpu_ns / n / 1000:.0f}; "
            f"{d['loops'] / seconds:.0f} wake-ups/s")


def scaled_by_part(d: dict[str, int], cpu_ns: int, f: dict[str, float] | None) -> float | None:
    """The thread's CPU scaled to the host part by part, each by the factor of
    the kernel path it mostly is: the doorbell zaps by the TLB shootdown's
    (a zap of a client's mapping while it runs on the other CPU waits for
    that CPU), the decisions, RM calls and polls by a syscall's, the rest
    (sleeps, wake-ups, interrupts) by a timer sleep's CPU.  The ns it comes
    to; None without the counters or those factors."""
    keys = ("shootdown_ns", "syscall_ns", "sleep_cpu_ns")
    if not f or not all(f.get(k, 0) > 0 for k in keys) or "zap_ns" not in d:
        return None
    busy = d["decide_ns"] - d["finish_ns"] + d["zap_ns"] + d["poll_ns"]
    parts = (d["zap_ns"], busy - d["zap_ns"], max(cpu_ns - busy, 0))
    return sum(x / f[k] for x, k in zip(parts, keys))


def perf_record(seconds: float, out: Path) -> subprocess.Popen | None:
    """perf record of the scheduler thread (cpu-clock, call graphs) for seconds."""
    tid = subprocess.run(["pgrep", "-x", f"vgpu-sched/{GPU}"], capture_output=True,
                         text=True).stdout.split()
    if not tid:
        return None
    return subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999", "-g",
                             "-t", tid[0], "-o", str(out), "--", "sleep", str(seconds)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def perf_report(data: Path, n: int = 30) -> None:
    for how in (["--no-children"], ["--children"]):
        r = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "-q", "-g", "none",
                            "--percent-limit", "0.7", *how], capture_output=True, text=True)
        print(f"  perf ({how[0][2:]}), the scheduler thread:", flush=True)
        for line in r.stdout.splitlines()[:n]:
            print("    " + line.rstrip(), flush=True)


def case_many(b: Bench, period_us: int | None = None, layer: str = "both") -> None:
    saved = b.period_us
    if period_us:
        b.period_us = period_us
    b.layers(LAYERS[layer])
    label = f" (period {b.period_us // 1000} ms)"
    specs = [("fixed", 5)] * 8 + [("share", 10)] * 8     # fixed 40%, share splits 60%
    expect = [5.0] * 8 + [7.5] * 8
    sids = [b.slice(p, v) for p, v in specs]
    procs = [b.work(s, 32) for s in sids]
    b.warm(procs, 3)
    perf = perf_record(b.window * 2, b.perf) if b.perf else None
    s0, d0 = b.k.sched_get(GPU), sched_stats()
    d0["sleeps"] = thread_switches()
    got = shares([p.pid for p in procs], b.window * 2)
    s1, d1 = b.k.sched_get(GPU), sched_stats()
    d1["sleeps"] = thread_switches()
    err = max(abs(g * 100 - e) for g, e in zip(got, expect))
    row("16 slices: 8 fixed 5%, 8 share equal" + label, layer, "5% x8, 7.5% x8",
        f"fixed {pct(min(got[:8]))}..{pct(max(got[:8]))}, "
        f"share {pct(min(got[8:]))}..{pct(max(got[8:]))}", f"max error {err:.1f} pt")
    cpu = (s1.cpu_ns - s0.cpu_ns) / (b.window * 2 * 1e9)
    sw = s1.switches - s0.switches
    native = ""
    # the thread's own paths: a syscall and a timer sleep (a pipe wake-up
    # under a loaded host reads far off; the call page's and the zap's
    # factors are for scaled_by_part)
    own = [b.factors[k] for k in ("syscall_ns", "sleep_cpu_ns") if b.factors and k in b.factors]
    if own:
        lo, hi = min(own), max(own)
        native = (f"; scaled to this host's own kernel: {pct(cpu / hi)}..{pct(cpu / lo)} "
                  f"(the VM runs its kernel paths {lo:.0f}..{hi:.0f}x slower, "
                  f"bench/tcg_factor.c; nvsim's RM calls stand in for the driver's)")
    row("scheduler kernel CPU (16 slices)" + label, layer, "< 1% of a core",
        pct(cpu) + " emulated",
        f"{sw} switches in {b.window * 2:.0f} s, "
        f"{(s1.cpu_ns - s0.cpu_ns) / max(sw, 1) / 1000:.0f} us of emulated CPU per switch, "
        f"RM calls included" + native)
    if b.profile:
        d = {k: d1[k] - d0.get(k, 0) for k in d1}
        row("scheduler CPU breakdown (16 slices)" + label, layer, "-", "-",
            breakdown(d, s1.cpu_ns - s0.cpu_ns, sw, b.window * 2))
        ns = scaled_by_part(d, s1.cpu_ns - s0.cpu_ns, b.factors)
        if ns is not None:
            f = b.factors
            row("scheduler CPU scaled part by part (16 slices)" + label, layer, "< 1% of a core",
                pct(ns / (b.window * 2 * 1e9)),
                f"zaps / {f['shootdown_ns']:.1f} (a TLB shootdown), decisions, RM calls and "
                f"polls / {f['syscall_ns']:.1f} (a syscall), sleeps, wake-ups and interrupts "
                f"/ {f['sleep_cpu_ns']:.1f} (a timer sleep's CPU)")
    if perf:
        perf.wait()
        perf_report(b.perf)
    b.stop()
    b.period_us = saved
    b.layers(uapi.VGPU_SCHED_L_ALL)


CASES = ("caps", "alone", "share", "priority", "change", "ring", "layers", "many")
MANY = "100:both,500:both,100:tsg"


def find_ko(d: Path, name: str) -> Path | None:
    """d/NAME.ko, or d/NAME/NAME.ko (the checkout's kmod/ layout)."""
    for p in (d / f"{name}.ko", d / name / f"{name}.ko"):
        if p.exists():
            return p
    return None


def load_modules(d: Path, nvsim_params: str) -> None:
    """The vgpu.ko (and nvsim.ko, where d has one) of d in place of the
    loaded ones."""
    vgpu, nvsim = find_ko(d, "vgpu"), find_ko(d, "nvsim")
    if not vgpu:
        raise SystemExit(f"bench: no vgpu.ko in {d}")
    subprocess.run(["rmmod", "vgpu"], capture_output=True)
    todo = [[str(vgpu)]]
    if nvsim:
        subprocess.run(["rmmod", "nvsim"], capture_output=True)
        todo.insert(0, [str(nvsim), *nvsim_params.split()])
    for cmd in todo:
        r = subprocess.run(["insmod", *cmd], capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"bench: insmod {' '.join(cmd)}: {r.stderr.strip()}")


def run_cases(k: VgpuKernel, a: argparse.Namespace, window: float,
              factors: dict[str, float] | None) -> None:
    b = Bench(k, window, int(a.period_ms * 1000))
    b.factors = factors
    b.profile = a.profile
    b.perf = Path(a.perf) if a.perf else None
    b.layers(uapi.VGPU_SCHED_L_ALL)
    want = set(a.case or CASES)
    caps_list = [tuple(int(x) for x in c.split("/")) for c in a.caps.split(",")]
    try:
        depths = (8,) if a.quick else (1, 8, 64)
        if "caps" in want or "layers" in want:
            if 1 in depths or "layers" in want:
                case_ceiling(b)
        if "caps" in want:
            for caps in caps_list:
                for d in depths:
                    case_caps(b, caps, d)
        if "alone" in want:
            case_alone(b)
        if "share" in want:
            case_share(b)
        if "priority" in want:
            case_priority(b)
        if "change" in want:
            case_change(b)
        if "ring" in want:
            case_ring(b)
        if "layers" in want:
            for name, layers in (("tsg", uapi.VGPU_SCHED_L_TSG),
                                 ("doorbell", uapi.VGPU_SCHED_L_DOORBELL)):
                b.layers(layers)
                case_caps(b, (30, 70), 8, name)
                case_caps(b, (30, 70), 1, name)
                case_alone(b, name)
            b.layers(uapi.VGPU_SCHED_L_ALL)
        if "many" in want:
            for spec in a.many.split(","):
                ms, layer = spec.split(":")
                case_many(b, int(float(ms) * 1000), layer)
    finally:
        b.stop()
        b.layers(uapi.VGPU_SCHED_L_ALL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=5.0, help="measuring window, s (default 5)")
    ap.add_argument("--period-ms", type=float, default=100.0, help="scheduler period (default 100)")
    ap.add_argument("--quick", action="store_true", help="depth 8 only, 2 s windows")
    ap.add_argument("--case", action="append", choices=CASES,
                    help="run only this case (repeatable; default: all)")
    ap.add_argument("--host-figures", metavar="FILE",
                    help="the host's build/tcg_factor output: estimate the scheduler's CPU "
                         "on native hardware from the emulation's slowdown")
    ap.add_argument("--caps", default="30/70,10/90,50/50",
                    help="the fixed-cap pairs of the caps case (default 30/70,10/90,50/50)")
    ap.add_argument("--many", default=MANY,
                    help=f"the 16-slice runs, PERIOD_MS:LAYERS,... (default {MANY})")
    ap.add_argument("--profile", action="store_true",
                    help="16 slices: where the scheduler thread's time goes (debugfs vgpu/sched)")
    ap.add_argument("--perf", metavar="FILE",
                    help="16 slices: perf record the scheduler thread into FILE and print "
                         "its top symbols")
    ap.add_argument("--modules", action="append", metavar="DIR",
                    help="run the cases with DIR's vgpu.ko and nvsim.ko (DIR/NAME.ko or "
                         "DIR/NAME/NAME.ko; repeatable: each in turn, --rounds times, in "
                         "this VM)")
    ap.add_argument("--nvsim-params", default="num_gpus=2 fb_size=17179869184",
                    help="nvsim's parameters when --modules reloads it (vm.py's default)")
    ap.add_argument("--rounds", type=int, default=1, help="with --modules (default 1)")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file (- : stdout)")
    a = ap.parse_args()
    if not BUSY.exists():
        sys.exit("bench: needs nvsim's engine (/sys/kernel/debug/nvsim/busy): run it in the VM")
    window = 2.0 if a.quick else a.window
    factors = tcg_factors(a.host_figures) if "many" in set(a.case or CASES) else None
    print(f"compute accuracy: nvsim GPU {GPU}, period {a.period_ms:g} ms, {window:g} s "
          f"windows, work items of 1 ms", flush=True)
    sets = [Path(d) for d in a.modules or []] or [None]
    for rnd in range(a.rounds if a.modules else 1):
        for d in sets:
            if d:
                load_modules(d, a.nvsim_params)
                LABEL[0] = f"{d.name} r{rnd + 1}" if len(sets) > 1 else ""
                print(f"-- modules of {d}, round {rnd + 1}", flush=True)
            with VgpuKernel() as k:
                run_cases(k, a, window, factors)
    lines = ["| case | layers | configured | achieved | note |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in ROWS]
    if a.markdown == "-":
        # `make bench-compute` cuts this out of the VM's console output
        print("---- markdown ----\n" + "\n".join(lines) + "\n---- end ----", flush=True)
    elif a.markdown:
        Path(a.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
