/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nvrel_alias.h - TEMPORARY: releases presented with another release's
 * tables until tools/nvgen measures their own.  535.261.03 (Debian's
 * non-free packages, whose nvidia-smi, libnvidia-ml and libcuda the tests
 * run) takes 535.288.01's tables.  Included after nvrel_tables.h by the
 * file of each module that includes it; dropped when nvrel_tables.h lists
 * 535.261.03 itself.
 */
#ifndef NVREL_ALIAS_H
#define NVREL_ALIAS_H

/* The release @name is an alias of, under its own name, or NULL. */
static inline const struct nvrel_release *nvrel_alias(const char *name)
{
	static const struct { const char *name, *as; } aliases[] = {
		{ "535.261.03", "535.288.01" },
	};
	static struct nvrel_release alias;
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(aliases); i++) {
		if (strcmp(aliases[i].name, name))
			continue;
		for (j = 0; j < ARRAY_SIZE(nvrel_releases); j++) {
			if (strcmp(nvrel_releases[j].name, aliases[i].as))
				continue;
			alias = nvrel_releases[j];
			alias.name = aliases[i].name;
			return &alias;
		}
	}
	return NULL;
}

#endif /* NVREL_ALIAS_H */
