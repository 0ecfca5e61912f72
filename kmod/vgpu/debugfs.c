// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs.c - /sys/kernel/debug/vgpu/state.  Fixed lines the VM harness
 * reads (slices, files, objects, charges), then one line per slice GPU:
 *   slice <id> gpu <i> minor <real> limit <b> used <b> peak <b> allocs <n> refusals <n>
 * and per slice: slice <id> files <n> uvm_mapped <b> usermode_maps <n>
 *   quarantined <0|1>
 * Compute: tsgs <n> and userd_maps <n> (all slices; leak evidence), and
 * per slice GPU:
 *   slice <id> gpu <i> compute <policy> bp <n> prio <n> tsgs <n> channels <n>
 *     paused <0|1> gpu_time_ns <n> doorbell_traps <n>
 * Mediation: proxies <n> (fdxlate.c: live proxies; leak evidence once
 * every descriptor is closed) and calls_broken <n> (call.c: calls whose
 * parameter page was unmapped under the driver, since load).  UVM:
 * ranges <n> (managed.c: managed ranges watched) and reapers <n> (uvm.c:
 * UVM files waiting for their real file's last reference; ipc.c: control
 * files with exports, the same).  CUDA IPC: exports <n> (ipc.c: export
 * slots holding a charge).
 *
 * /sys/kernel/debug/vgpu/sched: where each scheduler thread's time goes
 * (sched.c, struct vgpu_sched_stats), one line per real GPU, then the RM
 * scheduling calls and doorbell zaps made since load.
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include "vgpu.h"

atomic_t vgpu_nr_files = ATOMIC_INIT(0);
static struct dentry *vgpu_dbg;

static int vgpu_state_slice(struct vgpu_slice *s, void *arg)
{
	struct seq_file *m = arg;
	u32 i;

	seq_printf(m, "slice %u files %d uvm_mapped %lld usermode_maps %d quarantined %d\n",
		   s->id, atomic_read(&s->open_files),
		   (long long)atomic64_read(&s->uvm_mapped),
		   atomic_read(&s->usermode_maps),
		   atomic_read(&s->quarantined));
	for (i = 0; i < s->nr_gpus; i++) {
		struct vgpu_gpu *g = &s->gpus[i];

		seq_printf(m, "slice %u gpu %u minor %u limit %llu used %lld peak %lld allocs %lld refusals %lld\n",
			   s->id, i, g->real_minor, READ_ONCE(g->limit),
			   (long long)atomic64_read(&g->used),
			   (long long)atomic64_read(&g->peak),
			   (long long)atomic64_read(&g->allocs),
			   (long long)atomic64_read(&g->refusals));
		seq_printf(m, "slice %u gpu %u compute %u bp %u prio %u tsgs %u channels %u paused %d gpu_time_ns %lld doorbell_traps %lld\n",
			   s->id, i, READ_ONCE(g->policy), READ_ONCE(g->bp),
			   READ_ONCE(g->priority), READ_ONCE(g->nr_tsgs),
			   READ_ONCE(g->nr_channels), READ_ONCE(g->paused),
			   (long long)atomic64_read(&g->gpu_time_ns),
			   (long long)atomic64_read(&g->doorbell_traps));
	}
	return 0;
}

static int vgpu_state_show(struct seq_file *m, void *v)
{
	mutex_lock(&vgpu_slices_lock);
	seq_printf(m, "slices %u\n", vgpu_nr_slices());
	mutex_unlock(&vgpu_slices_lock);
	seq_printf(m, "files %d\n", atomic_read(&vgpu_nr_files));
	seq_printf(m, "objects %d\n", atomic_read(&vgpu_nr_objects));
	seq_printf(m, "charges %d\n", atomic_read(&vgpu_nr_charges));
	seq_printf(m, "tsgs %d\n", atomic_read(&vgpu_nr_tsgs));
	seq_printf(m, "userd_maps %d\n", atomic_read(&vgpu_nr_userd_maps));
	seq_printf(m, "proxies %d\n", atomic_read(&vgpu_nr_proxies));
	seq_printf(m, "ranges %d\n", atomic_read(&vgpu_nr_ranges));
	seq_printf(m, "reapers %d\n", atomic_read(&vgpu_nr_reapers));
	seq_printf(m, "exports %d\n", atomic_read(&vgpu_nr_exports));
	seq_printf(m, "calls_broken %lld\n", atomic64_read(&vgpu_nr_calls_broken));
	vgpu_slice_for_each_from(0, vgpu_state_slice, m);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(vgpu_state);

static int vgpu_sched_stats_show(struct seq_file *m, void *v)
{
	vgpu_sched_show_stats(m);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(vgpu_sched_stats);

void vgpu_debugfs_init(void)
{
	vgpu_dbg = debugfs_create_dir("vgpu", NULL);
	debugfs_create_file("state", 0444, vgpu_dbg, NULL, &vgpu_state_fops);
	debugfs_create_file("sched", 0444, vgpu_dbg, NULL, &vgpu_sched_stats_fops);
}

void vgpu_debugfs_exit(void)
{
	debugfs_remove_recursive(vgpu_dbg);
}
