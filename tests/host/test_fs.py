"""vgpufs (vgpu.fs) mounted for real through /dev/fuse on the host, fed by a
fake slice source (the FS is the thing under test; the daemon's records are
adapted by vgpu.fs.ManagerSource, checked at the end against a real
SliceManager with a fake kernel dump).  Needs root and /dev/fuse; skipped
otherwise.

The file system is served by trio in this process; every file-system call
of the test runs in a worker thread (a FUSE request must never be made from
the loop that answers it).
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import trio

from vgpu import fs as F

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or os.geteuid() != 0,
    reason="needs /dev/fuse and root")

MAJOR = 237
GiB = 1 << 30


class FakeSource:
    def __init__(self):
        self.s: dict[str, F.FsSlice] = {}
        self.version = "595.45.04"
        self.calls = 0

    def slices(self):
        self.calls += 1
        return self.s

    def driver_version(self):
        return self.version


def two_gpu_slice(name="c1", sid=1, base=16, mem=4 * GiB):
    return F.FsSlice(name, sid, MAJOR, base, [
        F.FsGpu(0, "NVIDIA H100 80GB HBM3", "GPU-0000aaaa", "0000:01:00.0", mem),
        F.FsGpu(1, "NVIDIA H100 80GB HBM3", "GPU-0000bbbb", "0000:02:00.0", mem),
    ])


def serve(mnt, src, body):
    """Mount vgpufs at mnt, run body(mnt) in a thread, unmount."""
    result = {}

    async def main():
        fs = F.VgpuFs(src, str(mnt))
        async with trio.open_nursery() as n:
            await n.start(fs.run)
            try:
                result["v"] = await trio.to_thread.run_sync(body, str(mnt))
            finally:
                n.cancel_scope.cancel()
    trio.run(main)
    return result.get("v")


def mounted(mnt) -> bool:
    return bool(F.fuse_mounts_at(F.canonical(str(mnt))))


def read(p):
    with open(p) as f:
        return f.read()


@needs_fuse
def test_tree_nodes_and_files(tmp_path):
    src = FakeSource()
    src.s["c1"] = two_gpu_slice()
    mnt = tmp_path / "fs"

    def body(m):
        assert os.listdir(m) == ["c1"]
        assert sorted(os.listdir(f"{m}/c1")) == ["dev", "proc"]
        assert sorted(os.listdir(f"{m}/c1/dev")) == ["nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"]
        want = {"nvidiactl": 16, "nvidia-uvm": 17, "nvidia0": 18, "nvidia1": 19}
        for n, minor in want.items():
            st = os.stat(f"{m}/c1/dev/{n}")
            assert stat.S_ISCHR(st.st_mode), n
            assert stat.S_IMODE(st.st_mode) == 0o666
            assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (MAJOR, minor), n
        nv = f"{m}/c1/proc/driver/nvidia"
        assert sorted(os.listdir(nv)) == ["gpus", "version"]
        v = read(f"{nv}/version")
        assert v.startswith("NVRM version: NVIDIA UNIX ")
        assert "Kernel Module  595.45.04  " in v
        assert sorted(os.listdir(f"{nv}/gpus")) == ["0000:01:00.0", "0000:02:00.0"]
        info = read(f"{nv}/gpus/0000:02:00.0/information")
        lines = dict(l.split(":", 1) for l in info.splitlines())
        assert lines["Model"].strip() == "NVIDIA H100 80GB HBM3"
        assert lines["GPU UUID"].strip() == "GPU-0000bbbb"
        assert lines["Bus Location"].strip() == "0000:02:00.0"
        assert lines["Device Minor"].strip() == "1"
        assert lines["Video Memory"].strip() == "4096 MB"
        assert os.stat(f"{nv}/version").st_size == len(v.encode())
        # read-only, nothing else there
        with pytest.raises(OSError) as e:
            open(f"{nv}/version", "w")
        assert e.value.errno in (errno.EACCES, errno.EROFS, errno.EPERM)
        for bad in ("c2", "c1/sys", "c1/dev/nvidia2", "c1/proc/driver/nvidia/gpus/0000:03:00.0"):
            assert not os.path.exists(f"{m}/{bad}"), bad
        return True

    assert serve(mnt, src, body)
    assert not mounted(mnt)          # clean unmount on exit


@needs_fuse
def test_entries_follow_slices_and_quota(tmp_path):
    src = FakeSource()
    mnt = tmp_path / "fs"

    def body(m):
        assert os.listdir(m) == []
        src.s["a"] = two_gpu_slice("a", 1, 16, 4 * GiB)
        assert os.listdir(m) == ["a"]
        info = f"{m}/a/proc/driver/nvidia/gpus/0000:01:00.0/information"
        assert "Video Memory: \t 4096 MB" in read(info)
        # set-quota: the next open shows it, no caching
        src.s["a"].gpus[0].memory_limit = 6 * GiB
        assert "Video Memory: \t 6144 MB" in read(info)
        # an open file keeps its text (seq_file-like); the next open is new
        with open(info) as f:
            src.s["a"].gpus[0].memory_limit = 2 * GiB
            assert "6144 MB" in f.read()
        assert "2048 MB" in read(info)
        # a slice without kernel devices yet: an empty dev/
        src.s["b"] = F.FsSlice("b", 2, None, None, [])
        assert os.listdir(m) == ["a", "b"]
        assert os.listdir(f"{m}/b/dev") == []
        # the slice goes: its entries go, at once
        fd_dir = f"{m}/a/dev"
        assert os.path.exists(f"{fd_dir}/nvidia0")
        del src.s["a"]
        assert os.listdir(m) == ["b"]
        assert not os.path.exists(info)
        with pytest.raises(FileNotFoundError):
            os.listdir(fd_dir)
        # recreated with other minors: the node shows the new rdev
        src.s["a"] = two_gpu_slice("a", 3, 48)
        st = os.stat(f"{m}/a/dev/nvidia0")
        assert os.minor(st.st_rdev) == 50
        # the driver version follows the source too
        src.version = "600.1"
        assert "Kernel Module  600.1  " in read(f"{m}/a/proc/driver/nvidia/version")
        return True

    assert serve(mnt, src, body)
    assert not mounted(mnt)


@needs_fuse
def test_many_concurrent_reads_and_loop_stays_responsive(tmp_path):
    """Handlers never block the loop: other trio tasks keep running while
    threads hammer the FS."""
    src = FakeSource()
    for i in range(20):
        src.s[f"c{i}"] = two_gpu_slice(f"c{i}", i + 1, 16 * (i + 1))
    mnt = tmp_path / "fs"
    ticks = []

    async def main():
        fs = F.VgpuFs(src, str(mnt))
        async with trio.open_nursery() as n:
            await n.start(fs.run)

            async def ticker():
                while True:
                    ticks.append(trio.current_time())
                    await trio.sleep(0.01)
            n.start_soon(ticker)

            def hammer(k):
                for _ in range(30):
                    for c in os.listdir(str(mnt)):
                        read(f"{mnt}/{c}/proc/driver/nvidia/version")
            async with trio.open_nursery() as h:
                for k in range(4):
                    h.start_soon(trio.to_thread.run_sync, hammer, k)
            n.cancel_scope.cancel()
    t0 = time.monotonic()
    trio.run(main)
    dt = time.monotonic() - t0
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < 0.5, max(gaps)
    assert dt < 60


STALE_CHILD = textwrap.dedent("""
    import sys, os, trio
    from vgpu import fs as F
    class S:
        def slices(self):
            return {"x": F.FsSlice("x", 1, 237, 16, [])}
        def driver_version(self):
            return "1.0"
    async def main():
        fs = F.VgpuFs(S(), sys.argv[1])
        async with trio.open_nursery() as n:
            await n.start(fs.run)
            print("mounted", flush=True)
    trio.run(main)
