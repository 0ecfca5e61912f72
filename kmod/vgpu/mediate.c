// SPDX-License-Identifier: GPL-2.0
/*
 * mediate.c - ioctl decoding of the control and GPU nodes: XFER unwrapping,
 * the allow-list of escapes, and the choice of path for each call.
 *
 * Three ways a call reaches the driver (docs/mediator.md):
 *  - on a call page (call.c): the checked parameters, in pages no other task
 *    can write, through the real file's own ioctl in the caller's context,
 *    so at the caller's own privilege; every call that creates objects,
 *    every control, and the escapes that name files or GPUs;
 *  - kernel entry point (rmapi.c): only what creates nothing and names only
 *    objects vgpu.ko tracks for the caller's file: RM_FREE, VID_HEAP FREE,
 *    and vgpu.ko's own existence probes, USERD maps and scheduling calls;
 *  - direct: the caller's own pointer, for escapes whose parameters decide
 *    nothing here (version, sys params, DMA mappings...).
 * An XFER is never forwarded as an XFER: the driver would re-read the XFER
 * header, and another thread could swap the inner command after the
 * decision.  Its inner call is forwarded as the direct ioctl it stands for.
 * Descriptors named inside parameters become proxies (fdxlate.c).
 */
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/mman.h>
#include <linux/mm.h>
#include <linux/ioctl.h>

#include "vgpu.h"

/*
 * Call the real file with nr/size and the caller's own pointer (direct
 * escapes).  Above 16383 bytes the size needs an XFER header: vgpu.ko's own,
 * on a call page, pointing at the caller's parameters.
 */
long vgpu_real_ioctl(struct vgpu_file *vf, u32 nr, u32 size, void __user *uptr)
{
	struct file *real = vf->real;
	nv_ioctl_xfer_t x;

	if (!real->f_op->unlocked_ioctl)
		return -ENOTTY;
	if (size <= _IOC_SIZEMASK)
		return real->f_op->unlocked_ioctl(real,
				_IOC(_IOC_READ | _IOC_WRITE, NV_IOCTL_MAGIC, nr, size),
				(unsigned long)uptr);
	x.cmd = nr;
	x.size = size;
	x.ptr = (u64)(uintptr_t)uptr;
	return vgpu_call_nv(vf, real, NV_ESC_IOCTL_XFER_CMD, &x, sizeof(x),
			    NULL, 0);
}

/*
 * A call of this file broke (call.c) or came back inconsistent: the driver
 * may have made objects vgpu.ko did not decide on, under any client the
 * real file owns.  Free them all (the control file's clients; for a GPU
 * file, those of the control file it registered) and refuse both files
 * from now on.  A root client made with a handle vgpu.ko does not know
 * holds no memory and lives until the file is closed.  Called with no lock
 * held, after the escape returned.
 */
void vgpu_undo(struct vgpu_file *vf)
{
	struct vgpu_file *ctl = NULL;

	if (!READ_ONCE(vf->undo))
		return;
	WRITE_ONCE(vf->undo, false);
	if (vf->kind == VGPU_KIND_CTL) {
		ctl = vf;
	} else if (vf->kind == VGPU_KIND_GPU) {
		mutex_lock(&vf->lock);
		if (vf->ctl_filp)
			ctl = vf->ctl_filp->private_data;
		mutex_unlock(&vf->lock);
	}
	if (!ctl)
		return;
	WRITE_ONCE(ctl->poisoned, true);
	vgpu_file_free_clients(ctl);
}

/*
 * vgpu.ko's own root handles: the picks below, 0xc1d80000 | n (the upper
 * half of the driver's client range, away from its generator).  A caller
 * asking for one is answered as for a taken handle, so that no tenant can
 * squat the handles vgpu.ko is about to pick for another (nothing a tenant
 * holds decides what vgpu.ko does).
 */
#define VGPU_ROOT_PICK_BASE     (VGPU_CLIENT_HANDLE_BASE | 0x80000)
#define VGPU_ROOT_PICK_MASK     0x7ffffu

static bool vgpu_root_reserved(NvHandle h)
{
	return (h & ~VGPU_ROOT_PICK_MASK) == VGPU_ROOT_PICK_BASE;
}

