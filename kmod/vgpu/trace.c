// SPDX-License-Identifier: GPL-2.0
/*
 * trace.c - a traced slice's opens, closes, ioctls and mmaps, one message
 * each on the "trace" multicast group (docs/trace.md, uapi VGPU_CMD_TRACE).
 *
 * The trace decides nothing and changes nothing: it copies the caller's
 * parameters itself, before the call is mediated and after it returned,
 * so the record is what the caller presented and got back.  A sibling
 * thread can change that memory between the trace's copy and vgpu.ko's:
 * the record is a diagnostic, not evidence of what vgpu.ko checked.  Every
 * copy is bounded by VGPU_TRACE_MAX_PARAMS, and a record's copies together
 * by VGPU_TRACE_MAX_BLOBS (vgpu_trace_take), which the message is sized for.
 *
 * Cost when off: vgpu_tracing() is one READ_ONCE of the slice's flag, and
 * a test of the group's listeners when the flag is on.  Called in process
 * context with no lock held, except vgpu_trace_mmap (mmap_lock held: it
 * copies nothing from user memory).
 */
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/file.h>
#include <linux/mm.h>
#include <linux/ktime.h>
#include <net/genetlink.h>

#include "vgpu.h"

static atomic64_t vgpu_next_file_id = ATOMIC64_INIT(0);

u64 vgpu_trace_file_id(void)
{
	return atomic64_inc_return(&vgpu_next_file_id);
}

bool vgpu_tracing(struct vgpu_slice *s)
{
	return READ_ONCE(s->trace) && vgpu_trace_listening();
}

/*
 * Take up to size bytes for a blob from the record's budget: the same
 * length is copied before and after the call, so both are reserved.
 */
static void vgpu_trace_take(struct vgpu_trace_call *tc, struct vgpu_trace_blob *b,
			    u64 uptr, u64 size)
{
	u32 n = min3(size, (u64)VGPU_TRACE_MAX_PARAMS, (u64)tc->left / 2);

	if (n < size)
		tc->flags |= VGPU_TRACE_F_TRUNCATED;
	tc->left -= 2 * n;
	b->uptr = uptr;
	b->len = uptr ? n : 0;
}

/* A copy of the blob's bytes of user memory now, or NULL. */
static void *vgpu_trace_copy(const struct vgpu_trace_blob *b, u32 *flags)
{
	void *buf;

	if (!b->len)
		return NULL;
	buf = kmalloc(b->len, GFP_KERNEL);
	if (!buf)
		return NULL;
	if (copy_from_user(buf, u64_to_user_ptr(b->uptr), b->len)) {
		kfree(buf);
		*flags |= VGPU_TRACE_F_UNREADABLE;
		return NULL;
	}
	return buf;
}

/*
 * The descriptor a call's parameters name, by escape or UVM command: where
 * it lies in the top-level parameters, or -1.  These are the fields
 * vgpu.ko translates (fdxlate.c, uvm.c) plus MM_INITIALIZE's uvmFd.
 */
static s32 vgpu_trace_fd_offset(const struct vgpu_file *vf, u32 nr, u32 size)
{
	if (vf->kind == VGPU_KIND_UVM) {
		if (nr == UVM_MM_INITIALIZE)
			return offsetof(UVM_MM_INITIALIZE_PARAMS, uvmFd);
		return vgpu_uvm_fd_offset(nr, size);
	}
	switch (nr) {
	case NV_ESC_REGISTER_FD:
		return size == sizeof(nv_ioctl_register_fd_t) ?
			offsetof(nv_ioctl_register_fd_t, ctl_fd) : -1;
	case NV_ESC_RM_ALLOC_MEMORY:
		return size == sizeof(nv_ioctl_nvos02_parameters_with_fd) ?
			offsetof(nv_ioctl_nvos02_parameters_with_fd, fd) : -1;
	case NV_ESC_RM_MAP_MEMORY:
		return size == sizeof(nv_ioctl_nvos33_parameters_with_fd) ?
			offsetof(nv_ioctl_nvos33_parameters_with_fd, fd) : -1;
	}
	return -1;
}

