// SPDX-License-Identifier: GPL-2.0
/*
 * release.c - the driver release nvsim presents (driver_version) and the
 * parameter sizes that release's driver checks.
 *
 * The sizes come from the same generated tables vgpu.ko mediates with
 * (nvrel_tables.h, measured by tools/nvgen against each release's
 * headers), which list what the policy does not refuse.  For an item they
 * do not list, nvsim keeps 595.45.04's size (nvabi.h): vgpu.ko never
 * forwards such an item, so only a test that calls nvsim directly can
 * tell, and those use 595.45.04's layouts.
 */
#include <linux/kernel.h>

#include "nvsim.h"
#include "nvrel_tables.h"

const struct nvrel_release *nvsim_rel;
bool nvsim_rmapi_nvos21;

int nvsim_release_init(const char *version)
{
	unsigned int major = 0;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvrel_releases); i++)
		if (!strcmp(nvrel_releases[i].name, version))
			nvsim_rel = &nvrel_releases[i];
	if (!nvsim_rel) {
		pr_err("driver_version=%s: not a release nvsim has tables for:",
		       version);
		for (i = 0; i < ARRAY_SIZE(nvrel_releases); i++)
			pr_cont(" %s", nvrel_releases[i].name);
		pr_cont("\n");
		return -EINVAL;
	}
	/* nv-kernel-rmapi-ops.h: NV04_ALLOC takes NVOS21 up to 570. */
	if (sscanf(version, "%u.", &major) == 1)
		nvsim_rmapi_nvos21 = major < 575;
	return 0;
}

/* The release's size of an item, or fallback (595.45.04's) if not listed. */
u32 nvsim_rel_size(enum nvrel_kind k, u32 value, u32 fallback)
{
	const struct nvrel_item *it = nvrel_lookup(nvsim_rel, k, value);

	return it ? it->size : fallback;
}

/*
 * The release nvsim's own layouts and handlers are written for; the tables
 * list every item it does not refuse.
 */
#define NVSIM_BASE_RELEASE "595.45.04"

static const struct nvrel_release *nvsim_base_release(void)
{
	static const struct nvrel_release *base;
	size_t i;

	if (!base)
		for (i = 0; i < ARRAY_SIZE(nvrel_releases); i++)
			if (!strcmp(nvrel_releases[i].name, NVSIM_BASE_RELEASE))
				base = &nvrel_releases[i];
	return base;
}

/**
 * nvsim_rel_lacks - does the presented release lack an item 595.45.04 has?
 * @k: class or control (or escape, UVM command)
 * @value: its number
 *
 * An item the policy forwards in 595.45.04 and that the presented
 * release's table does not list is one that release does not have (the
 * policy decides other releases by 595.45.04's flags, by name, so it would
 * be listed).  Such a class is refused as RM refuses a class its resource
 * list lacks (resource_desc.c, RsResInfoByExternalClassId failing:
 * NV_ERR_INVALID_CLASS), a control as one no class exports
 * (NV_ERR_NOT_SUPPORTED).  Items 595.45.04 does not list are not judged.
 */
bool nvsim_rel_lacks(enum nvrel_kind k, u32 value)
{
	const struct nvrel_release *base = nvsim_base_release();

	if (!base || nvsim_rel == base)
		return false;
	return nvrel_lookup(base, k, value) && !nvrel_lookup(nvsim_rel, k, value);
}

/*
 * NV2080_CTRL_GR_INFO_MAX_SIZE of each release (ctrl0080gr.h:
 * NV0080_CTRL_GR_INFO_INDEX_MAX + 1): the bound _kgraphicsCtrlCmdGrGetInfoV2
 * checks indexes against.  The struct's size does not change with it.
 */
u32 nvsim_rel_gr_info_max(void)
{
	static const struct { const char *rel; u32 max; } t[] = {
		{ "535.261.03", 0x35 }, { "535.288.01", 0x35 },
		{ "550.163.01", 0x38 },
		{ "570.211.01", 0x3a }, { "575.64.05", 0x3a },
		{ "580.142", 0x3a }, { "590.48.01", 0x3b },
		{ "595.45.04", 0x3b },
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(t); i++)
		if (!strcmp(t[i].rel, nvsim_rel->name))
			return t[i].max;
	return NV2080_CTRL_GR_INFO_MAX_SIZE;
}
