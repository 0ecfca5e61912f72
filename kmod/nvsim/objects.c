// SPDX-License-Identifier: GPL-2.0
/*
 * objects.c - the RM object tree: clients, handles, allocation, free and dup.
 *
 * Every object lives in its client's handle table and in its parent's list of
 * children; freeing an object frees its subtree, freeing a client frees the
 * whole tree.  A client belongs to the file it was allocated on (or, after
 * NV_ESC_REGISTER_FD, to the control file that file registered with), and is
 * usable only from there, as the real driver's client validation does.
 * Kernel callers (rmops.c) may use any client.
 *
 * Everything here runs under nvsim.lock; user memory is copied before the
 * lock is taken and after it is dropped.
 */
#include <linux/slab.h>
#include <linux/sched.h>
#include <linux/uaccess.h>
#include <linux/string.h>

#include "nvsim.h"
#include "classes.h"

/**
 * nvsim_copy_in - read parameters the caller points to
 * @call: the caller (decides whether @ptr is a user or kernel pointer)
 * @dst: kernel buffer
 * @ptr: the caller's pointer
 * @size: bytes to copy
 *
 * Return: 0, or -EFAULT for a NULL or unreadable pointer.
 */
int nvsim_copy_in(const struct nvsim_call *call, void *dst, u64 ptr,
		  size_t size)
{
	if (!size)
		return 0;
	if (!ptr)
		return -EFAULT;
	if (call->kparams) {
		memcpy(dst, (const void *)(uintptr_t)ptr, size);
		return 0;
	}
	return copy_from_user(dst, u64_to_user_ptr(ptr), size) ? -EFAULT : 0;
}

int nvsim_copy_out(const struct nvsim_call *call, u64 ptr, const void *src,
		   size_t size)
{
	if (!size)
		return 0;
	if (!ptr)
		return -EFAULT;
	if (call->kparams) {
		memcpy((void *)(uintptr_t)ptr, src, size);
		return 0;
	}
	return copy_to_user(u64_to_user_ptr(ptr), src, size) ? -EFAULT : 0;
}

/* The file whose clients a caller may use: its registered control file. */
static struct nvsim_file *nvsim_client_owner(const struct nvsim_call *call)
{
	return call->file->ctl_nvfp ? call->file->ctl_nvfp : call->file;
}

/**
 * nvsim_client_get - look up a client the caller may use
 * @call: the caller
 * @hClient: the client handle
 * @out: returns the client
 *
 * Return: NV_OK, or NV_ERR_INVALID_CLIENT for an unknown client or one that
 * belongs to another file.
 */
NV_STATUS nvsim_client_get(const struct nvsim_call *call, NvHandle hClient,
			   struct nvsim_client **out)
{
	struct nvsim_client *client;

	lockdep_assert_held(&nvsim.lock);

	client = xa_load(&nvsim.clients, hClient);
	if (!client)
		return NV_ERR_INVALID_CLIENT;
	if (!call->kernel && client->owner != nvsim_client_owner(call))
		return NV_ERR_INVALID_CLIENT;
	*out = client;
	return NV_OK;
}

/* The object behind a handle, an invalidated one included (its handle lives). */
struct nvsim_object *nvsim_object_ref(struct nvsim_client *client,
				      NvHandle handle)
{
	lockdep_assert_held(&nvsim.lock);

	if (handle == client->handle)
		return &client->obj;
	return xa_load(&client->objects, handle);
}

/*
 * A live object: an invalidated one has no resource behind its handle
 * (pResource NULL), which every use of the object needs.
 */
struct nvsim_object *nvsim_object_find(struct nvsim_client *client,
				       NvHandle handle)
{
	struct nvsim_object *obj = nvsim_object_ref(client, handle);

	return obj && !obj->invalidated ? obj : NULL;
}

static bool nvsim_object_has_ancestor(struct nvsim_object *obj,
				      struct nvsim_object *anc)
{
	for (obj = obj->parent; obj; obj = obj->parent)
		if (obj == anc)
			return true;
	return false;
}

/**
 * nvsim_object_depend - dant is freed with dep (refAddDependant, rs_resource.c)
 * @dep: the dependency
 * @dant: the dependant
 *
 * As refAddDependant: nothing to record when dep is an ancestor of dant
 * (freeing dep frees dant anyway).
 *
 * Return: NV_OK or NV_ERR_NO_MEMORY.
 */
NV_STATUS nvsim_object_depend(struct nvsim_object *dep, struct nvsim_object *dant)
{
	struct nvsim_dep *d;

	lockdep_assert_held(&nvsim.lock);
	if (nvsim_object_has_ancestor(dant, dep))
		return NV_OK;
	d = kzalloc(sizeof(*d), GFP_KERNEL_ACCOUNT);
	if (!d)
		return NV_ERR_NO_MEMORY;
	d->dep = dep;
	d->dant = dant;
	list_add_tail(&d->dep_node, &dep->dependants);
	list_add_tail(&d->dant_node, &dant->depends);
	return NV_OK;
}

static void nvsim_dep_del(struct nvsim_dep *d)
{
	list_del(&d->dep_node);
	list_del(&d->dant_node);
	kfree(d);
}

/*
 * dant depends on the VA space hVASpace names, if it names one of the
 * client's (a constructor that found none has refused the allocation, or
 * takes the device's default, on which nothing depends).
 */
static NV_STATUS nvsim_depend_vaspace(struct nvsim_object *dant, NvHandle hVASpace)
{
	struct nvsim_object *vas = hVASpace ?
		nvsim_object_find(dant->client, hVASpace) : NULL;

	if (!vas || vas->type != NVSIM_OBJ_VASPACE)
		return NV_OK;
	return nvsim_object_depend(vas, dant);
}

/* _refRemoveAllDependencies (rs_client.c): obj no longer goes with others. */
static void nvsim_object_undepend(struct nvsim_object *obj)
{
	struct nvsim_dep *d, *tmp;

	list_for_each_entry_safe(d, tmp, &obj->depends, dant_node)
		nvsim_dep_del(d);
}

/* RM's generator: a monotonic index in a fixed range, skipping live handles. */
static NV_STATUS nvsim_gen_handle(struct nvsim_client *client, NvHandle *out)
{
	u32 tries;

	for (tries = 0; tries < NVSIM_OBJECT_HANDLE_RANGE; tries++) {
		NvHandle h = NVSIM_OBJECT_HANDLE_BASE +
			     (client->handle_gen++ % NVSIM_OBJECT_HANDLE_RANGE);

		if (h != client->handle && !xa_load(&client->objects, h)) {
			*out = h;
			return NV_OK;
		}
	}
	return NV_ERR_INSUFFICIENT_RESOURCES;
}

/**
 * nvsim_object_new - add an object to a client's tree
 * @client: the client
 * @parent: the parent object (already validated for the class)
 * @handle: in: the requested handle, 0 to let the driver choose; out: the handle
 * @hclass: the class
 * @type: what the object is
 * @out: returns the object, linked and counted; class state is zeroed
 *
 * The object is complete as far as the tree is concerned, so a constructor
 * that fails later simply calls nvsim_object_destroy(), which copes with
 * zeroed class state.
 *
 * Return: NV_OK; NV_ERR_INVALID_OBJECT_HANDLE if the handle is the client's
 * own; NV_ERR_INSERT_DUPLICATE_NAME if it is in use (as RM's
 * clientValidateNewResourceHandle); NV_ERR_NO_MEMORY.
 */
NV_STATUS nvsim_object_new(const struct nvsim_call *call,
			   struct nvsim_client *client,
			   struct nvsim_object *parent, NvHandle *handle,
			   u32 hclass, enum nvsim_obj_type type,
			   struct nvsim_object **out)
{
	struct nvsim_object *obj;
	NvHandle h = *handle;
	NV_STATUS status;
	int ret;

	lockdep_assert_held(&nvsim.lock);

	if (h == 0) {
		status = nvsim_gen_handle(client, &h);
		if (status != NV_OK)
			return status;
	} else if (h == client->handle) {
		return NV_ERR_INVALID_OBJECT_HANDLE;
	} else if (xa_load(&client->objects, h)) {
		return NV_ERR_INSERT_DUPLICATE_NAME;
	}

	obj = kzalloc(sizeof(*obj), GFP_KERNEL_ACCOUNT);
	if (!obj)
		return NV_ERR_NO_MEMORY;
	obj->handle = h;
	obj->hclass = hclass;
	obj->type = type;
	obj->priv = call->priv;
	if (client->owner)
		atomic_inc(&nvsim.nr_user_client_objs[obj->priv]);
	obj->client = client;
	obj->parent = parent;
	obj->gpu = parent->gpu;
	INIT_LIST_HEAD(&obj->children);
	INIT_LIST_HEAD(&obj->dependants);
	INIT_LIST_HEAD(&obj->depends);
	if (type == NVSIM_OBJ_CHANNEL)
		obj->channel.chid = U32_MAX;

