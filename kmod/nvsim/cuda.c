// SPDX-License-Identifier: GPL-2.0
/*
 * cuda.c - what NVIDIA's CUDA driver library (libcuda.so, 535.261.03) asks
 * at cuInit and after, beyond what tinygrad's start-up already needed:
 * classes, controls and UVM commands, each modelled on the function of the
 * 535.261.03 tree (/work/vendor-src/535.261.03, paths under src/nvidia/
 * unless said otherwise) that the comment names.  objects.c, control.c
 * and uvm.c dispatch here (nvsim_cuda_class_find, nvsim_cuda_ctrl_find and
 * their UVM table's entries).
 */
#include <linux/kernel.h>
#include <linux/string.h>

#include "nvsim.h"
#include "classes.h"
#include "ctrl.h"

/* ------------------------------------------------ confidential compute */

/* class/clcb33.h (535.261.03) */
#define NVSIM_NV_CONFIDENTIAL_COMPUTE                   0xcb33U
#define NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_CAPABILITIES 0xcb330101U
#define NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_GPUS_STATE   0xcb330104U

typedef struct {
	NvHandle hClient;
} NVSIM_NV_CONFIDENTIAL_COMPUTE_ALLOC_PARAMS;

/* ctrl/ctrlcb33.h: 535's has devToolsMode (5 bytes), 550 on more. */
typedef struct {
	NvU8 cpuCapability;
	NvU8 gpusCapability;
	NvU8 environment;
	NvU8 ccFeature;
	NvU8 devToolsMode;
	NvU8 multiGpuMode;      /* 550 and later */
} NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_CAPABILITIES_PARAMS;

typedef struct {
	NvBool bAcceptClientRequest;
} NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_GPUS_STATE_PARAMS;

/*
 * NV_CONFIDENTIAL_COMPUTE under a client (resource_list.h: parent
 * RmClientResource, RS_OPTIONAL params, non-privileged): bookkeeping, as
 * confComputeApiConstruct_IMPL
 * (src/kernel/gpu/conf_compute/conf_compute_api.c) only points the object
 * at the system's CC capabilities and returns NV_OK.
 */
static NV_STATUS nvsim_cc_ctor(const struct nvsim_call *call,
			       const struct nvsim_class_desc *cls,
			       struct nvsim_client *client,
			       struct nvsim_object *parent,
			       NvHandle *handle, u32 hclass, void *params)
{
	struct nvsim_object *obj;

	return nvsim_object_new(call, client, parent, handle, hclass,
				NVSIM_OBJ_CONF_COMPUTE, &obj);
}

static const struct nvsim_class_desc nvsim_cuda_classes[] = {
	{ NVSIM_NV_CONFIDENTIAL_COMPUTE,
	  sizeof(NVSIM_NV_CONFIDENTIAL_COMPUTE_ALLOC_PARAMS), true,
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_cc_ctor },
};

const struct nvsim_class_desc *nvsim_cuda_class_find(u32 hclass)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_cuda_classes); i++)
		if (nvsim_cuda_classes[i].hclass == hclass)
			return &nvsim_cuda_classes[i];
	return NULL;
}

/*
 * confComputeApiCtrlCmdSystemGetCapabilities_IMPL (conf_compute_api.c):
 * no CC in the OS (cpuCapability NONE), and the GPU manager's ccCaps
 * (gpumgrSetGpuCapsConfComputeFeature...: gpu_mgr.c) of GPUs without the
 * CC feature: gpusCapability NONE, environment UNAVAILABLE, ccFeature and
 * devToolsMode DISABLED, all zero.  A real H100 with
 * PDB_PROP_GPU_CC_FEATURE_CAPABLE says gpusCapability HCC (README).
 */
static NV_STATUS nvsim_ctrl_cc_caps(struct nvsim_ctrl_ctx *ctx)
{
	memset(ctx->params, 0, ctx->psize);
	return NV_OK;
}

/*
 * confComputeApiCtrlCmdSystemGetGpusState_IMPL: bAcceptClientRequest is
 * the ccCaps flag, which only the CC path's gpumgr code sets: NV_FALSE on
 * a system without CC.
 */
static NV_STATUS nvsim_ctrl_cc_gpus_state(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_GPUS_STATE_PARAMS *p = ctx->params;

	p->bAcceptClientRequest = 0;
	return NV_OK;
}

/* ----------------------------------------------------- GPU boost groups */

/* ctrl/ctrl0000/ctrl0000syncgpuboost.h */
#define NVSIM_NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO 0xa04U
#define NVSIM_NV0000_SYNC_GPU_BOOST_MAX_GROUPS          0x10

typedef struct {
	NvU32 gpuCount;
	NvU32 gpuIds[32];               /* NV_MAX_DEVICES */
	NvU32 boostGroupId;
	NvBool bBridgeless;
} NVSIM_NV0000_SYNC_GPU_BOOST_GROUP_CONFIG;

typedef struct {
	NvU32 groupCount;
	NVSIM_NV0000_SYNC_GPU_BOOST_GROUP_CONFIG
		pBoostGroups[NVSIM_NV0000_SYNC_GPU_BOOST_MAX_GROUPS];
} NVSIM_NV0000_SYNC_GPU_BOOST_GROUP_INFO_PARAMS;

/*
 * NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO: cliresCtrlCmdSyncGpuBoostGroup
 * Info_IMPL (src/kernel/rmapi/client_resource.c) calls
 * gpuboostmgrQueryGroups_IMPL (src/kernel/power/gpu_boost_mgr.c), which
 * copies out each valid group and sets groupCount.  nvsim's GPUs are in
 * no group (groups are made only by the root-only BOOST_GROUP_CREATE,
 * which nvsim does not answer): groupCount 0, the rest of the caller's
 * parameters as they came.
 */
static NV_STATUS nvsim_ctrl_boost_group_info(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV0000_SYNC_GPU_BOOST_GROUP_INFO_PARAMS *p = ctx->params;

	p->groupCount = 0;
	return NV_OK;
}

/* ------------------------------------------------------------ host caps */

/* ctrl/ctrl0080/ctrl0080host.h */
#define NVSIM_NV0080_CTRL_CMD_HOST_GET_CAPS_V2  0x801402U
#define NVSIM_NV0080_CTRL_HOST_CAPS_TBL_SIZE    3
#define NVSIM_HOST_CAPS_GPU_COHERENT_MAPPING    0x04    /* byte 0 */

/*
 * NV0080_CTRL_CMD_HOST_GET_CAPS_V2: deviceCtrlCmdHostGetCapsV2_IMPL
 * (src/kernel/gpu/bus/kern_bus_ctrl.c, _kbusGetHostCaps) fills the table
 * from kbusGetDeviceCaps_IMPL (src/kernel/gpu/bus/kern_bus.c): on x86
 * with an I/O-coherent chipset and no NVIDIA host bridge the only cap is
 * GPU_COHERENT_MAPPING_SUPPORTED ("the RM always supports GPU-coherent
 * mappings").
 */
static NV_STATUS nvsim_ctrl_host_caps_v2(struct nvsim_ctrl_ctx *ctx)
{
	u8 *caps = ctx->params;

	memset(caps, 0, NVSIM_NV0080_CTRL_HOST_CAPS_TBL_SIZE);
	caps[0] = NVSIM_HOST_CAPS_GPU_COHERENT_MAPPING;
	return NV_OK;
}

/* ------------------------------------------------------------ class list */

/* ctrl/ctrl0080/ctrl0080gpu.h */
#define NVSIM_NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2      0x800292U
#define NVSIM_NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE        160

typedef struct {
	NvU32 numClasses;
	NvU32 classList[NVSIM_NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE];
} NVSIM_NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS;

