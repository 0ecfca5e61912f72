/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nvsim.h - internal interfaces of the simulated NVIDIA driver.
 *
 * Locking, in the order it nests:
 *
 *   nvsim.lock (mutex)    the RM object tree, clients, FB and per-process
 *                         accounting, TSG state, attach counts, the list of
 *                         files holding a mapping context.
 *   nvsim_file.ctx_lock   the mapping context of one file (a spinlock, so
 *                         mmap can read it without nvsim.lock).
 *   nvsim_engine.lock     one per GPU (a spinlock taken with interrupts
 *                         off: the engine's hrtimer callback runs in hard
 *                         interrupt context and cannot take a mutex).  It
 *                         guards what the engine reads and writes: the
 *                         GPU's engine TSG list, each TSG's channel list and
 *                         its scheduling fields (enabled, timeslice,
 *                         interleave, busy/items/errors),
 *                         each channel's engine state, the per-process busy
 *                         totals of that GPU.  Writers of those fields hold
 *                         nvsim.lock and then the engine lock, never the
 *                         other way round; the timer callback takes only the
 *                         engine lock.  PREEMPT with bWait sleeps on the
 *                         engine's wait queue holding neither lock (it pins
 *                         the TSG with a reference instead).
 *
 * Two rules keep mmap_lock out of any cycle with nvsim.lock:
 *  - no user memory is touched under nvsim.lock (a fault there would take
 *    mmap_lock inside it): parameters are copied in before the lock is taken
 *    and out after it is dropped;
 *  - nothing that runs under mmap_lock (mmap(), the fault handlers, VMA
 *    open/close) takes nvsim.lock; mmap() reads the context under ctx_lock.
 */
#ifndef NVSIM_H
#define NVSIM_H

#include <linux/types.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/xarray.h>
#include <linux/idr.h>
#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/hrtimer.h>
#include <linux/wait.h>
#include <linux/jump_label.h>
#include <linux/refcount.h>
#include <linux/workqueue.h>

#include "nvabi.h"
#include "nvrel.h"

#define NVSIM_MAX_GPUS          8
#define NVSIM_PCI_BUS_BASE      0x10
#define NVSIM_PCI_VENDOR_ID     0x10de
#define NVSIM_BAR1_SIZE         (256ULL << 20)
#define NVSIM_CLIENT_HANDLE_BASE 0xc1d00000u
#define NVSIM_OBJECT_HANDLE_BASE 0xcaf00000u
#define NVSIM_OBJECT_HANDLE_RANGE 0x00080000u
#define NVSIM_TIMESLICE_DEFAULT_US 1024
#define NVSIM_MAX_MMAP_BYTES    (64ULL << 20)
/* nvstatuscodes.h: not in nvabi.h. */
#define NVSIM_NV_ERR_INVALID_REQUEST    0x0000003f
/* RMAPI_PARAM_COPY_MAX_PARAMS_SIZE in the real driver. */
#define NVSIM_MAX_CTRL_PARAMS   (1U << 20)

/* Module parameters (main.c). */
extern unsigned int nvsim_num_gpus;
extern unsigned long nvsim_fb_size;
extern int nvsim_numa_node;
extern char *nvsim_gpu_name;
extern char *nvsim_driver_version;
extern unsigned int nvsim_block_us;
extern bool nvsim_fb_backing;

struct nvsim_tsg;
struct nvsim_channel;
struct nvsim_store;

/*
 * The engine of one GPU (engine.c): an hrtimer ticking every block_us while
 * the GPU has channels, running one TSG at a time.  All fields: lock.
 */
struct nvsim_engine {
	spinlock_t lock;
	struct hrtimer timer;
	bool timer_on;                  /* armed, or its callback will re-arm */
	unsigned int nr_channels;
	struct list_head tsgs;          /* nvsim_tsg.eng_node; head = next up */
	struct nvsim_tsg *cur;          /* on the engine, or NULL */
	struct nvsim_channel *cur_ch;   /* cur's channel running an item */
	s64 slice_left_ns;              /* of cur's timeslices this pass */
	u64 last_ns;                    /* ktime of the last tick */
	u64 busy_ns;
	/*
	 * Channels whose GPFIFO and USERD live in client memory (pbdma.c)
	 * run in process context, in this work (under nvsim.lock): the
	 * timer only queues it, on a doorbell or while a channel waits on
	 * a semaphore.
	 */
	struct work_struct pb_work;
	bool pb_waiting;                /* a channel waits (semaphore acquire) */
	u64 pb_kick_ns;                 /* last queueing for a waiting channel */
};

/* RC watchdog requests a subdevice holds (cuda.c): a bit each, and a count each per GPU */
enum { NVSIM_WD_ENABLE, NVSIM_WD_DISABLE, NVSIM_WD_SOFT_DISABLE, NVSIM_WD_KINDS };

