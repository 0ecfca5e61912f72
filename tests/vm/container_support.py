"""What the container tests share: a vgpud with vgpufs, runc bundles made
as containerd makes them (through vgpu-runtime), a containerd of their own,
and the readers of what a container printed.  Used by test_containers.py,
test_pods.py, test_systemd_unit.py, test_tinygrad_slice.py,
test_container_nvidia.py and test_rdma.py (a helper module: no test file
imports another).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
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


SHOW = ("echo DEV: $(ls /dev | grep nvidia); "
        "for f in /proc/driver/nvidia/gpus/*/information; do echo \"INFO $f\"; cat $f; done; ")


def video_memory(text: str) -> list[str]:
    return [l.split(":", 1)[1].strip() for l in text.splitlines()
            if l.startswith("Video Memory:")]


# ------------------------------------------------------------------ tests


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


def podman_argv(podman: str, tmp: Path, run_root: str) -> list[str]:
    """podman's command line for a test: its stores under ``tmp`` and
    ``run_root`` (a short path: podman's limit is 50 characters), vfs,
    cgroupfs, events to a file, runc.  --network-config-dir: podman makes
    its network lock directory there, /etc/containers/networks by default,
    which the guest's read-only root lacks unless podman ever ran on the
    host."""
    return [podman, "--root", str(tmp / "pm"), "--runroot", run_root,
            "--network-config-dir", str(tmp / "pmnet"), "--storage-driver", "vfs",
            "--cgroup-manager", "cgroupfs", "--events-backend", "file",
            "--runtime", "/usr/sbin/runc"]


def remove_cgroups(base: Path) -> None:
    """rmdir a test's cgroup tree, deepest first (whatever still holds a
    process stays)."""
    for d in sorted((p for p, _, _ in os.walk(base)), key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass


def own_etc_of(rootfs: Path) -> None:
    """Give ``rootfs`` an /etc of its own, as an image has (the host's
    ld.so.conf files, passwd and group), writable until the container runs:
    the container's ldconfig writes its ld.so.cache there."""
    etc = rootfs / "etc"
    for f in ("ld.so.conf", "passwd", "group"):
        if os.path.isfile(f"/etc/{f}"):
            shutil.copyfile(f"/etc/{f}", etc / f)
    if os.path.isdir("/etc/ld.so.conf.d"):
        shutil.copytree("/etc/ld.so.conf.d", etc / "ld.so.conf.d", symlinks=True)


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
        self.slow = slow
        self.runtime_env()
        with open(d / "containerd.log", "wb") as log:
            self.proc = subprocess.Popen(["containerd", "--config", str(d / "config.toml")],
                                         stdout=log, stderr=log)
        self.addr = str(d / "sock")
        self.ids: list[str] = []
        assert poll(lambda: self.ctr("version").returncode == 0, 120), self.log()

    def runtime_env(self, **env: str) -> None:
        """(Re)write the runtime containerd runs: vgpu-runtime with the
        test bed's variables, plus ``env`` (e.g. VGPU_DRIVER_LIB_DIRS)."""
        extra = "".join(f" {k}={shlex.quote(v)}" for k, v in env.items())
        self.shim.write_text(f"#!/bin/sh\nexport VGPU_RUNC={RUNC} VGPU_SOCKET={self.daemon.sock} "
                             f"VGPU_FUSE_MOUNT={self.daemon.fs} VGPU_RUNTIME_SLOW={self.slow}"
                             f"{extra}\nexec {FAST_PATH} \"$@\"\n")
        self.shim.chmod(0o755)

    def log(self) -> str:
        return (self.d / "containerd.log").read_text(errors="replace")[-3000:]

    def ctr(self, *args, timeout=300):
        return subprocess.run(["ctr", "--address", self.addr, *args], capture_output=True,
                              text=True, timeout=timeout)

    def run(self, cid: str, script: str, annotations: dict, *, detach: bool, timeout=300,
            binds: tuple[str, ...] = (), own_etc: bool = False, extra: tuple[str, ...] = ()):
        """ctr run of /bin/sh -c script; in the foreground (returns when
        the task exited, its output in stdout) or detached; ``binds``: more
        host directories bound read-only at the same path; ``own_etc``: the
        rootfs has an /etc of its own (the host's ld.so.conf files, writable
        until the container runs, as an image's) instead of the host's bound
        read-only: the container's ldconfig writes its ld.so.cache there;
        ``extra``: more ctr run options (``--net-host``)."""
        self.ids.append(cid)
        b = self.runc.bundle(cid, "true")           # only for its rootfs directory
        if own_etc:
            own_etc_of(b / "rootfs")
        mounts = []
        for src in ("/usr", *(() if own_etc else ("/etc",)), "/root/.pyenv", str(ROOT),
                    *worktree_venv(), *binds):
            if os.path.isdir(src):
                mounts += ["--mount", f"type=bind,src={src},dst={src},options=rbind:ro"]
        mounts += ["--mount", f"type=bind,src={self.runc.shared},dst=/shared,options=rbind:rw",
                   "--mount", "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev"]
        ann = [a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")]
        return self.ctr("run", *(["-d"] if detach else []), "--rootfs", "--read-only",
                        "--runc-binary", str(self.shim), *ann, *extra,
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
