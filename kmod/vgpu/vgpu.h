/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vgpu.h - internal interfaces of vgpu.ko, the mediator.
 *
 * Locking, in the order it nests:
 *
 *   vgpu_slices_lock (mutex)  the slice registry (ids, base minors), slice
 *                             creation/removal, netlink changes of a slice.
 *   vgpu_scheds_lock (mutex)  the list of per-GPU schedulers (sched.c).
 *   vgpu_sched.lock (mutex)   one GPU's scheduler: its members, the slot,
 *                             each member's used time and compute setting.
 *   vgpu_client.lock (mutex)  every kernel-path RM call on one client and
 *                             the client's part of the object table; no
 *                             other client lock is taken inside it.
 *   vgpu_gpu.tlock (mutex)    one slice GPU's TSGs, channels, USERD maps and
 *                             paused state; held across the RM scheduling
 *                             calls on those TSGs (GPFIFO_SCHEDULE, PREEMPT
 *                             with bWait, which sleeps) so that a free path
 *                             (vgpu_client.lock -> tlock) cannot drop a TSG
 *                             while the scheduler talks to it.  The
 *                             scheduler takes tlock under vgpu_sched.lock but
 *                             never a client lock: vgpu_client.lock and
 *                             vgpu_sched.lock are never held together.
 *   vgpu_gpu.umap_lock (mutex) the slice GPU's usermode (doorbell) VMAs;
 *                             taken under the mm's mmap_lock by VMA
 *                             open/close, so the scheduler only ever
 *                             *try*-locks an mmap_lock inside it.
 *   vgpu_file.lock (mutex)    the list of clients a control file owns.
 *   vgpu_slice.lock (mutex)   the slice's process list.
 *
 * The object table is an rhashtable (its own locking, RCU lookups).
 * Quota counters are atomics: a reservation is a cmpxchg on used.  No user
 * memory is touched and nothing sleeps under a spinlock; the only
 * spinlock-free hot path is the lookup.  No RM call is ever made under a
 * spinlock or in atomic context.  A doorbell writer of a paused slice
 * sleeps in pfn_mkwrite with its mmap_lock held for reading and no lock of
 * ours.
 */
#ifndef VGPU_H
#define VGPU_H

#undef pr_fmt
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/types.h>
#include <linux/bits.h>
#include <linux/build_bug.h>
#include <linux/kref.h>
#include <linux/mutex.h>
#include <linux/list.h>
#include <linux/path.h>
#include <linux/rhashtable.h>
#include <linux/atomic.h>
#include <linux/refcount.h>
#include <linux/fs.h>
#include <linux/pid.h>
#include <linux/workqueue.h>
#include <linux/cgroup.h>
#include <linux/wait.h>

#include "nvabi.h"
#include "nvrel.h"
#include "uapi/vgpu.h"

#define VGPU_MAX_SLICES         4096    /* 65,536 minors; MINORBITS allows 2^20 */
#define VGPU_NR_MINORS          (VGPU_MAX_SLICES * VGPU_MINORS_PER_SLICE)
#define VGPU_CLIENT_HANDLE_BASE 0xc1d00000u
/*
 * The most params (or one embedded list) a control may carry: the driver's
 * own bound (param_copy.h, RMAPI_PARAM_COPY_MAX_PARAMS_SIZE, 1 MiB).  Real
 * controls need more than 64 KiB: NV00FE SUBMIT_OPERATIONS is 224 KiB.
 * vgpu.ko's copies of params and lists are charged to the caller's memory
 * cgroup (GFP_KERNEL_ACCOUNT); the call page is not (vmalloc_user).
 */
#define VGPU_MAX_CTRL_PARAMS    (1u << 20)

/* Module parameters. */
extern bool vgpu_passthrough_unknown;
extern char *vgpu_nvidia_dev_dir;
extern char *vgpu_nvidia_version;

/* Deferred work that module exit waits for (main.c). */
extern struct workqueue_struct *vgpu_wq;

/* Leak evidence for debugfs. */
extern atomic_t vgpu_nr_files;
extern atomic_t vgpu_nr_objects;
extern atomic_t vgpu_nr_charges;

struct vgpu_sched;
struct vgpu_slice;

