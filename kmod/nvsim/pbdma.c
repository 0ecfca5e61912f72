// SPDX-License-Identifier: GPL-2.0
/*
 * pbdma.c - channels whose GPFIFO ring and USERD live in client memory.
 *
 * This is the real driver's only kind of channel (fifo.c,
 * nvsim_channel_pb_init): USERD is 512 bytes of a memory object
 * (hUserdMemory[0] + userdOffset[0]), the ring gpFifoEntries 8-byte entries
 * at the GPU VA gpFifoOffset, and each entry points at a pushbuffer segment
 * (GPU VA and length in dwords) of methods.  What runs them here, after the
 * host class's and the copy class's headers (595.45.04
 * src/common/sdk/nvidia/inc/class/clc56f.h, clc7b5.h):
 *
 *  - GPU virtual addresses are those UVM mapped (UVM_MAP_EXTERNAL_ALLOCATION,
 *    uvm.c) in the VA space the file registered for the GPU
 *    (UVM_REGISTER_GPU_VASPACE), matched against the channel's VA space
 *    (its context share's hVASpace): a GPU VA space owned by UVM, as the
 *    real driver's channels of CUDA and tinygrad use.  An address with no
 *    mapping is an MMU fault.  The bytes are the memory's store (store.c)
 *    or an OS descriptor's pinned pages: the same bytes the CPU mapping of
 *    the memory shows.
 *  - A channel is looked at when a doorbell rings (any valid token: the
 *    engine's one-word-per-tick poll would lose the other rings of the
 *    tick) and, while one waits on a semaphore, about every millisecond:
 *    the timer (engine.c) queues the GPU's pb_work, which runs every such
 *    channel whose TSG and channel are scheduled and whose GP_PUT (USERD
 *    0x8C) differs from GP_GET, entry by entry, and publishes GP_GET
 *    (USERD 0x88) after each.  The work runs in process context under
 *    nvsim.lock (pages are made there, GFP_KERNEL), never in the timer.
 *  - GPFIFO entries (NVC56F_GP_ENTRY0/1): GET (bits 2..39), LENGTH in
 *    dwords (entry1 30:10; 0: a control entry, done at once); LEVEL and SYNC
 *    are not modelled (no CALL/RETURN; entries run in order anyway).
 *  - Method headers (NVC56F_DMA_*): incrementing, non-incrementing,
 *    increment-once, immediate data, END_PB_SEGMENT; the subdevice-mask
 *    ops are no-ops (one subdevice); a header whose data runs past the
 *    segment, or a reserved opcode, is a channel error.
 *  - Host methods (below 0x100, any subchannel): SET_OBJECT binds the
 *    subchannel to the chip's compute or copy class (others: error);
 *    SEM_ADDR_LO/HI, SEM_PAYLOAD_LO/HI and SEM_EXECUTE: release (32 or 64
 *    bits, with the PTIMER timestamp at +8 when asked) and acquire
 *    (ACQUIRE, ACQ_STRICT_GEQ, ACQ_CIRC_GEQ, ACQ_AND, ACQ_NOR; not yet
 *    satisfied: the channel waits there and resumes at that method);
 *    REDUCTION is an error (not simulated); other host methods (NOP,
 *    NON_STALL_INTERRUPT, MEM_OP_*, WFI, ...) are no-ops.
 *  - The copy class (AMPERE_DMA_COPY_B, HOPPER_DMA_COPY_A): OFFSET_IN/OUT,
 *    LINE_LENGTH_IN, SET_SEMAPHORE_A/B/PAYLOAD/PAYLOAD_UPPER; LAUNCH_DMA
 *    copies LINE_LENGTH_IN bytes between virtual pitch addresses (1-D) and
 *    then releases the semaphore (one-word: the payload; four-word: the
 *    payload, then the timestamp at +8; payload size one or two words).
 *    With REMAP_ENABLE and constant components (SET_REMAP_CONST_A/B,
 *    SET_REMAP_COMPONENTS) it is a memset of LINE_LENGTH_IN elements.
 *    Block-linear layouts, multi-line (2-D) copies, remapping from the
 *    source, physical addresses and semaphore reductions are errors (not
 *    simulated).
 *  - The compute class: every method is accepted and ignored except those
 *    that make the GR engine do work (SEND_PCAS_A and the signaling PCAS
 *    launches): kernels are out of scope, an error.  Its inline-to-memory
 *    (LINE_LENGTH_IN..PITCH_OUT, LAUNCH_DMA, LOAD_INLINE_DATA) writes the
 *    data words to pitch memory; its report semaphore (SET_REPORT_
 *    SEMAPHORE_A..D) releases when reached, one or four words.
 *  - An error (MMU fault, bad method) stops the channel for good and
 *    counts in the TSG's errors (debugfs), where the hardware would raise
 *    a robust-channel error and RM would write the error notifier (not
 *    modelled).
 *
 * No timing: an entry takes the work's time, not a modelled duration, and
 * is not charged as busy time (the timer engine's busy accounting covers
 * the duration-entry channels only).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitfield.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/ktime.h>
#include <linux/sched.h>
#include <asm/unaligned.h>

#include "nvsim.h"

/* clc56f.h: host methods, GPFIFO entries, method headers. */
#define HOST_SET_OBJECT         0x0000
#define HOST_ILLEGAL            0x0004
#define HOST_SEM_ADDR_LO        0x005c
#define HOST_SEM_ADDR_HI        0x0060
#define HOST_SEM_PAYLOAD_LO     0x0064
#define HOST_SEM_PAYLOAD_HI     0x0068
#define HOST_SEM_EXECUTE        0x006c
#define HOST_METHODS_END        0x0100
#define SEM_OP_ACQUIRE          0
#define SEM_OP_RELEASE          1
#define SEM_OP_ACQ_STRICT_GEQ   2
#define SEM_OP_ACQ_CIRC_GEQ     3
#define SEM_OP_ACQ_AND          4
#define SEM_OP_ACQ_NOR          5
#define SEM_PAYLOAD_64BIT       BIT(24)
#define SEM_RELEASE_TIMESTAMP   BIT(25)
#define DMA_SEC_OP_GRP0_USE_TERT        0
#define DMA_SEC_OP_INC_METHOD           1
#define DMA_SEC_OP_NON_INC_METHOD       3
#define DMA_SEC_OP_IMMD_DATA_METHOD     4
#define DMA_SEC_OP_ONE_INC              5
#define DMA_SEC_OP_END_PB_SEGMENT       7

