// SPDX-License-Identifier: GPL-2.0
/*
 * ipc.c - CUDA IPC between the processes of one slice: an RM object
 * exported to a control file (NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD,
 * or several at indexes: ..._EXPORT_OBJECTS_TO_FD) and imported from it by
 * another client (..._IMPORT_OBJECT_FROM_FD, ..._IMPORT_OBJECTS_FROM_FD),
 * and the export's description (..._GET_EXPORT_OBJECT_INFO).
 *
 * What the driver does (535.261.03 and 595.45.04, arch/nvalloc/unix/src/os.c
 * and rmobjexportimport.c): the export dups the object into RM's own client
 * (RmExportObject, hObjExportRmClient) and keeps that dup's handle in the
 * named file's private data (nvfp->handles, _initializeExportObjectFd: once
 * per file); the dup lives until that file's release
 * (rm_cleanup_file_private: RmFreeObjExportHandle), whatever happens to the
 * exporter's own object.  The import dups it from RM's client into the
 * caller's (RmImportObject), by the file alone.
 *
 * So the FB of an exported object outlives its exporter's free, and an
 * export-free-allocate loop would hold FB no charge covers.  Here:
 *  - the export file must be a control file of the caller's slice (a proxy
 *    of its real file goes to the driver, fdxlate.c), the object memory
 *    vgpu.ko tracks in the caller's client; the export file's vgpu_file
 *    takes a reference on the object's charge before the call, whatever
 *    status comes back (a status is forgeable: docs/mediator.md), and keeps
 *    it until the real file's release has run (a reaper, as a UVM file's
 *    charges: the driver frees the dup there, and a sibling's dup()ed
 *    proxy can keep the real file alive after vgpu.ko's file is gone);
 *  - the import file must be a control file of the caller's slice that
 *    vgpu.ko saw an export into; the new object is tracked in the caller's
 *    client with that export's charge (a reference, as RM_DUP_OBJECT's), on
 *    a parent of the same GPU.
 * The charge is the exporting slice's, and it goes back when the last of
 * the exporter's object, the export and every import is gone.  A file of
 * another slice, or a file that is not the slice's, is refused before the
 * driver sees it (the driver's answer for a descriptor that is not its
 * control file: NV_ERR_INVALID_PARAMETER).  Every check is on vgpu.ko's
 * copy of the parameters, and that copy is what the driver reads (a call
 * page).  Serialised by vgpu_ipc_lock, held across the driver call, so the
 * model and the driver's state change together (taken before any call
 * lock, never inside one), then the caller's client's lock, as a kernel-path
 * allocation takes it.
 */
#include <linux/file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include <linux/module.h>

#include "vgpu.h"

/* ctrl0000unix.h: the same in every release vgpu.ko has tables for. */
#define VGPU_OS_UNIX_EXPORT_OBJECT_TYPE_RM   1
#define VGPU_NV_MAX_DEVICES                  32

struct vgpu_unix_object {
	u32 type;
	NvHandle hDevice, hParent, hObject;
};

struct vgpu_export_to_fd {
	struct vgpu_unix_object object;
	s32 fd;
	u32 flags;
};

struct vgpu_import_from_fd {
	s32 fd;
	struct vgpu_unix_object object;
};

/* The several-object forms: the same layout in every release (2128, 652). */
#define VGPU_EXPORT_MAX_OBJECTS 512
#define VGPU_IMPORT_MAX_OBJECTS 128

struct vgpu_export_objects {
	s32 fd;
	NvHandle hDevice;
	u16 maxObjects;
	u8 metadata[64];
	NvHandle objects[VGPU_EXPORT_MAX_OBJECTS];
	u16 numObjects;
	u16 index;
};
static_assert(sizeof(struct vgpu_export_objects) == 2128, "EXPORT_OBJECTS_TO_FD");

struct vgpu_import_objects {
	s32 fd;
	NvHandle hParent;
	NvHandle objects[VGPU_IMPORT_MAX_OBJECTS];
	u8 objectTypes[VGPU_IMPORT_MAX_OBJECTS];
	u16 numObjects;
	u16 index;
};
static_assert(sizeof(struct vgpu_import_objects) == 652, "IMPORT_OBJECTS_FROM_FD");

