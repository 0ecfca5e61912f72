// SPDX-License-Identifier: GPL-2.0
/*
 * audit.c - what a slice's processes ask of the driver, with the policy's
 * verdict, and the slice's exceptions to the policy (audit mode, the
 * allow-list).
 *
 * Every mediation path asks vgpu_audit_lets() where the release's table
 * refuses an item, or names one vgpu.ko has no handler for: a slice in
 * audit mode, or one whose allow-list names the item, gets it forwarded as
 * passthrough_unknown would (the call's parameters on a call page, at the
 * caller's privilege, embedded pointers the caller's own).  The answer and
 * the call are recorded.  In audit mode every item used is recorded
 * (vgpu_audit_use); out of it, only refusals.
 *
 * The record is a small hash table per slice under its own mutex: the
 * paths call in with no lock held, in process context.  It holds at most
 * VGPU_MAX_AUDIT_ENTRIES items; later new items only count as dropped.
 * Out of audit mode it records refusals and what the allow-list let
 * through.
 */
#include <linux/slab.h>
#include <linux/hashtable.h>
#include <linux/sort.h>
#include <linux/bsearch.h>

#include "vgpu.h"

struct vgpu_audit_item {
	struct hlist_node node;
	u64 key;                /* (kind << 32) | number */
	u8 verdict;             /* enum vgpu_audit_verdict */
	u64 calls, refused, let_through;
};

struct vgpu_audit {
	struct mutex lock;
	bool on;                /* audit mode; READ_ONCE outside the lock */
	u32 n;
	u64 dropped;
	DECLARE_HASHTABLE(items, 8);
	u64 *allow;             /* sorted keys; NULL: none */
	u32 nr_allow;
};

/* The uapi's numbering of kinds and verdicts is the tables' own. */
static_assert((int)VGPU_AUDIT_ESCAPE == (int)NVREL_ESC &&
	      (int)VGPU_AUDIT_CLASS == (int)NVREL_CLS &&
	      (int)VGPU_AUDIT_CONTROL == (int)NVREL_CTL &&
	      (int)VGPU_AUDIT_UVM == (int)NVREL_UVM);
static_assert((int)VGPU_AUDIT_FORWARD == (int)NVREL_FORWARD &&
	      (int)VGPU_AUDIT_REWRITE == (int)NVREL_REWRITE &&
	      (int)VGPU_AUDIT_VIRTUALISE == (int)NVREL_VIRTUALISE &&
	      (int)VGPU_AUDIT_REFUSE == (int)NVREL_REFUSE);

static inline u64 vgpu_audit_key(enum nvrel_kind k, u32 value)
{
	return ((u64)k << 32) | value;
}

int vgpu_audit_init(struct vgpu_slice *s)
{
	s->audit = kzalloc(sizeof(*s->audit), GFP_KERNEL);
	if (!s->audit)
		return -ENOMEM;
	mutex_init(&s->audit->lock);
	hash_init(s->audit->items);
	return 0;
}

void vgpu_audit_free(struct vgpu_slice *s)
{
	struct vgpu_audit *a = s->audit;
	struct vgpu_audit_item *it;
	struct hlist_node *tmp;
	int b;

	if (!a)
		return;
	hash_for_each_safe(a->items, b, tmp, it, node)
		kfree(it);
	kvfree(a->allow);
	kfree(a);
	s->audit = NULL;
}

bool vgpu_audit_on(struct vgpu_slice *s)
{
	return READ_ONCE(s->audit->on);
}

void vgpu_audit_set(struct vgpu_slice *s, bool on)
{
	WRITE_ONCE(s->audit->on, on);
}