struct vgpu_gpu {
	struct vgpu_slice *slice;       /* the slice this is embedded in */
	u32 index;              /* the container's number */
	u32 real_minor;
	u32 gpu_id;             /* the driver's gpu_id (CARD_INFO, ATTACH) */
	u32 dev_inst;           /* the driver's device instance (NV0080 deviceId) */
	u8 uuid[NV_UUID_LEN];   /* the driver's, learnt at creation (UVM_REGISTER_GPU) */
	bool has_uuid;          /* learnt; if not, no UUID names this GPU */
	u64 limit;              /* READ_ONCE/WRITE_ONCE */
	atomic64_t used;
	atomic64_t peak;
	atomic64_t allocs;
	atomic64_t refusals;
	atomic_t chans_held;    /* channels live or on their way (the cap) */
	struct path path;       /* the real /dev/nvidia<minor> */

	/* Compute (compute.c, sched.c; docs/compute.md 2-3). */
	u32 policy;                     /* enum vgpu_compute_policy; READ_ONCE */
	u32 bp;                         /* basis points; READ_ONCE */
	u32 priority;                   /* enum vgpu_priority; READ_ONCE */
	struct mutex tlock;             /* tsgs, counts, userd, paused */
	struct list_head tsgs;          /* vgpu_tsg.node */
	u32 nr_tsgs;                    /* tlock; READ_ONCE */
	u32 nr_channels;                /* tlock; READ_ONCE */
	u32 nr_unmapped;                /* channels without a USERD map; tlock */
	bool paused;                    /* tlock; READ_ONCE: off the GPU */
	u32 paused_layers;              /* tlock: how it was paused */
	atomic_t run_gen;               /* bumped on every resume */
	wait_queue_head_t run_wq;       /* trapped doorbell writers */
	atomic_t rang;                  /* a doorbell trapped since the last decision */
	atomic_t waiters;               /* doorbell writers blocked now */
	atomic_t zap_pending;           /* a doorbell mapping could not be protected yet */
	u64 last_ring_ns;               /* READ_ONCE/WRITE_ONCE */
	atomic64_t gpu_time_ns;         /* granted while it wanted the GPU */
	atomic64_t doorbell_traps;
	struct mutex umap_lock;
	struct list_head umaps;         /* vgpu_umap.node, umap_lock */
	/* The scheduler's, under vgpu_sched.lock. */
	struct vgpu_sched *sched;
	struct list_head sched_node;
	u64 used_ns;                    /* this period */
	u64 vtime;                      /* GPU time / weight, never reset (sched.c) */
	u64 wanted_ns;                  /* the last decision at which it wanted the GPU */
	u64 poll_ns;                    /* its poll interval as holder; 0: a quantum */
	bool wants;
};

struct vgpu_pid {
	struct list_head node;
	struct pid *pid;        /* the tgid's struct pid */
	unsigned int files;
};

struct vgpu_slice {
	struct kref ref;
	u32 id;
	u32 base;               /* base minor */
	char name[VGPU_SLICE_NAME_MAX];
	u32 nr_gpus;
	u32 uvm_policy;         /* READ_ONCE */
	u32 max_channels;       /* per GPU, 0: no cap; READ_ONCE */
	struct vgpu_gpu gpus[VGPU_MAX_SLICE_GPUS];
	struct path ctl_path;
	struct path uvm_path;   /* .dentry NULL when the driver has no UVM node */
	bool removed;           /* vgpu_slices_lock; nodes stop opening */
	struct cgroup *cgroup;  /* vgpu_slices_lock; a reference; NULL: opens unchecked */
	atomic_t open_files;
	atomic64_t uvm_mapped;
	atomic_t usermode_maps;
	atomic_t quarantined;   /* a call broke: every call and open refused */
	struct vgpu_audit *audit; /* audit.c: the record, audit mode, allow-list */
	bool trace;             /* VGPU_A_SLICE_TRACE; READ_ONCE */
	atomic64_t trace_seq;   /* records sent (trace.c) */
	struct mutex lock;      /* pids */
	struct list_head pids;
	struct device *devs[VGPU_MINORS_PER_SLICE];
};

enum vgpu_kind { VGPU_KIND_CTL, VGPU_KIND_UVM, VGPU_KIND_GPU };

