"""The DRA kubelet plugin's wire (vgpu/k8s/dra_v1.proto, the v1beta1 made
from it, pluginregistration_v1.proto) against the kubelet's own definitions,
vendored as test input (tests/data/kubelet/dra, .../pluginregistration):
services, methods, messages, field numbers and types."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import grpc
import kubernetes_validate
import pytest

from daemon_support import GiB, ThreadVgpud
from proto_support import compile_fds, shape
from tools.testbed.dra_fakes import NODE, ApiServer, Kubelet
from tools.testbed.vgpud_launcher import config as vgpud_config, running
from vgpu.daemon.config.schema import K8S_DRA_SOCK_MAX
from vgpu.daemon.health import record_fault
from topology_fixtures import make_sysfs
from vgpu.common.driverfiles import DriverFiles, driver_edits
from vgpu.common.request import HOOK_ENV
from vgpu.daemon.plugin_supervisor import dra_plugin_argv
from vgpu.common import topology
from vgpu.k8s import dra, draplugin
from vgpu.k8s.draplugin import (ApiServerClaims, ApiServerError, DraServices, Preparer,
                                SlicePublisher, dra_proto)

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "vgpu" / "k8s"
THEIRS = REPO / "tests" / "data" / "kubelet"


@pytest.mark.parametrize("ours,theirs", [
    ("v1", "dra/v1/api.proto"),
    ("v1beta1", "dra/v1beta1/api.proto"),
    ("pluginregistration_v1.proto", "pluginregistration/v1/api.proto"),
])
def test_our_protos_describe_the_kubelets(tmp_path, ours, theirs):
    path = OURS / ours if ours.endswith(".proto") else dra_proto(ours, tmp_path)
    a = compile_fds(path, tmp_path)
    b = compile_fds(THEIRS / theirs, tmp_path, drop_gogo=True)
    sa, sb = shape(a), shape(b)
    assert sa["package"] == sb["package"]
    assert sa["services"] == sb["services"]
    for name in sb["messages"]:
        assert sa["messages"].get(name) == sb["messages"][name], name
    assert sa == sb
    # ours imports nothing and sets no option
    assert not a.dependency and not a.options.ListFields()


def test_the_comparison_sees_a_changed_field(tmp_path):
    text = (OURS / "dra_v1.proto").read_text().replace("string device_name = 3;",
                                                       "string device_name = 5;")
    changed = tmp_path / "dra_v1.proto"
    changed.write_text(text)
    assert shape(compile_fds(changed, tmp_path)) != \
        shape(compile_fds(THEIRS / "dra/v1/api.proto", tmp_path, drop_gogo=True))


# ---- the plugin: registration, prepare and unprepare ------------------------
# A test kubelet's calls over the plugin's real sockets, a test API server
# (http.server) holding the claims, and vgpud's real operations in a thread
# over fakes of vgpu.ko and the GPUs (daemon_support.ThreadVgpud).


UID = "7d6c1f0e-1b2a-4c3d-8e9f-0a1b2c3d4e5f"


def claim(uid=UID, name="gpu-claim", ns="team", results=None, admin_requests=None):
    """A claim as the API server has it: the spec's requests those of the
    results (with admin access where a result has it, or those named in
    ``admin_requests``), the allocation the results."""
    if results is None:
        results = [{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-1",
                    "consumedCapacity": {"memory": "4Gi", "compute": "30"}}]
    names = dict.fromkeys(r.get("request") for r in results)
    if admin_requests is None:
        admin_requests = {r.get("request") for r in results if r.get("adminAccess") is True}
    requests = [{"name": n, "exactly": {"deviceClassName": "gpu.vgpu.io",
                                        **({"adminAccess": True} if n in admin_requests else {})}}
                for n in names]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"devices": {"requests": requests}},
            "status": {"allocation": {"devices": {"results": results}}}}


@pytest.fixture
def node(tmp_path):
    v = ThreadVgpud(tmp_path).start()
    api = ApiServer()
    prep = Preparer(NODE, ApiServerClaims(api.url), v.sock, tmp_path / "cdi", "/run/vgpu/fs")
    services = DraServices(prep)
    dra_srv, reg_srv = draplugin.serve(services, tmp_path / "plugins", tmp_path / "registry")
    kubelet = Kubelet(services, tmp_path / "plugins" / "dra.sock",
                      tmp_path / "registry" / "gpu.vgpu.io-reg.sock")
    yield v, api, kubelet, services, tmp_path
    reg_srv.stop(0)
    dra_srv.stop(0)
    api.httpd.shutdown()
    v.stop()


def slices(v) -> dict:
    with v.api() as c:
        return {s["container"]: s for s in c.request("list")["slices"]}


def test_the_kubelet_finds_and_registers_the_plugin(node):
    v, api, kubelet, services, tmp = node
    info = kubelet.info()
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DRAPlugin", "gpu.vgpu.io", str(tmp / "plugins" / "dra.sock"),
        ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
    kubelet.notify(True)
    assert services.registered.is_set()


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_a_claim_is_prepared_into_its_slice_and_unprepared(node, version):
    v, api, kubelet, services, tmp = node
    api.claims[("team", "gpu-claim")] = claim()
    for _ in range(2):                      # a retry gets the same answer, one slice
        r = kubelet.call(version, "NodePrepareResources", ("team", "gpu-claim", UID))
        got = r.claims[UID]
        assert got.error == ""
        (d,) = got.devices
        assert (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) == (
            ["gpu"], NODE, "gpu-1", [f"vgpu.io/slice=claim-{UID}-0"])
    s = slices(v)
    assert list(s) == [f"claim-{UID}-0"]
    sl = s[f"claim-{UID}-0"]
    assert [g["gpu"] for g in sl["gpus"]] == [1]
    assert sl["gpus"][0]["memory_limit"] == 4 * GiB
    assert (sl["compute"]["percent"], sl["compute"]["policy"]) == (30.0, "burst")
    assert sl["owner"] == {"runtime": "vgpu-dra-plugin", "pod": UID}
    assert sl["labels"]["resource.kubernetes.io/claim-uid"] == UID
    spec = json.loads((tmp / "cdi" / f"vgpu-claim-{UID}-0.json").read_text())
    assert spec["kind"] == "vgpu.io/slice"
    assert [x["name"] for x in spec["devices"]] == [f"claim-{UID}-0"]
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert nodes[0]["hostPath"] == f"/run/vgpu/fs/claim-{UID}-0/dev/nvidiactl"
    # its hook binds the pod's cgroup: the claim's containers share the slice
    (hook,) = spec["devices"][0]["containerEdits"]["hooks"]
    assert hook["args"][-4:] == ["--attach-pod", "--mount-slice", f"claim-{UID}-0",
                                 "createRuntime"]

    for _ in range(2):                      # unprepare, and again: done already
        r = kubelet.call(version, "NodeUnprepareResources", ("team", "gpu-claim", UID))
        assert r.claims[UID].error == ""
        assert slices(v) == {}
        assert list((tmp / "cdi").iterdir()) == []


@pytest.mark.parametrize("change,words", [
    (dict(uid="0" * 8), "has uid '00000000', the kubelet asked for"),
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE,
                    "device": "gpu-1"}]), "DRAConsumableCapacity"),
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": "node-2",
                    "device": "gpu-1", "consumedCapacity": {"memory": "1Gi"}}]),
     "not in this node's pool 'node-1'"),
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE,
                    "device": "nic-0", "consumedCapacity": {"memory": "1Gi"}}]),
     "not a device gpu.vgpu.io publishes"),
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE,
                    "device": "gpu-0", "adminAccess": True}]), "admin access is off on this node"),
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE,
                    "device": "gpu-0", "adminAccess": "yes",
                    "consumedCapacity": {"memory": "1Gi"}}]), "adminAccess 'yes' is not a boolean"),
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE,
                    "device": "gpu-0", "consumedCapacity": {"memory": "1.5"}}]),
     "is not a slice"),
    (dict(results=[{"request": "gpu", "driver": "other.example.com", "pool": NODE,
                    "device": "gpu-0"}]), "has no device of gpu.vgpu.io allocated"),
    # vgpud refuses it: more than the GPU has
    (dict(results=[{"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE,
                    "device": "gpu-0", "consumedCapacity": {"memory": "17Gi"}}]),
     "gpu-0: vgpud:"),
])
def test_a_claim_that_cannot_be_prepared_says_why_and_leaves_nothing(node, change, words):
    v, api, kubelet, services, tmp = node
    api.claims[("team", "gpu-claim")] = claim(**change)
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert words in r.claims[UID].error, r.claims[UID].error
    assert not r.claims[UID].devices
    assert slices(v) == {}
    assert not (tmp / "cdi").exists() or list((tmp / "cdi").iterdir()) == []


def test_admin_access_where_allowed_is_the_gpu_itself_and_no_slice(node):
    """With --admin-access (vgpud's [kubernetes] dra_admin_access): an
    admin-access result is prepared into a CDI device of kind vgpu.io/gpu
    naming the driver's own nvidiactl and the GPU's node by its minor (no
    nvidia-uvm, no hook: nothing to attach); it consumes nothing, so the
    claim's other result is the one slice; unprepare takes both away."""
    v, api, kubelet, services, tmp = node
    services.preparer.admin_access = True
    with v.api() as c:
        minor = {g["index"]: g["minor"] for g in c.request("gpus")["gpus"]}[0]
    api.claims[("team", "gpu-claim")] = claim(results=[
        {"request": "watch", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-0",
         "adminAccess": True},
        {"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-1",
         "consumedCapacity": {"memory": "1Gi"}}])
    for _ in range(2):                              # a retry: the same
        r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
        assert r.claims[UID].error == ""
        assert [list(d.cdi_device_ids) for d in r.claims[UID].devices] == [
            [f"vgpu.io/gpu=admin-{UID}-0"], [f"vgpu.io/slice=claim-{UID}-1"]]
    assert list(slices(v)) == [f"claim-{UID}-1"]
    spec = json.loads((tmp / "cdi" / f"vgpu-admin-{UID}-0.json").read_text())
    assert (spec["kind"], [d["name"] for d in spec["devices"]]) == (
        "vgpu.io/gpu", [f"admin-{UID}-0"])
    edits = spec["devices"][0]["containerEdits"]
    assert edits == {"deviceNodes": [
        {"path": "/dev/nvidiactl", "hostPath": "/dev/nvidiactl", "type": "c",
         "permissions": "rw"},
        {"path": f"/dev/nvidia{minor}", "hostPath": f"/dev/nvidia{minor}", "type": "c",
         "permissions": "rw"}]}
    r = kubelet.call("v1", "NodeUnprepareResources", ("team", "gpu-claim", UID))
    assert r.claims[UID].error == ""
    assert slices(v) == {} and list((tmp / "cdi").iterdir()) == []


def rdma_claim(params, requests=None):
    c = claim()
    c["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromClass", "opaque": {"driver": "other.example.com",
                                           "parameters": {"anything": 1}}},
        {"source": "FromClaim", **({"requests": requests} if requests is not None else {}),
         "opaque": {"driver": "gpu.vgpu.io", "parameters": params}}]
    return c