/* clc7b5.h: the copy class. */
#define CE_SET_SEMAPHORE_A      0x0240
#define CE_SET_SEMAPHORE_B      0x0244
#define CE_SET_SEMAPHORE_PAYLOAD 0x0248
#define CE_SET_SEMAPHORE_PAYLOAD_UPPER 0x024c
#define CE_LAUNCH_DMA           0x0300
#define CE_OFFSET_IN_UPPER      0x0400
#define CE_OFFSET_IN_LOWER      0x0404
#define CE_OFFSET_OUT_UPPER     0x0408
#define CE_OFFSET_OUT_LOWER     0x040c
#define CE_LINE_LENGTH_IN       0x0418
#define CE_SET_REMAP_CONST_A    0x0700
#define CE_SET_REMAP_CONST_B    0x0704
#define CE_SET_REMAP_COMPONENTS 0x0708
#define CE_REMAP_CONST_A        4       /* a DST_X..W selector */
#define CE_REMAP_CONST_B        5
#define CE_REMAP_NO_WRITE       6
#define CE_REMAP_COMPONENT_SIZE GENMASK(17, 16)
#define CE_REMAP_NUM_DST        GENMASK(25, 24)
#define CE_DMA_TRANSFER_TYPE    GENMASK(1, 0)
#define CE_DMA_SEMAPHORE_TYPE   GENMASK(4, 3)
#define CE_SEM_NONE             0
#define CE_SEM_ONE_WORD         1
#define CE_SEM_FOUR_WORD        2
#define CE_SEM_CONDITIONAL_INTR 3
#define CE_DMA_SRC_PITCH        BIT(7)
#define CE_DMA_DST_PITCH        BIT(8)
#define CE_DMA_MULTI_LINE       BIT(9)
#define CE_DMA_REMAP            BIT(10)
#define CE_DMA_SRC_PHYSICAL     BIT(12)
#define CE_DMA_DST_PHYSICAL     BIT(13)
#define CE_DMA_SEM_REDUCTION    BIT(19)
#define CE_DMA_SEM_TWO_WORD     BIT(27)

/* clc6c0.h/clc7c0.h/clcbc0.h: compute methods that launch work. */
#define GR_LINE_LENGTH_IN       0x0180
#define GR_LINE_COUNT           0x0184
#define GR_OFFSET_OUT_UPPER     0x0188
#define GR_OFFSET_OUT           0x018c
#define GR_PITCH_OUT            0x0190
#define GR_LAUNCH_DMA           0x01b0
#define GR_DMA_PITCH            BIT(0)          /* DST_MEMORY_LAYOUT */
#define GR_DMA_REDUCTION        BIT(1)
#define GR_DMA_COMPLETION       GENMASK(5, 4)   /* 2: RELEASE_SEMAPHORE */
#define GR_LOAD_INLINE_DATA     0x01b4
#define GR_SEND_PCAS_A          0x02b4
#define GR_SEND_SIGNALING_PCAS_B 0x02bc
#define GR_SEND_SIGNALING_PCAS2_B 0x02c0
#define GR_SET_REPORT_SEMAPHORE_A 0x1b00
#define GR_SET_REPORT_SEMAPHORE_B 0x1b04
#define GR_SET_REPORT_SEMAPHORE_C 0x1b08
#define GR_SET_REPORT_SEMAPHORE_D 0x1b0c
#define GR_SEM_D_OPERATION      GENMASK(1, 0)   /* 0 RELEASE, 3 TRAP */
#define GR_SEM_D_REDUCTION      BIT(3)
#define GR_SEM_D_ONE_WORD       BIT(28)         /* STRUCTURE_SIZE: else four words */

