// SPDX-License-Identifier: GPL-2.0
/*
 * sched.c - one scheduler per real GPU that has slices (docs/compute.md,
 * section 3): a kernel thread whose timing never depends on the daemon.
 *
 * Time slots are exclusive: at most one managed slice GPU (policy not NONE)
 * of a real GPU is running at any time; the others are paused (compute.c).
 * So the time a slice holds the slot while it wants the GPU is its GPU time
 * (GPU_TIME_NS), and the cap of a fixed slice is a limit on that.
 *
 * Two clocks per slice GPU:
 *  - used_ns, its GPU time in the current period: fixed caps and burst
 *    floors are per period, so it restarts at 0 at each period boundary;
 *  - vtime, its GPU time scaled by 1/weight (ns at 100 %), never reset:
 *    the order of the share class.  A per-period order (what this file did
 *    first) hands the first slots of every period to the same slices (ties
 *    break by list order) and forgets whoever the period's end cut short;
 *    a continuous virtual time carries that debt over, as fair queueing
 *    does.  A slice that stops wanting the GPU cannot bank credit: its
 *    vtime is kept within a period of the newest holder's (vclock).
 *
 * Classes, best first: high priority before low; within a priority, the
 * guaranteed class (fixed below its cap, burst below its floor, ordered by
 * used/bp: they all reach their amount within the period) before the share
 * class (share, and burst above its floor, ordered by vtime).  Fixed slices
 * at their cap are not eligible.  Slices that do not want the GPU are
 * skipped (work conservation).
 *
 * The thread takes a full decision when the slot may change: the holder's
 * cap or floor is reached, its lead over the best other ends its slot, the
 * period ends, or a kick (a trapped doorbell of a paused slice, a new TSG,
 * a changed setting).  In between it only checks, every quantum (1 ms or
 * period/100) and only while another slice wants the GPU, that the holder
 * still wants it: a holder that ran dry gives way within a quantum.  When
 * nobody else wants the GPU it sleeps until the holder's cap or the period
 * ends: a paused slice's new work reaches it as a kick.
 *
 * A full decision:
 *  - charges the slot holder for the time since the last decision, if it
 *    wanted the GPU then;
 *  - picks the best eligible slice that wants the GPU;
 *  - a holder keeps the slot for a quantum at least, and then until its key
 *    leads the best other's by a hysteresis (guaranteed class: a period,
 *    i.e. until its cap or floor; share class: period/2 at 100 %), unless a
 *    better class wants it, or it stops being eligible or wanting: each
 *    switch is a PREEMPT, so this bounds them to about one slot per slice
 *    and period;
 *  - a high-priority holder that stops wanting keeps the slot for a short
 *    grace (VGPU_HIGH_GRACE_NS, at most a tenth of the period): online work
 *    arrives in bursts of launches with gaps between them, and giving the
 *    slot to a low slice in each gap costs the high one a switch (a
 *    PREEMPT of the low one) per launch;
 *  - a switch takes the holder off the runlist, puts the next one on and
 *    only then waits for the holder's PREEMPT (the engine never idles in
 *    between); the next holder's clock starts once it is on the runlist,
 *    the time spent before that is charged to nobody.
 * All of that runs under vgpu_sched.lock, which is never taken with a
 * client lock held (vgpu.h), so the pause's RM calls may sleep here.
 */
#include <linux/slab.h>
#include <linux/kthread.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/hrtimer.h>
#include <linux/ktime.h>
#include <linux/sched/clock.h>
#include <linux/seq_file.h>

#include "vgpu.h"

/*
 * Where the thread's time goes (debugfs "sched", bench/compute_accuracy.py
 * --profile).  Counts, and the time of the parts that do not sleep, as
 * local_clock() deltas: the thread runs at SCHED_FIFO, so that is its CPU
 * time, interrupts that land meanwhile included (they are charged to it
 * anyway).  finish_ns sleeps in the PREEMPT's wait.  Under sc->lock.
 */
