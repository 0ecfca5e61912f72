"""Whether a slice's container still lives: its cgroup v2 directory (gone,
or no processes in cgroup.procs) or its pid (dead, or reused: another start
time).  Standard library only; reads /proc and /sys/fs/cgroup."""

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


def gone(cgroup: str | None, pid: int | None = None, pid_start: int | None = None) -> bool:
    """True when the container is gone for sure: its cgroup directory gone
    or empty, else its pid dead or another process (another start time)."""
    if cgroup:
        try:
            with open(os.path.join(cgroup_path(cgroup), "cgroup.procs")) as f:
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


def live_pid(rec) -> int | None:
    """A live process of the container a record names (the first of its
    cgroup's processes, or its recorded pid), or None."""
    cg = rec.cgroup
    if cg:
        try:
            with open(os.path.join(cgroup_path(cg), "cgroup.procs")) as f:
                first = f.readline().strip()
            return int(first) if first.isdigit() else None
        except OSError:
            return None
    pid = rec.pid
    if pid and not container_gone(rec):
        return pid
    return None
