// SPDX-License-Identifier: GPL-2.0
/*
 * nvfuzz - a fuzzer for the ioctl and mmap surface of NVIDIA's device nodes,
 * as vgpu.ko presents them per slice and as nvsim.ko presents them directly.
 * docs/fuzzing.md says how to run it and what it checks.
 *
 *   nvfuzz DIR [--other DIR] [--seed N] [--calls N | --seconds S]
 *          [--procs P] [--threads T] [--release NAME] [--corpus FILE] [--hold]
 *
 * DIR holds nvidiactl, nvidia<i>, nvidia-uvm (a slice's node directory, or
 * /dev for nvsim).  --other names a second directory (another slice) whose
 * descriptors are passed where a call takes a descriptor.
 *
 * Calls are generated from the release's tables (kmod/include/nvrel_tables.h:
 * every escape, class, control and UVM command with its parameter size and
 * its embedded-pointer flags), not from a hand list.  Coverage is "outcome
 * coverage": the distinct (node, escape, item, errno, NV_STATUS) tuples seen;
 * an input that produced a new tuple joins an in-memory corpus, which later
 * calls mutate in preference to generating afresh.  The corpus starts from
 * --corpus (tools/fuzz/corpus.py makes it from recorded traces).
 *
 * The fuzzer itself never faults by accident: parameters live in its own
 * arenas, and the only unreadable memory a call names is a guard page mapped
 * PROT_NONE on purpose (or an address that cannot be mapped at all).  Touching
 * a node's mapping is done under a SIGSEGV/SIGBUS catcher; any other signal
 * kills the worker and counts as a crash of the fuzzer.
 *
 * The last line on stdout is one JSON object (the figures).  With --hold the
 * workers keep every descriptor, object and mapping open after the budget
 * until stdin reaches EOF, so that a driver (tools/fuzz/run.py) can compare
 * what vgpu.ko charged with what nvsim holds while nothing moves.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "nvabi.h"
#include "nvrel.h"
#include "nvrel_tables.h"

#define MAX_PROCS       64
#define MAX_THREADS     16
#define MAX_GPUS        8
#define MAX_FDS         48
#define MAX_HANDLES     384
#define MAX_CLIENTS     24
#define MAX_MAPS        32
#define MAX_MAPOFFS     32
#define TOP_MAX         16384           /* escape params: the _IOC size field */
#define PTR_MAX         16384           /* RM_CONTROL / RM_ALLOC params */
#define LIST_MAX        4096            /* one embedded list */
#define OUT_CAP         (1u << 18)      /* outcome table, shared by all */
#define CORPUS_MAX      1024
#define RACE_SZ         (64 * 1024)
#define PAGE            4096

/* The arena: A (top params), B (pointed params), C (lists), X (XFER header),
 * then a PROT_NONE guard, a PROT_READ page and a second guard. */
#define AR_A            0
#define AR_B            (20 * 1024)
#define AR_C            (40 * 1024)
#define AR_X            (112 * 1024)
#define AR_RW           (120 * 1024)
#define AR_TOTAL        (AR_RW + 3 * PAGE)

#define NR_MMAP         0x1000          /* pseudo numbers for the outcome key */
#define NR_MUNMAP       0x1001
#define NR_TOUCH        0x1002
#define NR_OPEN         0x1003

enum node { N_CTL, N_GPU, N_UVM, N_OTHER_CTL, N_OTHER_GPU, N_OTHER_UVM, N_NKINDS };
static const char *const node_names[] = { "ctl", "gpu", "uvm", "ctl2", "gpu2", "uvm2" };

enum fdkind { F_NODE, F_PIPE, F_NULL, F_EVENT, F_CLOSED };

enum place { P_NORMAL, P_TAIL, P_RO, P_UNMAPPED, P_RACE };

enum kind {
	K_ESCAPE, K_ALLOC, K_CONTROL, K_FREE, K_UVM, K_XFER, K_MMAP, K_MUNMAP,
	K_TOUCH, K_REOPEN, K_REPLAY, K_MUTATED, K_EFAULT, K_OK, K_TOUCH_FAULT,
	K_NEW_OUTCOME, K_MAP_EXT_UNSURE, K_NKINDS
};
static const char *const kind_names[] = {
	"escape", "rm_alloc", "rm_control", "rm_free", "uvm", "xfer", "mmap",
	"munmap", "touch", "reopen", "corpus_replay", "mutated", "efault", "ok",
	"touch_fault", "new_outcome", "map_ext_unsure",
};

/* Shared by every worker process (MAP_SHARED before fork). */
struct shared {
	atomic_ullong claimed;          /* calls handed out */
	atomic_ullong done;             /* ioctls made */
	atomic_ullong ops;              /* every operation: ioctls, mmaps, ... */
	atomic_ullong kinds[K_NKINDS];
	atomic_ullong outcomes;
	atomic_ullong slots[OUT_CAP];   /* the outcome set (0: empty) */
	atomic_int stop;
};

/* One generated call: what the corpus keeps and mutation changes. */
struct call {
	u8 node;                        /* enum node */
	u8 gpu;                         /* the GPU node's index */
	u8 raw_psize;                   /* leave paramsSize as generated */
	u8 pad;
	u32 nr;                         /* escape, or UVM command */
	u32 item;                       /* class / control / 0 */
	u32 size;                       /* top params bytes */
	u32 psize;                      /* pointed params bytes (control, alloc) */
	int fdoff;                      /* descriptor at this offset of the top params, -1 */
	u32 newh;                       /* a recorded handle the driver picked (corpus) */
	u8 *in;                         /* size bytes */
	u8 *pin;                        /* psize bytes */
};

struct corpus_ent {
	struct call c;
	int seq;                        /* sequence id (file), -1: found here */
	int seq_next;                   /* the next call of the sequence, -1: end */
};

struct fdent {
	int fd;
	u8 kind;                        /* enum fdkind */
	u8 node;                        /* enum node, F_NODE only */
	u8 gpu;
};

struct hent {
	u32 client, h, cls, parent;
	int dead;
};

struct mapent {
	void *p;
	size_t len;
};

struct th {
	int proc, id;
	u64 rng;
	struct fdent fds[MAX_FDS];
	int nfds;
	u32 clients[MAX_CLIENTS];
	int nclients;
	struct hent hs[MAX_HANDLES];
	int nh;
	u64 mapoffs[MAX_MAPOFFS];
	int nmapoffs;
	struct mapent maps[MAX_MAPS];
	int nmaps;
	u32 gpu_ids[MAX_GPUS];
	int ngpu_ids;
	u8 *arena;
	u8 *ro;
	u8 *guard;
	u32 next_handle;
	int clean;                      /* bootstrap: every block placed plainly */
	/* the call being made, kept for the corpus */
	u8 topbuf[TOP_MAX + 64];
	u8 ptrbuf[PTR_MAX + 64];
};

/* ------------------------------------------------------------ options */
static const char *opt_dir = "/dev";
static const char *opt_other;
static const char *opt_corpus;
static const char *opt_release;
static u64 opt_seed;
static int opt_seed_set;
static u64 opt_calls;
static double opt_seconds;
static int opt_procs = 1, opt_threads = 1, opt_hold;
static int opt_no_map_ext;      /* --no-map-ext: keep charges exactly comparable */

static const struct nvrel_release *rel;
static struct shared *sh;
static int ngpus, nother_gpus;
static double t_start;

static pthread_mutex_t corpus_lock = PTHREAD_MUTEX_INITIALIZER;
static struct corpus_ent *corpus;
static int ncorpus, nfile_corpus;

static u8 *race_region;
static atomic_int racers_stop;

static int opt_check_slice = -1;         /* --check-slice: compare after every op */
static int opt_check_slice2 = -1;        /* and a second slice (--other's), summed */
static __thread char lastop[8192];      /* what the last operation was (--check-slice) */

static __thread sigjmp_buf touch_jmp;
static __thread volatile sig_atomic_t in_touch;

