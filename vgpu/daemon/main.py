"""vgpud: the vgpu daemon.

One trio root nursery; each service is started with ``await nursery.start``
(it is ready when that returns) and stopped by cancellation, in the order
of the list Daemon.services makes:

- signals: SIGTERM/SIGINT drain and exit (stop accepting API connections,
  finish in-flight requests, at most 10 s; kernel slices stay: vgpu.ko keeps
  enforcing), SIGHUP reloads the config file (what changed is logged; an
  invalid file is reported and the old config kept);
- gpu-health (vgpu.daemon.health): where the inventory runs on NVML, a
  worker thread waiting for XID events; a GPU's critical XID marks it
  faulty (``gpus``' ``fault``: the device plugin's devices of it Unhealthy);
- kernel: the connection to vgpu.ko, a loop that lives through module
  reloads (rmmod/insmod): connect to its netlink family (retrying with a
  back-off of 0.5 to 5 s while the module is absent), join the "events"
  multicast group (its own socket, read on its fd from the event loop,
  fanned out to API subscribers), reconcile the state file with the
  kernel's slices (re-creating the ones a reloaded module lacks; turning
  off the tracing of slices nobody traces: a vgpud that died mid-trace left
  it on), then watch the family until it is gone, drop the client and its
  sockets (ending every tracer: their group went with the family), and
  start again;
- the admin API (vgpu.daemon.api.Server) on the Unix socket;
- metrics (vgpu.daemon.metrics) when [metrics] listen is set;
- vgpufs (vgpu.daemon.fs), the containers' /dev and /proc/driver/nvidia views, a
  FUSE mount at [paths] fuse_mount served in this loop ("" disables it; a
  mount failure at start is logged and the daemon runs without it); when
  its FUSE connection ends under the running daemon (aborted, unmounted
  from outside) it is mounted again and the containers' views re-bound;
- the state-saver: a failed write of the state file (disk full, read-only)
  is retried with a back-off (SliceManager.save_pending), the operation
  that changed vgpu.ko having succeeded;
- the ticker: schedule windows (checked every second, applied when a minute
  boundary changes what is in force), a kernel dump every second while
  slices exist (the GPU time counters behind the achieved compute share),
  reconciliation, garbage collection and over-quota checks every [gc]
  interval (sooner after a slice-emptied event);
- the kernel schedulers: [scheduler] period (and layers) set on every
  sliced GPU when vgpu.ko appears and on reload.
- the usage history (vgpu.daemon.usage, [history]): every interval a
  kernel dump becomes one sample per slice and GPU, written to
  <state_dir>/history.db by its own thread (the loop never waits on the
  disk; a broken disk is a warning); the forecaster acts on the profiles
  whose forecast is "act" (docs/forecast.md).
- the device plugin (vgpu.daemon.plugin_supervisor): with [kubernetes]
  device_plugin = true, vgpu-device-plugin runs as a child, restarted with
  a back-off when it exits and when a reload changes its command line.

Kernel calls run in one worker thread (vgpu.daemon.kport.KernelPort), each bounded
by a deadline.  No per-slice tasks: the kernel is read with one dump.  A
``trace`` stream (docs/trace.md) is the one exception: each runs in its API
connection's nursery and reads its own "trace" socket from the event loop.

Readiness is reported to systemd with sd_notify (READY=1, RELOADING=1,
STOPPING=1) when $NOTIFY_SOCKET is set (deploy/systemd/vgpud.service: Type=notify).

    vgpud [--config FILE] [--log-level LEVEL]
    vgpud --check-config FILE

What it may call: every vgpu module of the daemon side; never vgpu.cli.ctl.
"""
from __future__ import annotations

import argparse
import datetime
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import trio

