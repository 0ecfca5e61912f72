"""vgpu-oci-hook: the OCI hook that attaches a GPU slice to a container.

    vgpu-oci-hook [--socket PATH] [--timeout S] [--fuse-mount DIR] [--debug] [STAGE]

The runtime passes the container's state (JSON) on stdin; STAGE is the OCI
hook stage the hook was wired for (``createRuntime``, ``prestart``,
``createContainer``, ``poststop``, ...).  Without STAGE it is taken from the
state's ``status`` (creating/created: prestart, stopped: poststop).

A container asks for a slice with annotations ``vgpu.io/memory``,
``vgpu.io/compute``, ``vgpu.io/priority``, ``vgpu.io/policy``,
``vgpu.io/gpus`` and ``vgpu.io/profile`` or, when it has none of those, with
the environment variables ``VGPU_MEMORY``, ``VGPU_COMPUTE``, ... of its
process.  A container that asked for nothing costs a JSON parse of its state
and config.json: nothing else is imported, nothing is sent.

- createRuntime / prestart (runtime namespace, before pivot_root): one
  ``create`` call to vgpud (container id, cgroup or pid), then, inside the
  container's mount namespace (setns into /proc/<pid>/ns/mnt), bind-mount
  ``<fuse_mount>/<id>/dev/*`` onto the rootfs' /dev/* and
  ``<fuse_mount>/<id>/proc/driver/nvidia`` onto /proc/driver/nvidia, and
  allow the vgpu major in the device cgroup (v1: devices.allow; v2: the rule
  must be in config.json, which vgpu-runtime adds).  Any failure deletes the
  slice again and fails the start with one line naming the container.
- createContainer (inside the container's mount namespace): the bind mounts
  only, where createRuntime did not already make them.
- poststop: ``delete`` (force) of the container's slice; a slice that is
  already gone is fine.
- any other stage: nothing (exit 0; a line with --debug).

``vgpu-oci-hook --rebind PID CONTAINER`` (run by vgpud after it mounted
vgpufs afresh, e.g. after a restart; stdin unused): re-bind the container's
/proc/driver/nvidia, whose bind mount still points at the previous, dead
FUSE connection, to the new mount, inside the running container's mount
namespace (open_tree + move_mount: the container's root no longer shows the
host's paths).  Its /dev nodes need nothing: char nodes open through
vgpu.ko, not through FUSE.  Already-current views are left alone.

Every call to vgpud is bounded by --timeout (default 5 s).  Exit status:
0 success or nothing to do, 1 failure (one line on stderr), 2 usage.
"""
from __future__ import annotations

import os
import sys

PROG = "vgpu-oci-hook"
KEYS = ("memory", "compute", "priority", "policy", "gpus", "profile")
ANNOTATION_PREFIX = "vgpu.io/"
ENV_PREFIX = "VGPU_"
DEFAULT_FUSE_MOUNT = "/run/vgpu/fs"
MAX_STATE = 1 << 20
STAGES = ("createRuntime", "createContainer", "prestart", "startContainer",
          "poststart", "poststop")

USAGE = f"""\
usage: {PROG} [--socket PATH] [--timeout S] [--fuse-mount DIR] [--debug] [STAGE]
       {PROG} [--fuse-mount DIR] [--debug] --rebind PID CONTAINER

OCI hook: attach a vgpu slice to a container that asks for one (annotations
vgpu.io/memory, vgpu.io/compute, vgpu.io/priority, vgpu.io/policy,
vgpu.io/gpus, vgpu.io/profile, or env VGPU_MEMORY, VGPU_COMPUTE, ...).
Reads the OCI state JSON on stdin.

stages: createRuntime|prestart (create the slice, mount its nodes),
        createContainer (mounts only), poststop (delete the slice);
        others do nothing.  Without STAGE: from the state's status.

options:
  --socket PATH     vgpud's API socket (default $VGPU_SOCKET, else /run/vgpu/vgpud.sock)
  --timeout S       bound on each call to vgpud, in seconds (default 5)
  --fuse-mount DIR  where vgpufs is mounted (default $VGPU_FUSE_MOUNT, else {DEFAULT_FUSE_MOUNT})
  --debug           say what the hook does on stderr
  --rebind PID CONTAINER
                    re-bind a running container's /proc/driver/nvidia view to
                    the current vgpufs mount (vgpud does this after a restart)
  --help            this text

exit status: 0 success or nothing to do, 1 failure, 2 usage error
"""


