// SPDX-License-Identifier: GPL-2.0
/*
 * mmap.c - RM_MAP_MEMORY / RM_UNMAP_MEMORY, mapping contexts and mmap().
 *
 * The real driver's protocol: open a new file on /dev/nvidiaN (device memory,
 * registers) or /dev/nvidiactl (system memory), name it in RM_MAP_MEMORY, which
 * attaches one mapping context to that file, then mmap() the file at offset 0.
 * pLinearAddress is an opaque cookie, not the user address.
 *
 * Backing: with fb_backing=1, device and system memory map the object's
 * store (store.c): pages made on first touch, shared by every mapping of the
 * object and by the engine (which reaches them at GPU VAs), as FB is, and
 * freed with the store.  Without it (the default, the older model some
 * tests still assert), each mmap gets zeroed pages of its own, allocated at
 * mmap() time for the mapped length and freed when its last VMA goes; the
 * engine then sees none of what the CPU wrote.  The usermode region is one fixed
 * set of pages per GPU (gpu.c), mapped as a PFN map the way the real driver
 * maps registers, with a fault handler that reinserts pages so that a layer
 * which zaps the mapping, or wraps vm_ops, sees the real driver's shape.
 *
 * A channel (hMemory = the channel) maps as two pages, USERD then the GPFIFO
 * ring, shared with the engine: the context and every mmap hold references
 * on the pages, so they outlive a channel freed while mapped.  Kernel
 * callers (NV04_MAP_MEMORY through nvidia_get_rm_ops) get the kernel address
 * of the USERD page, pinned until NV04_UNMAP_MEMORY; these count in
 * nvsim.nr_mappings like any other mapping.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/file.h>
#include <linux/sched.h>
#include <linux/refcount.h>

#include "nvsim.h"

/* One mmap()ed area, shared by the VMAs split or copied from it. */
struct nvsim_vmap {
	refcount_t refs;
	enum nvsim_map_kind kind;
	struct nvsim_gpu *gpu;
	unsigned long first_page;       /* first page index into the object */
	struct nvsim_store *store;      /* memory: the object's, a reference */
	void *vbuf;                     /* memory without fb_backing: vmalloc_user() */
	struct page *pages[NVSIM_CHANNEL_MAP_PAGES]; /* channel: references */
};

static void nvsim_pages_put(struct page **pages)
{
	unsigned int i;

	for (i = 0; i < NVSIM_CHANNEL_MAP_PAGES; i++)
		if (pages[i])
			put_page(pages[i]);
}

static void nvsim_pages_get(struct page **pages)
{
	unsigned int i;

	for (i = 0; i < NVSIM_CHANNEL_MAP_PAGES; i++)
		if (pages[i])
			get_page(pages[i]);
}

static void nvsim_vmap_put(struct nvsim_vmap *vm)
{
	if (!refcount_dec_and_test(&vm->refs))
		return;
	nvsim_pages_put(vm->pages);
	nvsim_store_put(vm->store);
	vfree(vm->vbuf);
	kfree(vm);
	atomic_dec(&nvsim.nr_mappings);
}

static void nvsim_vm_open(struct vm_area_struct *vma)
{
	struct nvsim_vmap *vm = vma->vm_private_data;

	refcount_inc(&vm->refs);
}

static void nvsim_vm_close(struct vm_area_struct *vma)
{
	nvsim_vmap_put(vma->vm_private_data);
}

/*
 * Reached only when the pages were zapped behind our back (or by a layer
 * that revokes mappings): put the same page back.  Takes no nvsim lock.
 */
