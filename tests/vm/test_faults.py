"""Fault injection: every failure on vgpu.ko's main paths unwinds completely.

Two sweeps over the same paths (slice create, open of the slice's nodes,
RM allocation of client/device/subdevice, FB allocation by the three
charging paths, map, UVM registration and external mapping, a channel
scheduled under a compute quota):

- **driver failures** (nvsim's switch, kmod/nvsim/fault.c): for N = 1, 2,
  3, ... the Nth driver call of the path (any kind that creates something:
  open, mmap, escapes, RM alloc/control/dup/alloc-memory/vid-heap/map, UVM
  open/mmap/ioctls; frees and unmaps are left alone, nothing can unwind a
  failed undo) fails as the real driver fails there, until a run of the
  path sees no injection and succeeds.  After each failure: the caller got
  an error; the slice's charge is what it was before the failing step;
  once everything is closed nvsim's objects, clients, mappings and FB and
  vgpu.ko's counters are back to their start; a retry without injection
  succeeds.  Runs on every kernel (CI's stock one).
- **allocation failures** (failslab with /proc/thread-self/fail-nth, the
  debug kernel only: tools/vm/debug-kernel.sh): for each syscall of a path
  and N = 1, 2, ... the Nth slab allocation of that syscall fails (vgpu.ko's
  own, the driver's or the kernel's: the VFS, netlink, mm), until the
  syscall runs without consuming the injection.  The syscall may fail (any
  errno, an RM status) or succeed; after it the same state checks hold, and
  the VM harness's dmesg check (no WARNING, BUG, lockdep or KASAN report)
  and kmemleak scan hold for the whole file.

Points seen per path are printed (pytest -s) as "faults: <path> ...".
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import uapi as U
from vgpu.abi.nvclient import Channel, RmClient, RmError, UvmFile
from vgpu.vgpuko.messages import Compute
from vgpu.vgpuko.netlink import VgpuError
from vgpu_fixtures import (FALLBACK_DIR, NODE_DIR, NVSIM_STATE, MiB, SliceEnv, _ids,
                           gpu_uuid, read_vstate, wait_until)
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401

NVDBG = Path("/sys/kernel/debug/nvsim")
FAIL_NTH = Path("/proc/thread-self/fail-nth")
FAILSLAB = Path("/sys/kernel/debug/failslab")
KMEMLEAK = Path("/sys/kernel/debug/kmemleak")
# Every kind but the undoing ones (RM_FREE, RM_UNMAP_MEMORY).
CREATING = ("OPEN,MMAP,ESC,RM_ALLOC,RM_CONTROL,RM_DUP_OBJECT,RM_ALLOC_MEMORY,"
            "RM_VID_HEAP_CONTROL,RM_MAP_MEMORY,UVM_OPEN,UVM_MMAP,UVM")
MAX_POINTS = 120             # a path with more is a runaway sweep
SETTLE = 5.0                 # deferred releases (RCU, the UVM reaper)
VCOUNTERS = ("files", "objects", "charges", "tsgs", "userd_maps", "proxies",
             "ranges", "reapers", "slices")
FAILED = (RmError, OSError, MemoryError)     # VgpuError is an OSError

needs_nvsim_fault = pytest.mark.skipif(
    not (NVDBG / "fail_nth").exists(),
    reason="nvsim.ko without fault injection (no /sys/kernel/debug/nvsim/fail_nth)")
needs_fail_nth = pytest.mark.skipif(
    not FAIL_NTH.exists() or not FAILSLAB.exists(),
    reason="the kernel has no failslab/fail-nth (CONFIG_FAULT_INJECTION, CONFIG_FAILSLAB, "
           "CONFIG_FAULT_INJECTION_DEBUG_FS are off in Debian's; run it on the debug kernel: "
           "VM_TESTS=tests/vm/test_faults.py make test-debug)")


# ------------------------------------------------------------------ knobs
class NvsimFault:
    """nvsim's switch (kmod/nvsim/fault.c), limited to this process."""

    @staticmethod
    def _w(name: str, value) -> None:
        (NVDBG / name).write_text(f"{value}\n")

    @staticmethod
    def _r(name: str) -> str:
        return (NVDBG / name).read_text().strip()

    def arm(self, nth: int, kinds: str = CREATING, *, times: int = 1, status: int = 0,
            caller: int = 0) -> None:
        self._w("fail_kind", kinds)
        self._w("fail_times", times)
        self._w("fail_status", status)
        self._w("fail_caller", caller)
        self._w("fail_pid", os.getpid())
        self._w("fail_nth", nth)

    def disarm(self) -> tuple[int, str]:
        """Off; (calls failed, the last one "KIND 0xNUM")."""
        self._w("fail_nth", 0)
        return int(self._r("fail_injected")), self._r("fail_last")

    def injected(self) -> int:
        return int(self._r("fail_injected"))

    def hits(self) -> int:
        return int(self._r("fail_hits"))


