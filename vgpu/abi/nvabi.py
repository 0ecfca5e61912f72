"""ctypes mirror of kmod/include/nvabi.h: the NVIDIA driver ABI subset.

The C header is the single source of truth; this module repeats its layouts
and constants for Python with NVIDIA's own names (NVOS21_PARAMETERS,
hObjectNew, ...).  tests/host/test_abi_layout.py compiles a program against
the header and compares every struct size, field offset, field size and
constant defined here, and checks the layouts against the figures compiled
from NVIDIA's 595.45.04 headers (tests/data/nvidia-595-abi-offsets.txt).

Rules for this file:
- x86_64 only.  Structures use natural alignment, which on x86_64 is what the
  header's ``NV_ALIGN8`` / ``NvP64`` attributes ask for; explicit ``_pad``
  fields appear exactly where the header has them (implicit padding stays
  implicit, as in C).
- NvBool is a plain ``c_uint8`` (not ``c_bool``), so that any byte value
  round-trips.
- Standard library only: the client and the CLIs import this at start-up.
- Every public ``ctypes.Structure`` subclass here must exist under the same
  name in nvabi.h; helper types that C spells anonymously start with ``_``.
- Every public upper-case integer constant must exist in nvabi.h with the
  same value, unless listed in ``PYTHON_ONLY_CONSTANTS``.
"""

from __future__ import annotations

import ctypes
from ctypes import (c_char, c_int16, c_int32, c_uint8, c_uint16, c_uint32,
                    c_uint64, c_void_p)

# ------------------------------------------------------------------ types
NvU8 = c_uint8
NvU16 = c_uint16
NvU32 = c_uint32
NvU64 = c_uint64
NvS16 = c_int16
NvS32 = c_int32
NvBool = c_uint8
NvHandle = c_uint32
NvV32 = c_uint32
NV_STATUS = c_uint32
NvP64 = c_uint64          # a user pointer carried as an 8-byte aligned u64
c_int = c_int32           # C `int` on x86_64 (embedded file descriptors)


