// SPDX-License-Identifier: GPL-2.0
/*
 * memory.c - framebuffer accounting and the three FB allocation paths.
 *
 * FB is pure accounting: an allocation is a number charged to its GPU and to
 * the process that made it, never RAM.  (Pages appear only when something is
 * mmap()ed, see mmap.c.)  Sizes allocated through NV_MEMORY_ALLOCATION_PARAMS,
 * the vidheap or NVOS02's NV01_MEMORY_LOCAL_USER are rounded to the page as
 * RM rounds them (nvsim_rm_round, nvsim_rm_sysmem_round); NVOS02's
 * NV01_MEMORY_LOCAL_PRIVILEGED is counted to the byte (simplified: RM's
 * takes no size, _rmAllocMemoryLocalPrivileged).
 *
 * The paths: RM_ALLOC of a memory class (objects.c), RM_ALLOC_MEMORY
 * (NVOS02) and RM_VID_HEAP_CONTROL (NVOS32), all ending in
 * nvsim_alloc_memory_object().
 */
#include <linux/slab.h>
#include <linux/sched.h>
#include <linux/mm.h>
#include <linux/sizes.h>
#include <linux/overflow.h>

#include "nvsim.h"

static struct nvsim_pid_fb *nvsim_pid_fb_find(pid_t tgid, u32 gpu)
{
	struct nvsim_pid_fb *e;

	list_for_each_entry(e, &nvsim.pid_fb, node)
		if (e->tgid == tgid && e->gpu == gpu)
			return e;
	return NULL;
}

u64 nvsim_pid_fb_bytes(pid_t tgid, struct nvsim_gpu *gpu)
{
	struct nvsim_pid_fb *e;

	lockdep_assert_held(&nvsim.lock);
	e = nvsim_pid_fb_find(tgid, gpu->index);
	return e ? e->bytes : 0;
}

/**
 * nvsim_charge_tgid - the process an allocation is charged to
 * @call: the caller
 * @client: the client the allocation is made in
 *
 * A user caller pays for what it allocates; a kernel caller allocates on
 * behalf of the client's process.
 */
pid_t nvsim_charge_tgid(const struct nvsim_call *call,
			struct nvsim_client *client)
{
	return call->kernel ? client->tgid : task_tgid_nr(current);
}

/**
 * nvsim_mem_create - make a backing allocation, charging the FB
 * @gpu: the GPU
 * @hclass: the memory class (decides whether FB is charged)
 * @size: bytes
 * @tgid: the process to charge
 * @out: returns the allocation with one reference
 *
 * Return: NV_OK, or NV_ERR_NO_MEMORY when the GPU's FB is exhausted (what
 * CUDA reports as out of memory) or the kernel is out of memory.
 */
NV_STATUS nvsim_mem_create(struct nvsim_gpu *gpu, u32 hclass, u64 size,
			   pid_t tgid, struct nvsim_mem **out)
{
	struct nvsim_pid_fb *pe = NULL;
	struct nvsim_mem *mem;
	bool fb = nvsim_is_fb_class(hclass);

	lockdep_assert_held(&nvsim.lock);

	if (fb && size > gpu->fb_total - gpu->fb_used)
		return NV_ERR_NO_MEMORY;

	mem = kzalloc(sizeof(*mem), GFP_KERNEL_ACCOUNT);
	if (!mem)
		return NV_ERR_NO_MEMORY;

	if (fb && size) {
		pe = nvsim_pid_fb_find(tgid, gpu->index);
		if (!pe) {
			pe = kzalloc(sizeof(*pe), GFP_KERNEL_ACCOUNT);
			if (!pe) {
				kfree(mem);
				return NV_ERR_NO_MEMORY;
			}
			pe->tgid = tgid;
			pe->gpu = gpu->index;
			list_add_tail(&pe->node, &nvsim.pid_fb);
		}
		pe->bytes += size;
		gpu->fb_used += size;
	}

	mem->refs = 1;
	mem->gpu = gpu;
	mem->hclass = hclass;
	mem->size = size;
	mem->fb = fb;
	mem->tgid = tgid;
	*out = mem;
	return NV_OK;
}

void nvsim_mem_get(struct nvsim_mem *mem)
{
	lockdep_assert_held(&nvsim.lock);
	mem->refs++;
}

