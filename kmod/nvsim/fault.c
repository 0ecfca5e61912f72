// SPDX-License-Identifier: GPL-2.0
/*
 * fault.c - fault injection: fail the Nth driver call of a kind.
 *
 * A test hook, not a model of the driver: it lets a test make the driver
 * refuse one chosen call (the Nth of its kind since the switch was armed)
 * so that whoever stacks on nvsim (vgpu.ko) can be shown to unwind every
 * failure of the driver below it.  The injected failure is the one the
 * real driver gives when it fails at the entry of that call, before it
 * makes anything:
 *
 *  - RM calls (RM_ALLOC, RM_FREE, RM_CONTROL, RM_DUP_OBJECT,
 *    RM_ALLOC_MEMORY, RM_VID_HEAP_CONTROL, RM_MAP_MEMORY, RM_UNMAP_MEMORY),
 *    from a file (escape) or from the kernel entry point (rmops.c): the
 *    status goes to the parameters' status field, the ioctl returns 0, no
 *    object, handle, mapping context or FB is made and the parameters'
 *    other out fields are left as the caller passed them.  This is
 *    rmapiAllocWithSecInfo() (src/nvidia/src/kernel/rmapi/alloc_free.c)
 *    failing its pLockInfo allocation, NV_ERR_NO_MEMORY, before _rmAlloc();
 *    the control, free, dup and map entries fail the same way in their
 *    prologue.
 *  - UVM ioctls: the status goes to rmStatus, the ioctl returns 0 and the
 *    handler does not run (kernel-open/nvidia-uvm/uvm.c: uvm_ioctl() routes
 *    to uvm_api_*(), whose NV_STATUS is written back as rmStatus).
 *  - ESC (any escape of nvidiactl/nvidiaN by number, the non-RM ones such
 *    as ATTACH_GPUS_TO_FD included), OPEN, MMAP, UVM_OPEN, UVM_MMAP: the
 *    call fails with an errno before anything is made (nvidia_ioctl(),
 *    nvidia_open(), nvidia_mmap() in kernel-open/nvidia/nv.c and
 *    nv-mmap.c return -ENOMEM when their allocations fail).
 *
 * Knobs, /sys/kernel/debug/nvsim/ (0600):
 *
 *   fail_kind     KIND[,KIND...] or KIND:NUMBER (write; read back).  KIND
 *                 is one of nvsim_fault_names[] below, or ANY (all of them);
 *                 a call of any listed kind matches.  NUMBER (decimal or
 *                 0x..., one KIND only) narrows it: the class (RM_ALLOC, RM_ALLOC_MEMORY),
 *                 the control command (RM_CONTROL), the NVOS32 function
 *                 (RM_VID_HEAP_CONTROL), the UVM command (UVM), the escape
 *                 number (ESC), the minor (OPEN).  Other kinds take none.
 *   fail_nth      N: the Nth matching call fails; writing it arms the switch
 *                 and zeroes fail_hits, fail_injected and fail_last; 0
 *                 disarms (the counts stay readable).
 *   fail_times    how many matching calls fail from the Nth on (default 1;
 *                 0: every one until disarmed).
 *   fail_status   the NV_STATUS for RM and UVM calls (default 0x51,
 *                 NV_ERR_NO_MEMORY); for the errno kinds a positive errno
 *                 (default ENOMEM).  0: the default.
 *   fail_caller   0 any, 1 file operations only (user space and whoever
 *                 calls through a file, vgpu.ko's forwarding included),
 *                 2 the kernel entry point (rmops.c) only.
 *   fail_pid      only calls made by this thread group (0: any); a test
 *                 sets its own, so that no other task's call is counted.
 *   fail_hits     (read) matching calls seen since armed.
 *   fail_injected (read) calls failed since armed.
 *   fail_last     (read) the last call failed: "KIND 0xNUMBER file|kernel"
 *                 (the caller, as fail_caller tells them), or "none".
 *
 * Cost when disarmed: one static branch per hook (nvsim_fault_key).
 */
#include <linux/bitops.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/jump_label.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "nvsim.h"

DEFINE_STATIC_KEY_FALSE(nvsim_fault_key);

static const char * const nvsim_fault_names[NVSIM_FK_NR] = {
	[NVSIM_FK_OPEN] = "OPEN",
	[NVSIM_FK_MMAP] = "MMAP",
	[NVSIM_FK_ESC] = "ESC",
	[NVSIM_FK_RM_ALLOC] = "RM_ALLOC",
	[NVSIM_FK_RM_FREE] = "RM_FREE",
	[NVSIM_FK_RM_CONTROL] = "RM_CONTROL",
	[NVSIM_FK_RM_DUP_OBJECT] = "RM_DUP_OBJECT",
	[NVSIM_FK_RM_ALLOC_MEMORY] = "RM_ALLOC_MEMORY",
	[NVSIM_FK_RM_VID_HEAP_CONTROL] = "RM_VID_HEAP_CONTROL",
	[NVSIM_FK_RM_MAP_MEMORY] = "RM_MAP_MEMORY",
	[NVSIM_FK_RM_UNMAP_MEMORY] = "RM_UNMAP_MEMORY",
	[NVSIM_FK_UVM_OPEN] = "UVM_OPEN",
	[NVSIM_FK_UVM_MMAP] = "UVM_MMAP",
	[NVSIM_FK_UVM] = "UVM",
};

