// SPDX-License-Identifier: GPL-2.0
/*
 * compute.c - the TSGs and channels of each slice GPU, and the two things
 * the scheduler does to them: pause (GPFIFO_SCHEDULE off, then PREEMPT with
 * bWait) and resume (GPFIFO_SCHEDULE on).  docs/compute.md, section 2.
 *
 * Tracking starts at allocation (memory.c makes every RM_ALLOC itself) and
 * ends on every free path: the object's, an ancestor's, the client's, the
 * last close (all of them end in vgpu_obj_remove -> vgpu_compute_drop), and
 * the free of an object the driver made it a dependant of (a VA space, a
 * context share: vgpu_obj_invalidate -> vgpu_compute_drop).
 *
 * Each channel's USERD page is mapped into the kernel through the driver's
 * kernel entry point (NV04_MAP_MEMORY with hMemory = the channel), so the
 * scheduler can tell "has queued work" (GP_GET != GP_PUT) without the
 * container's help.  A driver that refuses that map leaves the channel
 * tracked but unmapped: its slice then counts as wanting the GPU while it
 * rang a doorbell within the last period (seen through doorbell gating,
 * mmap.c), which is coarser but needs nothing from the driver.
 *
 * The container's own GPFIFO_SCHEDULE(bEnable=1) is virtualised rather than
 * refused: CUDA enables its TSGs after allocating their channels, and fails
 * without it.  vgpu.ko records the wish (user_enabled) and the driver sees
 * user_enabled AND "the slice holds the GPU": an enable while the slice is
 * paused is answered NV_OK and changes nothing in the driver.  Disabling
 * (bEnable=0), PREEMPT, SET_TIMESLICE and SET_INTERLEAVE_LEVEL stay refused
 * (NV_ERR_INSUFFICIENT_PERMISSIONS, as control.c's allow-list answers): the
 * runlist state of a slice's TSGs is vgpu.ko's.
 */
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/ktime.h>

#include "vgpu.h"

atomic_t vgpu_nr_tsgs = ATOMIC_INIT(0);
atomic_t vgpu_nr_userd_maps = ATOMIC_INIT(0);
/* RM calls the mechanism made, since load (debugfs sched: what a switch costs) */
atomic64_t vgpu_nr_rm_schedule = ATOMIC64_INIT(0);
atomic64_t vgpu_nr_rm_preempt = ATOMIC64_INIT(0);

void vgpu_compute_init_gpu(struct vgpu_gpu *g)
{
	mutex_init(&g->tlock);
	INIT_LIST_HEAD(&g->tsgs);
	init_waitqueue_head(&g->run_wq);
	mutex_init(&g->umap_lock);
	INIT_LIST_HEAD(&g->umaps);
	INIT_LIST_HEAD(&g->sched_node);
}

static struct vgpu_gpu *vgpu_obj_gpu(struct vgpu_obj *o)
{
	return &o->client->slice->gpus[o->gpu];
}

/*
 * A control's parameter size in the driver's release (GPFIFO_SCHEDULE grew
 * a member in 575), at most the struct vgpu.ko fills.
 */
static u32 vgpu_ctrl_size(u32 cmd, u32 kstruct)
{
	u32 size = vgpu_rel_size(NVREL_CTL, cmd);

	return size && size < kstruct ? size : kstruct;
}

/* GPFIFO_SCHEDULE on a TSG, or on a bare channel (its hidden TSG); tlock. */
static NV_STATUS vgpu_tsg_schedule(struct vgpu_tsg *t, bool enable)
{
	NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS p = { .bEnable = enable };
	u32 cmd = t->bare ? NVA06F_CTRL_CMD_GPFIFO_SCHEDULE :
			    NVA06C_CTRL_CMD_GPFIFO_SCHEDULE;
	NV_STATUS st;

	lockdep_assert_held(&t->g->tlock);
	atomic64_inc(&vgpu_nr_rm_schedule);
	st = vgpu_rm_ctrl(t->hclient, t->handle, cmd, &p,
			  vgpu_ctrl_size(cmd, sizeof(p)));
	if (st == NV_OK)
		t->hw_enabled = enable;
	return st;
}

/* Off the engine: PREEMPT with bWait (the driver's own timeout, 100 ms). */
static void vgpu_tsg_preempt(struct vgpu_tsg *t)
{
	NVA06C_CTRL_PREEMPT_PARAMS p = { .bWait = 1 };

	/* A bare channel's hidden TSG has no handle to preempt. */
	if (!t->bare) {
		atomic64_inc(&vgpu_nr_rm_preempt);
		vgpu_rm_ctrl(t->hclient, t->handle, NVA06C_CTRL_CMD_PREEMPT,
			     &p, vgpu_ctrl_size(NVA06C_CTRL_CMD_PREEMPT, sizeof(p)));
	}
}