struct vgpu_file {
	struct vgpu_slice *slice;       /* a reference */
	u64 id;                         /* trace records' file number, unique while loaded */
	enum vgpu_kind kind;
	u32 gpu;                        /* VGPU_KIND_GPU: slice GPU index */
	struct file *filp;              /* ours */
	struct file *real;              /* the real driver's file */
	struct pid *tgid;               /* opener, for GET_PIDS */
	struct mutex lock;              /* clients, ctl */
	struct mutex call_lock;         /* call pages on real: one at a time (call.c) */
	struct list_head clients;       /* vgpu_client.file_node (control files) */
	struct file *ctl_filp;          /* REGISTER_FD target (a vgpu ctl file), ref held */
	bool usermode_pending;          /* RM_MAP_MEMORY of a usermode object named this file */
	bool poisoned;                  /* a call broke or came back inconsistent */
	bool undo;                      /* poisoned by a broken call: free its clients */
	struct list_head uvm_ext;       /* vgpu_uvm_ext, lock: UVM external mappings */
	struct list_head uvm_held;      /* vgpu_uvm_ext, lock: charges kept until the real release */
	struct mutex uvm_lock;          /* external ranges: model and driver call together */
	struct list_head uvm_ranges;    /* vgpu_uvm_range, lock (and uvm_lock to change) */
	spinlock_t ranges_lock;
	struct list_head ranges;        /* vgpu_range.node, ranges_lock (managed.c) */
	/*
	 * Control files: what the driver's OS_UNIX exports into this file
	 * hold (ipc.c), max_exports slots; set under lock and ipc.c's lock,
	 * kept until the real file's release.
	 */
	struct vgpu_export_slot *exports;
	u16 max_exports;
};

/* An object exported into a control file: its charge, kept (ipc.c). */
struct vgpu_export_slot {
	struct vgpu_charge *charge;     /* a reference; NULL: no FB charge */
	u32 hclass;
	u32 gpu;                        /* slice GPU index */
	bool used;
};

/* A file vgpu.ko answers nothing more for: -EIO. */
static inline bool vgpu_file_refused(const struct vgpu_file *vf)
{
	return READ_ONCE(vf->poisoned) || atomic_read(&vf->slice->quarantined);
}

/* The file's node: its minor relative to the slice's base (VGPU_MINOR_*). */
static inline u32 vgpu_file_node(const struct vgpu_file *vf)
{
	switch (vf->kind) {
	case VGPU_KIND_CTL:
		return VGPU_MINOR_CTL;
	case VGPU_KIND_UVM:
		return VGPU_MINOR_UVM;
	default:
		return VGPU_MINOR_GPU0 + vf->gpu;
	}
}

/* An external VA range as vgpu.ko models the UVM driver's (uvm.c). */
struct vgpu_uvm_range {
	struct list_head node;
	u64 start, end;                 /* [start, end] */
};

/*
 * UVM_MAP_EXTERNAL_ALLOCATION keeps the FB until the driver unmaps it: so
 * does its charge (uvm.c).
 */
struct vgpu_uvm_ext {
	struct list_head node;
	u64 base;
	u64 end;                        /* external mapping: [base, end] ... */
	struct vgpu_uvm_range *range;   /* ... in this range ... */
	u32 nr_gpus;                    /* ... on these GPUs (UUIDs) */
	u8 (*uuids)[16];
	struct vgpu_charge *charge;
	bool managed;                   /* a released managed range's (uvm_mapped) */
};

/* ----------------------------------------------------------- object table */
enum vgpu_obj_type {
	VGPU_OBJ_CLIENT,
	VGPU_OBJ_DEVICE,
	VGPU_OBJ_SUBDEVICE,
	VGPU_OBJ_MEMORY,
	VGPU_OBJ_USERMODE,
	VGPU_OBJ_TSG,                   /* KEPLER_CHANNEL_GROUP_A */
	VGPU_OBJ_CHANNEL,               /* *_CHANNEL_GPFIFO_* */
	VGPU_OBJ_OTHER,
};

struct vgpu_key {
	u32 client;
	u32 object;
};

struct vgpu_charge {
	refcount_t ref;
	struct vgpu_slice *slice;       /* a reference */
	u32 gpu;
	u64 bytes;
	struct rcu_head rcu;            /* freed a grace period after the last put */
};

struct vgpu_client;

