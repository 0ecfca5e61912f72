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
       "vgpu.io/gpus", "vgpu.io/profile", "vgpu.io/rdma"]
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


def older(text: str) -> str:
    """What an older vgpuctl wrote: pod_annotations without vgpu.io/rdma."""
    new = text.replace(', "vgpu.io/rdma"]', "]")
    assert new != text
    return new


@needs_containerd
def test_an_older_vgpuctls_handler_is_brought_up_to_date(tmp_path, capsys):
    """A vgpu handler whose pod_annotations lack a request key added since
    (vgpu.io/rdma) is updated in place without --force: the list only,
    keys the operator added stay."""
    p = default_v2(tmp_path)
    assert run(capsys, "--config", str(p))[0] == 0
    header = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vgpu]'
    text = older(p.read_text()).replace(header, header + "\n  runtime_root = \"/run/vgpu-runc\"")
    p.write_text(text)
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert (f'note: the "vgpu" runtime handler in {p} is an older vgpuctl\'s: adding '
            f'vgpu.io/rdma to its pod_annotations') in out
    assert f'{p}: updated the "vgpu" runtime handler in place' in out
    rt = runtimes(dump(p))
    assert_vgpu(rt)
    assert rt["vgpu"]["runtime_root"] == "/run/vgpu-runc"
    assert p.read_text().count(header) == 1
    # only that line changed
    assert [a for a, b in zip(text.splitlines(), p.read_text().splitlines()) if a != b] == \
        [next(line for line in text.splitlines() if "vgpu.io/profile\"]" in line)]
    assert "nothing changed" in run(capsys, "--config", str(p))[1]


@needs_containerd
@pytest.mark.parametrize("edit", [
    lambda t: t.replace('"vgpu.io/memory", ', '"example.com/memory", '),    # not vgpu's
    lambda t: older(t).replace('"vgpu.io/memory", "vgpu.io/compute"',
                               '"vgpu.io/compute", "vgpu.io/memory"'),    # reordered
    lambda t: older(t).replace(RT, "/opt/old/vgpu-runtime"),              # another binary too
], ids=["foreign-entry", "reordered", "binary"])
def test_a_handler_that_is_not_an_older_vgpuctls_needs_force(tmp_path, capsys, edit):
    p = default_v2(tmp_path)
    assert run(capsys, "--config", str(p))[0] == 0
    p.write_text(edit(p.read_text()))
    before = p.read_text()
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 1 and out == "" and "--force replaces it" in err, err
    assert p.read_text() == before


def test_v3_an_older_vgpuctls_drop_in_is_brought_up_to_date(tmp_path, capsys):
    p = tmp_path / "config.toml"
    shutil.copy(DATA / "config-default-2.2.toml", p)
    assert run(capsys, "--config", str(p))[0] == 0
    drop = tmp_path / "conf.d" / "vgpu.toml"
    drop.write_text(older(drop.read_text()))
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    assert f'{drop}: updated the "vgpu" runtime handler as a drop-in' in out
    assert_vgpu(runtimes(load_v3(p), CRI3), systemd=False)


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


# ------------------------------------------------------------ beside NVIDIA's toolkit
# What `nvidia-ctk runtime configure --runtime=containerd --set-as-default`
# writes (the toolkit's pkg/config/engine/containerd): a runc handler named
# nvidia running nvidia-container-runtime, made the default.
TOOLKIT_HANDLER = ('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                   '  runtime_type = "io.containerd.runc.v2"\n'
                   '  privileged_without_host_devices = false\n'
                   '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                   '    BinaryName = "/usr/bin/nvidia-container-runtime"\n'
                   '    SystemdCgroup = true\n')


def toolkit_v2(tmp_path, default=True) -> pathlib.Path:
    p = tmp_path / "config.toml"
    text = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
    if default:
        text += '  default_runtime_name = "nvidia"\n'
    p.write_text(text + TOOLKIT_HANDLER)
    return p


def test_set_default_never_replaces_the_toolkits_default_without_force(tmp_path, capsys):
    p = toolkit_v2(tmp_path)
    before = p.read_text()
    rc, out, err = run(capsys, "--config", str(p), "--set-default",
                       "--toolkit-config", str(tmp_path / "none.toml"))
    assert rc == 1 and out == ""
    assert err == (f"vgpuctl: runtime configure: containerd's default runtime in {p} is "
                   f"\"nvidia\" (NVIDIA Container Toolkit's): --set-default moves every pod "
                   f"that names no runtimeClassName from it to \"vgpu\", where pods that asked "
                   f"the toolkit for GPUs get none; --force replaces it; nothing changed\n")
    assert p.read_text() == before
    assert not (tmp_path / "config.toml.vgpu-backup").exists()
    rc, out, err = run(capsys, "--config", str(p), "--set-default", "--force",
                       "--toolkit-config", str(tmp_path / "none.toml"))
    assert rc == 0, err
    assert 'note: --force: replacing the default runtime "nvidia" with "vgpu"' in out
    d = tomllib.loads(p.read_text())
    assert dig(d, *CRI2, "containerd", "default_runtime_name") == "vgpu"