	ret = xa_insert(&client->objects, h, obj, GFP_KERNEL_ACCOUNT);
	if (ret) {
		kfree(obj);
		return ret == -EBUSY ? NV_ERR_INSERT_DUPLICATE_NAME :
				       NV_ERR_NO_MEMORY;
	}
	list_add_tail(&obj->sibling, &parent->children);
	atomic_inc(&nvsim.nr_objects);

	*handle = h;
	*out = obj;
	return NV_OK;
}

static void nvsim_destroy_children(struct nvsim_object *obj)
{
	struct nvsim_object *child, *tmp;

	/*
	 * Newest first, as RM frees in reverse order of allocation; the depth
	 * is bounded by the class parent rules (client/device/TSG/channel).
	 */
	list_for_each_entry_safe_reverse(child, tmp, &obj->children, sibling)
		nvsim_object_destroy(child);
}

/* What the object's class holds in the simulated GPU; once. */
static void nvsim_object_teardown(struct nvsim_object *obj)
{
	if (!list_empty(&obj->client->dma_maps))
		nvsim_dma_maps_drop(obj);

	switch (obj->type) {
	case NVSIM_OBJ_CTXSHARE:
		/* The parent TSG outlives its children (freed first). */
		if (obj->parent->tsg.tsg)
			obj->parent->tsg.tsg->subctx_used &= ~BIT_ULL(obj->ctxshare.subctx);
		break;
	case NVSIM_OBJ_MEMORY:
		if (obj->memory.mem)
			nvsim_mem_put(obj->memory.mem);
		obj->memory.mem = NULL;
		break;
	case NVSIM_OBJ_TSG:
		if (obj->tsg.tsg)
			nvsim_tsg_free(obj->tsg.tsg);
		obj->tsg.tsg = NULL;
		break;
	case NVSIM_OBJ_CHANNEL:
		nvsim_channel_object_fini(obj);
		break;
	case NVSIM_OBJ_SUBDEVICE:
		nvsim_cuda_subdevice_teardown(obj);
		break;
	case NVSIM_OBJ_DEVICE:
		if (!obj->device.vas_client)
			atomic_dec(&nvsim.nr_vas_global);
		else if (obj->device.vas_client != obj->client->handle)
			atomic_dec(&nvsim.nr_vas_foreign);
		break;
	case NVSIM_OBJ_P2P:
		nvsim_p2p_teardown(obj);
		break;
	default:
		break;
	}
}

static void nvsim_object_invalidate(struct nvsim_object *obj);

/*
 * The dependants of obj go before it: clientUpdatePendingFreeList
 * (rs_server.c) puts them, with their children and their own dependants,
 * at the head of the client's pending free list, and serverFreeResourceTree
 * frees them first.  One that is not below the object being freed is only
 * invalidated (bInvalidateOnly: refHasAncestor against the free stack).
 */
static void nvsim_invalidate_dependants(struct nvsim_object *obj)
{
	struct nvsim_dep *d;

	while ((d = list_first_entry_or_null(&obj->dependants, struct nvsim_dep,
					     dep_node))) {
		struct nvsim_object *dant = d->dant;

		/* Its own edges go as it is invalidated; this one at least. */
		nvsim_dep_del(d);
		nvsim_object_invalidate(dant);
	}
}

/*
 * clientFreeResource (rs_client.c) with bInvalidateOnly: the resource is
 * destructed (its CPU mappings unmapped first, clientUnmapResourceRefMappings,
 * and its dependencies dropped, _refRemoveAllDependencies), the handle stays
 * in the client, bInvalidated, until it is freed itself.  Its children and
 * dependants were on the pending list before it: invalidated too.
 */
static void nvsim_object_invalidate(struct nvsim_object *obj)
{
	struct nvsim_object *child;

	lockdep_assert_held(&nvsim.lock);
	if (obj->invalidated)
		return;
	obj->invalidated = true;
	nvsim_invalidate_dependants(obj);
	list_for_each_entry_reverse(child, &obj->children, sibling)
		nvsim_object_invalidate(child);
	nvsim_object_undepend(obj);
	nvsim_object_teardown(obj);
}

/**
 * nvsim_object_destroy - free an object, its descendants and what they hold
 * @obj: the object (not a client: see nvsim_client_destroy())
 *
 * Its dependants that are not below it are invalidated first, as
 * serverFreeResourceTree does (rs_server.c).  An object invalidated before
 * (freed as another's dependant) has nothing left but its handle.
 */
void nvsim_object_destroy(struct nvsim_object *obj)
{
	lockdep_assert_held(&nvsim.lock);

	nvsim_invalidate_dependants(obj);
	nvsim_destroy_children(obj);
	nvsim_object_undepend(obj);
	if (!obj->invalidated)
		nvsim_object_teardown(obj);

	list_del(&obj->sibling);
	xa_erase(&obj->client->objects, obj->handle);
	if (obj->client->owner)
		atomic_dec(&nvsim.nr_user_client_objs[obj->priv]);
	atomic_dec(&nvsim.nr_objects);
	kfree(obj);
}

void nvsim_client_destroy(struct nvsim_client *client)
{
	lockdep_assert_held(&nvsim.lock);

	nvsim_destroy_children(&client->obj);
	nvsim_pid_busy_release(client);
	WARN_ON(!xa_empty(&client->objects));
	WARN_ON(!list_empty(&client->dma_maps));
	xa_destroy(&client->objects);
	xa_erase(&nvsim.clients, client->handle);
	list_del(&client->owner_node);
	atomic_dec(&nvsim.nr_objects);
	atomic_dec(&nvsim.nr_clients);
	put_pid(client->pid_info);
	kfree(client);
}

void nvsim_free_file_clients(struct nvsim_file *nvfp)
{
	struct nvsim_client *client, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(client, tmp, &nvfp->clients, owner_node)
		nvsim_client_destroy(client);
}

void nvsim_free_kernel_clients(void)
{
	struct nvsim_client *client, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(client, tmp, &nvsim.kernel_clients, owner_node)
		nvsim_client_destroy(client);
}

/**
 * nvsim_check_idle - at unload, everything must already be gone
 *
 * Files pin the module and VMAs pin files, so after the kernel clients are
 * freed nothing may be left; a WARN here is a leak in the simulator.
 */
void nvsim_check_idle(void)
{
	unsigned int i;

	mutex_lock(&nvsim.lock);
	WARN_ON(!xa_empty(&nvsim.clients));
	WARN_ON(!list_empty(&nvsim.pid_fb));
	WARN_ON(!list_empty(&nvsim.pid_busy));
	WARN_ON(!list_empty(&nvsim.kmaps));
	WARN_ON(!list_empty(&nvsim.ctx_files));
	WARN_ON(atomic_read(&nvsim.nr_objects));
	WARN_ON(atomic_read(&nvsim.nr_clients));
	WARN_ON(atomic_read(&nvsim.nr_mappings));
	WARN_ON(atomic64_read(&nvsim.uvm_pages));
	WARN_ON(atomic_read(&nvsim.nr_dmabufs));
	WARN_ON(atomic_read(&nvsim.nr_dmabuf_dups));
	for (i = 0; i < nvsim.num_gpus; i++) {
		WARN_ON(nvsim.gpus[i].fb_used);
		WARN_ON(nvsim.gpus[i].open_count);
	}
	xa_destroy(&nvsim.clients);
	mutex_unlock(&nvsim.lock);
}

bool nvsim_client_on_gpu(struct nvsim_client *client, struct nvsim_gpu *gpu)
{
	struct nvsim_object *obj;

	list_for_each_entry(obj, &client->obj.children, sibling)
		if (obj->type == NVSIM_OBJ_DEVICE && obj->gpu == gpu)
			return true;
	return false;
}

/* ------------------------------------------------------------- clients */