/* ------------------------------------------------------------ helpers */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static u64 rnd(struct th *t)
{
	/* xorshift64* */
	u64 x = t->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static u32 below(struct th *t, u32 n)
{
	return n ? (u32)(rnd(t) % n) : 0;
}

static int chance(struct th *t, int pct)
{
	return (int)below(t, 100) < pct;
}

static void fill_random(struct th *t, u8 *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (u8)rnd(t);
}

static void put32(u8 *p, size_t size, size_t off, u32 v)
{
	if (off + 4 <= size)
		memcpy(p + off, &v, 4);
}

static void put64(u8 *p, size_t size, size_t off, u64 v)
{
	if (off + 8 <= size)
		memcpy(p + off, &v, 8);
}

static u32 get32(const u8 *p, size_t size, size_t off)
{
	u32 v = 0;

	if (off + 4 <= size)
		memcpy(&v, p + off, 4);
	return v;
}

static void count(enum kind k)
{
	atomic_fetch_add_explicit(&sh->kinds[k], 1, memory_order_relaxed);
}

static u64 mix(u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* Record an outcome; true if it was new. */
static int outcome(int node, u32 nr, u32 item, int err, u32 status)
{
	u64 key = mix(((u64)node << 56) ^ ((u64)nr << 40) ^ ((u64)(u32)err << 32) ^
		      mix(((u64)item << 32) | status));
	u32 i;

	if (!key)
		key = 1;
	for (i = 0; i < 64; i++) {
		atomic_ullong *s = &sh->slots[(key + i) & (OUT_CAP - 1)];
		unsigned long long cur = atomic_load_explicit(s, memory_order_relaxed);

		if (cur == key)
			return 0;
		if (!cur) {
			unsigned long long zero = 0;

			if (atomic_compare_exchange_strong(s, &zero, key)) {
				atomic_fetch_add(&sh->outcomes, 1);
				count(K_NEW_OUTCOME);
				return 1;
			}
			if (zero == key)
				return 0;
		}
	}
	return 0;                       /* table full: counted as known */
}

static int is_root_class(u32 cls)
{
	return cls == NV01_ROOT || cls == NV01_ROOT_NON_PRIV || cls == NV01_ROOT_CLIENT;
}

static int node_is_gpu(int n)
{
	return n == N_GPU || n == N_OTHER_GPU;
}

static int node_is_uvm(int n)
{
	return n == N_UVM || n == N_OTHER_UVM;
}

/* ------------------------------------------------------------ descriptors */
static int open_node(int node, int gpu)
{
	char path[512];
	const char *dir = node >= N_OTHER_CTL ? opt_other : opt_dir;

	if (!dir)
		return -1;
	if (node_is_gpu(node))
		snprintf(path, sizeof(path), "%s/nvidia%d", dir, gpu);
	else if (node_is_uvm(node))
		snprintf(path, sizeof(path), "%s/nvidia-uvm", dir);
	else
		snprintf(path, sizeof(path), "%s/nvidiactl", dir);
	return open(path, O_RDWR | O_CLOEXEC);
}

static void add_fd(struct th *t, int fd, int kind, int node, int gpu)
{
	if (fd < 0 || t->nfds >= MAX_FDS)
		return;
	t->fds[t->nfds++] = (struct fdent){ fd, (u8)kind, (u8)node, (u8)gpu };
}

/* A node's descriptor of this thread, opening one if none. */
static int node_fd(struct th *t, int node, int gpu)
{
	int i, fd, n = 0, pick;

	for (i = 0; i < t->nfds; i++)
		if (t->fds[i].kind == F_NODE && t->fds[i].node == node &&
		    (!node_is_gpu(node) || t->fds[i].gpu == gpu))
			n++;
	if (n) {
		pick = (int)below(t, (u32)n);
		for (i = 0; i < t->nfds; i++)
			if (t->fds[i].kind == F_NODE && t->fds[i].node == node &&
			    (!node_is_gpu(node) || t->fds[i].gpu == gpu) && !pick--)
				return t->fds[i].fd;
	}
	fd = open_node(node, gpu);
	outcome(node, NR_OPEN, 0, fd < 0 ? errno : 0, 0);
	add_fd(t, fd, F_NODE, node, gpu);
	return fd;
}

/* Any descriptor, for a call that takes one: mostly the fitting node. */
static int pick_fd(struct th *t, int want)
{
	u32 r = below(t, 100);

	if (r < 55 && want >= 0)
		return node_fd(t, want, node_is_gpu(want) ? (int)below(t, (u32)ngpus) : 0);
	if (r < 85 && t->nfds)
		return t->fds[below(t, (u32)t->nfds)].fd;
	if (r < 90)
		return -1;
	if (r < 95)
		return (int)below(t, 1024);
	return 1 << 30;
}

/* -------------------------------------------------------------- handles */
static u32 pick_client(struct th *t)
{
	u32 r = below(t, 100);

	if (r < 85 && t->nclients)
		return t->clients[below(t, (u32)t->nclients)];
	if (r < 92 && t->nh)
		return t->hs[below(t, (u32)t->nh)].client;
	if (r < 96)
		return 0;
	return (u32)rnd(t);
}

static struct hent *pick_obj(struct th *t, u32 client, u32 cls, int live)
{
	int i, n = 0, pick;

	for (i = 0; i < t->nh; i++)
		if ((!client || t->hs[i].client == client) && (!cls || t->hs[i].cls == cls) &&
		    (!live || !t->hs[i].dead))
			n++;
	if (!n)
		return NULL;
	pick = (int)below(t, (u32)n);
	for (i = 0; i < t->nh; i++)
		if ((!client || t->hs[i].client == client) && (!cls || t->hs[i].cls == cls) &&
		    (!live || !t->hs[i].dead) && !pick--)
			return &t->hs[i];
	return NULL;
}

/* A handle under client: mostly a live object (of class cls if any). */
static u32 pick_handle(struct th *t, u32 client, u32 cls)
{
	struct hent *h;
	u32 r = below(t, 100);

	if (r < 60 && (h = pick_obj(t, client, cls, 1)))
		return h->h;
	if (r < 75 && (h = pick_obj(t, client, 0, 1)))
		return h->h;
	if (r < 82 && (h = pick_obj(t, 0, 0, 0)))
		return h->h;            /* maybe dead, maybe another client's */
	if (r < 88)
		return client;
	if (r < 92)
		return 0;
	return (u32)rnd(t);
}

static u32 new_handle(struct th *t)
{
	u32 r = below(t, 100);

	if (r < 85)
		return 0xcf000000u | ((u32)t->proc << 16) | ((u32)t->id << 12) |
		       (t->next_handle++ & 0xfff);
	if (r < 92)
		return 0;               /* the driver picks */
	if (r < 96 && t->nh)
		return t->hs[below(t, (u32)t->nh)].h;   /* in use */
	return (u32)rnd(t);
}

static void add_handle(struct th *t, u32 client, u32 h, u32 cls, u32 parent)
{
	struct hent *e;

	if (!h)
		return;
	if (t->nh >= MAX_HANDLES) {
		/* forget the oldest dead one, else a random one */
		int i, victim = (int)below(t, MAX_HANDLES);

		for (i = 0; i < t->nh; i++)
			if (t->hs[i].dead) {
				victim = i;
				break;
			}
		t->hs[victim] = t->hs[--t->nh];
	}
	e = &t->hs[t->nh++];
	*e = (struct hent){ client, h, cls, parent, 0 };
	if (is_root_class(cls) && t->nclients < MAX_CLIENTS)
		t->clients[t->nclients++] = h;
}

static void kill_handle(struct th *t, u32 client, u32 h)
{
	int i;

	for (i = 0; i < t->nh; i++)
		if (t->hs[i].client == client && (t->hs[i].h == h || t->hs[i].parent == h))
			t->hs[i].dead = 1;
	if (client == h) {
		for (i = 0; i < t->nclients; i++)
			if (t->clients[i] == h) {
				t->clients[i] = t->clients[--t->nclients];
				break;
			}
		for (i = 0; i < t->nh; i++)
			if (t->hs[i].client == h)
				t->hs[i].dead = 1;
	}
}

/* ---------------------------------------------------------- ABI facts */
/* Where an escape's NV_STATUS and descriptor are (595.45.04's offsets, which
 * every release keeps for the members read: nvrel.h). */
static int esc_status_off(u32 nr, u32 size)
{
	switch (nr) {
	case NV_ESC_RM_ALLOC:
		return size >= sizeof(NVOS64_PARAMETERS) ?
		       (int)offsetof(NVOS64_PARAMETERS, status) :
		       (int)offsetof(NVOS21_PARAMETERS, status);
	case NV_ESC_RM_CONTROL: return offsetof(NVOS54_PARAMETERS, status);
	case NV_ESC_RM_FREE: return offsetof(NVOS00_PARAMETERS, status);
	case NV_ESC_RM_ALLOC_MEMORY: return offsetof(NVOS02_PARAMETERS, status);
	case NV_ESC_RM_ALLOC_OBJECT: return offsetof(NVOS05_PARAMETERS, status);
	case NV_ESC_RM_DUP_OBJECT: return offsetof(NVOS55_PARAMETERS, status);
	case NV_ESC_RM_VID_HEAP_CONTROL: return offsetof(NVOS32_PARAMETERS, status);
	case NV_ESC_RM_MAP_MEMORY: return offsetof(NVOS33_PARAMETERS, status);
	case NV_ESC_RM_UNMAP_MEMORY: return offsetof(NVOS34_PARAMETERS, status);
	case NV_ESC_RM_MAP_MEMORY_DMA:
	case NV_ESC_RM_UNMAP_MEMORY_DMA:
		return (int)size - 4;
	case NV_ESC_ALLOC_OS_EVENT: return offsetof(nv_ioctl_alloc_os_event_t, Status);
	case NV_ESC_FREE_OS_EVENT: return offsetof(nv_ioctl_free_os_event_t, Status);
	case NV_ESC_STATUS_CODE: return offsetof(nv_ioctl_status_code_t, status);
	case NV_ESC_EXPORT_TO_DMABUF_FD: return offsetof(nv_ioctl_export_to_dma_buf_fd_t, status);
	default: return -1;
	}
}

static int esc_fd_off(u32 nr)
{
	switch (nr) {
	case NV_ESC_REGISTER_FD: return offsetof(nv_ioctl_register_fd_t, ctl_fd);
	case NV_ESC_ALLOC_OS_EVENT: return offsetof(nv_ioctl_alloc_os_event_t, fd);
	case NV_ESC_FREE_OS_EVENT: return offsetof(nv_ioctl_free_os_event_t, fd);
	case NV_ESC_RM_ALLOC_MEMORY: return offsetof(nv_ioctl_nvos02_parameters_with_fd, fd);
	case NV_ESC_RM_MAP_MEMORY: return offsetof(nv_ioctl_nvos33_parameters_with_fd, fd);
	case NV_ESC_EXPORT_TO_DMABUF_FD: return offsetof(nv_ioctl_export_to_dma_buf_fd_t, fd);
	default: return -1;
	}
}

/* The node an escape's descriptor should name, for the 55 % fitting case. */
static int esc_fd_node(u32 nr)
{
	switch (nr) {
	case NV_ESC_REGISTER_FD: return N_CTL;
	case NV_ESC_RM_ALLOC_MEMORY: return N_CTL;
	case NV_ESC_RM_MAP_MEMORY: return N_GPU;
	default: return -1;
	}
}

static int uvm_status_off(u32 cmd, u32 size)
{
	switch (cmd) {
	case UVM_INITIALIZE: return offsetof(UVM_INITIALIZE_PARAMS, rmStatus);
	case UVM_REGISTER_GPU: return offsetof(UVM_REGISTER_GPU_PARAMS, rmStatus);
	case UVM_REGISTER_GPU_VASPACE: return offsetof(UVM_REGISTER_GPU_VASPACE_PARAMS, rmStatus);
	case UVM_REGISTER_CHANNEL: return offsetof(UVM_REGISTER_CHANNEL_PARAMS, rmStatus);
	case UVM_MM_INITIALIZE: return offsetof(UVM_MM_INITIALIZE_PARAMS, rmStatus);
	case UVM_MAP_EXTERNAL_ALLOCATION:
	case UVM_FREE:
	case UVM_CREATE_EXTERNAL_RANGE:
	case UVM_MIGRATE:
	default:
		/* rmStatus is the last member, before at most 4 bytes of padding */
		if (size < 4)
			return -1;
		return (size % 8 == 0 && size >= 8) ? (int)size - 8 : (int)size - 4;
	}
}

static int uvm_fd_off(u32 cmd)
{
	switch (cmd) {
	case UVM_REGISTER_GPU: return offsetof(UVM_REGISTER_GPU_PARAMS, rmCtrlFd);
	case UVM_REGISTER_GPU_VASPACE: return offsetof(UVM_REGISTER_GPU_VASPACE_PARAMS, rmCtrlFd);
	case UVM_REGISTER_CHANNEL: return offsetof(UVM_REGISTER_CHANNEL_PARAMS, rmCtrlFd);
	case UVM_MAP_EXTERNAL_ALLOCATION:
		return offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmCtrlFd);
	case UVM_MM_INITIALIZE: return offsetof(UVM_MM_INITIALIZE_PARAMS, uvmFd);
	default: return -1;
	}
}

static const struct nvrel_item *pick_item(struct th *t, enum nvrel_kind k)
{
	const struct nvrel_table *tb = &rel->t[k];

	if (!tb->n)
		return NULL;
	return &tb->items[below(t, (u32)tb->n)];
}

/* The size a call presents: mostly the table's, else a boundary. */
static u32 vary_size(struct th *t, u32 base, u32 huge)
{
	switch (below(t, 16)) {
	case 0: return 0;
	case 1: return base ? base - 1 : 0;
	case 2: return base + 1;
	case 3: return huge;
	case 4: return base + 8 * (1 + below(t, 16));
	default: return base;
	}
}

/* ------------------------------------------------------------ placement */
static enum place pick_place(struct th *t)
{
	u32 r = below(t, 100);

	if (t->clean)
		return P_NORMAL;
	if (r < 76) return P_NORMAL;
	if (r < 86) return P_TAIL;
	if (r < 91) return P_RO;
	if (r < 94) return P_UNMAPPED;
	return P_RACE;
}

/*
 * Put n bytes somewhere per the placement and return the address the call
 * names.  The fuzzer writes only its own read-write memory: a read-only
 * placement was filled before it was made read-only (with random bytes), an
 * unmapped one is the guard page or an address nothing can map.
 */
static u8 *place(struct th *t, enum place p, size_t region, size_t room,
		 const u8 *src, size_t n)
{
	u8 *dst;

	switch (p) {
	case P_TAIL:
		if (n > AR_RW)
			n = AR_RW;
		dst = t->arena + AR_RW - n;
		memcpy(dst, src, n);
		return dst;
	case P_RO:
		return t->ro + (n < PAGE ? below(t, (u32)(PAGE - n + 1)) & ~7u : 0);
	case P_UNMAPPED:
		switch (below(t, 4)) {
		case 0: return t->guard;
		case 1: return NULL;
		case 2: return (u8 *)0xffff888000000000ULL;  /* a kernel address */
		default: return t->guard - (n ? below(t, (u32)(n < PAGE ? n : PAGE)) : 0);
		}
	case P_RACE: {
		size_t off = n < RACE_SZ ? below(t, (u32)(RACE_SZ - n + 1)) & ~7u : 0;

		if (n > RACE_SZ)
			n = RACE_SZ;
		dst = race_region + off;
		memcpy(dst, src, n);
		return dst;
	}
	default:
		if (n > room)
			n = room;
		dst = t->arena + region;
		memcpy(dst, src, n);
		return dst;
	}
}

static int readable(enum place p)
{
	return p == P_NORMAL || p == P_TAIL || p == P_RO;
}

/* Is [p, p+n) the fuzzer's own readable memory (arena or read-only page)? */
static int mine(const struct th *t, const u8 *p, size_t n)
{
	if (p >= t->arena && p + n <= t->arena + AR_RW && p + n >= p)
		return 1;
	return p >= t->ro && p + n <= t->ro + PAGE && p + n >= p;
}

/* ------------------------------------------------------------ corpus */
static u8 *dupmem(const u8 *p, size_t n)
{
	u8 *q = malloc(n ? n : 1);

	if (!q) {
		fprintf(stderr, "nvfuzz: out of memory\n");
		exit(3);
	}
	if (n)
		memcpy(q, p, n);
	return q;
}

static void corpus_add_locked(const struct call *c, int seq)
{
	struct corpus_ent *e;

	if (ncorpus >= CORPUS_MAX) {
		/* replace a found one (the file's entries stay) */
		int i = nfile_corpus + (int)(mix((u64)ncorpus ^ (u64)c->nr) %
					      (u64)(CORPUS_MAX - nfile_corpus > 0 ?
						    CORPUS_MAX - nfile_corpus : 1));

		if (i >= CORPUS_MAX || nfile_corpus >= CORPUS_MAX)
			return;
		free(corpus[i].c.in);
		free(corpus[i].c.pin);
		e = &corpus[i];
	} else {
		e = &corpus[ncorpus++];
	}
	e->c = *c;
	e->c.in = dupmem(c->in, c->size);
	e->c.pin = dupmem(c->pin, c->psize);
	e->seq = seq;
	e->seq_next = -1;
}

static void corpus_add(const struct call *c)
{
	pthread_mutex_lock(&corpus_lock);
	corpus_add_locked(c, -1);
	pthread_mutex_unlock(&corpus_lock);
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9') return ch - '0';
	if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
	return -1;
}

static size_t unhex(const char *s, u8 *out, size_t max)
{
	size_t n = 0;

	if (!strcmp(s, "-"))
		return 0;
	while (s[0] && s[1] && n < max) {
		int a = hexval(s[0]), b = hexval(s[1]);

		if (a < 0 || b < 0)
			break;
		out[n++] = (u8)(a << 4 | b);
		s += 2;
	}
	return n;
}

/*
 * The corpus file (tools/fuzz/corpus.py):
 *   # comment
 *   seq NAME
 *   call NODE GPU NR ITEM SIZE IN_HEX|- PIN_HEX|- FDOFF NEWH
 * NODE is ctl, gpu or uvm; NR the escape or UVM command; FDOFF -1 or the
 * offset of a descriptor in IN; NEWH 0 or the handle the driver picked.
 */
static void load_corpus(const char *path)
{
	FILE *f = fopen(path, "r");
	static char line[2 * (TOP_MAX + PTR_MAX) + 512];
	static u8 inb[TOP_MAX], pinb[PTR_MAX];
	int seq = -1, prev = -1, loaded = 0;

	if (!f) {
		fprintf(stderr, "nvfuzz: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	while (fgets(line, sizeof(line), f)) {
		char node[16], inhex_dummy;
		unsigned int gpu, nr, item, size, newh;
		int fdoff, off_in = 0, off_pin = 0, off_tail = 0;
		struct call c;

		(void)inhex_dummy;
		if (!strncmp(line, "seq ", 4)) {
			seq++;
			prev = -1;
			continue;
		}
		if (strncmp(line, "call ", 5))
			continue;
		if (sscanf(line, "call %15s %u %x %x %u %n%*s %n%*s %n%d %x", node, &gpu, &nr,
			   &item, &size, &off_in, &off_pin, &off_tail, &fdoff, &newh) != 7)
			continue;
		if (ncorpus >= CORPUS_MAX / 2)
			break;
		memset(&c, 0, sizeof(c));
		c.node = !strcmp(node, "uvm") ? N_UVM : !strcmp(node, "gpu") ? N_GPU : N_CTL;
		c.gpu = (u8)(ngpus ? gpu % (unsigned int)ngpus : 0);
		c.nr = nr;
		c.item = item;
		line[off_pin - 1] = 0;
		line[off_tail - 1] = 0;
		c.size = (u32)unhex(line + off_in, inb, sizeof(inb));
		if (size < c.size)
			c.size = size;
		c.psize = (u32)unhex(line + off_pin, pinb, sizeof(pinb));
		c.in = inb;
		c.pin = pinb;
		c.fdoff = fdoff;
		c.newh = newh;
		c.raw_psize = 1;
		corpus_add_locked(&c, seq < 0 ? 0 : seq);
		if (prev >= 0)
			corpus[prev].seq_next = ncorpus - 1;
		prev = ncorpus - 1;
		loaded++;
	}
	fclose(f);
	nfile_corpus = ncorpus;
	fprintf(stderr, "nvfuzz: corpus %s: %d calls in %d sequences\n", path, loaded, seq + 1);
}

/* ------------------------------------------------------------ the call */
struct result {
	int ret, err;
	u32 status;
	int have_status;
	u8 *top;                        /* where the top params were */
	enum place tp;
};

/* Lists the params name (NVREL_F_LISTS): pointers at ptr_off of buf. */
static void place_lists(struct th *t, const struct nvrel_item *it, u8 *buf, size_t bufsize,
			size_t *croff)
{
	unsigned int i;

	if (!it || !(it->flags & NVREL_F_LISTS) || !rel->ptrs)
		return;
	for (i = 0; i < it->nptrs; i++) {
		const struct nvrel_ptr *pd = &rel->ptrs[it->ptr0 + i];
		u64 cnt = 0, bytes;
		u8 tmp[LIST_MAX];
		enum place p = pick_place(t);
		u8 *where;

		if ((size_t)pd->ptr_off + 8 > bufsize)
			continue;
		if (pd->count_off != NVREL_NO_COUNT && (size_t)pd->count_off + pd->count_size <= bufsize) {
			if (chance(t, 80)) {
				cnt = below(t, 8);
				if (pd->elem_size == 1)
					cnt = below(t, 512);
				memcpy(buf + pd->count_off, &cnt, pd->count_size);
			} else {
				memcpy(&cnt, buf + pd->count_off, pd->count_size);
			}
			bytes = cnt * pd->elem_size;
		} else {
			bytes = pd->elem_size;
		}
		if (bytes > LIST_MAX)
			bytes = LIST_MAX;
		fill_random(t, tmp, (size_t)bytes);
		if (p == P_NORMAL && *croff + bytes > AR_X)
			*croff = AR_C;
		where = place(t, p, *croff, AR_X - *croff, tmp, (size_t)bytes);
		if (p == P_NORMAL)
			*croff += (bytes + 7) & ~7ull;
		put64(buf, bufsize, pd->ptr_off, (u64)(uintptr_t)where);
	}
}

static void harvest(struct th *t, const struct call *c, const u8 *top, int fd)
{
	u32 st;

	switch (c->nr) {
	case NV_ESC_RM_ALLOC: {
		u32 root = get32(top, c->size, offsetof(NVOS21_PARAMETERS, hRoot));
		u32 parent = get32(top, c->size, offsetof(NVOS21_PARAMETERS, hObjectParent));
		u32 h = get32(top, c->size, offsetof(NVOS21_PARAMETERS, hObjectNew));
		u32 cls = get32(top, c->size, offsetof(NVOS21_PARAMETERS, hClass));

		add_handle(t, is_root_class(cls) ? h : root, h, cls, parent);
		break;
	}
	case NV_ESC_RM_ALLOC_MEMORY:
		add_handle(t, get32(top, c->size, offsetof(NVOS02_PARAMETERS, hRoot)),
			   get32(top, c->size, offsetof(NVOS02_PARAMETERS, hObjectNew)),
			   get32(top, c->size, offsetof(NVOS02_PARAMETERS, hClass)),
			   get32(top, c->size, offsetof(NVOS02_PARAMETERS, hObjectParent)));
		break;
	case NV_ESC_RM_VID_HEAP_CONTROL: {
		u32 fn = get32(top, c->size, offsetof(NVOS32_PARAMETERS, function));

		if (fn == NVOS32_FUNCTION_ALLOC_SIZE || fn == NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT ||
		    fn == NVOS32_FUNCTION_ALLOC_SIZE_RANGE)
			add_handle(t, get32(top, c->size, offsetof(NVOS32_PARAMETERS, hRoot)),
				   get32(top, c->size, offsetof(NVOS32_PARAMETERS, data) + 4),
				   NV01_MEMORY_LOCAL_USER,
				   get32(top, c->size, offsetof(NVOS32_PARAMETERS, hObjectParent)));
		break;
	}
	case NV_ESC_RM_DUP_OBJECT:
		add_handle(t, get32(top, c->size, offsetof(NVOS55_PARAMETERS, hClient)),
			   get32(top, c->size, offsetof(NVOS55_PARAMETERS, hObject)), 0xd0d0,
			   get32(top, c->size, offsetof(NVOS55_PARAMETERS, hParent)));
		break;
	case NV_ESC_RM_FREE:
		kill_handle(t, get32(top, c->size, offsetof(NVOS00_PARAMETERS, hRoot)),
			    get32(top, c->size, offsetof(NVOS00_PARAMETERS, hObjectOld)));
		break;
	case NV_ESC_RM_MAP_MEMORY:
		if (c->size >= sizeof(NVOS33_PARAMETERS) && t->nmapoffs < MAX_MAPOFFS) {
			u64 a;

			memcpy(&a, top + offsetof(NVOS33_PARAMETERS, pLinearAddress), 8);
			t->mapoffs[t->nmapoffs++] = a;
		}
		break;
	case NV_ESC_CARD_INFO: {
		size_t i;

		for (i = 0; i + sizeof(nv_ioctl_card_info_t) <= c->size && t->ngpu_ids < MAX_GPUS;
		     i += sizeof(nv_ioctl_card_info_t)) {
			const nv_ioctl_card_info_t *ci = (const void *)(top + i);

			if (ci->valid)
				t->gpu_ids[t->ngpu_ids++] = ci->gpu_id;
		}
		break;
	}
	default:
		break;
	}
	(void)st;
	(void)fd;
}

/*
 * Make one call: place its parameters, name a descriptor where it takes one,
 * issue it, record the outcome.  Returns the outcome's newness.
 */
static int exec_call(struct th *t, struct call *c, enum place tp, int force_fd,
		     struct result *res)
{
	const struct nvrel_item *it = NULL;
	size_t croff = AR_C;
	int fd, node = c->node, is_uvm = node_is_uvm(node), fresh, saved_err;
	u8 *top, *pptr = NULL;
	unsigned long cmd;
	enum place pp = P_NORMAL;
	u32 status = 0;
	int have_status = 0, ret, xfer = 0;
	u32 size = c->size > TOP_MAX ? TOP_MAX : c->size;

	if (node >= N_OTHER_CTL && !opt_other)
		node = node - N_OTHER_CTL;
	if (opt_no_map_ext && node_is_uvm(node) && c->nr == UVM_MAP_EXTERNAL_ALLOCATION) {
		if (res)
			memset(res, 0, sizeof(*res));
		return 0;
	}
	fd = force_fd >= 0 ? force_fd :
	     node_fd(t, node, node_is_gpu(node) ? c->gpu % (ngpus ? ngpus : 1) : 0);

	memset(t->topbuf, 0, size + 8);
	memcpy(t->topbuf, c->in, size < c->size ? size : c->size);

	/* the pointed params (RM_CONTROL's params, RM_ALLOC's pAllocParms) */
	if (!is_uvm && (c->nr == NV_ESC_RM_CONTROL || c->nr == NV_ESC_RM_ALLOC) && size >= 24) {
		u32 psz = c->psize > PTR_MAX ? PTR_MAX : c->psize;

		it = nvrel_lookup(rel, c->nr == NV_ESC_RM_CONTROL ? NVREL_CTL : NVREL_CLS, c->item);
		memset(t->ptrbuf, 0, psz + 8);
		memcpy(t->ptrbuf, c->pin, psz);
		if (c->nr == NV_ESC_RM_CONTROL)
			place_lists(t, it, t->ptrbuf, psz, &croff);
		pp = psz ? pick_place(t) : P_UNMAPPED;
		pptr = psz || (!t->clean && chance(t, 50)) ?
		       place(t, pp, AR_B, AR_C - AR_B, t->ptrbuf, psz) : NULL;
		put64(t->topbuf, size, 16, (u64)(uintptr_t)pptr);
		if (!c->raw_psize)
			put32(t->topbuf, size, c->nr == NV_ESC_RM_ALLOC && size >= 48 ? 32 : 24,
			      c->psize);
		count(c->nr == NV_ESC_RM_CONTROL ? K_CONTROL : K_ALLOC);
	} else if (!is_uvm) {
		it = nvrel_lookup(rel, NVREL_ESC, c->nr);
		place_lists(t, it, t->topbuf, size, &croff);
	}
	if (c->fdoff >= 0)
		put32(t->topbuf, size, (size_t)c->fdoff,
		      (u32)pick_fd(t, is_uvm ? (c->nr == UVM_MM_INITIALIZE ? N_UVM : N_CTL) :
				   esc_fd_node(c->nr)));
	top = place(t, tp, AR_A, AR_B - AR_A, t->topbuf, size);

	if (is_uvm) {
		cmd = c->nr;
		count(K_UVM);
	} else if (size > _IOC_SIZEMASK || (!t->clean && chance(t, 4))) {
		nv_ioctl_xfer_t *x = (nv_ioctl_xfer_t *)(t->arena + AR_X);

		x->cmd = c->nr;
		x->size = size;
		x->ptr = (u64)(uintptr_t)top;
		switch (below(t, 12)) {
		case 0: x->size = 0; break;
		case 1: x->size = NV_ABSOLUTE_MAX_IOCTL_SIZE + 1; break;
		case 2: x->cmd = NV_ESC_IOCTL_XFER_CMD; break;
		case 3: x->ptr = (u64)(uintptr_t)t->guard; break;
		default: break;
		}
		cmd = _IOC(_IOC_READ | _IOC_WRITE, NV_IOCTL_MAGIC, NV_ESC_IOCTL_XFER_CMD,
			   sizeof(*x));
		xfer = 1;
		count(K_XFER);
	} else {
		cmd = _IOC(_IOC_READ | _IOC_WRITE, NV_IOCTL_MAGIC, c->nr & 0xff, size);
	}
	count(K_ESCAPE);

	ret = ioctl(fd, cmd, xfer ? (void *)(t->arena + AR_X) : (void *)top);
	saved_err = ret < 0 ? errno : 0;
	if (opt_check_slice >= 0) {
		int n = snprintf(lastop, sizeof(lastop),
				 "ioctl node %s gpu %u nr 0x%x item 0x%x size %u psize %u place %d/%d xfer %d fd %d ret %d errno %d in ",
				 node_names[node], c->gpu, c->nr, c->item, size, c->psize, tp, pp, xfer, fd,
				 ret, saved_err);
		u32 i;

		for (i = 0; i < size && i < 256 && n < (int)sizeof(lastop) - 8; i++)
			n += snprintf(lastop + n, sizeof(lastop) - n, "%02x", t->topbuf[i]);
		n += snprintf(lastop + n, sizeof(lastop) - n, " pin ");
		for (i = 0; i < c->psize && i < 512 && n < (int)sizeof(lastop) - 8; i++)
			n += snprintf(lastop + n, sizeof(lastop) - n, "%02x", t->ptrbuf[i]);
		if (mine(t, top, size) && n < (int)sizeof(lastop) - 16) {
			n += snprintf(lastop + n, sizeof(lastop) - n, " out ");
			for (i = 0; i < size && i < 256 && n < (int)sizeof(lastop) - 8; i++)
				n += snprintf(lastop + n, sizeof(lastop) - n, "%02x", top[i]);
		}
	}
	if (saved_err == EFAULT)
		count(K_EFAULT);

	if (!ret && readable(tp)) {
		/* the driver wrote the status only when the ioctl succeeded */
		int so = is_uvm ? uvm_status_off(c->nr, size) : esc_status_off(c->nr, size);

		if (so >= 0 && (u32)so + 4 <= size && mine(t, top + so, 4)) {
			memcpy(&status, top + so, 4);
			have_status = 1;
		}
	} else if (tp == P_RACE) {
		status = 0xfffffffe;    /* written by the racer: not an outcome */
	}
	if (!ret && (!have_status || !status) && (tp == P_NORMAL || tp == P_TAIL) &&
	    mine(t, top, size)) {
		count(K_OK);
		harvest(t, c, top, fd);
	}
	/*
	 * A UVM_MAP_EXTERNAL_ALLOCATION that may have failed in the driver:
	 * vgpu.ko takes the memory's charge reference whatever status comes
	 * back (docs/mediator.md, "The call page"), so the slice may be
	 * charged more than the driver holds until UVM_FREE or the file's end.
	 * So may one that succeeded over an older mapping, and an
	 * UVM_UNMAP_EXTERNAL that cut a mapping (the old charges stay until
	 * UVM_FREE of their range: uvm.c, as UVM keeps an external range's
	 * mappings until the range is freed).
	 */
	if (is_uvm && (c->nr == UVM_MAP_EXTERNAL_ALLOCATION ||
		       c->nr == UVM_UNMAP_EXTERNAL) &&
	    saved_err != EPERM && saved_err != EINVAL)
		count(K_MAP_EXT_UNSURE);
	fresh = outcome(node, c->nr, c->item, saved_err, have_status ? status : 0xffffffff);
	if (res) {
		res->ret = ret;
		res->err = saved_err;
		res->status = status;
		res->have_status = have_status;
		res->top = top;
		res->tp = tp;
	}
	atomic_fetch_add_explicit(&sh->done, 1, memory_order_relaxed);
	(void)pp;
	return fresh;
}

/* ---------------------------------------------------------- generation */
static void gen_alloc_params(struct th *t, struct call *c, u32 cls, u32 client)
{
	const struct nvrel_item *it = nvrel_lookup(rel, NVREL_CLS, cls);
	u32 base = it ? it->size : 0;
	struct hent *dev;

	c->psize = chance(t, 80) ? base : vary_size(t, base, 1u << 20);
	if (c->psize > PTR_MAX)
		c->psize = PTR_MAX;
	fill_random(t, c->pin, c->psize);
	if (chance(t, 70))
		memset(c->pin, 0, c->psize);
	switch (cls) {
	case NV01_DEVICE_0:
		put32(c->pin, c->psize, offsetof(NV0080_ALLOC_PARAMETERS, deviceId),
		      chance(t, 85) ? below(t, (u32)(ngpus ? ngpus : 1)) : (u32)rnd(t));
		if (chance(t, 20))
			put32(c->pin, c->psize, offsetof(NV0080_ALLOC_PARAMETERS, hClientShare),
			      pick_client(t));
		break;
	case NV20_SUBDEVICE_0:
		put32(c->pin, c->psize, 0, chance(t, 90) ? 0 : below(t, 4));
		break;
	case NV01_MEMORY_LOCAL_USER:
	case NV01_MEMORY_SYSTEM:
	case NV50_MEMORY_VIRTUAL: {
		static const u64 sizes[] = { 4096, 65536, 1 << 20, 2 << 20, 8 << 20, 64 << 20,
					     1ULL << 30, 1ULL << 40, 0, ~0ULL };
		u64 sz = sizes[below(t, sizeof(sizes) / sizeof(sizes[0]))];

		if (cls == NV50_MEMORY_VIRTUAL && c->psize == sizeof(NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS))
			break;
		if (chance(t, 30))
			sz = (below(t, 4096) + 1) * 4096ULL;
		put32(c->pin, c->psize, offsetof(NV_MEMORY_ALLOCATION_PARAMS, owner), 0x5647);
		put64(c->pin, c->psize, offsetof(NV_MEMORY_ALLOCATION_PARAMS, size), sz);
		if (chance(t, 20))
			put32(c->pin, c->psize, offsetof(NV_MEMORY_ALLOCATION_PARAMS, flags),
			      (u32)rnd(t));
		if (chance(t, 10))
			put32(c->pin, c->psize, offsetof(NV_MEMORY_ALLOCATION_PARAMS, hVASpace),
			      pick_handle(t, client, 0));
		break;
	}
	default:
		/* handles where allocation params usually start with them */
		if (c->psize >= 4 && chance(t, 50))
			put32(c->pin, c->psize, 0, pick_handle(t, client, 0));
		if (c->psize >= 8 && chance(t, 30))
			put32(c->pin, c->psize, 4, pick_handle(t, client, 0));
		break;
	}
	(void)dev;
}

static u32 class_parent(struct th *t, u32 client, u32 cls)
{
	if (is_root_class(cls))
		return 0;
	if (cls == NV01_DEVICE_0)
		return chance(t, 90) ? client : pick_handle(t, client, 0);
	if (cls == NV20_SUBDEVICE_0 || cls == NV01_MEMORY_LOCAL_USER || cls == NV01_MEMORY_SYSTEM ||
	    chance(t, 50))
		return pick_handle(t, client, chance(t, 70) ? NV01_DEVICE_0 : NV20_SUBDEVICE_0);
	return pick_handle(t, client, 0);
}

static void gen_rm_alloc(struct th *t, struct call *c, u32 cls)
{
	u32 client, size = chance(t, 70) ? sizeof(NVOS64_PARAMETERS) : sizeof(NVOS21_PARAMETERS);
	const struct nvrel_item *ei = nvrel_lookup(rel, NVREL_ESC, NV_ESC_RM_ALLOC);

	if (ei && chance(t, 5))
		size = vary_size(t, size, 4096);
	c->nr = NV_ESC_RM_ALLOC;
	c->item = cls;
	c->size = size;
	memset(c->in, 0, size);
	client = pick_client(t);
	if (is_root_class(cls)) {
		put32(c->in, size, 0, chance(t, 70) ? 0 : new_handle(t));
	} else {
		put32(c->in, size, 0, client);
		put32(c->in, size, 4, class_parent(t, client, cls));
		put32(c->in, size, 8, new_handle(t));
	}
	put32(c->in, size, 12, cls);
	if (size >= sizeof(NVOS64_PARAMETERS) && chance(t, 5))
		put64(c->in, size, offsetof(NVOS64_PARAMETERS, pRightsRequested),
		      (u64)(uintptr_t)t->guard);
	if (size >= sizeof(NVOS64_PARAMETERS) && chance(t, 5))
		put32(c->in, size, offsetof(NVOS64_PARAMETERS, flags), (u32)rnd(t));
	gen_alloc_params(t, c, cls, client);
}

static void gen_control(struct th *t, struct call *c)
{
	const struct nvrel_item *it = pick_item(t, NVREL_CTL);
	u32 cmd = it ? it->value : (u32)rnd(t), client, cls, obj;

	if (chance(t, 3))
		cmd = (u32)rnd(t);      /* not in the table: refused */
	c->nr = NV_ESC_RM_CONTROL;
	c->item = cmd;
	c->size = sizeof(NVOS54_PARAMETERS);
	memset(c->in, 0, c->size);
	client = pick_client(t);
	cls = cmd >> 16;
	if (!cls)
		obj = chance(t, 85) ? client : pick_handle(t, client, 0);
	else
		obj = pick_handle(t, client, cls);
	put32(c->in, c->size, offsetof(NVOS54_PARAMETERS, hClient), client);
	put32(c->in, c->size, offsetof(NVOS54_PARAMETERS, hObject), obj);
	put32(c->in, c->size, offsetof(NVOS54_PARAMETERS, cmd), cmd);
	if (chance(t, 3))
		put32(c->in, c->size, offsetof(NVOS54_PARAMETERS, flags), (u32)rnd(t));
	c->psize = vary_size(t, it ? it->size : 0, chance(t, 50) ? 0x7fffffffu : PTR_MAX);
	c->raw_psize = 0;
	if (c->psize > PTR_MAX) {
		/* claimed size beyond what is placed: the driver must refuse */
		put32(c->in, c->size, offsetof(NVOS54_PARAMETERS, paramsSize), c->psize);
		c->raw_psize = 1;
		c->psize = it ? it->size : 64;
		if (c->psize > PTR_MAX)
			c->psize = PTR_MAX;
	}
	fill_random(t, c->pin, c->psize);
	if (chance(t, 60))
		memset(c->pin, 0, c->psize);
	/* handles often lead a control's params */
	if (c->psize >= 4 && chance(t, 30))
		put32(c->pin, c->psize, 0, pick_handle(t, client, 0));
}

static void gen_free(struct th *t, struct call *c)
{
	struct hent *h = t->nh ? &t->hs[below(t, (u32)t->nh)] : NULL;
	u32 client = h && chance(t, 80) ? h->client : pick_client(t);

	c->nr = NV_ESC_RM_FREE;
	c->size = sizeof(NVOS00_PARAMETERS);
	memset(c->in, 0, c->size);
	put32(c->in, c->size, 0, client);
	if (h && chance(t, 85)) {
		put32(c->in, c->size, 4, chance(t, 80) ? h->parent : pick_handle(t, client, 0));
		put32(c->in, c->size, 8, h->h);
	} else if (chance(t, 50)) {
		put32(c->in, c->size, 8, client);       /* the whole client */
	} else {
		put32(c->in, c->size, 4, pick_handle(t, client, 0));
		put32(c->in, c->size, 8, pick_handle(t, client, 0));
	}
}

static void gen_escape(struct th *t, struct call *c)
{
	const struct nvrel_item *it = pick_item(t, NVREL_ESC);
	u32 nr = it ? it->value : 0, client = pick_client(t), size;
	int i;

	if (chance(t, 3))
		nr = NV_IOCTL_BASE + below(t, 40);      /* maybe not an escape at all */
	c->nr = nr;
	c->item = 0;
	size = it && it->value == nr ? it->size : below(t, 256);
	if (nr == NV_ESC_CARD_INFO)
		size = sizeof(nv_ioctl_card_info_t) * (1 + below(t, 32));
	c->size = vary_size(t, size, _IOC_SIZEMASK);
	memset(c->in, 0, c->size);
	if (chance(t, 25))
		fill_random(t, c->in, c->size);
	c->fdoff = esc_fd_off(nr);
	switch (nr) {
	case NV_ESC_CHECK_VERSION_STR: {
		nv_ioctl_rm_api_version_t v;

		memset(&v, 0, sizeof(v));
		v.cmd = chance(t, 60) ? NV_RM_API_VERSION_CMD_STRICT :
			chance(t, 50) ? NV_RM_API_VERSION_CMD_QUERY : NV_RM_API_VERSION_CMD_RELAXED;
		if (chance(t, 80))
			snprintf(v.versionString, sizeof(v.versionString), "%s", rel->name);
		else
			fill_random(t, (u8 *)v.versionString, sizeof(v.versionString));
		memcpy(c->in, &v, c->size < sizeof(v) ? c->size : sizeof(v));
		break;
	}
	case NV_ESC_ATTACH_GPUS_TO_FD:
		for (i = 0; i < t->ngpu_ids && (size_t)(i + 1) * 4 <= c->size; i++)
			put32(c->in, c->size, (size_t)i * 4, chance(t, 90) ? t->gpu_ids[i] : (u32)rnd(t));
		break;
	case NV_ESC_RM_ALLOC_MEMORY: {
		static const u32 classes[] = { NV01_MEMORY_LOCAL_USER, NV01_MEMORY_SYSTEM, 0x71, 0x3f };
		u64 limit = (below(t, 4096) + 1) * 4096ULL - 1;

		if (chance(t, 10))
			limit = rnd(t);
		put32(c->in, c->size, 0, client);
		put32(c->in, c->size, 4, pick_handle(t, client, NV01_DEVICE_0));
		put32(c->in, c->size, 8, new_handle(t));
		put32(c->in, c->size, 12, classes[below(t, 4)]);
		put64(c->in, c->size, offsetof(NVOS02_PARAMETERS, limit), limit);
		if (chance(t, 20))
			put64(c->in, c->size, offsetof(NVOS02_PARAMETERS, pMemory),
			      (u64)(uintptr_t)(chance(t, 50) ? t->arena + AR_C : t->guard));
		break;
	}
	case NV_ESC_RM_VID_HEAP_CONTROL: {
		static const u32 fns[] = { NVOS32_FUNCTION_ALLOC_SIZE, NVOS32_FUNCTION_FREE,
					   NVOS32_FUNCTION_INFO, NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT,
					   NVOS32_FUNCTION_ALLOC_SIZE_RANGE, 0, 7 };
		u32 fn = fns[below(t, 7)];
		size_t d = offsetof(NVOS32_PARAMETERS, data);

		put32(c->in, c->size, 0, client);
		put32(c->in, c->size, 4, pick_handle(t, client, NV01_DEVICE_0));
		put32(c->in, c->size, 8, fn);
		put32(c->in, c->size, d, 0x5647);
		put32(c->in, c->size, d + 4, fn == NVOS32_FUNCTION_FREE ?
		      pick_handle(t, client, NV01_MEMORY_LOCAL_USER) : new_handle(t));
		put64(c->in, c->size, offsetof(NVOS32_PARAMETERS, data.AllocSize.size),
		      chance(t, 90) ? (below(t, 2048) + 1) * 4096ULL : rnd(t));
		if (fn == NVOS32_FUNCTION_ALLOC_SIZE_RANGE)
			put64(c->in, c->size, offsetof(NVOS32_PARAMETERS, data.AllocSizeRange.rangeEnd),
			      ~0ULL);
		break;
	}
	case NV_ESC_RM_MAP_MEMORY: {
		struct hent *m = pick_obj(t, 0, NV01_MEMORY_LOCAL_USER, 1);
		u32 cl = m && chance(t, 80) ? m->client : client;

		put32(c->in, c->size, 0, cl);
		put32(c->in, c->size, 4, m && chance(t, 80) ? m->parent : pick_handle(t, cl, NV01_DEVICE_0));
		put32(c->in, c->size, 8, m ? m->h : pick_handle(t, cl, 0));
		put64(c->in, c->size, offsetof(NVOS33_PARAMETERS, length),
		      chance(t, 80) ? 4096ULL << below(t, 6) : rnd(t));
		put64(c->in, c->size, offsetof(NVOS33_PARAMETERS, offset),
		      chance(t, 80) ? 0 : rnd(t) & 0xffffff);
		break;
	}
	case NV_ESC_RM_UNMAP_MEMORY:
		put32(c->in, c->size, 0, client);
		put32(c->in, c->size, 4, pick_handle(t, client, NV01_DEVICE_0));
		put32(c->in, c->size, 8, pick_handle(t, client, NV01_MEMORY_LOCAL_USER));
		put64(c->in, c->size, offsetof(NVOS34_PARAMETERS, pLinearAddress),
		      t->nmapoffs && chance(t, 80) ? t->mapoffs[below(t, (u32)t->nmapoffs)] : rnd(t));
		break;
	case NV_ESC_RM_DUP_OBJECT: {
		struct hent *src = pick_obj(t, 0, 0, chance(t, 80));

		put32(c->in, c->size, 0, client);
		put32(c->in, c->size, 4, pick_handle(t, client, NV01_DEVICE_0));
		put32(c->in, c->size, 8, new_handle(t));
		put32(c->in, c->size, 12, src ? src->client : pick_client(t));
		put32(c->in, c->size, 16, src ? src->h : pick_handle(t, client, 0));
		break;
	}
	case NV_ESC_RM_ALLOC:
	case NV_ESC_RM_CONTROL:
	case NV_ESC_RM_FREE:
		break;  /* made by their own generators */
	default:
		/* most RM escapes start with hClient, then handles */
		if (nr >= 0x27 && nr < NV_IOCTL_BASE && c->size >= 8 && chance(t, 70)) {
			put32(c->in, c->size, 0, client);
			put32(c->in, c->size, 4, pick_handle(t, client, 0));
			if (c->size >= 12)
				put32(c->in, c->size, 8, pick_handle(t, client, 0));
		}
		break;
	}
	/* an escape sent on a node of any kind: mostly where it belongs */
	switch (nr) {
	case NV_ESC_REGISTER_FD:
	case NV_ESC_RM_ALLOC_MEMORY:
		c->node = chance(t, 80) ? N_GPU : N_CTL;
		break;
	default:
		c->node = chance(t, 80) ? N_CTL : N_GPU;
		break;
	}
	if (chance(t, 3))
		c->node = N_UVM;
}

static void gen_uvm(struct th *t, struct call *c)
{
	const struct nvrel_item *it = pick_item(t, NVREL_UVM);
	u32 client = pick_client(t);

	c->node = chance(t, 97) ? N_UVM : N_CTL;
	c->nr = it ? it->value : (u32)rnd(t);
	if (chance(t, 3))
		c->nr = below(t, 0x60);
	c->item = 0;
	c->size = vary_size(t, it && it->value == c->nr ? it->size : 64, TOP_MAX);
	memset(c->in, 0, c->size);
	if (chance(t, 30))
		fill_random(t, c->in, c->size);
	c->fdoff = uvm_fd_off(c->nr);
	switch (c->nr) {
	case UVM_REGISTER_GPU:
		put32(c->in, c->size, offsetof(UVM_REGISTER_GPU_PARAMS, hClient), client);
		break;
	case UVM_REGISTER_GPU_VASPACE:
		put32(c->in, c->size, offsetof(UVM_REGISTER_GPU_VASPACE_PARAMS, hClient), client);
		put32(c->in, c->size, offsetof(UVM_REGISTER_GPU_VASPACE_PARAMS, hVaSpace),
		      pick_handle(t, client, 0));
		break;
	case UVM_REGISTER_CHANNEL:
		put32(c->in, c->size, offsetof(UVM_REGISTER_CHANNEL_PARAMS, hClient), client);
		put32(c->in, c->size, offsetof(UVM_REGISTER_CHANNEL_PARAMS, hChannel),
		      pick_handle(t, client, 0));
		break;
	case UVM_MAP_EXTERNAL_ALLOCATION:
		put32(c->in, c->size, offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hClient), client);
		put32(c->in, c->size, offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hMemory),
		      pick_handle(t, client, NV01_MEMORY_LOCAL_USER));
		break;
	case UVM_CREATE_EXTERNAL_RANGE:
	case UVM_FREE:
	case UVM_MIGRATE:
		if (t->nmaps && chance(t, 50)) {
			struct mapent *m = &t->maps[below(t, (u32)t->nmaps)];

			put64(c->in, c->size, 0, (u64)(uintptr_t)m->p);
			put64(c->in, c->size, 8, m->len);
		} else {
			put64(c->in, c->size, 0, 0x7f0000000000ULL + (below(t, 1024) << 21));
			put64(c->in, c->size, 8, 2ULL << 20);
		}
		break;
	default:
		break;
	}
}