class NvStruct(ctypes.Structure):
    """Base of every ABI structure: byte helpers and a readable repr."""

    def to_bytes(self) -> bytes:
        return ctypes.string_at(ctypes.addressof(self), ctypes.sizeof(self))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview):
        """Build from the first sizeof(cls) bytes of data (zero-filled if short)."""
        obj = cls()
        n = min(len(data), ctypes.sizeof(cls))
        ctypes.memmove(ctypes.addressof(obj), bytes(data[:n]), n)
        return obj

    def addr(self) -> int:
        """User address of this structure, for embedded pointers."""
        return ctypes.addressof(self)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        parts = []
        for name, *_ in self._fields_:
            if name.startswith("_"):
                continue
            v = getattr(self, name)
            if isinstance(v, int):
                parts.append(f"{name}={v:#x}")
            elif isinstance(v, bytes):
                parts.append(f"{name}={v!r}")
            elif isinstance(v, ctypes.Array):
                parts.append(f"{name}=[{len(v)}]")
            else:
                parts.append(f"{name}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"


class NvUnion(ctypes.Union):
    pass


# ------------------------------------------------------- device numbering
NV_MAJOR_DEVICE_NUMBER = 195
NV_CONTROL_DEVICE_MINOR = 255
NV_MODESET_DEVICE_MINOR = 254
NV_MAX_GPU_MINOR = 247

# ------------------------------------------------------ ioctl encoding
NV_IOCTL_MAGIC = ord("F")
NV_IOCTL_BASE = 200
NV_ESC_CARD_INFO = NV_IOCTL_BASE + 0
NV_ESC_REGISTER_FD = NV_IOCTL_BASE + 1
NV_ESC_ALLOC_OS_EVENT = NV_IOCTL_BASE + 6
NV_ESC_FREE_OS_EVENT = NV_IOCTL_BASE + 7
NV_ESC_STATUS_CODE = NV_IOCTL_BASE + 9
NV_ESC_CHECK_VERSION_STR = NV_IOCTL_BASE + 10
NV_ESC_IOCTL_XFER_CMD = NV_IOCTL_BASE + 11
NV_ESC_ATTACH_GPUS_TO_FD = NV_IOCTL_BASE + 12
NV_ESC_SYS_PARAMS = NV_IOCTL_BASE + 14
NV_ESC_NUMA_INFO = NV_IOCTL_BASE + 15
NV_ESC_EXPORT_TO_DMABUF_FD = NV_IOCTL_BASE + 17
NV_ESC_WAIT_OPEN_COMPLETE = NV_IOCTL_BASE + 18

NV_ESC_RM_ALLOC_MEMORY = 0x27
NV_ESC_RM_ALLOC_OBJECT = 0x28
NV_ESC_RM_FREE = 0x29
NV_ESC_RM_CONTROL = 0x2A
NV_ESC_RM_ALLOC = 0x2B
NV_ESC_RM_DUP_OBJECT = 0x34
NV_ESC_RM_SHARE = 0x35
NV_ESC_RM_IDLE_CHANNELS = 0x41
NV_ESC_RM_VID_HEAP_CONTROL = 0x4A
NV_ESC_RM_MAP_MEMORY = 0x4E
NV_ESC_RM_UNMAP_MEMORY = 0x4F
NV_ESC_RM_ALLOC_CONTEXT_DMA2 = 0x54
NV_ESC_RM_MAP_MEMORY_DMA = 0x57
NV_ESC_RM_UNMAP_MEMORY_DMA = 0x58
NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO = 0x5E

NV_ABSOLUTE_MAX_IOCTL_SIZE = 16384

# ------------------------------------------------------- status codes
NV_OK = 0x00000000
NV_ERR_GENERIC = 0x0000FFFF
NV_ERR_GPU_UUID_NOT_FOUND = 0x00000012
NV_ERR_ILLEGAL_ACTION = 0x00000016
NV_ERR_IN_USE = 0x00000017
NV_ERR_INSERT_DUPLICATE_NAME = 0x00000019
NV_ERR_INSUFFICIENT_RESOURCES = 0x0000001A
NV_ERR_INSUFFICIENT_PERMISSIONS = 0x0000001B
NV_ERR_INVALID_ARGUMENT = 0x0000001F
NV_ERR_INVALID_CLASS = 0x00000022
NV_ERR_INVALID_CLIENT = 0x00000023
NV_ERR_INVALID_COMMAND = 0x00000024
NV_ERR_INVALID_LIMIT = 0x0000002E
NV_ERR_INVALID_OBJECT_HANDLE = 0x00000033
NV_ERR_INVALID_OBJECT_PARENT = 0x00000036
NV_ERR_INVALID_PARAM_STRUCT = 0x0000003A
NV_ERR_INVALID_REQUEST = 0x0000003F
NV_ERR_INVALID_STATE = 0x00000040
NV_ERR_NO_MEMORY = 0x00000051
NV_ERR_NOT_SUPPORTED = 0x00000056
NV_ERR_OBJECT_NOT_FOUND = 0x00000057
NV_WARN_NOTHING_TO_DO = 0x00010006
NV_ERR_STATE_IN_USE = 0x00000063
NV_ERR_RESOURCE_LOST = 0x0000006E
NV_ERR_TIMEOUT = 0x00000065

# ------------------------------------------------------------- classes
NV01_ROOT = 0x00000000
NV01_ROOT_NON_PRIV = 0x00000001
NV01_ROOT_CLIENT = 0x00000041
NV0020_GPU_MANAGEMENT = 0x00000020
NV_CONFIDENTIAL_COMPUTE = 0x0000cb33
NV01_DEVICE_0 = 0x00000080
NV20_SUBDEVICE_0 = 0x00002080
NV01_MEMORY_SYSTEM = 0x0000003E
NV01_MEMORY_LOCAL_PRIVILEGED = 0x0000003F
NV01_MEMORY_LOCAL_USER = 0x00000040
NV01_MEMORY_EXTENDED_USER = 0x00000042
NV01_MEMORY_VIRTUAL = 0x00000070   # VirtualMemoryRange: NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS
NV50_MEMORY_VIRTUAL = 0x000050A0   # VirtualMemory: NV_MEMORY_ALLOCATION_PARAMS
NV_MEMORY_FABRIC = 0x000000F8
NV_MEMORY_MULTICAST_FABRIC = 0x000000FD
KEPLER_CHANNEL_GROUP_A = 0x0000A06C
GT200_DEBUGGER = 0x000083DE
NV50_P2P = 0x0000503B
KEPLER_CHANNEL_GPFIFO_A = 0x0000A06F
KEPLER_CHANNEL_GPFIFO_B = 0x0000A16F
MAXWELL_CHANNEL_GPFIFO_A = 0x0000B06F
PASCAL_CHANNEL_GPFIFO_A = 0x0000C06F
VOLTA_CHANNEL_GPFIFO_A = 0x0000C36F
TURING_CHANNEL_GPFIFO_A = 0x0000C46F
AMPERE_CHANNEL_GPFIFO_A = 0x0000C56F
HOPPER_CHANNEL_GPFIFO_A = 0x0000C86F
BLACKWELL_CHANNEL_GPFIFO_A = 0x0000C96F
BLACKWELL_CHANNEL_GPFIFO_B = 0x0000CA6F
VOLTA_USERMODE_A = 0x0000C361
TURING_USERMODE_A = 0x0000C461
AMPERE_USERMODE_A = 0x0000C561
HOPPER_USERMODE_A = 0x0000C661
BLACKWELL_USERMODE_A = 0x0000C761

NVC361_USERMODE_REGION_SIZE = 0x10000
NVC361_TIME_0 = 0x80
NVC361_TIME_1 = 0x84
NVC361_NOTIFY_CHANNEL_PENDING = 0x90

# A channel's USERD (clc36f.h NvC36FControl, Volta+).
NVC36F_GPGET_OFFSET = 0x88
NVC36F_GPPUT_OFFSET = 0x8C

# nvsim only: the simulated channel mapping (see nvabi.h).
NVSIM_CHANNEL_MAP_PAGES = 2
NVSIM_USERD_COMPLETIONS_OFFSET = 0x800
NVSIM_USERD_COMPLETIONS = 64
NVSIM_GPFIFO_ENTRIES_DEFAULT = 128
NVSIM_GPFIFO_ENTRIES_MIN = 2
NVSIM_GPFIFO_ENTRIES_MAX = 512

# --------------------------------------------------------- controls
NV0041_CTRL_CMD_GET_SURFACE_INFO = 0x00410110
NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_LO = 2
NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_HI = 3

NV2080_CTRL_CMD_FB_GET_INFO = 0x20801301
NV2080_CTRL_CMD_FB_GET_INFO_V2 = 0x20801303
NV2080_CTRL_CMD_FB_GET_UGPU_MEMORY_INFO = 0x20801362
NV2080_CTRL_CMD_GPU_GET_PIDS = 0x2080018D
NV2080_CTRL_CMD_GPU_GET_PID_INFO = 0x2080018E
NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS = 0x2080110B
NV2080_CTRL_CMD_GPU_GET_NAME_STRING = 0x20800110
NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 = 0x00000205
NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS = 0x00000201
NV0000_CTRL_CMD_GPU_GET_INIT_STATUS = 0x00000203
NV0000_CTRL_CMD_GPU_GET_PROBED_IDS = 0x00000214
NV0000_CTRL_CMD_GPU_GET_PCI_INFO = 0x0000021B
NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID = 0x00000275
NV0000_CTRL_CMD_GPU_QUERY_DRAIN_STATE = 0x00000279
NV0000_CTRL_CMD_GPU_GET_ID_INFO = 0x00000202
NV0000_CTRL_CMD_GPU_GET_DEVICE_IDS = 0x00000204
NV0000_CTRL_CMD_GPU_ATTACH_IDS = 0x00000215
NV0000_CTRL_CMD_GPU_DETACH_IDS = 0x00000216
NV0000_CTRL_CMD_GPU_GET_ACTIVE_DEVICE_IDS = 0x00000288
NV0000_CTRL_CMD_GPU_ASYNC_ATTACH_ID = 0x00000289
NV0000_CTRL_CMD_GPU_WAIT_ATTACH_ID = 0x00000290
NV0000_CTRL_GPU_ATTACH_ALL_PROBED_IDS = 0x0000FFFF
NV0000_CTRL_GPU_DETACH_ALL_ATTACHED_IDS = 0x0000FFFF
NV0000_CTRL_GPU_MAX_ACTIVE_DEVICES = 256
NV0000_CTRL_CMD_GPU_GET_MEMOP_ENABLE = 0x0000027B
NV0080_CTRL_CMD_GPU_GET_NUM_SUBDEVICES = 0x00800280
# Answered by vgpu.ko for a GPU with no peer and no fabric (kmod/vgpu/policy).
NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS = 0x00000127
NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO = 0x00000a04
NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2 = 0x0000012B
NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS = 0x00000136
NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX = 0x0000013A
NV2080_CTRL_CMD_GET_GPU_FABRIC_PROBE_INFO = 0x208001A3
NV2080_CTRL_CMD_NVLINK_GET_NVLINK_CAPS = 0x20803001
NV2080_CTRL_CMD_NVLINK_GET_NVLINK_STATUS = 0x20803002
NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS = 32
NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS = 8
NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE = 9
NV0000_P2P_CAPS_STATUS_NOT_SUPPORTED = 0x05
NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER = 0xFFFFFFFF
NV0000_CTRL_GET_SYSTEM_FABRIC_STATUS_SKIP = 1
NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO = 0x00000D02
NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT = 0x00000001
NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID = 0x00000002
NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY = 0x00000D04
RS_SHARE_TYPE_NONE = 0
RS_SHARE_TYPE_PID = 4
RS_SHARE_ACTION_FLAG_REVOKE = 0x01
NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO = 0x20801320
NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES = 16
NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MEM_TYPES = 18
NVA06F_CTRL_CMD_SET_INTERLEAVE_LEVEL = 0xA06F0109
NVA06F_CTRL_CMD_GET_INTERLEAVE_LEVEL = 0xA06F0110
NVA06F_CTRL_CMD_STOP_CHANNEL = 0xA06F0112
NV0000_CTRL_GPU_INVALID_ID = 0xFFFFFFFF
NV0000_CTRL_GPU_MAX_ATTACHED_GPUS = 32
NV0000_CTRL_GPU_MAX_PROBED_GPUS = 32
# Answered NV_OK by vgpu.ko, never applied (kmod/vgpu/policy, rules 12, 20, 21).
NV2080_CTRL_CMD_GPU_ACQUIRE_COMPUTE_MODE_RESERVATION = 0x20800145
NV2080_CTRL_CMD_GPU_RELEASE_COMPUTE_MODE_RESERVATION = 0x20800146
NV2080_CTRL_CMD_TIMER_SET_GR_TICK_FREQ = 0x20800407
NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG = 0x2080220A
NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG = 0x2080220B
NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS = 0x2080220C
NV2080_CTRL_CMD_RC_SOFT_DISABLE_WATCHDOG = 0x20802210
NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL = 0x00801909
NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL_LEGACY = 0x00809909
NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD = 0x00003D05
NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECT_FROM_FD = 0x00003D06
NV0000_CTRL_CMD_OS_UNIX_GET_EXPORT_OBJECT_INFO = 0x00003D08
NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD = 0x00003D0B
NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECTS_FROM_FD = 0x00003D0C
NV2080_GPU_MAX_NAME_STRING_LENGTH = 0x40
NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII = 0

NV2080_CTRL_FB_INFO_INDEX_BAR1_SIZE = 0x05
NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE = 0x07
NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE = 0x08
NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE = 0x09
NV2080_CTRL_FB_INFO_INDEX_MAPPABLE_HEAP_SIZE = 0x0A
NV2080_CTRL_FB_INFO_INDEX_LARGEST_FREE_REGION_SIZE_KB = 0x12
NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE = 0x16
NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE = 0x20
NV2080_CTRL_FB_INFO_MAX_LIST_SIZE = 128

NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT = 950
NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_CLASS = 0
NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_VGPU_GUEST = 1
NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES = 200
NV2080_CTRL_GPU_PID_INFO_INDEX_VIDEO_MEMORY_USAGE = 0

NVA06C_CTRL_CMD_GPFIFO_SCHEDULE = 0xA06C0101
NVA06C_CTRL_CMD_SET_TIMESLICE = 0xA06C0103
NVA06C_CTRL_CMD_GET_TIMESLICE = 0xA06C0104
NVA06C_CTRL_CMD_PREEMPT = 0xA06C0105
NVA06C_CTRL_CMD_GET_INFO = 0xA06C0106
NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL = 0xA06C0107
NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL = 0xA06C0108
NVA06C_CTRL_CMD_MAKE_REALTIME = 0xA06C0110
NVA06F_CTRL_CMD_GPFIFO_SCHEDULE = 0xA06F0103
NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN = 0xC36F0108

NVA06C_CTRL_INTERLEAVE_LEVEL_LOW = 0
NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM = 1
NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH = 2

RM_GSS_LEGACY_MASK = 0x00008000
RM_CTRL_PRIVILEGED_MASK = 0x0000C000
NVOS54_FLAGS_FINN_SERIALIZED = 0x00000004
NVOS64_FLAGS_FINN_SERIALIZED = 0x00000001


def NVXXXX_CTRL_CMD_CLASS(cmd: int) -> int:
    return (cmd >> 16) & 0xFFFF


def NVXXXX_CTRL_CMD_CATEGORY(cmd: int) -> int:
    return (cmd >> 8) & 0xFF


NVOS32_FUNCTION_ALLOC_SIZE = 2
NVOS32_FUNCTION_FREE = 3
NVOS32_FUNCTION_INFO = 5
NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT = 6
NVOS32_FUNCTION_ALLOC_SIZE_RANGE = 14
NVOS32_ALLOC_FLAGS_VIRTUAL = 0x00080000
NVOS32_FREE_FLAGS_MEMORY_HANDLE_PROVIDED = 0x00000001
NV_DEVICE_ALLOCATION_FLAGS_HOST_VGPU_DEVICE = 0x00002000
NV_DEVICE_ALLOCATION_FLAGS_PLUGIN_CONTEXT = 0x00004000
NVOS32_ATTR_LOCATION_SHIFT = 25
NVOS32_ATTR_LOCATION_MASK = 0x3
NVOS32_ATTR_LOCATION_VIDMEM = 0
NVOS32_ATTR_LOCATION_PCI = 1
NVOS32_ATTR_LOCATION_ANY = 2

# nvos.h: NVOS32_ATTR_PAGE_SIZE 24:23, NVOS32_ATTR_COMPR 13:12, NVOS32_ATTR2_PAGE_SIZE_HUGE 21:20
NVOS32_ATTR_PAGE_SIZE_SHIFT = 23
NVOS32_ATTR_PAGE_SIZE_MASK = 0x3
NVOS32_ATTR_PAGE_SIZE_DEFAULT = 0
NVOS32_ATTR_PAGE_SIZE_4KB = 1
NVOS32_ATTR_PAGE_SIZE_BIG = 2
NVOS32_ATTR_PAGE_SIZE_HUGE = 3
NVOS32_ATTR_COMPR_SHIFT = 12
NVOS32_ATTR_COMPR_MASK = 0x3
NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT = 20
NVOS32_ATTR2_PAGE_SIZE_HUGE_MASK = 0x3
NVOS32_ATTR2_PAGE_SIZE_HUGE_DEFAULT = 0
NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB = 1
NVOS32_ATTR2_PAGE_SIZE_HUGE_512MB = 2
NVOS32_ATTR2_PAGE_SIZE_HUGE_256GB = 3
NVOS32_ATTR2_GPU_CACHEABLE_SHIFT = 2
NVOS32_ATTR2_GPU_CACHEABLE_MASK = 0x3
NVOS32_ATTR2_GPU_CACHEABLE_DEFAULT = 0
NVOS32_ATTR2_GPU_CACHEABLE_NO = 2
# NVOS02 flags: ALLOC bits 17:16 (NONE = 1), MAPPING bits 31:30 (NO_MAP = 1);
# RM_ALLOC_MEMORY of system memory makes an mmap context unless either says no.
NVOS02_FLAGS_ALLOC_SHIFT = 16
NVOS02_FLAGS_ALLOC_MASK = 0x3
NVOS02_FLAGS_ALLOC_NONE = 1
NVOS02_FLAGS_MAPPING_SHIFT = 30
NVOS02_FLAGS_MAPPING_MASK = 0x3
NVOS02_FLAGS_MAPPING_NO_MAP = 1

NV_RM_API_VERSION_STRING_LENGTH = 64
NV_RM_API_VERSION_CMD_STRICT = 0
NV_RM_API_VERSION_CMD_RELAXED = ord("1")
NV_RM_API_VERSION_CMD_QUERY = ord("2")
NV_RM_API_VERSION_REPLY_UNRECOGNIZED = 0
NV_RM_API_VERSION_REPLY_RECOGNIZED = 1

# ------------------------------------------------------------ UVM
UVM_INITIALIZE = 0x30000001
UVM_DEINITIALIZE = 0x30000002
UVM_REGISTER_GPU_VASPACE = 25
UVM_REGISTER_CHANNEL = 27
UVM_MAP_EXTERNAL_ALLOCATION = 33
UVM_FREE = 34
UVM_REGISTER_GPU = 37
UVM_MIGRATE = 51
UVM_ALLOC_SEMAPHORE_POOL = 68
UVM_CREATE_EXTERNAL_RANGE = 73
UVM_UNMAP_EXTERNAL = 66
UVM_MM_INITIALIZE = 75
UVM_MAX_GPUS = 256

# ==== BEGIN nvsim start-up block (constants): mirrors nvabi.h's block ====
# Class list, GPU/GID/build/GR info, VA spaces, context shares, engine
# objects, OS descriptors, MAP_MEMORY_DMA (595.45.04 headers).
NV_ERR_INVALID_ADDRESS = 0x0000001E
NV_ERR_UVM_ADDRESS_IN_USE = 0x00000068
NV_ERR_INVALID_FLAGS = 0x00000029
NV_ERR_INVALID_OBJECT = 0x00000031
NV_ERR_INVALID_OFFSET = 0x00000037
NV_ERR_INVALID_PARAMETER = 0x0000003B
NV_ERR_OUT_OF_RANGE = 0x0000005B
NV01_MEMORY_SYSTEM_OS_DESCRIPTOR = 0x00000071
NV01_EVENT = 0x00000005
NV01_EVENT_OS_EVENT = 0x00000079
NV01_EVENT_KERNEL_CALLBACK = 0x00000078  # nvos.h
NV01_EVENT_KERNEL_CALLBACK_EX = 0x0000007e
FERMI_CONTEXT_SHARE_A = 0x00009067
FERMI_VASPACE_A = 0x000090F1
FERMI_TWOD_A = 0x0000902D
KEPLER_INLINE_TO_MEMORY_B = 0x0000A140
AMPERE_B = 0x0000C797
AMPERE_COMPUTE_B = 0x0000C7C0
AMPERE_DMA_COPY_B = 0x0000C7B5
HOPPER_A = 0x0000CB97
HOPPER_COMPUTE_A = 0x0000CBC0
HOPPER_DMA_COPY_A = 0x0000C8B5
NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION = 0x00000101
NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2 = 0x0000013E
NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE = 256
NV0080_CTRL_CMD_GPU_GET_CLASSLIST = 0x00800201
NV2080_CTRL_CMD_GPU_GET_INFO = 0x20800101
NV2080_CTRL_CMD_GPU_GET_INFO_V2 = 0x20800102
NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST = 0x20800124
NV2080_CTRL_CMD_GPU_GET_GID_INFO = 0x2080014A
NV2080_CTRL_CMD_GR_GET_INFO = 0x20801201
NV2080_CTRL_GPU_INFO_INDEX_INDEX_MASK = 0x00FFFFFF
NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE = 0x46
NV2080_CTRL_GPU_INFO_INDEX_ECID_LO32 = 0x01
NV2080_CTRL_GPU_INFO_INDEX_ECID_HI32 = 0x02
NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV0 = 0x12
NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV1 = 0x13
NV2080_CTRL_GPU_INFO_INDEX_ECID_EXTENDED = 0x1B
NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS = 0x1F
NV2080_CTRL_GPU_INFO_INDEX_GEMINI_BOARD = 0x22
NV2080_CTRL_GPU_INFO_INDEX_SURPRISE_REMOVAL_POSSIBLE = 0x25
NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE = 0x2A
NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION = 0x2C
NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED = 0x34
NV2080_CTRL_GPU_INFO_INDEX_MOBILE_CONFIG_ENABLED = 0x35
NV2080_CTRL_GPU_INFO_INDEX_GPU_PROFILING_CAPABILITY = 0x36
NV2080_CTRL_GPU_INFO_INDEX_GPU_DEBUGGING_CAPABILITY = 0x37
NV2080_CTRL_GPU_INFO_INDEX_CMP_SKU = 0x3C
NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY = 0x3D
NV2080_CTRL_GPU_INFO_INDEX_COHERENT_GPU_MEMORY_MODE = 0x44
NV2080_CTRL_GPU_INFO_SYSMEM_ACCESS_YES = 1
NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_NO = 0
NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_YES = 1
NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_UNSUPPORTED = 0
NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_DISABLED = 2
NV2080_CTRL_GPU_INFO_DISPLAY_ENABLED_NO = 0
NV2080_CTRL_GPU_INFO_DISPLAY_ENABLED_YES = 1
NV2080_GPU_MAX_GID_LENGTH = 0x100
NV0000_GPU_MAX_GID_LENGTH = 0x100
NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_MASK = 0x3
NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_BINARY = 0x2
NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_TYPE_SHA256 = 0x4
NV2080_GPU_MAX_SHA1_BINARY_GID_LENGTH = 0x10
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_MASK = 0x3
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_ASCII = 0x0
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY = 0x2
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHIFT = 2
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHA1 = 0x0
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_SHIFT = 3
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_MASK = 0x7
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_GPU = 0x0
NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_UGPU = 0x1
NV_UUID_LEN = 16
NV_UUID_STR_LEN = 41
NV2080_CTRL_GR_INFO_INDEX_SM_VERSION = 0x0C
NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM = 0x0D
NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP = 0x0E
NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS = 0x14
NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC = 0x17
NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC = 0x20
NV2080_CTRL_GR_INFO_INDEX_MAX_SUBCONTEXT_COUNT = 0x2C
NV2080_CTRL_GR_INFO_MAX_SIZE = 0x3B
NV2080_CTRL_GR_INFO_SM_VERSION_8_06 = 0x0806
NV2080_CTRL_GR_INFO_SM_VERSION_9_00 = 0x0900
NV2080_ENGINE_TYPE_NULL = 0x00
NV2080_ENGINE_TYPE_GR0 = 0x01
NV2080_ENGINE_TYPE_GR7 = 0x08
NV2080_ENGINE_TYPE_COPY0 = 0x09
NV2080_ENGINE_TYPE_COPY9 = 0x12
NV_VASPACE_ALLOCATION_INDEX_GPU_NEW = 0x00
NV_VASPACE_ALLOCATION_INDEX_GPU_HOST = 0x01
NV_VASPACE_ALLOCATION_INDEX_GPU_GLOBAL = 0x02
NV_VASPACE_ALLOCATION_INDEX_GPU_DEVICE = 0x03
NV_VASPACE_ALLOCATION_INDEX_GPU_FLA = 0x04
NV_VASPACE_ALLOCATION_FLAGS_SHARED_MANAGEMENT = 0x00000004
NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED = 0x00000008
NV_VASPACE_ALLOCATION_FLAGS_ENABLE_NVLINK_ATS = 0x00000010
NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING = 0x00000040
NV_VASPACE_ALLOCATION_FLAGS_ALLOW_ZERO_ADDRESS = 0x00000100
NV_VASPACE_BIG_PAGE_SIZE_64K = 0x00010000
NV_VASPACE_BIG_PAGE_SIZE_128K = 0x00020000
NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC = 0
NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC = 1
NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED = 2
NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC_PREFER_LOWER = 3
NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES = 0
NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE = 1
NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES = 2
NVOS32_DESCRIPTOR_TYPE_VIRTUAL_ADDRESS = 0
NVOS32_DESCRIPTOR_TYPE_OS_PAGE_ARRAY = 1
NVOS32_DESCRIPTOR_TYPE_OS_IO_MEMORY = 2
NVOS32_DESCRIPTOR_TYPE_OS_PHYS_ADDR = 3
NVOS32_DESCRIPTOR_TYPE_OS_FILE_HANDLE = 4
NVOS32_DESCRIPTOR_TYPE_OS_DMA_BUF_PTR = 5
NVOS32_DESCRIPTOR_TYPE_OS_SGT_PTR = 6
NVOS32_DESCRIPTOR_TYPE_KERNEL_VIRTUAL_ADDRESS = 7
NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE = 0x00000010
NVOS02_FLAGS_PHYSICALITY_SHIFT = 4
NVOS02_FLAGS_PHYSICALITY_MASK = 0xF
NVOS02_FLAGS_PHYSICALITY_CONTIGUOUS = 0
NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS = 1
NVOS02_FLAGS_LOCATION_SHIFT = 8
NVOS02_FLAGS_LOCATION_MASK = 0xF
NVOS02_FLAGS_LOCATION_PCI = 0
NVOS02_FLAGS_COHERENCY_SHIFT = 12
NVOS02_FLAGS_COHERENCY_MASK = 0xF
NVOS02_FLAGS_COHERENCY_UNCACHED = 0
NVOS02_FLAGS_COHERENCY_CACHED = 1
NVOS02_FLAGS_COHERENCY_WRITE_BACK = 5
NVOS02_FLAGS_ALLOC_USER_READ_ONLY_SHIFT = 21
NVOS46_FLAGS_DMA_OFFSET_FIXED_SHIFT = 15
# ==== END nvsim start-up block (constants) ====

# ------------------------------------------------ kernel RM entry point
NV01_FREE = 0x00000000
NV01_ALLOC_MEMORY = 0x00000002
NV04_ALLOC = 0x00000015
NV04_VID_HEAP_CONTROL = 0x00000020
NV04_MAP_MEMORY = 0x00000021
NV04_UNMAP_MEMORY = 0x00000022
NV04_CONTROL = 0x00000036
NV04_DUP_OBJECT = 0x00000037

NV_DMABUF_EXPORT_MAX_HANDLES = 128
NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES = 64
NVIDIA_MAX_GPUS = 32

# ================================================================ layouts


class nv_ioctl_xfer_t(NvStruct):
    _fields_ = [
        ("cmd", NvU32),
        ("size", NvU32),
        ("ptr", NvP64),
    ]


class nv_pci_info_t(NvStruct):
    _fields_ = [
        ("domain", NvU32),
        ("bus", NvU8),
        ("slot", NvU8),
        ("function", NvU8),
        ("_pad0", NvU8),
        ("vendor_id", NvU16),
        ("device_id", NvU16),
    ]


class nv_ioctl_card_info_t(NvStruct):
    _fields_ = [
        ("valid", NvBool),
        ("pci_info", nv_pci_info_t),
        ("gpu_id", NvU32),
        ("interrupt_line", NvU16),
        ("reg_address", NvU64),
        ("reg_size", NvU64),
        ("fb_address", NvU64),
        ("fb_size", NvU64),
        ("minor_number", NvU32),
        ("dev_name", NvU8 * 10),
    ]


class nv_ioctl_alloc_os_event_t(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("fd", NvU32),
        ("Status", NvU32),
    ]


class nv_ioctl_free_os_event_t(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("fd", NvU32),
        ("Status", NvU32),
    ]


class nv_ioctl_rm_api_version_t(NvStruct):
    _fields_ = [
        ("cmd", NvU32),
        ("reply", NvU32),
        ("versionString", c_char * NV_RM_API_VERSION_STRING_LENGTH),
    ]


class NV0005_ALLOC_PARAMETERS(NvStruct):
    """cl0005.h: an event on hSrcResource of hParentClient (0: the caller's).
    data: NV01_EVENT_OS_EVENT's ALLOC_OS_EVENT fd number, a key."""
    _fields_ = [
        ("hParentClient", NvHandle),
        ("hSrcResource", NvHandle),
        ("hClass", NvV32),
        ("notifyIndex", NvV32),
        ("data", NvP64),
    ]


class nv_ioctl_register_fd_t(NvStruct):
    _fields_ = [("ctl_fd", c_int)]


class nv_ioctl_sys_params_t(NvStruct):
    _fields_ = [("memblock_size", NvU64)]


NV_IOCTL_NUMA_INFO_MAX_OFFLINE_ADDRESSES = 64
NV_IOCTL_NUMA_STATUS_DISABLED = 0
NV_IOCTL_NUMA_STATUS_OFFLINE = 1


class nv_offline_addresses_t(NvStruct):
    _fields_ = [
        ("addresses", NvU64 * NV_IOCTL_NUMA_INFO_MAX_OFFLINE_ADDRESSES),
        ("numEntries", NvU32),
        ("_pad0", NvU32),
    ]


class nv_ioctl_numa_info_t(NvStruct):
    """nv-ioctl-numa.h: a GPU's memory as a NUMA node (coherent platforms)."""
    _fields_ = [
        ("nid", NvS32),
        ("status", NvS32),
        ("memblock_size", NvU64),
        ("numa_mem_addr", NvU64),
        ("numa_mem_size", NvU64),
        ("use_auto_online", NvU8),
        ("_pad0", NvU8 * 7),
        ("offline_addresses", nv_offline_addresses_t),
    ]


class nv_ioctl_wait_open_complete_t(NvStruct):
    _fields_ = [("rc", c_int), ("adapterStatus", NvU32)]


class nv_ioctl_status_code_t(NvStruct):
    _fields_ = [
        ("domain", NvU32),
        ("bus", NvU8),
        ("slot", NvU8),
        ("status", NvU32),
    ]


class nv_ioctl_export_to_dma_buf_fd_t(NvStruct):
    _fields_ = [
        ("fd", c_int),
        ("hClient", NvHandle),
        ("totalObjects", NvU32),
        ("numObjects", NvU32),
        ("index", NvU32),
        ("totalSize", NvU64),
        ("mappingType", NvU8),
        ("bAllowMmap", NvBool),
        ("handles", NvHandle * NV_DMABUF_EXPORT_MAX_HANDLES),
        ("offsets", NvU64 * NV_DMABUF_EXPORT_MAX_HANDLES),
        ("sizes", NvU64 * NV_DMABUF_EXPORT_MAX_HANDLES),
        ("status", NvU32),
    ]


class NVOS00_PARAMETERS(NvStruct):
    _fields_ = [
        ("hRoot", NvHandle),
        ("hObjectParent", NvHandle),
        ("hObjectOld", NvHandle),
        ("status", NvV32),
    ]


class NVOS02_PARAMETERS(NvStruct):
    _fields_ = [
        ("hRoot", NvHandle),
        ("hObjectParent", NvHandle),
        ("hObjectNew", NvHandle),
        ("hClass", NvV32),
        ("flags", NvV32),
        ("pMemory", NvP64),
        ("limit", NvU64),
        ("status", NvV32),
    ]


class nv_ioctl_nvos02_parameters_with_fd(NvStruct):
    _fields_ = [
        ("params", NVOS02_PARAMETERS),
        ("fd", c_int),
    ]


class NVOS05_PARAMETERS(NvStruct):
    _fields_ = [
        ("hRoot", NvHandle),
        ("hObjectParent", NvHandle),
        ("hObjectNew", NvHandle),
        ("hClass", NvV32),
        ("status", NvV32),
    ]


class NVOS21_PARAMETERS(NvStruct):
    _fields_ = [
        ("hRoot", NvHandle),
        ("hObjectParent", NvHandle),
        ("hObjectNew", NvHandle),
        ("hClass", NvV32),
        ("pAllocParms", NvP64),
        ("paramsSize", NvU32),
        ("status", NvV32),
    ]


class NVOS64_PARAMETERS(NvStruct):
    _fields_ = [
        ("hRoot", NvHandle),
        ("hObjectParent", NvHandle),
        ("hObjectNew", NvHandle),
        ("hClass", NvV32),
        ("pAllocParms", NvP64),
        ("pRightsRequested", NvP64),
        ("paramsSize", NvU32),
        ("flags", NvU32),
        ("status", NvV32),
    ]


class NVOS32_ALLOC_SIZE(NvStruct):
    _fields_ = [
        ("owner", NvU32),
        ("hMemory", NvHandle),
        ("type", NvU32),
        ("flags", NvU32),
        ("attr", NvU32),
        ("format", NvU32),
        ("comprCovg", NvU32),
        ("zcullCovg", NvU32),
        ("partitionStride", NvU32),
        ("_pad0", NvU32),
        ("width", NvU32),
        ("height", NvU32),
        ("size", NvU64),
        ("alignment", NvU64),
        ("offset", NvU64),
        ("limit", NvU64),
        ("address", NvP64),
        ("rangeBegin", NvU64),
        ("rangeEnd", NvU64),
        ("attr2", NvU32),
        ("ctagOffset", NvU32),
        ("numaNode", NvS32),
    ]


class NVOS32_ALLOC_TILED_PITCH_HEIGHT(NvStruct):
    _fields_ = [
        ("owner", NvU32),
        ("hMemory", NvHandle),
        ("type", NvU32),
        ("flags", NvU32),
        ("height", NvU32),
        ("pitch", NvS32),
        ("attr", NvU32),
        ("width", NvU32),
        ("format", NvU32),
        ("comprCovg", NvU32),
        ("zcullCovg", NvU32),
        ("partitionStride", NvU32),
        ("size", NvU64),
    ]


class NVOS32_ALLOC_SIZE_RANGE(NvStruct):
    _fields_ = [
        ("owner", NvU32),
        ("hMemory", NvHandle),
        ("type", NvU32),
        ("flags", NvU32),
        ("attr", NvU32),
        ("format", NvU32),
        ("comprCovg", NvU32),
        ("zcullCovg", NvU32),
        ("partitionStride", NvU32),
        ("_pad0", NvU32),
        ("size", NvU64),
        ("alignment", NvU64),
        ("offset", NvU64),
        ("limit", NvU64),
        ("rangeBegin", NvU64),
        ("rangeEnd", NvU64),
    ]


class NVOS32_FREE(NvStruct):
    _fields_ = [
        ("owner", NvU32),
        ("hMemory", NvHandle),
        ("flags", NvU32),
    ]


class _NVOS32_DATA(NvUnion):
    """The anonymous 144-byte union NVOS32_PARAMETERS.data."""
    _fields_ = [
        ("AllocSize", NVOS32_ALLOC_SIZE),
        ("AllocTiledPitchHeight", NVOS32_ALLOC_TILED_PITCH_HEIGHT),
        ("AllocSizeRange", NVOS32_ALLOC_SIZE_RANGE),
        ("Free", NVOS32_FREE),
        ("_raw", NvU8 * 144),
    ]


class NVOS32_PARAMETERS(NvStruct):
    _fields_ = [
        ("hRoot", NvHandle),
        ("hObjectParent", NvHandle),
        ("function", NvU32),
        ("hVASpace", NvHandle),
        ("ivcHeapNumber", NvS16),
        ("status", NvV32),
        ("total", NvU64),
        ("free", NvU64),
        ("data", _NVOS32_DATA),
    ]


class NVOS33_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("hMemory", NvHandle),
        ("offset", NvU64),
        ("length", NvU64),
        ("pLinearAddress", NvP64),
        ("status", NvU32),
        ("flags", NvU32),
    ]