/*
 * The handles of the objects that prove ownership, in the client's own
 * namespace (which holds nothing yet when the client is this call's).
 * Each proof takes the next one of 2^28, so that two proofs in flight at
 * once never share a handle: a racing caller's probe must never find the
 * winner's proof object under the client they both asked for.
 */
#define VGPU_PROOF_HANDLE_BASE  0xd0000000u
#define VGPU_PROOF_HANDLE_MASK  0x0fffffffu

/*
 * Is root client h one the driver made on this file's real file?
 *
 * Existence is not ownership: between vgpu.ko's probe (absent) and the
 * driver's read, another tenant or a host process (nvidia-smi, DCGM) can
 * take the same handle; the call then fails with
 * NV_ERR_INSERT_DUPLICATE_NAME while h exists, and the status on the call
 * page is the sibling's to rewrite anyway.  So the driver's own ownership
 * check decides: through the real file, at the caller's privilege, vgpu.ko
 * allocates an NV0020_GPU_MANAGEMENT under h.  serverAllocResource
 * (rs_server.c) validates the client before anything else (clientValidate,
 * rmclientValidate_IMPL in client.c: with
 * PDB_PROP_SYS_VALIDATE_CLIENT_HANDLE_STRICT, set on every RM build, the
 * client's pOSInfo must be the calling file), so the object can exist only
 * if h belongs to this real file.  Whether it exists, with that class, is
 * asked through the kernel entry (kernel memory: nothing a sibling can
 * write), and it is freed there at once.  The class is one the policy
 * refuses to every slice, and its constructor does nothing
 * (gpumgmtapiConstruct_IMPL, gpu_mgmt_api.c; not multi-instance, no
 * parameters needed: resource_list.h, 535 to 595), so no tenant can make
 * one in a client of another file to fool the check, and a client of this
 * file is the only place one can appear.
 *
 * Return: NV_OK if h is this file's; otherwise a status for the caller
 * (the proof's own, read back as a hint only, or NV_ERR_INVALID_CLIENT).
 */
static NV_STATUS vgpu_root_owned(struct vgpu_file *vf, NvHandle h, u32 size)
{
	static atomic_t seq = ATOMIC_INIT(0);
	NVOS64_PARAMETERS q = {};
	NvHandle proof;
	NV_STATUS st;
	int tries;
	long ret;

	/*
	 * Never the client's own handle (clientValidateNewResourceHandle), nor
	 * one that already names an object in h: a client of another file
	 * (a host process's, which may make any class) that happened to hold
	 * an NV0020 at the pick would pass the check below without the
	 * driver's ownership check ever running.
	 */
	for (tries = 0;; tries++) {
		/* A probe that fails says "present": bounded, nothing adopted. */
		if (tries == 4)
			return NV_ERR_INSUFFICIENT_RESOURCES;
		proof = VGPU_PROOF_HANDLE_BASE |
			((u32)atomic_inc_return(&seq) & VGPU_PROOF_HANDLE_MASK);
		if (proof != h && !vgpu_rm_exists(h, proof))
			break;
	}
	/* NVOS21 and NVOS64 agree up to pAllocParms; the rest stays 0. */
	q.hRoot = h;
	q.hObjectParent = h;
	q.hObjectNew = proof;
	q.hClass = NV0020_GPU_MANAGEMENT;
	q.status = NV_ERR_GENERIC;
	if (size != sizeof(NVOS64_PARAMETERS))
		((NVOS21_PARAMETERS *)&q)->status = NV_ERR_GENERIC;
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_ALLOC, &q, size, NULL, 0);
	if (ret)
		return vgpu_call_status(ret);
	st = size == sizeof(NVOS64_PARAMETERS) ? q.status :
						 ((NVOS21_PARAMETERS *)&q)->status;
	if (!vgpu_rm_is_class(h, proof, NV0020_GPU_MANAGEMENT))
		return st != NV_OK ? st : NV_ERR_INVALID_CLIENT;
	vgpu_rm_free(h, h, proof);
	return NV_OK;
}

