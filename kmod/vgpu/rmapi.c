// SPDX-License-Identifier: GPL-2.0
/*
 * rmapi.c - the driver's kernel RM entry point (nvidia_get_rm_ops).
 *
 * Linked directly, as nvidia-modeset does: the module loader binds vgpu.ko
 * to whichever driver provides the symbol (nvidia.ko or nvsim.ko) and pins
 * it while loaded.  (symbol_get() is not usable: Debian's 6.1 kernel, like
 * mainline since 6.6, refuses symbol_get() of a non-GPL export.)  The
 * driver runs these calls at RS_PRIV_LEVEL_KERNEL (entry_points.c,
 * XlateUserModeArgsToSecInfo), a privilege no container has, so vgpu.ko
 * uses this entry only for what creates nothing and names only objects it
 * tracks for the caller's file (RM_FREE, VID_HEAP FREE, existence probes)
 * and for its own work (USERD maps and scheduling of tracked channels).
 * Everything a container asks to create goes through the real file at the
 * container's privilege (call.c).
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "vgpu.h"

static nvidia_modeset_rm_ops_t vgpu_rm;
static NV_STATUS (*vgpu_get_rm_ops)(nvidia_modeset_rm_ops_t *);
static char vgpu_rm_version[NV_RM_API_VERSION_STRING_LENGTH];

int vgpu_rm_init(void)
{
	NV_STATUS st;
	int ret;

	vgpu_get_rm_ops = nvidia_get_rm_ops;
	memset(&vgpu_rm, 0, sizeof(vgpu_rm));
	vgpu_rm.version_string = vgpu_nvidia_version;
	st = vgpu_get_rm_ops(&vgpu_rm);
	if (st == NV_ERR_GENERIC && vgpu_rm.version_string) {
		/* The driver wrote its own version back: retry with it. */
		strscpy(vgpu_rm_version, vgpu_rm.version_string,
			sizeof(vgpu_rm_version));
		if (vgpu_nvidia_version[0])
			pr_warn("driver version %s, not %s as asked\n",
				vgpu_rm_version, vgpu_nvidia_version);
		memset(&vgpu_rm, 0, sizeof(vgpu_rm));
		vgpu_rm.version_string = vgpu_rm_version;
		st = vgpu_get_rm_ops(&vgpu_rm);
	}
	if (st != NV_OK || !vgpu_rm.op || !vgpu_rm.alloc_stack ||
	    !vgpu_rm.free_stack || !vgpu_rm.enumerate_gpus) {
		pr_err("nvidia_get_rm_ops refused (status %#x)\n", st);
		vgpu_get_rm_ops = NULL;
		return -ENODEV;
	}
	if (!vgpu_rm_version[0])
		strscpy(vgpu_rm_version, vgpu_nvidia_version,
			sizeof(vgpu_rm_version));
	pr_info("bound to NVIDIA driver %s\n", vgpu_rm_version);
	ret = vgpu_policy_select(vgpu_rm_version);
	if (ret)
		vgpu_get_rm_ops = NULL;
	return ret;
}

void vgpu_rm_exit(void)
{
	vgpu_get_rm_ops = NULL;
}

/*
 * NV04_ALLOC's status in the kernel entry's params: NVOS21's up to 570,
 * NVOS64's after (nv-kernel-rmapi-ops.h).  The members before it are at
 * the same offsets in both.
 */
static NV_STATUS *vgpu_rm_alloc_status(nvidia_kernel_rmapi_ops_t *ops)
{
	BUILD_BUG_ON(offsetof(NVOS21_PARAMETERS, hClass) !=
		     offsetof(NVOS64_PARAMETERS, hClass));
	BUILD_BUG_ON(offsetof(NVOS21_PARAMETERS, pAllocParms) !=
		     offsetof(NVOS64_PARAMETERS, pAllocParms));
	if (vgpu_rmapi_nvos21)
		return &((NVOS21_PARAMETERS *)&ops->params.alloc)->status;
	return &ops->params.alloc.status;
}

