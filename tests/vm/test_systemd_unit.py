"""vgpud under deploy/systemd/vgpud.service's own settings, in the VM.

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_systemd_unit.py

The VM has no systemd as PID 1 (busybox init, chrooted into the host's
root), so systemd-run cannot start the unit.  Instead this file reads the
unit and reproduces each setting of its [Service] section with the tools
systemd's own execution amounts to (``reproduce``): the capability bounding
set and no_new_privs with setpriv, rlimits with prlimit, a mount namespace
with unshare --mount --propagation slave plus the mounts the setting
implies, runtime and state directories with their modes, the environment,
a NOTIFY_SOCKET for Type=notify (READY=1 must come from the main pid, as
NotifyAccess=main wants), the stop and reload signals.  A setting it does
not know fails the run: nobody can add one to the unit untested.

Then vgpud started that way must serve a container that runc starts on the
host side through vgpu-runtime and the hook (tests/vm/test_containers.py's
Runc): its /dev/nvidia* are there and open, its /proc/driver/nvidia shows
its quota; vgpud is stopped with the unit's KillSignal and started again the
same way, and the running container's view must have been re-bound by then
(vgpu-oci-hook --rebind: setns into the container's mount namespace, which
needs the CAP_SYS_CHROOT, CAP_SYS_ADMIN and CAP_SYS_PTRACE the unit keeps).
The negative check runs the unit with the settings it used to have
(ProtectSystem=full, PrivateTmp=yes: a private mount namespace) and requires
that the container does NOT get its nodes: the test can fail.

The unit's paths: /usr/bin/vgpud is the checkout's .venv/bin/vgpud (what
`make install` links), /etc/vgpu/vgpud.toml the test's config, and the
state directory /var/lib/<name> one under this test's directory (the VM's
/var/lib is the host's, read-only).  The test's files live under /run, not
/tmp, which PrivateTmp would hide from the daemon as it hides /tmp on a
node.
"""

from __future__ import annotations

import functools
import os
import re
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from polling import wait_until
from tools.testbed.vgpud_launcher import Vgpud, config
from container_support import PY, RUNC, Runc, video_memory

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "vgpud.service"
VGPUD = ROOT / ".venv" / "bin" / "vgpud"        # what `make install` links as /usr/bin/vgpud
UNIT_CONFIG = "/etc/vgpu/vgpud.toml"
START_TIMEOUT = 240.0       # Python under TCG is slow
TCG_SLOWDOWN = 3            # TimeoutStopSec is for a real CPU
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"   # systemd's

in_vm = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu")
    or not os.access(RUNC, os.X_OK),
    reason="runs in the VM with nvsim, vgpu.ko and runc")

poll = functools.partial(wait_until, interval=0.3)

CAPS = {n: i for i, n in enumerate((
    "chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap "
    "linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner "
    "sys_module sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice "
    "sys_resource sys_time sys_tty_config mknod lease audit_write audit_control setfcap "
    "mac_override mac_admin syslog wake_alarm block_suspend audit_read perfmon bpf "
    "checkpoint_restore").split())}


# ------------------------------------------------------------------ the unit
def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """{section: [(key, value)...]} in order, as systemd reads a unit file
    (comments, continuation lines)."""
    out: dict[str, list[tuple[str, str]]] = {}
    sec = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        m = re.fullmatch(r"\[(.+)\]", line)
        if m:
            sec = m.group(1)
            out.setdefault(sec, [])
            continue
        assert sec is not None and "=" in line, f"{UNIT}: cannot parse {raw!r}"
        k, v = line.split("=", 1)
        out[sec].append((k.strip(), v.strip()))
    return out


def boolean(v: str) -> bool:
    if v.lower() in ("1", "yes", "true", "on"):
        return True
    if v.lower() in ("0", "no", "false", "off"):
        return False
    raise AssertionError(f"not a boolean: {v!r}")


