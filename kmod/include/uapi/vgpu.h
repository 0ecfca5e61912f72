/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/* Generated from kmod/netlink/vgpu.yaml by tools/ynl_gen.py: do not edit (make generate). */
/*
 * vgpu.h - the control API of vgpu.ko: a generic-netlink family.
 *
 * This header is generated from kmod/netlink/vgpu.yaml (make generate), the
 * API's one source of truth; the Python client (vgpu/abi/uapi.py) takes its
 * values from the same file, and tests/host/test_uapi.py compiles a program
 * printing every value defined here and compares.
 *
 * Family "vgpu", version VGPU_GENL_VERSION.  Every command needs
 * CAP_NET_ADMIN (GENL_ADMIN_PERM); attributes are validated strictly (unknown
 * attributes and unknown flag bits are refused with -EINVAL and an extack
 * message naming the attribute).
 *
 * Commands:
 *
 *   VGPU_CMD_SLICE_NEW   create a slice.  Required: VGPU_A_SLICE_ID (u32, not
 *                        0), VGPU_A_SLICE_GPUS (nested, at least one
 *                        VGPU_A_GPU nest, each with VGPU_GPU_A_REAL_MINOR and
 *                        VGPU_GPU_A_MEM_LIMIT).  Optional: VGPU_A_SLICE_NAME,
 *                        VGPU_A_SLICE_UVM_POLICY, VGPU_A_SLICE_FLAGS,
 *                        VGPU_A_SLICE_CGROUP_FD, VGPU_A_SLICE_MAX_CHANNELS.
 *                        -EEXIST if the id is taken, -ENODEV if a real device
 *                        node is missing, -E2BIG past VGPU_MAX_SLICE_GPUS.
 *                        The reply is the new slice, as SLICE_GET answers.
 *   VGPU_CMD_SLICE_SET   change a slice: VGPU_A_SLICE_ID plus any of
 *                        VGPU_A_SLICE_GPUS (nests name GPUs by
 *                        VGPU_GPU_A_INDEX, the container's numbering, and
 *                        carry a new VGPU_GPU_A_MEM_LIMIT) and
 *                        VGPU_A_SLICE_UVM_POLICY, VGPU_A_SLICE_CGROUP_FD
 *                        (rebinds the slice) and VGPU_A_SLICE_MAX_CHANNELS.
 *                        A limit (or channel cap) below current use is
 *                        accepted: new allocations (channels) are refused
 *                        until use falls below it.
 *   VGPU_CMD_SLICE_DEL   destroy a slice: VGPU_A_SLICE_ID, optional
 *                        VGPU_A_SLICE_FLAGS with VGPU_SLICE_F_FORCE.  -EBUSY
 *                        while files are open, unless forced (then the slice
 *                        is unlinked at once: its nodes stop opening, open
 *                        files keep working until closed).
 *   VGPU_CMD_SLICE_GET   one slice (doit, by VGPU_A_SLICE_ID) or all (dump).
 *   VGPU_CMD_EVENT       only sent, on the "events" multicast group.
 *   VGPU_CMD_SCHED_SET   a real GPU's scheduler: VGPU_A_SCHED_REAL_MINOR plus
 *                        any of VGPU_A_SCHED_PERIOD_US, VGPU_A_SCHED_LAYERS.
 *                        The reply is the scheduler, as SCHED_GET answers;
 *                        -ENODEV if the driver has no GPU at that minor.
 *                        Out-of-range values: -ERANGE (period), unknown
 *                        layer bits: -EINVAL, each with an extack message.
 *   VGPU_CMD_SCHED_GET   one GPU's scheduler (doit, by VGPU_A_SCHED_REAL_MINOR;
 *                        -ENOENT if it has none) or all (dump).  Replies carry
 *                        REAL_MINOR, PERIOD_US, LAYERS, SWITCHES and CPU_NS.
 *   VGPU_CMD_AUDIT_GET   a slice's audit record (dump only; the request must
 *                        carry VGPU_A_SLICE_ID, -ENOENT if no such slice).
 *                        Each message: VGPU_A_SLICE_ID, VGPU_A_SLICE_AUDIT,
 *                        VGPU_A_AUDIT_DROPPED and a VGPU_A_AUDIT nest of
 *                        VGPU_A_AUDIT_ENTRY nests (VGPU_AUDIT_A_*), one per
 *                        escape, class, control or UVM command recorded.
 *   VGPU_CMD_TRACE       only sent, on the "trace" multicast group: one call
 *                        of a traced slice (see Tracing below).
 *
 * Audit (SLICE_NEW and SLICE_SET): VGPU_A_SLICE_AUDIT (u8, 0 or 1) puts a
 * slice in audit mode: an item the driver release's policy refuses, or that
 * vgpu.ko does not implement yet, is forwarded as the caller made it (the
 * top-level struct on a call page, at the caller's privilege; what it
 * points to is read by the driver from the caller's memory, so audit mode
 * is for a trusted workload on a trial node, not for isolation), and every
 * item the slice's processes use is recorded with a count and the policy's
 * verdict.  Out of audit mode, refusals and what the allow-list lets
 * through are recorded.  VGPU_A_SLICE_ALLOW (nested VGPU_A_ALLOW u64
 * entries, (enum vgpu_audit_kind << 32) | number, at most VGPU_MAX_ALLOW
 * entries; duplicates count once) replaces the slice's allow-list: items
 * the policy refuses that this slice forwards as audit mode does, without
 * the rest of audit mode (an operator's profile extension).  The record
 * lives as long as the slice and keeps at most VGPU_MAX_AUDIT_ENTRIES
 * items; calls of items past that are counted in VGPU_A_AUDIT_DROPPED.
 * Replies carry VGPU_A_SLICE_AUDIT and VGPU_A_SLICE_ALLOW_COUNT.
 *
 * Compute (SLICE_NEW and SLICE_SET, in a GPU nest): VGPU_GPU_A_COMPUTE_POLICY,
 * VGPU_GPU_A_COMPUTE_BP and VGPU_GPU_A_PRIORITY; see enum vgpu_compute_policy.
 * Replies add per GPU VGPU_GPU_A_GPU_TIME_NS, _TSGS, _CHANNELS, _PAUSED and
 * _DOORBELL_TRAPS.  On SET a GPU nest may carry only compute attributes (the
 * memory limit then stays).
 *
 * Binding a slice to a cgroup: VGPU_A_SLICE_CGROUP_FD is a file descriptor,
 * in the sending process's fd table, of a cgroup v2 directory (opened
 * O_RDONLY|O_DIRECTORY; the caller may close it once the reply came).  The
 * slice keeps a reference to that cgroup until it is freed or rebound.  An
 * open of any node of a bound slice by a task whose cgroup v2 is neither
 * that cgroup nor one of its descendants fails with -EPERM (a ratelimited
 * log line names the slice and the pid); files already open keep working.
 * A slice without a cgroup has no such check.  An fd that is not a cgroup v2
 * directory (or not open) is refused with -EBADF and an extack message.
 * Replies carry VGPU_A_SLICE_CGROUP_ID (the cgroup's id, which is the inode
 * number of its directory in cgroupfs; 0 for an unbound slice).
 *
 * Tracing (SLICE_NEW and SLICE_SET): VGPU_A_SLICE_TRACE (u8, 0 or 1).  While
 * it is 1 and the "trace" group has a listener, every open, close, ioctl
 * and mmap of the slice's nodes is sent on that group as a VGPU_CMD_TRACE
 * message: VGPU_A_SLICE_ID and a VGPU_A_TRACE nest of VGPU_TRACE_A_*.  The
 * parameters are copied from the caller's memory by the trace itself, once
 * before the call is mediated and once after it returned: the record is what
 * the caller presented and got back, not what vgpu.ko checked (a sibling
 * thread can change the memory between the copies; a trace decides nothing).
 * The lists RM_CONTROL's parameters point to (the release's table names
 * them, as for vgpu.ko's own copies) come in VGPU_TRACE_A_LIST nests.  Each
 * blob is cut at VGPU_TRACE_MAX_PARAMS bytes, and all of a record's blobs
 * together at VGPU_TRACE_MAX_BLOBS (a netlink attribute, the VGPU_A_TRACE
 * nest, holds less than 64 KiB), before and after alike; a cut record
 * carries VGPU_TRACE_F_TRUNCATED.
 * VGPU_TRACE_A_SEQ counts the slice's records from 1, so a listener that
 * missed some (its socket overran) sees the gap.  With no listener, or with
 * the attribute 0, a call costs one test.  Replies carry VGPU_A_SLICE_TRACE.
 */
