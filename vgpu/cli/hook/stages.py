"""The hook's stages: createRuntime/prestart (attach), poststop (release),
the CDI flow (mount_slice), the driver files (--cdi-link/--cdi-ldconfig:
vgpu.cli.hook.driver) and --rebind (rebind); run() picks one from the
stage argument and the container's state."""
from __future__ import annotations

import errno
import os
import sys

from vgpu.cli.hook.cmdline import DEFAULT_FUSE_MOUNT, PROG, HookError, Opts
from vgpu.cli.hook.cgroups import (allow_devices, cgroup2_mount, cgroup_of, not_the_container,
                                   own_cgroup, pod_cgroup)
from vgpu.cli.hook.container import (owner_of, read_config, read_state, rootfs_of,
                                     runtime_argv, validate)
from vgpu.cli.hook.driver import driver_files
from vgpu.cli.hook.mounts import PROC_SUPER_MAGIC, Mounter, mount_views, wait_for
from vgpu.cli.hook.sysmask import Plan, mask_adapters, plan as hiding_plan
from vgpu.common import apiclient as ac
from vgpu.common.rdma import enable_rdma_controller, grant_of_view, stale_nodes, write_rdma_max
from vgpu.common.request import (PLAN_ANNOTATION, Scope, ScopeError, annotations_of, cri_fields,
                                 honoured_scope, parse_plan, rdma_device_problem,
                                 real_gpu_refusal, vgpu_major)


def attach(state: dict, config: dict, o: Opts, debug, sc: Scope) -> int:
    """createRuntime/prestart of a container with a request: its own slice
    (sc.kind "container", bound to its own cgroup) or its pod's (sc.kind
    "pod": made by the first container of the pod, handed back to the
    others as the same owner's, bound to the pod's cgroup); then the
    slice's views are mounted into the container."""
    cid, name = state["id"], sc.name
    try:
        args = validate(sc.raw, sc.source, sc.names)
    except ValueError as e:
        raise HookError(f"container {cid}: bad {e}") from None
    pin = pinned_plan(cid, config, args.pop("rdma", False))
    if pin is not None:
        # the slice goes where vgpu-runtime's plan put it: the device rules
        # in config.json are that adapter's nodes
        args["gpus"], args["rdma"] = list(pin["gpus"]), {"hca": pin["hca"]}
    if sc.source == "env":
        args["from_image"] = True     # vgpud re-checks the profile's allow_image_env
    if sc.labels:
        args["labels"] = dict(sc.labels)
    pid = state.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise HookError(f"container {cid}: the state on stdin has no pid")
    rootfs = rootfs_of(state, config)
    v2, v1dev = cgroup_of(pid)
    args["cgroup"] = own_cgroup(cid, pid, v2)
    if sc.kind == "pod":
        args["cgroup"] = pod_cgroup(cid, args["cgroup"], sc.pod_uid)
    owner = owner_of(state, config, *runtime_argv())
    client = ac.ApiClient(o.socket, o.timeout)
    created = ok = False
    try:
        try:
            res = client.request("create", container=name, owner=owner, **args)
        except ac.ApiError as e:
            if e.code != "exists":
                raise
            # a slice of that name that is not this container's (or this
            # pod's): never share it
            raise HookError(f"container {cid}: vgpud: {e.message} (this container: "
                            f"{' '.join(f'{k}={v}' for k, v in owner.items())})") from None
        slice_ = res["slice"]
        if res.get("reused"):
            # a pod's slice made by another of its containers, or our own
            # from a second hook call: the same owner's
            debug(f"slice {name} for {cid} exists already (same owner)")
        else:
            created = True
            debug(f"created slice {slice_.get('slice_id')} ({name}) for {cid} ({args}, "
                  f"owner {owner})")
        hide = None
        if pin is not None:
            check_pinned(cid, name, slice_, pin, config)
            hide = limit_rdma(cid, name, slice_, args["cgroup"], debug)
        fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
        src = os.path.join(fuse, name, "dev")
        # vgpufs shows dev/ empty until vgpu.ko has reported the slice's minors
        if not wait_for(os.path.join(src, "nvidiactl"), min(o.timeout, 2.0)):
            raise HookError(f"container {cid}: vgpufs shows no nodes for {name} at {src} "
                            f"(is vgpud's filesystem mounted at {fuse}?)")
        m = Mounter()
        allow_devices(cid, config, v1dev, slice_, debug)
        m.setns_mnt(pid)
        sid = slice_.get("slice_id")
        mount_views(cid, rootfs, fuse, m, debug, name,
                    sid if isinstance(sid, int) and not isinstance(sid, bool) else None)
        if hide:
            mask_adapters(cid, rootfs, m, hide, debug)
        ok = True
        return 0
    except ac.ClientError as e:
        raise HookError(f"container {cid}: vgpud: {e}") from None
    except OSError as e:
        raise HookError(f"container {cid}: {e.strerror or e}"
                        f"{' (' + e.filename + ')' if getattr(e, 'filename', None) else ''}") \
            from None
    finally:
        # A pod's slice stays: a sibling container may have been handed it
        # since we made it (and opened its nodes); the kubelet retries this
        # container, the sandbox's poststop or vgpud's GC ends the slice.
        if created and not ok and sc.kind == "pod":
            debug(f"slice {name} stays for the pod after {cid}'s failure")
        elif created and not ok:
            try:
                client.request("delete", container=name, force=True, owner=owner)
            except ac.ClientError as e:
                sys.stderr.write(f"{PROG}: container {cid}: could not delete its slice "
                                 f"{name} after the failure: {e}\n")
        client.close()


