"""The host driver's user-space files for a slice's container
(vgpu.common.driverfiles, docs/containers.md "Driver files"): discovery on
a fake root, the CDI spec's edits checked against a JSON schema of the CDI
specification's fields (written here, stricter than the project's), the same
edits in vgpu-runtime's config.json, and the hook that makes the SONAME
links and the container's ldcache inside a root."""
from __future__ import annotations

import json
import os
import time
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from vgpu.cli import ctl, runtime
from vgpu.common import cdi
from vgpu.cli import hook
from vgpu.cli.hook.cmdline import HookError, parse_argv
from vgpu.cli.hook.driver import make_links, open_ldconfig, run_ldconfig
from vgpu.cli.hook.mounts import Mounter
from vgpu.common import driverfiles as df
from vgpu.common.request import HOOK_ENV, PKG_PARENT
from runc_support import REPO, RUNC, env, make_bundle, runc_run  # noqa: F401
from tools.testbed.fake_vgpud import FakeVgpud

V = "535.261.03"
ROOT = Path(__file__).resolve().parents[2]


def make_elf(path: Path, soname: str | None = None, interp: str | None = None) -> Path:
    """A minimal 64-bit little-endian ELF shared object: one PT_LOAD of the
    whole file at address 0, a PT_DYNAMIC with DT_STRTAB (and DT_SONAME),
    and a PT_INTERP with ``interp``."""
    strtab = b"\0" + (soname.encode() + b"\0" if soname else b"")
    interp_b = interp.encode() + b"\0" if interp else b""
    phnum = 2 + bool(interp)
    dyn = [(5, 0)] + ([(14, 1)] if soname else []) + [(0, 0)]
    dyn_off = 64 + 56 * phnum
    str_off = dyn_off + 16 * len(dyn)
    interp_off = str_off + len(strtab)
    total = interp_off + len(interp_b)
    dyn[0] = (5, str_off)                       # vaddr == offset
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0,
                       64, 0, 0, 64, 56, phnum, 64, 0, 0)
    ph = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
    ph += struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, 16 * len(dyn),
                      16 * len(dyn), 8)
    if interp:
        ph += struct.pack("<IIQQQQQQ", 3, 4, interp_off, interp_off, interp_off, len(interp_b),
                          len(interp_b), 1)
    body = b"".join(struct.pack("<qQ", t, v) for t, v in dyn)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(ehdr + ph + body + strtab + interp_b)
    return path


@pytest.fixture
def fake(tmp_path):
    """A fake host: a driver directory reached through the ldcache's
    symlinks (as Debian's alternatives), another version's library, an
    unversioned one, an extra directory, binaries and firmware."""
    r = tmp_path / "host"
    drv = r / "usr/lib/x86_64-linux-gnu/nvidia/current"
    make_elf(drv / f"libcuda.so.{V}", "libcuda.so.1")
    make_elf(drv / f"libnvidia-ml.so.{V}", "libnvidia-ml.so.1")
    make_elf(drv / f"libnvidia-glcore.so.{V}", f"libnvidia-glcore.so.{V}")   # SONAME = file
    make_elf(drv / "libcuda.so.530.30.02", "libcuda.so.1")                   # another version
    make_elf(drv / f"libcuda.so.{V}.bak", "libcuda.so.1")                    # not the name
    make_elf(drv / "libfoo.so.1", "libfoo.so.1")
    (drv / f"nvidia_drv.so.{V}").write_bytes(b"x")                           # no lib prefix
    (drv / "libcuda.so.1").symlink_to(f"libcuda.so.{V}")
    lib = r / "usr/lib/x86_64-linux-gnu"
    (lib / "libcuda.so.1").symlink_to(drv / "libcuda.so.1")
    (lib / "libnvidia-ml.so.1").symlink_to(drv / f"libnvidia-ml.so.{V}")
    (lib / "libgone.so.1").symlink_to(lib / f"libgone.so.{V}")              # dangling
    extra = r / "opt/nv"
    make_elf(extra / f"libnvidia-ptxjitcompiler.so.{V}", "libnvidia-ptxjitcompiler.so.1")
    (extra / f"libnvidia-alias.so.{V}").symlink_to(drv / f"libnvidia-glcore.so.{V}")
    make_elf(extra / "libnvidia-ptxjitcompiler.so.1.0", "libnvidia-ptxjitcompiler.so.1")
    ldcache = [("libcuda.so.1", str(lib / "libcuda.so.1")),
               ("libnvidia-ml.so.1", str(lib / "libnvidia-ml.so.1")),
               (f"libnvidia-glcore.so.{V}", str(drv / f"libnvidia-glcore.so.{V}")),
               ("libcuda.so.1", str(drv / "libcuda.so.530.30.02")),
               ("libgone.so.1", str(lib / "libgone.so.1")),
               ("libfoo.so.1", str(drv / "libfoo.so.1"))]
    bins = r / "usr/lib/nvidia/current"
    bins.mkdir(parents=True)
    (bins / "nvidia-smi").write_bytes(b"#!smi")
    (bins / "nvidia-smi").chmod(0o755)
    (bins / "nvidia-debugdump").write_bytes(b"not executable")
    ub = r / "usr/bin"
    ub.mkdir(parents=True)
    (ub / "nvidia-smi").symlink_to(bins / "nvidia-smi")
    (ub / "nvidia-persistenced").write_bytes(b"#!p")
    (ub / "nvidia-persistenced").chmod(0o755)
    (ub / "nvidia-debugdump").write_bytes(b"#!d")
    (ub / "nvidia-debugdump").chmod(0o755)
    (ub / "nvidia-frobnicate").write_bytes(b"#!f")
    (ub / "nvidia-frobnicate").chmod(0o755)
    fw = r / "lib/firmware/nvidia"
    (fw / V).mkdir(parents=True)
    (fw / V / "gsp_ga10x.bin").write_bytes(b"fw")
    (fw / "530.30.02").mkdir()
    return {"root": r, "drv": drv, "lib": lib, "extra": extra, "bins": bins, "ub": ub,
            "fw": fw, "ldcache": ldcache}