/* ctrl/ctrl0080/ctrl0080gpu.h */
#define NVSIM_NV0080_CTRL_CMD_GPU_GET_VIRTUALIZATION_MODE       0x800289U

/* ------------------------------------------------------------- GPU info */

/* ctrl/ctrl2080/ctrl2080gpu.h (535.261.03) */
#define NVSIM_GPU_INFO_INDEX_0x11                       0x11    /* not in the headers */
#define NVSIM_GPU_INFO_INDEX_IBMNPU_RELAXED_ORDERING    0x26
#define NVSIM_GPU_INFO_INDEX_GLOBAL_POISON_FUSE_ENABLED 0x27
#define NVSIM_GPU_INFO_INDEX_GPU_FLA_CAPABILITY         0x2d
#define NVSIM_GPU_INFO_INDEX_GPU_SELF_HOSTED_CAPABILITY 0x3b
#define NVSIM_GPU_INFO_IBMNPU_RELAXED_ORDERING_UNSUPPORTED 0xffffffffU

/**
 * nvsim_cuda_gpu_info_value - the GPU info items CUDA's cuInit asks that
 * control.c's nvsim_gpu_info_value does not answer, as getGpuInfos
 * (src/kernel/gpu/subdevice/subdevice_ctrl_gpu_kernel.c) answers them on
 * x86 for a PCIe board.  Anything else: data 0, NV_ERR_INVALID_ARGUMENT
 * (its default case on a GPU that is not a GSP client).
 */
NV_STATUS nvsim_cuda_gpu_info_value(u32 index, u32 *data)
{
	*data = 0;
	switch (index) {
	case NVSIM_GPU_INFO_INDEX_0x11:
		/*
		 * Defined in no header of 535.261.03 or 595.45.04; cuInit asks
		 * it first.  getGpuInfos's default case forwards it to GSP on
		 * a GSP client (GH100 always is one), whose answer is not in
		 * the open source; that cuInit succeeds on a real H100 says it
		 * is NV_OK.  nvsim answers 0 (a guess at the data; README).
		 */
		return NV_OK;
	case NVSIM_GPU_INFO_INDEX_IBMNPU_RELAXED_ORDERING:
		/* osGetIbmnpuRelaxedOrderingMode: NV_ERR_NOT_SUPPORTED off PPC64LE. */
		*data = NVSIM_GPU_INFO_IBMNPU_RELAXED_ORDERING_UNSUPPORTED;
		return NV_OK;
	case NVSIM_GPU_INFO_INDEX_GLOBAL_POISON_FUSE_ENABLED:
		/* gpuIsGlobalPoisonFuseEnabled: nvsim has no fuses: _NO. */
	case NVSIM_GPU_INFO_INDEX_GPU_FLA_CAPABILITY:
		/* kbusIsFlaSupported: nvsim has no fabric VA (no NVLink): _NO. */
	case NVSIM_GPU_INFO_INDEX_GPU_SELF_HOSTED_CAPABILITY:
		/* gpuIsSelfHosted and a C2C link: a PCIe board: _NO. */
		return NV_OK;
	case NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY:
		/*
		 * osDmabufIsSupported() (os_dma_buf_enabled: a kernel with
		 * CONFIG_DMA_SHARED_BUFFER), no APM, not PPC64LE: _YES, which
		 * is also the driver's nv->dma_buf_supported (osinit.c) that
		 * NV_ESC_EXPORT_TO_DMABUF_FD needs (dmabuf.c).
		 */
		*data = NV2080_CTRL_GPU_INFO_INDEX_DMABUF_CAPABILITY_YES;
		return NV_OK;
	default:
		return NV_ERR_INVALID_ARGUMENT;
	}
}

/* ctrl/ctrl2080/ctrl2080mc.h */
#define NVSIM_NV2080_CTRL_CMD_MC_GET_ARCH_INFO  0x20801701U

typedef struct {
	NvU32 architecture;
	NvU32 implementation;
	NvU32 revision;
	NvU8 subRevision;
} NVSIM_NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS;

/* ------------------------------------------------------------- bus info */

/* ctrl/ctrl2080/ctrl2080bus.h */
#define NVSIM_NV2080_CTRL_CMD_BUS_GET_INFO_V2   0x20801823U
#define NVSIM_NV2080_CTRL_BUS_INFO_MAX_LIST_SIZE 0x34

typedef struct {
	NvU32 index;
	NvU32 data;
} NVSIM_NV2080_CTRL_BUS_INFO;

typedef struct {
	NvU32 busInfoListSize;
	NVSIM_NV2080_CTRL_BUS_INFO busInfoList[NVSIM_NV2080_CTRL_BUS_INFO_MAX_LIST_SIZE];
} NVSIM_NV2080_CTRL_BUS_GET_INFO_V2_PARAMS;

#define NVSIM_BUS_INFO_INDEX_TYPE               0x00
#define NVSIM_BUS_INFO_INDEX_CAPS               0x02
#define NVSIM_BUS_INFO_INDEX_PCIE_GPU_LINK_CAPS 0x03
#define NVSIM_BUS_INFO_INDEX_PCIE_DOWNSTREAM_LINK_CAPS 0x06
#define NVSIM_BUS_INFO_INDEX_COHERENT_DMA_FLAGS 0x0b
#define NVSIM_BUS_INFO_INDEX_BUS_NUMBER         0x0f
#define NVSIM_BUS_INFO_INDEX_DEVICE_NUMBER      0x10
#define NVSIM_BUS_INFO_INDEX_DOMAIN_NUMBER      0x2c
#define NVSIM_BUS_INFO_INDEX_PCIE_GEN_INFO      0x2d
#define NVSIM_BUS_INFO_TYPE_PCI_EXPRESS         0x03
#define NVSIM_BUS_INFO_COHERENT_DMA_FLAGS_CTXDMA_TRUE 0x01

/*
 * The items of getBusInfos (src/kernel/gpu/bus/kern_bus_ctrl.c) that
 * cuInit asks: TYPE kbifGetBusIntfType_HAL, PCI Express; CAPS
 * kbusControlGetCaps, 0 (not Tegra: not integrated); COHERENT_DMA_FLAGS
 * CTXDMA (kbifGetDmaCaps snoops on x86) and no GPUGART (no GART on
 * PCIe); BUS_NUMBER, DEVICE_NUMBER and DOMAIN_NUMBER gpuGetBus/Device/
 * Domain, the GPU's PCI address (nvsim's as CARD_INFO gives it, rm.c).  Others nvsim does not model: data 0, NV_ERR_INVALID_ARGUMENT
 * (the function's default case).
 */
