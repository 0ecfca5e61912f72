// SPDX-License-Identifier: GPL-2.0
/*
 * call.c - driver calls at the caller's own privilege, on parameters that no
 * other task can change between vgpu.ko's decision and the driver's read.
 *
 * The real driver judges a call by where its parameters come from: user
 * memory gets USER or USER_ROOT (entry_points.c, XlateUserModeArgsToSecInfo:
 * the client-ownership check, per-process accounting, privileged channels,
 * reserved heap and page-offlining attrs all follow from it); the kernel
 * entry point gets KERNEL.  A call vgpu.ko decides on is therefore made
 * through the real file's own ioctl, in the caller's context, on user
 * memory.  nvidia_ioctl (kernel-open/nvidia/nv.c) copies that memory in once
 * at entry (the XFER header, then the parameters) and out once at the end;
 * the UVM driver likewise (UVM_ROUTE_CMD_*, uvm.c).
 *
 * The call page is that user memory: pages of vgpu.ko's own, mapped into the
 * caller's mm for one call as a shared mapping of an anonymous-inode file,
 * and filled through the kernel mapping (no user write of vgpu.ko's own).
 * A task sharing the mm cannot change it:
 *  - user PTEs are read-only: the VMA has pfn_mkwrite, so vm_page_prot is
 *    write-protected (vma_wants_writenotify) and every write traps;
 *    pfn_mkwrite grants it only to the calling task while the driver call
 *    runs (the driver's copy_to_user of results), anyone else gets SIGBUS;
 *  - get_user_pages cannot take its pages (so neither process_vm_writev,
 *    /proc/<pid>/mem, O_DIRECT nor the driver's own pinning can reach
 *    them): the VMA is VM_MIXEDMAP and its PTEs are special
 *    (vmf_insert_mixed on an architecture with pte_special), which GUP
 *    refuses (follow_page_pte: no struct page behind a special PTE);
 *  - it is neither VM_IO nor VM_PFNMAP, so the driver's fallback for host
 *    memory registration (escape.c, RmCreateOsDescriptor: when pinning
 *    fails, os_lookup_user_io_memory takes any VM_IO/VM_PFNMAP mapping at
 *    the address as GPU-accessible memory, recording bare physical
 *    addresses) refuses it too: the GPU is never given vgpu.ko's pages;
 *  - mprotect, mremap and splitting are refused; VM_DONTCOPY keeps it out of
 *    a fork; VM_DONTEXPAND out of a merge;
 *  - munmap, or a MAP_FIXED mapping over it, cannot be refused: it closes
 *    the VMA, and that marks the call broken.  A broken call may have read
 *    someone else's memory at that address; vgpu_call_nv/uvm report it and
 *    poison the file, and the caller undoes (vgpu_undo, mediate.c).  Calls
 *    acting for one client owner run one at a time (vgpu_call_lock), so
 *    only the first broken one reaches the driver.
 *
 * What a sibling can still do, and why it is harmless: read the page (the
 * parameters are its own process's); and write it *after* the driver's
 * first write of results made the PTE writable -- so results read back are
 * the caller's to forge: every result vgpu.ko acts on is either checked
 * against the driver's own state (an allocation's existence is probed when
 * its status says it failed; the handle of every object vgpu.ko tracks is
 * one vgpu.ko chose or the caller passed in, never one read back) or only
 * deceives the caller itself (docs/mediator.md, "The call page").
 */
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/mmap_lock.h>
#include <linux/mm.h>
#include <linux/mman.h>
#include <linux/module.h>
#include <linux/mount.h>
#include <linux/pfn_t.h>
#include <linux/pseudo_fs.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/uaccess.h>
#include <linux/ioctl.h>

#include "vgpu.h"

/*
 * A special PTE is what keeps GUP off the call page; without pte_special,
 * vmf_insert_mixed would map a valid page as a normal, pinnable one.
 */
#ifndef CONFIG_ARCH_HAS_PTE_SPECIAL
#error "vgpu.ko's call pages need CONFIG_ARCH_HAS_PTE_SPECIAL (x86-64, arm64 have it)"
#endif