struct vgpu_sched_stats {
	u64 loops;              /* wake-ups of the thread (kicks, timers) */
	u64 kicks;              /* of which a kick asked for a decision */
	u64 decisions;          /* full decisions */
	u64 polls;              /* checks of the holder alone */
	u64 decide_ns;          /* full decisions, all of them */
	u64 wants_ns;           /* every member's wish (USERD reads) */
	u64 switch_ns;          /* pause_begin + resume of a switch */
	u64 finish_ns;          /* pause_finish of a switch: PREEMPT wait, zaps */
	u64 others_ns;          /* the other members' pause checks */
	u64 poll_ns;            /* the holder's checks */
};

struct vgpu_sched {
	struct list_head node;          /* vgpu_scheds */
	u32 real_minor;
	struct mutex lock;
	struct list_head members;       /* vgpu_gpu.sched_node */
	u64 period_ns;                  /* lock; READ_ONCE */
	u32 layers;                     /* lock; READ_ONCE */
	struct vgpu_gpu *cur;           /* the slot's holder */
	bool cur_wanted;
	bool others;                    /* another member wanted at the last decision */
	u64 poll_ns;                    /* between polls of the holder */
	u64 cur_since;
	u64 period_start;
	u64 last_ns;
	u64 vclock;                     /* the newest holder's vtime */
	atomic_t kick;
	atomic64_t switches;
	struct vgpu_sched_stats st;
	struct task_struct *thread;
};

static DEFINE_MUTEX(vgpu_scheds_lock);
static LIST_HEAD(vgpu_scheds);

#define VGPU_QUANTUM_MIN_NS     NSEC_PER_MSEC
#define VGPU_HIGH_GRACE_NS      (5 * NSEC_PER_MSEC)
#define VGPU_SLEEP_MIN_NS       (50 * NSEC_PER_USEC)
#define VGPU_POLL_MAX_DIV       20

static u64 vgpu_high_grace(u64 period)
{
	return min_t(u64, VGPU_HIGH_GRACE_NS, period / 10);
}

static u64 vgpu_quantum(u64 period)
{
	return max_t(u64, VGPU_QUANTUM_MIN_NS, period / 100);
}

/* The longest interval between polls of a busy low-priority holder. */
static u64 vgpu_poll_max(u64 period)
{
	return max(vgpu_quantum(period), period / VGPU_POLL_MAX_DIV);
}

static bool vgpu_managed(struct vgpu_gpu *g)
{
	return READ_ONCE(g->policy) != VGPU_COMPUTE_NONE;
}

/* bp of the period, in ns. */
static u64 vgpu_bp_ns(u64 period, u32 bp)
{
	return div_u64(period * bp, VGPU_COMPUTE_BP_MAX);
}

static u32 vgpu_bp(struct vgpu_gpu *g)
{
	return max_t(u32, READ_ONCE(g->bp), 1);
}

/* Below its guaranteed amount this period (fixed cap, burst floor)? */
static bool vgpu_guaranteed(struct vgpu_sched *sc, struct vgpu_gpu *g)
{
	u32 policy = READ_ONCE(g->policy);

	return (policy == VGPU_COMPUTE_FIXED || policy == VGPU_COMPUTE_BURST) &&
	       g->used_ns < vgpu_bp_ns(sc->period_ns, vgpu_bp(g));
}

static bool vgpu_eligible(struct vgpu_sched *sc, struct vgpu_gpu *g)
{
	return READ_ONCE(g->policy) != VGPU_COMPUTE_FIXED ||
	       vgpu_guaranteed(sc, g);
}

/* Smaller is better: priority, then class (guaranteed first). */
static u32 vgpu_rank(struct vgpu_sched *sc, struct vgpu_gpu *g)
{
	u32 r = READ_ONCE(g->priority) == VGPU_PRIORITY_HIGH ? 0 : 2;

	return vgpu_guaranteed(sc, g) ? r : r + 1;
}

/*
 * The order within a class, in ns at 100 %: used/bp in the guaranteed
 * class, vtime in the share class.  vtime wraps (u64), so keys are compared
 * by their signed difference; vclock keeps every member within a period
 * (at 100 %) of each other, far from 2^63.
 */
