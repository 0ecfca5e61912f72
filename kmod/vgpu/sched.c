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
 * The thread decides every quantum (1 ms or period/100, whichever is
 * larger), at the moment the running slice's fixed cap runs out or the
 * period ends, and at once when kicked (a trapped doorbell of a paused
 * slice, a new TSG, a changed setting).  Per decision:
 *  - charge the slot holder for the time since the last decision, if it
 *    wanted the GPU then;
 *  - at a period boundary, every member's used time restarts at 0;
 *  - pick: high priority before low; within a priority, burst slices below
 *    their floor first; then the smallest used/bp (share weights, fixed
 *    caps and burst floors alike); fixed slices only while used < cap;
 *    slices that do not want the GPU are skipped (work conservation);
 *  - a holder keeps the slot for a quantum at least, and then until its
 *    used/bp leads the best other's by period/2 (hysteresis), unless a
 *    higher class wants it, or it stops being eligible or wanting: this
 *    bounds switches (each one is a PREEMPT) to a few per period;
 *  - a high-priority holder that stops wanting keeps the slot for a short
 *    grace (VGPU_HIGH_GRACE_NS, at most a tenth of the period): online work
 *    arrives in bursts of launches with gaps between them, and giving the
 *    slot to a low slice in each gap costs the high one a switch (a
 *    PREEMPT of the low one) per launch;
 *  - when no other member wants the GPU, the thread sleeps until the
 *    holder's cap or the period ends: a paused slice's new work reaches it
 *    as a trapped doorbell (a kick), so polling would buy nothing;
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

#include "vgpu.h"

struct vgpu_sched {
	struct list_head node;          /* vgpu_scheds */
	u32 real_minor;
	struct mutex lock;
	struct list_head members;       /* vgpu_gpu.sched_node */
	u64 period_ns;                  /* lock; READ_ONCE */
	u32 layers;                     /* lock; READ_ONCE */
	struct vgpu_gpu *cur;           /* the slot's holder */
	bool cur_wanted;
	u64 cur_since;
	u64 period_start;
	u64 last_ns;
	atomic_t kick;
	atomic64_t switches;
	struct task_struct *thread;
};

static DEFINE_MUTEX(vgpu_scheds_lock);
static LIST_HEAD(vgpu_scheds);

#define VGPU_QUANTUM_MIN_NS     NSEC_PER_MSEC
/*
 * Hysteresis: within a class, the holder keeps the slot until its used/bp
 * is ahead of the best other's by period/VGPU_HYST_DIV (in used/bp units,
 * i.e. ns at 100 %).  A switch costs a PREEMPT and the engine's restart
 * (several ms on nvsim under TCG), so switching whenever the order flips
 * (every quantum) loses a large part of the GPU; this makes about four
 * slots per period for two saturating slices, and a holder that briefly
 * ran dry cannot take more than that lead when it is back.
 */
#define VGPU_HYST_DIV           2
#define VGPU_HIGH_GRACE_NS      (5 * NSEC_PER_MSEC)

static u64 vgpu_high_grace(u64 period)
{
	return min_t(u64, VGPU_HIGH_GRACE_NS, period / 10);
}

static u64 vgpu_quantum(u64 period)
{
	return max_t(u64, VGPU_QUANTUM_MIN_NS, period / 100);
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

static bool vgpu_eligible(struct vgpu_sched *sc, struct vgpu_gpu *g)
{
	if (READ_ONCE(g->policy) == VGPU_COMPUTE_FIXED)
		return g->used_ns < vgpu_bp_ns(sc->period_ns, READ_ONCE(g->bp));
	return true;
}

/* Smaller is better: priority, then class (burst below floor first). */
static u32 vgpu_rank(struct vgpu_sched *sc, struct vgpu_gpu *g)
{
	u32 r = READ_ONCE(g->priority) == VGPU_PRIORITY_HIGH ? 0 : 2;

	if (READ_ONCE(g->policy) != VGPU_COMPUTE_BURST ||
	    g->used_ns >= vgpu_bp_ns(sc->period_ns, READ_ONCE(g->bp)))
		r++;
	return r;
}

static u64 vgpu_ratio(struct vgpu_gpu *g)
{
	return div_u64(g->used_ns * VGPU_COMPUTE_BP_MAX, max_t(u32, READ_ONCE(g->bp), 1));
}

/* a before b? */
static bool vgpu_better(struct vgpu_sched *sc, struct vgpu_gpu *a,
			struct vgpu_gpu *b)
{
	u32 ra = vgpu_rank(sc, a), rb = vgpu_rank(sc, b);

	if (ra != rb)
		return ra < rb;
	return vgpu_ratio(a) < vgpu_ratio(b);
}

static struct vgpu_gpu *vgpu_pick(struct vgpu_sched *sc, u64 now)
{
	u64 min_slot = vgpu_quantum(sc->period_ns);
	u64 hyst = sc->period_ns / VGPU_HYST_DIV;
	struct vgpu_gpu *g, *best = NULL, *cur = sc->cur;

	list_for_each_entry(g, &sc->members, sched_node) {
		if (!vgpu_managed(g) || !g->wants || !vgpu_eligible(sc, g))
			continue;
		if (!best || vgpu_better(sc, g, best))
			best = g;
	}
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
		/* Unless a higher class wants in: a minimum slot, then hysteresis. */
		if (cur->wants && best != cur &&
		    vgpu_rank(sc, best) >= vgpu_rank(sc, cur) &&
		    (now - sc->cur_since < min_slot ||
		     vgpu_rank(sc, best) > vgpu_rank(sc, cur) ||
		     vgpu_ratio(cur) < vgpu_ratio(best) + hyst))
			return cur;
	}
	return best;
}

