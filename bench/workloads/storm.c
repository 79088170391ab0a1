// Scheduler worst cases for `make bench`. Each mode prints "ready", waits for
// a line "go" on stdin, does a fixed amount of work, prints
//   {"seconds": <elapsed>, "cpu_s": <CPU time of the process>, "ops": <operations>}
// and exits when stdin closes (the harness reads the tool's counters first).
//
//   storm pipe N [CPU]          two threads ping-pong a byte through two pipes, N round
//                               trips (a context-switch storm; CPU >= 0 pins both there)
//   storm condpair N [CPU]      two threads hand a turn back and forth through one mutex and
//                               two condition variables, N round trips (a futex_wait /
//                               futex_wake storm, as a worker pool's queue hand-off makes;
//                               CPU >= 0 pins both there)
//   storm paced RATE SECS       the same ping-pong paced to RATE round trips/s for SECS s
//                               (a steady, known scheduler event rate)
//   storm mutex N               one thread locks and unlocks a pthread mutex N times
//                               (uncontended: no syscall at all)
//   storm contended N THREADS   THREADS threads share one pthread mutex, N lock/unlock
//                               in all, as much work inside as outside (a futex storm)
//   storm churn N [PAR]         create and join N threads that exit at once, PAR at a time
//   storm syscalls N            one thread makes N getppid() syscalls (the cheapest there is:
//                               the syscall probe's worst case, its cost all overhead)
//   storm idle SECS             sleeps SECS s (a quiet machine: the agent's idle cost)
//   storm churnfor SECS CREATORS [RATE]
//                               CREATORS threads each create and join threads that exit at
//                               once, 4 at a time, for SECS s; RATE > 0 paces the exits to
//                               RATE/s in all (ops: threads that exited)
//   storm futexfor SECS THREADS THREADS threads take turns on one mutex held across a 50 us
//                               sleep, for SECS s: every lock blocks in futex_wait (a paced
//                               futex storm; ops: locks taken)
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int ping[2], pong[2];

static void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
}

static void *echo(void *arg)
{
	char c;
	pin(*(int *)arg);
	while (read(ping[0], &c, 1) == 1 && c)
		if (write(pong[1], &c, 1) != 1)
			die("write");
	return NULL;
}

// condpair: whose turn it is (0: main's, 1: the partner's, -1: stop)
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_main = PTHREAD_COND_INITIALIZER, turn_partner = PTHREAD_COND_INITIALIZER;
static int turn;

static void *partner(void *arg)
{
	pin(*(int *)arg);
	pthread_mutex_lock(&turn_lock);
	for (;;) {
		while (turn == 0)
			pthread_cond_wait(&turn_partner, &turn_lock);
		if (turn < 0)
			break;
		turn = 0;
		pthread_cond_signal(&turn_main);
	}
	pthread_mutex_unlock(&turn_lock);
	return NULL;
}

// one round trip of condpair: give the partner its turn, wait for ours back
static void hand_over(int next)
{
	pthread_mutex_lock(&turn_lock);
	turn = next;
	pthread_cond_signal(&turn_partner);
	while (turn == 1)
		pthread_cond_wait(&turn_main, &turn_lock);
	pthread_mutex_unlock(&turn_lock);
}

static int inside = 20; // work units inside the lock (and outside it)

static void *lock_loop(void *arg)
{
	static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	long n = *(long *)arg;
	volatile unsigned long x = 0;
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(&m);
		for (int k = 0; k < inside; k++)
			x++;
		pthread_mutex_unlock(&m);
		for (int k = 0; k < 20; k++)
			x++;
	}
	return NULL;
}

static void *nothing(void *arg)
{
	return arg;
}

static double until;     // churnfor, futexfor: stop at this now_s()
static long per_creator; // churnfor: exits/s of one creator (0: as fast as it can)
static long done;        // ops of all threads (atomic adds)

static void sleep_until(struct timespec *next, long add_ns)
{
	next->tv_nsec += add_ns;
	while (next->tv_nsec >= 1000000000L) {
		next->tv_nsec -= 1000000000L;
		next->tv_sec++;
	}
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL);
}

static void *creator(void *arg)
{
	enum { PAR = 4 };
	pthread_t ts[PAR];
	struct timespec next;
	long n = 0;
	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (now_s() < until) {
		for (int i = 0; i < PAR; i++)
			if (pthread_create(&ts[i], NULL, nothing, NULL))
				die("pthread_create");
		for (int i = 0; i < PAR; i++)
			pthread_join(ts[i], NULL);
		n += PAR;
		if (per_creator > 0)
			sleep_until(&next, 1000000000L * PAR / per_creator);
	}
	__atomic_fetch_add(&done, n, __ATOMIC_RELAXED);
	return NULL;
}

