"""vgpudev (kmod/vgpu/devfs.c): a slice's nodes that open as vgpu.ko's
minors and stat as NVIDIA's 195:N; who may mount it, its options, and the
OCI hook's use of it (vgpu.cli.hook.mounts.mount_views).  docs/containers.md,
"NVIDIA's device numbers".

    tools/vm/vm.py run --load-nvsim --load-vgpu -- .venv/bin/python -m pytest -q tests/vm/test_vgpu_devfs.py
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vgpu.abi.nvclient import RmClient
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="needs vgpu.ko loaded in the VM test bed")

LIBC = ctypes.CDLL(None, use_errno=True)


def mount(opts: str | None, target: str) -> int:
    """mount(2) of vgpudev: 0 or the errno."""
    data = None if opts is None else opts.encode()
    if LIBC.mount(b"none", target.encode(), b"vgpudev", 0, data) == 0:
        return 0
    return ctypes.get_errno()


def umount(target: str) -> None:
    assert LIBC.umount2(target.encode(), 0) == 0, os.strerror(ctypes.get_errno())


def refcnt() -> int:
    return int(Path("/sys/module/vgpu/refcnt").read_text())


def rdev(p) -> tuple[int, int]:
    st = os.stat(p)
    assert stat.S_ISCHR(st.st_mode), p
    return os.major(st.st_rdev), os.minor(st.st_rdev)


@pytest.fixture
def mnt(tmp_path):
    d = tmp_path / "vd"
    d.mkdir()
    yield str(d)
    while os.path.ismount(d):
        umount(str(d))


def test_nodes_stat_as_nvidias_and_open_as_the_slices(make_slice, mnt):
    sl = make_slice(gpus=[(1, 256 * MiB)])        # the slice's GPU 0 is nvsim's GPU 1
    before = refcnt()
    assert mount(f"slice={sl.id}", mnt) == 0
    assert refcnt() == before + 1                 # a mount pins vgpu.ko
    assert sorted(os.listdir(mnt)) == ["nvidia-uvm", "nvidia0", "nvidiactl"]
    assert rdev(f"{mnt}/nvidiactl") == (195, 255)
    assert rdev(f"{mnt}/nvidia0") == (195, 0)     # the slice's index: CARD_INFO's minor
    assert rdev(f"{mnt}/nvidia-uvm") == rdev("/dev/nvidia-uvm")
    # inode numbers: 2 + vgpu.ko's minor (the hook's "already there" test)
    ours = os.stat(Path(sl.prefix) / "nvidiactl")
    assert os.stat(f"{mnt}/nvidiactl").st_ino == 2 + os.minor(ours.st_rdev)
    fd = os.open(f"{mnt}/nvidiactl", os.O_RDWR)
    try:
        st = os.fstat(fd)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, 255)
    finally:
        os.close(fd)
    # the open went to vgpu.ko's slice: its quota accounts what is allocated
    c = RmClient(mnt)
    try:
        g = c.open_gpus()[0]
        g.alloc(16 * MiB)
        assert sl.used(0) == 16 * MiB
    finally:
        c.close()
    assert sl.used(0) == 0
    umount(mnt)
    assert refcnt() == before


BAD_OPTIONS = [None, "", "slice", "slice=", "slice=077", "slice=+{id}", "slice=0x{id}",
               "slice= {id}", "slice={id} ", "slice=-1", "slice=4294967296",
               "slice=99999999999", "slice={id},slice={id}", "slice={id},bogus=1",
               "slice={id},uid=0", "slice={missing}"]


@pytest.mark.parametrize("opts", BAD_OPTIONS)
def test_options_are_strict(make_slice, mnt, opts):
    sl = make_slice()
    if opts is not None:
        opts = opts.format(id=sl.id, missing=sl.id + 1000)
    assert mount(opts, mnt) in (errno.EINVAL, errno.ENOENT)
    assert not os.path.ismount(mnt)


def test_a_deleted_slice_mounts_no_more_and_its_nodes_stop_opening(kern, make_slice, mnt):
    sl = make_slice()
    assert mount(f"slice={sl.id}", mnt) == 0
    kern.slice_del(sl.id, force=True)
    with pytest.raises(OSError) as e:
        os.close(os.open(f"{mnt}/nvidiactl", os.O_RDWR))
    assert e.value.errno == errno.ENODEV
    umount(mnt)
    assert mount(f"slice={sl.id}", mnt) == errno.EINVAL


CHILD = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "nobody":
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
r = libc.mount(b"none", sys.argv[2].encode(), b"vgpudev", 0, sys.argv[3].encode())
print(0 if r == 0 else ctypes.get_errno())
"""


