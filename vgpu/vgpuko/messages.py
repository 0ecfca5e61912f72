"""The messages of vgpu.ko's family as pyroute2 declares them (``vgpumsg``,
one nla class per nested enum, every attribute's type), the data types the
client returns (``Slice``, ``GpuUsage``, ``AuditRecord``, ``TraceRecord``,
``Event``...) and their decoders."""

from __future__ import annotations

import errno as _errno
import os
from dataclasses import dataclass, field
from typing import Any

from pyroute2.netlink import genlmsg, nla

from vgpu.abi import uapi
from vgpu.vgpuko.messages_gen import (AUDIT_ATTR_TYPES, GPU_ATTR_TYPES, LIST_ATTR_TYPES,
                                      SLICE_ATTR_TYPES, TRACE_ATTR_TYPES,
                                      TRACE_LIST_ATTR_TYPES)
from vgpu.vgpuko.netlink import NLA_F_NESTED, VgpuError

# --------------------------------------------------------------- messages
#: pyroute2 type of every attribute, generated from kmod/netlink/vgpu.yaml
#: (make generate) as the header is: u8 uint8, u32 uint32, s32 int32, u64
#: uint64, binary cdata, string asciiz, pad none, a nest the name of the nla
#: class below that decodes its set (imported above: SLICE_ATTR_TYPES ...).
#: tests/host/test_uapi.py checks completeness and each type against the
#: header's comment.

def _nla_map(names: list[str], types: dict[str, str]) -> tuple:
    # an attribute the header gained but this table lacks still decodes (as hex)
    return tuple((n, types.get(n, "hex")) for n in names)


class vgpumsg(genlmsg):
    """A message of the vgpu family (command in 'cmd', attributes VGPU_A_*)."""

    prefix = "VGPU_A_"
    nla_map = _nla_map(uapi.SLICE_ATTRS, SLICE_ATTR_TYPES)

    class slice_list(nla):
        """VGPU_A_SLICE_GPUS / _PIDS / _ALLOW and VGPU_A_AUDIT: a nest of
        list entries (enum vgpu_list_attr)."""
        prefix = "VGPU_A_"
        nla_flags = NLA_F_NESTED
        nla_map = _nla_map(uapi.LIST_ATTRS, LIST_ATTR_TYPES)

        class gpu(nla):
            prefix = "VGPU_GPU_A_"
            nla_flags = NLA_F_NESTED
            nla_map = _nla_map(uapi.GPU_ATTRS, GPU_ATTR_TYPES)

        class audit_entry(nla):
            """One item of an audit record (VGPU_AUDIT_A_*)."""
            prefix = "VGPU_AUDIT_A_"
            nla_flags = NLA_F_NESTED
            nla_map = _nla_map(uapi.AUDIT_ATTRS, AUDIT_ATTR_TYPES)

    class trace(nla):
        """VGPU_A_TRACE: one traced call (VGPU_TRACE_A_*)."""
        prefix = "VGPU_TRACE_A_"
        nla_flags = NLA_F_NESTED
        nla_map = _nla_map(uapi.TRACE_ATTRS, TRACE_ATTR_TYPES)

        class trace_list(nla):
            """VGPU_TRACE_A_LIST: one embedded list (VGPU_TRACE_LIST_A_*)."""
            prefix = "VGPU_TRACE_LIST_A_"
            nla_flags = NLA_F_NESTED
            nla_map = _nla_map(uapi.TRACE_LIST_ATTRS, TRACE_LIST_ATTR_TYPES)


# ------------------------------------------------------------- data types
@dataclass
class Compute:
    """A slice's compute setting on one GPU (VGPU_GPU_A_COMPUTE_POLICY,
    _COMPUTE_BP, _PRIORITY).  None leaves the kernel's value (SET) or
    default (NEW: policy NONE, priority LOW)."""
    policy: int | None = None         # enum vgpu_compute_policy
    bp: int | None = None             # basis points 1..10000
    priority: int | None = None       # enum vgpu_priority

    @classmethod
    def of(cls, v) -> "Compute":
        """A Compute from a Compute, a dict or a (policy, bp[, priority]) tuple."""
        if isinstance(v, Compute):
            return v
        if isinstance(v, dict):
            return cls(**v)
        return cls(*v)

    def attrs(self) -> list:
        out = []
        if self.policy is not None:
            out.append(["VGPU_GPU_A_COMPUTE_POLICY", int(self.policy)])
        if self.bp is not None:
            out.append(["VGPU_GPU_A_COMPUTE_BP", int(self.bp)])
        if self.priority is not None:
            out.append(["VGPU_GPU_A_PRIORITY", int(self.priority)])
        return out