/*
 * GET_EXPORT_OBJECT_INFO's head: fd and deviceInstance lie at 0 and 4 in
 * every release (595.45.04 adds gpuInstanceId after them: 80 bytes, 76
 * before); the rest is the driver's answer, passed on.
 */
struct vgpu_export_info {
	s32 fd;
	u32 deviceInstance;
};
#define VGPU_EXPORT_INFO_MAX 80

static DEFINE_MUTEX(vgpu_ipc_lock);
atomic_t vgpu_nr_exports = ATOMIC_INIT(0);

bool vgpu_ipc_cmd(u32 cmd)
{
	return cmd == NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD ||
	       cmd == NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECT_FROM_FD ||
	       cmd == NV0000_CTRL_CMD_OS_UNIX_GET_EXPORT_OBJECT_INFO ||
	       cmd == NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD ||
	       cmd == NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECTS_FROM_FD;
}

/*
 * What an export of h takes from the caller's client: memory vgpu.ko
 * tracks there, live, and a reference on its charge (none for memory
 * without one).  The driver's answer for a handle it does not find, or
 * INSUFFICIENT_PERMISSIONS for an object that is not memory.
 */
static NV_STATUS vgpu_ipc_source(NvHandle hClient, NvHandle h,
				 struct vgpu_export_slot *slot)
{
	struct vgpu_obj *src;

	rcu_read_lock();
	src = vgpu_obj_find(hClient, h);
	if (!src || READ_ONCE(src->lost) || src->type != VGPU_OBJ_MEMORY ||
	    (src->charge && !refcount_inc_not_zero(&src->charge->ref))) {
		rcu_read_unlock();
		return src ? NV_ERR_INSUFFICIENT_PERMISSIONS : NV_ERR_OBJECT_NOT_FOUND;
	}
	slot->charge = src->charge;
	slot->hclass = src->hclass;
	slot->gpu = src->gpu;
	slot->used = true;
	rcu_read_unlock();
	atomic_inc(&vgpu_nr_exports);
	return NV_OK;
}

static void vgpu_export_slot_put(struct vgpu_export_slot *e)
{
	if (!e->used)
		return;
	vgpu_charge_put(e->charge);
	e->charge = NULL;
	e->used = false;
	atomic_dec(&vgpu_nr_exports);
}

/* The driver call, on a call page, with the descriptor at *pfd replaced. */
static NV_STATUS vgpu_ipc_call(struct vgpu_file *vf, NVOS54_PARAMETERS *p,
			       void *kp, u32 size, s32 *pfd, int fd)
{
	NVOS54_PARAMETERS kc = *p;
	struct vgpu_buf b = { .kbuf = kp, .size = size,
			      .ptr_off = offsetof(NVOS54_PARAMETERS, params) };
	s32 mine = *pfd;
	long ret;

	*pfd = fd;
	kc.status = NV_ERR_GENERIC;
	ret = vgpu_call_nv(vf, vf->real, NV_ESC_RM_CONTROL, &kc, sizeof(kc), &b, 1);
	*pfd = mine;            /* the caller sees its own descriptor back */
	return ret ? vgpu_call_status(ret) : kc.status;
}

/* A control file of this slice at fd, as a proxy for the driver; or refused. */
static NV_STATUS vgpu_ipc_file(struct vgpu_file *vf, int fd, struct vgpu_tmpfd *t,
			       struct vgpu_file **ef)
{
	if (fd < 0 || vgpu_fd_xlate(vf, fd, VGPU_KINDS(VGPU_KIND_CTL), t))
		return NV_ERR_INVALID_PARAMETER;
	*ef = t->vfilp->private_data;
	return NV_OK;
}

static NV_STATUS vgpu_ipc_export(struct vgpu_file *vf, NVOS54_PARAMETERS *p,
				 struct vgpu_export_to_fd *e, u32 size)
{
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_export_slot *slot;
	struct vgpu_client *c;
	struct vgpu_file *ef;
	NV_STATUS st;

	/* The driver's own refusals (cliresCtrlCmdOsUnixExportObjectToFd_IMPL). */
	if ((e->flags & 1) || e->object.type != VGPU_OS_UNIX_EXPORT_OBJECT_TYPE_RM ||
	    e->fd == -1)
		return NV_ERR_INVALID_PARAMETER;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	slot = kzalloc(sizeof(*slot), GFP_KERNEL_ACCOUNT);
	if (!slot) {
		vgpu_client_put(c);
		return NV_ERR_NO_MEMORY;
	}

