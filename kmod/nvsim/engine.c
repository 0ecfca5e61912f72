// SPDX-License-Identifier: GPL-2.0
/*
 * engine.c - the compute engine of each simulated GPU.
 *
 * What it models, after the hardware manuals' host/PBDMA behaviour (see
 * docs/compute.md section 1):
 *
 *  - Time advances in blocks of block_us: an hrtimer ticks at that rate
 *    while the GPU has channels.  Every tick charges the real time elapsed
 *    since the previous one to the TSG that was on the engine, so a late
 *    timer makes an item run longer and never loses time; scheduling
 *    decisions are taken at ticks only (block boundaries).
 *  - Each tick refreshes TIME_0/TIME_1 and polls the doorbell word of the
 *    usermode region, clearing it with xchg: plain RAM cannot raise an event
 *    on a write, so two rings within one tick collapse into one (the
 *    client-memory channels of pbdma.c are all looked at on any valid
 *    ring instead).  Channel IDs start at 1 so that a token is never 0,
 *    the "no ring" value.
 *  - A channel is IDLE or AWAKE.  Only a doorbell with its token wakes an
 *    IDLE channel; an AWAKE one re-reads GP_PUT whenever it needs an entry
 *    and goes back to IDLE when it finds none.  GP_PUT is the user's: it is
 *    read once (READ_ONCE) and an index outside the ring stops the channel
 *    with an error rather than being used.
 *  - One TSG runs at a time, round-robin over the runnable TSGs (enabled and
 *    with a channel that has work), for timeslice x (1, 2, 4 by interleave
 *    level) per pass; within a TSG the channels take turns item by item.
 *    Disabling a TSG takes it off the runlist but does not evict it; PREEMPT
 *    takes it off at once (nvsim_engine_preempt).
 *
 * Channels whose ring and USERD are client memory are pbdma.c's: the
 * timer only queues the GPU's pb_work for them (a valid doorbell, or about
 * every ms while one waits on a semaphore).
 *
 * A GPFIFO entry is the work itself: bits 0..31 the duration in us (0 a
 * no-op), bits 32..63 must be 0 (else it completes at once as an error).
 * Completion writes {start_ns, end_ns} into USERD's record slot for the
 * entry, then advances GP_GET.
 *
 * Locking: everything here is under the GPU's engine.lock (see nvsim.h).
 * The functions called from the RM side hold nvsim.lock and take the engine
 * lock inside it; the timer callback takes the engine lock only.
 */
#include <linux/mm.h>
#include <linux/ktime.h>
#include <linux/sched.h>

#include "nvsim.h"

static u64 nvsim_block_ns(void)
{
	return (u64)nvsim_block_us * NSEC_PER_USEC;
}

static u32 *nvsim_userd(struct nvsim_channel *ch)
{
	return page_address(ch->userd);
}

static u64 *nvsim_ring(struct nvsim_channel *ch)
{
	return page_address(ch->ring);
}

static u64 *nvsim_record(struct nvsim_channel *ch, u32 index)
{
	u8 *userd = page_address(ch->userd);

	return (u64 *)(userd + NVSIM_USERD_COMPLETIONS_OFFSET +
		       (index % NVSIM_USERD_COMPLETIONS) * 2 * sizeof(u64));
}

/* Consecutive timeslices per runlist pass, by interleave level. */
static u64 nvsim_tsg_budget_ns(struct nvsim_tsg *tsg)
{
	u32 weight = 1u << min_t(u32, tsg->interleave,
				 NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH);

	return tsg->timeslice_us * NSEC_PER_USEC * weight;
}

/* ------------------------------------------------------------ channels */

static void nvsim_channel_error(struct nvsim_channel *ch)
{
	ch->errors++;
	ch->tsg->errors++;
}

/*
 * Does the channel have an entry to start?  Reads the user's GP_PUT; an
 * AWAKE channel that finds nothing goes IDLE, one that finds an index
 * outside the ring is stopped for good.
 */
static bool nvsim_channel_pending(struct nvsim_channel *ch)
{
	u32 put;

	if (!ch->awake || ch->stopped)
		return false;
	put = READ_ONCE(nvsim_userd(ch)[NVC36F_GPPUT_OFFSET / 4]);
	if (put >= ch->entries) {
		ch->stopped = true;
		ch->awake = false;
		nvsim_channel_error(ch);
		return false;
	}
	if (put == ch->gp_get) {
		ch->awake = false;
		return false;
	}
	return true;
}

/* Channels with a ring in client memory are pbdma.c's, not the timer's. */
static bool nvsim_channel_has_work(struct nvsim_channel *ch)
{
	return !ch->pb && ch->enabled &&
	       (ch->running || nvsim_channel_pending(ch));
}

