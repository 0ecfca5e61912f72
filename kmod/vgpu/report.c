// SPDX-License-Identifier: GPL-2.0
/*
 * report.c - what a container is told: RM controls (allow-list, made on a
 * call page at the caller's privilege) with FB_GET_INFO V1/V2 and the PID
 * controls rewritten, VID_HEAP
 * INFO, CARD_INFO filtered and renumbered, ATTACH_GPUS_TO_FD checked.
 */
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
 * are forwarded: they read the caller's own TSG.
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
	const struct nvrel_ptr *ptr;
	u64 count, bytes;
	u32 i;

	*n = 0;
	if (!vgpu_rel->ptrs || item->nptrs > VGPU_CTRL_MAX_LISTS)
		return NV_ERR_NOT_SUPPORTED;
	for (i = 0; i < item->nptrs; i++) {
		ptr = &vgpu_rel->ptrs[item->ptr0 + i];
		if (ptr->ptr_off + sizeof(u64) > size)
			return NV_ERR_INVALID_PARAM_STRUCT;
		l[i].ptr_off = ptr->ptr_off;
		l[i].uptr = u64_to_user_ptr(*(u64 *)(kp + ptr->ptr_off));
		(*n)++;
		if (!l[i].uptr)
			continue;
		if (ptr->count_off == NVREL_NO_COUNT) {
			bytes = ptr->elem_size;
		} else {
			if (ptr->count_off + ptr->count_size > size)
				return NV_ERR_INVALID_PARAM_STRUCT;
			switch (ptr->count_size) {
			case 1: count = *(u8 *)(kp + ptr->count_off); break;
			case 2: count = *(u16 *)(kp + ptr->count_off); break;
			case 4: count = *(u32 *)(kp + ptr->count_off); break;
			case 8: count = *(u64 *)(kp + ptr->count_off); break;
			default: return NV_ERR_NOT_SUPPORTED;
			}
			if (check_mul_overflow(count, (u64)ptr->elem_size, &bytes))
				return NV_ERR_INVALID_ARGUMENT;
		}
		/* The driver's own limits are lower; a zero count copies nothing. */
		if (bytes > VGPU_MAX_CTRL_PARAMS)
			return NV_ERR_INVALID_ARGUMENT;
		if (!bytes)
			continue;
		l[i].kbuf = kvzalloc(bytes, GFP_KERNEL);
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

/* The 595.45.04 struct a handler reads and writes in place. */
static u32 vgpu_ctrl_struct_size(enum vgpu_ctrl_kind kind)
{
	switch (kind) {
	case VGPU_CTRL_ID_INFO_V2:
		return sizeof(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS);
	case VGPU_CTRL_ATTACHED_IDS:
		return NV0000_CTRL_GPU_MAX_ATTACHED_GPUS * sizeof(u32);
	case VGPU_CTRL_PROBED_IDS:
		return 3 * NV0000_CTRL_GPU_MAX_PROBED_GPUS * sizeof(u32);
	case VGPU_CTRL_FB_INFO:
		return sizeof(NV2080_CTRL_FB_GET_INFO_PARAMS);
	case VGPU_CTRL_FB_INFO_V2:
		return sizeof(NV2080_CTRL_FB_GET_INFO_V2_PARAMS);
	case VGPU_CTRL_SURFACE_INFO:
		return sizeof(NV0041_CTRL_GET_SURFACE_INFO_PARAMS);
	case VGPU_CTRL_GET_PIDS:
		return sizeof(NV2080_CTRL_GPU_GET_PIDS_PARAMS);
	case VGPU_CTRL_GET_PID_INFO:
		return sizeof(NV2080_CTRL_GPU_GET_PID_INFO_PARAMS);
	default:
		return 0;
	}
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
 * vgpu_control_path - RM_CONTROL through the kernel entry point
 *
 * Statuses: NV_ERR_NOT_SUPPORTED for serialized (FINN) parameters;
 * NV_ERR_INSUFFICIENT_PERMISSIONS for a privileged or unlisted control;
 * NV_ERR_INVALID_CLIENT for a client the file does not own;
 * NV_ERR_INVALID_PARAM_STRUCT for a wrong paramsSize; NV_ERR_INVALID_ARGUMENT
 * for unreadable parameters.  Everything else is the driver's.
 */
NV_STATUS vgpu_control_path(struct vgpu_file *vf, NVOS54_PARAMETERS *p)
{
	struct vgpu_slice *s = vf->slice;
	void __user *uparams = u64_to_user_ptr(p->params);
	static const struct vgpu_ctrl plain = { .kind = VGPU_CTRL_PLAIN };
	static const struct vgpu_ctrl lists_ctrl = { .kind = VGPU_CTRL_LISTS };
	struct vgpu_list lists[VGPU_CTRL_MAX_LISTS] = {};
	u32 nlists = 0;
	const struct vgpu_ctrl *ctrl;
	const struct nvrel_item *item;
	NV2080_CTRL_FB_INFO *list = NULL;
	void __user *ulist = NULL;
	struct vgpu_client *c;
	u32 gpu = 0, n = 0, i, size;
	void *kp = NULL;
	NV_STATUS st;

	if (p->flags & NVOS54_FLAGS_FINN_SERIALIZED)
		return NV_ERR_NOT_SUPPORTED;
	if ((p->cmd & RM_CTRL_PRIVILEGED_MASK) == RM_CTRL_PRIVILEGED_MASK)
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	item = vgpu_verdict(NVREL_CTL, p->cmd);
	if (!item) {
		if (!vgpu_passthrough_unknown &&
		    !vgpu_audit_lets(s, NVREL_CTL, p->cmd, VGPU_AUDIT_REFUSE))
			return NV_ERR_INSUFFICIENT_PERMISSIONS;
		return vgpu_control_passthrough(vf, p);
	}
	vgpu_audit_use(s, NVREL_CTL, p->cmd, item);
	if (p->cmd == NVA06C_CTRL_CMD_GPFIFO_SCHEDULE ||
	    p->cmd == NVA06F_CTRL_CMD_GPFIFO_SCHEDULE)
		return vgpu_compute_user_schedule(vf, p);
	ctrl = vgpu_ctrl_find(p->cmd);
	if (!ctrl && item->verdict == NVREL_FORWARD &&
	    (item->flags & NVREL_F_LISTS) && item->nptrs &&
	    item->nptrs <= VGPU_CTRL_MAX_LISTS)
		ctrl = &lists_ctrl;
	if (!ctrl) {
		if (item->verdict != NVREL_FORWARD ||
		    (item->flags & NVREL_F_EMBEDDED)) {
			if (vgpu_audit_lets(s, NVREL_CTL, p->cmd,
					    VGPU_AUDIT_NOT_IMPLEMENTED))
				return vgpu_control_passthrough(vf, p);
			pr_info_ratelimited("slice %u: control %#x refused: its %s is not implemented\n",
					    s->id, p->cmd,
					    item->verdict != NVREL_FORWARD ?
					    "rewrite" : "embedded pointer");
			return NV_ERR_NOT_SUPPORTED;
		}
		ctrl = &plain;
	}
	size = item->size;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	if (p->paramsSize != size) {
		st = NV_ERR_INVALID_PARAM_STRUCT;
		goto out;
	}
	if (!p->params != !p->paramsSize) {
		st = NV_ERR_INVALID_ARGUMENT;
		goto out;
	}
	if (ctrl->kind == VGPU_CTRL_ANSWER_OK) {
		/* The object must exist, as the driver would check first. */
		rcu_read_lock();
		st = vgpu_obj_find(p->hClient, p->hObject) ? NV_OK :
		     NV_ERR_INVALID_OBJECT_HANDLE;
		rcu_read_unlock();
		goto out;
	}
	if (size) {
		/*
		 * The release's size, into a buffer at least as large as the
		 * struct the handlers read (595.45.04's; a release's own is
		 * never larger for the members they use: nvrel.h).
		 */
		kp = kvzalloc(max_t(u32, size, vgpu_ctrl_struct_size(ctrl->kind)),
			      GFP_KERNEL);
		if (!kp) {
			st = NV_ERR_NO_MEMORY;
			goto out;
		}
		if (copy_from_user(kp, uparams, size)) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
	}
	if (ctrl->kind == VGPU_CTRL_GPU_ID || ctrl->kind == VGPU_CTRL_ID_INFO_V2) {
		/* Another GPU's id: what the driver says for an unknown one. */
		if (size < sizeof(u32) || vgpu_slice_gpu_of(s, *(u32 *)kp) < 0) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
	}

	/* Before the call: embedded lists to the call page, PIDs to host. */
	switch (ctrl->kind) {
	case VGPU_CTRL_LISTS:
		if (!kp) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
		st = vgpu_lists_in(item, kp, size, lists, &nlists);
		if (st != NV_OK)
			goto out;
		break;
	case VGPU_CTRL_FB_INFO:
	case VGPU_CTRL_SURFACE_INFO: {
		NV2080_CTRL_FB_GET_INFO_PARAMS *fp = kp;

		BUILD_BUG_ON(offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS, fbInfoList) !=
			     offsetof(NV0041_CTRL_GET_SURFACE_INFO_PARAMS, surfaceInfoList));
		n = fp->fbInfoListSize;
		if (n == 0 || n > 256 || !fp->fbInfoList) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
		ulist = u64_to_user_ptr(fp->fbInfoList);
		list = kmalloc_array(n, sizeof(*list), GFP_KERNEL);
		if (!list) {
			st = NV_ERR_NO_MEMORY;
			goto out;
		}
		if (copy_from_user(list, ulist, n * sizeof(*list))) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
		break;
	}
	case VGPU_CTRL_GET_PID_INFO: {
		NV2080_CTRL_GPU_GET_PID_INFO_PARAMS *pp = kp;

		if (pp->pidInfoListCount > NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
		for (i = 0; i < pp->pidInfoListCount; i++)
			pp->pidInfoList[i].pid =
				vgpu_slice_pid_in(s, pp->pidInfoList[i].pid);
		break;
	}
	default:
		break;
	}

	/*
	 * At the caller's privilege, on a call page: the control parameters
	 * and an embedded list (FB_GET_INFO V1, GET_SURFACE_INFO) laid out
	 * after them, their pointers rewritten there (call.c).
	 */
	{
		NVOS54_PARAMETERS kc = *p;
		struct vgpu_buf b[VGPU_CALL_MAX_BUFS] = {
			{ .kbuf = kp, .size = size,
			  .ptr_off = offsetof(NVOS54_PARAMETERS, params) },
			{ .kbuf = list, .size = n * sizeof(*list), .in = 1,
			  .ptr_off = offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS,
					      fbInfoList) },
		};
		unsigned int nb = !kp ? 0 : list ? 2 : 1;
		long ret;

		for (i = 0; i < nlists; i++) {
			if (!lists[i].kbuf)
				continue;
			b[nb++] = (struct vgpu_buf){ .kbuf = lists[i].kbuf,
				.size = lists[i].size, .in = 1,
				.ptr_off = lists[i].ptr_off };
		}
		if (ctrl->kind == VGPU_CTRL_ATTACHED_IDS ||
		    ctrl->kind == VGPU_CTRL_PROBED_IDS) {
			/*
			 * The driver's answer names every GPU of the host, and a
			 * call page is readable by the caller's other threads:
			 * asked through the kernel entry, on the caller's own
			 * client (a read that creates nothing, the same answer
			 * at any privilege), it stays in kernel memory until
			 * cut to the slice's GPUs.
			 */
			st = vgpu_rm_ctrl(p->hClient, p->hObject, p->cmd, kp, size);
		} else {
			kc.status = NV_ERR_GENERIC;
			ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_CONTROL, &kc,
					   sizeof(kc), b, nb);
			st = ret ? vgpu_call_status(ret) : kc.status;
		}
	}
	if (st != NV_OK)
		goto out;

	/* After: vgpu.ko's own numbers, whatever came back. */
	switch (ctrl->kind) {
	case VGPU_CTRL_LISTS:
		/* The lists back where the caller's pointers (kept in kp) say. */
		for (i = 0; i < nlists; i++)
			if (lists[i].kbuf &&
			    copy_to_user(lists[i].uptr, lists[i].kbuf, lists[i].size))
				st = NV_ERR_INVALID_ARGUMENT;
		break;
	case VGPU_CTRL_FB_INFO_V2: {
		NV2080_CTRL_FB_GET_INFO_V2_PARAMS *fp = kp;
		/* The list this release's struct holds (grown over releases). */
		u32 max = (size - offsetof(NV2080_CTRL_FB_GET_INFO_V2_PARAMS,
					   fbInfoList)) / sizeof(fp->fbInfoList[0]);

		if (!vgpu_ctrl_gpu(p, &gpu))
			vgpu_fb_rewrite(s, gpu, fp->fbInfoList,
					min_t(u32, min(fp->fbInfoListSize, max),
					      NV2080_CTRL_FB_INFO_MAX_LIST_SIZE));
		break;
	}
	case VGPU_CTRL_ID_INFO_V2: {
		NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS *ip = kp;
		int idx = vgpu_slice_gpu_of(s, ip->gpuId);

		/* As NV0080's deviceId: the container's number (memory.c). */
		if (idx < 0)
			st = NV_ERR_INVALID_ARGUMENT;
		else
			ip->deviceInstance = idx;
		break;
	}
	case VGPU_CTRL_ATTACHED_IDS:
		vgpu_ids_filter(s, kp, NULL, min_t(u32, size / sizeof(u32),
						   NV0000_CTRL_GPU_MAX_ATTACHED_GPUS));
		break;
	case VGPU_CTRL_PROBED_IDS: {
		u32 *ids = kp, m = NV0000_CTRL_GPU_MAX_PROBED_GPUS;

		/* gpuIds[32], excludedGpuIds[32], from 580 on gpuFlags[32]. */
		vgpu_ids_filter(s, ids, size >= 3 * m * sizeof(u32) ? ids + 2 * m : NULL, m);
		for (i = 0; i < m && size >= 2 * m * sizeof(u32); i++)
			ids[m + i] = NV0000_CTRL_GPU_INVALID_ID;
		break;
	}
	case VGPU_CTRL_FB_INFO:
	case VGPU_CTRL_SURFACE_INFO: {
		NV2080_CTRL_FB_GET_INFO_PARAMS *fp = kp;

		if (ctrl->kind == VGPU_CTRL_FB_INFO && !vgpu_ctrl_gpu(p, &gpu))
			vgpu_fb_rewrite(s, gpu, list, n);
		fp->fbInfoList = (u64)(uintptr_t)ulist;   /* kept by the call */
		if (copy_to_user(ulist, list, n * sizeof(*list)))
			st = NV_ERR_INVALID_ARGUMENT;
		break;
	}
	case VGPU_CTRL_GET_PIDS: {
		NV2080_CTRL_GPU_GET_PIDS_PARAMS *pp = kp;
		u32 out = 0, cnt = min_t(u32, pp->pidTblCount,
					 NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT);
		pid_t v;

		for (i = 0; i < cnt; i++) {
			v = vgpu_slice_pid_out(s, pp->pidTbl[i]);
			if (v > 0)
				pp->pidTbl[out++] = v;
		}
		for (i = out; i < cnt; i++)
			pp->pidTbl[i] = 0;
		pp->pidTblCount = out;
		break;
	}
	case VGPU_CTRL_GET_PID_INFO: {
		NV2080_CTRL_GPU_GET_PID_INFO_PARAMS *pp = kp;
		/* The count came back through the call page: bounded again. */
		u32 cnt = min_t(u32, pp->pidInfoListCount,
				NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES);

		for (i = 0; i < cnt; i++)
			pp->pidInfoList[i].pid =
				vgpu_slice_pid_out(s, pp->pidInfoList[i].pid);
		break;
	}
	default:
		break;
	}
	if (st == NV_OK && kp && copy_to_user(uparams, kp, size))
		st = NV_ERR_INVALID_ARGUMENT;
out:
	vgpu_lists_free(lists, nlists);
	kfree(list);
	kvfree(kp);
	vgpu_client_put(c);
	return st;
}

