/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * nvabi.h - the subset of NVIDIA's driver ABI that vgpu mediates and nvsim
 * simulates.
 *
 * This is the single C source of truth for the ABI.  Type and field names are
 * NVIDIA's own (NVOS21_PARAMETERS, hObjectNew, ...) so that every layout can be
 * compared field by field with the vendor headers; the sizes and offsets are
 * pinned below with static assertions taken from release 595.45.04 (see
 * tests/data/nvidia-595-abi-offsets.txt).  The Python mirror in vgpu/abi/nvabi.py
 * is checked against this header by tests/host/test_abi_layout.py, which
 * compiles a small program that prints every size and offset from here.
 *
 * The header is usable from the kernel and from user space (x86_64 only).
 */
#ifndef VGPU_NVABI_H
#define VGPU_NVABI_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/stddef.h>
#include <linux/build_bug.h>
#define NVABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#include <stdint.h>
#include <stddef.h>
#include <assert.h>
#define NVABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ------------------------------------------------------------------ types */
typedef uint8_t  NvU8;
typedef uint16_t NvU16;
typedef uint32_t NvU32;
typedef uint64_t NvU64;
typedef int16_t  NvS16;
typedef int32_t  NvS32;
typedef uint8_t  NvBool;
typedef NvU32    NvHandle;
typedef NvU32    NvV32;
typedef NvU32    NV_STATUS;
/* NvP64 is a user pointer carried as a 64-bit, 8-byte aligned value. */
typedef NvU64    NvP64 __attribute__((aligned(8)));

#define NV_ALIGN8 __attribute__((aligned(8)))

/* ------------------------------------------------------- device numbering */
#define NV_MAJOR_DEVICE_NUMBER      195
#define NV_CONTROL_DEVICE_MINOR     255
#define NV_MODESET_DEVICE_MINOR     254
#define NV_MAX_GPU_MINOR            247   /* minors 0..247 are GPUs */

/* ------------------------------------------------------ ioctl encoding */
#define NV_IOCTL_MAGIC              'F'
#define NV_IOCTL_BASE               200
#define NV_ESC_CARD_INFO            (NV_IOCTL_BASE + 0)
#define NV_ESC_REGISTER_FD          (NV_IOCTL_BASE + 1)
#define NV_ESC_ALLOC_OS_EVENT       (NV_IOCTL_BASE + 6)
#define NV_ESC_FREE_OS_EVENT        (NV_IOCTL_BASE + 7)
#define NV_ESC_STATUS_CODE          (NV_IOCTL_BASE + 9)
#define NV_ESC_CHECK_VERSION_STR    (NV_IOCTL_BASE + 10)
#define NV_ESC_IOCTL_XFER_CMD       (NV_IOCTL_BASE + 11)
#define NV_ESC_ATTACH_GPUS_TO_FD    (NV_IOCTL_BASE + 12)
#define NV_ESC_SYS_PARAMS           (NV_IOCTL_BASE + 14)
#define NV_ESC_NUMA_INFO            (NV_IOCTL_BASE + 15)
#define NV_ESC_EXPORT_TO_DMABUF_FD  (NV_IOCTL_BASE + 17)
#define NV_ESC_WAIT_OPEN_COMPLETE   (NV_IOCTL_BASE + 18)

#define NV_ESC_RM_ALLOC_MEMORY               0x27
#define NV_ESC_RM_ALLOC_OBJECT               0x28
#define NV_ESC_RM_FREE                       0x29
#define NV_ESC_RM_CONTROL                    0x2A
#define NV_ESC_RM_ALLOC                      0x2B
#define NV_ESC_RM_DUP_OBJECT                 0x34
#define NV_ESC_RM_SHARE                      0x35
#define NV_ESC_RM_IDLE_CHANNELS              0x41
#define NV_ESC_RM_VID_HEAP_CONTROL           0x4A
#define NV_ESC_RM_MAP_MEMORY                 0x4E
#define NV_ESC_RM_UNMAP_MEMORY               0x4F
#define NV_ESC_RM_ALLOC_CONTEXT_DMA2         0x54
#define NV_ESC_RM_MAP_MEMORY_DMA             0x57
#define NV_ESC_RM_UNMAP_MEMORY_DMA           0x58
#define NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO 0x5E

/* The driver copies at most this many bytes through XFER. */
#define NV_ABSOLUTE_MAX_IOCTL_SIZE  16384

/*
 * The rule the driver applies to an XFER before dispatching its inner call:
 * a non-empty payload of at most NV_ABSOLUTE_MAX_IOCTL_SIZE bytes, and no
 * XFER inside an XFER.  Shared by the simulator and the mediator, so both
 * unwrap exactly alike.
 */
#define NV_IOCTL_XFER_VALID(cmd_, size_)                                    \
	((size_) != 0 && (size_) <= NV_ABSOLUTE_MAX_IOCTL_SIZE &&           \
	 (cmd_) != NV_ESC_IOCTL_XFER_CMD)

/* ------------------------------------------------------- status codes */
#define NV_OK                              0x00000000
#define NV_ERR_GENERIC                     0x0000FFFF
#define NV_ERR_GPU_UUID_NOT_FOUND          0x00000012
#define NV_ERR_ILLEGAL_ACTION              0x00000016
#define NV_ERR_IN_USE                      0x00000017
#define NV_ERR_INSERT_DUPLICATE_NAME       0x00000019  /* handle already in use */
#define NV_ERR_INSUFFICIENT_RESOURCES      0x0000001A
#define NV_ERR_INSUFFICIENT_PERMISSIONS    0x0000001B
#define NV_ERR_INVALID_ARGUMENT            0x0000001F
#define NV_ERR_INVALID_CLASS               0x00000022
#define NV_ERR_INVALID_CLIENT              0x00000023
#define NV_ERR_INVALID_COMMAND             0x00000024
#define NV_ERR_INVALID_LIMIT               0x0000002E
#define NV_ERR_INVALID_OBJECT_HANDLE       0x00000033
#define NV_ERR_INVALID_OBJECT_PARENT       0x00000036
#define NV_ERR_INVALID_PARAM_STRUCT        0x0000003A
#define NV_ERR_INVALID_REQUEST             0x0000003F
#define NV_ERR_INVALID_STATE               0x00000040
#define NV_WARN_NOTHING_TO_DO              0x00010006
#define NV_ERR_NO_MEMORY                   0x00000051
#define NV_ERR_NOT_SUPPORTED               0x00000056
#define NV_ERR_OBJECT_NOT_FOUND            0x00000057
#define NV_ERR_STATE_IN_USE                0x00000063
#define NV_ERR_RESOURCE_LOST               0x0000006E  /* an invalidated dependant */
#define NV_ERR_TIMEOUT                     0x00000065

/* ------------------------------------------------------------- classes */
#define NV01_ROOT                        0x00000000
#define NV01_ROOT_NON_PRIV               0x00000001
#define NV01_ROOT_CLIENT                 0x00000041
#define NV01_DEVICE_0                    0x00000080
#define NV20_SUBDEVICE_0                 0x00002080
#define NV01_MEMORY_SYSTEM               0x0000003E
#define NV01_MEMORY_LOCAL_PRIVILEGED     0x0000003F
#define NV01_MEMORY_LOCAL_USER           0x00000040
#define NV01_MEMORY_EXTENDED_USER        0x00000042
#define NV01_MEMORY_VIRTUAL              0x00000070 /* VirtualMemoryRange: NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS */
#define NV50_MEMORY_VIRTUAL              0x000050A0 /* VirtualMemory: NV_MEMORY_ALLOCATION_PARAMS */
#define NV_MEMORY_FABRIC                 0x000000F8
#define NV_MEMORY_MULTICAST_FABRIC       0x000000FD
#define KEPLER_CHANNEL_GROUP_A           0x0000A06C
#define GT200_DEBUGGER                   0x000083DE
#define NV50_P2P                         0x0000503B   /* cl503b.h */
#define NV0020_GPU_MANAGEMENT            0x00000020
#define KEPLER_CHANNEL_GPFIFO_A          0x0000A06F
#define KEPLER_CHANNEL_GPFIFO_B          0x0000A16F
#define MAXWELL_CHANNEL_GPFIFO_A         0x0000B06F
#define PASCAL_CHANNEL_GPFIFO_A          0x0000C06F
#define VOLTA_CHANNEL_GPFIFO_A           0x0000C36F
#define TURING_CHANNEL_GPFIFO_A          0x0000C46F
#define AMPERE_CHANNEL_GPFIFO_A          0x0000C56F
#define HOPPER_CHANNEL_GPFIFO_A          0x0000C86F
#define BLACKWELL_CHANNEL_GPFIFO_A       0x0000C96F
#define BLACKWELL_CHANNEL_GPFIFO_B       0x0000CA6F
#define VOLTA_USERMODE_A                 0x0000C361
#define TURING_USERMODE_A                0x0000C461
#define AMPERE_USERMODE_A                0x0000C561
#define HOPPER_USERMODE_A                0x0000C661
#define BLACKWELL_USERMODE_A             0x0000C761

/* The usermode (doorbell) region: 64 KiB, timer at 0x80/0x84, doorbell at 0x90. */
#define NVC361_USERMODE_REGION_SIZE          0x10000
#define NVC361_TIME_0                        0x80
#define NVC361_TIME_1                        0x84
#define NVC361_NOTIFY_CHANNEL_PENDING        0x90

/*
 * A channel's USERD (clc36f.h NvC36FControl, Volta+): GP_GET is written by
 * the GPU (the next entry it will fetch), GP_PUT by user space (one past the
 * last entry queued); both are ring indices.
 */
#define NVC36F_GPGET_OFFSET                  0x88
#define NVC36F_GPPUT_OFFSET                  0x8C

/*
 * nvsim only (no real driver has these): what a simulated channel's two-page
 * mapping holds beside the real USERD fields.  Page 0 = USERD, with
 * NVSIM_USERD_COMPLETIONS records {u64 start_ns; u64 end_ns} at
 * NVSIM_USERD_COMPLETIONS_OFFSET indexed by entry index % that count, in the
 * clock of TIME_0/TIME_1; page 1 = the GPFIFO ring of u64 entries whose bits
 * 0..31 are the work item's duration in microseconds.  gpFifoEntries 0 means
 * the default; otherwise a power of two from MIN to MAX.
 */
#define NVSIM_CHANNEL_MAP_PAGES              2
#define NVSIM_USERD_COMPLETIONS_OFFSET       0x800
#define NVSIM_USERD_COMPLETIONS              64
#define NVSIM_GPFIFO_ENTRIES_DEFAULT         128
#define NVSIM_GPFIFO_ENTRIES_MIN             2
#define NVSIM_GPFIFO_ENTRIES_MAX             512

/* --------------------------------------------------------- controls */
#define NV0041_CTRL_CMD_GET_SURFACE_INFO                0x00410110
#define NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_LO     2
#define NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_HI     3

