/* A server-shaped loop whose work is in a static function (no export, so no .dynsym entry):
 * it waits 1 ms (its home), then settles the ledger for about 300 ms of CPU, a few
 * milliseconds a call (noipa: the compiler may not hoist the pure call out of the loop). Stripped, only
 * a symbol table elsewhere (MiniDebugInfo, a debug file) names settle_the_ledger. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static __attribute__((noinline, noipa)) unsigned long settle_the_ledger(unsigned long n)
{
	unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++)
		x = (x * 31 + i) % 1000003;
	return x;
}

int main(void)
{
	struct timespec t0, t1;

	printf("ready\n");
	fflush(stdout);
	for (;;) {
		usleep(1000);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			sink += settle_the_ledger(1000000);
			clock_gettime(CLOCK_MONOTONIC, &t1);
		} while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 300000000L);
	}
}
