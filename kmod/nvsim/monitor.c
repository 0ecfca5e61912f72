// SPDX-License-Identifier: GPL-2.0
/*
 * monitor.c - the NV0080 (device) and NV2080 (subdevice) controls NVML
 * reads to open a GPU and print nvidia-smi's figures, beyond those
 * control.c answers for compute clients.  Each follows the 535.261.03
 * handler it cites.  What nvsim has no model of (clocks, power, thermal
 * sensors, ECC, PCIe link) is answered as the driver answers on a GPU that
 * lacks the feature, which NVML prints as "N/A" (docs/nvml.md).
 *
 * Layouts: 535.261.03's ctrl0080/ctrl2080 headers (the same in 595.45.04
 * for every struct here).
 */
#include <linux/ktime.h>
#include <linux/timekeeping.h>
#ifdef CONFIG_X86
#include <asm/msr.h>
#endif

#include "ctrl.h"

/* ctrl2080gpu.h: GPU_INFO indexes control.c does not answer */
#define NVSIM_GPU_INFO_INDEX_0x11 0x11  /* not named in the open source */
#define NVSIM_GPU_INFO_IBMNPU_RELAXED_ORDERING 0x26
#define NVSIM_GPU_INFO_IBMNPU_RELAXED_ORDERING_UNSUPPORTED 0xffffffffU

/**
 * nvsim_gpu_info_more - GPU_GET_INFO(_V2) indexes beyond control.c's
 * @index: the index (bits 23:0)
 * @data: its value
 *
 * subdevice_ctrl_gpu_kernel.c, getGpuInfos:
 * IBMNPU_RELAXED_ORDERING is UNSUPPORTED unless the GPU sits behind an IBM
 * NPU (nv-ibmnpu.c, nv_get_ibmnpu_relaxed_ordering_mode: no NPU,
 * NV_ERR_NOT_SUPPORTED); an index the switch does not name is forwarded to
 * GSP on a GSP client (the default case, bGspForward), else
 * NV_ERR_INVALID_ARGUMENT.  nvsim's GH100 is a GSP client, so what GSP
 * answers decides; its handler is not in the open source.  NVML asks index
 * 0x11 alone before it lists a GPU's processes and gives up on an error:
 * nvsim answers it NV_OK with 0 (an assumption, not read from any source;
 * docs/nvml.md).  Other unnamed indexes: NV_ERR_INVALID_ARGUMENT.
 */
NV_STATUS nvsim_gpu_info_more(u32 index, u32 *data)
{
	switch (index) {
	case NVSIM_GPU_INFO_IBMNPU_RELAXED_ORDERING:
		*data = NVSIM_GPU_INFO_IBMNPU_RELAXED_ORDERING_UNSUPPORTED;
		return NV_OK;
	case NVSIM_GPU_INFO_INDEX_0x11:
		*data = 0;
		return NV_OK;
	default:
		*data = 0;
		return NV_ERR_INVALID_ARGUMENT;
	}
}

/* cl900e.h */
#define NVSIM_MPS_COMPUTE 0x900e

/**
 * nvsim_get_pids_of_class - GPU_GET_PIDS for a class other than the
 * subdevice's, under nvsim.lock
 * @p: the params (idType CLASS, checked by the caller); pidTbl filled
 * @gpu: the subdevice's GPU
 *
 * subdevice_ctrl_gpu_kernel.c, subdeviceCtrlCmdGpuGetPids, and
 * gpu_rmapi.c, gpuGetProcWithObject: MPS_COMPUTE asks for the processes
 * with an MPS object (MpsApi), which nvsim has no class for: none; any
 * other class for the processes with an object of that class under a
 * channel (ChannelDescendant) of their device on the GPU.  NVML asks the
 * compute class (nvidia-smi's "C"), the 3D class ("G") and MPS_COMPUTE
 * ("M+C") in turn.  Kernel clients are not listed (RM skips kernel-mode
 * admin clients); the others as the caller's PID namespace sees them
 * (nvsim_pid_add_client).
 */
NV_STATUS nvsim_get_pids_of_class(NV2080_CTRL_GPU_GET_PIDS_PARAMS *p,
				  struct nvsim_gpu *gpu)
{
	struct nvsim_client *client;
	struct nvsim_object *obj;
	unsigned long idx, h;

	if (p->id == NVSIM_MPS_COMPUTE)
		return NV_OK;
	xa_for_each(&nvsim.clients, idx, client) {
		if (!client->owner)
			continue;
		xa_for_each(&client->objects, h, obj) {
			if (obj->type == NVSIM_OBJ_ENGINE &&
			    obj->hclass == p->id && obj->gpu == gpu) {
				nvsim_pid_add_client(p, client);
				break;
			}
		}
	}
	return NV_OK;
}