class nv_ioctl_nvos33_parameters_with_fd(NvStruct):
    _fields_ = [
        ("params", NVOS33_PARAMETERS),
        ("fd", c_int),
    ]


class NVOS34_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("hMemory", NvHandle),
        ("pLinearAddress", NvP64),
        ("status", NvU32),
        ("flags", NvU32),
    ]


class NVOS46_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("hDma", NvHandle),
        ("hMemory", NvHandle),
        ("offset", NvU64),
        ("length", NvU64),
        ("flags", NvV32),
        ("flags2", NvV32),
        ("kindOverride", NvU32),
        ("_pad0", NvU32),
        ("dmaOffset", NvU64),
        ("status", NvV32),
    ]


class NVOS47_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("hDma", NvHandle),
        ("hMemory", NvHandle),
        ("flags", NvV32),
        ("dmaOffset", NvU64),
        ("size", NvU64),
        ("status", NvV32),
    ]


class NVOS54_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hObject", NvHandle),
        ("cmd", NvV32),
        ("flags", NvU32),
        ("params", NvP64),
        ("paramsSize", NvU32),
        ("status", NvV32),
    ]


class NVOS55_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hParent", NvHandle),
        ("hObject", NvHandle),
        ("hClientSrc", NvHandle),
        ("hObjectSrc", NvHandle),
        ("flags", NvU32),
        ("status", NvU32),
    ]


