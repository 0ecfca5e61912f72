"""vgpu.daemon.state: the desired state file, written atomically and durably."""
import json
import logging
import os
import stat

import pytest

from vgpu.daemon import state as state_mod
from vgpu.daemon.state import STATE_VERSION, StateError, StateStore, empty_state

DOC = {"version": 2, "slices": {"c1": {"memory": 4096, "gpus": [0], "labels": {"a": "b"}}}}


def files(d):
    return sorted(os.listdir(d))


def test_missing_file_is_empty(tmp_path):
    st = StateStore(tmp_path / "state")
    assert st.load() == {"version": 2, "slices": {}}
    assert st.recovered_from is None
    assert not (tmp_path / "state").exists()     # load creates nothing


def test_round_trip(tmp_path):
    st = StateStore(tmp_path)
    st.save(DOC)
    assert st.load() == DOC
    assert StateStore(tmp_path).load() == DOC
    assert json.loads((tmp_path / "state.json").read_text()) == DOC
    assert files(tmp_path) == ["state.json"]


def test_save_replaces(tmp_path):
    st = StateStore(tmp_path)
    st.save(DOC)
    st.save(empty_state())
    assert st.load() == empty_state()
    assert files(tmp_path) == ["state.json"]


def test_save_creates_dir_0700_and_file_0600(tmp_path):
    old = os.umask(0)
    try:
        st = StateStore(tmp_path / "a" / "state")
        st.save(DOC)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "state" / "state.json").st_mode) == 0o600


def test_crash_before_rename_keeps_old_file(tmp_path, monkeypatch):
    st = StateStore(tmp_path)
    st.save(DOC)
    before = (tmp_path / "state.json").read_bytes()

    def crash(src, dst):
        raise OSError(5, "simulated crash between write and rename")
    monkeypatch.setattr(state_mod.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        st.save({"version": 2, "slices": {}})
    monkeypatch.undo()
    assert (tmp_path / "state.json").read_bytes() == before
    assert files(tmp_path) == ["state.json"]         # the temporary file is gone
    assert StateStore(tmp_path).load() == DOC


def test_crash_during_write_keeps_old_file(tmp_path, monkeypatch):
    st = StateStore(tmp_path)
    st.save(DOC)
    real_write = os.write

    def short_then_fail(fd, data):
        real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(state_mod.os, "write", short_then_fail)
    with pytest.raises(OSError):
        st.save({"version": 2, "slices": {"c2": {}}})
    monkeypatch.undo()
    assert st.load() == DOC
    assert files(tmp_path) == ["state.json"]


def test_stale_temp_file_from_a_killed_save_is_removed(tmp_path):
    st = StateStore(tmp_path)
    st.save(DOC)
    (tmp_path / ".state.json.abc123.tmp").write_text('{"version": 2, "sl')
    (tmp_path / "unrelated").write_text("keep")
    assert st.load() == DOC
    assert files(tmp_path) == ["state.json", "unrelated"]


def test_fsync_file_then_rename_then_directory(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st_ = os.fstat(fd)
        calls.append(("fsync-dir" if stat.S_ISDIR(st_.st_mode) else "fsync-file"))
        real_fsync(fd)

    def replace(a, b):
        calls.append("rename")
        real_replace(a, b)
    monkeypatch.setattr(state_mod.os, "fsync", fsync)
    monkeypatch.setattr(state_mod.os, "replace", replace)
    StateStore(tmp_path).save(DOC)
    assert calls == ["fsync-file", "rename", "fsync-dir"]


def test_unserialisable_doc_writes_nothing(tmp_path):
    st = StateStore(tmp_path)
    st.save(DOC)
    with pytest.raises(TypeError):
        st.save({"version": 2, "slices": {"c": {"x": object()}}})
    with pytest.raises(ValueError):
        st.save({"version": 2, "slices": {"c": {"x": float("nan")}}})
    with pytest.raises(ValueError):
        st.save({"slices": {}})
    with pytest.raises(ValueError):
        st.save({"version": 2, "slices": []})
    assert st.load() == DOC
    assert files(tmp_path) == ["state.json"]


@pytest.mark.parametrize("content", [
    b"{not json", b"", b"\xff\xfe", b"[1, 2]", b'"x"', b'{"slices": {}}',
    b'{"version": 2}', b'{"version": 2, "slices": []}', b'{"version": 2, "slices": {"c": 5}}',
])
def test_corrupt_file_is_moved_aside(tmp_path, caplog, content):
    (tmp_path / "state.json").write_bytes(content)
    st = StateStore(tmp_path)
    with caplog.at_level(logging.ERROR, logger="vgpu.daemon.state"):
        assert st.load() == empty_state()
    assert st.recovered_from is not None
    assert st.recovered_from.parent == tmp_path
    assert st.recovered_from.name.startswith("state.json.corrupt-")
    assert st.recovered_from.read_bytes() == content     # kept for an operator
    assert not (tmp_path / "state.json").exists()
    assert any("corrupt" in r.getMessage() and str(st.recovered_from) in r.getMessage()
               for r in caplog.records)
    # a later save and load work normally
    st.save(DOC)
    assert st.load() == DOC and st.recovered_from is None


def test_two_corrupt_files_in_the_same_second_both_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(state_mod.time, "gmtime", lambda: state_mod.time.struct_time(
        (2024, 1, 1, 0, 0, 0, 0, 1, 0)))
    st = StateStore(tmp_path)
    for content in (b"one", b"two"):
        (tmp_path / "state.json").write_bytes(content)
        st.load()
    kept = sorted(p.read_bytes() for p in tmp_path.glob("state.json.corrupt-*"))
    assert kept == [b"one", b"two"]


def test_other_version_is_refused_and_left_alone(tmp_path):
    content = b'{"version": 3, "slices": {}, "new": true}'
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(StateError, match="version 3"):
        StateStore(tmp_path).load()
    assert (tmp_path / "state.json").read_bytes() == content
    assert files(tmp_path) == ["state.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads anything")
def test_unreadable_file_raises(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps(DOC))
    os.chmod(tmp_path / "state.json", 0)
    with pytest.raises(StateError, match="cannot read"):
        StateStore(tmp_path).load()


def test_state_file_that_is_a_directory_raises(tmp_path):
    (tmp_path / "state.json").mkdir()
    with pytest.raises(StateError, match="cannot read"):
        StateStore(tmp_path).load()


def test_lock_is_exclusive(tmp_path):
    a, b = StateStore(tmp_path), StateStore(tmp_path)
    a.lock()
    with pytest.raises(StateError, match="another vgpud"):
        b.lock()
    assert (tmp_path / "vgpud.lock").read_text() == f"{os.getpid()}\n"
    a.unlock()
    b.lock()
    b.unlock()


def test_version_constant():
    assert STATE_VERSION == 2


def test_an_older_version_it_migrates_is_handed_on_untouched(tmp_path):
    content = b'{"version": 1, "slices": {"c": {"container": "c", "slice_id": 3}}}'
    (tmp_path / "state.json").write_bytes(content)
    assert StateStore(tmp_path).load()["version"] == 1
    assert (tmp_path / "state.json").read_bytes() == content