from vgpu import __version__
from vgpu.common.request import PKG_PARENT, hook_argv
from vgpu.daemon.api import Server
from vgpu.daemon.config import ConfigError, describe_changes, load_config
from vgpu.daemon.fs import ManagerSource, VgpuFs
from vgpu.daemon.health import XidWatch, record_fault
from vgpu.daemon.inventory import Inventory
from vgpu.daemon.kport import KernelPort
from vgpu.daemon.liveness import cgroup_path, live_pids
from vgpu.daemon.metrics import MetricsServer
from vgpu.daemon.ops import Ops
from vgpu.daemon.plugin_supervisor import dra_plugin_argv, plugin_argv, supervise
from vgpu.daemon.slices import SliceManager
from vgpu.daemon.state import StateError, StateStore
from vgpu.daemon.usage import Forecaster, HistoryService
from vgpu.vgpuko.netlink import VgpuError

DEFAULT_CONFIG = "/etc/vgpu/vgpud.toml"
LEVELS = ("debug", "info", "warning", "error")
# Seconds per container view re-bound after a restart.  It runs in the
# background (the API answers already) and a healthy re-bind takes well under
# a second, but it starts a Python process, which on a loaded node (or a
# debug kernel: `make test-debug` measured over 10 s) can take long.
REBIND_TIMEOUT = 30
REBIND_PARALLEL = 8
# The kernel connection: back-off while vgpu.ko is absent (doubling), and
# how often a connected daemon asks nlctrl whether the family is still the
# one it resolved (one cheap GETFAMILY round trip).
KERNEL_RETRY_MIN = 0.5
KERNEL_RETRY_MAX = 5.0
KERNEL_CHECK = 2.0
# vgpufs mounted again after its FUSE connection ended under a running
# daemon: the first attempt after FS_RETRY_MIN s, doubling while it fails
FS_RETRY_MIN = 0.5
FS_RETRY_MAX = 30.0
log = logging.getLogger("vgpud")