class FailNth:
    """/proc/thread-self/fail-nth: the Nth fault-injectable allocation of
    this thread from now on fails.  The descriptor is opened once (opening
    allocates); after the call, 0 means the injection was consumed."""

    def __init__(self):
        self.fd = os.open(FAIL_NTH, os.O_RDWR)
        self._saved = {}
        for name, value in (("ignore-gfp-wait", "N"), ("verbose", "1"),
                            ("probability", "0"), ("times", "-1")):
            p = FAILSLAB / name
            if p.exists():
                self._saved[p] = p.read_text().strip()
                p.write_text(value)

    def arm(self, nth: int) -> None:
        os.write(self.fd, str(nth).encode())

    def disarm(self) -> bool:
        """True when the injection was consumed (a failure happened)."""
        left = int(os.pread(self.fd, 32, 0).decode().strip() or "0")
        os.write(self.fd, b"0")
        return left == 0

    def close(self) -> None:
        os.write(self.fd, b"0")
        os.close(self.fd)
        for p, v in self._saved.items():
            p.write_text(v)

    @staticmethod
    def kmemleak_alive() -> bool:
        """kmemleak falls back to its pool when its own object allocation
        fails; were it to switch itself off instead, the run's leak scan
        would prove nothing (its file then opens with EBUSY)."""
        if not KMEMLEAK.exists():
            return True
        try:
            os.close(os.open(KMEMLEAK, os.O_RDONLY))
        except OSError as e:
            return e.errno != errno.EBUSY
        return True


# ------------------------------------------------------------------ state
def nvsim_counts() -> dict:
    out = {}
    for line in NVSIM_STATE.read_text().splitlines():
        f = line.split()
        if len(f) == 2 and f[0] in ("objects", "clients", "mappings"):
            out[f[0]] = int(f[1])
        elif len(f) >= 6 and f[0] == "gpu" and f[2] == "fb_total":
            out[f"fb{f[1]}"] = int(f[5])
    return out


def vgpu_counts() -> dict:
    v = read_vstate()
    return {k: v.get(k, 0) for k in VCOUNTERS}


def snapshot() -> dict:
    return {"nvsim": nvsim_counts(), "vgpu": vgpu_counts()}


def settle_to(base: dict, what: str) -> None:
    """Wait until nvsim's and vgpu.ko's counters are back to base."""
    last = {}

    def same():
        nonlocal last
        last = snapshot()
        return last == base

    if not wait_until(same, SETTLE, 0.02):
        diff = {k: (base[s].get(k), last[s].get(k)) for s in base for k in base[s]
                if base[s].get(k) != last[s].get(k)}
        pytest.fail(f"{what}: state not back to its start (start, now): {diff}\n"
                    f"{read_vstate().text}")


# ------------------------------------------------------------------ paths
@dataclass
class Ctx:
    """What one run of a path made, for its steps and its teardown."""
    sl: SliceEnv | None = None
    c: RmClient | None = None
    g: object = None
    u: UvmFile | None = None
    fds: list = field(default_factory=list)
    objs: dict = field(default_factory=dict)
    sid: int = 0
    made_slice: bool = False


