"""RDMA beside a slice (docs/rdma.md), on the host: the adapter vgpud gives
a slice (the closest to its GPU, or the named one), what it records and
keeps over a restart, the API's checks, live limit changes, the CDI spec's
nodes, and the hook setting the rdma cgroup's limits.  Fake sysfs trees
(topology_fixtures.py) stand in for the node's PCI tree and adapters;
soft-RoCE in the VM is tests/vm/test_rdma.py's."""
from __future__ import annotations

import json

import pytest

from prometheus_client.parser import text_string_to_metric_families as parse_text

from daemon_support import FakeInventory, call
from topology_fixtures import IB_MAJOR, MISC_MAJOR, two_gpu_node
from vgpu.cli.hook.cmdline import HookError
from vgpu.cli.hook import stages
from vgpu.common import rdma, rdmanl, topology
from vgpu.common.cdi import cdi_spec
from vgpu.common.rdma import RdmaGrant
from vgpu.daemon import liveness, metrics
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

# ---- the grant -----------------------------------------------------------
def test_a_grant_round_trips_and_junk_is_refused():
    g = RdmaGrant("mlx5_0", (("uverbs0", IB_MAJOR, 192), ("rdma_cm", 10, 58)), 4, 1000)
    assert RdmaGrant.from_json(json.loads(json.dumps(g.to_json()))) == g
    assert g.rdma_max() == "mlx5_0 hca_handle=4 hca_object=1000"
    assert g.with_limits(2, 9) == RdmaGrant("mlx5_0", g.nodes, 2, 9)
    good = g.to_json()
    for bad in ({**good, "hca": "../x"}, {**good, "nodes": []},
                {**good, "nodes": [["sda", 8, 0]]}, {**good, "nodes": [["uverbs0", -1, 0]]},
                {**good, "handles": 0}, {**good, "objects": True}, {**good, "extra": 1},
                {k: v for k, v in good.items() if k != "hca"}, [], None):
        with pytest.raises(ValueError):
            RdmaGrant.from_json(bad)


def test_the_closest_adapter_then_the_least_used(tmp_path):
    two_gpu_node(tmp_path)
    hs = topology.hcas(str(tmp_path))
    assert topology.choose("0000:02:00.0", hs, {}, sysfs=str(tmp_path)).name == "mlx5_1"
    assert topology.choose("0000:01:00.0", hs, {"mlx5_0": 9}, sysfs=str(tmp_path)).name \
        == "mlx5_0"                                   # closer wins over less used
    # equally far (a GPU sysfs does not know): the less used, then by name
    assert topology.choose("0000:0f:00.0", hs, {"mlx5_0": 1}, sysfs=str(tmp_path)).name \
        == "mlx5_1"
    assert topology.choose("0000:0f:00.0", hs, {}, "mlx5_0", str(tmp_path)).name == "mlx5_0"
    with pytest.raises(topology.RdmaError, match="no RDMA adapter 'mlx5_7'.*mlx5_0, mlx5_1"):
        topology.choose("0000:01:00.0", hs, {}, "mlx5_7", str(tmp_path))
    with pytest.raises(topology.RdmaError, match="no RDMA adapter with a uverbs device"):
        topology.choose("0000:01:00.0", [], {}, sysfs=str(tmp_path))
    g = topology.grant(hs[0], 3, 30, str(tmp_path))
    assert g.nodes == (("uverbs0", IB_MAJOR, 192), ("rdma_cm", MISC_MAJOR, 58))


