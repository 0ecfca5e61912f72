"""vgpuctl: parsing, local validation, output (human and --json) and exit
codes, against the fake API server of fake_vgpud.py (not the daemon)."""
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import zlib

import pytest

from tools.testbed.fake_vgpud import GIB
from vgpu.cli import ctl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(capsys, *argv):
    rc = ctl.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def with_slice(fake, name="c1", **args):
    import contextlib
    with contextlib.redirect_stdout(io.StringIO()):
        rc = ctl.main(["create", "--pid", "123", *sum(([f"--{k}", v] for k, v in args.items()), []),
                       "--", name])
    assert rc == 0


# ------------------------------------------------------------ usage / help
def test_help_lists_every_command_and_exit_code(capsys):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0 and out.startswith("usage: vgpuctl")
    for c in ctl.COMMANDS:
        assert re.search(rf"^  {re.escape(c.name)}\s+\S", out, re.M), c.name
    for code in range(6):
        assert re.search(rf"^  {code}  \S", out, re.M), code


@pytest.mark.parametrize("cmd", [c.name for c in ctl.COMMANDS if c.name != "help"])
def test_command_help_comes_from_the_table(capsys, cmd):
    rc, out, _ = run(capsys, cmd, "--help")
    assert rc == 0
    c = ctl.find_command(cmd)
    assert out.startswith(f"usage: vgpuctl {cmd}")
    for o in c.opts:
        assert o.spelling() in out
    rc2, out2, _ = run(capsys, "help", cmd)
    assert rc2 == 0 and out2 == out