/* One decision; returns how long the thread may sleep (0: until kicked). */
static u64 vgpu_decide(struct vgpu_sched *sc)
{
	u64 now = ktime_get_ns(), period = sc->period_ns, sleep;
	struct vgpu_gpu *g, *cur = sc->cur, *next;
	bool any = false, others = false;

	lockdep_assert_held(&sc->lock);
	if (cur && sc->cur_wanted) {
		u64 d = now - sc->last_ns;

		cur->used_ns += d;
		atomic64_add(d, &cur->gpu_time_ns);
	}
	sc->last_ns = now;
	if (now - sc->period_start >= period) {
		sc->period_start = now;
		list_for_each_entry(g, &sc->members, sched_node)
			g->used_ns = 0;
	}
	list_for_each_entry(g, &sc->members, sched_node) {
		g->wants = vgpu_managed(g) &&
			   vgpu_compute_wants(g, now, period);
		if (g->wants)
			g->wanted_ns = now;
		any |= vgpu_managed(g);
	}

	next = vgpu_pick(sc, now);
	if (next != cur) {
		/*
		 * Off the runlist, the next one on, then wait for the PREEMPT:
		 * the engine goes from one to the other without idling.
		 */
		bool finish = cur && vgpu_compute_pause_begin(cur, sc->layers);

		if (next)
			vgpu_compute_resume(next);
		now = ktime_get_ns();
		if (finish)
			vgpu_compute_pause_finish(cur, sc->layers);
		sc->cur = next;
		sc->cur_since = now;
		sc->last_ns = now;
		atomic64_inc(&sc->switches);
	}
	sc->cur_wanted = next && next->wants;

	/* Exclusive slots: every other managed member is paused; NONE runs. */
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
	if (!any)
		return 0;

	/*
	 * Nobody else wants the GPU: nothing to decide before the cap or the
	 * period ends, or a kick (a trapped doorbell, a new TSG, a setting).
	 */
	sleep = others ? vgpu_quantum(period) : period;
	if (next && READ_ONCE(next->policy) == VGPU_COMPUTE_FIXED) {
		u64 cap = vgpu_bp_ns(period, READ_ONCE(next->bp));

		if (cap > next->used_ns)
			sleep = min(sleep, cap - next->used_ns);
	}
	sleep = min(sleep, sc->period_start + period - now);
	return max_t(u64, sleep, 50 * NSEC_PER_USEC);
}

static int vgpu_sched_thread(void *arg)
{
	struct vgpu_sched *sc = arg;
	u64 sleep;

	while (!kthread_should_stop()) {
		mutex_lock(&sc->lock);
		sleep = vgpu_decide(sc);
		mutex_unlock(&sc->lock);

		set_current_state(TASK_INTERRUPTIBLE);
		if (atomic_xchg(&sc->kick, 0) || kthread_should_stop()) {
			__set_current_state(TASK_RUNNING);
			continue;
		}
		if (sleep) {
			ktime_t t = ns_to_ktime(sleep);

			schedule_hrtimeout_range(&t, 20 * NSEC_PER_USEC,
						 HRTIMER_MODE_REL);
		} else {
			schedule();
		}
		__set_current_state(TASK_RUNNING);
	}
	return 0;
}

static void vgpu_sched_wake(struct vgpu_sched *sc)
{
	atomic_set(&sc->kick, 1);
	wake_up_process(sc->thread);
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