@dataclass
class Plan:
    """How the test runs what the unit's [Service] section says."""
    files: Path                              # the test's directory (under /run)
    notify: bool = False
    notify_main_only: bool = False
    exec_start: list[str] = field(default_factory=list)
    exec_start_pre: list[tuple[bool, list[str]]] = field(default_factory=list)
    reload_signal: int | None = None
    kill_signal: int = signal.SIGTERM
    stop_timeout: float = 90.0
    caps: set[str] | None = None             # the bounding set; None: all
    ambient: set[str] = field(default_factory=set)
    no_new_privs: bool = False
    nofile: tuple[int, int] | None = None
    umask: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    runtime_dirs: list[str] = field(default_factory=list)
    runtime_mode: int = 0o755
    runtime_preserve: bool = False
    state_dirs: list[str] = field(default_factory=list)
    state_mode: int = 0o755
    namespace: bool = False                  # a mount namespace of its own
    mounts: list[str] = field(default_factory=list)   # shell lines run inside it
    not_reproduced: dict[str, str] = field(default_factory=dict)

    def state_path(self, name: str) -> Path:
        return self.files / "var-lib" / name

    def map_arg(self, a: str, cfg: Path) -> str:
        return str(cfg) if a == UNIT_CONFIG else a

    def command(self, argv: list[str], cfg: Path) -> list[str]:
        """argv of an Exec*= line as the unit's process runs it: through
        unshare (a namespace setting), prlimit, setpriv, in that order
        (rlimits before the capabilities go, as systemd does)."""
        exe, *args = argv
        assert exe in ("/usr/bin/vgpud", "/usr/local/bin/vgpud"), \
            f"{UNIT}: no reproduction for a command other than vgpud: {exe}"
        inner = []
        if self.nofile:
            inner += ["prlimit", f"--nofile={self.nofile[0]}:{self.nofile[1]}", "--"]
        if self.caps is not None or self.no_new_privs or self.ambient:
            sp = ["setpriv"]
            if self.caps is not None:
                sp.append("--bounding-set=-all" + "".join(f",+{c}" for c in sorted(self.caps)))
            # no AmbientCapabilities: systemd leaves the inheritable set empty,
            # so that nothing beyond the bounding set survives the exec
            sp.append("--inh-caps=-all" + "".join(f",+{c}" for c in sorted(self.ambient)))
            if self.ambient:
                sp.append("--ambient-caps=" + ",".join(f"+{c}" for c in sorted(self.ambient)))
            if self.no_new_privs:
                sp.append("--no-new-privs")
            inner += [*sp, "--"]
        inner += [str(VGPUD), *(self.map_arg(a, cfg) for a in args)]
        script = "".join(m + " && " for m in self.mounts)
        if self.umask is not None:
            script += f"umask {self.umask:04o} && "
        script += "exec " + shlex.join(inner)
        sh = ["sh", "-c", script]
        return (["unshare", "--mount", "--propagation", "slave", "--"] + sh) if self.namespace \
            else sh

    def environ(self) -> dict[str, str]:
        e = {"PATH": CLEAN_PATH, **self.env}
        if self.runtime_dirs:
            e["RUNTIME_DIRECTORY"] = ":".join(f"/run/{d}" for d in self.runtime_dirs)
        if self.state_dirs:
            e["STATE_DIRECTORY"] = ":".join(str(self.state_path(d)) for d in self.state_dirs)
        if self.notify:
            e["NOTIFY_SOCKET"] = str(self.files / "notify")
        return e

    def prepare(self) -> None:
        """What systemd does before each start: the directories and their modes."""
        for d in self.runtime_dirs:
            p = Path("/run") / d
            p.mkdir(parents=True, exist_ok=True)
            os.chown(p, 0, 0)
            p.chmod(self.runtime_mode)
        for d in self.state_dirs:
            p = self.state_path(d)
            p.mkdir(parents=True, exist_ok=True)
            os.chown(p, 0, 0)
            p.chmod(self.state_mode)


def _ro(path: str) -> str:
    return (f"{{ ! [ -e {path} ] || {{ mount --bind {path} {path} && "
            f"mount -o remount,bind,ro {path}; }}; }}")