static NV_STATUS nvsim_client_alloc(const struct nvsim_call *call,
				    NvHandle *handle)
{
	struct nvsim_client *client;
	NvHandle h = *handle;
	u32 tries;
	int ret;

	if (h == 0) {
		for (tries = 0; tries <= 0xfffff; tries++) {
			h = NVSIM_CLIENT_HANDLE_BASE |
			    (nvsim.next_client++ & 0xfffff);
			if (!xa_load(&nvsim.clients, h))
				break;
		}
		if (tries > 0xfffff)
			return NV_ERR_INSUFFICIENT_RESOURCES;
	} else if (xa_load(&nvsim.clients, h)) {
		return NV_ERR_INSERT_DUPLICATE_NAME;
	}

	client = kzalloc(sizeof(*client), GFP_KERNEL_ACCOUNT);
	if (!client)
		return NV_ERR_NO_MEMORY;
	client->handle = h;
	client->tgid = task_tgid_nr(current);
	xa_init(&client->objects);
	client->obj.handle = h;
	client->obj.hclass = NV01_ROOT_CLIENT;
	client->obj.type = NVSIM_OBJ_CLIENT;
	client->obj.client = client;
	INIT_LIST_HEAD(&client->obj.children);
	INIT_LIST_HEAD(&client->obj.sibling);
	INIT_LIST_HEAD(&client->obj.dependants);
	INIT_LIST_HEAD(&client->obj.depends);
	INIT_LIST_HEAD(&client->dma_maps);

	ret = xa_insert(&nvsim.clients, h, client, GFP_KERNEL_ACCOUNT);
	if (ret) {
		kfree(client);
		return ret == -EBUSY ? NV_ERR_INSERT_DUPLICATE_NAME :
				       NV_ERR_NO_MEMORY;
	}
	if (call->kernel) {
		list_add_tail(&client->owner_node, &nvsim.kernel_clients);
	} else {
		client->owner = nvsim_client_owner(call);
		list_add_tail(&client->owner_node, &client->owner->clients);
		/* rmclientConstruct_IMPL: a user client's pid, held (put at destroy) */
		client->pid_info = get_task_pid(current, PIDTYPE_PID);
	}
	atomic_inc(&nvsim.nr_clients);
	atomic_inc(&nvsim.nr_objects);
	*handle = h;
	return NV_OK;
}

/* ------------------------------------------------------------- classes */

static NV_STATUS nvsim_device_ctor(const struct nvsim_call *call,
				   const struct nvsim_class_desc *cls,
				   struct nvsim_client *client,
				   struct nvsim_object *parent,
				   NvHandle *handle, u32 hclass, void *params)
{
	NV0080_ALLOC_PARAMETERS *p = params;
	struct nvsim_object *obj;
	u32 inst = p ? p->deviceId : 0;
	NV_STATUS status;

	/*
	 * deviceConstruct: an instance with no GPU behind it fails
	 * gpumgrIsDeviceInstanceValid, which the driver reports as
	 * NV_ERR_INVALID_CLASS.
	 */
	if (inst >= nvsim.num_gpus)
		return NV_ERR_INVALID_CLASS;

	/* One device per instance per client (outside MIG). */
	list_for_each_entry(obj, &client->obj.children, sibling)
		if (obj->type == NVSIM_OBJ_DEVICE && obj->device.inst == inst)
			return NV_ERR_INSUFFICIENT_RESOURCES;

	/*
	 * The VA space the device joins, as deviceInitClientShare
	 * (src/kernel/gpu/device_share.c): hClientShare 0 is the GPU's global
	 * one, the device's own client a new one, and any other client
	 * handle that client's, found by handle alone
	 * (serverGetClientUnderLock) whoever owns it, provided it has a
	 * device on the same instance (deviceGetByInstance).  No privilege or
	 * ownership is asked for.
	 */
	if (p && p->hClientShare && p->hClientShare != client->handle) {
		struct nvsim_client *share = xa_load(&nvsim.clients, p->hClientShare);
		struct nvsim_object *d;
		bool found = false;

		if (!share)
			return NV_ERR_INVALID_CLIENT;
		list_for_each_entry(d, &share->obj.children, sibling)
			if (d->type == NVSIM_OBJ_DEVICE && d->device.inst == inst)
				found = true;
		if (!found)
			return NV_ERR_OBJECT_NOT_FOUND;
	}

	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_DEVICE, &obj);
	if (status != NV_OK)
		return status;
	obj->gpu = nvsim_gpu_of_instance(inst);
	obj->device.inst = inst;
	obj->device.vas_client = p ? p->hClientShare : 0;
	obj->device.va_mode = p ? p->vaMode : 0;
	if (!obj->device.vas_client)
		atomic_inc(&nvsim.nr_vas_global);
	else if (obj->device.vas_client != client->handle)
		atomic_inc(&nvsim.nr_vas_foreign);
	return NV_OK;
}

static NV_STATUS nvsim_subdevice_ctor(const struct nvsim_call *call,
				      const struct nvsim_class_desc *cls,
				      struct nvsim_client *client,
				      struct nvsim_object *parent,
				      NvHandle *handle, u32 hclass,
				      void *params)
{
	NV2080_ALLOC_PARAMETERS *p = params;
	struct nvsim_object *obj;
	u32 inst = p ? p->subDeviceId : 0;

	/* Each simulated device has exactly one GPU: subdevice 0. */
	if (inst != 0)
		return NV_ERR_INVALID_CLASS;

	list_for_each_entry(obj, &parent->children, sibling)
		if (obj->type == NVSIM_OBJ_SUBDEVICE && obj->subdevice.inst == inst)
			return NV_ERR_INSUFFICIENT_RESOURCES;

	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_SUBDEVICE, &obj);
}

static NV_STATUS nvsim_memory_ctor(const struct nvsim_call *call,
				   const struct nvsim_class_desc *cls,
				   struct nvsim_client *client,
				   struct nvsim_object *parent,
				   NvHandle *handle, u32 hclass, void *params)
{
	NV_MEMORY_ALLOCATION_PARAMS *p = params;
	struct nvsim_object *obj;
	NV_STATUS status;

	/* Rounded to the page as RM does, and written back (nvsim_rm_round). */
	if (p->size == 0)
		return NV_ERR_INVALID_ARGUMENT;
	if (hclass == NV01_MEMORY_LOCAL_USER) {
		status = nvsim_rm_round(&p->size, &p->attr, &p->attr2);
		if (status != NV_OK)
			return status;
	} else if (hclass == NV01_MEMORY_SYSTEM) {
		/* 4 KiB pages, as RM gives system memory. */
		status = nvsim_rm_sysmem_round(&p->size, &p->attr, &p->attr2);
		if (status != NV_OK)
			return status;
	}

	status = nvsim_alloc_memory_object(call, client, parent, handle,
					   hclass, p->size, &obj);
	if (status != NV_OK)
		return status;

	if (hclass == NV50_MEMORY_VIRTUAL) {
		/* A VA reservation: offset returns its VA (bookkeeping). */
		p->limit = p->size - 1;
		status = nvsim_virtual_va_assign(obj,
				p->flags & NVOS32_ALLOC_FLAGS_FIXED_ADDRESS_ALLOCATE,
				p->offset, p->size);
		if (status != NV_OK) {
			nvsim_object_destroy(obj);
			return status;
		}
		obj->memory.hvaspace = p->hVASpace;
		p->offset = obj->memory.va_base;
		return NV_OK;
	}
	p->limit = p->size - 1;
	p->offset = nvsim_is_fb_class(hclass) ? obj->gpu->next_fb_offset : 0;
	if (nvsim_is_fb_class(hclass))
		obj->gpu->next_fb_offset += ALIGN(p->size, 2ULL << 20);
	return NV_OK;
}

static NV_STATUS nvsim_virtual_ctor(const struct nvsim_call *call,
				    const struct nvsim_class_desc *cls,
				    struct nvsim_client *client,
				    struct nvsim_object *parent,
				    NvHandle *handle, u32 hclass, void *params)
{
	NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS *p = params;
	u64 base = p ? p->offset : 0, limit = p ? p->limit : 0;
	struct nvsim_object *obj;
	NV_STATUS status;
	u64 size = 0;

	/* A VA reservation: no FB.  limit 0 means "the whole VA space". */
	if (limit)
		size = limit + 1;
	status = nvsim_alloc_memory_object(call, client, parent, handle, hclass,
					   size, &obj);
	if (status != NV_OK)
		return status;
	/* The range [offset, limit] (bookkeeping; an empty one maps nothing). */
	obj->memory.va_base = base;
	if (limit == 0 || limit >= base)
		nvsim_virtual_va_assign(obj, true, base,
					limit ? limit - base + 1 : 0);
	obj->memory.hvaspace = p ? p->hVASpace : 0;
	return NV_OK;
}

static NV_STATUS nvsim_tsg_ctor(const struct nvsim_call *call,
				const struct nvsim_class_desc *cls,
				struct nvsim_client *client,
				struct nvsim_object *parent, NvHandle *handle,
				u32 hclass, void *params)
{
	struct nvsim_object *obj;
	NV_STATUS status;

	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_TSG, &obj);
	if (status != NV_OK)
		return status;
	status = nvsim_tsg_object_init(obj, params);
	/*
	 * kchangrpapiConstruct_IMPL (kernel_channel_group_api.c): a TSG made
	 * on a VA space is its dependant (refAddDependant).
	 */
	if (status == NV_OK && params)
		status = nvsim_depend_vaspace(obj,
			((const NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS *)params)->hVASpace);
	if (status != NV_OK)
		nvsim_object_destroy(obj);
	return status;
}

