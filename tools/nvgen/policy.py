"""The mediation policy: for every escape, class, control and UVM command of
a release, what vgpu.ko does with it, and why.

Four verdicts (kmod/vgpu/policy/README.md says the same in prose):

- forward:    passed to the driver as the caller made it.  Embedded file
              descriptors and pointers (the `embedded` column) still get the
              mediator's generic treatment (a descriptor is translated to
              the real file it stands for, a pointed-to list is copied), and
              every handle still has to belong to the caller's file.
- rewrite:    passed to the driver, and the request or the reply is changed
              to the slice's view: memory sizes, processes, GPU ids, counts.
- virtualise: the container's request does not reach the driver as given:
              the mediator answers it itself or carries it out its own way
              (TSG scheduling belongs to the slice's scheduler).
- refuse:     never reaches the driver; the caller gets the driver's own
              refusal (NV_ERR_INSUFFICIENT_PERMISSIONS, or -EPERM for an
              escape or UVM command).

The rules are ordered; the first that matches an item decides, and its
reason is written beside the verdict.  Order matters in three places: the
driver's own privilege flags come first, so nothing this file says can open
what the driver restricts; explicit exceptions (what CUDA's start-up needs,
what is rewritten) come before the name patterns they would otherwise fall
under; and "forward" is the last rule, reached only by what nothing else
claims.

The privilege flags are facts of the 595.45.04 source tree (the tables'
rm_privilege column).  Older releases take them from 595.45.04 by name and
say so in the reason; a control or class that 595.45.04 does not have is
undecided and refused.  Nothing here reads vendor archives: the inputs are
the committed tools/nvgen/out, tools/nvgen/embedded and tools/nvgen/nvproxy.

    python3 -m tools.nvgen.policy        # writes kmod/vgpu/policy/<release>.tsv and README.md
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):   # run as a script: make "tools.nvgen" importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.nvgen"

from . import tsv  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TABLES = HERE / "out"
EMBEDDED = HERE / "embedded"
DOCS = ROOT / "kmod" / "vgpu" / "policy"
FLAGS_RELEASE = "595.45.04"
VERDICTS = ("forward", "rewrite", "virtualise", "refuse")
COLUMNS = ("kind", "value", "name", "size", "verdict", "reason", "embedded")
KINDS = {"class": ("classes", "id"), "control": ("controls", "cmd"),
         "escape": ("escapes", "nr"), "uvm": ("uvm", "cmd")}
WIDTH = {"escape": 2, "class": 8, "control": 8, "uvm": 8}


# ------------------------------------------------------------------- items
@dataclass(frozen=True)
class Item:
    """One escape, class, control or UVM command of one release."""
    release: str
    kind: str
    value: int | None          # None where the compiler could not give it
    name: str                  # NVIDIA's name; "" for a control no header names
    size: str                  # params size in bytes, "-" none, "?" unmeasured
    privilege: str             # 595.45.04's rm_privilege for it ("" if none)
    in_flags_release: bool     # the flags release has this name (or is this release)
    embedded: str
    own_flags: bool = False    # privilege from the release's own export tables (its tree is vendored)

    @property
    def interface(self) -> int | None:
        """The class a control belongs to (bits 31:16), or a class's own id."""
        if self.value is None:
            return None
        return self.value >> 16 if self.kind == "control" else self.value

    @property
    def borrowed(self) -> bool:
        """Whether this item's privilege comes from another release's source."""
        return self.release != FLAGS_RELEASE and not self.own_flags


# ------------------------------------------------------------------- rules
@dataclass(frozen=True)
class Rule:
    verdict: str
    reason: str
    match: Callable[[Item], bool]
    kinds: tuple[str, ...] = ("class", "control")
    flags: bool = False        # reason rests on 595.45.04's flags: say so for other releases
    listed: str = ""           # name of the per-name list the rule was made from (ESCAPES, UVM)

    def why(self, item: Item) -> str:
        if self.flags and item.borrowed:
            return f"{self.reason} [{FLAGS_RELEASE}'s flags, taken by name]"
        return self.reason


def names(*wanted: str) -> Callable[[Item], bool]:
    s = frozenset(wanted)
    return lambda i: i.name in s


def pattern(regex: str) -> Callable[[Item], bool]:
    r = re.compile(regex)
    return lambda i: bool(r.search(i.name))


def interfaces(*ids: int) -> Callable[[Item], bool]:
    """Controls of these classes and the classes themselves."""
    s = frozenset(ids)
    return lambda i: i.interface in s


def privilege(*levels: str) -> Callable[[Item], bool]:
    s = frozenset(levels)
    return lambda i: any(p in s for p in i.privilege.split("|"))


def values(*vals: int) -> Callable[[Item], bool]:
    s = frozenset(vals)
    return lambda i: i.value in s


def table(kind: str, listed: str, entries: dict[str, tuple[str, str]]) -> list[Rule]:
    """One rule per name of a complete per-kind list (escapes, UVM)."""
    return [Rule(v, r, names(n), (kind,), listed=listed) for n, (v, r) in entries.items()]


