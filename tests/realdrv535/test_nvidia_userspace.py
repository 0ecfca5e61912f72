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
import stat
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
        elif kind in ("vidheap", "map", "unmap"):   # escapes 0x4a, 0x4e, 0x4f with their status
            out.append(f"{node} {kind} status={f['status']} ret={f['ret']}")
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


PARAMS = "/proc/driver/nvidia/params"
SLICE_NODES = ("nvidiactl", "nvidia-uvm", "nvidia0")
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_OPERATING_SYSTEM = 304


def in_a_container_view(argv: list[str], nodes: str, params: Path | None) -> list[str]:
    """argv run as in a container the OCI hook set up: in a mount namespace
    of its own (unshare -m, private propagation: nothing leaks to the VM's
    mounts), the nodes in ``nodes`` bind-mounted over /dev/nvidiactl,
    /dev/nvidia-uvm and /dev/nvidia0, and, with params, that file over
    /proc/driver/nvidia/params (what vgpufs serves in a slice's view:
    vgpu.daemon.fs.params_text)."""
    binds = [f'mount --bind "{nodes}/{n}" /dev/{n}' for n in SLICE_NODES]
    if params is not None:
        binds.append(f'mount --bind "{params}" {PARAMS}')
    script = "set -e; " + "; ".join(binds) + '; exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def vgpufs_view(sl, tmp_path: Path, params: bool) -> tuple[str, Path | None]:
    """The slice's nodes as vgpufs presents them (its rdev, root:root 0666:
    vgpu.daemon.fs.VgpuFs._attr; the devtmpfs ones are 0600) and, with
    params, the params file vgpufs would serve on this driver."""
    from vgpu.daemon import fs as F
    from vgpu.daemon.inventory import read_params
    d = tmp_path / "dev"
    d.mkdir(exist_ok=True)
    for n in SLICE_NODES:
        p = d / n
        if not p.exists():
            os.mknod(p, 0o666 | stat.S_IFCHR, os.stat(os.path.join(sl.prefix, n)).st_rdev)
            os.chmod(p, 0o666)
    if not params:
        return str(d), None
    host = read_params(PARAMS)
    assert "ModifyDeviceFiles: 1" in host        # the driver's default
    f = tmp_path / "params"
    f.write_bytes(F.params_text(host))
    return str(d), f


def run_logged(argv: list[str], tmp_path: Path, name: str,
               slice_prefix: str | None = None,
               view: tuple[str, Path | None] | None = None,
               ) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run argv with NVIDIA's user space and nvlog.  With slice_prefix, its
    opens of /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0 open the
    slice's nodes instead (nvlog's NVLOG_NODES), the real nodes' stat
    left as it is.  With view (vgpufs_view), in a container's view instead
    (in_a_container_view): the slice's nodes mounted over /dev/nvidia*.
    NVIDIA's libraries do not accept that yet, whatever the params file
    says (test_slice_nodes_in_a_container_view): hence NVLOG_NODES for the
    sequences."""
    log = tmp_path / f"{name}.log"
    env = userspace_env(log)
    if slice_prefix:
        env["NVLOG_NODES"] = slice_prefix
    if view:
        argv = in_a_container_view(argv, *view)
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


def cuinit(tmp_path, name, prefix=None, view=None, want=CUDA_ERROR_UNKNOWN):
    r, calls = run_logged([sys.executable, "-c", CUINIT], tmp_path, name, prefix, view)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cuInit", str(want), str(want)]
    return calls


def smi(tmp_path, name, prefix=None, view=None, rc=255,
        says="Failed to initialize NVML: Unknown Error"):
    r, calls = run_logged([str(nvuser.smi())], tmp_path, name, prefix, view)
    assert r.returncode == rc
    assert r.stdout.strip() == says
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


BLOCKED = "Failed to initialize NVML: GPU access blocked by the operating system"


def test_slice_nodes_in_a_container_view(make_slice, kern, tmp_path):
    """The slice's nodes mounted over /dev/nvidia* as the OCI hook does in a
    container (vgpu.ko's major, not 195), with and without vgpufs' params
    file.  What it shows, on 535.261.03:

    - Without it (the driver's own params, ModifyDeviceFiles 1), libcuda's
      copy of nvidia-modprobe-utils' mknod_helper finds /dev/nvidiactl's
      rdev is not (195, 255) and tries to re-make it (fails: a mount
      point): cuInit answers CUDA_ERROR_NO_DEVICE and makes no ioctl.
    - With it (ModifyDeviceFiles 0: mknod_helper answers "nothing to do"),
      libcuda goes on: it opens the slice's nvidiactl and its calls reach
      vgpu.ko and the driver (NV_ESC_CHECK_VERSION_STR, SYS_PARAMS, then
      escape 0xca four times, answered EPERM by vgpu.ko; CARD_INFO and a
      root client with control 0x101).  It still gives up before
      NV_CONFIDENTIAL_COMPUTE, with CUDA_ERROR_OPERATING_SYSTEM (304): it
      checks the node again after that, by a test the params file does not
      answer (a /proc/devices naming vgpu's major nvidia-frontend does not
      either).  NVML opens the node and refuses it without an ioctl ("GPU
      access blocked by the operating system", exit 17), params or not.
    So the params file is needed (without it nothing reaches vgpu.ko) and
    not enough; the sequences above are taken through NVLOG_NODES.  This
    test says when that changes."""
    sl = make_slice(gpus=[(0, 64 * MiB)])
    bare = vgpufs_view(sl, tmp_path, params=False)
    calls = cuinit(tmp_path, "cuinit-view-noparams", view=bare, want=CUDA_ERROR_NO_DEVICE)
    assert reaching_the_driver(calls) == []
    calls = smi(tmp_path, "nvidia-smi-view-noparams", view=bare, rc=17, says=BLOCKED)
    assert reaching_the_driver(calls) == []

    view = vgpufs_view(sl, tmp_path, params=True)
    calls, recs = traced(kern, sl, lambda: cuinit(tmp_path, "cuinit-view", view=view,
                                                  want=CUDA_ERROR_OPERATING_SYSTEM))
    one = calls[:len(calls) // 2]
    assert calls == one + one                     # the second cuInit repeats the first
    assert one == 4 * ["nvidiactl esc 0xd2 ret=0", "nvidiactl esc 0xd6 ret=0",
                       "nvidiactl esc 0xca ret=-1"] + \
        ["nvidiactl esc 0xd2 ret=0", "nvidiactl esc 0xd6 ret=0", "nvidiactl esc 0xc8 ret=0",
         "nvidiactl alloc 0x41 status=0 ret=0", "nvidiactl control 0x101 status=0 ret=0",
         "nvidiactl free status=0 ret=0"]
    assert trace_calls(recs) == calls             # through the slice, all of them
    calls = smi(tmp_path, "nvidia-smi-view", view=view, rc=17, says=BLOCKED)
    assert reaching_the_driver(calls) == []
