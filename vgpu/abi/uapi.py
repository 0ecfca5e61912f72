"""Python mirror of kmod/include/uapi/vgpu.h: the netlink API of vgpu.ko.

The C header is the single source of truth.  Every #define and enum member
named VGPU_* there has a twin here with the same name and value, and
tests/host/test_uapi.py compiles a program against the header that prints
each value, compares, and fails on any VGPU_* name of the header missing
here (or any here that the header lacks).

Standard library only: the CLI and the hook may import it at start-up.
"""

from __future__ import annotations

VGPU_GENL_NAME = "vgpu"
VGPU_GENL_VERSION = 1
VGPU_GENL_MCGRP_EVENTS = "events"
VGPU_GENL_MCGRP_TRACE = "trace"

# Limits.
VGPU_MAX_SLICE_GPUS = 8
VGPU_MAX_ALLOW = 4096              # allow-list entries per slice
VGPU_MAX_AUDIT_ENTRIES = 4096      # audit record items per slice
VGPU_SLICE_NAME_MAX = 128          # including the terminating NUL
VGPU_TRACE_MAX_PARAMS = 16384      # bytes of each parameter blob of a trace record
VGPU_TRACE_MAX_BLOBS = 57344       # bytes of all the blobs of one trace record

# Minors of a slice, relative to its base minor.
VGPU_MINORS_PER_SLICE = 16
VGPU_MINOR_CTL = 0
VGPU_MINOR_UVM = 1
VGPU_MINOR_GPU0 = 2

# enum vgpu_cmd
VGPU_CMD_UNSPEC = 0
VGPU_CMD_SLICE_NEW = 1
VGPU_CMD_SLICE_SET = 2
VGPU_CMD_SLICE_DEL = 3
VGPU_CMD_SLICE_GET = 4
VGPU_CMD_EVENT = 5
VGPU_CMD_SCHED_SET = 6
VGPU_CMD_SCHED_GET = 7
VGPU_CMD_AUDIT_GET = 8             # dump only; the request carries VGPU_A_SLICE_ID
VGPU_CMD_TRACE = 9                 # only sent, on the "trace" group
__VGPU_CMD_MAX = 10
VGPU_CMD_MAX = __VGPU_CMD_MAX - 1

