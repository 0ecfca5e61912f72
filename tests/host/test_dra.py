"""Dynamic Resource Allocation, what vgpu publishes (vgpu.k8s.dra) and the
manifests of deploy/dra: the ResourceSlice built from a vgpud's own
``status`` and ``gpus`` answers, and every manifest, against the API's
schema (kubernetes-validate, strict) of each release with consumable
capacity; the claims ask for capacities the devices have, in amounts their
request policies admit; the class selects the driver the slices name."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import kustomize_subset
from vgpu.daemon.config import parse_config
from vgpu.daemon.health import record_fault
from vgpu.k8s import dra, draplugin

from daemon_support import call

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "dra"
#: releases whose resource.k8s.io/v1 has consumable capacity (1.34: alpha)
K8S_VERSIONS = ("1.34", "1.37")
FILES = ("deviceclass.yaml", "example-claim.yaml", "rbac.yaml")
MiB, GiB = 1 << 20, 1 << 30


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_every_file_is_here():
    assert tuple(sorted(p.name for p in DEPLOY.glob("*.yaml"))) == tuple(sorted(
        FILES + ("kustomization.yaml",)))


# ---- the DaemonSet for DRA: deploy/dra/kustomization.yaml --------------------
def dra_build() -> dict[str, dict]:
    return {d["kind"]: d for d in kustomize_subset.build(DEPLOY)}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_dra_daemonset_validates(version):
    objs = kustomize_subset.build(DEPLOY)
    for d in objs:
        kubernetes_validate.validate(d, version, strict=True)
    assert sorted(d["kind"] for d in objs) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "DeviceClass",
        "Namespace", "ServiceAccount"]            # no RuntimeClass: a claim carries the slice


def test_the_dra_daemonset_runs_the_plugin_with_what_it_needs():
    """The overlay's config is one vgpud takes, with the DRA plugin on and the
    device plugin off; the pod has every path the plugin uses (the kubelet's
    plugin directories under kubelet_dir's parent, the CDI directory), its
    node's name, and the token the role is bound to; the rest of the
    DaemonSet is deploy/kubernetes's."""
    objs = dra_build()
    toml = (DEPLOY / "vgpud.toml").read_text()
    assert objs["ConfigMap"]["data"] == {"vgpud.toml": toml}
    cfg = parse_config(toml, "deploy/dra/vgpud.toml")
    k = cfg.kubernetes
    assert k.dra_plugin and not k.device_plugin and k.pod_requests == "allocated"
    assert not k.dra_admin_access and not k.node_name
    pod = objs["DaemonSet"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    for path in (k.kubelet_dir.parent / "plugins", k.kubelet_dir.parent / "plugins_registry",
                 k.cdi_dir):
        assert vols[mounts[str(path)]] == str(path), path
    assert c["env"] == [{"name": "NODE_NAME",
                         "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    sa = objs["ServiceAccount"]
    assert sa["automountServiceAccountToken"] and pod["automountServiceAccountToken"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    (subject,) = objs["ClusterRoleBinding"]["subjects"]
    assert (subject["name"], subject["namespace"]) == (sa["metadata"]["name"],
                                                       sa["metadata"]["namespace"])
    base = {d["kind"]: d for d in kustomize_subset.build(REPO / "deploy" / "kubernetes")}
    bpod = base["DaemonSet"]["spec"]["template"]["spec"]
    strip = ("env", "volumeMounts")
    assert {x: y for x, y in c.items() if x not in strip} == \
        {x: y for x, y in bpod["containers"][0].items() if x not in strip}
    assert bpod["containers"][0]["volumeMounts"] == c["volumeMounts"][:-3]
    assert bpod["volumes"] == pod["volumes"][:-3]


def test_the_kustomize_reading_can_fail():
    """The subset refuses what kustomize would (a path that does not
    resolve) and what it does not read."""
    with pytest.raises(KeyError):
        kustomize_subset.json_patch({"a": {}}, [{"op": "replace", "path": "/a/b", "value": 1}])
    with pytest.raises(kustomize_subset.Unsupported):
        kustomize_subset.json_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/b"}])
    assert kustomize_subset.json_patch({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2},
                                                    {"op": "add", "path": "/b~1c", "value": 3}]) \
        == {"a": [1, 2], "b/c": 3}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", FILES)
def test_manifests_schema(name, version):
    for d in docs(name):
        kubernetes_validate.validate(d, version, strict=True)


async def node_slice(env, **kw) -> dict:
    mgr, _, _ = env
    status = (await call(mgr, "status"))["result"]
    gpus = (await call(mgr, "gpus"))["result"]
    return dra.resource_slice("node-1", status, gpus, **kw)


@pytest.mark.parametrize("version", K8S_VERSIONS)
async def test_the_nodes_resource_slice_validates_and_matches_vgpud(env, version):
    mgr, _, _ = env
    s = await node_slice(env, numa_of=lambda pci: 0,
                         pcie_root_of=lambda pci: "pci0000:00")
    kubernetes_validate.validate(s, version, strict=True)
    spec = s["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        dra.DRIVER, "node-1", {"name": "node-1", "generation": 1, "resourceSliceCount": 1})
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    for d, g in zip(spec["devices"], mgr.inventory.gpus):
        assert d["allowMultipleAllocations"] is True
        assert d["capacity"]["memory"]["value"] == str(g.memory_total)
        assert d["capacity"]["compute"]["value"] == "100"
        a = d["attributes"]
        assert (a["uuid"], a["index"], a["pciBusID"], a["numaNode"]) == (
            {"string": g.uuid}, {"int": g.index}, {"string": g.pci_bus_id}, {"int": 0})
        assert a["driverVersion"] == {"version": "595.45.4"}     # NVIDIA's 595.45.04
        assert a["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:00"}
        assert "rdmaAdapter" not in a                             # no adapter on the node


@pytest.mark.parametrize("version", K8S_VERSIONS)
async def test_the_gpus_rdma_adapter_is_an_attribute(env, version):
    """What vgpud pairs a GPU with (vgpu.common.topology) is published, so
    a claim can select a GPU by its adapter or by how close it is."""
    mgr, _, _ = env
    status = (await call(mgr, "status"))["result"]
    gpus = (await call(mgr, "gpus"))["result"]
    gpus["gpus"][0]["hca"] = {"name": "mlx5_0", "link": "PIX"}
    s = dra.resource_slice("node-1", status, gpus)
    kubernetes_validate.validate(s, version, strict=True)
    a = s["spec"]["devices"][0]["attributes"]
    assert (a["rdmaAdapter"], a["rdmaLink"]) == ({"string": "mlx5_0"}, {"string": "PIX"})
    assert "rdmaAdapter" not in s["spec"]["devices"][1]["attributes"]


async def test_a_faulty_or_unsliced_gpu_is_not_published(env):
    mgr, _, _ = env
    record_fault(mgr.gpu_faults, mgr.inventory.gpus[1].uuid, 79)
    s = await node_slice(env)
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0"]
    gpus = {"gpus": [{"index": 0, "uuid": "GPU-a", "memory_total": 16 * GiB, "sliced": False}]}
    assert dra.resource_slice("n", {}, gpus)["spec"]["devices"] == []


@pytest.mark.parametrize("junk", [{"uuid": "GPU-a", "memory_total": GiB},
                                  {"index": 0, "memory_total": GiB},
                                  {"index": 0, "uuid": "GPU-a", "memory_total": "16Gi"},
                                  {"index": 0, "uuid": "GPU-a", "memory_total": MiB}])
def test_a_gpu_without_what_a_device_needs_is_refused(junk):
    with pytest.raises(ValueError, match="without index, uuid or memory_total"):
        dra.resource_slice("n", {}, {"gpus": [junk]})


async def test_the_schema_check_can_fail(env):
    s = await node_slice(env)
    bad = copy.deepcopy(s)
    bad["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["stride"] = "1"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("given,want", [("535.261.03", "535.261.3"), ("595.45.04", "595.45.4"),
                                        ("580", "580.0.0"), ("1.2.3.4", None), ("", None),
                                        ("535.x.1", None)])
def test_driver_version_as_semver(given, want):
    assert dra.semver(given) == want


def quantity(q: str) -> int:
    """The few Quantity spellings the manifests use: plain, Ki/Mi/Gi."""
    for suffix, mult in (("Ki", 1 << 10), ("Mi", MiB), ("Gi", GiB)):
        if q.endswith(suffix):
            return int(q[:-len(suffix)]) * mult
    return int(q)


async def test_the_examples_ask_for_what_the_devices_have(env):
    """The class selects the driver the slices name, and every claim's
    capacity requests name capacities the devices have, in amounts their
    request policies take as they are (a multiple of the step, in range)."""
    s = await node_slice(env)
    (cls,) = docs("deviceclass.yaml")
    assert f'device.driver == "{dra.DRIVER}"' in cls["spec"]["selectors"][0]["cel"]["expression"]
    dev = s["spec"]["devices"][0]
    claims = [d for d in docs("example-claim.yaml") if d["kind"] in ("ResourceClaimTemplate",
                                                                     "ResourceClaim")]
    asked = 0
    for c in claims:
        spec = c["spec"]["spec"] if c["kind"] == "ResourceClaimTemplate" else c["spec"]
        for r in spec["devices"]["requests"]:
            assert r["exactly"]["deviceClassName"] == cls["metadata"]["name"]
            for name, q in (r["exactly"].get("capacity") or {}).get("requests", {}).items():
                pol = dev["capacity"][name]["requestPolicy"]
                lo, hi, step = (quantity(pol["validRange"][k]) for k in ("min", "max", "step"))
                v = quantity(str(q))
                assert lo <= v <= hi and (v - lo) % step == 0, (name, q, pol)
                asked += 1
        # its parameters are ones the plugin takes, as the allocation copies them
        if spec["devices"].get("config"):
            alloc = {"status": {"allocation": {"devices": {"config": [
                {"source": "FromClaim", **x} for x in spec["devices"]["config"]]}}}}
            for r in spec["devices"]["requests"]:
                assert draplugin.slice_parameters(alloc, r["name"]).get("rdma"), c
    assert asked == 4


# ---- the scheduler's arithmetic against vgpud's admission ------------------
#
# KEP-5075's rules for a device with allowMultipleAllocations, re-implemented
# from its text (the API's field descriptions): a request's amount of each
# capacity is what the claim names, else the policy's default; with a
# validRange, an amount below min or off a step is raised to the next valid
# one (min + k * step), one above max cannot be allocated; the device holds
# a claim while every capacity's consumed sum stays within its value.

def consumed(dev: dict, asked: dict[str, int]) -> dict[str, int] | None:
    out = {}
    for name, cap in dev["capacity"].items():
        pol = cap.get("requestPolicy") or {}
        v = asked.get(name, quantity(pol["default"]) if "default" in pol else
                      quantity(cap["value"]))
        rng = pol.get("validRange")
        if rng:
            lo, step = quantity(rng["min"]), quantity(rng.get("step", "1"))
            if v < lo:
                v = lo
            v = lo + -(-(v - lo) // step) * step
            if "max" in rng and v > quantity(rng["max"]):
                return None
        out[name] = v
    return out


def fits(dev: dict, used: dict[str, int], need: dict[str, int]) -> bool:
    return all(used.get(n, 0) + need[n] <= quantity(dev["capacity"][n]["value"]) for n in need)


async def test_whatever_the_scheduler_admits_vgpud_admits_on_that_gpu(env):
    """Random claims, each placed by the scheduler's rules on a device of
    the node's own ResourceSlice (any device that fits: the scheduler may
    pick any); each one it places, prepared as the DRA plugin will (a slice
    on that GPU with the consumed memory, and the consumed compute as a
    burst floor where it is above 0), is admitted by vgpud.  A claim no
    device fits is refused by the scheduler and never reaches the node."""
    import random
    rnd = random.Random(5075)
    mgr, _, _ = env
    for rnd_round in range(6):
        for c in list(mgr.records):
            assert (await call(mgr, "delete", container=c, force=True))["ok"]
        dev_slice = await node_slice(env)
        devices = dev_slice["spec"]["devices"]
        used = [dict() for _ in devices]
        placed = refused = 0
        for i in range(40):
            asked = {}
            if rnd.random() < 0.9:
                asked["memory"] = rnd.choice([rnd.randrange(1, 6 * GiB), rnd.randrange(1, 8) * GiB,
                                              rnd.randrange(1, 64) * MiB + rnd.randrange(0, MiB)])
            if rnd.random() < 0.7:
                asked["compute"] = rnd.randrange(0, 60)
            where = [(j, consumed(d, asked)) for j, d in enumerate(devices)]
            where = [(j, need) for j, need in where if need and fits(devices[j], used[j], need)]
            if not where:
                refused += 1
                continue
            j, need = rnd.choice(where)
            for n, v in need.items():
                used[j][n] = used[j].get(n, 0) + v
            args = {"memory": need["memory"], "gpus": [j]}
            if need["compute"] > 0:
                args.update(compute=need["compute"], policy="burst")
            r = await call(mgr, "create", container=f"claim-{rnd_round}-{i}", **args)
            assert r["ok"], (asked, need, used[j], r)
            placed += 1
        assert placed >= 8 and refused >= 1, (placed, refused)



def test_the_plugins_role_allows_what_it_calls_and_no_more():
    """Every API-server call of vgpu.k8s.draplugin (its ApiServer's
    requests: claims read, the Node read, its ResourceSlice read, created,
    replaced) is in the ClusterRole, and the role grants nothing else; the
    binding names vgpud's ServiceAccount."""
    role, binding = docs("rbac.yaml")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    src = Path(draplugin.__file__).read_text()
    used = set()
    if re.search(r'"GET", f"/apis/resource.k8s.io/v1/namespaces/[^\n]*\n\s*f"/resourceclaims/',
                 src):
        used.add(("resource.k8s.io", "resourceclaims", "get"))
    if re.search(r'"GET", f"/api/v1/nodes/', src):
        used.add(("", "nodes", "get"))
    verbs = {"GET": "get", "POST": "create", "PUT": "update"}
    for m in re.finditer(r'self\.api\.request\("(GET|POST|PUT)", (?:f")?\{?self\.RESOURCE', src):
        used.add(("resource.k8s.io", "resourceslices", verbs[m.group(1)]))
    assert len(used) == 5, used
    assert granted == used
    kvgpud = yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "vgpud.yaml").read_text())
    (sa,) = [d for d in kvgpud if d and d["kind"] == "ServiceAccount"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
