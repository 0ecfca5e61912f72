// SPDX-License-Identifier: GPL-2.0
/*
 * uvm.c - the slice's nvidia-uvm node: plain integer commands (not
 * _IOC-encoded, the size is implied) and an allow-list.
 *
 * A command whose parameters vgpu.ko checks (an hClient that must belong to
 * the named control file) or rewrites (rmCtrlFd, which becomes a proxy of
 * the real control file: fdxlate.c) is made on a call page (call.c): what
 * the UVM driver copies in is what vgpu.ko checked.  The others are
 * forwarded with the caller's pointer: their parameters decide nothing here.
 * UVM_MM_INITIALIZE never reaches the driver: its uvmFd must be a real UVM
 * file, which the UVM driver recognises by f_op (uvm_file_is_nvidia_uvm),
 * so no proxy can stand for it and the real file may not enter the
 * caller's table.  vgpu.ko answers it NV_WARN_NOTHING_TO_DO, the driver's
 * own answer where a VA space has no mm association (uvm_api_mm_initialize:
 * multi-process sharing mode, or uvm_enable_va_space_mm=0); CUDA and
 * tinygrad carry on.  Here the association exists and stays unused, so GPU
 * faults that need the mm (HMM, ATS) go unserved (docs/mediator.md).
 */
#include <linux/uaccess.h>
#include <linux/slab.h>
#include <linux/file.h>
#include <linux/module.h>
#include <linux/sizes.h>

#include "vgpu.h"

/* uvm_ioctl.h: UVM_IOCTL_BASE(29) and (30), in every release. */
#define VGPU_UVM_ENABLE_PEER_ACCESS  29
#define VGPU_UVM_DISABLE_PEER_ACCESS 30
#define VGPU_NV_ERR_INVALID_DEVICE   0x00000026   /* nvstatuscodes.h */

/*
 * The commands vgpu.ko does more with than forward.  Their sizes are the
 * release's (policy.c).  Members are named by their distance from the end
 * of the struct: where the layouts of releases differ (perGpuAttributes
 * grew with UVM_MAX_GPUS, UVM_FREE lost its length), what lies after the
 * change is the same, and what lies before it is at the same offset; both
 * are measured for every release by tests/host/test_kmod_abi.py (for
 * releases other than 595.45.04 only where NVGEN_NVIDIA_GIT gives their
 * uvm_types.h: CI, without that clone, measures 595.45.04's).
 */
struct vgpu_uvm_cmd {
	u32 cmd;
	u32 kstruct;            /* 595.45.04's sizeof, the buffer's least size */
	s32 fd_end;             /* rmCtrlFd's distance from the end, -1: none */
	s32 client_end;         /* hClient's, to check against that file */
};

#define VGPU_UVM_END(t, f)      ((s32)(sizeof(t) - offsetof(t, f)))

static const struct vgpu_uvm_cmd vgpu_uvm_cmds[] = {
	{ UVM_REGISTER_GPU, sizeof(UVM_REGISTER_GPU_PARAMS),
	  VGPU_UVM_END(UVM_REGISTER_GPU_PARAMS, rmCtrlFd),
	  VGPU_UVM_END(UVM_REGISTER_GPU_PARAMS, hClient) },
	{ UVM_REGISTER_GPU_VASPACE, sizeof(UVM_REGISTER_GPU_VASPACE_PARAMS),
	  VGPU_UVM_END(UVM_REGISTER_GPU_VASPACE_PARAMS, rmCtrlFd),
	  VGPU_UVM_END(UVM_REGISTER_GPU_VASPACE_PARAMS, hClient) },
	/*
	 * The UVM driver retains hChannel of hClient through RM by handle
	 * (uvm_user_channel.c, uvm_register_channel); rmCtrlFd it ignores.
	 * hClient must be the named control file's, so the channel is the
	 * caller's own.
	 */
	{ UVM_REGISTER_CHANNEL, sizeof(UVM_REGISTER_CHANNEL_PARAMS),
	  VGPU_UVM_END(UVM_REGISTER_CHANNEL_PARAMS, rmCtrlFd),
	  VGPU_UVM_END(UVM_REGISTER_CHANNEL_PARAMS, hClient) },
	{ UVM_MAP_EXTERNAL_ALLOCATION, sizeof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS),
	  VGPU_UVM_END(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, rmCtrlFd),
	  VGPU_UVM_END(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hClient) },
	{ UVM_FREE, sizeof(UVM_FREE_PARAMS), -1, -1 },
};