static NV_STATUS nvsim_bus_info_value(const struct nvsim_gpu *gpu, u32 index,
				       u32 *data)
{
	*data = 0;
	switch (index) {
	case NVSIM_BUS_INFO_INDEX_TYPE:
		*data = NVSIM_BUS_INFO_TYPE_PCI_EXPRESS;
		return NV_OK;
	case NVSIM_BUS_INFO_INDEX_CAPS:
		return NV_OK;
	case NVSIM_BUS_INFO_INDEX_COHERENT_DMA_FLAGS:
		*data = NVSIM_BUS_INFO_COHERENT_DMA_FLAGS_CTXDMA_TRUE;
		return NV_OK;
	default:
		return NV_ERR_INVALID_ARGUMENT;
	case NVSIM_BUS_INFO_INDEX_PCIE_GPU_LINK_CAPS:
	case NVSIM_BUS_INFO_INDEX_PCIE_DOWNSTREAM_LINK_CAPS:
		/*
		 * The link capabilities register (a GSP client asks GSP):
		 * ctrl2080bus.h's MAX_SPEED (3:0), MAX_WIDTH (9:4), ASPM
		 * (11:10) and the generation fields below.  nvsim: x16 at
		 * the chip's generation (32 GT/s Gen5 GH100, 16 GT/s Gen4
		 * GA102), no ASPM; the downstream port (no switch) the same.
		 */
		{
			u32 gen = nvsim_arch->chip_id >= 0x180 ? 4 : 3;

			*data = (gen + 1) | 16 << 4 | gen << 12 | gen << 16 |
				gen << 20;
		}
		return NV_OK;
	case NVSIM_BUS_INFO_INDEX_PCIE_GEN_INFO:
		/*
		 * A GSP client sends it to GSP (bSendRpc); the fields are
		 * ctrl2080bus.h's PCIE_LINK_CAP_GEN (15:12), _CURR_LEVEL
		 * (19:16) and _GPU_GEN (23:20).  nvsim: a link trained at the
		 * chip's generation, GH100 Gen5 (4), GA102 Gen4 (3).
		 */
		{
			u32 gen = nvsim_arch->chip_id >= 0x180 ? 4 : 3;

			*data = gen << 12 | gen << 16 | gen << 20;
		}
		return NV_OK;
	case NVSIM_BUS_INFO_INDEX_BUS_NUMBER:
		*data = gpu->bus;
		return NV_OK;
	case NVSIM_BUS_INFO_INDEX_DEVICE_NUMBER:
	case NVSIM_BUS_INFO_INDEX_DOMAIN_NUMBER:
		/* slot and domain 0, as CARD_INFO says (rm.c) */
		return NV_OK;
	}
}

/*
 * NV2080_CTRL_CMD_BUS_GET_INFO_V2: subdeviceCtrlCmdBusGetInfoV2_IMPL and
 * getBusInfos (src/kernel/gpu/bus/kern_bus_ctrl.c): more items than the
 * array NV_ERR_INVALID_ARGUMENT; items in order, the first that fails
 * stops the list and fails the control.
 */
static NV_STATUS nvsim_ctrl_bus_info_v2(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_BUS_GET_INFO_V2_PARAMS *p = ctx->params;
	NV_STATUS status;
	u32 i;

	if (p->busInfoListSize > NVSIM_NV2080_CTRL_BUS_INFO_MAX_LIST_SIZE)
		return NV_ERR_INVALID_ARGUMENT;
	for (i = 0; i < p->busInfoListSize; i++) {
		status = nvsim_bus_info_value(ctx->obj->gpu, p->busInfoList[i].index,
					      &p->busInfoList[i].data);
		if (status != NV_OK)
			return status;
	}
	return NV_OK;
}

/* ctrl/ctrl2080/ctrl2080gpu.h */
#define NVSIM_NV2080_CTRL_CMD_GPU_GET_ENGINES_V2        0x20800170U
#define NVSIM_NV2080_GPU_MAX_ENGINES_LIST_SIZE          0x3e

typedef struct {
	NvU32 engineCount;
	NvU32 engineList[NVSIM_NV2080_GPU_MAX_ENGINES_LIST_SIZE];
} NVSIM_NV2080_CTRL_GPU_GET_ENGINES_V2_PARAMS;

/*
 * NV2080_CTRL_CMD_GPU_GET_ENGINES_V2: subdeviceCtrlCmdGpuGetEnginesV2_IMPL
 * (src/kernel/gpu/subdevice/subdevice_ctrl_gpu_kernel.c): the engine
 * database filtered by kmigmgrFilterEngineList; without MIG one graphics
 * engine (GR0) and the copy engines.  nvsim lists those it models: GR0
 * and COPY0..n-1 (arch.c); a real GPU adds its video, JPEG, OFA and SEC2
 * engines (README).
 */
static NV_STATUS nvsim_ctrl_engines_v2(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_GPU_GET_ENGINES_V2_PARAMS *p = ctx->params;
	u32 i, n = 0;

	p->engineList[n++] = NV2080_ENGINE_TYPE_GR0;
	for (i = 0; i < nvsim_arch->nr_ce; i++)
		p->engineList[n++] = NV2080_ENGINE_TYPE_COPY0 + i;
	p->engineCount = n;
	return NV_OK;
}

/* ctrl/ctrl2080/ctrl2080bus.h */
#define NVSIM_NV2080_CTRL_CMD_BUS_GET_PCI_INFO  0x20801801U

typedef struct {
	NvU32 pciDeviceId;
	NvU32 pciSubSystemId;
	NvU32 pciRevisionId;
	NvU32 pciExtDeviceId;
} NVSIM_NV2080_CTRL_BUS_GET_PCI_INFO_PARAMS;

/* ctrl/ctrl2080/ctrl2080bus.h */
#define NVSIM_NV2080_CTRL_CMD_BUS_GET_PCI_BAR_INFO      0x20801803U
#define NVSIM_NV2080_CTRL_BUS_MAX_PCI_BARS              8

typedef struct {
	NvU32 flags;
	NvU32 barSize;
	NvU64 barSizeBytes NV_ALIGN8;
	NvU64 barOffset NV_ALIGN8;
} NVSIM_NV2080_CTRL_BUS_PCI_BAR_INFO;

typedef struct {
	NvU32 pciBarCount;
	NVSIM_NV2080_CTRL_BUS_PCI_BAR_INFO pciBarInfo[NVSIM_NV2080_CTRL_BUS_MAX_PCI_BARS] NV_ALIGN8;
} NVSIM_NV2080_CTRL_BUS_GET_PCI_BAR_INFO_PARAMS;

/*
 * NV2080_CTRL_CMD_BUS_GET_PCI_BAR_INFO: subdeviceCtrlCmdBusGetPciBarInfo
 * _IMPL (src/kernel/gpu/bus/kern_bus_ctrl.c): the BARs' count, sizes (MiB
 * and bytes) and addresses, the unused entries zeroed.  nvsim's GPU has
 * the two CARD_INFO gives (rm.c): BAR0 (registers) and BAR1 (the FB
 * window, as large as FB); a real GPU has a third (BAR2/3; README).
 */
static NV_STATUS nvsim_ctrl_pci_bar_info(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_BUS_GET_PCI_BAR_INFO_PARAMS *p = ctx->params;
	const struct nvsim_gpu *gpu = ctx->obj->gpu;
	u64 i = gpu->index;

	memset(p, 0, sizeof(*p));
	p->pciBarCount = 2;
	p->pciBarInfo[0].barSizeBytes = 16ULL << 20;
	p->pciBarInfo[0].barOffset = 0xa0000000ULL + (i << 24);
	p->pciBarInfo[1].barSizeBytes = gpu->fb_total;
	p->pciBarInfo[1].barOffset = 0x38000000000ULL + (i << 36);
	p->pciBarInfo[0].barSize = p->pciBarInfo[0].barSizeBytes >> 20;
	p->pciBarInfo[1].barSize = p->pciBarInfo[1].barSizeBytes >> 20;
	return NV_OK;
}

/* ctrl/ctrl2080/ctrl2080gpu.h */
#define NVSIM_NV2080_CTRL_CMD_GPU_GET_SIMULATION_INFO   0x20800119U

/*
 * NV2080_CTRL_CMD_GPU_GET_SIMULATION_INFO: subdeviceCtrlCmdGpuGetSimulation
 * Info_IMPL (subdevice_ctrl_gpu_kernel.c): silicon (not fmodel, RTL or
 * emulation) is NV2080_CTRL_GPU_SIMULATION_INFO_TYPE_NONE (0).  nvsim
 * presents itself as silicon, as it does everywhere else.
 */
static NV_STATUS nvsim_ctrl_simulation_info(struct nvsim_ctrl_ctx *ctx)
{
	*(u32 *)ctx->params = 0;
	return NV_OK;
}

