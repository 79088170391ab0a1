// Ground truth for where the time on the CPU goes: one thread reads the clock in a loop,
// through the vDSO (clock_gettime: user mode only) or as a real system call
// (syscall(SYS_clock_gettime): what every clock read costs when the kernel's clock source is
// one the vDSO cannot read, e.g. hpet), and counts its reads.
//
//   clockloop vdso|syscall
//
// Prints "tid reader <tid>", then "ready"; then every second "reads <n>" (so far).
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long reads;
static int use_syscall;

static void *reader(void *arg)
{
	struct timespec ts;

	(void)arg;
	printf("tid reader %ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	for (;;) {
		if (use_syscall)
			syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
		else
			clock_gettime(CLOCK_MONOTONIC, &ts);
		reads++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc != 2 || (strcmp(argv[1], "vdso") && strcmp(argv[1], "syscall"))) {
		fprintf(stderr, "usage: clockloop vdso|syscall\n");
		return 2;
	}
	use_syscall = !strcmp(argv[1], "syscall");
	pthread_create(&t, NULL, reader, NULL);
	usleep(100000);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		sleep(1);
		printf("reads %lu\n", reads);
		fflush(stdout);
	}
}