static long vgpu_uvm_forward(struct vgpu_file *vf, unsigned int cmd,
			     unsigned long arg)
{
	if (!vf->real->f_op->unlocked_ioctl)
		return -ENOTTY;
	return vf->real->f_op->unlocked_ioctl(vf->real, cmd, arg);
}

/*
 * External mappings, modelled on the UVM driver's own rules
 * (kernel-open/nvidia-uvm, 595.45.04 and 535.261.03), so that a charge
 * goes back only when the driver has certainly let go of what it stands
 * for, whatever status a sibling writes over the driver's on the call page
 * (call.c):
 *  - UVM_CREATE_EXTERNAL_RANGE is the only way to an external VA range
 *    (uvm_map_external.c, uvm_create_external_range ->
 *    uvm_va_range_create_external); ranges never overlap (the range tree
 *    refuses it, NV_ERR_UVM_ADDRESS_IN_USE).
 *  - UVM_MAP_EXTERNAL_ALLOCATION maps inside one such range only
 *    (uvm_map_external_allocation: uvm_va_range_external_find, else
 *    NV_ERR_INVALID_ADDRESS), per GPU, and dups the memory for each
 *    mapping (nvUvmInterfaceDupMemory); it unmaps first what it overlaps
 *    on that GPU (uvm_unmap_external_in_range, splitting at its ends).
 *  - UVM_UNMAP_EXTERNAL unmaps [base, base + length) of one external range
 *    on one GPU (uvm_unmap_external), splitting mappings its ends cut; a
 *    split can fail (uvm_ext_gpu_map_split: alignment, memory), the rest
 *    cannot (uvm_ext_gpu_map_destroy).
 *  - UVM_FREE frees a range only by its start (uvm_va_range.c, uvm_free:
 *    NV_ERR_INVALID_ADDRESS otherwise), and an external range's free
 *    cannot fail: the range goes with every mapping in it.
 *
 * vgpu.ko records every range a CREATE asked for that the driver was
 * called with, whatever came back (a record the driver refused is a range
 * where nothing can be mapped: it only holds charges longer), and answers
 * a CREATE that overlaps a record itself, as the driver would for a real
 * range.  So every external range of the driver is recorded, and the
 * records do not overlap.  A MAP_EXTERNAL takes a charge reference for
 * what vgpu.ko gave the driver, within the record that holds it, whatever
 * status comes back; outside every record the driver refuses it and
 * nothing is taken.  A charge goes back only:
 *  - at UVM_FREE of a record's start (the driver's range and all its
 *    mappings are gone, or it never existed and held none);
 *  - at UVM_UNMAP_EXTERNAL for a GPU, from the mappings of that GPU it
 *    covers whole, when neither of its ends cuts one of that GPU's
 *    mappings in the record (no split: the driver's unmap cannot fail
 *    midway; a GPU the driver does not know has no mappings left);
 *  - at the real file's release (the reaper).
 * A mapping a later MAP overlapped, or an unmap cut, keeps its charge until
 * one of these: the quota's side.  Never on a status read back.  Assumed:
 * a call the driver ran (ioctl returned 0) was not short-circuited by
 * UVM's global fatal error state (uvm_global_get_status), in which the
 * driver does nothing and writes that status.
 * Under vf->uvm_lock, held across the driver call: the model changes with
 * the driver's state and with nothing else.
 */
static bool vgpu_uvm_range_invalid_4k(u64 base, u64 length)
{
	/* uvm_api_range_invalid_4k (uvm_api.h) */
	return !IS_ALIGNED(base, SZ_4K) || !IS_ALIGNED(length, SZ_4K) ||
	       !base || !length || base + length < base;
}

/* The record holding [start, end], or NULL; under vf->uvm_lock. */
static struct vgpu_uvm_range *vgpu_uvm_range_find(struct vgpu_file *vf,
						  u64 start, u64 end)
{
	struct vgpu_uvm_range *r;

	lockdep_assert_held(&vf->uvm_lock);
	list_for_each_entry(r, &vf->uvm_ranges, node)
		if (start >= r->start && end <= r->end)
			return r;
	return NULL;
}

static bool vgpu_uvm_range_overlaps(struct vgpu_file *vf, u64 start, u64 end)
{
	struct vgpu_uvm_range *r;

	lockdep_assert_held(&vf->uvm_lock);
	list_for_each_entry(r, &vf->uvm_ranges, node)
		if (start <= r->end && end >= r->start)
			return true;
	return false;
}

