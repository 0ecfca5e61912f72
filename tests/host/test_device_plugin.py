"""vgpu-device-plugin (vgpu/k8s/: devices.py, watch.py, server.py, the program
deviceplugin.py) against a test kubelet built from the kubelet's own api.proto
(kubelet_sim.py) and vgpud's real admin API.

The plugin runs as its own process, as vgpud starts it.  Its vgpud is the
daemon's API server (vgpu.daemon.api.Server over vgpu.daemon.ops.Ops) in a
thread of the test, over daemon_support's FakeKernel and FakeInventory, so
that the GPUs can be changed and the daemon stopped at will; the supervision
test runs a real vgpud (tools/testbed/vgpud_launcher.py), which on the host has no
GPU.  No gRPC is mocked: every call crosses a Unix socket.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import grpc
import pytest
import trio

from daemon_support import FakeInventory, FakeNvml, GiB, ThreadVgpud
from kubelet_sim import PROTO_DIR, KubeletSim
from proto_support import compile_fds, shape
from vgpu import __version__
from vgpu.common.request import RUNTIME_GUARD_DEST
from vgpu.daemon import health
from vgpu.daemon.inventory import synth_uuid
from vgpu.k8s import devices, server, watch
from vgpu.daemon.plugin_supervisor import plugin_argv, supervise

ROOT = Path(__file__).resolve().parents[2]
from tools.testbed.vgpud_launcher import config as vgpud_config, running

MEM, PCT = devices.MEMORY, devices.COMPUTE


# ------------------------------------------------------------------ harness
def start_plugin(tmp: Path, sock: str, *args: str) -> subprocess.Popen:
    kdir = tmp / "kubelet"
    kdir.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "vgpu.k8s.deviceplugin", "--socket", sock,
                             "--kubelet-dir", str(kdir), "--poll-interval", "0.1",
                             "--watch-interval", "0.05", "--timeout", "2",
                             "--guard-file", str(tmp / "run-vgpu" / "guard"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def stop_plugin(p: subprocess.Popen) -> str:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise AssertionError(f"the plugin did not stop on SIGTERM:\n{out}")
    assert p.returncode == 0, out
    return out


@pytest.fixture
def node(tmp_path):
    """(vgpud, kubelet, start) where start(*args, extra=...) runs the plugin
    and waits for both registrations; the plugin's log is printed on failure."""
    state = {"vgpud": None, "plugin": None}
    kdir = tmp_path / "kubelet"
    kdir.mkdir()
    kubelet = KubeletSim(kdir).start()

    def start(*args, extra: str = "", n: int = 2, total: int = 16 * GiB):
        state["vgpud"] = v = ThreadVgpud(tmp_path, extra, n, total).start()
        state["plugin"] = start_plugin(tmp_path, v.sock, *args)
        kubelet.wait(lambda: {r.resource_name for r in kubelet.registrations} == {MEM, PCT},
                     what="both registrations")
        return v

    yield start, kubelet, state
    kubelet.stop()
    if state["plugin"] is not None:
        out = stop_plugin(state["plugin"])
        print(out)
    if state["vgpud"] is not None and state["vgpud"].thread.is_alive():
        state["vgpud"].stop()


#: the UUIDs of ThreadVgpud's GPUs (FakeInventory's, made from their PCI ids)
UU = [synth_uuid(f"0000:0{i + 1}:00.0") for i in range(4)]


def dev(gpu: int, kind: str, n) -> str:
    """A device ID: the GPU's UUID, the kind, the number."""
    return f"{UU[gpu]}-{kind}-{n}"


def ids(gpu: int, kind: str, ns) -> list[str]:
    return [dev(gpu, kind, n) for n in ns]


