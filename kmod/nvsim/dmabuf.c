// SPDX-License-Identifier: GPL-2.0
/*
 * dmabuf.c - NV_ESC_EXPORT_TO_DMABUF_FD: video memory exported as a
 * dma-buf, the way an RDMA adapter (ibv_reg_dmabuf_mr) or any other
 * importer reaches FB without nvidia-peermem.
 *
 * After kernel-open/nvidia/nv-dmabuf.c and the RM side in
 * arch/nvalloc/unix/src/osapi.c of 535.261.03 and 595.45.04 (each
 * behaviour below names the function it follows; where the releases
 * differ, both are said).  What it owns: the lifetime of the exported
 * memory.  Each handle named is dup'd into RM's internal client
 * (rm_dma_buf_dup_mem_handle: DupObject at kernel privilege, which skips
 * the source's share policy, clientCopyResource_IMPL, rs_client.c), so the
 * owner's free returns nothing to the GPU: the FB stays allocated, and
 * charged to the process that allocated it (nvsim's pid accounting), until
 * the dma-buf's release undups it (nv_dma_buf_release).  nvsim keeps the
 * dup as a reference on the memory (as peer.c's exports do) and counts
 * it in debugfs state (dmabuf_dups).
 *
 * Nothing checks that the params' hClient is the caller's: the lookup is
 * serverGetClientUnderLock (RmDmabufVerifyMemHandle), which finds any
 * client, another process's or a kernel caller's included.  nvsim is the
 * driver here and checks nothing either; vgpu.ko's policy refuses the
 * escape (docs/mediator.md, "GPUDirect RDMA").
 *
 * The exported file is a real dma-buf (dma_buf_export, dma_buf_fd), so
 * its lifetime is the kernel's: the last fput of it in any process (a
 * close, or the exit of a process that still holds it) runs the release.
 * What an importer would map is not modelled: nvsim's FB has no bus
 * addresses, and map_dma_buf fails (only a GPU with an HCA shows what an
 * importer gets, docs/mediator.md).
 *
 * The driver's release undups slots 0 .. num_objects - 1 only
 * (nv_dma_buf_release -> nv_dma_buf_undup_mem_handles(sp, 0,
 * priv->num_objects, priv), in both releases), so a dma-buf made with a
 * hole below a handle (index > 0 with fewer handles than totalObjects)
 * leaves that handle dup'd in RM's internal client after its last close,
 * where it stays until RM frees that client with the GPU's state
 * (memmgrStateDestroy_IMPL -> _memmgrFreeInternalClientObjects), on the
 * GPU's last close (nv_close_device -> nv_stop_device: nvsim's GPUs are
 * never persistent).  nvsim models it: such a dma-buf's slots stay on the
 * GPU's orphan list (debugfs dmabuf_orphans) until nvsim_gpu_put() drops
 * the GPU's last reference.  The driver's WARN_ON(attached_size > 0) there
 * is a log line here (a WARN would fail the VM harness for the driver's
 * bug).
 *
 * Locking: the dma-buf's state is under nvsim.lock (the driver's
 * priv->lock and RM's locks); dma_buf_export, dma_buf_fd, dma_buf_get and
 * dma_buf_put run without it.  A user task's last fput runs the release
 * on its return to user space (task_work), never inside this file's
 * nvsim.lock.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-buf.h>
#include <linux/fcntl.h>
#include <linux/slab.h>
#include <linux/mm.h>

#include "nvsim.h"

/* nvstatuscodes.h: not in nvabi.h. */
#define NVSIM_NV_ERR_OPERATING_SYSTEM           0x00000059
/* nv-ioctl.h (595.45.04) */
#define NVSIM_DMABUF_MAPPING_TYPE_DEFAULT       0
#define NVSIM_DMABUF_MAPPING_TYPE_FORCE_PCIE    1

/*
 * 535.261.03's nv_ioctl_export_to_dma_buf_fd_t (nv-ioctl.h): no
 * mappingType or bAllowMmap, so handles, offsets, sizes and status all
 * lie earlier than in 595.45.04's (nvabi.h).  kmod/vgpu/policy/<release>.tsv
 * gives 2600 bytes for 535.261.03, 535.288.01 and 550.163.01, 2608 from
 * 570.211.01 on.
 */
