"""No image code runs in the hook, and an image asks for nothing, under the
REAL runc on the host, with
tools/testbed/fake_vgpud.py as the daemon and mknod'ed nodes standing in for
vgpufs (the helpers of test_hook_runc.py):

- an image whose environment tries to run its code in the hook
  (PYTHONPATH=/proc/self/cwd with sitecustomize/usercustomize/re.py,
  PYTHONWARNINGS naming an image module, LD_PRELOAD): no line of it runs, and
  the createContainer stage, where runc hands the hook that environment, is
  refused;
- the image's VGPU_* environment asks for nothing unless vgpud's config
  allows it for the profile it names;
- the CDI spec of `vgpuctl cdi generate` starts a container (runc refuses a
  /proc/driver/nvidia mount; the spec's createRuntime hook mounts the view).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from runc_support import (BUSYBOX, LIST, REPO, RUNC, add_fake_nodes, env,  # noqa: F401
                            make_bundle)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(RUNC, os.X_OK) or not os.access(BUSYBOX, os.X_OK),
    reason="needs root, runc and busybox")

from vgpu.cli import runtime
from vgpu.common import cdi
from vgpu.cli.hook import cgroups
from vgpu.common import request  # noqa: E402

MODULES = ("sitecustomize", "usercustomize", "re", "json", "evil")


def evil_image(tmp_path, bundle, preload=True):
    """Plant the image's code (Python modules in the rootfs, the bundle and a
    directory named by absolute path; an LD_PRELOAD library) and return the
    marker file it would write on the host, and the environment that points
    at it.  The marker lies outside the rootfs: only code running on the
    host side (the hook) can reach it."""
    marker = tmp_path / "IMAGE-CODE-RAN"
    evil = tmp_path / "evil-py"
    evil.mkdir(exist_ok=True)
    for d in (bundle / "rootfs", bundle, evil):
        for mod in MODULES:
            (d / f"{mod}.py").write_text(
                f"open({str(marker)!r}, 'a').write('{mod} in {d.name}\\n')\n"
                f"class X(Warning): pass\n")
    env = [f"PYTHONPATH=/proc/self/cwd:{evil}", "PYTHONWARNINGS=ignore::evil.X",
           f"PYTHONSTARTUP={evil}/evil.py", "PYTHONINSPECT=1"]
    if preload and shutil.which("gcc"):
        c = tmp_path / "evil.c"
        c.write_text('#include <stdio.h>\n__attribute__((constructor)) static void e(void) {'
                     f' FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("ld_preload\\n", f);'
                     ' fclose(f); } }\n')
        so = tmp_path / "evil.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True)
        shutil.copy(so, bundle / "rootfs" / "evil.so")
        env.append(f"LD_PRELOAD={so}:/proc/self/cwd/evil.so")
    return marker, env


def set_config(bundle, fn):
    config = json.loads((bundle / "config.json").read_text())
    fn(config)
    (bundle / "config.json").write_text(json.dumps(config))
    return config


def run(argv, env_, extra=None):
    e = dict(os.environ, VGPU_RUNC=RUNC, VGPU_SOCKET=env_["fake"].path,
             VGPU_FUSE_MOUNT=str(env_["fs"]), PYTHONPATH=REPO)
    e.pop("VGPU_HOOK", None)
    e.update(extra or {})
    return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=60)


def wrapper_run(env_, bundle, cid, extra=None):
    """`runc run` through vgpu-runtime, which writes its default hook entries
    (isolated Python, explicit env) unless extra sets VGPU_HOOK."""
    return run([sys.executable, "-m", "vgpu.cli.runtime", "--root", env_["root"], "run",
                "--bundle", str(bundle), cid], env_, extra)


def runc_run(env_, bundle, cid):
    return run([RUNC, "--root", env_["root"], "run", "--bundle", str(bundle), cid], env_)


def entry(stage, *args, with_env=True):
    """The hook entry vgpu-runtime writes, for any stage: with_env=False is
    the operator's mistake the issue found in every shipped file (no env:
    runc picks the environment, the container's own at createContainer)."""
    old = os.environ.get("VGPU_HOOK")
    os.environ.pop("VGPU_HOOK", None)
    try:
        e = runtime.hook_entry(stage)
    finally:
        if old is not None:
            os.environ["VGPU_HOOK"] = old
    if args:
        e["args"] = e["args"][:-1] + list(args)
    if not with_env:
        del e["env"]
    return e


# ------------------------------------------------------------ (1) no image code in the hook
def test_image_code_never_runs_in_the_hook_at_createRuntime(tmp_path, env):
    """A container that asks for a slice (annotations), started through
    vgpu-runtime, with an image environment full of ways into Python and
    the loader: it gets its slice, and none of the image's code ran."""
    add_fake_nodes(env["fs"], "evil-rt")
    b = make_bundle(tmp_path, "rt", {"vgpu.io/memory": "4GiB"}, args=("sh", "-c", LIST))
    marker, evil_env = evil_image(tmp_path, b)
    set_config(b, lambda c: c["process"]["env"].extend(evil_env))
    r = wrapper_run(env, b, "evil-rt")
    assert r.returncode == 0, r.stderr
    assert "nvidiactl" in r.stdout and "vgpu slice of evil-rt" in r.stdout
    assert not marker.exists(), marker.read_text()
    config = json.loads((b / "config.json").read_text())
    for stage in ("createRuntime", "poststop"):
        (h,) = config["hooks"][stage]
        assert h["env"][0] == request.HOOK_ENV[0] and "-I" in h["args"], h