class HookError(Exception):
    """One line for stderr; the start fails."""


class Opts:
    socket = None
    timeout = 5.0
    fuse_mount = None
    debug = False
    stage = None
    rebind: tuple[int, str] | None = None


def parse_argv(argv: list[str]) -> Opts:
    o = Opts()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        name, eq, value = a.partition("=")
        if name in ("--socket", "--timeout", "--fuse-mount"):
            if not eq:
                if i >= len(argv):
                    raise ValueError(f"{name} needs a value")
                value = argv[i]
                i += 1
            if name == "--timeout":
                try:
                    t = float(value)
                except ValueError:
                    t = -1.0
                if not 0 < t <= 3600:
                    raise ValueError(f'invalid --timeout "{value}": seconds, more than 0')
                o.timeout = t
            elif name == "--socket":
                o.socket = value
            else:
                o.fuse_mount = value
        elif a == "--debug":
            o.debug = True
        elif a == "--rebind":
            if i + 2 > len(argv):
                raise ValueError("--rebind needs PID and CONTAINER")
            pid, cid = argv[i], argv[i + 1]
            i += 2
            if not pid.isdigit() or int(pid) <= 0:
                raise ValueError(f'invalid --rebind pid "{pid}"')
            if not cid or "/" in cid or cid in (".", ".."):
                raise ValueError(f'invalid --rebind container "{cid}"')
            o.rebind = (int(pid), cid)
        elif a in ("--help", "-h"):
            raise SystemExit(sys.stdout.write(USAGE) and 0)
        elif a.startswith("-"):
            raise ValueError(f'unknown option "{a}"')
        elif o.stage is None:
            o.stage = a
        else:
            raise ValueError(f'unexpected argument "{a}"')
    return o


# ------------------------------------------------------------ the request
def read_state(data: bytes) -> dict:
    import json
    if not data.strip():
        raise HookError("no container state on stdin (expected the OCI state JSON)")
    try:
        state = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise HookError(f"cannot parse the container state on stdin: {e}") from None
    if not isinstance(state, dict) or not isinstance(state.get("id"), str) or not state["id"]:
        raise HookError("the container state on stdin is not an OCI state (no \"id\")")
    if not isinstance(state.get("bundle"), str) or not state["bundle"]:
        raise HookError(f"container {state['id']}: the state on stdin names no bundle")
    return state


def read_config(state: dict) -> dict:
    import json
    path = os.path.join(state["bundle"], "config.json")
    try:
        with open(path, "rb") as f:
            config = json.loads(f.read())
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


def raw_request(state: dict, config: dict) -> tuple[dict, str]:
    """The request's raw strings by key, and where they came from
    ("annotation" or "env"); ({}, "") when the container asked for nothing.
    Annotations (the state's, else config.json's) win over the environment
    as a whole: a container with any vgpu.io/ annotation ignores VGPU_*."""
    ann = state.get("annotations")
    if not isinstance(ann, dict) or not ann:
        ann = config.get("annotations")
    req = {}
    if isinstance(ann, dict):
        for k in KEYS:
            v = ann.get(ANNOTATION_PREFIX + k)
            if v is not None:
                req[k] = v
    if req:
        return req, "annotation"
    proc = config.get("process")
    env = proc.get("env") if isinstance(proc, dict) else None
    if isinstance(env, list):
        names = {ENV_PREFIX + k.upper(): k for k in KEYS}
        for item in env:
            if isinstance(item, str) and item.startswith(ENV_PREFIX):
                name, _, v = item.partition("=")
                if name in names:
                    req[names[name]] = v       # the last one wins, as in execve
    return req, ("env" if req else "")


def wants_slice(state: dict, config: dict) -> bool:
    return bool(raw_request(state, config)[0])


