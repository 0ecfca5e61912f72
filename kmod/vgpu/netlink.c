// SPDX-License-Identifier: GPL-2.0
/*
 * netlink.c - the generic-netlink family "vgpu" (include/uapi/vgpu.h):
 * strict policies, GENL_ADMIN_PERM on every command, extack messages that
 * name the bad attribute, and the "events" multicast group.  The policies,
 * the ops table and the groups are generated from kmod/netlink/vgpu.yaml
 * into netlink-gen.c (make generate); the handlers are here.  SLICE_NEW and
 * SLICE_SET parse and check the whole request, each GPU nest where it is
 * parsed, before anything changes: a refused request leaves no trace.
 */
#include <linux/slab.h>
#include <net/genetlink.h>

#include <linux/version.h>

#include "vgpu.h"
#include "netlink-gen.h"

static struct genl_family vgpu_family;

/* ------------------------------------------------------------ replies */

static int vgpu_fill_gpu(struct sk_buff *skb, struct vgpu_slice *s, u32 i)
{
	struct vgpu_gpu *g = &s->gpus[i];
	struct nlattr *n = nla_nest_start(skb, VGPU_A_GPU);

	if (!n)
		return -EMSGSIZE;
	if (nla_put_u32(skb, VGPU_GPU_A_INDEX, i) ||
	    nla_put_u32(skb, VGPU_GPU_A_REAL_MINOR, g->real_minor) ||
	    nla_put_u32(skb, VGPU_GPU_A_GPU_ID, g->gpu_id) ||
	    nla_put_u32(skb, VGPU_GPU_A_MINOR, s->base + VGPU_MINOR_GPU0 + i) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_MEM_LIMIT, READ_ONCE(g->limit), VGPU_GPU_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_MEM_USED, atomic64_read(&g->used), VGPU_GPU_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_MEM_PEAK, atomic64_read(&g->peak), VGPU_GPU_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_ALLOCS, atomic64_read(&g->allocs), VGPU_GPU_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_REFUSALS, atomic64_read(&g->refusals), VGPU_GPU_A_PAD) ||
	    nla_put_u32(skb, VGPU_GPU_A_COMPUTE_POLICY, READ_ONCE(g->policy)) ||
	    nla_put_u32(skb, VGPU_GPU_A_COMPUTE_BP, READ_ONCE(g->bp)) ||
	    nla_put_u32(skb, VGPU_GPU_A_PRIORITY, READ_ONCE(g->priority)) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_GPU_TIME_NS, atomic64_read(&g->gpu_time_ns),
			      VGPU_GPU_A_PAD) ||
	    nla_put_u32(skb, VGPU_GPU_A_TSGS, READ_ONCE(g->nr_tsgs)) ||
	    nla_put_u32(skb, VGPU_GPU_A_CHANNELS, READ_ONCE(g->nr_channels)) ||
	    nla_put_u32(skb, VGPU_GPU_A_PAUSED, READ_ONCE(g->paused)) ||
	    nla_put_u64_64bit(skb, VGPU_GPU_A_DOORBELL_TRAPS, atomic64_read(&g->doorbell_traps),
			      VGPU_GPU_A_PAD)) {
		nla_nest_cancel(skb, n);
		return -EMSGSIZE;
	}
	nla_nest_end(skb, n);
	return 0;
}

/*
 * truncate_pids: stop the pid list where the skb is full and say so with
 * VGPU_A_SLICE_PIDS_TRUNCATED, instead of failing with -EMSGSIZE.  Only a
 * dump asks for it, for a slice alone in its message: one holder process
 * per 8 bytes, a slice its tenant made ~4,000 processes hold would not fit
 * an empty dump skb, and the dump (every slice, vgpud's reconcile) would
 * fail for as long as they lived.
 */
