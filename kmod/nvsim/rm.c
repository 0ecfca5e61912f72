// SPDX-License-Identifier: GPL-2.0
/*
 * rm.c - the ioctl entry of /dev/nvidiactl and /dev/nvidiaN: decoding, the
 * XFER indirection, the device rules, and the escapes that are not RM calls.
 *
 * As nvidia_ioctl(): only _IOC_NR and _IOC_SIZE are read (the type is
 * ignored); the parameters are copied in once, dispatched and copied back,
 * also when the escape fails with -EINVAL (not after a failed copy-in).  An
 * RM call's result goes to the struct's status field and the ioctl returns
 * 0; errno is for malformed calls only.
 */
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/file.h>
#include <linux/string.h>
#include <linux/capability.h>

#include "nvsim.h"

static bool nvsim_is_ctl(const struct nvsim_file *nvfp)
{
	return nvfp->kind == NVSIM_FILE_CTL;
}

/* ------------------------------------------------------ non-RM escapes */

static int nvsim_esc_card_info(struct nvsim_file *nvfp, void *buf, u32 size)
{
	nv_ioctl_card_info_t *ci = buf;
	size_t n = size / sizeof(*ci);
	unsigned int i;

	if (!nvsim_is_ctl(nvfp) || size == 0 || size % sizeof(*ci))
		return -EINVAL;

	memset(ci, 0, size);
	/* As nvidia_read_card_info(): too small an array is an error. */
	if (n < nvsim.num_gpus)
		return -EINVAL;

	for (i = 0; i < nvsim.num_gpus; i++) {
		struct nvsim_gpu *gpu = &nvsim.gpus[i];

		ci[i].valid = 1;
		ci[i].pci_info.domain = 0;
		ci[i].pci_info.bus = gpu->bus;
		ci[i].pci_info.slot = 0;
		ci[i].pci_info.function = 0;
		ci[i].pci_info.vendor_id = NVSIM_PCI_VENDOR_ID;
		ci[i].pci_info.device_id = nvsim_pci_device_id;
		ci[i].gpu_id = gpu->gpu_id;
		ci[i].interrupt_line = 0;
		/* Plausible BAR addresses, one 64 GiB window per GPU. */
		ci[i].reg_address = 0xa0000000ULL + ((u64)i << 24);
		ci[i].reg_size = 16ULL << 20;
		ci[i].fb_address = 0x38000000000ULL + ((u64)i << 36);
		ci[i].fb_size = gpu->fb_total;
		ci[i].minor_number = i;
		snprintf((char *)ci[i].dev_name, sizeof(ci[i].dev_name), "nvidia%u",
			 i);
	}
	return 0;
}

/*
 * rm_perform_version_check(): '2' only asks; strict (0) wants the exact
 * string; relaxed ('1') is content with the same major version.  On a
 * mismatch the reply says so, the driver's string is written back and the
 * ioctl fails with -EINVAL.
 */
static int nvsim_esc_check_version(struct nvsim_file *nvfp, void *buf,
				   u32 size)
{
	nv_ioctl_rm_api_version_t *p = buf;
	const char *ours = nvsim_driver_version;
	size_t major;

	if (!nvsim_is_ctl(nvfp) || size != sizeof(*p))
		return -EINVAL;

	if (p->cmd == NV_RM_API_VERSION_CMD_QUERY) {
		strscpy(p->versionString, ours, sizeof(p->versionString));
		p->reply = NV_RM_API_VERSION_REPLY_RECOGNIZED;
		return 0;
	}

	p->reply = NV_RM_API_VERSION_REPLY_RECOGNIZED;
	if (strnlen(p->versionString, sizeof(p->versionString)) <
		    sizeof(p->versionString) &&
	    strcmp(p->versionString, ours) == 0)
		return 0;

	if (p->cmd == NV_RM_API_VERSION_CMD_RELAXED) {
		major = strcspn(ours, ".");
		if (strncmp(p->versionString, ours, major) == 0 &&
		    (p->versionString[major] == '.' ||
		     p->versionString[major] == '\0'))
			return 0;
	}

	p->reply = NV_RM_API_VERSION_REPLY_UNRECOGNIZED;
	memset(p->versionString, 0, sizeof(p->versionString));
	strscpy(p->versionString, ours, sizeof(p->versionString));
	return -EINVAL;
}

