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

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from polling import wait_until
from tools.testbed.vgpud_launcher import Vgpud, config

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
RUNC = "/usr/sbin/runc"
#: vgpu-runtime's C fast path (container-hook/vgpu-runtime.c, `make runtime`)
FAST_PATH = ROOT / "build" / "vgpu-runtime"
START_TIMEOUT = 180.0
MiB = 1 << 20

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu")
    or not os.access(RUNC, os.X_OK),
    reason="container tests run in the VM with nvsim, vgpu.ko and runc")


def nvsim_used(gpu: int = 0) -> int:
    for line in Path("/sys/kernel/debug/nvsim/state").read_text().splitlines():
        f = line.split()
        if f and f[0] == "gpu" and int(f[1]) == gpu:
            return int(f[5])
    raise AssertionError("no such GPU in nvsim's state")


# container states change slowly under emulation: poll every 0.3 s
poll = functools.partial(wait_until, interval=0.3)


def worktree_venv() -> tuple[str, ...]:
    """The venv's directory when .venv is a link out of the checkout (a
    worktree's): containers bind it too."""
    venv = os.path.realpath(ROOT / ".venv")
    return () if venv.startswith(str(ROOT) + os.sep) else (venv,)


class Daemon(Vgpud):
    """The module's vgpud (tools/testbed/vgpud_launcher.py): socket, state and
    vgpufs under tmp, GC every second, 64 MiB and 10% by default; up once
    it answers and its vgpufs is mounted (a previous vgpud's dead mount is
    still there after a crash)."""

    def __init__(self, tmp: Path):
        super().__init__(tmp, config(tmp, paths={"fuse_mount": "{tmp}/fs"},
                                     gc={"interval": "1s"}, defaults={"compute": "10%"}),
                         command=[PY, "-m", "vgpu.daemon.main"], wait_fuse=True,
                         start_timeout=START_TIMEOUT)
        self.start()

    def crash_and_restart(self):
        """SIGKILL (no unmount, no cleanup), then a new vgpud on the same
        config, state and mount point."""
        self.kill()
        self.start()

    def log(self, tail: int = 4000) -> str:
        return super().log(tail)

    def ctl_raw(self, *args):
        return subprocess.run([PY, "-m", "vgpu.cli.ctl", "--socket", self.sock, "--timeout", "30",
                               "--json", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)

    def ctl(self, *args) -> dict:
        r = self.ctl_raw(*args)
        assert r.returncode == 0, f"vgpuctl {args}: {r.stderr}\n{self.log()}"
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def slices(self) -> dict:
        return {s["container"]: s for s in self.ctl("list")["slices"]}

    def stop(self, sig=signal.SIGTERM, timeout=None, check=False) -> int:
        """SIGTERM, and SIGKILL after 60 s (no error: teardown)."""
        return super().stop(sig, timeout, check)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("vgpud"))
    yield d
    try:
        for c in list(d.slices()):
            d.ctl_raw("delete", c, "--force")
    finally:
        d.stop()