static u64 vgpu_key(struct vgpu_sched *sc, struct vgpu_gpu *g, u32 rank)
{
	if (!(rank & 1))
		return div_u64(g->used_ns * VGPU_COMPUTE_BP_MAX, vgpu_bp(g));
	return g->vtime;
}

static bool vgpu_key_before(u64 a, u64 b)
{
	return (s64)(a - b) < 0;
}

/* A holder keeps the slot until its key leads the best other's by this. */
static u64 vgpu_hyst(struct vgpu_sched *sc, u32 rank)
{
	return rank & 1 ? sc->period_ns / 2 : sc->period_ns;
}

/* a before b? */
static bool vgpu_better(struct vgpu_sched *sc, struct vgpu_gpu *a,
			struct vgpu_gpu *b)
{
	u32 ra = vgpu_rank(sc, a), rb = vgpu_rank(sc, b);

	if (ra != rb)
		return ra < rb;
	return vgpu_key_before(vgpu_key(sc, a, ra), vgpu_key(sc, b, rb));
}

/*
 * How long cur may keep the slot against best (same class) before a
 * decision is due: until its lead reaches the hysteresis, a quantum at
 * least.  0: now.
 */
static u64 vgpu_slot_left(struct vgpu_sched *sc, struct vgpu_gpu *cur,
			  struct vgpu_gpu *best, u64 now)
{
	u32 rank = vgpu_rank(sc, cur);
	u64 min_slot = vgpu_quantum(sc->period_ns);
	u64 lead_end = vgpu_key(sc, best, rank) + vgpu_hyst(sc, rank);
	u64 key = vgpu_key(sc, cur, rank), left = 0;

	if (vgpu_key_before(key, lead_end))
		/* the key grows by BP_MAX/bp per ns held */
		left = div_u64((lead_end - key) * vgpu_bp(cur) +
			       VGPU_COMPUTE_BP_MAX - 1, VGPU_COMPUTE_BP_MAX);
	if (now - sc->cur_since < min_slot)
		left = max(left, min_slot - (now - sc->cur_since));
	return left;
}

/* The best eligible member that wants the GPU, other than skip. */
static struct vgpu_gpu *vgpu_best(struct vgpu_sched *sc, struct vgpu_gpu *skip)
{
	struct vgpu_gpu *g, *best = NULL;

	list_for_each_entry(g, &sc->members, sched_node) {
		if (g == skip || !vgpu_managed(g) || !g->wants || !vgpu_eligible(sc, g))
			continue;
		if (!best || vgpu_better(sc, g, best))
			best = g;
	}
	return best;
}

static struct vgpu_gpu *vgpu_pick(struct vgpu_sched *sc, u64 now)
{
	struct vgpu_gpu *cur = sc->cur, *best = vgpu_best(sc, NULL);

	if (cur && vgpu_managed(cur) && vgpu_eligible(sc, cur)) {
		/* Nobody wants it: the holder keeps it (no switch for nothing). */
		if (!best)
			return cur;
		/* A high holder between two launches keeps it for the grace. */
		if (!cur->wants &&
		    READ_ONCE(cur->priority) == VGPU_PRIORITY_HIGH &&
		    vgpu_rank(sc, best) >= vgpu_rank(sc, cur) &&
		    now - cur->wanted_ns < vgpu_high_grace(sc->period_ns))
			return cur;
		/* Unless a better class wants in: a minimum slot, then hysteresis. */
		if (cur->wants && best != cur &&
		    (vgpu_rank(sc, best) > vgpu_rank(sc, cur) ||
		     (vgpu_rank(sc, best) == vgpu_rank(sc, cur) &&
		      vgpu_slot_left(sc, cur, best, now))))
			return cur;
	}
	return best;
}

/*
 * When the next full decision is due, at the latest (then or a kick):
 * the period's end, the holder's cap or floor, the end of its slot against
 * the best other that wants the GPU, the end of a high holder's grace.
 */