struct nvsim_gpu {
	u32 index;
	u32 gpu_id;             /* the driver's id for the GPU: bus << 8 */
	u8 bus;
	u8 uuid[NV_UUID_LEN];   /* gpu.c, nvsim_gpu_uuid_init */
	u64 next_va;            /* nvsim.lock: VA handed to virtual memory */
	u64 fb_total;
	u64 fb_used;            /* nvsim.lock */
	u64 next_fb_offset;     /* nvsim.lock: plausible offsets for NVOS32 */
	unsigned int open_count; /* nvsim.lock: open_gpu and attach references */
	/* nvsim.lock: the client holding the compute-mode reservation (cuda.c) */
	NvHandle compute_reservation;
	/* nvsim.lock: the RC watchdog's requests of every subdevice (cuda.c) */
	u32 wd_refs[NVSIM_WD_KINDS];
	struct ida tsg_ida;
	struct ida chid_ida;
	struct list_head tsgs;  /* nvsim_tsg.gpu_node, nvsim.lock */
	/* nvsim_uvm_ext.gpu_node: the GPU VAs UVM mapped (nvsim.lock) */
	struct list_head va_maps;
	struct page *usermode;  /* the 64 KiB usermode (doorbell) region */
	struct device *dev;
	struct nvsim_engine engine;
};

/* Global state; one instance, nvsim. */
/*
 * The privilege a call runs at, as RS_PRIV_LEVEL in the real driver
 * (entry_points.c, XlateUserModeArgsToSecInfo): user-mode arguments get
 * USER, or USER_ROOT when the caller is an administrator (os_is_administrator:
 * capable(CAP_SYS_ADMIN)); the kernel entry point (nvidia_get_rm_ops) gets
 * KERNEL.  The order matters: the driver compares with >=.
 */
enum nvsim_priv {
	NVSIM_PRIV_USER,
	NVSIM_PRIV_USER_ROOT,
	NVSIM_PRIV_KERNEL,
	NVSIM_PRIV_COUNT,
};

struct nvsim_state {
	struct mutex lock;
	unsigned int num_gpus;
	struct nvsim_gpu gpus[NVSIM_MAX_GPUS];
	struct xarray clients;          /* hClient -> nvsim_client */
	u32 next_client;                /* client handle generator */
	struct list_head pid_fb;        /* nvsim_pid_fb */
	struct list_head ctx_files;     /* files with a valid mapping context */
	struct list_head kernel_clients; /* clients made through nvidia_get_rm_ops */
	struct list_head pid_busy;      /* nvsim_pid_busy */
	struct list_head kmaps;         /* nvsim_kmap: kernel USERD mappings */
	struct list_head os_events;     /* nvsim_os_event.all */
	u64 memblock_size;              /* NV_ESC_SYS_PARAMS, set once */
	u64 next_cookie;                /* pLinearAddress cookies */
	const nvidia_modeset_callbacks_t *callbacks;

	/* Leak evidence, read by debugfs without the lock. */
	atomic_t nr_objects;
	atomic_t nr_clients;
	atomic_t nr_mappings;
	/* objects of user clients, by the privilege they were made at */
	atomic_t nr_user_client_objs[NVSIM_PRIV_COUNT];
	atomic_t nr_privileged_channels;
	atomic_t nr_vas_global;         /* devices on the GPU's global VA space */
	atomic_t nr_vas_foreign;        /* devices on another client's VA space */
	atomic_t nr_p2p;                /* live NV50_P2P objects (peer.c) */
	atomic_t nr_p2p_chosen_ids;     /* ... of them with caller-chosen peer ids */
	atomic_t nr_uvm_peers;          /* GPU pairs with UVM peer access on */
	atomic_t nr_exports;            /* objects exported to files (peer.c) */
	atomic_t nr_dmabufs;            /* live dma-bufs (dmabuf.c) */
	atomic_t nr_dmabuf_dups;        /* handles they (and orphans) hold dup'd */
	atomic_t nr_dmabuf_orphans;     /* released dma-bufs with dups left */
	atomic64_t uvm_pages;
	atomic64_t nr_ioctls;
	/* The last control and class that reached nvsim (tests: forwarded?). */
	u32 last_control, last_class;
	/* Test hook (debugfs delay_nr/delay_uvm/delay_ms): see nvsim_test_delay. */
	u32 delay_nr, delay_uvm, delay_ms, delay_out;
	/* delay_count: how many more calls to delay (0: all); delay_waiting: asleep now. */
	atomic_t delay_count, delay_waiting;
	u32 instance_rotate;            /* debugfs, nvsim_instance_of */
};

extern struct nvsim_state nvsim;

/* release.c */
extern const struct nvrel_release *nvsim_rel;
extern bool nvsim_rmapi_nvos21;
int nvsim_release_init(const char *version);
u32 nvsim_rel_size(enum nvrel_kind k, u32 value, u32 fallback);
bool nvsim_rel_lacks(enum nvrel_kind k, u32 value);
u32 nvsim_rel_gr_info_max(void);

/* arch.c: the chip the GPUs are (all alike), from gpu_name. */
enum nvsim_eng {
	NVSIM_ENG_ANY = -1,
	NVSIM_ENG_GPU,          /* ENG_GPU: generic, engine-less, usermode */
	NVSIM_ENG_FIFO,         /* ENG_KERNEL_FIFO */
	NVSIM_ENG_DMA,          /* ENG_DMA: VA spaces, virtual memory */
	NVSIM_ENG_SW,           /* ENG_SW */
	NVSIM_ENG_GR,           /* ENG_GR(n) */
	NVSIM_ENG_CE,           /* ENG_CE(n) */
};