/* Entries one channel runs per pass before the others get a turn. */
#define NVSIM_PB_BATCH          64

enum nvsim_pb_result {
	PB_OK,          /* done (a method, a segment, or nothing to do) */
	PB_WAIT,        /* a semaphore acquire is not satisfied yet */
	PB_MORE,        /* the batch ran out with entries left */
	PB_ERROR,       /* the channel stopped */
};

struct nvsim_pb_ctx {
	struct nvsim_channel *ch;
	const char *why;        /* the first error */
	u64 where;
};

static int nvsim_pb_fail(struct nvsim_pb_ctx *x, const char *why, u64 where)
{
	if (!x->why) {
		x->why = why;
		x->where = where;
	}
	return PB_ERROR;
}

/* ------------------------------------------------------- GPU addresses */

/* The page behind @va in the channel's VA space, or NULL (an MMU fault). */
static struct page *nvsim_gva_page(struct nvsim_channel *ch, u64 va)
{
	struct nvsim_uvm_ext *m;

	if (!ch->vas_client)
		return NULL;
	list_for_each_entry(m, &ch->tsg->gpu->va_maps, gpu_node) {
		if (m->vas_client != ch->vas_client ||
		    m->vas_handle != ch->vas_handle ||
		    va < m->base || va - m->base >= m->length)
			continue;
		return nvsim_mem_page(m->mem,
				      (m->offset + (va - m->base)) >> PAGE_SHIFT);
	}
	return NULL;
}

static int nvsim_gva_rw(struct nvsim_channel *ch, u64 va, void *buf, u32 len,
			bool write)
{
	while (len) {
		u32 off = offset_in_page(va);
		u32 n = min_t(u32, len, PAGE_SIZE - off);
		struct page *page = nvsim_gva_page(ch, va);
		u8 *kva;

		if (!page)
			return -EFAULT;
		kva = kmap_local_page(page);
		if (write)
			memcpy(kva + off, buf, n);
		else
			memcpy(buf, kva + off, n);
		kunmap_local(kva);
		va += n;
		buf += n;
		len -= n;
	}
	return 0;
}

/* A 1-D copy between two GPU VAs, page piece by page piece. */
static int nvsim_gva_copy(struct nvsim_channel *ch, u64 dst, u64 src, u64 len)
{
	unsigned int pieces = 0;

	while (len) {
		u32 n = min3(len, (u64)(PAGE_SIZE - offset_in_page(src)),
			     (u64)(PAGE_SIZE - offset_in_page(dst)));
		struct page *sp = nvsim_gva_page(ch, src);
		struct page *dp = nvsim_gva_page(ch, dst);
		u8 *s, *d;

		if (!sp || !dp)
			return -EFAULT;
		s = kmap_local_page(sp);
		d = kmap_local_page(dp);
		memmove(d + offset_in_page(dst), s + offset_in_page(src), n);
		kunmap_local(d);
		kunmap_local(s);
		src += n;
		dst += n;
		len -= n;
		if (!(++pieces % 256))
			cond_resched();
	}
	return 0;
}

/*
 * Fill @len bytes at GPU VA @dst with the @pixel-byte pattern @pat, skipping
 * the bytes @skip marks (NO_WRITE components), page piece by page piece.
 */
static int nvsim_gva_fill(struct nvsim_channel *ch, u64 dst, u64 len,
			  const u8 *pat, const bool *skip, u32 pixel)
{
	unsigned int pieces = 0;
	u64 done = 0;

	while (done < len) {
		u32 n = min_t(u64, len - done, PAGE_SIZE - offset_in_page(dst));
		struct page *dp = nvsim_gva_page(ch, dst);
		u8 *d;
		u32 i;

		if (!dp)
			return -EFAULT;
		d = kmap_local_page(dp) + offset_in_page(dst);
		for (i = 0; i < n; i++) {
			u32 k = (done + i) % pixel;

			if (!skip[k])
				d[i] = pat[k];
		}
		kunmap_local(d - offset_in_page(dst));
		dst += n;
		done += n;
		if (!(++pieces % 256))
			cond_resched();
	}
	return 0;
}