def validate(raw: dict, source: str) -> dict:
    """The request as create's args; raises ValueError("<name> <quoted>:
    <reason>")."""
    from .units import parse_percent, parse_size, quote

    def name(k):
        return ANNOTATION_PREFIX + k if source == "annotation" else ENV_PREFIX + k.upper()

    out = {}
    for k, v in raw.items():
        if not isinstance(v, str):
            raise ValueError(f"{name(k)} {quote(v)}: not a string")
        s = v.strip()
        try:
            if k == "memory":
                out[k] = parse_size(s)
                if out[k] == 0:
                    raise ValueError(f"{quote(v)} is zero (give a memory quota above 0)")
            elif k == "compute":
                x = parse_percent(s)
                out[k] = int(x) if x == int(x) else x
            elif k == "priority":
                if s not in ("high", "low"):
                    raise ValueError(f"{quote(v)} is not high or low")
                out[k] = s
            elif k == "policy":
                if s not in ("share", "fixed", "burst"):
                    raise ValueError(f"{quote(v)} is not share, fixed or burst")
                out[k] = s
            elif k == "profile":
                if not s or "\0" in s or len(s) > 128:
                    raise ValueError(f"{quote(v)} is not a profile name")
                out[k] = s
            elif k == "gpus":
                out[k] = parse_gpus(v)
        except ValueError as e:
            msg = str(e)
            q = quote(v) + " "
            if msg.startswith(q):
                msg = msg[len(q):]
            raise ValueError(f"{name(k)} {quote(v)}: {msg}") from None
    return out


def parse_gpus(v: str) -> list:
    """"0", "0,1", "GPU-uuid" (indexes become ints); "all" or "" is None
    (no choice: the daemon places the slice)."""
    out = []
    for part in v.split(","):
        part = part.strip()
        if not part:
            raise ValueError("is not a GPU list (e.g. 0, 0,1 or GPU-...)")
        if part.isdigit():
            if int(part) >= 1024:
                raise ValueError(f"names GPU {part}, out of range")
            g = int(part)
        elif len(part) > 128 or any(c.isspace() for c in part):
            raise ValueError("is not a GPU list (e.g. 0, 0,1 or GPU-...)")
        else:
            g = part
        if g in out:
            raise ValueError(f"names GPU {part} twice")
        out.append(g)
    return out


# ------------------------------------------------------------ the host side
def cgroup_of(pid: int) -> tuple[str | None, str | None]:
    """(v2 cgroup directory, v1 devices cgroup directory) of ``pid``; either
    may be None.  The v2 path is given only on a pure v2 host (the daemon
    resolves cgroups under /sys/fs/cgroup)."""
    v2 = v1dev = None
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hid == "0" and ctrls == "":
            if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                v2 = "/sys/fs/cgroup" + path if path != "/" else "/sys/fs/cgroup"
        elif "devices" in ctrls.split(","):
            v1dev = "/sys/fs/cgroup/devices" + (path if path != "/" else "")
    return v2, v1dev


def rootfs_of(state: dict, config: dict) -> str:
    root = config.get("root")
    path = root.get("path") if isinstance(root, dict) else None
    if not isinstance(path, str) or not path:
        raise HookError(f"container {state['id']}: config.json has no root.path")
    return os.path.join(state["bundle"], path) if not os.path.isabs(path) else path


class Mounter:
    """Bind mounts by syscall (ctypes; imported only for a container that
    asked for a slice)."""
    MS_BIND, MS_RDONLY, MS_REMOUNT = 4096, 1, 32
    CLONE_NEWNS = 0x00020000

    def __init__(self):
        import ctypes
        import ctypes.util
        self.ctypes = ctypes
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            e = self.ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def setns_mnt(self, pid: int) -> None:
        """Enter ``pid``'s mount namespace and its root (as ``nsenter -m -r``):
        setns alone leaves us at the namespace's root mount, which is not the
        process's root when the runtime runs chrooted (the VM test bed)."""
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._check(self.libc.setns(fd, self.CLONE_NEWNS), "setns into the mount namespace")
            os.fchdir(root)
            os.chroot(".")
            os.chdir("/")
        finally:
            os.close(fd)
            os.close(root)

    def mount(self, src: str | None, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
        enc = (lambda s: None if s is None else s.encode())
        self._check(self.libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)),
                    f"mount {src or fstype} on {target}")

    # x86_64 and aarch64 share these (the new mount API, Linux 5.2)
    SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429
    OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
    MOVE_MOUNT_F_EMPTY_PATH = 0x4
    AT_FDCWD, MNT_DETACH = -100, 2

    def open_tree(self, path: str) -> int:
        """A detached copy of the mount at path, as an fd that survives setns."""
        fd = self.libc.syscall(self.SYS_OPEN_TREE, self.AT_FDCWD, path.encode(),
                               self.OPEN_TREE_CLONE | self.OPEN_TREE_CLOEXEC)
        self._check(0 if fd >= 0 else -1, f"open_tree {path}")
        return fd

    def move_mount(self, fd: int, target: str) -> None:
        self._check(self.libc.syscall(self.SYS_MOVE_MOUNT, fd, b"", self.AT_FDCWD,
                                      target.encode(), self.MOVE_MOUNT_F_EMPTY_PATH),
                    f"move_mount onto {target}")

    def umount_detach(self, target: str) -> None:
        self._check(self.libc.umount2(target.encode(), self.MNT_DETACH), f"umount {target}")