void nvsim_mem_put(struct nvsim_mem *mem)
{
	struct nvsim_pid_fb *pe;

	lockdep_assert_held(&nvsim.lock);
	if (WARN_ON(!mem->refs) || --mem->refs)
		return;

	if (mem->pinned) {
		/* os_unlock_user_pages: dirty what the GPU could write. */
		unpin_user_pages_dirty_lock(mem->pinned, mem->nr_pinned,
					    mem->pinned_writable);
		kvfree(mem->pinned);
	}
	nvsim_store_put(mem->store);
	if (mem->fb && mem->size) {
		mem->gpu->fb_used -= mem->size;
		pe = nvsim_pid_fb_find(mem->tgid, mem->gpu->index);
		if (!WARN_ON(!pe)) {
			pe->bytes -= mem->size;
			if (!pe->bytes) {
				list_del(&pe->node);
				kfree(pe);
			}
		}
	}
	kfree(mem);
}

/**
 * nvsim_rm_round - the size and attributes RM gives video memory
 * @size: in: the size asked for; out: rounded up to the page size
 * @attr: in/out: NVOS32 attr; PAGE_SIZE set to the page size chosen
 * @attr2: in/out: NVOS32 attr2; PAGE_SIZE_HUGE set for a huge page
 *
 * memmgrAllocResources_IMPL (mem_utils.c) -> memmgrDeterminePageSize_IMPL
 * (mem_mgr.c) picks the page size from attr's PAGE_SIZE (and attr2's
 * PAGE_SIZE_HUGE for HUGE: DEFAULT and 2MB are 2 MiB, 512MB is 512 MiB:
 * dmaNvos32ToPageSizeAttr, mem.c) and writes it back into the returned
 * attributes; a DEFAULT page size is 2 MiB from 2 MiB up (both simulated
 * chips have huge pages: kgmmuIsHugePageSupported), else BIG (every user
 * allocation names its client, hClient).  memmgrAllocDetermineAlignment_GM107
 * (arch/maxwell/mem_mgr_gm107.c) then rounds the size up to the page
 * (hwAlignment + 1), and vidmemConstruct (video_mem.c, vidmemAllocResources)
 * allocates and reports that size.  BIG is 64 KiB
 * (kgmmuGetMaxBigPageSize_GM107 without per-VA-space big pages, which RM
 * leaves off).  256GB pages are refused (no simulated GPU has them:
 * NV_ERR_INVALID_ARGUMENT, as memmgrAllocDetermineAlignment_GM107 without
 * kgmmuIsPageSize256gbSupported); compression is not modelled.  libcuda
 * makes UVM external ranges of the size returned, which UVM refuses
 * unless aligned (uvm_create_external_range: NV_ERR_INVALID_ADDRESS).
 */
NV_STATUS nvsim_rm_round(u64 *size, u32 *attr, u32 *attr2)
{
	u32 psz = (*attr >> NVOS32_ATTR_PAGE_SIZE_SHIFT) & NVOS32_ATTR_PAGE_SIZE_MASK;
	u32 huge = (*attr2 >> NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT) &
		   NVOS32_ATTR2_PAGE_SIZE_HUGE_MASK;
	u64 page, rounded;

	if (psz == NVOS32_ATTR_PAGE_SIZE_DEFAULT) {
		psz = *size >= SZ_2M ? NVOS32_ATTR_PAGE_SIZE_HUGE : NVOS32_ATTR_PAGE_SIZE_BIG;
		huge = NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB;
	}
	switch (psz) {
	case NVOS32_ATTR_PAGE_SIZE_4KB:
		page = SZ_4K;
		break;
	case NVOS32_ATTR_PAGE_SIZE_BIG:
		page = SZ_64K;
		break;
	default: /* NVOS32_ATTR_PAGE_SIZE_HUGE */
		switch (huge) {
		case NVOS32_ATTR2_PAGE_SIZE_HUGE_512MB:
			page = SZ_512M;
			break;
		case NVOS32_ATTR2_PAGE_SIZE_HUGE_256GB:
			return NV_ERR_INVALID_ARGUMENT;
		default:
			page = SZ_2M;
			huge = NVOS32_ATTR2_PAGE_SIZE_HUGE_2MB;
			break;
		}
		*attr2 &= ~(NVOS32_ATTR2_PAGE_SIZE_HUGE_MASK << NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT);
		*attr2 |= huge << NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT;
		break;
	}
	if (check_add_overflow(*size, page - 1, &rounded))
		return NV_ERR_INVALID_ARGUMENT;
	*size = rounded & ~(page - 1);
	*attr &= ~(NVOS32_ATTR_PAGE_SIZE_MASK << NVOS32_ATTR_PAGE_SIZE_SHIFT);
	*attr |= psz << NVOS32_ATTR_PAGE_SIZE_SHIFT;
	return NV_OK;
}

