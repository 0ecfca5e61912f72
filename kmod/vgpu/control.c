// SPDX-License-Identifier: GPL-2.0
/*
 * control.c - what a container is told: RM controls (the release's policy
 * table, made on a call page at the caller's privilege) with the GPU
 * identity, memory and PID reports rewritten and the peer and fabric
 * queries answered for a GPU with neither; VID_HEAP INFO.  The escapes
 * that name GPUs (CARD_INFO, STATUS_CODE, NUMA_INFO, ATTACH_GPUS_TO_FD)
 * are cards.c's.
 */
#include <linux/bitmap.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/mm.h>
#include <linux/overflow.h>

#include "vgpu.h"

/* ------------------------------------------------------ control handlers */

/*
 * Which controls the release forwards, and with what parameter size, is the
 * policy table's (policy.c).  These are the controls vgpu.ko does more with
 * than forward: the rewrites and virtualisations it implements, and the
 * forwarded controls whose embedded lists it carries.  A rewrite or
 * virtualisation the table names but this list lacks, and a forwarded
 * control with an embedded pointer not listed here, is refused with
 * NV_ERR_NOT_SUPPORTED: vgpu.ko does not know how to make it safe yet.
 */
enum vgpu_ctrl_kind {
	VGPU_CTRL_PLAIN,        /* forwarded as it is (no embedded pointer) */
	VGPU_CTRL_LISTS,        /* forwarded, its embedded lists copied (the table's) */
	VGPU_CTRL_ANSWER_OK,    /* virtualised: NV_OK, the driver never sees it */
	VGPU_CTRL_GPU_ID,       /* gpuId (first member) must be a slice GPU's */
	VGPU_CTRL_ID_INFO_V2,   /* and deviceInstance becomes the container's */
	VGPU_CTRL_ATTACHED_IDS, /* only the slice's GPUs are listed */
	VGPU_CTRL_PROBED_IDS,
	VGPU_CTRL_FB_INFO,
	VGPU_CTRL_FB_INFO_V2,
	VGPU_CTRL_SURFACE_INFO,
	VGPU_CTRL_GET_PIDS,
	VGPU_CTRL_GET_PID_INFO,
	VGPU_CTRL_ID_INFO,      /* V1: as V2; its szName is unused by the driver */
	VGPU_CTRL_ID_LIST,      /* ATTACH/DETACH_IDS: every id a slice GPU's */
	VGPU_CTRL_DEVICE_IDS,   /* a bit per attached slice GPU, container numbering */
	VGPU_CTRL_ACTIVE_DEVICES, /* only the slice's GPUs are listed */
	VGPU_CTRL_NO_PEERS,     /* virtualised: no peer, no NVLink, no fabric */
	VGPU_CTRL_SHARE_POLICY, /* inherited share: PID, NONE, revoke */
	VGPU_CTRL_FB_REGIONS,   /* the regions cut to the slice's quota */
	VGPU_CTRL_GPU_INFO,     /* V1: DMABUF_CAPABILITY reads NO */
	VGPU_CTRL_GPU_INFO_V2,
	VGPU_CTRL_NR,           /* the size of vgpu_ctrl_ops[] */
};

struct vgpu_ctrl {
	u32 cmd;
	enum vgpu_ctrl_kind kind;
};

/*
 * The TSG scheduling controls that change state (SET_TIMESLICE, PREEMPT,
 * SET_INTERLEAVE_LEVEL) are answered NV_OK and not applied: the slice's
 * compute share is set by vgpu.ko, never by the container.
 * GPFIFO_SCHEDULE (0xA06C0101, 0xA06F0103) goes to compute.c: an enable,
 * which CUDA needs to start its TSGs, is virtualised (effective only while
 * the slice holds the GPU); a disable is refused.  The GET_* of the TSG
 * are forwarded: they read the caller's own TSG.  The channel's own
 * (NVA06F SET_INTERLEAVE_LEVEL, STOP_CHANNEL) and FIFO_DISABLE_CHANNELS are
 * answered the same way: a container that re-enabled a channel vgpu.ko's
 * scheduler had disabled would run outside its compute share.
 *
 * Peer, NVLink and fabric queries are answered by vgpu.ko as the driver
 * answers for a GPU with no peer, no NVLink and no fabric (each handler
 * cites the driver function), so CUDA never plans P2P that the policy
 * would then refuse.
 */
static const struct vgpu_ctrl vgpu_ctrls[] = {
	{ NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, VGPU_CTRL_ATTACHED_IDS },
	{ NV0000_CTRL_CMD_GPU_GET_INIT_STATUS, VGPU_CTRL_GPU_ID },
	{ NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, VGPU_CTRL_ID_INFO_V2 },
	{ NV0000_CTRL_CMD_GPU_GET_PROBED_IDS, VGPU_CTRL_PROBED_IDS },
	{ NV0000_CTRL_CMD_GPU_GET_PCI_INFO, VGPU_CTRL_GPU_ID },
	{ NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID, VGPU_CTRL_GPU_ID },
	{ NV0000_CTRL_CMD_GPU_QUERY_DRAIN_STATE, VGPU_CTRL_GPU_ID },
	{ NV2080_CTRL_CMD_GPU_ACQUIRE_COMPUTE_MODE_RESERVATION, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_GPU_RELEASE_COMPUTE_MODE_RESERVATION, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_TIMER_SET_GR_TICK_FREQ, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_RC_SOFT_DISABLE_WATCHDOG, VGPU_CTRL_ANSWER_OK },
	/*
	 * GPU-wide, as the watchdog: accepted, not applied (a slice changes
	 * nothing another slice sees; what a multi-GPU job asks of its own
	 * GPUs is answered, not refused).
	 */
	{ NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL, VGPU_CTRL_ANSWER_OK },
	/* The same, under the number 535's libcuda gives it (no header). */
	{ NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL_LEGACY, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_FB_GET_INFO, VGPU_CTRL_FB_INFO },
	{ NV2080_CTRL_CMD_FB_GET_INFO_V2, VGPU_CTRL_FB_INFO_V2 },
	{ NV2080_CTRL_CMD_GPU_GET_PIDS, VGPU_CTRL_GET_PIDS },
	{ NV2080_CTRL_CMD_GPU_GET_PID_INFO, VGPU_CTRL_GET_PID_INFO },
	{ NV0041_CTRL_CMD_GET_SURFACE_INFO, VGPU_CTRL_SURFACE_INFO },
	{ NVA06C_CTRL_CMD_SET_TIMESLICE, VGPU_CTRL_ANSWER_OK },
	{ NVA06C_CTRL_CMD_GET_TIMESLICE, VGPU_CTRL_PLAIN },
	{ NVA06C_CTRL_CMD_PREEMPT, VGPU_CTRL_ANSWER_OK },
	{ NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, VGPU_CTRL_ANSWER_OK },
	{ NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, VGPU_CTRL_PLAIN },
	{ NVA06F_CTRL_CMD_SET_INTERLEAVE_LEVEL, VGPU_CTRL_ANSWER_OK },
	{ NVA06F_CTRL_CMD_GET_INTERLEAVE_LEVEL, VGPU_CTRL_PLAIN },
	{ NVA06F_CTRL_CMD_STOP_CHANNEL, VGPU_CTRL_ANSWER_OK },
	{ NV2080_CTRL_CMD_FIFO_DISABLE_CHANNELS, VGPU_CTRL_ANSWER_OK },
	{ NV0000_CTRL_CMD_GPU_GET_ID_INFO, VGPU_CTRL_ID_INFO },
	{ NV0000_CTRL_CMD_GPU_ATTACH_IDS, VGPU_CTRL_ID_LIST },
	{ NV0000_CTRL_CMD_GPU_DETACH_IDS, VGPU_CTRL_ID_LIST },
	{ NV0000_CTRL_CMD_GPU_ASYNC_ATTACH_ID, VGPU_CTRL_GPU_ID },
	{ NV0000_CTRL_CMD_GPU_WAIT_ATTACH_ID, VGPU_CTRL_GPU_ID },
	{ NV0000_CTRL_CMD_GPU_GET_DEVICE_IDS, VGPU_CTRL_DEVICE_IDS },
	{ NV0000_CTRL_CMD_GPU_GET_ACTIVE_DEVICE_IDS, VGPU_CTRL_ACTIVE_DEVICES },
	{ NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS, VGPU_CTRL_NO_PEERS },
	{ NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2, VGPU_CTRL_NO_PEERS },
	{ NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX, VGPU_CTRL_NO_PEERS },
	{ NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS, VGPU_CTRL_NO_PEERS },
	{ NV2080_CTRL_CMD_GET_GPU_FABRIC_PROBE_INFO, VGPU_CTRL_NO_PEERS },
	{ NV2080_CTRL_CMD_NVLINK_GET_NVLINK_CAPS, VGPU_CTRL_NO_PEERS },
	{ NV2080_CTRL_CMD_NVLINK_GET_NVLINK_STATUS, VGPU_CTRL_NO_PEERS },
	/* No boost group (gpuboostmgrQueryGroups with none: all zero). */
	{ NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO, VGPU_CTRL_NO_PEERS },
	{ NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY, VGPU_CTRL_SHARE_POLICY },
	{ NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO, VGPU_CTRL_FB_REGIONS },
	{ NV2080_CTRL_CMD_GPU_GET_INFO, VGPU_CTRL_GPU_INFO },
	{ NV2080_CTRL_CMD_GPU_GET_INFO_V2, VGPU_CTRL_GPU_INFO_V2 },
};

