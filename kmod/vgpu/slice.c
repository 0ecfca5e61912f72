// SPDX-License-Identifier: GPL-2.0
/*
 * slice.c - refcounted slices and their registry.
 *
 * A slice is created and removed under vgpu_slices_lock.  Removal (netlink
 * SLICE_DEL or module exit) unlinks it from the registry and deletes its
 * nodes; open files, charges and clients keep their references, and the
 * slice is freed when the last one goes (vgpu_slice_put).
 */
#include <linux/slab.h>
#include <linux/idr.h>
#include <linux/xarray.h>
#include <linux/namei.h>
#include <linux/string.h>
#include <linux/stat.h>
#include <linux/pid_namespace.h>
#include <linux/sched.h>
#include <linux/capability.h>
#include <net/netlink.h>

#include "vgpu.h"

DEFINE_MUTEX(vgpu_slices_lock);
static DEFINE_IDR(vgpu_slot_idr);        /* slot (base / 16) -> slice */
static DEFINE_XARRAY(vgpu_slice_ids);    /* id -> slice */

static void vgpu_slice_release(struct kref *ref)
{
	struct vgpu_slice *s = container_of(ref, struct vgpu_slice, ref);
	struct vgpu_pid *p, *tmp;
	u32 i;

	for (i = 0; i < s->nr_gpus; i++)
		path_put(&s->gpus[i].path);
	path_put(&s->ctl_path);
	if (s->uvm_path.dentry)
		path_put(&s->uvm_path);
	list_for_each_entry_safe(p, tmp, &s->pids, node) {
		put_pid(p->pid);
		kfree(p);
	}
	if (s->cgroup)
		cgroup_put(s->cgroup);
	vgpu_audit_free(s);
	kfree(s);
}

/* Bind (or rebind) a slice to cgrp, whose reference it takes over. */
void vgpu_slice_set_cgroup_locked(struct vgpu_slice *s, struct cgroup *cgrp)
{
	struct cgroup *old;

	lockdep_assert_held(&vgpu_slices_lock);
	old = s->cgroup;
	s->cgroup = cgrp;
	if (old)
		cgroup_put(old);
}

/* Is current's cgroup v2 cgrp or below it? */
static bool vgpu_current_under(struct cgroup *cgrp)
{
	bool ret;

	rcu_read_lock();
	ret = cgroup_is_descendant(task_dfl_cgroup(current), cgrp);
	rcu_read_unlock();
	return ret;
}

void vgpu_slice_put(struct vgpu_slice *s)
{
	if (s)
		kref_put(&s->ref, vgpu_slice_release);
}

/* Look up a real node: a character device with the expected numbers. */
static int vgpu_real_node(const char *name, int major, int minor,
			  struct path *out)
{
	char *p;
	int ret;

	p = kasprintf(GFP_KERNEL, "%s/%s", vgpu_nvidia_dev_dir, name);
	if (!p)
		return -ENOMEM;
	ret = kern_path(p, LOOKUP_FOLLOW, out);
	kfree(p);
	if (ret)
		return -ENODEV;
	if (!d_is_reg(out->dentry) && d_inode(out->dentry) &&
	    S_ISCHR(d_inode(out->dentry)->i_mode) &&
	    (major < 0 || MAJOR(d_inode(out->dentry)->i_rdev) == major) &&
	    (minor < 0 || MINOR(d_inode(out->dentry)->i_rdev) == minor))
		return 0;
	path_put(out);
	return -ENODEV;
}

/**
 * vgpu_slice_new - create and register a slice, with its nodes
 * @req: the request, checked whole by netlink.c
 * @extack: where a refusal is explained (an allocation's is not)
 *
 * Each GPU joins its real GPU's scheduler with the compute setting the
 * request gives.  Called with vgpu_slices_lock held, which the nodes' opens
 * take: nobody opens the slice before the caller has finished setting it up.
 *
 * Return: the slice (the registry's reference) or an ERR_PTR: -EEXIST (the
 * id is taken), -ENODEV (a real node is missing), -ENOSPC (no free minors),
 * -ENOMEM, or what creating a node or a scheduler returned.
 */
struct vgpu_slice *vgpu_slice_new(const struct vgpu_slice_req *req,
				  struct netlink_ext_ack *extack)
{
	static nv_gpu_info_t info[NVIDIA_MAX_GPUS];
	struct vgpu_slice *s;
	char node[32];
	int slot, ret;
	u32 i, n;