/* The number of the slice's file that descriptor fd names now, or 0. */
static u64 vgpu_trace_fd_file(const struct vgpu_file *vf, int fd)
{
	struct file *f = fget(fd);
	u64 id = 0;

	if (!f)
		return 0;
	if (vgpu_is_vgpu_file(f)) {
		struct vgpu_file *o = f->private_data;

		if (o->slice == vf->slice)
			id = o->id;
	}
	fput(f);
	return id;
}

/* What the policy judged: the class of an allocation, a control's command. */
static void vgpu_trace_item(const struct vgpu_file *vf, struct vgpu_trace_call *tc)
{
	const struct nvrel_item *it;
	const void *p = tc->args.in;

	tc->item_kind = NVREL_ESC;
	tc->item = tc->nr;
	if (vf->kind == VGPU_KIND_UVM) {
		tc->item_kind = NVREL_UVM;
	} else if (p && tc->args.len == tc->size) {
		switch (tc->nr) {
		case NV_ESC_RM_CONTROL:
			if (tc->size == sizeof(NVOS54_PARAMETERS)) {
				tc->item_kind = NVREL_CTL;
				tc->item = ((const NVOS54_PARAMETERS *)p)->cmd;
			}
			break;
		case NV_ESC_RM_ALLOC:
			if (tc->size == sizeof(NVOS21_PARAMETERS) ||
			    tc->size == sizeof(NVOS64_PARAMETERS)) {
				tc->item_kind = NVREL_CLS;
				tc->item = ((const NVOS21_PARAMETERS *)p)->hClass;
			}
			break;
		case NV_ESC_RM_ALLOC_MEMORY:
			if (tc->size == sizeof(nv_ioctl_nvos02_parameters_with_fd)) {
				tc->item_kind = NVREL_CLS;
				tc->item = ((const NVOS02_PARAMETERS *)p)->hClass;
			}
			break;
		}
	}
	it = vgpu_verdict(tc->item_kind, tc->item);
	tc->verdict = it ? it->verdict : NVREL_REFUSE;
}

/*
 * RM_CONTROL's params and RM_ALLOC's pAllocParms, and the lists a
 * control's params point to (the release's table: vgpu_list_extent).
 */
static void vgpu_trace_nested(struct vgpu_trace_call *tc)
{
	const struct nvrel_item *it;
	struct vgpu_trace_blob *l;
	u64 uptr = 0, bytes;
	u32 i, off;

	BUILD_BUG_ON(offsetof(NVOS21_PARAMETERS, pAllocParms) !=
		     offsetof(NVOS64_PARAMETERS, pAllocParms));
	if (!tc->args.in || tc->args.len != tc->size)
		return;
	if (tc->item_kind == NVREL_CTL) {
		const NVOS54_PARAMETERS *p = tc->args.in;

		uptr = p->params;
		tc->psize = p->paramsSize;
	} else if (tc->item_kind == NVREL_CLS && tc->nr == NV_ESC_RM_ALLOC) {
		const NVOS21_PARAMETERS *p = tc->args.in;

		uptr = p->pAllocParms;
		tc->psize = uptr ? vgpu_rel_size(NVREL_CLS, p->hClass) : 0;
	}
	if (!tc->psize)
		return;
	vgpu_trace_take(tc, &tc->params, uptr, tc->psize);
	tc->params.in = vgpu_trace_copy(&tc->params, &tc->flags);
	it = vgpu_verdict(tc->item_kind, tc->item);
	if (tc->item_kind != NVREL_CTL || !tc->params.in || tc->params.len != tc->psize ||
	    !it || !(it->flags & NVREL_F_LISTS) || !vgpu_rel->ptrs)
		return;
	for (i = 0; i < it->nptrs && tc->nlists < VGPU_TRACE_MAX_LISTS; i++) {
		if (vgpu_list_extent(it, i, tc->params.in, tc->params.len, &off,
				     &uptr, &bytes) != NV_OK)
			continue;
		l = &tc->lists[tc->nlists];
		tc->list_off[tc->nlists++] = off;
		vgpu_trace_take(tc, l, uptr, bytes);
		l->uptr = uptr;         /* a NULL list's pointer is recorded too */
		l->in = vgpu_trace_copy(l, &tc->flags);
	}
}