def discover(fake, **kw) -> df.DriverFiles:
    args = dict(ldcache=fake["ldcache"], path=(str(fake["ub"]),), firmware_root=str(fake["fw"]))
    args.update(kw)
    return df.discover(V, **args)


# ------------------------------------------------------------ discovery
def test_ldcache_libraries_of_the_drivers_version_only(fake):
    d = discover(fake)
    drv = fake["drv"]
    # the real files behind the ldcache's links; no other version, no
    # unversioned or misnamed file, no dangling entry
    assert d.libraries == sorted(str(drv / n) for n in
                                 (f"libcuda.so.{V}", f"libnvidia-glcore.so.{V}",
                                  f"libnvidia-ml.so.{V}"))
    assert d.lib_dirs == [str(drv)]
    # SONAME links from the files' ELF; none where SONAME is the file's name
    assert sorted(d.links) == [(str(drv / "libcuda.so.1"), f"libcuda.so.{V}"),
                               (str(drv / "libnvidia-ml.so.1"), f"libnvidia-ml.so.{V}")]


def test_extra_library_directories(fake):
    d = discover(fake, lib_dirs=[str(fake["extra"]), str(fake["root"] / "missing")])
    extra, drv = fake["extra"], fake["drv"]
    assert str(extra / f"libnvidia-ptxjitcompiler.so.{V}") in d.libraries
    # a versioned symlink: the real file is mounted, once
    assert d.libraries.count(str(drv / f"libnvidia-glcore.so.{V}")) == 1
    assert not any(p.endswith(".so.1.0") for p in d.libraries)
    assert (str(extra / "libnvidia-ptxjitcompiler.so.1"), f"libnvidia-ptxjitcompiler.so.{V}") \
        in d.links
    assert d.lib_dirs == [str(extra), str(drv)]
    # only lib*.so.<version> anywhere
    assert all(re.fullmatch(rf"lib[^/]+\.so\.{re.escape(V)}", os.path.basename(p))
               for p in d.libraries)


def test_extra_directory_alone_without_ldcache(fake):
    d = discover(fake, ldcache=[], lib_dirs=[str(fake["drv"])])
    assert [os.path.basename(p) for p in d.libraries] == \
        [f"libcuda.so.{V}", f"libnvidia-glcore.so.{V}", f"libnvidia-ml.so.{V}"]


def test_another_version_finds_its_own(fake):
    d = df.discover("530.30.02", ldcache=fake["ldcache"], path=(), firmware_root=str(fake["fw"]))
    assert [os.path.basename(p) for p in d.libraries] == ["libcuda.so.530.30.02"]
    # libcuda.so.1 -> the 530 file: a link in its own directory
    assert d.links == [(str(fake["drv"] / "libcuda.so.1"), "libcuda.so.530.30.02")]
    assert d.firmware == [str(fake["fw"] / "530.30.02")]