static NV_STATUS nvsim_channel_ctor(const struct nvsim_call *call,
				    const struct nvsim_class_desc *cls,
				    struct nvsim_client *client,
				    struct nvsim_object *parent,
				    NvHandle *handle, u32 hclass, void *params)
{
	struct nvsim_object *obj;
	NV_STATUS status;

	u32 engine = ((NV_CHANNEL_ALLOC_PARAMS *)params)->engineType;
	u32 tsg_engine = parent->type == NVSIM_OBJ_TSG ?
			 parent->tsg.tsg->engine_type : NV2080_ENGINE_TYPE_NULL;

	/*
	 * kchannelConstruct_IMPL (kernel_channel.c), per-runlist channel RAM
	 * (Ampere and later): a channel in a TSG runs on the TSG's engine; an
	 * engine type of its own that differs is NV_ERR_INVALID_ARGUMENT.
	 * (A TSG made without a valid engine, which RM refuses on these GPUs,
	 * kchannelgrpapiConstruct_IMPL, is still accepted by nvsim, and then
	 * the channel's own engine type is kept.)
	 */
	if (tsg_engine != NV2080_ENGINE_TYPE_NULL) {
		if (engine != NV2080_ENGINE_TYPE_NULL && engine != tsg_engine)
			return NV_ERR_INVALID_ARGUMENT;
		engine = tsg_engine;
	}
	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_CHANNEL, &obj);
	if (status != NV_OK)
		return status;
	status = nvsim_channel_object_init(obj, params);
	if (status != NV_OK) {
		nvsim_object_destroy(obj);
		return status;
	}
	obj->channel.engine_type = engine;
	/*
	 * kchannelConstruct_IMPL (kernel_channel.c): the channel is a
	 * dependant of the VA space it names (a channel without a TSG) and of
	 * its context share (refAddDependant), so freeing either frees the
	 * channel.  (Its hidden TSG, the TSG's legacy context shares and
	 * graphics context are the driver's own objects here, without
	 * handles; the real driver gives them generated handles.  A USERD in
	 * OS-descriptor memory is a dependency too in 595.45.04,
	 * kchannelCreateUserdMemDesc_GV100: not modelled.)
	 */
	status = nvsim_depend_vaspace(obj,
		((const NV_CHANNEL_ALLOC_PARAMS *)params)->hVASpace);
	if (status == NV_OK) {
		NvHandle hcs = ((const NV_CHANNEL_ALLOC_PARAMS *)params)->hContextShare;
		struct nvsim_object *cs = hcs ? nvsim_object_find(client, hcs) : NULL;

		if (cs && cs->type == NVSIM_OBJ_CTXSHARE)
			status = nvsim_object_depend(cs, obj);
	}
	if (status != NV_OK) {
		nvsim_object_destroy(obj);
		return status;
	}
	/*
	 * kchannelConstruct (kernel_channel.c): a channel made at kernel
	 * privilege, or by an administrator, is a privileged channel (the
	 * driver's own kind, which may update page tables in physical
	 * mode); a user's is not.
	 */
	if (call->priv >= NVSIM_PRIV_USER_ROOT) {
		obj->channel.privileged = true;
		atomic_inc(&nvsim.nr_privileged_channels);
	}
	return NV_OK;
}

static NV_STATUS nvsim_usermode_ctor(const struct nvsim_call *call,
				     const struct nvsim_class_desc *cls,
				     struct nvsim_client *client,
				     struct nvsim_object *parent,
				     NvHandle *handle, u32 hclass, void *params)
{
	struct nvsim_object *obj;

	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_USERMODE, &obj);
}

/*
 * FERMI_CONTEXT_SHARE_A under a TSG: kctxshareapiConstruct_IMPL and
 * kctxshareInitCommon_IMPL (src/kernel/gpu/fifo/kernel_ctxshare.c).  The
 * VA space: hVASpace 0 is the device's default (none on a
 * MULTIPLE_VASPACES device: NV_ERR_INVALID_STATE), else a FERMI_VASPACE_A
 * of the client (vaspaceGetByHandleOrDeviceDefault: unknown
 * NV_ERR_OBJECT_NOT_FOUND, another kind of object
 * NV_ERR_INVALID_OBJECT_HANDLE, a SINGLE_VASPACE device
 * NV_ERR_INVALID_STATE).  The subcontext id comes from the TSG's heap of
 * the chip's subcontexts: SYNC takes 0, ASYNC the highest free one,
 * ASYNC_PREFER_LOWER the lowest free one above 0 (then 0), SPECIFIED the
 * one asked for; none free, or out of range, NV_ERR_NO_MEMORY (eheapAlloc);
 * other flags NV_ERR_INVALID_ARGUMENT.  subctxId returns it, with bit 31
 * set for ASYNC_PREFER_LOWER when below kfifoGetMaxLowerSubcontext (all of
 * them on GH100 and GA102).
 */
static NV_STATUS nvsim_ctxshare_ctor(const struct nvsim_call *call,
				     const struct nvsim_class_desc *cls,
				     struct nvsim_client *client,
				     struct nvsim_object *parent,
				     NvHandle *handle, u32 hclass, void *params)
{
	NV_CTXSHARE_ALLOCATION_PARAMETERS *p = params;
	struct nvsim_tsg *tsg = parent->tsg.tsg;
	struct nvsim_object *dev = parent->parent, *vas, *obj;
	u32 max = min_t(u32, nvsim_arch->max_subctx, 64), id = 0;
	NV_STATUS status;

	if (!p->hVASpace) {
		if (dev->device.va_mode == NV_DEVICE_ALLOCATION_VAMODE_MULTIPLE_VASPACES)
			return NV_ERR_INVALID_STATE;
	} else {
		vas = xa_load(&client->objects, p->hVASpace);
		if (!vas)
			return NV_ERR_OBJECT_NOT_FOUND;
		if (vas->type != NVSIM_OBJ_VASPACE)
			return NV_ERR_INVALID_OBJECT_HANDLE;
		/* The VA space's device (its parent, or its subdevice's). */
		dev = vas->parent->type == NVSIM_OBJ_SUBDEVICE ? vas->parent->parent :
								 vas->parent;
		if (dev->device.va_mode == NV_DEVICE_ALLOCATION_VAMODE_SINGLE_VASPACE)
			return NV_ERR_INVALID_STATE;
	}

	switch (p->flags) {
	case NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SYNC:
		id = 0;
		break;
	case NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_SPECIFIED:
		id = p->subctxId;
		break;
	case NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC:
		for (id = max; id > 0 && (tsg->subctx_used & BIT_ULL(id - 1)); id--)
			;
		if (id == 0)
			return NV_ERR_NO_MEMORY;
		id--;
		break;
	case NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC_PREFER_LOWER:
		for (id = 1; id < max && (tsg->subctx_used & BIT_ULL(id)); id++)
			;
		if (id == max)
			id = 0;
		break;
	default:
		return NV_ERR_INVALID_ARGUMENT;
	}
	if (id >= max || (tsg->subctx_used & BIT_ULL(id)))
		return NV_ERR_NO_MEMORY;

	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_CTXSHARE, &obj);
	if (status != NV_OK)
		return status;
	tsg->subctx_used |= BIT_ULL(id);
	obj->ctxshare.subctx = id;
	obj->ctxshare.hvaspace = p->hVASpace;
	/* kctxshareapiConstruct_IMPL: a dependant of its VA space. */
	status = nvsim_depend_vaspace(obj, p->hVASpace);
	if (status != NV_OK) {
		nvsim_object_destroy(obj);
		return status;
	}
	p->subctxId = id;
	if (p->flags == NV_CTXSHARE_ALLOCATION_FLAGS_SUBCONTEXT_ASYNC_PREFER_LOWER)
		p->subctxId |= 1U << 31;        /* _ALLOCATION_SUCCESS */
	return NV_OK;
}

/*
 * Compute, 3D, 2D, inline-to-memory and copy objects on a channel,
 * bookkeeping only: chandesConstruct_IMPL (channel_descendant.c).  With
 * per-runlist channel RAM (Ampere and later) the channel must have an
 * engine type (NV_ERR_INVALID_OBJECT_PARENT), and the class must be one
 * the chip lists for that engine (gpuGetClassByEngineAndClassId:
 * NV_ERR_INVALID_CLASS); a copy class on a GR channel goes to the GR
 * engine's partner copy engine (GRCE).  The parameters
 * (NV_GR_ALLOCATION_PARAMETERS, NVB0B5_ALLOCATION_PARAMETERS) are optional
 * and not read.
 */