static void vgpu_uvm_ext_free(struct vgpu_uvm_ext *e)
{
	if (e->managed)
		atomic64_sub(e->charge->bytes, &e->charge->slice->uvm_mapped);
	vgpu_charge_put(e->charge);
	kfree(e->uuids);
	kfree(e);
}

/*
 * After MAP_EXTERNAL_ALLOCATION: @e, allocated before the call with the
 * GPUs vgpu.ko gave the driver, takes a reference on the memory's charge
 * and joins @r.  An object without a charge (an OS descriptor: no FB)
 * needs none.
 */
static void vgpu_uvm_ext_add(struct vgpu_file *vf, struct vgpu_uvm_ext *e,
			     NvHandle hclient, NvHandle hmemory)
{
	struct vgpu_charge *charge = NULL;
	struct vgpu_obj *o;

	rcu_read_lock();
	o = vgpu_obj_find(hclient, hmemory);
	/* Maybe another client's, freed meanwhile: vgpu_obj_charge_get. */
	if (o && o->client->slice == vf->slice && !vgpu_obj_charge_get(o, &charge))
		charge = NULL;
	rcu_read_unlock();
	if (!charge) {
		kfree(e->uuids);
		kfree(e);
		return;
	}
	e->charge = charge;
	mutex_lock(&vf->lock);
	list_add_tail(&e->node, &vf->uvm_ext);
	mutex_unlock(&vf->lock);
}

/* UVM_FREE of @r's start: the range and its mappings are gone. */
static void vgpu_uvm_range_drop(struct vgpu_file *vf, struct vgpu_uvm_range *r)
{
	struct vgpu_uvm_ext *e, *tmp;
	LIST_HEAD(gone);

	lockdep_assert_held(&vf->uvm_lock);
	mutex_lock(&vf->lock);
	list_for_each_entry_safe(e, tmp, &vf->uvm_ext, node)
		if (e->range == r)
			list_move(&e->node, &gone);
	list_del(&r->node);
	mutex_unlock(&vf->lock);
	kfree(r);
	list_for_each_entry_safe(e, tmp, &gone, node)
		vgpu_uvm_ext_free(e);
}

static bool vgpu_uvm_ext_on(const struct vgpu_uvm_ext *e, const u8 *uuid)
{
	u32 i;

	for (i = 0; i < e->nr_gpus; i++)
		if (!memcmp(e->uuids[i], uuid, 16))
			return true;
	return false;
}

/*
 * After UVM_UNMAP_EXTERNAL of [start, end] on the GPU @uuid, which the
 * driver ran: what it certainly unmapped gives up that GPU; a mapping on
 * no GPU any more returns its charge reference.
 */
static void vgpu_uvm_unmapped(struct vgpu_file *vf, u64 start, u64 end,
			      const u8 *uuid)
{
	struct vgpu_uvm_range *r = vgpu_uvm_range_find(vf, start, end);
	struct vgpu_uvm_ext *e, *tmp;
	LIST_HEAD(gone);
	u32 i, n;

	if (!r)
		return;         /* the driver refused it: nothing was unmapped */
	mutex_lock(&vf->lock);
	/* An end inside a mapping of that GPU: a split, which can fail. */
	list_for_each_entry(e, &vf->uvm_ext, node) {
		if (e->range != r || !vgpu_uvm_ext_on(e, uuid))
			continue;
		if ((start > e->base && start <= e->end) ||
		    (end >= e->base && end < e->end)) {
			mutex_unlock(&vf->lock);
			return;
		}
	}
	list_for_each_entry_safe(e, tmp, &vf->uvm_ext, node) {
		if (e->range != r || e->base < start || e->end > end)
			continue;
		for (i = n = 0; i < e->nr_gpus; i++)
			if (memcmp(e->uuids[i], uuid, 16))
				memcpy(e->uuids[n++], e->uuids[i], 16);
		if (n == e->nr_gpus)
			continue;
		e->nr_gpus = n;
		if (!n)
			list_move(&e->node, &gone);
	}
	mutex_unlock(&vf->lock);
	list_for_each_entry_safe(e, tmp, &gone, node)
		vgpu_uvm_ext_free(e);
}

