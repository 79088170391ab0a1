/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sweep of the blame maps at a drain of exits, in one system call.
 *
 * Under thread churn every exited thread leaves entries in the blame maps:
 * its own (final: its waits all closed at its exit), and those of live
 * threads it woke or preempted (a joiner's futex wait per worker), which stop
 * growing once their last wait is charged. Reading the whole maps at every
 * drain and deleting those entries one system call each cost the agent more
 * than everything else it does per exit. Instead the agent runs `sweep` (a
 * syscall program, BPF_PROG_RUN): it walks each blame map in the kernel, and
 * moves into `sweep_out` (which the agent reads through its mmap) the entries
 * of waiters without a `threads` entry (exited) and those naming a waker or
 * preemptor without one.
 *
 * The same program takes the entries of live waiters the agent picked (their
 * keys written into `sweep_out`: WM_SWEEP_TAKE). An entry a live waiter may
 * still add to is taken with an atomic exchange for WM_BLAME_TAKEN before it
 * is deleted: a program that looked the entry up before the delete and adds
 * after the exchange sees the bit, and charges its wait to a new entry
 * (add_ns in sched.bpf.c); one that adds between the exchange and the delete
 * finds no room for it and counts the wait lost (`blame_taken`). A charge
 * that comes later creates a new entry, which the next sweep or take moves.
 * What remains: a program that looked the entry up, was held off past the
 * delete and past the element's reuse for a new key (preallocated elements
 * are reused at once), adds to that key; the window is the few instructions
 * between a lookup and its add.
 *
 * Included by sched.bpf.c after its blame maps.
 */
#ifndef WAITMETER_SWEEP_BPF_H
#define WAITMETER_SWEEP_BPF_H

#include "sched.h"

/* what a run moved out; the agent reads it through its mmap */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_sweep_out);
} sweep_out SEC(".maps");

/* The waiter (tid, incarnation) exited: it has no `threads` entry, or the
 * entry is a later thread's with its TID. Its entry is final. */
static __always_inline bool waiter_gone(__u32 tid, __u32 gen)
{
	struct wm_thread *t = find_thread(tid);

	return !t || (__u32)t->d.start != gen;
}

/* The waker or preemptor is not a watched thread any more (0: none, or idle):
 * it exited, or it is not watched (a preempting process' entry is taken at
 * every sweep then: it moves to user space, where it keeps adding up). */
static __always_inline bool counterpart_gone(__u32 tid)
{
	return tid && !find_thread(tid);
}

/* An entry's time, its value marked taken: a probe adding to it now
 * charges a new entry (add_ns in sched.bpf.c). */
static __always_inline __u64 take_ns(__u64 *ns)
{
	return __sync_lock_test_and_set(ns, WM_BLAME_TAKEN) & ~WM_BLAME_TAKEN;
}

/* the callbacks' context: on the stack, as bpf_for_each_map_elem() wants it */
struct sweep_ctx {
	struct wm_sweep_out *o;
};

static long sweep_gil(struct bpf_map *map, struct wm_blame_key *k, __u64 *ns, struct sweep_ctx *c)
{
	struct wm_sweep_out *o = c->o;
	__u32 n = o->n_gil;

	if (!waiter_gone(k->tid, k->gen))
		return 0;
	if (n >= WM_SWEEP_OUT) {
		o->more = 1;
		return 1;
	}
	n &= WM_SWEEP_OUT - 1;
	o->gil[n].k = *k;
	o->gil[n].ns = *ns;
	bpf_map_delete_elem(map, k);
	o->n_gil = n + 1;
	return 0;
}

static long sweep_futex(struct bpf_map *map, struct wm_futex_key *k, __u64 *ns, struct sweep_ctx *c)
{
	struct wm_sweep_out *o = c->o;
	__u32 n = o->n_futex;

	bool gone = waiter_gone(k->tid, k->gen);

	if (!gone && !counterpart_gone(k->waker))
		return 0;
	if (n >= WM_SWEEP_OUT) {
		o->more = 1;
		return 1;
	}
	n &= WM_SWEEP_OUT - 1;
	o->futex[n].k = *k;
	o->futex[n].ns = take_ns(ns);
	o->futex[n].waiter_gone = gone;
	bpf_map_delete_elem(map, k);
	o->n_futex = n + 1;
	return 0;
}