#ifndef _UAPI_VGPU_H
#define _UAPI_VGPU_H

#define VGPU_GENL_NAME          "vgpu"
#define VGPU_GENL_VERSION       1
#define VGPU_GENL_MCGRP_EVENTS  "events"
#define VGPU_GENL_MCGRP_TRACE   "trace"

/* Limits. */
#define VGPU_MAX_SLICE_GPUS     8
#define VGPU_MAX_ALLOW          4096        /* allow-list entries per slice */
#define VGPU_MAX_AUDIT_ENTRIES  4096        /* audit record items per slice */
#define VGPU_SLICE_NAME_MAX     128         /* including the terminating NUL */
#define VGPU_TRACE_MAX_PARAMS   16384       /* bytes of each parameter blob of a trace record */
#define VGPU_TRACE_MAX_BLOBS    57344       /* bytes of all the blobs of one trace record */

/*
 * Minors: each slice owns VGPU_MINORS_PER_SLICE consecutive minors of the
 * module's dynamic major, starting at its base minor:
 *   base + VGPU_MINOR_CTL        the slice's nvidiactl
 *   base + VGPU_MINOR_UVM        the slice's nvidia-uvm
 *   base + VGPU_MINOR_GPU0 + i   the slice's nvidia<i>, i < nr GPUs
 */
