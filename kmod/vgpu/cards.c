// SPDX-License-Identifier: GPL-2.0
/*
 * cards.c - the escapes that name GPUs, answered for the slice's: CARD_INFO
 * filtered and renumbered, STATUS_CODE and ATTACH_GPUS_TO_FD checked,
 * NUMA_INFO's size cut to the quota.
 */
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/string.h>

#include "vgpu.h"

/*
 * The driver's own CARD_INFO, every GPU, made on a call page: outputs only,
 * read back where a sibling may have rewritten them (call.c).  kfree() it.
 */
static nv_ioctl_card_info_t *vgpu_real_cards(struct vgpu_file *vf)
{
	nv_ioctl_card_info_t *real;
	long ret;

	real = kcalloc(NVIDIA_MAX_GPUS, sizeof(*real), GFP_KERNEL_ACCOUNT);
	if (!real)
		return ERR_PTR(-ENOMEM);
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_CARD_INFO, real,
			   NVIDIA_MAX_GPUS * sizeof(*real), NULL, 0);
	if (ret) {
		kfree(real);
		return ERR_PTR(ret);
	}
	return real;
}

int vgpu_card_info(struct vgpu_file *vf, void __user *uptr, u32 size)
{
	struct vgpu_slice *s = vf->slice;
	const u32 nreal = NVIDIA_MAX_GPUS;
	nv_ioctl_card_info_t *real = NULL, *out;
	u32 n = size / sizeof(*out), i, j;
	int ret = 0;

	if (size == 0 || size % sizeof(*out))
		return -EINVAL;
	out = kzalloc(size, GFP_KERNEL_ACCOUNT);
	if (!out)
		return -ENOMEM;
	/* A forged answer deceives only the caller (filtered below). */
	real = vgpu_real_cards(vf);
	if (IS_ERR(real)) {
		ret = PTR_ERR(real);
		real = NULL;
		goto out;
	}
	/* As the driver: an array shorter than the GPUs is an error. */
	if (n < s->nr_gpus) {
		ret = -EINVAL;
		goto copy;
	}
	for (i = 0; i < s->nr_gpus; i++) {
		for (j = 0; j < nreal; j++) {
			if (real[j].valid &&
			    real[j].minor_number == s->gpus[i].real_minor) {
				out[i] = real[j];
				out[i].minor_number = i;
				memset(out[i].dev_name, 0, sizeof(out[i].dev_name));
				snprintf((char *)out[i].dev_name,
					 sizeof(out[i].dev_name), "nvidia%u", i);
				break;
			}
		}
	}
copy:
	if (copy_to_user(uptr, out, size))
		ret = -EFAULT;
out:
	kfree(real);
	kfree(out);
	return ret;
}

/*
 * NV_ESC_STATUS_CODE names a GPU by PCI address; the driver answers for any
 * (escape.c, nv_get_adapter_state).  Forwarded only for an address the
 * driver's own CARD_INFO gives one of the slice's GPUs; any other gets the
 * driver's answer for an address it does not know (-EINVAL).  That
 * CARD_INFO comes back through the call page: a sibling that rewrites it
 * after the driver's copy-out gets another GPU's adapter status code, and
 * nothing else (vgpu.ko keeps no PCI address of its own to check against).
 */
int vgpu_status_code(struct vgpu_file *vf, nv_ioctl_status_code_t *p)
{
	struct vgpu_slice *s = vf->slice;
	nv_ioctl_card_info_t *real;
	bool ours = false;
	u32 i, j;

	real = vgpu_real_cards(vf);
	if (IS_ERR(real))
		return PTR_ERR(real);
	for (j = 0; j < NVIDIA_MAX_GPUS && !ours; j++) {
		if (!real[j].valid || real[j].pci_info.domain != p->domain ||
		    real[j].pci_info.bus != p->bus ||
		    real[j].pci_info.slot != p->slot)
			continue;
		for (i = 0; i < s->nr_gpus; i++)
			ours |= real[j].minor_number == s->gpus[i].real_minor;
	}
	kfree(real);
	if (!ours)
		return -EINVAL;
	return vgpu_call_nv(vf, vf->real, NV_ESC_STATUS_CODE, p, sizeof(*p),
			    NULL, 0);
}

/*
 * NV_ESC_NUMA_INFO, on a GPU node only (nv.c, NV_ACTUAL_DEVICE_ONLY): the
 * GPU's memory as a NUMA node, which only coherent platforms have
 * (rm_get_gpu_numa_info; elsewhere nid is NV0000_CTRL_NO_NUMA_NODE and the
 * sizes 0).  The size becomes the slice's quota at most.  What this does not
 * do: memory onlined as a NUMA node is handed out by the kernel's page
 * allocator, not by RM, so vgpu.ko's quota does not bound what a container
 * on a coherent platform allocates through it (docs/mediator.md).
 */
int vgpu_numa_info(struct vgpu_file *vf, nv_ioctl_numa_info_t *p, u32 size)
{
	u64 limit;
	int ret;

	if (vf->kind != VGPU_KIND_GPU || size != sizeof(*p))
		return -EINVAL;
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_NUMA_INFO, p, size, NULL, 0);
	if (ret)
		return ret;
	limit = READ_ONCE(vf->slice->gpus[vf->gpu].limit);
	if (p->nid >= 0)
		p->numa_mem_size = min(p->numa_mem_size, limit);
	return 0;
}

int vgpu_attach_gpus(struct vgpu_file *vf, void __user *uptr, u32 size)
{
	struct vgpu_slice *s = vf->slice;
	u32 n = size / sizeof(u32), i, j;
	u32 *ids;
	int ret;

	if (n == 0 || size % sizeof(u32))
		return -EINVAL;
	ids = memdup_user(uptr, size);
	if (IS_ERR(ids))
		return PTR_ERR(ids);
	/* Only the slice's GPUs; 0 is a hole, as in the driver. */
	for (i = 0; i < n; i++) {
		if (!ids[i])
			continue;
		for (j = 0; j < s->nr_gpus; j++)
			if (s->gpus[j].gpu_id == ids[i])
				break;
		if (j == s->nr_gpus) {
			ret = -EINVAL;
			goto out;
		}
	}
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_ATTACH_GPUS_TO_FD, ids, size,
			   NULL, 0);
out:
	kfree(ids);
	return ret;
}
