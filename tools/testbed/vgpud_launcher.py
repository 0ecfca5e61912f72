"""Start a vgpud for a test, a benchmark or the demo, and stop it again.

The one launcher every place that runs a real vgpud uses (tests/vm's daemon
and container tests, bench/daemon_scale.py, bench/container_start.py,
bench/setquota.py --start-vgpud, tools/demo.py).  Standard library only; import
it as ``tools.testbed.vgpud_launcher`` with the repository root on sys.path (tests/vm's
conftest and the benchmarks put it there), or as ``testbed.vgpud_launcher`` from a
script in tools/.

    from tools.testbed.vgpud_launcher import config, running

    cfg = config(tmp, gc={"interval": "1s"}, defaults={"memory": "16MiB"})
    with running(tmp, cfg, wait_kernel=True) as d:
        api = d.api()
        api.ok("create", container="c1", memory="32MiB")

``config()`` builds the configuration: ``BASE`` (socket and state directory
under ``tmp``, vgpufs off, no metrics endpoint, log level info, 64 MiB by
default) or another base (a dict, or a TOML file), with keyword overrides,
one per table; ``example_config()`` is config/vgpud.example.toml with its
state directory under ``tmp`` (the demo's).
``Vgpud`` writes it to ``tmp/vgpud.toml``, starts ``python -m
vgpu.daemon.main --config tmp/vgpud.toml`` with its output appended to
``tmp/vgpud.log``, and waits (``start_timeout``) until the admin socket
answers ``status`` for this very process (and, if asked, until vgpu.ko is
loaded and vgpufs mounted).  ``stop()`` sends SIGTERM (or the signal given),
waits ``stop_timeout``, then SIGKILLs.  Every failure (exited, not serving in
time, did not stop on the signal) raises ``VgpudError`` with the tail of the
daemon's log; an exception raised inside ``running()`` gets that tail as a
note.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]

# vgpud's own defaults for the paths a config may leave out
# (config/vgpud.example.toml, docs/config.md)
DEFAULT_SOCKET = "/run/vgpu/vgpud.sock"
DEFAULT_STATE_DIR = "/var/lib/vgpu"
DEFAULT_FUSE_MOUNT = "/run/vgpu/private/fs"

# What a test's vgpud gets unless told otherwise; "{tmp}" is the directory
# the daemon runs in.
BASE: dict[str, dict] = {
    "paths": {"socket": "{tmp}/vgpud.sock", "state_dir": "{tmp}/state", "fuse_mount": ""},
    "metrics": {"listen": ""},
    "log": {"level": "info"},
    "defaults": {"memory": "64MiB"},
}

# The installed example (/etc/vgpu/vgpud.toml): the demo's config
EXAMPLE = ROOT / "config" / "vgpud.example.toml"

LOG_TAIL = 6000


class VgpudError(RuntimeError):
    """vgpud did not start, or did not stop; the message ends with its log."""


# ------------------------------------------------------------------ config
def _merge(into: dict, over: dict) -> dict:
    for k, v in over.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)
    return into


def _subst(v: Any, tmp: str) -> Any:
    if isinstance(v, str):
        return v.replace("{tmp}", tmp)
    if isinstance(v, dict):
        return {k: _subst(x, tmp) for k, x in v.items()}
    if isinstance(v, list):
        return [_subst(x, tmp) for x in v]
    return v


def config(tmp: str | os.PathLike, base: dict | str | os.PathLike | None = None,
           **sections: dict | None) -> dict:
    """The configuration of a vgpud run under ``tmp``.

    ``base``: ``BASE`` when not given, a dict, or the path of a TOML file.
    Each keyword names a table (``paths``, ``defaults``, ``gc``, ``node``,
    ``scheduler``, ``profiles``...) and gives the keys to set in it, merged
    into the base's (nested tables too: ``profiles={"small": {...}}``); a key
    or a table given as None is removed (vgpud's default applies).  "{tmp}"
    in any string becomes ``tmp``."""
    if base is None:
        cfg = copy.deepcopy(BASE)
    elif isinstance(base, dict):
        cfg = copy.deepcopy(base)
    else:
        cfg = tomllib.loads(Path(base).read_text())
    _merge(cfg, sections)
    return _subst(cfg, str(tmp))


def example_config(tmp: str | os.PathLike, **sections: dict | None) -> dict:
    """config/vgpud.example.toml as a node has it (socket /run/vgpu/vgpud.sock,
    vgpufs at /run/vgpu/private/fs, metrics on 127.0.0.1:19400), its state
    directory moved under ``tmp``, with ``sections`` merged as by ``config``."""
    return config(tmp, EXAMPLE, **{"paths": {"state_dir": "{tmp}/state"}, **sections})


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list) and not any(isinstance(x, dict) for x in v):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r} here")


def _table(out: list[str], name: str, t: dict) -> None:
    scalars = {k: v for k, v in t.items()
               if not isinstance(v, dict) and not (isinstance(v, list) and v
                                                   and all(isinstance(x, dict) for x in v))}
    if name and (scalars or not t):
        out.append(f"[{name}]")
    for k, v in scalars.items():
        out.append(f"{_key(k)} = {_value(v)}")
    for k, v in t.items():
        sub = f"{name}.{_key(k)}" if name else _key(k)
        if isinstance(v, dict):
            _table(out, sub, v)
        elif k not in scalars:
            for item in v:
                out.append(f"[[{sub}]]")
                for ik, iv in item.items():
                    out.append(f"{_key(ik)} = {_value(iv)}")


def render(cfg: dict) -> str:
    """``cfg`` as TOML text (``tomllib.loads(render(cfg)) == cfg``)."""
    out: list[str] = []
    _table(out, "", cfg)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ client
class Api:
    """A small client of vgpud's admin API (docs/api.md): one JSON line per
    request, one per reply, on a Unix socket; standard library only, so a
    test of the daemon does not depend on vgpuctl."""

    def __init__(self, path: str, timeout: float = 60.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        try:
            self.s.connect(path)
        except OSError:
            self.s.close()
            raise
        self.f = self.s.makefile("rwb")
        self.n = 0

    def call(self, op: str, **args) -> dict:
        self.n += 1
        self.f.write(json.dumps({"v": 1, "id": self.n, "op": op, "args": args}).encode() + b"\n")
        self.f.flush()
        line = self.f.readline()
        assert line, f"daemon closed the connection on {op}"
        r = json.loads(line)
        assert r["id"] == self.n
        return r

    def ok(self, op: str, **args) -> dict:
        r = self.call(op, **args)
        assert r["ok"], r
        return r["result"]

    def close(self):
        self.f.close()
        self.s.close()

    def __enter__(self) -> "Api":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------ daemon
class Vgpud:
    """One vgpud, its files under ``tmp``: ``config`` (the TOML file, which a
    test may rewrite before a SIGHUP), ``logf`` (stdout and stderr, appended
    across restarts), ``sock``, ``state_dir`` and ``fs`` (vgpufs's mount
    point, "" when off) from the config; ``proc`` once started."""

    def __init__(self, tmp: str | os.PathLike, cfg: dict | None = None, *,
                 command: list[str] | None = None, args: list[str] = (),
                 cwd: str | os.PathLike | None = ROOT, env: dict | None = None,
                 wait_kernel: bool = False, wait_fuse: bool = False,
                 start_timeout: float = 180.0, stop_timeout: float = 60.0):
        self.tmp = Path(tmp)
        self.config = self.tmp / "vgpud.toml"
        self.logf = self.tmp / "vgpud.log"
        self.command = list(command) if command else [sys.executable, "-m", "vgpu.daemon.main"]
        self.args = list(args)
        self.cwd = cwd
        self.env = env
        self.wait_kernel = wait_kernel
        self.wait_fuse = wait_fuse
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen | None = None
        self.write_config(config(self.tmp) if cfg is None else cfg)

    # -------------------------------------------------------------- config
    def write_config(self, cfg: dict) -> None:
        """Write ``cfg`` (a running daemon reads it on SIGHUP: ``reload()``)."""
        self.cfg = cfg
        paths = cfg.get("paths", {})
        self.sock = str(paths.get("socket", DEFAULT_SOCKET))
        self.state_dir = Path(paths.get("state_dir", DEFAULT_STATE_DIR))
        self.fs = str(paths.get("fuse_mount", DEFAULT_FUSE_MOUNT))
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.config.write_text(render(cfg))

    def reload(self) -> None:
        """SIGHUP: the daemon reads its config file again."""
        self.proc.send_signal(signal.SIGHUP)

    # -------------------------------------------------------------- state
    def log(self, tail: int = 0) -> str:
        try:
            text = self.logf.read_text(errors="replace")
        except OSError:
            return ""
        return text[-tail:] if tail else text

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def api(self, timeout: float = 60.0) -> Api:
        return Api(self.sock, timeout)

    def fuse_ready(self) -> bool:
        """vgpufs is mounted (a dead mount of a killed daemon is not)."""
        return bool(self.fs) and os.path.ismount(self.fs) and os.path.isdir(self.fs)

    def _error(self, what: str) -> VgpudError:
        return VgpudError(f"{what}; its log ({self.logf}):\n{self.log(LOG_TAIL)}")

    # -------------------------------------------------------------- life
    def _serving(self) -> bool:
        try:
            with Api(self.sock, 10) as a:
                st = a.ok("status")
        except (OSError, AssertionError, ValueError, KeyError):
            return False
        return st.get("pid") == self.proc.pid and \
            (not self.wait_kernel or bool(st.get("kernel", {}).get("loaded")))

    def start(self) -> "Vgpud":
        """Start the daemon and wait until it serves (``start_timeout``)."""
        if self.alive():
            raise VgpudError(f"vgpud {self.proc.pid} is running already")
        if self.wait_fuse:
            subprocess.run(["modprobe", "fuse"], capture_output=True)
        with open(self.logf, "ab") as log:
            self.proc = subprocess.Popen([*self.command, "--config", str(self.config), *self.args],
                                         cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log)
        end = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                raise self._error(f"vgpud exited {self.proc.returncode} while starting")
            if self._serving() and (not self.wait_fuse or self.fuse_ready()):
                return self
            if time.monotonic() >= end:
                break
            time.sleep(0.3)
        what = " and vgpufs mounted at " + self.fs if self.wait_fuse else ""
        self.stop(signal.SIGKILL, check=False)
        raise self._error(f"vgpud not serving{what} within {self.start_timeout:g} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None,
             check: bool = True) -> int:
        """Send ``sig`` and wait ``timeout`` (default ``stop_timeout``) for the
        exit; then SIGKILL, and raise (``check``) that it did not exit on
        ``sig``.  Returns the exit status (0 when it never ran)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(self.stop_timeout if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            if check:
                raise self._error(f"vgpud {self.proc.pid} did not exit on "
                                  f"{signal.Signals(sig).name} within "
                                  f"{self.stop_timeout if timeout is None else timeout:g} s")
            return self.proc.returncode

    def kill(self) -> int:
        """SIGKILL (no cleanup: the socket and vgpufs's mount stay behind)."""
        return self.stop(signal.SIGKILL)

    def __enter__(self) -> "Vgpud":
        return self if self.alive() else self.start()

    def __exit__(self, typ, exc, tb) -> None:
        if exc is not None:
            exc.add_note(f"vgpud's log ({self.logf}):\n{self.log(LOG_TAIL)}")
            self.stop(check=False)
        else:
            self.stop()


@contextlib.contextmanager
def running(tmp: str | os.PathLike, cfg: dict | None = None, **kw) -> Iterator[Vgpud]:
    """A started ``Vgpud(tmp, cfg, **kw)``, stopped (SIGTERM, then SIGKILL
    after ``stop_timeout``) when the block ends."""
    with Vgpud(tmp, cfg, **kw) as d:
        yield d
