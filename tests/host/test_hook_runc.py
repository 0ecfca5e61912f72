"""vgpu-runtime + vgpu-oci-hook under the REAL runc on the host: a busybox
container is started through the wrapper (which wires the hook into
config.json), with tools/testbed/fake_vgpud.py as the daemon and a directory of
mknod'ed nodes standing in for vgpufs.  The VM tests run the same against
vgpud, vgpufs and vgpu.ko."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from runc_support import (BUSYBOX, LIST, REPO, RUNC, add_fake_nodes, env,  # noqa: F401
                          make_bundle, runc_run)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(RUNC, os.X_OK) or not os.access(BUSYBOX, os.X_OK),
    reason="needs root, runc and busybox")


def test_container_with_a_slice_sees_its_nodes_and_poststop_deletes(tmp_path, env):
    fake, fs = env["fake"], env["fs"]
    add_fake_nodes(fs, "ctr-a")
    b = make_bundle(tmp_path, "a", {"vgpu.io/memory": "4GiB", "vgpu.io/compute": "30%"},
                    args=("sh", "-c", LIST))
    r = runc_run(env, b, "ctr-a")
    assert r.returncode == 0, r.stderr
    assert "nvidiactl" in r.stdout and "nvidia0" in r.stdout and "nvidia-uvm" in r.stdout
    assert "vgpu slice of ctr-a" in r.stdout
    ops = [q["op"] for q in fake.requests]
    assert ops == ["create", "delete"], ops
    assert fake.requests[0]["args"]["memory"] == 4 << 30
    assert fake.requests[0]["args"]["compute"] == 30
    assert fake.slices == {}
    config = json.loads((b / "config.json").read_text())
    assert config["hooks"]["createRuntime"][0]["path"] == env["hook"]


def test_container_without_annotations_gets_nothing(tmp_path, env):
    b = make_bundle(tmp_path, "n", args=("sh", "-c", LIST))
    r = runc_run(env, b, "ctr-n")
    assert r.returncode == 0, r.stderr
    assert "NO-NODES" in r.stdout and "NO-PROC" in r.stdout
    assert env["fake"].requests == []
    assert "hooks" not in json.loads((b / "config.json").read_text())


def test_bad_annotation_fails_the_start_and_leaves_no_slice(tmp_path, env):
    b = make_bundle(tmp_path, "bad", {"vgpu.io/memory": "4GB"})
    r = runc_run(env, b, "ctr-bad")
    assert r.returncode != 0
    assert 'container ctr-bad: bad vgpu.io/memory' in r.stderr and '4GB' in r.stderr
    # runc runs poststop when it tears the failed container down: a delete
    # of a slice that never existed (not-found, fine); never a create
    assert env["fake"].slices == {}
    assert "create" not in [q["op"] for q in env["fake"].requests]
    st = subprocess.run([RUNC, "--root", env["root"], "list", "-q"], capture_output=True,
                        text=True)
    assert "ctr-bad" not in st.stdout


# What the hook adds to a start is measured by bench/container_start.py
# (host and VM), not by a timed test.


def test_slice_is_bound_to_the_containers_own_cgroup_and_no_vgpu_node_can_be_made(tmp_path, env):
    """A slice opens only from its container: the hook binds every slice to the container's own
    cgroup v2 (found through the unified hierarchy's mount, so hybrid hosts
    such as this one bind too; before, they sent a pid and got an unbound
    slice), and the device rules allow the slice's nodes read/write only:
    mknod of any vgpu minor, the slice's own or another's, is refused
    (before, "c <major>:* rwm" let a container make another slice's node)."""
    fake, fs = env["fake"], env["fs"]
    add_fake_nodes(fs, "ctr-m")
    mk = ("for m in 0 2 9 17; do busybox mknod /tmp/n$m c 510 $m 2>/dev/null "
          "&& echo MADE $m || echo REFUSED $m; done; cat /proc/self/cgroup")
    b = make_bundle(tmp_path, "m", {"vgpu.io/memory": "1GiB"}, args=("sh", "-c", mk))
    r = runc_run(env, b, "ctr-m")
    assert r.returncode == 0, r.stderr
    assert "MADE" not in r.stdout and r.stdout.count("REFUSED") == 4, r.stdout
    args = fake.requests[0]["args"]
    assert "pid" not in args, args
    unified = [ln.split(":", 2)[2] for ln in r.stdout.splitlines() if ln.startswith("0::")][0]
    assert args["cgroup"] == (hook_cgroups().cgroup2_mount() or "/sys/fs/cgroup").rstrip("/") + unified


def hook_cgroups():
    from vgpu.cli.hook import cgroups
    return cgroups


def test_same_name_in_another_runc_root_neither_gets_nor_deletes_the_slice(tmp_path, env):
    """Container ids are unique per runtime root only: "twin" under root B,
    while "twin" under root A runs, is refused its slice (never given A's
    nodes), and its poststop leaves A's slice alone; A's own poststop
    deletes it."""
    fake, fs = env["fake"], env["fs"]
    add_fake_nodes(fs, "twin")
    a = make_bundle(tmp_path, "a", {"vgpu.io/memory": "4GiB"}, args=("sh", "-c", "sleep 3"))
    os.symlink("busybox", a / "rootfs" / "bin" / "sleep")
    b = make_bundle(tmp_path, "b", {"vgpu.io/memory": "4GiB"}, args=("sh", "-c", LIST))
    root_b = str(tmp_path / "runc-root-b")
    # runc names a container's cgroup after its id unless told otherwise:
    # give each its own, as containerd does per namespace and pod
    for bundle, tag in ((a, "a"), (b, "b")):
        config = json.loads((bundle / "config.json").read_text())
        config["linux"]["cgroupsPath"] = f"/vgpu-test-{os.getpid()}-{tag}"
        (bundle / "config.json").write_text(json.dumps(config))
    e = dict(os.environ, VGPU_RUNC=RUNC, VGPU_HOOK=env["hook"], PYTHONPATH=REPO)
    wrapper = [sys.executable, "-m", "vgpu.cli.runtime"]
    pa = subprocess.Popen(wrapper + ["--root", env["root"], "run", "--bundle", str(a), "twin"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    try:
        deadline = time.monotonic() + 20
        while "twin" not in fake.slices and pa.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "twin" in fake.slices, pa.communicate()
        owner_a = fake.slices["twin"]["owner"]
        assert owner_a == {"runtime": "runc", "root": env["root"]}
        r = subprocess.run(wrapper + ["--root", root_b, "run", "--bundle", str(b), "twin"],
                           capture_output=True, text=True, env=e, timeout=60)
        assert r.returncode != 0
        assert "container twin" in r.stderr and "already has a slice" in r.stderr, r.stderr
        assert "NO-NODES" not in r.stdout and "nvidiactl" not in r.stdout   # never started
        # B's hook asked (create, then its poststop's delete), both as B
        mine = [q for q in fake.requests if q["args"].get("owner", {}).get("root") == root_b]
        assert [q["op"] for q in mine] == ["create", "delete"], fake.requests
        assert fake.slices["twin"]["owner"] == owner_a          # A's slice is still there
        out, err = pa.communicate(timeout=30)
        assert pa.returncode == 0, err
    finally:
        if pa.poll() is None:
            pa.kill()
            pa.wait()
    assert fake.slices == {}                                   # A's poststop deleted it
    assert fake.requests[-1]["op"] == "delete" and \
        fake.requests[-1]["args"]["owner"] == owner_a


# ------------------------------------------------------------ pods (one slice per pod)
SB = "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"
UID = "6b1d2c3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"


def pod_annotations(kind, name=""):
    """containerd's CRI annotations of pod "web" (namespace "team") plus
    its pod-level request, as containerd passes them to every container."""
    ann = {"io.kubernetes.cri.container-type": kind, "io.kubernetes.cri.sandbox-id": SB,
           "io.kubernetes.cri.sandbox-name": "web", "io.kubernetes.cri.sandbox-namespace": "team",
           "io.kubernetes.cri.sandbox-uid": UID, "vgpu.io/memory": "2Gi"}
    if name:
        ann["io.kubernetes.cri.container-name"] = name
    return ann


@pytest.fixture
def fastpath(tmp_path):
    """vgpu-runtime as make install wires it: the C fast path, and behind it
    the Python slow path (python -IS)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    out = tmp_path / "vgpu-runtime"
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out),
                    os.path.join(REPO, "container-hook", "vgpu-runtime.c")], check=True)
    slow = tmp_path / "vgpu-runtime-slow"
    slow.write_text(f"#!{sys.executable} -IS\nimport sys\nsys.path.insert(0, {REPO!r})\n"
                    f"from vgpu.cli.runtime import main\nsys.exit(main())\n")
    slow.chmod(0o755)
    return [str(out)], {"VGPU_RUNTIME_SLOW": str(slow)}


def test_a_pod_shares_one_slice_and_its_sandbox_ends_it(tmp_path, env, fastpath):
    """A "pod" under real runc, its containers' cgroups under one pod<uid>
    directory as the kubelet's cgroupfs driver makes them: the sandbox gets
    no slice (and no createRuntime hook, no device rule); an init and an
    app container share ONE slice, pod-<sandbox id>, bound to the pod's
    cgroup and labelled with the pod's names; their poststops leave it; the
    sandbox's poststop deletes it."""
    fake, fs = env["fake"], env["fs"]
    name = "pod-" + SB
    add_fake_nodes(fs, name)
    wrapper, wenv = fastpath
    e = dict(os.environ, VGPU_RUNC=RUNC, VGPU_HOOK=env["hook"], **wenv)
    top = f"/vgpu-test-{os.getpid()}-pod"
    podcg = f"{top}/pod{UID}"

    def bundle(tag, kind, args, cname=""):
        b = make_bundle(tmp_path, tag, pod_annotations(kind, cname), args=args)
        config = json.loads((b / "config.json").read_text())
        config["linux"]["cgroupsPath"] = f"{podcg}/{tag}"
        (b / "config.json").write_text(json.dumps(config))
        return b

    def rt(*argv, **kw):
        return subprocess.run(wrapper + ["--root", env["root"], *argv], env=e,
                              capture_output=True, text=True, timeout=60, **kw)

    sbx = bundle("sandbox", "sandbox", ("sh", "-c", "sleep 30"))
    os.symlink("busybox", sbx / "rootfs" / "bin" / "sleep")
    devices = json.loads((sbx / "config.json").read_text())["linux"]["resources"]["devices"]
    out = tmp_path / "sandbox.out"
    try:
        with open(out, "wb") as f:          # runc create returns while the container holds it
            r = subprocess.run(wrapper + ["--root", env["root"], "create", "--bundle", str(sbx),
                                          SB], env=e, stdin=subprocess.DEVNULL, stdout=f,
                               stderr=f, timeout=60)
        assert r.returncode == 0, out.read_text()
        config = json.loads((sbx / "config.json").read_text())
        assert list(config["hooks"]) == ["poststop"]
        assert config["linux"]["resources"]["devices"] == devices     # no vgpu rule
        assert rt("start", SB).returncode == 0
        assert fake.requests == []                          # the sandbox: no slice
        for tag in ("init", "app"):
            b = bundle(tag, "container", ("sh", "-c", LIST + "; cat /proc/self/cgroup"), tag)
            r = rt("run", "--bundle", str(b), f"ctr-{tag}")
            assert r.returncode == 0, r.stderr
            assert "nvidiactl" in r.stdout and f"vgpu slice of {name}" in r.stdout, r.stdout
            assert list(json.loads((b / "config.json").read_text())["hooks"]) == \
                ["createRuntime"]
        ops = [(q["op"], q["args"].get("container")) for q in fake.requests]
        assert ops == [("create", name), ("create", name)], ops
        first = fake.requests[0]["args"]
        unified = hook_cgroups().cgroup2_mount() or "/sys/fs/cgroup"
        assert first["cgroup"] == unified.rstrip("/") + podcg
        assert first["labels"] == {"io.kubernetes.pod.name": "web",
                                   "io.kubernetes.pod.namespace": "team"}
        assert first["memory"] == 2 << 30 and first["owner"]["pod"] == UID
        assert fake.requests[1]["args"]["owner"] == first["owner"]
        assert list(fake.slices) == [name]                  # one slice, still there
        # the sandbox goes: its poststop deletes the pod's slice
        subprocess.run([RUNC, "--root", env["root"], "kill", SB, "KILL"], check=True)
        deadline = time.monotonic() + 20
        while json.loads(subprocess.run([RUNC, "--root", env["root"], "state", SB],
                                        capture_output=True, text=True).stdout or "{}"
                         ).get("status") == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        r = rt("delete", SB)
        assert r.returncode == 0, r.stderr
        assert fake.slices == {}
        assert fake.requests[-1]["op"] == "delete" and \
            fake.requests[-1]["args"] == {"container": name, "force": True,
                                          "owner": first["owner"]}
    finally:
        subprocess.run([RUNC, "--root", env["root"], "delete", "--force", SB],
                       capture_output=True)
        for hier in ["/sys/fs/cgroup", *(os.path.join("/sys/fs/cgroup", d)
                                          for d in os.listdir("/sys/fs/cgroup"))]:
            base = hier + top
            if os.path.isdir(base):
                for d in sorted((r for r, _, _ in os.walk(base)), key=len, reverse=True):
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