def _inside(root: str, path: str) -> bool:
    rp = os.path.realpath(path)
    return rp == root or rp.startswith(root.rstrip("/") + "/")


def mount_views(cid: str, rootfs: str, fuse: str, m: Mounter, debug) -> list[str]:
    """Bind-mount the slice's vgpufs nodes and proc view into the rootfs (in
    the current mount namespace).  Idempotent: a target that already is the
    slice's node is left alone.  Returns what it mounted."""
    import stat
    rootfs = os.path.realpath(rootfs)
    src_dev = os.path.join(fuse, cid, "dev")
    src_proc = os.path.join(fuse, cid, "proc", "driver", "nvidia")
    try:
        names = sorted(os.listdir(src_dev))
    except OSError as e:
        raise HookError(f"container {cid}: vgpufs has no nodes for it at {src_dev} "
                        f"({e.strerror or e}; is vgpud's filesystem mounted?)") from None
    done = []
    dev_dir = os.path.join(rootfs, "dev")
    if not _inside(rootfs, dev_dir):
        raise HookError(f"container {cid}: {dev_dir} leaves the rootfs")
    os.makedirs(dev_dir, exist_ok=True)
    for name in names:
        src = os.path.join(src_dev, name)
        st = os.stat(src)
        if not stat.S_ISCHR(st.st_mode):
            continue
        target = os.path.join(dev_dir, name)
        try:
            tst = os.lstat(target)
        except FileNotFoundError:
            tst = None
        if tst is not None and stat.S_ISCHR(tst.st_mode) and tst.st_rdev == st.st_rdev:
            continue                      # already there (createRuntime did it)
        if tst is not None and stat.S_ISLNK(tst.st_mode):
            raise HookError(f"container {cid}: /dev/{name} in the rootfs is a symlink")
        if tst is None:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o666))
        m.mount(src, target, None, Mounter.MS_BIND)
        done.append(f"/dev/{name}")
    if os.path.isdir(src_proc):
        pdrv = os.path.join(rootfs, "proc", "driver")
        target = os.path.join(pdrv, "nvidia")
        if os.path.isdir(os.path.join(rootfs, "proc")) and _inside(rootfs, pdrv):
            if os.path.isdir(target):
                if not os.path.samestat(os.stat(target), os.stat(src_proc)):
                    m.mount(src_proc, target, None, Mounter.MS_BIND)
                    m.mount(None, target, None, Mounter.MS_BIND | Mounter.MS_REMOUNT
                            | Mounter.MS_RDONLY)
                    done.append("/proc/driver/nvidia")
            elif os.path.isdir(pdrv):
                # procfs cannot grow a directory: a small read-only tmpfs over
                # /proc/driver holding the slice's nvidia directory
                m.mount("vgpu", pdrv, "tmpfs", 0, "mode=0555,size=64k")
                os.mkdir(target, 0o555)
                m.mount(src_proc, target, None, Mounter.MS_BIND)
                m.mount(None, pdrv, None, Mounter.MS_REMOUNT | Mounter.MS_RDONLY,
                        "mode=0555,size=64k")
                done.append("/proc/driver/nvidia")
    debug(f"mounted {' '.join(done) or 'nothing (already there)'} in {rootfs}")
    return done


