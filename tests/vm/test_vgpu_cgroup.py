"""vgpu.ko: a slice bound to a cgroup v2 (VGPU_A_SLICE_CGROUP_FD) opens only
for tasks in that cgroup or below it; other openers get EPERM on every node.
Unbound slices are unchecked.  SLICE_SET rebinds; a bad fd is refused with
EBADF and an extack message.  Cgroups are made under /sys/fs/cgroup and
removed after each test; work "inside" a cgroup runs in a forked child that
moved itself there."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from vgpu_fixtures import MiB, SliceEnv, VgpuError, _ids, in_child
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401
from vgpu.abi import uapi as U
from vgpu.vgpuko.netlink import Nla

CG_ROOT = Path("/sys/fs/cgroup")
NODES = ("nvidiactl", "nvidia0", "nvidia-uvm")

pytestmark = pytest.mark.skipif(not (CG_ROOT / "cgroup.controllers").exists(),
                                reason="no cgroup v2 at /sys/fs/cgroup")


@pytest.fixture
def cgroups():
    base = CG_ROOT / f"vgpu-test-{os.getpid()}"
    dirs = {"A": base / "A", "sub": base / "A" / "sub", "B": base / "B"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    yield dirs
    for d in (dirs["sub"], dirs["A"], dirs["B"], base):
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:                 # a child still exiting
                import time
                time.sleep(0.05)
    assert not base.exists(), f"could not remove {base}"


@pytest.fixture
def bound(kern):
    """bound(cgroup_dir or None) -> SliceEnv on GPU 0 (256 MiB)."""
    made = []

    def _make(cg: Path | None):
        fd = os.open(cg, os.O_RDONLY | os.O_DIRECTORY) if cg is not None else None
        try:
            info = kern.slice_new(next(_ids), [(0, 256 * MiB)], cgroup_fd=fd)
        finally:
            if fd is not None:
                os.close(fd)
        env = SliceEnv(kern, info)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close_all()
        kern.slice_del(env.id, force=True)


def in_cgroup(cg: Path | None, fn):
    """Run fn() in a forked child moved into cg; its result (JSON) back."""
    return in_child(fn, cg)


def open_all(prefix: str):
    def fn():
        res = {}
        for n in NODES:
            try:
                fd = os.open(os.path.join(prefix, n), os.O_RDWR | os.O_CLOEXEC)
                os.close(fd)
                res[n] = "ok"
            except OSError as e:
                res[n] = errno.errorcode[e.errno]
        return res
    return fn


def alloc(prefix: str):
    def fn():
        from vgpu.abi.nvclient import RmClient, RmError
        c = RmClient(prefix)
        try:
            g = c.open_gpus()[0]
            h = g.alloc(8 * MiB)
            c.free(h)
        finally:
            c.close()
        return "allocated"
    return fn


def _baseline(sl: SliceEnv) -> dict:
    """What the nodes give an unchecked opener (nvidia-uvm may be absent)."""
    return open_all(sl.prefix)()


def test_bound_slice_opens_only_in_its_cgroup(kern, cgroups, bound):
    A, sub, B = cgroups["A"], cgroups["sub"], cgroups["B"]
    free = bound(None)
    base = _baseline(free)
    assert base["nvidiactl"] == base["nvidia0"] == "ok"
    sl = bound(A)
    assert sl.info.cgroup_id == os.stat(A).st_ino
    assert in_cgroup(A, open_all(sl.prefix)) == {"ok": base}
    assert in_cgroup(sub, open_all(sl.prefix)) == {"ok": base}
    assert in_cgroup(A, alloc(sl.prefix)) == {"ok": "allocated"}
    assert in_cgroup(sub, alloc(sl.prefix)) == {"ok": "allocated"}
    assert in_cgroup(B, open_all(sl.prefix)) == {"ok": {n: "EPERM" for n in NODES}}
    # the test process itself (not in A) too
    assert open_all(sl.prefix)() == {n: "EPERM" for n in NODES}
    s = sl.get()
    assert s.open_files == 0 and s.gpu(0).mem_used == 0 and s.gpu(0).allocs == 0
    # the dump reports the binding
    byid = {x.id: x for x in kern.slices()}
    assert byid[sl.id].cgroup_id == os.stat(A).st_ino
    assert byid[free.id].cgroup_id == 0


def test_unbound_slice_is_unaffected(cgroups, bound):
    sl = bound(None)
    assert sl.info.cgroup_id == 0
    base = _baseline(sl)
    for cg in (cgroups["A"], cgroups["B"]):
        assert in_cgroup(cg, open_all(sl.prefix)) == {"ok": base}
    assert in_cgroup(cgroups["B"], alloc(sl.prefix)) == {"ok": "allocated"}


def test_rebind_by_slice_set(kern, cgroups, bound):
    A, B = cgroups["A"], cgroups["B"]
    sl = bound(A)
    base = _baseline(bound(None))
    fd = os.open(B, os.O_RDONLY | os.O_DIRECTORY)
    try:
        s = kern.slice_set(sl.id, cgroup_fd=fd)
    finally:
        os.close(fd)
    assert s.cgroup_id == os.stat(B).st_ino
    assert in_cgroup(B, open_all(sl.prefix)) == {"ok": base}
    assert in_cgroup(A, open_all(sl.prefix)) == {"ok": {n: "EPERM" for n in NODES}}
    # an unbound slice can be bound later, and limits and binding change together
    free = bound(None)
    fd = os.open(A, os.O_RDONLY | os.O_DIRECTORY)
    try:
        s = kern.slice_set(free.id, limits={0: 128 * MiB}, cgroup_fd=fd)
    finally:
        os.close(fd)
    assert s.cgroup_id == os.stat(A).st_ino and s.gpu(0).mem_limit == 128 * MiB
    assert in_cgroup(B, open_all(free.prefix)) == {"ok": {n: "EPERM" for n in NODES}}


def _bad_fds(tmp_path):
    null = os.open("/dev/null", os.O_RDONLY)
    notcg = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    closed = os.open("/dev/null", os.O_RDONLY)
    os.close(closed)
    return {"/dev/null": null, "plain directory": notcg, "closed fd": closed}


def test_bad_cgroup_fd(kern, cgroups, bound, tmp_path):
    sl = bound(cgroups["A"])
    fds = _bad_fds(tmp_path)
    try:
        for what, fd in fds.items():
            sid = next(_ids)
            with pytest.raises(VgpuError) as ei:
                kern.slice_new(sid, [(0, MiB)], cgroup_fd=fd)
            assert ei.value.errno in (errno.EBADF, errno.EINVAL), what
            assert ei.value.extack and "CGROUP_FD" in ei.value.extack, (what, ei.value)
            with pytest.raises(VgpuError) as ei:
                kern.slice_get(sid)
            assert ei.value.errno == errno.ENOENT, f"{what}: a slice was left behind"
            with pytest.raises(VgpuError) as ei:
                kern.slice_set(sl.id, limits={0: MiB}, cgroup_fd=fd)
            assert ei.value.errno in (errno.EBADF, errno.EINVAL), what
            assert ei.value.extack and "CGROUP_FD" in ei.value.extack, (what, ei.value)
            s = sl.get()                    # nothing changed
            assert s.cgroup_id == os.stat(cgroups["A"]).st_ino
            assert s.gpu(0).mem_limit == 256 * MiB
    finally:
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
    # reply-only attribute
    with pytest.raises(VgpuError) as ei:
        kern.raw_request(U.VGPU_CMD_SLICE_SET, [
            Nla(U.VGPU_A_SLICE_ID, sl.id.to_bytes(4, "little")),
            Nla(U.VGPU_A_SLICE_CGROUP_ID, (1).to_bytes(8, "little"))])
    assert ei.value.errno == errno.EINVAL


def test_cgroup_removed_while_bound(kern, bound):
    """rmdir of a bound cgroup works (the slice holds a reference, not the
    directory); the slice stays unopenable, and deleting it frees the ref."""
    cg = CG_ROOT / f"vgpu-test-gone-{os.getpid()}"
    cg.mkdir()
    try:
        sl = bound(cg)
        ino = os.stat(cg).st_ino
    finally:
        cg.rmdir()
    assert sl.get().cgroup_id == ino
    assert open_all(sl.prefix)() == {n: "EPERM" for n in NODES}


def _memory_cgroup(name: str) -> Path:
    """A fresh cgroup with the memory controller (enabled at the root)."""
    if "memory" not in (CG_ROOT / "cgroup.controllers").read_text().split():
        pytest.skip("no memory controller in cgroup v2")
    (CG_ROOT / "cgroup.subtree_control").write_text("+memory")
    cg = CG_ROOT / name
    cg.mkdir(exist_ok=True)
    return cg


def test_call_memory_is_charged_to_the_callers_memcg(kern, bound):
    """A call's memory is its caller's: what vgpu.ko allocates for a call in
    flight (its copies of the parameters and their lists, and the call page
    laid out for the driver) is charged to the caller's memory cgroup, or a container's
    threads in calls would hold gigabytes outside its memory limit.
    BUILD_VERSION with three 1 MiB string buffers: about 3 MiB of list
    copies and a call page of 3 MiB more.  nvsim's delay holds the call
    before the driver reads anything, while the cgroup's memory.current is
    watched; before, only the list copies were charged."""
    import ctypes
    import time
    from vgpu.abi import nvabi as A
    from vgpu.abi.nvclient import RmClient, RmError

    nvsim = Path("/sys/kernel/debug/nvsim")
    n = 1 << 20                         # VGPU_MAX_CTRL_PARAMS, each
    want = 3 * n + 3 * n * 3 // 4       # the lists and most of the call page
    sl = bound(None)
    cg = _memory_cgroup(f"vgpu-memcg-{os.getpid()}")
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(ready_r)
            os.close(go_w)
            (cg / "cgroup.procs").write_text(str(os.getpid()))
            c = RmClient(sl.prefix)
            bufs = [ctypes.create_string_buffer(n) for _ in range(3)]
            p = A.NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS(
                sizeOfStrings=n, pDriverVersionBuffer=ctypes.addressof(bufs[0]),
                pVersionBuffer=ctypes.addressof(bufs[1]),
                pTitleBuffer=ctypes.addressof(bufs[2]))
            os.write(ready_w, b"r")
            os.read(go_r, 1)
            try:
                c.control(c.hClient, A.NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION, p)
            except RmError:
                pass                    # the driver's answer does not matter here
            code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    rise = 0
    try:
        assert os.read(ready_r, 1) == b"r", "the child did not get ready"
        # Held before the driver reads anything (nvsim_test_delay).
        (nvsim / "delay_nr").write_text(str(A.NV_ESC_RM_CONTROL))
        (nvsim / "delay_ms").write_text("5000")
        base = int((cg / "memory.current").read_text())
        os.write(go_w, b"g")
        deadline = time.monotonic() + 5.0
        while rise < want and time.monotonic() < deadline:
            rise = max(rise, int((cg / "memory.current").read_text()) - base)
            time.sleep(0.005)
    finally:
        (nvsim / "delay_ms").write_text("0")
        (nvsim / "delay_nr").write_text("0")
        os.close(go_w)
        os.close(ready_r)
        _, st = os.waitpid(pid, 0)
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.05)
    assert os.waitstatus_to_exitcode(st) == 0, "the child's call failed"
    assert rise >= want, f"memory.current rose by {rise} during the call, not {want}"
