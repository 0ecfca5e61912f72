// SPDX-License-Identifier: GPL-2.0
/*
 * vaspace.c - GPU virtual address spaces as bookkeeping: FERMI_VASPACE_A
 * objects, the VA ranges virtual memory objects stand for, and
 * RM_MAP_MEMORY_DMA / RM_UNMAP_MEMORY_DMA, which map a memory object into a
 * virtual memory object.  No page tables exist: a mapping is a record
 * {virtual object, memory, device, VA, length} that lives until it is
 * unmapped or one of its three objects is freed (as RM's inter-mappings,
 * which hang off the mapper and the mappable: rs_resource.c,
 * refAddInterMapping; rs_server.c, serverInterMap/serverInterUnmap).
 * Mappings count in debugfs "mappings".
 *
 * Everything here runs under nvsim.lock.
 */
#include <linux/slab.h>
#include <linux/overflow.h>

#include "nvsim.h"

/* gvaspaceGetReservedVaspaceBase (g_gpu_vaspace_nvoc.h): the lowest VA. */
#define NVSIM_VA_START_MIN      (1ULL << 20)
/* Alignment of the VA nvsim hands virtual memory (chosen: a 2 MiB page). */
#define NVSIM_VA_ALIGN          (2ULL << 20)

/* The highest VA the chip's page tables reach (the root level's bits). */
static u64 nvsim_va_limit_max(void)
{
	return (1ULL << nvsim_arch->va_bits) - 1;
}

static struct nvsim_object *nvsim_device_of(struct nvsim_object *obj)
{
	return obj->type == NVSIM_OBJ_SUBDEVICE ? obj->parent : obj;
}

/**
 * nvsim_vaspace_ctor - FERMI_VASPACE_A, as vaspaceapiConstruct_IMPL
 * (src/kernel/gpu/mem_mgr/vaspace_api.c)
 *
 * In that order: the flags (translateAllocFlagsToVASpaceFlags: ATS needs
 * an externally owned VA space or, for a kernel caller, shared management;
 * page faulting needs an externally owned one; else
 * NV_ERR_INVALID_ARGUMENT); the BAR1 VA space (index HOST) is for kernel
 * callers (NV_ERR_INVALID_ARGUMENT); a device in SINGLE_VASPACE mode has
 * no private VA spaces (NV_ERR_INVALID_STATE); index DEVICE takes the
 * device's default VA space (a MULTIPLE_VASPACES device has none:
 * vaspaceGetByHandleOrDeviceDefault, NV_ERR_INVALID_STATE); GLOBAL (no
 * global VA space exists outside SINGLE_VASPACE mode) and unknown indexes
 * NV_ERR_INVALID_STATE; FLA and HOST are not modelled
 * (NV_ERR_NOT_SUPPORTED, what RM answers without FLA).  A NEW VA space:
 * bigPageSize 0, 64K or 128K (NV_ERR_INVALID_ARGUMENT), no ATS on this
 * platform (NV_ERR_NOT_SUPPORTED), vaBase + vaSize must not wrap
 * (NV_ERR_INVALID_ARGUMENT) nor pass the chip's VA limit
 * (gvaspaceConstruct: NV_ERR_INVALID_ARGUMENT); vaBase 0 means the lowest
 * VA unless ALLOW_ZERO_ADDRESS.  vaBase and vaSize are written back as RM
 * does (vaSize = limit - vaBase + 1).
 */