def rpc_error(fn, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as ei:
        fn(*args)
    return ei.value


# ------------------------------------------------------------------ the .proto
def test_our_proto_describes_the_kubelets_api(tmp_path):
    ours = compile_fds(server.PROTO, tmp_path)
    theirs = compile_fds(PROTO_DIR / "api.proto", tmp_path)
    a, b = shape(ours), shape(theirs)
    assert a["services"] == b["services"]
    assert set(a["messages"]) == set(b["messages"])
    for name in a["messages"]:
        assert a["messages"][name] == b["messages"][name], name
    assert a == b
    assert set(a["services"]) == {"Registration", "DevicePlugin"}
    assert [m[0] for m in a["services"]["DevicePlugin"]] == sorted(
        ["GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
         "PreStartContainer"])
    # ours imports nothing and sets no option (no gogoproto, no go_package)
    assert not ours.dependency and not ours.options.ListFields()


def test_the_comparison_sees_a_changed_field(tmp_path):
    text = server.PROTO.read_text().replace("int32 allocation_size = 3;", "int64 allocation_size = 3;")
    changed = tmp_path / "changed.proto"
    changed.write_text(text)
    assert shape(compile_fds(changed, tmp_path)) != shape(compile_fds(server.PROTO, tmp_path))


def test_api_loads_both_services():
    api = server.Api()
    assert api.package == "v1beta1"
    assert {m[0]: m[3] for m in api.services["DevicePlugin"]} == {
        "GetDevicePluginOptions": False, "ListAndWatch": True, "GetPreferredAllocation": False,
        "Allocate": False, "PreStartContainer": False}
    assert api.msg["Device"](ID="x", health="Healthy").SerializeToString()


# ------------------------------------------------------------------ registration, devices
def test_registers_both_resources_and_lists_the_gpus_devices(node):
    start, kubelet, _ = node
    start()
    regs = {r.resource_name: r for r in kubelet.registrations}
    assert set(regs) == {MEM, PCT}
    for r in regs.values():
        assert r.version == "v1beta1"
        assert r.options.get_preferred_allocation_available and not r.options.pre_start_required
        assert "/" not in r.endpoint and (kubelet.dir / r.endpoint).exists()
    assert regs[MEM].endpoint != regs[PCT].endpoint
    mem = kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    pct = kubelet.wait_devices(PCT, lambda d: len(d) == 200)
    assert sorted(i for i, _ in mem) == sorted(ids(0, "mem", range(16)) + ids(1, "mem", range(16)))
    assert sorted(i for i, _ in pct) == sorted(ids(0, "pct", range(100)) + ids(1, "pct", range(100)))
    assert {h for _, h in mem + pct} == {"Healthy"}
    opts = kubelet.options[MEM]
    assert opts.get_preferred_allocation_available and not opts.pre_start_required
    assert kubelet.prestart(MEM, ids(0, "mem", [0])).ByteSize() == 0


def test_devices_follow_vgpuds_gpus(node):
    start, kubelet, _ = node
    v = start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    v.inv.gpus = FakeInventory(1, 24 * GiB).gpus          # one GPU of 24 GiB now
    mem = kubelet.wait_devices(MEM, lambda d: len(d) == 24)
    assert sorted(i for i, _ in mem) == sorted(ids(0, "mem", range(24)))
    assert len(kubelet.wait_devices(PCT, lambda d: len(d) == 100)) == 100


@pytest.mark.parametrize("factor,over,expect", [("2", True, 64), ("1.5", True, 48),
                                                ("2", False, 32), (None, True, 64)])
def test_oversubscription_changes_the_count(node, factor, over, expect):
    start, kubelet, _ = node
    args = ("--oversubscribe-factor", factor) if factor else ()
    start(*args, extra="[node]\noversubscribe_memory = true\n" if over else "")
    mem = kubelet.wait_devices(MEM, lambda d: len(d) == expect)
    assert dev(1, "mem", expect // 2 - 1) in {i for i, _ in mem}
    assert len(kubelet.wait_devices(PCT, lambda d: len(d) == 200)) == 200


def test_vgpud_down_makes_devices_unhealthy_not_gone(node):
    start, kubelet, _ = node
    v = start("--unhealthy-after", "0")
    kubelet.wait_devices(MEM, lambda d: len(d) == 32 and d[0][1] == "Healthy")
    v.stop()
    mem = kubelet.wait_devices(MEM, lambda d: {h for _, h in d} == {"Unhealthy"})
    assert len(mem) == 32
    assert len(kubelet.wait_devices(PCT, lambda d: {h for _, h in d} == {"Unhealthy"})) == 200
    v.start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32 and {h for _, h in d} == {"Healthy"})


def test_a_vgpud_restart_keeps_the_devices_healthy(node):
    """vgpud restarting leaves every slice and vgpu.ko's enforcement in
    place: within --unhealthy-after the kubelet never sees a device
    Unhealthy (every vgpud restart once took the whole node's devices out)."""
    start, kubelet, state = node
    v = start("--unhealthy-after", "600")
    kubelet.wait_devices(MEM, lambda d: len(d) == 32 and d[0][1] == "Healthy")
    v.stop()
    time.sleep(1.0)                 # polls at 0.1 s that vgpud does not answer
    v.inv.gpus = FakeInventory(1, 24 * GiB).gpus            # and back with one GPU:
    v.start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 24)       # the plugin has seen it again
    out = stop_plugin(state["plugin"])
    state["plugin"] = None
    assert "does not answer" in out and "devices stay as they were for 600 s" in out, out
    assert "vgpud answers again" in out, out
    assert kubelet.healths[MEM] == {"Healthy"} and kubelet.healths[PCT] == {"Healthy"}