# Escapes: few, each read in escape.c / nv.c; the list is complete, and an
# escape it does not name is refused (last escape rule).
ESCAPES: dict[str, tuple[str, str]] = {
    "NV_ESC_RM_ALLOC": ("forward", "the class's own verdict applies (class rules below)"),
    "NV_ESC_RM_ALLOC_OBJECT": ("forward", "the class's own verdict applies (class rules below)"),
    "NV_ESC_RM_CONTROL": ("forward", "the control's own verdict applies (control rules below)"),
    "NV_ESC_RM_FREE": ("forward", "frees only objects of the caller's own clients"),
    "NV_ESC_RM_ALLOC_MEMORY": ("forward", "FB allocation path: charged to the slice's quota before it is "
                                          "forwarded"),
    "NV_ESC_RM_VID_HEAP_CONTROL": ("rewrite", "NVOS32 INFO reports the GPU's FB total/free; its allocation "
                                              "functions are charged"),
    "NV_ESC_RM_DUP_OBJECT": ("forward", "the source client must be one of the slice's own (mediator's handle "
                                        "check)"),
    "NV_ESC_RM_SHARE": ("forward", "only DUP_OBJECT to all (CUDA IPC's export) of memory in the caller's "
                                   "own client: every slice's dup is the mediator's (the source in the "
                                   "caller's slice)"),
    "NV_ESC_RM_MAP_MEMORY": ("forward", "mmap context on the named file (fd translated to the real file)"),
    "NV_ESC_RM_UNMAP_MEMORY": ("forward", "the caller's own mapping"),
    "NV_ESC_RM_MAP_MEMORY_DMA": ("forward", "GPU VA mapping of the caller's own memory; CUDA maps every "
                                            "allocation so"),
    "NV_ESC_RM_UNMAP_MEMORY_DMA": ("forward", "the caller's own GPU mapping"),
    "NV_ESC_RM_ALLOC_CONTEXT_DMA2": ("forward", "context DMA over the caller's own memory"),
    "NV_ESC_RM_BIND_CONTEXT_DMA": ("forward", "binds the caller's own context DMA to its own channel"),
    "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO": ("forward", "the caller's own mapping"),
    "NV_ESC_RM_IDLE_CHANNELS": ("forward", "the driver accepts only the caller's own client in each entry "
                                           "(kernel_idle_channels.c)"),
    "NV_ESC_RM_GET_EVENT_DATA": ("forward", "event data of the caller's own file"),
    "NV_ESC_RM_I2C_ACCESS": ("refuse", "isolation: I2C transactions on the board "
                                       "(NV2080_CTRL_CMD_I2C_ACCESS)"),
    "NV_ESC_RM_ACCESS_REGISTRY": ("refuse", "isolation: reads and writes the driver's registry, settings of "
                                            "the whole driver"),
    "NV_ESC_RM_LOCKLESS_DIAGNOSTIC": ("refuse", "driver: administrators only (escape.c, osIsAdministrator)"),
    "NV_ESC_RM_NVLOG_CTRL": ("refuse", "isolation: controls the driver's log buffers (535 only)"),
    "NV_ESC_RM_ADD_VBLANK_CALLBACK": ("refuse", "driver: neither validated nor handled in 595.45.04; "
                                                "display"),
    "NV_ESC_RM_EXPORT_OBJECT_TO_FD": ("refuse", "driver: neither validated nor handled in 595.45.04 (the "
                                                "OS_UNIX controls replace it)"),
    "NV_ESC_RM_IMPORT_OBJECT_FROM_FD": ("refuse", "driver: neither validated nor handled in 595.45.04 (the "
                                                  "OS_UNIX controls replace it)"),
    "NV_ESC_RM_CONFIG_GET": ("refuse", "undecided: absent from 595.45.04"),
    "NV_ESC_RM_CONFIG_SET": ("refuse", "undecided: absent from 595.45.04"),
    "NV_ESC_RM_CONFIG_GET_EX": ("refuse", "undecided: absent from 595.45.04"),
    "NV_ESC_RM_CONFIG_SET_EX": ("refuse", "undecided: absent from 595.45.04"),
    "NV_ESC_CARD_INFO": ("rewrite", "reports every GPU's identity and count; filtered to the slice's GPUs, "
                                    "minors renumbered"),
    "NV_ESC_ATTACH_GPUS_TO_FD": ("rewrite", "GPU ids restricted to the slice's GPUs (another GPU's id is "
                                            "refused)"),
    "NV_ESC_REGISTER_FD": ("forward", "ties a GPU file to its control file (fd translated to the real file)"),
    "NV_ESC_ALLOC_OS_EVENT": ("forward", "an event on the caller's own file; the fd is a key, not "
                                         "translated"),
    "NV_ESC_FREE_OS_EVENT": ("forward", "an event on the caller's own file; the fd is a key, not translated"),
    "NV_ESC_STATUS_CODE": ("rewrite", "reports any GPU's status by PCI address; answered only for the "
                                      "slice's GPUs"),
    "NV_ESC_CHECK_VERSION_STR": ("forward", "version handshake"),
    "NV_ESC_IOCTL_XFER_CMD": ("forward", "unwrapped: the inner escape is decided and forwarded as a direct "
                                         "call"),
    "NV_ESC_QUERY_DEVICE_INTR": ("refuse", "isolation: reads the GPU's interrupt status register, GPU-wide "
                                           "state; no CUDA use known"),
    "NV_ESC_SYS_PARAMS": ("virtualise", "isolation: sets the driver-wide NUMA memblock size, once, for "
                                        "everybody; answered by the mediator"),
    "NV_ESC_NUMA_INFO": ("rewrite", "reports the GPU's NUMA memory (coherent platforms): the slice's share"),
    "NV_ESC_SET_NUMA_STATUS": ("refuse", "driver: root only (nv.c, NV_IS_SUSER); onlines or offlines the "
                                         "GPU's memory"),
    "NV_ESC_EXPORT_TO_DMABUF_FD": ("refuse", "isolation: the driver dups the memory of the client the "
                                             "params name, not checked to be the caller's, into RM's "
                                             "internal client at kernel privilege (nv-dmabuf.c "
                                             "nv_dma_buf_dup_mem_handles); the FB then lives until the "
                                             "dma-buf's last close (nv_dma_buf_release), which no "
                                             "ioctl reports, and a handle above a hole in the list "
                                             "until the GPU's last close (the release undups slots "
                                             "0..num_objects-1 only)"),
    "NV_ESC_WAIT_OPEN_COMPLETE": ("forward", "waits for the caller's own open"),
}

# UVM commands: the list is complete for the seven releases; uvm.c of
# 595.45.04 decides what is routed at all.
_NOT_ROUTED = ("refuse", "driver: not routed by nvidia-uvm's ioctl in 595.45.04 (answers -EINVAL)")
_TOOLS = ("refuse", "profiler: UVM tools interface (nvidia-uvm-tools), events and counters of other "
                    "processes")