/* USERD: 4-byte words of the USERD memory, at @off into USERD. */
static int nvsim_userd_rw(struct nvsim_channel *ch, u32 off, u32 *val,
			  bool write)
{
	u64 at = ch->userd_off + off;
	struct page *page;
	u32 *kva;

	if (at & 3)
		return -EFAULT;
	page = nvsim_mem_page(ch->userd_mem, at >> PAGE_SHIFT);
	if (!page)
		return -EFAULT;
	kva = kmap_local_page(page);
	if (write)
		WRITE_ONCE(kva[offset_in_page(at) / 4], *val);
	else
		*val = READ_ONCE(kva[offset_in_page(at) / 4]);
	kunmap_local(kva);
	return 0;
}

/* ------------------------------------------------------- semaphores */

static bool nvsim_sem_acquired(u32 op, u64 val, u64 payload, bool wide)
{
	if (!wide) {
		val = (u32)val;
		payload = (u32)payload;
	}
	switch (op) {
	case SEM_OP_ACQUIRE:
		return val == payload;
	case SEM_OP_ACQ_STRICT_GEQ:
		return val >= payload;
	case SEM_OP_ACQ_CIRC_GEQ:
		return wide ? (s64)(val - payload) >= 0 :
			      (s32)((u32)val - (u32)payload) >= 0;
	case SEM_OP_ACQ_AND:
		return (val & payload) != 0;
	case SEM_OP_ACQ_NOR:
		return (~(val | payload) & (wide ? U64_MAX : U32_MAX)) != 0;
	}
	return false;
}

static int nvsim_host_sem_execute(struct nvsim_pb_ctx *x, u32 data)
{
	struct nvsim_channel *ch = x->ch;
	bool wide = data & SEM_PAYLOAD_64BIT;
	u32 op = data & 7;
	u64 addr = ch->sem_addr, val = 0, ts;

	if (addr & (wide ? 7 : 3))
		return nvsim_pb_fail(x, "misaligned semaphore", addr);
	if (op == SEM_OP_RELEASE) {
		if (nvsim_gva_rw(ch, addr, &ch->sem_payload, wide ? 8 : 4, true))
			return nvsim_pb_fail(x, "MMU fault (semaphore)", addr);
		if (data & SEM_RELEASE_TIMESTAMP) {
			ts = ktime_get_ns();
			if (nvsim_gva_rw(ch, addr + 8, &ts, 8, true))
				return nvsim_pb_fail(x, "MMU fault (semaphore)",
						     addr + 8);
		}
		return PB_OK;
	}
	if (op > SEM_OP_ACQ_NOR)
		return nvsim_pb_fail(x, "semaphore operation not simulated", op);
	if (nvsim_gva_rw(ch, addr, &val, wide ? 8 : 4, false))
		return nvsim_pb_fail(x, "MMU fault (semaphore)", addr);
	return nvsim_sem_acquired(op, val, ch->sem_payload, wide) ? PB_OK :
								   PB_WAIT;
}

/* ------------------------------------------------------- engines */

/*
 * A 1-D LAUNCH_DMA with REMAP_ENABLE whose destination components are all
 * constants (or not written): the copy engine's memset, as UVM pushes it
 * (uvm_hopper_ce.c, uvm_hal_hopper_ce_memset_1/4/8 and
 * hopper_memset_common: SET_REMAP_CONST_A/B, SET_REMAP_COMPONENTS with
 * DST_X/Y = CONST_A/B, then LINE_LENGTH_IN elements) and libcuda 535 does
 * while cuCtxCreate sets its context up.  Per clc8b5.h an element is
 * NUM_DST_COMPONENTS components of COMPONENT_SIZE bytes, each the low
 * bytes of CONST_A or CONST_B (little-endian), or left as it was
 * (NO_WRITE).  Components taken from the source (SRC_X..W) are a
 * remapped copy, not simulated.
 */
static int nvsim_ce_memset(struct nvsim_pb_ctx *x)
{
	struct nvsim_channel *ch = x->ch;
	u32 csize = FIELD_GET(CE_REMAP_COMPONENT_SIZE, ch->ce_remap) + 1;
	u32 ndst = FIELD_GET(CE_REMAP_NUM_DST, ch->ce_remap) + 1;
	u32 pixel = csize * ndst, i, j, sel, c;
	bool skip[16];
	u8 pat[16];

	for (i = 0; i < ndst; i++) {
		sel = (ch->ce_remap >> (4 * i)) & 7;
		if (sel != CE_REMAP_CONST_A && sel != CE_REMAP_CONST_B &&
		    sel != CE_REMAP_NO_WRITE)
			return nvsim_pb_fail(x, "remapped copy not simulated (only constants)",
					     ch->ce_remap);
		c = sel == CE_REMAP_CONST_A ? ch->ce_remap_a : ch->ce_remap_b;
		for (j = 0; j < csize; j++) {
			pat[i * csize + j] = j < 4 ? (u8)(c >> (8 * j)) : 0;
			skip[i * csize + j] = sel == CE_REMAP_NO_WRITE;
		}
	}
	if (nvsim_gva_fill(ch, ch->ce_out, (u64)ch->ce_len * pixel, pat, skip,
			   pixel))
		return nvsim_pb_fail(x, "MMU fault (memset)", ch->ce_out);
	return PB_OK;
}