struct vgpu_obj {
	struct rhash_head node;
	struct vgpu_key key;
	u32 hclass;
	enum vgpu_obj_type type;
	u32 gpu;                        /* slice GPU index (device and below) */
	struct vgpu_client *client;
	struct vgpu_obj *parent;
	struct list_head children;
	struct list_head sibling;
	struct vgpu_charge *charge;     /* FB memory only */
	void *compute;                  /* TSG: vgpu_tsg; channel: vgpu_chan */
	/*
	 * The driver's dependencies among the client's objects
	 * (refAddDependant, resserv's rs_resource.c), as far as they reach a
	 * TSG or channel: dependants are freed with this object though they
	 * are not below it (vgpu_dep.dep_node); depends, the objects this
	 * one is freed with (vgpu_dep.dant_node).  Under the client lock.
	 */
	struct list_head dependants;
	struct list_head depends;
	/*
	 * Memory the driver keeps using, by a bare pointer or address, while
	 * this channel or TSG lives (vgpu_obj_pin): pins (vgpu_dep.dant_node,
	 * dant the pinner) and pinned_by (vgpu_dep.dep_node).  A pinned
	 * object's free is refused while its pinner lives.
	 */
	struct list_head pins;
	struct list_head pinned_by;
	/*
	 * Freed in the driver as a dependant of another object, the handle
	 * kept (serverFreeResourceTree's bInvalidateOnly): its state here is
	 * dropped, the record stays until the handle is freed.
	 */
	bool lost;
	bool dropped;                   /* its state here is returned */
	u64 walk;                       /* closure walks' mark (u64: never wraps) */
	struct rcu_head rcu;
};

/* One dependency edge: dant goes with dep.  Under the client lock. */
struct vgpu_dep {
	struct list_head dep_node;      /* dep->dependants */
	struct list_head dant_node;     /* dant->depends */
	struct vgpu_obj *dep, *dant;
};

/*
 * A TSG vgpu.ko schedules: a KEPLER_CHANNEL_GROUP_A, or a channel allocated
 * under a device (bare: the driver's hidden TSG, reached through the
 * channel's own GPFIFO_SCHEDULE 0xA06F0103; it cannot be preempted).
 */
struct vgpu_tsg {
	struct list_head node;          /* vgpu_gpu.tsgs, tlock */
	struct vgpu_gpu *g;
	NvHandle hclient;
	NvHandle handle;                /* the TSG, or the bare channel */
	bool bare;
	bool user_enabled;              /* what the container asked; tlock */
	bool hw_enabled;                /* what vgpu.ko last told the driver; tlock */
	struct list_head chans;         /* vgpu_chan.node, tlock */
};

struct vgpu_chan {
	struct list_head node;          /* vgpu_tsg.chans, tlock */
	struct vgpu_tsg *tsg;
	NvHandle handle;
	NvHandle hdevice;
	const u32 *userd;               /* kernel map of USERD; NULL: none; tlock */
	u64 cookie;                     /* pLinearAddress for NV04_UNMAP_MEMORY */
	bool owns_tsg;                  /* bare: tsg is this channel's */
};

struct vgpu_client {
	struct kref ref;
	struct mutex lock;
	bool dead;                      /* lock */
	struct vgpu_obj obj;            /* the root, key (h, h) */
	struct vgpu_file *owner;        /* the control file */
	struct vgpu_slice *slice;       /* a reference */
	struct list_head file_node;     /* owner->lock */
	u64 walk_gen;                   /* lock: closure walks */
	struct rcu_head rcu;
};

/* rmapi.c */
/* audit.c */
struct vgpu_audit_entry {
	u8 kind, verdict;
	u32 number;
	u64 calls, refused, let_through;
};
int vgpu_audit_init(struct vgpu_slice *s);
void vgpu_audit_free(struct vgpu_slice *s);
bool vgpu_audit_on(struct vgpu_slice *s);
void vgpu_audit_set(struct vgpu_slice *s, bool on);
void vgpu_audit_set_allow(struct vgpu_slice *s, u64 *keys, u32 n);
u32 vgpu_audit_nr_allow(struct vgpu_slice *s);
bool vgpu_never_forwarded(enum nvrel_kind k, u32 value);
bool vgpu_audit_lets(struct vgpu_slice *s, enum nvrel_kind k, u32 value,
		     enum vgpu_audit_verdict verdict);
void vgpu_audit_use(struct vgpu_slice *s, enum nvrel_kind k, u32 value,
		    const struct nvrel_item *item);
int vgpu_audit_snapshot(struct vgpu_slice *s, struct vgpu_audit_entry **out,
			u64 *dropped, bool *on);

