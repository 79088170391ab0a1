/*
 * primitives' load. Reads a count N per line on stdin, makes N getppid(2)
 * calls and prints the mean ns per call; exits at end of input. One process
 * throughout, so the programs' filter (its TGID, set before their load)
 * holds for every run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
	char line[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %ld\n", (long)syscall(SYS_gettid));
	while (fgets(line, sizeof(line), stdin)) {
		long n = atol(line);
		struct timespec a, b;

		if (n <= 0) {
			fprintf(stderr, "loop: want a count > 0, got %s", line);
			return 2;
		}
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	}
	return 0;
}
