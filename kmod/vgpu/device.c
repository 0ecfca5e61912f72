// SPDX-License-Identifier: GPL-2.0
/*
 * device.c - the virtual nodes: one chrdev region and cdev over all minors,
 * class "vgpu" (devtmpfs names vgpu/<slice-id>/<node>), open/release, and
 * the forwarding of every file operation to the real driver's file.
 */
#include <linux/module.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/file.h>
#include <linux/slab.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/fs.h>
#include <linux/mount.h>

#include "vgpu.h"

unsigned int vgpu_major;
static dev_t vgpu_devt;
static struct cdev vgpu_cdev;
static struct class *vgpu_class;

/* The access an open of the real node with filp's flags would ask for. */
static int vgpu_open_mask(const struct file *filp)
{
	int mask = 0;

	if (filp->f_mode & FMODE_READ)
		mask |= MAY_READ;
	if (filp->f_mode & FMODE_WRITE)
		mask |= MAY_WRITE;
	return mask;
}

static int vgpu_open(struct inode *inode, struct file *filp)
{
	unsigned int minor = iminor(inode), off = minor % VGPU_MINORS_PER_SLICE;
	struct vgpu_slice *s;
	struct vgpu_file *vf;
	const struct path *path;
	struct file *real;
	int ret;

	s = vgpu_slice_get_by_minor(minor);
	if (IS_ERR_OR_NULL(s))
		return s ? PTR_ERR(s) : -ENODEV;
	vf = kzalloc(sizeof(*vf), GFP_KERNEL);
	if (!vf) {
		ret = -ENOMEM;
		goto err_put;
	}
	mutex_init(&vf->lock);
	mutex_init(&vf->call_lock);
	INIT_LIST_HEAD(&vf->clients);
	INIT_LIST_HEAD(&vf->uvm_ext);
	INIT_LIST_HEAD(&vf->uvm_held);
	mutex_init(&vf->uvm_lock);
	INIT_LIST_HEAD(&vf->uvm_ranges);
	spin_lock_init(&vf->ranges_lock);
	INIT_LIST_HEAD(&vf->ranges);
	vf->slice = s;
	vf->id = vgpu_trace_file_id();
	vf->filp = filp;
	if (off == VGPU_MINOR_CTL) {
		vf->kind = VGPU_KIND_CTL;
		path = &s->ctl_path;
	} else if (off == VGPU_MINOR_UVM) {
		vf->kind = VGPU_KIND_UVM;
		path = &s->uvm_path;
	} else if (off - VGPU_MINOR_GPU0 < s->nr_gpus) {
		vf->kind = VGPU_KIND_GPU;
		vf->gpu = off - VGPU_MINOR_GPU0;
		path = &s->gpus[vf->gpu].path;
	} else {
		ret = -ENODEV;
		goto err_free;
	}
	if (!path->dentry) {
		ret = -ENODEV;
		goto err_free;
	}
	/*
	 * The slice's own path, opened with the opener's credentials.
	 * dentry_open() makes no permission check, so make the file-mode one
	 * an open of the real node would make (mode, owner, ACLs, with the
	 * capability overrides): a caller who may not open /dev/nvidiactl may
	 * not open it through a slice either.  Not inode_permission(): that
	 * also asks the opener's device cgroup about the real node's numbers,
	 * which a container's rules never allow (they name vgpu's major); the
	 * slice's own cgroup binding (vgpu_slice_get_by_minor) stands in for
	 * them.  LSM hooks on the real node are not consulted (no exported
	 * entry); the opener's LSM checks ran on the vgpu node it opened.
	 */
	ret = generic_permission(mnt_user_ns(path->mnt), d_inode(path->dentry),
				 vgpu_open_mask(filp));
	if (ret)
		goto err_free;
	real = dentry_open(path, filp->f_flags & ~(O_CREAT | O_EXCL | O_NOCTTY |
						   O_TRUNC), current_cred());
	if (IS_ERR(real)) {
		ret = PTR_ERR(real);
		goto err_free;
	}
	vf->real = real;
	vf->tgid = get_pid(task_tgid(current));
	ret = vgpu_slice_add_pid(s, vf->tgid);
	if (ret)
		goto err_real;
	filp->private_data = vf;
	atomic_inc(&s->open_files);
	atomic_inc(&vgpu_nr_files);
	vgpu_event(s, VGPU_EVENT_DEVICE_OPENED,
		   vf->kind == VGPU_KIND_GPU ? vf->gpu : U32_MAX, 0);
	if (vgpu_tracing(s))
		vgpu_trace_file_op(vf, VGPU_TRACE_OPEN, filp->f_flags);
	return 0;

err_real:
	put_pid(vf->tgid);
	fput(real);
err_free:
	kfree(vf);
err_put:
	vgpu_slice_put(s);
	return ret;
}