static int nvsim_ce_launch(struct nvsim_pb_ctx *x, u32 data)
{
	struct nvsim_channel *ch = x->ch;
	u32 sem = FIELD_GET(CE_DMA_SEMAPHORE_TYPE, data);
	u64 payload, ts;

	if (FIELD_GET(CE_DMA_TRANSFER_TYPE, data)) {
		if (!(data & CE_DMA_SRC_PITCH) || !(data & CE_DMA_DST_PITCH) ||
		    (data & (CE_DMA_MULTI_LINE |
			     CE_DMA_SRC_PHYSICAL | CE_DMA_DST_PHYSICAL)))
			return nvsim_pb_fail(x, "copy not simulated (only 1-D virtual pitch)",
					     data);
		if (data & CE_DMA_REMAP) {
			int r = nvsim_ce_memset(x);

			if (r != PB_OK)
				return r;
		} else if (nvsim_gva_copy(ch, ch->ce_out, ch->ce_in, ch->ce_len)) {
			return nvsim_pb_fail(x, "MMU fault (copy)", ch->ce_in);
		}
	}
	if (sem == CE_SEM_NONE)
		return PB_OK;
	if (data & CE_DMA_SEM_REDUCTION)
		return nvsim_pb_fail(x, "semaphore reduction not simulated", data);
	payload = ch->ce_sem_payload;
	if (data & CE_DMA_SEM_TWO_WORD)
		payload |= (u64)ch->ce_sem_upper << 32;
	if (sem == CE_SEM_FOUR_WORD) {
		/* {payload, payload upper or 0, timestamp} */
		ts = ktime_get_ns();
		if ((ch->ce_sem_addr & 15) ||
		    nvsim_gva_rw(ch, ch->ce_sem_addr, &payload, 8, true) ||
		    nvsim_gva_rw(ch, ch->ce_sem_addr + 8, &ts, 8, true))
			return nvsim_pb_fail(x, "MMU fault (copy semaphore)",
					     ch->ce_sem_addr);
		return PB_OK;
	}
	if ((ch->ce_sem_addr & 3) ||
	    nvsim_gva_rw(ch, ch->ce_sem_addr, &payload,
			 data & CE_DMA_SEM_TWO_WORD ? 8 : 4, true))
		return nvsim_pb_fail(x, "MMU fault (copy semaphore)",
				     ch->ce_sem_addr);
	return PB_OK;
}

static int nvsim_ce_method(struct nvsim_pb_ctx *x, u32 m, u32 data)
{
	struct nvsim_channel *ch = x->ch;

	switch (m) {
	case CE_SET_SEMAPHORE_A:
		ch->ce_sem_addr = (u64)(data & 0x1ffff) << 32 |
				  lower_32_bits(ch->ce_sem_addr);
		break;
	case CE_SET_SEMAPHORE_B:
		ch->ce_sem_addr = (ch->ce_sem_addr & ~0xffffffffULL) | data;
		break;
	case CE_SET_SEMAPHORE_PAYLOAD:
		ch->ce_sem_payload = data;
		break;
	case CE_SET_SEMAPHORE_PAYLOAD_UPPER:
		ch->ce_sem_upper = data;
		break;
	case CE_OFFSET_IN_UPPER:
		ch->ce_in = (u64)(data & 0x1ffff) << 32 | lower_32_bits(ch->ce_in);
		break;
	case CE_OFFSET_IN_LOWER:
		ch->ce_in = (ch->ce_in & ~0xffffffffULL) | data;
		break;
	case CE_OFFSET_OUT_UPPER:
		ch->ce_out = (u64)(data & 0x1ffff) << 32 | lower_32_bits(ch->ce_out);
		break;
	case CE_OFFSET_OUT_LOWER:
		ch->ce_out = (ch->ce_out & ~0xffffffffULL) | data;
		break;
	case CE_LINE_LENGTH_IN:
		ch->ce_len = data;
		break;
	case CE_SET_REMAP_CONST_A:
		ch->ce_remap_a = data;
		break;
	case CE_SET_REMAP_CONST_B:
		ch->ce_remap_b = data;
		break;
	case CE_SET_REMAP_COMPONENTS:
		ch->ce_remap = data;
		break;
	case CE_LAUNCH_DMA:
		return nvsim_ce_launch(x, data);
	default:
		break;          /* state a 1-D copy does not use */
	}
	return PB_OK;
}

