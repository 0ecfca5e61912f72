// SPDX-License-Identifier: GPL-2.0
/*
 * memory.c - quota reservation, the object table, and the kernel-path RM
 * calls that create or destroy objects (RM_ALLOC, RM_FREE, RM_DUP_OBJECT,
 * RM_ALLOC_MEMORY of FB, RM_VID_HEAP_CONTROL).
 *
 * Every such call is made by vgpu.ko itself with a kernel copy of the
 * parameters (docs/mediator.md, "The double fetch"), under the client's
 * mutex, so that the table always matches the driver: a free cannot miss an
 * allocation on its way in.  A reservation is a cmpxchg on the GPU's used
 * counter before the call; after it, the object's size as the driver
 * answers it through the kernel entry is charged, never the size written
 * back to the call page (a larger one is reserved too, or the object freed
 * again: vgpu_commit).
 */
#include <linux/slab.h>
#include <linux/rcupdate.h>
#include <linux/jhash.h>
#include <linux/sizes.h>

#include "vgpu.h"

/* NV_CONFIDENTIAL_COMPUTE (clcb33.h), the same number in 535-595. */
#define VGPU_CONF_COMPUTE 0x0000CB33

atomic_t vgpu_nr_objects = ATOMIC_INIT(0);
atomic_t vgpu_nr_charges = ATOMIC_INIT(0);

static struct rhashtable vgpu_objs;

static const struct rhashtable_params vgpu_obj_params = {
	.key_len = sizeof(struct vgpu_key),
	.key_offset = offsetof(struct vgpu_obj, key),
	.head_offset = offsetof(struct vgpu_obj, node),
	.automatic_shrinking = true,
};

int vgpu_memory_init(void)
{
	return rhashtable_init(&vgpu_objs, &vgpu_obj_params);
}

void vgpu_memory_exit(void)
{
	/* Files pin the module: the table is empty here. */
	rhashtable_destroy(&vgpu_objs);
	rcu_barrier();
}

/* ------------------------------------------------------------- quota */

bool vgpu_reserve(struct vgpu_slice *s, u32 gpu, u64 bytes)
{
	struct vgpu_gpu *g = &s->gpus[gpu];
	s64 used = atomic64_read(&g->used), peak;

	do {
		if ((u64)used + bytes < (u64)used ||
		    (u64)used + bytes > READ_ONCE(g->limit))
			return false;
	} while (!atomic64_try_cmpxchg(&g->used, &used, used + bytes));

	peak = atomic64_read(&g->peak);
	while (peak < used + (s64)bytes &&
	       !atomic64_try_cmpxchg(&g->peak, &peak, used + bytes))
		;
	return true;
}

void vgpu_unreserve(struct vgpu_slice *s, u32 gpu, u64 bytes)
{
	atomic64_sub(bytes, &s->gpus[gpu].used);
}

void vgpu_refused(struct vgpu_slice *s, u32 gpu, u64 bytes)
{
	atomic64_inc(&s->gpus[gpu].refusals);
	vgpu_event(s, VGPU_EVENT_ALLOC_REFUSED, gpu, bytes);
}

/* Wraps an already reserved amount. */
struct vgpu_charge *vgpu_charge_new(struct vgpu_slice *s, u32 gpu, u64 bytes)
{
	struct vgpu_charge *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (!c)
		return NULL;
	refcount_set(&c->ref, 1);
	vgpu_slice_get(s);
	c->slice = s;
	c->gpu = gpu;
	c->bytes = bytes;
	atomic64_inc(&s->gpus[gpu].allocs);
	atomic_inc(&vgpu_nr_charges);
	return c;
}

void vgpu_charge_put(struct vgpu_charge *c)
{
	if (!c || !refcount_dec_and_test(&c->ref))
		return;
	vgpu_unreserve(c->slice, c->gpu, c->bytes);
	atomic64_dec(&c->slice->gpus[c->gpu].allocs);
	atomic_dec(&vgpu_nr_charges);
	vgpu_slice_put(c->slice);
	/* After a grace period: RCU readers may still hold it (vgpu_obj_charge_get). */
	kfree_rcu(c, rcu);
}

/*
 * A reference on o's charge for a reader under rcu_read_lock() that does
 * not hold o's client lock: RM_DUP_OBJECT's source and MAP_EXTERNAL's
 * memory may be objects of another client of the slice, whose lock
 * another thread holds while it frees them (vgpu_obj_drop_state puts the
 * charge).  The lifetime rule that makes this safe:
 *  - an object's charge pointer always holds a reference of its own, and
 *    vgpu_obj_drop_state unpublishes it (NULL) *before* that reference is
 *    put, so once a charge's count reaches zero no object points to it;
 *  - the charge is freed an RCU grace period after its count reached
 *    zero (kfree_rcu, vgpu_charge_put), so a reader that read the pointer
 *    before it was unpublished still reads the charge's own memory, and
 *    refcount_inc_not_zero() fails on a dying charge instead of raising a
 *    count in freed memory.
 * The pointer is read once: read twice, the second read could find NULL
 * after the first one's reference was taken (leaked, the charge never
 * returned) or another charge.  False: the charge is going, and so is the
 * object (the driver freed or invalidated it before vgpu.ko drops its
 * state).  True with *charge NULL: memory without a charge (an OS
 * descriptor), or one whose charge was dropped with it -- the driver then
 * has no such source any more and refuses what the caller asks of it.
 */
bool vgpu_obj_charge_get(struct vgpu_obj *o, struct vgpu_charge **charge)
{
	struct vgpu_charge *ch = READ_ONCE(o->charge);

	RCU_LOCKDEP_WARN(!rcu_read_lock_held(), "vgpu_obj_charge_get outside RCU");
	*charge = NULL;
	if (!ch)
		return true;
	if (!refcount_inc_not_zero(&ch->ref))
		return false;
	*charge = ch;
	return true;
}

/* ------------------------------------------------------- object table */

static void vgpu_client_free_rcu(struct rcu_head *rcu)
{
	kfree(container_of(rcu, struct vgpu_client, rcu));
}

static void vgpu_client_release(struct kref *ref)
{
	struct vgpu_client *c = container_of(ref, struct vgpu_client, ref);

	vgpu_slice_put(c->slice);
	call_rcu(&c->rcu, vgpu_client_free_rcu);
}

void vgpu_client_put(struct vgpu_client *c)
{
	kref_put(&c->ref, vgpu_client_release);
}

struct vgpu_obj *vgpu_obj_find(NvHandle hClient, NvHandle hObject)
{
	struct vgpu_key key = { hClient, hObject };

	return rhashtable_lookup_fast(&vgpu_objs, &key, vgpu_obj_params);
}

/* A referenced live client, or NULL. */
struct vgpu_client *vgpu_client_lookup(NvHandle h)
{
	struct vgpu_client *c = NULL;
	struct vgpu_obj *o;

	rcu_read_lock();
	o = vgpu_obj_find(h, h);
	if (o && o->type == VGPU_OBJ_CLIENT && kref_get_unless_zero(&o->client->ref))
		c = o->client;
	rcu_read_unlock();
	return c;
}

/* Record a client proved to belong to vf (a control file). */
int vgpu_client_record(struct vgpu_file *vf, NvHandle h)
{
	struct vgpu_client *c;
	int ret;

	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	kref_init(&c->ref);
	mutex_init(&c->lock);
	c->owner = vf;
	vgpu_slice_get(vf->slice);
	c->slice = vf->slice;
	c->obj.key.client = h;
	c->obj.key.object = h;
	c->obj.type = VGPU_OBJ_CLIENT;
	c->obj.hclass = NV01_ROOT_CLIENT;
	c->obj.client = c;
	INIT_LIST_HEAD(&c->obj.children);
	INIT_LIST_HEAD(&c->obj.sibling);
	INIT_LIST_HEAD(&c->obj.dependants);
	INIT_LIST_HEAD(&c->obj.depends);
	INIT_LIST_HEAD(&c->obj.pins);
	INIT_LIST_HEAD(&c->obj.pinned_by);

	mutex_lock(&vf->lock);
	ret = rhashtable_lookup_insert_fast(&vgpu_objs, &c->obj.node,
					    vgpu_obj_params);
	if (!ret) {
		list_add_tail(&c->file_node, &vf->clients);
		atomic_inc(&vgpu_nr_objects);
	}
	mutex_unlock(&vf->lock);
	if (ret) {
		vgpu_slice_put(c->slice);
		kfree(c);
	}
	return ret;
}

static void vgpu_obj_free_rcu(struct rcu_head *rcu)
{
	kfree(container_of(rcu, struct vgpu_obj, rcu));
}

/* Under c->lock. */
int vgpu_obj_add(struct vgpu_client *c, struct vgpu_obj *parent, NvHandle h,
		 u32 hclass, enum vgpu_obj_type type, u32 gpu,
		 struct vgpu_charge *charge)
{
	struct vgpu_obj *o;
	int ret;

	lockdep_assert_held(&c->lock);
	o = kzalloc(sizeof(*o), GFP_KERNEL);
	if (!o)
		return -ENOMEM;
	o->key.client = c->obj.key.client;
	o->key.object = h;
	o->hclass = hclass;
	o->type = type;
	o->client = c;
	o->parent = parent;
	o->gpu = gpu;
	o->charge = charge;
	INIT_LIST_HEAD(&o->children);
	INIT_LIST_HEAD(&o->dependants);
	INIT_LIST_HEAD(&o->depends);
	INIT_LIST_HEAD(&o->pins);
	INIT_LIST_HEAD(&o->pinned_by);
	ret = rhashtable_lookup_insert_fast(&vgpu_objs, &o->node, vgpu_obj_params);
	if (ret) {
		kfree(o);
		return ret;
	}
	list_add_tail(&o->sibling, &parent->children);
	atomic_inc(&vgpu_nr_objects);
	if (type == VGPU_OBJ_CHANNEL)
		atomic_inc(&c->slice->gpus[gpu].chans_held);
	return 0;
}

