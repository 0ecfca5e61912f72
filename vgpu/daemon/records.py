"""A slice's record: what was wanted for one container, typed, and the
schema of vgpud's state file (vgpu.daemon.state keeps the file; this module
says what is in it).

One ``SliceRecord`` per container.  Its quotas are kept as they were asked,
not as they came out: the effective settings are recomputed from them, the
profile and the config whenever either changes, and the last ones sent to
vgpu.ko are ``applied``.  A memory quota has one home, ``memory``: {the
slice's GPU index: bytes}, the shape vgpu.ko's client takes (``limits``
fills in the GPUs that have none from the effective settings); compute,
priority and policy are ``explicit``, a config.SliceSpec whose memory is
always unset.

The state document, version 2::

    {"version": 2, "next_id": N,
     "slices": {"<container>": {"slice_id": 7, "explicit": {"compute": 25.0},
                                 "gpus": [{"gpu": 0, "memory": 4294967296, ...}],
                                 "profile": "small", "labels": {}, ...}}}

A GPU's memory quota (``SliceRecord.memory``) is written in its entry of
"gpus".  Files written before the quota had one home may also hold a
slice-wide "explicit.memory": read as the quota of each GPU that has none
of its own, and not written again.  vgpud of before reads the new files
with the same limits (it took a GPU's own quota over the slice-wide one),
but refuses a slice whose profile and [defaults] give no memory.

Version 1 (vgpud before the records were typed) held the same values as
free-form objects, each repeating its container; ``from_doc`` reads it and
the next save writes version 2.  A record that does not have the schema's
shape is left out with an error in the log, as a corrupt file is: vgpud then
adopts its slice from vgpu.ko (limits kept, names lost) instead of guessing.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vgpu.common.rdma import RdmaGrant
from vgpu.daemon.config import SliceSpec
from vgpu.daemon.state import STATE_VERSION
from vgpu.common.values import BadValue, parse_percent, parse_policy, parse_priority, parse_size

log = logging.getLogger("vgpud.records")


#: a GPU of a slice without a memory quota: none of its own, and none in the
#: profile or [defaults] (Config.effective)
NO_MEMORY = "no memory quota: the request gives none, nor does its profile or [defaults]"


class RecordError(ValueError):
    """A state record without the schema's shape."""


@dataclass(frozen=True)
class Effective:
    """A slice's effective settings (explicit over profile or window over
    [defaults]) and the profile in force; ``spec.memory`` is the memory of
    the slice's GPUs without a quota of their own (None when it has none:
    SliceRecord.limits)."""
    spec: SliceSpec
    profile: str | None = None

    def to_json(self) -> dict:
        return {**asdict(self.spec), "profile": self.profile}

    @classmethod
    def from_json(cls, d: Any) -> "Effective":
        if not isinstance(d, dict):
            raise RecordError(f"applied: {d!r} is not an object")
        return cls(_spec(d, "applied"), _opt(d, "profile", str, "applied"))


@dataclass(frozen=True)
class GpuSlot:
    """One GPU of a slice: the host's GPU (inventory index, UUID, the real
    device's minor and RM gpu id).  Its memory quota is the record's
    (``SliceRecord.memory``)."""
    gpu: int
    uuid: str | None = None
    real_minor: int | None = None
    gpu_id: int | None = None

    @classmethod
    def from_json(cls, d: Any) -> "GpuSlot":
        if not isinstance(d, dict):
            raise RecordError(f"gpus: {d!r} is not an object")
        return cls(gpu=_req(d, "gpu", int, "gpus"), uuid=_opt(d, "uuid", str, "gpus"),
                   real_minor=_opt(d, "real_minor", int, "gpus"),
                   gpu_id=_opt(d, "gpu_id", int, "gpus"))

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "gpu"}


