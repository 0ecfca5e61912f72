// SPDX-License-Identifier: GPL-2.0
/*
 * device.c - character devices and per-file state.
 *
 * Major 195 as the real driver: minors 0..N-1 are /dev/nvidia0.., minor 255
 * is /dev/nvidiactl.  The device class gives devtmpfs the node names and mode
 * 0666.  /dev/nvidia-uvm (uvm.c) has a dynamic major and shares the class.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/file.h>
#include <linux/slab.h>

#include "nvsim.h"

#define NVSIM_NR_MINORS 256

static struct class *nvsim_cls;
static struct cdev nvsim_cdev;
static struct device *nvsim_ctl_dev;

struct class *nvsim_class(void)
{
	return nvsim_cls;
}

struct nvsim_file *nvsim_file_alloc(struct file *filp,
				    enum nvsim_file_kind kind)
{
	struct nvsim_file *nvfp;

	nvfp = kzalloc(sizeof(*nvfp), GFP_KERNEL_ACCOUNT);
	if (!nvfp)
		return NULL;
	nvfp->kind = kind;
	nvfp->filp = filp;
	INIT_LIST_HEAD(&nvfp->clients);
	INIT_LIST_HEAD(&nvfp->os_events);
	INIT_LIST_HEAD(&nvfp->ctx_node);
	INIT_LIST_HEAD(&nvfp->uvm_ext);
	INIT_LIST_HEAD(&nvfp->uvm_xranges);
	spin_lock_init(&nvfp->ctx_lock);
	return nvfp;
}

void nvsim_file_free(struct nvsim_file *nvfp)
{
	kfree(nvfp);
}

static int nvsim_open(struct inode *inode, struct file *filp)
{
	unsigned int minor = iminor(inode);
	struct nvsim_file *nvfp;
	int ret;

	/* Injected (fault.c): as nvidia_open() failing its allocations. */
	ret = nvsim_fault_errno(NVSIM_FK_OPEN, minor);
	if (ret)
		return ret;
	if (minor == NV_CONTROL_DEVICE_MINOR) {
		nvfp = nvsim_file_alloc(filp, NVSIM_FILE_CTL);
	} else if (minor < nvsim.num_gpus) {
		nvfp = nvsim_file_alloc(filp, NVSIM_FILE_GPU);
		if (nvfp)
			nvfp->gpu = &nvsim.gpus[minor];
	} else {
		return -ENODEV;
	}
	if (!nvfp)
		return -ENOMEM;

	filp->private_data = nvfp;
	return 0;
}

static int nvsim_release(struct inode *inode, struct file *filp)
{
	struct nvsim_file *nvfp = filp->private_data;
	struct file *ctl_filp;

	nvsim_file_release_rm(nvfp);

	/* Dropped last: the control file may hold the clients we used. */
	ctl_filp = nvfp->ctl_filp;
	nvsim_file_free(nvfp);
	if (ctl_filp)
		fput(ctl_filp);
	return 0;
}

const struct file_operations nvsim_fops = {
	.owner = THIS_MODULE,
	.open = nvsim_open,
	.release = nvsim_release,
	.unlocked_ioctl = nvsim_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = nvsim_mmap,
	.llseek = noop_llseek,
};

/*
 * Which kind of driver file @filp is, as the real driver tells:
 *  - control and GPU files by the inode's device number alone, never by
 *    f_op (nv_get_file_private, kernel-open/nvidia/nv.c: major 195, minor
 *    255 for the control node, a live minor for a GPU; the file's
 *    private_data is then taken as the driver's own state);
 *  - UVM files by f_op (uvm_file_is_nvidia_uvm, kernel-open/nvidia-uvm/uvm.c).
 * A file that passes the first test but was not opened by the driver
 * (vgpu.ko's proxies, fdxlate.c) lends the private_data of the real file it
 * stands for, which is what the real driver would take as well.
 */
static int nvsim_file_kind_of(struct file *filp)
{
	dev_t rdev = file_inode(filp)->i_rdev;

	if (filp->f_op == &nvsim_uvm_fops)
		return NVSIM_FILE_UVM;
	if (!S_ISCHR(file_inode(filp)->i_mode) ||
	    MAJOR(rdev) != NV_MAJOR_DEVICE_NUMBER)
		return -1;
	if (MINOR(rdev) == NV_CONTROL_DEVICE_MINOR)
		return NVSIM_FILE_CTL;
	if (MINOR(rdev) < nvsim.num_gpus)
		return NVSIM_FILE_GPU;
	return -1;
}

