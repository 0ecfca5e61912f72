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

#include "vgpu.h"

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
 * After MAP_EXTERNAL_ALLOCATION the driver holds the memory until UVM_FREE
 * of that base (or close): so does a reference on its charge, so that an
 * RM_FREE of the handle does not return the quota.  Taken from the
 * parameters vgpu.ko checked, and whatever status came back (it comes back
 * through the call page, where a sibling may rewrite it): a mapping that
 * failed keeps the charge until UVM_FREE of the base or the file's release.
 */
struct vgpu_uvm_ext_key {
	u64 base;
	NvHandle hClient, hMemory;
};

static void vgpu_uvm_ext_add(struct vgpu_file *vf,
			     const struct vgpu_uvm_ext_key *p)
{
	struct vgpu_charge *charge = NULL;
	struct vgpu_uvm_ext *e;
	struct vgpu_obj *o;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return;
	rcu_read_lock();
	o = vgpu_obj_find(p->hClient, p->hMemory);
	if (o && o->charge && o->client->slice == vf->slice &&
	    refcount_inc_not_zero(&o->charge->ref))
		charge = o->charge;
	rcu_read_unlock();
	if (!charge) {
		kfree(e);
		return;
	}
	e->base = p->base;
	e->charge = charge;
	mutex_lock(&vf->lock);
	list_add_tail(&e->node, &vf->uvm_ext);
	mutex_unlock(&vf->lock);
}

static void vgpu_uvm_ext_drop(struct vgpu_file *vf, u64 base)
{
	struct vgpu_uvm_ext *e, *tmp;

	mutex_lock(&vf->lock);
	list_for_each_entry_safe(e, tmp, &vf->uvm_ext, node) {
		if (e->base == base) {
			list_del(&e->node);
			vgpu_charge_put(e->charge);
			kfree(e);
		}
	}
	mutex_unlock(&vf->lock);
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
		if (e->managed)
			atomic64_sub(e->charge->bytes,
				     &e->charge->slice->uvm_mapped);
		vgpu_charge_put(e->charge);
		kfree(e);
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
	struct vgpu_uvm_reaper *rp;

	/* No one else can reach vf now: no lock. */
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

/* UVM_FREE on a call page: the base vgpu.ko drops is the one the driver read. */
static long vgpu_uvm_free(struct vgpu_file *vf, unsigned int cmd,
			  void __user *u, u32 size)
{
	/* base first; rmStatus then 4 bytes of padding last, in every release. */
	u8 k[32] __aligned(8) = {};
	const u32 status_end = VGPU_UVM_END(UVM_FREE_PARAMS, rmStatus);
	u64 base;
	long ret;

	if (size > sizeof(k) || size < status_end)
		return -EPERM;
	if (copy_from_user(k, u, size))
		return -EFAULT;
	base = *(u64 *)k;
	ret = vgpu_call_uvm(vf, cmd, k, size);
	if (ret)
		return ret;
	/*
	 * rmStatus comes back forgeable (call.c); UVM_FREE of a base that a
	 * MAP_EXTERNAL mapped fails only when nothing is mapped there any
	 * more, so dropping on a forged NV_OK loses nothing the driver holds.
	 * (Assumption about the UVM driver: docs/mediator.md.)
	 */
	if (*(NV_STATUS *)(k + size - status_end) == NV_OK)
		vgpu_uvm_ext_drop(vf, base);
	if (copy_to_user(u, k, size))
		return -EFAULT;
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
	struct vgpu_uvm_ext_key chk = {};
	struct vgpu_tmpfd t = { .fd = -1 };
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
		/* What the driver reads: results come back forgeable. */
		const s32 mem_end = VGPU_UVM_END(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS,
						 hMemory);

		BUILD_BUG_ON(offsetof(UVM_MAP_EXTERNAL_ALLOCATION_PARAMS, base));
		chk.base = *(u64 *)k;
		chk.hClient = hclient;
		chk.hMemory = *(NvHandle *)(k + size - mem_end);
	}
	*pfd = t.fd;
	ret = vgpu_call_uvm(vf, c->cmd, k, size);
	*pfd = fd;
	if (ret)
		goto out_fd;
	if (c->cmd == UVM_MAP_EXTERNAL_ALLOCATION)
		vgpu_uvm_ext_add(vf, &chk);
	if (copy_to_user(u, k, size))
		ret = -EFAULT;
out_fd:
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
	if (!c && (it->verdict != NVREL_FORWARD || (it->flags & NVREL_F_EMBEDDED))) {
		if (vgpu_audit_lets(vf->slice, NVREL_UVM, cmd,
				    VGPU_AUDIT_NOT_IMPLEMENTED))
			return vgpu_uvm_forward(vf, cmd, arg);
		pr_info_ratelimited("slice %u: UVM command %#x refused: its %s is not implemented\n",
				    vf->slice->id, cmd, it->verdict != NVREL_FORWARD ?
				    "rewrite" : "embedded descriptor");
		return -EPERM;
	}
	if (cmd == UVM_FREE)
		ret = vgpu_uvm_free(vf, cmd, u, it->size);
	else if (c && c->fd_end >= 0)
		ret = vgpu_uvm_checked(vf, c, u, it->size);
	else
		ret = vgpu_uvm_forward(vf, cmd, arg);
	/* A broken call poisoned the file; UVM objects go with its release. */
	WRITE_ONCE(vf->undo, false);
	return ret;
}
