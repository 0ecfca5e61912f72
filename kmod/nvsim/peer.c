// SPDX-License-Identifier: GPL-2.0
/*
 * peer.c - what a multi-GPU job asks between its own GPUs and processes:
 * NV50_P2P objects (src/kernel/gpu/bus/p2p_api.c), UVM peer access
 * (kernel-open/nvidia-uvm/uvm_va_space.c) and CUDA IPC's export of an
 * object to a file and import from it (arch/nvalloc/unix/src/os.c,
 * rmobjexportimport.c), each after the 535.261.03 function it follows
 * (595.45.04 is the same in what is modelled here).
 *
 * nvsim's GPUs are PCIe peers of each other over BAR1 (no mailbox, no
 * NVLink): every P2P capability query of the real driver would find a
 * connection, so construction never fails for want of one.
 */
#include <linux/bitops.h>
#include <linux/file.h>

#include "nvsim.h"
#include "classes.h"
#include "ctrl.h"

/* cl503b.h (595.45.04: 88 bytes; 535.261.03 ends after p2lBar1P2PDmaInfo, 72). */
#define NVSIM_NV50_P2P 0x0000503bU

typedef struct {
	NvHandle hSubDevice;
	NvHandle hPeerSubDevice;
	NvU32 subDevicePeerIdMask;
	NvU32 peerSubDevicePeerIdMask;
	NvU64 mailboxBar1Addr;
	NvU32 mailboxTotalSize;
	NvU32 flags;
	NvU32 subDeviceEgmPeerIdMask;
	NvU32 peerSubDeviceEgmPeerIdMask;
	NvU64 l2pBar1P2PDmaInfo[2];     /* dma_address, dma_size: out */
	NvU64 p2lBar1P2PDmaInfo[2];
	NvU64 l2pFabricP2PInfo;         /* 595.45.04 only */
	NvU64 p2lFabricP2PInfo;
} NVSIM_NV503B_ALLOC_PARAMETERS;
static_assert(sizeof(NVSIM_NV503B_ALLOC_PARAMETERS) == 88, "NV503B 595.45.04");

/* ONEBITSET (nvmisc.h): one bit, where a mask is given at all. */
static bool nvsim_p2p_mask_ok(u32 mask)
{
	return !mask || is_power_of_2(mask);
}

/* subdeviceGetByHandle (subdevice.c): a live subdevice of this client. */
static struct nvsim_object *nvsim_p2p_subdevice(struct nvsim_client *client,
						NvHandle h)
{
	struct nvsim_object *o = nvsim_object_find(client, h);

	return o && o->type == NVSIM_OBJ_SUBDEVICE && !o->invalidated ? o : NULL;
}

/*
 * NV50_P2P under a client (resource_list.h: parent RmClientResource,
 * RS_REQUIRED params, non-privileged), as p2papiConstruct_IMPL
 * (p2p_api.c): both subdevices are looked up in the allocating client only
 * (subdeviceGetByHandle on pCallContext->pClient), NV_ERR_INVALID_ARGUMENT
 * otherwise; a peer id mask given must have one bit, and a loopback's two
 * masks must agree; the object becomes a dependant of both subdevices
 * (refAddDependant at the end of p2papiConstruct_IMPL), so freeing either
 * invalidates it.  The peer ids RM picks (kbusCreateP2PMapping) and the BAR1
 * DMA info it writes back are not modelled: nvsim's GPUs map nothing.
 */
