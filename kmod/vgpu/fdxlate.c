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
 * What sits there for the length of the call is a proxy: a file whose
 * private_data is the real file's and whose file_operations are vgpu.ko's
 * and do nothing -- no ioctl (-ENOTTY), no mmap (-ENODEV), no read, no
 * write.  A thread that dup()s it holds a descriptor it can only close, or
 * name again inside parameters, where the driver takes it for the real file
 * of the same slice, exactly as it takes the vgpu file vgpu.ko translated.
 * The proxy holds a reference on the real file, so the private_data it
 * lends outlives every user of the proxy (REGISTER_FD keeps the proxy
 * itself until the registering file's release: escape.c, ctl_nvfp_priv).
 *
 * The proxy's inode is a private one, on vgpu.ko's own pseudo filesystem
 * (call.c's), carrying the real node's device number and nothing else of
 * it: a character device of mode 0, owned by root, whose setattr refuses
 * everything.  Opened on the host's /dev/nvidia* node itself, the proxy
 * handed that inode to the sibling that dup()s it: fchmod needs only
 * ownership (a container's root without a user namespace owns the host
 * node, capabilities or not), so chmod 0666 opened the unmediated driver to
 * every host user and chmod 000 made every tenant's vgpu_open fail, as did
 * fchown, futimens and ACLs.  Here fchmod, fchown and futimens fail with
 * EPERM and change nothing (the inode is vgpu.ko's, the host node never
 * reached); fsetxattr, and with it every ACL, fails for want of xattr
 * handlers (EOPNOTSUPP).  Reopening it through /proc/<pid>/fd/N reaches its
 * i_fop, whose open refuses (ENXIO): a chrdev_open there would open the
 * real driver's file.  /proc/<pid>/fd names it "[vgpu-proxy]".  The driver
 * never opens it: nothing of the driver's own is made for the proxy, and
 * its release drops only the reference on the real file.
 */
#include <linux/module.h>
#include <linux/file.h>
#include <linux/fdtable.h>
#include <linux/fs.h>
#include <linux/mount.h>
#include <linux/pseudo_fs.h>

#include "vgpu.h"

atomic_t vgpu_nr_proxies = ATOMIC_INIT(0);

static int vgpu_proxy_release(struct inode *inode, struct file *f)
{
	/* The real file, whose reference the proxy held (i_private). */
	fput(inode->i_private);
	atomic_dec(&vgpu_nr_proxies);
	return 0;
}

static const struct file_operations vgpu_proxy_fops = {
	.owner = THIS_MODULE,
	.release = vgpu_proxy_release,
	.llseek = no_llseek,
};

/*
 * The inode's i_fop: what an open of the inode by path runs, which only
 * /proc/<pid>/fd/N can reach.  As a character device's def_chr_fops it
 * would open the real driver by device number: refused.
 */
static int vgpu_proxy_reopen(struct inode *inode, struct file *f)
{
	return -ENXIO;
}

static const struct file_operations vgpu_proxy_inode_fops = {
	.owner = THIS_MODULE,
	.open = vgpu_proxy_reopen,
};

/* chmod, chown, utimes and truncate of the proxy: nothing may change. */
static int vgpu_proxy_setattr(struct user_namespace *mnt_userns,
			      struct dentry *dentry, struct iattr *attr)
{
	return -EPERM;
}

static const struct inode_operations vgpu_proxy_iops = {
	.setattr = vgpu_proxy_setattr,
};

/* A proxy of @real (a real control or GPU file); the caller owns the ref. */
static struct file *vgpu_proxy_open(struct file *real)
{
	struct vfsmount *mnt = vgpu_pseudo_mnt();
	struct inode *inode;
	struct file *f;

	inode = alloc_anon_inode(mnt->mnt_sb);
	if (IS_ERR(inode))
		return ERR_CAST(inode);
	/*
	 * What the driver reads (nv_get_file_private, kernel-open/nvidia/nv.c:
	 * the inode's i_rdev, then private_data): the real node's device
	 * number.  Not init_special_inode(): its i_fop would be def_chr_fops.
	 */
	inode->i_mode = S_IFCHR;
	inode->i_rdev = file_inode(real)->i_rdev;
	inode->i_uid = GLOBAL_ROOT_UID;
	inode->i_gid = GLOBAL_ROOT_GID;
	inode->i_op = &vgpu_proxy_iops;
	inode->i_fop = &vgpu_proxy_inode_fops;
	inode->i_private = get_file(real);
	/* __fput drops the fops' module reference: we run from one of our files. */
	__module_get(THIS_MODULE);
	f = alloc_file_pseudo(inode, mnt, "[vgpu-proxy]", O_RDWR,
			      &vgpu_proxy_fops);
	if (IS_ERR(f)) {
		module_put(THIS_MODULE);
		fput(real);
		iput(inode);
		return f;
	}
	atomic_inc(&vgpu_nr_proxies);
	/* From here on the driver sees the real file's state through it. */
	f->private_data = real->private_data;
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