def test_a_gpus_critical_xid_makes_its_devices_unhealthy_and_no_others(node, monkeypatch):
    """An XID NVML reports for GPU 1 (vgpu.daemon.health's watch over a
    stand-in for NVML, feeding the real vgpud operations): the plugin
    advertises GPU 1's devices of both resources Unhealthy, GPU 0's stay
    Healthy; an application's XID on GPU 0 changes nothing."""
    monkeypatch.setattr(health, "WAIT_MS", 20)
    start, kubelet, state = node
    v = start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32 and {h for _, h in d} == {"Healthy"})
    nv = FakeNvml(UU[:2])
    watch = health.XidWatch(nv, partial(health.record_fault, v.mgr.gpu_faults))
    t = threading.Thread(target=watch.run, daemon=True)
    t.start()
    try:
        nv.xid(0, 13)
        nv.xid(1, 79)

        def split(d):
            by = {i: h for i, h in d}
            return {by[dev(0, k, n)] for k, n in (("mem", 0), ("mem", 15))} == {"Healthy"} \
                and {h for i, h in d if i.startswith(UU[1])} == {"Unhealthy"}
        kubelet.wait_devices(MEM, split)
        pct = kubelet.wait_devices(PCT, lambda d: {h for i, h in d if i.startswith(UU[1])}
                                   == {"Unhealthy"})
        assert {h for i, h in pct if i.startswith(UU[0])} == {"Healthy"}
    finally:
        watch.stop()
        t.join(5)
    out = stop_plugin(state["plugin"])
    state["plugin"] = None
    assert f"GPU 1 ({UU[1]}): XID 79: its devices are Unhealthy until vgpud restarts" in out, out


def test_a_second_plugin_on_the_same_kubelet_directory_is_refused(node, tmp_path):
    """Two plugins on one kubelet directory would each find the other's
    socket in place of its own and serve and register again, in turn (38
    registrations in 10 s): the second stops at once, naming the first."""
    start, kubelet, state = node
    v = start()
    first = state["plugin"].pid
    second = start_plugin(tmp_path, v.sock)
    try:
        out, _ = second.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        second.kill()
        raise AssertionError("the second plugin did not stop: " + second.communicate()[0])
    assert second.returncode == 1, out
    assert (f"another vgpu-device-plugin (pid {first}) already serves "
            f"{os.path.realpath(tmp_path / 'kubelet')}") in out, out
    time.sleep(0.5)
    assert len(kubelet.registrations) == 2
    assert state["plugin"].poll() is None
    assert len(kubelet.wait_devices(MEM, lambda d: len(d) == 32)) == 32


def test_kubelet_restart_reregisters_and_serves_again(node):
    start, kubelet, state = node
    start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    assert len(kubelet.registrations) == 2
    kubelet.restart()
    kubelet.wait(lambda: len(kubelet.registrations) == 4, what="registrations after the restart")
    assert {r.resource_name for r in kubelet.registrations[2:]} == {MEM, PCT}
    assert len(kubelet.wait_devices(MEM, lambda d: len(d) == 32)) == 32
    assert kubelet.allocate(MEM, ids(0, "mem", [0])).container_responses[0].annotations[
        "vgpu.io/container-memory"] == "1Gi"
    # a new kubelet.sock alone (our sockets left in place) is a new kubelet too
    kubelet.new_socket()
    kubelet.wait(lambda: len(kubelet.registrations) == 6, what="registrations after a new kubelet.sock")
    out = stop_plugin(state["plugin"])
    state["plugin"] = None
    assert "removed (a kubelet restart): serving again" in out
    assert "registered with the kubelet" in out
    assert not list(kubelet.dir.glob("vgpu-*.sock"))       # removed on the way out


def test_waits_for_an_absent_kubelet(tmp_path):
    v = ThreadVgpud(tmp_path).start()
    kdir = tmp_path / "kubelet"
    p = start_plugin(tmp_path, v.sock)
    try:
        # no kubelet.sock: it serves, says it waits, and does not exit.  Both
        # sockets there mean its first look at the directory is over (on a
        # loaded machine its start alone has taken more than a second).
        deadline = time.monotonic() + 60
        while not all((kdir / r[1]).exists() for r in devices.RESOURCES.values()):
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)
        assert p.poll() is None
        kubelet = KubeletSim(kdir).start()
        kubelet.wait(lambda: len(kubelet.registrations) == 2, what="late registrations")
        kubelet.wait_devices(MEM, lambda d: len(d) == 32)
        kubelet.stop()
    finally:
        out = stop_plugin(p)
        v.stop()
    assert "waiting for the kubelet (no kubelet.sock" in out and "registered with" in out


# ------------------------------------------------------------------ allocation
def test_preferred_allocation_keeps_memory_on_one_gpu(node):
    start, kubelet, _ = node
    start(extra='[node]\nplacement = "binpack"\n')
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    avail = ids(0, "mem", range(8)) + ids(1, "mem", range(4, 16))      # 8 free on 0, 12 on 1
    got = kubelet.preferred(MEM, avail, size=6)
    assert got == ids(0, "mem", range(6))                               # binpack: the fuller
    got = kubelet.preferred(MEM, avail, size=10)
    assert got == ids(1, "mem", range(4, 14))                           # only GPU 1 holds 10
    got = kubelet.preferred(MEM, avail, must=[dev(1, "mem", 15)], size=3)
    assert got == [dev(1, "mem", 15), dev(1, "mem", 4), dev(1, "mem", 5)]
    # compute: one GPU too when it can
    avail_pct = ids(0, "pct", range(40)) + ids(1, "pct", range(70))
    assert kubelet.preferred(PCT, avail_pct, size=30) == ids(0, "pct", range(30))
    assert kubelet.preferred(PCT, avail_pct, size=60) == ids(1, "pct", range(60))
    # past any one GPU, compute is taken from several (counted per node)
    got = kubelet.preferred(PCT, avail_pct, size=90)
    assert len(got) == 90 and len({g.rsplit("-", 2)[0] for g in got}) == 2