UVM: dict[str, tuple[str, str]] = {
    "UVM_INITIALIZE": ("forward", "the caller's own VA space"),
    "UVM_DEINITIALIZE": ("forward", "the caller's own VA space"),
    "UVM_MM_INITIALIZE": ("virtualise", "answered NV_WARN_NOTHING_TO_DO by vgpu.ko, the driver's own answer for "
                                        "a VA space without an mm association (uvm_api_mm_initialize), which CUDA "
                                        "and tinygrad accept: its uvmFd must be the real UVM file, which may not "
                                        "enter a container's fd table (docs/mediator.md)"),
    "UVM_REGISTER_GPU": ("forward", "rmCtrlFd translated; the client must be one of the slice's"),
    "UVM_UNREGISTER_GPU": ("forward", "the caller's own VA space"),
    "UVM_REGISTER_GPU_VASPACE": ("forward", "rmCtrlFd translated; the client must be one of the slice's"),
    "UVM_UNREGISTER_GPU_VASPACE": ("forward", "the caller's own VA space"),
    "UVM_REGISTER_CHANNEL": ("forward", "registers the caller's own channel; CUDA needs it"),
    "UVM_UNREGISTER_CHANNEL": ("forward", "the caller's own channel"),
    "UVM_MAP_EXTERNAL_ALLOCATION": ("forward", "maps the caller's own RM memory; its FB charge is held until "
                                               "UVM_FREE"),
    "UVM_MAP_EXTERNAL_SPARSE": ("forward", "the caller's own VA range"),
    "UVM_UNMAP_EXTERNAL": ("forward", "the caller's own VA range"),
    "UVM_CREATE_EXTERNAL_RANGE": ("forward", "the caller's own VA range; CUDA needs it"),
    "UVM_FREE": ("forward", "the caller's own VA range; returns its FB charge"),
    "UVM_DISCARD": ("forward", "the caller's own VA range"),
    "UVM_CREATE_RANGE_GROUP": ("forward", "the caller's own VA space"),
    "UVM_DESTROY_RANGE_GROUP": ("forward", "the caller's own VA space"),
    "UVM_SET_RANGE_GROUP": ("forward", "the caller's own VA space"),
    "UVM_MIGRATE_RANGE_GROUP": ("forward", "the caller's own VA space"),
    "UVM_PREVENT_MIGRATION_RANGE_GROUPS": ("forward", "the caller's own VA space"),
    "UVM_ALLOW_MIGRATION_RANGE_GROUPS": ("forward", "the caller's own VA space"),
    "UVM_SET_PREFERRED_LOCATION": ("forward", "the caller's own VA range"),
    "UVM_UNSET_PREFERRED_LOCATION": ("forward", "the caller's own VA range"),
    "UVM_SET_ACCESSED_BY": ("forward", "the caller's own VA range"),
    "UVM_UNSET_ACCESSED_BY": ("forward", "the caller's own VA range"),
    "UVM_ENABLE_READ_DUPLICATION": ("forward", "the caller's own VA range"),
    "UVM_DISABLE_READ_DUPLICATION": ("forward", "the caller's own VA range"),
    "UVM_MIGRATE": ("forward", "the caller's own pages; managed memory is charged at mmap"),
    "UVM_POPULATE_PAGEABLE": ("forward", "the caller's own pages"),
    "UVM_PAGEABLE_MEM_ACCESS": ("forward", "a query about the caller's own VA space"),
    "UVM_PAGEABLE_MEM_ACCESS_ON_GPU": ("forward", "a query about the caller's own VA space"),
    "UVM_VALIDATE_VA_RANGE": ("forward", "a query about the caller's own VA range"),
    "UVM_MAP_DYNAMIC_PARALLELISM_REGION": ("forward", "the caller's own VA range"),
    "UVM_ALLOC_SEMAPHORE_POOL": ("forward", "the caller's own VA range; pool memory is not charged "
                                            "(docs/mediator.md, open item 2)"),
    "UVM_CLEAN_UP_ZOMBIE_RESOURCES": ("forward", "the caller's own VA space"),
    "UVM_ENABLE_PEER_ACCESS": ("forward", "peer access between two of the slice's own GPUs: vgpu.ko checks both "
                                          "UUIDs against the slice on the copy the driver reads (a GPU outside "
                                          "it is answered NV_ERR_INVALID_DEVICE, the driver's answer for a GPU "
                                          "the VA space has not registered, and the VA space can register only "
                                          "the slice's: uvm_va_space.c, retain_pcie_peers_from_uuids)"),
    "UVM_DISABLE_PEER_ACCESS": ("forward", "pairs with UVM_ENABLE_PEER_ACCESS: both UUIDs checked the same way"),
    "UVM_ALLOC_DEVICE_P2P": ("refuse", "isolation: P2P mapping of device memory for another device"),
    "UVM_CLEAR_ALL_ACCESS_COUNTERS": ("refuse", "isolation: clears the GPU's access counters, every "
                                                "process's (uvm_api_clear_all_access_counters)"),
    "UVM_TOOLS_READ_PROCESS_MEMORY": ("refuse", "debugger: tools access to managed memory (cuda-gdb)"),
    "UVM_TOOLS_WRITE_PROCESS_MEMORY": ("refuse", "debugger: tools access to managed memory (cuda-gdb)"),
    "UVM_DEBUG_ACCESS_MEMORY": ("refuse", "debugger: test-only access to managed memory (absent from "
                                          "595.45.04)"),
    "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE": _TOOLS,
    "UVM_TOOLS_GET_PROCESSOR_UUID_TABLE_V2": _TOOLS,
    "UVM_TOOLS_FLUSH_EVENTS": _TOOLS,
    "UVM_TOOLS_INIT_EVENT_TRACKER": _TOOLS,
    "UVM_TOOLS_INIT_EVENT_TRACKER_V2": _TOOLS,
    "UVM_TOOLS_SET_NOTIFICATION_THRESHOLD": _TOOLS,
    "UVM_TOOLS_EVENT_QUEUE_ENABLE_EVENTS": _TOOLS,
    "UVM_TOOLS_EVENT_QUEUE_DISABLE_EVENTS": _TOOLS,
    "UVM_TOOLS_ENABLE_COUNTERS": _TOOLS,
    "UVM_TOOLS_DISABLE_COUNTERS": _TOOLS,
    "UVM_REGISTER_MPS_SERVER": ("refuse", "undecided: MPS (one context for processes of several slices); "
                                          "absent from 595.45.04"),
    "UVM_REGISTER_MPS_CLIENT": ("refuse", "undecided: MPS (one context for processes of several slices); "
                                          "absent from 595.45.04"),
    "UVM_ENABLE_SYSTEM_WIDE_ATOMICS": ("refuse", "undecided: absent from 595.45.04"),
    "UVM_DISABLE_SYSTEM_WIDE_ATOMICS": ("refuse", "undecided: absent from 595.45.04"),
    "UVM_RUN_TEST": ("refuse", "driver: test interface (uvm_test.c, enabled by a module parameter)"),
    **{n: _NOT_ROUTED for n in (
        "UVM_RESERVE_VA", "UVM_RELEASE_VA", "UVM_REGION_COMMIT", "UVM_REGION_DECOMMIT",
        "UVM_REGION_SET_STREAM", "UVM_SET_STREAM_RUNNING", "UVM_SET_STREAM_STOPPED",
        "UVM_ADD_SESSION", "UVM_REMOVE_SESSION", "UVM_ENABLE_COUNTERS",
        "UVM_MAP_COUNTER", "UVM_CREATE_EVENT_QUEUE", "UVM_REMOVE_EVENT_QUEUE", "UVM_MAP_EVENT_QUEUE",
        "UVM_EVENT_CTRL", "UVM_GET_GPU_UUID_TABLE", "UVM_MEM_MAP", "UVM_IS_8_SUPPORTED")},
}

# Controls no export table has, which the deprecated-control layer still
# answers by calling a V2 command for the caller (rmapi_deprecated_control.c,
# rmDeprecatedControlTable): they carry the V2 command's privilege.
DEPRECATED_V1 = {
    "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION": "NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2",
    "NV2080_CTRL_CMD_BIOS_GET_INFO": "NV2080_CTRL_CMD_BIOS_GET_INFO_V2",
    "NV2080_CTRL_CMD_BUS_GET_INFO": "NV2080_CTRL_CMD_BUS_GET_INFO_V2",
    "NV0080_CTRL_CMD_BSP_GET_CAPS": "NV0080_CTRL_CMD_BSP_GET_CAPS_V2",
    "NV2080_CTRL_CMD_GPU_GET_INFO": "NV2080_CTRL_CMD_GPU_GET_INFO_V2",
    "NV0073_CTRL_CMD_DP_SET_MSA_PROPERTIES": "NV0073_CTRL_CMD_DP_SET_MSA_PROPERTIES_V2",
    "NV0080_CTRL_CMD_MSENC_GET_CAPS": "NV0080_CTRL_CMD_MSENC_GET_CAPS_V2",
    "NV2080_CTRL_CMD_FB_GET_INFO": "NV2080_CTRL_CMD_FB_GET_INFO_V2",
}