/*
 * The compute class's report semaphore (clc7c0.h, NVC7C0_SET_REPORT_
 * SEMAPHORE_A..D; HOPPER_COMPUTE_A's are the same methods): the GR
 * engine's release, which CUDA uses as a fence behind its work.  A
 * RELEASE writes the payload (ONE_WORD), or the four-word report
 * {payload, 0, timestamp} at a 16-byte aligned address.  nvsim runs no
 * kernels, so the release is done when the engine reaches it: the work
 * before it (none it could run) is complete.  REPORT_ONLY, TRAP and
 * reductions are errors (not simulated).
 */
static int nvsim_gr_report_semaphore(struct nvsim_pb_ctx *x, u32 data)
{
	struct nvsim_channel *ch = x->ch;
	u64 addr = ch->gr_sem_addr, ts;
	u32 report[2] = { ch->gr_sem_payload, 0 };

	if (FIELD_GET(GR_SEM_D_OPERATION, data) || (data & GR_SEM_D_REDUCTION))
		return nvsim_pb_fail(x, "report semaphore operation not simulated", data);
	if (data & GR_SEM_D_ONE_WORD) {
		if ((addr & 3) || nvsim_gva_rw(ch, addr, report, 4, true))
			return nvsim_pb_fail(x, "MMU fault (report semaphore)", addr);
		return PB_OK;
	}
	ts = ktime_get_ns();
	if ((addr & 15) || nvsim_gva_rw(ch, addr, report, 8, true) ||
	    nvsim_gva_rw(ch, addr + 8, &ts, 8, true))
		return nvsim_pb_fail(x, "MMU fault (report semaphore)", addr);
	return PB_OK;
}

/*
 * The compute class's inline-to-memory (clc7c0.h: LINE_LENGTH_IN, LINE_COUNT,
 * OFFSET_OUT(_UPPER), PITCH_OUT, LAUNCH_DMA, then LOAD_INLINE_DATA words):
 * LINE_COUNT lines of LINE_LENGTH_IN bytes, PITCH_OUT apart, taken from the
 * data words in order (the last word's extra bytes dropped).  libcuda 535
 * writes its context's memory this way during cuCtxCreate.  Pitch layout
 * only, without reduction or a semaphore release on completion (those stop
 * the channel as not simulated); a flush is a no-op.
 */
static int nvsim_gr_i2m_launch(struct nvsim_pb_ctx *x, u32 data)
{
	struct nvsim_channel *ch = x->ch;

	if (!(data & GR_DMA_PITCH) || (data & GR_DMA_REDUCTION) ||
	    FIELD_GET(GR_DMA_COMPLETION, data) == 2)
		return nvsim_pb_fail(x, "inline-to-memory not simulated (only pitch, no semaphore)",
				     data);
	ch->gr_i2m_pos = 0;
	ch->gr_i2m_left = (u64)ch->gr_i2m_len * ch->gr_i2m_lines;
	return PB_OK;
}

static int nvsim_gr_i2m_data(struct nvsim_pb_ctx *x, u32 data)
{
	struct nvsim_channel *ch = x->ch;
	u8 b[4];
	u32 i;

	if (!ch->gr_i2m_left)
		return nvsim_pb_fail(x, "inline data without a LAUNCH_DMA", data);
	put_unaligned_le32(data, b);
	for (i = 0; i < 4 && ch->gr_i2m_left; i++) {
		u64 line = div_u64(ch->gr_i2m_pos, ch->gr_i2m_len);
		u64 va = ch->gr_i2m_out + line * ch->gr_i2m_pitch +
			 (ch->gr_i2m_pos - line * ch->gr_i2m_len);

		if (nvsim_gva_rw(ch, va, &b[i], 1, true))
			return nvsim_pb_fail(x, "MMU fault (inline-to-memory)", va);
		ch->gr_i2m_pos++;
		ch->gr_i2m_left--;
	}
	return PB_OK;
}

static int nvsim_gr_method(struct nvsim_pb_ctx *x, u32 m, u32 data)
{
	struct nvsim_channel *ch = x->ch;

	switch (m) {
	case GR_LINE_LENGTH_IN:
		ch->gr_i2m_len = data;
		break;
	case GR_LINE_COUNT:
		ch->gr_i2m_lines = data;
		break;
	case GR_OFFSET_OUT_UPPER:
		ch->gr_i2m_out = (u64)(data & 0x1ffff) << 32 | lower_32_bits(ch->gr_i2m_out);
		break;
	case GR_OFFSET_OUT:
		ch->gr_i2m_out = (ch->gr_i2m_out & ~0xffffffffULL) | data;
		break;
	case GR_PITCH_OUT:
		ch->gr_i2m_pitch = data;
		break;
	case GR_LAUNCH_DMA:
		return nvsim_gr_i2m_launch(x, data);
	case GR_LOAD_INLINE_DATA:
		return nvsim_gr_i2m_data(x, data);
	case GR_SEND_PCAS_A:
	case GR_SEND_SIGNALING_PCAS_B:
	case GR_SEND_SIGNALING_PCAS2_B:
		return nvsim_pb_fail(x, "compute work not simulated", m);
	case GR_SET_REPORT_SEMAPHORE_A:
		ch->gr_sem_addr = (u64)(data & 0xff) << 32 | lower_32_bits(ch->gr_sem_addr);
		break;
	case GR_SET_REPORT_SEMAPHORE_B:
		ch->gr_sem_addr = (ch->gr_sem_addr & ~0xffffffffULL) | data;
		break;
	case GR_SET_REPORT_SEMAPHORE_C:
		ch->gr_sem_payload = data;
		break;
	case GR_SET_REPORT_SEMAPHORE_D:
		return nvsim_gr_report_semaphore(x, data);
	}
	return PB_OK;
}