static const struct vgpu_ctrl *vgpu_ctrl_find(u32 cmd)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(vgpu_ctrls); i++)
		if (vgpu_ctrls[i].cmd == cmd)
			return &vgpu_ctrls[i];
	return NULL;
}

/* At most this many embedded lists per control (BUILD_VERSION has three). */
#define VGPU_CTRL_MAX_LISTS     (VGPU_CALL_MAX_BUFS - 1)

struct vgpu_list {
	void *kbuf;             /* NULL: the caller's pointer was NULL */
	u32 size;
	u32 ptr_off;
	void __user *uptr;
};

/*
 * The embedded lists of a control the table describes (nvrel_ptr: where the
 * pointer and its count lie in this release's params, bytes per count):
 * each copied once from the caller, from the count in vgpu.ko's own copy
 * of the params, so neither can change between the check and the driver's
 * read.  A NULL pointer stays NULL (RM then answers counts only).
 */
static NV_STATUS vgpu_lists_in(const struct nvrel_item *item, void *kp, u32 size,
			       struct vgpu_list *l, u32 *n)
{
	NV_STATUS st;
	u64 uptr, bytes;
	u32 i;

	*n = 0;
	if (!vgpu_rel->ptrs || item->nptrs > VGPU_CTRL_MAX_LISTS)
		return NV_ERR_NOT_SUPPORTED;
	for (i = 0; i < item->nptrs; i++) {
		st = vgpu_list_extent(item, i, kp, size, &l[i].ptr_off, &uptr, &bytes);
		if (st != NV_OK)
			return st;
		l[i].uptr = u64_to_user_ptr(uptr);
		(*n)++;
		if (!l[i].uptr)
			continue;
		/* RM's own bound for an embedded copy; a zero count copies nothing. */
		if (bytes > VGPU_MAX_CTRL_PARAMS)
			return NV_ERR_INVALID_ARGUMENT;
		if (!bytes)
			continue;
		l[i].kbuf = kvzalloc(bytes, GFP_KERNEL_ACCOUNT);
		if (!l[i].kbuf)
			return NV_ERR_NO_MEMORY;
		l[i].size = bytes;
		if (copy_from_user(l[i].kbuf, l[i].uptr, bytes))
			return NV_ERR_INVALID_ARGUMENT;
	}
	return NV_OK;
}

static void vgpu_lists_free(struct vgpu_list *l, u32 n)
{
	while (n--)
		kvfree(l[n].kbuf);
}

/* The container's number of a driver gpu_id, or -1 if not the slice's. */
static int vgpu_slice_gpu_of(struct vgpu_slice *s, u32 gpu_id)
{
	u32 i;

	for (i = 0; i < s->nr_gpus; i++)
		if (s->gpus[i].gpu_id == gpu_id)
			return i;
	return -1;
}

/*
 * A list of driver gpu_ids cut to the slice's, in the driver's order, the
 * rest NV0000_CTRL_GPU_INVALID_ID; flags (may be NULL) move with their ids.
 */
static void vgpu_ids_filter(struct vgpu_slice *s, u32 *ids, u32 *flags, u32 n)
{
	u32 i, out = 0;

	for (i = 0; i < n; i++) {
		if (ids[i] == NV0000_CTRL_GPU_INVALID_ID ||
		    vgpu_slice_gpu_of(s, ids[i]) < 0)
			continue;
		ids[out] = ids[i];
		if (flags)
			flags[out] = flags[i];
		out++;
	}
	for (i = out; i < n; i++) {
		ids[i] = NV0000_CTRL_GPU_INVALID_ID;
		if (flags)
			flags[i] = 0;
	}
}

/* ------------------------------------------------------- memory reports */

static u32 vgpu_kib(u64 b)
{
	return (u32)min_t(u64, b >> 10, U32_MAX);
}

static u64 vgpu_free_bytes(struct vgpu_slice *s, u32 gpu)
{
	u64 limit = READ_ONCE(s->gpus[gpu].limit);
	u64 used = atomic64_read(&s->gpus[gpu].used);

	return used >= limit ? 0 : limit - used;
}

/* One FB_INFO entry: the driver's value in, the slice's out. */
static u32 vgpu_fb_value(struct vgpu_slice *s, u32 gpu, u32 index, u32 real)
{
	switch (index) {
	case NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_MAPPABLE_HEAP_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE:
		return vgpu_kib(READ_ONCE(s->gpus[gpu].limit));
	case NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE:
	case NV2080_CTRL_FB_INFO_INDEX_LARGEST_FREE_REGION_SIZE_KB:
		/* Never more free than the GPU really has. */
		return min(vgpu_kib(vgpu_free_bytes(s, gpu)), real);
	default:
		return real;
	}
}

static void vgpu_fb_rewrite(struct vgpu_slice *s, u32 gpu,
			    NV2080_CTRL_FB_INFO *list, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		list[i].data = vgpu_fb_value(s, gpu, list[i].index, list[i].data);
}

void vgpu_heap_info_rewrite(struct vgpu_slice *s, u32 gpu, NVOS32_PARAMETERS *p)
{
	u64 limit = READ_ONCE(s->gpus[gpu].limit);

	p->total = limit;
	p->free = min_t(u64, vgpu_free_bytes(s, gpu), p->free);
}

/* ------------------------------------------- identity, peers, fabric */

/* Every one of n ids is a slice GPU's. */
static bool vgpu_ids_ours(struct vgpu_slice *s, const u32 *ids, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		if (vgpu_slice_gpu_of(s, ids[i]) < 0)
			return false;
	return true;
}

/*
 * ATTACH_IDS / DETACH_IDS: a list ended by NV0000_CTRL_GPU_INVALID_ID.  In
 * 595.45.04 Core RM only validates it (client_resource.c,
 * cliresCtrlCmdGpuAttachIds / DetachIds: an id not probed, or not attached,
 * is NV_ERR_INVALID_ARGUMENT; ATTACH_ALL_PROBED_IDS / DETACH_ALL_ATTACHED_IDS
 * first is NV_OK and does nothing), so the list need only name the slice's
 * GPUs; another GPU's id gets the driver's answer for an unknown one.
 */
