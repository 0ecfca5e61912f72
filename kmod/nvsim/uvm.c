// SPDX-License-Identifier: GPL-2.0
/*
 * uvm.c - /dev/nvidia-uvm: the unified memory device.
 *
 * UVM commands are plain integers, not _IOC-encoded; the size is implied by
 * the command.  Everything but UVM_INITIALIZE, UVM_DEINITIALIZE and
 * UVM_MM_INITIALIZE needs an initialized file first, else its rmStatus is
 * NV_ERR_ILLEGAL_ACTION.  Unknown commands fail with -EINVAL.
 *
 * Managed memory: mmap() of an initialized UVM file, with the file offset
 * equal to the virtual address, makes a managed range (see "managed
 * ranges" below for what is modelled on the real driver).  Its pages are
 * handed out on first touch as zeroed system pages and freed with the VMA
 * that covers them; the simulator does not charge FB for them (a real GPU
 * takes FB lazily, on migration).  The number of such pages is in debugfs
 * stats.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/file.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/refcount.h>
#include <linux/sizes.h>

#include "nvsim.h"

static dev_t nvsim_uvm_devt;
static struct cdev nvsim_uvm_cdev;
static struct device *nvsim_uvm_dev;

/* ------------------------------------------------------ managed ranges */

/*
 * Modelled on kernel-open/nvidia-uvm/uvm.c (595.45.04): uvm_mmap,
 * uvm_vm_open_managed, uvm_vm_close_managed, uvm_disable_vma.
 *  - mmap needs a shared, readable and writable mapping whose offset is its
 *    address; it sets VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTCOPY, the managed
 *    vm_ops, and a per-VMA wrapper in vm_private_data naming the VMA.
 *  - ->open finds the VMA it was copied from through that wrapper.  A copy
 *    in another mm (fork after MADV_DOFORK) or at other addresses (mremap's
 *    move) is disabled: its PTEs (and, by file offset, the original's) are
 *    zapped, its vm_ops become the disabled ones (every fault SIGBUS, no
 *    open or close) and it holds nothing.  A split keeps the range.
 *  - ->close of a managed VMA frees the pages it covers; the range's
 *    bookkeeping goes with its last VMA.
 * The driver recognises its VMAs only by these vm_ops pointers
 * (uvm_vma_is_managed): a VMA whose ops were wrapped is not one of them.
 * Simplified: one refcounted page store per mmap instead of va_ranges split
 * with the VMAs; pages are system memory (no FB), as before.
 */
struct nvsim_uvm_range {
	refcount_t refs;
	struct xarray pages;    /* page offset (== VA >> PAGE_SHIFT) -> page */
};

struct nvsim_uvm_wrapper {      /* uvm_vma_wrapper_t */
	struct nvsim_uvm_range *range;
	struct vm_area_struct *vma;
};

static void nvsim_uvm_free_pages(struct nvsim_uvm_range *r, unsigned long first,
				 unsigned long last)
{
	struct page *page;
	unsigned long idx;

	xa_for_each_range(&r->pages, idx, page, first, last) {
		xa_erase(&r->pages, idx);
		put_page(page);
		atomic64_dec(&nvsim.uvm_pages);
	}
}

static void nvsim_uvm_range_put(struct nvsim_uvm_range *r)
{
	if (!refcount_dec_and_test(&r->refs))
		return;
	nvsim_uvm_free_pages(r, 0, ULONG_MAX);
	xa_destroy(&r->pages);
	kfree(r);
	atomic_dec(&nvsim.nr_mappings);
}

static vm_fault_t nvsim_uvm_fault_sigbus(struct vm_fault *vmf)
{
	return VM_FAULT_SIGBUS;
}

static const struct vm_operations_struct nvsim_uvm_vm_ops_disabled = {
	.fault = nvsim_uvm_fault_sigbus,
};

/* uvm_disable_vma: by file offset, so the original's PTEs go too. */
static void nvsim_uvm_disable_vma(struct vm_area_struct *vma)
{
	unmap_mapping_range(vma->vm_file->f_mapping,
			    (loff_t)vma->vm_pgoff << PAGE_SHIFT,
			    vma->vm_end - vma->vm_start, 1);
	vma->vm_ops = &nvsim_uvm_vm_ops_disabled;
	vma->vm_private_data = NULL;
}

static void nvsim_uvm_vm_open(struct vm_area_struct *vma)
{
	struct nvsim_uvm_wrapper *orig = vma->vm_private_data, *w;
	struct vm_area_struct *original = orig->vma;

	vma->vm_private_data = NULL;
	if (vma->vm_mm != original->vm_mm ||
	    (vma->vm_start != original->vm_start &&
	     vma->vm_end != original->vm_end)) {
		nvsim_uvm_disable_vma(vma);
		return;
	}
	/* A split: the new VMA gets its own wrapper on the same range. */
	w = kzalloc(sizeof(*w), GFP_KERNEL);
	if (!w) {               /* uvm_vm_open_failure disables both */
		nvsim_uvm_disable_vma(vma);
		return;
	}
	w->range = orig->range;
	w->vma = vma;
	refcount_inc(&w->range->refs);
	vma->vm_private_data = w;
}

static void nvsim_uvm_vm_close(struct vm_area_struct *vma)
{
	struct nvsim_uvm_wrapper *w = vma->vm_private_data;

	/* What this VMA covers is destroyed with it (uvm_destroy_vma_managed). */
	nvsim_uvm_free_pages(w->range, vma->vm_pgoff,
			     vma->vm_pgoff + vma_pages(vma) - 1);
	nvsim_uvm_range_put(w->range);
	kfree(w);
}