def _masked(path: str) -> str:
    return f"{{ ! [ -d {path} ] || mount -t tmpfs -o ro,mode=000 tmpfs {path}; }}"


def reproduce(service: list[tuple[str, str]], files: Path) -> Plan:
    """The Plan for [Service]; an AssertionError for a setting (or a value)
    the test cannot reproduce."""
    p = Plan(files)
    ns: dict[str, str] = {}
    for k, v in service:
        if k == "Type":
            assert v == "notify", f"Type={v}: only notify is reproduced"
            p.notify = True
        elif k == "NotifyAccess":
            assert v in ("main", "all"), f"NotifyAccess={v}"
            p.notify_main_only = v == "main"
        elif k in ("ExecStart", "ExecStartPre"):
            ignore = v.startswith("-")
            argv = shlex.split(v.lstrip("-@:+!"))
            if k == "ExecStart":
                assert not ignore and not p.exec_start, "one ExecStart"
                p.exec_start = argv
            else:
                p.exec_start_pre.append((ignore, argv))
        elif k == "ExecReload":
            m = re.fullmatch(r"/(?:usr/)?bin/kill -(\w+) \$MAINPID", v)
            assert m, f"ExecReload={v}: only 'kill -SIG $MAINPID' is reproduced"
            p.reload_signal = getattr(signal, "SIG" + m.group(1).removeprefix("SIG"))
        elif k == "KillSignal":
            p.kill_signal = getattr(signal, "SIG" + v.removeprefix("SIG"))
        elif k == "KillMode":
            # mixed and process: the stop signal goes to the main process only
            # (what the test does); the rest of the cgroup gets SIGKILL after
            # it, and vgpud's only children are its re-bind hooks
            assert v in ("mixed", "process"), f"KillMode={v}"
        elif k == "TimeoutStopSec":
            assert re.fullmatch(r"\d+", v), f"TimeoutStopSec={v}"
            p.stop_timeout = max(int(v) * TCG_SLOWDOWN, 60)
        elif k in ("Restart", "RestartSec"):
            p.not_reproduced[k] = ("restart after a failure: the test's vgpud must not "
                                   "fail, and its second start is the restart")
        elif k == "RuntimeDirectory":
            p.runtime_dirs += v.split()
        elif k == "RuntimeDirectoryMode":
            p.runtime_mode = int(v, 8)
        elif k == "RuntimeDirectoryPreserve":
            p.runtime_preserve = v == "restart" or boolean(v)
        elif k == "StateDirectory":
            p.state_dirs += v.split()
        elif k == "StateDirectoryMode":
            p.state_mode = int(v, 8)
        elif k == "CapabilityBoundingSet":
            assert not v.startswith("~"), f"{k}={v}: only a list of what is kept"
            p.caps = {c.lower().removeprefix("cap_") for c in v.split()}
            unknown = p.caps - CAPS.keys()
            assert not unknown, f"{k}: unknown {unknown}"
        elif k == "AmbientCapabilities":
            p.ambient |= {c.lower().removeprefix("cap_") for c in v.split()}
        elif k == "NoNewPrivileges":
            p.no_new_privs = boolean(v)
        elif k == "LimitNOFILE":
            soft, _, hard = v.partition(":")
            p.nofile = (int(soft), int(hard or soft))
        elif k == "UMask":
            p.umask = int(v, 8)
        elif k == "Environment":
            for a in shlex.split(v):
                name, _, val = a.partition("=")
                p.env[name] = val
        elif k in ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateMounts",
                   "ProtectKernelTunables"):
            ns[k] = v
        else:
            raise AssertionError(f"{UNIT}: [Service] {k}={v}: the test does not know how "
                                 f"to reproduce it; add it to tests/vm/test_systemd_unit.py first")
    # the settings that make systemd give the service a mount namespace, and
    # the mounts each implies (systemd.exec(5))
    for k, v in ns.items():
        if k == "ProtectSystem" and v.lower() not in ("no", "false", "0"):
            assert v in ("yes", "true", "full", "strict"), f"{k}={v}"
            if v == "strict":
                p.mounts.append(_ro("/"))
            else:
                p.mounts += [_ro(d) for d in ("/usr", "/boot", "/efi")]
                if v == "full":
                    p.mounts.append(_ro("/etc"))
        elif k == "ProtectHome" and v.lower() not in ("no", "false", "0"):
            assert v in ("yes", "true", "read-only", "tmpfs"), f"{k}={v}"
            for d in ("/home", "/root", "/run/user"):
                p.mounts.append(_ro(d) if v == "read-only" else
                                f"{{ ! [ -d {d} ] || mount -t tmpfs tmpfs {d}; }}"
                                if v == "tmpfs" else _masked(d))
        elif k == "PrivateTmp" and boolean(v):
            p.mounts += ["mount -t tmpfs -o mode=1777 tmpfs /tmp",
                         "mount -t tmpfs -o mode=1777 tmpfs /var/tmp"]
        elif k == "ProtectKernelTunables" and boolean(v):
            p.mounts += [_ro("/proc/sys"), _ro("/sys")]
        elif k == "PrivateMounts" and boolean(v):
            pass
        else:
            continue
        p.namespace = True
    assert p.exec_start, "no ExecStart"
    return p