# What the container must see as its own slice (the list and what
# the tables showed beside it).
REWRITE_IDENTITY = (
    "NV0000_CTRL_CMD_GPU_GET_PROBED_IDS", "NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS",
    "NV0000_CTRL_CMD_GPU_GET_ID_INFO", "NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2",
    "NV0000_CTRL_CMD_GPU_GET_DEVICE_IDS", "NV0000_CTRL_CMD_GPU_GET_ACTIVE_DEVICE_IDS",
    "NV0000_CTRL_CMD_GPU_GET_INIT_STATUS",
    "NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID", "NV0000_CTRL_CMD_GPU_GET_PCI_INFO",
    "NV0000_CTRL_CMD_GPU_ATTACH_IDS", "NV0000_CTRL_CMD_GPU_DETACH_IDS",
    "NV0000_CTRL_CMD_GPU_ASYNC_ATTACH_ID", "NV0000_CTRL_CMD_GPU_WAIT_ATTACH_ID",
    "NV0000_CTRL_CMD_GPU_QUERY_DRAIN_STATE",
)
REWRITE_MEMORY = (
    "NV2080_CTRL_CMD_FB_GET_INFO", "NV2080_CTRL_CMD_FB_GET_INFO_V2",
    "NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO",
)
REWRITE_PROCESSES = (
    "NV2080_CTRL_CMD_GPU_GET_PIDS", "NV2080_CTRL_CMD_GPU_GET_PID_INFO",
)
# GPU_GET_INFO's DMABUF_CAPABILITY says whether the GPU's memory can be
# exported as a dma-buf (getGpuInfos: osDmabufIsSupported, no APM); a slice
# cannot (NV_ESC_EXPORT_TO_DMABUF_FD is never forwarded, kmod/vgpu/audit.c),
# so an importer asking first learns it here instead of failing later.
REWRITE_CAPABILITY = (
    "NV2080_CTRL_CMD_GPU_GET_INFO", "NV2080_CTRL_CMD_GPU_GET_INFO_V2",
)
# Read on the driver: their answer names nothing but the caller's own
# device or a driver-wide switch, so there is nothing of another slice to
# rewrite.
FORWARD_OWN = {
    "NV0000_CTRL_CMD_GPU_GET_MEMOP_ENABLE":
        "a driver-wide feature flag, no GPU identity or count (client_resource.c, "
        "cliresCtrlCmdGpuGetMemOpEnable: PDB_PROP_SYS_ENABLE_STREAM_MEMOPS)",
    "NV0080_CTRL_CMD_GPU_GET_NUM_SUBDEVICES":
        "the caller's own device; 595.45.04 answers 1 whatever the device "
        "(device_ctrl.c, deviceCtrlCmdGpuGetNumSubdevices)",
}
# Reports of every GPU, slice or process for which vgpu.ko has no per-slice
# answer, and which no known CUDA or nvidia-smi start-up needs (nvproxy
# 590.48.01 does not forward them either): refused, not rewritten.
REFUSE_NO_SLICE_ANSWER = (
    "NV0000_CTRL_CMD_GPU_GET_UUID_INFO", "NV0000_CTRL_CMD_GPU_GET_VIDEO_LINKS",
    "NV0000_CTRL_CMD_SYSTEM_GET_GPUS_POWER_STATUS", "NV0000_CTRL_CMD_GET_SYSTEM_EVENT_DATA",
    "NV0000_CTRL_CMD_SYNC_GPU_BOOST_INFO",
    "NV2080_CTRL_CMD_FB_GET_UGPU_MEMORY_INFO", "NV_CONF_COMPUTE_CTRL_CMD_GPU_GET_VIDMEM_SIZE",
    "NV0000_CTRL_CMD_GPUACCT_GET_PROC_ACCOUNTING_INFO", "NV0000_CTRL_CMD_GPUACCT_GET_ACCOUNTING_PIDS",
    "NV2080_CTRL_GPU_GET_NVENC_SW_SESSION_INFO", "NV2080_CTRL_GPU_GET_NVENC_SW_SESSION_INFO_V2",
    "NV2080_CTRL_GPU_GET_NVFBC_SW_SESSION_INFO",
    "NV2080_CTRL_CMD_GPU_GET_ENGINE_LOAD_TIMES", "NV2080_CTRL_CMD_PERF_GET_VID_ENG_PERFMON_SAMPLE",
    "NV2080_CTRL_CMD_GET_P2P_CAPS",
)
# GPU-wide utilisation, every slice's work together; nvidia-smi asks for it
# (nvproxy forwards it) but a slice's share needs per-slice accounting of
# GPU time that vgpu.ko does not keep yet (docs/compute.md).
REFUSE_UTILISATION = (
    "NV2080_CTRL_CMD_PERF_GET_GPUMON_PERFMON_UTIL_SAMPLES_V2",
)
# Queries about peers and fabric that CUDA makes at start-up (nvproxy
# forwards each for compute): answered by the mediator for a GPU with no
# peer and no fabric, rather than refused.
VIRTUAL_NO_PEERS = (
    "NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS", "NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2",
    "NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX", "NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS",
    "NV2080_CTRL_CMD_GET_GPU_FABRIC_PROBE_INFO",
    "NV2080_CTRL_CMD_NVLINK_GET_NVLINK_CAPS", "NV2080_CTRL_CMD_NVLINK_GET_NVLINK_STATUS",
)
# TSG and channel scheduling: the slice's scheduler owns it (docs/compute.md).
VIRTUAL_SCHEDULING = (
    "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", "NVA06C_CTRL_CMD_SET_TIMESLICE", "NVA06C_CTRL_CMD_GET_TIMESLICE",
    "NVA06C_CTRL_CMD_PREEMPT", "NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL", "NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL",
    "NVA06F_CTRL_CMD_GPFIFO_SCHEDULE", "NVA06F_CTRL_CMD_SET_INTERLEAVE_LEVEL",
    "NVA06F_CTRL_CMD_GET_INTERLEAVE_LEVEL", "NVA06F_CTRL_CMD_STOP_CHANNEL",
    "NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS",
)
# GPU-wide switches CUDA flips at start-up (nvproxy forwards them for
# compute): accepted by the mediator, not passed on.
VIRTUAL_GPU_WIDE = (
    "NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG", "NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG",
    "NV2080_CTRL_CMD_RC_SOFT_DISABLE_WATCHDOG", "NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS",
    "NV2080_CTRL_CMD_TIMER_SET_GR_TICK_FREQ", "NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL",
)
# Controls of an SM debugger session (GT200_DEBUGGER, which vgpu.ko binds to
# the caller's own compute object) that read or set the debugged context's
# own state, or read the caller's own memory: forwarded (what stays within
# the caller's own objects and memory is not refused).
DEBUGGER_OWN = (
    "NV83DE_CTRL_CMD_DEBUG_SET_MODE_MMU_DEBUG", "NV83DE_CTRL_CMD_DEBUG_GET_MODE_MMU_DEBUG",
    "NV83DE_CTRL_CMD_DEBUG_SET_MODE_ERRBAR_DEBUG", "NV83DE_CTRL_CMD_DEBUG_GET_MODE_ERRBAR_DEBUG",
    "NV83DE_CTRL_CMD_DEBUG_SET_EXCEPTION_MASK",
    "NV83DE_CTRL_CMD_DEBUG_READ_ALL_SM_ERROR_STATES", "NV83DE_CTRL_CMD_DEBUG_CLEAR_ALL_SM_ERROR_STATES",
)
# Non-privileged controls that change state of the whole GPU or driver.
GPU_WIDE_SETTERS = (
    "NV2080_CTRL_CMD_GPU_SET_POWER", "NV2080_CTRL_CMD_PERF_SET_POWERSTATE",
    "NV2080_CTRL_CMD_PERF_SET_AUX_POWER_STATE", "NV2080_CTRL_CMD_PERF_RATED_TDP_SET_CONTROL",
    "NV2080_CTRL_CMD_GPU_MARK_DEVICE_FOR_RESET", "NV2080_CTRL_CMD_GPU_UNMARK_DEVICE_FOR_RESET",
    "NV2080_CTRL_CMD_GPU_MARK_DEVICE_FOR_DRAIN_AND_RESET",
    "NV2080_CTRL_CMD_GPU_UNMARK_DEVICE_FOR_DRAIN_AND_RESET",
    "NV2080_CTRL_CMD_GPU_SET_ILLUM", "NV2080_CTRL_CMD_SET_GPU_OPTIMUS_INFO",
    "NV2080_CTRL_CMD_BUS_SET_PCIE_LTR_LATENCY", "NV2080_CTRL_CMD_BUS_CLEAR_PEX_COUNTERS",
    "NV2080_CTRL_CMD_BUS_FREEZE_PEX_COUNTERS", "NV2080_CTRL_CMD_BUS_CLEAR_PEX_UTIL_COUNTERS",
    "NV2080_CTRL_CMD_BUS_CONTROL_PUBLIC_ASPM_BITS", "NV2080_CTRL_CMD_BUS_SET_EOM_PARAMETERS",
    "NV2080_CTRL_CMD_BUS_SET_C2C_LPWR_STATE_VOTE", "NV2080_CTRL_CMD_BUS_SET_C2C_LPWR_IDLE_THRESHOLD",
    "NV2080_CTRL_CMD_HSHUB_SET_EC_THROTTLE_MODE", "NV2080_CTRL_CMD_OS_UNIX_ALLOW_DISALLOW_GCOFF",
    "NV2080_CTRL_CMD_FIFO_RUNLIST_SET_SCHED_POLICY", "NV2080_CTRL_CMD_FIFO_OBJSCHED_SET_STATE",
    "NV2080_CTRL_CMD_GPU_SET_PARTITIONS",
    "NV0080_CTRL_CMD_GPU_SET_SPARSE_TEXTURE_COMPUTE_MODE", "NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL",
    "NV0080_CTRL_CMD_GPU_SET_VGPU_HETEROGENEOUS_MODE", "NV0080_CTRL_CMD_INTERNAL_MEMSYS_SET_ZBC_REFERENCED",
    "NV2080_CTRL_CMD_INTERNAL_MEMSYS_SET_ZBC_REFERENCED",
    "NV9096_CTRL_CMD_SET_ZBC_COLOR_CLEAR", "NV9096_CTRL_CMD_SET_ZBC_DEPTH_CLEAR",
    "NV9096_CTRL_CMD_SET_ZBC_CLEAR_TABLE", "NV9096_CTRL_CMD_SET_ZBC_STENCIL_CLEAR",
    "NV0000_CTRL_CMD_SYSTEM_NOTIFY_EVENT", "NV0000_CTRL_CMD_PUSH_UCODE_IMAGE",
    "NVA06F_CTRL_CMD_RESTART_RUNLIST",
    "NVA06C_CTRL_CMD_MAKE_REALTIME", "NV2080_CTRL_CMD_FIFO_ROTATE_KEYS",
    "NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS_FOR_KEY_ROTATION",
)
# Reports about other clients' work.
OTHERS_ACTIVITY = (
    "NV2080_CTRL_CMD_GR_GET_CURRENT_RESIDENT_CHANNEL", "NV2080_CTRL_CMD_FIFO_OBJSCHED_SW_GET_LOG",
    "NV0000_CTRL_CMD_NVD_GET_RCERR_RPT", "NV2080_CTRL_CMD_RC_GET_ERROR_V2",
    "NV2080_CTRL_CMD_RC_GET_ERROR_COUNT",
)