#define VGPU_MINORS_PER_SLICE   16
#define VGPU_MINOR_CTL          0
#define VGPU_MINOR_UVM          1
#define VGPU_MINOR_GPU0         2

enum vgpu_audit_kind {
	VGPU_AUDIT_ESCAPE,
	VGPU_AUDIT_CLASS,
	VGPU_AUDIT_CONTROL,
	VGPU_AUDIT_UVM,
	__VGPU_AUDIT_KIND_MAX,
};

/*
 * The policy table's verdicts (kmod/vgpu/policy/README.md); NOT_IMPLEMENTED: the
 * table lets it through, but vgpu.ko has no handler for it yet.
 */
enum vgpu_audit_verdict {
	VGPU_AUDIT_FORWARD,
	VGPU_AUDIT_REWRITE,
	VGPU_AUDIT_VIRTUALISE,
	VGPU_AUDIT_REFUSE,
	VGPU_AUDIT_NOT_IMPLEMENTED,
	__VGPU_AUDIT_VERDICT_MAX,
};

enum vgpu_trace_op {
	VGPU_TRACE_OPEN,
	VGPU_TRACE_CLOSE,
	VGPU_TRACE_IOCTL,
	VGPU_TRACE_MMAP,
	__VGPU_TRACE_OP_MAX,
};

/* VGPU_TRACE_A_FLAGS */
#define VGPU_TRACE_F_TRUNCATED  (1U << 0)   /* a blob was cut at VGPU_TRACE_MAX_PARAMS */
#define VGPU_TRACE_F_UNREADABLE (1U << 1)   /* the caller's parameters could not be copied */
#define VGPU_TRACE_F_XFER       (1U << 2)   /* the call came in an NV_ESC_IOCTL_XFER_CMD */

/* VGPU_TRACE_A_PROT */
#define VGPU_TRACE_PROT_READ    (1U << 0)
#define VGPU_TRACE_PROT_WRITE   (1U << 1)
#define VGPU_TRACE_PROT_SHARED  (1U << 2)

/* VGPU_A_SLICE_FLAGS */
#define VGPU_SLICE_F_FORCE      (1U << 0)   /* SLICE_DEL: even with open files */
#define VGPU_SLICE_F_ALL        (VGPU_SLICE_F_FORCE)

/* What happens to managed (UVM) memory mapped by a slice. */
enum vgpu_uvm_policy {
	VGPU_UVM_COUNT,             /* charge the mapped length against GPU 0's quota */
	VGPU_UVM_REFUSE,            /* refuse managed mappings */
	__VGPU_UVM_POLICY_MAX,
};

