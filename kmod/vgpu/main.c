// SPDX-License-Identifier: GPL-2.0
/*
 * main.c - module parameters, init and exit of vgpu.ko.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>

#include "vgpu.h"

bool vgpu_passthrough_unknown;
module_param_named(passthrough_unknown, vgpu_passthrough_unknown, bool, 0644);
MODULE_PARM_DESC(passthrough_unknown,
		 "forward escapes, classes and controls outside the allow-list (with a ratelimited log line) instead of refusing them");

char *vgpu_nvidia_dev_dir = "/dev";
module_param_named(nvidia_dev_dir, vgpu_nvidia_dev_dir, charp, 0444);
MODULE_PARM_DESC(nvidia_dev_dir, "directory of the real NVIDIA device nodes");

char *vgpu_nvidia_version = "";
module_param_named(nvidia_version, vgpu_nvidia_version, charp, 0444);
MODULE_PARM_DESC(nvidia_version,
		 "driver version for nvidia_get_rm_ops (empty: take the driver's own)");

struct workqueue_struct *vgpu_wq;

static int __init vgpu_init(void)
{
	int ret;

	vgpu_wq = alloc_workqueue("vgpu", 0, 0);
	if (!vgpu_wq)
		return -ENOMEM;
	ret = vgpu_call_init();
	if (ret)
		goto err_wq;
	ret = vgpu_rm_init();
	if (ret)
		goto err_call;
	ret = vgpu_memory_init();
	if (ret)
		goto err_rm;
	ret = vgpu_device_init();
	if (ret)
		goto err_mem;
	/* after the nodes' major exists, before slices can be made */
	ret = vgpu_devfs_init();
	if (ret)
		goto err_dev;
	ret = vgpu_netlink_init();
	if (ret)
		goto err_devfs;
	vgpu_debugfs_init();
	pr_info("loaded, major %u\n", vgpu_major);
	return 0;

err_devfs:
	vgpu_devfs_exit();
err_dev:
	vgpu_device_exit();
err_mem:
	vgpu_memory_exit();
err_rm:
	vgpu_rm_exit();
err_call:
	vgpu_call_exit();
err_wq:
	destroy_workqueue(vgpu_wq);
	return ret;
}

static void __exit vgpu_exit(void)
{
	vgpu_debugfs_exit();
	vgpu_netlink_exit();
	vgpu_slices_exit();
	vgpu_sched_exit();
	vgpu_devfs_exit();
	vgpu_device_exit();
	vgpu_memory_exit();
	vgpu_rm_exit();
	vgpu_call_exit();
	/*
	 * Work that pinned the module (a range's, a reaper's) dropped its
	 * reference as its last act: wait for it to return.
	 */
	destroy_workqueue(vgpu_wq);
}

module_init(vgpu_init);
module_exit(vgpu_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("vgpu: virtual NVIDIA devices with per-slice quotas");
