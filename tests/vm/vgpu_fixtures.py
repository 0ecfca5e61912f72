"""Fixtures for the vgpu.ko tests (tests/vm/test_vgpu_*.py).

They run in the VM with nvsim (2 GPUs x 16 GiB) and vgpu.ko loaded:

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_vgpu_*.py

and are skipped (conftest.py) when /sys/module/vgpu is absent.  A test
module imports what it uses by name, the fixtures too: at least
``vgpu_leak_check`` (autouse: imported, it runs after every test of the
module) and ``kern``, and ``make_slice`` for ``sl``.

Every slice a test makes is deleted (forced) after its clients and fds are
closed; then vgpu's debugfs state must report files, objects and charges 0
(and conftest's nvsim leak check must pass).  Device nodes are the ones
vgpu.ko's devtmpfs names give (/dev/vgpu/<id>/nvidiactl, nvidia<i>,
nvidia-uvm); where those do not exist, nodes are made with mknod from the
slice's major and minors in a private tmpfs directory.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from vgpu.vgpuko.client import VgpuKernel
from vgpu.vgpuko.messages import Slice
from vgpu.vgpuko.netlink import VgpuError
from vgpu.abi.nvclient import RmClient, RmError, UvmFile
from polling import wait_until

VSTATE = Path("/sys/kernel/debug/vgpu/state")
NVSIM_STATE = Path("/sys/kernel/debug/nvsim/state")
NVSIM_STATS = Path("/sys/kernel/debug/nvsim/stats")
NODE_DIR = Path("/dev/vgpu")
FALLBACK_DIR = Path("/tmp/vgpu-nodes")
GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
_ids = itertools.count(100 + (os.getpid() % 1000) * 100)


def status(fn) -> int:
    """The NV_STATUS fn() raised as an RmError, 0 when it returned."""
    try:
        fn()
        return 0
    except RmError as e:
        return e.status


def in_child(fn, cgroup: Path | None = None):
    """fn() in a forked child, moved into ``cgroup`` first when given; its
    result as {"ok": value} or {"exc": repr, "errno": n} (through JSON)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))
            out = {"ok": fn()}
        except BaseException as e:          # noqa: BLE001
            out = {"exc": repr(e), "errno": getattr(e, "errno", None)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == 0
    return json.loads(data)


# ------------------------------------------------------------------ state
class VgpuState:
    """/sys/kernel/debug/vgpu/state: "key value..." lines; the first word is
    the key, the first integer after it the value."""

    def __init__(self, text: str):
        self.text = text
        self.values: dict[str, int] = {}
        for line in text.splitlines():
            f = line.split()
            if len(f) >= 2 and f[0] not in self.values:
                try:
                    self.values[f[0]] = int(f[1], 0)
                except ValueError:
                    pass

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def leaks(self) -> list[str]:
        out = []
        for k in ("files", "objects", "charges", "tsgs", "userd_maps", "proxies",
                  "ranges", "reapers"):
            if k in ("tsgs", "userd_maps", "proxies", "ranges", "reapers") and \
                    k not in self.values:
                continue        # a vgpu.ko without compute tracking
            v = self.values.get(k)
            if v is None:
                out.append(f"vgpu state has no '{k}' line")
            elif v:
                out.append(f"{k} {v}")
        return out


def read_vstate() -> VgpuState:
    return VgpuState(VSTATE.read_text())


def nvsim_fb(gpu: int = 0) -> int:
    """nvsim's own fb_used for a GPU: the independent truth."""
    for line in NVSIM_STATE.read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "gpu" and f[2] == "fb_total" and int(f[1]) == gpu:
            return int(f[5])
    raise KeyError(gpu)


def nvsim_stat(key: str) -> str:
    """One value of nvsim's stats (last_class, last_control, release...)."""
    for line in NVSIM_STATS.read_text().splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return v.strip()
    raise KeyError(key)


def gpu_uuid(client, gpu) -> bytes:
    """The GPU's UUID (GID_INFO, SHA1, binary): what UVM_REGISTER_GPU names."""
    from vgpu.abi import nvabi as A
    p = A.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(
        flags=A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
    client.control(gpu.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_GID_INFO, p)
    return bytes(p.data[:16])


# ------------------------------------------------------------------ slices
class SliceEnv:
    """One slice made for a test: its netlink view, its device directory,
    and the clients/fds opened on it (closed before the slice is deleted)."""

    def __init__(self, kern: VgpuKernel, info: Slice):
        self.kern = kern
        self.info = info
        self.id = info.id
        self.clients: list[RmClient] = []
        self.fds: list[int] = []
        self.uvms: list[UvmFile] = []
        self.prefix = self._nodes()

    def _nodes(self) -> str:
        d = NODE_DIR / str(self.id)
        ctl = d / "nvidiactl"
        if wait_until(ctl.exists, 2.0):
            return str(d)
        # no devtmpfs names: make the nodes from the reply's numbers
        s = self.info
        if s.major is None or s.base_minor is None:
            pytest.fail(f"slice {self.id}: no {ctl} and no major/base minor in the reply")
        d = FALLBACK_DIR / str(self.id)
        d.mkdir(parents=True, exist_ok=True)
        nodes = {"nvidiactl": s.ctl_devno, "nvidia-uvm": s.uvm_devno}
        for g in s.gpus:
            nodes[f"nvidia{g.index}"] = s.gpu_devno(g.index)
        for name, dev in nodes.items():
            p = d / name
            if not p.exists():
                os.mknod(p, 0o666 | stat.S_IFCHR, dev)
        return str(d)

    def path(self, name: str) -> str:
        return os.path.join(self.prefix, name)

    def client(self, **kw) -> RmClient:
        c = RmClient(self.prefix, **kw)
        self.clients.append(c)
        return c

    def open(self, name: str = "nvidiactl", flags: int = os.O_RDWR) -> int:
        fd = os.open(self.path(name), flags | os.O_CLOEXEC)
        self.fds.append(fd)
        return fd

    def close_fd(self, fd: int) -> None:
        self.fds.remove(fd)
        os.close(fd)

    def uvm(self) -> UvmFile:
        u = UvmFile(self.prefix)
        self.uvms.append(u)
        return u

    def get(self) -> Slice:
        self.info = self.kern.slice_get(self.id)
        return self.info

    def used(self, index: int = 0) -> int:
        return self.get().gpu(index).mem_used

    def set_limit(self, index: int, limit: int) -> None:
        self.kern.slice_set(self.id, limits={index: limit})

    def close_all(self) -> None:
        for u in self.uvms:
            u.close()
        for c in self.clients:
            c.close()
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.uvms.clear()
        self.clients.clear()
        self.fds.clear()


def real_cards() -> list:
    """CARD_INFO of nvsim itself (real minors and gpu ids)."""
    with RmClient("/dev", alloc_client=False) as c:
        return c.cards


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def kern():
    k = VgpuKernel(timeout=20)
    yield k
    k.close()


@pytest.fixture
def vstate():
    if not VSTATE.exists():
        pytest.fail(f"{VSTATE} missing: vgpu's debugfs state is required for the leak checks")
    return read_vstate


@pytest.fixture(autouse=True)
def vgpu_leak_check(request):
    """After every vgpu test (and its slices' teardown): files, objects and
    charges are 0 in vgpu's own state."""
    yield
    if not VSTATE.exists():
        return
    last = []

    def ok():
        nonlocal last
        last = read_vstate().leaks()
        return not last

    wait_until(ok, 5.0)
    if last:
        pytest.fail(f"vgpu leak after {request.node.name}: {last}\n{read_vstate().text}")


@pytest.fixture
def make_slice(kern):
    """make_slice(gpus=[(real_minor, limit[, gpu_id])], name=None, id=None,
    uvm_policy=None) -> SliceEnv.  Default: GPU 0 with 256 MiB."""
    made: list[SliceEnv] = []

    def _make(gpus=((0, 256 * MiB),), name=None, id=None, uvm_policy=None) -> SliceEnv:
        sid = next(_ids) if id is None else id
        info = kern.slice_new(sid, gpus=list(gpus), name=name, uvm_policy=uvm_policy)
        env = SliceEnv(kern, info)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close_all()
    for env in made:
        try:
            kern.slice_del(env.id, force=True)
        except VgpuError as e:
            if e.errno != errno.ENOENT:
                raise


@pytest.fixture
def sl(make_slice) -> SliceEnv:
    """A slice on real GPU 0 with 256 MiB."""
    return make_slice()


def run_rmmod(name: str = "vgpu") -> subprocess.CompletedProcess:
    return subprocess.run(["rmmod", name], capture_output=True, text=True)

