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
 * A channel made without hUserdMemory (nvsim's own kind, which the real
 * driver refuses) owns two zeroed pages, USERD and its GPFIFO ring (beside
 * USERD), which the timer engine (engine.c) reads and writes; one made
 * with it has its USERD in that memory and its ring at a GPU VA, run by
 * pbdma.c (nvsim_channel_pb_init).  Mappings take page references of their own,
 * so a channel can be freed while mapped.  Busy time is charged to the TSG
 * and to its client's process (struct nvsim_pid_busy), whose totals survive
 * the TSG until the process has no client left.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/log2.h>

#include "nvsim.h"
#include "ctrl.h"

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
	const NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS *p = params;
	NV_STATUS status;

	/* The engine is kept for its channels; error notifiers, VA space unused. */
	status = nvsim_tsg_create(obj->gpu, obj->client, obj->handle,
				  &obj->tsg.tsg);
	if (status == NV_OK && p) {
		obj->tsg.tsg->engine_type = p->engineType;
		/* The VA space of its legacy context shares (nvsim_channel_pb_init). */
		obj->tsg.hvaspace = p->hVASpace;
	}
	return status;
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

/*
 * USERD and the ring in client memory, as the real driver requires ("Client
 * must allocate USERD", kernel_channel.c, kchannelConstruct_IMPL):
 * hUserdMemory[0] names a memory object of the client (not found, or not
 * memory: NV_ERR_OBJECT_NOT_FOUND) holding the 512-byte USERD at
 * userdOffset[0] (beyond the object: NV_ERR_INVALID_ARGUMENT, the
 * sub-memdesc failing), as kchannelCreateUserdMemDesc_GV100
 * (arch/volta/kernel_channel_gv100.c) takes it; the ring is gpFifoEntries
 * entries at the GPU VA gpFifoOffset of the channel's VA space (the
 * context share's), read by the engine (pbdma.c).  gpFifoEntries: a power
 * of two up to 64K (chosen bound; RM programs log2 of it into the PBDMA).
 */
#define NVSIM_USERD_SIZE                512     /* kfifoGetUserdSizeAlign */
#define NVSIM_PB_GPFIFO_ENTRIES_MAX     0x10000
#define NVSIM_CHANNEL_HUSERD_OFF        32      /* hUserdMemory[0] */
#define NVSIM_CHANNEL_USERD_OFF_OFF     64      /* userdOffset[0] */

static NvHandle nvsim_channel_huserd(const NV_CHANNEL_ALLOC_PARAMS *p)
{
	return p ? *(const NvHandle *)((const u8 *)p + NVSIM_CHANNEL_HUSERD_OFF) : 0;
}

static NV_STATUS nvsim_channel_pb_init(struct nvsim_object *obj,
				       struct nvsim_channel *ch,
				       const NV_CHANNEL_ALLOC_PARAMS *p)
{
	u64 uoff = *(const u64 *)((const u8 *)p + NVSIM_CHANNEL_USERD_OFF_OFF);
	struct nvsim_object *umem, *cs;
	u32 n = p->gpFifoEntries;
	u64 end;

	if (n < NVSIM_GPFIFO_ENTRIES_MIN || n > NVSIM_PB_GPFIFO_ENTRIES_MAX ||
	    !is_power_of_2(n))
		return NV_ERR_INVALID_ARGUMENT;
	umem = nvsim_object_find(obj->client, nvsim_channel_huserd(p));
	if (!umem || umem->type != NVSIM_OBJ_MEMORY || !umem->memory.mem ||
	    umem->hclass == NV01_MEMORY_VIRTUAL ||
	    umem->hclass == NV50_MEMORY_VIRTUAL)
		return NV_ERR_OBJECT_NOT_FOUND;
	if (check_add_overflow(uoff, (u64)NVSIM_USERD_SIZE, &end) ||
	    end > umem->memory.mem->size)
		return NV_ERR_INVALID_ARGUMENT;
	ch->pb = true;
	ch->entries = n;
	ch->gpfifo_va = p->gpFifoOffset;
	ch->userd_mem = umem->memory.mem;
	nvsim_mem_get(ch->userd_mem);
	ch->userd_off = uoff;
	/*
	 * The VA space it runs in (0: none known, every GPU VA faults), as
	 * kchannelConstruct_IMPL (kernel_channel.c, 535.261.03) takes
	 * pKernelChannel->pVAS from its context share:
	 *  - hContextShare given: that context share's (its hVASpace);
	 *  - none, in a TSG: the TSG's legacy context share, which RM makes in
	 *    kchangrpapiSetLegacyMode (kernel_channel_group_api.c) and which
	 *    takes the TSG's VA space (kctxshareapiConstruct_IMPL,
	 *    kernel_ctxshare.c: "we use the parent TSG's pVAS rather than the
	 *    hVASpace param"), i.e. the TSG's hVASpace.  libcuda 535 makes
	 *    its TSGs on the VA space UVM registered and their channels
	 *    without a context share;
	 *  - none, on a device: the TSG RM makes for the channel, on the
	 *    channel's hVASpace (tsgParams.hVASpace, kchannelConstruct_IMPL).
	 * A handle of 0 is the device's default VA space there
	 * (vaspaceGetByHandleOrDeviceDefault), which nvsim's engine has no
	 * mappings for (simplified: UVM registers a VA space by handle).
	 */
	if (p->hContextShare) {
		cs = nvsim_object_find(obj->client, p->hContextShare);
		if (cs && cs->type == NVSIM_OBJ_CTXSHARE)
			ch->vas_handle = cs->ctxshare.hvaspace;
	} else if (obj->parent->type == NVSIM_OBJ_TSG) {
		ch->vas_handle = obj->parent->tsg.hvaspace;
	} else {
		ch->vas_handle = p->hVASpace;
	}
	if (ch->vas_handle)
		ch->vas_client = obj->client->handle;
	return NV_OK;
}

