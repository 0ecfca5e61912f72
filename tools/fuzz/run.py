"""Fuzz the ioctl surface in the VM: nvfuzz on several slices and on nvsim.

Run inside the test VM with nvsim and vgpu.ko loaded (`make fuzz` does):

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        .venv/bin/python tools/fuzz/run.py --seed 1 --calls 20000

It makes slices through netlink (small quotas, so that refusals are
exercised), runs build/nvfuzz on each slice's node directory and on
nvsim's own /dev nodes at once, and checks:

- no slice's charge (``used``) passes its quota in any sample of
  /sys/kernel/debug/vgpu/state taken during the run, nor at the end;
- once every fuzzer has finished, with their processes still holding all
  they made (nvfuzz --hold), what vgpu.ko charged each group of slices
  equals what nvsim holds for the group's processes (nvsim's ``pid <tgid>
  gpu <i> fb_used`` lines) plus the group's UVM managed bytes;
- after the fuzzers exit and the slices are deleted: vgpu.ko's counters
  (files, objects, charges, tsgs, ...) and nvsim's objects, clients,
  mappings and FB in use are back to zero;
- no fuzzer crashed or hung, no slice was quarantined, no kernel report
  (BUG, WARNING, Oops, ...) appeared in dmesg.

Exit status 0 when every check passed, 1 on any finding (each printed on a
line starting "FINDING"), 2 when the run could not be set up.  The last
line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vgpu.vgpuko.client import VgpuKernel  # noqa: E402
from vgpu.vgpuko.netlink import VgpuError  # noqa: E402

VSTATE = Path("/sys/kernel/debug/vgpu/state")
NVSIM = Path("/sys/kernel/debug/nvsim")
NODE_DIR = Path("/dev/vgpu")
MiB = 1 << 20
SRC = ROOT / "tools" / "fuzz" / "nvfuzz.c"
BUILT = ROOT / "build" / "nvfuzz"
KERNEL_REPORT = re.compile(r"BUG:|WARNING:|Oops|general protection|list_add corruption|"
                           r"list_del corruption|refcount_t:|possible recursive locking|"
                           r"circular locking|RCU stall|rcu_sched self-detected|"
                           r"KASAN|UBSAN|DEBUG_LOCKS_WARN_ON|ODEBUG")


def log(msg: str) -> None:
    print(f"fuzz: {msg}", flush=True)


# ------------------------------------------------------------------ build
def nvfuzz_binary(out_dir: Path) -> Path:
    """build/nvfuzz when it is newer than its sources, else a fresh build in
    out_dir (the repository is read-only in the VM)."""
    deps = [SRC, ROOT / "kmod/include/nvabi.h", ROOT / "kmod/include/nvrel.h",
            ROOT / "kmod/include/nvrel_tables.h"]
    newest = max(p.stat().st_mtime for p in deps)
    if BUILT.exists() and BUILT.stat().st_mtime >= newest:
        return BUILT
    exe = out_dir / "nvfuzz"
    cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
           f"-I{ROOT / 'tools/fuzz/shim'}", f"-I{ROOT / 'kmod/include'}", "-o", str(exe), str(SRC)]
    log("building " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    return exe


def make_corpus(out_dir: Path) -> Path:
    out = out_dir / "nvfuzz.corpus"
    subprocess.run([sys.executable, str(ROOT / "tools/fuzz/corpus.py"), "-o", str(out)],
                   check=True)
    return out


# ------------------------------------------------------------------ state
def parse_vstate(text: str) -> tuple[dict[str, int], dict[int, dict]]:
    """vgpu's debugfs state: the counters, and per slice its files,
    uvm_mapped, quarantined and per GPU {minor, limit, used, refusals}."""
    counters: dict[str, int] = {}
    slices: dict[int, dict] = {}
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "slice" and len(f) > 3:
            sid = int(f[1])
            s = slices.setdefault(sid, {"gpus": {}, "uvm_mapped": 0, "quarantined": 0})
            kv = dict(zip(f[2::2], f[3::2]))
            if f[2] == "gpu":
                g = s["gpus"].setdefault(int(f[3]), {})
                for k in ("minor", "limit", "used", "peak", "allocs", "refusals"):
                    if k in kv:
                        g[k] = int(kv[k])
            else:
                for k in ("files", "uvm_mapped", "quarantined"):
                    if k in kv:
                        s[k] = int(kv[k])
        elif len(f) >= 2:
            try:
                counters.setdefault(f[0], int(f[1], 0))
            except ValueError:
                pass
    return counters, slices


def read_vstate():
    return parse_vstate(VSTATE.read_text())


def read_nvsim() -> tuple[dict[str, int], dict[tuple[int, int], int], dict[int, int]]:
    """nvsim's state: counters, {(tgid, gpu): fb_used}, {gpu: fb_used}."""
    counters: dict[str, int] = {}
    pids: dict[tuple[int, int], int] = {}
    gpus: dict[int, int] = {}
    for line in (NVSIM / "state").read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "pid" and f[2] == "gpu":
            pids[(int(f[1]), int(f[3]))] = int(f[5])
        elif len(f) >= 6 and f[0] == "gpu" and f[2] == "fb_total":
            gpus[int(f[1])] = int(f[5])
        elif len(f) == 2:
            try:
                counters[f[0]] = int(f[1])
            except ValueError:
                pass
    return counters, pids, gpus


