"""Fixtures for the tests that run inside the VM test bed against nvsim.ko.

The harness (tools/vm/vm.py run --load-nvsim) boots the VM, loads nvsim with
num_gpus=2 fb_size=16GiB, mounts debugfs and runs pytest as root with
VGPU_IN_VM=1.  Outside that, every test here is skipped with the reason.

Every test runs under a leak check: after its clients and fds are closed,
/sys/kernel/debug/nvsim/state must say objects 0, clients 0, mappings 0 and
fb_used 0 on every GPU; the session ends with the same check.

VGPU_DEV_PREFIX (default /dev) points the clients at other device nodes (for
example vgpu's virtual ones); the leak check always reads nvsim's state.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the repository root and tests/vm are on sys.path by pytest's pythonpath
# (pyproject.toml), the one import path of every test
from vgpu.abi.nvclient import RmClient
from polling import wait_until

DEV = os.environ.get("VGPU_DEV_PREFIX", "/dev")
CTL = os.path.join(DEV, "nvidiactl")
STATE = Path("/sys/kernel/debug/nvsim/state")
HERE = Path(__file__).resolve().parent

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10


def _skip_reason() -> str | None:
    if os.environ.get("VGPU_IN_VM") != "1":
        return "nvsim tests run inside the VM test bed (VGPU_IN_VM=1; tools/vm/vm.py run --load-nvsim)"
    if not os.path.exists(CTL):
        return f"no NVIDIA device: {CTL} not found (is nvsim.ko loaded?)"
    return None


def _vgpu_skip_reason() -> str | None:
    reason = _skip_reason()
    if reason is None and not os.path.exists("/sys/module/vgpu"):
        reason = "vgpu.ko is not loaded (tools/vm/vm.py run --load-nvsim --load-vgpu)"
    return reason


def pytest_collection_modifyitems(config, items):
    reason = _skip_reason()
    vreason = _vgpu_skip_reason()
    for item in items:
        if Path(str(item.fspath)).resolve().parent != HERE:
            continue
        name = item.fspath.basename
        if reason is not None and name.startswith("test_nvsim"):
            item.add_marker(pytest.mark.skip(reason=reason))
        elif vreason is not None and name.startswith("test_vgpu"):
            item.add_marker(pytest.mark.skip(reason=vreason))


# ------------------------------------------------------------------ state
class NvsimState:
    """A parsed snapshot of /sys/kernel/debug/nvsim/state."""

    def __init__(self, text: str):
        self.text = text
        self.objects = self.clients = self.mappings = None
        self.gpus: dict[int, dict] = {}
        self.pids: dict[tuple[int, int], int] = {}
        self.tsgs: list[dict] = []
        self.extra: dict[str, str] = {}
        for line in text.splitlines():
            f = line.split()
            if not f:
                continue
            if f[0] in ("objects", "clients", "mappings") and len(f) == 2:
                setattr(self, f[0], int(f[1]))
            elif f[0] == "gpu" and len(f) >= 6 and f[2] == "fb_total":
                self.gpus[int(f[1])] = {"fb_total": int(f[3]), "fb_used": int(f[5])}
            elif f[0] == "pid" and len(f) >= 6:
                self.pids[(int(f[1]), int(f[3]))] = int(f[5])
            elif f[0] == "tsg" and len(f) >= 13:
                self.tsgs.append({
                    "gpu": int(f[1]), "id": int(f[2]), "client": int(f[4], 16),
                    "handle": int(f[6], 16), "enabled": int(f[8]),
                    "timeslice_us": int(f[10]), "interleave": int(f[12]),
                    "channels": int(f[14]) if len(f) >= 15 else None,
                })
            else:
                self.extra[f[0]] = line

    def fb_used(self, gpu: int) -> int:
        return self.gpus[gpu]["fb_used"]

    def fb_total(self, gpu: int) -> int:
        return self.gpus[gpu]["fb_total"]

    def pid_used(self, pid: int, gpu: int) -> int:
        return self.pids.get((pid, gpu), 0)

    def tsg(self, client: int, handle: int) -> dict | None:
        for t in self.tsgs:
            if t["client"] == client and t["handle"] == handle:
                return t
        return None

    def leaks(self) -> list[str]:
        out = []
        for k in ("objects", "clients", "mappings"):
            v = getattr(self, k)
            if v is None:
                out.append(f"state has no '{k}' line")
            elif v:
                out.append(f"{k} {v}")
        for g, d in sorted(self.gpus.items()):
            if d["fb_used"]:
                out.append(f"gpu {g} fb_used {d['fb_used']}")
        for (pid, g), b in sorted(self.pids.items()):
            if b:
                out.append(f"pid {pid} gpu {g} fb_used {b}")
        if self.tsgs:
            out.append(f"{len(self.tsgs)} tsg line(s) left")
        # dma-bufs (kmod/nvsim/dmabuf.c), where nvsim reports them
        for k in ("dmabufs", "dmabuf_dups", "dmabuf_orphans"):
            if k in self.extra and int(self.extra[k].split()[1]):
                out.append(self.extra[k])
        return out


def read_state() -> NvsimState:
    return NvsimState(STATE.read_text())


def wait_no_leaks(timeout: float = 5.0) -> list[str]:
    """Leaks still present after timeout (file releases of exiting processes
    may be in flight)."""
    last = []

    def ok():
        nonlocal last
        last = read_state().leaks()
        return not last

    wait_until(ok, timeout)
    return last


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def state_path():
    if not STATE.exists():
        pytest.fail(f"{STATE} missing: nvsim's debugfs state is required for the leak checks")
    return STATE


@pytest.fixture(scope="session", autouse=True)
def session_leak_check(request):
    yield
    if _skip_reason() is None and STATE.exists():
        left = wait_no_leaks()
        assert not left, f"nvsim state after the whole session: {left}\n{read_state().text}"


_first_leak: list[str] = []     # the test that first left something behind


@pytest.fixture(autouse=True)
def leak_check(request):
    """Every test ends with nothing live in nvsim once its clients are closed.

    After a test, releases still in flight get a few seconds.  Once a test
    has leaked, later tests fail at setup at once (naming the culprit)
    instead of each waiting for state that will not come back."""
    if _skip_reason() is not None:
        yield
        return
    before = wait_no_leaks(0.2 if _first_leak else 5.0)
    if before:
        pytest.fail(f"nvsim not clean before {request.node.name}: {before}"
                    + (f" (left by {_first_leak[0]})" if _first_leak else ""))
    yield
    # fixture teardowns (clients, fds) ran before this point
    left = wait_no_leaks()
    if left:
        _first_leak[:] = [request.node.nodeid]
        pytest.fail(f"leak after {request.node.name}: {left}\n{read_state().text}")


@pytest.fixture
def state():
    """Callable returning a fresh NvsimState."""
    return read_state


class Resources:
    """Clients and raw fds a test opens; all closed at teardown."""

    def __init__(self):
        self.clients: list[RmClient] = []
        self.fds: list[int] = []
        self.uvms = []

    def client(self, **kw) -> RmClient:
        c = RmClient(DEV, **kw)
        self.clients.append(c)
        return c

    def open(self, name: str, flags: int = os.O_RDWR) -> int:
        fd = os.open(name if name.startswith("/") else os.path.join(DEV, name), flags | os.O_CLOEXEC)
        self.fds.append(fd)
        return fd

    def close_fd(self, fd: int) -> None:
        self.fds.remove(fd)
        os.close(fd)

    def close(self) -> None:
        for u in self.uvms:
            u.close()
        for c in self.clients:
            c.close()
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.clients.clear()
        self.fds.clear()
        self.uvms.clear()


@pytest.fixture
def res():
    r = Resources()
    yield r
    r.close()


@pytest.fixture
def client(res) -> RmClient:
    """An RM client with every GPU attached, device and subdevice allocated."""
    c = res.client()
    c.open_gpus()
    return c


@pytest.fixture
def gpu0(client):
    return client.gpus[0]


@pytest.fixture
def gpu1(client):
    if 1 not in client.gpus:
        pytest.skip("needs a second GPU (num_gpus=2)")
    return client.gpus[1]


@pytest.fixture(scope="session")
def fb_size() -> int:
    """The per-GPU FB size nvsim was loaded with."""
    p = Path("/sys/module/nvsim/parameters/fb_size")
    if p.exists():
        return int(p.read_text())
    return read_state().fb_total(0)


@pytest.fixture(scope="session")
def num_gpus() -> int:
    p = Path("/sys/module/nvsim/parameters/num_gpus")
    if p.exists():
        return int(p.read_text())
    return len(read_state().gpus)


@pytest.fixture
def wait_state():
    """wait_state(pred, timeout=5): poll nvsim's state until pred(state) holds;
    returns the last state read."""
    def _wait(pred, timeout: float = 5.0) -> NvsimState:
        last = None

        def ok():
            nonlocal last
            last = read_state()
            return pred(last)

        wait_until(ok, timeout)
        return last
    return _wait
