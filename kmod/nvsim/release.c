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