ENGINE_CLASS = (r"(^[A-Z]+[0-9]*_COMPUTE_[A-Z]$|_DMA_COPY_[A-Z]$|^[A-Z]+_[A-Z]$|_TWOD_[A-Z]$"
                r"|_INLINE_TO_MEMORY_[A-Z]$|^NV[0-9A-F]{4}_VIDEO_(DECODER|ENCODER|NVJPG|OFA)$"
                r"|^[A-Z]+[0-9]*_CHANNEL_GPFIFO(_[A-Z])?$|^[A-Z]+_USERMODE_[A-Z]$|_SEC2_WORK_LAUNCH_[A-Z]$"
                r"|^KEPLER_CHANNEL_GROUP_A$)")
PROFILING = (r"PROFILER|HWPM|PERFMON_HW|_PM_MODE|_PM_BIND|_SMPC_|PC_SAMPLING|EVTBUF|EXEC_REG_OPS"
             r"|MIGRATABLE_OPS|PERFBUFFER|COUNTER_COLLECTION|EVENT_BUFFER|VIDMEM_ACCESS_BIT"
             r"|_DIAG_PROFILE_RPC|_DIAG_DUMP_RPC")
DISPLAY = (r"DISPLAY|_DISP_|_CURSOR_|_CORE_CHANNEL_|_WINDOW_(IMM_)?CHANNEL_|_BASE_CHANNEL_|_OVERLAY_"
           r"|_ANY_CHANNEL_|GSYNC|VBLANK|HDACODEC|_DFP_|_DP_")