def test_binaries_listed_names_first_found_executable(fake):
    d = discover(fake, bin_dirs=[str(fake["bins"])])
    got = {os.path.basename(c): (h, c) for h, c in d.binaries}
    assert sorted(got) == ["nvidia-debugdump", "nvidia-persistenced", "nvidia-smi"]
    # from the extra directory first; its non-executable debugdump is
    # passed over for PATH's
    assert got["nvidia-smi"] == (str(fake["bins"] / "nvidia-smi"), str(fake["bins"] / "nvidia-smi"))
    assert got["nvidia-debugdump"][1] == str(fake["ub"] / "nvidia-debugdump")
    # on PATH only: the symlink's file is bound at the symlink's path
    d = discover(fake)
    got = dict((os.path.basename(c), (h, c)) for h, c in d.binaries)
    assert got["nvidia-smi"] == (str(fake["bins"] / "nvidia-smi"), str(fake["ub"] / "nvidia-smi"))


def test_firmware_of_the_version_where_present(fake):
    assert discover(fake).firmware == [str(fake["fw"] / V)]
    shutil.rmtree(fake["fw"] / V)
    assert discover(fake).firmware == []


def test_bad_version_is_refused(fake):
    for v in ("", "535", "535.261.03; rm", "../535.1", "5*"):
        with pytest.raises(df.ParseError):
            df.discover(v, ldcache=[])


def test_parse_ldconfig_p_keeps_this_architecture():
    text = ("1234 libs found in cache `/etc/ld.so.cache'\n"
            "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
            "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n"
            "\tlibz.so.1 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libz.so.1\n"
            "\tgarbage\n"
            "\tlibx.so (libc6,x86-64) => relative/libx.so\n"
            "libnoindent.so (libc6,x86-64) => /lib/libnoindent.so\n"
            "\tliby.so (libc6,x86-64 => /lib/liby.so\n"
            "Cache generated by: ldconfig (GNU libc) stable release version 2.36\n")
    assert df.parse_ldconfig_p(text, "x86_64") == [
        ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1")]


def test_host_ldcache_is_read():
    entries = df.host_ldcache()
    assert entries and all(p.startswith("/") for _, p in entries)
    assert df.host_ldcache("/nonexistent/ldconfig") == []
    assert df.host_ldcache("/bin/false") == []                  # fails: nothing


def test_a_program_past_its_time_is_killed(tmp_path):
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\necho partial\nexec sleep 30\n")
    slow.chmod(0o755)
    t0 = time.monotonic()
    assert df.host_ldcache(str(slow), timeout=0.5) == []
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("text,want", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jun  4 2025\n"
     "GCC version:  gcc version 12.2.0\n", "535.261.03"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.45.04  Release Build\n",
     "595.45.04"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.45.04", "595.45.04"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03.1.2  x\n", None),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Modules  535.261.03\n", None),
    ("Kernel Module for\n", None),
    ("nothing\n", None),
])
def test_driver_version(tmp_path, text, want):
    p = tmp_path / "version"
    p.write_text(text)
    assert df.driver_version(str(p), str(tmp_path / "none")) == want
    (tmp_path / "sys").write_text("550.54.15\n")
    assert df.driver_version(str(tmp_path / "none"), str(tmp_path / "sys")) == "550.54.15"


def test_elf_soname_and_static(tmp_path):
    assert df.elf_soname(str(make_elf(tmp_path / "a.so", "liba.so.1"))) == "liba.so.1"
    assert df.elf_soname(str(make_elf(tmp_path / "b.so"))) is None
    (tmp_path / "c.so").write_bytes(b"not elf")
    assert df.elf_soname(str(tmp_path / "c.so")) is None
    assert df.elf_is_static(str(make_elf(tmp_path / "s")))
    assert not df.elf_is_static(str(make_elf(tmp_path / "d", interp="/lib64/ld-linux.so.2")))
    assert df.elf_is_static(df.LDCONFIG)
    assert not df.elf_is_static(sys.executable if not os.path.islink(sys.executable)
                                else os.path.realpath(sys.executable))


