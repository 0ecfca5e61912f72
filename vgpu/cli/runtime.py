"""vgpu-runtime's slow path: the runc wrapper's Python half.

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vgpu.options]
      BinaryName = "/usr/local/bin/vgpu-runtime"

``vgpu-runtime`` is a small C program (container-hook/vgpu-runtime.c) that
execs runc at once unless the command is ``create``/``run`` and the
bundle's config.json could carry a request; then it execs this module with
the same argv.  It takes runc's command line unchanged.  On ``create`` (and
``run``), for a container that asks for a slice (vgpu.io/* annotations; the
image's VGPU_* env only for a profile of vgpud's config that allows it, as
vgpu-oci-hook reads them; the rule is vgpu.common.request's), it edits the
bundle's config.json in place, idempotently, with what request.hook_stages
says the container needs:

- hooks.createRuntime and/or hooks.poststop run the hook: ``python -I -S -c
  <boot> STAGE`` with this interpreter (isolated from the environment; no
  site import: fast), or ``$VGPU_HOOK STAGE`` when $VGPU_HOOK names an
  executable, each with an explicit minimal ``env``.  A container with a
  slice of its own gets both; a container of a pod's slice createRuntime
  only (the slice outlives it); a pod's sandbox, when the pod asked,
  poststop only (it deletes the pod's slice);
- linux.resources.devices allows character major N rw (not m: no node of
  another slice can be made inside), N being the vgpu major from
  /proc/devices (runc's cgroup-v2 device program only allows what
  config.json lists; the slice's minors are not known before the hook has
  made it, and vgpu.ko's cgroup binding decides which minors open); never
  for a sandbox;
- the host driver's user-space files (docs/containers.md, "Driver files"),
  for a container that gets a slice's nodes: the mounts and the hook entry
  of vgpu.common.driverfiles.driver_edits(), the edits ``vgpuctl cdi
  generate`` writes into the CDI spec (containerd 1.6 has no CDI), as
  config.json mounts and a hooks.createRuntime entry.  The driver's
  version comes from /proc/driver/nvidia/version, else vgpud's status;
  $VGPU_DRIVER_LIB_DIRS and $VGPU_DRIVER_BIN_DIRS add directories to
  search, $VGPU_DRIVER_FILES=0 turns it off.

Then it execs runc ($VGPU_RUNC, else ``runc`` on PATH) with the same argv.
Every other command goes straight to runc.  It imports as little as it can
(no vgpu.common.values, ctypes or the hook): every Python start here is on the
path of a container's start.  Standard library only.
"""
from __future__ import annotations

import os
import sys

from vgpu import __version__
from vgpu.common import apiclient as ac
from vgpu.common import driverfiles as df
from vgpu.common import fastjson
from vgpu.common.files import atomic_write
from vgpu.common.request import (HOOK_ENV, RUNTIME_GUARD_DEST, ScopeError, honoured_scope,
                                 hook_argv, hook_stages, real_gpu_refusal, vgpu_major)

PROG = "vgpu-runtime"
# runc's global options that take a value (Go's flag package: -name or --name)
_GLOBAL_VALUED = {"root", "log", "log-format", "criu", "rootless"}
HOOK_TIMEOUT = 15       # seconds; runc kills a hook after this


def _flag(a: str) -> str:
    """"--name=v" or "-name=v" -> "name"."""
    return (a[2:] if a.startswith("--") else a[1:]).split("=", 1)[0]