static vm_fault_t nvsim_vm_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct nvsim_vmap *vm = vma->vm_private_data;
	unsigned long pgoff = vmf->pgoff; /* vm_pgoff starts at 0 */
	unsigned long npages = vma_pages(vma) + vma->vm_pgoff;
	struct page *page;

	if (pgoff >= npages)
		return VM_FAULT_SIGBUS;

	if (vm->kind == NVSIM_MAP_USERMODE) {
		unsigned long idx = vm->first_page + pgoff;

		if (idx >= NVC361_USERMODE_REGION_SIZE >> PAGE_SHIFT)
			return VM_FAULT_SIGBUS;
		return vmf_insert_pfn(vma, vmf->address,
				      page_to_pfn(vm->gpu->usermode) + idx);
	}

	if (vm->kind == NVSIM_MAP_CHANNEL) {
		unsigned long idx = vm->first_page + pgoff;

		if (idx >= NVSIM_CHANNEL_MAP_PAGES)
			return VM_FAULT_SIGBUS;
		page = vm->pages[idx];
		get_page(page);
		vmf->page = page;
		return 0;
	}

	/* Memory: the store's page, made on first touch (may sleep). */
	if (vm->store)
		page = nvsim_store_page(vm->store, vm->first_page + pgoff);
	else
		page = vmalloc_to_page(vm->vbuf + (pgoff << PAGE_SHIFT));
	if (!page)
		return VM_FAULT_SIGBUS;
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct nvsim_vm_ops = {
	.open = nvsim_vm_open,
	.close = nvsim_vm_close,
	.fault = nvsim_vm_fault,
};

/* The page-aligned span a context covers, as nv_align_mmap_offset_length. */
static u64 nvsim_ctx_span(const struct nvsim_mapctx *ctx)
{
	return PAGE_ALIGN((ctx->offset & ~PAGE_MASK) + ctx->length);
}

int nvsim_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct nvsim_file *nvfp = filp->private_data;
	unsigned long len = vma->vm_end - vma->vm_start;
	struct nvsim_mapctx ctx;
	struct nvsim_vmap *vm;
	int ret;

	if (vma->vm_pgoff != 0)
		return -EINVAL;
	/* Injected (fault.c): as nvidia_mmap() failing with nothing mapped. */
	ret = nvsim_fault_errno(NVSIM_FK_MMAP, 0);
	if (ret)
		return ret;

	vm = kzalloc(sizeof(*vm), GFP_KERNEL_ACCOUNT);
	if (!vm)
		return -ENOMEM;
	refcount_set(&vm->refs, 1);

	/* The channel's pages are pinned for this mapping before ctx_lock goes. */
	spin_lock(&nvfp->ctx_lock);
	ctx = nvfp->ctx;
	if (ctx.valid && ctx.kind == NVSIM_MAP_CHANNEL) {
		memcpy(vm->pages, ctx.pages, sizeof(vm->pages));
		nvsim_pages_get(vm->pages);
	}
	if (ctx.valid && ctx.store) {
		vm->store = ctx.store;
		nvsim_store_get(vm->store);
	}
	spin_unlock(&nvfp->ctx_lock);

	ret = -EINVAL;
	if (!ctx.valid)
		goto err_free;
	if (nvfp->kind == NVSIM_FILE_GPU ? len != nvsim_ctx_span(&ctx) :
					   len > nvsim_ctx_span(&ctx))
		goto err_free;

	vm->kind = ctx.kind;
	vm->gpu = ctx.gpu;

	if (ctx.kind == NVSIM_MAP_USERMODE) {
		/*
		 * Registers: shared only (a private COW copy of a register
		 * page makes no sense, and remap_pfn_range would rewrite
		 * vm_pgoff, which the fault handler relies on).
		 */
		if (!(vma->vm_flags & VM_SHARED)) {
			ret = -EINVAL;
			goto err_free;
		}
		vm->first_page = ctx.offset >> PAGE_SHIFT;
		nvsim_gpu_update_timer(ctx.gpu);
		vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP;
		ret = remap_pfn_range(vma, vma->vm_start,
				      page_to_pfn(ctx.gpu->usermode) +
				      vm->first_page,
				      len, vma->vm_page_prot);
		if (ret)
			goto err_free;
	} else if (ctx.kind == NVSIM_MAP_CHANNEL) {
		unsigned long i;

		/* Shared with the engine: a private COW copy would not be. */
		if (!(vma->vm_flags & VM_SHARED)) {
			ret = -EINVAL;
			goto err_free;
		}
		vm->first_page = ctx.offset >> PAGE_SHIFT;
		vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP;
		for (i = 0; i < vma_pages(vma); i++) {
			ret = vm_insert_page(vma, vma->vm_start + i * PAGE_SIZE,
					     vm->pages[vm->first_page + i]);
			if (ret)
				goto err_free;
		}
	} else {
		if (vm->store) {
			/*
			 * Faulted in page by page (nvsim_vm_fault), bounded by
			 * the stores' own limit (store.c), so any length the
			 * object has: NVIDIA's libcuda maps a 104 MiB system
			 * memory object at cuCtxCreate.
			 */
			vm->first_page = ctx.offset >> PAGE_SHIFT;
			vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP;
		} else {
			/* Allocated whole at mmap(): nvsim's own bound. */
			if (len > NVSIM_MAX_MMAP_BYTES) {
				ret = -ENOMEM;
				goto err_free;
			}
			vm->vbuf = vmalloc_user(len);
			if (!vm->vbuf) {
				ret = -ENOMEM;
				goto err_free;
			}
			ret = remap_vmalloc_range(vma, vm->vbuf, 0);
			if (ret)
				goto err_free;
		}
	}

	vma->vm_private_data = vm;
	vma->vm_ops = &nvsim_vm_ops;
	atomic_inc(&nvsim.nr_mappings);
	return 0;

