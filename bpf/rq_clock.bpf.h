/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The time of a switch or a wakeup, from the scheduler's own clock.
 *
 * At sched_switch, sched_wakeup and sched_wakeup_new the kernel holds the
 * run queue's lock and has just updated its clock (`rq->clock`, the
 * sched_clock the kernel's own run-time accounting and schedstat use). That
 * clock is a load through the task's typed pointer; bpf_ktime_get_ns() is a
 * helper call, 79 ns on a kernel with return-thunk mitigations
 * (docs/performance.md). Every other timestamp of waitmeter is
 * CLOCK_MONOTONIC, so each run queue keeps the offset between the two,
 * taken again with one bpf_ktime_get_ns() once its clock has moved on by
 * WM_RQ_CLOCK_RECAL_NS: the two clocks drift apart by at most the NTP
 * adjustment (≤ 500 ppm, 0.5 µs a millisecond), and the offset carries the
 * few µs between the clock's update and the tracepoint.
 *
 * Only under the run queue's lock: the lock orders the offset's readers and
 * writers (a run queue's switches and the wakeups onto it), and the clock is
 * fresh there (sched_waking and sched_process_exit take bpf_ktime_get_ns()).
 * A kernel without the field (no CONFIG_FAIR_GROUP_SCHED) or a task without
 * a run queue reads bpf_ktime_get_ns(), as before.
 */
#ifndef WAITMETER_RQ_CLOCK_BPF_H
#define WAITMETER_RQ_CLOCK_BPF_H

#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* the offset is taken again once the run queue's clock moves on by this */
#define WM_RQ_CLOCK_RECAL_NS 1000000ULL
/* run queues with an offset of their own; a CPU beyond reads the helper */
#define WM_RQ_CLOCK_CPUS 4096

struct wm_rq_clock {
	__u64 rq_at; /* the run queue's clock when the offset was taken */
	__u64 off;   /* CLOCK_MONOTONIC - rq->clock then (mod 2^64) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WM_RQ_CLOCK_CPUS);
	__type(key, __u32);
	__type(value, struct wm_rq_clock);
} rq_clocks SEC(".maps");

struct cfs_rq___clock {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct rq___clock {
	u64 clock;
	int cpu;
} __attribute__((preserve_access_index));

/* CLOCK_MONOTONIC ns now, for a task on a run queue whose lock is held */
static __always_inline __u64 rq_now(struct task_struct *p)
{
	struct cfs_rq___clock *cfs_rq;
	struct rq___clock *rq;
	struct wm_rq_clock *c;
	__u64 clock, mono;
	__u32 cpu;

	if (!bpf_core_field_exists(struct cfs_rq___clock, rq))
		return bpf_ktime_get_ns();
	/* trusted pointers: plain loads (a fault reads 0) */
	cfs_rq = (void *)p->se.cfs_rq;
	if (!cfs_rq)
		return bpf_ktime_get_ns();
	rq = (void *)cfs_rq->rq;
	if (!rq)
		return bpf_ktime_get_ns();
	clock = rq->clock;
	cpu = rq->cpu;
	c = bpf_map_lookup_elem(&rq_clocks, &cpu);
	if (!c || !clock)
		return bpf_ktime_get_ns();
	if (clock - c->rq_at < WM_RQ_CLOCK_RECAL_NS && c->rq_at)
		return clock + c->off;
	mono = bpf_ktime_get_ns();
	c->off = mono - clock;
	c->rq_at = clock;
	return mono;
}

#endif /* WAITMETER_RQ_CLOCK_BPF_H */