static NV_STATUS nvsim_engine_ctor(const struct nvsim_call *call,
				   const struct nvsim_class_desc *cls,
				   struct nvsim_client *client,
				   struct nvsim_object *parent,
				   NvHandle *handle, u32 hclass, void *params)
{
	u32 t = parent->channel.engine_type;
	int eng = nvsim_arch_class_engine(hclass);
	struct nvsim_object *obj;
	u32 want = 0;
	int ceng;

	if (t == NV2080_ENGINE_TYPE_NULL)
		return NV_ERR_INVALID_OBJECT_PARENT;
	if (t >= NV2080_ENGINE_TYPE_GR0 && t <= NV2080_ENGINE_TYPE_GR7) {
		ceng = NVSIM_ENG_GR;
		want = t - NV2080_ENGINE_TYPE_GR0;
	} else if (t >= NV2080_ENGINE_TYPE_COPY0 && t <= NV2080_ENGINE_TYPE_COPY9) {
		ceng = NVSIM_ENG_CE;
		want = t - NV2080_ENGINE_TYPE_COPY0;
	} else {
		return NV_ERR_INVALID_CLASS;
	}
	/* GRCE: the GR engine's partner copy engine (nvsim: copy engine 0). */
	if (ceng == NVSIM_ENG_GR && eng == NVSIM_ENG_CE) {
		ceng = NVSIM_ENG_CE;
		want = 0;
	}
	if (!nvsim_arch_engine_has_class(hclass, ceng, want))
		return NV_ERR_INVALID_CLASS;

	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_ENGINE, &obj);
}

/*
 * NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through RM_ALLOC (the class's own
 * parameters): osdescConstruct_IMPL (os_desc_mem.c) and
 * osCreateMemFromOsDescriptor (arch/nvalloc/unix/src/osmemdesc.c).  A
 * physical address from a user: NV_ERR_NOT_SUPPORTED; no descriptor or a
 * limit of 0: NV_ERR_INVALID_PARAM_STRUCT; a kernel client may give only
 * physical, file, dma-buf or sg-table descriptors, a user client no dma-buf
 * or sg-table (NV_ERR_NOT_SUPPORTED); a user virtual address is refused
 * there (NV_ERR_NOT_SUPPORTED: only the RM_ALLOC_MEMORY escape pins user
 * memory, memory.c); an unknown type NV_ERR_INVALID_ARGUMENT.  The
 * remaining types hand RM kernel objects (page arrays, I/O PTEs, files,
 * dma-bufs) that nvsim does not model: NV_ERR_NOT_SUPPORTED.
 */
static NV_STATUS nvsim_osdesc_ctor(const struct nvsim_call *call,
				   const struct nvsim_class_desc *cls,
				   struct nvsim_client *client,
				   struct nvsim_object *parent,
				   NvHandle *handle, u32 hclass, void *params)
{
	NV_OS_DESC_MEMORY_ALLOCATION_PARAMS *p = params;
	bool kclient = !client->owner;
	u32 t = p->descriptorType;

	if (t == NVOS32_DESCRIPTOR_TYPE_OS_PHYS_ADDR && call->priv < NVSIM_PRIV_KERNEL)
		return NV_ERR_NOT_SUPPORTED;
	if (!p->descriptor || p->limit == 0)
		return NV_ERR_INVALID_PARAM_STRUCT;
	if (kclient && t != NVOS32_DESCRIPTOR_TYPE_OS_PHYS_ADDR &&
	    t != NVOS32_DESCRIPTOR_TYPE_OS_FILE_HANDLE &&
	    t != NVOS32_DESCRIPTOR_TYPE_OS_DMA_BUF_PTR &&
	    t != NVOS32_DESCRIPTOR_TYPE_OS_SGT_PTR)
		return NV_ERR_NOT_SUPPORTED;
	if (!kclient && (t == NVOS32_DESCRIPTOR_TYPE_OS_DMA_BUF_PTR ||
			 t == NVOS32_DESCRIPTOR_TYPE_OS_SGT_PTR))
		return NV_ERR_NOT_SUPPORTED;
	if (t > NVOS32_DESCRIPTOR_TYPE_OS_SGT_PTR)
		return NV_ERR_INVALID_ARGUMENT;
	return NV_ERR_NOT_SUPPORTED;
}

static NV_STATUS nvsim_vaspace_class_ctor(const struct nvsim_call *call,
					  const struct nvsim_class_desc *cls,
					  struct nvsim_client *client,
					  struct nvsim_object *parent,
					  NvHandle *handle, u32 hclass,
					  void *params)
{
	return nvsim_vaspace_ctor(call, client, parent, handle, hclass, params);
}

/*
 * GT200_DEBUGGER under a device (resource_list.h: RS_REQUIRED params),
 * bookkeeping only, as ksmdbgssnConstruct_IMPL
 * (src/kernel/gpu/gr/kernel_sm_debugger_session.c) checks it: the obsolete
 * debugger client set NV_ERR_INVALID_ARGUMENT; hAppClient 0 is the caller's
 * client, another is found among every client (NV_ERR_INVALID_CLIENT);
 * hClass3dObject not found in it NV_ERR_INVALID_OBJECT_PARENT, found but
 * not a GR object (KernelGraphicsObject) NV_ERR_INVALID_OBJECT.  The
 * check that follows is not modelled: on the CPU's RM, debugging rights
 * on the object (rsAccessCheckRights, RS_ACCESS_DEBUG: its own client has
 * them, another only if shared); on GSP or a vGPU host, matching security
 * tokens.  Nor is anything a debugger does.
 */
static NV_STATUS nvsim_debugger_ctor(const struct nvsim_call *call,
				     const struct nvsim_class_desc *cls,
				     struct nvsim_client *client,
				     struct nvsim_object *parent,
				     NvHandle *handle, u32 hclass, void *params)
{
	NV83DE_ALLOC_PARAMETERS *p = params;
	struct nvsim_client *app = client;
	struct nvsim_object *gr, *obj;

	if (p->hDebuggerClient_Obsolete)
		return NV_ERR_INVALID_ARGUMENT;
	if (p->hAppClient && p->hAppClient != client->handle) {
		app = xa_load(&nvsim.clients, p->hAppClient);
		if (!app)
			return NV_ERR_INVALID_CLIENT;
	}
	gr = nvsim_object_find(app, p->hClass3dObject);
	if (!gr)
		return NV_ERR_INVALID_OBJECT_PARENT;
	if (gr->type != NVSIM_OBJ_ENGINE ||
	    nvsim_arch_class_engine(gr->hclass) != NVSIM_ENG_GR)
		return NV_ERR_INVALID_OBJECT;
	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_DEBUGGER, &obj);
}

/*
 * NV0020_GPU_MANAGEMENT under a client (resource_list.h, 595.45.04 and
 * 535: RS_OPTIONAL(NvHandle) params, RS_FLAGS_ALLOC_NON_PRIVILEGED, not
 * multi-instance).  gpumgmtapiConstruct_IMPL (gpu_mgmt_api.c) does
 * nothing; a second one under the same client is refused by
 * RmAllocResource (alloc_free.c: "If single instance, ensure parent
 * doesn't yet have a class of this type", NV_ERR_STATE_IN_USE).  The
 * client's ownership was checked before (serverAllocResource,
 * clientValidate), as for every class.  vgpu.ko makes one to prove that a
 * root client belongs to the file it called through (mediate.c).
 */
static NV_STATUS nvsim_gpu_mgmt_ctor(const struct nvsim_call *call,
				     const struct nvsim_class_desc *cls,
				     struct nvsim_client *client,
				     struct nvsim_object *parent,
				     NvHandle *handle, u32 hclass, void *params)
{
	struct nvsim_object *obj;

	list_for_each_entry(obj, &parent->children, sibling)
		if (obj->hclass == hclass)
			return NV_ERR_STATE_IN_USE;
	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_GPU_MGMT, &obj);
}

#define GPU_PARENTS (NVSIM_BIT(NVSIM_OBJ_DEVICE) | NVSIM_BIT(NVSIM_OBJ_SUBDEVICE))
#define CHANNEL_CLASS(c) \
	{ c, sizeof(NV_CHANNEL_ALLOC_PARAMS), false, \
	  NVSIM_BIT(NVSIM_OBJ_TSG) | NVSIM_BIT(NVSIM_OBJ_DEVICE), nvsim_channel_ctor }
