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
 */
#include <linux/slab.h>

#include "nvsim.h"

NV_STATUS nvsim_tsg_create(struct nvsim_gpu *gpu, NvHandle hClient,
			   NvHandle handle, struct nvsim_tsg **out)
{
	struct nvsim_tsg *tsg;
	int id;

	lockdep_assert_held(&nvsim.lock);

	tsg = kzalloc(sizeof(*tsg), GFP_KERNEL_ACCOUNT);
	if (!tsg)
		return NV_ERR_NO_MEMORY;
	id = ida_alloc(&gpu->tsg_ida, GFP_KERNEL);
	if (id < 0) {
		kfree(tsg);
		return NV_ERR_INSUFFICIENT_RESOURCES;
	}
	tsg->gpu = gpu;
	tsg->id = id;
	tsg->hClient = hClient;
	tsg->handle = handle;
	tsg->timeslice_us = NVSIM_TIMESLICE_DEFAULT_US;
	tsg->interleave = NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM;
	list_add_tail(&tsg->gpu_node, &gpu->tsgs);
	*out = tsg;
	return NV_OK;
}

void nvsim_tsg_free(struct nvsim_tsg *tsg)
{
	lockdep_assert_held(&nvsim.lock);

	WARN_ON(tsg->nr_channels);
	list_del(&tsg->gpu_node);
	ida_free(&tsg->gpu->tsg_ida, tsg->id);
	kfree(tsg);
}

NV_STATUS nvsim_tsg_object_init(struct nvsim_object *obj, const void *params)
{
	/* The parameters (error notifiers, VA space, engine) are not used. */
	return nvsim_tsg_create(obj->gpu, obj->client->handle, obj->handle,
				&obj->tsg.tsg);
}

NV_STATUS nvsim_channel_object_init(struct nvsim_object *obj,
				    const void *params)
{
	struct nvsim_object *parent = obj->parent;
	NV_STATUS status;
	int chid;

	if (parent->type == NVSIM_OBJ_TSG) {
		obj->channel.tsg = parent->tsg.tsg;
	} else {
		status = nvsim_tsg_create(obj->gpu, obj->client->handle, 0,
					  &obj->channel.tsg);
		if (status != NV_OK)
			return status;
		obj->channel.own_tsg = true;
		atomic_inc(&nvsim.nr_objects);
	}
	obj->channel.tsg->nr_channels++;

	chid = ida_alloc(&obj->gpu->chid_ida, GFP_KERNEL);
	if (chid < 0)
		return NV_ERR_INSUFFICIENT_RESOURCES;
	obj->channel.chid = chid;
	return NV_OK;
}

/* Undo nvsim_channel_object_init(), however far it got. */
void nvsim_channel_object_fini(struct nvsim_object *obj)
{
	struct nvsim_tsg *tsg = obj->channel.tsg;

	if (obj->channel.chid != U32_MAX)
		ida_free(&obj->gpu->chid_ida, obj->channel.chid);
	if (!tsg)
		return;
	tsg->nr_channels--;
	if (obj->channel.own_tsg) {
		nvsim_tsg_free(tsg);
		atomic_dec(&nvsim.nr_objects);
	}
}
