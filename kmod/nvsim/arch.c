// SPDX-License-Identifier: GPL-2.0
/*
 * arch.c - the chip a simulated GPU is, chosen from its name (gpu_name=).
 *
 * A real GPU's class list is its chip's class database: the generic list,
 * the chip's engine-less list and its per-engine list, in that order, one
 * entry per class (595.45.04: gpu.c, _gpuCreateEngineOrderList;
 * gpu_resource_desc.c, gpuBuildClassDB_IMPL and gpuGetClassList_IMPL, which
 * skips the repeats of multi-instance engines; the lists are
 * g_gpu_class_list.c's gpuGetGenericClassList_IMPL,
 * gpuGetNoEngClassList_GH100/_GA102 and gpuGetEngClassDescriptorList_GH100/
 * _GA102).  nvsim lists, in that order, the classes of those lists that it
 * implements: every class it lists can be allocated, and a class of its
 * table that the chip does not list is refused as RM refuses a class its
 * GPU does not support (resservResourceFactory: NV_ERR_NOT_SUPPORTED).
 *
 * Two chips: GH100 (a data-centre Hopper, the default "NVIDIA nvsim H100")
 * and GA102 (a consumer Ampere, "NVIDIA GeForce RTX 3090").  The figures
 * of the GR and GPU info controls are each chip's public ones (SM version,
 * GPC/TPC/SM counts), not read from any driver.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kernel.h>
#include <linux/string.h>

#include "nvsim.h"

/* Engine instances 0 .. n-1 */
#define INSTANCES(n)    ((1u << (n)) - 1)

/* Generic and engine-less classes nvsim implements (both chips list them). */
#define NVSIM_GENERIC_CLASSES                                           \
	{ NV01_DEVICE_0, NVSIM_ENG_GPU, 1 },                            \
	{ NV01_EVENT, NVSIM_ENG_GPU, 1 },                               \
	{ NV01_EVENT_OS_EVENT, NVSIM_ENG_GPU, 1 },                      \
	{ NV01_MEMORY_SYSTEM, NVSIM_ENG_GPU, 1 },                       \
	{ NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, NVSIM_ENG_GPU, 1 },         \
	{ NV01_ROOT, NVSIM_ENG_GPU, 1 },                                \
	{ NV01_ROOT_CLIENT, NVSIM_ENG_GPU, 1 },                         \
	{ NV01_ROOT_NON_PRIV, NVSIM_ENG_GPU, 1 },                       \
	{ NV20_SUBDEVICE_0, NVSIM_ENG_GPU, 1 },                         \
	{ NV01_MEMORY_LOCAL_PRIVILEGED, NVSIM_ENG_GPU, 1 },                \
	/* gpuGetNoEngClassList_GH100/_GA102 */                         \
	{ GT200_DEBUGGER, NVSIM_ENG_GPU, 1 }

/* g_gpu_class_list.c, gpuGetEngClassDescriptorList_GH100 (GR 0..7, CE 0..9). */
static const struct nvsim_arch_class nvsim_gh100_classes[] = {
	NVSIM_GENERIC_CLASSES,
	{ AMPERE_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ AMPERE_USERMODE_A, NVSIM_ENG_GPU, 1 },
	{ FERMI_CONTEXT_SHARE_A, NVSIM_ENG_FIFO, 1 },
	{ FERMI_TWOD_A, NVSIM_ENG_GR, 1 },
	{ FERMI_VASPACE_A, NVSIM_ENG_DMA, 1 },
	{ HOPPER_A, NVSIM_ENG_GR, 1 },
	{ HOPPER_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ HOPPER_COMPUTE_A, NVSIM_ENG_GR, INSTANCES(8) },
	{ HOPPER_DMA_COPY_A, NVSIM_ENG_CE, INSTANCES(10) },
	{ HOPPER_USERMODE_A, NVSIM_ENG_GPU, 1 },
	{ KEPLER_CHANNEL_GROUP_A, NVSIM_ENG_FIFO, 1 },
	{ KEPLER_INLINE_TO_MEMORY_B, NVSIM_ENG_GR, 1 },
	{ NV01_MEMORY_LOCAL_USER, NVSIM_ENG_SW, 1 },
	{ NV01_MEMORY_VIRTUAL, NVSIM_ENG_DMA, 1 },
	{ NV50_MEMORY_VIRTUAL, NVSIM_ENG_DMA, 1 },
	{ TURING_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ TURING_USERMODE_A, NVSIM_ENG_GPU, 1 },
	{ VOLTA_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ VOLTA_USERMODE_A, NVSIM_ENG_GPU, 1 },
};