RULES: list[Rule] = [
    # -- escapes and UVM: complete lists, each entry read in the driver.
    *table("escape", "ESCAPES", ESCAPES),
    Rule("refuse", "undecided: an escape this policy does not list", lambda i: True, ("escape",)),
    *table("uvm", "UVM", UVM),
    Rule("refuse", "undecided: a UVM command this policy does not list", lambda i: True, ("uvm",)),

    # -- controls and classes.  First what the driver itself says.
    Rule("refuse", "driver: internal (RMCTRL_FLAGS_INTERNAL: RM calls it, nobody else)",
         privilege("internal"), ("control",), flags=True),
    Rule("refuse", "driver: privileged (RMCTRL_FLAGS_PRIVILEGED: root only)",
         privilege("privileged"), ("control",), flags=True),
    Rule("refuse", "driver: kernel-privileged (no NON_PRIVILEGED flag: kernel clients only)",
         privilege("kernel"), ("control",), flags=True),
    Rule("refuse", "driver: internal (RS_FLAGS_INTERNAL_ONLY)",
         privilege("internal"), ("class",), flags=True),
    Rule("refuse", "driver: privileged (RS_FLAGS_ALLOC_PRIVILEGED: root only)",
         privilege("privileged"), ("class",), flags=True),
    Rule("refuse", "driver: kernel-privileged (RS_FLAGS_ALLOC_KERNEL_PRIVILEGED)",
         privilege("kernel"), ("class",), flags=True),
    Rule("refuse", "driver: no allocation privilege flag in resource_list.h (RM refuses every user)",
         privilege("refused"), ("class",), flags=True),
    Rule("virtualise", "isolation: compute-mode reservation (exclusive modes lock the GPU for every "
         "slice); CUDA asks at start-up (nvproxy forwards it): answered NV_OK by the mediator. No header "
         "names it: driver's subdeviceCtrlCmdGpu{Acquire,Release}ComputeModeReservation",
         values(0x20800145, 0x20800146), ("control",)),
    Rule("virtualise", "isolation: a GPU-wide switch CUDA sets, the CUDA performance limit under the "
         "number 535's libcuda gives it (NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL, 0x801909 from 550 "
         "on; no 535 header names 0x809909 and 535.261.03's open RM does not export it, yet cuCtxCreate "
         "fails CUDA_ERROR_NOT_SUPPORTED unless it is NV_OK: docs/cuda.md): answered NV_OK, not applied "
         "to the GPU",
         values(0x00809909), ("control",)),
    Rule("forward", "a child of the caller's own channel: its class and engine "
         "(kchannelCtrlCmdGetClassEngineid_IMPL: kchannelFindChildByHandle, the object must be a "
         "child of this channel). The A06F/C36F aliases of NV906F's command, which the RM of the "
         "releases that have them exports non-privileged (535.261.03's g_kernel_channel_nvoc.c, flags "
         "0x10); CUDA 535's cuCtxCreate asks NVC36F's for each engine object of its channels "
         "(nvproxy forwards it for 535 and 550)",
         values(0xa06f0101, 0xc36f0101), ("control",)),
    Rule("refuse", "undecided: no header names this control", lambda i: not i.name, ("control",)),
    Rule("refuse", f"undecided: absent from {FLAGS_RELEASE}, whose source gives the privilege flags",
         lambda i: not i.in_flags_release),

    # -- explicit exceptions: what the slice must see as its own, and the
    #    queries CUDA's start-up makes, before the patterns they fall under.
    Rule("rewrite", "reports GPU identity or GPU counts (ids, device instances, gpu-id lookups); "
         "answered for the slice's GPUs only, numbered as the container sees them",
         names(*REWRITE_IDENTITY), ("control",)),
    Rule("rewrite", "reports the GPU's memory; the slice's quota is its total, its use is used",
         names(*REWRITE_MEMORY), ("control",)),
    Rule("rewrite", "reports processes of every slice (host PIDs); filtered to the slice's, "
         "PIDs in the caller's namespace",
         names(*REWRITE_PROCESSES), ("control",)),
    Rule("rewrite", "reports what the GPU can do; DMABUF_CAPABILITY reads NO, since a slice's "
         "memory cannot be exported as a dma-buf (NV_ESC_EXPORT_TO_DMABUF_FD is never "
         "forwarded); every other index as the driver answers",
         names(*REWRITE_CAPABILITY), ("control",)),
    *[Rule("forward", f"read on the driver: {why}", names(n), ("control",))
      for n, why in FORWARD_OWN.items()],
    Rule("refuse", "reports every GPU's, slice's or process's state and vgpu.ko has no per-slice "
         "answer for it; no CUDA or nvidia-smi start-up use known (nvproxy 590.48.01 does not "
         "forward it)", names(*REFUSE_NO_SLICE_ANSWER), ("control",)),
    Rule("refuse", "reports GPU-wide utilisation, every slice's work together; nvidia-smi asks "
         "(nvproxy forwards it), but the slice's share needs per-slice GPU-time accounting "
         "vgpu.ko does not keep yet", names(*REFUSE_UTILISATION), ("control",)),
    Rule("virtualise", "isolation: GPU boost groups span several GPUs, other slices' included; "
         "CUDA 535's cuInit asks at start-up, so the mediator answers as the driver does with no "
         "group (all zero: cliresCtrlCmdSyncGpuBoostGroupInfo, gpuboostmgrQueryGroups)",
         names("NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO"), ("control",)),
    Rule("virtualise", "isolation: reports peer GPUs, NVLink or fabric; CUDA asks at start-up "
         "(nvproxy forwards it), so the mediator answers for a GPU with no peer and no fabric",
         names(*VIRTUAL_NO_PEERS), ("control",)),
    Rule("virtualise", "isolation: TSG/channel scheduling belongs to the slice's scheduler "
         "(docs/compute.md); a change is answered NV_OK and not applied (GPFIFO_SCHEDULE: an "
         "enable while the slice holds the GPU), a GET reads the caller's own TSG or channel",
         names(*VIRTUAL_SCHEDULING), ("control",)),
    Rule("virtualise", "isolation: a GPU-wide switch (RC watchdog, GR tick frequency, the CUDA performance "
         "limit) CUDA sets (nvproxy forwards it): answered NV_OK, not applied to the GPU",
         names(*VIRTUAL_GPU_WIDE), ("control",)),
    Rule("virtualise", "isolation: an inherited share policy of type ALL would expose the client's "
         "objects to other slices; CUDA sets one at start-up: forwarded for a revoke, type NONE, or "
         "a PID share (the clients of the caller's own process: RM compares ProcIDs, target unread), "
         "else refused",
         names("NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY"), ("control",)),
    Rule("refuse", "driver: kernel callbacks are refused to user clients (event_api.c: "
         "NV_ERR_ILLEGAL_ACTION below RS_PRIV_LEVEL_KERNEL)",
         names("NV01_EVENT_KERNEL_CALLBACK", "NV01_EVENT_KERNEL_CALLBACK_EX"), ("class",)),
    Rule("forward", "an event on the caller's own object: hParentClient must be 0 or one of the "
         "slice's clients (RM takes it as a second client)",
         names("NV01_EVENT", "NV01_EVENT_OS_EVENT"), ("class",)),
    Rule("rewrite", "deviceId is the container's GPU number, translated to the driver's device "
         "instance; hClientShare/hTargetClient/hTargetDevice refused (docs/mediator.md)",
         names("NV01_DEVICE_0"), ("class",)),

    Rule("forward", "P2P between two GPUs of the slice: p2papiConstruct_IMPL finds both subdevices in the "
         "allocating client alone, and vgpu.ko checks both are subdevices it tracks there (so on the "
         "slice's GPUs), on the copy the driver reads; the peer ids and the BAR1 mailbox, GPU-wide, must "
         "be left to RM (zero)",
         names("NV50_P2P"), ("class",)),

    Rule("refuse", "isolation: third-party P2P (GPUDirect RDMA) registers memory for a kernel consumer that "
         "finds it by token, not by ownership (nvidia_p2p_get_pages; the token is CLI_ENCODEP2PTOKEN(gpuId, "
         "hClient), third_party_p2p.c): a consumer acting for another slice (gdrdrv takes tokens from user "
         "space) could pin this slice's FB",
         lambda i: i.interface == 0x503c),

    # -- isolation: named systematically by NVIDIA, refused.
    Rule("refuse", "isolation: P2P reaches memory of another GPU (and of the slices on it)",
         lambda i: "P2P" in i.name or i.interface in (0x503b, 0x503c)),
    Rule("refuse", "isolation: NVLink reaches other GPUs and the links they share", pattern(r"NVLINK")),
    Rule("refuse", "isolation: fabric memory and fabric manager reach other GPUs and nodes",
         lambda i: bool(re.search(r"FABRIC|_FLA_|_FLA$|MEMORY_FLA", i.name))
         or i.interface in (0x000f, 0x00f8, 0x00f9, 0x00fb)),
    Rule("refuse", "isolation: IMEX exports memory to other processes and nodes",
         lambda i: "IMEX" in i.name or i.interface in (0x00e0, 0x00f1)),
    Rule("refuse", "isolation: multicast memory spans several GPUs",
         lambda i: "MULTICAST" in i.name or i.interface == 0x00fd),
    Rule("rewrite", "debugger: an SM debugger session, allowed on the caller's own compute object only "
         "(tinygrad allocates one per compute channel): vgpu.ko lets hAppClient name only the caller's "
         "own client (0 means it), so the driver finds hClass3dObject there and nowhere else "
         "(ksmdbgssnConstruct_IMPL); the session's controls stay refused",
         names("GT200_DEBUGGER"), ("class",)),
    Rule("forward", "debugger: a control of an SM debugger session, which vgpu.ko binds to the caller's own "
         "compute object (GT200_DEBUGGER above): it reads or sets that context's own debug modes, exception "
         "mask and SM error states, nothing of another context",
         names(*DEBUGGER_OWN), ("control",)),
    Rule("refuse", "debugger: reads the caller's own memory (hMemory in the session's client, "
         "_nv83deCtrlCmdDebugAccessMemory) into a buffer its parameters point to, a list vgpu.ko does not "
         "carry yet (not measured in tools/nvgen/out/*/lists.tsv): the driver would write through the "
         "caller's pointer outside the call page",
         names("NV83DE_CTRL_CMD_DEBUG_READ_MEMORY"), ("control",)),
    Rule("refuse", "debugger: SUSPEND_CONTEXT disables the debugged context's channels and RESUME_CONTEXT "
         "enables them again (ctrl83dedebug.h), behind the slice's scheduler, which alone enables a slice's "
         "channels (docs/compute.md): a resumed context would run outside its timeslices",
         names("NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT", "NV83DE_CTRL_CMD_DEBUG_RESUME_CONTEXT"), ("control",)),
    Rule("refuse", "debugger: attaches to contexts, reads and writes GPU memory and SM state",
         lambda i: "DEBUG" in i.name or i.interface in (0x83de, 0x00db)),
    Rule("refuse", "profiler: performance monitors, counters and traces see every slice's work",
         lambda i: bool(re.search(PROFILING, i.name))
         or i.interface in (0x90cc, 0xb0cc, 0xb1cc, 0xb2cc, 0x844c, 0xcbca, 0x90cd, 0xc763, 0xc863)),
    Rule("refuse", "isolation: writes GPU page-table entries or their attributes (aperture, kind, "
         "comptag line, page-table address), which can point a mapping at memory the caller does not own",
         names("NV0080_CTRL_CMD_DMA_UPDATE_PDE_2", "NV0080_CTRL_CMD_DMA_SET_PTE_INFO",
               "NV0080_CTRL_CMD_DMA_FILL_PTE_MEM"), ("control",)),
    Rule("refuse", "isolation: the GPU's access-counter notification buffer, one per GPU (the UVM "
         "driver's)", interfaces(0xc365)),
    Rule("refuse", "isolation: reports other clients' channels, errors or scheduling",
         names(*OTHERS_ACTIVITY), ("control",)),
    Rule("refuse", "isolation: changes state of the whole GPU or driver, seen by every slice",
         names(*GPU_WIDE_SETTERS), ("control",)),
    Rule("refuse", "isolation: shares an object with other clients, other slices' included",
         names("NV0000_CTRL_CMD_CLIENT_SHARE_OBJECT"), ("control",)),
    Rule("refuse", "isolation: MPS (a context shared by processes, USERD isolation off); undecided "
         "for a slice",
         names("NV0000_CTRL_CMD_SET_SUB_PROCESS_ID", "NV0000_CTRL_CMD_DISABLE_SUB_PROCESS_USERD_ISOLATION",
               "MPS_COMPUTE")),
    Rule("refuse", "isolation: MIG instances (capDescriptor of a MIG capability); vgpu slices whole GPUs",
         interfaces(0xc637, 0xc638, 0xc639, 0xc640)),
    Rule("refuse", "isolation: vGPU host and guest objects and SR-IOV functions (GRID)",
         lambda i: "VGPU" in i.name or "_VF_" in i.name or i.name == "PHYSICAL_CHANNEL_GPFIFO"
         or i.interface in (0xa080, 0xa081, 0xa082, 0xa083, 0xa084)),
    Rule("refuse", "isolation: the display engine (heads, modesets, vblank, G-Sync) is one per GPU",
         lambda i: bool(re.search(DISPLAY, i.name))
         or i.interface in (0x0073, 0x5070, 0x9072, 0x30f1, 0x90ec, 0x0092, 0x9010, 0xc370, 0xc372)),
    Rule("refuse", "isolation: platform power and ACPI calls act for the whole machine",
         pattern(r"_GPS_|PFM_REQ_HNDLR|ACPI|NVPCF")),
    Rule("forward", "the diagnostic subdevice object, and the one control of it that only reads: the "
         "InfoROM image's verification (NVML's nvmlDeviceValidateInforom); every other control of the class "
         "stays refused (next rule)",
         names("NV20_SUBDEVICE_DIAG", "NV208F_CTRL_CMD_GPU_VERIFY_INFOROM")),
    Rule("refuse", "isolation: board hardware access (I2C, BIF, diagnostics, error injection, "
         "InfoROM writes)",
         lambda i: bool(re.search(r"_I2C_|_BIF_|INJECT", i.name)) or i.interface in (0x402c, 0x208f)),
    Rule("refuse", "isolation: the GPU's register space (BAR0), shared by every slice",
         names("NV01_MEMORY_LOCAL_PRIVILEGED", "NV01_MEMORY_PRIVILEGED", "NV1_MEMORY_PRIVILEGED"),
         ("class",)),
    Rule("refuse", "isolation: GPU management and boost groups span every GPU",
         interfaces(0x0020, 0x0060), ("class",)),
    Rule("refuse", "isolation: runs RM calls later, outside the mediator (deferred API bundles)",
         interfaces(0x5080)),
    Rule("refuse", "isolation: passes any control straight to GSP firmware, past this table (binary API)",
         interfaces(0x2081, 0x2082)),
    Rule("refuse", "driver: RM self-tests (lock stress, software test objects, GSP RPC tests)",
         lambda i: i.interface in (0x0100, 0x0101, 0x007d) or bool(re.search(r"_RPC_GSP_TEST|_TEST_CTXSW",
                                                                             i.name))),

    # -- parameters vgpu.ko has no safe carrier for, and no known use.
    Rule("refuse", "three embedded handle lists vgpu.ko does not carry; the NV_ESC_RM_IDLE_CHANNELS "
         "escape does the same and is forwarded; nvproxy 590.48.01 does not forward the control",
         names("NV0000_CTRL_CMD_IDLE_CHANNELS"), ("control",)),
    Rule("refuse", "answers the BAR1 offset (a physical aperture address) of a CPU mapping; no CUDA "
         "or nvidia-smi use known (nvproxy 590.48.01 does not forward it)",
         names("NV2080_CTRL_CMD_FB_GET_BAR1_OFFSET"), ("control",)),
    Rule("refuse", "its parameters carry kernel pointers (bindResultFunc, pHandle); no CUDA use known "
         "(nvproxy 590.48.01 does not forward it)",
         names("NV01_MEMORY_HW_RESOURCES"), ("class",)),
    Rule("refuse", "memory of no GPU, made under the client (deviceless): vgpu.ko accounts and tracks "
         "memory per slice GPU; no CUDA use known (nvproxy 590.48.01 does not forward it)",
         names("NV01_MEMORY_DEVICELESS"), ("class",)),

    Rule("rewrite", "CUDA IPC within the slice (vgpu.ko, ipc.c): the fd must be a control file of the "
         "caller's slice (translated to its real file); only memory vgpu.ko tracks in the caller's client "
         "is exported, and the export file holds its FB charge per slot until the driver's release of that "
         "file frees RM's own dup (rmobjexportimport.c); an import is tracked with that charge; a slot is "
         "never exported over; the export's device instance is given back as the slice's GPU number "
         "(docs/mediator.md, Open item 8)",
         names("NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD", "NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECT_FROM_FD",
               "NV0000_CTRL_CMD_OS_UNIX_GET_EXPORT_OBJECT_INFO",
               "NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD", "NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECTS_FROM_FD"),
         ("control",)),
    Rule("refuse", "CUDA IPC: deprecated (\"will be deleted soon\", os.c); it sets a file up for exports "
         "without exporting, outside the slots vgpu.ko keeps for the file (ipc.c); CUDA uses "
         "EXPORT_OBJECTS_TO_FD, which sets the file up itself",
         names("NV0000_CTRL_CMD_OS_UNIX_CREATE_EXPORT_OBJECT_FD"), ("control",)),
    Rule("forward", "through NV_ESC_RM_ALLOC_MEMORY: the caller's own pages, pinned by the driver "
         "from the calling process (RmAllocOsDescriptor), tracked without an FB charge; the driver's "
         "fallback to VM_IO/VM_PFNMAP mappings (os_lookup_user_io_memory) cannot take vgpu.ko's call "
         "pages, which are neither (docs/mediator.md, \"The call page\"); through RM_ALLOC the driver "
         "takes no user address (osdescConstruct) and vgpu.ko refuses it",
         names("NV01_MEMORY_SYSTEM_OS_DESCRIPTOR"), ("class",)),

    # -- NULL commands do nothing (placed after the families above, so that
    #    no item of a refused family is forwarded, even one that does nothing).
    Rule("forward", "driver: the NULL command answers NV_OK before any lookup (control.c)",
         lambda i: i.value is not None and i.value & 0xffff == 0, ("control",)),

    # -- classes the release's driver decides on: engines on the caller's
    #    own channels, for every GPU generation the headers name.
    Rule("forward", "engine object on the caller's own channel (compute, copy, 3D, video, channels, "
         "usermode); CUDA needs those of its GPU", pattern(ENGINE_CLASS), ("class",)),
    Rule("refuse", "driver: exported by no class of the release's RM (it answers NV_ERR_NOT_SUPPORTED: "
         "resControlLookup, rs_resource.c); where the release's own export tables are known vgpu.ko "
         "answers the same, without forwarding",
         lambda i: i.privilege == "", ("control",), flags=True),
    Rule("refuse", "driver: not in 595.45.04's resource_list.h (it answers NV_ERR_INVALID_CLASS)",
         lambda i: i.privilege == "", ("class",), flags=True),

    # -- the rest: what the driver lets any user do and nothing above claims.
    Rule("forward", "driver: non-privileged; no isolation or reporting rule applies",
         privilege("non-privileged"), flags=True),
]


