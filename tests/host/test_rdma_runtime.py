"""RDMA through vgpu-runtime (docs/rdma.md, "Through vgpu-runtime"), on the
host: the request key (vgpu.io/rdma, VGPU_RDMA), the profiles' allow_rdma,
vgpud's ``plan`` (where create would put a slice, making nothing),
vgpu-runtime writing the adapter's nodes and one device rule per node into
config.json and pinning the plan, and the hook creating the slice on the
plan and refusing one that is not.  Fake sysfs trees
(topology_fixtures.py) stand in for the node's adapters, FakeVgpud for
vgpud where the runtime is under test; soft-RoCE with containerd in the
VM is tests/vm/test_rdma.py's."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from daemon_support import call
from topology_fixtures import IB_MAJOR, MISC_MAJOR, two_gpu_node
from tools.testbed.fake_vgpud import FakeVgpud
from vgpu.cli import runtime
from vgpu.cli.hook import stages
from vgpu.cli.hook.cmdline import HookError, Opts
from vgpu.common import request
from vgpu.common.request import PLAN_ANNOTATION, ScopeError
from vgpu.daemon.config import parse_config

UID = "6b1d5c7e-0000-4000-8000-000000000001"
SB = "a" * 64
GRANT = {"hca": "mlx5_0", "nodes": [["uverbs0", IB_MAJOR, 192], ["rdma_cm", MISC_MAJOR, 58]],
         "handles": 16, "objects": 65536}
NODES = (("uverbs0", IB_MAJOR, 192), ("rdma_cm", MISC_MAJOR, 58))


def cri(kind, **extra):
    """containerd's CRI annotations of a container of pod "web" in "team"."""
    ann = {"io.kubernetes.cri.container-type": kind, "io.kubernetes.cri.sandbox-id": SB,
           "io.kubernetes.cri.sandbox-name": "web", "io.kubernetes.cri.sandbox-namespace":
           "team", "io.kubernetes.cri.sandbox-uid": UID}
    if kind == "container":
        ann["io.kubernetes.cri.container-name"] = "app"
    return {**ann, **extra}


def scope(ann, env=None, cid="c1"):
    return request.scope_of({"id": cid}, {"annotations": ann, "process": {"env": env or []}})


# ---- the request ----------------------------------------------------------
def test_the_rdma_key_is_read_like_the_others():
    assert scope({"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"}).raw == \
        {"memory": "1Gi", "rdma": "true"}
    assert scope({"vgpu.io/container-rdma": "true"}).raw == {"rdma": "true"}
    sc = scope({}, env=["VGPU_MEMORY=1Gi", "VGPU_RDMA=true", "VGPU_PROFILE=img"])
    assert (sc.source, sc.raw["rdma"], sc.names["rdma"]) == ("env", "true", "VGPU_RDMA")
    # pod scope: the pod's vgpu.io/rdma, for the pod's one slice
    sc = scope(cri("container", **{"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"}))
    assert (sc.kind, sc.raw) == ("pod", {"memory": "1Gi", "rdma": "true"})
    # container scope (the device plugin's): the pod's vgpu.io/rdma applies too
    sc = scope(cri("container", **{"vgpu.io/rdma": "true", "vgpu.io/priority": "high",
                                   "vgpu.io/container-memory": "2Gi"}))
    assert (sc.kind, sc.raw) == ("container", {"memory": "2Gi", "rdma": "true"})
    assert sc.names["rdma"] == "vgpu.io/rdma"
    assert "vgpu.io/rdma" in request.POD_ANNOTATIONS


@pytest.mark.parametrize("value, want", [("true", True), ("false", False), (" true ", True)])
def test_rdma_values(value, want):
    assert request.validate({"rdma": value}, "annotation") == {"rdma": want}


@pytest.mark.parametrize("value", ["yes", "1", "True", "", "on"])
def test_a_bad_rdma_value_is_refused_quoting_it(value):
    with pytest.raises(ValueError) as ei:
        request.validate({"rdma": value}, "annotation")
    assert str(ei.value) == f'vgpu.io/rdma "{value}": is not true or false'
    with pytest.raises(ValueError, match=r'^VGPU_RDMA "yes": is not true or false$'):
        request.validate({"rdma": "yes"}, "env")