/* g_gpu_class_list.c, gpuGetEngClassDescriptorList_GA102 (GR 0, CE 0..4). */
static const struct nvsim_arch_class nvsim_ga102_classes[] = {
	NVSIM_GENERIC_CLASSES,
	{ AMPERE_B, NVSIM_ENG_GR, 1 },
	{ AMPERE_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ AMPERE_COMPUTE_B, NVSIM_ENG_GR, 1 },
	{ AMPERE_DMA_COPY_B, NVSIM_ENG_CE, INSTANCES(5) },
	{ AMPERE_USERMODE_A, NVSIM_ENG_GPU, 1 },
	{ FERMI_CONTEXT_SHARE_A, NVSIM_ENG_FIFO, 1 },
	{ FERMI_TWOD_A, NVSIM_ENG_GR, 1 },
	{ FERMI_VASPACE_A, NVSIM_ENG_DMA, 1 },
	{ KEPLER_CHANNEL_GROUP_A, NVSIM_ENG_FIFO, 1 },
	{ KEPLER_INLINE_TO_MEMORY_B, NVSIM_ENG_GR, 1 },
	{ NV01_MEMORY_LOCAL_USER, NVSIM_ENG_SW, 1 },
	{ NV01_MEMORY_VIRTUAL, NVSIM_ENG_DMA, 1 },
	{ NV50_MEMORY_VIRTUAL, NVSIM_ENG_DMA, 1 },
	{ TURING_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ TURING_USERMODE_A, NVSIM_ENG_GPU, 1 },
	{ VOLTA_CHANNEL_GPFIFO_A, NVSIM_ENG_FIFO, 1 },
	{ VOLTA_USERMODE_A, NVSIM_ENG_GPU, 1 },
};

/*
 * chip_id: decodePmcBoot42ChipId's architecture << 4 | implementation, the
 * xx of the UUID message (gpu_uuid.c: "0x017B for GA10B").  va_bits:
 * the root page level's virtAddrBitHi + 1 (kern_gmmu_fmt_gh10x.c: 56;
 * kern_gmmu_fmt_gp10x.c, which Ampere uses: 48).  Subcontexts: 64 on both
 * (chosen: the real count comes from the GR firmware).
 */
static const struct nvsim_arch nvsim_gh100 = {
	.chip = "GH100",
	.chip_id = 0x180,
	.classes = nvsim_gh100_classes,
	.nr_classes = ARRAY_SIZE(nvsim_gh100_classes),
	.nr_gr = 8,
	.nr_ce = 10,
	.compute_class = HOPPER_COMPUTE_A,
	.copy_class = HOPPER_DMA_COPY_A,
	.sm_version = NV2080_CTRL_GR_INFO_SM_VERSION_9_00,
	.max_warps_per_sm = 64,
	.gpcs = 8,
	.tpc_per_gpc = 9,
	.sm_per_tpc = 2,
	.max_subctx = 64,
	.smc_mode = NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_DISABLED,
	.display = NV2080_CTRL_GPU_INFO_DISPLAY_ENABLED_NO,
	.va_bits = 57,
};