def test_a_claims_parameters_give_its_slice_rdma(node):
    """SliceParameters' rdma (the claim's opaque config of gpu.vgpu.io,
    for its request or all) reaches vgpud's create: the slice gets the
    adapter beside its GPU and the limits asked; the CDI spec its nodes."""
    v, api, kubelet, services, tmp = node
    make_sysfs(v.sysfs, [("gpu", "GPU1", "0000:02:00.0", 0,
                          ("pci0000:40", "0000:40:01.0", "0000:02:00.0")),
                         ("hca", "mlx5_3", "0000:41:00.0", 0,
                          ("pci0000:40", "0000:40:02.0", "0000:41:00.0"))])
    api.claims[("team", "gpu-claim")] = rdma_claim(
        {"apiVersion": "gpu.vgpu.io/v1alpha1", "kind": "SliceParameters",
         "rdma": {"handles": 3}}, requests=["gpu"])
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert r.claims[UID].error == "", r.claims[UID].error
    sl = slices(v)[f"claim-{UID}-0"]
    assert (sl["rdma"]["hca"], sl["rdma"]["handles"]) == ("mlx5_3", 3)
    spec = json.loads((tmp / "cdi" / f"vgpu-claim-{UID}-0.json").read_text())
    paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert "/dev/infiniband/uverbs0" in paths