@dataclass
class SchedInfo:
    """One real GPU's scheduler (SCHED_GET)."""
    real_minor: int
    period_us: int = 0
    layers: int = 0
    switches: int = 0
    cpu_ns: int = 0


@dataclass
class GpuUsage:
    """One GPU of a slice, as the kernel reports it."""
    index: int
    mem_limit: int = 0
    mem_used: int = 0
    mem_peak: int = 0
    allocs: int = 0
    refusals: int = 0
    minor: int | None = None          # the virtual node's minor
    real_minor: int | None = None
    gpu_id: int | None = None
    compute_policy: int = 0           # enum vgpu_compute_policy
    compute_bp: int = 0
    priority: int = 0                 # enum vgpu_priority
    gpu_time_ns: int = 0              # time granted while it wanted the GPU
    tsgs: int = 0
    channels: int = 0
    paused: bool = False
    doorbell_traps: int = 0


@dataclass
class Slice:
    id: int
    name: str = ""
    uvm_policy: int | None = None
    major: int | None = None
    base_minor: int | None = None
    open_files: int = 0
    pids: list[int] = field(default_factory=list)
    pids_truncated: bool = False      # a dump cut the pid list (VGPU_A_SLICE_PIDS_TRUNCATED)
    uvm_mapped: int = 0
    flags: int = 0
    cgroup_id: int = 0                # the bound cgroup v2's id (its inode), 0: none
    max_channels: int = 0             # channels per GPU of the slice, 0: no cap
    quarantined: bool = False         # a call broke: every open and call refused
    audit: bool = False               # audit mode (VGPU_A_SLICE_AUDIT)
    allow_count: int = 0              # entries of its allow-list (VGPU_A_SLICE_ALLOW_COUNT)
    trace: bool = False               # its calls go to the "trace" group (VGPU_A_SLICE_TRACE)
    gpus: list[GpuUsage] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)   # attributes not known here

    def devno(self, offset: int) -> int:
        """dev_t of the slice's node at base_minor + offset."""
        return os.makedev(self.major, self.base_minor + offset)

    @property
    def ctl_devno(self) -> int:
        return self.devno(uapi.VGPU_MINOR_CTL)

    @property
    def uvm_devno(self) -> int:
        return self.devno(uapi.VGPU_MINOR_UVM)

    def gpu_devno(self, index: int) -> int:
        return self.devno(uapi.VGPU_MINOR_GPU0 + index)

    def gpu(self, index: int) -> GpuUsage:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(index)


@dataclass
class AuditEntry:
    """One item of a slice's audit record: an escape, class, control or UVM
    command (kind: enum vgpu_audit_kind) the slice's processes used, the
    policy's verdict on it (enum vgpu_audit_verdict) and the calls counted:
    all of them, those refused, those forwarded by audit mode or the
    allow-list although the policy refuses them (or vgpu.ko does not
    implement them)."""
    kind: int
    number: int
    verdict: int
    calls: int = 0
    refused: int = 0
    let_through: int = 0

    @property
    def kind_name(self) -> str:
        return uapi.AUDIT_KIND_NAMES.get(self.kind, f"kind-{self.kind}")

    @property
    def verdict_name(self) -> str:
        return uapi.AUDIT_VERDICT_NAMES.get(self.verdict, f"verdict-{self.verdict}")


@dataclass
class AuditRecord:
    """A slice's audit record (VGPU_CMD_AUDIT_GET): its audit mode, the
    calls not recorded because the record was full, and its items, sorted
    by kind and number."""
    slice_id: int
    audit: bool = False
    dropped: int = 0
    entries: list[AuditEntry] = field(default_factory=list)


@dataclass
class Event:
    type: int
    slice_id: int | None = None
    pid: int | None = None
    gpu: int | None = None
    size: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return uapi.EVENT_NAMES.get(self.type, f"VGPU_EVENT_{self.type}")


def _attrs_dict(msg) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in msg.get("attrs", []):
        name, value = a[0], a[1]
        out.setdefault(name, value)
    return out