static u64 vgpu_next_decision(struct vgpu_sched *sc, u64 now)
{
	u64 period = sc->period_ns, next = sc->period_start + period;
	struct vgpu_gpu *cur = sc->cur, *best;

	if (!cur)
		return next;
	if (READ_ONCE(cur->policy) != VGPU_COMPUTE_SHARE) {
		u64 amount = vgpu_bp_ns(period, vgpu_bp(cur));

		if (cur->used_ns < amount)
			next = min(next, now + amount - cur->used_ns);
	}
	best = vgpu_best(sc, cur);
	if (!best)
		return next;
	/* (a grace that ended while nobody else wanted the GPU is not a reason) */
	if (!cur->wants && READ_ONCE(cur->priority) == VGPU_PRIORITY_HIGH)
		next = min(next, cur->wanted_ns + vgpu_high_grace(period));
	if (cur->wants && vgpu_rank(sc, best) == vgpu_rank(sc, cur))
		next = min(next, now + vgpu_slot_left(sc, cur, best, now));
	return next;
}

/*
 * A new period: used restarts at 0, except that a fixed slice that ran past
 * its cap (a decision is late by the thread's wake-up, and the cap's end
 * falls between two decisions) carries the excess over: the cap holds on
 * average, not only per period in the scheduler's books.
 */
static void vgpu_new_period(struct vgpu_sched *sc, struct vgpu_gpu *g)
{
	u64 cap = vgpu_bp_ns(sc->period_ns, vgpu_bp(g));

	if (READ_ONCE(g->policy) == VGPU_COMPUTE_FIXED && g->used_ns > cap)
		g->used_ns -= cap;
	else
		g->used_ns = 0;
}

/*
 * Charge the holder for [last_ns, now) if it wanted the GPU.  Time in the
 * guaranteed class does not move vtime: a burst slice's floor is on top of
 * its weighted part of the rest.
 */
static void vgpu_charge(struct vgpu_sched *sc, u64 now)
{
	struct vgpu_gpu *cur = sc->cur;

	if (cur && sc->cur_wanted) {
		u64 d = now - sc->last_ns;

		if (!vgpu_guaranteed(sc, cur))
			cur->vtime += div_u64(d * VGPU_COMPUTE_BP_MAX, vgpu_bp(cur));
		cur->used_ns += d;
		atomic64_add(d, &cur->gpu_time_ns);
		if (vgpu_key_before(sc->vclock, cur->vtime))
			sc->vclock = cur->vtime;
	}
	sc->last_ns = now;
}

/*
 * One decision; returns when the next one is due (0: only when kicked).
 * dry: a poll found the holder run dry since it last saw it busy (at
 * cur->wanted_ns); it is charged up to halfway between the two, not for
 * the whole poll interval it may have spent idle.
 */
