// Ground-truth workload for waitmeter's integration tests and demo.
//
// Starts threads whose expected states are known, names them after their
// role (pthread_setname_np), prints "tid <role> <tid>" for each, then "ready"
// once every thread is in its state. Runs until killed (or --exit-after).
//
//   --busy N              N threads spinning on the CPU            -> running
//   --sleep N             N threads in nanosleep(1 s) loops         -> sleep
//   --pipe N              N threads blocked reading an empty pipe   -> io_wait
//   --mutex               a holder that sleeps holding a mutex, and
//                         a waiter blocked in pthread_mutex_lock    -> futex_wait
//   --pinned-pair CPU     two spinning threads pinned to CPU        -> runqueue ~50%
//   --pinned-busy CPU     one spinning thread pinned to CPU (two such processes share it)
//   --short-lived MS      a spinning thread that exits MS ms after "ready"
//   --exit-after MS       the whole process exits MS ms after "ready"
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int started;
static atomic_int is_ready;
static int pipe_fds[2];
static long short_lived_ms;

struct role {
	char name[16];
	int cpu; // -1: any
	void *(*fn)(void *);
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void announce(const struct role *r)
{
	pthread_setname_np(pthread_self(), r->name);
	if (r->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(r->cpu, &set);
		if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
			fprintf(stderr, "cannot pin %s to CPU %d\n", r->name, r->cpu);
			exit(1);
		}
	}
	pthread_mutex_lock(&print_lock);
	printf("tid %s %ld\n", r->name, (long)syscall(SYS_gettid));
	fflush(stdout);
	pthread_mutex_unlock(&print_lock);
	atomic_fetch_add(&started, 1);
}

static void *spin(void *arg)
{
	announce(arg);
	volatile unsigned long x = 0;
	for (;;)
		x++;
	return NULL;
}

static void *sleeper(void *arg)
{
	announce(arg);
	for (;;) {
		struct timespec ts = {1, 0};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *pipe_reader(void *arg)
{
	char c;
	announce(arg);
	for (;;)
		if (read(pipe_fds[0], &c, 1) <= 0)
			return NULL;
	return NULL;
}

static void *holder(void *arg)
{
	pthread_mutex_lock(&lock);
	announce(arg);
	for (;;)
		pause();
	return NULL;
}

static void *waiter(void *arg)
{
	announce(arg);
	pthread_mutex_lock(&lock); // never returns: the holder never unlocks
	return NULL;
}

static void *short_lived(void *arg)
{
	announce(arg);
	// spin from "ready" for short_lived_ms, then exit
	while (!atomic_load(&is_ready))
		usleep(1000);
	double end = now_s() + short_lived_ms / 1000.0;
	volatile unsigned long x = 0;
	while (now_s() < end)
		x++;
	return NULL;
}

static void start(struct role *r)
{
	pthread_t t;
	if (pthread_create(&t, NULL, r->fn, r)) {
		perror("pthread_create");
		exit(1);
	}
}

static struct role *role(const char *name, int i, int cpu, void *(*fn)(void *))
{
	struct role *r = calloc(1, sizeof(*r));
	if (i >= 0)
		snprintf(r->name, sizeof(r->name), "%.8s-%d", name, i % 1000);
	else
		snprintf(r->name, sizeof(r->name), "%s", name);
	r->cpu = cpu;
	r->fn = fn;
	return r;
}

int main(int argc, char **argv)
{
	int n = 0, expect = 0;
	long exit_after_ms = -1;

	if (pipe(pipe_fds)) {
		perror("pipe");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--busy") && v) {
			for (n = 0; n < atoi(v); n++, expect++)
				start(role("busy", n, -1, spin));
			i++;
		} else if (!strcmp(a, "--sleep") && v) {
			for (n = 0; n < atoi(v); n++, expect++)
				start(role("sleeper", n, -1, sleeper));
			i++;
		} else if (!strcmp(a, "--pipe") && v) {
			for (n = 0; n < atoi(v); n++, expect++)
				start(role("reader", n, -1, pipe_reader));
			i++;
		} else if (!strcmp(a, "--mutex")) {
			start(role("holder", -1, -1, holder));
			while (atomic_load(&started) < expect + 1)
				usleep(1000);
			start(role("waiter", -1, -1, waiter));
			expect += 2;
		} else if (!strcmp(a, "--pinned-pair") && v) {
			start(role("spin-a", -1, atoi(v), spin));
			start(role("spin-b", -1, atoi(v), spin));
			expect += 2;
			i++;
		} else if (!strcmp(a, "--pinned-busy") && v) {
			start(role("spin", -1, atoi(v), spin));
			expect++;
			i++;
		} else if (!strcmp(a, "--short-lived") && v) {
			short_lived_ms = atol(v);
			start(role("short", -1, -1, short_lived));
			expect++;
			i++;
		} else if (!strcmp(a, "--exit-after") && v) {
			exit_after_ms = atol(v);
			i++;
		} else {
			fprintf(stderr, "usage: %s [--busy N] [--sleep N] [--pipe N] [--mutex] "
					"[--pinned-pair CPU] [--pinned-busy CPU] [--short-lived MS] [--exit-after MS]\n", argv[0]);
			return 2;
		}
	}
	pthread_setname_np(pthread_self(), "main");
	printf("tid main %ld\n", (long)syscall(SYS_gettid));
	while (atomic_load(&started) < expect)
		usleep(1000);
	usleep(20000); // let the last thread reach its blocking call
	printf("ready\n");
	fflush(stdout);
	atomic_store(&is_ready, 1);
	if (exit_after_ms >= 0) {
		usleep(exit_after_ms * 1000);
		printf("exiting\n");
		fflush(stdout);
		exit(0);
	}
	for (;;)
		pause();
}
