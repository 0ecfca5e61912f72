#!/usr/bin/env python3
"""The VM test bed: boot the distro kernel under qemu and run one command in it.

The host kernel cannot load modules, so every test of kernel code runs in a VM
booting the Debian kernel whose headers the modules are built against.  The
guest sees the host's whole filesystem read-only over 9p (so it runs the
project's own Python and virtualenv), with tmpfs wherever something must be
writable, and a small writable 9p share through which results come back.

    tools/vm/vm.py run [options] -- COMMAND [ARG...]

boots once, optionally loads nvsim.ko (and vgpu.ko), runs COMMAND from the
repository root as root, then checks the kernel: no BUG/WARNING/Oops/lockdep
report in dmesg, nvsim reporting zero live objects, and every module the
harness loaded unloading cleanly.  With --kernel-dir it boots the debug
kernel (tools/vm/debug-kernel.sh: its bzImage, the 9p stack built in) with
modules built for it (--nvsim-ko, --vgpu-ko), and --kmemleak adds a kmemleak
scan after the run.  Exit status: COMMAND's status if the checks
pass, 125 if a check failed, 124 on timeout, 126 if the VM could not boot.

Standard library only: this runs before any virtualenv exists.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "vm"
HERE = Path(__file__).resolve().parent

# The 9p stack the initramfs needs before it can see the host's root; every
# other module is loaded from the host's /lib/modules once the guest is in.
BOOT_MODULES = ["virtio_pci", "9pnet_virtio", "9p"]

# Kernel log lines that fail a run.  "WARNING:" covers WARN_ON and lockdep's
# headers; the rest are oopses, BUGs and the other reports.
DMESG_BAD = re.compile(
    r"(BUG:|WARNING:|Oops|general protection fault|Kernel panic|"
    r"possible circular locking|possible recursive locking|"
    r"inconsistent lock state|suspicious RCU usage|"
    r"unreferenced object|UBSAN:|KASAN:|kernel BUG at|"
    r"sleeping function called from invalid context|scheduling while atomic|"
    r"list_add corruption|list_del corruption|refcount_t:|"
    # the debug kernel's checkers (tools/vm/debug-kernel.sh)
    r"DEBUG_LOCKS_WARN_ON|turning off the locking correctness validator|"
    r"ODEBUG:|"
    # RCU stalls and hung tasks (a CPU or a task stuck in the kernel)
    r"detected stalls? on CPU|blocked for more than \d+ seconds)")


# An RCU stall report in which no CPU stalled: RCU's print_other_cpu_stall
# (kernel/rcu/tree_stall.h) says "All QSes seen" (or "Stall ended before
# state dump start") when every CPU had passed its quiescent state and only
# the grace-period kthread had not run, which then rcu_check_gp_kthread_
# starvation reports as "kthread starved".  Under TCG on a loaded host
# that is the host not running the guest's vCPU thread for seconds, not
# anything in the guest; a report that lists a stalled CPU or task stays
# a failure.
RCU_STALL_HEADER = re.compile(r"rcu: INFO: \S+ detected stalls? on CPUs")
RCU_NOTHING_STALLED = re.compile(r"rcu:\s*(All QSes seen|INFO: Stall ended before state dump)")


def bad_dmesg_lines(dmesg: str) -> tuple[list[str], list[str]]:
    """(lines that fail the run, host-starvation RCU reports noted only)."""
    lines = dmesg.splitlines()
    bad, starved = [], []
    for i, line in enumerate(lines):
        if not DMESG_BAD.search(line):
            continue
        if RCU_STALL_HEADER.search(line) and i + 1 < len(lines) \
                and RCU_NOTHING_STALLED.search(lines[i + 1]):
            starved.append(line)
            continue
        bad.append(line)
    return bad, starved


def default_kernel_version() -> str:
    env = os.environ.get("VGPU_KVER")
    if env:
        return env
    mods = sorted(p.name for p in Path("/lib/modules").glob("*") if (p / "build").exists())
    if not mods:
        sys.exit("vm: no kernel headers under /lib/modules/*/build (run `make deps`)")
    return mods[-1]


def module_deps(kver: str, names: list[str]) -> list[str]:
    """Resolve module names to .ko paths (relative to /lib/modules/KVER) in load order."""
    root = Path("/lib/modules") / kver
    deps: dict[str, list[str]] = {}
    for line in (root / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
    by_name = {Path(m).name.split(".ko")[0].replace("-", "_"): m for m in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for d in deps.get(path, []):
            visit(d)
        order.append(path)

    for n in names:
        if n not in by_name:
            builtin = (root / "modules.builtin").read_text()
            if f"/{n}.ko" in builtin:
                continue
            sys.exit(f"vm: module {n!r} not found for kernel {kver}")
        visit(by_name[n])
    return order


def build_initramfs(kver: str, builtin: bool = False) -> Path:
    """A busybox initramfs with the 9p modules and /init.  Cached by content.
    builtin: the kernel has the 9p stack built in (the debug kernel): no modules."""
    init = (HERE / "init.sh").read_text()
    mods = [] if builtin else module_deps(kver, BOOT_MODULES)
    busybox = shutil.which("busybox") or "/bin/busybox"
    key = hashlib.sha256((kver + init + "\n".join(mods)).encode()).hexdigest()[:16]
    out = BUILD / f"initramfs-{kver}-{key}.cpio.gz"
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vgpu-initramfs-") as td:
        root = Path(td)
        for d in ("bin", "sbin", "proc", "sys", "dev", "newroot", "mods", "etc"):
            (root / d).mkdir()
        shutil.copy2(busybox, root / "bin" / "busybox")
        for applet in ("sh", "mount", "umount", "insmod", "mkdir", "chroot", "poweroff",
                       "cat", "echo", "sleep", "dmesg", "switch_root", "grep", "ls"):
            (root / "bin" / applet).symlink_to("busybox")
        modlist = []
        for i, m in enumerate(mods):
            dst = f"{i:02d}-{Path(m).name}"
            shutil.copy2(Path("/lib/modules") / kver / m, root / "mods" / dst)
            modlist.append(dst)
        (root / "mods" / "order").write_text("".join(m + "\n" for m in modlist))
        (root / "init").write_text(init)
        (root / "init").chmod(0o755)
        files = subprocess.run(["find", "."], cwd=root, check=True, capture_output=True,
                               text=True).stdout
        cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root,
                              input=files.encode(), check=True, capture_output=True).stdout
        tmp = out.with_suffix(".tmp")
        with gzip.open(tmp, "wb", compresslevel=1) as f:
            f.write(cpio)
        tmp.rename(out)
    for old in BUILD.glob(f"initramfs-{kver}-*.cpio.gz"):
        if old != out:
            old.unlink()
    return out


# The guest mounts tmpfs over these (init.sh): what lies below them on the
# host is not there in the VM.
GUEST_HIDDEN = ("/tmp", "/run", "/var/tmp", "/var/log")


def visible_in_guest(path: str | None, what: str) -> None:
    """Exit with a clear message if the guest cannot see path."""
    if not path:
        return
    full = os.path.realpath(path if os.path.isabs(path) else REPO / path)
    for d in GUEST_HIDDEN:
        if (full + "/").startswith(d + "/") and not (full + "/").startswith(str(REPO) + "/"):
            sys.exit(f"vm: {what} {full} is under {d}, which the VM mounts over: "
                     "put it elsewhere (VGPU_CACHE for tools/realdrv)")


def guest_script(args: argparse.Namespace, kver: str) -> str:
    """The script the guest runs inside the chroot (see guest.sh for the checks)."""
    env = {
        "VGPU_IN_VM": "1",
        "VGPU_KVER": kver,
        "VGPU_LOAD_NVSIM": "1" if args.load_nvsim else "0",
        "VGPU_LOAD_NVIDIA": getattr(args, "load_nvidia", None) or "",
        "VGPU_NVSIM_PARAMS": args.nvsim_params,
        "VGPU_LOAD_VGPU": "1" if args.load_vgpu else "0",
        # (getattr: callers that build the namespace by hand predate these)
        "VGPU_NVSIM_KO": getattr(args, "nvsim_ko", "kmod/nvsim/nvsim.ko"),
        "VGPU_VGPU_KO": getattr(args, "vgpu_ko", "kmod/vgpu/vgpu.ko"),
        "VGPU_KMEMLEAK": "1" if getattr(args, "kmemleak", False) else "0",
        "VGPU_REPO": str(REPO),
        "VGPU_CHECK_LEAKS": "0" if args.no_leak_check else "1",
    }
    visible_in_guest(getattr(args, "load_nvidia", None), "--load-nvidia")
    lines = ["#!/bin/sh"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(f"export VGPU_CMD={shlex.quote(shlex.join(args.command))}")
    lines.append(f"exec /bin/sh {shlex.quote(str(HERE / 'guest.sh'))}")
    return "\n".join(lines) + "\n"


def debug_kernel(kdir: str) -> tuple[Path, str]:
    """The image and release of a kernel built by tools/vm/debug-kernel.sh."""
    d = Path(kdir)
    image, release = d / "bzImage", d / "kernel.release"
    if not image.exists() or not release.exists():
        sys.exit(f"vm: {d} holds no built kernel (bzImage, kernel.release): "
                 "run tools/vm/debug-kernel.sh build")
    return image, release.read_text().strip()


def qemu_cmd(args: argparse.Namespace, kver: str, initrd: Path, outdir: Path) -> list[str]:
    if getattr(args, "kernel_dir", None):
        kernel, _ = debug_kernel(args.kernel_dir)
    else:
        kernel = Path("/boot") / f"vmlinuz-{kver}"
    if not kernel.exists():
        sys.exit(f"vm: {kernel} missing (run `make deps`)")
    # KVM is opt-in: on the development and CI machines (themselves VMs) a
    # KVM guest hangs in early boot or trips over MSRs qemu cannot set, while
    # TCG boots the kernel in seconds.
    accel = (["-accel", "kvm", "-cpu", "host,-arch-capabilities"] if args.kvm
             else ["-accel", "tcg,thread=multi", "-cpu", "max"])
    # A soft lockup panics, and the panic prints every CPU's backtrace: the
    # console shows only errors (loglevel), and the watchdog's own report of
    # where a CPU is stuck is below that, so a guest that livelocks would
    # otherwise say nothing of where and spin until the run's timeout.  The
    # dmesg check fails a run on any soft lockup report anyway.
    append = (f"console=ttyS0 panic=-1 loglevel=3 quiet softlockup_panic=1 panic_print=0x40 "
              f"vgpu_repo={REPO} " + args.append)
    return [
        "qemu-system-x86_64", *accel, "-machine", "q35",
        "-m", str(args.mem), "-smp", str(args.smp),
        "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
        "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
        "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs", f"local,path={REPO},mount_tag=repo,security_model=none,readonly=on,multidevs=remap",
        "-virtfs", f"local,path={outdir},mount_tag=vmout,security_model=none",
    ]


ANSI = re.compile(rb"\x1b(\[[0-9;?]*[A-Za-z]|c)")


def console_line(raw: bytes) -> str | None:
    """One line of the serial console, without the firmware's screen codes."""
    line = ANSI.sub(b"", raw).replace(b"\r", b"")
    if line.startswith((b"SeaBIOS", b"Booting from ROM")) or not line.strip():
        return None
    return line.decode(errors="replace")