static NV_STATUS nvsim_p2p_ctor(const struct nvsim_call *call,
				const struct nvsim_class_desc *cls,
				struct nvsim_client *client,
				struct nvsim_object *parent,
				NvHandle *handle, u32 hclass, void *params)
{
	NVSIM_NV503B_ALLOC_PARAMETERS *p = params;
	struct nvsim_object *sub, *peer, *obj;
	NV_STATUS status;

	sub = nvsim_p2p_subdevice(client, p->hSubDevice);
	peer = nvsim_p2p_subdevice(client, p->hPeerSubDevice);
	if (!sub || !peer)
		return NV_ERR_INVALID_ARGUMENT;
	if (!nvsim_p2p_mask_ok(p->subDevicePeerIdMask) ||
	    !nvsim_p2p_mask_ok(p->peerSubDevicePeerIdMask) ||
	    !nvsim_p2p_mask_ok(p->subDeviceEgmPeerIdMask) ||
	    !nvsim_p2p_mask_ok(p->peerSubDeviceEgmPeerIdMask))
		return NV_ERR_INVALID_ARGUMENT;
	if (p->hSubDevice == p->hPeerSubDevice &&
	    (p->subDevicePeerIdMask != p->peerSubDevicePeerIdMask ||
	     p->subDeviceEgmPeerIdMask != p->peerSubDeviceEgmPeerIdMask))
		return NV_ERR_INVALID_ARGUMENT;

	status = nvsim_object_new(call, client, parent, handle, hclass,
				  NVSIM_OBJ_P2P, &obj);
	if (status != NV_OK)
		return status;
	obj->p2p.local = sub->gpu;
	obj->p2p.peer = peer->gpu;
	/*
	 * Peer ids the caller picked (kbusCreateP2PMapping then takes those
	 * for the pair, for every client of the two GPUs): counted, so that a
	 * test sees whether a request with ids ever reached the driver.
	 */
	obj->p2p.chosen_ids = p->subDevicePeerIdMask || p->peerSubDevicePeerIdMask;
	status = nvsim_object_depend(sub, obj);
	if (status == NV_OK && peer != sub)
		status = nvsim_object_depend(peer, obj);
	if (status != NV_OK) {
		nvsim_object_destroy(obj);
		return status;
	}
	atomic_inc(&nvsim.nr_p2p);
	if (obj->p2p.chosen_ids)
		atomic_inc(&nvsim.nr_p2p_chosen_ids);
	return NV_OK;
}

/* p2papiDestruct_IMPL: the mapping goes (kbusRemoveP2PMapping). */
void nvsim_p2p_teardown(struct nvsim_object *obj)
{
	if (obj->p2p.local)
		atomic_dec(&nvsim.nr_p2p);
	if (obj->p2p.local && obj->p2p.chosen_ids)
		atomic_dec(&nvsim.nr_p2p_chosen_ids);
	obj->p2p.local = obj->p2p.peer = NULL;
}

static const struct nvsim_class_desc nvsim_peer_classes[] = {
	{ NVSIM_NV50_P2P, sizeof(NVSIM_NV503B_ALLOC_PARAMETERS), false,
	  NVSIM_BIT(NVSIM_OBJ_CLIENT), nvsim_p2p_ctor },
};

const struct nvsim_class_desc *nvsim_peer_class_find(u32 hclass)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(nvsim_peer_classes); i++)
		if (nvsim_peer_classes[i].hclass == hclass)
			return &nvsim_peer_classes[i];
	return NULL;
}

/* ------------------------------------------------------------ UVM peers */

#define NVSIM_NV_ERR_INVALID_DEVICE 0x00000026

/* The GPU with that UUID if this UVM file registered it, else NULL. */
static struct nvsim_gpu *nvsim_uvm_registered(struct nvsim_file *nvfp,
					      const u8 *uuid)
{
	unsigned int i;

	for (i = 0; i < nvsim.num_gpus; i++)
		if (!memcmp(nvsim.gpus[i].uuid, uuid, NV_UUID_LEN))
			return nvfp->uvm_gpus & BIT(i) ? &nvsim.gpus[i] : NULL;
	return NULL;
}

/*
 * UVM_REGISTER_GPU of a GPU nvsim has: remembered for the peer checks.
 * Simplified: UVM_UNREGISTER_GPU (cuda.c) does not forget it, nor disable
 * its pairs as uvm_va_space_unregister_gpu does; the VA space's end does.
 */
