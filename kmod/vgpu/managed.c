// SPDX-License-Identifier: GPL-2.0
/*
 * managed.c - the charge of UVM managed ranges.
 *
 * A managed range (mmap of the UVM node with offset == address) is charged
 * at its mapped length against the slice's first GPU, from mmap until its
 * pages are unmapped.  vgpu.ko does not wrap the UVM driver's vm_ops: the
 * driver recognises its VMAs by vm_ops pointer (kernel-open/nvidia-uvm/
 * uvm.c, uvm_vma_is_managed), and on fork or mremap its ->open swaps the
 * new VMA's ops for its disabled ones (uvm_vm_open_managed,
 * uvm_disable_vma), so a wrapper both hid the VMA from those checks and
 * never saw the moved VMA's close (the charge, the file and the module
 * pinned for ever).  Instead an mmu_interval_notifier on the caller's mm
 * covers the range, one bit per page charged:
 *
 *  - MMU_NOTIFY_UNMAP (munmap, mremap's move or shrink, a MAP_FIXED mapping
 *    over it) returns the pages it covers at once, so that an allocation
 *    right after a munmap has the quota back.  The driver frees the range
 *    in the same call, a little later (its ->close): until that call
 *    returns, the slice may hold that much more than its quota.
 *  - MMU_NOTIFY_RELEASE (the mm exits) keeps what is still charged until
 *    the real UVM file is released (uvm.c, vgpu_uvm_release): in
 *    multi-process sharing mode the driver keeps an exiting process's
 *    ranges as zombies until the VA space dies (uvm_vm_close_managed).
 *  - An unmap that is undone (mremap moves the page tables back when it
 *    fails half-way, after the UNMAP of the old range) is charged again:
 *    after each UNMAP a work item takes the mm's mmap_lock for reading, so
 *    runs after the unmapping call, and charges every page of the range
 *    that a VMA still maps with the driver's managed ops (the vm_ops
 *    pointer its mmap set) on this real file, unless another range of the
 *    file (a new mmap at the same address) charges it.  Over the quota if
 *    need be: the memory is there.
 *
 * A disabled VMA (a fork's copy, or the driver's own failure paths) holds
 * no memory and is charged nothing; the range's pages stay charged until
 * they are unmapped (conservative).  Each range holds a reference on the
 * vgpu file (so on the module); the notifier cannot be removed from its own
 * callback, so removal and freeing run from vgpu_wq, which module exit
 * destroys (waiting for the last one).
 */
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/slab.h>
#include <linux/file.h>
#include <linux/sched/mm.h>
#include <linux/workqueue.h>

#include "vgpu.h"

atomic_t vgpu_nr_ranges = ATOMIC_INIT(0);

struct vgpu_range {
	struct mmu_interval_notifier mni;
	struct work_struct work;
	struct list_head node;          /* vgpu_file.ranges, ranges_lock */
	spinlock_t lock;                /* the fields below */
	unsigned long start, npages;
	unsigned long *charged;         /* bitmap: pages charged now */
	unsigned long nr_charged;
	bool released;                  /* the mm exited: the charge is kept */
	bool done;                      /* notifier removed (or being removed) */
	struct vgpu_charge *charge;     /* ->bytes follows nr_charged */
	struct vgpu_uvm_ext *held;      /* preallocated for vgpu_uvm_hold */
	const struct vm_operations_struct *ops; /* the driver's: identity only */
	struct file *vfilp;             /* ours, a reference */
};

static struct vgpu_file *vgpu_range_vf(struct vgpu_range *r)
{
	return r->vfilp->private_data;
}

/* Pages [first, last) of the range: cleared, their count returned.  r->lock. */
static unsigned long vgpu_range_clear(struct vgpu_range *r, unsigned long first,
				      unsigned long last)
{
	unsigned long i, n = 0;

	for (i = find_next_bit(r->charged, last, first); i < last;
	     i = find_next_bit(r->charged, last, i + 1)) {
		__clear_bit(i, r->charged);
		n++;
	}
	return n;
}

/*
 * Any context, the OOM reaper's non-blocking one included (which never
 * unmaps a shared mapping, but the notifier may see it): no sleeping.
 */