/* One RM stack per call: the driver's stacks are not shared between threads. */
void vgpu_rm_op(nvidia_kernel_rmapi_ops_t *ops)
{
	nvidia_modeset_stack_ptr sp = NULL;

	if (vgpu_rm.alloc_stack(&sp)) {
		/* Every op's status is the first field after its handles; fail it. */
		switch (ops->op) {
		case NV01_FREE: ops->params.free.status = NV_ERR_NO_MEMORY; break;
		case NV01_ALLOC_MEMORY: ops->params.allocMemory64.status = NV_ERR_NO_MEMORY; break;
		case NV04_ALLOC: *vgpu_rm_alloc_status(ops) = NV_ERR_NO_MEMORY; break;
		case NV04_CONTROL: ops->params.control.status = NV_ERR_NO_MEMORY; break;
		case NV04_DUP_OBJECT: ops->params.dupObject.status = NV_ERR_NO_MEMORY; break;
		case NV04_VID_HEAP_CONTROL: ops->params.pVidHeapControl->status = NV_ERR_NO_MEMORY; break;
		case NV04_MAP_MEMORY: ops->params.mapMemory.status = NV_ERR_NO_MEMORY; break;
		case NV04_UNMAP_MEMORY: ops->params.unmapMemory.status = NV_ERR_NO_MEMORY; break;
		}
		return;
	}
	vgpu_rm.op(sp, ops);
	vgpu_rm.free_stack(sp);
}

/*
 * The calls whose parameters go in and come back whole: the driver gets a
 * kernel copy (its status preset to a failure in case the op never runs)
 * and the caller gets the driver's answer.
 */
#define VGPU_RM_CALL(name, type, opcode, field)				\
NV_STATUS name(type *p)							\
{									\
	nvidia_kernel_rmapi_ops_t ops = { .op = opcode };		\
									\
	ops.params.field = *p;						\
	ops.params.field.status = NV_ERR_GENERIC;			\
	vgpu_rm_op(&ops);						\
	*p = ops.params.field;						\
	return p->status;						\
}

/* NV04_MAP_MEMORY from a kernel caller: pLinearAddress comes back as a
 * kernel address (used for a channel's USERD page, compute.c). */
VGPU_RM_CALL(vgpu_rm_map, NVOS33_PARAMETERS, NV04_MAP_MEMORY, mapMemory)
VGPU_RM_CALL(vgpu_rm_unmap, NVOS34_PARAMETERS, NV04_UNMAP_MEMORY, unmapMemory)

NV_STATUS vgpu_rm_free(NvHandle hClient, NvHandle hParent, NvHandle hObject)
{
	nvidia_kernel_rmapi_ops_t ops = { .op = NV01_FREE };

	ops.params.free.hRoot = hClient;
	ops.params.free.hObjectParent = hParent;
	ops.params.free.hObjectOld = hObject;
	ops.params.free.status = NV_ERR_GENERIC;
	vgpu_rm_op(&ops);
	return ops.params.free.status;
}

NV_STATUS vgpu_rm_control(NVOS54_PARAMETERS *p)
{
	nvidia_kernel_rmapi_ops_t ops = { .op = NV04_CONTROL };

	ops.params.control = *p;
	ops.params.control.status = NV_ERR_GENERIC;
	vgpu_rm_op(&ops);
	p->status = ops.params.control.status;
	return p->status;
}

NV_STATUS vgpu_rm_vid_heap(NVOS32_PARAMETERS *p)
{
	nvidia_kernel_rmapi_ops_t ops = { .op = NV04_VID_HEAP_CONTROL };

	p->status = NV_ERR_GENERIC;
	ops.params.pVidHeapControl = p;
	vgpu_rm_op(&ops);
	return p->status;
}

/* A control with kernel parameters, made by vgpu.ko itself. */
NV_STATUS vgpu_rm_ctrl(NvHandle hClient, NvHandle hObject, u32 cmd,
		       void *params, u32 size)
{
	NVOS54_PARAMETERS p = {
		.hClient = hClient, .hObject = hObject, .cmd = cmd,
		.params = (u64)(uintptr_t)params, .paramsSize = size,
	};

	return vgpu_rm_control(&p);
}