struct nvsim_arch_class {
	u32 hclass;
	int eng;                /* enum nvsim_eng */
	u32 inst_mask;          /* GR/CE instances that list it */
};

struct nvsim_arch {
	const char *chip;
	u16 chip_id;            /* arch << 4 | impl (UUID message) */
	const struct nvsim_arch_class *classes;
	unsigned int nr_classes;
	unsigned int nr_gr, nr_ce;
	u32 compute_class, copy_class;
	u32 sm_version, max_warps_per_sm, gpcs, tpc_per_gpc, sm_per_tpc;
	u32 max_subctx;
	u32 smc_mode, display;
	unsigned int va_bits;
};

extern const struct nvsim_arch *nvsim_arch;
extern u16 nvsim_pci_device_id;
void nvsim_arch_init(const char *name);
bool nvsim_arch_has_class(u32 hclass);
unsigned int nvsim_arch_classlist(u32 *out, unsigned int max, int eng,
				  unsigned int inst);
int nvsim_arch_class_engine(u32 hclass);
bool nvsim_arch_engine_has_class(u32 hclass, int eng, unsigned int inst);
void nvsim_test_delay(u32 nr, bool uvm);
void nvsim_test_delay_out(u32 nr, bool uvm);

enum nvsim_file_kind {
	NVSIM_FILE_CTL,
	NVSIM_FILE_GPU,
	NVSIM_FILE_UVM,
};

enum nvsim_map_kind {
	NVSIM_MAP_VIDMEM,       /* device memory, GPU node */
	NVSIM_MAP_USERMODE,     /* the usermode register region, GPU node */
	NVSIM_MAP_SYSMEM,       /* system memory, control node */
	NVSIM_MAP_CHANNEL,      /* a channel's USERD + GPFIFO pages, GPU node */
};

/* What RM_MAP_MEMORY (or RM_ALLOC_MEMORY of sysmem) leaves on a file. */
struct nvsim_mapctx {
	bool valid;
	enum nvsim_map_kind kind;
	struct nvsim_gpu *gpu;
	u64 offset;             /* into the object */
	u64 length;             /* bytes the caller asked for */
	u64 cookie;             /* pLinearAddress */
	NvHandle hClient;
	NvHandle hMemory;
	/* NVSIM_MAP_CHANNEL: the pages, a reference held while valid. */
	struct page *pages[NVSIM_CHANNEL_MAP_PAGES];
	/* NVSIM_MAP_VIDMEM/SYSMEM: the object's store, a reference held */
	struct nvsim_store *store;
};

struct nvsim_os_event {
	struct list_head node;          /* the file's */
	struct list_head all;           /* nvsim.os_events: the driver's list is global */
	NvHandle hClient;
	u32 fd;
};

struct nvsim_file {
	enum nvsim_file_kind kind;
	struct nvsim_gpu *gpu;          /* GPU node only */
	struct file *filp;

	/* NV_ESC_REGISTER_FD: the control file this one acts for. */
	struct file *ctl_filp;
	struct nvsim_file *ctl_nvfp;

	/* nvsim.lock */
	struct list_head clients;       /* nvsim_client.owner_node */
	struct list_head os_events;
	u32 *attached;                  /* NV_ESC_ATTACH_GPUS_TO_FD */
	unsigned int nr_attached;
	struct list_head ctx_node;      /* in nvsim.ctx_files while ctx.valid */

	spinlock_t ctx_lock;
	struct nvsim_mapctx ctx;

	/* UVM: nvsim.lock */
	bool uvm_initialized;
	u64 uvm_flags;
	struct list_head uvm_ext;       /* nvsim_uvm_ext */
	struct list_head uvm_xranges;   /* nvsim_uvm_xrange */
	/* UVM_REGISTER_GPU_VASPACE: the VA space registered per GPU */
	struct {
		NvHandle hClient, hVaSpace;
	} uvm_vas[NVSIM_MAX_GPUS];
	/*
	 * NV0000 OS_UNIX exports into this (control) file, nvfp->handles of
	 * the driver (peer.c), nvsim.lock: max_exports slots, each the
	 * exported memory (NULL: empty), its class and device instance.
	 */
	struct nvsim_export {
		struct nvsim_mem *mem;
		u32 hclass, inst;
	} *exports;
	u16 max_exports;
	u32 export_inst;
	/* UVM_REGISTER_GPU's GPUs, and the pairs with peer access (peer.c) */
	u32 uvm_gpus;
	u32 uvm_peers[NVSIM_MAX_GPUS];
	/* UVM range groups (cuda.c): their ids, the last one given */
	struct xarray uvm_range_groups;
	u64 uvm_range_group_id;
};

/* A reference-counted FB (or sysmem) allocation, shared by dups. */
struct nvsim_mem {
	unsigned int refs;              /* nvsim.lock */
	struct nvsim_gpu *gpu;
	u32 hclass;
	u64 size;
	bool fb;                        /* counted against the GPU's FB */
	pid_t tgid;                     /* process the FB is charged to */
	/* NV01_MEMORY_SYSTEM_OS_DESCRIPTOR: the caller's pages, pinned */
	struct page **pinned;
	unsigned long nr_pinned;
	bool pinned_writable;
	/* device/system memory: pages made where touched (store.c) */
	struct nvsim_store *store;
};

