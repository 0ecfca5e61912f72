"""vgpu.ko at the container boundary: who may open a
slice's nodes, who may listen to its events, what a freed slot leaves behind,
and what a VID_HEAP FREE may free.

Each test names the finding it closes; each failed on the module before the
fix (nodes 0666, unbound slices open to any task, no check of the real
node's permissions, slots reused at once, events readable without
CAP_NET_ADMIN, VID_HEAP FREE of any handle).  Work without a capability or
as another user runs in a forked child that drops it."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from vgpu_fixtures import NODE_DIR, _ids, in_child
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401
from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError

MiB = 1 << 20
CG_ROOT = Path("/sys/fs/cgroup")
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
NOBODY = 65534

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHdr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_cap(cap: int) -> None:
    """Drop one capability from this (child) process's effective and
    permitted sets."""
    hdr = _CapHdr(0x20080522, 0)                  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    word, bit = divmod(cap, 32)
    data[word].effective &= ~(1 << bit)
    data[word].permitted &= ~(1 << bit)
    if _libc.capset(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def try_open(path: str):
    def fn():
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC))
            return "ok"
        except OSError as e:
            return errno.errorcode[e.errno]
    return fn


@pytest.fixture
def cgroup():
    if not (CG_ROOT / "cgroup.controllers").exists():
        pytest.skip("no cgroup v2 at /sys/fs/cgroup")
    d = CG_ROOT / f"vgpu-boundary-{os.getpid()}"
    d.mkdir(exist_ok=True)
    yield d
    for _ in range(100):
        try:
            d.rmdir()
            break
        except OSError:
            import time
            time.sleep(0.05)


@pytest.fixture
def bound_slice(kern, cgroup):
    """A 64 MiB slice on GPU 0 bound to ``cgroup``."""
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        info = kern.slice_new(next(_ids), [(0, 64 * MiB)], cgroup_fd=fd)
    finally:
        os.close(fd)
    yield info
    kern.slice_del(info.id, force=True)


@pytest.fixture
def node_copy():
    """A world-readable directory where tests mknod copies of slice nodes
    (what vgpufs hands a container), removed afterwards."""
    d = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="vgpu-nodes-"))
    d.chmod(0o755)
    made = []

    def _make(name: str, devno: int) -> str:
        p = d / name
        os.mknod(p, stat.S_IFCHR | 0o666, devno)
        p.chmod(0o666)
        made.append(p)
        return str(p)
    yield _make
    shutil.rmtree(d)


# ------------------------------------------------------------ host nodes are root's
def test_host_nodes_are_root_only(sl):
    """/dev/vgpu/<id>/* were 0666: any host user opened any tenant's slice."""
    d = NODE_DIR / str(sl.id)
    if not d.exists():
        pytest.skip("no devtmpfs names for vgpu nodes")
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in d.iterdir()}
    assert modes and set(modes.values()) == {0o600}, modes
    assert in_child(lambda: (os.setresuid(NOBODY, NOBODY, NOBODY),
                             try_open(str(d / "nvidiactl"))())[1]) == {"ok": "EACCES"}


def test_unbound_slice_opens_for_a_host_admin_only(sl):
    """An unbound slice (made by pid, or `vgpuctl create` without --cgroup)
    opened for every vgpu container; now only for CAP_SYS_ADMIN."""
    path = sl.path("nvidiactl")
    assert try_open(path)() == "ok"

    def without_admin():
        drop_cap(CAP_SYS_ADMIN)
        return {n: try_open(sl.path(n))() for n in ("nvidiactl", "nvidia0")}
    assert in_child(without_admin) == {"ok": {"nvidiactl": "EPERM", "nvidia0": "EPERM"}}
    assert sl.get().open_files == 0


def test_open_makes_the_real_nodes_permission_check(kern, cgroup, bound_slice, node_copy):
    """dentry_open() of the real node skipped its permission check: a user
    who may not open /dev/nvidiactl opened it through a slice."""
    ctl = node_copy("nvidiactl", bound_slice.ctl_devno)
    real = Path("/dev/nvidiactl")
    mode = stat.S_IMODE(real.stat().st_mode)

    def as_nobody():
        os.setresuid(NOBODY, NOBODY, NOBODY)
        return try_open(ctl)()
    try:
        real.chmod(0o666)
        assert in_child(as_nobody, cgroup) == {"ok": "ok"}
        real.chmod(0o600)
        assert in_child(as_nobody, cgroup) == {"ok": "EACCES"}
        # root still opens it: the check is the real node's, not a refusal
        assert in_child(try_open(ctl), cgroup) == {"ok": "ok"}
    finally:
        real.chmod(mode)
    assert kern.slice_get(bound_slice.id).open_files == 0


# ------------------------------------------------------------ a stale node opens nothing
def test_a_deleted_slices_minors_are_not_handed_out_at_once(kern):
    """idr_alloc took the lowest free slot: a stale node of a deleted slice
    opened the next tenant's slice."""
    first = kern.slice_new(next(_ids), [(0, MiB)])
    kern.slice_del(first.id, force=True)
    later = []
    try:
        for _ in range(3):
            later.append(kern.slice_new(next(_ids), [(0, MiB)]))
        assert first.base_minor not in [s.base_minor for s in later]
        assert len({s.base_minor for s in later}) == 3
    finally:
        for s in later:
            kern.slice_del(s.id, force=True)


def test_events_need_net_admin(kern, sl):
    """The events group had no GENL_MCAST_CAP_NET_ADMIN: any local user read
    host pids and slice sizes."""
    with kern.subscribe(timeout=1):
        pass                                  # root may

    def listen():
        drop_cap(CAP_NET_ADMIN)
        from vgpu.vgpuko.client import VgpuKernel
        k = VgpuKernel()
        try:
            with k.subscribe(timeout=1):
                return "joined"
        finally:
            k.close()
    out = in_child(listen)
    assert out.get("errno") == errno.EPERM, out


# --------------------------------------------------------- a free frees only what the caller owns
def test_nvsim_vid_heap_free_frees_any_handle(client, gpu0, state):
    """nvsim models _nvos32FunctionFree (rmapi_deprecated_vidheapctrl.c):
    without MEMORY_HANDLE_PROVIDED it is refused; with it, it is RmFree of
    whatever the handle names, a device included."""
    p = A.NVOS32_PARAMETERS(hRoot=client.hClient, hObjectParent=gpu0.hDevice,
                            function=A.NVOS32_FUNCTION_FREE)
    p.data.Free.hMemory = gpu0.hSubdevice
    client.escape(A.NV_ESC_RM_VID_HEAP_CONTROL, p)
    assert p.status == A.NV_ERR_INVALID_ARGUMENT
    before = state().objects
    client.vid_heap_free(gpu0.hDevice, gpu0.hSubdevice)
    assert state().objects == before - 1


@pytest.mark.parametrize("what", ["client", "device", "subdevice", "channel"])
def test_vid_heap_free_of_anything_but_memory_is_refused(sl, what):
    """Through vgpu.ko, VID_HEAP FREE of a client, device or channel freed it
    in the driver behind vgpu.ko's tracking (and the scheduler's hold on a
    channel).  Only tracked memory may be freed this way now."""
    c = sl.client()
    g = c.open_gpus()[0]
    h = {"client": c.hClient, "device": g.hDevice, "subdevice": g.hSubdevice}.get(what)
    if what == "channel":
        h = c.alloc_channel(c.alloc_tsg(g.hDevice))
    with pytest.raises(RmError) as ei:
        c.vid_heap_free(g.hDevice, h)
    assert ei.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    # everything still works and is still counted
    m = g.alloc(8 * MiB, "vid-heap")
    assert sl.used() == 8 * MiB
    c.vid_heap_free(g.hDevice, m)
    assert sl.used() == 0


# -------------------------------------------------------- no sharing of another client's VA space
def _device_params(**kw):
    return A.NV0080_ALLOC_PARAMETERS(deviceId=0, **kw)


def test_nvsim_device_joins_another_clients_va_space_by_handle(res, state):
    """nvsim models deviceInitClientShare (device_share.c): hClientShare of
    another client attaches the new device to that client's VA space, found
    by handle alone; 0 is the GPU's global VA space."""
    a, b = res.client(), res.client()
    a.open_gpus()
    base = state()
    glob = int(base.extra["vas_global"].split()[1])
    foreign = int(base.extra["vas_foreign"].split()[1])
    h = b.alloc(b.hClient, A.NV01_DEVICE_0, _device_params(hClientShare=a.hClient))
    assert int(state().extra["vas_foreign"].split()[1]) == foreign + 1
    b.free(h)
    h = b.alloc(b.hClient, A.NV01_DEVICE_0, _device_params())
    assert int(state().extra["vas_global"].split()[1]) == glob + 1
    b.free(h)
    with pytest.raises(RmError) as ei:          # a client with no device there
        b.alloc(b.hClient, A.NV01_DEVICE_0, _device_params(hClientShare=0xc1d0beef))
    assert ei.value.status == A.NV_ERR_INVALID_CLIENT


@pytest.mark.parametrize("field", ["hClientShare", "hTargetClient", "hTargetDevice", "flags"])
def test_a_containers_device_never_joins_another_va_space(make_slice, state, field):
    """vgpu.ko passed hClientShare, hTargetClient, hTargetDevice and flags
    through: a container attached its device to another tenant's VA space
    by handle alone.  Now the device's VA space is always its own client's
    (0 included), and the rest is refused."""
    victim, thief = make_slice(), make_slice()
    vc = victim.client()
    vg = vc.open_gpus()[0]
    tc = thief.client()
    tc.open_gpus()
    value = {"hClientShare": vc.hClient, "hTargetClient": vc.hClient,
             "hTargetDevice": vg.hDevice,
             "flags": A.NV_DEVICE_ALLOCATION_FLAGS_PLUGIN_CONTEXT}[field]
    t2 = thief.client()
    with pytest.raises(RmError) as ei:
        t2.alloc(t2.hClient, A.NV01_DEVICE_0, _device_params(**{field: value}))
    assert ei.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    assert int(state().extra["vas_foreign"].split()[1]) == 0
    assert int(state().extra["vas_global"].split()[1]) == 0    # 0 became "own"


# -------------------------------------------------------- UVM names only the caller's own clients
def test_uvm_register_gpu_vaspace_checks_the_client(make_slice):
    """UVM_REGISTER_GPU_VASPACE's hClient was named _pad0 and never checked;
    the real UVM driver dups hClient's VA space by handle alone (and ignores
    rmCtrlFd), so another slice's client must be refused."""
    victim, thief = make_slice(), make_slice()
    vc = victim.client()
    vg = vc.open_gpus()[0]
    tc = thief.client()
    tg = tc.open_gpus()[0]
    u = thief.uvm()
    u.initialize()
    with pytest.raises(OSError) as ei:
        u.register_gpu_vaspace(b"\0" * 16, tc.fd, vc.hClient, vg.hDevice)
    assert ei.value.errno == errno.EPERM
    u.register_gpu_vaspace(b"\0" * 16, tc.fd, tc.hClient, tg.hDevice)


# ---------------------------------- calls at the caller's own privilege (nvsim's privilege model)
def _privs(state) -> dict:
    f = state().extra["user_client_objects"].split()
    return {f[1]: int(f[2]), f[3]: int(f[4]), f[5]: int(f[6])}


def _privileged_channels(state) -> int:
    return int(state().extra["privileged_channels"].split()[1])


def _counters() -> list[int]:
    """[user_client_objects kernel, privileged_channels] from nvsim's state
    (read in a child, where the fixtures' parser is not at hand)."""
    import re
    text = open("/sys/kernel/debug/nvsim/state").read()
    return [int(re.search(r"user_client_objects .* kernel (\d+)", text).group(1)),
            int(re.search(r"privileged_channels (\d+)", text).group(1))]


def _workload(prefix: str):
    """What a container does first: a client with a device, subdevice,
    8 MiB, a TSG and a channel; nvsim's counters while they live."""
    from vgpu.abi.nvclient import RmClient
    c = RmClient(prefix)
    try:
        g = c.open_gpus()[0]
        g.alloc(8 * MiB)
        c.alloc_channel(c.alloc_tsg(g.hDevice))
        return _counters()
    finally:
        c.close()


def test_nvsim_records_the_privilege_of_every_call(state):
    """entry_points.c, XlateUserModeArgsToSecInfo: user-mode calls run at
    USER, or USER_ROOT for an administrator (capable(CAP_SYS_ADMIN)); the
    kernel entry point at KERNEL.  kchannelConstruct makes a channel
    privileged at USER_ROOT and above."""
    from vgpu.abi.nvclient import RmClient
    before, chans = _privs(state), _privileged_channels(state)
    c = RmClient()                              # root: USER_ROOT
    try:
        g = c.open_gpus()[0]
        tsg = c.alloc_tsg(g.hDevice)
        c.alloc_channel(tsg)
        mid = _privs(state)
        assert mid["user_root"] >= before["user_root"] + 4      # device, subdevice, tsg, channel
        assert mid["user"] == before["user"] and mid["kernel"] == before["kernel"]
        assert _privileged_channels(state) == chans + 1

        def as_user():
            drop_cap(CAP_SYS_ADMIN)
            c2 = RmClient()
            try:
                g2 = c2.open_gpus()[0]
                t2 = c2.alloc_tsg(g2.hDevice)
                c2.alloc_channel(t2)
                import re
                text = open("/sys/kernel/debug/nvsim/state").read()
                m = re.search(r"user_client_objects user (\d+)", text)
                p = re.search(r"privileged_channels (\d+)", text)
                return [int(m.group(1)), int(p.group(1))]
            finally:
                c2.close()
        users, privileged = in_child(as_user)["ok"]
        assert users >= before["user"] + 4
        assert privileged == chans + 1          # the user's channel is not privileged
    finally:
        c.close()
    assert _privs(state) == before and _privileged_channels(state) == chans


def test_no_container_object_is_kernel_level(cgroup, bound_slice, state):
    """Calls keep the caller's privilege: a container (in the slice's
    cgroup, without CAP_SYS_ADMIN) working through its slice makes no object at kernel
    privilege and no privileged channel: vgpu.ko makes its calls through
    the real file at the caller's own privilege (call.c)."""
    prefix = str(NODE_DIR / str(bound_slice.id))
    before = [_privs(state)["kernel"], _privileged_channels(state)]

    def container():
        drop_cap(CAP_SYS_ADMIN)
        return _workload(prefix)
    out = in_child(container, cgroup)
    assert "ok" in out, out
    assert out["ok"] == before, (before, out["ok"])