void nvsim_uvm_peer_register(struct nvsim_file *nvfp, const u8 *uuid)
{
	unsigned int i;

	lockdep_assert_held(&nvsim.lock);
	for (i = 0; i < nvsim.num_gpus; i++)
		if (!memcmp(nvsim.gpus[i].uuid, uuid, NV_UUID_LEN))
			nvfp->uvm_gpus |= BIT(i);
}

/*
 * UVM_ENABLE_PEER_ACCESS: uvm_api_enable_peer_access (uvm_va_space.c).
 * retain_pcie_peers_from_uuids finds both GPUs among the VA space's
 * registered ones (uvm_va_space_get_gpu_by_uuid), distinct, else
 * NV_ERR_INVALID_DEVICE; a pair already enabled is NV_ERR_INVALID_DEVICE
 * too; then enable_peers.  nvsim's GPUs are PCIe peers, so
 * uvm_gpu_retain_pcie_peer_access succeeds.
 */
NV_STATUS nvsim_uvm_enable_peer_access(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_PEER_ACCESS_PARAMS *p = buf;
	struct nvsim_gpu *a, *b;

	lockdep_assert_held(&nvsim.lock);
	a = nvsim_uvm_registered(nvfp, p->gpuUuidA);
	b = nvsim_uvm_registered(nvfp, p->gpuUuidB);
	if (!a || !b || a == b)
		return NVSIM_NV_ERR_INVALID_DEVICE;
	if (nvfp->uvm_peers[a->index] & BIT(b->index))
		return NVSIM_NV_ERR_INVALID_DEVICE;
	nvfp->uvm_peers[a->index] |= BIT(b->index);
	nvfp->uvm_peers[b->index] |= BIT(a->index);
	atomic_inc(&nvsim.nr_uvm_peers);
	return NV_OK;
}

/*
 * UVM_DISABLE_PEER_ACCESS: uvm_api_disable_peer_access: both registered,
 * distinct and enabled (uvm_va_space_pcie_peer_enabled), else
 * NV_ERR_INVALID_DEVICE.
 */
NV_STATUS nvsim_uvm_disable_peer_access(struct nvsim_file *nvfp, void *buf)
{
	NVSIM_UVM_PEER_ACCESS_PARAMS *p = buf;
	struct nvsim_gpu *a, *b;

	lockdep_assert_held(&nvsim.lock);
	a = nvsim_uvm_registered(nvfp, p->gpuUuidA);
	b = nvsim_uvm_registered(nvfp, p->gpuUuidB);
	if (!a || !b || a == b || !(nvfp->uvm_peers[a->index] & BIT(b->index)))
		return NVSIM_NV_ERR_INVALID_DEVICE;
	nvfp->uvm_peers[a->index] &= ~BIT(b->index);
	nvfp->uvm_peers[b->index] &= ~BIT(a->index);
	atomic_dec(&nvsim.nr_uvm_peers);
	return NV_OK;
}

/* The VA space's destruction disables every pair (uvm_va_space_destroy). */
void nvsim_uvm_peers_fini(struct nvsim_file *nvfp)
{
	unsigned int a, b;

	for (a = 0; a < NVSIM_MAX_GPUS; a++)
		for (b = a + 1; b < NVSIM_MAX_GPUS; b++)
			if (nvfp->uvm_peers[a] & BIT(b))
				atomic_dec(&nvsim.nr_uvm_peers);
	memset(nvfp->uvm_peers, 0, sizeof(nvfp->uvm_peers));
	nvfp->uvm_gpus = 0;
}

/* -------------------------------------------------------------- CUDA IPC */

/* ctrl0000unix.h (the same in 535.261.03 and 595.45.04). */
#define NVSIM_OS_UNIX_EXPORT_OBJECT_TO_FD     0x00003d05U
#define NVSIM_OS_UNIX_IMPORT_OBJECT_FROM_FD   0x00003d06U
#define NVSIM_OS_UNIX_GET_EXPORT_OBJECT_INFO  0x00003d08U
#define NVSIM_OS_UNIX_EXPORT_OBJECT_TYPE_RM   1
#define NVSIM_OS_UNIX_EXPORT_FLAGS_EMPTY_FD   1
#define NVSIM_NV_MAX_DEVICES                  32