err_free:
	nvsim_pages_put(vm->pages);
	nvsim_store_put(vm->store);
	vfree(vm->vbuf);
	kfree(vm);
	return ret;
}

/* ----------------------------------------------------- mapping contexts */

static void nvsim_ctx_set(struct nvsim_file *target,
			  const struct nvsim_mapctx *ctx)
{
	lockdep_assert_held(&nvsim.lock);

	spin_lock(&target->ctx_lock);
	target->ctx = *ctx;
	spin_unlock(&target->ctx_lock);
	list_add_tail(&target->ctx_node, &nvsim.ctx_files);
	atomic_inc(&nvsim.nr_mappings);
}

/**
 * nvsim_mapctx_clear - drop a file's mapping context, if it has one
 * @nvfp: the file
 *
 * mmap()s already made stay; only new ones are refused.
 */
void nvsim_mapctx_clear(struct nvsim_file *nvfp)
{
	lockdep_assert_held(&nvsim.lock);

	if (!nvfp->ctx.valid)
		return;
	spin_lock(&nvfp->ctx_lock);
	nvfp->ctx.valid = false;
	spin_unlock(&nvfp->ctx_lock);
	nvsim_pages_put(nvfp->ctx.pages);
	memset(nvfp->ctx.pages, 0, sizeof(nvfp->ctx.pages));
	nvsim_store_put(nvfp->ctx.store);
	nvfp->ctx.store = NULL;
	list_del_init(&nvfp->ctx_node);
	atomic_dec(&nvsim.nr_mappings);
}

/*
 * Validate a mapping of hMemory through hDevice and describe it in @ctx.
 * hDevice may be a device, a subdevice, or the client itself (system memory).
 */
static NV_STATUS nvsim_map_validate(const struct nvsim_call *call,
				    struct nvsim_client *client,
				    NvHandle hDevice, NvHandle hMemory,
				    u64 offset, u64 length,
				    struct nvsim_mapctx *ctx)
{
	struct nvsim_object *dev, *mem;
	u64 end, size;

	dev = nvsim_object_find(client, hDevice);
	if (!dev)
		return NV_ERR_INVALID_OBJECT_HANDLE;
	if (dev->type != NVSIM_OBJ_DEVICE && dev->type != NVSIM_OBJ_SUBDEVICE &&
	    dev->type != NVSIM_OBJ_CLIENT)
		return NV_ERR_INVALID_OBJECT_HANDLE;

	mem = nvsim_object_find(client, hMemory);
	if (!mem)
		return NV_ERR_INVALID_OBJECT_HANDLE;

