// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs.c - /sys/kernel/debug/nvsim/{state,stats,busy}: the simulator's truth.
 *
 * state is parsed by tests; its line format is fixed:
 *
 *   objects <n>
 *   clients <n>
 *   mappings <n>
 *   user_client_objects user <n> user_root <n> kernel <n>
 *                         objects of clients a user file owns, by the
 *                         privilege of the call that made them
 *   privileged_channels <n>   channels made at USER_ROOT or KERNEL
 *   vas_global <n>        devices on their GPU's global VA space
 *   vas_foreign <n>       devices on another client's VA space
 *   dmabufs <n>           live dma-bufs (NV_ESC_EXPORT_TO_DMABUF_FD, dmabuf.c)
 *   dmabuf_dups <n>       handles dup'd into RM's internal client for them
 *   dmabuf_orphans <n>    released dma-bufs whose dups stay until the GPU stops
 *   gpu <i> fb_total <bytes> fb_used <bytes>              (one per GPU)
 *   pid <tgid> gpu <i> fb_used <bytes>                    (fb_used > 0 only)
 *   tsg <gpu> <tsgid> client 0x<hclient> handle 0x<h> enabled <0|1> timeslice_us <n> interleave <n> channels <n> errors <n>
 *
 * busy (docs/compute.md section 1), per GPU: its line, its TSGs, the
 * processes with a client that ran or run TSGs on it:
 *
 *   gpu <index> busy_ns <n> now_ns <ktime>
 *   tsg <gpu> <tsg id> 0x<hClient> 0x<handle> tgid <n> busy_ns <n> items <n> enabled <0|1>
 *   pid <tgid> <gpu> busy_ns <n>
 *
 * delay_nr, delay_uvm, delay_ms, delay_out (0600, written by tests):
 * nvsim_test_delay;
 * delay_count (0600): delay only that many more calls (0: every one; -1
 * once they are used up: none);
 * delay_waiting (0400): calls asleep in the delay now.
 * fail_* (0600): fault injection, fault.c.
 * instance_rotate (0600): device instance = (minor + n) % GPUs (gpu.c); -EBUSY
 * while any object exists.
 *
 * objects counts every RM object, clients included (and the TSGs the driver
 * makes for channels allocated under a device, which show handle 0x0);
 * mappings counts mapping contexts plus live mmap()ed areas (UVM ranges
 * included).  All three are 0 when nothing is open.
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/delay.h>
#include <linux/ioctl.h>

#include "nvsim.h"

static struct dentry *nvsim_debugfs_dir;