/* First touch: a zeroed page, kept for the life of the range.  No nvsim lock. */
static vm_fault_t nvsim_uvm_vm_fault(struct vm_fault *vmf)
{
	struct nvsim_uvm_wrapper *w = vmf->vma->vm_private_data;
	struct nvsim_uvm_range *r = w->range;
	struct page *page, *old;

	page = xa_load(&r->pages, vmf->pgoff);
	if (!page) {
		page = alloc_page(GFP_HIGHUSER | __GFP_ZERO | __GFP_ACCOUNT);
		if (!page)
			return VM_FAULT_OOM;
		old = xa_cmpxchg(&r->pages, vmf->pgoff, NULL, page, GFP_KERNEL);
		if (xa_is_err(old)) {
			__free_page(page);
			return VM_FAULT_OOM;
		}
		if (old) {
			__free_page(page);      /* lost a race: use the winner's */
			page = old;
		} else {
			atomic64_inc(&nvsim.uvm_pages);
		}
	}
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct nvsim_uvm_vm_ops = {
	.open = nvsim_uvm_vm_open,
	.close = nvsim_uvm_vm_close,
	.fault = nvsim_uvm_vm_fault,
};

/*
 * A semaphore pool's CPU mapping (uvm.c's uvm_mmap: an mmap over exactly a
 * pool's range maps the pool, uvm_vm_ops_semaphore_pool): the pool's store
 * pages, shared with the GPU's view of it; the VMAs split from it share
 * the reference (refs).
 */
struct nvsim_uvm_poolmap {
	refcount_t refs;
	struct nvsim_store *store;
	unsigned long first_pgoff;      /* the pool's start >> PAGE_SHIFT */
};

static void nvsim_uvm_poolmap_put(struct nvsim_uvm_poolmap *pm)
{
	if (!refcount_dec_and_test(&pm->refs))
		return;
	nvsim_store_put(pm->store);
	kfree(pm);
	atomic_dec(&nvsim.nr_mappings);
}

static void nvsim_uvm_pool_open(struct vm_area_struct *vma)
{
	struct nvsim_uvm_poolmap *pm = vma->vm_private_data;

	refcount_inc(&pm->refs);
}

static void nvsim_uvm_pool_close(struct vm_area_struct *vma)
{
	nvsim_uvm_poolmap_put(vma->vm_private_data);
}

static vm_fault_t nvsim_uvm_pool_fault(struct vm_fault *vmf)
{
	struct nvsim_uvm_poolmap *pm = vmf->vma->vm_private_data;
	struct page *page;

	/* vm_pgoff is the address's page (a UVM mapping's offset is its address) */
	page = nvsim_store_page(pm->store, vmf->pgoff - pm->first_pgoff);
	if (!page)
		return VM_FAULT_SIGBUS;
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct nvsim_uvm_pool_vm_ops = {
	.open = nvsim_uvm_pool_open,
	.close = nvsim_uvm_pool_close,
	.fault = nvsim_uvm_pool_fault,
};

/* The pool the VMA covers exactly, mapped; 1 if there is none. */
static int nvsim_uvm_mmap_pool(struct nvsim_file *nvfp, struct vm_area_struct *vma)
{
	struct nvsim_uvm_poolmap *pm;
	struct nvsim_uvm_xrange *r;
	struct nvsim_store *st = NULL;

	pm = kzalloc(sizeof(*pm), GFP_KERNEL_ACCOUNT);
	if (!pm)
		return -ENOMEM;
	spin_lock(&nvfp->ctx_lock);
	list_for_each_entry(r, &nvfp->uvm_xranges, node)
		if (r->store && r->start == vma->vm_start && r->end + 1 == vma->vm_end) {
			st = r->store;
			nvsim_store_get(st);
			break;
		}
	spin_unlock(&nvfp->ctx_lock);
	if (!st) {
		kfree(pm);
		return 1;
	}
	refcount_set(&pm->refs, 1);
	pm->store = st;
	pm->first_pgoff = vma->vm_start >> PAGE_SHIFT;
	vma->vm_flags |= VM_DONTEXPAND | VM_DONTCOPY | VM_DONTDUMP;
	vma->vm_private_data = pm;
	vma->vm_ops = &nvsim_uvm_pool_vm_ops;
	atomic_inc(&nvsim.nr_mappings);
	return 0;
}

static int nvsim_uvm_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct nvsim_file *nvfp = filp->private_data;
	struct nvsim_uvm_wrapper *w;
	struct nvsim_uvm_range *r;
	int ret;

	/* Read without nvsim.lock: mmap_lock is held, and nothing may order
	 * nvsim.lock after it. */
	if (!READ_ONCE(nvfp->uvm_initialized))
		return -EBADFD;
	/* A managed range lives at the address its file offset names. */
	if (vma->vm_pgoff != vma->vm_start >> PAGE_SHIFT)
		return -EINVAL;
	if ((vma->vm_flags & (VM_SHARED | VM_READ | VM_WRITE)) !=
	    (VM_SHARED | VM_READ | VM_WRITE))
		return -EINVAL;
	ret = nvsim_fault_errno(NVSIM_FK_UVM_MMAP, 0);
	if (ret)
		return ret;
	ret = nvsim_uvm_mmap_pool(nvfp, vma);
	if (ret <= 0)
		return ret;

	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	w = kzalloc(sizeof(*w), GFP_KERNEL_ACCOUNT);
	if (!r || !w) {
		kfree(r);
		kfree(w);
		return -ENOMEM;
	}
	refcount_set(&r->refs, 1);
	xa_init(&r->pages);
	w->range = r;
	w->vma = vma;

	vma->vm_flags |= VM_MIXEDMAP | VM_DONTEXPAND | VM_DONTCOPY;
	vma->vm_private_data = w;
	vma->vm_ops = &nvsim_uvm_vm_ops;
	atomic_inc(&nvsim.nr_mappings);
	return 0;
}

/* ------------------------------------------------------------- ioctls */

/* nvstatuscodes.h; not in nvabi.h. */
#define NVSIM_NV_ERR_INVALID_DEVICE     0x00000026

static NV_STATUS nvsim_uvm_initialize(struct nvsim_file *nvfp, void *buf)
{
	UVM_INITIALIZE_PARAMS *p = buf;

	if (!nvfp->uvm_initialized) {
		nvfp->uvm_flags = p->flags;
		WRITE_ONCE(nvfp->uvm_initialized, true);
		return NV_OK;
	}
	/* Again with the same flags is fine; with other flags it is not. */
	return p->flags == nvfp->uvm_flags ? NV_OK : NV_ERR_INVALID_ARGUMENT;
}

static NV_STATUS nvsim_uvm_mm_initialize(struct nvsim_file *nvfp, void *buf)
{
	UVM_MM_INITIALIZE_PARAMS *p = buf;
	struct nvsim_file *uvm;
	struct file *filp;

	/* uvmFd must be a UVM file; the reference is not kept. */
	filp = nvsim_fget(p->uvmFd, NVSIM_KIND(NVSIM_FILE_UVM), &uvm);
	if (!filp)
		return NV_ERR_INVALID_ARGUMENT;
	fput(filp);
	return NV_OK;
}

/*
 * Resolve (rmCtrlFd, hClient) as UVM does: the descriptor must be a control
 * file in the caller's table, and the client one of that file's.
 */
static NV_STATUS nvsim_uvm_rm_client(int fd, NvHandle hClient,
				     struct file **filp,
				     struct nvsim_client **client)
{
	struct nvsim_call call = {};
	struct nvsim_file *ctl;

	*filp = nvsim_fget(fd, NVSIM_KIND(NVSIM_FILE_CTL), &ctl);
	if (!*filp)
		return NV_ERR_INVALID_ARGUMENT;
	call.file = ctl;
	mutex_lock(&nvsim.lock);
	return nvsim_client_get(&call, hClient, client);
}

/*
 * The real UVM driver ignores rmCtrlFd here (uvm_gpu.c, uvm_api_register_gpu:
 * only hClient and hSmcPartRef reach RM, through nvUvmInterfaceGetGpuInfo,
 * and RM looks them up only for a MIG partition, which nvsim's GPUs are
 * not): real clients send -1.  The UUID is not checked (simplified).
 */
static NV_STATUS nvsim_uvm_register_gpu(struct nvsim_file *nvfp, void *buf)
{
	/* Remembered for UVM_ENABLE_PEER_ACCESS (peer.c). */
	nvsim_uvm_peer_register(nvfp, ((UVM_REGISTER_GPU_PARAMS *)buf)->gpu_uuid);
	return NV_OK;
}

/* The simulated GPU with that UUID (nvsim_gpu_uuid_init), or NULL. */
static struct nvsim_gpu *nvsim_uvm_gpu_by_uuid(const u8 *uuid)
{
	unsigned int i;

	for (i = 0; i < nvsim.num_gpus; i++)
		if (!memcmp(nvsim.gpus[i].uuid, uuid, NV_UUID_LEN))
			return &nvsim.gpus[i];
	return NULL;
}

/*
 * The real UVM driver ignores rmCtrlFd here (uvm_va_space.c,
 * uvm_api_register_gpu_va_space: "(void)user_rm_va_space->rm_control_fd",
 * bug 1624521) and dups hClient's hVaSpace through RM's kernel interface
 * (nvUvmInterfaceDupAddressSpace), which finds the client by handle alone,
 * whoever owns it.  So does nvsim (which has no VA space class: any object
 * of the client stands for one).
 */
static NV_STATUS nvsim_uvm_register_vaspace(struct nvsim_file *nvfp, void *buf)
{
	UVM_REGISTER_GPU_VASPACE_PARAMS *p = buf;
	struct nvsim_client *client;
	struct nvsim_gpu *gpu;
	NV_STATUS status = NV_OK;

	mutex_lock(&nvsim.lock);
	client = xa_load(&nvsim.clients, p->hClient);
	if (!client)
		status = NV_ERR_INVALID_CLIENT;
	else if (!xa_load(&client->objects, p->hVaSpace))
		status = NV_ERR_OBJECT_NOT_FOUND;
	/*
	 * The VA space the GPU's channels of that client run in when they
	 * name it (pbdma.c).  A UUID nvsim has no GPU for is still accepted,
	 * as before (simplified), and records nothing.
	 */
	gpu = nvsim_uvm_gpu_by_uuid(p->gpuUuid);
	if (status == NV_OK && gpu) {
		nvfp->uvm_vas[gpu->index].hClient = p->hClient;
		nvfp->uvm_vas[gpu->index].hVaSpace = p->hVaSpace;
	}
	mutex_unlock(&nvsim.lock);
	return status;
}

void nvsim_uvm_ext_free(struct nvsim_uvm_ext *ext)
{
	lockdep_assert_held(&nvsim.lock);
	list_del(&ext->node);
	if (ext->gpu)
		list_del(&ext->gpu_node);
	nvsim_mem_put(ext->mem);
	kfree(ext);
}

/* UvmGpuMappingAttributes: the GPU's UUID first, 36 bytes each. */
#define NVSIM_UVM_MAP_ATTR_SIZE 36
#define NVSIM_UVM_MAX_GPUS      256

static NV_STATUS nvsim_uvm_ext_add_at(struct nvsim_file *nvfp, u64 base,
				      u64 length, u64 offset,
				      struct nvsim_mem *mem, struct nvsim_gpu *gpu)
{
	struct nvsim_uvm_ext *ext;

	ext = kzalloc(sizeof(*ext), GFP_KERNEL_ACCOUNT);
	if (!ext)
		return NV_ERR_NO_MEMORY;
	ext->base = base;
	ext->length = length;
	ext->offset = offset;
	ext->mem = mem;
	nvsim_mem_get(mem);
	list_add_tail(&ext->node, &nvfp->uvm_ext);
	if (gpu) {
		ext->gpu = gpu;
		ext->vas_client = nvfp->uvm_vas[gpu->index].hClient;
		ext->vas_handle = nvfp->uvm_vas[gpu->index].hVaSpace;
		list_add_tail(&ext->gpu_node, &gpu->va_maps);
	}
	return NV_OK;
}

static NV_STATUS nvsim_uvm_ext_add(struct nvsim_file *nvfp,
				   const UVM_MAP_EXTERNAL_ALLOCATION_PARAMS *p,
				   struct nvsim_mem *mem, struct nvsim_gpu *gpu)
{
	return nvsim_uvm_ext_add_at(nvfp, p->base, p->length, p->offset, mem, gpu);
}

/* ------------------------------------------------- external VA ranges */

/*
 * Modelled on kernel-open/nvidia-uvm (595.45.04): an external mapping lies
 * in an external VA range that UVM_CREATE_EXTERNAL_RANGE made
 * (uvm_map_external.c: uvm_create_external_range; uvm_map_external_allocation
 * finds it with uvm_va_range_external_find and refuses a mapping it does not
 * contain, NV_ERR_INVALID_ADDRESS).  Ranges do not overlap (the range
 * tree's insert: NV_ERR_UVM_ADDRESS_IN_USE).  Mappings are per GPU, and a
 * new one first unmaps what it overlaps on that GPU, splitting mappings at
 * its ends (uvm_unmap_external_in_range); UVM_UNMAP_EXTERNAL does the same
 * for [base, base + length) on one GPU (uvm_unmap_external); UVM_FREE
 * takes only a range's start and destroys the range with every mapping in
 * it (uvm_va_range.c, uvm_free: NV_ERR_INVALID_ADDRESS for an address that
 * is not the start of a range).  Semaphore pools and dynamic parallelism
 * regions are ranges of the same list (flagged), which external mappings
 * refuse.  Simplified: managed ranges are not in the collision check, and a
 * split never fails
 * (the real one can, when its point is not aligned to the mapping's page
 * size).  Under nvsim.lock.
 */
static struct nvsim_uvm_xrange *nvsim_uvm_xrange_find(struct nvsim_file *nvfp,
							u64 addr)
{
	struct nvsim_uvm_xrange *r;

	list_for_each_entry(r, &nvfp->uvm_xranges, node)
		if (addr >= r->start && addr <= r->end)
			return r;
	return NULL;
}

/* uvm_api_range_invalid_4k (uvm_api.h) */
static bool nvsim_uvm_range_invalid_4k(u64 base, u64 length)
{
	return !IS_ALIGNED(base, SZ_4K) || !IS_ALIGNED(length, SZ_4K) ||
	       !base || !length || base + length < base;
}

/* The part of @ext from @start on, as a mapping of its own (a split). */
static NV_STATUS nvsim_uvm_ext_split(struct nvsim_uvm_ext *ext, u64 start)
{
	struct nvsim_uvm_ext *n;

	n = kmemdup(ext, sizeof(*n), GFP_KERNEL_ACCOUNT);
	if (!n)
		return NV_ERR_NO_MEMORY;
	n->base = start;
	n->length = ext->base + ext->length - start;
	n->offset = ext->offset + (start - ext->base);
	ext->length = start - ext->base;
	nvsim_mem_get(n->mem);
	list_add(&n->node, &ext->node);
	if (n->gpu)
		list_add(&n->gpu_node, &ext->gpu_node);
	return NV_OK;
}

/* uvm_unmap_external_in_range: [start, end] of @gpu's mappings (NULL: none's). */
static NV_STATUS nvsim_uvm_unmap_in_range(struct nvsim_file *nvfp,
					  struct nvsim_gpu *gpu, u64 start,
					  u64 end)
{
	struct nvsim_uvm_ext *ext, *tmp;
	NV_STATUS status;

	list_for_each_entry_safe(ext, tmp, &nvfp->uvm_ext, node) {
		u64 last = ext->base + ext->length - 1;

		if (ext->gpu != gpu || last < start || ext->base > end)
			continue;
		if (ext->base < start) {
			status = nvsim_uvm_ext_split(ext, start);
			if (status != NV_OK)
				return status;
			/* the upper part is next in the list: handled as one */
			continue;
		}
		if (last > end) {
			status = nvsim_uvm_ext_split(ext, end + 1);
			if (status != NV_OK)
				return status;
		}
		nvsim_uvm_ext_free(ext);
	}
	return NV_OK;
}

/*
 * A range leaves the file's list under nvsim.lock and ctx_lock (the UVM
 * mmap looks semaphore pools up under ctx_lock alone); a pool's pages stay
 * while a CPU mapping holds the store.
 */
static void nvsim_uvm_xrange_del(struct nvsim_file *nvfp,
				 struct nvsim_uvm_xrange *r)
{
	lockdep_assert_held(&nvsim.lock);
	spin_lock(&nvfp->ctx_lock);
	list_del(&r->node);
	spin_unlock(&nvfp->ctx_lock);
	nvsim_store_put(r->store);
	if (r->pool)
		nvsim_mem_put(r->pool);
	kfree(r);
}

void nvsim_uvm_xranges_free(struct nvsim_file *nvfp)
{
	struct nvsim_uvm_xrange *r, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(r, tmp, &nvfp->uvm_xranges, node)
		nvsim_uvm_xrange_del(nvfp, r);
}

/*
 * The real driver dups the memory handle, so the FB stays in use after the
 * application frees it, until UVM_FREE of the range or close of the file.
 */
static NV_STATUS nvsim_uvm_map_external(struct nvsim_file *nvfp, void *buf)
{
	UVM_MAP_EXTERNAL_ALLOCATION_PARAMS *p = buf;
	struct nvsim_uvm_xrange *xr;
	struct nvsim_client *client;
	struct nvsim_gpu *gpu;
	bool mapped = false;
	unsigned int i;
	struct nvsim_object *obj;
	struct file *filp;
	NV_STATUS status;
	u64 end;

	if (nvsim_uvm_range_invalid_4k(p->base, p->length))
		return NV_ERR_INVALID_ADDRESS;
	status = nvsim_uvm_rm_client(p->rmCtrlFd, p->hClient, &filp, &client);
	if (!filp)
		return status;
	if (status != NV_OK)
		goto out;
	/* uvm_map_external_allocation: inside one external range, or nothing. */
	xr = nvsim_uvm_xrange_find(nvfp, p->base);
	if (!xr || xr->pool || xr->sked || xr->end < p->base + p->length - 1) {
		status = NV_ERR_INVALID_ADDRESS;
		goto out;
	}
	obj = nvsim_object_find(client, p->hMemory);
	if (!obj || obj->type != NVSIM_OBJ_MEMORY) {
		status = NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	if (p->length == 0 || check_add_overflow(p->offset, p->length, &end) ||
	    end > obj->memory.mem->size) {
		status = NV_ERR_INVALID_ARGUMENT;
		goto out;
	}
	/*
	 * One record per GPU of perGpuAttributes that nvsim simulates: the
	 * engine reads it as that GPU's mapping (pbdma.c); none: one record
	 * that only holds the memory, as before.
	 */
	for (i = 0; i < min_t(u64, p->gpuAttributesCount, NVSIM_UVM_MAX_GPUS) &&
		    status == NV_OK; i++) {
		gpu = nvsim_uvm_gpu_by_uuid(p->perGpuAttributes +
					    i * NVSIM_UVM_MAP_ATTR_SIZE);
		if (gpu) {
			/* uvm_map_external_allocation_on_gpu: the overlap goes first. */
			status = nvsim_uvm_unmap_in_range(nvfp, gpu, p->base,
							  p->base + p->length - 1);
			if (status == NV_OK)
				status = nvsim_uvm_ext_add(nvfp, p, obj->memory.mem, gpu);
			mapped = true;
		}
	}
	if (status == NV_OK && !mapped) {
		status = nvsim_uvm_unmap_in_range(nvfp, NULL, p->base,
						  p->base + p->length - 1);
		if (status == NV_OK)
			status = nvsim_uvm_ext_add(nvfp, p, obj->memory.mem, NULL);
	}
out:
	mutex_unlock(&nvsim.lock);
	fput(filp);
	return status;
}

/* uvm_api_free, uvm_free (uvm_va_range.c): a range by its start, with its mappings. */
static NV_STATUS nvsim_uvm_free(struct nvsim_file *nvfp, void *buf)
{
	UVM_FREE_PARAMS *p = buf;
	struct nvsim_uvm_ext *ext, *tmp;
	struct nvsim_uvm_xrange *xr;
	NV_STATUS status = NV_OK;

	mutex_lock(&nvsim.lock);
	xr = nvsim_uvm_xrange_find(nvfp, p->base);
	if (!xr || xr->start != p->base) {
		status = NV_ERR_INVALID_ADDRESS;
		goto out;
	}
	list_for_each_entry_safe(ext, tmp, &nvfp->uvm_ext, node)
		if (ext->base >= xr->start && ext->base <= xr->end)
			nvsim_uvm_ext_free(ext);
	nvsim_uvm_xrange_del(nvfp, xr);
out:
	mutex_unlock(&nvsim.lock);
	return status;
}

/*
 * UVM_UNMAP_EXTERNAL: uvm_api_unmap_external, uvm_unmap_external
 * (uvm_map_external.c): a 4K-aligned [base, base + length) inside one
 * external range (NV_ERR_INVALID_ADDRESS), a GPU UVM knows
 * (NV_ERR_INVALID_DEVICE; nvsim: one it simulates), then that GPU's
 * mappings there go, split at the ends.
 */
static NV_STATUS nvsim_uvm_unmap_external(struct nvsim_file *nvfp, void *buf)
{
	UVM_UNMAP_EXTERNAL_PARAMS *p = buf;
	struct nvsim_uvm_xrange *xr;
	struct nvsim_gpu *gpu;

	lockdep_assert_held(&nvsim.lock);
	if (nvsim_uvm_range_invalid_4k(p->base, p->length))
		return NV_ERR_INVALID_ADDRESS;
	xr = nvsim_uvm_xrange_find(nvfp, p->base);
	if (!xr || xr->pool || xr->sked || p->base + p->length - 1 > xr->end)
		return NV_ERR_INVALID_ADDRESS;
	gpu = nvsim_uvm_gpu_by_uuid(p->gpuUuid);
	if (!gpu)
		return NVSIM_NV_ERR_INVALID_DEVICE;
	return nvsim_uvm_unmap_in_range(nvfp, gpu, p->base,
					p->base + p->length - 1);
}

static NV_STATUS nvsim_uvm_ok(struct nvsim_file *nvfp, void *buf)
{
	return NV_OK;
}

/* uvm_ioctl.h (595.45.04); nvabi.h has the command numbers only. */
#define NVSIM_UVM_CREATE_EXTERNAL_RANGE 73
typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NV_STATUS rmStatus;
	NvU32 _pad0;
} NVSIM_UVM_CREATE_EXTERNAL_RANGE_PARAMS;


/*
 * UVM_CREATE_EXTERNAL_RANGE: uvm_api_create_external_range,
 * uvm_create_external_range (kernel-open/nvidia-uvm/uvm_map_external.c): a range
 * not 4K-aligned, at 0, empty or wrapping is NV_ERR_INVALID_ADDRESS
 * (uvm_api_range_invalid_4k); one that overlaps another external range is
 * NV_ERR_UVM_ADDRESS_IN_USE (uvm_va_range_create_external, the range
 * tree's insert).  Recorded: the mappings go in it.  Overlaps with other
 * kinds of range are not found (simplified).
 */
static NV_STATUS nvsim_uvm_create_external_range(struct nvsim_file *nvfp,
						 void *buf)
{
	NVSIM_UVM_CREATE_EXTERNAL_RANGE_PARAMS *p = buf;
	struct nvsim_uvm_xrange *r;
	u64 end;

	lockdep_assert_held(&nvsim.lock);
	if (nvsim_uvm_range_invalid_4k(p->base, p->length))
		return NV_ERR_INVALID_ADDRESS;
	end = p->base + p->length - 1;
	list_for_each_entry(r, &nvfp->uvm_xranges, node)
		if (p->base <= r->end && end >= r->start)
			return NV_ERR_UVM_ADDRESS_IN_USE;
	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r)
		return NV_ERR_NO_MEMORY;
	r->start = p->base;
	r->end = end;
	spin_lock(&nvfp->ctx_lock);
	list_add_tail(&r->node, &nvfp->uvm_xranges);
	spin_unlock(&nvfp->ctx_lock);
	return NV_OK;
}