/*
 * Release.  The control file's clients are freed explicitly through the
 * kernel RM entry point first (so the driver has released their FB when
 * the charges return), then the real file is dropped.  A UVM file with
 * charges hands the real file to a reaper (uvm.c), which returns them after
 * the driver's release; __fput_sync() cannot be used here: it BUG()s
 * outside kernel threads.
 */
static int vgpu_release(struct inode *inode, struct file *filp)
{
	struct vgpu_file *vf = filp->private_data;
	struct vgpu_slice *s = vf->slice;

	if (vgpu_tracing(s))
		vgpu_trace_file_op(vf, VGPU_TRACE_CLOSE, 0);
	if (vf->kind == VGPU_KIND_CTL)
		vgpu_file_free_clients(vf);
	if (vf->kind == VGPU_KIND_UVM ? !vgpu_uvm_release(vf) :
	    vf->kind != VGPU_KIND_CTL || !vgpu_ipc_release(vf))
		fput(vf->real);
	if (vf->ctl_filp)
		fput(vf->ctl_filp);
	vgpu_slice_del_pid(s, vf->tgid);
	put_pid(vf->tgid);
	atomic_dec(&vgpu_nr_files);
	if (atomic_dec_and_test(&s->open_files))
		vgpu_event(s, VGPU_EVENT_SLICE_EMPTIED, U32_MAX, 0);
	kfree(vf);
	vgpu_slice_put(s);
	vgpu_call_drop_idle();
	return 0;
}

static long vgpu_ioctl_traced(struct vgpu_file *vf, unsigned int cmd,
			      unsigned long arg)
{
	struct vgpu_trace_call tc;
	long ret;

	vgpu_trace_ioctl_begin(vf, cmd, arg, &tc);
	if (vf->kind == VGPU_KIND_UVM)
		ret = vgpu_uvm_ioctl(vf, cmd, arg);
	else
		ret = vgpu_ctl_ioctl(vf, cmd, arg);
	vgpu_trace_ioctl_end(vf, &tc, ret);
	return ret;
}

static long vgpu_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct vgpu_file *vf = filp->private_data;

	if (unlikely(vgpu_tracing(vf->slice)))
		return vgpu_ioctl_traced(vf, cmd, arg);
	if (vf->kind == VGPU_KIND_UVM)
		return vgpu_uvm_ioctl(vf, cmd, arg);
	return vgpu_ctl_ioctl(vf, cmd, arg);
}

/* 32-bit callers are refused: their layouts are not mediated. */
static long vgpu_compat_ioctl(struct file *filp, unsigned int cmd,
			      unsigned long arg)
{
	return -ENOTTY;
}

static ssize_t vgpu_read(struct file *filp, char __user *buf, size_t len,
			 loff_t *ppos)
{
	struct vgpu_file *vf = filp->private_data;

	if (!vf->real->f_op->read)
		return -EINVAL;
	return vf->real->f_op->read(vf->real, buf, len, ppos);
}

static ssize_t vgpu_write(struct file *filp, const char __user *buf,
			  size_t len, loff_t *ppos)
{
	struct vgpu_file *vf = filp->private_data;

	if (!vf->real->f_op->write)
		return -EINVAL;
	return vf->real->f_op->write(vf->real, buf, len, ppos);
}

static __poll_t vgpu_poll(struct file *filp, poll_table *wait)
{
	struct vgpu_file *vf = filp->private_data;

	if (!vf->real->f_op->poll)
		return DEFAULT_POLLMASK;
	return vf->real->f_op->poll(vf->real, wait);
}

static loff_t vgpu_llseek(struct file *filp, loff_t off, int whence)
{
	struct vgpu_file *vf = filp->private_data;

	if (!vf->real->f_op->llseek)
		return noop_llseek(filp, off, whence);
	return vf->real->f_op->llseek(vf->real, off, whence);
}

static int vgpu_flush(struct file *filp, fl_owner_t id)
{
	struct vgpu_file *vf = filp->private_data;

	if (!vf->real->f_op->flush)
		return 0;
	return vf->real->f_op->flush(vf->real, id);
}