@dataclass
class SliceRecord:
    container: str
    slice_id: int
    gpus: list[GpuSlot] = field(default_factory=list)
    #: the memory quotas as asked (create, set-quota, adoption): {index in
    #: ``gpus``: bytes}; a GPU not in it takes the effective memory (its
    #: profile's or [defaults]')
    memory: dict[int, int] = field(default_factory=dict)
    #: the other quotas as asked (create, set-quota), over the profile;
    #: never a memory quota (that is ``memory``'s)
    explicit: SliceSpec = field(default_factory=SliceSpec)
    profile: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    #: the container: its cgroup v2 directory, or a pid and its start time
    cgroup: str | None = None
    pid: int | None = None
    pid_start: int | None = None
    created: float | None = None
    #: who made it through the hook (api.v_owner's object), None for the API
    owner: dict | None = None
    #: the cgroup an operator's slice (made without one) is attached to
    attached: str | None = None
    #: set-audit's choice; None: the profile's
    audit: bool | None = None
    #: found in vgpu.ko, not made by this daemon
    adopted: bool = False
    #: the effective settings last sent to vgpu.ko
    applied: Effective | None = None
    #: the RDMA adapter, nodes and rdma cgroup limits the slice was given
    rdma: RdmaGrant | None = None

    def __post_init__(self):
        if self.explicit.memory is not None:
            raise ValueError("a record's memory quota is kept in SliceRecord.memory, "
                             "not in explicit")

    def limits(self, eff: Effective) -> dict[int, int]:
        """{container GPU index: bytes} under effective settings eff: the
        GPU's own quota, else the effective memory.  Raises ValueError when
        a GPU has neither."""
        out = {}
        for i in range(len(self.gpus)):
            b = self.memory.get(i, eff.spec.memory)
            if b is None:
                raise ValueError(NO_MEMORY)
            out[i] = b
        return out

    def lacks_memory(self) -> bool:
        """Whether a GPU of the slice has no memory quota of its own."""
        return any(i not in self.memory for i in range(len(self.gpus)))

    def with_memory(self, size: int, gpus: list[int] | None = None) -> dict[int, int]:
        """``memory`` with the quota size on the slice's GPUs whose host
        index is in gpus (None: on all of them)."""
        return {**self.memory, **{i: size for i, g in enumerate(self.gpus)
                                  if gpus is None or g.gpu in gpus}}

    def changed(self, **kw) -> "SliceRecord":
        """A copy with kw replaced (records are replaced whole, never edited
        in place, so that a refused change leaves the old one intact)."""
        return replace(self, **kw)

    # ------------------------------------------------------------ schema
    def to_json(self) -> dict:
        gpus = [g.to_json() for g in self.gpus]
        for i, b in self.memory.items():
            gpus[i]["memory"] = b
        out: dict[str, Any] = {"slice_id": self.slice_id, "gpus": gpus,
                               "explicit": {k: v for k, v in asdict(self.explicit).items()
                                            if v is not None},
                               "profile": self.profile, "labels": dict(self.labels),
                               "cgroup": self.cgroup, "pid": self.pid, "created": self.created,
                               "owner": self.owner}
        for k in ("pid_start", "attached", "audit"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.adopted:
            out["adopted"] = True
        if self.applied is not None:
            out["applied"] = self.applied.to_json()
        if self.rdma is not None:
            out["rdma"] = self.rdma.to_json()
        return out

    @classmethod
    def from_json(cls, container: str, d: Any) -> "SliceRecord":
        if not isinstance(d, dict):
            raise RecordError(f"not an object: {d!r}")
        unknown = set(d) - _RECORD_KEYS
        if unknown:
            raise RecordError(f"unknown key(s) {', '.join(sorted(unknown))}")
        gpus = d.get("gpus", [])
        if not isinstance(gpus, list):
            raise RecordError(f"gpus: {gpus!r} is not a list")
        labels = d.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise RecordError(f"labels: {labels!r} is not an object of strings")
        owner = d.get("owner")
        if owner is not None and not isinstance(owner, dict):
            raise RecordError(f"owner: {owner!r} is not an object")
        created = d.get("created")
        if created is not None and (isinstance(created, bool)
                                    or not isinstance(created, (int, float))):
            raise RecordError(f"created: {created!r} is not a time")
        applied = d.get("applied")
        try:
            rdma = RdmaGrant.from_json(d["rdma"]) if d.get("rdma") is not None else None
        except ValueError as e:
            raise RecordError(str(e)) from None
        slots = [GpuSlot.from_json(g) for g in gpus]
        memory = {i: g["memory"] for i, g in enumerate(gpus)
                  if _opt(g, "memory", int, "gpus") is not None}
        explicit = _spec(d.get("explicit") or {}, "explicit")
        if explicit.memory is not None:         # a file from before the one home
            memory = {i: memory.get(i, explicit.memory) for i in range(len(slots))}
            explicit = replace(explicit, memory=None)
        return cls(container=container, slice_id=_req(d, "slice_id", int, ""),
                   gpus=slots, memory=memory, explicit=explicit,
                   profile=_opt(d, "profile", str, ""), labels=dict(labels),
                   cgroup=_opt(d, "cgroup", str, ""), pid=_opt(d, "pid", int, ""),
                   pid_start=_opt(d, "pid_start", int, ""), created=created, owner=owner,
                   attached=_opt(d, "attached", str, ""), audit=_opt(d, "audit", bool, ""),
                   adopted=bool(_opt(d, "adopted", bool, "")),
                   applied=Effective.from_json(applied) if applied is not None else None,
                   rdma=rdma)


_RECORD_KEYS = frozenset({"slice_id", "gpus", "explicit", "profile", "labels", "cgroup", "pid",
                          "pid_start", "created", "owner", "attached", "audit", "adopted",
                          "applied", "rdma"})


# ---------------------------------------------------------------- the document
@dataclass
class State:
    records: dict[str, SliceRecord] = field(default_factory=dict)
    next_id: int = 1

    def to_doc(self) -> dict:
        return {"version": STATE_VERSION, "next_id": self.next_id,
                "slices": {c: r.to_json() for c, r in self.records.items()}}


def from_doc(doc: dict) -> State:
    """The state of a document vgpu.daemon.state loaded (its envelope
    checked: a version it reads, "slices" an object of objects).  Version 1
    is migrated; a record without the schema's shape is logged and left out
    (reconcile then adopts its slice from vgpu.ko)."""
    version = doc.get("version", STATE_VERSION)
    slices = doc.get("slices") or {}
    if version == 1:
        slices = {c: _migrate_v1(c, r) for c, r in slices.items()}
    state = State()
    for c, raw in slices.items():
        try:
            rec = SliceRecord.from_json(c, raw)
        except RecordError as e:
            log.error("state: the record of %r is not usable (%s): left out; its slice, if "
                      "vgpu.ko has it, is adopted", c, e)
            continue
        state.records[c] = rec
    nid = doc.get("next_id", 1)
    state.next_id = nid if isinstance(nid, int) and not isinstance(nid, bool) and nid > 0 else 1
    if version == 1 and slices:
        log.info("state: %d record(s) read from a version 1 file; saved as version %d at the "
                 "next change", len(state.records), STATE_VERSION)
    return state


def _migrate_v1(container: str, rec: Any) -> Any:
    """A version 1 record as version 2: the container it repeated is the
    key's; the rest had the same names and values."""
    if not isinstance(rec, dict):
        return rec
    rec = {k: v for k, v in rec.items() if k != "container"}
    if rec.get("audit") is None:
        rec.pop("audit", None)
    return rec


# ---------------------------------------------------------------- field checks
def _where(ctx: str, key: str) -> str:
    return f"{ctx}.{key}" if ctx else key


def _typed(v: Any, typ: type) -> bool:
    if typ is int:
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, typ)