struct vgpu_call {
	struct kref ref;        /* the caller's, and the VMA's while mapped */
	void *kbase;            /* vmalloc'd: zeroed, page aligned, charged */
	size_t len;             /* the VMA's: a multiple of PAGE_SIZE */
	unsigned long ubase;    /* the VMA's start */
	unsigned int nslots;    /* VGPU_CALL_RING (pooled) or 1 */
	unsigned int next;      /* next slot, unwritten since the write-protect */
	/* The slot of the call in flight: */
	void *kaddr;
	unsigned long uaddr;
	size_t slot_off;
	size_t slot_len;
	struct address_space *mapping;  /* of its own inode: write-protected through it */
	struct mm_struct *mm;   /* mapped there; not referenced (the VMA is) */
	struct task_struct *owner;      /* the task calling through it, NULL idle */
	struct hlist_node idle; /* vgpu_idle, while idle; vgpu_idle_lock */
	bool on_idle;           /* vgpu_idle_lock */
	bool mapped;            /* the one mmap happened */
	bool in_call;           /* the driver runs: the owner may write */
	bool ending;            /* vgpu.ko's own munmap */
	bool broken;            /* the VMA went (or moved) */
};

/*
 * Reuse.  Mapping and unmapping a page per call costs more than the call
 * (an mmap_lock write section each, a VMA, a TLB flush), so a pooled call
 * page stays mapped in its mm after the call, idle, for the next call of
 * any thread of that mm (at most VGPU_CALL_IDLE_MAX per mm).
 *
 * A pooled call page is a ring of VGPU_CALL_RING slots of
 * VGPU_CALL_POOL_LEN, each used for one call and not again until every
 * slot's PTEs were write-protected together.  A slot's PTE is made
 * writable only by pfn_mkwrite, for the calling task, while the driver
 * runs, and only within that call's slot (vgpu_call_writer), so a slot not
 * used since the last write-protect is read-only to every task of the mm;
 * a used one may be writable (the driver's copy-out made it so) and a
 * sibling may write it: harmless, nothing reads it until it is reused,
 * after the write-protect.  That is wp_shared_mapping_range on the page's
 * own inode: every writable PTE of the ring made read-only in place under
 * its PTE lock, then one TLB flush of the range on every CPU of the mm
 * before it returns; none at all if no PTE was writable (a ring whose
 * driver calls wrote nothing).  No fault can make a PTE writable again
 * meanwhile: pfn_mkwrite grants nothing between calls (in_call is clear),
 * and a grant it made during the last call was set, under the PTE lock,
 * before that call's driver returned.
 * The PTEs stay present and special (pte_wrprotect keeps the bit), so GUP
 * still finds no page and the driver's reads still take no fault.  One
 * write-protect, and with a multi-threaded mm one TLB shootdown, per
 * VGPU_CALL_RING calls instead of per call (bench/README.md, "The call
 * page's cost").  The page is off the idle list, so no other call uses
 * it meanwhile.  An idle page whose VMA goes (munmap, MAP_FIXED over it,
 * exit) leaves the list in .close.
 */
/*
 * wp_shared_mapping_range exists where CONFIG_MAPPING_DIRTY_HELPERS does (a
 * symbol only drivers select: vmwgfx on x86, which Debian's and most
 * distributions' kernels build).  Without it the ring is zapped and
 * refilled under the mmap lock instead (vgpu_call_rearm): the same
 * guarantee, a zap, a TLB flush and 16 inserts dearer.
 */
#define VGPU_CALL_POOL_LEN      PAGE_SIZE
#define VGPU_CALL_RING          16
#define VGPU_CALL_IDLE_MAX      8
static DEFINE_SPINLOCK(vgpu_idle_lock);
static DEFINE_HASHTABLE(vgpu_idle, 6);

static void vgpu_call_free(struct kref *ref)
{
	struct vgpu_call *c = container_of(ref, struct vgpu_call, ref);

	vfree(c->kbase);
	kfree(c);
}

/* A special PTE (no struct page for GUP to take), read-only. */
static vm_fault_t vgpu_call_insert(struct vm_area_struct *vma,
				   unsigned long addr, void *kaddr)
{
	return vmf_insert_mixed(vma, addr,
				pfn_to_pfn_t(vmalloc_to_pfn(kaddr)));
}

/*
 * The calling task while the driver runs, at an offset in its call's slot:
 * a pointer the caller passed through to the driver that names another
 * slot of the ring makes no slot writable but its own.
 */
static bool vgpu_call_writer(struct vgpu_call *c, unsigned long off)
{
	return current == c->owner && READ_ONCE(c->in_call) &&
	       off - c->slot_off < c->slot_len;
}

static vm_fault_t vgpu_call_fault(struct vm_fault *vmf)
{
	struct vgpu_call *c = vmf->vma->vm_private_data;
	unsigned long off = vmf->pgoff << PAGE_SHIFT;

	if (off >= c->len)
		return VM_FAULT_SIGBUS;
	if ((vmf->flags & FAULT_FLAG_WRITE) && !vgpu_call_writer(c, off))
		return VM_FAULT_SIGBUS;
	/* Read-only (write-notify); a write refaults into pfn_mkwrite. */
	return vgpu_call_insert(vmf->vma, vmf->address, c->kbase + off);
}