/* policy.c */
extern const struct nvrel_release *vgpu_rel;
extern bool vgpu_rmapi_nvos21;
int vgpu_policy_select(const char *driver);
const struct nvrel_item *vgpu_verdict(enum nvrel_kind k, u32 value);
u32 vgpu_rel_size(enum nvrel_kind k, u32 value);
bool vgpu_ctl_unexported(u32 cmd);
NV_STATUS vgpu_list_extent(const struct nvrel_item *item, u32 i, const void *kp,
			   u32 size, u32 *ptr_off, u64 *uptr, u64 *bytes);
const char *vgpu_release_name(void);

int vgpu_rm_init(void);
void vgpu_rm_exit(void);
void vgpu_rm_op(nvidia_kernel_rmapi_ops_t *ops);
NV_STATUS vgpu_rm_free(NvHandle hClient, NvHandle hParent, NvHandle hObject);
NV_STATUS vgpu_rm_control(NVOS54_PARAMETERS *p);
NV_STATUS vgpu_rm_vid_heap(NVOS32_PARAMETERS *p);
bool vgpu_rm_exists(NvHandle hClient, NvHandle hObject);
bool vgpu_rm_is_class(NvHandle hClient, NvHandle hObject, u32 hclass);
NV_STATUS vgpu_rm_mem_size(NvHandle hClient, NvHandle hMemory, u64 *size);
NV_STATUS vgpu_rm_map(NVOS33_PARAMETERS *p);
NV_STATUS vgpu_rm_unmap(NVOS34_PARAMETERS *p);
NV_STATUS vgpu_rm_ctrl(NvHandle hClient, NvHandle hObject, u32 cmd,
		       void *params, u32 size);
u32 vgpu_rm_enumerate(nv_gpu_info_t *info);
int vgpu_rm_device_instance(u32 gpu_id, u32 *inst);
int vgpu_rm_gpu_uuid(u32 gpu_id, u8 *uuid);

/* slice.c */
struct nlattr;
struct netlink_ext_ack;

/*
 * One VGPU_A_GPU nest of SLICE_NEW or SLICE_SET, as netlink.c parsed and
 * checked it: what the nest says, nothing merged yet.
 */
struct vgpu_gpu_req {
	const struct nlattr *nest;      /* for extack */
	u32 has;                        /* BIT(VGPU_GPU_A_*) of the attributes given */
	u32 index;
	u32 real_minor;
	u32 gpu_id;                     /* 0: the driver's GPU at real_minor */
	u64 limit;
	u32 policy, bp, priority;       /* each where has says so */
};
static_assert(VGPU_GPU_A_MAX < 32, "vgpu_gpu_req.has is a u32 of BIT(VGPU_GPU_A_*)");

#define VGPU_GPU_REQ_COMPUTE (BIT(VGPU_GPU_A_COMPUTE_POLICY) | \
			      BIT(VGPU_GPU_A_COMPUTE_BP) | BIT(VGPU_GPU_A_PRIORITY))

/* The compute setting r gives over a GPU's (*policy, *bp, *priority). */
static inline void vgpu_gpu_req_compute(const struct vgpu_gpu_req *r, u32 *policy,
					u32 *bp, u32 *priority)
{
	if (r->has & BIT(VGPU_GPU_A_COMPUTE_POLICY))
		*policy = r->policy;
	if (r->has & BIT(VGPU_GPU_A_COMPUTE_BP))
		*bp = r->bp;
	if (r->has & BIT(VGPU_GPU_A_PRIORITY))
		*priority = r->priority;
}

/* A SLICE_NEW request, checked whole by netlink.c before any slice exists. */
struct vgpu_slice_req {
	const struct nlattr *id_attr;   /* for extack */
	u32 id;
	const char *name;
	u32 uvm_policy;
	u32 nr_gpus;
	struct vgpu_gpu_req gpus[VGPU_MAX_SLICE_GPUS];
};

extern struct mutex vgpu_slices_lock;
struct vgpu_slice *vgpu_slice_new(const struct vgpu_slice_req *req,
				  struct netlink_ext_ack *extack);
