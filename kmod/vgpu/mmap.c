// SPDX-License-Identifier: GPL-2.0
/*
 * mmap.c - mmap of the slice's nodes: the VMA is handed to the real file
 * (vma_set_file) and the real driver's mmap runs, so its mapping rules
 * hold.  UVM managed ranges are charged at their mapped length against the
 * slice's first GPU (VGPU_UVM_COUNT, watched by managed.c without touching
 * the driver's vm_ops) or refused (VGPU_UVM_REFUSE).  Usermode (doorbell)
 * regions of the GPU nodes are watched through a wrapper of the driver's
 * vm_ops, so that vgpu.ko sees the last close (nvidia.ko never compares its
 * VMAs' vm_ops: kernel-open/nvidia/nv-mmap.c), and counted per slice.
 * The wrapper holds a reference on the vgpu file, so vgpu.ko stays loaded
 * while the VMA exists; the reference is dropped (deferred fput) from the
 * last close.
 *
 * Doorbell gating (docs/compute.md 2, layer VGPU_SCHED_L_DOORBELL): the
 * usermode wrapper adds pfn_mkwrite, so the kernel keeps the VMA's
 * vm_page_prot read-only (vma_wants_writenotify) and every PTE the
 * driver's fault handler inserts is read-only: the first write after a
 * refault traps.  Pausing a slice zaps its usermode PTEs
 * (vgpu_doorbell_protect); a doorbell write then refaults read-only (TIME_0/1
 * stay readable) and traps in pfn_mkwrite, which records the activity,
 * kicks the scheduler and sleeps (killable) until the slice runs again.
 * Each VMA (splits and forks included, through open) is listed per slice
 * GPU with its mm, so the scheduler can zap it; it only try-locks that
 * mm's mmap_lock (a trapped writer of the same mm sleeps holding it for
 * reading) and retries at its next decision if that fails.
 * Assumption about the real driver: its fault handler inserts with the
 * VMA's vm_page_prot (vmf_insert_pfn / io_remap_pfn_range), as nvsim's
 * does; a handler that forces write access would defeat the trap.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/file.h>
#include <linux/sched/mm.h>
#include <linux/mmap_lock.h>
#include <linux/ktime.h>
#include <linux/sched/clock.h>

#include "vgpu.h"

/* usermode VMAs zapped by vgpu_doorbell_protect, and its time, since load (debugfs sched) */
atomic64_t vgpu_nr_zaps = ATOMIC64_INIT(0);
atomic64_t vgpu_zap_ns = ATOMIC64_INIT(0);

struct vgpu_vma {
	struct vm_operations_struct ops;        /* first: container_of */
	const struct vm_operations_struct *real_ops;
	refcount_t ref;                         /* VMAs sharing this wrapper */
	struct file *vfilp;                     /* ours, ref held */
	bool usermode;
	struct vgpu_gpu *g;                     /* usermode: the slice GPU */
};

/* One usermode VMA, listed on its slice GPU (umap_lock). */
struct vgpu_umap {
	struct list_head node;
	struct vm_area_struct *vma;
	struct mm_struct *mm;                   /* mmgrab()bed */
};

static struct vgpu_vma *vgpu_vma_of(struct vm_area_struct *vma)
{
	return container_of(vma->vm_ops, struct vgpu_vma, ops);
}

static void vgpu_umap_add(struct vgpu_gpu *g, struct vm_area_struct *vma)
{
	struct vgpu_umap *u = kzalloc(sizeof(*u), GFP_KERNEL);

	/* Without an entry the VMA is only never zapped: TSG layer still holds. */
	if (!u)
		return;
	u->vma = vma;
	u->mm = vma->vm_mm;
	mmgrab(u->mm);
	mutex_lock(&g->umap_lock);
	list_add_tail(&u->node, &g->umaps);
	mutex_unlock(&g->umap_lock);
}

static void vgpu_umap_del(struct vgpu_gpu *g, struct vm_area_struct *vma)
{
	struct vgpu_umap *u, *found = NULL;

	mutex_lock(&g->umap_lock);
	list_for_each_entry(u, &g->umaps, node) {
		if (u->vma == vma) {
			list_del(&u->node);
			found = u;
			break;
		}
	}
	mutex_unlock(&g->umap_lock);
	if (found) {
		mmdrop(found->mm);
		kfree(found);
	}
}

/**
 * vgpu_doorbell_protect - write-protect a slice GPU's usermode mappings
 *
 * Zaps the PTEs of every usermode VMA; refaults insert read-only.  A VMA
 * whose mm cannot be locked at once (or is being unmapped) is left for the
 * scheduler's next decision (zap_pending).
 */