static vm_fault_t vgpu_call_pfn_mkwrite(struct vm_fault *vmf)
{
	struct vgpu_call *c = vmf->vma->vm_private_data;

	return vgpu_call_writer(c, vmf->pgoff << PAGE_SHIFT) ? 0 : VM_FAULT_SIGBUS;
}

/* A copy of the VMA (mremap's new one): the original is leaving. */
static void vgpu_call_vm_open(struct vm_area_struct *vma)
{
	struct vgpu_call *c = vma->vm_private_data;

	WRITE_ONCE(c->broken, true);
	kref_get(&c->ref);
}

static void vgpu_call_vm_close(struct vm_area_struct *vma)
{
	struct vgpu_call *c = vma->vm_private_data;

	/*
	 * Under the lock: vgpu_call_keep() tests broken under it, so a page
	 * whose VMA is going is never put on the idle list after this.
	 */
	spin_lock(&vgpu_idle_lock);
	if (!READ_ONCE(c->ending))
		WRITE_ONCE(c->broken, true);
	if (c->on_idle) {
		hash_del(&c->idle);
		c->on_idle = false;
	}
	spin_unlock(&vgpu_idle_lock);
	kref_put(&c->ref, vgpu_call_free);
}

static int vgpu_call_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static int vgpu_call_mremap(struct vm_area_struct *vma)
{
	struct vgpu_call *c = vma->vm_private_data;

	WRITE_ONCE(c->broken, true);
	return -EINVAL;
}

static int vgpu_call_mprotect(struct vm_area_struct *vma, unsigned long start,
			      unsigned long end, unsigned long newflags)
{
	return -EACCES;
}

static const struct vm_operations_struct vgpu_call_vm_ops = {
	.open = vgpu_call_vm_open,
	.close = vgpu_call_vm_close,
	.may_split = vgpu_call_may_split,
	.mremap = vgpu_call_mremap,
	.mprotect = vgpu_call_mprotect,
	.fault = vgpu_call_fault,
	.pfn_mkwrite = vgpu_call_pfn_mkwrite,
};