/* ctrl0080gpu.h: NV0080_CTRL_GPU_GET_VIRTUALIZATION_MODE_PARAMS */
#define NVSIM_CTRL_GET_VIRTUALIZATION_MODE 0x00800289
#define NVSIM_VIRTUALIZATION_MODE_NONE 0

/*
 * device_ctrl.c, deviceCtrlCmdGpuGetVirtualizationMode: not a vGPU guest
 * (IS_VIRTUAL), not passthrough (IS_PASSTHRU) and not under a vGPU
 * hypervisor: NV0080_CTRL_GPU_VIRTUALIZATION_MODE_NONE, a bare-metal GPU.
 */
static NV_STATUS nvsim_ctrl_virt_mode(struct nvsim_ctrl_ctx *ctx)
{
	u32 *mode = ctx->params;

	*mode = NVSIM_VIRTUALIZATION_MODE_NONE;
	return NV_OK;
}

/* ctrl2080tmr.h: NV2080_CTRL_TIMER_GET_GPU_CPU_TIME_CORRELATION_INFO */
#define NVSIM_CTRL_TIMER_GPU_CPU_TIME 0x20800406
#define NVSIM_TIME_MAX_SAMPLES 16
#define NVSIM_CLK_ID_SOURCE(id) ((id) & 0xf)
#define NVSIM_CLK_ID_PROCESSOR(id) (((id) >> 4) & 0xf)
#define NVSIM_CLK_ID_OSTIME 1
#define NVSIM_CLK_ID_TSC 2
#define NVSIM_CLK_ID_PLATFORM_API 3
#define NVSIM_CLK_ID_PROCESSOR_GSP 1

struct nvsim_time_corr {
	u8 cpuClkId;
	u8 sampleCount;
	u8 pad[6];
	struct { u64 cpuTime, gpuTime; } samples[NVSIM_TIME_MAX_SAMPLES];
};

/* nvsim's PTIMER (ns), as the copy engine's semaphore timestamps (pbdma.c). */
static u64 nvsim_ptimer(void)
{
	return ktime_get_ns();
}

/*
 * subdevice_ctrl_timer_kernel.c,
 * subdeviceCtrlCmdTimerGetGpuCpuTimeCorrelationInfo: sampleCount at most
 * 16 (NV_ERR_INVALID_ARGUMENT); GSP's clock is asked of GSP, which nvsim
 * has none of (NV_ERR_NOT_SUPPORTED, as for a GPU that is not a GSP
 * client); OSTIME: sampleCount pairs of wall-clock microseconds
 * (osGetCurrentTime) and PTIMER; PLATFORM_API: one pair of raw monotonic
 * ns (osGetPerformanceCounter: os_get_current_tick_hr) and PTIMER; TSC:
 * sampleCount pairs of the CPU's TSC and PTIMER
 * (tmrGetGpuAndCpuTimestampPair_GM107); any other source
 * NV_ERR_NOT_SUPPORTED.
 */
static NV_STATUS nvsim_ctrl_time_corr(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_time_corr *p = ctx->params;
	u8 i;

	if (p->sampleCount > NVSIM_TIME_MAX_SAMPLES)
		return NV_ERR_INVALID_ARGUMENT;
	if (NVSIM_CLK_ID_PROCESSOR(p->cpuClkId) == NVSIM_CLK_ID_PROCESSOR_GSP)
		return NV_ERR_NOT_SUPPORTED;
	if (NVSIM_CLK_ID_PROCESSOR(p->cpuClkId) != 0)
		return NV_ERR_INVALID_ARGUMENT;
	switch (NVSIM_CLK_ID_SOURCE(p->cpuClkId)) {
	case NVSIM_CLK_ID_OSTIME:
		for (i = 0; i < p->sampleCount; i++) {
			p->samples[i].cpuTime = ktime_get_real_ns() / NSEC_PER_USEC;
			p->samples[i].gpuTime = nvsim_ptimer();
		}
		return NV_OK;
	case NVSIM_CLK_ID_PLATFORM_API:
		p->samples[0].cpuTime = ktime_get_raw_ns();
		p->samples[0].gpuTime = nvsim_ptimer();
		return NV_OK;
#ifdef CONFIG_X86
	case NVSIM_CLK_ID_TSC:
		for (i = 0; i < p->sampleCount; i++) {
			p->samples[i].gpuTime = nvsim_ptimer();
			p->samples[i].cpuTime = rdtsc_ordered();
		}
		return NV_OK;
#endif
	default:
		return NV_ERR_NOT_SUPPORTED;
	}
}

