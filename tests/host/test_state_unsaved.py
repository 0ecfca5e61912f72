"""A state file that cannot be written (disk full, read-only): the operation
that changed vgpu.ko succeeds, ``status`` says the state is unsaved and why,
vgpud's state-saver (SliceManager.save_pending) writes it again with a
back-off once it can, and a vgpud restarted on the stale file adopts what
the kernel has (vgpu.daemon.slices.save_state).  Against daemon_support's
FakeKernel; tests/vm/test_daemon_faults.py does it on a real full tmpfs
and a read-only remount.
"""

from __future__ import annotations

import errno
import json
import logging
import os

import trio

from vgpu.daemon.kport import KernelPort
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateStore

from daemon_support import FakeInventory, call

GiB = 1 << 30


def _break(mgr, monkeypatch, code=errno.ENOSPC):
    """Make every save fail with ``code``; returns a function that mends it."""
    real = mgr.store.save
    calls = []

    def broken(doc):
        calls.append(doc)
        raise OSError(code, os.strerror(code), str(mgr.store.dir / "x.tmp"))

    monkeypatch.setattr(mgr.store, "save", broken)

    def mend():
        monkeypatch.setattr(mgr.store, "save", real)
    return calls, mend


def _file(mgr) -> dict:
    return json.loads(mgr.store.path.read_text())["slices"]


async def test_failed_save_keeps_the_kernel_change_and_is_retried(env, monkeypatch, caplog):
    mgr, k, tmp = env
    await call(mgr, "create", container="before", memory="1GiB")
    calls, mend = _break(mgr, monkeypatch)
    caplog.set_level(logging.WARNING)
    r = await call(mgr, "create", container="c1", memory="1GiB")
    # the kernel has the slice: the client is told so, not "internal"
    assert r["ok"], r
    sid = r["result"]["slice"]["slice_id"]
    assert k.slices_[sid].name == "c1"
    st = (await call(mgr, "status"))["result"]["state"]
    assert st["saved"] is False
    assert st["error"]["errno"] == "ENOSPC" and st["error"]["path"] == str(mgr.store.path)
    assert "cannot save" in caplog.text and "ENOSPC" in caplog.text
    # set-quota and delete succeed too; one warning for the same error
    assert (await call(mgr, "set-quota", container="c1", memory="2GiB"))["ok"]
    assert k.slices_[sid].gpu(0).mem_limit == 2 * GiB
    assert (await call(mgr, "delete", container="before"))["ok"]
    assert caplog.text.count("cannot save") == 1
    assert set(_file(mgr)) == {"before"}             # the file lags
    n = len(calls)
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: mgr.save_pending(task_status=task_status,
                                                                 delays=(0.01, 0.04)))
        # retried with a back-off while it fails ...
        await trio.sleep(0.2)
        assert len(calls) > n + 2
        assert (await call(mgr, "status"))["result"]["state"]["saved"] is False
        # ... and written once it can be
        mend()
        with trio.fail_after(5):
            while mgr.state_error is not None:
                await trio.sleep(0.01)
        st = (await call(mgr, "status"))["result"]["state"]
        assert st == {"path": str(mgr.store.path), "saved": True, "error": None}
        assert set(_file(mgr)) == {"c1"}
        assert str(2 * GiB) in json.dumps(_file(mgr)["c1"])      # the set-quota's
        assert "saved" in caplog.text and "again after" in caplog.text
        # a later failure wakes the saver again
        calls, mend = _break(mgr, monkeypatch, errno.EROFS)
        assert (await call(mgr, "delete", container="c1"))["ok"]
        assert (await call(mgr, "status"))["result"]["state"]["error"]["errno"] == "EROFS"
        mend()
        with trio.fail_after(5):
            while mgr.state_error is not None:
                await trio.sleep(0.01)
        assert _file(mgr) == {}
        nursery.cancel_scope.cancel()


async def test_an_operation_that_saves_clears_the_error(env, monkeypatch):
    mgr, k, tmp = env
    _, mend = _break(mgr, monkeypatch, errno.EROFS)
    assert (await call(mgr, "create", container="a", memory="1GiB"))["ok"]
    assert mgr.state_error["errno"] == "EROFS"
    mend()
    assert (await call(mgr, "create", container="b", memory="1GiB"))["ok"]
    assert mgr.state_error is None and set(_file(mgr)) == {"a", "b"}


async def test_restart_on_a_stale_file_adopts_the_kernels_slices(env, monkeypatch):
    """vgpud died before it could save: the next one finds kernel slices its
    file lacks and adopts them (their limits kept), and saves."""
    mgr, k, tmp = env
    _, mend = _break(mgr, monkeypatch)
    r = await call(mgr, "create", container="lost", memory="1GiB")
    sid = r["result"]["slice"]["slice_id"]
    mend()
    m2 = SliceManager(mgr.cfg, "x", KernelPort(factory=lambda: k), StateStore(tmp / "state"),
                      FakeInventory())
    m2.load_state()
    assert "lost" not in m2.records
    counts = await m2.reconcile(startup=True)
    assert counts["adopted"] == 1
    assert m2.records["lost"].slice_id == sid and m2.records["lost"].adopted
    assert m2.records["lost"].memory == {0: GiB}
    assert "lost" in _file(m2)


def test_lock_survives_a_full_disk(tmp_path, monkeypatch):
    """The pid in vgpud.lock is for people: a write that fails (ENOSPC) does
    not keep vgpud from starting."""
    s = StateStore(tmp_path / "st")
    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    try:
        s.lock()
    finally:
        monkeypatch.setattr(os, "write", real)
    assert s._lock_fd is not None
    s2 = StateStore(tmp_path / "st")
    try:
        s2.lock()
    except Exception as e:                    # noqa: BLE001
        assert "another vgpud" in str(e)
    else:
        raise AssertionError("a second lock was granted")
    s.unlock()


def test_lock_on_a_read_only_descriptor_and_directory(tmp_path, monkeypatch, caplog):
    """The lock is held on a read-only descriptor (a file open for writing
    would make ``mount -o remount,ro`` of the state directory fail: busy),
    and a state directory that is read-only at start does not keep vgpud
    from starting (it serves with the state unsaved)."""
    import fcntl
    s = StateStore(tmp_path / "st")
    s.lock()
    assert fcntl.fcntl(s._lock_fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert (tmp_path / "st" / "vgpud.lock").read_text() == f"{os.getpid()}\n"
    s.unlock()
    real = os.open

    def ro(path, flags, *a):
        if flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, flags, *a)
    monkeypatch.setattr(os, "open", ro)
    caplog.set_level(logging.WARNING)
    s.lock()
    assert s._lock_fd is not None and "is read-only" in caplog.text
    s.unlock()