/* uvm_ioctl.h */
#define NVSIM_UVM_VALIDATE_VA_RANGE     72
typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NV_STATUS rmStatus;
	NvU32 _pad0;
} NVSIM_UVM_VALIDATE_VA_RANGE_PARAMS;

/*
 * UVM_VALIDATE_VA_RANGE: uvm_api_validate_va_range (uvm_va_range.c):
 * NV_OK if a range starts at base and ends at base + length exactly, else
 * NV_ERR_INVALID_ADDRESS.  nvsim's ranges: external ranges and semaphore
 * pools (managed mmaps are not searched: simplified).  Under nvsim.lock.
 */
static NV_STATUS nvsim_uvm_validate_va_range(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_VALIDATE_VA_RANGE_PARAMS *p = buf;
	struct nvsim_uvm_xrange *r = nvsim_uvm_xrange_find(nvfp, p->base);

	lockdep_assert_held(&nvsim.lock);
	return r && r->start == p->base && r->end + 1 == p->base + p->length ?
	       NV_OK : NV_ERR_INVALID_ADDRESS;
}

/* uvm_ioctl.h */
#define NVSIM_UVM_MAP_DYNAMIC_PARALLELISM_REGION 65
typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NvU8 gpuUuid[NV_UUID_LEN];
	NV_STATUS rmStatus;
	NvU32 _pad0;
} NVSIM_UVM_MAP_DYNAMIC_PARALLELISM_REGION_PARAMS;

