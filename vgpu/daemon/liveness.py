"""Whether a slice's container still lives: its cgroup v2 directory (gone,
or no process in it or below it) or its pid (dead, or reused: another start
time).  Standard library only; reads /proc and /sys/fs/cgroup.

A slice may be bound to a cgroup that holds no process of its own: a pod's
shared slice is bound to the pod's cgroup, whose processes are all in its
containers' child cgroups (cgroup v2 keeps processes in leaves).  So a
cgroup lives while ``populated 1`` stands in its cgroup.events, which
counts the whole subtree; cgroup.procs, which lists the cgroup's own
processes only, decides only where there is no cgroup.events (the root
cgroup, or a plain directory standing for a cgroup in tests)."""

from __future__ import annotations

import os


class CgroupError(OSError):
    """A cgroup directory that cannot be opened (the message names it)."""


def proc_start(pid: int) -> int | None:
    """Start time (clock ticks since boot) of pid, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


#: where cgroup v2 is mounted; a record's cgroup path is relative to it unless
#: it already starts with it
CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_path(cg: str) -> str:
    root = CGROUP_ROOT.rstrip("/")
    return cg if cg == root or cg.startswith(root + "/") else os.path.join(root, cg.lstrip("/"))


def open_cgroup(cg: str | None) -> int | None:
    """An O_RDONLY|O_DIRECTORY fd of a record's cgroup directory, for binding
    its slice in vgpu.ko (the caller closes it); None without a cgroup.
    Raises CgroupError when the directory cannot be opened."""
    if not cg:
        return None
    path = cgroup_path(cg)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise CgroupError(f"{path}: {e.strerror}") from None


def _populated(path: str) -> bool | None:
    """cgroup.events' ``populated`` of a cgroup directory (a process in it or
    in any cgroup below it); None when it has no cgroup.events or no such
    line.  FileNotFoundError for a cgroup that is gone is the caller's."""
    try:
        with open(os.path.join(path, "cgroup.events")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "populated":
                    return value.strip() != "0"
    except FileNotFoundError:
        if not os.path.isdir(path):
            raise
    return None


def gone(cgroup: str | None, pid: int | None = None, pid_start: int | None = None) -> bool:
    """True when the container is gone for sure: its cgroup directory gone
    or unpopulated (no process in it or below it), else its pid dead or
    another process (another start time)."""
    if cgroup:
        path = cgroup_path(cgroup)
        try:
            pop = _populated(path)
            if pop is not None:
                return not pop
            with open(os.path.join(path, "cgroup.procs")) as f:
                return not f.read().strip()
        except FileNotFoundError:
            return True
        except OSError:
            return False
    if pid:
        st = proc_start(pid)
        return st is None or (pid_start is not None and st != pid_start)
    return False


def container_gone(rec) -> bool:
    """gone() of the container a record (records.SliceRecord) names."""
    return gone(rec.cgroup, rec.pid, rec.pid_start)


#: how many cgroup directories cgroup_pids() reads at most (a pod has a few)
LIVE_PID_DIRS = 256


def cgroup_pids(path: str) -> list[int]:
    """The first process of each cgroup at or below ``path`` that holds any
    (top-down, at most LIVE_PID_DIRS directories): one process per
    container of a pod's cgroup, the container's own for a container's."""
    pids = []
    for n, (d, _, _) in enumerate(os.walk(path)):
        if n >= LIVE_PID_DIRS:
            break
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                first = f.readline().strip()
        except OSError:
            continue
        if first.isdigit():
            pids.append(int(first))
    return pids


def live_pids(rec) -> list[int]:
    """A live process of each container a record's slice serves: one per
    populated cgroup at or below its cgroup (a pod's slice serves each of
    the pod's containers, each in its own mount namespace), else its
    recorded pid while it lives."""
    if rec.cgroup:
        return cgroup_pids(cgroup_path(rec.cgroup))
    pid = rec.pid
    return [pid] if pid and not container_gone(rec) else []
