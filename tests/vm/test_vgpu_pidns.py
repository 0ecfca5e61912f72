"""GET_PIDS through a slice numbers processes as the caller's PID namespace
sees them (the driver does too: gpu_rmapi.c, _gpuConvertPid; vgpu.ko keeps
the slice's among them, docs/nvml.md), GET_PID_INFO takes that number."""
from __future__ import annotations

import ctypes
import json
import os

from vgpu_fixtures import MiB, nvsim_fb, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401

CLONE_NEWPID = 0x20000000


def _in_new_pidns(prefix: str, wfd: int) -> None:
    """Runs in a fork: unshare a PID namespace, fork its init, allocate there
    and report what GET_PIDS shows, as JSON on wfd."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) != 0:
        os.write(wfd, json.dumps({"error": os.strerror(ctypes.get_errno())}).encode())
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        from vgpu.abi.nvclient import RmClient
        c = RmClient(prefix)
        g = c.open_gpus()[0]
        g.alloc(2 * MiB)
        out = {"getpid": os.getpid(), "pids": g.pids(),
               "vidmem": {str(k): v for k, v in g.pid_vidmem([os.getpid()]).items()}}
        c.close()
        os.write(wfd, json.dumps(out).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os._exit(0)


def test_get_pids_translates_to_the_callers_pid_namespace(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            _in_new_pidns(sl.prefix, w)
        finally:
            os._exit(1)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(child, 0)
    out = json.loads(data)
    assert "error" not in out, out
    assert out["getpid"] == 1                       # the namespace's init
    assert out["pids"] == [1], f"expected the namespace's own pid, got {out['pids']}"
    assert out["vidmem"] == {"1": 2 * MiB}
    assert wait_until(lambda: sl.used() == 0 and nvsim_fb(0) == 0, 10)