def test_preferred_allocation_spread(node):
    start, kubelet, _ = node
    start()                                                             # spread: the default
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    avail = ids(0, "mem", range(8)) + ids(1, "mem", range(4, 16))
    assert kubelet.preferred(MEM, avail, size=6) == ids(1, "mem", range(4, 10))
    assert kubelet.preferred(MEM, avail, must=[dev(0, "mem", 7)], size=2) == [dev(0, "mem", 7),
                                                                          dev(0, "mem", 0)]


def test_preferred_allocation_heeds_vgpuds_own_slices(node):
    start, kubelet, _ = node
    v = start()
    with v.api() as c:                       # a slice made outside Kubernetes: 14 GiB on GPU 1
        c.request("create", container="batch", memory="14Gi", gpus=[1])
    # the kubelet offers more of GPU 1, which spread would pick, but vgpud has
    # only 2 GiB of it left: GPU 0 is preferred
    avail = ids(0, "mem", range(10)) + ids(1, "mem", range(16))
    time.sleep(0.5)                          # the plugin's next poll sees the slice
    assert kubelet.preferred(MEM, avail, size=4) == ids(0, "mem", range(4))


def test_capacity_taken_outside_kubernetes_is_withdrawn(node):
    """Slices the kubelet did not allocate (vgpuctl create, a pod's
    annotations) hold capacity the kubelet would hand out again: as many of
    that GPU's devices as they hold (rounded up) are advertised Unhealthy;
    a slice made from the plugin's own Allocate (the hook's
    vgpu.io/allocated-by label) withdraws nothing: the kubelet counts it."""
    start, kubelet, _ = node
    v = start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)

    def unhealthy(res):
        return sorted((i for i, h in kubelet.devices[res] if h != "Healthy"),
                      key=lambda i: int(i.rsplit("-", 1)[1]))
    with v.api() as c:
        c.request("create", container="batch", memory="2560Mi", compute="30%",
                  policy="fixed", gpus=[1])
        c.request("create", container="k8s-pod", memory="4Gi", compute="20%", policy="fixed",
                  gpus=[0], labels={"vgpu.io/allocated-by": "device-plugin"})
    kubelet.wait_devices(MEM, lambda d: unhealthy(MEM) == ids(1, "mem", range(13, 16)))
    kubelet.wait_devices(PCT, lambda d: unhealthy(PCT) == ids(1, "pct", range(70, 100)))
    with v.api() as c:
        c.request("delete", container="batch")
    kubelet.wait_devices(MEM, lambda d: not unhealthy(MEM))
    kubelet.wait_devices(PCT, lambda d: not unhealthy(PCT))


def test_withdrawn_devices_by_kind_and_factor():
    g0 = devices.Gpu(0, 16 * GiB, uuid=UU[0], memory_outside=3 * GiB + 1, compute_outside=12.5)
    g1 = devices.Gpu(1, 16 * GiB, uuid=UU[1])
    node = devices.Node(gpus=(g0, g1), up=True, known=True)
    assert [node.withdrawn(k, g, 2.0) for k in ("mem", "pct") for g in (g0, g1)] == [4, 0, 13, 0]
    over = devices.Node(gpus=(g0, g1), oversubscribe=True, up=True, known=True)
    assert over.withdrawn("mem", g0, 2.0) == 7              # (3 GiB + 1 byte) x 2, rounded up
    big = devices.Gpu(0, 16 * GiB, uuid=UU[0], memory_outside=40 * GiB, compute_outside=250)
    assert node.withdrawn("mem", big, 1.0) == 16 and node.withdrawn("pct", big, 1.0) == 100
    health = [h for _, h, _ in devices.devices(node, "mem", 1.0)]
    assert health == ["Healthy"] * 12 + ["Unhealthy"] * 4 + ["Healthy"] * 16
    down = devices.Node(gpus=(g0, g1), up=False, known=True)
    assert {h for _, h, _ in devices.devices(down, "pct", 1.0)} == {"Unhealthy"}


