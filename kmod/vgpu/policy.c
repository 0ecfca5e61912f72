// SPDX-License-Identifier: GPL-2.0
/*
 * policy.c - the real driver's release and its mediation tables.
 *
 * The release is the driver's own version string, learnt from
 * nvidia_get_rm_ops at load (rmapi.c).  Each release has its own table of
 * verdicts and parameter sizes (nvrel_tables.h, generated from
 * kmod/vgpu/policy/<release>.tsv): no copy of a caller's parameters is sized
 * from anything else.  A release without tables is refused at load; the
 * module parameter nvidia_release names a known release to use instead,
 * for an operator who has checked that the two agree.
 */
#include <linux/module.h>
#include <linux/kernel.h>

#include "vgpu.h"
#include "nvrel_tables.h"

static char *vgpu_nvidia_release = "";
module_param_named(nvidia_release, vgpu_nvidia_release, charp, 0444);
MODULE_PARM_DESC(nvidia_release,
		 "treat the driver as this release (one vgpu.ko has tables for) when its own release has none");

const struct nvrel_release *vgpu_rel;
bool vgpu_rmapi_nvos21;

static const struct nvrel_release *vgpu_rel_by_name(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvrel_releases); i++)
		if (!strcmp(nvrel_releases[i].name, name))
			return &nvrel_releases[i];
	return NULL;
}

/* The major of a release name ("575.64.05" -> 575), 0 if it has none. */
static unsigned int vgpu_rel_major(const char *name)
{
	unsigned int major = 0;

	return sscanf(name, "%u.", &major) == 1 ? major : 0;
}

/**
 * vgpu_policy_select - choose the tables for the driver's release
 * @driver: the version string nvidia_get_rm_ops gave
 *
 * Return: 0, or -ENOPKG (with a log line saying what to do) when vgpu.ko
 * has no tables for it and nvidia_release does not name a release it has.
 */
int vgpu_policy_select(const char *driver)
{
	const struct nvrel_release *r = vgpu_rel_by_name(driver);
	size_t i;

	if (!r && vgpu_nvidia_release[0]) {
		r = vgpu_rel_by_name(vgpu_nvidia_release);
		if (!r) {
			pr_err("nvidia_release=%s: no tables for that release\n",
			       vgpu_nvidia_release);
			return -EINVAL;
		}
		pr_warn("driver %s has no tables: using %s's (nvidia_release)\n",
			driver, r->name);
	}
	if (!r) {
		pr_err("driver release %s has no mediation tables; known:", driver);
		for (i = 0; i < ARRAY_SIZE(nvrel_releases); i++)
			pr_cont(" %s", nvrel_releases[i].name);
		pr_cont(" (nvidia_release=<known> loads with another release's tables)\n");
		return -ENOPKG;
	}
	vgpu_rel = r;
	/*
	 * nv-kernel-rmapi-ops.h: the kernel entry's NV04_ALLOC takes
	 * NVOS21_PARAMETERS up to 570 and NVOS64_PARAMETERS from 575 on.
	 */
	vgpu_rmapi_nvos21 = vgpu_rel_major(r->name) < 575;
	pr_info("mediating with the tables of release %s\n", r->name);
	return 0;
}

/* The item of the current release, or NULL: refused. */
const struct nvrel_item *vgpu_verdict(enum nvrel_kind k, u32 value)
{
	return nvrel_lookup(vgpu_rel, k, value);
}

/* Does the release's RM export control cmd from no class?  (nvrel.h) */
bool vgpu_ctl_unexported(u32 cmd)
{
	return nvrel_ctl_unexported(vgpu_rel, cmd);
}

/* The parameter size of an item the release forwards, or 0 if it has none. */
u32 vgpu_rel_size(enum nvrel_kind k, u32 value)
{
	const struct nvrel_item *it = vgpu_verdict(k, value);

	return it ? it->size : 0;
}

/**
 * vgpu_list_extent - where list i of a control lies, read from a kernel copy
 * kp of size bytes of its params: *ptr_off, the pointer and its extent in
 * bytes (0 for a NULL pointer or a zero count).  NV_ERR_INVALID_PARAM_STRUCT
 * when the release's table places a member outside size; the extent is
 * not bounded here (callers bound it their own way).
 */
NV_STATUS vgpu_list_extent(const struct nvrel_item *item, u32 i, const void *kp,
			   u32 size, u32 *ptr_off, u64 *uptr, u64 *bytes)
{
	const struct nvrel_ptr *ptr = &vgpu_rel->ptrs[item->ptr0 + i];
	u64 count;

	*bytes = 0;
	*ptr_off = ptr->ptr_off;
	if (ptr->ptr_off + sizeof(u64) > size)
		return NV_ERR_INVALID_PARAM_STRUCT;
	*uptr = *(const u64 *)(kp + ptr->ptr_off);
	if (!*uptr)
		return NV_OK;
	if (ptr->count_off == NVREL_NO_COUNT) {
		*bytes = ptr->elem_size;
		return NV_OK;
	}
	if (ptr->count_off + ptr->count_size > size)
		return NV_ERR_INVALID_PARAM_STRUCT;
	switch (ptr->count_size) {
	case 1: count = *(const u8 *)(kp + ptr->count_off); break;
	case 2: count = *(const u16 *)(kp + ptr->count_off); break;
	case 4: count = *(const u32 *)(kp + ptr->count_off); break;
	case 8: count = *(const u64 *)(kp + ptr->count_off); break;
	default: return NV_ERR_NOT_SUPPORTED;
	}
	if (check_mul_overflow(count, (u64)ptr->elem_size, bytes))
		return NV_ERR_INVALID_ARGUMENT;
	return NV_OK;
}

const char *vgpu_release_name(void)
{
	return vgpu_rel ? vgpu_rel->name : "";
}
