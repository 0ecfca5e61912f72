// SPDX-License-Identifier: GPL-2.0
/*
 * fifo.c - channel groups (TSGs) and channels.
 *
 * A TSG carries the scheduling state the controls in control.c set and read
 * back: whether it is on the runlist, its timeslice and interleave level.
 * Its ID is unique per GPU, as are channel IDs.  A channel allocated directly
 * under a device gets a TSG of its own that has no handle, as the real driver
 * makes one behind the caller's back.
 *
 * A new TSG is off the runlist (enabled 0) until GPFIFO_SCHEDULE enables it,
 * which is what CUDA does after allocating its channels.
 *
 * Each channel owns two zeroed pages, USERD and its GPFIFO ring (the ring
 * lives beside USERD because nvsim has no GPU VA space), which the engine
 * (engine.c) reads and writes.  Mappings take page references of their own,
 * so a channel can be freed while mapped.  Busy time is charged to the TSG
 * and to its client's process (struct nvsim_pid_busy), whose totals survive
 * the TSG until the process has no client left.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/log2.h>

#include "nvsim.h"

/* ------------------------------------------------------ per-process busy */

static struct nvsim_pid_busy *nvsim_pid_busy_get(pid_t tgid,
						 struct nvsim_gpu *gpu)
{
	struct nvsim_pid_busy *pb;

	lockdep_assert_held(&nvsim.lock);

	list_for_each_entry(pb, &nvsim.pid_busy, node)
		if (pb->tgid == tgid && pb->gpu == gpu->index)
			return pb;
	pb = kzalloc(sizeof(*pb), GFP_KERNEL_ACCOUNT);
	if (!pb)
		return NULL;
	pb->tgid = tgid;
	pb->gpu = gpu->index;
	list_add_tail(&pb->node, &nvsim.pid_busy);
	return pb;
}

/**
 * nvsim_pid_busy_release - a client is going: drop its process's busy lines
 *	if it was the process's last client
 * @client: the client being destroyed (its objects are already gone, so no
 *	TSG of the process can be left to charge the entries)
 */
void nvsim_pid_busy_release(struct nvsim_client *client)
{
	struct nvsim_pid_busy *pb, *tmp;
	struct nvsim_client *other;
	unsigned long idx;

	lockdep_assert_held(&nvsim.lock);

	xa_for_each(&nvsim.clients, idx, other)
		if (other != client && other->tgid == client->tgid)
			return;
	list_for_each_entry_safe(pb, tmp, &nvsim.pid_busy, node) {
		if (pb->tgid != client->tgid)
			continue;
		list_del(&pb->node);
		kfree(pb);
	}
}

/* ---------------------------------------------------------------- TSGs */

NV_STATUS nvsim_tsg_create(struct nvsim_gpu *gpu, struct nvsim_client *client,
			   NvHandle handle, struct nvsim_tsg **out)
{
	struct nvsim_tsg *tsg;
	NV_STATUS status;
	int id;

	lockdep_assert_held(&nvsim.lock);

	tsg = kzalloc(sizeof(*tsg), GFP_KERNEL_ACCOUNT);
	if (!tsg)
		return NV_ERR_NO_MEMORY;
	/* An entry made here and not used goes with the process's last client. */
	tsg->pidb = nvsim_pid_busy_get(client->tgid, gpu);
	if (!tsg->pidb) {
		status = NV_ERR_NO_MEMORY;
		goto err_free;
	}
	id = ida_alloc(&gpu->tsg_ida, GFP_KERNEL);
	if (id < 0) {
		status = NV_ERR_INSUFFICIENT_RESOURCES;
		goto err_free;
	}
	refcount_set(&tsg->refs, 1);
	tsg->gpu = gpu;
	tsg->id = id;
	tsg->hClient = client->handle;
	tsg->handle = handle;
	tsg->tgid = client->tgid;
	tsg->timeslice_us = NVSIM_TIMESLICE_DEFAULT_US;
	tsg->interleave = NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM;
	INIT_LIST_HEAD(&tsg->channels);
	list_add_tail(&tsg->gpu_node, &gpu->tsgs);
	nvsim_engine_add_tsg(tsg);
	*out = tsg;
	return NV_OK;

err_free:
	kfree(tsg);
	return status;
}

void nvsim_tsg_put(struct nvsim_tsg *tsg)
{
	if (refcount_dec_and_test(&tsg->refs))
		kfree(tsg);
}

/* The object goes; PREEMPT waiters may hold the memory a little longer. */
void nvsim_tsg_free(struct nvsim_tsg *tsg)
{
	lockdep_assert_held(&nvsim.lock);

	WARN_ON(tsg->nr_channels);
	nvsim_engine_remove_tsg(tsg);
	list_del(&tsg->gpu_node);
	ida_free(&tsg->gpu->tsg_ida, tsg->id);
	nvsim_tsg_put(tsg);
}