typedef struct {
	NvU32 type;                     /* NV0000_CTRL_OS_UNIX_EXPORT_OBJECT_TYPE */
	NvHandle hDevice, hParent, hObject;
} NVSIM_OS_UNIX_EXPORT_OBJECT;

typedef struct {
	NVSIM_OS_UNIX_EXPORT_OBJECT object;
	NvS32 fd;
	NvU32 flags;
} NVSIM_OS_UNIX_EXPORT_OBJECT_TO_FD_PARAMS;

typedef struct {
	NvS32 fd;
	NVSIM_OS_UNIX_EXPORT_OBJECT object;
} NVSIM_OS_UNIX_IMPORT_OBJECT_FROM_FD_PARAMS;

/* 595.45.04's (80 bytes); up to 580 without gpuInstanceId (76). */
typedef struct {
	NvS32 fd;
	NvU32 deviceInstance;
	NvU32 gpuInstanceId;
	NvU16 maxObjects;
	NvU8 metadata[64];
} NVSIM_OS_UNIX_GET_EXPORT_OBJECT_INFO_PARAMS;

#define NVSIM_OS_UNIX_EXPORT_OBJECTS_TO_FD    0x00003d0bU
#define NVSIM_OS_UNIX_IMPORT_OBJECTS_FROM_FD  0x00003d0cU
#define NVSIM_EXPORT_MAX_OBJECTS              512
#define NVSIM_IMPORT_MAX_OBJECTS              128
#define NVSIM_IMPORT_OBJECT_TYPE_NONE         0
#define NVSIM_IMPORT_OBJECT_TYPE_VIDMEM       1
#define NVSIM_IMPORT_OBJECT_TYPE_SYSMEM       2

typedef struct {
	NvS32 fd;
	NvHandle hDevice;
	NvU16 maxObjects;
	NvU8 metadata[64];
	NvHandle objects[NVSIM_EXPORT_MAX_OBJECTS];
	NvU16 numObjects;
	NvU16 index;
} NVSIM_OS_UNIX_EXPORT_OBJECTS_TO_FD_PARAMS;

typedef struct {
	NvS32 fd;
	NvHandle hParent;
	NvHandle objects[NVSIM_IMPORT_MAX_OBJECTS];
	NvU8 objectTypes[NVSIM_IMPORT_MAX_OBJECTS];
	NvU16 numObjects;
	NvU16 index;
} NVSIM_OS_UNIX_IMPORT_OBJECTS_FROM_FD_PARAMS;

static_assert(sizeof(NVSIM_OS_UNIX_EXPORT_OBJECTS_TO_FD_PARAMS) == 2128, "0x3d0b");
static_assert(sizeof(NVSIM_OS_UNIX_IMPORT_OBJECTS_FROM_FD_PARAMS) == 652, "0x3d0c");
static_assert(sizeof(NVSIM_OS_UNIX_EXPORT_OBJECT_TO_FD_PARAMS) == 24, "0x3d05");
static_assert(sizeof(NVSIM_OS_UNIX_IMPORT_OBJECT_FROM_FD_PARAMS) == 20, "0x3d06");
static_assert(sizeof(NVSIM_OS_UNIX_GET_EXPORT_OBJECT_INFO_PARAMS) == 80, "0x3d08");

/*
 * The control file named by fd, as nv_get_file_private(fd, NV_TRUE)
 * (nv.c): a control node's file, by device number (a vgpu.ko proxy lends
 * the real file's private data).  Under nvsim.lock: fget takes no lock, and
 * the fput of a user task defers a last release to its return.
 */
