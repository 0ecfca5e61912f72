"""tools/nvuser.py: where `make deps` puts NVIDIA's 535.261.03 user space,
that a second run only checks, and the error a test gets without it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools import nvuser


def fake_tree(cache: Path, stamp: bool = True) -> Path:
    root = cache / "nvidia-userspace" / nvuser.RELEASE
    for f in nvuser.EXPECTED:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_bytes(b"")
    if stamp:
        (root / nvuser.STAMP).write_text(nvuser._stamp_text())
    return root


def test_without_make_deps_the_error_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"make deps"):
        nvuser.libdir()
    assert nvuser.main(["check"]) == 1


def test_the_layout_is_the_union_of_the_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_CACHE", str(tmp_path))
    root = fake_tree(tmp_path)
    assert nvuser.libdir() == root / "usr/lib/x86_64-linux-gnu/nvidia/current"
    assert nvuser.smi() == root / "usr/lib/nvidia/current/nvidia-smi"
    assert nvuser.env(base={})["LD_LIBRARY_PATH"] == str(nvuser.libdir())


def test_a_second_run_only_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("VGPU_CACHE", str(tmp_path))
    fake_tree(tmp_path)

    def no_apt(*a, **kw):
        raise AssertionError(f"ran {a[0]}: the stamp says everything is there")

    monkeypatch.setattr(subprocess, "run", no_apt)
    assert nvuser.fetch(quiet=True) == tmp_path / "nvidia-userspace" / nvuser.RELEASE


def test_the_versions_are_pinned_and_apt_reads_no_system_sources(tmp_path):
    assert nvuser.DEB_VERSION == "535.261.03-1"
    opts = nvuser._apt_opts(tmp_path)
    assert f"Dir::Etc::SourceList={tmp_path}/etc/sources.list" in opts
    assert "Dir::Etc::SourceParts=/dev/null" in opts
    assert "non-free" in nvuser.SOURCES and "security" not in nvuser.SOURCES