/* mmap of a node at a random offset and size, never MAP_FIXED. */
static void do_mmap(struct th *t)
{
	static const int nodes[] = { N_CTL, N_GPU, N_GPU, N_UVM };
	int node = nodes[below(t, 4)], fd, err;
	size_t len = (size_t)PAGE << below(t, 6);
	off_t off;
	int prot = PROT_READ | (chance(t, 60) ? PROT_WRITE : 0);
	void *p;

	if (chance(t, 5))
		len = below(t, 3 * PAGE);
	if (node == N_GPU && t->nmapoffs && chance(t, 70))
		off = (off_t)t->mapoffs[below(t, (u32)t->nmapoffs)];
	else if (chance(t, 50))
		off = 0;
	else
		off = (off_t)((rnd(t) & 0xffffffULL) << 12);
	fd = node_fd(t, node, (int)below(t, (u32)(ngpus ? ngpus : 1)));
	count(K_MMAP);
	if (node == N_UVM && chance(t, 70)) {
		/* a managed range: file offset == address, in a window of this
		 * thread's that nothing else uses (NOREPLACE: never over a mapping) */
		uintptr_t a = 0x6f0000000000ULL + ((uintptr_t)t->proc << 36) +
			      ((uintptr_t)t->id << 32) + ((uintptr_t)below(t, 1024) << 21);

		len = (size_t)(1 + below(t, 16)) << 21;
		if (chance(t, 10))
			len = (size_t)64 << 20;
		p = mmap((void *)a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
			 fd, (off_t)a);
		if (p != MAP_FAILED && p != (void *)a) {
			munmap(p, len);         /* an old kernel's plain hint */
			p = MAP_FAILED;
			errno = EEXIST;
		}
	} else {
		p = mmap(NULL, len, prot, chance(t, 90) ? MAP_SHARED : MAP_PRIVATE, fd, off);
	}
	err = p == MAP_FAILED ? errno : 0;
	outcome(node, NR_MMAP, 0, err, 0);
	snprintf(lastop, sizeof(lastop), "mmap node %s fd %d len 0x%zx off 0x%llx prot %d -> %p errno %d",
		 node_names[node], fd, len, (unsigned long long)off, prot, p, err);
	if (p == MAP_FAILED)
		return;
	if (t->nmaps >= MAX_MAPS) {
		munmap(t->maps[0].p, t->maps[0].len);
		t->maps[0] = t->maps[--t->nmaps];
	}
	t->maps[t->nmaps++] = (struct mapent){ p, len };
}