# ---- vgpud ---------------------------------------------------------------
async def test_a_slice_with_rdma_gets_the_adapter_beside_its_gpu(env):
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    r = await call(mgr, "create", container="c", gpus=[1], memory="1GiB", rdma=True)
    rd = r["result"]["slice"]["rdma"]
    assert rd == {"hca": "mlx5_1", "nodes": [["uverbs1", IB_MAJOR, 193],
                                            ["rdma_cm", MISC_MAJOR, 58]],
                  "handles": mgr.cfg.rdma.hca_handles, "objects": mgr.cfg.rdma.hca_objects,
                  "used": None, "objects_by_type": None}    # bound to no cgroup yet
    r = await call(mgr, "create", container="d", gpus=[1], memory="1GiB",
                   rdma={"hca": "mlx5_0", "handles": 2, "objects": 100})
    assert r["result"]["slice"]["rdma"]["hca"] == "mlx5_0"
    assert r["result"]["slice"]["rdma"]["handles"] == 2
    # kept over a restart: the state file has it
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"),
                      FakeInventory())
    m2.load_state()
    assert m2.records["c"].rdma == mgr.records["c"].rdma
    assert m2.records["d"].rdma.handles == 2
    # without: none
    r = await call(mgr, "create", container="e", memory="1GiB")
    assert r["result"]["slice"]["rdma"] is None


async def test_rdma_where_there_is_none_is_refused_and_leaves_nothing(env):
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c", memory="1GiB", rdma=True)
    assert r["error"]["code"] == "admission", r
    assert "no RDMA adapter with a uverbs device on this node" in r["error"]["message"]
    assert "c" not in mgr.records and not k.slices_
    two_gpu_node(tmp / "sys")
    r = await call(mgr, "create", container="c", memory="1GiB", rdma={"hca": "mlx5_9"})
    assert r["error"]["code"] == "admission" and "mlx5_9" in r["error"]["message"]
    assert "c" not in mgr.records and not k.slices_


@pytest.mark.parametrize("rd,words", [
    ("yes", 'args.rdma: "yes" is not true or an object'),
    (False, "args.rdma: false is not true or an object"),
    ({"hca": "a/b"}, "args.rdma.hca"),
    ({"handles": 0}, "args.rdma.handles: 0 is not a whole number from 1 to 65536"),
    ({"objects": 1 << 30}, "args.rdma.objects"),
    ({"handles": "4"}, "args.rdma.handles"),
    ({"max": 1}, "args.rdma.max: unknown key (known: hca, handles, objects)"),
])
async def test_a_bad_rdma_argument_is_refused(env, rd, words):
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    r = await call(mgr, "create", container="c", memory="1GiB", rdma=rd)
    assert r["error"]["code"] == "bad-request" and words in r["error"]["message"], r
    assert "c" not in mgr.records


async def test_set_quota_changes_the_limits_not_the_adapter(env):
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    await call(mgr, "create", container="c", gpus=[0], memory="1GiB", rdma=True)
    await call(mgr, "create", container="plain", memory="1GiB")
    r = await call(mgr, "set-quota", container="c", rdma={"handles": 3})
    assert (r["result"]["slice"]["rdma"]["handles"], r["result"]["slice"]["rdma"]["objects"]) \
        == (3, mgr.cfg.rdma.hca_objects)
    assert mgr.records["c"].rdma.handles == 3
    r = await call(mgr, "set-quota", container="c", rdma={"hca": "mlx5_1"})
    assert r["error"]["code"] == "bad-request" and "it is chosen at create" in \
        r["error"]["message"]
    r = await call(mgr, "set-quota", container="plain", rdma={"objects": 5})
    assert r["error"]["code"] == "bad-request" and "has no RDMA" in r["error"]["message"]


async def test_set_quota_writes_the_limits_where_the_slice_is_attached(env, monkeypatch):
    """vgpud sets the new rdma.max on the cgroup the slice is bound to (the
    hook set the first at the container's start); one it cannot write is
    logged, the record still changes."""
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    await call(mgr, "create", container="c", gpus=[0], memory="1GiB", rdma=True)
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp / "cg"))
    cg = tmp / "cg" / "pod1"
    cg.mkdir(parents=True)
    (cg / "rdma.max").write_text("")
    mgr.records["c"] = mgr.records["c"].changed(attached="/pod1")
    await call(mgr, "set-quota", container="c", rdma={"handles": 5, "objects": 50})
    assert (cg / "rdma.max").read_text() == "mlx5_0 hca_handle=5 hca_object=50"
    (cg / "rdma.max").unlink()
    r = await call(mgr, "set-quota", container="c", rdma={"handles": 6})
    assert "error" not in r and mgr.records["c"].rdma.handles == 6