/* Finish the entry at GP_GET: record, then publish the new GP_GET. */
static void nvsim_channel_complete(struct nvsim_channel *ch, u64 start,
				   u64 end, bool error)
{
	u64 *rec = nvsim_record(ch, ch->gp_get);

	WRITE_ONCE(rec[0], start);
	WRITE_ONCE(rec[1], end);
	ch->gp_get = (ch->gp_get + 1) & (ch->entries - 1);
	/* The record is complete before GP_GET says so. */
	smp_wmb();
	WRITE_ONCE(nvsim_userd(ch)[NVC36F_GPGET_OFFSET / 4], ch->gp_get);
	ch->running = false;
	if (error)
		nvsim_channel_error(ch);
	else
		ch->tsg->items++;
}

/*
 * Start (or resume) the channel's next item at @now.  No-ops and bad entries
 * complete at once; at most one ring's worth of them per call.
 */
static bool nvsim_channel_start(struct nvsim_channel *ch, u64 now)
{
	u32 n;

	for (n = 0; n < ch->entries; n++) {
		u64 entry;
		u64 *rec;

		if (!nvsim_channel_has_work(ch))
			return false;
		if (ch->running)
			return true;
		entry = READ_ONCE(nvsim_ring(ch)[ch->gp_get]);
		if (upper_32_bits(entry) || !lower_32_bits(entry)) {
			nvsim_channel_complete(ch, now, now,
					       upper_32_bits(entry) != 0);
			continue;
		}
		ch->running = true;
		ch->dur_ns = (u64)lower_32_bits(entry) * NSEC_PER_USEC;
		ch->run_ns = 0;
		ch->start_ns = now;
		rec = nvsim_record(ch, ch->gp_get);
		WRITE_ONCE(rec[0], now);
		WRITE_ONCE(rec[1], 0);
		return true;
	}
	return false;
}

/* The TSG's next channel with work after @after (round-robin), started. */
static struct nvsim_channel *nvsim_tsg_next(struct nvsim_tsg *tsg,
					    struct nvsim_channel *after,
					    u64 now)
{
	struct nvsim_channel *ch;

	if (list_empty(&tsg->channels))
		return NULL;
	/* A partly run item is resumed before anything else. */
	list_for_each_entry(ch, &tsg->channels, tsg_node)
		if (ch->running && ch->enabled)
			return ch;
	if (after)
		list_for_each_entry_continue(after, &tsg->channels, tsg_node)
			if (nvsim_channel_start(after, now))
				return after;
	list_for_each_entry(ch, &tsg->channels, tsg_node)
		if (nvsim_channel_start(ch, now))
			return ch;
	return NULL;
}

static bool nvsim_tsg_runnable(struct nvsim_tsg *tsg)
{
	struct nvsim_channel *ch;

	if (!tsg->enabled)
		return false;
	list_for_each_entry(ch, &tsg->channels, tsg_node)
		if (nvsim_channel_has_work(ch))
			return true;
	return false;
}

/* ---------------------------------------------------------- the engine */

static struct nvsim_channel *nvsim_engine_find(struct nvsim_engine *eng,
					       u32 chid)
{
	struct nvsim_channel *ch;
	struct nvsim_tsg *tsg;

	list_for_each_entry(tsg, &eng->tsgs, eng_node)
		list_for_each_entry(ch, &tsg->channels, tsg_node)
			if (ch->chid == chid)
				return ch;
	return NULL;
}

static void nvsim_engine_poll(struct nvsim_gpu *gpu, u64 now)
{
	u32 *regs = page_address(gpu->usermode);
	struct nvsim_channel *ch;
	u32 token;

	WRITE_ONCE(regs[NVC361_TIME_1 / 4], upper_32_bits(now));
	WRITE_ONCE(regs[NVC361_TIME_0 / 4], lower_32_bits(now));

	token = xchg(&regs[NVC361_NOTIFY_CHANNEL_PENDING / 4], 0);
	if (!token || token >> 16)      /* nothing, or not runlist 0 */
		goto waiting;
	ch = nvsim_engine_find(&gpu->engine, token & 0xffff);
	if (!ch)
		goto waiting;
	if (!ch->pb) {
		if (!ch->stopped)
			ch->awake = true;
		return;
	}
	/*
	 * A doorbell is an event on the hardware; here it is one word read
	 * once a tick, so the rings of other channels within the same tick
	 * were overwritten by this one.  For the client-memory channels a
	 * valid ring therefore queues the work, which runs every one of them
	 * whose GP_PUT differs from its GP_GET (what the lost rings would
	 * have woken).  nvsim's own channels keep the one-token model (their
	 * clients re-ring; vgpu.ko's doorbell mediation is tested on it).
	 */
	queue_work(system_unbound_wq, &gpu->engine.pb_work);
	return;
waiting:
	/* A channel waits on a semaphore: look again about every ms. */
	if (READ_ONCE(gpu->engine.pb_waiting) &&
	    now - gpu->engine.pb_kick_ns >= NSEC_PER_MSEC) {
		gpu->engine.pb_kick_ns = now;
		queue_work(system_unbound_wq, &gpu->engine.pb_work);
	}
}

