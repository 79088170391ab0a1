/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Kernel-version differences, in one place, with the upstream change cited.
 * Each helper reads a field through CO-RE flavours and picks the one the
 * running kernel has at load time.
 */
#ifndef WAITMETER_CORE_FIXES_BPF_H
#define WAITMETER_CORE_FIXES_BPF_H

#include <vmlinux.h>
#include <bpf/bpf_core_read.h>

/*
 * Linux 5.14, commit 2f064a59a11f ("sched: Change task_struct::state"):
 * `long state` became `unsigned int __state`.
 */
struct task_struct___o {
	volatile long int state;
} __attribute__((preserve_access_index));

struct task_struct___x {
	unsigned int __state;
} __attribute__((preserve_access_index));

/* `task` is a trusted BTF pointer (a tp_btf argument, the current task, an
 * iterator's task): fields are loads with a CO-RE offset, no helper call
 * (a call and its return cost 20-30 ns each on retpoline/SRSO kernels). */
static __always_inline __u32 get_task_state(struct task_struct *task)
{
	struct task_struct___x *t = (void *)task;

	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return ((struct task_struct___o *)task)->state;
}

/*
 * CFS bandwidth throttling. Linux 6.18 throttles tasks, not run queues (the
 * task-based throttle model): `task_struct::throttled` is set when a
 * throttled task leaves the CPU (40 such switch-outs matched nr_throttled 40
 * in a 20%-quota test here).
 * Before, the task's `cfs_rq->throttled` (an int) says it. The bit-field form
 * of that flag on 6.18 is why the read is PROBED (and why clang-19: clang 14
 * crashes on it).
 */
struct task_struct___throttle {
	bool throttled;
} __attribute__((preserve_access_index));

struct cfs_rq___throttle {
	int throttled;
} __attribute__((preserve_access_index));

static __always_inline bool task_throttled(struct task_struct *p)
{
	struct task_struct___throttle *t = (void *)p;
	struct cfs_rq___throttle *cfs_rq;

	/* a trusted pointer: a plain load (see get_task_state) */
	if (bpf_core_field_exists(t->throttled))
		return t->throttled;
	cfs_rq = (void *)BPF_CORE_READ(p, se.cfs_rq);
	if (!cfs_rq)
		return false;
	return BPF_CORE_READ_BITFIELD_PROBED(cfs_rq, throttled);
}

/*
 * A map helper's error, read from the low 32 bits of what it returns. Until
 * "bpf: return long from bpf_map_ops funcs" (2023), the verifier turned
 * bpf_map_update_elem() and its kin into direct calls of the map's ops,
 * which returned int: the upper half of the helper's `long` is then zero,
 * not the sign, and -EEXIST reads 4294967279 (Debian's 6.1: every stack
 * seen before was counted lost, and no wait had a stack; bcc's libbpf-tools
 * met the same, iovisor/bcc#4488).
 */
static __always_inline int map_err(long ret)
{
	return (int)ret;
}

#endif /* WAITMETER_CORE_FIXES_BPF_H */
