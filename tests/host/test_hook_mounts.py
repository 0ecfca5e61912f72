"""Nothing in a container's root decides where the hook mounts: its mount
targets are resolved inside the container's root by fd, never as strings,
and --rebind pins its pid with a pidfd.

Each test runs the hook's code in a child process with a private mount
namespace (``unshare -m``), so that nothing it mounts, rightly or wrongly,
can outlive the test; what the child saw (its /proc/self/mountinfo, the
hook's error) comes back as JSON.  Files are not namespaced: anything the
hook creates outside the rootfs shows on the host."""
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from runc_support import add_fake_nodes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces)")

# Runs in the child: mount_views() on a rootfs, then what is mounted where.
MOUNT_VIEWS = r"""
import json, os, sys
from vgpu.cli.hook.cmdline import HookError
from vgpu.cli.hook.mounts import Mounter, mount_views
rootfs, fs, cid = sys.argv[1:4]
out = {}
try:
    out["done"] = mount_views(cid, rootfs, fs, Mounter(), lambda m: None)
except HookError as e:
    out["error"] = str(e)
with open("/proc/self/mountinfo") as f:
    out["mounts"] = [ln.split()[4] for ln in f]
print(json.dumps(out))
"""


def in_private_ns(code: str, *args: str, timeout: float = 120) -> dict:
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                        code, *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.fixture
def box(tmp_path):
    """(rootfs with /dev and /proc/driver, vgpufs stand-in with slice c1's
    nodes, a host directory the attacks aim at)."""
    rootfs, fs, attack = tmp_path / "rootfs", tmp_path / "fs", tmp_path / "attack"
    (rootfs / "dev").mkdir(parents=True)
    (rootfs / "proc" / "driver").mkdir(parents=True)
    attack.mkdir()
    add_fake_nodes(fs, "c1")
    return rootfs, fs, attack


def under(mounts, d) -> list[str]:
    d = str(d)
    return [m for m in mounts if m == d or m.startswith(d + "/")]


def test_views_are_mounted_by_fd(box):
    rootfs, fs, attack = box
    out = in_private_ns(MOUNT_VIEWS, str(rootfs), str(fs), "c1")
    assert "error" not in out, out
    assert sorted(under(out["mounts"], rootfs)) == sorted(
        [str(rootfs / "dev" / n) for n in ("nvidiactl", "nvidia0", "nvidia-uvm")]
        + [str(rootfs / "proc" / "driver"), str(rootfs / "proc" / "driver" / "nvidia")])


@pytest.mark.parametrize("link", ["abs", "dotdot", "inside"])
def test_dev_symlink_is_refused(box, link):
    """/dev in the image is a symlink: to a host directory (absolute, or
    climbing out with ..) or even within the rootfs.  The hook refuses with
    a line naming /dev; nothing is mounted or created anywhere.  (Before, an
    escaping link was refused by a realpath check that a swap could race,
    and one within the rootfs was followed.)"""
    rootfs, fs, attack = box
    (rootfs / "dev").rmdir()
    if link == "abs":
        os.symlink(attack, rootfs / "dev")
    elif link == "dotdot":
        os.symlink("../../../../../../../../.." + str(attack), rootfs / "dev")
    else:
        (rootfs / "devices").mkdir()
        os.symlink("devices", rootfs / "dev")
    out = in_private_ns(MOUNT_VIEWS, str(rootfs), str(fs), "c1")
    assert "/dev in the rootfs is a symlink" in out.get("error", ""), out
    assert under(out["mounts"], rootfs) == [] and under(out["mounts"], attack) == []
    assert os.listdir(attack) == []
    assert not (rootfs / "devices").exists() or os.listdir(rootfs / "devices") == []


def test_dev_node_symlink_is_refused_and_nothing_stays_mounted(box):
    """/dev/nvidia0 is a symlink (to a host file): refused, naming it; the
    node mounted before it (nvidia-uvm sorts first) is unmounted again.
    (Before, nvidia-uvm stayed mounted.)"""
    rootfs, fs, attack = box
    os.symlink(attack / "x", rootfs / "dev" / "nvidia0")
    out = in_private_ns(MOUNT_VIEWS, str(rootfs), str(fs), "c1")
    assert "/dev/nvidia0 in the rootfs is a symlink" in out.get("error", ""), out
    assert under(out["mounts"], rootfs) == [] and under(out["mounts"], attack) == []
    assert os.listdir(attack) == []