/* Busy time of one process on one GPU; kept while the process has a client. */
struct nvsim_pid_busy {
	struct list_head node;          /* nvsim.pid_busy, nvsim.lock */
	pid_t tgid;
	u32 gpu;
	u64 busy_ns;                    /* the GPU's engine.lock */
};

/* A kernel caller's NV04_MAP_MEMORY of a channel's USERD. */
struct nvsim_kmap {
	struct list_head node;          /* nvsim.kmaps, nvsim.lock */
	u64 addr;                       /* pLinearAddress */
	NvHandle hClient;
	struct page *page;              /* a reference until the unmap */
	void *va;                       /* vmap of page: gone at the unmap */
	struct nvsim_channel *ch;       /* whose USERD; its free unmaps */
};

struct nvsim_tsg {
	struct list_head gpu_node;
	struct nvsim_gpu *gpu;
	refcount_t refs;                /* the object, PREEMPT waiters */
	u32 id;
	NvHandle hClient;
	NvHandle handle;                /* 0 for a TSG the driver made itself */
	pid_t tgid;                     /* the client's process */
	struct nvsim_pid_busy *pidb;
	unsigned int nr_channels;
	u64 nr_preempts;
	u64 subctx_used;                /* nvsim.lock: FERMI_CONTEXT_SHARE_A ids */
	u32 engine_type;                /* NV2080_ENGINE_TYPE_* it was made for */

	/* engine.lock (written also under nvsim.lock) */
	struct list_head eng_node;
	struct list_head channels;      /* nvsim_channel.tsg_node */
	bool enabled;
	u64 timeslice_us;
	u32 interleave;
	u64 busy_ns;
	u64 items;
	u64 errors;
};

/*
 * A channel's simulated hardware state.  USERD and the GPFIFO ring are two
 * pages the channel owns (a reference each); mappings take their own.
 */
struct nvsim_channel {
	struct nvsim_tsg *tsg;
	struct list_head tsg_node;      /* engine.lock */
	u32 chid;
	u32 entries;                    /* ring size, a power of two */
	struct page *userd;
	struct page *ring;

	/* engine.lock */
	bool enabled;                   /* per-channel GPFIFO_SCHEDULE */
	bool awake;                     /* AWAKE (else IDLE) */
	bool stopped;                   /* an invalid GP_PUT stopped it */
	bool running;                   /* an item started and not finished */
	u32 gp_get;
	u64 start_ns;                   /* of the item started */
	u64 dur_ns;
	u64 run_ns;                     /* how long it has run */
	u64 errors;

	/*
	 * A channel whose GPFIFO ring and USERD are client memory (the real
	 * driver's only kind, pbdma.c): the ring at a GPU VA of the
	 * channel's VA space, USERD in a memory object.  Run by the GPU's
	 * pb_work under nvsim.lock; the timer engine leaves it alone.
	 */
	bool pb;
	u64 gpfifo_va;
	struct nvsim_mem *userd_mem;    /* a reference */
	u64 userd_off;
	NvHandle vas_client, vas_handle; /* the VA space it runs in */
	/* nvsim.lock: the pushbuffer segment being run */
	bool pb_active;
	u64 pb_va;
	u32 pb_len, pb_pos, pb_done;    /* dwords; methods done in the header */
	u32 subch_class[8];
	u64 sem_addr, sem_payload;      /* host SEM_* */
	u64 ce_in, ce_out, ce_sem_addr; /* copy engine state */
	u32 ce_len, ce_sem_payload, ce_sem_upper;
	u32 ce_remap_a, ce_remap_b, ce_remap; /* SET_REMAP_CONST_A/B, _COMPONENTS */
	u64 gr_sem_addr;                /* compute SET_REPORT_SEMAPHORE_A/B */
	u32 gr_sem_payload;             /* ... _C */
	u64 gr_i2m_out;                 /* inline-to-memory: OFFSET_OUT */
	u32 gr_i2m_len, gr_i2m_lines, gr_i2m_pitch; /* LINE_LENGTH_IN, _COUNT, PITCH_OUT */
	u64 gr_i2m_pos, gr_i2m_left;    /* bytes written, still expected */
};

enum nvsim_obj_type {
	NVSIM_OBJ_CLIENT,
	NVSIM_OBJ_DEVICE,
	NVSIM_OBJ_SUBDEVICE,
	NVSIM_OBJ_MEMORY,
	NVSIM_OBJ_TSG,
	NVSIM_OBJ_CHANNEL,
	NVSIM_OBJ_USERMODE,
	NVSIM_OBJ_VASPACE,              /* FERMI_VASPACE_A */
	NVSIM_OBJ_CTXSHARE,             /* FERMI_CONTEXT_SHARE_A */
	NVSIM_OBJ_ENGINE,               /* compute/3D/2D/I2M/copy on a channel */
	NVSIM_OBJ_EVENT,                /* NV01_EVENT_OS_EVENT */
	NVSIM_OBJ_DEBUGGER,             /* GT200_DEBUGGER */
	NVSIM_OBJ_GPU_MGMT,             /* NV0020_GPU_MANAGEMENT */
	NVSIM_OBJ_CONF_COMPUTE,         /* NV_CONFIDENTIAL_COMPUTE (cuda.c) */
	NVSIM_OBJ_P2P,                  /* NV50_P2P (peer.c) */
};

