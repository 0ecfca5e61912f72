// SPDX-License-Identifier: GPL-2.0
/*
 * mmap.c - mmap of the slice's nodes: the VMA is handed to the real file
 * (vma_set_file) and the real driver's mmap runs, so its mapping rules
 * hold.  Two kinds of mapping are watched through a wrapper of the
 * driver's vm_ops, so that vgpu.ko sees the last close:
 *  - usermode (doorbell) regions, counted per slice (for the compute work);
 *  - UVM managed ranges, charged at their mapped length against the
 *    slice's first GPU (VGPU_UVM_COUNT) or refused (VGPU_UVM_REFUSE).
 * The wrapper holds a reference on the vgpu file, so vgpu.ko stays loaded
 * while the VMA exists; the reference is dropped (deferred fput) from the
 * last close.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/file.h>

#include "vgpu.h"

struct vgpu_vma {
	struct vm_operations_struct ops;        /* first: container_of */
	const struct vm_operations_struct *real_ops;
	refcount_t ref;                         /* VMAs sharing this wrapper */
	struct file *vfilp;                     /* ours, ref held */
	struct vgpu_charge *charge;             /* UVM range */
	bool usermode;
};

static struct vgpu_vma *vgpu_vma_of(struct vm_area_struct *vma)
{
	return container_of(vma->vm_ops, struct vgpu_vma, ops);
}

static void vgpu_vma_open(struct vm_area_struct *vma)
{
	struct vgpu_vma *w = vgpu_vma_of(vma);

	refcount_inc(&w->ref);
	if (w->real_ops && w->real_ops->open)
		w->real_ops->open(vma);
}

static void vgpu_vma_close(struct vm_area_struct *vma)
{
	struct vgpu_vma *w = vgpu_vma_of(vma);
	struct vgpu_file *vf = w->vfilp->private_data;

	if (w->real_ops && w->real_ops->close)
		w->real_ops->close(vma);
	if (!refcount_dec_and_test(&w->ref))
		return;
	if (w->charge) {
		atomic64_sub(w->charge->bytes, &vf->slice->uvm_mapped);
		vgpu_charge_put(w->charge);
	}
	if (w->usermode)
		atomic_dec(&vf->slice->usermode_maps);
	fput(w->vfilp);         /* deferred: we return before the module can go */
	kfree(w);
}

int vgpu_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct vgpu_file *vf = filp->private_data;
	struct vgpu_slice *s = vf->slice;
	struct file *real = vf->real;
	u64 len = vma->vm_end - vma->vm_start;
	struct vgpu_charge *charge = NULL;
	struct vgpu_vma *w = NULL;
	bool usermode = false;
	int ret;

	if (READ_ONCE(vf->poisoned))
		return -EIO;
	if (!real->f_op->mmap)
		return -ENODEV;

	if (vf->kind == VGPU_KIND_UVM) {
		if (READ_ONCE(s->uvm_policy) == VGPU_UVM_REFUSE)
			return -EPERM;
		if (!vgpu_reserve(s, 0, len)) {
			vgpu_refused(s, 0, len);
			return -ENOMEM;
		}
		charge = vgpu_charge_new(s, 0, len);
		if (!charge) {
			vgpu_unreserve(s, 0, len);
			return -ENOMEM;
		}
	} else if (vf->kind == VGPU_KIND_GPU) {
		usermode = xchg(&vf->usermode_pending, false);
	}
	if (charge || usermode) {
		w = kzalloc(sizeof(*w), GFP_KERNEL);
		if (!w) {
			ret = -ENOMEM;
			goto err;
		}
	}

	vma_set_file(vma, real);
	ret = real->f_op->mmap(real, vma);
	if (ret)
		goto err;
	if (w) {
		w->real_ops = vma->vm_ops;
		if (w->real_ops)
			w->ops = *w->real_ops;
		w->ops.open = vgpu_vma_open;
		w->ops.close = vgpu_vma_close;
		refcount_set(&w->ref, 1);
		w->vfilp = get_file(filp);
		w->charge = charge;
		w->usermode = usermode;
		vma->vm_ops = &w->ops;
		if (charge)
			atomic64_add(len, &s->uvm_mapped);
		if (usermode)
			atomic_inc(&s->usermode_maps);
	}
	return 0;
err:
	kfree(w);
	vgpu_charge_put(charge);
	return ret;
}
