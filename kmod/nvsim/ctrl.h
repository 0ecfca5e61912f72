/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ctrl.h - the control table's types, shared by control.c and the files
 * that answer one RM concern's controls each (gpumgr.c: NV0000's GPU
 * manager; monitor.c: the NV2080 figures NVML reads; cuda.c: what CUDA's
 * start-up asks beyond them).  control.c looks a command up in its own
 * table first, then in theirs (nvsim_ctrl_find_more, nvsim_cuda_ctrl_find).
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

#define CLIENT      NVSIM_BIT(NVSIM_OBJ_CLIENT)
#define DEVICE      NVSIM_BIT(NVSIM_OBJ_DEVICE)
#define SUBDEVICE   NVSIM_BIT(NVSIM_OBJ_SUBDEVICE)

struct nvsim_ctrl_table {
	const struct nvsim_ctrl *ctrls;
	size_t n;
};

NV_STATUS nvsim_gpu_info_more(u32 index, u32 *data);
void nvsim_pid_add(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p, u32 pid);
void nvsim_pid_add_client(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p,
			  const struct nvsim_client *client);
NV_STATUS nvsim_get_pids_of_class(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p,
				  struct nvsim_gpu *gpu);

extern const struct nvsim_ctrl_table nvsim_gpumgr_ctrls;
extern const struct nvsim_ctrl_table nvsim_monitor_ctrls;
extern const struct nvsim_ctrl_table nvsim_peer_ctrls;         /* peer.c */
extern const struct nvsim_ctrl_table nvsim_fifo_ctrls;

/* control.c: an embedded list's bytes, copied in and back (its rules). */
NV_STATUS nvsim_embedded_bytes(struct nvsim_ctrl_ctx *ctx, u64 ptr,
			       u32 count, u32 elem, size_t *bytes);
NV_STATUS nvsim_list_in(struct nvsim_ctrl_ctx *ctx, void *dst, u64 ptr,
			size_t bytes);
NV_STATUS nvsim_list_out(struct nvsim_ctrl_ctx *ctx, u64 ptr,
			 const void *src, size_t bytes);

/* A control of the per-concern tables, or NULL. */
static inline const struct nvsim_ctrl *nvsim_ctrl_find_more(u32 cmd)
{
	const struct nvsim_ctrl_table *t[] = {
		&nvsim_gpumgr_ctrls, &nvsim_monitor_ctrls, &nvsim_peer_ctrls,
		&nvsim_fifo_ctrls,
	};
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(t); i++)
		for (j = 0; j < t[i]->n; j++)
			if (t[i]->ctrls[j].cmd == cmd)
				return &t[i]->ctrls[j];
	return NULL;
}
/* cuda.c: the controls CUDA's start-up asks beyond control.c's. */
const struct nvsim_ctrl *nvsim_cuda_ctrl_find(u32 cmd);
NV_STATUS nvsim_cuda_gpu_info_value(u32 index, u32 *data);

#endif /* NVSIM_CTRL_H */