/* A released managed range's charge, kept until the real release (managed.c). */
void vgpu_uvm_hold(struct vgpu_file *vf, struct vgpu_uvm_ext *e,
		   struct vgpu_charge *charge)
{
	e->charge = charge;
	e->managed = true;
	mutex_lock(&vf->lock);
	list_add_tail(&e->node, &vf->uvm_held);
	mutex_unlock(&vf->lock);
}

static void vgpu_uvm_put_list(struct list_head *l)
{
	struct vgpu_uvm_ext *e, *tmp;

	list_for_each_entry_safe(e, tmp, l, node) {
		list_del(&e->node);
		vgpu_uvm_ext_free(e);
	}
}

/*
 * The charges a UVM file keeps after vgpu.ko's file is gone, and the real
 * file they wait for.  The VA space holds what they stand for (external
 * mappings' dups of the FB, zombie ranges) until the real file's release;
 * the real file outlives vgpu.ko's when a VMA still holds it as vm_file,
 * e.g. a managed range a fork copied (MADV_DOFORK; the driver disables the
 * copy but the VMA stays).  The reaper waits until its reference is the
 * last one (nothing else can take one then: no fd, no VMA names the file),
 * drops it synchronously, so the driver's release has run, and only then
 * returns the charges.  It pins the module: rmmod is refused meanwhile.
 */
struct vgpu_uvm_reaper {
	struct delayed_work dw;
	struct file *real;
	struct list_head charges;       /* vgpu_uvm_ext */
	unsigned long delay;
};

atomic_t vgpu_nr_reapers = ATOMIC_INIT(0);

static void vgpu_uvm_reap(struct work_struct *work)
{
	struct vgpu_uvm_reaper *rp =
		container_of(to_delayed_work(work), struct vgpu_uvm_reaper, dw);

	if (file_count(rp->real) > 1) {
		rp->delay = clamp(rp->delay * 2, 1UL, (unsigned long)HZ);
		queue_delayed_work(vgpu_wq, &rp->dw, rp->delay);
		return;
	}
	/* A kernel thread: the driver's release runs here, now. */
	__fput_sync(rp->real);
	vgpu_uvm_put_list(&rp->charges);
	kfree(rp);
	atomic_dec(&vgpu_nr_reapers);
	module_put(THIS_MODULE);        /* module exit's destroy_workqueue waits for us */
}

/**
 * vgpu_uvm_release - the UVM file's release
 *
 * Returns true if it took over vf->real (the caller must not drop it).
 * Without charges to keep, the caller drops the real file as any other.
 * Nothing here fails (the reaper is a small __GFP_NOFAIL allocation).
 */
bool vgpu_uvm_release(struct vgpu_file *vf)
{
	struct vgpu_uvm_range *r, *rtmp;
	struct vgpu_uvm_reaper *rp;

	/* No one else can reach vf now: no lock.  The charges keep no range. */
	list_for_each_entry_safe(r, rtmp, &vf->uvm_ranges, node) {
		list_del(&r->node);
		kfree(r);
	}
	list_splice_init(&vf->uvm_held, &vf->uvm_ext);
	if (list_empty(&vf->uvm_ext))
		return false;
	rp = kzalloc(sizeof(*rp), GFP_KERNEL | __GFP_NOFAIL);
	INIT_DELAYED_WORK(&rp->dw, vgpu_uvm_reap);
	INIT_LIST_HEAD(&rp->charges);
	list_splice_init(&vf->uvm_ext, &rp->charges);
	rp->real = vf->real;
	__module_get(THIS_MODULE);      /* we run inside our fops' release */
	atomic_inc(&vgpu_nr_reapers);
	queue_delayed_work(vgpu_wq, &rp->dw, 0);
	return true;
}

/*
 * UVM_FREE, UVM_CREATE_EXTERNAL_RANGE and UVM_UNMAP_EXTERNAL, on a call
 * page: what vgpu.ko models is what the driver read.  Their parameters
 * begin with base (and length) and end with rmStatus and 4 bytes of
 * padding in every release (UVM_FREE had a length between them up to 580).
 */
