/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ctrl.h - the control table's types, shared by control.c and the files
 * that answer controls of their own concern (cuda.c).
 */
#ifndef NVSIM_CTRL_H
#define NVSIM_CTRL_H

#include "nvsim.h"

struct nvsim_ctrl_ctx {
	const struct nvsim_call *call;
	struct nvsim_object *obj;       /* valid under nvsim.lock only */
	void *params;
	u32 psize;                      /* the caller's paramsSize */
	u8 uuid[NV_UUID_LEN];           /* GID_INFO: the GPU's, under the lock */
	/* Snapshot for the unlocked step. */
	u64 fb_total;
	u64 fb_free;
	u64 phys_size;
	/* PREEMPT bWait: the TSG, pinned, and the request to wait for. */
	struct nvsim_tsg *tsg;
	u64 preempt_seq;
};

/**
 * struct nvsim_ctrl - one control
 * @cmd: the control command
 * @size: its parameter struct's size; paramsSize must match exactly
 * @types: NVSIM_BIT() mask of the object types it applies to
 * @locked: runs under nvsim.lock
 * @unlocked: optional, runs after the lock is dropped, for embedded pointers
 */
struct nvsim_ctrl {
	u32 cmd;
	u32 size;
	u32 types;
	NV_STATUS (*locked)(struct nvsim_ctrl_ctx *ctx);
	NV_STATUS (*unlocked)(struct nvsim_ctrl_ctx *ctx);
};

/* cuda.c: the controls CUDA's start-up asks beyond control.c's. */
const struct nvsim_ctrl *nvsim_cuda_ctrl_find(u32 cmd);
NV_STATUS nvsim_cuda_gpu_info_value(u32 index, u32 *data);

#endif /* NVSIM_CTRL_H */