@pytest.mark.parametrize("with_env", [True, False], ids=["entry-env", "no-entry-env"])
def test_createContainer_is_refused_and_runs_no_image_code(tmp_path, env, with_env):
    """vgpu's hook entry wired at createContainer, as the issue's
    demonstration did: runc runs it inside the container, working directory
    the rootfs, and (no env in the entry) with the image's environment.  The
    start fails with one clear line; no image code ran: isolated Python
    ignores PYTHONPATH & co. (LD_PRELOAD acts before any program can, so
    only the entry's own env keeps it out: it is planted only where the
    entry has one)."""
    add_fake_nodes(env["fs"], "evil-cc")
    b = make_bundle(tmp_path, "cc", {"vgpu.io/memory": "4GiB"}, args=("sh", "-c", LIST))
    marker, evil_env = evil_image(tmp_path, b, preload=with_env)
    set_config(b, lambda c: (c["process"]["env"].extend(evil_env),
                             c.setdefault("hooks", {}).update(
                                 createContainer=[entry("createContainer",
                                                        with_env=with_env)])))
    r = runc_run(env, b, "evil-cc")
    assert r.returncode != 0
    assert "container evil-cc: refusing the createContainer stage" in r.stderr, r.stderr
    assert not marker.exists(), marker.read_text()
    assert "create" not in [q["op"] for q in env["fake"].requests]


def test_no_stage_and_a_creating_state_is_refused(tmp_path, env):
    """Without a stage argument, runc's "creating" state does not say which
    stage it is (createContainer sends it too): the hook acts on no pid."""
    add_fake_nodes(env["fs"], "nostage")
    b = make_bundle(tmp_path, "ns", {"vgpu.io/memory": "4GiB"})
    bare = entry("createRuntime")
    bare["args"] = bare["args"][:-1]                 # no STAGE
    set_config(b, lambda c: c.setdefault("hooks", {}).update(createRuntime=[bare]))
    r = runc_run(env, b, "nostage")
    assert r.returncode != 0
    assert "container nostage: no STAGE argument" in r.stderr, r.stderr
    assert env["fake"].requests == []


# ------------------------------------------------------------ (3) requests come from the pod
IMAGE_ASKS = ["VGPU_MEMORY=4GiB", "VGPU_COMPUTE=100%", "VGPU_PRIORITY=high",
              "VGPU_POLICY=fixed"]


def test_image_env_asks_for_nothing_by_default(tmp_path, env):
    """An image with VGPU_* (and no annotations) gets no hook, no device
    rule and no slice: the wrapper leaves config.json alone, and the hook,
    wired anyway, asks vgpud for nothing."""
    b = make_bundle(tmp_path, "img", args=("sh", "-c", LIST))
    set_config(b, lambda c: c["process"]["env"].extend(IMAGE_ASKS))
    before = (b / "config.json").read_bytes()
    r = wrapper_run(env, b, "img")
    assert r.returncode == 0, r.stderr
    assert "NO-NODES" in r.stdout and "NO-PROC" in r.stdout
    assert (b / "config.json").read_bytes() == before
    assert env["fake"].requests == [] and env["fake"].slices == {}
    # the hook wired by hand (config-hooks.json): nothing asked either
    b2 = make_bundle(tmp_path, "img2", args=("sh", "-c", LIST))
    set_config(b2, lambda c: (c["process"]["env"].extend(IMAGE_ASKS),
                              c.setdefault("hooks", {}).update(
                                  createRuntime=[entry("createRuntime")],
                                  poststop=[entry("poststop")])))
    r = runc_run(env, b2, "img2")
    assert r.returncode == 0, r.stderr
    assert "NO-NODES" in r.stdout and env["fake"].requests == []


def test_image_env_naming_a_profile_counts_only_where_the_config_allows_it(tmp_path, env):
    fake = env["fake"]
    asks = IMAGE_ASKS + ["VGPU_PROFILE=from-image"]
    b = make_bundle(tmp_path, "p1", args=("sh", "-c", LIST))
    set_config(b, lambda c: c["process"]["env"].extend(asks))
    before = (b / "config.json").read_bytes()
    r = wrapper_run(env, b, "img-p1")
    assert r.returncode == 0, r.stderr
    assert "NO-NODES" in r.stdout
    assert (b / "config.json").read_bytes() == before          # not allowed: untouched
    assert [q["op"] for q in fake.requests] == ["status"]      # the wrapper asked, no more
    # the operator allows the profile: the request counts, marked as the image's
    fake.image_env_profiles = ["from-image"]
    fake.requests.clear()
    add_fake_nodes(env["fs"], "img-p2")
    b = make_bundle(tmp_path, "p2", args=("sh", "-c", LIST))
    set_config(b, lambda c: c["process"]["env"].extend(asks))
    r = wrapper_run(env, b, "img-p2")
    assert r.returncode == 0, r.stderr
    assert "nvidiactl" in r.stdout and "vgpu slice of img-p2" in r.stdout
    create = [q["args"] for q in fake.requests if q["op"] == "create"]
    assert len(create) == 1 and create[0]["from_image"] is True
    assert create[0]["profile"] == "from-image" and create[0]["memory"] == 4 << 30
    assert fake.slices == {}                                  # poststop deleted it