/**
 * nvsim_fget - resolve a file descriptor named inside ioctl parameters
 * @fd: descriptor in the calling task's table
 * @kinds: mask of NVSIM_KIND() the file must be one of
 * @nvfp: returns the file's nvsim state
 *
 * The real driver resolves such descriptors in the caller's table and
 * insists on one of its own files of the right kind (nvsim_file_kind_of);
 * a pipe or /dev/null is refused the same way.
 *
 * Return: a referenced file (drop it with fput() outside nvsim.lock), or NULL.
 */
struct file *nvsim_fget(int fd, unsigned int kinds, struct nvsim_file **nvfp)
{
	struct file *filp;
	struct nvsim_file *f;
	int kind;

	if (fd < 0)
		return NULL;
	filp = fget(fd);
	if (!filp)
		return NULL;
	kind = nvsim_file_kind_of(filp);
	if (kind < 0 || !(kinds & NVSIM_KIND(kind)))
		goto fail;
	f = filp->private_data;
	if (!f || f->kind != kind)
		goto fail;
	*nvfp = f;
	return filp;

fail:
	fput(filp);
	return NULL;
}

static char *nvsim_devnode(struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = 0666;
	return NULL;
}

static void nvsim_destroy_gpu_nodes(unsigned int n)
{
	while (n--) {
		device_destroy(nvsim_cls, MKDEV(NV_MAJOR_DEVICE_NUMBER, n));
		nvsim.gpus[n].dev = NULL;
	}
}

int nvsim_device_init(void)
{
	dev_t base = MKDEV(NV_MAJOR_DEVICE_NUMBER, 0);
	unsigned int i;
	int ret;

	ret = register_chrdev_region(base, NVSIM_NR_MINORS, "nvidia");
	if (ret) {
		pr_err("major %d is taken (is nvidia.ko loaded?)\n",
		       NV_MAJOR_DEVICE_NUMBER);
		return ret;
	}

	nvsim_cls = class_create(THIS_MODULE, "nvsim");
	if (IS_ERR(nvsim_cls)) {
		ret = PTR_ERR(nvsim_cls);
		goto err_region;
	}
	nvsim_cls->devnode = nvsim_devnode;

	cdev_init(&nvsim_cdev, &nvsim_fops);
	nvsim_cdev.owner = THIS_MODULE;
	ret = cdev_add(&nvsim_cdev, base, NVSIM_NR_MINORS);
	if (ret)
		goto err_class;

	nvsim_ctl_dev = device_create(nvsim_cls, NULL,
				      MKDEV(NV_MAJOR_DEVICE_NUMBER,
					    NV_CONTROL_DEVICE_MINOR),
				      NULL, "nvidiactl");
	if (IS_ERR(nvsim_ctl_dev)) {
		ret = PTR_ERR(nvsim_ctl_dev);
		goto err_cdev;
	}

	for (i = 0; i < nvsim.num_gpus; i++) {
		struct device *dev;

		dev = device_create(nvsim_cls, NULL,
				    MKDEV(NV_MAJOR_DEVICE_NUMBER, i), NULL,
				    "nvidia%u", i);
		if (IS_ERR(dev)) {
			ret = PTR_ERR(dev);
			goto err_gpus;
		}
		nvsim.gpus[i].dev = dev;
	}
	return 0;

err_gpus:
	nvsim_destroy_gpu_nodes(i);
	device_destroy(nvsim_cls, MKDEV(NV_MAJOR_DEVICE_NUMBER,
					NV_CONTROL_DEVICE_MINOR));
err_cdev:
	cdev_del(&nvsim_cdev);
err_class:
	class_destroy(nvsim_cls);
err_region:
	unregister_chrdev_region(base, NVSIM_NR_MINORS);
	return ret;
}

void nvsim_device_exit(void)
{
	nvsim_destroy_gpu_nodes(nvsim.num_gpus);
	device_destroy(nvsim_cls, MKDEV(NV_MAJOR_DEVICE_NUMBER,
					NV_CONTROL_DEVICE_MINOR));
	cdev_del(&nvsim_cdev);
	class_destroy(nvsim_cls);
	unregister_chrdev_region(MKDEV(NV_MAJOR_DEVICE_NUMBER, 0),
				 NVSIM_NR_MINORS);
}