/* ---------------------------------------------------------------- GR caps */

/* ctrl/ctrl0080/ctrl0080gr.h, ctrl/ctrl2080/ctrl2080gr.h */
#define NVSIM_NV2080_CTRL_CMD_GR_GET_CAPS_V2    0x20801227U
#define NVSIM_NV0080_CTRL_GR_CAPS_TBL_SIZE      23

typedef struct {
	NvU8 capsTbl[NVSIM_NV0080_CTRL_GR_CAPS_TBL_SIZE];
	struct {
		NvU32 flags;
		NvU64 route NV_ALIGN8;
	} grRouteInfo NV_ALIGN8;
	NvBool bCapsPopulated;
} NVSIM_NV2080_CTRL_GR_GET_CAPS_V2_PARAMS;

/*
 * NV2080_CTRL_CMD_GR_GET_CAPS_V2: subdeviceCtrlCmdKGrGetCapsV2_IMPL
 * (src/kernel/gpu/gr/kernel_graphics.c): unless bCapsPopulated, the GR
 * engine's static caps table (kgraphicsGetCaps: copied from the static
 * info GSP reports) and bCapsPopulated set.  535.261.03's headers define
 * no cap bit of the table (ctrl0080gr.h); nvsim's is all zero (README).
 * The route (grRouteInfo) only matters under MIG, which nvsim's GPUs do
 * not have on.
 */
static NV_STATUS nvsim_ctrl_gr_caps_v2(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_GR_GET_CAPS_V2_PARAMS *p = ctx->params;

	if (!p->bCapsPopulated) {
		memset(p->capsTbl, 0, sizeof(p->capsTbl));
		p->bCapsPopulated = 1;
	}
	return NV_OK;
}

/* ---------------------------------------------------------------- CE caps */

/* ctrl/ctrl2080/ctrl2080ce.h */
#define NVSIM_NV2080_CTRL_CMD_CE_GET_ALL_CAPS   0x20802a0aU
#define NVSIM_NV2080_CTRL_MAX_PCES              32
#define NVSIM_NV2080_CTRL_CE_CAPS_TBL_SIZE      2
#define NVSIM_CE_CAPS0_GRCE                     0x01
#define NVSIM_CE_CAPS0_SHARED                   0x02
#define NVSIM_CE_CAPS0_SYSMEM_READ              0x04
#define NVSIM_CE_CAPS0_SYSMEM_WRITE             0x08
#define NVSIM_CE_CAPS0_SYSMEM                   0x20
#define NVSIM_CE_CAPS0_BL_SIZE_GT_64K_SUPPORTED 0x80
#define NVSIM_CE_CAPS1_SUPPORTS_NONPIPELINED_BL 0x01
#define NVSIM_CE_CAPS1_SUPPORTS_PIPELINED_BL    0x02

typedef struct {
	NvU8 capsTbl[NVSIM_NV2080_CTRL_MAX_PCES][NVSIM_NV2080_CTRL_CE_CAPS_TBL_SIZE];
	NvU32 present;
} NVSIM_NV2080_CTRL_CE_GET_ALL_CAPS_PARAMS;

/*
 * NV2080_CTRL_CMD_CE_GET_ALL_CAPS: subdeviceCtrlCmdCeGetAllCaps_IMPL
 * (src/kernel/gpu/ce/kernel_ce_shared.c): the struct zeroed, the physical
 * caps from GSP (CE_GET_ALL_PHYSICAL_CAPS, not in the open source), a
 * present bit per copy engine, NVLink caps only with NVLink.  nvsim's
 * copy engines (arch.c's count): CE0 the GR engine's (GRCE, shared),
 * each reads and writes sysmem, block-linear copies above 64K,
 * pipelined and non-pipelined; no P2P (no peer).  The physical bits are
 * nvsim's choice (README).
 */
static NV_STATUS nvsim_ctrl_ce_all_caps(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_CE_GET_ALL_CAPS_PARAMS *p = ctx->params;
	u32 i;

	memset(p, 0, sizeof(*p));
	for (i = 0; i < nvsim_arch->nr_ce && i < NVSIM_NV2080_CTRL_MAX_PCES; i++) {
		p->capsTbl[i][0] = NVSIM_CE_CAPS0_SYSMEM_READ |
				   NVSIM_CE_CAPS0_SYSMEM_WRITE |
				   NVSIM_CE_CAPS0_SYSMEM |
				   NVSIM_CE_CAPS0_BL_SIZE_GT_64K_SUPPORTED;
		if (i == 0)
			p->capsTbl[i][0] |= NVSIM_CE_CAPS0_GRCE |
					    NVSIM_CE_CAPS0_SHARED;
		p->capsTbl[i][1] = NVSIM_CE_CAPS1_SUPPORTS_NONPIPELINED_BL |
				   NVSIM_CE_CAPS1_SUPPORTS_PIPELINED_BL;
		p->present |= BIT(i);
	}
	return NV_OK;
}

#define NVSIM_NV2080_CTRL_CMD_GR_GET_SM_ISSUE_RATE_MODIFIER   0x20801230U
#define NVSIM_GR_ROUTE_INFO_SIZE                16

/*
 * NV2080_CTRL_CMD_GR_GET_SM_ISSUE_RATE_MODIFIER: subdeviceCtrlCmdKGrGetSm
 * IssueRateModifier_IMPL (src/kernel/gpu/gr/kernel_graphics.c): the GR
 * static info's issue rates (from GSP) after the route (grRouteInfo, the
 * first 16 bytes).  nvsim's SMs run every unit at full speed: each field
 * _FULL_SPEED (0).
 */
static NV_STATUS nvsim_ctrl_sm_issue_rate(struct nvsim_ctrl_ctx *ctx)
{
	if (ctx->psize > NVSIM_GR_ROUTE_INFO_SIZE)
		memset(ctx->params + NVSIM_GR_ROUTE_INFO_SIZE, 0,
		       ctx->psize - NVSIM_GR_ROUTE_INFO_SIZE);
	return NV_OK;
}

#define NVSIM_NV2080_CTRL_CMD_GR_GET_GLOBAL_SM_ORDER   0x2080121bU
#define NVSIM_GR_GET_GLOBAL_SM_ORDER_MAX_SM_COUNT       512

typedef struct {
	struct {
		NvU16 gpcId;
		NvU16 localTpcId;
		NvU16 localSmId;
		NvU16 globalTpcId;
		NvU16 virtualGpcId;
		NvU16 migratableTpcId;
	} globalSmId[NVSIM_GR_GET_GLOBAL_SM_ORDER_MAX_SM_COUNT];
	NvU16 numSm;
	NvU16 numTpc;
	struct {
		NvU32 flags;
		NvU64 route NV_ALIGN8;
	} grRouteInfo NV_ALIGN8;
} NVSIM_NV2080_CTRL_GR_GET_GLOBAL_SM_ORDER_PARAMS;

/*
 * NV2080_CTRL_CMD_GR_GET_GLOBAL_SM_ORDER: subdeviceCtrlCmdKGrGetGlobalSm
 * Order_IMPL (src/kernel/gpu/gr/kernel_graphics.c): numSm, numTpc and, per
 * SM, its logical GPC, TPC and SM ids from the GR static info (GSP's
 * floor-swept order).  nvsim's GPU is not floor-swept: arch.c's GPCs x
 * TPCs x SMs (the same figures GR_GET_INFO gives), numbered GPC by GPC,
 * each GPC its own virtual GPC, migratable TPC id = local TPC id.
 */
