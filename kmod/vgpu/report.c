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

#include "vgpu.h"

/* --------------------------------------------------------- allow-list */

enum vgpu_ctrl_kind {
	VGPU_CTRL_PLAIN,        /* no embedded pointer, nothing rewritten */
	VGPU_CTRL_FB_INFO,
	VGPU_CTRL_FB_INFO_V2,
	VGPU_CTRL_SURFACE_INFO,
	VGPU_CTRL_GET_PIDS,
	VGPU_CTRL_GET_PID_INFO,
};

struct vgpu_ctrl {
	u32 cmd;
	u32 size;
	enum vgpu_ctrl_kind kind;
};

/*
 * The TSG scheduling controls that change state (0xA06C0103/0105/0107) are
 * deliberately absent: the slice's compute share is set by vgpu.ko, never
 * by the container.  GPFIFO_SCHEDULE (0xA06C0101, 0xA06F0103) goes to
 * compute.c: an enable, which CUDA needs to start its TSGs, is virtualised
 * (effective only while the slice holds the GPU); a disable is refused.
 */
static const struct vgpu_ctrl vgpu_ctrls[] = {
	{ 0 /* NVXXXX_CTRL_CMD_NULL */, 0, VGPU_CTRL_PLAIN },
	{ NV2080_CTRL_CMD_FB_GET_INFO, sizeof(NV2080_CTRL_FB_GET_INFO_PARAMS), VGPU_CTRL_FB_INFO },
	{ NV2080_CTRL_CMD_FB_GET_INFO_V2, sizeof(NV2080_CTRL_FB_GET_INFO_V2_PARAMS), VGPU_CTRL_FB_INFO_V2 },
	{ NV2080_CTRL_CMD_GPU_GET_NAME_STRING, sizeof(NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS), VGPU_CTRL_PLAIN },
	{ NV2080_CTRL_CMD_GPU_GET_PIDS, sizeof(NV2080_CTRL_GPU_GET_PIDS_PARAMS), VGPU_CTRL_GET_PIDS },
	{ NV2080_CTRL_CMD_GPU_GET_PID_INFO, sizeof(NV2080_CTRL_GPU_GET_PID_INFO_PARAMS), VGPU_CTRL_GET_PID_INFO },
	{ NV0041_CTRL_CMD_GET_SURFACE_INFO, sizeof(NV0041_CTRL_GET_SURFACE_INFO_PARAMS), VGPU_CTRL_SURFACE_INFO },
	{ NVA06C_CTRL_CMD_GET_TIMESLICE, sizeof(NVA06C_CTRL_TIMESLICE_PARAMS), VGPU_CTRL_PLAIN },
	{ NVA06C_CTRL_CMD_GET_INFO, sizeof(NVA06C_CTRL_GET_INFO_PARAMS), VGPU_CTRL_PLAIN },
	{ NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, sizeof(NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS), VGPU_CTRL_PLAIN },
	{ NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
	  sizeof(NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS), VGPU_CTRL_PLAIN },
};

static const struct vgpu_ctrl *vgpu_ctrl_find(u32 cmd)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(vgpu_ctrls); i++)
		if (vgpu_ctrls[i].cmd == cmd)
			return &vgpu_ctrls[i];
	return NULL;
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
	const struct vgpu_ctrl *ctrl;
	NV2080_CTRL_FB_INFO *list = NULL;
	void __user *ulist = NULL;
	struct vgpu_client *c;
	u32 gpu = 0, n = 0, i;
	void *kp = NULL;
	NV_STATUS st;

	if (p->flags & NVOS54_FLAGS_FINN_SERIALIZED)
		return NV_ERR_NOT_SUPPORTED;
	if ((p->cmd & RM_CTRL_PRIVILEGED_MASK) == RM_CTRL_PRIVILEGED_MASK)
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	if (p->cmd == NVA06C_CTRL_CMD_GPFIFO_SCHEDULE ||
	    p->cmd == NVA06F_CTRL_CMD_GPFIFO_SCHEDULE)
		return vgpu_compute_user_schedule(vf, p);
	ctrl = vgpu_ctrl_find(p->cmd);
	if (!ctrl) {
		if (!vgpu_passthrough_unknown)
			return NV_ERR_INSUFFICIENT_PERMISSIONS;
		pr_info_ratelimited("slice %u: control %#x forwarded\n", s->id, p->cmd);
		{
			long ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_CONTROL,
						p, sizeof(*p), NULL, 0);

			return ret ? vgpu_call_status(ret) : p->status;
		}
	}
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	if (p->paramsSize != ctrl->size) {
		st = NV_ERR_INVALID_PARAM_STRUCT;
		goto out;
	}
	if (!p->params != !p->paramsSize) {
		st = NV_ERR_INVALID_ARGUMENT;
		goto out;
	}
	if (ctrl->size) {
		kp = kvzalloc(ctrl->size, GFP_KERNEL);
		if (!kp) {
			st = NV_ERR_NO_MEMORY;
			goto out;
		}
		if (copy_from_user(kp, uparams, ctrl->size)) {
			st = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
	}

	/* Before the call: embedded lists to the call page, PIDs to host. */
	switch (ctrl->kind) {
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
		struct vgpu_buf b[2] = {
			{ .kbuf = kp, .size = ctrl->size,
			  .ptr_off = offsetof(NVOS54_PARAMETERS, params) },
			{ .kbuf = list, .size = n * sizeof(*list), .in = 1,
			  .ptr_off = offsetof(NV2080_CTRL_FB_GET_INFO_PARAMS,
					      fbInfoList) },
		};
		long ret;

		kc.status = NV_ERR_GENERIC;
		ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_CONTROL, &kc,
				   sizeof(kc), b, !kp ? 0 : list ? 2 : 1);
		st = ret ? vgpu_call_status(ret) : kc.status;
	}
	if (st != NV_OK)
		goto out;

	/* After: vgpu.ko's own numbers, whatever came back. */
	switch (ctrl->kind) {
	case VGPU_CTRL_FB_INFO_V2: {
		NV2080_CTRL_FB_GET_INFO_V2_PARAMS *fp = kp;

		if (!vgpu_ctrl_gpu(p, &gpu))
			vgpu_fb_rewrite(s, gpu, fp->fbInfoList,
					min_t(u32, fp->fbInfoListSize,
					      NV2080_CTRL_FB_INFO_MAX_LIST_SIZE));
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
	if (st == NV_OK && kp && copy_to_user(uparams, kp, ctrl->size))
		st = NV_ERR_INVALID_ARGUMENT;
out:
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
