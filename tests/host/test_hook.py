"""vgpu-oci-hook, vgpu-runtime and `vgpuctl cdi generate` on the host,
against tests/host/fake_vgpud.py (no kernel module, no vgpufs: a directory of
mknod'ed nodes stands in for vgpufs)."""
from __future__ import annotations

import json
import os
import socket
import stat
import statistics
import subprocess
import sys
import threading
import time

import pytest

from vgpu import ctl, hook, runtime

from fake_vgpud import FakeVgpud

GIB = 1 << 30
ROOT = os.geteuid() == 0


def make_bundle(tmp_path, annotations=None, env=None, cid="c1", pid=None):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "dev").mkdir(parents=True, exist_ok=True)
    (bundle / "rootfs" / "proc" / "driver").mkdir(parents=True, exist_ok=True)
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
              "process": {"args": ["sh"], "env": ["PATH=/bin"] + (env or [])},
              "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}
    if annotations:
        config["annotations"] = dict(annotations)
    (bundle / "config.json").write_text(json.dumps(config))
    state = {"ociVersion": "1.0.2", "id": cid, "status": "creating", "pid": pid or 4242,
             "bundle": str(bundle)}
    if annotations:
        state["annotations"] = dict(annotations)
    return bundle, state


def run_hook(state, *args, env=None, timeout=20):
    data = state if isinstance(state, (bytes, str)) else json.dumps(state)
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "vgpu.hook", *args], input=data,
                       capture_output=True, text=isinstance(data, str), env=e,
                       timeout=timeout)
    r.elapsed = time.monotonic() - t0
    return r


@pytest.fixture
def fake(tmp_path):
    with FakeVgpud(tmp_path / "vgpud.sock") as f:
        yield f


# ------------------------------------------------------------ parsing
def test_request_from_annotations_wins_over_env(tmp_path):
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB", "other": "x"},
                           env=["VGPU_MEMORY=8GiB", "VGPU_COMPUTE=50%"])
    config = hook.read_config(state)
    assert hook.raw_request(state, config) == ({"memory": "4GiB"}, "annotation")


def test_request_from_env(tmp_path):
    _, state = make_bundle(tmp_path, env=["VGPU_MEMORY=8GiB", "VGPU_COMPUTE=50%",
                                          "VGPU_PRIORITY=high", "VGPU_GPUS=0,1",
                                          "VGPU_OTHER=1", "XVGPU_MEMORY=1"])
    config = hook.read_config(state)
    raw, src = hook.raw_request(state, config)
    assert src == "env"
    assert raw == {"memory": "8GiB", "compute": "50%", "priority": "high", "gpus": "0,1"}
    assert hook.validate(raw, src) == {"memory": 8 * GIB, "compute": 50, "priority": "high",
                                       "gpus": [0, 1]}


def test_annotations_in_config_only(tmp_path):
    bundle, state = make_bundle(tmp_path, {"vgpu.io/profile": "small"})
    del state["annotations"]              # runc 1.1 passes them; older runtimes do not
    assert hook.raw_request(state, hook.read_config(state)) == ({"profile": "small"},
                                                                 "annotation")


def test_no_request(tmp_path):
    _, state = make_bundle(tmp_path, {"io.kubernetes.cri.container-type": "container"})
    assert not hook.wants_slice(state, hook.read_config(state))


@pytest.mark.parametrize("key,value,words", [
    ("memory", "4GB", "decimal units"),
    ("memory", "lots", "not a size"),
    ("memory", "0", "zero"),
    ("compute", "150%", "out of range"),
    ("priority", "urgent", "high or low"),
    ("policy", "greedy", "share, fixed or burst"),
    ("gpus", "0,,1", "not a GPU list"),
    ("gpus", "0,0", "twice"),
])
def test_validate_refuses(key, value, words):
    with pytest.raises(ValueError) as ei:
        hook.validate({key: value}, "annotation")
    msg = str(ei.value)
    assert msg.startswith(f'vgpu.io/{key} "{value}": ') and words in msg


def test_cgroup_of_self():
    v2, v1dev = hook.cgroup_of(os.getpid())
    assert v2 is None or v2.startswith("/sys/fs/cgroup")
    assert hook.cgroup_of(1 << 30) == (None, None)