/*
 * Compute slicing (docs/compute.md 2-4).  Per slice and GPU: a policy, a
 * percentage in basis points and a priority.  NONE: never paused.  FIXED:
 * at most bp/10000 of each scheduling period.  SHARE: a weight, work
 * conserving.  BURST: a floor of bp/10000, served before share slices, and
 * anything left over.  A policy other than NONE needs VGPU_GPU_A_COMPUTE_BP.
 */
enum vgpu_compute_policy {
	VGPU_COMPUTE_NONE,
	VGPU_COMPUTE_SHARE,
	VGPU_COMPUTE_FIXED,
	VGPU_COMPUTE_BURST,
	__VGPU_COMPUTE_POLICY_MAX,
};
#define VGPU_COMPUTE_BP_MAX     10000

enum vgpu_priority {
	VGPU_PRIORITY_LOW,
	VGPU_PRIORITY_HIGH,
	__VGPU_PRIORITY_MAX,
};

/*
 * The per-GPU scheduler (VGPU_CMD_SCHED_SET / VGPU_CMD_SCHED_GET; GET by
 * VGPU_A_SCHED_REAL_MINOR or a dump of every GPU that has a scheduler).
 * SET creates the GPU's scheduler if it has none yet; attributes it does
 * not carry keep their values.
 */
#define VGPU_SCHED_PERIOD_MIN_US 1000
#define VGPU_SCHED_PERIOD_MAX_US 10000000
#define VGPU_SCHED_PERIOD_DEFAULT_US 100000

/* VGPU_A_SCHED_LAYERS: the mechanisms that hold a slice off the GPU. */
#define VGPU_SCHED_L_TSG        (1U << 0)   /* GPFIFO_SCHEDULE off + PREEMPT on its TSGs */
#define VGPU_SCHED_L_DOORBELL   (1U << 1)   /* write-protect its usermode (doorbell) mappings */
#define VGPU_SCHED_L_ALL        (VGPU_SCHED_L_TSG | VGPU_SCHED_L_DOORBELL)

enum vgpu_event {
	VGPU_EVENT_UNSPEC,
	VGPU_EVENT_ALLOC_REFUSED,   /* an FB allocation was refused over quota */
	VGPU_EVENT_SLICE_EMPTIED,   /* the last open file of a slice closed */
	VGPU_EVENT_DEVICE_OPENED,   /* a process opened one of the slice's nodes */
	VGPU_EVENT_SLICE_QUARANTINED, /* a call's parameter page was unmapped while the driver ran (only a hostile process does that): the slice refuses every call and open until it is deleted; pid: the caller */
	__VGPU_EVENT_MAX,
};

enum vgpu_cmd {
	VGPU_CMD_UNSPEC,
	VGPU_CMD_SLICE_NEW,
	VGPU_CMD_SLICE_SET,
	VGPU_CMD_SLICE_DEL,
	VGPU_CMD_SLICE_GET,
	VGPU_CMD_EVENT,
	VGPU_CMD_SCHED_SET,
	VGPU_CMD_SCHED_GET,
	VGPU_CMD_AUDIT_GET,
	VGPU_CMD_TRACE,
	__VGPU_CMD_MAX,
};
#define VGPU_CMD_MAX (__VGPU_CMD_MAX - 1)

/*
 * Attribute enums (enum vgpu_*attr): the comment of every member but
 * *_UNSPEC starts with the attribute's type, one of
 *   u8, u32, u64              the netlink integer of that size
 *   s32 (sent as u32)         a signed value put as a u32
 *   binary                    bytes (nla_put)
 *   NUL-terminated string     NLA_NUL_STRING
 *   nested: NAME entries      a nest of the enum that has member NAME
 *   nested: PREFIX*           a nest of the enum whose members are PREFIX*
 *   pad                       nla_put_u64_64bit's alignment attribute
 * followed by the end of the comment or by ",", ":", ";" or " ".
 * tests/host/test_uapi.py parses these and checks them against the kernel's
 * policies and nla_put/nla_get calls and against vgpu/vgpuko/messages.py's types;
 * the spec (kmod/netlink/vgpu.yaml) states each once.
 */

