// SPDX-License-Identifier: GPL-2.0
/*
 * nvlog: an LD_PRELOAD shim that logs every ioctl a process makes on an
 * NVIDIA device node (/dev/nvidia*, /dev/vgpu/.../nvidia*), one line each:
 * the node, the escape (or UVM command), the RM class or control command,
 * the ioctl's return and the NV_STATUS the driver wrote back.  It is how the
 * first missing answers of nvsim for NVIDIA's own user space (libcuda,
 * NVML) are found: run the program with
 *
 *     LD_PRELOAD=build/nvlog.so NVLOG=/tmp/calls.log nvidia-smi
 *
 * and read the last lines before its error.  NVLOG unset: stderr.
 *
 * It reads the parameters only after the call (the driver's answer), from
 * the caller's own memory: a logger, not a record anything may rely on.
 * Layouts: nvos.h (NVOS00/21/54/64 of every release 535-595 are the same).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int (*real_ioctl)(int, unsigned long, ...);
static int (*real_openat)(int, const char *, int, ...);
static FILE *logf;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * NVLOG_NODES=DIR (tests only): opens of /dev/nvidiactl, /dev/nvidia-uvm and
 * /dev/nvidiaN go to DIR/nvidiactl, DIR/nvidia-uvm, DIR/nvidiaN (a slice's
 * /dev/vgpu/<id>).  NVIDIA's libcuda and NVML stat /dev/nvidiactl and refuse
 * a node whose major is not the driver's 195, which a slice's node (vgpu's
 * own major) never is; with the real node's stat and the slice's file,
 * every ioctl they make goes through vgpu.ko.
 */
static const char *nodes_dir;
static int dump;		/* NVLOG_DUMP set: controls' params too */

__attribute__((constructor)) static void nvlog_init(void)
{
	const char *path = getenv("NVLOG");

	real_ioctl = dlsym(RTLD_NEXT, "ioctl");
	real_openat = dlsym(RTLD_NEXT, "openat");
	nodes_dir = getenv("NVLOG_NODES");
	dump = getenv("NVLOG_DUMP") != NULL;
	logf = path ? fopen(path, "a") : NULL;
	if (!logf)
		logf = stderr;
	setvbuf(logf, NULL, _IOLBF, 0);
}

/* The node behind fd, or NULL if it is not an NVIDIA (or vgpu) node. */
static const char *nvnode(int fd, char *buf, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, buf, len - 1);
	if (n <= 0)
		return NULL;
	buf[n] = 0;
	if (!strstr(buf, "nvidia"))
		return NULL;
	return buf;
}

static uint32_t u32at(const void *p, size_t off)
{
	uint32_t v;

	memcpy(&v, (const char *)p + off, sizeof(v));
	return v;
}

