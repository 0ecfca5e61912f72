// SPDX-License-Identifier: GPL-2.0
/*
 * memory.c - framebuffer accounting and the three FB allocation paths.
 *
 * FB is pure accounting: an allocation is a number charged to its GPU and to
 * the process that made it, never RAM.  (Pages appear only when something is
 * mmap()ed, see mmap.c.)  Sizes are counted to the byte, without page
 * rounding, so that a test can fill a GPU exactly.
 *
 * The paths: RM_ALLOC of a memory class (objects.c), RM_ALLOC_MEMORY
 * (NVOS02) and RM_VID_HEAP_CONTROL (NVOS32), all ending in
 * nvsim_alloc_memory_object().
 */
#include <linux/slab.h>
#include <linux/sched.h>

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

static NV_STATUS nvsim_gpu_parent(const struct nvsim_call *call,
				  NvHandle hClient, NvHandle hParent,
				  struct nvsim_client **client,
				  struct nvsim_object **parent)
{
	NV_STATUS status;

	status = nvsim_client_get(call, hClient, client);
	if (status != NV_OK)
		return status;
	*parent = nvsim_object_find(*client, hParent);
	if (!*parent)
		return NV_ERR_INVALID_OBJECT_PARENT;
	if ((*parent)->type != NVSIM_OBJ_DEVICE &&
	    (*parent)->type != NVSIM_OBJ_SUBDEVICE)
		return NV_ERR_INVALID_OBJECT_PARENT;
	return NV_OK;
}

/**
 * nvsim_rm_alloc_memory - NV_ESC_RM_ALLOC_MEMORY (NVOS02) / NV01_ALLOC_MEMORY
 * @call: the caller
 * @p: the parameters; the size is limit + 1
 *
 * Classes 0x40 and 0x3F are FB; 0x3E is system memory, not counted.  The
 * escape (rm.c) creates the mmap context for system memory afterwards.
 */
void nvsim_rm_alloc_memory(const struct nvsim_call *call, NVOS02_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_object *parent, *obj;
	NvHandle h = p->hObjectNew;
	NV_STATUS status;

	switch (p->hClass) {
	case NV01_MEMORY_LOCAL_USER:
	case NV01_MEMORY_LOCAL_PRIVILEGED:
	case NV01_MEMORY_SYSTEM:
		break;
	default:
		p->status = NV_ERR_INVALID_CLASS;
		return;
	}
	/* limit + 1 would wrap to a zero-sized allocation. */
	if (p->limit == U64_MAX) {
		p->status = NV_ERR_INVALID_ARGUMENT;
		return;
	}

	mutex_lock(&nvsim.lock);
	status = nvsim_gpu_parent(call, p->hRoot, p->hObjectParent, &client,
				  &parent);
	if (status != NV_OK)
		goto out;
	status = nvsim_alloc_memory_object(call, client, parent, &h, p->hClass,
					   p->limit + 1, &obj);
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
	u32 flags = as->flags, attr, hclass;
	NvHandle h = as->hMemory;
	struct nvsim_object *obj;
	NV_STATUS status;
	u64 *psize, size;

	switch (p->function) {
	case NVOS32_FUNCTION_ALLOC_SIZE:
		attr = as->attr;
		psize = &as->size;
		break;
	case NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT:
		attr = p->data.AllocTiledPitchHeight.attr;
		psize = &p->data.AllocTiledPitchHeight.size;
		break;
	default: /* NVOS32_FUNCTION_ALLOC_SIZE_RANGE */
		attr = p->data.AllocSizeRange.attr;
		psize = &p->data.AllocSizeRange.size;
		break;
	}
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

	status = nvsim_alloc_memory_object(call, client, parent, &h, hclass,
					   size, &obj);
	if (status != NV_OK)
		return status;

	/* hMemory is at the same offset in all three layouts. */
	as->hMemory = h;
	*psize = size;
	if (p->function == NVOS32_FUNCTION_ALLOC_SIZE) {
		as->limit = size - 1;
		if (hclass == NV01_MEMORY_LOCAL_USER) {
			as->offset = parent->gpu->next_fb_offset;
			parent->gpu->next_fb_offset += ALIGN(size, 2ULL << 20);
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

	mutex_lock(&nvsim.lock);
	status = nvsim_gpu_parent(call, p->hRoot, p->hObjectParent, &client,
				  &parent);
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
