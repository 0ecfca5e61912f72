/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nvrel.h - the NVIDIA driver releases the modules know, and per release
 * the mediation policy with the parameter size of every item.
 *
 * The data is generated (nvrel_tables.h, from kmod/vgpu/policy/<release>.tsv and
 * tools/nvgen/out/<release>/lists.tsv by tools/nvgen/kernel.py); these are
 * its types and the lookup both modules share.  vgpu.ko takes the verdicts,
 * sizes and lists of the real driver's release (policy.c); nvsim takes the
 * sizes of the release it presents (release.c).
 * The layouts in nvabi.h are 595.45.04's.  In every release, each member
 * the code reads lies at 595.45.04's offset, or, for the few structs whose
 * middle grew (NVOS46/47, UVM_MAP_EXTERNAL_ALLOCATION, UVM_FREE), at the
 * same distance from the struct's end, where the code reads it
 * (tests/host/test_kmod_abi.py measures every pinned member; the UVM ones
 * of releases other than 595.45.04 need NVGEN_NVIDIA_GIT).  So a copy of
 * the release's size into a zeroed buffer at least as large as 595.45.04's
 * struct holds the release's struct, read at the right places.
 */
#ifndef NVREL_H
#define NVREL_H

#include <linux/types.h>
#include <linux/bsearch.h>
#include <linux/string.h>

/* What the mediator does with an item (kmod/vgpu/policy/README.md, "Verdicts"). */
enum nvrel_verdict {
	NVREL_FORWARD,
	NVREL_REWRITE,
	NVREL_VIRTUALISE,
	NVREL_REFUSE,           /* never in a table: what its absence means */
};

enum nvrel_kind {
	NVREL_ESC,
	NVREL_CLS,
	NVREL_CTL,
	NVREL_UVM,
	NVREL_NR_KINDS,
};

struct nvrel_item {
	u32 value;              /* escape nr, class, control cmd, UVM cmd */
	u32 size;               /* the params struct the driver copies; 0: none */
	u32 size2;              /* a second accepted size (RM_ALLOC); else = size */
	u16 verdict;            /* enum nvrel_verdict */
	u16 flags;              /* NVREL_F_* */
	u16 nptrs;              /* its lists (NVREL_F_LISTS), else 0 */
	u16 ptr0;               /* index of the first in the release's ptrs */
};

/* The params name a pointer, descriptor or address the driver follows. */
#define NVREL_F_EMBEDDED        (1U << 0)
/*
 * All of them are user lists the driver copies (ptrs[ptr0 .. ptr0+nptrs-1]),
 * so the item may be forwarded with a private copy of each.
 */
#define NVREL_F_LISTS           (1U << 1)

/*
 * One list the params point to (tools/nvgen/out/<release>/lists.tsv): the
 * NvP64 at ptr_off covers count * elem_size bytes, count being the
 * count_size-byte unsigned member at count_off; with count_off ==
 * NVREL_NO_COUNT the list is a constant elem_size bytes.
 */
struct nvrel_ptr {
	u16 ptr_off;
	u16 count_off;          /* NVREL_NO_COUNT: a constant extent */
	u8 count_size;          /* 1, 2, 4 or 8; 0 with NVREL_NO_COUNT */
	u8 pad;
	u16 pad2;
	u32 elem_size;          /* bytes per count unit, or the constant total */
};

#define NVREL_NO_COUNT          0xffff

struct nvrel_table {
	const struct nvrel_item *items;
	size_t n;
};

struct nvrel_release {
	const char *name;       /* NV_VERSION_STRING, e.g. "595.45.04" */
	struct nvrel_table t[NVREL_NR_KINDS];
	const struct nvrel_ptr *ptrs;   /* indexed by nvrel_item.ptr0; NULL: none */
	/*
	 * Sorted: every control the release's RM answers at all, exported by
	 * a class of its own export tables (g_*_nvoc.c) or answered by its
	 * deprecated-control layer through a V2 command.  NULL where only the
	 * release's headers are known (tools/nvgen/README.md).
	 */
	const u32 *answered;
	size_t nanswered;
};

static inline int nvrel_cmp(const void *key, const void *elt)
{
	u32 v = *(const u32 *)key, e = ((const struct nvrel_item *)elt)->value;

	return v < e ? -1 : v > e;
}

/* The item of a release's table, or NULL: refused. */
static inline const struct nvrel_item *
nvrel_lookup(const struct nvrel_release *r, enum nvrel_kind k, u32 value)
{
	if (!r || k >= NVREL_NR_KINDS)
		return NULL;
	return bsearch(&value, r->t[k].items, r->t[k].n,
		       sizeof(struct nvrel_item), nvrel_cmp);
}

static inline int nvrel_u32_cmp(const void *key, const void *elt)
{
	u32 v = *(const u32 *)key, e = *(const u32 *)elt;

	return v < e ? -1 : v > e;
}

/*
 * Is control cmd one the release's RM exports from no class and answers
 * through no deprecated handler?  Such a command is answered
 * NV_ERR_NOT_SUPPORTED by the driver after its client and object lookups
 * (resControlLookup_IMPL, rs_resource.c).  False where the release's
 * export tables are not known, and for a NULL command (category and index
 * 0: NV_OK before any lookup, _rmapiRmControl).  On a GSP client the
 * deprecated layer hands a legacy GSS command (cmd & 0x8000) to GSP
 * firmware instead (RmGssLegacyRpcCmd), whose answer is closed: true for
 * those too, so that a mediator answers them as the driver without GSP.
 */
static inline bool nvrel_ctl_unexported(const struct nvrel_release *r, u32 cmd)
{
	if (!r || !r->answered || !(cmd & 0xffff))
		return false;
	return !bsearch(&cmd, r->answered, r->nanswered, sizeof(u32), nvrel_u32_cmp);
}

/* Does size match one of the item's accepted sizes? */
static inline bool nvrel_size_ok(const struct nvrel_item *it, u32 size)
{
	return it && (size == it->size || size == it->size2);
}

#endif /* NVREL_H */