static int vgpu_fill_slice(struct sk_buff *skb, struct vgpu_slice *s,
			   u32 portid, u32 seq, int flags, u8 cmd,
			   bool truncate_pids)
{
	struct nlattr *gpus, *pids;
	struct vgpu_pid *p;
	bool truncated = false;
	void *hdr;
	u32 i;

	hdr = genlmsg_put(skb, portid, seq, &vgpu_family, flags, cmd);
	if (!hdr)
		return -EMSGSIZE;
	if (nla_put_u32(skb, VGPU_A_SLICE_ID, s->id) ||
	    nla_put_string(skb, VGPU_A_SLICE_NAME, s->name) ||
	    nla_put_u32(skb, VGPU_A_SLICE_UVM_POLICY, READ_ONCE(s->uvm_policy)) ||
	    nla_put_u32(skb, VGPU_A_SLICE_MAX_CHANNELS, READ_ONCE(s->max_channels)) ||
	    nla_put_u32(skb, VGPU_A_SLICE_MAJOR, vgpu_major) ||
	    nla_put_u32(skb, VGPU_A_SLICE_BASE_MINOR, s->base) ||
	    nla_put_u32(skb, VGPU_A_SLICE_OPEN_FILES, atomic_read(&s->open_files)) ||
	    nla_put_u64_64bit(skb, VGPU_A_SLICE_UVM_MAPPED,
			      atomic64_read(&s->uvm_mapped), VGPU_A_PAD) ||
	    nla_put_u8(skb, VGPU_A_SLICE_QUARANTINED,
		       !!atomic_read(&s->quarantined)) ||
	    nla_put_u8(skb, VGPU_A_SLICE_AUDIT, vgpu_audit_on(s)) ||
	    nla_put_u32(skb, VGPU_A_SLICE_ALLOW_COUNT, vgpu_audit_nr_allow(s)) ||
	    nla_put_u8(skb, VGPU_A_SLICE_TRACE, READ_ONCE(s->trace)) ||
	    nla_put_u64_64bit(skb, VGPU_A_SLICE_CGROUP_ID,
			      s->cgroup ? cgroup_id(s->cgroup) : 0, VGPU_A_PAD))
		goto err;
	gpus = nla_nest_start(skb, VGPU_A_SLICE_GPUS);
	if (!gpus)
		goto err;
	for (i = 0; i < s->nr_gpus; i++)
		if (vgpu_fill_gpu(skb, s, i))
			goto err;
	nla_nest_end(skb, gpus);
	pids = nla_nest_start(skb, VGPU_A_SLICE_PIDS);
	if (!pids)
		goto err;
	mutex_lock(&s->lock);
	list_for_each_entry(p, &s->pids, node) {
		if (truncate_pids &&
		    skb_tailroom(skb) < nla_total_size(sizeof(u32)) +
					nla_total_size(sizeof(u8))) {
			truncated = true;
			break;
		}
		if (nla_put_u32(skb, VGPU_A_PID, pid_nr(p->pid))) {
			mutex_unlock(&s->lock);
			goto err;
		}
	}
	mutex_unlock(&s->lock);
	nla_nest_end(skb, pids);
	if (truncated && nla_put_u8(skb, VGPU_A_SLICE_PIDS_TRUNCATED, 1))
		goto err;
	genlmsg_end(skb, hdr);
	return 0;
err:
	genlmsg_cancel(skb, hdr);
	return -EMSGSIZE;
}

/*
 * A reply lists the host pids holding the slice (VGPU_A_SLICE_PIDS, 8 bytes
 * each), as many as the slice's own processes make: in one NLMSG_GOODSIZE
 * skb, about 900 of them made GET fail with -EMSGSIZE, and SET too, after
 * it had applied its change (tools/fuzz/nlfuzz.py; tests/vm/test_nlfuzz.py).
 * So a reply that does not fit is filled again in a skb twice the size, up
 * to VGPU_REPLY_MAX (about 30,000 pids).
 */
#define VGPU_REPLY_MAX	(256 * 1024)

static int vgpu_reply_slice(struct genl_info *info, struct vgpu_slice *s)
{
	size_t size = NLMSG_GOODSIZE;
	struct sk_buff *skb;
	int ret;

	for (;;) {
		skb = genlmsg_new(size, GFP_KERNEL);
		if (!skb)
			return -ENOMEM;
		ret = vgpu_fill_slice(skb, s, info->snd_portid, info->snd_seq, 0,
				      VGPU_CMD_SLICE_GET, false);
		if (!ret)
			return genlmsg_reply(skb, info);
		nlmsg_free(skb);
		if (ret != -EMSGSIZE || 2 * size > VGPU_REPLY_MAX)
			return ret;
		size *= 2;
	}
}

/* ------------------------------------------------------------ commands */

/*
 * VGPU_A_SLICE_CGROUP_FD, resolved in the sender's fd table: a referenced
 * cgroup v2, NULL without the attribute, or an ERR_PTR (extack set).
 */
static struct cgroup *vgpu_nl_cgroup(struct genl_info *info)
{
	struct nlattr *a = info->attrs[VGPU_A_SLICE_CGROUP_FD];
	struct cgroup *cgrp;

	if (!a)
		return NULL;
	cgrp = cgroup_get_from_fd((int)nla_get_u32(a));
	if (IS_ERR(cgrp))
		NL_SET_ERR_MSG_ATTR(info->extack, a,
				    "VGPU_A_SLICE_CGROUP_FD is not an open cgroup v2 directory");
	return cgrp;
}

/* A VGPU_A_GPU nest's attributes into *r: what it says, checked by the caller. */
static void vgpu_gpu_req_fill(struct vgpu_gpu_req *r, const struct nlattr *nest,
			      struct nlattr **tb)
{
	int t;

	r->nest = nest;
	for (t = 1; t <= VGPU_GPU_A_MAX; t++)
		if (tb[t])
			r->has |= BIT(t);
	if (tb[VGPU_GPU_A_INDEX])
		r->index = nla_get_u32(tb[VGPU_GPU_A_INDEX]);
	if (tb[VGPU_GPU_A_REAL_MINOR])
		r->real_minor = nla_get_u32(tb[VGPU_GPU_A_REAL_MINOR]);
	if (tb[VGPU_GPU_A_GPU_ID])
		r->gpu_id = nla_get_u32(tb[VGPU_GPU_A_GPU_ID]);
	if (tb[VGPU_GPU_A_MEM_LIMIT])
		r->limit = nla_get_u64(tb[VGPU_GPU_A_MEM_LIMIT]);
	if (tb[VGPU_GPU_A_COMPUTE_POLICY])
		r->policy = nla_get_u32(tb[VGPU_GPU_A_COMPUTE_POLICY]);
	if (tb[VGPU_GPU_A_COMPUTE_BP])
		r->bp = nla_get_u32(tb[VGPU_GPU_A_COMPUTE_BP]);
	if (tb[VGPU_GPU_A_PRIORITY])
		r->priority = nla_get_u32(tb[VGPU_GPU_A_PRIORITY]);
}