static NV_STATUS vgpu_id_list_check(struct vgpu_slice *s, const u32 *ids)
{
	u32 i;

	if (ids[0] == NV0000_CTRL_GPU_ATTACH_ALL_PROBED_IDS)
		return NV_OK;
	for (i = 0; i < NV0000_CTRL_GPU_MAX_ATTACHED_GPUS &&
		    ids[i] != NV0000_CTRL_GPU_INVALID_ID; i++)
		if (vgpu_slice_gpu_of(s, ids[i]) < 0)
			return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

/*
 * GET_DEVICE_IDS: a bit per attached GPU's deviceInstance.  The container's
 * deviceInstance of a GPU is its number in the slice (ID_INFO, NV0080's
 * deviceId), so the answer is made from the driver's attached list, asked
 * through the kernel entry (the host's list never lies on a call page).
 */
static NV_STATUS vgpu_device_ids(struct vgpu_slice *s, NVOS54_PARAMETERS *p,
				 NV0000_CTRL_GPU_GET_DEVICE_IDS_PARAMS *dp)
{
	u32 ids[NV0000_CTRL_GPU_MAX_ATTACHED_GPUS];
	NV_STATUS st;
	int idx;
	u32 i;

	memset(ids, 0xff, sizeof(ids));
	st = vgpu_rm_ctrl(p->hClient, p->hObject,
			  NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS, ids, sizeof(ids));
	if (st != NV_OK)
		return st;
	dp->deviceIds = 0;
	for (i = 0; i < ARRAY_SIZE(ids) && ids[i] != NV0000_CTRL_GPU_INVALID_ID; i++) {
		idx = vgpu_slice_gpu_of(s, ids[i]);
		if (idx >= 0 && idx < 32)
			dp->deviceIds |= BIT(idx);
	}
	return NV_OK;
}

/* GET_ACTIVE_DEVICE_IDS (kernel entry): the slice's GPUs, in the driver's order. */
static void vgpu_active_devices_filter(struct vgpu_slice *s, void *kp, u32 size)
{
	NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS *ap = kp;
	u32 max = (size - offsetof(NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS,
				   devices)) / sizeof(ap->devices[0]);
	u32 n = min3(ap->numDevices, max, (u32)NV0000_CTRL_GPU_MAX_ACTIVE_DEVICES);
	u32 i, out = 0;

	for (i = 0; i < n; i++)
		if (vgpu_slice_gpu_of(s, ap->devices[i].gpuId) >= 0)
			ap->devices[out++] = ap->devices[i];
	memset(&ap->devices[out], 0, (max - out) * sizeof(ap->devices[0]));
	ap->numDevices = out;
}

/*
 * The P2P caps of GPUs with no peer: what CliGetSystemP2pCaps
 * (client_resource.c) sets before it looks for one -- no caps, no optimal
 * copy engine, every status NOT_SUPPORTED, every bus peer id INVALID_PEER --
 * after the driver's own checks (gpuCount 1..32; an id that is no GPU's is
 * NV_ERR_INVALID_ARGUMENT, here one that is no slice GPU's).  V1 and V2
 * share the head; V1's busPeerIds and busEgmPeerIds are pointers to
 * gpuCount^2 ids in the caller's memory, V2's are arrays (535: no EGM ids).
 */
static NV_STATUS vgpu_p2p_caps(struct vgpu_slice *s, u32 cmd, void *kp, u32 size)
{
	NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS *v2 = kp;
	NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS *v1 = kp;
	u32 n = v2->gpuCount, peers, i;
	u64 uptr[2];

	BUILD_BUG_ON(offsetof(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_PARAMS, p2pCapsStatus) !=
		     offsetof(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS, p2pCapsStatus));
	if (n == 0 || n > NV0000_CTRL_SYSTEM_MAX_ATTACHED_GPUS ||
	    !vgpu_ids_ours(s, v2->gpuIds, n))
		return NV_ERR_INVALID_ARGUMENT;
	v2->p2pCaps = 0;
	v2->p2pOptimalReadCEs = 0;
	v2->p2pOptimalWriteCEs = 0;
	memset(v2->p2pCapsStatus, NV0000_P2P_CAPS_STATUS_NOT_SUPPORTED,
	       sizeof(v2->p2pCapsStatus));
	peers = n * n;
	if (cmd == NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2) {
		memset32(v2->busPeerIds, NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER, peers);
		memset32(v2->busEgmPeerIds, NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER, peers);
		return NV_OK;
	}
	uptr[0] = v1->busPeerIds;
	uptr[1] = size >= sizeof(*v1) ? v1->busEgmPeerIds : 0;
	for (i = 0; i < ARRAY_SIZE(uptr); i++) {
		u32 __user *u = u64_to_user_ptr(uptr[i]);
		u32 j;

		for (j = 0; u && j < peers; j++)
			if (put_user(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_INVALID_PEER, u + j))
				return NV_ERR_INVALID_ARGUMENT;
	}
	return NV_OK;
}

/*
 * The peer, NVLink and fabric queries, answered for a GPU with none:
 * - P2P_CAPS_MATRIX: the driver's checks (cliresCtrlCmdSystemGetP2pCapsMatrix:
 *   grpACount 1..8, grpBCount 0..8, ids known), then every pair as
 *   CliGetSystemP2pCaps starts it: no caps, no copy engine;
 * - SYSTEM_GET_FABRIC_STATUS: SKIP, the answer when no fabric manager
 *   manages the system (cliresCtrlCmdSystemGetFabricStatus);
 * - GET_GPU_FABRIC_PROBE_INFO: state UNSUPPORTED (0), the answer of
 *   subdeviceCtrlCmdGetGpuFabricProbeInfo for a directly connected GPU;
 * - NVLINK_GET_NVLINK_CAPS / _STATUS: no link discovered or enabled, NV_OK
 *   (nvlinkCtrlCmdBusGetNvlinkCaps and subdeviceCtrlCmdBusGetNvlinkStatus
 *   when the GPU has no KernelNvlink).
 * - SYNC_GPU_BOOST_GROUP_INFO: no group (below).
 * Every output is written; the rest of the struct is zeroed (the boost
 * groups' array excepted: the driver leaves it as passed).
 */
static NV_STATUS vgpu_no_peers(struct vgpu_slice *s, u32 cmd, void *kp, u32 size)
{
	NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS *m = kp;
	size_t outs = offsetof(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_MATRIX_PARAMS, p2pCaps);

	switch (cmd) {
	case NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS:
	case NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2:
		return vgpu_p2p_caps(s, cmd, kp, size);
	case NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_MATRIX:
		if (!m->grpACount || m->grpACount > NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS ||
		    m->grpBCount > NV0000_CTRL_SYSTEM_MAX_P2P_GROUP_GPUS ||
		    !vgpu_ids_ours(s, m->gpuIdGrpA, m->grpACount) ||
		    !vgpu_ids_ours(s, m->gpuIdGrpB, m->grpBCount))
			return NV_ERR_INVALID_ARGUMENT;
		if (size > outs)
			memset(kp + outs, 0, size - outs);
		return NV_OK;
	case NV0000_CTRL_CMD_SYSTEM_GET_FABRIC_STATUS:
		((NV0000_CTRL_SYSTEM_GET_FABRIC_STATUS_PARAMS *)kp)->fabricStatus =
			NV0000_CTRL_GET_SYSTEM_FABRIC_STATUS_SKIP;
		return NV_OK;
	case NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO:
		/*
		 * The slice's GPUs are in no boost group: groupCount 0 and the
		 * rest as the caller passed it, which is what
		 * gpuboostmgrQueryGroups_IMPL (src/kernel/power/gpu_boost_mgr.c,
		 * called by cliresCtrlCmdSyncGpuBoostGroupInfo_IMPL) writes when
		 * no group exists (groups are made only by the root-only
		 * BOOST_GROUP_CREATE, which the policy refuses).  The driver's
		 * own answer would list groups spanning other slices' GPUs.
		 */
		*(u32 *)kp = 0;         /* groupCount, the struct's first member */
		return NV_OK;
	default:
		memset(kp, 0, size);
		return NV_OK;
	}
}

/*
 * An inherited share policy (CLIENT_SET_INHERITED_SHARE_POLICY, which RM
 * applies as CLIENT_SHARE_OBJECT on the client): the objects of this client
 * made later are shared as it says.  Type ALL, OS_SECURITY_TOKEN (every
 * process of the user, other slices' included), CLIENT, GPU and the rest
 * would reach other slices; NONE shares with nobody; a revoke only takes
 * access away.  A PID share gives access to the clients of the same
 * process: RM compares the two clients' ProcID and never reads target
 * (client_resource.c, cliresShareCallback_IMPL's RS_SHARE_TYPE_PID case;
 * 535.261.03 and 595.45.04 alike), so it stays within the caller's own
 * process and is forwarded as made.  CUDA 535's cuInit sets two, with
 * target its own client handle (tests/realdrv535).
 */
static NV_STATUS vgpu_share_policy_check(struct vgpu_slice *s, RS_SHARE_POLICY *sp)
{
	if (sp->action & RS_SHARE_ACTION_FLAG_REVOKE)
		return NV_OK;
	switch (sp->type) {
	case RS_SHARE_TYPE_NONE:
	case RS_SHARE_TYPE_PID:
		return NV_OK;
	default:
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	}
}

/*
 * FB_GET_FB_REGION_INFO: the regions, in the driver's order, cut so that
 * their usable bytes (limit - base + 1 - reserved) add up to the slice's
 * quota at most: the region where the quota runs out ends there, later
 * ones are dropped.  A region is the release's size (48 or 56 bytes), read
 * by its head only.
 */
static void vgpu_fb_regions_rewrite(struct vgpu_slice *s, u32 gpu, void *kp, u32 size)
{
	const u32 head = offsetof(NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS, fbRegion);
	const u32 stride = (size - head) / NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES;
	NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS *fp = kp;
	u64 budget = READ_ONCE(s->gpus[gpu].limit), bytes, usable;
	u32 n = min_t(u32, fp->numFBRegions, NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES);
	u32 i, out = 0;

	/* base, limit, reserved: the members read (nvabi.h pins them). */
	if (size <= head || stride < 3 * sizeof(u64))
		return;
	for (i = 0; i < n && budget; i++) {
		NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO *r = kp + head + i * stride;

		if (r->limit < r->base)
			continue;
		bytes = r->limit - r->base + 1;
		usable = bytes > r->reserved ? bytes - r->reserved : 0;
		if (usable > budget) {
			r->limit = r->base + r->reserved + budget - 1;
			usable = budget;
		}
		budget -= usable;
		if (out != i)
			memmove(kp + head + out * stride, r, stride);
		out++;
	}
	memset(kp + head + out * stride, 0,
	       (NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_MAX_ENTRIES - out) * stride);
	fp->numFBRegions = out;
}

/* ------------------------------------------------------------ controls */

/* The slice GPU of the object a control is made on (subdevice and below). */
static int vgpu_ctrl_gpu(NVOS54_PARAMETERS *p, u32 *gpu)
{
	struct vgpu_obj *o;
	int ret = -ENOENT;

	rcu_read_lock();
	o = vgpu_obj_find(p->hClient, p->hObject);
	if (o && o->type != VGPU_OBJ_CLIENT) {
		*gpu = o->gpu;
		ret = 0;
	}
	rcu_read_unlock();
	return ret;
}

/*
 * A control the policy refuses or vgpu.ko does not implement, let through
 * by passthrough_unknown, audit mode or the slice's allow-list: the NVOS54
 * on a call page, the params read by the driver from the caller's memory.
 */
static NV_STATUS vgpu_control_passthrough(struct vgpu_file *vf,
					  NVOS54_PARAMETERS *p)
{
	long ret;

	pr_info_ratelimited("slice %u: control %#x forwarded\n", vf->slice->id,
			    p->cmd);
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_CONTROL, p, sizeof(*p), NULL, 0);
	return ret ? vgpu_call_status(ret) : p->status;
}

