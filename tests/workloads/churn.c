// Thread churn, as a thread-per-request server or a pool that is torn down
// and rebuilt does it: two steady threads pass a token through a mutex and
// condition variable for the whole run; meanwhile, for SECS seconds, waves of
// short-lived threads start, queue on one mutex (futex waits, run-queue waits),
// and exit. Every BURST_EVERY-th wave has BURST threads that all exit at once
// behind a barrier (more final records at once than the agent's exit ring
// buffer holds: some are lost, and their entries must still be cleaned).
// Workers are named "worker"; the main and steady threads keep the
// program's name. Prints "tid steady-<i> <tid>" and "ready", starts the waves on "go" (stdin),
// prints "waves <n> threads <n>" and "done" at the end, then stays until killed.
//
//   churn SECS WAVE BURST BURST_EVERY
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t token_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t token_cond = PTHREAD_COND_INITIALIZER;
static int token;
static volatile int running = 1;
static pthread_barrier_t barrier;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void spin_us(long us)
{
	double end = now_s() + us / 1e6;
	while (now_s() < end)
		;
}

static void *steady(void *arg)
{
	long me = (long)arg;

	printf("tid steady-%ld %ld\n", me, (long)syscall(SYS_gettid));
	fflush(stdout);
	while (running) {
		pthread_mutex_lock(&token_lock);
		while (token != me && running)
			pthread_cond_wait(&token_cond, &token_lock);
		token = 1 - me;
		pthread_cond_broadcast(&token_cond);
		pthread_mutex_unlock(&token_lock);
		usleep(2000);
	}
	return NULL;
}

static void *worker(void *arg)
{
	int burst = arg != NULL;

	pthread_setname_np(pthread_self(), "worker");
	for (int i = 0; i < 3; i++) {
		pthread_mutex_lock(&lock);
		spin_us(100);
		pthread_mutex_unlock(&lock);
	}
	if (burst)
		pthread_barrier_wait(&barrier);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: churn SECS WAVE BURST BURST_EVERY\n");
		return 2;
	}
	double secs = atof(argv[1]);
	int wave = atoi(argv[2]), burst = atoi(argv[3]), every = atoi(argv[4]);
	int most = wave > burst ? wave : burst;
	pthread_t st[2], *t = calloc(most, sizeof(*t));
	pthread_attr_t small;
	long waves = 0, threads = 0;

	pthread_attr_init(&small);
	pthread_attr_setstacksize(&small, 64 * 1024);
	for (long i = 0; i < 2; i++)
		pthread_create(&st[i], NULL, steady, (void *)i);
	usleep(100000);
	printf("ready\n");
	fflush(stdout);
	char go[8];
	if (!fgets(go, sizeof(go), stdin))
		return 1;
	double end = now_s() + secs;
	while (now_s() < end) {
		int is_burst = every > 0 && waves % every == every - 1;
		int n = is_burst ? burst : wave, made = 0;

		if (is_burst)
			pthread_barrier_init(&barrier, NULL, n);
		for (int i = 0; i < n; i++)
			if (pthread_create(&t[i], &small, worker, is_burst ? (void *)1 : NULL) == 0)
				made++;
			else if (is_burst)
				break;
		if (is_burst && made < n) {
			fprintf(stderr, "could not start a burst of %d threads\n", n);
			return 1;
		}
		for (int i = 0; i < made; i++)
			pthread_join(t[i], NULL);
		if (is_burst)
			pthread_barrier_destroy(&barrier);
		waves++;
		threads += made;
	}
	printf("waves %ld threads %ld\ndone\n", waves, threads);
	fflush(stdout);
	pause();
	return 0;
}