static bool vgpu_gpu_tsg_paused(struct vgpu_gpu *g)
{
	return g->paused && (g->paused_layers & VGPU_SCHED_L_TSG);
}

static struct vgpu_tsg *vgpu_tsg_new(struct vgpu_obj *o, bool bare)
{
	struct vgpu_tsg *t = kzalloc(sizeof(*t), GFP_KERNEL);

	if (!t)
		return NULL;
	t->g = vgpu_obj_gpu(o);
	t->hclient = o->key.client;
	t->handle = o->key.object;
	t->bare = bare;
	/* Unknown: the real driver may make it enabled; pausing disables it. */
	t->hw_enabled = true;
	INIT_LIST_HEAD(&t->chans);
	return t;
}

/* Add t to its GPU; off the runlist at once if the slice is paused. */
static void vgpu_tsg_add_locked(struct vgpu_tsg *t)
{
	struct vgpu_gpu *g = t->g;

	list_add_tail(&t->node, &g->tsgs);
	WRITE_ONCE(g->nr_tsgs, g->nr_tsgs + 1);
	atomic_inc(&vgpu_nr_tsgs);
	if (vgpu_gpu_tsg_paused(g))
		vgpu_tsg_schedule(t, false);
}

static void vgpu_tsg_del_locked(struct vgpu_tsg *t)
{
	struct vgpu_gpu *g = t->g;

	list_del(&t->node);
	WRITE_ONCE(g->nr_tsgs, g->nr_tsgs - 1);
	atomic_dec(&vgpu_nr_tsgs);
}

static NvHandle vgpu_obj_device(struct vgpu_obj *o)
{
	for (; o; o = o->parent)
		if (o->type == VGPU_OBJ_DEVICE)
			return o->key.object;
	return 0;
}

/* Map a channel's USERD into the kernel; false if the driver cannot. */
static bool vgpu_userd_map(struct vgpu_chan *ch, NvHandle hclient)
{
	NVOS33_PARAMETERS p = {
		.hClient = hclient, .hDevice = ch->hdevice,
		.hMemory = ch->handle, .offset = 0, .length = PAGE_SIZE,
	};

	if (vgpu_rm_map(&p) != NV_OK || !p.pLinearAddress)
		return false;
	ch->userd = (const u32 *)(uintptr_t)p.pLinearAddress;
	ch->cookie = p.pLinearAddress;
	atomic_inc(&vgpu_nr_userd_maps);
	return true;
}

static void vgpu_userd_unmap(NvHandle hclient, NvHandle hdevice,
			     NvHandle hmemory, u64 cookie)
{
	NVOS34_PARAMETERS p = {
		.hClient = hclient, .hDevice = hdevice, .hMemory = hmemory,
		.pLinearAddress = cookie,
	};

	/* nvsim keeps the page until this call even if the channel is gone. */
	vgpu_rm_unmap(&p);
	atomic_dec(&vgpu_nr_userd_maps);
}

/**
 * vgpu_compute_track - start tracking a new TSG or channel
 * @c: its client, locked
 * @o: the object just added to the table
 *
 * Return: 0, or -ENOMEM (the caller frees the object again: a TSG vgpu.ko
 * cannot pause must not exist).
 */
int vgpu_compute_track(struct vgpu_client *c, struct vgpu_obj *o)
{
	struct vgpu_tsg *t = NULL;
	struct vgpu_chan *ch;
	struct vgpu_gpu *g = vgpu_obj_gpu(o);

	lockdep_assert_held(&c->lock);
	if (o->type == VGPU_OBJ_TSG) {
		t = vgpu_tsg_new(o, false);
		if (!t)
			return -ENOMEM;
		mutex_lock(&g->tlock);
		vgpu_tsg_add_locked(t);
		mutex_unlock(&g->tlock);
		o->compute = t;
		vgpu_sched_kick(g);
		return 0;
	}

	ch = kzalloc(sizeof(*ch), GFP_KERNEL);
	if (!ch)
		return -ENOMEM;
	ch->handle = o->key.object;
	ch->hdevice = vgpu_obj_device(o);
	if (o->parent && o->parent->type == VGPU_OBJ_TSG && o->parent->compute) {
		ch->tsg = o->parent->compute;
	} else {
		t = vgpu_tsg_new(o, true);
		if (!t) {
			kfree(ch);
			return -ENOMEM;
		}
		ch->tsg = t;
		ch->owns_tsg = true;
	}
	vgpu_userd_map(ch, o->key.client);

	mutex_lock(&g->tlock);
	if (t)
		vgpu_tsg_add_locked(t);
	list_add_tail(&ch->node, &ch->tsg->chans);
	WRITE_ONCE(g->nr_channels, g->nr_channels + 1);
	if (!ch->userd)
		g->nr_unmapped++;
	mutex_unlock(&g->tlock);
	o->compute = ch;
	vgpu_sched_kick(g);
	return 0;
}

