"""Dynamic Resource Allocation in the VM: vgpu's DRA plugin (vgpu.k8s.draplugin)
prepares claims into real slices (vgpud, vgpufs, vgpu.ko, nvsim), driven by
a test kubelet over its real sockets, with a test API server holding the
claims and receiving the ResourceSlice (tools/testbed/dra_fakes.py: no
cluster runs here).

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        .venv/bin/python -m pytest -q tests/vm/test_dra.py
"""
from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from container_support import PY, ROOT, RUNC, poll, remove_cgroups
from container_support import daemon, runc  # noqa: F401  (the fixtures)
from container_support import pytestmark  # noqa: F401
from tools.testbed.dra_fakes import NODE, ApiServer, Kubelet
from vgpu.k8s import dra, draplugin

MiB, GiB = 1 << 20, 1 << 30
UID = "3f2a9c1e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"


@pytest.fixture
def plugin(daemon, tmp_path):  # noqa: F811
    api = ApiServer()
    prep = draplugin.Preparer(NODE, draplugin.ApiServerClaims(api.url), daemon.sock,
                              tmp_path / "cdi", daemon.fs)
    services = draplugin.DraServices(prep)
    dra_srv, reg_srv = draplugin.serve(services, tmp_path / "plugins", tmp_path / "registry")
    kubelet = Kubelet(services, tmp_path / "plugins" / "dra.sock",
                      tmp_path / "registry" / f"{dra.DRIVER}-reg.sock")
    yield api, kubelet, tmp_path
    reg_srv.stop(0)
    dra_srv.stop(0)
    api.httpd.shutdown()
    for c in list(daemon.slices()):
        daemon.ctl_raw("delete", c, "--force")