# ------------------------------------------------------------ the CDI spec
def _schema_validator():
    """The CDI spec document's shape, written here from the CDI
    specification's field list (container-device-interface SPEC.md, "CDI
    JSON Specification": cdiVersion, kind, devices with name and
    containerEdits; containerEdits' env, deviceNodes, mounts, hooks, ...;
    which fields each requires) as a JSON schema of our own, stricter than
    the project's (no field it does not name: a misspelt key of the
    generator fails here)."""
    strings = {"type": "array", "items": {"type": "string"}}
    u32 = {"type": "integer", "minimum": 0, "maximum": 0xFFFFFFFF}

    def obj(props, required=()):
        return {"type": "object", "properties": props, "required": list(required),
                "additionalProperties": False}

    edits = obj({
        "env": strings,
        "deviceNodes": {"type": "array", "items": obj({
            "path": {"type": "string"}, "hostPath": {"type": "string"},
            "type": {"enum": ["b", "c", "u", "p"]}, "major": {"type": "integer"},
            "minor": {"type": "integer"}, "fileMode": u32,
            "permissions": {"type": "string", "pattern": "^[rwm]*$"},
            "uid": u32, "gid": u32}, ["path"])},
        "mounts": {"type": "array", "items": obj({
            "hostPath": {"type": "string"}, "containerPath": {"type": "string"},
            "options": strings, "type": {"type": "string"}}, ["hostPath", "containerPath"])},
        "hooks": {"type": "array", "items": obj({
            "hookName": {"type": "string"}, "path": {"type": "string"}, "args": strings,
            "env": strings, "timeout": {"type": "integer"}}, ["hookName", "path"])},
        "additionalGids": {"type": "array", "items": u32},
        "intelRdt": {"type": "object"},
        "netDevices": {"type": "array", "items": {"type": "object"}},
    })
    annotations = {"type": "object", "additionalProperties": {"type": "string"}}
    schema = obj({
        "cdiVersion": {"type": "string"},
        "kind": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"},
        "annotations": annotations,
        "devices": {"type": "array", "items": obj({
            "name": {"type": "string"}, "annotations": annotations,
            "containerEdits": edits}, ["name", "containerEdits"])},
        "containerEdits": edits,
    }, ["cdiVersion", "kind", "devices"])
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return jsonschema.Draft7Validator(schema)


#: what CDI's Go validation adds to the schema (pkg/cdi: hook names, absolute paths)
OCI_HOOKS = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart",
             "poststop"}


def test_the_cdi_schema_check_can_fail():
    """The schema above refuses what the specification does: a device
    without containerEdits, a mount without containerPath, a field it does
    not name."""
    v = _schema_validator()
    good = {"cdiVersion": "0.6.0", "kind": "vgpu.io/slice",
            "devices": [{"name": "c1", "containerEdits": {
                "mounts": [{"hostPath": "/a", "containerPath": "/a"}]}}]}
    assert v.is_valid(good)
    for bad in ({**good, "devices": [{"name": "c1"}]},
                {**good, "devices": [{"name": "c1", "containerEdits": {
                    "mounts": [{"hostPath": "/a"}]}}]},
                {**good, "devices": [{"name": "c1", "containerEdits": {"hostpath": "/a"}}]},
                {k: v2 for k, v2 in good.items() if k != "kind"}):
        assert not v.is_valid(bad), bad


