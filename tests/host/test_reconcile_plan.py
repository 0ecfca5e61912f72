"""vgpu.daemon.reconcile.plan: records, a kernel dump and the config in,
actions out; no kernel, no clock, no files."""
from types import SimpleNamespace

from vgpu.abi import uapi
from vgpu.daemon.config import SliceSpec
from vgpu.vgpuko.messages import Compute, GpuUsage, Slice
from vgpu.daemon.reconcile import Adopt, Correct, Recreate, plan
from vgpu.daemon.records import Effective, GpuSlot, SliceRecord

GiB = 1 << 30
SHARE = Compute(uapi.VGPU_COMPUTE_SHARE, 10000, uapi.VGPU_PRIORITY_LOW)


def rec(c, sid, mem=GiB, **kw):
    return SliceRecord(c, sid, gpus=[GpuSlot(0, "GPU-0", real_minor=0, gpu_id=256)],
                       memory={0: mem}, **kw)


def kslice(sid, name, mem=GiB, policy=uapi.VGPU_COMPUTE_SHARE, bp=10000, **kw):
    return Slice(sid, name, gpus=[GpuUsage(0, mem_limit=mem, real_minor=0, gpu_id=256,
                                           compute_policy=policy, compute_bp=bp)], **kw)


def run(records, kslices, *, traced=(), startup=False, alive=True, compute=True):
    return plan({r.container: r for r in records}, kslices,
                effective=lambda r: Effective(SliceSpec(memory=r.memory.get(0) or 2 * GiB,
                                                        policy="share", priority="low")),
                compute=(lambda r, e: {i: SHARE for i in range(len(r.gpus))}) if compute
                else (lambda r, e: None),
                gpu_of_minor=lambda m: SimpleNamespace(index=m, uuid=f"GPU-{m}"),
                attached_alive=lambda cg: alive, traced=set(traced), startup=startup, now=5.0)


def test_matching_slice_is_kept():
    p = run([rec("a", 1)], {1: kslice(1, "a")})
    assert p.kept == ["a"] and not (p.recreate or p.correct or p.adopt)
    assert p.effective["a"].spec.memory == GiB


def test_missing_slice_is_recreated_with_its_id_and_limits():
    p = run([rec("a", 1, cgroup="/cg")], {}, traced={1})
    assert p.recreate == [Recreate("a", False, [(0, GiB, 256)], {0: SHARE}, "/cg", True)]


def test_an_attachment_binds_only_while_its_cgroup_runs():
    assert run([rec("op", 1, attached="/x")], {}).recreate[0].bind == "/x"
    assert run([rec("op", 1, attached="/x")], {}, alive=False).recreate[0].bind is None


def test_wrong_limits_and_compute_are_corrected_only_where_they_differ():
    p = run([rec("a", 1)], {1: kslice(1, "a", mem=3 * GiB, policy=uapi.VGPU_COMPUTE_FIXED, bp=500)})
    assert p.correct == [Correct("a", 1, {0: GiB}, {0: SHARE}, {0: 3 * GiB},
                                 {0: (uapi.VGPU_COMPUTE_FIXED, 500, 0)})]
    p = run([rec("a", 1)], {1: kslice(1, "a", mem=3 * GiB)})
    assert p.correct[0].limits == {0: GiB} and p.correct[0].compute is None


def test_an_id_taken_by_another_name_moves_and_the_other_is_adopted():
    p = run([rec("a", 1)], {1: kslice(1, "b")})
    assert [r.container for r in p.recreate] == ["a"] and p.recreate[0].renumber
    assert not p.recreate[0].trace
    assert [a.record.container for a in p.adopt] == ["b"]


def test_unwanted_slice_is_adopted_with_its_limits_and_compute():
    ks = kslice(4, "stranger", mem=2 * GiB, policy=uapi.VGPU_COMPUTE_FIXED, bp=2000, audit=True)
    p = run([], {4: ks})
    (a,) = p.adopt
    r = a.record
    assert (r.container, r.slice_id, r.adopted, r.audit, r.created) == ("stranger", 4, True, True, 5.0)
    assert r.gpus == [GpuSlot(0, "GPU-0", 0, 256)] and r.memory == {0: 2 * GiB}
    assert r.explicit == SliceSpec(compute=20.0, policy="fixed", priority="low")
    assert a.compute == {0: SHARE}                 # the test's effective compute differs


def test_adopted_names_never_collide():
    p = run([rec("x", 1)], {1: kslice(1, "x"), 2: kslice(2, "x"), 3: kslice(3, "")})
    assert sorted(a.record.container for a in p.adopt) == ["slice-3", "x-2"]


def test_none_entries_are_ids_known_taken_not_slices():
    assert not run([], {9: None}).adopt


def test_a_record_the_config_refuses_is_reported_not_acted_on():
    p = plan({"a": rec("a", 1)}, {}, effective=lambda r: (_ for _ in ()).throw(ValueError("no")),
             compute=lambda r, e: None, gpu_of_minor=lambda m: None,
             attached_alive=lambda cg: True, traced=set())
    assert p.broken == [("a", "no")] and not p.recreate


def test_untrace_at_startup_only_and_only_untraced_by_us():
    ks = {1: kslice(1, "a", trace=True), 2: kslice(2, "b", trace=True)}
    recs = [rec("a", 1), rec("b", 2)]
    assert run(recs, ks, traced={1}, startup=True).untrace == [2]
    assert run(recs, ks, traced={1}).untrace == []


def test_without_compute_nothing_about_compute_is_planned():
    p = run([rec("a", 1)], {1: kslice(1, "a", policy=uapi.VGPU_COMPUTE_FIXED, bp=5)}, compute=False)
    assert p.kept == ["a"]