/*
 * A root client: made on the real file so that the driver binds it there.
 * vgpu.ko picks the handle when the caller lets the driver choose, and
 * records the client only if that handle was absent before and the driver
 * says after that the client is this file's (vgpu_root_owned).  Nothing is
 * ever freed here: a client made by this call that cannot be recorded
 * (another thread of the file recorded it first, or no memory) holds
 * nothing and goes with the real file (the driver's own cleanup at its
 * release); one that is not this file's is not vgpu.ko's to free.
 *
 * The driver takes the handle asked for from hRoot, not hObjectNew:
 * _rmAlloc passes hRoot as the client to serverAllocClient (rs_server.c),
 * which RM builds with RS_COMPATABILITY_MODE (src/nvidia/Makefile), so a
 * chosen handle is taken as it is; the handle made is written to
 * hObjectNew.  vgpu.ko asks for its handle the same way, so the handle it
 * probes and records is the one the driver makes, never one read back.
 * (Found on NVIDIA's driver in the test bed: nvsim had taken hObjectNew.)
 */
static NV_STATUS vgpu_alloc_root(struct vgpu_file *vf, void *kbuf, u32 size)
{
	static atomic_t next = ATOMIC_INIT(0);
	NVOS21_PARAMETERS *p21 = kbuf;
	NVOS64_PARAMETERS *p64 = kbuf;
	bool nvos64 = size == sizeof(NVOS64_PARAMETERS);
	NvHandle want = p21->hRoot, h;
	NV0000_ALLOC_PARAMETERS rp = {};
	/* The class's struct in this release (NV01_ROOT's is 108 bytes before 570). */
	u32 rsize = min_t(u32, vgpu_rel_size(NVREL_CLS, p21->hClass), sizeof(rp));
	struct vgpu_buf b = {
		.kbuf = &rp, .size = rsize,
		.ptr_off = offsetof(NVOS21_PARAMETERS, pAllocParms),
	};
	bool with = p21->pAllocParms;
	NVOS64_PARAMETERS q;
	int tries;
	long ret;
	NV_STATUS st, own;

	BUILD_BUG_ON(offsetof(NVOS21_PARAMETERS, pAllocParms) !=
		     offsetof(NVOS64_PARAMETERS, pAllocParms));
	if (nvos64 && (p64->flags & NVOS64_FLAGS_FINN_SERIALIZED))
		return NV_ERR_NOT_SUPPORTED;
	/* vgpu.ko's own handles are never a caller's (taken, as it were). */
	if (want && vgpu_root_reserved(want))
		return NV_ERR_INSERT_DUPLICATE_NAME;
	/* The client's parameters go in the call page too; a kernel pointer never. */
	if (with && copy_from_user(&rp, u64_to_user_ptr(p21->pAllocParms),
				   rsize))
		return NV_ERR_INVALID_ARGUMENT;
	rp.pOsPidInfo = 0;
	for (tries = 0; tries < 4; tries++) {
		h = want;
		if (!h)
			h = VGPU_ROOT_PICK_BASE |
			    ((u32)atomic_inc_return(&next) & VGPU_ROOT_PICK_MASK);
		if (vgpu_rm_exists(h, h)) {
			if (want)
				return NV_ERR_INSERT_DUPLICATE_NAME;
			continue;
		}
		memset(&q, 0, sizeof(q));
		memcpy(&q, kbuf, size);
		q.hRoot = h;            /* the handle asked for (above) */
		q.hObjectNew = h;       /* same offset in NVOS21 and NVOS64 */
		q.pAllocParms = 0;
		if (nvos64)
			q.pRightsRequested = 0;
		q.status = NV_ERR_GENERIC;
		ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_ALLOC, &q, size,
				   with ? &b : NULL, with ? 1 : 0);
		if (ret)
			return vgpu_call_status(ret);
		/*
		 * The status is read back from the call page, where a sibling
		 * may have rewritten it: the driver's state decides, and it
		 * only picks the answer to a failure.
		 */
		st = nvos64 ? q.status : ((NVOS21_PARAMETERS *)&q)->status;
		if (!vgpu_rm_exists(h, h)) {
			if (st == NV_ERR_INSERT_DUPLICATE_NAME && !want)
				continue;       /* lost a race with the driver's generator */
			return st == NV_OK ? NV_ERR_INVALID_STATE : st;
		}
		/*
		 * Existence is not ownership: another's client is never taken
		 * (nor freed).  A pick someone else took in the window is
		 * picked again.
		 */
		own = vgpu_root_owned(vf, h, size);
		if (own != NV_OK) {
			if (st == NV_ERR_INSERT_DUPLICATE_NAME && !want)
				continue;
			return st != NV_OK ? st : own;
		}
		if (vgpu_client_record(vf, h))
			return st != NV_OK ? st : NV_ERR_INSERT_DUPLICATE_NAME;
		p21->hObjectNew = h;
		/*
		 * The driver's outputs in the client's parameters, best effort:
		 * the handle the caller needs is in hObjectNew.
		 */
		if (with && copy_to_user(u64_to_user_ptr(p21->pAllocParms), &rp,
					 rsize))
			pr_debug("root client parameters not written back\n");
		return NV_OK;
	}
	return NV_ERR_INSUFFICIENT_RESOURCES;
}