@dataclass
class Path_:
    name: str
    steps: list[tuple[str, Callable[[Ctx], None]]]
    # the slice the path runs in: slice_new kwargs; None: the path makes it
    slice_kw: dict | None = field(default_factory=lambda: {"gpus": [(0, 256 * MiB)]})
    setup: Callable[[Ctx], None] | None = None
    charges: bool = False          # each step's failure leaves the charge as it was
    # failures (fail_last prefixes) the path may absorb, the caller seeing
    # success: vgpu.ko's own calls through the kernel entry that have a
    # fallback (ABSORBED)
    absorbs: tuple[str, ...] = ()
    kinds: str = CREATING          # nvsim's fail_kind for the driver sweep


# vgpu.ko's existence probe of a handle (rmapi.c, vgpu_rm_exists): a failed
# probe is taken as "present" and another handle is tried.
ABSORBED = ("RM_CONTROL 0xd02 kernel",)
# (SLICE_NEW's device-instance question, rmapi.c vgpu_rm_device_instance,
# absorbs nothing: unanswered, the slice is not made, since the device
# instance a slice reports must be the driver's answer, never a guess.)
# Its UUID question (vgpu_rm_gpu_uuid, after it, on a client of its own):
# unanswered, the slice is made and UVM registers no UUID for the GPU.
GPU_UUID = ("RM_ALLOC 0x0 kernel", "RM_CONTROL 0x275 kernel")
# compute.c: the USERD kernel map refused leaves the channel tracked by its
# doorbell (by design); a TSG that cannot be taken off the runlist while its
# slice is paused is tried again at the scheduler's next decision
# (vgpu_compute_pause_begin), so the call that made it still succeeds.
COMPUTE = ("RM_MAP_MEMORY 0x0 kernel", "RM_CONTROL 0xa06c0101 kernel",
           "RM_CONTROL 0xa06c0103 kernel")


def _client(ctx: Ctx) -> None:
    ctx.c = RmClient(ctx.sl.prefix)


def _client_gpu_xfer(ctx: Ctx) -> None:
    ctx.c = RmClient(ctx.sl.prefix, xfer=True)
    _gpu(ctx)


def _dup_setup(ctx: Ctx) -> None:
    _client_gpu(ctx)
    ctx.objs["mem"] = ctx.g.alloc(16 * MiB)
    ctx.objs["c2"] = RmClient(ctx.sl.prefix)
    ctx.objs["g2"] = ctx.objs["c2"].open_gpus([0])[0]


def _dup(ctx: Ctx) -> None:
    c2, g2 = ctx.objs["c2"], ctx.objs["g2"]
    ctx.objs["dup"] = c2.dup(g2.hDevice, ctx.c.hClient, ctx.objs["mem"])


def _ctl(ctx: Ctx) -> None:
    ctx.c = RmClient(ctx.sl.prefix, alloc_client=False, query_version=False)


def _version(ctx: Ctx) -> None:
    ctx.c.check_version("", cmd=A.NV_RM_API_VERSION_CMD_QUERY)


def _root(ctx: Ctx) -> None:
    ctx.c.hClient = ctx.c.alloc_client()


def _gpu(ctx: Ctx) -> None:
    ctx.g = ctx.c.open_gpus([0])[0]


def _client_gpu(ctx: Ctx) -> None:
    _client(ctx)
    _gpu(ctx)


def _open(name: str):
    def step(ctx: Ctx) -> None:
        ctx.fds.append(os.open(ctx.sl.path(name), os.O_RDWR | os.O_CLOEXEC))
    return step


def _alloc(path: str):
    def step(ctx: Ctx) -> None:
        ctx.objs[path] = ctx.g.alloc(16 * MiB, path)
    return step