#define NVSIM_BIT(t)    (1u << (t))

struct nvsim_client;

/* Share policies an object keeps (RM's list is unbounded; CUDA sets one). */
#define NVSIM_SHARE_MAX 4

struct nvsim_object {
	NvHandle handle;
	u32 hclass;
	enum nvsim_obj_type type;
	enum nvsim_priv priv;           /* of the call that made it */
	struct nvsim_client *client;
	struct nvsim_object *parent;
	struct list_head children;
	struct list_head sibling;
	struct nvsim_gpu *gpu;          /* NULL for the client itself */
	/*
	 * resserv's dependencies (refAddDependant, rs_resource.c): the
	 * objects freed with this one though they are not below it
	 * (dependants, nvsim_dep.dep_node), and those this one is freed
	 * with (depends, nvsim_dep.dant_node).  An invalidated object is a
	 * dependant freed with another: its class state is gone, its
	 * handle stays until it is freed itself (clientFreeResource with
	 * bInvalidateOnly, rs_client.c).
	 */
	struct list_head dependants;
	struct list_head depends;
	bool invalidated;
	/*
	 * The object's own share policies (RsResourceRef.sharePolicyList,
	 * set by NV_ESC_RM_SHARE) once share_modified
	 * (bSharePolicyListModified); until then the client's inherited
	 * ones (objects.c, nvsim_rm_share).
	 */
	bool share_modified;
	u8 share_count;
	RS_SHARE_POLICY share[NVSIM_SHARE_MAX];
	union {
		struct {
			u32 inst;
			/* whose VA space it is on: 0 the GPU's global one,
			 * else a client's (its own or another's) */
			NvHandle vas_client;
			u32 va_mode;    /* NV0080_ALLOC_PARAMETERS.vaMode */
			u32 cuda_limit_refs;    /* cuda.c: PERF_CUDA_LIMIT */
		} device;
		struct {
			u32 inst;
			u8 wd;  /* BIT(NVSIM_WD_*): its watchdog requests */
		} subdevice;
		/* NV50_P2P: its two GPUs (the same one for a loopback) */
		struct {
			struct nvsim_gpu *local, *peer;
			bool chosen_ids;        /* peer id masks given */
		} p2p;
		struct {
			struct nvsim_mem *mem;
			/* virtual classes: the VA range they stand for,
			 * and the VA space named at allocation (0: the
			 * device's) */
			u64 va_base, va_size;
			NvHandle hvaspace;
		} memory;
		struct { u64 va_base, va_size; } vaspace;
		struct { u32 subctx; NvHandle hvaspace; } ctxshare;
		struct {
			struct nvsim_tsg *tsg;
			NvHandle hvaspace;      /* its hVASpace (0: the
						 * device's default) */
		} tsg;
		struct {
			struct nvsim_tsg *tsg;
			struct nvsim_channel *ch;
			bool own_tsg;   /* the hidden TSG belongs to the channel */
			u32 chid;       /* U32_MAX until allocated */
			bool privileged;        /* kernel_channel.c: a
						 * privileged channel */
			u32 engine_type;        /* NV2080_ENGINE_TYPE_* */
		} channel;
	};
};

/* One refAddDependant edge: dant is freed (invalidated) with dep. */
struct nvsim_dep {
	struct list_head dep_node;      /* dep->dependants */
	struct list_head dant_node;     /* dant->depends */
	struct nvsim_object *dep, *dant;
};

struct nvsim_client {
	NvHandle handle;
	struct nvsim_object obj;        /* the root of the tree */
	struct nvsim_file *owner;       /* NULL: a kernel client */
	pid_t tgid;
	/*
	 * A user client's pid (client.c, rmclientConstruct_IMPL: pOsPidInfo,
	 * os_get_pid_info's get_task_pid(current, PIDTYPE_PID)), for
	 * GPU_GET_PIDS in the caller's PID namespace; NULL for a kernel one.
	 */
	struct pid *pid_info;
	struct xarray objects;          /* handle -> nvsim_object, not obj */
	u32 handle_gen;
	struct list_head owner_node;
	struct list_head dma_maps;      /* nvsim_dma_map: MAP_MEMORY_DMA */
};

/* One RM_MAP_MEMORY_DMA: memory mapped into a virtual memory object. */
struct nvsim_dma_map {
	struct list_head node;          /* nvsim_client.dma_maps */
	struct nvsim_object *mapper;    /* hDma: the virtual memory object */
	struct nvsim_object *mem;       /* hMemory */
	struct nvsim_object *ctx;       /* hDevice: the device or subdevice */
	u64 dma_offset;                 /* the VA */
	u64 length;
};