/*
 * ------------------------------------------------------------ dependencies
 *
 * The driver frees more than an object's subtree: every dependant of an
 * object being freed goes first, with its own subtree and dependants
 * (clientUpdatePendingFreeList, serverFreeResourceTree: rs_server.c), and
 * one that is not below the object being freed is invalidated (destructed,
 * its CPU mappings unmapped, its handle kept: clientFreeResource with
 * bInvalidateOnly, rs_client.c).  kchannelConstruct_IMPL
 * (kernel_channel.c) makes a channel a dependant of the VA space it names
 * and of its context share; kctxshareapiConstruct_IMPL (kernel_ctxshare.c)
 * a context share of its VA space; kchangrpapiConstruct_IMPL
 * (kernel_channel_group_api.c) a TSG of its VA space (535.261.03 and
 * 595.45.04 alike).  vgpu.ko records these edges from the parameters the
 * driver was given (vgpu_obj_depend_params) and drops its state for every
 * object the driver frees with another: channels (their USERD maps before
 * the free, their place in the scheduler, the channel cap, the USERD
 * charge they hold) and TSGs.  The driver's other dependencies either end
 * at objects vgpu.ko keeps no state for (virtual memory on a VA space,
 * context DMAs on memory, graphics objects on a graphics context) or start
 * at objects the driver made itself with generated handles (a bare
 * channel's hidden TSG, a TSG's legacy context shares and graphics
 * context), which a container may not free (vgpu_rm_free_path).
 */
static bool vgpu_obj_has_ancestor(struct vgpu_obj *o, struct vgpu_obj *anc)
{
	for (o = o->parent; o; o = o->parent)
		if (o == anc)
			return true;
	return false;
}

/* refAddDependant: nothing to record below the dependency itself. */
static int vgpu_obj_depend(struct vgpu_obj *dep, struct vgpu_obj *dant)
{
	struct vgpu_dep *d;

	lockdep_assert_held(&dant->client->lock);
	if (dep == dant || vgpu_obj_has_ancestor(dant, dep))
		return 0;
	d = kzalloc(sizeof(*d), GFP_KERNEL);
	if (!d)
		return -ENOMEM;
	d->dep = dep;
	d->dant = dant;
	list_add_tail(&d->dep_node, &dep->dependants);
	list_add_tail(&d->dant_node, &dant->depends);
	return 0;
}

static void vgpu_dep_del(struct vgpu_dep *d)
{
	list_del(&d->dep_node);
	list_del(&d->dant_node);
	kfree(d);
}

/*
 * o goes with nothing any more (_refRemoveAllDependencies), and pins
 * nothing (it is freed or invalidated: the driver let go of its memory) nor
 * is pinned (it goes with its pinner, vgpu_obj_free_pinned).
 */
static void vgpu_obj_undepend(struct vgpu_obj *o)
{
	struct vgpu_dep *d, *tmp;

	list_for_each_entry_safe(d, tmp, &o->depends, dant_node)
		vgpu_dep_del(d);
	list_for_each_entry_safe(d, tmp, &o->pins, dant_node)
		vgpu_dep_del(d);
	list_for_each_entry_safe(d, tmp, &o->pinned_by, dep_node)
		vgpu_dep_del(d);
}

/* pinner (a channel or TSG) keeps using target's memory; c->lock. */
static int vgpu_obj_pin(struct vgpu_obj *target, struct vgpu_obj *pinner)
{
	struct vgpu_dep *d = kzalloc(sizeof(*d), GFP_KERNEL);

	if (!d)
		return -ENOMEM;
	d->dep = target;
	d->dant = pinner;
	list_add_tail(&d->dep_node, &target->pinned_by);
	list_add_tail(&d->dant_node, &pinner->pins);
	return 0;
}

/*
 * Mark with gen what the driver's free of o takes with it: o's subtree and
 * its dependants (with theirs), each once (the graph is a DAG, but may
 * join); visit (may be NULL) each after what goes with it.
 */
static void vgpu_obj_mark_walk(struct vgpu_obj *o, u64 gen,
			       void (*visit)(struct vgpu_obj *))
{
	struct vgpu_obj *child;
	struct vgpu_dep *d;

	if (o->walk == gen)
		return;
	o->walk = gen;
	list_for_each_entry(d, &o->dependants, dep_node)
		vgpu_obj_mark_walk(d->dant, gen, visit);
	list_for_each_entry(child, &o->children, sibling)
		vgpu_obj_mark_walk(child, gen, visit);
	if (visit)
		visit(o);
}

/* Is an object of the marked set (gen) pinned by one outside it? */
static bool vgpu_obj_pinned_walk(struct vgpu_obj *o, u64 gen, u64 seen)
{
	struct vgpu_obj *child;
	struct vgpu_dep *d;

	if (o->walk == seen)
		return false;
	o->walk = seen;
	list_for_each_entry(d, &o->pinned_by, dep_node)
		if (d->dant->walk != gen && d->dant->walk != seen)
			return true;
	list_for_each_entry(d, &o->dependants, dep_node)
		if (vgpu_obj_pinned_walk(d->dant, gen, seen))
			return true;
	list_for_each_entry(child, &o->children, sibling)
		if (vgpu_obj_pinned_walk(child, gen, seen))
			return true;
	return false;
}

/*
 * Would the driver's free of o free memory a live channel or TSG outside
 * what goes with o still uses?  Then the free is refused
 * (NV_ERR_STATE_IN_USE).  c->lock.
 */
static bool vgpu_obj_free_pinned(struct vgpu_obj *o)
{
	struct vgpu_client *c = o->client;
	u64 gen;

	lockdep_assert_held(&c->lock);
	gen = ++c->walk_gen;
	vgpu_obj_mark_walk(o, gen, NULL);
	return vgpu_obj_pinned_walk(o, gen, ++c->walk_gen);
}

/*
 * Before the driver frees o (or o's client, o = &c->obj): every USERD map
 * its free tears down (what goes with o) is unmapped first.  c->lock.
 */
void vgpu_obj_unmap_closure(struct vgpu_obj *o)
{
	struct vgpu_client *c = o->client;

	lockdep_assert_held(&c->lock);
	vgpu_obj_mark_walk(o, ++c->walk_gen, vgpu_compute_unmap);
}

/* What o holds here (scheduler, channel cap, charge) goes back; once. */
static void vgpu_obj_drop_state(struct vgpu_obj *o)
{
	if (o->dropped)
		return;
	o->dropped = true;
	vgpu_compute_drop(o);
	if (o->type == VGPU_OBJ_CHANNEL)
		atomic_dec(&o->client->slice->gpus[o->gpu].chans_held);
	{
		struct vgpu_charge *ch = o->charge;

		/* Unpublished before it is put: vgpu_obj_charge_get. */
		WRITE_ONCE(o->charge, NULL);
		vgpu_charge_put(ch);
	}
}

static void vgpu_obj_invalidate(struct vgpu_obj *o);

/* o's dependants went before it in the driver. */
static void vgpu_obj_invalidate_dependants(struct vgpu_obj *o)
{
	struct vgpu_dep *d;

	while ((d = list_first_entry_or_null(&o->dependants, struct vgpu_dep,
					     dep_node))) {
		struct vgpu_obj *dant = d->dant;

		vgpu_dep_del(d);
		vgpu_obj_invalidate(dant);
	}
}

/* The driver invalidated o (a dependant): its state goes, the record stays. */
static void vgpu_obj_invalidate(struct vgpu_obj *o)
{
	struct vgpu_obj *child;

	if (o->lost)
		return;
	WRITE_ONCE(o->lost, true);
	vgpu_obj_invalidate_dependants(o);
	list_for_each_entry(child, &o->children, sibling)
		vgpu_obj_invalidate(child);
	vgpu_obj_undepend(o);
	vgpu_obj_drop_state(o);
}

/*
 * Remove o and its descendants (not a client's root), after the driver
 * freed o; the dependants it took with it are invalidated.  Under the
 * client lock.
 */
void vgpu_obj_remove(struct vgpu_obj *o)
{
	struct vgpu_obj *child, *tmp;

	vgpu_obj_invalidate_dependants(o);
	list_for_each_entry_safe(child, tmp, &o->children, sibling)
		vgpu_obj_remove(child);
	if (o->type == VGPU_OBJ_CLIENT)
		return;
	vgpu_obj_undepend(o);
	vgpu_obj_drop_state(o);
	rhashtable_remove_fast(&vgpu_objs, &o->node, vgpu_obj_params);
	list_del(&o->sibling);
	atomic_dec(&vgpu_nr_objects);
	call_rcu(&o->rcu, vgpu_obj_free_rcu);
}

/* The client is gone in the driver: drop it from the table; under c->lock. */
void vgpu_client_remove(struct vgpu_client *c)
{
	lockdep_assert_held(&c->lock);
	if (c->dead)
		return;
	c->dead = true;
	vgpu_obj_remove(&c->obj);
	rhashtable_remove_fast(&vgpu_objs, &c->obj.node, vgpu_obj_params);
	atomic_dec(&vgpu_nr_objects);
	mutex_lock(&c->owner->lock);
	list_del_init(&c->file_node);
	mutex_unlock(&c->owner->lock);
	vgpu_client_put(c);     /* the table's reference */
}

/*
 * Last close of a control file: free each of its clients in the driver
 * (kernel path, so the FB is released now), then return the charges.
 */
void vgpu_file_free_clients(struct vgpu_file *vf)
{
	struct vgpu_client *c;
	NvHandle h;

	for (;;) {
		mutex_lock(&vf->lock);
		c = list_first_entry_or_null(&vf->clients, struct vgpu_client,
					     file_node);
		if (c)
			kref_get(&c->ref);
		mutex_unlock(&vf->lock);
		if (!c)
			break;
		mutex_lock(&c->lock);
		h = c->obj.key.client;
		if (!c->dead) {
			vgpu_obj_unmap_closure(&c->obj);
			vgpu_rm_free(h, h, h);
			vgpu_client_remove(c);
		}
		mutex_unlock(&c->lock);
		vgpu_client_put(c);
	}
}

/* --------------------------------------------------- RM paths (kernel) */

/*
 * The classes vgpu.ko tracks by kind.  Whether the release allows a class,
 * and the size of its parameters, is the policy table's (policy.c); any
 * other class it forwards is tracked as VGPU_OBJ_OTHER.
 */
struct vgpu_class {
	u32 hclass;
	enum vgpu_obj_type type;
};