def test_a_fault_in_vgpuds_gpus_makes_the_gpus_devices_unhealthy():
    """vgpud's ``fault`` (vgpu.daemon.health): any fault, even one the plugin
    cannot read, takes every device of that GPU out."""
    gpus = {"gpus": [{"index": 0, "uuid": UU[0], "memory_total": 2 * GiB, "fault": None},
                     {"index": 1, "uuid": UU[1], "memory_total": 2 * GiB,
                      "fault": {"xid": 79, "at": 1.0}},
                     {"index": 2, "uuid": UU[2], "memory_total": 2 * GiB, "fault": "junk"}]}
    node = devices.node_from_api({}, gpus)
    assert [g.xid for g in node.gpus] == [None, 79, -1]
    assert [h for _, h, _ in devices.devices(node, "mem", 1.0)] == \
        ["Healthy"] * 2 + ["Unhealthy"] * 4


def test_ten_gib_over_two_gpus_with_eight_free_each_is_refused(node):
    start, kubelet, _ = node
    start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    avail = ids(0, "mem", range(8, 16)) + ids(1, "mem", range(8, 16))
    e = rpc_error(kubelet.preferred, MEM, avail, (), 10)
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.details() == (
        "vgpu.io/memory-gib: preferred allocation of 10 GiB: a container's memory must come "
        "from one GPU and no single GPU has that many available (GPU 0: 16 GiB, 0 GiB "
        "allocated to slices, 8 GiB available to pods; GPU 1: 16 GiB, 0 GiB allocated to "
        "slices, 8 GiB available to pods)")
    # the kubelet's own pick across both GPUs fails at Allocate, at admission
    e = rpc_error(kubelet.allocate, MEM, ids(0, "mem", range(8, 16)) + ids(1, "mem", [8, 9]))
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.details() == (
        "vgpu.io/memory-gib: container request 0: 10 GiB spans GPUs (8 GiB of GPU 0, 2 GiB of "
        "GPU 1); a container's memory must come from one GPU and no single GPU had 10 GiB of "
        "devices free (GPU 0: 16 GiB, 0 GiB allocated to slices; GPU 1: 16 GiB, 0 GiB "
        "allocated to slices)")


def test_allocate_annotations(node, tmp_path):
    start, kubelet, _ = node
    start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    r = kubelet.allocate(MEM, ids(1, "mem", range(4)), ids(0, "mem", [9]))
    assert [dict(c.annotations) for c in r.container_responses] == [
        {"vgpu.io/container-memory": "4Gi", "vgpu.io/container-gpus": UU[1]},
        {"vgpu.io/container-memory": "1Gi", "vgpu.io/container-gpus": UU[0]}]
    guard = [(RUNTIME_GUARD_DEST, str(tmp_path / "run-vgpu" / "guard"), True)]
    for c in r.container_responses:
        assert [(m.container_path, m.host_path, m.read_only) for m in c.mounts] == guard
    r = kubelet.allocate(PCT, ids(0, "pct", range(20)) + ids(1, "pct", range(10)))
    assert dict(r.container_responses[0].annotations) == {"vgpu.io/container-compute": "30%"}
    for c in r.container_responses:
        assert not c.envs and not c.devices and not c.cdi_devices
        assert [(m.container_path, m.host_path, m.read_only) for m in c.mounts] == guard
    # what a user who finds it reads
    assert "runtimeClassName: vgpu" in (tmp_path / "run-vgpu" / "guard").read_text()


def test_no_guard_no_mount(node, tmp_path):
    """--no-guard (vgpud's [kubernetes] runtime_guard = false): for nodes
    whose containers get their slice without vgpu-runtime (hooks.d, CDI),
    where runc would refuse the guard: no mount, no file."""
    start, kubelet, _ = node
    start("--no-guard")
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    r = kubelet.allocate(MEM, ids(0, "mem", range(2)))
    assert dict(r.container_responses[0].annotations)["vgpu.io/container-memory"] == "2Gi"
    assert not r.container_responses[0].mounts
    assert not (tmp_path / "run-vgpu" / "guard").exists()


def test_guard_file_that_cannot_be_written_is_a_warning(node, tmp_path):
    """Where the guard's source cannot be written the plugin still serves
    (containerd makes a missing source a directory; runc refuses the mount
    all the same), and says so."""
    start, kubelet, state = node
    blocker = tmp_path / "file"
    blocker.write_text("")
    start("--guard-file", str(blocker / "guard"))
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    out = stop_plugin(state["plugin"])
    state["plugin"] = None
    assert f"cannot write {blocker}/guard" in out and "runtimeClassName: vgpu" in out, out


def test_allocate_annotations_carry_the_profile(node):
    start, kubelet, _ = node
    start("--profile", "small")
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    r = kubelet.allocate(MEM, ids(0, "mem", range(2)))
    assert dict(r.container_responses[0].annotations) == {
        "vgpu.io/container-memory": "2Gi", "vgpu.io/container-gpus": UU[0],
        "vgpu.io/container-profile": "small"}
    r = kubelet.allocate(PCT, ids(0, "pct", range(5)))
    assert dict(r.container_responses[0].annotations) == {
        "vgpu.io/container-compute": "5%", "vgpu.io/container-profile": "small"}