NV_STATUS nvsim_vaspace_ctor(const struct nvsim_call *call,
			     struct nvsim_client *client,
			     struct nvsim_object *parent, NvHandle *handle,
			     u32 hclass, void *params)
{
	NV_VASPACE_ALLOCATION_PARAMETERS *p = params;
	struct nvsim_object *dev = nvsim_device_of(parent), *obj;
	bool kernel = call->priv >= NVSIM_PRIV_KERNEL;
	u32 flags = p->flags;
	u64 start, limit;
	NV_STATUS status;

	if ((flags & NV_VASPACE_ALLOCATION_FLAGS_ENABLE_NVLINK_ATS) &&
	    !((flags & NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED) ||
	      ((flags & NV_VASPACE_ALLOCATION_FLAGS_SHARED_MANAGEMENT) && kernel)))
		return NV_ERR_INVALID_ARGUMENT;
	if ((flags & NV_VASPACE_ALLOCATION_FLAGS_ENABLE_PAGE_FAULTING) &&
	    !(flags & NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED))
		return NV_ERR_INVALID_ARGUMENT;
	if (p->index == NV_VASPACE_ALLOCATION_INDEX_GPU_HOST && !kernel)
		return NV_ERR_INVALID_ARGUMENT;
	if (dev->device.va_mode == NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE)
		return NV_ERR_INVALID_STATE;

	switch (p->index) {
	case NV_VASPACE_ALLOCATION_INDEX_GPU_NEW:
		break;
	case NV_VASPACE_ALLOCATION_INDEX_GPU_DEVICE:
		if (dev->device.va_mode == NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES)
			return NV_ERR_INVALID_STATE;
		start = NVSIM_VA_START_MIN;
		limit = nvsim_va_limit_max();
		goto make;
	case NV_VASPACE_ALLOCATION_INDEX_GPU_HOST:
	case NV_VASPACE_ALLOCATION_INDEX_GPU_FLA:
		return NV_ERR_NOT_SUPPORTED;
	default:
		return NV_ERR_INVALID_STATE;
	}

	if (p->bigPageSize != 0 && p->bigPageSize != NV_VASPACE_BIG_PAGE_SIZE_64K &&
	    p->bigPageSize != NV_VASPACE_BIG_PAGE_SIZE_128K)
		return NV_ERR_INVALID_ARGUMENT;
	if (flags & NV_VASPACE_ALLOCATION_FLAGS_ENABLE_NVLINK_ATS)
		return NV_ERR_NOT_SUPPORTED;
	limit = 0;
	if (p->vaSize) {
		if (check_add_overflow(p->vaBase, p->vaSize - 1, &limit))
			return NV_ERR_INVALID_ARGUMENT;
	}
	if (limit == 0)
		limit = nvsim_va_limit_max();
	else if (limit > nvsim_va_limit_max())
		return NV_ERR_INVALID_ARGUMENT;
	start = p->vaBase;
	if (start == 0 && !(flags & NV_VASPACE_ALLOCATION_FLAGS_ALLOW_ZERO_ADDRESS))
		start = NVSIM_VA_START_MIN;
	/* Chosen: a range that ends below its start is refused. */
	if (start > limit)
		return NV_ERR_INVALID_ARGUMENT;

make:
	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_VASPACE, &obj);
	if (status != NV_OK)
		return status;
	obj->vaspace.va_base = start;
	obj->vaspace.va_size = limit - start + 1;
	p->vaBase = start;
	p->vaSize = limit - start + 1;
	return NV_OK;
}

/**
 * nvsim_virtual_va_assign - the VA range a virtual memory object stands for
 * @obj: an NV50_MEMORY_VIRTUAL or NV01_MEMORY_VIRTUAL object
 * @fixed: @base is the VA asked for
 * @base: with @fixed, the VA
 * @size: bytes (0: up to the VA limit, for NV01_MEMORY_VIRTUAL)
 *
 * Bookkeeping: nvsim hands out VA from a per-GPU counter (no reuse, no
 * overlap check for fixed requests); the real allocator is the VA space's
 * heap.  Return: NV_OK, or NV_ERR_NO_MEMORY past the chip's VA limit.
 */
NV_STATUS nvsim_virtual_va_assign(struct nvsim_object *obj, bool fixed,
				  u64 base, u64 size)
{
	struct nvsim_gpu *gpu = obj->gpu;
	u64 vamax = nvsim_va_limit_max(), end;

	if (!fixed)
		base = ALIGN(max(gpu->next_va, NVSIM_VA_START_MIN), NVSIM_VA_ALIGN);
	if (base > vamax)
		return NV_ERR_NO_MEMORY;
	if (size == 0)
		size = vamax - base + 1;
	if (check_add_overflow(base, size - 1, &end) || end > vamax)
		return NV_ERR_NO_MEMORY;
	if (!fixed)
		gpu->next_va = end + 1;
	obj->memory.va_base = base;
	obj->memory.va_size = size;
	return NV_OK;
}