/**
 * nvsim_rm_sysmem_round - the size and attributes RM gives system memory
 * @size: in: the size asked for; out: rounded up to 4 KiB
 * @attr: in/out: NVOS32 attr, PAGE_SIZE set to 4KB
 * @attr2: in/out: NVOS32 attr2, a DEFAULT GPU_CACHEABLE set to NO
 *
 * As 535.261.03 allocates NV01_MEMORY_SYSTEM (vidheap ALLOC_SIZE or
 * NV_MEMORY_ALLOCATION_PARAMS): sysmemInitAllocRequest (system_mem.c) ->
 * memmgrAllocResources_IMPL (mem_utils.c) -> memmgrDeterminePageSize_IMPL
 * (mem_mgr.c): on x86 sysmemPageSize is RM_PAGE_SIZE, so
 * memmgrLargePageSupported_IMPL is false for ADDR_SYSMEM: the page size is
 * 4 KiB, written into the returned attr, and a BIG, HUGE or 512MB request
 * makes it 0, which memmgrAllocResources_IMPL fails NV_ERR_INVALID_STATE.
 * memmgrAllocDetermineAlignment_GM107 (mem_mgr_gm107.c) rounds the size
 * up to the page; memUtilsAllocMemDesc creates the descriptor of that
 * adjusted size and sysmemConstruct_IMPL reports it (size, limit = size -
 * 1), with GPU_CACHEABLE DEFAULT made NO.  libcuda makes UVM external
 * ranges of the size returned, which UVM refuses unless 4 KiB aligned
 * (uvm_create_external_range: NV_ERR_INVALID_ADDRESS).
 */
NV_STATUS nvsim_rm_sysmem_round(u64 *size, u32 *attr, u32 *attr2)
{
	u32 cache;

	switch ((*attr >> NVOS32_ATTR_PAGE_SIZE_SHIFT) & NVOS32_ATTR_PAGE_SIZE_MASK) {
	case NVOS32_ATTR_PAGE_SIZE_DEFAULT:
	case NVOS32_ATTR_PAGE_SIZE_4KB:
		break;
	default:
		return NV_ERR_INVALID_STATE;
	}
	if (*size > U64_MAX - (SZ_4K - 1))
		return NV_ERR_INVALID_ARGUMENT;
	*size = ALIGN(*size, SZ_4K);
	*attr &= ~(NVOS32_ATTR_PAGE_SIZE_MASK << NVOS32_ATTR_PAGE_SIZE_SHIFT);
	*attr |= NVOS32_ATTR_PAGE_SIZE_4KB << NVOS32_ATTR_PAGE_SIZE_SHIFT;
	cache = (*attr2 >> NVOS32_ATTR2_GPU_CACHEABLE_SHIFT) & NVOS32_ATTR2_GPU_CACHEABLE_MASK;
	if (cache == NVOS32_ATTR2_GPU_CACHEABLE_DEFAULT)
		*attr2 |= NVOS32_ATTR2_GPU_CACHEABLE_NO << NVOS32_ATTR2_GPU_CACHEABLE_SHIFT;
	return NV_OK;
}

/**
 * nvsim_alloc_memory_object - make a memory object with a fresh backing
 * @call: the caller
 * @client: the client
 * @parent: a device or subdevice (validated by the caller)
 * @handle: in/out handle, 0 to let the driver choose
 * @hclass: the memory class
 * @size: bytes
 * @out: returns the object
 */