def decide(item: Item) -> tuple[str, str]:
    """The first matching rule's verdict and reason."""
    for rule in RULES:
        if item.kind in rule.kinds and rule.match(item):
            return rule.verdict, rule.why(item)
    raise AssertionError(f"no rule for {item}")


# --------------------------------------------------------------- reading
def _hex(kind: str, cell: str) -> int | None:
    return None if cell in ("", "?") else int(cell, 16)


def _size(cells: list[str]) -> str:
    seen = [c if c else "-" for c in dict.fromkeys(cells)]
    return "|".join(seen)


def own_control_flags(release: str, tables: Path = TABLES) -> bool:
    """Whether the release's controls table carries its own export-table
    columns (its whole tree is vendored: 535.261.03, 595.45.04), rather
    than '-' (headers only: 595.45.04's flags are taken by name)."""
    return any(r["rm_privilege"] != "-" for r in tsv.read(tables / release / "controls.tsv"))


def _flags_source(tables: Path, release: str = FLAGS_RELEASE
                  ) -> tuple[dict[str, dict[str, str]], dict[str, set[str]]]:
    """From the flags release, by kind and name: the rm_privilege (the
    deprecated V1 controls carrying their V2 command's), and the names the
    driver copies no params for (a class with `rm_alloc none`, a control
    whose export entry has paramSize 0).  With release, the controls are
    that release's own (own_control_flags)."""
    priv: dict[str, dict[str, str]] = {}
    none: dict[str, set[str]] = {}
    for kind in ("class", "control"):
        f, _ = KINDS[kind]
        rows = tsv.read(tables / (release if kind == "control" else FLAGS_RELEASE) / f"{f}.tsv")
        p = {r["name"]: r["rm_privilege"] for r in rows if r["name"]}
        if kind == "control":
            for old, new in DEPRECATED_V1.items():
                if old in p and not p[old]:
                    p[old] = p.get(new, "")
            none[kind] = {r["name"] for r in rows if r["name"] and r["rm_privilege"] and not r["rm_params"]}
        else:
            none[kind] = {r["name"] for r in rows if r["rm_alloc"] == "none"}
        priv[kind] = p
    return priv, none