#define NV2080_CTRL_CMD_FB_GET_INFO                     0x20801301
#define NV2080_CTRL_CMD_FB_GET_INFO_V2                  0x20801303
#define NV2080_CTRL_CMD_FB_GET_UGPU_MEMORY_INFO         0x20801362
#define NV2080_CTRL_CMD_GPU_GET_PIDS                    0x2080018D
#define NV2080_CTRL_CMD_GPU_GET_PID_INFO                0x2080018E
#define NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS           0x2080110B
#define NV2080_CTRL_CMD_GPU_GET_NAME_STRING             0x20800110
#define NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS            0x00000201
#define NV0000_CTRL_CMD_GPU_GET_INIT_STATUS             0x00000203
#define NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2              0x00000205
#define NV0000_CTRL_CMD_GPU_GET_PROBED_IDS              0x00000214
#define NV0000_CTRL_CMD_GPU_GET_PCI_INFO                0x0000021b
#define NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID        0x00000275
#define NV0000_CTRL_CMD_GPU_QUERY_DRAIN_STATE           0x00000279
#define NV0000_CTRL_CMD_GPU_GET_ID_INFO                 0x00000202
#define NV0000_CTRL_CMD_GPU_GET_DEVICE_IDS              0x00000204
#define NV0000_CTRL_CMD_GPU_ATTACH_IDS                  0x00000215
#define NV0000_CTRL_CMD_GPU_DETACH_IDS                  0x00000216
#define NV0000_CTRL_CMD_GPU_GET_ACTIVE_DEVICE_IDS       0x00000288
#define NV0000_CTRL_CMD_GPU_ASYNC_ATTACH_ID             0x00000289
#define NV0000_CTRL_CMD_GPU_WAIT_ATTACH_ID              0x00000290
#define NV0000_CTRL_GPU_ATTACH_ALL_PROBED_IDS           0x0000ffffU
#define NV0000_CTRL_GPU_DETACH_ALL_ATTACHED_IDS         0x0000ffffU
#define NV0000_CTRL_GPU_MAX_ACTIVE_DEVICES              256
#define NV0000_CTRL_CMD_GPU_GET_MEMOP_ENABLE            0x0000027b
#define NV0080_CTRL_CMD_GPU_GET_NUM_SUBDEVICES          0x00800280
/* Answered by vgpu.ko for a GPU with no peer and no fabric (kmod/vgpu/policy). */
#define NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS             0x00000127
#define NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2          0x0000012b
#define NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS        0x00000136
#define NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO       0x00000a04
#define NV_CONFIDENTIAL_COMPUTE                         0x0000cb33  /* class, clcb33.h */
#define NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX      0x0000013a
#define NV2080_CTRL_CMD_GET_GPU_FABRIC_PROBE_INFO       0x208001a3
#define NV2080_CTRL_CMD_NVLINK_GET_NVLINK_CAPS          0x20803001
#define NV2080_CTRL_CMD_NVLINK_GET_NVLINK_STATUS        0x20803002
#define NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS            32
#define NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS           8
#define NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE           9
#define NV0000_P2P_CAPS_STATUS_NOT_SUPPORTED            0x05
#define NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER    0xffffffffU
#define NV0000_CTRL_GET_SYSTEM_FABRIC_STATUS_SKIP       1
#define NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO 0x00000d02
#define NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT  0x00000001
#define NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID 0x00000002
#define NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY 0x00000d04
#define RS_SHARE_TYPE_NONE                              0
#define RS_SHARE_TYPE_PID                               4
#define RS_SHARE_ACTION_FLAG_REVOKE                     0x01
#define NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO           0x20801320
#define NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES 16
#define NVA06F_CTRL_CMD_SET_INTERLEAVE_LEVEL            0xA06F0109
#define NVA06F_CTRL_CMD_GET_INTERLEAVE_LEVEL            0xA06F0110
#define NVA06F_CTRL_CMD_STOP_CHANNEL                    0xA06F0112
#define NV0000_CTRL_GPU_INVALID_ID                      0xffffffffU
#define NV0000_CTRL_GPU_MAX_ATTACHED_GPUS               32
#define NV0000_CTRL_GPU_MAX_PROBED_GPUS                 32
/* Virtualised: answered NV_OK, never applied (kmod/vgpu/policy, rules 12, 20, 21). */
#define NV2080_CTRL_CMD_GPU_ACQUIRE_COMPUTE_MODE_RESERVATION 0x20800145
#define NV2080_CTRL_CMD_GPU_RELEASE_COMPUTE_MODE_RESERVATION 0x20800146
#define NV2080_CTRL_CMD_TIMER_SET_GR_TICK_FREQ          0x20800407
#define NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG             0x2080220a
#define NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG              0x2080220b
#define NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS    0x2080220c
#define NV2080_CTRL_CMD_RC_SOFT_DISABLE_WATCHDOG        0x20802210
/* ctrl0080perf.h; ctrl0000unix.h (CUDA IPC, kmod/vgpu/ipc.c) */
#define NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL     0x00801909
/* 535: NV0080_CTRL_PERF | LEGACY_NON_PRIVILEGED, message 0x9 (libcuda 535.261.03) */
#define NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL_LEGACY 0x00809909
#define NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD     0x00003D05
#define NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECT_FROM_FD   0x00003D06
#define NV0000_CTRL_CMD_OS_UNIX_GET_EXPORT_OBJECT_INFO  0x00003D08
#define NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD    0x00003D0B
#define NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECTS_FROM_FD  0x00003D0C
#define NV2080_GPU_MAX_NAME_STRING_LENGTH               0x40
#define NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII   0

#define NV2080_CTRL_FB_INFO_INDEX_BAR1_SIZE                  0x05
#define NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE                   0x07
#define NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE             0x08
#define NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE                  0x09
#define NV2080_CTRL_FB_INFO_INDEX_MAPPABLE_HEAP_SIZE         0x0A
#define NV2080_CTRL_FB_INFO_INDEX_LARGEST_FREE_REGION_SIZE_KB 0x12
#define NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE                  0x16
#define NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE            0x20
#define NV2080_CTRL_FB_INFO_MAX_LIST_SIZE                    128

#define NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT                   950
#define NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_CLASS               0   /* id = a class; NV20_SUBDEVICE_0: all PIDs */
#define NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_VGPU_GUEST          1
#define NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES                 200
#define NV2080_CTRL_GPU_PID_INFO_INDEX_VIDEO_MEMORY_USAGE    0

#define NVA06C_CTRL_CMD_GPFIFO_SCHEDULE                 0xA06C0101
#define NVA06C_CTRL_CMD_SET_TIMESLICE                   0xA06C0103
#define NVA06C_CTRL_CMD_GET_TIMESLICE                   0xA06C0104
#define NVA06C_CTRL_CMD_PREEMPT                         0xA06C0105
#define NVA06C_CTRL_CMD_GET_INFO                        0xA06C0106
#define NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL            0xA06C0107
#define NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL            0xA06C0108
#define NVA06C_CTRL_CMD_MAKE_REALTIME                   0xA06C0110
#define NVA06F_CTRL_CMD_GPFIFO_SCHEDULE                 0xA06F0103
#define NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN    0xC36F0108

#define NVA06C_CTRL_INTERLEAVE_LEVEL_LOW     0
#define NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM  1
#define NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH    2

/* Control cmd fields: class 31:16, category 15:8, index 7:0. */
#define NVXXXX_CTRL_CMD_CLASS(cmd)      (((cmd) >> 16) & 0xFFFF)
#define NVXXXX_CTRL_CMD_CATEGORY(cmd)   (((cmd) >> 8) & 0xFF)
#define RM_GSS_LEGACY_MASK              0x00008000
#define RM_CTRL_PRIVILEGED_MASK         0x0000C000  /* category bits 15:14 both set */
#define NVOS54_FLAGS_FINN_SERIALIZED    0x00000004
#define NVOS64_FLAGS_FINN_SERIALIZED    0x00000001

/* NVOS32 (vid heap) functions and flags. */
#define NVOS32_FUNCTION_ALLOC_SIZE               2
#define NVOS32_FUNCTION_FREE                     3
#define NVOS32_FUNCTION_INFO                     5
#define NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT 6
#define NVOS32_FUNCTION_ALLOC_SIZE_RANGE         14
#define NVOS32_ALLOC_FLAGS_VIRTUAL               0x00080000
#define NVOS32_FREE_FLAGS_MEMORY_HANDLE_PROVIDED 0x00000001

/* NV0080_ALLOC_PARAMETERS.flags (nvos.h) that only the vGPU host sets. */
#define NV_DEVICE_ALLOCATION_FLAGS_HOST_VGPU_DEVICE 0x00002000
#define NV_DEVICE_ALLOCATION_FLAGS_PLUGIN_CONTEXT   0x00004000
/* attr bits 26:25: LOCATION (0 vidmem, 1 pci, 2 any (vidmem preferred)). */
#define NVOS32_ATTR_LOCATION_SHIFT               25
#define NVOS32_ATTR_LOCATION_MASK                0x3
#define NVOS32_ATTR_LOCATION_VIDMEM              0
#define NVOS32_ATTR_LOCATION_PCI                 1
#define NVOS32_ATTR_LOCATION_ANY                 2
/* nvos.h: NVOS32_ATTR_PAGE_SIZE 24:23, NVOS32_ATTR_COMPR 13:12, NVOS32_ATTR2_PAGE_SIZE_HUGE 21:20 */
#define NVOS32_ATTR_PAGE_SIZE_SHIFT              23
#define NVOS32_ATTR_PAGE_SIZE_MASK               0x3
#define NVOS32_ATTR_PAGE_SIZE_DEFAULT            0
#define NVOS32_ATTR_PAGE_SIZE_4KB                1
#define NVOS32_ATTR_PAGE_SIZE_BIG                2
#define NVOS32_ATTR_PAGE_SIZE_HUGE               3
#define NVOS32_ATTR_COMPR_SHIFT                  12
#define NVOS32_ATTR_COMPR_MASK                   0x3
#define NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT        20
#define NVOS32_ATTR2_PAGE_SIZE_HUGE_MASK         0x3
#define NVOS32_ATTR2_PAGE_SIZE_HUGE_DEFAULT      0
#define NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB          1
#define NVOS32_ATTR2_PAGE_SIZE_HUGE_512MB        2
#define NVOS32_ATTR2_PAGE_SIZE_HUGE_256GB        3
/* nvos.h: NVOS32_ATTR2_GPU_CACHEABLE 3:2 */
#define NVOS32_ATTR2_GPU_CACHEABLE_SHIFT         2
#define NVOS32_ATTR2_GPU_CACHEABLE_MASK          0x3
#define NVOS32_ATTR2_GPU_CACHEABLE_DEFAULT       0
#define NVOS32_ATTR2_GPU_CACHEABLE_NO            2

/* NVOS02 (RM_ALLOC_MEMORY) flags: ALLOC 17:16, MAPPING 31:30.  The escape
 * creates an mmap context for system memory unless ALLOC is _NONE or MAPPING
 * is _NO_MAP. */
#define NVOS02_FLAGS_ALLOC_SHIFT                 16
#define NVOS02_FLAGS_ALLOC_MASK                  0x3
#define NVOS02_FLAGS_ALLOC_NONE                  1
#define NVOS02_FLAGS_MAPPING_SHIFT               30
#define NVOS02_FLAGS_MAPPING_MASK                0x3
#define NVOS02_FLAGS_MAPPING_NO_MAP              1

/* CHECK_VERSION_STR */
#define NV_RM_API_VERSION_STRING_LENGTH      64
#define NV_RM_API_VERSION_CMD_STRICT         0
#define NV_RM_API_VERSION_CMD_RELAXED        '1'
#define NV_RM_API_VERSION_CMD_QUERY          '2'
#define NV_RM_API_VERSION_REPLY_UNRECOGNIZED 0
#define NV_RM_API_VERSION_REPLY_RECOGNIZED   1

/* ------------------------------------------------------------ UVM */
#define UVM_INITIALIZE                  0x30000001
#define UVM_DEINITIALIZE                0x30000002
#define UVM_REGISTER_GPU_VASPACE        25
#define UVM_REGISTER_CHANNEL            27
#define UVM_MAP_EXTERNAL_ALLOCATION     33
#define UVM_FREE                        34
#define UVM_REGISTER_GPU                37
#define UVM_MIGRATE                     51
#define UVM_UNMAP_EXTERNAL              66
#define UVM_ALLOC_SEMAPHORE_POOL        68
#define UVM_CREATE_EXTERNAL_RANGE       73
#define UVM_MM_INITIALIZE               75
#define UVM_MAX_GPUS                    256

/*
 * ==== BEGIN nvsim start-up block (constants) =============================
 * What CUDA's and nvidia-smi's start-up ask of a GPU: class list, GPU, GID,
 * build and GR info, VA spaces, context shares, engine objects, OS
 * descriptors, MAP_MEMORY_DMA.  Values from the 595.45.04 headers
 * (nvstatuscodes.h, nvos.h, class/cl*.h, ctrl/ctrl0000system.h,
 * ctrl/ctrl0080gpu.h, ctrl/ctrl2080gpu.h, ctrl/ctrl0080gr.h,
 * ctrl/ctrl2080gr.h, class/cl2080_notification.h).  Bit fields that NVIDIA
 * spells hi:lo are given here as _SHIFT/_MASK pairs.
 */