def check_cdi(spec: dict) -> None:
    errors = sorted(_schema_validator().iter_errors(spec), key=str)
    assert not errors, [e.message for e in errors]
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*", spec["kind"])
    assert set(spec) <= {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
    edits = [spec.get("containerEdits", {})] + [d["containerEdits"] for d in spec["devices"]]
    for e in edits:
        assert set(e) <= {"env", "deviceNodes", "mounts", "hooks", "intelRdt",
                          "additionalGids", "netDevices"}
        for m in e.get("mounts", []):
            assert set(m) <= {"hostPath", "containerPath", "options", "type"}
            assert m["hostPath"].startswith("/") and m["containerPath"].startswith("/")
        for h in e.get("hooks", []):
            assert set(h) <= {"hookName", "path", "args", "env", "timeout"}
            assert h["hookName"] in OCI_HOOKS and h["path"].startswith("/")
        for n in e.get("deviceNodes", []):
            assert n["path"].startswith("/")


SLICE = {"container": "c1", "slice_id": 3, "gpus": [{"index": 0}],
         "devices": {"major": 510, "ctl_minor": 0, "uvm_minor": 1, "gpu_minors": [2]}}


def test_cdi_spec_brings_the_driver_files(fake):
    d = discover(fake, lib_dirs=[str(fake["extra"])], bin_dirs=[str(fake["bins"])])
    spec = cdi.cdi_spec([SLICE], "/run/vgpu/fs", driver=d)
    check_cdi(spec)
    edits = spec["containerEdits"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    drv = fake["drv"]
    assert set(mounts) == {*d.libraries, *(c for _, c in d.binaries), *d.firmware}
    m = mounts[str(drv / f"libcuda.so.{V}")]
    assert m["hostPath"] == m["containerPath"] and m["options"] == ["ro", "nosuid", "nodev",
                                                                   "rbind"]
    (h,) = edits["hooks"]
    assert h["hookName"] == "createRuntime" and h["path"] == cdi.CDI_HOOK
    assert h["env"] == list(HOOK_ENV)
    assert h["args"][0] == "vgpu-oci-hook" and h["args"][-1] == "createRuntime"
    assert f"libcuda.so.{V}::{drv}/libcuda.so.1" in h["args"]
    assert h["args"][h["args"].index("--cdi-ldconfig") + 1] == str(fake["extra"])
    # the hook accepts its own arguments
    o = parse_argv(h["args"][1:])
    assert (f"libcuda.so.{V}", f"{drv}/libcuda.so.1") in o.cdi_links
    assert o.cdi_ldconfig == d.lib_dirs and o.stage == "createRuntime"
    # the device's own edits are as before
    assert spec["devices"][0]["containerEdits"]["hooks"][0]["args"][-2:] == ["c1",
                                                                            "createRuntime"]


def test_cdi_spec_without_driver_files_is_valid_too(fake):
    check_cdi(cdi.cdi_spec([SLICE], "/run/vgpu/fs"))
    empty = df.discover(V, ldcache=[], path=(), firmware_root=str(fake["root"] / "none"))
    spec = cdi.cdi_spec([SLICE], "/run/vgpu/fs", driver=empty)
    assert "containerEdits" not in spec
    check_cdi(spec)


def test_the_schema_check_catches_a_bad_spec():
    bad = cdi.cdi_spec([SLICE], "/run/vgpu/fs")
    bad["containerEdits"] = {"mounts": [{"hostPath": "/a", "options": "ro"}]}
    with pytest.raises(AssertionError):
        check_cdi(bad)


def test_vgpuctl_cdi_generate_with_driver_files(fake, tmp_path, monkeypatch, capsys):
    """vgpuctl's options: --driver-version, --driver-lib-dir, --driver-bin-dir;
    the ldcache is the host's (no NVIDIA file here), so the extra
    directory's libraries are what the spec gets."""
    with FakeVgpud(tmp_path / "sock") as srv:
        srv.slices["c1"] = dict(SLICE)
        out = tmp_path / "vgpu.json"
        rc = ctl.main(["cdi", "generate", "--socket", srv.path, "--output", str(out),
                       "--driver-version", V, "--driver-lib-dir", str(fake["extra"]),
                       "--driver-lib-dir", str(fake["drv"]), "--driver-bin-dir",
                       str(fake["bins"])])
        assert rc == 0, capsys.readouterr().err
        spec = json.loads(out.read_text())
        check_cdi(spec)
        paths = {m["containerPath"] for m in spec["containerEdits"]["mounts"]}
        assert str(fake["drv"] / f"libcuda.so.{V}") in paths
        assert str(fake["bins"] / "nvidia-smi") in paths
        rc = ctl.main(["cdi", "generate", "--socket", srv.path, "--output", str(out),
                       "--driver-version", V, "--no-driver-files"])
        assert rc == 0 and "containerEdits" not in json.loads(out.read_text())
        assert ctl.main(["cdi", "generate", "--socket", srv.path, "--driver-version",
                         "5;5"]) == ctl.EXIT_USAGE


# ------------------------------------------------------------ vgpu-runtime
def test_runtime_adds_the_same_edits_once(fake, monkeypatch):
    d = discover(fake, lib_dirs=[str(fake["extra"])])
    edits = df.driver_edits(d, ("/hook", ["vgpu-oci-hook"], ["PATH=/bin"]))
    config = {"mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
              "hooks": {}}
    assert runtime.edit_config(config, 510)
    assert runtime.add_driver_files(config, edits)
    binds = [m for m in config["mounts"] if m["type"] == "bind"]
    assert [(m["source"], m["destination"]) for m in binds] == d.mounts()
    assert all(m["options"] == ["ro", "nosuid", "nodev", "rbind"] for m in binds)
    cr = config["hooks"]["createRuntime"]
    assert len(cr) == 2 and "--cdi-link" in cr[1]["args"] and "--cdi-link" not in cr[0]["args"]
    before = json.dumps(config)
    # idempotent, and neither hook taken for the other
    assert not runtime.add_driver_files(config, edits)
    assert not runtime.edit_config(config, 510)
    assert json.dumps(config) == before


def test_runtime_driver_edits_use_its_hook_command(fake, monkeypatch):
    monkeypatch.setenv(df.ENV_LIB_DIRS, f"{fake['drv']}:relative/ignored")
    monkeypatch.setenv(df.ENV_BIN_DIRS, str(fake["bins"]))
    monkeypatch.delenv("VGPU_HOOK", raising=False)
    monkeypatch.setattr(df, "driver_version", lambda: V)
    edits = runtime.driver_files_edits(lambda m: pytest.fail(m))
    (h,) = edits["hooks"]
    assert h["path"] == sys.executable and h["args"][:3] == [sys.executable, "-I", "-S"]
    assert h["args"][-1] == "createRuntime" and "--cdi-ldconfig" in h["args"]
    assert str(fake["bins"] / "nvidia-smi") in {m["containerPath"] for m in edits["mounts"]}
    monkeypatch.setenv("VGPU_HOOK", "/usr/local/bin/vgpu-oci-hook")
    h = runtime.driver_files_edits(lambda m: pytest.fail(m))["hooks"][0]
    assert h["path"] == "/usr/local/bin/vgpu-oci-hook" and h["args"][0] == "vgpu-oci-hook"
    monkeypatch.setenv(df.ENV_FILES, "0")
    assert runtime.driver_files_edits(lambda m: pytest.fail(m)) == {}


def test_runtime_without_a_version_warns_and_adds_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(df, "driver_version", lambda: None)
    monkeypatch.setenv("VGPU_SOCKET", str(tmp_path / "none.sock"))
    said = []
    assert runtime.driver_files_edits(said.append) == {}
    assert said and "version is not known" in said[0]


# ------------------------------------------------------------ the hook
@pytest.mark.parametrize("args,words", [
    (["--cdi-link", "libcuda.so.1"], "TARGET::LINK"),
    (["--cdi-link", "a/b::/usr/lib/x"], "TARGET::LINK"),
    (["--cdi-link", "..::/usr/lib/x"], "TARGET::LINK"),
    (["--cdi-link", "t::usr/lib/x"], "absolute, normalised"),
    (["--cdi-link", "t::/usr/../etc/x"], "absolute, normalised"),
    (["--cdi-link", "t::/"], "absolute, normalised"),
    (["--cdi-ldconfig", "/usr//lib"], "absolute, normalised"),
    (["--cdi-ldconfig", "lib"], "absolute, normalised"),
])
def test_hook_refuses_bad_driver_arguments(args, words, capsys):
    assert hook.main([*args, "createRuntime"]) == 2
    assert words in capsys.readouterr().err


def test_links_are_made_inside_the_root_only(tmp_path, capsys):
    root = tmp_path / "rootfs"
    (root / "usr/lib").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "evil").symlink_to(outside)                     # the image's escape
    (root / "usr/lib/libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.999")   # stale
    (root / "usr/lib/libkeep.so.1").write_text("the image's own")
    m = Mounter()
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        done = make_links("c", m, fd, [("libcuda.so.9", "/usr/lib/libcuda.so.1"),
                                       ("libnvidia-ml.so.9", "/usr/lib/libnvidia-ml.so.1"),
                                       ("libkeep.so.9", "/usr/lib/libkeep.so.1")], lambda s: None)
        assert done == ["/usr/lib/libcuda.so.1", "/usr/lib/libnvidia-ml.so.1"]
        assert os.readlink(root / "usr/lib/libcuda.so.1") == "libcuda.so.9"
        assert os.readlink(root / "usr/lib/libnvidia-ml.so.1") == "libnvidia-ml.so.9"
        assert (root / "usr/lib/libkeep.so.1").read_text() == "the image's own"
        assert "left alone" in capsys.readouterr().err
        # again: nothing new
        assert make_links("c", m, fd, [("libcuda.so.9", "/usr/lib/libcuda.so.1")],
                          lambda s: None) == []
        for link in ("/evil/libcuda.so.1", "/usr/../evil/x"):
            with pytest.raises(HookError, match="symlink"):
                make_links("c", m, fd, [("t", link)], lambda s: None)
        # an absolute symlink resolves inside the root: /evil -> <tmp>/outside
        # is refused too, never followed
        assert os.listdir(outside) == []
    finally:
        os.close(fd)


def test_a_dynamic_ldconfig_is_refused(tmp_path):
    with pytest.raises(HookError, match="not a static executable"):
        open_ldconfig("c", os.path.realpath("/bin/ls"))


LIBZ = next((p for _, p in df.host_ldcache() if os.path.basename(p) == "libz.so.1"), None)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")


def _root_with_lib(tmp_path) -> Path:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "drv").mkdir()
    # a real shared object (ldconfig reads it) under a driver's name
    shutil.copyfile(os.path.realpath(LIBZ), root / "drv" / f"libnvidia-z.so.{V}")
    return root