static int vgpu_call_mmap(struct file *f, struct vm_area_struct *vma)
{
	struct vgpu_call *c = f->private_data;

	/* One mapping, whole, by vgpu.ko (nobody else holds this file). */
	if (c->mapped || vma->vm_pgoff || vma->vm_end - vma->vm_start != c->len ||
	    !(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	c->mapped = true;
	/* Not VM_IO nor VM_PFNMAP: see the top of this file. */
	vma->vm_flags |= VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
	vma->vm_flags &= ~(VM_MAYEXEC | VM_EXEC);
	vma->vm_ops = &vgpu_call_vm_ops;
	vma->vm_private_data = c;
	kref_get(&c->ref);
	return 0;
}

static const struct file_operations vgpu_call_fops = {
	.owner = THIS_MODULE,
	.mmap = vgpu_call_mmap,
};

/*
 * Call page files live on a pseudo filesystem of vgpu.ko's own, one inode
 * each (anon_inode_getfile would share one inode, and with it one mapping,
 * among every anonymous-inode file of the system, io_uring's rings
 * included), so that wp_shared_mapping_range on a call page's mapping
 * touches that call page's VMA and nothing else.
 */
#define VGPU_CALLFS_MAGIC       0x76677063      /* "vgpc" */
static struct vfsmount *vgpu_call_mnt;

/*
 * A file's path is its own name, as an anon inode's: /proc/<pid>/maps names
 * a call page "[vgpu-call]"; /proc/<pid>/fd names a proxy "[vgpu-proxy]"
 * (fdxlate.c), not the host's node.
 */
static char *vgpu_call_dname(struct dentry *dentry, char *buf, int buflen)
{
	const char *name = dentry->d_name.name;
	int len = strlen(name) + 1;

	if (buflen < len)
		return ERR_PTR(-ENAMETOOLONG);
	buf += buflen - len;
	memcpy(buf, name, len);
	return buf;
}

static const struct dentry_operations vgpu_call_dops = {
	.d_dname = vgpu_call_dname,
};

static int vgpu_callfs_init_fs_context(struct fs_context *fc)
{
	struct pseudo_fs_context *ctx = init_pseudo(fc, VGPU_CALLFS_MAGIC);

	if (!ctx)
		return -ENOMEM;
	ctx->dops = &vgpu_call_dops;
	return 0;
}

/* Never registered: kern_mount only.  No owner: unmounted at exit. */
static struct file_system_type vgpu_callfs_type = {
	.name = "vgpu-call",
	.init_fs_context = vgpu_callfs_init_fs_context,
	.kill_sb = kill_anon_super,
};

static struct file *vgpu_call_file(struct vgpu_call *c)
{
	struct inode *inode;
	struct file *f;

	/* __fput drops the fops' module reference: take it, as anon_inodes.c does. */
	if (!try_module_get(THIS_MODULE))
		return ERR_PTR(-ENOENT);
	inode = alloc_anon_inode(vgpu_call_mnt->mnt_sb);
	if (IS_ERR(inode)) {
		f = ERR_CAST(inode);
		goto err_module;
	}
	f = alloc_file_pseudo(inode, vgpu_call_mnt, "[vgpu-call]", O_RDWR,
			      &vgpu_call_fops);
	if (IS_ERR(f))
		goto err_inode;
	f->private_data = c;
	c->mapping = f->f_mapping;
	return f;

err_inode:
	iput(inode);
err_module:
	module_put(THIS_MODULE);
	return f;
}

/* The same filesystem holds the proxies' private inodes (fdxlate.c). */
struct vfsmount *vgpu_pseudo_mnt(void)
{
	return vgpu_call_mnt;
}

int __init vgpu_call_init(void)
{
	vgpu_call_mnt = kern_mount(&vgpu_callfs_type);
	return PTR_ERR_OR_ZERO(vgpu_call_mnt);
}

void vgpu_call_exit(void)
{
	kern_unmount(vgpu_call_mnt);
}

atomic64_t vgpu_nr_calls_broken = ATOMIC64_INIT(0);

/*
 * Map every page read-only now (the VMA's vm_page_prot is write-protected),
 * so that the driver's read of the parameters takes no fault; its write of
 * the results still faults, into pfn_mkwrite.  Under the mmap lock.
 */
static void vgpu_call_populate(struct vm_area_struct *vma, struct vgpu_call *c)
{
	size_t off;

	for (off = 0; off < c->len; off += PAGE_SIZE)
		if (vgpu_call_insert(vma, c->ubase + off, c->kbase + off) !=
		    VM_FAULT_NOPAGE)
			break;  /* the fault handler will do it */
}

static struct vgpu_call *vgpu_call_unidle(struct mm_struct *mm)
{
	struct vgpu_call *c, *found = NULL;

	spin_lock(&vgpu_idle_lock);
	hash_for_each_possible(vgpu_idle, c, idle, (unsigned long)mm) {
		if (c->mm == mm) {
			hash_del(&c->idle);
			c->on_idle = false;
			kref_get(&c->ref);
			found = c;
			break;
		}
	}
	spin_unlock(&vgpu_idle_lock);
	return found;
}

/* The call in flight uses slot i. */
static void vgpu_call_slot(struct vgpu_call *c, unsigned int i, size_t len)
{
	c->slot_off = (size_t)i * VGPU_CALL_POOL_LEN;
	c->slot_len = len;
	c->kaddr = c->kbase + c->slot_off;
	c->uaddr = c->ubase + c->slot_off;
}

/*
 * Make every slot of the ring read-only to every task again, the TLB of
 * every CPU of the mm flushed before it returns; false where the page's VMA
 * went meanwhile.
 */
#ifdef CONFIG_MAPPING_DIRTY_HELPERS
static bool vgpu_call_rearm(struct vgpu_call *c)
{
	wp_shared_mapping_range(c->mapping, 0, c->len >> PAGE_SHIFT);
	return true;
}
#else
static bool vgpu_call_rearm(struct vgpu_call *c)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;

	mmap_read_lock(mm);
	vma = vma_lookup(mm, c->ubase);
	if (READ_ONCE(c->broken) || !vma || vma->vm_ops != &vgpu_call_vm_ops ||
	    vma->vm_private_data != c) {
		mmap_read_unlock(mm);
		return false;
	}
	/*
	 * zap_vma_ptes() serves VM_PFNMAP only; the file's own mapping names
	 * exactly this VMA (one inode per call page), and unmap_mapping_range
	 * flushes the TLB before it returns.
	 */
	unmap_mapping_range(c->mapping, 0, c->len, 1);
	vgpu_call_populate(vma, c);
	mmap_read_unlock(mm);
	return true;
}
#endif

/* An idle call page of current's mm, taken (a reference), or NULL. */
static struct vgpu_call *vgpu_call_take_idle(void)
{
	struct vgpu_call *c;

	c = vgpu_call_unidle(current->mm);
	if (!c)
		return NULL;
	c->owner = current;
	if (READ_ONCE(c->broken)) {
		kref_put(&c->ref, vgpu_call_free);      /* its VMA is going */
		return NULL;
	}
	if (c->next < c->nslots) {
		/* Never writable since the last write-protect: read-only to all. */
		vgpu_call_slot(c, c->next++, VGPU_CALL_POOL_LEN);
		return c;
	}
	/*
	 * Every slot used: write-protect the ring where its PTEs stand.
	 * Through the page's own inode (one per call page), so exactly its
	 * VMA; under the PTE lock of each; and wp_shared_mapping_range
	 * flushes the TLB of the range, on every CPU of the mm, before it
	 * returns (wp_clean_post_vma), whenever a PTE was writable.  No VMA
	 * (gone meanwhile) leaves nothing to protect, and broken set.
	 */
	if (!vgpu_call_rearm(c)) {
		kref_put(&c->ref, vgpu_call_free);      /* gone meanwhile */
		return NULL;
	}
	c->next = 1;
	vgpu_call_slot(c, 0, VGPU_CALL_POOL_LEN);
	return c;
}

static struct vgpu_call *vgpu_call_begin(size_t len)
{
	struct vm_area_struct *vma;
	struct vgpu_call *c;
	struct file *f;
	unsigned long addr;

	if (len <= VGPU_CALL_POOL_LEN) {
		c = vgpu_call_take_idle();
		if (c)
			return c;
	}
	c = kzalloc(sizeof(*c), GFP_KERNEL_ACCOUNT);
	if (!c)
		return ERR_PTR(-ENOMEM);
	kref_init(&c->ref);
	if (len <= VGPU_CALL_POOL_LEN) {
		c->nslots = VGPU_CALL_RING;
		c->len = VGPU_CALL_RING * VGPU_CALL_POOL_LEN;
		len = VGPU_CALL_POOL_LEN;
	} else {
		c->nslots = 1;
		c->len = PAGE_ALIGN(len);
		len = c->len;
	}
	c->next = 1;
	c->owner = current;
	c->mm = current->mm;
	/*
	 * Charged to the caller's memory cgroup, as every copy vgpu.ko makes
	 * for a call (parameters, lists): up to about 4 MiB a call, so a
	 * container's threads in calls would otherwise hold gigabytes outside
	 * its memory limit.  Not vmalloc_user(): it cannot be charged, and its
	 * VM_USERMAP serves only remap_vmalloc_range, which vgpu.ko does not
	 * use (the PTEs are inserted one by one, vgpu_call_insert).
	 */
	c->kbase = __vmalloc(c->len, GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!c->kbase) {
		kfree(c);
		return ERR_PTR(-ENOMEM);
	}
	f = vgpu_call_file(c);
	if (IS_ERR(f)) {
		kref_put(&c->ref, vgpu_call_free);
		return ERR_CAST(f);
	}
	addr = vm_mmap(f, 0, c->len, PROT_READ | PROT_WRITE, MAP_SHARED, 0);
	fput(f);                /* the VMA holds it */
	if (IS_ERR_VALUE(addr)) {
		kref_put(&c->ref, vgpu_call_free);
		return ERR_PTR((long)addr);
	}
	c->ubase = addr;
	vgpu_call_slot(c, 0, len);
	mmap_read_lock(current->mm);
	vma = vma_lookup(current->mm, addr);
	if (vma && vma->vm_ops == &vgpu_call_vm_ops && vma->vm_private_data == c)
		vgpu_call_populate(vma, c);
	mmap_read_unlock(current->mm);
	return c;
}

/* Keep c mapped for the next call of its mm, if there is room. */
static bool vgpu_call_keep(struct vgpu_call *c)
{
	struct vgpu_call *o;
	unsigned int n = 0;
	bool kept = false;

	if (c->nslots == 1)
		return false;
	c->owner = NULL;
	spin_lock(&vgpu_idle_lock);
	hash_for_each_possible(vgpu_idle, o, idle, (unsigned long)c->mm)
		n += o->mm == c->mm;
	if (n < VGPU_CALL_IDLE_MAX && !READ_ONCE(c->broken)) {
		hash_add(vgpu_idle, &c->idle, (unsigned long)c->mm);
		c->on_idle = true;
		kept = true;
	}
	spin_unlock(&vgpu_idle_lock);
	if (kept)
		kref_put(&c->ref, vgpu_call_free);     /* the VMA's keeps it */
	else
		c->owner = current;
	return kept;
}

static void vgpu_call_unmap(struct vgpu_call *c)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	bool ours;

	WRITE_ONCE(c->ending, true);
	/*
	 * Unmapped or moved back by a sibling (broken), it may or may not be
	 * there still: unmap it only if the mapping at the address is ours.
	 */
	mmap_read_lock(mm);
	vma = vma_lookup(mm, c->ubase);
	ours = vma && vma->vm_ops == &vgpu_call_vm_ops &&
	       vma->vm_private_data == c;
	mmap_read_unlock(mm);
	if (ours)
		vm_munmap(c->ubase, c->len);
	kref_put(&c->ref, vgpu_call_free);
}

