"""vgpud's admin API (docs/api.md, vgpu.daemon.api) on the host, without a
socket: the framing and validation of requests (parse_request), good and
hostile lines, and each operation dispatched to the slice manager
(handle_line): create, show, set-quota, delete, owners, cgroup binding and
attach, kernel refusals, a handler's bug.

Against daemon_support's FakeKernel (the ``env`` fixture, conftest.py).  The
API's socket server: test_api_server.py; admission: test_admission.py;
reconcile and GC: test_reconcile.py; audit mode: test_audit.py; tracing:
test_tracing.py.
"""

from __future__ import annotations

import json
import os

import pytest

from vgpu.daemon import slices
from vgpu.daemon.ops import Ops
from vgpu.daemon.api import ApiError, handle_line, parse_request
from vgpu.daemon.kport import KernelPort
from vgpu.daemon import liveness
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import FakeInventory, GiB, call
# test_compute.py and test_kernel_service.py still import these from here;
# they belong to daemon_support.py (`from daemon_support import ... until`)
from daemon_support import CONFIG, FakeKernel, until as _until  # noqa: F401


# ------------------------------------------------------------ parsing
@pytest.mark.parametrize("line,code", [
    (b"garbage", "bad-request"),
    (b"", "bad-request"),
    (b"\xff\xfe", "bad-request"),
    (b"[1, 2]", "bad-request"),
    (b'"status"', "bad-request"),
    (b"null", "bad-request"),
    (b'{"op": "status"}', "bad-request"),                        # no version
    (b'{"v": 2, "op": "status"}', "unsupported-version"),
    (b'{"v": "1", "op": "status"}', "unsupported-version"),
    (b'{"v": true, "op": "status"}', "unsupported-version"),
    (b'{"v": 1, "op": "reboot"}', "unknown-op"),
    (b'{"v": 1, "op": 7}', "bad-request"),
    (b'{"v": 1}', "bad-request"),
    (b'{"v": 1, "op": "status", "args": []}', "bad-request"),
    (b'{"v": 1, "op": "status", "args": {"x": 1}}', "bad-request"),
    (b'{"v": 1, "op": "status", "extra": 1}', "bad-request"),
    (b'{"v": 1, "op": "status", "id": {"a": 1}}', "bad-request"),
    (b'{"v": 1, "op": "show"}', "bad-request"),
    (b'{"v": 1, "op": "show", "args": {"container": 5}}', "bad-request"),
    (b'{"v": 1, "op": "show", "args": {"container": ""}}', "bad-request"),
    (b'{"v": 1, "op": "show", "args": {"container": "a/b"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "memory": "8GB"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "memory": -1}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "memory": true}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "compute": "130%"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "compute": NaN}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "priority": "urgent"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "gpus": []}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "gpus": [0, 0]}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "pid": 0}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "pid": 1, "cgroup": "/x"}}', "bad-request"),
    (b'{"v": 1, "op": "create", "args": {"container": "c", "labels": {"a": 1}}}', "bad-request"),
    (b'{"v": 1, "op": "delete", "args": {"container": "c", "force": "yes"}}', "bad-request"),
    (b"[" * 100000, "too-large"),
    (b"[" * 50000, "bad-request"),                                # deep nesting
])
def test_hostile_lines(line, code):
    with pytest.raises(ApiError) as ei:
        parse_request(line)
    assert ei.value.code == code, ei.value.message


def test_message_names_argument_and_quotes_value():
    with pytest.raises(ApiError) as ei:
        parse_request(b'{"v": 1, "op": "set-quota", "args": {"container": "c", "memory": "8GB"}}')
    assert "args.memory" in ei.value.message and '"8GB"' in ei.value.message
    with pytest.raises(ApiError) as ei:
        parse_request(b'{"v": 1, "op": "set-quota", "args": {"container": "c", "colour": 1}}')
    assert "args.colour" in ei.value.message


def test_good_request_and_id_echo():
    r = parse_request(b'{"v": 1, "id": "x7", "op": "set-quota", "args": {"container": "c1", '
                      b'"memory": "8GiB", "compute": "30%", "priority": "high"}}')
    assert (r.id, r.op) == ("x7", "set-quota")
    assert r.args == {"container": "c1", "memory": 8 * GiB, "compute": 30.0, "priority": "high"}
    assert parse_request(b'{"v": 1, "op": "status"}').args == {}
    assert parse_request(b'{"v": 1, "op": "status", "args": null}').args == {}