int ioctl(int fd, unsigned long req, ...)
{
	char node[256];
	unsigned int nr = _IOC_NR(req), size = _IOC_SIZE(req);
	va_list ap;
	void *arg;
	int ret, err;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	ret = real_ioctl(fd, req, arg);
	err = errno;
	if (!nvnode(fd, node, sizeof(node))) {
		/*
		 * An NVIDIA escape on a descriptor that is no file at all: the
		 * kernel's EBADF, which no driver sees.  NVML 535 with no GPU
		 * allocates its MIG sessions (0xc639, 0xc640) on fd -1 after
		 * closing nvidiactl; logged as node "fd-1" so the attempt shows.
		 */
		if (fd >= 0 || _IOC_TYPE(req) != 'F')
			goto out;
		snprintf(node, sizeof(node), "fd%d", fd);
	}

	pthread_mutex_lock(&lock);
	if (strstr(node, "nvidia-uvm")) {
		/* UVM: the request is the command number itself; each command's
		 * rmStatus sits at its own offset, so only errno is logged. */
		fprintf(logf, "%ld %s uvm cmd=%lu ret=%d errno=%d\n",
			(long)syscall(SYS_gettid), node, req, ret, ret ? err : 0);
	} else if (_IOC_TYPE(req) != 'F' || !arg) {
		fprintf(logf, "%ld %s req=%#lx ret=%d\n", (long)syscall(SYS_gettid), node, req, ret);
	} else if (nr == 0x2a && size >= 32) {		/* NV_ESC_RM_CONTROL, NVOS54 */
		fprintf(logf, "%ld %s control h=%#x/%#x cmd=%#x size=%u status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 24), u32at(arg, 28), ret);
		if (dump) {		/* NVLOG_DUMP: the params after the call, hex */
			const unsigned char *q;
			uint32_t i, n = u32at(arg, 24);

			memcpy(&q, (const char *)arg + 16, sizeof(q));
			fprintf(logf, "  params");
			for (i = 0; q && i < n && i < 64; i++)
				fprintf(logf, " %02x", q[i]);
			fprintf(logf, "\n");
		}
	} else if (nr == 0x2b && size >= 44) {		/* NV_ESC_RM_ALLOC, NVOS64 */
		fprintf(logf, "%ld %s alloc h=%#x/%#x new=%#x class=%#x size=%u status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 12), u32at(arg, 32), u32at(arg, 40), ret);
	} else if (nr == 0x2b && size >= 32) {		/* NV_ESC_RM_ALLOC, NVOS21 */
		fprintf(logf, "%ld %s alloc h=%#x/%#x new=%#x class=%#x size=%u status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 12), u32at(arg, 24), u32at(arg, 28), ret);
	} else if (nr == 0x29 && size >= 16) {		/* NV_ESC_RM_FREE, NVOS00 */
		fprintf(logf, "%ld %s free h=%#x/%#x obj=%#x status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 12), ret);
	} else if (nr == 0x4a && size >= 184) {		/* NV_ESC_RM_VID_HEAP_CONTROL, NVOS32 */
		/* function, status; for ALLOC_SIZE (0) hMemory, type, flags,
		 * attr, attr2 and size as the driver wrote them back */
		fprintf(logf, "%ld %s vidheap h=%#x/%#x fn=%u status=%#x mem=%#x type=%u "
			"flags=%#x attr=%#x attr2=%#x size=%#llx ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 20), u32at(arg, 44), u32at(arg, 48),
			u32at(arg, 52), u32at(arg, 56), u32at(arg, 144),
			(unsigned long long)u32at(arg, 88) |
			(unsigned long long)u32at(arg, 92) << 32, ret);
	} else if (nr == 0x4e && size >= 56) {		/* NV_ESC_RM_MAP_MEMORY, NVOS33 */
		fprintf(logf, "%ld %s map h=%#x/%#x mem=%#x length=%#llx flags=%#x status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), (unsigned long long)u32at(arg, 24) |
			(unsigned long long)u32at(arg, 28) << 32, u32at(arg, 44),
			u32at(arg, 40), ret);
	} else if (nr == 0x4f && size >= 32) {		/* NV_ESC_RM_UNMAP_MEMORY, NVOS34 */
		fprintf(logf, "%ld %s unmap h=%#x/%#x mem=%#x status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 24), ret);
	} else if (nr == 0x34 && size >= 28) {		/* NV_ESC_RM_DUP_OBJECT, NVOS55 */
		fprintf(logf, "%ld %s dup h=%#x/%#x new=%#x src=%#x/%#x flags=%#x status=%#x ret=%d\n",
			(long)syscall(SYS_gettid), node, u32at(arg, 0), u32at(arg, 4),
			u32at(arg, 8), u32at(arg, 12), u32at(arg, 16), u32at(arg, 20),
			u32at(arg, 24), ret);
	} else if (nr == 0x35 && size >= 24) {		/* NV_ESC_RM_SHARE, NVOS57 */
		/* RS_SHARE_POLICY: target, accessMask, type (u16), action (u8) */
		fprintf(logf, "%ld %s share h=%#x/%#x target=%#x access=%#x type=%u action=%#x "
			"status=%#x ret=%d\n", (long)syscall(SYS_gettid), node, u32at(arg, 0),
			u32at(arg, 4), u32at(arg, 8), u32at(arg, 12), u32at(arg, 16) & 0xffff,
			(u32at(arg, 16) >> 16) & 0xff, u32at(arg, 20), ret);
	} else {
		fprintf(logf, "%ld %s esc=%#x size=%u ret=%d\n",
			(long)syscall(SYS_gettid), node, nr, size, ret);
	}
	pthread_mutex_unlock(&lock);
out:
	errno = err;
	return ret;
}

/* The slice's node for path, in buf, or path itself (NVLOG_NODES). */
static const char *redirected(const char *path, char *buf, size_t len)
{
	const char *n;

	if (!nodes_dir || !path || strncmp(path, "/dev/nvidia", 11))
		return path;
	n = path + 11;
	if (strcmp(n, "ctl") && strcmp(n, "-uvm") && !(*n >= '0' && *n <= '9' &&
						      strspn(n, "0123456789") == strlen(n)))
		return path;
	snprintf(buf, len, "%s/%s", nodes_dir, path + 5);
	return buf;
}

static int open_common(int dirfd, const char *path, int flags, va_list ap)
{
	char buf[256];
	mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;

	if (!real_openat)		/* an open before the constructor ran */
		real_openat = dlsym(RTLD_NEXT, "openat");
	return real_openat(dirfd, redirected(path, buf, sizeof(buf)), flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	int ret;

	va_start(ap, flags);
	ret = open_common(dirfd, path, flags, ap);
	va_end(ap);
	return ret;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	int ret;

	va_start(ap, flags);
	ret = open_common(AT_FDCWD, path, flags, ap);
	va_end(ap);
	return ret;
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));
int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));

int __open_2(const char *path, int flags)
{
	return open(path, flags);
}

int __open64_2(const char *path, int flags) __attribute__((alias("__open_2")));