static NV_STATUS nvsim_ctrl_sm_order(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_GR_GET_GLOBAL_SM_ORDER_PARAMS *p = ctx->params;
	const struct nvsim_arch *a = nvsim_arch;
	u32 g, t, sm, n = 0;

	if (a->gpcs * a->tpc_per_gpc * a->sm_per_tpc >
	    NVSIM_GR_GET_GLOBAL_SM_ORDER_MAX_SM_COUNT)
		return NV_ERR_INVALID_LIMIT;
	memset(p->globalSmId, 0, sizeof(p->globalSmId));
	for (g = 0; g < a->gpcs; g++)
		for (t = 0; t < a->tpc_per_gpc; t++)
			for (sm = 0; sm < a->sm_per_tpc; sm++, n++) {
				p->globalSmId[n].gpcId = g;
				p->globalSmId[n].localTpcId = t;
				p->globalSmId[n].localSmId = sm;
				p->globalSmId[n].globalTpcId = g * a->tpc_per_gpc + t;
				p->globalSmId[n].virtualGpcId = g;
				p->globalSmId[n].migratableTpcId = t;
			}
	p->numSm = n;
	p->numTpc = a->gpcs * a->tpc_per_gpc;
	return NV_OK;
}

/* ---------------------------------------------------------------- FB caps */

/* ctrl/ctrl0080/ctrl0080fb.h */
#define NVSIM_NV0080_CTRL_CMD_FB_GET_CAPS_V2    0x801307U
#define NVSIM_NV0080_CTRL_FB_CAPS_TBL_SIZE      3

/*
 * NV0080_CTRL_CMD_FB_GET_CAPS_V2: deviceCtrlCmdFbGetCapsV2_IMPL
 * (src/kernel/gpu/mem_mgr/mem_mgr_ctrl.c), memmgrGetDeviceCaps: always
 * RENDER_TO_SYSMEM (0:0x01), BLOCKLINEAR (0:0x02) and BLOCKLINEAR_GOBS_512
 * (1:0x01); SUPPORT_CACHED_SYSMEM (0:0x08) with the GPU cache on (the
 * default); GENERIC_PAGE_KIND (1:0x80: Turing and later); VIDMEM_ALLOCS_
 * ARE_CLEARED (2:0x02) with scrub-on-free (nvsim's FB pages are zeroed
 * when made: store.c).  No scanout from sysmem (no display), no sysmem
 * compression, none of the ECC or PLC workarounds.
 */
static NV_STATUS nvsim_ctrl_fb_caps_v2(struct nvsim_ctrl_ctx *ctx)
{
	u8 *caps = ctx->params;

	caps[0] = 0x01 | 0x02 | 0x08;
	caps[1] = 0x01 | 0x80;
	caps[2] = 0x02;
	return NV_OK;
}

/* ------------------------------------------------ address space of a handle */

/* ctrl/ctrl0000/ctrl0000client.h */
#define NVSIM_NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE        0xd01U
#define NVSIM_ADDR_SPACE_TYPE_SYSMEM                            1
#define NVSIM_ADDR_SPACE_TYPE_VIDMEM                            2
#define NVSIM_ADDR_SPACE_TYPE_REGMEM                            3

typedef struct {
	NvHandle hObject;
	NvU32 mapFlags;
	NvU32 addrSpaceType;
} NVSIM_NV0000_CTRL_CLIENT_GET_ADDR_SPACE_TYPE_PARAMS;

/*
 * NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE: cliresCtrlCmdClientGetAddr
 * SpaceType_IMPL (src/kernel/rmapi/client_resource.c): the object by
 * handle in the caller's client (clientGetResourceRef:
 * NV_ERR_OBJECT_NOT_FOUND); memory by where a mapping of it lies
 * (memGetMapAddrSpace): FB VIDMEM, system memory SYSMEM, a virtual range
 * ADDR_VIRTUAL, which is NV_ERR_INVALID_ARGUMENT; another GPU resource
 * REGMEM if it has a register window (gpuresGetMapAddrSpace_IMPL,
 * gpu_resource.c: the usermode region), else the error of
 * gpuresGetRegBaseOffsetAndSize (NV_ERR_NOT_SUPPORTED); anything else
 * (the client, an event) NV_ERR_INVALID_OBJECT.
 */
static NV_STATUS nvsim_ctrl_addr_space_type(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV0000_CTRL_CLIENT_GET_ADDR_SPACE_TYPE_PARAMS *p = ctx->params;
	struct nvsim_object *o = nvsim_object_find(ctx->obj->client, p->hObject);

	if (!o)
		return NV_ERR_OBJECT_NOT_FOUND;
	switch (o->type) {
	case NVSIM_OBJ_MEMORY:
		if (!o->memory.mem)
			return NV_ERR_INVALID_ARGUMENT;
		p->addrSpaceType = o->memory.mem->fb ? NVSIM_ADDR_SPACE_TYPE_VIDMEM :
						       NVSIM_ADDR_SPACE_TYPE_SYSMEM;
		return NV_OK;
	case NVSIM_OBJ_USERMODE:
		p->addrSpaceType = NVSIM_ADDR_SPACE_TYPE_REGMEM;
		return NV_OK;
	case NVSIM_OBJ_CLIENT:
	case NVSIM_OBJ_EVENT:
	case NVSIM_OBJ_CONF_COMPUTE:
		return NV_ERR_INVALID_OBJECT;
	default:
		return NV_ERR_NOT_SUPPORTED;
	}
}

/* ------------------------------------------------------------------ GSP */

/* ctrl/ctrl2080/ctrl2080gsp.h */
#define NVSIM_NV2080_CTRL_CMD_GSP_GET_FEATURES  0x20803601U
#define NVSIM_NV2080_GSP_MAX_BUILD_VERSION_LENGTH 0x40
#define NVSIM_GSP_FEATURES_UVM_ENABLED          0x1     /* UVM_ENABLED 0:0 */

typedef struct {
	NvU32 gspFeatures;
	NvBool bValid;
	NvBool bDefaultGspRmGpu;
	NvU8 firmwareVersion[NVSIM_NV2080_GSP_MAX_BUILD_VERSION_LENGTH];
} NVSIM_NV2080_CTRL_GSP_GET_FEATURES_PARAMS;

/*
 * NV2080_CTRL_CMD_GSP_GET_FEATURES: flags 0x4211 in 535.261.03's
 * g_subdevice_nvoc.c (ROUTE_TO_PHYSICAL | CACHEABLE): the kernel RM has
 * no body for it (NVOC_EXPORTED_METHOD_DISABLED_BY_FLAG, control.h) and
 * rmresControl_Prologue_IMPL (src/kernel/rmapi/resource.c) sends it to
 * GSP, whose answer is not in the open source.  The header says bValid is
 * NV_TRUE "when RM is a GSP client with GPU support offloaded to GSP
 * firmware", which GH100 always is (595.45.04's non-offloaded HAL,
 * subdeviceCtrlCmdGspGetFeatures_KERNEL, answers bValid NV_FALSE).  nvsim
 * answers as GSP: bValid, the one feature bit the header defines
 * (UVM_ENABLED, 0:0: nvsim serves UVM), bDefaultGspRmGpu for GH100 (not
 * GA102) and the firmware version = the driver's release (the firmware
 * ships with the driver).  The values are nvsim's reading (README).
 */
static NV_STATUS nvsim_ctrl_gsp_features(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_GSP_GET_FEATURES_PARAMS *p = ctx->params;

	memset(p, 0, sizeof(*p));
	p->gspFeatures = NVSIM_GSP_FEATURES_UVM_ENABLED;
	p->bValid = 1;
	p->bDefaultGspRmGpu = nvsim_arch->chip_id >= 0x180;
	strscpy((char *)p->firmwareVersion, nvsim_driver_version,
		sizeof(p->firmwareVersion));
	return NV_OK;
}

