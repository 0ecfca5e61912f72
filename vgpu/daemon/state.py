"""vgpud's desired state on disk: <state_dir>/state.json.

Owned here: the file's location, its atomic replacement and what happens when
it is missing, corrupt or from another version.  What goes in it is
vgpu.daemon.records' schema (and its migration from older versions); this
module only checks the envelope:

    {"version": 2, "slices": {"<container>": {...}, ...}}

The kernel is the truth about which slices exist; this file is the truth
about what was wanted (quotas as asked, profile, labels, cgroup).  So:

- a missing file is an empty state (first start);
- a corrupt file (not JSON, not an object, no "slices" object) is moved
  aside to state.json.corrupt-<UTC timestamp>, an error is logged, and load()
  returns an empty state with `recovered_from` set to the moved file.  The
  daemon must then *adopt* the slices it finds in the kernel (their limits
  are what the kernel applies) instead of deleting them: containers keep
  running, only what the kernel does not hold (labels, profile names) is
  lost, and the bad file stays for an operator to read.  Refusing to start
  would leave the node unable to create slices until someone intervenes,
  for no benefit to the running containers;
- a file of an older version this daemon migrates (READS) is returned as
  it is; vgpu.daemon.records reads it and the next save() writes
  STATE_VERSION;
- a file with any other "version" is NOT touched: load() raises StateError
  (a downgrade must not destroy a newer daemon's state);
- save() never leaves a partial file: it writes a temporary file in the same
  directory (mode 0600), flushes and fsyncs it, renames it over state.json
  and fsyncs the directory.  A crash at any point leaves either the old or
  the new document.

Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from vgpu.common.files import atomic_write

__all__ = ["StateStore", "StateError", "STATE_VERSION", "READS", "empty_state"]

log = logging.getLogger("vgpu.daemon.state")

#: the version save() writes, and the versions load() hands on
STATE_VERSION = 2
READS = (1, 2)
STATE_FILE = "state.json"
LOCK_FILE = "vgpud.lock"
_TMP_PREFIX = ".state.json."
_TMP_SUFFIX = ".tmp"


class StateError(Exception):
    """The state file cannot be used and must not be discarded (another
    version, unreadable directory), or another vgpud holds the lock."""


def empty_state() -> dict[str, Any]:
    return {"version": STATE_VERSION, "slices": {}}


class StateStore:
    """Load and atomically save <state_dir>/state.json."""

    def __init__(self, state_dir: str | os.PathLike):
        self.dir = Path(state_dir)
        self.path = self.dir / STATE_FILE
        #: set by load() when a corrupt file was moved aside: its new path
        self.recovered_from: Path | None = None
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------
    def ensure_dir(self) -> None:
        """Create the state directory (mode 0700, parents 0755) if missing."""
        if not self.dir.is_dir():
            self.dir.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.dir.mkdir(mode=0o700)
            except FileExistsError:
                pass
            os.chmod(self.dir, 0o700)   # mkdir's mode is filtered by umask

    def load(self) -> dict[str, Any]:
        """The state document; see the module docstring for a missing,
        corrupt or foreign-version file.  Also removes temporary files left
        by a save() that crashed."""
        self.recovered_from = None
        self._remove_stale_temps()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return empty_state()
        except OSError as e:
            raise StateError(f"{self.path}: cannot read: {e.strerror or e}") from None
        problem = None
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            problem = f"not valid JSON ({e})"
        else:
            if not isinstance(doc, dict):
                problem = f"not a JSON object (a {type(doc).__name__})"
            elif "version" not in doc:
                problem = 'has no "version"'
            elif doc["version"] not in READS or isinstance(doc["version"], bool):
                raise StateError(
                    f"{self.path}: version {doc['version']!r}, this vgpud reads versions "
                    f"{', '.join(map(str, READS))}; it was left untouched (move it away to "
                    f"start afresh)")
            elif not isinstance(doc.get("slices"), dict):
                problem = '"slices" is missing or not an object'
            elif not all(isinstance(v, dict) for v in doc["slices"].values()):
                problem = 'an entry of "slices" is not an object'
        if problem is None:
            return doc
        moved = self._quarantine()
        log.error("state file %s is corrupt: %s; moved to %s and starting from the kernel's "
                  "slices", self.path, problem, moved)
        self.recovered_from = moved
        return empty_state()

    def save(self, doc: dict[str, Any]) -> None:
        """Replace state.json with `doc` atomically and durably.  Raises
        TypeError/ValueError (nothing written) for a document that is not
        serialisable or has no version/slices, OSError on I/O failure (the
        old file stays)."""
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION \
                or not isinstance(doc.get("slices"), dict):
            raise ValueError(f'a state document is {{"version": {STATE_VERSION}, '
                             f'"slices": {{...}}}}')
        data = json.dumps(doc, indent=1, sort_keys=True, allow_nan=False).encode() + b"\n"
        self.ensure_dir()
        # the temporary file is .state.json.*.tmp (_TMP_PREFIX, _TMP_SUFFIX)
        atomic_write(self.path, data, mode=0o600)
        self._fsync_dir()

    # ------------------------------------------------------------------
    def lock(self) -> None:
        """Take an exclusive lock on <state_dir>/vgpud.lock for the life of
        the process (or until unlock()); StateError if another vgpud has it.

        The lock is held on a read-only descriptor: between saves vgpud keeps
        no file of the state directory open for writing, so the file system
        can be remounted read-only under it (``mount -o remount,ro`` refuses
        while a file is open for writing).  Then, and on a directory that is
        read-only when vgpud starts, it serves with the state unsaved and
        retries (SliceManager.save_state)."""
        if self._lock_fd is not None:
            return
        self.ensure_dir()
        path = self.dir / LOCK_FILE
        wfd = None
        try:
            wfd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            if e.errno != errno.EROFS:
                raise
            log.warning("%s is read-only: running with the state file unsaved until it "
                        "is writable again", self.dir)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise StateError(f"{path}: another vgpud holds the lock") from None
                raise
            self._lock_fd = fd
            if wfd is not None:
                try:
                    os.ftruncate(wfd, 0)
                    os.write(wfd, f"{os.getpid()}\n".encode())
                except OSError as e:
                    # the pid is for people; the flock is the lock.  A full
                    # state disk must not keep vgpud from starting (it runs
                    # with its state unsaved, retrying)
                    log.warning("%s: cannot write the pid: %s", path, e.strerror or e)
        finally:
            if wfd is not None:
                os.close(wfd)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------
    def _fsync_dir(self) -> None:
        dfd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _quarantine(self) -> Path:
        ts = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = self.dir / f"{STATE_FILE}.corrupt-{ts}"
        n = 1
        while dest.exists():
            dest = self.dir / f"{STATE_FILE}.corrupt-{ts}.{n}"
            n += 1
        os.rename(self.path, dest)
        self._fsync_dir()
        return dest

    def _remove_stale_temps(self) -> None:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StateError(f"{self.dir}: cannot list: {e.strerror or e}") from None
        for name in names:
            if name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX):
                try:
                    os.unlink(self.dir / name)
                except OSError:
                    pass