static bool nvsim_is_virtual_class(u32 hclass)
{
	return hclass == NV50_MEMORY_VIRTUAL || hclass == NV01_MEMORY_VIRTUAL;
}

static void nvsim_dma_map_free(struct nvsim_dma_map *m)
{
	list_del(&m->node);
	atomic_dec(&nvsim.nr_mappings);
	kfree(m);
}

/**
 * nvsim_dma_maps_drop - forget the mappings an object being freed is in
 * @obj: the object, as its mapper, its memory or its device
 */
void nvsim_dma_maps_drop(struct nvsim_object *obj)
{
	struct nvsim_dma_map *m, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(m, tmp, &obj->client->dma_maps, node)
		if (m->mapper == obj || m->mem == obj || m->ctx == obj)
			nvsim_dma_map_free(m);
}

/*
 * RM_MAP_MEMORY_DMA: rmapiMapWithSecInfo (mapping.c) -> serverInterMap
 * (rs_server.c) -> serverInterMap_Prologue (mapping.c) -> virtmemMapTo_IMPL
 * (virtual_mem.c) -> dmaAllocMap (dma.c).  In that order: length 0
 * (NV_ERR_INVALID_LIMIT); the client (NV_ERR_INVALID_CLIENT); hDma, hMemory
 * and hDevice must name objects of the client (clientGetResourceRef:
 * NV_ERR_OBJECT_NOT_FOUND); hDevice a device or subdevice
 * (NV_ERR_INVALID_OBJECT); hMemory a memory object
 * (rmresGetMemInterMapParams: NV_ERR_INVALID_OBJECT_HANDLE); offset +
 * length within it (NV_ERR_INVALID_LIMIT); hDma a virtual memory object
 * (resMapTo_IMPL: NV_ERR_INVALID_OBJECT_HANDLE, so a FERMI_VASPACE_A is
 * refused too); NV50_MEMORY_VIRTUAL through a subdevice
 * (bAllowUnicastMapping: NV_ERR_NOT_SUPPORTED); a virtual object without a
 * VA space of its own on a MULTIPLE_VASPACES device
 * (vaspaceGetByHandleOrDeviceDefault: NV_ERR_INVALID_STATE).  The VA is
 * dmaOffset itself with DMA_OFFSET_FIXED, else the virtual object's base +
 * dmaOffset, and must lie inside the object (NV_ERR_INVALID_OFFSET); one
 * VA maps once per object and device (refAddInterMapping:
 * NV_ERR_INVALID_ARGUMENT).  dmaOffset returns the VA.
 *
 * Chosen (not read in RM): the mapping must end inside the virtual object
 * (NV_ERR_INVALID_LIMIT); device memory of another GPU (a peer mapping)
 * NV_ERR_NOT_SUPPORTED; a virtual object of another GPU than hDevice's
 * NV_ERR_INVALID_ARGUMENT; a virtual object as hMemory
 * NV_ERR_NOT_SUPPORTED.
 */