static bool vgpu_is_root_class(u32 c)
{
	return c == NV01_ROOT || c == NV01_ROOT_NON_PRIV || c == NV01_ROOT_CLIENT;
}

/* RM_ALLOC (NVOS21 or NVOS64) and RM_ALLOC_OBJECT (NVOS05). */
static int vgpu_esc_alloc(struct vgpu_file *vf, u32 nr, void *kbuf, u32 size)
{
	const struct nvrel_item *it;
	NVOS64_PARAMETERS p = {};
	NV_STATUS st;
	u32 hclass;

	/*
	 * Control node only, but for the event classes, which RmIoctl
	 * (escape.c, NV_ESC_RM_ALLOC) takes on any node: NV01_EVENT,
	 * _OS_EVENT, _KERNEL_CALLBACK(_EX) skip NV_CTL_DEVICE_ONLY.  libcuda
	 * 535 allocates its OS events through a GPU node it registered
	 * (REGISTER_FD), acting for the control file's clients
	 * (vgpu_file_client).  hClass is read from the kernel copy, once; it
	 * lies at the same offset in NVOS21 and NVOS64.
	 */
	if (vf->kind != VGPU_KIND_CTL) {
		if (nr != NV_ESC_RM_ALLOC || size < sizeof(NVOS21_PARAMETERS))
			return -EINVAL;
		hclass = ((NVOS21_PARAMETERS *)kbuf)->hClass;
		if (hclass != NV01_EVENT && hclass != NV01_EVENT_OS_EVENT &&
		    hclass != NV01_EVENT_KERNEL_CALLBACK &&
		    hclass != NV01_EVENT_KERNEL_CALLBACK_EX)
			return -EINVAL;
	}
	if (nr == NV_ESC_RM_ALLOC_OBJECT) {
		NVOS05_PARAMETERS *p05 = kbuf;

		if (size != sizeof(*p05))
			return -EINVAL;
		if (vgpu_is_root_class(p05->hClass)) {
			p05->status = NV_ERR_INSUFFICIENT_PERMISSIONS;
			return 0;
		}
		p.hRoot = p05->hRoot;
		p.hObjectParent = p05->hObjectParent;
		p.hObjectNew = p05->hObjectNew;
		p.hClass = p05->hClass;
		st = vgpu_rm_alloc_path(vf, &p);
		if (st == NV_OK)
			p05->hObjectNew = p.hObjectNew;
		p05->status = st;
		return 0;
	}
	if (size != sizeof(NVOS21_PARAMETERS) && size != sizeof(NVOS64_PARAMETERS))
		return -EINVAL;
	if (vgpu_is_root_class(((NVOS21_PARAMETERS *)kbuf)->hClass)) {
		st = vgpu_alloc_root(vf, kbuf, size);
		/*
		 * RmIoctl (escape.c, NV_ESC_RM_ALLOC) forces a user's root
		 * client to NV01_ROOT_CLIENT in the params it copies back,
		 * whatever the outcome: the caller reads 0x41 where it asked
		 * NV01_ROOT (0), as libcuda 535 does.  hClass lies at the same
		 * offset in NVOS21 and NVOS64.
		 */
		((NVOS21_PARAMETERS *)kbuf)->hClass = NV01_ROOT_CLIENT;
		if (size == sizeof(NVOS64_PARAMETERS))
			((NVOS64_PARAMETERS *)kbuf)->status = st;
		else
			((NVOS21_PARAMETERS *)kbuf)->status = st;
		return 0;
	}
	if (size == sizeof(NVOS64_PARAMETERS)) {
		memcpy(&p, kbuf, sizeof(p));
	} else {
		NVOS21_PARAMETERS *p21 = kbuf;

		p.hRoot = p21->hRoot;
		p.hObjectParent = p21->hObjectParent;
		p.hObjectNew = p21->hObjectNew;
		p.hClass = p21->hClass;
		p.pAllocParms = p21->pAllocParms;
		p.paramsSize = p21->paramsSize;
	}
	it = vgpu_verdict(NVREL_CLS, p.hClass);
	if (!vgpu_class_allowed(p.hClass) &&
	    ((vgpu_passthrough_unknown && !vgpu_never_forwarded(NVREL_CLS, p.hClass)) ||
	     vgpu_audit_lets(vf->slice, NVREL_CLS, p.hClass,
			     it ? VGPU_AUDIT_NOT_IMPLEMENTED : VGPU_AUDIT_REFUSE))) {
		pr_info_ratelimited("slice %u: class %#x forwarded as made\n",
				    vf->slice->id, p.hClass);
		return vgpu_call_nv(vf, vf->real, NV_ESC_RM_ALLOC, kbuf, size,
				    NULL, 0);
	}
	if (it)
		vgpu_audit_use(vf->slice, NVREL_CLS, p.hClass, it);
	st = vgpu_rm_alloc_path(vf, &p);
	if (size == sizeof(NVOS64_PARAMETERS)) {
		NVOS64_PARAMETERS *o = kbuf;

		if (st == NV_OK)
			o->hObjectNew = p.hObjectNew;
		o->status = st;
	} else {
		NVOS21_PARAMETERS *o = kbuf;

		if (st == NV_OK)
			o->hObjectNew = p.hObjectNew;
		o->status = st;
	}
	return 0;
}