typedef struct {
	int      fd;
	NvHandle hClient;
	NvU32    totalObjects;
	NvU32    numObjects;
	NvU32    index;
	NvU64    totalSize NV_ALIGN8;
	NvHandle handles[NV_DMABUF_EXPORT_MAX_HANDLES];
	NvU64    offsets[NV_DMABUF_EXPORT_MAX_HANDLES] NV_ALIGN8;
	NvU64    sizes[NV_DMABUF_EXPORT_MAX_HANDLES] NV_ALIGN8;
	NvU32    status;
} NVSIM_EXPORT_TO_DMA_BUF_FD_535;
static_assert(sizeof(NVSIM_EXPORT_TO_DMA_BUF_FD_535) == 2600, "535.261.03");
static_assert(offsetof(NVSIM_EXPORT_TO_DMA_BUF_FD_535, handles) == 32, "535.261.03");
static_assert(offsetof(NVSIM_EXPORT_TO_DMA_BUF_FD_535, offsets) == 544, "535.261.03");
static_assert(offsetof(NVSIM_EXPORT_TO_DMA_BUF_FD_535, sizes) == 1568, "535.261.03");
static_assert(offsetof(NVSIM_EXPORT_TO_DMA_BUF_FD_535, status) == 2592, "535.261.03");

/* One handle of a dma-buf: nv_dma_buf_mem_handle_t, the dup a reference. */
struct nvsim_dmabuf_slot {
	struct nvsim_mem *mem;          /* NULL: empty (h_memory 0) */
	u64 offset, size;
};

/* nv_dma_buf_file_private_t; all of it under nvsim.lock. */
struct nvsim_dmabuf {
	struct nvsim_gpu *gpu;          /* priv->nv, referenced (nvidia_dev_get) */
	u32 total_objects, num_objects;
	u64 total_size, attached_size;
	u8 mapping_type;
	bool allow_mmap;
	struct nvsim_dmabuf_slot *slots;        /* total_objects of them */
	struct list_head orphan_node;   /* nvsim_dmabuf_orphans, once released */
};

/* Released dma-bufs whose dups RM's internal client still holds. */
static LIST_HEAD(nvsim_dmabuf_orphans);

static bool nvsim_dmabuf_old_layout(void)
{
	unsigned int major = 0;

	return sscanf(nvsim_rel->name, "%u.", &major) == 1 && major < 570;
}

#if IS_ENABLED(CONFIG_DMA_SHARED_BUFFER)

MODULE_IMPORT_NS(DMA_BUF);

/*
 * rm_dma_buf_undup_mem_handle for slots [start, start + n), as
 * nv_dma_buf_undup_mem_handles_unlocked: empty slots are skipped (and
 * still count towards n).
 */
static void nvsim_dmabuf_undup(struct nvsim_dmabuf *d, u32 start, u32 n)
{
	u32 i;

	lockdep_assert_held(&nvsim.lock);
	for (i = 0; i < n; i++) {
		struct nvsim_dmabuf_slot *s = &d->slots[start + i];

		if (!s->mem)
			continue;
		nvsim_mem_put(s->mem);
		atomic_dec(&nvsim.nr_dmabuf_dups);
		d->attached_size -= s->size;
		s->mem = NULL;
		s->offset = s->size = 0;
		d->num_objects--;
	}
}

/*
 * RmDmabufVerifyMemHandle (osapi.c): the memory behind (hClient, hMemory),
 * checked for a dup of [offset, offset + size).  The client is any
 * client (serverGetClientUnderLock: an unknown one is
 * NV_ERR_INVALID_OBJECT_HANDLE, 595.45.04's answer and 535.261.03's
 * unless a larger handle shares its bucket); the handle must be one of its
 * resources (clientGetResourceRef: NV_ERR_OBJECT_NOT_FOUND) and a Memory
 * (dynamicCast: the client itself, another object or an invalidated one is
 * NV_ERR_INVALID_OBJECT); on this GPU (NV_ERR_INVALID_OBJECT_PARENT; 535
 * rejects only when both the memory's and its descriptor's GPU differ,
 * 595 when either does: one and the same in nvsim); offset and size
 * aligned to the OS page, in video memory (595 also takes system memory
 * on a chip without FB, which nvsim's are not), size non-zero and the
 * range inside the allocation: NV_ERR_INVALID_ARGUMENT otherwise.
 */