def _map(ctx: Ctx) -> None:
    m = ctx.g.map(ctx.objs["mem"], 2 * MiB)
    ctx.objs["map"] = m
    m.mm[0] = 0x5a
    m.mm[2 * MiB - 1] = 0xa5


UVM_BASE = 0x7E0000000000


def _uvm_open(ctx: Ctx) -> None:
    # the release given: asking for it opens nvidiactl and swallows errors
    ctx.u = UvmFile(ctx.sl.prefix, release=ctx.c.version)


def _uvm_register(ctx: Ctx) -> None:
    ctx.u.register_gpu(ctx.objs["uuid"], ctx.c.fd, ctx.c.hClient)


def _uvm_vaspace(ctx: Ctx) -> None:
    ctx.u.register_gpu_vaspace(b"\0" * 16, ctx.c.fd, ctx.c.hClient, ctx.g.hDevice)


def _uvm_ext_range(ctx: Ctx) -> None:
    p = A.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=UVM_BASE, length=16 * MiB)
    ctx.u.ioctl(A.UVM_CREATE_EXTERNAL_RANGE, p)
    if p.rmStatus:
        raise RmError(p.rmStatus, "UVM_CREATE_EXTERNAL_RANGE")


def _uvm_map_ext(ctx: Ctx) -> None:
    # in the range the step before made
    ctx.u.map_external(UVM_BASE, 16 * MiB, ctx.c.fd, ctx.c.hClient, ctx.objs["mem"],
                       create_range=False)


def _uvm_managed(ctx: Ctx) -> None:
    addr = ctx.u.managed_mmap(2 * MiB)
    ctypes.memset(addr, 0x5a, 2 * MiB)


def _channel(ctx: Ctx) -> None:
    ctx.objs["ch"] = Channel(ctx.g)


def _slice_new(compute: bool):
    def step(ctx: Ctx) -> None:
        kw = {"compute": {0: Compute(U.VGPU_COMPUTE_FIXED, 5000, U.VGPU_PRIORITY_LOW)}} \
            if compute else {}
        ctx.made_slice = True
        ctx._kern.slice_new(ctx.sid, gpus=[(0, 256 * MiB)], **kw)
    return step


PATHS = [
    Path_("slice-create", [("SLICE_NEW", _slice_new(False))], slice_kw=None,
          absorbs=GPU_UUID),
    Path_("slice-create-compute", [("SLICE_NEW", _slice_new(True))], slice_kw=None,
          absorbs=GPU_UUID),
    Path_("open", [("open nvidiactl", _open("nvidiactl")), ("open nvidia0", _open("nvidia0")),
                   ("open nvidia-uvm", _open("nvidia-uvm"))]),
    Path_("client", [("open+CARD_INFO", _ctl), ("CHECK_VERSION_STR", _version),
                     ("RM_ALLOC root client", _root), ("device+subdevice", _gpu)]),
    Path_("alloc-rm", [("RM_ALLOC 0x40", _alloc("rm-alloc"))], setup=_client_gpu,
          charges=True),
    Path_("alloc-rm-xfer", [("XFER RM_ALLOC 0x40", _alloc("rm-alloc"))],
          setup=_client_gpu_xfer, charges=True),
    Path_("dup", [("RM_DUP_OBJECT memory", _dup)], setup=_dup_setup, charges=True),
    Path_("alloc-memory", [("RM_ALLOC_MEMORY", _alloc("alloc-memory"))], setup=_client_gpu,
          charges=True),
    Path_("alloc-vid-heap", [("VID_HEAP ALLOC_SIZE", _alloc("vid-heap"))], setup=_client_gpu,
          charges=True),
    Path_("map", [("RM_MAP_MEMORY+mmap", _map)],
          setup=lambda ctx: (_client_gpu(ctx),
                             ctx.objs.__setitem__("mem", ctx.g.alloc(2 * MiB)))),
    Path_("uvm", [("open", _uvm_open), ("UVM_INITIALIZE", lambda ctx: ctx.u.initialize()),
                  ("REGISTER_GPU", _uvm_register), ("REGISTER_GPU_VASPACE", _uvm_vaspace),
                  ("CREATE_EXTERNAL_RANGE", _uvm_ext_range),
                  ("MAP_EXTERNAL_ALLOCATION", _uvm_map_ext),
                  ("managed mmap", _uvm_managed)],
          slice_kw={"gpus": [(0, 64 * MiB)], "uvm_policy": U.VGPU_UVM_COUNT},
          setup=lambda ctx: (_client_gpu(ctx),
                             ctx.objs.__setitem__("mem", ctx.g.alloc(16 * MiB)),
                             ctx.objs.__setitem__("uuid", gpu_uuid(ctx.c, ctx.g)))),
    Path_("compute", [("TSG+channel+maps+schedule", _channel)],
          slice_kw={"gpus": [(0, 256 * MiB)],
                    "compute": {0: Compute(U.VGPU_COMPUTE_FIXED, 5000, U.VGPU_PRIORITY_LOW)}},
          setup=_client_gpu, absorbs=COMPUTE),
    # A free the driver refuses: the object, and its charge, stay.
    Path_("free", [("RM_FREE memory", lambda ctx: ctx.c.free(ctx.objs["mem"])),
                   ("RM_FREE device", lambda ctx: ctx.c.free(ctx.g.hDevice))],
          setup=lambda ctx: (_client_gpu(ctx),
                             ctx.objs.__setitem__("mem", ctx.g.alloc(16 * MiB)),
                             ctx.objs.__setitem__("mem2", ctx.g.alloc(8 * MiB))),
          charges=True, kinds="ESC,RM_FREE"),
]
BY_NAME = {p.name: p for p in PATHS}