def _gpu_from_nla(g) -> GpuUsage:
    d = _attrs_dict(g)
    return GpuUsage(
        index=d.get("VGPU_GPU_A_INDEX", 0),
        mem_limit=d.get("VGPU_GPU_A_MEM_LIMIT", 0),
        mem_used=d.get("VGPU_GPU_A_MEM_USED", 0),
        mem_peak=d.get("VGPU_GPU_A_MEM_PEAK", 0),
        allocs=d.get("VGPU_GPU_A_ALLOCS", 0),
        refusals=d.get("VGPU_GPU_A_REFUSALS", 0),
        minor=d.get("VGPU_GPU_A_MINOR"),
        real_minor=d.get("VGPU_GPU_A_REAL_MINOR"),
        gpu_id=d.get("VGPU_GPU_A_GPU_ID"),
        compute_policy=d.get("VGPU_GPU_A_COMPUTE_POLICY", 0),
        compute_bp=d.get("VGPU_GPU_A_COMPUTE_BP", 0),
        priority=d.get("VGPU_GPU_A_PRIORITY", 0),
        gpu_time_ns=d.get("VGPU_GPU_A_GPU_TIME_NS", 0),
        tsgs=d.get("VGPU_GPU_A_TSGS", 0),
        channels=d.get("VGPU_GPU_A_CHANNELS", 0),
        paused=bool(d.get("VGPU_GPU_A_PAUSED", 0)),
        doorbell_traps=d.get("VGPU_GPU_A_DOORBELL_TRAPS", 0),
    )


def slice_from_msg(msg) -> Slice:
    d = _attrs_dict(msg)
    s = Slice(id=d.get("VGPU_A_SLICE_ID", 0))
    s.name = d.get("VGPU_A_SLICE_NAME", "") or ""
    s.uvm_policy = d.get("VGPU_A_SLICE_UVM_POLICY")
    s.major = d.get("VGPU_A_SLICE_MAJOR")
    s.base_minor = d.get("VGPU_A_SLICE_BASE_MINOR")
    s.open_files = d.get("VGPU_A_SLICE_OPEN_FILES", 0)
    s.uvm_mapped = d.get("VGPU_A_SLICE_UVM_MAPPED", 0)
    s.flags = d.get("VGPU_A_SLICE_FLAGS", 0)
    s.cgroup_id = d.get("VGPU_A_SLICE_CGROUP_ID", 0) or 0
    s.max_channels = d.get("VGPU_A_SLICE_MAX_CHANNELS", 0) or 0
    s.quarantined = bool(d.get("VGPU_A_SLICE_QUARANTINED", 0))
    s.audit = bool(d.get("VGPU_A_SLICE_AUDIT", 0))                 # absent: an older vgpu.ko
    s.allow_count = d.get("VGPU_A_SLICE_ALLOW_COUNT", 0) or 0
    s.trace = bool(d.get("VGPU_A_SLICE_TRACE", 0))
    gl = msg.get_attr("VGPU_A_SLICE_GPUS")
    if gl is not None:
        s.gpus = [_gpu_from_nla(a[1]) for a in gl.get("attrs", []) if a[0] == "VGPU_A_GPU"]
    pl = msg.get_attr("VGPU_A_SLICE_PIDS")
    if pl is not None:
        s.pids = [a[1] for a in pl.get("attrs", []) if a[0] == "VGPU_A_PID"]
    s.pids_truncated = bool(d.get("VGPU_A_SLICE_PIDS_TRUNCATED", 0))
    known = {"VGPU_A_SLICE_ID", "VGPU_A_SLICE_NAME", "VGPU_A_SLICE_UVM_POLICY",
             "VGPU_A_SLICE_MAJOR", "VGPU_A_SLICE_BASE_MINOR", "VGPU_A_SLICE_OPEN_FILES",
             "VGPU_A_SLICE_UVM_MAPPED", "VGPU_A_SLICE_FLAGS", "VGPU_A_SLICE_GPUS",
             "VGPU_A_SLICE_PIDS", "VGPU_A_PAD", "VGPU_A_SLICE_CGROUP_ID",
             "VGPU_A_SLICE_MAX_CHANNELS", "VGPU_A_SLICE_QUARANTINED",
             "VGPU_A_SLICE_AUDIT", "VGPU_A_SLICE_ALLOW_COUNT", "VGPU_A_SLICE_TRACE",
             "VGPU_A_SLICE_PIDS_TRUNCATED"}
    s.extra = {k: v for k, v in d.items() if k not in known}
    return s