static u64 vgpu_decide(struct vgpu_sched *sc, bool dry)
{
	u64 now = ktime_get_ns(), period = sc->period_ns;
	u64 floor, t0 = local_clock(), t1;
	struct vgpu_gpu *g, *cur = sc->cur, *next;
	bool any = false, others = false;

	lockdep_assert_held(&sc->lock);
	sc->st.decisions++;
	if (dry && cur && sc->cur_wanted && cur->wanted_ns >= sc->last_ns &&
	    cur->wanted_ns < now) {
		vgpu_charge(sc, cur->wanted_ns + (now - cur->wanted_ns) / 2);
		sc->last_ns = now;
	} else {
		vgpu_charge(sc, now);
	}
	/*
	 * A period of credit at most (twice the share class's hysteresis, so
	 * never binding among slices taking turns): no banking while idle or
	 * shut out by a better class.
	 */
	floor = sc->vclock - period;
	if (now - sc->period_start >= period) {
		sc->period_start = now;
		list_for_each_entry(g, &sc->members, sched_node)
			vgpu_new_period(sc, g);
	}
	t1 = local_clock();
	list_for_each_entry(g, &sc->members, sched_node) {
		WRITE_ONCE(g->wants, vgpu_managed(g) &&
			   vgpu_compute_wants(g, now, period));
		if (g->wants)
			g->wanted_ns = now;
		if (vgpu_key_before(g->vtime, floor))
			g->vtime = floor;
		any |= vgpu_managed(g);
	}
	sc->st.wants_ns += local_clock() - t1;
	/* A holder that ran dry is polled every quantum again, next slot too. */
	if (cur && sc->cur_wanted && !cur->wants)
		cur->poll_ns = 0;

	next = vgpu_pick(sc, now);
	if (next != cur) {
		/*
		 * Off the runlist, the next one on, then wait for the PREEMPT:
		 * the engine goes from one to the other without idling.
		 */
		bool finish;

		t1 = local_clock();
		finish = cur && vgpu_compute_pause_begin(cur, sc->layers);
		if (next)
			vgpu_compute_resume(next);
		now = ktime_get_ns();
		sc->st.switch_ns += local_clock() - t1;
		t1 = local_clock();
		if (finish)
			vgpu_compute_pause_finish(cur, sc->layers);
		sc->st.finish_ns += local_clock() - t1;
		sc->cur = next;
		sc->cur_since = now;
		sc->last_ns = now;
		atomic64_inc(&sc->switches);
	}
	/* A high holder, and one that is not busy, are polled every quantum. */
	if (next && (!next->wants ||
		     READ_ONCE(next->priority) == VGPU_PRIORITY_HIGH))
		next->poll_ns = 0;
	sc->poll_ns = clamp(next ? next->poll_ns : 0, vgpu_quantum(period),
			    vgpu_poll_max(period));
	sc->cur_wanted = next && next->wants;

	/* Exclusive slots: every other managed member is paused; NONE runs. */
	t1 = local_clock();
	list_for_each_entry(g, &sc->members, sched_node) {
		if (g == next)
			continue;
		others |= g->wants;
		if (vgpu_managed(g)) {
			vgpu_compute_pause(g, sc->layers);
			if (atomic_xchg(&g->zap_pending, 0))
				vgpu_doorbell_protect(g);
			/* a mapping still unprotected: keep polling its USERD */
			others |= atomic_read(&g->zap_pending) != 0;
		} else {
			vgpu_compute_resume(g);
		}
	}
	sc->others = others;
	sc->st.others_ns += local_clock() - t1;
	sc->st.decide_ns += local_clock() - t0;
	if (!any)
		return 0;
	return max(vgpu_next_decision(sc, now), now + VGPU_SLEEP_MIN_NS);
}

/*
 * Between full decisions, while another slice wants the GPU: has the
 * holder's state (wanting the GPU or not) stayed what the last decision
 * saw?  One slice's USERD instead of every member's.  A high holder in its
 * grace that wants the GPU again is a change: it is charged from then on,
 * and keeps the slot without waiting for the grace to end.
 */
static bool vgpu_holder_same(struct vgpu_sched *sc, u64 now)
{
	struct vgpu_gpu *cur = sc->cur;
	u64 t0 = local_clock();
	bool wants;

	if (!cur)
		return false;
	wants = vgpu_compute_wants(cur, now, sc->period_ns);
	if (wants)
		cur->wanted_ns = now;
	sc->st.polls++;
	sc->st.poll_ns += local_clock() - t0;
	return wants == sc->cur_wanted;
}