static void vgpu_call_end(struct vgpu_call *c)
{
	if (!READ_ONCE(c->broken) && vgpu_call_keep(c))
		return;
	vgpu_call_unmap(c);
}

/**
 * vgpu_call_drop_idle - unmap current's idle call pages
 *
 * From the release of a vgpu file: a process that closed its slice files
 * should not keep vgpu.ko's pages mapped (nor vgpu.ko loaded: each holds
 * the module through its file).  Another file of the process still open
 * just maps a fresh one at its next call.  Nothing to do without an mm
 * (exit: the VMAs are gone already; a kernel thread's delayed fput).
 */
void vgpu_call_drop_idle(void)
{
	struct vgpu_call *c;

	if (!current->mm || (current->flags & PF_KTHREAD))
		return;
	while ((c = vgpu_call_unidle(current->mm)))
		vgpu_call_unmap(c);
}

/*
 * The file a broken call was made for: nothing more from it, nor from its
 * slice.  Only a hostile thread unmaps a page it did not map while a call
 * uses it, and what the driver read from the other mapping exists until
 * vgpu_undo frees the file's clients: FB that other slices' allocations may
 * find missing meanwhile.  A new file per attempt would make that window
 * recur at will; quarantining the slice (every open and call refused, -EIO,
 * until it is deleted) bounds it to the calls in flight when the first one
 * broke; vgpu_call_lock (below) to one per client owner.  Called with the
 * owner's call lock held, so that the next call of that owner sees it.
 */