static void nvsim_channel_free(struct nvsim_channel *ch)
{
	if (ch->userd_mem)
		nvsim_mem_put(ch->userd_mem);
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

	/* A client-memory ring may be larger than the page of the old kind. */
	status = nvsim_channel_huserd(params) ? NV_OK :
		 nvsim_gpfifo_entries(params, &entries);
	if (status != NV_OK)
		return status;
	status = nvsim_channel_alloc(NVSIM_GPFIFO_ENTRIES_DEFAULT, &ch);
	if (status != NV_OK)
		return status;
	obj->channel.ch = ch;
	if (nvsim_channel_huserd(params))
		status = nvsim_channel_pb_init(obj, ch, params);
	else
		ch->entries = entries;
	if (status != NV_OK)
		return status;

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

	/* Its kernel mappings go before the channel (nvsim_kmaps_drop_channel). */
	if (ch)
		nvsim_kmaps_drop_channel(ch);
	/* The engine lets go of the channel before its pages can go. */
	if (obj->channel.chid != U32_MAX) {
		nvsim_engine_remove_channel(ch);
		ida_free(&obj->gpu->chid_ida, obj->channel.chid);
	}
	if (ch)
		nvsim_channel_free(ch);
	obj->channel.ch = NULL;
	obj->channel.tsg = NULL;
	if (!tsg)
		return;
	tsg->nr_channels--;
	if (obj->channel.own_tsg) {
		nvsim_tsg_free(tsg);
		atomic_dec(&nvsim.nr_objects);
	}
}

/* ------------------------------------------------------------- controls */

/* ctrl/ctrl0080/ctrl0080fifo.h (535.261.03 and 595.45.04 alike) */
#define NVSIM_NV0080_CTRL_CMD_FIFO_GET_CHANNELLIST      0x0080170dU
#define NVSIM_NV0080_CTRL_FIFO_GET_CHANNELLIST_INVALID_CHANNEL 0xffffffffU

typedef struct {
	NvU32 numChannels;
	NvP64 pChannelHandleList NV_ALIGN8;
	NvP64 pChannelList NV_ALIGN8;
} NVSIM_NV0080_CTRL_FIFO_GET_CHANNELLIST_PARAMS;

/*
 * NV0080_CTRL_CMD_FIFO_GET_CHANNELLIST: deviceCtrlCmdFifoGetChannelList_IMPL
 * (src/kernel/gpu/fifo/kernel_fifo_ctrl.c).  Both lists are numChannels
 * NvU32s the driver copies in first (rmapi/embedded_param_copy.c: the
 * handle list SKIP_COPYOUT, the channel list copied back); no channels is
 * NV_ERR_INVALID_ARGUMENT; each handle is looked up in the caller's client
 * (CliGetKernelChannel, kernel_channel.c: any channel of the client, the
 * device not compared) and its ChID written, or _INVALID_CHANNEL where the
 * handle names no channel.  libcuda asks it for each channel it makes at
 * cuCtxCreate (CUDA_ERROR_NOT_SUPPORTED without it).
 */
