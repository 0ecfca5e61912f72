// SPDX-License-Identifier: GPL-2.0
/*
 * sibling.c - a hostile sibling thread, for tests/vm/test_vgpu_sibling.py.
 *
 * Loaded with ctypes into the test's own process, so the thread it starts
 * shares the caller's memory and descriptor table, as a container's other
 * threads would.  While the test's main thread is inside one vgpu.ko call
 * (which nvsim's debugfs delay holds open), the thread watches the process
 * for what vgpu.ko adds during the call and attacks it:
 *
 *   MODE_WRITE   vgpu.ko's call pages ("[vgpu-call]" in /proc/self/maps),
 *                over and over, and the first new small mapping: write
 *                the forged parameters into them, at every page (a
 *                pooled call page is a ring of one-page slots)
 *   MODE_REPLACE the same: mmap(MAP_FIXED) over it, then write
 *   MODE_DUP     every new descriptor: dup() it and keep the copy
 *   MODE_CHAIN   each call page that shows while a call uses it, in turn:
 *                mmap(MAP_FIXED) over it and write the next of up to
 *                MAX_CHAIN forged parameter blocks (sibling_start_chain);
 *                once they are all used, nothing more is attacked
 *   MODE_SWAP    vgpu.ko's call pages, over and over: where the first half
 *                of the forged bytes occurs (at a 4-byte boundary), write
 *                the second half over it -- a result the driver wrote,
 *                rewritten once its copy-out made the page writable
 *   MODE_USER    the caller's own parameters (sibling_set_target), once,
 *                as soon as nvsim's delay holds a call asleep
 *                (delay_waiting): after vgpu.ko's check, before the
 *                driver's read
 *
 * A write that faults (SIGBUS/SIGSEGV) is caught on this thread only and
 * counted.  Built by the test with: gcc -shared -fPIC -pthread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <dirent.h>

enum { MODE_WRITE = 1, MODE_REPLACE = 2, MODE_DUP = 3, MODE_CHAIN = 4, MODE_SWAP = 5,
       MODE_USER = 6 };

#define MAX_SEEN 4096
#define MAX_TARGET (64 << 10)
#define MAX_CHAIN 4

struct result {
	int attempts;           /* mappings or descriptors attacked */
	int writes;             /* forged writes that landed */
	int faults;             /* writes that faulted */
	int replaced;           /* MAP_FIXED replacements made */
	int dups[16];           /* descriptors kept (MODE_DUP), -1 = none */
	int ndups;
};

static struct {
	int mode;
	const void *forged;
	size_t forged_len;
	const void *chain[MAX_CHAIN];   /* MODE_CHAIN: the blocks, in order */
	size_t chain_len[MAX_CHAIN];
	int nchain;
	unsigned long chain_addr[MAX_CHAIN];    /* where each block went */
	volatile int stop, ready;
	void *target;                   /* MODE_USER: the caller's parameters */
	pthread_t thread;
	unsigned long seen[MAX_SEEN];   /* baseline mapping starts, or fds */
	int nseen;
	struct result res;
} S;

/* MODE_USER: where the forged bytes go (sibling_set_target, before the start). */
static void *user_target;

static __thread sigjmp_buf fault_jmp;
static __thread int in_attack;
static struct sigaction old_bus, old_segv;

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	if (in_attack)
		siglongjmp(fault_jmp, 1);
	/* Not ours: the previous handler, or the default action. */
	sigaction(sig, sig == SIGBUS ? &old_bus : &old_segv, NULL);
	raise(sig);
}

/* SIGBUS and SIGSEGV to on_fault; the handlers before are kept to put back. */
static void catch_faults(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old_bus);
	sigaction(SIGSEGV, &sa, &old_segv);
}

static int seen(unsigned long v)
{
	for (int i = 0; i < S.nseen; i++)
		if (S.seen[i] == v)
			return 1;
	return 0;
}

static void remember(unsigned long v)
{
	if (S.nseen < MAX_SEEN)
		S.seen[S.nseen++] = v;
}

/*
 * Starts and lengths of the current mappings, by raw read(): no malloc.
 * named[i]: the line names vgpu.ko's call page ("[vgpu-call]").
 */