async def test_error_reply_echoes_id_and_supported(env):
    mgr, _, _ = env
    r = json.loads(await handle_line(Ops(mgr), b'{"v": 9, "id": 42, "op": "status"}'))
    assert r["ok"] is False and r["id"] == 42 and r["supported"] == [1]
    assert r["error"]["code"] == "unsupported-version"
    r = json.loads(await handle_line(Ops(mgr), b'{"v": 1, "id": 3, "op": "nope"}'))
    assert (r["id"], r["error"]["code"]) == (3, "unknown-op")


# ------------------------------------------------------------ operations
async def test_create_show_set_delete(env):
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c1", memory="2GiB", labels={"vgpu.io/class": "x"})
    assert r["ok"], r
    s = r["result"]["slice"]
    assert s["gpus"][0]["memory_limit"] == 2 * GiB and s["compute"]["percent"] == 10
    assert s["devices"]["major"] == 240
    sid = s["slice_id"]
    assert k.slices_[sid].name == "c1"
    assert (await call(mgr, "create", container="c1"))["error"]["code"] == "exists"
    r = await call(mgr, "set-quota", container="c1", memory="3GiB", compute="30%")
    assert r["ok"] and k.slices_[sid].gpu(0).mem_limit == 3 * GiB
    assert r["result"]["slice"]["compute"]["percent"] == 30
    r = await call(mgr, "set-quota", container="c1", profile="small")
    assert r["result"]["slice"]["profile"] == "small"
    assert k.slices_[sid].gpu(0).mem_limit == 3 * GiB          # explicit memory wins
    assert (await call(mgr, "set-quota", container="c1", profile="huge"))["error"]["code"] == "bad-request"
    listed = (await call(mgr, "list"))["result"]["slices"]
    assert [x["container"] for x in listed] == ["c1"]
    state = json.loads((tmp / "state" / "state.json").read_text())
    assert state["slices"]["c1"]["slice_id"] == sid
    assert (await call(mgr, "delete", container="c1"))["ok"]
    assert sid not in k.slices_
    assert (await call(mgr, "show", container="c1"))["error"]["code"] == "not-found"
    assert (await call(mgr, "delete", container="c1"))["error"]["code"] == "not-found"


OWNER_A = {"runtime": "runc", "root": "/run/containerd/runc/k8s.io", "namespace": "k8s.io",
           "pod": "0c4a1e6e-7a5b-4c33-9a0e-3d5f7b2b1c11"}


async def test_owner_reuse_and_delete(env):
    """Slices are owned (docs/api.md, "Owners"): the owner gets its slice
    back, a same-named container of another runc root or containerd
    namespace is refused it and cannot delete it; vgpuctl (no owner) can."""
    mgr, k, tmp = env
    r = await call(mgr, "create", container="c1", memory="2GiB", owner=OWNER_A)
    assert r["ok"], r
    s = r["result"]["slice"]
    assert s["owner"] == OWNER_A and "reused" not in r["result"]
    # the same owner again (a hook wired twice): its slice, nothing new
    n_calls = len(k.calls)
    r = await call(mgr, "create", container="c1", memory="2GiB", owner=dict(OWNER_A))
    assert r["ok"] and r["result"]["reused"] is True
    assert r["result"]["slice"]["slice_id"] == s["slice_id"] and len(k.calls) == n_calls
    # another runtime root, another containerd namespace, another runtime,
    # no owner at all (vgpuctl): the name is taken, nothing is shared
    others = [dict(OWNER_A, root="/run/containerd/runc/default"),
              dict(OWNER_A, namespace="default"), dict(OWNER_A, runtime="crun"),
              {k_: v for k_, v in OWNER_A.items() if k_ != "pod"}]
    for other in others + [None]:
        args = {"owner": other} if other else {}
        r = await call(mgr, "create", container="c1", memory="2GiB", **args)
        assert r["error"]["code"] == "exists", (other, r)
        assert "k8s.io" in r["error"]["message"] and r["error"]["owner"] == OWNER_A
        if other:
            r = await call(mgr, "delete", container="c1", force=True, owner=other)
            assert r["error"]["code"] == "not-owner", (other, r)
            assert "left alone" in r["error"]["message"]
    assert s["slice_id"] in k.slices_ and len(mgr.records) == 1
    # persisted with the slice: a restarted daemon knows the owner
    state = json.loads((tmp / "state" / "state.json").read_text())
    assert state["slices"]["c1"]["owner"] == OWNER_A
    mgr2 = SliceManager(mgr.cfg, "test.toml", KernelPort(factory=lambda: k),
                        StateStore(tmp / "state"), FakeInventory())
    mgr2.load_state()
    assert mgr2.records["c1"].owner == OWNER_A
    r = await call(mgr2, "delete", container="c1", owner=dict(OWNER_A, pod="other"))
    assert r["error"]["code"] == "not-owner"
    # the owner deletes it; an operator's slice (no owner) is the operator's
    assert (await call(mgr2, "delete", container="c1", force=True, owner=OWNER_A))["ok"]
    assert s["slice_id"] not in k.slices_
    assert (await call(mgr2, "create", container="cdi-1", memory="1GiB"))["ok"]
    assert (await call(mgr2, "delete", container="cdi-1", owner=OWNER_A))["error"]["code"] \
        == "not-owner"
    assert (await call(mgr2, "delete", container="cdi-1"))["ok"]       # vgpuctl delete


