"""vgpu-oci-hook: the OCI hook that attaches a GPU slice to a container.

    vgpu-oci-hook [--socket PATH] [--timeout S] [--fuse-mount DIR] [--debug] [STAGE]

The runtime passes the container's state (JSON) on stdin; STAGE is the OCI
hook stage the hook was wired for (``createRuntime``, ``prestart``,
``poststop``, ...).  Without STAGE only a ``stopped`` state is understood
(poststop): a ``creating`` state comes with createRuntime, prestart and
createContainer alike, so the hook refuses to guess and act on its pid.

The hook never runs where the image can steer it: ``createContainer`` (run by
runc inside the container's mount namespace, working directory the rootfs,
with the container's environment when the entry sets none) is refused, every
shipped entry sets an explicit ``env``, and Python runs isolated (``-I``: no
PYTHONPATH, PYTHONWARNINGS, user site or working directory on sys.path).

A container asks for a slice with annotations ``vgpu.io/memory``,
``vgpu.io/compute``, ``vgpu.io/priority``, ``vgpu.io/policy``,
``vgpu.io/gpus``, ``vgpu.io/profile`` and ``vgpu.io/rdma`` (the slice's
RDMA adapter, on the plan vgpu-runtime pinned in config.json: docs/rdma.md,
"Through vgpu-runtime") (set by the pod or the operator;
``vgpu.io/container-<key>`` says the same).  In a Kubernetes pod (CRI
annotations) the pod's ``vgpu.io/<key>`` ask for ONE slice for the whole
pod, ``pod-<sandbox id>``, bound to the pod's cgroup and shared by all its
containers; a container with ``vgpu.io/container-<key>`` (the device
plugin's) gets its own instead; the sandbox (pause) container never gets
one.  vgpu.common.request holds the rule (container-hook/README.md, "Pods").
The image's environment (``VGPU_MEMORY``, ``VGPU_PROFILE``, ...) counts only
for a container with none of those annotations, and only when it names, with
``VGPU_PROFILE``, a profile of vgpud's config with ``allow_image_env = true``
(vgpud's ``status`` lists them); otherwise it is ignored.  A container that
asked for nothing costs a JSON parse of its state and config.json: nothing
is sent.  Its values are checked by vgpu.common.values, the parsers vgpud's API
uses too, before anything is sent.

- createRuntime / prestart (runtime namespace, before pivot_root): one
  ``create`` call to vgpud (container id, cgroup or pid, owner: see
  owner_of; the same owner's slice is handed back, anyone else's refused),
  then, inside the
  container's mount namespace (setns through a pidfd of pid), bind-mount
  ``<fuse_mount>/<id>/dev/*`` onto the rootfs' /dev/* and
  ``<fuse_mount>/<id>/proc/driver/nvidia`` onto /proc/driver/nvidia, and
  allow the vgpu major in the device cgroup (v1: devices.allow; v2: the rule
  must be in config.json, which vgpu-runtime adds).  A request with
  ``vgpu.io/rdma`` is created on vgpu-runtime's plan; the slice's adapter
  and nodes must be the plan's and config.json's device rules exactly
  those nodes, then the cgroup's rdma.max is written.  Any failure deletes
  the slice again and fails the start with one line naming the container.
- createContainer: refused (exit 1, one line): see above.
- poststop: ``delete`` (force) of the container's slice, as its owner; a
  slice that is already gone is fine, one owned by someone else (a
  same-named container of another runtime root or namespace) is left alone.
  A pod's container leaves the pod's slice alone; the pod's sandbox
  deletes it.
- any other stage: nothing (exit 0; a line with --debug).

``vgpu-oci-hook --mount-slice SLICE createRuntime`` (the CDI flow, wired by
``vgpuctl cdi generate``): mount the existing slice SLICE's views into the
container (its /proc/driver/nvidia, which runc refuses as a config.json
mount "inside /proc"); no request is read, nothing is created or deleted.

``vgpu-oci-hook --cdi-link TARGET::LINK ... --cdi-ldconfig DIR ...
createRuntime`` (the driver files, wired by ``vgpuctl cdi generate`` and
vgpu-runtime: vgpu.common.driverfiles): inside the container's mount
namespace and root, make each SONAME link LINK -> TARGET (by fd, no
symlink followed) and run the host's static /sbin/ldconfig on the DIRs
chrooted into the root (vgpu.cli.hook.driver); no request is read, no
slice touched.

``vgpu-oci-hook --cgroup DIR|--pid-start TICKS --rebind PID CONTAINER`` (run
by vgpud after it mounted vgpufs afresh, e.g. after a restart; stdin
unused): re-bind the container's /proc/driver/nvidia, whose bind mount
still points at the previous, dead FUSE connection, to the new mount,
inside the running container's mount namespace (open_tree + move_mount:
the container's root no longer shows the host's paths).  PID is pinned
with a pidfd and must be the container's (in its cgroup DIR or below, or
started at TICKS) before and after the hook enters its namespace through
that pidfd; otherwise nothing is touched.  Its /dev nodes need nothing:
char nodes open through vgpu.ko, not through FUSE.  Already-current views
are left alone.

Mount targets inside a rootfs are never resolved as strings: each is
opened with openat2() inside the root, refusing symlinks, and mounted on by
fd (see Mounter).

Every call to vgpud is bounded by --timeout (default 5 s).  Exit status:
0 success or nothing to do, 1 failure (one line on stderr), 2 usage.
"""
from __future__ import annotations

import os
import sys

from vgpu.cli.hook.cmdline import DEFAULT_FUSE_MOUNT, PROG, USAGE, HookError, parse_argv
from vgpu.cli.hook.container import MAX_STATE
from vgpu.cli.hook.mounts import Mounter
from vgpu.cli.hook.stages import rebind, run


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
            return rebind(*o.rebind, fuse, Mounter(), debug, o.rebind_cgroup, o.rebind_start)
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