static int nvsim_esc_attach_gpus(struct nvsim_file *nvfp, void *buf, u32 size)
{
	u32 *ids = buf, n = size / sizeof(u32), i;
	struct nvsim_gpu *gpu;
	int ret = 0;

	if (!nvsim_is_ctl(nvfp) || n == 0 || size % sizeof(u32))
		return -EINVAL;

	mutex_lock(&nvsim.lock);
	if (nvfp->nr_attached) {
		ret = -EINVAL;
		goto out;
	}
	/* Check first, so that a failure leaves nothing half attached. */
	for (i = 0; i < n; i++) {
		if (ids[i] && !nvsim_gpu_by_id(ids[i])) {
			ret = -EINVAL;
			goto out;
		}
	}
	nvfp->attached = kmemdup(ids, size, GFP_KERNEL_ACCOUNT);
	if (!nvfp->attached) {
		ret = -ENOMEM;
		goto out;
	}
	nvfp->nr_attached = n;
	/* An id of 0 is a hole, skipped as the real driver does. */
	for (i = 0; i < n; i++) {
		gpu = ids[i] ? nvsim_gpu_by_id(ids[i]) : NULL;
		if (gpu)
			gpu->open_count++;
	}
out:
	mutex_unlock(&nvsim.lock);
	return ret;
}

static void nvsim_detach_gpus(struct nvsim_file *nvfp)
{
	struct nvsim_gpu *gpu;
	unsigned int i;

	for (i = 0; i < nvfp->nr_attached; i++) {
		gpu = nvfp->attached[i] ? nvsim_gpu_by_id(nvfp->attached[i]) : NULL;
		if (gpu)
			nvsim_gpu_put(gpu);
	}
	kfree(nvfp->attached);
	nvfp->attached = NULL;
	nvfp->nr_attached = 0;
}

/*
 * NV_ESC_REGISTER_FD: this file acts for the control file ctl_fd from now on
 * (the clients made there are usable here).  Allowed once; the target must be
 * a control file that is neither this one nor registered itself.
 */
static int nvsim_esc_register_fd(struct nvsim_file *nvfp, void *buf, u32 size)
{
	nv_ioctl_register_fd_t *p = buf;
	struct nvsim_file *ctl;
	struct file *filp;
	int ret = 0;

	if (size != sizeof(*p))
		return -EINVAL;

	filp = nvsim_fget(p->ctl_fd, NVSIM_KIND(NVSIM_FILE_CTL), &ctl);
	if (!filp)
		return -EINVAL;

	mutex_lock(&nvsim.lock);
	if (nvfp->ctl_nvfp)
		ret = -EINVAL;          /* NV_ERR_INVALID_STATE */
	else if (ctl == nvfp || ctl->ctl_nvfp)
		ret = -EINVAL;
	if (!ret) {
		/* The reference is held until this file is released. */
		nvfp->ctl_filp = filp;
		nvfp->ctl_nvfp = ctl;
		filp = NULL;
	}
	mutex_unlock(&nvsim.lock);
	if (filp)
		fput(filp);
	return ret;
}

static int nvsim_esc_os_event(struct nvsim_file *nvfp, u32 nr, void *buf,
			      u32 size)
{
	nv_ioctl_alloc_os_event_t *p = buf;
	struct nvsim_os_event *ev, *found = NULL;

	if (size != sizeof(*p))
		return -EINVAL;

	mutex_lock(&nvsim.lock);
	list_for_each_entry(ev, &nvfp->os_events, node)
		if (ev->hClient == p->hClient && ev->fd == p->fd)
			found = ev;
	if (nr == NV_ESC_ALLOC_OS_EVENT) {
		ev = found ? NULL : kzalloc(sizeof(*ev), GFP_KERNEL_ACCOUNT);
		if (ev) {
			ev->hClient = p->hClient;
			ev->fd = p->fd;
			list_add_tail(&ev->node, &nvfp->os_events);
			list_add_tail(&ev->all, &nvsim.os_events);
			p->Status = NV_OK;
		} else {
			p->Status = found ? NV_ERR_INVALID_ARGUMENT :
					    NV_ERR_NO_MEMORY;
		}
	} else if (found) {
		list_del(&found->node);
		list_del(&found->all);
		kfree(found);
		p->Status = NV_OK;
	} else {
		p->Status = NV_ERR_INVALID_ARGUMENT;
	}
	mutex_unlock(&nvsim.lock);
	return 0;
}