NV_STATUS nvsim_alloc_memory_object(const struct nvsim_call *call,
				    struct nvsim_client *client,
				    struct nvsim_object *parent,
				    NvHandle *handle, u32 hclass, u64 size,
				    struct nvsim_object **out)
{
	struct nvsim_object *obj;
	struct nvsim_mem *mem;
	NV_STATUS status;

	status = nvsim_mem_create(parent->gpu, hclass, size,
				  nvsim_charge_tgid(call, client), &mem);
	if (status != NV_OK)
		return status;

	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_MEMORY, &obj);
	if (status != NV_OK) {
		nvsim_mem_put(mem);
		return status;
	}
	obj->memory.mem = mem;
	*out = obj;
	return NV_OK;
}

/* Client and parent, the parent one of the object types in the mask. */
static NV_STATUS nvsim_mem_parent(const struct nvsim_call *call,
				  NvHandle hClient, NvHandle hParent, u32 types,
				  struct nvsim_client **client,
				  struct nvsim_object **parent)
{
	NV_STATUS status;

	status = nvsim_client_get(call, hClient, client);
	if (status != NV_OK)
		return status;
	*parent = nvsim_object_find(*client, hParent);
	if (!*parent || !(types & NVSIM_BIT((*parent)->type)))
		return NV_ERR_INVALID_OBJECT_PARENT;
	return NV_OK;
}

/* Memory hangs under a device or a subdevice. */
#define NVSIM_GPU_PARENTS (NVSIM_BIT(NVSIM_OBJ_DEVICE) | NVSIM_BIT(NVSIM_OBJ_SUBDEVICE))
/* An OS descriptor under a device only (resource_list.h). */
#define NVSIM_OS_DESC_PARENTS NVSIM_BIT(NVSIM_OBJ_DEVICE)

/**
 * nvsim_rm_alloc_memory - NV_ESC_RM_ALLOC_MEMORY (NVOS02) / NV01_ALLOC_MEMORY
 * @call: the caller
 * @p: the parameters; the size is limit + 1
 *
 * Classes 0x40 and 0x3F are FB; 0x3E is system memory, not counted.  The
 * escape (rm.c) creates the mmap context for system memory afterwards.
 * 0x40 is RM_ALLOC of NV01_MEMORY_LOCAL_USER with a DEFAULT page size
 * (_rmAllocMemoryLocalUser, rmapi_deprecated_allocmemory.c;
 * RmDeprecatedConvertOs02ToOs32Flags sets PAGE_SIZE DEFAULT), so its size
 * is rounded as RM rounds it (nvsim_rm_round); the limit is not written
 * back (the shim leaves *pLimit as it was).
 */
void nvsim_rm_alloc_memory(const struct nvsim_call *call, NVOS02_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_object *parent, *obj;
	NvHandle h = p->hObjectNew;
	NV_STATUS status;
	u64 size;

	status = nvsim_fault_rm(NVSIM_FK_RM_ALLOC_MEMORY, p->hClass, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}
	switch (p->hClass) {
	case NV01_MEMORY_LOCAL_USER:
	case NV01_MEMORY_LOCAL_PRIVILEGED:
	case NV01_MEMORY_SYSTEM:
		break;
	case NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
		nvsim_rm_alloc_os_desc_kernel(call, p);
		return;
	default:
		p->status = NV_ERR_INVALID_CLASS;
		return;
	}
	/* limit + 1 would wrap to a zero-sized allocation. */
	if (p->limit == U64_MAX) {
		p->status = NV_ERR_INVALID_ARGUMENT;
		return;
	}
	size = p->limit + 1;
	if (p->hClass == NV01_MEMORY_LOCAL_USER) {
		u32 attr = 0, attr2 = 0;        /* PAGE_SIZE DEFAULT */

		status = nvsim_rm_round(&size, &attr, &attr2);
		if (status != NV_OK) {
			p->status = status;
			return;
		}
	}

	mutex_lock(&nvsim.lock);
	status = nvsim_mem_parent(call, p->hRoot, p->hObjectParent,
				  NVSIM_GPU_PARENTS, &client, &parent);
	if (status != NV_OK)
		goto out;
	status = nvsim_alloc_memory_object(call, client, parent, &h, p->hClass,
					   size, &obj);
	if (status != NV_OK)
		goto out;
	p->hObjectNew = h;
	if (p->hClass == NV01_MEMORY_SYSTEM) {
		/* The address of system memory is the mmap cookie. */
		p->pMemory = ++nvsim.next_cookie << PAGE_SHIFT;
	}
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}