def find_command(argv: list[str]) -> tuple[str | None, int]:
    """(runc command, its index in argv) skipping runc's global options.
    container-hook/vgpu-runtime.c finds it the same way."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return (argv[i + 1], i + 1) if i + 1 < len(argv) else (None, -1)
        if a.startswith("-"):
            if _flag(a) in _GLOBAL_VALUED and "=" not in a:
                i += 1
            i += 1
            continue
        return a, i
    return None, -1


def find_bundle(argv: list[str], start: int) -> str:
    """The bundle directory of a create/run command line (argv from
    ``start``): --bundle/-bundle/-b DIR, --bundle=DIR, -b=DIR or -bDIR; "."
    without one (as runc).  container-hook/vgpu-runtime.c reads it the same
    way."""
    i = start
    while i < len(argv):
        a = argv[i]
        if a in ("--bundle", "-bundle", "-b"):
            return argv[i + 1] if i + 1 < len(argv) else "."
        if a.startswith(("--bundle=", "-bundle=")):
            return a.split("=", 1)[1] or "."
        if a.startswith("-b") and len(a) > 2:
            return a[2:].lstrip("=") or "."
        i += 1
    return "."


def hook_command(stage: str) -> tuple[str, list[str], list[str]]:
    """(path, args, env) of the hook entry for ``stage``.  $VGPU_HOOK names
    an executable to run as ``vgpu-oci-hook STAGE``; by default the hook is
    hook_argv(): this Python, isolated, running vgpu.cli.hook from the directory
    this package was loaded from.  The env is always explicit (HOOK_ENV plus
    our own VGPU_SOCKET / VGPU_FUSE_MOUNT): runc would otherwise choose it."""
    env = [*HOOK_ENV, *(f"{k}={os.environ[k]}" for k in ("VGPU_SOCKET", "VGPU_FUSE_MOUNT")
                        if os.environ.get(k))]
    p = os.environ.get("VGPU_HOOK")
    if p:
        return p, ["vgpu-oci-hook", stage], env
    args = hook_argv(stage)
    return args[0], args, env


def hook_entry(stage: str) -> dict:
    path, args, env = hook_command(stage)
    return {"path": path, "args": args, "env": env, "timeout": HOOK_TIMEOUT}


def _is_ours(h: object, stage: str) -> bool:
    if not isinstance(h, dict) or not isinstance(h.get("args"), list):
        return False
    args = h["args"]
    if _is_driver_hook(h):
        return False
    return stage in args and (any("vgpu.cli.hook" in str(a) for a in args) or
                              os.path.basename(str(h.get("path", ""))) == "vgpu-oci-hook")


def edit_config(config: dict, major: int | None,
                stages: tuple[str, ...] = ("createRuntime", "poststop")) -> bool:
    """Add our hooks at ``stages`` and, with a ``major``, the device rule to
    ``config`` (in place) unless they are there; True when it changed
    anything."""
    changed = False
    hooks = config.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError("config.json: hooks is not an object")
    for stage in stages:
        lst = hooks.setdefault(stage, [])
        if not isinstance(lst, list):
            raise ValueError(f"config.json: hooks.{stage} is not a list")
        if not any(_is_ours(h, stage) for h in lst):
            lst.append(hook_entry(stage))
            changed = True
    if major is not None:
        linux = config.setdefault("linux", {})
        res = linux.setdefault("resources", {})
        devs = res.setdefault("devices", [])
        if not isinstance(devs, list):
            raise ValueError("config.json: linux.resources.devices is not a list")
        rule = {"allow": True, "type": "c", "major": major, "access": "rw"}
        if rule not in devs:
            devs.append(rule)
            changed = True
    return changed


def _is_driver_hook(h: object) -> bool:
    return isinstance(h, dict) and isinstance(h.get("args"), list) and \
        any(str(a) in (df.HOOK_LINK, df.HOOK_LDCONFIG) for a in h["args"])


#: bound on asking vgpud whether a profile takes requests from images
STATUS_TIMEOUT = 3.0


def driver_files_edits(warn) -> dict:
    """The driver files' CDI edits (vgpu.common.driverfiles.driver_edits)
    with this wrapper's hook command; {} when turned off or when the
    driver's version is not known (``warn`` says so)."""
    if os.environ.get(df.ENV_FILES) == "0":
        return {}
    version = df.driver_version()
    if version is None:
        try:
            with ac.ApiClient(None, STATUS_TIMEOUT) as client:
                version = client.request("status").get("driver_version")
        except ac.ClientError as e:
            warn(f"no driver files: the NVIDIA driver's version is not known (no "
                 f"/proc/driver/nvidia/version; vgpud: {e})")
            return {}
    if not df.valid_version(version):
        warn("no driver files: the NVIDIA driver's version is not known")
        return {}
    files = df.discover(version, lib_dirs=df.env_dirs(df.ENV_LIB_DIRS),
                        bin_dirs=df.env_dirs(df.ENV_BIN_DIRS))
    path, args, env = hook_command("createRuntime")
    return df.driver_edits(files, (path, args[:-1], env))


