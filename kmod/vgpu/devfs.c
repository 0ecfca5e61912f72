// SPDX-License-Identifier: GPL-2.0
/*
 * devfs.c - "vgpudev", one slice's device nodes as NVIDIA's user space
 * expects to see them (docs/containers.md, "NVIDIA's device numbers").
 *
 * NVIDIA's libcuda and libnvidia-ml stat /dev/nvidiactl and /dev/nvidia<N>
 * and refuse nodes whose rdev is not (195, 255) and (195, N); a slice's
 * nodes are vgpu.ko's own major and minors, and they must stay so: the
 * open has to reach vgpu.ko's cdev, and a container's device cgroup must
 * allow vgpu.ko's minors only, never major 195 (whose nodes open the real
 * driver).  So each inode here keeps vgpu.ko's device number as i_rdev,
 * which is all the kernel ever uses to open or permit it (chrdev_open's
 * kobj_lookup(cdev_map, inode->i_rdev), devcgroup_inode_permission's
 * imajor()/iminor(), and the v2 device program they feed), while getattr
 * reports NVIDIA's numbers to stat(), fstat() and statx(): only what user
 * space is told about the node changes, never what opening it does.
 *
 * One instance per mount, of one slice: "slice=<id>", decimal, required
 * (mount -t vgpudev -o slice=7 none DIR).  It shows nvidiactl, nvidia-uvm
 * (when the slice has UVM) and nvidia<i> for the slice's GPUs, as the slice
 * was at mount time; it holds no reference to the slice (a slice is
 * deleted under mounted nodes as under bind mounts of its devtmpfs nodes:
 * they stop opening).  Only a host administrator can mount it: the type has
 * no FS_USERNS_MOUNT, so the kernel requires CAP_SYS_ADMIN in the initial
 * user namespace (mount_capable(), fsconfig's FSCONFIG_CMD_CREATE and
 * mount(2) alike), and get_tree checks that again.  The superblock is
 * read-only (no mknod, chmod or utimes inside); a mount pins the module.
 */
#include <linux/module.h>
#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/fs_parser.h>
#include <linux/namei.h>
#include <linux/slab.h>
#include <linux/capability.h>

#include "vgpu.h"

#define VGPU_DEVFS_MAGIC 0x76677064     /* "vgpd" */
/* inode numbers: the root 1, a node 2 + its vgpu.ko minor (unique per live slice) */
#define VGPU_DEVFS_ROOT_INO 1

struct vgpu_devfs_ctx {
	u32 slice;
	bool have_slice;
};

/* What reaches stat(): NVIDIA's numbers.  i_rdev (vgpu.ko's) stays. */
static int vgpu_devfs_getattr(struct user_namespace *mnt_userns, const struct path *path,
			      struct kstat *stat, u32 request_mask, unsigned int query_flags)
{
	struct inode *inode = d_inode(path->dentry);

	generic_fillattr(mnt_userns, inode, stat);
	stat->rdev = (dev_t)(uintptr_t)inode->i_private;
	return 0;
}

static const struct inode_operations vgpu_devfs_node_iops = {
	.getattr = vgpu_devfs_getattr,
};

static const struct super_operations vgpu_devfs_sops = {
	.statfs = simple_statfs,
	.drop_inode = generic_delete_inode,
};

/* One char node: opens as vgpu.ko's minor, stats as shown. */
static int vgpu_devfs_add(struct super_block *sb, const char *name, unsigned int minor,
			  dev_t shown)
{
	struct dentry *dentry;
	struct inode *inode;

	dentry = d_alloc_name(sb->s_root, name);
	if (!dentry)
		return -ENOMEM;
	inode = new_inode(sb);
	if (!inode) {
		dput(dentry);
		return -ENOMEM;
	}
	inode->i_ino = VGPU_DEVFS_ROOT_INO + 1 + minor;
	/* 0666 root:root, as the real /dev/nvidia* inside a container */
	init_special_inode(inode, S_IFCHR | 0666, MKDEV(vgpu_major, minor));
	inode->i_op = &vgpu_devfs_node_iops;
	inode->i_private = (void *)(uintptr_t)shown;
	inode->i_atime = inode->i_mtime = inode->i_ctime = current_time(inode);
	/* the dentry's reference pins it until kill_litter_super() */
	d_add(dentry, inode);
	return 0;
}