# ---- the container's side ------------------------------------------------
def test_the_cdi_spec_gives_the_adapters_nodes_one_rule_each():
    s = {"container": "c", "gpus": [{"gpu": 0}],
         "devices": {"major": 240, "ctl_minor": 0, "uvm_minor": 1, "gpu_minors": [2]},
         "rdma": {"hca": "mlx5_0", "nodes": [["uverbs0", IB_MAJOR, 192], ["rdma_cm", 10, 58]],
                  "handles": 4, "objects": 100}}
    nodes = cdi_spec([s], "/run/vgpu/fs")["devices"][0]["containerEdits"]["deviceNodes"]
    assert nodes[-2:] == [
        {"path": "/dev/infiniband/uverbs0", "hostPath": "/dev/infiniband/uverbs0", "type": "c",
         "major": IB_MAJOR, "minor": 192, "permissions": "rw"},
        {"path": "/dev/infiniband/rdma_cm", "hostPath": "/dev/infiniband/rdma_cm", "type": "c",
         "major": 10, "minor": 58, "permissions": "rw"}]
    # a node that is not an adapter's is never written into a spec
    s["rdma"]["nodes"] = [["../sda", 8, 0], ["uverbs0", "231", 192]]
    nodes = cdi_spec([s], "/run/vgpu/fs")["devices"][0]["containerEdits"]["deviceNodes"]
    assert not [n for n in nodes if "infiniband" in n["path"]]


def cgroup_tree(tmp):
    root = tmp / "cgroup"
    pod = root / "kubepods" / "pod1"
    pod.mkdir(parents=True)
    (root / "cgroup.subtree_control").write_text("cpu memory\n")
    (root / "kubepods" / "cgroup.subtree_control").write_text("cpu memory rdma\n")
    (pod / "cgroup.subtree_control").write_text("")
    (pod / "rdma.max").write_text("")
    return root, pod


def test_the_hook_sets_the_limits_and_enables_the_controller(tmp_path, monkeypatch):
    root, pod = cgroup_tree(tmp_path)
    two_gpu_node(tmp_path / "sys")
    monkeypatch.setattr(stages, "cgroup2_mount", lambda: str(root))
    g = {"hca": "mlx5_0", "nodes": [["uverbs0", IB_MAJOR, 192], ["rdma_cm", MISC_MAJOR, 58]],
         "handles": 2, "objects": 20}
    said = []
    stages.limit_rdma("ctr", "s", {"rdma": g}, str(pod), said.append, str(tmp_path / "sys"))
    assert (pod / "rdma.max").read_text() == "mlx5_0 hca_handle=2 hca_object=20"
    # "+rdma" written where it was missing (the file keeps the last write)
    assert (root / "cgroup.subtree_control").read_text() == "+rdma"
    assert (root / "kubepods" / "cgroup.subtree_control").read_text() == "cpu memory rdma\n"
    assert said == [f"rdma.max of {pod}: mlx5_0 hca_handle=2 hca_object=20"]
    stages.limit_rdma("ctr", "s", {"rdma": None}, str(pod), said.append)   # none: nothing


@pytest.mark.parametrize("nodes,words", [
    ([["uverbs1", IB_MAJOR, 193]], "uverbs1 (231:193, mlx5_1)"),      # another adapter's now
    ([["uverbs0", IB_MAJOR, 200]], "uverbs0 (231:192)"),              # other numbers
    ([["uverbs5", IB_MAJOR, 197]], "uverbs5 (absent)"),
    ([["uverbs0", IB_MAJOR, 192], ["rdma_cm", MISC_MAJOR, 59]], "rdma_cm (10:58)"),
])
def test_the_hook_refuses_nodes_that_are_no_longer_the_adapters(tmp_path, monkeypatch, nodes,
                                                                 words):
    """uverbs numbers follow the order adapters appeared in: the grant's
    must still be its adapter's when the container starts, or the device
    rules would hand it another adapter."""
    root, pod = cgroup_tree(tmp_path)
    two_gpu_node(tmp_path / "sys")
    monkeypatch.setattr(stages, "cgroup2_mount", lambda: str(root))
    g = {"hca": "mlx5_0", "nodes": nodes, "handles": 2, "objects": 20}
    with pytest.raises(HookError, match="no longer mlx5_0's") as ei:
        stages.limit_rdma("ctr", "s", {"rdma": g}, str(pod), lambda m: None,
                          str(tmp_path / "sys"))
    assert words in str(ei.value), ei.value
    assert (pod / "rdma.max").read_text() == ""                 # nothing written


