// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The floor of a scheduler probe: empty programs on the hooks waitmeter's sched
 * probe uses (bpf/sched.bpf.c), of the same kind (tp_btf). With bpf_stats on,
 * their ns per run is what the call into a program and the stats' own clock
 * reads cost on this machine: the part of waitmeter's per-event figure that no
 * program can avoid. The names are the hooks' (waitmeter's are the
 * hooks' + "_btf"), so both map to the same row of the bench's table.
 *
 * No headers needed: an empty program reads neither its context nor any type.
 *   clang -target bpf -O2 -g -c floor.bpf.c -o floor.bpf.o   (bench/harness.py builds it)
 * Loaded and held by bench/floor/floor.py.
 */
#define SEC(name) __attribute__((section(name), used))

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/sched_switch")
int sched_switch(void *ctx)
{
	return 0;
}

SEC("tp_btf/sched_wakeup")
int sched_wakeup(void *ctx)
{
	return 0;
}

SEC("tp_btf/sched_waking")
int sched_waking(void *ctx)
{
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int sched_wakeup_new(void *ctx)
{
	return 0;
}

SEC("tp_btf/sched_process_exit")
int sched_process_exit(void *ctx)
{
	return 0;
}