struct vgpu_slice *vgpu_slice_find_locked(u32 id);
struct vgpu_slice *vgpu_slice_get_by_minor(unsigned int minor);
void vgpu_slice_set_cgroup_locked(struct vgpu_slice *s, struct cgroup *cgrp);
void vgpu_slice_remove_locked(struct vgpu_slice *s);
void vgpu_slice_put(struct vgpu_slice *s);
static inline void vgpu_slice_get(struct vgpu_slice *s) { kref_get(&s->ref); }
typedef int (*vgpu_slice_iter_t)(struct vgpu_slice *s, void *arg);
int vgpu_slice_for_each_from(u32 start_id, vgpu_slice_iter_t fn, void *arg);
u32 vgpu_nr_slices(void);
int vgpu_slice_add_pid(struct vgpu_slice *s, struct pid *pid);
void vgpu_slice_del_pid(struct vgpu_slice *s, struct pid *pid);
bool vgpu_slice_has_host_pid(struct vgpu_slice *s, pid_t nr);
pid_t vgpu_slice_pid_out(struct vgpu_slice *s, pid_t host);
pid_t vgpu_slice_pid_in(struct vgpu_slice *s, pid_t vnr);
void vgpu_slices_exit(void);

/* device.c */
int vgpu_device_init(void);
void vgpu_device_exit(void);
int vgpu_device_add_nodes(struct vgpu_slice *s);
void vgpu_device_del_nodes(struct vgpu_slice *s);
bool vgpu_is_vgpu_file(struct file *f);
extern unsigned int vgpu_major;

/* devfs.c */
int vgpu_devfs_init(void);
void vgpu_devfs_exit(void);

/* mediate.c */
long vgpu_ctl_ioctl(struct vgpu_file *vf, unsigned int cmd, unsigned long arg);
long vgpu_real_ioctl(struct vgpu_file *vf, u32 nr, u32 size, void __user *uptr);
void vgpu_undo(struct vgpu_file *vf);
struct vgpu_client *vgpu_file_client(struct vgpu_file *vf, NvHandle h);

/* memory.c */
int vgpu_memory_init(void);
void vgpu_memory_exit(void);
bool vgpu_reserve(struct vgpu_slice *s, u32 gpu, u64 bytes);
void vgpu_unreserve(struct vgpu_slice *s, u32 gpu, u64 bytes);
void vgpu_refused(struct vgpu_slice *s, u32 gpu, u64 bytes);
struct vgpu_charge *vgpu_charge_new(struct vgpu_slice *s, u32 gpu, u64 bytes);
void vgpu_charge_put(struct vgpu_charge *c);
bool vgpu_obj_charge_get(struct vgpu_obj *o, struct vgpu_charge **charge);
struct vgpu_client *vgpu_client_lookup(NvHandle h);
void vgpu_client_put(struct vgpu_client *c);
int vgpu_client_record(struct vgpu_file *vf, NvHandle h);
struct vgpu_obj *vgpu_obj_find(NvHandle hClient, NvHandle hObject);
int vgpu_obj_add(struct vgpu_client *c, struct vgpu_obj *parent, NvHandle h,
		 u32 hclass, enum vgpu_obj_type type, u32 gpu,
		 struct vgpu_charge *charge);
void vgpu_obj_remove(struct vgpu_obj *o);
void vgpu_obj_unmap_closure(struct vgpu_obj *o);
void vgpu_client_remove(struct vgpu_client *c);
void vgpu_file_free_clients(struct vgpu_file *vf);
NV_STATUS vgpu_rm_alloc_path(struct vgpu_file *vf, NVOS64_PARAMETERS *p);
bool vgpu_class_allowed(u32 hclass);
NV_STATUS vgpu_rm_free_path(struct vgpu_file *vf, NVOS00_PARAMETERS *p);
NV_STATUS vgpu_rm_dup_path(struct vgpu_file *vf, NVOS55_PARAMETERS *p);
NV_STATUS vgpu_rm_share_path(struct vgpu_file *vf, NVOS57_PARAMETERS *p);
NV_STATUS vgpu_alloc_memory_path(struct vgpu_file *vf, NVOS02_PARAMETERS *p);
NV_STATUS vgpu_vid_heap_path(struct vgpu_file *vf, NVOS32_PARAMETERS *p);
NV_STATUS vgpu_handle_for(NvHandle hClient, NvHandle *h);
NV_STATUS vgpu_created_anyway(struct vgpu_file *vf, NvHandle hc, NvHandle hp,
			      NvHandle h, NV_STATUS st);

