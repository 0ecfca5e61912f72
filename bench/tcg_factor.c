// SPDX-License-Identifier: GPL-2.0
/*
 * tcg_factor - how much slower the emulated VM runs the kernel paths the
 * compute scheduler's thread lives on, against the host: a syscall, a timer
 * sleep and wake-up (the thread's poll), and a wake-up of another task
 * through a pipe (a kick); and those a call page costs (kmod/vgpu/call.c):
 * a write fault on a present read-only PTE (the driver's copy-out), a read
 * fault (the least a fault costs), and a zap of 16 pages with its TLB
 * flush (the ring's reuse); and what the scheduler's doorbell zap adds
 * when the mm runs on another CPU too: the TLB shootdown's interrupt and
 * the wait for it (a write-protect of one page with a thread of the mm
 * busy on a second CPU, less the same with none).  Run it on the host and in the VM
 * (bench/compute_accuracy.py and bench/call_breakdown.py, --host-figures);
 * the ratio turns emulated time into an estimate for native hardware.
 *
 * Output: one JSON object, ns per operation (CPU time where it says cpu);
 * -1 where the faults counted were not one per page.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define PAGES 64

static double now_ns(clockid_t clk)
{
	struct timespec t;

	clock_gettime(clk, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static double syscall_ns(long n)
{
	double t0 = now_ns(CLOCK_MONOTONIC);

	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	return (now_ns(CLOCK_MONOTONIC) - t0) / n;
}

/* CPU time per 50 us timer sleep: the hrtimer, the sleep and the wake-up. */
static double sleep_cpu_ns(long n)
{
	struct timespec d = { 0, 50000 };
	double t0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);

	for (long i = 0; i < n; i++)
		nanosleep(&d, NULL);
	return (now_ns(CLOCK_PROCESS_CPUTIME_ID) - t0) / n;
}

/* Wall time per pipe round trip between two processes: two wake-ups. */
static double pingpong_ns(long n)
{
	int a[2], b[2];
	char c = 0;
	double t0;
	pid_t pid;

	if (pipe(a) || pipe(b))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		for (long i = 0; i < n; i++)
			if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	for (long i = 0; i < n; i++)
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
			return -1;
	t0 = (now_ns(CLOCK_MONOTONIC) - t0) / n;
	waitpid(pid, NULL, 0);
	return t0;
}

static long minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/*
 * A write to a present, read-only PTE of an anonymous page the process
 * owns: a fork write-protects every PTE of the parent (copy on write), and
 * once the child has exited each page's next write takes the fault that
 * do_wp_page answers by making the PTE writable again, no copy (the page
 * is the parent's alone): the path of the call page's pfn_mkwrite less the
 * callback.  Wall time per write (the fork not timed); -1 unless every
 * write faulted.
 */
static double wp_fault_ns(long rounds)
{
	volatile char *m = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t = 0;
	long faults = 0;

	if (m == MAP_FAILED)
		return -1;
	for (int i = 0; i < PAGES; i++)
		m[i * 4096] = 1;
	for (long r = 0; r < rounds; r++) {
		pid_t pid = fork();
		double t0;
		long f0;

		if (pid < 0)
			return -1;
		if (pid == 0)
			_exit(0);
		waitpid(pid, NULL, 0);
		f0 = minflt();
		t0 = now_ns(CLOCK_MONOTONIC);
		for (int i = 0; i < PAGES; i++)
			m[i * 4096] = 2;
		t += now_ns(CLOCK_MONOTONIC) - t0;
		faults += minflt() - f0;
	}
	munmap((void *)m, PAGES * 4096);
	return faults >= rounds * PAGES ? t / (rounds * PAGES) : -1;
}

/*
 * A read of a page with no PTE, mapped the shared zero page: the fault with
 * the least work behind it.  And the zap before it, per 16 pages: what
 * madvise(MADV_DONTNEED) costs on 16 present pages (the PTEs cleared, one
 * TLB flush).
 */