#define NV_ERR_INVALID_ADDRESS             0x0000001E
#define NV_ERR_UVM_ADDRESS_IN_USE          0x00000068
#define NV_ERR_INVALID_FLAGS               0x00000029
#define NV_ERR_INVALID_OBJECT              0x00000031
#define NV_ERR_INVALID_OFFSET              0x00000037
#define NV_ERR_INVALID_PARAMETER           0x0000003B
#define NV_ERR_OUT_OF_RANGE                0x0000005B

/* Classes (class/cl0071.h, cl9067.h, cl90f1.h, cl902d.h, cla140.h, clc797.h,
 * clc7c0.h, clc7b5.h, clcb97.h, clcbc0.h, clc8b5.h). */
#define NV01_MEMORY_SYSTEM_OS_DESCRIPTOR 0x00000071
#define NV01_EVENT                       0x00000005
#define NV01_EVENT_OS_EVENT              0x00000079
#define NV01_EVENT_KERNEL_CALLBACK       0x00000078  /* nvos.h */
#define NV01_EVENT_KERNEL_CALLBACK_EX    0x0000007e
#define FERMI_CONTEXT_SHARE_A            0x00009067
#define FERMI_VASPACE_A                  0x000090F1
#define FERMI_TWOD_A                     0x0000902D
#define KEPLER_INLINE_TO_MEMORY_B        0x0000A140
#define AMPERE_B                         0x0000C797
#define AMPERE_COMPUTE_B                 0x0000C7C0
#define AMPERE_DMA_COPY_B                0x0000C7B5
#define HOPPER_A                         0x0000CB97
#define HOPPER_COMPUTE_A                 0x0000CBC0
#define HOPPER_DMA_COPY_A                0x0000C8B5

/* Controls. */
#define NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION        0x00000101
#define NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2     0x0000013E
#define NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE 256
#define NV0080_CTRL_CMD_GPU_GET_CLASSLIST               0x00800201
#define NV2080_CTRL_CMD_GPU_GET_INFO                    0x20800101
#define NV2080_CTRL_CMD_GPU_GET_INFO_V2                 0x20800102
#define NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST        0x20800124
#define NV2080_CTRL_CMD_GPU_GET_GID_INFO                0x2080014A
#define NV2080_CTRL_CMD_GR_GET_INFO                     0x20801201

/* NV2080_CTRL_GPU_INFO: index bits 23:0 name the item. */
#define NV2080_CTRL_GPU_INFO_INDEX_INDEX_MASK           0x00FFFFFF
#define NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE              0x46
#define NV2080_CTRL_GPU_INFO_INDEX_ECID_LO32            0x01
#define NV2080_CTRL_GPU_INFO_INDEX_ECID_HI32            0x02
#define NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV0         0x12
#define NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV1         0x13
#define NV2080_CTRL_GPU_INFO_INDEX_ECID_EXTENDED        0x1B
#define NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS        0x1F
#define NV2080_CTRL_GPU_INFO_INDEX_GEMINI_BOARD         0x22
#define NV2080_CTRL_GPU_INFO_INDEX_SURPRISE_REMOVAL_POSSIBLE 0x25
#define NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE         0x2A
#define NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION       0x2C
#define NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED      0x34
#define NV2080_CTRL_GPU_INFO_INDEX_MOBILE_CONFIG_ENABLED 0x35
#define NV2080_CTRL_GPU_INFO_INDEX_GPU_PROFILING_CAPABILITY 0x36
#define NV2080_CTRL_GPU_INFO_INDEX_GPU_DEBUGGING_CAPABILITY 0x37
#define NV2080_CTRL_GPU_INFO_INDEX_CMP_SKU              0x3C
#define NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY    0x3D
#define NV2080_CTRL_GPU_INFO_INDEX_COHERENT_GPU_MEMORY_MODE 0x44
#define NV2080_CTRL_GPU_INFO_SYSMEM_ACCESS_YES          1
#define NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_NO  0
#define NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_YES 1
#define NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_UNSUPPORTED   0
#define NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_DISABLED      2
#define NV2080_CTRL_GPU_INFO_DISPLAY_ENABLED_NO         0
#define NV2080_CTRL_GPU_INFO_DISPLAY_ENABLED_YES        1

/* NV2080_CTRL_GPU_GET_GID_INFO flags: FORMAT 1:0, TYPE 2:2, MODE 5:3. */
#define NV2080_GPU_MAX_GID_LENGTH                       0x100
#define NV2080_GPU_MAX_SHA1_BINARY_GID_LENGTH           0x10
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_MASK    0x3
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_ASCII   0x0
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY  0x2
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHIFT     2
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHA1      0x0
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_SHIFT     3
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_MASK      0x7
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_GPU       0x0
#define NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_UGPU      0x1
/* gpu_uuid.h: "GPU-" + 36 characters + NUL */
#define NV_UUID_LEN                                     16
#define NV_UUID_STR_LEN                                 41

/* GR info (ctrl0080gr.h; NV2080_CTRL_GR_INFO_* are the same numbers). */
#define NV2080_CTRL_GR_INFO_INDEX_SM_VERSION            0x0C
#define NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM      0x0D
#define NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP  0x0E
#define NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS       0x14
#define NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC 0x17
#define NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC 0x20
#define NV2080_CTRL_GR_INFO_INDEX_MAX_SUBCONTEXT_COUNT  0x2C
#define NV2080_CTRL_GR_INFO_MAX_SIZE                    0x3B
#define NV2080_CTRL_GR_INFO_SM_VERSION_8_06             0x0806
#define NV2080_CTRL_GR_INFO_SM_VERSION_9_00             0x0900

/* Engine types (cl2080_notification.h). */
#define NV2080_ENGINE_TYPE_NULL                         0x00
#define NV2080_ENGINE_TYPE_GR0                          0x01
#define NV2080_ENGINE_TYPE_GR7                          0x08
#define NV2080_ENGINE_TYPE_COPY0                        0x09
#define NV2080_ENGINE_TYPE_COPY9                        0x12

/* FERMI_VASPACE_A (nvos.h). */
#define NV_VASPACE_ALLOCATION_INDEX_GPU_NEW             0x00
#define NV_VASPACE_ALLOCATION_INDEX_GPU_HOST            0x01
#define NV_VASPACE_ALLOCATION_INDEX_GPU_GLOBAL          0x02
#define NV_VASPACE_ALLOCATION_INDEX_GPU_DEVICE          0x03
#define NV_VASPACE_ALLOCATION_INDEX_GPU_FLA             0x04
#define NV_VASPACE_ALLOCATION_FLAGS_SHARED_MANAGEMENT   0x00000004
#define NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED 0x00000008
#define NV_VASPACE_ALLOCATION_FLAGS_ENABLE_NVLINK_ATS   0x00000010
#define NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING 0x00000040
#define NV_VASPACE_ALLOCATION_FLAGS_ALLOW_ZERO_ADDRESS  0x00000100
#define NV_VASPACE_BIG_PAGE_SIZE_64K                    0x00010000
#define NV_VASPACE_BIG_PAGE_SIZE_128K                   0x00020000

/* FERMI_CONTEXT_SHARE_A flags (nvos.h). */
#define NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC    0
#define NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC   1
#define NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED 2
#define NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC_PREFER_LOWER 3

/* NV0080_ALLOC_PARAMETERS.vaMode (nvos.h). */
#define NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES 0
#define NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE      1
#define NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES   2

/* OS descriptors (nvos.h): descriptor types, NVOS02 flag fields. */
#define NVOS32_DESCRIPTOR_TYPE_VIRTUAL_ADDRESS          0
#define NVOS32_DESCRIPTOR_TYPE_OS_PAGE_ARRAY            1
#define NVOS32_DESCRIPTOR_TYPE_OS_IO_MEMORY             2
#define NVOS32_DESCRIPTOR_TYPE_OS_PHYS_ADDR             3
#define NVOS32_DESCRIPTOR_TYPE_OS_FILE_HANDLE           4
#define NVOS32_DESCRIPTOR_TYPE_OS_DMA_BUF_PTR           5
#define NVOS32_DESCRIPTOR_TYPE_OS_SGT_PTR               6
#define NVOS32_DESCRIPTOR_TYPE_KERNEL_VIRTUAL_ADDRESS   7
#define NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE       0x00000010
#define NVOS02_FLAGS_PHYSICALITY_SHIFT                  4
#define NVOS02_FLAGS_PHYSICALITY_MASK                   0xF
#define NVOS02_FLAGS_PHYSICALITY_CONTIGUOUS             0
#define NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS          1
#define NVOS02_FLAGS_LOCATION_SHIFT                     8
#define NVOS02_FLAGS_LOCATION_MASK                      0xF
#define NVOS02_FLAGS_LOCATION_PCI                       0
#define NVOS02_FLAGS_COHERENCY_SHIFT                    12
#define NVOS02_FLAGS_COHERENCY_MASK                     0xF
#define NVOS02_FLAGS_COHERENCY_UNCACHED                 0
#define NVOS02_FLAGS_COHERENCY_CACHED                   1
#define NVOS02_FLAGS_COHERENCY_WRITE_BACK               5
#define NVOS02_FLAGS_ALLOC_USER_READ_ONLY_SHIFT         21

/* NVOS46 flags: DMA_OFFSET_FIXED 15:15 (dmaOffset is an absolute VA). */
#define NVOS46_FLAGS_DMA_OFFSET_FIXED_SHIFT             15
/* ==== END nvsim start-up block (constants) ============================== */

/* ------------------------------------------------ kernel RM entry point */
#define NV01_FREE                0x00000000
#define NV01_ALLOC_MEMORY        0x00000002
#define NV04_ALLOC               0x00000015
#define NV04_VID_HEAP_CONTROL    0x00000020
#define NV04_MAP_MEMORY          0x00000021
#define NV04_UNMAP_MEMORY        0x00000022
#define NV04_CONTROL             0x00000036
#define NV04_DUP_OBJECT          0x00000037

/* ================================================================ layouts */

typedef struct {
	NvU32 cmd;
	NvU32 size;
	NvP64 ptr;
} nv_ioctl_xfer_t;

typedef struct {
	NvU32 domain;
	NvU8  bus;
	NvU8  slot;
	NvU8  function;
	NvU8  _pad0;
	NvU16 vendor_id;
	NvU16 device_id;
} nv_pci_info_t;

typedef struct {
	NvBool        valid;
	nv_pci_info_t pci_info;
	NvU32         gpu_id;
	NvU16         interrupt_line;
	NvU64         reg_address NV_ALIGN8;
	NvU64         reg_size NV_ALIGN8;
	NvU64         fb_address NV_ALIGN8;
	NvU64         fb_size NV_ALIGN8;
	NvU32         minor_number;
	NvU8          dev_name[10];
} nv_ioctl_card_info_t;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvU32    fd;
	NvU32    Status;
} nv_ioctl_alloc_os_event_t;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvU32    fd;
	NvU32    Status;
} nv_ioctl_free_os_event_t;

typedef struct {
	NvU32 cmd;
	NvU32 reply;
	char  versionString[NV_RM_API_VERSION_STRING_LENGTH];
} nv_ioctl_rm_api_version_t;

typedef struct {
	int ctl_fd;
} nv_ioctl_register_fd_t;

typedef struct {
	NvU64 memblock_size NV_ALIGN8;
} nv_ioctl_sys_params_t;

/* nv-ioctl-numa.h: a GPU's memory as a NUMA node (coherent platforms). */
#define NV_IOCTL_NUMA_INFO_MAX_OFFLINE_ADDRESSES 64
#define NV_IOCTL_NUMA_STATUS_DISABLED            0
#define NV_IOCTL_NUMA_STATUS_OFFLINE             1
typedef struct {
	NvU64 addresses[NV_IOCTL_NUMA_INFO_MAX_OFFLINE_ADDRESSES] NV_ALIGN8;
	NvU32 numEntries;
	NvU32 _pad0;
} nv_offline_addresses_t;