static void vgpu_call_poison(struct vgpu_file *vf)
{
	struct vgpu_slice *s = vf->slice;

	atomic64_inc(&vgpu_nr_calls_broken);
	WRITE_ONCE(vf->poisoned, true);
	WRITE_ONCE(vf->undo, true);
	if (atomic_xchg(&s->quarantined, 1))
		return;
	pr_warn("slice %u: pid %d (%s): a call's parameter page was unmapped while the driver ran; slice quarantined (every call and open refused until it is deleted)\n",
		s->id, task_tgid_nr(current), current->comm);
	vgpu_event(s, VGPU_EVENT_SLICE_QUARANTINED, U32_MAX, 0);
}

/*
 * One call at a time per client owner.
 *
 * What a broken call makes, vgpu.ko cannot know: the driver read someone
 * else's parameters under the escape and size vgpu.ko chose.  A root
 * client with a handle of the sibling's choice is not among the clients
 * vgpu.ko tracks, so vgpu_undo cannot free it; it lives until the driver's
 * release of the real file, which vgpu.ko does not control (a proxy a
 * sibling dup()ed, a mapping whose vm_file it is, a GPU file registered to
 * it: each holds the file).  Alone it is harmless: a client holds no
 * memory.  What made it dangerous were further broken calls in flight at
 * the same time, reading, after it was made, "a device under it on any
 * GPU", then "64 MiB under that device": memory the driver keeps for as
 * long as the real file lives, charged to nobody (memory is charged to
 * the slice whose call made it, or not made; the
 * window needs no debug delay on the driver, whose NV_KMALLOC before the
 * copy_from_user of the parameters may sleep).
 *
 * The driver decides which clients a call may name by the file it is made
 * on: RmIoctl (src/nvidia/arch/nvalloc/unix/src/escape.c) takes as
 * secInfo.clientOSInfo the file's registered control file
 * (nvfp->ctl_nvfp, NV_ESC_REGISTER_FD) or else the file itself, and a
 * client made is owned by it: rmclientValidate (rmapi/client.c) answers
 * NV_ERR_INVALID_CLIENT to a call naming a client another file owns, under
 * PDB_PROP_SYS_VALIDATE_CLIENT_HANDLE_STRICT, on by default
 * (g_system_nvoc.c; assumed: the RmClientDataValidation registry key can
 * turn it off, and this bound with it).  So every call that can make
 * anything under a client owned by file X runs on X or on a file
 * registered to X, and holds X's call_lock here: calls on a file take its
 * own lock, then (nested) that of the control file it is registered to.
 * The first broken call of an owner poisons the file and quarantines the
 * slice before its lock is dropped; every later one finds that under the
 * lock and never reaches the driver (-EIO).  So at most one broken call per
 * owner reaches the driver, and what it made can have nothing under it: a
 * root client of its own (empty, until the real file's release), or one
 * object under a client vgpu.ko tracks (freed with that client by
 * vgpu_undo).
 *
 * The order is acyclic: the driver registers a file only to a control file
 * that is not registered itself (escape.c, NV_ESC_REGISTER_FD), and
 * vgpu.ko records a registration (ctl_filp) only from the driver's own
 * return value, so registrations form chains ending in an unregistered
 * file, and each call takes two locks along one edge.  ctl_filp is stable
 * under the file's own call_lock: REGISTER_FD sets it holding that lock
 * (mediate.c), the release drops it with no call in flight.
 *
 * The cost: calls on call pages of one control file (and the GPU files
 * registered to it) no longer overlap in the driver; most take RM's API
 * lock there anyway.  Direct escapes (the caller's own pointer, mediate.c)
 * and UVM calls are not serialised: neither can make anything under a
 * client a broken call made (that client has nothing to name).
 *
 * Return: 0 with the locks held (*owner is the registered control file,
 * or NULL), or -EINTR on a fatal signal with none held.
 */