static int nvsim_method(struct nvsim_pb_ctx *x, u32 subch, u32 m, u32 data)
{
	struct nvsim_channel *ch = x->ch;
	u32 cls;

	if (m < HOST_METHODS_END) {
		switch (m) {
		case HOST_SET_OBJECT:
			cls = data & 0xffff;
			if (cls != nvsim_arch->compute_class &&
			    cls != nvsim_arch->copy_class)
				return nvsim_pb_fail(x, "SET_OBJECT of a class not simulated",
						     cls);
			ch->subch_class[subch] = cls;
			break;
		case HOST_ILLEGAL:
			return nvsim_pb_fail(x, "ILLEGAL method", data);
		case HOST_SEM_ADDR_LO:
			ch->sem_addr = (ch->sem_addr & ~0xffffffffULL) | (data & ~3u);
			break;
		case HOST_SEM_ADDR_HI:
			ch->sem_addr = (u64)(data & 0xff) << 32 |
				       lower_32_bits(ch->sem_addr);
			break;
		case HOST_SEM_PAYLOAD_LO:
			ch->sem_payload = (ch->sem_payload & ~0xffffffffULL) | data;
			break;
		case HOST_SEM_PAYLOAD_HI:
			ch->sem_payload = (u64)data << 32 |
					  lower_32_bits(ch->sem_payload);
			break;
		case HOST_SEM_EXECUTE:
			return nvsim_host_sem_execute(x, data);
		default:
			break;  /* NOP, interrupts, membars, WFI: no-ops */
		}
		return PB_OK;
	}
	cls = ch->subch_class[subch];
	if (cls && cls == nvsim_arch->copy_class)
		return nvsim_ce_method(x, m, data);
	if (cls && cls == nvsim_arch->compute_class)
		return nvsim_gr_method(x, m, data);
	return nvsim_pb_fail(x, "method on a subchannel without an object", m);
}

/*
 * Run the segment at pb_pos; a WAIT leaves pb_pos at the header and
 * pb_done at the method that waits, so that it resumes there.
 */
static int nvsim_pb_segment(struct nvsim_pb_ctx *x)
{
	struct nvsim_channel *ch = x->ch;

	while (ch->pb_pos < ch->pb_len) {
		u64 hva = ch->pb_va + (u64)ch->pb_pos * 4;
		u32 hdr, sec, count, method, subch, i, data, m;
		int r;

		if (nvsim_gva_rw(ch, hva, &hdr, 4, false))
			return nvsim_pb_fail(x, "MMU fault (pushbuffer)", hva);
		sec = hdr >> 29;
		subch = (hdr >> 13) & 7;
		method = (hdr & 0xfff) << 2;
		count = (hdr >> 16) & 0x1fff;

		switch (sec) {
		case DMA_SEC_OP_INC_METHOD:
		case DMA_SEC_OP_NON_INC_METHOD:
		case DMA_SEC_OP_ONE_INC:
			if (count > ch->pb_len - ch->pb_pos - 1)
				return nvsim_pb_fail(x, "method data past the segment", hva);
			for (i = ch->pb_done; i < count; i++) {
				if (nvsim_gva_rw(ch, hva + 4 + 4 * (u64)i, &data, 4, false))
					return nvsim_pb_fail(x, "MMU fault (pushbuffer)",
							     hva + 4 + 4 * (u64)i);
				m = sec == DMA_SEC_OP_INC_METHOD ? method + 4 * i :
				    sec == DMA_SEC_OP_ONE_INC && i ? method + 4 : method;
				r = nvsim_method(x, subch, m, data);
				if (r == PB_WAIT)
					ch->pb_done = i;
				if (r != PB_OK)
					return r;
			}
			ch->pb_done = 0;
			ch->pb_pos += 1 + count;
			break;
		case DMA_SEC_OP_IMMD_DATA_METHOD:
			r = nvsim_method(x, subch, method, count);
			if (r != PB_OK)
				return r;
			ch->pb_pos++;
			break;
		case DMA_SEC_OP_GRP0_USE_TERT:
			/* subdevice masks (one subdevice), or a zero word */
			ch->pb_pos++;
			break;
		case DMA_SEC_OP_END_PB_SEGMENT:
			ch->pb_pos = ch->pb_len;
			break;
		default:
			return nvsim_pb_fail(x, "method header not simulated", hdr);
		}
	}
	return PB_OK;
}