static struct file *nvsim_export_file(int fd, struct nvsim_file **nvfp)
{
	return fd < 0 ? NULL : nvsim_fget(fd, NVSIM_KIND(NVSIM_FILE_CTL), nvfp);
}

/*
 * RmExportObject (rmobjexportimport.c): the object is found in the
 * caller's client (serverutilGetResourceRef: NV_ERR_OBJECT_NOT_FOUND), the
 * device instance of its nearest device ancestor noted, and the object
 * duped into RM's own client (hObjExportRmClient) under a device of that
 * instance, where it lives until the export handle is freed
 * (RmFreeObjExportHandle, at the export file's release or when an index
 * is exported over).  nvsim keeps the dup's memory itself (a reference on
 * the nvsim_mem, as the dup holds the memory descriptor): the FB stays
 * allocated exactly as long.  Memory only, as nvsim's RM_DUP_OBJECT
 * (NV_ERR_NOT_SUPPORTED for anything else).
 */
static NV_STATUS nvsim_export_object(struct nvsim_client *client, NvHandle h,
				     struct nvsim_export *out)
{
	struct nvsim_object *o = nvsim_object_find(client, h), *a;

	if (!o || o->invalidated)
		return NV_ERR_OBJECT_NOT_FOUND;
	if (o->type != NVSIM_OBJ_MEMORY || !o->memory.mem)
		return NV_ERR_NOT_SUPPORTED;
	out->inst = NVSIM_NV_MAX_DEVICES;
	for (a = o; a; a = a->parent)
		if (a->type == NVSIM_OBJ_DEVICE) {
			out->inst = a->device.inst;
			break;
		}
	nvsim_mem_get(o->memory.mem);
	out->mem = o->memory.mem;
	out->hclass = o->hclass;
	atomic_inc(&nvsim.nr_exports);
	return NV_OK;
}

/* RmFreeObjExportHandle: the internal client's dup goes. */
static void nvsim_export_free(struct nvsim_export *e)
{
	lockdep_assert_held(&nvsim.lock);
	if (!e->mem)
		return;
	nvsim_mem_put(e->mem);
	e->mem = NULL;
	atomic_dec(&nvsim.nr_exports);
}

/*
 * _initializeExportObjectFd (os.c): once per file (NV_ERR_STATE_IN_USE
 * after), hDevice 0 or a device of the caller's client (its instance is the
 * file's; another object is NV_ERR_INVALID_PARAMETER).
 */
static NV_STATUS nvsim_export_fd_init(struct nvsim_file *f, struct nvsim_client *client,
				      NvHandle hDevice, u16 max)
{
	u32 inst = NVSIM_NV_MAX_DEVICES;

	if (f->exports)
		return NV_ERR_STATE_IN_USE;
	if (hDevice) {
		struct nvsim_object *d = nvsim_object_find(client, hDevice);

		if (!d)
			return NV_ERR_OBJECT_NOT_FOUND;
		if (d->type != NVSIM_OBJ_DEVICE)
			return NV_ERR_INVALID_PARAMETER;
		inst = d->device.inst;
	}
	f->exports = kcalloc(max, sizeof(*f->exports), GFP_KERNEL_ACCOUNT);
	if (!f->exports)
		return NV_ERR_NO_MEMORY;
	f->max_exports = max;
	f->export_inst = inst;
	return NV_OK;
}