static NV_STATUS nvsim_dmabuf_verify(struct nvsim_gpu *gpu, NvHandle hClient,
				     NvHandle hMemory, u64 offset, u64 size,
				     struct nvsim_mem **out)
{
	struct nvsim_client *client;
	struct nvsim_object *o;
	struct nvsim_mem *mem;

	lockdep_assert_held(&nvsim.lock);
	client = xa_load(&nvsim.clients, hClient);
	if (!client)
		return NV_ERR_INVALID_OBJECT_HANDLE;
	o = nvsim_object_ref(client, hMemory);
	if (!o)
		return NV_ERR_OBJECT_NOT_FOUND;
	if (o == &client->obj || o->invalidated || o->type != NVSIM_OBJ_MEMORY)
		return NV_ERR_INVALID_OBJECT;
	mem = o->memory.mem;
	if (o->gpu != gpu || (mem && mem->gpu != gpu))
		return NV_ERR_INVALID_OBJECT_PARENT;
	if (!IS_ALIGNED(offset, PAGE_SIZE) || !IS_ALIGNED(size, PAGE_SIZE))
		return NV_ERR_INVALID_ARGUMENT;
	if (!mem || !mem->fb)
		return NV_ERR_INVALID_ARGUMENT;
	if (!size || size > mem->size || offset > mem->size - size)
		return NV_ERR_INVALID_ARGUMENT;
	*out = mem;
	return NV_OK;
}

/*
 * nv_dma_buf_dup_mem_handles: params' handles into slots index.. in
 * order; a used slot is NV_ERR_IN_USE, a size past what totalSize leaves
 * NV_ERR_INVALID_ARGUMENT, then rm_dma_buf_dup_mem_handle (verify, then
 * DupObject into RM's internal client: here a reference on the memory).
 * 595.45.04 also refuses a mixed dma-buf (map_attrs: mmap, cache type,
 * read-only, memory type), which nvsim's video memory never is.  Once
 * every slot is filled the sizes must add up to totalSize
 * (NV_ERR_INVALID_ARGUMENT).  A failure undups what this call dup'd.
 */
static NV_STATUS nvsim_dmabuf_dup(struct nvsim_dmabuf *d,
				  const nv_ioctl_export_to_dma_buf_fd_t *p)
{
	u32 index = p->index, count = 0, i;
	NV_STATUS status = NV_OK;

	lockdep_assert_held(&nvsim.lock);
	for (i = 0; i < p->numObjects; i++, index++) {
		struct nvsim_dmabuf_slot *s = &d->slots[index];
		struct nvsim_mem *mem;

		if (s->mem) {
			status = NV_ERR_IN_USE;
			goto failed;
		}
		if (p->sizes[i] > d->total_size - d->attached_size) {
			status = NV_ERR_INVALID_ARGUMENT;
			goto failed;
		}
		status = nvsim_dmabuf_verify(d->gpu, p->hClient, p->handles[i],
					     p->offsets[i], p->sizes[i], &mem);
		if (status != NV_OK)
			goto failed;
		nvsim_mem_get(mem);
		atomic_inc(&nvsim.nr_dmabuf_dups);
		s->mem = mem;
		s->offset = p->offsets[i];
		s->size = p->sizes[i];
		d->attached_size += s->size;
		d->num_objects++;
		count++;
	}
	if (d->num_objects == d->total_objects &&
	    d->attached_size != d->total_size) {
		status = NV_ERR_INVALID_ARGUMENT;
		goto failed;
	}
	return NV_OK;
failed:
	nvsim_dmabuf_undup(d, p->index, count);
	return status;
}

/* nv_dma_buf_free_file_private */
static void nvsim_dmabuf_free(struct nvsim_dmabuf *d)
{
	kfree(d->slots);
	kfree(d);
}

/*
 * nv_dma_buf_release, on the dma-buf's last fput: undup slots
 * 0 .. num_objects - 1 (the driver's range: see the top of this file),
 * drop the GPU reference (nvidia_dev_put).  What is left stays dup'd.
 */
