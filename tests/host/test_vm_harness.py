"""Unit tests of the VM harness's host side (no VM is booted here)."""
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("vm", REPO / "tools/vm/vm.py")
vm = importlib.util.module_from_spec(spec)
sys.modules["vm"] = vm
spec.loader.exec_module(vm)


@pytest.mark.parametrize("line", [
    "[   12.3] WARNING: CPU: 0 PID: 1 at kmod/nvsim/rm.c:10 nvsim_ioctl+0x1/0x2",
    "[    1.0] BUG: kernel NULL pointer dereference, address: 0000000000000008",
    "[    2.0] Oops: 0000 [#1] PREEMPT SMP NOPTI",
    "[    3.0] WARNING: possible circular locking dependency detected",
    "[    4.0] BUG: sleeping function called from invalid context at mm/slab.h:1",
    "[    5.0] refcount_t: underflow; use-after-free.",
    "[   92.4] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
    "[   23.7] rcu: INFO: rcu_preempt self-detected stall on CPU",
    "[  243.1] INFO: task python:312 blocked for more than 120 seconds.",
    "[  116.5] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [runc:189]",
])
def test_dmesg_patterns_catch_kernel_reports(line):
    assert vm.DMESG_BAD.search(line)


@pytest.mark.parametrize("line", [
    "[    0.1] nvsim: 2 simulated GPUs, 16384 MiB FB each",
    "[    7.2] reboot: Power down",
    "[    1.1] 9pnet: Installing 9P2000 support",
])
def test_dmesg_patterns_pass_normal_lines(line):
    assert not vm.DMESG_BAD.search(line)


def test_boot_modules_resolve_in_dependency_order():
    kver = vm.default_kernel_version()
    order = vm.module_deps(kver, vm.BOOT_MODULES)
    names = [Path(p).name for p in order]
    assert names.index("9pnet.ko") < names.index("9pnet_virtio.ko")
    assert names.index("virtio.ko") < names.index("virtio_pci.ko")
    assert names[-1] == "9p.ko"


