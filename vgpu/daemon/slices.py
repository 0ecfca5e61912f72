"""The slice manager of vgpud: the records of what was wanted, kept in step
with vgpu.ko.

Owns:
- the records (vgpu.daemon.records: one SliceRecord per container), saved
  after every change (its ``saver``), and slice-id
  allocation (lowest free id above the last one handed out, never one the
  kernel or the state already uses);
- what was last read from vgpu.ko (its slices) and the achieved-share
  meter (vgpu.daemon.compute) those reads feed;
- carrying out reconciliation (``reconcile``): vgpu.daemon.reconcile plans
  it (pure), this module makes the kernel calls.  Run at start, when vgpu.ko
  appears, and on every GC tick: idempotent, one dump;
- garbage collection (``collect``): a slice whose container is gone
  (vgpu.daemon.liveness) and that has no open files is deleted;
- schedule windows and reloads (``apply_all``): effective settings are
  recomputed when a window opens or closes or the config changes, and what
  changed is pushed to the kernel;
- over-quota detection: the driver's per-process FB (vgpu.daemon.inventory)
  against the slice's limit (its ``overquota`` acts on it as configured).

And the helpers it owns, one concern each: ``saver`` (vgpu.daemon.saver:
the state file, written atomically through vgpu.daemon.state, a failed save
retried in the background), ``events`` (vgpu.daemon.events: the API's event
subscribers and the fan-out, vgpu.ko's events by their API names),
``sched`` (vgpu.daemon.sched: each sliced GPU's scheduler period and
layers, and whether vgpu.ko has the SCHED commands: a module without them
gets no compute attributes at all, logged once), ``overquota``
(vgpu.daemon.overquota: log, event or kill) and ``tracing``
(vgpu.daemon.tracing: the slices' tracers).  The manager's own names for
them (``save_state``, ``state_error``, ``publish``, ``subscribe``,
``apply_sched``, ``sched_supported``, ...) hand on to the helper.

The API's operations on it are vgpu.daemon.ops.  What it may call: the
kernel through vgpu.daemon.kport (in a worker thread), the inventory (worker
thread), vgpu.daemon.state, vgpu.daemon.config.  It never opens a slice's
device nodes.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import logging
import os
import time
from typing import Any

import trio

from vgpu import __version__
from vgpu.abi import uapi
from vgpu.common import rdma, rdmanl
from vgpu.common.request import ALLOCATED_BY, ALLOCATED_LABEL
from vgpu.common.values import format_size
from vgpu.daemon import compute, policy, reconcile
from vgpu.daemon.config import SliceSpec
from vgpu.daemon.events import EventBus
from vgpu.daemon.health import Fault
from vgpu.daemon.inventory import GpuInfo, over_quota
from vgpu.daemon.kport import KernelPort, KernelUnavailable
from vgpu.daemon.liveness import CgroupError, cgroup_path, container_gone, gone, open_cgroup
from vgpu.daemon.overquota import OverQuota
from vgpu.daemon.records import NO_MEMORY, Effective, SliceRecord, State, from_doc
from vgpu.daemon.saver import StateSaver
from vgpu.daemon.sched import SchedControl
from vgpu.daemon.tracing import Tracing

log = logging.getLogger("vgpud.slices")

MAX_SLICE_ID = 0xFFFFFFFF


class NoFreeId(Exception):
    """Every slice id is taken (by the state or the kernel)."""


def effective(cfg, rec: SliceRecord, now: datetime.datetime | None = None) -> Effective:
    """The effective settings of a record (Config.effective: explicit values
    over its profile or the schedule window's over [defaults]) and the
    profile in force.  Raises ValueError for an unknown profile, or a GPU
    of the slice without a memory quota (none of its own, nor in its profile
    or [defaults])."""
    now = now if now is not None else datetime.datetime.now()
    spec = cfg.effective(rec.explicit, rec.profile, rec.labels, now)
    if spec.memory is None and rec.lacks_memory():
        raise ValueError(NO_MEMORY)
    return Effective(spec, cfg.window_profile(rec.labels, now) or rec.profile)


def package_version() -> str:
    return __version__


def _rdma_objects_of(want: dict[str, tuple[str, str | None]]) -> dict[str, dict | None]:
    """{container: objects by type} for SliceManager.refresh_rdma: ``want``
    maps a container to its slice's adapter and bound cgroup directory."""
    dumps: dict[str, dict | None] = {}
    out: dict[str, dict | None] = {}
    for c, (hca, cg) in want.items():
        if hca not in dumps:
            try:
                dumps[hca] = rdmanl.objects_by_pid(hca)
            except OSError as e:
                log.debug("RDMA netlink dump of %s: %s", hca, e)
                dumps[hca] = None
        by_pid = dumps[hca]
        if by_pid is None or not cg:
            out[c] = None
            continue
        pids = rdma.cgroup_pids(cg)
        total = dict.fromkeys(rdmanl.RES, 0)
        for pid, counts in by_pid.items():
            if pid in pids:
                for k, n in counts.items():
                    total[k] += n
        out[c] = total
    return out


class SliceManager:
    def __init__(self, cfg, config_path: str, kernel: KernelPort, store, inventory=None):
        self.cfg = cfg
        self.config_path = config_path
        self.kport = kernel
        self.store = store
        self.inventory = inventory
        self.records: dict[str, SliceRecord] = {}
        self.by_id: dict[int, str] = {}
        self.kslices: dict[int, Any] = {}       # last kernel dump: id -> kernel.Slice
        self.kdump_at = 0.0
        #: container -> the RDMA objects by type its slice's processes hold
        #: on its adapter (None: not readable), as of rdma_objects_at
        self.rdma_objects: dict[str, dict[str, int] | None] = {}
        self.rdma_objects_at = 0.0
        self.gpus: list[GpuInfo] = []           # the last poll
        #: GPU UUID -> its first critical XID (vgpu.daemon.health; set from
        #: the watching thread): reported by ``gpus``, Unhealthy in the plugin
        self.gpu_faults: dict[str, Fault] = {}
        self.lock = trio.Lock()
        self.started = time.time()
        self._next_id = 1
        self.wake_gc = trio.Event()
        self.inv_limiter = trio.CapacityLimiter(1)
        self.sysfs = "/sys"                     # the PCI tree and RDMA adapters (topology)
        self.meter = compute.ShareMeter()
        #: the API's event subscribers (vgpu.daemon.events)
        self.events = EventBus()
        #: the sliced GPUs' schedulers (vgpu.daemon.sched)
        self.sched = SchedControl(kernel, lambda: self.cfg, self._sliced_polled)
        #: what is done about a slice over quota (vgpu.daemon.overquota)
        self.overquota = OverQuota(self.events)
        self.tracing = Tracing(self)
        self.overlay: dict[str, float] = {}     # container -> compute raised by forecasts
        self.history = None                     # vgpu.daemon.usage.HistoryService
        self.forecaster = None                  # vgpu.daemon.usage.Forecaster
        #: the state file kept up to date with the records (vgpu.daemon.saver)
        self.saver = StateSaver(store, self.lock, self._state_doc)

    # ------------------------------------------------------------- state
    def load_state(self) -> None:
        state = from_doc(self.store.load() or {})
        self.records = state.records
        self.by_id = {r.slice_id: c for c, r in self.records.items()}
        self._next_id = state.next_id
        log.info("state: %d slice(s) wanted", len(self.records))

    def _state_doc(self, pending: SliceRecord | None = None) -> dict:
        records = self.records if pending is None else {**self.records, pending.container: pending}
        return State(records, self._next_id).to_doc()

    def save_state(self, pending: SliceRecord | None = None) -> bool:
        """Write the records to the state file (self.saver: a failure is
        marked in ``state_error`` and retried by ``save_pending``, never
        failed to the caller).  ``pending``: a record about to be created in
        the kernel, written ahead (Ops.create).  Returns whether the file
        was written."""
        return self.saver.save(pending)

    async def save_pending(self, *, task_status=trio.TASK_STATUS_IGNORED,
                           delays: tuple[float, float] = (1.0, 30.0)) -> None:
        """vgpud's state-saver task (StateSaver.run)."""
        await self.saver.run(task_status=task_status, delays=delays)

    @property
    def state_error(self) -> dict | None:
        """The last failed save of the state file ({"errno", "message",
        "path", "since"}), None when the file is up to date."""
        return self.saver.error

    def put(self, rec: SliceRecord) -> None:
        """Keep rec as its container's record (not yet saved)."""
        old = self.records.get(rec.container)
        if old is not None and old.slice_id != rec.slice_id:
            self.by_id.pop(old.slice_id, None)
        self.records[rec.container] = rec
        self.by_id[rec.slice_id] = rec.container

    def forget(self, c: str) -> SliceRecord | None:
        rec = self.records.pop(c, None)
        if rec is not None:
            self.by_id.pop(rec.slice_id, None)
            self.kslices.pop(rec.slice_id, None)
            self.tracing.gone(rec.slice_id)
        return rec

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

    def sliced_gpus(self) -> list[GpuInfo]:
        """The GPUs of the last poll that the config's [node] slices."""
        return [g for g in self.gpus if self.cfg.node.selects(g.index, g.uuid)]

    def gpu_by_ref(self, ref) -> GpuInfo | None:
        """The sliced GPU an API request names (index or UUID), or None."""
        for g in self.sliced_gpus():
            if ref == g.index or (isinstance(ref, str) and ref.lower() == g.uuid.lower()):
                return g
        return None

    def gpu_by_minor(self, minor: int) -> GpuInfo | None:
        for g in self.gpus:
            if g.minor == minor:
                return g
        return None

    # ------------------------------------------------------------ effective
    def eff(self, rec: SliceRecord, now=None, overlay: bool = True) -> Effective:
        """The record's effective settings (``effective``), with the
        forecaster's adjustment over them (``overlay``: a compute percentage
        by container, vgpu.daemon.usage.Forecaster; it only ever raises the
        configured value, and is never saved: a restart drops it)."""
        e = effective(self.cfg, rec, now)
        up = self.overlay.get(rec.container) if overlay else None
        if up is not None and e.spec.compute is not None and up > e.spec.compute:
            e = Effective(dataclasses.replace(e.spec, compute=up), e.profile)
        return e

    def in_force(self, rec: SliceRecord) -> Effective:
        """What the slice has: the settings last applied, else the ones it
        should have."""
        return rec.applied or self.eff(rec)

    def outside(self) -> dict[int, tuple[int, float]]:
        """Per GPU index, (memory, compute) the slices not made from the
        device plugin's per-container request hold (no
        request.ALLOCATED_LABEL): what the kubelet does not count.  Compute
        only where the policy reserves it (policy.reserves_compute)."""
        out: dict[int, tuple[int, float]] = {}
        for rec in self.records.values():
            if rec.labels.get(ALLOCATED_LABEL) == ALLOCATED_BY:
                continue
            e = self.in_force(rec)
            lim = rec.limits(e)
            pct = e.spec.compute if policy.reserves_compute(e.spec.policy) and \
                e.spec.compute is not None else 0.0
            for i, g in enumerate(rec.gpus):
                m, c = out.get(g.gpu, (0, 0.0))
                out[g.gpu] = (m + lim[i], c + pct)
        return out

    def views(self, exclude: str | None = None) -> dict[int, policy.GpuView]:
        views = {g.index: policy.GpuView(g.index, g.uuid, g.memory_total) for g in self.sliced_gpus()}
        for c, rec in self.records.items():
            if c == exclude:
                continue
            e = self.in_force(rec)
            lim = rec.limits(e)
            for i, g in enumerate(rec.gpus):
                v = views.get(g.gpu)
                if v is None:
                    continue
                v.memory_allocated += lim[i]
                if policy.reserves_compute(e.spec.policy) and e.spec.compute is not None:
                    v.compute_fixed += e.spec.compute
        return views

    # ------------------------------------------------------------ ids
    def alloc_id(self) -> int:
        used = set(self.by_id) | set(self.kslices)
        sid = self._next_id
        for _ in range(1 << 20):
            if sid < 1 or sid > MAX_SLICE_ID:
                sid = 1
            if sid not in used:
                self._next_id = sid + 1
                return sid
            sid += 1
        raise NoFreeId("no free slice id")

    # ------------------------------------------------------------ kernel
    async def kdump(self, max_age: float = 0.0) -> dict[int, Any]:
        if self.kport.kernel is None and not await self.kport.connect():
            return self.kslices
        if max_age and time.monotonic() - self.kdump_at < max_age:
            return self.kslices
        try:
            ks = await self.kport.call(lambda k: k.slices())
        except KernelUnavailable:
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

    def keep(self, ks) -> None:
        """Remember a slice as a kernel reply gave it (None: nothing to keep)."""
        if ks is not None:
            self.kslices[ks.id] = ks

    def sample(self, ks, now: float | None = None) -> None:
        """Feed a kernel reply's GPU_TIME_NS counters to the share meter."""
        if ks is None:
            return
        now = time.monotonic() if now is None else now
        for g in ks.gpus:
            self.meter.add((ks.id, g.index), g.gpu_time_ns, now)

    def uvm_policy(self) -> int:
        return uapi.VGPU_UVM_REFUSE if getattr(self.cfg.node, "uvm", "count") == "refuse" \
            else uapi.VGPU_UVM_COUNT

    async def slice_new(self, rec: SliceRecord, gpus, cgfd: int | None, compute: dict | None,
                        trace: bool = False, slice_id: int | None = None):
        """SLICE_NEW of a record (its id, or slice_id) with gpus [(minor,
        bytes, gpu id)]; returns (the kernel's Slice, the audit keywords
        sent).  Raises what the kernel port raises."""
        kw: dict[str, Any] = {} if cgfd is None else {"cgroup_fd": cgfd}
        if compute is not None:
            kw["compute"] = compute
        kw.update(self.audit_kw(rec))
        if trace:
            kw["trace"] = True
        sid = rec.slice_id if slice_id is None else slice_id
        ks = await self.kport.call(lambda k: k.slice_new(
            sid, gpus, name=rec.container, uvm_policy=self.uvm_policy(),
            max_channels=self.cfg.node.max_channels, **kw))
        return ks, kw

    # ------------------------------------------------------------ compute
    def kcompute(self, rec: SliceRecord, e: Effective) -> dict | None:
        """{container GPU index: kernel.Compute} of a record under effective
        settings e; None when compute is not sent to this kernel.  Raises
        ValueError for settings the kernel cannot express."""
        if not self.sched.compute_enabled:
            return None
        return compute.slice_compute(len(rec.gpus), e.spec)

    async def _sliced_polled(self) -> list[GpuInfo]:
        """The sliced GPUs, the inventory polled first if it has not been."""
        if not self.gpus:
            await self.poll_inventory()
        return self.sliced_gpus()

    # The scheduler's state and calls are self.sched's (SchedControl); these
    # names stay for the manager's callers.
    @property
    def sched_supported(self) -> bool | None:
        return self.sched.supported

    @property
    def compute_enabled(self) -> bool:
        return self.sched.compute_enabled

    @property
    def scheds(self) -> dict[int, Any]:
        return self.sched.scheds

    async def apply_sched(self, reason: str = "start") -> int:
        return await self.sched.apply(reason)

    async def ensure_sched(self) -> None:
        await self.sched.ensure()

    async def refresh_scheds(self, max_age: float = 0.0) -> dict[int, Any]:
        return await self.sched.refresh(max_age)

    def sched_view(self, minor: int | None) -> dict | None:
        return self.sched.view(minor)

    # ------------------------------------------------------------ audit
    def audit_wanted(self, rec: SliceRecord) -> bool:
        """A record's audit mode: what set-audit chose, else its profile's."""
        if rec.audit is not None:
            return rec.audit
        return self.cfg.audit_of(rec.profile).audit

    def audit_kw(self, rec: SliceRecord) -> dict:
        """slice_new's audit/allow for a record: only what differs from the
        kernel's defaults (off, no allow-list), so that a slice without
        either is created as before (a vgpu.ko older than audit mode refuses
        the attributes)."""
        kw: dict = {}
        if self.audit_wanted(rec):
            kw["audit"] = True
        spec = self.cfg.audit_of(rec.profile)
        if spec.allow:
            kw["allow"] = spec.pairs
        return kw

    def log_audit(self, rec: SliceRecord, kw: dict) -> None:
        if kw.get("audit"):
            log.warning("slice %d of %s is in audit mode: what the policy refuses is "
                        "forwarded at the caller's privilege and recorded (vgpuctl audit %s)",
                        rec.slice_id, rec.container, rec.container)
        if kw.get("allow"):
            log.info("slice %d of %s: allow-list of %d item(s) from %s", rec.slice_id,
                     rec.container, len(kw["allow"]), self.cfg.audit_of(rec.profile).allow_list)

    # ------------------------------------------------------------ events
    def subscribe(self, size: int = 256):
        """A new API event subscriber (self.events)."""
        return self.events.subscribe(size)

    def publish(self, type_: str, container: str | None, **kw) -> None:
        self.events.publish(type_, container, **kw)

    def kernel_event(self, ev) -> None:
        """An event of vgpu.ko, published to the API's subscribers; a slice
        that emptied wakes the collector."""
        if self.events.kernel(ev, self.by_id.get(ev.slice_id)) == "slice-emptied":
            self.wake_gc.set()

    # ------------------------------------------------------------ views
    def slice_view(self, rec: SliceRecord, ks=None) -> dict:
        e = self.in_force(rec)
        lim = rec.limits(e)
        gpus = []
        try:
            want = compute.kernel_compute(e.spec)
        except ValueError:
            want = None
        for i, g in enumerate(rec.gpus):
            ku = None
            if ks is not None:
                ku = next((x for x in ks.gpus if x.index == i), None)
            if ku is not None:
                comp = compute.kernel_view(ku, self.meter.share((ks.id, i)))
            elif want is not None:
                comp = compute.wanted_view(want)
            else:
                comp = None
            gpus.append({"index": i, "gpu": g.gpu, "uuid": g.uuid, "real_minor": g.real_minor,
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
                       "gpu_minors": [ks.base_minor + 2 + i for i in range(len(rec.gpus))]}
        return {"container": rec.container, "slice_id": rec.slice_id,
                "profile": e.profile, "labels": dict(rec.labels),
                "cgroup": rec.cgroup, "pid": rec.pid, "attached": rec.attached,
                "pids": list(ks.pids) if ks else [], "open_files": ks.open_files if ks else 0,
                "quarantined": bool(ks.quarantined) if ks else False,
                "audit": bool(ks.audit) if ks else self.audit_wanted(rec),
                "allow_count": ks.allow_count if ks else
                len(self.cfg.audit_of(rec.profile).allow),
                "created": rec.created, "in_kernel": ks is not None,
                "adopted": rec.adopted, "owner": rec.owner, "gpus": gpus,
                "compute": {"percent": e.spec.compute, "policy": e.spec.policy,
                            "priority": e.spec.priority},
                "devices": devices,
                "rdma": self.rdma_view(rec)}

    @staticmethod
    def bound_cgroup(rec: SliceRecord) -> str | None:
        """The cgroup v2 directory the slice is bound to: its container's,
        else the one it was attached to; None for neither."""
        cg = rec.cgroup or rec.attached
        return cgroup_path(cg) if cg else None

    def rdma_view(self, rec: SliceRecord) -> dict | None:
        """The slice's RDMA grant and, where its cgroup is known, what the
        rdma cgroup counts it holding of the adapter (rdma.current)."""
        if rec.rdma is None:
            return None
        cg = self.bound_cgroup(rec)
        return {**rec.rdma.to_json(), "used": rdma.read_usage(cg, rec.rdma.hca) if cg else None,
                "objects_by_type": self.rdma_objects.get(rec.container)}

    async def refresh_rdma(self, max_age: float = 0.0) -> None:
        """rdma_objects afresh (unless younger than ``max_age`` s): the
        objects by type (QPs, CQs, MRs, PDs) the processes of each RDMA
        slice's bound cgroup (and below) hold on its adapter, from one RDMA
        netlink dump per adapter, in a thread.  None for a slice bound to no
        cgroup, or whose adapter's dump fails (no ib_core: no NETLINK_RDMA)."""
        want = {c: (r.rdma.hca, self.bound_cgroup(r)) for c, r in self.records.items()
                if r.rdma is not None}
        if max_age and time.monotonic() - self.rdma_objects_at < max_age \
                and want.keys() == self.rdma_objects.keys():
            return
        self.rdma_objects = await trio.to_thread.run_sync(_rdma_objects_of, want) if want else {}
        self.rdma_objects_at = time.monotonic()

    # ------------------------------------------------------------ reconcile
    async def reconcile(self, *, startup: bool = False) -> dict:
        """Kernel (what exists) vs records (what was wanted): plan it
        (vgpu.daemon.reconcile) and carry the plan out.  Returns counts.
        ``startup``: the first run since vgpu.ko appeared, which also turns
        off the tracing of slices nobody here traces."""
        counts = {"adopted": 0, "recreated": 0, "corrected": 0, "kept": 0}
        if self.kport.kernel is None and not await self.kport.connect():
            return counts
        await self.ensure_sched()
        async with self.lock:
            ks_all = await self.kdump()
            if not self.gpus:
                await self.poll_inventory()
            plan = reconcile.plan(self.records, ks_all, effective=self.eff, compute=self.kcompute,
                          gpu_of_minor=self.gpu_by_minor,
                          attached_alive=lambda cg: not gone(cg),
                          traced=self.tracing.traced(), startup=startup, now=time.time())
            changed = await self._carry_out(plan, counts)
            if changed or counts["recreated"] or counts["corrected"]:
                self._next_id = max([self._next_id] + [s + 1 for s in self.by_id])
                self.save_state()
        return counts

    async def _carry_out(self, plan: reconcile.Plan, counts: dict) -> bool:
        """The plan's kernel calls, in the order the old reconcile made them:
        each wanted slice (recreated or corrected), then the adoptions, then
        the start-up's untracing.  Returns whether a record changed."""
        changed = False
        for c, why in plan.broken:
            log.error("slice of %s: %s", c, why)
        for a in plan.recreate:
            rec = self.records[a.container]
            if a.renumber:
                # the id is someone else's now: move this slice to a new id
                self.tracing.gone(rec.slice_id)
                self.by_id.pop(rec.slice_id, None)
                rec = rec.changed(slice_id=self.alloc_id())
                self.put(rec)
                changed = True
            cgfd = None
            try:
                cgfd = open_cgroup(a.bind)
                ks, kw = await self.slice_new(rec, a.gpus, cgfd, a.compute, trace=a.trace)
            except (OSError, KernelUnavailable) as ex:   # a cgroup gone: collect() removes it
                log.error("recreating slice %d of %s: %s", rec.slice_id, a.container, ex)
                continue
            finally:
                if cgfd is not None:
                    os.close(cgfd)
            self.keep(ks)
            counts["recreated"] += 1
            log.warning("slice %d of %s was missing in vgpu.ko: created again",
                        rec.slice_id, a.container)
            self.log_audit(rec, kw)
            changed |= self._applied(a.container, plan)
        for a in plan.correct:
            kw: dict[str, Any] = {}
            if a.limits is not None:
                kw["limits"] = a.limits
            if a.compute:
                kw["compute"] = a.compute
            try:
                self.keep(await self.kport.call(lambda k: k.slice_set(a.slice_id, **kw)))
                counts["corrected"] += 1
                if a.limits is not None:
                    log.warning("slice %d of %s: limits %s corrected to %s", a.slice_id,
                                a.container, a.had_limits, a.limits)
                if a.compute:
                    log.warning("slice %d of %s: compute %s corrected to %s", a.slice_id,
                                a.container, {i: a.had_compute[i] for i in a.compute},
                                {i: (x.policy, x.bp, x.priority) for i, x in a.compute.items()})
            except OSError as ex:
                log.error("correcting slice %d of %s: %s", a.slice_id, a.container, ex)
            changed |= self._applied(a.container, plan)
        for c in plan.kept:
            counts["kept"] += 1
            changed |= self._applied(c, plan)
        for a in plan.adopt:
            rec = a.record
            self.put(rec)
            counts["adopted"] += 1
            changed = True
            log.warning("adopted slice %d (%s) found in vgpu.ko", rec.slice_id, rec.container)
            # a slice without a compute setting (policy NONE) gets the
            # effective one now, like any slice
            if a.compute:
                try:
                    self.keep(await self.kport.call(
                        lambda k: k.slice_set(rec.slice_id, compute=a.compute)))
                except OSError as ex:
                    log.error("compute of adopted slice %d (%s): %s", rec.slice_id,
                              rec.container, ex)
        for sid in plan.untrace:
            await self.tracing.untrace_orphan(sid, self.kslices.get(sid))
        return changed

    def _applied(self, c: str, plan: reconcile.Plan) -> bool:
        """Note the plan's effective settings of c as applied; whether that
        changed its record."""
        rec, e = self.records[c], plan.effective[c]
        if rec.applied == e:
            return False
        self.records[c] = rec.changed(applied=e)
        return True

    # ------------------------------------------------------------ GC
    async def collect(self) -> list[str]:
        """Delete the slices of containers that are gone; returns them."""
        gone_now = [c for c, r in self.records.items() if container_gone(r)]
        if not gone_now:
            return []
        done = []
        async with self.lock:
            ks_all = await self.kdump()
            for c in gone_now:
                rec = self.records.get(c)
                if rec is None or not container_gone(rec):
                    continue
                ks = ks_all.get(rec.slice_id)
                if ks is not None and ks.open_files:
                    log.debug("container of %s gone but %d file(s) open", c, ks.open_files)
                    continue
                try:
                    await self.kport.call(lambda k: k.slice_del(rec.slice_id))
                except KernelUnavailable:
                    break
                except OSError as ex:
                    if ex.errno == errno.EBUSY:
                        continue
                    if ex.errno != errno.ENOENT:
                        log.error("collecting slice of %s: %s", c, ex)
                        continue
                self.forget(c)
                done.append(c)
                log.info("collected slice %d of %s: container gone", rec.slice_id, c)
                self.publish("slice-collected", c, slice_id=rec.slice_id)
            if done:
                self.save_state()
        return done

    async def kernel_lost(self) -> int:
        """vgpu.ko went away (its client is dropped already): forget what was
        read from it and end every tracer.  Returns the tracers' slices."""
        n = await self.tracing.kernel_lost()
        self.kslices = {}
        self.kdump_at = 0.0
        self.sched.lost()                       # the next module is probed again
        self.meter.forget(())
        return n

    # ------------------------------------------------------------ windows / reload
    async def apply_all(self, reason: str) -> int:
        """Recompute every slice's effective settings; push what changed."""
        n = 0
        await self.ensure_sched()
        async with self.lock:
            now = datetime.datetime.now()
            for c, rec in list(self.records.items()):
                try:
                    e = self.eff(rec, now)
                except ValueError as ex:
                    log.error("slice of %s under the new settings: %s", c, ex)
                    continue
                old = rec.applied
                if old == e:
                    continue
                lim = rec.limits(e)
                kw: dict[str, Any] = {}
                if old is None or rec.limits(old) != lim:
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
                        self.keep(await self.kport.call(lambda k: k.slice_set(rec.slice_id, **kw)))
                    except (OSError, KernelUnavailable) as ex:
                        log.error("applying %s to slice of %s: %s", reason, c, ex)
                        continue
                self.records[c] = rec.changed(applied=e)
                n += 1
                log.info("slice of %s: %s -> profile %s, %s, compute %s %s %s", c, reason,
                         e.profile, "/".join(format_size(b) for b in lim.values()), e.spec.compute,
                         e.spec.policy, e.spec.priority)
                self.publish("slice-changed", c, slice_id=rec.slice_id, reason=reason)
            if n:
                self.save_state()
        return n

    # ------------------------------------------------------------ over-quota
    async def check_over_quota(self) -> list[dict]:
        gpus = await self.poll_inventory(proc_memory=True)
        if not any(g.proc_memory for g in gpus):
            return []                       # nothing holds FB: no kernel dump needed
        ks_all = await self.kdump(max_age=1.0)
        pairs = [(c, ks_all[r.slice_id]) for c, r in self.records.items()
                 if ks_all.get(r.slice_id) is not None]
        found = over_quota(pairs, gpus)
        self.overquota.handle(found, getattr(self.cfg.node, "over_quota_action", "event"))
        return found


__all__ = ["SliceManager", "NoFreeId", "effective", "package_version", "SliceSpec",
           "CgroupError"]