/* ------------------------------------------------ CARD_INFO, ATTACH */

/*
 * The driver's own CARD_INFO, every GPU, made on a call page: outputs only,
 * read back where a sibling may have rewritten them (call.c).  kfree() it.
 */
static nv_ioctl_card_info_t *vgpu_real_cards(struct vgpu_file *vf)
{
	nv_ioctl_card_info_t *real;
	long ret;

	real = kcalloc(NVIDIA_MAX_GPUS, sizeof(*real), GFP_KERNEL);
	if (!real)
		return ERR_PTR(-ENOMEM);
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_CARD_INFO, real,
			   NVIDIA_MAX_GPUS * sizeof(*real), NULL, 0);
	if (ret) {
		kfree(real);
		return ERR_PTR(ret);
	}
	return real;
}

int vgpu_card_info(struct vgpu_file *vf, void __user *uptr, u32 size)
{
	struct vgpu_slice *s = vf->slice;
	const u32 nreal = NVIDIA_MAX_GPUS;
	nv_ioctl_card_info_t *real = NULL, *out;
	u32 n = size / sizeof(*out), i, j;
	int ret = 0;

	if (size == 0 || size % sizeof(*out))
		return -EINVAL;
	out = kzalloc(size, GFP_KERNEL);
	if (!out)
		return -ENOMEM;
	/* A forged answer deceives only the caller (filtered below). */
	real = vgpu_real_cards(vf);
	if (IS_ERR(real)) {
		ret = PTR_ERR(real);
		real = NULL;
		goto out;
	}
	/* As the driver: an array shorter than the GPUs is an error. */
	if (n < s->nr_gpus) {
		ret = -EINVAL;
		goto copy;
	}
	for (i = 0; i < s->nr_gpus; i++) {
		for (j = 0; j < nreal; j++) {
			if (real[j].valid &&
			    real[j].minor_number == s->gpus[i].real_minor) {
				out[i] = real[j];
				out[i].minor_number = i;
				memset(out[i].dev_name, 0, sizeof(out[i].dev_name));
				snprintf((char *)out[i].dev_name,
					 sizeof(out[i].dev_name), "nvidia%u", i);
				break;
			}
		}
	}
copy:
	if (copy_to_user(uptr, out, size))
		ret = -EFAULT;
out:
	kfree(real);
	kfree(out);
	return ret;
}