def vgpu_major() -> int | None:
    try:
        with open("/proc/devices") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == "vgpu" and parts[0].isdigit():
                    return int(parts[0])
    except OSError:
        pass
    return None


def config_allows(config: dict, major: int) -> bool:
    linux = config.get("linux") if isinstance(config.get("linux"), dict) else {}
    res = linux.get("resources") if isinstance(linux.get("resources"), dict) else {}
    devs = res.get("devices") if isinstance(res.get("devices"), list) else []
    allowed = False
    for d in devs:              # the last matching rule wins, as in runc
        if not isinstance(d, dict):
            continue
        t = d.get("type", "a")
        if t not in ("a", "c"):
            continue
        if d.get("major") not in (None, -1, major):
            continue
        if d.get("minor") not in (None, -1):
            continue
        allowed = bool(d.get("allow"))
    return allowed


def allow_devices(cid: str, config: dict, v1dev: str | None, slice_: dict, debug) -> None:
    dev = slice_.get("devices") if isinstance(slice_.get("devices"), dict) else {}
    major = dev.get("major") if isinstance(dev.get("major"), int) else vgpu_major()
    if major is None:
        debug("no vgpu major known: device cgroup left alone")
        return
    if v1dev and os.path.exists(os.path.join(v1dev, "devices.allow")):
        with open(os.path.join(v1dev, "devices.allow"), "w") as f:
            f.write(f"c {major}:* rwm")
        debug(f"devices.allow c {major}:* rwm in {v1dev}")
    elif not config_allows(config, major):
        # cgroup v2: runc's own eBPF program decides; only config.json's
        # rules (vgpu-runtime adds ours) can allow the major.
        sys.stderr.write(f"{PROG}: container {cid}: warning: config.json does not allow "
                         f"character major {major} (vgpu) and the device cgroup is v2; the "
                         f"container cannot open its GPU nodes (start it through "
                         f"vgpu-runtime)\n")


# ------------------------------------------------------------ stages
def attach(state: dict, config: dict, o: Opts, debug) -> int:
    cid = state["id"]
    raw, source = raw_request(state, config)
    try:
        args = validate(raw, source)
    except ValueError as e:
        raise HookError(f"container {cid}: bad {e}") from None
    pid = state.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise HookError(f"container {cid}: the state on stdin has no pid")
    rootfs = rootfs_of(state, config)
    v2, v1dev = cgroup_of(pid)
    if v2:
        args["cgroup"] = v2
    else:
        args["pid"] = pid
    from . import apiclient as ac
    client = ac.ApiClient(o.socket, o.timeout)
    created = ok = False
    try:
        try:
            slice_ = client.request("create", container=cid, **args)["slice"]
            created = True
            debug(f"created slice {slice_.get('slice_id')} for {cid} ({args})")
        except ac.ApiError as e:
            if e.code != "exists":
                raise
            slice_ = client.request("show", container=cid)["slice"]    # a second hook call
            debug(f"slice for {cid} exists already")
        fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
        src = os.path.join(fuse, cid, "dev")
        # vgpufs shows dev/ empty until vgpu.ko has reported the slice's minors
        if not wait_for(os.path.join(src, "nvidiactl"), min(o.timeout, 2.0)):
            raise HookError(f"container {cid}: vgpufs shows no nodes for it at {src} "
                            f"(is vgpud's filesystem mounted at {fuse}?)")
        m = Mounter()
        allow_devices(cid, config, v1dev, slice_, debug)
        m.setns_mnt(pid)
        mount_views(cid, rootfs, fuse, m, debug)
        ok = True
        return 0
    except ac.ClientError as e:
        raise HookError(f"container {cid}: vgpud: {e}") from None
    except OSError as e:
        raise HookError(f"container {cid}: {e.strerror or e}"
                        f"{' (' + e.filename + ')' if getattr(e, 'filename', None) else ''}") \
            from None
    finally:
        if created and not ok:
            try:
                client.request("delete", container=cid, force=True)
            except ac.ClientError as e:
                sys.stderr.write(f"{PROG}: container {cid}: could not delete its slice "
                                 f"after the failure: {e}\n")
        client.close()


def wait_for(path: str, limit: float) -> bool:
    from time import monotonic, sleep
    end = monotonic() + limit
    while not os.path.exists(path):
        if monotonic() >= end:
            return False
        sleep(0.005)
    return True