static int nvsim_esc_status_code(struct nvsim_file *nvfp, void *buf, u32 size)
{
	nv_ioctl_status_code_t *p = buf;
	unsigned int i;

	if (!nvsim_is_ctl(nvfp) || size != sizeof(*p))
		return -EINVAL;
	for (i = 0; i < nvsim.num_gpus; i++) {
		if (p->domain == 0 && p->bus == nvsim.gpus[i].bus &&
		    p->slot == 0) {
			p->status = NV_OK;
			return 0;
		}
	}
	return -EINVAL;         /* no such adapter */
}

static int nvsim_esc_sys_params(struct nvsim_file *nvfp, void *buf, u32 size)
{
	nv_ioctl_sys_params_t *p = buf;
	int ret = 0;

	if (!nvsim_is_ctl(nvfp) || size != sizeof(*p))
		return -EINVAL;
	/* Set once; a later, different value is refused. */
	mutex_lock(&nvsim.lock);
	if (!nvsim.memblock_size)
		nvsim.memblock_size = p->memblock_size;
	else if (nvsim.memblock_size != p->memblock_size)
		ret = -EBUSY;
	mutex_unlock(&nvsim.lock);
	return ret;
}

/*
 * NV_ESC_NUMA_INFO, on a GPU node (nv.c; rm_get_gpu_numa_info in
 * osapi.c): more offline addresses asked for than RM keeps is
 * NV_ERR_INVALID_ARGUMENT, which nv.c turns into -EBUSY.  A GPU whose
 * memory is no NUMA node answers nid -1 and sizes 0; with numa_node set,
 * the whole FB at an address of its own, offline, none retired.
 */
static int nvsim_esc_numa_info(struct nvsim_file *nvfp, void *buf, u32 size)
{
	nv_ioctl_numa_info_t *p = buf;

	if (nvsim_is_ctl(nvfp) || size != sizeof(*p))
		return -EINVAL;
	if (p->offline_addresses.numEntries > NV_IOCTL_NUMA_INFO_MAX_OFFLINE_ADDRESSES)
		return -EBUSY;
	p->nid = nvsim_numa_node < 0 ? -1 : nvsim_numa_node;
	p->numa_mem_addr = nvsim_numa_node < 0 ? 0 : 1ULL << 40;
	p->numa_mem_size = nvsim_numa_node < 0 ? 0 : nvsim_fb_size;
	p->offline_addresses.numEntries = 0;
	p->status = nvsim_numa_node < 0 ? NV_IOCTL_NUMA_STATUS_DISABLED :
					  NV_IOCTL_NUMA_STATUS_OFFLINE;
	p->use_auto_online = 0;
	p->memblock_size = READ_ONCE(nvsim.memblock_size);
	return 0;
}

/* --------------------------------------------------------- RM escapes */

/*
 * RM escapes the simulator does not implement: checked as the real driver
 * checks them (device, size), then answered with NV_ERR_NOT_SUPPORTED.
 */
static int nvsim_esc_unsupported(struct nvsim_file *nvfp, NV_STATUS *status,
				 u32 size, u32 want)
{
	if (!nvsim_is_ctl(nvfp) || size != want)
		return -EINVAL;
	*status = NV_ERR_NOT_SUPPORTED;
	return 0;
}