@pytest.mark.parametrize("params,words", [
    ({"apiVersion": "v1", "kind": "SliceParameters"}, "are not apiVersion gpu.vgpu.io/v1alpha1"),
    ({"apiVersion": "gpu.vgpu.io/v1alpha1", "kind": "SliceParameters", "memory": "1Gi"},
     "SliceParameters has no memory (known: rdma)"),
    ({"apiVersion": "gpu.vgpu.io/v1alpha1", "kind": "SliceParameters", "rdma": "yes"},
     "rdma 'yes' is not true, false or {handles, objects}"),
    ({"apiVersion": "gpu.vgpu.io/v1alpha1", "kind": "SliceParameters",
      "rdma": {"objects": 0}}, "rdma.objects 0 is not a whole number"),
    # no adapter on the node: vgpud refuses, nothing is left
    ({"apiVersion": "gpu.vgpu.io/v1alpha1", "kind": "SliceParameters", "rdma": True},
     "no RDMA adapter with a uverbs device on this node"),
])
def test_bad_parameters_are_refused_and_leave_nothing(node, params, words):
    v, api, kubelet, services, tmp = node
    api.claims[("team", "gpu-claim")] = rdma_claim(params)
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert words in r.claims[UID].error, r.claims[UID].error
    assert slices(v) == {}