# ------------------------------------------------------------ (7) the CDI flow
def cdi_apply(config: dict, spec: dict, name: str) -> None:
    """What a CDI runtime (containerd, CRI-O, Podman) does with one device
    of a spec: its nodes into linux.devices with a device cgroup rule each,
    its mounts into mounts, its hooks into hooks."""
    (dev,) = [d for d in spec["devices"] if d["name"] == name]
    edits = dev["containerEdits"]
    linux = config.setdefault("linux", {})
    for n in edits.get("deviceNodes", []):
        linux.setdefault("devices", []).append(
            {"path": n["path"], "type": n["type"], "major": n["major"], "minor": n["minor"],
             "fileMode": 0o666, "uid": 0, "gid": 0})
        linux.setdefault("resources", {}).setdefault("devices", []).append(
            {"allow": True, "type": n["type"], "major": n["major"], "minor": n["minor"],
             "access": n.get("permissions", "rwm")})
    for m in edits.get("mounts", []):
        config.setdefault("mounts", []).append(
            {"destination": m["containerPath"], "source": m["hostPath"], "type": "bind",
             "options": m.get("options", [])})
    for h in edits.get("hooks", []):
        config.setdefault("hooks", {}).setdefault(h["hookName"], []).append(
            {k: h[k] for k in ("path", "args", "env", "timeout") if k in h})


def test_cdi_spec_starts_a_container_with_the_slices_nodes_and_view(tmp_path, env):
    """The operator made slice "cdi-a"; a container asks for the CDI device
    vgpu.io/slice=cdi-a.  The spec used to bind-mount /proc/driver/nvidia,
    which runc refuses ("inside /proc"): now its createRuntime hook mounts
    the view, and the container sees its nodes and its view."""
    fs = env["fs"]
    add_fake_nodes(fs, "cdi-a")              # nvidiactl 1:3, nvidia0 1:5, nvidia-uvm 1:7
    s = {"container": "cdi-a", "slice_id": 4, "gpus": [{"index": 0}],
         "devices": {"major": 1, "ctl_minor": 3, "uvm_minor": 7, "gpu_minors": [5]}}
    env["fake"].slices["cdi-a"] = s          # made by the operator, bound to no cgroup
    shim = tmp_path / "vgpu-oci-hook"          # as make install writes it
    shim.write_text(f"#!{sys.executable} -I\nimport sys\nsys.path.insert(0, {REPO!r})\n"
                    f"from vgpu.cli.hook import main\nsys.exit(main())\n")
    shim.chmod(0o755)
    spec = cdi.cdi_spec([s], str(fs), str(shim), str(env["fake"].path))
    b = make_bundle(tmp_path, "cdi", args=("sh", "-c", LIST))
    set_config(b, lambda c: cdi_apply(c, spec, "cdi-a"))
    r = runc_run(env, b, "ctr-cdi")
    assert r.returncode == 0, r.stderr
    assert "nvidiactl" in r.stdout and "nvidia0" in r.stdout and "nvidia-uvm" in r.stdout
    assert "vgpu slice of cdi-a" in r.stdout
    # the operator's slice: attached to the container's own cgroup, nothing
    # created or deleted (vgpu.ko opens an unbound slice for no container)
    assert [q["op"] for q in env["fake"].requests] == ["attach"]
    att = env["fake"].requests[0]["args"]
    assert att["container"] == "cdi-a" and att["cgroup"].startswith(
        (cgroups.cgroup2_mount() or "/sys/fs/cgroup").rstrip("/") + "/")
    # the old spec's mount, for the record: runc refuses it
    old = json.loads(json.dumps(spec))
    old["devices"][0]["containerEdits"].pop("hooks")
    old["devices"][0]["containerEdits"]["mounts"] = [
        {"hostPath": str(fs / "cdi-a" / "proc" / "driver" / "nvidia"),
         "containerPath": "/proc/driver/nvidia", "options": ["ro", "nosuid", "nodev", "bind"]}]
    b = make_bundle(tmp_path, "cdi-old", args=("sh", "-c", LIST))
    set_config(b, lambda c: cdi_apply(c, old, "cdi-a"))
    r = runc_run(env, b, "ctr-cdi-old")
    assert r.returncode != 0 and "proc" in r.stderr, r.stderr