typedef struct {
	NvS32 nid;                      /* -1: not a NUMA node */
	NvS32 status;
	NvU64 memblock_size NV_ALIGN8;
	NvU64 numa_mem_addr NV_ALIGN8;
	NvU64 numa_mem_size NV_ALIGN8;
	NvU8  use_auto_online;
	NvU8  _pad0[7];
	nv_offline_addresses_t offline_addresses;
} nv_ioctl_numa_info_t;

typedef struct {
	int   rc;
	NvU32 adapterStatus;
} nv_ioctl_wait_open_complete_t;

typedef struct {
	NvU32 domain;
	NvU8  bus;
	NvU8  slot;
	NvU32 status;
} nv_ioctl_status_code_t;

#define NV_DMABUF_EXPORT_MAX_HANDLES 128
typedef struct {
	int      fd;
	NvHandle hClient;
	NvU32    totalObjects;
	NvU32    numObjects;
	NvU32    index;
	NvU64    totalSize NV_ALIGN8;
	NvU8     mappingType;
	NvBool   bAllowMmap;
	NvHandle handles[NV_DMABUF_EXPORT_MAX_HANDLES];
	NvU64    offsets[NV_DMABUF_EXPORT_MAX_HANDLES] NV_ALIGN8;
	NvU64    sizes[NV_DMABUF_EXPORT_MAX_HANDLES] NV_ALIGN8;
	NvU32    status;
} nv_ioctl_export_to_dma_buf_fd_t;

typedef struct {
	NvHandle hRoot;
	NvHandle hObjectParent;
	NvHandle hObjectOld;
	NvV32    status;
} NVOS00_PARAMETERS;

typedef struct {
	NvHandle hRoot;
	NvHandle hObjectParent;
	NvHandle hObjectNew;
	NvV32    hClass;
	NvV32    flags;
	NvP64    pMemory;
	NvU64    limit NV_ALIGN8;
	NvV32    status;
} NVOS02_PARAMETERS;

typedef struct {
	NVOS02_PARAMETERS params;
	int fd;
} nv_ioctl_nvos02_parameters_with_fd;

typedef struct {
	NvHandle hRoot;
	NvHandle hObjectParent;
	NvHandle hObjectNew;
	NvV32    hClass;
	NvV32    status;
} NVOS05_PARAMETERS;

typedef struct {
	NvHandle hRoot;
	NvHandle hObjectParent;
	NvHandle hObjectNew;
	NvV32    hClass;
	NvP64    pAllocParms;
	NvU32    paramsSize;
	NvV32    status;
} NVOS21_PARAMETERS;

typedef struct {
	NvHandle hRoot;
	NvHandle hObjectParent;
	NvHandle hObjectNew;
	NvV32    hClass;
	NvP64    pAllocParms;
	NvP64    pRightsRequested;
	NvU32    paramsSize;
	NvU32    flags;
	NvV32    status;
} NVOS64_PARAMETERS;

/* NVOS32: the vid heap escape.  Only the union members this project reads are
 * spelled out; the union is 144 bytes. */
typedef struct {
	NvU32 owner;      /* @40 */
	NvHandle hMemory; /* @44 */
	NvU32 type;       /* @48 */
	NvU32 flags;      /* @52 */
	NvU32 attr;       /* @56 */
	NvU32 format;     /* @60 */
	NvU32 comprCovg;  /* @64 */
	NvU32 zcullCovg;  /* @68 */
	NvU32 partitionStride; /* @72 */
	NvU32 _pad0;      /* @76 */
	NvU32 width;      /* @80 */
	NvU32 height;     /* @84 */
	NvU64 size NV_ALIGN8;      /* @88 */
	NvU64 alignment NV_ALIGN8; /* @96 */
	NvU64 offset NV_ALIGN8;    /* @104 */
	NvU64 limit NV_ALIGN8;     /* @112 */
	NvP64 address;             /* @120 */
	NvU64 rangeBegin NV_ALIGN8;/* @128 */
	NvU64 rangeEnd NV_ALIGN8;  /* @136 */
	NvU32 attr2;               /* @144 */
	NvU32 ctagOffset;          /* @148 */
	NvS32 numaNode;            /* @152 */
} NVOS32_ALLOC_SIZE;

typedef struct {
	NvU32 owner;      /* @40 */
	NvHandle hMemory; /* @44 */
	NvU32 type;       /* @48 */
	NvU32 flags;      /* @52 */
	NvU32 height;     /* @56 */
	NvS32 pitch;      /* @60 */
	NvU32 attr;       /* @64 */
	NvU32 width;      /* @68 */
	NvU32 format;     /* @72 */
	NvU32 comprCovg;  /* @76 */
	NvU32 zcullCovg;  /* @80 */
	NvU32 partitionStride; /* @84 */
	NvU64 size NV_ALIGN8;  /* @88 */
} NVOS32_ALLOC_TILED_PITCH_HEIGHT;

typedef struct {
	NvU32 owner;      /* @40 */
	NvHandle hMemory; /* @44 */
	NvU32 type;       /* @48 */
	NvU32 flags;      /* @52 */
	NvU32 attr;       /* @56 */
	NvU32 format;     /* @60 */
	NvU32 comprCovg;  /* @64 */
	NvU32 zcullCovg;  /* @68 */
	NvU32 partitionStride; /* @72 */
	NvU32 _pad0;      /* @76 */
	NvU64 size NV_ALIGN8;  /* @80 */
	NvU64 alignment NV_ALIGN8; /* @88 */
	NvU64 offset NV_ALIGN8;    /* @96 */
	NvU64 limit NV_ALIGN8;     /* @104 */
	NvU64 rangeBegin NV_ALIGN8;/* @112 */
	NvU64 rangeEnd NV_ALIGN8;  /* @120 */
} NVOS32_ALLOC_SIZE_RANGE;

typedef struct {
	NvU32 owner;      /* @40 */
	NvHandle hMemory; /* @44 */
	NvU32 flags;      /* @48 */
} NVOS32_FREE;

typedef struct {
	NvHandle hRoot;
	NvHandle hObjectParent;
	NvU32    function;
	NvHandle hVASpace;
	NvS16    ivcHeapNumber;
	NvV32    status;
	NvU64    total NV_ALIGN8;
	NvU64    free NV_ALIGN8;
	union {
		NVOS32_ALLOC_SIZE               AllocSize;
		NVOS32_ALLOC_TILED_PITCH_HEIGHT AllocTiledPitchHeight;
		NVOS32_ALLOC_SIZE_RANGE         AllocSizeRange;
		NVOS32_FREE                     Free;
		NvU8                            _raw[144];
	} data NV_ALIGN8;
} NVOS32_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvHandle hMemory;
	NvU64    offset NV_ALIGN8;
	NvU64    length NV_ALIGN8;
	NvP64    pLinearAddress;
	NvU32    status;
	NvU32    flags;
} NVOS33_PARAMETERS;

typedef struct {
	NVOS33_PARAMETERS params;
	int fd;
} nv_ioctl_nvos33_parameters_with_fd;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvHandle hMemory;
	NvP64    pLinearAddress;
	NvU32    status;
	NvU32    flags;
} NVOS34_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvHandle hDma;
	NvHandle hMemory;
	NvU64    offset NV_ALIGN8;
	NvU64    length NV_ALIGN8;
	NvV32    flags;
	NvV32    flags2;
	NvU32    kindOverride;
	NvU32    _pad0;
	NvU64    dmaOffset NV_ALIGN8;
	NvV32    status;
} NVOS46_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvHandle hDma;
	NvHandle hMemory;
	NvV32    flags;
	NvU64    dmaOffset NV_ALIGN8;
	NvU64    size NV_ALIGN8;
	NvV32    status;
} NVOS47_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hObject;
	NvV32    cmd;
	NvU32    flags;
	NvP64    params;
	NvU32    paramsSize;
	NvV32    status;
} NVOS54_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hParent;
	NvHandle hObject;
	NvHandle hClientSrc;
	NvHandle hObjectSrc;
	NvU32    flags;
	NvU32    status;
} NVOS55_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvHandle hMemory;
	NvP64    pOldCpuAddress;
	NvP64    pNewCpuAddress;
	NvV32    status;
} NVOS56_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hObject;
	NvU32    sharePolicy[3];   /* RS_SHARE_POLICY: target, accessMask, type and action */
	NvU32    status;
} NVOS57_PARAMETERS;

typedef struct {
	NvHandle hClient;
	NvHandle hDevice;
	NvHandle hChannel;
	NvV32    numChannels;
	NvP64    phClients;
	NvP64    phDevices;
	NvP64    phChannels;
	NvV32    flags;
	NvV32    timeout;
	NvV32    status;
} NVOS30_PARAMETERS;

typedef struct {
	NvHandle hObjectParent;
	NvHandle hSubDevice;
	NvHandle hObjectNew;
	NvV32    hClass;
	NvV32    flags;
	NvU32    selector;
	NvHandle hMemory;
	NvU64    offset NV_ALIGN8;
	NvU64    limit NV_ALIGN8;
	NvV32    status;
} NVOS39_PARAMETERS;

typedef struct {
	NvU32 owner;
	NvU32 type;
	NvU32 flags;
	NvU32 width;
	NvU32 height;
	NvS32 pitch;
	NvU32 attr;
	NvU32 attr2;
	NvU32 format;
	NvU32 comprCovg;
	NvU32 zcullCovg;
	NvU32 _pad0;
	NvU64 rangeLo NV_ALIGN8;
	NvU64 rangeHi NV_ALIGN8;
	NvU64 size NV_ALIGN8;
	NvU64 alignment NV_ALIGN8;
	NvU64 offset NV_ALIGN8;
	NvU64 limit NV_ALIGN8;
	NvP64 address;
	NvU32 ctagOffset;
	NvHandle hVASpace;
	NvU32 internalflags;
	NvU32 tag;
	NvS32 numaNode;
	NvU32 _pad1;
} NV_MEMORY_ALLOCATION_PARAMS;

typedef struct {
	NvU64 offset NV_ALIGN8;
	NvU64 limit NV_ALIGN8;
	NvHandle hVASpace;
	NvU32 _pad0;
} NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS;

typedef struct {
	NvHandle hObjectError;
	NvHandle hObjectEccError;
	NvHandle hVASpace;
	NvU32    engineType;
	NvBool   bIsCallingContextVgpuPlugin;
} NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS;

/* NV_CHANNEL_ALLOC_PARAMS changes across releases (570, 610); only the fields
 * read here are named, the rest is opaque. 595 layout. */
typedef struct {
	NvHandle hObjectError;       /* @0 */
	NvHandle hObjectBuffer;      /* @4 */
	NvU64    gpFifoOffset NV_ALIGN8; /* @8 */
	NvU32    gpFifoEntries;      /* @16 */
	NvU32    flags;              /* @20 */
	NvHandle hContextShare;      /* @24 */
	NvHandle hVASpace;           /* @28 */
	NvU8     _opaque0[96];       /* @32: hUserdMemory[8], userdOffset[8], subDeviceId */
	NvU32    engineType;         /* @128 */
	NvU8     _opaque1[236];      /* @132: cid, subDeviceId, error notifiers, ... */
} NV_CHANNEL_ALLOC_PARAMS;

/* cl0000.h: a root client's class parameters (pOsPidInfo: kernel callers). */
typedef struct {
	NvHandle hClient;
	NvU32    processID;
	char     processName[100];   /* NV_PROC_NAME_MAX_LENGTH */
	NvU32    _pad0;
	NvP64    pOsPidInfo;
} NV0000_ALLOC_PARAMETERS;

typedef struct {
	NvU32    deviceId;
	NvHandle hClientShare;
	NvHandle hTargetClient;
	NvHandle hTargetDevice;
	NvV32    flags;
	NvU32    _pad0;
	NvU64    vaSpaceSize NV_ALIGN8;
	NvU64    vaStartInternal NV_ALIGN8;
	NvU64    vaLimitInternal NV_ALIGN8;
	NvV32    vaMode;
	NvU32    _pad1;
} NV0080_ALLOC_PARAMETERS;