/* RM_ALLOC_MEMORY on a GPU node: FB on the kernel path, sysmem bounced. */
static int vgpu_esc_alloc_memory(struct vgpu_file *vf, void *kbuf, u32 size)
{
	nv_ioctl_nvos02_parameters_with_fd *pApi = kbuf;
	NVOS02_PARAMETERS *p = &pApi->params;
	nv_ioctl_nvos02_parameters_with_fd q;
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_client *c;
	struct vgpu_obj *parent;
	int user_fd, ret;
	NvHandle h;
	NV_STATUS st;

	if (vf->kind != VGPU_KIND_GPU || size != sizeof(*pApi))
		return -EINVAL;
	user_fd = pApi->fd;
	if (p->hClass == NV01_MEMORY_LOCAL_USER ||
	    p->hClass == NV01_MEMORY_SYSTEM_OS_DESCRIPTOR) {
		/* No fd read: only NV01_MEMORY_SYSTEM gets a mapping context (escape.c). */
		p->status = vgpu_alloc_memory_path(vf, p);
		return 0;
	}
	if (p->hClass != NV01_MEMORY_SYSTEM) {
		/* 0x3F (privileged) and the rest are not for slices. */
		p->status = NV_ERR_INSUFFICIENT_PERMISSIONS;
		return 0;
	}

	c = vgpu_file_client(vf, p->hRoot);
	if (!c) {
		p->status = NV_ERR_INVALID_CLIENT;
		return 0;
	}
	mutex_lock(&c->lock);
	parent = c->dead ? NULL : vgpu_obj_find(p->hRoot, p->hObjectParent);
	if (!parent || (parent->type != VGPU_OBJ_DEVICE &&
			parent->type != VGPU_OBJ_SUBDEVICE)) {
		p->status = c->dead ? NV_ERR_INVALID_CLIENT : NV_ERR_INVALID_OBJECT_PARENT;
		ret = 0;
		goto out;
	}
	ret = vgpu_fd_xlate(vf, user_fd, VGPU_KINDS(VGPU_KIND_CTL) |
			    VGPU_KINDS(VGPU_KIND_GPU), &t);
	if (ret && ret != -ENOENT)
		goto out;
	h = p->hObjectNew;
	st = vgpu_handle_for(p->hRoot, &h);
	if (st != NV_OK) {
		p->status = st;
		ret = 0;
		goto out_fd;
	}
	q = *pApi;
	q.params.hObjectNew = h;
	q.params.status = NV_ERR_GENERIC;
	if (!ret)
		q.fd = t.fd;
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_ALLOC_MEMORY, &q, sizeof(q),
			   NULL, 0);
	/* The allocation stays even when its mmap context failed (-EINVAL). */
	st = vgpu_created_anyway(vf, p->hRoot, p->hObjectParent, h,
				 !ret || ret == -EINVAL ? q.params.status :
							  vgpu_call_status(ret));
	if (st == NV_OK && !vgpu_obj_find(p->hRoot, h) &&
	    vgpu_obj_add(c, parent, h, NV01_MEMORY_SYSTEM, VGPU_OBJ_MEMORY,
			 parent->gpu, NULL)) {
		vgpu_rm_free(p->hRoot, p->hObjectParent, h);
		st = NV_ERR_NO_MEMORY;
	}
	/* The caller gets the driver's outputs, its own fd, our decisions. */
	q.fd = user_fd;
	q.params.hRoot = p->hRoot;
	q.params.hObjectParent = p->hObjectParent;
	q.params.hClass = p->hClass;
	q.params.hObjectNew = h;
	q.params.status = st;
	*pApi = q;
