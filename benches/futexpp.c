// SPDX-License-Identifier: MIT
// Futex ping-pong between two threads pinned to one CPU: every hand-over
// is a FUTEX_WAKE and a FUTEX_WAIT that blocks (a wakeup and a switch),
// the workload a lock probe pays per futex call on.
// usage: futexpp ROUND_TRIPS  -> prints ns per round trip
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int turn;
static long trips;

static void futex(atomic_int *w, int op, int val)
{
	syscall(SYS_futex, w, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static void pin(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(0, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity");
}

/* Waits for its turn (`me`), hands it over. */
static void *player(void *arg)
{
	int me = (int)(long)arg;

	pin();
	for (long i = 0; i < trips; i++) {
		while (atomic_load(&turn) != me)
			futex(&turn, FUTEX_WAIT, !me);
		atomic_store(&turn, !me);
		futex(&turn, FUTEX_WAKE, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec a, b;
	pthread_t t[2];

	trips = argc > 1 ? atol(argv[1]) : 100000;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, player, (void *)i);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / trips);
	return 0;
}
