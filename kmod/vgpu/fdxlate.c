// SPDX-License-Identifier: GPL-2.0
/*
 * fdxlate.c - file descriptors named inside parameters.
 *
 * The driver resolves them in the caller's table and wants its own files.
 * A vgpu file of the caller's slice stands for its real file: that file is
 * installed as a temporary descriptor, whose number goes into the
 * parameters for the call, and is closed afterwards (the caller's value is
 * restored by the caller of vgpu_fd_xlate).
 *
 * NOT sound against a thread that shares the caller's descriptor table: for
 * the length of the driver call the real file is an ordinary descriptor
 * there, and dup() of it keeps an unmediated descriptor of the real node
 * (docs/mediator.md, "Open findings", 3).
 */
#include <linux/file.h>
#include <linux/fdtable.h>

#include "vgpu.h"

/**
 * vgpu_fd_xlate - translate a vgpu fd to a temporary fd of the real file
 * @vf: the calling file (its slice bounds what may be named)
 * @fd: the caller's descriptor
 * @kinds: VGPU_KINDS() mask of acceptable node kinds
 * @t: out: the temporary descriptor and a reference on the vgpu file
 *
 * Return: 0; -ENOENT if @fd is not a vgpu file (the caller decides);
 * -EBADF for a bad descriptor; -EPERM for a file of another slice or kind;
 * or an error from installing the descriptor.
 */
int vgpu_fd_xlate(struct vgpu_file *vf, int fd, unsigned int kinds,
		  struct vgpu_tmpfd *t)
{
	struct vgpu_file *other;
	struct file *f;
	int tmp;

	t->fd = -1;
	t->vfilp = NULL;
	if (fd < 0)
		return -EBADF;
	f = fget(fd);
	if (!f)
		return -EBADF;
	if (!vgpu_is_vgpu_file(f)) {
		fput(f);
		return -ENOENT;
	}
	other = f->private_data;
	if (other->slice != vf->slice || !(kinds & VGPU_KINDS(other->kind)) ||
	    READ_ONCE(other->poisoned)) {
		fput(f);
		return -EPERM;
	}
	tmp = get_unused_fd_flags(O_CLOEXEC);
	if (tmp < 0) {
		fput(f);
		return tmp;
	}
	fd_install(tmp, get_file(other->real));
	t->fd = tmp;
	t->vfilp = f;
	return 0;
}

void vgpu_fd_restore(struct vgpu_tmpfd *t)
{
	if (t->fd >= 0)
		close_fd(t->fd);
	if (t->vfilp)
		fput(t->vfilp);
	t->fd = -1;
	t->vfilp = NULL;
}