static NV_STATUS nvsim_ctrl_fifo_channellist(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV0080_CTRL_FIFO_GET_CHANNELLIST_PARAMS *p = ctx->params;
	size_t bytes, bytes2;
	NV_STATUS status;
	u32 *handles, *chids, i;

	status = nvsim_embedded_bytes(ctx, p->pChannelHandleList, p->numChannels,
				      sizeof(u32), &bytes);
	if (status == NV_OK)
		status = nvsim_embedded_bytes(ctx, p->pChannelList, p->numChannels,
					      sizeof(u32), &bytes2);
	if (status != NV_OK)
		return status;
	if (!p->numChannels)
		return NV_ERR_INVALID_ARGUMENT;
	handles = kvmalloc(bytes, GFP_KERNEL_ACCOUNT);
	chids = kvmalloc(bytes, GFP_KERNEL_ACCOUNT);
	status = NV_ERR_NO_MEMORY;
	if (!handles || !chids)
		goto out;
	status = nvsim_list_in(ctx, handles, p->pChannelHandleList, bytes);
	if (status == NV_OK)
		status = nvsim_list_in(ctx, chids, p->pChannelList, bytes);
	if (status != NV_OK)
		goto out;
	for (i = 0; i < p->numChannels; i++) {
		struct nvsim_object *ch = nvsim_object_ref(ctx->obj->client, handles[i]);

		/* An invalidated channel has no resource left: not a channel. */
		chids[i] = ch && ch->type == NVSIM_OBJ_CHANNEL && !ch->invalidated ?
			   ch->channel.chid :
			   NVSIM_NV0080_CTRL_FIFO_GET_CHANNELLIST_INVALID_CHANNEL;
	}
	status = nvsim_list_out(ctx, p->pChannelList, chids, bytes);
out:
	kvfree(chids);
	kvfree(handles);
	return status;
}

/* ctrl/ctrl906f.h, ctrla06f.h, ctrlc36f.h: one struct, one function */
#define NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID    0x906f0101U
#define NVSIM_NVA06F_CTRL_GET_CLASS_ENGINEID    0xa06f0101U
#define NVSIM_NVC36F_CTRL_GET_CLASS_ENGINEID    0xc36f0101U

typedef struct {
	NvHandle hObject;
	NvU32 classEngineID;
	NvU32 classID;
	NvU32 engineID;
} NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID_PARAMS;

/*
 * NV906F/NVA06F/NVC36F_CTRL_GET_CLASS_ENGINEID, all three exported on every
 * channel class by kchannelCtrlCmdGetClassEngineid_IMPL (src/kernel/gpu/
 * fifo/kernel_channel.c): hObject 0 NV_ERR_OBJECT_NOT_FOUND; the object
 * must be a child of this channel that is a ChannelDescendant (kchannel
 * FindChildByHandle: NV_ERR_OBJECT_NOT_FOUND otherwise), i.e. an engine
 * object (compute, copy, ...).  kchannelGetClassEngineID_GM107
 * (arch/maxwell/kernel_channel_gm107.c): classID its class, classEngineID
 * the class in NV906F_SET_OBJECT_NVCLASS (bits 15:0), engineID the
 * NV2080 engine it runs on: the channel's GR engine for a GR class, the
 * channel's copy engine for a copy class, and for a copy class on a GR
 * channel its GRCE, nvsim's copy engine 0 (objects.c, nvsim_engine_ctor).
 * libcuda asks it for the compute object of each channel at cuCtxCreate.
 */
static NV_STATUS nvsim_ctrl_class_engineid(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID_PARAMS *p = ctx->params;
	struct nvsim_object *ch = ctx->obj, *o;
	u32 t = ch->channel.engine_type;

	if (!p->hObject)
		return NV_ERR_OBJECT_NOT_FOUND;
	o = nvsim_object_ref(ch->client, p->hObject);
	if (!o || o->parent != ch || o->type != NVSIM_OBJ_ENGINE || o->invalidated)
		return NV_ERR_OBJECT_NOT_FOUND;
	p->classID = o->hclass;
	p->classEngineID = o->hclass & 0xffff;
	if (nvsim_arch_class_engine(o->hclass) == NVSIM_ENG_CE &&
	    t >= NV2080_ENGINE_TYPE_GR0 && t <= NV2080_ENGINE_TYPE_GR7)
		p->engineID = NV2080_ENGINE_TYPE_COPY0;
	else
		p->engineID = t;
	return NV_OK;
}

#define CHANNEL NVSIM_BIT(NVSIM_OBJ_CHANNEL)

static const struct nvsim_ctrl nvsim_fifo[] = {
	{ NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID,
	  sizeof(NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID_PARAMS),
	  CHANNEL, nvsim_ctrl_class_engineid, NULL },
	{ NVSIM_NVA06F_CTRL_GET_CLASS_ENGINEID,
	  sizeof(NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID_PARAMS),
	  CHANNEL, nvsim_ctrl_class_engineid, NULL },
	{ NVSIM_NVC36F_CTRL_GET_CLASS_ENGINEID,
	  sizeof(NVSIM_NV906F_CTRL_GET_CLASS_ENGINEID_PARAMS),
	  CHANNEL, nvsim_ctrl_class_engineid, NULL },
	{ NVSIM_NV0080_CTRL_CMD_FIFO_GET_CHANNELLIST,
	  sizeof(NVSIM_NV0080_CTRL_FIFO_GET_CHANNELLIST_PARAMS),
	  DEVICE, nvsim_ctrl_fifo_channellist, NULL },
};

const struct nvsim_ctrl_table nvsim_fifo_ctrls = {
	nvsim_fifo, ARRAY_SIZE(nvsim_fifo)
};
