"""Ground truth from NVIDIA's own code: libcuda's cuInit and nvidia-smi of
535.261.03 (Debian's packages, `make deps`) on NVIDIA's own 535.261.03
driver with no GPU, directly and through a slice (vgpu.ko over that
driver), each call logged by tools/nvlog (LD_PRELOAD).

The sequences are committed in tests/data/realdrv-535/ (one call a line:
node, kind, class/control/command, status): what nvsim must answer the
same where it has no GPU either, and what vgpu.ko must not change.  A
change in them is a change in NVIDIA's code or in the test bed, and this
test says which line.  Handles are left out (RM picks them).

What the driver answers, and why (535.261.03's source):
  - cuInit allocates NV_CONFIDENTIAL_COMPUTE (0xcb33) on its client
    (confComputeApiConstruct), reads pageable-memory access through
    UVM_PAGEABLE_MEM_ACCESS, passes SYNC_GPU_BOOST_GROUP_INFO (0xa04: no
    groups), and gets NV_ERR_INVALID_LOCK_STATE (0x2f) from
    NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_CAPABILITIES (0xcb330101):
    confComputeApiCtrlCmdSystemGetCapabilities_IMPL (conf_compute_api.c)
    asserts rmapiLockIsOwner() && rmGpuLockIsOwner(), and with no GPU no
    GPU lock is taken for the control (dmesg: "nvAssertFailedNoLog ...
    conf_compute_api.c:76").  cuInit then returns CUDA_ERROR_UNKNOWN (999)
    and does the same again on a second call.
  - nvidia-smi (NVML) finds no probed GPU (GPU_GET_PROBED_IDS), frees its
    client, closes nvidiactl, and then allocates its MIG sessions
    AMPERE_SMC_CONFIG_SESSION (0xc639) and AMPERE_SMC_MONITOR_SESSION
    (0xc640) on fd -1 (after opening /dev/nvidia-caps/nvidia-cap1 and 2):
    the kernel's EBADF, no driver sees them.  It prints "Failed to
    initialize NVML: Unknown Error" and exits 255.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import nvuser
from vgpu_fixtures import MiB
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "realdrv-535"
NVLOG = ROOT / "build" / "nvlog.so"
CUDA_ERROR_UNKNOWN = 999

CUINIT = """
import ctypes
c = ctypes.CDLL("libcuda.so.1")
print("cuInit", c.cuInit(0), c.cuInit(0))
"""

_LINE = re.compile(r"^\d+ (?P<node>\S+) (?P<rest>.*)$")


def normalise(log: str) -> list[str]:
    """nvlog's lines -> one line per call without thread ids and handles:
    'NODE esc 0xNR ret=R', 'NODE alloc 0xCLASS status=S ret=R',
    'NODE control 0xCMD status=S ret=R', 'NODE free status=S ret=R',
    'NODE uvm 0xCMD ret=R errno=E'."""
    out = []
    for line in log.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        node, rest = os.path.basename(m["node"]), m["rest"]
        f = dict(kv.split("=", 1) for kv in rest.split()[1:] if "=" in kv)
        kind = rest.split()[0]
        if kind == "uvm":
            out.append(f"{node} uvm {int(f['cmd']):#x} ret={f['ret']} errno={f['errno']}")
        elif kind == "alloc":
            out.append(f"{node} alloc {f['class']} status={f['status']} ret={f['ret']}")
        elif kind == "control":
            out.append(f"{node} control {f['cmd']} status={f['status']} ret={f['ret']}")
        elif kind == "free":
            out.append(f"{node} free status={f['status']} ret={f['ret']}")
        elif kind.startswith("esc="):
            out.append(f"{node} esc {kind[4:]} ret={f['ret']}")
        else:
            out.append(f"{node} {rest}")
    return out


def userspace_env(log: Path) -> dict:
    try:
        env = nvuser.env()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    if not NVLOG.is_file():
        pytest.fail(f"{NVLOG} missing: make build/nvlog.so")
    env.update(LD_PRELOAD=str(NVLOG), NVLOG=str(log))
    return env


def run_logged(argv: list[str], tmp_path: Path, name: str,
               slice_prefix: str | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run argv with NVIDIA's user space and nvlog; with slice_prefix, its
    opens of /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0 open the
    slice's nodes instead (nvlog's NVLOG_NODES).  Not a bind mount of the
    slice's nodes over /dev/nvidia*, as the OCI hook does in a container:
    libcuda and NVML stat /dev/nvidiactl first and refuse a node whose
    major is not 195 (cuInit: CUDA_ERROR_NO_DEVICE after retries; NVML:
    "GPU access blocked by the operating system"), and vgpu.ko's nodes
    have vgpu's own major."""
    log = tmp_path / f"{name}.log"
    env = userspace_env(log)
    if slice_prefix:
        env["NVLOG_NODES"] = slice_prefix
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    calls = normalise(log.read_text() if log.exists() else "")
    sys.stdout.write(f"--- {name}: rc={r.returncode}\n{r.stdout}{r.stderr}" + "\n".join(calls) + "\n")
    return r, calls


def committed(name: str) -> list[str]:
    return [ln for ln in (DATA / f"{name}.calls").read_text().splitlines()
            if ln and not ln.startswith("#")]


