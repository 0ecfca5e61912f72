"""The netlink client of vgpu.ko: create, change, destroy and list slices, and
listen to the module's events.

The API is the generic-netlink family "vgpu" of kmod/include/uapi/vgpu.h
(mirrored in vgpu/abi/uapi.py).  Messages are declared with pyroute2's genlmsg /
nla classes (``vgpumsg``), which do all encoding and decoding; the socket I/O
is a plain blocking AF_NETLINK socket owned here, so the client is synchronous,
has no event loop of its own, and can be driven from a worker thread of the
trio daemon (or the daemon can reuse ``vgpumsg`` on its own fd).

    with VgpuKernel() as k:
        s = k.slice_new(7, gpus=[(0, 4 << 30)], name="ctr-abc")
        k.slice_set(7, limits={0: 2 << 30})
        k.slice_set(7, compute={0: Compute(U.VGPU_COMPUTE_FIXED, 3000)})
        k.sched_set(0, period_us=50_000, layers=U.VGPU_SCHED_L_ALL)
        k.slice_set(7, audit=True, allow=[(U.VGPU_AUDIT_CONTROL, 0x20800145)])
        rec = k.audit_get(7)        # AuditRecord: what the slice used, verdicts, counts
        for s in k.slices(): ...
        k.slice_del(7, force=True)

Errors: every refusal is a ``VgpuError`` (an OSError) carrying the errno and
the kernel's extack message (``.extack``), attribute offset and missing
attribute when the kernel sent them.  ``VgpuNotLoaded`` when the family does
not exist.  ``raw_request`` sends arbitrary, even malformed, attributes for
hostile-input tests.

What it may call: the kernel's netlink API only.  It never opens device nodes.
"""

from __future__ import annotations

import errno as _errno
import os
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from pyroute2.netlink import (NLA_F_NESTED, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
                              CTRL_CMD_GETFAMILY, GENL_ID_CTRL, ctrlmsg, genlmsg, nla)

from vgpu.abi import uapi as U

__all__ = [
    "VgpuError", "VgpuNotLoaded", "VgpuKernel", "Slice", "GpuUsage", "Event", "Compute",
    "SchedInfo", "AuditEntry", "AuditRecord", "allow_keys",
    "EventStream", "TraceStream", "TraceRecord", "Nla", "encode_attrs", "vgpumsg",
]

NETLINK_GENERIC = 16
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_DROP_MEMBERSHIP = 2
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLMSG_NOOP, NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 1, 2, 3, 4
NLM_F_MULTI = 0x2
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
NLMSGERR_ATTR_OFFS = 2
NLMSGERR_ATTR_MISS_TYPE = 5
NLMSGERR_ATTR_MISS_NEST = 6
_NLHDR = struct.Struct("=IHHII")
_GENLHDR = struct.Struct("=BBH")
_NLAHDR = struct.Struct("=HH")
RECV_BUF = 1 << 20
TRACE_RCVBUF = 16 << 20      # a trace socket's receive buffer: bursts of 16 KiB records
SO_RCVBUFFORCE = 33

NOT_LOADED = "vgpu.ko is not loaded: generic netlink family 'vgpu' not found"


def _align4(n: int) -> int:
    return (n + 3) & ~3


# ------------------------------------------------------------------ errors
class VgpuError(OSError):
    """The kernel refused a request: errno plus its extack message, if any."""

    def __init__(self, errno: int, message: str | None = None, *, op: str = "",
                 extack: str | None = None, offset: int | None = None,
                 miss_type: int | None = None, miss_nest: int | None = None):
        if message is None:
            message = extack or os.strerror(errno)
        super().__init__(errno, message)
        self.op = op
        self.extack = extack
        self.offset = offset
        self.miss_type = miss_type
        self.miss_nest = miss_nest

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno, str(self.errno))
        out = f"{self.op + ': ' if self.op else ''}{name} ({os.strerror(self.errno)})"
        if self.extack:
            out += f": {self.extack}"
        elif self.strerror and self.strerror != os.strerror(self.errno):
            out += f": {self.strerror}"
        if self.miss_type is not None:
            out += f" [missing attribute {self.miss_type}]"
        return out


class VgpuNotLoaded(VgpuError):
    def __init__(self):
        super().__init__(_errno.ENOENT, NOT_LOADED)

    def __str__(self) -> str:
        return NOT_LOADED