static int read_maps(unsigned long *start, unsigned long *len, char *named, int max)
{
	static char buf[1 << 18];
	ssize_t n, got = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), cnt = 0;
	char *p;

	if (fd < 0)
		return 0;
	while (got < (ssize_t)sizeof(buf) - 1 &&
	       (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += n;
	close(fd);
	buf[got] = 0;
	for (p = buf; *p && cnt < max; ) {
		unsigned long a = strtoul(p, &p, 16), b;

		if (*p != '-')
			break;
		b = strtoul(p + 1, &p, 16);
		start[cnt] = a;
		len[cnt] = b - a;
		if (named)
			named[cnt] = 0;
		while (*p && *p != '\n') {
			if (named && *p == '[' && !strncmp(p, "[vgpu-call]", 11))
				named[cnt] = 1;
			p++;
		}
		cnt++;
		if (*p)
			p++;
	}
	return cnt;
}

static void attack_mapping(unsigned long a, unsigned long l)
{
	if (S.mode == MODE_CHAIN) {
		int k = S.res.replaced;

		if (k >= S.nchain)
			return;
		S.forged = S.chain[k];
		S.forged_len = S.chain_len[k] < l ? S.chain_len[k] : l;
	}
	S.res.attempts++;
	if (S.mode == MODE_REPLACE || S.mode == MODE_CHAIN) {
		void *m = mmap((void *)a, l, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (m == MAP_FAILED)
			return;
		/* Published after the write (below) in MODE_CHAIN: the test waits on it. */
		if (S.mode == MODE_REPLACE)
			S.res.replaced++;
	}
	if (S.mode == MODE_WRITE) {
		/*
		 * Every page: a pooled call page is a ring of one-page slots
		 * (call.c), the call in flight in any of them.
		 */
		for (volatile unsigned long off = 0; off < l; off += 4096) {
			size_t n = l - off < S.forged_len ? l - off : S.forged_len;

			in_attack = 1;
			if (sigsetjmp(fault_jmp, 1) == 0) {
				memcpy((void *)(a + off), S.forged, n);
				S.res.writes++;
			} else {
				S.res.faults++;
			}
			in_attack = 0;
		}
		return;
	}
	in_attack = 1;
	if (sigsetjmp(fault_jmp, 1) == 0) {
		memcpy((void *)a, S.forged, S.forged_len);
		S.res.writes++;
		if (S.mode == MODE_CHAIN) {
			S.chain_addr[S.res.replaced] = a;
			__atomic_store_n(&S.res.replaced, S.res.replaced + 1,
					 __ATOMIC_RELEASE);
		}
	} else {
		S.res.faults++;
	}
	in_attack = 0;
}

/*
 * MODE_SWAP: read the page (always allowed), and where the pattern lies,
 * try the write; one that faults (the driver has not written yet) is
 * counted and tried again on the next round.
 */
static void swap_mapping(unsigned long a, unsigned long l)
{
	size_t half = S.forged_len / 2;
	const char *match = S.forged, *repl = match + half;
	volatile unsigned long off = 0;

	/* A fault (the write refused, or the page gone) ends this round. */
	in_attack = 1;
	if (sigsetjmp(fault_jmp, 1) == 0) {
		for (off = 0; off + half <= l; off += 4) {
			if (memcmp((void *)(a + off), match, half))
				continue;
			S.res.attempts++;
			memcpy((void *)(a + off), repl, half);
			S.res.writes++;
		}
	} else {
		S.res.faults++;
	}
	in_attack = 0;
}

/* nvsim's delay_waiting: calls asleep in the test delay now (0 if unreadable). */
static int delay_waiting(void)
{
	char b[32] = "";
	int fd = open("/sys/kernel/debug/nvsim/delay_waiting", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, b, sizeof(b) - 1);
	close(fd);
	return n > 0 ? atoi(b) : 0;
}

/* Everything that exists now (this thread's own stack included) is the baseline. */
static void baseline(void)
{
	static unsigned long st[8192], ln[8192];

	if (S.mode == MODE_DUP) {
		for (int fd = 0; fd < 4096; fd++)
			if (fcntl(fd, F_GETFD) != -1)
				remember(fd);
	} else {
		int n = read_maps(st, ln, NULL, 8192);

		for (int i = 0; i < n; i++)
			remember(st[i]);
	}
}

static void *attacker(void *arg)
{
	static unsigned long st[8192], ln[8192];
	static char named[8192];

	(void)arg;
	baseline();
	__atomic_store_n(&S.ready, 1, __ATOMIC_RELEASE);
	while (!S.stop) {
		if (S.mode == MODE_USER) {
			if (!S.res.writes && delay_waiting() > 0) {
				S.res.attempts++;
				memcpy(S.target, S.forged, S.forged_len);
				S.res.writes++;
			}
			continue;
		}
		if (S.mode == MODE_DUP) {
			DIR *d = opendir("/proc/self/fd");
			struct dirent *e;

			if (!d)
				continue;
			while ((e = readdir(d))) {
				int fd = atoi(e->d_name);

				if (e->d_name[0] == '.' || fd == dirfd(d) || seen(fd))
					continue;
				remember(fd);
				S.res.attempts++;
				if (S.res.ndups < 16) {
					int c = dup(fd);

					if (c >= 0) {
						remember(c);
						S.res.dups[S.res.ndups++] = c;
					}
				}
			}
			closedir(d);
			continue;
		}
		int n = read_maps(st, ln, named, 8192);

		for (int i = 0; i < n; i++) {
			/*
			 * vgpu.ko's call page, which may stay mapped between
			 * calls: attacked all the time (writes land while it is
			 * idle, which is harmless; they must fault while a call
			 * uses it), or replaced whenever one shows (a replaced
			 * one is anonymous, no longer named).
			 */
			if (named[i] && S.mode == MODE_SWAP) {
				swap_mapping(st[i], ln[i]);
				continue;
			}
			if (S.mode == MODE_SWAP)
				continue;
			if (named[i]) {
				attack_mapping(st[i], ln[i]);
				continue;
			}
			if (seen(st[i]))
				continue;
			remember(st[i]);
			/*
			 * Otherwise the first small mapping that appears is the
			 * call's parameter page (the test's thread is blocked
			 * in the call); later ones are the caller's own after
			 * the call (an allocator's arena, libffi's trampolines)
			 * and are left alone.
			 */
			if (S.mode != MODE_CHAIN && ln[i] <= MAX_TARGET &&
			    !S.res.attempts)
				attack_mapping(st[i], ln[i]);
		}
	}
	return NULL;
}

static int start(int mode, const void *forged, size_t forged_len,
		 const void **blocks, const size_t *lens, int n)
{
	int ret;

	memset(&S, 0, sizeof(S));
	S.mode = mode;
	S.target = user_target;
	S.forged = forged;
	S.forged_len = forged_len;
	for (int i = 0; i < n; i++) {
		S.chain[i] = blocks[i];
		S.chain_len[i] = lens[i];
	}
	S.nchain = n;
	catch_faults();
	ret = pthread_create(&S.thread, NULL, attacker, NULL);
	if (ret)
		return ret;
	while (!__atomic_load_n(&S.ready, __ATOMIC_ACQUIRE))
		usleep(1000);
	return 0;
}

void sibling_set_target(void *addr)
{
	user_target = addr;
}

/* Start the thread and wait until it has taken its baseline. */
int sibling_start(int mode, const void *forged, size_t forged_len)
{
	return start(mode, forged, forged_len, NULL, NULL, 0);
}

/*
 * MODE_CHAIN: blocks[i] (lens[i] bytes) goes into the i-th call page that
 * shows.  The caller starts the i-th call only after sibling_replaced()
 * says the page of the one before was replaced, so the i-th page is its.
 * Call pages idle before (in the baseline) are attacked too: unmap them
 * first (closing any vgpu file of the process does).
 */
int sibling_start_chain(const void **blocks, const size_t *lens, int n)
{
	if (n < 1 || n > MAX_CHAIN)
		return EINVAL;
	return start(MODE_CHAIN, NULL, 0, blocks, lens, n);
}

/* How many call pages were replaced (and written) so far. */
int sibling_replaced(void)
{
	return __atomic_load_n(&S.res.replaced, __ATOMIC_ACQUIRE);
}

/*
 * Where the i-th block went: the sibling's page stays mapped there after
 * the call (vgpu.ko unmaps only its own), with what the driver wrote back.
 */
unsigned long sibling_chain_addr(int i)
{
	return i >= 0 && i < MAX_CHAIN ? S.chain_addr[i] : 0;
}

/* Stop it, restore the signal handlers, hand back what it did. */
int sibling_stop(struct result *out)
{
	S.stop = 1;
	pthread_join(S.thread, NULL);
	sigaction(SIGBUS, &old_bus, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	*out = S.res;
	return 0;
}

/*
 * For each page of [a, a + l): 1 if this thread can write it now (the byte
 * written is the one read, so nothing changes), 0 if the write faults.
 * From the test's own thread between calls: vgpu.ko grants a write only to
 * a task inside a call, so a page takes it only if its PTE is writable
 * already (a ring slot the driver wrote since the last zap, call.c).
 */
int sibling_probe_writable(unsigned long a, unsigned long l, unsigned char *out)
{
	int n = 0;

	catch_faults();
	for (volatile unsigned long off = 0; off < l; off += 4096, n++) {
		volatile unsigned char *p = (volatile unsigned char *)(a + off);

		out[n] = 0;
		in_attack = 1;
		if (sigsetjmp(fault_jmp, 1) == 0) {
			*p = *p;
			out[n] = 1;
		}
		in_attack = 0;
	}
	sigaction(SIGBUS, &old_bus, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	return n;
}