static void do_munmap(struct th *t)
{
	int i;
	struct mapent *m;
	size_t part;

	if (!t->nmaps)
		return;
	i = (int)below(t, (u32)t->nmaps);
	m = &t->maps[i];
	count(K_MUNMAP);
	if (m->len > PAGE && chance(t, 30)) {
		/* unmap the tail only: splits the mapping (->close, ->open) */
		part = (m->len / PAGE / 2) * PAGE;
		snprintf(lastop, sizeof(lastop), "munmap tail %p+0x%zx of 0x%zx", m->p, part, m->len);
		outcome(0, NR_MUNMAP, 1, munmap((u8 *)m->p + part, m->len - part) ? errno : 0, 0);
		m->len = part;
		return;
	}
	snprintf(lastop, sizeof(lastop), "munmap %p 0x%zx", m->p, m->len);
	outcome(0, NR_MUNMAP, 0, munmap(m->p, m->len) ? errno : 0, 0);
	*m = t->maps[--t->nmaps];
}

static void touch_handler(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	if (in_touch)
		siglongjmp(touch_jmp, sig);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Read (and maybe write) a word of a node mapping; a fault is caught. */
static void do_touch(struct th *t)
{
	struct mapent *m;
	volatile u32 *p;
	int sig;

	if (!t->nmaps)
		return;
	m = &t->maps[below(t, (u32)t->nmaps)];
	p = (volatile u32 *)((u8 *)m->p + (below(t, (u32)(m->len / 4 ? m->len / 4 : 1)) * 4));
	count(K_TOUCH);
	snprintf(lastop, sizeof(lastop), "touch %p (map %p 0x%zx)", (void *)p, m->p, m->len);
	sig = sigsetjmp(touch_jmp, 1);
	if (!sig) {
		in_touch = 1;
		if (chance(t, 30))
			*p = (u32)rnd(t);       /* a doorbell, FB, or a managed page */
		else
			(void)*p;
		in_touch = 0;
	} else {
		in_touch = 0;
		count(K_TOUCH_FAULT);
	}
	outcome(0, NR_TOUCH, 0, sig, 0);
}

/* Close a descriptor (its number is then a closed fd) and maybe reopen. */
static void do_reopen(struct th *t)
{
	int i;
	struct fdent *f;

	if (!t->nfds)
		return;
	i = (int)below(t, (u32)t->nfds);
	f = &t->fds[i];
	count(K_REOPEN);
	if (f->kind == F_CLOSED)
		return;
	snprintf(lastop, sizeof(lastop), "close fd %d kind %d node %d", f->fd, f->kind, f->node);
	close(f->fd);
	if (f->kind == F_NODE && chance(t, 70)) {
		int fd = open_node(f->node, f->gpu);

		outcome(f->node, NR_OPEN, 1, fd < 0 ? errno : 0, 0);
		if (fd >= 0) {
			f->fd = fd;
			return;
		}
	}
	f->kind = F_CLOSED;             /* its number stays, closed (or reused) */
}

/* ------------------------------------------------------------ mutation */
static void mutate(struct th *t, struct call *c)
{
	int rounds = 1 + (int)below(t, 3);

	count(K_MUTATED);
	while (rounds--) {
		u8 *buf = c->psize && chance(t, 60) ? c->pin : c->in;
		u32 n = buf == c->pin ? c->psize : c->size;

		switch (below(t, 8)) {
		case 0:                 /* bit flips */
			if (n) {
				int k = 1 + (int)below(t, 8);

				while (k--)
					buf[below(t, n)] ^= (u8)(1u << below(t, 8));
			}
			break;
		case 1: {               /* interesting values */
			static const u32 vals[] = { 0, 1, 0xff, 0xffff, 0x7fffffff, 0x80000000,
						    0xffffffff, 4096, 0x1000000 };

			if (n >= 4)
				put32(buf, n, below(t, n - 3) & ~3u, vals[below(t, 9)]);
			break;
		}
		case 2:                 /* handle swap */
			if (n >= 4)
				put32(buf, n, below(t, n / 4 > 4 ? 4 : n / 4) * 4,
				      chance(t, 30) ? pick_client(t) : pick_handle(t, pick_client(t), 0));
			break;
		case 3:                 /* size change */
			if (buf == c->pin) {
				c->psize = vary_size(t, c->psize, c->psize * 2 + 8);
				if (c->psize > PTR_MAX)
					c->psize = PTR_MAX;
				c->raw_psize = 0;
			} else {
				c->size = vary_size(t, c->size, c->size * 2 + 8);
				if (c->size > TOP_MAX)
					c->size = TOP_MAX;
			}
			break;
		case 4: {               /* splice: the tail of another entry */
			struct corpus_ent *o;
			u32 from;

			pthread_mutex_lock(&corpus_lock);
			o = ncorpus ? &corpus[below(t, (u32)ncorpus)] : NULL;
			if (o && o->c.nr == c->nr && n) {
				u8 *ob = buf == c->pin ? o->c.pin : o->c.in;
				u32 on = buf == c->pin ? o->c.psize : o->c.size;

				from = below(t, n);
				if (on > from)
					memcpy(buf + from, ob + from, (on < n ? on : n) - from);
			}
			pthread_mutex_unlock(&corpus_lock);
			break;
		}
		case 5:                 /* another node */
			c->node = (u8)below(t, opt_other ? N_NKINDS : 3);
			c->gpu = (u8)below(t, (u32)(ngpus ? ngpus : 1));
			break;
		case 6:                 /* random bytes */
			if (n) {
				u32 off = below(t, n), len = 1 + below(t, 8);

				fill_random(t, buf + off, len < n - off ? len : n - off);
			}
			break;
		default:                /* a new handle where the driver would pick */
			if (c->nr == NV_ESC_RM_ALLOC)
				put32(c->in, c->size, 8, new_handle(t));
			break;
		}
	}
}

/* --------------------------------------------------------- bootstrap */
/* Map an object as CUDA does: a new descriptor of the GPU node,
 * RM_MAP_MEMORY naming it, then mmap of that descriptor at offset 0. */
static void bootstrap_map(struct th *t, struct call *c, u32 client, u32 parent, u32 mem,
			  size_t len, int gpu)
{
	nv_ioctl_nvos33_parameters_with_fd m;
	struct result r;
	int fd = open_node(N_GPU, gpu), ctl = node_fd(t, N_CTL, 0);
	void *p;

	if (fd < 0)
		return;
	add_fd(t, fd, F_NODE, N_GPU, gpu);
	memset(&m, 0, sizeof(m));
	m.params.hClient = client;
	m.params.hDevice = parent;
	m.params.hMemory = mem;
	m.params.length = len;
	m.fd = fd;
	c->node = N_CTL;
	c->nr = NV_ESC_RM_MAP_MEMORY;
	c->item = 0;
	c->size = sizeof(m);
	c->psize = 0;
	memcpy(c->in, &m, sizeof(m));
	exec_call(t, c, P_NORMAL, ctl, &r);
	c->nr = NV_ESC_RM_ALLOC;
	c->size = sizeof(NVOS64_PARAMETERS);
	c->in[offsetof(NVOS64_PARAMETERS, pRightsRequested)] = 0;
	memset(c->in + 16, 0, sizeof(NVOS64_PARAMETERS) - 16);
	if (r.ret || r.status)
		return;
	count(K_MMAP);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	outcome(N_GPU, NR_MMAP, 1, p == MAP_FAILED ? errno : 0, 0);
	if (p != MAP_FAILED && t->nmaps < MAX_MAPS)
		t->maps[t->nmaps++] = (struct mapent){ p, len };
	else if (p != MAP_FAILED)
		munmap(p, len);
}

/* What every client does first, so that random calls find live objects. */
static void bootstrap(struct th *t)
{
	struct call c;
	u8 in[512], pin[512];
	u32 client = 0;
	int g;
	struct result r;
	int ctl = node_fd(t, N_CTL, 0);

	memset(&c, 0, sizeof(c));
	c.in = in;
	c.pin = pin;
	c.fdoff = -1;
	t->clean = 1;

	/* version, cards */
	{
		nv_ioctl_rm_api_version_t v;

		memset(&v, 0, sizeof(v));
		v.cmd = NV_RM_API_VERSION_CMD_STRICT;
		snprintf(v.versionString, sizeof(v.versionString), "%s", rel->name);
		c.node = N_CTL;
		c.nr = NV_ESC_CHECK_VERSION_STR;
		c.size = sizeof(v);
		memcpy(in, &v, sizeof(v));
		exec_call(t, &c, P_NORMAL, ctl, NULL);
	}
	c.nr = NV_ESC_CARD_INFO;
	c.size = sizeof(nv_ioctl_card_info_t) * 8 > sizeof(in) ?
		 (u32)(sizeof(in) / sizeof(nv_ioctl_card_info_t)) * sizeof(nv_ioctl_card_info_t) :
		 sizeof(nv_ioctl_card_info_t) * 8;
	memset(in, 0, c.size);
	t->ngpu_ids = 0;
	exec_call(t, &c, P_NORMAL, ctl, NULL);

	/* a root client */
	c.nr = NV_ESC_RM_ALLOC;
	c.item = NV01_ROOT_CLIENT;
	c.size = sizeof(NVOS64_PARAMETERS);
	c.psize = 0;
	memset(in, 0, c.size);
	put32(in, c.size, 12, NV01_ROOT_CLIENT);
	c.raw_psize = 0;
	exec_call(t, &c, P_NORMAL, ctl, &r);
	if (!r.ret && !r.status && mine(t, r.top, 12))
		client = get32(r.top, c.size, 8);
	if (!client) {
		t->clean = 0;
		return;
	}

	/* attach, register, device, subdevice, some memory */
	c.nr = NV_ESC_ATTACH_GPUS_TO_FD;
	c.item = 0;
	c.size = (u32)t->ngpu_ids * 4;
	for (g = 0; g < t->ngpu_ids; g++)
		put32(in, c.size, (size_t)g * 4, t->gpu_ids[g]);
	if (c.size)
		exec_call(t, &c, P_NORMAL, ctl, NULL);
	for (g = 0; g < ngpus && g < 2; g++) {
		int gfd = node_fd(t, N_GPU, g);
		u32 dev, sub, mem;
		u64 msize;
		nv_ioctl_register_fd_t rf = { .ctl_fd = ctl };

		c.node = N_GPU;
		c.gpu = (u8)g;
		c.nr = NV_ESC_REGISTER_FD;
		c.size = sizeof(rf);
		memcpy(in, &rf, sizeof(rf));
		exec_call(t, &c, P_NORMAL, gfd, NULL);

		c.node = N_CTL;
		c.nr = NV_ESC_RM_ALLOC;
		c.item = NV01_DEVICE_0;
		c.size = sizeof(NVOS64_PARAMETERS);
		memset(in, 0, c.size);
		dev = 0xcd000000u | ((u32)t->proc << 12) | ((u32)t->id << 4) | (u32)g;
		put32(in, c.size, 0, client);
		put32(in, c.size, 4, client);
		put32(in, c.size, 8, dev);
		put32(in, c.size, 12, NV01_DEVICE_0);
		c.psize = sizeof(NV0080_ALLOC_PARAMETERS);
		memset(pin, 0, c.psize);
		put32(pin, c.psize, 0, (u32)g);
		exec_call(t, &c, P_NORMAL, ctl, NULL);

		c.item = NV20_SUBDEVICE_0;
		sub = dev | 0x800;
		put32(in, c.size, 4, dev);
		put32(in, c.size, 8, sub);
		put32(in, c.size, 12, NV20_SUBDEVICE_0);
		c.psize = sizeof(NV2080_ALLOC_PARAMETERS);
		memset(pin, 0, c.psize);
		exec_call(t, &c, P_NORMAL, ctl, NULL);

		c.item = NV01_MEMORY_LOCAL_USER;
		mem = dev | (0x400 + (t->next_handle++ & 0x3ff));
		msize = (1ULL + below(t, 8)) << 20;
		put32(in, c.size, 4, dev);
		put32(in, c.size, 8, mem);
		put32(in, c.size, 12, NV01_MEMORY_LOCAL_USER);
		c.psize = sizeof(NV_MEMORY_ALLOCATION_PARAMS);
		memset(pin, 0, c.psize);
		put32(pin, c.psize, 0, 0x5647);
		put64(pin, c.psize, offsetof(NV_MEMORY_ALLOCATION_PARAMS, size), msize);
		exec_call(t, &c, P_NORMAL, ctl, NULL);
		bootstrap_map(t, &c, client, dev, mem, (size_t)msize, g);

		/* the usermode region (doorbells) under the subdevice, mapped */
		c.item = VOLTA_USERMODE_A;
		put32(in, c.size, 4, sub);
		put32(in, c.size, 8, sub | 0x100);
		put32(in, c.size, 12, VOLTA_USERMODE_A);
		c.psize = 0;
		exec_call(t, &c, P_NORMAL, ctl, NULL);
		bootstrap_map(t, &c, client, sub, sub | 0x100, NVC361_USERMODE_REGION_SIZE, g);
	}

	/* UVM: initialise the file, then MM_INITIALIZE with it */
	{
		int ufd = node_fd(t, N_UVM, 0);

		c.node = N_UVM;
		c.nr = UVM_INITIALIZE;
		c.item = 0;
		c.psize = 0;
		c.size = sizeof(UVM_INITIALIZE_PARAMS);
		memset(in, 0, c.size);
		if (ufd >= 0)
			exec_call(t, &c, P_NORMAL, ufd, NULL);
	}
	t->clean = 0;
}

/* ------------------------------------------------------------ workers */
static void replay_sequence(struct th *t, int start)
{
	u32 keys[64], vals[64];
	int nmap = 0, i = start, steps = 0;
	static __thread u8 inb[TOP_MAX], pinb[PTR_MAX];

	count(K_REPLAY);
	while (i >= 0 && steps++ < 256) {
		struct call c;
		struct result r;
		size_t off;
		int k, next;

		pthread_mutex_lock(&corpus_lock);
		if (i >= ncorpus) {
			pthread_mutex_unlock(&corpus_lock);
			break;
		}
		c = corpus[i].c;
		memcpy(inb, c.in, c.size);
		memcpy(pinb, c.pin, c.psize);
		next = corpus[i].seq_next;
		pthread_mutex_unlock(&corpus_lock);
		c.in = inb;
		c.pin = pinb;
		/* handles the recording's driver picked: this run's instead */
		for (off = 0; off + 4 <= c.size; off += 4)
			for (k = 0; k < nmap; k++)
				if (get32(c.in, c.size, off) == keys[k])
					put32(c.in, c.size, off, vals[k]);
		for (off = 0; off + 4 <= c.psize; off += 4)
			for (k = 0; k < nmap; k++)
				if (get32(c.pin, c.psize, off) == keys[k])
					put32(c.pin, c.psize, off, vals[k]);
		if (c.newh && c.nr == NV_ESC_RM_ALLOC)  /* the driver picks the handle */
			put32(c.in, c.size, is_root_class(c.item) ? 0 : 8, 0);
		if (chance(t, 15))
			mutate(t, &c);
		exec_call(t, &c, chance(t, 90) ? P_NORMAL : pick_place(t), -1, &r);
		if (c.newh && !r.ret && readable(r.tp) && mine(t, r.top, 12) && nmap < 64) {
			keys[nmap] = c.newh;
			vals[nmap++] = get32(r.top, c.size, 8);
		}
		i = next;
	}
}

static void one_op(struct th *t)
{
	static __thread u8 inb[TOP_MAX + 64], pinb[PTR_MAX + 64];
	struct call c;
	u32 r = below(t, 1000);
	int from_corpus = 0;

	memset(&c, 0, sizeof(c));
	c.in = inb;
	c.pin = pinb;
	c.fdoff = -1;
	c.gpu = (u8)below(t, (u32)(ngpus ? ngpus : 1));

	if (r < 20) {
		do_mmap(t);
		return;
	}
	if (r < 32) {
		do_munmap(t);
		return;
	}
	if (r < 40) {
		do_touch(t);
		return;
	}
	if (r < 45) {
		do_reopen(t);
		return;
	}
	if (r < 48) {
		bootstrap(t);
		return;
	}
	if (r < 60 && nfile_corpus) {
		int start;

		pthread_mutex_lock(&corpus_lock);
		start = (int)below(t, (u32)nfile_corpus);
		while (start > 0 && corpus[start].seq == corpus[start - 1].seq && chance(t, 90))
			start--;
		pthread_mutex_unlock(&corpus_lock);
		replay_sequence(t, start);
		return;
	}
	if (r < 420) {
		pthread_mutex_lock(&corpus_lock);
		if (ncorpus) {
			struct corpus_ent *e = &corpus[below(t, (u32)ncorpus)];

			c = e->c;
			memcpy(inb, e->c.in, e->c.size);
			memcpy(pinb, e->c.pin, e->c.psize);
			c.in = inb;
			c.pin = pinb;
			from_corpus = 1;
		}
		pthread_mutex_unlock(&corpus_lock);
		if (from_corpus)
			mutate(t, &c);
	}
	if (!from_corpus) {
		u32 g = below(t, 100);

		c.node = N_CTL;
		if (g < 28) {
			static const u32 fav[] = {
				NV01_MEMORY_LOCAL_USER, NV01_MEMORY_LOCAL_USER, NV01_MEMORY_SYSTEM,
				NV01_DEVICE_0, NV20_SUBDEVICE_0, NV01_ROOT_CLIENT, KEPLER_CHANNEL_GROUP_A,
				VOLTA_CHANNEL_GPFIFO_A, AMPERE_CHANNEL_GPFIFO_A, HOPPER_CHANNEL_GPFIFO_A,
				VOLTA_USERMODE_A, FERMI_VASPACE_A, NV50_MEMORY_VIRTUAL, NV01_EVENT,
				NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
			};
			const struct nvrel_item *it = pick_item(t, NVREL_CLS);
			u32 cls = it ? it->value : (u32)rnd(t);

			/* half the time a class the mediator tracks (memory, devices,
			 * channels): every class of the table the other half */
			if (chance(t, 50))
				cls = fav[below(t, sizeof(fav) / sizeof(fav[0]))];
			gen_rm_alloc(t, &c, cls);
		} else if (g < 58) {
			gen_control(t, &c);
		} else if (g < 68) {
			gen_free(t, &c);
		} else if (g < 86) {
			gen_escape(t, &c);
		} else {
			gen_uvm(t, &c);
		}
		if (chance(t, 8) && opt_other)
			c.node = (u8)(c.node + N_OTHER_CTL);
		if (c.nr == NV_ESC_RM_FREE)
			count(K_FREE);
	}
	if (exec_call(t, &c, pick_place(t), -1, NULL))
		corpus_add(&c);
}

/*
 * --check-slice ID (one process, one thread): after every operation, the
 * slice's charge must equal what nvsim holds for this process plus the
 * slice's UVM managed bytes; the first operation after which it does not
 * is printed, and the worker stops (exit 4).
 */
static long long slice_charge(int id, long long *uvm)
{
	FILE *f = fopen("/sys/kernel/debug/vgpu/state", "r");
	char line[512];
	long long used = 0, v;
	unsigned int sid, gi, minor;
	unsigned long long lim;

	*uvm = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "slice %u gpu %u minor %u limit %llu used %lld", &sid, &gi, &minor,
			   &lim, &v) == 5 && (int)sid == id)
			used += v;
		else if (sscanf(line, "slice %u files %*d uvm_mapped %lld", &sid, &v) == 2 &&
			 (int)sid == id)
			*uvm = v;
	}
	fclose(f);
	return used;
}

