// SPDX-License-Identifier: GPL-2.0
/*
 * control.c - RM_CONTROL (NVOS54) and the controls the simulator answers.
 *
 * As in the real driver, the parameters are copied in with the caller's
 * paramsSize (at most 1 MiB), the client and object are validated, the
 * control is looked up for the object's class, and paramsSize must equal the
 * control's parameter struct exactly.  Parameters are copied back on success.
 *
 * Controls whose parameters embed a pointer (FB_GET_INFO, GET_SURFACE_INFO)
 * take a snapshot under nvsim.lock and fill the caller's list after the lock
 * is dropped, so that no user memory is touched under it.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/string.h>

#include "nvsim.h"

/* Bounds on the embedded lists. */
#define NVSIM_SURFACE_INFO_MAX_LIST 256

struct nvsim_ctrl_ctx {
	const struct nvsim_call *call;
	struct nvsim_object *obj;       /* valid under nvsim.lock only */
	void *params;
	/* Snapshot for the unlocked step. */
	u64 fb_total;
	u64 fb_free;
	u64 phys_size;
	/* PREEMPT bWait: the TSG, pinned, and the request to wait for. */
	struct nvsim_tsg *tsg;
	u64 preempt_seq;
};

/**
 * struct nvsim_ctrl - one control
 * @cmd: the control command
 * @size: its parameter struct's size; paramsSize must match exactly
 * @types: NVSIM_BIT() mask of the object types it applies to
 * @locked: runs under nvsim.lock
 * @unlocked: optional, runs after the lock is dropped, for embedded pointers
 */
struct nvsim_ctrl {
	u32 cmd;
	u32 size;
	u32 types;
	NV_STATUS (*locked)(struct nvsim_ctrl_ctx *ctx);
	NV_STATUS (*unlocked)(struct nvsim_ctrl_ctx *ctx);
};

/* ------------------------------------------------------------ FB info */

static u32 nvsim_kib(u64 bytes)
{
	return (u32)min_t(u64, bytes >> 10, U32_MAX);
}

/* Unknown or unsimulated indexes read as 0. */
static u32 nvsim_fb_info_value(u32 index, u64 total, u64 free)
{
	switch (index) {
	case NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_MAPPABLE_HEAP_SIZE:
	case NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE:
		return nvsim_kib(total);
	case NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE:
	case NV2080_CTRL_FB_INFO_INDEX_LARGEST_FREE_REGION_SIZE_KB:
		return nvsim_kib(free);
	case NV2080_CTRL_FB_INFO_INDEX_BAR1_SIZE:
		return nvsim_kib(NVSIM_BAR1_SIZE);
	default:
		return 0;
	}
}

static void nvsim_fb_snapshot(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_gpu *gpu = ctx->obj->gpu;

	ctx->fb_total = gpu->fb_total;
	ctx->fb_free = gpu->fb_total - gpu->fb_used;
}

