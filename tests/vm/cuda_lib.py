"""Where NVIDIA's user-space libraries of a release are unpacked, and a
ctypes driver-API program that runs in a child process.

The one place tests find them (make deps unpacks Debian's libcuda1 and
libnvidia-ml1 under $VGPU_CACHE, default /var/cache/vgpu; the VM sees the
host's filesystem read-only): swap nvidia_lib() for the shared helper when
there is one.
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
    cmd, full_env = _cuda_child(body, env, argv_prefix, nvlog)
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)


def _cuda_child(body: str, env: dict | None, argv_prefix: list[str] | None,
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
    cmd, full_env = _cuda_child(body, env, argv_prefix, nvlog)
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


# The driver-API sequence past cuCtxCreate; exact figures are asserted by
# the caller (nvsim directly, or a slice's quota).
SEQUENCE = """
    check('cuInit', 0)
    dev = ctypes.c_int()
    check('cuDeviceGet', ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    check('cuCtxCreate_v2', ctypes.byref(ctx), 0, dev)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check('cuMemGetInfo_v2', ctypes.byref(free), ctypes.byref(total))
    out['free'], out['total'] = free.value, total.value
    # cuMemAlloc until CUDA_ERROR_OUT_OF_MEMORY (2), in CHUNK pieces
    chunk, ptrs = CHUNK, []
    while len(ptrs) < 100000:
        p = ctypes.c_uint64()
        r = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(chunk))
        if r:
            out['alloc_error'] = r
            break
        ptrs.append(p.value)
    out['allocated'] = len(ptrs) * chunk
    for q in ptrs[1:]:
        check('cuMemFree_v2', ctypes.c_uint64(q))
    d = ctypes.c_uint64(ptrs[0])
    src = (ctypes.c_ubyte * 65536)(*[(i * 7 + 3) & 255 for i in range(65536)])
    dst = (ctypes.c_ubyte * 65536)()
    check('cuMemcpyHtoD_v2', d, src, ctypes.c_size_t(65536))
    check('cuMemcpyDtoH_v2', dst, d, ctypes.c_size_t(65536))
    out['copied'] = bytes(src) == bytes(dst)
    hp = ctypes.c_void_p()
    check('cuMemAllocHost_v2', ctypes.byref(hp), ctypes.c_size_t(1 << 20))
    buf = ctypes.create_string_buffer(1 << 20)
    check('cuMemHostRegister_v2', buf, ctypes.c_size_t(1 << 20), 0)
    st, ev = ctypes.c_void_p(), ctypes.c_void_p()
    check('cuStreamCreate', ctypes.byref(st), 0)
    check('cuEventCreate', ctypes.byref(ev), 0)
    check('cuEventRecord', ev, st)
    check('cuEventSynchronize', ev)
    check('cuStreamSynchronize', st)
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check('cuModuleLoadData', ctypes.byref(mod), PTX)
    check('cuModuleGetFunction', ctypes.byref(fn), mod, b'k')
    arg = ctypes.c_uint64(d.value)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    check('cuLaunchKernel', fn, 1, 1, 1, 1, 1, 1, 0, st, args, None)
    check('cuStreamSynchronize', st)
    check('cuMemHostUnregister', buf)
    check('cuMemFreeHost', hp)
    check('cuMemFree_v2', d)
    check('cuCtxDestroy_v2', ctx)
    print(json.dumps(out))
"""

# A kernel that stores 42 through its pointer argument: JIT'd by libcuda
# (libnvidia-ptxjitcompiler) for sm_90.  nvsim never runs it.
PTX = (b".version 7.0\n.target sm_50\n.address_size 64\n"
       b".visible .entry k(.param .u64 p)\n{\n .reg .b64 %rd<2>;\n .reg .b32 %r<2>;\n"
       b" ld.param.u64 %rd1, [p];\n cvta.to.global.u64 %rd1, %rd1;\n"
       b" mov.u32 %r1, 42;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n")


def sequence_body(chunk: int) -> str:
    return f"    CHUNK = {chunk}\n    PTX = {PTX!r}\n" + SEQUENCE
