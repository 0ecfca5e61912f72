// SPDX-License-Identifier: GPL-2.0
/*
 * uvm.c - the slice's nvidia-uvm node: plain integer commands (not
 * _IOC-encoded, the size is implied), an allow-list, and the translation of
 * rmCtrlFd / uvmFd.  The parameters are forwarded in the caller's memory
 * with the descriptor rewritten for the call and restored after it.
 *
 * NOT sound against a hostile sibling thread (docs/mediator.md, "Open
 * findings"): the UVM driver copies the parameters itself, after the
 * checks here, so a thread sharing the caller's memory can change hClient
 * (or hMemory) between the check and the driver's copy; and the temporary
 * descriptor of the real file sits in the caller's table for the whole
 * call, where a thread sharing that table can dup() it.
 */
#include <linux/uaccess.h>
#include <linux/slab.h>

#include "vgpu.h"

struct vgpu_uvm_cmd {
	u32 cmd;
	u32 size;
	s32 fd_off;             /* offset of an fd to translate, -1: none */
	unsigned int kinds;     /* what that fd must be */
	s32 client_off;         /* hClient to check against the file, -1: none */
};

#define CTL VGPU_KINDS(VGPU_KIND_CTL)
static const struct vgpu_uvm_cmd vgpu_uvm_cmds[] = {
	{ UVM_INITIALIZE, sizeof(UVM_INITIALIZE_PARAMS), -1, 0, -1 },
	{ UVM_DEINITIALIZE, 0, -1, 0, -1 },
	{ UVM_MM_INITIALIZE, sizeof(UVM_MM_INITIALIZE_PARAMS),
	  offsetof(UVM_MM_INITIALIZE_PARAMS, uvmFd), VGPU_KINDS(VGPU_KIND_UVM), -1 },
	{ UVM_REGISTER_GPU, sizeof(UVM_REGISTER_GPU_PARAMS),
	  offsetof(UVM_REGISTER_GPU_PARAMS, rmCtrlFd), CTL,
	  offsetof(UVM_REGISTER_GPU_PARAMS, hClient) },
	{ UVM_REGISTER_GPU_VASPACE, sizeof(UVM_REGISTER_GPU_VASPACE_PARAMS),
	  offsetof(UVM_REGISTER_GPU_VASPACE_PARAMS, rmCtrlFd), CTL,
	  offsetof(UVM_REGISTER_GPU_VASPACE_PARAMS, hClient) },
	{ UVM_MAP_EXTERNAL_ALLOCATION, sizeof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS),
	  offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmCtrlFd), CTL,
	  offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hClient) },
	{ UVM_FREE, sizeof(UVM_FREE_PARAMS), -1, 0, -1 },
	{ UVM_MIGRATE, sizeof(UVM_MIGRATE_PARAMS), -1, 0, -1 },
};
#undef CTL

static long vgpu_uvm_forward(struct vgpu_file *vf, unsigned int cmd,
			     unsigned long arg);

/*
 * After a successful MAP_EXTERNAL_ALLOCATION the driver holds the memory
 * until UVM_FREE of that base (or close): keep a reference on its charge
 * for as long, so that an RM_FREE of the handle does not return the quota.
 * The handles and base are those read before the call (@pre), not re-read
 * after it, where a racing thread could have swapped them for another
 * object's.  What the driver itself read may still differ (the copy is
 * the driver's: see the file comment).
 */
struct vgpu_uvm_ext_pre {
	u64 base;
	NvHandle hClient, hMemory;
};

static int vgpu_uvm_ext_read(void __user *u, struct vgpu_uvm_ext_pre *pre)
{
	UVM_MAP_EXTERNAL_ALLOCATION_PARAMS __user *p = u;

	if (get_user(pre->base, &p->base) || get_user(pre->hClient, &p->hClient) ||
	    get_user(pre->hMemory, &p->hMemory))
		return -EFAULT;
	return 0;
}

static void vgpu_uvm_ext_add(struct vgpu_file *vf, void __user *u,
			     const struct vgpu_uvm_ext_pre *pre)
{
	UVM_MAP_EXTERNAL_ALLOCATION_PARAMS __user *p = u;
	struct vgpu_charge *charge = NULL;
	struct vgpu_uvm_ext *e;
	NvHandle hc = pre->hClient, hm = pre->hMemory;
	u64 base = pre->base;
	NV_STATUS st;
	struct vgpu_obj *o;

	if (get_user(st, &p->rmStatus) || st != NV_OK)
		return;
	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return;
	rcu_read_lock();
	o = vgpu_obj_find(hc, hm);
	if (o && o->charge && o->client->slice == vf->slice &&
	    refcount_inc_not_zero(&o->charge->ref))
		charge = o->charge;
	rcu_read_unlock();
	if (!charge) {
		kfree(e);
		return;
	}
	e->base = base;
	e->charge = charge;
	mutex_lock(&vf->lock);
	list_add_tail(&e->node, &vf->uvm_ext);
	mutex_unlock(&vf->lock);
}

