"""Reconciliation as a plan: what vgpud wants (its records), what vgpu.ko
has (a dump of its slices) and the config in, the actions that bring the
kernel to the records out.  Pure: no kernel, no clock, no file system (what
the plan needs to know of them comes in as arguments), so it is tested on
the host without a kernel (tests/host/test_reconcile_plan.py); the slice
manager (vgpu.daemon.slices) carries the plan out.

The rules:
- a wanted slice the kernel lacks is created again, with the same id, its
  effective limits and compute, bound to its container's cgroup (or to the
  cgroup an operator's slice is attached to, while that one still runs), and
  traced again if this daemon's tracers still wait for it;
- a wanted slice whose id the kernel gives to a slice of another name is
  moved to a new id and created again (the other slice is adopted);
- limits or compute that differ from the effective ones are set
  (``Correct``); a slice that matches is kept;
- a kernel slice nobody wanted is adopted: its name becomes the container
  (suffixed with its id when the name is taken), its limits explicit
  per-GPU quotas, its compute setting (if it has one) explicit;
- at start-up, tracing nobody here asked for is turned off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from vgpu.abi import uapi
from vgpu.daemon import compute
from vgpu.daemon.config import SliceSpec
from vgpu.daemon.records import Effective, GpuSlot, SliceRecord


@dataclass
class Recreate:
    container: str
    #: the id taken by a slice of another name: move to a new one first
    renumber: bool
    #: [(real minor, bytes, RM gpu id)] in the slice's GPU order
    gpus: list[tuple[int | None, int, int | None]]
    compute: dict | None
    #: the cgroup to bind the slice to (its container's, or an attachment's)
    bind: str | None
    trace: bool


@dataclass
class Correct:
    container: str
    slice_id: int
    limits: dict[int, int] | None         # None: the kernel's are right
    compute: dict | None                  # only the GPUs whose compute differs
    had_limits: dict[int, int]
    had_compute: dict[int, tuple]


@dataclass
class Adopt:
    record: SliceRecord
    #: compute for the adopted slice's GPUs that lack the effective one
    compute: dict | None


@dataclass
class Plan:
    recreate: list[Recreate] = field(default_factory=list)
    correct: list[Correct] = field(default_factory=list)
    adopt: list[Adopt] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: the effective settings of every record that could be computed
    effective: dict[str, Effective] = field(default_factory=dict)
    #: records whose effective settings cannot be computed: (container, why)
    broken: list[tuple[str, str]] = field(default_factory=list)
    #: slice ids whose tracing to turn off (start-up only)
    untrace: list[int] = field(default_factory=list)


def plan(records: dict[str, SliceRecord], kslices: dict[int, Any], *,
         effective: Callable[[SliceRecord], Effective],
         compute: Callable[[SliceRecord, Effective], dict | None],
         gpu_of_minor: Callable[[int], Any],
         attached_alive: Callable[[str], bool],
         traced: set[int], startup: bool = False, now: float = 0.0) -> Plan:
    """The actions for records against kslices (id -> kernel.Slice; a None
    value is an id known taken but not read).  ``effective`` and ``compute``
    raise ValueError for a record the config refuses; ``gpu_of_minor`` ->
    the inventory's GPU of a real minor (index, uuid) or None;
    ``attached_alive``: whether an attachment's cgroup still runs;
    ``traced``: the slice ids this daemon's tracers hold; ``now``: the
    ``created`` time of adopted records."""
    p = Plan()
    wanted_ids = {r.slice_id for r in records.values()}
    for c, rec in records.items():
        ks = kslices.get(rec.slice_id)
        renumber = ks is not None and ks.name not in ("", c)
        if renumber:
            ks = None
        try:
            e = effective(rec)
        except ValueError as ex:
            p.broken.append((c, str(ex)))
            continue
        p.effective[c] = e
        lim = rec.limits(e)
        try:
            comp = compute(rec, e)
        except ValueError as ex:
            p.broken.append((c, str(ex)))
            comp = None
        if ks is None:
            bind = rec.cgroup
            if not bind and rec.attached and attached_alive(rec.attached):
                bind = rec.attached             # an operator's slice, still in use
            p.recreate.append(Recreate(
                c, renumber, [(g.real_minor, lim[i], g.gpu_id) for i, g in enumerate(rec.gpus)],
                comp, bind, not renumber and rec.slice_id in traced))
            continue
        have = {g.index: g.mem_limit for g in ks.gpus}
        bad = _compute_differs(ks, comp)
        if have != lim or bad:
            p.correct.append(Correct(c, rec.slice_id, lim if have != lim else None, bad, have,
                                     {g.index: (g.compute_policy, g.compute_bp, g.priority)
                                      for g in ks.gpus}))
        else:
            p.kept.append(c)
    taken = set(records)
    for sid, ks in sorted(kslices.items()):
        if ks is None or sid in wanted_ids and not _renumbered(p, records, sid):
            continue
        name = ks.name or f"slice-{sid}"
        if name in taken:
            name = f"{name}-{sid}"
        taken.add(name)
        rec = adopted_record(name, ks, gpu_of_minor, now)
        try:
            e = effective(rec)
        except ValueError:
            p.adopt.append(Adopt(rec, None))
            continue
        rec.applied = e
        try:
            comp = compute(rec, e)
        except ValueError:
            comp = None
        p.adopt.append(Adopt(rec, _compute_differs(ks, comp)))
    if startup:
        p.untrace = [sid for sid, ks in sorted(kslices.items())
                     if ks is not None and getattr(ks, "trace", False) and sid not in traced]
    return p


def _renumbered(p: Plan, records: dict[str, SliceRecord], sid: int) -> bool:
    """Whether the wanted slice with id sid moves away from it (its id is
    another name's slice, which is then adopted)."""
    return any(r.renumber and records[r.container].slice_id == sid for r in p.recreate)


def _compute_differs(ks, comp: dict | None) -> dict | None:
    if not comp:
        return None
    bad = {g.index: comp[g.index] for g in ks.gpus
           if g.index in comp and compute.compute_differs(g, comp[g.index])}
    return bad or None


def adopted_record(name: str, ks, gpu_of_minor: Callable[[int], Any], now: float) -> SliceRecord:
    """The record of a kernel slice nobody wanted: its limits become
    explicit per-GPU quotas, its compute setting (if it has one) explicit,
    an audit mode set outside vgpud stays."""
    gpus = []
    for g in ks.gpus:
        ref = gpu_of_minor(g.real_minor) if g.real_minor is not None else None
        gpus.append(GpuSlot(gpu=ref.index if ref else g.real_minor, uuid=ref.uuid if ref else None,
                            real_minor=g.real_minor, gpu_id=g.gpu_id))
    explicit = SliceSpec()
    g0 = ks.gpus[0] if ks.gpus else None
    if g0 is not None and g0.compute_policy in compute.POLICY_NAMES and \
            g0.compute_policy != uapi.VGPU_COMPUTE_NONE:
        explicit = SliceSpec(compute=g0.compute_bp / 100,
                             policy=compute.POLICY_NAMES[g0.compute_policy],
                             priority=compute.PRIORITY_NAMES.get(g0.priority, "low"))
    return SliceRecord(container=name, slice_id=ks.id, gpus=gpus,
                       memory={i: g.mem_limit for i, g in enumerate(ks.gpus)}, explicit=explicit,
                       created=now, adopted=True, audit=True if ks.audit else None)