static long sweep_preempt(struct bpf_map *map, struct wm_preempt_key *k, struct wm_preempt *v, struct sweep_ctx *c)
{
	struct wm_sweep_out *o = c->o;
	__u32 n = o->n_preempt;

	bool gone = waiter_gone(k->tid, k->gen);

	if (!gone && !counterpart_gone(k->by_tid))
		return 0;
	if (n >= WM_SWEEP_OUT) {
		o->more = 1;
		return 1;
	}
	n &= WM_SWEEP_OUT - 1;
	o->preempt[n].k = *k;
	__builtin_memcpy(o->preempt[n].v.comm, v->comm, sizeof(v->comm));
	o->preempt[n].v.ns = take_ns(&v->ns);
	o->preempt[n].waiter_gone = gone;
	bpf_map_delete_elem(map, k);
	o->n_preempt = n + 1;
	return 0;
}

/*
 * WM_SWEEP_TAKE: the agent wrote `n_*` keys of each kind into `sweep_out`;
 * each entry there is taken into the first free slot, in order, with its
 * time (keys not there are dropped), and `n_*` says how many were. The
 * count is kept in the map value, not on the stack: the verifier then sees
 * one state per callback, not one per iteration.
 */
static long take_gil(__u64 i, struct sweep_ctx *c)
{
	struct wm_sweep_out *o = c->o;
	struct wm_blame_key k = o->gil[i & (WM_SWEEP_OUT - 1)].k;
	__u64 *ns = bpf_map_lookup_elem(&gil_blame, &k);
	__u32 n = o->n_gil & (WM_SWEEP_OUT - 1);

	if (!ns)
		return 0;
	o->gil[n].k = k;
	o->gil[n].ns = take_ns(ns);
	bpf_map_delete_elem(&gil_blame, &k);
	o->n_gil = n + 1;
	return 0;
}

static long take_futex(__u64 i, struct sweep_ctx *c)
{
	struct wm_sweep_out *o = c->o;
	struct wm_futex_key k = o->futex[i & (WM_SWEEP_OUT - 1)].k;
	__u64 *ns = bpf_map_lookup_elem(&futex_blame, &k);
	__u32 n = o->n_futex & (WM_SWEEP_OUT - 1);

	if (!ns)
		return 0;
	o->futex[n].k = k;
	o->futex[n].ns = take_ns(ns);
	o->futex[n].waiter_gone = 0;
	bpf_map_delete_elem(&futex_blame, &k);
	o->n_futex = n + 1;
	return 0;
}

static long take_preempt(__u64 i, struct sweep_ctx *c)
{
	struct wm_sweep_out *o = c->o;
	struct wm_preempt_key k = o->preempt[i & (WM_SWEEP_OUT - 1)].k;
	struct wm_preempt *v = bpf_map_lookup_elem(&preempt_blame, &k);
	__u32 n = o->n_preempt & (WM_SWEEP_OUT - 1);

	if (!v)
		return 0;
	o->preempt[n].k = k;
	__builtin_memcpy(o->preempt[n].v.comm, v->comm, sizeof(v->comm));
	o->preempt[n].v.ns = take_ns(&v->ns);
	o->preempt[n].waiter_gone = 0;
	bpf_map_delete_elem(&preempt_blame, &k);
	o->n_preempt = n + 1;
	return 0;
}

static __always_inline void take(struct wm_sweep_out *o)
{
	struct sweep_ctx c = { .o = o };
	__u32 gil = o->n_gil < WM_SWEEP_OUT ? o->n_gil : WM_SWEEP_OUT;
	__u32 futex = o->n_futex < WM_SWEEP_OUT ? o->n_futex : WM_SWEEP_OUT;
	__u32 preempt = o->n_preempt < WM_SWEEP_OUT ? o->n_preempt : WM_SWEEP_OUT;

	o->n_gil = 0;
	o->n_futex = 0;
	o->n_preempt = 0;
	o->more = 0;
	bpf_loop(gil, take_gil, &c, 0);
	bpf_loop(futex, take_futex, &c, 0);
	bpf_loop(preempt, take_preempt, &c, 0);
}

SEC("syscall")
int sweep(struct wm_sweep_args *args)
{
	__u32 zero = 0;
	struct wm_sweep_out *o = bpf_map_lookup_elem(&sweep_out, &zero);

	if (!o || WM_LEGACY)
		return -1;
#if !WM_LEGACY
	struct sweep_ctx c;

	if (args->mode == WM_SWEEP_TAKE) {
		take(o);
		return 0;
	}
	c.o = o;
	o->n_gil = 0;
	o->n_futex = 0;
	o->n_preempt = 0;
	o->more = 0;
	if (args->gil)
		bpf_for_each_map_elem(&gil_blame, sweep_gil, &c, 0);
	bpf_for_each_map_elem(&futex_blame, sweep_futex, &c, 0);
	bpf_for_each_map_elem(&preempt_blame, sweep_preempt, &c, 0);
#endif
	return 0;
}

#endif /* WAITMETER_SWEEP_BPF_H */