class Runc:
    """Containers through vgpu-runtime, as containerd runs them."""

    def __init__(self, tmp: Path, daemon: Daemon):
        self.tmp = tmp
        self.root = str(tmp / "runc-root")
        self.daemon = daemon
        self.ids: list[str] = []
        self.shared = tmp / "shared"
        self.shared.mkdir()

    def env(self) -> dict:
        return dict(os.environ, VGPU_RUNC=RUNC, VGPU_SOCKET=self.daemon.sock,
                    VGPU_FUSE_MOUNT=self.daemon.fs, PYTHONPATH=str(ROOT))

    def bundle(self, cid: str, script: str, annotations: dict | None = None) -> Path:
        b = self.tmp / cid
        rootfs = b / "rootfs"
        rootfs.mkdir(parents=True)
        binds = []
        for d in ("/usr", "/etc", "/root/.pyenv", str(ROOT), *worktree_venv(), "/bin", "/sbin",
                  "/lib", "/lib64"):
            if os.path.islink(d):
                os.symlink(os.readlink(d), rootfs / d.lstrip("/"))
            elif os.path.isdir(d):
                (rootfs / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
                binds.append(d)
        subprocess.run([RUNC, "spec"], cwd=b, check=True)
        config = json.loads((b / "config.json").read_text())
        config["process"]["terminal"] = False
        config["process"]["args"] = ["/bin/sh", "-c", script]
        config["process"]["cwd"] = str(ROOT)
        config["process"]["env"] = ["PATH=/usr/bin:/bin:/usr/sbin:/sbin",
                                    f"PYTHONPATH={ROOT}", "PYTHONDONTWRITEBYTECODE=1",
                                    "HOME=/tmp"]
        config["root"] = {"path": "rootfs", "readonly": True}
        mounts = config["mounts"]
        mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "mode=1777"]})
        for d in binds:
            mounts.append({"destination": d, "type": "bind", "source": d,
                           "options": ["rbind", "ro"]})
        mounts.append({"destination": "/shared", "type": "bind", "source": str(self.shared),
                       "options": ["rbind", "rw"]})
        # Mount points; "tmp" may exist already when the checkout lives under /tmp.
        (rootfs / "shared").mkdir(exist_ok=True)
        (rootfs / "tmp").mkdir(exist_ok=True)
        if annotations:
            config["annotations"] = annotations
        (b / "config.json").write_text(json.dumps(config))
        return b

    def runtime(self, *args, timeout=300, **kw):
        self.ids.append(args[-1]) if args and args[0] in ("run", "create") else None
        return subprocess.run([PY, "-m", "vgpu.cli.runtime", "--root", self.root, *args],
                              env=self.env(), timeout=timeout, **kw)

    def run(self, cid: str, bundle: Path):
        """runc run in the foreground: returns when the container exited
        (and runc ran poststop)."""
        return self.runtime("run", "--bundle", str(bundle), cid, capture_output=True, text=True)

    def run_detached(self, cid: str, bundle: Path):
        # the container inherits runc's stdio: files, never pipes (a pipe
        # would stay open as long as the container runs)
        outp = self.tmp / f"{cid}.out"
        with open(outp, "wb") as out:
            r = self.runtime("run", "-d", "--bundle", str(bundle), cid,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        assert r.returncode == 0, f"runc run -d {cid}: {outp.read_text()}\n{self.daemon.log()}"

    def runc(self, *args):
        return subprocess.run([RUNC, "--root", self.root, *args], capture_output=True, text=True,
                              timeout=120)

    def state(self, cid: str) -> dict:
        r = self.runc("state", cid)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def cleanup(self):
        for cid in self.ids:
            if self.state(cid):
                self.runc("kill", cid, "KILL")
                self.runtime("delete", "--force", cid, capture_output=True)


@pytest.fixture
def runc(tmp_path, daemon):
    r = Runc(tmp_path, daemon)
    yield r
    r.cleanup()
    for c in list(daemon.slices()):
        daemon.ctl_raw("delete", c, "--force")


PROBE = f"{PY} -m vgpu.abi.nvclient probe --chunk 16MiB --json"
SHOW = ("echo DEV: $(ls /dev | grep nvidia); "
        "for f in /proc/driver/nvidia/gpus/*/information; do echo \"INFO $f\"; cat $f; done; ")


def video_memory(text: str) -> list[str]:
    return [l.split(":", 1)[1].strip() for l in text.splitlines()
            if l.startswith("Video Memory:")]


# ------------------------------------------------------------------ tests
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
CTD_CONFIG = """
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{d}/sock"
[ttrpc]
  address = "{d}/sock.ttrpc"
"""


HAVE_CONTAINERD = bool(shutil.which("containerd") and shutil.which("ctr"))


class Containerd:
    """A containerd of the test's own (no CRI), whose containers go through
    vgpu-runtime (as `--runc-binary`) exactly as a node's do; rootfs: the
    bundle directory of Runc.bundle, with the host's /usr, /etc, pyenv and
    the repository bound read-only and Runc's shared directory at
    /shared."""

    def __init__(self, runc: Runc, daemon: Daemon):
        self.runc, self.daemon = runc, daemon
        self.d = d = runc.tmp / "ctd"
        d.mkdir()
        (d / "config.toml").write_text(CTD_CONFIG.format(d=d))
        # BinaryName as `make install` makes it: the C fast path (`make
        # runtime`), whose slow path is this Python running vgpu.cli.runtime
        slow = d / "vgpu-runtime-slow"
        slow.write_text(f"#!/bin/sh\nexec {PY} -I -S -c 'import sys; sys.path.insert(0, "
                        f"\"{ROOT}\"); from vgpu.cli.runtime import main; sys.exit(main())' "
                        f"\"$@\"\n")
        slow.chmod(0o755)
        assert FAST_PATH.exists(), f"{FAST_PATH} is missing: `make runtime` builds it"
        self.shim = d / "vgpu-runtime"
        self.shim.write_text(f"#!/bin/sh\nexport VGPU_RUNC={RUNC} VGPU_SOCKET={daemon.sock} "
                             f"VGPU_FUSE_MOUNT={daemon.fs} VGPU_RUNTIME_SLOW={slow}\n"
                             f"exec {FAST_PATH} \"$@\"\n")
        self.shim.chmod(0o755)
        with open(d / "containerd.log", "wb") as log:
            self.proc = subprocess.Popen(["containerd", "--config", str(d / "config.toml")],
                                         stdout=log, stderr=log)
        self.addr = str(d / "sock")
        self.ids: list[str] = []
        assert poll(lambda: self.ctr("version").returncode == 0, 120), self.log()

    def log(self) -> str:
        return (self.d / "containerd.log").read_text(errors="replace")[-3000:]

    def ctr(self, *args, timeout=300):
        return subprocess.run(["ctr", "--address", self.addr, *args], capture_output=True,
                              text=True, timeout=timeout)

    def run(self, cid: str, script: str, annotations: dict, *, detach: bool, timeout=300,
            binds: tuple[str, ...] = ()):
        """ctr run of /bin/sh -c script; in the foreground (returns when
        the task exited, its output in stdout) or detached; ``binds``: more
        host directories bound read-only at the same path."""
        self.ids.append(cid)
        b = self.runc.bundle(cid, "true")           # only for its rootfs directory
        mounts = []
        for src in ("/usr", "/etc", "/root/.pyenv", str(ROOT), *worktree_venv(), *binds):
            if os.path.isdir(src):
                mounts += ["--mount", f"type=bind,src={src},dst={src},options=rbind:ro"]
        mounts += ["--mount", f"type=bind,src={self.runc.shared},dst=/shared,options=rbind:rw",
                   "--mount", "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev"]
        ann = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
        return self.ctr("run", *(["-d"] if detach else []), "--rootfs", "--read-only",
                        "--runc-binary", str(self.shim), *ann,
                        "--env", "PATH=/usr/bin:/bin", "--env", "HOME=/tmp",
                        "--env", f"PYTHONPATH={ROOT}", "--cwd", str(ROOT), *mounts,
                        str(b / "rootfs"), cid, "/bin/sh", "-c", script, timeout=timeout)

    def close(self):
        for cid in self.ids:
            self.ctr("task", "kill", "-s", "SIGKILL", cid)
            poll(lambda: "STOPPED" in self.ctr("task", "ls").stdout
                 or cid not in self.ctr("task", "ls").stdout, 30)
            self.ctr("task", "delete", cid)
            self.ctr("container", "delete", cid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def containerd(runc, daemon):
    if not HAVE_CONTAINERD:
        pytest.skip("needs containerd and ctr")
    c = Containerd(runc, daemon)
    yield c
    c.close()


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