def _embedded_cell(structs: list[str], known: dict[str, str], takes_none: bool) -> str:
    """The embedded column: each params struct's cell (labelled by struct
    when an item accepts several, as RM_ALLOC does), `-` for none."""
    cells = [(s, known[s]) for s in structs if s in known]
    if len(cells) == 1 or len({c for _, c in cells}) == 1:
        return cells[0][1]
    if cells:
        return "; ".join(f"{s}: {c}" for s, c in cells)
    if structs or takes_none:
        return "-"
    return "- (unknown: no params struct known)"


def params_structs(rows: list[dict]) -> list[str]:
    """The params structs whose members the embedded column describes, for
    the table rows of one (number, name): the driver's own types where the
    595.45.04 tree names them (rm_params, rm_alloc's type), else the header's
    params struct.  Several when an item accepts several (RM_ALLOC)."""
    structs = []
    for r in rows:
        alloc = r.get("rm_alloc", "").split()
        driver = [t for t in r.get("rm_params", "").split("|") if t and t != "-"]
        if len(alloc) == 2:
            driver.append(alloc[1])
        structs += driver or ([r["params"]] if r["params"] else [])
    return list(dict.fromkeys(structs))


def items(release: str, tables: Path = TABLES, embedded: Path = EMBEDDED) -> list[Item]:
    """Every item of a release's tables, one per (kind, value, name).
    Privilege is 595.45.04's, by name for other releases; a release whose
    own export tables are in its controls table (own_control_flags) takes
    from them whether a command is exported at all and the privilege of the
    commands no header names."""
    own = release != FLAGS_RELEASE and own_control_flags(release, tables)
    flags, none = _flags_source(tables)
    if own:
        own_flags_priv, own_none = _flags_source(tables, release)
        none["control"] = own_none["control"]
    known = {r["struct"]: r["embedded"] for r in tsv.read(embedded / f"{release}.tsv")}
    out = []
    for kind, (fname, numcol) in KINDS.items():
        grouped: dict[tuple, list[dict]] = {}
        for r in tsv.read(tables / release / f"{fname}.tsv"):
            grouped.setdefault((r[numcol], r["name"]), []).append(r)
        for (num, name), rows in grouped.items():
            value = _hex(kind, num)
            structs = params_structs(rows)
            own_item = False
            if kind in flags:
                in_flags = release == FLAGS_RELEASE or name in flags[kind]
                if release == FLAGS_RELEASE and name not in DEPRECATED_V1:
                    priv = rows[0]["rm_privilege"]
                else:
                    priv = flags[kind].get(name, "")
                if own and kind == "control":
                    # The release's own export tables decide whether its
                    # driver has the command at all, and give the privilege
                    # of a command no header names; a named command keeps
                    # 595.45.04's reviewed privilege and its "undecided"
                    # when 595.45.04 lacks it (none of the 36 whose own
                    # privilege differs is forwarded: test_nvgen_policy).
                    own_priv = own_flags_priv[kind].get(name, "") if name else rows[0]["rm_privilege"]
                    if not name or not own_priv:
                        priv, in_flags, own_item = own_priv, in_flags or not name, True
            else:
                priv, in_flags = "", True
            takes_none = (kind == "control" and value is not None and value & 0xffff == 0) or \
                name in none.get(kind, ())
            out.append(Item(release, kind, value, name, _size([r["sizeof"] for r in rows]), priv, in_flags,
                            _embedded_cell(structs, known, takes_none), own_item))
    return out


def releases(tables: Path = TABLES) -> list[str]:
    return sorted((p.name for p in tables.iterdir() if p.is_dir()),
                  key=lambda r: tuple(int(x) for x in r.split(".")))


def policy_rows(release: str, tables: Path = TABLES, embedded: Path = EMBEDDED) -> list[dict]:
    """kmod/vgpu/policy/<release>.tsv's rows, sorted by kind, value, name."""
    rows = []
    for it in items(release, tables, embedded):
        verdict, reason = decide(it)
        value = "?" if it.value is None else f"0x{it.value:0{WIDTH[it.kind]}x}"
        rows.append(dict(kind=it.kind, value=value, name=it.name, size=it.size, verdict=verdict,
                         reason=reason, embedded=it.embedded))
    unknown = 1 << 40
    return sorted(rows, key=lambda r: (r["kind"], unknown if r["value"] == "?" else int(r["value"], 16),
                                       r["name"]))


def write(out: Path = DOCS, tables: Path = TABLES, embedded: Path = EMBEDDED,
          nvproxy: Path = HERE / "nvproxy") -> dict[str, list[dict]]:
    from . import policy_doc
    out.mkdir(parents=True, exist_ok=True)
    every = {}
    for release in releases(tables):
        every[release] = policy_rows(release, tables, embedded)
        tsv.write(out / f"{release}.tsv", COLUMNS, every[release])
    (out / "README.md").write_text(policy_doc.render(every, nvproxy))
    return every


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nvgen.policy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DOCS, help="output directory (default: %(default)s)")
    args = ap.parse_args(argv)
    every = write(args.out)
    for release, rows in every.items():
        counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICTS}
        print(release, "  ".join(f"{v}={n}" for v, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