def test_without_set_default_the_toolkits_default_stays(tmp_path, capsys):
    p = toolkit_v2(tmp_path)
    rc, out, err = run(capsys, "--config", str(p),
                       "--toolkit-config", str(tmp_path / "none.toml"))
    assert rc == 0, err
    d = tomllib.loads(p.read_text())
    assert dig(d, *CRI2, "containerd", "default_runtime_name") == "nvidia"
    # set up as the handler pods get by default: its runc options, its
    # privileged_without_host_devices, not its binary
    v = runtimes(d)["vgpu"]
    assert v["options"] == {"BinaryName": RT, "SystemdCgroup": True}
    assert v["privileged_without_host_devices"] is False
    assert "SystemdCgroup = true, privileged_without_host_devices = false as the nvidia " \
        "handler" in out


@pytest.mark.parametrize("setting, warned", [(None, True), ("true", True), ("false", False)])
def test_the_toolkits_envvar_acceptance_is_reported(tmp_path, capsys, setting, warned):
    """The toolkit's default (accept-nvidia-visible-devices-envvar-when-
    unprivileged = true) lets any pod that runs with its handler and sets
    NVIDIA_VISIBLE_DEVICES=all past every slice: said, with the fix."""
    p = toolkit_v2(tmp_path)
    tk = tmp_path / "nvidia-container-runtime.toml"
    tk.write_text('disable-require = false\n' + (
        f'accept-nvidia-visible-devices-envvar-when-unprivileged = {setting}\n'
        if setting else '') + '\n[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n')
    rc, out, err = run(capsys, "--config", str(p), "--toolkit-config", str(tk), "--json")
    assert rc == 0, err
    notes = [n for n in json.loads(out)["notes"] if "NVIDIA_VISIBLE_DEVICES" in n]
    if not warned:
        assert notes == []
        return
    assert notes == [
        "NVIDIA Container Toolkit's runtime handler nvidia (the default runtime) gives an "
        "unprivileged container every GPU its NVIDIA_VISIBLE_DEVICES names (CUDA images set "
        "it to all): the host's real /dev/nvidia*, outside any slice.  Set "
        f"accept-nvidia-visible-devices-envvar-when-unprivileged = false in {tk} "
        "(docs/containers.md, Beside NVIDIA's Container Toolkit)"]


@needs_containerd
def test_runc_options_beyond_systemd_cgroup_are_cloned(tmp_path, capsys):
    """The runc handler's options (all but BinaryName) and the handler keys
    that say how containerd sets a container up go to the vgpu handler, as
    containerd loads them."""
    p = tmp_path / "config.toml"
    p.write_text('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
                 '  runtime_type = "io.containerd.runc.v2"\n'
                 '  base_runtime_spec = "/etc/containerd/base.json"\n'
                 '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
                 '    SystemdCgroup = true\n    NoPivotRoot = true\n'
                 '    Root = "/run/containerd/runc-alt"\n')
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    v = runtimes(dump(p))["vgpu"]
    assert v["options"]["NoPivotRoot"] is True and v["options"]["SystemdCgroup"] is True
    assert v["options"]["Root"] == "/run/containerd/runc-alt"
    assert v["options"]["BinaryName"] == RT
    assert v["base_runtime_spec"] == "/etc/containerd/base.json"
    # the second run finds it as wanted
    assert "nothing changed" in run(capsys, "--config", str(p))[1]


def test_a_non_runc_default_lends_nothing(tmp_path, capsys):
    """A default handler of another shim (kata's options mean nothing to
    runc): the vgpu handler is set up as runc."""
    p = tmp_path / "config.toml"
    p.write_text('version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                 '  default_runtime_name = "kata"\n'
                 '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]\n'
                 '  runtime_type = "io.containerd.kata.v2"\n'
                 '  privileged_without_host_devices = true\n'
                 '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata.options]\n'
                 '    ConfigPath = "/opt/kata/configuration.toml"\n')
    rc, out, err = run(capsys, "--config", str(p))
    assert rc == 0, err
    v = runtimes(tomllib.loads(p.read_text()))["vgpu"]
    assert v["options"] == {"BinaryName": RT}
    assert "privileged_without_host_devices" not in v