static int vgpu_fasync(int fd, struct file *filp, int on)
{
	struct vgpu_file *vf = filp->private_data;

	if (!vf->real->f_op->fasync)
		return 0;
	return vf->real->f_op->fasync(fd, vf->real, on);
}

/* The area as asked for: vgpu_mmap() may move vm_pgoff to the real file's. */
static int vgpu_mmap_traced(struct file *filp, struct vm_area_struct *vma)
{
	struct vgpu_file *vf = filp->private_data;
	unsigned long start = vma->vm_start, len = vma->vm_end - vma->vm_start;
	unsigned long pgoff = vma->vm_pgoff, flags = vma->vm_flags;
	int ret = vgpu_mmap(filp, vma);

	if (unlikely(vgpu_tracing(vf->slice)))
		vgpu_trace_mmap(vf, start, len, pgoff, flags, ret);
	return ret;
}

static const struct file_operations vgpu_fops = {
	.owner = THIS_MODULE,
	.open = vgpu_open,
	.release = vgpu_release,
	.unlocked_ioctl = vgpu_ioctl,
	.compat_ioctl = vgpu_compat_ioctl,
	.mmap = vgpu_mmap_traced,
	.read = vgpu_read,
	.write = vgpu_write,
	.poll = vgpu_poll,
	.llseek = vgpu_llseek,
	.flush = vgpu_flush,
	.fasync = vgpu_fasync,
};

bool vgpu_is_vgpu_file(struct file *f)
{
	return f->f_op == &vgpu_fops;
}

/*
 * Root only on the host: containers get their nodes through vgpufs bind
 * mounts, and host users have no business with another tenant's slice.
 */
static char *vgpu_devnode(struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = 0600;
	return NULL;
}

int vgpu_device_add_nodes(struct vgpu_slice *s)
{
	struct device *d;
	u32 i;

	d = device_create(vgpu_class, NULL, MKDEV(vgpu_major, s->base + VGPU_MINOR_CTL),
			  NULL, "vgpu!%u!nvidiactl", s->id);
	if (IS_ERR(d))
		goto err;
	s->devs[VGPU_MINOR_CTL] = d;
	if (s->uvm_path.dentry) {
		d = device_create(vgpu_class, NULL,
				  MKDEV(vgpu_major, s->base + VGPU_MINOR_UVM), NULL,
				  "vgpu!%u!nvidia-uvm", s->id);
		if (IS_ERR(d))
			goto err;
		s->devs[VGPU_MINOR_UVM] = d;
	}
	for (i = 0; i < s->nr_gpus; i++) {
		d = device_create(vgpu_class, NULL,
				  MKDEV(vgpu_major, s->base + VGPU_MINOR_GPU0 + i),
				  NULL, "vgpu!%u!nvidia%u", s->id, i);
		if (IS_ERR(d))
			goto err;
		s->devs[VGPU_MINOR_GPU0 + i] = d;
	}
	return 0;
err:
	vgpu_device_del_nodes(s);
	return PTR_ERR(d);
}

void vgpu_device_del_nodes(struct vgpu_slice *s)
{
	u32 i;

	for (i = 0; i < VGPU_MINORS_PER_SLICE; i++) {
		if (s->devs[i]) {
			device_destroy(vgpu_class, MKDEV(vgpu_major, s->base + i));
			s->devs[i] = NULL;
		}
	}
}

int vgpu_device_init(void)
{
	int ret;

	ret = alloc_chrdev_region(&vgpu_devt, 0, VGPU_NR_MINORS, "vgpu");
	if (ret)
		return ret;
	vgpu_major = MAJOR(vgpu_devt);
	cdev_init(&vgpu_cdev, &vgpu_fops);
	vgpu_cdev.owner = THIS_MODULE;
	ret = cdev_add(&vgpu_cdev, vgpu_devt, VGPU_NR_MINORS);
	if (ret)
		goto err_region;
	vgpu_class = class_create(THIS_MODULE, "vgpu");
	if (IS_ERR(vgpu_class)) {
		ret = PTR_ERR(vgpu_class);
		goto err_cdev;
	}
	vgpu_class->devnode = vgpu_devnode;
	return 0;
err_cdev:
	cdev_del(&vgpu_cdev);
err_region:
	unregister_chrdev_region(vgpu_devt, VGPU_NR_MINORS);
	return ret;
}

void vgpu_device_exit(void)
{
	class_destroy(vgpu_class);
	cdev_del(&vgpu_cdev);
	unregister_chrdev_region(vgpu_devt, VGPU_NR_MINORS);
}