def _req(d: dict, key: str, typ: type, ctx: str) -> Any:
    v = d.get(key)
    if not _typed(v, typ):
        raise RecordError(f"{_where(ctx, key)}: {v!r} is not a{'n' if typ is int else ''} "
                          f"{typ.__name__}")
    return v


def _opt(d: dict, key: str, typ: type, ctx: str) -> Any:
    return None if d.get(key) is None else _req(d, key, typ, ctx)


def _spec(d: Any, ctx: str) -> SliceSpec:
    """Quotas as the API and the config take them, by the same parsers."""
    if not isinstance(d, dict):
        raise RecordError(f"{ctx}: {d!r} is not an object")
    out: dict[str, Any] = {}
    for key, parse in (("memory", _size), ("compute", _percent),
                       ("priority", parse_priority), ("policy", parse_policy)):
        if d.get(key) is None:
            continue
        try:
            out[key] = parse(d[key])
        except BadValue as e:
            raise RecordError(f"{_where(ctx, key)}: {e}") from None
    return SliceSpec(**out)


def _percent(v: Any) -> float:
    """A percentage as the file holds it: a number, not text."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadValue(v, "is not a number")
    return parse_percent(v)


def _size(v: Any) -> int:
    """A size in bytes as the file holds it: an integer, not text."""
    if not _typed(v, int):
        raise BadValue(v, "is not an integer")
    return parse_size(v)


__all__ = ["RecordError", "Effective", "GpuSlot", "SliceRecord", "State", "from_doc", "NO_MEMORY"]