out_fd:
	vgpu_fd_restore(&t);
out:
	mutex_unlock(&c->lock);
	vgpu_client_put(c);
	return ret;
}

/* RM_MAP_MEMORY: the fd names the file the mapping context goes to. */
static int vgpu_esc_map_memory(struct vgpu_file *vf, void *kbuf, u32 size)
{
	nv_ioctl_nvos33_parameters_with_fd *pApi = kbuf, q;
	NVOS33_PARAMETERS *p = &pApi->params;
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_client *c;
	struct vgpu_obj *o;
	bool usermode;
	int user_fd, ret;

	if (vf->kind != VGPU_KIND_CTL || size != sizeof(*pApi))
		return -EINVAL;
	user_fd = pApi->fd;
	c = vgpu_file_client(vf, p->hClient);
	if (!c) {
		p->status = NV_ERR_INVALID_CLIENT;
		return 0;
	}
	rcu_read_lock();
	o = vgpu_obj_find(p->hClient, p->hMemory);
	usermode = o && o->type == VGPU_OBJ_USERMODE;
	rcu_read_unlock();

	ret = vgpu_fd_xlate(vf, user_fd, VGPU_KINDS(VGPU_KIND_CTL) |
			    VGPU_KINDS(VGPU_KIND_GPU), &t);
	if (ret == -ENOENT)
		ret = -EINVAL;  /* the driver's answer to a foreign fd */
	if (ret)
		goto out;
	/*
	 * Marked before the call, and left on a failure: the status comes
	 * back through the call page and may be forged; a doorbell mapping
	 * watched once too often costs nothing, one missed escapes gating.
	 */
	if (usermode)
		WRITE_ONCE(((struct vgpu_file *)t.vfilp->private_data)->usermode_pending,
			   true);
	q = *pApi;
	q.fd = t.fd;
	q.params.status = NV_ERR_GENERIC;
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_MAP_MEMORY, &q, sizeof(q),
			   NULL, 0);
	q.fd = user_fd;
	*pApi = q;
	vgpu_fd_restore(&t);
out:
	vgpu_client_put(c);
	return ret;
}

/* REGISTER_FD: ctl_fd must be a control node of this slice. */
static int vgpu_esc_register_fd(struct vgpu_file *vf, void *kbuf, u32 size)
{
	nv_ioctl_register_fd_t *p = kbuf, q;
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_file *owner;
	int user_fd, ret;

	/* the size first: kbuf holds size bytes (KASAN, make fuzz-debug) */
	if (size != sizeof(*p))
		return -EINVAL;
	user_fd = p->ctl_fd;
	ret = vgpu_fd_xlate(vf, user_fd, VGPU_KINDS(VGPU_KIND_CTL), &t);
	if (ret)
		return -EINVAL;
	mutex_lock(&vf->lock);
	if (vf->ctl_filp || t.vfilp == vf->filp) {
		ret = -EINVAL;
		goto out;
	}
	/*
	 * From the driver's registration on, this file's calls act for the
	 * control file's clients, so they must hold its call lock: ctl_filp
	 * is set before this file's own call lock is dropped (call.c,
	 * vgpu_call_lock).  Not registered yet, only that lock is taken.
	 */
	ret = vgpu_call_lock(vf, &owner);
	if (ret)
		goto out;
	q = *p;
	q.ctl_fd = t.fd;
	ret = vgpu_call_nv_locked(vf, vf->real, NV_ESC_REGISTER_FD, &q,
				  sizeof(q), NULL, 0);
	p->ctl_fd = user_fd;
	if (!ret)
		vf->ctl_filp = get_file(t.vfilp);
	vgpu_call_unlock(vf, owner);
out:
	mutex_unlock(&vf->lock);
	vgpu_fd_restore(&t);
	return ret;
}