@pytest.mark.parametrize("owner,words", [
    ("runc", "is not an owner object"),
    ({}, "args.owner.runtime: missing"),
    ({"runtime": "runc", "user": "x"}, "args.owner.user: unknown owner field"),
    ({"runtime": ""}, "args.owner.runtime"),
    ({"runtime": "runc/../x"}, "args.owner.runtime"),
    ({"runtime": 7}, "is not a string"),
    ({"runtime": "runc", "root": "run/runc"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/run/runc/"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/run/../runc"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/run/\nrunc"}, "normalized absolute path"),
    ({"runtime": "runc", "root": "/" + "r" * 2000}, "normalized absolute path"),
    ({"runtime": "runc", "namespace": "k8s io"}, "containerd namespace"),
    ({"runtime": "runc", "namespace": "-x"}, "containerd namespace"),
    ({"runtime": "runc", "namespace": "a" * 77}, "containerd namespace"),
    ({"runtime": "runc", "pod": "uid with space"}, "pod uid"),
    ({"runtime": "runc", "pod": None}, "is not a string"),
])
async def test_bad_owner_is_refused_and_leaves_nothing(env, owner, words):
    mgr, k, tmp = env
    for op, args in (("create", {"container": "c9", "memory": "1GiB"}),
                     ("delete", {"container": "c9"})):
        r = await call(mgr, op, owner=owner, **args)
        assert r["error"]["code"] == "bad-request", r
        assert words in r["error"]["message"], r["error"]["message"]
    assert mgr.records == {} and k.calls == []
    assert not (tmp / "state" / "state.json").exists()


async def test_kernel_refusal_and_unavailable(env, tmp_path):
    mgr, k, _ = env
    s = (await call(mgr, "create", container="c", memory="1GiB"))["result"]["slice"]
    k.slices_[s["slice_id"]].open_files = 1
    r = await call(mgr, "delete", container="c")
    assert r["error"]["code"] == "kernel" and "EBUSY" in r["error"]["message"]
    assert (await call(mgr, "delete", container="c", force=True))["ok"]

    from vgpu.vgpuko.netlink import VgpuNotLoaded

    def absent():
        raise VgpuNotLoaded()
    cfg = mgr.cfg
    m2 = SliceManager(cfg, "x", KernelPort(factory=absent), StateStore(tmp_path / "s2"), FakeInventory())
    assert (await call(m2, "create", container="c"))["error"]["code"] == "unavailable"
    st = (await call(m2, "status"))["result"]
    assert st["kernel"]["loaded"] is False and st["slices"] == 0


async def test_handler_bug_answers_internal(env, monkeypatch):
    mgr, _, _ = env

    async def boom():
        raise ZeroDivisionError("x")
    monkeypatch.setattr(mgr, "kdump", boom)
    r = await call(mgr, "list")
    assert r["error"]["code"] == "internal"


async def test_create_binds_cgroup(env, tmp_path, monkeypatch):
    """A slice created with a cgroup is bound to it in vgpu.ko (an fd of the
    directory, relative to the cgroup root unless absolute under it); the fd
    is closed again; a missing or non-directory cgroup is a bad request."""
    mgr, k, _ = env
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp_path))
    (tmp_path / "pod" / "c1").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    nfds = len(os.listdir("/proc/self/fd"))
    s = (await call(mgr, "create", container="c1", cgroup="pod/c1"))["result"]["slice"]
    assert k.slice_get(s["slice_id"]).cgroup_id == (tmp_path / "pod" / "c1").stat().st_ino
    s2 = (await call(mgr, "create", container="c2", cgroup=str(tmp_path / "pod")))["result"]["slice"]
    assert k.slice_get(s2["slice_id"]).cgroup_id == (tmp_path / "pod").stat().st_ino
    s3 = (await call(mgr, "create", container="c3"))["result"]["slice"]
    assert k.slice_get(s3["slice_id"]).cgroup_id == 0
    for bad in ("/no-such", "file"):
        r = await call(mgr, "create", container="bad", cgroup=bad)
        assert r["error"]["code"] == "bad-request", r
    assert "bad" not in mgr.records
    assert len(os.listdir("/proc/self/fd")) == nfds
    # recreated by reconcile: bound again
    del k.slices_[s["slice_id"]]
    counts = await mgr.reconcile()
    assert counts["recreated"] == 1
    assert k.slice_get(s["slice_id"]).cgroup_id == (tmp_path / "pod" / "c1").stat().st_ino


