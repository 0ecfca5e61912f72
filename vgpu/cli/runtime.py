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
  search, $VGPU_DRIVER_FILES=0 turns it off;
- for a container that gets a slice's nodes and asks for RDMA
  (``vgpu.io/rdma: "true"``; docs/rdma.md, "Through vgpu-runtime"): the
  adapter's nodes.  With cgroup v2 runc builds the container's device
  program from config.json before any hook runs, so they must be known
  before the hook makes the slice: vgpud's ``plan`` says where the slice
  will go (its GPUs, the adapter, its nodes' numbers; an existing pod
  slice's own), and each node becomes a linux.devices entry at
  /dev/infiniband/<name> and one rule ``c major:minor rw`` (never a
  major-wide rule: other adapters' uverbs nodes share the major).  The
  plan is pinned in request.PLAN_ANNOTATION, which the hook creates the
  slice on.  No answer from vgpud, no adapter, any refusal: the start
  fails (exit 1, one line).  Every other container's PLAN_ANNOTATION is
  taken out: only this wrapper writes it.

Then it execs runc ($VGPU_RUNC, else ``runc`` on PATH) with the same argv.
Every other command goes straight to runc.  It imports as little as it can
(no ctypes, no hook; vgpu.common.values' parsers and vgpu.common.rdma's
checks only through vgpu.common.request, for an RDMA request): every Python
start here is on the path of a container's start.  Standard library only.
"""
from __future__ import annotations

import os
import sys

from vgpu import __version__
from vgpu.common import apiclient as ac
from vgpu.common import driverfiles as df
from vgpu.common import fastjson
from vgpu.common.files import atomic_write
from vgpu.common.rdma import grant_of_view
from vgpu.common.request import (HOOK_ENV, IB_DIR, PLAN_ANNOTATION, RUNTIME_GUARD_DEST, Scope,
                                 ScopeError, honoured_scope, hook_argv, hook_stages,
                                 plan_annotation, rdma_device_problem, real_gpu_refusal,
                                 validate, vgpu_major)

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


#: bound on asking vgpud's plan (the container's start waits for it)
PLAN_TIMEOUT = 5.0


def unpin(config: dict) -> bool:
    """Take PLAN_ANNOTATION out (a pod's or an image's config may carry
    one; only this wrapper's counts); True if it was there."""
    ann = config.get("annotations")
    if isinstance(ann, dict) and PLAN_ANNOTATION in ann:
        del ann[PLAN_ANNOTATION]
        return True
    return False


def wants_rdma(sc: Scope) -> dict | None:
    """The request as plan's args when it asks for RDMA (vgpu.io/rdma
    "true"), else None.  A bad value of any key fails the start here, in
    the hook's words (request.validate): this wrapper acts on it."""
    if "rdma" not in sc.raw:
        return None
    try:
        args = validate(sc.raw, sc.source, sc.names)
    except ValueError as e:
        raise ScopeError(f"bad {e}") from None
    if not args.pop("rdma"):
        return None
    if sc.source == "env":
        args["from_image"] = True
    if sc.labels:
        args["labels"] = dict(sc.labels)
    return args


def ask_plan(sc: Scope, args: dict) -> dict:
    """vgpud's plan for the container's slice with RDMA, checked: {"gpus":
    [UUID], "hca", "nodes": ((name, major, minor), ...)}.  ScopeError for
    anything short of one (the start fails: without the nodes' rules the
    container could not open its adapter, and no rule is guessed)."""
    try:
        with ac.ApiClient(None, PLAN_TIMEOUT) as client:
            res = client.request("plan", container=sc.name, rdma=True, **args)
    except ac.ClientError as e:
        raise ScopeError(f"asks for RDMA (vgpu.io/rdma) but vgpud cannot say where its "
                         f"slice goes: {e}") from None
    rd = res.get("rdma") if isinstance(res, dict) else None
    if rd is None:
        # a pod's slice made without RDMA by a sibling (an older wrapper)
        raise ScopeError(f"asks for RDMA (vgpu.io/rdma) but its slice {sc.name} exists "
                         f"without an RDMA adapter")
    try:
        g = grant_of_view(rd)
    except ValueError as e:
        raise ScopeError(f"vgpud's plan is not one: {e}") from None
    gpus = [x.get("uuid") for x in res.get("gpus") or () if isinstance(x, dict)]
    if not gpus or not all(isinstance(u, str) and u for u in gpus):
        raise ScopeError(f"vgpud's plan names no GPU UUIDs: {res.get('gpus')!r}")
    return {"gpus": gpus, "hca": g.hca, "nodes": g.nodes}


def _host_mode(name: str) -> int:
    """The permission bits of the host's /dev/infiniband/<name> (rdma-core's
    udev rules make them 0666), for the container's node."""
    try:
        return os.stat(IB_DIR + name).st_mode & 0o777
    except OSError:
        return 0o666


def add_rdma_devices(config: dict, plan: dict) -> bool:
    """The plan's nodes into ``config`` (in place): a linux.devices entry at
    /dev/infiniband/<name> and one rule ``c major:minor rw`` each, after
    taking out every /dev/infiniband entry there was and the rule of
    exactly its numbers (a container that asks for RDMA gets its slice's
    adapter only; a second run with another plan leaves nothing of the
    first), and the plan pinned in PLAN_ANNOTATION.  True when it changed
    anything."""
    before = fastjson.dumps(config)
    linux = config.setdefault("linux", {})
    if not isinstance(linux, dict):
        raise ValueError("config.json: linux is not an object")
    for k, empty in (("devices", []), ("resources", {})):
        if linux.get(k) is None:
            linux[k] = empty
    devs, res = linux["devices"], linux["resources"]
    if not isinstance(devs, list) or not isinstance(res, dict):
        raise ValueError("config.json: linux.devices or linux.resources is not what OCI says")
    if res.get("devices") is None:
        res["devices"] = []
    rules = res["devices"]
    if not isinstance(rules, list):
        raise ValueError("config.json: linux.resources.devices is not a list")
    old = [d for d in devs if isinstance(d, dict) and str(d.get("path", "")).startswith(IB_DIR)]
    gone = {(d.get("major"), d.get("minor")) for d in old}
    devs[:] = [d for d in devs if not any(d is o for o in old)]
    rules[:] = [r for r in rules if not (
        isinstance(r, dict) and r.get("allow") is True and r.get("type") == "c"
        and (r.get("major"), r.get("minor")) in gone)]
    for name, major, minor in plan["nodes"]:
        devs.append({"path": IB_DIR + name, "type": "c", "major": major, "minor": minor,
                     "fileMode": _host_mode(name), "uid": 0, "gid": 0})
        rules.append({"allow": True, "type": "c", "major": major, "minor": minor,
                      "access": "rw"})
    ann = config.setdefault("annotations", {})
    if not isinstance(ann, dict):
        raise ValueError("config.json: annotations is not an object")
    ann[PLAN_ANNOTATION] = plan_annotation(plan["gpus"], plan["hca"], plan["nodes"])
    return fastjson.dumps(config) != before


def rdma_edits(config: dict, sc: Scope) -> bool:
    """For a container that gets a slice's nodes: the RDMA plan and its
    devices where the request asks for RDMA (ScopeError where it cannot
    be: the start fails), else no plan annotation; True when it changed
    anything."""
    args = wants_rdma(sc)
    if args is None:
        return unpin(config)
    plan = ask_plan(sc, args)
    changed = add_rdma_devices(config, plan)
    why = rdma_device_problem(config, plan["nodes"])
    if why:
        raise ScopeError(f"asks for RDMA (vgpu.io/rdma) but {why}; its slice's adapter is "
                         f"{plan['hca']}, nothing else of an adapter may open")
    return changed


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
        if unpin(config) or guarded:
            atomic_write(path, fastjson.dumps(config), like=path, fsync=False)
        return False
    major = vgpu_major() if device else None
    if device:
        refuse_real_gpu(config, major)
    changed = edit_config(config, major, stages) or guarded
    # a sandbox gets no plan (and no device of a slice)
    changed = (rdma_edits(config, sc) if device else unpin(config)) or changed
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
