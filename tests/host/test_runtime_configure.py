"""`vgpuctl runtime configure` (vgpu.cli.rtconfig): the vgpu handler added
to containerd's config.  containerd 1.x (config version 2) against the real
containerd on this host (`containerd --config F config dump` is what it
loads); containerd 2.x (version 3) on fixtures from its sources
(tests/data/containerd/), read back with tomllib and merged as 2.x merges
imports."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import tomllib

import pytest

from vgpu.cli import ctl, rtconfig

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "containerd"
SNIPPETS = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "containerd"
CONTAINERD = shutil.which("containerd") or ("/usr/bin/containerd"
                                           if os.path.exists("/usr/bin/containerd") else None)
needs_containerd = pytest.mark.skipif(CONTAINERD is None, reason="containerd is not installed "
                                      "(make deps installs it)")

CRI2 = ("plugins", "io.containerd.grpc.v1.cri")
CRI3 = ("plugins", "io.containerd.cri.v1.runtime")
POD = ["vgpu.io/memory", "vgpu.io/compute", "vgpu.io/priority", "vgpu.io/policy",
       "vgpu.io/gpus", "vgpu.io/profile"]
RT = "/usr/local/bin/vgpu-runtime"


def run(capsys, *argv):
    rc = ctl.main(["runtime", "configure", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def dig(d, *path):
    for p in path:
        d = d[p]
    return d


def runtimes(doc, cri=CRI2):
    return dig(doc, *cri, "containerd", "runtimes")


def dump(path) -> dict:
    """What containerd 1.x loads from ``path`` (its imports merged)."""
    r = subprocess.run([CONTAINERD, "--config", str(path), "config", "dump"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return tomllib.loads(r.stdout)


def default_v2(tmp_path) -> pathlib.Path:
    r = subprocess.run([CONTAINERD, "config", "default"], capture_output=True, text=True,
                       timeout=60, check=True)
    p = tmp_path / "config.toml"
    p.write_text(r.stdout)
    return p


def assert_vgpu(rt: dict, systemd=None, binary=RT):
    v = rt["vgpu"]
    assert v["runtime_type"] == "io.containerd.runc.v2"
    assert v["pod_annotations"] == POD
    assert v["container_annotations"] == ["vgpu.io/container-*"]
    assert v["options"]["BinaryName"] == binary
    if systemd is not None:
        assert v["options"]["SystemdCgroup"] is systemd


# ------------------------------------------------------------ containerd 1.x, real
@needs_containerd
def test_default_config_gets_the_handler_and_keeps_the_rest(tmp_path, capsys):
    p = default_v2(tmp_path)
    before = dump(p)
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert "added the \"vgpu\" runtime handler in place (config version 2)" in out
    assert out.rstrip().endswith(rtconfig.RESTART)
    after = dump(p)
    assert_vgpu(runtimes(after), systemd=False)
    # everything else as containerd loaded it before
    runtimes(after).pop("vgpu")
    after.pop("imports"), before.pop("imports")
    assert after == before
    assert (tmp_path / "config.toml.vgpu-backup").read_text() == \
        subprocess.run([CONTAINERD, "config", "default"], capture_output=True, text=True).stdout


@needs_containerd
def test_systemd_runc_handler_is_copied_and_survives(tmp_path, capsys):
    p = tmp_path / "config.toml"
    p.write_text('version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n'
                 '  sandbox_image = "registry.example.com/pause:9"\n\n'
                 '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                 '  runtime_type = "io.containerd.runc.v2"\n'
                 '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
                 '    SystemdCgroup = true\n')
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert "SystemdCgroup = true as the runc handler" in out
    d = dump(p)
    assert_vgpu(runtimes(d), systemd=True)
    assert runtimes(d)["runc"]["options"]["SystemdCgroup"] is True
    assert dig(d, *CRI2, "sandbox_image") == "registry.example.com/pause:9"


@needs_containerd
def test_config_without_runtimes_gets_the_default_runc_handler_too(tmp_path, capsys):
    # containerd 1.x: a runtimes table replaces the default one; without
    # runc, default_runtime_name = "runc" would name nothing
    p = tmp_path / "config.toml"
    p.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
                 '  sandbox_image = "registry.example.com/pause:9"\n')
    assert dump(p)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"].keys() \
        == {"runc"}
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert "has no runc handler" in out
    d = dump(p)
    assert runtimes(d).keys() == {"runc", "vgpu"}
    assert runtimes(d)["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert dig(d, *CRI2, "containerd", "default_runtime_name") == "runc"
    assert dig(d, *CRI2, "sandbox_image") == "registry.example.com/pause:9"


@needs_containerd
@pytest.mark.parametrize("content", [None, "", "# nothing yet\n"])
def test_missing_or_empty_config(tmp_path, capsys, content):
    p = tmp_path / "etc" / "config.toml"
    if content is not None:
        p.parent.mkdir()
        p.write_text(content)
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert "containerd runs on its defaults; writing version 2" in out
    assert stat.S_IMODE(p.stat().st_mode) == 0o644 or content is not None
    d = dump(p)
    assert_vgpu(runtimes(d))
    assert runtimes(d).keys() == {"runc", "vgpu"}
    assert dig(d, *CRI2, "sandbox_image")            # the default, untouched
    assert (tmp_path / "etc" / "config.toml.vgpu-backup").exists() == (content is not None)


@needs_containerd
def test_set_default(tmp_path, capsys):
    p = default_v2(tmp_path)
    rc, out, err = run(capsys, "--config", str(p), "--set-default")
    assert rc == 0, err
    d = dump(p)
    assert dig(d, *CRI2, "containerd", "default_runtime_name") == "vgpu"
    assert_vgpu(runtimes(d))
    rc, out, _ = run(capsys, "--config", str(p), "--set-default")
    assert rc == 0 and "nothing changed" in out


@needs_containerd
def test_force_replaces_a_different_handler(tmp_path, capsys):
    p = default_v2(tmp_path)
    original = p.read_text()
    assert run(capsys, "--config", str(p), "--runtime-path", "/opt/old/vgpu-runtime")[0] == 0
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 1 and out == ""
    assert err.startswith('vgpuctl: runtime configure: a different "vgpu" runtime handler is '
                          f'already in {p}: options.BinaryName is "/opt/old/vgpu-runtime" '
                          f'(want "{RT}"); --force replaces it')
    rc, out, err = run(capsys, "--config", str(p), "--force")
    assert rc == 0, err
    assert "replaced the \"vgpu\" runtime handler" in out
    assert_vgpu(runtimes(dump(p)))
    header = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vgpu]'
    assert p.read_text().count(header) == 1
    # the backup is the file before vgpuctl's first change, made once
    assert (tmp_path / "config.toml.vgpu-backup").read_text() == original
    assert "backup" not in out


@needs_containerd
def test_v2_import_that_replaces_the_cri_section_is_refused(tmp_path, capsys):
    p = default_v2(tmp_path)
    (tmp_path / "other.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x/pause:1"\n')
    text = p.read_text().replace("imports = []", 'imports = ["other.toml"]')
    p.write_text(text)
    assert dig(dump(p), *CRI2, "containerd", "runtimes").keys() == {"runc"}   # 1.x replaces
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 1
    assert f"{tmp_path}/other.toml (imported by {p}) sets plugins.io.containerd.grpc.v1.cri" in err
    assert p.read_text() == text


# ------------------------------------------------------------ containerd 2.x, fixtures
def load_v3(main: pathlib.Path) -> dict:
    doc = tomllib.loads(main.read_text())
    return rtconfig.effective(str(main), doc, 3, {})[0]


def test_v3_default_config_gets_a_drop_in(tmp_path, capsys):
    p = tmp_path / "config.toml"
    shutil.copy(DATA / "config-default-2.2.toml", p)
    before = tomllib.loads(p.read_text())
    drop = tmp_path / "conf.d" / "vgpu.toml"
    # the drop-in is written first: an import of a missing file stops containerd
    assert [c.path for c in rtconfig.plan(str(p)).changes] == [str(drop), str(p)]
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert f"{drop}: added the \"vgpu\" runtime handler as a drop-in (config version 3)" in out
    assert f"{p}: adding {drop} to its imports" in out
    after = tomllib.loads(p.read_text())
    assert after.pop("imports") == ["/etc/containerd/conf.d/*.toml", str(drop)]
    before.pop("imports")
    assert after == before                      # the main file: only imports changed
    d = tomllib.loads(drop.read_text())
    assert d["version"] == 3
    assert list(dig(d, *CRI3, "containerd", "runtimes")) == ["vgpu"]
    assert "io.containerd.grpc.v1.cri" not in d["plugins"]
    eff = load_v3(p)
    assert_vgpu(runtimes(eff, CRI3), systemd=False)
    assert runtimes(eff, CRI3)["runc"]["sandboxer"] == "podsandbox"
    assert dig(eff, "plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox") == \
        "registry.k8s.io/pause:3.10.1"


def test_v3_minimal_config_with_a_conf_d_glob_is_left_alone(tmp_path, capsys):
    p = tmp_path / "config.toml"
    shutil.copy(DATA / "minimal-v3.toml", p)
    text = p.read_text()
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert p.read_text() == text and not (tmp_path / "config.toml.vgpu-backup").exists()
    eff = load_v3(p)
    assert_vgpu(runtimes(eff, CRI3), systemd=True)
    assert runtimes(eff, CRI3)["runc"]["options"] == {"SystemdCgroup": True}
    rc, out, _ = run(capsys, "--config", str(p))
    assert rc == 0 and "already there as wanted" in out


def test_v3_in_place_and_set_default(tmp_path, capsys):
    p = tmp_path / "config.toml"
    shutil.copy(DATA / "minimal-v3.toml", p)
    rc, out, err = run(capsys, "--config", str(p), "--in-place", "--set-default")
    assert rc == 0, err
    d = tomllib.loads(p.read_text())
    assert_vgpu(runtimes(d, CRI3), systemd=True)
    assert dig(d, *CRI3, "containerd", "default_runtime_name") == "vgpu"
    assert not (tmp_path / "conf.d").exists()


def test_v3_missing_config(tmp_path, capsys):
    p = tmp_path / "config.toml"
    rc, out, err = run(capsys, "--config", str(p), "--config-version", "3")
    assert rc == 0, err
    d = tomllib.loads(p.read_text())
    assert d["version"] == 3
    assert list(runtimes(d, CRI3)) == ["vgpu"]     # 2.x keeps its default runc handler


def test_v3_drop_in_overridden_by_a_later_import_is_refused(tmp_path, capsys):
    p = tmp_path / "config.toml"
    p.write_text('version = 3\nimports = ["conf.d/vgpu.toml", "zz.toml"]\n')
    (tmp_path / "zz.toml").write_text(
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.vgpu.options]\n'
        '  BinaryName = "/opt/other"\n')
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 1 and "a different \"vgpu\" runtime handler is already in" in err
    rc, out, err = run(capsys, "--config", str(p), "--force")
    assert rc == 1 and "an imported file would still override" in err
    assert not (tmp_path / "conf.d").exists()


# ------------------------------------------------------------ both: the rules
@pytest.mark.parametrize("fixture", ["config-default-2.2.toml", "minimal-v3.toml", "v2"])
def test_second_run_changes_nothing(tmp_path, capsys, fixture):
    p = tmp_path / "config.toml"
    if fixture == "v2":
        p.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                     '  runtime_type = "io.containerd.runc.v2"\n')
    else:
        shutil.copy(DATA / fixture, p)
    assert run(capsys, "--config", str(p))[0] == 0
    files = {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()}
    stamps = {f: f.stat().st_mtime_ns for f in files}
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0 and "already there as wanted" in out and "nothing changed" in out
    assert rtconfig.RESTART not in out
    assert {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()} == files
    assert {f: f.stat().st_mtime_ns for f in files} == stamps


@pytest.mark.parametrize("fixture", ["config-default-2.2.toml", "minimal-v3.toml"])
def test_dry_run_writes_nothing(tmp_path, capsys, fixture):
    p = tmp_path / "config.toml"
    shutil.copy(DATA / fixture, p)
    text = p.read_text()
    rc, out, err = run(capsys, "--config", str(p), "--dry-run")
    assert rc == 0, err
    assert f"+++ {tmp_path}/conf.d/vgpu.toml" in out
    assert '+[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.vgpu]' in out
    assert out.rstrip().endswith("nothing written")
    assert sorted(os.listdir(tmp_path)) == ["config.toml"] and p.read_text() == text


def test_dry_run_of_a_missing_file(tmp_path, capsys):
    p = tmp_path / "config.toml"
    rc, out, _ = run(capsys, "--config", str(p), "--dry-run")
    assert rc == 0 and "--- /dev/null" in out and "+version = 2" in out
    assert not p.exists()


def test_unparseable_config_is_refused_with_tomllibs_message(tmp_path, capsys):
    p = tmp_path / "config.toml"
    p.write_text('version = 2\n[plugins\n  x = 1\n')
    try:
        tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        why = str(e)
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 1 and out == ""
    assert err == (f"vgpuctl: runtime configure: {p}: cannot parse it as TOML: {why}; "
                   "nothing changed\n")
    assert "(at line 2, column" in why
    assert sorted(os.listdir(tmp_path)) == ["config.toml"]


@pytest.mark.parametrize("text", ["[plugins.cri]\n  sandbox_image = \"x\"\n", "version = 1\n"])
def test_version_1_is_refused_with_what_to_do(tmp_path, capsys, text):
    p = tmp_path / "config.toml"
    p.write_text(text)
    rc, _, err = run(capsys, "--config", str(p))
    assert rc == 1
    assert "a version 1 config" in err and f"containerd --config {p} config dump" in err
    assert p.read_text() == text


@pytest.mark.parametrize("value, shown", [("4", "4"), ('"2"', '"2"')])
def test_unknown_version_is_refused(tmp_path, capsys, value, shown):
    p = tmp_path / "config.toml"
    p.write_text(f"version = {value}\n")
    rc, _, err = run(capsys, "--config", str(p))
    assert rc == 1
    assert f"unknown config version {shown}: vgpuctl knows 2 (containerd 1.x) and 3" in err


@pytest.mark.parametrize("fixture", ["config-default-2.2.toml", "v2"])
def test_mode_is_kept(tmp_path, capsys, fixture):
    p = tmp_path / "config.toml"
    if fixture == "v2":
        p.write_text('version = 2\n')
    else:
        shutil.copy(DATA / fixture, p)
    os.chmod(p, 0o640)
    assert run(capsys, "--config", str(p))[0] == 0
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "config.toml.vgpu-backup").stat().st_mode) == 0o640
    assert not [f for f in os.listdir(tmp_path) if "tmp" in f]


def test_symlinked_config_is_written_through(tmp_path, capsys):
    real = tmp_path / "real.toml"
    real.write_text("version = 2\n")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    assert run(capsys, "--config", str(link))[0] == 0
    assert link.is_symlink() and "runtimes.vgpu" in real.read_text()


def test_inline_tables_are_refused_not_broken(tmp_path, capsys):
    p = tmp_path / "config.toml"
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
            '  runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n')
    p.write_text(text)
    rc, _, err = run(capsys, "--config", str(p))
    assert rc == 1 and "cannot add the tables to this file safely" in err
    assert p.read_text() == text


def test_json(tmp_path, capsys):
    p = tmp_path / "config.toml"
    shutil.copy(DATA / "minimal-v3.toml", p)
    rc = ctl.main(["--json", "runtime", "configure", "--config", str(p)])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert res["changed"] and res["method"] == "drop-in" and res["version"] == 3
    assert res["files"] == [{"path": str(tmp_path / "conf.d" / "vgpu.toml"), "action": "create"}]
    assert res["runtime"]["options"] == {"BinaryName": RT, "SystemdCgroup": True}


@pytest.mark.parametrize("argv, message", [
    (["--handler", "VGPU"], 'invalid --handler "VGPU": not a runtime handler name'),
    (["--runtime-path", "vgpu-runtime"], 'invalid --runtime-path "vgpu-runtime": not an '
                                          'absolute path'),
    (["--config-version", "1"], 'invalid --config-version "1": not a config version'),
])
def test_bad_values_are_quoted(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and err.startswith(f"vgpuctl: {message}")


def test_unknown_action(capsys):
    rc = ctl.main(["runtime", "reconfigure"])
    assert rc == 2 and 'unknown action "reconfigure"' in capsys.readouterr().err


# ------------------------------------------------------------ the snippets
@pytest.mark.parametrize("name, version", [("containerd-config.toml", 2),
                                           ("containerd-config-v3.toml", 3)])
def test_snippets_say_what_configure_writes(name, version):
    doc = tomllib.loads((SNIPPETS / name).read_text())
    assert doc["version"] == version
    cri = rtconfig.CRI[version]
    assert runtimes(doc, cri)["vgpu"] == rtconfig.wanted_handler(RT, None)