@needs_root
@pytest.mark.skipif(LIBZ is None, reason="no libz.so.1 in the host's ldcache")
def test_ldconfig_runs_chrooted_in_the_root(tmp_path):
    root = _root_with_lib(tmp_path)
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    ld = open_ldconfig("c")
    try:
        run_ldconfig("c", fd, ld, ["/drv"])
    finally:
        os.close(fd)
        os.close(ld)
    cache = root / "etc/ld.so.cache"
    assert cache.exists()
    r = subprocess.run([df.LDCONFIG, "-p", "-C", str(cache)], capture_output=True, text=True)
    # the path recorded is the container's (/drv), not the host's
    assert re.search(r"libz\.so\.1 \(.*\) => /drv/libz\.so\.1", r.stdout), r.stdout
    # ldconfig made the SONAME link inside the root
    assert os.readlink(root / "drv/libz.so.1") == f"libnvidia-z.so.{V}"


@needs_root
@pytest.mark.skipif(LIBZ is None, reason="no libz.so.1 in the host's ldcache")
def test_ldconfig_failure_is_one_line(tmp_path):
    root = _root_with_lib(tmp_path)
    (root / "etc").rmdir()
    (root / "etc").write_text("not a directory")            # cannot write /etc/ld.so.cache
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    ld = open_ldconfig("c")
    try:
        with pytest.raises(HookError, match="ldconfig /drv in the container failed"):
            run_ldconfig("c", fd, ld, ["/drv"])
    finally:
        os.close(fd)
        os.close(ld)