/* cliresCtrlCmdOsUnixExportObjectToFd_IMPL (os.c). */
static NV_STATUS nvsim_ctrl_export_to_fd(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_OS_UNIX_EXPORT_OBJECT_TO_FD_PARAMS *p = ctx->params;
	struct nvsim_client *client = ctx->obj->client;
	struct nvsim_export e = {};
	struct nvsim_file *f;
	struct file *filp;
	NV_STATUS status;

	if (p->flags & NVSIM_OS_UNIX_EXPORT_FLAGS_EMPTY_FD)
		return NV_ERR_INVALID_PARAMETER;
	if (p->object.type != NVSIM_OS_UNIX_EXPORT_OBJECT_TYPE_RM || p->fd == -1)
		return NV_ERR_INVALID_PARAMETER;
	status = nvsim_export_object(client, p->object.hObject, &e);
	if (status != NV_OK)
		return status;
	filp = nvsim_export_file(p->fd, &f);
	if (!filp) {
		status = NV_ERR_INVALID_PARAMETER;
		goto done;
	}
	status = nvsim_export_fd_init(f, client, p->object.hDevice, 1);
	if (status == NV_OK) {
		f->exports[0] = e;
		e.mem = NULL;           /* the file's now */
	}
	fput(filp);
done:
	nvsim_export_free(&e);
	return status;
}

/*
 * RmImportObject's dup of one export into the caller's client, under
 * hParent, at *h (0: nvsim picks, written back).  As nvsim's
 * RM_DUP_OBJECT: the parent must be a live device or subdevice of the
 * memory's GPU (NV_ERR_INVALID_OBJECT_PARENT).  The new object holds its
 * own reference on the memory.
 */
static NV_STATUS nvsim_import_one(struct nvsim_ctrl_ctx *ctx, struct nvsim_export *e,
				  NvHandle hParent, NvHandle *h)
{
	struct nvsim_client *client = ctx->obj->client;
	struct nvsim_object *parent, *obj;
	NV_STATUS status;

	parent = nvsim_object_find(client, hParent);
	if (!parent || parent->invalidated ||
	    !(NVSIM_BIT(parent->type) & (NVSIM_BIT(NVSIM_OBJ_DEVICE) |
					 NVSIM_BIT(NVSIM_OBJ_SUBDEVICE))) ||
	    parent->gpu != e->mem->gpu)
		return NV_ERR_INVALID_OBJECT_PARENT;
	status = nvsim_object_new(ctx->call, client, parent, h, e->hclass,
				  NVSIM_OBJ_MEMORY, &obj);
	if (status != NV_OK)
		return status;
	nvsim_mem_get(e->mem);
	obj->memory.mem = e->mem;
	return NV_OK;
}

/*
 * cliresCtrlCmdOsUnixImportObjectFromFd_IMPL (os.c): the file must hold
 * exactly one export, at index 0 (NV_ERR_INVALID_PARAMETER otherwise), and
 * RmImportObject dups it from RM's own client into the caller's, under
 * hParent, at hObject (0: RM picks; the pick is written back).  As
 * nvsim's RM_DUP_OBJECT: the parent must be a device or subdevice of the
 * memory's GPU.
 */
static NV_STATUS nvsim_ctrl_import_from_fd(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_OS_UNIX_IMPORT_OBJECT_FROM_FD_PARAMS *p = ctx->params;
	NvHandle h = p->object.hObject;
	struct nvsim_export *e;
	struct nvsim_file *f;
	struct file *filp;
	NV_STATUS status;

	if (p->object.type != NVSIM_OS_UNIX_EXPORT_OBJECT_TYPE_RM || p->fd == -1)
		return NV_ERR_INVALID_PARAMETER;
	filp = nvsim_export_file(p->fd, &f);
	if (!filp)
		return NV_ERR_INVALID_PARAMETER;
	e = f->exports && f->max_exports == 1 ? &f->exports[0] : NULL;
	if (!e || !e->mem) {
		status = NV_ERR_INVALID_PARAMETER;
		goto out;
	}
	status = nvsim_import_one(ctx, e, p->object.hParent, &h);
	if (status == NV_OK)
		p->object.hObject = h;
out:
	fput(filp);
	return status;
}

/*
 * cliresCtrlCmdOsUnixExportObjectsToFd_IMPL (os.c): the file set up on its
 * first export (maxObjects 0: NV_ERR_INVALID_PARAMETER; undone if this call
 * fails), numObjects at most 512 (NV_ERR_INVALID_PARAMETER) and index +
 * numObjects within the file (NV_ERR_OUT_OF_RANGE); every non-zero handle
 * exported (RmExportObject) and of the file's device instance
 * (NV_ERR_INVALID_PARAMETER), all or none; then each slot index + i freed
 * if it held an export and given the new one (0 empties it).
 */