def test_bad_kubelet_requests_get_clear_errors(node):
    start, kubelet, _ = node
    start()
    kubelet.wait_devices(MEM, lambda d: len(d) == 32)
    inv = grpc.StatusCode.INVALID_ARGUMENT
    cases = [
        (kubelet.allocate, (MEM, [dev(0, "pct", 1)]), inv,
         f'vgpu.io/memory-gib: container request 0: "{dev(0, "pct", 1)}" is not a device ID of '
         f'this resource (<GPU UUID>-mem-<n>)'),
        (kubelet.allocate, (MEM, ["nonsense"]), inv, '"nonsense" is not a device ID'),
        (kubelet.allocate, (MEM, [dev(3, "mem", 0)]), inv,
         f'"{dev(3, "mem", 0)}" names GPU {UU[3]}, which vgpud does not slice (GPUs: '
         f'{UU[0]} (GPU 0), {UU[1]} (GPU 1))'),
        # an index where the UUID goes (the IDs of an older plugin)
        (kubelet.allocate, (MEM, ["gpu0-mem-0"]), inv,
         '"gpu0-mem-0" names GPU gpu0, which vgpud does not slice'),
        (kubelet.allocate, (MEM, [dev(0, "mem", 16)]), inv,
         f'"{dev(0, "mem", 16)}" is past GPU 0\'s 16 devices'),
        (kubelet.allocate, (MEM, [dev(0, "mem", 1), dev(0, "mem", 1)]), inv,
         f'"{dev(0, "mem", 1)}" is named twice'),
        (kubelet.allocate, (MEM, []), inv, "vgpu.io/memory-gib: container request 0 names no device"),
        (kubelet.allocate, (MEM,), inv, "vgpu.io/memory-gib: Allocate names no container"),
        (kubelet.allocate, (PCT, ids(0, "pct", range(100)) + ids(1, "pct", range(50))),
         grpc.StatusCode.FAILED_PRECONDITION,
         "vgpu.io/compute-percent: container request 0: compute 150% is more than one GPU's 100%"),
        (kubelet.preferred, (MEM, ids(0, "mem", range(4)), (), 0), inv,
         "preferred allocation of 0: the allocation size must be at least 1"),
        (kubelet.preferred, (MEM, ids(0, "mem", range(4)), (), -3), inv,
         "the allocation size must be at least 1"),
        (kubelet.preferred, (MEM, ids(0, "mem", range(4)), (), 2**31 - 1),
         grpc.StatusCode.RESOURCE_EXHAUSTED, "no single GPU has that many available"),
        (kubelet.preferred, (MEM, ids(0, "mem", range(4)), ids(0, "mem", range(3)), 2), inv,
         "3 devices must be included, more than the 2 asked for"),
        (kubelet.preferred, (MEM, ids(0, "mem", range(4)), [dev(0, "mem", 0), dev(1, "mem", 0)], 3),
         grpc.StatusCode.RESOURCE_EXHAUSTED, "the devices it must include are on GPUs 0, 1"),
        (kubelet.preferred, (PCT, ids(0, "pct", range(100)) + ids(1, "pct", range(100)), (), 101),
         inv, "compute 101% is more than one GPU's 100%"),
        (kubelet.preferred, (MEM, ids(0, "mem", range(70000)), (), 1), inv,
         "70000 device IDs is more than 65536"),
        (kubelet.preferred, (MEM, [UU[0] + "-mem-" + "9" * 40], (), 1), inv,
         "is not a device ID of this resource"),
    ]
    for fn, args, code, text in cases:
        e = rpc_error(fn, *args)
        assert e.code() == code, (args[:2], e.details())
        assert text in e.details(), (text, e.details())
    # and it still serves
    assert kubelet.preferred(MEM, ids(0, "mem", range(4)), (), 2) == ids(0, "mem", range(2))


# ------------------------------------------------------------------ pure parts
def test_preferred_pure_cases():
    g0, g1 = devices.Gpu(0, 16 * GiB, uuid=UU[0]), devices.Gpu(1, 16 * GiB, uuid=UU[1])
    n = devices.Node(gpus=(g0, g1), up=True, known=True)
    avail = ids(0, "mem", range(16)) + ids(1, "mem", range(16))
    # a tie of counts goes to the lower index, spread and binpack alike
    assert devices.preferred("mem", avail, (), 3, n, 2.0) == ids(0, "mem", range(3))
    nb = devices.Node(n.gpus, placement="binpack", up=True, known=True)
    assert devices.preferred("mem", avail, (), 3, nb, 2.0) == ids(0, "mem", range(3))
    # vgpud's allocations: GPU 0 has 12 of 16 GiB given to slices outside the kubelet
    full0 = devices.Node((devices.Gpu(0, 16 * GiB, 12 * GiB, UU[0]), g1), up=True, known=True)
    assert devices.preferred("mem", avail, (), 6, full0, 2.0) == ids(1, "mem", range(6))
    # while oversubscribed, devices are the GiB times the factor
    over = devices.Node(n.gpus, oversubscribe=True, up=True, known=True)
    assert len(devices.devices(over, "mem", 2.0)) == 64 and len(devices.devices(over, "mem", 1.0)) == 32
    assert len(devices.devices(over, "pct", 2.0)) == 200
    # a GPU of 79.6 GiB advertises 79
    odd = devices.Node((devices.Gpu(0, int(79.6 * GiB), uuid=UU[0]),), up=True, known=True)
    assert len(devices.devices(odd, "mem", 2.0)) == 79
    down = devices.Node(n.gpus, up=False, known=True)
    assert {h for _, h, _ in devices.devices(down, "mem", 2.0)} == {"Unhealthy"}