int vgpu_call_lock(struct vgpu_file *vf, struct vgpu_file **owner)
{
	struct vgpu_file *o = NULL;

	if (mutex_lock_killable(&vf->call_lock))
		return -EINTR;
	if (vf->ctl_filp) {
		o = vf->ctl_filp->private_data;
		if (mutex_lock_killable_nested(&o->call_lock,
					       SINGLE_DEPTH_NESTING)) {
			mutex_unlock(&vf->call_lock);
			return -EINTR;
		}
	}
	*owner = o;
	return 0;
}

void vgpu_call_unlock(struct vgpu_file *vf, struct vgpu_file *owner)
{
	if (owner)
		mutex_unlock(&owner->call_lock);
	mutex_unlock(&vf->call_lock);
}

static void *vgpu_buf_holder(void *params, const struct vgpu_buf *bufs, u32 in)
{
	return in ? bufs[in - 1].kbuf : params;
}

/*
 * Lay out params and bufs in a fresh call page, point the buffers' pointer
 * fields (in the page's copy) at their user addresses, run cmd on the real
 * file, and copy the results back into the kernel buffers (pointer fields
 * keep the caller's values).
 */
static long vgpu_call_page(struct vgpu_file *vf, struct file *real,
			   unsigned int nr, bool uvm, void *params, u32 size,
			   const struct vgpu_buf *bufs, unsigned int nbufs)
{
	size_t off[1 + VGPU_CALL_MAX_BUFS], at, len;
	u64 saved[VGPU_CALL_MAX_BUFS];
	bool xfer = !uvm && size > _IOC_SIZEMASK;
	struct vgpu_call *c;
	unsigned long arg;
	unsigned int cmd, i;
	long ret;

	if (nbufs > VGPU_CALL_MAX_BUFS || !real->f_op->unlocked_ioctl)
		return -EINVAL;
	/*
	 * Under the owner's call lock (NV files): a call of the same owner
	 * that broke meanwhile answers here, before anything is mapped.
	 */
	if (vgpu_file_refused(vf))
		return -EIO;
	at = xfer ? ALIGN(sizeof(nv_ioctl_xfer_t), 8) : 0;
	off[0] = at;
	len = at + ALIGN(size, 8);
	for (i = 0; i < nbufs; i++) {
		if (bufs[i].in > i || bufs[i].size > VGPU_MAX_CTRL_PARAMS)
			return -EINVAL;
		off[1 + i] = len;
		len += ALIGN(bufs[i].size, 8);
	}
	c = vgpu_call_begin(len);
	if (IS_ERR(c))
		return PTR_ERR(c);

	memcpy(c->kaddr + off[0], params, size);
	for (i = 0; i < nbufs; i++) {
		void *holder = c->kaddr + off[bufs[i].in];

		memcpy(c->kaddr + off[1 + i], bufs[i].kbuf, bufs[i].size);
		*(u64 *)(holder + bufs[i].ptr_off) = c->uaddr + off[1 + i];
	}
	if (uvm) {
		cmd = nr;
		arg = c->uaddr;
	} else if (xfer) {
		nv_ioctl_xfer_t *x = c->kaddr;

		x->cmd = nr;
		x->size = size;
		x->ptr = c->uaddr + off[0];
		cmd = _IOWR(NV_IOCTL_MAGIC, NV_ESC_IOCTL_XFER_CMD, nv_ioctl_xfer_t);
		arg = c->uaddr;
	} else {
		cmd = _IOC(_IOC_READ | _IOC_WRITE, NV_IOCTL_MAGIC, nr, size);
		arg = c->uaddr;
	}

	WRITE_ONCE(c->in_call, true);
	ret = real->f_op->unlocked_ioctl(real, cmd, arg);
	WRITE_ONCE(c->in_call, false);

	if (READ_ONCE(c->broken)) {
		vgpu_call_poison(vf);
		ret = -EIO;
		goto out;
	}
	/* Results: through the kernel mapping, pointer fields left as they were. */
	for (i = 0; i < nbufs; i++)
		saved[i] = *(u64 *)(vgpu_buf_holder(params, bufs, bufs[i].in) +
				    bufs[i].ptr_off);
	memcpy(params, c->kaddr + off[0], size);
	for (i = 0; i < nbufs; i++)
		memcpy(bufs[i].kbuf, c->kaddr + off[1 + i], bufs[i].size);
	for (i = 0; i < nbufs; i++)
		*(u64 *)(vgpu_buf_holder(params, bufs, bufs[i].in) +
			 bufs[i].ptr_off) = saved[i];
out:
	vgpu_call_end(c);
	return ret;
}