/*
 * The existence probe: NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO on the
 * client, for the object's parent (cliresCtrlCmdClientGetHandleInfo,
 * client_resource.c: the client looked up, then the object in it; it reads
 * and creates nothing else).  Absent: NV_ERR_INVALID_CLIENT, or the
 * object's NV_ERR_OBJECT_NOT_FOUND (serverutilGetResourceRef) or
 * NV_ERR_INVALID_OBJECT_HANDLE.  Any other failure counts as present, the
 * safe side for vgpu_created_anyway (an object thought present is freed;
 * one thought absent could hold FB uncharged), and is logged.
 *
 * Not NVXXXX_CTRL_CMD_NULL: NVIDIA's driver answers it NV_OK before it
 * looks anything up (control.c, _rmapiRmControl), so as a probe it finds
 * every handle present -- found on the real driver in the test bed
 * (tests/realdrv), where every root client allocation through a slice
 * failed for want of a free handle.
 */
bool vgpu_rm_exists(NvHandle hClient, NvHandle hObject)
{
	NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS p = {
		.hObject = hObject,
		.index = NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT,
	};
	NV_STATUS st = vgpu_rm_ctrl(hClient, hClient,
				    NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO,
				    &p, sizeof(p));

	switch (st) {
	case NV_OK:
		return true;
	case NV_ERR_INVALID_CLIENT:
	case NV_ERR_OBJECT_NOT_FOUND:
	case NV_ERR_INVALID_OBJECT_HANDLE:
		return false;
	default:
		pr_warn_ratelimited("existence probe of %#x:%#x: driver status %#x, taken as present\n",
				    hClient, hObject, st);
		return true;
	}
}

/*
 * Does hObject exist in hClient with class hclass?  The same control as
 * the existence probe, index CLASSID (cliresCtrlCmdClientGetHandleInfo:
 * the object's external class).  Asked through the kernel entry, so the
 * answer is in kernel memory; any failure is "no" (the caller's safe side:
 * nothing is adopted).
 */
bool vgpu_rm_is_class(NvHandle hClient, NvHandle hObject, u32 hclass)
{
	NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS p = {
		.hObject = hObject,
		.index = NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID,
	};

	return vgpu_rm_ctrl(hClient, hClient,
			    NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO,
			    &p, sizeof(p)) == NV_OK &&
	       p.data.iResult == hclass;
}

/**
 * vgpu_rm_mem_size - the size the driver allocated for a memory object
 * @hClient: the object's client
 * @hMemory: the object, one vgpu.ko chose or the caller named
 * @size: returns memdescGetSize of its memory descriptor
 *
 * NV0041_CTRL_CMD_GET_SURFACE_INFO, PHYS_SIZE_LO and _HI (mem_ctrl.c,
 * memCtrlCmdGetSurfaceInfoLvm_IMPL: memdescGetSize, the size
 * vidmemConstruct allocated after RM's rounding), asked through the
 * kernel entry point: a read on the caller's own object that creates
 * nothing, and whose answer (in vgpu.ko's own buffer) no sibling can
 * rewrite, unlike the size a creation writes back to the call page.  The
 * list is a kernel pointer, as every embedded pointer of a kernel call.
 * An object that does not exist fails the control.
 */
NV_STATUS vgpu_rm_mem_size(NvHandle hClient, NvHandle hMemory, u64 *size)
{
	NV0041_CTRL_SURFACE_INFO list[2] = {
		{ .index = NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_LO },
		{ .index = NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_HI },
	};
	NV0041_CTRL_GET_SURFACE_INFO_PARAMS p = {
		.surfaceInfoListSize = ARRAY_SIZE(list),
		.surfaceInfoList = (u64)(uintptr_t)list,
	};
	NV_STATUS st;

	st = vgpu_rm_ctrl(hClient, hMemory, NV0041_CTRL_CMD_GET_SURFACE_INFO,
			  &p, sizeof(p));
	if (st == NV_OK)
		*size = (u64)list[1].data << 32 | list[0].data;
	return st;
}