/*
 * UVM_MAP_DYNAMIC_PARALLELISM_REGION: uvm_api_map_dynamic_parallelism_region,
 * uvm_map_sked_reflected_range (uvm_va_range.c): a range not 4K-aligned,
 * at 0, empty or wrapping NV_ERR_INVALID_ADDRESS; a GPU without a VA space
 * in this file NV_ERR_INVALID_DEVICE; past the GPU's VA bits
 * NV_ERR_OUT_OF_RANGE (uvm_gpu_can_address); not exactly one GPU page (a
 * power of two, aligned to itself, a size the page tables have: 4K, 64K,
 * 2M, 512M on Hopper, 4K, 64K, 2M on Ampere) NV_ERR_INVALID_ADDRESS; an
 * overlap NV_ERR_UVM_ADDRESS_IN_USE.  The range maps the GPU's SKED
 * reflected window, which nvsim does not have (it runs no kernels): the
 * range is recorded, nothing is behind it.  UVM_FREE frees it.  Under
 * nvsim.lock.
 */
static NV_STATUS nvsim_uvm_map_dp_region(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_MAP_DYNAMIC_PARALLELISM_REGION_PARAMS *p = buf;
	struct nvsim_uvm_xrange *r;
	struct nvsim_gpu *gpu;
	u64 end, len = p->length;
	bool page;

	lockdep_assert_held(&nvsim.lock);
	if (nvsim_uvm_range_invalid_4k(p->base, p->length))
		return NV_ERR_INVALID_ADDRESS;
	gpu = nvsim_uvm_gpu_by_uuid(p->gpuUuid);
	if (!gpu || !nvfp->uvm_vas[gpu->index].hClient)
		return NVSIM_NV_ERR_INVALID_DEVICE;
	end = p->base + p->length - 1;
	if (end >> nvsim_arch->va_bits)
		return NV_ERR_OUT_OF_RANGE;
	page = len == SZ_4K || len == SZ_64K || len == SZ_2M ||
	       (len == SZ_512M && !strcmp(nvsim_arch->chip, "GH100"));
	if (!page || !IS_ALIGNED(p->base, len))
		return NV_ERR_INVALID_ADDRESS;
	list_for_each_entry(r, &nvfp->uvm_xranges, node)
		if (p->base <= r->end && end >= r->start)
			return NV_ERR_UVM_ADDRESS_IN_USE;
	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r)
		return NV_ERR_NO_MEMORY;
	r->start = p->base;
	r->end = end;
	r->sked = true;
	spin_lock(&nvfp->ctx_lock);
	list_add_tail(&r->node, &nvfp->uvm_xranges);
	spin_unlock(&nvfp->ctx_lock);
	return NV_OK;
}