static void nvsim_dmabuf_release(struct dma_buf *buf)
{
	struct nvsim_dmabuf *d = buf->priv;
	bool orphan;

	mutex_lock(&nvsim.lock);
	nvsim_dmabuf_undup(d, 0, d->num_objects);
	orphan = d->num_objects;
	if (orphan) {
		/* The driver's WARN_ON(priv->attached_size > 0). */
		pr_warn("dma-buf released with %u handle(s), %llu bytes, still dup'd in RM's internal client (nv_dma_buf_release's range): freed on GPU %u's last close\n",
			d->num_objects, d->attached_size, d->gpu->index);
		list_add_tail(&d->orphan_node, &nvsim_dmabuf_orphans);
		atomic_inc(&nvsim.nr_dmabuf_orphans);
	}
	atomic_dec(&nvsim.nr_dmabufs);
	nvsim_gpu_put(d->gpu);
	mutex_unlock(&nvsim.lock);
	if (!orphan)
		nvsim_dmabuf_free(d);
}

/*
 * An importer's map (nv_dma_buf_map: the handles' BAR1 or physical
 * ranges) has no model: nvsim's FB has no bus addresses.
 */
static struct sg_table *nvsim_dmabuf_map(struct dma_buf_attachment *a,
					 enum dma_data_direction dir)
{
	return ERR_PTR(-EOPNOTSUPP);
}

static void nvsim_dmabuf_unmap(struct dma_buf_attachment *a,
			       struct sg_table *sgt, enum dma_data_direction dir)
{
}

static const struct dma_buf_ops nvsim_dmabuf_ops = {
	.map_dma_buf = nvsim_dmabuf_map,
	.unmap_dma_buf = nvsim_dmabuf_unmap,
	.release = nvsim_dmabuf_release,
};

/*
 * RmDmabufGetClientAndDevice (595.45.04): FORCE_PCIE needs a GPU with a
 * coherent CPU mapping (PDB_PROP_GPU_COHERENT_CPU_MAPPING), which nvsim's
 * PCIe boards are not: NV_ERR_NOT_SUPPORTED.  No MIG, no SLI.  535.261.03
 * has no mapping type (its params arrive here as DEFAULT).
 */
static NV_STATUS nvsim_dmabuf_client_and_device(u8 mapping_type)
{
	return mapping_type == NVSIM_DMABUF_MAPPING_TYPE_FORCE_PCIE ?
	       NV_ERR_NOT_SUPPORTED : NV_OK;
}

/*
 * nv_dma_buf_create: the index must leave room for numObjects in
 * totalObjects (NV_ERR_INVALID_ARGUMENT), the private state is allocated
 * (NV_KZALLOC, kmalloc: a totalObjects past what one kmalloc holds is
 * NV_ERR_NO_MEMORY; nvsim's slot is smaller than the driver's, so its
 * bound lies higher), the GPU referenced (nvidia_dev_get), the handles
 * dup'd; 595.45.04 then refuses bAllowMmap (mmap only on a chip without
 * FB: rm_dma_buf_dup_mem_handle's can_mmap) with NV_ERR_NOT_SUPPORTED,
 * undoing the dups.  The dma-buf is exported (totalSize, O_RDWR |
 * O_CLOEXEC) and installed as a new fd of the caller's; a failure of
 * either is NV_ERR_OPERATING_SYSTEM, the second undone by the release.
 * nv->dma_buf_supported is true on nvsim (GPU_GET_INFO's
 * DMABUF_CAPABILITY, cuda.c).
 */