# --------------------------------------------------------------- messages
#: pyroute2 type of every attribute (names from uapi.py, so a renamed or
#: missing one fails at import).  tests/host/test_uapi.py checks completeness
#: and each type against the type the header's comment gives the attribute
#: (u8 uint8, u32 uint32, s32 int32, u64 uint64, binary cdata, NUL-terminated
#: string asciiz, pad none, nested: the nla class of the nested enum).
SLICE_ATTR_TYPES = {
    "VGPU_A_UNSPEC": "none",
    "VGPU_A_SLICE_ID": "uint32",
    "VGPU_A_SLICE_NAME": "asciiz",
    "VGPU_A_SLICE_FLAGS": "uint32",
    "VGPU_A_SLICE_UVM_POLICY": "uint32",
    "VGPU_A_SLICE_GPUS": "slice_list",
    "VGPU_A_SLICE_MAJOR": "uint32",
    "VGPU_A_SLICE_BASE_MINOR": "uint32",
    "VGPU_A_SLICE_OPEN_FILES": "uint32",
    "VGPU_A_SLICE_PIDS": "slice_list",
    "VGPU_A_SLICE_UVM_MAPPED": "uint64",
    "VGPU_A_EVENT_TYPE": "uint32",
    "VGPU_A_EVENT_PID": "uint32",
    "VGPU_A_EVENT_GPU": "uint32",
    "VGPU_A_EVENT_SIZE": "uint64",
    "VGPU_A_PAD": "none",
    "VGPU_A_SLICE_CGROUP_FD": "uint32",
    "VGPU_A_SLICE_CGROUP_ID": "uint64",
    "VGPU_A_SCHED_REAL_MINOR": "uint32",
    "VGPU_A_SCHED_PERIOD_US": "uint32",
    "VGPU_A_SCHED_LAYERS": "uint32",
    "VGPU_A_SCHED_SWITCHES": "uint64",
    "VGPU_A_SCHED_CPU_NS": "uint64",
    "VGPU_A_SLICE_MAX_CHANNELS": "uint32",
    "VGPU_A_SLICE_QUARANTINED": "uint8",
    "VGPU_A_SLICE_AUDIT": "uint8",
    "VGPU_A_SLICE_ALLOW": "slice_list",
    "VGPU_A_SLICE_ALLOW_COUNT": "uint32",
    "VGPU_A_AUDIT": "slice_list",
    "VGPU_A_AUDIT_DROPPED": "uint64",
    "VGPU_A_SLICE_TRACE": "uint8",
    "VGPU_A_TRACE": "trace",
    "VGPU_A_SLICE_PIDS_TRUNCATED": "uint8",
}
LIST_ATTR_TYPES = {
    "VGPU_A_LIST_UNSPEC": "none",
    "VGPU_A_GPU": "gpu",
    "VGPU_A_PID": "uint32",
    "VGPU_A_ALLOW": "uint64",
    "VGPU_A_AUDIT_ENTRY": "audit_entry",
}
GPU_ATTR_TYPES = {
    "VGPU_GPU_A_UNSPEC": "none",
    "VGPU_GPU_A_INDEX": "uint32",
    "VGPU_GPU_A_REAL_MINOR": "uint32",
    "VGPU_GPU_A_MEM_LIMIT": "uint64",
    "VGPU_GPU_A_MEM_USED": "uint64",
    "VGPU_GPU_A_MEM_PEAK": "uint64",
    "VGPU_GPU_A_ALLOCS": "uint64",
    "VGPU_GPU_A_REFUSALS": "uint64",
    "VGPU_GPU_A_MINOR": "uint32",
    "VGPU_GPU_A_GPU_ID": "uint32",
    "VGPU_GPU_A_PAD": "none",
    "VGPU_GPU_A_COMPUTE_POLICY": "uint32",
    "VGPU_GPU_A_COMPUTE_BP": "uint32",
    "VGPU_GPU_A_PRIORITY": "uint32",
    "VGPU_GPU_A_GPU_TIME_NS": "uint64",
    "VGPU_GPU_A_TSGS": "uint32",
    "VGPU_GPU_A_CHANNELS": "uint32",
    "VGPU_GPU_A_PAUSED": "uint32",
    "VGPU_GPU_A_DOORBELL_TRAPS": "uint64",
}
AUDIT_ATTR_TYPES = {
    "VGPU_AUDIT_A_UNSPEC": "none",
    "VGPU_AUDIT_A_KIND": "uint8",
    "VGPU_AUDIT_A_NUMBER": "uint32",
    "VGPU_AUDIT_A_VERDICT": "uint8",
    "VGPU_AUDIT_A_CALLS": "uint64",
    "VGPU_AUDIT_A_REFUSED": "uint64",
    "VGPU_AUDIT_A_LET_THROUGH": "uint64",
    "VGPU_AUDIT_A_PAD": "none",
}