/**
 * vgpu_control_path - RM_CONTROL: answered here, or made on a call page
 * through the real file at the caller's privilege (the identity reads that
 * create nothing go through the kernel entry point instead: Open item 4 of
 * docs/mediator.md)
 *
 * Statuses: NV_ERR_NOT_SUPPORTED for serialized (FINN) parameters;
 * NV_ERR_INSUFFICIENT_PERMISSIONS for a privileged or unlisted control
 * (NV_ERR_NOT_SUPPORTED for one the release's RM does not export);
 * NV_ERR_INVALID_CLIENT for a client the file does not own;
 * NV_ERR_INVALID_PARAM_STRUCT for a wrong paramsSize; NV_ERR_INVALID_ARGUMENT
 * for unreadable parameters.  Everything else is the driver's.
 */
/*
 * A legacy GSS control (cmd & 0x8000: RM_GSS_LEGACY_MASK,
 * interface/deprecated/rmapi_deprecated.h) no RM class exports and no
 * header of any release names, so no policy table lists it: the
 * deprecated-control layer hands it to RmGssLegacyRpcCmd
 * (rmapi_gss_legacy_control.c), which forwards it unread to GSP, whose
 * handling is closed.  libcuda 535.261.03 asks this one at cuInit (a list
 * of {id, data} queries, 332 bytes; it reads two flags from the data) and
 * fails unless it is NV_OK.  vgpu.ko answers it for the slice: NV_OK with
 * the parameters as they came (both flags 0: the features they stand for
 * off), after the checks the driver makes first (client and object); the
 * driver never sees it.  Unknown semantics are never forwarded.
 */
#define VGPU_GSS_LEGACY_CUINIT_QUERY            0x20808159U
#define VGPU_GSS_LEGACY_CUINIT_QUERY_SIZE       332

static NV_STATUS vgpu_gss_legacy_query(struct vgpu_file *vf, NVOS54_PARAMETERS *p)
{
	struct vgpu_client *c;
	NV_STATUS st;

	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	rcu_read_lock();
	st = vgpu_obj_find(p->hClient, p->hObject) ? NV_OK : NV_ERR_OBJECT_NOT_FOUND;
	rcu_read_unlock();
	if (st == NV_OK && (p->paramsSize != VGPU_GSS_LEGACY_CUINIT_QUERY_SIZE || !p->params))
		st = NV_ERR_INVALID_ARGUMENT;
	vgpu_client_put(c);
	return st;
}

/*
 * A control CUDA asks that no class of any release exports (in no header,
 * no table, no g_*_nvoc.c export list of 535.261.03 or 595.45.04): the
 * driver's answer is NV_ERR_NOT_SUPPORTED before it reads anything
 * (resControlLookup, rs_resource.c), and libcuda 535.261.03 goes on after
 * that answer but gives up cuInit after the policy's refusal
 * (NV_ERR_INSUFFICIENT_PERMISSIONS).  Answering the driver's own status
 * tells the caller nothing the driver would not.
 */
static bool vgpu_ctrl_nonexistent(u32 cmd)
{
	return cmd == 0x0080028bU;      /* NV0080, GPU category, message 0x8b */
}

/*
 * A control the policy refuses and the release's RM exports from no class
 * (nvrel_ctl_unexported: its own export tables, for the releases whose
 * tree nvgen read): the driver's answer, NV_ERR_NOT_SUPPORTED, after the
 * checks it makes first, in its order: the client (_rmapiRmControl:
 * NV_ERR_INVALID_CLIENT; here the file's own), params and paramsSize
 * agreeing (NV_ERR_INVALID_ARGUMENT), the object (serverControl,
 * clientGetResourceRef: NV_ERR_OBJECT_NOT_FOUND), then
 * resControlLookup_IMPL (rs_resource.c) finding no export entry.  Nothing
 * is forwarded: NVML goes on after NOT_SUPPORTED where it stops at the
 * policy's refusal (0x20808161 before GPU_GET_PIDS: docs/nvml.md), and a
 * legacy GSS command is never handed to GSP's closed handling.
 */
static NV_STATUS vgpu_ctrl_unexported(struct vgpu_file *vf, NVOS54_PARAMETERS *p)
{
	struct vgpu_client *c;
	NV_STATUS st = NV_ERR_NOT_SUPPORTED;

	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	if (!p->params != !p->paramsSize) {
		st = NV_ERR_INVALID_ARGUMENT;
	} else {
		rcu_read_lock();
		if (!vgpu_obj_find(p->hClient, p->hObject))
			st = NV_ERR_OBJECT_NOT_FOUND;
		rcu_read_unlock();
	}
	vgpu_client_put(c);
	return st;
}

/* ------------------------------------------------- per-kind handlers */

