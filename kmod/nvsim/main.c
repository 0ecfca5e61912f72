// SPDX-License-Identifier: GPL-2.0
/*
 * nvsim - a simulated NVIDIA GPU driver with the real driver's user ABI.
 *
 * main.c holds only the module parameters and module init/exit.  Everything
 * else lives in one file per concern; see README.md.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/string.h>

#include "nvsim.h"

unsigned int nvsim_num_gpus = 2;
module_param_named(num_gpus, nvsim_num_gpus, uint, 0444);
MODULE_PARM_DESC(num_gpus, "number of simulated GPUs (1..8, default 2)");

unsigned long nvsim_fb_size = 16UL << 30;
module_param_named(fb_size, nvsim_fb_size, ulong, 0444);
MODULE_PARM_DESC(fb_size, "framebuffer bytes per GPU (default 16 GiB; accounting only)");

int nvsim_numa_node = -1;
module_param_named(numa_node, nvsim_numa_node, int, 0444);
MODULE_PARM_DESC(numa_node, "NUMA node of every GPU's memory (NV_ESC_NUMA_INFO), as on a coherent platform; -1 (default): none");

char *nvsim_gpu_name = "NVIDIA nvsim H100";
module_param_named(gpu_name, nvsim_gpu_name, charp, 0444);
MODULE_PARM_DESC(gpu_name, "GPU name (NV2080_CTRL_CMD_GPU_GET_NAME_STRING); it picks the chip: H100 (GH100, default) or RTX 3090 (GA102)");

char *nvsim_driver_version = "595.45.04";
module_param_named(driver_version, nvsim_driver_version, charp, 0444);
MODULE_PARM_DESC(driver_version, "driver version string (CHECK_VERSION_STR, nvidia_get_rm_ops)");

unsigned int nvsim_block_us = 100;
module_param_named(block_us, nvsim_block_us, uint, 0444);
MODULE_PARM_DESC(block_us, "engine block (tick) in microseconds (10..100000, default 100)");

bool nvsim_fb_backing;
module_param_named(fb_backing, nvsim_fb_backing, bool, 0444);
MODULE_PARM_DESC(fb_backing, "CPU mappings of device and system memory show the object's pages, shared by every mapping and the engine (1), or private zeroed pages per mmap (0, default)");

struct nvsim_state nvsim = {
	.lock = __MUTEX_INITIALIZER(nvsim.lock),
	.clients = XARRAY_INIT(nvsim.clients, 0),
	.pid_fb = LIST_HEAD_INIT(nvsim.pid_fb),
	.ctx_files = LIST_HEAD_INIT(nvsim.ctx_files),
	.kernel_clients = LIST_HEAD_INIT(nvsim.kernel_clients),
	.pid_busy = LIST_HEAD_INIT(nvsim.pid_busy),
	.kmaps = LIST_HEAD_INIT(nvsim.kmaps),
	.os_events = LIST_HEAD_INIT(nvsim.os_events),
};

static int nvsim_check_params(void)
{
	if (nvsim_num_gpus < 1 || nvsim_num_gpus > NVSIM_MAX_GPUS) {
		pr_err("num_gpus must be 1..%d\n", NVSIM_MAX_GPUS);
		return -EINVAL;
	}
	/* FB_GET_INFO reports KiB in a u32: keep the total below 4 TiB. */
	if (nvsim_fb_size == 0 || (nvsim_fb_size >> 10) > U32_MAX) {
		pr_err("fb_size must be 1 byte .. 4 TiB\n");
		return -EINVAL;
	}
	if (!nvsim_driver_version ||
	    strlen(nvsim_driver_version) >= NV_RM_API_VERSION_STRING_LENGTH) {
		pr_err("driver_version must be shorter than %d bytes\n",
		       NV_RM_API_VERSION_STRING_LENGTH);
		return -EINVAL;
	}
	if (nvsim_block_us < 10 || nvsim_block_us > 100000) {
		pr_err("block_us must be 10..100000\n");
		return -EINVAL;
	}
	if (!nvsim_gpu_name)
		nvsim_gpu_name = "";
	return 0;
}

static int __init nvsim_init(void)
{
	int ret;

	ret = nvsim_check_params();
	if (ret)
		return ret;
	ret = nvsim_release_init(nvsim_driver_version);
	if (ret)
		return ret;
	nvsim_arch_init(nvsim_gpu_name);

	ret = nvsim_gpus_init();
	if (ret)
		return ret;

	ret = nvsim_device_init();
	if (ret)
		goto err_gpus;

	ret = nvsim_uvm_init();
	if (ret)
		goto err_device;

	nvsim_debugfs_init();

	pr_info("%u simulated GPU(s) (%s), %lu bytes FB each, driver version %s\n",
		nvsim.num_gpus, nvsim_arch->chip, nvsim_fb_size,
		nvsim_driver_version);
	return 0;

err_device:
	nvsim_device_exit();
err_gpus:
	nvsim_gpus_exit();
	return ret;
}

static void __exit nvsim_exit(void)
{
	/*
	 * Every open file pins the module, so no user state is left; clients
	 * made by kernel callers through nvidia_get_rm_ops are ours to free.
	 */
	nvsim_debugfs_exit();
	nvsim_fault_exit();
	nvsim_uvm_exit();
	nvsim_device_exit();
	nvsim_rmops_exit();
	nvsim_check_idle();
	nvsim_gpus_exit();
}

module_init(nvsim_init);
module_exit(nvsim_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Simulated NVIDIA GPU driver (vgpu test bed)");
MODULE_VERSION("595.45.04");
MODULE_AUTHOR("vgpu project");