def sched_from_msg(msg) -> SchedInfo:
    d = _attrs_dict(msg)
    return SchedInfo(real_minor=d.get("VGPU_A_SCHED_REAL_MINOR", 0),
                     period_us=d.get("VGPU_A_SCHED_PERIOD_US", 0),
                     layers=d.get("VGPU_A_SCHED_LAYERS", 0),
                     switches=d.get("VGPU_A_SCHED_SWITCHES", 0),
                     cpu_ns=d.get("VGPU_A_SCHED_CPU_NS", 0))


def _audit_entry_from_nla(a) -> AuditEntry:
    d = _attrs_dict(a)
    return AuditEntry(kind=d.get("VGPU_AUDIT_A_KIND", 0), number=d.get("VGPU_AUDIT_A_NUMBER", 0),
                      verdict=d.get("VGPU_AUDIT_A_VERDICT", 0),
                      calls=d.get("VGPU_AUDIT_A_CALLS", 0) or 0,
                      refused=d.get("VGPU_AUDIT_A_REFUSED", 0) or 0,
                      let_through=d.get("VGPU_AUDIT_A_LET_THROUGH", 0) or 0)


def audit_from_msgs(msgs, slice_id: int) -> AuditRecord:
    """The messages of one AUDIT_GET dump -> one AuditRecord.  Every message
    repeats the slice's id, audit mode and dropped count (one snapshot) and
    carries as many entries as fit; the entries of all are merged (an item
    is in one message only; were one repeated, its last copy counts) and
    sorted by kind and number."""
    rec = AuditRecord(slice_id=slice_id)
    items: dict[tuple[int, int], AuditEntry] = {}
    seen = False
    for m in msgs:
        d = _attrs_dict(m)
        sid = d.get("VGPU_A_SLICE_ID")
        if sid is not None and sid != slice_id:
            raise VgpuError(_errno.EPROTO, f"AUDIT_GET of slice {slice_id} answered for "
                            f"slice {sid}", op="AUDIT_GET")
        seen = True
        rec.audit = bool(d.get("VGPU_A_SLICE_AUDIT", 0))
        rec.dropped = d.get("VGPU_A_AUDIT_DROPPED", 0) or 0
        lst = m.get_attr("VGPU_A_AUDIT")
        for a in (lst.get("attrs", []) if lst is not None else []):
            if a[0] == "VGPU_A_AUDIT_ENTRY":
                e = _audit_entry_from_nla(a[1])
                items[(e.kind, e.number)] = e
    if not seen:
        raise VgpuError(_errno.EPROTO, "AUDIT_GET answered without a record", op="AUDIT_GET")
    rec.entries = [items[k] for k in sorted(items)]
    return rec


def allow_keys(allow) -> list[int]:
    """An allow-list, [(kind, number), ...] (kind: enum vgpu_audit_kind,
    number: u32), as the sorted, distinct VGPU_A_ALLOW keys (kind << 32) |
    number.  Raises ValueError naming the bad entry, or for a list past
    VGPU_MAX_ALLOW distinct items."""
    keys = set()
    for i, item in enumerate(allow):
        try:
            kind, number = item
        except (TypeError, ValueError):
            raise ValueError(f"allow[{i}]: {item!r} is not a (kind, number) pair") from None
        if isinstance(kind, bool) or not isinstance(kind, int) or \
                not 0 <= kind < uapi.__VGPU_AUDIT_KIND_MAX:
            raise ValueError(f"allow[{i}]: kind {kind!r} is not an enum vgpu_audit_kind "
                             f"(0..{uapi.__VGPU_AUDIT_KIND_MAX - 1})")
        if isinstance(number, bool) or not isinstance(number, int) or \
                not 0 <= number <= 0xFFFFFFFF:
            raise ValueError(f"allow[{i}]: number {number!r} is not a u32")
        keys.add((kind << 32) | number)
    if len(keys) > uapi.VGPU_MAX_ALLOW:
        raise ValueError(f"allow: {len(keys)} items, more than VGPU_MAX_ALLOW "
                         f"({uapi.VGPU_MAX_ALLOW})")
    return sorted(keys)