static void nvsim_engine_charge(struct nvsim_engine *eng, u64 ns)
{
	struct nvsim_tsg *tsg = eng->cur;

	eng->busy_ns += ns;
	tsg->busy_ns += ns;
	if (tsg->pidb)
		tsg->pidb->busy_ns += ns;
	eng->slice_left_ns -= ns;
}

static void nvsim_engine_off(struct nvsim_engine *eng)
{
	struct nvsim_tsg *tsg = eng->cur;

	/* A partly run item stays on its channel (ch->running). */
	list_move_tail(&tsg->eng_node, &eng->tsgs);
	eng->cur = NULL;
	eng->cur_ch = NULL;
}

static bool nvsim_engine_others_runnable(struct nvsim_engine *eng)
{
	struct nvsim_tsg *tsg;

	list_for_each_entry(tsg, &eng->tsgs, eng_node)
		if (tsg != eng->cur && nvsim_tsg_runnable(tsg))
			return true;
	return false;
}

/* The TSG on the engine at a block boundary: keep it, or take it off. */
static void nvsim_engine_keep_or_off(struct nvsim_engine *eng, u64 now)
{
	struct nvsim_tsg *tsg = eng->cur;
	struct nvsim_channel *ch = eng->cur_ch;
	bool renewed = false;

	/*
	 * Disabling (the TSG or a channel) does not evict: what is on the
	 * engine runs on until its timeslices end.  Then a disabled TSG goes,
	 * and a lone enabled one gets a new pass.
	 */
	if (eng->slice_left_ns <= 0) {
		if (!tsg->enabled || nvsim_engine_others_runnable(eng))
			goto off;
		eng->slice_left_ns = nvsim_tsg_budget_ns(tsg);
		renewed = true;
	}
	if (ch && ch->running && (ch->enabled || !renewed))
		return;
	eng->cur_ch = nvsim_tsg_next(tsg, ch, now);
	if (eng->cur_ch)
		return;
off:
	nvsim_engine_off(eng);
}

static void nvsim_engine_pick(struct nvsim_engine *eng, u64 now)
{
	struct nvsim_tsg *tsg;

	list_for_each_entry(tsg, &eng->tsgs, eng_node) {
		if (!tsg->enabled)
			continue;
		eng->cur_ch = nvsim_tsg_next(tsg, NULL, now);
		if (eng->cur_ch) {
			eng->cur = tsg;
			eng->slice_left_ns = nvsim_tsg_budget_ns(tsg);
			return;
		}
	}
}

/*
 * The real time since the last step goes to the TSG on the engine, and to
 * its running item, which completes if that was its duration.
 */
static void nvsim_engine_advance(struct nvsim_engine *eng, u64 now)
{
	u64 elapsed = now > eng->last_ns ? now - eng->last_ns : 0;
	struct nvsim_channel *ch = eng->cur_ch;

	eng->last_ns = now;
	if (!eng->cur)
		return;
	nvsim_engine_charge(eng, elapsed);
	if (ch && ch->running) {
		ch->run_ns += elapsed;
		if (ch->run_ns >= ch->dur_ns)
			nvsim_channel_complete(ch, ch->start_ns, now, false);
	}
}

/* One block boundary. */
static void nvsim_engine_step(struct nvsim_gpu *gpu, u64 now)
{
	struct nvsim_engine *eng = &gpu->engine;

	nvsim_engine_advance(eng, now);
	nvsim_engine_poll(gpu, now);
	if (eng->cur)
		nvsim_engine_keep_or_off(eng, now);
	if (!eng->cur)
		nvsim_engine_pick(eng, now);
}

static enum hrtimer_restart nvsim_engine_tick(struct hrtimer *timer)
{
	struct nvsim_engine *eng = container_of(timer, struct nvsim_engine,
						timer);
	struct nvsim_gpu *gpu = container_of(eng, struct nvsim_gpu, engine);
	enum hrtimer_restart ret = HRTIMER_NORESTART;

	spin_lock(&eng->lock);
	nvsim_engine_step(gpu, ktime_get_ns());
	if (eng->nr_channels) {
		hrtimer_forward_now(timer, ns_to_ktime(nvsim_block_ns()));
		ret = HRTIMER_RESTART;
	} else {
		eng->timer_on = false;
	}
	spin_unlock(&eng->lock);
	return ret;
}

