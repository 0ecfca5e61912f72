"""vgpufs (vgpu.daemon.fs) mounted for real through /dev/fuse on the host, fed by a
fake slice source (the FS is the thing under test; the daemon's records are
adapted by vgpu.daemon.fs.ManagerSource, checked at the end against a real
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

from vgpu.daemon import fs as F
from vgpufs_support import MAJOR, STALE_CHILD, FakeSource, GiB, serve, two_gpu_slice

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or os.geteuid() != 0,
    reason="needs /dev/fuse and root")

def mounted(mnt) -> bool:
    return bool(F.fuse_mounts_at(F.canonical(str(mnt))))


def read(p):
    with open(p) as f:
        return f.read()


def nvidia_modprobe_reads(text: str) -> dict:
    """What nvidia-modprobe-utils' init_device_file_parameters takes from a
    params file (fscanf(fp, "%31[^:]: %u\\n", name, &value) == 2 in a loop:
    it stops at the first line that does not parse; later keys win)."""
    got = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if not sep or not name or len(name) > 31 or not value.strip().isdigit():
            break
        got[name] = int(value)
    return got


# /proc/driver/nvidia/params as 535.261.03's nv_procfs_read_params prints it
# (nv-procfs.c: nv_parms[] as "%s: %u", then the string keys), defaults
# except the two device-file keys an administrator set
HOST_PARAMS = """ResmanDebugLevel: 4294967295
RmLogonRC: 1
ModifyDeviceFiles: 1
DeviceFileUID: 0
DeviceFileGID: 44
DeviceFileMode: 432
InitializeSystemMemoryAllocations: 1
UsePageAttributeTable: 4294967295
EnableMSI: 1
RegistryDwords: ""
RegistryDwordsPerDevice: ""
RmMsg: ""
GpuBlacklist: ""
TemporaryFilePath: ""
ExcludedGpus: ""
"""


def test_params_text_says_modify_device_files_0():
    """A slice's params file: the host's, with ModifyDeviceFiles 0 (so
    NVIDIA's user space uses the slice's nodes, whose major is vgpu.ko's, as
    they are) and the owner and mode vgpufs reports for the nodes
    (root:root 0666), in the driver's order and format."""
    out = F.params_text(HOST_PARAMS).decode()
    want = HOST_PARAMS.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0") \
        .replace("DeviceFileGID: 44", "DeviceFileGID: 0") \
        .replace("DeviceFileMode: 432", "DeviceFileMode: 438")
    assert out == want
    got = nvidia_modprobe_reads(out)
    assert (got["ModifyDeviceFiles"], got["DeviceFileUID"], got["DeviceFileGID"],
            got["DeviceFileMode"]) == (0, 0, 0, 0o666)
    # the host's own file says 1: what NVIDIA's user space would obey
    assert nvidia_modprobe_reads(HOST_PARAMS)["ModifyDeviceFiles"] == 1
    # no host file (nvsim): the device-file keys alone, in the driver's format
    assert F.params_text("").decode() == \
        "ModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n"
    # a host whose numeric block lacks the keys: they go before the first
    # string key (the reader stops there), not after it
    short = "ResmanDebugLevel: 4294967295\nRmMsg: \"\"\n"
    out = F.params_text(short).decode()
    assert out.splitlines()[-1] == 'RmMsg: ""'
    assert nvidia_modprobe_reads(out)["ModifyDeviceFiles"] == 0
    # a key repeated after the string keys is left as it is (never read)
    assert F.params_text(HOST_PARAMS + "ModifyDeviceFiles: 1\n").decode() == want + \
        "ModifyDeviceFiles: 1\n"