/* interface/deprecated/rmapi_deprecated.h */
#define NVSIM_RM_GSS_LEGACY_MASK                0x00008000U
/* The legacy GSS query libcuda 535.261.03 makes at cuInit. */
#define NVSIM_GSS_LEGACY_CUINIT_QUERY           0x20808159U
#define NVSIM_GSS_LEGACY_CUINIT_QUERY_SIZE      332

/*
 * Legacy GSS controls (cmd & RM_GSS_LEGACY_MASK): no RM class exports
 * them; the deprecated-control layer (rmapi_deprecated_control.c,
 * IsGssLegacyCall) hands them on a GSP client to RmGssLegacyRpcCmd
 * (interface/deprecated/rmapi_gss_legacy_control.c), which forwards them
 * to GSP unread ("let it deal with what is or isn't valid"); root only
 * with RM_GSS_LEGACY_MASK_PRIVILEGED.  GSP's handling is not in the open
 * source.  cuInit asks 0x20808159 (332 bytes: a count, 2, and that many
 * {id, data} pairs; libcuda reads the data of ids 0xc and 0x25 as flags)
 * and fails (CUDA_ERROR_NO_DEVICE) unless it is NV_OK.  nvsim answers it
 * NV_OK with the parameters as they came (each flag 0); other legacy GSS
 * controls stay NV_ERR_NOT_SUPPORTED, which libcuda tolerates (README).
 */
static NV_STATUS nvsim_ctrl_gss_legacy(struct nvsim_ctrl_ctx *ctx)
{
	return NV_OK;
}

/* ctrl/ctrl2080/ctrl2080gr.h */
#define NVSIM_NV2080_CTRL_CMD_GR_GET_CTX_BUFFER_SIZE    0x20801218U

typedef struct {
	NvHandle hChannel;
	NvU64 totalBufferSize NV_ALIGN8;
} NVSIM_NV2080_CTRL_GR_GET_CTX_BUFFER_SIZE_PARAMS;

/*
 * NV2080_CTRL_CMD_GR_GET_CTX_BUFFER_SIZE: subdeviceCtrlCmdKGrGetCtxBufferSize
 * _IMPL (src/kernel/gpu/gr/kernel_graphics.c): hChannel is looked up in the
 * subdevice's client (CliGetKernelChannel: no object NV_ERR_OBJECT_NOT_FOUND,
 * an object that is no channel NV_ERR_INVALID_CHANNEL); its GR context is
 * the channel's or its TSG's (kgrctxFromKernelChannel, kernel_graphics_
 * context.c: none, i.e. not on a GR engine, NV_ERR_OBJECT_NOT_FOUND); the
 * answer is the sum of the context buffers' sizes, each aligned, plus each
 * new alignment.  The buffers' sizes are GSP's (static info); nvsim
 * allocates no GR context buffers (its FB use has none), so the sum of
 * what it allocated is 0 (README: a real H100 says some MiB).
 */
static NV_STATUS nvsim_ctrl_gr_ctx_buffer_size(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_NV2080_CTRL_GR_GET_CTX_BUFFER_SIZE_PARAMS *p = ctx->params;
	struct nvsim_object *ch = nvsim_object_ref(ctx->obj->client, p->hChannel);
	u32 t;

	if (!ch)
		return NV_ERR_OBJECT_NOT_FOUND;
	if (ch->type != NVSIM_OBJ_CHANNEL || ch->invalidated)
		return 0x21;    /* NV_ERR_INVALID_CHANNEL (nvstatuscodes.h) */
	t = ch->channel.engine_type;
	if (t < NV2080_ENGINE_TYPE_GR0 || t > NV2080_ENGINE_TYPE_GR7)
		return NV_ERR_OBJECT_NOT_FOUND;
	p->totalBufferSize = 0;
	return NV_OK;
}

/* ctrl/ctrl2080/ctrl2080gpu.h */
#define NVSIM_NV2080_CTRL_CMD_GPU_GET_SHORT_NAME_STRING 0x20800111U
#define NVSIM_NV2080_GPU_MAX_NAME_STRING_LENGTH         0x40

/*
 * NV2080_CTRL_CMD_GPU_GET_SHORT_NAME_STRING: gpuGetShortNameString_KERNEL
 * (src/kernel/gpu/gpu_name_kernel.c) asks the physical RM (GSP) for it;
 * nvsim answers the chip's name (arch.c: "GH100", "GA102"; a guess at
 * GSP's string: README).
 */
static NV_STATUS nvsim_ctrl_short_name(struct nvsim_ctrl_ctx *ctx)
{
	memset(ctx->params, 0, NVSIM_NV2080_GPU_MAX_NAME_STRING_LENGTH);
	strscpy(ctx->params, nvsim_arch->chip, NVSIM_NV2080_GPU_MAX_NAME_STRING_LENGTH);
	return NV_OK;
}

/*
 * 0x20800145 / 0x20800146: NV2080_CTRL_CMD_GPU_ACQUIRE_/RELEASE_COMPUTE_MODE_
 * RESERVATION.  No 535 SDK header names them; 535.261.03's RM exports both
 * on the subdevice with paramSize 0 (generated/g_subdevice_nvoc.c, flags
 * 0x850).  libcuda acquires at cuCtxCreate (CUDA_ERROR_DEVICE_UNAVAILABLE
 * without it) and releases at the context's end.
 */
#define NVSIM_NV2080_CTRL_CMD_GPU_ACQUIRE_COMPUTE_MODE_RESERVATION 0x20800145U
#define NVSIM_NV2080_CTRL_CMD_GPU_RELEASE_COMPUTE_MODE_RESERVATION 0x20800146U

/*
 * subdeviceCtrlCmdGpuAcquireComputeModeReservation_IMPL
 * (src/kernel/gpu/subdevice/subdevice_ctrl_gpu_kernel.c): no MIG; under the
 * GPU's computeModeRules, which nvsim keeps at NONE (monitor.c,
 * QUERY_COMPUTE_MODE_RULES): "the caller can always get the reservation",
 * pGpu->hComputeModeReservation = the caller's client, NV_OK.  (The
 * exclusive modes' NV_ERR_STATE_IN_USE when another client holds it is
 * not reachable: nvsim has no SET_COMPUTE_MODE_RULES.)
 */
static NV_STATUS nvsim_ctrl_acquire_compute_reservation(struct nvsim_ctrl_ctx *ctx)
{
	ctx->obj->gpu->compute_reservation = ctx->obj->client->handle;
	return NV_OK;
}

/*
 * subdeviceCtrlCmdGpuReleaseComputeModeReservation_IMPL (same file): only
 * the holder releases (the reservation goes back to NV01_NULL_OBJECT);
 * another client's release is NV_ERR_STATE_IN_USE.
 */
static NV_STATUS nvsim_ctrl_release_compute_reservation(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_gpu *gpu = ctx->obj->gpu;

	if (gpu->compute_reservation != ctx->obj->client->handle)
		return NV_ERR_STATE_IN_USE;
	gpu->compute_reservation = 0;
	return NV_OK;
}

/*
 * The RC watchdog's requests, as krcWatchdogChangeState_IMPL
 * (src/kernel/gpu/rc/kernel_rc_watchdog.c, 535.261.03 and 595.45.04)
 * keeps them for subdeviceCtrlCmdRc{Enable,Disable,SoftDisable}Watchdog_IMPL
 * and subdeviceCtrlCmdRcReleaseWatchdogRequests_IMPL
 * (kernel_rc_watchdog_ctrl.c): a subdevice holds at most one request of
 * each kind (enable, disable, soft disable; a new one replaces what it
 * held, a release drops all), the GPU counts them; an enable while any
 * disable request stands, or a disable while any enable request does (the
 * caller's own included), is NV_ERR_STATE_IN_USE with nothing changed.
 * The subdevice's free drops its requests (subdeviceDestruct_IMPL ->
 * subdeviceRestoreWatchdog_IMPL: RM_CLIENT_DESTRUCTION).  libcuda's
 * cuInit releases, then soft-disables.  Not simulated: the watchdog
 * itself (a channel RM runs on a display-capable GPU), which the counts
 * would start or stop, and MIG (the controls' NV_ERR_NOT_SUPPORTED).
 */