def nvsim_release() -> str | None:
    try:
        for line in (NVSIM / "stats").read_text().splitlines():
            if line.startswith("release "):
                return line.split()[1]
    except OSError:
        pass
    return None


def dmesg_lines() -> list[str]:
    r = subprocess.run(["dmesg"], capture_output=True, text=True)
    return r.stdout.splitlines()


def wait_until(fn, timeout: float, step: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while True:
        if fn():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


# ------------------------------------------------------------------ slices
def slice_dir(info, tmp: Path) -> str:
    d = NODE_DIR / str(info.id)
    if wait_until((d / "nvidiactl").exists, 2.0):
        return str(d)
    if info.major is None or info.base_minor is None:
        raise RuntimeError(f"slice {info.id}: no {d} and no device numbers")
    d = tmp / f"slice-{info.id}"
    d.mkdir(parents=True, exist_ok=True)
    nodes = {"nvidiactl": info.ctl_devno, "nvidia-uvm": info.uvm_devno}
    for g in info.gpus:
        nodes[f"nvidia{g.index}"] = info.gpu_devno(g.index)
    for name, dev in nodes.items():
        os.mknod(d / name, 0o600 | stat.S_IFCHR, dev)
    return str(d)


class Fuzzer:
    """One nvfuzz process (and its workers) with --hold."""

    def __init__(self, name: str, argv: list[str]):
        self.name = name
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.hold: dict | None = None
        self.result: dict | None = None
        self.stderr = ""

    def wait_hold(self, timeout: float) -> bool:
        """Read up to the hold line (every worker finished, state held)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                return False
            line = line.strip()
            if line.startswith("{"):
                d = json.loads(line)
                if d.get("hold"):
                    self.hold = d
                    return True
                self.result = d
                return False
        return False

    def release(self, timeout: float) -> None:
        try:
            out, err = self.proc.communicate(input="", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        self.stderr = err
        for line in out.splitlines():
            if line.startswith("{"):
                d = json.loads(line)
                if not d.get("hold"):
                    self.result = d


# ------------------------------------------------------------------ run
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fuzz vgpu.ko and nvsim through nvfuzz")
    ap.add_argument("--seed", type=int, default=None, help="default: time-based (printed)")
    ap.add_argument("--calls", type=int, default=0, help="total call budget (all fuzzers)")
    ap.add_argument("--seconds", type=float, default=0, help="time budget per fuzzer")
    ap.add_argument("--slices", type=int, default=3)
    ap.add_argument("--quota", type=int, default=32 * MiB, help="bytes per slice GPU")
    ap.add_argument("--procs", type=int, default=2, help="processes per fuzzer")
    ap.add_argument("--threads", type=int, default=2, help="threads per process")
    ap.add_argument("--no-nvsim", action="store_true", help="no fuzzer on nvsim's own nodes")
    ap.add_argument("--nvfuzz", type=Path, default=None)
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--sample", type=float, default=0.2, help="seconds between state samples")
    a = ap.parse_args(argv)
    if not a.calls and not a.seconds:
        a.calls = 20000
    seed = a.seed if a.seed is not None else int(time.time())
    log(f"seed {seed} (rerun with --seed {seed})")
    findings: list[str] = []

    def finding(msg: str) -> None:
        findings.append(msg)
        print(f"FINDING: {msg}", flush=True)

    have_vgpu = VSTATE.exists() and Path("/sys/module/vgpu").exists()
    if not (NVSIM / "state").exists():
        print("fuzz: nvsim's debugfs state is missing: load nvsim (vm.py --load-nvsim)",
              file=sys.stderr)
        return 2
    release = nvsim_release()
    tmp = Path(tempfile.mkdtemp(prefix="vgpu-fuzz-"))
    exe = a.nvfuzz or nvfuzz_binary(tmp)
    corpus = a.corpus or make_corpus(tmp)
    dmesg_before = len(dmesg_lines())
    _, _, nv_gpus = read_nvsim()
    ngpus = len(nv_gpus)

    kern = VgpuKernel(timeout=20) if have_vgpu else None
    slices: list = []
    dirs: list[str] = []
    base_id = 7000 + (os.getpid() % 500) * 8
    fuzzers: list[Fuzzer] = []
    elapsed = 0.0
    samples = refusals = 0
    peaks: dict = {}
    held: dict = {}
    try:
        if kern:
            for i in range(a.slices):
                # slice 0 spans every GPU; the others one GPU each, in turn
                if i == 0:
                    gpus = [(g, a.quota) for g in range(ngpus)]
                else:
                    gpus = [((i - 1) % ngpus, a.quota)]
                info = kern.slice_new(base_id + i, gpus=gpus, name=f"fuzz-{i}")
                slices.append(info)
                dirs.append(slice_dir(info, tmp))
            log(f"slices {[s.id for s in slices]} quota {a.quota // MiB} MiB per GPU")
        targets: list[tuple[str, str, str | None]] = []
        # slices 0 and 1 share descriptors (a group); the rest stand alone
        for i, d in enumerate(dirs):
            other = dirs[1] if i == 0 and len(dirs) > 1 else (dirs[0] if i == 1 else None)
            targets.append((f"slice{slices[i].id}", d, other))
        if not a.no_nvsim:
            targets.append(("nvsim", "/dev", None))
        per = (a.calls + len(targets) - 1) // len(targets) if a.calls else 0
        for n, (name, d, other) in enumerate(targets):
            cmd = [str(exe), d, "--seed", str(seed + n), "--procs", str(a.procs),
                   "--threads", str(a.threads), "--corpus", str(corpus), "--hold"]
            if release:
                cmd += ["--release", release]
            if per:
                cmd += ["--calls", str(per)]
            if a.seconds:
                cmd += ["--seconds", str(a.seconds)]
            if other:
                cmd += ["--other", other]
            if name != "nvsim" and n == len(dirs) - 1 and len(dirs) >= 3:
                # the last slice: no UVM_MAP_EXTERNAL_ALLOCATION, so that its
                # charge must equal nvsim's exactly (see compare below)
                cmd += ["--no-map-ext"]
            log(f"{name}: {' '.join(cmd)}")
            fuzzers.append(Fuzzer(name, cmd))

        # ---- sample the quotas while the fuzzers run
        over: list[str] = []
        stop = threading.Event()
        ours = {s.id for s in slices}

        def sampler():
            nonlocal samples
            while not stop.is_set():
                try:
                    _, sl = read_vstate()
                except OSError:
                    break
                samples += 1
                for sid, s in sl.items():
                    if sid not in ours:
                        continue
                    for gi, g in s["gpus"].items():
                        if g.get("used", 0) > g.get("limit", 0) and len(over) < 20:
                            over.append(f"slice {sid} gpu {gi}: used {g['used']} > "
                                        f"limit {g['limit']} (sample {samples})")
                stop.wait(a.sample)

        th = threading.Thread(target=sampler, daemon=True)
        if kern:
            th.start()
        t0 = time.monotonic()
        # a time budget ends on time; a call budget takes what it takes
        # (nvfuzz's own watchdog ends a fuzzer that stops making calls)
        budget = a.seconds + 300 if a.seconds else float("inf")
        for f in fuzzers:
            if not f.wait_hold(max(1.0, budget - (time.monotonic() - t0))):
                finding(f"{f.name}: nvfuzz ended or hung before its hold line")
        elapsed = time.monotonic() - t0
        stop.set()
        if kern:
            th.join()
        for o in over:
            finding(f"quota passed: {o}")

        # ---- quiescent: every worker holds what it made
        if kern:
            groups: list[tuple[list[int], list[Fuzzer]]] = []
            if len(slices) >= 2:
                groups.append(([0, 1], [fuzzers[0], fuzzers[1]]))
                rest = range(2, len(slices))
            else:
                rest = range(len(slices))
            for i in rest:
                groups.append(([i], [fuzzers[i]]))

            def compare(report: bool) -> list[str]:
                _, sl = read_vstate()
                _, pids, _ = read_nvsim()
                out = []
                for idx, fz in groups:
                    tg = {p for f in fz if f.hold for p in f.hold["pids"]}
                    charged = uvm = 0
                    real: set[int] = set()
                    for i in idx:
                        s = sl.get(slices[i].id, {"gpus": {}})
                        uvm += s.get("uvm_mapped", 0)
                        for g in s["gpus"].values():
                            charged += g.get("used", 0)
                            real.add(g.get("minor", -1))
                    nv = sum(b for (p, g), b in pids.items() if p in tg and g in real)
                    ids = [slices[i].id for i in idx]
                    unsure = sum(f.hold.get("map_ext_unsure", 0) for f in fz if f.hold)
                    held[",".join(map(str, ids))] = {"charged": charged, "nvsim": nv,
                                                      "uvm_mapped": uvm,
                                                      "map_ext_unsure": unsure}
                    # A MAP_EXTERNAL that may have failed keeps its charge
                    # reference (docs/mediator.md, "The call page"): then
                    # over is allowed, never under (an escape from the quota).
                    if charged != nv + uvm and not (unsure and charged > nv + uvm):
                        out.append(f"slices {ids}: vgpu.ko charged {charged} bytes, nvsim holds "
                                   f"{nv} for their processes {sorted(tg)} + uvm_mapped {uvm}")
                return out

            last: list[str] = []

            def settled():
                nonlocal last
                last = compare(False)
                return not last

            wait_until(settled, 5.0, 0.25)
            for m in last:
                finding(f"charges differ from nvsim: {m}")
            _, sl = read_vstate()
            for s in slices:
                st = sl.get(s.id)
                if st is None:
                    finding(f"slice {s.id} missing from vgpu's state")
                    continue
                if st.get("quarantined"):
                    finding(f"slice {s.id} was quarantined (a call broke)")
                for gi, g in st["gpus"].items():
                    if g.get("used", 0) > g.get("limit", 0):
                        finding(f"quota passed at the end: slice {s.id} gpu {gi} used "
                                f"{g['used']} > {g['limit']}")
            refusals = sum(g.get("refusals", 0) for s in slices
                           for g in sl.get(s.id, {"gpus": {}})["gpus"].values())
            peaks = {s.id: {gi: g.get("peak", 0) for gi, g in sl.get(s.id, {"gpus": {}})["gpus"].items()}
                     for s in slices}

        # ---- release the fuzzers
        for f in fuzzers:
            f.release(60)
            r = f.result
            if r is None:
                finding(f"{f.name}: no result line; stderr: {f.stderr[-2000:]}")
                continue
            if r.get("crashes") or r.get("hung"):
                finding(f"{f.name}: nvfuzz crashed={r.get('crashes')} hung={r.get('hung')} "
                        f"signals={r.get('signals')}")
            log(f"{f.name}: calls {r['calls']} ioctls {r['ioctls']} in {r['seconds']} s "
                f"({r['calls_per_s']}/s), outcomes {r['outcomes']}")
    finally:
        if kern:
            for s in slices:
                try:
                    kern.slice_del(s.id, force=True)
                except VgpuError as e:
                    finding(f"slice {s.id}: delete failed: {e}")

    # ---- everything back to zero
    if kern:
        vlast: dict = {}

        def vzero():
            nonlocal vlast
            c, sl = read_vstate()
            vlast = {k: c.get(k, 0) for k in ("files", "objects", "charges", "tsgs", "userd_maps",
                                              "proxies", "ranges", "reapers") if c.get(k, 0)}
            vlast.update({f"slice {sid}": "left" for sid in sl if sid in {s.id for s in slices}})
            return not vlast

        if not wait_until(vzero, 15.0, 0.25):
            finding(f"vgpu.ko counters not back to zero: {vlast}")
        kern.close()
    nlast: dict = {}

    def nzero():
        nonlocal nlast
        c, pids, gpus = read_nvsim()
        nlast = {k: c.get(k, 0) for k in ("objects", "clients", "mappings") if c.get(k, 0)}
        nlast.update({f"gpu {g} fb_used": b for g, b in gpus.items() if b})
        nlast.update({f"pid {p} gpu {g}": b for (p, g), b in pids.items()})
        return not nlast

    if not wait_until(nzero, 15.0, 0.25):
        finding(f"nvsim not back to zero: {nlast}")
    reports = [ln for ln in dmesg_lines()[dmesg_before:] if KERNEL_REPORT.search(ln)]
    for ln in reports[:20]:
        finding(f"kernel report: {ln}")

    results = [f.result for f in fuzzers if f.result]
    calls = sum(r["calls"] for r in results)
    ioctls = sum(r["ioctls"] for r in results)
    kinds: dict[str, int] = {}
    for r in results:
        for k, v in r.get("kinds", {}).items():
            kinds[k] = kinds.get(k, 0) + v
    summary = {
        "seed": seed, "release": release, "slices": [s.id for s in slices],
        "quota": a.quota, "fuzzers": len(fuzzers), "procs": a.procs, "threads": a.threads,
        "calls": calls, "ioctls": ioctls, "seconds": round(elapsed, 2),
        "calls_per_s": round(calls / elapsed, 1) if elapsed else 0,
        "outcomes": {f.name: f.result["outcomes"] for f in fuzzers if f.result},
        "quota_samples": samples, "refusals": refusals, "peaks": peaks, "held": held,
        "kinds": kinds, "findings": len(findings),
    }
    log(f"{calls} calls ({ioctls} ioctls) in {elapsed:.1f} s, {summary['calls_per_s']}/s; "
        f"outcomes {summary['outcomes']}; {samples} quota samples, {refusals} refusals; "
        f"{len(findings)} finding(s)")
    print(json.dumps(summary), flush=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