/*
 * A root client of vgpu.ko's own, through the kernel entry point, for
 * vgpu.ko's own questions at slice creation, on nobody's behalf.  Its
 * handle is the driver's pick (hRoot 0: serverAllocClient's generator),
 * read back from the kernel entry's parameters, which are kernel memory:
 * no handle of vgpu.ko's choosing that a tenant could hold beforehand
 * (existence is not ownership, and nothing a tenant holds decides what
 * vgpu.ko does: a tenant holding root clients at every handle vgpu.ko
 * used to pick here made every later slice fall back to the minor).
 * Return: its handle (free it with vgpu_rm_free(h, h, h)), or 0.
 */
static NvHandle vgpu_rm_own_client(void)
{
	nvidia_kernel_rmapi_ops_t ops = { .op = NV04_ALLOC };

	ops.params.alloc.hRoot = 0;
	ops.params.alloc.hObjectNew = 0;
	ops.params.alloc.hClass = NV01_ROOT;
	*vgpu_rm_alloc_status(&ops) = NV_ERR_GENERIC;
	vgpu_rm_op(&ops);
	/* hObjectNew: the same offset in NVOS21 and NVOS64 (mediate.c). */
	if (*vgpu_rm_alloc_status(&ops) != NV_OK)
		return 0;
	return ops.params.alloc.hObjectNew;
}

/**
 * vgpu_rm_device_instance - the driver's device instance of a GPU
 * @gpu_id: the driver's gpu_id
 * @inst: the instance, on success
 *
 * What NV0080's deviceId names (gpumgr's device instance, which need not be
 * the /dev minor): NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 on a client of
 * vgpu.ko's own (vgpu_rm_own_client: the driver picks its handle).
 *
 * Return: 0; -ENODEV when the driver answers that the GPU has no device
 * instance (gpumgrGetGpuIdInfoV2, gpu_mgr.c: NV_ERR_INVALID_ARGUMENT for a
 * GPU gpumgr has not attached, or none with that id); -EIO when the
 * question could not be asked or got no answer.
 */
int vgpu_rm_device_instance(u32 gpu_id, u32 *inst)
{
	NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS info = { .gpuId = gpu_id };
	NvHandle h;
	NV_STATUS st;

	h = vgpu_rm_own_client();
	if (!h)
		return -EIO;
	st = vgpu_rm_ctrl(h, h, NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2, &info,
			  sizeof(info));
	vgpu_rm_free(h, h, h);
	if (st == NV_ERR_INVALID_ARGUMENT)
		return -ENODEV;
	if (st != NV_OK)
		return -EIO;
	*inst = info.deviceInstance;
	return 0;
}

/**
 * vgpu_rm_gpu_uuid - a GPU's UUID, as the UVM driver names it
 * @gpu_id: the driver's gpu_id
 * @uuid: out: its 16 bytes
 *
 * NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID, SHA1 in binary
 * (cliresCtrlCmdGpuGetUuidFromGpuId_IMPL, client_resource.c): the UUID
 * nvUvmInterfaceRegisterGpu looks a GPU up by (nvidia_dev_get_uuid), on a
 * client of vgpu.ko's own.
 *
 * Return: 0, or -ENODEV when the driver does not give 16 bytes.
 */
int vgpu_rm_gpu_uuid(u32 gpu_id, u8 *uuid)
{
	NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS *p;
	NvHandle h;
	int ret = -ENODEV;

	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		return -ENOMEM;
	p->gpuId = gpu_id;
	p->flags = NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID_FLAGS_FORMAT_BINARY;
	h = vgpu_rm_own_client();
	if (h) {
		if (vgpu_rm_ctrl(h, h, NV0000_CTRL_CMD_GPU_GET_UUID_FROM_GPU_ID,
				 p, sizeof(*p)) == NV_OK &&
		    p->uuidStrLen == NV_UUID_LEN) {
			memcpy(uuid, p->gpuUuid, NV_UUID_LEN);
			ret = 0;
		}
		vgpu_rm_free(h, h, h);
	}
	kfree(p);
	return ret;
}

u32 vgpu_rm_enumerate(nv_gpu_info_t *info)
{
	return vgpu_rm.enumerate_gpus(info);
}