	mutex_lock(&vgpu_ipc_lock);
	/*
	 * The client's lock from the check to the driver's export: the object
	 * at that handle cannot be freed and made again in between (every
	 * creation and free in the client holds it), so the charge taken is
	 * that of the object the driver exports.
	 */
	mutex_lock(&c->lock);
	if (c->dead) {
		st = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	/* Memory vgpu.ko tracks in the caller's client: its charge goes along. */
	st = vgpu_ipc_source(p->hClient, e->object.hObject, slot);
	if (st != NV_OK)
		goto out;
	st = vgpu_ipc_file(vf, e->fd, &t, &ef);
	if (st != NV_OK)
		goto out;
	/* _initializeExportObjectFd: one export setup per file. */
	if (ef->exports) {
		st = NV_ERR_STATE_IN_USE;
		goto out;
	}
	/*
	 * Before the call, and kept whatever status comes back: an export the
	 * driver made holds the FB until the file's release; one it refused
	 * only holds the charge as long (and the file takes no other export,
	 * as the driver's would not after a success).
	 */
	mutex_lock(&ef->lock);
	ef->exports = slot;
	ef->max_exports = 1;
	mutex_unlock(&ef->lock);
	slot = NULL;
	st = vgpu_ipc_call(vf, p, e, size, &e->fd, t.fd);
out:
	vgpu_fd_restore(&t);
	mutex_unlock(&c->lock);
	mutex_unlock(&vgpu_ipc_lock);
	if (slot) {
		vgpu_export_slot_put(slot);
		kfree(slot);
	}
	vgpu_client_put(c);
	return st;
}

/*
 * EXPORT_OBJECTS_TO_FD (cliresCtrlCmdOsUnixExportObjectsToFd_IMPL): the
 * file is set up on its first export with maxObjects slots (0 refused),
 * numObjects (at most 512) handles go to slots index.., each exported
 * (0: the slot is emptied), every one or none; a slot the driver holds is
 * freed and replaced.  vgpu.ko's model is one slot per index, filled
 * before the call and kept whatever comes back (as the single form's), and
 * never replaced: an export into a slot the model holds is refused
 * (NV_ERR_STATE_IN_USE; CUDA exports into a new file).  So a slot the
 * driver holds is always the one vgpu.ko recorded at that index (the only
 * way to fill it is a call vgpu.ko recorded first, and no later call
 * reaches it), and an import finds the charge of what it imports.  A slot
 * the driver refused to fill holds its charge until the file's release.
 */
static NV_STATUS vgpu_ipc_export_many(struct vgpu_file *vf, NVOS54_PARAMETERS *p,
				      struct vgpu_export_objects *x, u32 size)
{
	struct vgpu_export_slot *fresh = NULL, *taken = NULL, *slots;
	struct vgpu_tmpfd t = { .fd = -1 };
	u32 n = x->numObjects, idx = x->index, max, i;
	struct vgpu_client *c;
	struct vgpu_file *ef;
	NV_STATUS st = NV_OK;

	if (n > VGPU_EXPORT_MAX_OBJECTS)
		return NV_ERR_INVALID_PARAMETER;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	taken = kcalloc(max_t(u32, n, 1), sizeof(*taken), GFP_KERNEL_ACCOUNT);
	if (!taken) {
		vgpu_client_put(c);
		return NV_ERR_NO_MEMORY;
	}