void nvsim_engine_init(struct nvsim_gpu *gpu)
{
	struct nvsim_engine *eng = &gpu->engine;

	spin_lock_init(&eng->lock);
	INIT_LIST_HEAD(&eng->tsgs);
	hrtimer_init(&eng->timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
	eng->timer.function = nvsim_engine_tick;
	INIT_WORK(&eng->pb_work, nvsim_pb_work);
}

/* No channel is left (gpu.c checks); the timer must not outlive the GPU. */
void nvsim_engine_fini(struct nvsim_gpu *gpu)
{
	hrtimer_cancel(&gpu->engine.timer);
	cancel_work_sync(&gpu->engine.pb_work);
}

/* ------------------------------------------------ the RM side's entry points */

void nvsim_engine_add_tsg(struct nvsim_tsg *tsg)
{
	struct nvsim_engine *eng = &tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	list_add_tail(&tsg->eng_node, &eng->tsgs);
	spin_unlock_irq(&eng->lock);
}

/* After this the engine never touches the TSG again; waiters are released. */
void nvsim_engine_remove_tsg(struct nvsim_tsg *tsg)
{
	struct nvsim_engine *eng = &tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	WARN_ON(!list_empty(&tsg->channels));
	if (eng->cur == tsg) {
		eng->cur = NULL;
		eng->cur_ch = NULL;
	}
	list_del_init(&tsg->eng_node);
	spin_unlock_irq(&eng->lock);
}

void nvsim_engine_add_channel(struct nvsim_channel *ch)
{
	struct nvsim_engine *eng = &ch->tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	list_add_tail(&ch->tsg_node, &ch->tsg->channels);
	if (!eng->nr_channels++ && !eng->timer_on) {
		eng->timer_on = true;
		eng->last_ns = ktime_get_ns();
		hrtimer_start(&eng->timer, ns_to_ktime(nvsim_block_ns()),
			      HRTIMER_MODE_REL);
	}
	spin_unlock_irq(&eng->lock);
}

/*
 * After this the engine never touches the channel or its pages again.  The
 * timer stops by itself at its next tick once no channel is left.
 */
void nvsim_engine_remove_channel(struct nvsim_channel *ch)
{
	struct nvsim_engine *eng = &ch->tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	if (eng->cur_ch == ch)
		eng->cur_ch = NULL;
	list_del_init(&ch->tsg_node);
	eng->nr_channels--;
	spin_unlock_irq(&eng->lock);
}

/* GPFIFO_SCHEDULE, SET_TIMESLICE, SET_INTERLEAVE_LEVEL: NULL leaves a field. */
void nvsim_engine_set_tsg(struct nvsim_tsg *tsg, const bool *enabled,
			  const u64 *timeslice_us, const u32 *interleave)
{
	struct nvsim_engine *eng = &tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	if (enabled)
		tsg->enabled = *enabled;
	if (timeslice_us)
		tsg->timeslice_us = *timeslice_us;
	if (interleave)
		tsg->interleave = *interleave;
	spin_unlock_irq(&eng->lock);
}

void nvsim_engine_set_channel(struct nvsim_channel *ch, bool enabled)
{
	struct nvsim_engine *eng = &ch->tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	ch->enabled = enabled;
	spin_unlock_irq(&eng->lock);
}

/**
 * nvsim_engine_preempt - take a TSG off the engine now
 * @tsg: the TSG
 *
 * The TSG is charged up to now, leaves the engine (a partly run item stays
 * on its channel) and the next runnable TSG starts.  A hardware preemption
 * completes in microseconds, at the engine's next instruction or CTA
 * boundary; nvsim's tick is its own time step, not the hardware's, so it
 * does not wait for one.  Nor does the real driver's caller sleep for it:
 * the control is an RPC to GSP (kchangrpapiCtrlCmdPreempt, rpc.c
 * rpcCtrlPreempt) whose reply the CPU polls for (kernel_gsp.c,
 * _kgspRpcRecvPoll: osSpinLoop), so bWait returns once the TSG is off and
 * the caller spent that time on the CPU.  (Until 2026-12 nvsim served a
 * PREEMPT at its next tick and the bWait caller slept until then: two
 * context switches per PREEMPT that the real driver does not make.)
 */
void nvsim_engine_preempt(struct nvsim_tsg *tsg)
{
	struct nvsim_engine *eng = &tsg->gpu->engine;

	lockdep_assert_held(&nvsim.lock);
	spin_lock_irq(&eng->lock);
	if (eng->cur == tsg) {
		u64 now = ktime_get_ns();

		nvsim_engine_advance(eng, now);
		nvsim_engine_off(eng);
		nvsim_engine_pick(eng, now);
	}
	spin_unlock_irq(&eng->lock);
}
