// SPDX-License-Identifier: GPL-2.0
/*
 * nvdevno: an LD_PRELOAD shim that reports a vgpu slice's nodes, mounted
 * as /dev/nvidiactl and /dev/nvidia<N>, with the real driver's device
 * numbers (195:255 and 195:N) to stat().  Nothing else changes: opens and
 * ioctls go to the node itself (vgpu.ko).
 *
 * Why (docs/nvml.md, "Through a slice"): NVIDIA's libnvidia-ml 535.261.03
 * stats /dev/nvidiactl and /dev/nvidia<N> and refuses nodes whose device
 * numbers are not the driver's ("Failed to initialize NVML: GPU access
 * blocked by the operating system", before any ioctl), and a slice's nodes
 * are vgpu.ko's own major and minors.  The tests use this to reach what
 * vgpu.ko answers NVML through a slice; a container would need the same
 * until the slice's nodes can carry 195:x numbers.
 *
 *     make build/nvdevno.so
 *     LD_PRELOAD=build/nvdevno.so nvidia-smi
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define NV_MAJOR 195
#define NV_CTL_MINOR 255

/* A slice node at an NVIDIA node's path: give it that node's numbers. */
static void nvdevno_fix(const char *path, struct stat *st)
{
	const char *n;
	char *end;
	long minor;

	if (!path || strncmp(path, "/dev/nvidia", 11) || !S_ISCHR(st->st_mode) ||
	    major(st->st_rdev) == NV_MAJOR)
		return;
	n = path + 11;
	if (!strcmp(n, "ctl")) {
		st->st_rdev = makedev(NV_MAJOR, NV_CTL_MINOR);
		return;
	}
	minor = strtol(n, &end, 10);
	if (end != n && !*end && minor >= 0 && minor < NV_CTL_MINOR)
		st->st_rdev = makedev(NV_MAJOR, minor);
}

#define WRAP(ret, name, params, args, path)				\
ret name params								\
{									\
	static ret (*real) params;					\
	ret r;								\
									\
	if (!real)							\
		real = dlsym(RTLD_NEXT, #name);				\
	r = real args;							\
	if (r == 0)							\
		nvdevno_fix(path, st);					\
	return r;							\
}

WRAP(int, stat, (const char *p, struct stat *st), (p, st), p)
WRAP(int, lstat, (const char *p, struct stat *st), (p, st), p)
WRAP(int, fstatat, (int d, const char *p, struct stat *st, int f), (d, p, st, f), p)
WRAP(int, __xstat, (int v, const char *p, struct stat *st), (v, p, st), p)
WRAP(int, __lxstat, (int v, const char *p, struct stat *st), (v, p, st), p)