def record_if_asked(name: str, calls: list[str]) -> None:
    """VGPU_REALDRV535_OUT=DIR: write the observed sequence there (how the
    committed files are made)."""
    out = os.environ.get("VGPU_REALDRV535_OUT")
    if out:
        (Path(out) / f"{name}.calls").write_text("\n".join(calls) + "\n")


def cuinit(tmp_path, name, prefix=None):
    r, calls = run_logged([sys.executable, "-c", CUINIT], tmp_path, name, prefix)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cuInit", str(CUDA_ERROR_UNKNOWN), str(CUDA_ERROR_UNKNOWN)]
    return calls


def smi(tmp_path, name, prefix=None):
    r, calls = run_logged([str(nvuser.smi())], tmp_path, name, prefix)
    assert r.returncode == 255
    assert r.stdout.strip() == "Failed to initialize NVML: Unknown Error"
    return calls


# ------------------------------------------------------------ the driver alone
def test_cuinit_on_nvidias_driver(tmp_path):
    calls = cuinit(tmp_path, "cuinit")
    record_if_asked("cuinit", calls)
    one = calls[:len(calls) // 2]
    assert calls == one + one                     # the second cuInit repeats the first
    assert "nvidiactl alloc 0xcb33 status=0 ret=0" in one
    assert "nvidia-uvm uvm 0x27 ret=0 errno=0" in one          # UVM_PAGEABLE_MEM_ACCESS
    assert "nvidiactl control 0xa04 status=0 ret=0" in one
    assert one.index("nvidiactl control 0xcb330101 status=0x2f ret=0") == \
        one.index("nvidiactl control 0xa04 status=0 ret=0") + 1
    assert calls == committed("cuinit")


def test_nvidia_smi_on_nvidias_driver(tmp_path):
    calls = smi(tmp_path, "nvidia-smi")
    record_if_asked("nvidia-smi", calls)
    assert calls[-2:] == ["fd-1 alloc 0xc639 status=0 ret=-1", "fd-1 alloc 0xc640 status=0 ret=-1"]
    assert calls == committed("nvidia-smi")


# ------------------------------------------------------------ through a slice
def traced(kern, sl, run):
    """run() with the slice traced (what `vgpuctl trace` records: vgpu.ko's
    VGPU_CMD_TRACE records, docs/trace.md); the slice's records."""
    ts = kern.trace_stream(timeout=5)
    try:
        kern.slice_set(sl.id, trace=True)
        got = run()
        recs = [r for r in ts.drain(1.0) if r.slice_id == sl.id]
    finally:
        kern.slice_set(sl.id, trace=False)
        ts.close()
    return got, recs


def _st(v: int) -> str:
    return "0" if v == 0 else f"{v:#x}"


def trace_calls(recs) -> list[str]:
    """vgpu.ko's trace of the slice, in normalise()'s form.  The trace holds
    the class a root client was asked as (NV01_ROOT, 0), nvlog the one the
    call wrote back (NV01_ROOT_CLIENT: escape.c forces it)."""
    from vgpu.abi import trace as T
    out = []
    for rec in recs:
        r = T.record_json(rec)
        if r["op"] != "ioctl":
            continue
        ret = r["ret"]
        if r["node"] == "uvm":
            out.append(f"nvidia-uvm uvm {r['nr']:#x} " +
                       (f"ret=-1 errno={-ret}" if ret < 0 else f"ret={ret} errno=0"))
            continue
        node, item, st = f"nvidia{r['node']}" if r["node"] != "ctl" else "nvidiactl", \
            r.get("item", {}), _st(r.get("status", 0))
        if item.get("kind") == "class":
            cls = item["number"] or 0x41
            out.append(f"{node} alloc {cls:#x} status={st} ret={ret}")
        elif item.get("kind") == "control":
            out.append(f"{node} control {item['number']:#x} status={st} ret={ret}")
        elif r["name"] == "NV_ESC_RM_FREE":
            out.append(f"{node} free status={st} ret={ret}")
        else:
            out.append(f"{node} esc {r['nr']:#x} ret={ret}")
    return out


def reaching_the_driver(calls: list[str]) -> list[str]:
    return [c for c in calls if not c.startswith("fd-")]


def test_cuinit_through_a_slice_answers_as_the_driver(make_slice, kern, tmp_path):
    """The same calls and answers as on the driver alone, and vgpu.ko's
    trace of the slice is the same sequence.  Before vgpu.ko forwarded a
    PID share policy as made, cuInit returned CUDA_ERROR_INVALID_VALUE (1)
    after SET_INHERITED_SHARE_POLICY answered NV_ERR_INVALID_ARGUMENT."""
    sl = make_slice(gpus=[(0, 64 * MiB)])
    calls, recs = traced(kern, sl, lambda: cuinit(tmp_path, "cuinit-slice", sl.prefix))
    assert calls == committed("cuinit")
    assert trace_calls(recs) == reaching_the_driver(calls)


def test_nvidia_smi_through_a_slice_answers_as_the_driver(make_slice, kern, tmp_path):
    """As for cuInit; the root client's class written back is the driver's
    NV01_ROOT_CLIENT (0x41) through vgpu.ko too (it was the caller's 0)."""
    sl = make_slice(gpus=[(0, 64 * MiB)])
    calls, recs = traced(kern, sl, lambda: smi(tmp_path, "nvidia-smi-slice", sl.prefix))
    assert calls == committed("nvidia-smi")
    assert trace_calls(recs) == reaching_the_driver(calls)
