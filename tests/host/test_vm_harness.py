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