# ------------------------------------------------------------ the hook as a process
def test_no_request_exits_zero_fast_without_daemon(tmp_path):
    _, state = make_bundle(tmp_path)
    env = {"VGPU_SOCKET": str(tmp_path / "none.sock")}
    times = []
    for _ in range(20):
        r = run_hook(state, "createRuntime", env=env)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        times.append(r.elapsed)
    base = []
    for _ in range(20):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        base.append(time.monotonic() - t0)
    med, bmed = statistics.median(times), statistics.median(base)
    print(f"\nhook early exit: median {med * 1000:.1f} ms over 20 spawns "
          f"(bare python {bmed * 1000:.1f} ms)")
    assert med < 0.150


def test_no_request_imports_nothing_heavy(tmp_path):
    _, state = make_bundle(tmp_path)
    code = ("import sys, io; sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[1].encode()));"
            "from vgpu import hook; rc = hook.main(['createRuntime']);"
            "bad = [m for m in ('vgpu.apiclient', 'vgpu.units', 'ctypes', 'socket') "
            "if m in sys.modules]; print(rc, bad)")
    r = subprocess.run([sys.executable, "-c", code, json.dumps(state)], capture_output=True,
                       text=True, check=True)
    assert r.stdout.strip() == "0 []"


def test_bad_value_fails_without_contacting_daemon(tmp_path, fake):
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "4GB"}, cid="bad1")
    r = run_hook(state, "createRuntime", "--socket", fake.path)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "container bad1" in lines[0] and 'vgpu.io/memory "4GB"' in lines[0]
    assert fake.requests == [] and fake.slices == {}


@pytest.mark.parametrize("data,words", [
    ("", "no container state"),
    ("not json at all", "cannot parse"),
    ('{"id": "c1"', "cannot parse"),
    ("[1, 2]", "not an OCI state"),
    ('{"id": "c1"}', "names no bundle"),
])
def test_garbage_on_stdin(data, words):
    r = run_hook(data, "createRuntime")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr


def test_binary_garbage_on_stdin():
    r = run_hook(os.urandom(4096) + b"\xff", "createRuntime")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1


def test_missing_bundle(tmp_path):
    state = {"ociVersion": "1.0.2", "id": "gone", "status": "creating", "pid": 1,
             "bundle": str(tmp_path / "nope")}
    r = run_hook(state, "createRuntime")
    assert r.returncode == 1
    assert "container gone: no bundle config at" in r.stderr
    r = run_hook(state, "poststop")
    assert r.returncode == 1


def test_unknown_stage_is_a_no_op(tmp_path):
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB"})
    for stage in ("startContainer", "poststart", "someFutureStage"):
        r = run_hook(state, stage, "--debug")
        assert r.returncode == 0
        assert "nothing to do" in r.stderr


def test_usage_errors():
    r = run_hook("{}", "--timeout", "0")
    assert r.returncode == 2 and "--timeout" in r.stderr
    r = run_hook("{}", "--bogus")
    assert r.returncode == 2
    r = run_hook("", "--help")
    assert r.returncode == 0 and "usage:" in r.stdout