	lockdep_assert_held(&vgpu_slices_lock);

	if (xa_load(&vgpu_slice_ids, req->id)) {
		NL_SET_ERR_MSG_ATTR(extack, req->id_attr, "slice id in use");
		return ERR_PTR(-EEXIST);
	}
	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return ERR_PTR(-ENOMEM);
	ret = vgpu_audit_init(s);
	if (ret)
		goto err_free;
	kref_init(&s->ref);
	mutex_init(&s->lock);
	INIT_LIST_HEAD(&s->pids);
	s->id = req->id;
	for (i = 0; i < VGPU_MAX_SLICE_GPUS; i++) {
		s->gpus[i].slice = s;
		vgpu_compute_init_gpu(&s->gpus[i]);
	}
	strscpy(s->name, req->name, sizeof(s->name));
	s->uvm_policy = req->uvm_policy;

	/* info[] is static: vgpu_slices_lock serialises its users. */
	n = vgpu_rm_enumerate(info);
	ret = vgpu_real_node("nvidiactl", NV_MAJOR_DEVICE_NUMBER,
			     NV_CONTROL_DEVICE_MINOR, &s->ctl_path);
	if (ret) {
		if (ret == -ENODEV)
			NL_SET_ERR_MSG(extack, "the real nvidiactl node is missing");
		goto err_audit;
	}
	/* A driver without UVM still makes slices: they get no UVM node. */
	if (vgpu_real_node("nvidia-uvm", -1, -1, &s->uvm_path))
		s->uvm_path.dentry = NULL;

	for (i = 0; i < req->nr_gpus; i++) {
		const struct vgpu_gpu_req *r = &req->gpus[i];
		struct vgpu_gpu *g = &s->gpus[i];

		snprintf(node, sizeof(node), "nvidia%u", r->real_minor);
		ret = vgpu_real_node(node, NV_MAJOR_DEVICE_NUMBER, r->real_minor,
				     &g->path);
		if (ret) {
			if (ret == -ENODEV)
				NL_SET_ERR_MSG_ATTR(extack, r->nest,
						    "a real NVIDIA device node is missing");
			goto err_paths;
		}
		s->nr_gpus = i + 1;
		g->index = i;
		g->real_minor = r->real_minor;
		g->limit = r->limit;
		/* Default gpu_id: the GPU the driver enumerates at that index
		 * (the driver's minors follow its enumeration order). */
		g->gpu_id = r->gpu_id;
		if (!g->gpu_id && r->real_minor < n)
			g->gpu_id = info[r->real_minor].gpu_id;
		/*
		 * NV0080's deviceId names the driver's device instance, not the
		 * minor; ask the driver.  Only where it answers that the GPU
		 * has none (not attached yet: nothing opened it) the minor
		 * stands in (they agree where the driver numbers instances in
		 * probe order), logged.  Where the question cannot be asked,
		 * no slice: a guess could put its devices on another GPU.
		 */
		ret = vgpu_rm_device_instance(g->gpu_id, &g->dev_inst);
		if (ret == -ENODEV) {
			pr_warn("slice %u: GPU %u (gpu_id %#x): the driver gave no device instance; using its minor %u\n",
				s->id, i, g->gpu_id, r->real_minor);
			g->dev_inst = r->real_minor;
		} else if (ret) {
			NL_SET_ERR_MSG_ATTR(extack, r->nest,
					    "the driver's device instance of this GPU could not be asked for");
			goto err_paths;
		}
		/*
		 * The UUID UVM_REGISTER_GPU must name (uvm.c).  Without it
		 * the slice registers this GPU with UVM under no UUID
		 * (fail-closed), logged: a driver without the GPU (the test
		 * bed on NVIDIA's driver, tests/realdrv) still makes slices.
		 */
		g->has_uuid = !vgpu_rm_gpu_uuid(g->gpu_id, g->uuid);
		if (!g->has_uuid)
			pr_warn("slice %u: GPU %u (gpu_id %#x): the driver gave no UUID; UVM_REGISTER_GPU will be refused for it\n",
				s->id, i, g->gpu_id);
		/* Set before it joins the scheduler, which reads it from then on. */
		g->policy = VGPU_COMPUTE_NONE;
		g->bp = 0;
		g->priority = VGPU_PRIORITY_LOW;
		vgpu_gpu_req_compute(r, &g->policy, &g->bp, &g->priority);
	}