/* ctrl2080mc.h: NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS */
#define NVSIM_CTRL_MC_GET_ARCH_INFO 0x20801701
struct nvsim_arch_info {
	u32 architecture;
	u32 implementation;
	u32 revision;
	u8 subRevision;
};

/*
 * kernel_mc.c, subdeviceCtrlCmdMcGetArchInfo: PMC_BOOT_0's architecture
 * (shifted by GPU_ARCH_SHIFT, gpu.c) and implementation, which arch.c's
 * chip_id holds as arch << 4 | impl; revision majorRev << 4 | minorRev,
 * nvsim's chips being revision A1 (0xa1), no sub-revision.
 */
static NV_STATUS nvsim_ctrl_arch_info(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_arch_info *p = ctx->params;

	p->architecture = nvsim_arch->chip_id & ~0xfU;
	p->implementation = nvsim_arch->chip_id & 0xfU;
	p->revision = 0xa1;
	p->subRevision = 0;
	return NV_OK;
}

/* ctrl0080gpu.h: NV0080_CTRL_GPU_QUERY_SW_STATE_PERSISTENCE_PARAMS */
#define NVSIM_CTRL_QUERY_SW_STATE_PERSISTENCE 0x00800288
#define NVSIM_SW_STATE_PERSISTENCE_DISABLED 1

/*
 * device_ctrl.c, deviceCtrlCmdGpuQueryGpuSwStatePersistence:
 * PDB_PROP_GPU_PERSISTENT_SW_STATE, which only
 * NV0080_CTRL_CMD_GPU_MODIFY_SW_STATE_PERSISTENCE sets (persistence mode,
 * nvidia-persistenced); nothing sets it on nvsim: DISABLED.
 */
static NV_STATUS nvsim_ctrl_persistence(struct nvsim_ctrl_ctx *ctx)
{
	u32 *state = ctx->params;

	*state = NVSIM_SW_STATE_PERSISTENCE_DISABLED;
	return NV_OK;
}

/* ctrl0080gpu.h: NV0080_CTRL_GPU_GET_VGX_CAPS_PARAMS, one NvBool */
#define NVSIM_CTRL_GET_VGX_CAPS 0x0080028e

/* device_ctrl.c, deviceCtrlCmdGpuGetVgxCaps: isVgx NV_FALSE, always. */
static NV_STATUS nvsim_ctrl_vgx_caps(struct nvsim_ctrl_ctx *ctx)
{
	u8 *is_vgx = ctx->params;

	*is_vgx = 0;
	return NV_OK;
}

/* ctrl0080gpu.h: NV0080_CTRL_GPU_GET_BRAND_CAPS_PARAMS */
#define NVSIM_CTRL_GET_BRAND_CAPS 0x00800294

/*
 * deviceCtrlCmdGpuGetBrandCaps (g_device_nvoc.c: RMCTRL_FLAGS_ROUTE_TO_PHYSICAL,
 * so on a GSP client GSP answers; its handler is not in the open source):
 * the QUADRO, NVS and TITAN brand bits.  nvsim's boards (arch.c: a GH100
 * data-centre board, a GA102 GeForce) carry none of them.
 */
static NV_STATUS nvsim_ctrl_brand_caps(struct nvsim_ctrl_ctx *ctx)
{
	u32 *brands = ctx->params;

	*brands = 0;
	return NV_OK;
}

/* ctrl2080bus.h: NV2080_CTRL_BUS_GET_PCI_INFO_PARAMS */
#define NVSIM_CTRL_BUS_GET_PCI_INFO 0x20801801
struct nvsim_bus_pci_info {
	u32 pciDeviceId;
	u32 pciSubSystemId;
	u32 pciRevisionId;
	u32 pciExtDeviceId;
};

/*
 * kern_bus_ctrl.c, subdeviceCtrlCmdBusGetPciInfo, from idInfo, which
 * gpuGetIdInfo_GH100 (kern_gpu_gh100.c) reads from config space:
 * PCIDeviceID the config ID dword (device << 16 | vendor),
 * PCISubDeviceID the subsystem dword, PCIRevisionID the revision byte;
 * pciExtDeviceId the device field (NV_CONFIG_PCI_NV_0_DEVICE_ID, 31:16).
 * nvsim's config space is the card info's (rm.c): NVIDIA's vendor, arch.c's
 * device; no subsystem (0) and revision 0xa1, as nvsim_ctrl_arch_info.
 */