def service_of(text: str, files: Path) -> Plan:
    return reproduce(parse_unit(text)["Service"], files)


# ------------------------------------------------------------------ notify
class NotifySocket:
    """$NOTIFY_SOCKET: a datagram socket that records each message with the
    sender's pid (SCM_CREDENTIALS), as systemd does for NotifyAccess."""

    def __init__(self, path: Path):
        path.unlink(missing_ok=True)
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.s.bind(str(path))
        self.msgs: list[tuple[int, dict[str, str]]] = []

    def _drain(self, timeout: float) -> None:
        r, _, _ = select.select([self.s], [], [], timeout)
        while r:
            data, anc, _, _ = self.s.recvmsg(4096, socket.CMSG_SPACE(12))
            pid = 0
            for lvl, typ, d in anc:
                if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", d[:12])[0]
            kv = dict(ln.split("=", 1) for ln in data.decode().splitlines() if "=" in ln)
            self.msgs.append((pid, kv))
            r, _, _ = select.select([self.s], [], [], 0)

    def wait(self, key: str, value: str, timeout: float, since: int = 0) -> int:
        """The index of the first message from ``since`` on that sets key=value."""
        end = time.monotonic() + timeout
        while True:
            for i in range(since, len(self.msgs)):
                if self.msgs[i][1].get(key) == value:
                    return i
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key}={value} on NOTIFY_SOCKET in {timeout:g} s: "
                                     f"{self.msgs[since:]}")
            self._drain(min(left, 1.0))

    def close(self) -> None:
        self.s.close()


