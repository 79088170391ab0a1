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

static __always_inline __u32 get_task_state(void *task)
{
	struct task_struct___x *t = task;

	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___o *)task, state);
}

#endif /* WAITMETER_CORE_FIXES_BPF_H */