TRACE_ATTR_TYPES = {
    "VGPU_TRACE_A_UNSPEC": "none",
    "VGPU_TRACE_A_SEQ": "uint64",
    "VGPU_TRACE_A_TIME_NS": "uint64",
    "VGPU_TRACE_A_DURATION_NS": "uint64",
    "VGPU_TRACE_A_PID": "uint32",
    "VGPU_TRACE_A_TID": "uint32",
    "VGPU_TRACE_A_FILE": "uint64",
    "VGPU_TRACE_A_NODE": "uint32",
    "VGPU_TRACE_A_OP": "uint8",
    "VGPU_TRACE_A_RET": "int32",
    "VGPU_TRACE_A_FLAGS": "uint32",
    "VGPU_TRACE_A_NR": "uint32",
    "VGPU_TRACE_A_SIZE": "uint32",
    "VGPU_TRACE_A_ITEM_KIND": "uint8",
    "VGPU_TRACE_A_ITEM": "uint32",
    "VGPU_TRACE_A_VERDICT": "uint8",
    "VGPU_TRACE_A_ARGS_IN": "cdata",
    "VGPU_TRACE_A_ARGS_OUT": "cdata",
    "VGPU_TRACE_A_PARAMS_PTR": "uint64",
    "VGPU_TRACE_A_PARAMS_IN": "cdata",
    "VGPU_TRACE_A_PARAMS_OUT": "cdata",
    "VGPU_TRACE_A_FD_OFFSET": "uint32",
    "VGPU_TRACE_A_FD_FILE": "uint64",
    "VGPU_TRACE_A_ADDR": "uint64",
    "VGPU_TRACE_A_LENGTH": "uint64",
    "VGPU_TRACE_A_OFFSET": "uint64",
    "VGPU_TRACE_A_PROT": "uint32",
    "VGPU_TRACE_A_OPEN_FLAGS": "uint32",
    "VGPU_TRACE_A_PAD": "none",
    "VGPU_TRACE_A_LIST": "trace_list",
}
TRACE_LIST_ATTR_TYPES = {
    "VGPU_TRACE_LIST_A_UNSPEC": "none",
    "VGPU_TRACE_LIST_A_OFFSET": "uint32",
    "VGPU_TRACE_LIST_A_PTR": "uint64",
    "VGPU_TRACE_LIST_A_IN": "cdata",
    "VGPU_TRACE_LIST_A_OUT": "cdata",
    "VGPU_TRACE_LIST_A_PAD": "none",
}


def _nla_map(names: list[str], types: dict[str, str]) -> tuple:
    # an attribute the header gained but this table lacks still decodes (as hex)
    return tuple((n, types.get(n, "hex")) for n in names)


class vgpumsg(genlmsg):
    """A message of the vgpu family (command in 'cmd', attributes VGPU_A_*)."""

    prefix = "VGPU_A_"
    nla_map = _nla_map(U.SLICE_ATTRS, SLICE_ATTR_TYPES)

    class slice_list(nla):
        """VGPU_A_SLICE_GPUS / _PIDS / _ALLOW and VGPU_A_AUDIT: a nest of
        list entries (enum vgpu_list_attr)."""
        prefix = "VGPU_A_"
        nla_flags = NLA_F_NESTED
        nla_map = _nla_map(U.LIST_ATTRS, LIST_ATTR_TYPES)

        class gpu(nla):
            prefix = "VGPU_GPU_A_"
            nla_flags = NLA_F_NESTED
            nla_map = _nla_map(U.GPU_ATTRS, GPU_ATTR_TYPES)

        class audit_entry(nla):
            """One item of an audit record (VGPU_AUDIT_A_*)."""
            prefix = "VGPU_AUDIT_A_"
            nla_flags = NLA_F_NESTED
            nla_map = _nla_map(U.AUDIT_ATTRS, AUDIT_ATTR_TYPES)

    class trace(nla):
        """VGPU_A_TRACE: one traced call (VGPU_TRACE_A_*)."""
        prefix = "VGPU_TRACE_A_"
        nla_flags = NLA_F_NESTED
        nla_map = _nla_map(U.TRACE_ATTRS, TRACE_ATTR_TYPES)

        class trace_list(nla):
            """VGPU_TRACE_A_LIST: one embedded list (VGPU_TRACE_LIST_A_*)."""
            prefix = "VGPU_TRACE_LIST_A_"
            nla_flags = NLA_F_NESTED
            nla_map = _nla_map(U.TRACE_LIST_ATTRS, TRACE_LIST_ATTR_TYPES)


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
        return self.devno(U.VGPU_MINOR_CTL)

    @property
    def uvm_devno(self) -> int:
        return self.devno(U.VGPU_MINOR_UVM)

    def gpu_devno(self, index: int) -> int:
        return self.devno(U.VGPU_MINOR_GPU0 + index)

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
        return U.AUDIT_KIND_NAMES.get(self.kind, f"kind-{self.kind}")

    @property
    def verdict_name(self) -> str:
        return U.AUDIT_VERDICT_NAMES.get(self.verdict, f"verdict-{self.verdict}")


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
        return U.EVENT_NAMES.get(self.type, f"VGPU_EVENT_{self.type}")


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
                not 0 <= kind < U.__VGPU_AUDIT_KIND_MAX:
            raise ValueError(f"allow[{i}]: kind {kind!r} is not an enum vgpu_audit_kind "
                             f"(0..{U.__VGPU_AUDIT_KIND_MAX - 1})")
        if isinstance(number, bool) or not isinstance(number, int) or \
                not 0 <= number <= 0xFFFFFFFF:
            raise ValueError(f"allow[{i}]: number {number!r} is not a u32")
        keys.add((kind << 32) | number)
    if len(keys) > U.VGPU_MAX_ALLOW:
        raise ValueError(f"allow: {len(keys)} items, more than VGPU_MAX_ALLOW "
                         f"({U.VGPU_MAX_ALLOW})")
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