static long vgpu_uvm_range_cmd(struct vgpu_file *vf, unsigned int cmd,
			       void __user *u, u32 size)
{
	u8 k[48] __aligned(8) = {};
	const u32 status_end = VGPU_UVM_END(UVM_FREE_PARAMS, rmStatus);
	struct vgpu_uvm_range *r = NULL;
	u64 base, length = 0;
	u8 uuid[16] = {};
	long ret;

	BUILD_BUG_ON(VGPU_UVM_END(UVM_CREATE_EXTERNAL_RANGE_PARAMS, rmStatus) != status_end);
	BUILD_BUG_ON(VGPU_UVM_END(UVM_UNMAP_EXTERNAL_PARAMS, rmStatus) != status_end);
	if (size > sizeof(k) || size < status_end + 8 ||
	    (cmd == UVM_CREATE_EXTERNAL_RANGE && size < status_end + 16) ||
	    (cmd == UVM_UNMAP_EXTERNAL && size < status_end + 32))
		return -EPERM;
	if (copy_from_user(k, u, size))
		return -EFAULT;
	base = *(u64 *)k;
	if (cmd != UVM_FREE)
		length = *(u64 *)(k + 8);
	if (cmd == UVM_UNMAP_EXTERNAL)
		memcpy(uuid, k + offsetof(UVM_UNMAP_EXTERNAL_PARAMS, gpuUuid), 16);
	/* The record is made before the call: after it, it cannot fail. */
	if (cmd == UVM_CREATE_EXTERNAL_RANGE &&
	    !vgpu_uvm_range_invalid_4k(base, length)) {
		r = kzalloc(sizeof(*r), GFP_KERNEL);
		if (!r)
			return -ENOMEM;
		r->start = base;
		r->end = base + length - 1;
	}
	mutex_lock(&vf->uvm_lock);
	if (r && vgpu_uvm_range_overlaps(vf, r->start, r->end)) {
		/* The driver's answer for a range that overlaps a real one. */
		*(NV_STATUS *)(k + size - status_end) = NV_ERR_UVM_ADDRESS_IN_USE;
		kfree(r);
		ret = 0;
		goto out;
	}
	ret = vgpu_call_uvm(vf, cmd, k, size);
	if (r) {
		/* Whatever came back (and even if the call broke). */
		mutex_lock(&vf->lock);
		list_add_tail(&r->node, &vf->uvm_ranges);
		mutex_unlock(&vf->lock);
	}
	if (ret)
		goto out;
	if (cmd == UVM_FREE) {
		r = vgpu_uvm_range_find(vf, base, base);
		if (r && r->start == base)
			vgpu_uvm_range_drop(vf, r);
	} else if (cmd == UVM_UNMAP_EXTERNAL &&
		   !vgpu_uvm_range_invalid_4k(base, length)) {
		vgpu_uvm_unmapped(vf, base, base + length - 1, uuid);
	}
out:
	mutex_unlock(&vf->uvm_lock);
	if (!ret && copy_to_user(u, k, size))
		ret = -EFAULT;
	return ret;
}

/*
 * Before MAP_EXTERNAL_ALLOCATION: the mapping the driver may make from
 * vgpu.ko's copy @k -- [base, base + length) in the recorded range that
 * holds it, on the GPUs of perGpuAttributes (UUID first in each 36-byte
 * UvmGpuMappingAttributes, from offset 24; gpuAttributesCount at the end,
 * bounded by the release's array) -- allocated now, so that nothing can
 * fail once the driver has mapped.  *@e stays NULL where the driver maps
 * nothing (no recorded range holds it).  Returns with vf->uvm_lock held,
 * or an errno without.
 */
#define VGPU_UVM_MAP_ATTR_OFF   24
#define VGPU_UVM_MAP_ATTR_SIZE  36

static long vgpu_uvm_map_prepare(struct vgpu_file *vf, const u8 *k, u32 size,
				 struct vgpu_uvm_ext **e)
{
	const s32 count_end = VGPU_UVM_END(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS,
					   gpuAttributesCount);
	u64 base, length, count, cap;
	struct vgpu_uvm_range *r;
	struct vgpu_uvm_ext *n;
	u32 i;