/* control.c */
NV_STATUS vgpu_control_path(struct vgpu_file *vf, NVOS54_PARAMETERS *p);
void vgpu_heap_info_rewrite(struct vgpu_slice *s, u32 gpu, NVOS32_PARAMETERS *p);

/* cards.c */
int vgpu_card_info(struct vgpu_file *vf, void __user *uptr, u32 size);
int vgpu_attach_gpus(struct vgpu_file *vf, void __user *uptr, u32 size);
int vgpu_numa_info(struct vgpu_file *vf, nv_ioctl_numa_info_t *p, u32 size);
int vgpu_status_code(struct vgpu_file *vf, nv_ioctl_status_code_t *p);

/* call.c */
#define VGPU_CALL_MAX_BUFS 4    /* params and up to three lists */
/* A buffer a call's parameters point to (laid out in the call page). */
struct vgpu_buf {
	void *kbuf;             /* kernel copy; results come back here */
	u32 size;
	u32 in;                 /* holder of the pointer: 0 the params, k bufs[k-1] */
	u32 ptr_off;            /* offset of the NvP64 in the holder */
};
extern atomic64_t vgpu_nr_calls_broken;
int vgpu_call_init(void);
void vgpu_call_exit(void);
struct vfsmount *vgpu_pseudo_mnt(void);
long vgpu_call_nv(struct vgpu_file *vf, struct file *real, u32 nr,
		  void *params, u32 size, const struct vgpu_buf *bufs,
		  unsigned int nbufs);
long vgpu_call_nv_locked(struct vgpu_file *vf, struct file *real, u32 nr,
			 void *params, u32 size, const struct vgpu_buf *bufs,
			 unsigned int nbufs);
int vgpu_call_lock(struct vgpu_file *vf, struct vgpu_file **owner);
void vgpu_call_unlock(struct vgpu_file *vf, struct vgpu_file *owner);
long vgpu_call_uvm(struct vgpu_file *vf, unsigned int cmd, void *params,
		   u32 size);
NV_STATUS vgpu_call_status(long ret);
void vgpu_call_drop_idle(void);

/* fdxlate.c */
struct vgpu_tmpfd {
	int fd;
	struct file *vfilp;     /* the vgpu file named, ref held */
};
extern atomic_t vgpu_nr_proxies;
int vgpu_fd_xlate(struct vgpu_file *vf, int fd, unsigned int kinds,
		  struct vgpu_tmpfd *t);
void vgpu_fd_restore(struct vgpu_tmpfd *t);
#define VGPU_KINDS(k) (1u << (k))

/* mmap.c */
extern atomic64_t vgpu_nr_zaps;
extern atomic64_t vgpu_zap_ns;
int vgpu_mmap(struct file *filp, struct vm_area_struct *vma);
void vgpu_doorbell_protect(struct vgpu_gpu *g);

/* compute.c: TSG and channel tracking */
extern atomic_t vgpu_nr_tsgs;
extern atomic_t vgpu_nr_userd_maps;
extern atomic64_t vgpu_nr_rm_schedule;
extern atomic64_t vgpu_nr_rm_preempt;
void vgpu_compute_init_gpu(struct vgpu_gpu *g);
int vgpu_compute_track(struct vgpu_client *c, struct vgpu_obj *o);
void vgpu_compute_unmap(struct vgpu_obj *o);
void vgpu_compute_drop(struct vgpu_obj *o);
NV_STATUS vgpu_compute_user_schedule(struct vgpu_file *vf, NVOS54_PARAMETERS *p);
bool vgpu_compute_wants(struct vgpu_gpu *g, u64 now, u64 period_ns);
void vgpu_compute_pause(struct vgpu_gpu *g, u32 layers);
bool vgpu_compute_pause_begin(struct vgpu_gpu *g, u32 layers);
void vgpu_compute_pause_finish(struct vgpu_gpu *g, u32 layers);
void vgpu_compute_resume(struct vgpu_gpu *g);

/* sched.c */
struct vgpu_sched_info {
	u32 real_minor;
	u32 period_us;
	u32 layers;
	u64 switches;
	u64 cpu_ns;
};
int vgpu_sched_attach(struct vgpu_gpu *g);
void vgpu_sched_detach(struct vgpu_gpu *g);
int vgpu_sched_set_compute(struct vgpu_gpu *g, u32 policy, u32 bp, u32 priority);
void vgpu_sched_ring(struct vgpu_gpu *g);
void vgpu_sched_kick(struct vgpu_gpu *g);
int vgpu_sched_set(u32 real_minor, const u32 *period_us, const u32 *layers,
		   struct vgpu_sched_info *out);