/* Top-level attributes. */
enum vgpu_attr {
	VGPU_A_UNSPEC,
	VGPU_A_SLICE_ID,            /* u32, not 0 */
	VGPU_A_SLICE_NAME,          /* NUL-terminated string, e.g. a container id */
	VGPU_A_SLICE_FLAGS,         /* u32, VGPU_SLICE_F_* */
	VGPU_A_SLICE_UVM_POLICY,    /* u32, enum vgpu_uvm_policy */
	VGPU_A_SLICE_GPUS,          /* nested: VGPU_A_GPU entries */
	VGPU_A_SLICE_MAJOR,         /* u32, reply only */
	VGPU_A_SLICE_BASE_MINOR,    /* u32, reply only */
	VGPU_A_SLICE_OPEN_FILES,    /* u32, reply only */
	VGPU_A_SLICE_PIDS,          /* nested: VGPU_A_PID u32 entries (host tgids), reply only */
	VGPU_A_SLICE_UVM_MAPPED,    /* u64, bytes of managed ranges mapped, reply only */
	VGPU_A_EVENT_TYPE,          /* u32, enum vgpu_event, events only */
	VGPU_A_EVENT_PID,           /* u32, events only */
	VGPU_A_EVENT_GPU,           /* u32, container's GPU index, events only */
	VGPU_A_EVENT_SIZE,          /* u64, bytes asked, events only */
	VGPU_A_PAD,                 /* pad: alignment for nla_put_u64_64bit */
	VGPU_A_SLICE_CGROUP_FD,     /* u32, fd of a cgroup v2 directory (sender's fd table); NEW, SET */
	VGPU_A_SLICE_CGROUP_ID,     /* u64, the bound cgroup's id (0: none), reply only */
	VGPU_A_SCHED_REAL_MINOR,    /* u32, the real GPU's minor; SCHED_SET, SCHED_GET */
	VGPU_A_SCHED_PERIOD_US,     /* u32, VGPU_SCHED_PERIOD_MIN_US..MAX_US; SCHED_SET */
	VGPU_A_SCHED_LAYERS,        /* u32, VGPU_SCHED_L_* flags; SCHED_SET */
	VGPU_A_SCHED_SWITCHES,      /* u64, slot changes so far, reply only */
	VGPU_A_SCHED_CPU_NS,        /* u64, the scheduler's own CPU time, reply only */
	VGPU_A_SLICE_MAX_CHANNELS,  /* u32, channels the slice may hold on each of its GPUs (0: no cap); NEW, SET; replies carry it */
	VGPU_A_SLICE_QUARANTINED,   /* u8, reply only: 1 once a call of the slice broke (see VGPU_EVENT_SLICE_QUARANTINED) */
	VGPU_A_SLICE_AUDIT,         /* u8, 0 or 1: audit mode; NEW, SET; replies carry it */
	VGPU_A_SLICE_ALLOW,         /* nested: VGPU_A_ALLOW entries, the allow-list; NEW, SET */
	VGPU_A_SLICE_ALLOW_COUNT,   /* u32, entries of the allow-list, reply only */
	VGPU_A_AUDIT,               /* nested: VGPU_A_AUDIT_ENTRY entries, AUDIT_GET replies only */
	VGPU_A_AUDIT_DROPPED,       /* u64, calls not recorded (record full), AUDIT_GET replies only */
	VGPU_A_SLICE_TRACE,         /* u8, 0 or 1: send the slice's calls on the "trace" group; NEW, SET; replies carry it */
	VGPU_A_TRACE,               /* nested: VGPU_TRACE_A_*, VGPU_CMD_TRACE only */
	VGPU_A_SLICE_PIDS_TRUNCATED, /* u8, reply only: 1 when a dump cut VGPU_A_SLICE_PIDS short (the slice alone did not fit a message) */
	__VGPU_A_MAX,
};
#define VGPU_A_MAX (__VGPU_A_MAX - 1)

