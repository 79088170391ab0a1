// Ground truth for futex attribution: on "go" (stdin), N threads contend on
// one pthread mutex for SECS seconds, each holding it for HOLD_US of CPU
// work (and doing a quarter of that outside it), and each measures with clock_gettime the time it spends inside
// pthread_mutex_lock. Then every thread prints
//   result <tid> <ns inside pthread_mutex_lock> <mutex address>
// and exits; the process prints "done" and stays until killed.
//
//   mutex_contend N SECS HOLD_US
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static double secs;
static long hold_us;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *contend(void *arg)
{
	long long end = now_ns() + (long long)(secs * 1e9), waited = 0;
	(void)arg;
	pthread_setname_np(pthread_self(), "contender");
	while (now_ns() < end) {
		long long t0 = now_ns();
		pthread_mutex_lock(&lock);
		long long t1 = now_ns();
		waited += t1 - t0;
		while (now_ns() < t1 + hold_us * 1000)
			; // CPU work holding the lock
		pthread_mutex_unlock(&lock);
		long long t2 = now_ns();
		while (now_ns() < t2 + hold_us * 250)
			; // a little work outside the lock: others get their turn
	}
	pthread_mutex_lock(&print_lock);
	printf("result %ld %lld %p\n", (long)syscall(SYS_gettid), waited, (void *)&lock);
	fflush(stdout);
	pthread_mutex_unlock(&print_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	char line[16];
	if (argc != 4) {
		fprintf(stderr, "usage: %s N SECS HOLD_US\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	secs = atof(argv[2]);
	hold_us = atol(argv[3]);
	pthread_t *t = calloc(n, sizeof(*t));
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2))
		return 1;
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, contend, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("done\n");
	fflush(stdout);
	for (;;)
		pause();
}