/* Per (process, GPU) FB use, for GET_PID_INFO and debugfs. */
struct nvsim_pid_fb {
	struct list_head node;
	pid_t tgid;
	u32 gpu;
	u64 bytes;
};

/*
 * UVM_MAP_EXTERNAL_ALLOCATION keeps the memory alive until UVM_FREE; one
 * per GPU it was mapped on (gpu NULL: none), which the engine reads as
 * that GPU's mapping of [base, base + length) in the VA space the file
 * registered for it.
 */
/*
 * An external VA range (UVM_CREATE_EXTERNAL_RANGE), [start, end]: the
 * external mappings lie in one, and go with it (uvm_va_range.c).
 */
struct nvsim_uvm_xrange {
	struct list_head node;          /* nvsim_file.uvm_xranges */
	u64 start, end;
	/* A semaphore pool (uvm.c): its zeroed pages, the store they are in */
	struct nvsim_mem *pool;
	struct nvsim_store *store;
	bool sked;                      /* a dynamic parallelism region (uvm.c) */
};

struct nvsim_uvm_ext {
	struct list_head node;          /* nvsim_file.uvm_ext */
	struct list_head gpu_node;      /* gpu->va_maps, when gpu is set */
	u64 base, length, offset;
	struct nvsim_mem *mem;
	struct nvsim_gpu *gpu;
	NvHandle vas_client, vas_handle;
};

/**
 * struct nvsim_call - who is calling into RM, and how to read its pointers
 * @file: the caller's file (NULL for kernel callers)
 * @kernel: kernel caller: the client ownership checks are skipped
 * @kparams: pointers embedded in the parameters are kernel pointers
 */
struct nvsim_call {
	struct nvsim_file *file;
	bool kernel;
	bool kparams;
	enum nvsim_priv priv;
};

/* device.c */
int nvsim_device_init(void);
void nvsim_device_exit(void);
#define NVSIM_KIND(k)   (1u << (k))
struct file *nvsim_fget(int fd, unsigned int kinds, struct nvsim_file **nvfp);
extern const struct file_operations nvsim_fops;
extern const struct file_operations nvsim_uvm_fops;
struct nvsim_file *nvsim_file_alloc(struct file *filp,
				    enum nvsim_file_kind kind);
void nvsim_file_free(struct nvsim_file *nvfp);
struct class *nvsim_class(void);

/* gpu.c */
int nvsim_gpus_init(void);
void nvsim_uuid_string(const u8 *uuid, char *out);
void nvsim_gpus_exit(void);
struct nvsim_gpu *nvsim_gpu_by_id(u32 gpu_id);
u32 nvsim_instance_of(const struct nvsim_gpu *gpu);
struct nvsim_gpu *nvsim_gpu_of_instance(u32 inst);
void nvsim_gpu_update_timer(struct nvsim_gpu *gpu);
void nvsim_gpu_put(struct nvsim_gpu *gpu);

/* rm.c */
long nvsim_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);
void nvsim_file_release_rm(struct nvsim_file *nvfp);

/* objects.c */
int nvsim_copy_in(const struct nvsim_call *call, void *dst, u64 ptr,
		  size_t size);
int nvsim_copy_out(const struct nvsim_call *call, u64 ptr, const void *src,
		   size_t size);
NV_STATUS nvsim_client_get(const struct nvsim_call *call, NvHandle hClient,
			   struct nvsim_client **out);
struct nvsim_object *nvsim_object_find(struct nvsim_client *client,
				       NvHandle handle);
NV_STATUS nvsim_object_new(const struct nvsim_call *call,
			   struct nvsim_client *client,
			   struct nvsim_object *parent, NvHandle *handle,
			   u32 hclass, enum nvsim_obj_type type,
			   struct nvsim_object **out);
void nvsim_object_destroy(struct nvsim_object *obj);
struct nvsim_object *nvsim_object_ref(struct nvsim_client *client, NvHandle handle);
NV_STATUS nvsim_object_depend(struct nvsim_object *dep, struct nvsim_object *dant);
void nvsim_client_destroy(struct nvsim_client *client);
void nvsim_rm_alloc(const struct nvsim_call *call, NVOS64_PARAMETERS *p);
void nvsim_rm_free(const struct nvsim_call *call, NVOS00_PARAMETERS *p);
void nvsim_rm_dup(const struct nvsim_call *call, NVOS55_PARAMETERS *p);
void nvsim_rm_share(const struct nvsim_call *call, NVOS57_PARAMETERS *p);
void nvsim_free_file_clients(struct nvsim_file *nvfp);
void nvsim_free_kernel_clients(void);
void nvsim_check_idle(void);
bool nvsim_client_on_gpu(struct nvsim_client *client, struct nvsim_gpu *gpu);

/* memory.c */
NV_STATUS nvsim_mem_create(struct nvsim_gpu *gpu, u32 hclass, u64 size,
			   pid_t tgid, struct nvsim_mem **out);
void nvsim_mem_get(struct nvsim_mem *mem);
void nvsim_mem_put(struct nvsim_mem *mem);
void nvsim_rm_alloc_os_desc(const struct nvsim_call *call,
			    NVOS02_PARAMETERS *p);