static struct {
	spinlock_t lock;
	struct mutex cfg;       /* serialises the writers and the static key */
	u32 kinds;              /* BIT(enum nvsim_fault_kind) */
	bool has_num;
	u32 num;
	u32 nth;
	u32 times;
	u32 status;
	u32 caller;
	u32 pid;
	u64 hits;
	u64 injected;
	int last_kind;          /* -1: none since armed */
	u32 last_num;
	bool last_kernel;
} nvsim_fault = {
	.lock = __SPIN_LOCK_UNLOCKED(nvsim_fault.lock),
	.cfg = __MUTEX_INITIALIZER(nvsim_fault.cfg),
	.kinds = GENMASK(NVSIM_FK_NR - 1, 0),
	.times = 1,
	.last_kind = -1,
};

static bool nvsim_fault_hit(enum nvsim_fault_kind k, u32 num, bool kernel)
{
	unsigned long flags;
	bool hit = false;
	u64 n = 0;

	spin_lock_irqsave(&nvsim_fault.lock, flags);
	if (!nvsim_fault.nth)
		goto out;
	if (!(nvsim_fault.kinds & BIT(k)))
		goto out;
	if (nvsim_fault.has_num && nvsim_fault.num != num)
		goto out;
	if ((nvsim_fault.caller == 1 && kernel) ||
	    (nvsim_fault.caller == 2 && !kernel))
		goto out;
	if (nvsim_fault.pid && task_tgid_nr(current) != nvsim_fault.pid)
		goto out;
	n = ++nvsim_fault.hits;
	if (n < nvsim_fault.nth)
		goto out;
	if (nvsim_fault.times && n >= (u64)nvsim_fault.nth + nvsim_fault.times)
		goto out;
	nvsim_fault.injected++;
	nvsim_fault.last_kind = k;
	nvsim_fault.last_num = num;
	nvsim_fault.last_kernel = kernel;
	hit = true;
out:
	spin_unlock_irqrestore(&nvsim_fault.lock, flags);
	if (hit)
		pr_info_ratelimited("nvsim: fault injected: %s 0x%x (call %llu, pid %d)\n",
				    nvsim_fault_names[k], num, n,
				    task_tgid_nr(current));
	return hit;
}

/* The NV_STATUS to fail an RM or UVM call with, NV_OK to let it run. */
NV_STATUS __nvsim_fault_rm(enum nvsim_fault_kind k, u32 num, bool kernel)
{
	u32 st;

	if (!nvsim_fault_hit(k, num, kernel))
		return NV_OK;
	st = READ_ONCE(nvsim_fault.status);
	return st ? st : NV_ERR_NO_MEMORY;
}

/* The -errno to fail an open, mmap or escape with, 0 to let it run. */
int __nvsim_fault_errno(enum nvsim_fault_kind k, u32 num)
{
	u32 e;

	if (!nvsim_fault_hit(k, num, false))
		return 0;
	e = READ_ONCE(nvsim_fault.status);
	return e && e < MAX_ERRNO ? -(int)e : -ENOMEM;
}

/* ------------------------------------------------------------- debugfs */