class SilentServer:
    """Accepts connections and reads, never answers."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.path = str(path)
        self.conns = []
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("stage", ["createRuntime", "poststop"])
def test_daemon_not_answering_times_out(tmp_path, stage):
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB"}, pid=os.getpid())
    srv = SilentServer(tmp_path / "silent.sock")
    try:
        r = run_hook(state, stage, "--socket", srv.path, "--timeout", "0.5")
    finally:
        srv.close()
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "container c1" in r.stderr and "did not answer" in r.stderr
    assert r.elapsed < 3.0


def test_daemon_not_running(tmp_path):
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB"}, pid=os.getpid())
    r = run_hook(state, "createRuntime", "--socket", str(tmp_path / "none.sock"))
    assert r.returncode == 1 and "vgpud is not running" in r.stderr


def test_poststop_deletes_and_is_idempotent(tmp_path, fake):
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB"}, cid="p1")
    fake.slices["p1"] = {"container": "p1"}
    state["status"] = "stopped"
    r = run_hook(state, "poststop", "--socket", fake.path)
    assert r.returncode == 0, r.stderr
    assert fake.slices == {}
    assert fake.requests[-1]["op"] == "delete"
    assert fake.requests[-1]["args"] == {"container": "p1", "force": True}
    r = run_hook(state, "--socket", fake.path)          # stage from status: poststop
    assert r.returncode == 0, r.stderr
    assert len(fake.requests) == 2


def test_poststop_of_unasked_container_sends_nothing(tmp_path, fake):
    _, state = make_bundle(tmp_path)
    r = run_hook(state, "poststop", "--socket", fake.path)
    assert r.returncode == 0 and fake.requests == []


def test_create_failure_leaves_no_slice(tmp_path, fake):
    """create succeeds, vgpufs has nothing for the container: the hook fails
    the start and deletes the slice it made."""
    _, state = make_bundle(tmp_path, {"vgpu.io/memory": "2GiB", "vgpu.io/gpus": "1"},
                           cid="nofs", pid=os.getpid())
    r = run_hook(state, "createRuntime", "--socket", fake.path, "--timeout", "0.3",
                 "--fuse-mount", str(tmp_path / "fs"))
    assert r.returncode == 1
    assert "container nofs" in r.stderr and "vgpufs" in r.stderr
    ops = [(q["op"], q["args"]) for q in fake.requests]
    assert ops[0][0] == "create"
    assert ops[0][1]["container"] == "nofs" and ops[0][1]["memory"] == 2 * GIB
    assert ops[0][1]["gpus"] == [1]
    assert ("pid" in ops[0][1]) != ("cgroup" in ops[0][1])
    assert ops[-1] == ("delete", {"container": "nofs", "force": True})
    assert fake.slices == {}


def fake_vgpufs(root, cid):
    d = root / cid / "dev"
    d.mkdir(parents=True)
    for name, minor in (("nvidiactl", 3), ("nvidia0", 5), ("nvidia-uvm", 7)):
        os.mknod(d / name, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    p = root / cid / "proc" / "driver" / "nvidia"
    (p / "gpus" / "0000:01:00.0").mkdir(parents=True)
    (p / "version").write_text("NVRM version: vgpu slice\n")
    (p / "gpus" / "0000:01:00.0" / "information").write_text("Model: slice\n")


@pytest.mark.skipif(not ROOT, reason="needs root (mount namespaces, mknod)")
def test_attach_mounts_nodes_in_the_container_namespace(tmp_path, fake):
    """A process in its own mount namespace stands for the container: the hook
    creates the slice, enters the namespace and bind-mounts the nodes and the
    proc view under the rootfs; the host's view of the rootfs is untouched."""
    fs = tmp_path / "fs"
    fake_vgpufs(fs, "att1")
    bundle, _ = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB"}, cid="att1")
    child = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "60"])
    cg = None
    try:
        time.sleep(0.2)
        devroot = "/sys/fs/cgroup/devices"
        if os.path.exists(os.path.join(devroot, "devices.allow")):
            cg = os.path.join(devroot, f"vgpu-test-{os.getpid()}")
            os.mkdir(cg)
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(child.pid))
        state = {"ociVersion": "1.0.2", "id": "att1", "status": "creating", "pid": child.pid,
                 "bundle": str(bundle), "annotations": {"vgpu.io/memory": "4GiB"}}
        r = run_hook(state, "createRuntime", "--socket", fake.path, "--fuse-mount", str(fs))
        assert r.returncode == 0, r.stderr
        assert "att1" in fake.slices
        rootfs = bundle / "rootfs"
        assert not (rootfs / "dev" / "nvidia0").exists() or \
            not stat.S_ISCHR(os.stat(rootfs / "dev" / "nvidia0").st_mode)
        out = subprocess.run(["nsenter", "-t", str(child.pid), "-m", "sh", "-c",
                              f"ls -l {rootfs}/dev; cat {rootfs}/proc/driver/nvidia/version"],
                             capture_output=True, text=True, check=True).stdout
        assert "nvidiactl" in out and "nvidia0" in out and "nvidia-uvm" in out
        assert out.count("crw") == 3 and "vgpu slice" in out
        # createContainer after createRuntime: nothing mounted twice
        r = run_hook(state, "createContainer", "--debug", "--fuse-mount", str(fs))
        # (this one runs in the host namespace here, where nothing is mounted:
        # it mounts there; clean that up)
        assert r.returncode == 0, r.stderr
        subprocess.run(["umount", "-R", str(rootfs / "proc" / "driver")], check=False)
        for n in ("nvidiactl", "nvidia0", "nvidia-uvm"):
            subprocess.run(["umount", str(rootfs / "dev" / n)], check=False)
        # a second createRuntime (hook wired twice): exists -> show, mounts kept
        r = run_hook(state, "createRuntime", "--socket", fake.path, "--fuse-mount", str(fs),
                     "--debug")
        assert r.returncode == 0, r.stderr
        assert "exists already" in r.stderr and "already there" in r.stderr
        if cg:
            with open(os.path.join(cg, "devices.list")) as f:
                assert f.read().strip()
    finally:
        child.kill()
        child.wait()
        if cg:
            time.sleep(0.1)
            os.rmdir(cg)