#define USERMODE_CLASS(c) { c, 0, true, GPU_PARENTS, nvsim_usermode_ctor }
/* resource_list.h: RS_OPTIONAL params, parent KernelChannel. */
#define GR_CLASS(c) \
	{ c, sizeof(NV_GR_ALLOCATION_PARAMETERS), true, \
	  NVSIM_BIT(NVSIM_OBJ_CHANNEL), nvsim_engine_ctor }
#define CE_CLASS(c) \
	{ c, sizeof(NVB0B5_ALLOCATION_PARAMETERS), true, \
	  NVSIM_BIT(NVSIM_OBJ_CHANNEL), nvsim_engine_ctor }

static const struct nvsim_class_desc nvsim_classes[] = {
	{ NV01_DEVICE_0, sizeof(NV0080_ALLOC_PARAMETERS), true,
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_device_ctor },
	{ NV20_SUBDEVICE_0, sizeof(NV2080_ALLOC_PARAMETERS), true,
	  NVSIM_BIT(NVSIM_OBJ_DEVICE), nvsim_subdevice_ctor },
	{ NV01_MEMORY_LOCAL_USER, sizeof(NV_MEMORY_ALLOCATION_PARAMS), false,
	  GPU_PARENTS, nvsim_memory_ctor },
	{ NV01_MEMORY_LOCAL_PRIVILEGED, sizeof(NV_MEMORY_ALLOCATION_PARAMS), false,
	  GPU_PARENTS, nvsim_memory_ctor },
	{ NV01_MEMORY_SYSTEM, sizeof(NV_MEMORY_ALLOCATION_PARAMS), false,
	  GPU_PARENTS, nvsim_memory_ctor },
	/*
	 * Two virtual classes (resource_list.h, 595.45.04): NV01_MEMORY_VIRTUAL
	 * (0x70, VirtualMemoryRange) takes NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS;
	 * NV50_MEMORY_VIRTUAL (0x50A0, VirtualMemory) takes
	 * NV_MEMORY_ALLOCATION_PARAMS.  Neither holds FB here.
	 */
	{ NV01_MEMORY_VIRTUAL, sizeof(NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS), true,
	  GPU_PARENTS, nvsim_virtual_ctor },
	{ NV50_MEMORY_VIRTUAL, sizeof(NV_MEMORY_ALLOCATION_PARAMS), false,
	  GPU_PARENTS, nvsim_memory_ctor },
	{ KEPLER_CHANNEL_GROUP_A, sizeof(NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS),
	  true, NVSIM_BIT(NVSIM_OBJ_DEVICE), nvsim_tsg_ctor },
	CHANNEL_CLASS(KEPLER_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(KEPLER_CHANNEL_GPFIFO_B),
	CHANNEL_CLASS(MAXWELL_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(PASCAL_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(VOLTA_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(TURING_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(AMPERE_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(HOPPER_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(BLACKWELL_CHANNEL_GPFIFO_A),
	CHANNEL_CLASS(BLACKWELL_CHANNEL_GPFIFO_B),
	USERMODE_CLASS(VOLTA_USERMODE_A),
	USERMODE_CLASS(TURING_USERMODE_A),
	USERMODE_CLASS(AMPERE_USERMODE_A),
	USERMODE_CLASS(HOPPER_USERMODE_A),
	USERMODE_CLASS(BLACKWELL_USERMODE_A),
	/*
	 * resource_list.h (595.45.04): FERMI_VASPACE_A under a device or
	 * subdevice, FERMI_CONTEXT_SHARE_A under a TSG, the OS descriptor
	 * under a device, each with RS_REQUIRED params.
	 */
	{ FERMI_VASPACE_A, sizeof(NV_VASPACE_ALLOCATION_PARAMETERS), false,
	  GPU_PARENTS, nvsim_vaspace_class_ctor },
	{ FERMI_CONTEXT_SHARE_A, sizeof(NV_CTXSHARE_ALLOCATION_PARAMETERS), false,
	  NVSIM_BIT(NVSIM_OBJ_TSG), nvsim_ctxshare_ctor },
	{ NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
	  sizeof(NV_OS_DESC_MEMORY_ALLOCATION_PARAMS), false,
	  NVSIM_BIT(NVSIM_OBJ_DEVICE), nvsim_osdesc_ctor },
	GR_CLASS(FERMI_TWOD_A),
	GR_CLASS(KEPLER_INLINE_TO_MEMORY_B),
	GR_CLASS(AMPERE_B),
	GR_CLASS(AMPERE_COMPUTE_B),
	GR_CLASS(HOPPER_A),
	GR_CLASS(HOPPER_COMPUTE_A),
	CE_CLASS(AMPERE_DMA_COPY_B),
	CE_CLASS(HOPPER_DMA_COPY_A),
	{ GT200_DEBUGGER, sizeof(NV83DE_ALLOC_PARAMETERS), false,
	  NVSIM_BIT(NVSIM_OBJ_DEVICE), nvsim_debugger_ctor },
	{ NV0020_GPU_MANAGEMENT, sizeof(NvHandle), true,
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_gpu_mgmt_ctor },
};

/*
 * NV01_EVENT / NV01_EVENT_OS_EVENT under any object (RS_ANY_PARENT,
 * resource_list.h), as eventapiConstruct_IMPL and eventapiInit_IMPL
 * (event_api.c) check them: a class other than OS_EVENT (or the kernel
 * callbacks) NV_ERR_INVALID_CLASS; hParentClient 0 is the allocating
 * client, another is found among every client of the system, unchecked
 * (serverGetClientUnderLock: NV_ERR_INVALID_CLIENT if none); hSrcResource
 * must exist in it (NV_ERR_INVALID_OBJECT); for a user the data is the fd
 * number of an OS event of the allocating client
 * (osUserHandleToKernelPtr, os.c: NV_ERR_OBJECT_NOT_FOUND).  nvsim never
 * signals it: the object is bookkeeping.
 */
static NV_STATUS nvsim_event_ctor(const struct nvsim_call *call,
				  const struct nvsim_class_desc *cls,
				  struct nvsim_client *client,
				  struct nvsim_object *parent,
				  NvHandle *handle, u32 hclass, void *params)
{
	NV0005_ALLOC_PARAMETERS *p = params;
	struct nvsim_client *notifier = client;
	struct nvsim_os_event *ev;
	struct nvsim_object *obj;
	bool found = false;

	if (hclass != NV01_EVENT_OS_EVENT)
		return NV_ERR_INVALID_CLASS;
	if (p->hParentClient && p->hParentClient != client->handle) {
		notifier = xa_load(&nvsim.clients, p->hParentClient);
		if (!notifier)
			return NV_ERR_INVALID_CLIENT;
	}
	if (!nvsim_object_find(notifier, p->hSrcResource))
		return NV_ERR_INVALID_OBJECT;
	if (!call->kernel) {
		list_for_each_entry(ev, &nvsim.os_events, all)
			found |= ev->hClient == client->handle && ev->fd == (u32)p->data;
		if (!found)
			return NV_ERR_OBJECT_NOT_FOUND;
	}
	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_EVENT, &obj);
}

#define EVENT_PARENTS (NVSIM_BIT(NVSIM_OBJ_CLIENT) | NVSIM_BIT(NVSIM_OBJ_DEVICE) |     \
		       NVSIM_BIT(NVSIM_OBJ_SUBDEVICE) | NVSIM_BIT(NVSIM_OBJ_MEMORY) |    \
		       NVSIM_BIT(NVSIM_OBJ_TSG) | NVSIM_BIT(NVSIM_OBJ_CHANNEL) |         \
		       NVSIM_BIT(NVSIM_OBJ_USERMODE) | NVSIM_BIT(NVSIM_OBJ_VASPACE) |    \
		       NVSIM_BIT(NVSIM_OBJ_CTXSHARE) | NVSIM_BIT(NVSIM_OBJ_ENGINE) |     \
		       NVSIM_BIT(NVSIM_OBJ_DEBUGGER))

static const struct nvsim_class_desc nvsim_event_classes[] = {
	{ NV01_EVENT, sizeof(NV0005_ALLOC_PARAMETERS), false, EVENT_PARENTS,
	  nvsim_event_ctor },
	{ NV01_EVENT_OS_EVENT, sizeof(NV0005_ALLOC_PARAMETERS), false,
	  EVENT_PARENTS, nvsim_event_ctor },
};

static const struct nvsim_class_desc *nvsim_class_find(u32 hclass);

/*
 * _fixupAllocParams (src/kernel/rmapi/alloc_free.c), before the parent is
 * looked up: for the event classes NV01_EVENT takes the class its
 * parameters name (one that is no event class: NV_ERR_INVALID_CLASS),
 * hSrcResource is overwritten with the parent handle the caller gave
 * (whatever the caller put there), and where hParentClient is not the
 * allocating client (0 included) the event's parent becomes that client.
 * NVIDIA's libcuda allocates its events with hSrcResource 0.
 */
static NV_STATUS nvsim_event_fixup(const struct nvsim_class_desc **cls,
				   NVOS64_PARAMETERS *p, NvHandle *hparent,
				   u32 *hclass, void *params)
{
	NV0005_ALLOC_PARAMETERS *ep = params;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_event_classes); i++)
		if (*cls == &nvsim_event_classes[i])
			break;
	if (i == ARRAY_SIZE(nvsim_event_classes) || !ep)
		return NV_OK;
	if (*hclass == NV01_EVENT) {
		*hclass = ep->hClass;
		*cls = nvsim_class_find(*hclass);
		for (i = 0; i < ARRAY_SIZE(nvsim_event_classes); i++)
			if (*cls == &nvsim_event_classes[i])
				break;
		if (i == ARRAY_SIZE(nvsim_event_classes))
			return NV_ERR_INVALID_CLASS;
	}
	ep->hSrcResource = p->hObjectParent;
	if (ep->hParentClient != p->hRoot)
		*hparent = p->hRoot;
	return NV_OK;
}

static const struct nvsim_class_desc *nvsim_class_find(u32 hclass)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_classes); i++)
		if (nvsim_classes[i].hclass == hclass)
			return &nvsim_classes[i];
	for (i = 0; i < ARRAY_SIZE(nvsim_event_classes); i++)
		if (nvsim_event_classes[i].hclass == hclass)
			return &nvsim_event_classes[i];
	return nvsim_cuda_class_find(hclass) ?: nvsim_peer_class_find(hclass);
}