static ssize_t nvsim_fault_kind_read(struct file *f, char __user *ubuf,
				     size_t len, loff_t *ppos)
{
	char buf[256];
	unsigned int i;
	int n = 0;

	mutex_lock(&nvsim_fault.cfg);
	if (nvsim_fault.kinds == GENMASK(NVSIM_FK_NR - 1, 0))
		n = scnprintf(buf, sizeof(buf), "ANY");
	else
		for (i = 0; i < NVSIM_FK_NR; i++)
			if (nvsim_fault.kinds & BIT(i))
				n += scnprintf(buf + n, sizeof(buf) - n, "%s%s",
					       n ? "," : "",
					       nvsim_fault_names[i]);
	if (nvsim_fault.has_num)
		n += scnprintf(buf + n, sizeof(buf) - n, ":0x%x", nvsim_fault.num);
	n += scnprintf(buf + n, sizeof(buf) - n, "\n");
	mutex_unlock(&nvsim_fault.cfg);
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static ssize_t nvsim_fault_kind_write(struct file *f, const char __user *ubuf,
				      size_t len, loff_t *ppos)
{
	char buf[256], *colon, *s, *tok;
	unsigned int i;
	bool has_num = false;
	u32 kinds = 0, num = 0;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	strim(buf);
	colon = strchr(buf, ':');
	if (colon) {
		*colon = '\0';
		if (kstrtou32(colon + 1, 0, &num))
			return -EINVAL;
		has_num = true;
	}
	s = buf;
	while ((tok = strsep(&s, ",")) != NULL) {
		if (!strcmp(tok, "ANY")) {
			kinds |= GENMASK(NVSIM_FK_NR - 1, 0);
			continue;
		}
		for (i = 0; i < NVSIM_FK_NR; i++)
			if (!strcmp(tok, nvsim_fault_names[i]))
				break;
		if (i == NVSIM_FK_NR)
			return -EINVAL;
		kinds |= BIT(i);
	}
	/* A number names a class, command or minor of one kind. */
	if (!kinds || (has_num && hweight32(kinds) != 1))
		return -EINVAL;
	mutex_lock(&nvsim_fault.cfg);
	spin_lock_irq(&nvsim_fault.lock);
	nvsim_fault.kinds = kinds;
	nvsim_fault.has_num = has_num;
	nvsim_fault.num = num;
	spin_unlock_irq(&nvsim_fault.lock);
	mutex_unlock(&nvsim_fault.cfg);
	return len;
}

static ssize_t nvsim_fault_last_read(struct file *f, char __user *ubuf,
				     size_t len, loff_t *ppos)
{
	char buf[48];
	int n;

	spin_lock_irq(&nvsim_fault.lock);
	if (nvsim_fault.last_kind < 0)
		n = scnprintf(buf, sizeof(buf), "none\n");
	else
		n = scnprintf(buf, sizeof(buf), "%s 0x%x %s\n",
			      nvsim_fault_names[nvsim_fault.last_kind],
			      nvsim_fault.last_num,
			      nvsim_fault.last_kernel ? "kernel" : "file");
	spin_unlock_irq(&nvsim_fault.lock);
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations nvsim_fault_last_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = nvsim_fault_last_read,
	.llseek = default_llseek,
};

static const struct file_operations nvsim_fault_kind_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = nvsim_fault_kind_read,
	.write = nvsim_fault_kind_write,
	.llseek = default_llseek,
};

static int nvsim_fault_nth_get(void *data, u64 *val)
{
	*val = READ_ONCE(nvsim_fault.nth);
	return 0;
}

/* Arming zeroes the counts, disarming keeps them; the key follows nth. */
static int nvsim_fault_nth_set(void *data, u64 val)
{
	if (val > U32_MAX)
		return -EINVAL;
	mutex_lock(&nvsim_fault.cfg);
	spin_lock_irq(&nvsim_fault.lock);
	nvsim_fault.nth = val;
	if (val) {
		nvsim_fault.hits = 0;
		nvsim_fault.injected = 0;
		nvsim_fault.last_kind = -1;
	}
	spin_unlock_irq(&nvsim_fault.lock);
	if (val)
		static_branch_enable(&nvsim_fault_key);
	else
		static_branch_disable(&nvsim_fault_key);
	mutex_unlock(&nvsim_fault.cfg);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(nvsim_fault_nth_fops, nvsim_fault_nth_get,
			 nvsim_fault_nth_set, "%llu\n");

static int nvsim_fault_hits_get(void *data, u64 *val)
{
	spin_lock_irq(&nvsim_fault.lock);
	*val = data ? nvsim_fault.injected : nvsim_fault.hits;
	spin_unlock_irq(&nvsim_fault.lock);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(nvsim_fault_count_fops, nvsim_fault_hits_get, NULL,
			 "%llu\n");

void nvsim_fault_debugfs_init(struct dentry *dir)
{
	debugfs_create_file("fail_kind", 0600, dir, NULL, &nvsim_fault_kind_fops);
	debugfs_create_file_unsafe("fail_nth", 0600, dir, NULL,
				   &nvsim_fault_nth_fops);
	debugfs_create_u32("fail_times", 0600, dir, &nvsim_fault.times);
	debugfs_create_x32("fail_status", 0600, dir, &nvsim_fault.status);
	debugfs_create_u32("fail_caller", 0600, dir, &nvsim_fault.caller);
	debugfs_create_u32("fail_pid", 0600, dir, &nvsim_fault.pid);
	debugfs_create_file_unsafe("fail_hits", 0400, dir, NULL,
				   &nvsim_fault_count_fops);
	debugfs_create_file_unsafe("fail_injected", 0400, dir, (void *)1,
				   &nvsim_fault_count_fops);
	debugfs_create_file("fail_last", 0400, dir, NULL, &nvsim_fault_last_fops);
}

/* At unload: the key off (nothing can call in any more). */
void nvsim_fault_exit(void)
{
	static_branch_disable(&nvsim_fault_key);
}
