"""Files written whole: ``atomic_write``, the one way vgpu replaces a file
(the state file, containerd's config, a bundle's config.json, an allow-list,
a CDI spec, a report).  Standard library only."""
from __future__ import annotations

import os

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike, data: str | bytes, *, mode: int | None = None,
                 like: str | os.PathLike | None = None, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) so that a
    reader sees the old file or the new one, never part of one: a temporary
    file in the same directory (``.<name>.<pid>.<random>.tmp``, created
    exclusively), written, fsync'd (unless ``fsync`` is False: a file read
    at once and worthless after a crash), renamed over ``path``; on any
    failure the temporary file is removed and the error raised.

    The new file's mode: ``like``'s mode and owner (``like`` is usually the
    file replaced; it must exist), else ``mode`` exactly, else what open()
    gives a new file (0666 less the umask).  The directory must exist, and
    is not fsync'd (the caller does that where the rename must survive a
    crash)."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    st = os.stat(like) if like is not None else None
    raw = data.encode() if isinstance(data, str) else bytes(data)
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    # owner-only until the mode is set, when it is to be set
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                 0o666 if st is None and mode is None else 0o600)
    try:
        try:
            if st is not None:
                os.fchmod(fd, st.st_mode & 0o7777)
                if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                    os.fchown(fd, st.st_uid, st.st_gid)
            elif mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