	mutex_lock(&vgpu_ipc_lock);
	mutex_lock(&c->lock);           /* as vgpu_ipc_export's, to the call */
	if (c->dead)
		st = NV_ERR_INVALID_CLIENT;
	for (i = 0; st == NV_OK && i < n; i++)
		if (x->objects[i])
			st = vgpu_ipc_source(p->hClient, x->objects[i], &taken[i]);
	if (st != NV_OK)
		goto out;
	st = vgpu_ipc_file(vf, x->fd, &t, &ef);
	if (st != NV_OK)
		goto out;
	mutex_lock(&ef->lock);
	slots = ef->exports;
	max = ef->max_exports;
	mutex_unlock(&ef->lock);
	if (!slots) {
		/* _initializeExportObjectFd, with the file's size. */
		if (!x->maxObjects) {
			st = NV_ERR_INVALID_PARAMETER;
			goto out;
		}
		max = x->maxObjects;
		fresh = kcalloc(max, sizeof(*fresh), GFP_KERNEL_ACCOUNT);
		if (!fresh) {
			st = NV_ERR_NO_MEMORY;
			goto out;
		}
		slots = fresh;
	}
	if (idx + n > max) {
		st = NV_ERR_OUT_OF_RANGE;
		goto out;
	}
	for (i = 0; i < n; i++)
		if (slots[idx + i].used) {
			st = NV_ERR_STATE_IN_USE;
			goto out;
		}
	/* Recorded before the call, and kept. */
	mutex_lock(&ef->lock);
	if (fresh) {
		ef->exports = fresh;
		ef->max_exports = max;
		fresh = NULL;
	}
	for (i = 0; i < n; i++) {
		ef->exports[idx + i] = taken[i];
		taken[i].used = false;
	}
	mutex_unlock(&ef->lock);
	st = vgpu_ipc_call(vf, p, x, size, &x->fd, t.fd);
out:
	vgpu_fd_restore(&t);
	mutex_unlock(&c->lock);
	mutex_unlock(&vgpu_ipc_lock);
	kfree(fresh);
	for (i = 0; i < n; i++)
		vgpu_export_slot_put(&taken[i]);
	kfree(taken);
	vgpu_client_put(c);
	return st;
}

static NV_STATUS vgpu_ipc_import(struct vgpu_file *vf, NVOS54_PARAMETERS *p,
				 struct vgpu_import_from_fd *m, u32 size)
{
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_charge *charge = NULL;
	struct vgpu_export_slot *slot;
	struct vgpu_obj *parent;
	NvHandle hparent, hobject;
	struct vgpu_client *c;
	struct vgpu_file *ef;
	u32 hclass, gpu;
	NV_STATUS st;

	if (m->object.type != VGPU_OS_UNIX_EXPORT_OBJECT_TYPE_RM || m->fd == -1)
		return NV_ERR_INVALID_PARAMETER;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;

	mutex_lock(&vgpu_ipc_lock);
	st = vgpu_ipc_file(vf, m->fd, &t, &ef);
	if (st != NV_OK)
		goto out_ipc;
	/* cliresCtrlCmdOsUnixImportObjectFromFd_IMPL: one export, at index 0. */
	mutex_lock(&ef->lock);
	slot = ef->max_exports == 1 ? ef->exports : NULL;
	if (slot && slot->used && (!slot->charge || refcount_inc_not_zero(&slot->charge->ref))) {
		charge = slot->charge;
		hclass = slot->hclass;
		gpu = slot->gpu;
	} else {
		slot = NULL;
	}
	mutex_unlock(&ef->lock);
	if (!slot) {
		st = NV_ERR_INVALID_PARAMETER;
		goto out_ipc;
	}