	BUILD_BUG_ON(offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, base));
	BUILD_BUG_ON(offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, perGpuAttributes) !=
		     VGPU_UVM_MAP_ATTR_OFF);
	base = *(const u64 *)k;
	length = *(const u64 *)(k + 8);
	count = *(const u64 *)(k + size - count_end);
	cap = (size - count_end - VGPU_UVM_MAP_ATTR_OFF) / VGPU_UVM_MAP_ATTR_SIZE;
	count = min(count, cap);
	*e = NULL;
	n = kzalloc(sizeof(*n), GFP_KERNEL);
	if (!n)
		return -ENOMEM;
	if (count) {
		n->uuids = kcalloc(count, 16, GFP_KERNEL);
		if (!n->uuids) {
			kfree(n);
			return -ENOMEM;
		}
	}
	for (i = 0; i < count; i++)
		memcpy(n->uuids[i], k + VGPU_UVM_MAP_ATTR_OFF +
		       i * VGPU_UVM_MAP_ATTR_SIZE, 16);
	n->nr_gpus = count;
	n->base = base;
	n->end = base + length - 1;
	mutex_lock(&vf->uvm_lock);
	r = vgpu_uvm_range_invalid_4k(base, length) ? NULL :
	    vgpu_uvm_range_find(vf, n->base, n->end);
	if (!r) {
		kfree(n->uuids);
		kfree(n);
		return 0;
	}
	n->range = r;
	*e = n;
	return 0;
}

/* Is @uuid (NV_UUID_LEN bytes) one of the slice's GPUs' (learnt at creation)? */
static bool vgpu_slice_has_uuid(const struct vgpu_slice *s, const u8 *uuid)
{
	u32 i;

	for (i = 0; i < s->nr_gpus; i++)
		if (s->gpus[i].has_uuid &&
		    !memcmp(s->gpus[i].uuid, uuid, NV_UUID_LEN))
			return true;
	return false;
}

/* A command with an rmCtrlFd and an hClient, checked, on a call page. */
static long vgpu_uvm_checked(struct vgpu_file *vf, const struct vgpu_uvm_cmd *c,
			     void __user *u, u32 size)
{
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_uvm_ext *e = NULL;
	bool locked = false;
	NvHandle hmemory = 0;
	struct vgpu_client *cl;
	NvHandle hclient;
	int fd, *pfd;
	void *k;
	long ret;

	if (size < c->fd_end || size < c->client_end)
		return -EPERM;
	k = kzalloc(max(size, c->kstruct), GFP_KERNEL_ACCOUNT);
	if (!k)
		return -ENOMEM;
	if (copy_from_user(k, u, size)) {
		ret = -EFAULT;
		goto out;
	}
	pfd = k + size - c->fd_end;
	fd = *pfd;
	hclient = *(NvHandle *)(k + size - c->client_end);
	/*
	 * REGISTER_GPU names a GPU by UUID, any GPU of the host
	 * (uvm_gpu_retain_by_uuid), and a registered GPU is what every other
	 * UVM command naming a GPU is confined to: they look it up among the
	 * VA space's (uvm_va_space_get_gpu_by_uuid and _with_gpu_va_space:
	 * SET_PREFERRED_LOCATION, SET/UNSET_ACCESSED_BY, MIGRATE,
	 * REGISTER_GPU_VASPACE, REGISTER_CHANNEL, MAP_EXTERNAL_*, ...).  So one
	 * of the slice's, checked on the copy the driver reads (the call page);
	 * another is answered as the driver answers a UUID no GPU has
	 * (nvUvmInterfaceRegisterGpu: NV_ERR_GPU_UUID_NOT_FOUND), so it tells
	 * nothing about the host's GPUs.
	 */
	if (c->cmd == UVM_REGISTER_GPU && !vgpu_slice_has_uuid(vf->slice, k)) {
		const s32 status_end = VGPU_UVM_END(UVM_REGISTER_GPU_PARAMS,
						    rmStatus);

		BUILD_BUG_ON(offsetof(UVM_REGISTER_GPU_PARAMS, gpu_uuid));
		if (size < status_end) {
			ret = -EPERM;
			goto out;
		}
		*(NV_STATUS *)(k + size - status_end) = NV_ERR_GPU_UUID_NOT_FOUND;
		ret = copy_to_user(u, k, size) ? -EFAULT : 0;
		goto out;
	}
	/*
	 * REGISTER_GPU: the UVM driver ignores rmCtrlFd (uvm_gpu.c,
	 * uvm_api_register_gpu; only hClient and hSmcPartRef reach RM, by
	 * handle) and real clients send -1.  Then the client must be one of a
	 * control file of this slice, whichever -- or none: the driver reads
	 * hClient and hSmcPartRef only for a GPU with MIG in use
	 * (nv_gpu_ops.c, nvGpuOpsGetGpuInfo: getSwizzIdFromUserSmcPartHandle),
	 * where client 0 is no client, and tinygrad sends 0.
	 */
	if (fd == -1 && c->cmd == UVM_REGISTER_GPU) {
		cl = hclient ? vgpu_client_lookup(hclient) : NULL;
		ret = !hclient || (cl && cl->slice == vf->slice) ? 0 : -EPERM;
		if (cl)
			vgpu_client_put(cl);
		if (!ret)
			ret = vgpu_call_uvm(vf, c->cmd, k, size);
		if (!ret && copy_to_user(u, k, size))
			ret = -EFAULT;
		goto out;
	}
	ret = vgpu_fd_xlate(vf, fd, VGPU_KINDS(VGPU_KIND_CTL), &t);
	if (ret == -ENOENT || ret == -EBADF)
		ret = -EINVAL;
	if (ret)
		goto out;
	/* The client must be one the named control file owns. */
	cl = vgpu_client_lookup(hclient);
	if (!cl || cl->owner != t.vfilp->private_data) {
		if (cl)
			vgpu_client_put(cl);
		ret = -EPERM;
		goto out_fd;
	}
	vgpu_client_put(cl);
	if (c->cmd == UVM_MAP_EXTERNAL_ALLOCATION) {
		ret = vgpu_uvm_map_prepare(vf, k, size, &e);
		if (ret)
			goto out_fd;
		hmemory = *(NvHandle *)(k + size -
			VGPU_UVM_END(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, hMemory));
		locked = true;
	}
	*pfd = t.fd;
	ret = vgpu_call_uvm(vf, c->cmd, k, size);
	*pfd = fd;
	if (ret)
		goto out_fd;
	if (e) {
		vgpu_uvm_ext_add(vf, e, hclient, hmemory);
		e = NULL;
	}
	if (copy_to_user(u, k, size))
		ret = -EFAULT;
out_fd:
	if (locked)
		mutex_unlock(&vf->uvm_lock);
	if (e) {
		kfree(e->uuids);
		kfree(e);
	}
	vgpu_fd_restore(&t);
out:
	kfree(k);
	return ret;
}