# ---- the profiles ---------------------------------------------------------
PROFILES = """
[profiles.rd]
memory = "1GiB"
allow_rdma = true
[profiles.nord]
memory = "1GiB"
allow_rdma = false
[profiles.plain]
memory = "1GiB"
"""
POD_LABELS = {"io.kubernetes.pod.namespace": "team", "io.kubernetes.pod.name": "web"}


def test_allow_rdma_is_parsed_and_described():
    c = parse_config(PROFILES)
    assert (c.limits["rd"].allow_rdma, c.limits["nord"].allow_rdma) == (True, False)
    assert "plain" not in c.limits
    assert "allow_rdma true" in c.limits["rd"].describe()
    from vgpu.daemon.config import ConfigError
    with pytest.raises(ConfigError, match=r'profiles\.p\.allow_rdma: "yes" is not true or false'):
        parse_config('[profiles.p]\nallow_rdma = "yes"\n', "f.toml")


@pytest.mark.parametrize("profile, labels, from_image, refused", [
    (None, {}, False, None),                          # the operator's (ctr, vgpuctl)
    ("plain", {}, False, None),
    ("rd", {}, False, None),
    ("nord", {}, False, 'RDMA is not allowed by profile "nord" (allow_rdma = false)'),
    (None, POD_LABELS, False, 'RDMA for a request from a pod in namespace "team" needs a '
                              'profile with allow_rdma = true; none was named (such '
                              'profiles: rd)'),
    ("plain", POD_LABELS, False, 'profile "plain" does not have it'),
    ("rd", POD_LABELS, False, None),
    ("nord", POD_LABELS, False, "allow_rdma = false"),
    ("plain", {}, True, "from the container image's environment needs"),
    ("rd", {}, True, None),
])
def test_who_may_ask_for_rdma(profile, labels, from_image, refused):
    c = parse_config(PROFILES)
    if refused is None:
        c.admit_rdma(profile, labels, from_image)
    else:
        with pytest.raises(ValueError) as ei:
            c.admit_rdma(profile, labels, from_image)
        assert refused in str(ei.value)


def test_the_example_configs_allow_rdma_parses_when_uncommented():
    from pathlib import Path
    import re
    text = (Path(__file__).resolve().parents[2] / "config" / "vgpud.example.toml").read_text()
    block = re.search(r"\[profiles\.small\]\n(?:.*\n)*?\n", text).group(0)
    assert "# allow_rdma = true" in block
    c = parse_config(text.replace(block, block.replace("# ", "")), "example")
    assert c.limits["small"].allow_rdma is True


# ---- vgpud's plan ---------------------------------------------------------
async def test_plan_says_where_create_goes_and_makes_nothing(env):
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    await call(mgr, "create", container="other", gpus=[0], memory="1GiB")
    saved = mgr.store.path.read_bytes()
    r = await call(mgr, "plan", container="c", gpus=[1], memory="1GiB", rdma=True)
    p = r["result"]
    assert p == {"container": "c", "exists": False,
                 "gpus": [{"index": 1, "uuid": mgr.gpus[1].uuid}],
                 "rdma": {"hca": "mlx5_1", "nodes": [["uverbs1", IB_MAJOR, 193],
                                                     ["rdma_cm", MISC_MAJOR, 58]],
                          "handles": mgr.cfg.rdma.hca_handles,
                          "objects": mgr.cfg.rdma.hca_objects}}
    assert list(mgr.records) == ["other"] and len(k.slices_) == 1
    assert mgr.store.path.read_bytes() == saved
    # without GPUs: the placement's choice, which create (on the plan) follows
    r = await call(mgr, "plan", container="d", memory="1GiB", rdma={"handles": 2})
    p = r["result"]
    assert p["rdma"]["handles"] == 2
    r = await call(mgr, "create", container="d", memory="1GiB",
                   gpus=[g["uuid"] for g in p["gpus"]], rdma={"hca": p["rdma"]["hca"],
                                                              "handles": 2})
    s = r["result"]["slice"]
    assert [g["gpu"] for g in s["gpus"]] == [g["index"] for g in p["gpus"]] == [1]
    assert {k: s["rdma"][k] for k in ("hca", "nodes", "handles", "objects")} == p["rdma"]
    # without rdma: the GPUs only
    r = await call(mgr, "plan", container="e", memory="1GiB")
    assert r["result"]["rdma"] is None and r["result"]["exists"] is False