/**
 * vgpu_trace_ioctl_begin - copy what the caller presents
 *
 * Called only when vgpu_tracing(); tc is the caller's, freed by
 * vgpu_trace_ioctl_end() whatever happens in between.
 */
void vgpu_trace_ioctl_begin(struct vgpu_file *vf, unsigned int cmd,
			    unsigned long arg, struct vgpu_trace_call *tc)
{
	void __user *uptr = (void __user *)arg;
	s32 off;

	memset(tc, 0, sizeof(*tc));
	tc->t0 = ktime_get_ns();
	tc->left = VGPU_TRACE_MAX_BLOBS;
	if (vf->kind == VGPU_KIND_UVM) {
		tc->nr = cmd;
		tc->size = vgpu_rel_size(NVREL_UVM, cmd);
	} else {
		if (_IOC_NR(cmd) == NV_ESC_IOCTL_XFER_CMD)
			tc->flags |= VGPU_TRACE_F_XFER;
		if (nv_ioctl_unwrap(cmd, arg, &tc->nr, &tc->size, &uptr)) {
			uptr = NULL;
			tc->flags |= VGPU_TRACE_F_UNREADABLE;
		}
	}
	vgpu_trace_take(tc, &tc->args, (u64)(uintptr_t)uptr, tc->size);
	tc->args.in = vgpu_trace_copy(&tc->args, &tc->flags);
	vgpu_trace_item(vf, tc);
	vgpu_trace_nested(tc);
	off = vgpu_trace_fd_offset(vf, tc->nr, tc->size);
	if (tc->args.in && off >= 0 && off + sizeof(int) <= tc->args.len) {
		tc->fd_off = off;
		tc->fd_file = vgpu_trace_fd_file(vf, *(int *)(tc->args.in + off));
	}
}

static int vgpu_trace_put_common(struct sk_buff *skb, struct vgpu_file *vf,
				 u32 seq_op, u64 t0, long ret, u32 flags)
{
	u64 now = ktime_get_ns();

	return nla_put_u64_64bit(skb, VGPU_TRACE_A_SEQ,
				 atomic64_inc_return(&vf->slice->trace_seq),
				 VGPU_TRACE_A_PAD) ||
	       nla_put_u64_64bit(skb, VGPU_TRACE_A_TIME_NS, t0 ? t0 : now,
				 VGPU_TRACE_A_PAD) ||
	       nla_put_u64_64bit(skb, VGPU_TRACE_A_DURATION_NS, t0 ? now - t0 : 0,
				 VGPU_TRACE_A_PAD) ||
	       nla_put_u32(skb, VGPU_TRACE_A_PID, task_tgid_nr(current)) ||
	       nla_put_u32(skb, VGPU_TRACE_A_TID, task_pid_nr(current)) ||
	       nla_put_u64_64bit(skb, VGPU_TRACE_A_FILE, vf->id, VGPU_TRACE_A_PAD) ||
	       nla_put_u32(skb, VGPU_TRACE_A_NODE, vgpu_file_node(vf)) ||
	       nla_put_u8(skb, VGPU_TRACE_A_OP, seq_op) ||
	       nla_put_u32(skb, VGPU_TRACE_A_RET, (u32)(s32)ret) ||
	       nla_put_u32(skb, VGPU_TRACE_A_FLAGS, flags);
}

/* Room for the common attributes and the fixed-size ones of any op. */
#define VGPU_TRACE_FIXED_SIZE 512

/*
 * A record's message with room for room more bytes, its common attributes
 * put and the VGPU_A_TRACE nest open; NULL when it could not be made (the
 * record is lost, and its number with it: the listener sees the gap).
 */
