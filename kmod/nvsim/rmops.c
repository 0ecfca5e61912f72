// SPDX-License-Identifier: GPL-2.0
/*
 * rmops.c - nvidia_get_rm_ops(), the RM entry point for other kernel modules.
 *
 * The real nvidia.ko exports it for nvidia-modeset; vgpu.ko uses it to reach
 * the TSGs of the clients it mediates.  Kernel callers share the ioctl path's
 * functions, with two differences: they may use any client (the ownership
 * check is skipped), and the pointers inside their parameters are kernel
 * pointers.  Clients they make belong to no file and are freed by them, or
 * at module unload.
 *
 * The symbol's name means nvsim and nvidia.ko can never be loaded together,
 * which is intended.
 */
#include <linux/module.h>
#include <linux/string.h>

#include "nvsim.h"

static int nvsim_rmops_alloc_stack(nvidia_modeset_stack_ptr *sp)
{
	/* x86_64 needs no alternate stack. */
	*sp = NULL;
	return 0;
}

static void nvsim_rmops_free_stack(nvidia_modeset_stack_ptr sp)
{
}

static NvU32 nvsim_rmops_enumerate_gpus(nv_gpu_info_t *gpu_info)
{
	unsigned int i;

	for (i = 0; i < nvsim.num_gpus; i++) {
		struct nvsim_gpu *gpu = &nvsim.gpus[i];

		memset(&gpu_info[i], 0, sizeof(gpu_info[i]));
		gpu_info[i].gpu_id = gpu->gpu_id;
		gpu_info[i].pci_info.domain = 0;
		gpu_info[i].pci_info.bus = gpu->bus;
		gpu_info[i].pci_info.slot = 0;
		gpu_info[i].pci_info.function = 0;
		gpu_info[i].needs_numa_setup = 0;
		gpu_info[i].os_device_ptr = gpu->dev;
	}
	return nvsim.num_gpus;
}

static int nvsim_rmops_open_gpu(NvU32 gpu_id, nvidia_modeset_stack_ptr sp)
{
	struct nvsim_gpu *gpu = nvsim_gpu_by_id(gpu_id);

	if (!gpu)
		return -ENODEV;
	mutex_lock(&nvsim.lock);
	gpu->open_count++;
	mutex_unlock(&nvsim.lock);
	return 0;
}

static void nvsim_rmops_close_gpu(NvU32 gpu_id, nvidia_modeset_stack_ptr sp)
{
	struct nvsim_gpu *gpu = nvsim_gpu_by_id(gpu_id);

	if (!gpu)
		return;
	mutex_lock(&nvsim.lock);
	nvsim_gpu_put(gpu);
	mutex_unlock(&nvsim.lock);
}

/*
 * rm_kernel_rmapi_op(): results go to each operation's status field.  An
 * unknown op has no status field to report in and is ignored, as in the
 * real driver.
 */
static void nvsim_rmops_op(nvidia_modeset_stack_ptr sp, void *ops_cmd)
{
	nvidia_kernel_rmapi_ops_t *ops = ops_cmd;
	const struct nvsim_call call = {
		.kernel = true, .kparams = true, .priv = NVSIM_PRIV_KERNEL,
	};

	switch (ops->op) {
	case NV01_FREE:
		nvsim_rm_free(&call, &ops->params.free);
		break;
	case NV01_ALLOC_MEMORY:
		nvsim_rm_alloc_memory(&call, &ops->params.allocMemory64);
		break;
	case NV04_ALLOC:
		if (nvsim_rmapi_nvos21) {
			/*
			 * Up to 570 the kernel entry's NV04_ALLOC is an NVOS21
			 * (nv-kernel-rmapi-ops.h): same members up to
			 * pAllocParms, then paramsSize and status.
			 */
			NVOS21_PARAMETERS *p21 = (void *)&ops->params.alloc;
			NVOS64_PARAMETERS p = {
				.hRoot = p21->hRoot,
				.hObjectParent = p21->hObjectParent,
				.hObjectNew = p21->hObjectNew,
				.hClass = p21->hClass,
				.pAllocParms = p21->pAllocParms,
				.paramsSize = p21->paramsSize,
			};

			nvsim_rm_alloc(&call, &p);
			p21->hObjectNew = p.hObjectNew;
			p21->status = p.status;
		} else {
			nvsim_rm_alloc(&call, &ops->params.alloc);
		}
		break;
	case NV04_VID_HEAP_CONTROL:
		if (ops->params.pVidHeapControl)
			nvsim_rm_vid_heap(&call, ops->params.pVidHeapControl);
		break;
	case NV04_MAP_MEMORY:
		/* A channel's USERD only (mmap.c). */
		nvsim_kernel_map(&call, &ops->params.mapMemory);
		break;
	case NV04_UNMAP_MEMORY:
		nvsim_kernel_unmap(&call, &ops->params.unmapMemory);
		break;
	case NV04_CONTROL:
		nvsim_rm_control(&call, &ops->params.control);
		break;
	case NV04_DUP_OBJECT:
		nvsim_rm_dup(&call, &ops->params.dupObject);
		break;
	default:
		break;
	}
}

/* Setting over a set table, or clearing a clear one, is refused. */
static int nvsim_rmops_set_callbacks(const nvidia_modeset_callbacks_t *cb)
{
	int ret = 0;

	mutex_lock(&nvsim.lock);
	if (!!nvsim.callbacks == !!cb)
		ret = -EINVAL;
	else
		nvsim.callbacks = cb;
	mutex_unlock(&nvsim.lock);
	return ret;
}

/**
 * nvidia_get_rm_ops - fill the RM operations table for a kernel module
 * @rm_ops: preset version_string to the driver version the caller was built
 *	for; on a mismatch it is pointed at the driver's own version
 *
 * Return: NV_OK, or NV_ERR_GENERIC on a version mismatch.
 */
NV_STATUS nvidia_get_rm_ops(nvidia_modeset_rm_ops_t *rm_ops)
{
	const nvidia_modeset_rm_ops_t local = {
		.version_string = nvsim_driver_version,
		.system_info = { .allow_write_combining = 0 },
		.alloc_stack = nvsim_rmops_alloc_stack,
		.free_stack = nvsim_rmops_free_stack,
		.enumerate_gpus = nvsim_rmops_enumerate_gpus,
		.open_gpu = nvsim_rmops_open_gpu,
		.close_gpu = nvsim_rmops_close_gpu,
		.op = nvsim_rmops_op,
		.set_callbacks = nvsim_rmops_set_callbacks,
	};

	if (!rm_ops->version_string ||
	    strcmp(rm_ops->version_string, nvsim_driver_version) != 0) {
		rm_ops->version_string = nvsim_driver_version;
		return NV_ERR_GENERIC;
	}
	*rm_ops = local;
	return NV_OK;
}
EXPORT_SYMBOL(nvidia_get_rm_ops);

void nvsim_rmops_exit(void)
{
	mutex_lock(&nvsim.lock);
	nvsim_free_kernel_clients();
	nvsim_kmaps_free();
	nvsim.callbacks = NULL;
	mutex_unlock(&nvsim.lock);
}