static long long nvsim_pid_fb(int pid)
{
	FILE *f = fopen("/sys/kernel/debug/nvsim/state", "r");
	char line[512];
	long long sum = 0, v;
	int p;
	unsigned int g;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "pid %d gpu %u fb_used %lld", &p, &g, &v) == 3 && p == pid)
			sum += v;
	fclose(f);
	return sum;
}

static long long group_charge(long long *uvm)
{
	long long u2 = 0, used = slice_charge(opt_check_slice, uvm);

	if (opt_check_slice2 >= 0) {
		used += slice_charge(opt_check_slice2, &u2);
		*uvm += u2;
	}
	return used;
}

static void check_slice(struct th *t)
{
	long long uvm, used = group_charge(&uvm), nv = nvsim_pid_fb(getpid());
	static long long ops;

	ops++;
	if (atomic_load(&sh->kinds[K_MAP_EXT_UNSURE]) && used >= nv + uvm)
		return;         /* over, never under: the documented MAP_EXTERNAL case */
	if (getenv("NVFUZZ_LOG"))
		fprintf(stderr, "op %lld charged %lld nvsim %lld uvm %lld: %s\n", ops, used, nv, uvm,
			lastop);
	if (used == nv + uvm)
		return;
	/* an asynchronous return (a work item) may lag: look again */
	usleep(200000);
	used = group_charge(&uvm);
	nv = nvsim_pid_fb(getpid());
	if (used == nv + uvm ||
	    (atomic_load(&sh->kinds[K_MAP_EXT_UNSURE]) && used >= nv + uvm))
		return;
	fprintf(stderr, "nvfuzz: CHECK after op %lld: slice %d charged %lld, nvsim %lld + uvm %lld "
		"(diff %lld)\nnvfuzz: last op: %s\n", ops, opt_check_slice, used, nv, uvm,
		used - nv - uvm, lastop);
	(void)t;
	_exit(4);
}