# enum vgpu_attr: top-level attributes
VGPU_A_UNSPEC = 0
VGPU_A_SLICE_ID = 1              # u32, not 0
VGPU_A_SLICE_NAME = 2            # NUL-terminated string
VGPU_A_SLICE_FLAGS = 3           # u32, VGPU_SLICE_F_*
VGPU_A_SLICE_UVM_POLICY = 4      # u32, enum vgpu_uvm_policy
VGPU_A_SLICE_GPUS = 5            # nested: VGPU_A_GPU entries
VGPU_A_SLICE_MAJOR = 6           # u32, reply only
VGPU_A_SLICE_BASE_MINOR = 7      # u32, reply only
VGPU_A_SLICE_OPEN_FILES = 8      # u32, reply only
VGPU_A_SLICE_PIDS = 9            # nested: VGPU_A_PID u32 entries, reply only
VGPU_A_SLICE_UVM_MAPPED = 10     # u64, reply only
VGPU_A_EVENT_TYPE = 11           # u32, enum vgpu_event
VGPU_A_EVENT_PID = 12            # u32
VGPU_A_EVENT_GPU = 13            # u32, container's GPU index
VGPU_A_EVENT_SIZE = 14           # u64, bytes asked
VGPU_A_PAD = 15
VGPU_A_SLICE_CGROUP_FD = 16      # u32, fd of a cgroup v2 directory; NEW, SET
VGPU_A_SLICE_CGROUP_ID = 17      # u64, bound cgroup's id (0: none), reply only
VGPU_A_SCHED_REAL_MINOR = 18     # u32, real GPU minor; SCHED_SET, SCHED_GET
VGPU_A_SCHED_PERIOD_US = 19      # u32, VGPU_SCHED_PERIOD_MIN_US..MAX_US; SCHED_SET
VGPU_A_SCHED_LAYERS = 20         # u32, VGPU_SCHED_L_* flags; SCHED_SET
VGPU_A_SCHED_SWITCHES = 21       # u64, reply only
VGPU_A_SCHED_CPU_NS = 22         # u64, the scheduler's own CPU time, reply only
VGPU_A_SLICE_MAX_CHANNELS = 23   # u32, channels per GPU of the slice (0: no cap); NEW, SET
VGPU_A_SLICE_QUARANTINED = 24    # u8, reply only: 1 once a call of the slice broke
VGPU_A_SLICE_AUDIT = 25          # u8, 0 or 1: audit mode; NEW, SET; replies carry it
VGPU_A_SLICE_ALLOW = 26          # nested: VGPU_A_ALLOW entries, the allow-list; NEW, SET
VGPU_A_SLICE_ALLOW_COUNT = 27    # u32, entries of the allow-list, reply only
VGPU_A_AUDIT = 28                # nested: VGPU_A_AUDIT_ENTRY entries, AUDIT_GET replies only
VGPU_A_AUDIT_DROPPED = 29        # u64, calls not recorded (record full), AUDIT_GET replies only
VGPU_A_SLICE_TRACE = 30          # u8, 0 or 1: send the slice's calls on the "trace" group
VGPU_A_TRACE = 31                # nested: VGPU_TRACE_A_*, VGPU_CMD_TRACE only
VGPU_A_SLICE_PIDS_TRUNCATED = 32 # u8, reply only: 1 when a dump cut VGPU_A_SLICE_PIDS short
__VGPU_A_MAX = 33
VGPU_A_MAX = __VGPU_A_MAX - 1

# enum vgpu_list_attr: entries of the GPUS, PIDS, ALLOW and AUDIT nests
VGPU_A_LIST_UNSPEC = 0
VGPU_A_GPU = 1                   # nested: VGPU_GPU_A_*
VGPU_A_PID = 2                   # u32
VGPU_A_ALLOW = 3                 # u64: (enum vgpu_audit_kind << 32) | number
VGPU_A_AUDIT_ENTRY = 4           # nested: VGPU_AUDIT_A_*, reply only
__VGPU_A_LIST_MAX = 5
VGPU_A_LIST_MAX = __VGPU_A_LIST_MAX - 1

# enum vgpu_gpu_attr: one GPU of a slice
VGPU_GPU_A_UNSPEC = 0
VGPU_GPU_A_INDEX = 1             # u32, container's GPU number; SET names GPUs by it
VGPU_GPU_A_REAL_MINOR = 2        # u32, minor of the real /dev/nvidiaN; NEW
VGPU_GPU_A_MEM_LIMIT = 3         # u64 bytes
VGPU_GPU_A_MEM_USED = 4          # u64, reply only
VGPU_GPU_A_MEM_PEAK = 5          # u64, reply only
VGPU_GPU_A_ALLOCS = 6            # u64, live FB allocations, reply only
VGPU_GPU_A_REFUSALS = 7          # u64, reply only
VGPU_GPU_A_MINOR = 8             # u32, the virtual node's minor, reply only
VGPU_GPU_A_GPU_ID = 9            # u32, the driver's gpu_id; NEW, optional
VGPU_GPU_A_PAD = 10
VGPU_GPU_A_COMPUTE_POLICY = 11   # u32, enum vgpu_compute_policy; NEW, SET
VGPU_GPU_A_COMPUTE_BP = 12       # u32, basis points 1..VGPU_COMPUTE_BP_MAX; NEW, SET
VGPU_GPU_A_PRIORITY = 13         # u32, enum vgpu_priority; NEW, SET
VGPU_GPU_A_GPU_TIME_NS = 14      # u64, time granted while it wanted the GPU, reply only
VGPU_GPU_A_TSGS = 15             # u32, reply only
VGPU_GPU_A_CHANNELS = 16         # u32, reply only
VGPU_GPU_A_PAUSED = 17           # u32, reply only
VGPU_GPU_A_DOORBELL_TRAPS = 18   # u64, reply only
__VGPU_GPU_A_MAX = 19
VGPU_GPU_A_MAX = __VGPU_GPU_A_MAX - 1