""")


@needs_fuse
def test_stale_mount_is_recovered(tmp_path):
    mnt = tmp_path / "fs"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.Popen([sys.executable, "-c", STALE_CHILD, str(mnt)], stdout=subprocess.PIPE,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    try:
        assert p.stdout.readline().strip() == b"mounted"
        assert os.listdir(mnt) == ["x"]
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    try:
        # the killed daemon left its mount: ENOTCONN
        assert mounted(mnt)
        with pytest.raises(OSError) as e:
            os.listdir(mnt)
        assert e.value.errno == errno.ENOTCONN
        # a new one detaches it and serves again
        src = FakeSource()
        src.s["y"] = two_gpu_slice("y")
        assert serve(mnt, src, lambda m: os.listdir(m)) == ["y"]
        assert not mounted(mnt)
        assert os.listdir(mnt) == []
    finally:
        F.clear_stale_mounts(str(mnt))     # never leave a dead mount in /tmp


def test_manager_source_adapts_records(tmp_path):
    """ManagerSource over a real SliceManager's records, kernel dump and
    inventory (no mount)."""
    from vgpu.config import parse_config
    from vgpu.inventory import GpuInfo
    from vgpu.kernel import GpuUsage, Slice
    from vgpu.slices import SliceManager
    cfg = parse_config('[defaults]\nmemory = "4GiB"\n', "t.toml")
    mgr = SliceManager(cfg, "t.toml", kernel=None, store=None)
    mgr.gpus = [GpuInfo(0, "GPU-a", "NVIDIA A100", "0000:3b:00.0", 40 * GiB, 0, 0),
                GpuInfo(1, "GPU-b", "NVIDIA A100", "0000:af:00.0", 40 * GiB, 0, 1)]
    mgr.records["c1"] = {"container": "c1", "slice_id": 7, "explicit": {"memory": 8 * GiB},
                         "profile": None, "labels": {}, "gpus": [{"gpu": 1, "uuid": "GPU-b",
                                                                  "real_minor": 1}]}
    src = F.ManagerSource(mgr)
    s = src.slices()["c1"]
    assert (s.slice_id, s.major, s.base_minor) == (7, None, None)
    assert [(g.index, g.pci_bus_id, g.memory_limit, g.name) for g in s.gpus] == \
        [(0, "0000:af:00.0", 8 * GiB, "NVIDIA A100")]
    mgr.kslices[7] = Slice(7, "c1", major=240, base_minor=112,
                           gpus=[GpuUsage(0, mem_limit=6 * GiB, real_minor=1)])
    s = src.slices()["c1"]
    assert (s.major, s.base_minor, s.gpus[0].memory_limit) == (240, 112, 6 * GiB)
    node = F.resolve(("c1", "dev", "nvidia0"), src.slices(), "595.45.04")
    assert node == ("chr", os.makedev(240, 114))
    assert src.driver_version() == ""
    # one container's view alone (what lookups below it use) is the same
    assert src.slice("c1") == src.slices()["c1"] and src.slice("nope") is None
    # and the FS uses it: a lookup below c1 does not build every slice's view
    fs = F.VgpuFs(src, str(tmp_path / "mnt"))
    src.slices = lambda: (_ for _ in ()).throw(AssertionError("built every view"))
    assert fs._node(("c1", "dev", "nvidia0")) == ("chr", os.makedev(240, 114))
    assert fs._node(("nope", "dev")) is None


def test_config_empty_fuse_mount_disables():
    from vgpu.config import parse_config
    assert parse_config('[paths]\nfuse_mount = ""\n', "t.toml").paths.fuse_mount is None
    assert str(parse_config("", "t.toml").paths.fuse_mount) == "/run/vgpu/fs"