#: a guest CPU stuck in the kernel (the watchdog's report, and the panic
#: softlockup_panic makes of it: qemu_cmd)
LOCKUP = re.compile(r"soft lockup - CPU#\d+ stuck for \d+s! \[(.+?)\]|"
                    r"Kernel panic - not syncing: softlockup")
#: a backtrace line of a symbol in vgpu's own modules ("func+0x1/0x2 [vgpu]")
OUR_FRAME = re.compile(r"\+0x[0-9a-f]+/0x[0-9a-f]+ \[(vgpu|nvsim)\]")
#: console lines kept for the lockup check (the panic's backtraces are last)
CONSOLE_TAIL = 3000


def lockup_outside_our_modules(console: list[str]) -> str | None:
    """Where the guest's console shows a soft lockup whose backtraces (the
    panic prints every CPU's: qemu_cmd) are all outside vgpu.ko and
    nvsim.ko: the stuck tasks' names; else None (no lockup, no backtrace to
    tell by, or one in our modules)."""
    stuck = [m.group(1) or "?" for m in map(LOCKUP.search, console) if m]
    if not stuck:
        return None
    if not any("Call Trace:" in l for l in console):
        return None
    if any(OUR_FRAME.search(l) for l in console):
        return None
    return ", ".join(dict.fromkeys(n for n in stuck if n != "?")) or "?"