async def test_the_hook_takes_the_grant_as_vgpud_shows_it(env, monkeypatch):
    """What the hook gets is attach's answer, the slice view (with `used`
    beside the grant): it sets the limits from it (this failed in the VM:
    the view's extra key was refused as "not a grant")."""
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    r = await call(mgr, "create", container="c", gpus=[0], memory="1GiB",
                   rdma={"handles": 5, "objects": 9})
    view = r["result"]["slice"]
    assert "used" in view["rdma"]
    root, pod = cgroup_tree(tmp)
    monkeypatch.setattr(stages, "cgroup2_mount", lambda: str(root))
    stages.limit_rdma("ctr", "c", view, str(pod), lambda m: None, str(tmp / "sys"))
    assert (pod / "rdma.max").read_text() == "mlx5_0 hca_handle=5 hca_object=9"


def test_the_hook_fails_closed_when_it_cannot_set_them(tmp_path, monkeypatch):
    root, pod = cgroup_tree(tmp_path)
    monkeypatch.setattr(stages, "cgroup2_mount", lambda: str(root))
    (pod / "rdma.max").unlink()                  # no rdma controller there
    two_gpu_node(tmp_path / "sys")
    g = {"hca": "mlx5_0", "nodes": [["uverbs0", IB_MAJOR, 192]], "handles": 2, "objects": 20}
    with pytest.raises(HookError, match="the rdma cgroup limits on"):
        stages.limit_rdma("ctr", "s", {"rdma": g}, str(pod), lambda m: None,
                          str(tmp_path / "sys"))
    with pytest.raises(HookError, match="not a grant"):
        stages.limit_rdma("ctr", "s", {"rdma": {"hca": "x"}}, str(pod), lambda m: None)
    with pytest.raises(OSError, match="is not under"):
        rdma.enable_rdma_controller(str(tmp_path), str(root))


# ---- what it holds ---------------------------------------------------------
def test_usage_is_read_from_rdma_current(tmp_path):
    (tmp_path / "rdma.current").write_text("mlx5_1 hca_handle=0 hca_object=0\n"
                                           "mlx5_0 hca_handle=2 hca_object=41\n")
    assert rdma.read_usage(str(tmp_path), "mlx5_0") == {"handles": 2, "objects": 41}
    assert rdma.read_usage(str(tmp_path), "mlx5_9") is None
    (tmp_path / "rdma.current").write_text("mlx5_0 hca_handle=max\n")
    assert rdma.read_usage(str(tmp_path), "mlx5_0") is None
    assert rdma.read_usage(str(tmp_path / "gone"), "mlx5_0") is None


async def test_show_and_the_metrics_say_what_the_slice_holds(env, monkeypatch):
    """Slice.rdma.used (and the metrics) from the rdma cgroup's count on
    the cgroup the slice is bound to; null while it is bound to none."""
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    await call(mgr, "create", container="c", gpus=[0], memory="1GiB",
               rdma={"handles": 4, "objects": 64})
    r = await call(mgr, "show", container="c")
    assert r["result"]["slice"]["rdma"]["used"] is None
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp / "cg"))
    (tmp / "cg" / "ctr").mkdir(parents=True)
    (tmp / "cg" / "ctr" / "rdma.current").write_text("mlx5_0 hca_handle=1 hca_object=5\n")
    mgr.records["c"] = mgr.records["c"].changed(attached="/ctr")
    r = await call(mgr, "show", container="c")
    assert r["result"]["slice"]["rdma"]["used"] == {"handles": 1, "objects": 5}
    got = {s.name: s for fam in parse_text(metrics.render(mgr)) for s in fam.samples
           if s.name.startswith("vgpu_slice_rdma")}
    assert {n: (s.labels["hca"], s.value) for n, s in got.items()} == {
        "vgpu_slice_rdma_handles_limit": ("mlx5_0", 4),
        "vgpu_slice_rdma_objects_limit": ("mlx5_0", 64),
        "vgpu_slice_rdma_handles": ("mlx5_0", 1), "vgpu_slice_rdma_objects": ("mlx5_0", 5)}