class Runner:
    """Runs a path in its slice: setup, steps, teardown, with checks."""

    def __init__(self, kern, path: Path_):
        self.kern, self.path = kern, path
        self.sl: SliceEnv | None = None
        if path.slice_kw is not None:
            sid = next(_ids)
            self.sl = SliceEnv(kern, kern.slice_new(sid, **path.slice_kw))

    def used(self) -> int:
        return self.sl.used(0) if self.sl else 0

    def new_ctx(self) -> Ctx:
        ctx = Ctx(sl=self.sl, sid=next(_ids))
        ctx._kern = self.kern
        if self.path.setup:
            self.path.setup(ctx)
        return ctx

    def teardown(self, ctx: Ctx) -> None:
        m = ctx.objs.get("map")
        if m is not None:
            m.close()
        ch = ctx.objs.get("ch")
        if ch is not None:
            ch.close(free=False)
        if ctx.u is not None:
            ctx.u.close()
        if ctx.c is not None:
            ctx.c.close()
        if ctx.objs.get("c2") is not None:
            ctx.objs["c2"].close()
        for fd in ctx.fds:
            os.close(fd)
        ctx.fds.clear()
        if ctx.made_slice:
            try:
                self.kern.slice_del(ctx.sid, force=True)
            except VgpuError as e:
                assert e.errno == errno.ENOENT, e

    def close(self) -> None:
        if self.sl is not None:
            self.sl.close_all()
            self.kern.slice_del(self.sl.id, force=True)

    def run_clean(self, what: str) -> None:
        """The whole path without injection: it must succeed."""
        ctx = self.new_ctx()
        try:
            for name, fn in self.path.steps:
                fn(ctx)
            if self.path.slice_kw is None:
                s = self.kern.slice_get(ctx.sid)
                assert s.id == ctx.sid
        finally:
            self.teardown(ctx)


def slice_absent(kern, sid: int) -> bool:
    try:
        kern.slice_get(sid)
    except VgpuError as e:
        return e.errno == errno.ENOENT
    return False


def report(path: str, how: str, points: list, seconds: float) -> None:
    print(f"\nfaults: {path} ({how}): {len(points)} failure points in {seconds:.1f} s: "
          + ", ".join(points))