	/*
	 * Cyclic: a freed slot (and its minors) is handed out again only once
	 * the allocation cursor has gone round all VGPU_MAX_SLICES slots, so a
	 * node of a deleted slice left behind somewhere (a stale bind mount, a
	 * copied mknod) does not open the next tenant's slice a moment later.
	 * Later it may: the slice's cgroup binding is what refuses it then.
	 */
	slot = idr_alloc_cyclic(&vgpu_slot_idr, s, 0, VGPU_MAX_SLICES, GFP_KERNEL);
	if (slot < 0) {
		ret = slot;
		if (ret == -ENOSPC)
			NL_SET_ERR_MSG(extack, "no free slice minors");
		goto err_paths;
	}
	s->base = slot * VGPU_MINORS_PER_SLICE;
	ret = xa_insert(&vgpu_slice_ids, s->id, s, GFP_KERNEL);
	if (ret)
		goto err_idr;
	ret = vgpu_device_add_nodes(s);
	if (ret)
		goto err_xa;
	for (i = 0; i < s->nr_gpus; i++) {
		ret = vgpu_sched_attach(&s->gpus[i]);
		if (ret)
			goto err_sched;
	}
	return s;

err_sched:
	while (i--)
		vgpu_sched_detach(&s->gpus[i]);
	vgpu_device_del_nodes(s);
err_xa:
	xa_erase(&vgpu_slice_ids, s->id);
err_idr:
	idr_remove(&vgpu_slot_idr, slot);
err_paths:
	for (i = 0; i < s->nr_gpus; i++)
		path_put(&s->gpus[i].path);
	if (s->uvm_path.dentry)
		path_put(&s->uvm_path);
	path_put(&s->ctl_path);
err_audit:
	vgpu_audit_free(s);
err_free:
	kfree(s);
	return ERR_PTR(ret);
}

struct vgpu_slice *vgpu_slice_find_locked(u32 id)
{
	lockdep_assert_held(&vgpu_slices_lock);
	return xa_load(&vgpu_slice_ids, id);
}

/*
 * Open: a referenced live slice owning the minor, NULL if none,
 * ERR_PTR(-EIO) when it is quarantined (call.c), or
 * ERR_PTR(-EPERM) when current may not open it: a bound slice opens only
 * from its cgroup (or below); an unbound one only for a host administrator
 * (CAP_SYS_ADMIN in the initial user namespace), never for a container,
 * since nothing would tell one container's unbound slice from another's.
 */
struct vgpu_slice *vgpu_slice_get_by_minor(unsigned int minor)
{
	struct vgpu_slice *s;

	mutex_lock(&vgpu_slices_lock);
	s = idr_find(&vgpu_slot_idr, minor / VGPU_MINORS_PER_SLICE);
	if (s && !s->removed) {
		if (atomic_read(&s->quarantined)) {
			s = ERR_PTR(-EIO);
		} else if (s->cgroup && !vgpu_current_under(s->cgroup)) {
			pr_notice_ratelimited("slice %u: open of minor %u by pid %d (%s) refused: not in the slice's cgroup (id %llu)\n",
					      s->id, minor, task_tgid_nr(current),
					      current->comm, cgroup_id(s->cgroup));
			s = ERR_PTR(-EPERM);
		} else if (!s->cgroup && !capable(CAP_SYS_ADMIN)) {
			pr_notice_ratelimited("slice %u: open of minor %u by pid %d (%s) refused: the slice is bound to no cgroup (only a host administrator may open it)\n",
					      s->id, minor, task_tgid_nr(current),
					      current->comm);
			s = ERR_PTR(-EPERM);
		} else {
			vgpu_slice_get(s);
		}
	} else {
		s = NULL;
	}
	mutex_unlock(&vgpu_slices_lock);
	return s;
}

/* Unlink: nodes go, ids and minors become free; the registry's ref is dropped. */
void vgpu_slice_remove_locked(struct vgpu_slice *s)
{
	u32 i;

	lockdep_assert_held(&vgpu_slices_lock);
	WRITE_ONCE(s->removed, true);
	vgpu_device_del_nodes(s);
	/* Unmanaged from now on: running, blocked doorbell writers woken. */
	for (i = 0; i < s->nr_gpus; i++)
		vgpu_sched_detach(&s->gpus[i]);
	xa_erase(&vgpu_slice_ids, s->id);
	idr_remove(&vgpu_slot_idr, s->base / VGPU_MINORS_PER_SLICE);
	vgpu_slice_put(s);
}

