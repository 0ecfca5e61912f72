"""The hook's command line: its options (Opts, parse_argv, USAGE) and
HookError, the one-line failure every part of the hook raises."""
from __future__ import annotations

import os
import sys

from vgpu import __version__
from vgpu.common.request import FUSE_MOUNT
from vgpu.common.values import BadValue, parse_container, parse_duration, parse_pid, quote

PROG = "vgpu-oci-hook"
DEFAULT_FUSE_MOUNT = FUSE_MOUNT
STAGES = ("createRuntime", "createContainer", "prestart", "startContainer",
          "poststart", "poststop")
TIMEOUT_MAX = 3600.0    # --timeout's bound, in seconds


USAGE = f"""\
usage: {PROG} [--socket PATH] [--timeout S] [--fuse-mount DIR] [--debug] [STAGE]
       {PROG} [--fuse-mount DIR] [--debug] [--attach-pod] --mount-slice SLICE createRuntime
       {PROG} [--fuse-mount DIR] [--debug] --cgroup DIR|--pid-start TICKS --rebind PID CONTAINER
       {PROG} [--debug] [--cdi-link TARGET::LINK]... [--cdi-ldconfig DIR]... createRuntime

OCI hook: attach a vgpu slice to a container that asks for one (annotations
vgpu.io/memory, vgpu.io/compute, vgpu.io/priority, vgpu.io/policy,
vgpu.io/gpus, vgpu.io/profile; the image's VGPU_* environment only for a
profile whose config allows it).  Reads the OCI state JSON on stdin.

A pod's vgpu.io/* ask for one slice for the pod (pod-<sandbox id>), shared
by its containers; vgpu.io/container-* for the container's own.

stages: createRuntime|prestart (create the slice, mount its nodes),
        poststop (delete the slice); createContainer is refused (it runs
        with the image's environment); others do nothing.  Without STAGE
        only a "stopped" state is understood (poststop).

options:
  --socket PATH     vgpud's API socket (default $VGPU_SOCKET, else /run/vgpu/vgpud.sock)
  --timeout S       bound on each call to vgpud, in seconds (default 5)
  --fuse-mount DIR  where vgpufs is mounted (default $VGPU_FUSE_MOUNT, else {DEFAULT_FUSE_MOUNT})
  --debug           say what the hook does on stderr
  --mount-slice SLICE
                    CDI flow: mount the views of the existing slice SLICE
                    into the container (createRuntime); nothing is created
  --attach-pod      with --mount-slice: attach the slice to the cgroup of the
                    container's Kubernetes pod (its CRI annotations name it),
                    so that every container of the pod opens it (a DRA claim
                    its containers share); another pod's is refused
  --rebind PID CONTAINER
                    re-bind a running container's /proc/driver/nvidia view to
                    the current vgpufs mount (vgpud does this after a restart)
  --cdi-link TARGET::LINK
                    driver files (CDI and vgpu-runtime): make the symlink LINK
                    (an absolute path in the container) -> TARGET (a file name)
  --cdi-ldconfig DIR
                    driver files: run the host's static ldconfig chrooted into
                    the container's root with DIR (repeatable)
  --cgroup DIR, --pid-start TICKS
                    with --rebind: what PID must be to count as the container's
                    (in the cgroup v2 directory DIR or below; started at TICKS)
  --help            this text
  --version         the version of vgpu

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
    rebind_cgroup: str | None = None      # what --rebind checks the pid against
    rebind_start: int | None = None
    mount_slice: str | None = None
    attach_pod = False                     # --mount-slice: bind the pod's cgroup
    cdi_links: list[tuple[str, str]]       # (target name, link path in the container)
    cdi_ldconfig: list[str]                # container directories for ldconfig

    def __init__(self):
        self.cdi_links, self.cdi_ldconfig = [], []


def _invalid(label: str, text: str, e: BadValue) -> ValueError:
    return ValueError(f"invalid {label} {quote(text)}: {e.reason}")


def _container_path(text: str, what: str) -> str:
    """An absolute, normalised path (no "..", no "." component, no NUL):
    what the hook resolves inside the container's root."""
    parts = text.split("/")
    if not text.startswith("/") or "\0" in text or len(text) > 4096 or \
            any(p in (".", "..") for p in parts) or os.path.normpath(text) != text or \
            text == "/":
        raise ValueError(f"invalid {what} {quote(text)}: an absolute, normalised path "
                         f"in the container")
    return text


def _cdi_link(text: str) -> tuple[str, str]:
    target, sep, link = text.partition("::")
    if not sep or not target or "/" in target or target in (".", "..") or "\0" in target:
        raise ValueError(f"invalid --cdi-link {quote(text)}: TARGET::LINK, TARGET a file "
                         f"name in LINK's directory")
    return target, _container_path(link, "--cdi-link link")


def parse_argv(argv: list[str]) -> Opts:
    """The command line -> Opts; ValueError("<what is wrong>") for a usage
    error (values are checked by vgpu.common.values' parsers)."""
    o = Opts()
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        name, eq, value = a.partition("=")
        if name in ("--socket", "--timeout", "--fuse-mount", "--mount-slice", "--cgroup",
                    "--pid-start", "--cdi-link", "--cdi-ldconfig"):
            if not eq:
                if i >= len(argv):
                    raise ValueError(f"{name} needs a value")
                value = argv[i]
                i += 1
            if name == "--timeout":
                try:
                    o.timeout = parse_duration(value)
                    if o.timeout > TIMEOUT_MAX:
                        raise BadValue(value, "is too long (at most 1h)")
                except BadValue as e:
                    raise _invalid(name, value, e) from None
            elif name == "--socket":
                o.socket = value
            elif name == "--cdi-link":
                o.cdi_links.append(_cdi_link(value))
            elif name == "--cdi-ldconfig":
                o.cdi_ldconfig.append(_container_path(value, "--cdi-ldconfig"))
            elif name == "--mount-slice":
                try:
                    o.mount_slice = parse_container(value)
                except BadValue as e:
                    raise _invalid(name, value, e) from None
            elif name == "--cgroup":
                if not os.path.isabs(value):
                    raise ValueError(f'invalid --cgroup {quote(value)}: an absolute directory')
                o.rebind_cgroup = value
            elif name == "--pid-start":
                if not (value.isascii() and value.isdigit()):
                    raise ValueError(f'invalid --pid-start {quote(value)}: clock ticks since boot')
                o.rebind_start = int(value)
            else:
                o.fuse_mount = value
        elif a == "--debug":
            o.debug = True
        elif a == "--attach-pod":
            o.attach_pod = True
        elif a == "--rebind":
            if i + 2 > len(argv):
                raise ValueError("--rebind needs PID and CONTAINER")
            pid, cid = argv[i], argv[i + 1]
            i += 2
            try:
                n = parse_pid(pid)
            except BadValue as e:
                raise _invalid("--rebind pid", pid, e) from None
            try:
                o.rebind = (n, parse_container(cid))
            except BadValue as e:
                raise _invalid("--rebind container", cid, e) from None
        elif a in ("--help", "-h"):
            raise SystemExit(sys.stdout.write(USAGE) and 0)
        elif a == "--version":
            raise SystemExit(sys.stdout.write(f"{PROG} {__version__}\n") and 0)
        elif a.startswith("-"):
            raise ValueError(f"unknown option {quote(a)}")
        elif o.stage is None:
            o.stage = a
        else:
            raise ValueError(f"unexpected argument {quote(a)}")
    if o.attach_pod and o.mount_slice is None:
        raise ValueError("--attach-pod goes with --mount-slice")
    return o