static NV_STATUS nvsim_watchdog_change(struct nvsim_object *sub, int want)
{
	u32 *refs = sub->gpu->wd_refs;
	u8 now = want < 0 ? 0 : BIT(want);
	int k;

	if ((want == NVSIM_WD_ENABLE && refs[NVSIM_WD_DISABLE]) ||
	    (want == NVSIM_WD_DISABLE && refs[NVSIM_WD_ENABLE]))
		return NV_ERR_STATE_IN_USE;
	for (k = 0; k < NVSIM_WD_KINDS; k++) {
		if (!(sub->subdevice.wd & BIT(k)) && (now & BIT(k)))
			refs[k]++;
		else if ((sub->subdevice.wd & BIT(k)) && !(now & BIT(k)))
			refs[k]--;
	}
	sub->subdevice.wd = now;
	return NV_OK;
}

static NV_STATUS nvsim_ctrl_wd_enable(struct nvsim_ctrl_ctx *ctx)
{
	return nvsim_watchdog_change(ctx->obj, NVSIM_WD_ENABLE);
}

static NV_STATUS nvsim_ctrl_wd_disable(struct nvsim_ctrl_ctx *ctx)
{
	return nvsim_watchdog_change(ctx->obj, NVSIM_WD_DISABLE);
}

static NV_STATUS nvsim_ctrl_wd_soft_disable(struct nvsim_ctrl_ctx *ctx)
{
	return nvsim_watchdog_change(ctx->obj, NVSIM_WD_SOFT_DISABLE);
}

static NV_STATUS nvsim_ctrl_wd_release(struct nvsim_ctrl_ctx *ctx)
{
	return nvsim_watchdog_change(ctx->obj, -1);
}

/*
 * A subdevice freed: subdeviceDestruct_IMPL (src/kernel/gpu/subdevice/
 * subdevice.c) calls subdeviceReleaseComputeModeReservation_IMPL, which
 * gives the reservation back if the subdevice's client holds it (a
 * process that dies holding it does not keep the GPU reserved), and
 * subdeviceRestoreWatchdog_IMPL, which drops its watchdog requests
 * (above).  objects.c's teardown calls this under nvsim.lock.
 */
void nvsim_cuda_subdevice_teardown(struct nvsim_object *obj)
{
	if (obj->gpu && obj->gpu->compute_reservation == obj->client->handle)
		obj->gpu->compute_reservation = 0;
	if (obj->gpu)
		nvsim_watchdog_change(obj, -1);
}

/*
 * NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL: libcuda 535.261.03 issues it
 * on the device at every cuCtxCreate on a GPU of compute capability 3.5 or
 * more, as 0x809909 (category NV0080_CTRL_PERF | LEGACY_NON_PRIVILEGED; its
 * SDK headers give only the params, NV0080_CTRL_PERF_CUDA_LIMIT_CONTROL_
 * PARAMS, ctrl0080perf.h), and fails the context CUDA_ERROR_NOT_SUPPORTED
 * unless it is answered NV_OK (found with gdb: the status is returned from
 * the context's set-up, not ignored).  The open 535.261.03 tree exports
 * only the internal controls (0x802009, 0x802004: generated/
 * g_device_nvoc.c), so what the release's RM answers on a GPU is not in
 * the vendored source; 595.45.04 exports it as 0x801909
 * (g_device_nvoc.c), and nvsim answers both numbers as
 * deviceCtrlCmdKPerfCudaLimitSetControl_IMPL (src/kernel/gpu/perf/
 * kern_cuda_limit.c) does: a per-device count, bCudaLimit incrementing it,
 * a clear decrementing it, a clear at 0 NV_ERR_INVALID_REQUEST; the
 * physical RM's clock limit on an edge is not simulated (nvsim has no
 * clocks).  docs/cuda.md records the gap.
 */
#define NVSIM_NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL_LEGACY 0x00809909U
#define NVSIM_NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL       0x00801909U

static NV_STATUS nvsim_ctrl_cuda_limit(struct nvsim_ctrl_ctx *ctx)
{
	u32 *refs = &ctx->obj->device.cuda_limit_refs;

	if (*(const NvBool *)ctx->params) {
		if (*refs == U32_MAX)
			return NV_ERR_INVALID_REQUEST;
		(*refs)++;
	} else if (*refs) {
		(*refs)--;
	} else {
		return NV_ERR_INVALID_REQUEST;
	}
	return NV_OK;
}

#define NVSIM_NV2080_CTRL_CMD_GPU_QUERY_COMPUTE_MODE_RULES      0x20800131U

#define CLIENT      NVSIM_BIT(NVSIM_OBJ_CLIENT)
#define DEVICE      NVSIM_BIT(NVSIM_OBJ_DEVICE)
#define SUBDEVICE   NVSIM_BIT(NVSIM_OBJ_SUBDEVICE)
#define CC_OBJ      NVSIM_BIT(NVSIM_OBJ_CONF_COMPUTE)