/* uvm_ioctl.h (595.45.04: UVM_MAX_GPUS 256; 535's array is 32 long) */
#define NVSIM_UVM_ALLOC_SEMAPHORE_POOL  68
typedef struct {
	NvU64 base NV_ALIGN8;
	NvU64 length NV_ALIGN8;
	NvU8 perGpuAttributes[NVSIM_UVM_MAX_GPUS * NVSIM_UVM_MAP_ATTR_SIZE];
	NvU64 gpuAttributesCount NV_ALIGN8;
	NV_STATUS rmStatus;
	NvU32 _pad0;
} NVSIM_UVM_ALLOC_SEMAPHORE_POOL_PARAMS;

/*
 * UVM_ALLOC_SEMAPHORE_POOL: uvm_api_alloc_semaphore_pool and
 * uvm_va_range_create_semaphore_pool (kernel-open/nvidia-uvm/
 * uvm_va_range.c): a range not page-aligned, at 0, empty or wrapping is
 * NV_ERR_INVALID_ADDRESS (uvm_api_range_invalid); more GPU attributes than
 * the release's UVM_MAX_GPUS NV_ERR_INVALID_ARGUMENT; a range overlapping
 * another NV_ERR_UVM_ADDRESS_IN_USE (uvm_va_range_alloc_reclaim, the range
 * tree); a GPU of the attributes UVM does not know NV_ERR_INVALID_DEVICE
 * (uvm_mem_translate_gpu_attributes; nvsim: one it does not simulate).
 * The pool is zeroed system memory (uvm_mem_alloc, zero = true), mapped
 * on every GPU with a VA space registered in this file at the same VA
 * (va_range_add_gpu_va_space_semaphore_pool), so the engine's semaphore
 * releases land in it (pbdma.c), and for the CPU by an mmap() of the UVM
 * file over exactly the range (uvm_mmap: the range exists, so the mmap
 * only maps the pool: uvm_mem_map_cpu_user).  UVM_FREE of its start frees
 * it.  Simplified: the attributes' protection and caching are not kept,
 * a GPU registered after the pool does not get it mapped, and managed
 * ranges are not in the overlap check.  NVIDIA's libcuda 535 makes one
 * at cuCtxCreate.  Under nvsim.lock.
 */
