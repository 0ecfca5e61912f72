"""Containers end to end in the VM: real runc, the real vgpud (with vgpufs),
vgpu.ko and nvsim; no fakes.

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_containers.py

Containers are started exactly as containerd would start them through the
runtime wrapper: ``python -m vgpu.cli.runtime --root R run --bundle B ID``
(vgpu-runtime wires the OCI hook into config.json and execs runc).  A
bundle's rootfs is a directory under tmp with the host's /usr, /etc,
/root/.pyenv and the repository bind-mounted read-only (the /bin, /lib...
symlinks copied), so the repository's venv Python runs inside.

One vgpud (module scope: it takes a while to start under TCG) with its
socket, state and vgpufs under tmp and a 1 s GC interval.  Every container
a test starts is deleted (forced) at teardown, every slice left is deleted.
Python under TCG is slow: the tests are few and each container does much.
"""

from __future__ import annotations

import json
import os
import signal

from container_support import (MiB, PY, SHOW, containerd, daemon, nvsim_used, poll,  # noqa: F401
                               pytestmark, runc, video_memory)

PROBE = f"{PY} -m vgpu.abi.nvclient probe --chunk 16MiB --json"


def test_slice_container_sees_its_nodes_allocates_its_quota_and_exit_releases(runc, daemon):
    b = runc.bundle("c-64", SHOW + PROBE, {"vgpu.io/memory": "64MiB", "vgpu.io/gpus": "0"})
    r = runc.run("c-64", b)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{daemon.log()}"
    dev = [l for l in r.stdout.splitlines() if l.startswith("DEV:")]
    assert dev and sorted(dev[0].split()[1:]) == ["nvidia-uvm", "nvidia0", "nvidiactl"], r.stdout
    assert video_memory(r.stdout) == ["64 MB"], r.stdout
    assert r.stdout.count("INFO /proc/driver/nvidia/gpus/") == 1, r.stdout
    probe = json.loads(r.stdout[r.stdout.index("{"):])
    assert probe["chunks"] * probe["chunk"] == 64 * MiB, probe
    assert "NO_MEMORY" in json.dumps(probe), probe
    # the container exited: runc ran poststop, which deleted the slice
    assert "c-64" not in daemon.slices()
    assert poll(lambda: nvsim_used(0) == 0, 10), nvsim_used(0)
    # and its config.json carries the hook, wired by vgpu-runtime
    config = json.loads((b / "config.json").read_text())
    assert any("vgpu.cli.hook" in " ".join(h["args"]) for h in config["hooks"]["poststop"])


def test_allocated_container_without_the_runtime_fails_naming_it(runc, daemon, tmp_path):
    """What the device plugin's Allocate hands a container (its annotations
    and the guard mount, vgpu.k8s.devices): under plain runc (a pod without
    runtimeClassName: vgpu) the start fails and the error names what is
    missing; through vgpu-runtime the guard is taken out and the container
    gets its slice."""
    from vgpu.k8s.devices import GUARD_TEXT, guard_mount
    src = tmp_path / "guard"
    src.write_text(GUARD_TEXT)
    dest, host, ro = guard_mount(src)
    ann = {"vgpu.io/container-memory": "64Mi", "vgpu.io/container-gpus": "0"}
    for cid in ("c-plain", "c-guarded"):
        b = runc.bundle(cid, SHOW, ann)
        config = json.loads((b / "config.json").read_text())
        config["mounts"].append({"destination": dest, "type": "bind", "source": host,
                                 "options": ["rbind", "ro" if ro else "rw"]})
        (b / "config.json").write_text(json.dumps(config))
    r = runc.runc("run", "--bundle", str(runc.tmp / "c-plain"), "c-plain")
    assert r.returncode != 0, r.stdout
    assert "requires-runtimeClassName-vgpu" in r.stderr and "inside /proc" in r.stderr, r.stderr
    assert daemon.slices() == {}
    r = runc.run("c-guarded", runc.tmp / "c-guarded")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{daemon.log()}"
    assert video_memory(r.stdout) == ["64 MB"], r.stdout


def test_container_without_annotations_sees_no_gpu(runc, daemon):
    b = runc.bundle("c-none", "ls /dev; ls /proc/driver/nvidia 2>&1 || echo NO-PROC")
    r = runc.run("c-none", b)
    assert r.returncode == 0, r.stderr
    assert "nvidia" not in r.stdout.replace("/proc/driver/nvidia", ""), r.stdout
    assert "NO-PROC" in r.stdout
    assert "hooks" not in json.loads((b / "config.json").read_text())
    assert daemon.slices() == {}