/* The escapes vgpu.ko decides on, on a kernel copy. */
static int vgpu_escape_kbuf(struct vgpu_file *vf, u32 nr, void *kbuf, u32 size)
{
	bool ctl = vf->kind == VGPU_KIND_CTL;

	switch (nr) {
	case NV_ESC_RM_ALLOC:
	case NV_ESC_RM_ALLOC_OBJECT:
		return vgpu_esc_alloc(vf, nr, kbuf, size);
	case NV_ESC_RM_ALLOC_MEMORY:
		return vgpu_esc_alloc_memory(vf, kbuf, size);
	case NV_ESC_RM_FREE:
		if (!ctl || size != sizeof(NVOS00_PARAMETERS))
			return -EINVAL;
		((NVOS00_PARAMETERS *)kbuf)->status = vgpu_rm_free_path(vf, kbuf);
		return 0;
	case NV_ESC_RM_CONTROL:
		if (!ctl || size != sizeof(NVOS54_PARAMETERS))
			return -EINVAL;
		((NVOS54_PARAMETERS *)kbuf)->status = vgpu_control_path(vf, kbuf);
		return 0;
	case NV_ESC_RM_DUP_OBJECT:
		if (!ctl || size != sizeof(NVOS55_PARAMETERS))
			return -EINVAL;
		((NVOS55_PARAMETERS *)kbuf)->status = vgpu_rm_dup_path(vf, kbuf);
		return 0;
	case NV_ESC_RM_SHARE:
		if (!ctl || size != sizeof(NVOS57_PARAMETERS))
			return -EINVAL;
		((NVOS57_PARAMETERS *)kbuf)->status = vgpu_rm_share_path(vf, kbuf);
		return 0;
	case NV_ESC_RM_VID_HEAP_CONTROL:
		if (!ctl || size != sizeof(NVOS32_PARAMETERS))
			return -EINVAL;
		((NVOS32_PARAMETERS *)kbuf)->status = vgpu_vid_heap_path(vf, kbuf);
		return 0;
	case NV_ESC_RM_MAP_MEMORY:
		return vgpu_esc_map_memory(vf, kbuf, size);
	case NV_ESC_REGISTER_FD:
		return vgpu_esc_register_fd(vf, kbuf, size);
	case NV_ESC_STATUS_CODE:
		/* Any GPU's status by PCI address: the slice's GPUs only. */
		if (!ctl || size != sizeof(nv_ioctl_status_code_t))
			return -EINVAL;
		return vgpu_status_code(vf, kbuf);
	case NV_ESC_SYS_PARAMS:
		/*
		 * The driver keeps one NUMA memblock size for everybody, set by
		 * the first caller (nv.c: later different values get -EBUSY):
		 * a container's value would bind every slice.  Answered
		 * without reaching the driver; the host sets it.
		 */
		if (!ctl || size != sizeof(nv_ioctl_sys_params_t))
			return -EINVAL;
		return 0;
	case NV_ESC_NUMA_INFO:
		return vgpu_numa_info(vf, kbuf, size);
	}
	return -EPERM;
}

static bool vgpu_escape_direct(u32 nr)
{
	switch (nr) {
	case NV_ESC_CHECK_VERSION_STR:
	case NV_ESC_WAIT_OPEN_COMPLETE:
	case NV_ESC_ALLOC_OS_EVENT:
	case NV_ESC_FREE_OS_EVENT:
	case NV_ESC_RM_UNMAP_MEMORY:
	case NV_ESC_RM_IDLE_CHANNELS:
	case NV_ESC_RM_ALLOC_CONTEXT_DMA2:
	case NV_ESC_RM_MAP_MEMORY_DMA:
	case NV_ESC_RM_UNMAP_MEMORY_DMA:
	case NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO:
		return true;
	}
	return false;
}