	switch (mem->type) {
	case NVSIM_OBJ_MEMORY:
		if (mem->hclass == NV01_MEMORY_VIRTUAL ||
		    mem->hclass == NV50_MEMORY_VIRTUAL)
			return NV_ERR_NOT_SUPPORTED;    /* no CPU pages behind */
		/*
		 * mapping_cpu.c: an OS descriptor of user pages may not be
		 * CPU-mapped (only file-handle descriptors may).
		 */
		if (mem->hclass == NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)
			return NV_ERR_NOT_SUPPORTED;
		size = mem->memory.mem->size;
		ctx->kind = mem->hclass == NV01_MEMORY_SYSTEM ?
			    NVSIM_MAP_SYSMEM : NVSIM_MAP_VIDMEM;
		if (nvsim_fb_backing) {
			ctx->store = nvsim_mem_store(mem->memory.mem);
			if (!ctx->store)
				return NV_ERR_NO_MEMORY;
		}
		break;
	case NVSIM_OBJ_USERMODE:
		size = NVC361_USERMODE_REGION_SIZE;
		ctx->kind = NVSIM_MAP_USERMODE;
		break;
	case NVSIM_OBJ_CHANNEL:
		size = NVSIM_CHANNEL_MAP_PAGES * PAGE_SIZE;
		ctx->kind = NVSIM_MAP_CHANNEL;
		ctx->pages[0] = mem->channel.ch->userd;
		ctx->pages[1] = mem->channel.ch->ring;
		/*
		 * kchannelMap_TU102 (arch/turing/kernel_channel_tu102.c): a
		 * channel whose USERD the client allocated cannot be mapped
		 * ("NV_ASSERT_OR_RETURN(!bClientAllocatedUserD,
		 * NV_ERR_INVALID_REQUEST)"): its USERD is the client's memory,
		 * mapped as memory.
		 */
		if (mem->channel.ch->pb)
			return NVSIM_NV_ERR_INVALID_REQUEST;
		break;
	default:
		return NV_ERR_INVALID_OBJECT_HANDLE;
	}

	/* Device memory is reached through a device of its own GPU. */
	if (ctx->kind != NVSIM_MAP_SYSMEM &&
	    (dev->type == NVSIM_OBJ_CLIENT || dev->gpu != mem->gpu))
		return NV_ERR_INVALID_ARGUMENT;

	if (length == 0 || check_add_overflow(offset, length, &end) ||
	    end > size)
		return NV_ERR_INVALID_ARGUMENT;

	ctx->gpu = mem->gpu;
	ctx->offset = offset;
	ctx->length = length;
	ctx->hClient = client->handle;
	ctx->hMemory = hMemory;
	return NV_OK;
}

/* Attach @ctx to the file @fd names, which must be of the matching kind. */
static NV_STATUS nvsim_ctx_attach(struct nvsim_mapctx *ctx, int fd,
				  struct file **filp)
{
	struct nvsim_file *target;
	unsigned int kind = ctx->kind == NVSIM_MAP_SYSMEM ?
			    NVSIM_KIND(NVSIM_FILE_CTL) :
			    NVSIM_KIND(NVSIM_FILE_GPU);

	*filp = nvsim_fget(fd, kind, &target);
	if (!*filp)
		return NV_ERR_INVALID_ARGUMENT;
	if (target->ctx.valid)
		return NV_ERR_STATE_IN_USE;

	ctx->cookie = ++nvsim.next_cookie << PAGE_SHIFT;
	ctx->valid = true;
	if (ctx->kind == NVSIM_MAP_CHANNEL)
		nvsim_pages_get(ctx->pages);
	nvsim_store_get(ctx->store);
	nvsim_ctx_set(target, ctx);
	return NV_OK;
}

/**
 * nvsim_create_mmap_context - rm_create_mmap_context() of the real driver
 * @call: the caller (user only)
 * @hClient: the client, which must belong to the calling process
 * @hDevice: device, subdevice or the client
 * @hMemory: memory or usermode object
 * @offset: into the object
 * @length: bytes
 * @fd: the file (in the caller's table) that receives the context
 * @cookie: returns pLinearAddress
 */