static struct sk_buff *vgpu_trace_start(struct vgpu_file *vf, size_t room, u32 op,
					u64 t0, long ret, u32 flags, void **hdr,
					struct nlattr **nest)
{
	struct sk_buff *skb = vgpu_trace_msg_new(VGPU_TRACE_FIXED_SIZE + room, hdr);

	if (!skb)
		return NULL;
	*nest = NULL;
	if (!nla_put_u32(skb, VGPU_A_SLICE_ID, vf->slice->id))
		*nest = nla_nest_start(skb, VGPU_A_TRACE);
	if (!*nest || vgpu_trace_put_common(skb, vf, op, t0, ret, flags)) {
		nlmsg_free(skb);
		return NULL;
	}
	return skb;
}

/* Sent, unless putting its attributes failed: the room reckoned was short. */
static void vgpu_trace_finish(struct sk_buff *skb, void *hdr, struct nlattr *nest,
			      bool failed)
{
	if (WARN_ON_ONCE(failed)) {     /* vgpu.ko's bug, not the caller's doing */
		nlmsg_free(skb);
		return;
	}
	nla_nest_end(skb, nest);
	vgpu_trace_msg_send(skb, hdr);
}

static int vgpu_trace_put_blob(struct sk_buff *skb, int type, u32 len, const void *buf)
{
	return buf ? nla_put(skb, type, len, buf) : 0;
}

/* The lists: before (their in) and after (out[i]). */
static int vgpu_trace_put_lists(struct sk_buff *skb, const struct vgpu_trace_call *tc,
				void *const *out)
{
	struct nlattr *l;
	u32 i;

	for (i = 0; i < tc->nlists; i++) {
		l = nla_nest_start(skb, VGPU_TRACE_A_LIST);
		if (!l ||
		    nla_put_u32(skb, VGPU_TRACE_LIST_A_OFFSET, tc->list_off[i]) ||
		    nla_put_u64_64bit(skb, VGPU_TRACE_LIST_A_PTR, tc->lists[i].uptr,
				      VGPU_TRACE_LIST_A_PAD) ||
		    vgpu_trace_put_blob(skb, VGPU_TRACE_LIST_A_IN, tc->lists[i].len,
					tc->lists[i].in) ||
		    vgpu_trace_put_blob(skb, VGPU_TRACE_LIST_A_OUT, tc->lists[i].len, out[i]))
			return -EMSGSIZE;
		nla_nest_end(skb, l);
	}
	return 0;
}

/* An ioctl's own attributes: out, pout and lout are the copies after it. */
static int vgpu_trace_put_ioctl(struct sk_buff *skb, const struct vgpu_trace_call *tc,
				const void *out, const void *pout, void *const *lout)
{
	return nla_put_u32(skb, VGPU_TRACE_A_NR, tc->nr) ||
	       nla_put_u32(skb, VGPU_TRACE_A_SIZE, tc->size) ||
	       nla_put_u8(skb, VGPU_TRACE_A_ITEM_KIND, tc->item_kind) ||
	       nla_put_u32(skb, VGPU_TRACE_A_ITEM, tc->item) ||
	       nla_put_u8(skb, VGPU_TRACE_A_VERDICT, tc->verdict) ||
	       vgpu_trace_put_blob(skb, VGPU_TRACE_A_ARGS_IN, tc->args.len, tc->args.in) ||
	       vgpu_trace_put_blob(skb, VGPU_TRACE_A_ARGS_OUT, tc->args.len, out) ||
	       (tc->psize && nla_put_u64_64bit(skb, VGPU_TRACE_A_PARAMS_PTR,
					       tc->params.uptr, VGPU_TRACE_A_PAD)) ||
	       vgpu_trace_put_blob(skb, VGPU_TRACE_A_PARAMS_IN, tc->params.len,
				   tc->params.in) ||
	       vgpu_trace_put_blob(skb, VGPU_TRACE_A_PARAMS_OUT, tc->params.len, pout) ||
	       vgpu_trace_put_lists(skb, tc, lout) ||
	       (tc->fd_file && (nla_put_u32(skb, VGPU_TRACE_A_FD_OFFSET, tc->fd_off) ||
				nla_put_u64_64bit(skb, VGPU_TRACE_A_FD_FILE, tc->fd_file,
						  VGPU_TRACE_A_PAD)));
}