async def test_plan_of_an_existing_slice_is_its_own(env):
    """A pod's slice made by a sibling: its GPUs and grant, whatever the
    request says; another owner's (owner given): refused as create
    refuses it."""
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    owner = {"runtime": "runc", "root": "/run/runc", "pod": UID}
    await call(mgr, "create", container="pod-x", gpus=[0], memory="1GiB", rdma=True,
               owner=owner)
    r = await call(mgr, "plan", container="pod-x", gpus=[1], memory="1GiB", rdma=True)
    assert r["result"]["exists"] is True
    assert r["result"]["gpus"] == [{"index": 0, "uuid": mgr.gpus[0].uuid}]
    assert r["result"]["rdma"]["hca"] == "mlx5_0"
    r = await call(mgr, "plan", container="pod-x", rdma=True, owner=owner)
    assert r["result"]["exists"] is True
    r = await call(mgr, "plan", container="pod-x", rdma=True,
                   owner={**owner, "pod": "other"})
    assert r["error"]["code"] == "exists" and "owned by runtime=runc" in r["error"]["message"]
    await call(mgr, "create", container="plain", memory="1GiB")
    r = await call(mgr, "plan", container="plain", rdma=True)
    assert r["result"]["rdma"] is None and r["result"]["exists"] is True


@pytest.mark.parametrize("args, code, words", [
    ({"rdma": "yes"}, "bad-request", 'args.rdma: "yes" is not true or an object'),
    ({"cgroup": "/sys/fs/cgroup/x"}, "bad-request", "args.cgroup: unknown argument of plan"),
    ({"memory": "4GB"}, "bad-request", 'args.memory: "4GB" is not a size'),
    ({"profile": "nope"}, "bad-request", 'args.profile: "nope" is not a profile'),
    ({"gpus": [7]}, "not-found", "GPU 7 is not one this node slices"),
    ({"rdma": {"hca": "mlx5_9"}}, "admission", "no RDMA adapter 'mlx5_9'"),
    ({"labels": POD_LABELS, "rdma": True}, "admission",
     'RDMA for a request from a pod in namespace "team"'),
    ({"memory": "64GiB"}, "admission", "exceeds"),
])
async def test_plan_checks_its_arguments_as_create_does(env, args, code, words):
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    r = await call(mgr, "plan", container="c", **{"memory": "1GiB", **args})
    assert r["error"]["code"] == code and words in r["error"]["message"], r
    assert not mgr.records


async def test_plan_without_an_adapter_is_refused(env):
    mgr, k, tmp = env
    r = await call(mgr, "plan", container="c", memory="1GiB", rdma=True)
    assert r["error"]["code"] == "admission"
    assert "no RDMA adapter with a uverbs device" in r["error"]["message"]


async def test_create_holds_rdma_to_the_profile(env):
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    r = await call(mgr, "create", container="c", memory="1GiB", rdma=True, labels=POD_LABELS)
    assert r["error"]["code"] == "admission" and "allow_rdma = true" in r["error"]["message"]
    assert "c" not in mgr.records and not k.slices_


# ---- the device rules -----------------------------------------------------
def rules_for(nodes, extra_rules=(), extra_devs=()):
    return {"linux": {
        "devices": [{"path": "/dev/infiniband/" + n, "type": "c", "major": ma, "minor": mi}
                    for n, ma, mi in nodes] + list(extra_devs),
        "resources": {"devices": [{"allow": False, "access": "rwm"},
                                  {"allow": True, "type": "c", "major": 1, "minor": 3,
                                   "access": "rwm"},
                                  {"allow": True, "type": "c", "major": 10, "minor": 200,
                                   "access": "rwm"}]
                      + [{"allow": True, "type": "c", "major": ma, "minor": mi, "access": "rw"}
                         for _, ma, mi in nodes] + list(extra_rules)}}}