static int vgpu_sched_thread(void *arg)
{
	struct vgpu_sched *sc = arg;
	u64 due = 0, now, wake;
	bool full = true;

	while (!kthread_should_stop()) {
		mutex_lock(&sc->lock);
		now = ktime_get_ns();
		sc->st.loops++;
		sc->st.kicks += full;
		if (full || now >= due) {
			due = vgpu_decide(sc, false);
		} else if (!vgpu_holder_same(sc, now)) {
			due = vgpu_decide(sc, sc->cur_wanted);
		} else if (sc->cur_wanted &&
			   READ_ONCE(sc->cur->priority) != VGPU_PRIORITY_HIGH) {
			/*
			 * Still busy: poll less often, up to period/20 (a holder
			 * that runs dry then wastes at most that; under emulation
			 * a wake-up costs as much as a decision).  Not for a high
			 * holder: its grace runs from the last poll that saw it
			 * busy, and online work has short gaps.  The holder
			 * keeps the interval for its next slot, unless it ran
			 * dry meanwhile: a slice that saturates its slots is
			 * not polled every quantum again at each of them.
			 */
			sc->poll_ns = min(2 * sc->poll_ns,
					  vgpu_poll_max(sc->period_ns));
			sc->cur->poll_ns = sc->poll_ns;
		}
		now = ktime_get_ns();
		/* Polls of the holder only while somebody else waits for it. */
		wake = due;
		if (due && sc->others && sc->cur)
			wake = min(due, now + sc->poll_ns);
		mutex_unlock(&sc->lock);

		set_current_state(TASK_INTERRUPTIBLE);
		full = atomic_xchg(&sc->kick, 0);
		if (full || kthread_should_stop()) {
			__set_current_state(TASK_RUNNING);
			continue;
		}
		if (due) {
			ktime_t t = ns_to_ktime(wake > now ? wake - now : 0);

			schedule_hrtimeout_range(&t, 20 * NSEC_PER_USEC,
						 HRTIMER_MODE_REL);
		} else {
			schedule();
		}
		__set_current_state(TASK_RUNNING);
		full = full || atomic_xchg(&sc->kick, 0);
	}
	return 0;
}
static void vgpu_sched_wake(struct vgpu_sched *sc)
{
	atomic_set(&sc->kick, 1);
	wake_up_process(sc->thread);
}

/*
 * A trapped doorbell of a paused slice (mmap.c; g->rang is set).  A
 * decision is needed at once only if the last one did not count the slice
 * as wanting the GPU: it may then be of a better class than the holder, or
 * the thread may be asleep until the period ends.  A slice already known
 * to want waits for the next due decision like every other waiting slice
 * (with sixteen slices, a kick per trap was two full decisions in five).
 * A decision clearing wants as the trap reads it costs at most a wait for
 * the next due decision, within the period: rang carries the ring to it.
 */
void vgpu_sched_ring(struct vgpu_gpu *g)
{
	if (!READ_ONCE(g->wants))
		vgpu_sched_kick(g);
}

void vgpu_sched_kick(struct vgpu_gpu *g)
{
	struct vgpu_sched *sc = READ_ONCE(g->sched);

	if (sc)
		vgpu_sched_wake(sc);
}

/* The scheduler of a real GPU, created if needed; vgpu_scheds_lock. */
static struct vgpu_sched *vgpu_sched_find(u32 minor, bool create)
{
	struct vgpu_sched *sc;

	lockdep_assert_held(&vgpu_scheds_lock);
	list_for_each_entry(sc, &vgpu_scheds, node)
		if (sc->real_minor == minor)
			return sc;
	if (!create)
		return NULL;
	sc = kzalloc(sizeof(*sc), GFP_KERNEL);
	if (!sc)
		return ERR_PTR(-ENOMEM);
	sc->real_minor = minor;
	mutex_init(&sc->lock);
	INIT_LIST_HEAD(&sc->members);
	sc->period_ns = (u64)VGPU_SCHED_PERIOD_DEFAULT_US * NSEC_PER_USEC;
	sc->layers = VGPU_SCHED_L_ALL;
	sc->period_start = sc->last_ns = ktime_get_ns();
	sc->thread = kthread_create(vgpu_sched_thread, sc, "vgpu-sched/%u", minor);
	if (IS_ERR(sc->thread)) {
		int ret = PTR_ERR(sc->thread);

		kfree(sc);
		return ERR_PTR(ret);
	}
	get_task_struct(sc->thread);
	/* Decisions on time: a low real-time priority, like other I/O schedulers' threads. */
	sched_set_fifo_low(sc->thread);
	list_add_tail(&sc->node, &vgpu_scheds);
	wake_up_process(sc->thread);
	return sc;
}