def _args(**kw):
    ns = vm.argparse.Namespace(load_nvsim=False, nvsim_params="num_gpus=2", load_vgpu=False,
                               no_leak_check=False, command=["echo", "a b"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_guest_script_quotes_the_command():
    cmd = ["sh", "-c", "echo 'x'; exit 3"]
    script = vm.guest_script(_args(command=cmd), "6.1.0")
    line = next(l for l in script.splitlines() if l.startswith("export VGPU_CMD="))
    value = vm.shlex.split(line.removeprefix("export VGPU_CMD="))[0]
    assert vm.shlex.split(value) == cmd
    assert "export VGPU_LOAD_NVSIM=0" in script


def test_summary_fails_on_kernel_warning(capsys):
    result = {"rc": 0, "checks": [{"name": "nvsim-leaks", "ok": True, "detail": ""}]}
    code = vm.summarize(result, "[ 1.0] WARNING: CPU: 1 PID: 2 at x.c:3 f+0x0\n", False, 1.0, _args())
    assert code == 125
    assert "kernel log holds warnings" in capsys.readouterr().out


STARVED = """\
[   86.777574] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[   86.777574] rcu: \tAll QSes seen, last rcu_preempt kthread activity 5252 (4294914001-4294908749), jiffies_till_next_fqs=1, root ->qsmask 0x0
[   86.777574] rcu: rcu_preempt kthread starved for 5252 jiffies! g13757 f0x2 RCU_GP_WAIT_FQS(5) ->state=0x0 ->cpu=1
[   86.777574] rcu: \tUnless rcu_preempt kthread gets sufficient CPU time, OOM is now expected behavior.
"""
STALLED = """\
[   92.4] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[   92.4] rcu: \t1-...!: (0 ticks this GP) idle=9a4/1/0x4000000000000000 softirq=1/1 fqs=0
[   92.4] \t(detected by 0, t=5252 jiffies, g=13757, q=12 ncpus=2)
"""


def test_an_rcu_report_of_host_starvation_is_noted_not_failed(capsys):
    """No CPU stalled ("All QSes seen"): the host did not run the vCPU;
    a report naming a stalled CPU fails as before."""
    result = {"rc": 0, "checks": []}
    assert vm.summarize(result, STARVED, False, 1.0, _args()) == 0
    out = capsys.readouterr().out
    assert "vm: note: 1 RCU report(s) with no CPU or task stalled" in out
    assert "dmesg check: ok" in out
    assert vm.summarize(result, STALLED, False, 1.0, _args()) == 125
    assert vm.summarize(result, STARVED + "[ 90.0] WARNING: CPU: 1 PID: 2 at x.c:3 f\n", False,
                        1.0, _args()) == 125


def test_summary_fails_on_failed_check(capsys):
    result = {"rc": 0, "checks": [{"name": "nvsim-leaks", "ok": False, "detail": "objects 3"}]}
    assert vm.summarize(result, "", False, 1.0, _args()) == 125


def test_summary_passes_command_status_through():
    assert vm.summarize({"rc": 3, "checks": []}, "", False, 1.0, _args()) == 3
    assert vm.summarize({"rc": 0, "checks": []}, "", False, 1.0, _args()) == 0


def test_summary_reports_missing_result_and_timeout():
    assert vm.summarize(None, "", False, 1.0, _args()) == 126
    assert vm.summarize(None, "", True, 1.0, _args(timeout=5)) == 124


def test_console_lines_lose_firmware_screen_codes():
    assert vm.console_line(b"\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r\n") is None
    assert vm.console_line(b"\x1bc\x1b[?7l\x1b[2Jvm-guest: running: x\r\n") == "vm-guest: running: x\n"
    assert vm.console_line(b"314 passed in 21.70s\n") == "314 passed in 21.70s\n"


# A soft lockup's panic as the guest's console shows it (softlockup_panic,
# panic_print=0x40: qemu_cmd), cut to the lines the check reads.
LOCKUP = """[   48.750051] watchdog: BUG: soft lockup - CPU#1 stuck for 45s! [runc:150]
[   48.755148] Kernel panic - not syncing: softlockup: hung tasks
[   48.755148] Call Trace:
[   48.755148]  <IRQ>
[   48.755148]  dump_stack_lvl+0x44/0x5c
[   48.755148]  panic+0x118/0x2ed
[   48.762126] RIP: 0010:{frame}
[   48.762126] Call Trace:
[   48.762126]  <TASK>
[   48.762126]  do_syscall_64+0x55/0xb0
""".splitlines()


def test_a_lockup_outside_our_modules_is_told_apart():
    """vm.py runs a command once more only where the guest livelocked with
    every backtrace outside vgpu.ko and nvsim.ko (README.md, "A guest
    that livelocks"); a lockup in our modules, or one without a backtrace to
    tell by, fails as it is."""
    outside = [l.format(frame="p9_client_rpc+0x2e/0x470 [9pnet]") for l in LOCKUP]
    assert vm.lockup_outside_our_modules(outside) == "runc:150"
    for ours in ("vgpu_ioctl+0x2e/0x1000 [vgpu]", "nvsim_rm_alloc+0x10/0x80 [nvsim]"):
        assert vm.lockup_outside_our_modules([l.format(frame=ours) for l in LOCKUP]) is None
    no_trace = [l for l in outside if "Call Trace" not in l]
    assert vm.lockup_outside_our_modules(no_trace) is None
    assert vm.lockup_outside_our_modules(["[ 1.0] reboot: Power down"]) is None


def test_the_guest_panics_on_a_soft_lockup_with_every_cpus_backtrace():
    cmd = vm.qemu_cmd(vm.argparse.Namespace(kvm=False, append="", mem=2048, smp=2,
                                            kernel_dir=None),
                      vm.default_kernel_version(), Path("/initrd"), Path("/out"))
    append = cmd[cmd.index("-append") + 1].split()
    assert "softlockup_panic=1" in append and "panic_print=0x40" in append