static bool vgpu_range_invalidate(struct mmu_interval_notifier *mni,
				  const struct mmu_notifier_range *range,
				  unsigned long cur_seq)
{
	struct vgpu_range *r = container_of(mni, struct vgpu_range, mni);
	struct vgpu_slice *s;
	unsigned long end, first, last, n = 0;
	bool queue = false;

	if (range->event != MMU_NOTIFY_UNMAP &&
	    range->event != MMU_NOTIFY_RELEASE)
		return true;
	spin_lock(&r->lock);
	if (r->released || r->done)
		goto out;
	if (range->event == MMU_NOTIFY_RELEASE) {
		r->released = true;
		queue = true;
		goto out;
	}
	end = r->start + (r->npages << PAGE_SHIFT);
	if (range->end <= r->start || range->start >= end)
		goto out;
	first = (max(range->start, r->start) - r->start) >> PAGE_SHIFT;
	last = (min(range->end, end) - r->start + PAGE_SIZE - 1) >> PAGE_SHIFT;
	n = vgpu_range_clear(r, first, last);
	if (n) {
		s = r->charge->slice;
		r->nr_charged -= n;
		r->charge->bytes -= (u64)n << PAGE_SHIFT;
		vgpu_unreserve(s, 0, (u64)n << PAGE_SHIFT);
		atomic64_sub((u64)n << PAGE_SHIFT, &s->uvm_mapped);
		queue = true;
	}
out:
	spin_unlock(&r->lock);
	if (queue)
		queue_work(vgpu_wq, &r->work);
	return true;
}

static const struct mmu_interval_notifier_ops vgpu_range_ops = {
	.invalidate = vgpu_range_invalidate,
};

/* Is page i of r charged by another range of the same file?  ranges_lock. */
static bool vgpu_range_other(struct vgpu_file *vf, struct vgpu_range *r,
			     unsigned long addr)
{
	struct vgpu_range *o;
	bool hit = false;

	list_for_each_entry(o, &vf->ranges, node) {
		if (o == r || addr < o->start ||
		    addr >= o->start + (o->npages << PAGE_SHIFT))
			continue;
		spin_lock(&o->lock);
		hit = test_bit((addr - o->start) >> PAGE_SHIFT, o->charged);
		spin_unlock(&o->lock);
		if (hit)
			break;
	}
	return hit;
}

/* mmap_lock held for reading: the VMAs found are live, none is mid-unmap. */
static void vgpu_range_recharge(struct vgpu_range *r, struct mm_struct *mm)
{
	struct vgpu_file *vf = vgpu_range_vf(r);
	struct vgpu_slice *s = vf->slice;
	unsigned long end = r->start + (r->npages << PAGE_SHIFT);
	struct vm_area_struct *vma;
	unsigned long a, i, n = 0;

	for (vma = find_vma(mm, r->start); vma && vma->vm_start < end;
	     vma = find_vma(mm, vma->vm_end)) {
		if (vma->vm_file != vf->real || vma->vm_ops != r->ops)
			continue;
		spin_lock(&vf->ranges_lock);
		for (a = max(vma->vm_start, r->start);
		     a < min(vma->vm_end, end); a += PAGE_SIZE) {
			i = (a - r->start) >> PAGE_SHIFT;
			if (vgpu_range_other(vf, r, a))
				continue;
			spin_lock(&r->lock);
			if (!r->released && !__test_and_set_bit(i, r->charged)) {
				r->nr_charged++;
				r->charge->bytes += PAGE_SIZE;
				n++;
			}
			spin_unlock(&r->lock);
		}
		spin_unlock(&vf->ranges_lock);
	}
	if (!n)
		return;
	atomic64_add((u64)n << PAGE_SHIFT, &s->gpus[0].used);
	atomic64_add((u64)n << PAGE_SHIFT, &s->uvm_mapped);
	pr_info_ratelimited("slice %u: %lu pages of a UVM managed range still mapped after their unmap: charged again\n",
			    s->id, n);
}

static void vgpu_range_free(struct vgpu_range *r)
{
	struct vgpu_file *vf = vgpu_range_vf(r);

	spin_lock(&vf->ranges_lock);
	list_del(&r->node);
	spin_unlock(&vf->ranges_lock);
	if (r->released && r->charge->bytes) {
		/* Kept until the real UVM file's release. */
		vgpu_uvm_hold(vf, r->held, r->charge);
	} else {
		kfree(r->held);
		vgpu_charge_put(r->charge);
	}
	kvfree(r->charged);
	atomic_dec(&vgpu_nr_ranges);
	fput(r->vfilp);         /* deferred: vgpu_wq's destroy waits for us */
	kfree(r);
}