def test_parameters_for_another_request_do_not_apply(node):
    v, api, kubelet, services, tmp = node
    api.claims[("team", "gpu-claim")] = rdma_claim(
        {"apiVersion": "gpu.vgpu.io/v1alpha1", "kind": "SliceParameters", "rdma": True},
        requests=["other"])
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert r.claims[UID].error == ""
    assert slices(v)[f"claim-{UID}-0"]["rdma"] is None


def test_admin_access_the_claims_spec_did_not_ask_for_is_refused(node):
    """The allocation (status) says admin access, the claim's request
    (spec, which the API server admits with admin access only in a
    labelled namespace) does not: refused, nothing made."""
    v, api, kubelet, services, tmp = node
    services.preparer.admin_access = True
    api.claims[("team", "gpu-claim")] = claim(results=[
        {"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-0",
         "adminAccess": True}], admin_requests=set())
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert "does not ask for it" in r.claims[UID].error, r.claims[UID].error
    assert slices(v) == {} and not (tmp / "cdi").exists()


def test_the_specs_bring_the_drivers_user_space(node):
    """With the host driver's files (driverfiles.for_spec, found at the
    plugin's start), a claim's spec and an admin one carry them as
    `vgpuctl cdi generate`'s does: each file bound read-only at its path and
    the hook's createRuntime entry for the SONAME links and ldconfig."""
    v, api, kubelet, services, tmp = node
    drv = DriverFiles("535.261.03")
    drv.libraries.append("/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03")
    drv.links.append(("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.535.261.03"))
    drv.lib_dirs.append("/usr/lib/x86_64-linux-gnu")
    drv.binaries.append(("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"))
    services.preparer.driver, services.preparer.hook = drv, "/opt/vgpu/hook"
    services.preparer.admin_access = True
    api.claims[("team", "gpu-claim")] = claim(results=[
        {"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-1",
         "consumedCapacity": {"memory": "1Gi"}},
        {"request": "watch", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-0",
         "adminAccess": True}])
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert r.claims[UID].error == ""
    want = driver_edits(drv, ("/opt/vgpu/hook", ["vgpu-oci-hook"], list(HOOK_ENV)))
    assert want["mounts"] and want["hooks"]
    for name in (f"claim-{UID}-0", f"admin-{UID}-1"):
        spec = json.loads((tmp / "cdi" / f"vgpu-{name}.json").read_text())
        assert spec["containerEdits"] == want, name
    spec = json.loads((tmp / "cdi" / f"vgpu-claim-{UID}-0.json").read_text())
    assert spec["devices"][0]["containerEdits"]["hooks"][0]["path"] == "/opt/vgpu/hook"