# ------------------------------------------------- raw attribute encoding
@dataclass
class Nla:
    """A raw attribute for raw_request: type, payload bytes (or a list of
    nested Nla), optional NLA_F_* flag bits and a length override (the
    nla_len written in the header, for malformed-length tests)."""
    type: int
    data: bytes | list["Nla"] = b""
    flags: int = 0
    length: int | None = None

    @classmethod
    def u8(cls, t: int, v: int) -> "Nla":
        return cls(t, struct.pack("=B", v & 0xFF))

    @classmethod
    def u32(cls, t: int, v: int) -> "Nla":
        return cls(t, struct.pack("=I", v & 0xFFFFFFFF))

    @classmethod
    def u64(cls, t: int, v: int) -> "Nla":
        return cls(t, struct.pack("=Q", v & 0xFFFFFFFFFFFFFFFF))

    @classmethod
    def string(cls, t: int, s: str | bytes, nul: bool = True) -> "Nla":
        b = s.encode() if isinstance(s, str) else bytes(s)
        return cls(t, b + (b"\0" if nul else b""))

    @classmethod
    def nest(cls, t: int, *children: "Nla", flag: bool = True) -> "Nla":
        return cls(t, list(children), NLA_F_NESTED if flag else 0)


def encode_attrs(attrs) -> bytes:
    """Encode a list of Nla (or (type, value) pairs: int -> u32, bytes -> raw,
    list -> nest with NLA_F_NESTED)."""
    out = bytearray()
    for a in attrs:
        if not isinstance(a, Nla):
            t, v = a
            if isinstance(v, bool) or isinstance(v, int):
                a = Nla.u32(t, int(v))
            elif isinstance(v, (bytes, bytearray)):
                a = Nla(t, bytes(v))
            elif isinstance(v, str):
                a = Nla.string(t, v)
            else:
                a = Nla(t, list(v), NLA_F_NESTED)
        payload = encode_attrs(a.data) if isinstance(a.data, list) else bytes(a.data)
        length = _NLAHDR.size + len(payload) if a.length is None else a.length
        out += _NLAHDR.pack(length & 0xFFFF, (a.type | a.flags) & 0xFFFF)
        out += payload
        out += bytes(_align4(len(payload)) - len(payload))
    return bytes(out)


# ----------------------------------------------------------------- socket
class _GenlSocket:
    """A blocking NETLINK_GENERIC socket with extended acks."""

    def __init__(self, timeout: float | None):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_GENERIC)
        try:
            self.sock.bind((0, 0))
            self.pid = self.sock.getsockname()[0]
            for opt in (NETLINK_EXT_ACK, NETLINK_CAP_ACK):
                try:
                    self.sock.setsockopt(SOL_NETLINK, opt, 1)
                except OSError:
                    pass
            self.sock.settimeout(timeout)
        except BaseException:
            self.sock.close()
            raise
        self.seq = int(time.monotonic_ns() & 0xFFFF) << 8

    def close(self) -> None:
        self.sock.close()

    def send(self, mtype: int, flags: int, payload: bytes) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF or 1
        hdr = _NLHDR.pack(_NLHDR.size + len(payload), mtype, flags, self.seq, 0)
        self.sock.sendto(hdr + payload, (0, 0))
        return self.seq

    def recv_msgs(self) -> list[tuple[int, int, int, bytes]]:
        """One datagram, split: [(type, flags, seq, whole message bytes)]."""
        data = self.sock.recv(RECV_BUF)
        out = []
        off = 0
        while off + _NLHDR.size <= len(data):
            length, mtype, flags, seq, _pid = _NLHDR.unpack_from(data, off)
            if length < _NLHDR.size or off + length > len(data):
                break
            out.append((mtype, flags, seq, data[off:off + length]))
            off += _align4(length)
        return out