/* ---------------------------------------------------- OS descriptors */

/* Chosen: the most a single OS descriptor pins (os_alloc_mem has no cap). */
#define NVSIM_MAX_OSDESC_PAGES  ((1UL << 30) >> PAGE_SHIFT)

static u32 nvsim_os02_field(u32 flags, unsigned int shift, u32 mask)
{
	return (flags >> shift) & mask;
}

/*
 * The flags RmAllocOsDescriptor (arch/nvalloc/unix/src/escape.c) and
 * _rmAllocMemorySystemOsDescriptor (rmapi_deprecated_allocmemory.c)
 * accept: PCI memory that is not mapped now (NV_ERR_INVALID_FLAGS).
 */
static NV_STATUS nvsim_os_desc_flags(u32 flags)
{
	if (nvsim_os02_field(flags, NVOS02_FLAGS_LOCATION_SHIFT,
			     NVOS02_FLAGS_LOCATION_MASK) != NVOS02_FLAGS_LOCATION_PCI ||
	    nvsim_os02_field(flags, NVOS02_FLAGS_MAPPING_SHIFT,
			     NVOS02_FLAGS_MAPPING_MASK) != NVOS02_FLAGS_MAPPING_NO_MAP)
		return NV_ERR_INVALID_FLAGS;
	return NV_OK;
}

/*
 * A kernel caller's NV01_ALLOC_MEMORY of an OS descriptor: the deprecated
 * layer (_rmAllocMemorySystemOsDescriptor) checks the flags and allocates
 * it as a user virtual address, which osCreateMemFromOsDescriptor refuses
 * to a kernel client (no pointer or a limit of 0 first:
 * NV_ERR_INVALID_PARAM_STRUCT; then NV_ERR_NOT_SUPPORTED).
 */
void nvsim_rm_alloc_os_desc_kernel(const struct nvsim_call *call,
				   NVOS02_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_object *parent;
	NV_STATUS status;

	status = nvsim_os_desc_flags(p->flags);
	if (status == NV_OK) {
		mutex_lock(&nvsim.lock);
		status = nvsim_mem_parent(call, p->hRoot, p->hObjectParent,
					  NVSIM_OS_DESC_PARENTS, &client, &parent);
		mutex_unlock(&nvsim.lock);
	}
	if (status == NV_OK)
		status = (!p->pMemory || !p->limit) ? NV_ERR_INVALID_PARAM_STRUCT :
						      NV_ERR_NOT_SUPPORTED;
	p->status = status;
}

/**
 * nvsim_rm_alloc_os_desc - NV_ESC_RM_ALLOC_MEMORY of
 * NV01_MEMORY_SYSTEM_OS_DESCRIPTOR: the caller's memory at pMemory,
 * limit + 1 bytes, pinned for as long as the object (or a dup) lives.
 * @call: the caller (a user file)
 * @p: the parameters
 *
 * As RmAllocOsDescriptor and RmCreateOsDescriptor (escape.c),
 * os_lock_user_pages (kernel-open/nvidia/os-mlock.c) and, for the RM
 * allocation, osdescConstruct_IMPL and osCreateOsDescriptorFromPageArray
 * (osmemdesc.c).  In that order: PCI and NO_MAP (NV_ERR_INVALID_FLAGS); a
 * coherency of cached, write-back or uncached (NV_ERR_INVALID_FLAGS); a
 * page-aligned address (NV_ERR_NOT_SUPPORTED); limit + 1 must not wrap
 * (NV_ERR_INVALID_LIMIT); the pages are pinned, writable unless
 * ALLOC_USER_READ_ONLY (pin_user_pages with FOLL_LONGTERM; a range that
 * cannot be: NV_ERR_INVALID_ADDRESS, as when os_lookup_user_io_memory
 * finds no I/O mapping either); then the client (NV_ERR_INVALID_CLIENT),
 * the parent, a device (NV_ERR_INVALID_OBJECT_PARENT), the handle, a limit
 * of 0 (NV_ERR_INVALID_PARAM_STRUCT), and anonymous memory is cached and
 * not contiguous (uncached or PHYSICALITY_CONTIGUOUS:
 * NV_ERR_INVALID_FLAGS).  A failure after pinning unpins.  As the escape,
 * hObjectNew is not written back (0 makes a handle the caller is not
 * told).  The memory is system memory: not FB, not mappable by
 * RM_MAP_MEMORY (mmap.c), mappable into a GPU VA (vaspace.c).
 *
 * Where pinning fails, the range is taken as I/O memory if the driver
 * would take it (nvsim_os_desc_io).  Not modelled: the pages'
 * NUMA/IOMMU attributes.  Chosen: at most 1 GiB per descriptor
 * (NV_ERR_NO_MEMORY beyond).
 */
