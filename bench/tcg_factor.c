// SPDX-License-Identifier: GPL-2.0
/*
 * tcg_factor - how much slower the emulated VM runs the kernel paths the
 * compute scheduler's thread lives on, against the host: a syscall, a timer
 * sleep and wake-up (the thread's poll), and a wake-up of another task
 * through a pipe (a kick).  Run it on the host and in the VM
 * (bench/compute_accuracy.py --tcg-factor does both); the ratio turns the
 * scheduler's emulated CPU time into an estimate for native hardware.
 *
 * Output: one JSON object, ns per operation (CPU time where it says cpu).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

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

int main(int argc, char **argv)
{
	long scale = argc > 1 ? atol(argv[1]) : 1;

	if (scale < 1) {
		fprintf(stderr, "usage: tcg_factor [SCALE>=1]\n");
		return 2;
	}
	printf("{\"syscall_ns\": %.1f, \"sleep_cpu_ns\": %.1f, \"pingpong_ns\": %.1f}\n",
	       syscall_ns(200000 * scale), sleep_cpu_ns(2000 * scale),
	       pingpong_ns(20000 * scale));
	return 0;
}
