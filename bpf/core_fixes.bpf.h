/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Kernel-version differences, in one place, with the upstream change cited.
 * Each helper reads a field through CO-RE flavours and picks the one the
 * running kernel has at load time.
 */
#ifndef WAITMETER_CORE_FIXES_BPF_H
#define WAITMETER_CORE_FIXES_BPF_H

#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "sched.h"

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

/*
 * The legacy object: the same source built with -DWM_LEGACY=1 (agent/build.rs),
 * loaded where the kernel lacks bpf_loop() (5.17) and what came before it:
 * Debian 11's 5.10 (bullseye), and 5.11-5.16. It has the main object's maps,
 * programs and globals, byte for byte (build.rs compares their skeletons), and
 * differs inside function bodies only:
 * - no bpf_loop() or bpf_for_each_map_elem() (5.13), and no reference to a
 *   callback at all: before 5.13 the verifier does not know a function
 *   pointer (BPF_PSEUDO_FUNC), and refuses the object whole ("number of funcs
 *   in func_info doesn't match number of subprogs"). Native stacks are walked
 *   by frame pointers in a bounded loop; the sweep is not built.
 * - the current task from bpf_get_current_task() (bpf_get_current_task_btf()
 *   is 5.11): an untrusted pointer, its fields read with BPF_CORE_READ.
 * - the current task's saved user registers found at the top of its kernel stack, as
 *   task_pt_regs() finds them (bpf_task_pt_regs() is 5.15), read with
 *   bpf_probe_read_kernel().
 * - no atomics but add (the others are 5.12): compare-and-exchange, the
 *   bitmaps' and and or, and fetch-and-add are done with a plain add, or
 *   under a lock where a race would corrupt (the thread table's claims).
 * - no pointer arguments to global functions (5.12, "bpf: Support pointers
 *   in global func args"): such functions are static there, verified at their
 *   call sites.
 */
#ifndef WM_LEGACY
#define WM_LEGACY 0
#endif

#if WM_LEGACY
/* a function the verifier checks once where it can (a global function), at its call site where it cannot */
#define WM_PTR_ARGS_FN static __noinline

static __always_inline struct task_struct *wm_current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

/* a field of the current task (wm_current_task()) */
#define WM_CUR(task, field) BPF_CORE_READ(task, field)

/*
 * The current task's saved user registers (`task` is the current task):
 * bpf_task_pt_regs() where the kernel has it (5.15; elsewhere the verifier
 * never reaches the call), else where x86-64's task_pt_regs() finds them, at
 * the top of the task's kernel stack (THREAD_SIZE: 16 KiB, 32 KiB on KASAN
 * kernels, which the legacy object does not serve; no padding above them
 * before FRED, 6.9, which has the helper).
 */
#define WM_THREAD_SIZE (16 * 1024)

static __always_inline struct pt_regs *wm_current_regs(struct task_struct *task)
{
	void *stack;

	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs))
		return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	stack = BPF_CORE_READ(task, stack);
	return stack ? (struct pt_regs *)(stack + WM_THREAD_SIZE) - 1 : NULL;
}

/* a saved user register (wm_current_regs()) */
#define WM_REG(regs, reg) BPF_CORE_READ(regs, reg)
#else
#define WM_PTR_ARGS_FN __noinline

static __always_inline struct task_struct *wm_current_task(void)
{
	return bpf_get_current_task_btf();
}

/* a trusted pointer: a plain load (see get_task_state) */
#define WM_CUR(task, field) ((task)->field)

/* the current task's saved user registers (`task` is the current task) */
static __always_inline struct pt_regs *wm_current_regs(struct task_struct *task)
{
	return (struct pt_regs *)bpf_task_pt_regs(task);
}

#define WM_REG(regs, reg) ((regs)->reg)
#endif

/*
 * Whether `current` runs in interrupt context, which a wakeup from it is
 * charged to (never the task it interrupted): the preempt count's hard
 * interrupt and NMI bits, or its softirq-serving bit (SOFTIRQ_OFFSET; a
 * count of bottom halves merely disabled, in process context, is in the
 * bits above it). Where the count lives on x86-64: the per-CPU
 * `__preempt_count`, except from Linux 6.2 (commit 64701838bf05,
 * "x86/percpu: Introduce pcpu_hot") to 6.15 (commit 46e8fff6d45f,
 * "x86/smp: Move this_cpu_off to percpu hot section"), where it is a field of
 * the per-CPU `struct pcpu_hot`. Both are weak: a kernel without either
 * (no BTF for per-CPU variables) tells no interrupt apart (WM_WAKE_TASK).
 */
struct pcpu_hot___wm {
	int preempt_count;
} __attribute__((preserve_access_index));

extern const int __preempt_count __ksym __weak;
extern const struct pcpu_hot___wm pcpu_hot __ksym __weak;

enum {
	WM_SOFTIRQ_OFFSET = 0x100,
	WM_HARDIRQ_NMI_MASK = 0xff0000,
};

static __always_inline __u32 wake_context(void)
{
	__u32 pc = 0;

	if (bpf_ksym_exists(&__preempt_count))
		pc = *(const int *)bpf_this_cpu_ptr(&__preempt_count);
	else if (bpf_ksym_exists(&pcpu_hot))
		pc = BPF_CORE_READ((struct pcpu_hot___wm *)bpf_this_cpu_ptr(&pcpu_hot), preempt_count);
	if (pc & WM_HARDIRQ_NMI_MASK)
		return WM_WAKE_HARDIRQ;
	if (pc & WM_SOFTIRQ_OFFSET)
		return WM_WAKE_SOFTIRQ;
	return WM_WAKE_TASK;
}

#endif /* WAITMETER_CORE_FIXES_BPF_H */