static NV_STATUS nvsim_uvm_alloc_semaphore_pool(struct nvsim_file *nvfp,
						void *buf)
{
	NVSIM_UVM_ALLOC_SEMAPHORE_POOL_PARAMS *p = buf;
	u32 size = nvsim_rel_size(NVREL_UVM, NVSIM_UVM_ALLOC_SEMAPHORE_POOL, sizeof(*p));
	u64 max = (size - 32) / NVSIM_UVM_MAP_ATTR_SIZE, end, i;
	struct nvsim_uvm_xrange *r;
	struct nvsim_mem *mem;
	NV_STATUS status;

	lockdep_assert_held(&nvsim.lock);
	if (!PAGE_ALIGNED(p->base) || !PAGE_ALIGNED(p->length) || !p->base ||
	    !p->length || p->base + p->length < p->base)
		return NV_ERR_INVALID_ADDRESS;
	if (p->gpuAttributesCount > max)
		return NV_ERR_INVALID_ARGUMENT;
	end = p->base + p->length - 1;
	list_for_each_entry(r, &nvfp->uvm_xranges, node)
		if (p->base <= r->end && end >= r->start)
			return NV_ERR_UVM_ADDRESS_IN_USE;
	for (i = 0; i < p->gpuAttributesCount; i++)
		if (!nvsim_uvm_gpu_by_uuid(p->perGpuAttributes + i * NVSIM_UVM_MAP_ATTR_SIZE))
			return NVSIM_NV_ERR_INVALID_DEVICE;

	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r)
		return NV_ERR_NO_MEMORY;
	status = nvsim_mem_create(&nvsim.gpus[0], NV01_MEMORY_SYSTEM, p->length,
				  current->tgid, &mem);
	if (status != NV_OK) {
		kfree(r);
		return status;
	}
	r->start = p->base;
	r->end = end;
	r->pool = mem;
	r->store = nvsim_mem_store(mem);
	if (!r->store) {
		nvsim_mem_put(mem);
		kfree(r);
		return NV_ERR_NO_MEMORY;
	}
	nvsim_store_get(r->store);
	spin_lock(&nvfp->ctx_lock);
	list_add_tail(&r->node, &nvfp->uvm_xranges);
	spin_unlock(&nvfp->ctx_lock);
	for (i = 0; i < nvsim.num_gpus && status == NV_OK; i++)
		if (nvfp->uvm_vas[i].hClient)
			status = nvsim_uvm_ext_add_at(nvfp, p->base, p->length, 0,
						      mem, &nvsim.gpus[i]);
	if (status != NV_OK) {
		struct nvsim_uvm_ext *ext, *tmp;

		list_for_each_entry_safe(ext, tmp, &nvfp->uvm_ext, node)
			if (ext->base >= r->start && ext->base <= r->end)
				nvsim_uvm_ext_free(ext);
		nvsim_uvm_xrange_del(nvfp, r);
	}
	return status;
}