def _audit_attrs(audit: bool | None, allow, trace: bool | None = None) -> list:
    """VGPU_A_SLICE_AUDIT, VGPU_A_SLICE_ALLOW and VGPU_A_SLICE_TRACE of a
    NEW/SET request (None leaves each out; an empty allow-list is an empty
    nest: it clears)."""
    out = []
    if trace is not None:
        out.append(["VGPU_A_SLICE_TRACE", 1 if trace else 0])
    if audit is not None:
        out.append(["VGPU_A_SLICE_AUDIT", 1 if audit else 0])
    if allow is not None:
        out.append(["VGPU_A_SLICE_ALLOW",
                    {"attrs": [["VGPU_A_ALLOW", k] for k in allow_keys(allow)]}])
    return out


@dataclass
class TraceRecord:
    """One traced call of a slice (a VGPU_CMD_TRACE message; docs/trace.md).
    Fields the kernel did not send for this kind of call are None."""
    slice_id: int
    seq: int
    op: int                           # enum vgpu_trace_op
    time_ns: int = 0
    duration_ns: int = 0
    pid: int = 0
    tid: int = 0
    file: int = 0
    node: int = 0                     # minor relative to the slice's base
    ret: int = 0
    flags: int = 0                    # VGPU_TRACE_F_*
    nr: int | None = None
    size: int | None = None
    item_kind: int | None = None      # enum vgpu_audit_kind
    item: int | None = None
    verdict: int | None = None        # enum vgpu_audit_verdict
    args_in: bytes | None = None
    args_out: bytes | None = None
    params_ptr: int | None = None
    params_in: bytes | None = None
    params_out: bytes | None = None
    fd_offset: int | None = None
    fd_file: int | None = None
    addr: int | None = None
    length: int | None = None
    offset: int | None = None
    prot: int | None = None           # VGPU_TRACE_PROT_*
    open_flags: int | None = None
    #: the lists the pointed-to params name: (offset of the pointer, pointer,
    #: bytes before or None, bytes after or None)
    lists: list[tuple[int, int, bytes | None, bytes | None]] = field(default_factory=list)


_TRACE_FIELDS = {f"VGPU_TRACE_A_{n.upper()}": n for n in (
    "seq", "op", "pid", "tid", "file", "node", "ret", "flags", "nr", "size", "item_kind",
    "item", "verdict", "args_in", "args_out", "params_ptr", "params_in", "params_out",
    "fd_offset", "fd_file", "addr", "length", "offset", "prot", "open_flags")}
_TRACE_FIELDS["VGPU_TRACE_A_TIME_NS"] = "time_ns"
_TRACE_FIELDS["VGPU_TRACE_A_DURATION_NS"] = "duration_ns"


def trace_from_msg(msg) -> TraceRecord | None:
    """A VGPU_CMD_TRACE message -> TraceRecord (None if it carries no nest)."""
    nest = msg.get_attr("VGPU_A_TRACE")
    if nest is None:
        return None
    kw: dict[str, Any] = {}
    lists = []
    for name, value in nest.get("attrs", []):
        if name == "VGPU_TRACE_A_LIST":
            d = _attrs_dict(value)
            blob = d.get("VGPU_TRACE_LIST_A_IN"), d.get("VGPU_TRACE_LIST_A_OUT")
            lists.append((d.get("VGPU_TRACE_LIST_A_OFFSET", 0), d.get("VGPU_TRACE_LIST_A_PTR", 0),
                          *(None if b is None else bytes(b) for b in blob)))
            continue
        f = _TRACE_FIELDS.get(name)
        if f is None:
            continue
        if f.endswith(("_in", "_out")):
            value = bytes(value)
        kw.setdefault(f, value)
    kw.setdefault("seq", 0)
    kw.setdefault("op", -1)
    return TraceRecord(slice_id=msg.get_attr("VGPU_A_SLICE_ID") or 0, lists=lists, **kw)


def event_from_msg(msg) -> Event:
    d = _attrs_dict(msg)
    return Event(type=d.get("VGPU_A_EVENT_TYPE", 0), slice_id=d.get("VGPU_A_SLICE_ID"),
                 pid=d.get("VGPU_A_EVENT_PID"), gpu=d.get("VGPU_A_EVENT_GPU"),
                 size=d.get("VGPU_A_EVENT_SIZE"), attrs=d)



def _decode(data: bytes):
    m = vgpumsg(data)
    m.decode()
    return m