static const struct vgpu_class vgpu_classes[] = {
	{ NV01_DEVICE_0, VGPU_OBJ_DEVICE },
	{ NV20_SUBDEVICE_0, VGPU_OBJ_SUBDEVICE },
	{ NV01_MEMORY_LOCAL_USER, VGPU_OBJ_MEMORY },
	{ NV01_MEMORY_SYSTEM, VGPU_OBJ_MEMORY },
	{ NV01_MEMORY_VIRTUAL, VGPU_OBJ_MEMORY },
	{ NV50_MEMORY_VIRTUAL, VGPU_OBJ_MEMORY },
	{ KEPLER_CHANNEL_GROUP_A, VGPU_OBJ_TSG },
	{ KEPLER_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ KEPLER_CHANNEL_GPFIFO_B, VGPU_OBJ_CHANNEL },
	{ MAXWELL_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ PASCAL_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ VOLTA_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ TURING_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ AMPERE_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ HOPPER_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ BLACKWELL_CHANNEL_GPFIFO_A, VGPU_OBJ_CHANNEL },
	{ BLACKWELL_CHANNEL_GPFIFO_B, VGPU_OBJ_CHANNEL },
	{ VOLTA_USERMODE_A, VGPU_OBJ_USERMODE },
	{ TURING_USERMODE_A, VGPU_OBJ_USERMODE },
	{ AMPERE_USERMODE_A, VGPU_OBJ_USERMODE },
	{ HOPPER_USERMODE_A, VGPU_OBJ_USERMODE },
	{ BLACKWELL_USERMODE_A, VGPU_OBJ_USERMODE },
	/* Events: hParentClient checked (vgpu_event_check). */
	{ NV01_EVENT, VGPU_OBJ_OTHER },
	{ NV01_EVENT_OS_EVENT, VGPU_OBJ_OTHER },
	/* hAppClient checked (vgpu_debugger_check). */
	{ GT200_DEBUGGER, VGPU_OBJ_OTHER },
	/* Both subdevices checked (vgpu_p2p_check). */
	{ NV50_P2P, VGPU_OBJ_OTHER },
};

/*
 * An event's notifier is hSrcResource of hParentClient, and the driver
 * takes any client of the system there (event_api.c, eventapiInit:
 * serverGetClientUnderLock), another slice's included: only 0 (the
 * allocating client) or a client of the caller's file passes; another is
 * answered as the driver answers for a client that does not exist.  data
 * needs nothing: NV01_EVENT_OS_EVENT's is an fd number the driver looks up
 * among the OS events of the allocating client (osUserHandleToKernelPtr,
 * os.c), never as a descriptor; NV01_EVENT's is never read (eventapiInit
 * refuses the class with NV_ERR_INVALID_CLASS).
 */
static NV_STATUS vgpu_event_check(struct vgpu_file *vf, NvHandle hRoot,
				  const NV0005_ALLOC_PARAMETERS *ep)
{
	struct vgpu_client *other;

	if (!ep->hParentClient || ep->hParentClient == hRoot)
		return NV_OK;
	other = vgpu_file_client(vf, ep->hParentClient);
	if (!other)
		return NV_ERR_INVALID_CLIENT;
	vgpu_client_put(other);
	return NV_OK;
}

/*
 * An SM debugger session debugs hClass3dObject of hAppClient, which the
 * driver looks up among every client of the system
 * (kernel_sm_debugger_session.c, ksmdbgssnConstruct_IMPL; 0 is the
 * allocating client), and then requires debugging rights on it
 * (rsAccessCheckRights), which another client can share.  A container may
 * debug only its own: hAppClient must be 0 or the allocating client, so
 * the object is looked up there and nowhere else.
 */
static NV_STATUS vgpu_debugger_check(NvHandle hRoot, const NV83DE_ALLOC_PARAMETERS *dp)
{
	return !dp->hAppClient || dp->hAppClient == hRoot ? NV_OK :
	       NV_ERR_INSUFFICIENT_PERMISSIONS;
}

/*
 * NV50_P2P (cl503b.h; 535.261.03 and 595.45.04 agree on the members read
 * here): the P2P mapping between the GPUs of two subdevices.
 * p2papiConstruct_IMPL (p2p_api.c) looks both up in the allocating client
 * alone (subdeviceGetByHandle on pCallContext->pClient), so a container
 * can only ever name subdevices of its own client, and vgpu.ko lets a
 * slice's client make devices on the slice's GPUs only: the peer is one of
 * the slice's.  Checked here all the same, on the copy the driver reads
 * (the call page), on what ownership is proved by rather than by what
 * exists: both handles must be subdevices vgpu.ko tracks in the allocating
 * client, live.  What the parameters set beyond the pair is GPU-wide state
 * shared with the other slices of those GPUs: the peer ids
 * (kbusCreateP2PMapping reuses a pair's ids for every client, and a mask
 * names one) and the PCIe mailbox area in BAR1
 * (kbusSetP2PMailboxBar1Area_HAL, where a client allocates it): those must
 * be left to RM (zero), as CUDA leaves them.
 */
typedef struct {
	NvHandle hSubDevice;
	NvHandle hPeerSubDevice;
	NvU32 subDevicePeerIdMask;
	NvU32 peerSubDevicePeerIdMask;
	NvU64 mailboxBar1Addr;
	NvU32 mailboxTotalSize;
	NvU32 flags;
	NvU32 subDeviceEgmPeerIdMask;
	NvU32 peerSubDeviceEgmPeerIdMask;
} vgpu_nv503b_head;            /* NV503B_ALLOC_PARAMETERS' first 40 bytes */

static NV_STATUS vgpu_p2p_check(NvHandle hRoot, const vgpu_nv503b_head *pp,
				u32 *gpu)
{
	struct vgpu_obj *a = vgpu_obj_find(hRoot, pp->hSubDevice);
	struct vgpu_obj *b = vgpu_obj_find(hRoot, pp->hPeerSubDevice);

	/* The driver's answer for a subdevice it does not find. */
	if (!a || !b || a->type != VGPU_OBJ_SUBDEVICE ||
	    b->type != VGPU_OBJ_SUBDEVICE || a->lost || b->lost)
		return NV_ERR_INVALID_ARGUMENT;
	if (pp->subDevicePeerIdMask || pp->peerSubDevicePeerIdMask ||
	    pp->subDeviceEgmPeerIdMask || pp->peerSubDeviceEgmPeerIdMask ||
	    pp->mailboxBar1Addr || pp->mailboxTotalSize)
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	*gpu = a->gpu;
	return NV_OK;
}

static bool vgpu_is_event(u32 hclass)
{
	return hclass == NV01_EVENT || hclass == NV01_EVENT_OS_EVENT;
}

/*
 * A class the release lets a container allocate, with its kind and the
 * release's parameter size; false if refused.  A class whose verdict is
 * not a plain forward, or whose parameters carry a pointer, descriptor or
 * address, is allowed only if vgpu.ko tracks its kind.
 */
static bool vgpu_class_find(u32 hclass, enum vgpu_obj_type *type, u32 *size)
{
	const struct nvrel_item *it = vgpu_verdict(NVREL_CLS, hclass);
	size_t i;

	if (!it)
		return false;
	*size = it->size;
	for (i = 0; i < ARRAY_SIZE(vgpu_classes); i++) {
		if (vgpu_classes[i].hclass == hclass) {
			*type = vgpu_classes[i].type;
			return true;
		}
	}
	if (it->verdict != NVREL_FORWARD || (it->flags & NVREL_F_EMBEDDED)) {
		pr_info_ratelimited("class %#x refused: its %s is not implemented\n",
				    hclass, it->verdict != NVREL_FORWARD ?
				    "rewrite" : "embedded pointer");
		return false;
	}
	*type = VGPU_OBJ_OTHER;
	return true;
}

/* A referenced client of vf (or of the control file vf registered with). */
struct vgpu_client *vgpu_file_client(struct vgpu_file *vf, NvHandle h)
{
	struct vgpu_client *c = vgpu_client_lookup(h);
	struct vgpu_file *owner = vf;

	if (vf->kind != VGPU_KIND_CTL && vf->ctl_filp)
		owner = vf->ctl_filp->private_data;
	if (c && c->owner != owner) {
		vgpu_client_put(c);
		c = NULL;
	}
	return c;
}

/*
 * The client @h of @vf, referenced and locked for a kernel-path call; NULL,
 * with nothing held, when the file does not own it or it is being freed.
 * The caller unlocks and puts it.
 */
static struct vgpu_client *vgpu_client_lock_live(struct vgpu_file *vf, NvHandle h)
{
	struct vgpu_client *c = vgpu_file_client(vf, h);

	if (!c)
		return NULL;
	mutex_lock(&c->lock);
	if (c->dead) {
		mutex_unlock(&c->lock);
		vgpu_client_put(c);
		return NULL;
	}
	return c;
}

static bool vgpu_gpu_parent(struct vgpu_obj *o)
{
	return o && (o->type == VGPU_OBJ_DEVICE || o->type == VGPU_OBJ_SUBDEVICE);
}

/*
 * The most RM allocates for an FB request, from vgpu.ko's own copy of it,
 * reserved before the call so that no request passes the quota even for
 * the call's length, however many run at once.  memmgrDeterminePageSize_IMPL
 * (mem_mgr.c; dmaNvos32ToPageSizeAttr, mem.c) takes attr's PAGE_SIZE (and
 * attr2's PAGE_SIZE_HUGE: DEFAULT or 2MB is 2 MiB, 512MB 512 MiB, 256GB
 * 256 GiB); a DEFAULT page size is RM's to pick, and
 * _memmgrPickDefaultGpuPageSize picks at most 2 MiB from 2 MiB up, else at
 * most the big page (4 KiB on a GPU without big pages: less, and the charge
 * is trimmed to the driver's size after).  memmgrAllocDetermineAlignment_GM107
 * (mem_mgr_gm107.c) rounds the size up to the page and vidmemConstruct
 * allocates that.  BIG is taken as 64 KiB (kgmmuGetMaxBigPageSize_GM107
 * without per-VA-space big pages, off unless the host sets
 * RMDisableBigPagePerAddressSpace).  Compression may round further
 * (comprPageSize): not reserved here, charged after (vgpu_commit).
 * RM_ALLOC_MEMORY's NV01_MEMORY_LOCAL_USER is the same allocation with a
 * DEFAULT page size (_rmAllocMemoryLocalUser, rmapi_deprecated_allocmemory.c;
 * RmDeprecatedConvertOs02ToOs32Flags).  U64_MAX: wraps (the driver refuses
 * it).
 */