def sd_notify(msg: str) -> bool:
    """Send a datagram to systemd's $NOTIFY_SOCKET; False when there is none."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(path)
            s.sendall(msg.encode())
        return True
    except OSError as e:
        log.debug("sd_notify: %s", e)
        return False


def setup_logging(level: str) -> None:
    root = logging.getLogger()
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        fmt = "%(levelname)s %(name)s: %(message)s" if os.environ.get("JOURNAL_STREAM") else \
            "%(asctime)s %(levelname)s %(name)s: %(message)s"
        h.setFormatter(logging.Formatter(fmt))
        root.addHandler(h)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


@dataclass(frozen=True)
class Service:
    """One of vgpud's services, as Daemon.services lists them: ``run`` is
    started in the root nursery with ``await root.start(run)``, so it is
    ready when that returns, and runs until cancelled (a step that only
    prepares, the inventory's first poll, returns once started).  Exceptions
    of the types ``errors`` raised before it is ready are a failure to start
    that ``failed`` logs (and clears up after); then vgpud stops with status
    1 when the service is ``vital``, else runs on without it.  Any other
    exception stops the daemon, as any exception in the root nursery."""
    name: str
    run: Callable
    errors: tuple[type[BaseException], ...] = ()
    failed: Callable[[BaseException], None] | None = None
    vital: bool = False


class Daemon:
    def __init__(self, cfg, config_path: str, *, log_level_override: str | None = None):
        self.cfg = cfg
        self.config_path = config_path
        self.log_level_override = log_level_override
        self.kernel_ready = trio.Event()
        self.mgr = None
        self.server = None
        self.metrics = None
        self.fs = None
        self.exit_code = 0

    # ---------------------------------------------------------------- main
    async def run(self) -> int:
        store = StateStore(self.cfg.paths.state_dir)
        try:
            store.lock()
        except (StateError, OSError) as e:
            log.error("%s", e)
            return 1
        try:
            inv = Inventory()
            self.mgr = mgr = SliceManager(self.cfg, self.config_path, KernelPort(), store, inv)
            try:
                mgr.load_state()
            except (StateError, OSError) as e:
                log.error("state: %s", e)
                return 1
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
                async with trio.open_nursery() as root:
                    self.root = root
                    for s in self.services(sigs):
                        if not await self._start(root, s):
                            root.cancel_scope.cancel()
                            self.exit_code = 1
                            return 1
                    sd_notify(f"READY=1\nSTATUS=serving {len(mgr.records)} slice(s)\nMAINPID={os.getpid()}")
                    log.info("vgpud %d ready: socket %s, %d slice(s)", os.getpid(),
                             self.cfg.paths.socket, len(mgr.records))
        finally:
            if self.mgr is not None:
                if self.mgr.state_error is not None and not self.mgr.save_state():
                    log.error("state: exiting with %s behind vgpu.ko (%s); the next vgpud "
                              "adopts the slices it lacks", self.mgr.store.path,
                              self.mgr.state_error["message"])
                self.mgr.kport.close()
                if self.mgr.inventory is not None:
                    self.mgr.inventory.close()
            store.unlock()
        log.info("vgpud stopped (kernel slices left in place)")
        return self.exit_code

    # ------------------------------------------------------------ services
    def services(self, sigs) -> list[Service]:
        """vgpud's services, in the order they start in the root nursery
        (each ready before the next starts; the module doc says what each
        does).  The ones the config turns off are not listed."""
        cfg, mgr = self.cfg, self.mgr
        out = [
            Service("signals", partial(self._signals, sigs)),
            Service("inventory", self._inventory),
            # per-GPU health from NVML's XID events (vgpu.daemon.health)
            Service("gpu-health", self._health_service),
            Service("kernel", self._kernel_service),
            Service("api", self._api_service, (ValueError, OSError, RuntimeError),
                    self._api_failed, vital=True),
        ]
        if cfg.metrics_listen:
            out.append(Service("metrics", self._metrics_service, (OSError,), self._metrics_failed))
        if cfg.paths.fuse_mount:
            # RuntimeError: no pyfuse3, among others
            out.append(Service("vgpufs", self._fs_service, (OSError, RuntimeError),
                               self._fs_failed))
        out += [
            Service("ticker", self._ticker),
            Service("state-saver", mgr.save_pending),   # a failed state save, retried
            # [history]: a sample of every slice each interval, written by
            # its own thread (a broken disk is a warning, never a stop)
            Service("history", self._history_service),
            Service("forecaster", self._forecaster_service),
            # [kubernetes] device_plugin: vgpu-device-plugin as a child, followed
            # through reloads (vgpu.daemon.plugin_supervisor)
            Service("device-plugin", partial(supervise, self._device_plugin_argv)),
            # [kubernetes] dra_plugin: vgpu-dra-plugin the same way
            Service("dra-plugin", partial(supervise, self._dra_plugin_argv, name="DRA plugin")),
        ]
        return out

    @staticmethod
    async def _start(root, s: Service) -> bool:
        """Start ``s`` in ``root`` (ready when this returns); False when a
        vital service failed to start."""
        try:
            await root.start(s.run)
        except s.errors as e:
            s.failed(e)
            return not s.vital
        return True

    async def _inventory(self, *, task_status):
        """The GPUs, polled once, and logged, before the kernel service starts."""
        mgr = self.mgr
        await mgr.poll_inventory()
        log.info("%d GPU(s) by %s: %s", len(mgr.gpus), mgr.inventory.source,
                 ", ".join(f"{g.index} {g.name} {g.pci_bus_id}" for g in mgr.gpus) or "none")
        task_status.started()

    async def _health_service(self, *, task_status):
        """XidWatch in a worker thread for the life of the daemon, where the
        inventory runs on NVML (nothing to watch otherwise).  The thread
        cannot be cancelled; cancelling this stops it, and it returns
        within one wait (health.WAIT_MS), before NVML shuts down."""
        nvml = self.mgr.inventory.nvml if self.mgr.inventory is not None else None
        task_status.started()
        if nvml is None:
            return
        watch = XidWatch(nvml, partial(record_fault, self.mgr.gpu_faults))
        async with trio.open_nursery() as n:
            n.start_soon(trio.to_thread.run_sync, watch.run)
            try:
                await trio.sleep_forever()
            finally:
                watch.stop()

    async def _api_service(self, *, task_status):
        mgr = self.mgr
        # the usage history and the forecaster (vgpu.daemon.usage):
        # made before the API serves, so that its ops find them
        mgr.history = HistoryService(mgr)
        mgr.forecaster = Forecaster(mgr, mgr.history.models_for)
        self.server = Server(Ops(mgr), str(self.cfg.paths.socket),
                             group=self.cfg.api_group or None)
        await self.server.run(task_status=task_status)

    def _api_failed(self, e: BaseException) -> None:
        if isinstance(e, ValueError):
            log.error("api.group: %s", e)       # Server() refused the group
        else:
            log.error("API socket: %s", e)

    async def _metrics_service(self, *, task_status):
        self.metrics = MetricsServer(self.mgr, self.cfg.metrics_listen)
        await self.metrics.run(task_status=task_status)

    def _metrics_failed(self, e: BaseException) -> None:
        log.error("metrics on %s: %s (metrics disabled)", self.cfg.metrics_listen, e)
        self.metrics = None

    def _fs_failed(self, e: BaseException) -> None:
        """vgpufs could not be mounted at start: the daemon runs on without
        the container views."""
        log.error("vgpufs at %s: %s (container device views disabled)",
                  self.cfg.paths.fuse_mount, e)

    async def _history_service(self, *, task_status):
        await self.mgr.history.run(task_status=task_status)

    async def _forecaster_service(self, *, task_status):
        await self.mgr.forecaster.run(task_status=task_status)

    async def _fs_service(self, *, task_status):
        """vgpufs for the life of the daemon.  Started once it is mounted and
        the running containers' views are re-bound.  vgpufs runs in this
        process, so its FUSE connection can end while vgpud runs: aborted
        (/sys/fs/fuse/connections/N/abort), unmounted from outside, or its
        loop failed.  Then the mount point and the containers' bind mounts of
        it answer ENOTCONN, and new containers get no nodes.  Containers'
        open device fds and new opens of their bind-mounted nodes are not
        affected (they are vgpu.ko's; no FUSE request is made).  So the
        service logs it, mounts afresh (retrying with a back-off of
        FS_RETRY_MIN to FS_RETRY_MAX s while mounting fails), and re-binds
        the running containers' views, as a restarted vgpud does."""
        mp = str(self.cfg.paths.fuse_mount)
        delay = FS_RETRY_MIN
        started = False
        while True:
            fs = VgpuFs(ManagerSource(self.mgr), mp)
            began = trio.current_time()
            failed = None
            async with trio.open_nursery() as n:
                try:
                    await n.start(fs.run)
                except (OSError, RuntimeError) as e:
                    failed = e
                else:
                    self.fs = fs
                    if started:
                        log.warning("vgpufs mounted again at %s", mp)
                    if self.mgr.records:
                        await self._rebind_views()   # before READY: views are whole then
                    if not started:
                        started = True
                        task_status.started()
            if failed is not None and not started:
                raise failed                    # at start: logged by _start_fs, disabled
            if failed is not None:
                log.error("vgpufs: mounting at %s again: %s; retrying in %g s", mp, failed, delay)
            else:
                log.error("vgpufs at %s stopped serving: %s; the containers' open device "
                          "files are not affected; mounting it again", mp,
                          fs.ended or "its service ended")
            self.fs = None
            if trio.current_time() - began > FS_RETRY_MAX:
                delay = FS_RETRY_MIN            # it served a while: not a flapping mount
            await trio.sleep(delay)
            delay = min(delay * 2, FS_RETRY_MAX)

    async def _rebind_views(self):
        """Running containers keep bind mounts of the vgpufs mount that existed
        when they started; after a restart those answer ENOTCONN.  Re-bind
        each live container's /proc/driver/nvidia to the new mount (every
        container of a pod whose slice is the pod's) (the hook's
        --rebind does it in the container's mount namespace: a separate
        process, since setns needs a single-threaded caller), up to
        REBIND_PARALLEL at a time, each bounded by REBIND_TIMEOUT."""
        limiter = trio.CapacityLimiter(REBIND_PARALLEL)
        done = []

        async def one(cid: str, pid: int, rec):
            # what the hook checks pid against once it has pinned it with a
            # pidfd (the pid was read a moment ago and may be reused by then);
            # with neither, the hook refuses
            if rec.cgroup:
                ident = ["--cgroup", cgroup_path(rec.cgroup)]
            elif rec.pid_start is not None:
                ident = ["--pid-start", str(rec.pid_start)]
            else:
                ident = []
            cmd = hook_argv("--debug", "--fuse-mount", str(self.cfg.paths.fuse_mount),
                            *ident, "--rebind", str(pid), cid)
            async with limiter:
                with trio.move_on_after(REBIND_TIMEOUT) as scope:
                    r = await trio.run_process(cmd, capture_stderr=True, check=False,
                                               env=dict(os.environ, PYTHONPATH=PKG_PARENT))
            if scope.cancelled_caught:
                log.warning("vgpufs: re-binding the view of %s (pid %d) took over %d s; "
                            "skipped", cid, pid, REBIND_TIMEOUT)
            elif r.returncode == 0:
                done.append(cid)
                for line in r.stderr.decode(errors="replace").splitlines():
                    log.info("vgpufs: %s", line.removeprefix("vgpu-oci-hook: "))
            else:
                log.warning("vgpufs: could not re-bind the view of %s: %s", cid,
                            r.stderr.decode(errors="replace").strip())

        async with trio.open_nursery() as n:
            for cid, rec in list(self.mgr.records.items()):
                # a pod's shared slice: each of its containers has its own
                # mount namespace, so each gets its view re-bound
                for pid in live_pids(rec):
                    n.start_soon(one, cid, pid, rec)
        log.info("vgpufs: views of %d running container(s) checked", len(done))

    def _device_plugin_argv(self) -> list[str] | None:
        k = self.cfg.kubernetes
        if not k.device_plugin:
            return None
        return plugin_argv(self.cfg.paths.socket, k.kubelet_dir, k.profile,
                           k.oversubscribe_factor if self.cfg.node.oversubscribe_memory else None,
                           k.runtime_guard)

    def _dra_plugin_argv(self) -> list[str] | None:
        k = self.cfg.kubernetes
        if not k.dra_plugin:
            return None
        node = k.node_name or os.environ.get("NODE_NAME") or socket.gethostname()
        return dra_plugin_argv(self.cfg.paths.socket, node, str(k.kubelet_dir.parent),
                               str(k.cdi_dir), k.api_server, k.dra_admin_access)

    # ------------------------------------------------------------- signals
    async def _signals(self, sigs, *, task_status):
        root = self.root
        task_status.started()
        async for s in sigs:
            if s == signal.SIGHUP:
                await self.reload()
            else:
                log.info("%s: draining and exiting", signal.Signals(s).name)
                sd_notify("STOPPING=1")
                if self.server is not None:
                    self.server.stop()
                    await self.server.drain(10.0)
                root.cancel_scope.cancel()
                return

    async def reload(self) -> bool:
        sd_notify("RELOADING=1")
        try:
            try:
                new = await trio.to_thread.run_sync(load_config, self.config_path)
            except ConfigError as e:
                log.error("reload refused, keeping the running config:\n%s", e)
                return False
            changes = describe_changes(self.cfg, new)
            if not changes:
                log.info("reload: %s unchanged", self.config_path)
            for line in changes:
                log.info("reload: %s", line)
            self.cfg = new
            self.mgr.cfg = new
            if not self.log_level_override:
                setup_logging(new.log_level)
            n = await self.mgr.apply_all("reload")
            log.info("reload: applied to %d slice(s)", n)
            try:
                await self.mgr.apply_sched("reload")
            except trio.TooSlowError:
                log.warning("reload: the scheduler setting timed out")
            if self.mgr.forecaster is not None and (
                    self.mgr.overlay or any(f.mode != "off" for f in new.forecasts.values())):
                # at once, not at the next minute's round: a profile whose forecast is
                # now off gets its values back, one now recommend or act is planned
                try:
                    await self.mgr.forecaster.tick()
                except Exception as e:
                    log.warning("reload: forecast adjustments: %s", e)
            return True
        finally:
            sd_notify("READY=1")

    # -------------------------------------------------------------- kernel
    async def _kernel_service(self, *, task_status):
        """The connection to vgpu.ko, for as long as the daemon runs, through
        module reloads: connect (waiting, with a bounded back-off, while the
        module is absent), join the events group, reconcile, serve until the
        family is gone, drop the client and its sockets, and again.  Started
        once the first attempt is over (connected and reconciled, or the
        module found absent)."""
        kport = self.mgr.kport
        delay = KERNEL_RETRY_MIN
        waiting = False                 # "not loaded" logged for this absence
        again = False                   # connected before: this is a reconnection
        started = False

        def ready():
            nonlocal started
            if not started:
                started = True
                task_status.started()

        while True:
            kport.wake = trio.Event()
            if await kport.connect():
                delay = KERNEL_RETRY_MIN
                await self._kernel_connection(kport.kernel, again, ready)
                ready()
                waiting = False
                again = True
                continue
            if not waiting:
                log.warning("vgpu.ko is not loaded; waiting for it (retrying every %g to %g s; "
                            "the API answers 'unavailable')", KERNEL_RETRY_MIN, KERNEL_RETRY_MAX)
                waiting = True
            ready()
            # a caller that connected meanwhile (kport.wake) ends the wait
            with trio.move_on_after(delay):
                await kport.wake.wait()
            delay = min(delay * 2, KERNEL_RETRY_MAX)

    async def _kernel_connection(self, k, again: bool, ready) -> None:
        """One life of vgpu.ko: from a fresh client k until its family is gone.
        Its event socket lives in this nursery and is closed with it."""
        mgr = self.mgr
        es = None
        why = "unloaded"
        try:
            try:            # joined before reconciling: no event of the new module is missed
                es = k.subscribe()
            except OSError as e:
                if e.errno == errno.ENOENT:
                    log.warning("vgpu.ko has no events group: no kernel events")
                else:
                    log.error("vgpu.ko: joining the events group: %s (no kernel events)", e)
            async with trio.open_nursery() as conn:
                if es is not None:
                    async def events():
                        nonlocal why
                        try:
                            await self._read_events(es)
                        except OSError as e:
                            # a broken socket: start the connection again
                            # (reconciling is idempotent) rather than go deaf
                            why = f"its event socket failed: {e}"
                            conn.cancel_scope.cancel()
                    conn.start_soon(events)
                if again:
                    log.warning("vgpu.ko is back (family id %d): reconciling", k.family_id)
                try:
                    await mgr.apply_sched("start")
                except trio.TooSlowError:
                    log.warning("vgpu.ko: the scheduler setting timed out")
                counts = await mgr.reconcile(startup=True)
                log.info("vgpu.ko: reconciled: %s", ", ".join(f"{k_} {v}" for k_, v in counts.items()))
                if again:
                    log.warning("vgpu.ko reconnected: %d slice(s) re-created, %d adopted, "
                                "%d corrected, %d kept", counts["recreated"], counts["adopted"],
                                counts["corrected"], counts["kept"])
                self.kernel_ready.set()
                ready()
                await self._until_gone(k)
                conn.cancel_scope.cancel()
        finally:
            if es is not None:
                es.close()
        with trio.CancelScope(shield=True):
            await mgr.kport.drop(k)
            self.kernel_ready = trio.Event()
            n = await mgr.kernel_lost()
        log.warning("lost vgpu.ko (%s): its client and event socket dropped%s; "
                    "reconnecting (%d slice(s) to re-create)", why,
                    f", the tracers of {n} slice(s) ended" if n else "", len(mgr.records))

    async def _until_gone(self, k) -> None:
        """Return once vgpu.ko's family, as k resolved it, is gone.

        Asked of nlctrl (KernelPort.is_current: one GETFAMILY, compared by
        id) every KERNEL_CHECK seconds, and at once when a kernel call got
        ENOENT (KernelPort.wake).  Neither sign alone is enough: the events
        socket does not fail when the family goes (genl silently drops its
        group memberships, so it just goes quiet), and ENOENT is also a
        missing slice's answer; a reload between two checks still shows as
        a new family id."""
        kport = self.mgr.kport
        while True:
            kport.wake = trio.Event()
            with trio.move_on_after(KERNEL_CHECK):
                await kport.wake.wait()
            if kport.kernel is not k:
                return                  # dropped by someone else: start again
            try:
                if not await kport.is_current():
                    return
            except trio.TooSlowError:
                log.warning("vgpu.ko: nlctrl did not answer the family check in time")
            except OSError as e:
                log.warning("vgpu.ko: family check: %s", e)

    async def _read_events(self, es) -> None:
        """The events group -> SliceManager.kernel_event, read on its fd from
        the event loop; an overrun re-reads the slices."""
        while True:
            await trio.lowlevel.wait_readable(es.fileno())
            while True:
                try:
                    ev = es.get(0)
                except VgpuError as e:
                    log.warning("kernel events: %s; resynchronising", e)
                    try:
                        await self.mgr.kdump()
                    except trio.TooSlowError:
                        log.warning("kernel events: the resynchronising dump timed out")
                    break
                if ev is None:
                    break
                self.mgr.kernel_event(ev)

    # -------------------------------------------------------------- ticker
    async def _ticker(self, *, task_status):
        mgr = self.mgr
        task_status.started()
        minute = datetime.datetime.now().replace(second=0, microsecond=0)
        next_gc = trio.current_time() + min(self.cfg.gc_interval, 2.0)
        next_reconcile = trio.current_time() + 60.0       # the kernel service reconciled at start
        while True:
            with trio.move_on_after(1.0):
                await mgr.wake_gc.wait()
            now = datetime.datetime.now().replace(second=0, microsecond=0)
            if now != minute and self.cfg.schedule:
                minute = now
                try:
                    await mgr.apply_all("schedule")
                except Exception:
                    log.exception("schedule windows")
            minute = now
            if mgr.records and mgr.kport.kernel is not None:
                # one dump a second feeds the achieved-share meter (GPU time)
                try:
                    await mgr.kdump(max_age=0.9)
                except trio.TooSlowError:
                    log.warning("compute sampling: the kernel did not answer in time")
            if mgr.wake_gc.is_set() or trio.current_time() >= next_gc:
                mgr.wake_gc = trio.Event()
                next_gc = trio.current_time() + self.cfg.gc_interval
                try:
                    # drift (slices changed behind the daemon's back) costs a
                    # full dump: at most once a minute when idle
                    if mgr.kport.kernel is not None and trio.current_time() >= next_reconcile:
                        next_reconcile = trio.current_time() + max(60.0, self.cfg.gc_interval)
                        await mgr.reconcile()
                    await mgr.collect()
                    await mgr.check_over_quota()
                except trio.TooSlowError:
                    log.warning("GC tick: the kernel did not answer in time")
                except Exception:
                    log.exception("GC tick")


# ------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vgpud",
        description="The vgpu daemon: holds the desired GPU slices of this node, keeps vgpu.ko "
                    "in step with them, serves the admin API (vgpuctl) on a Unix socket and "
                    "Prometheus metrics over HTTP.",
        epilog="Signals: SIGHUP reloads the config file (an invalid file is refused and the "
               "running config kept); SIGTERM/SIGINT stop after finishing in-flight requests, "
               "leaving the kernel's slices in place.  See docs/config.md and docs/api.md.")
    p.add_argument("--config", "-c", metavar="FILE", default=None,
                   help=f"config file (default {DEFAULT_CONFIG}, or $VGPUD_CONFIG)")
    p.add_argument("--check-config", metavar="FILE", nargs="?", const="", default=None,
                   help="validate FILE (default: --config's) and exit: prints OK, or the errors "
                        "on stderr and exits 1")
    p.add_argument("--log-level", choices=LEVELS, default=None,
                   help="log level, overriding the config's [log] level")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = args.config or os.environ.get("VGPUD_CONFIG") or DEFAULT_CONFIG
    if args.check_config is not None:
        path = args.check_config or path
        try:
            load_config(path)
        except ConfigError as e:
            print(str(e), file=sys.stderr)
            return 1
        print(f"{path}: OK")
        return 0
    try:
        cfg = load_config(path)
    except ConfigError as e:
        print(f"vgpud: {e}", file=sys.stderr)
        return 1
    setup_logging(args.log_level or cfg.log_level)
    d = Daemon(cfg, path, log_level_override=args.log_level)
    try:
        return trio.run(d.run)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