static bool nvsim_is_root_class(u32 hclass)
{
	return hclass == NV01_ROOT || hclass == NV01_ROOT_NON_PRIV ||
	       hclass == NV01_ROOT_CLIENT;
}

/* Under nvsim.lock: resolve client and parent, then run the constructor. */
static NV_STATUS nvsim_alloc_locked(const struct nvsim_call *call,
				    const struct nvsim_class_desc *cls,
				    NVOS64_PARAMETERS *p, void *params)
{
	struct nvsim_client *client;
	struct nvsim_object *parent;
	NvHandle h = p->hObjectNew, hparent = p->hObjectParent;
	u32 hclass = p->hClass;
	NV_STATUS status;

	if (nvsim_is_root_class(p->hClass)) {
		/*
		 * The handle asked for is hRoot, not hObjectNew: _rmAlloc passes
		 * hRoot as the client to serverAllocClient (rs_server.c), which
		 * RM builds with RS_COMPATABILITY_MODE (src/nvidia/Makefile), so
		 * a chosen handle is taken as it is (a duplicate:
		 * NV_ERR_INSERT_DUPLICATE_NAME) and 0 generates one.  The handle
		 * made goes to hObjectNew.  hObjectParent is ignored.
		 */
		h = p->hRoot;
		status = nvsim_client_alloc(call, &h);
		goto out;
	}

	status = nvsim_client_get(call, p->hRoot, &client);
	if (status != NV_OK)
		return status;
	status = nvsim_event_fixup(&cls, p, &hparent, &hclass, params);
	if (status != NV_OK)
		return status;
	parent = nvsim_object_find(client, hparent);
	if (!parent)
		return NV_ERR_INVALID_OBJECT_PARENT;
	if (!cls)
		return NV_ERR_INVALID_CLASS;
	if (!(cls->parents & NVSIM_BIT(parent->type)))
		return NV_ERR_INVALID_OBJECT_PARENT;
	/*
	 * resservResourceFactory (alloc_free.c): under a GPU object, a class
	 * the GPU's class list lacks is NV_ERR_NOT_SUPPORTED (arch.c).
	 */
	if (parent->type != NVSIM_OBJ_CLIENT && !nvsim_arch_has_class(hclass))
		return NV_ERR_NOT_SUPPORTED;
	status = cls->ctor(call, cls, client, parent, &h, hclass, params);
out:
	if (status == NV_OK)
		p->hObjectNew = h;
	return status;
}

/* The caller's copy of the class parameters could not be updated: undo. */
static void nvsim_alloc_undo(const struct nvsim_call *call,
			     NVOS64_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_object *obj;

	mutex_lock(&nvsim.lock);
	if (nvsim_client_get(call, p->hRoot, &client) == NV_OK) {
		obj = nvsim_object_find(client, p->hObjectNew);
		if (obj && obj->type != NVSIM_OBJ_CLIENT)
			nvsim_object_destroy(obj);
	}
	mutex_unlock(&nvsim.lock);
}

/**
 * nvsim_rm_alloc - NV_ESC_RM_ALLOC / NV04_ALLOC
 * @call: the caller
 * @p: the parameters (NVOS21 requests arrive converted, flags 0)
 *
 * The class's parameters are copied with the class's own size, whatever
 * paramsSize says, and copied back on success (memory classes write the
 * size they allocated back).  Result in p->status.
 */
void nvsim_rm_alloc(const struct nvsim_call *call, NVOS64_PARAMETERS *p)
{
	const struct nvsim_class_desc *cls = NULL;
	void *params = NULL;
	u32 psize;
	NV_STATUS status;

	/* Injected: as rmapiAllocWithSecInfo() failing before _rmAlloc(). */
	status = nvsim_fault_rm(NVSIM_FK_RM_ALLOC, p->hClass, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}

	/* A serialized (FINN) blob is not the struct: never parse it as one. */
	if (p->flags & NVOS64_FLAGS_FINN_SERIALIZED) {
		p->status = NV_ERR_NOT_SUPPORTED;
		return;
	}

	if (!nvsim_is_root_class(p->hClass))
		cls = nvsim_class_find(p->hClass);
	/* A class the presented release lacks is unknown to it (release.c). */
	if (cls && nvsim_rel_lacks(NVREL_CLS, p->hClass))
		cls = NULL;
	WRITE_ONCE(nvsim.last_class, p->hClass);
	/* The release's struct; the buffer is at least the 595.45.04 one. */
	psize = cls ? nvsim_rel_size(NVREL_CLS, p->hClass, cls->params_size) : 0;

	if (cls && psize && p->pAllocParms) {
		params = kzalloc(max(psize, cls->params_size), GFP_KERNEL_ACCOUNT);
		if (!params) {
			p->status = NV_ERR_NO_MEMORY;
			return;
		}
		if (nvsim_copy_in(call, params, p->pAllocParms, psize)) {
			status = NV_ERR_INVALID_ARGUMENT;
			goto out;
		}
	} else if (cls && psize && !cls->params_optional) {
		p->status = NV_ERR_INVALID_ARGUMENT;
		return;
	}

	mutex_lock(&nvsim.lock);
	status = nvsim_alloc_locked(call, cls, p, params);
	mutex_unlock(&nvsim.lock);

	if (status == NV_OK && params &&
	    nvsim_copy_out(call, p->pAllocParms, params, psize)) {
		nvsim_alloc_undo(call, p);
		status = NV_ERR_INVALID_ARGUMENT;
	}
out:
	kfree(params);
	p->status = status;
}

/**
 * nvsim_rm_free - NV_ESC_RM_FREE / NV01_FREE
 * @call: the caller
 * @p: the parameters; hObjectOld == hRoot frees the whole client
 */
void nvsim_rm_free(const struct nvsim_call *call, NVOS00_PARAMETERS *p)
{
	struct nvsim_client *client;
	struct nvsim_object *obj;
	NV_STATUS status;

	status = nvsim_fault_rm(NVSIM_FK_RM_FREE, 0, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}
	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hRoot, &client);
	if (status != NV_OK)
		goto out;
	if (p->hObjectOld == p->hRoot) {
		nvsim_client_destroy(client);
		goto out;
	}
	obj = xa_load(&client->objects, p->hObjectOld);
	if (!obj) {
		status = NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	nvsim_object_destroy(obj);
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}

/* rs_access.h: the share types and actions nvsim reads. */
#define NVSIM_SHARE_TYPE_ALL            1U
#define NVSIM_SHARE_TYPE_CLIENT         3U
#define NVSIM_SHARE_TYPE_MAX            8U
#define NVSIM_SHARE_ACTION_REQUIRE      0x02U
#define NVSIM_SHARE_ACTION_COMPOSE      0x04U
#define NVSIM_ACCESS_DUP_OBJECT         BIT(0)

/*
 * Whether policy sp of src's client lets client `to` in (resShareCallback:
 * rs_resource.c resShareCallback_IMPL for ALL and CLIENT; PID through
 * rmresShareCallback_IMPL, resource.c, to cliresShareCallback_IMPL,
 * client_resource.c: the source client's process is the invoking one's).
 * OS_SECURITY_TOKEN, SMC_PARTITION, GPU and FM_CLIENT: not modelled, no.
 */