static long vgpu_uvm_free(struct vgpu_file *vf, unsigned int cmd,
			  unsigned long arg)
{
	UVM_FREE_PARAMS __user *p = (void __user *)arg;
	struct vgpu_uvm_ext *e, *tmp;
	NV_STATUS st;
	u64 base;
	long ret;

	if (get_user(base, &p->base))
		return -EFAULT;
	ret = vgpu_uvm_forward(vf, cmd, arg);
	if (ret || get_user(st, &p->rmStatus) || st != NV_OK)
		return ret;
	mutex_lock(&vf->lock);
	list_for_each_entry_safe(e, tmp, &vf->uvm_ext, node) {
		if (e->base == base) {
			list_del(&e->node);
			vgpu_charge_put(e->charge);
			kfree(e);
		}
	}
	mutex_unlock(&vf->lock);
	return ret;
}

void vgpu_uvm_release(struct vgpu_file *vf)
{
	struct vgpu_uvm_ext *e, *tmp;

	list_for_each_entry_safe(e, tmp, &vf->uvm_ext, node) {
		list_del(&e->node);
		vgpu_charge_put(e->charge);
		kfree(e);
	}
}

static long vgpu_uvm_forward(struct vgpu_file *vf, unsigned int cmd,
			     unsigned long arg)
{
	if (!vf->real->f_op->unlocked_ioctl)
		return -ENOTTY;
	return vf->real->f_op->unlocked_ioctl(vf->real, cmd, arg);
}

/**
 * vgpu_uvm_ioctl - errnos: -EPERM for a command outside the allow-list or
 * an fd of another slice; -EINVAL for a descriptor that is no vgpu file
 * (the driver's answer); -EFAULT for unreadable parameters.
 */
long vgpu_uvm_ioctl(struct vgpu_file *vf, unsigned int cmd, unsigned long arg)
{
	const struct vgpu_uvm_cmd *c = NULL;
	struct vgpu_uvm_ext_pre ext = {};
	struct vgpu_tmpfd t = { .fd = -1 };
	void __user *u = (void __user *)arg;
	struct vgpu_client *cl;
	NvHandle h;
	int fd, ret;
	size_t i;

	if (READ_ONCE(vf->poisoned))
		return -EIO;
	for (i = 0; i < ARRAY_SIZE(vgpu_uvm_cmds); i++)
		if (vgpu_uvm_cmds[i].cmd == cmd)
			c = &vgpu_uvm_cmds[i];
	if (!c) {
		if (!vgpu_passthrough_unknown)
			return -EPERM;
		pr_info_ratelimited("slice %u: UVM command %#x forwarded\n",
				    vf->slice->id, cmd);
		return vgpu_uvm_forward(vf, cmd, arg);
	}
	if (cmd == UVM_FREE)
		return vgpu_uvm_free(vf, cmd, arg);
	if (c->fd_off < 0)
		return vgpu_uvm_forward(vf, cmd, arg);

	if (get_user(fd, (int __user *)(u + c->fd_off)))
		return -EFAULT;
	if (cmd == UVM_MAP_EXTERNAL_ALLOCATION) {
		/*
		 * One read of hClient for the check and for the charge taken
		 * after the call: two reads would let a sibling make them differ.
		 */
		if (vgpu_uvm_ext_read(u, &ext))
			return -EFAULT;
		h = ext.hClient;
	} else if (c->client_off >= 0) {
		/* The client must be one the named control file owns. */
		if (get_user(h, (NvHandle __user *)(u + c->client_off)))
			return -EFAULT;
	}
	ret = vgpu_fd_xlate(vf, fd, c->kinds, &t);
	if (ret == -ENOENT || ret == -EBADF)
		return -EINVAL;
	if (ret)
		return ret;
	if (c->client_off >= 0) {
		cl = vgpu_client_lookup(h);
		if (!cl || cl->owner != t.vfilp->private_data) {
			if (cl)
				vgpu_client_put(cl);
			ret = -EPERM;
			goto out;
		}
		vgpu_client_put(cl);
	}
	if (put_user(t.fd, (int __user *)(u + c->fd_off))) {
		ret = -EFAULT;
		goto out;
	}
	ret = vgpu_uvm_forward(vf, cmd, arg);
	if (put_user(fd, (int __user *)(u + c->fd_off)))
		ret = -EFAULT;
	if (!ret && cmd == UVM_MAP_EXTERNAL_ALLOCATION)
		vgpu_uvm_ext_add(vf, u, &ext);
out:
	vgpu_fd_restore(&t);
	return ret;
}
