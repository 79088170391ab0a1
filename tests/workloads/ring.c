// A switch storm of many threads: THREADS threads in a ring, each blocked reading its pipe,
// pass TOKENS tokens around (a read, a little work, a write to the next one's pipe), so every
// pass is a wakeup and a switch on both sides. Prints "ready" when all threads run, then passes
// until killed.
//
//   ring THREADS TOKENS
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int (*pipes)[2];
static int threads;

static void *member(void *arg)
{
	long i = (long)arg;
	char name[16];
	char c;

	snprintf(name, sizeof(name), "ring-%ld", i);
	pthread_setname_np(pthread_self(), name);
	for (;;) {
		if (read(pipes[i][0], &c, 1) != 1)
			return NULL;
		for (volatile int k = 0; k < 2000; k++)
			;
		if (write(pipes[(i + 1) % threads][1], &c, 1) != 1)
			return NULL;
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: ring THREADS TOKENS\n");
		return 2;
	}
	threads = atoi(argv[1]);
	int tokens = atoi(argv[2]);
	if (threads < 2 || tokens < 1 || tokens > threads) {
		fprintf(stderr, "ring: 2 or more threads, 1 to THREADS tokens\n");
		return 2;
	}
	pipes = calloc(threads, sizeof(*pipes));
	for (int i = 0; i < threads; i++)
		if (pipe(pipes[i]))
			return 1;
	pthread_t t;
	for (long i = 0; i < threads; i++)
		if (pthread_create(&t, NULL, member, (void *)i))
			return 1;
	for (int i = 0; i < tokens; i++)
		if (write(pipes[i * threads / tokens][1], "x", 1) != 1)
			return 1;
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}