typedef struct {
	NvU32 subDeviceId;
} NV2080_ALLOC_PARAMETERS;

typedef struct {
	NvU32 index;
	NvU32 data;
} NV2080_CTRL_FB_INFO;

typedef NV2080_CTRL_FB_INFO NV0041_CTRL_SURFACE_INFO;

typedef struct {
	NvU32 fbInfoListSize;
	NvP64 fbInfoList;
} NV2080_CTRL_FB_GET_INFO_PARAMS;

typedef struct {
	NvU32 fbInfoListSize;
	NV2080_CTRL_FB_INFO fbInfoList[NV2080_CTRL_FB_INFO_MAX_LIST_SIZE];
} NV2080_CTRL_FB_GET_INFO_V2_PARAMS;

typedef struct {
	NvU32 surfaceInfoListSize;
	NvP64 surfaceInfoList;
} NV0041_CTRL_GET_SURFACE_INFO_PARAMS;

typedef struct {
	NvU32 idType;
	NvU32 id;
	NvU32 pidTblCount;
	NvU32 pidTbl[NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT];
} NV2080_CTRL_GPU_GET_PIDS_PARAMS;

/* 595.45.04: ASCII only, the flags deprecated and ignored (590.48.01 had a unicode[64] member: 132 bytes). */
typedef struct {
	NvU32 gpuNameStringFlags;
	struct {
		NvU8  ascii[NV2080_GPU_MAX_NAME_STRING_LENGTH];
	} gpuNameString;
} NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS;

/* ctrl0000gpu.h: a GPU's ids by gpuId; deviceInstance is NV0080's deviceId. */
typedef struct {
	NvU32    gpuId;
	NvU32    gpuFlags;
	NvU32    deviceInstance;
	NvU32    subDeviceInstance;
	NvU32    sliStatus;
	NvU32    boardId;
	NvU32    gpuInstance;
	NvS32    numaId;
} NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS;

/* ctrl0000gpu.h: a GPU's UUID by gpuId (flags: FORMAT 1:0, TYPE 2:2). */
#define NV0000_GPU_MAX_GID_LENGTH                               0x100
#define NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_MASK   0x3
#define NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_BINARY 0x2
#define NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_TYPE_SHA256   0x4
typedef struct {
	NvU32    gpuId;
	NvU32    flags;
	NvU8     gpuUuid[NV0000_GPU_MAX_GID_LENGTH];
	NvU32    uuidStrLen;
} NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS;

/* ctrl0000gpu.h, the first version: szName is unused by the driver. */
typedef struct {
	NvU32    gpuId;
	NvU32    gpuFlags;
	NvU32    deviceInstance;
	NvU32    subDeviceInstance;
	NvP64    szName;
	NvU32    sliStatus;
	NvU32    boardId;
	NvU32    gpuInstance;
	NvS32    numaId;
} NV0000_CTRL_GPU_GET_ID_INFO_PARAMS;

/* ATTACH_IDS: a list ended by NV0000_CTRL_GPU_INVALID_ID, or ATTACH_ALL_PROBED_IDS first. */
typedef struct {
	NvU32    gpuIds[NV0000_CTRL_GPU_MAX_PROBED_GPUS];
	NvU32    failedId;
} NV0000_CTRL_GPU_ATTACH_IDS_PARAMS;

typedef struct {
	NvU32    gpuIds[NV0000_CTRL_GPU_MAX_ATTACHED_GPUS];
} NV0000_CTRL_GPU_DETACH_IDS_PARAMS;

/* A bit per deviceInstance of an attached GPU. */
typedef struct {
	NvU32    deviceIds;
} NV0000_CTRL_GPU_GET_DEVICE_IDS_PARAMS;

typedef struct {
	NvU32    gpuId;
	NvU32    gpuInstanceId;
	NvU32    computeInstanceId;
} NV0000_CTRL_GPU_ACTIVE_DEVICE;

typedef struct {
	NvU32    numDevices;
	NV0000_CTRL_GPU_ACTIVE_DEVICE devices[NV0000_CTRL_GPU_MAX_ACTIVE_DEVICES];
} NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS;

/* ctrl0000system.h.  535 has no busEgmPeerIds (V1: 168 bytes; V2: 4252). */
typedef struct {
	NvU32    gpuIds[NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS];
	NvU32    gpuCount;
	NvU32    p2pCaps;
	NvU32    p2pOptimalReadCEs;
	NvU32    p2pOptimalWriteCEs;
	NvU8     p2pCapsStatus[NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE];
	NvU8     _pad0[7];
	NvP64    busPeerIds;
	NvP64    busEgmPeerIds;
} NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS;

typedef struct {
	NvU32    gpuIds[NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS];
	NvU32    gpuCount;
	NvU32    p2pCaps;
	NvU32    p2pOptimalReadCEs;
	NvU32    p2pOptimalWriteCEs;
	NvU8     p2pCapsStatus[NV0000_CTRL_P2P_CAPS_INDEX_TABLE_SIZE];
	NvU8     _pad0[3];
	NvU32    busPeerIds[NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS * NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS];
	NvU32    busEgmPeerIds[NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS * NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS];
} NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS;