/*
 * UVM_REGISTER_CHANNEL: uvm_api_register_channel, uvm_user_channel_create
 * (kernel-open/nvidia-uvm/uvm_user_channel.c): the GPU must have a VA space
 * registered in this file (NV_ERR_INVALID_DEVICE); rmCtrlFd is ignored
 * there too ("(void)user_channel->user_rm_channel.rm_control_fd", bug
 * 1624521) and RM retains the channel by client and handle
 * (nvUvmInterfaceRetainChannel): a client or channel nvsim does not find
 * is NV_ERR_INVALID_OBJECT_HANDLE (chosen: RM's exact code not read).
 * Nothing is recorded: the channel's own VA ranges are not modelled.
 */
static NV_STATUS nvsim_uvm_register_channel(struct nvsim_file *nvfp, void *buf)
{
	UVM_REGISTER_CHANNEL_PARAMS *p = buf;
	struct nvsim_client *client;
	struct nvsim_object *obj;
	struct nvsim_gpu *gpu;

	lockdep_assert_held(&nvsim.lock);
	gpu = nvsim_uvm_gpu_by_uuid(p->gpuUuid);
	if (!gpu || !nvfp->uvm_vas[gpu->index].hClient)
		return NVSIM_NV_ERR_INVALID_DEVICE;
	client = xa_load(&nvsim.clients, p->hClient);
	obj = client ? nvsim_object_find(client, p->hChannel) : NULL;
	if (!obj || obj->type != NVSIM_OBJ_CHANNEL || obj->gpu != gpu)
		return NV_ERR_INVALID_OBJECT_HANDLE;
	return NV_OK;
}

/**
 * struct nvsim_uvm_cmd - one UVM command
 * @cmd: the command number
 * @size: its parameter struct's size
 * @status_off: offset of rmStatus in it
 * @init_check: refuse before UVM_INITIALIZE
 * @locked: run the handler under nvsim.lock (handlers that resolve
 *	descriptors take the lock themselves, after fget)
 * @fn: the handler
 * @head: @tail: where the release's struct has another size than
 *	595.45.04's, the bytes that stay at its start and at its end (what lies
 *	between grew with UVM_MAX_GPUS, or is a member the release lacks);
 *	0: the struct has the same size in every release
 */
struct nvsim_uvm_cmd {
	u32 cmd;
	u32 size;
	u32 status_off;
	bool init_check;
	bool locked;
	NV_STATUS (*fn)(struct nvsim_file *nvfp, void *buf);
	u32 head, tail;
};

#define UVM_CMD(c, t, check, lock, f) \
	{ c, sizeof(t), offsetof(t, rmStatus), check, lock, f }
#define UVM_CMD_ENDS(c, t, check, lock, f, h, tl) \
	{ c, sizeof(t), offsetof(t, rmStatus), check, lock, f, h, tl }

static const struct nvsim_uvm_cmd nvsim_uvm_cmds[] = {
	UVM_CMD(UVM_INITIALIZE, UVM_INITIALIZE_PARAMS, false, true,
		nvsim_uvm_initialize),
	UVM_CMD(UVM_MM_INITIALIZE, UVM_MM_INITIALIZE_PARAMS, false, false,
		nvsim_uvm_mm_initialize),
	UVM_CMD(UVM_REGISTER_GPU, UVM_REGISTER_GPU_PARAMS, true, true,
		nvsim_uvm_register_gpu),
	UVM_CMD(UVM_REGISTER_GPU_VASPACE, UVM_REGISTER_GPU_VASPACE_PARAMS, true,
		false, nvsim_uvm_register_vaspace),
	/* base, length, offset | gpuAttributesCount, rmCtrlFd, hClient, hMemory, rmStatus */
	UVM_CMD_ENDS(UVM_MAP_EXTERNAL_ALLOCATION, UVM_MAP_EXTERNAL_ALLOCATION_PARAMS,
		     true, false, nvsim_uvm_map_external, 24, 24),
	/* base | rmStatus and padding (a length between them up to 580) */
	UVM_CMD_ENDS(UVM_FREE, UVM_FREE_PARAMS, true, false, nvsim_uvm_free, 8, 8),
	UVM_CMD(UVM_MIGRATE, UVM_MIGRATE_PARAMS, true, false, nvsim_uvm_ok),
	UVM_CMD(NVSIM_UVM_CREATE_EXTERNAL_RANGE,
		NVSIM_UVM_CREATE_EXTERNAL_RANGE_PARAMS, true, true,
		nvsim_uvm_create_external_range),
	UVM_CMD(UVM_REGISTER_CHANNEL, UVM_REGISTER_CHANNEL_PARAMS, true,
		true, nvsim_uvm_register_channel),
	UVM_CMD(UVM_UNMAP_EXTERNAL, UVM_UNMAP_EXTERNAL_PARAMS, true, true,
		nvsim_uvm_unmap_external),
	UVM_CMD(NVSIM_UVM_PAGEABLE_MEM_ACCESS, NVSIM_UVM_PAGEABLE_MEM_ACCESS_PARAMS,
		true, false, nvsim_uvm_pageable_mem_access),
	UVM_CMD(NVSIM_UVM_CREATE_RANGE_GROUP, NVSIM_UVM_RANGE_GROUP_PARAMS,
		true, true, nvsim_uvm_create_range_group),
	UVM_CMD(NVSIM_UVM_DESTROY_RANGE_GROUP, NVSIM_UVM_RANGE_GROUP_PARAMS,
		true, true, nvsim_uvm_destroy_range_group),
	UVM_CMD(NVSIM_UVM_UNREGISTER_GPU, NVSIM_UVM_UNREGISTER_GPU_PARAMS,
		true, true, nvsim_uvm_unregister_gpu),
	UVM_CMD(NVSIM_UVM_ENABLE_PEER_ACCESS, NVSIM_UVM_PEER_ACCESS_PARAMS,
		true, true, nvsim_uvm_enable_peer_access),
	UVM_CMD(NVSIM_UVM_DISABLE_PEER_ACCESS, NVSIM_UVM_PEER_ACCESS_PARAMS,
		true, true, nvsim_uvm_disable_peer_access),
	UVM_CMD(NVSIM_UVM_MAP_DYNAMIC_PARALLELISM_REGION,
		NVSIM_UVM_MAP_DYNAMIC_PARALLELISM_REGION_PARAMS, true, true,
		nvsim_uvm_map_dp_region),
	UVM_CMD(NVSIM_UVM_VALIDATE_VA_RANGE, NVSIM_UVM_VALIDATE_VA_RANGE_PARAMS,
		true, true, nvsim_uvm_validate_va_range),
	/* base, length | gpuAttributesCount, rmStatus and padding */
	UVM_CMD_ENDS(NVSIM_UVM_ALLOC_SEMAPHORE_POOL,
		     NVSIM_UVM_ALLOC_SEMAPHORE_POOL_PARAMS, true, true,
		     nvsim_uvm_alloc_semaphore_pool, 16, 16),
};