static u64 vgpu_rm_rounded(u64 size, u32 attr, u32 attr2)
{
	u64 page;

	switch ((attr >> NVOS32_ATTR_PAGE_SIZE_SHIFT) & NVOS32_ATTR_PAGE_SIZE_MASK) {
	case NVOS32_ATTR_PAGE_SIZE_4KB:
		page = SZ_4K;
		break;
	case NVOS32_ATTR_PAGE_SIZE_BIG:
		page = SZ_64K;
		break;
	case NVOS32_ATTR_PAGE_SIZE_HUGE:
		switch ((attr2 >> NVOS32_ATTR2_PAGE_SIZE_HUGE_SHIFT) &
			NVOS32_ATTR2_PAGE_SIZE_HUGE_MASK) {
		case NVOS32_ATTR2_PAGE_SIZE_HUGE_512MB:
			page = SZ_512M;
			break;
		case NVOS32_ATTR2_PAGE_SIZE_HUGE_256GB:
			page = 256ULL << 30;
			break;
		default:
			page = SZ_2M;
			break;
		}
		break;
	default:        /* DEFAULT */
		page = size >= SZ_2M ? SZ_2M : SZ_64K;
		break;
	}
	if (size + page - 1 < size)
		return U64_MAX;
	return (size + page - 1) & ~(page - 1);
}

/*
 * After an FB allocation: charge what the driver allocated, asked through
 * the kernel entry (vgpu_rm_mem_size), never the size written back to the
 * call page, which a sibling can rewrite after the driver's copy-out (a
 * 4 KiB request with a huge page attribute is 2 MiB in the driver).  Less
 * than reserved (RM picked a smaller page than the most vgpu_rm_rounded
 * allows for) gives the rest back; more (compression's rounding) is
 * reserved too, and if that fails, or the driver cannot say (the object is
 * not there: the status read back was not the driver's), the object is
 * freed again and the caller gets NV_ERR_NO_MEMORY.  So only a rounding past
 * vgpu_rm_rounded's (compression, a big page over 64 KiB) can make the
 * slice hold more than its quota, by that rounding, while the call runs
 * (docs/mediator.md, "Open").
 */
static NV_STATUS vgpu_commit(struct vgpu_client *c, struct vgpu_obj *parent,
			     NvHandle h, u32 hclass, u64 reserved)
{
	struct vgpu_slice *s = c->slice;
	struct vgpu_charge *ch;
	u32 gpu = parent->gpu;
	u64 actual;

	if (vgpu_rm_mem_size(c->obj.key.client, h, &actual) != NV_OK) {
		pr_warn_ratelimited("slice %u: size of memory 0x%x unknown to the driver; freed\n",
				    s->id, h);
		goto fail;
	}
	if (actual > reserved) {
		if (!vgpu_reserve(s, gpu, actual - reserved)) {
			vgpu_rm_free(c->obj.key.client, parent->key.object, h);
			vgpu_unreserve(s, gpu, reserved);
			vgpu_refused(s, gpu, actual);
			return NV_ERR_NO_MEMORY;
		}
		reserved = actual;
	} else if (actual < reserved) {
		vgpu_unreserve(s, gpu, reserved - actual);
		reserved = actual;
	}
	ch = vgpu_charge_new(s, gpu, reserved);
	if (!ch)
		goto fail;
	if (vgpu_obj_add(c, parent, h, hclass, VGPU_OBJ_MEMORY, gpu, ch)) {
		vgpu_charge_put(ch);
		vgpu_rm_free(c->obj.key.client, parent->key.object, h);
		return NV_ERR_NO_MEMORY;
	}
	return NV_OK;
fail:
	vgpu_rm_free(c->obj.key.client, parent->key.object, h);
	vgpu_unreserve(s, gpu, reserved);
	return NV_ERR_NO_MEMORY;
}

static NV_STATUS vgpu_track(struct vgpu_client *c, struct vgpu_obj *parent,
			    NvHandle h, u32 hclass, enum vgpu_obj_type type,
			    u32 gpu)
{
	struct vgpu_obj *o;

	if (vgpu_obj_add(c, parent, h, hclass, type, gpu, NULL)) {
		vgpu_rm_free(c->obj.key.client, parent->key.object, h);
		return NV_ERR_NO_MEMORY;
	}
	if (type != VGPU_OBJ_TSG && type != VGPU_OBJ_CHANNEL)
		return NV_OK;
	/* A TSG or channel the scheduler cannot see must not exist. */
	o = vgpu_obj_find(c->obj.key.client, h);
	if (o && vgpu_compute_track(c, o)) {
		vgpu_rm_free(c->obj.key.client, parent->key.object, h);
		vgpu_obj_remove(o);
		return NV_ERR_NO_MEMORY;
	}
	return NV_OK;
}

/* ------------------------------------------- creation at user privilege */

/*
 * The channel cap (VGPU_A_SLICE_MAX_CHANNELS): the driver allocates FB for
 * every channel (instance block, RAMFC, USERD, and the context buffers of
 * its TSG) that the memory quota does not see; the cap bounds it.  Held =
 * tracked channels + calls on their way, so concurrent allocations cannot
 * pass it; a call's own reservation is returned when it ends (a channel it
 * made is counted by its object from vgpu_obj_add on).
 */
static bool vgpu_chan_reserve(struct vgpu_slice *s, u32 gpu)
{
	atomic_t *held = &s->gpus[gpu].chans_held;
	u32 max = READ_ONCE(s->max_channels);
	int v = atomic_read(held);

	do {
		if (max && v >= max)
			return false;
	} while (!atomic_try_cmpxchg(held, &v, v + 1));
	return true;
}

/*
 * Handles.  Every object vgpu.ko tracks has a handle the caller passed in or
 * vgpu.ko picked, never one read back from a call page (a sibling may
 * rewrite results once the driver has written them: call.c).  A caller that
 * lets the driver choose (handle 0) gets one vgpu.ko picked, above the
 * driver's own generated range (RS_UNIQUE_HANDLE_BASE 0xcaf00000, 0x80000
 * handles, resserv's g_rs_client_nvoc.h).
 */
#define VGPU_GEN_HANDLE_LO      0xcaf00000u
#define VGPU_GEN_HANDLE_HI      0xcb000000u     /* driver's range, then ours */
#define VGPU_PICK_HANDLE_BASE   0xcaf80000u

NV_STATUS vgpu_handle_for(NvHandle hClient, NvHandle *h)
{
	static atomic_t next = ATOMIC_INIT(0);
	NvHandle want = *h;
	int tries;

	if (want) {
		/*
		 * In the generated ranges an object may exist that vgpu.ko does
		 * not track (the driver's own children): ask first, so that
		 * vgpu_created_anyway() can tell this call's object from it.
		 */
		if (want >= VGPU_GEN_HANDLE_LO && want < VGPU_GEN_HANDLE_HI &&
		    vgpu_rm_exists(hClient, want))
			return NV_ERR_INSERT_DUPLICATE_NAME;
		return NV_OK;
	}
	for (tries = 0; tries < 8; tries++) {
		want = VGPU_PICK_HANDLE_BASE |
		       ((u32)atomic_inc_return(&next) & 0x7ffff);
		if (!vgpu_rm_exists(hClient, want)) {
			*h = want;
			return NV_OK;
		}
	}
	return NV_ERR_INSUFFICIENT_RESOURCES;
}

/*
 * A creation call whose status, read back, says it failed: if the object
 * exists all the same, the status is not the driver's (or the call broke).
 * Objects with caller handles exist only if vgpu.ko tracks them (or, in the
 * generated range, were refused above), so an untracked one is this call's:
 * free it and refuse the file from now on.
 */
NV_STATUS vgpu_created_anyway(struct vgpu_file *vf, NvHandle hc, NvHandle hp,
			      NvHandle h, NV_STATUS st)
{
	if (st == NV_OK || vgpu_obj_find(hc, h) || !vgpu_rm_exists(hc, h))
		return st;
	vgpu_rm_free(hc, hp, h);
	WRITE_ONCE(vf->poisoned, true);
	WRITE_ONCE(vf->undo, true);
	pr_warn_ratelimited("slice %u: pid %d: object 0x%x exists though its allocation reported %#x; file refused from now on\n",
			    vf->slice->id, task_tgid_nr(current), h, st);
	return NV_ERR_INVALID_STATE;
}

/*
 * A channel's USERD memory keeps its FB in the driver while the channel
 * lives, even after the memory object is freed: kchannelCreateUserdMemDesc
 * (kernel_channel_gv100.c) makes a sub-memdesc that refcounts the base.
 * So the channel holds the memory's charge as well, or freeing the memory
 * would return a charge the GPU still holds (found by tools/fuzz: a
 * quota escape of up to the channel cap times the slice's quota).
 * hUserdMemory[0] (@32 in every release) is read before the call, from
 * what the driver was given; under c->lock.
 */
#define VGPU_CHANNEL_HUSERD_OFF 32

static void vgpu_chan_hold_userd(NvHandle hclient, NvHandle hchan, NvHandle hmem)
{
	struct vgpu_obj *m, *ch;

	if (!hmem)
		return;
	rcu_read_lock();
	m = vgpu_obj_find(hclient, hmem);
	ch = vgpu_obj_find(hclient, hchan);
	if (m && ch && ch->type == VGPU_OBJ_CHANNEL && !ch->charge &&
	    m->type == VGPU_OBJ_MEMORY && m->charge &&
	    refcount_inc_not_zero(&m->charge->ref))
		ch->charge = m->charge;
	rcu_read_unlock();
}

/*
 * The handles whose objects the driver makes a new object a dependant of
 * (vgpu.ko's dependency section above), from the parameters it is given:
 * NV_CHANNEL_ALLOC_PARAMS hContextShare @24 and hVASpace @28,
 * NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS hVASpace @8,
 * NV_CTXSHARE_ALLOCATION_PARAMETERS hVASpace @0 (the same offsets in
 * 535.261.03 and 595.45.04; kparams is zeroed beyond the release's size).
 */
#define VGPU_DEPS_MAX 2
#define VGPU_NV01_CONTEXT_DMA 0x00000002      /* cl0002.h */

static void vgpu_dep_handles(enum vgpu_obj_type type, u32 hclass,
			     const void *kparams, NvHandle deps[VGPU_DEPS_MAX])
{
	const NV_CHANNEL_ALLOC_PARAMS *cp = kparams;

	if (type == VGPU_OBJ_CHANNEL) {
		deps[0] = cp->hContextShare;
		deps[1] = cp->hVASpace;
	} else if (type == VGPU_OBJ_TSG) {
		deps[0] = ((const NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS *)kparams)->hVASpace;
	} else if (hclass == FERMI_CONTEXT_SHARE_A) {
		deps[0] = ((const NV_CTXSHARE_ALLOCATION_PARAMETERS *)kparams)->hVASpace;
	} else if (hclass == NV50_P2P) {
		/* p2papiConstruct_IMPL: a dependant of both subdevices. */
		deps[0] = ((const vgpu_nv503b_head *)kparams)->hSubDevice;
		deps[1] = ((const vgpu_nv503b_head *)kparams)->hPeerSubDevice;
		if (deps[1] == deps[0])         /* a loopback: one edge */
			deps[1] = 0;
	} else if (hclass == VGPU_NV01_CONTEXT_DMA) {
		/* ctxdmaConstruct_IMPL (context_dma.c): a dependant of its memory. */
		deps[0] = *(const NvHandle *)((const u8 *)kparams + 8);
	}
}