# ------------------------------------------------------------------ vgpud as the unit runs it
class UnitVgpud(Vgpud):
    """vgpud started as the unit starts it (``Plan.command``), its files
    under plan.files; the paths of a node: socket and vgpufs in
    /run/vgpu, state in the unit's StateDirectory."""

    def __init__(self, plan: Plan):
        self.plan = plan
        state = plan.state_path(plan.state_dirs[0]) if plan.state_dirs else plan.files / "state"
        cfg = config(plan.files, paths={"socket": "/run/vgpu/vgpud.sock",
                                        "fuse_mount": "/run/vgpu/private/fs",
                                        "state_dir": str(state)},
                     gc={"interval": "1s"}, defaults={"compute": "10%"})
        argv = plan.exec_start
        i = argv.index("--config")
        assert argv[i + 1] == UNIT_CONFIG, argv
        rest = argv[:i] + argv[i + 2:]
        # Vgpud appends --config <its file> and args to command
        cmd = plan.command(rest, plan.files / "vgpud.toml")
        cmd[-1] += ' "$@"'
        cmd.append("sh")
        super().__init__(plan.files, cfg, command=cmd, cwd="/", env=plan.environ(),
                         wait_kernel=True, start_timeout=START_TIMEOUT,
                         stop_timeout=plan.stop_timeout)
        self.notify = NotifySocket(plan.files / "notify") if plan.notify else None

    def start(self) -> "UnitVgpud":
        self.plan.prepare()
        for ignore, argv in self.plan.exec_start_pre:
            r = subprocess.run(self.plan.command(argv, self.config), cwd="/",
                               env=self.plan.environ(), capture_output=True, text=True,
                               timeout=START_TIMEOUT)
            assert ignore or r.returncode == 0, f"ExecStartPre {argv}: {r.stdout}{r.stderr}"
        if self.notify:
            self.notify._drain(0)       # what a previous vgpud sent is not this one's
        mark = len(self.notify.msgs) if self.notify else 0
        super().start()
        if self.notify:
            i = self.notify.wait("READY", "1", START_TIMEOUT, since=mark)
            self.check_sender(mark, i)
        return self

    def check_sender(self, since: int, upto: int) -> None:
        if self.plan.notify_main_only:
            bad = [m for m in self.notify.msgs[since:upto + 1] if m[0] != self.proc.pid]
            assert not bad, f"notifications not from the main pid {self.proc.pid}: {bad}"

    def log(self, tail: int = 6000) -> str:
        return super().log(tail)

    def ctl(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "vgpu.cli.ctl", "--socket", self.sock, "--timeout", "30",
                               "--json", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)

    def status(self) -> dict[str, str]:
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        return dict(ln.split(":\t", 1) for ln in text.splitlines() if ":\t" in ln)


def fuse_mounted(mountinfo: str, at: str) -> bool:
    return any(ln.split()[4] == at and " - fuse.vgpufs " in ln
               for ln in Path(mountinfo).read_text().splitlines())