static int budget_left(void)
{
	if (atomic_load(&sh->stop))
		return 0;
	if (opt_seconds > 0 && now() - t_start >= opt_seconds) {
		atomic_store(&sh->stop, 1);
		return 0;
	}
	if (opt_calls) {
		if (atomic_fetch_add(&sh->claimed, 1) >= opt_calls) {
			atomic_store(&sh->stop, 1);
			return 0;
		}
	}
	return 1;
}

static void th_setup(struct th *t)
{
	int p[2], fd;

	t->arena = mmap(NULL, AR_TOTAL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->arena == MAP_FAILED) {
		perror("nvfuzz: mmap arena");
		exit(3);
	}
	t->guard = t->arena + AR_RW;
	t->ro = t->arena + AR_RW + PAGE;
	fill_random(t, t->ro, PAGE);
	if (mprotect(t->guard, PAGE, PROT_NONE) || mprotect(t->ro, PAGE, PROT_READ) ||
	    mprotect(t->ro + PAGE, PAGE, PROT_NONE)) {
		perror("nvfuzz: mprotect");
		exit(3);
	}
	/* descriptors of every kind */
	node_fd(t, N_CTL, 0);
	node_fd(t, N_UVM, 0);
	if (opt_other) {
		add_fd(t, open_node(N_OTHER_CTL, 0), F_NODE, N_OTHER_CTL, 0);
		add_fd(t, open_node(N_OTHER_GPU, 0), F_NODE, N_OTHER_GPU, 0);
		add_fd(t, open_node(N_OTHER_UVM, 0), F_NODE, N_OTHER_UVM, 0);
	}
	if (!pipe2(p, O_CLOEXEC)) {
		add_fd(t, p[0], F_PIPE, 0, 0);
		add_fd(t, p[1], F_PIPE, 0, 0);
	}
	add_fd(t, open("/dev/null", O_RDWR | O_CLOEXEC), F_NULL, 0, 0);
	add_fd(t, eventfd(0, EFD_CLOEXEC), F_EVENT, 0, 0);
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		add_fd(t, fd, F_CLOSED, 0, 0);
	}
}