/*
 * A channel's error notifiers (hObjectError @0, hObjectEccError @140 of
 * NV_CHANNEL_ALLOC_PARAMS; a TSG's @0 and @4, which its channels inherit)
 * and its USERD memory (hUserdMemory[0] @32): the memory the driver keeps
 * using while the channel lives without holding the object
 * (docs/mediator.md, "A channel's error notifier"), read before the call.
 */
#define VGPU_PINS_MAX 3

static void vgpu_pin_handles(enum vgpu_obj_type type, const void *kparams,
			     NvHandle pins[VGPU_PINS_MAX])
{
	const NvHandle *h = kparams;

	if (type == VGPU_OBJ_CHANNEL) {
		pins[0] = h[0];
		pins[1] = h[140 / 4];
		pins[2] = h[VGPU_CHANNEL_HUSERD_OFF / 4];
	} else if (type == VGPU_OBJ_TSG) {
		pins[0] = h[0];
		pins[1] = h[1];
	}
}

/*
 * Pin what the driver keeps a bare reference to: an error notifier that is
 * memory or a context DMA (kchannelGetNotifierInfo keeps its memory
 * descriptor unreferenced; on GSP its physical address), and a USERD in
 * OS-descriptor memory (595.45.04 makes the channel its dependant,
 * kchannelCreateUserdMemDesc_GV100, 535.261.03 does not: pinned on both).
 * A USERD in other memory is held by its charge (vgpu_chan_hold_userd).
 */
static NV_STATUS vgpu_obj_pin_on(struct vgpu_client *c, NvHandle hparent,
				 NvHandle h, const NvHandle pins[VGPU_PINS_MAX])
{
	NvHandle hc = c->obj.key.client;
	struct vgpu_obj *o = vgpu_obj_find(hc, h), *t;
	int i;

	if (!o)
		return NV_OK;
	for (i = 0; i < VGPU_PINS_MAX; i++) {
		t = pins[i] ? vgpu_obj_find(hc, pins[i]) : NULL;
		if (!t || t->lost)
			continue;
		if (i == 2 ? t->hclass != NV01_MEMORY_SYSTEM_OS_DESCRIPTOR :
			     t->type != VGPU_OBJ_MEMORY &&
			     t->hclass != VGPU_NV01_CONTEXT_DMA)
			continue;
		if (vgpu_obj_pin(t, o)) {
			vgpu_obj_unmap_closure(o);
			vgpu_rm_free(hc, hparent, h);
			vgpu_obj_remove(o);
			return NV_ERR_NO_MEMORY;
		}
	}
	return NV_OK;
}

/*
 * Record the new object h's dependencies; the driver found each handle in
 * the same client (clientGetResourceRef on the channel's own client) or
 * refused the allocation.  One vgpu.ko does not track is the driver's own,
 * which no container can free (vgpu_rm_free_path).  If the edge cannot be
 * recorded the object must not exist: freed again.
 */
static NV_STATUS vgpu_obj_depend_on(struct vgpu_client *c, NvHandle hparent,
				    NvHandle h, const NvHandle deps[VGPU_DEPS_MAX])
{
	NvHandle hc = c->obj.key.client;
	struct vgpu_obj *o = vgpu_obj_find(hc, h), *dep;
	int i;

	if (!o)
		return NV_OK;
	for (i = 0; i < VGPU_DEPS_MAX; i++) {
		dep = deps[i] ? vgpu_obj_find(hc, deps[i]) : NULL;
		if (!dep || dep->lost || dep->type == VGPU_OBJ_CLIENT)
			continue;
		if (vgpu_obj_depend(dep, o)) {
			vgpu_obj_unmap_closure(o);
			vgpu_rm_free(hc, hparent, h);
			vgpu_obj_remove(o);
			return NV_ERR_NO_MEMORY;
		}
	}
	return NV_OK;
}

/* The driver's status of a call on a call page, or why it had none. */
static NV_STATUS vgpu_status_of(long ret, NV_STATUS st)
{
	return ret ? vgpu_call_status(ret) : st;
}

/*
 * RM_ALLOC of a non-root class, in the steps vgpu_rm_alloc_path takes them:
 * admit the class, copy its parameters in, check the parent and what the
 * parameters name, note what the driver will tie the object to, reserve
 * quota and a channel, make the call, record the object, copy back.  What
 * decides is vgpu.ko's own (p, its copy kparams, its tables); of the call
 * page only the driver's status is read back (vgpu_alloc_call).
 */
struct vgpu_alloc_req {
	struct vgpu_file *vf;
	struct vgpu_slice *s;
	NVOS64_PARAMETERS *p;           /* kernel memory: decisions use it */
	void __user *uparams;           /* the caller's pAllocParms */
	void *kparams;                  /* vgpu.ko's copy, what the driver gets */
	u32 psize;                      /* the release's size of the class */
	enum vgpu_obj_type type;
	struct vgpu_client *c;          /* the caller's, locked */
	struct vgpu_obj *parent;
	u32 gpu;                        /* the slice's GPU the object is on */
	bool fb;                        /* FB memory: reserved is held */
	bool chan;                      /* a channel: a cap reservation is held */
	u64 reserved;
	NvHandle huserd, deps[VGPU_DEPS_MAX], pins[VGPU_PINS_MAX];
};

/*
 * Admit the class against the policy: only what the release lets a
 * container allocate, with the size the release gives it, before anything
 * is copied or locked.  vgpu.ko reads parameters by their struct layout:
 * serialized (FINN) ones it could not check.
 */
static NV_STATUS vgpu_alloc_admit(struct vgpu_alloc_req *a)
{
	if (!vgpu_class_find(a->p->hClass, &a->type, &a->psize))
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	if (a->p->flags & NVOS64_FLAGS_FINN_SERIALIZED)
		return NV_ERR_NOT_SUPPORTED;
	return NV_OK;
}

/*
 * The release's size, into a zeroed buffer at least as large as the
 * 595.45.04 struct the typed paths read (nvrel.h: the members they use
 * lie within every release's size).  Copied once: every check below and
 * the driver read this copy (docs/mediator.md, "The double fetch").
 */