static int vgpu_devfs_fill_super(struct super_block *sb, struct fs_context *fc)
{
	struct vgpu_devfs_ctx *ctx = fc->fs_private;
	struct vgpu_slice *s;
	struct inode *root;
	u32 base = 0, nr_gpus = 0, i;
	dev_t uvm_rdev = 0;
	bool found = false, uvm = false;
	char name[32];
	int ret;

	mutex_lock(&vgpu_slices_lock);
	s = vgpu_slice_find_locked(ctx->slice);
	if (s && !s->removed) {
		found = true;
		base = s->base;
		nr_gpus = s->nr_gpus;
		if (s->uvm_path.dentry) {
			uvm = true;
			/*
			 * The real UVM node's own number: the driver's UVM major
			 * is allocated at load time (alloc_chrdev_region in
			 * uvm_init), and the host's /dev/nvidia-uvm says which.
			 */
			uvm_rdev = d_inode(s->uvm_path.dentry)->i_rdev;
		}
	}
	mutex_unlock(&vgpu_slices_lock);
	if (!found)
		return invalfc(fc, "no slice %u", ctx->slice);

	sb->s_magic = VGPU_DEVFS_MAGIC;
	sb->s_op = &vgpu_devfs_sops;
	sb->s_time_gran = 1;
	sb->s_flags |= SB_RDONLY | SB_NOSUID | SB_NOEXEC;
	root = new_inode(sb);
	if (!root)
		return -ENOMEM;
	root->i_ino = VGPU_DEVFS_ROOT_INO;
	/* only the mounter (host root) walks it; containers get the nodes bound */
	root->i_mode = S_IFDIR | 0500;
	root->i_op = &simple_dir_inode_operations;
	root->i_fop = &simple_dir_operations;
	root->i_atime = root->i_mtime = root->i_ctime = current_time(root);
	set_nlink(root, 2);
	sb->s_root = d_make_root(root);
	if (!sb->s_root)
		return -ENOMEM;
	/* from here a failure is unwound by kill_litter_super(): no goto needed */
	ret = vgpu_devfs_add(sb, "nvidiactl", base + VGPU_MINOR_CTL,
			     MKDEV(NV_MAJOR_DEVICE_NUMBER, NV_CONTROL_DEVICE_MINOR));
	if (ret)
		return ret;
	if (uvm) {
		ret = vgpu_devfs_add(sb, "nvidia-uvm", base + VGPU_MINOR_UVM, uvm_rdev);
		if (ret)
			return ret;
	}
	for (i = 0; i < nr_gpus; i++) {
		/*
		 * nvidia<i> is the slice's GPU i, (195, i): the minor the
		 * slice's CARD_INFO reports for it (cards.c renumbers
		 * minor_number to the slice's index), where NVML and libcuda
		 * look for it.
		 */
		snprintf(name, sizeof(name), "nvidia%u", i);
		ret = vgpu_devfs_add(sb, name, base + VGPU_MINOR_GPU0 + i,
				     MKDEV(NV_MAJOR_DEVICE_NUMBER, i));
		if (ret)
			return ret;
	}
	return 0;
}

/* "slice": decimal digits only, no sign, no base prefix, no leading zero. */
static int vgpu_devfs_parse_id(struct fs_context *fc, const char *str, u32 *out)
{
	size_t len = strlen(str), i;

	if (!len || len > 10 || (str[0] == '0' && len > 1))
		return invalfc(fc, "slice: not a decimal slice id");
	for (i = 0; i < len; i++)
		if (str[i] < '0' || str[i] > '9')
			return invalfc(fc, "slice: not a decimal slice id");
	if (kstrtou32(str, 10, out))
		return invalfc(fc, "slice: out of range");
	return 0;
}

enum { VGPU_DEVFS_OPT_SLICE };

static const struct fs_parameter_spec vgpu_devfs_params[] = {
	fsparam_string("slice", VGPU_DEVFS_OPT_SLICE),
	{}
};

static int vgpu_devfs_parse_param(struct fs_context *fc, struct fs_parameter *param)
{
	struct vgpu_devfs_ctx *ctx = fc->fs_private;
	struct fs_parse_result result;
	int opt, ret;

	/* an unknown key is -ENOPARAM: the VFS refuses it ("source" aside) */
	opt = fs_parse(fc, vgpu_devfs_params, param, &result);
	if (opt < 0)
		return opt;
	switch (opt) {
	case VGPU_DEVFS_OPT_SLICE:
		if (ctx->have_slice)
			return invalfc(fc, "slice given twice");
		ret = vgpu_devfs_parse_id(fc, param->string, &ctx->slice);
		if (ret)
			return ret;
		ctx->have_slice = true;
		return 0;
	}
	return -EINVAL;
}

static int vgpu_devfs_get_tree(struct fs_context *fc)
{
	struct vgpu_devfs_ctx *ctx = fc->fs_private;

	/*
	 * mount_capable() already asked this of the mounter (no
	 * FS_USERNS_MOUNT); asked again here so that no later change of
	 * flags can let a namespace's root make nodes of vgpu.ko's minors.
	 */
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (!ctx->have_slice)
		return invalfc(fc, "slice=<id> is required");
	/* a new superblock per mount: instances never share nodes */
	return get_tree_nodev(fc, vgpu_devfs_fill_super);
}

/* A remount changes nothing: the slice is fixed, the superblock read-only. */
static int vgpu_devfs_reconfigure(struct fs_context *fc)
{
	struct vgpu_devfs_ctx *ctx = fc->fs_private;

	if (ctx->have_slice)
		return invalfc(fc, "slice cannot change");
	fc->sb_flags |= SB_RDONLY;
	return 0;
}

static void vgpu_devfs_free(struct fs_context *fc)
{
	kfree(fc->fs_private);
}

static const struct fs_context_operations vgpu_devfs_ctx_ops = {
	.free = vgpu_devfs_free,
	.parse_param = vgpu_devfs_parse_param,
	.get_tree = vgpu_devfs_get_tree,
	.reconfigure = vgpu_devfs_reconfigure,
};

static int vgpu_devfs_init_fs_context(struct fs_context *fc)
{
	struct vgpu_devfs_ctx *ctx;

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return -ENOMEM;
	fc->fs_private = ctx;
	fc->ops = &vgpu_devfs_ctx_ops;
	return 0;
}

static struct file_system_type vgpu_devfs_type = {
	.owner = THIS_MODULE,
	.name = "vgpudev",
	.init_fs_context = vgpu_devfs_init_fs_context,
	.parameters = vgpu_devfs_params,
	/* d_add()ed nodes hold their dentries: d_genocide() drops them */
	.kill_sb = kill_litter_super,
};

int vgpu_devfs_init(void)
{
	return register_filesystem(&vgpu_devfs_type);
}

void vgpu_devfs_exit(void)
{
	/* no superblock is left: each one pins the module (get_fs_type) */
	unregister_filesystem(&vgpu_devfs_type);
}