/*
 * RmCreateOsDescriptor's fallback when the pages cannot be pinned
 * (escape.c: os_lock_user_pages gave NV_ERR_INVALID_ADDRESS), as
 * os_lookup_user_io_memory (kernel-open/nvidia/os-mlock.c): the range must
 * lie in one VMA that is VM_IO or VM_PFNMAP, its first page mapped
 * (nv_follow_pfn); the driver then records the bare physical addresses
 * (get_io_ptes) and the GPU may access them for as long as the object
 * lives.  nvsim records nothing (its GPU touches no system memory here);
 * what it models is which mappings the driver accepts, the case that
 * decides whether a mediator's own pages can be handed to the GPU.
 */
static NV_STATUS nvsim_os_desc_io(unsigned long start, unsigned long npages)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	unsigned long pfn;
	NV_STATUS status = NV_ERR_INVALID_ADDRESS;

	mmap_read_lock(mm);
	vma = find_vma_intersection(mm, start, start + 1);
	if (vma && (vma->vm_flags & (VM_IO | VM_PFNMAP)) &&
	    vma->vm_start <= start &&
	    (vma->vm_end - start) >> PAGE_SHIFT >= npages &&
	    follow_pfn(vma, start, &pfn) == 0)
		status = NV_OK;
	mmap_read_unlock(mm);
	return status;
}

void nvsim_rm_alloc_os_desc(const struct nvsim_call *call, NVOS02_PARAMETERS *p)
{
	u32 coherency = nvsim_os02_field(p->flags, NVOS02_FLAGS_COHERENCY_SHIFT,
					 NVOS02_FLAGS_COHERENCY_MASK);
	bool writable = !((p->flags >> NVOS02_FLAGS_ALLOC_USER_READ_ONLY_SHIFT) & 1);
	struct nvsim_client *client;
	struct nvsim_object *parent, *obj;
	struct page **pages = NULL;
	unsigned long npages = 0;
	struct nvsim_mem *mem;
	NvHandle h = p->hObjectNew;
	NV_STATUS status;
	long pinned;

	status = nvsim_fault_rm(NVSIM_FK_RM_ALLOC_MEMORY, p->hClass, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}
	status = nvsim_os_desc_flags(p->flags);
	if (status != NV_OK)
		goto out;
	if (coherency != NVOS02_FLAGS_COHERENCY_CACHED &&
	    coherency != NVOS02_FLAGS_COHERENCY_WRITE_BACK &&
	    coherency != NVOS02_FLAGS_COHERENCY_UNCACHED) {
		status = NV_ERR_INVALID_FLAGS;
		goto out;
	}
	if (p->pMemory & ~PAGE_MASK) {
		status = NV_ERR_NOT_SUPPORTED;
		goto out;
	}
	if (p->limit == U64_MAX) {
		status = NV_ERR_INVALID_LIMIT;
		goto out;
	}
	npages = (p->limit >> PAGE_SHIFT) + 1;
	if (npages > NVSIM_MAX_OSDESC_PAGES) {
		status = NV_ERR_NO_MEMORY;
		goto out;
	}
	pages = kvmalloc_array(npages, sizeof(*pages), GFP_KERNEL_ACCOUNT);
	if (!pages) {
		status = NV_ERR_NO_MEMORY;
		goto out;
	}
	pinned = pin_user_pages_fast(p->pMemory, npages,
				     FOLL_LONGTERM | (writable ? FOLL_WRITE : 0),
				     pages);
	if (pinned < 0 || pinned < npages) {
		if (pinned > 0)
			unpin_user_pages(pages, pinned);
		kvfree(pages);
		pages = NULL;
		status = nvsim_os_desc_io(p->pMemory, npages);
		if (status != NV_OK)
			goto out;
	}

	mutex_lock(&nvsim.lock);
	status = nvsim_mem_parent(call, p->hRoot, p->hObjectParent,
				  NVSIM_OS_DESC_PARENTS, &client, &parent);
	if (status == NV_OK && !nvsim_arch_has_class(p->hClass))
		status = NV_ERR_NOT_SUPPORTED;
	if (status == NV_OK && p->limit == 0)
		status = NV_ERR_INVALID_PARAM_STRUCT;
	if (status == NV_OK &&
	    (coherency == NVOS02_FLAGS_COHERENCY_UNCACHED ||
	     nvsim_os02_field(p->flags, NVOS02_FLAGS_PHYSICALITY_SHIFT,
			      NVOS02_FLAGS_PHYSICALITY_MASK) ==
	     NVOS02_FLAGS_PHYSICALITY_CONTIGUOUS))
		status = NV_ERR_INVALID_FLAGS;
	if (status == NV_OK)
		status = nvsim_alloc_memory_object(call, client, parent, &h,
						   p->hClass, p->limit + 1, &obj);
	if (status == NV_OK) {
		mem = obj->memory.mem;
		mem->pinned = pages;
		mem->nr_pinned = npages;
		mem->pinned_writable = writable;
		pages = NULL;
	}
	mutex_unlock(&nvsim.lock);
	if (pages) {
		unpin_user_pages(pages, npages);
		kvfree(pages);
	}
out:
	p->status = status;
}