/* Room for a list's attributes other than its two blobs. */
#define VGPU_TRACE_LIST_SIZE 64

/**
 * vgpu_trace_ioctl_end - copy what the caller got back, and send the record
 */
void vgpu_trace_ioctl_end(struct vgpu_file *vf, struct vgpu_trace_call *tc,
			  long ret)
{
	void *lout[VGPU_TRACE_MAX_LISTS] = {};
	u32 flags = tc->flags, i;
	struct sk_buff *skb;
	struct nlattr *nest;
	void *out, *pout;
	void *hdr;

	out = vgpu_trace_copy(&tc->args, &flags);
	pout = vgpu_trace_copy(&tc->params, &flags);
	for (i = 0; i < tc->nlists; i++)
		lout[i] = vgpu_trace_copy(&tc->lists[i], &flags);
	/*
	 * The blobs take what was taken from the budget (each one's attribute
	 * header and padding come on top, six plus two per list at most).
	 */
	skb = vgpu_trace_start(vf, (VGPU_TRACE_MAX_BLOBS - tc->left) +
			       (6 + 2 * VGPU_TRACE_MAX_LISTS) * nla_total_size(0) +
			       tc->nlists * VGPU_TRACE_LIST_SIZE,
			       VGPU_TRACE_IOCTL, tc->t0, ret, flags, &hdr, &nest);
	if (skb)
		vgpu_trace_finish(skb, hdr, nest,
				  vgpu_trace_put_ioctl(skb, tc, out, pout, lout));
	for (i = 0; i < tc->nlists; i++) {
		kfree(lout[i]);
		kfree(tc->lists[i].in);
	}
	kfree(pout);
	kfree(out);
	kfree(tc->params.in);
	kfree(tc->args.in);
}

/* An open (vf just made, ret 0) or a close. */
void vgpu_trace_file_op(struct vgpu_file *vf, enum vgpu_trace_op op, u32 open_flags)
{
	struct sk_buff *skb;
	struct nlattr *nest;
	void *hdr;

	skb = vgpu_trace_start(vf, 0, op, 0, 0, 0, &hdr, &nest);
	if (skb)
		vgpu_trace_finish(skb, hdr, nest, op == VGPU_TRACE_OPEN &&
				  nla_put_u32(skb, VGPU_TRACE_A_OPEN_FLAGS, open_flags));
}

/*
 * An mmap of one of the slice's files: the area as the caller asked for it
 * (vgpu_mmap() may move vm_pgoff to the real file's), and its answer.
 */
void vgpu_trace_mmap(struct vgpu_file *vf, unsigned long start, unsigned long len,
		     unsigned long pgoff, unsigned long vm_flags, int ret)
{
	u32 prot = (vm_flags & VM_READ ? VGPU_TRACE_PROT_READ : 0) |
		   (vm_flags & VM_WRITE ? VGPU_TRACE_PROT_WRITE : 0) |
		   (vm_flags & VM_SHARED ? VGPU_TRACE_PROT_SHARED : 0);
	struct sk_buff *skb;
	struct nlattr *nest;
	void *hdr;

	skb = vgpu_trace_start(vf, 0, VGPU_TRACE_MMAP, 0, ret, 0, &hdr, &nest);
	if (skb)
		vgpu_trace_finish(skb, hdr, nest,
			nla_put_u64_64bit(skb, VGPU_TRACE_A_ADDR, start, VGPU_TRACE_A_PAD) ||
			nla_put_u64_64bit(skb, VGPU_TRACE_A_LENGTH, len, VGPU_TRACE_A_PAD) ||
			nla_put_u64_64bit(skb, VGPU_TRACE_A_OFFSET, (u64)pgoff << PAGE_SHIFT,
					  VGPU_TRACE_A_PAD) ||
			nla_put_u32(skb, VGPU_TRACE_A_PROT, prot));
}