def add_driver_files(config: dict, edits: dict) -> bool:
    """The CDI ``edits`` as config.json's mounts (a bind at each container
    path not mounted yet) and a hooks.createRuntime entry (unless one of
    ours is there); True when it changed anything."""
    changed = False
    if edits.get("mounts"):
        mounts = config.setdefault("mounts", [])
        if not isinstance(mounts, list):
            raise ValueError("config.json: mounts is not a list")
        have = {m.get("destination") for m in mounts if isinstance(m, dict)}
        for m in edits["mounts"]:
            if m["containerPath"] not in have:
                mounts.append({"destination": m["containerPath"], "type": "bind",
                               "source": m["hostPath"], "options": list(m["options"])})
                changed = True
    for h in edits.get("hooks", ()):
        hooks = config.setdefault("hooks", {})
        if not isinstance(hooks, dict):
            raise ValueError("config.json: hooks is not an object")
        lst = hooks.setdefault(h["hookName"], [])
        if not isinstance(lst, list):
            raise ValueError(f"config.json: hooks.{h['hookName']} is not a list")
        if not any(_is_driver_hook(x) for x in lst):
            lst.append({k: h[k] for k in ("path", "args", "env", "timeout") if k in h})
            changed = True
    return changed


def strip_guard(config: dict) -> bool:
    """Take out the device plugin's guard mount (request.RUNTIME_GUARD_DEST:
    the mount that fails a start without this wrapper); True if it was there."""
    mounts = config.get("mounts")
    if not isinstance(mounts, list):
        return False
    keep = [m for m in mounts if not (isinstance(m, dict) and
                                      m.get("destination") == RUNTIME_GUARD_DEST)]
    if len(keep) == len(mounts):
        return False
    config["mounts"] = keep
    return True


def refuse_real_gpu(config: dict, major: int | None) -> None:
    """ScopeError when the container would reach NVIDIA's own GPU beside
    its slice (request.real_gpu_access)."""
    why = real_gpu_refusal(config, major)
    if why:
        raise ScopeError(why)


def prepare_bundle(bundle: str, cid: str = "") -> bool:
    """Edit ``bundle``/config.json for a container that asks for a slice
    (or a pod sandbox whose pod does); False when it asked for nothing that
    counts (the file is left untouched).  The image's VGPU_* environment
    counts only where vgpud's config allows it (request.image_env_allowed):
    no hook and no device rule for an image that merely says it wants a
    GPU."""
    path = os.path.join(bundle, "config.json")
    with open(path, "rb") as f:
        config = fastjson.loads(f.read())
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not an OCI config")
    guarded = strip_guard(config)
    sc = honoured_scope({"id": cid}, config, None, STATUS_TIMEOUT, lambda m: None, PROG)
    stages, device = hook_stages(sc)
    if not stages:
        if guarded:
            atomic_write(path, fastjson.dumps(config), like=path, fsync=False)
        return False
    major = vgpu_major() if device else None
    if device:
        refuse_real_gpu(config, major)
    changed = edit_config(config, major, stages) or guarded
    if device:
        edits = driver_files_edits(lambda m: sys.stderr.write(f"{PROG}: container {cid}: "
                                                              f"warning: {m}\n"))
        changed = add_driver_files(config, edits) or changed
    if changed:
        # runc reads it at once; worthless after a crash: no fsync on a
        # container's start path
        atomic_write(path, fastjson.dumps(config), like=path, fsync=False)
    return True


def runc_path() -> str:
    p = os.environ.get("VGPU_RUNC")
    if p:
        return p
    me = os.path.realpath(sys.argv[0])
    for d in os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                    "/sbin:/bin").split(os.pathsep):
        c = os.path.join(d, "runc")
        if os.access(c, os.X_OK) and os.path.realpath(c) != me:
            return c
    return "runc"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:
        # ours, then the runtime's own (runc's lines follow)
        sys.stdout.write(f"{PROG} {__version__} (vgpu's wrapper of {runc_path()})\n")
        sys.stdout.flush()
    cmd, i = find_command(argv)
    if cmd in ("create", "run"):
        bundle = find_bundle(argv, i + 1)
        try:
            prepare_bundle(bundle, argv[-1])
        except ScopeError as e:
            sys.stderr.write(f"{PROG}: container {argv[-1]}: {e}\n")
            return 1
        except (OSError, ValueError) as e:
            sys.stderr.write(f"{PROG}: cannot prepare {os.path.join(bundle, 'config.json')}: "
                             f"{getattr(e, 'strerror', None) or e}\n")
            return 1
    runc = runc_path()
    try:
        os.execv(runc, [runc, *argv]) if os.path.isabs(runc) else os.execvp(runc, [runc, *argv])
    except OSError as e:
        sys.stderr.write(f"{PROG}: cannot run {runc}: {e.strerror or e}\n")
        return 127
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