def test_only_host_root_mounts(make_slice, mnt):
    """No FS_USERNS_MOUNT: a user namespace's root (a container's, with
    CAP_SYS_ADMIN there) and an unprivileged user are refused."""
    sl = make_slice()
    # a mount point the unprivileged user can reach (the kernel's refusal,
    # not a path walk's EACCES)
    open_dir = tempfile.mkdtemp(dir="/tmp")
    os.chmod(open_dir, 0o777)
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, "nobody", open_dir, f"slice={sl.id}"],
                           capture_output=True, text=True, timeout=60)
        assert r.stdout.strip() == str(errno.EPERM), r
        assert not os.path.ismount(open_dir)
    finally:
        os.rmdir(open_dir)
    # host root without CAP_SYS_ADMIN
    r = subprocess.run(["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin",
                        sys.executable, "-c", CHILD, "root", mnt, f"slice={sl.id}"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == str(errno.EPERM), r
    # a user namespace's root (CAP_SYS_ADMIN there): unshare(CLONE_NEWUSER)
    # is refused in a chroot, which the VM test bed may be
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable,
                        "-c", CHILD, "root", mnt, f"slice={sl.id}"],
                       capture_output=True, text=True, timeout=60)
    if "unshare failed" not in r.stderr:
        assert r.stdout.strip() == str(errno.EPERM), r
    assert not os.path.ismount(mnt)


def test_read_only_no_new_nodes_and_remount_changes_nothing(make_slice, mnt):
    sl = make_slice()
    other = make_slice()
    assert mount(f"slice={sl.id}", mnt) == 0
    with pytest.raises(OSError) as e:
        os.mknod(f"{mnt}/x", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    assert e.value.errno in (errno.EROFS, errno.EPERM)
    with pytest.raises(OSError) as e:
        os.chmod(f"{mnt}/nvidiactl", 0o600)
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        os.close(os.open(f"{mnt}/new", os.O_CREAT | os.O_WRONLY, 0o600))
    assert e.value.errno == errno.EROFS
    remount = 0x20                              # MS_REMOUNT
    assert LIBC.mount(b"none", mnt.encode(), b"vgpudev", remount,
                      f"slice={other.id}".encode()) != 0
    assert ctypes.get_errno() == errno.EINVAL
    LIBC.mount(b"none", mnt.encode(), b"vgpudev", remount, b"rw")
    with pytest.raises(OSError) as e:
        os.chmod(f"{mnt}/nvidiactl", 0o600)
    assert e.value.errno == errno.EROFS
    assert os.stat(f"{mnt}/nvidiactl").st_ino == 2 + os.minor(
        os.stat(Path(sl.prefix) / "nvidiactl").st_rdev)


# The hook's part, in a private mount namespace: mount_views() twice on a
# rootfs with an empty /dev, then what is there.
HOOK = r"""
import json, os, sys
from vgpu.cli.hook.cmdline import HookError
from vgpu.cli.hook.mounts import Mounter, mount_views
rootfs, fuse, sid = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.system("mount --make-rprivate /")
m = Mounter()
out = {"first": mount_views("c", rootfs, fuse, m, lambda s: None, slice_id=sid),
       "second": mount_views("c", rootfs, fuse, m, lambda s: None, slice_id=sid)}
d = os.path.join(rootfs, "dev")
out["dev"] = sorted(os.listdir(d))
out["rdev"] = {n: [os.major(os.stat(os.path.join(d, n)).st_rdev),
                   os.minor(os.stat(os.path.join(d, n)).st_rdev)]
               for n in out["dev"] if n.startswith("nvidia")}
out["char"] = {n: os.readlink(os.path.join(d, "char", n))
               for n in sorted(os.listdir(os.path.join(d, "char")))}
if len(sys.argv) > 4:       # a /dev/char link of someone else's
    os.unlink(os.path.join(d, "char", "195:0"))
    os.symlink("../null", os.path.join(d, "char", "195:0"))
    try:
        mount_views("c", rootfs, fuse, m, lambda s: None, slice_id=sid)
        out["clash"] = "mounted"
    except HookError as e:
        out["clash"] = str(e)
print(json.dumps(out))
"""


@pytest.mark.parametrize("clash", [False, True])
def test_hook_binds_the_nodes_and_links_once(make_slice, tmp_path, clash):
    sl = make_slice(gpus=[(1, 256 * MiB)])
    rootfs, fuse = tmp_path / "rootfs", tmp_path / "fs"
    (rootfs / "dev").mkdir(parents=True)
    fuse.mkdir()
    r = subprocess.run(["unshare", "-m", sys.executable, "-c", HOOK, str(rootfs), str(fuse),
                        str(sl.id), *(["clash"] if clash else [])],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert sorted(out["first"]) == ["/dev/char/195:0", "/dev/char/195:255", "/dev/nvidia-uvm",
                                    "/dev/nvidia0", "/dev/nvidiactl"], out
    assert out["second"] == [], out               # idempotent
    assert out["dev"] == ["char", "nvidia-uvm", "nvidia0", "nvidiactl"], out   # no staging left
    assert out["rdev"]["nvidiactl"] == [195, 255] and out["rdev"]["nvidia0"] == [195, 0], out
    assert out["char"] == {"195:0": "../nvidia0", "195:255": "../nvidiactl"}, out
    if clash:
        assert "/dev/char/195:0 exists and is not a link to ../nvidia0" in out["clash"], out
