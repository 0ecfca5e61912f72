/*
 * vgpu-runtime: the runc wrapper's fast path (containerd's BinaryName).
 *
 * It owns one decision: whether this runc command line may need vgpu at
 * all.  If not, it execs runc with the same argv at once, without starting
 * Python; if it may, it execs the Python slow path (vgpu.cli.runtime, which
 * edits config.json and then execs runc) with the same argv.  It never
 * reads or writes anything else and never decides what a request means:
 * a container may only be sent down the slow path by mistake, never kept
 * from it.
 *
 * The slow path is taken when
 *   - the command (the first argument after runc's global options, found as
 *     vgpu.cli.runtime.find_command finds it) is "create" or "run", or any
 *     argument after an unknown command is (a global option we do not know
 *     that takes a value would hide the command from us; Python decides),
 *     and the bundle's config.json (--bundle/-b as find_bundle reads it,
 *     else ".") could carry a request: it cannot be opened, is not a
 *     regular file, is larger than MAX_CONFIG, or contains anywhere the
 *     bytes "vgpu.io" (an annotation, "vgpu.io/..." or "vgpu.io\/..."),
 *     "VGPU_" (the image's environment), or a "\u" escape that could spell
 *     one of their characters (see may_spell; not Go's \u0026, \u003c and
 *     \u003e, which containerd writes for every "&", "<" and ">");
 *   - the only argument is --version (vgpu's line, then runc's).
 * Assumed: a request is only ever read from config.json's annotations and
 * process.env (vgpu.common.request), config.json is JSON text in UTF-8, and
 * the only JSON escapes that can spell a letter, a dot or an underscore are
 * "\uXXXX" (RFC 8259: the others are \" \\ \/ \b \f \n \r \t); so a
 * file with neither byte string above nor such an escape carries no request.
 *
 * runc is $VGPU_RUNC, else the first executable "runc" on PATH that is not
 * this program; the slow path gets it in $VGPU_RUNC, so both run the same.
 * The slow path is $VGPU_RUNTIME_SLOW, else VGPU_SLOW_PATH (set at build
 * time: `make runtime`, `make install`).  Both variables come from the
 * runtime's caller (containerd, the operator), never from a container.
 *
 * Build: cc -O2 -Wall -Wextra -Werror -o vgpu-runtime vgpu-runtime.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef VGPU_SLOW_PATH
#define VGPU_SLOW_PATH "/opt/vgpu/venv/bin/vgpu-runtime-slow"
#endif

#define PROG "vgpu-runtime"
#define MAX_CONFIG (4 << 20)	/* larger: the slow path judges it */

/* runc's global options that take a value (vgpu.cli.runtime._GLOBAL_VALUED) */
static const char *const global_valued[] = {
	"root", "log", "log-format", "criu", "rootless", NULL,
};

/* "--name", "-name", "--name=v", "-name=v" -> whether name takes a value
 * and has none attached */
static int takes_next(const char *a)
{
	const char *n = a + 1, *eq;
	size_t len;
	int i;

	if (*n == '-')
		n++;
	eq = strchr(n, '=');
	if (eq)
		return 0;
	len = strlen(n);
	for (i = 0; global_valued[i]; i++)
		if (strlen(global_valued[i]) == len && !memcmp(global_valued[i], n, len))
			return 1;
	return 0;
}

/* The index of runc's command in argv (1..argc-1), or 0. */
static int find_command(int argc, char **argv)
{
	int i = 1;

	while (i < argc) {
		const char *a = argv[i];

		if (!strcmp(a, "--"))
			return i + 1 < argc ? i + 1 : 0;
		if (a[0] == '-') {
			if (takes_next(a))
				i++;
			i++;
			continue;
		}
		return i;
	}
	return 0;
}

/* The bundle directory after the command: vgpu.cli.runtime.find_bundle. */
static const char *find_bundle(int argc, char **argv, int start)
{
	int i;

	for (i = start; i < argc; i++) {
		const char *a = argv[i], *v;

		if (!strcmp(a, "--bundle") || !strcmp(a, "-bundle") || !strcmp(a, "-b"))
			return i + 1 < argc ? argv[i + 1] : ".";
		if (!strncmp(a, "--bundle=", 9) || !strncmp(a, "-bundle=", 8)) {
			v = strchr(a, '=') + 1;
			return *v ? v : ".";
		}
		if (!strncmp(a, "-b", 2) && a[2]) {
			for (v = a + 2; *v == '='; v++)
				;
			return *v ? v : ".";
		}
	}
	return ".";
}