	mutex_lock(&c->lock);
	if (c->dead) {
		st = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	/* As RM_DUP_OBJECT's: a parent of the caller's client, on that GPU. */
	parent = vgpu_obj_find(p->hClient, m->object.hParent);
	if (!parent || parent->lost ||
	    (parent->type != VGPU_OBJ_DEVICE && parent->type != VGPU_OBJ_SUBDEVICE) ||
	    parent->gpu != gpu) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	/*
	 * A handle the client has already is refused here, not by the
	 * driver: a forged NV_OK would otherwise have the existing object
	 * taken for this call's (and freed when it cannot be recorded twice).
	 */
	if (m->object.hObject && (vgpu_obj_find(p->hClient, m->object.hObject) ||
				  vgpu_rm_exists(p->hClient, m->object.hObject))) {
		st = NV_ERR_INSERT_DUPLICATE_NAME;
		goto out;
	}
	st = vgpu_handle_for(p->hClient, &m->object.hObject);
	if (st != NV_OK)
		goto out;
	hparent = m->object.hParent;
	hobject = m->object.hObject;
	st = vgpu_ipc_call(vf, p, m, size, &m->fd, t.fd);
	/*
	 * The parameters came back from the call page, which a sibling may
	 * write after the driver's copy-out: the handles are vgpu.ko's own
	 * again (the one it chose, the parent it checked), never read back.
	 */
	m->object.hParent = hparent;
	m->object.hObject = hobject;
	st = vgpu_created_anyway(vf, p->hClient, m->object.hParent,
				 m->object.hObject, st);
	/* NV_OK is read back too: the object must exist (vgpu_rm_dup_path). */
	if (st == NV_OK && !vgpu_rm_exists(p->hClient, m->object.hObject))
		st = NV_ERR_INVALID_STATE;
	if (st != NV_OK)
		goto out;
	if (vgpu_obj_add(c, parent, m->object.hObject, hclass, VGPU_OBJ_MEMORY,
			 gpu, charge)) {
		vgpu_rm_free(p->hClient, m->object.hParent, m->object.hObject);
		st = NV_ERR_NO_MEMORY;
		goto out;
	}
	charge = NULL;          /* now the imported object's */
out:
	mutex_unlock(&c->lock);
out_ipc:
	vgpu_fd_restore(&t);
	mutex_unlock(&vgpu_ipc_lock);
	vgpu_charge_put(charge);
	vgpu_client_put(c);
	return st;
}

/*
 * IMPORT_OBJECTS_FROM_FD (cliresCtrlCmdOsUnixImportObjectsFromFd_IMPL):
 * numObjects (at most 128) slots from index, each one the file holds
 * imported under hParent at objects[i] (0: RM picks), an empty one skipped
 * (objectTypes NONE), stopping at the first failure without undoing the
 * ones before.  The model says which slots hold what (an empty slot of the
 * model is empty in the driver); each handle to be made is picked or
 * checked absent before the call, under the client's lock, and what
 * exists after it is tracked with its slot's charge, whatever the status.
 */
static NV_STATUS vgpu_ipc_import_many(struct vgpu_file *vf, NVOS54_PARAMETERS *p,
				      struct vgpu_import_objects *m, u32 size)
{
	struct vgpu_export_slot *want = NULL;
	struct vgpu_tmpfd t = { .fd = -1 };
	u32 n = m->numObjects, idx = m->index, i, j;
	struct vgpu_obj *parent;
	NvHandle hparent, *handles;
	struct vgpu_client *c;
	struct vgpu_file *ef;
	NV_STATUS st, called;

	if (n > VGPU_IMPORT_MAX_OBJECTS)
		return NV_ERR_INVALID_PARAMETER;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	want = kcalloc(max_t(u32, n, 1), sizeof(*want), GFP_KERNEL_ACCOUNT);
	if (!want) {
		vgpu_client_put(c);
		return NV_ERR_NO_MEMORY;
	}

	mutex_lock(&vgpu_ipc_lock);
	st = vgpu_ipc_file(vf, m->fd, &t, &ef);
	if (st != NV_OK)
		goto out_ipc;
	mutex_lock(&ef->lock);
	if (!ef->exports)
		st = NV_ERR_INVALID_PARAMETER;
	else if (idx + n > ef->max_exports)
		st = NV_ERR_OUT_OF_RANGE;
	for (i = 0; st == NV_OK && i < n; i++) {
		struct vgpu_export_slot *e = &ef->exports[idx + i];

		if (!e->used)
			continue;
		if (e->charge && !refcount_inc_not_zero(&e->charge->ref))
			continue;       /* cannot be: the slot holds one */
		want[i] = *e;
	}
	mutex_unlock(&ef->lock);
	if (st != NV_OK)
		goto out_ipc;