/* Entries of the VGPU_A_SLICE_GPUS and VGPU_A_SLICE_PIDS nests. */
enum vgpu_list_attr {
	VGPU_A_LIST_UNSPEC,
	VGPU_A_GPU,                 /* nested: VGPU_GPU_A_* */
	VGPU_A_PID,                 /* u32 */
	VGPU_A_ALLOW,               /* u64: (enum vgpu_audit_kind << 32) | number */
	VGPU_A_AUDIT_ENTRY,         /* nested: VGPU_AUDIT_A_*, reply only */
	__VGPU_A_LIST_MAX,
};
#define VGPU_A_LIST_MAX (__VGPU_A_LIST_MAX - 1)

/* Attributes of one GPU of a slice. */
enum vgpu_gpu_attr {
	VGPU_GPU_A_UNSPEC,
	VGPU_GPU_A_INDEX,           /* u32, the container's GPU number (0..); SET names GPUs by it */
	VGPU_GPU_A_REAL_MINOR,      /* u32, minor of the real /dev/nvidiaN; NEW */
	VGPU_GPU_A_MEM_LIMIT,       /* u64, bytes of FB the slice may hold on this GPU */
	VGPU_GPU_A_MEM_USED,        /* u64, reply only */
	VGPU_GPU_A_MEM_PEAK,        /* u64, reply only */
	VGPU_GPU_A_ALLOCS,          /* u64, live FB allocations, reply only */
	VGPU_GPU_A_REFUSALS,        /* u64, allocations refused over quota, reply only */
	VGPU_GPU_A_MINOR,           /* u32, the virtual node's minor, reply only */
	VGPU_GPU_A_GPU_ID,          /* u32, the driver's gpu_id (CARD_INFO); NEW, optional: by default the id of the GPU enumerated at that minor */
	VGPU_GPU_A_PAD,             /* pad: alignment for nla_put_u64_64bit */
	VGPU_GPU_A_COMPUTE_POLICY,  /* u32, enum vgpu_compute_policy; NEW, SET (default NONE) */
	VGPU_GPU_A_COMPUTE_BP,      /* u32, basis points 1..VGPU_COMPUTE_BP_MAX: the fixed cap, the burst floor or the share weight; NEW, SET */
	VGPU_GPU_A_PRIORITY,        /* u32, enum vgpu_priority; NEW, SET (default LOW) */
	VGPU_GPU_A_GPU_TIME_NS,     /* u64, time granted while it wanted the GPU, reply only */
	VGPU_GPU_A_TSGS,            /* u32, live TSGs (a bare channel counts as one), reply only */
	VGPU_GPU_A_CHANNELS,        /* u32, live channels, reply only */
	VGPU_GPU_A_PAUSED,          /* u32, 1 while the slice's TSGs are off the runlist, reply only */
	VGPU_GPU_A_DOORBELL_TRAPS,  /* u64, doorbell writes trapped while paused, reply only */
	__VGPU_GPU_A_MAX,
};
#define VGPU_GPU_A_MAX (__VGPU_GPU_A_MAX - 1)

/* Attributes of one VGPU_A_AUDIT_ENTRY (all reply only). */
enum vgpu_audit_attr {
	VGPU_AUDIT_A_UNSPEC,
	VGPU_AUDIT_A_KIND,          /* u8, enum vgpu_audit_kind */
	VGPU_AUDIT_A_NUMBER,        /* u32: escape nr, class, control cmd, UVM cmd */
	VGPU_AUDIT_A_VERDICT,       /* u8, enum vgpu_audit_verdict: the policy's */
	VGPU_AUDIT_A_CALLS,         /* u64, calls recorded */
	VGPU_AUDIT_A_REFUSED,       /* u64, of which refused (policy, or not implemented) */
	VGPU_AUDIT_A_LET_THROUGH,   /* u64, of which forwarded by audit mode or the allow-list */
	VGPU_AUDIT_A_PAD,           /* pad: alignment for nla_put_u64_64bit */
	__VGPU_AUDIT_A_MAX,
};
#define VGPU_AUDIT_A_MAX (__VGPU_AUDIT_A_MAX - 1)