static bool nvsim_share_applies(const struct nvsim_object *src,
				const struct nvsim_client *to, const RS_SHARE_POLICY *sp)
{
	switch (sp->type) {
	case NVSIM_SHARE_TYPE_ALL:
		return true;
	case NVSIM_SHARE_TYPE_CLIENT:
		return sp->target == to->handle;
	case RS_SHARE_TYPE_PID:
		return src->client->tgid == to->tgid;
	default:
		return false;
	}
}

/*
 * The server's default inherited policy (serverInitGlobalSharePolicies,
 * sharing.c): DUP_OBJECT within the process.  nvsim keeps no client's own
 * inherited list (CLIENT_SET_INHERITED_SHARE_POLICY is accepted and
 * ignored, control.c), so an object that was never shared has this one.
 */
static const RS_SHARE_POLICY nvsim_default_share = {
	.accessMask = NVSIM_ACCESS_DUP_OBJECT, .type = RS_SHARE_TYPE_PID,
};

/*
 * May client `to` dup src (serverCopyResource -> rsAccessCheckRights,
 * rs_client.c; _rsAccessGetSharedRights, rs_access_map.c)?  The owner
 * client may; a kernel caller may (clientCopyResource: kernel clients dup
 * anything); any other client only with DUP_OBJECT granted by an allow
 * policy of the object's active list that applies to it and denied by no
 * require policy that does not.
 */
static bool nvsim_may_dup(const struct nvsim_call *call, const struct nvsim_object *src,
			  const struct nvsim_client *to)
{
	const RS_SHARE_POLICY *list = src->share_modified ? src->share : &nvsim_default_share;
	unsigned int n = src->share_modified ? src->share_count : 1, i;
	u32 granted = 0, denied = 0;

	if (src->client == to || call->priv >= NVSIM_PRIV_KERNEL)
		return true;
	for (i = 0; i < n; i++) {
		bool applies = nvsim_share_applies(src, to, &list[i]);

		if (!(list[i].action & NVSIM_SHARE_ACTION_REQUIRE) && applies)
			granted |= list[i].accessMask;
		else if ((list[i].action & NVSIM_SHARE_ACTION_REQUIRE) && !applies)
			denied |= list[i].accessMask;
	}
	return (granted & ~denied) & NVSIM_ACCESS_DUP_OBJECT;
}

/**
 * nvsim_rm_share - NV_ESC_RM_SHARE / NV04_SHARE: set an object's share
 * policy, as libcuda's cuIpcGetMemHandle does (type ALL, DUP_OBJECT) so a
 * process that gets the handle can dup the memory
 * @call: the caller
 * @p: the parameters
 *
 * serverShareResourceAccess (rs_server.c): a type past the last
 * NV_ERR_INVALID_ARGUMENT; the caller's own client (clientValidate), the
 * object (clientGetResourceRef: NV_ERR_OBJECT_NOT_FOUND, an invalidated
 * one NV_ERR_RESOURCE_LOST); for CLIENT the target client must exist
 * (_serverShareResourceAccessClient locks both: NV_ERR_INVALID_CLIENT).
 * clientShareResource_IMPL (rs_client.c): the first share replaces the
 * inherited list (COMPOSE copies it first), REVOKE removes a policy,
 * anything else is added (rsShareListInsert: the same type, target and
 * action merge their masks).  Simplified: at most NVSIM_SHARE_MAX
 * policies an object (NV_ERR_INSUFFICIENT_RESOURCES past them); the owner
 * sharing with itself (CLIENT, target its own client) changes nothing
 * else (clientShareResourceTargetClient_IMPL edits the owner's own access
 * rights, which nvsim does not model).
 */
void nvsim_rm_share(const struct nvsim_call *call, NVOS57_PARAMETERS *p)
{
	RS_SHARE_POLICY sp = {
		.target = p->sharePolicy[0], .accessMask = p->sharePolicy[1],
		.type = p->sharePolicy[2] & 0xffff, .action = (p->sharePolicy[2] >> 16) & 0xff,
	};
	struct nvsim_client *client;
	struct nvsim_object *obj;
	NV_STATUS status;
	unsigned int i;

	if (sp.type >= NVSIM_SHARE_TYPE_MAX) {
		p->status = NV_ERR_INVALID_ARGUMENT;
		return;
	}
	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hClient, &client);
	if (status != NV_OK)
		goto out;
	if (sp.type == NVSIM_SHARE_TYPE_CLIENT && !xa_load(&nvsim.clients, sp.target)) {
		status = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	obj = nvsim_object_ref(client, p->hObject);
	if (!obj || obj == &client->obj) {
		status = NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	if (obj->invalidated) {
		status = NV_ERR_RESOURCE_LOST;
		goto out;
	}
	if (!obj->share_modified) {
		obj->share_count = 0;
		if (sp.action & NVSIM_SHARE_ACTION_COMPOSE)
			obj->share[obj->share_count++] = nvsim_default_share;
		obj->share_modified = true;
	}
	if (!(sp.action & NVSIM_SHARE_ACTION_COMPOSE))
		obj->share_count = 0;
	for (i = 0; i < obj->share_count; i++) {
		RS_SHARE_POLICY *q = &obj->share[i];

		if (q->type != sp.type || q->target != sp.target ||
		    (q->action & ~RS_SHARE_ACTION_FLAG_REVOKE) !=
		    (sp.action & ~RS_SHARE_ACTION_FLAG_REVOKE))
			continue;
		if (sp.action & RS_SHARE_ACTION_FLAG_REVOKE) {
			/* rsShareListRemove: the rights taken; none left, gone */
			q->accessMask &= ~sp.accessMask;
			if (!q->accessMask)
				*q = obj->share[--obj->share_count];
		} else {
			q->accessMask |= sp.accessMask;
		}
		goto out;
	}
	if (sp.action & RS_SHARE_ACTION_FLAG_REVOKE)
		goto out;
	if (obj->share_count == NVSIM_SHARE_MAX) {
		status = NV_ERR_INSUFFICIENT_RESOURCES;
		goto out;
	}
	obj->share[obj->share_count++] = sp;
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}

/**
 * nvsim_rm_dup - NV_ESC_RM_DUP_OBJECT / NV04_DUP_OBJECT
 * @call: the caller
 * @p: the parameters
 *
 * Memory only: the new object shares the source's backing, and the FB is
 * released when the last object that refers to it is freed.  The source
 * client may be the caller's, another of its process's (the default
 * inherited policy), or one whose object was shared with the caller
 * (NV_ESC_RM_SHARE: nvsim_may_dup).
 */
void nvsim_rm_dup(const struct nvsim_call *call, NVOS55_PARAMETERS *p)
{
	struct nvsim_client *client, *src_client;
	struct nvsim_object *src, *parent, *obj;
	NvHandle h = p->hObject;
	NV_STATUS status;

	status = nvsim_fault_rm(NVSIM_FK_RM_DUP_OBJECT, 0, call);
	if (status != NV_OK) {
		p->status = status;
		return;
	}
	mutex_lock(&nvsim.lock);
	status = nvsim_client_get(call, p->hClient, &client);
	if (status != NV_OK)
		goto out;
	src_client = xa_load(&nvsim.clients, p->hClientSrc);
	if (!src_client) {
		status = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	src = nvsim_object_find(src_client, p->hObjectSrc);
	if (!src) {
		status = NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	parent = nvsim_object_find(client, p->hParent);
	if (!parent) {
		status = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	/* clientCopyResource_IMPL (rs_client.c): the source's share policy. */
	if (!nvsim_may_dup(call, src, client)) {
		status = NV_ERR_INSUFFICIENT_PERMISSIONS;
		goto out;
	}
	if (src->type != NVSIM_OBJ_MEMORY) {
		status = NV_ERR_NOT_SUPPORTED;
		goto out;
	}
	if (!(GPU_PARENTS & NVSIM_BIT(parent->type)) || parent->gpu != src->gpu) {
		status = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	status = nvsim_object_new(call, client, parent, &h, src->hclass,
				  NVSIM_OBJ_MEMORY, &obj);
	if (status != NV_OK)
		goto out;
	nvsim_mem_get(src->memory.mem);
	obj->memory.mem = src->memory.mem;
	/* A dup of virtual memory stands for the same VA. */
	obj->memory.va_base = src->memory.va_base;
	obj->memory.va_size = src->memory.va_size;
	obj->memory.hvaspace = src->memory.hvaspace;
	p->hObject = h;
out:
	mutex_unlock(&nvsim.lock);
	p->status = status;
}
