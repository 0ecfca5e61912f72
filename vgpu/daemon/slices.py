"""The slice manager of vgpud: desired state, kernel, reconciliation, GC.

Owns:
- the desired state: one record per container (slice id, GPUs, explicit
  quotas, profile, labels, cgroup or pid, owner: who made it through the
  hook, the only one a ``create`` hands it back to and whose ``delete``
  naming an owner may end it), saved atomically through
  vgpu.daemon.state.StateStore after every change;
- the API handler (``op_*`` methods, see vgpu.daemon.api) that creates, changes and
  deletes slices through vgpu.ko, after placement and admission
  (vgpu.daemon.policy);
- slice-id allocation (lowest free id above the last one handed out, never
  one the kernel or the state already uses);
- reconciliation (``reconcile``): the kernel's slices are the truth of what
  exists, the state file the truth of what was wanted.  A wanted slice the
  kernel lacks is created again (same id); a kernel slice nobody wanted is
  adopted (its name is the container, its limits become explicit quotas);
  limits that differ from the effective ones are set.  Run at start, when
  vgpu.ko appears, and on every GC tick: idempotent, one dump;
- garbage collection (``collect``): a slice whose container is gone (its
  cgroup v2 directory gone or its cgroup.procs empty; its pid dead or reused)
  and that has no open files is deleted;
- schedule windows and reloads (``apply_all``): effective settings are
  recomputed when a window opens/closes (checked once a minute) or the
  config changes, and pushed to the kernel;
- over-quota detection: the driver's per-process FB (vgpu.daemon.inventory) against
  the slice's limit, handled as configured (log, event, kill);
- the event fan-out to API subscribers;
- audit mode and allow-lists: a slice is created (and recreated) with the
  audit mode and allow-list of its own profile ([profiles.X] audit,
  allow_list; not a schedule window's: a window changes quotas, not what a
  slice may call), or the audit mode an operator set with ``set-audit``
  (kept in its record); ``audit`` reads its record (VGPU_CMD_AUDIT_GET),
  naming each item from vgpu.abi.nvnames;
- compute (vgpu.daemon.compute): each slice's effective compute/policy/priority is
  sent per GPU with SLICE_NEW/SLICE_SET when it is created and whenever it
  changes (and corrected by reconcile), each sliced GPU's scheduler period
  (and layers, if configured) with SCHED_SET at start and on reload
  (``apply_sched``); every kernel dump feeds the achieved-share meter
  (GPU_TIME_NS over a 5 s window).  A vgpu.ko without the SCHED commands
  (an older module) gets no compute attributes at all: logged once;
- tracing (docs/trace.md): the ``trace`` stream of a slice.  Tracers are
  counted per slice: the first turns the slice's VGPU_A_SLICE_TRACE on, the
  last one to leave turns it off, a slice recreated while traced is
  recreated traced, and the first reconcile after vgpu.ko appears turns off
  tracing nobody here asked for (a vgpud that died mid-trace).  When
  vgpu.ko goes away (``kernel_lost``) every tracer ends ("vgpu.ko
  unloaded") and its count is dropped.  Each tracer
  reads the "trace" group on a netlink socket of its own from the event
  loop and hands its slice's records to the API's writer through a bounded
  channel: a client too slow for it loses records, never the daemon's time.

What it may call: vgpu.daemon.kernel (through ``KernelPort``, in a worker thread),
vgpu.daemon.inventory (worker thread), vgpu.daemon.state, vgpu.daemon.policy, vgpu.daemon.config.  It
never opens a slice's device nodes.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from vgpu.daemon import compute as C
from vgpu.daemon import policy as P
from vgpu.abi import uapi as U
from vgpu.daemon.api import ApiError
from vgpu.values import format_size

log = logging.getLogger("vgpud.slices")

MAX_SLICE_ID = 0xFFFFFFFF
KERNEL_TIMEOUT = 5.0


# ------------------------------------------------------------------ kernel
class KernelPort:
    """vgpu.daemon.kernel.VgpuKernel driven from trio: every call runs in one worker
    thread (a limiter of 1), bounded by the client's socket timeout and a
    trio deadline.  ``kernel`` is None while vgpu.ko is not loaded.

    The daemon's kernel service (vgpu.daemon.main) owns the connection's life:
    it connects, watches the family with ``is_current`` and, when vgpu.ko
    went away, ``drop``s the client.  Any caller may still connect when
    ``kernel`` is None (an API request as the module comes back); ``wake``
    is set then, and when a call fails with ENOENT (what genl answers for a
    family that is gone), so that the service looks at once."""

    def __init__(self, factory=None, timeout: float = KERNEL_TIMEOUT):
        self.timeout = timeout
        self._factory = factory
        self.kernel = None
        self.limiter = trio.CapacityLimiter(1)
        self.wake = trio.Event()

    def _make(self):
        if self._factory is not None:
            return self._factory()
        from vgpu.daemon.kernel import VgpuKernel
        return VgpuKernel(timeout=self.timeout)

    async def connect(self) -> bool:
        from vgpu.daemon.kernel import VgpuNotLoaded
        if self.kernel is not None:
            return True
        try:
            k = await trio.to_thread.run_sync(self._make, limiter=self.limiter)
        except (VgpuNotLoaded, FileNotFoundError):
            return False
        except OSError as e:
            log.warning("vgpu.ko: %s", e)
            return False
        if self.kernel is not None:         # another task connected meanwhile
            k.close()
            return True
        self.kernel = k
        self.wake.set()
        return True

    async def call(self, _method: str, /, *args, **kw):
        if self.kernel is None and not await self.connect():
            raise ApiError("unavailable", "vgpu.ko is not loaded")
        fn = getattr(self.kernel, _method)
        try:
            with trio.fail_after(self.timeout * 2 + 1):
                return await trio.to_thread.run_sync(lambda: fn(*args, **kw), limiter=self.limiter)
        except OSError as e:
            if e.errno == errno.ENOENT:
                self.wake.set()             # a missing slice, or the whole family
            raise

    async def is_current(self) -> bool:
        """Whether ``kernel`` still talks to the loaded vgpu.ko (False when
        there is none).  TooSlowError when nlctrl does not answer in time."""
        k = self.kernel
        if k is None:
            return False
        with trio.fail_after(self.timeout * 2 + 1):
            return await trio.to_thread.run_sync(k.is_current, limiter=self.limiter)

    async def drop(self, k=None) -> None:
        """Forget the client (k: only if it is still that one) and close it
        in the worker thread, after the calls already queued on it."""
        k = self.kernel if k is None else k
        if k is None:
            return
        if self.kernel is k:
            self.kernel = None
        with trio.CancelScope(shield=True), trio.move_on_after(self.timeout * 2 + 1):
            await trio.to_thread.run_sync(k.close, limiter=self.limiter)

    def close(self):
        if self.kernel is not None:
            try:
                self.kernel.close()
            except Exception:
                pass
            self.kernel = None


def kernel_error(e: OSError) -> ApiError:
    from vgpu.daemon.kernel import VgpuNotLoaded
    if isinstance(e, VgpuNotLoaded):
        return ApiError("unavailable", str(e))
    name = errno.errorcode.get(e.errno or 0, str(e.errno))
    return ApiError("kernel", f"vgpu.ko refused: {name}: {e}", errno=name)


# ------------------------------------------------------------------ config
def effective(cfg, explicit: dict, profile: str | None, labels: dict, now=None) -> dict:
    """The effective memory/compute/priority/policy (+ the profile in force)
    of a slice: explicit values over its profile (or the schedule window's)
    over [defaults].  An adapter over Config.effective; raises ValueError
    (an unknown profile, no memory quota anywhere)."""
    from vgpu.daemon.config import SliceSpec
    now = now if now is not None else _now()
    labels = labels or {}
    spec = SliceSpec(**{k: explicit.get(k) for k in ("memory", "compute", "priority", "policy")})
    eff = cfg.effective(spec, profile, labels, now)
    out = {k: getattr(eff, k) for k in ("memory", "compute", "priority", "policy")}
    if out["memory"] is None:
        raise ValueError("no memory quota: the request gives none, nor does its profile or [defaults]")
    out["profile"] = cfg.window_profile(labels, now) or profile
    return out


def _now():
    import datetime
    return datetime.datetime.now()


def audit_view(container: str, slice_id: int, rec, allow_count: int | None) -> dict:
    """The ``audit`` op's result from a kernel.AuditRecord: kinds and
    verdicts by name, numbers as integers, NVIDIA's name of each item ("" if
    the policy tables do not name it), sorted by kind (escape, class,
    control, uvm) and number."""
    from vgpu.abi.nvnames import name as nvname
    entries = []
    for e in sorted(rec.entries, key=lambda e: (e.kind, e.number)):
        kind = U.AUDIT_KIND_NAMES.get(e.kind, f"kind-{e.kind}")
        entries.append({"kind": kind, "number": e.number, "name": nvname(kind, e.number),
                        "verdict": U.AUDIT_VERDICT_NAMES.get(e.verdict, f"verdict-{e.verdict}"),
                        "calls": e.calls, "refused": e.refused, "let_through": e.let_through})
    return {"container": container, "slice_id": slice_id, "audit": bool(rec.audit),
            "dropped": rec.dropped, "allow_count": allow_count, "entries": entries}


def owner_text(owner: dict | None) -> str:
    """An owner (api.v_owner's object) for a message."""
    if not owner:
        return "no container (made through the API, e.g. by vgpuctl)"
    return " ".join(f"{k}={v}" for k, v in owner.items())


# ------------------------------------------------------------------ liveness
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
    Raises ApiError bad-request when the directory cannot be opened."""
    if not cg:
        return None
    path = cgroup_path(cg)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise ApiError("bad-request", f"args.cgroup: {path}: {e.strerror}") from None


def container_gone(rec: dict) -> bool:
    """True when the container a record names is gone for sure."""
    cg = rec.get("cgroup")
    if cg:
        path = cgroup_path(cg)
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                return not f.read().strip()
        except FileNotFoundError:
            return True
        except OSError:
            return False
    pid = rec.get("pid")
    if pid:
        st = proc_start(pid)
        return st is None or (rec.get("pid_start") is not None and st != rec["pid_start"])
    return False


def live_pid(rec: dict) -> int | None:
    """A live process of the container a record names (the first of its
    cgroup's processes, or its recorded pid), or None."""
    cg = rec.get("cgroup")
    if cg:
        try:
            with open(os.path.join(cgroup_path(cg), "cgroup.procs")) as f:
                first = f.readline().strip()
            return int(first) if first.isdigit() else None
        except OSError:
            return None
    pid = rec.get("pid")
    if pid and not container_gone(rec):
        return pid
    return None


# ------------------------------------------------------------------ manager
@dataclass
class GpuRef:
    index: int           # host index (inventory)
    uuid: str
    minor: int
    gpu_id: int | None
    memory_total: int


#: trace records decoded per turn of the event loop (_trace_pump)
TRACE_BATCH = 64


class _WriterGone(Exception):
    """A tracer's connection went away while its records were handed over."""


@dataclass
class SliceTrace:
    """The API's tracers of one slice: vgpu.ko traces it while ``count`` >
    0; ``gone`` is set when the daemon deletes (or loses) the slice, or
    vgpu.ko goes away (``why`` says which to the tracers)."""
    count: int = 0
    gone: trio.Event = field(default_factory=trio.Event)
    why: str = "slice deleted"


class SliceManager:
    def __init__(self, cfg, config_path: str, kernel: KernelPort, store, inventory=None):
        self.cfg = cfg
        self.config_path = config_path
        self.kport = kernel
        self.store = store
        self.inventory = inventory
        self.records: dict[str, dict] = {}
        self.by_id: dict[int, str] = {}
        self.kslices: dict[int, Any] = {}       # last kernel dump: id -> kernel.Slice
        self.kdump_at = 0.0
        self.gpus: list = []                    # inventory.GpuInfo, last poll
        self.lock = trio.Lock()
        self.started = time.time()
        self._next_id = 1
        self._subs: set = set()
        self._reported: set = set()
        self.wake_gc = trio.Event()
        self.inv_limiter = trio.CapacityLimiter(1)
        self.meter = C.ShareMeter()
        self.scheds: dict[int, Any] = {}        # real minor -> kernel.SchedInfo, last read
        self.scheds_at = 0.0
        #: None until probed; False: vgpu.ko lacks SCHED_SET (and compute)
        self.sched_supported: bool | None = None
        self._layers_sent: int | None = None
        self.tracing: dict[int, SliceTrace] = {}  # slice id -> its tracers
        # held across the kernel call that turns a slice's tracing on or off:
        # a tracer leaving and one arriving must reach vgpu.ko in that order
        self.trace_lock = trio.Lock()

    # ------------------------------------------------------------- state
    def load_state(self) -> None:
        doc = self.store.load() or {}
        for c, rec in (doc.get("slices") or {}).items():
            if isinstance(rec, dict) and isinstance(rec.get("slice_id"), int):
                rec["container"] = c
                self.records[c] = rec
                self.by_id[rec["slice_id"]] = c
        self._next_id = int(doc.get("next_id", 1)) or 1
        log.info("state: %d slice(s) wanted", len(self.records))

    def save_state(self) -> None:
        self.store.save({"version": 1, "next_id": self._next_id, "slices": self.records})

    # ---------------------------------------------------------- inventory
    async def poll_inventory(self, proc_memory: bool = False) -> list:
        if self.inventory is None:
            return self.gpus
        try:
            with trio.fail_after(30):
                self.gpus = await trio.to_thread.run_sync(
                    lambda: self.inventory.poll(proc_memory), limiter=self.inv_limiter)
        except (OSError, trio.TooSlowError) as e:
            log.warning("GPU inventory: %s", e)
        except Exception as e:                     # RmError and friends
            log.warning("GPU inventory: %s", e)
        return self.gpus

    def sliced_gpus(self) -> list[GpuRef]:
        out = []
        for g in self.gpus:
            if not self.cfg.node.selects(g.index, g.uuid):
                continue
            out.append(GpuRef(g.index, g.uuid, g.minor, g.gpu_id, g.memory_total))
        return out

    def _gpu_by_ref(self, ref) -> GpuRef:
        for g in self.sliced_gpus():
            if ref == g.index or (isinstance(ref, str) and ref.lower() == g.uuid.lower()):
                return g
        raise ApiError("not-found", f"GPU {ref!r} is not one this node slices "
                       f"(known: {', '.join(str(g.index) for g in self.sliced_gpus()) or 'none'})")

    def _gpu_by_minor(self, minor: int) -> GpuRef | None:
        for g in self.gpus:
            if g.minor == minor:
                return GpuRef(g.index, g.uuid, g.minor, g.gpu_id, g.memory_total)
        return None

    # ------------------------------------------------------------ effective
    def eff(self, rec: dict, now=None) -> dict:
        return effective(self.cfg, rec.get("explicit", {}), rec.get("profile"), rec.get("labels", {}), now)

    @staticmethod
    def gpu_limits(rec: dict, eff: dict) -> dict[int, int]:
        """container GPU index -> bytes."""
        return {i: (g.get("memory") if g.get("memory") is not None else eff["memory"])
                for i, g in enumerate(rec["gpus"])}

    def views(self, exclude: str | None = None) -> dict[int, P.GpuView]:
        views = {g.index: P.GpuView(g.index, g.uuid, g.memory_total) for g in self.sliced_gpus()}
        for c, rec in self.records.items():
            if c == exclude:
                continue
            e = rec.get("applied") or self.eff(rec)
            lim = self.gpu_limits(rec, e)
            for i, g in enumerate(rec["gpus"]):
                v = views.get(g["gpu"])
                if v is None:
                    continue
                v.memory_allocated += lim[i]
                if P.reserves_compute(e.get("policy")) and e.get("compute") is not None:
                    v.compute_fixed += e["compute"]
        return views

    # ------------------------------------------------------------ ids
    def _alloc_id(self) -> int:
        used = set(self.by_id) | set(self.kslices)
        sid = self._next_id
        for _ in range(1 << 20):
            if sid < 1 or sid > MAX_SLICE_ID:
                sid = 1
            if sid not in used:
                self._next_id = sid + 1
                return sid
            sid += 1
        raise ApiError("internal", "no free slice id")

    # ------------------------------------------------------------ kernel
    async def kdump(self, max_age: float = 0.0) -> dict[int, Any]:
        if self.kport.kernel is None and not await self.kport.connect():
            return self.kslices
        if max_age and time.monotonic() - self.kdump_at < max_age:
            return self.kslices
        try:
            ks = await self.kport.call("slices")
        except ApiError:
            return self.kslices
        except OSError as e:
            log.warning("kernel dump: %s", e)
            return self.kslices
        self.kslices = {s.id: s for s in ks}
        self.kdump_at = time.monotonic()
        for s in ks:
            self.sample(s)
        self.meter.forget((s.id, g.index) for s in ks for g in s.gpus)
        return self.kslices

    def sample(self, ks, now: float | None = None) -> None:
        """Feed a kernel reply's GPU_TIME_NS counters to the share meter."""
        if ks is None:
            return
        now = time.monotonic() if now is None else now
        for g in ks.gpus:
            self.meter.add((ks.id, g.index), g.gpu_time_ns, now)

    # ------------------------------------------------------------ compute
    @property
    def compute_enabled(self) -> bool:
        """Whether compute attributes are sent (False on a vgpu.ko without
        the SCHED commands, which would refuse them)."""
        return self.sched_supported is not False

    def kcompute(self, rec: dict, e: dict) -> dict | None:
        """{container GPU index: kernel.Compute} of a record under effective
        settings e; None when compute is not sent to this kernel."""
        if not self.compute_enabled:
            return None
        return C.slice_compute(len(rec["gpus"]), e)

    def _sched_unsupported(self, ex: OSError) -> bool:
        """Whether a SCHED_* refusal means the module lacks the command: genl
        answers an unknown command EOPNOTSUPP (EINVAL on some kernels, with
        no extack; an EINVAL with a message is a refused value)."""
        if ex.errno == errno.EOPNOTSUPP or (ex.errno == errno.EINVAL
                                            and not getattr(ex, "extack", None)):
            if self.sched_supported is not False:
                log.warning("vgpu.ko has no scheduler commands (SCHED_SET: %s): an older "
                            "module; compute quotas are not enforced", ex)
            self.sched_supported = False
            return True
        return False

    async def apply_sched(self, reason: str = "start") -> int:
        """SCHED_SET on every sliced GPU: [scheduler] period, and layers when
        configured (back to the kernel's default, all, when the key is
        removed).  Returns the GPUs set; a kernel without the command is
        logged once and left alone."""
        if self.kport.kernel is None and not await self.kport.connect():
            return 0
        if not self.gpus:
            await self.poll_inventory()
        period_us = int(round(self.cfg.scheduler_period * 1e6))
        period_us = max(U.VGPU_SCHED_PERIOD_MIN_US, min(U.VGPU_SCHED_PERIOD_MAX_US, period_us))
        layers = C.layers_flags(getattr(self.cfg, "scheduler_layers", None))
        send_layers = layers
        if layers is None and self._layers_sent not in (None, U.VGPU_SCHED_L_ALL):
            send_layers = U.VGPU_SCHED_L_ALL
        n = 0
        for g in self.sliced_gpus():
            try:
                info = await self.kport.call("sched_set", g.minor, period_us=period_us,
                                             layers=send_layers)
            except ApiError:
                return n
            except OSError as ex:
                if self._sched_unsupported(ex):
                    return n
                log.error("scheduler of GPU %d (minor %d): %s", g.index, g.minor, ex)
                continue
            self.sched_supported = True
            if info is not None:
                self.scheds[info.real_minor] = info
            n += 1
        if n:
            self._layers_sent = send_layers if send_layers is not None else self._layers_sent
            log.info("scheduler (%s): period %d us, layers %s on %d GPU(s)", reason, period_us,
                     "+".join(C.layers_names(layers)) if layers is not None else "kernel default",
                     n)
        return n

    async def _ensure_sched(self) -> None:
        if self.sched_supported is None and self.kport.kernel is not None:
            await self.apply_sched("probe")

    async def refresh_scheds(self, max_age: float = 0.0) -> dict[int, Any]:
        """The kernel's schedulers (a SCHED_GET dump), cached max_age seconds."""
        if self.sched_supported is False or self.kport.kernel is None:
            return self.scheds
        if max_age and time.monotonic() - self.scheds_at < max_age:
            return self.scheds
        try:
            infos = await self.kport.call("scheds")
        except ApiError:
            return self.scheds
        except OSError as ex:
            if not self._sched_unsupported(ex):
                log.warning("scheduler dump: %s", ex)
            return self.scheds
        self.scheds = {i.real_minor: i for i in infos}
        self.scheds_at = time.monotonic()
        return self.scheds

    def sched_view(self, minor: int | None) -> dict | None:
        info = self.scheds.get(minor) if minor is not None else None
        if info is None:
            return None
        return {"period_us": info.period_us, "layers": C.layers_names(info.layers),
                "switches": info.switches, "cpu_s": info.cpu_ns / 1e9}

    # ------------------------------------------------------------ events
    def subscribe(self, size: int = 256):
        send, recv = trio.open_memory_channel(size)
        self._subs.add(send)
        return recv

    def publish(self, type_: str, container: str | None, **kw) -> None:
        ev = {"type": type_, "container": container, "time": time.time(), **kw}
        for s in list(self._subs):
            try:
                s.send_nowait(ev)
            except trio.WouldBlock:
                log.warning("event subscriber too slow: dropped")
                s.close()
                self._subs.discard(s)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subs.discard(s)

    # ------------------------------------------------------------ views
    def slice_view(self, rec: dict, ks=None) -> dict:
        e = rec.get("applied") or self.eff(rec)
        lim = self.gpu_limits(rec, e)
        gpus = []
        try:
            want = C.kernel_compute(e)
        except ValueError:
            want = None
        for i, g in enumerate(rec["gpus"]):
            ku = None
            if ks is not None:
                ku = next((x for x in ks.gpus if x.index == i), None)
            if ku is not None:
                comp = C.kernel_view(ku, self.meter.share((ks.id, i)))
            elif want is not None:
                comp = C.wanted_view(want)
            else:
                comp = None
            gpus.append({"index": i, "gpu": g["gpu"], "uuid": g.get("uuid"),
                         "real_minor": g.get("real_minor"),
                         "memory_limit": ku.mem_limit if ku else lim[i],
                         "memory_used": ku.mem_used if ku else 0,
                         "memory_peak": ku.mem_peak if ku else 0,
                         "allocs": ku.allocs if ku else 0,
                         "refusals": ku.refusals if ku else 0,
                         "compute": comp})
        devices = None
        if ks is not None and ks.major is not None:
            devices = {"major": ks.major, "ctl_minor": ks.base_minor,
                       "uvm_minor": ks.base_minor + 1,
                       "gpu_minors": [ks.base_minor + 2 + i for i in range(len(rec["gpus"]))]}
        return {"container": rec["container"], "slice_id": rec["slice_id"],
                "profile": e.get("profile"), "labels": rec.get("labels", {}),
                "cgroup": rec.get("cgroup"), "pid": rec.get("pid"),
                "attached": rec.get("attached"),
                "pids": list(ks.pids) if ks else [], "open_files": ks.open_files if ks else 0,
                "quarantined": bool(ks.quarantined) if ks else False,
                "audit": bool(ks.audit) if ks else self.audit_wanted(rec),
                "allow_count": ks.allow_count if ks else
                len(self.cfg.audit_of(rec.get("profile")).allow),
                "created": rec.get("created"), "in_kernel": ks is not None,
                "adopted": bool(rec.get("adopted")), "owner": rec.get("owner"), "gpus": gpus,
                "compute": {"percent": e.get("compute"), "policy": e.get("policy"),
                            "priority": e.get("priority")},
                "devices": devices}

    def _rec(self, container: str) -> dict:
        rec = self.records.get(container)
        if rec is None:
            raise ApiError("not-found", f"no slice for container {container!r}")
        return rec

    # ------------------------------------------------------------ API ops
    async def op_status(self, args) -> dict:
        return {"version": _version(), "pid": os.getpid(),
                "uptime_s": round(time.time() - self.started, 3), "slices": len(self.records),
                "gpus": len(self.sliced_gpus()), "kernel": {"loaded": self.kport.kernel is not None},
                "config": self.config_path, "inventory": getattr(self.inventory, "source", None),
                # what vgpu-oci-hook and vgpu-runtime ask before an image's
                # VGPU_* environment may count (config.Limits.allow_image_env)
                "image_env_profiles": self.cfg.image_env_profiles,
                "scheduler": {"supported": self.sched_supported,
                              "period_s": self.cfg.scheduler_period,
                              "layers": list(self.cfg.scheduler_layers)
                              if getattr(self.cfg, "scheduler_layers", None) else None}}

    async def op_gpus(self, args) -> dict:
        await self.poll_inventory()
        await self.refresh_scheds(max_age=1.0)
        views = self.views()
        out = []
        for g in self.gpus:
            v = views.get(g.index)
            d = g.as_dict()
            d.update({"memory_allocated": v.memory_allocated if v else 0,
                      "sliced": v is not None,
                      "scheduler": self.sched_view(g.minor),
                      "slices": sum(1 for r in self.records.values()
                                    if any(x["gpu"] == g.index for x in r["gpus"]))})
            out.append(d)
        return {"gpus": out}

    async def op_list(self, args) -> dict:
        ks = await self.kdump()
        return {"slices": [self.slice_view(r, ks.get(r["slice_id"]))
                           for r in sorted(self.records.values(), key=lambda r: r["slice_id"])]}

    async def op_show(self, args) -> dict:
        rec = self._rec(args["container"])
        ks = None
        try:
            ks = await self.kport.call("slice_get", rec["slice_id"])
            self.kslices[ks.id] = ks
            self.sample(ks)
        except ApiError:
            pass
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise kernel_error(e) from None
        return {"slice": self.slice_view(rec, ks)}

    async def op_attach(self, args) -> dict:
        """Bind an operator's slice (made without a cgroup: the CDI flow) to
        the cgroup v2 of the container that uses it now.  vgpu.ko opens an
        unbound slice for host administrators only, so the container's
        createRuntime hook attaches it first.  One container at a time: a
        slice attached to a cgroup that still has processes is refused with
        ``exists``; one whose cgroup emptied or went is re-attached.  A
        slice made for a container (with its cgroup) is never attached
        elsewhere.  The attachment does not make the slice collectable: it
        stays the operator's."""
        c, cg = args["container"], args["cgroup"]
        async with self.lock:
            rec = self._rec(c)
            if rec.get("cgroup") or rec.get("pid"):
                raise ApiError("bad-request", f"slice {c!r} was made for a container "
                               f"({rec.get('cgroup') or 'pid ' + str(rec.get('pid'))}); only a "
                               f"slice made without one is attached")
            cur = rec.get("attached")
            if cur and cgroup_path(cur) != cgroup_path(cg) and \
                    not container_gone({"cgroup": cur}):
                raise ApiError("exists", f"slice {c!r} is attached to {cgroup_path(cur)}, "
                               f"whose processes still run")
            fd = open_cgroup(cg)
            try:
                ks = await self.kport.call("slice_set", rec["slice_id"], cgroup_fd=fd)
            except OSError as e:
                if e.errno == errno.EBADF:
                    raise ApiError("bad-request", f"args.cgroup: {cgroup_path(cg)} is not a "
                                   f"cgroup v2 directory") from None
                raise kernel_error(e) from None
            finally:
                os.close(fd)
            if ks is not None:
                self.kslices[ks.id] = ks
            self.records[c] = {**rec, "attached": cg}
            self.save_state()
            log.info("slice %d of %s attached to %s", rec["slice_id"], c, cgroup_path(cg))
            return {"slice": self.slice_view(self.records[c], ks)}

    def _explicit(self, args) -> dict:
        return {k: args[k] for k in ("memory", "compute", "priority", "policy") if k in args}

    def _check_profile(self, name):
        if name is not None and name not in (getattr(self.cfg, "profiles", None) or {}):
            raise ApiError("bad-request", f"args.profile: {name!r} is not a profile of the config "
                           f"(known: {', '.join(self.cfg.profiles) or 'none'})")

    def _admit_profile(self, args) -> None:
        """The request against its profile's limits (Config.admit): what a
        pod's annotations, or an image's environment where a profile allows
        it, may ask is bounded by the operator's profile, before capacity."""
        from vgpu.daemon.config import SliceSpec
        spec = SliceSpec(**self._explicit(args))
        try:
            self.cfg.admit(spec, args.get("profile"), bool(args.get("from_image")))
        except ValueError as ex:
            raise ApiError("admission", str(ex)) from None

    async def op_create(self, args) -> dict:
        c = args["container"]
        self._check_profile(args.get("profile"))
        self._admit_profile(args)
        if self.kport.kernel is None and not await self.kport.connect():
            raise ApiError("unavailable", "vgpu.ko is not loaded")
        await self._ensure_sched()
        async with self.lock:
            if c in self.records:
                old = self.records[c]
                # The owner's own slice again (its hook wired at two stages,
                # or retried): that slice, as it is.  Anyone else's: refused,
                # never shared (docs/api.md, "Owners").
                if args.get("owner") is not None and old.get("owner") == args["owner"]:
                    return {"slice": self.slice_view(old, self.kslices.get(old["slice_id"])),
                            "reused": True}
                raise ApiError("exists", f"container {c!r} already has slice {old['slice_id']}"
                               f", owned by {owner_text(old.get('owner'))}",
                               owner=old.get("owner"))
            if not self.gpus:
                await self.poll_inventory()
            rec = {"container": c, "explicit": self._explicit(args), "profile": args.get("profile"),
                   "labels": args.get("labels", {}), "cgroup": args.get("cgroup"),
                   "pid": args.get("pid"), "created": time.time(), "gpus": [],
                   "owner": args.get("owner")}
            if rec["pid"]:
                rec["pid_start"] = proc_start(rec["pid"])
                if rec["pid_start"] is None:
                    raise ApiError("not-found", f"args.pid: process {rec['pid']} does not exist")
            try:
                e = self.eff(rec)
            except Exception as ex:                       # config refuses the combination
                raise ApiError("bad-request", str(ex)) from None
            over = bool(self.cfg.node.oversubscribe_memory)
            views = self.views()
            if "gpus" in args:
                refs = [self._gpu_by_ref(r) for r in args["gpus"]]
                for g in refs:
                    try:
                        P.admit(views[g.index], e["memory"], e["compute"], e["policy"], over)
                    except P.AdmissionError as ex:
                        raise ApiError("admission", str(ex)) from None
            else:
                try:
                    idx = P.place(list(views.values()), e["memory"], 1,
                                  getattr(self.cfg.node, "placement", "spread"), over,
                                  compute=e["compute"], policy=e["policy"])
                except P.AdmissionError as ex:
                    raise ApiError("admission", str(ex)) from None
                refs = [self._gpu_by_ref(i) for i in idx]
            rec["gpus"] = [{"gpu": g.index, "uuid": g.uuid, "real_minor": g.minor,
                            "gpu_id": g.gpu_id} for g in refs]
            try:
                comp = self.kcompute(rec, e)
            except ValueError as ex:
                raise ApiError("bad-request", str(ex)) from None
            cgfd = open_cgroup(rec["cgroup"])      # the slice's nodes open only from it
            kw = {} if cgfd is None else {"cgroup_fd": cgfd}
            if comp is not None:
                kw["compute"] = comp
            kw.update(self.audit_kw(rec))
            try:
                for _attempt in range(64):         # ids taken outside the daemon: EEXIST, next
                    sid = self._alloc_id()
                    try:
                        ks = await self.kport.call(
                            "slice_new", sid, [(g.minor, e["memory"], g.gpu_id) for g in refs],
                            name=c, uvm_policy=self._uvm_policy(),
                            max_channels=self.cfg.node.max_channels, **kw)
                        break
                    except ApiError:
                        raise
                    except OSError as ex:
                        if ex.errno == errno.EEXIST:
                            self.kslices[sid] = None
                            continue
                        if ex.errno == errno.EBADF and cgfd is not None:
                            raise ApiError("bad-request", f"args.cgroup: {cgroup_path(rec['cgroup'])} "
                                           "is not a cgroup v2 directory") from None
                        raise kernel_error(ex) from None
                else:
                    raise ApiError("kernel", "could not find a free slice id (EEXIST 64 times)")
            finally:
                if cgfd is not None:
                    os.close(cgfd)
            rec["slice_id"] = sid
            rec["applied"] = e
            self.records[c] = rec
            self.by_id[sid] = c
            self.kslices[sid] = ks
            self.save_state()
        log.info("created slice %d for %s on GPU(s) %s, %s", sid, c,
                 ",".join(str(g.index) for g in refs), format_size(e["memory"]))
        self._log_audit(rec, kw)
        self.publish("slice-created", c, slice_id=sid)
        return {"slice": self.slice_view(rec, ks)}

    # ------------------------------------------------------------ audit
    def audit_wanted(self, rec: dict) -> bool:
        """A record's audit mode: what set-audit chose, else its profile's."""
        if isinstance(rec.get("audit"), bool):
            return rec["audit"]
        return self.cfg.audit_of(rec.get("profile")).audit

    def audit_kw(self, rec: dict) -> dict:
        """slice_new's audit/allow for a record: only what differs from the
        kernel's defaults (off, no allow-list), so that a slice without
        either is created as before (a vgpu.ko older than audit mode refuses
        the attributes)."""
        kw: dict = {}
        if self.audit_wanted(rec):
            kw["audit"] = True
        spec = self.cfg.audit_of(rec.get("profile"))
        if spec.allow:
            kw["allow"] = spec.pairs
        return kw

    def _log_audit(self, rec: dict, kw: dict) -> None:
        if kw.get("audit"):
            log.warning("slice %d of %s is in audit mode: what the policy refuses is "
                        "forwarded at the caller's privilege and recorded (vgpuctl audit %s)",
                        rec["slice_id"], rec["container"], rec["container"])
        if kw.get("allow"):
            log.info("slice %d of %s: allow-list of %d item(s) from %s", rec["slice_id"],
                     rec["container"], len(kw["allow"]),
                     self.cfg.audit_of(rec.get("profile")).allow_list)

    @staticmethod
    def _feature_refused(ex: OSError, c: str, sid: int, feature: str, what: str,
                         since: str) -> ApiError:
        """A refusal of a command on slice sid as the API's error: no slice
        in the kernel, a module without the feature (one older than the
        uapi name ``since``), or any other refusal."""
        if ex.errno == errno.ENOENT:
            return ApiError("not-found", f"slice {sid} of {c!r} is not in vgpu.ko now "
                            f"(vgpud creates it again when it next reconciles)")
        if ex.errno == errno.EOPNOTSUPP or (ex.errno == errno.EINVAL
                                            and not getattr(ex, "extack", None)):
            # 95 is both; the kernel's genl answers "EOPNOTSUPP"
            name = "EOPNOTSUPP" if ex.errno == errno.EOPNOTSUPP else "EINVAL"
            return ApiError("kernel", f"vgpu.ko has no {feature} ({what}: {name}): a module "
                            f"older than {since}", errno=name)
        return kernel_error(ex)

    def _audit_refused(self, ex: OSError, c: str, sid: int, what: str) -> ApiError:
        return self._feature_refused(ex, c, sid, "audit mode", what, "VGPU_CMD_AUDIT_GET")

    async def op_audit(self, args) -> dict:
        """A slice's audit record (docs/api.md, "Audit")."""
        c = args["container"]
        rec = self._rec(c)
        sid = rec["slice_id"]
        try:
            ar = await self.kport.call("audit_get", sid)
        except ApiError:
            raise
        except OSError as ex:
            raise self._audit_refused(ex, c, sid, "AUDIT_GET") from None
        allow_count = None
        try:
            ks = await self.kport.call("slice_get", sid)
            self.kslices[ks.id] = ks
            allow_count = ks.allow_count
        except (OSError, ApiError):
            pass                            # gone since: the record is still the answer
        return audit_view(c, sid, ar, allow_count)

    async def op_set_audit(self, args) -> dict:
        """Switch a slice's audit mode on or off (kept in its record: a
        slice recreated later gets it again, whatever its profile says)."""
        c, on = args["container"], args["audit"]
        async with self.lock:
            rec = self._rec(c)
            sid = rec["slice_id"]
            try:
                ks = await self.kport.call("slice_set", sid, audit=on)
            except ApiError:
                raise
            except OSError as ex:
                raise self._audit_refused(ex, c, sid, "SLICE_SET audit") from None
            if ks is None:
                try:
                    ks = await self.kport.call("slice_get", sid)
                except OSError:
                    ks = None
            new = {**rec, "audit": on}
            self.records[c] = new
            if ks is not None:
                self.kslices[ks.id] = ks
            self.save_state()
        if on:
            log.warning("slice %d of %s: audit mode on: what the policy refuses is forwarded "
                        "at the caller's privilege and recorded", sid, c)
        else:
            log.info("slice %d of %s: audit mode off", sid, c)
        self.publish("slice-changed", c, slice_id=sid, audit=on)
        return {"slice": self.slice_view(new, ks)}

    # ------------------------------------------------------------ tracing
    async def trace(self, args, send, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The ``trace`` stream of a container's slice (docs/api.md,
        "Traces"), run with ``nursery.start``: it reports the trace file's
        header once vgpu.ko traces the slice, then puts {"record": ...} on
        ``send`` for each of the slice's calls until it is cancelled (the
        client left), or the slice is deleted: then {"end": true, "reason":
        "slice deleted"} (or "vgpu.ko unloaded"), and ``send`` is closed.  A refusal before the
        header raises ApiError."""
        c = args["container"]
        rec = self._rec(c)
        sid = rec["slice_id"]
        # joined before the slice is traced: its first record is not missed
        ts = await self._trace_stream()
        try:
            st, ks = await self._trace_join(c, sid)
            try:
                task_status.started(self._trace_header(rec, ks))
                await self._trace_pump(c, sid, ts, st, send)
            finally:
                await self._trace_leave(c, sid, st)
        finally:
            ts.close()

    async def _trace_stream(self):
        try:
            return await self.kport.call("trace_stream")
        except OSError as ex:
            if ex.errno == errno.ENOENT:            # the family has no such group
                raise ApiError("kernel", f"vgpu.ko has no tracing (no "
                               f"{U.VGPU_GENL_MCGRP_TRACE!r} multicast group): a module "
                               f"older than VGPU_CMD_TRACE", errno="ENOENT") from None
            raise kernel_error(ex) from None

    def _trace_refused(self, ex: OSError, c: str, sid: int) -> ApiError:
        return self._feature_refused(ex, c, sid, "tracing", "SLICE_SET trace",
                                     "VGPU_A_SLICE_TRACE")

    async def _trace_join(self, c: str, sid: int):
        """Count one more tracer of slice sid; the first turns its tracing
        on.  -> (its SliceTrace, the kernel's Slice if it was asked)."""
        ks = None
        async with self.trace_lock:
            st = self.tracing.get(sid)
            if st is None:
                st = SliceTrace()
                try:
                    ks = await self.kport.call("slice_set", sid, trace=True)
                except OSError as ex:
                    raise self._trace_refused(ex, c, sid) from None
                # no checkpoint from the kernel's answer to here: a
                # cancellation cannot leave the slice traced and uncounted
                self.tracing[sid] = st
                if ks is not None:
                    self.kslices[ks.id] = ks
                log.info("slice %d of %s: tracing on", sid, c)
            st.count += 1
        if self.by_id.get(sid) != c:
            st.gone.set()                           # deleted while we asked
        return st, ks

    async def _trace_leave(self, c: str, sid: int, st: SliceTrace) -> None:
        """One tracer fewer; the last one turns the slice's tracing off.
        Shielded: it runs when the tracer's connection is cancelled, and a
        slice must not stay traced because its client went away.  A tracer
        of a vgpu.ko that went away (``kernel_lost`` dropped its count)
        leaves nothing to turn off."""
        with trio.CancelScope(shield=True):
            async with self.trace_lock:
                if self.tracing.get(sid) is not st:
                    return
                st.count -= 1
                if st.count > 0:
                    return
                del self.tracing[sid]
                try:
                    ks = await self.kport.call("slice_set", sid, trace=False)
                except (ApiError, trio.TooSlowError) as ex:
                    log.error("slice %d of %s: turning tracing off: %s (the next start of "
                              "vgpud turns it off)", sid, c, ex or "timed out")
                    return
                except OSError as ex:
                    if ex.errno != errno.ENOENT:    # ENOENT: the slice went with its tracing
                        log.error("slice %d of %s: turning tracing off: %s", sid, c, ex)
                    return
                if ks is not None:
                    self.kslices[ks.id] = ks
                log.info("slice %d of %s: tracing off", sid, c)

    def _trace_header(self, rec: dict, ks) -> dict:
        """The trace file's header (docs/trace.md, vgpu.abi.trace.header_json):
        the slice's GPUs with their limits as vgpu.ko has them (as wanted
        when it was not asked), the driver release the inventory read."""
        import datetime
        import socket
        from vgpu.abi.trace import header_json
        ks = ks if ks is not None else self.kslices.get(rec["slice_id"])
        if ks is not None and ks.gpus:
            gpus = [{"index": g.index, "memory_limit": g.mem_limit} for g in ks.gpus]
        else:
            try:
                lim = self.gpu_limits(rec, rec.get("applied") or self.eff(rec))
            except (ValueError, KeyError):
                lim = {}
            gpus = [{"index": i, "memory_limit": b} for i, b in sorted(lim.items())]
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return header_json(rec["container"], rec["slice_id"], gpus,
                           release=getattr(self.inventory, "driver_version", "") or "",
                           started=started, host=socket.gethostname(), vgpu_version=_version())

    async def _trace_pump(self, c: str, sid: int, ts, st: SliceTrace, send) -> None:
        """The kernel's records of slice sid -> ``send``, until cancelled or
        the slice is gone.  The socket is read on the event loop as soon as
        it is readable: its buffer is what the kernel fills, and the
        channel (bounded) is what the client's pace empties; a full channel
        drops the record for this tracer only (its file shows the gap).
        At most TRACE_BATCH records are decoded per turn, with a checkpoint
        between turns, so a burst from vgpu.ko does not hold the event loop
        (the API and vgpufs) for as long as it lasts."""
        from vgpu.abi.trace import record_json
        sent = dropped = overruns = 0
        reason = None

        def take() -> bool:
            nonlocal sent, dropped, overruns
            batch = ts.ready(TRACE_BATCH)
            for r in batch:
                if r.slice_id != sid:
                    continue                        # another slice's tracer gets those
                try:
                    send.send_nowait({"record": record_json(r)})
                    sent += 1
                except trio.WouldBlock:
                    dropped += 1
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    raise _WriterGone from None
            if ts.overruns > overruns:
                if not overruns:
                    log.warning("trace of %s: the kernel's records came faster than vgpud "
                                "read them; some were lost (the file shows the gaps)", c)
                overruns = ts.overruns
            return len(batch) >= TRACE_BATCH      # more may be waiting

        try:
            async with send:
                async with trio.open_nursery() as n:
                    async def watch_gone():
                        await st.gone.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(watch_gone)
                    try:
                        while True:
                            await trio.lowlevel.wait_readable(ts.fileno())
                            while take():
                                await trio.sleep(0)
                    except _WriterGone:
                        pass
                    except OSError as ex:
                        reason = f"the trace socket failed: {ex}"
                    n.cancel_scope.cancel()
                if st.gone.is_set():
                    try:
                        while take():               # what the slice did before it went
                            pass
                    except (OSError, _WriterGone):
                        pass
                    reason = st.why
                if reason is not None:
                    try:
                        await send.send({"end": True, "reason": reason})
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
        finally:
            log.info("trace of %s (slice %d) ended%s: %d record(s) sent, %d dropped (client "
                     "too slow), %d socket overrun(s)", c, sid,
                     f" ({reason})" if reason else "", sent, dropped, overruns)

    def _uvm_policy(self):
        from vgpu.abi import uapi as U
        return U.VGPU_UVM_REFUSE if getattr(self.cfg.node, "uvm", "count") == "refuse" else U.VGPU_UVM_COUNT

    async def op_set_quota(self, args) -> dict:
        c = args["container"]
        self._check_profile(args.get("profile"))
        await self._ensure_sched()
        async with self.lock:
            rec = self._rec(c)
            new = dict(rec)
            new["explicit"] = {**rec.get("explicit", {}), **self._explicit(args)}
            new["gpus"] = [dict(g) for g in rec["gpus"]]
            if "profile" in args:
                new["profile"] = args["profile"]
            if "gpus" in args and "memory" in args:
                # memory for the named GPUs of the slice only
                new["explicit"].pop("memory", None)
                if "memory" in rec.get("explicit", {}):
                    new["explicit"]["memory"] = rec["explicit"]["memory"]
                targets = [self._gpu_by_ref(r).index for r in args["gpus"]]
                hit = False
                for g in new["gpus"]:
                    if g["gpu"] in targets:
                        g["memory"] = args["memory"]
                        hit = True
                if not hit:
                    raise ApiError("not-found", f"args.gpus: the slice of {c!r} is not on GPU(s) "
                                   f"{', '.join(map(str, args['gpus']))}")
            elif "memory" in args:
                for g in new["gpus"]:
                    g.pop("memory", None)
            try:
                e = self.eff(new)
            except Exception as ex:
                raise ApiError("bad-request", str(ex)) from None
            # The GPUs' totals include this slice's current quota, handed to
            # admit() as `replacing`: keeping or shrinking what it has is
            # never refused, even on a GPU overcommitted since.
            views = self.views()
            over = bool(self.cfg.node.oversubscribe_memory)
            lim = self.gpu_limits(new, e)
            old_e = rec.get("applied") or self.eff(rec)
            old_lim = self.gpu_limits(rec, old_e)
            for i, g in enumerate(new["gpus"]):
                v = views.get(g["gpu"])
                if v is not None:
                    try:
                        P.admit(v, lim[i], e["compute"], e["policy"], over,
                                replacing=(old_lim.get(i, 0), old_e.get("compute"),
                                           old_e.get("policy")))
                    except P.AdmissionError as ex:
                        raise ApiError("admission", str(ex)) from None
            try:
                comp = self.kcompute(new, e)
            except ValueError as ex:
                raise ApiError("bad-request", str(ex)) from None
            kw = {} if comp is None else {"compute": comp}
            try:
                ks = await self.kport.call("slice_set", rec["slice_id"], limits=lim, **kw)
            except ApiError:
                raise
            except OSError as ex:
                raise kernel_error(ex) from None
            if ks is None:
                try:
                    ks = await self.kport.call("slice_get", rec["slice_id"])
                except OSError:
                    ks = None
            new["applied"] = e
            self.records[c] = new
            if ks is not None:
                self.kslices[ks.id] = ks
            self.save_state()
        log.info("set quota of %s: %s; compute %s %s %s", c,
                 ", ".join(f"GPU {new['gpus'][i]['gpu']} {format_size(b)}" for i, b in lim.items()),
                 e.get("compute"), e.get("policy"), e.get("priority"))
        self.publish("slice-changed", c, slice_id=new["slice_id"])
        return {"slice": self.slice_view(new, ks)}

    async def op_delete(self, args) -> dict:
        c = args["container"]
        async with self.lock:
            rec = self._rec(c)
            # a delete that names an owner (the hook's) touches that owner's
            # slice only; one without (vgpuctl, an admin) deletes any
            if "owner" in args and rec.get("owner") != args["owner"]:
                raise ApiError("not-owner", f"the slice of {c!r} is owned by "
                               f"{owner_text(rec.get('owner'))}, not by "
                               f"{owner_text(args['owner'])}: left alone",
                               owner=rec.get("owner"))
            try:
                await self.kport.call("slice_del", rec["slice_id"], force=bool(args.get("force")))
            except ApiError:
                raise
            except OSError as ex:
                if ex.errno == errno.EBUSY:
                    raise ApiError("kernel", f"slice of {c!r} has open files (EBUSY); "
                                   f"use force to delete it anyway", errno="EBUSY") from None
                if ex.errno != errno.ENOENT:
                    raise kernel_error(ex) from None
            self._forget(c)
            self.save_state()
        log.info("deleted slice %d of %s", rec["slice_id"], c)
        self.publish("slice-deleted", c, slice_id=rec["slice_id"])
        return {}

    def _forget(self, c: str) -> None:
        rec = self.records.pop(c, None)
        if rec is not None:
            self.by_id.pop(rec["slice_id"], None)
            self.kslices.pop(rec["slice_id"], None)
            self._trace_gone(rec["slice_id"])

    async def kernel_lost(self) -> int:
        """vgpu.ko went away (its client is dropped already): forget what was
        read from it and end every tracer (their sockets' group is gone with
        the family: they would wait forever).  Their counts go with them, so
        the slices are recreated untraced.  Returns the tracers' slices."""
        async with self.trace_lock:             # not while one turns tracing on
            n = len(self.tracing)
            for st in self.tracing.values():
                st.why = "vgpu.ko unloaded"
                st.gone.set()
            self.tracing.clear()
        self.kslices = {}
        self.kdump_at = 0.0
        self.scheds = {}
        self.scheds_at = 0.0
        self.sched_supported = None             # the next module is probed again
        self._layers_sent = None
        self.meter.forget(())
        return n

    def _trace_gone(self, sid: int) -> None:
        st = self.tracing.get(sid)
        if st is not None:
            st.gone.set()

    # ------------------------------------------------------------ reconcile
    async def reconcile(self, *, startup: bool = False) -> dict:
        """Kernel (what exists) vs desired (what was wanted); returns counts.
        ``startup``: the first run since vgpu.ko appeared, which also turns
        off the tracing of slices nobody here traces."""
        counts = {"adopted": 0, "recreated": 0, "corrected": 0, "kept": 0}
        if self.kport.kernel is None and not await self.kport.connect():
            return counts
        await self._ensure_sched()
        async with self.lock:
            ks_all = await self.kdump()
            if not self.gpus:
                await self.poll_inventory()
            changed = False
            for c, rec in list(self.records.items()):
                ks = ks_all.get(rec["slice_id"])
                if ks is not None and ks.name not in ("", c):
                    # the id is someone else's now: move this slice to a new id
                    self._trace_gone(rec["slice_id"])
                    self.by_id.pop(rec["slice_id"], None)
                    rec["slice_id"] = self._alloc_id()
                    self.by_id[rec["slice_id"]] = c
                    ks = None
                    changed = True
                try:
                    e = self.eff(rec)
                except Exception as ex:
                    log.error("slice of %s: %s", c, ex)
                    continue
                lim = self.gpu_limits(rec, e)
                try:
                    comp = self.kcompute(rec, e)
                except ValueError as ex:
                    log.error("slice of %s: %s", c, ex)
                    comp = None
                if ks is None:
                    gl = [(g["real_minor"], lim[i], g.get("gpu_id")) for i, g in enumerate(rec["gpus"])]
                    cgfd = None
                    try:
                        bind = rec.get("cgroup")
                        if not bind and rec.get("attached") and \
                                not container_gone({"cgroup": rec["attached"]}):
                            bind = rec["attached"]      # an operator's slice, still in use
                        cgfd = open_cgroup(bind)
                        kw = {} if cgfd is None else {"cgroup_fd": cgfd}
                        if comp is not None:
                            kw["compute"] = comp
                        kw.update(self.audit_kw(rec))
                        if self.tracing.get(rec["slice_id"]):
                            kw["trace"] = True      # its tracers are still listening
                        ks = await self.kport.call("slice_new", rec["slice_id"], gl, name=c,
                                                   uvm_policy=self._uvm_policy(),
                                                   max_channels=self.cfg.node.max_channels, **kw)
                        self.kslices[ks.id] = ks
                        counts["recreated"] += 1
                        log.warning("slice %d of %s was missing in vgpu.ko: created again",
                                    rec["slice_id"], c)
                        self._log_audit(rec, kw)
                    except (OSError, ApiError) as ex:   # a cgroup gone: collect() removes it
                        log.error("recreating slice %d of %s: %s", rec["slice_id"], c, ex)
                        continue
                    finally:
                        if cgfd is not None:
                            os.close(cgfd)
                else:
                    have = {g.index: g.mem_limit for g in ks.gpus}
                    kw = {}
                    if have != lim:
                        kw["limits"] = lim
                    if comp is not None:
                        bad = {g.index: comp[g.index] for g in ks.gpus
                               if g.index in comp and C.compute_differs(g, comp[g.index])}
                        if bad:
                            kw["compute"] = bad
                    if kw:
                        try:
                            new = await self.kport.call("slice_set", rec["slice_id"], **kw)
                            if new is not None:
                                self.kslices[new.id] = new
                            counts["corrected"] += 1
                            if "limits" in kw:
                                log.warning("slice %d of %s: limits %s corrected to %s",
                                            rec["slice_id"], c, have, lim)
                            if "compute" in kw:
                                log.warning("slice %d of %s: compute %s corrected to %s",
                                            rec["slice_id"], c,
                                            {g.index: (g.compute_policy, g.compute_bp, g.priority)
                                             for g in ks.gpus if g.index in kw["compute"]},
                                            {i: (x.policy, x.bp, x.priority)
                                             for i, x in kw["compute"].items()})
                        except OSError as ex:
                            log.error("correcting slice %d of %s: %s", rec["slice_id"], c, ex)
                    else:
                        counts["kept"] += 1
                if rec.get("applied") != e:
                    rec["applied"] = e
                    changed = True
            for sid, ks in ks_all.items():
                if ks is None or sid in self.by_id:
                    continue
                name = ks.name or f"slice-{sid}"
                if name in self.records:
                    name = f"{name}-{sid}"
                gpus = []
                for g in ks.gpus:
                    ref = self._gpu_by_minor(g.real_minor) if g.real_minor is not None else None
                    gpus.append({"gpu": ref.index if ref else g.real_minor, "uuid": ref.uuid if ref else None,
                                 "real_minor": g.real_minor, "gpu_id": g.gpu_id, "memory": g.mem_limit})
                rec = {"container": name, "slice_id": sid, "explicit": {}, "profile": None,
                       "labels": {}, "cgroup": None, "pid": None, "created": time.time(),
                       "adopted": True, "gpus": gpus}
                if ks.audit:
                    rec["audit"] = True         # an audit mode set outside vgpud stays
                # its compute setting (if it has one) becomes explicit, as its limits
                g0 = ks.gpus[0] if ks.gpus else None
                if g0 is not None and g0.compute_policy in C.POLICY_NAMES and \
                        g0.compute_policy != U.VGPU_COMPUTE_NONE:
                    rec["explicit"] = {"compute": g0.compute_bp / 100,
                                       "policy": C.POLICY_NAMES[g0.compute_policy],
                                       "priority": C.PRIORITY_NAMES.get(g0.priority, "low")}
                try:
                    rec["applied"] = self.eff(rec)
                except Exception:
                    pass
                self.records[name] = rec
                self.by_id[sid] = name
                counts["adopted"] += 1
                changed = True
                log.warning("adopted slice %d (%s) found in vgpu.ko", sid, name)
                # a slice without a compute setting (policy NONE) gets the
                # effective one now, like any slice
                try:
                    comp = self.kcompute(rec, rec["applied"]) if "applied" in rec else None
                except ValueError:
                    comp = None
                if comp:
                    bad = {g.index: comp[g.index] for g in ks.gpus
                           if g.index in comp and C.compute_differs(g, comp[g.index])}
                    if bad:
                        try:
                            new = await self.kport.call("slice_set", sid, compute=bad)
                            if new is not None:
                                self.kslices[new.id] = new
                        except OSError as ex:
                            log.error("compute of adopted slice %d (%s): %s", sid, name, ex)
            if startup:
                await self._untrace_orphans(ks_all)
            if changed or counts["recreated"] or counts["corrected"]:
                self._next_id = max([self._next_id] + [s + 1 for s in self.by_id])
                self.save_state()
        return counts

    async def _untrace_orphans(self, ks_all: dict) -> None:
        """Turn off the tracing of slices that no tracer of this daemon
        wants: a vgpud that crashed mid-trace must not leave vgpu.ko
        copying every call of a slice forever."""
        for sid, ks in ks_all.items():
            if ks is None or not getattr(ks, "trace", False) or self.tracing.get(sid):
                continue
            try:
                new = await self.kport.call("slice_set", sid, trace=False)
            except (ApiError, trio.TooSlowError) as ex:
                log.error("turning off the tracing of slice %d: %s", sid, ex)
                continue
            except OSError as ex:
                if ex.errno != errno.ENOENT:
                    log.error("turning off the tracing of slice %d: %s", sid, ex)
                continue
            if new is not None:
                self.kslices[new.id] = new
            log.warning("slice %d (%s) was traced with no tracer (a vgpud that stopped "
                        "mid-trace?): tracing turned off", sid, ks.name or "no name")

    # ------------------------------------------------------------ GC
    async def collect(self) -> list[str]:
        """Delete the slices of containers that are gone; returns them."""
        gone = [c for c, r in self.records.items() if container_gone(r)]
        if not gone:
            return []
        done = []
        async with self.lock:
            ks_all = await self.kdump()
            for c in gone:
                rec = self.records.get(c)
                if rec is None or not container_gone(rec):
                    continue
                ks = ks_all.get(rec["slice_id"])
                if ks is not None and ks.open_files:
                    log.debug("container of %s gone but %d file(s) open", c, ks.open_files)
                    continue
                try:
                    await self.kport.call("slice_del", rec["slice_id"])
                except ApiError:
                    return done
                except OSError as ex:
                    if ex.errno == errno.EBUSY:
                        continue
                    if ex.errno != errno.ENOENT:
                        log.error("collecting slice of %s: %s", c, ex)
                        continue
                self._forget(c)
                done.append(c)
                log.info("collected slice %d of %s: container gone", rec["slice_id"], c)
                self.publish("slice-collected", c, slice_id=rec["slice_id"])
            if done:
                self.save_state()
        return done

    # ------------------------------------------------------------ windows / reload
    async def apply_all(self, reason: str) -> int:
        """Recompute every slice's effective settings; push what changed."""
        n = 0
        await self._ensure_sched()
        async with self.lock:
            now = _now()
            for c, rec in list(self.records.items()):
                try:
                    e = self.eff(rec, now)
                except Exception as ex:
                    log.error("slice of %s under the new settings: %s", c, ex)
                    continue
                old = rec.get("applied")
                if old == e:
                    continue
                lim = self.gpu_limits(rec, e)
                kw = {}
                if old is None or self.gpu_limits(rec, old) != lim:
                    kw["limits"] = lim
                try:
                    comp = self.kcompute(rec, e)
                    if comp is not None and (old is None or self.kcompute(rec, old) != comp):
                        kw["compute"] = comp
                except ValueError as ex:
                    log.error("slice of %s under the new settings: %s", c, ex)
                    continue
                if kw:
                    try:
                        ks = await self.kport.call("slice_set", rec["slice_id"], **kw)
                        if ks is not None:
                            self.kslices[ks.id] = ks
                    except (OSError, ApiError) as ex:
                        log.error("applying %s to slice of %s: %s", reason, c, ex)
                        continue
                rec["applied"] = e
                n += 1
                log.info("slice of %s: %s -> profile %s, %s, compute %s %s %s", c, reason,
                         e.get("profile"), format_size(e["memory"]), e.get("compute"),
                         e.get("policy"), e.get("priority"))
                self.publish("slice-changed", c, slice_id=rec["slice_id"], reason=reason)
            if n:
                self.save_state()
        return n

    # ------------------------------------------------------------ over-quota
    async def check_over_quota(self) -> list[dict]:
        from vgpu.daemon.inventory import over_quota
        gpus = await self.poll_inventory(proc_memory=True)
        if not any(g.proc_memory for g in gpus):
            return []                       # nothing holds FB: no kernel dump needed
        ks_all = await self.kdump(max_age=1.0)
        pairs = [(c, ks_all[r["slice_id"]]) for c, r in self.records.items()
                 if ks_all.get(r["slice_id"]) is not None]
        found = over_quota(pairs, gpus)
        keys = set()
        action = getattr(self.cfg.node, "over_quota_action", "event")
        for f in found:
            key = (f["container"], f["gpu"])
            keys.add(key)
            if key in self._reported and action != "kill":
                continue
            self._reported.add(key)
            log.warning("over quota: slice of %s holds %s on GPU %d by the driver's count, "
                        "limit %s (kernel counts %s); pids %s", f["container"],
                        format_size(f["driver_used"]), f["gpu"], format_size(f["limit"]),
                        format_size(f["kernel_used"]), f["pids"])
            if action in ("event", "kill"):
                self.publish("over-quota", f["container"], **{k: v for k, v in f.items() if k != "container"})
            if action == "kill":
                for pid in f["pids"]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        log.warning("killed pid %d of %s (over quota)", pid, f["container"])
                    except OSError:
                        pass
        self._reported &= keys
        return found

    # ------------------------------------------------------------ kernel events
    def kernel_event(self, ev) -> None:
        c = self.by_id.get(ev.slice_id)
        kw = {"slice_id": ev.slice_id}
        if ev.pid is not None:
            kw["pid"] = ev.pid
        if ev.gpu is not None:
            kw["gpu"] = ev.gpu
        if ev.size is not None:
            kw["size"] = ev.size
        t = U.EVENT_API_NAMES.get(ev.type, f"kernel-{ev.type}")
        if t == "alloc-refused":
            log.debug("allocation of %s refused in slice of %s (GPU %s)",
                     format_size(ev.size or 0), c, ev.gpu)
        if t == "slice-emptied":
            self.wake_gc.set()
        if t == "slice-quarantined":
            log.warning("slice of %s quarantined: pid %s unmapped a call's parameter page "
                        "while the driver ran; every open and call of the slice is refused "
                        "until it is deleted", c, ev.pid)
        self.publish(t, c, **kw)


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("vgpu")
    except Exception:
        return "0.1.0"