static long nvsim_uvm_ioctl(struct file *filp, unsigned int cmd,
			    unsigned long arg)
{
	struct nvsim_file *nvfp = filp->private_data;
	void __user *uptr = (void __user *)arg;
	const struct nvsim_uvm_cmd *c = NULL;
	NV_STATUS status = NV_OK, injected;
	bool initialized;
	size_t i;
	void *buf = NULL, *rel = NULL;
	u32 size, mid;
	long ret = 0;

	if (cmd == UVM_DEINITIALIZE)
		return 0;
	for (i = 0; i < ARRAY_SIZE(nvsim_uvm_cmds); i++)
		if (nvsim_uvm_cmds[i].cmd == cmd)
			c = &nvsim_uvm_cmds[i];
	if (!c)
		return -EINVAL;

	nvsim_test_delay(cmd, true);
	/* The release's struct, seen by the handlers as 595.45.04's. */
	size = nvsim_rel_size(NVREL_UVM, cmd, c->size);
	if (size != c->size && (!c->tail || size < c->head + c->tail))
		return -EINVAL;
	buf = kzalloc(c->size, GFP_KERNEL_ACCOUNT);
	rel = kzalloc(size, GFP_KERNEL_ACCOUNT);
	if (!buf || !rel) {
		ret = -ENOMEM;
		goto out;
	}
	if (copy_from_user(rel, uptr, size)) {
		ret = -EFAULT;
		goto out;
	}
	/*
	 * Another release's size: the head and the tail are where they are in
	 * 595.45.04's struct, and what lies between (MAP_EXTERNAL's
	 * perGpuAttributes, an array that grew with UVM_MAX_GPUS) starts at
	 * the head in both: as much of it as both have.
	 */
	mid = min(size, c->size) - c->head - c->tail;
	if (size == c->size) {
		memcpy(buf, rel, size);
	} else {
		memcpy(buf, rel, c->head + mid);
		memcpy(buf + c->size - c->tail, rel + size - c->tail, c->tail);
	}

	/*
	 * Injected (fault.c): the handler's status, as uvm_api_*() failing
	 * before it changes anything (uvm.c, uvm_ioctl()); it does not run.
	 */
	injected = nvsim_fault_rm(NVSIM_FK_UVM, cmd, NULL);
	mutex_lock(&nvsim.lock);
	initialized = nvfp->uvm_initialized;
	if (injected)
		status = injected;
	else if (c->init_check && !initialized)
		status = NV_ERR_ILLEGAL_ACTION;
	else if (c->locked)
		status = c->fn(nvfp, buf);
	mutex_unlock(&nvsim.lock);
	if (!injected && (!c->init_check || initialized) && !c->locked)
		status = c->fn(nvfp, buf);

	memcpy(buf + c->status_off, &status, sizeof(status));
	if (size == c->size) {
		memcpy(rel, buf, size);
	} else {
		memcpy(rel, buf, c->head + mid);
		memcpy(rel + size - c->tail, buf + c->size - c->tail, c->tail);
	}
	if (copy_to_user(uptr, rel, size))
		ret = -EFAULT;
	nvsim_test_delay_out(cmd, true);
out:
	kfree(rel);
	kfree(buf);
	return ret;
}

static int nvsim_uvm_open(struct inode *inode, struct file *filp)
{
	struct nvsim_file *nvfp;
	int ret;

	ret = nvsim_fault_errno(NVSIM_FK_UVM_OPEN, 0);
	if (ret)
		return ret;
	nvfp = nvsim_file_alloc(filp, NVSIM_FILE_UVM);
	if (!nvfp)
		return -ENOMEM;
	nvsim_cuda_uvm_file_init(nvfp);
	filp->private_data = nvfp;
	return 0;
}

static int nvsim_uvm_release(struct inode *inode, struct file *filp)
{
	struct nvsim_file *nvfp = filp->private_data;

	nvsim_file_release_rm(nvfp);
	nvsim_cuda_uvm_file_fini(nvfp);
	nvsim_uvm_peers_fini(nvfp);
	nvsim_file_free(nvfp);
	return 0;
}

const struct file_operations nvsim_uvm_fops = {
	.owner = THIS_MODULE,
	.open = nvsim_uvm_open,
	.release = nvsim_uvm_release,
	.unlocked_ioctl = nvsim_uvm_ioctl,
	.mmap = nvsim_uvm_mmap,
	.llseek = noop_llseek,
};

int nvsim_uvm_init(void)
{
	int ret;

	ret = alloc_chrdev_region(&nvsim_uvm_devt, 0, 1, "nvidia-uvm");
	if (ret)
		return ret;

	cdev_init(&nvsim_uvm_cdev, &nvsim_uvm_fops);
	nvsim_uvm_cdev.owner = THIS_MODULE;
	ret = cdev_add(&nvsim_uvm_cdev, nvsim_uvm_devt, 1);
	if (ret)
		goto err_region;

	nvsim_uvm_dev = device_create(nvsim_class(), NULL, nvsim_uvm_devt, NULL,
				      "nvidia-uvm");
	if (IS_ERR(nvsim_uvm_dev)) {
		ret = PTR_ERR(nvsim_uvm_dev);
		goto err_cdev;
	}
	return 0;

err_cdev:
	cdev_del(&nvsim_uvm_cdev);
err_region:
	unregister_chrdev_region(nvsim_uvm_devt, 1);
	return ret;
}

void nvsim_uvm_exit(void)
{
	device_destroy(nvsim_class(), nvsim_uvm_devt);
	cdev_del(&nvsim_uvm_cdev);
	unregister_chrdev_region(nvsim_uvm_devt, 1);
}