static NV_STATUS nvsim_ctrl_export_objects(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_OS_UNIX_EXPORT_OBJECTS_TO_FD_PARAMS *p = ctx->params;
	struct nvsim_client *client = ctx->obj->client;
	struct nvsim_export *fresh = NULL;
	bool setup = false;
	struct nvsim_file *f;
	struct file *filp;
	NV_STATUS status = NV_OK;
	u32 i;

	filp = nvsim_export_file(p->fd, &f);
	if (!filp)
		return NV_ERR_INVALID_PARAMETER;
	if (!f->exports) {
		if (!p->maxObjects) {
			status = NV_ERR_INVALID_PARAMETER;
			goto out;
		}
		status = nvsim_export_fd_init(f, client, p->hDevice, p->maxObjects);
		if (status != NV_OK)
			goto out;
		setup = true;
	}
	if (p->numObjects > NVSIM_EXPORT_MAX_OBJECTS) {
		status = NV_ERR_INVALID_PARAMETER;
		goto undo;
	}
	if ((u32)p->numObjects + p->index > f->max_exports) {
		status = NV_ERR_OUT_OF_RANGE;
		goto undo;
	}
	fresh = kcalloc(max_t(u32, p->numObjects, 1), sizeof(*fresh), GFP_KERNEL_ACCOUNT);
	if (!fresh) {
		status = NV_ERR_NO_MEMORY;
		goto undo;
	}
	for (i = 0; i < p->numObjects; i++) {
		if (!p->objects[i])
			continue;
		status = nvsim_export_object(client, p->objects[i], &fresh[i]);
		if (status == NV_OK && fresh[i].inst != f->export_inst)
			status = NV_ERR_INVALID_PARAMETER;
		if (status != NV_OK)
			break;
	}
	if (status != NV_OK) {
		for (i = 0; i < p->numObjects; i++)
			nvsim_export_free(&fresh[i]);
		goto undo;
	}
	for (i = 0; i < p->numObjects; i++) {
		nvsim_export_free(&f->exports[p->index + i]);
		f->exports[p->index + i] = fresh[i];
	}
	goto out;
undo:
	if (setup) {
		kfree(f->exports);
		f->exports = NULL;
		f->max_exports = 0;
	}
out:
	kfree(fresh);
	fput(filp);
	return status;
}

/*
 * cliresCtrlCmdOsUnixImportObjectsFromFd_IMPL (os.c): a set-up file
 * (NV_ERR_INVALID_PARAMETER), numObjects at most 128, within the file
 * (NV_ERR_OUT_OF_RANGE); an empty slot is type NONE and skipped; each
 * other one imported as the single form does (its type VIDMEM or SYSMEM,
 * RmImportObject's GET_ADDR_SPACE_TYPE), stopping at the first failure
 * with what was imported before it left in place.
 */
static NV_STATUS nvsim_ctrl_import_objects(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_OS_UNIX_IMPORT_OBJECTS_FROM_FD_PARAMS *p = ctx->params;
	struct nvsim_export *e;
	struct nvsim_file *f;
	struct file *filp;
	NV_STATUS status = NV_OK;
	u32 i;

	filp = nvsim_export_file(p->fd, &f);
	if (!filp)
		return NV_ERR_INVALID_PARAMETER;
	if (!f->exports || p->numObjects > NVSIM_IMPORT_MAX_OBJECTS) {
		status = NV_ERR_INVALID_PARAMETER;
		goto out;
	}
	if ((u32)p->numObjects + p->index > f->max_exports) {
		status = NV_ERR_OUT_OF_RANGE;
		goto out;
	}
	for (i = 0; i < p->numObjects; i++) {
		NvHandle h = p->objects[i];

		e = &f->exports[p->index + i];
		if (!e->mem) {
			p->objectTypes[i] = NVSIM_IMPORT_OBJECT_TYPE_NONE;
			continue;
		}
		p->objectTypes[i] = e->mem->fb ? NVSIM_IMPORT_OBJECT_TYPE_VIDMEM :
						 NVSIM_IMPORT_OBJECT_TYPE_SYSMEM;
		status = nvsim_import_one(ctx, e, p->hParent, &h);
		if (status != NV_OK)
			goto out;
		p->objects[i] = h;
	}
out:
	fput(filp);
	return status;
}