# ------------------------------------------------------------ vgpu-runtime
def test_find_command_and_bundle():
    argv = ["--root", "/run/containerd/runc/k8s.io", "--log", "/x/log.json",
            "--log-format=json", "--systemd-cgroup", "create", "--bundle", "/b",
            "--pid-file", "/b/init.pid", "c1"]
    cmd, i = runtime.find_command(argv)
    assert cmd == "create" and argv[i] == "create"
    assert runtime.find_bundle(argv, i + 1) == "/b"
    assert runtime.find_bundle(["create", "-b=/q", "x"], 1) == "/q"
    assert runtime.find_bundle(["create", "x"], 1) == "."
    assert runtime.find_command(["--debug", "state", "c1"])[0] == "state"


def test_edit_config_is_idempotent(monkeypatch):
    monkeypatch.setenv("VGPU_HOOK", "/usr/local/bin/vgpu-oci-hook")
    config = {"hooks": {"poststop": [{"path": "/other"}]}, "linux": {}}
    assert runtime.edit_config(config, 510)
    once = json.loads(json.dumps(config))
    assert not runtime.edit_config(config, 510)
    assert config == once
    assert [h["args"] for h in config["hooks"]["createRuntime"]] == \
        [["vgpu-oci-hook", "createRuntime"]]
    assert config["hooks"]["poststop"][0] == {"path": "/other"}
    assert config["hooks"]["poststop"][1]["args"] == ["vgpu-oci-hook", "poststop"]
    assert config["linux"]["resources"]["devices"] == \
        [{"allow": True, "type": "c", "major": 510, "access": "rwm"}]
    assert hook.config_allows(config, 510) and not hook.config_allows(config, 511)


def test_default_hook_entry_is_fast_python(monkeypatch, tmp_path):
    monkeypatch.delenv("VGPU_HOOK", raising=False)
    monkeypatch.setenv("VGPU_SOCKET", "/run/x.sock")
    config = {}
    assert runtime.edit_config(config, None)
    (h,) = config["hooks"]["createRuntime"]
    assert h["path"] == sys.executable
    assert h["args"][1:] == ["-S", "-m", "vgpu.hook", "createRuntime"]
    assert "VGPU_SOCKET=/run/x.sock" in h["env"]
    assert not runtime.edit_config(config, None)
    assert "linux" not in config
    # the entry works as written: early exit for a container that asked nothing
    _, state = make_bundle(tmp_path)
    env = dict(e.split("=", 1) for e in h["env"])
    r = subprocess.run(h["args"], input=json.dumps(state), capture_output=True, text=True,
                       env=env, executable=h["path"])
    assert r.returncode == 0, r.stderr


def fake_runc(tmp_path):
    out = tmp_path / "runc-argv"
    script = tmp_path / "fake-runc"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {out}\nexit 7\n")
    script.chmod(0o755)
    return script, out


def run_runtime(tmp_path, *argv, env=None):
    script, out = fake_runc(tmp_path)
    e = dict(os.environ, VGPU_RUNC=str(script), VGPU_HOOK="/opt/vgpu/bin/vgpu-oci-hook")
    e.update(env or {})
    r = subprocess.run([sys.executable, "-m", "vgpu.runtime", *argv], capture_output=True,
                       text=True, env=e)
    return r, out.read_text().splitlines() if out.exists() else None


def test_runtime_edits_config_then_execs_runc(tmp_path):
    bundle, _ = make_bundle(tmp_path, {"vgpu.io/memory": "4GiB"})
    argv = ["--root", "/run/r", "--log-format", "json", "create", "--bundle", str(bundle),
            "--pid-file", "p", "c1"]
    r, got = run_runtime(tmp_path, *argv)
    assert r.returncode == 7, r.stderr       # runc's status, through exec
    assert got == argv
    config = json.loads((bundle / "config.json").read_text())
    assert config["hooks"]["createRuntime"][0]["path"] == "/opt/vgpu/bin/vgpu-oci-hook"
    assert config["hooks"]["poststop"][0]["args"] == ["vgpu-oci-hook", "poststop"]
    first = (bundle / "config.json").read_bytes()
    r, _ = run_runtime(tmp_path, *argv)
    assert (bundle / "config.json").read_bytes() == first