# enum vgpu_audit_attr: one VGPU_A_AUDIT_ENTRY (all reply only)
VGPU_AUDIT_A_UNSPEC = 0
VGPU_AUDIT_A_KIND = 1            # u8, enum vgpu_audit_kind
VGPU_AUDIT_A_NUMBER = 2          # u32: escape nr, class, control cmd, UVM cmd
VGPU_AUDIT_A_VERDICT = 3         # u8, enum vgpu_audit_verdict: the policy's
VGPU_AUDIT_A_CALLS = 4           # u64, calls recorded
VGPU_AUDIT_A_REFUSED = 5         # u64, of which refused (policy, or not implemented)
VGPU_AUDIT_A_LET_THROUGH = 6     # u64, of which forwarded by audit mode or the allow-list
VGPU_AUDIT_A_PAD = 7
__VGPU_AUDIT_A_MAX = 8
VGPU_AUDIT_A_MAX = __VGPU_AUDIT_A_MAX - 1

# enum vgpu_trace_attr: a VGPU_A_TRACE nest (docs/trace.md)
VGPU_TRACE_A_UNSPEC = 0
VGPU_TRACE_A_SEQ = 1             # u64, the slice's record number, from 1
VGPU_TRACE_A_TIME_NS = 2         # u64, CLOCK_MONOTONIC at the call's start
VGPU_TRACE_A_DURATION_NS = 3     # u64
VGPU_TRACE_A_PID = 4             # u32, host tgid
VGPU_TRACE_A_TID = 5             # u32, host tid
VGPU_TRACE_A_FILE = 6            # u64, the open file's number
VGPU_TRACE_A_NODE = 7            # u32, minor relative to the slice's base
VGPU_TRACE_A_OP = 8              # u8, enum vgpu_trace_op
VGPU_TRACE_A_RET = 9             # s32 sent as u32
VGPU_TRACE_A_FLAGS = 10          # u32, VGPU_TRACE_F_*
VGPU_TRACE_A_NR = 11             # u32, escape number or UVM command
VGPU_TRACE_A_SIZE = 12           # u32
VGPU_TRACE_A_ITEM_KIND = 13      # u8, enum vgpu_audit_kind
VGPU_TRACE_A_ITEM = 14           # u32
VGPU_TRACE_A_VERDICT = 15        # u8, enum vgpu_audit_verdict
VGPU_TRACE_A_ARGS_IN = 16        # binary
VGPU_TRACE_A_ARGS_OUT = 17       # binary
VGPU_TRACE_A_PARAMS_PTR = 18     # u64
VGPU_TRACE_A_PARAMS_IN = 19      # binary
VGPU_TRACE_A_PARAMS_OUT = 20     # binary
VGPU_TRACE_A_FD_OFFSET = 21      # u32
VGPU_TRACE_A_FD_FILE = 22        # u64
VGPU_TRACE_A_ADDR = 23           # u64, mmap
VGPU_TRACE_A_LENGTH = 24         # u64, mmap
VGPU_TRACE_A_OFFSET = 25         # u64, mmap
VGPU_TRACE_A_PROT = 26           # u32, VGPU_TRACE_PROT_*
VGPU_TRACE_A_OPEN_FLAGS = 27     # u32, open
VGPU_TRACE_A_PAD = 28
VGPU_TRACE_A_LIST = 29           # nested, repeated: VGPU_TRACE_LIST_A_*
__VGPU_TRACE_A_MAX = 30
VGPU_TRACE_A_MAX = __VGPU_TRACE_A_MAX - 1