static void nvsim_pb_stop(struct nvsim_pb_ctx *x)
{
	struct nvsim_channel *ch = x->ch;
	struct nvsim_engine *eng = &ch->tsg->gpu->engine;

	spin_lock_irq(&eng->lock);
	ch->stopped = true;
	ch->errors++;
	ch->tsg->errors++;
	spin_unlock_irq(&eng->lock);
	pr_info_ratelimited("channel %u stopped: %s (0x%llx)\n", ch->chid,
			    x->why ?: "error", x->where);
}

static void nvsim_pb_item_done(struct nvsim_channel *ch)
{
	struct nvsim_engine *eng = &ch->tsg->gpu->engine;

	spin_lock_irq(&eng->lock);
	ch->tsg->items++;
	spin_unlock_irq(&eng->lock);
}

/* Run the channel's entries from GP_GET towards GP_PUT. */
static int nvsim_pb_run(struct nvsim_channel *ch)
{
	struct nvsim_pb_ctx x = { .ch = ch };
	unsigned int n;
	u32 put, lo, hi;
	u64 entry;
	int r;

	if (ch->stopped || !ch->enabled || !ch->tsg->enabled)
		return PB_OK;
	for (n = 0; n < NVSIM_PB_BATCH; n++) {
		if (!ch->pb_active) {
			if (nvsim_userd_rw(ch, NVC36F_GPPUT_OFFSET, &put, false)) {
				nvsim_pb_fail(&x, "MMU fault (USERD)", ch->userd_off);
				goto stop;
			}
			if (put >= ch->entries) {
				nvsim_pb_fail(&x, "GP_PUT outside the ring", put);
				goto stop;
			}
			if (put == ch->gp_get)
				return PB_OK;
			if (nvsim_gva_rw(ch, ch->gpfifo_va + (u64)ch->gp_get * 8,
					 &entry, 8, false)) {
				nvsim_pb_fail(&x, "MMU fault (GPFIFO)",
					      ch->gpfifo_va + (u64)ch->gp_get * 8);
				goto stop;
			}
			lo = lower_32_bits(entry);
			hi = upper_32_bits(entry);
			ch->pb_va = (u64)(hi & 0xff) << 32 | (lo & ~3u);
			ch->pb_len = (hi >> 10) & 0x1fffff;
			ch->pb_pos = 0;
			ch->pb_done = 0;
			ch->pb_active = true;
		}
		/* A LENGTH of 0 is a control entry (NOP and friends): done. */
		r = nvsim_pb_segment(&x);
		if (r == PB_WAIT)
			return PB_WAIT;
		if (r == PB_ERROR)
			goto stop;
		ch->pb_active = false;
		ch->gp_get = (ch->gp_get + 1) & (ch->entries - 1);
		nvsim_userd_rw(ch, NVC36F_GPGET_OFFSET, &ch->gp_get, true);
		nvsim_pb_item_done(ch);
	}
	return PB_MORE;
stop:
	ch->pb_active = false;
	nvsim_pb_stop(&x);
	return PB_ERROR;
}

/**
 * nvsim_pb_work - run the GPU's client-memory channels that have work
 * @work: the GPU engine's pb_work
 *
 * Queued by the engine's timer (a doorbell, or a waiting channel).
 */
void nvsim_pb_work(struct work_struct *work)
{
	struct nvsim_engine *eng = container_of(work, struct nvsim_engine,
						pb_work);
	struct nvsim_gpu *gpu = container_of(eng, struct nvsim_gpu, engine);
	bool waiting = false, more = false;
	struct nvsim_channel *ch;
	struct nvsim_tsg *tsg;

	mutex_lock(&nvsim.lock);
	/* The lists change only under nvsim.lock (and the engine lock). */
	list_for_each_entry(tsg, &gpu->tsgs, gpu_node) {
		list_for_each_entry(ch, &tsg->channels, tsg_node) {
			if (!ch->pb)
				continue;
			switch (nvsim_pb_run(ch)) {
			case PB_WAIT:
				waiting = true;
				break;
			case PB_MORE:
				more = true;
				break;
			default:
				break;
			}
		}
	}
	WRITE_ONCE(eng->pb_waiting, waiting);
	mutex_unlock(&nvsim.lock);
	if (more)
		queue_work(system_unbound_wq, work);
}