class NVOS56_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("hMemory", NvHandle),
        ("pOldCpuAddress", NvP64),
        ("pNewCpuAddress", NvP64),
        ("status", NvV32),
    ]


class NVOS57_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hObject", NvHandle),
        ("sharePolicy", NvU32 * 3),
        ("status", NvU32),
    ]


class NVOS30_PARAMETERS(NvStruct):
    _fields_ = [
        ("hClient", NvHandle),
        ("hDevice", NvHandle),
        ("hChannel", NvHandle),
        ("numChannels", NvV32),
        ("phClients", NvP64),
        ("phDevices", NvP64),
        ("phChannels", NvP64),
        ("flags", NvV32),
        ("timeout", NvV32),
        ("status", NvV32),
    ]


class NVOS39_PARAMETERS(NvStruct):
    _fields_ = [
        ("hObjectParent", NvHandle),
        ("hSubDevice", NvHandle),
        ("hObjectNew", NvHandle),
        ("hClass", NvV32),
        ("flags", NvV32),
        ("selector", NvU32),
        ("hMemory", NvHandle),
        ("offset", NvU64),
        ("limit", NvU64),
        ("status", NvV32),
    ]


class NV_MEMORY_ALLOCATION_PARAMS(NvStruct):
    _fields_ = [
        ("owner", NvU32),
        ("type", NvU32),
        ("flags", NvU32),
        ("width", NvU32),
        ("height", NvU32),
        ("pitch", NvS32),
        ("attr", NvU32),
        ("attr2", NvU32),
        ("format", NvU32),
        ("comprCovg", NvU32),
        ("zcullCovg", NvU32),
        ("_pad0", NvU32),
        ("rangeLo", NvU64),
        ("rangeHi", NvU64),
        ("size", NvU64),
        ("alignment", NvU64),
        ("offset", NvU64),
        ("limit", NvU64),
        ("address", NvP64),
        ("ctagOffset", NvU32),
        ("hVASpace", NvHandle),
        ("internalflags", NvU32),
        ("tag", NvU32),
        ("numaNode", NvS32),
        ("_pad1", NvU32),
    ]


class NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS(NvStruct):
    _fields_ = [
        ("offset", NvU64),
        ("limit", NvU64),
        ("hVASpace", NvHandle),
        ("_pad0", NvU32),
    ]


class NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(NvStruct):
    _fields_ = [
        ("hObjectError", NvHandle),
        ("hObjectEccError", NvHandle),
        ("hVASpace", NvHandle),
        ("engineType", NvU32),
        ("bIsCallingContextVgpuPlugin", NvBool),
    ]


class NV_CHANNEL_ALLOC_PARAMS(NvStruct):
    """595 layout; only the fields vgpu reads are named, the rest is opaque."""
    _fields_ = [
        ("hObjectError", NvHandle),
        ("hObjectBuffer", NvHandle),
        ("gpFifoOffset", NvU64),
        ("gpFifoEntries", NvU32),
        ("flags", NvU32),
        ("hContextShare", NvHandle),
        ("hVASpace", NvHandle),
        ("_opaque0", NvU8 * 96),
        ("engineType", NvU32),
        ("_opaque1", NvU8 * 236),
    ]


class NV0000_ALLOC_PARAMETERS(NvStruct):
    """cl0000.h: a root client's class parameters (pOsPidInfo: kernel callers)."""
    _fields_ = [
        ("hClient", NvHandle),
        ("processID", NvU32),
        ("processName", ctypes.c_char * 100),
        ("_pad0", NvU32),
        ("pOsPidInfo", NvP64),
    ]


class NV0080_ALLOC_PARAMETERS(NvStruct):
    _fields_ = [
        ("deviceId", NvU32),
        ("hClientShare", NvHandle),
        ("hTargetClient", NvHandle),
        ("hTargetDevice", NvHandle),
        ("flags", NvV32),
        ("_pad0", NvU32),
        ("vaSpaceSize", NvU64),
        ("vaStartInternal", NvU64),
        ("vaLimitInternal", NvU64),
        ("vaMode", NvV32),
        ("_pad1", NvU32),
    ]