static int nvsim_state_show(struct seq_file *m, void *v)
{
	struct nvsim_pid_fb *pe;
	struct nvsim_tsg *tsg;
	unsigned int i;

	mutex_lock(&nvsim.lock);
	seq_printf(m, "objects %d\n", atomic_read(&nvsim.nr_objects));
	seq_printf(m, "clients %d\n", atomic_read(&nvsim.nr_clients));
	seq_printf(m, "mappings %d\n", atomic_read(&nvsim.nr_mappings));
	seq_printf(m, "user_client_objects user %d user_root %d kernel %d\n",
		   atomic_read(&nvsim.nr_user_client_objs[NVSIM_PRIV_USER]),
		   atomic_read(&nvsim.nr_user_client_objs[NVSIM_PRIV_USER_ROOT]),
		   atomic_read(&nvsim.nr_user_client_objs[NVSIM_PRIV_KERNEL]));
	seq_printf(m, "privileged_channels %d\n",
		   atomic_read(&nvsim.nr_privileged_channels));
	seq_printf(m, "vas_global %d\n", atomic_read(&nvsim.nr_vas_global));
	seq_printf(m, "vas_foreign %d\n", atomic_read(&nvsim.nr_vas_foreign));
	seq_printf(m, "p2p %d\n", atomic_read(&nvsim.nr_p2p));
	seq_printf(m, "p2p_chosen_ids %d\n", atomic_read(&nvsim.nr_p2p_chosen_ids));
	seq_printf(m, "uvm_peers %d\n", atomic_read(&nvsim.nr_uvm_peers));
	seq_printf(m, "exports %d\n", atomic_read(&nvsim.nr_exports));
	seq_printf(m, "dmabufs %d\n", atomic_read(&nvsim.nr_dmabufs));
	seq_printf(m, "dmabuf_dups %d\n", atomic_read(&nvsim.nr_dmabuf_dups));
	seq_printf(m, "dmabuf_orphans %d\n", atomic_read(&nvsim.nr_dmabuf_orphans));
	for (i = 0; i < nvsim.num_gpus; i++)
		seq_printf(m, "gpu %u fb_total %llu fb_used %llu\n", i,
			   nvsim.gpus[i].fb_total, nvsim.gpus[i].fb_used);
	list_for_each_entry(pe, &nvsim.pid_fb, node)
		if (pe->bytes)
			seq_printf(m, "pid %d gpu %u fb_used %llu\n", pe->tgid,
				   pe->gpu, pe->bytes);
	for (i = 0; i < nvsim.num_gpus; i++) {
		struct nvsim_engine *eng = &nvsim.gpus[i].engine;

		spin_lock_irq(&eng->lock);
		list_for_each_entry(tsg, &nvsim.gpus[i].tsgs, gpu_node)
			seq_printf(m, "tsg %u %u client 0x%x handle 0x%x enabled %d timeslice_us %llu interleave %u channels %u errors %llu\n",
				   i, tsg->id, tsg->hClient, tsg->handle,
				   tsg->enabled ? 1 : 0, tsg->timeslice_us,
				   tsg->interleave, tsg->nr_channels,
				   tsg->errors);
		spin_unlock_irq(&eng->lock);
	}
	mutex_unlock(&nvsim.lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(nvsim_state);

static int nvsim_busy_show(struct seq_file *m, void *v)
{
	struct nvsim_pid_busy *pb;
	struct nvsim_tsg *tsg;
	unsigned int i;

	mutex_lock(&nvsim.lock);
	for (i = 0; i < nvsim.num_gpus; i++) {
		struct nvsim_engine *eng = &nvsim.gpus[i].engine;

		spin_lock_irq(&eng->lock);
		seq_printf(m, "gpu %u busy_ns %llu now_ns %llu\n", i,
			   eng->busy_ns, ktime_get_ns());
		list_for_each_entry(tsg, &nvsim.gpus[i].tsgs, gpu_node)
			seq_printf(m, "tsg %u %u 0x%x 0x%x tgid %d busy_ns %llu items %llu enabled %d\n",
				   i, tsg->id, tsg->hClient, tsg->handle,
				   tsg->tgid, tsg->busy_ns, tsg->items,
				   tsg->enabled ? 1 : 0);
		list_for_each_entry(pb, &nvsim.pid_busy, node)
			if (pb->gpu == i)
				seq_printf(m, "pid %d %u busy_ns %llu\n",
					   pb->tgid, i, pb->busy_ns);
		spin_unlock_irq(&eng->lock);
	}
	mutex_unlock(&nvsim.lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(nvsim_busy);

static int nvsim_stats_show(struct seq_file *m, void *v)
{
	unsigned int i;

	mutex_lock(&nvsim.lock);
	seq_printf(m, "ioctls %lld\n", atomic64_read(&nvsim.nr_ioctls));
	seq_printf(m, "uvm_pages %lld\n", atomic64_read(&nvsim.uvm_pages));
	seq_printf(m, "release %s\n", nvsim_rel->name);
	seq_printf(m, "chip %s\n", nvsim_arch->chip);
	seq_printf(m, "last_control 0x%x\n", nvsim.last_control);
	seq_printf(m, "last_class 0x%x\n", nvsim.last_class);
	seq_printf(m, "memblock_size %llu\n", nvsim.memblock_size);
	seq_printf(m, "store_bytes %llu\n", nvsim_store_bytes());
	seq_printf(m, "callbacks %d\n", nvsim.callbacks ? 1 : 0);
	for (i = 0; i < nvsim.num_gpus; i++)
		seq_printf(m, "gpu %u gpu_id 0x%x open_count %u\n", i,
			   nvsim.gpus[i].gpu_id, nvsim.gpus[i].open_count);
	mutex_unlock(&nvsim.lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(nvsim_stats);

/* instance_rotate (gpu.c): changed only while nvsim holds no object. */
static int nvsim_rotate_get(void *data, u64 *val)
{
	*val = READ_ONCE(nvsim.instance_rotate);
	return 0;
}

static int nvsim_rotate_set(void *data, u64 val)
{
	int ret = 0;

	if (val >= nvsim.num_gpus)
		return -EINVAL;
	mutex_lock(&nvsim.lock);
	if (atomic_read(&nvsim.nr_objects))
		ret = -EBUSY;
	else
		WRITE_ONCE(nvsim.instance_rotate, (u32)val);
	mutex_unlock(&nvsim.lock);
	return ret;
}
DEFINE_DEBUGFS_ATTRIBUTE(nvsim_rotate_fops, nvsim_rotate_get, nvsim_rotate_set,
			 "%llu\n");

/* debugfs is best effort: the driver works without it. */
void nvsim_debugfs_init(void)
{
	nvsim_debugfs_dir = debugfs_create_dir("nvsim", NULL);
	debugfs_create_file("state", 0444, nvsim_debugfs_dir, NULL,
			    &nvsim_state_fops);
	debugfs_create_file("stats", 0444, nvsim_debugfs_dir, NULL,
			    &nvsim_stats_fops);
	debugfs_create_file("busy", 0444, nvsim_debugfs_dir, NULL,
			    &nvsim_busy_fops);
	debugfs_create_u32("delay_nr", 0600, nvsim_debugfs_dir, &nvsim.delay_nr);
	debugfs_create_u32("delay_uvm", 0600, nvsim_debugfs_dir, &nvsim.delay_uvm);
	debugfs_create_u32("delay_ms", 0600, nvsim_debugfs_dir, &nvsim.delay_ms);
	debugfs_create_atomic_t("delay_count", 0600, nvsim_debugfs_dir,
				&nvsim.delay_count);
	debugfs_create_atomic_t("delay_waiting", 0400, nvsim_debugfs_dir,
				&nvsim.delay_waiting);
	debugfs_create_u32("delay_out", 0600, nvsim_debugfs_dir, &nvsim.delay_out);
	debugfs_create_file("instance_rotate", 0600, nvsim_debugfs_dir, NULL,
			    &nvsim_rotate_fops);
	nvsim_fault_debugfs_init(nvsim_debugfs_dir);
}

/**
 * nvsim_test_delay - a test hook, not a model of the driver
 * @nr: the escape (NV nodes: the ioctl's own number, XFER_CMD for an XFER)
 *	or the UVM command
 * @uvm: which of the two
 *
 * When debugfs delay_nr (or delay_uvm) names this call, sleep delay_ms
 * before the parameters are copied in: the window in which a hostile
 * sibling of the caller works (between vgpu.ko's decision and the driver's
 * read) becomes wide enough for a test to hit every time.  The real driver
 * has such a window too, only shorter.  With delay_count set, only that
 * many calls sleep (a race between two callers of the same escape: the
 * first sleeps, the second overtakes it); delay_waiting tells a test that
 * a call is asleep now, so it need not guess with a timer.
 *
 * With delay_out set, the sleep is taken after the results are copied out
 * instead (nvsim_test_delay_out): the window between the driver's write of
 * its results and the caller's read of them, in which a sibling can rewrite
 * them once the copy-out made the page writable.
 */
static void nvsim_test_sleep(u32 nr, bool uvm, bool out)
{
	u32 ms = READ_ONCE(nvsim.delay_ms);
	u32 want = uvm ? READ_ONCE(nvsim.delay_uvm) : READ_ONCE(nvsim.delay_nr);
	int c;

	if (!ms || nr != want || !READ_ONCE(nvsim.delay_out) != !out)
		return;
	/* delay_count: 0 every call; n > 0 n more; -1 (n used up) none. */
	c = atomic_read(&nvsim.delay_count);
	do {
		if (c < 0)
			return;
	} while (c && !atomic_try_cmpxchg(&nvsim.delay_count, &c,
					  c == 1 ? -1 : c - 1));
	atomic_inc(&nvsim.delay_waiting);
	msleep_interruptible(ms);
	atomic_dec(&nvsim.delay_waiting);
}

void nvsim_test_delay(u32 nr, bool uvm)
{
	nvsim_test_sleep(nr, uvm, false);
}

void nvsim_test_delay_out(u32 nr, bool uvm)
{
	nvsim_test_sleep(nr, uvm, true);
}

void nvsim_debugfs_exit(void)
{
	debugfs_remove_recursive(nvsim_debugfs_dir);
}