def test_allocate_before_vgpud_answered_is_refused():
    with pytest.raises(devices.Refused, match="vgpud has not answered yet"):
        devices.allocate("mem", [dev(0, "mem", 0)], devices.Node(), 2.0, None)
    with pytest.raises(devices.Refused, match="vgpud has not answered yet"):
        devices.preferred("mem", [dev(0, "mem", 0)], (), 1, devices.Node(), 2.0)


def test_node_from_api_leaves_out_unsliced_gpus_and_refuses_junk():
    numa = {"00000000:02:00.0": 1}
    n = devices.node_from_api({"node": {"placement": "binpack", "oversubscribe_memory": True}},
                              {"gpus": [{"index": 0, "memory_total": GiB, "sliced": False,
                                         "uuid": UU[0]},
                                        {"index": 1, "memory_total": 2 * GiB, "uuid": UU[1],
                                         "memory_allocated": 5,
                                         "pci_bus_id": "00000000:02:00.0"}]}, numa.get)
    assert n.gpus == (devices.Gpu(1, 2 * GiB, 5, UU[1], 1),) and n.placement == "binpack" \
        and n.oversubscribe
    for junk in ({"index": "0"}, {"index": 0, "memory_total": 1},
                 {"index": 0, "memory_total": 1, "uuid": "GPU 1"}):
        with pytest.raises(ValueError, match="without index, memory_total or a UUID"):
            devices.node_from_api({}, {"gpus": [junk]})


def test_numa_node_from_sysfs(tmp_path):
    """NVML's "00000000:3B:00.0" is sysfs's 0000:3b:00.0; -1 (no NUMA), an
    absent device (nvsim's) and anything that is no PCI address are None."""
    for bdf, node in (("0000:3b:00.0", "1\n"), ("0000:5e:00.0", "-1\n"), ("0000:af:00.0", "x")):
        d = tmp_path / "bus" / "pci" / "devices" / bdf
        d.mkdir(parents=True)
        (d / "numa_node").write_text(node)
    assert watch.numa_node("00000000:3B:00.0", str(tmp_path)) == 1
    assert watch.numa_node("0000:3b:00.0", str(tmp_path)) == 1
    for none in ("00000000:5E:00.0", "00000000:AF:00.0", "00000000:01:00.0",
                 "0000:../../../x:00.0", "", "GPU-1"):
        assert watch.numa_node(none, str(tmp_path)) is None, none


def test_devices_carry_their_gpus_numa_node():
    """The kubelet's Topology Manager aligns CPUs with a device's NUMA node:
    each Device message names its GPU's, where known, and none otherwise."""
    api = server.Api()
    node = devices.Node((devices.Gpu(0, 2 * GiB, uuid=UU[0], numa=1),
                         devices.Gpu(1, 2 * GiB, uuid=UU[1])), up=True, known=True)
    msgs = server.device_messages(api, devices.devices(node, "mem", 2.0))
    assert [(m.ID, [n.ID for n in m.topology.nodes], m.HasField("topology")) for m in msgs] == [
        (dev(0, "mem", 0), [1], True), (dev(0, "mem", 1), [1], True),
        (dev(1, "mem", 0), [], False), (dev(1, "mem", 1), [], False)]


# ------------------------------------------------------------------ the command line
def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "vgpu.k8s.deviceplugin", *args],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


def test_cli_help_version_and_bad_values(tmp_path):
    r = run_cli("--help")
    assert r.returncode == 0 and "usage: vgpu-device-plugin" in r.stdout
    assert "vgpu.io/memory-gib" in r.stdout and "exit status" in r.stdout
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout == f"vgpu-device-plugin {__version__}\n"
    for args, text in [
        (["--poll-interval", "soon"], '--poll-interval: "soon" is not a duration'),
        (["--timeout", "0.01"], '--timeout: "0.01" is out of range'),
        (["--profile", "bad name"], '--profile: "bad name" is not a profile name'),
        (["--oversubscribe-factor", "x"], '--oversubscribe-factor: "x" is not a number'),
        (["--oversubscribe-factor", "0.5"], '--oversubscribe-factor: "0.5" is out of range'),
        (["--kubelet-dir", "rel/dir"], '--kubelet-dir: "rel/dir" is not an absolute path'),
        (["--guard-file", "guard"], '--guard-file: "guard" is not an absolute path'),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ]:
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert text in r.stderr, (args, r.stderr)
    r = run_cli("--kubelet-dir", str(tmp_path / "absent"))
    assert r.returncode == 1 and f'"{tmp_path}/absent" is not a directory' in r.stderr