typedef struct {
	NvU32    grpACount;
	NvU32    grpBCount;
	NvU32    gpuIdGrpA[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
	NvU32    gpuIdGrpB[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
	/* p2pCaps, a2bOptimalReadCes, a2bOptimalWriteCes, b2aOptimalReadCes,
	 * b2aOptimalWriteCes: [8][8] each, outputs only */
	NvU32    p2pCaps[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS][NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
	NvU32    a2bOptimalReadCes[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS][NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
	NvU32    a2bOptimalWriteCes[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS][NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
	NvU32    b2aOptimalReadCes[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS][NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
	NvU32    b2aOptimalWriteCes[NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS][NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS];
} NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS;

typedef struct {
	NvU32    fabricStatus;
} NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS;

/* rs_access.h (RS_ACCESS_MASK is one NvU32 limb). */
typedef struct {
	NvU32    target;
	NvU32    accessMask;
	NvU16    type;
	NvU8     action;
	NvU8     _pad0;
} RS_SHARE_POLICY;

typedef struct {
	RS_SHARE_POLICY sharePolicy;
} NV0000_CTRL_CLIENT_SET_INHERITED_SHARE_POLICY_PARAMS;

/* cl83de.h: GT200_DEBUGGER's allocation parameters. */
typedef struct {
	NvHandle hDebuggerClient_Obsolete;
	NvHandle hAppClient;
	NvHandle hClass3dObject;
} NV83DE_ALLOC_PARAMETERS;

/* ctrl0000client.h; cliresCtrlCmdClientGetHandleInfo (client_resource.c) */
typedef struct {
	NvHandle hObject;
	NvU32    index;
	union {
		NvHandle hResult;
		NvU64    iResult __attribute__((aligned(8)));
	} data;
} NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS;

/*
 * FB_GET_FB_REGION_INFO.  The region grew (56 bytes from 580, 48 before:
 * bProtected and blackList), so vgpu.ko steps through the list by the
 * release's size, never by sizeof, and reads only base, limit and reserved.
 */
#define NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MEM_TYPES 18
typedef struct {
	NvU64    base NV_ALIGN8;
	NvU64    limit NV_ALIGN8;
	NvU64    reserved NV_ALIGN8;
	NvU32    performance;
	NvBool   supportCompressed;
	NvBool   supportISO;
	NvBool   bProtected;
	NvBool   blackList[NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MEM_TYPES];
	NvU8     _pad0[7];
} NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO;

typedef struct {
	NvU32    numFBRegions;
	NvU32    _pad0;
	NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO fbRegion[NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES];
} NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS;

/* GET_PID_INFO: per-pid data.  Index 0 (video memory usage) fills
 * vidMemUsage.memPrivate etc.; the simulator fills memPrivate only. */
typedef struct {
	NvU64 memPrivate NV_ALIGN8;
	NvU64 memSharedOwned NV_ALIGN8;
	NvU64 memSharedDuped NV_ALIGN8;
	NvU64 protectedMemPrivate NV_ALIGN8;
	NvU64 protectedMemSharedOwned NV_ALIGN8;
	NvU64 protectedMemSharedDuped NV_ALIGN8;
} NV2080_CTRL_GPU_PID_INFO_VIDEO_MEMORY_USAGE_DATA;

typedef struct {
	NvU32 pid;
	NvU32 index;
	NvU32 result;
	NvU32 _pad0;
	NV2080_CTRL_GPU_PID_INFO_VIDEO_MEMORY_USAGE_DATA data;
	/* NV2080_CTRL_SMC_SUBSCRIPTION_INFO: computeInstanceId, gpuInstanceId */
	NvU32 smcSubscription[2];
} NV2080_CTRL_GPU_PID_INFO;

typedef struct {
	NvU32 pidInfoListCount;
	NvU32 _pad0;
	NV2080_CTRL_GPU_PID_INFO pidInfoList[NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES];
} NV2080_CTRL_GPU_GET_PID_INFO_PARAMS;

typedef struct {
	NvU64 timesliceUs NV_ALIGN8;
} NVA06C_CTRL_TIMESLICE_PARAMS;

typedef struct {
	NvBool bWait;
	NvBool bManualTimeout;
	NvU8   _pad0[2];
	NvU32  timeoutUs;
} NVA06C_CTRL_PREEMPT_PARAMS;

typedef struct {
	NvBool bEnable;
	NvBool bSkipSubmit;
	NvBool bSkipEnable;
} NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS;

typedef NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS;

typedef struct {
	NvU32 tsgInterleaveLevel;
} NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS;

typedef struct {
	NvU32 tsgID;
} NVA06C_CTRL_GET_INFO_PARAMS;

typedef struct {
	NvU32 workSubmitToken;
} NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS;

#define NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES 64
typedef struct {
	NvBool bDisable;
	NvU8   _pad0[3];
	NvU32  numChannels;
	NvBool bOnlyDisableScheduling;
	NvBool bRewindGpPut;
	NvU8   _pad1[6];
	NvP64  pRunlistPreemptEvent;
	NvHandle hClientList[NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES];
	NvHandle hChannelList[NV2080_CTRL_FIFO_DISABLE_CHANNELS_MAX_ENTRIES];
} NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS;

/* UVM */
typedef struct {
	NvU64 flags NV_ALIGN8;
	NV_STATUS rmStatus;
} UVM_INITIALIZE_PARAMS;

typedef struct {
	NvU8  gpu_uuid[16];
	NvBool numaEnabled;
	NvU8  _pad0[3];
	NvS32 numaNodeId;
	int   rmCtrlFd;
	NvHandle hClient;
	NvHandle hSmcPartRef;
	NV_STATUS rmStatus;
} UVM_REGISTER_GPU_PARAMS;

typedef struct {
	NvU8  gpuUuid[16];
	int   rmCtrlFd;
	NvHandle hClient;
	NvHandle hVaSpace;
	NV_STATUS rmStatus;
} UVM_REGISTER_GPU_VASPACE_PARAMS;

typedef struct {
	NvU8  gpuUuid[16];
	int   rmCtrlFd;
	NvHandle hClient;
	NvHandle hChannel;
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NV_STATUS rmStatus;
} UVM_REGISTER_CHANNEL_PARAMS;

typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NvU64 offset NV_ALIGN8;
	NvU8  perGpuAttributes[9216];    /* UvmGpuMappingAttributes[256], 36 bytes each */
	NvU64 gpuAttributesCount NV_ALIGN8;
	int   rmCtrlFd;
	NvHandle hClient;
	NvHandle hMemory;
	NV_STATUS rmStatus;
} UVM_MAP_EXTERNAL_ALLOCATION_PARAMS;

typedef struct {
	NvU64 base NV_ALIGN8;
	NV_STATUS rmStatus;
	NvU32 _pad0;
} UVM_FREE_PARAMS;

typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NV_STATUS rmStatus;
	NvU32 _pad0;
} UVM_CREATE_EXTERNAL_RANGE_PARAMS;

typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NvU8  gpuUuid[16];
	NV_STATUS rmStatus;
	NvU32 _pad0;
} UVM_UNMAP_EXTERNAL_PARAMS;

typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NvU8  destinationUuid[16];
	NvU32 flags;
	NvU32 _pad0;
	NvU64 semaphoreAddress NV_ALIGN8;
	NvU32 semaphorePayload;
	NvU32 cpuNumaNode;
	NvU64 userSpaceStart NV_ALIGN8;
	NvU64 userSpaceLength NV_ALIGN8;
	NV_STATUS rmStatus;
	NvU32 _pad1;
} UVM_MIGRATE_PARAMS;

typedef struct {
	int uvmFd;
	NV_STATUS rmStatus;
} UVM_MM_INITIALIZE_PARAMS;

/*
 * ==== BEGIN nvsim start-up block (layouts) ===============================
 * 595.45.04 layouts (pinned below, in the matching block of checks).  The
 * {index, data} list entries are NVXXXX_CTRL_XXX_INFO in every header.
 */
typedef NV2080_CTRL_FB_INFO NV2080_CTRL_GPU_INFO;
typedef NV2080_CTRL_FB_INFO NV2080_CTRL_GR_INFO;

/* ctrl0080gpu.h: classList points to numClasses NvU32s (NULL: count only). */
typedef struct {
	NvU32 numClasses;
	NvP64 classList;
} NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS;

/* ctrl2080gpu.h */
typedef struct {
	NvU32 engineType;
	NvU32 numClasses;
	NvP64 classList;
} NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS;

typedef struct {
	NvU32 gpuInfoListSize;
	NvP64 gpuInfoList;
} NV2080_CTRL_GPU_GET_INFO_PARAMS;

/* The list's length is the release's NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE
 * (64 in 535.288.01 ... 70 in 595.45.04): a prefix-compatible struct. */
typedef struct {
	NvU32 gpuInfoListSize;
	NV2080_CTRL_GPU_INFO gpuInfoList[NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE];
} NV2080_CTRL_GPU_GET_INFO_V2_PARAMS;

typedef struct {
	NvU32 index;
	NvU32 flags;
	NvU32 length;
	NvU8  data[NV2080_GPU_MAX_GID_LENGTH];
} NV2080_CTRL_GPU_GET_GID_INFO_PARAMS;

/* ctrl0000system.h */
typedef struct {
	NvU32 sizeOfStrings;
	NvP64 pDriverVersionBuffer;
	NvP64 pVersionBuffer;
	NvP64 pTitleBuffer;
	NvU32 changelistNumber;
	NvU32 officialChangelistNumber;
} NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS;

/*
 * 535.288.01 and 550.163.01 lack driverBranch (776 bytes): titleBuffer and
 * the changelist numbers are then at the same distance from the end.
 */
typedef struct {
	char  driverVersionBuffer[NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE];
	char  versionBuffer[NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE];
	char  driverBranch[NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE];
	char  titleBuffer[NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE];
	NvU32 changelistNumber;
	NvU32 officialChangelistNumber;
} NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS;

/* ctrl0080gr.h / ctrl2080gr.h */
typedef struct {
	NvU32 flags;
	NvU64 route NV_ALIGN8;
} NV2080_CTRL_GR_ROUTE_INFO;

typedef struct {
	NvU32 grInfoListSize;
	NvP64 grInfoList;
	NV2080_CTRL_GR_ROUTE_INFO grRouteInfo;
} NV2080_CTRL_GR_GET_INFO_PARAMS;

/* nvos.h: FERMI_VASPACE_A (535.288.01 ... 575.64.05: 48 bytes, no pasid). */
typedef struct {
	NvU32 index;
	NvV32 flags;
	NvU64 vaSize NV_ALIGN8;
	NvU64 vaStartInternal NV_ALIGN8;
	NvU64 vaLimitInternal NV_ALIGN8;
	NvU32 bigPageSize;
	NvU64 vaBase NV_ALIGN8;
	NvU32 pasid;
} NV_VASPACE_ALLOCATION_PARAMETERS;

/* nvos.h: FERMI_CONTEXT_SHARE_A */
typedef struct {
	NvHandle hVASpace;
	NvU32    flags;
	NvU32    subctxId;
} NV_CTXSHARE_ALLOCATION_PARAMETERS;

/* nvos.h: the 3D/compute/2D/inline-to-memory classes */
typedef struct {
	NvU32 version;
	NvU32 flags;
	NvU32 size;
	NvU32 caps;
} NV_GR_ALLOCATION_PARAMETERS;

/* clb0b5sw.h: the copy classes */
typedef struct {
	NvU32 version;
	NvU32 engineType;
} NVB0B5_ALLOCATION_PARAMETERS;

/*
 * cl0005.h: an event on hSrcResource of hParentClient (0: the allocating
 * client).  data is, for NV01_EVENT_OS_EVENT, the fd number the caller gave
 * NV_ESC_ALLOC_OS_EVENT: a key the driver looks up with the allocating
 * client's handle (osUserHandleToKernelPtr), never resolved as an fd.
 */
typedef struct {
	NvHandle hParentClient;
	NvHandle hSrcResource;
	NvV32    hClass;
	NvV32    notifyIndex;
	NvP64    data;
} NV0005_ALLOC_PARAMETERS;

/* nvos.h: NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through RM_ALLOC */
typedef struct {
	NvU32 type;
	NvU32 flags;
	NvU32 attr;
	NvU32 attr2;
	NvP64 descriptor;
	NvU64 limit NV_ALIGN8;
	NvU32 descriptorType;
	NvU32 tag;
} NV_OS_DESC_MEMORY_ALLOCATION_PARAMS;
/* ==== END nvsim start-up block (layouts) ================================ */

/* ----------------------------------------- the exported kernel RM API */
typedef struct {
	NvU32 op;
	union {
		NVOS00_PARAMETERS  free;
		NVOS02_PARAMETERS  allocMemory64;
		NVOS64_PARAMETERS  alloc;
		NVOS32_PARAMETERS *pVidHeapControl;
		NVOS33_PARAMETERS  mapMemory;
		NVOS34_PARAMETERS  unmapMemory;
		NVOS39_PARAMETERS  allocContextDma2;
		NVOS46_PARAMETERS  mapMemoryDma;
		NVOS47_PARAMETERS  unmapMemoryDma;
		NVOS54_PARAMETERS  control;
		NVOS55_PARAMETERS  dupObject;
		NVOS57_PARAMETERS  share;
	} params;
} nvidia_kernel_rmapi_ops_t;

#define NVIDIA_MAX_GPUS 32

typedef struct nvidia_stack_s nvidia_stack_t;
typedef nvidia_stack_t *nvidia_modeset_stack_ptr;

typedef struct {
	NvU32 gpu_id;
	struct {
		NvU32 domain;
		NvU8  bus, slot, function;
	} pci_info;
	NvBool needs_numa_setup;
	void *os_device_ptr;
} nv_gpu_info_t;

typedef struct {
	NvBool allow_write_combining;
} nvidia_modeset_system_info_t;

typedef struct {
	void (*suspend)(NvU32 gpu_id);
	void (*resume)(NvU32 gpu_id);
	void (*remove)(NvU32 gpu_id);
	void (*probe)(const nv_gpu_info_t *gpu_info);
} nvidia_modeset_callbacks_t;

/*
 * The table nvidia.ko fills for other kernel modules.  The caller presets
 * version_string to the driver version it was built for; on a mismatch the
 * driver overwrites version_string with its own and returns NV_ERR_GENERIC.
 */
typedef struct {
	const char *version_string;
	nvidia_modeset_system_info_t system_info;
	int   (*alloc_stack)(nvidia_modeset_stack_ptr *sp);
	void  (*free_stack)(nvidia_modeset_stack_ptr sp);
	NvU32 (*enumerate_gpus)(nv_gpu_info_t *gpu_info);
	int   (*open_gpu)(NvU32 gpu_id, nvidia_modeset_stack_ptr sp);
	void  (*close_gpu)(NvU32 gpu_id, nvidia_modeset_stack_ptr sp);
	void  (*op)(nvidia_modeset_stack_ptr sp, void *ops_cmd);
	int   (*set_callbacks)(const nvidia_modeset_callbacks_t *cb);
} nvidia_modeset_rm_ops_t;

#ifdef __KERNEL__
NV_STATUS nvidia_get_rm_ops(nvidia_modeset_rm_ops_t *rm_ops);
#endif

/* ====================================================== layout checks */
#define NVABI_SIZE(t, n)      NVABI_ASSERT(sizeof(t) == (n), "sizeof(" #t ") != " #n)
#define NVABI_OFF(t, f, n)    NVABI_ASSERT(offsetof(t, f) == (n), "offsetof(" #t ", " #f ") != " #n)

NVABI_SIZE(nv_ioctl_xfer_t, 16);
NVABI_OFF(nv_ioctl_xfer_t, cmd, 0);
NVABI_OFF(nv_ioctl_xfer_t, size, 4);
NVABI_OFF(nv_ioctl_xfer_t, ptr, 8);
NVABI_SIZE(nv_ioctl_card_info_t, 72);
NVABI_OFF(nv_ioctl_card_info_t, pci_info, 4);
NVABI_OFF(nv_ioctl_card_info_t, gpu_id, 16);
NVABI_OFF(nv_ioctl_card_info_t, interrupt_line, 20);
NVABI_OFF(nv_ioctl_card_info_t, reg_address, 24);
NVABI_OFF(nv_ioctl_card_info_t, reg_size, 32);
NVABI_OFF(nv_ioctl_card_info_t, fb_address, 40);
NVABI_OFF(nv_ioctl_card_info_t, fb_size, 48);
NVABI_OFF(nv_ioctl_card_info_t, minor_number, 56);
NVABI_OFF(nv_ioctl_card_info_t, dev_name, 60);
NVABI_SIZE(nv_ioctl_alloc_os_event_t, 16);
NVABI_SIZE(nv_ioctl_free_os_event_t, 16);
NVABI_SIZE(nv_ioctl_rm_api_version_t, 72);
NVABI_SIZE(nv_ioctl_register_fd_t, 4);
NVABI_SIZE(nv_ioctl_sys_params_t, 8);
NVABI_SIZE(nv_ioctl_numa_info_t, 560);
NVABI_SIZE(NV0005_ALLOC_PARAMETERS, 24);
NVABI_OFF(NV0005_ALLOC_PARAMETERS, hSrcResource, 4);
NVABI_OFF(NV0005_ALLOC_PARAMETERS, data, 16);
NVABI_OFF(nv_ioctl_numa_info_t, numa_mem_size, 24);
NVABI_OFF(nv_ioctl_numa_info_t, offline_addresses, 40);
NVABI_SIZE(nv_ioctl_wait_open_complete_t, 8);
NVABI_SIZE(nv_ioctl_status_code_t, 12);
NVABI_SIZE(nv_ioctl_export_to_dma_buf_fd_t, 2608);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, totalSize, 24);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, mappingType, 32);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, bAllowMmap, 33);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, handles, 36);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, offsets, 552);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, sizes, 1576);
NVABI_OFF(nv_ioctl_export_to_dma_buf_fd_t, status, 2600);