def test_runtime_leaves_unasked_containers_and_other_commands_alone(tmp_path):
    bundle, _ = make_bundle(tmp_path)
    before = (bundle / "config.json").read_bytes()
    r, got = run_runtime(tmp_path, "create", "-b", str(bundle), "c2")
    assert got == ["create", "-b", str(bundle), "c2"]
    assert (bundle / "config.json").read_bytes() == before
    bundle2 = tmp_path / "b2"
    bundle2.mkdir()
    (bundle2 / "config.json").write_text(json.dumps({"annotations": {"vgpu.io/memory": "1GiB"}}))
    before = (bundle2 / "config.json").read_bytes()
    r, got = run_runtime(tmp_path, "delete", "--force", "c2")
    assert got == ["delete", "--force", "c2"]
    assert (bundle2 / "config.json").read_bytes() == before


def test_runtime_fails_on_missing_bundle(tmp_path):
    r, got = run_runtime(tmp_path, "create", "--bundle", str(tmp_path / "nope"), "c3")
    assert r.returncode == 1 and got is None and "vgpu-runtime: cannot prepare" in r.stderr


# ------------------------------------------------------------ CDI
def test_cdi_spec_shape():
    s = {"container": "c1", "slice_id": 3, "gpus": [{"index": 0}, {"index": 1}],
         "devices": {"major": 510, "ctl_minor": 0, "uvm_minor": 1, "gpu_minors": [2, 3]}}
    spec = ctl.cdi_spec([s], "/run/vgpu/fs")
    assert spec["cdiVersion"] == "0.6.0" and spec["kind"] == "vgpu.io/slice"
    (dev,) = spec["devices"]
    assert dev["name"] == "c1"
    nodes = dev["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in nodes] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1",
                                         "/dev/nvidia-uvm"]
    assert nodes[1]["hostPath"] == "/run/vgpu/fs/c1/dev/nvidia0"
    assert (nodes[2]["major"], nodes[2]["minor"]) == (510, 3)
    (m,) = dev["containerEdits"]["mounts"]
    assert m["containerPath"] == "/proc/driver/nvidia"
    assert m["hostPath"] == "/run/vgpu/fs/c1/proc/driver/nvidia"


def test_vgpuctl_cdi_generate(tmp_path, fake, capsys):
    fake.slices["a"] = {"container": "a", "slice_id": 1, "gpus": [{"index": 0}],
                        "devices": {"major": 510, "ctl_minor": 0, "uvm_minor": 1,
                                    "gpu_minors": [2]}}
    out = tmp_path / "cdi" / "vgpu.json"
    rc = ctl.main(["cdi", "generate", "--socket", fake.path, "--output", str(out),
                   "--fuse-mount", "/mnt/fs"])
    assert rc == 0
    spec = json.loads(out.read_text())
    assert [d["name"] for d in spec["devices"]] == ["a"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] == \
        "/mnt/fs/a/dev/nvidiactl"
    rc = ctl.main(["cdi", "generate", "--socket", fake.path])
    assert rc == 0 and json.loads(capsys.readouterr().out)["kind"] == "vgpu.io/slice"
    assert ctl.main(["cdi", "frobnicate", "--socket", fake.path]) == ctl.EXIT_USAGE


@pytest.mark.parametrize("args,words", [
    (["--rebind"], "--rebind needs PID and CONTAINER"),
    (["--rebind", "12"], "--rebind needs PID and CONTAINER"),
    (["--rebind", "x1", "c"], 'invalid --rebind pid "x1"'),
    (["--rebind", "0", "c"], 'invalid --rebind pid "0"'),
    (["--rebind", "12", "../etc"], 'invalid --rebind container "../etc"'),
])
def test_rebind_refuses_bad_arguments(args, words, capsys):
    assert hook.main(args) == 2
    assert words in capsys.readouterr().err


def test_rebind_without_a_view_fails_cleanly(tmp_path, capsys):
    rc = hook.main(["--fuse-mount", str(tmp_path), "--rebind", str(os.getpid()), "nope"])
    err = capsys.readouterr().err
    assert rc == 1 and "container nope: no vgpufs view at" in err, err
    assert err.count("\n") == 1