void nvsim_rm_alloc_os_desc_kernel(const struct nvsim_call *call,
				   NVOS02_PARAMETERS *p);
NV_STATUS nvsim_rm_round(u64 *size, u32 *attr, u32 *attr2);
NV_STATUS nvsim_rm_sysmem_round(u64 *size, u32 *attr, u32 *attr2);
NV_STATUS nvsim_alloc_memory_object(const struct nvsim_call *call,
				    struct nvsim_client *client,
				    struct nvsim_object *parent,
				    NvHandle *handle, u32 hclass, u64 size,
				    struct nvsim_object **out);
u64 nvsim_pid_fb_bytes(pid_t tgid, struct nvsim_gpu *gpu);
void nvsim_rm_alloc_memory(const struct nvsim_call *call,
			   NVOS02_PARAMETERS *p);
void nvsim_rm_vid_heap(const struct nvsim_call *call, NVOS32_PARAMETERS *p);
pid_t nvsim_charge_tgid(const struct nvsim_call *call,
			struct nvsim_client *client);

/* control.c */
void nvsim_rm_control(const struct nvsim_call *call, NVOS54_PARAMETERS *p);

/* mmap.c */
NV_STATUS nvsim_create_mmap_context(const struct nvsim_call *call,
				   NvHandle hClient, NvHandle hDevice,
				   NvHandle hMemory, u64 offset, u64 length,
				   int fd, u64 *cookie);
void nvsim_rm_map(const struct nvsim_call *call, NVOS33_PARAMETERS *p,
		  int fd);
void nvsim_rm_unmap(const struct nvsim_call *call, NVOS34_PARAMETERS *p);
void nvsim_mapctx_clear(struct nvsim_file *nvfp);
int nvsim_mmap(struct file *filp, struct vm_area_struct *vma);
void nvsim_kernel_map(const struct nvsim_call *call, NVOS33_PARAMETERS *p);
void nvsim_kernel_unmap(const struct nvsim_call *call, NVOS34_PARAMETERS *p);
void nvsim_kmaps_free(void);
void nvsim_kmaps_drop_channel(struct nvsim_channel *ch);

/* vaspace.c */
NV_STATUS nvsim_vaspace_ctor(const struct nvsim_call *call,
			     struct nvsim_client *client,
			     struct nvsim_object *parent, NvHandle *handle,
			     u32 hclass, void *params);
NV_STATUS nvsim_virtual_va_assign(struct nvsim_object *obj, bool fixed,
				  u64 base, u64 size);
void nvsim_dma_maps_drop(struct nvsim_object *obj);
int nvsim_esc_map_memory_dma(const struct nvsim_call *call, u32 nr, void *buf,
			     u32 size);

/* peer.c */
typedef struct {
	u8 gpuUuidA[NV_UUID_LEN];
	u8 gpuUuidB[NV_UUID_LEN];
	NV_STATUS rmStatus;
} NVSIM_UVM_PEER_ACCESS_PARAMS;        /* UVM_{ENABLE,DISABLE}_PEER_ACCESS_PARAMS */
#define NVSIM_UVM_ENABLE_PEER_ACCESS  29        /* uvm_ioctl.h, UVM_IOCTL_BASE(29) */
#define NVSIM_UVM_DISABLE_PEER_ACCESS 30
void nvsim_p2p_teardown(struct nvsim_object *obj);
void nvsim_uvm_peer_register(struct nvsim_file *nvfp, const u8 *uuid);
NV_STATUS nvsim_uvm_enable_peer_access(struct nvsim_file *nvfp, void *buf);
NV_STATUS nvsim_uvm_disable_peer_access(struct nvsim_file *nvfp, void *buf);
void nvsim_uvm_peers_fini(struct nvsim_file *nvfp);
void nvsim_exports_fini(struct nvsim_file *nvfp);

/* dmabuf.c */
int nvsim_esc_export_dmabuf(struct nvsim_file *nvfp, void *buf, u32 size);
void nvsim_dmabuf_gpu_stop(struct nvsim_gpu *gpu);

/* uvm.c */
int nvsim_uvm_init(void);
void nvsim_uvm_exit(void);
void nvsim_uvm_ext_free(struct nvsim_uvm_ext *ext);
void nvsim_uvm_xranges_free(struct nvsim_file *nvfp);

/* cuda.c: UVM commands CUDA asks (uvm.c's table dispatches them). */
#define NVSIM_UVM_PAGEABLE_MEM_ACCESS   39
typedef struct {
	NvBool pageableMemAccess;
	NV_STATUS rmStatus;
} NVSIM_UVM_PAGEABLE_MEM_ACCESS_PARAMS;
NV_STATUS nvsim_uvm_pageable_mem_access(struct nvsim_file *nvfp, void *buf);
#define NVSIM_UVM_CREATE_RANGE_GROUP    23
#define NVSIM_UVM_DESTROY_RANGE_GROUP   24
#define NVSIM_UVM_UNREGISTER_GPU        38
typedef struct {
	NvU64 rangeGroupId NV_ALIGN8;
	NV_STATUS rmStatus;
} NVSIM_UVM_RANGE_GROUP_PARAMS;         /* CREATE_ and DESTROY_RANGE_GROUP */
typedef struct {
	u8 gpu_uuid[NV_UUID_LEN];
	NV_STATUS rmStatus;
} NVSIM_UVM_UNREGISTER_GPU_PARAMS;
NV_STATUS nvsim_uvm_create_range_group(struct nvsim_file *nvfp, void *buf);
NV_STATUS nvsim_uvm_destroy_range_group(struct nvsim_file *nvfp, void *buf);
NV_STATUS nvsim_uvm_unregister_gpu(struct nvsim_file *nvfp, void *buf);
void nvsim_cuda_subdevice_teardown(struct nvsim_object *obj);
void nvsim_cuda_uvm_file_init(struct nvsim_file *nvfp);
void nvsim_cuda_uvm_file_fini(struct nvsim_file *nvfp);