static NV_STATUS nvsim_dmabuf_create(struct nvsim_gpu *gpu,
				     nv_ioctl_export_to_dma_buf_fd_t *p)
{
	DEFINE_DMA_BUF_EXPORT_INFO(exp);
	struct nvsim_dmabuf *d;
	struct dma_buf *buf;
	NV_STATUS status;
	int fd;

	if (p->index > p->totalObjects - p->numObjects)
		return NV_ERR_INVALID_ARGUMENT;
	d = kzalloc(sizeof(*d), GFP_KERNEL_ACCOUNT);
	if (!d)
		return NV_ERR_NO_MEMORY;
	d->slots = kcalloc(p->totalObjects, sizeof(*d->slots),
			   GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!d->slots) {
		kfree(d);
		return NV_ERR_NO_MEMORY;
	}
	d->gpu = gpu;
	d->total_objects = p->totalObjects;
	d->total_size = p->totalSize;
	d->mapping_type = p->mappingType;
	d->allow_mmap = p->bAllowMmap;
	INIT_LIST_HEAD(&d->orphan_node);

	mutex_lock(&nvsim.lock);
	gpu->open_count++;
	status = nvsim_dmabuf_client_and_device(d->mapping_type);
	if (status == NV_OK)
		status = nvsim_dmabuf_dup(d, p);
	if (status == NV_OK && d->allow_mmap) {
		status = NV_ERR_NOT_SUPPORTED;
		nvsim_dmabuf_undup(d, p->index, p->numObjects);
	}
	if (status != NV_OK)
		goto put_gpu;
	atomic_inc(&nvsim.nr_dmabufs);
	mutex_unlock(&nvsim.lock);

	exp.ops = &nvsim_dmabuf_ops;
	exp.size = p->totalSize;
	exp.flags = O_RDWR | O_CLOEXEC;
	exp.priv = d;
	exp.exp_name = "nv_dmabuf";
	buf = dma_buf_export(&exp);
	if (IS_ERR(buf)) {
		status = NVSIM_NV_ERR_OPERATING_SYSTEM;
		mutex_lock(&nvsim.lock);
		atomic_dec(&nvsim.nr_dmabufs);
		nvsim_dmabuf_undup(d, p->index, p->numObjects);
		goto put_gpu;
	}
	fd = dma_buf_fd(buf, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		/* The release undoes the rest (nv_dma_buf_create does the same). */
		dma_buf_put(buf);
		return NVSIM_NV_ERR_OPERATING_SYSTEM;
	}
	p->fd = fd;
	return NV_OK;

put_gpu:
	nvsim_gpu_put(gpu);
	mutex_unlock(&nvsim.lock);
	nvsim_dmabuf_free(d);
	return status;
}

/*
 * nv_dma_buf_reuse: more handles into a dma-buf of ours (dma_buf_get:
 * NV_ERR_OPERATING_SYSTEM for an fd that is no dma-buf; another
 * exporter's is NV_ERR_INVALID_ARGUMENT).  numObjects and index must fit
 * its totalObjects, and in 595.45.04 mappingType and bAllowMmap must be
 * the ones it was made with (NV_ERR_INVALID_ARGUMENT).  The handles are
 * dup'd on the dma-buf's GPU, whichever GPU node the call came through
 * (the driver never compares the two).
 */
static NV_STATUS nvsim_dmabuf_reuse(const nv_ioctl_export_to_dma_buf_fd_t *p)
{
	struct nvsim_dmabuf *d;
	struct dma_buf *buf;
	NV_STATUS status;

	buf = dma_buf_get(p->fd);
	if (IS_ERR(buf))
		return NVSIM_NV_ERR_OPERATING_SYSTEM;
	if (buf->ops != &nvsim_dmabuf_ops) {
		dma_buf_put(buf);
		return NV_ERR_INVALID_ARGUMENT;
	}
	d = buf->priv;
	mutex_lock(&nvsim.lock);
	if (d->total_objects < p->numObjects ||
	    p->index > d->total_objects - p->numObjects ||
	    p->mappingType != d->mapping_type ||
	    !!p->bAllowMmap != d->allow_mmap)
		status = NV_ERR_INVALID_ARGUMENT;
	else
		status = nvsim_dmabuf_dup(d, p);
	mutex_unlock(&nvsim.lock);
	dma_buf_put(buf);
	return status;
}

/*
 * nv_dma_buf_export: totalSize, numObjects and totalObjects non-zero,
 * numObjects at most NV_DMABUF_EXPORT_MAX_HANDLES and at most
 * totalObjects (checked against the params' totalObjects also when
 * adding to a dma-buf); 595.45.04: mappingType DEFAULT or FORCE_PCIE.
 * fd -1 makes a dma-buf, fd >= 0 adds to one, anything else is
 * NV_ERR_INVALID_ARGUMENT.
 */