/* One control on its way through vgpu_control_path: what its handlers share. */
#define VGPU_CTRL_MARKS 256     /* vgpu_ctrl_fb_list_in's bound on a list */

struct vgpu_ctrl_ctx {
	struct vgpu_file *vf;
	struct vgpu_slice *s;
	NVOS54_PARAMETERS *p;
	void __user *uparams;           /* the caller's params */
	const struct nvrel_item *item;  /* the release's policy entry */
	u32 size;                       /* the release's params size */
	void *kp;                       /* vgpu.ko's copy of them (NULL: size 0) */
	/* FB_GET_INFO V1, GET_SURFACE_INFO: the embedded list carried */
	NV2080_CTRL_FB_INFO *list;
	void __user *ulist;
	u32 n;
	/* VGPU_CTRL_LISTS: the table's embedded lists */
	struct vgpu_list lists[VGPU_CTRL_MAX_LISTS];
	u32 nlists;
	NvP64 name;                     /* ID_INFO's szName, kept from the driver */
	/* GPU_GET_INFO(_V2): the entries answered by vgpu.ko (vgpu_gpu_info_mark) */
	DECLARE_BITMAP(marks, VGPU_CTRL_MARKS);
};

/*
 * What vgpu_control_path does for a kind besides forwarding it, as a
 * genl_ops entry does for a command.  The flags are checked in the
 * driver's order: the object (VGPU_CTRLF_OBJECT) before the params are
 * read, gpuId (VGPU_CTRLF_GPU_ID) after they are.
 */
#define VGPU_CTRLF_OBJECT       BIT(0)  /* the object must exist (serverControl) */
#define VGPU_CTRLF_GPU_ID       BIT(1)  /* gpuId, the first member, a slice GPU's */
#define VGPU_CTRLF_KERNEL_ENTRY BIT(2)  /* asked through vgpu_rm_ctrl, no call page */
#define VGPU_CTRLF_ANSWERED     BIT(3)  /* never reaches the driver (below) */

/*
 * A VGPU_CTRLF_ANSWERED kind is answered by its before, whose status is the
 * call's (the params copied out on NV_OK); one with no before is answered
 * NV_OK once its checks pass (the object found), its params never read.
 */
struct vgpu_ctrl_ops {
	/* The 595.45.04 struct a handler reads and writes in place (0: none). */
	u32 struct_size;
	unsigned int flags;             /* VGPU_CTRLF_* */
	/* Before the call: embedded lists to the call page, PIDs to host. */
	NV_STATUS (*before)(struct vgpu_ctrl_ctx *x);
	/* After: vgpu.ko's own numbers, whatever came back (on NV_OK). */
	NV_STATUS (*after)(struct vgpu_ctrl_ctx *x);
};

/* LISTS: the table's embedded lists copied in, to go on the call page. */
static NV_STATUS vgpu_ctrl_lists_in(struct vgpu_ctrl_ctx *x)
{
	if (!x->kp)
		return NV_ERR_INVALID_ARGUMENT;
	return vgpu_lists_in(x->item, x->kp, x->size, x->lists, &x->nlists);
}

/* The lists back where the caller's pointers (kept in kp) say. */
static NV_STATUS vgpu_ctrl_lists_out(struct vgpu_ctrl_ctx *x)
{
	NV_STATUS st = NV_OK;
	u32 i;

	for (i = 0; i < x->nlists; i++)
		if (x->lists[i].kbuf &&
		    copy_to_user(x->lists[i].uptr, x->lists[i].kbuf, x->lists[i].size))
			st = NV_ERR_INVALID_ARGUMENT;
	return st;
}

/* NO_PEERS: answered here; the driver never sees it. */
static NV_STATUS vgpu_ctrl_no_peers(struct vgpu_ctrl_ctx *x)
{
	return x->kp ? vgpu_no_peers(x->s, x->p->cmd, x->kp, x->size) :
	       NV_ERR_INVALID_ARGUMENT;
}

/* DEVICE_IDS: answered here from the driver's attached list (kernel entry). */
static NV_STATUS vgpu_ctrl_device_ids(struct vgpu_ctrl_ctx *x)
{
	return x->kp ? vgpu_device_ids(x->s, x->p, x->kp) : NV_ERR_INVALID_ARGUMENT;
}

/* ATTACH/DETACH_IDS: every id a slice GPU's, then forwarded. */
static NV_STATUS vgpu_ctrl_id_list(struct vgpu_ctrl_ctx *x)
{
	return x->kp && x->size >= NV0000_CTRL_GPU_MAX_ATTACHED_GPUS * sizeof(u32) ?
	       vgpu_id_list_check(x->s, x->kp) : NV_ERR_INVALID_ARGUMENT;
}

/* SET_INHERITED_SHARE_POLICY: PID, NONE or a revoke, then forwarded. */
static NV_STATUS vgpu_ctrl_share_policy(struct vgpu_ctrl_ctx *x)
{
	return x->kp ? vgpu_share_policy_check(x->s, x->kp) : NV_ERR_INVALID_ARGUMENT;
}

/* FB_GET_INFO V1, GET_SURFACE_INFO: the embedded list copied in. */
static NV_STATUS vgpu_ctrl_fb_list_in(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_FB_GET_INFO_PARAMS *fp = x->kp;

	BUILD_BUG_ON(offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS, fbInfoList) !=
		     offsetof(NV0041_CTRL_GET_SURFACE_INFO_PARAMS, surfaceInfoList));
	x->n = fp->fbInfoListSize;
	/*
	 * An empty list is the driver's to answer: nothing is carried
	 * (the caller's pointer goes as it is, and no byte of it is
	 * read for a count of 0).
	 */
	if (!x->n)
		return NV_OK;
	if (x->n > VGPU_CTRL_MARKS || !fp->fbInfoList)
		return NV_ERR_INVALID_ARGUMENT;
	x->ulist = u64_to_user_ptr(fp->fbInfoList);
	x->list = kmalloc_array(x->n, sizeof(*x->list), GFP_KERNEL_ACCOUNT);
	if (!x->list)
		return NV_ERR_NO_MEMORY;
	if (copy_from_user(x->list, x->ulist, x->n * sizeof(*x->list)))
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