/* Calls fn for each slice with id >= start_id in id order, under the lock. */
int vgpu_slice_for_each_from(u32 start_id, vgpu_slice_iter_t fn, void *arg)
{
	struct vgpu_slice *s;
	unsigned long id;
	int ret = 0;

	mutex_lock(&vgpu_slices_lock);
	xa_for_each_start(&vgpu_slice_ids, id, s, start_id) {
		ret = fn(s, arg);
		if (ret)
			break;
	}
	mutex_unlock(&vgpu_slices_lock);
	return ret;
}

u32 vgpu_nr_slices(void)
{
	struct vgpu_slice *s;
	unsigned long id;
	u32 n = 0;

	xa_for_each(&vgpu_slice_ids, id, s)
		n++;
	return n;
}

int vgpu_slice_add_pid(struct vgpu_slice *s, struct pid *pid)
{
	struct vgpu_pid *p, *np;

	np = kzalloc(sizeof(*np), GFP_KERNEL);
	if (!np)
		return -ENOMEM;
	mutex_lock(&s->lock);
	list_for_each_entry(p, &s->pids, node) {
		if (p->pid == pid) {
			p->files++;
			mutex_unlock(&s->lock);
			kfree(np);
			return 0;
		}
	}
	np->pid = get_pid(pid);
	np->files = 1;
	list_add_tail(&np->node, &s->pids);
	mutex_unlock(&s->lock);
	return 0;
}

void vgpu_slice_del_pid(struct vgpu_slice *s, struct pid *pid)
{
	struct vgpu_pid *p, *found = NULL;

	mutex_lock(&s->lock);
	list_for_each_entry(p, &s->pids, node) {
		if (p->pid == pid) {
			if (!--p->files) {
				list_del(&p->node);
				found = p;
			}
			break;
		}
	}
	mutex_unlock(&s->lock);
	if (found) {
		put_pid(found->pid);
		kfree(found);
	}
}

bool vgpu_slice_has_host_pid(struct vgpu_slice *s, pid_t nr)
{
	struct vgpu_pid *p;
	bool ret = false;

	mutex_lock(&s->lock);
	list_for_each_entry(p, &s->pids, node) {
		if (pid_nr(p->pid) == nr) {
			ret = true;
			break;
		}
	}
	mutex_unlock(&s->lock);
	return ret;
}

void vgpu_slices_exit(void)
{
	struct vgpu_slice *s;
	unsigned long id;

	mutex_lock(&vgpu_slices_lock);
	xa_for_each(&vgpu_slice_ids, id, s)
		vgpu_slice_remove_locked(s);
	mutex_unlock(&vgpu_slices_lock);
	idr_destroy(&vgpu_slot_idr);
	xa_destroy(&vgpu_slice_ids);
}

/* A host tgid of the slice as the caller's PID namespace numbers it; 0 if none. */
pid_t vgpu_slice_pid_out(struct vgpu_slice *s, pid_t host)
{
	struct pid_namespace *ns = task_active_pid_ns(current);
	struct vgpu_pid *p;
	pid_t ret = 0;

	mutex_lock(&s->lock);
	list_for_each_entry(p, &s->pids, node) {
		if (pid_nr(p->pid) == host) {
			ret = pid_nr_ns(p->pid, ns);
			break;
		}
	}
	mutex_unlock(&s->lock);
	return ret;
}

/* The host tgid of a process of the slice named in the caller's namespace; 0 if none. */
pid_t vgpu_slice_pid_in(struct vgpu_slice *s, pid_t vnr)
{
	struct pid_namespace *ns = task_active_pid_ns(current);
	struct vgpu_pid *p;
	pid_t ret = 0;

	if (vnr <= 0)
		return 0;
	mutex_lock(&s->lock);
	list_for_each_entry(p, &s->pids, node) {
		if (pid_nr_ns(p->pid, ns) == vnr) {
			ret = pid_nr(p->pid);
			break;
		}
	}
	mutex_unlock(&s->lock);
	return ret;
}
