/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * holder samples: the native stack of a thread that holds the GIL while
 * others wait behind it (the C function of `json.dumps` that never lets go).
 * A waiter's program runs in the waiter's context, and the kernel walks only
 * the current task's user stack; so a CPU-clock perf event on every CPU runs
 * `sample_holder` in whatever thread has the CPU, and takes its stack only
 * when a waiter went to sleep behind it in the last WM_HOLDER_WANTED_NS.
 *
 *   waiter's switch-out into a GIL wait   holder_samples[(tgid, holder tstate)]
 *                                         .wanted = now, .want_switch = the
 *                                         GIL's switch_number; and, if the last
 *                                         sample is of this same hold (its
 *                                         switch_at is that number), its stack
 *                                         is the holder stack's native part
 *   CPU clock tick in a wanted holder     .native = its user stack, .at = now,
 *                                         .switch_at = .want_switch
 *
 * A switch_number that changed means the GIL changed hands: a sample of the
 * holder's previous hold is never used for the next. Included by
 * bpf/sched.bpf.c after stacks.bpf.h (docs/probes/stacks.md).
 */
#ifndef WAITMETER_HOLDER_SAMPLES_BPF_H
#define WAITMETER_HOLDER_SAMPLES_BPF_H

#include "stacks.h"

/* A holder is sampled while a waiter went to sleep behind it this recently
 * (waiters time out and sleep again every switch interval, 5 ms). */
#define WM_HOLDER_WANTED_NS 20000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_HOLDERS);
	__type(key, struct wm_holder_key);
	__type(value, struct wm_holder_sample);
} holder_samples SEC(".maps");

/* A waiter goes to sleep behind the holder `tstate` of `tgid`, the GIL's
 * switch number `sw`: mark it wanted, and return the native stack sampled
 * during this hold (negative: none yet). */
static __always_inline __s32 holder_wanted(__u32 tgid, __u64 tstate, __u16 sw, __u64 now)
{
	struct wm_holder_key key = { .tgid = tgid, .tstate = tstate };
	struct wm_holder_sample *s;

	/* the holder stack is its Python stack with these frames in front */
	if ((cfg.stacks & (WM_STACKS_NATIVE | WM_STACKS_PYTHON)) != (WM_STACKS_NATIVE | WM_STACKS_PYTHON) || !tstate)
		return -1;
	s = bpf_map_lookup_elem(&holder_samples, &key);
	if (!s) {
		struct wm_holder_sample init = { .wanted = now, .native = -1, .want_switch = sw };

		bpf_map_update_elem(&holder_samples, &key, &init, BPF_NOEXIST);
		return -1;
	}
	/* racy plain writes: a lost one skips one sample */
	s->wanted = now;
	s->want_switch = sw;
	if (s->native >= 0 && s->switch_at == sw && s->at + WM_HOLDER_WANTED_NS >= now)
		return s->native;
	return -1;
}

/*
 * A watched thread on the CPU that has not blocked (its voluntary context
 * switches unchanged) for a quarter of the stall objective is busy in a long
 * stretch away from its waits, or busy all the time: its stack now is what
 * kept it from its home, charged one clock period under role busy (gen 0:
 * user space names the live thread by its TID). Only while every stack is
 * kept (`stacks_all`). The program cannot read `threads` (a perf_event
 * program may not use a map with a spin lock): it follows each thread's
 * `nvcsw` in a map of its own, at the clock's rate.
 */
struct wm_busy {
	__u64 nvcsw;      /* the thread's voluntary switches at `since` */
	__u64 since;      /* the first sample that saw that count */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_THREADS);
	__type(key, __u32);
	__type(value, struct wm_busy);
} busy SEC(".maps");

static __always_inline void sample_busy(void *ctx, __u32 tgid, __u32 tid)
{
	struct wm_wait_stack_key key = { .tid = tid, .state = WM_STATE_RUNNING, .role = WM_ROLE_BUSY };
	struct task_struct *task;
	struct wm_stack_ref own;
	struct wm_busy *b;
	__u64 nvcsw, now;

	if (!cfg.stretch_long_ns || !cfg.sample_period_ns)
		return;
	task = wm_current_task();
	nvcsw = WM_CUR(task, nvcsw);
	now = bpf_ktime_get_ns();
	b = bpf_map_lookup_elem(&busy, &tid);
	if (!b || b->nvcsw != nvcsw) {
		struct wm_busy fresh = { .nvcsw = nvcsw, .since = now };

		bpf_map_update_elem(&busy, &tid, &fresh, BPF_ANY);
		return;
	}
	if (now < b->since + cfg.stretch_long_ns / 4)
		return;
	own_stacks(tgid, tid, &own);
	if (!has_stack(&own))
		return;
	key.native = own.native;
	key.py = own.py;
	if (!add_wait(&key, cfg.sample_period_ns, 0, false))
		stack_loss(WM_STACK_STAT_WAIT_MAP_FULL);
}

SEC("perf_event")
int sample_holder(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct wm_holder_key key = { .tgid = id >> 32 };
	struct wm_holder_sample *s;
	__u64 *tstate, now;
	long stack;

	if (!(cfg.stacks & WM_STACKS_NATIVE))
		return 0;
	if (stacks_all && tid && is_watched(id >> 32))
		sample_busy(ctx, id >> 32, tid);
	tstate = bpf_map_lookup_elem(&py_tstates, &tid);
	if (!tstate || !*tstate)
		return 0;
	key.tstate = *tstate;
	s = bpf_map_lookup_elem(&holder_samples, &key);
	if (!s)
		return 0;
	now = bpf_ktime_get_ns();
	if (now > s->wanted + WM_HOLDER_WANTED_NS)
		return 0;
	stack = wm_native_stack(key.tgid);
	if (stack < 0)
		return 0;
	s->native = stack;
	s->switch_at = s->want_switch;
	s->at = now;
	return 0;
}

#endif /* WAITMETER_HOLDER_SAMPLES_BPF_H */