def test_no_command_is_usage_error(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and out == ""
    assert err == "vgpuctl: no command given (see vgpuctl --help)\n"


@pytest.mark.parametrize("argv, message", [
    (["lst"], 'unknown command "lst"'),
    (["list", "--bogus"], 'unknown option "--bogus" for list'),
    (["show"], "show: missing CONTAINER"),
    (["show", "a", "b"], 'show: unexpected argument "b"'),
    (["list", "--json=1"], "--json takes no value"),
    (["set-quota", "c1", "--memory"], "--memory needs a value (SIZE)"),
    (["set-quota", "c1"], "set-quota: nothing to change"),
    (["set-quota", "c1", "--gpu", "0"], "set-quota: nothing to change"),
    (["set-quota", "c1", "--memory", "1GiB", "--memory", "2GiB"], "--memory given twice"),
    (["create", "c1", "--gpu", "0", "--gpu", "0"], "--gpu: GPU 0 named twice"),
    (["help", "nope"], 'unknown command "nope"'),
    (["set-audit", "c1"], "set-audit: missing on|off (usage: vgpuctl set-audit CONTAINER on|off)"),
    (["set-audit", "c1", "on", "now"], 'set-audit: unexpected argument "now"'),
    (["audit"], "audit: missing CONTAINER"),
    (["audit", "c1", "--allow-list"], "--allow-list needs a value (FILE)"),
])
def test_usage_errors(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("vgpuctl: ") and message in err


@pytest.mark.parametrize("argv, message", [
    (["set-quota", "c1", "--memory", "4GB"],
     'invalid --memory "4GB": not a size: write 4G (10^9 bytes) or 4Gi (2^30)'),
    (["set-quota", "c1", "--memory=lots"], 'invalid --memory "lots": not a size'),
    (["set-quota", "c1", "--memory", "-1GiB"], 'invalid --memory "-1GiB": negative'),
    (["set-quota", "c1", "--compute", "130%"], 'invalid --compute "130%": out of range'),
    (["set-quota", "c1", "--compute", "most"], 'invalid --compute "most": not a percentage'),
    (["set-quota", "c1", "--priority", "urgent"], 'invalid --priority "urgent": not a priority (high or low)'),
    (["set-quota", "c1", "--policy", "greedy"], 'invalid --policy "greedy": not a policy (share, fixed or burst)'),
    (["create", "c1", "--pid", "abc"], 'invalid --pid "abc": not a process id'),
    (["create", "c1", "--pid", "0"], 'invalid --pid "0": not a process id'),
    (["create", "c1", "--label", "novalue"], 'invalid --label "novalue": not a label'),
    (["create", "c1", "--gpu", "0,,1"], 'invalid --gpu "0,,1"'),
    (["create", "c1", "--gpu", "5000"], 'invalid --gpu "5000": names GPU index 5000, out of range (0 to 1023)'),
    (["show", "a/b"], 'invalid CONTAINER "a/b"'),
    (["show", ""], 'invalid CONTAINER "": empty (a container name is 1 to 127 bytes)'),
    (["show", "x" * 200], "longer than 127 bytes"),
    (["--timeout", "soon", "list"], 'invalid --timeout "soon": not a duration'),
    (["--timeout", "0", "list"], 'invalid --timeout "0": not positive'),
    (["top", "--interval", "-1"], 'invalid --interval "-1"'),
    (["set-audit", "c1", "maybe"], 'invalid audit mode "maybe": not one of on, off'),
    (["set-audit", "c1", "ON"], 'invalid audit mode "ON": not one of on, off'),
    (["set-audit", "a/b", "on"], 'invalid CONTAINER "a/b"'),
    (["audit", "c1", "--allow-list", ""], 'invalid --allow-list "": must be a non-empty string'),
])
def test_bad_values_are_quoted_and_never_sent(fake, capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("vgpuctl: ") and message in err, err
    assert fake.requests == []


def test_create_refuses_cgroup_and_pid(fake, capsys):
    rc, _, err = run(capsys, "create", "c1", "--cgroup", "/sys/fs/cgroup/x", "--pid", "1")
    assert rc == 2 and "--cgroup or --pid, not both" in err
    assert fake.requests == []


# ------------------------------------------------------------ what is sent
def test_create_sends_validated_values(fake, capsys):
    rc, out, err = run(capsys, "create", "c1", "--cgroup", "/sys/fs/cgroup/pod1",
                       "--gpu", "0,GPU-abc", "--gpu=1", "--memory", "1.5GiB", "--compute", "30%",
                       "--priority", "high", "--policy", "fixed", "--profile", "small",
                       "--label", "vgpu.io/class=inference", "--label", "team=a=b")
    assert fake.requests[-1] == {"v": 1, "id": 1, "op": "create", "args": {
        "container": "c1", "cgroup": "/sys/fs/cgroup/pod1", "gpus": [0, "GPU-abc", 1],
        "memory": 1536 << 20, "compute": 30, "priority": "high", "policy": "fixed",
        "profile": "small", "labels": {"vgpu.io/class": "inference", "team": "a=b"}}}


def test_create_and_set_quota_send_rdma(fake, capsys):
    """--rdma alone: true (the closest adapter, [rdma]'s limits); any
    --rdma-* option: the object; set-quota takes the limits only."""
    run(capsys, "create", "c1", "--rdma")
    assert fake.requests[-1]["args"] == {"container": "c1", "rdma": True}
    run(capsys, "create", "c2", "--rdma-hca", "mlx5_1", "--rdma-handles", "4")
    assert fake.requests[-1]["args"] == {"container": "c2",
                                         "rdma": {"hca": "mlx5_1", "handles": 4}}
    n = len(fake.requests)
    rc, _, err = run(capsys, "create", "c3", "--rdma-objects", "0")
    assert rc == 2 and 'invalid --rdma-objects "0": not a positive whole number' in err, err
    assert len(fake.requests) == n
    run(capsys, "set-quota", "c1", "--rdma-objects", "500")
    assert fake.requests[-1]["args"] == {"container": "c1", "rdma": {"objects": 500}}


def test_show_says_the_slices_rdma(fake, capsys):
    with_slice(fake, "c1")
    fake.slices["c1"]["rdma"] = {"hca": "mlx5_0", "nodes": [["uverbs0", 231, 192],
                                                           ["rdma_cm", 10, 58]],
                                 "handles": 4, "objects": 100}
    rc, out, _ = run(capsys, "show", "c1")
    assert re.search(r"^rdma:\s+mlx5_0 \(uverbs0 rdma_cm\), 4 contexts, 100 objects$", out,
                     re.M), out
    fake.slices["c1"]["rdma"]["used"] = {"handles": 1, "objects": 7}
    rc, out, _ = run(capsys, "show", "c1")
    assert re.search(r"^rdma:\s+mlx5_0 \(uverbs0 rdma_cm\), 1 of 4 contexts, 7 of 100 "
                     r"objects$", out, re.M), out
    fake.slices["c1"]["rdma"]["objects_by_type"] = {"qp": 2, "cq": 2, "mr": 2, "pd": 1}
    rc, out, _ = run(capsys, "show", "c1")
    assert re.search(r"^rdma held:\s+2 QP, 2 CQ, 2 MR, 1 PD$", out, re.M), out


def test_set_quota_sends_only_what_is_given(fake, capsys):
    with_slice(fake)
    rc, out, err = run(capsys, "set-quota", "c1", "--memory", "8GiB", "--compute", "12.5",
                       "--gpu", "0")
    assert rc == 0, err
    assert fake.requests[-1]["args"] == {"container": "c1", "memory": 8 * GIB,
                                         "compute": 12.5, "gpus": [0]}
    assert "8GiB" in out and "12.5%" in out


def test_global_options_anywhere(fake, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_SOCKET", str(tmp_path / "elsewhere.sock"))
    rc1, out1, _ = run(capsys, "--socket", fake.path, "status")
    rc2, out2, _ = run(capsys, "status", f"--socket={fake.path}", "--timeout", "2")
    assert rc1 == rc2 == 0 and out1 == out2


def test_double_dash_ends_options(fake, capsys):
    with_slice(fake, "-odd")
    rc, out, err = run(capsys, "show", "--", "-odd")
    assert rc == 0, err
    assert fake.requests[-1]["args"] == {"container": "-odd"}


def test_delete_force(fake, capsys):
    with_slice(fake)
    rc, out, _ = run(capsys, "delete", "c1", "--force")
    assert rc == 0 and out == "deleted c1\n"
    assert fake.requests[-1]["args"] == {"container": "c1", "force": True}
    with_slice(fake)
    run(capsys, "delete", "c1")
    assert fake.requests[-1]["args"] == {"container": "c1"}


# ------------------------------------------------------------ output
def test_list_human_and_json(fake, capsys):
    with_slice(fake, "c1", memory="8GiB", compute="30%")
    with_slice(fake, "c2")
    capsys.readouterr()
    rc, out, _ = run(capsys, "list")
    lines = out.splitlines()
    assert rc == 0 and lines[0].split()[:3] == ["CONTAINER", "GPUS", "MEMORY"]
    assert lines[1].split() == ["c1", "0", "512MiB", "8GiB", "1GiB", "30%", "low", "share", "-", "1"]
    assert lines[2].split()[0] == "c2" and len(lines) == 3
    rc, out, _ = run(capsys, "list", "--json")
    assert rc == 0
    assert json.loads(out) == {"slices": list(fake.slices.values())}


def test_list_shows_kubernetes_names(fake, capsys):
    """On a Kubernetes node a POD column says whose each slice is: the
    namespace, pod and container names the hook recorded as labels."""
    with_slice(fake, "c1")
    fake.slices["c1"]["labels"] = {"io.kubernetes.pod.name": "trainer-0",
                                   "io.kubernetes.pod.namespace": "ml",
                                   "io.kubernetes.container.name": "main"}
    with_slice(fake, "pod-abc")
    fake.slices["pod-abc"]["labels"] = {"io.kubernetes.pod.name": "web",
                                        "io.kubernetes.pod.namespace": "default"}
    with_slice(fake, "plain")
    capsys.readouterr()
    rc, out, _ = run(capsys, "list")
    lines = out.splitlines()
    assert rc == 0 and lines[0].split()[:3] == ["CONTAINER", "POD", "GPUS"]
    assert [ln.split()[:2] for ln in lines[1:]] == [
        ["c1", "ml/trainer-0/main"], ["pod-abc", "default/web"], ["plain", "-"]]


@pytest.mark.parametrize("cmd", ["status", "gpus", "list", "show c1", "audit c1"])
def test_json_is_the_api_result_as_is(fake, capsys, cmd):
    with_slice(fake)
    capsys.readouterr()
    rc, out, _ = run(capsys, "--json", *cmd.split())
    assert rc == 0
    op, *rest = cmd.split()
    args = {"container": rest[0]} if rest else {}
    assert json.loads(out) == fake._op(op, args)


def test_show_human(fake, capsys):
    with_slice(fake, "c1", memory="2GiB", label="a=b")
    capsys.readouterr()
    rc, out, _ = run(capsys, "show", "c1")
    assert rc == 0
    assert re.search(r"^container:\s+c1$", out, re.M)
    assert re.search(r"^labels:\s+a=b$", out, re.M)
    assert re.search(r"^compute:\s+25% share, priority low$", out, re.M)
    assert re.search(r"^0\s+GPU-00000000-fake\s+0\s+2GiB\s+512MiB\s+1GiB\s+3\s+0$", out, re.M)


def test_gpus_and_status_human(fake, capsys):
    rc, out, _ = run(capsys, "gpus")
    assert rc == 0
    assert out.splitlines()[1].split() == ["0", "NVSIM", "Simulated", "GPU", "GPU-00000000-fake",
                                           "0000:01:00.0", "16GiB", "0B", "0B", "-", "0"]
    assert "unhealthy" not in out
    fake.gpus[0]["fault"] = {"xid": 79, "at": 1.0}
    rc, out, _ = run(capsys, "gpus")
    assert re.search(r"^GPU 0 is unhealthy: XID 79 at \S+ \S+ \(the device plugin advertises "
                     r"its devices Unhealthy until vgpud restarts\)$", out, re.M), out
    assert "RDMA ADAPTER" not in out
    fake.gpus[0]["hca"] = {"name": "mlx5_0", "link": "PIX"}
    rc, out, _ = run(capsys, "gpus")
    assert re.search(r"^GPU\s+RDMA ADAPTER\s+LINK\n0\s+mlx5_0\s+PIX$", out, re.M), out
    rc, out, _ = run(capsys, "status")
    assert rc == 0
    assert "version 0.1.0, pid 4242, up 1h 2m" in out
    assert re.search(r"^vgpu.ko:\s+loaded$", out, re.M)
    assert re.search(r"^image env: ignored \(no profile allows it\)$", out, re.M), out
    fake.image_env_profiles = ["small"]
    rc, out, _ = run(capsys, "status")
    assert re.search(r"^image env: profiles small$", out, re.M), out
    assert not re.search(r"^state:", out, re.M)          # a vgpud before the field
    fake.state = {"path": "/var/lib/vgpu/state.json", "saved": True, "error": None}
    rc, out, _ = run(capsys, "status")
    assert re.search(r"^state:\s+saved \(/var/lib/vgpu/state.json\)$", out, re.M), out
    fake.state = {"path": "/var/lib/vgpu/state.json", "saved": False,
                  "error": {"errno": "ENOSPC", "message": "No space left on device",
                            "path": "/var/lib/vgpu/state.json", "since": 1.0}}
    rc, out, _ = run(capsys, "status")
    assert rc == 0
    assert re.search(r"^state:\s+NOT SAVED: /var/lib/vgpu/state.json: No space left on device "
                     r"\(ENOSPC\); vgpud retries$", out, re.M), out


# ------------------------------------------------------------ exit codes
def test_daemon_not_running_exit_3(tmp_path, capsys, monkeypatch):
    path = tmp_path / "missing.sock"
    monkeypatch.setenv("VGPU_SOCKET", str(path))
    rc, out, err = run(capsys, "list")
    assert rc == 3 and out == ""
    assert err == f"vgpuctl: vgpud is not running (no socket at {path})\n"


def test_permission_reply_exit_4(fake, capsys):
    fake.deny = True
    rc, out, err = run(capsys, "list")
    assert rc == 4 and out == ""
    assert err == "vgpuctl: permission denied: uid 1000 is not root nor in group vgpu\n"


def test_eacces_exit_4(tmp_path, capsys, monkeypatch):
    from vgpu.common import apiclient

    class Refusing:
        def settimeout(self, t):
            pass

        def connect(self, addr):
            raise PermissionError(13, "Permission denied")

        def close(self):
            pass
    monkeypatch.setattr(apiclient, "_new_socket", Refusing)
    rc, _, err = run(capsys, "--socket", str(tmp_path / "s"), "status")
    assert rc == 4 and err.startswith("vgpuctl: permission denied on ")


def test_not_found_exit_5(fake, capsys):
    rc, out, err = run(capsys, "show", "ghost")
    assert rc == 5 and out == ""
    assert err == 'vgpuctl: show: no slice for container "ghost" (not-found)\n'
    rc, _, _ = run(capsys, "set-quota", "ghost", "--memory", "1GiB")
    assert rc == 5


def test_daemon_refusal_exit_1(fake, capsys):
    with_slice(fake)
    rc, out, err = run(capsys, "set-quota", "c1", "--memory", "40GiB")
    assert rc == 1 and out == ""
    assert err.startswith("vgpuctl: set-quota: memory exceeds") and err.endswith("(admission)\n")
    rc, _, err = run(capsys, "create", "c1")
    assert rc == 1 and "(exists)" in err


def test_timeout_exit_1(fake, capsys):
    fake.silent = True
    t = time.monotonic()
    rc, out, err = run(capsys, "--timeout", "300ms", "status")
    assert rc == 1 and out == ""
    assert err == "vgpuctl: vgpud did not answer status within 0.3 s\n"
    assert time.monotonic() - t < 2


# ------------------------------------------------------------ events
def test_events_lines_and_json(fake, capsys):
    fake.events = [
        {"type": "slice-created", "container": "c1", "time": 1700000000.25},
        {"type": "alloc-refused", "container": "c1", "time": 1700000001.0, "gpu": 0,
         "size": 1073741824, "message": "over quota"},
    ]
    rc, out, err = run(capsys, "events")
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(".250 slice-created c1")
    assert lines[1].endswith('alloc-refused c1 gpu=0 size=1073741824 message="over quota"')
    # the daemon ending the stream is reported
    assert rc == 1 and err == "vgpuctl: vgpud closed the event stream\n"
    rc, out, _ = run(capsys, "events", "--json")
    assert [json.loads(ln) for ln in out.splitlines()] == fake.events


def _sigint_default():
    """In the child: Ctrl-C as a terminal gives it.  A test run started in
    the background by a shell without job control inherits SIGINT ignored,
    and Python then installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _spawn(fake, *argv):
    env = dict(os.environ, VGPU_SOCKET=fake.path, PYTHONPATH=REPO)
    return subprocess.Popen([sys.executable, "-m", "vgpu.cli.ctl", *argv], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)


def test_events_streams_and_ctrl_c_is_clean(fake):
    fake.events = [{"type": "slice-created", "container": "c1", "time": 1.0}]
    fake.hold_events = True
    p = _spawn(fake, "events", "--json")
    try:
        line = p.stdout.readline()          # arrives while the stream is open
        assert json.loads(line)["type"] == "slice-created"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
    finally:
        p.kill()
    assert p.returncode == 0
    assert "Traceback" not in err and err == ""


# ------------------------------------------------------------ top
def test_top_once(fake, capsys):
    with_slice(fake, "small", memory="1GiB")
    with_slice(fake, "big", memory="8GiB", gpu="1")
    fake.slices["big"]["gpus"][0]["memory_used"] = 6 * GIB
    capsys.readouterr()
    rc, out, err = run(capsys, "top", "--once")
    assert rc == 0, err
    assert "\x1b" not in out
    lines = out.splitlines()
    assert lines[0].startswith("vgpud 0.1.0  pid 4242  up 1h 2m  vgpu.ko loaded  2 GPUs  2 slices")
    rows = [ln.split() for ln in lines if ln.startswith(("big", "small"))]
    assert rows[0][:5] == ["big", "1", "6GiB", "8GiB", "75%"]     # busiest first
    assert rows[1][:5] == ["small", "0", "512MiB", "1GiB", "50%"]
    rc, out, _ = run(capsys, "top", "--once", "--json")
    doc = json.loads(out)
    assert doc["gpus"] == fake.gpus and len(doc["slices"]) == 2 and doc["status"]["pid"] == 4242


def test_top_shows_the_rdma_of_slices_that_have_it(fake, capsys):
    """A table of the RDMA slices (adapter, contexts and objects against
    their limits, objects by type) below the slices'; none without any."""
    with_slice(fake, "plain")
    rc, out, _ = run(capsys, "top", "--once")
    assert "ADAPTER" not in out
    with_slice(fake, "net", gpu="1")
    fake.slices["net"]["rdma"] = {"hca": "mlx5_1", "nodes": [["uverbs1", 231, 193]],
                                  "handles": 4, "objects": 100,
                                  "used": {"handles": 1, "objects": 7},
                                  "objects_by_type": {"qp": 2, "cq": 2, "mr": 2, "pd": 1}}
    rc, out, err = run(capsys, "top", "--once")
    assert rc == 0, err
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["CONTAINER", "ADAPTER"])
    assert lines[head].split() == ["CONTAINER", "ADAPTER", "CONTEXTS", "OBJECTS", "QP", "CQ",
                                   "MR", "PD"]
    assert [ln.split() for ln in lines[head + 1:]] == [["net", "mlx5_1", "1/4", "7/100", "2",
                                                        "2", "2", "1"]]
    fake.slices["net"]["rdma"].update(used=None, objects_by_type=None)
    rc, out, _ = run(capsys, "top", "--once")
    assert out.splitlines()[-1].split() == ["net", "mlx5_1", "-/4", "-/100", "-", "-", "-", "-"]


def test_top_not_a_terminal_prints_one_frame(fake, capsys):
    rc, out, _ = run(capsys, "top")
    assert rc == 0 and out.count("vgpud 0.1.0") == 1


class FakeTty(io.StringIO):
    def isatty(self):
        return True

    def fileno(self):
        raise OSError("no fd")


def test_top_live_redraws_and_quits_on_ctrl_c(fake, monkeypatch):
    out = FakeTty()
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        if len(sleeps) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(time, "sleep", sleep)
    from vgpu.common import apiclient
    with apiclient.ApiClient(fake.path) as c:
        rc = ctl.run_top(c, {"json": False, "interval": 1.0}, out)
    text = out.getvalue()
    assert rc == 0 and sleeps == [1.0, 1.0, 1.0]
    assert text.startswith("\x1b[?25l\x1b[H\x1b[2J")     # hide cursor, clear once
    assert text.count("\x1b[H") == 4                     # then home per frame: no flicker
    assert text.count("vgpud 0.1.0") == 3
    assert text.endswith("\x1b[J\x1b[?25h")              # cursor restored on the way out
    # one connection for all frames
    assert len(fake._conns) == 1


def test_top_ctrl_c_in_a_real_process(fake):
    p = subprocess.Popen([sys.executable, "-c",
                          "import sys, io; sys.stdout.isatty = lambda: True\n"
                          "from vgpu.cli import ctl; sys.exit(ctl.main(['top', '--interval', '50ms']))"],
                         cwd=REPO, env=dict(os.environ, VGPU_SOCKET=fake.path, PYTHONPATH=REPO),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=_sigint_default)
    seen = b""
    try:
        # two frames drawn (not a fixed second: a loaded machine starts the
        # process slower than that), then Ctrl-C
        deadline = time.monotonic() + 60
        while seen.count(b"vgpud 0.1.0") < 2 and time.monotonic() < deadline:
            if select.select([p.stdout], [], [], 0.5)[0]:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                seen += chunk
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    out = seen + out
    assert p.returncode == 0, err
    assert err == b"" and out.endswith(b"\x1b[?25h") and out.count(b"vgpud 0.1.0") >= 2


# ------------------------------------------------------------ the process
def test_entry_point_exit_codes_in_a_process(fake, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, VGPU_SOCKET=str(tmp_path / "none.sock"))
    r = subprocess.run([sys.executable, "-m", "vgpu.cli.ctl", "status"], cwd=REPO, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 3 and "vgpud is not running (no socket at" in r.stderr
    r = subprocess.run([sys.executable, "-m", "vgpu.cli.ctl"], cwd=REPO, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "usage" not in r.stdout and "no command given" in r.stderr


def test_help_imports_little():
    """--help loads nothing of the daemon's, nor socket.py or argparse:
    vgpuctl starts fast (its imports are all at its top, where a reader
    sees what it depends on)."""
    code = ("import sys, io; sys.stdout = io.StringIO(); from vgpu.cli import ctl; ctl.main(['--help']);"
            "sys.stdout = sys.__stdout__; print(sorted(m for m in sys.modules if m.startswith('vgpu')"
            " or m in ('json', 'socket', 'argparse', 'trio')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr
    assert "trio" not in r.stdout and "vgpu.daemon" not in r.stdout, r.stdout
    assert "'socket'" not in r.stdout and "'argparse'" not in r.stdout, r.stdout


#: what only some commands need (the modules their table entries name by
#: reference, and what those import): --help and list load none of it
HEAVY = ("vgpu.abi.trace", "vgpu.abi.allowlist", "vgpu.abi.nvabi", "vgpu.abi.nvnames",
         "vgpu.cli.tracefile", "vgpu.cli.histview", "vgpu.cli.report", "vgpu.cli.rtconfig",
         "vgpu.cli.ctlaudit", "vgpu.cli.ctltrace", "vgpu.cli.ctlhist", "vgpu.cli.ctlruntime",
         "vgpu.cli.ctlcdi", "vgpu.common.cdi", "vgpu.common.driverfiles", "subprocess", "platform",
         "dataclasses", "inspect", "ctypes", "typing", "tomllib", "difflib", "gzip", "shutil")


def loaded_by(fake, *argv: str) -> list[str]:
    """The modules `vgpuctl ARGV` loads beyond the interpreter's start, in a
    fresh interpreter (this checkout's package) against the fake."""
    code = ("import sys, io; before = set(sys.modules); sys.stdout = io.StringIO(); "
            f"from vgpu.cli import ctl; rc = ctl.main({list(argv)!r}); "
            "new = sorted(set(sys.modules) - before); sys.stdout = sys.__stdout__; "
            "import json; print(json.dumps([rc, new]))")
    r = subprocess.run([sys.executable, "-E", "-s", "-c", code], cwd=REPO, capture_output=True,
                       text=True, env=dict(os.environ, VGPU_SOCKET=fake.path))
    assert r.returncode == 0, r.stderr
    rc, mods = json.loads(r.stdout)
    assert rc == 0, r.stderr
    return mods


def test_help_and_list_load_only_what_they_need(fake):
    """issue 34: vgpuctl --help and list start within 20 ms of a bare
    interpreter (bench/cli_start.py): the commands with heavy imports are
    imported only when they run (vgpu.cli.ctlargv.resolve)."""
    with_slice(fake)
    for argv in (["--help"], ["list"], ["status"], ["show", "c1"], ["help", "trace"]):
        loaded = loaded_by(fake, *argv)
        assert "vgpu.cli.ctl" in loaded
        assert not [m for m in HEAVY if m in loaded], (argv, [m for m in HEAVY if m in loaded])
    # and a command that needs them gets them
    assert "vgpu.cli.ctlhist" in loaded_by(fake, "history", "--json")


# ------------------------------------------------------------ audit
def test_audit_table_sorted_with_summary(fake, capsys):
    with_slice(fake)
    capsys.readouterr()
    rc, out, err = run(capsys, "audit", "c1")
    assert rc == 0, err
    assert fake.requests[-1]["op"] == "audit" and fake.requests[-1]["args"] == {"container": "c1"}
    lines = out.splitlines()
    assert lines[0].split() == ["KIND", "NUMBER", "NAME", "VERDICT", "CALLS", "REFUSED",
                                "LET-THROUGH"]
    assert [ln.split() for ln in lines[1:-1]] == [
        ["escape", "0x5c", "NV_ESC_RM_EXPORT_OBJECT_TO_FD", "refuse", "2", "2", "0"],
        ["class", "0x0000c86f", "HOPPER_CHANNEL_GPFIFO_A", "forward", "1", "0", "0"],
        ["control", "0x20800145", "-", "virtualise", "1", "0", "0"],
        ["control", "0x20800a3e", "-", "refuse", "7", "5", "2"],
        ["control", "0x20801301", "NV2080_CTRL_CMD_FB_GET_INFO", "rewrite", "4", "0", "0"],
        ["uvm", "0x00000049", "-", "not-implemented", "3", "0", "3"],
    ]
    assert lines[-1] == ("6 items, 18 calls: 7 refused, 5 let through; audit mode off; "
                         "allow-list 0 items")
    # the columns line up
    col = lines[0].index("VERDICT")
    assert {ln[col:].split()[0] for ln in lines[1:-1]} == {"refuse", "forward", "virtualise",
                                                           "rewrite", "not-implemented"}


def test_audit_summary_audit_mode_dropped_and_empty(fake, capsys):
    with_slice(fake)
    from tools.testbed.fake_vgpud import make_audit
    rec = make_audit(fake.slices["c1"])
    rec.update(audit=True, dropped=12, allow_count=1, entries=rec["entries"][:1])
    fake.audits["c1"] = rec
    capsys.readouterr()
    rc, out, _ = run(capsys, "audit", "c1")
    assert out.splitlines()[-1] == ("1 item, 4 calls: 0 refused, 0 let through; audit mode on; "
                                    "allow-list 1 item; 12 calls not recorded (the record is "
                                    "full)")
    fake.audits["c1"] = dict(rec, audit=False, dropped=0, entries=[])
    rc, out, _ = run(capsys, "audit", "c1")
    assert rc == 0 and out.splitlines() == [
        "nothing recorded (audit mode is off: only refusals are recorded)",
        "0 items, 0 calls: 0 refused, 0 let through; audit mode off; allow-list 1 item"]


def test_audit_writes_allow_list(fake, capsys, tmp_path):
    from vgpu.abi import allowlist
    with_slice(fake)
    path = tmp_path / "trial.allow"
    path.write_text("old\n")
    capsys.readouterr()
    rc, out, err = run(capsys, "audit", "c1", "--allow-list", str(path))
    assert rc == 0, err
    assert out.splitlines()[-1] == (f"wrote 3 items the policy refused or vgpu.ko does not "
                                    f"implement to {path}")
    # refused or let through, verdict refuse or not-implemented: nothing else
    assert path.read_text() == ("kind\tnumber\tname\n"
                                "escape\t0x5c\tNV_ESC_RM_EXPORT_OBJECT_TO_FD\n"
                                "control\t0x20800a3e\t\n"
                                "uvm\t0x00000049\t\n")
    assert [i.pair for i in allowlist.load(path)] == [(0, 0x5C), (2, 0x20800A3E), (3, 0x49)]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".trial.allow")]  # no temporary
    # and a profile takes it as it is
    from vgpu.daemon.config import parse_config
    c = parse_config(f'[profiles.p]\nmemory = 1\nallow_list = "{path}"\n')
    assert len(c.audit_of("p").allow) == 3
    # with --json, stdout is the document alone; the count goes to stderr
    rc, out, err = run(capsys, "audit", "c1", "--json", f"--allow-list={path}")
    assert rc == 0 and json.loads(out) == fake._op("audit", {"container": "c1"})
    assert err == f"wrote 3 items the policy refused or vgpu.ko does not implement to {path}\n"


def test_audit_allow_list_write_error_and_odd_entries(fake, capsys, tmp_path):
    with_slice(fake)
    capsys.readouterr()
    bad = tmp_path / "no-such-dir" / "x.allow"
    rc, out, err = run(capsys, "audit", "c1", "--allow-list", str(bad))
    assert rc == 1 and err == f"vgpuctl: audit: cannot write {bad}: No such file or directory\n"
    # entries of a kind this vgpuctl does not know are left out, and said so
    from tools.testbed.fake_vgpud import make_audit
    rec = make_audit(fake.slices["c1"])
    rec["entries"].append({"kind": "kind-9", "number": 1, "name": "", "verdict": "refuse",
                           "calls": 1, "refused": 1, "let_through": 0})
    fake.audits["c1"] = rec
    path = tmp_path / "a.allow"
    rc, out, err = run(capsys, "audit", "c1", "--allow-list", str(path))
    assert rc == 0 and out.splitlines()[-1].endswith("(1 of an unknown kind left out)")
    assert len(path.read_text().splitlines()) == 4


def test_audit_not_found_exit_5(fake, capsys):
    rc, out, err = run(capsys, "audit", "ghost")
    assert rc == 5 and out == ""
    assert err == 'vgpuctl: audit: no slice for container "ghost" (not-found)\n'


def test_set_audit(fake, capsys):
    with_slice(fake)
    capsys.readouterr()
    rc, out, err = run(capsys, "set-audit", "c1", "on")
    assert rc == 0, err
    assert fake.requests[-1]["args"] == {"container": "c1", "audit": True}
    assert out == ("audit mode on for c1 (slice 1): what the policy refuses is forwarded and "
                   "recorded (vgpuctl audit c1)\n")
    rc, out, _ = run(capsys, "show", "c1")
    assert re.search(r"^audit:\s+on: what the policy refuses is forwarded and recorded$", out,
                     re.M), out
    rc, out, _ = run(capsys, "set-audit", "c1", "off", "--json")
    assert fake.requests[-1]["args"] == {"container": "c1", "audit": False}
    assert json.loads(out)["slice"]["audit"] is False
    fake.slices["c1"]["allow_count"] = 2
    rc, out, _ = run(capsys, "show", "c1")
    assert re.search(r"^audit:\s+off; allow-list of 2 items$", out, re.M), out
    rc, _, err = run(capsys, "set-audit", "ghost", "on")
    assert rc == 5


# ------------------------------------------------------------ trace
def _trace_file(path):
    """(header, records, trailer) of a file vgpuctl trace wrote, read back
    by vgpu.abi.trace (the reader vgpu-replay uses)."""
    from vgpu.abi import trace
    t = trace.load(str(path))
    return t.header, [r.raw for r in t.records], t.trailer


def test_trace_writes_header_records_and_trailer(fake, capsys, tmp_path):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    fake.trace_records = [make_trace_record(1, "open"), make_trace_record(2),
                          make_trace_record(3, "close")]
    fake.trace_end = {"end": True, "reason": "slice deleted"}
    capsys.readouterr()
    out = tmp_path / "c1.trace"
    rc, stdout, err = run(capsys, "trace", "c1", "--output", str(out))
    assert rc == 0, err
    assert fake.requests[-1] == {"v": 1, "id": 1, "op": "trace", "args": {"container": "c1"}}
    assert stdout == ""
    assert err == f"trace of c1: 3 records, 0 lost -> {out} (slice deleted)\n"
    header, records, trailer = _trace_file(out)
    assert header["trace"] == 1 and header["container"] == "c1" and header["gpus"] == \
        [{"index": 0, "memory_limit": 4 * GIB}]
    assert records == fake.trace_records                   # the record objects as they are
    assert trailer == {"end": True, "records": 3, "lost": 0}
    lines = out.read_text().splitlines()
    assert len(lines) == 5 and all(" " not in ln for ln in lines)   # vgpu.abi.trace.dumps: compact


def test_trace_counts_seq_gaps_as_lost(fake, capsys, tmp_path):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    # a tracer that joins late starts mid-way: only gaps between records count
    fake.trace_records = [make_trace_record(s) for s in (40, 41, 44, 45, 47)]
    fake.trace_end = {"end": True, "reason": "slice deleted"}
    capsys.readouterr()
    rc, _, err = run(capsys, "trace", "c1", "--output", str(tmp_path / "t"))
    assert rc == 0 and "5 records, 3 lost" in err
    assert _trace_file(tmp_path / "t")[2] == {"end": True, "records": 5, "lost": 3}


def test_trace_count_stops_and_closes_the_stream(fake, capsys, tmp_path):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    fake.trace_records = [make_trace_record(s) for s in range(1, 11)]
    fake.hold_trace = True
    capsys.readouterr()
    rc, _, err = run(capsys, "trace", "c1", "--output", str(tmp_path / "t"), "--count", "3")
    assert rc == 0, err
    assert err == f"trace of c1: 3 records, 0 lost -> {tmp_path / 't'}\n"
    _, records, trailer = _trace_file(tmp_path / "t")
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert trailer == {"end": True, "records": 3, "lost": 0}
    assert fake.trace_closed.wait(5)                 # hanging up is what ends vgpud's trace
    # the signals it held while writing are handled as before
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()


def test_trace_seconds_stops_a_quiet_stream(fake, capsys, tmp_path):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    fake.trace_records = [make_trace_record(1), make_trace_record(2)]
    fake.hold_trace = True
    capsys.readouterr()
    t = time.monotonic()
    rc, _, err = run(capsys, "trace", "c1", "--output", str(tmp_path / "t"), "--seconds",
                     "400ms")
    assert rc == 0, err
    assert 0.3 < time.monotonic() - t < 5
    assert "2 records, 0 lost" in err
    assert _trace_file(tmp_path / "t")[2] == {"end": True, "records": 2, "lost": 0}
    assert fake.trace_closed.wait(5)


def test_trace_refuses_to_overwrite_unless_forced(fake, capsys, tmp_path):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    capsys.readouterr()
    out = tmp_path / "old.trace"
    out.write_text("keep me\n")
    n = len(fake.requests)
    rc, stdout, err = run(capsys, "trace", "c1", "--output", str(out))
    assert rc == 1 and stdout == ""
    assert err == f'vgpuctl: trace: "{out}" exists (--force overwrites it)\n'
    assert out.read_text() == "keep me\n" and len(fake.requests) == n   # nothing asked
    fake.trace_records = [make_trace_record(1)]
    fake.trace_end = {"end": True, "reason": "slice deleted"}
    rc, _, err = run(capsys, "trace", "c1", "--output", str(out), "--force")
    assert rc == 0, err
    assert _trace_file(out)[2] == {"end": True, "records": 1, "lost": 0}


def test_trace_gz_output(fake, capsys, tmp_path):
    import gzip
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    fake.trace_records = [make_trace_record(s) for s in range(1, 6)]
    fake.trace_end = {"end": True, "reason": "slice deleted"}
    capsys.readouterr()
    out = tmp_path / "c1.trace.gz"
    rc, _, err = run(capsys, "trace", "c1", "--output", str(out))
    assert rc == 0, err
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    header, records, trailer = _trace_file(out)
    assert header["container"] == "c1" and [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert trailer == {"end": True, "records": 5, "lost": 0}
    assert gzip.decompress(out.read_bytes()).decode().count("\n") == 7


def test_trace_to_stdout(fake, capsys):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    fake.trace_records = [make_trace_record(1), make_trace_record(2)]
    fake.trace_end = {"end": True, "reason": "slice deleted"}
    capsys.readouterr()
    rc, out, err = run(capsys, "trace", "c1", "--output", "-")
    assert rc == 0, err
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert lines[0]["trace"] == 1 and lines[1:3] == fake.trace_records
    assert lines[3] == {"end": True, "records": 2, "lost": 0}
    assert err == "trace of c1: 2 records, 0 lost -> stdout (slice deleted)\n"


def test_trace_errors(fake, capsys, tmp_path):
    from tools.testbed.fake_vgpud import make_trace_record
    out = tmp_path / "t"
    rc, _, err = run(capsys, "trace", "ghost", "--output", str(out))
    assert rc == 5 and "no slice for container" in err and not out.exists()
    rc, _, err = run(capsys, "trace", "c1")
    assert rc == 2 and "trace: missing --output FILE (usage: vgpuctl trace CONTAINER " \
        "--output FILE" in err
    rc, _, err = run(capsys, "trace", "c1", "--output", str(out), "--count", "0")
    assert rc == 2 and 'invalid --count "0": not a positive whole number' in err
    rc, _, err = run(capsys, "trace", "c1", "--output", str(out), "--seconds", "soon")
    assert rc == 2 and 'invalid --seconds "soon"' in err
    with_slice(fake)
    capsys.readouterr()
    rc, _, err = run(capsys, "trace", "c1", "--output", str(tmp_path / "no" / "dir" / "t"))
    assert rc == 1 and "trace: cannot write" in err and "No such file or directory" in err
    # vgpud goes away mid-trace: the file still ends with its trailer, and it is an error
    fake.trace_records = [make_trace_record(1)]
    rc, _, err = run(capsys, "trace", "c1", "--output", str(out))
    assert rc == 1
    assert err == (f"trace of c1: 1 record, 0 lost -> {out}\n"
                   "vgpuctl: vgpud closed the trace stream\n")
    assert _trace_file(out)[2] == {"end": True, "records": 1, "lost": 0}
    assert fake.requests and all(r["op"] != "trace" or r["args"]["container"] in ("ghost", "c1")
                                 for r in fake.requests)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_trace_stops_cleanly_on_a_signal(fake, tmp_path, sig):
    from tools.testbed.fake_vgpud import make_trace_record
    with_slice(fake)
    fake.trace_records = [make_trace_record(s) for s in range(1, 4)]
    fake.hold_trace = True
    out = tmp_path / "t.gz"
    p = _spawn(fake, "trace", "c1", "--output", str(out))
    try:
        deadline = time.monotonic() + 20
        # the third record is written (and flushed) while the trace runs
        while time.monotonic() < deadline:
            # what a crash would leave: a gzip stream without its end, whose
            # sync-flushed lines are whole
            try:
                text = zlib.decompressobj(wbits=31).decompress(out.read_bytes())
            except (OSError, zlib.error):
                text = b""
            if text.count(b"\n") >= 4:
                assert text.endswith(b"\n")
                break
            time.sleep(0.05)
        else:
            pytest.fail("no records written")
        p.send_signal(sig)
        stdout, err = p.communicate(timeout=10)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert err == f"trace of c1: 3 records, 0 lost -> {out}\n"
    assert _trace_file(out)[2] == {"end": True, "records": 3, "lost": 0}
    assert fake.trace_closed.wait(5)
