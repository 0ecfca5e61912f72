"""vgpu-runtime's C fast path (container-hook/vgpu-runtime.c), built here
with the project's flags, run with a fake runc and a fake slow path that
record their argv: which command lines and bundles go straight to runc,
which to the Python slow path, and that both see the argv unchanged."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time

import pytest

from vgpu.cli import runtime
from vgpu.common.request import RUNTIME_GUARD_DEST

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(REPO, "container-hook", "vgpu-runtime.c")
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    d = tmp_path_factory.mktemp("fastpath")
    out = d / "vgpu-runtime"
    r = subprocess.run([CC, "-O2", "-Wall", "-Wextra", "-Werror",
                        '-DVGPU_SLOW_PATH="/nonexistent/vgpu-runtime-slow"', "-o", str(out), SRC],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


class Rig:
    """A fake runc and a fake slow path, each writing "<who>\\n<argv...>"
    and $VGPU_RUNC to a record file, then exiting 7 (runc) or 9 (slow)."""

    def __init__(self, tmp_path, binary):
        self.tmp, self.binary = tmp_path, binary
        self.record = tmp_path / "record"
        self.runc = self._script("runc", 7)
        self.slow = self._script("slow", 9)

    def _script(self, who, rc):
        p = self.tmp / f"fake-{who}"
        p.write_text(f"#!/bin/sh\n{{ echo {who}; echo \"VGPU_RUNC=$VGPU_RUNC\"; "
                     f"printf '%s\\n' \"$@\"; }} > {self.record}\nexit {rc}\n")
        p.chmod(0o755)
        return p

    def run(self, *argv, env=None, cwd=None):
        if self.record.exists():
            self.record.unlink()
        e = {"PATH": "/usr/bin:/bin", "VGPU_RUNC": str(self.runc),
             "VGPU_RUNTIME_SLOW": str(self.slow)}
        e.update(env or {})
        r = subprocess.run([str(self.binary), *argv], capture_output=True, text=True, env=e,
                           cwd=cwd or self.tmp, timeout=20)
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        r.who = lines[0] if lines else None
        r.runc_env = lines[1].split("=", 1)[1] if len(lines) > 1 else None
        r.argv = lines[2:]
        return r

    def bundle(self, name, config=None, raw: bytes | None = None):
        b = self.tmp / name
        b.mkdir(exist_ok=True)
        if raw is not None:
            (b / "config.json").write_bytes(raw)
        elif config is not None:
            (b / "config.json").write_text(json.dumps(config))
        return b


@pytest.fixture
def rig(tmp_path, binary):
    return Rig(tmp_path, binary)


PLAIN = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["PATH=/bin", "TERM=xterm"]},
         "root": {"path": "rootfs"},
         "annotations": {"io.kubernetes.cri.container-type": "sandbox",
                         "io.kubernetes.cri.sandbox-id": "abc"}}


def test_commands_other_than_create_go_straight_to_runc(rig):
    b = rig.bundle("ask", {"annotations": {"vgpu.io/memory": "1Gi"}})
    for argv in (["state", "c1"], ["--root", "/r", "delete", "--force", "c1"],
                 ["start", "c1"], ["kill", "c1", "9"], ["--debug", "ps", "c1"],
                 ["exec", "--pid-file", "p", "c1", "true"], ["features"]):
        r = rig.run(*argv, cwd=b)
        assert (r.returncode, r.who, r.argv) == (7, "runc", argv), (argv, r.stderr)
    assert rig.run(cwd=b).who == "runc"                  # no argument at all: runc's usage


def test_create_of_a_bundle_without_a_request_execs_runc(rig):
    b = rig.bundle("plain", PLAIN)
    argv = ["--root", "/run/containerd/runc/k8s.io", "--log", "/x/log.json", "--log-format",
            "json", "--systemd-cgroup", "create", "--bundle", str(b), "--pid-file", "p", "c1"]
    r = rig.run(*argv)
    assert (r.returncode, r.who, r.argv) == (7, "runc", argv), r.stderr
    r = rig.run("run", "c2", cwd=b)                      # bundle "." by default
    assert r.who == "runc" and r.argv == ["run", "c2"]


@pytest.mark.parametrize("text", [
    '{"annotations": {"vgpu.io/memory": "4Gi"}}',
    '{"annotations": {"vgpu.io/container-memory": "4Gi"}}',
    '{"annotations": {"vgpu.io\\/memory": "4Gi"}}',             # "\/" spells "/"
    '{"annotations": {"\\u0076gpu.io/memory": "4Gi"}}',         # "\u0076" spells "v"
    '{"process": {"env": ["\\u0056GPU_MEMORY=1Gi"]}}',          # "\u0056" spells "V"
    '{"annotations": {"vgpu\\u002eio/memory": "4Gi"}}',       # "\u002e" spells "."
    '{"annotations": {"vgpu.i\\u006F/memory": "4Gi"}}',       # upper-case hex digits
    '{"annotations": {"x": "\\u00zz"}}',                       # not JSON: Python says so
    '{"annotations": {"x": "a"}, "y": "\\u00',                  # cut short
    '{"process": {"env": ["VGPU_MEMORY=1Gi", "VGPU_PROFILE=p"]}}',
    '{"hooks": {"prestart": [{"path": "/bin/true", "args": ["vgpu.io"]}]}}',
    # the device plugin's guard mount alone: the slow path takes it out
    json.dumps({"mounts": [{"destination": RUNTIME_GUARD_DEST, "type": "bind",
                            "source": "/run/vgpu/x", "options": ["rbind", "ro"]}]}),
])
def test_a_bundle_that_could_ask_takes_the_slow_path(rig, text):
    b = rig.bundle("ask", raw=text.encode())
    argv = ["--root", "/r", "create", "-b", str(b), "c1"]
    r = rig.run(*argv)
    assert (r.returncode, r.who, r.argv) == (9, "slow", argv), r.stderr
    assert r.runc_env == str(rig.runc)              # the slow path runs the same runc


@pytest.mark.parametrize("text", [
    # what containerd (Go's encoding/json, HTML-safe) writes for "&&", "<", ">"
    '{"process": {"args": ["sh", "-c", "a \\u0026\\u0026 b 2\\u003e\\u00261 \\u003c x"]}}',
    '{"annotations": {"x": "caf\\u00e9 \\u2028 \\ud83d\\ude00"}}',   # no ASCII spelled
    '{"annotations": {"x": "\\u0000"}}',
])
def test_escapes_that_spell_no_request_stay_on_the_fast_path(rig, text):
    """Every config.json containerd writes for a command with "&&" or "2>&1"
    carries \u0026: only an escape of a character of "vgpu.io" or "VGPU_"
    can hide a request, so the others go straight to runc."""
    assert json.loads(text)
    b = rig.bundle("plain", raw=text.encode())
    argv = ["create", "-b", str(b), "c1"]
    r = rig.run(*argv)
    assert (r.returncode, r.who, r.argv) == (7, "runc", argv), r.stderr


def test_missing_odd_or_huge_config_takes_the_slow_path(rig):
    # missing: the slow path says what is wrong (vgpu-runtime: cannot prepare ...)
    assert rig.run("create", "--bundle", str(rig.tmp / "nope"), "c1").who == "slow"
    d = rig.bundle("dir")
    (d / "config.json").mkdir()
    assert rig.run("create", "--bundle", str(d), "c1").who == "slow"
    f = rig.bundle("fifo")
    os.mkfifo(f / "config.json")                     # never opened for writing: no hang
    assert rig.run("create", "--bundle", str(f), "c1").who == "slow"
    big = {"annotations": {"x": "y" * (4 << 20)}}
    assert rig.run("create", "--bundle", str(rig.bundle("big", big)), "c1").who == "slow"
    ok = {"annotations": {"x": "y" * ((4 << 20) - 100)}}
    assert rig.run("create", "--bundle", str(rig.bundle("ok", ok)), "c1").who == "runc"
    empty = rig.bundle("empty", raw=b"")
    assert rig.run("create", "--bundle", str(empty), "c1").who == "runc"   # runc refuses it
    long = "/" + "x" * 5000
    assert rig.run("create", "--bundle", long, "c1").who == "slow"


ARGVS = [
    ["create", "--bundle", "{A}", "c1"],
    ["create", "--bundle={A}", "c1"],
    ["create", "-b", "{A}", "c1"],
    ["create", "-b={A}", "c1"],
    ["create", "-b{A}", "c1"],
    ["create", "-bundle", "{A}", "c1"],
    ["create", "-bundle={A}", "c1"],
    ["create", "--pid-file", "p", "--bundle", "{A}", "c1"],
    ["--root", "/r", "create", "--bundle", "{A}", "c1"],
    ["--root=/r", "--log-format=json", "run", "-b", "{A}", "c1"],
    ["-root", "/r", "-log", "/l", "create", "--bundle", "{A}", "c1"],
    ["--rootless", "true", "--criu", "/c", "run", "--bundle", "{A}", "c1"],
    ["--", "create", "--bundle", "{A}", "c1"],
    ["create", "--bundle", "{B}", "c1"],
    ["create", "c1"],
    ["create", "--bundle"],
    ["create", "-b="],
    ["--root", "create", "--bundle", "{A}", "c1"],        # "create" is --root's value
]


@pytest.mark.parametrize("argv", ARGVS)
def test_the_fast_path_reads_the_command_line_as_the_slow_path_does(rig, argv):
    """Bundle A asks, bundle B and "." do not: the C wrapper takes the slow
    path exactly when vgpu.cli.runtime's find_command/find_bundle name a
    create/run of bundle A."""
    a = rig.bundle("A", {"annotations": {"vgpu.io/memory": "1Gi"}})
    b = rig.bundle("B", PLAIN)
    cwd = rig.bundle("cwd", PLAIN)
    argv = [x.replace("{A}", str(a)).replace("{B}", str(b)) for x in argv]
    cmd, i = runtime.find_command(argv)
    want = cmd in ("create", "run") and \
        os.path.normpath(os.path.join(cwd, runtime.find_bundle(argv, i + 1))) == str(a)
    r = rig.run(*argv, cwd=cwd)
    assert r.who == ("slow" if want else "runc"), (argv, r.stderr)
    assert r.argv == argv


def test_an_unknown_global_option_cannot_hide_a_create(rig):
    """A global option we do not know that takes a value makes its value
    look like the command: a "create" or "run" after it still takes the
    slow path, which decides."""
    a = rig.bundle("A", {"annotations": {"vgpu.io/memory": "1Gi"}})
    r = rig.run("--new-option", "v", "create", "--bundle", str(a), "c1")
    assert r.who == "slow"


def test_version_takes_the_slow_path(rig):
    assert rig.run("--version").who == "slow"


def test_runc_is_found_on_path_and_never_itself(rig, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    os.symlink(rig.binary, a / "runc")               # vgpu-runtime installed as "runc"
    shutil.copy(rig.runc, b / "runc")
    r = rig.run("state", "c1", env={"VGPU_RUNC": "", "PATH": f"{a}:{b}"})
    assert r.who == "runc" and r.returncode == 7, r.stderr
    r = rig.run("state", "c1", env={"VGPU_RUNC": "", "PATH": str(a)})
    assert r.returncode == 127 and "cannot find runc" in r.stderr
    r = rig.run("state", "c1", env={"VGPU_RUNC": str(tmp_path / "none")})
    assert r.returncode == 127 and "cannot run" in r.stderr


def test_a_missing_slow_path_fails_with_one_line(rig):
    a = rig.bundle("A", {"annotations": {"vgpu.io/memory": "1Gi"}})
    r = rig.run("create", "--bundle", str(a), "c1", env={"VGPU_RUNTIME_SLOW": ""})
    assert r.returncode == 127 and r.who is None
    assert r.stderr.strip() == ("vgpu-runtime: cannot run /nonexistent/vgpu-runtime-slow: "
                                "No such file or directory")


def test_the_slow_path_behind_the_fast_path_edits_config_json(rig, tmp_path):
    """The whole chain as make install wires it: C wrapper -> python -IS
    script -> vgpu.cli.runtime -> runc, for a container with a request."""
    import sys
    slow = tmp_path / "vgpu-runtime-slow"
    slow.write_text(f"#!{sys.executable} -IS\nimport sys\nsys.path.insert(0, {REPO!r})\n"
                    f"from vgpu.cli.runtime import main\nsys.exit(main())\n")
    slow.chmod(0o755)
    a = rig.bundle("A", {"annotations": {"vgpu.io/memory": "1Gi"}})
    argv = ["--root", "/r", "create", "--bundle", str(a), "c1"]
    r = rig.run(*argv, env={"VGPU_RUNTIME_SLOW": str(slow), "VGPU_HOOK": "/x/vgpu-oci-hook",
                            "PYTHONPATH": "/nonexistent"})
    assert (r.returncode, r.who, r.argv) == (7, "runc", argv), r.stderr
    config = json.loads((a / "config.json").read_text())
    assert config["hooks"]["createRuntime"][0]["path"] == "/x/vgpu-oci-hook"


def test_fast_path_cost(rig):
    """Not asserted (timing): what the wrapper adds to a plain runc call."""
    b = rig.bundle("plain", PLAIN)
    direct, wrapped = [], []
    for _ in range(30):
        t0 = time.perf_counter()
        subprocess.run([str(rig.runc), "create", "--bundle", str(b), "c1"])
        direct.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rig.run("create", "--bundle", str(b), "c1")
        wrapped.append(time.perf_counter() - t0)
    print(f"\nfast path: runc alone {statistics.median(direct) * 1e3:.2f} ms, through "
          f"vgpu-runtime {statistics.median(wrapped) * 1e3:.2f} ms (medians of 30)")