def test_the_rules_must_be_exactly_the_adapters_nodes():
    assert request.rdma_device_problem(rules_for(NODES), NODES) is None
    # mknod-only rules (runc's own "c *:* m") open nothing
    assert request.rdma_device_problem(rules_for(NODES, [{"allow": True, "type": "c",
                                                          "access": "m"}]), NODES) is None
    bad = [
        (rules_for(NODES[:1]), "linux.devices lacks /dev/infiniband/rdma_cm"),
        (rules_for(NODES, [{"allow": True, "type": "c", "major": IB_MAJOR, "access": "rw"}]),
         f"allows c {IB_MAJOR}:* rw: another adapter's uverbs node would open"),
        (rules_for(NODES, [{"allow": True, "access": "rwm"}]), "allows a *:* rwm"),
        (rules_for(NODES, [{"allow": True, "type": "c", "major": IB_MAJOR, "minor": 193,
                            "access": "rw"}]), f"allows c {IB_MAJOR}:193 rw"),
        (rules_for(NODES, extra_devs=[{"path": "/dev/infiniband/uverbs1", "type": "c",
                                       "major": IB_MAJOR, "minor": 193}]),
         "linux.devices has /dev/infiniband/uverbs1"),
        (rules_for((("uverbs0", IB_MAJOR, 199), NODES[1])), "/dev/infiniband/uverbs0"),
    ]
    for config, words in bad:
        why = request.rdma_device_problem(config, NODES)
        assert why and words in why, (why, words)
    c = rules_for(NODES)
    c["linux"]["resources"]["devices"] = [r for r in c["linux"]["resources"]["devices"]
                                          if r.get("minor") != 58]
    assert "no rule allowing c 10:58 rw (rdma_cm)" in request.rdma_device_problem(c, NODES)


@pytest.mark.parametrize("text", [
    None, "", "{", "[]", '{"gpus": [], "rdma": {"hca": "x", "nodes": [["uverbs0", 1, 2]]}}',
    '{"gpus": ["G"], "rdma": {"hca": "../x", "nodes": [["uverbs0", 1, 2]]}}',
    '{"gpus": ["G"], "rdma": {"hca": "x", "nodes": [["sda", 8, 0]]}}',
    '{"gpus": [true], "rdma": {"hca": "x", "nodes": [["uverbs0", 1, 2]]}}',
])
def test_a_plan_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="is not vgpu-runtime's plan"):
        request.parse_plan(text)


def test_a_plan_round_trips():
    text = request.plan_annotation(["GPU-1"], "mlx5_0", NODES)
    assert request.parse_plan(text) == {"gpus": ["GPU-1"], "hca": "mlx5_0", "nodes": NODES}


# ---- vgpu-runtime ---------------------------------------------------------
@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeVgpud(tmp_path / "vgpud.sock") as f:
        f.hca = dict(GRANT)
        monkeypatch.setenv("VGPU_SOCKET", f.path)
        monkeypatch.setenv("VGPU_HOOK", "/usr/local/bin/vgpu-oci-hook")
        monkeypatch.setenv("VGPU_DRIVER_FILES", "0")
        monkeypatch.setattr(runtime, "vgpu_major", lambda: 510)
        yield f


def bundle(tmp_path, ann, name="b", env=None, linux=None):
    b = tmp_path / name
    b.mkdir(exist_ok=True)
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "annotations": ann,
              "process": {"args": ["sh"], "env": env or []},
              "linux": linux if linux is not None else {"resources": {"devices": [
                  {"allow": False, "access": "rwm"}]}}}
    (b / "config.json").write_text(json.dumps(config))
    return b


def config_of(b):
    return json.loads((b / "config.json").read_text())