def test_inventory_reads_the_driver_params(tmp_path):
    from vgpu.daemon import inventory as I
    p = tmp_path / "params"
    p.write_text(HOST_PARAMS)
    assert I.read_params(str(p)) == HOST_PARAMS
    assert I.read_params(str(tmp_path / "none")) == ""
    inv = I.Inventory(dev_prefix=str(tmp_path), use_nvml=False)
    inv.params_path = str(p)
    inv.poll()                                   # no nodes: no GPUs, params read
    assert inv.driver_params == HOST_PARAMS


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
        assert sorted(os.listdir(nv)) == ["gpus", "params", "version"]
        # no host params (the fake source has none): the device-file keys alone
        assert read(f"{nv}/params") == F.params_text("").decode()
        assert nvidia_modprobe_reads(read(f"{nv}/params"))["ModifyDeviceFiles"] == 0
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
    from vgpu.daemon.config import parse_config
    from vgpu.daemon.inventory import GpuInfo
    from vgpu.vgpuko.messages import GpuUsage, Slice
    from vgpu.daemon.records import GpuSlot, SliceRecord
    from vgpu.daemon.slices import SliceManager
    cfg = parse_config('[defaults]\nmemory = "4GiB"\n', "t.toml")
    mgr = SliceManager(cfg, "t.toml", kernel=None, store=None)
    mgr.gpus = [GpuInfo(0, "GPU-a", "NVIDIA A100", "0000:3b:00.0", 40 * GiB, 0, 0),
                GpuInfo(1, "GPU-b", "NVIDIA A100", "0000:af:00.0", 40 * GiB, 0, 1)]
    mgr.records["c1"] = SliceRecord("c1", 7, memory={0: 8 * GiB},
                                    gpus=[GpuSlot(1, "GPU-b", real_minor=1)])
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
    assert src.driver_params() == ""
    mgr.inventory = type("Inv", (), {"driver_version": "535.261.03",
                                     "driver_params": HOST_PARAMS})()
    assert src.driver_params() == HOST_PARAMS
    assert F.resolve(("c1", "proc", "driver", "nvidia", "params"), src.slices(), "",
                     src.driver_params()) == ("file", F.params_text(HOST_PARAMS))
    assert F.VgpuFs(src, str(tmp_path / "m0"))._node(
        ("c1", "proc", "driver", "nvidia", "params")) == ("file", F.params_text(HOST_PARAMS))
    mgr.inventory = None
    # one container's view alone (what lookups below it use) is the same
    assert src.slice("c1") == src.slices()["c1"] and src.slice("nope") is None
    # and the FS uses it: a lookup below c1 does not build every slice's view
    fs = F.VgpuFs(src, str(tmp_path / "mnt"))
    src.slices = lambda: (_ for _ in ()).throw(AssertionError("built every view"))
    assert fs._node(("c1", "dev", "nvidia0")) == ("chr", os.makedev(240, 114))
    assert fs._node(("nope", "dev")) is None


def test_config_empty_fuse_mount_disables():
    from vgpu.daemon.config import parse_config
    assert parse_config('[paths]\nfuse_mount = ""\n', "t.toml").paths.fuse_mount is None
    assert str(parse_config("", "t.toml").paths.fuse_mount) == "/run/vgpu/private/fs"


# ------------------------------------------------------------ host users
# What an unprivileged host user tries, run as uid/gid 65534 (nobody) by a
# child: each probe prints "ok" or the errno's name.
PROBE = textwrap.dedent("""
    import errno, json, os, sys
    out = {}
    for name, fn in [
        ("list-parent", lambda p: os.listdir(os.path.dirname(p))),
        ("list-tenants", lambda p: os.listdir(p)),
        ("stat-tenant", lambda p: os.stat(p + "/c1")),
        ("read-view", lambda p: open(p + "/c1/proc/driver/nvidia/version").read()),
        ("list-view", lambda p: os.listdir(p + "/c1/proc/driver/nvidia")),
        ("open-node", lambda p: os.close(os.open(p + "/c1/dev/nvidiactl", os.O_RDWR))),
        ("stat-node", lambda p: os.stat(p + "/c1/dev/nvidiactl")),
    ]:
        try:
            fn(sys.argv[1])
            out[name] = "ok"
        except OSError as e:
            out[name] = errno.errorcode.get(e.errno, str(e.errno))
    # a view as containers get it: a bind mount, reached without the parent
    if len(sys.argv) > 2:
        try:
            out["bound-view"] = open(sys.argv[2] + "/version").read()[:12]
        except OSError as e:
            out["bound-view"] = errno.errorcode.get(e.errno, str(e.errno))
    print(json.dumps(out))
""")


def as_nobody(*args) -> dict:
    import json

    def drop():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    r = subprocess.run(["/usr/bin/python3", "-I", "-c", PROBE, *args], cwd="/",
                       preexec_fn=drop, capture_output=True, text=True, timeout=30, env={})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@needs_fuse