/*
 * The compute setting r leaves over (policy, bp, priority) must be whole:
 * a policy other than NONE needs basis points, which the policy's range
 * keeps from ever being set back to 0.
 */
static int vgpu_check_compute(const struct vgpu_gpu_req *r, u32 policy, u32 bp,
			      u32 priority, struct netlink_ext_ack *extack)
{
	vgpu_gpu_req_compute(r, &policy, &bp, &priority);
	if (policy != VGPU_COMPUTE_NONE && !bp) {
		NL_SET_ERR_MSG_ATTR(extack, r->nest,
				    "VGPU_GPU_A_COMPUTE_BP missing (needed by a compute policy)");
		return -EINVAL;
	}
	return 0;
}

/*
 * SLICE_NEW's GPU i: its real GPU and limit are needed, its index (optional)
 * is its place in the list, and no real GPU is named twice (each has one
 * quota).  Compute starts from the defaults.
 */
static int vgpu_check_new_gpu(struct nlattr **tb, const struct vgpu_gpu_req *gpus,
			      u32 i, struct netlink_ext_ack *extack)
{
	const struct vgpu_gpu_req *r = &gpus[i];
	int ret;
	u32 j;

	if (!tb[VGPU_GPU_A_REAL_MINOR]) {
		NL_SET_ERR_MSG_ATTR(extack, r->nest, "VGPU_GPU_A_REAL_MINOR missing");
		return -EINVAL;
	}
	if (!tb[VGPU_GPU_A_MEM_LIMIT]) {
		NL_SET_ERR_MSG_ATTR(extack, r->nest, "VGPU_GPU_A_MEM_LIMIT missing");
		return -EINVAL;
	}
	if (tb[VGPU_GPU_A_INDEX] && r->index != i) {
		NL_SET_ERR_MSG_ATTR(extack, tb[VGPU_GPU_A_INDEX],
				    "VGPU_GPU_A_INDEX must follow the order of the GPUs");
		return -EINVAL;
	}
	ret = vgpu_check_compute(r, VGPU_COMPUTE_NONE, 0, VGPU_PRIORITY_LOW, extack);
	if (ret)
		return ret;
	for (j = 0; j < i; j++) {
		if (gpus[j].real_minor == r->real_minor) {
			NL_SET_ERR_MSG_ATTR(extack, tb[VGPU_GPU_A_REAL_MINOR],
					    "a GPU is named twice");
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * A SLICE_SET nest names a GPU of s by index and changes its limit or its
 * compute setting, never which GPU it is.  Compute is checked over the
 * GPU's own setting, which only changes under the vgpu_slices_lock that
 * SET holds until it has applied the request.
 */
static int vgpu_check_set_gpu(struct nlattr **tb, const struct vgpu_gpu_req *r,
			      const struct vgpu_slice *s, struct netlink_ext_ack *extack)
{
	const struct vgpu_gpu *g;

	if (!tb[VGPU_GPU_A_INDEX]) {
		NL_SET_ERR_MSG_ATTR(extack, r->nest, "VGPU_GPU_A_INDEX missing");
		return -EINVAL;
	}
	if (r->index >= s->nr_gpus) {
		NL_SET_ERR_MSG_ATTR(extack, tb[VGPU_GPU_A_INDEX],
				    "VGPU_GPU_A_INDEX: no such GPU in the slice");
		return -EINVAL;
	}
	/* A gpu_id of 0 is NEW's "the driver's": it asks for no change. */
	if (tb[VGPU_GPU_A_REAL_MINOR] || r->gpu_id) {
		NL_SET_ERR_MSG_ATTR(extack, tb[VGPU_GPU_A_REAL_MINOR] ?: tb[VGPU_GPU_A_GPU_ID],
				    "a slice's GPUs cannot change");
		return -EINVAL;
	}
	if (!(r->has & (BIT(VGPU_GPU_A_MEM_LIMIT) | VGPU_GPU_REQ_COMPUTE))) {
		NL_SET_ERR_MSG_ATTR(extack, r->nest,
				    "VGPU_GPU_A_MEM_LIMIT or a compute attribute needed");
		return -EINVAL;
	}
	g = &s->gpus[r->index];
	return vgpu_check_compute(r, READ_ONCE(g->policy), READ_ONCE(g->bp),
				  READ_ONCE(g->priority), extack);
}

/*
 * VGPU_A_SLICE_GPUS into gpus[] (*n of them), each nest checked where it is
 * parsed: as SLICE_NEW's when s is NULL, else as SLICE_SET's on s.  The
 * caller changes nothing before all of them have passed.
 */
static int vgpu_parse_gpus(const struct nlattr *list, const struct vgpu_slice *s,
			   struct vgpu_gpu_req *gpus, u32 *n,
			   struct netlink_ext_ack *extack)
{
	struct nlattr *tb[VGPU_GPU_A_MAX + 1];
	const struct nlattr *a;
	int rem, ret;
	u32 i = 0;

	/* The list's shape first: too long is E2BIG, whatever its GPUs say. */
	*n = 0;
	nla_for_each_nested(a, list, rem) {
		if (nla_type(a) != VGPU_A_GPU) {
			NL_SET_ERR_MSG_ATTR(extack, a, "VGPU_A_SLICE_GPUS holds only VGPU_A_GPU");
			return -EINVAL;
		}
		if (++*n > VGPU_MAX_SLICE_GPUS) {
			NL_SET_ERR_MSG_ATTR(extack, a, "more than VGPU_MAX_SLICE_GPUS GPUs");
			return -E2BIG;
		}
	}
	nla_for_each_nested(a, list, rem) {
		ret = nla_parse_nested(tb, VGPU_GPU_A_MAX, a, vgpu_gpu_policy, extack);
		if (ret)
			return ret;
		vgpu_gpu_req_fill(&gpus[i], a, tb);
		ret = s ? vgpu_check_set_gpu(tb, &gpus[i], s, extack) :
			  vgpu_check_new_gpu(tb, gpus, i, extack);
		if (ret)
			return ret;
		i++;
	}
	return 0;
}

/*
 * VGPU_A_SLICE_ALLOW: its entries as keys (*keys kvfree'd by the caller
 * unless handed to the slice).  An unknown kind is refused, as is a list
 * past VGPU_MAX_ALLOW entries (the policy lets only VGPU_A_ALLOW in).
 */
static int vgpu_parse_allow(struct nlattr *list, u64 **keys, u32 *n,
			    struct netlink_ext_ack *extack)
{
	struct nlattr *a;
	u32 cnt = 0;
	u64 key;
	int rem;

	*keys = NULL;
	*n = 0;
	nla_for_each_nested(a, list, rem) {
		if (nla_type(a) != VGPU_A_ALLOW) {
			NL_SET_ERR_MSG_ATTR(extack, a, "only VGPU_A_ALLOW entries belong here");
			return -EINVAL;
		}
		if (++cnt > VGPU_MAX_ALLOW) {
			NL_SET_ERR_MSG_ATTR(extack, list, "more than VGPU_MAX_ALLOW entries");
			return -E2BIG;
		}
	}
	if (!cnt)
		return 0;
	*keys = kvmalloc_array(cnt, sizeof(u64), GFP_KERNEL);
	if (!*keys)
		return -ENOMEM;
	nla_for_each_nested(a, list, rem) {
		key = nla_get_u64(a);
		if ((key >> 32) >= __VGPU_AUDIT_KIND_MAX) {
			NL_SET_ERR_MSG_ATTR(extack, a, "unknown vgpu_audit_kind in VGPU_A_ALLOW");
			kvfree(*keys);
			*keys = NULL;
			return -EINVAL;
		}
		(*keys)[(*n)++] = key;
	}
	return 0;
}

/*
 * What SLICE_NEW and SLICE_SET resolve before they take vgpu_slices_lock and
 * hand over to the slice: what is still here afterwards is dropped.
 */
struct vgpu_nl_handover {
	u64 *allow;             /* VGPU_A_SLICE_ALLOW's keys */
	u32 nr_allow;
	struct cgroup *cgrp;    /* VGPU_A_SLICE_CGROUP_FD's, a reference */
};

static int vgpu_nl_handover_parse(struct genl_info *info, struct vgpu_nl_handover *h)
{
	struct cgroup *cgrp;
	int ret;

	if (info->attrs[VGPU_A_SLICE_ALLOW]) {
		ret = vgpu_parse_allow(info->attrs[VGPU_A_SLICE_ALLOW], &h->allow,
				       &h->nr_allow, info->extack);
		if (ret)
			return ret;
	}
	cgrp = vgpu_nl_cgroup(info);
	if (IS_ERR(cgrp))
		return PTR_ERR(cgrp);
	h->cgrp = cgrp;
	return 0;
}

static void vgpu_nl_handover_drop(struct vgpu_nl_handover *h)
{
	if (h->cgrp)
		cgroup_put(h->cgrp);
	kvfree(h->allow);
}

/*
 * What SLICE_NEW and SLICE_SET set alike, all checked already: nothing
 * here fails.  Under vgpu_slices_lock, which the nodes' opens take, so a
 * new slice is bound and has its policy's exceptions before anyone opens it.
 */
static void vgpu_nl_set_common(struct vgpu_slice *s, struct genl_info *info,
			       struct vgpu_nl_handover *h)
{
	struct nlattr **attrs = info->attrs;

	/* A lower cap leaves live channels alone; new ones wait for room. */
	if (attrs[VGPU_A_SLICE_MAX_CHANNELS])
		WRITE_ONCE(s->max_channels, nla_get_u32(attrs[VGPU_A_SLICE_MAX_CHANNELS]));
	/* (Re)bound: later opens are checked against this cgroup. */
	if (h->cgrp) {
		vgpu_slice_set_cgroup_locked(s, h->cgrp);
		h->cgrp = NULL;
	}
	if (attrs[VGPU_A_SLICE_AUDIT])
		vgpu_audit_set(s, nla_get_u8(attrs[VGPU_A_SLICE_AUDIT]));
	if (attrs[VGPU_A_SLICE_ALLOW]) {
		vgpu_audit_set_allow(s, h->allow, h->nr_allow);
		h->allow = NULL;
	}
	if (attrs[VGPU_A_SLICE_TRACE])
		WRITE_ONCE(s->trace, nla_get_u8(attrs[VGPU_A_SLICE_TRACE]));
}

int vgpu_nl_new(struct sk_buff *skb, struct genl_info *info)
{
	struct netlink_ext_ack *extack = info->extack;
	struct nlattr **attrs = info->attrs;
	struct vgpu_nl_handover h = {};
	struct vgpu_slice_req *req;
	struct vgpu_slice *s;
	int ret;

	if (GENL_REQ_ATTR_CHECK(info, VGPU_A_SLICE_ID) ||
	    GENL_REQ_ATTR_CHECK(info, VGPU_A_SLICE_GPUS))
		return -EINVAL;
	/* Off the stack: it holds VGPU_MAX_SLICE_GPUS GPUs' requests. */
	req = kzalloc(sizeof(*req), GFP_KERNEL);
	if (!req)
		return -ENOMEM;
	req->id_attr = attrs[VGPU_A_SLICE_ID];
	req->id = nla_get_u32(attrs[VGPU_A_SLICE_ID]);
	req->name = attrs[VGPU_A_SLICE_NAME] ? nla_data(attrs[VGPU_A_SLICE_NAME]) : "";
	req->uvm_policy = VGPU_UVM_COUNT;
	if (attrs[VGPU_A_SLICE_UVM_POLICY])
		req->uvm_policy = nla_get_u32(attrs[VGPU_A_SLICE_UVM_POLICY]);
	ret = vgpu_parse_gpus(attrs[VGPU_A_SLICE_GPUS], NULL, req->gpus,
			      &req->nr_gpus, extack);
	if (ret)
		goto out;
	if (!req->nr_gpus) {
		NL_SET_ERR_MSG_ATTR(extack, attrs[VGPU_A_SLICE_GPUS],
				    "at least one VGPU_A_GPU is needed");
		ret = -EINVAL;
		goto out;
	}
	ret = vgpu_nl_handover_parse(info, &h);
	if (ret)
		goto out;

	mutex_lock(&vgpu_slices_lock);
	s = vgpu_slice_new(req, extack);
	if (IS_ERR(s)) {
		ret = PTR_ERR(s);
		goto out_unlock;
	}
	vgpu_nl_set_common(s, info, &h);
	/* No reply, no slice: the caller would not know it has one. */
	ret = vgpu_reply_slice(info, s);
	if (ret)
		vgpu_slice_remove_locked(s);
out_unlock:
	mutex_unlock(&vgpu_slices_lock);
out:
	vgpu_nl_handover_drop(&h);
	kfree(req);
	return ret;
}

static struct vgpu_slice *vgpu_nl_slice(struct genl_info *info)
{
	struct vgpu_slice *s;

	if (GENL_REQ_ATTR_CHECK(info, VGPU_A_SLICE_ID))
		return ERR_PTR(-EINVAL);
	s = vgpu_slice_find_locked(nla_get_u32(info->attrs[VGPU_A_SLICE_ID]));
	if (!s) {
		NL_SET_ERR_MSG_ATTR(info->extack, info->attrs[VGPU_A_SLICE_ID],
				    "no such slice");
		return ERR_PTR(-ENOENT);
	}
	return s;
}

int vgpu_nl_set(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr **attrs = info->attrs;
	struct vgpu_nl_handover h = {};
	struct vgpu_gpu_req *gpus;
	struct vgpu_slice *s;
	u32 i, n = 0;
	int ret;

	gpus = kcalloc(VGPU_MAX_SLICE_GPUS, sizeof(*gpus), GFP_KERNEL);
	if (!gpus)
		return -ENOMEM;
	ret = vgpu_nl_handover_parse(info, &h);
	if (ret)
		goto out;

	mutex_lock(&vgpu_slices_lock);
	s = vgpu_nl_slice(info);
	if (IS_ERR(s)) {
		ret = PTR_ERR(s);
		goto out_unlock;
	}
	if (attrs[VGPU_A_SLICE_GPUS]) {
		ret = vgpu_parse_gpus(attrs[VGPU_A_SLICE_GPUS], s, gpus, &n,
				      info->extack);
		if (ret)
			goto out_unlock;
	}
	/*
	 * All checked: nothing below is refused.  A GPU named twice takes its
	 * nests in turn, each over what the one before it set.
	 */
	for (i = 0; i < n; i++) {
		const struct vgpu_gpu_req *r = &gpus[i];
		struct vgpu_gpu *g = &s->gpus[r->index];
		u32 pol = READ_ONCE(g->policy), bp = READ_ONCE(g->bp);
		u32 prio = READ_ONCE(g->priority);

		if (r->has & BIT(VGPU_GPU_A_MEM_LIMIT))
			WRITE_ONCE(g->limit, r->limit);
		if (!(r->has & VGPU_GPU_REQ_COMPUTE))
			continue;
		vgpu_gpu_req_compute(r, &pol, &bp, &prio);
		/* Fails only for a GPU that never joined a scheduler: none is registered. */
		ret = vgpu_sched_set_compute(g, pol, bp, prio);
		if (ret)
			goto out_unlock;
	}
	if (attrs[VGPU_A_SLICE_UVM_POLICY])
		WRITE_ONCE(s->uvm_policy, nla_get_u32(attrs[VGPU_A_SLICE_UVM_POLICY]));
	vgpu_nl_set_common(s, info, &h);
	ret = vgpu_reply_slice(info, s);
out_unlock:
	mutex_unlock(&vgpu_slices_lock);
out:
	vgpu_nl_handover_drop(&h);
	kfree(gpus);
	return ret;
}

int vgpu_nl_del(struct sk_buff *skb, struct genl_info *info)
{
	struct vgpu_slice *s;
	u32 flags = 0;
	int ret = 0;

	if (info->attrs[VGPU_A_SLICE_FLAGS])
		flags = nla_get_u32(info->attrs[VGPU_A_SLICE_FLAGS]);
	mutex_lock(&vgpu_slices_lock);
	s = vgpu_nl_slice(info);
	if (IS_ERR(s)) {
		ret = PTR_ERR(s);
		goto out;
	}
	if (atomic_read(&s->open_files) && !(flags & VGPU_SLICE_F_FORCE)) {
		NL_SET_ERR_MSG_ATTR(info->extack, info->attrs[VGPU_A_SLICE_ID],
				    "slice has open files (VGPU_SLICE_F_FORCE to destroy anyway)");
		ret = -EBUSY;
		goto out;
	}
	vgpu_slice_remove_locked(s);
out:
	mutex_unlock(&vgpu_slices_lock);
	return ret;
}

int vgpu_nl_get(struct sk_buff *skb, struct genl_info *info)
{
	struct vgpu_slice *s;
	int ret;

	mutex_lock(&vgpu_slices_lock);
	s = vgpu_nl_slice(info);
	ret = IS_ERR(s) ? PTR_ERR(s) : vgpu_reply_slice(info, s);
	mutex_unlock(&vgpu_slices_lock);
	return ret;
}

struct vgpu_dump_ctx {
	struct sk_buff *skb;
	struct netlink_callback *cb;
	int count;
};

static int vgpu_dump_one(struct vgpu_slice *s, void *arg)
{
	struct vgpu_dump_ctx *d = arg;
	int ret;

	ret = vgpu_fill_slice(d->skb, s, NETLINK_CB(d->cb->skb).portid,
			      d->cb->nlh->nlmsg_seq, NLM_F_MULTI,
			      VGPU_CMD_SLICE_GET, false);
	/* alone in its message and still too big: its pid list is cut */
	if (ret == -EMSGSIZE && !d->count)
		ret = vgpu_fill_slice(d->skb, s, NETLINK_CB(d->cb->skb).portid,
				      d->cb->nlh->nlmsg_seq, NLM_F_MULTI,
				      VGPU_CMD_SLICE_GET, true);
	if (ret)
		return ret;
	/* cb->args[0]: the next slice id to send. */
	d->cb->args[0] = (long)s->id + 1;
	d->count++;
	return 0;
}

int vgpu_nl_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct vgpu_dump_ctx d = { .skb = skb, .cb = cb };
	int ret;

	if (cb->args[0] > U32_MAX)
		return 0;
	ret = vgpu_slice_for_each_from((u32)cb->args[0], vgpu_dump_one, &d);
	if (ret && !d.count)
		return ret;
	if (!ret)
		cb->args[0] = (long)U32_MAX + 1;     /* done */
	return skb->len;
}

/* -------------------------------------------------------------- audit */

/*
 * VGPU_CMD_AUDIT_GET: a dump of one slice's record.  .start takes a
 * snapshot (the record keeps changing while the dump runs) into a
 * vgpu_audit_dump that cb->args[0] points to and .done frees; each message
 * carries as many entries as fit, the first one not sent is d->next.
 */
struct vgpu_audit_dump {
	struct vgpu_audit_entry *e;
	u32 n, next, id;
	u64 dropped;
	bool on;
};

int vgpu_nl_audit_start(struct netlink_callback *cb)
{
	const struct genl_dumpit_info *gi = genl_dumpit_info(cb);
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
	struct nlattr **attrs = gi->info.attrs;
#else
	struct nlattr **attrs = gi->attrs;
#endif
	struct vgpu_audit_dump *d;
	struct vgpu_slice *s;
	int n = 0;

	if (!attrs[VGPU_A_SLICE_ID]) {
		NL_SET_ERR_MSG(cb->extack, "VGPU_A_SLICE_ID missing");
		return -EINVAL;
	}
	d = kzalloc(sizeof(*d), GFP_KERNEL);
	if (!d)
		return -ENOMEM;
	d->id = nla_get_u32(attrs[VGPU_A_SLICE_ID]);
	mutex_lock(&vgpu_slices_lock);
	s = vgpu_slice_find_locked(d->id);
	if (s)
		n = vgpu_audit_snapshot(s, &d->e, &d->dropped, &d->on);
	mutex_unlock(&vgpu_slices_lock);
	if (!s || n < 0) {
		if (!s)
			NL_SET_ERR_MSG_ATTR(cb->extack, attrs[VGPU_A_SLICE_ID], "no such slice");
		kfree(d);
		return s ? n : -ENOENT;
	}
	d->n = n;
	cb->args[0] = (long)d;
	return 0;
}

int vgpu_nl_audit_done(struct netlink_callback *cb)
{
	struct vgpu_audit_dump *d = (void *)cb->args[0];

	if (d) {
		kvfree(d->e);
		kfree(d);
	}
	return 0;
}

static int vgpu_fill_audit_entry(struct sk_buff *skb, const struct vgpu_audit_entry *e)
{
	struct nlattr *n = nla_nest_start(skb, VGPU_A_AUDIT_ENTRY);

	if (!n)
		return -EMSGSIZE;
	if (nla_put_u8(skb, VGPU_AUDIT_A_KIND, e->kind) ||
	    nla_put_u32(skb, VGPU_AUDIT_A_NUMBER, e->number) ||
	    nla_put_u8(skb, VGPU_AUDIT_A_VERDICT, e->verdict) ||
	    nla_put_u64_64bit(skb, VGPU_AUDIT_A_CALLS, e->calls, VGPU_AUDIT_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_AUDIT_A_REFUSED, e->refused, VGPU_AUDIT_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_AUDIT_A_LET_THROUGH, e->let_through,
			      VGPU_AUDIT_A_PAD)) {
		nla_nest_cancel(skb, n);
		return -EMSGSIZE;
	}
	nla_nest_end(skb, n);
	return 0;
}

int vgpu_nl_audit_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct vgpu_audit_dump *d = (void *)cb->args[0];
	struct nlattr *list;
	void *hdr;
	u32 start = d->next;

	/* The last message (an empty record sends one) was sent: done. */
	if (d->next > d->n || (d->next == d->n && d->next))
		return 0;
	hdr = genlmsg_put(skb, NETLINK_CB(cb->skb).portid, cb->nlh->nlmsg_seq,
			  &vgpu_family, NLM_F_MULTI, VGPU_CMD_AUDIT_GET);
	if (!hdr)
		return -EMSGSIZE;
	if (nla_put_u32(skb, VGPU_A_SLICE_ID, d->id) ||
	    nla_put_u8(skb, VGPU_A_SLICE_AUDIT, d->on) ||
	    nla_put_u64_64bit(skb, VGPU_A_AUDIT_DROPPED, d->dropped, VGPU_A_PAD))
		goto cancel;
	list = nla_nest_start(skb, VGPU_A_AUDIT);
	if (!list)
		goto cancel;
	while (d->next < d->n && !vgpu_fill_audit_entry(skb, &d->e[d->next]))
		d->next++;
	if (d->next == start && d->n)
		goto cancel;    /* not even one entry fits: cannot happen */
	nla_nest_end(skb, list);
	genlmsg_end(skb, hdr);
	if (!d->n)
		d->next = 1;    /* the one empty message is out */
	return skb->len;
cancel:
	genlmsg_cancel(skb, hdr);
	return -EMSGSIZE;
}

/* ---------------------------------------------------------- scheduler */

static int vgpu_fill_sched(struct sk_buff *skb, const struct vgpu_sched_info *si,
			   u32 portid, u32 seq, int flags)
{
	void *hdr = genlmsg_put(skb, portid, seq, &vgpu_family, flags,
				VGPU_CMD_SCHED_GET);

	if (!hdr)
		return -EMSGSIZE;
	if (nla_put_u32(skb, VGPU_A_SCHED_REAL_MINOR, si->real_minor) ||
	    nla_put_u32(skb, VGPU_A_SCHED_PERIOD_US, si->period_us) ||
	    nla_put_u32(skb, VGPU_A_SCHED_LAYERS, si->layers) ||
	    nla_put_u64_64bit(skb, VGPU_A_SCHED_SWITCHES, si->switches, VGPU_A_PAD) ||
	    nla_put_u64_64bit(skb, VGPU_A_SCHED_CPU_NS, si->cpu_ns, VGPU_A_PAD)) {
		genlmsg_cancel(skb, hdr);
		return -EMSGSIZE;
	}
	genlmsg_end(skb, hdr);
	return 0;
}

static int vgpu_reply_sched(struct genl_info *info, const struct vgpu_sched_info *si)
{
	struct sk_buff *skb = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	int ret;

	if (!skb)
		return -ENOMEM;
	ret = vgpu_fill_sched(skb, si, info->snd_portid, info->snd_seq, 0);
	if (ret) {
		nlmsg_free(skb);
		return ret;
	}
	return genlmsg_reply(skb, info);
}

int vgpu_nl_sched_set(struct sk_buff *skb, struct genl_info *info)
{
	struct nlattr *pa = info->attrs[VGPU_A_SCHED_PERIOD_US];
	struct nlattr *la = info->attrs[VGPU_A_SCHED_LAYERS];
	struct vgpu_sched_info si;
	u32 minor, period, layers;
	int ret;

	if (GENL_REQ_ATTR_CHECK(info, VGPU_A_SCHED_REAL_MINOR))
		return -EINVAL;
	minor = nla_get_u32(info->attrs[VGPU_A_SCHED_REAL_MINOR]);
	if (pa)
		period = nla_get_u32(pa);
	if (la)
		layers = nla_get_u32(la);
	ret = vgpu_sched_set(minor, pa ? &period : NULL, la ? &layers : NULL, &si);
	if (ret == -ENODEV)
		NL_SET_ERR_MSG_ATTR(info->extack, info->attrs[VGPU_A_SCHED_REAL_MINOR],
				    "no GPU at that minor");
	if (ret)
		return ret;
	return vgpu_reply_sched(info, &si);
}

int vgpu_nl_sched_get(struct sk_buff *skb, struct genl_info *info)
{
	struct vgpu_sched_info si;
	int ret;

	if (GENL_REQ_ATTR_CHECK(info, VGPU_A_SCHED_REAL_MINOR))
		return -EINVAL;
	ret = vgpu_sched_get(nla_get_u32(info->attrs[VGPU_A_SCHED_REAL_MINOR]), &si);
	if (ret) {
		NL_SET_ERR_MSG_ATTR(info->extack, info->attrs[VGPU_A_SCHED_REAL_MINOR],
				    "no scheduler for that GPU");
		return ret;
	}
	return vgpu_reply_sched(info, &si);
}

int vgpu_nl_sched_dump(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct vgpu_sched_info si;

	/* cb->args[0]: the next minor to send. */
	while (cb->args[0] <= NV_MAX_GPU_MINOR &&
	       !vgpu_sched_get_next((u32)cb->args[0], &si)) {
		if (vgpu_fill_sched(skb, &si, NETLINK_CB(cb->skb).portid,
				    cb->nlh->nlmsg_seq, NLM_F_MULTI))
			break;
		cb->args[0] = (long)si.real_minor + 1;
	}
	return skb->len;
}

static struct genl_family vgpu_family __ro_after_init = {
	.name = VGPU_GENL_NAME,
	.version = VGPU_GENL_VERSION,
	.maxattr = VGPU_A_MAX,
	.policy = vgpu_policy,
	.netnsok = false,
	.module = THIS_MODULE,
	.ops = vgpu_ops,
	.n_ops = ARRAY_SIZE(vgpu_ops),
	.mcgrps = vgpu_mcgrps,
	.n_mcgrps = ARRAY_SIZE(vgpu_mcgrps),
};

/* ------------------------------------------------------------- events */

void vgpu_event(struct vgpu_slice *s, u32 type, u32 gpu, u64 size)
{
	struct sk_buff *skb;
	void *hdr;

	if (!genl_has_listeners(&vgpu_family, &init_net, VGPU_MCGRP_EVENTS_ID))
		return;
	skb = genlmsg_new(NLMSG_GOODSIZE, GFP_KERNEL);
	if (!skb)
		return;
	hdr = genlmsg_put(skb, 0, 0, &vgpu_family, 0, VGPU_CMD_EVENT);
	if (!hdr)
		goto err;
	if (nla_put_u32(skb, VGPU_A_SLICE_ID, s->id) ||
	    nla_put_u32(skb, VGPU_A_EVENT_TYPE, type) ||
	    nla_put_u32(skb, VGPU_A_EVENT_PID, task_tgid_nr(current)) ||
	    (gpu != U32_MAX && nla_put_u32(skb, VGPU_A_EVENT_GPU, gpu)) ||
	    (size && nla_put_u64_64bit(skb, VGPU_A_EVENT_SIZE, size, VGPU_A_PAD)))
		goto err;
	genlmsg_end(skb, hdr);
	genlmsg_multicast(&vgpu_family, skb, 0, VGPU_MCGRP_EVENTS_ID, GFP_KERNEL);
	return;
err:
	nlmsg_free(skb);
}

/* ------------------------------------------------------------- traces */

bool vgpu_trace_listening(void)
{
	return genl_has_listeners(&vgpu_family, &init_net, VGPU_MCGRP_TRACE_ID);
}

/* A VGPU_CMD_TRACE message with room for payload bytes of attributes. */
struct sk_buff *vgpu_trace_msg_new(size_t payload, void **hdr)
{
	struct sk_buff *skb = genlmsg_new(payload, GFP_KERNEL);

	if (!skb)
		return NULL;
	*hdr = genlmsg_put(skb, 0, 0, &vgpu_family, 0, VGPU_CMD_TRACE);
	if (!*hdr) {
		nlmsg_free(skb);
		return NULL;
	}
	return skb;
}

/* Sent to whoever listens; a listener that overran loses it (ENOBUFS). */
void vgpu_trace_msg_send(struct sk_buff *skb, void *hdr)
{
	genlmsg_end(skb, hdr);
	genlmsg_multicast(&vgpu_family, skb, 0, VGPU_MCGRP_TRACE_ID, GFP_KERNEL);
}

int vgpu_netlink_init(void)
{
	return genl_register_family(&vgpu_family);
}

void vgpu_netlink_exit(void)
{
	genl_unregister_family(&vgpu_family);
}