/* A new slice GPU joins its real GPU's scheduler (SLICE_NEW). */
int vgpu_sched_attach(struct vgpu_gpu *g)
{
	struct vgpu_sched *sc;

	mutex_lock(&vgpu_scheds_lock);
	sc = vgpu_sched_find(g->real_minor, true);
	mutex_unlock(&vgpu_scheds_lock);
	if (IS_ERR(sc))
		return PTR_ERR(sc);
	mutex_lock(&sc->lock);
	vgpu_slice_get(g->slice);
	g->vtime = sc->vclock;
	list_add_tail(&g->sched_node, &sc->members);
	WRITE_ONCE(g->sched, sc);
	mutex_unlock(&sc->lock);
	vgpu_sched_wake(sc);
	return 0;
}

/*
 * The slice is removed: it leaves the scheduler, runs again (unmanaged),
 * and its blocked doorbell writers wake (and get SIGBUS: s->removed).
 */
void vgpu_sched_detach(struct vgpu_gpu *g)
{
	struct vgpu_sched *sc = g->sched;

	if (!sc)
		return;
	mutex_lock(&sc->lock);
	list_del_init(&g->sched_node);
	if (sc->cur == g) {
		sc->cur = NULL;
		atomic64_inc(&sc->switches);
	}
	vgpu_compute_resume(g);
	mutex_unlock(&sc->lock);
	wake_up_all(&g->run_wq);
	vgpu_sched_wake(sc);
	/* g->sched stays: kicks of a removed slice's late allocations are harmless. */
	vgpu_slice_put(g->slice);
}

int vgpu_sched_set_compute(struct vgpu_gpu *g, u32 policy, u32 bp, u32 priority)
{
	struct vgpu_sched *sc = g->sched;

	if (!sc)
		return -ENODEV;
	mutex_lock(&sc->lock);
	WRITE_ONCE(g->policy, policy);
	WRITE_ONCE(g->bp, bp);
	WRITE_ONCE(g->priority, priority);
	if (policy == VGPU_COMPUTE_NONE) {
		if (sc->cur == g)
			sc->cur = NULL;
		vgpu_compute_resume(g);
	}
	mutex_unlock(&sc->lock);
	vgpu_sched_wake(sc);
	return 0;
}

u32 vgpu_sched_layers_of(struct vgpu_gpu *g)
{
	struct vgpu_sched *sc = READ_ONCE(g->sched);

	return sc ? READ_ONCE(sc->layers) : VGPU_SCHED_L_ALL;
}

static void vgpu_sched_fill(struct vgpu_sched *sc, struct vgpu_sched_info *out)
{
	out->real_minor = sc->real_minor;
	out->period_us = (u32)div_u64(READ_ONCE(sc->period_ns), NSEC_PER_USEC);
	out->layers = READ_ONCE(sc->layers);
	out->switches = atomic64_read(&sc->switches);
	out->cpu_ns = READ_ONCE(sc->thread->se.sum_exec_runtime);
}

/* debugfs "sched": one line per scheduler, then the RM calls made. */
void vgpu_sched_show_stats(struct seq_file *m)
{
	struct vgpu_sched *sc;

	mutex_lock(&vgpu_scheds_lock);
	list_for_each_entry(sc, &vgpu_scheds, node) {
		struct vgpu_sched_stats st;

		mutex_lock(&sc->lock);
		st = sc->st;
		mutex_unlock(&sc->lock);
		seq_printf(m, "sched %u cpu_ns %llu switches %lld loops %llu kicks %llu decisions %llu polls %llu decide_ns %llu wants_ns %llu switch_ns %llu finish_ns %llu others_ns %llu poll_ns %llu\n",
			   sc->real_minor,
			   READ_ONCE(sc->thread->se.sum_exec_runtime),
			   (long long)atomic64_read(&sc->switches), st.loops,
			   st.kicks, st.decisions, st.polls, st.decide_ns,
			   st.wants_ns, st.switch_ns, st.finish_ns,
			   st.others_ns, st.poll_ns);
	}
	mutex_unlock(&vgpu_scheds_lock);
	seq_printf(m, "rm_schedule %lld rm_preempt %lld zaps %lld zap_ns %lld\n",
		   (long long)atomic64_read(&vgpu_nr_rm_schedule),
		   (long long)atomic64_read(&vgpu_nr_rm_preempt),
		   (long long)atomic64_read(&vgpu_nr_zaps),
		   (long long)atomic64_read(&vgpu_zap_ns));
}