static NV_STATUS nvsim_dmabuf_export(struct nvsim_gpu *gpu,
				     nv_ioctl_export_to_dma_buf_fd_t *p)
{
	if (!p->totalSize || !p->numObjects || !p->totalObjects ||
	    p->numObjects > NV_DMABUF_EXPORT_MAX_HANDLES ||
	    p->numObjects > p->totalObjects)
		return NV_ERR_INVALID_ARGUMENT;
	if (p->mappingType != NVSIM_DMABUF_MAPPING_TYPE_DEFAULT &&
	    p->mappingType != NVSIM_DMABUF_MAPPING_TYPE_FORCE_PCIE)
		return NV_ERR_INVALID_ARGUMENT;
	if (p->fd == -1)
		return nvsim_dmabuf_create(gpu, p);
	if (p->fd >= 0)
		return nvsim_dmabuf_reuse(p);
	return NV_ERR_INVALID_ARGUMENT;
}

/*
 * The GPU's last reference went (nv_stop_device -> rm_shutdown_adapter
 * -> memmgrStateDestroy_IMPL): RM's internal client is freed, and with it
 * the dups the release left behind.
 */
void nvsim_dmabuf_gpu_stop(struct nvsim_gpu *gpu)
{
	struct nvsim_dmabuf *d, *tmp;

	lockdep_assert_held(&nvsim.lock);
	list_for_each_entry_safe(d, tmp, &nvsim_dmabuf_orphans, orphan_node) {
		if (d->gpu != gpu)
			continue;
		nvsim_dmabuf_undup(d, 0, d->total_objects);
		list_del(&d->orphan_node);
		atomic_dec(&nvsim.nr_dmabuf_orphans);
		nvsim_dmabuf_free(d);
	}
}

#else /* !CONFIG_DMA_SHARED_BUFFER */

/* nv_dma_buf_export without dma-buf support in the kernel. */
static NV_STATUS nvsim_dmabuf_export(struct nvsim_gpu *gpu,
				     nv_ioctl_export_to_dma_buf_fd_t *p)
{
	return NV_ERR_NOT_SUPPORTED;
}

void nvsim_dmabuf_gpu_stop(struct nvsim_gpu *gpu)
{
}

#endif

/**
 * nvsim_esc_export_dmabuf - NV_ESC_EXPORT_TO_DMABUF_FD
 * @nvfp: the caller's file
 * @buf: the params, copied in (the presented release's layout)
 * @size: their size
 *
 * nvidia_ioctl (nv.c): the release's struct size exactly and a GPU node
 * (NV_ACTUAL_DEVICE_ONLY), else -EINVAL; the result in params->status
 * (and the new fd in params->fd).  A release before 570 has the older
 * layout, read into 595.45.04's (mappingType DEFAULT, no mmap) and
 * written back into its own.
 *
 * Return: 0 or -EINVAL.
 */
int nvsim_esc_export_dmabuf(struct nvsim_file *nvfp, void *buf, u32 size)
{
	NVSIM_EXPORT_TO_DMA_BUF_FD_535 *old = buf;
	nv_ioctl_export_to_dma_buf_fd_t *p;

	if (!nvsim_dmabuf_old_layout()) {
		if (size != sizeof(*p) || nvfp->kind != NVSIM_FILE_GPU)
			return -EINVAL;
		p = buf;
		p->status = nvsim_dmabuf_export(nvfp->gpu, p);
		return 0;
	}
	if (size != sizeof(*old) || nvfp->kind != NVSIM_FILE_GPU)
		return -EINVAL;
	/* 2.6 KB: too large a frame for the kernel stack. */
	p = kzalloc(sizeof(*p), GFP_KERNEL_ACCOUNT);
	if (!p)
		return -ENOMEM;
	p->fd = old->fd;
	p->hClient = old->hClient;
	p->totalObjects = old->totalObjects;
	p->numObjects = old->numObjects;
	p->index = old->index;
	p->totalSize = old->totalSize;
	memcpy(p->handles, old->handles, sizeof(p->handles));
	memcpy(p->offsets, old->offsets, sizeof(p->offsets));
	memcpy(p->sizes, old->sizes, sizeof(p->sizes));
	old->status = nvsim_dmabuf_export(nvfp->gpu, p);
	old->fd = p->fd;
	kfree(p);
	return 0;
}
