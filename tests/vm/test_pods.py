"""A Kubernetes pod's slice in the VM: real runc, vgpud, vgpufs, vgpu.ko and
nvsim (one slice per pod, shared by its containers).  No kubelet: the CRI
annotations containerd would set are written by hand, and each container's
cgroup is put under one pod<uid> directory as the kubelet's cgroupfs driver does.

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_pods.py

The sandbox (pause) container gets no slice; two containers of the pod
share one slice, ``pod-<sandbox id>``, bound to the pod's cgroup (both
open its nodes); the sandbox's poststop deletes it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from container_support import PY, START_TIMEOUT, Daemon, Runc, poll
from container_support import pytestmark  # noqa: F401
from tools.testbed.vgpud_launcher import Vgpud, config

SB = "1a2b3c4d5e6f70819203a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
UID = "2f0e4b1c-8d3a-4e5f-9a6b-7c8d9e0f1a2b"
POD = "pod-" + SB
TOP = "vgpu-pods-test"


class PodDaemon(Daemon):
    """test_containers' vgpud with a GC interval of our choosing: an hour
    where the test is about the hooks (no GC pass may race the poststop
    the test checks), 1 s where it is about the GC."""

    def __init__(self, tmp: Path, gc: str, **sections):
        Vgpud.__init__(self, tmp, config(tmp, paths={"fuse_mount": "{tmp}/fs"},
                                         gc={"interval": gc}, defaults={"compute": "10%"},
                                         **sections),
                       command=[PY, "-m", "vgpu.daemon.main"], wait_fuse=True,
                       start_timeout=START_TIMEOUT)
        self.start()


def vgpud(tmp: Path, gc: str, **sections):
    d = PodDaemon(tmp, gc, **sections)
    try:
        yield d
    finally:
        try:
            for c in list(d.slices()):
                d.ctl_raw("delete", c, "--force")
        finally:
            d.stop()


@pytest.fixture
def daemon(tmp_path_factory):
    yield from vgpud(tmp_path_factory.mktemp("vgpud"), "1h")


@pytest.fixture
def gc_daemon(tmp_path_factory):
    yield from vgpud(tmp_path_factory.mktemp("vgpud-gc"), "1s")


@pytest.fixture
def allocated_daemon(tmp_path_factory):
    """A node whose slices come only from the device plugin's allocation
    ([kubernetes] pod_requests = "allocated"; the plugin itself is not run:
    the allocation's annotations are written by hand)."""
    yield from vgpud(tmp_path_factory.mktemp("vgpud-alloc"), "1h",
                     profiles={"batch": {"priority": "low"}, "wide": {"compute": "50%"}},
                     kubernetes={"pod_requests": "allocated",
                                 "namespace_profiles": {"team": ["batch", "wide"]}})


@pytest.fixture
def runc(request, tmp_path):
    fixture = next((f for f in ("gc_daemon", "allocated_daemon")
                    if f in request.fixturenames), "daemon")
    daemon = request.getfixturevalue(fixture)
    r = Runc(tmp_path, daemon)
    yield r
    r.cleanup()
    for c in list(daemon.slices()):
        daemon.ctl_raw("delete", c, "--force")
    base = Path("/sys/fs/cgroup") / TOP
    if base.is_dir():
        for d in sorted((p for p, _, _ in os.walk(base)), key=len, reverse=True):
            try:
                os.rmdir(d)
            except OSError:
                pass


POD_REQUEST = {"vgpu.io/memory": "64MiB", "vgpu.io/gpus": "0"}


def pod_bundle(runc: Runc, tag: str, kind: str, script: str,
               request: dict | None = None) -> Path:
    ann = {"io.kubernetes.cri.container-type": kind, "io.kubernetes.cri.sandbox-id": SB,
           "io.kubernetes.cri.sandbox-name": "web", "io.kubernetes.cri.sandbox-namespace": "team",
           "io.kubernetes.cri.sandbox-uid": UID,
           **(POD_REQUEST if request is None else request)}
    if kind == "container":
        ann["io.kubernetes.cri.container-name"] = tag
    b = runc.bundle(tag, script, ann)
    config = json.loads((b / "config.json").read_text())
    config["linux"]["cgroupsPath"] = f"/{TOP}/pod{UID}/{tag}"
    (b / "config.json").write_text(json.dumps(config))
    return b


# holds the pod slice's control node open (vgpu.ko counts it) until told to stop
HOLD = "exec 3<>/dev/nvidiactl && touch /shared/{t}.open && while [ ! -e /shared/{t}.stop ]; " \
       "do sleep 0.2; done"


def test_pod_containers_share_one_slice_the_sandbox_gets_none_and_ends_it(runc, daemon):
    sbx = pod_bundle(runc, "sandbox", "sandbox", "exec sleep 3600")
    runc.run_detached(SB, sbx)
    assert list(json.loads((sbx / "config.json").read_text())["hooks"]) == ["poststop"]
    assert daemon.slices() == {}                         # the pause container: no slice

    # the first container makes the pod's slice and holds its node open
    app = pod_bundle(runc, "app", "container", HOLD.format(t="app"))
    runc.run_detached("ctr-app", app)
    assert poll(lambda: (runc.shared / "app.open").exists(), 120), daemon.log()
    sl = daemon.slices()
    assert list(sl) == [POD], sl
    assert sl[POD]["cgroup"].rstrip("/").endswith(f"/{TOP}/pod{UID}"), sl[POD]
    assert sl[POD]["labels"] == {"io.kubernetes.pod.name": "web",
                                 "io.kubernetes.pod.namespace": "team"}

    # a second container (a sidecar) gets the same slice, opens its nodes
    side = pod_bundle(runc, "side", "container",
                      "exec 3<>/dev/nvidiactl && echo OPENED $(ls /dev | grep nvidia)")
    r = runc.run("ctr-side", side)
    assert r.returncode == 0 and "OPENED" in r.stdout, f"{r.stdout}\n{r.stderr}\n{daemon.log()}"
    assert "nvidia0" in r.stdout and "nvidia-uvm" in r.stdout, r.stdout
    assert list(daemon.slices()) == [POD]                 # still one slice, still there

    # the sandbox goes: its poststop deletes the pod's slice (force: the app
    # still holds a node open; the kubelet would have stopped it first)
    assert runc.runc("kill", SB, "KILL").returncode == 0
    assert poll(lambda: runc.state(SB).get("status") == "stopped", 120)
    d = runc.runtime("delete", SB, capture_output=True, text=True)
    assert d.returncode == 0, d.stderr
    assert daemon.slices() == {}, daemon.log()
    assert "collected" not in daemon.log(), daemon.log()
    (runc.shared / "app.stop").write_text("")
    assert poll(lambda: runc.state("ctr-app").get("status") == "stopped", 120)
    d = runc.runtime("delete", "ctr-app", capture_output=True, text=True)
    assert d.returncode == 0, d.stderr


def test_pod_slice_outlives_a_gc_pass_while_its_pod_runs(gc_daemon, runc):
    """vgpud's GC (1 s here) must not collect a live pod's slice when no
    file of it is open: the pod's cgroup holds no process of its own, its
    containers live in its child cgroups."""
    daemon = gc_daemon
    sbx = pod_bundle(runc, "sandbox", "sandbox", "exec sleep 3600")
    runc.run_detached(SB, sbx)
    app = pod_bundle(runc, "app", "container",
                     "touch /shared/app.up && while [ ! -e /shared/app.stop ]; do sleep 0.2; done")
    runc.run_detached("ctr-app", app)
    assert poll(lambda: (runc.shared / "app.up").exists(), 120), daemon.log()
    assert poll(lambda: POD not in daemon.slices(), 5) is False, \
        f"the live pod's slice was collected:\n{daemon.log()}"
    # every process of the pod gone, the sandbox's poststop not run (runc
    # delete runs it; the kill does not): the pod's cgroup is unpopulated,
    # so the GC collects the slice
    for c in ("ctr-app", SB):
        assert runc.runc("kill", c, "KILL").returncode == 0
        assert poll(lambda c=c: runc.state(c).get("status") == "stopped", 120)
    assert poll(lambda: POD not in daemon.slices(), 30), daemon.log()
    assert "collected" in daemon.log(), daemon.log()
    for c in ("ctr-app", SB):
        d = runc.runtime("delete", c, capture_output=True, text=True)
        assert d.returncode == 0, d.stderr


def test_on_an_allocated_node_only_the_kubelets_allocation_makes_a_slice(allocated_daemon, runc):
    """[kubernetes] pod_requests = "allocated": a pod's own vgpu.io/memory
    fails the container's start with vgpud's reason and leaves no slice; a
    container with the device plugin's allocation starts with exactly the
    allocated memory, the profile its pod named (allowed for "team") giving
    its priority, and a profile that would add compute the kubelet did not
    allocate fails it."""
    daemon = allocated_daemon
    own = pod_bundle(runc, "own", "container", "true")
    r = runc.run("ctr-own", own)
    assert r.returncode != 0, r.stdout
    assert "come only from what the kubelet allocated" in r.stderr, r.stderr
    assert daemon.slices() == {}

    alloc = {"vgpu.io/container-memory": "64Mi", "vgpu.io/container-gpus": "0",
             "vgpu.io/memory": "1Gi", "vgpu.io/profile": "batch"}
    app = pod_bundle(runc, "app", "container",
                     "exec 3<>/dev/nvidiactl && touch /shared/app.open && "
                     "while [ ! -e /shared/app.stop ]; do sleep 0.2; done", alloc)
    runc.run_detached("ctr-app", app)
    assert poll(lambda: (runc.shared / "app.open").exists(), 120), daemon.log()
    sl = daemon.slices()["ctr-app"]
    assert sl["gpus"][0]["memory_limit"] == 64 << 20, sl          # the allocation, not 1Gi
    assert (sl["profile"], sl["compute"]["priority"]) == ("batch", "low"), sl
    assert sl["labels"]["vgpu.io/allocated-by"] == "device-plugin", sl
    (runc.shared / "app.stop").touch()

    wide = pod_bundle(runc, "wide", "container", "true",
                      {**alloc, "vgpu.io/profile": "wide"})
    r = runc.run("ctr-wide", wide)
    # (runc's log quotes the hook's message: its quotes come escaped)
    assert r.returncode != 0 and "wide\\\" sets compute 50%, but the kubelet allocated " \
        "this container no vgpu.io/compute-percent" in r.stderr, r.stderr
    assert "ctr-wide" not in daemon.slices()