def parse_error(flags: int, msg: bytes, op: str = "") -> VgpuError | None:
    """NLMSG_ERROR (or NLMSG_DONE of a dump) -> VgpuError, None for an ACK."""
    if len(msg) < _NLHDR.size + 4:
        return VgpuError(_errno.EPROTO, "truncated netlink error message", op=op)
    (err,) = struct.unpack_from("=i", msg, _NLHDR.size)
    if err == 0:
        return None
    extack = offs = miss_type = miss_nest = None
    if flags & NLM_F_ACK_TLVS:
        mtype = struct.unpack_from("=H", msg, 4)[0]
        if mtype == NLMSG_ERROR:
            pos = _NLHDR.size + 4
            if flags & NLM_F_CAPPED or len(msg) < pos + _NLHDR.size:
                pos += _NLHDR.size
            else:
                pos += _align4(struct.unpack_from("=I", msg, pos)[0])
        else:
            pos = _NLHDR.size + 4
        while pos + _NLAHDR.size <= len(msg):
            ln, t = _NLAHDR.unpack_from(msg, pos)
            if ln < _NLAHDR.size:
                break
            val = msg[pos + 4:pos + ln]
            t &= 0x3FFF
            if t == NLMSGERR_ATTR_MSG:
                extack = val.split(b"\0", 1)[0].decode(errors="replace")
            elif t == NLMSGERR_ATTR_OFFS and len(val) >= 4:
                offs = struct.unpack_from("=I", val)[0]
            elif t == NLMSGERR_ATTR_MISS_TYPE and len(val) >= 4:
                miss_type = struct.unpack_from("=I", val)[0]
            elif t == NLMSGERR_ATTR_MISS_NEST and len(val) >= 4:
                miss_nest = struct.unpack_from("=I", val)[0]
            pos += _align4(ln)
    return VgpuError(-err, None, op=op, extack=extack, offset=offs, miss_type=miss_type,
                     miss_nest=miss_nest)


def _resolve_family(gs: _GenlSocket, name: str) -> tuple[int, dict[str, int]]:
    msg = ctrlmsg()
    msg["cmd"] = CTRL_CMD_GETFAMILY
    msg["version"] = 1
    msg["attrs"].append(["CTRL_ATTR_FAMILY_NAME", name])
    msg.encode()
    payload = bytes(msg.data[_NLHDR.size:])
    seq = gs.send(GENL_ID_CTRL, NLM_F_REQUEST, payload)
    while True:
        for mtype, flags, mseq, data in gs.recv_msgs():
            if mseq != seq:
                continue
            if mtype == NLMSG_ERROR:
                err = parse_error(flags, data, "CTRL_CMD_GETFAMILY")
                if err is None:
                    continue
                if err.errno == _errno.ENOENT:
                    raise VgpuNotLoaded()
                raise err
            reply = ctrlmsg(data)
            reply.decode()
            groups = {g.get_attr("CTRL_ATTR_MCAST_GRP_NAME"): g.get_attr("CTRL_ATTR_MCAST_GRP_ID")
                      for g in reply.get_attr("CTRL_ATTR_MCAST_GROUPS", [])}
            return reply.get_attr("CTRL_ATTR_FAMILY_ID"), groups


def _decode(data: bytes):
    m = vgpumsg(data)
    m.decode()
    return m