	mutex_lock(&c->lock);
	if (c->dead) {
		st = NV_ERR_INVALID_CLIENT;
		goto out;
	}
	parent = vgpu_obj_find(p->hClient, m->hParent);
	if (!parent || parent->lost ||
	    (parent->type != VGPU_OBJ_DEVICE && parent->type != VGPU_OBJ_SUBDEVICE)) {
		st = NV_ERR_INVALID_OBJECT_PARENT;
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (!want[i].used)
			continue;
		if (want[i].gpu != parent->gpu) {
			st = NV_ERR_INVALID_OBJECT_PARENT;
			goto out;
		}
		if (m->objects[i]) {
			/* A handle the client has, or one asked twice: refused. */
			for (j = 0; j < i; j++)
				if (want[j].used && m->objects[j] == m->objects[i])
					st = NV_ERR_INSERT_DUPLICATE_NAME;
			if (st == NV_OK && (vgpu_obj_find(p->hClient, m->objects[i]) ||
					    vgpu_rm_exists(p->hClient, m->objects[i])))
				st = NV_ERR_INSERT_DUPLICATE_NAME;
		} else {
			st = vgpu_handle_for(p->hClient, &m->objects[i]);
		}
		if (st != NV_OK)
			goto out;
	}
	handles = kmemdup(m->objects, sizeof(m->objects), GFP_KERNEL);
	if (!handles) {
		st = NV_ERR_NO_MEMORY;
		goto out;
	}
	hparent = m->hParent;
	called = vgpu_ipc_call(vf, p, m, size, &m->fd, t.fd);
	/*
	 * The handles are vgpu.ko's own again (those it chose or checked), not
	 * what came back from the call page, which a sibling may write after
	 * the driver's copy-out; objectTypes, the driver's answer, goes back.
	 */
	m->hParent = hparent;
	memcpy(m->objects, handles, sizeof(m->objects));
	kfree(handles);
	/* What the driver made, whatever it says: tracked with its charge. */
	for (i = 0; i < n; i++) {
		if (!want[i].used || !vgpu_rm_exists(p->hClient, m->objects[i]))
			continue;
		if (vgpu_obj_add(c, parent, m->objects[i], want[i].hclass,
				 VGPU_OBJ_MEMORY, want[i].gpu, want[i].charge)) {
			vgpu_rm_free(p->hClient, m->hParent, m->objects[i]);
			called = NV_ERR_NO_MEMORY;
			continue;
		}
		want[i].used = false;   /* the charge is the object's now */
	}
	st = called;
out:
	mutex_unlock(&c->lock);
out_ipc:
	vgpu_fd_restore(&t);
	mutex_unlock(&vgpu_ipc_lock);
	for (i = 0; i < n; i++)
		if (want[i].used)
			vgpu_charge_put(want[i].charge);
	kfree(want);
	vgpu_client_put(c);
	return st;
}

/*
 * The export's device instance is the driver's numbering of the host's
 * GPUs: given back as the slice's number (NV0080's deviceId, memory.c).
 */
static NV_STATUS vgpu_ipc_info(struct vgpu_file *vf, NVOS54_PARAMETERS *p,
			       struct vgpu_export_info *x, u32 size)
{
	struct vgpu_tmpfd t = { .fd = -1 };
	struct vgpu_slice *s = vf->slice;
	struct vgpu_file *ef;
	NV_STATUS st;
	u32 i;