static NV_STATUS nvsim_map_dma(const struct nvsim_call *call,
			       NVOS46_PARAMETERS *p)
{
	struct nvsim_object *mapper, *mem, *ctx, *dev;
	struct nvsim_client *client;
	struct nvsim_dma_map *m;
	u64 end, vaddr, vend, vlim;
	NV_STATUS status;

	if (p->length == 0)
		return NV_ERR_INVALID_LIMIT;

	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hClient, &client);
	if (status != NV_OK)
		goto out;
	mapper = nvsim_object_find(client, p->hDma);
	mem = nvsim_object_find(client, p->hMemory);
	ctx = nvsim_object_find(client, p->hDevice);
	status = NV_ERR_OBJECT_NOT_FOUND;
	if (!mapper || !mem || !ctx)
		goto out;
	status = NV_ERR_INVALID_OBJECT;
	if (ctx->type != NVSIM_OBJ_DEVICE && ctx->type != NVSIM_OBJ_SUBDEVICE)
		goto out;
	dev = nvsim_device_of(ctx);
	status = NV_ERR_INVALID_OBJECT_HANDLE;
	if (mem->type != NVSIM_OBJ_MEMORY)
		goto out;
	status = NV_ERR_NOT_SUPPORTED;
	if (nvsim_is_virtual_class(mem->hclass))
		goto out;
	status = NV_ERR_INVALID_LIMIT;
	if (check_add_overflow(p->offset, p->length, &end) ||
	    end > mem->memory.mem->size)
		goto out;
	status = NV_ERR_INVALID_OBJECT_HANDLE;
	if (mapper->type != NVSIM_OBJ_MEMORY || !nvsim_is_virtual_class(mapper->hclass))
		goto out;
	status = NV_ERR_NOT_SUPPORTED;
	if (ctx->type == NVSIM_OBJ_SUBDEVICE && mapper->hclass == NV50_MEMORY_VIRTUAL)
		goto out;
	status = NV_ERR_INVALID_STATE;
	if (!mapper->memory.hvaspace &&
	    dev->device.va_mode == NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES)
		goto out;
	status = NV_ERR_INVALID_ARGUMENT;
	if (mapper->gpu != ctx->gpu)
		goto out;
	status = NV_ERR_NOT_SUPPORTED;
	if (mem->memory.mem->fb && mem->gpu != ctx->gpu)
		goto out;

	status = NV_ERR_INVALID_OFFSET;
	if ((p->flags >> NVOS46_FLAGS_DMA_OFFSET_FIXED_SHIFT) & 1)
		vaddr = p->dmaOffset;
	else if (check_add_overflow(mapper->memory.va_base, p->dmaOffset, &vaddr))
		goto out;
	vlim = mapper->memory.va_base + mapper->memory.va_size;
	if (vaddr < mapper->memory.va_base || vaddr >= vlim)
		goto out;
	status = NV_ERR_INVALID_LIMIT;
	if (check_add_overflow(vaddr, p->length, &vend) || vend > vlim)
		goto out;
	status = NV_ERR_INVALID_ARGUMENT;
	list_for_each_entry(m, &client->dma_maps, node)
		if (m->mapper == mapper && m->ctx == ctx && m->dma_offset == vaddr)
			goto out;

	status = NV_ERR_NO_MEMORY;
	m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);
	if (!m)
		goto out;
	m->mapper = mapper;
	m->mem = mem;
	m->ctx = ctx;
	m->dma_offset = vaddr;
	m->length = p->length;
	list_add_tail(&m->node, &client->dma_maps);
	atomic_inc(&nvsim.nr_mappings);
	p->dmaOffset = vaddr;
	status = NV_OK;
out:
	mutex_unlock(&nvsim.lock);
	return status;
}

/*
 * RM_UNMAP_MEMORY_DMA: rmapiUnmapWithSecInfo -> serverInterUnmap and
 * serverInterUnmapInternal (rs_server.c).  The client
 * (NV_ERR_INVALID_CLIENT), hDma and hDevice (NV_ERR_OBJECT_NOT_FOUND);
 * size 0 (or a release without the size member) unmaps the mapping made
 * at dmaOffset through that device (none: NV_ERR_OBJECT_NOT_FOUND);
 * otherwise every mapping overlapping [dmaOffset, dmaOffset + size) loses
 * that part (virtual memory supports partial unmaps; a range that wraps is
 * NV_ERR_INVALID_ARGUMENT; none overlapping is NV_OK).
 */