# --------------------------------------------------------- driver failures
@needs_nvsim_fault
@pytest.mark.parametrize("times", [1, 0], ids=["once", "from-then-on"])
@pytest.mark.parametrize("name", list(BY_NAME))
def test_driver_failure_unwinds(kern, name, times):
    """Fail the Nth creating driver call of the path, N = 1, 2, ... until a
    run sees none; each failure reaches the caller and leaves nothing.
    times=0: every creating call from the Nth on fails too (a driver that
    has started failing), vgpu.ko's own calls while it unwinds included."""
    path = BY_NAME[name]
    f = NvsimFault()
    r = Runner(kern, path)
    t0 = time.monotonic()
    points: list[str] = []
    try:
        base = snapshot()
        for n in range(1, MAX_POINTS + 1):
            ctx = r.new_ctx()
            used0 = r.used()
            err = None
            step_name = at = ""
            f.arm(n, path.kinds, times=times)
            try:
                for step_name, fn in path.steps:
                    if path.charges:
                        used0 = r.used()
                    fn(ctx)
                    if not at and f.injected():
                        at = step_name
            except FAILED as e:
                err = e
            finally:
                injected, last = f.disarm()
            step_name = at or step_name
            if not injected:
                assert err is None, f"{name}: no injection at N={n}, yet {step_name}: {err!r}"
                r.teardown(ctx)
                settle_to(base, f"{name}: the clean run")
                break
            points.append(f"{step_name}:{last}")
            what = f"{name}: N={n} ({step_name}, {last} failed)"
            try:
                if err is None:
                    assert last.startswith(ABSORBED + path.absorbs), \
                        f"{what}: the caller saw no error"
                elif path.charges:
                    assert r.used() == used0, f"{what}: charge {r.used()} != {used0}"
                if path.slice_kw is None and err is not None:
                    assert slice_absent(kern, ctx.sid), f"{what}: the slice exists"
            finally:
                r.teardown(ctx)
            assert wait_until(lambda: r.used() == 0, SETTLE), \
                f"{what}: charge {r.used()} after close"
            settle_to(base, what)
            r.run_clean(f"{what}: the retry")
            settle_to(base, f"{what}: after the retry")
        else:
            pytest.fail(f"{name}: still injecting after {MAX_POINTS} points")
    finally:
        f.disarm()
        r.close()
    report(name, f"driver, times={times}", points, time.monotonic() - t0)
    assert points, f"{name}: no driver call was failed"


@needs_nvsim_fault
def test_knobs():
    """The switch itself: kind, number, nth, times, status, counts."""
    f = NvsimFault()
    with RmClient("/dev") as c:
        g = c.open_gpus([0])[0]
        f.arm(2, f"RM_ALLOC:{A.NV01_MEMORY_LOCAL_USER:#x}", times=2,
              status=A.NV_ERR_INSUFFICIENT_RESOURCES)
        h1 = g.alloc(MiB)                                 # 1st: passes
        for _ in range(2):                                # 2nd, 3rd: fail
            with pytest.raises(RmError) as ei:
                g.alloc(MiB)
            assert ei.value.status == A.NV_ERR_INSUFFICIENT_RESOURCES
        c.alloc_tsg(g.hDevice)                            # another class: not counted
        h2 = g.alloc(MiB)                                 # 4th: passes
        assert f.hits() == 4
        assert f.disarm() == (2, f"RM_ALLOC {A.NV01_MEMORY_LOCAL_USER:#x} file")
        c.free(h1)
        c.free(h2)
        f.arm(1, "MMAP", status=errno.EAGAIN)
        with pytest.raises(OSError) as ei:
            g.map(c.alloc_vidmem(g.hDevice, MiB)[0], MiB)
        assert ei.value.errno == errno.EAGAIN
        assert f.disarm()[0] == 1
    with pytest.raises(OSError):
        (NVDBG / "fail_kind").write_text("NO_SUCH_KIND\n")
    with pytest.raises(OSError):
        (NVDBG / "fail_kind").write_text("RM_ALLOC,RM_CONTROL:5\n")
    assert oct((NVDBG / "fail_nth").stat().st_mode & 0o777) == "0o600"