@pytest.mark.parametrize("which", ["proc/driver/nvidia", "proc/driver"])
def test_proc_view_symlink_is_refused(box, which):
    """/proc/driver/nvidia (or /proc/driver) is a symlink to a host
    directory: refused, and the /dev nodes mounted before are undone.
    (Before, /proc/driver/nvidia was followed and the view bound onto the
    host directory; a /proc/driver link was silently skipped.)"""
    rootfs, fs, attack = box
    if which == "proc/driver":
        (rootfs / "proc" / "driver").rmdir()
    os.symlink(attack, rootfs / which)
    out = in_private_ns(MOUNT_VIEWS, str(rootfs), str(fs), "c1")
    assert f"/{which} in the rootfs is a symlink" in out.get("error", ""), out
    assert under(out["mounts"], rootfs) == [] and under(out["mounts"], attack) == []
    assert os.listdir(attack) == []


# Runs in the child: a forked racer swaps rootfs/dev (a directory) with
# rootfs/devlink (a symlink to the attack directory) as fast as it can, with
# renameat2(RENAME_EXCHANGE), so /dev is always one or the other, while
# mount_views runs again and again.  Between rounds the racer is stopped,
# everything mounted is unmounted and the nodes made are removed; a mount
# point or a file in the attack directory is an escape.
RACE = r"""
import ctypes, json, os, signal, sys
from vgpu.cli.hook.cmdline import HookError
from vgpu.cli.hook.mounts import Mounter, mount_views
rootfs, fs, cid, attack, rounds = sys.argv[1:6]
libc = ctypes.CDLL("libc.so.6", use_errno=True)
a, b = (os.path.join(rootfs, n).encode() for n in ("dev", "devlink"))
real = os.open(os.path.join(rootfs, "dev"), os.O_RDONLY | os.O_DIRECTORY)
racer = os.fork()
if racer == 0:
    libc.prctl(1, signal.SIGKILL)                  # PR_SET_PDEATHSIG: never outlive us
    while True:
        libc.renameat2(-100, a, -100, b, 2)
m = Mounter()
ok = refused = escapes = outside_files = 0
errors = set()

def mounts():
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f]

for _ in range(int(rounds)):
    os.kill(racer, signal.SIGCONT)
    try:
        mount_views(cid, rootfs, fs, m, lambda s: None)
        ok += 1
    except (HookError, OSError) as e:
        refused += 1
        errors.add(str(e).split(":")[-1].strip()[:80])
    os.kill(racer, signal.SIGSTOP)
    os.waitpid(racer, os.WUNTRACED)                # stopped for sure: paths hold still
    for p in sorted(mounts(), key=len, reverse=True):
        if p.startswith(attack + "/") or p == attack:
            escapes += 1
        if p.startswith(rootfs + "/") or p.startswith(attack + "/") or p == attack:
            libc.umount2(p.encode(), 2)
    for n in os.listdir(real):
        os.unlink(n, dir_fd=real)
    for n in os.listdir(attack):
        outside_files += 1
        os.unlink(os.path.join(attack, n))
os.kill(racer, signal.SIGKILL)
print(json.dumps({"ok": ok, "refused": refused, "escapes": escapes,
                  "outside_files": outside_files, "errors": sorted(errors),
                  "left": [p for p in mounts() if p.startswith(rootfs) or p.startswith(attack)]}))
"""