int vgpu_sched_get(u32 real_minor, struct vgpu_sched_info *out);
int vgpu_sched_get_next(u32 from_minor, struct vgpu_sched_info *out);
u32 vgpu_sched_layers_of(struct vgpu_gpu *g);
void vgpu_sched_exit(void);
struct seq_file;
void vgpu_sched_show_stats(struct seq_file *m);

/* managed.c */
struct vgpu_range;
extern atomic_t vgpu_nr_ranges;
struct vgpu_range *vgpu_range_new(struct vm_area_struct *vma);
void vgpu_range_arm(struct vgpu_range *r, struct file *filp,
		    struct vm_area_struct *vma, struct vgpu_charge *charge);
void vgpu_range_cancel(struct vgpu_range *r);

/* uvm.c */
extern atomic_t vgpu_nr_reapers;

/* ipc.c: CUDA IPC (OS_UNIX export and import) within a slice */
extern atomic_t vgpu_nr_exports;
bool vgpu_ipc_cmd(u32 cmd);
NV_STATUS vgpu_ipc_control(struct vgpu_file *vf, NVOS54_PARAMETERS *p, u32 size);
bool vgpu_ipc_release(struct vgpu_file *vf);
long vgpu_uvm_ioctl(struct vgpu_file *vf, unsigned int cmd, unsigned long arg);
void vgpu_uvm_hold(struct vgpu_file *vf, struct vgpu_uvm_ext *e,
		   struct vgpu_charge *charge);
bool vgpu_uvm_release(struct vgpu_file *vf);
s32 vgpu_uvm_fd_offset(u32 cmd, u32 size);

/* netlink.c */
int vgpu_netlink_init(void);
void vgpu_netlink_exit(void);
void vgpu_event(struct vgpu_slice *s, u32 type, u32 gpu, u64 size);
bool vgpu_trace_listening(void);
struct sk_buff *vgpu_trace_msg_new(size_t payload, void **hdr);
void vgpu_trace_msg_send(struct sk_buff *skb, void *hdr);

/* trace.c: one ioctl of a traced slice, between begin and end */
#define VGPU_TRACE_MAX_LISTS 4

/* User memory a record holds: len bytes at uptr, before (in) and after. */
struct vgpu_trace_blob {
	u64 uptr;
	u32 len;                        /* taken from the record's budget; in may be NULL */
	void *in;
};

struct vgpu_trace_call {
	u64 t0;
	u32 nr, size;                   /* the escape (an XFER's inner one) or UVM command */
	u32 flags;                      /* VGPU_TRACE_F_* */
	u32 item_kind, item, verdict;   /* enum nvrel_kind, number, enum nvrel_verdict */
	u32 left;                       /* of VGPU_TRACE_MAX_BLOBS */
	struct vgpu_trace_blob args;    /* the parameters */
	struct vgpu_trace_blob params;  /* RM_CONTROL's params, RM_ALLOC's pAllocParms */
	u32 psize;
	struct vgpu_trace_blob lists[VGPU_TRACE_MAX_LISTS];
	u32 list_off[VGPU_TRACE_MAX_LISTS];
	u32 nlists;
	u32 fd_off;                     /* where a descriptor lies in the parameters ... */
	u64 fd_file;                    /* ... and the slice's file it named (0: none) */
};
u64 vgpu_trace_file_id(void);
bool vgpu_tracing(struct vgpu_slice *s);
void vgpu_trace_ioctl_begin(struct vgpu_file *vf, unsigned int cmd,
			    unsigned long arg, struct vgpu_trace_call *tc);
void vgpu_trace_ioctl_end(struct vgpu_file *vf, struct vgpu_trace_call *tc,
			  long ret);
void vgpu_trace_file_op(struct vgpu_file *vf, enum vgpu_trace_op op, u32 open_flags);
void vgpu_trace_mmap(struct vgpu_file *vf, unsigned long start, unsigned long len,
		     unsigned long pgoff, unsigned long vm_flags, int ret);

/* debugfs.c */
void vgpu_debugfs_init(void);
void vgpu_debugfs_exit(void);

#endif /* VGPU_H */