def test_unprivileged_host_user_is_kept_out(tmp_path):
    """User nobody on the host can neither list the tenants, nor read a
    tenant's view, nor open or stat its nodes: the 0700 directory above the
    mount point stops the walk; and were that directory opened up, vgpufs
    itself answers its host-only directories to root alone.  Root (the hook)
    still sees everything, and a bind-mounted view (what a container has)
    stays readable by any uid."""
    import tempfile
    base = tempfile.mkdtemp(prefix="vgpufs-host-")       # reachable by nobody
    os.chmod(base, 0o755)
    mnt = os.path.join(base, "private", "fs")
    view = os.path.join(base, "view")
    os.mkdir(view)
    src = FakeSource()
    src.s["c1"] = two_gpu_slice()

    def body(m):
        parent = os.path.dirname(m)
        assert stat.S_IMODE(os.stat(parent).st_mode) == 0o700   # made by vgpufs
        assert os.stat(parent).st_uid == 0
        # root (the hook) sees what it needs
        assert os.listdir(m) == ["c1"] and "nvidiactl" in os.listdir(f"{m}/c1/dev")
        subprocess.run(["mount", "--bind", f"{m}/c1/proc/driver/nvidia", view], check=True)
        try:
            got = as_nobody(m, view)
            assert got.pop("list-parent") == "EACCES"
            assert got.pop("bound-view") == "NVRM version"     # what a container has
            assert got == {k: "EACCES" for k in got}, got
            # the second wall: the parent opened up by mistake
            os.chmod(parent, 0o755)
            got = as_nobody(m, view)
            assert got.pop("list-parent") == "ok"
            assert got.pop("bound-view") == "NVRM version"     # containers unaffected
            assert got == {k: "EACCES" for k in got}, got
            os.chmod(parent, 0o700)
        finally:
            subprocess.run(["umount", view], check=False)
        # modes: the host's directories are root's, the view everyone's
        assert stat.S_IMODE(os.stat(m).st_mode) == 0o500
        assert stat.S_IMODE(os.stat(f"{m}/c1/dev").st_mode) == 0o500
        assert stat.S_IMODE(os.stat(f"{m}/c1/proc/driver/nvidia").st_mode) == 0o555
        assert stat.S_IMODE(os.stat(f"{m}/c1/dev/nvidiactl").st_mode) == 0o666
        return True

    try:
        assert serve(mnt, src, body)
    finally:
        F.clear_stale_mounts(mnt)
        subprocess.run(["rm", "-rf", "--one-file-system", base], check=False)


@needs_fuse
def test_a_parent_open_to_others_is_refused(tmp_path):
    """vgpufs does not mount where host users could walk in."""
    import tempfile
    base = tempfile.mkdtemp(prefix="vgpufs-open-")
    os.chmod(base, 0o755)
    try:
        with pytest.raises(PermissionError) as ei:
            trio.run(F.VgpuFs(FakeSource(), os.path.join(base, "fs")).run)
        assert "mode 0755" in str(ei.value) and "0700" in str(ei.value)
        assert not mounted(os.path.join(base, "fs"))
    finally:
        os.rmdir(base)


@needs_fuse
def test_open_files_per_slice_are_bounded(tmp_path, monkeypatch):
    """A container cannot pin vgpud's memory: open view files are counted
    per slice (EMFILE past the bound); another slice is unaffected."""
    monkeypatch.setattr(F, "MAX_OPEN_PER_SLICE", 8)
    src = FakeSource()
    src.s["a"] = two_gpu_slice("a", 1, 16)
    src.s["b"] = two_gpu_slice("b", 2, 32)
    mnt = tmp_path / "fs"

    def body(m):
        files = [open(f"{m}/a/proc/driver/nvidia/version") for _ in range(8)]
        with pytest.raises(OSError) as ei:
            open(f"{m}/a/proc/driver/nvidia/version")
        assert ei.value.errno == errno.EMFILE
        assert read(f"{m}/b/proc/driver/nvidia/version").startswith("NVRM")
        files.pop().close()
        assert read(f"{m}/a/proc/driver/nvidia/version").startswith("NVRM")
        for f in files:
            f.close()
        return True

    assert serve(mnt, src, body)


FLOOD = textwrap.dedent("""
    import os, sys, time
    end = time.monotonic() + float(sys.argv[2])
    n = 0
    while time.monotonic() < end:
        with open(sys.argv[1] + "/proc/driver/nvidia/version") as f:
            f.read()
        os.stat(sys.argv[1] + "/dev/nvidiactl")
        os.listdir(sys.argv[1] + "/proc/driver/nvidia/gpus")
        n += 1
    print(n)
""")