static NV_STATUS vgpu_alloc_copy_in(struct vgpu_alloc_req *a)
{
	a->kparams = kzalloc(max_t(u32, a->psize, sizeof(NV_CHANNEL_ALLOC_PARAMS)),
			     GFP_KERNEL_ACCOUNT);
	if (!a->kparams)
		return NV_ERR_NO_MEMORY;
	BUILD_BUG_ON(sizeof(NV_CHANNEL_ALLOC_PARAMS) < sizeof(NV_MEMORY_ALLOCATION_PARAMS));
	BUILD_BUG_ON(sizeof(NV_CHANNEL_ALLOC_PARAMS) < sizeof(NV0080_ALLOC_PARAMETERS));
	if (a->psize && a->p->pAllocParms &&
	    copy_from_user(a->kparams, a->uparams, a->psize))
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

/*
 * The parent: an object vgpu.ko tracks in the caller's client, which the
 * file owns and which is locked for the whole call (vgpu_client_lock_live),
 * so the table matches the driver until the object is recorded.
 */
static NV_STATUS vgpu_alloc_parent(struct vgpu_alloc_req *a)
{
	a->parent = vgpu_obj_find(a->p->hRoot, a->p->hObjectParent);
	/* A parent the driver invalidated has nothing to hold a child. */
	if (!a->parent || a->parent->lost)
		return NV_ERR_INVALID_OBJECT_PARENT;
	a->gpu = a->parent->gpu;
	return NV_OK;
}

/*
 * A device: on one of the slice's GPUs, numbered as the container numbers
 * them, in a VA space of the caller's own client.  The copy the driver
 * gets is rewritten to the driver's device instance.
 */
static NV_STATUS vgpu_alloc_check_device(struct vgpu_alloc_req *a)
{
	NV0080_ALLOC_PARAMETERS *dp = a->kparams;
	u32 idx = dp->deviceId;

	if (a->parent->type != VGPU_OBJ_CLIENT)
		return NV_ERR_INVALID_OBJECT_PARENT;
	/* The container numbers its GPUs from 0; others do not exist. */
	if (idx >= a->s->nr_gpus)
		return NV_ERR_INVALID_CLASS;
	/*
	 * hClientShare picks the VA space the device joins
	 * (device_share.c, deviceInitClientShare): 0 is the GPU's
	 * global one, shared with every other client that asks for
	 * it (other slices included); another client's handle is
	 * that client's, found by handle alone.  A container's device
	 * always gets a VA space of its own client: 0 becomes the
	 * client itself ("a new share"), any other client is refused.
	 * hTargetClient/hTargetDevice (a device standing for another
	 * client's) and the vGPU host's flags are not for containers.
	 */
	if (!dp->hClientShare)
		dp->hClientShare = a->p->hRoot;
	if (dp->hClientShare != a->p->hRoot || dp->hTargetClient ||
	    dp->hTargetDevice ||
	    (dp->flags & (NV_DEVICE_ALLOCATION_FLAGS_HOST_VGPU_DEVICE |
			  NV_DEVICE_ALLOCATION_FLAGS_PLUGIN_CONTEXT)))
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	/* The driver's device instance of that GPU (vgpu_rm_device_instance). */
	dp->deviceId = a->s->gpus[idx].dev_inst;
	a->gpu = idx;
	return NV_OK;
}

/*
 * Memory: below a device or subdevice, without the flags only kernel
 * callers may set.  FB memory (NV01_MEMORY_LOCAL_USER) is marked to be
 * reserved (vgpu_alloc_reserve).
 */
static NV_STATUS vgpu_alloc_check_memory(struct vgpu_alloc_req *a)
{
	NV_MEMORY_ALLOCATION_PARAMS *mp;

	if (!vgpu_gpu_parent(a->parent))
		return NV_ERR_INVALID_OBJECT_PARENT;
	/* Its 24-byte parameters have no flags to clear. */
	if (a->p->hClass == NV01_MEMORY_VIRTUAL)
		return NV_OK;
	mp = a->kparams;
	if (!a->p->pAllocParms)
		return NV_ERR_INVALID_ARGUMENT;
	/* Only kernel callers may set internal flags. */
	mp->internalflags = 0;
	a->fb = a->p->hClass == NV01_MEMORY_LOCAL_USER;
	return NV_OK;
}

/*
 * Any other class: what an event's, an SM debugger's or a P2P object's
 * parameters name must be the caller's own; an event may have any parent,
 * of the rest only NV_CONFIDENTIAL_COMPUTE and NV50_P2P the client.
 */
static NV_STATUS vgpu_alloc_check_other(struct vgpu_alloc_req *a)
{
	NVOS64_PARAMETERS *p = a->p;

	if (vgpu_is_event(p->hClass)) {
		/* Any parent, the client included (RS_ANY_PARENT). */
		return p->pAllocParms ? vgpu_event_check(a->vf, p->hRoot, a->kparams) :
					NV_ERR_INVALID_ARGUMENT;
	}
	/*
	 * NV_CONFIDENTIAL_COMPUTE is the one forwarded class whose
	 * parent is the client (resource_list.h: RmClientResource,
	 * RS_FLAGS_ALLOC_NON_PRIVILEGED): CUDA 535's cuInit makes one
	 * and asks it SYSTEM_GET_CAPABILITIES, the machine's CC state
	 * (the policy decides each of its controls).  Any other class
	 * a client parents is not for a slice.
	 */
	if (p->hClass == NV50_P2P) {
		/*
		 * Its parent is the client (resource_list.h): another
		 * is the driver's to refuse, after this check.
		 */
		return !p->pAllocParms ? NV_ERR_INVALID_ARGUMENT :
		       vgpu_p2p_check(p->hRoot, a->kparams, &a->gpu);
	}
	if (a->parent->type == VGPU_OBJ_CLIENT && p->hClass != VGPU_CONF_COMPUTE)
		return NV_ERR_INVALID_OBJECT_PARENT;
	/* Zeroed parameters when none were given: the driver's to refuse. */
	if (p->hClass == GT200_DEBUGGER)
		return vgpu_debugger_check(p->hRoot, a->kparams);
	return NV_OK;
}

/* Check the parent's kind and what the class's parameters name. */
static NV_STATUS vgpu_alloc_check(struct vgpu_alloc_req *a)
{
	switch (a->type) {
	case VGPU_OBJ_DEVICE:
		return vgpu_alloc_check_device(a);
	case VGPU_OBJ_SUBDEVICE:
		return a->parent->type == VGPU_OBJ_DEVICE ? NV_OK :
		       NV_ERR_INVALID_OBJECT_PARENT;
	case VGPU_OBJ_MEMORY:
		return vgpu_alloc_check_memory(a);
	default:
		return vgpu_alloc_check_other(a);
	}
}

/*
 * What the driver will make the object depend on, read before the call,
 * from the copy the driver is given: after it, the call page is the
 * sibling's to rewrite.
 */
static void vgpu_alloc_read_refs(struct vgpu_alloc_req *a)
{
	if (a->type == VGPU_OBJ_CHANNEL)
		a->huserd = *(NvHandle *)((u8 *)a->kparams + VGPU_CHANNEL_HUSERD_OFF);
	vgpu_dep_handles(a->type, a->p->hClass, a->kparams, a->deps);
	vgpu_pin_handles(a->type, a->kparams, a->pins);
}

/*
 * Reserve before the call, so that concurrent calls cannot pass the quota
 * or the channel cap between check and charge: FB memory's size as RM
 * will round it (vgpu_rm_rounded), a channel's place under the cap.  On
 * failure nothing is held.
 */
static NV_STATUS vgpu_alloc_reserve(struct vgpu_alloc_req *a)
{
	struct vgpu_slice *s = a->s;

	if (a->fb) {
		NV_MEMORY_ALLOCATION_PARAMS *mp = a->kparams;

		a->reserved = vgpu_rm_rounded(mp->size, mp->attr, mp->attr2);
		if (!vgpu_reserve(s, a->parent->gpu, a->reserved)) {
			vgpu_refused(s, a->parent->gpu, a->reserved);
			a->fb = false;          /* nothing reserved */
			return NV_ERR_NO_MEMORY;
		}
	}
	if (a->type == VGPU_OBJ_CHANNEL) {
		if (!vgpu_chan_reserve(s, a->gpu)) {
			pr_info_ratelimited("slice %u: channel refused: %u on GPU %u is the cap\n",
					    s->id, READ_ONCE(s->max_channels), a->gpu);
			return NV_ERR_INSUFFICIENT_RESOURCES;
		}
		a->chan = true;
	}
	return NV_OK;
}

/* The channel cap's reservation goes back; a channel made counts itself. */
static void vgpu_alloc_chan_return(struct vgpu_alloc_req *a)
{
	if (a->chan)
		atomic_dec(&a->s->gpus[a->gpu].chans_held);
}

/*
 * The call, on a call page at the caller's privilege (call.c), with a copy
 * of p and vgpu.ko's copy of the parameters.  Its status comes back on the
 * call page, where a sibling may have rewritten it: a failure on an object
 * that exists all the same is refused (vgpu_created_anyway), and nothing
 * else read back from the page is used.
 */
static NV_STATUS vgpu_alloc_call(struct vgpu_alloc_req *a)
{
	NVOS64_PARAMETERS *p = a->p;
	/* Device and subdevice always get (zeroed) parameters: the defaults. */
	struct vgpu_buf b = {
		.kbuf = a->kparams, .size = a->psize,
		.ptr_off = offsetof(NVOS64_PARAMETERS, pAllocParms),
	};
	bool with = a->psize &&
		    (a->uparams || a->type == VGPU_OBJ_DEVICE ||
		     a->type == VGPU_OBJ_SUBDEVICE);
	NVOS64_PARAMETERS q = *p;
	long ret;

	/* Decisions use p; q goes to the driver and comes back forgeable. */
	q.pAllocParms = 0;
	q.pRightsRequested = 0;
	q.status = NV_ERR_GENERIC;
	ret = vgpu_call_nv(a->vf, a->vf->real, NV_ESC_RM_ALLOC, &q, sizeof(q),
			   with ? &b : NULL, with ? 1 : 0);
	return vgpu_created_anyway(a->vf, p->hRoot, p->hObjectParent,
				   p->hObjectNew, vgpu_status_of(ret, q.status));
}

/*
 * Record the object the driver made: FB memory is charged what the driver
 * says it allocated (vgpu_commit: the reservation becomes the charge, or
 * goes back with the object); anything else is tracked with the
 * dependencies and pins read before the call.  On failure the object is
 * freed again: it must not exist untracked.
 */
static NV_STATUS vgpu_alloc_record(struct vgpu_alloc_req *a)
{
	NVOS64_PARAMETERS *p = a->p;
	NV_STATUS st;

	if (a->fb)
		return vgpu_commit(a->c, a->parent, p->hObjectNew, p->hClass,
				   a->reserved);
	st = vgpu_track(a->c, a->parent, p->hObjectNew, p->hClass, a->type,
			a->gpu);
	if (st == NV_OK)
		st = vgpu_obj_depend_on(a->c, p->hObjectParent, p->hObjectNew,
					a->deps);
	if (st == NV_OK)
		st = vgpu_obj_pin_on(a->c, p->hObjectParent, p->hObjectNew,
				     a->pins);
	if (st == NV_OK && a->type == VGPU_OBJ_CHANNEL)
		vgpu_chan_hold_userd(p->hRoot, p->hObjectNew, a->huserd);
	return st;
}

/* The parameters back to the caller, as the driver would write them. */
static NV_STATUS vgpu_alloc_copy_out(struct vgpu_alloc_req *a)
{
	NVOS64_PARAMETERS *p = a->p;
	struct vgpu_obj *o;

	/* The caller sees its own numbering back. */
	if (a->type == VGPU_OBJ_DEVICE)
		((NV0080_ALLOC_PARAMETERS *)a->kparams)->deviceId = a->gpu;
	if (!a->psize || !a->uparams ||
	    !copy_to_user(a->uparams, a->kparams, a->psize))
		return NV_OK;
	/* As the driver: parameters that cannot be written back undo. */
	o = vgpu_obj_find(p->hRoot, p->hObjectNew);
	if (o)
		vgpu_obj_unmap_closure(o);
	vgpu_rm_free(p->hRoot, p->hObjectParent, p->hObjectNew);
	if (o)
		vgpu_obj_remove(o);
	return NV_ERR_INVALID_ARGUMENT;
}

/**
 * vgpu_rm_alloc_path - RM_ALLOC (NVOS21/NVOS64) and RM_ALLOC_OBJECT of a
 * non-root class, made through the real control file at the caller's
 * privilege (call.c)
 * @vf: the control file
 * @p: the parameters, top level already in kernel memory; pAllocParms is
 *	still the caller's pointer and is copied here (class size)
 */
NV_STATUS vgpu_rm_alloc_path(struct vgpu_file *vf, NVOS64_PARAMETERS *p)
{
	struct vgpu_alloc_req a = {
		.vf = vf, .s = vf->slice, .p = p,
		.uparams = u64_to_user_ptr(p->pAllocParms),
	};
	NV_STATUS st;

	st = vgpu_alloc_admit(&a);
	if (st != NV_OK)
		return st;
	st = vgpu_alloc_copy_in(&a);
	if (st != NV_OK)
		goto out_free;
	a.c = vgpu_client_lock_live(vf, p->hRoot);
	if (!a.c) {
		st = NV_ERR_INVALID_CLIENT;
		goto out_free;
	}
	st = vgpu_alloc_parent(&a);
	if (st != NV_OK)
		goto out_unlock;
	st = vgpu_alloc_check(&a);
	if (st != NV_OK)
		goto out_unlock;
	vgpu_alloc_read_refs(&a);
	st = vgpu_alloc_reserve(&a);
	if (st != NV_OK)
		goto out_unlock;
	st = vgpu_handle_for(p->hRoot, &p->hObjectNew);
	if (st != NV_OK)
		goto undo;
	st = vgpu_alloc_call(&a);
	if (st != NV_OK)
		goto undo;
	st = vgpu_alloc_record(&a);
	/* The channel, if tracked, counts itself now. */
	vgpu_alloc_chan_return(&a);
	if (st == NV_OK)
		st = vgpu_alloc_copy_out(&a);
	goto out_unlock;
undo:
	/* Nothing was made: the reservations go back. */
	if (a.fb)
		vgpu_unreserve(a.s, a.parent->gpu, a.reserved);
	vgpu_alloc_chan_return(&a);
out_unlock:
	mutex_unlock(&a.c->lock);
	vgpu_client_put(a.c);
out_free:
	kfree(a.kparams);
	return st;
}

/**
 * vgpu_rm_free_path - RM_FREE: the object and its descendants, or the client
 */
NV_STATUS vgpu_rm_free_path(struct vgpu_file *vf, NVOS00_PARAMETERS *p)
{
	struct vgpu_client *c;
	struct vgpu_obj *o;
	NV_STATUS st;

	c = vgpu_client_lock_live(vf, p->hRoot);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	o = p->hObjectOld == p->hRoot ? &c->obj :
	    vgpu_obj_find(p->hRoot, p->hObjectOld);
	/*
	 * Only what vgpu.ko tracks: every object a container made is (its
	 * allocations are vgpu.ko's own calls), so an untracked handle of the
	 * client is one the driver made itself, with a generated handle (a
	 * bare channel's hidden TSG, a TSG's legacy context shares and
	 * graphics context: kchannelConstruct_IMPL, kchangrpapiSetLegacyMode),
	 * whose free would take tracked channels with it as dependants
	 * unseen.  Nothing that does not exist is refused for existing.
	 */
	if (!o) {
		st = vgpu_rm_exists(p->hRoot, p->hObjectOld) ?
		     NV_ERR_INSUFFICIENT_PERMISSIONS : NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	if (o != &c->obj && vgpu_obj_free_pinned(o)) {
		st = NV_ERR_STATE_IN_USE;
		goto out;
	}
	/* USERD maps go before their channels (the driver tears them down). */
	vgpu_obj_unmap_closure(o);
	st = vgpu_rm_free(p->hRoot, p->hObjectParent, p->hObjectOld);
	if (st != NV_OK)
		goto out;
	if (p->hObjectOld == p->hRoot) {
		vgpu_client_remove(c);
	} else {
		o = vgpu_obj_find(p->hRoot, p->hObjectOld);
		if (o)
			vgpu_obj_remove(o);
	}
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return st;
}

/**
 * vgpu_rm_dup_path - RM_DUP_OBJECT: memory of a client of the same slice;
 * the new object shares the source's FB charge.
 */
NV_STATUS vgpu_rm_dup_path(struct vgpu_file *vf, NVOS55_PARAMETERS *p)
{
	struct vgpu_charge *charge = NULL;
	struct vgpu_obj *src, *parent;
	struct vgpu_client *c;
	enum vgpu_obj_type type;
	u32 hclass, gpu;
	NV_STATUS st;

	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;

	/* The source must be an object vgpu.ko tracks in this slice. */
	rcu_read_lock();
	src = vgpu_obj_find(p->hClientSrc, p->hObjectSrc);
	/*
	 * src may be another client's, freed meanwhile under that client's
	 * lock: its charge is taken as vgpu_obj_charge_get says, never by
	 * reading src->charge twice.
	 */
	if (!src || src->client->slice != vf->slice || READ_ONCE(src->lost) ||
	    (src->type != VGPU_OBJ_MEMORY && src->type != VGPU_OBJ_USERMODE) ||
	    !vgpu_obj_charge_get(src, &charge)) {
		rcu_read_unlock();
		vgpu_client_put(c);
		return src ? NV_ERR_INSUFFICIENT_PERMISSIONS : NV_ERR_OBJECT_NOT_FOUND;
	}
	type = src->type;
	hclass = src->hclass;
	gpu = src->gpu;
	rcu_read_unlock();

	mutex_lock(&c->lock);
	if (c->dead) {
		st = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	parent = vgpu_obj_find(p->hClient, p->hParent);
	if (!vgpu_gpu_parent(parent)) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	if (parent->gpu != gpu) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	/*
	 * A handle the client has already is refused here, as the driver
	 * refuses it (serverCopyResource -> clientAssignResourceHandle ->
	 * clientValidateNewResourceHandle_IMPL, rs_client.c:
	 * NV_ERR_INSERT_DUPLICATE_NAME), and not left to the driver: its
	 * refusal comes back on the call page, where a sibling may rewrite it
	 * to NV_OK after the copy-out, and the existing object would then have
	 * been taken for the dup (and, already tracked, freed in the driver
	 * while vgpu.ko kept tracking it: a channel's USERD map torn down
	 * under the scheduler, a VA space's channels gone with it; the
	 * client's own handle, the whole client).  The client's handle is
	 * the driver's NV_ERR_INVALID_OBJECT_HANDLE (the same function).
	 */
	if (p->hObject == p->hClient) {
		st = NV_ERR_INVALID_OBJECT_HANDLE;
		goto out;
	}
	if (p->hObject && (vgpu_obj_find(p->hClient, p->hObject) ||
			   vgpu_rm_exists(p->hClient, p->hObject))) {
		st = NV_ERR_INSERT_DUPLICATE_NAME;
		goto out;
	}
	st = vgpu_handle_for(p->hClient, &p->hObject);
	if (st != NV_OK)
		goto out;
	{
		/* p keeps vgpu.ko's handles; only q goes through the call page. */
		NVOS55_PARAMETERS q = *p;
		long ret;

		q.status = NV_ERR_GENERIC;
		ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_DUP_OBJECT, &q,
				   sizeof(q), NULL, 0);
		st = vgpu_status_of(ret, q.status);
	}
	/*
	 * The status was read back from the call page: it decides nothing.
	 * What decides is whether the handle now names an object of the
	 * source's class, asked through the kernel entry: RM's dup is an
	 * object of the source's external class (clientCopyResource_IMPL,
	 * rs_client.c: externalClassId = pSrcRef->externalClassId) at the
	 * handle it was given, and the handle was free above.  Under c->lock
	 * nothing else makes an object of that class (memory, usermode) in
	 * this client: every path that does (RM_ALLOC, RM_ALLOC_MEMORY,
	 * VID_HEAP, RM_DUP_OBJECT, IPC imports) takes it.  A direct escape
	 * of a sibling can put another class there (RM_ALLOC_CONTEXT_DMA2
	 * names its own handle and is forwarded unlocked): existence alone
	 * is not this call's dup.
	 *  - Of the source's class: this call's dup; a failure status is a
	 *    forgery (vgpu_created_anyway frees it and refuses the file).
	 *  - Not, with NV_OK: a forgery; nothing is tracked, and if anything
	 *    is there it is not vgpu.ko's to free: the file is refused, and
	 *    its clients go with it (vgpu_undo).
	 */
	if (vgpu_rm_is_class(p->hClient, p->hObject, hclass)) {
		st = vgpu_created_anyway(vf, p->hClient, p->hParent, p->hObject,
					 st);
	} else if (st == NV_OK) {
		if (vgpu_rm_exists(p->hClient, p->hObject)) {
			WRITE_ONCE(vf->poisoned, true);
			WRITE_ONCE(vf->undo, true);
			pr_warn_ratelimited("slice %u: pid %d: dup 0x%x reported made, but another class is there; file refused from now on\n",
					    vf->slice->id, task_tgid_nr(current),
					    p->hObject);
		}
		st = NV_ERR_INVALID_STATE;
	}
	if (st != NV_OK)
		goto out;
	if (vgpu_obj_add(c, parent, p->hObject, hclass, type, gpu, charge)) {
		vgpu_rm_free(p->hClient, p->hParent, p->hObject);
		st = NV_ERR_NO_MEMORY;
		goto out;
	}
	charge = NULL;          /* now the new object's */
out:
	mutex_unlock(&c->lock);
	vgpu_charge_put(charge);
	vgpu_client_put(c);
	return st;
}

/* rs_access.h: RS_SHARE_TYPE_ALL, RS_ACCESS_DUP_OBJECT's bit. */
#define VGPU_SHARE_TYPE_ALL       1U
#define VGPU_ACCESS_DUP_OBJECT    BIT(0)

/**
 * vgpu_rm_share_path - NV_ESC_RM_SHARE: CUDA IPC's export (cuIpcGetMemHandle
 * shares the memory object with every client, DUP_OBJECT only, so that
 * the importing process can RM_DUP_OBJECT it from the exporter's client)
 *
 * Forwarded only as libcuda makes it: type ALL, access DUP_OBJECT alone,
 * no action (the share replaces the object's inherited policy:
 * clientShareResource_IMPL, rs_client.c), on memory vgpu.ko tracks in the
 * caller's own client; anything else is refused.  What that grants in the
 * driver: any client may dup the object.  Every dup from a slice comes
 * through vgpu_rm_dup_path, which takes a source only in the caller's
 * slice and gives the dup a reference on the source's charge, so the
 * export's FB stays charged to the exporter's slice while an importer
 * holds it, and a process of another slice is refused
 * (NV_ERR_INSUFFICIENT_PERMISSIONS).  Assumed: nothing untrusted reaches
 * the real nodes except through vgpu.ko (a host process on them could dup
 * the memory, uncharged; kernel clients may dup anything anyway:
 * clientCopyResource_IMPL).  The status is read back from the call page
 * and decides nothing: vgpu.ko records nothing for a share.
 */
NV_STATUS vgpu_rm_share_path(struct vgpu_file *vf, NVOS57_PARAMETERS *p)
{
	u32 type = p->sharePolicy[2] & 0xffff, action = (p->sharePolicy[2] >> 16) & 0xff;
	struct vgpu_client *c;
	struct vgpu_obj *o;
	NV_STATUS st;

	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	mutex_lock(&c->lock);
	if (c->dead) {
		st = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	o = vgpu_obj_find(p->hClient, p->hObject);
	if (!o) {
		st = vgpu_rm_exists(p->hClient, p->hObject) ?
		     NV_ERR_INSUFFICIENT_PERMISSIONS : NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	if (o->type != VGPU_OBJ_MEMORY || READ_ONCE(o->lost) ||
	    type != VGPU_SHARE_TYPE_ALL || action ||
	    p->sharePolicy[1] != VGPU_ACCESS_DUP_OBJECT) {
		st = NV_ERR_INSUFFICIENT_PERMISSIONS;
		goto out;
	}
	{
		/* p keeps vgpu.ko's copy; only q goes through the call page. */
		NVOS57_PARAMETERS q = *p;
		long ret;

		q.status = NV_ERR_GENERIC;
		ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_SHARE, &q, sizeof(q), NULL, 0);
		st = vgpu_status_of(ret, q.status);
	}
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return st;
}

/**
 * vgpu_alloc_memory_path - RM_ALLOC_MEMORY (NVOS02) of FB (0x40), kernel path
 */
/*
 * NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through RM_ALLOC_MEMORY: the caller's own
 * pages at pMemory, pinned by the driver and made GPU-accessible
 * (escape.c, RmAllocOsDescriptor; cuMemHostRegister and pinned host
 * allocations).  The driver pins from the calling process's mm
 * (os_lock_user_pages), and the call runs in the caller's context on a call
 * page no other task can change, so the pages are the caller's own: nothing
 * of another slice, and no FB.  Tracked as memory without a charge, so that
 * it can be mapped, duped and freed like any object of the client.  (Through
 * RM_ALLOC the driver takes no user address, osdescConstruct: the class is
 * not offered there.)
 */
static NV_STATUS vgpu_alloc_os_descriptor(struct vgpu_file *vf, NVOS02_PARAMETERS *p)
{
	nv_ioctl_nvos02_parameters_with_fd pa = { .fd = -1 };
	struct vgpu_obj *parent;
	struct vgpu_client *c;
	NV_STATUS st;
	long ret;

	if (!vgpu_verdict(NVREL_CLS, p->hClass))
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	c = vgpu_client_lock_live(vf, p->hRoot);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	parent = vgpu_obj_find(p->hRoot, p->hObjectParent);
	if (!vgpu_gpu_parent(parent)) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	st = vgpu_handle_for(p->hRoot, &p->hObjectNew);
	if (st != NV_OK)
		goto out;
	pa.params = *p;
	pa.params.status = NV_ERR_GENERIC;
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_ALLOC_MEMORY, &pa, sizeof(pa),
			   NULL, 0);
	st = vgpu_created_anyway(vf, p->hRoot, p->hObjectParent, p->hObjectNew,
				 vgpu_status_of(ret, pa.params.status));
	if (st == NV_OK)
		st = vgpu_track(c, parent, p->hObjectNew, p->hClass,
				VGPU_OBJ_MEMORY, parent->gpu);
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return st;
}

NV_STATUS vgpu_alloc_memory_path(struct vgpu_file *vf, NVOS02_PARAMETERS *p)
{
	struct vgpu_slice *s = vf->slice;
	struct vgpu_obj *parent;
	struct vgpu_client *c;
	u64 size;
	NV_STATUS st;

	if (p->hClass == NV01_MEMORY_SYSTEM_OS_DESCRIPTOR)
		return vgpu_alloc_os_descriptor(vf, p);
	if (p->hClass != NV01_MEMORY_LOCAL_USER)
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	if (p->limit == U64_MAX)
		return NV_ERR_INVALID_ARGUMENT;
	/* RM's DEFAULT page size (_rmAllocMemoryLocalUser): vgpu_rm_rounded. */
	size = vgpu_rm_rounded(p->limit + 1, 0, 0);

	c = vgpu_client_lock_live(vf, p->hRoot);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	parent = vgpu_obj_find(p->hRoot, p->hObjectParent);
	if (!vgpu_gpu_parent(parent)) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	if (!vgpu_reserve(s, parent->gpu, size)) {
		vgpu_refused(s, parent->gpu, size);
		st = NV_ERR_NO_MEMORY;
		goto out;
	}
	st = vgpu_handle_for(p->hRoot, &p->hObjectNew);
	if (st == NV_OK) {
		nv_ioctl_nvos02_parameters_with_fd pa = { .params = *p, .fd = -1 };
		long ret;

		pa.params.status = NV_ERR_GENERIC;
		ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_ALLOC_MEMORY, &pa,
				   sizeof(pa), NULL, 0);
		/* Nothing read back decides: the size is asked after (vgpu_commit). */
		st = vgpu_created_anyway(vf, p->hRoot, p->hObjectParent,
					 p->hObjectNew,
					 vgpu_status_of(ret, pa.params.status));
	}
	if (st != NV_OK) {
		vgpu_unreserve(s, parent->gpu, size);
		goto out;
	}
	st = vgpu_commit(c, parent, p->hObjectNew, p->hClass, size);
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return st;
}

/* Is an NVOS32 allocation FB?  (nv-abi.md: VIRTUAL flag, attr location.) */
static bool vgpu_heap_is_fb(u32 flags, u32 attr, u32 *hclass)
{
	u32 loc = (attr >> NVOS32_ATTR_LOCATION_SHIFT) & NVOS32_ATTR_LOCATION_MASK;

	if (flags & NVOS32_ALLOC_FLAGS_VIRTUAL) {
		/* rmapi_deprecated_vidheapctrl.c: a VIRTUAL allocation is NV50_MEMORY_VIRTUAL. */
		*hclass = NV50_MEMORY_VIRTUAL;
		return false;
	}
	if (loc == NVOS32_ATTR_LOCATION_PCI) {
		*hclass = NV01_MEMORY_SYSTEM;
		return false;
	}
	*hclass = NV01_MEMORY_LOCAL_USER;
	return true;
}

/**
 * vgpu_vid_heap_path - RM_VID_HEAP_CONTROL: ALLOC 2/6/14, FREE 3, INFO 5
 */
NV_STATUS vgpu_vid_heap_path(struct vgpu_file *vf, NVOS32_PARAMETERS *p)
{
	struct vgpu_slice *s = vf->slice;
	struct vgpu_obj *parent, *o;
	struct vgpu_client *c;
	u32 flags, attr, attr2 = 0, hclass = 0;
	u64 *psize, size = 0;
	bool fb = false;
	NV_STATUS st;

	switch (p->function) {
	case NVOS32_FUNCTION_ALLOC_SIZE:
		flags = p->data.AllocSize.flags;
		attr = p->data.AllocSize.attr;
		attr2 = p->data.AllocSize.attr2;
		psize = &p->data.AllocSize.size;
		break;
	case NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT:
		flags = p->data.AllocTiledPitchHeight.flags;
		attr = p->data.AllocTiledPitchHeight.attr;
		psize = &p->data.AllocTiledPitchHeight.size;
		break;
	case NVOS32_FUNCTION_ALLOC_SIZE_RANGE:
		flags = p->data.AllocSizeRange.flags;
		attr = p->data.AllocSizeRange.attr;
		psize = &p->data.AllocSizeRange.size;
		break;
	case NVOS32_FUNCTION_FREE:
	case NVOS32_FUNCTION_INFO:
		psize = NULL;
		flags = attr = 0;
		break;
	default:
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	}

	c = vgpu_client_lock_live(vf, p->hRoot);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	parent = vgpu_obj_find(p->hRoot, p->hObjectParent);
	if (!vgpu_gpu_parent(parent)) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	/*
	 * FREE is RmFree of any handle on the real driver
	 * (rmapi_deprecated_vidheapctrl.c, _nvos32FunctionFree): a client, a
	 * device or a channel would go without vgpu.ko's tracking (and the
	 * scheduler's hold on a channel) going with it.  Only a memory object
	 * tracked in this client may be freed this way; everything else is
	 * RM_FREE's job, which keeps the tracking in step.
	 */
	if (p->function == NVOS32_FUNCTION_FREE) {
		o = vgpu_obj_find(p->hRoot, p->data.Free.hMemory);
		if (!o || o->type != VGPU_OBJ_MEMORY) {
			st = NV_ERR_INSUFFICIENT_PERMISSIONS;
			goto out;
		}
		if (vgpu_obj_free_pinned(o)) {
			st = NV_ERR_STATE_IN_USE;
			goto out;
		}
	}
	if (psize) {
		fb = vgpu_heap_is_fb(flags, attr, &hclass);
		size = fb ? vgpu_rm_rounded(*psize, attr, attr2) : *psize;
		if (fb && !vgpu_reserve(s, parent->gpu, size)) {
			vgpu_refused(s, parent->gpu, size);
			st = NV_ERR_NO_MEMORY;
			goto out;
		}
	}
	if (p->function == NVOS32_FUNCTION_FREE) {
		/* Creates nothing; a tracked memory object of an owned client. */
		vgpu_obj_unmap_closure(o);
		st = vgpu_rm_vid_heap(p);
	} else if (psize) {
		/* hMemory is at the same offset in the three layouts. */
		NvHandle h = p->data.AllocSize.hMemory;

		st = vgpu_handle_for(p->hRoot, &h);
		if (st == NV_OK) {
			NVOS32_PARAMETERS q = *p;
			long ret;

			q.data.AllocSize.hMemory = h;
			q.status = NV_ERR_GENERIC;
			ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_VID_HEAP_CONTROL,
					   &q, sizeof(q), NULL, 0);
			st = vgpu_created_anyway(vf, p->hRoot, p->hObjectParent,
						 h, vgpu_status_of(ret, q.status));
			/*
			 * The caller gets the driver's outputs (offset, size,
			 * address...); what vgpu.ko decides with stays its own:
			 * the size charged is the driver's, asked through the
			 * kernel entry (vgpu_commit).
			 */
			if (st == NV_OK) {
				q.function = p->function;
				q.hRoot = p->hRoot;
				q.hObjectParent = p->hObjectParent;
				q.data.AllocSize.hMemory = h;
				*p = q;
			}
		}
	} else {
		/* INFO: creates nothing; rewritten below. */
		NVOS32_PARAMETERS q = *p;
		long ret;

		q.status = NV_ERR_GENERIC;
		ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_VID_HEAP_CONTROL, &q,
				   sizeof(q), NULL, 0);
		st = vgpu_status_of(ret, q.status);
		if (st == NV_OK) {
			q.function = p->function;
			*p = q;
		}
	}
	if (st != NV_OK) {
		if (fb)
			vgpu_unreserve(s, parent->gpu, size);
		goto out;
	}
	if (p->function == NVOS32_FUNCTION_FREE) {
		o = vgpu_obj_find(p->hRoot, p->data.Free.hMemory);
		if (o && o->type != VGPU_OBJ_CLIENT)
			vgpu_obj_remove(o);
	} else if (psize) {
		/* hMemory is at the same offset in the three layouts. */
		NvHandle h = p->data.AllocSize.hMemory;

		if (fb)
			st = vgpu_commit(c, parent, h, hclass, size);
		else
			st = vgpu_track(c, parent, h, hclass, VGPU_OBJ_MEMORY,
					parent->gpu);
	}
	if (st == NV_OK)
		vgpu_heap_info_rewrite(s, parent->gpu, p);
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return st;
}

bool vgpu_class_allowed(u32 hclass)
{
	enum vgpu_obj_type type;
	u32 size;

	return vgpu_class_find(hclass, &type, &size);
}