def run(args: argparse.Namespace) -> int:
    if not args.command:
        sys.exit("vm: nothing to run: give a command after --")
    if any(c.isspace() for c in str(REPO)) or "," in str(REPO):
        sys.exit(f"vm: the repository path {str(REPO)!r} may not hold spaces or commas "
                 "(it travels on the kernel command line and in qemu's -virtfs option)")
    if args.kernel_dir:
        kver = debug_kernel(args.kernel_dir)[1]
        initrd = build_initramfs(kver, builtin=True)
    else:
        kver = args.kernel or default_kernel_version()
        initrd = build_initramfs(kver)
    code, console = boot_once(args, kver, initrd)
    stuck = lockup_outside_our_modules(console) if code != 0 else None
    if stuck is None:
        return code
    # README.md, "A guest that livelocks": seen three times, each in
    # the first runc of a VM run, both vCPUs stuck in runc and its child;
    # once more and it fails.
    print(f"vm: the guest livelocked outside vgpu's modules (soft lockup in {stuck}; the "
          f"backtraces above name neither vgpu.ko nor nvsim.ko): a test-bed hang "
          f"(README.md, \"A guest that livelocks\"); running the command once more",
          flush=True)
    return boot_once(args, kver, initrd)[0]


def boot_once(args: argparse.Namespace, kver: str, initrd: Path) -> tuple[int, list[str]]:
    """Boot the VM once and run the command: (the exit status, the
    console's last CONSOLE_TAIL lines)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    outdir = Path(tempfile.mkdtemp(prefix="run-", dir=BUILD))
    (outdir / "guest-entry.sh").write_text(guest_script(args, kver))
    cmd = qemu_cmd(args, kver, initrd, outdir)
    if args.verbose:
        print("vm:", shlex.join(cmd), file=sys.stderr)
    t0 = time.monotonic()
    print(f"vm: booting {kver} ({'kvm' if args.kvm else 'tcg'}), "
          f"running: {shlex.join(args.command)}", flush=True)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            start_new_session=True)
    deadline = t0 + args.timeout
    timed_out = False
    console: collections.deque[str] = collections.deque(maxlen=CONSOLE_TAIL)
    killer = threading.Timer(args.timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    killer.start()
    try:
        for raw in proc.stdout:
            line = console_line(raw)
            if line is not None:
                console.append(line)
                sys.stdout.write(line)
                sys.stdout.flush()
    finally:
        killer.cancel()
        proc.wait()
    timed_out = time.monotonic() >= deadline
    elapsed = time.monotonic() - t0
    result_file = outdir / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    dmesg = (outdir / "dmesg.txt").read_text(errors="replace") if (outdir / "dmesg.txt").exists() else ""
    code = summarize(result, dmesg, timed_out, elapsed, args)
    leaks = outdir / "kmemleak.txt"
    if args.kmemleak and leaks.exists() and leaks.stat().st_size:
        print("vm: ---- kmemleak report ----")
        print(leaks.read_text(errors="replace")[:20000])
    if args.keep:
        print(f"vm: artifacts kept in {outdir}")
    else:
        shutil.rmtree(outdir, ignore_errors=True)
    return code, list(console)


def summarize(result: dict | None, dmesg: str, timed_out: bool, elapsed: float,
              args: argparse.Namespace) -> int:
    print(f"vm: ---- VM finished in {elapsed:.1f}s ----", flush=True)
    if timed_out:
        print(f"vm: FAIL: timed out after {args.timeout}s")
        return 124
    if result is None:
        print("vm: FAIL: the guest left no result (it did not boot or crashed)")
        if dmesg:
            print(dmesg[-4000:])
        return 126
    failures = []
    bad, starved = bad_dmesg_lines(dmesg)
    if starved:
        print(f"vm: note: {len(starved)} RCU report(s) with no CPU or task stalled: the "
              f"grace-period kthread was not run for seconds (the host's load), not a "
              f"failure")
    if bad:
        failures.append("kernel log holds warnings or errors:\n  " + "\n  ".join(bad[:20]))
    for check in result.get("checks", []):
        if not check["ok"]:
            failures.append(f"{check['name']}: {check['detail']}")
    rc = int(result.get("rc", 1))
    print(f"vm: command exit status {rc}")
    for check in result.get("checks", []):
        print(f"vm: check {check['name']}: {'ok' if check['ok'] else 'FAILED'}"
              + (f" ({check['detail']})" if check["detail"] and not check["ok"] else ""))
    print(f"vm: dmesg check: {'ok' if not bad else 'FAILED'}")
    if failures:
        for f in failures:
            print("vm: FAIL:", f)
        if dmesg and bad:
            print("vm: ---- guest dmesg (tail) ----")
            print(dmesg[-6000:])
        return 125 if rc == 0 else rc
    return rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vm.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="boot the VM and run a command in it")
    r.add_argument("--kernel", help="kernel version (default: newest with headers)")
    r.add_argument("--kernel-dir", help="boot the kernel built by tools/vm/debug-kernel.sh in "
                   "this directory (bzImage, kernel.release; 9p built in) instead of /boot's")
    r.add_argument("--load-nvsim", action="store_true", help="insmod kmod/nvsim/nvsim.ko first")
    r.add_argument("--nvsim-params", default="num_gpus=2 fb_size=17179869184",
                   help="nvsim module parameters (default: %(default)s)")
    r.add_argument("--load-nvidia", metavar="DIR",
                   help="insmod NVIDIA's own nvidia.ko and nvidia-uvm.ko from DIR (tools/realdrv: "
                        "no GPU, the RM core only) instead of nvsim, and make their nodes")
    r.add_argument("--load-vgpu", action="store_true",
                   help="insmod kmod/vgpu/vgpu.ko after nvsim (or the real driver: see --vgpu-ko)")
    r.add_argument("--nvsim-ko", default="kmod/nvsim/nvsim.ko",
                   help="the nvsim.ko --load-nvsim loads (default: %(default)s)")
    r.add_argument("--vgpu-ko", default="kmod/vgpu/vgpu.ko",
                   help="the vgpu.ko --load-vgpu loads (default: %(default)s)")
    r.add_argument("--kmemleak", action="store_true",
                   help="clear kmemleak before the command, scan after it (and after the "
                   "modules unload): any unreferenced object fails the run (debug kernel)")
    r.add_argument("--no-leak-check", action="store_true", help="skip nvsim's live-object check")
    r.add_argument("--mem", type=int, default=2048, help="guest memory in MiB")
    r.add_argument("--smp", type=int, default=2, help="guest CPUs")
    r.add_argument("--kvm", action="store_true", help="use KVM instead of TCG (where nested KVM works)")
    r.add_argument("--timeout", type=float, default=3000, help="seconds before the VM is killed")
    r.add_argument("--append", default="", help="extra kernel command line")
    r.add_argument("--keep", action="store_true", help="keep the result directory")
    r.add_argument("-v", "--verbose", action="store_true")
    r.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.command and a.command[0] == "--":
        a.command = a.command[1:]
    if os.environ.get("VGPU_VM_KVM") == "1":
        a.kvm = True
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