# ------------------------------------------------------------------ client
class VgpuKernel:
    """A synchronous client of vgpu.ko's netlink family.

    Thread-safe (one request at a time per instance).  ``timeout`` bounds
    every wait for the kernel's answer (seconds; None waits forever)."""

    def __init__(self, timeout: float | None = 10.0):
        self.timeout = timeout
        self._lock = threading.Lock()
        self._gs = _GenlSocket(timeout)
        try:
            self.family_id, self.mcast_groups = _resolve_family(self._gs, U.VGPU_GENL_NAME)
        except BaseException:
            self._gs.close()
            raise

    def close(self) -> None:
        self._gs.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def is_current(self) -> bool:
        """Whether the family this client resolved is still the one vgpu.ko
        has registered: one CTRL_CMD_GETFAMILY round trip.  False when the
        module is gone (VgpuNotLoaded) or was loaded again (a new family id:
        genl allocates ids cyclically, so a reload gets another one)."""
        with self._lock:
            try:
                fid, _ = _resolve_family(self._gs, U.VGPU_GENL_NAME)
            except VgpuNotLoaded:
                return False
            except socket.timeout:
                raise VgpuError(_errno.ETIMEDOUT, f"no answer from nlctrl within "
                                f"{self.timeout}s", op="GETFAMILY") from None
        return fid == self.family_id

    # -------------------------------------------------------- plumbing
    def _transact(self, cmd: int, payload_attrs: bytes, flags: int, *, op: str,
                  version: int = U.VGPU_GENL_VERSION, raw_payload: bytes | None = None,
                  mtype: int | None = None) -> list:
        """Send one request and collect replies until the ACK / DONE / error."""
        payload = raw_payload if raw_payload is not None else \
            _GENLHDR.pack(cmd, version, 0) + payload_attrs
        dump = bool(flags & NLM_F_DUMP)
        out = []
        with self._lock:
            seq = self._gs.send(self.family_id if mtype is None else mtype, flags, payload)
            while True:
                try:
                    msgs = self._gs.recv_msgs()
                except socket.timeout:
                    raise VgpuError(_errno.ETIMEDOUT, f"no answer from vgpu.ko within "
                                    f"{self.timeout}s", op=op) from None
                for t, f, s, data in msgs:
                    if s != seq:
                        continue            # a late answer to an abandoned request
                    if t == NLMSG_ERROR:
                        err = parse_error(f, data, op)
                        if err is not None:
                            raise err
                        return out          # the ACK
                    if t == NLMSG_DONE:
                        err = parse_error(f, data, op) if len(data) >= _NLHDR.size + 4 else None
                        if err is not None:
                            raise err
                        return out
                    if t in (NLMSG_NOOP, NLMSG_OVERRUN):
                        continue
                    out.append(_decode(data))
                    if not dump and not (flags & NLM_F_ACK) and not (f & NLM_F_MULTI):
                        return out

    def _request(self, cmd: int, attrs: list, *, dump: bool = False) -> list:
        msg = vgpumsg()
        msg["cmd"] = cmd
        msg["version"] = U.VGPU_GENL_VERSION
        msg["attrs"] = attrs
        msg["header"]["type"] = self.family_id
        msg.encode()
        payload = bytes(msg.data[_NLHDR.size + _GENLHDR.size:])
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        return self._transact(cmd, payload, flags, op=U.CMD_NAMES.get(cmd, str(cmd))[5:])

    def raw_request(self, cmd: int, attrs=(), *, flags: int | None = None,
                    version: int = U.VGPU_GENL_VERSION, payload: bytes | None = None,
                    dump: bool = False, mtype: int | None = None) -> list:
        """Send cmd with arbitrary attributes (Nla objects or (type, value)
        pairs, see encode_attrs), or an arbitrary genl payload (header
        included) with payload=.  Returns the decoded replies (vgpumsg);
        raises VgpuError with the kernel's errno and extack."""
        if flags is None:
            flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        return self._transact(cmd, encode_attrs(attrs), flags, op=f"raw cmd {cmd}",
                              version=version, raw_payload=payload, mtype=mtype)

    # -------------------------------------------------------- commands
    def slice_new(self, id: int, gpus, name: str | None = None,
                  uvm_policy: int | None = None, flags: int | None = None,
                  cgroup_fd: int | None = None, compute: dict | None = None,
                  max_channels: int | None = None, audit: bool | None = None,
                  allow: list[tuple[int, int]] | None = None,
                  trace: bool | None = None) -> Slice:
        """Create slice id with gpus = [(real_minor, mem_limit[, gpu_id]), ...];
        cgroup_fd: an open fd of a cgroup v2 directory to bind the slice to;
        compute: {container GPU index: Compute | (policy, bp[, priority]) | dict};
        max_channels: channels the slice may hold on each of its GPUs (0: no
        cap; None: the kernel's default); audit: audit mode (None: the
        kernel's default, off); allow: its allow-list, [(enum
        vgpu_audit_kind, number), ...] (None: none); trace: send its calls on
        the "trace" group (None: off).  A bad allow entry raises ValueError
        before anything is sent."""
        tail = _audit_attrs(audit, allow, trace)
        compute = {int(i): Compute.of(c) for i, c in (compute or {}).items()}
        entries = []
        for i, g in enumerate(gpus):
            real_minor, limit = g[0], g[1]
            ga = [["VGPU_GPU_A_REAL_MINOR", int(real_minor)],
                  ["VGPU_GPU_A_MEM_LIMIT", int(limit)]]
            if len(g) > 2 and g[2] is not None:
                ga.append(["VGPU_GPU_A_GPU_ID", int(g[2])])
            if i in compute:
                ga += compute[i].attrs()
            entries.append(["VGPU_A_GPU", {"attrs": ga}])
        attrs = [["VGPU_A_SLICE_ID", int(id)], ["VGPU_A_SLICE_GPUS", {"attrs": entries}]]
        if name is not None:
            attrs.append(["VGPU_A_SLICE_NAME", name])
        if uvm_policy is not None:
            attrs.append(["VGPU_A_SLICE_UVM_POLICY", int(uvm_policy)])
        if flags is not None:
            attrs.append(["VGPU_A_SLICE_FLAGS", int(flags)])
        if cgroup_fd is not None:
            attrs.append(["VGPU_A_SLICE_CGROUP_FD", int(cgroup_fd)])
        if max_channels is not None:
            attrs.append(["VGPU_A_SLICE_MAX_CHANNELS", int(max_channels)])
        attrs += tail
        replies = self._request(U.VGPU_CMD_SLICE_NEW, attrs)
        for r in replies:
            return slice_from_msg(r)
        return self.slice_get(id)

    def slice_set(self, id: int, limits: dict[int, int] | None = None,
                  uvm_policy: int | None = None, cgroup_fd: int | None = None,
                  compute: dict | None = None,
                  max_channels: int | None = None, audit: bool | None = None,
                  allow: list[tuple[int, int]] | None = None,
                  trace: bool | None = None) -> Slice | None:
        """Change limits ({container GPU index: bytes}), compute settings
        ({index: Compute | (policy, bp[, priority]) | dict}), the UVM policy,
        the bound cgroup (cgroup_fd: an open fd of a cgroup v2 directory),
        the per-GPU channel cap (max_channels, 0: no cap), audit mode
        (audit) and/or the allow-list (allow: [(kind, number), ...] replaces
        it; [] clears it) and/or tracing (trace).  None leaves a setting as
        it is."""
        tail = _audit_attrs(audit, allow, trace)
        attrs = [["VGPU_A_SLICE_ID", int(id)]]
        limits = {int(i): b for i, b in (limits or {}).items()}
        compute = {int(i): Compute.of(c) for i, c in (compute or {}).items()}
        if limits or compute:
            entries = []
            for i in sorted(set(limits) | set(compute)):
                ga = [["VGPU_GPU_A_INDEX", i]]
                if i in limits:
                    ga.append(["VGPU_GPU_A_MEM_LIMIT", int(limits[i])])
                if i in compute:
                    ga += compute[i].attrs()
                entries.append(["VGPU_A_GPU", {"attrs": ga}])
            attrs.append(["VGPU_A_SLICE_GPUS", {"attrs": entries}])
        if uvm_policy is not None:
            attrs.append(["VGPU_A_SLICE_UVM_POLICY", int(uvm_policy)])
        if cgroup_fd is not None:
            attrs.append(["VGPU_A_SLICE_CGROUP_FD", int(cgroup_fd)])
        if max_channels is not None:
            attrs.append(["VGPU_A_SLICE_MAX_CHANNELS", int(max_channels)])
        attrs += tail
        replies = self._request(U.VGPU_CMD_SLICE_SET, attrs)
        return slice_from_msg(replies[0]) if replies else None

    def slice_del(self, id: int, force: bool = False) -> None:
        attrs = [["VGPU_A_SLICE_ID", int(id)]]
        if force:
            attrs.append(["VGPU_A_SLICE_FLAGS", U.VGPU_SLICE_F_FORCE])
        self._request(U.VGPU_CMD_SLICE_DEL, attrs)

    def slice_get(self, id: int) -> Slice:
        replies = self._request(U.VGPU_CMD_SLICE_GET, [["VGPU_A_SLICE_ID", int(id)]])
        if not replies:
            raise VgpuError(_errno.EPROTO, "SLICE_GET answered without a slice", op="SLICE_GET")
        return slice_from_msg(replies[0])

    def slices(self) -> list[Slice]:
        """Every slice, with its usage (a dump)."""
        return [slice_from_msg(m) for m in self._request(U.VGPU_CMD_SLICE_GET, [], dump=True)]

    # ----------------------------------------------------------- audit
    def audit_get(self, slice_id: int) -> AuditRecord:
        """A slice's audit record (VGPU_CMD_AUDIT_GET, a dump of one slice:
        the kernel snapshots the record and sends its items over as many
        messages as they need).  ENOENT: no such slice."""
        msgs = self._request(U.VGPU_CMD_AUDIT_GET, [["VGPU_A_SLICE_ID", int(slice_id)]],
                             dump=True)
        return audit_from_msgs(msgs, int(slice_id))

    # ------------------------------------------------------- scheduler
    def sched_set(self, real_minor: int, period_us: int | None = None,
                  layers: int | None = None) -> SchedInfo:
        """Set a real GPU's scheduling period and/or layers (VGPU_SCHED_L_*);
        creates its scheduler if it has none yet."""
        attrs = [["VGPU_A_SCHED_REAL_MINOR", int(real_minor)]]
        if period_us is not None:
            attrs.append(["VGPU_A_SCHED_PERIOD_US", int(period_us)])
        if layers is not None:
            attrs.append(["VGPU_A_SCHED_LAYERS", int(layers)])
        replies = self._request(U.VGPU_CMD_SCHED_SET, attrs)
        return sched_from_msg(replies[0]) if replies else self.sched_get(real_minor)

    def sched_get(self, real_minor: int) -> SchedInfo:
        replies = self._request(U.VGPU_CMD_SCHED_GET,
                                [["VGPU_A_SCHED_REAL_MINOR", int(real_minor)]])
        if not replies:
            raise VgpuError(_errno.EPROTO, "SCHED_GET answered without a scheduler",
                            op="SCHED_GET")
        return sched_from_msg(replies[0])

    def scheds(self) -> list[SchedInfo]:
        """Every real GPU's scheduler (a dump)."""
        return [sched_from_msg(m) for m in self._request(U.VGPU_CMD_SCHED_GET, [], dump=True)]

    # ---------------------------------------------------------- events
    def subscribe(self, timeout: float | None = None) -> "EventStream":
        """A new socket joined to the events group (join before acting, so
        nothing is missed)."""
        gid = self.mcast_groups.get(U.VGPU_GENL_MCGRP_EVENTS)
        if gid is None:
            raise VgpuError(_errno.ENOENT, f"family '{U.VGPU_GENL_NAME}' has no multicast group "
                            f"'{U.VGPU_GENL_MCGRP_EVENTS}'", op="subscribe")
        return EventStream(self.family_id, gid, timeout)

    def trace_stream(self, timeout: float | None = None,
                     rcvbuf: int = TRACE_RCVBUF) -> "TraceStream":
        """A new socket joined to the "trace" group: the calls of every
        slice whose VGPU_A_SLICE_TRACE is on (join before turning it on)."""
        gid = self.mcast_groups.get(U.VGPU_GENL_MCGRP_TRACE)
        if gid is None:
            raise VgpuError(_errno.ENOENT, f"family '{U.VGPU_GENL_NAME}' has no multicast group "
                            f"'{U.VGPU_GENL_MCGRP_TRACE}' (vgpu.ko older than tracing)",
                            op="trace")
        return TraceStream(self.family_id, gid, timeout, rcvbuf)

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Events as they come; stops after timeout seconds without one."""
        with self.subscribe(timeout) as es:
            yield from es


class _GroupStream:
    """A socket joined to one multicast group of the vgpu family, decoding
    messages of one command (``CMD``) with ``_item``; the subclasses say
    what an overrun (ENOBUFS: the socket's buffer was full, messages were
    lost) means for their listener."""

    CMD = -1

    def __init__(self, family_id: int, group: int, timeout: float | None = None,
                 rcvbuf: int | None = None):
        self.family_id = family_id
        self.timeout = timeout
        self._gs = _GenlSocket(None)
        self._pending: list = []
        try:
            if rcvbuf is not None:
                try:    # past rmem_max needs CAP_NET_ADMIN, which a listener has anyway
                    self._gs.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
                except OSError:
                    self._gs.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self._gs.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)
        except BaseException:
            self._gs.close()
            raise

    def close(self) -> None:
        self._gs.close()

    def fileno(self) -> int:
        return self._gs.sock.fileno()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _item(self, msg):
        raise NotImplementedError

    def _overrun(self) -> None:
        raise NotImplementedError

    def ready(self, limit: int | None = None) -> list:
        """The items that can be read without waiting, at most about limit
        of them (a datagram's messages come whole; None: until the socket is
        empty).  An event loop calls this once the socket is readable, and
        again, after a checkpoint, while it returns items."""
        out, self._pending = self._pending, []
        while limit is None or len(out) < limit:
            r, _, _ = select.select([self._gs.sock], [], [], 0)
            if not r:
                return out
            try:
                msgs = self._gs.recv_msgs()
            except OSError as e:
                if e.errno == _errno.ENOBUFS:
                    self._overrun()
                    continue
                raise
            for t, _f, _s, data in msgs:
                if t == self.family_id:
                    m = _decode(data)
                    if m["cmd"] == self.CMD:
                        item = self._item(m)
                        if item is not None:
                            out.append(item)
        return out

    def get(self, timeout: float | None = -1.0):
        """The next item, or None after timeout seconds (default: the
        stream's timeout; None waits forever)."""
        if timeout == -1.0:
            timeout = self.timeout
        end = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            left = None if end is None else max(0.0, end - time.monotonic())
            r, _, _ = select.select([self._gs.sock], [], [], left)
            if not r:
                return None
            self._pending = self.ready()
        return self._pending.pop(0)

    def drain(self, timeout: float = 0.2) -> list:
        out = []
        while (item := self.get(timeout)) is not None:
            out.append(item)
        return out

    def __iter__(self) -> Iterator:
        while (item := self.get()) is not None:
            yield item


class EventStream(_GroupStream):
    """Events of the vgpu family's "events" multicast group.  An overrun
    raises VgpuError(ENOBUFS): events were lost, and a listener that keeps
    state from them must read the slices again."""

    CMD = U.VGPU_CMD_EVENT

    def _item(self, msg) -> Event:
        return event_from_msg(msg)

    def _overrun(self) -> None:
        raise VgpuError(_errno.ENOBUFS, "event queue overrun: events lost", op="events")

    def wait_for(self, pred, timeout: float = 5.0) -> Event | None:
        """The first event for which pred(event) holds, within timeout."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            ev = self.get(left)
            if ev is None:
                return None
            if pred(ev):
                return ev


class TraceStream(_GroupStream):
    """Records of the vgpu family's "trace" multicast group (docs/trace.md).

    A listener that falls behind loses records: the kernel's send fails for
    this socket, which sees ENOBUFS once; ``overruns`` counts those, and the
    records' sequence numbers show how many were lost."""

    CMD = U.VGPU_CMD_TRACE

    def __init__(self, family_id: int, group: int, timeout: float | None = None,
                 rcvbuf: int = TRACE_RCVBUF):
        self.overruns = 0
        super().__init__(family_id, group, timeout, rcvbuf)

    def _item(self, msg) -> TraceRecord | None:
        return trace_from_msg(msg)

    def _overrun(self) -> None:
        self.overruns += 1