# enum vgpu_trace_list_attr: a VGPU_TRACE_A_LIST nest
VGPU_TRACE_LIST_A_UNSPEC = 0
VGPU_TRACE_LIST_A_OFFSET = 1     # u32, the pointer's offset in the pointed-to params
VGPU_TRACE_LIST_A_PTR = 2        # u64
VGPU_TRACE_LIST_A_IN = 3         # binary
VGPU_TRACE_LIST_A_OUT = 4        # binary
VGPU_TRACE_LIST_A_PAD = 5
__VGPU_TRACE_LIST_A_MAX = 6
VGPU_TRACE_LIST_A_MAX = __VGPU_TRACE_LIST_A_MAX - 1

# enum vgpu_trace_op
VGPU_TRACE_OPEN = 0
VGPU_TRACE_CLOSE = 1
VGPU_TRACE_IOCTL = 2
VGPU_TRACE_MMAP = 3
__VGPU_TRACE_OP_MAX = 4

# VGPU_TRACE_A_FLAGS
VGPU_TRACE_F_TRUNCATED = 1 << 0
VGPU_TRACE_F_UNREADABLE = 1 << 1
VGPU_TRACE_F_XFER = 1 << 2

# VGPU_TRACE_A_PROT
VGPU_TRACE_PROT_READ = 1 << 0
VGPU_TRACE_PROT_WRITE = 1 << 1
VGPU_TRACE_PROT_SHARED = 1 << 2

# enum vgpu_audit_kind
VGPU_AUDIT_ESCAPE = 0
VGPU_AUDIT_CLASS = 1
VGPU_AUDIT_CONTROL = 2
VGPU_AUDIT_UVM = 3
__VGPU_AUDIT_KIND_MAX = 4

# enum vgpu_audit_verdict: the policy table's verdicts (kmod/vgpu/policy/README.md);
# NOT_IMPLEMENTED: the table lets it through, vgpu.ko has no handler for it yet
VGPU_AUDIT_FORWARD = 0
VGPU_AUDIT_REWRITE = 1
VGPU_AUDIT_VIRTUALISE = 2
VGPU_AUDIT_REFUSE = 3
VGPU_AUDIT_NOT_IMPLEMENTED = 4
__VGPU_AUDIT_VERDICT_MAX = 5

# VGPU_A_SLICE_FLAGS
VGPU_SLICE_F_FORCE = 1 << 0
VGPU_SLICE_F_ALL = VGPU_SLICE_F_FORCE

# enum vgpu_uvm_policy
VGPU_UVM_COUNT = 0
VGPU_UVM_REFUSE = 1
__VGPU_UVM_POLICY_MAX = 2

# enum vgpu_compute_policy
VGPU_COMPUTE_NONE = 0
VGPU_COMPUTE_SHARE = 1
VGPU_COMPUTE_FIXED = 2
VGPU_COMPUTE_BURST = 3
__VGPU_COMPUTE_POLICY_MAX = 4
VGPU_COMPUTE_BP_MAX = 10000

# enum vgpu_priority
VGPU_PRIORITY_LOW = 0
VGPU_PRIORITY_HIGH = 1
__VGPU_PRIORITY_MAX = 2

# The per-GPU scheduler
VGPU_SCHED_PERIOD_MIN_US = 1000
VGPU_SCHED_PERIOD_MAX_US = 10000000
VGPU_SCHED_PERIOD_DEFAULT_US = 100000
VGPU_SCHED_L_TSG = 1 << 0
VGPU_SCHED_L_DOORBELL = 1 << 1
VGPU_SCHED_L_ALL = VGPU_SCHED_L_TSG | VGPU_SCHED_L_DOORBELL

# enum vgpu_event
VGPU_EVENT_UNSPEC = 0
VGPU_EVENT_ALLOC_REFUSED = 1
VGPU_EVENT_SLICE_EMPTIED = 2
VGPU_EVENT_DEVICE_OPENED = 3
VGPU_EVENT_SLICE_QUARANTINED = 4
__VGPU_EVENT_MAX = 5


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