def test_cli_list(tmp_path):
    r = run_cli("--list", "--socket", str(tmp_path / "none.sock"))
    assert r.returncode == 3, r.stderr
    v = ThreadVgpud(tmp_path).start()
    try:
        r = run_cli("--list", "--socket", v.sock)
    finally:
        v.stop()
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("vgpu.io/memory-gib: 32 (GPU 0: 16, GPU 1: 16)\n"
                        "vgpu.io/compute-percent: 200 (GPU 0: 100, GPU 1: 100)\n")


# ------------------------------------------------------------------ vgpud's supervision
async def test_supervise_restarts_the_child_and_stops_it_when_cancelled(tmp_path):
    pids = tmp_path / "pids"
    script = f"import os, time; open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(0.3)"
    argv = [sys.executable, "-c", script]
    want = {"argv": argv}
    async with trio.open_nursery() as n:
        await n.start(lambda task_status: supervise(lambda: want["argv"], check=0.05,
                                                    restart_min=0.1, restart_max=0.2,
                                                    task_status=task_status))
        with trio.fail_after(20):
            while not pids.exists() or len(pids.read_text().split()) < 3:
                await trio.sleep(0.05)            # it exits after 0.3 s: restarted each time
        # a long-lived child, then a config change (a reload) restarts it at once
        long = [sys.executable, "-c", script.replace("0.3", "60")]
        want["argv"] = long
        with trio.fail_after(20):
            while "60" not in cmdline(last_pid(pids)):
                await trio.sleep(0.05)
        child = last_pid(pids)
        want["argv"] = None                       # device_plugin = false: stopped
        with trio.fail_after(20):
            while alive(child):
                await trio.sleep(0.05)
        want["argv"] = long
        with trio.fail_after(20):
            while last_pid(pids) == child:
                await trio.sleep(0.05)
        child = last_pid(pids)
        assert alive(child)
        n.cancel_scope.cancel()                   # vgpud stops
    assert not alive(child)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def last_pid(path: Path) -> int:
    return int(path.read_text().split()[-1])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def test_plugin_argv():
    assert plugin_argv("/run/vgpu/vgpud.sock", "/var/lib/kubelet/device-plugins", "small", 1.5) == [
        sys.executable, "-m", "vgpu.k8s.deviceplugin", "--socket", "/run/vgpu/vgpud.sock",
        "--kubelet-dir", "/var/lib/kubelet/device-plugins", "--profile", "small",
        "--oversubscribe-factor", "1.5"]
    assert plugin_argv("/s", "/k", guard=False)[-1] == "--no-guard"


def children(pid: int) -> list[int]:
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def test_real_vgpud_runs_restarts_and_stops_the_plugin(tmp_path):
    kdir = tmp_path / "kubelet"
    kdir.mkdir()
    kubelet = KubeletSim(kdir).start()
    cfg = vgpud_config(tmp_path, kubernetes={"device_plugin": True, "kubelet_dir": str(kdir)})
    try:
        with running(tmp_path, cfg) as d:
            kubelet.wait(lambda: {r.resource_name for r in kubelet.registrations} == {MEM, PCT},
                         timeout=60, what="registrations by vgpud's plugin")
            (child,) = children(d.proc.pid)
            # the host has no GPU: registered, with no device
            assert kubelet.wait(lambda: MEM in kubelet.devices, what="a device list") is True
            os.kill(child, signal.SIGKILL)
            kubelet.wait(lambda: len(kubelet.registrations) == 4, timeout=60,
                         what="registrations by the restarted plugin")
            (child2,) = children(d.proc.pid)
            assert child2 != child
        assert not alive(child2)                  # stopped with vgpud
        log = d.log()
        assert "device plugin started" in log and f"device plugin (pid {child}) exited" in log
    finally:
        kubelet.stop()


def test_vgpud_absent_at_start(tmp_path):
    kdir = tmp_path / "kubelet"
    kdir.mkdir()
    kubelet = KubeletSim(kdir).start()
    v = ThreadVgpud(tmp_path)
    p = start_plugin(tmp_path, v.sock)
    try:
        kubelet.wait(lambda: len(kubelet.registrations) == 2, what="registrations")
        assert kubelet.wait(lambda: MEM in kubelet.devices, what="a list") and \
            kubelet.devices[MEM] == []
        e = rpc_error(kubelet.allocate, MEM, [dev(0, "mem", 0)])
        assert e.code() == grpc.StatusCode.UNAVAILABLE and "vgpud has not answered yet" in e.details()
        v.start()
        kubelet.wait_devices(MEM, lambda d: len(d) == 32 and {h for _, h in d} == {"Healthy"})
    finally:
        kubelet.stop()
        out = stop_plugin(p)
        if v.thread is not None:
            v.stop()
    assert "does not answer" in out