static bool vgpu_escape_kernel(u32 nr)
{
	switch (nr) {
	case NV_ESC_RM_ALLOC:
	case NV_ESC_RM_ALLOC_OBJECT:
	case NV_ESC_RM_ALLOC_MEMORY:
	case NV_ESC_RM_FREE:
	case NV_ESC_RM_CONTROL:
	case NV_ESC_RM_DUP_OBJECT:
	case NV_ESC_RM_SHARE:
	case NV_ESC_RM_VID_HEAP_CONTROL:
	case NV_ESC_RM_MAP_MEMORY:
	case NV_ESC_REGISTER_FD:
	case NV_ESC_STATUS_CODE:
	case NV_ESC_SYS_PARAMS:
	case NV_ESC_NUMA_INFO:
		return true;
	}
	return false;
}

/**
 * vgpu_ctl_ioctl - unlocked_ioctl of a slice's control and GPU nodes
 *
 * Errnos: -EINVAL for what the driver itself calls malformed (wrong size,
 * wrong node, bad XFER); -EFAULT for unreadable parameters; -EPERM for an
 * escape outside the allow-list; -EIO on a file that was poisoned.
 */
long vgpu_ctl_ioctl(struct vgpu_file *vf, unsigned int cmd, unsigned long arg)
{
	const struct nvrel_item *it;
	void __user *uptr;
	u32 nr, size;
	void *kbuf;
	long ret;

	if (vgpu_file_refused(vf))
		return -EIO;
	ret = nv_ioctl_unwrap(cmd, arg, &nr, &size, &uptr);
	if (ret)
		return ret;

	/*
	 * The release's policy first: what it refuses, or what vgpu.ko has no
	 * path for, goes no further unless passthrough_unknown, audit mode or
	 * the slice's allow-list lets it (then as the caller made it), and
	 * never for vgpu_never_forwarded's (the dma-buf export).
	 */
	it = vgpu_verdict(NVREL_ESC, nr);
	if (!it || (!vgpu_escape_direct(nr) && !vgpu_escape_kernel(nr) &&
		    nr != NV_ESC_CARD_INFO && nr != NV_ESC_ATTACH_GPUS_TO_FD)) {
		if ((!vgpu_passthrough_unknown || vgpu_never_forwarded(NVREL_ESC, nr)) &&
		    !vgpu_audit_lets(vf->slice, NVREL_ESC, nr,
				     it ? VGPU_AUDIT_NOT_IMPLEMENTED : VGPU_AUDIT_REFUSE))
			return -EPERM;
		pr_info_ratelimited("slice %u: escape %#x (size %u) forwarded\n",
				    vf->slice->id, nr, size);
		return vgpu_real_ioctl(vf, nr, size, uptr);
	}
	vgpu_audit_use(vf->slice, NVREL_ESC, nr, it);
	if (vgpu_escape_direct(nr))
		return vgpu_real_ioctl(vf, nr, size, uptr);
	if (nr == NV_ESC_CARD_INFO)
		return vf->kind == VGPU_KIND_CTL ? vgpu_card_info(vf, uptr, size) :
						   -EINVAL;
	if (nr == NV_ESC_ATTACH_GPUS_TO_FD)
		return vf->kind == VGPU_KIND_CTL ? vgpu_attach_gpus(vf, uptr, size) :
						   -EINVAL;

	kbuf = kmalloc(size, GFP_KERNEL_ACCOUNT);       /* the caller's memcg */
	if (!kbuf)
		return -ENOMEM;
	if (copy_from_user(kbuf, uptr, size)) {
		ret = -EFAULT;
		goto out;
	}
	ret = vgpu_escape_kbuf(vf, nr, kbuf, size);
	/* As the driver: parameters go back also when the escape failed. */
	if (ret != -EFAULT && ret != -EPERM && copy_to_user(uptr, kbuf, size))
		ret = -EFAULT;
out:
	kfree(kbuf);
	/* A call of this one broke: its answer is the poisoned file's. */
	if (READ_ONCE(vf->undo)) {
		vgpu_undo(vf);
		ret = -EIO;
	}
	return ret;
}
