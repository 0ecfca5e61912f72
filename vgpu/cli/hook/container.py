"""What the hook reads of the container: the OCI state on stdin, the
bundle's config.json, the request it carries (checked by vgpu.common.values'
parsers before anything is sent) and the slice's owner (the runtime that
runs the hook, its root, the containerd namespace, the pod)."""
from __future__ import annotations

import os

from vgpu.cli.hook.cmdline import HookError
from vgpu.common import fastjson
# validate: the request as create's args, its values checked by
# vgpu.common.values' parsers before anything is sent
from vgpu.common.request import POD_UID_KEYS, validate  # noqa: F401  (the hook's)

MAX_STATE = 1 << 20


def read_state(data: bytes) -> dict:
    if not data.strip():
        raise HookError("no container state on stdin (expected the OCI state JSON)")
    try:
        state = fastjson.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"cannot parse the container state on stdin: {e}") from None
    if not isinstance(state, dict) or not isinstance(state.get("id"), str) or not state["id"]:
        raise HookError("the container state on stdin is not an OCI state (no \"id\")")
    if not isinstance(state.get("bundle"), str) or not state["bundle"]:
        raise HookError(f"container {state['id']}: the state on stdin names no bundle")
    return state


def read_config(state: dict) -> dict:
    path = os.path.join(state["bundle"], "config.json")
    try:
        with open(path, "rb") as f:
            config = fastjson.loads(f.read())
    except FileNotFoundError:
        raise HookError(f"container {state['id']}: no bundle config at {path}") from None
    except OSError as e:
        raise HookError(f"container {state['id']}: cannot read {path}: "
                        f"{e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"container {state['id']}: {path} is not JSON: {e}") from None
    if not isinstance(config, dict):
        raise HookError(f"container {state['id']}: {path} is not an OCI config")
    return config


def rootfs_of(state: dict, config: dict) -> str:
    root = config.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise HookError(f"container {state['id']}: config.json has no root.path")
    return os.path.join(state["bundle"], path) if not os.path.isabs(path) else path


# ------------------------------------------------------------ the owner
#: runtimes' state roots when their command line gives no --root (as root)
DEFAULT_ROOTS = {"runc": "/run/runc", "crun": "/run/crun", "youki": "/run/youki"}


def runtime_argv(pid: int | None = None) -> tuple[list[str], str]:
    """(command line, working directory) of the runtime that runs the hook:
    runc runs hooks as its children (vgpu-runtime execs runc, so it is runc
    by then), so the parent, unless that is a wrapper of the hook (a shell
    script that does not exec): then the nearest of 4 ancestors that is a
    runtime we know or has a --root.  Host root's processes: the image
    cannot steer them."""
    pid = os.getppid() if pid is None else pid
    first = None
    for _ in range(4):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/stat", "rb") as f:
                line = f.read()
            ppid = int(line[line.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
        first = first or (argv, cwd)
        if argv and (os.path.basename(argv[0]) in DEFAULT_ROOTS or
                     any(a == "--root" or a.startswith("--root=") for a in argv)):
            return argv, cwd
        if ppid <= 1:
            break
        pid = ppid
    return first or ([], "/")


def owner_of(state: dict, config: dict, argv: list[str], cwd: str = "/") -> dict:
    """Who the container's slice belongs to (docs/api.md, "Owners"):
    container ids are unique only per runtime root, so the runtime's name
    and root (--root, else its default), the containerd namespace (from the
    bundle path .../io.containerd.runtime.v2.task/<namespace>/<id>, or
    containerd's runc root /run/containerd/runc/<namespace>) and the pod's
    uid (CRI annotations) where there is one.  vgpud gives the slice back
    to this owner only and refuses its deletion by anyone else."""
    runtime = os.path.basename(argv[0]) if argv else ""
    root = None
    for i in range(1, len(argv)):           # runc's and crun's global option
        a = argv[i]
        if a == "--":
            break
        if a == "--root" and i + 1 < len(argv):
            root = argv[i + 1]
            break
        if a.startswith("--root="):
            root = a[len("--root="):]
            break
    root = root or DEFAULT_ROOTS.get(runtime)
    owner = {"runtime": runtime or "unknown"}
    if root:
        owner["root"] = os.path.normpath(os.path.join(cwd, root))
    ns = containerd_namespace(os.path.normpath(state["bundle"]), owner.get("root", ""))
    if ns:
        owner["namespace"] = ns
    ann = state.get("annotations")
    if not isinstance(ann, dict) or not ann:
        ann = config.get("annotations")
    for k in POD_UID_KEYS:
        v = ann.get(k) if isinstance(ann, dict) else None
        if isinstance(v, str) and v:
            owner["pod"] = v
            break
    return owner


#: the directories of containerd's shims' bundles: <one of these>/<namespace>/<id>
_SHIM_DIRS = ("io.containerd.runtime.v2.task", "io.containerd.runtime.v1.linux",
              "io.containerd.runtime.v2.linux", "io.containerd.runtime.v1.task")


def containerd_namespace(bundle: str, root: str) -> str | None:
    """The containerd namespace of a container: from its bundle's path
    (/run/containerd/io.containerd.runtime.v2.task/<namespace>/<id>), else
    from runc's root (/run/containerd/runc/<namespace>); None for neither.
    (Plain string work: no re on the hook's path.)"""
    parts = bundle.split("/")
    if len(parts) >= 4 and parts[-3] in _SHIM_DIRS and parts[-2] and parts[-1]:
        return parts[-2]
    parts = root.split("/")
    if len(parts) >= 4 and parts[-3:-1] == ["containerd", "runc"] and parts[-1]:
        return parts[-1]
    return None