static void vgpu_range_work(struct work_struct *work)
{
	struct vgpu_range *r = container_of(work, struct vgpu_range, work);
	struct mm_struct *mm = r->mni.mm;
	bool finish;

	spin_lock(&r->lock);
	finish = r->done;
	spin_unlock(&r->lock);
	if (!finish) {
		if (!READ_ONCE(r->released) && mmget_not_zero(mm)) {
			mmap_read_lock(mm);
			vgpu_range_recharge(r, mm);
			mmap_read_unlock(mm);
			mmput(mm);
		}
		spin_lock(&r->lock);
		finish = r->released || !r->nr_charged;
		if (finish)
			r->done = true;
		spin_unlock(&r->lock);
		if (!finish)
			return;
		/* Waits out a running callback; none runs after it. */
		mmu_interval_notifier_remove(&r->mni);
	}
	/* A callback queued us again before done: that run frees. */
	if (work_pending(&r->work))
		return;
	vgpu_range_free(r);
}

/**
 * vgpu_range_new - watch a managed range about to be mapped
 * @vma: the new VMA, before the driver's mmap (mmap_lock held for writing)
 *
 * Returns the range, not yet armed (vgpu_range_arm once the driver's mmap
 * succeeded, vgpu_range_cancel if it failed), or an ERR_PTR.  The notifier
 * goes in before the driver's mmap so that nothing can fail after it (the
 * kernel's mmap_region does not close a VMA whose mmap succeeded and then
 * fails: the driver's range would stay uncharged).
 */
struct vgpu_range *vgpu_range_new(struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	struct vgpu_range *r;
	int ret;

	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r)
		return ERR_PTR(-ENOMEM);
	r->npages = len >> PAGE_SHIFT;
	r->charged = kvcalloc(BITS_TO_LONGS(r->npages), sizeof(long),
			      GFP_KERNEL_ACCOUNT);
	/* Kept for vgpu_uvm_hold: nothing is allocated on the way out. */
	r->held = kzalloc(sizeof(*r->held), GFP_KERNEL_ACCOUNT);
	if (!r->charged || !r->held) {
		ret = -ENOMEM;
		goto err;
	}
	spin_lock_init(&r->lock);
	INIT_WORK(&r->work, vgpu_range_work);
	INIT_LIST_HEAD(&r->node);
	r->start = vma->vm_start;
	r->done = true;         /* callbacks ignore it until armed */
	ret = mmu_interval_notifier_insert_locked(&r->mni, vma->vm_mm,
						  r->start, len,
						  &vgpu_range_ops);
	if (ret)
		goto err;
	return r;
err:
	kfree(r->held);
	kvfree(r->charged);
	kfree(r);
	return ERR_PTR(ret);
}

/**
 * vgpu_range_arm - the driver mapped the range: charge every page
 * @filp: our file (a reference is taken)
 * @vma: the VMA, its vm_ops now the driver's
 * @charge: the reserved charge of the VMA's length, taken over
 */
void vgpu_range_arm(struct vgpu_range *r, struct file *filp,
		    struct vm_area_struct *vma, struct vgpu_charge *charge)
{
	struct vgpu_file *vf = filp->private_data;

	bitmap_fill(r->charged, r->npages);
	r->nr_charged = r->npages;
	r->charge = charge;
	r->ops = vma->vm_ops;
	r->vfilp = get_file(filp);
	atomic64_add((u64)r->npages << PAGE_SHIFT, &vf->slice->uvm_mapped);
	atomic_inc(&vgpu_nr_ranges);
	spin_lock(&vf->ranges_lock);
	list_add_tail(&r->node, &vf->ranges);
	spin_unlock(&vf->ranges_lock);
	spin_lock(&r->lock);
	r->done = false;
	spin_unlock(&r->lock);
}

/* The driver's mmap failed: the caller still owns the charge. */
void vgpu_range_cancel(struct vgpu_range *r)
{
	mmu_interval_notifier_remove(&r->mni);
	kfree(r->held);
	kvfree(r->charged);
	kfree(r);
}
