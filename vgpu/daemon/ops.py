"""The admin API's operations (docs/api.md) on the slice manager.

vgpu.daemon.api reads and validates a request and hands it to ``Ops.run``:
one table (``Ops.table``) names the coroutine of each operation, and the
kernel port's errors become API errors here, once (``run``): vgpu.ko not
loaded -> ``unavailable``, a refusal -> ``kernel`` with its errno name.  An
operation words a refusal itself only where it means something to the caller
(a slice the kernel lost, open files, a module without a feature).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import replace
from typing import Awaitable, Callable

import trio

from vgpu.abi import uapi
from vgpu.abi.nvnames import name as nvname
from vgpu.daemon import policy
from vgpu.daemon.api import ApiError
from vgpu.daemon.config import SliceSpec
from vgpu.daemon.kport import KernelRefused, KernelUnavailable
from vgpu.daemon.liveness import CgroupError, cgroup_path, gone, open_cgroup, proc_start
from vgpu.daemon.records import NO_MEMORY, GpuSlot, SliceRecord
from vgpu.daemon.slices import NoFreeId, SliceManager, package_version
from vgpu.common import rdma, topology
from vgpu.common.rdma import RdmaGrant
from vgpu.common.values import format_size, quote

log = logging.getLogger("vgpud.ops")

_SPEC_ARGS = ("compute", "priority", "policy")


def kernel_error(e: KernelRefused) -> ApiError:
    name = errno.errorcode.get(e.errno or 0, str(e.errno))
    return ApiError("kernel", f"vgpu.ko refused: {name}: {e}", errno=name)


def feature_refused(ex: OSError, c: str, sid: int, feature: str, what: str,
                    since: str) -> ApiError:
    """A refusal of a command on slice sid as the API's error: no slice in
    the kernel, a module without the feature (one older than the uapi name
    ``since``), or any other refusal."""
    if ex.errno == errno.ENOENT:
        return ApiError("not-found", f"slice {sid} of {quote(c)} is not in vgpu.ko now "
                        f"(vgpud creates it again when it next reconciles)")
    if ex.errno == errno.EOPNOTSUPP or (ex.errno == errno.EINVAL
                                        and not getattr(ex, "extack", None)):
        # 95 is both; the kernel's genl answers "EOPNOTSUPP"
        name = "EOPNOTSUPP" if ex.errno == errno.EOPNOTSUPP else "EINVAL"
        return ApiError("kernel", f"vgpu.ko has no {feature} ({what}: {name}): a module "
                        f"older than {since}", errno=name)
    return kernel_error(ex)


def audit_view(container: str, slice_id: int, rec, allow_count: int | None) -> dict:
    """The ``audit`` op's result from a kernel.AuditRecord: kinds and
    verdicts by name, numbers as integers, NVIDIA's name of each item ("" if
    the policy tables do not name it), sorted by kind (escape, class,
    control, uvm) and number."""
    entries = []
    for e in sorted(rec.entries, key=lambda e: (e.kind, e.number)):
        kind = uapi.AUDIT_KIND_NAMES.get(e.kind, f"kind-{e.kind}")
        entries.append({"kind": kind, "number": e.number, "name": nvname(kind, e.number),
                        "verdict": uapi.AUDIT_VERDICT_NAMES.get(e.verdict, f"verdict-{e.verdict}"),
                        "calls": e.calls, "refused": e.refused, "let_through": e.let_through})
    return {"container": container, "slice_id": slice_id, "audit": bool(rec.audit),
            "dropped": rec.dropped, "allow_count": allow_count, "entries": entries}


def owner_text(owner: dict | None) -> str:
    """An owner (api.v_owner's object) for a message."""
    if not owner:
        return "no container (made through the API, e.g. by vgpuctl)"
    return " ".join(f"{k}={v}" for k, v in owner.items())


def explicit(args: dict) -> SliceSpec:
    """The compute, priority and policy a request names (validated by
    vgpu.daemon.api).  Its memory quota, an integer, is not in it: it goes
    to the record's one home for it as it is (SliceRecord.memory)."""
    return SliceSpec(**{k: args[k] for k in _SPEC_ARGS if k in args})


class Ops:
    """The API's handler: ``run`` an operation, ``subscribe`` to events,
    ``trace`` a slice."""

    def __init__(self, mgr: SliceManager):
        self.mgr = mgr
        self.table: dict[str, Callable[[dict], Awaitable[dict]]] = {
            "status": self.status, "gpus": self.gpus, "list": self.list, "show": self.show,
            "create": self.create, "set-quota": self.set_quota, "delete": self.delete,
            "plan": self.plan, "attach": self.attach, "audit": self.audit,
            "set-audit": self.set_audit,
            "history": self.history, "forecast": self.forecast,
        }

    async def run(self, op: str, args: dict) -> dict:
        """Operation op (one of ``table``) with validated args."""
        try:
            return await self.table[op](args)
        except KernelUnavailable as e:
            raise ApiError("unavailable", str(e)) from None
        except KernelRefused as e:
            raise kernel_error(e) from None
        except NoFreeId as e:
            raise ApiError("internal", str(e)) from None

    def subscribe(self, size: int = 256):
        return self.mgr.subscribe(size)

    # ------------------------------------------------------------ helpers
    def _rec(self, container: str) -> SliceRecord:
        rec = self.mgr.records.get(container)
        if rec is None:
            raise ApiError("not-found", f"no slice for container {quote(container)}")
        return rec

    def _gpu(self, ref):
        g = self.mgr.gpu_by_ref(ref)
        if g is None:
            known = ", ".join(str(g.index) for g in self.mgr.sliced_gpus()) or "none"
            raise ApiError("not-found", f"GPU {quote(ref)} is not one this node slices "
                           f"(known: {known})")
        return g

    def _check_profile(self, name) -> None:
        cfg = self.mgr.cfg
        if name is not None and name not in (getattr(cfg, "profiles", None) or {}):
            raise ApiError("bad-request", f"args.profile: {quote(name)} is not a profile of the config "
                           f"(known: {', '.join(cfg.profiles) or 'none'})")

    def _eff(self, rec: SliceRecord):
        try:
            return self.mgr.eff(rec)
        except ValueError as ex:                # the config refuses the combination
            raise ApiError("bad-request", str(ex)) from None

    def _kcompute(self, rec: SliceRecord, e):
        try:
            return self.mgr.kcompute(rec, e)
        except ValueError as ex:
            raise ApiError("bad-request", str(ex)) from None

    async def _show(self, rec: SliceRecord, ks=None) -> dict:
        """A slice's view after a change; the kernel asked again when the
        change's reply carried no slice."""
        if ks is None:
            try:
                ks = await self.mgr.kport.call(lambda k: k.slice_get(rec.slice_id))
            except (KernelRefused, KernelUnavailable):
                ks = None
        self.mgr.keep(ks)
        return {"slice": self.mgr.slice_view(rec, ks)}

    # ------------------------------------------------------------ reads
    async def status(self, args) -> dict:
        mgr, cfg = self.mgr, self.mgr.cfg
        return {"version": package_version(), "pid": os.getpid(),
                "uptime_s": round(time.time() - mgr.started, 3), "slices": len(mgr.records),
                "gpus": len(mgr.sliced_gpus()), "kernel": {"loaded": mgr.kport.kernel is not None},
                # saved: false while the state file lags what vgpu.ko has
                # (SliceManager.save_state: the disk is full or read-only)
                "state": {"path": str(mgr.store.path), "saved": mgr.state_error is None,
                          "error": dict(mgr.state_error) if mgr.state_error else None},
                "config": mgr.config_path, "inventory": getattr(mgr.inventory, "source", None),
                # the NVIDIA driver's version (vgpuctl cdi generate and
                # vgpu-runtime pick its user-space files by it)
                "driver_version": getattr(mgr.inventory, "driver_version", "") or None,
                # what vgpu-oci-hook and vgpu-runtime ask before an image's
                # VGPU_* environment may count (config.Limits.allow_image_env)
                "image_env_profiles": cfg.image_env_profiles,
                # what vgpu-device-plugin advertises and prefers (vgpu.k8s)
                "node": {"placement": cfg.node.placement,
                         "oversubscribe_memory": cfg.node.oversubscribe_memory},
                # the usage history's writer (docs/history.md): state, counts, errors
                "history": mgr.history.stats() if mgr.history is not None else None,
                "forecast": {"adjusted": mgr.forecaster.adjustments()
                             if mgr.forecaster is not None else [],
                             "held": sorted(mgr.forecaster.held)
                             if mgr.forecaster is not None else []},
                "scheduler": {"supported": mgr.sched_supported,
                              "period_s": cfg.scheduler_period,
                              "layers": list(cfg.scheduler_layers)
                              if getattr(cfg, "scheduler_layers", None) else None}}

    def _history(self):
        h = self.mgr.history
        if h is None:
            raise ApiError("unavailable", "history is not running in this vgpud")
        return h

    async def history(self, args) -> dict:
        """The usage history as histview's document (docs/history.md)."""
        return await self._history().query(args)

    async def forecast(self, args) -> dict:
        """A label's forecast and recommended quotas (docs/forecast.md);
        ``reset``: the operator's undo of the forecaster's adjustments of the
        label (held until ``resume`` or a restart)."""
        h = self._history()
        fc = self.mgr.forecaster
        if args.get("reset") and args.get("resume"):
            raise ApiError("bad-request", "args: give reset or resume, not both")
        if args.get("reset") or args.get("resume"):
            if fc is None:
                raise ApiError("unavailable", "the forecaster is not running in this vgpud")
            if args.get("reset"):
                restored = await fc.reset(args["label"])
                return {"label": args["label"], "restored": restored, "held": True}
            fc.resume(args["label"])
            return {"label": args["label"], "restored": [], "held": False}
        return await h.forecast(args)

    async def gpus(self, args) -> dict:
        mgr = self.mgr
        await mgr.poll_inventory()
        await mgr.refresh_scheds(max_age=1.0)
        views = mgr.views()
        outside = mgr.outside()
        # each GPU's closest RDMA adapter, as nvidia-smi topo would rank
        # it (vgpu.common.topology: sysfs reads, off the event loop)
        pairs = await trio.to_thread.run_sync(
            lambda: topology.pair([(g.index, g.pci_bus_id) for g in mgr.gpus],
                                  topology.hcas(mgr.sysfs), mgr.sysfs))
        out = []
        for g in mgr.gpus:
            v = views.get(g.index)
            d = g.as_dict()
            mo, co = outside.get(g.index, (0, 0.0))
            fault = mgr.gpu_faults.get(g.uuid)
            d.update({"memory_allocated": v.memory_allocated if v else 0,
                      "memory_outside": mo, "compute_outside": co,
                      "fault": fault.as_dict() if fault else None,
                      "sliced": v is not None,
                      "hca": ({"name": pairs[g.index][0], "link": pairs[g.index][1]}
                              if g.index in pairs else None),
                      "scheduler": mgr.sched_view(g.minor),
                      "slices": sum(1 for r in mgr.records.values()
                                    if any(x.gpu == g.index for x in r.gpus))})
            out.append(d)
        return {"gpus": out}

    async def list(self, args) -> dict:
        ks = await self.mgr.kdump()
        await self.mgr.refresh_rdma(max_age=1.0)
        return {"slices": [self.mgr.slice_view(r, ks.get(r.slice_id))
                           for r in sorted(self.mgr.records.values(), key=lambda r: r.slice_id)]}

    async def show(self, args) -> dict:
        mgr = self.mgr
        rec = self._rec(args["container"])
        ks = None
        try:
            ks = await mgr.kport.call(lambda k: k.slice_get(rec.slice_id))
            mgr.keep(ks)
            mgr.sample(ks)
        except KernelUnavailable:
            pass
        except KernelRefused as e:
            if e.errno != errno.ENOENT:
                raise
        if rec.rdma is not None:
            await mgr.refresh_rdma()
        return {"slice": mgr.slice_view(rec, ks)}

    # ------------------------------------------------------------ create
    def _admit_profile(self, args) -> None:
        """The request against [kubernetes] pod_requests (Config.admit_pod:
        a Kubernetes container's quotas only from the kubelet's allocation)
        and its profile's limits (Config.admit): what a pod's annotations,
        or an image's environment where a profile allows it, may ask is
        bounded by the operator, before capacity."""
        spec = replace(explicit(args), memory=args.get("memory"))
        try:
            self.mgr.cfg.admit_pod(spec, args.get("profile"), args.get("labels") or {})
            self.mgr.cfg.admit(spec, args.get("profile"), bool(args.get("from_image")))
            if "rdma" in args:
                self.mgr.cfg.admit_rdma(args.get("profile"), args.get("labels") or {},
                                        bool(args.get("from_image")))
        except ValueError as ex:
            raise ApiError("admission", str(ex)) from None

    def _new_record(self, c: str, args) -> SliceRecord:
        return SliceRecord(container=c, slice_id=0, explicit=explicit(args),
                           profile=args.get("profile"), labels=args.get("labels", {}),
                           cgroup=args.get("cgroup"), pid=args.get("pid"),
                           created=time.time(), owner=args.get("owner"))

    def _place(self, rec: SliceRecord, args):
        """(the GPUs a new slice goes on, its effective settings, its
        memory): the ones ``gpus`` names, each admitted, else the
        configured placement's.  Under the manager's lock."""
        mgr = self.mgr
        e = self._eff(rec)
        mem = args.get("memory", e.spec.memory)
        if mem is None:
            raise ApiError("bad-request", NO_MEMORY)
        over = bool(mgr.cfg.node.oversubscribe_memory)
        views = mgr.views()
        try:
            if "gpus" in args:
                refs = [self._gpu(r) for r in args["gpus"]]
                for g in refs:
                    policy.admit(views[g.index], mem, e.spec.compute, e.spec.policy, over)
            else:
                idx = policy.place(list(views.values()), mem, 1,
                                   getattr(mgr.cfg.node, "placement", "spread"), over,
                                   compute=e.spec.compute, policy=e.spec.policy)
                refs = [self._gpu(i) for i in idx]
        except policy.AdmissionError as ex:
            raise ApiError("admission", str(ex)) from None
        return refs, e, mem

    async def plan(self, args) -> dict:
        """Where ``create`` with these args would put the slice, making
        nothing (docs/api.md, plan): its GPUs and, with ``rdma``, the
        adapter and its nodes as create would grant them.  vgpu-runtime
        asks it to write config.json's device rules before the slice
        exists (docs/rdma.md, "Through vgpu-runtime").  A container that
        has a slice already (a pod's, made by a sibling) gets that slice's
        GPUs and grant (``exists``: true; another owner's, where ``owner``
        is given: ``exists`` error, as create).  Admission is create's;
        capacity may change before create, which then decides."""
        mgr = self.mgr
        c = args["container"]
        self._check_profile(args.get("profile"))
        self._admit_profile(args)
        async with mgr.lock:
            old = mgr.records.get(c)
            if old is not None:
                if args.get("owner") is not None and old.owner != args["owner"]:
                    raise ApiError("exists", f"container {quote(c)} already has slice "
                                   f"{old.slice_id}, owned by {owner_text(old.owner)}",
                                   owner=old.owner)
                return {"container": c, "exists": True,
                        "gpus": [{"index": g.gpu, "uuid": g.uuid} for g in old.gpus],
                        "rdma": old.rdma.to_json() if old.rdma else None}
            if not mgr.gpus:
                await mgr.poll_inventory()
            refs, _e, _mem = self._place(self._new_record(c, args), args)
            grant = await self._rdma_grant(args["rdma"], refs[0]) if "rdma" in args else None
        return {"container": c, "exists": False,
                "gpus": [{"index": g.index, "uuid": g.uuid} for g in refs],
                "rdma": grant.to_json() if grant else None}

    async def create(self, args) -> dict:
        mgr = self.mgr
        c = args["container"]
        self._check_profile(args.get("profile"))
        self._admit_profile(args)
        if mgr.kport.kernel is None and not await mgr.kport.connect():
            raise ApiError("unavailable", "vgpu.ko is not loaded")
        await mgr.ensure_sched()
        async with mgr.lock:
            if c in mgr.records:
                old = mgr.records[c]
                # The owner's own slice again (its hook wired at two stages,
                # or retried): that slice, as it is.  Anyone else's: refused,
                # never shared (docs/api.md, "Owners").
                if args.get("owner") is not None and old.owner == args["owner"]:
                    return {"slice": mgr.slice_view(old, mgr.kslices.get(old.slice_id)),
                            "reused": True}
                raise ApiError("exists", f"container {quote(c)} already has slice {old.slice_id}"
                               f", owned by {owner_text(old.owner)}", owner=old.owner)
            if not mgr.gpus:
                await mgr.poll_inventory()
            rec = self._new_record(c, args)
            if rec.pid:
                rec.pid_start = proc_start(rec.pid)
                if rec.pid_start is None:
                    raise ApiError("not-found", f"args.pid: process {rec.pid} does not exist")
            refs, e, mem = self._place(rec, args)
            rec.gpus = [GpuSlot(gpu=g.index, uuid=g.uuid, real_minor=g.minor, gpu_id=g.gpu_id)
                        for g in refs]
            if "rdma" in args:
                rec.rdma = await self._rdma_grant(args["rdma"], refs[0])
            if "memory" in args:
                rec.memory = rec.with_memory(args["memory"])
            lim = rec.limits(e)
            comp = self._kcompute(rec, e)
            try:
                cgfd = open_cgroup(rec.cgroup)      # the slice's nodes open only from it
            except CgroupError as ex:
                raise ApiError("bad-request", f"args.cgroup: {ex}") from None
            rec.applied = e
            try:
                for _attempt in range(64):         # ids taken outside the daemon: EEXIST, next
                    sid = mgr.alloc_id()
                    # Written ahead, before vgpu.ko has the slice: a vgpud
                    # killed between the two then finds this record (its
                    # cgroup, owner, labels) on restart and keeps or
                    # re-creates the slice; without it the kernel's slice
                    # was adopted as an operator's, owner-less and never
                    # collected, and the hook's retried create was refused
                    # ("exists") and its poststop delete too ("not-owner").
                    rec.slice_id = sid
                    mgr.save_state(pending=rec)
                    try:
                        ks, kw = await mgr.slice_new(
                            rec, [(g.minor, lim[i], g.gpu_id) for i, g in enumerate(refs)],
                            cgfd, comp, slice_id=sid)
                        break
                    except KernelRefused as ex:
                        if ex.errno == errno.EEXIST:
                            mgr.kslices[sid] = None
                            continue
                        if ex.errno == errno.EBADF and cgfd is not None:
                            raise ApiError("bad-request", f"args.cgroup: "
                                           f"{cgroup_path(rec.cgroup)} is not a cgroup v2 "
                                           "directory") from None
                        raise
                else:
                    raise ApiError("kernel", "could not find a free slice id (EEXIST 64 times)")
            except BaseException:
                mgr.save_state()                   # the record written ahead, withdrawn
                raise
            finally:
                if cgfd is not None:
                    os.close(cgfd)
            mgr.put(rec)
            mgr.keep(ks)
            mgr.save_state()
        log.info("created slice %d for %s on GPU(s) %s, %s%s", sid, c,
                 ",".join(str(g.index) for g in refs), format_size(mem),
                 f", RDMA {rec.rdma.rdma_max()}" if rec.rdma else "")
        mgr.log_audit(rec, kw)
        mgr.publish("slice-created", c, slice_id=sid)
        return {"slice": mgr.slice_view(rec, ks)}

    async def _rdma_grant(self, want: dict, gpu) -> RdmaGrant:
        """The RDMA a new slice on ``gpu`` gets (docs/rdma.md): the adapter
        it names or the closest one, the rdma cgroup limits it asks for or
        [rdma]'s."""
        mgr = self.mgr
        use: dict[str, int] = {}
        for r in mgr.records.values():
            if r.rdma is not None:
                use[r.rdma.hca] = use.get(r.rdma.hca, 0) + 1

        def pick():
            h = topology.choose(gpu.pci_bus_id, topology.hcas(mgr.sysfs), use, want.get("hca"),
                            mgr.sysfs)
            return topology.grant(h, want.get("handles", mgr.cfg.rdma.hca_handles),
                                  want.get("objects", mgr.cfg.rdma.hca_objects), mgr.sysfs)
        try:
            return await trio.to_thread.run_sync(pick)
        except topology.RdmaError as e:
            raise ApiError("admission", str(e)) from None

    def _apply_rdma(self, rec) -> None:
        """The slice's rdma cgroup limits on its container's (or attached)
        cgroup, where it has one; a refusal is logged (the next start of
        the container applies them through its hook)."""
        cg = self.mgr.bound_cgroup(rec)
        if rec.rdma is None or not cg:
            return
        try:
            rdma.write_rdma_max(cg, rec.rdma)
        except OSError as e:
            log.warning("slice %s: rdma.max of %s not set (%s): %s", rec.container, cg,
                        e.strerror or e, rec.rdma.rdma_max())

    def _release_rdma(self, rec) -> None:
        """A slice going: its rdma cgroup limits back to max where its
        cgroup still exists (a pod's, which the kubelet removes after
        unprepare; an operator's), so that the kernel frees the cgroup's
        pool of the adapter before the cgroup goes (docs/rdma.md, "A kernel
        bug").  A cgroup already gone is past helping."""
        cg = self.mgr.bound_cgroup(rec)
        if rec.rdma is None or not cg:
            return
        try:
            rdma.release_limits(cg, rec.rdma.hca)
        except OSError as e:
            if e.errno != errno.ENOENT:
                log.warning("slice %s: rdma.max of %s not reset: %s", rec.container, cg,
                            e.strerror or e)

    # ------------------------------------------------------------ change
    async def set_quota(self, args) -> dict:
        mgr = self.mgr
        c = args["container"]
        self._check_profile(args.get("profile"))
        await mgr.ensure_sched()
        async with mgr.lock:
            rec = self._rec(c)
            memory = rec.memory
            if "memory" in args:
                targets = None                  # all the slice's GPUs, or the named ones
                if "gpus" in args:
                    targets = [self._gpu(r).index for r in args["gpus"]]
                    if not any(g.gpu in targets for g in rec.gpus):
                        raise ApiError("not-found", f"args.gpus: the slice of {quote(c)} is not "
                                       f"on GPU(s) {', '.join(map(str, args['gpus']))}")
                memory = rec.with_memory(args["memory"], targets)
            new = rec.changed(explicit=explicit(args).merged_over(rec.explicit), memory=memory,
                              profile=args["profile"] if "profile" in args else rec.profile)
            if "rdma" in args:
                want = args["rdma"]
                if rec.rdma is None:
                    raise ApiError("bad-request", f"args.rdma: the slice of {quote(c)} has no "
                                   f"RDMA (it is given at create)")
                if want.get("hca", rec.rdma.hca) != rec.rdma.hca:
                    raise ApiError("bad-request", f"args.rdma.hca: the slice of {quote(c)} has "
                                   f"adapter {rec.rdma.hca}; it is chosen at create")
                new = new.changed(rdma=rec.rdma.with_limits(
                    want.get("handles", rec.rdma.handles), want.get("objects", rec.rdma.objects)))
            e = self._eff(new)
            # The GPUs' totals include this slice's current quota, handed to
            # admit() as `replacing`: keeping or shrinking what it has is
            # never refused, even on a GPU overcommitted since.
            views = mgr.views()
            over = bool(mgr.cfg.node.oversubscribe_memory)
            lim = new.limits(e)
            old_e = mgr.in_force(rec)
            old_lim = rec.limits(old_e)
            for i, g in enumerate(new.gpus):
                v = views.get(g.gpu)
                if v is not None:
                    try:
                        policy.admit(v, lim[i], e.spec.compute, e.spec.policy, over,
                                replacing=(old_lim.get(i, 0), old_e.spec.compute,
                                           old_e.spec.policy))
                    except policy.AdmissionError as ex:
                        raise ApiError("admission", str(ex)) from None
            comp = self._kcompute(new, e)
            kw = {} if comp is None else {"compute": comp}
            ks = await mgr.kport.call(lambda k: k.slice_set(rec.slice_id, limits=lim, **kw))
            new = new.changed(applied=e)
            mgr.put(new)
            if new.rdma != rec.rdma:
                self._apply_rdma(new)
            view = await self._show(new, ks)
            mgr.save_state()
        log.info("set quota of %s: %s; compute %s %s %s", c,
                 ", ".join(f"GPU {new.gpus[i].gpu} {format_size(b)}" for i, b in lim.items()),
                 e.spec.compute, e.spec.policy, e.spec.priority)
        mgr.publish("slice-changed", c, slice_id=new.slice_id)
        return view

    async def attach(self, args) -> dict:
        """Bind an operator's slice (made without a cgroup: the CDI flow) to
        the cgroup v2 of the container that uses it now.  vgpu.ko opens an
        unbound slice for host administrators only, so the container's
        createRuntime hook attaches it first.  One container at a time: a
        slice attached to a cgroup that still has processes is refused with
        ``exists``; one whose cgroup emptied or went is re-attached.  A
        slice made for a container (with its cgroup) is never attached
        elsewhere.  The attachment does not make the slice collectable: it
        stays the operator's."""
        mgr = self.mgr
        c, cg = args["container"], args["cgroup"]
        async with mgr.lock:
            rec = self._rec(c)
            if rec.cgroup or rec.pid:
                raise ApiError("bad-request", f"slice {quote(c)} was made for a container "
                               f"({rec.cgroup or 'pid ' + str(rec.pid)}); only a "
                               f"slice made without one is attached")
            cur = rec.attached
            if cur and cgroup_path(cur) != cgroup_path(cg) and not gone(cur):
                raise ApiError("exists", f"slice {quote(c)} is attached to {cgroup_path(cur)}, "
                               f"whose processes still run")
            try:
                fd = open_cgroup(cg)
            except CgroupError as ex:
                raise ApiError("bad-request", f"args.cgroup: {ex}") from None
            try:
                ks = await mgr.kport.call(lambda k: k.slice_set(rec.slice_id, cgroup_fd=fd))
            except KernelRefused as e:
                if e.errno == errno.EBADF:
                    raise ApiError("bad-request", f"args.cgroup: {cgroup_path(cg)} is not a "
                                   f"cgroup v2 directory") from None
                raise
            finally:
                os.close(fd)
            mgr.keep(ks)
            new = rec.changed(attached=cg)
            mgr.put(new)
            mgr.save_state()
            log.info("slice %d of %s attached to %s", rec.slice_id, c, cgroup_path(cg))
            return {"slice": mgr.slice_view(new, ks)}

    async def delete(self, args) -> dict:
        mgr = self.mgr
        c = args["container"]
        async with mgr.lock:
            rec = self._rec(c)
            # a delete that names an owner (the hook's) touches that owner's
            # slice only; one without (vgpuctl, an admin) deletes any
            if "owner" in args and rec.owner != args["owner"]:
                raise ApiError("not-owner", f"the slice of {quote(c)} is owned by "
                               f"{owner_text(rec.owner)}, not by "
                               f"{owner_text(args['owner'])}: left alone", owner=rec.owner)
            try:
                await mgr.kport.call(lambda k: k.slice_del(rec.slice_id,
                                                           force=bool(args.get("force"))))
            except KernelRefused as ex:
                if ex.errno == errno.EBUSY:
                    raise ApiError("kernel", f"slice of {quote(c)} has open files (EBUSY); "
                                   f"use force to delete it anyway", errno="EBUSY") from None
                if ex.errno != errno.ENOENT:
                    raise
            self._release_rdma(rec)
            mgr.forget(c)
            mgr.save_state()
        log.info("deleted slice %d of %s", rec.slice_id, c)
        mgr.publish("slice-deleted", c, slice_id=rec.slice_id)
        return {}

    # ------------------------------------------------------------ audit
    def _audit_refused(self, ex: OSError, c: str, sid: int, what: str) -> ApiError:
        return feature_refused(ex, c, sid, "audit mode", what, "VGPU_CMD_AUDIT_GET")

    async def audit(self, args) -> dict:
        """A slice's audit record (docs/api.md, "Audit")."""
        mgr = self.mgr
        c = args["container"]
        rec = self._rec(c)
        sid = rec.slice_id
        try:
            ar = await mgr.kport.call(lambda k: k.audit_get(sid))
        except KernelRefused as ex:
            raise self._audit_refused(ex, c, sid, "AUDIT_GET") from None
        allow_count = None
        try:
            ks = await mgr.kport.call(lambda k: k.slice_get(sid))
            mgr.keep(ks)
            allow_count = ks.allow_count
        except (KernelRefused, KernelUnavailable):
            pass                            # gone since: the record is still the answer
        return audit_view(c, sid, ar, allow_count)

    async def set_audit(self, args) -> dict:
        """Switch a slice's audit mode on or off (kept in its record: a
        slice recreated later gets it again, whatever its profile says)."""
        mgr = self.mgr
        c, on = args["container"], args["audit"]
        async with mgr.lock:
            rec = self._rec(c)
            sid = rec.slice_id
            try:
                ks = await mgr.kport.call(lambda k: k.slice_set(sid, audit=on))
            except KernelRefused as ex:
                raise self._audit_refused(ex, c, sid, "SLICE_SET audit") from None
            new = rec.changed(audit=on)
            mgr.put(new)
            view = await self._show(new, ks)
            mgr.save_state()
        if on:
            log.warning("slice %d of %s: audit mode on: what the policy refuses is forwarded "
                        "at the caller's privilege and recorded", sid, c)
        else:
            log.info("slice %d of %s: audit mode off", sid, c)
        mgr.publish("slice-changed", c, slice_id=sid, audit=on)
        return view

    # ------------------------------------------------------------ trace
    async def trace(self, args, send, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The ``trace`` stream of a container's slice (docs/api.md,
        "Traces"), run with ``nursery.start``: it reports the trace file's
        header once vgpu.ko traces the slice, then puts {"record": ...} on
        ``send`` for each of the slice's calls until it is cancelled (the
        client left), or the slice is deleted: then {"end": true, "reason":
        "slice deleted"} (or "vgpu.ko unloaded"), and ``send`` is closed.  A
        refusal before the header raises ApiError."""
        mgr, tr = self.mgr, self.mgr.tracing
        c = args["container"]
        rec = self._rec(c)
        sid = rec.slice_id
        # joined before the slice is traced: its first record is not missed
        try:
            ts = await mgr.kport.call(lambda k: k.trace_stream())
        except KernelUnavailable as e:
            raise ApiError("unavailable", str(e)) from None
        except KernelRefused as ex:
            if ex.errno == errno.ENOENT:            # the family has no such group
                raise ApiError("kernel", f"vgpu.ko has no tracing (no "
                               f"{uapi.VGPU_GENL_MCGRP_TRACE!r} multicast group): a module "
                               f"older than VGPU_CMD_TRACE", errno="ENOENT") from None
            raise kernel_error(ex) from None
        try:
            try:
                st, ks = await tr.join(c, sid)
            except KernelUnavailable as e:
                raise ApiError("unavailable", str(e)) from None
            except KernelRefused as ex:
                raise feature_refused(ex, c, sid, "tracing", "SLICE_SET trace",
                                      "VGPU_A_SLICE_TRACE") from None
            try:
                task_status.started(tr.header(
                    rec, ks, release=getattr(mgr.inventory, "driver_version", "") or "",
                    vgpu_version=package_version()))
                await tr.pump(c, sid, ts, st, send)
            finally:
                await tr.leave(c, sid, st)
        finally:
            ts.close()


__all__ = ["Ops", "audit_view", "owner_text", "kernel_error", "feature_refused", "explicit"]