/* store.c */
struct nvsim_store *nvsim_mem_store(struct nvsim_mem *mem);
void nvsim_store_get(struct nvsim_store *st);
void nvsim_store_put(struct nvsim_store *st);
struct page *nvsim_store_page(struct nvsim_store *st, unsigned long idx);
struct page *nvsim_mem_page(struct nvsim_mem *mem, unsigned long idx);
u64 nvsim_store_bytes(void);

/* pbdma.c */
void nvsim_pb_work(struct work_struct *work);

/* fifo.c */
NV_STATUS nvsim_tsg_create(struct nvsim_gpu *gpu, struct nvsim_client *client,
			   NvHandle handle, struct nvsim_tsg **out);
void nvsim_tsg_free(struct nvsim_tsg *tsg);
void nvsim_tsg_put(struct nvsim_tsg *tsg);
void nvsim_pid_busy_release(struct nvsim_client *client);
NV_STATUS nvsim_tsg_object_init(struct nvsim_object *obj, const void *params);
NV_STATUS nvsim_channel_object_init(struct nvsim_object *obj,
				    const void *params);
void nvsim_channel_object_fini(struct nvsim_object *obj);

/* engine.c */
void nvsim_engine_init(struct nvsim_gpu *gpu);
void nvsim_engine_fini(struct nvsim_gpu *gpu);
void nvsim_engine_add_tsg(struct nvsim_tsg *tsg);
void nvsim_engine_remove_tsg(struct nvsim_tsg *tsg);
void nvsim_engine_add_channel(struct nvsim_channel *ch);
void nvsim_engine_remove_channel(struct nvsim_channel *ch);
void nvsim_engine_set_tsg(struct nvsim_tsg *tsg, const bool *enabled,
			  const u64 *timeslice_us, const u32 *interleave);
void nvsim_engine_set_channel(struct nvsim_channel *ch, bool enabled);
void nvsim_engine_preempt(struct nvsim_tsg *tsg);

/* rmops.c: nothing beyond the exported symbol in nvabi.h */
void nvsim_rmops_exit(void);

/* debugfs.c */
void nvsim_debugfs_init(void);
void nvsim_debugfs_exit(void);

/* fault.c: fault injection (a test hook; debugfs fail_*) */
enum nvsim_fault_kind {
	NVSIM_FK_OPEN,
	NVSIM_FK_MMAP,
	NVSIM_FK_ESC,
	NVSIM_FK_RM_ALLOC,
	NVSIM_FK_RM_FREE,
	NVSIM_FK_RM_CONTROL,
	NVSIM_FK_RM_DUP_OBJECT,
	NVSIM_FK_RM_ALLOC_MEMORY,
	NVSIM_FK_RM_VID_HEAP_CONTROL,
	NVSIM_FK_RM_MAP_MEMORY,
	NVSIM_FK_RM_UNMAP_MEMORY,
	NVSIM_FK_UVM_OPEN,
	NVSIM_FK_UVM_MMAP,
	NVSIM_FK_UVM,
	NVSIM_FK_NR
};

DECLARE_STATIC_KEY_FALSE(nvsim_fault_key);
NV_STATUS __nvsim_fault_rm(enum nvsim_fault_kind k, u32 num, bool kernel);
int __nvsim_fault_errno(enum nvsim_fault_kind k, u32 num);
void nvsim_fault_debugfs_init(struct dentry *dir);
void nvsim_fault_exit(void);

/* An RM or UVM call: the NV_STATUS to fail it with, NV_OK to run it. */
static inline NV_STATUS nvsim_fault_rm(enum nvsim_fault_kind k, u32 num,
				       const struct nvsim_call *call)
{
	if (static_branch_unlikely(&nvsim_fault_key))
		return __nvsim_fault_rm(k, num, call && call->kernel);
	return NV_OK;
}

/* An open, mmap or escape: the -errno to fail it with, 0 to run it. */
static inline int nvsim_fault_errno(enum nvsim_fault_kind k, u32 num)
{
	if (static_branch_unlikely(&nvsim_fault_key))
		return __nvsim_fault_errno(k, num);
	return 0;
}

static inline bool nvsim_is_fb_class(u32 hclass)
{
	return hclass == NV01_MEMORY_LOCAL_USER ||
	       hclass == NV01_MEMORY_LOCAL_PRIVILEGED;
}

#endif /* NVSIM_H */