static NV_STATUS nvsim_unmap_dma(const struct nvsim_call *call,
				 NVOS47_PARAMETERS *p)
{
	struct nvsim_dma_map *m, *tmp, *tail;
	struct nvsim_object *mapper, *ctx;
	struct nvsim_client *client;
	u64 lo = p->dmaOffset, hi, mend;
	NV_STATUS status;

	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hClient, &client);
	if (status != NV_OK)
		goto out;
	mapper = nvsim_object_find(client, p->hDma);
	ctx = nvsim_object_find(client, p->hDevice);
	status = NV_ERR_OBJECT_NOT_FOUND;
	if (!mapper || !ctx)
		goto out;

	if (p->size == 0) {
		list_for_each_entry(m, &client->dma_maps, node) {
			if (m->mapper == mapper && m->ctx == ctx &&
			    m->dma_offset == lo) {
				nvsim_dma_map_free(m);
				status = NV_OK;
				break;
			}
		}
		goto out;
	}

	status = NV_ERR_INVALID_ARGUMENT;
	if (check_add_overflow(lo, p->size, &hi))
		goto out;
	status = NV_OK;
	list_for_each_entry_safe(m, tmp, &client->dma_maps, node) {
		if (m->mapper != mapper || m->ctx != ctx)
			continue;
		mend = m->dma_offset + m->length;
		if (mend <= lo || m->dma_offset >= hi)
			continue;
		if (m->dma_offset >= lo && mend <= hi) {
			nvsim_dma_map_free(m);
		} else if (m->dma_offset < lo && mend > hi) {
			/* The middle goes: the mapping splits in two. */
			tail = kzalloc(sizeof(*tail), GFP_KERNEL_ACCOUNT);
			if (!tail) {
				status = NV_ERR_NO_MEMORY;
				break;
			}
			*tail = *m;
			tail->dma_offset = hi;
			tail->length = mend - hi;
			list_add(&tail->node, &m->node);
			atomic_inc(&nvsim.nr_mappings);
			m->length = lo - m->dma_offset;
		} else if (m->dma_offset < lo) {
			m->length = lo - m->dma_offset;
		} else {
			m->length = mend - hi;
			m->dma_offset = hi;
		}
	}
out:
	mutex_unlock(&nvsim.lock);
	return status;
}

/**
 * nvsim_esc_map_memory_dma - NV_ESC_RM_MAP_MEMORY_DMA / _UNMAP_MEMORY_DMA
 * @call: the caller
 * @nr: the escape
 * @buf: the parameters
 * @size: their size
 *
 * The control file only, and exactly the presented release's struct size
 * (-EINVAL).  NVOS46 grew flags2 and kindOverride before dmaOffset and
 * NVOS47 a size member before status (580 and 570): dmaOffset and status
 * are read and written from the struct's end, NVOS47's dmaOffset sits at
 * the same offset in every release, and the members a release lacks read
 * as 0.
 */
int nvsim_esc_map_memory_dma(const struct nvsim_call *call, u32 nr, void *buf,
			     u32 size)
{
	bool map = nr == NV_ESC_RM_MAP_MEMORY_DMA;
	u32 want = nvsim_rel_size(NVREL_ESC, nr, map ? sizeof(NVOS46_PARAMETERS) :
						   sizeof(NVOS47_PARAMETERS));
	u32 *status;

	BUILD_BUG_ON(offsetof(NVOS46_PARAMETERS, status) !=
		     sizeof(NVOS46_PARAMETERS) - 8);
	BUILD_BUG_ON(offsetof(NVOS46_PARAMETERS, dmaOffset) !=
		     sizeof(NVOS46_PARAMETERS) - 16);
	BUILD_BUG_ON(offsetof(NVOS47_PARAMETERS, status) !=
		     sizeof(NVOS47_PARAMETERS) - 8);
	if (call->file->kind != NVSIM_FILE_CTL || size != want || size < 24)
		return -EINVAL;
	status = buf + size - 8;

	if (map) {
		NVOS46_PARAMETERS p = {};
		u64 *dma = buf + size - 16;

		memcpy(&p, buf, min_t(u32, size, sizeof(p)));
		if (size != sizeof(p)) {
			p.flags2 = 0;
			p.kindOverride = 0;
		}
		p.dmaOffset = *dma;
		*status = nvsim_map_dma(call, &p);
		*dma = p.dmaOffset;
	} else {
		NVOS47_PARAMETERS q = {};

		memcpy(&q, buf, min_t(u32, size, sizeof(q)));
		if (size != sizeof(q))
			q.size = 0;
		*status = nvsim_unmap_dma(call, &q);
	}
	return 0;
}
