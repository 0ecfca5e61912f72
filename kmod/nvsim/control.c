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
#include <linux/pid.h>
#include <linux/pid_namespace.h>

#include "nvsim.h"
#include "ctrl.h"

/* Bounds on the embedded lists. */
#define NVSIM_SURFACE_INFO_MAX_LIST 256

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
 * NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID on a client:
 * cliresCtrlCmdGpuGetUuidFromGpuId_IMPL (client_resource.c) through
 * gpumgrGetGpuUuidInfo (gpu_mgr.c): TYPE must be SHA1 (SHA256:
 * NV_ERR_INVALID_ARGUMENT); FORMAT BINARY gives the 16 bytes, anything else
 * the string "GPU-..." (transformGidToUserFriendlyString, NV_UUID_STR_LEN
 * bytes with its NUL); an unknown gpuId is NV_ERR_OBJECT_NOT_FOUND
 * (gpumgrGetGpuFromId failing after the cache missed).  The UUID is the one
 * gpu.c makes, which GID_INFO gives too.
 */
static NV_STATUS nvsim_ctrl_uuid_from_gpu_id(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS *p = ctx->params;
	struct nvsim_gpu *gpu;

	if (p->flags & NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_TYPE_SHA256)
		return NV_ERR_INVALID_ARGUMENT;
	gpu = nvsim_gpu_by_id(p->gpuId);
	if (!gpu)
		return NV_ERR_OBJECT_NOT_FOUND;
	if ((p->flags & NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_MASK) ==
	    NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_BINARY) {
		memcpy(p->gpuUuid, gpu->uuid, NV_UUID_LEN);
		p->uuidStrLen = NV_UUID_LEN;
	} else {
		nvsim_uuid_string(gpu->uuid, (char *)p->gpuUuid);
		p->uuidStrLen = NV_UUID_STR_LEN;
	}
	return NV_OK;
}

/* The first version: the same ids; szName is not touched (gpumgrGetGpuIdInfo). */
static NV_STATUS nvsim_ctrl_gpu_id_info(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_GPU_GET_ID_INFO_PARAMS *p = ctx->params;
	NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS v2 = { .gpuId = p->gpuId };
	struct nvsim_ctrl_ctx v2ctx = { .params = &v2 };
	NV_STATUS st = nvsim_ctrl_gpu_id_info_v2(&v2ctx);

	if (st != NV_OK)
		return st;
	p->gpuFlags = v2.gpuFlags;
	p->deviceInstance = v2.deviceInstance;
	p->subDeviceInstance = v2.subDeviceInstance;
	p->sliStatus = v2.sliStatus;
	p->boardId = v2.boardId;
	p->gpuInstance = v2.gpuInstance;
	p->numaId = v2.numaId;
	return NV_OK;
}

/*
 * ATTACH_IDS, DETACH_IDS, ASYNC_ATTACH_ID, WAIT_ATTACH_ID: Core RM only
 * validates (client_resource.c).  Attach: every id up to the first
 * NV0000_CTRL_GPU_INVALID_ID a probed one (_cliresValidateGpuIdAgainstProbed),
 * ATTACH_ALL_PROBED_IDS first is NV_OK.  Detach: DETACH_ALL_ATTACHED_IDS
 * first is NV_OK; otherwise the loop of cliresCtrlCmdGpuDetachIds breaks
 * after its first id, so only that one must be attached.  Async attach:
 * the id must be probed.  Wait: NV_OK.  nvsim's GPUs are all probed and
 * attached.
 */