/*
 * NV_ESC_STATUS_CODE names a GPU by PCI address; the driver answers for any
 * (escape.c, nv_get_adapter_state).  Forwarded only for an address the
 * driver's own CARD_INFO gives one of the slice's GPUs; any other gets the
 * driver's answer for an address it does not know (-EINVAL).  That
 * CARD_INFO comes back through the call page: a sibling that rewrites it
 * after the driver's copy-out gets another GPU's adapter status code, and
 * nothing else (vgpu.ko keeps no PCI address of its own to check against).
 */
int vgpu_status_code(struct vgpu_file *vf, nv_ioctl_status_code_t *p)
{
	struct vgpu_slice *s = vf->slice;
	nv_ioctl_card_info_t *real;
	bool ours = false;
	u32 i, j;

	real = vgpu_real_cards(vf);
	if (IS_ERR(real))
		return PTR_ERR(real);
	for (j = 0; j < NVIDIA_MAX_GPUS && !ours; j++) {
		if (!real[j].valid || real[j].pci_info.domain != p->domain ||
		    real[j].pci_info.bus != p->bus ||
		    real[j].pci_info.slot != p->slot)
			continue;
		for (i = 0; i < s->nr_gpus; i++)
			ours |= real[j].minor_number == s->gpus[i].real_minor;
	}
	kfree(real);
	if (!ours)
		return -EINVAL;
	return vgpu_call_nv(vf, vf->real, NV_ESC_STATUS_CODE, p, sizeof(*p),
			    NULL, 0);
}

int vgpu_attach_gpus(struct vgpu_file *vf, void __user *uptr, u32 size)
{
	struct vgpu_slice *s = vf->slice;
	u32 n = size / sizeof(u32), i, j;
	u32 *ids;
	int ret;

	if (n == 0 || size % sizeof(u32))
		return -EINVAL;
	ids = memdup_user(uptr, size);
	if (IS_ERR(ids))
		return PTR_ERR(ids);
	/* Only the slice's GPUs; 0 is a hole, as in the driver. */
	for (i = 0; i < n; i++) {
		if (!ids[i])
			continue;
		for (j = 0; j < s->nr_gpus; j++)
			if (s->gpus[j].gpu_id == ids[i])
				break;
		if (j == s->nr_gpus) {
			ret = -EINVAL;
			goto out;
		}
	}
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_ATTACH_GPUS_TO_FD, ids, size,
			   NULL, 0);
out:
	kfree(ids);
	return ret;
}