/*
 * Where rmCtrlFd lies in a command's parameters of the release's size, or
 * -1 (trace.c records which of the slice's files it named).
 */
s32 vgpu_uvm_fd_offset(u32 cmd, u32 size)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(vgpu_uvm_cmds); i++)
		if (vgpu_uvm_cmds[i].cmd == cmd && vgpu_uvm_cmds[i].fd_end >= 0 &&
		    size >= vgpu_uvm_cmds[i].kstruct)
			return size - vgpu_uvm_cmds[i].fd_end;
	return -1;
}

/*
 * UVM_ENABLE_PEER_ACCESS / UVM_DISABLE_PEER_ACCESS (uvm_ioctl.h: two
 * UUIDs and rmStatus, the same in every release).  The UVM driver finds
 * both GPUs among those the VA space registered
 * (uvm_va_space.c, retain_pcie_peers_from_uuids and
 * uvm_api_disable_peer_access: uvm_va_space_get_gpu_by_uuid), and vgpu.ko
 * lets a slice register only its own GPUs (vgpu_uvm_checked): a peer
 * outside the slice is refused by the driver already.  vgpu.ko checks both
 * on its own copy all the same, against the slice's GPUs (what the slice
 * proves it owns, not what the VA space happens to hold), and that copy is
 * what the driver reads (a call page: a sibling cannot swap a UUID in
 * after the check).  A UUID not of the slice is answered as the driver
 * answers a GPU the VA space has not registered (NV_ERR_INVALID_DEVICE):
 * it tells nothing about the host's GPUs.
 */
struct vgpu_uvm_peer_params {
	u8 gpuUuidA[NV_UUID_LEN];
	u8 gpuUuidB[NV_UUID_LEN];
	NV_STATUS rmStatus;
};

static long vgpu_uvm_peer_access(struct vgpu_file *vf, unsigned int cmd,
				 void __user *u, u32 size)
{
	struct vgpu_uvm_peer_params k;
	long ret;

	if (size != sizeof(k))
		return -EPERM;
	if (copy_from_user(&k, u, sizeof(k)))
		return -EFAULT;
	if (!vgpu_slice_has_uuid(vf->slice, k.gpuUuidA) ||
	    !vgpu_slice_has_uuid(vf->slice, k.gpuUuidB)) {
		k.rmStatus = VGPU_NV_ERR_INVALID_DEVICE;
		return copy_to_user(u, &k, sizeof(k)) ? -EFAULT : 0;
	}
	ret = vgpu_call_uvm(vf, cmd, &k, sizeof(k));
	if (!ret && copy_to_user(u, &k, sizeof(k)))
		ret = -EFAULT;
	return ret;
}