NV_STATUS nvsim_tsg_object_init(struct nvsim_object *obj, const void *params)
{
	/* The parameters (error notifiers, VA space, engine) are not used. */
	return nvsim_tsg_create(obj->gpu, obj->client, obj->handle,
				&obj->tsg.tsg);
}

/* ------------------------------------------------------------ channels */

/* 0 means the default; otherwise a power of two that fits the ring page. */
static NV_STATUS nvsim_gpfifo_entries(const NV_CHANNEL_ALLOC_PARAMS *p,
				      u32 *entries)
{
	u32 n = p ? p->gpFifoEntries : 0;

	if (!n)
		n = NVSIM_GPFIFO_ENTRIES_DEFAULT;
	if (n < NVSIM_GPFIFO_ENTRIES_MIN || n > NVSIM_GPFIFO_ENTRIES_MAX ||
	    !is_power_of_2(n))
		return NV_ERR_INVALID_ARGUMENT;
	*entries = n;
	return NV_OK;
}

static void nvsim_channel_free(struct nvsim_channel *ch)
{
	if (ch->ring)
		put_page(ch->ring);
	if (ch->userd)
		put_page(ch->userd);
	kfree(ch);
}

static NV_STATUS nvsim_channel_alloc(u32 entries, struct nvsim_channel **out)
{
	struct nvsim_channel *ch;

	BUILD_BUG_ON(NVSIM_GPFIFO_ENTRIES_MAX * sizeof(u64) > PAGE_SIZE);
	BUILD_BUG_ON(NVSIM_USERD_COMPLETIONS_OFFSET +
		     NVSIM_USERD_COMPLETIONS * 2 * sizeof(u64) > PAGE_SIZE);

	ch = kzalloc(sizeof(*ch), GFP_KERNEL_ACCOUNT);
	if (!ch)
		return NV_ERR_NO_MEMORY;
	INIT_LIST_HEAD(&ch->tsg_node);
	ch->entries = entries;
	ch->enabled = true;     /* per-channel schedule: on until turned off */
	ch->userd = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	ch->ring = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!ch->userd || !ch->ring) {
		nvsim_channel_free(ch);
		return NV_ERR_NO_MEMORY;
	}
	*out = ch;
	return NV_OK;
}

NV_STATUS nvsim_channel_object_init(struct nvsim_object *obj,
				    const void *params)
{
	struct nvsim_object *parent = obj->parent;
	struct nvsim_channel *ch;
	NV_STATUS status;
	u32 entries;
	int chid;

	status = nvsim_gpfifo_entries(params, &entries);
	if (status != NV_OK)
		return status;
	status = nvsim_channel_alloc(entries, &ch);
	if (status != NV_OK)
		return status;
	obj->channel.ch = ch;

	if (parent->type == NVSIM_OBJ_TSG) {
		obj->channel.tsg = parent->tsg.tsg;
	} else {
		status = nvsim_tsg_create(obj->gpu, obj->client, 0,
					  &obj->channel.tsg);
		if (status != NV_OK)
			return status;
		obj->channel.own_tsg = true;
		atomic_inc(&nvsim.nr_objects);
	}
	obj->channel.tsg->nr_channels++;
	ch->tsg = obj->channel.tsg;

	/* From 1: the doorbell word reads 0 when nobody rang. */
	chid = ida_alloc_range(&obj->gpu->chid_ida, 1, 0xffff, GFP_KERNEL);
	if (chid < 0)
		return NV_ERR_INSUFFICIENT_RESOURCES;
	obj->channel.chid = chid;
	ch->chid = chid;
	nvsim_engine_add_channel(ch);
	return NV_OK;
}

/* Undo nvsim_channel_object_init(), however far it got. */
void nvsim_channel_object_fini(struct nvsim_object *obj)
{
	struct nvsim_tsg *tsg = obj->channel.tsg;
	struct nvsim_channel *ch = obj->channel.ch;

	if (obj->channel.privileged)
		atomic_dec(&nvsim.nr_privileged_channels);

	/* The engine lets go of the channel before its pages can go. */
	if (obj->channel.chid != U32_MAX) {
		nvsim_engine_remove_channel(ch);
		ida_free(&obj->gpu->chid_ida, obj->channel.chid);
	}
	if (ch)
		nvsim_channel_free(ch);
	if (!tsg)
		return;
	tsg->nr_channels--;
	if (obj->channel.own_tsg) {
		nvsim_tsg_free(tsg);
		atomic_dec(&nvsim.nr_objects);
	}
}