async def test_show_counts_the_objects_of_the_slices_processes(env, monkeypatch):
    """Slice.rdma.objects_by_type: the RDMA netlink dump's objects on the
    slice's adapter, of the processes in the cgroup it is bound to (and
    below), not another's."""
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    await call(mgr, "create", container="c", gpus=[0], memory="1GiB", rdma=True)
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp / "cg"))
    (tmp / "cg" / "pod" / "ctr").mkdir(parents=True)
    (tmp / "cg" / "pod" / "cgroup.procs").write_text("")
    (tmp / "cg" / "pod" / "ctr" / "cgroup.procs").write_text("100\n101\n")
    mgr.records["c"] = mgr.records["c"].changed(attached="/pod")
    asked = []

    def dump(hca, timeout=2.0):
        asked.append(hca)
        return {100: {"qp": 1, "cq": 2, "mr": 1, "pd": 1}, 101: {"qp": 1, "cq": 0, "mr": 3,
                                                                  "pd": 0},
                300: {"qp": 9, "cq": 9, "mr": 9, "pd": 9}}
    monkeypatch.setattr(rdmanl, "objects_by_pid", dump)
    r = await call(mgr, "show", container="c")
    assert r["result"]["slice"]["rdma"]["objects_by_type"] == {"qp": 2, "cq": 2, "mr": 4,
                                                               "pd": 1}
    assert asked == ["mlx5_0"]
    # list (vgpuctl top) and the metrics carry them too, dumped at most
    # once a second (show's dump just now serves)
    r = await call(mgr, "list")
    assert r["result"]["slices"][0]["rdma"]["objects_by_type"] == {"qp": 2, "cq": 2, "mr": 4,
                                                                   "pd": 1}
    await call(mgr, "list")
    assert asked == ["mlx5_0"]
    got = {s.labels["type"]: (s.labels["hca"], s.value)
           for fam in parse_text(metrics.render(mgr)) for s in fam.samples
           if s.name == "vgpu_slice_rdma_objects_by_type"}
    assert got == {"qp": ("mlx5_0", 2), "cq": ("mlx5_0", 2), "mr": ("mlx5_0", 4),
                   "pd": ("mlx5_0", 1)}

    def fails(hca, timeout=2.0):
        raise OSError(93, "Protocol not supported")       # no ib_core: no NETLINK_RDMA
    monkeypatch.setattr(rdmanl, "objects_by_pid", fails)
    r = await call(mgr, "show", container="c")
    assert r["result"]["slice"]["rdma"]["objects_by_type"] is None


async def test_delete_sets_the_limits_back_to_max_where_the_cgroup_stays(env, monkeypatch):
    """A slice deleted while its cgroup remains (a pod's, before the
    kubelet removes it): its rdma.max goes back to max, so the kernel frees
    the cgroup's pool before the cgroup goes; a cgroup already gone is no
    error."""
    mgr, k, tmp = env
    two_gpu_node(tmp / "sys")
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp / "cg"))
    for name in ("pod1", "pod2"):
        await call(mgr, "create", container=name, gpus=[0], memory="1GiB", rdma=True)
        mgr.records[name] = mgr.records[name].changed(attached=f"/{name}")
    (tmp / "cg" / "pod1").mkdir(parents=True)
    (tmp / "cg" / "pod1" / "rdma.max").write_text("mlx5_0 hca_handle=16 hca_object=65536")
    r = await call(mgr, "delete", container="pod1", force=True)
    assert "error" not in r
    assert (tmp / "cg" / "pod1" / "rdma.max").read_text() == \
        "mlx5_0 hca_handle=max hca_object=max"
    r = await call(mgr, "delete", container="pod2", force=True)       # its cgroup is gone
    assert "error" not in r and not mgr.records