/*
 * Unmap a channel's USERD page; before the driver frees it (directly, with
 * an ancestor, or as a dependant: vgpu_obj_unmap_closure), which tears the
 * mapping down (clientUnmapResourceRefMappings).  ch->userd is cleared
 * under tlock first, so the scheduler never reads a torn-down mapping.
 */
void vgpu_compute_unmap(struct vgpu_obj *o)
{
	if (o->type == VGPU_OBJ_CHANNEL && o->compute) {
		struct vgpu_chan *ch = o->compute;
		struct vgpu_gpu *g = ch->tsg->g;
		u64 cookie;

		mutex_lock(&g->tlock);
		cookie = ch->userd ? ch->cookie : 0;
		if (ch->userd) {
			ch->userd = NULL;
			g->nr_unmapped++;
		}
		mutex_unlock(&g->tlock);
		if (cookie)
			vgpu_userd_unmap(o->key.client, ch->hdevice, ch->handle,
					 cookie);
	}
}

/* o (a TSG or channel) is gone in the driver: stop tracking it; c->lock. */
void vgpu_compute_drop(struct vgpu_obj *o)
{
	struct vgpu_gpu *g;
	u64 cookie = 0;

	if (!o->compute)
		return;
	g = vgpu_obj_gpu(o);
	if (o->type == VGPU_OBJ_CHANNEL) {
		struct vgpu_chan *ch = o->compute;

		mutex_lock(&g->tlock);
		list_del(&ch->node);
		WRITE_ONCE(g->nr_channels, g->nr_channels - 1);
		if (ch->userd)
			cookie = ch->cookie;
		else
			g->nr_unmapped--;
		if (ch->owns_tsg)
			vgpu_tsg_del_locked(ch->tsg);
		mutex_unlock(&g->tlock);
		if (cookie)
			vgpu_userd_unmap(o->key.client, ch->hdevice, ch->handle,
					 cookie);
		if (ch->owns_tsg)
			kfree(ch->tsg);
		kfree(ch);
	} else {
		struct vgpu_tsg *t = o->compute;
		struct vgpu_chan *ch, *tmp;

		mutex_lock(&g->tlock);
		/* Children are dropped first (vgpu_obj_remove); be safe anyway. */
		list_for_each_entry_safe(ch, tmp, &t->chans, node)
			list_del_init(&ch->node);
		vgpu_tsg_del_locked(t);
		mutex_unlock(&g->tlock);
		kfree(t);
	}
	o->compute = NULL;
}

/**
 * vgpu_compute_user_schedule - the container's GPFIFO_SCHEDULE (0xA06C0101
 * on a TSG, 0xA06F0103 on a channel)
 *
 * An enable is recorded, and forwarded only as far as the slot allows: while
 * the slice is paused it is remembered (applied at resume) and answered
 * NV_OK.  A disable is refused.
 */
NV_STATUS vgpu_compute_user_schedule(struct vgpu_file *vf, NVOS54_PARAMETERS *p)
{
	NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS k = {};
	struct vgpu_client *c;
	struct vgpu_obj *o;
	struct vgpu_tsg *t = NULL;
	struct vgpu_gpu *g;
	bool tsg_cmd = p->cmd == NVA06C_CTRL_CMD_GPFIFO_SCHEDULE;
	u32 size = vgpu_ctrl_size(p->cmd, sizeof(k));
	NV_STATUS st;

	if (p->paramsSize != vgpu_rel_size(NVREL_CTL, p->cmd) ||
	    p->paramsSize != size)
		return NV_ERR_INVALID_PARAM_STRUCT;
	if (!p->params)
		return NV_ERR_INVALID_ARGUMENT;
	if (copy_from_user(&k, u64_to_user_ptr(p->params), size))
		return NV_ERR_INVALID_ARGUMENT;
	if (!k.bEnable)
		return NV_ERR_INSUFFICIENT_PERMISSIONS;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	mutex_lock(&c->lock);
	o = c->dead ? NULL : vgpu_obj_find(p->hClient, p->hObject);
	if (!o || !o->compute ||
	    o->type != (tsg_cmd ? VGPU_OBJ_TSG : VGPU_OBJ_CHANNEL)) {
		st = o ? NV_ERR_INVALID_OBJECT_HANDLE : NV_ERR_OBJECT_NOT_FOUND;
		goto out;
	}
	g = vgpu_obj_gpu(o);
	if (tsg_cmd) {
		t = o->compute;
	} else {
		struct vgpu_chan *ch = o->compute;

		if (ch->owns_tsg)
			t = ch->tsg;
	}
	if (!t) {
		/* A channel of a TSG: its own enable bit; the TSG gates it. */
		st = vgpu_rm_ctrl(p->hClient, p->hObject, p->cmd, &k, size);
		goto out;
	}
	mutex_lock(&g->tlock);
	t->user_enabled = true;
	st = vgpu_gpu_tsg_paused(g) ? NV_OK : vgpu_tsg_schedule(t, true);
	mutex_unlock(&g->tlock);
	vgpu_sched_kick(g);
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return st;
}