static long vgpu_uvm_mm_initialize(struct vgpu_file *vf, void __user *u)
{
	const struct nvrel_item *it = vgpu_verdict(NVREL_UVM, UVM_MM_INITIALIZE);
	NV_STATUS st = NV_WARN_NOTHING_TO_DO;

	if (it)
		vgpu_audit_use(vf->slice, NVREL_UVM, UVM_MM_INITIALIZE, it);
	if (copy_to_user(u + offsetof(UVM_MM_INITIALIZE_PARAMS, rmStatus), &st,
			 sizeof(st)))
		return -EFAULT;
	return 0;
}

/**
 * vgpu_uvm_ioctl - errnos: -EPERM for a command outside the allow-list,
 * or a client another file owns (with REGISTER_GPU's
 * rmCtrlFd -1: a client of another slice); -EINVAL for an rmCtrlFd that
 * is no control file of the slice (the driver's answer);
 * -EFAULT for unreadable parameters; -EIO on a poisoned file.
 */
long vgpu_uvm_ioctl(struct vgpu_file *vf, unsigned int cmd, unsigned long arg)
{
	const struct vgpu_uvm_cmd *c = NULL;
	const struct nvrel_item *it;
	void __user *u = (void __user *)arg;
	size_t i;
	long ret;

	if (vgpu_file_refused(vf))
		return -EIO;
	/* Answered (above): its uvmFd must be a real UVM file, which no proxy can be. */
	if (cmd == UVM_MM_INITIALIZE)
		return vgpu_uvm_mm_initialize(vf, u);
	it = vgpu_verdict(NVREL_UVM, cmd);
	if (!it) {
		if (!vgpu_passthrough_unknown &&
		    !vgpu_audit_lets(vf->slice, NVREL_UVM, cmd, VGPU_AUDIT_REFUSE))
			return -EPERM;
		pr_info_ratelimited("slice %u: UVM command %#x forwarded\n",
				    vf->slice->id, cmd);
		return vgpu_uvm_forward(vf, cmd, arg);
	}
	vgpu_audit_use(vf->slice, NVREL_UVM, cmd, it);
	for (i = 0; i < ARRAY_SIZE(vgpu_uvm_cmds); i++)
		if (vgpu_uvm_cmds[i].cmd == cmd)
			c = &vgpu_uvm_cmds[i];
	/*
	 * A command not listed above names no descriptor and nothing vgpu.ko
	 * decides on: the UVM driver copies its parameters once, from the
	 * caller, as it would without vgpu.ko.  One whose parameters do, but
	 * that vgpu.ko does not translate yet, is refused.
	 */
	if (!c && cmd != VGPU_UVM_ENABLE_PEER_ACCESS &&
	    cmd != VGPU_UVM_DISABLE_PEER_ACCESS &&
	    (it->verdict != NVREL_FORWARD || (it->flags & NVREL_F_EMBEDDED))) {
		if (vgpu_audit_lets(vf->slice, NVREL_UVM, cmd,
				    VGPU_AUDIT_NOT_IMPLEMENTED))
			return vgpu_uvm_forward(vf, cmd, arg);
		pr_info_ratelimited("slice %u: UVM command %#x refused: its %s is not implemented\n",
				    vf->slice->id, cmd, it->verdict != NVREL_FORWARD ?
				    "rewrite" : "embedded descriptor");
		return -EPERM;
	}
	if (cmd == VGPU_UVM_ENABLE_PEER_ACCESS || cmd == VGPU_UVM_DISABLE_PEER_ACCESS)
		ret = vgpu_uvm_peer_access(vf, cmd, u, it->size);
	else if (cmd == UVM_FREE || cmd == UVM_CREATE_EXTERNAL_RANGE ||
	    cmd == UVM_UNMAP_EXTERNAL)
		ret = vgpu_uvm_range_cmd(vf, cmd, u, it->size);
	else if (c && c->fd_end >= 0)
		ret = vgpu_uvm_checked(vf, c, u, it->size);
	else
		ret = vgpu_uvm_forward(vf, cmd, arg);
	/* A broken call poisoned the file; UVM objects go with its release. */
	WRITE_ONCE(vf->undo, false);
	return ret;
}
