"""vgpud's supervision of vgpu-device-plugin (vgpu.k8s.deviceplugin).

Owned here: the plugin's command line as vgpud's config makes it
(``plugin_argv``), and ``supervise``, a service of vgpud's root nursery
(started with ``nursery.start``) that runs the plugin as a child process
while the config asks for it, restarts it with a back-off when it exits
(1 s doubling to 30 s; back to 1 s once it has run 30 s), restarts it at
once when a reload changes its command line, and stops it when cancelled:
trio.run_process sends SIGTERM and, 5 s later, SIGKILL, and waits for it.

It is vgpud's own trio code, hence in vgpu.daemon; what it must never do is
import vgpu.k8s or gRPC (vgpud's own start must not pay for it:
tests/host/test_layers.py checks), nor the rest of the daemon (vgpud passes
a function that reads its config).
"""

from __future__ import annotations

import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import Callable

import trio

import vgpu

log = logging.getLogger("vgpud.device-plugin")

RESTART_MIN, RESTART_MAX = 1.0, 30.0
STABLE = 30.0          # seconds of running after which the back-off starts again
CHECK = 1.0            # how often the config is compared with the running child's
PKG_PARENT = str(Path(vgpu.__file__).resolve().parent.parent)


def plugin_argv(socket: str, kubelet_dir: str, profile: str = "",
                factor: float | None = None, guard: bool = True) -> list[str]:
    """``vgpu-device-plugin`` for vgpud's API socket, run by this very
    interpreter (python -m, so that it is the same installation)."""
    argv = [sys.executable, "-m", "vgpu.k8s.deviceplugin", "--socket", str(socket),
            "--kubelet-dir", str(kubelet_dir)]
    if profile:
        argv += ["--profile", profile]
    if factor is not None:
        argv += ["--oversubscribe-factor", f"{factor:g}"]
    if not guard:
        argv += ["--no-guard"]
    return argv


def dra_plugin_argv(socket: str, node_name: str, kubelet_root: str, cdi_dir: str,
                    api_server: str = "", admin_access: bool = False) -> list[str]:
    """``vgpu-dra-plugin`` (vgpu.k8s.draplugin) for vgpud's API socket and
    this node, its sockets under the kubelet's root directory, run by this
    very interpreter."""
    root = Path(kubelet_root)
    argv = [sys.executable, "-m", "vgpu.k8s.draplugin", "--socket", str(socket),
            "--node-name", node_name,
            "--plugin-dir", str(root / "plugins" / "gpu.vgpu.io"),
            "--registry-dir", str(root / "plugins_registry"), "--cdi-dir", str(cdi_dir)]
    if api_server:
        argv += ["--api-server", api_server]
    if admin_access:
        argv.append("--admin-access")
    return argv


async def supervise(argv_of: Callable[[], list[str] | None], *, check: float = CHECK,
                    restart_min: float = RESTART_MIN, restart_max: float = RESTART_MAX,
                    stable: float = STABLE, name: str = "device plugin",
                    task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run ``argv_of()`` as a child for as long as this task lives; None:
    no child (the plugin is off).  ``argv_of`` is asked every ``check``
    seconds: a different command line (a reload) restarts the child."""
    task_status.started()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (PKG_PARENT, os.environ.get("PYTHONPATH")) if p))
    delay = restart_min
    while True:
        argv = argv_of()
        if argv is None:
            await trio.sleep(check)
            continue
        t0 = trio.current_time()
        changed = False
        async with trio.open_nursery() as n:
            proc = await n.start(partial(trio.run_process, argv, check=False, env=env))
            log.info("%s started (pid %d): %s", name, proc.pid, " ".join(argv[1:]))
            while proc.returncode is None:
                with trio.move_on_after(check):
                    await proc.wait()
                if proc.returncode is None and argv_of() != argv:
                    changed = True
                    log.info("%s: the config changed; stopping pid %d", name, proc.pid)
                    n.cancel_scope.cancel()
                    break
        if changed:
            delay = restart_min
            continue
        if trio.current_time() - t0 >= stable:
            delay = restart_min
        log.warning("%s (pid %d) exited with status %s; restarting in %g s",
                    name, proc.pid, proc.returncode, delay)
        await trio.sleep(delay)
        delay = min(delay * 2, restart_max)