def claim(uid, results):
    return {"metadata": {"namespace": "team", "name": f"c-{uid[:8]}", "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}}}


def result(gpu: int, memory: int, compute: int = 0, request: str = "gpu") -> dict:
    return {"request": request, "driver": dra.DRIVER, "pool": NODE, "device": f"gpu-{gpu}",
            "consumedCapacity": {"memory": str(memory), "compute": str(compute)}}


def test_a_claim_becomes_a_slice_in_vgpu_ko_and_goes_again(plugin, daemon):  # noqa: F811
    api, kubelet, tmp = plugin
    api.claims[("team", f"c-{UID[:8]}")] = claim(UID, [result(1, 256 * MiB, 30)])
    r = kubelet.call("v1", "NodePrepareResources", ("team", f"c-{UID[:8]}", UID))
    assert r.claims[UID].error == "", r.claims[UID].error
    name = f"claim-{UID}-0"
    assert list(r.claims[UID].devices[0].cdi_device_ids) == [f"vgpu.io/slice={name}"]
    sl = daemon.ctl("show", name)["slice"]
    assert sl["in_kernel"], sl                               # vgpu.ko has it
    (g,) = sl["gpus"]
    assert (g["gpu"], g["memory_limit"]) == (1, 256 * MiB)
    assert (sl["compute"]["percent"], sl["compute"]["policy"]) == (30.0, "burst")
    # the CDI spec names the slice's own nodes in vgpufs, which exist
    spec = json.loads((tmp / "cdi" / f"vgpu-{name}.json").read_text())
    for node in spec["devices"][0]["containerEdits"]["deviceNodes"]:
        assert os.path.exists(node["hostPath"]), node
        assert node["hostPath"].startswith(f"{daemon.fs}/{name}/dev/")
    # a retry: the same slice
    r = kubelet.call("v1beta1", "NodePrepareResources", ("team", f"c-{UID[:8]}", UID))
    assert r.claims[UID].error == "" and list(daemon.slices()) == [name]
    r = kubelet.call("v1", "NodeUnprepareResources", ("team", f"c-{UID[:8]}", UID))
    assert r.claims[UID].error == ""
    assert daemon.slices() == {}
    assert daemon.ctl_raw("show", name).returncode != 0
    assert list((tmp / "cdi").iterdir()) == []


def test_the_published_slice_is_nvsims_gpus(plugin, daemon):  # noqa: F811
    api, kubelet, tmp = plugin
    pub = draplugin.SlicePublisher(draplugin.ApiServer(api.url), NODE, daemon.sock)
    assert pub.publish_once() == "created"
    (obj,) = api.slices.values()
    kubernetes_validate.validate(obj, "1.37", strict=True)
    gpus = daemon.ctl("gpus")["gpus"]
    devs = obj["spec"]["devices"]
    assert [d["attributes"]["uuid"]["string"] for d in devs] == [g["uuid"] for g in gpus]
    assert [int(d["capacity"]["memory"]["value"]) for d in devs] == \
        [g["memory_total"] for g in gpus]


def test_claims_the_scheduler_would_place_are_all_prepared(plugin, daemon):  # noqa: F811
    """Random claims placed by the scheduler's consumable-capacity rules on
    the node's own published devices (tests/host/test_dra.py's arithmetic,
    here against vgpu.ko's admission through the real plugin): every one it
    places is prepared."""
    api, kubelet, tmp = plugin
    pub = draplugin.SlicePublisher(draplugin.ApiServer(api.url), NODE, daemon.sock)
    pub.publish_once()
    (obj,) = api.slices.values()
    devs = obj["spec"]["devices"]
    used = [{"memory": 0, "compute": 0} for _ in devs]
    rnd = random.Random(35)
    prepared = 0
    for i in range(24):
        mem = rnd.randrange(1, 3 * GiB // MiB) * MiB
        comp = rnd.choice([0, 0, 10, 25, 40])
        fit = [j for j, d in enumerate(devs)
               if used[j]["memory"] + mem <= int(d["capacity"]["memory"]["value"])
               and used[j]["compute"] + comp <= 100]
        if not fit:
            continue
        j = rnd.choice(fit)
        used[j]["memory"] += mem
        used[j]["compute"] += comp
        uid = f"{i:08x}-0000-4000-8000-000000000000"
        api.claims[("team", f"c-{uid[:8]}")] = claim(uid, [result(j, mem, comp)])
        r = kubelet.call("v1", "NodePrepareResources", ("team", f"c-{uid[:8]}", uid))
        assert r.claims[uid].error == "", (i, mem, comp, used[j], r.claims[uid].error)
        prepared += 1
    assert prepared >= 8
    assert len(daemon.slices()) == prepared


TOP = "vgpu-dra-test"
SB = "9a8b7c6d5e4f30211203f4e5d6c7b8a90a1b2c3d4e5f60718293a4b5c6d7e8f9"
POD_UID = "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1a"


def cdi_bundle(runc, tag: str, spec: dict, hook: Path, script: str) -> Path:  # noqa: F811
    """A runc bundle of a container of pod POD_UID, with the CDI spec's
    edits applied as a CDI runtime applies them (the device nodes by their
    major and minor, the device rule, the createRuntime hook; the hook's
    path is the test's stand-in for make install's link)."""
    ann = {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": SB,
           "io.kubernetes.cri.sandbox-name": "web", "io.kubernetes.cri.sandbox-namespace": "team",
           "io.kubernetes.cri.sandbox-uid": POD_UID, "io.kubernetes.cri.container-name": tag}
    b = runc.bundle(tag, script, ann)
    cfg = json.loads((b / "config.json").read_text())
    cfg["linux"]["cgroupsPath"] = f"/{TOP}/pod{POD_UID}/{tag}"
    edits = spec["devices"][0]["containerEdits"]
    for n in edits["deviceNodes"]:
        cfg["linux"].setdefault("devices", []).append(
            {"path": n["path"], "type": "c", "major": n["major"], "minor": n["minor"],
             "fileMode": 0o666, "uid": 0, "gid": 0})
        cfg["linux"]["resources"].setdefault("devices", []).append(
            {"allow": True, "type": "c", "major": n["major"], "minor": n["minor"],
             "access": "rw"})
    cfg.setdefault("hooks", {}).setdefault("createRuntime", []).extend(
        {"path": str(hook), "args": h["args"], "env": h["env"], "timeout": h["timeout"]}
        for h in edits["hooks"])
    (b / "config.json").write_text(json.dumps(cfg))
    return b


def test_the_containers_of_a_pod_share_its_claims_slice(plugin, daemon, runc):  # noqa: F811
    """A claim both containers of a pod name (the CDI spec the plugin wrote,
    applied as a CDI runtime would): the first container's hook attaches the
    slice to the pod's cgroup, the second's attaches the same, and both open
    the slice's nodes at once; the slice is bound to the pod, not to either."""
    api, kubelet, tmp = plugin
    api.claims[("team", f"c-{UID[:8]}")] = claim(UID, [result(0, 128 * MiB)])
    r = kubelet.call("v1", "NodePrepareResources", ("team", f"c-{UID[:8]}", UID))
    assert r.claims[UID].error == "", r.claims[UID].error
    name = f"claim-{UID}-0"
    spec = json.loads((tmp / "cdi" / f"vgpu-{name}.json").read_text())
    hook = tmp / "vgpu-oci-hook"
    hook.write_text(f"#!/bin/sh\nexec {PY} -I -S -c 'import sys; sys.path.insert(0, "
                    f"\"{ROOT}\"); from vgpu.cli.hook import main; sys.exit(main())' \"$@\"\n")
    hook.chmod(0o755)
    hold = ("exec 3<>/dev/nvidiactl && touch /shared/{t}.open && "
            "while [ ! -e /shared/stop ]; do sleep 0.2; done")
    try:
        for tag in ("app", "side"):
            b = cdi_bundle(runc, tag, spec, hook, hold.format(t=tag))
            out = tmp / f"{tag}.out"
            with open(out, "wb") as f:
                rr = subprocess.run([RUNC, "--root", runc.root, "run", "-d", "--bundle", str(b),
                                     f"dra-{tag}"], stdin=subprocess.DEVNULL, stdout=f,
                                    stderr=f, timeout=300)
            runc.ids.append(f"dra-{tag}")
            assert rr.returncode == 0, f"{out.read_text()}\n{daemon.log()}"
            assert poll(lambda tag=tag: (runc.shared / f"{tag}.open").exists(), 120), \
                f"{out.read_text()}\n{daemon.log()}"
        sl = daemon.ctl("show", name)["slice"]
        assert sl["attached"].rstrip("/").endswith(f"/{TOP}/pod{POD_UID}"), sl
        assert len(sl["pids"]) >= 2, sl              # both containers hold its nodes open
    finally:
        (runc.shared / "stop").touch()
        for tag in ("app", "side"):
            runc.runc("kill", f"dra-{tag}", "KILL")
            poll(lambda tag=tag: runc.state(f"dra-{tag}").get("status") in (None, "stopped"), 60)
            runc.runc("delete", "--force", f"dra-{tag}")
        remove_cgroups(Path("/sys/fs/cgroup") / TOP)