def test_admin_access_on_a_gpu_vgpud_lacks_leaves_nothing(node):
    """A failure after a slice and an admin spec were made in the same call
    takes both back."""
    v, api, kubelet, services, tmp = node
    services.preparer.admin_access = True
    api.claims[("team", "gpu-claim")] = claim(results=[
        {"request": "gpu", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-1",
         "consumedCapacity": {"memory": "1Gi"}},
        {"request": "watch", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-0",
         "adminAccess": True},
        {"request": "watch", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-9",
         "adminAccess": True}])
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert "gpu-9: vgpud has no GPU 9 with a device minor" in r.claims[UID].error
    assert slices(v) == {} and list((tmp / "cdi").iterdir()) == []


@pytest.mark.parametrize("uid", ["*", "../x", "", "a" * 65])
def test_a_uid_that_is_not_one_names_no_slice_and_no_file(node, uid):
    """The kubelet's claim UID names slices and a glob of the CDI
    directory: anything else is refused in both directions, touching
    nothing (a spec of another claim stays)."""
    v, api, kubelet, services, tmp = node
    (tmp / "cdi").mkdir()
    other = tmp / "cdi" / f"vgpu-claim-{UID}-0.json"
    other.write_text("{}")
    for method in ("NodePrepareResources", "NodeUnprepareResources"):
        r = kubelet.call("v1", method, ("team", "gpu-claim", uid))
        assert f"claim uid {uid!r} is not a UID" in r.claims[uid].error
    assert other.exists() and slices(v) == {}


def test_a_claim_the_api_server_lacks_is_an_error(node):
    v, api, kubelet, services, tmp = node
    r = kubelet.call("v1", "NodePrepareResources", ("team", "nope", UID))
    assert "the API server answered 404 for claim team/nope" in r.claims[UID].error


def test_a_failure_midway_takes_back_what_the_call_made(node):
    """Two devices of one claim, the second past its GPU: the first's slice
    and spec go too."""
    v, api, kubelet, services, tmp = node
    api.claims[("team", "gpu-claim")] = claim(results=[
        {"request": "a", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-0",
         "consumedCapacity": {"memory": "2Gi"}},
        {"request": "b", "driver": "gpu.vgpu.io", "pool": NODE, "device": "gpu-1",
         "consumedCapacity": {"memory": "64Gi"}}])
    r = kubelet.call("v1", "NodePrepareResources", ("team", "gpu-claim", UID))
    assert "gpu-1: vgpud:" in r.claims[UID].error
    assert slices(v) == {}
    assert list((tmp / "cdi").iterdir()) == []