static const struct nvsim_arch nvsim_ga102 = {
	.chip = "GA102",
	.chip_id = 0x172,
	.classes = nvsim_ga102_classes,
	.nr_classes = ARRAY_SIZE(nvsim_ga102_classes),
	.nr_gr = 1,
	.nr_ce = 5,
	.compute_class = AMPERE_COMPUTE_B,
	.copy_class = AMPERE_DMA_COPY_B,
	.sm_version = NV2080_CTRL_GR_INFO_SM_VERSION_8_06,
	.max_warps_per_sm = 48,
	.gpcs = 7,
	.tpc_per_gpc = 6,
	.sm_per_tpc = 2,
	.max_subctx = 64,
	.smc_mode = NV2080_CTRL_GPU_INFO_GPU_SMC_MODE_UNSUPPORTED,
	.display = NV2080_CTRL_GPU_INFO_DISPLAY_ENABLED_YES,
	.va_bits = 49,
};

/* Board names and their PCI device ids; the first match wins. */
static const struct {
	const char *pattern;
	const struct nvsim_arch *arch;
	u16 device_id;
} nvsim_models[] = {
	{ "H100", &nvsim_gh100, 0x2330 },       /* H100 SXM5 80GB */
	{ "GH100", &nvsim_gh100, 0x2330 },
	{ "RTX 3090", &nvsim_ga102, 0x2204 },   /* GeForce RTX 3090 */
	{ "GA102", &nvsim_ga102, 0x2204 },
};

const struct nvsim_arch *nvsim_arch = &nvsim_gh100;
u16 nvsim_pci_device_id = 0x2330;

void nvsim_arch_init(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_models); i++) {
		if (strstr(name, nvsim_models[i].pattern)) {
			nvsim_arch = nvsim_models[i].arch;
			nvsim_pci_device_id = nvsim_models[i].device_id;
			return;
		}
	}
	pr_notice("gpu_name \"%s\" names no chip nvsim knows: simulating a %s\n",
		  name, nvsim_arch->chip);
}

static bool nvsim_arch_class_listed(const struct nvsim_arch_class *c)
{
	/* A class the presented release does not have is not in its list. */
	return !nvsim_rel_lacks(NVREL_CLS, c->hclass);
}

bool nvsim_arch_has_class(u32 hclass)
{
	unsigned int i;

	for (i = 0; i < nvsim_arch->nr_classes; i++)
		if (nvsim_arch->classes[i].hclass == hclass)
			return nvsim_arch_class_listed(&nvsim_arch->classes[i]);
	return false;
}

/**
 * nvsim_arch_classlist - the GPU's classes, as gpuGetClassList_IMPL
 * @out: where to write them, or NULL to count
 * @max: room in @out
 * @eng: NVSIM_ENG_ANY for every class, else only that engine's
 * @inst: the engine instance (GR or CE index)
 *
 * Return: the number of classes; with @out, no more than @max are written
 * (the caller compares).
 */
unsigned int nvsim_arch_classlist(u32 *out, unsigned int max, int eng,
				  unsigned int inst)
{
	const struct nvsim_arch_class *c;
	unsigned int i, n = 0;

	for (i = 0; i < nvsim_arch->nr_classes; i++) {
		c = &nvsim_arch->classes[i];
		if (!nvsim_arch_class_listed(c))
			continue;
		if (eng != NVSIM_ENG_ANY &&
		    (c->eng != eng || inst >= 32 || !(c->inst_mask & (1u << inst))))
			continue;
		if (out && n < max)
			out[n] = c->hclass;
		n++;
	}
	return n;
}

/* The engine a class runs on, for objects allocated under a channel. */
int nvsim_arch_class_engine(u32 hclass)
{
	unsigned int i;

	for (i = 0; i < nvsim_arch->nr_classes; i++)
		if (nvsim_arch->classes[i].hclass == hclass)
			return nvsim_arch->classes[i].eng;
	return NVSIM_ENG_ANY;
}

/* Does the chip list @hclass for that engine instance (a channel's)? */
bool nvsim_arch_engine_has_class(u32 hclass, int eng, unsigned int inst)
{
	const struct nvsim_arch_class *c;
	unsigned int i;

	for (i = 0; i < nvsim_arch->nr_classes; i++) {
		c = &nvsim_arch->classes[i];
		if (c->hclass == hclass && c->eng == eng && inst < 32 &&
		    (c->inst_mask & (1u << inst)))
			return nvsim_arch_class_listed(c);
	}
	return false;
}