@needs_root
@pytest.mark.skipif(LIBZ is None, reason="no libz.so.1 in the host's ldcache")
def _hook_in_bundle(bundle):
    """vgpu-oci-hook's createRuntime with the driver files' link and ldcache
    options, isolated (-I -S, empty environment) as make install runs it,
    on the bundle's rootfs for a container whose process is a sleeper."""
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        state = json.dumps({"id": "c1", "pid": sleeper.pid, "status": "creating",
                            "bundle": str(bundle)})
        boot = (f"import sys; sys.path.insert(0, {PKG_PARENT!r}); "
                f"from vgpu.cli.hook import main; sys.exit(main())")
        return subprocess.run([sys.executable, "-I", "-S", "-c", boot, "--debug",
                               "--cdi-link", f"libnvidia-z.so.{V}::/drv/libnvidia-z.so.1",
                               "--cdi-ldconfig", "/drv", "createRuntime"],
                              input=state, capture_output=True, text=True, timeout=60, env={})
    finally:
        sleeper.kill()
        sleeper.wait()


def test_hook_end_to_end_in_a_process_root(tmp_path):
    """vgpu-oci-hook --cdi-link ... --cdi-ldconfig ... createRuntime with a
    state whose pid is a live process of this mount namespace (a
    container's init before pivot_root sees the same): links and ldcache
    made in the bundle's rootfs."""
    root = _root_with_lib(tmp_path)
    r = _hook_in_bundle(tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.readlink(root / "drv/libnvidia-z.so.1") == f"libnvidia-z.so.{V}"
    assert (root / "etc/ld.so.cache").exists()


def _inject_cdi(config: dict, edits: dict) -> None:
    """What a CDI runtime (containerd 1.7+, podman) does with containerEdits'
    mounts and hooks (container-device-interface's ContainerEdits.Apply:
    mounts as OCI mounts, hooks appended to their stage)."""
    for m in edits.get("mounts", []):
        config.setdefault("mounts", []).append({"destination": m["containerPath"],
                                                "source": m["hostPath"],
                                                "options": list(m.get("options", []))})
    for h in edits.get("hooks", []):
        config.setdefault("hooks", {}).setdefault(h["hookName"], []).append(
            {k: h[k] for k in ("path", "args", "env", "timeout") if k in h})


def test_a_cdi_injected_spec_and_the_wrapper_do_not_double(fake, monkeypatch):
    """containerd 1.7+ with the spec and vgpu-runtime both: the wrapper finds
    the spec's driver binds and hook in config.json and adds neither again;
    and the spec's edits, injected, are the ones the wrapper would add."""
    monkeypatch.setenv(df.ENV_LIB_DIRS, str(fake["extra"]))
    monkeypatch.setattr(df, "driver_version", lambda: V)
    monkeypatch.setattr(df, "host_ldcache", lambda *a, **k: fake["ldcache"])
    d = df.discover(V, lib_dirs=[str(fake["extra"])])
    spec = cdi.cdi_spec([SLICE], "/run/vgpu/fs", driver=d)
    injected: dict = {}
    _inject_cdi(injected, spec["containerEdits"])
    wrapped: dict = {}
    assert runtime.add_driver_files(wrapped, runtime.driver_files_edits(pytest.fail))
    assert [(m["source"], m["destination"], m["options"]) for m in injected["mounts"]] == \
        [(m["source"], m["destination"], m["options"]) for m in wrapped["mounts"]]
    # the same hook arguments after each one's command
    (a,), (b,) = injected["hooks"]["createRuntime"], wrapped["hooks"]["createRuntime"]
    i, j = a["args"].index("--cdi-link"), b["args"].index("--cdi-link")
    assert a["args"][i:] == b["args"][j:]
    before = json.dumps(injected)
    assert not runtime.add_driver_files(injected, runtime.driver_files_edits(pytest.fail))
    assert json.dumps(injected) == before


@needs_root
@pytest.mark.skipif(LIBZ is None or not os.access(RUNC, os.X_OK), reason="needs runc and libz")
def test_runc_runs_a_container_with_the_specs_driver_files(tmp_path, env):  # noqa: F811
    """The spec's driver edits, applied as a CDI runtime applies them, run
    by real runc: the library is bound read-only at its path, the hook
    (createRuntime, explicit env) made the SONAME link inside the root and
    the container's /etc/ld.so.cache, which names the library at its
    container path."""
    drv = tmp_path / "host" / "drv"
    drv.mkdir(parents=True)
    shutil.copyfile(os.path.realpath(LIBZ), drv / f"libnvidia-z.so.{V}")
    d = df.discover(V, ldcache=[], lib_dirs=[str(drv)], path=(),
                    firmware_root=str(tmp_path / "none"))
    assert d.links == [(str(drv / "libz.so.1"), f"libnvidia-z.so.{V}")]
    shim = tmp_path / "vgpu-oci-hook"                 # as make install writes it
    shim.write_text(f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {REPO!r})\n"
                    f"from vgpu.cli.hook import main\nsys.exit(main())\n")
    shim.chmod(0o755)
    spec = cdi.cdi_spec([], "/run/vgpu/fs", str(shim), driver=d)
    check_cdi(spec)
    b = make_bundle(tmp_path, "drv", args=("sh", "-c", f"ls {drv}; cat {drv}/libz.so.1 "
                                           f"| wc -c; echo x > {drv}/libnvidia-z.so.{V} "
                                           f"|| echo READ-ONLY"))
    (b / "rootfs" / "etc").mkdir()
    config = json.loads((b / "config.json").read_text())
    _inject_cdi(config, spec["containerEdits"])
    (b / "config.json").write_text(json.dumps(config))
    r = runc_run(env, b, "ctr-drv", wrapper=False)
    assert r.returncode == 0, r.stderr
    assert f"libnvidia-z.so.{V}" in r.stdout and "libz.so.1" in r.stdout, r.stdout
    assert str(os.path.getsize(drv / f"libnvidia-z.so.{V}")) in r.stdout.split(), r.stdout
    assert "READ-ONLY" in r.stdout, r.stdout
    root = b / "rootfs"
    assert os.readlink(root / str(drv).lstrip("/") / "libz.so.1") == f"libnvidia-z.so.{V}"
    out = subprocess.run([df.LDCONFIG, "-p", "-C", str(root / "etc/ld.so.cache")],
                         capture_output=True, text=True).stdout
    assert f"=> {drv}/libz.so.1" in out, out
    # nothing was written on the host's side of the bind
    assert sorted(os.listdir(drv)) == [f"libnvidia-z.so.{V}"]


@needs_root
@pytest.mark.skipif(LIBZ is None, reason="no libz.so.1 in the host's ldcache")
def test_a_root_without_etc_gets_the_links_and_no_ldcache(tmp_path):
    root = _root_with_lib(tmp_path)
    (root / "etc").rmdir()
    r = _hook_in_bundle(tmp_path)
    assert r.returncode == 0 and "no ldcache made" in r.stderr, r.stderr
    assert os.readlink(root / "drv/libnvidia-z.so.1") == f"libnvidia-z.so.{V}"
    assert not (root / "etc").exists()