	mutex_lock(&vgpu_ipc_lock);
	st = vgpu_ipc_file(vf, x->fd, &t, &ef);
	if (st == NV_OK)
		st = vgpu_ipc_call(vf, p, x, size, &x->fd, t.fd);
	vgpu_fd_restore(&t);
	mutex_unlock(&vgpu_ipc_lock);
	if (st != NV_OK || x->deviceInstance >= VGPU_NV_MAX_DEVICES)
		return st;
	for (i = 0; i < s->nr_gpus; i++)
		if (s->gpus[i].dev_inst == x->deviceInstance) {
			x->deviceInstance = i;
			return NV_OK;
		}
	return NV_ERR_INVALID_PARAMETER;
}

/**
 * vgpu_ipc_control - the OS_UNIX export, import and info controls
 * @vf: the caller's control file
 * @p: the control, its size already the release's
 *
 * Return: the status for the caller.
 */
NV_STATUS vgpu_ipc_control(struct vgpu_file *vf, NVOS54_PARAMETERS *p, u32 size)
{
	void __user *uparams = u64_to_user_ptr(p->params);
	struct vgpu_client *c;
	NV_STATUS st;
	void *kp;

	if (p->paramsSize != size)
		return NV_ERR_INVALID_PARAM_STRUCT;
	if (!p->params)
		return NV_ERR_INVALID_ARGUMENT;
	c = vgpu_file_client(vf, p->hClient);
	if (!c)
		return NV_ERR_INVALID_CLIENT;
	vgpu_client_put(c);
	/* NV0000 controls: the object is the client itself. */
	if (p->hObject != p->hClient)
		return NV_ERR_NOT_SUPPORTED;
	if (size > sizeof(struct vgpu_export_objects))
		return NV_ERR_INVALID_PARAM_STRUCT;
	kp = kzalloc(max_t(u32, size, VGPU_EXPORT_INFO_MAX), GFP_KERNEL_ACCOUNT);
	if (!kp)
		return NV_ERR_NO_MEMORY;
	if (copy_from_user(kp, uparams, size)) {
		kfree(kp);
		return NV_ERR_INVALID_ARGUMENT;
	}
	switch (p->cmd) {
	case NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECT_TO_FD:
		st = size == sizeof(struct vgpu_export_to_fd) ?
		     vgpu_ipc_export(vf, p, kp, size) : NV_ERR_INVALID_PARAM_STRUCT;
		break;
	case NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECT_FROM_FD:
		st = size == sizeof(struct vgpu_import_from_fd) ?
		     vgpu_ipc_import(vf, p, kp, size) : NV_ERR_INVALID_PARAM_STRUCT;
		break;
	case NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD:
		st = size == sizeof(struct vgpu_export_objects) ?
		     vgpu_ipc_export_many(vf, p, kp, size) : NV_ERR_INVALID_PARAM_STRUCT;
		break;
	case NV0000_CTRL_CMD_OS_UNIX_IMPORT_OBJECTS_FROM_FD:
		st = size == sizeof(struct vgpu_import_objects) ?
		     vgpu_ipc_import_many(vf, p, kp, size) : NV_ERR_INVALID_PARAM_STRUCT;
		break;
	default:
		st = size >= sizeof(struct vgpu_export_info) && size <= VGPU_EXPORT_INFO_MAX ?
		     vgpu_ipc_info(vf, p, kp, size) : NV_ERR_INVALID_PARAM_STRUCT;
		break;
	}
	/* As the driver: the parameters go back (the caller's fd in them). */
	if (copy_to_user(uparams, kp, size) && st == NV_OK)
		st = NV_ERR_INVALID_ARGUMENT;
	kfree(kp);
	return st;
}

/* ------------------------------------------------------------ release */

/*
 * The export file's charges, kept until the driver's release of its real
 * file has freed the exported dups (rm_cleanup_file_private), as a UVM
 * file's are (uvm.c, vgpu_uvm_reap): the reaper waits until its reference
 * to the real file is the last one, drops it synchronously, then returns
 * the charges.  It pins the module meanwhile.
 */
struct vgpu_ipc_reaper {
	struct delayed_work dw;
	struct file *real;
	struct vgpu_export_slot *slots;
	u16 n;
	unsigned long delay;
};

static void vgpu_ipc_reap(struct work_struct *work)
{
	struct vgpu_ipc_reaper *rp =
		container_of(to_delayed_work(work), struct vgpu_ipc_reaper, dw);
	u16 i;

	if (file_count(rp->real) > 1) {
		rp->delay = clamp(rp->delay * 2, 1UL, (unsigned long)HZ);
		queue_delayed_work(vgpu_wq, &rp->dw, rp->delay);
		return;
	}
	__fput_sync(rp->real);          /* a kernel thread: the release runs now */
	for (i = 0; i < rp->n; i++)
		vgpu_export_slot_put(&rp->slots[i]);
	kfree(rp->slots);
	kfree(rp);
	atomic_dec(&vgpu_nr_reapers);
	module_put(THIS_MODULE);
}

/**
 * vgpu_ipc_release - a control file's release, after its clients are freed
 *
 * Returns true if it took over vf->real (the caller must not drop it):
 * the file holds exports.  Nothing here fails.
 */
bool vgpu_ipc_release(struct vgpu_file *vf)
{
	struct vgpu_ipc_reaper *rp;

	/* No one else can reach vf now (an xlate holds a file reference). */
	if (!vf->exports)
		return false;
	rp = kzalloc(sizeof(*rp), GFP_KERNEL | __GFP_NOFAIL);
	INIT_DELAYED_WORK(&rp->dw, vgpu_ipc_reap);
	rp->real = vf->real;
	rp->slots = vf->exports;
	rp->n = vf->max_exports;
	vf->exports = NULL;
	__module_get(THIS_MODULE);      /* we run inside our fops' release */
	atomic_inc(&vgpu_nr_reapers);
	queue_delayed_work(vgpu_wq, &rp->dw, 0);
	return true;
}
