"""NVIDIA's user-space libraries of a release, where they are unpacked, and
a ctypes driver-API program run in a child process: the harness that the
libcuda tests (tests/vm/cuda_lib.py re-exports it) and bench/cuda_startup.py
share.  Standard library only.

make deps unpacks Debian's libcuda1 and libnvidia-ml1 under $VGPU_CACHE
(default /var/cache/vgpu; tools/nvuser.py); the VM sees the host's
filesystem read-only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

RELEASE = "535.261.03"


def nvidia_lib(name: str, release: str = RELEASE) -> Path:
    """The unpacked library `name` (e.g. libcuda.so.1) of `release`."""
    cache = Path(os.environ.get("VGPU_CACHE", "/var/cache/vgpu"))
    return (cache / "nvidia-userspace" / release / "usr/lib/x86_64-linux-gnu/nvidia/current"
            / name)


def nvidia_userspace(release: str = RELEASE) -> tuple[Path, Path] | None:
    """(nvidia-smi, the directory of libnvidia-ml.so.1) of a release's
    unpacked user space under $VGPU_CACHE (default /var/cache/vgpu), or None.
    The one place the tests locate NVIDIA's nvidia-smi."""
    root = Path(os.environ.get("VGPU_CACHE", "/var/cache/vgpu")) / "nvidia-userspace" / release
    smi = root / "usr/lib/nvidia/current/nvidia-smi"
    lib = root / "usr/lib/x86_64-linux-gnu/nvidia/current"
    if smi.exists() and (lib / "libnvidia-ml.so.1").exists():
        return smi, lib
    return None


def libcuda_missing() -> str | None:
    lib = nvidia_lib("libcuda.so.1")
    return None if lib.exists() else f"{lib} not unpacked (make deps)"


# Shared by every child: libcuda loaded by path, CUresult checked by name.
PRELUDE = textwrap.dedent("""
    import ctypes, json, os, sys
    cu = ctypes.CDLL(sys.argv[1])
    out = {}

    def call(name, *args):
        r = getattr(cu, name)(*args)
        out.setdefault('calls', []).append([name, r])
        return r

    def check(name, *args):
        r = call(name, *args)
        if r != 0:
            print(json.dumps(out)); print(f'{name} -> {r}', file=sys.stderr)
            sys.exit(1)
""")


def run_cuda(body: str, env: dict | None = None, timeout: float = 300,
             argv_prefix: list[str] | None = None,
             nvlog: Path | None = None) -> subprocess.CompletedProcess:
    """Run PRELUDE + body in a child python with libcuda's path as argv[1];
    the body prints its results (json) on stdout.  With nvlog, every NVIDIA
    ioctl of the child is logged there (tools/nvlog, build/nvlog.so)."""
    cmd, full_env = cuda_child(body, env, argv_prefix, nvlog)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)


def cuda_child(body: str, env: dict | None, argv_prefix: list[str] | None,
                nvlog: Path | None) -> tuple[list[str], dict]:
    code = PRELUDE + textwrap.dedent(body)
    cmd = [*(argv_prefix or []), sys.executable, "-c", code, str(nvidia_lib("libcuda.so.1"))]
    # libcuda dlopen()s libnvidia-ptxjitcompiler.so.1 by its soname for
    # cuModuleLoadData of PTX (CUDA_ERROR_JIT_COMPILER_NOT_FOUND without it).
    libdir = str(nvidia_lib("libcuda.so.1").parent)
    extra = {"LD_LIBRARY_PATH": ":".join(
        p for p in (libdir, os.environ.get("LD_LIBRARY_PATH")) if p)}
    extra.update(env or {})
    if nvlog is not None:
        so = Path(__file__).resolve().parents[2] / "build" / "nvlog.so"
        assert so.is_file(), f"{so} missing: make build/nvlog.so"
        extra.update(LD_PRELOAD=str(so), NVLOG=str(nvlog))
    return cmd, {**os.environ, **extra}


def popen_cuda(body: str, env: dict | None = None, argv_prefix: list[str] | None = None,
               nvlog: Path | None = None) -> subprocess.Popen:
    """run_cuda's child, started with pipes on stdin and stdout (text, line
    by line) for a program that talks to the test or to another child while
    it runs (CUDA IPC's handle, passed through a pipe)."""
    cmd, full_env = cuda_child(body, env, argv_prefix, nvlog)
    return subprocess.Popen(cmd, env=full_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)


def nvlog_lines(log: Path) -> list[str]:
    """nvlog's lines without the thread id and the node's directory:
    'nvidiactl control h=.../... cmd=0x... size=N status=0x.. ret=R', ..."""
    out = []
    for line in log.read_text().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit():
            out.append(f"{os.path.basename(parts[1])} {parts[2]}")
    return out


def control_status(lines: list[str], cmd: int) -> list[str]:
    """The status of each call of control cmd, in order ('0', '0x56', ...)."""
    tag = f" cmd={cmd:#x} "
    return [ln.split("status=")[1].split()[0] for ln in lines
            if " control " in f" {ln}" and tag in ln]


def in_slice(d) -> list[str]:
    """The argv prefix that runs a command with a slice's vgpudev nodes (a
    vgpu.ko "vgpudev" mount of the slice at d) as /dev/nvidia*, in a private
    mount namespace, as the OCI hook binds them into a container; and
    /proc/driver/nvidia/params saying "ModifyDeviceFiles: 0", as vgpufs's
    view does in a container."""
    script = (
        f"mount --bind {d}/nvidiactl /dev/nvidiactl && "
        f"mount --bind {d}/nvidia0 /dev/nvidia0 && "
        f"mount --bind {d}/nvidia-uvm /dev/nvidia-uvm && "
        "mount -t tmpfs none /proc/driver && mkdir /proc/driver/nvidia && "
        "printf 'ModifyDeviceFiles: 0\\n' > /proc/driver/nvidia/params && exec \"$@\"")
    return ["unshare", "-m", "sh", "-c", script, "sh"]