def pinned_plan(cid: str, config: dict, wanted: bool) -> dict | None:
    """The RDMA plan vgpu-runtime pinned in config.json (request.parse_plan)
    for a request that asks for RDMA; None for one that does not.  Without
    a plan the adapter's device rules are not in config.json either (runc's
    cgroup v2 device program is made from it before any hook runs), so
    the start fails rather than make a slice whose nodes cannot open."""
    if not wanted:
        return None
    ann = config.get("annotations") if isinstance(config.get("annotations"), dict) else {}
    if PLAN_ANNOTATION not in ann:
        raise HookError(f"container {cid}: asks for RDMA (vgpu.io/rdma) but config.json has "
                        f"no plan of vgpu-runtime's ({PLAN_ANNOTATION}): the adapter's device "
                        f"rules must be written before the container is created; start it "
                        f"through vgpu-runtime")
    try:
        return parse_plan(ann[PLAN_ANNOTATION])
    except ValueError as e:
        raise HookError(f"container {cid}: {e}") from None


def check_pinned(cid: str, name: str, slice_: dict, pin: dict, config: dict) -> None:
    """The slice vgpud made (or handed back) is the plan's: its adapter and
    nodes, and config.json's devices and rules are exactly those nodes
    (request.rdma_device_problem).  A slice placed elsewhere since the plan
    (a sibling of the pod made it first, the adapters changed) fails the
    start: the rules were written for the plan."""
    g = slice_.get("rdma")
    if g is None:
        raise HookError(f"container {cid}: slice {name} has no RDMA adapter, though "
                        f"vgpu-runtime's plan gave it {pin['hca']}")
    try:
        grant = grant_of_view(g)
    except ValueError as e:
        raise HookError(f"container {cid}: slice {name}: {e}") from None
    if grant.hca != pin["hca"] or set(grant.nodes) != set(pin["nodes"]):
        def nodes(ns):
            return ", ".join(f"{n} {ma}:{mi}" for n, ma, mi in ns)
        raise HookError(f"container {cid}: slice {name} has adapter {grant.hca} "
                        f"({nodes(grant.nodes)}), not {pin['hca']} ({nodes(pin['nodes'])}) "
                        f"as vgpu-runtime planned and config.json's device rules say; "
                        f"start it again")
    why = rdma_device_problem(config, grant.nodes)
    if why:
        raise HookError(f"container {cid}: slice {name}: its adapter is {grant.hca}, but "
                        f"config.json: {why}")