def mounts_only(state: dict, config: dict, o: Opts, debug) -> int:
    fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
    try:
        mount_views(state["id"], rootfs_of(state, config), fuse, Mounter(), debug)
    except OSError as e:
        raise HookError(f"container {state['id']}: {e.strerror or e}") from None
    return 0


def release(state: dict, o: Opts, debug) -> int:
    cid = state["id"]
    from . import apiclient as ac
    try:
        with ac.ApiClient(o.socket, o.timeout) as client:
            client.request("delete", container=cid, force=True)
        debug(f"deleted the slice of {cid}")
    except ac.ApiError as e:
        if e.code != "not-found":
            raise HookError(f"container {cid}: vgpud: {e}") from None
        debug(f"{cid} had no slice (already deleted)")
    except ac.ClientError as e:
        raise HookError(f"container {cid}: vgpud: {e} (the daemon collects the slice "
                        f"once the container's cgroup is gone)") from None
    return 0


def rebind(pid: int, cid: str, fuse: str, m: Mounter, debug) -> int:
    """Point a running container's /proc/driver/nvidia at the current vgpufs
    mount (see the module doc).  Returns 0 also when nothing was needed."""
    import errno
    src = os.path.join(fuse, cid, "proc", "driver", "nvidia")
    try:
        want = os.stat(src)
    except OSError as e:
        raise HookError(f"container {cid}: no vgpufs view at {src} ({e.strerror})") from None
    fd = m.open_tree(src)
    try:
        m.setns_mnt(pid)
        target = "/proc/driver/nvidia"
        try:
            st = os.stat(target)
            if os.path.samestat(st, want):
                debug(f"{cid}: {target} already shows the current vgpufs mount")
                return 0
        except FileNotFoundError:
            raise HookError(f"container {cid} (pid {pid}) has no {target} to re-bind") \
                from None
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
        # the stale bind of the old FUSE connection (ENOTCONN) or another view
        try:
            m.umount_detach(target)
        except OSError as e:
            debug(f"{cid}: umount {target}: {e} (mounting over it)")
        m.move_mount(fd, target)
        m.mount(None, target, None, Mounter.MS_BIND | Mounter.MS_REMOUNT | Mounter.MS_RDONLY)
        debug(f"{cid}: re-bound {target} in pid {pid}'s mount namespace")
        return 0
    except OSError as e:
        raise HookError(f"container {cid}: re-binding its view in pid {pid}: "
                        f"{e.strerror or e}") from None
    finally:
        os.close(fd)


def run(o: Opts, data: bytes) -> int:
    def debug(msg):
        if o.debug:
            sys.stderr.write(f"{PROG}: {msg}\n")

    state = read_state(data)
    stage = o.stage
    if stage is None:
        status = state.get("status")
        stage = {"creating": "prestart", "created": "prestart",
                 "stopped": "poststop"}.get(status, f"(status {status})")
    if stage not in ("createRuntime", "prestart", "createContainer", "poststop"):
        debug(f"stage {stage}: nothing to do for container {state['id']}")
        return 0
    config = read_config(state)
    if not wants_slice(state, config):
        debug(f"container {state['id']} asked for no slice")
        return 0
    if stage == "poststop":
        return release(state, o, debug)
    if stage == "createContainer":
        return mounts_only(state, config, o, debug)
    return attach(state, config, o, debug)


def main(argv: list[str] | None = None) -> int:
    try:
        o = parse_argv(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        sys.stderr.write(f"{PROG}: {e}\n{USAGE.splitlines()[0]}\n")
        return 2
    if o.rebind is not None:
        fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
        debug = (lambda msg: sys.stderr.write(f"{PROG}: {msg}\n")) if o.debug else (lambda m: None)
        try:
            return rebind(*o.rebind, fuse, Mounter(), debug)
        except HookError as e:
            sys.stderr.write(f"{PROG}: {e}\n")
            return 1
    try:
        data = sys.stdin.buffer.read(MAX_STATE + 1) if sys.stdin is not None else b""
        if len(data) > MAX_STATE:
            raise HookError(f"the container state on stdin is larger than {MAX_STATE} bytes")
        return run(o, data)
    except HookError as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