def usermode_maps(sid: int) -> int:
    for line in read_vstate().text.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] == "slice" and f[1] == str(sid) and f[2] == "files":
            return int(f[f.index("usermode_maps") + 1])
    raise KeyError(sid)


@needs_nvsim_fault
def test_usermode_mmap_retried_after_a_failure_is_gated(kern):
    """The driver keeps a file's mapping context when its mmap fails, so the
    caller can mmap again.  vgpu.ko took the file's usermode mark before
    the real mmap and lost it on the failure: the retry mapped the doorbell
    page without gating (kmod/vgpu/mmap.c, vgpu_mmap)."""
    f = NvsimFault()
    r = Runner(kern, BY_NAME["compute"])
    ctx = r.new_ctx()
    try:
        c, g = ctx.c, ctx.g
        h = c.alloc_usermode(g.hSubdevice)
        fd = c.open_node(g.node)
        size = A.NVC361_USERMODE_REGION_SIZE
        c.map_memory(g.hSubdevice, h, size, fd)
        f.arm(1, "MMAP")
        try:
            with pytest.raises(OSError) as ei:
                mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            assert f.disarm()[0] == 1
        assert ei.value.errno == errno.ENOMEM
        assert usermode_maps(r.sl.id) == 0
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            assert usermode_maps(r.sl.id) == 1, "the retried doorbell mapping is not gated"
        finally:
            mm.close()
        assert usermode_maps(r.sl.id) == 0
    finally:
        r.teardown(ctx)
        r.close()


# ------------------------------------------------------ allocation failures
@needs_fail_nth
@pytest.mark.parametrize("name", list(BY_NAME))
def test_allocation_failure_unwinds(kern, name):
    """fail-nth over each syscall of the path: N = 1, 2, ... until the
    syscall does not consume the injection.  A failure may be any error or
    none (the kernel's own allocations can be retried or absorbed); what must
    hold is that nothing leaks and nothing warns (the harness's dmesg check)."""
    path = BY_NAME[name]
    r = Runner(kern, path)
    fn_ = FailNth()
    t0 = time.monotonic()
    points: list[str] = []
    try:
        base = snapshot()
        for i, (step_name, _) in enumerate(path.steps):
            for n in range(1, 10 * MAX_POINTS):
                ctx = r.new_ctx()
                for _, fn in path.steps[:i]:
                    fn(ctx)
                used0 = r.used()
                err = None
                fn_.arm(n)
                try:
                    path.steps[i][1](ctx)
                except Exception as e:      # noqa: BLE001 -- any refusal will do
                    err = e
                finally:
                    consumed = fn_.disarm()
                what = f"{name}: {step_name} allocation {n}"
                if not consumed:
                    assert err is None, f"{what}: not consumed, yet {err!r}"
                    r.teardown(ctx)
                    settle_to(base, what)
                    break
                points.append(f"{step_name}#{n}:{type(err).__name__ if err else 'ok'}")
                try:
                    if err is not None and path.charges:
                        assert r.used() == used0, f"{what}: charge {r.used()} != {used0}"
                finally:
                    r.teardown(ctx)
                assert wait_until(lambda: r.used() == 0, SETTLE), \
                    f"{what}: charge {r.used()} after close"
                settle_to(base, what)
            else:
                pytest.fail(f"{name}: {step_name} still consuming after {10 * MAX_POINTS}")
        r.run_clean(f"{name}: the clean run")
        settle_to(base, f"{name}: after the clean run")
    finally:
        fn_.close()
        r.close()
    report(name, "failslab", points, time.monotonic() - t0)
    assert FailNth.kmemleak_alive(), "kmemleak switched itself off during the sweep"