static void nvsim_heap_info(struct nvsim_gpu *gpu, NVOS32_PARAMETERS *p)
{
	p->total = gpu->fb_total;
	p->free = gpu->fb_total - gpu->fb_used;
}

static NV_STATUS nvsim_vid_heap_alloc(const struct nvsim_call *call,
				      struct nvsim_client *client,
				      struct nvsim_object *parent,
				      NVOS32_PARAMETERS *p)
{
	NVOS32_ALLOC_SIZE *as = &p->data.AllocSize;
	u32 flags = as->flags, attr, *pattr, *pattr2, hclass;
	NvHandle h = as->hMemory;
	struct nvsim_object *obj;
	NV_STATUS status;
	u64 *psize, size;

	switch (p->function) {
	case NVOS32_FUNCTION_ALLOC_SIZE:
		pattr = &as->attr;
		pattr2 = &as->attr2;
		psize = &as->size;
		break;
	case NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT:
		pattr = &p->data.AllocTiledPitchHeight.attr;
		pattr2 = NULL;  /* nvabi.h stops before attr2 */
		psize = &p->data.AllocTiledPitchHeight.size;
		break;
	default: /* NVOS32_FUNCTION_ALLOC_SIZE_RANGE */
		pattr = &p->data.AllocSizeRange.attr;
		pattr2 = NULL;  /* nvabi.h stops before attr2 */
		psize = &p->data.AllocSizeRange.size;
		break;
	}
	attr = *pattr;
	size = *psize;
	if (size == 0)
		return NV_ERR_INVALID_ARGUMENT;

	if (flags & NVOS32_ALLOC_FLAGS_VIRTUAL)
		hclass = NV50_MEMORY_VIRTUAL;   /* as rmapi_deprecated_vidheapctrl.c */
	else if (((attr >> NVOS32_ATTR_LOCATION_SHIFT) &
		  NVOS32_ATTR_LOCATION_MASK) == NVOS32_ATTR_LOCATION_PCI)
		hclass = NV01_MEMORY_SYSTEM;
	else
		hclass = NV01_MEMORY_LOCAL_USER;
	if (hclass == NV01_MEMORY_LOCAL_USER) {
		/* attr2 is read for ALLOC_SIZE only; elsewhere HUGE is 2 MiB. */
		u32 a = attr, a2 = pattr2 ? *pattr2 : 0;

		status = nvsim_rm_round(&size, &a, &a2);
		if (status != NV_OK)
			return status;
		*pattr = a;
		if (pattr2)
			*pattr2 = a2;
	} else if (hclass == NV01_MEMORY_SYSTEM) {
		u32 a = attr, a2 = pattr2 ? *pattr2 : 0;

		status = nvsim_rm_sysmem_round(&size, &a, &a2);
		if (status != NV_OK)
			return status;
		*pattr = a;
		if (pattr2)
			*pattr2 = a2;
	}

	status = nvsim_alloc_memory_object(call, client, parent, &h, hclass,
					   size, &obj);
	if (status != NV_OK)
		return status;
	if (hclass == NV50_MEMORY_VIRTUAL) {
		/* A VA reservation (vaspace.c); ALLOC_SIZE returns its VA. */
		status = nvsim_virtual_va_assign(obj,
				flags & NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE,
				p->function == NVOS32_FUNCTION_ALLOC_SIZE ? as->offset : 0,
				size);
		if (status != NV_OK) {
			nvsim_object_destroy(obj);
			return status;
		}
	}

	/* hMemory is at the same offset in all three layouts. */
	as->hMemory = h;
	*psize = size;
	if (p->function == NVOS32_FUNCTION_ALLOC_SIZE) {
		as->limit = size - 1;
		if (hclass == NV01_MEMORY_LOCAL_USER) {
			as->offset = parent->gpu->next_fb_offset;
			parent->gpu->next_fb_offset += ALIGN(size, 2ULL << 20);
		} else if (hclass == NV50_MEMORY_VIRTUAL) {
			as->offset = obj->memory.va_base;
		}
	} else if (p->function == NVOS32_FUNCTION_ALLOC_SIZE_RANGE) {
		p->data.AllocSizeRange.limit = size - 1;
	}
	return NV_OK;
}

