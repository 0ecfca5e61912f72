"""vgpud's vgpufs service (vgpu.daemon.main.Daemon._fs_service) when the FUSE
connection ends under a running daemon: it logs why, mounts afresh and
serves the same slices; a mount point unmounted from outside while a file
of it is still open (the superblock lives on, as it does while containers
hold bind mounts) is noticed by the mount watch.  A real mount through
/dev/fuse (root); tests/vm/test_daemon_faults.py does it with vgpu.ko,
slices in use and an aborted connection.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
from types import SimpleNamespace

import pytest
import trio

from vgpu.daemon import fs as F
from vgpu.daemon import main as M

from daemon_support import call

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or os.geteuid() != 0 or F.pyfuse3 is None,
    reason="needs /dev/fuse, root and pyfuse3")


def umount(path: str, flags: int = 0) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.umount2(path.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


@needs_fuse
async def test_vgpufs_mounted_again_when_its_connection_ends(env, monkeypatch, caplog):
    mgr, k, tmp = env
    assert (await call(mgr, "create", container="c1", memory="1GiB"))["ok"]
    monkeypatch.setattr(F, "MOUNT_CHECK", 0.1)
    monkeypatch.setattr(M, "FS_RETRY_MIN", 0.05)
    caplog.set_level(logging.INFO)
    mp = str(tmp / "priv" / "fs")
    d = M.Daemon(SimpleNamespace(paths=SimpleNamespace(fuse_mount=mp)), "x")
    d.mgr = mgr

    async def in_thread(fn, *a):
        return await trio.to_thread.run_sync(fn, *a)

    async def serving(fs_before):
        with trio.fail_after(20):
            while d.fs is None or d.fs is fs_before or not F.fuse_mounts_at(mp):
                await trio.sleep(0.05)
        assert await in_thread(os.listdir, mp) == ["c1"]

    async with trio.open_nursery() as n:
        await n.start(d._fs_service)
        first = d.fs
        view = f"{mp}/c1/proc/driver/nvidia/version"
        assert "container c1" in await in_thread(lambda: open(view).read())

        # 1. unmounted from outside, nothing else holds it: the FUSE loop
        # ends, or (whichever sees it first: on a loaded machine the mount
        # watch, every 0.1 s here, can) the mount watch finds it gone
        await in_thread(umount, mp)
        await serving(first)
        assert "stopped serving: its FUSE connection ended" in caplog.text or \
            "is no longer mounted (unmounted from outside)" in caplog.text, caplog.text
        assert "vgpufs mounted again" in caplog.text
        assert "c1" in await in_thread(os.listdir, mp)

        # 2. lazily unmounted while a file of it is open: the superblock (and
        # the connection) lives on, so only the mount watch can tell
        second = d.fs
        caplog.clear()              # what follows says why the second one went
        held = await in_thread(os.open, view, os.O_RDONLY)
        try:
            await in_thread(umount, mp, F.MNT_DETACH)
            await serving(second)
            assert "is no longer mounted (unmounted from outside)" in caplog.text
            # the old connection is gone: its open file says so
            with pytest.raises(OSError) as e:
                await in_thread(os.read, held, 100)
            assert e.value.errno in (errno.ENOTCONN, errno.ENODEV, errno.EIO)
        finally:
            os.close(held)
        assert "container c1" in await in_thread(lambda: open(view).read())
        n.cancel_scope.cancel()
    assert not F.fuse_mounts_at(mp)


@needs_fuse
async def test_a_mount_that_fails_again_is_retried(env, monkeypatch, caplog):
    """A remount that fails is logged and retried with a back-off; the
    daemon does not die."""
    mgr, k, tmp = env
    monkeypatch.setattr(M, "FS_RETRY_MIN", 0.05)
    caplog.set_level(logging.INFO)
    mp = str(tmp / "priv" / "fs")
    d = M.Daemon(SimpleNamespace(paths=SimpleNamespace(fuse_mount=mp)), "x")
    d.mgr = mgr
    real_init = F.pyfuse3.init
    fails = []

    def init(*a, **kw):
        if len(fails) < 2:
            fails.append(1)
            raise RuntimeError("fuse_session_mount failed (test)")
        return real_init(*a, **kw)

    async with trio.open_nursery() as n:
        await n.start(d._fs_service)
        first = d.fs
        monkeypatch.setattr(F.pyfuse3, "init", init)
        await trio.to_thread.run_sync(umount, mp)
        with trio.fail_after(20):
            while d.fs is None or d.fs is first:
                await trio.sleep(0.05)
        assert len(fails) == 2
        assert caplog.text.count("mounting at") == 2 and "retrying in" in caplog.text
        assert F.fuse_mounts_at(mp)
        n.cancel_scope.cancel()