async def test_attach_binds_an_operators_slice_to_one_container_at_a_time(env, tmp_path,
                                                                          monkeypatch):
    """The CDI flow (a slice opens only from its container; the image's
    environment never reaches the hook): vgpu.ko opens an unbound slice for
    host administrators only, so a container's hook attaches the operator's
    slice to the container's own cgroup.  One container at a time; a slice
    made for a container is never attached elsewhere; bad cgroups leave
    nothing; the attachment survives a reconcile and is not a reason to
    collect the operator's slice."""
    mgr, k, _ = env
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp_path))
    for d in ("a", "b", "own"):
        (tmp_path / d).mkdir()
    (tmp_path / "a" / "cgroup.procs").write_text("101\n")   # a plain dir stands for a cgroup
    op = (await call(mgr, "create", container="op"))["result"]["slice"]
    assert k.slice_get(op["slice_id"]).cgroup_id == 0
    r = await call(mgr, "attach", container="op", cgroup="a")
    assert r["ok"], r
    assert r["result"]["slice"]["attached"] == "a"
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "a").stat().st_ino
    # another container while "a" still runs: refused, binding unchanged
    r = await call(mgr, "attach", container="op", cgroup="b")
    assert r["error"]["code"] == "exists" and "still run" in r["error"]["message"], r
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "a").stat().st_ino
    # "a" has ended: the next container gets it
    (tmp_path / "a" / "cgroup.procs").write_text("")
    assert (await call(mgr, "attach", container="op", cgroup="b"))["ok"]
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "b").stat().st_ino
    # not a container's slice, not a bad cgroup, not a missing slice
    own = (await call(mgr, "create", container="own", cgroup="own"))["result"]["slice"]
    r = await call(mgr, "attach", container="own", cgroup="b")
    assert r["error"]["code"] == "bad-request" and "made for a container" in r["error"]["message"]
    assert k.slice_get(own["slice_id"]).cgroup_id == (tmp_path / "own").stat().st_ino
    for bad in ("/no-such", ""):
        r = await call(mgr, "attach", container="op", cgroup=bad)
        assert r["error"]["code"] == "bad-request", r
    assert (await call(mgr, "attach", container="nope", cgroup="b"))["error"]["code"] == "not-found"
    assert mgr.records["op"].attached == "b"
    # the operator's slice is not collected when its container goes
    assert "op" not in await mgr.collect()
    # recreated by reconcile: attached again while its container runs
    (tmp_path / "b" / "cgroup.procs").write_text("202\n")
    del k.slices_[op["slice_id"]]
    assert (await mgr.reconcile())["recreated"] >= 1
    assert k.slice_get(op["slice_id"]).cgroup_id == (tmp_path / "b").stat().st_ino
