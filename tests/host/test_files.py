"""vgpu.common.files.atomic_write: the one file replacer (state file,
containerd's config, a bundle's config.json, an allow-list, CDI spec,
report)."""
import os

import pytest

from vgpu.common.files import atomic_write


def test_replaces_the_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("old")
    atomic_write(p, "new ü")
    assert p.read_bytes() == "new ü".encode() and os.listdir(tmp_path) == ["f.json"]
    atomic_write(str(p), b"\x00bytes", fsync=False)
    assert p.read_bytes() == b"\x00bytes"


def test_mode_exact_like_and_default(tmp_path):
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "a", "x", mode=0o644)      # exact, whatever the umask
        atomic_write(tmp_path / "b", "x")                  # as open() makes it
        (tmp_path / "c").write_text("old")
        os.chmod(tmp_path / "c", 0o640)
        atomic_write(tmp_path / "c", "x", mode=0o600, like=tmp_path / "c")  # like wins
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o7777 == 0o644
    assert (tmp_path / "b").stat().st_mode & 0o7777 == 0o600
    assert (tmp_path / "c").stat().st_mode & 0o7777 == 0o640


def test_a_failure_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    p = tmp_path / "f"
    p.write_text("old")
    with pytest.raises(FileNotFoundError):
        atomic_write(p, "new", like=tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        (tmp_path / "d").mkdir()
        atomic_write(tmp_path / "d", "new")
    assert p.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["d", "f"]