/* Calls on NV files hold their owner's call lock (vgpu_call_lock). */
static long vgpu_call_run(struct vgpu_file *vf, struct file *real,
			  unsigned int nr, bool uvm, void *params, u32 size,
			  const struct vgpu_buf *bufs, unsigned int nbufs)
{
	struct vgpu_file *owner;
	long ret;

	if (uvm)
		return vgpu_call_page(vf, real, nr, true, params, size, bufs, nbufs);
	ret = vgpu_call_lock(vf, &owner);
	if (ret)
		return ret;
	ret = vgpu_call_page(vf, real, nr, false, params, size, bufs, nbufs);
	vgpu_call_unlock(vf, owner);
	return ret;
}

/**
 * vgpu_call_nv - an escape on a real control or GPU file, at the caller's
 * privilege, on a call page
 * @vf: the vgpu file the call is made for (poisoned if the call breaks)
 * @real: the real file (vf->real, or another file of the slice)
 * @nr: the escape
 * @params: its parameters, kernel memory; results come back here
 * @size: their size (an XFER header of vgpu.ko's own above 16383)
 * @bufs: buffers the parameters point to, laid out after them
 * @nbufs: how many (VGPU_CALL_MAX_BUFS at most)
 *
 * Return: the driver's return value; -EIO if the call broke (the file is
 * poisoned and vf->undo set); -ENOMEM or vm_mmap's error when no call page
 * could be mapped (nothing reached the driver).
 */
long vgpu_call_nv(struct vgpu_file *vf, struct file *real, u32 nr,
		  void *params, u32 size, const struct vgpu_buf *bufs,
		  unsigned int nbufs)
{
	return vgpu_call_run(vf, real, nr, false, params, size, bufs, nbufs);
}

/* The same, for a caller that holds vgpu_call_lock(vf) already. */
long vgpu_call_nv_locked(struct vgpu_file *vf, struct file *real, u32 nr,
			 void *params, u32 size, const struct vgpu_buf *bufs,
			 unsigned int nbufs)
{
	lockdep_assert_held(&vf->call_lock);
	return vgpu_call_page(vf, real, nr, false, params, size, bufs, nbufs);
}

/* The same for a UVM command (a plain integer, the size implied). */
long vgpu_call_uvm(struct vgpu_file *vf, unsigned int cmd, void *params,
		   u32 size)
{
	return vgpu_call_run(vf, vf->real, cmd, true, params, size, NULL, 0);
}

/* An NV_STATUS for a call that never reached the driver or broke. */
NV_STATUS vgpu_call_status(long ret)
{
	switch (ret) {
	case -ENOMEM:
		return NV_ERR_NO_MEMORY;
	case -EIO:
		return NV_ERR_INVALID_STATE;
	default:
		return NV_ERR_INVALID_ARGUMENT;
	}
}