NV_STATUS nvsim_create_mmap_context(const struct nvsim_call *call,
				   NvHandle hClient, NvHandle hDevice,
				   NvHandle hMemory, u64 offset, u64 length,
				   int fd, u64 *cookie)
{
	struct nvsim_mapctx ctx = {};
	struct nvsim_client *client;
	struct file *filp = NULL;
	NV_STATUS status;

	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, hClient, &client);
	if (status != NV_OK)
		goto out;
	if (client->tgid != task_tgid_nr(current)) {
		status = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	status = nvsim_map_validate(call, client, hDevice, hMemory, offset,
				    length, &ctx);
	if (status != NV_OK)
		goto out;
	status = nvsim_ctx_attach(&ctx, fd, &filp);
	if (status == NV_OK)
		*cookie = ctx.cookie;
out:
	mutex_unlock(&nvsim.lock);
	/* The last reference may be ours: release takes nvsim.lock. */
	if (filp)
		fput(filp);
	return status;
}

/**
 * nvsim_rm_map - NV_ESC_RM_MAP_MEMORY
 * @call: the caller
 * @p: the parameters; pLinearAddress returns the cookie
 * @fd: the embedded descriptor
 */
void nvsim_rm_map(const struct nvsim_call *call, NVOS33_PARAMETERS *p, int fd)
{
	u64 cookie = 0;

	/* Injected (fault.c): no mapping context, pLinearAddress untouched. */
	p->status = nvsim_fault_rm(NVSIM_FK_RM_MAP_MEMORY, 0, call);
	if (p->status != NV_OK)
		return;
	/* Kernel mappings are not simulated. */
	if (call->kernel) {
		p->status = NV_ERR_NOT_SUPPORTED;
		return;
	}
	p->status = nvsim_create_mmap_context(call, p->hClient, p->hDevice,
					      p->hMemory, p->offset, p->length,
					      fd, &cookie);
	if (p->status == NV_OK)
		p->pLinearAddress = cookie;
}

/**
 * nvsim_rm_unmap - NV_ESC_RM_UNMAP_MEMORY
 * @call: the caller
 * @p: the parameters; pLinearAddress names the context to drop
 *
 * Clears the mapping context; munmap() of what was mapped is the caller's.
 */
void nvsim_rm_unmap(const struct nvsim_call *call, NVOS34_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_file *f;
	NV_STATUS status;

	p->status = nvsim_fault_rm(NVSIM_FK_RM_UNMAP_MEMORY, 0, call);
	if (p->status != NV_OK)
		return;
	if (call->kernel) {
		p->status = NV_ERR_NOT_SUPPORTED;
		return;
	}

	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hClient, &client);
	if (status != NV_OK)
		goto out;
	if (!nvsim_object_find(client, p->hDevice) ||
	    !nvsim_object_find(client, p->hMemory)) {
		status = NV_ERR_INVALID_OBJECT_HANDLE;
		goto out;
	}
	status = NV_ERR_INVALID_ARGUMENT;
	list_for_each_entry(f, &nvsim.ctx_files, ctx_node) {
		if (f->ctx.cookie == p->pLinearAddress &&
		    f->ctx.hClient == p->hClient &&
		    f->ctx.hMemory == p->hMemory) {
			nvsim_mapctx_clear(f);
			status = NV_OK;
			break;
		}
	}
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}

/* ------------------------------------------------------ kernel mappings */

/**
 * nvsim_kernel_map - NV04_MAP_MEMORY from a kernel caller
 * @call: the caller (kernel)
 * @p: the parameters; pLinearAddress returns a kernel address
 *
 * Only a channel's USERD page (offset + length within it) is mapped:
 * vgpu.ko reads GP_GET/GP_PUT through it.  Other objects:
 * NV_ERR_NOT_SUPPORTED, as before.
 */