class NV2080_ALLOC_PARAMETERS(NvStruct):
    _fields_ = [("subDeviceId", NvU32)]


class NV2080_CTRL_FB_INFO(NvStruct):
    _fields_ = [("index", NvU32), ("data", NvU32)]


NV0041_CTRL_SURFACE_INFO = NV2080_CTRL_FB_INFO


class NV2080_CTRL_FB_GET_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("fbInfoListSize", NvU32),
        ("fbInfoList", NvP64),
    ]


class NV2080_CTRL_FB_GET_INFO_V2_PARAMS(NvStruct):
    _fields_ = [
        ("fbInfoListSize", NvU32),
        ("fbInfoList", NV2080_CTRL_FB_INFO * NV2080_CTRL_FB_INFO_MAX_LIST_SIZE),
    ]


class NV0041_CTRL_GET_SURFACE_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("surfaceInfoListSize", NvU32),
        ("surfaceInfoList", NvP64),
    ]


class NV2080_CTRL_GPU_GET_PIDS_PARAMS(NvStruct):
    _fields_ = [
        ("idType", NvU32),
        ("id", NvU32),
        ("pidTblCount", NvU32),
        ("pidTbl", NvU32 * NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT),
    ]


class _NV2080_GPU_NAME_STRING(NvStruct):
    """595.45.04: ASCII only (590.48.01 had a unicode[64] member too)."""
    _fields_ = [
        ("ascii", NvU8 * NV2080_GPU_MAX_NAME_STRING_LENGTH),
    ]


class NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS(NvStruct):
    """ctrl0000gpu.h: a GPU's ids by gpuId; deviceInstance is NV0080's deviceId."""
    _fields_ = [
        ("gpuId", NvU32),
        ("gpuFlags", NvU32),
        ("deviceInstance", NvU32),
        ("subDeviceInstance", NvU32),
        ("sliStatus", NvU32),
        ("boardId", NvU32),
        ("gpuInstance", NvU32),
        ("numaId", NvS32),
    ]


class NV0000_CTRL_GPU_GET_ID_INFO_PARAMS(NvStruct):
    """ctrl0000gpu.h, the first version: szName is unused by the driver."""
    _fields_ = [
        ("gpuId", NvU32),
        ("gpuFlags", NvU32),
        ("deviceInstance", NvU32),
        ("subDeviceInstance", NvU32),
        ("szName", NvP64),
        ("sliStatus", NvU32),
        ("boardId", NvU32),
        ("gpuInstance", NvU32),
        ("numaId", NvS32),
    ]


class NV0000_CTRL_GPU_ATTACH_IDS_PARAMS(NvStruct):
    _fields_ = [("gpuIds", NvU32 * NV0000_CTRL_GPU_MAX_PROBED_GPUS), ("failedId", NvU32)]


class NV0000_CTRL_GPU_DETACH_IDS_PARAMS(NvStruct):
    _fields_ = [("gpuIds", NvU32 * NV0000_CTRL_GPU_MAX_ATTACHED_GPUS)]


class NV0000_CTRL_GPU_GET_DEVICE_IDS_PARAMS(NvStruct):
    _fields_ = [("deviceIds", NvU32)]


class NV0000_CTRL_GPU_ACTIVE_DEVICE(NvStruct):
    _fields_ = [("gpuId", NvU32), ("gpuInstanceId", NvU32), ("computeInstanceId", NvU32)]


class NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS(NvStruct):
    _fields_ = [
        ("numDevices", NvU32),
        ("devices", NV0000_CTRL_GPU_ACTIVE_DEVICE * NV0000_CTRL_GPU_MAX_ACTIVE_DEVICES),
    ]


class NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS(NvStruct):
    """535 has no busEgmPeerIds (168 bytes)."""
    _fields_ = [
        ("gpuIds", NvU32 * NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS),
        ("gpuCount", NvU32),
        ("p2pCaps", NvU32),
        ("p2pOptimalReadCEs", NvU32),
        ("p2pOptimalWriteCEs", NvU32),
        ("p2pCapsStatus", NvU8 * NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE),
        ("_pad0", NvU8 * 7),
        ("busPeerIds", NvP64),
        ("busEgmPeerIds", NvP64),
    ]


class NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS(NvStruct):
    """535 has no busEgmPeerIds (4252 bytes)."""
    _fields_ = [
        ("gpuIds", NvU32 * NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS),
        ("gpuCount", NvU32),
        ("p2pCaps", NvU32),
        ("p2pOptimalReadCEs", NvU32),
        ("p2pOptimalWriteCEs", NvU32),
        ("p2pCapsStatus", NvU8 * NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE),
        ("_pad0", NvU8 * 3),
        ("busPeerIds", NvU32 * (NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS ** 2)),
        ("busEgmPeerIds", NvU32 * (NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS ** 2)),
    ]


_P2P_GROUP = (NvU32 * NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS) * NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS


class NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS(NvStruct):
    _fields_ = [
        ("grpACount", NvU32),
        ("grpBCount", NvU32),
        ("gpuIdGrpA", NvU32 * NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS),
        ("gpuIdGrpB", NvU32 * NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS),
        ("p2pCaps", _P2P_GROUP),
        ("a2bOptimalReadCes", _P2P_GROUP),
        ("a2bOptimalWriteCes", _P2P_GROUP),
        ("b2aOptimalReadCes", _P2P_GROUP),
        ("b2aOptimalWriteCes", _P2P_GROUP),
    ]


class NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS(NvStruct):
    _fields_ = [("fabricStatus", NvU32)]


class RS_SHARE_POLICY(NvStruct):
    """rs_access.h (RS_ACCESS_MASK is one NvU32 limb)."""
    _fields_ = [
        ("target", NvU32),
        ("accessMask", NvU32),
        ("type", NvU16),
        ("action", NvU8),
        ("_pad0", NvU8),
    ]


class NV0000_CTRL_CLIENT_SET_INHERITED_SHARE_POLICY_PARAMS(NvStruct):
    _fields_ = [("sharePolicy", RS_SHARE_POLICY)]


class NV83DE_ALLOC_PARAMETERS(NvStruct):
    """GT200_DEBUGGER: an SM debugger session on hClass3dObject of hAppClient."""
    _fields_ = [
        ("hDebuggerClient_Obsolete", NvHandle),
        ("hAppClient", NvHandle),
        ("hClass3dObject", NvHandle),
    ]


class NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS(NvStruct):
    """data: hResult (PARENT) in its first 4 bytes, or iResult (CLASSID)."""
    _fields_ = [
        ("hObject", NvHandle),
        ("index", NvU32),
        ("data", NvU64),
    ]


class NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO(NvStruct):
    """56 bytes from 580, 48 before (bProtected, blackList)."""
    _fields_ = [
        ("base", NvU64),
        ("limit", NvU64),
        ("reserved", NvU64),
        ("performance", NvU32),
        ("supportCompressed", NvBool),
        ("supportISO", NvBool),
        ("bProtected", NvBool),
        ("blackList", NvBool * NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MEM_TYPES),
        ("_pad0", NvU8 * 7),
    ]


class NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("numFBRegions", NvU32),
        ("_pad0", NvU32),
        ("fbRegion", NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO
         * NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES),
    ]


class NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS(NvStruct):
    _fields_ = [
        ("gpuNameStringFlags", NvU32),
        ("gpuNameString", _NV2080_GPU_NAME_STRING),
    ]


class NV2080_CTRL_GPU_PID_INFO_VIDEO_MEMORY_USAGE_DATA(NvStruct):
    _fields_ = [
        ("memPrivate", NvU64),
        ("memSharedOwned", NvU64),
        ("memSharedDuped", NvU64),
        ("protectedMemPrivate", NvU64),
        ("protectedMemSharedOwned", NvU64),
        ("protectedMemSharedDuped", NvU64),
    ]


class NV2080_CTRL_GPU_PID_INFO(NvStruct):
    _fields_ = [
        ("pid", NvU32),
        ("index", NvU32),
        ("result", NvU32),
        ("_pad0", NvU32),
        ("data", NV2080_CTRL_GPU_PID_INFO_VIDEO_MEMORY_USAGE_DATA),
        ("smcSubscription", NvU32 * 2),
    ]


class NV2080_CTRL_GPU_GET_PID_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("pidInfoListCount", NvU32),
        ("_pad0", NvU32),
        ("pidInfoList", NV2080_CTRL_GPU_PID_INFO * NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES),
    ]


class NVA06C_CTRL_TIMESLICE_PARAMS(NvStruct):
    _fields_ = [("timesliceUs", NvU64)]


class NVA06C_CTRL_PREEMPT_PARAMS(NvStruct):
    _fields_ = [
        ("bWait", NvBool),
        ("bManualTimeout", NvBool),
        ("_pad0", NvU8 * 2),
        ("timeoutUs", NvU32),
    ]


class NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(NvStruct):
    _fields_ = [
        ("bEnable", NvBool),
        ("bSkipSubmit", NvBool),
        ("bSkipEnable", NvBool),
    ]


NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS = NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS


class NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS(NvStruct):
    _fields_ = [("tsgInterleaveLevel", NvU32)]


class NVA06C_CTRL_GET_INFO_PARAMS(NvStruct):
    _fields_ = [("tsgID", NvU32)]


class NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS(NvStruct):
    _fields_ = [("workSubmitToken", NvU32)]


class NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS(NvStruct):
    _fields_ = [
        ("bDisable", NvBool),
        ("_pad0", NvU8 * 3),
        ("numChannels", NvU32),
        ("bOnlyDisableScheduling", NvBool),
        ("bRewindGpPut", NvBool),
        ("_pad1", NvU8 * 6),
        ("pRunlistPreemptEvent", NvP64),
        ("hClientList", NvHandle * NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES),
        ("hChannelList", NvHandle * NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES),
    ]


# UVM
class UVM_INITIALIZE_PARAMS(NvStruct):
    _fields_ = [("flags", NvU64), ("rmStatus", NV_STATUS)]


class UVM_REGISTER_GPU_PARAMS(NvStruct):
    _fields_ = [
        ("gpu_uuid", NvU8 * 16),
        ("numaEnabled", NvBool),
        ("_pad0", NvU8 * 3),
        ("numaNodeId", NvS32),
        ("rmCtrlFd", c_int),
        ("hClient", NvHandle),
        ("hSmcPartRef", NvHandle),
        ("rmStatus", NV_STATUS),
    ]


class UVM_REGISTER_GPU_VASPACE_PARAMS(NvStruct):
    _fields_ = [
        ("gpuUuid", NvU8 * 16),
        ("rmCtrlFd", c_int),
        ("hClient", NvHandle),
        ("hVaSpace", NvHandle),
        ("rmStatus", NV_STATUS),
    ]


class UVM_REGISTER_CHANNEL_PARAMS(NvStruct):
    _fields_ = [
        ("gpuUuid", NvU8 * 16),
        ("rmCtrlFd", c_int),
        ("hClient", NvHandle),
        ("hChannel", NvHandle),
        ("base", NvU64),
        ("length", NvU64),
        ("rmStatus", NV_STATUS),
    ]


class UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(NvStruct):
    _fields_ = [
        ("base", NvU64),
        ("length", NvU64),
        ("offset", NvU64),
        ("perGpuAttributes", NvU8 * 9216),
        ("gpuAttributesCount", NvU64),
        ("rmCtrlFd", c_int),
        ("hClient", NvHandle),
        ("hMemory", NvHandle),
        ("rmStatus", NV_STATUS),
    ]


class UVM_FREE_PARAMS(NvStruct):
    _fields_ = [("base", NvU64), ("rmStatus", NV_STATUS), ("_pad0", NvU32)]


class UVM_CREATE_EXTERNAL_RANGE_PARAMS(NvStruct):
    _fields_ = [("base", NvU64), ("length", NvU64), ("rmStatus", NV_STATUS), ("_pad0", NvU32)]


class UVM_UNMAP_EXTERNAL_PARAMS(NvStruct):
    _fields_ = [("base", NvU64), ("length", NvU64), ("gpuUuid", NvU8 * 16),
                ("rmStatus", NV_STATUS), ("_pad0", NvU32)]


class UVM_MIGRATE_PARAMS(NvStruct):
    _fields_ = [
        ("base", NvU64),
        ("length", NvU64),
        ("destinationUuid", NvU8 * 16),
        ("flags", NvU32),
        ("_pad0", NvU32),
        ("semaphoreAddress", NvU64),
        ("semaphorePayload", NvU32),
        ("cpuNumaNode", NvU32),
        ("userSpaceStart", NvU64),
        ("userSpaceLength", NvU64),
        ("rmStatus", NV_STATUS),
        ("_pad1", NvU32),
    ]


class UVM_MM_INITIALIZE_PARAMS(NvStruct):
    _fields_ = [("uvmFd", c_int), ("rmStatus", NV_STATUS)]


# ==== BEGIN nvsim start-up block (layouts): mirrors nvabi.h's block ====
NV2080_CTRL_GPU_INFO = NV2080_CTRL_FB_INFO
NV2080_CTRL_GR_INFO = NV2080_CTRL_FB_INFO


class NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS(NvStruct):
    _fields_ = [
        ("numClasses", NvU32),
        ("classList", NvP64),
    ]


class NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS(NvStruct):
    _fields_ = [
        ("engineType", NvU32),
        ("numClasses", NvU32),
        ("classList", NvP64),
    ]


class NV2080_CTRL_GPU_GET_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("gpuInfoListSize", NvU32),
        ("gpuInfoList", NvP64),
    ]


class NV2080_CTRL_GPU_GET_INFO_V2_PARAMS(NvStruct):
    _fields_ = [
        ("gpuInfoListSize", NvU32),
        ("gpuInfoList", NV2080_CTRL_GPU_INFO * NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE),
    ]


class NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("index", NvU32),
        ("flags", NvU32),
        ("length", NvU32),
        ("data", NvU8 * NV2080_GPU_MAX_GID_LENGTH),
    ]


class NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS(NvStruct):
    """ctrl0000gpu.h: a GPU's UUID by gpuId (vgpu.ko learns each slice GPU's)."""
    _fields_ = [
        ("gpuId", NvU32),
        ("flags", NvU32),
        ("gpuUuid", NvU8 * NV0000_GPU_MAX_GID_LENGTH),
        ("uuidStrLen", NvU32),
    ]


class NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS(NvStruct):
    _fields_ = [
        ("sizeOfStrings", NvU32),
        ("pDriverVersionBuffer", NvP64),
        ("pVersionBuffer", NvP64),
        ("pTitleBuffer", NvP64),
        ("changelistNumber", NvU32),
        ("officialChangelistNumber", NvU32),
    ]


class NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS(NvStruct):
    _fields_ = [
        ("driverVersionBuffer", c_char * NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE),
        ("versionBuffer", c_char * NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE),
        ("driverBranch", c_char * NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE),
        ("titleBuffer", c_char * NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE),
        ("changelistNumber", NvU32),
        ("officialChangelistNumber", NvU32),
    ]


class NV2080_CTRL_GR_ROUTE_INFO(NvStruct):
    _fields_ = [
        ("flags", NvU32),
        ("route", NvU64),
    ]


class NV2080_CTRL_GR_GET_INFO_PARAMS(NvStruct):
    _fields_ = [
        ("grInfoListSize", NvU32),
        ("grInfoList", NvP64),
        ("grRouteInfo", NV2080_CTRL_GR_ROUTE_INFO),
    ]


class NV_VASPACE_ALLOCATION_PARAMETERS(NvStruct):
    _fields_ = [
        ("index", NvU32),
        ("flags", NvV32),
        ("vaSize", NvU64),
        ("vaStartInternal", NvU64),
        ("vaLimitInternal", NvU64),
        ("bigPageSize", NvU32),
        ("vaBase", NvU64),
        ("pasid", NvU32),
    ]


class NV_CTXSHARE_ALLOCATION_PARAMETERS(NvStruct):
    _fields_ = [
        ("hVASpace", NvHandle),
        ("flags", NvU32),
        ("subctxId", NvU32),
    ]


class NV_GR_ALLOCATION_PARAMETERS(NvStruct):
    _fields_ = [
        ("version", NvU32),
        ("flags", NvU32),
        ("size", NvU32),
        ("caps", NvU32),
    ]


class NVB0B5_ALLOCATION_PARAMETERS(NvStruct):
    _fields_ = [
        ("version", NvU32),
        ("engineType", NvU32),
    ]


class NV_OS_DESC_MEMORY_ALLOCATION_PARAMS(NvStruct):
    _fields_ = [
        ("type", NvU32),
        ("flags", NvU32),
        ("attr", NvU32),
        ("attr2", NvU32),
        ("descriptor", NvP64),
        ("limit", NvU64),
        ("descriptorType", NvU32),
        ("tag", NvU32),
    ]
# ==== END nvsim start-up block (layouts) ====


# ----------------------------------------- the exported kernel RM API
class _nvidia_kernel_rmapi_params(NvUnion):
    _fields_ = [
        ("free", NVOS00_PARAMETERS),
        ("allocMemory64", NVOS02_PARAMETERS),
        ("alloc", NVOS64_PARAMETERS),
        ("pVidHeapControl", c_void_p),
        ("mapMemory", NVOS33_PARAMETERS),
        ("unmapMemory", NVOS34_PARAMETERS),
        ("allocContextDma2", NVOS39_PARAMETERS),
        ("mapMemoryDma", NVOS46_PARAMETERS),
        ("unmapMemoryDma", NVOS47_PARAMETERS),
        ("control", NVOS54_PARAMETERS),
        ("dupObject", NVOS55_PARAMETERS),
        ("share", NVOS57_PARAMETERS),
    ]


class nvidia_kernel_rmapi_ops_t(NvStruct):
    """Kernel-only (nvidia_get_rm_ops().op); mirrored for layout checks."""
    _fields_ = [("op", NvU32), ("params", _nvidia_kernel_rmapi_params)]


# ============================================================ derived data

