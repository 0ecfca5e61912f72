// SPDX-License-Identifier: GPL-2.0
/*
 * fdxlate.c - file descriptors named inside parameters, through proxies.
 *
 * The driver resolves such a descriptor in the caller's table and takes any
 * file whose inode carries one of its device numbers (major 195; minor 255
 * for the control node, a live minor for a GPU) as its own, using that
 * file's private_data as its state: nv_get_file_private,
 * kernel-open/nvidia/nv.c.  It never looks at f_op.  A container names one
 * of its vgpu files; the driver must get the real file behind it, but the
 * real file may never sit in the container's table, where a thread sharing
 * the table, or a process allowed to pidfd_getfd() from it, would keep an
 * unmediated descriptor of the real node.
 *
 * What sits there for the length of the call is a proxy: a file opened on
 * the real node (so its inode has the driver's device number) whose
 * private_data is the real file's and whose file_operations are vgpu.ko's
 * and do nothing -- no ioctl (-ENOTTY), no mmap (-ENODEV), no read, no
 * write.  A thread that dup()s it holds a descriptor it can only close, or
 * name again inside parameters, where the driver takes it for the real file
 * of the same slice, exactly as it takes the vgpu file vgpu.ko translated.
 * The proxy holds a reference on the real file, so the private_data it
 * lends outlives every user of the proxy; the driver's own open of the proxy
 * gave it private state of its own, which its release hands back to the
 * driver's release.
 *
 * The UVM driver identifies its files by f_op (uvm_file_is_nvidia_uvm,
 * kernel-open/nvidia-uvm/uvm.c): no proxy can stand for a UVM file, so
 * vgpu.ko refuses UVM_MM_INITIALIZE, the one command that names one
 * (docs/mediator.md).
 */
#include <linux/module.h>
#include <linux/file.h>
#include <linux/fdtable.h>
#include <linux/hashtable.h>
#include <linux/slab.h>

#include "vgpu.h"

struct vgpu_proxy {
	struct hlist_node node;
	struct file *proxy;
	struct file *real;                      /* ref held */
	void *own;                              /* the driver's state for the proxy */
	const struct file_operations *real_fops;
};

static DEFINE_SPINLOCK(vgpu_proxies_lock);
static DEFINE_HASHTABLE(vgpu_proxies, 6);
atomic_t vgpu_nr_proxies = ATOMIC_INIT(0);

static int vgpu_proxy_release(struct inode *inode, struct file *f)
{
	struct vgpu_proxy *p, *found = NULL;

	spin_lock(&vgpu_proxies_lock);
	hash_for_each_possible(vgpu_proxies, p, node, (unsigned long)f) {
		if (p->proxy == f) {
			hash_del(&p->node);
			found = p;
			break;
		}
	}
	spin_unlock(&vgpu_proxies_lock);
	if (WARN_ON_ONCE(!found))
		return 0;
	/* The driver's release of the state its open made for this file. */
	f->private_data = found->own;
	if (found->real_fops->release)
		found->real_fops->release(inode, f);
	fput(found->real);
	kfree(found);
	atomic_dec(&vgpu_nr_proxies);
	return 0;
}

static const struct file_operations vgpu_proxy_fops = {
	.owner = THIS_MODULE,
	.release = vgpu_proxy_release,
	.llseek = no_llseek,
};

/* A proxy of @real (a real control or GPU file); the caller owns the ref. */
static struct file *vgpu_proxy_open(struct file *real)
{
	struct vgpu_proxy *p;
	struct file *f;

	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p)
		return ERR_PTR(-ENOMEM);
	f = dentry_open(&real->f_path, O_RDWR, current_cred());
	if (IS_ERR(f)) {
		kfree(p);
		return f;
	}
	p->proxy = f;
	p->real = get_file(real);
	p->real_fops = real->f_op;
	p->own = f->private_data;
	spin_lock(&vgpu_proxies_lock);
	hash_add(vgpu_proxies, &p->node, (unsigned long)f);
	spin_unlock(&vgpu_proxies_lock);
	atomic_inc(&vgpu_nr_proxies);
	/* From here on the driver sees the real file's state through it. */
	f->private_data = real->private_data;
	/* The proxy's f_op holds vgpu.ko (we run from one of its files). */
	__module_get(THIS_MODULE);
	replace_fops(f, &vgpu_proxy_fops);
	return f;
}

/**
 * vgpu_fd_xlate - stand a proxy of a vgpu file's real file in for a call
 * @vf: the calling file (its slice bounds what may be named)
 * @fd: the caller's descriptor
 * @kinds: VGPU_KINDS() mask of acceptable node kinds (control or GPU)
 * @t: out: the proxy's temporary descriptor and a reference on the vgpu file
 *
 * Return: 0; -ENOENT if @fd is not a vgpu file (the caller decides);
 * -EBADF for a bad descriptor; -EPERM for a file of another slice or kind,
 * or a poisoned one; or an error from opening or installing the proxy.
 */
int vgpu_fd_xlate(struct vgpu_file *vf, int fd, unsigned int kinds,
		  struct vgpu_tmpfd *t)
{
	struct vgpu_file *other;
	struct file *f, *proxy;
	int tmp;

	t->fd = -1;
	t->vfilp = NULL;
	if (fd < 0)
		return -EBADF;
	f = fget(fd);
	if (!f)
		return -EBADF;
	if (!vgpu_is_vgpu_file(f)) {
		fput(f);
		return -ENOENT;
	}
	other = f->private_data;
	if (other->slice != vf->slice || other->kind == VGPU_KIND_UVM ||
	    !(kinds & VGPU_KINDS(other->kind)) || vgpu_file_refused(other)) {
		fput(f);
		return -EPERM;
	}
	proxy = vgpu_proxy_open(other->real);
	if (IS_ERR(proxy)) {
		fput(f);
		return PTR_ERR(proxy);
	}
	tmp = get_unused_fd_flags(O_CLOEXEC);
	if (tmp < 0) {
		fput(proxy);
		fput(f);
		return tmp;
	}
	fd_install(tmp, proxy);
	t->fd = tmp;
	t->vfilp = f;
	return 0;
}

void vgpu_fd_restore(struct vgpu_tmpfd *t)
{
	if (t->fd >= 0)
		close_fd(t->fd);
	if (t->vfilp)
		fput(t->vfilp);
	t->fd = -1;
	t->vfilp = NULL;
}
