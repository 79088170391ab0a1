/*
 * Ground truth for native wait stacks: WORKERS threads append records to one
 * log under one mutex in append_record(), holding it for ~50 us of work each
 * time: a lock convoy. Every futex wait of a worker is in append_record, and
 * so is every wake (the unlock), each through a wrapper of its own (take(),
 * give()). Built with frame pointers and without (tests/test_stacks.py): the
 * walk steps through the C library by its .eh_frame either way
 * (docs/probes/stacks.md).
 *
 * Prints "tid worker<i> <tid>" for each worker, then "ready"; runs until killed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 4

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long records;

static void spin_us(long us)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

__attribute__((noinline)) static void take(pthread_mutex_t *m)
{
	pthread_mutex_lock(m);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void give(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void append_record(void)
{
	take(&log_lock);
	spin_us(50);
	records++;
	give(&log_lock);
}

static void *worker(void *arg)
{
	printf("tid worker%ld %ld\n", (long)arg, (long)syscall(SYS_gettid));
	fflush(stdout);
	for (;;) {
		append_record();
		spin_us(5);
	}
	return NULL;
}

int main(void)
{
	pthread_t t[WORKERS];

	for (long i = 0; i < WORKERS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	usleep(200000);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