#: Upper-case integers defined here that nvabi.h does not have.
PYTHON_ONLY_CONSTANTS = frozenset({"NV_IOC_SIZE_MAX"})

#: _IOC_SIZE is 14 bits: larger parameter blocks must travel through XFER.
NV_IOC_SIZE_MAX = (1 << 14) - 1

#: Escape nr -> (name, params type, device) where device is "ctl", "gpu" or
#: "any".  RM_ALLOC accepts two sizes (NVOS21 and NVOS64); CARD_INFO and
#: ATTACH_GPUS_TO_FD accept any non-zero multiple of their element size.
ESCAPES = {
    NV_ESC_CARD_INFO: ("CARD_INFO", nv_ioctl_card_info_t, "ctl"),
    NV_ESC_REGISTER_FD: ("REGISTER_FD", nv_ioctl_register_fd_t, "any"),
    NV_ESC_ALLOC_OS_EVENT: ("ALLOC_OS_EVENT", nv_ioctl_alloc_os_event_t, "any"),
    NV_ESC_FREE_OS_EVENT: ("FREE_OS_EVENT", nv_ioctl_free_os_event_t, "any"),
    NV_ESC_STATUS_CODE: ("STATUS_CODE", nv_ioctl_status_code_t, "ctl"),
    NV_ESC_CHECK_VERSION_STR: ("CHECK_VERSION_STR", nv_ioctl_rm_api_version_t, "ctl"),
    NV_ESC_IOCTL_XFER_CMD: ("IOCTL_XFER_CMD", nv_ioctl_xfer_t, "any"),
    NV_ESC_ATTACH_GPUS_TO_FD: ("ATTACH_GPUS_TO_FD", NvU32, "ctl"),
    NV_ESC_SYS_PARAMS: ("SYS_PARAMS", nv_ioctl_sys_params_t, "ctl"),
    NV_ESC_NUMA_INFO: ("NUMA_INFO", nv_ioctl_numa_info_t, "gpu"),
    NV_ESC_EXPORT_TO_DMABUF_FD: ("EXPORT_TO_DMABUF_FD", nv_ioctl_export_to_dma_buf_fd_t, "gpu"),
    NV_ESC_WAIT_OPEN_COMPLETE: ("WAIT_OPEN_COMPLETE", nv_ioctl_wait_open_complete_t, "any"),
    NV_ESC_RM_ALLOC_MEMORY: ("RM_ALLOC_MEMORY", nv_ioctl_nvos02_parameters_with_fd, "gpu"),
    NV_ESC_RM_ALLOC_OBJECT: ("RM_ALLOC_OBJECT", NVOS05_PARAMETERS, "ctl"),
    NV_ESC_RM_FREE: ("RM_FREE", NVOS00_PARAMETERS, "ctl"),
    NV_ESC_RM_CONTROL: ("RM_CONTROL", NVOS54_PARAMETERS, "ctl"),
    NV_ESC_RM_ALLOC: ("RM_ALLOC", NVOS64_PARAMETERS, "ctl"),
    NV_ESC_RM_DUP_OBJECT: ("RM_DUP_OBJECT", NVOS55_PARAMETERS, "ctl"),
    NV_ESC_RM_SHARE: ("RM_SHARE", NVOS57_PARAMETERS, "ctl"),
    NV_ESC_RM_IDLE_CHANNELS: ("RM_IDLE_CHANNELS", NVOS30_PARAMETERS, "ctl"),
    NV_ESC_RM_VID_HEAP_CONTROL: ("RM_VID_HEAP_CONTROL", NVOS32_PARAMETERS, "ctl"),
    NV_ESC_RM_MAP_MEMORY: ("RM_MAP_MEMORY", nv_ioctl_nvos33_parameters_with_fd, "ctl"),
    NV_ESC_RM_UNMAP_MEMORY: ("RM_UNMAP_MEMORY", NVOS34_PARAMETERS, "ctl"),
    NV_ESC_RM_ALLOC_CONTEXT_DMA2: ("RM_ALLOC_CONTEXT_DMA2", NVOS39_PARAMETERS, "ctl"),
    NV_ESC_RM_MAP_MEMORY_DMA: ("RM_MAP_MEMORY_DMA", NVOS46_PARAMETERS, "ctl"),
    NV_ESC_RM_UNMAP_MEMORY_DMA: ("RM_UNMAP_MEMORY_DMA", NVOS47_PARAMETERS, "ctl"),
    NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO: ("RM_UPDATE_DEVICE_MAPPING_INFO", NVOS56_PARAMETERS, "ctl"),
}

#: UVM command -> parameter structure (the size is implied by the command).
UVM_PARAMS = {
    UVM_INITIALIZE: UVM_INITIALIZE_PARAMS,
    UVM_REGISTER_GPU: UVM_REGISTER_GPU_PARAMS,
    UVM_REGISTER_GPU_VASPACE: UVM_REGISTER_GPU_VASPACE_PARAMS,
    UVM_REGISTER_CHANNEL: UVM_REGISTER_CHANNEL_PARAMS,
    UVM_MAP_EXTERNAL_ALLOCATION: UVM_MAP_EXTERNAL_ALLOCATION_PARAMS,
    UVM_FREE: UVM_FREE_PARAMS,
    UVM_CREATE_EXTERNAL_RANGE: UVM_CREATE_EXTERNAL_RANGE_PARAMS,
    UVM_UNMAP_EXTERNAL: UVM_UNMAP_EXTERNAL_PARAMS,
    UVM_MIGRATE: UVM_MIGRATE_PARAMS,
    UVM_MM_INITIALIZE: UVM_MM_INITIALIZE_PARAMS,
}


def escape_size(nr: int) -> int:
    """The exact params size the driver expects for escape nr (NVOS64 for RM_ALLOC)."""
    return ctypes.sizeof(ESCAPES[nr][1])


#: NV status value -> its name (NV_OK, NV_ERR_NO_MEMORY, ...).
NV_STATUS_NAMES = {
    v: k for k, v in sorted(globals().items())
    if (k == "NV_OK" or k.startswith("NV_ERR_")) and isinstance(v, int)
}


def status_name(status: int) -> str:
    return NV_STATUS_NAMES.get(status, f"NV_STATUS_{status:#x}")


# ------------------------------------------------------------ ioctl numbers
_IOC_NRBITS = 8
_IOC_TYPEBITS = 8
_IOC_SIZEBITS = 14
_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = _IOC_NRSHIFT + _IOC_NRBITS
_IOC_SIZESHIFT = _IOC_TYPESHIFT + _IOC_TYPEBITS
_IOC_DIRSHIFT = _IOC_SIZESHIFT + _IOC_SIZEBITS
_IOC_NONE = 0
_IOC_WRITE = 1
_IOC_READ = 2


def _IOC(direction: int, type_: int, nr: int, size: int) -> int:
    if not 0 <= nr < (1 << _IOC_NRBITS):
        raise ValueError(f"ioctl nr {nr} out of range")
    if not 0 <= size < (1 << _IOC_SIZEBITS):
        raise ValueError(f"ioctl size {size} does not fit _IOC_SIZE (max {NV_IOC_SIZE_MAX}); use XFER")
    return ((direction << _IOC_DIRSHIFT) | (type_ << _IOC_TYPESHIFT)
            | (nr << _IOC_NRSHIFT) | (size << _IOC_SIZESHIFT))


def _IOWR(type_: int, nr: int, size: int) -> int:
    return _IOC(_IOC_READ | _IOC_WRITE, type_, nr, size)


def nv_ioctl(nr: int, size: int, type_: int = NV_IOCTL_MAGIC) -> int:
    """The ioctl command for NVIDIA escape nr with a params block of size bytes:
    _IOWR('F', nr, size).  The driver reads only _IOC_NR and _IOC_SIZE."""
    return _IOWR(type_, nr, size)


def ioc_nr(cmd: int) -> int:
    return (cmd >> _IOC_NRSHIFT) & ((1 << _IOC_NRBITS) - 1)


def ioc_size(cmd: int) -> int:
    return (cmd >> _IOC_SIZESHIFT) & ((1 << _IOC_SIZEBITS) - 1)


def ioc_type(cmd: int) -> int:
    return (cmd >> _IOC_TYPESHIFT) & ((1 << _IOC_TYPEBITS) - 1)


def nvos32_attr_location(attr: int) -> int:
    return (attr >> NVOS32_ATTR_LOCATION_SHIFT) & NVOS32_ATTR_LOCATION_MASK


# ------------------------------------------------------------ registries
def abi_structs() -> dict[str, type]:
    """Every public ABI structure by its C name (typedef aliases included)."""
    out = {}
    for name, obj in globals().items():
        if name.startswith("_") or not isinstance(obj, type):
            continue
        if issubclass(obj, (ctypes.Structure, ctypes.Union)) and obj not in (NvStruct, NvUnion):
            out[name] = obj
    return out


def abi_constants() -> dict[str, int]:
    """Every public integer constant that mirrors a #define in nvabi.h."""
    return {
        name: val for name, val in globals().items()
        if name.isupper() and not name.startswith("_") and type(val) is int
        and name not in PYTHON_ONLY_CONSTANTS
    }
