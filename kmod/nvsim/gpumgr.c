// SPDX-License-Identifier: GPL-2.0
/*
 * gpumgr.c - NV0000 (client) controls of the GPU manager that NVML asks
 * before it opens a GPU: where a probed GPU sits on PCI and whether it is
 * being drained.  The real driver answers them from its table of probed
 * GPUs (gpu_mgr.c, pGpuMgr->probedGpus, filled by gpumgrRegisterGpuId at
 * probe); nvsim's probed GPUs are its GPUs, at the PCI location the card
 * info (rm.c, NV_ESC_CARD_INFO) gives them: domain 0, bus gpu->bus,
 * slot 0.
 *
 * Layouts: 535.261.03's ctrl0000gpu.h (the same in 595.45.04).
 */
#include "ctrl.h"

/* ctrl0000gpu.h: NV0000_CTRL_GPU_GET_PCI_INFO_PARAMS */
struct nvsim_gpu_pci_info {
	u32 gpuId;
	u32 domain;
	u16 bus;
	u16 slot;
};

/* ctrl0000gpu.h: NV0000_CTRL_GPU_QUERY_DRAIN_STATE_PARAMS */
struct nvsim_gpu_drain_state {
	u32 gpuId;
	u32 drainState;
	u32 flags;
};

#define NVSIM_DRAIN_STATE_DISABLED 0    /* NV0000_CTRL_GPU_DRAIN_STATE_DISABLED */

/*
 * client_resource.c, cliresCtrlCmdGpuGetPciInfo: the probed GPU's
 * domain/bus/device from gpumgrGetProbedGpuDomainBusDevice, which answers
 * an id no probed GPU has NV_ERR_OBJECT_NOT_FOUND (gpu_mgr.c: "nvml wants
 * to be able to tell this case apart").
 */
static NV_STATUS nvsim_ctrl_pci_info(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_gpu_pci_info *p = ctx->params;
	struct nvsim_gpu *gpu = nvsim_gpu_by_id(p->gpuId);

	if (!gpu)
		return NV_ERR_OBJECT_NOT_FOUND;
	p->domain = 0;
	p->bus = gpu->bus;
	p->slot = 0;
	return NV_OK;
}

/*
 * client_resource.c, cliresCtrlCmdGpuQueryGpuDrainState, and gpu_mgr.c,
 * gpumgrQueryGpuDrainState: the probed GPU's bDrainState and bRemoveIdle,
 * NV_ERR_OBJECT_NOT_FOUND for an id no probed GPU has.  Nothing drains an
 * nvsim GPU (MODIFY_DRAIN_STATE, which needs privilege, is not answered),
 * so both are false.
 */
static NV_STATUS nvsim_ctrl_drain_state(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_gpu_drain_state *p = ctx->params;

	if (!nvsim_gpu_by_id(p->gpuId))
		return NV_ERR_OBJECT_NOT_FOUND;
	p->drainState = NVSIM_DRAIN_STATE_DISABLED;
	p->flags = 0;
	return NV_OK;
}

static const struct nvsim_ctrl nvsim_gpumgr[] = {
	{ NV0000_CTRL_CMD_GPU_GET_PCI_INFO, sizeof(struct nvsim_gpu_pci_info),
	  CLIENT, nvsim_ctrl_pci_info, NULL },
	{ NV0000_CTRL_CMD_GPU_QUERY_DRAIN_STATE,
	  sizeof(struct nvsim_gpu_drain_state),
	  CLIENT, nvsim_ctrl_drain_state, NULL },
};

const struct nvsim_ctrl_table nvsim_gpumgr_ctrls = {
	nvsim_gpumgr, ARRAY_SIZE(nvsim_gpumgr)
};
