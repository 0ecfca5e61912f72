"""vgpu.daemon.liveness on directories standing for cgroups: a pod's
cgroup holds no process of its own (its containers' cgroups below it do),
so it lives while cgroup.events says ``populated 1``; cgroup.procs decides
only where there is no cgroup.events."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from vgpu.daemon import liveness


@pytest.fixture
def pod(tmp_path, monkeypatch):
    """A pod's cgroup (populated, no process of its own) with a sandbox's
    and two containers' cgroups below it."""
    monkeypatch.setattr(liveness, "CGROUP_ROOT", str(tmp_path))
    p = tmp_path / "kubepods" / "podUID"
    for d, procs in (("", ""), ("sandbox", "101\n"), ("app", "202\n203\n"), ("side", "303\n")):
        (p / d).mkdir(parents=True, exist_ok=True)
        (p / d / "cgroup.procs").write_text(procs)
        (p / d / "cgroup.events").write_text(f"populated {int(bool(procs) or not d)}\nfrozen 0\n")
    return p


def rec(cgroup=None, pid=None, pid_start=None):
    return SimpleNamespace(cgroup=cgroup, pid=pid, pid_start=pid_start)


def test_a_pod_cgroup_lives_while_populated(pod):
    assert not liveness.gone("kubepods/podUID")
    (pod / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert liveness.gone("kubepods/podUID")


def test_events_win_over_procs_and_procs_decide_without_events(pod):
    (pod / "app" / "cgroup.events").write_text("populated 0\n")
    assert liveness.gone(str(pod / "app"))                 # procs still lists 202: events decide
    os.remove(pod / "side" / "cgroup.events")       # no cgroup.events (the root cgroup)
    assert not liveness.gone(str(pod / "side"))
    (pod / "side" / "cgroup.procs").write_text("")
    assert liveness.gone(str(pod / "side"))


def test_a_missing_cgroup_is_gone(pod):
    assert liveness.gone("kubepods/no-such-pod")


def test_live_pids_one_per_container_of_a_pod(pod):
    assert sorted(liveness.live_pids(rec("kubepods/podUID"))) == [101, 202, 303]
    assert liveness.live_pids(rec(str(pod / "app"))) == [202]
    assert liveness.live_pids(rec("kubepods/no-such-pod")) == []


def test_live_pids_are_bounded(pod, monkeypatch):
    monkeypatch.setattr(liveness, "LIVE_PID_DIRS", 2)
    assert len(liveness.live_pids(rec("kubepods/podUID"))) == 1     # the pod's own dir, then one


def test_live_pids_of_a_slice_made_by_pid():
    me = os.getpid()
    assert liveness.live_pids(rec(pid=me, pid_start=liveness.proc_start(me))) == [me]
    assert liveness.live_pids(rec(pid=me, pid_start=1)) == []       # another process's start time