@pytest.mark.parametrize("q,want", [("4Gi", 4 * GiB), ("30", 30), ("1500m", 1.5),
                                    ("1k", 1000), ("0.5Gi", GiB // 2)])
def test_quantities(q, want):
    assert draplugin.quantity(q) == want


@pytest.mark.parametrize("q", ["", "1e9", "4GB", "-1", 4, None, "1.2.3"])
def test_not_quantities(q):
    with pytest.raises(ValueError):
        draplugin.quantity(q)


def test_one_hook_path_for_both_cdi_writers():
    """vgpuctl's usage names rtdefaults.CDI_HOOK without loading the
    generator; both must be the one vgpu.common.cdi wires in."""
    from vgpu.cli import rtdefaults
    from vgpu.common import cdi
    assert rtdefaults.CDI_HOOK == cdi.CDI_HOOK



@pytest.mark.parametrize("version", ["1.34", "1.37"])
def test_the_resource_slice_is_published_kept_and_replaced(node, version):
    """Created (owned by the Node), left alone while vgpud says the same,
    replaced with the pool's generation one higher once it does not (a GPU
    with an XID drops out); what the API server holds validates."""
    v, api, kubelet, services, tmp = node
    pub = SlicePublisher(draplugin.ApiServer(api.url), NODE, v.sock, sysfs=str(tmp / "nosys"))
    assert pub.publish_once() == "created"
    (obj,) = api.slices.values()
    kubernetes_validate.validate(obj, version, strict=True)
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node",
                                                   "name": NODE, "uid": "node-uid-1",
                                                   "controller": True}]
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert (pub.publish_once(), api.writes) == ("unchanged", 1)
    record_fault(v.mgr.gpu_faults, v.inv.gpus[1].uuid, 79)
    assert pub.publish_once() == "updated"
    (obj,) = api.slices.values()
    kubernetes_validate.validate(obj, version, strict=True)
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0"]
    assert obj["spec"]["pool"]["generation"] == 2
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "node-uid-1"
    assert (pub.publish_once(), api.writes) == ("unchanged", 2)


def test_publishing_says_what_failed(node, caplog):
    v, api, kubelet, services, tmp = node
    api.nodes.clear()
    pub = SlicePublisher(draplugin.ApiServer(api.url), NODE, v.sock, sysfs=str(tmp / "nosys"))
    with pytest.raises(ApiServerError, match="404"):
        pub.publish_once()
    assert api.slices == {}
    down = SlicePublisher(draplugin.ApiServer("http://127.0.0.1:1"), NODE, v.sock,
                          interval=0.05, sysfs=str(tmp / "nosys"))
    t = threading.Thread(target=down.run)
    t.start()
    time.sleep(0.3)
    down.stop()
    t.join(5)
    assert not t.is_alive()
    assert "ResourceSlice of node-1 not published" in caplog.text


def test_the_pcie_root_is_read_from_sysfs(tmp_path):
    dev = tmp_path / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0"
    dev.mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices" / "0000:01:00.0").symlink_to(dev)
    assert topology.pcie_root("0000:01:00.0", str(tmp_path)) == "pci0000:00"
    assert topology.pcie_root("0000:02:00.0", str(tmp_path)) is None


def test_the_argv_vgpud_runs_the_plugin_with():
    argv = dra_plugin_argv("/run/vgpu/vgpud.sock", "node-1", "/var/lib/kubelet", "/var/run/cdi",
                           "https://10.0.0.1:6443")
    assert dra_plugin_argv("/s", "n", "/k", "/c", admin_access=True)[-1] == "--admin-access"
    assert argv[1:] == ["-m", "vgpu.k8s.draplugin", "--socket", "/run/vgpu/vgpud.sock",
                        "--node-name", "node-1",
                        "--plugin-dir", f"/var/lib/kubelet/plugins/{dra.DRIVER}",
                        "--registry-dir", "/var/lib/kubelet/plugins_registry",
                        "--cdi-dir", "/var/run/cdi", "--api-server", "https://10.0.0.1:6443"]
    assert draplugin.main.__module__ == "vgpu.k8s.draplugin"
    # the config's bound on kubelet_dir's parent is the longest of those paths
    assert K8S_DRA_SOCK_MAX == len(f"/plugins_registry/{dra.DRIVER}-reg.sock") >= \
        len(f"/plugins/{dra.DRIVER}/dra.sock")


def test_a_real_vgpud_runs_the_plugin_which_registers_and_publishes(tmp_path):
    """vgpud with [kubernetes] dra_plugin = true: its child serves the
    registration in the kubelet's registry under kubelet_dir's parent and
    publishes the node's ResourceSlice (this host has no GPU: no device)."""
    api = ApiServer()
    root = Path(tempfile.mkdtemp(prefix="vk", dir="/tmp"))    # short: Unix socket paths
    cfg = vgpud_config(tmp_path, kubernetes={
        "dra_plugin": True, "node_name": NODE, "api_server": api.url,
        "kubelet_dir": str(root / "dp"), "cdi_dir": str(tmp_path / "cdi")})
    try:
        with running(tmp_path, cfg) as d:
            reg = root / "plugins_registry" / f"{dra.DRIVER}-reg.sock"
            deadline = time.monotonic() + 60
            while not (reg.exists() and api.slices) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert reg.exists() and api.slices, d.log()
            (obj,) = api.slices.values()
            assert obj["spec"]["nodeName"] == NODE and obj["spec"]["devices"] == []
            log = d.log()
        assert "DRA plugin started" in log, log
    finally:
        api.httpd.shutdown()
        shutil.rmtree(root, ignore_errors=True)