WORKLOAD = r"""
import json, os, sys, time, glob
from vgpu.abi.nvclient import RmClient, RmError
name = sys.argv[1]
c = RmClient("/dev")
g = c.open_gpus()[0]
held = []
def fill():
    while True:
        try:
            held.append(g.alloc(16 << 20))
        except RmError as e:
            return e.name
def info():
    return "".join(open(f).read() for f in glob.glob("/proc/driver/nvidia/gpus/*/information"))
def put(tag, d):
    with open(f"/shared/{name}.{tag}.tmp", "w") as f:
        json.dump(d, f)
    os.rename(f"/shared/{name}.{tag}.tmp", f"/shared/{name}.{tag}")
put("r1", {"stop": fill(), "held": len(held) << 24, "info": info()})
while not os.path.exists(f"/shared/{name}.go"):
    time.sleep(0.2)
put("r2", {"stop": fill(), "held": len(held) << 24, "info": info()})
while True:
    time.sleep(60)
"""


def test_two_containers_isolated_set_quota_kill_and_gc(runc, daemon):
    (runc.shared / "w.py").write_text(WORKLOAD)
    for cid, mem in (("c-a", "64MiB"), ("c-b", "32MiB")):
        b = runc.bundle(cid, f"exec {PY} /shared/w.py {cid}",
                        {"vgpu.io/memory": mem, "vgpu.io/gpus": "0"})
        runc.run_detached(cid, b)

    def result(cid, tag):
        p = runc.shared / f"{cid}.{tag}"
        return json.loads(p.read_text()) if p.exists() else None

    def both(tag):
        return poll(lambda: result("c-a", tag) and result("c-b", tag), 300) and \
            (result("c-a", tag), result("c-b", tag))

    r = both("r1")
    assert r, f"workloads gave no result: {daemon.log()}"
    a1, b1 = r
    # each container its own quota on the one GPU
    assert (a1["held"], a1["stop"]) == (64 * MiB, "NV_ERR_NO_MEMORY"), a1
    assert (b1["held"], b1["stop"]) == (32 * MiB, "NV_ERR_NO_MEMORY"), b1
    assert video_memory(a1["info"]) == ["64 MB"] and video_memory(b1["info"]) == ["32 MB"]
    sl = daemon.slices()
    assert sorted(sl) == ["c-a", "c-b"], sl
    assert sl["c-a"]["gpus"][0]["memory_used"] == 64 * MiB
    assert sl["c-b"]["gpus"][0]["memory_used"] == 32 * MiB
    assert nvsim_used(0) == 96 * MiB

    # set-quota on a running container: its limit and its /proc view change
    daemon.ctl("set-quota", "c-a", "--memory", "96MiB")
    for cid in ("c-a", "c-b"):
        (runc.shared / f"{cid}.go").write_text("")
    a2, b2 = both("r2")
    assert a2["held"] == 96 * MiB and video_memory(a2["info"]) == ["96 MB"], a2
    assert b2["held"] == 32 * MiB and video_memory(b2["info"]) == ["32 MB"], b2
    assert nvsim_used(0) == 128 * MiB

    # runc kill + delete (as containerd does): poststop releases c-a's slice
    pid_b = runc.state("c-b")["pid"]
    assert runc.runc("kill", "c-a", "KILL").returncode == 0
    assert poll(lambda: runc.state("c-a").get("status") == "stopped", 60)
    d = runc.runtime("delete", "c-a", capture_output=True, text=True)
    assert d.returncode == 0, d.stderr
    assert sorted(daemon.slices()) == ["c-b"]
    assert poll(lambda: nvsim_used(0) == 32 * MiB, 10), nvsim_used(0)

    # c-b: its processes are SIGKILLed and no runc runs poststop: the
    # daemon's GC finds its cgroup empty and collects the slice
    os.kill(pid_b, signal.SIGKILL)
    assert poll(lambda: not daemon.slices(), 60), f"{daemon.slices()}\n{daemon.log()}"
    assert poll(lambda: nvsim_used(0) == 0, 10), nvsim_used(0)
    assert runc.state("c-b").get("status") == "stopped"     # poststop never ran


def test_bad_annotation_fails_the_start_with_no_slice_left(runc, daemon):
    b = runc.bundle("c-bad", "true", {"vgpu.io/memory": "64MB"})
    r = runc.run("c-bad", b)
    assert r.returncode != 0
    assert "container c-bad: bad vgpu.io/memory" in r.stderr and "64MB" in r.stderr, r.stderr
    assert daemon.slices() == {}
    assert "c-bad" not in runc.runc("list", "-q").stdout