/*
 * Does the slice GPU want the GPU?  Queued work in a mapped USERD, a
 * trapped doorbell since the last decision, a writer still blocked, or
 * (channels without a USERD map) a doorbell within the last period.
 */
bool vgpu_compute_wants(struct vgpu_gpu *g, u64 now, u64 period_ns)
{
	struct vgpu_tsg *t;
	struct vgpu_chan *ch;
	bool wants = atomic_xchg(&g->rang, 0) || atomic_read(&g->waiters);

	mutex_lock(&g->tlock);
	if (!wants && g->nr_unmapped &&
	    now - READ_ONCE(g->last_ring_ns) < period_ns)
		wants = true;
	list_for_each_entry(t, &g->tsgs, node) {
		if (wants)
			break;
		list_for_each_entry(ch, &t->chans, node) {
			if (ch->userd &&
			    READ_ONCE(ch->userd[NVC36F_GPGET_OFFSET / 4]) !=
			    READ_ONCE(ch->userd[NVC36F_GPPUT_OFFSET / 4])) {
				wants = true;
				break;
			}
		}
	}
	mutex_unlock(&g->tlock);
	return wants;
}

/*
 * Off the GPU, in two halves so that a switch can put the next slice on
 * the runlist in between (no idle engine while the PREEMPT waits):
 * begin takes every TSG off the runlist; finish preempts each (disabling
 * does not evict a TSG that is on the engine) and write-protects the
 * doorbells.  paused is set first so that a doorbell write racing with
 * the zap already traps.  Returns whether finish has work to do.
 */
bool vgpu_compute_pause_begin(struct vgpu_gpu *g, u32 layers)
{
	struct vgpu_tsg *t;

	mutex_lock(&g->tlock);
	if (g->paused) {
		/*
		 * Already off.  A TSG the driver would not take off the
		 * runlist (a GPFIFO_SCHEDULE refused here before, or when it
		 * was added while paused) still runs outside the slice's
		 * share: the scheduler pauses every member it did not pick at
		 * each decision, so that is when it is tried again.
		 */
		if (g->paused_layers & VGPU_SCHED_L_TSG)
			list_for_each_entry(t, &g->tsgs, node)
				if (t->hw_enabled)
					vgpu_tsg_schedule(t, false);
		mutex_unlock(&g->tlock);
		return false;
	}
	WRITE_ONCE(g->paused_layers, layers);
	WRITE_ONCE(g->paused, true);
	if (layers & VGPU_SCHED_L_TSG)
		list_for_each_entry(t, &g->tsgs, node)
			if (t->hw_enabled)
				vgpu_tsg_schedule(t, false);
	mutex_unlock(&g->tlock);
	return true;
}

void vgpu_compute_pause_finish(struct vgpu_gpu *g, u32 layers)
{
	struct vgpu_tsg *t;

	if (layers & VGPU_SCHED_L_TSG) {
		mutex_lock(&g->tlock);
		/* Resumed meanwhile (a policy set to NONE): leave it running. */
		if (g->paused)
			list_for_each_entry(t, &g->tsgs, node)
				vgpu_tsg_preempt(t);
		mutex_unlock(&g->tlock);
	}
	if (layers & VGPU_SCHED_L_DOORBELL)
		vgpu_doorbell_protect(g);
}

void vgpu_compute_pause(struct vgpu_gpu *g, u32 layers)
{
	if (vgpu_compute_pause_begin(g, layers))
		vgpu_compute_pause_finish(g, layers);
}

/* Back on: the TSGs the container enabled, and the blocked writers. */
void vgpu_compute_resume(struct vgpu_gpu *g)
{
	struct vgpu_tsg *t;

	mutex_lock(&g->tlock);
	if (!g->paused) {
		mutex_unlock(&g->tlock);
		return;
	}
	if (g->paused_layers & VGPU_SCHED_L_TSG)
		list_for_each_entry(t, &g->tsgs, node)
			if (t->user_enabled)
				vgpu_tsg_schedule(t, true);
	WRITE_ONCE(g->paused, false);
	WRITE_ONCE(g->paused_layers, 0);
	atomic_inc(&g->run_gen);
	mutex_unlock(&g->tlock);
	/* (its barrier orders run_gen before the look at the queue) */
	if (wq_has_sleeper(&g->run_wq))
		wake_up_all(&g->run_wq);
}