def test_racing_symlink_swap_never_mounts_outside_the_root(box):
    """A shared, writable /dev (another container's volume) swapped for a
    symlink to a host directory while the hook mounts, hundreds of times:
    never a mount or a file outside the rootfs.  (Before: the realpath
    check passed, then mount(2) followed the swapped-in link.)"""
    rootfs, fs, attack = box
    (rootfs / "proc" / "driver").rmdir()          # the /dev nodes only: faster rounds
    os.symlink(attack, rootfs / "devlink")
    out = in_private_ns(RACE, str(rootfs), str(fs), "c1", str(attack), "400", timeout=300)
    print(f"\nrace: {out}")
    assert out["escapes"] == 0 and out["outside_files"] == 0, out
    assert out["ok"] + out["refused"] == 400 and out["left"] == [], out
    assert all("symlink" in e or "File exists" in e or "No such file" in e
               for e in out["errors"]), out


# ------------------------------------------------------------ --rebind
def proc_start(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return int(data[data.rindex(b")") + 2:].split()[19])


# The "container": a process in its own mount namespace, chrooted into a
# root with a /proc/driver/nvidia directory (the stale view stands in).
CONTAINER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL("libc.so.6", use_errno=True)
assert libc.unshare(0x20000) == 0
assert libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None) == 0   # rprivate
os.chroot(sys.argv[1]); os.chdir("/")
print("ready", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def contained(root):
    """A process chrooted into ``root`` in a mount namespace of its own
    (CONTAINER): its pid while the block runs."""
    p = subprocess.Popen([sys.executable, "-c", CONTAINER, str(root)], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        yield p.pid
    finally:
        p.kill()
        p.wait()


@pytest.fixture
def container(tmp_path):
    root = tmp_path / "croot"
    (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (root / "proc" / "driver" / "nvidia" / "version").write_text("stale\n")
    fs = tmp_path / "fs"
    add_fake_nodes(fs, "c1")
    with contained(root) as pid:
        yield pid, root, fs


def rebind(fs, *args):
    return subprocess.run([sys.executable, "-m", "vgpu.cli.hook", "--debug", "--fuse-mount",
                           str(fs), *args], capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, PYTHONPATH=REPO))


def view_of(pid):
    with open(f"/proc/{pid}/root/proc/driver/nvidia/version") as f:
        return f.read()


def test_rebind_with_the_containers_start_time_rebinds_read_only(container):
    pid, root, fs = container
    r = rebind(fs, "--pid-start", str(proc_start(pid)), "--rebind", str(pid), "c1")
    assert r.returncode == 0, r.stderr
    assert "re-bound /proc/driver/nvidia" in r.stderr
    assert view_of(pid) == "NVRM version: vgpu slice of c1\n"
    with open(f"/proc/{pid}/mountinfo") as f:
        (line,) = [ln for ln in f if ln.split()[4] == "/proc/driver/nvidia"]
    assert line.split()[5].startswith("ro"), line
    r = rebind(fs, "--pid-start", str(proc_start(pid)), "--rebind", str(pid), "c1")
    assert r.returncode == 0 and "already shows" in r.stderr, r.stderr
    # a new vgpufs (another directory here): the old bind is detached by fd
    # and the new view takes its place, not stacked on it
    old = fs / "c1" / "proc" / "driver" / "nvidia"
    os.rename(old, fs / "old-view")
    old.mkdir()
    (old / "version").write_text("NVRM version: the new mount\n")
    r = rebind(fs, "--pid-start", str(proc_start(pid)), "--rebind", str(pid), "c1")
    assert r.returncode == 0 and "mounting over it" not in r.stderr, r.stderr
    assert view_of(pid) == "NVRM version: the new mount\n"
    with open(f"/proc/{pid}/mountinfo") as f:
        assert len([ln for ln in f if ln.split()[4] == "/proc/driver/nvidia"]) == 1


def test_rebind_refuses_a_pid_that_is_not_the_containers(container):
    """The pid vgpud names now belongs to a process that did not start when
    the container's did (a reused pid): refused before anything is
    touched.  (Before, --rebind took any pid it was given.)"""
    pid, root, fs = container
    r = rebind(fs, "--pid-start", str(proc_start(pid) + 1), "--rebind", str(pid), "c1")
    assert r.returncode == 1
    assert f"pid {pid} is not the container's" in r.stderr and "nothing re-bound" in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert view_of(pid) == "stale\n"


@pytest.mark.parametrize("args,words", [
    (["--cgroup", "sys/fs/cgroup/x"], 'invalid --cgroup "sys/fs/cgroup/x"'),
    (["--pid-start", "-5"], 'invalid --pid-start "-5"'),
    (["--pid-start"], "--pid-start needs a value"),
])
def test_rebind_identity_arguments_are_checked(args, words, capsys):
    from vgpu.cli import hook
    assert hook.main([*args, "--rebind", "12", "c1"] if len(args) > 1 else args) == 2
    assert words in capsys.readouterr().err


def test_rebind_without_an_identity_is_refused(container):
    pid, root, fs = container
    r = rebind(fs, "--rebind", str(pid), "c1")
    assert r.returncode == 1 and "needs --cgroup or --pid-start" in r.stderr, r.stderr
    assert view_of(pid) == "stale\n"


def test_rebind_refuses_a_process_outside_the_containers_cgroup(container, tmp_path):
    from vgpu.cli.hook.cgroups import cgroup2_mount
    v2 = cgroup2_mount()
    if not v2:
        pytest.skip("no cgroup v2 hierarchy")
    pid, root, fs = container
    cg = os.path.join(v2, f"vgpu-test-rebind-{os.getpid()}")
    os.mkdir(cg)
    try:
        r = rebind(fs, "--cgroup", cg, "--rebind", str(pid), "c1")
        assert r.returncode == 1 and f"not {cg}" in r.stderr, r.stderr
        assert view_of(pid) == "stale\n"
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:   # now it is the container's
            f.write(str(pid))
        r = rebind(fs, "--cgroup", cg, "--rebind", str(pid), "c1")
        assert r.returncode == 0, r.stderr
        assert view_of(pid) == "NVRM version: vgpu slice of c1\n"
    finally:
        with open(os.path.join(v2, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        time.sleep(0.05)
        os.rmdir(cg)


def test_rebind_refuses_a_symlinked_view_in_the_container(container, tmp_path):
    """The container's /proc/driver is a symlink (it has no procfs of its own
    here): refused, nothing mounted anywhere."""
    pid, root, fs = container
    elsewhere = root / "elsewhere"
    os.rename(root / "proc" / "driver", elsewhere)
    os.symlink("/elsewhere", root / "proc" / "driver")
    r = rebind(fs, "--pid-start", str(proc_start(pid)), "--rebind", str(pid), "c1")
    assert r.returncode == 1 and "/proc/driver/nvidia in its root is a symlink" in r.stderr, \
        r.stderr
    assert (elsewhere / "nvidia" / "version").read_text() == "stale\n"
    with open(f"/proc/{pid}/mountinfo") as f:
        assert not [ln for ln in f if "nvidia" in ln.split()[4] or "/elsewhere" in ln], \
            "a view was mounted"


# ------------------------------------------------------------ real runc
from runc_support import BUSYBOX, RUNC, add_fake_nodes, env, runc_run  # noqa: E402,F401
from runc_support import make_bundle as runc_bundle  # noqa: E402

needs_runc = pytest.mark.skipif(not os.access(RUNC, os.X_OK) or not os.access(BUSYBOX, os.X_OK),
                                reason="needs runc and busybox")


@needs_runc
def test_runc_shared_dev_volume_with_a_planted_symlink_is_refused(tmp_path, env):
    """/dev is a volume another container can write (a bind of a host
    directory) and nvidia0 in it is a symlink to a host file: the start
    fails naming /dev/nvidia0, nothing is made on the host, no slice stays."""
    fake, fs = env["fake"], env["fs"]
    add_fake_nodes(fs, "ctr-v")
    shared, attack = tmp_path / "shared-dev", tmp_path / "attack"
    shared.mkdir()
    attack.mkdir()
    os.symlink(attack / "x", shared / "nvidia0")
    b = runc_bundle(tmp_path, "v", {"vgpu.io/memory": "1GiB"})
    config = json.loads((b / "config.json").read_text())
    config["mounts"] = [m for m in config["mounts"] if not m["destination"].startswith("/dev")]
    config["mounts"].append({"destination": "/dev", "type": "bind", "source": str(shared),
                             "options": ["rbind", "rw"]})
    (b / "config.json").write_text(json.dumps(config))
    r = runc_run(env, b, "ctr-v")
    assert r.returncode != 0
    assert "container ctr-v: /dev/nvidia0 in the rootfs is a symlink" in r.stderr, r.stderr
    assert os.listdir(attack) == [] and os.path.islink(shared / "nvidia0")
    assert fake.slices == {}


@needs_runc
def test_runc_image_with_dev_symlinked_to_a_host_dir_is_refused(tmp_path, env):
    """The image's /dev is a symlink to a host path: runc keeps its own /dev
    mount inside the rootfs, the hook refuses to follow the link at all."""
    fake, fs = env["fake"], env["fs"]
    add_fake_nodes(fs, "ctr-l")
    attack = tmp_path / "attack"
    attack.mkdir()
    b = runc_bundle(tmp_path, "l", {"vgpu.io/memory": "1GiB"})
    os.symlink(attack, b / "rootfs" / "dev")
    r = runc_run(env, b, "ctr-l")
    assert r.returncode != 0
    assert "container ctr-l: /dev in the rootfs is a symlink" in r.stderr, r.stderr
    # (runc itself makes its /dev/fd, stdin, ... symlinks through the link,
    # by path: on the host; the hook adds nothing there)
    assert not [n for n in os.listdir(attack) if n.startswith("nvidia")], os.listdir(attack)
    assert fake.slices == {}


# ------------------------------------------------------------ a dead vgpufs
from vgpufs_support import STALE_CHILD as ONE_SLICE_VGPUFS  # noqa: E402  (one slice, named by argv[2])


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_rebind_replaces_a_dead_vgpufs_view(tmp_path, container):
    """What vgpud does after a restart, on real FUSE: the container's view
    is a bind of a vgpufs whose daemon was killed (ENOTCONN); --rebind,
    fd-based and pid-checked, detaches it and binds the new mount's view."""
    import errno
    from vgpufs_support import FakeSource, serve, two_gpu_slice
    from vgpu.daemon import fs as F
    pid, root, _ = container
    mnt = tmp_path / "vgpufs"
    start = str(proc_start(pid))
    p = subprocess.Popen([sys.executable, "-c", ONE_SLICE_VGPUFS, str(mnt), "c1"],
                         stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        try:
            assert p.stdout.readline().strip() == "mounted"
            r = rebind(mnt, "--pid-start", start, "--rebind", str(pid), "c1")
            assert r.returncode == 0, r.stderr
            assert "container c1" in view_of(pid)
        finally:
            p.kill()
            p.wait()
        with pytest.raises(OSError) as e:
            view_of(pid)
        assert e.value.errno == errno.ENOTCONN
        src = FakeSource()
        src.s["c1"] = two_gpu_slice("c1", sid=7)

        def body(m):
            r = rebind(m, "--pid-start", start, "--rebind", str(pid), "c1")
            return r, view_of(pid)
        r, view = serve(mnt, src, body)
        assert r.returncode == 0 and "re-bound" in r.stderr, r.stderr
        assert "mounting over it" not in r.stderr, r.stderr     # the dead one was detached
        assert "vgpu slice 7 (container c1)" in view, view
    finally:
        F.clear_stale_mounts(str(mnt))


def test_rebind_leaves_a_process_without_a_view_alone(tmp_path):
    """A pod's slice serves each container of the pod, and vgpud re-binds
    one process of each populated cgroup below the pod's, the sandbox's
    included: a root with no /proc/driver/nvidia view (the pause container)
    is left as it is, and that is no failure."""
    root = tmp_path / "pause-root"
    (root / "proc").mkdir(parents=True)
    fs = tmp_path / "fs"
    add_fake_nodes(fs, "c1")
    with contained(root) as pid:
        r = rebind(fs, "--pid-start", str(proc_start(pid)), "--rebind", str(pid), "c1")
        assert r.returncode == 0, r.stderr
        assert "/proc/driver/nvidia is not there" in r.stderr
        with open(f"/proc/{pid}/mountinfo") as f:
            assert "/proc/driver/nvidia" not in f.read()