def test_the_runtime_writes_one_rule_per_node_and_pins_the_plan(tmp_path, fake):
    b = bundle(tmp_path, {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true", "vgpu.io/gpus": "1"})
    assert runtime.prepare_bundle(str(b), "c1")
    c = config_of(b)
    (plan_req,) = [r for r in fake.requests if r["op"] == "plan"]
    assert plan_req["args"] == {"container": "c1", "rdma": True, "memory": 1 << 30,
                                "gpus": [1]}
    devs = [d for d in c["linux"]["devices"] if d["path"].startswith("/dev/infiniband/")]
    assert [(d["path"], d["type"], d["major"], d["minor"]) for d in devs] == [
        ("/dev/infiniband/uverbs0", "c", IB_MAJOR, 192),
        ("/dev/infiniband/rdma_cm", "c", MISC_MAJOR, 58)]
    rules = c["linux"]["resources"]["devices"]
    assert {"allow": True, "type": "c", "major": IB_MAJOR, "minor": 192, "access": "rw"} in rules
    assert {"allow": True, "type": "c", "major": MISC_MAJOR, "minor": 58, "access": "rw"} in rules
    # never a major-wide rule but vgpu's own (vgpu.ko decides its minors)
    assert [r for r in rules if r.get("allow") and r.get("minor") is None] == \
        [{"allow": True, "type": "c", "major": 510, "access": "rw"}]
    assert request.parse_plan(c["annotations"][PLAN_ANNOTATION]) == {
        "gpus": ["GPU-00000001-fake"], "hca": "mlx5_0", "nodes": NODES}
    assert request.rdma_device_problem(c, NODES) is None
    # idempotent: a second run changes nothing
    first = (b / "config.json").read_bytes()
    assert runtime.prepare_bundle(str(b), "c1")
    assert (b / "config.json").read_bytes() == first
    # a second run with another plan leaves nothing of the first
    fake.hca = {**GRANT, "hca": "mlx5_1", "nodes": [["uverbs1", IB_MAJOR, 193],
                                                    ["rdma_cm", MISC_MAJOR, 58]]}
    assert runtime.prepare_bundle(str(b), "c1")
    c = config_of(b)
    new = (("uverbs1", IB_MAJOR, 193), ("rdma_cm", MISC_MAJOR, 58))
    assert request.rdma_device_problem(c, new) is None
    assert not [r for r in c["linux"]["resources"]["devices"] if r.get("minor") == 192]


def test_a_pod_container_plans_its_pods_slice(tmp_path, fake):
    ann = cri("container", **{"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"})
    b = bundle(tmp_path, ann)
    assert runtime.prepare_bundle(str(b), "c1")
    (req,) = [r for r in fake.requests if r["op"] == "plan"]
    assert req["args"]["container"] == "pod-" + SB
    assert req["args"]["labels"] == {"io.kubernetes.pod.name": "web",
                                     "io.kubernetes.pod.namespace": "team"}
    assert PLAN_ANNOTATION in config_of(b)["annotations"]


def test_no_plan_for_a_sandbox_or_a_container_that_does_not_ask(tmp_path, fake):
    """Only the runtime's plan counts: one a pod wrote is taken out of every
    container that does not ask (a sandbox included), and a container that
    asks gets the runtime's in its place."""
    forged = {PLAN_ANNOTATION: request.plan_annotation(["GPU-00000000-fake"], "mlx5_7",
                                                       (("uverbs7", IB_MAJOR, 199),))}
    for i, ann in enumerate((
            cri("sandbox", **{"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"}, **forged),
            {"vgpu.io/memory": "1Gi", **forged},
            {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "false", **forged},
            {"other": "x", **forged})):
        b = bundle(tmp_path, ann, f"b{i}")
        runtime.prepare_bundle(str(b), "c1")
        c = config_of(b)
        assert PLAN_ANNOTATION not in c["annotations"], ann
        assert not c["linux"].get("devices"), ann
    assert not [r for r in fake.requests if r["op"] == "plan"]
    b = bundle(tmp_path, {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true", **forged}, "b9")
    runtime.prepare_bundle(str(b), "c1")
    assert request.parse_plan(config_of(b)["annotations"][PLAN_ANNOTATION])["hca"] == "mlx5_0"


def test_other_infiniband_devices_are_replaced(tmp_path, fake):
    """A container that asks for RDMA gets its slice's adapter only: a
    /dev/infiniband device config.json had (ctr --device) and its exact
    rule go; a rule that would open more (major-wide) fails the start."""
    linux = {"devices": [{"path": "/dev/infiniband/uverbs1", "type": "c", "major": IB_MAJOR,
                          "minor": 193}],
             "resources": {"devices": [{"allow": False, "access": "rwm"},
                                       {"allow": True, "type": "c", "major": IB_MAJOR,
                                        "minor": 193, "access": "rwm"}]}}
    b = bundle(tmp_path, {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"}, linux=linux)
    runtime.prepare_bundle(str(b), "c1")
    c = config_of(b)
    assert request.rdma_device_problem(c, NODES) is None
    assert not [d for d in c["linux"]["devices"] if d["minor"] == 193]
    linux["resources"]["devices"].append({"allow": True, "type": "c", "major": IB_MAJOR,
                                          "access": "rwm"})
    b = bundle(tmp_path, {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"}, "wide",
               linux=linux)
    with pytest.raises(ScopeError, match=f"allows c {IB_MAJOR}:\\* rwm: another adapter's"):
        runtime.prepare_bundle(str(b), "c1")


def run_runtime(tmp_path, bundle_dir, env):
    script = tmp_path / "fake-runc"
    script.write_text("#!/bin/sh\nexit 7\n")
    script.chmod(0o755)
    e = dict(os.environ, VGPU_RUNC=str(script), **env)
    return subprocess.run([sys.executable, "-m", "vgpu.cli.runtime", "create", "--bundle",
                           str(bundle_dir), "c9"], capture_output=True, text=True, env=e,
                          timeout=60)


@pytest.mark.parametrize("case, words", [
    ("bad", 'vgpu-runtime: container c9: bad vgpu.io/rdma "yes": is not true or false'),
    ("unreachable", "vgpu-runtime: container c9: asks for RDMA (vgpu.io/rdma) but vgpud "
                    "cannot say where its slice goes: "),
    ("no-adapter", "vgpu-runtime: container c9: asks for RDMA (vgpu.io/rdma) but vgpud "
                   "cannot say where its slice goes: admission: no RDMA adapter"),
    ("no-rdma", "vgpu-runtime: container c9: asks for RDMA (vgpu.io/rdma) but its slice c9 "
                "exists without an RDMA adapter"),
])
def test_the_runtime_fails_closed_with_one_line(tmp_path, case, words):
    with FakeVgpud(tmp_path / "vgpud.sock") as f:
        f.hca = None if case == "no-adapter" else dict(GRANT)
        if case == "no-rdma":
            f.slices["c9"] = {"container": "c9", "gpus": [{"index": 0, "uuid": "G"}]}
        b = bundle(tmp_path, {"vgpu.io/memory": "1Gi",
                              "vgpu.io/rdma": "yes" if case == "bad" else "true"})
        before = (b / "config.json").read_bytes()
        sock = str(tmp_path / "none.sock") if case == "unreachable" else f.path
        r = run_runtime(tmp_path, b, {"VGPU_SOCKET": sock, "VGPU_DRIVER_FILES": "0"})
    assert r.returncode == 1, r
    assert r.stderr.startswith(words) and r.stderr.count("\n") == 1, r.stderr
    assert (b / "config.json").read_bytes() == before          # runc never ran on it


# ---- the hook -------------------------------------------------------------
class FakeMounter:
    def setns_mnt(self, pid):
        pass


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    """stages.attach with the kernel-facing parts stubbed: the slice is
    created through FakeVgpud, the cgroup is a directory under tmp, the
    rdma cgroup writes and mounts are recorded."""
    cg = tmp_path / "cg" / "ctr"
    cg.mkdir(parents=True)
    limited = []
    monkeypatch.setattr(stages, "cgroup_of", lambda pid: (str(cg), None))
    monkeypatch.setattr(stages, "own_cgroup", lambda cid, pid, v2: v2)
    monkeypatch.setattr(stages, "wait_for", lambda p, t: True)
    monkeypatch.setattr(stages, "Mounter", FakeMounter)
    monkeypatch.setattr(stages, "mount_views", lambda *a, **k: None)
    monkeypatch.setattr(stages, "allow_devices", lambda *a: None)
    monkeypatch.setattr(stages, "runtime_argv", lambda: (["runc", "--root", "/run/r"], "/"))
    monkeypatch.setattr(stages, "limit_rdma", lambda cid, name, s, c, debug:
                        limited.append((name, s["rdma"]["hca"], c)))
    with FakeVgpud(tmp_path / "vgpud.sock") as f:
        f.hca = dict(GRANT)
        o = Opts()
        o.socket = f.path

        def attach(config, ann, cid="c1"):
            config = {**config, "root": {"path": "rootfs"}}
            state = {"id": cid, "bundle": str(tmp_path), "pid": 4242, "status": "creating"}
            sc = request.scope_of(state, {**config, "annotations": ann})
            return stages.attach(state, {**config, "annotations": ann}, o, lambda m: None, sc)
        yield f, attach, limited, str(cg)


def test_the_hook_creates_on_the_plan_and_sets_the_limits(hooked):
    f, attach, limited, cg = hooked
    config = rules_for(NODES)
    ann = {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true",
           PLAN_ANNOTATION: request.plan_annotation(["GPU-00000001-fake"], "mlx5_0", NODES)}
    assert attach(config, ann) == 0
    (req,) = [r for r in f.requests if r["op"] == "create"]
    assert req["args"]["gpus"] == ["GPU-00000001-fake"]
    assert req["args"]["rdma"] == {"hca": "mlx5_0"}
    assert limited == [("c1", "mlx5_0", cg)]
    assert "c1" in f.slices


@pytest.mark.parametrize("case, words", [
    ("other-hca", "slice c1 has adapter mlx5_1 (uverbs1 231:193, rdma_cm 10:58), not mlx5_0 "
                  "(uverbs0 231:192, rdma_cm 10:58) as vgpu-runtime planned"),
    ("wide-rule", "config.json: linux.resources.devices allows c 231:* rw"),
    ("no-plan", "asks for RDMA (vgpu.io/rdma) but config.json has no plan of vgpu-runtime's"),
    ("bad-plan", "vgpu.io/runtime-plan '{' is not vgpu-runtime's plan"),
])
def test_the_hook_refuses_a_slice_that_is_not_the_plans(hooked, case, words):
    """The slice vgpud made (or a pod's, handed back) must be the plan's
    adapter and nodes, and config.json's rules exactly those nodes; else
    the start fails and a slice it made goes again."""
    f, attach, limited, cg = hooked
    config = rules_for(NODES)
    plan = request.plan_annotation(["GPU-00000000-fake"], "mlx5_0", NODES)
    if case == "other-hca":
        # vgpud's adapters changed since the plan (the fake gives whatever is named)
        f.hca = {**GRANT, "hca": "mlx5_1", "nodes": [["uverbs1", IB_MAJOR, 193],
                                                     ["rdma_cm", MISC_MAJOR, 58]]}
        f.slices["c1"] = {"container": "c1", "owner": None, "rdma": dict(f.hca),
                          "gpus": [{"index": 0}]}
    if case == "wide-rule":
        config["linux"]["resources"]["devices"].append(
            {"allow": True, "type": "c", "major": IB_MAJOR, "access": "rw"})
    ann = {"vgpu.io/memory": "1Gi", "vgpu.io/rdma": "true"}
    if case != "no-plan":
        ann[PLAN_ANNOTATION] = "{" if case == "bad-plan" else plan
    if case == "other-hca":
        # a reused slice: the same owner's (the fake hands it back)
        from vgpu.cli.hook.container import owner_of
        f.slices["c1"]["owner"] = owner_of({"id": "c1", "bundle": "/x"}, {},
                                           ["runc", "--root", "/run/r"])
    with pytest.raises(HookError) as ei:
        attach(config, ann)
    assert words in str(ei.value), ei.value
    assert not limited
    if case == "wide-rule":
        assert "c1" not in f.slices                 # the slice it made went again
    if case in ("no-plan", "bad-plan"):
        assert not [r for r in f.requests if r["op"] == "create"]


def test_the_hook_ignores_a_plan_for_a_request_without_rdma(hooked):
    f, attach, limited, cg = hooked
    ann = {"vgpu.io/memory": "1Gi",
           PLAN_ANNOTATION: request.plan_annotation(["GPU-00000001-fake"], "mlx5_0", NODES)}
    assert attach(rules_for(NODES), ann) == 0
    (req,) = [r for r in f.requests if r["op"] == "create"]
    assert "rdma" not in req["args"] and "gpus" not in req["args"]
    assert not limited