/* The list back to the caller, FB_GET_INFO's rewritten first. */
static NV_STATUS vgpu_ctrl_fb_list_out(struct vgpu_ctrl_ctx *x, bool rewrite)
{
	NV2080_CTRL_FB_GET_INFO_PARAMS *fp = x->kp;
	u32 gpu = 0;

	if (!x->list)
		return NV_OK;
	if (rewrite && !vgpu_ctrl_gpu(x->p, &gpu))
		vgpu_fb_rewrite(x->s, gpu, x->list, x->n);
	fp->fbInfoList = (u64)(uintptr_t)x->ulist;   /* kept by the call */
	if (copy_to_user(x->ulist, x->list, x->n * sizeof(*x->list)))
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_fb_info_out(struct vgpu_ctrl_ctx *x)
{
	return vgpu_ctrl_fb_list_out(x, true);
}

static NV_STATUS vgpu_ctrl_surface_info_out(struct vgpu_ctrl_ctx *x)
{
	return vgpu_ctrl_fb_list_out(x, false);
}

static NV_STATUS vgpu_ctrl_fb_info_v2_out(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_FB_GET_INFO_V2_PARAMS *fp = x->kp;
	/* The list this release's struct holds (grown over releases). */
	u32 max = (x->size - offsetof(NV2080_CTRL_FB_GET_INFO_V2_PARAMS,
				      fbInfoList)) / sizeof(fp->fbInfoList[0]);
	u32 gpu = 0;

	if (!vgpu_ctrl_gpu(x->p, &gpu))
		vgpu_fb_rewrite(x->s, gpu, fp->fbInfoList,
				min_t(u32, min(fp->fbInfoListSize, max),
				      NV2080_CTRL_FB_INFO_MAX_LIST_SIZE));
	return NV_OK;
}

/*
 * GPU_GET_INFO V1 and V2: DMABUF_CAPABILITY reads NO.  A slice's memory
 * cannot be exported as a dma-buf (NV_ESC_EXPORT_TO_DMABUF_FD is never
 * forwarded: audit.c), so an importer that asks first (the driver answers
 * YES where osDmabufIsSupported(): getGpuInfos, subdevice_ctrl_gpu_kernel.c)
 * learns it here rather than from a refused export.  The entries are
 * picked on vgpu.ko's copy before the call, the one the driver reads, by
 * the item bits getGpuInfos reads (595.45.04: DRF _INDEX, 23:0; 535.261.03
 * compares the whole index, and a higher bit fails its call), and answered
 * after it whatever the call page says then: a sibling rewriting an index
 * there changes nothing.  Every other entry is the driver's answer (read
 * back from the call page, so a sibling can forge it, as it can read the
 * driver's answers anyway: docs/mediator.md).
 */
static void vgpu_gpu_info_mark(struct vgpu_ctrl_ctx *x,
			       const NV2080_CTRL_GPU_INFO *list, u32 n)
{
	u32 i;

	bitmap_zero(x->marks, VGPU_CTRL_MARKS);
	for (i = 0; i < min_t(u32, n, VGPU_CTRL_MARKS); i++)
		if ((list[i].index & NV2080_CTRL_GPU_INFO_INDEX_INDEX_MASK) ==
		    NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY)
			__set_bit(i, x->marks);
}

static void vgpu_gpu_info_answer(struct vgpu_ctrl_ctx *x,
				 NV2080_CTRL_GPU_INFO *list, u32 n)
{
	unsigned int i;

	for_each_set_bit(i, x->marks, min_t(u32, n, VGPU_CTRL_MARKS))
		list[i].data = NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_NO;
}

/*
 * V1: its list carried as FB_GET_INFO's (the same layout).  Only the
 * deprecated-control layer answers V1, by calling V2
 * (rmapi_deprecated_control.c): more items than this release's V2 list
 * holds is NV_ERR_OUT_OF_RANGE there, before the list is read.
 */
static NV_STATUS vgpu_ctrl_gpu_info_in(struct vgpu_ctrl_ctx *x)
{
	const NV2080_CTRL_GPU_GET_INFO_PARAMS *gp = x->kp;
	u32 v2 = vgpu_rel_size(NVREL_CTL, NV2080_CTRL_CMD_GPU_GET_INFO_V2);
	NV_STATUS st;

	if (!gp || v2 < sizeof(u32))
		return NV_ERR_NOT_SUPPORTED;
	if (gp->gpuInfoListSize > (v2 - sizeof(u32)) / sizeof(NV2080_CTRL_GPU_INFO))
		return NV_ERR_OUT_OF_RANGE;
	BUILD_BUG_ON(offsetof(NV2080_CTRL_GPU_GET_INFO_PARAMS, gpuInfoListSize) !=
		     offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS, fbInfoListSize));
	BUILD_BUG_ON(offsetof(NV2080_CTRL_GPU_GET_INFO_PARAMS, gpuInfoList) !=
		     offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS, fbInfoList));
	st = vgpu_ctrl_fb_list_in(x);
	if (st == NV_OK && x->list)
		vgpu_gpu_info_mark(x, x->list, x->n);
	return st;
}

static NV_STATUS vgpu_ctrl_gpu_info_out(struct vgpu_ctrl_ctx *x)
{
	if (x->list)
		vgpu_gpu_info_answer(x, x->list, x->n);
	return vgpu_ctrl_fb_list_out(x, false);
}