@pytest.fixture
def files():
    """The test's directory, under /run (PrivateTmp would hide /tmp from the
    daemon); /run/vgpu is removed afterwards if the test made it."""
    had_run_vgpu = os.path.exists("/run/vgpu")
    d = Path(f"/run/vgpu-test-unit-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(mode=0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)
    if not had_run_vgpu and not fuse_mounted("/proc/self/mountinfo", "/run/vgpu/private/fs"):
        shutil.rmtree("/run/vgpu", ignore_errors=True)


def load_modules(unit: dict) -> None:
    """[Unit] Wants=modprobe@NAME.service: systemd runs `modprobe -abq NAME`
    (failure ignored) before vgpud."""
    for k, v in unit.get("Unit", []):
        if k == "Wants":
            for u in v.split():
                m = re.fullmatch(r"modprobe@(.+)\.service", u)
                if m:
                    subprocess.run(["modprobe", "-abq", m.group(1)], capture_output=True)


SCRIPT = ("n=0; while [ ! -e /shared/u.go ]; do "
          "if [ -e /shared/u.ask$n ]; then { "
          "echo DEV: $(ls /dev | grep nvidia); "
          "for d in /dev/nvidia*; do (exec 3<>$d && echo OPEN $d) || echo FAIL $d; done; "
          "cat /proc/driver/nvidia/gpus/*/information; } > /shared/u.$n.tmp 2>&1; "
          "mv /shared/u.$n.tmp /shared/u.$n; n=$((n+1)); fi; sleep 0.2; done")
NODES = ["nvidia-uvm", "nvidia0", "nvidiactl"]


def ask(runc: Runc, n: int, d: UnitVgpud) -> str:
    (runc.shared / f"u.ask{n}").write_text("")
    assert poll(lambda: (runc.shared / f"u.{n}").exists(), 120), d.log()
    return (runc.shared / f"u.{n}").read_text()


def sees_its_nodes(out: str) -> bool:
    dev = [ln for ln in out.splitlines() if ln.startswith("DEV:")]
    return bool(dev) and sorted(dev[0].split()[1:]) == NODES and \
        all(f"OPEN /dev/{n}" in out for n in NODES) and "FAIL" not in out


@pytest.fixture
def harness(tmp_path, files):
    """(make(unit text) -> started UnitVgpud, runc); at teardown: the
    containers deleted (their poststop releases the slices), leftover
    slices deleted, the daemons stopped."""
    made: list[UnitVgpud] = []
    runcs: list[Runc] = []

    def make(text: str) -> tuple[UnitVgpud, Runc]:
        load_modules(parse_unit(text))
        d = UnitVgpud(service_of(text, files))
        made.append(d)
        d.start()
        r = Runc(tmp_path, d)
        runcs.append(r)
        return d, r

    yield make
    for r in runcs:
        (r.shared / "u.go").write_text("")
        r.cleanup()
    for d in made:
        if d.alive():
            r = d.ctl("list")
            for c in re.findall(r'"container": "([^"]+)"', r.stdout):
                d.ctl("delete", c, "--force")
        d.stop(check=False)
        if d.notify:
            d.notify.close()


# ------------------------------------------------------------------ tests
def test_every_setting_of_the_service_section_is_reproduced(tmp_path):
    plan = service_of(UNIT.read_text(), tmp_path)
    assert plan.notify and not plan.namespace, "vgpufs must be in the host's mount namespace"
    assert set(plan.not_reproduced) <= {"Restart", "RestartSec"}, plan.not_reproduced
    with pytest.raises(AssertionError, match="does not know"):
        service_of(UNIT.read_text().replace("[Service]", "[Service]\nPrivateDevices=yes"),
                   tmp_path)


def test_unit_orders_before_containerd_and_after_its_modules():
    u = dict((k, v) for k, v in parse_unit(UNIT.read_text())["Unit"] if k != "Documentation")
    assert "containerd.service" in u["Before"].split()
    for m in ("modprobe@fuse.service", "modprobe@vgpu.service"):
        assert m in u["Wants"].split() and m in u["After"].split()


def test_installed_unit_names_installed_docs_and_verifies(tmp_path):
    """`make install-unit` (part of `make install`) installs every file the
    unit's Documentation= names; systemd-analyze verify finds nothing."""
    dest = tmp_path / "dest"
    r = subprocess.run(["make", "-s", "install-unit", f"DESTDIR={dest}", "PREFIX=/usr",
                        f"BINDIR={VGPUD.parent}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    unit = dest / "etc/systemd/system/vgpud.service"
    docs = [v for k, v in parse_unit(unit.read_text())["Unit"] if k == "Documentation"]
    urls = " ".join(docs).split()
    assert urls and all(u.startswith("file:///usr/share/doc/vgpu/") for u in urls), urls
    for u in urls:
        assert (dest / u.removeprefix("file:///")).is_file(), f"{u} is not installed"
    assert f"ExecStart={VGPUD} --config" in unit.read_text()
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze here")
    v = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                       capture_output=True, text=True)
    own = [ln for ln in (v.stdout + v.stderr).splitlines() if "vgpud.service" in ln]
    assert v.returncode == 0 and not own, v.stdout + v.stderr


@in_vm
def test_vgpud_under_the_unit_serves_containers_and_rebinds_after_restart(harness):
    text = UNIT.read_text()
    d, runc = harness(text)
    plan = d.plan
    st = d.status()
    want = sum(1 << CAPS[c] for c in plan.caps)
    assert int(st["CapBnd"], 16) == want and int(st["CapEff"], 16) == want, st
    assert int(st["CapInh"], 16) == 0 and int(st["CapAmb"], 16) == 0, st
    assert st["NoNewPrivs"].strip() == "1"
    assert f"{plan.nofile[0]}" in Path(f"/proc/{d.proc.pid}/limits").read_text()
    assert os.stat(f"/proc/{d.proc.pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino
    assert fuse_mounted("/proc/self/mountinfo", d.fs), "vgpufs not in the host's namespace"
    assert os.stat("/run/vgpu").st_mode & 0o7777 == plan.runtime_mode

    runc.run_detached("c-unit", runc.bundle("c-unit", SCRIPT, {"vgpu.io/memory": "48MiB",
                                                              "vgpu.io/gpus": "0"}))
    out = ask(runc, 0, d)
    assert sees_its_nodes(out), f"{out}\n{d.log()}"
    assert video_memory(out) == ["48 MB"], out

    # ExecReload: the signal, then RELOADING=1 and READY=1 again
    mark = len(d.notify.msgs)
    d.proc.send_signal(plan.reload_signal)
    d.notify.wait("RELOADING", "1", START_TIMEOUT, since=mark)
    d.check_sender(mark, d.notify.wait("READY", "1", START_TIMEOUT, since=mark))

    # stop with KillSignal: STOPPING=1, exit 0 within TimeoutStopSec (scaled)
    mark = len(d.notify.msgs)
    t0 = time.monotonic()
    assert d.stop(plan.kill_signal) == 0, d.log()
    stopped_in = time.monotonic() - t0
    d.notify.wait("STOPPING", "1", 5, since=mark)
    assert os.path.isdir("/run/vgpu") == plan.runtime_preserve
    # the same way again: READY=1 comes once the view is re-bound
    d.start()
    log = d.log()
    assert "re-bound /proc/driver/nvidia" in log, log
    out = ask(runc, 1, d)
    assert sees_its_nodes(out), f"{out}\n{d.log()}"
    assert video_memory(out) == ["48 MB"] and "not connected" not in out, out
    print(f"vgpud stopped in {stopped_in:.1f} s")


@in_vm
def test_without_cap_sys_chroot_the_view_is_not_re_bound(harness):
    """The bounding set the unit had (no CAP_SYS_CHROOT): the container
    starts and sees its nodes, but after a restart vgpud cannot enter its
    mount namespace, and its view stays dead."""
    text = re.sub(r"^(CapabilityBoundingSet=.*?) ?CAP_SYS_CHROOT", r"\1", UNIT.read_text(),
                  flags=re.M)
    d, runc = harness(text)
    assert "sys_chroot" not in d.plan.caps
    runc.run_detached("c-nochroot", runc.bundle("c-nochroot", SCRIPT, {
        "vgpu.io/memory": "48MiB", "vgpu.io/gpus": "0"}))
    out = ask(runc, 0, d)
    assert sees_its_nodes(out) and video_memory(out) == ["48 MB"], f"{out}\n{d.log()}"
    assert d.stop(d.plan.kill_signal) == 0, d.log()
    d.start()
    assert "could not re-bind the view of c-nochroot" in d.log(), d.log()
    out = ask(runc, 1, d)
    assert video_memory(out) == [] and "not connected" in out, out


OLD_SETTINGS = "ProtectSystem=full\nPrivateTmp=yes\n"


@in_vm
def test_a_private_mount_namespace_hides_vgpufs_from_containers(harness):
    """The settings the unit had (ProtectSystem=full, PrivateTmp=yes): vgpud
    mounts vgpufs in its own namespace, the host's hook finds nothing there,
    and the container does not get its nodes."""
    text = UNIT.read_text().replace("[Service]\n", "[Service]\n" + OLD_SETTINGS)
    d, runc = harness(text)
    assert d.plan.namespace
    assert os.stat(f"/proc/{d.proc.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
    assert fuse_mounted(f"/proc/{d.proc.pid}/mountinfo", d.fs), d.log()
    assert not fuse_mounted("/proc/self/mountinfo", d.fs)
    b = runc.bundle("c-priv", SCRIPT.replace("while [ ! -e /shared/u.go ]", "for i in 1")
                    .replace("if [ -e /shared/u.ask$n ]; then", "if true; then")
                    .replace("sleep 0.2; done", "done"),
                    {"vgpu.io/memory": "48MiB", "vgpu.io/gpus": "0"})
    r = runc.run("c-priv", b)
    out = (runc.shared / "u.0").read_text() if (runc.shared / "u.0").exists() else ""
    assert r.returncode != 0 or not sees_its_nodes(out), f"{r.stdout}{r.stderr}{out}"
    print(f"old settings: runc exit {r.returncode}: {(r.stderr or out).strip()[-300:]}")