static NV_STATUS nvsim_ctrl_fb_info_v2(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_FB_GET_INFO_V2_PARAMS *p = ctx->params;
	u32 i;

	if (p->fbInfoListSize > NV2080_CTRL_FB_INFO_MAX_LIST_SIZE)
		return NV_ERR_INVALID_ARGUMENT;
	nvsim_fb_snapshot(ctx);
	for (i = 0; i < p->fbInfoListSize; i++)
		p->fbInfoList[i].data =
			nvsim_fb_info_value(p->fbInfoList[i].index,
					    ctx->fb_total, ctx->fb_free);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_fb_info_v1(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_FB_GET_INFO_PARAMS *p = ctx->params;

	if (p->fbInfoListSize == 0 ||
	    p->fbInfoListSize > NV2080_CTRL_FB_INFO_MAX_LIST_SIZE || !p->fbInfoList)
		return NV_ERR_INVALID_ARGUMENT;
	nvsim_fb_snapshot(ctx);
	return NV_OK;
}

/* Fill an embedded {index, data} list: the pointer is the caller's. */
static NV_STATUS nvsim_fill_info_list(struct nvsim_ctrl_ctx *ctx, u64 ptr,
				      u32 count,
				      u32 (*value)(struct nvsim_ctrl_ctx *, u32))
{
	NV2080_CTRL_FB_INFO *list;
	size_t bytes = (size_t)count * sizeof(*list);
	NV_STATUS status = NV_OK;
	u32 i;

	list = kvmalloc(bytes, GFP_KERNEL_ACCOUNT);
	if (!list)
		return NV_ERR_NO_MEMORY;
	if (nvsim_copy_in(ctx->call, list, ptr, bytes)) {
		status = NV_ERR_INVALID_ARGUMENT;
		goto out;
	}
	for (i = 0; i < count; i++)
		list[i].data = value(ctx, list[i].index);
	if (nvsim_copy_out(ctx->call, ptr, list, bytes))
		status = NV_ERR_INVALID_ARGUMENT;
out:
	kvfree(list);
	return status;
}

static u32 nvsim_fb_list_value(struct nvsim_ctrl_ctx *ctx, u32 index)
{
	return nvsim_fb_info_value(index, ctx->fb_total, ctx->fb_free);
}

static NV_STATUS nvsim_ctrl_fb_info_v1_fill(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_FB_GET_INFO_PARAMS *p = ctx->params;

	return nvsim_fill_info_list(ctx, p->fbInfoList, p->fbInfoListSize,
				    nvsim_fb_list_value);
}

/* ---------------------------------------------------------- surface info */

static NV_STATUS nvsim_ctrl_surface_info(struct nvsim_ctrl_ctx *ctx)
{
	NV0041_CTRL_GET_SURFACE_INFO_PARAMS *p = ctx->params;

	if (p->surfaceInfoListSize == 0 ||
	    p->surfaceInfoListSize > NVSIM_SURFACE_INFO_MAX_LIST ||
	    !p->surfaceInfoList)
		return NV_ERR_INVALID_ARGUMENT;
	ctx->phys_size = ctx->obj->memory.mem->size;
	return NV_OK;
}

static u32 nvsim_surface_value(struct nvsim_ctrl_ctx *ctx, u32 index)
{
	switch (index) {
	case NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_LO:
		return lower_32_bits(ctx->phys_size);
	case NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_HI:
		return upper_32_bits(ctx->phys_size);
	default:
		return 0;
	}
}

static NV_STATUS nvsim_ctrl_surface_info_fill(struct nvsim_ctrl_ctx *ctx)
{
	NV0041_CTRL_GET_SURFACE_INFO_PARAMS *p = ctx->params;

	return nvsim_fill_info_list(ctx, p->surfaceInfoList,
				    p->surfaceInfoListSize,
				    nvsim_surface_value);
}

/* ------------------------------------------------------------ GPU info */

/*
 * NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 on a client: a GPU's ids by gpuId
 * (ctrl0000gpu.h).  The driver answers only for GPUs gpumgr has attached;
 * nvsim's are always attached.
 */
static NV_STATUS nvsim_ctrl_gpu_id_info_v2(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS *p = ctx->params;
	struct nvsim_gpu *gpu = nvsim_gpu_by_id(p->gpuId);

	if (!gpu)
		return NV_ERR_INVALID_ARGUMENT;
	p->gpuFlags = 0;
	p->deviceInstance = nvsim_instance_of(gpu);
	p->subDeviceInstance = 0;
	p->sliStatus = 0;
	p->boardId = gpu->gpu_id;
	p->gpuInstance = gpu->index;
	p->numaId = -1;
	return NV_OK;
}

/*
 * 595.45.04: ASCII whatever the flags say (subdeviceCtrlCmdGpuGetNameString_IMPL
 * in subdevice_ctrl_gpu_kernel.c hands the buffer to gpuGetNameString; the
 * header calls the flags deprecated).
 */
static NV_STATUS nvsim_ctrl_name_string(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS *p = ctx->params;
	size_t len;

	memset(&p->gpuNameString, 0, sizeof(p->gpuNameString));
	len = min_t(size_t, strlen(nvsim_gpu_name),
		    NV2080_GPU_MAX_NAME_STRING_LENGTH - 1);
	memcpy(p->gpuNameString.ascii, nvsim_gpu_name, len);
	return NV_OK;
}

static bool nvsim_pid_listed(const u32 *tbl, u32 n, u32 pid)
{
	u32 i;

	for (i = 0; i < n; i++)
		if (tbl[i] == pid)
			return true;
	return false;
}

static void nvsim_pid_add(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p, u32 pid)
{
	if (p->pidTblCount < NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT &&
	    !nvsim_pid_listed(p->pidTbl, p->pidTblCount, pid))
		p->pidTbl[p->pidTblCount++] = pid;
}

/*
 * Host TGIDs of the processes with a client on this GPU or FB charged on it.
 * The real driver filters by the class in id; the simulator has no GPU
 * contexts to filter by and answers the same for every id.
 */
static NV_STATUS nvsim_ctrl_get_pids(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_PIDS_PARAMS *p = ctx->params;
	struct nvsim_gpu *gpu = ctx->obj->gpu;
	struct nvsim_client *client;
	struct nvsim_pid_fb *pe;
	unsigned long idx;

	p->pidTblCount = 0;
	switch (p->idType) {
	case NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_CLASS:
		break;
	case NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_VGPU_GUEST:
		return NV_OK;   /* no vGPU guests here */
	default:
		return NV_ERR_INVALID_ARGUMENT;
	}

	xa_for_each(&nvsim.clients, idx, client)
		if (nvsim_client_on_gpu(client, gpu))
			nvsim_pid_add(p, client->tgid);
	list_for_each_entry(pe, &nvsim.pid_fb, node)
		if (pe->gpu == gpu->index && pe->bytes)
			nvsim_pid_add(p, pe->tgid);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_get_pid_info(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_PID_INFO_PARAMS *p = ctx->params;
	u32 i;

	if (p->pidInfoListCount > NV2080_CTRL_GPU_MAX_PID_INFO_ENTRIES)
		return NV_ERR_INVALID_ARGUMENT;
	for (i = 0; i < p->pidInfoListCount; i++) {
		NV2080_CTRL_GPU_PID_INFO *e = &p->pidInfoList[i];

		memset(&e->data, 0, sizeof(e->data));
		if (e->index != NV2080_CTRL_GPU_PID_INFO_INDEX_VIDEO_MEMORY_USAGE) {
			e->result = NV_ERR_INVALID_ARGUMENT;
			continue;
		}
		e->data.memPrivate = nvsim_pid_fb_bytes(e->pid, ctx->obj->gpu);
		e->result = NV_OK;
	}
	return NV_OK;
}

/* ---------------------------------------------------------------- TSG */

static NV_STATUS nvsim_ctrl_tsg_schedule(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS *p = ctx->params;
	bool enable = !!p->bEnable;

	nvsim_engine_set_tsg(ctx->obj->tsg.tsg, &enable, NULL, NULL);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_tsg_set_timeslice(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_TIMESLICE_PARAMS *p = ctx->params;

	/* The hardware cannot do 0: the driver makes it 1 us. */
	if (p->timesliceUs == 0)
		p->timesliceUs = 1;
	/* Bounded so that the engine's budget (x4, in ns) cannot overflow. */
	if (p->timesliceUs > U32_MAX)
		return NV_ERR_INVALID_ARGUMENT;
	nvsim_engine_set_tsg(ctx->obj->tsg.tsg, NULL, &p->timesliceUs, NULL);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_tsg_get_timeslice(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_TIMESLICE_PARAMS *p = ctx->params;

	p->timesliceUs = ctx->obj->tsg.tsg->timeslice_us;
	return NV_OK;
}

/*
 * The engine takes the TSG off at its next block boundary.  bWait waits for
 * that in the unlocked step, holding a reference on the TSG (which may be
 * freed meanwhile: freeing it also releases the waiter).
 */
static NV_STATUS nvsim_ctrl_tsg_preempt(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_PREEMPT_PARAMS *p = ctx->params;
	struct nvsim_tsg *tsg = ctx->obj->tsg.tsg;

	tsg->nr_preempts++;
	ctx->preempt_seq = nvsim_engine_preempt(tsg);
	if (p->bWait && ctx->preempt_seq) {
		refcount_inc(&tsg->refs);
		ctx->tsg = tsg;
	}
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_tsg_preempt_wait(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_PREEMPT_PARAMS *p = ctx->params;
	NV_STATUS status;

	if (!ctx->tsg)
		return NV_OK;
	status = nvsim_engine_preempt_wait(ctx->tsg, ctx->preempt_seq,
					   p->bManualTimeout ? p->timeoutUs : 0);
	nvsim_tsg_put(ctx->tsg);
	ctx->tsg = NULL;
	return status;
}

static NV_STATUS nvsim_ctrl_tsg_get_info(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_GET_INFO_PARAMS *p = ctx->params;

	p->tsgID = ctx->obj->tsg.tsg->id;
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_tsg_set_interleave(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS *p = ctx->params;

	if (p->tsgInterleaveLevel > NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH)
		return NV_ERR_INVALID_ARGUMENT;
	nvsim_engine_set_tsg(ctx->obj->tsg.tsg, NULL, NULL,
			     &p->tsgInterleaveLevel);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_tsg_get_interleave(struct nvsim_ctrl_ctx *ctx)
{
	NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS *p = ctx->params;

	p->tsgInterleaveLevel = ctx->obj->tsg.tsg->interleave;
	return NV_OK;
}

/* ------------------------------------------------------------ channel */

static NV_STATUS nvsim_ctrl_chan_schedule(struct nvsim_ctrl_ctx *ctx)
{
	NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS *p = ctx->params;
	struct nvsim_object *obj = ctx->obj;
	bool enable = !!p->bEnable;

	nvsim_engine_set_channel(obj->channel.ch, enable);
	/* A channel with a TSG of its own schedules that TSG. */
	if (obj->channel.own_tsg)
		nvsim_engine_set_tsg(obj->channel.tsg, &enable, NULL, NULL);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_work_submit_token(struct nvsim_ctrl_ctx *ctx)
{
	NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS *p = ctx->params;

	/* (runlist id << 16) | channel id; every channel is on runlist 0. */
	p->workSubmitToken = (0u << 16) | ctx->obj->channel.chid;
	return NV_OK;
}

#define SUBDEVICE   NVSIM_BIT(NVSIM_OBJ_SUBDEVICE)
#define MEMORY      NVSIM_BIT(NVSIM_OBJ_MEMORY)
#define TSG         NVSIM_BIT(NVSIM_OBJ_TSG)
#define CHANNEL     NVSIM_BIT(NVSIM_OBJ_CHANNEL)

static const struct nvsim_ctrl nvsim_ctrls[] = {
	{ NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2,
	  sizeof(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS),
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_ctrl_gpu_id_info_v2, NULL },
	{ NV2080_CTRL_CMD_FB_GET_INFO, sizeof(NV2080_CTRL_FB_GET_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_fb_info_v1, nvsim_ctrl_fb_info_v1_fill },
	{ NV2080_CTRL_CMD_FB_GET_INFO_V2, sizeof(NV2080_CTRL_FB_GET_INFO_V2_PARAMS),
	  SUBDEVICE, nvsim_ctrl_fb_info_v2, NULL },
	{ NV2080_CTRL_CMD_GPU_GET_NAME_STRING,
	  sizeof(NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS),
	  SUBDEVICE, nvsim_ctrl_name_string, NULL },
	{ NV2080_CTRL_CMD_GPU_GET_PIDS, sizeof(NV2080_CTRL_GPU_GET_PIDS_PARAMS),
	  SUBDEVICE, nvsim_ctrl_get_pids, NULL },
	{ NV2080_CTRL_CMD_GPU_GET_PID_INFO,
	  sizeof(NV2080_CTRL_GPU_GET_PID_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_get_pid_info, NULL },
	{ NV0041_CTRL_CMD_GET_SURFACE_INFO,
	  sizeof(NV0041_CTRL_GET_SURFACE_INFO_PARAMS),
	  MEMORY, nvsim_ctrl_surface_info, nvsim_ctrl_surface_info_fill },
	{ NVA06C_CTRL_CMD_GPFIFO_SCHEDULE,
	  sizeof(NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS),
	  TSG, nvsim_ctrl_tsg_schedule, NULL },
	{ NVA06C_CTRL_CMD_SET_TIMESLICE, sizeof(NVA06C_CTRL_TIMESLICE_PARAMS),
	  TSG, nvsim_ctrl_tsg_set_timeslice, NULL },
	{ NVA06C_CTRL_CMD_GET_TIMESLICE, sizeof(NVA06C_CTRL_TIMESLICE_PARAMS),
	  TSG, nvsim_ctrl_tsg_get_timeslice, NULL },
	{ NVA06C_CTRL_CMD_PREEMPT, sizeof(NVA06C_CTRL_PREEMPT_PARAMS),
	  TSG, nvsim_ctrl_tsg_preempt, nvsim_ctrl_tsg_preempt_wait },
	{ NVA06C_CTRL_CMD_GET_INFO, sizeof(NVA06C_CTRL_GET_INFO_PARAMS),
	  TSG, nvsim_ctrl_tsg_get_info, NULL },
	{ NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL,
	  sizeof(NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS),
	  TSG, nvsim_ctrl_tsg_set_interleave, NULL },
	{ NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL,
	  sizeof(NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS),
	  TSG, nvsim_ctrl_tsg_get_interleave, NULL },
	{ NVA06F_CTRL_CMD_GPFIFO_SCHEDULE,
	  sizeof(NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS),
	  CHANNEL, nvsim_ctrl_chan_schedule, NULL },
	{ NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
	  sizeof(NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS),
	  CHANNEL, nvsim_ctrl_work_submit_token, NULL },
};

static const struct nvsim_ctrl *nvsim_ctrl_find(u32 cmd)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_ctrls); i++)
		if (nvsim_ctrls[i].cmd == cmd)
			return &nvsim_ctrls[i];
	return NULL;
}

static NV_STATUS nvsim_control_locked(const struct nvsim_ctrl *ctrl,
				      struct nvsim_ctrl_ctx *ctx,
				      NVOS54_PARAMETERS *p)
{
	struct nvsim_client *client;
	NV_STATUS status;

	status = nvsim_client_get(ctx->call, p->hClient, &client);
	if (status != NV_OK)
		return status;
	ctx->obj = nvsim_object_find(client, p->hObject);
	if (!ctx->obj)
		return NV_ERR_INVALID_OBJECT_HANDLE;
	if (!ctrl || !(ctrl->types & NVSIM_BIT(ctx->obj->type)))
		return NV_ERR_NOT_SUPPORTED;
	if (p->paramsSize != nvsim_rel_size(NVREL_CTL, p->cmd, ctrl->size))
		return NV_ERR_INVALID_PARAM_STRUCT;
	return ctrl->locked(ctx);
}

/**
 * nvsim_rm_control - NV_ESC_RM_CONTROL / NV04_CONTROL
 * @call: the caller
 * @p: the parameters; result in p->status
 */
void nvsim_rm_control(const struct nvsim_call *call, NVOS54_PARAMETERS *p)
{
	struct nvsim_ctrl_ctx ctx = { .call = call };
	const struct nvsim_ctrl *ctrl;
	NV_STATUS status;

	if (p->flags & NVOS54_FLAGS_FINN_SERIALIZED) {
		p->status = NV_ERR_NOT_SUPPORTED;
		return;
	}
	if (p->paramsSize > NVSIM_MAX_CTRL_PARAMS ||
	    (p->params == 0) != (p->paramsSize == 0)) {
		p->status = NV_ERR_INVALID_ARGUMENT;
		return;
	}

	ctrl = nvsim_ctrl_find(p->cmd);
	WRITE_ONCE(nvsim.last_control, p->cmd);
	if (p->paramsSize) {
		/*
		 * A release's struct may be smaller than the 595.45.04 one the
		 * handler fills: the buffer is the larger; the caller gets its
		 * paramsSize back.
		 */
		ctx.params = kvzalloc(max(p->paramsSize, ctrl ? ctrl->size : 0),
				      GFP_KERNEL_ACCOUNT);
		if (!ctx.params) {
			p->status = NV_ERR_NO_MEMORY;
			return;
		}
		if (nvsim_copy_in(call, ctx.params, p->params, p->paramsSize)) {
			status = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
	}

	mutex_lock(&nvsim.lock);
	status = nvsim_control_locked(ctrl, &ctx, p);
	mutex_unlock(&nvsim.lock);
	ctx.obj = NULL;

	if (status == NV_OK && ctrl->unlocked)
		status = ctrl->unlocked(&ctx);
	if (status == NV_OK &&
	    nvsim_copy_out(call, p->params, ctx.params, p->paramsSize))
		status = NV_ERR_INVALID_ARGUMENT;
out:
	kvfree(ctx.params);
	p->status = status;
}