NVABI_SIZE(NVOS00_PARAMETERS, 16);
NVABI_OFF(NVOS00_PARAMETERS, hRoot, 0);
NVABI_OFF(NVOS00_PARAMETERS, hObjectParent, 4);
NVABI_OFF(NVOS00_PARAMETERS, hObjectOld, 8);
NVABI_OFF(NVOS00_PARAMETERS, status, 12);
NVABI_SIZE(NVOS02_PARAMETERS, 48);
NVABI_OFF(NVOS02_PARAMETERS, hRoot, 0);
NVABI_OFF(NVOS02_PARAMETERS, hObjectParent, 4);
NVABI_OFF(NVOS02_PARAMETERS, hObjectNew, 8);
NVABI_OFF(NVOS02_PARAMETERS, hClass, 12);
NVABI_OFF(NVOS02_PARAMETERS, flags, 16);
NVABI_OFF(NVOS02_PARAMETERS, pMemory, 24);
NVABI_OFF(NVOS02_PARAMETERS, limit, 32);
NVABI_OFF(NVOS02_PARAMETERS, status, 40);
NVABI_SIZE(nv_ioctl_nvos02_parameters_with_fd, 56);
NVABI_OFF(nv_ioctl_nvos02_parameters_with_fd, fd, 48);
NVABI_SIZE(NVOS05_PARAMETERS, 20);
NVABI_SIZE(NVOS21_PARAMETERS, 32);
NVABI_OFF(NVOS21_PARAMETERS, hRoot, 0);
NVABI_OFF(NVOS21_PARAMETERS, hObjectParent, 4);
NVABI_OFF(NVOS21_PARAMETERS, hObjectNew, 8);
NVABI_OFF(NVOS21_PARAMETERS, hClass, 12);
NVABI_OFF(NVOS21_PARAMETERS, pAllocParms, 16);
NVABI_OFF(NVOS21_PARAMETERS, paramsSize, 24);
NVABI_OFF(NVOS21_PARAMETERS, status, 28);
NVABI_SIZE(NVOS64_PARAMETERS, 48);
NVABI_OFF(NVOS64_PARAMETERS, hRoot, 0);
NVABI_OFF(NVOS64_PARAMETERS, hObjectParent, 4);
NVABI_OFF(NVOS64_PARAMETERS, hObjectNew, 8);
NVABI_OFF(NVOS64_PARAMETERS, hClass, 12);
NVABI_OFF(NVOS64_PARAMETERS, pAllocParms, 16);
NVABI_OFF(NVOS64_PARAMETERS, pRightsRequested, 24);
NVABI_OFF(NVOS64_PARAMETERS, paramsSize, 32);
NVABI_OFF(NVOS64_PARAMETERS, flags, 36);
NVABI_OFF(NVOS64_PARAMETERS, status, 40);
NVABI_SIZE(NVOS32_PARAMETERS, 184);
NVABI_OFF(NVOS32_PARAMETERS, hRoot, 0);
NVABI_OFF(NVOS32_PARAMETERS, hObjectParent, 4);
NVABI_OFF(NVOS32_PARAMETERS, function, 8);
NVABI_OFF(NVOS32_PARAMETERS, hVASpace, 12);
NVABI_OFF(NVOS32_PARAMETERS, ivcHeapNumber, 16);
NVABI_OFF(NVOS32_PARAMETERS, status, 20);
NVABI_OFF(NVOS32_PARAMETERS, total, 24);
NVABI_OFF(NVOS32_PARAMETERS, free, 32);
NVABI_OFF(NVOS32_PARAMETERS, data, 40);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.owner, 40);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.hMemory, 44);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.type, 48);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.flags, 52);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.attr, 56);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.size, 88);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.alignment, 96);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.offset, 104);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.limit, 112);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.address, 120);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.attr2, 144);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSize.numaNode, 152);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSizeRange.hMemory, 44);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSizeRange.flags, 52);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSizeRange.attr, 56);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocSizeRange.size, 80);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocTiledPitchHeight.hMemory, 44);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocTiledPitchHeight.flags, 52);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocTiledPitchHeight.attr, 64);
NVABI_OFF(NVOS32_PARAMETERS, data.AllocTiledPitchHeight.size, 88);
NVABI_OFF(NVOS32_PARAMETERS, data.Free.owner, 40);
NVABI_OFF(NVOS32_PARAMETERS, data.Free.hMemory, 44);
NVABI_OFF(NVOS32_PARAMETERS, data.Free.flags, 48);
NVABI_SIZE(NVOS33_PARAMETERS, 48);
NVABI_OFF(NVOS33_PARAMETERS, hClient, 0);
NVABI_OFF(NVOS33_PARAMETERS, hDevice, 4);
NVABI_OFF(NVOS33_PARAMETERS, hMemory, 8);
NVABI_OFF(NVOS33_PARAMETERS, offset, 16);
NVABI_OFF(NVOS33_PARAMETERS, length, 24);
NVABI_OFF(NVOS33_PARAMETERS, pLinearAddress, 32);
NVABI_OFF(NVOS33_PARAMETERS, status, 40);
NVABI_OFF(NVOS33_PARAMETERS, flags, 44);
NVABI_SIZE(nv_ioctl_nvos33_parameters_with_fd, 56);
NVABI_OFF(nv_ioctl_nvos33_parameters_with_fd, fd, 48);
NVABI_SIZE(NVOS34_PARAMETERS, 32);
NVABI_OFF(NVOS34_PARAMETERS, pLinearAddress, 16);
NVABI_OFF(NVOS34_PARAMETERS, status, 24);
NVABI_OFF(NVOS34_PARAMETERS, flags, 28);
NVABI_SIZE(NVOS46_PARAMETERS, 64);
NVABI_OFF(NVOS46_PARAMETERS, offset, 16);
NVABI_OFF(NVOS46_PARAMETERS, length, 24);
NVABI_OFF(NVOS46_PARAMETERS, flags, 32);
NVABI_OFF(NVOS46_PARAMETERS, dmaOffset, 48);
NVABI_OFF(NVOS46_PARAMETERS, status, 56);
NVABI_SIZE(NVOS47_PARAMETERS, 48);
NVABI_SIZE(NVOS54_PARAMETERS, 32);
NVABI_OFF(NVOS54_PARAMETERS, hClient, 0);
NVABI_OFF(NVOS54_PARAMETERS, hObject, 4);
NVABI_OFF(NVOS54_PARAMETERS, cmd, 8);
NVABI_OFF(NVOS54_PARAMETERS, flags, 12);
NVABI_OFF(NVOS54_PARAMETERS, params, 16);
NVABI_OFF(NVOS54_PARAMETERS, paramsSize, 24);
NVABI_OFF(NVOS54_PARAMETERS, status, 28);
NVABI_SIZE(NVOS55_PARAMETERS, 28);
NVABI_OFF(NVOS55_PARAMETERS, hClient, 0);
NVABI_OFF(NVOS55_PARAMETERS, hParent, 4);
NVABI_OFF(NVOS55_PARAMETERS, hObject, 8);
NVABI_OFF(NVOS55_PARAMETERS, hClientSrc, 12);
NVABI_OFF(NVOS55_PARAMETERS, hObjectSrc, 16);
NVABI_OFF(NVOS55_PARAMETERS, flags, 20);
NVABI_OFF(NVOS55_PARAMETERS, status, 24);
NVABI_SIZE(NVOS56_PARAMETERS, 40);
NVABI_SIZE(NVOS57_PARAMETERS, 24);
NVABI_SIZE(NVOS30_PARAMETERS, 56);
NVABI_SIZE(NVOS39_PARAMETERS, 56);
NVABI_SIZE(NV_MEMORY_ALLOCATION_PARAMS, 128);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, owner, 0);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, type, 4);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, flags, 8);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, width, 12);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, height, 16);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, pitch, 20);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, attr, 24);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, attr2, 28);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, format, 32);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, comprCovg, 36);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, zcullCovg, 40);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, rangeLo, 48);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, rangeHi, 56);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, size, 64);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, alignment, 72);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, offset, 80);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, limit, 88);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, address, 96);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, ctagOffset, 104);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, hVASpace, 108);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, internalflags, 112);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, tag, 116);
NVABI_OFF(NV_MEMORY_ALLOCATION_PARAMS, numaNode, 120);
NVABI_SIZE(NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS, 24);
NVABI_SIZE(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, 20);
NVABI_OFF(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, hObjectError, 0);
NVABI_OFF(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, hObjectEccError, 4);
NVABI_OFF(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, hVASpace, 8);
NVABI_OFF(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, engineType, 12);
NVABI_OFF(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS, bIsCallingContextVgpuPlugin, 16);
NVABI_SIZE(NV_CHANNEL_ALLOC_PARAMS, 368);
NVABI_OFF(NV_CHANNEL_ALLOC_PARAMS, hObjectError, 0);
NVABI_OFF(NV_CHANNEL_ALLOC_PARAMS, hContextShare, 24);
NVABI_OFF(NV_CHANNEL_ALLOC_PARAMS, hVASpace, 28);
NVABI_OFF(NV_CHANNEL_ALLOC_PARAMS, engineType, 128);
NVABI_SIZE(NV0000_ALLOC_PARAMETERS, 120);
NVABI_OFF(NV0000_ALLOC_PARAMETERS, pOsPidInfo, 112);
NVABI_SIZE(NV0080_ALLOC_PARAMETERS, 56);
NVABI_OFF(NV0080_ALLOC_PARAMETERS, deviceId, 0);
NVABI_OFF(NV0080_ALLOC_PARAMETERS, hClientShare, 4);
NVABI_SIZE(NV2080_ALLOC_PARAMETERS, 4);
NVABI_SIZE(NV2080_CTRL_FB_INFO, 8);
NVABI_SIZE(NV2080_CTRL_FB_GET_INFO_PARAMS, 16);
NVABI_OFF(NV2080_CTRL_FB_GET_INFO_PARAMS, fbInfoListSize, 0);
NVABI_OFF(NV2080_CTRL_FB_GET_INFO_PARAMS, fbInfoList, 8);
NVABI_SIZE(NV2080_CTRL_FB_GET_INFO_V2_PARAMS, 1028);
NVABI_OFF(NV2080_CTRL_FB_GET_INFO_V2_PARAMS, fbInfoList, 4);
NVABI_SIZE(NV0041_CTRL_GET_SURFACE_INFO_PARAMS, 16);
NVABI_SIZE(NV2080_CTRL_GPU_GET_PIDS_PARAMS, 3812);
NVABI_OFF(NV2080_CTRL_GPU_GET_PIDS_PARAMS, pidTblCount, 8);
NVABI_OFF(NV2080_CTRL_GPU_GET_PIDS_PARAMS, pidTbl, 12);
NVABI_SIZE(NV2080_CTRL_GPU_PID_INFO, 72);
NVABI_OFF(NV2080_CTRL_GPU_PID_INFO, result, 8);
NVABI_OFF(NV2080_CTRL_GPU_PID_INFO, data, 16);
NVABI_OFF(NV2080_CTRL_GPU_PID_INFO, smcSubscription, 64);
NVABI_SIZE(NV2080_CTRL_GPU_GET_PID_INFO_PARAMS, 14408);
NVABI_OFF(NV2080_CTRL_GPU_GET_PID_INFO_PARAMS, pidInfoList, 8);
NVABI_SIZE(NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS, 68);
NVABI_SIZE(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS, 32);
NVABI_SIZE(NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS, 268);
NVABI_SIZE(NV0000_CTRL_GPU_GET_ID_INFO_PARAMS, 40);
NVABI_OFF(NV0000_CTRL_GPU_GET_ID_INFO_PARAMS, deviceInstance, 8);
NVABI_OFF(NV0000_CTRL_GPU_GET_ID_INFO_PARAMS, szName, 16);
NVABI_SIZE(NV0000_CTRL_GPU_ATTACH_IDS_PARAMS, 132);
NVABI_OFF(NV0000_CTRL_GPU_ATTACH_IDS_PARAMS, failedId, 128);
NVABI_SIZE(NV0000_CTRL_GPU_DETACH_IDS_PARAMS, 128);
NVABI_SIZE(NV0000_CTRL_GPU_GET_DEVICE_IDS_PARAMS, 4);
NVABI_SIZE(NV0000_CTRL_GPU_ACTIVE_DEVICE, 12);
NVABI_SIZE(NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS, 3076);
NVABI_OFF(NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS, devices, 4);
NVABI_SIZE(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, 176);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, gpuCount, 128);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, p2pCaps, 132);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, p2pOptimalReadCEs, 136);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, p2pOptimalWriteCEs, 140);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, p2pCapsStatus, 144);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, busPeerIds, 160);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, busEgmPeerIds, 168);
NVABI_SIZE(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS, 8348);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS, gpuCount, 128);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS, p2pCapsStatus, 144);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS, busPeerIds, 156);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS, busEgmPeerIds, 4252);
NVABI_SIZE(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS, 1352);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS, gpuIdGrpA, 8);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS, gpuIdGrpB, 40);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS, p2pCaps, 72);
NVABI_SIZE(NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS, 4);
NVABI_SIZE(RS_SHARE_POLICY, 12);
NVABI_OFF(RS_SHARE_POLICY, accessMask, 4);
NVABI_OFF(RS_SHARE_POLICY, type, 8);
NVABI_OFF(RS_SHARE_POLICY, action, 10);
NVABI_SIZE(NV0000_CTRL_CLIENT_SET_INHERITED_SHARE_POLICY_PARAMS, 12);
NVABI_SIZE(NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS, 16);
NVABI_SIZE(NV83DE_ALLOC_PARAMETERS, 12);
NVABI_OFF(NV83DE_ALLOC_PARAMETERS, hAppClient, 4);
NVABI_OFF(NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS, data, 8);
NVABI_SIZE(NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO, 56);
NVABI_OFF(NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO, limit, 8);
NVABI_OFF(NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO, reserved, 16);
NVABI_SIZE(NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS, 904);
NVABI_OFF(NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS, fbRegion, 8);
NVABI_OFF(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS, deviceInstance, 8);
NVABI_OFF(NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS, gpuNameString, 4);
NVABI_SIZE(NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS, 4);
NVABI_SIZE(NVA06C_CTRL_TIMESLICE_PARAMS, 8);
NVABI_SIZE(NVA06C_CTRL_PREEMPT_PARAMS, 8);
NVABI_OFF(NVA06C_CTRL_PREEMPT_PARAMS, bWait, 0);
NVABI_OFF(NVA06C_CTRL_PREEMPT_PARAMS, bManualTimeout, 1);
NVABI_OFF(NVA06C_CTRL_PREEMPT_PARAMS, timeoutUs, 4);
NVABI_SIZE(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS, 3);
NVABI_SIZE(NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS, 4);
NVABI_SIZE(NVA06C_CTRL_GET_INFO_PARAMS, 4);
NVABI_SIZE(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, 536);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, bDisable, 0);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, numChannels, 4);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, bOnlyDisableScheduling, 8);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, bRewindGpPut, 9);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, pRunlistPreemptEvent, 16);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, hClientList, 24);
NVABI_OFF(NV2080_CTRL_FIFO_DISABLE_CHANNELS_PARAMS, hChannelList, 280);
NVABI_SIZE(UVM_INITIALIZE_PARAMS, 16);
NVABI_SIZE(UVM_REGISTER_GPU_PARAMS, 40);
NVABI_OFF(UVM_REGISTER_GPU_PARAMS, rmCtrlFd, 24);
NVABI_OFF(UVM_REGISTER_GPU_PARAMS, hClient, 28);
NVABI_OFF(UVM_REGISTER_GPU_PARAMS, hSmcPartRef, 32);
NVABI_OFF(UVM_REGISTER_GPU_PARAMS, rmStatus, 36);
NVABI_SIZE(UVM_REGISTER_GPU_VASPACE_PARAMS, 32);
NVABI_OFF(UVM_REGISTER_GPU_VASPACE_PARAMS, rmCtrlFd, 16);
NVABI_OFF(UVM_REGISTER_GPU_VASPACE_PARAMS, hClient, 20);
NVABI_OFF(UVM_REGISTER_GPU_VASPACE_PARAMS, hVaSpace, 24);
NVABI_SIZE(UVM_REGISTER_CHANNEL_PARAMS, 56);
NVABI_OFF(UVM_REGISTER_CHANNEL_PARAMS, rmCtrlFd, 16);
NVABI_OFF(UVM_REGISTER_CHANNEL_PARAMS, hClient, 20);
NVABI_OFF(UVM_REGISTER_CHANNEL_PARAMS, hChannel, 24);
NVABI_OFF(UVM_REGISTER_CHANNEL_PARAMS, rmStatus, 48);
NVABI_SIZE(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, 9264);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, base, 0);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, length, 8);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, offset, 16);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, perGpuAttributes, 24);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, gpuAttributesCount, 9240);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmCtrlFd, 9248);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hClient, 9252);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hMemory, 9256);
NVABI_OFF(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmStatus, 9260);
NVABI_SIZE(UVM_FREE_PARAMS, 16);
NVABI_SIZE(UVM_CREATE_EXTERNAL_RANGE_PARAMS, 24);
NVABI_SIZE(UVM_UNMAP_EXTERNAL_PARAMS, 40);
NVABI_OFF(UVM_UNMAP_EXTERNAL_PARAMS, gpuUuid, 16);
NVABI_OFF(UVM_UNMAP_EXTERNAL_PARAMS, rmStatus, 32);
NVABI_OFF(UVM_CREATE_EXTERNAL_RANGE_PARAMS, rmStatus, 16);
NVABI_OFF(UVM_FREE_PARAMS, base, 0);
NVABI_OFF(UVM_FREE_PARAMS, rmStatus, 8);
NVABI_SIZE(UVM_MIGRATE_PARAMS, 80);
NVABI_OFF(UVM_MIGRATE_PARAMS, base, 0);
NVABI_OFF(UVM_MIGRATE_PARAMS, length, 8);
NVABI_OFF(UVM_MIGRATE_PARAMS, destinationUuid, 16);
NVABI_SIZE(UVM_MM_INITIALIZE_PARAMS, 8);