/*
 * cliresCtrlCmdOsUnixGetExportObjectInfo_IMPL (os.c): the file's device
 * instance and size; a file without exports is NV_ERR_INVALID_PARAMETER.
 */
static NV_STATUS nvsim_ctrl_export_info(struct nvsim_ctrl_ctx *ctx)
{
	NVSIM_OS_UNIX_GET_EXPORT_OBJECT_INFO_PARAMS *p = ctx->params;
	struct nvsim_file *f;
	struct file *filp;
	NV_STATUS status = NV_OK;

	filp = nvsim_export_file(p->fd, &f);
	if (!filp)
		return NV_ERR_INVALID_PARAMETER;
	if (!f->exports) {
		status = NV_ERR_INVALID_PARAMETER;
	} else {
		p->deviceInstance = f->export_inst;
		if (ctx->psize >= sizeof(*p)) {
			p->gpuInstanceId = 0;   /* no MIG */
			p->maxObjects = f->max_exports;
		} else {
			/* The older layout: maxObjects where gpuInstanceId is. */
			memcpy(&p->gpuInstanceId, &f->max_exports, sizeof(u16));
		}
	}
	fput(filp);
	return status;
}

/* rm_cleanup_file_private (osapi.c): the file's exports go first. */
void nvsim_exports_fini(struct nvsim_file *nvfp)
{
	u32 i;

	lockdep_assert_held(&nvsim.lock);
	for (i = 0; nvfp->exports && i < nvfp->max_exports; i++)
		nvsim_export_free(&nvfp->exports[i]);
	kfree(nvfp->exports);
	nvfp->exports = NULL;
	nvfp->max_exports = 0;
}

static const struct nvsim_ctrl nvsim_peer_ctrl_list[] = {
	{ NVSIM_OS_UNIX_EXPORT_OBJECT_TO_FD,
	  sizeof(NVSIM_OS_UNIX_EXPORT_OBJECT_TO_FD_PARAMS), CLIENT,
	  nvsim_ctrl_export_to_fd },
	{ NVSIM_OS_UNIX_IMPORT_OBJECT_FROM_FD,
	  sizeof(NVSIM_OS_UNIX_IMPORT_OBJECT_FROM_FD_PARAMS), CLIENT,
	  nvsim_ctrl_import_from_fd },
	{ NVSIM_OS_UNIX_GET_EXPORT_OBJECT_INFO,
	  sizeof(NVSIM_OS_UNIX_GET_EXPORT_OBJECT_INFO_PARAMS), CLIENT,
	  nvsim_ctrl_export_info },
	{ NVSIM_OS_UNIX_EXPORT_OBJECTS_TO_FD,
	  sizeof(NVSIM_OS_UNIX_EXPORT_OBJECTS_TO_FD_PARAMS), CLIENT,
	  nvsim_ctrl_export_objects },
	{ NVSIM_OS_UNIX_IMPORT_OBJECTS_FROM_FD,
	  sizeof(NVSIM_OS_UNIX_IMPORT_OBJECTS_FROM_FD_PARAMS), CLIENT,
	  nvsim_ctrl_import_objects },
};

const struct nvsim_ctrl_table nvsim_peer_ctrls = {
	nvsim_peer_ctrl_list, ARRAY_SIZE(nvsim_peer_ctrl_list),
};