static const struct nvsim_ctrl nvsim_cuda_ctrls[] = {
	{ NV2080_CTRL_CMD_RC_ENABLE_WATCHDOG, 0, SUBDEVICE, nvsim_ctrl_wd_enable, NULL },
	{ NV2080_CTRL_CMD_RC_DISABLE_WATCHDOG, 0, SUBDEVICE, nvsim_ctrl_wd_disable, NULL },
	{ NV2080_CTRL_CMD_RC_SOFT_DISABLE_WATCHDOG, 0, SUBDEVICE,
	  nvsim_ctrl_wd_soft_disable, NULL },
	{ NV2080_CTRL_CMD_RC_RELEASE_WATCHDOG_REQUESTS, 0, SUBDEVICE,
	  nvsim_ctrl_wd_release, NULL },
	{ NVSIM_NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL_LEGACY, sizeof(NvBool),
	  DEVICE, nvsim_ctrl_cuda_limit, NULL },
	{ NVSIM_NV0080_CTRL_CMD_PERF_CUDA_LIMIT_SET_CONTROL, sizeof(NvBool),
	  DEVICE, nvsim_ctrl_cuda_limit, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GR_GET_CTX_BUFFER_SIZE,
	  sizeof(NVSIM_NV2080_CTRL_GR_GET_CTX_BUFFER_SIZE_PARAMS),
	  SUBDEVICE, nvsim_ctrl_gr_ctx_buffer_size, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GPU_ACQUIRE_COMPUTE_MODE_RESERVATION, 0,
	  SUBDEVICE, nvsim_ctrl_acquire_compute_reservation, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GPU_RELEASE_COMPUTE_MODE_RESERVATION, 0,
	  SUBDEVICE, nvsim_ctrl_release_compute_reservation, NULL },
	{ NVSIM_GSS_LEGACY_CUINIT_QUERY, NVSIM_GSS_LEGACY_CUINIT_QUERY_SIZE,
	  SUBDEVICE, nvsim_ctrl_gss_legacy, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GPU_GET_SHORT_NAME_STRING,
	  NVSIM_NV2080_GPU_MAX_NAME_STRING_LENGTH,
	  SUBDEVICE, nvsim_ctrl_short_name, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GSP_GET_FEATURES,
	  sizeof(NVSIM_NV2080_CTRL_GSP_GET_FEATURES_PARAMS),
	  SUBDEVICE, nvsim_ctrl_gsp_features, NULL },
	{ NVSIM_NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE,
	  sizeof(NVSIM_NV0000_CTRL_CLIENT_GET_ADDR_SPACE_TYPE_PARAMS),
	  CLIENT, nvsim_ctrl_addr_space_type, NULL },
	{ NVSIM_NV0080_CTRL_CMD_FB_GET_CAPS_V2, NVSIM_NV0080_CTRL_FB_CAPS_TBL_SIZE,
	  DEVICE, nvsim_ctrl_fb_caps_v2, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GR_GET_GLOBAL_SM_ORDER,
	  sizeof(NVSIM_NV2080_CTRL_GR_GET_GLOBAL_SM_ORDER_PARAMS),
	  SUBDEVICE, nvsim_ctrl_sm_order, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GR_GET_SM_ISSUE_RATE_MODIFIER, 32,
	  SUBDEVICE, nvsim_ctrl_sm_issue_rate, NULL },
	{ NVSIM_NV2080_CTRL_CMD_CE_GET_ALL_CAPS,
	  sizeof(NVSIM_NV2080_CTRL_CE_GET_ALL_CAPS_PARAMS),
	  SUBDEVICE, nvsim_ctrl_ce_all_caps, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GR_GET_CAPS_V2,
	  sizeof(NVSIM_NV2080_CTRL_GR_GET_CAPS_V2_PARAMS),
	  SUBDEVICE, nvsim_ctrl_gr_caps_v2, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GPU_GET_SIMULATION_INFO, sizeof(u32),
	  SUBDEVICE, nvsim_ctrl_simulation_info, NULL },
	{ NVSIM_NV2080_CTRL_CMD_BUS_GET_PCI_BAR_INFO,
	  sizeof(NVSIM_NV2080_CTRL_BUS_GET_PCI_BAR_INFO_PARAMS),
	  SUBDEVICE, nvsim_ctrl_pci_bar_info, NULL },
	{ NVSIM_NV2080_CTRL_CMD_GPU_GET_ENGINES_V2,
	  sizeof(NVSIM_NV2080_CTRL_GPU_GET_ENGINES_V2_PARAMS),
	  SUBDEVICE, nvsim_ctrl_engines_v2, NULL },
	{ NVSIM_NV2080_CTRL_CMD_BUS_GET_INFO_V2,
	  sizeof(NVSIM_NV2080_CTRL_BUS_GET_INFO_V2_PARAMS),
	  SUBDEVICE, nvsim_ctrl_bus_info_v2, NULL },
	{ NVSIM_NV0080_CTRL_CMD_HOST_GET_CAPS_V2,
	  NVSIM_NV0080_CTRL_HOST_CAPS_TBL_SIZE,
	  DEVICE, nvsim_ctrl_host_caps_v2, NULL },
	{ NVSIM_NV0000_CTRL_CMD_SYNC_GPU_BOOST_GROUP_INFO,
	  sizeof(NVSIM_NV0000_SYNC_GPU_BOOST_GROUP_INFO_PARAMS),
	  CLIENT, nvsim_ctrl_boost_group_info, NULL },
	{ NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_CAPABILITIES,
	  sizeof(NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_CAPABILITIES_PARAMS),
	  CC_OBJ, nvsim_ctrl_cc_caps, NULL },
	{ NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_GPUS_STATE,
	  sizeof(NVSIM_NV_CONF_COMPUTE_CTRL_CMD_SYSTEM_GET_GPUS_STATE_PARAMS),
	  CC_OBJ, nvsim_ctrl_cc_gpus_state, NULL },
};

const struct nvsim_ctrl *nvsim_cuda_ctrl_find(u32 cmd)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_cuda_ctrls); i++)
		if (nvsim_cuda_ctrls[i].cmd == cmd)
			return &nvsim_cuda_ctrls[i];
	return NULL;
}

/* ------------------------------------------------------------------ UVM */

/*
 * UVM_PAGEABLE_MEM_ACCESS: uvm_api_pageable_mem_access
 * (kernel-open/nvidia-uvm/uvm.c) answers
 * uvm_va_space_pageable_mem_access_supported() (uvm_va_space.c): ATS
 * where the platform has it, else HMM.  nvsim models neither (no GPU
 * access to pageable memory): NV_FALSE, what the driver answers on x86
 * with HMM off (uvm_disable_hmm=1, or a kernel without HMM mirror
 * support; README).  The init check is the routing's
 * (UVM_ROUTE_CMD_STACK_INIT_CHECK).
 */
NV_STATUS nvsim_uvm_pageable_mem_access(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_PAGEABLE_MEM_ACCESS_PARAMS *p = buf;

	p->pageableMemAccess = 0;
	return NV_OK;
}

/* Per UVM file: the range groups' ids (nvsim_uvm_open, nvsim_uvm_release). */
void nvsim_cuda_uvm_file_init(struct nvsim_file *nvfp)
{
	xa_init(&nvfp->uvm_range_groups);
}

void nvsim_cuda_uvm_file_fini(struct nvsim_file *nvfp)
{
	xa_destroy(&nvfp->uvm_range_groups);
}

/*
 * UVM_CREATE_RANGE_GROUP: uvm_api_create_range_group
 * (kernel-open/nvidia-uvm/uvm_range_group.c): the next id of the VA space
 * (atomic64_inc_return of its counter: 1, 2, ...) entered in its radix
 * tree, and returned.  nvsim keeps the ids only (no ranges join a group:
 * UVM_SET_RANGE_GROUP is not answered); under nvsim.lock.
 */
NV_STATUS nvsim_uvm_create_range_group(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_RANGE_GROUP_PARAMS *p = buf;
	u64 id = nvfp->uvm_range_group_id + 1;
	int ret;

	ret = xa_insert(&nvfp->uvm_range_groups, id, xa_mk_value(1), GFP_KERNEL_ACCOUNT);
	if (ret)
		return ret == -ENOMEM ? NV_ERR_NO_MEMORY : NV_ERR_INSERT_DUPLICATE_NAME;
	nvfp->uvm_range_group_id = id;
	p->rangeGroupId = id;
	return NV_OK;
}

/*
 * UVM_DESTROY_RANGE_GROUP: uvm_api_destroy_range_group (uvm_range_group.c):
 * an id not in the tree NV_ERR_OBJECT_NOT_FOUND, else it goes.
 */
NV_STATUS nvsim_uvm_destroy_range_group(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_RANGE_GROUP_PARAMS *p = buf;

	if (p->rangeGroupId > ULONG_MAX ||
	    !xa_erase(&nvfp->uvm_range_groups, p->rangeGroupId))
		return NV_ERR_OBJECT_NOT_FOUND;
	return NV_OK;
}

/*
 * UVM_UNREGISTER_GPU: uvm_api_unregister_gpu (uvm_api.c, uvm_va_space.c
 * uvm_va_space_unregister_gpu): a GPU the VA space has not registered is
 * NV_ERR_INVALID_DEVICE.  nvsim's REGISTER_GPU records nothing (uvm.c), so
 * any simulated GPU's UUID is NV_OK, another NV_ERR_INVALID_DEVICE.
 */
NV_STATUS nvsim_uvm_unregister_gpu(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_UNREGISTER_GPU_PARAMS *p = buf;
	unsigned int i;

	for (i = 0; i < nvsim.num_gpus; i++)
		if (!memcmp(nvsim.gpus[i].uuid, p->gpu_uuid, NV_UUID_LEN))
			return NV_OK;
	return 0x26;    /* NV_ERR_INVALID_DEVICE (nvstatuscodes.h) */
}