def creating_pid(state: dict) -> int:
    """The container's init pid from a createRuntime/prestart state, whose
    status is "creating" (runc) or "created" (older runtimes); any other
    state, or a pid that cannot be a new container's init, is refused
    rather than acted on."""
    cid, status, pid = state["id"], state.get("status"), state.get("pid")
    if status not in ("creating", "created"):
        raise HookError(f"container {cid}: a state with status {status!r} is not one of "
                        f"createRuntime or prestart (\"creating\"); the hook does not act on it")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        raise HookError(f"container {cid}: the state on stdin has no container pid "
                        f"(pid {pid!r})")
    return pid


def mount_slice(state: dict, config: dict, o: Opts, debug) -> int:
    """The CDI flow (``--mount-slice SLICE`` at createRuntime): the operator
    made the slice and the CDI spec gives the container its /dev nodes; the
    proc view cannot be a config.json mount (runc refuses mounts inside
    /proc), so the hook bind-mounts it in the container's mount namespace,
    before pivot_root, as attach() does.  Nothing is created or deleted."""
    cid, name = state["id"], o.mount_slice
    pid = creating_pid(state)
    fuse = o.fuse_mount or os.environ.get("VGPU_FUSE_MOUNT") or DEFAULT_FUSE_MOUNT
    rootfs = rootfs_of(state, config)
    # vgpu.ko opens an unbound slice for host administrators only: bind the
    # operator's slice to this container's own cgroup for as long as it runs
    cg = own_cgroup(cid, pid, cgroup_of(pid)[0])
    if o.attach_pod:
        # a claim its pod's containers share: the pod's cgroup (the parent
        # of the container's own, named by the uid the CRI annotations
        # give), which vgpud's attach keeps while it has processes, so a
        # second container of the pod attaches the same and another pod's
        # is refused (pod_cgroup refuses a parent of any other name)
        cg = pod_cgroup(cid, cg, (cri_fields(annotations_of(state, config)) or {}).get("pod_uid"))
    client = ac.ApiClient(o.socket, o.timeout)
    try:
        res = client.request("attach", container=name, cgroup=cg)
        debug(f"slice {name} attached to {cg}")
    except ac.ClientError as e:
        raise HookError(f"container {cid}: slice {name}: vgpud: {e}") from None
    finally:
        client.close()
    hide = limit_rdma(cid, name, res.get("slice") if isinstance(res, dict) else None, cg, debug)
    try:
        m = Mounter()
        m.setns_mnt(pid)
        sid = (res.get("slice") or {}).get("slice_id") if isinstance(res, dict) else None
        mount_views(name, rootfs, fuse, m, debug,
                    slice_id=sid if isinstance(sid, int) and not isinstance(sid, bool) else None)
        if hide:
            mask_adapters(cid, rootfs, m, hide, debug)
    except OSError as e:
        raise HookError(f"container {cid}: slice {name}: {e.strerror or e}") from None
    return 0


def limit_rdma(cid: str, name: str, slice_: dict | None, cg: str, debug,
               sysfs: str = "/sys") -> Plan | None:
    """A slice with RDMA (docs/rdma.md): its rdma cgroup limits on the
    cgroup it was attached to (the container's, or its pod's), the rdma
    controller enabled down to it.  The container does not start without
    them: its uverbs node would then be unlimited.  Returns what hiding the
    other adapters from the container's /sys takes (vgpu.cli.hook.sysmask, read from
    the host's /sys before the hook enters the container's namespace);
    None for a slice without RDMA."""
    g = (slice_ or {}).get("rdma")
    if g is None:
        return None
    try:
        grant = grant_of_view(g)
        stale = stale_nodes(grant, sysfs)
        if stale:
            # the device rules the spec (or config.json) gives name these
            # numbers: they must still be this adapter's
            raise ValueError(f"its nodes are no longer {grant.hca}'s: {', '.join(stale)} "
                             f"(the adapters changed since the slice was made; make it again)")
        enable_rdma_controller(cg, cgroup2_mount() or "/sys/fs/cgroup")
        write_rdma_max(cg, grant)
    except (ValueError, OSError) as e:
        raise HookError(f"container {cid}: slice {name}: the rdma cgroup limits on {cg}: "
                        f"{getattr(e, 'strerror', None) or e}") from None
    debug(f"rdma.max of {cg}: {grant.rdma_max()}")
    return hiding_plan(grant.hca, sysfs)