static int nvsim_esc_rm_alloc(const struct nvsim_call *call, void *buf,
			      u32 size)
{
	NVOS64_PARAMETERS p = {};
	bool nvos64 = size == sizeof(NVOS64_PARAMETERS);

	if (size != sizeof(NVOS21_PARAMETERS) && !nvos64)
		return -EINVAL;
	/*
	 * Clients and every other class: control device only; the event
	 * classes on any node (escape.c, RmIoctl NV_ESC_RM_ALLOC: no
	 * NV_CTL_DEVICE_ONLY for NV01_EVENT, _OS_EVENT, _KERNEL_CALLBACK(_EX)).
	 * libcuda allocates its OS events through a GPU node it registered
	 * (NV_ESC_REGISTER_FD), whose clients are the control file's.
	 */
	switch (((NVOS21_PARAMETERS *)buf)->hClass) {
	case NV01_EVENT:
	case NV01_EVENT_OS_EVENT:
	case NV01_EVENT_KERNEL_CALLBACK:
	case NV01_EVENT_KERNEL_CALLBACK_EX:
		break;
	default:
		if (!nvsim_is_ctl(call->file))
			return -EINVAL;
	}

	if (nvos64) {
		memcpy(&p, buf, sizeof(p));
	} else {
		NVOS21_PARAMETERS *p21 = buf;

		p.hRoot = p21->hRoot;
		p.hObjectParent = p21->hObjectParent;
		p.hObjectNew = p21->hObjectNew;
		p.hClass = p21->hClass;
		p.pAllocParms = p21->pAllocParms;
		p.paramsSize = p21->paramsSize;
	}
	/* User space client allocations are forced to the _CLIENT class. */
	if (p.hClass == NV01_ROOT || p.hClass == NV01_ROOT_NON_PRIV)
		p.hClass = NV01_ROOT_CLIENT;

	nvsim_rm_alloc(call, &p);

	if (nvos64) {
		NVOS64_PARAMETERS *out = buf;

		out->hClass = p.hClass;
		out->hObjectNew = p.hObjectNew;
		out->status = p.status;
	} else {
		NVOS21_PARAMETERS *out = buf;

		out->hClass = p.hClass;
		out->hObjectNew = p.hObjectNew;
		out->status = p.status;
	}
	return 0;
}

static int nvsim_esc_alloc_object(const struct nvsim_call *call, void *buf,
				  u32 size)
{
	NVOS05_PARAMETERS *p05 = buf;
	NVOS64_PARAMETERS p = {};

	if (!nvsim_is_ctl(call->file) || size != sizeof(*p05))
		return -EINVAL;
	p.hRoot = p05->hRoot;
	p.hObjectParent = p05->hObjectParent;
	p.hObjectNew = p05->hObjectNew;
	p.hClass = p05->hClass;
	nvsim_rm_alloc(call, &p);
	p05->hObjectNew = p.hObjectNew;
	p05->status = p.status;
	return 0;
}

static int nvsim_esc_alloc_memory(const struct nvsim_call *call, void *buf,
				  u32 size)
{
	nv_ioctl_nvos02_parameters_with_fd *pApi = buf;
	NVOS02_PARAMETERS *p = &pApi->params;
	u32 flags = p->flags;
	u64 cookie;

	if (nvsim_is_ctl(call->file) || size != sizeof(*pApi))
		return -EINVAL;

	/* escape.c: an OS descriptor pins the caller's pages (memory.c). */
	if (p->hClass == NV01_MEMORY_SYSTEM_OS_DESCRIPTOR) {
		nvsim_rm_alloc_os_desc(call, p);
		return 0;
	}
	nvsim_rm_alloc_memory(call, p);

	/*
	 * System memory that is to be mapped gets its mmap context now, on
	 * the file pApi->fd names.  As in the real driver, a failure fails
	 * the ioctl but leaves the allocation (it goes with its client).
	 */
	if (p->status == NV_OK && p->hClass == NV01_MEMORY_SYSTEM &&
	    ((flags >> NVOS02_FLAGS_ALLOC_SHIFT) & NVOS02_FLAGS_ALLOC_MASK) !=
		    NVOS02_FLAGS_ALLOC_NONE &&
	    ((flags >> NVOS02_FLAGS_MAPPING_SHIFT) & NVOS02_FLAGS_MAPPING_MASK) !=
		    NVOS02_FLAGS_MAPPING_NO_MAP) {
		if (nvsim_create_mmap_context(call, p->hRoot, p->hObjectParent,
					      p->hObjectNew, 0, p->limit + 1,
					      pApi->fd, &cookie) != NV_OK)
			return -EINVAL;
	}
	return 0;
}