static NV_STATUS nvsim_ctrl_attach_ids(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_GPU_ATTACH_IDS_PARAMS *p = ctx->params;
	u32 i;

	if (p->gpuIds[0] == NV0000_CTRL_GPU_ATTACH_ALL_PROBED_IDS)
		return NV_OK;
	for (i = 0; i < NV0000_CTRL_GPU_MAX_PROBED_GPUS &&
		    p->gpuIds[i] != NV0000_CTRL_GPU_INVALID_ID; i++)
		if (!nvsim_gpu_by_id(p->gpuIds[i]))
			return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_detach_ids(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_GPU_DETACH_IDS_PARAMS *p = ctx->params;

	if (p->gpuIds[0] == NV0000_CTRL_GPU_DETACH_ALL_ATTACHED_IDS ||
	    p->gpuIds[0] == NV0000_CTRL_GPU_INVALID_ID)
		return NV_OK;
	return nvsim_gpu_by_id(p->gpuIds[0]) ? NV_OK : NV_ERR_INVALID_ARGUMENT;
}

static NV_STATUS nvsim_ctrl_async_attach_id(struct nvsim_ctrl_ctx *ctx)
{
	u32 *gpu_id = ctx->params;

	return nvsim_gpu_by_id(*gpu_id) ? NV_OK : NV_ERR_INVALID_ARGUMENT;
}

/*
 * GET_ACTIVE_DEVICE_IDS (gpumgrCacheGetActiveDeviceIds): one entry per
 * probed GPU not in MIG mode, its instance ids NV0000_CTRL_GPU_INVALID_ID.
 */
static NV_STATUS nvsim_ctrl_active_device_ids(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS *p = ctx->params;
	u32 i;

	for (i = 0; i < nvsim.num_gpus; i++) {
		p->devices[i].gpuId = nvsim.gpus[i].gpu_id;
		p->devices[i].gpuInstanceId = NV0000_CTRL_GPU_INVALID_ID;
		p->devices[i].computeInstanceId = NV0000_CTRL_GPU_INVALID_ID;
	}
	p->numDevices = nvsim.num_gpus;
	return NV_OK;
}

/*
 * CLIENT_SET_INHERITED_SHARE_POLICY: RM records the policy on the client
 * for the objects it makes later; nvsim shares nothing between clients
 * and accepts it.
 */
/*
 * NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, as cliresCtrlCmdClientGetHandleInfo
 * (client_resource.c): the object looked up in the client
 * (serverutilGetResourceRef: NV_ERR_OBJECT_NOT_FOUND), then its parent's
 * handle (0 for the client itself) or its class; another index
 * NV_ERR_INVALID_ARGUMENT.
 */
static NV_STATUS nvsim_ctrl_handle_info(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS *p = ctx->params;
	/* The ref, an invalidated one too: serverutilGetResourceRef finds it. */
	struct nvsim_object *o = nvsim_object_ref(ctx->obj->client, p->hObject);

	if (!o)
		return NV_ERR_OBJECT_NOT_FOUND;
	switch (p->index) {
	case NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT:
		p->data.hResult = o->parent ? o->parent->handle : 0;
		return NV_OK;
	case NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID:
		p->data.iResult = o->hclass;
		return NV_OK;
	default:
		return NV_ERR_INVALID_ARGUMENT;
	}
}

static NV_STATUS nvsim_ctrl_ok(struct nvsim_ctrl_ctx *ctx)
{
	return NV_OK;
}

/* GPU_GET_MEMOP_ENABLE: stream memops not forced on (cliresCtrlCmdGpuGetMemOpEnable). */
static NV_STATUS nvsim_ctrl_memop_enable(struct nvsim_ctrl_ctx *ctx)
{
	*(u32 *)ctx->params = 0;
	return NV_OK;
}

/* NV0080 GET_NUM_SUBDEVICES: 1 (deviceCtrlCmdGpuGetNumSubdevices). */
static NV_STATUS nvsim_ctrl_num_subdevices(struct nvsim_ctrl_ctx *ctx)
{
	*(u32 *)ctx->params = 1;
	return NV_OK;
}

/*
 * FB_GET_FB_REGION_INFO (subdeviceCtrlCmdFbGetFBRegionInfo): the regions
 * that are neither reserved nor internal; nvsim's FB is one region, all of
 * it, compressible, not ISO (so the ISO surface types are blacklisted).
 * Only region 0 is written: its head lies at the same offsets in every
 * release (the region grew at its end).
 */
static NV_STATUS nvsim_ctrl_fb_regions(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS *p = ctx->params;
	NV2080_CTRL_CMD_FB_GET_FB_REGION_FB_REGION_INFO *r = &p->fbRegion[0];

	p->numFBRegions = 1;
	r->base = 0;
	r->limit = nvsim_fb_size - 1;
	r->reserved = 0;
	r->performance = 0;
	r->supportCompressed = 1;
	r->supportISO = 0;
	return NV_OK;
}

/*
 * NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS and _GET_PROBED_IDS on a client
 * (client_resource.c: cliresCtrlCmdGpuGetAttachedIds_IMPL and
 * cliresCtrlCmdGpuGetProbedIds_IMPL, gpumgrGetAttachedGpuIds and
 * gpumgrGetProbedGpuIds): every GPU's gpuId from index 0, the rest
 * NV0000_CTRL_GPU_INVALID_ID; probed: no GPU excluded, flags 0.  The
 * handlers fill 595.45.04's struct (gpuFlags is 580's and later); the
 * caller gets back its release's paramsSize of it.  nvsim's GPUs are all
 * probed and attached.
 */
static void nvsim_fill_ids(u32 *ids, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		ids[i] = i < nvsim.num_gpus ? nvsim.gpus[i].gpu_id :
					       NV0000_CTRL_GPU_INVALID_ID;
}

static NV_STATUS nvsim_ctrl_attached_ids(struct nvsim_ctrl_ctx *ctx)
{
	nvsim_fill_ids(ctx->params, NV0000_CTRL_GPU_MAX_ATTACHED_GPUS);
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_probed_ids(struct nvsim_ctrl_ctx *ctx)
{
	u32 *p = ctx->params, m = NV0000_CTRL_GPU_MAX_PROBED_GPUS;

	nvsim_fill_ids(p, m);                   /* gpuIds */
	memset32(p + m, NV0000_CTRL_GPU_INVALID_ID, m);   /* excludedGpuIds */
	memset(p + 2 * m, 0, m * sizeof(u32));  /* gpuFlags (580 on) */
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

void nvsim_pid_add(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p, u32 pid)
{
	if (p->pidTblCount < NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT &&
	    !nvsim_pid_listed(p->pidTbl, p->pidTblCount, pid))
		p->pidTbl[p->pidTblCount++] = pid;
}

/*
 * A client's process in GPU_GET_PIDS, as gpu_rmapi.c's gpuGetProcWithObject
 * adds it: skipped if its ProcID (the host tgid) is in the table already
 * (_gpuiIsPidSavedAlready compares ProcID with the converted entries), then
 * _gpuConvertPid: a user client's pid as the caller's PID namespace numbers
 * it (os-interface.c, os_find_ns_pid: pid_vnr), not listed where that
 * namespace does not see it (NV_ERR_OBJECT_NOT_FOUND, skipped); a kernel
 * client (no pOsPidInfo) by its ProcID.  A process in a container thus
 * shows under its container PID, and the host's are hidden from it.
 */
void nvsim_pid_add_client(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p,
			  const struct nvsim_client *client)
{
	pid_t v = client->tgid;

	if (nvsim_pid_listed(p->pidTbl, p->pidTblCount, client->tgid))
		return;
	if (client->pid_info) {
		v = pid_vnr(client->pid_info);
		if (!v)
			return;
	}
	if (p->pidTblCount < NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT)
		p->pidTbl[p->pidTblCount++] = v;
}

/*
 * nvsim's own addition to NV20_SUBDEVICE_0's list, a process with FB charged
 * and no client left: named as the caller's PID namespace sees it, as
 * _gpuConvertPid names a client's, or not at all.
 */
static void nvsim_pid_add_tgid(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p, pid_t tgid)
{
	struct pid *pid;
	pid_t v = 0;

	rcu_read_lock();
	pid = find_pid_ns(tgid, &init_pid_ns);
	if (pid)
		v = pid_vnr(pid);
	rcu_read_unlock();
	if (v)
		nvsim_pid_add(p, v);
}

/*
 * The processes with a client on this GPU or FB charged on it, as the
 * caller's PID namespace sees them (nvsim_pid_add_client); another class
 * than the subdevice's in monitor.c.
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

	/* Another class than the subdevice's: monitor.c. */
	if (p->id != NV20_SUBDEVICE_0)
		return nvsim_get_pids_of_class(p, gpu);
	xa_for_each(&nvsim.clients, idx, client)
		if (nvsim_client_on_gpu(client, gpu))
			nvsim_pid_add_client(p, client);
	list_for_each_entry(pe, &nvsim.pid_fb, node)
		if (pe->gpu == gpu->index && pe->bytes)
			nvsim_pid_add_tgid(p, pe->tgid);
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

/* ------------------------------------------------- start-up controls */

/*
 * An embedded list the driver copies (param_copy.c, rmapiParamsAcquire, as
 * embedded_param_copy.c sets it up): count * elem bytes that must not
 * overflow 32 bits, a pointer if and only if there are bytes, and no more
 * than RMAPI_PARAM_COPY_MAX_PARAMS_SIZE; otherwise NV_ERR_INVALID_ARGUMENT.
 * Parameters in kernel memory (a kernel caller) are used as they are
 * (embeddedParamCopyIn returns at once for PARAM_LOCATION_KERNEL).
 */
NV_STATUS nvsim_embedded_bytes(struct nvsim_ctrl_ctx *ctx, u64 ptr,
			       u32 count, u32 elem, size_t *bytes)
{
	u64 b = (u64)count * elem;

	if (ctx->call->kparams) {
		*bytes = b;
		return NV_OK;
	}
	if (b > U32_MAX || (b != 0) != (ptr != 0) || b > NVSIM_MAX_CTRL_PARAMS)
		return NV_ERR_INVALID_ARGUMENT;
	*bytes = b;
	return NV_OK;
}

/* os_memcpy_from_user / _to_user: a fault is NV_ERR_INVALID_ADDRESS. */
NV_STATUS nvsim_list_in(struct nvsim_ctrl_ctx *ctx, void *dst, u64 ptr,
			size_t bytes)
{
	return nvsim_copy_in(ctx->call, dst, ptr, bytes) ?
	       NV_ERR_INVALID_ADDRESS : NV_OK;
}

NV_STATUS nvsim_list_out(struct nvsim_ctrl_ctx *ctx, u64 ptr,
			 const void *src, size_t bytes)
{
	return nvsim_copy_out(ctx->call, ptr, src, bytes) ?
	       NV_ERR_INVALID_ADDRESS : NV_OK;
}

/* Controls that need no state beyond the object's existence. */
static NV_STATUS nvsim_ctrl_nothing_locked(struct nvsim_ctrl_ctx *ctx)
{
	return NV_OK;
}

/*
 * A class list into a caller's list of numClasses NvU32s, as
 * gpuGetClassList_IMPL (gpu_resource_desc.c): with no list the count is
 * returned; a list too short is NV_ERR_INVALID_PARAM_STRUCT (and, the
 * control having failed, nothing is copied back); otherwise the classes
 * are written and numClasses becomes their count.  The caller's list is
 * copied in first and all of it back (embeddedParamCopyIn/Out).
 */
static NV_STATUS nvsim_classlist_fill(struct nvsim_ctrl_ctx *ctx,
				      u32 *num_classes, u64 ptr, int eng,
				      unsigned int inst)
{
	unsigned int count = nvsim_arch_classlist(NULL, 0, eng, inst);
	NV_STATUS status;
	size_t bytes;
	u32 *list;

	status = nvsim_embedded_bytes(ctx, ptr, *num_classes, sizeof(u32), &bytes);
	if (status != NV_OK)
		return status;
	if (!ptr) {
		*num_classes = count;
		return NV_OK;
	}
	list = kvmalloc(bytes, GFP_KERNEL_ACCOUNT);
	if (!list)
		return NV_ERR_NO_MEMORY;
	status = nvsim_list_in(ctx, list, ptr, bytes);
	if (status != NV_OK)
		goto out;
	if (*num_classes < count) {
		status = NV_ERR_INVALID_PARAM_STRUCT;
		goto out;
	}
	nvsim_arch_classlist(list, *num_classes, eng, inst);
	status = nvsim_list_out(ctx, ptr, list, bytes);
	if (status == NV_OK)
		*num_classes = count;
out:
	kvfree(list);
	return status;
}

/* NV0080_CTRL_CMD_GPU_GET_CLASSLIST: device_ctrl.c, deviceCtrlCmdGpuGetClasslist_IMPL */
static NV_STATUS nvsim_ctrl_classlist(struct nvsim_ctrl_ctx *ctx)
{
	NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS *p = ctx->params;

	return nvsim_classlist_fill(ctx, &p->numClasses, p->classList,
				    NVSIM_ENG_ANY, 0);
}

/*
 * NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST: subdevice_ctrl_gpu_kernel.c,
 * subdeviceCtrlCmdGpuGetEngineClasslist_IMPL.  The engine type is
 * translated by gpuXlateClientEngineIdToEngDesc (an unknown one:
 * NV_ERR_INVALID_ARGUMENT), then the classes of that engine are listed.
 * nvsim models the GR and copy engines; other engine types are answered
 * NV_ERR_INVALID_ARGUMENT (simplified: RM lists their video classes).
 */
static NV_STATUS nvsim_ctrl_engine_classlist(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS *p = ctx->params;
	u32 t = p->engineType;
	int eng;
	unsigned int inst;

	if (t >= NV2080_ENGINE_TYPE_GR0 && t <= NV2080_ENGINE_TYPE_GR7) {
		eng = NVSIM_ENG_GR;
		inst = t - NV2080_ENGINE_TYPE_GR0;
	} else if (t >= NV2080_ENGINE_TYPE_COPY0 && t <= NV2080_ENGINE_TYPE_COPY9) {
		eng = NVSIM_ENG_CE;
		inst = t - NV2080_ENGINE_TYPE_COPY0;
	} else {
		return NV_ERR_INVALID_ARGUMENT;
	}
	return nvsim_classlist_fill(ctx, &p->numClasses, p->classList, eng,
				    inst);
}

/* The release's NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE: its V2 array's length. */
static u32 nvsim_gpu_info_max(void)
{
	u32 size = nvsim_rel_size(NVREL_CTL, NV2080_CTRL_CMD_GPU_GET_INFO_V2,
				  sizeof(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS));

	return min_t(u32, (size - sizeof(u32)) / sizeof(NV2080_CTRL_GPU_INFO),
		     NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE);
}

/*
 * One GPU info item, as getGpuInfos (subdevice_ctrl_gpu_kernel.c) answers
 * on a GPU that is neither a GSP client nor virtual: the items below, the
 * ECIDs NV_ERR_NOT_SUPPORTED, anything else NV_ERR_INVALID_ARGUMENT (the
 * items nvsim does not model are answered so too).
 */
static NV_STATUS nvsim_gpu_info_value(u32 index, u32 *data)
{
	const struct nvsim_arch *a = nvsim_arch;

	switch (index) {
	case NV2080_CTRL_GPU_INFO_INDEX_ECID_LO32:
	case NV2080_CTRL_GPU_INFO_INDEX_ECID_HI32:
	case NV2080_CTRL_GPU_INFO_INDEX_ECID_EXTENDED:
		*data = 0;
		return NV_ERR_NOT_SUPPORTED;
	case NV2080_CTRL_GPU_INFO_INDEX_SYSMEM_ACCESS:
		*data = NV2080_CTRL_GPU_INFO_SYSMEM_ACCESS_YES;
		return NV_OK;
	case NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV0:
	case NV2080_CTRL_GPU_INFO_INDEX_NETLIST_REV1:
	case NV2080_CTRL_GPU_INFO_INDEX_GEMINI_BOARD:
	case NV2080_CTRL_GPU_INFO_INDEX_SURPRISE_REMOVAL_POSSIBLE:
	case NV2080_CTRL_GPU_INFO_INDEX_MOBILE_CONFIG_ENABLED:
	case NV2080_CTRL_GPU_INFO_INDEX_CMP_SKU:
	case NV2080_CTRL_GPU_INFO_INDEX_COHERENT_GPU_MEMORY_MODE:
		*data = 0;      /* no, or NONE: a PCIe board */
		return NV_OK;
	case NV2080_CTRL_GPU_INFO_INDEX_GPU_SMC_MODE:
		*data = a->smc_mode;
		return NV_OK;
	case NV2080_CTRL_GPU_INFO_INDEX_GPU_SM_VERSION:
		*data = a->sm_version;
		return NV_OK;
	case NV2080_CTRL_GPU_INFO_INDEX_DISPLAY_ENABLED:
		*data = a->display;
		return NV_OK;
	case NV2080_CTRL_GPU_INFO_INDEX_GPU_PROFILING_CAPABILITY:
	case NV2080_CTRL_GPU_INFO_INDEX_GPU_DEBUGGING_CAPABILITY:
		*data = 1;      /* ENABLED: always, on bare metal */
		return NV_OK;
	default:
		if (nvsim_gpu_info_more(index, data) == NV_OK)  /* monitor.c */
			return NV_OK;
		return nvsim_cuda_gpu_info_value(index, data);  /* cuda.c */
	}
}

/*
 * getGpuInfos: a list of 1 .. MAX_LIST_SIZE items, each index (bits 23:0)
 * below MAX_LIST_SIZE; the first item that fails fails the control.
 */
static NV_STATUS nvsim_gpu_info_list(NV2080_CTRL_GPU_INFO *list, u32 n)
{
	u32 max = nvsim_gpu_info_max(), i, index;
	NV_STATUS status;

	if (n == 0 || n > max)
		return NV_ERR_INVALID_ARGUMENT;
	for (i = 0; i < n; i++) {
		index = list[i].index & NV2080_CTRL_GPU_INFO_INDEX_INDEX_MASK;
		if (index >= max)
			return NV_ERR_INVALID_ARGUMENT;
		status = nvsim_gpu_info_value(index, &list[i].data);
		if (status != NV_OK)
			return status;
	}
	return NV_OK;
}

/* NV2080_CTRL_CMD_GPU_GET_INFO_V2: subdeviceCtrlCmdGpuGetInfoV2_IMPL */
static NV_STATUS nvsim_ctrl_gpu_info_v2(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_INFO_V2_PARAMS *p = ctx->params;

	return nvsim_gpu_info_list(p->gpuInfoList, p->gpuInfoListSize);
}

/*
 * NV2080_CTRL_CMD_GPU_GET_INFO: only the deprecated-control layer answers
 * it, by calling V2 (rmapi_deprecated_control.c, CONVERT_TO_V2_EX and
 * ctrlparamAcquire): an empty list is not copied and V2 refuses it; more
 * items than V2's array holds is NV_ERR_OUT_OF_RANGE; the list is copied
 * in (a NULL pointer: NV_ERR_INVALID_ARGUMENT, rmapiParamsCopyIn), answered
 * by V2 and copied back on success (a failed copy-back is ignored there).
 */
static NV_STATUS nvsim_ctrl_gpu_info_v1(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_INFO_PARAMS *p = ctx->params;
	NV2080_CTRL_GPU_INFO list[NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE];
	u32 n = p->gpuInfoListSize;
	size_t bytes = n * sizeof(list[0]);
	NV_STATUS status;

	if (n == 0)
		return nvsim_gpu_info_list(list, 0);
	if (n > nvsim_gpu_info_max())
		return NV_ERR_OUT_OF_RANGE;
	if (!p->gpuInfoList)
		return NV_ERR_INVALID_ARGUMENT;
	status = nvsim_list_in(ctx, list, p->gpuInfoList, bytes);
	if (status != NV_OK)
		return status;
	status = nvsim_gpu_info_list(list, n);
	if (status == NV_OK)
		nvsim_list_out(ctx, p->gpuInfoList, list, bytes);
	return status;
}

/* GID_INFO needs the GPU's UUID, read under the lock. */
static NV_STATUS nvsim_ctrl_gid_locked(struct nvsim_ctrl_ctx *ctx)
{
	memcpy(ctx->uuid, ctx->obj->gpu->uuid, NV_UUID_LEN);
	return NV_OK;
}

/*
 * NV2080_CTRL_CMD_GPU_GET_GID_INFO: subdeviceCtrlCmdGpuGetGidInfo_IMPL and
 * gpuGetGidInfo_IMPL (gpu.c).  MODE GPU: TYPE must be SHA1
 * (NV_ERR_INVALID_FLAGS); FORMAT BINARY gives the 16 bytes, anything else
 * the string "GPU-..." with its NUL (transformGidToUserFriendlyString,
 * NV_UUID_STR_LEN bytes).  MODE UGPU: a GPU without uGPUs
 * (gpuGenUgidData_HAL: NV_ERR_NOT_SUPPORTED, after the same TYPE check);
 * other modes NV_ERR_INVALID_PARAMETER.  The UUID is the one gpu.c makes.
 */
static NV_STATUS nvsim_ctrl_gid_info(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GPU_GET_GID_INFO_PARAMS *p = ctx->params;
	u32 mode = (p->flags >> NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_SHIFT) &
		   NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_MASK;
	bool sha1 = ((p->flags >> NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHIFT) & 1) ==
		    NV2080_GPU_CMD_GPU_GET_GID_FLAGS_TYPE_SHA1;

	if (mode != NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_GPU &&
	    mode != NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_UGPU)
		return NV_ERR_INVALID_PARAMETER;
	if (!sha1)
		return NV_ERR_INVALID_FLAGS;
	if (mode == NV2080_GPU_CMD_GPU_GET_GID_FLAGS_MODE_UGPU)
		return NV_ERR_NOT_SUPPORTED;

	if ((p->flags & NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_MASK) ==
	    NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY) {
		memcpy(p->data, ctx->uuid, NV_UUID_LEN);
		p->length = NV_UUID_LEN;
	} else {
		nvsim_uuid_string(ctx->uuid, (char *)p->data);
		p->length = NV_UUID_STR_LEN;
	}
	return NV_OK;
}

/*
 * The build strings: NV_VERSION_STRING is the release nvsim presents; the
 * branch, its build version and title name nvsim (the real driver's are
 * its build's, nvBldVer.h); the changelist numbers are 0.
 */
static void nvsim_build_strings(char *version, char *bld, char *branch,
				char *title, size_t len)
{
	snprintf(version, len, "%s", nvsim_rel->name);
	snprintf(bld, len, "nvsim-%s", nvsim_rel->name);
	snprintf(branch, len, "nvsim");
	snprintf(title, len, "nvsim simulated driver %s", nvsim_rel->name);
}

/*
 * NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2: cliresCtrlCmdSystemGetBuild
 * VersionV2_IMPL (client_resource.c).  It is CACHEABLE: the parameters
 * are not read (a zeroed buffer, control.c).  535.288.01 and 550.163.01's
 * struct has no driverBranch: the title and changelists then sit the same
 * distance from the end as in 595.45.04's.
 */
static NV_STATUS nvsim_ctrl_build_version_v2(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS *p = ctx->params;
	const size_t full = sizeof(*p), len =
		NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE;
	u8 *buf = ctx->params;
	size_t size = ctx->psize;
	char branch[NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_MAX_STRING_SIZE];
	u32 *cl;

	memset(buf, 0, max(size, full));
	nvsim_build_strings(p->driverVersionBuffer, p->versionBuffer, branch,
			    (char *)buf + size - (full - offsetof(typeof(*p), titleBuffer)),
			    len);
	if (size == full)
		memcpy(p->driverBranch, branch, len);
	cl = (u32 *)(buf + size - (full - offsetof(typeof(*p), changelistNumber)));
	cl[0] = 0;      /* changelistNumber */
	cl[1] = 0;      /* officialChangelistNumber */
	return NV_OK;
}

/*
 * NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION: the deprecated-control layer's
 * converter (rmapi_deprecated_control.c, V2_CONVERTER(_NV0000_CTRL_CMD_
 * SYSTEM_GET_BUILD_VERSION)): the strings come from V2; sizeOfStrings is
 * the longest string's length with its NUL.  If any of the three pointers
 * is NULL the caller only learns sizeOfStrings; if sizeOfStrings is less
 * than that, NV_ERR_INVALID_PARAM_STRUCT; otherwise each string is copied
 * out with its NUL (a failed copy: NV_ERR_INVALID_PARAM_STRUCT) and the
 * changelist numbers are set.
 */
static NV_STATUS nvsim_ctrl_build_version(struct nvsim_ctrl_ctx *ctx)
{
	NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS *p = ctx->params;
	NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS *v2;
	size_t lv, lb, lt, maxlen;
	NV_STATUS status = NV_OK;

	v2 = kzalloc(sizeof(*v2), GFP_KERNEL);
	if (!v2)
		return NV_ERR_NO_MEMORY;
	nvsim_build_strings(v2->driverVersionBuffer, v2->versionBuffer,
			    v2->driverBranch, v2->titleBuffer,
			    sizeof(v2->titleBuffer));
	lv = strnlen(v2->driverVersionBuffer, sizeof(v2->driverVersionBuffer)) + 1;
	lb = strnlen(v2->versionBuffer, sizeof(v2->versionBuffer)) + 1;
	lt = strnlen(v2->titleBuffer, sizeof(v2->titleBuffer)) + 1;
	maxlen = max3(lv, lb, lt);

	if (!p->pDriverVersionBuffer || !p->pVersionBuffer || !p->pTitleBuffer) {
		p->sizeOfStrings = maxlen;
	} else if (p->sizeOfStrings < maxlen) {
		status = NV_ERR_INVALID_PARAM_STRUCT;
	} else if (nvsim_copy_out(ctx->call, p->pDriverVersionBuffer,
				  v2->driverVersionBuffer, lv) ||
		   nvsim_copy_out(ctx->call, p->pVersionBuffer,
				  v2->versionBuffer, lb) ||
		   nvsim_copy_out(ctx->call, p->pTitleBuffer,
				  v2->titleBuffer, lt)) {
		status = NV_ERR_INVALID_PARAM_STRUCT;
	} else {
		p->changelistNumber = v2->changelistNumber;
		p->officialChangelistNumber = v2->officialChangelistNumber;
	}
	kfree(v2);
	return status;
}

/* ctrl0080gr.h: NV0080_CTRL_GR_INFO_INDEX_SHADER_PIPE_SUB_COUNT; not in nvabi.h */
#define NVSIM_GR_INFO_INDEX_SHADER_PIPE_SUB_COUNT       0x00000009

/* The GR engine's figures (the chip's; indexes it does not set read 0). */
static u32 nvsim_gr_info_value(u32 index)
{
	const struct nvsim_arch *a = nvsim_arch;

	switch (index) {
	case NV2080_CTRL_GR_INFO_INDEX_SM_VERSION:
		return a->sm_version;
	case NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM:
		return a->max_warps_per_sm;
	case NV2080_CTRL_GR_INFO_INDEX_MAX_THREADS_PER_WARP:
		return 32;
	case NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_GPCS:
		return a->gpcs;
	case NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_TPC_PER_GPC:
		return a->tpc_per_gpc;
	case NV2080_CTRL_GR_INFO_INDEX_LITTER_NUM_SM_PER_TPC:
		return a->sm_per_tpc;
	case NV2080_CTRL_GR_INFO_INDEX_MAX_SUBCONTEXT_COUNT:
		return a->max_subctx;
	case NVSIM_GR_INFO_INDEX_SHADER_PIPE_SUB_COUNT:
		/*
		 * The GPU's TPC count: RM's own reading of this index
		 * (src/kernel/rmapi/nv_gpu_ops.c, getGpcTpcInfo: tpcCount;
		 * ctrl2080gr.h's "SMs per TPC" is the Tesla-era meaning).
		 * NVIDIA's libcuda 535 takes its multiprocessor count from it
		 * (x LITTER_NUM_SM_PER_TPC): 0 made it read 8.  A real H100's
		 * is GSP's floor-swept count (57 TPCs on the PCIe board, 66 on
		 * SXM5); nvsim's GH100 is not floor-swept (README).
		 */
		return a->gpcs * a->tpc_per_gpc;
	default:
		return 0;
	}
}

/*
 * NV2080_CTRL_CMD_GR_GET_INFO: kernel_graphics.c, subdeviceCtrlCmdKGrGetInfo
 * _IMPL and _kgraphicsCtrlCmdGrGetInfoV2.  The list (grInfoListSize
 * entries) is copied in and back whole (embeddedParamCopyIn/Out); a NULL
 * list is NV_ERR_INVALID_ARGUMENT; the first min(grInfoListSize,
 * GR_INFO_MAX_SIZE) entries are answered, each index below the release's
 * GR_INFO_MAX_SIZE (else NV_ERR_INVALID_ARGUMENT, nothing copied back).
 * Without MIG the route is not looked at (kgrmgrCtrlRouteKGRWithDevice).
 */
static NV_STATUS nvsim_ctrl_gr_info(struct nvsim_ctrl_ctx *ctx)
{
	NV2080_CTRL_GR_GET_INFO_PARAMS *p = ctx->params;
	u32 max = nvsim_rel_gr_info_max(), n, i;
	NV2080_CTRL_GR_INFO *list;
	NV_STATUS status;
	size_t bytes;

	status = nvsim_embedded_bytes(ctx, p->grInfoList, p->grInfoListSize,
				      sizeof(*list), &bytes);
	if (status != NV_OK)
		return status;
	if (!p->grInfoList)
		return NV_ERR_INVALID_ARGUMENT;
	list = kvmalloc(bytes, GFP_KERNEL_ACCOUNT);
	if (!list)
		return NV_ERR_NO_MEMORY;
	status = nvsim_list_in(ctx, list, p->grInfoList, bytes);
	if (status != NV_OK)
		goto out;
	n = min(p->grInfoListSize, max);
	for (i = 0; i < n; i++) {
		if (list[i].index >= max) {
			status = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
		list[i].data = nvsim_gr_info_value(list[i].index);
	}
	status = nvsim_list_out(ctx, p->grInfoList, list, bytes);
out:
	kvfree(list);
	return status;
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
 * Off the engine at once (nvsim_engine_preempt), so bWait has nothing left
 * to wait for and a timeout cannot expire; bManualTimeout and timeoutUs
 * are accepted as given.
 */
static NV_STATUS nvsim_ctrl_tsg_preempt(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_tsg *tsg = ctx->obj->tsg.tsg;

	tsg->nr_preempts++;
	nvsim_engine_preempt(tsg);
	return NV_OK;
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

/* ctrl2080perf.h (595.45.04); not in nvabi.h. */
#define NVSIM_NV2080_CTRL_CMD_PERF_BOOST        0x2080200a
#define NVSIM_PERF_BOOST_DURATION_MAX           3600
#define NVSIM_PERF_BOOST_DURATION_INFINITE      0xffffffff
typedef struct {
	NvU32 flags;
	NvU32 duration;
} NVSIM_NV2080_CTRL_PERF_BOOST_PARAMS;

/*
 * NV2080_CTRL_CMD_PERF_BOOST: subdeviceCtrlCmdKPerfBoost_IMPL and
 * kperfBoostSet_IMPL (src/kernel/gpu/perf/kern_perf_boost.c) hand flags
 * and duration to the physical RM (GSP on GA102/GH100, whose code is not
 * in the open tree) through NV2080_CTRL_CMD_INTERNAL_PERF_BOOST_SET_2X.
 * nvsim has no P-states: it answers NV_OK after the one check the open
 * source spells out (the GB10Y path and ctrl2080perf.h: a duration above
 * NV2080_CTRL_PERF_BOOST_DURATION_MAX that is not _INFINITE
 * NV_ERR_INVALID_ARGUMENT).
 */
static NV_STATUS nvsim_ctrl_perf_boost(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_PERF_BOOST_PARAMS *p = ctx->params;

	if (p->duration != NVSIM_PERF_BOOST_DURATION_INFINITE &&
	    p->duration > NVSIM_PERF_BOOST_DURATION_MAX)
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

#define MEMORY      NVSIM_BIT(NVSIM_OBJ_MEMORY)
#define TSG         NVSIM_BIT(NVSIM_OBJ_TSG)
#define CHANNEL     NVSIM_BIT(NVSIM_OBJ_CHANNEL)

static const struct nvsim_ctrl nvsim_ctrls[] = {
	/* Start-up controls: the real driver's checks (see each function). */
	{ NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION,
	  sizeof(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_PARAMS),
	  CLIENT, nvsim_ctrl_nothing_locked, nvsim_ctrl_build_version },
	{ NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2,
	  sizeof(NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS),
	  CLIENT, nvsim_ctrl_nothing_locked, nvsim_ctrl_build_version_v2 },
	{ NV0080_CTRL_CMD_GPU_GET_CLASSLIST,
	  sizeof(NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS),
	  DEVICE, nvsim_ctrl_nothing_locked, nvsim_ctrl_classlist },
	{ NV2080_CTRL_CMD_GPU_GET_ENGINE_CLASSLIST,
	  sizeof(NV2080_CTRL_GPU_GET_ENGINE_CLASSLIST_PARAMS),
	  SUBDEVICE, nvsim_ctrl_nothing_locked, nvsim_ctrl_engine_classlist },
	{ NV2080_CTRL_CMD_GPU_GET_INFO, sizeof(NV2080_CTRL_GPU_GET_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_nothing_locked, nvsim_ctrl_gpu_info_v1 },
	{ NV2080_CTRL_CMD_GPU_GET_INFO_V2,
	  sizeof(NV2080_CTRL_GPU_GET_INFO_V2_PARAMS),
	  SUBDEVICE, nvsim_ctrl_nothing_locked, nvsim_ctrl_gpu_info_v2 },
	{ NV2080_CTRL_CMD_GPU_GET_GID_INFO,
	  sizeof(NV2080_CTRL_GPU_GET_GID_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_gid_locked, nvsim_ctrl_gid_info },
	{ NV2080_CTRL_CMD_GR_GET_INFO, sizeof(NV2080_CTRL_GR_GET_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_nothing_locked, nvsim_ctrl_gr_info },
	{ NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2,
	  sizeof(NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS),
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_ctrl_gpu_id_info_v2, NULL },
	{ NV0000_CTRL_CMD_GPU_GET_ID_INFO,
	  sizeof(NV0000_CTRL_GPU_GET_ID_INFO_PARAMS),
	  CLIENT, nvsim_ctrl_gpu_id_info, NULL },
	{ NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID,
	  sizeof(NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS),
	  CLIENT, nvsim_ctrl_uuid_from_gpu_id, NULL },
	{ NV0000_CTRL_CMD_GPU_ATTACH_IDS,
	  sizeof(NV0000_CTRL_GPU_ATTACH_IDS_PARAMS),
	  CLIENT, nvsim_ctrl_attach_ids, NULL },
	{ NV0000_CTRL_CMD_GPU_DETACH_IDS,
	  sizeof(NV0000_CTRL_GPU_DETACH_IDS_PARAMS),
	  CLIENT, nvsim_ctrl_detach_ids, NULL },
	{ NV0000_CTRL_CMD_GPU_ASYNC_ATTACH_ID, sizeof(u32),
	  CLIENT, nvsim_ctrl_async_attach_id, NULL },
	{ NV0000_CTRL_CMD_GPU_WAIT_ATTACH_ID, sizeof(u32),
	  CLIENT, nvsim_ctrl_ok, NULL },
	{ NV0000_CTRL_CMD_GPU_GET_ACTIVE_DEVICE_IDS,
	  sizeof(NV0000_CTRL_GPU_GET_ACTIVE_DEVICE_IDS_PARAMS),
	  CLIENT, nvsim_ctrl_active_device_ids, NULL },
	{ NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY,
	  sizeof(NV0000_CTRL_CLIENT_SET_INHERITED_SHARE_POLICY_PARAMS),
	  CLIENT, nvsim_ctrl_ok, NULL },
	{ NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO,
	  sizeof(NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS),
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_ctrl_handle_info, NULL },
	{ NV0000_CTRL_CMD_GPU_GET_MEMOP_ENABLE, sizeof(u32),
	  CLIENT, nvsim_ctrl_memop_enable, NULL },
	{ NV0080_CTRL_CMD_GPU_GET_NUM_SUBDEVICES, sizeof(u32),
	  DEVICE, nvsim_ctrl_num_subdevices, NULL },
	{ NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO,
	  sizeof(NV2080_CTRL_CMD_FB_GET_FB_REGION_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_fb_regions, NULL },
	{ NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
	  NV0000_CTRL_GPU_MAX_ATTACHED_GPUS * sizeof(u32),
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_ctrl_attached_ids, NULL },
	{ NV0000_CTRL_CMD_GPU_GET_PROBED_IDS,
	  3 * NV0000_CTRL_GPU_MAX_PROBED_GPUS * sizeof(u32),
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_ctrl_probed_ids, NULL },
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
	  TSG, nvsim_ctrl_tsg_preempt, NULL },
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
	{ NVSIM_NV2080_CTRL_CMD_PERF_BOOST,
	  sizeof(NVSIM_NV2080_CTRL_PERF_BOOST_PARAMS),
	  SUBDEVICE, nvsim_ctrl_perf_boost, NULL },
	{ NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN,
	  sizeof(NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS),
	  CHANNEL, nvsim_ctrl_work_submit_token, NULL },
};

static const struct nvsim_ctrl *nvsim_ctrl_find(u32 cmd)
{
	const struct nvsim_ctrl *c;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_ctrls); i++)
		if (nvsim_ctrls[i].cmd == cmd)
			return &nvsim_ctrls[i];
	c = nvsim_ctrl_find_more(cmd);                  /* gpumgr.c, monitor.c */
	return c ? c : nvsim_cuda_ctrl_find(cmd);       /* cuda.c */
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
	/* serverControl: clientGetResourceRef's NV_ERR_OBJECT_NOT_FOUND. */
	ctx->obj = nvsim_object_ref(client, p->hObject);
	if (!ctx->obj)
		return NV_ERR_OBJECT_NOT_FOUND;
	/* serverControl: an invalidated dependant is NV_ERR_RESOURCE_LOST. */
	if (ctx->obj->invalidated)
		return NV_ERR_RESOURCE_LOST;
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

	/*
	 * The test bed's marker (debugfs stats): the last control a user call
	 * made, which tells a test whether a container's call reached the
	 * driver.  Kernel-entry calls (a mediator's own probes) leave it.
	 */
	if (!call->kernel)
		WRITE_ONCE(nvsim.last_control, p->cmd);
	/* Injected (fault.c): as rmapiControlWithSecInfo() failing at entry. */
	status = nvsim_fault_rm(NVSIM_FK_RM_CONTROL, p->cmd, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}
	/*
	 * NVXXXX_CTRL_CMD_NULL and every class's NULL command (category and
	 * index 0): NV_OK before anything is looked up (control.c,
	 * _rmapiRmControl), whatever the client, object or parameters.
	 */
	if (!(p->cmd & 0xffff)) {
		p->status = NV_OK;
		return;
	}
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
	/* A control the presented release does not have: no class exports it. */
	if (ctrl && nvsim_rel_lacks(NVREL_CTL, p->cmd))
		ctrl = NULL;
	ctx.psize = p->paramsSize;
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
