"""Python mirror of kmod/include/uapi/vgpu.h: the netlink API of vgpu.ko.

Both are generated from one spec, kmod/netlink/vgpu.yaml (tools/ynl_gen.py,
make generate): the values come from vgpu/abi/uapi_gen.py, the registries
below are written here.  Every #define and enum member named VGPU_* in the
header has a twin here with the same name and value, and
tests/host/test_uapi.py compiles a program against the header that prints
each value, compares, and fails on any VGPU_* name of the header missing
here (or any here that the header lacks).

Standard library only: the CLI and the hook may import it at start-up.
"""

from __future__ import annotations

# Every VGPU_* and __VGPU_* name of the header, generated from the same spec
# (kmod/netlink/vgpu.yaml, make generate).
# (__all__ there names the __VGPU_*_MAX counts too.)
from vgpu.abi.uapi_gen import *  # noqa: F401,F403


# ------------------------------------------------------------ registries
def _prefixed(prefix: str) -> dict[str, int]:
    return {k: v for k, v in globals().items()
            if k.startswith(prefix) and type(v) is int and not k.startswith("__")}


def uapi_constants() -> dict[str, object]:
    """Every mirrored name (VGPU_* and __VGPU_*) with its value (int or str)."""
    return {k: v for k, v in globals().items()
            if (k.startswith("VGPU_") or k.startswith("__VGPU_")) and type(v) in (int, str)}


#: enum vgpu_list_attr, in enum order: its members share the VGPU_A_ prefix
#: with enum vgpu_attr's, so they are named here, not found by prefix.
LIST_ATTRS = ["VGPU_A_LIST_UNSPEC", "VGPU_A_GPU", "VGPU_A_PID", "VGPU_A_ALLOW",
              "VGPU_A_AUDIT_ENTRY"]


def names_by_value(prefix: str, exclude_max: bool = True) -> dict[int, str]:
    """value -> name for the members of one enum, e.g. "VGPU_CMD_"."""
    out = {}
    for k, v in _prefixed(prefix).items():
        if exclude_max and k.endswith("_MAX"):
            continue
        if prefix == "VGPU_A_" and (k.startswith("VGPU_A_LIST_") or k in LIST_ATTRS):
            continue
        out.setdefault(v, k)
    return out


def _in_order(prefix: str, count: int) -> list[str]:
    """The names of one enum's members 0..count-1, in order (a KeyError for a gap)."""
    names = names_by_value(prefix)
    return [names[i] for i in range(count)]


#: Attribute tables in enum order (index == attribute type).
SLICE_ATTRS = _in_order("VGPU_A_", __VGPU_A_MAX)
assert not any(n.startswith("VGPU_A_LIST_") or n in LIST_ATTRS for n in SLICE_ATTRS)
assert [globals()[n] for n in LIST_ATTRS] == list(range(__VGPU_A_LIST_MAX))
GPU_ATTRS = _in_order("VGPU_GPU_A_", __VGPU_GPU_A_MAX)
AUDIT_ATTRS = _in_order("VGPU_AUDIT_A_", __VGPU_AUDIT_A_MAX)
TRACE_ATTRS = _in_order("VGPU_TRACE_A_", __VGPU_TRACE_A_MAX)
TRACE_LIST_ATTRS = _in_order("VGPU_TRACE_LIST_A_", __VGPU_TRACE_LIST_A_MAX)
#: enum vgpu_trace_op -> its name in trace files
TRACE_OP_NAMES = {VGPU_TRACE_OPEN: "open", VGPU_TRACE_CLOSE: "close",
                  VGPU_TRACE_IOCTL: "ioctl", VGPU_TRACE_MMAP: "mmap"}
assert sorted(TRACE_OP_NAMES) == list(range(__VGPU_TRACE_OP_MAX))
CMD_NAMES = {v: k for k, v in _prefixed("VGPU_CMD_").items() if not k.endswith("_MAX")}
EVENT_NAMES = {v: k for k, v in _prefixed("VGPU_EVENT_").items() if not k.endswith("_MAX")}
#: enum vgpu_event -> the event's "type" in the daemon's API (docs/api.md),
#: derived from the member's name: VGPU_EVENT_SLICE_EMPTIED -> "slice-emptied"
EVENT_API_NAMES = {v: k[len("VGPU_EVENT_"):].lower().replace("_", "-")
                   for v, k in EVENT_NAMES.items() if v != VGPU_EVENT_UNSPEC}
UVM_POLICY_NAMES = {VGPU_UVM_COUNT: "count", VGPU_UVM_REFUSE: "refuse"}
COMPUTE_POLICY_NAMES = {VGPU_COMPUTE_NONE: "none", VGPU_COMPUTE_SHARE: "share",
                        VGPU_COMPUTE_FIXED: "fixed", VGPU_COMPUTE_BURST: "burst"}
PRIORITY_NAMES = {VGPU_PRIORITY_LOW: "low", VGPU_PRIORITY_HIGH: "high"}
#: enum vgpu_audit_kind -> the name the policy tables (kmod/vgpu/policy/*.tsv), the
#: allow-list files and the API use; the index is the kind's value
AUDIT_KINDS = ("escape", "class", "control", "uvm")
AUDIT_KIND_NAMES = dict(enumerate(AUDIT_KINDS))
#: enum vgpu_audit_verdict -> its name in the API and vgpuctl
AUDIT_VERDICT_NAMES = {VGPU_AUDIT_FORWARD: "forward", VGPU_AUDIT_REWRITE: "rewrite",
                       VGPU_AUDIT_VIRTUALISE: "virtualise", VGPU_AUDIT_REFUSE: "refuse",
                       VGPU_AUDIT_NOT_IMPLEMENTED: "not-implemented"}
assert len(AUDIT_KINDS) == __VGPU_AUDIT_KIND_MAX
assert sorted(AUDIT_VERDICT_NAMES) == list(range(__VGPU_AUDIT_VERDICT_MAX))