void nvsim_kernel_map(const struct nvsim_call *call, NVOS33_PARAMETERS *p)
{
	struct nvsim_mapctx ctx = {};
	struct nvsim_client *client;
	struct nvsim_kmap *km;
	NV_STATUS status;
	u64 end;

	p->status = nvsim_fault_rm(NVSIM_FK_RM_MAP_MEMORY, 0, call);
	if (p->status != NV_OK)
		return;
	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hClient, &client);
	if (status != NV_OK)
		goto out;
	status = nvsim_map_validate(call, client, p->hDevice, p->hMemory,
				    p->offset, p->length, &ctx);
	if (status != NV_OK)
		goto out;
	if (ctx.kind != NVSIM_MAP_CHANNEL) {
		status = NV_ERR_NOT_SUPPORTED;
		goto out;
	}
	if (check_add_overflow(p->offset, p->length, &end) || end > PAGE_SIZE) {
		status = NV_ERR_INVALID_ARGUMENT;
		goto out;
	}
	km = kzalloc(sizeof(*km), GFP_KERNEL_ACCOUNT);
	if (!km) {
		status = NV_ERR_NO_MEMORY;
		goto out;
	}
	/*
	 * A mapping of its own (the driver's is an ioremap of the BAR), so
	 * that it is really gone when the channel's free tears it down: a
	 * caller that reads it afterwards faults, as on the real driver.
	 */
	km->va = vmap(&ctx.pages[0], 1, VM_MAP, PAGE_KERNEL);
	if (!km->va) {
		kfree(km);
		status = NV_ERR_NO_MEMORY;
		goto out;
	}
	km->page = ctx.pages[0];
	get_page(km->page);
	km->hClient = p->hClient;
	km->ch = nvsim_object_find(client, p->hMemory)->channel.ch;
	km->addr = (u64)(uintptr_t)km->va + p->offset;
	list_add_tail(&km->node, &nvsim.kmaps);
	atomic_inc(&nvsim.nr_mappings);
	p->pLinearAddress = km->addr;
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}

static void nvsim_kmap_free(struct nvsim_kmap *km)
{
	list_del(&km->node);
	vunmap(km->va);
	put_page(km->page);
	kfree(km);
	atomic_dec(&nvsim.nr_mappings);
}

/*
 * The channel is freed (or invalidated as a dependant): its CPU mappings go
 * first, the kernel's included (clientFreeResource, rs_client.c:
 * clientUnmapResourceRefMappings before the resource is destructed).
 */
void nvsim_kmaps_drop_channel(struct nvsim_channel *ch)
{
	struct nvsim_kmap *km, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(km, tmp, &nvsim.kmaps, node)
		if (km->ch == ch)
			nvsim_kmap_free(km);
}

/**
 * nvsim_kernel_unmap - NV04_UNMAP_MEMORY from a kernel caller
 * @call: the caller (kernel)
 * @p: the parameters; pLinearAddress as returned by the map
 *
 * Only the address and client handle are matched.  A mapping the
 * channel's free tore down is not found: NV_ERR_INVALID_ARGUMENT.
 */
void nvsim_kernel_unmap(const struct nvsim_call *call, NVOS34_PARAMETERS *p)
{
	struct nvsim_kmap *km;
	NV_STATUS status = NV_ERR_INVALID_ARGUMENT;

	p->status = nvsim_fault_rm(NVSIM_FK_RM_UNMAP_MEMORY, 0, call);
	if (p->status != NV_OK)
		return;
	mutex_lock(&nvsim.lock);
	list_for_each_entry(km, &nvsim.kmaps, node) {
		if (km->addr == p->pLinearAddress && km->hClient == p->hClient) {
			nvsim_kmap_free(km);
			status = NV_OK;
			break;
		}
	}
	mutex_unlock(&nvsim.lock);
	p->status = status;
}

/* Module unload: kernel callers that never unmapped. */
void nvsim_kmaps_free(void)
{
	struct nvsim_kmap *km, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(km, tmp, &nvsim.kmaps, node)
		nvsim_kmap_free(km);
}