static void *th_main(void *arg)
{
	struct th *t = arg;

	th_setup(t);
	bootstrap(t);
	while (budget_left()) {
		one_op(t);
		atomic_fetch_add_explicit(&sh->ops, 1, memory_order_relaxed);
		if (opt_check_slice >= 0)
			check_slice(t);
	}
	return NULL;
}

static void *racer_main(void *arg)
{
	u64 x = (u64)(uintptr_t)arg | 1;

	while (!atomic_load_explicit(&racers_stop, memory_order_relaxed)) {
		int i;

		for (i = 0; i < 256; i++) {
			x ^= x >> 12;
			x ^= x << 25;
			x ^= x >> 27;
			/* flip one aligned word of the race region */
			((volatile u32 *)race_region)[(x >> 8) % (RACE_SZ / 4)] = (u32)(x * 0x9E3779B97F4A7C15ULL >> 32);
		}
		sched_yield();
	}
	return NULL;
}

static int count_gpus(const char *dir)
{
	char path[512];
	int i, n = 0;

	if (!dir)
		return 0;
	for (i = 0; i < MAX_GPUS; i++) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/nvidia%d", dir, i);
		if (stat(path, &st))
			break;
		n++;
	}
	return n;
}

/* One worker process: its threads and a racer. */
static void worker(int proc, int hold_fd, int done_fd)
{
	pthread_t tids[MAX_THREADS], racer;
	static struct th ths[MAX_THREADS];
	struct sigaction sa;
	int i;
	char ch = 0;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = touch_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	race_region = mmap(NULL, RACE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (race_region == MAP_FAILED) {
		perror("nvfuzz: mmap race");
		_exit(3);
	}
	memset(race_region, 0, RACE_SZ);
	if (opt_corpus)
		load_corpus(opt_corpus);
	pthread_create(&racer, NULL, racer_main, (void *)(uintptr_t)(opt_seed ^ (u64)proc));
	for (i = 0; i < opt_threads; i++) {
		ths[i].proc = proc;
		ths[i].id = i;
		ths[i].rng = mix(opt_seed * 1000003ULL + (u64)proc * 131ULL + (u64)i) | 1;
		ths[i].next_handle = 1;
	}
	if (opt_threads == 1) {
		th_main(&ths[0]);
	} else {
		for (i = 0; i < opt_threads; i++)
			pthread_create(&tids[i], NULL, th_main, &ths[i]);
		for (i = 0; i < opt_threads; i++)
			pthread_join(tids[i], NULL);
	}
	atomic_store(&racers_stop, 1);
	pthread_join(racer, NULL);
	if (write(done_fd, &ch, 1) < 0)
		_exit(3);
	if (opt_hold)
		while (read(hold_fd, &ch, 1) > 0)
			;
	/* every descriptor, object and mapping goes with the process */
	_exit(0);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: nvfuzz DIR [--other DIR] [--seed N] [--calls N | --seconds S]\n"
		"              [--procs P] [--threads T] [--release NAME] [--corpus FILE] [--hold]\n"
		"              [--no-map-ext] [--check-slice ID[,ID2]]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "calls", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 't' },
		{ "procs", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 'j' },
		{ "release", required_argument, NULL, 'r' },
		{ "corpus", required_argument, NULL, 'c' },
		{ "other", required_argument, NULL, 'o' },
		{ "hold", no_argument, NULL, 'H' },
		{ "check-slice", required_argument, NULL, 'C' },
		{ "no-map-ext", no_argument, NULL, 'X' },
		{ NULL, 0, NULL, 0 },
	};
	int o, i, crashes = 0, hung = 0, signals[MAX_PROCS] = { 0 };
	int hold[2], done[2];
	pid_t pids[MAX_PROCS];
	double secs;
	char ch;
	unsigned long long calls;

	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 's': opt_seed = strtoull(optarg, NULL, 0); opt_seed_set = 1; break;
		case 'n': opt_calls = strtoull(optarg, NULL, 0); break;
		case 't': opt_seconds = atof(optarg); break;
		case 'p': opt_procs = atoi(optarg); break;
		case 'j': opt_threads = atoi(optarg); break;
		case 'r': opt_release = optarg; break;
		case 'c': opt_corpus = optarg; break;
		case 'o': opt_other = optarg; break;
		case 'H': opt_hold = 1; break;
		case 'X': opt_no_map_ext = 1; break;
		case 'C':
			opt_check_slice = atoi(optarg);
			if (strchr(optarg, ','))
				opt_check_slice2 = atoi(strchr(optarg, ',') + 1);
			break;
		default: usage();
		}
	}
	if (optind < argc)
		opt_dir = argv[optind++];
	if (optind != argc || opt_procs < 1 || opt_procs > MAX_PROCS || opt_threads < 1 ||
	    opt_threads > MAX_THREADS)
		usage();
	if (!opt_calls && opt_seconds <= 0)
		opt_calls = 10000;
	if (!opt_seed_set)
		opt_seed = (u64)time(NULL);
	rel = &nvrel_releases[ARRAY_SIZE(nvrel_releases) - 1];
	if (opt_release) {
		rel = NULL;
		for (i = 0; i < (int)ARRAY_SIZE(nvrel_releases); i++)
			if (!strcmp(nvrel_releases[i].name, opt_release))
				rel = &nvrel_releases[i];
		if (!rel) {
			fprintf(stderr, "nvfuzz: no table for release %s\n", opt_release);
			return 2;
		}
	}
	ngpus = count_gpus(opt_dir);
	nother_gpus = count_gpus(opt_other);
	if (!ngpus) {
		fprintf(stderr, "nvfuzz: no %s/nvidia0\n", opt_dir);
		return 2;
	}
	corpus = calloc(CORPUS_MAX, sizeof(*corpus));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!corpus || sh == MAP_FAILED || pipe2(hold, O_CLOEXEC) || pipe(done)) {
		perror("nvfuzz: setup");
		return 3;
	}
	fprintf(stderr, "nvfuzz: %s seed %llu release %s gpus %d procs %d threads %d\n", opt_dir,
		(unsigned long long)opt_seed, rel->name, ngpus, opt_procs, opt_threads);
	t_start = now();
	for (i = 0; i < opt_procs; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("nvfuzz: fork");
			return 3;
		}
		if (!pids[i]) {
			close(hold[1]);
			close(done[0]);
			worker(i, hold[0], done[1]);
		}
	}
	close(hold[0]);
	close(done[1]);
	/*
	 * wait for every worker's "done" (or its death), with a watchdog: a
	 * time budget must end within 120 s of its end, and a call budget
	 * (any size) must keep making calls: none for 120 s is a hang
	 */
	{
		int got = 0;
		double limit = opt_seconds > 0 ? opt_seconds + 120 : 0;
		double stalled_at = now();
		unsigned long long seen = 0;

		while (got < opt_procs) {
			fd_set rs;
			struct timeval tv = { 1, 0 };
			unsigned long long ops;

			FD_ZERO(&rs);
			FD_SET(done[0], &rs);
			if (select(done[0] + 1, &rs, NULL, NULL, &tv) > 0) {
				if (read(done[0], &ch, 1) <= 0)
					break;          /* every worker gone */
				got++;
			}
			ops = atomic_load(&sh->ops);
			if (ops != seen) {
				seen = ops;
				stalled_at = now();
			}
			if ((limit && now() - t_start > limit) ||
			    now() - stalled_at > 120) {
				hung = opt_procs - got;
				fprintf(stderr, "nvfuzz: %d worker(s) %s\n", hung,
					limit && now() - t_start > limit ?
					"did not finish in time" : "made no call for 120 s");
				atomic_store(&sh->stop, 1);
				break;
			}
		}
	}
	secs = now() - t_start;
	calls = atomic_load(&sh->ops);
	if (opt_hold) {
		/* every worker holds its state: tell the driver, wait for its EOF */
		printf("{\"hold\": true, \"map_ext_unsure\": %llu, \"pids\": [",
		       (unsigned long long)atomic_load(&sh->kinds[K_MAP_EXT_UNSURE]));
		for (i = 0; i < opt_procs; i++)
			printf("%s%d", i ? ", " : "", pids[i]);
		printf("]}\n");
		fflush(stdout);
		while (read(0, &ch, 1) > 0)
			;
	}
	close(hold[1]);
	for (i = 0; i < opt_procs; i++) {
		int st;

		if (hung)
			kill(pids[i], SIGKILL);
		if (waitpid(pids[i], &st, 0) == pids[i] && WIFSIGNALED(st)) {
			signals[i] = WTERMSIG(st);
			if (!hung)
				crashes++;
		} else if (WIFEXITED(st) && WEXITSTATUS(st)) {
			crashes++;
		}
	}
	printf("{\"dir\": \"%s\", \"seed\": %llu, \"release\": \"%s\", \"procs\": %d, "
	       "\"threads\": %d, \"calls\": %llu, \"ioctls\": %llu, \"seconds\": %.2f, \"calls_per_s\": %.1f, "
	       "\"outcomes\": %llu, \"crashes\": %d, \"hung\": %d, \"signals\": [",
	       opt_dir, (unsigned long long)opt_seed, rel->name, opt_procs, opt_threads, calls,
	       (unsigned long long)atomic_load(&sh->done), secs,
	       secs > 0 ? calls / secs : 0.0, (unsigned long long)atomic_load(&sh->outcomes),
	       crashes, hung);
	for (i = 0; i < opt_procs; i++)
		printf("%s%d", i ? ", " : "", signals[i]);
	printf("], \"pids\": [");
	for (i = 0; i < opt_procs; i++)
		printf("%s%d", i ? ", " : "", pids[i]);
	printf("], \"kinds\": {");
	for (i = 0; i < K_NKINDS; i++)
		printf("%s\"%s\": %llu", i ? ", " : "", kind_names[i],
		       (unsigned long long)atomic_load(&sh->kinds[i]));
	printf("}, \"nodes\": [");
	for (i = 0; i < N_NKINDS; i++)
		printf("%s\"%s\"", i ? ", " : "", node_names[i]);
	printf("]}\n");
	fflush(stdout);
	return crashes || hung ? 1 : 0;
}