/* Is minor a GPU the driver enumerates?  (Its minors follow that order.) */
static bool vgpu_minor_exists(u32 minor)
{
	nv_gpu_info_t *info = kcalloc(NVIDIA_MAX_GPUS, sizeof(*info), GFP_KERNEL);
	bool ret;

	if (!info)
		return false;
	ret = minor < vgpu_rm_enumerate(info);
	kfree(info);
	return ret;
}

/**
 * vgpu_sched_set - SCHED_SET: period and/or layers of a real GPU's scheduler
 *
 * Return: 0, -ENODEV (no such GPU) or -ENOMEM.  A changed period restarts
 * the period; changed layers resume every member, and the next decision
 * pauses the others with the new layers.
 */
int vgpu_sched_set(u32 real_minor, const u32 *period_us, const u32 *layers,
		   struct vgpu_sched_info *out)
{
	struct vgpu_sched *sc;
	struct vgpu_gpu *g;

	mutex_lock(&vgpu_scheds_lock);
	sc = vgpu_sched_find(real_minor, false);
	if (!sc) {
		sc = vgpu_minor_exists(real_minor) ?
		     vgpu_sched_find(real_minor, true) : ERR_PTR(-ENODEV);
	}
	mutex_unlock(&vgpu_scheds_lock);
	if (IS_ERR(sc))
		return PTR_ERR(sc);

	mutex_lock(&sc->lock);
	if (period_us) {
		WRITE_ONCE(sc->period_ns, (u64)*period_us * NSEC_PER_USEC);
		sc->period_start = ktime_get_ns();
		list_for_each_entry(g, &sc->members, sched_node)
			g->used_ns = 0;
	}
	if (layers && *layers != sc->layers) {
		WRITE_ONCE(sc->layers, *layers);
		list_for_each_entry(g, &sc->members, sched_node)
			vgpu_compute_resume(g);
		sc->cur = NULL;
	}
	vgpu_sched_fill(sc, out);
	mutex_unlock(&sc->lock);
	vgpu_sched_wake(sc);
	return 0;
}

int vgpu_sched_get(u32 real_minor, struct vgpu_sched_info *out)
{
	struct vgpu_sched *sc;

	mutex_lock(&vgpu_scheds_lock);
	sc = vgpu_sched_find(real_minor, false);
	if (sc)
		vgpu_sched_fill(sc, out);
	mutex_unlock(&vgpu_scheds_lock);
	return sc ? 0 : -ENOENT;
}

/* The scheduler with the smallest minor >= from_minor (dumps). */
int vgpu_sched_get_next(u32 from_minor, struct vgpu_sched_info *out)
{
	struct vgpu_sched *sc, *best = NULL;

	mutex_lock(&vgpu_scheds_lock);
	list_for_each_entry(sc, &vgpu_scheds, node)
		if (sc->real_minor >= from_minor &&
		    (!best || sc->real_minor < best->real_minor))
			best = sc;
	if (best)
		vgpu_sched_fill(best, out);
	mutex_unlock(&vgpu_scheds_lock);
	return best ? 0 : -ENOENT;
}

/* Module exit: slices are gone (vgpu_slices_exit), so are the members. */
void vgpu_sched_exit(void)
{
	struct vgpu_sched *sc, *tmp;

	mutex_lock(&vgpu_scheds_lock);
	list_for_each_entry_safe(sc, tmp, &vgpu_scheds, node) {
		list_del(&sc->node);
		kthread_stop(sc->thread);
		put_task_struct(sc->thread);
		kfree(sc);
	}
	mutex_unlock(&vgpu_scheds_lock);
}