/**
 * nvsim_rm_vid_heap - NV_ESC_RM_VID_HEAP_CONTROL (NVOS32)
 * @call: the caller
 * @p: the parameters
 *
 * Functions: ALLOC_SIZE (2), ALLOC_TILED_PITCH_HEIGHT (6), ALLOC_SIZE_RANGE
 * (14), FREE (3: of any handle, as the real driver), INFO (5).
 * total/free (bytes) are filled for every
 * function that succeeds.  Other functions: NV_ERR_INVALID_ARGUMENT.
 */
void nvsim_rm_vid_heap(const struct nvsim_call *call, NVOS32_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_object *parent, *obj;
	struct nvsim_gpu *gpu = NULL;
	NV_STATUS status;

	status = nvsim_fault_rm(NVSIM_FK_RM_VID_HEAP_CONTROL, p->function, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}
	mutex_lock(&nvsim.lock);
	status = nvsim_mem_parent(call, p->hRoot, p->hObjectParent,
				  NVSIM_GPU_PARENTS, &client, &parent);
	if (status != NV_OK)
		goto out;

	switch (p->function) {
	case NVOS32_FUNCTION_ALLOC_SIZE:
	case NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT:
	case NVOS32_FUNCTION_ALLOC_SIZE_RANGE:
		status = nvsim_vid_heap_alloc(call, client, parent, p);
		break;
	case NVOS32_FUNCTION_FREE:
		/*
		 * As rmapi_deprecated_vidheapctrl.c, _nvos32FunctionFree: the
		 * flag must say a handle is given, and then it is RmFree of
		 * that handle, whatever it is: memory, a device (the parent
		 * itself), a channel, or the client.  The heap figures are of
		 * the GPU, which outlives all of them.
		 */
		if (!(p->data.Free.flags & NVOS32_FREE_FLAGS_MEMORY_HANDLE_PROVIDED)) {
			status = NV_ERR_INVALID_ARGUMENT;
			break;
		}
		gpu = parent->gpu;
		parent = NULL;
		if (p->data.Free.hMemory == p->hRoot) {
			nvsim_client_destroy(client);
			break;
		}
		obj = xa_load(&client->objects, p->data.Free.hMemory);
		if (!obj) {
			status = NV_ERR_OBJECT_NOT_FOUND;
			break;
		}
		nvsim_object_destroy(obj);
		break;
	case NVOS32_FUNCTION_INFO:
		break;
	default:
		status = NV_ERR_INVALID_ARGUMENT;
		break;
	}
	if (status == NV_OK)
		nvsim_heap_info(parent ? parent->gpu : gpu, p);
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}