void vgpu_doorbell_protect(struct vgpu_gpu *g)
{
	u64 t0 = local_clock();
	struct vgpu_umap *u;

	mutex_lock(&g->umap_lock);
	list_for_each_entry(u, &g->umaps, node) {
		struct vm_area_struct *vma = u->vma;

		if (!mmget_not_zero(u->mm))
			continue;               /* exiting: nothing to ring with */
		if (mmap_read_trylock(u->mm)) {
			/* Still linked (not mid-munmap): safe to zap. */
			if (find_vma(u->mm, vma->vm_start) == vma) {
				zap_vma_ptes(vma, vma->vm_start,
					     vma->vm_end - vma->vm_start);
				atomic64_inc(&vgpu_nr_zaps);
			}
			mmap_read_unlock(u->mm);
		} else {
			atomic_set(&g->zap_pending, 1);
		}
		/* Not mmput: a last reference would close the VMA, which takes umap_lock. */
		mmput_async(u->mm);
	}
	mutex_unlock(&g->umap_lock);
	atomic64_add(local_clock() - t0, &vgpu_zap_ns);
}

/*
 * A write to a read-only usermode PTE: the doorbell (or TIME, which is
 * read-only in practice).  While the slice is paused with the doorbell
 * layer, the writer waits for its slot.
 */
static vm_fault_t vgpu_vma_pfn_mkwrite(struct vm_fault *vmf)
{
	struct vgpu_vma *w = vgpu_vma_of(vmf->vma);
	struct vgpu_gpu *g = w->g;
	int gen, ret;

	WRITE_ONCE(g->last_ring_ns, ktime_get_ns());
	if (READ_ONCE(g->paused) &&
	    (READ_ONCE(g->paused_layers) & VGPU_SCHED_L_DOORBELL)) {
		atomic64_inc(&g->doorbell_traps);
		gen = atomic_read(&g->run_gen);
		atomic_inc(&g->waiters);
		atomic_set(&g->rang, 1);
		vgpu_sched_ring(g);
		ret = wait_event_killable(g->run_wq,
					  atomic_read(&g->run_gen) != gen ||
					  !READ_ONCE(g->paused) ||
					  READ_ONCE(g->slice->removed));
		atomic_dec(&g->waiters);
		if (ret || READ_ONCE(g->slice->removed))
			return VM_FAULT_SIGBUS;
	} else {
		atomic_set(&g->rang, 1);
	}
	if (w->real_ops && w->real_ops->pfn_mkwrite)
		return w->real_ops->pfn_mkwrite(vmf);
	return 0;
}

static void vgpu_vma_open(struct vm_area_struct *vma)
{
	struct vgpu_vma *w = vgpu_vma_of(vma);

	refcount_inc(&w->ref);
	if (w->g)
		vgpu_umap_add(w->g, vma);
	if (w->real_ops && w->real_ops->open)
		w->real_ops->open(vma);
}

static void vgpu_vma_close(struct vm_area_struct *vma)
{
	struct vgpu_vma *w = vgpu_vma_of(vma);
	struct vgpu_file *vf = w->vfilp->private_data;

	if (w->real_ops && w->real_ops->close)
		w->real_ops->close(vma);
	if (w->g)
		vgpu_umap_del(w->g, vma);
	if (!refcount_dec_and_test(&w->ref))
		return;
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
	struct vgpu_range *range = NULL;
	struct vgpu_vma *w = NULL;
	bool usermode = false;
	int ret;

	if (vgpu_file_refused(vf))
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
		range = vgpu_range_new(vma);
		if (IS_ERR(range)) {
			ret = PTR_ERR(range);
			range = NULL;
			goto err;
		}
	} else if (vf->kind == VGPU_KIND_GPU) {
		usermode = xchg(&vf->usermode_pending, false);
	}
	if (usermode) {
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
	if (range) {
		vgpu_range_arm(range, filp, vma, charge);
		return 0;
	}
	if (w) {
		w->real_ops = vma->vm_ops;
		if (w->real_ops)
			w->ops = *w->real_ops;
		w->ops.open = vgpu_vma_open;
		w->ops.close = vgpu_vma_close;
		refcount_set(&w->ref, 1);
		w->vfilp = get_file(filp);
		w->usermode = usermode;
		if (usermode && vf->gpu < s->nr_gpus) {
			w->g = &s->gpus[vf->gpu];
			w->ops.pfn_mkwrite = vgpu_vma_pfn_mkwrite;
		}
		vma->vm_ops = &w->ops;
		atomic_inc(&s->usermode_maps);
		if (w->g) {
			/*
			 * None of the driver's writable PTEs left; refaults
			 * are read-only (mmap_region's vma_set_page_prot makes
			 * vm_page_prot read-only for a shared writable VMA with
			 * pfn_mkwrite, right after this returns): the first
			 * doorbell write is an activity event.
			 */
			if (vma->vm_flags & VM_PFNMAP)
				zap_vma_ptes(vma, vma->vm_start, len);
			vgpu_umap_add(w->g, vma);
		}
	}
	return 0;
err:
	/*
	 * The driver keeps its mapping context after a failed mmap, so the
	 * caller may mmap again: the usermode mark goes back, or the retry
	 * would map the doorbell without gating (tests/vm/test_faults.py).
	 */
	if (usermode)
		WRITE_ONCE(vf->usermode_pending, true);
	if (range)
		vgpu_range_cancel(range);
	kfree(w);
	vgpu_charge_put(charge);
	return ret;
}