static int nvsim_esc_rm(const struct nvsim_call *call, u32 nr, void *buf,
			u32 size)
{
	struct nvsim_file *nvfp = call->file;

	switch (nr) {
	case NV_ESC_RM_ALLOC:
		return nvsim_esc_rm_alloc(call, buf, size);
	case NV_ESC_RM_ALLOC_OBJECT:
		return nvsim_esc_alloc_object(call, buf, size);
	case NV_ESC_RM_ALLOC_MEMORY:
		return nvsim_esc_alloc_memory(call, buf, size);
	case NV_ESC_RM_FREE:
		if (!nvsim_is_ctl(nvfp) || size != sizeof(NVOS00_PARAMETERS))
			return -EINVAL;
		nvsim_rm_free(call, buf);
		return 0;
	case NV_ESC_RM_CONTROL:
		if (!nvsim_is_ctl(nvfp) || size != sizeof(NVOS54_PARAMETERS))
			return -EINVAL;
		nvsim_rm_control(call, buf);
		return 0;
	case NV_ESC_RM_DUP_OBJECT:
		if (!nvsim_is_ctl(nvfp) || size != sizeof(NVOS55_PARAMETERS))
			return -EINVAL;
		nvsim_rm_dup(call, buf);
		return 0;
	case NV_ESC_RM_VID_HEAP_CONTROL:
		if (!nvsim_is_ctl(nvfp) || size != sizeof(NVOS32_PARAMETERS))
			return -EINVAL;
		nvsim_rm_vid_heap(call, buf);
		return 0;
	case NV_ESC_RM_MAP_MEMORY: {
		nv_ioctl_nvos33_parameters_with_fd *p = buf;

		if (!nvsim_is_ctl(nvfp) || size != sizeof(*p))
			return -EINVAL;
		nvsim_rm_map(call, &p->params, p->fd);
		return 0;
	}
	case NV_ESC_RM_UNMAP_MEMORY:
		if (!nvsim_is_ctl(nvfp) || size != sizeof(NVOS34_PARAMETERS))
			return -EINVAL;
		nvsim_rm_unmap(call, buf);
		return 0;
	case NV_ESC_RM_SHARE:
		if (!nvsim_is_ctl(nvfp) || size != sizeof(NVOS57_PARAMETERS))
			return -EINVAL;
		nvsim_rm_share(call, buf);
		return 0;
	case NV_ESC_RM_IDLE_CHANNELS:
		return nvsim_esc_unsupported(nvfp,
				&((NVOS30_PARAMETERS *)buf)->status, size,
				sizeof(NVOS30_PARAMETERS));
	case NV_ESC_RM_ALLOC_CONTEXT_DMA2:
		return nvsim_esc_unsupported(nvfp,
				&((NVOS39_PARAMETERS *)buf)->status, size,
				sizeof(NVOS39_PARAMETERS));
	case NV_ESC_RM_MAP_MEMORY_DMA:
	case NV_ESC_RM_UNMAP_MEMORY_DMA:
		/* A VA-space mapping, bookkeeping only (vaspace.c). */
		return nvsim_esc_map_memory_dma(call, nr, buf, size);
	case NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO:
		return nvsim_esc_unsupported(nvfp,
				&((NVOS56_PARAMETERS *)buf)->status, size,
				sizeof(NVOS56_PARAMETERS));
	default:
		/* rm_ioctl(): NV_ERR_INVALID_COMMAND, which is -EINVAL. */
		return -EINVAL;
	}
}