static int has(const char *buf, size_t n, const char *needle)
{
	return memmem(buf, n, needle, strlen(needle)) != NULL;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * Whether a "\u" in the text could be an escape of a character of "vgpu.io"
 * or "VGPU_" (either case of every letter, so that no reading of the keys
 * is assumed).  Every "\u" is taken as an escape, even one whose backslash
 * is itself escaped ("\\u0076" is text): only a path taken by mistake.  A
 * "\u" not followed by four hex digits is not JSON: the slow path says so.
 */
static int may_spell(const char *buf, size_t n)
{
	static const char spelled[] = "vgpuioVGPUIO._";
	const char *p = buf, *end = buf + n;
	int i, d;
	unsigned int v;

	while ((p = memmem(p, (size_t)(end - p), "\\u", 2))) {
		if (end - p < 6)
			return 1;
		for (v = 0, i = 2; i < 6; i++) {
			d = hexval(p[i]);
			if (d < 0)
				return 1;
			v = v << 4 | (unsigned int)d;
		}
		if (v && v < 0x80 && strchr(spelled, (int)v))
			return 1;
		p += 2;
	}
	return 0;
}

/* Whether bundle/config.json could carry a request (see the header). */
static int may_ask(const char *bundle)
{
	char path[PATH_MAX];
	struct stat st;
	char *buf;
	size_t got = 0;
	int fd, r;

	if (snprintf(path, sizeof(path), "%s/config.json", bundle) >= (int)sizeof(path))
		return 1;
	/* O_NONBLOCK: a FIFO in its place must not hang the start */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return 1;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_CONFIG) {
		close(fd);
		return 1;
	}
	/* one byte more than the bound: a file that grew is caught too */
	buf = malloc(MAX_CONFIG + 1);
	if (!buf) {
		close(fd);
		return 1;
	}
	for (;;) {
		ssize_t k = read(fd, buf + got, MAX_CONFIG + 1 - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			got = MAX_CONFIG + 1;
			break;
		}
		if (k == 0)
			break;
		got += (size_t)k;
		if (got > MAX_CONFIG)
			break;
	}
	close(fd);
	r = got > MAX_CONFIG || has(buf, got, "vgpu.io") || has(buf, got, "VGPU_") ||
	    may_spell(buf, got);
	free(buf);
	return r;
}

/* runc: $VGPU_RUNC, else "runc" on PATH that is not this program. */
static const char *find_runc(char *out, size_t size)
{
	const char *env = getenv("VGPU_RUNC"), *p;
	char me[PATH_MAX], real[PATH_MAX];
	int have_me;

	if (env && *env)
		return env;
	have_me = realpath("/proc/self/exe", me) != NULL;
	p = getenv("PATH");
	if (!p || !*p)
		p = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	while (*p) {
		const char *end = strchr(p, ':');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len && len + sizeof("/runc") <= size) {
			memcpy(out, p, len);
			memcpy(out + len, "/runc", sizeof("/runc"));
			if (!access(out, X_OK) &&
			    !(have_me && realpath(out, real) && !strcmp(real, me)))
				return out;
		}
		if (!end)
			break;
		p = end + 1;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char buf[PATH_MAX];
	const char *runc, *slow;
	int slow_path = 0, cmd;

	if (argc < 1)
		return 2;
	cmd = find_command(argc, argv);
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		slow_path = 1;
	} else if (cmd && (!strcmp(argv[cmd], "create") || !strcmp(argv[cmd], "run"))) {
		slow_path = may_ask(find_bundle(argc, argv, cmd + 1));
	} else if (cmd) {
		int i;

		for (i = cmd + 1; i < argc; i++)
			if (!strcmp(argv[i], "create") || !strcmp(argv[i], "run"))
				slow_path = 1;
	}
	runc = find_runc(buf, sizeof(buf));
	if (!runc) {
		fprintf(stderr, PROG ": cannot find runc on PATH (set VGPU_RUNC)\n");
		return 127;
	}
	if (slow_path) {
		slow = getenv("VGPU_RUNTIME_SLOW");
		if (!slow || !*slow)
			slow = VGPU_SLOW_PATH;
		if (setenv("VGPU_RUNC", runc, 1)) {
			fprintf(stderr, PROG ": setenv: %s\n", strerror(errno));
			return 127;
		}
		argv[0] = (char *)slow;
		execv(slow, argv);
		fprintf(stderr, PROG ": cannot run %s: %s\n", slow, strerror(errno));
		return 127;
	}
	argv[0] = (char *)runc;
	if (strchr(runc, '/'))
		execv(runc, argv);
	else
		execvp(runc, argv);
	fprintf(stderr, PROG ": cannot run %s: %s\n", runc, strerror(errno));
	return 127;
}