static void zero_fault_zap_ns(long rounds, double *fault, double *zap16)
{
	volatile char *m = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double tf = 0, tz = 0;
	char sum = 0;

	*fault = *zap16 = -1;
	if (m == MAP_FAILED)
		return;
	for (long r = 0; r < rounds; r++) {
		double t0;

		for (int i = 0; i < PAGES; i++)
			sum += m[i * 4096];             /* zero page mapped */
		t0 = now_ns(CLOCK_MONOTONIC);
		for (int i = 0; i < PAGES; i += 16)
			madvise((void *)(m + i * 4096), 16 * 4096, MADV_DONTNEED);
		tz += now_ns(CLOCK_MONOTONIC) - t0;
		t0 = now_ns(CLOCK_MONOTONIC);
		for (int i = 0; i < PAGES; i++)
			sum += m[i * 4096];
		tf += now_ns(CLOCK_MONOTONIC) - t0;
	}
	munmap((void *)m, PAGES * 4096);
	*fault = tf / (rounds * PAGES) + 0 * sum;
	*zap16 = tz / (rounds * PAGES / 16);
}

static atomic_int spin_stop;

/* The other CPU's thread: runs in the mm (so the flush must reach it). */
static void *spin(void *page)
{
	volatile char *m = page;
	char sum = 0;

	while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
		sum += m[0];
	return (void *)(long)sum;
}

static int pin(pthread_t t, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(t, sizeof(set), &set);
}

/* mprotect of one page to read-only and back: the downgrade's flush. */
static double wp_cycle_ns(volatile char *m, long n)
{
	double t0 = now_ns(CLOCK_MONOTONIC);

	for (long i = 0; i < n; i++) {
		mprotect((void *)m, 4096, PROT_READ);
		mprotect((void *)m, 4096, PROT_READ | PROT_WRITE);
		m[0] = 1;                       /* writable in the TLB again */
	}
	return (now_ns(CLOCK_MONOTONIC) - t0) / n;
}

/*
 * The remote part of a TLB flush: the cycle above with a thread of this mm
 * spinning on a second CPU (each downgrade's flush interrupts it and waits
 * for its answer) less the cycle alone.  -1 with one CPU or no pinning.
 */
static double shootdown_ns(long n)
{
	volatile char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double local, remote;
	pthread_t t;

	if (m == MAP_FAILED || sysconf(_SC_NPROCESSORS_ONLN) < 2 ||
	    pin(pthread_self(), 0))
		return -1;
	m[0] = 1;
	local = wp_cycle_ns(m, n);
	atomic_store(&spin_stop, 0);
	if (pthread_create(&t, NULL, spin, (void *)m))
		return -1;
	if (pin(t, 1)) {
		atomic_store(&spin_stop, 1);
		pthread_join(t, NULL);
		return -1;
	}
	usleep(10000);                          /* on its CPU, spinning */
	remote = wp_cycle_ns(m, n);
	atomic_store(&spin_stop, 1);
	pthread_join(t, NULL);
	munmap((void *)m, 4096);
	return remote > local ? remote - local : -1;
}

int main(int argc, char **argv)
{
	long scale = argc > 1 ? atol(argv[1]) : 1;

	if (scale < 1) {
		fprintf(stderr, "usage: tcg_factor [SCALE>=1]\n");
		return 2;
	}
	double zf, z16;

	zero_fault_zap_ns(200 * scale, &zf, &z16);
	printf("{\"syscall_ns\": %.1f, \"sleep_cpu_ns\": %.1f, \"pingpong_ns\": %.1f, "
	       "\"wp_fault_ns\": %.1f, \"zero_fault_ns\": %.1f, \"zap16_ns\": %.1f, "
	       "\"shootdown_ns\": %.1f}\n",
	       syscall_ns(200000 * scale), sleep_cpu_ns(2000 * scale),
	       pingpong_ns(20000 * scale), wp_fault_ns(200 * scale), zf, z16,
	       shootdown_ns(20000 * scale));
	return 0;
}