/* ==== BEGIN nvsim start-up block (checks) ================================ */
NVABI_SIZE(NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS, 16);
NVABI_OFF(NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS, numClasses, 0);
NVABI_OFF(NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS, classList, 8);
NVABI_SIZE(NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS, 16);
NVABI_OFF(NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS, engineType, 0);
NVABI_OFF(NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS, numClasses, 4);
NVABI_OFF(NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS, classList, 8);
NVABI_SIZE(NV2080_CTRL_GPU_GET_INFO_PARAMS, 16);
NVABI_OFF(NV2080_CTRL_GPU_GET_INFO_PARAMS, gpuInfoListSize, 0);
NVABI_OFF(NV2080_CTRL_GPU_GET_INFO_PARAMS, gpuInfoList, 8);
NVABI_SIZE(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS, 564);
NVABI_OFF(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS, gpuInfoListSize, 0);
NVABI_OFF(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS, gpuInfoList, 4);
NVABI_SIZE(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, 268);
NVABI_OFF(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, index, 0);
NVABI_OFF(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, flags, 4);
NVABI_OFF(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, length, 8);
NVABI_OFF(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS, data, 12);
NVABI_SIZE(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, 40);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, sizeOfStrings, 0);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, pDriverVersionBuffer, 8);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, pVersionBuffer, 16);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, pTitleBuffer, 24);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, changelistNumber, 32);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS, officialChangelistNumber, 36);
NVABI_SIZE(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, 1032);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, driverVersionBuffer, 0);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, versionBuffer, 256);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, driverBranch, 512);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, titleBuffer, 768);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, changelistNumber, 1024);
NVABI_OFF(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS, officialChangelistNumber, 1028);
NVABI_SIZE(NV2080_CTRL_GR_ROUTE_INFO, 16);
NVABI_OFF(NV2080_CTRL_GR_ROUTE_INFO, route, 8);
NVABI_SIZE(NV2080_CTRL_GR_GET_INFO_PARAMS, 32);
NVABI_OFF(NV2080_CTRL_GR_GET_INFO_PARAMS, grInfoListSize, 0);
NVABI_OFF(NV2080_CTRL_GR_GET_INFO_PARAMS, grInfoList, 8);
NVABI_OFF(NV2080_CTRL_GR_GET_INFO_PARAMS, grRouteInfo, 16);
NVABI_SIZE(NV_VASPACE_ALLOCATION_PARAMETERS, 56);
NVABI_OFF(NV_VASPACE_ALLOCATION_PARAMETERS, index, 0);
NVABI_OFF(NV_VASPACE_ALLOCATION_PARAMETERS, flags, 4);
NVABI_OFF(NV_VASPACE_ALLOCATION_PARAMETERS, vaSize, 8);
NVABI_OFF(NV_VASPACE_ALLOCATION_PARAMETERS, bigPageSize, 32);
NVABI_OFF(NV_VASPACE_ALLOCATION_PARAMETERS, vaBase, 40);
NVABI_OFF(NV_VASPACE_ALLOCATION_PARAMETERS, pasid, 48);
NVABI_SIZE(NV_CTXSHARE_ALLOCATION_PARAMETERS, 12);
NVABI_OFF(NV_CTXSHARE_ALLOCATION_PARAMETERS, hVASpace, 0);
NVABI_OFF(NV_CTXSHARE_ALLOCATION_PARAMETERS, flags, 4);
NVABI_OFF(NV_CTXSHARE_ALLOCATION_PARAMETERS, subctxId, 8);
NVABI_SIZE(NV_GR_ALLOCATION_PARAMETERS, 16);
NVABI_SIZE(NVB0B5_ALLOCATION_PARAMETERS, 8);
NVABI_OFF(NVB0B5_ALLOCATION_PARAMETERS, engineType, 4);
NVABI_SIZE(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, 40);
NVABI_OFF(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, flags, 4);
NVABI_OFF(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, attr, 8);
NVABI_OFF(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, attr2, 12);
NVABI_OFF(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, descriptor, 16);
NVABI_OFF(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, limit, 24);
NVABI_OFF(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS, descriptorType, 32);
/* MAP/UNMAP_MEMORY_DMA members read at fixed offsets in every release
 * (dmaOffset and status of NVOS46, status of NVOS47: from the end). */
NVABI_OFF(NVOS46_PARAMETERS, hClient, 0);
NVABI_OFF(NVOS46_PARAMETERS, hDevice, 4);
NVABI_OFF(NVOS46_PARAMETERS, hDma, 8);
NVABI_OFF(NVOS46_PARAMETERS, hMemory, 12);
NVABI_OFF(NVOS47_PARAMETERS, hClient, 0);
NVABI_OFF(NVOS47_PARAMETERS, hDevice, 4);
NVABI_OFF(NVOS47_PARAMETERS, hDma, 8);
NVABI_OFF(NVOS47_PARAMETERS, hMemory, 12);
NVABI_OFF(NVOS47_PARAMETERS, flags, 16);
NVABI_OFF(NVOS47_PARAMETERS, dmaOffset, 24);
NVABI_OFF(NVOS47_PARAMETERS, status, 40);
/* ==== END nvsim start-up block (checks) ================================= */


#ifdef __KERNEL__
#include <linux/uaccess.h>
#include <linux/ioctl.h>

/*
 * The escape an ioctl on a /dev/nvidia* node carries, read as the driver
 * reads it: the command's own number and size, or those inside an
 * NV_ESC_IOCTL_XFER_CMD wrapper (NV_IOCTL_XFER_VALID).  Shared by the
 * simulator and the mediator, so both unwrap exactly alike.
 *
 * Return: 0; -EINVAL for a malformed wrapper or an empty payload; -EFAULT
 * for an unreadable wrapper.
 */
static inline int nv_ioctl_unwrap(unsigned int cmd, unsigned long arg,
				  u32 *nr, u32 *size, void __user **uptr)
{
	nv_ioctl_xfer_t x;

	*nr = _IOC_NR(cmd);
	*size = _IOC_SIZE(cmd);
	*uptr = (void __user *)arg;
	if (*nr == NV_ESC_IOCTL_XFER_CMD) {
		if (*size != sizeof(x))
			return -EINVAL;
		if (copy_from_user(&x, *uptr, sizeof(x)))
			return -EFAULT;
		if (!NV_IOCTL_XFER_VALID(x.cmd, x.size))
			return -EINVAL;
		*nr = x.cmd;
		*size = x.size;
		*uptr = u64_to_user_ptr(x.ptr);
	}
	return *size ? 0 : -EINVAL;
}
#endif

#endif /* VGPU_NVABI_H */