def release(state: dict, config: dict, o: Opts, debug, name: str | None = None) -> int:
    """poststop: delete the slice ``name`` (the container's own; a pod's
    sandbox names its pod's) as its owner."""
    cid = state["id"]
    name = name or cid
    owner = owner_of(state, config, *runtime_argv())
    try:
        with ac.ApiClient(o.socket, o.timeout) as client:
            client.request("delete", container=name, force=True, owner=owner)
        debug(f"deleted the slice {name} of {cid}")
    except ac.ApiError as e:
        if e.code == "not-owner":
            # a same-named container of another runtime root or namespace
            # (or the operator's slice): not ours to delete
            sys.stderr.write(f"{PROG}: container {cid}: {e.message}\n")
            return 0
        if e.code != "not-found":
            raise HookError(f"container {cid}: vgpud: {e}") from None
        debug(f"{cid} had no slice {name} (already deleted, or never made)")
    except ac.ClientError as e:
        raise HookError(f"container {cid}: vgpud: {e} (the daemon collects the slice "
                        f"once the container's cgroup is gone)") from None
    return 0


def rebind(pid: int, cid: str, fuse: str, m: Mounter, debug, cgroup: str | None = None,
           start: int | None = None) -> int:
    """Point a running container's /proc/driver/nvidia at the current vgpufs
    mount (see the module doc).  Returns 0 also when nothing was needed.

    vgpud names the container by a pid it read a moment before, and a pid
    can be reused.  So the process is pinned with a pidfd first and checked
    against what vgpud recorded of the container (its cgroup ``cgroup``,
    or the start time ``start`` of a slice made by pid) before its mount
    namespace is entered through that pidfd, and again after; with nothing
    to check against, or on a mismatch, nothing is touched."""
    src = os.path.join(fuse, cid, "proc", "driver", "nvidia")
    try:
        want = os.stat(src)
    except OSError as e:
        raise HookError(f"container {cid}: no vgpufs view at {src} ({e.strerror})") from None
    if cgroup is None and start is None:
        raise HookError(f"container {cid}: --rebind needs --cgroup or --pid-start to tell "
                        f"whether pid {pid} is still the container's; nothing re-bound")
    v2root = cgroup2_mount() if cgroup is not None else None    # the host's, before setns
    target = "/proc/driver/nvidia"
    try:
        pidfd, procfd = m.open_process(pid)
    except OSError as e:
        raise HookError(f"container {cid}: pid {pid}: {e.strerror or e}; nothing re-bound") \
            from None
    fds = [pidfd, procfd]

    def check(when: str) -> None:
        why = not_the_container(procfd, cgroup, start, v2root)
        if why is None and not m.alive(pidfd):
            why = "it exited"
        if why:
            raise HookError(f"container {cid}: pid {pid} is not the container's{when}: "
                            f"{why}; nothing re-bound")

    def resolve_target(root: int) -> int | None:
        try:
            fd = m.resolve(root, target.lstrip("/"), os.O_DIRECTORY)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise HookError(f"container {cid}: {target} in its root is a symlink or lies "
                            f"under one; refused") from None
        fds.append(fd)
        return fd

    try:
        check("")
        root = os.open("root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=procfd)
        fds.append(root)
        tree = m.open_tree(src, rdonly=True)    # the host's path, while we still see it
        fds.append(tree)
        m.enter_mnt(pidfd)
        check(" (after entering its mount namespace)")
        t = resolve_target(root)
        try:
            if t is None or os.path.samestat(os.fstat(t), want):
                debug(f"{cid}: {target} " + ("is not there" if t is None else
                                             "already shows the current vgpufs mount"))
                return 0
            if m.fs_type(t) == PROC_SUPER_MAGIC:
                # procfs itself, no view mounted on it: a process of the
                # slice's cgroup that was never given one (a pod's sandbox)
                debug(f"{cid}: pid {pid} has no view mounted on {target}; left alone")
                return 0
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
        # the stale bind of the old FUSE connection (ENOTCONN) or another view
        try:
            m.umount(t, target)
            t = resolve_target(root)            # what lies under it now
        except OSError as e:
            debug(f"{cid}: umount {target}: {e.strerror or e} (mounting over it)")
        if t is None:
            raise HookError(f"container {cid} (pid {pid}): {target} went away while its "
                            f"stale view was unmounted; nothing re-bound")
        m.attach(tree, t, target)
        debug(f"{cid}: re-bound {target} in pid {pid}'s mount namespace")
        return 0
    except OSError as e:
        raise HookError(f"container {cid}: re-binding its view in pid {pid}: "
                        f"{e.strerror or e}") from None
    finally:
        for fd in fds:
            os.close(fd)


def run(o: Opts, data: bytes) -> int:
    def debug(msg):
        if o.debug:
            sys.stderr.write(f"{PROG}: {msg}\n")

    state = read_state(data)
    cid, stage = state["id"], o.stage
    if stage is None:
        # Only "stopped" names its stage.  "creating" comes with
        # createRuntime and prestart (runtime namespace: the pid is the
        # container's) and with createContainer (inside the container, whose
        # pid may read as 1): guessing would act on a pid we do not know.
        status = state.get("status")
        if status in ("creating", "created"):
            raise HookError(f"container {cid}: no STAGE argument and a {status!r} state, "
                            f"which createRuntime, prestart and createContainer all send; "
                            f"wire the hook as \"vgpu-oci-hook createRuntime\" (and "
                            f"\"vgpu-oci-hook poststop\")")
        stage = "poststop" if status == "stopped" else f"(status {status})"
    if stage == "createContainer":
        # runc runs it inside the container: working directory the rootfs,
        # before pivot_root, with the image's environment when the entry has
        # no "env".  No stage of ours belongs there.
        raise HookError(f"container {cid}: refusing the createContainer stage: runc runs it "
                        f"inside the container with the image's environment; wire "
                        f"vgpu-oci-hook at createRuntime (or prestart) and poststop")
    if stage not in ("createRuntime", "prestart", "poststop"):
        debug(f"stage {stage}: nothing to do for container {cid}")
        return 0
    config = read_config(state)
    if o.cdi_links or o.cdi_ldconfig:
        # the driver files' links and ldcache (vgpu.cli.hook.driver): no
        # request is read, no slice touched
        if stage == "poststop":
            return 0
        return driver_files(cid, creating_pid(state), rootfs_of(state, config), o.cdi_links,
                            o.cdi_ldconfig, debug)
    if o.mount_slice is not None:
        if stage == "poststop":
            debug(f"container {cid}: slice {o.mount_slice} is the operator's; nothing to do")
            return 0
        return mount_slice(state, config, o, debug)
    try:
        sc = honoured_scope(state, config, o.socket, o.timeout, debug, PROG)
    except ScopeError as e:
        raise HookError(f"container {cid}: {e}") from None
    if sc.kind == "sandbox":
        # a pod's pause container never gets a slice; its poststop ends the
        # pod's (the pod's containers' poststops leave it alone)
        if stage == "poststop" and sc.raw:
            return release(state, config, o, debug, sc.name)
        debug(f"container {cid} is a pod sandbox: no slice")
        return 0
    if not sc.raw:
        debug(f"container {cid} asked for no slice")
        return 0
    if stage == "poststop":
        if sc.kind == "pod":
            debug(f"container {cid}: the pod's slice {sc.name} stays (its sandbox's poststop "
                  f"deletes it)")
            return 0
        return release(state, config, o, debug, sc.name)
    why = real_gpu_refusal(config, vgpu_major())
    if why:
        raise HookError(f"container {cid}: {why}")
    creating_pid(state)
    return attach(state, config, o, debug, sc)