/* V2: the list this release's struct holds, counted on vgpu.ko's copy. */
static NV_STATUS vgpu_ctrl_gpu_info_v2_in(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_GPU_GET_INFO_V2_PARAMS *gp = x->kp;
	const u32 at = offsetof(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS, gpuInfoList);
	u32 max = x->size > at ? (x->size - at) / sizeof(gp->gpuInfoList[0]) : 0;

	if (!gp)
		return NV_ERR_INVALID_ARGUMENT;
	x->n = min3(gp->gpuInfoListSize, max,
		    (u32)NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE);
	vgpu_gpu_info_mark(x, gp->gpuInfoList, x->n);
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_gpu_info_v2_out(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_GPU_GET_INFO_V2_PARAMS *gp = x->kp;

	vgpu_gpu_info_answer(x, gp->gpuInfoList, x->n);
	return NV_OK;
}

/*
 * ID_INFO's szName is a pointer the driver never reads (gpumgrGetGpuIdInfo):
 * NULL for the kernel call, the caller's value back after it.
 */
static NV_STATUS vgpu_ctrl_id_info_in(struct vgpu_ctrl_ctx *x)
{
	NV0000_CTRL_GPU_GET_ID_INFO_PARAMS *ip = x->kp;

	x->name = ip->szName;
	ip->szName = 0;
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_id_info_v2_out(struct vgpu_ctrl_ctx *x)
{
	NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS *ip = x->kp;
	int idx = vgpu_slice_gpu_of(x->s, ip->gpuId);

	BUILD_BUG_ON(offsetof(NV0000_CTRL_GPU_GET_ID_INFO_PARAMS, deviceInstance) !=
		     offsetof(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS, deviceInstance));
	/* As NV0080's deviceId: the container's number (memory.c). */
	if (idx < 0)
		return NV_ERR_INVALID_ARGUMENT;
	ip->deviceInstance = idx;
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_id_info_out(struct vgpu_ctrl_ctx *x)
{
	NV0000_CTRL_GPU_GET_ID_INFO_PARAMS *ip = x->kp;

	ip->szName = x->name;
	return vgpu_ctrl_id_info_v2_out(x);
}

static NV_STATUS vgpu_ctrl_active_devices_out(struct vgpu_ctrl_ctx *x)
{
	vgpu_active_devices_filter(x->s, x->kp, x->size);
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_fb_regions_out(struct vgpu_ctrl_ctx *x)
{
	u32 gpu = 0;

	if (vgpu_ctrl_gpu(x->p, &gpu))
		return NV_ERR_INVALID_OBJECT_HANDLE;
	vgpu_fb_regions_rewrite(x->s, gpu, x->kp, x->size);
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_attached_ids_out(struct vgpu_ctrl_ctx *x)
{
	vgpu_ids_filter(x->s, x->kp, NULL, min_t(u32, x->size / sizeof(u32),
						 NV0000_CTRL_GPU_MAX_ATTACHED_GPUS));
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_probed_ids_out(struct vgpu_ctrl_ctx *x)
{
	u32 *ids = x->kp, m = NV0000_CTRL_GPU_MAX_PROBED_GPUS, i;

	/* gpuIds[32], excludedGpuIds[32], from 580 on gpuFlags[32]. */
	vgpu_ids_filter(x->s, ids, x->size >= 3 * m * sizeof(u32) ? ids + 2 * m : NULL, m);
	for (i = 0; i < m && x->size >= 2 * m * sizeof(u32); i++)
		ids[m + i] = NV0000_CTRL_GPU_INVALID_ID;
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_get_pids_out(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_GPU_GET_PIDS_PARAMS *pp = x->kp;
	u32 i, out = 0, cnt = min_t(u32, pp->pidTblCount,
				    NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT);
	pid_t v;

	/*
	 * The driver named each process as the caller's PID namespace
	 * sees it (gpu_rmapi.c, _gpuConvertPid: os_find_ns_pid's
	 * pid_vnr, in the caller's context, as this call runs), leaving
	 * out those it does not see.  Kept: those that name a process
	 * of the slice in that namespace.  The table came back through
	 * the call page, so a sibling may have rewritten it: what it
	 * can make this list is the slice's own processes, which the
	 * caller may see anyway.
	 */
	for (i = 0; i < cnt; i++) {
		v = pp->pidTbl[i];
		if (v > 0 && vgpu_slice_pid_in(x->s, v))
			pp->pidTbl[out++] = v;
	}
	for (i = out; i < cnt; i++)
		pp->pidTbl[i] = 0;
	pp->pidTblCount = out;
	return NV_OK;
}

/* GET_PID_INFO: the container's PIDs to the host's. */
static NV_STATUS vgpu_ctrl_pid_info_in(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_GPU_GET_PID_INFO_PARAMS *pp = x->kp;
	u32 i;

	if (pp->pidInfoListCount > NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES)
		return NV_ERR_INVALID_ARGUMENT;
	for (i = 0; i < pp->pidInfoListCount; i++)
		pp->pidInfoList[i].pid = vgpu_slice_pid_in(x->s, pp->pidInfoList[i].pid);
	return NV_OK;
}

static NV_STATUS vgpu_ctrl_pid_info_out(struct vgpu_ctrl_ctx *x)
{
	NV2080_CTRL_GPU_GET_PID_INFO_PARAMS *pp = x->kp;
	/* The count came back through the call page: bounded again. */
	u32 i, cnt = min_t(u32, pp->pidInfoListCount,
			   NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES);

	for (i = 0; i < cnt; i++)
		pp->pidInfoList[i].pid = vgpu_slice_pid_out(x->s, pp->pidInfoList[i].pid);
	return NV_OK;
}

/*
 * Per kind (vgpu_ctrls[] above names each control's).  The identity reads
 * go through the kernel entry (VGPU_CTRLF_KERNEL_ENTRY): the driver's
 * answer names every GPU of the host (or the host's numbering of the
 * slice's), and a call page is readable by the caller's other threads:
 * asked through the kernel entry, on the caller's own client (a read that
 * creates nothing, the same answer at any privilege), it stays in kernel
 * memory until cut to the slice's GPUs.
 */
static const struct vgpu_ctrl_ops vgpu_ctrl_ops[VGPU_CTRL_NR] = {
	[VGPU_CTRL_PLAIN] = { },
	[VGPU_CTRL_LISTS] = {
		.before = vgpu_ctrl_lists_in,
		.after = vgpu_ctrl_lists_out,
	},
	[VGPU_CTRL_ANSWER_OK] = {
		.flags = VGPU_CTRLF_OBJECT | VGPU_CTRLF_ANSWERED,
	},
	[VGPU_CTRL_GPU_ID] = {
		.flags = VGPU_CTRLF_GPU_ID,
	},
	[VGPU_CTRL_ID_INFO_V2] = {
		.struct_size = sizeof(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS),
		.flags = VGPU_CTRLF_GPU_ID | VGPU_CTRLF_KERNEL_ENTRY,
		.after = vgpu_ctrl_id_info_v2_out,
	},
	[VGPU_CTRL_ATTACHED_IDS] = {
		.struct_size = NV0000_CTRL_GPU_MAX_ATTACHED_GPUS * sizeof(u32),
		.flags = VGPU_CTRLF_KERNEL_ENTRY,
		.after = vgpu_ctrl_attached_ids_out,
	},
	[VGPU_CTRL_PROBED_IDS] = {
		.struct_size = 3 * NV0000_CTRL_GPU_MAX_PROBED_GPUS * sizeof(u32),
		.flags = VGPU_CTRLF_KERNEL_ENTRY,
		.after = vgpu_ctrl_probed_ids_out,
	},
	[VGPU_CTRL_FB_INFO] = {
		.struct_size = sizeof(NV2080_CTRL_FB_GET_INFO_PARAMS),
		.before = vgpu_ctrl_fb_list_in,
		.after = vgpu_ctrl_fb_info_out,
	},
	[VGPU_CTRL_FB_INFO_V2] = {
		.struct_size = sizeof(NV2080_CTRL_FB_GET_INFO_V2_PARAMS),
		.after = vgpu_ctrl_fb_info_v2_out,
	},
	[VGPU_CTRL_SURFACE_INFO] = {
		.struct_size = sizeof(NV0041_CTRL_GET_SURFACE_INFO_PARAMS),
		.before = vgpu_ctrl_fb_list_in,
		.after = vgpu_ctrl_surface_info_out,
	},
	[VGPU_CTRL_GET_PIDS] = {
		.struct_size = sizeof(NV2080_CTRL_GPU_GET_PIDS_PARAMS),
		.after = vgpu_ctrl_get_pids_out,
	},
	[VGPU_CTRL_GET_PID_INFO] = {
		.struct_size = sizeof(NV2080_CTRL_GPU_GET_PID_INFO_PARAMS),
		.before = vgpu_ctrl_pid_info_in,
		.after = vgpu_ctrl_pid_info_out,
	},
	[VGPU_CTRL_ID_INFO] = {
		.struct_size = sizeof(NV0000_CTRL_GPU_GET_ID_INFO_PARAMS),
		.flags = VGPU_CTRLF_GPU_ID | VGPU_CTRLF_KERNEL_ENTRY,
		.before = vgpu_ctrl_id_info_in,
		.after = vgpu_ctrl_id_info_out,
	},
	[VGPU_CTRL_ID_LIST] = {
		.struct_size = sizeof(NV0000_CTRL_GPU_ATTACH_IDS_PARAMS),
		.before = vgpu_ctrl_id_list,
	},
	[VGPU_CTRL_DEVICE_IDS] = {
		.struct_size = sizeof(NV0000_CTRL_GPU_GET_DEVICE_IDS_PARAMS),
		.flags = VGPU_CTRLF_ANSWERED,
		.before = vgpu_ctrl_device_ids,
	},
	[VGPU_CTRL_ACTIVE_DEVICES] = {
		.struct_size = sizeof(NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS),
		.flags = VGPU_CTRLF_KERNEL_ENTRY,
		.after = vgpu_ctrl_active_devices_out,
	},
	[VGPU_CTRL_NO_PEERS] = {
		/* The largest of the structs it fills; the rest is zeroed. */
		.struct_size = sizeof(NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS),
		.flags = VGPU_CTRLF_OBJECT | VGPU_CTRLF_ANSWERED,
		.before = vgpu_ctrl_no_peers,
	},
	[VGPU_CTRL_SHARE_POLICY] = {
		.struct_size = sizeof(NV0000_CTRL_CLIENT_SET_INHERITED_SHARE_POLICY_PARAMS),
		.before = vgpu_ctrl_share_policy,
	},
	[VGPU_CTRL_FB_REGIONS] = {
		.struct_size = sizeof(NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS),
		.after = vgpu_ctrl_fb_regions_out,
	},
	[VGPU_CTRL_GPU_INFO] = {
		.struct_size = sizeof(NV2080_CTRL_GPU_GET_INFO_PARAMS),
		.before = vgpu_ctrl_gpu_info_in,
		.after = vgpu_ctrl_gpu_info_out,
	},
	[VGPU_CTRL_GPU_INFO_V2] = {
		.struct_size = sizeof(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS),
		.before = vgpu_ctrl_gpu_info_v2_in,
		.after = vgpu_ctrl_gpu_info_v2_out,
	},
};

/* ------------------------------------------------------ the control path */

/*
 * The verdict: what vgpu.ko does with the control.  NULL, with the status
 * in *st, when it is answered, refused or forwarded as made here; else its
 * kind's ops, with x->item and x->size the release's.
 */
static const struct vgpu_ctrl_ops *vgpu_ctrl_admit(struct vgpu_ctrl_ctx *x,
						   NV_STATUS *st)
{
	struct vgpu_file *vf = x->vf;
	struct vgpu_slice *s = x->s;
	NVOS54_PARAMETERS *p = x->p;
	const struct nvrel_item *item;
	const struct vgpu_ctrl *ctrl;
	enum vgpu_ctrl_kind kind;

	if (p->flags & NVOS54_FLAGS_FINN_SERIALIZED) {
		*st = NV_ERR_NOT_SUPPORTED;
		return NULL;
	}
	if ((p->cmd & RM_CTRL_PRIVILEGED_MASK) == RM_CTRL_PRIVILEGED_MASK) {
		*st = NV_ERR_INSUFFICIENT_PERMISSIONS;
		return NULL;
	}
	if (p->cmd == VGPU_GSS_LEGACY_CUINIT_QUERY) {
		*st = vgpu_gss_legacy_query(vf, p);
		return NULL;
	}
	if (vgpu_ctrl_nonexistent(p->cmd)) {
		*st = NV_ERR_NOT_SUPPORTED;
		return NULL;
	}
	item = vgpu_verdict(NVREL_CTL, p->cmd);
	if (!item) {
		/*
		 * Refused; the operator's passthrough_unknown, audit mode or
		 * allow-list still forward it as made (their purpose).
		 */
		if (!vgpu_passthrough_unknown &&
		    !vgpu_audit_lets(s, NVREL_CTL, p->cmd, VGPU_AUDIT_REFUSE))
			*st = vgpu_ctl_unexported(p->cmd) ?
			      vgpu_ctrl_unexported(vf, p) :
			      NV_ERR_INSUFFICIENT_PERMISSIONS;
		else
			*st = vgpu_control_passthrough(vf, p);
		return NULL;
	}
	vgpu_audit_use(s, NVREL_CTL, p->cmd, item);
	if (vgpu_ipc_cmd(p->cmd)) {             /* CUDA IPC (ipc.c) */
		*st = vgpu_ipc_control(vf, p, item->size);
		return NULL;
	}
	if (p->cmd == NVA06C_CTRL_CMD_GPFIFO_SCHEDULE ||
	    p->cmd == NVA06F_CTRL_CMD_GPFIFO_SCHEDULE) {
		*st = vgpu_compute_user_schedule(vf, p);
		return NULL;
	}
	ctrl = vgpu_ctrl_find(p->cmd);
	if (ctrl) {
		kind = ctrl->kind;
	} else if (item->verdict == NVREL_FORWARD &&
		   (item->flags & NVREL_F_LISTS) && item->nptrs &&
		   item->nptrs <= VGPU_CTRL_MAX_LISTS) {
		kind = VGPU_CTRL_LISTS;
	} else if (item->verdict != NVREL_FORWARD ||
		   (item->flags & NVREL_F_EMBEDDED)) {
		if (vgpu_audit_lets(s, NVREL_CTL, p->cmd,
				    VGPU_AUDIT_NOT_IMPLEMENTED)) {
			*st = vgpu_control_passthrough(vf, p);
			return NULL;
		}
		pr_info_ratelimited("slice %u: control %#x refused: its %s is not implemented\n",
				    s->id, p->cmd,
				    item->verdict != NVREL_FORWARD ?
				    "rewrite" : "embedded pointer");
		*st = NV_ERR_NOT_SUPPORTED;
		return NULL;
	} else {
		kind = VGPU_CTRL_PLAIN;
	}
	x->item = item;
	x->size = item->size;
	return &vgpu_ctrl_ops[kind];
}

/*
 * The checks the driver makes before it reads the params, in its order:
 * the release's size, params and paramsSize agreeing, then the object.
 */
static NV_STATUS vgpu_ctrl_check(struct vgpu_ctrl_ctx *x,
				 const struct vgpu_ctrl_ops *ops)
{
	NV_STATUS st = NV_OK;

	if (x->p->paramsSize != x->size)
		return NV_ERR_INVALID_PARAM_STRUCT;
	if (!x->p->params != !x->p->paramsSize)
		return NV_ERR_INVALID_ARGUMENT;
	if (ops->flags & VGPU_CTRLF_OBJECT) {
		/*
		 * The object must exist, as the driver checks first
		 * (serverControl: clientGetResourceRef).
		 */
		rcu_read_lock();
		st = vgpu_obj_find(x->p->hClient, x->p->hObject) ? NV_OK :
		     NV_ERR_OBJECT_NOT_FOUND;
		rcu_read_unlock();
	}
	return st;
}

/* The params into vgpu.ko's copy (x->kp, freed by the caller). */
static NV_STATUS vgpu_ctrl_copy_in(struct vgpu_ctrl_ctx *x,
				   const struct vgpu_ctrl_ops *ops)
{
	if (!x->size)
		return NV_OK;
	/*
	 * The release's size, into a buffer at least as large as the
	 * struct the handlers read (595.45.04's; a release's own is
	 * never larger for the members they use: nvrel.h).
	 */
	x->kp = kvzalloc(max_t(u32, x->size, ops->struct_size), GFP_KERNEL_ACCOUNT);
	if (!x->kp)
		return NV_ERR_NO_MEMORY;
	if (copy_from_user(x->kp, x->uparams, x->size))
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

/* VGPU_CTRLF_GPU_ID: another GPU's id: what the driver says for an unknown one. */
static NV_STATUS vgpu_ctrl_gpu_id_check(struct vgpu_ctrl_ctx *x)
{
	if (x->size < sizeof(u32) || vgpu_slice_gpu_of(x->s, *(u32 *)x->kp) < 0)
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

/*
 * At the caller's privilege, on a call page: the control parameters
 * and an embedded list (FB_GET_INFO V1, GET_SURFACE_INFO) laid out
 * after them, their pointers rewritten there (call.c).
 */
static NV_STATUS vgpu_ctrl_call_page(struct vgpu_ctrl_ctx *x)
{
	NVOS54_PARAMETERS kc = *x->p;
	struct vgpu_buf b[VGPU_CALL_MAX_BUFS] = {
		{ .kbuf = x->kp, .size = x->size,
		  .ptr_off = offsetof(NVOS54_PARAMETERS, params) },
		{ .kbuf = x->list, .size = x->n * sizeof(*x->list), .in = 1,
		  .ptr_off = offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS,
				      fbInfoList) },
	};
	unsigned int nb = !x->kp ? 0 : x->list ? 2 : 1;
	long ret;
	u32 i;

	for (i = 0; i < x->nlists; i++) {
		if (!x->lists[i].kbuf)
			continue;
		b[nb++] = (struct vgpu_buf){ .kbuf = x->lists[i].kbuf,
			.size = x->lists[i].size, .in = 1,
			.ptr_off = x->lists[i].ptr_off };
	}
	kc.status = NV_ERR_GENERIC;
	ret = vgpu_call_nv(x->vf, x->vf->real, NV_ESC_RM_CONTROL, &kc,
			   sizeof(kc), b, nb);
	return ret ? vgpu_call_status(ret) : kc.status;
}

/*
 * VGPU_CTRLF_KERNEL_ENTRY: the params stay in vgpu.ko's copy, the caller's
 * own client and object (the table says why).
 */
static NV_STATUS vgpu_ctrl_kernel_entry(struct vgpu_ctrl_ctx *x)
{
	return vgpu_rm_ctrl(x->p->hClient, x->p->hObject, x->p->cmd, x->kp, x->size);
}

NV_STATUS vgpu_control_path(struct vgpu_file *vf, NVOS54_PARAMETERS *p)
{
	struct vgpu_ctrl_ctx x = {
		.vf = vf, .s = vf->slice, .p = p,
		.uparams = u64_to_user_ptr(p->params),
	};
	const struct vgpu_ctrl_ops *ops;
	struct vgpu_client *c;
	NV_STATUS st;

	ops = vgpu_ctrl_admit(&x, &st);
	if (!ops)
		return st;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	st = vgpu_ctrl_check(&x, ops);
	if (st != NV_OK)
		goto out;
	if ((ops->flags & VGPU_CTRLF_ANSWERED) && !ops->before)
		goto out;       /* NV_OK, the params never read */
	st = vgpu_ctrl_copy_in(&x, ops);
	if (st != NV_OK)
		goto out;
	if (ops->flags & VGPU_CTRLF_GPU_ID) {
		st = vgpu_ctrl_gpu_id_check(&x);
		if (st != NV_OK)
			goto out;
	}
	if (ops->before) {
		st = ops->before(&x);
		if (ops->flags & VGPU_CTRLF_ANSWERED)
			goto copy_out;  /* the driver never sees it */
		if (st != NV_OK)
			goto out;
	}
	st = ops->flags & VGPU_CTRLF_KERNEL_ENTRY ? vgpu_ctrl_kernel_entry(&x) :
	     vgpu_ctrl_call_page(&x);
	if (st != NV_OK)
		goto out;
	if (ops->after)
		st = ops->after(&x);
copy_out:
	if (st == NV_OK && x.kp && copy_to_user(x.uparams, x.kp, x.size))
		st = NV_ERR_INVALID_ARGUMENT;
out:
	vgpu_lists_free(x.lists, x.nlists);
	kfree(x.list);
	kvfree(x.kp);
	vgpu_client_put(c);
	return st;
}