static int nvsim_escape(struct nvsim_file *nvfp, u32 nr, void *buf, u32 size)
{
	struct nvsim_call call = {
		.file = nvfp,
		.priv = capable(CAP_SYS_ADMIN) ? NVSIM_PRIV_USER_ROOT : NVSIM_PRIV_USER,
	};

	switch (nr) {
	case NV_ESC_WAIT_OPEN_COMPLETE: {
		nv_ioctl_wait_open_complete_t *p = buf;

		if (size != sizeof(*p))
			return -EINVAL;
		p->rc = 0;
		p->adapterStatus = NV_OK;
		return 0;
	}
	case NV_ESC_CARD_INFO:
		return nvsim_esc_card_info(nvfp, buf, size);
	case NV_ESC_CHECK_VERSION_STR:
		return nvsim_esc_check_version(nvfp, buf, size);
	case NV_ESC_ATTACH_GPUS_TO_FD:
		return nvsim_esc_attach_gpus(nvfp, buf, size);
	case NV_ESC_SYS_PARAMS:
		return nvsim_esc_sys_params(nvfp, buf, size);
	case NV_ESC_NUMA_INFO:
		return nvsim_esc_numa_info(nvfp, buf, size);
	case NV_ESC_REGISTER_FD:
		return nvsim_esc_register_fd(nvfp, buf, size);
	case NV_ESC_ALLOC_OS_EVENT:
	case NV_ESC_FREE_OS_EVENT:
		return nvsim_esc_os_event(nvfp, nr, buf, size);
	case NV_ESC_STATUS_CODE:
		return nvsim_esc_status_code(nvfp, buf, size);
	case NV_ESC_EXPORT_TO_DMABUF_FD:
		return nvsim_esc_export_dmabuf(nvfp, buf, size);
	default:
		return nvsim_esc_rm(&call, nr, buf, size);
	}
}

/**
 * nvsim_ioctl - unlocked_ioctl of the control and GPU nodes
 * @filp: the file
 * @cmd: _IOWR('F', nr, size); only nr and size are used
 * @arg: user pointer to the parameters
 */
long nvsim_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct nvsim_file *nvfp = filp->private_data;
	void __user *uptr;
	u32 nr, size;
	void *buf;
	int ret;

	atomic64_inc(&nvsim.nr_ioctls);
	nvsim_test_delay(_IOC_NR(cmd), false);

	ret = nv_ioctl_unwrap(cmd, arg, &nr, &size, &uptr);
	if (ret)
		return ret;

	buf = kmalloc(size, GFP_KERNEL_ACCOUNT);
	if (!buf)
		return -ENOMEM;
	if (copy_from_user(buf, uptr, size)) {
		ret = -EFAULT;
		goto out;
	}

	/* Injected (fault.c): as nvidia_ioctl() failing before the escape. */
	ret = nvsim_fault_errno(NVSIM_FK_ESC, nr);
	if (!ret)
		ret = nvsim_escape(nvfp, nr, buf, size);

	if (copy_to_user(uptr, buf, size))
		ret = -EFAULT;
	nvsim_test_delay_out(_IOC_NR(cmd), false);
out:
	kfree(buf);
	return ret;
}

/**
 * nvsim_file_release_rm - free everything a closing file holds
 * @nvfp: the file
 *
 * The clients it owns (with their objects and FB), its OS events, attached
 * GPUs, mapping context and UVM external mappings.
 */
void nvsim_file_release_rm(struct nvsim_file *nvfp)
{
	struct nvsim_os_event *ev, *tmp;
	struct nvsim_uvm_ext *ext, *etmp;

	mutex_lock(&nvsim.lock);
	nvsim_exports_fini(nvfp);       /* rm_cleanup_file_private: exports first */
	nvsim_free_file_clients(nvfp);
	list_for_each_entry_safe(ev, tmp, &nvfp->os_events, node) {
		list_del(&ev->node);
		list_del(&ev->all);
		kfree(ev);
	}
	nvsim_detach_gpus(nvfp);
	nvsim_mapctx_clear(nvfp);
	list_for_each_entry_safe(ext, etmp, &nvfp->uvm_ext, node)
		nvsim_uvm_ext_free(ext);
	nvsim_uvm_xranges_free(nvfp);
	mutex_unlock(&nvsim.lock);
}
