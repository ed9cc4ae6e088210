// SPDX-License-Identifier: MIT
// Pipe ping-pong between two processes pinned to one CPU: every hand-over is
// a wakeup followed by a switch-in, the workload runqlat-style tools measure.
// usage: pingpong ROUND_TRIPS  -> prints ns per round trip
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity");
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	int ab[2], ba[2];
	char c = 0;
	struct timespec t0, t1;

	if (pipe(ab) || pipe(ba))
		return 1;
	pin(0);
	pid_t child = fork();
	if (child == 0) {
		for (long i = 0; i < n; i++)
			if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++)
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			return 1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waitpid(child, NULL, 0);
	printf("%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n);
	return 0;
}