# ------------------------------------------------------------------ containerd
def test_containerd_ctr_run_and_task_kill_release(containerd, runc, daemon):
    cid = "ctd-a"
    script = ("exec > /shared/ctd.out 2>&1; " + SHOW +
              "echo READY > /shared/ctd.ready; exec sleep 1000")
    r = containerd.run(cid, script, {"vgpu.io/memory": "64MiB", "vgpu.io/gpus": "0"},
                       detach=True)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{daemon.log()}"
    assert poll(lambda: (runc.shared / "ctd.ready").exists(), 120), containerd.log()
    out = (runc.shared / "ctd.out").read_text()
    dev = [l for l in out.splitlines() if l.startswith("DEV:")]
    assert dev and sorted(dev[0].split()[1:]) == ["nvidia-uvm", "nvidia0", "nvidiactl"], out
    assert video_memory(out) == ["64 MB"], out
    assert list(daemon.slices()) == [cid]
    r = containerd.ctr("task", "kill", "-s", "SIGKILL", cid)
    assert r.returncode == 0, r.stderr
    assert poll(lambda: not daemon.slices(), 60), daemon.slices()


# ------------------------------------------------------------------ isolation of nodes
def test_node_bind_mounted_into_another_container_cannot_be_opened(runc, daemon):
    """A copies nothing; B (no slice) gets A's vgpufs node bind-mounted in and
    the vgpu major allowed in its device cgroup, so only vgpu.ko's cgroup
    check stands between B and A's slice."""
    hold = ("exec 3<>/dev/nvidiactl && echo OPENED > /shared/a.ok; "
            "while [ ! -e /shared/a.go ]; do sleep 0.2; done")
    runc.run_detached("c-own", runc.bundle("c-own", hold, {"vgpu.io/memory": "32MiB",
                                                             "vgpu.io/gpus": "0"}))
    assert poll(lambda: (runc.shared / "a.ok").exists(), 120), daemon.log()
    sl = daemon.slices()["c-own"]
    b = runc.bundle("c-thief", "for n in nvidiactl nvidia0; do "
                    "(exec 3<>/dev/$n && echo OPENED $n) 2>&1 || echo REFUSED $n; done")
    config = json.loads((b / "config.json").read_text())
    for n in ("nvidiactl", "nvidia0"):
        config["mounts"].append({"destination": f"/dev/{n}", "type": "bind",
                                 "source": f"{daemon.fs}/c-own/dev/{n}", "options": ["bind"]})
    config["linux"].setdefault("resources", {}).setdefault("devices", []).append(
        {"allow": True, "type": "c", "major": sl["devices"]["major"], "access": "rwm"})
    (b / "config.json").write_text(json.dumps(config))
    r = runc.run("c-thief", b)
    assert r.returncode == 0, r.stderr
    assert "OPENED" not in r.stdout, r.stdout
    assert r.stdout.count("REFUSED") == 2 and "Operation not permitted" in r.stdout, r.stdout
    # the owner still works: its slice is untouched and it holds its node open
    assert daemon.slices()["c-own"]["open_files"] >= 1
    (runc.shared / "a.go").write_text("")


# ------------------------------------------------------------------ daemon restart
def test_daemon_crash_and_restart_rebinds_running_containers_views(runc, daemon):
    """vgpud is SIGKILLed while a container runs: its bind-mounted /proc view
    points at the dead FUSE connection.  The next vgpud mounts vgpufs afresh
    and re-binds the running container's view; the slice carries on."""
    script = ("n=0; while [ ! -e /shared/r.go ]; do "
              "if [ -e /shared/r.ask$n ]; then "
              "cat /proc/driver/nvidia/gpus/*/information > /shared/r.$n.tmp 2>&1; "
              "(exec 3<>/dev/nvidia0 && echo DEVOK) >> /shared/r.$n.tmp 2>&1; "
              "mv /shared/r.$n.tmp /shared/r.$n; n=$((n+1)); fi; sleep 0.2; done")
    runc.run_detached("c-r", runc.bundle("c-r", script, {"vgpu.io/memory": "48MiB",
                                                         "vgpu.io/gpus": "0"}))

    def ask(n):
        (runc.shared / f"r.ask{n}").write_text("")
        assert poll(lambda: (runc.shared / f"r.{n}").exists(), 120), daemon.log()
        return (runc.shared / f"r.{n}").read_text()

    out = ask(0)
    assert video_memory(out) == ["48 MB"] and "DEVOK" in out, out
    daemon.crash_and_restart()
    # the API answers before vgpufs is mounted and the views are re-bound
    assert poll(lambda: "vgpufs: views of" in daemon.log(), 120), daemon.log()
    out = ask(1)
    assert video_memory(out) == ["48 MB"] and "DEVOK" in out, f"{out}\n{daemon.log()}"
    assert "not connected" not in out
    assert "re-bound" in daemon.log()
    # and the restarted daemon still serves the slice: set-quota reaches the view
    daemon.ctl("set-quota", "c-r", "--memory", "64MiB")
    out = ask(2)
    assert video_memory(out) == ["64 MB"], out
    (runc.shared / "r.go").write_text("")