static int vgpu_u64_cmp(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/**
 * vgpu_audit_set_allow - replace a slice's allow-list
 * @keys: (kind << 32) | number, any order, duplicates allowed; taken over
 *	(kvfree'd by the slice), may be NULL with n 0 (an empty list)
 */
void vgpu_audit_set_allow(struct vgpu_slice *s, u64 *keys, u32 n)
{
	struct vgpu_audit *a = s->audit;
	u64 *old;

	if (n) {
		u32 i, out = 1;

		sort(keys, n, sizeof(*keys), vgpu_u64_cmp, NULL);
		for (i = 1; i < n; i++)
			if (keys[i] != keys[out - 1])
				keys[out++] = keys[i];
		n = out;
	}
	mutex_lock(&a->lock);
	old = a->allow;
	a->allow = n ? keys : NULL;
	a->nr_allow = n;
	mutex_unlock(&a->lock);
	kvfree(old);
	if (!n)
		kvfree(keys);
}

u32 vgpu_audit_nr_allow(struct vgpu_slice *s)
{
	return READ_ONCE(s->audit->nr_allow);
}

/* Under a->lock: the item of key, made if there is room. */
static struct vgpu_audit_item *vgpu_audit_item(struct vgpu_audit *a, u64 key,
					       u8 verdict)
{
	struct vgpu_audit_item *it;

	hash_for_each_possible(a->items, it, node, key)
		if (it->key == key)
			return it;
	if (a->n >= VGPU_MAX_AUDIT_ENTRIES)
		return NULL;
	it = kzalloc(sizeof(*it), GFP_KERNEL);
	if (!it)
		return NULL;
	it->key = key;
	it->verdict = verdict;
	hash_add(a->items, &it->node, key);
	a->n++;
	return it;
}

static void vgpu_audit_record(struct vgpu_audit *a, u64 key, u8 verdict,
			      bool refused, bool let)
{
	struct vgpu_audit_item *it;

	lockdep_assert_held(&a->lock);
	it = vgpu_audit_item(a, key, verdict);
	if (!it) {
		a->dropped++;
		return;
	}
	it->calls++;
	it->refused += refused;
	it->let_through += let;
}

/* NV50_THIRD_PARTY_P2P (class/cl503c.h) */
#define VGPU_CLASS_THIRD_PARTY_P2P      0x503c

/**
 * vgpu_never_forwarded - an item no audit mode, allow-list or
 * passthrough_unknown forwards
 *
 * Audit mode exists to try a trusted workload and learn what it uses; what
 * it forwards costs the slice its guarantees for as long as it runs.  These
 * two would cost more, past the slice's own deletion and into other
 * slices (docs/mediator.md, "GPUDirect RDMA: memory an adapter pins"):
 * the dma-buf export dups any client's handles, another slice's included,
 * into RM's internal client, whose FB then outlives the owner's free, and
 * so the charge vgpu.ko returns at it, until the dma-buf's last close in
 * any process (nv_dma_buf_export, rm_dma_buf_dup_mem_handle); a
 * third-party P2P registration is what a persistent pin finds the memory
 * by, and that pin dups it likewise until ib_core releases it
 * (_createOrReuseVidmemInfoPersistent, p2p.c).
 */
bool vgpu_never_forwarded(enum nvrel_kind k, u32 value)
{
	return (k == NVREL_ESC && value == NV_ESC_EXPORT_TO_DMABUF_FD) ||
	       (k == NVREL_CLS && value == VGPU_CLASS_THIRD_PARTY_P2P);
}

/**
 * vgpu_audit_lets - an item the slice's policy refuses (verdict
 * VGPU_AUDIT_REFUSE) or that vgpu.ko does not implement
 * (VGPU_AUDIT_NOT_IMPLEMENTED): does this slice forward it anyway?
 *
 * Records the call either way.  Never true for vgpu_never_forwarded's
 * items.  Return: true to forward it.
 */
bool vgpu_audit_lets(struct vgpu_slice *s, enum nvrel_kind k, u32 value,
		     enum vgpu_audit_verdict verdict)
{
	struct vgpu_audit *a = s->audit;
	u64 key = vgpu_audit_key(k, value);
	bool on, let;

	mutex_lock(&a->lock);
	on = READ_ONCE(a->on);
	let = on || (a->allow && bsearch(&key, a->allow, a->nr_allow, sizeof(key),
					 vgpu_u64_cmp));
	if (let && vgpu_never_forwarded(k, value)) {
		let = false;
		pr_info_ratelimited("slice %u: %s %#x refused even in %s: its memory would outlive the slice's charge\n",
				    s->id, k == NVREL_ESC ? "escape" : "class", value,
				    on ? "audit mode" : "an allow-list");
	}
	vgpu_audit_record(a, key, verdict, !let, let);
	mutex_unlock(&a->lock);
	if (let)
		pr_info_ratelimited("slice %u: %s %#x forwarded (%s)\n", s->id,
				    k == NVREL_ESC ? "escape" : k == NVREL_CLS ? "class" :
				    k == NVREL_CTL ? "control" : "UVM command", value,
				    on ? "audit mode" : "allow-list");
	return let;
}

/* In audit mode, an item the policy lets through, as it goes through. */
void vgpu_audit_use(struct vgpu_slice *s, enum nvrel_kind k, u32 value,
		    const struct nvrel_item *item)
{
	struct vgpu_audit *a = s->audit;

	if (!READ_ONCE(a->on))
		return;
	mutex_lock(&a->lock);
	vgpu_audit_record(a, vgpu_audit_key(k, value), item->verdict, false, false);
	mutex_unlock(&a->lock);
}

/**
 * vgpu_audit_snapshot - a copy of the record, for a netlink dump
 * @out: kvfree() it; NULL when empty
 * Return: the number of entries copied, or -ENOMEM.
 */
int vgpu_audit_snapshot(struct vgpu_slice *s, struct vgpu_audit_entry **out,
			u64 *dropped, bool *on)
{
	struct vgpu_audit *a = s->audit;
	struct vgpu_audit_entry *e;
	struct vgpu_audit_item *it;
	int n = 0;
	int b;

	*out = NULL;
	mutex_lock(&a->lock);
	*dropped = a->dropped;
	*on = a->on;
	if (a->n) {
		e = kvmalloc_array(a->n, sizeof(*e), GFP_KERNEL);
		if (!e)
			n = -ENOMEM;
		if (e) {
			hash_for_each(a->items, b, it, node) {
				e[n].kind = it->key >> 32;
				e[n].number = (u32)it->key;
				e[n].verdict = it->verdict;
				e[n].calls = it->calls;
				e[n].refused = it->refused;
				e[n].let_through = it->let_through;
				n++;
			}
			*out = e;
		}
	}
	mutex_unlock(&a->lock);
	return n;
}