static void *sleepy_locker(void *arg)
{
	static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	struct timespec hold = {0, 50000};
	long n = 0;
	(void)arg;
	while (now_s() < until) {
		pthread_mutex_lock(&m);
		nanosleep(&hold, NULL);
		pthread_mutex_unlock(&m);
		n++;
	}
	__atomic_fetch_add(&done, n, __ATOMIC_RELAXED);
	return NULL;
}

// k threads running fn until `until`; returns the ops they added up
static long for_a_while(void *(*fn)(void *), int k)
{
	pthread_t *ts = calloc(k, sizeof(*ts));
	for (int i = 0; i < k; i++)
		if (pthread_create(&ts[i], NULL, fn, NULL))
			die("pthread_create");
	for (int i = 0; i < k; i++)
		pthread_join(ts[i], NULL);
	free(ts);
	return done;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: storm pipe|condpair|paced|mutex|contended|churn|syscalls|idle|churnfor|futexfor N [ARG [ARG]]\n");
		return 2;
	}
	const char *mode = argv[1];
	long n = atol(argv[2]);
	long arg = argc > 3 ? atol(argv[3]) : -1;
	pthread_t t;
	int cpu = (int)arg;

	if (!strcmp(mode, "pipe") || !strcmp(mode, "paced")) {
		if (pipe(ping) || pipe(pong))
			die("pipe");
		if (!strcmp(mode, "paced"))
			cpu = -1;
		if (pthread_create(&t, NULL, echo, &cpu))
			die("pthread_create");
		pin(cpu);
	}
	if (!strcmp(mode, "condpair")) {
		if (pthread_create(&t, NULL, partner, &cpu))
			die("pthread_create");
		pin(cpu);
	}
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2))
		return 1;
	double t0 = now_s(), cpu0 = cpu_s();
	long ops = 0;
	char c = 1;
	if (!strcmp(mode, "pipe")) {
		for (ops = 0; ops < n; ops++)
			if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
				die("ping");
	} else if (!strcmp(mode, "condpair")) {
		for (ops = 0; ops < n; ops++)
			hand_over(1);
	} else if (!strcmp(mode, "paced")) {
		// n round trips per second for arg seconds, paced on absolute deadlines
		struct timespec next;
		clock_gettime(CLOCK_MONOTONIC, &next);
		long period_ns = 1000000000L / n, total = n * arg;
		for (ops = 0; ops < total; ops++) {
			if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
				die("ping");
			next.tv_nsec += period_ns;
			while (next.tv_nsec >= 1000000000L) {
				next.tv_nsec -= 1000000000L;
				next.tv_sec++;
			}
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		}
	} else if (!strcmp(mode, "mutex")) {
		lock_loop(&n);
		ops = n;
	} else if (!strcmp(mode, "contended")) {
		int k = arg > 0 ? (int)arg : 4;
		pthread_t *ts = calloc(k, sizeof(*ts));
		long each = n / k;
		for (int i = 0; i < k; i++)
			if (pthread_create(&ts[i], NULL, lock_loop, &each))
				die("pthread_create");
		for (int i = 0; i < k; i++)
			pthread_join(ts[i], NULL);
		ops = each * k;
	} else if (!strcmp(mode, "churn")) {
		int par = arg > 0 ? (int)arg : 4;
		pthread_t *ts = calloc(par, sizeof(*ts));
		for (ops = 0; ops < n; ops += par) {
			for (int i = 0; i < par; i++)
				if (pthread_create(&ts[i], NULL, nothing, NULL))
					die("pthread_create");
			for (int i = 0; i < par; i++)
				pthread_join(ts[i], NULL);
		}
	} else if (!strcmp(mode, "syscalls")) {
		for (ops = 0; ops < n; ops++)
			syscall(SYS_getppid);
	} else if (!strcmp(mode, "idle")) {
		struct timespec ts = {n, 0};
		nanosleep(&ts, NULL);
	} else if (!strcmp(mode, "churnfor") || !strcmp(mode, "futexfor")) {
		int k = arg > 0 ? (int)arg : 2;
		long rate = argc > 4 ? atol(argv[4]) : 0;
		per_creator = rate > 0 ? (rate + k - 1) / k : 0;
		until = t0 + n;
		ops = for_a_while(!strcmp(mode, "churnfor") ? creator : sleepy_locker, k);
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	double elapsed = now_s() - t0, used = cpu_s() - cpu0;
	if (!strcmp(mode, "pipe") || !strcmp(mode, "paced")) {
		c = 0;
		if (write(ping[1], &c, 1) != 1)
			die("write");
		pthread_join(t, NULL);
	}
	if (!strcmp(mode, "condpair")) {
		pthread_mutex_lock(&turn_lock);
		turn = -1;
		pthread_cond_signal(&turn_partner);
		pthread_mutex_unlock(&turn_lock);
		pthread_join(t, NULL);
	}
	printf("{\"seconds\": %.6f, \"cpu_s\": %.6f, \"ops\": %ld}\n", elapsed, used, ops);
	fflush(stdout);
	// the harness reads the tool's counters, then closes stdin
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