/* Attributes of a VGPU_A_TRACE nest (VGPU_CMD_TRACE messages only). */
enum vgpu_trace_attr {
	VGPU_TRACE_A_UNSPEC,
	VGPU_TRACE_A_SEQ,           /* u64, the slice's record number, from 1 */
	VGPU_TRACE_A_TIME_NS,       /* u64, CLOCK_MONOTONIC at the call's start */
	VGPU_TRACE_A_DURATION_NS,   /* u64, the call's time in vgpu.ko and the driver */
	VGPU_TRACE_A_PID,           /* u32, the caller's host tgid */
	VGPU_TRACE_A_TID,           /* u32, the caller's host tid */
	VGPU_TRACE_A_FILE,          /* u64, the open file's number: unique while the module is loaded */
	VGPU_TRACE_A_NODE,          /* u32, the node's minor relative to the slice's base (VGPU_MINOR_*) */
	VGPU_TRACE_A_OP,            /* u8, enum vgpu_trace_op */
	VGPU_TRACE_A_RET,           /* s32 (sent as u32): the call's return value, 0 or -errno */
	VGPU_TRACE_A_FLAGS,         /* u32, VGPU_TRACE_F_* */
	VGPU_TRACE_A_NR,            /* u32, IOCTL: the escape number (an XFER's inner one), or the UVM command */
	VGPU_TRACE_A_SIZE,          /* u32, IOCTL: the parameters' size (the UVM release table's for UVM) */
	VGPU_TRACE_A_ITEM_KIND,     /* u8, IOCTL: enum vgpu_audit_kind of the item the policy judged */
	VGPU_TRACE_A_ITEM,          /* u32, IOCTL: escape nr, class, control cmd or UVM command */
	VGPU_TRACE_A_VERDICT,       /* u8, IOCTL: the release policy's enum vgpu_audit_verdict for the item (REFUSE for an item the table lacks) */
	VGPU_TRACE_A_ARGS_IN,       /* binary, IOCTL: the parameters before the call */
	VGPU_TRACE_A_ARGS_OUT,      /* binary, IOCTL: the parameters after it */
	VGPU_TRACE_A_PARAMS_PTR,    /* u64, IOCTL: RM_CONTROL's params / RM_ALLOC's pAllocParms */
	VGPU_TRACE_A_PARAMS_IN,     /* binary: what that pointer named before the call */
	VGPU_TRACE_A_PARAMS_OUT,    /* binary: and after it */
	VGPU_TRACE_A_FD_OFFSET,     /* u32, IOCTL: offset in the parameters of a file descriptor ... */
	VGPU_TRACE_A_FD_FILE,       /* u64, ... that named this file (a VGPU_TRACE_A_FILE of the slice) */
	VGPU_TRACE_A_ADDR,          /* u64, MMAP: the mapping's start */
	VGPU_TRACE_A_LENGTH,        /* u64, MMAP: its length */
	VGPU_TRACE_A_OFFSET,        /* u64, MMAP: the file offset in bytes */
	VGPU_TRACE_A_PROT,          /* u32, MMAP: VGPU_TRACE_PROT_* */
	VGPU_TRACE_A_OPEN_FLAGS,    /* u32, OPEN: the file's O_* flags */
	VGPU_TRACE_A_PAD,           /* pad: alignment for nla_put_u64_64bit */
	VGPU_TRACE_A_LIST,          /* nested: VGPU_TRACE_LIST_A_*, one embedded list; repeated; IOCTL */
	__VGPU_TRACE_A_MAX,
};
#define VGPU_TRACE_A_MAX (__VGPU_TRACE_A_MAX - 1)

/* Attributes of a VGPU_TRACE_A_LIST nest. */
enum vgpu_trace_list_attr {
	VGPU_TRACE_LIST_A_UNSPEC,
	VGPU_TRACE_LIST_A_OFFSET,   /* u32, where its pointer lies in the pointed-to params */
	VGPU_TRACE_LIST_A_PTR,      /* u64, the pointer */
	VGPU_TRACE_LIST_A_IN,       /* binary: what it named before the call */
	VGPU_TRACE_LIST_A_OUT,      /* binary: and after it */
	VGPU_TRACE_LIST_A_PAD,      /* pad: alignment for nla_put_u64_64bit */
	__VGPU_TRACE_LIST_A_MAX,
};
#define VGPU_TRACE_LIST_A_MAX (__VGPU_TRACE_LIST_A_MAX - 1)

#endif /* _UAPI_VGPU_H */