static NV_STATUS nvsim_ctrl_bus_pci_info(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_bus_pci_info *p = ctx->params;

	p->pciDeviceId = (u32)nvsim_pci_device_id << 16 | NVSIM_PCI_VENDOR_ID;
	p->pciSubSystemId = 0;
	p->pciRevisionId = 0xa1;
	p->pciExtDeviceId = nvsim_pci_device_id;
	return NV_OK;
}

/* ctrl0080gpu.h: NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS */
#define NVSIM_CTRL_GET_CLASSLIST_V2 0x00800292
#define NVSIM_CLASSLIST_MAX_SIZE 160
struct nvsim_classlist_v2 {
	u32 numClasses;
	u32 classList[NVSIM_CLASSLIST_MAX_SIZE];
};

/*
 * device_ctrl.c, deviceCtrlCmdGpuGetClasslistV2: gpuGetClassList
 * (gpu_resource_desc.c) of every engine into the embedded array of 160;
 * more classes than that: NV_ERR_INVALID_PARAM_STRUCT.
 */
static NV_STATUS nvsim_ctrl_classlist_v2(struct nvsim_ctrl_ctx *ctx)
{
	struct nvsim_classlist_v2 *p = ctx->params;
	unsigned int n = nvsim_arch_classlist(NULL, 0, NVSIM_ENG_ANY, 0);

	if (n > NVSIM_CLASSLIST_MAX_SIZE)
		return NV_ERR_INVALID_PARAM_STRUCT;
	p->numClasses = nvsim_arch_classlist(p->classList,
					     NVSIM_CLASSLIST_MAX_SIZE,
					     NVSIM_ENG_ANY, 0);
	return NV_OK;
}

/* ctrl2080gpu.h: NV2080_CTRL_GPU_QUERY_COMPUTE_MODE_RULES_PARAMS */
#define NVSIM_CTRL_QUERY_COMPUTE_MODE_RULES 0x20800131
#define NVSIM_COMPUTE_MODE_RULES_NONE 0

/*
 * subdevice_ctrl_gpu_kernel.c, subdeviceCtrlCmdGpuQueryComputeModeRules:
 * pGpu->computeModeRules, NONE unless the RmComputeModeRules registry key
 * says otherwise (gpu_registry.c) or SET_COMPUTE_MODE_RULES (privileged,
 * not answered by nvsim) changes it: NONE, NVML's "Default".
 */
static NV_STATUS nvsim_ctrl_compute_mode_rules(struct nvsim_ctrl_ctx *ctx)
{
	u32 *rules = ctx->params;

	*rules = NVSIM_COMPUTE_MODE_RULES_NONE;
	return NV_OK;
}

static const struct nvsim_ctrl nvsim_monitor[] = {
	{ NVSIM_CTRL_QUERY_COMPUTE_MODE_RULES, sizeof(u32),
	  SUBDEVICE, nvsim_ctrl_compute_mode_rules, NULL },
	{ NVSIM_CTRL_GET_CLASSLIST_V2, sizeof(struct nvsim_classlist_v2),
	  DEVICE, nvsim_ctrl_classlist_v2, NULL },
	{ NVSIM_CTRL_BUS_GET_PCI_INFO, sizeof(struct nvsim_bus_pci_info),
	  SUBDEVICE, nvsim_ctrl_bus_pci_info, NULL },
	{ NVSIM_CTRL_GET_BRAND_CAPS, sizeof(u32),
	  DEVICE, nvsim_ctrl_brand_caps, NULL },
	{ NVSIM_CTRL_QUERY_SW_STATE_PERSISTENCE, sizeof(u32),
	  DEVICE, nvsim_ctrl_persistence, NULL },
	{ NVSIM_CTRL_GET_VGX_CAPS, sizeof(u8),
	  DEVICE, nvsim_ctrl_vgx_caps, NULL },
	{ NVSIM_CTRL_MC_GET_ARCH_INFO, sizeof(struct nvsim_arch_info),
	  SUBDEVICE, nvsim_ctrl_arch_info, NULL },
	{ NVSIM_CTRL_TIMER_GPU_CPU_TIME, sizeof(struct nvsim_time_corr),
	  SUBDEVICE, nvsim_ctrl_time_corr, NULL },
	{ NVSIM_CTRL_GET_VIRTUALIZATION_MODE, sizeof(u32),
	  DEVICE, nvsim_ctrl_virt_mode, NULL },
};

const struct nvsim_ctrl_table nvsim_monitor_ctrls = {
	nvsim_monitor, ARRAY_SIZE(nvsim_monitor)
};