@needs_fuse
def test_admin_api_answers_while_vgpufs_is_flooded(tmp_path):
    """FUSE and the admin API share vgpud's trio loop.  pyfuse3 reads one
    request per wake-up of the loop and every handler is synchronous and
    bounded to one slice's records, so a container hammering its view slows
    the API by a request's cost per loop turn, no more: API round trips stay
    fast under a flood from 6 processes."""
    import json
    import socket
    from vgpu.daemon import api

    class Handler:                  # api.dispatch's handler: run(op, args)
        async def run(self, op, args):
            return {"up": True}

    src = FakeSource()
    for i in range(50):
        src.s[f"c{i}"] = two_gpu_slice(f"c{i}", i + 1, 16 * (i + 1))
    mnt = tmp_path / "fs"
    sock = str(tmp_path / "api.sock")
    lat, floods = [], []

    def client():
        time.sleep(0.5)                       # the flood is under way
        for i in range(100):
            t0 = time.monotonic()
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(10)
                s.connect(sock)
                s.sendall(json.dumps({"v": 1, "id": i, "op": "status"}).encode() + b"\n")
                reply = s.makefile("rb").readline()
            assert json.loads(reply)["ok"], reply
            lat.append(time.monotonic() - t0)

    def flood():
        ps = [subprocess.Popen(["/usr/bin/python3", "-I", "-c", FLOOD, f"{mnt}/c{k}", "4"],
                               stdout=subprocess.PIPE, text=True) for k in range(6)]
        floods.extend(int(p.communicate()[0]) for p in ps)

    async def main():
        fs = F.VgpuFs(src, str(mnt))
        server = api.Server(Handler(), sock)
        async with trio.open_nursery() as n:
            await n.start(fs.run)
            await n.start(server.run)
            async with trio.open_nursery() as w:
                w.start_soon(trio.to_thread.run_sync, flood)
                w.start_soon(trio.to_thread.run_sync, client)
            n.cancel_scope.cancel()
    trio.run(main)
    lat.sort()
    print(f"\nAPI under a vgpufs flood of {sum(floods)} view walks: median "
          f"{lat[len(lat) // 2] * 1e3:.1f} ms, max {lat[-1] * 1e3:.1f} ms")
    assert sum(floods) > 200                  # it was a flood (~2000 here)
    assert lat[len(lat) // 2] < 0.1 and lat[-1] < 1.0


MOUNT_VIEWS = textwrap.dedent("""
    import sys
    from vgpu.cli.hook.mounts import Mounter, mount_views
    pid, cid, rootfs, fuse = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    m = Mounter()
    m.setns_mnt(pid)
    print(" ".join(mount_views(cid, rootfs, fuse, m, lambda msg: None)))
""")


@needs_fuse
def test_hook_mounts_from_the_private_mount_and_containers_use_it(tmp_path):
    """The hook (root) still reaches vgpufs behind its 0700 parent and
    bind-mounts the slice's nodes and view into a container's mount
    namespace; in there a non-root process reads the view and sees the
    nodes 0666, as on a real host, while the host path stays closed to it."""
    import tempfile
    base = tempfile.mkdtemp(prefix="vgpufs-hook-")
    os.chmod(base, 0o755)
    mnt = os.path.join(base, "private", "fs")
    rootfs = os.path.join(base, "rootfs")
    os.makedirs(os.path.join(rootfs, "dev"))
    os.makedirs(os.path.join(rootfs, "proc", "driver"))
    src = FakeSource()
    src.s["c1"] = two_gpu_slice()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def body(m):
        ctr = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "60"])
        try:
            time.sleep(0.2)
            r = subprocess.run([sys.executable, "-c", MOUNT_VIEWS, str(ctr.pid), "c1", rootfs, m],
                               capture_output=True, text=True, cwd=repo, timeout=30,
                               env={**os.environ, "PYTHONPATH": repo})
            assert r.returncode == 0, r.stderr
            assert "/dev/nvidiactl" in r.stdout and "/proc/driver/nvidia" in r.stdout
            nobody = ["nsenter", "-t", str(ctr.pid), "-m", "setpriv", "--reuid", "65534",
                      "--regid", "65534", "--clear-groups", "sh", "-c"]
            out = subprocess.run(nobody + [
                f"cat {rootfs}/proc/driver/nvidia/version {rootfs}/proc/driver/nvidia/params;"
                f" stat -c '%A' {rootfs}/dev/nvidiactl;"
                f" ls {m} 2>&1 || true"], capture_output=True, text=True, timeout=30).stdout
            assert "vgpu slice 1 (container c1)" in out
            # the params file NVIDIA's user space reads in the container
            # (vgpu.daemon.fs.params_text): it comes with the view's directory
            assert "ModifyDeviceFiles: 0\n" in out
            assert "crw-rw-rw-" in out and "Permission denied" in out, out
        finally:
            ctr.kill()
            ctr.wait()
        return True

    try:
        assert serve(mnt, src, body)
    finally:
        F.clear_stale_mounts(mnt)
        subprocess.run(["rm", "-rf", "--one-file-system", base], check=False)
