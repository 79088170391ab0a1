// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * sched: per-thread time partition, aggregated in the kernel.
 *
 * For every thread of a watched process the `threads` map holds the state it
 * is in, since when, and the nanoseconds already spent in each state. The
 * scheduler tracepoints move a thread between states:
 *
 *   switch-in                 -> running
 *   switch-out, preempted     -> runqueue
 *   switch-out, blocked       -> futex_wait / io_wait / sleep / other, by the
 *                                syscall in flight (read from the saved user
 *                                registers, no syscall probe needed)
 *   wakeup / wakeup_new       -> runqueue
 *   exit                      -> final record on the `exits` ring buffer
 *
 * Cost for tasks of unwatched processes: one inlined array lookup (a bit test)
 * per side of a context switch and per wakeup; see docs/probes/sched.md.
 */
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sched.h"
#include "core_fixes.bpf.h"
#include "rq_clock.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* include/linux/sched.h; #defines do not reach vmlinux.h */
#define WM_TASK_RUNNING 0x0000
#define WM_TASK_UNINTERRUPTIBLE 0x0002
#define WM_PF_EXITING 0x00000004
#define WM_PF_KTHREAD 0x00200000
#define WM_ENOSYS 38
/* x86-64 syscall numbers */
#define WM_NR_SCHED_YIELD 24
#define WM_NR_FUTEX 202
#define WM_NR_FUTEX_WAIT 455
#define WM_NR_FUTEX_WAKE 454
#define WM_NR_FUTEX_REQUEUE 456

const volatile struct wm_sched_config cfg = {};

/* Set by the agent while every wait stack is kept (`attach`; `run` while a
 * profile is recorded or pushed). Clear, only what the GIL holders held is
 * charged (waitmeter_gil_function_hold_seconds): no stack of a victim, a
 * waker or a preemptor is taken or charged, to be drained and thrown away. */
volatile __u32 stacks_all = 0;

/* keep the ABI types in BTF so the skeleton exports them */
struct wm_exit _wm_exit = {};
struct wm_task_ids _wm_task_ids = {};
struct wm_gil_key _wm_gil_key = {};
struct wm_gil _wm_gil = {};
struct wm_blame_key _wm_blame_key = {};
struct wm_futex_key _wm_futex_key = {};
struct wm_preempt_key _wm_preempt_key = {};
struct wm_preempt _wm_preempt = {};
struct wm_throttle _wm_throttle = {};
struct wm_wait_stack_key _wm_wait_stack_key = {};
struct wm_py_stack _wm_py_stack = {};
struct wm_py_walk _wm_py_walk = {};
struct wm_stretch_key _wm_stretch_key = {};
struct wm_stretch _wm_stretch = {};
enum wm_stretch_limits _wm_stretch_limits = WM_HOME_SLOTS;
enum wm_thread_table _wm_thread_table = WM_THREAD_GROUP_SLOTS;

enum wm_sweep_limits _wm_sweep_limits = WM_SWEEP_OUT;
struct wm_sweep_args _wm_sweep_args = {};
enum wm_sweep_mode _wm_sweep_mode = WM_SWEEP_WALK;
enum wm_sweep_bits _wm_sweep_bits = WM_BLAME_TAKEN_BIT;
enum wm_role _wm_role = WM_ROLE_VICTIM;
enum wm_stack_stat _wm_stack_stat = WM_STACK_STAT_NATIVE_FAILED;
enum wm_stack_limits _wm_stack_limits = WM_PY_MAX_FRAMES;
enum wm_stacks_mode _wm_stacks_mode = WM_STACKS_NATIVE;
enum wm_unwind_limits _wm_unwind_limits = WM_UNWIND_MAX_MAPS;
enum wm_unwind_kind _wm_unwind_kind = WM_UNWIND_STOP;
enum wm_state _wm_state = WM_STATE_RUNNING;
enum wm_futex_kind _wm_futex_kind = WM_FUTEX_WORD;
enum wm_stat _wm_stat = WM_STAT_THREAD_MAP_FULL;
enum wm_limits _wm_limits = WM_MAX_SYSCALLS;

/* bit `tgid` set = process watched */
#include "watched.bpf.h"

/* bit `tgid` set = a Python process: its futex waits may be GIL waits
 * (`gil_words`) or parked (`parked`); set by the agent when it registers
 * either, cleared with the watched bit */
WM_PROCESS_BITMAP(py_bits);

/* host TGID -> flags (unused yet): the watched processes, enumerable */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PROCS);
	__type(key, __u32);
	__type(value, __u32);
} watched SEC(".maps");

/* (TGID, futex word) -> the GIL it belongs to; filled from agent/src/python */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_GIL_WORDS);
	__type(key, struct wm_gil_key);
	__type(value, struct wm_gil);
} gil_words SEC(".maps");

/* host TID -> the address a thread parked on (CPython 3.13+), written by pypark.bpf.c */
#include "parked.bpf.h"

/* (waiter, holder) -> ns of GIL wait; closed intervals only */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_BLAME);
	__type(key, struct wm_blame_key);
	__type(value, __u64);
} gil_blame SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WM_EXIT_RINGBUF_BYTES);
} exits SEC(".maps");

/* (waiter, waker, futex) -> ns of futex wait; closed intervals only */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_FUTEX_BLAME);
	__type(key, struct wm_futex_key);
	__type(value, __u64);
} futex_blame SEC(".maps");

/* (waiter, task that had the CPU) -> ns of run-queue wait */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PREEMPT_BLAME);
	__type(key, struct wm_preempt_key);
	__type(value, struct wm_preempt);
} preempt_blame SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WM_THROTTLE_RINGBUF_BYTES);
} throttles SEC(".maps");

/* (thread, wait) -> its stretches away from that wait; only the thread itself
 * writes its entries (at its own switch-out); user space reads them and
 * deletes those of threads that are gone */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, WM_DEFAULT_MAX_STRETCHES);
	__type(key, struct wm_stretch_key);
	__type(value, struct wm_stretch);
} stretches SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WM_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* A stretch a switch-out into a wait closed, as its slot had it (`wait` 0: none). */
struct wm_stretch_closed {
	__u64 wait;       /* the wait's key; 0: none closed */
	__u64 entered;    /* its last block began */
	__u64 left;       /* and ended (the stretch began) */
	__u32 at_us[WM_NR_STATES]; /* the thread's time per state then, 1024 ns units */
	__u32 _pad;
	__u64 ns[WM_NR_STATES];    /* and now, in ns */
};

/* counters[key] += 1, in a per-CPU array of counters */
static __always_inline void count_in(void *counters, __u32 key)
{
	__u64 *val = bpf_map_lookup_elem(counters, &key);

	if (val)
		*val += 1;
}

static __always_inline void count_loss(enum wm_stat stat)
{
	count_in(&stats, stat);
}

/* host TID -> time partition: `threads`, `thread_ids`, find_thread() */
#include "thread_table.bpf.h"

/* moving the blame of exited threads out at a drain of exits: `sweep` */
#include "sweep.bpf.h"

static __always_inline void set_watched(__u32 tgid)
{
	__u32 word = tgid / 64;
	__u64 *bits = bpf_map_lookup_elem(&watched_bits, &word);

	if (!bits)
		return;
	if (WM_LEGACY) {
		/* no atomic or: an add of a bit not set (a racing set of the
		 * same bit, one process's two first events on two CPUs at
		 * once, would carry into the next) */
		if (!(*(volatile __u64 *)bits & (1ULL << (tgid % 64))))
			__sync_fetch_and_add(bits, 1ULL << (tgid % 64));
	} else {
		__sync_fetch_and_or(bits, 1ULL << (tgid % 64));
	}
}

static __always_inline void clear_bit_of(void *bitmap, __u32 tgid)
{
	__u32 word = tgid / 64;
	__u64 *bits = bpf_map_lookup_elem(bitmap, &word);

	if (!bits)
		return;
	if (WM_LEGACY) {
		/* no atomic and: a subtraction of a bit that is set */
		if (*(volatile __u64 *)bits & (1ULL << (tgid % 64)))
			__sync_fetch_and_add(bits, -(1ULL << (tgid % 64)));
	} else {
		__sync_fetch_and_and(bits, ~(1ULL << (tgid % 64)));
	}
}

static __always_inline void clear_watched(__u32 tgid)
{
	clear_bit_of(&watched_bits, tgid);
	clear_bit_of(&py_bits, tgid);
}

/* The number of `pid` in the agent's PID namespace, 0 if not visible there. */
static __always_inline __u32 ns_nr(struct pid *pid)
{
	unsigned int level = BPF_CORE_READ(pid, level);

	for (int i = 0; i < WM_MAX_PIDNS_LEVELS; i++) {
		struct upid up;

		if (i > level)
			break;
		if (bpf_core_read(&up, sizeof(up), &pid->numbers[i]))
			break;
		if (BPF_CORE_READ(up.ns, ns.inum) == cfg.pidns_ino)
			return up.nr;
	}
	return 0;
}

/* The state a thread enters, with the fields of a blocked state. */
struct wm_enter {
	__u32 to;         /* enum wm_state */
	__s32 syscall;
	__u64 gil_holder;
	__u64 futex_addr;
	__u32 futex_kind;
	bool new_stack;   /* `stack` is the thread's own, taken now */
	bool new_blamed;  /* `blamed` is the GIL holder's, taken now */
	__u16 gil_switch; /* entering gil_wait: the GIL's switch_number, low bits */
	__u32 stack_site; /* new_stack: where the thread entered the kernel (entry_site()) */
	struct wm_stack_ref stack;
	struct wm_stack_ref blamed;
};

/* The interval a transition closed, and what it is charged to. */
struct wm_closed {
	__u32 state;      /* the state left */
	__u32 gen;        /* the thread's incarnation: (u32)start */
	__u32 tgid;
	__u32 waker;
	__u64 since;      /* when that state was entered */
	__u64 gil_holder;
	__u64 futex_addr;
	__u32 futex_kind;
	__u32 hold_us;    /* a GIL wait woken by a thread: the hold it ended, from the holder's take when known (`hold_from`), else from the first wait of its streak, in 1024 ns; else 0 */
	/* a blocked state other than the GIL's, ended by a wakeup sched_waking
	 * told: by what (enum wm_wake_ctx + 1; 0: not told), and for a task, its
	 * host TID and TGID */
	__u32 woke;
	__u32 woke_tid;
	__u32 woke_tgid;
	__u32 _pad;
	struct wm_stack_ref stack;   /* the thread's own stack through that state */
	struct wm_stack_ref culprit; /* the GIL holder's or the waker's stack; native < 0 and py 0: none */
};

/* GIL waits with more running than this between them are not one streak (a
 * waiter that timed out runs a few µs before it waits again) */
#define WM_STREAK_GAP_NS 1000000ULL

/* the bits of a user-space address kept: 48 (x86-64 user space is 47 bits unless a
 * program maps above that on purpose with 5-level paging; CPython never does) */
#define WM_USER_ADDR_MASK ((1ULL << 48) - 1)

static __always_inline bool is_blocked(__u32 state)
{
	return state != WM_STATE_RUNNING && state != WM_STATE_RUNQUEUE && state != WM_STATE_THROTTLED &&
	       state != WM_STATE_YIELD;
}

/* The key of a wait a thread blocks in (0: none: not in a syscall, or the
 * GIL, which is never where a thread waits for work) */
static __always_inline __u64 wait_key(__u32 state, __s32 syscall, __u64 futex_addr)
{
	if (syscall < 0 || state == WM_STATE_GIL_WAIT || !is_blocked(state))
		return 0;
	return ((__u64)(syscall & (WM_MAX_SYSCALLS - 1)) << WM_STRETCH_KEY_SHIFT) |
	       (futex_addr & WM_USER_ADDR_MASK & ~(__u64)(WM_STRETCH_WORD_BLOCK - 1));
}

/*
 * Within the thread's write, after its `ns` took the interval just closed: it
 * was woken from the wait `key`. Its slot notes when, and the time per state
 * so far (for the stretch that ends when it blocks in that wait again).
 */
static __always_inline void note_left(struct wm_thread *t, __u64 key, __u64 now)
{
	struct wm_home_slot *h = NULL;

	for (__u32 i = 0; i < WM_HOME_SLOTS; i++)
		if (t->homes[i].key == key && !t->homes[i].left)
			h = &t->homes[i];
	if (!h)
		return;
	h->left = now | 1;
	if (now > h->entered)
		h->waited += now - h->entered;
	for (__u32 s = 0; s < WM_NR_STATES; s++)
		h->at_us[s] = (__u32)(t->d.ns[s] >> 10);
}

/*
 * Within the thread's write, after its `ns` took the interval just closed: it
 * blocks in the wait `key` now. Blocking in a wait it left before closes the
 * stretch between (into `so`). A wait not among the last WM_HOME_SLOTS takes
 * the slot of the one it waited in least (never its home, whose slot must
 * outlive the other waits of a long stretch). The slots are scanned first and
 * the one chosen is written once, by its index: one path for the verifier
 * whichever slot it is.
 */
static __always_inline void note_entered(struct wm_thread *t, __u64 key, __u64 now, struct wm_stretch_closed *so)
{
	__u32 hit = WM_HOME_SLOTS, least = 0;
	__u64 least_waited = ~0ULL;
	struct wm_home_slot *h;

	for (__u32 i = 0; i < WM_HOME_SLOTS; i++) {
		struct wm_home_slot *c = &t->homes[i];

		if (c->key == key && hit == WM_HOME_SLOTS)
			hit = i;
		if (c->waited < least_waited || !c->key) {
			least_waited = c->key ? c->waited : 0;
			least = i;
		}
	}
	/* through the entry and back: the verifier forgets which slot was
	 * chosen, and checks what follows once for all of them */
	t->slot = hit;
	hit = *(volatile __u32 *)&t->slot;
	t->slot = least;
	least = *(volatile __u32 *)&t->slot;
	if (hit < WM_HOME_SLOTS) {
		h = &t->homes[hit];
		/* copied as they are (no branch within the write); record_stretch
		 * works out the lengths */
		if (h->left && so) {
			so->wait = key;
			so->entered = h->entered;
			so->left = h->left;
			__builtin_memcpy(so->at_us, h->at_us, sizeof(so->at_us));
			__builtin_memcpy(so->ns, t->d.ns, sizeof(so->ns));
		}
	} else {
		if (least >= WM_HOME_SLOTS)
			return;
		h = &t->homes[least];
		h->key = key;
		h->waited = 0;
	}
	h->entered = now;
	h->left = 0;
}

/*
 * Within the thread's write: `waker` (a host TID; `same_process`: of the
 * thread's own process) woke its GIL or futex wait. A GIL wait whose holder
 * was not read (the GIL was free when it went to sleep: it changed hands
 * between the waiter's check and its sleep, or the waiter queued on the
 * GIL's mutex while a holder let go) is charged to that thread of its
 * process: its release handed the GIL over.
 */
static __always_inline void woken_by(struct wm_thread *t, __u32 waker, bool same_process)
{
	/* only a thread of its own process releases a GIL: a wakeup of a GIL
	 * waiter by another program (its timeout's timer, fired while that
	 * program was inside a futex call) is no release, and ends no hold */
	if (t->d.state == WM_STATE_GIL_WAIT && !same_process)
		return;
	t->d.waker = waker;
	if (t->d.state == WM_STATE_GIL_WAIT && !t->d.gil_holder && same_process)
		t->d.gil_holder = (1ULL << WM_HOLDER_WAKER_BIT) | waker;
}

/* Within the thread's write, at the wakeup of a GIL or futex wait: what
 * sched_waking told of its waker (`told`: struct wm_waking's word, taken). */
static __always_inline void told_by_waking(struct wm_thread *t, __u32 from, __u64 told, struct wm_closed *c)
{
	__u32 waker = told & WM_EARLY_WAKER_TID;
	bool same = told & WM_EARLY_SAME_PROCESS;

	if (told & (1ULL << WM_WAKING_STACK_BIT)) {
		t->d.waker_stack = t->waking.stack;
		t->d.waker_of = waker;
		t->d.waker_at = t->waking.stack_at;
		t->d.waker_site = t->waking.site;
	}
	if (from != WM_STATE_GIL_WAIT) {
		__u32 how = (told >> WM_WAKING_CTX_SHIFT) & 3;

		c->woke = how + 1;
		c->woke_tid = how == WM_WAKE_TASK ? waker : 0;
		c->woke_tgid = how == WM_WAKE_TASK ? t->waking.by_tgid : 0;
	}
	if (!(told & (1ULL << WM_WAKING_FUTEX_BIT)) || (from != WM_STATE_GIL_WAIT && from != WM_STATE_FUTEX_WAIT))
		return;
	woken_by(t, waker, same);
	/* a GIL release: since when the releaser held it, if the waiter's
	 * streak is of that same hold (its switch number) */
	if (from == WM_STATE_GIL_WAIT && same && (told & WM_WAKING_TOOK) &&
	    (__u16)(told >> WM_WAKING_SWITCH_SHIFT) == t->d.streak_switch)
		t->d.hold_from = t->waking.took_at;
}

/* The interval `d` is in, as it closes, into `c` (no culprit, no hold yet). */
static __always_inline void closing(const struct wm_thread_data *d, struct wm_closed *c)
{
	c->state = d->state;
	c->gen = (__u32)d->start;
	c->tgid = d->tgid;
	c->waker = d->waker;
	c->since = d->since;
	c->gil_holder = d->gil_holder;
	c->futex_addr = d->futex_addr;
	c->futex_kind = d->futex_kind;
	c->stack = d->stack;
	c->culprit.native = -1;
	c->culprit.py = 0;
	c->hold_us = 0;
	c->woke = 0;
	c->woke_tid = 0;
	c->woke_tgid = 0;
}

/*
 * A write of the thread's entry begins and ends: `seq` odd meanwhile. Only
 * the thread's own transitions write it, one after another (struct wm_thread);
 * a reader that copied the entry twice with the same even `seq` between has
 * a copy no write overlapped. The barriers keep the compiler's order; x86-64
 * keeps the stores' order for the other CPUs.
 */
static __always_inline void write_begin(struct wm_thread *t)
{
	*(volatile __u32 *)&t->seq = t->seq + 1;
	asm volatile("" ::: "memory");
}

static __always_inline void write_end(struct wm_thread *t)
{
	asm volatile("" ::: "memory");
	*(volatile __u32 *)&t->seq = t->seq + 1;
}

/*
 * The thread's transition: close the open interval into its state and enter
 * `e->to` at `now` (`since` never moves back, so sum(ns) == since - start
 * holds). With `wake`, a thread that is not blocked is left as it is (a wakeup
 * of a task that never left the run queue changes nothing, and writes
 * nothing). Fills `c` with the closed interval. Returns false when nothing
 * changed. (An exit writes no entry: close_at_exit().)
 */
static __always_inline bool transition(struct wm_thread *t, const struct wm_enter *e, __u64 now, bool switched_out, bool wake,
				       struct wm_closed *c, struct wm_stretch_closed *so)
{
	__u64 left_key, enter_key, told = 0;
	__u32 from = t->d.state;

	/* what sched_waking told this wakeup (on_waking), taken, even by a
	 * wakeup that changes nothing (it must not tell a later one). No atomic
	 * exchange: the kernel serialises a thread's waking and the wakeup
	 * that follows it (the waking holds its pi_lock; a second waking waits
	 * for the thread to run and sleep again, after this wakeup), and x86-64
	 * keeps stores in order (the waker's fields before its word) */
	if (wake) {
		told = *(volatile __u64 *)&t->waking.word;
		if (told)
			*(volatile __u64 *)&t->waking.word = 0;
		if (!is_blocked(from))
			return false;
	}
	write_begin(t);
	/* the clocks of two run queues may disagree by a few µs (rq_now): a
	 * thread's own time does not go back */
	if (now < t->d.since)
		now = t->d.since;
	closing(&t->d, c);
	if (wake && told)
		told_by_waking(t, from, told, c);
	/* as the wakeup told them: the waker, and a GIL wait's holder where the
	 * waiter read none (woken_by()) */
	c->waker = t->d.waker;
	c->gil_holder = t->d.gil_holder;
	/* ran for long since its last GIL wait, or blocks on something else: a
	 * streak of GIL waits is over (its end was not seen: it took the GIL
	 * without sleeping again) */
	if (from == WM_STATE_RUNNING && (now > t->d.since + WM_STREAK_GAP_NS || (e->to != WM_STATE_GIL_WAIT && is_blocked(e->to))))
		t->d.streak_at = 0;
	/* the GIL changed hands since the streak began (it took the GIL without
	 * sleeping, and lost it again): a new hold */
	if (e->to == WM_STATE_GIL_WAIT) {
		if (t->d.streak_at && e->gil_switch != t->d.streak_switch)
			t->d.streak_at = 0;
		if (!t->d.streak_at)
			t->d.streak_switch = e->gil_switch;
	}
	if (from == WM_STATE_GIL_WAIT) {
		if (!t->d.streak_at)
			t->d.streak_at = (__u32)(t->d.since >> 10) | 1;
		/* woken by a thread (the release), not by its timeout: the hold
		 * ends; it began when the releaser took the GIL, if known and not
		 * after this waiter's first wait (u32 time wraps: compare the
		 * differences) */
		if (t->d.waker) {
			__u32 at = (__u32)(now >> 10);
			__u32 began = t->d.streak_at;

			/* the releaser's take, stamped on another run queue's
			 * clock, may be a few µs ahead: then not before this */
			if (t->d.hold_from && (__s32)(at - t->d.hold_from) > 0 && at - t->d.hold_from > at - began)
				began = t->d.hold_from;
			c->hold_us = (at - began) | 1;
			t->d.streak_at = 0;
			/* and this thread takes the GIL: the next number */
			t->d.took_at = at | 1;
			t->d.took_switch = t->d.streak_switch + 1;
		}
		t->d.hold_from = 0;
	}
	if (from == WM_STATE_GIL_WAIT && t->d.gil_holder && t->d.holder_of == t->d.gil_holder)
		c->culprit = t->d.holder;
	else if (from == WM_STATE_FUTEX_WAIT && t->d.waker && t->d.waker_of == t->d.waker)
		c->culprit = t->d.waker_stack;
	/* any other wait's waker, of this process or another, by its stack at the wakeup */
	else if (from != WM_STATE_GIL_WAIT && from != WM_STATE_FUTEX_WAIT && c->woke_tid && t->d.waker_of == c->woke_tid)
		c->culprit = t->d.waker_stack;
	if (now > t->d.since) {
		if (from < WM_NR_STATES)
			t->d.ns[from] += now - t->d.since;
		t->d.since = now;
	}
	/* woken from a wait (a wakeup), or blocking in one (a switch-out): its
	 * stretches; a switch-in or an exit leaves them (and their programs
	 * are verified without them) */
	if (wake) {
		left_key = wait_key(from, t->d.syscall, t->d.futex_addr);
		if (left_key)
			note_left(t, left_key, now);
	}
	if (switched_out) {
		enter_key = wait_key(e->to, e->syscall, e->futex_addr);
		if (enter_key)
			note_entered(t, enter_key, now, so);
	}
	if (e->to < WM_NR_STATES)
		t->d.state = e->to;
	t->d.syscall = e->syscall;
	t->d.gil_holder = e->gil_holder;
	t->d.futex_addr = e->futex_addr;
	t->d.futex_kind = e->futex_kind;
	t->d.waker = 0;
	/* a waking that came before the sleep it wakes waits for that sleep's
	 * wakeup (which took it above); any other transition ends what it told */
	if (!(switched_out && is_blocked(e->to)) && !wake)
		t->waking.word = 0;
	if (e->new_stack) {
		t->d.stack = e->stack;
		t->d.stack_at = now;
		t->d.stack_site = e->stack_site;
	}
	if (e->new_blamed) {
		t->d.holder = e->blamed;
		t->d.holder_of = e->gil_holder;
		t->d.holder_at = now;
	}
	if (switched_out)
		t->d.nr_switches++;
	if (switched_out && e->to == WM_STATE_YIELD)
		t->d.nr_yields++;
	if (switched_out && e->to == WM_STATE_GIL_WAIT)
		t->d.nr_gil_waits++;
	write_end(t);
	return true;
}

/* struct _gil_runtime_state from `last_holder` on: every layout the agent
 * knows (3.8-3.15, and 3.13t+ after their `enabled`) puts `locked` and
 * `switch_number` right after it, and the agent registers no GIL whose
 * layout does not (SchedProbe::add_gil) */
struct wm_gil_head {
	__u64 last_holder;   /* PyThreadState * */
	__s32 locked;
	__u32 _pad;
	__u64 switch_number; /* unsigned long */
};

/*
 * Who holds the GIL a thread is about to sleep on: read, in the waiter's own
 * address space (it is `current`), `last_holder`, `locked` and
 * `switch_number` in one read, then the holder thread state's OS thread id.
 * 0 when free or unreadable. Also the GIL's `switch_number`, which tells a
 * hold from the next.
 */
static __always_inline __u64 gil_holder(const struct wm_gil *g, __u64 *holder_tstate)
{
	struct wm_gil_head h;
	__u64 id = 0;

	if (bpf_probe_read_user(&h, sizeof(h), (void *)(g->gil + g->off_head)))
		return 0;
	/* `switch_number`'s low bits go in the top 16 of *holder_tstate (a user
	 * address has 47 bits) */
	*holder_tstate = h.switch_number << 48;
	if (h.locked <= 0 || !h.last_holder)
		return 0;
	if (bpf_probe_read_user(&id, sizeof(id), (void *)(h.last_holder + g->off_holder_id)))
		return 0;
	*holder_tstate |= h.last_holder & WM_USER_ADDR_MASK;
	return id;
}

/*
 * Whether a GIL holder id names `task` itself: its TID in its own PID
 * namespace (CPython 3.11+: native_thread_id) or its pthread_t, the FS base
 * (3.8–3.10). A waiter that reads itself as the holder has just let the GIL
 * go, and the thread taking it has set `locked` but not yet `last_holder`.
 */
static __always_inline bool holder_is(struct task_struct *task, __u64 id)
{
	struct pid *pid = task->thread_pid;
	unsigned int level = BPF_CORE_READ(pid, level);
	struct upid up = {};

	if (id == task->thread.fsbase)
		return true;
	if (level >= WM_MAX_PIDNS_LEVELS || bpf_core_read(&up, sizeof(up), &pid->numbers[level]))
		return false;
	return id == up.nr;
}

/*
 * A wait added to an entry the agent was taking (its value has
 * WM_BLAME_TAKEN: the sweep took its time and deletes it) goes into a new
 * entry; `fresh` is that entry's value, the wait in it. When the old entry
 * is not deleted yet, or there is no room, the wait is counted lost as
 * `taken`, the reason `full` otherwise.
 */
static __always_inline void charge_anew(void *map, void *key, void *fresh, enum wm_stat full)
{
	int err = map_err(bpf_map_update_elem(map, key, fresh, BPF_NOEXIST));

	if (err)
		count_loss(err == -17 /* EEXIST */ ? WM_STAT_BLAME_TAKEN : full);
}

/* *map[key] += delta, creating the entry; a loss counted as `full` when
 * there is no room. */
static __always_inline void add_ns(void *map, void *key, __u64 delta, enum wm_stat full)
{
	__u64 *ns = bpf_map_lookup_elem(map, key);

	if (!ns) {
		if (bpf_map_update_elem(map, key, &delta, BPF_NOEXIST) == 0)
			return;
		ns = bpf_map_lookup_elem(map, key); /* made meanwhile on another CPU */
		if (!ns) {
			count_loss(full);
			return;
		}
	}
	/* the legacy object has no fetch-and-add, and no sweep to take entries */
	if (WM_LEGACY)
		__sync_fetch_and_add(ns, delta);
	else if (__sync_fetch_and_add(ns, delta) & WM_BLAME_TAKEN)
		charge_anew(map, key, &delta, full);
}

/* wait stacks: their maps, taking them, charging waits to them (uses count_in above) */
#include "stacks.bpf.h"
#include "holder_samples.bpf.h"
/* the opt-in state timeline: span() */
#include "timeline.bpf.h"

/* Report a throttled stretch that ends now. */
static __always_inline void emit_throttle(const struct wm_closed *c, __u32 tid, __u64 now)
{
	struct wm_throttle *e = bpf_ringbuf_reserve(&throttles, sizeof(*e), 0);

	if (!e) {
		count_loss(WM_STAT_THROTTLE_RINGBUF_FULL);
		return;
	}
	e->tid = tid;
	e->tgid = c->tgid;
	e->start = c->since;
	e->end = now;
	bpf_ringbuf_submit(e, 0);
}

/*
 * Charge `delta` to the thread's GIL row for `holder`: its row, else the next
 * free one (struct wm_thread_rows). False when its rows are all others'.
 */
static __always_inline bool gil_row(struct wm_thread *t, __u64 holder, __u64 delta)
{
	for (int i = 0; i < WM_GIL_ROWS; i++) {
		struct wm_gil_row *r = &t->rows.gil[i];

		if (r->ns && r->holder != holder)
			continue;
		write_begin(t);
		r->holder = holder;
		r->ns += delta;
		write_end(t);
		return true;
	}
	return false;
}

/* The same for the futex row of (`waker`, `addr`, `kind`). */
static __always_inline bool futex_row(struct wm_thread *t, __u32 waker, __u64 addr, __u32 kind, __u64 delta)
{
	for (int i = 0; i < WM_FUTEX_ROWS; i++) {
		struct wm_futex_row *r = &t->rows.futex[i];

		if (r->ns && (r->waker != waker || r->addr != addr || r->kind != kind))
			continue;
		write_begin(t);
		r->waker = waker;
		r->addr = addr;
		r->kind = kind;
		r->ns += delta;
		write_end(t);
		return true;
	}
	return false;
}

/* The same for the row of `key`'s (`by`, `state`, `ctx`): a run-queue wait's
 * (what had the CPU) or a wait's waker, named as `task`'s group leader is
 * when the row is taken (NULL: an interrupt, no name). */
static __always_inline bool preempt_row(struct wm_thread *t, const struct wm_preempt_key *key, struct task_struct *task, __u64 delta)
{
	for (int i = 0; i < WM_PREEMPT_ROWS; i++) {
		struct wm_preempt_row *r = &t->rows.preempt[i];

		if (r->ns && (r->by_tid != key->by_tid || r->by_tgid != key->by_tgid || r->state != key->state || r->ctx != key->ctx))
			continue;
		write_begin(t);
		if (!r->ns) {
			r->by_tid = key->by_tid;
			r->by_tgid = key->by_tgid;
			r->state = key->state;
			r->ctx = key->ctx;
			if (task)
				BPF_CORE_READ_STR_INTO(&r->comm, task, group_leader, comm);
			else
				__builtin_memset(r->comm, 0, sizeof(r->comm));
		}
		r->ns += delta;
		write_end(t);
		return true;
	}
	return false;
}

/*
 * As add_ns(), for a run-queue wait or a wait a wakeup ended: `fresh` is the
 * wait (`ns`) and, for a new entry, the name of the process that had the CPU
 * or woke it: `prev`'s (read only then), else as `fresh` has it.
 */
static __always_inline void add_preempt(struct wm_preempt_key *key, struct wm_preempt *fresh, struct task_struct *prev)
{
	struct wm_preempt *v = bpf_map_lookup_elem(&preempt_blame, key);

	if (!v) {
		if (prev)
			BPF_CORE_READ_STR_INTO(&fresh->comm, prev, group_leader, comm);
		if (bpf_map_update_elem(&preempt_blame, key, fresh, BPF_NOEXIST) == 0)
			return;
		v = bpf_map_lookup_elem(&preempt_blame, key); /* made meanwhile on another CPU */
		if (!v) {
			count_loss(WM_STAT_PREEMPT_MAP_FULL);
			return;
		}
	}
	if (WM_LEGACY) {
		__sync_fetch_and_add(&v->ns, fresh->ns);
	} else if (__sync_fetch_and_add(&v->ns, fresh->ns) & WM_BLAME_TAKEN) {
		__builtin_memcpy(fresh->comm, v->comm, sizeof(fresh->comm));
		charge_anew(&preempt_blame, key, fresh, WM_STAT_PREEMPT_MAP_FULL);
	}
}

/*
 * Charge a wait that a wakeup ended (`c->woke`) to its waker: a task (a
 * thread of the waiter's process by its TID, another process as a whole, as
 * in the run queue) or an interrupt. In the thread's rows, else the map.
 */
static __always_inline void charge_waker(struct wm_thread *t, const struct wm_closed *c, __u32 tid, __u64 delta)
{
	struct wm_preempt_key key = {
		.tid = tid, .gen = c->gen, .state = c->state, .ctx = c->woke - 1,
		.by_tid = c->woke_tgid == c->tgid ? c->woke_tid : c->woke_tgid, .by_tgid = c->woke_tgid,
	};
	struct task_struct *task = NULL;
	struct wm_preempt fresh = { .ns = delta };

	/* told by sched_waking, whose task is still its (the waking and this
	 * wakeup are serialised; the next waking waits for the thread to sleep) */
	if (t && key.ctx == WM_WAKE_TASK)
		task = (struct task_struct *)t->waking.task;
	if (t && preempt_row(t, &key, task, delta))
		return;
	add_preempt(&key, &fresh, task);
}

/*
 * Charge the interval that closed (entering `to`) to whoever caused it: a GIL
 * wait to the holder, a futex wait to its waker and address, in the thread's
 * rows or else the blame maps (`t` NULL: the maps); a throttled stretch is
 * reported. The maps' keys carry the thread's incarnation, so the entries of
 * a thread whose exit record was lost never pass to a thread reusing its TID.
 */
static __always_inline void charge(struct wm_thread *t, const struct wm_closed *c, __u32 tid, __u32 to, __u64 now)
{
	__u64 delta = now > c->since ? now - c->since : 0;

	span(tid, c->tgid, c->state, c->since, now,
	     c->state == WM_STATE_GIL_WAIT ? c->gil_holder : c->state == WM_STATE_FUTEX_WAIT ? c->waker : 0, 0);
	/* a yielder's runnable time is idle by choice: no wait stack */
	if (c->state != WM_STATE_RUNNING && c->state != WM_STATE_RUNQUEUE && c->state != WM_STATE_YIELD) {
		__u64 blamed = 0;
		__u32 role = WM_ROLE_VICTIM;

		if (c->state == WM_STATE_GIL_WAIT) {
			blamed = c->gil_holder;
			role = WM_ROLE_HOLDER;
		} else if (c->state == WM_STATE_FUTEX_WAIT || c->woke_tid) {
			/* the waker: a thread of this process by its TID, a task of
			 * another by its process (whose stack is that process's) */
			blamed = c->state == WM_STATE_FUTEX_WAIT ? c->waker : c->woke_tid;
			if (blamed && blamed == c->woke_tid && c->woke_tgid != c->tgid)
				blamed = (1ULL << WM_BLAMED_PROCESS_BIT) | c->woke_tgid;
			role = WM_ROLE_WAKER;
		}
		charge_stacks(tid, c->gen, c->state, blamed, &c->stack, role, &c->culprit, delta, (__u64)c->hold_us << 10);
	}

	/* a wait of no time (the wakeup and the switch stamped with one clock
	 * reading) blames no one: no entry, no row, as for stacks */
	if (c->state == WM_STATE_GIL_WAIT && delta) {
		struct wm_blame_key key = { .tid = tid, .gen = c->gen, .holder = c->gil_holder };

		if (!t || !gil_row(t, c->gil_holder, delta))
			add_ns(&gil_blame, &key, delta, WM_STAT_BLAME_MAP_FULL);
	} else if (c->state == WM_STATE_FUTEX_WAIT && c->futex_addr && delta) {
		struct wm_futex_key key = {
			.tid = tid, .waker = c->waker, .addr = c->futex_addr, .gen = c->gen, .kind = c->futex_kind,
		};

		if (!t || !futex_row(t, c->waker, c->futex_addr, c->futex_kind, delta))
			add_ns(&futex_blame, &key, delta, WM_STAT_FUTEX_MAP_FULL);
	} else if (c->state == WM_STATE_THROTTLED && to != WM_STATE_THROTTLED) {
		emit_throttle(c, tid, now);
	}
	if (c->woke && delta)
		charge_waker(t, c, tid, delta);
}

/* Charge a run-queue wait that ends now to the task that had the CPU: in
 * the thread's rows, else the map. */
static __always_inline void charge_runqueue(struct wm_thread *t, const struct wm_closed *c, __u32 tid, struct task_struct *prev,
					    const struct wm_stack_ref *by_stack, __u64 now)
{
	/* a thread of another process is charged as its process (one entry per
	 * process, not per thread: the key space follows the node's process churn,
	 * not its thread churn) */
	__u32 by = prev->tgid == c->tgid ? prev->pid : prev->tgid;
	__u64 delta = now > c->since ? now - c->since : 0;

	span(tid, c->tgid, c->state, c->since, now, by, prev->tgid);
	/* no time, no blame (charge()): the run queue's clock often stamps a
	 * wakeup that preempts and the switch it causes alike */
	if (!delta)
		return;
	charge_stacks(tid, c->gen, c->state, prev->tgid == c->tgid ? by : 0, &c->stack, WM_ROLE_PREEMPTOR,
		      prev->tgid == c->tgid ? by_stack : NULL, delta, 0);
	struct wm_preempt_key key = { .tid = tid, .by_tid = by, .by_tgid = prev->tgid, .gen = c->gen, .state = WM_STATE_RUNQUEUE };

	if (!preempt_row(t, &key, prev, delta)) {
		struct wm_preempt fresh = { .ns = delta };

		add_preempt(&key, &fresh, prev);
	}
}

/*
 * Move an exiting thread's rows into the blame maps, before its exit record
 * (struct wm_thread_rows): at that drain of exits the agent finds all of its
 * blame there. The exiting thread's own transitions are the rows' only
 * writers, so they are read as they are.
 */
static __noinline void rows_to_maps(struct wm_thread *t, __u32 tid, __u32 gen)
{
	if (!t)
		return;
	for (int i = 0; i < WM_GIL_ROWS; i++) {
		struct wm_gil_row *r = &t->rows.gil[i];
		struct wm_blame_key key = { .tid = tid, .gen = gen };

		if (!r->ns)
			break;
		key.holder = r->holder;
		add_ns(&gil_blame, &key, r->ns, WM_STAT_BLAME_MAP_FULL);
	}
	for (int i = 0; i < WM_FUTEX_ROWS; i++) {
		struct wm_futex_row *r = &t->rows.futex[i];
		struct wm_futex_key key = { .tid = tid, .gen = gen };

		if (!r->ns)
			break;
		key.waker = r->waker;
		key.addr = r->addr;
		key.kind = r->kind;
		add_ns(&futex_blame, &key, r->ns, WM_STAT_FUTEX_MAP_FULL);
	}
	for (int i = 0; i < WM_PREEMPT_ROWS; i++) {
		struct wm_preempt_row *r = &t->rows.preempt[i];
		struct wm_preempt_key key = { .tid = tid, .gen = gen };
		struct wm_preempt fresh = {};

		if (!r->ns)
			break;
		key.by_tid = r->by_tid;
		key.by_tgid = r->by_tgid;
		key.state = r->state;
		key.ctx = r->ctx;
		fresh.ns = r->ns;
		__builtin_memcpy(fresh.comm, r->comm, sizeof(fresh.comm));
		add_preempt(&key, &fresh, NULL);
	}
}

/* floor(log2(v)), v > 0 */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r, s;

	r = (v > 0xFFFFFFFFULL) << 5;
	v >>= r;
	s = (v > 0xFFFF) << 4;
	v >>= s;
	r |= s;
	s = (v > 0xFF) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xF) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	return r | (__u32)(v >> 1);
}

/* The bucket of a stretch `ns` long (struct wm_stretch). */
static __always_inline __u32 stretch_bucket(__u64 ns)
{
	__u64 v = ns / WM_STRETCH_UNIT_NS;
	__u32 o;

	if (!v)
		return 0;
	o = log2_u64(v);
	if (o >= WM_STRETCH_OCTAVES)
		return WM_STRETCH_OCTAVES * WM_STRETCH_SUB;
	return 1 + o * WM_STRETCH_SUB + (__u32)(((v - (1ULL << o)) << 2) >> o);
}

static const struct wm_stretch zero_stretch = {};

/* Histogram the stretch of thread `tid` that closed at `now` (from its own
 * switch-out: the only writer of its entries). */
static __noinline void record_stretch(const struct wm_stretch_closed *so, __u32 tid, __u32 gen, __u32 tgid, __u64 now)
{
	struct wm_stretch_key key = { .tid = tid, .gen = gen, .wait = so->wait };
	struct wm_stretch *v = bpf_map_lookup_elem(&stretches, &key);
	__u64 len = now > so->left ? now - so->left : 0;
	__u32 b = stretch_bucket(len);

	if (!v) {
		if (bpf_map_update_elem(&stretches, &key, &zero_stretch, BPF_NOEXIST) && !bpf_map_lookup_elem(&stretches, &key)) {
			count_loss(WM_STAT_STRETCH_MAP_FULL);
			return;
		}
		v = bpf_map_lookup_elem(&stretches, &key);
		if (!v)
			return;
		v->tgid = tgid;
	}
	v->count++;
	v->ns += len;
	if (len > v->max_ns)
		v->max_ns = len;
	v->wait_ns += so->left > so->entered ? so->left - so->entered : 0;
	if (b < WM_STRETCH_BUCKETS)
		v->buckets[b]++;
	if (cfg.stretch_long_ns && len >= cfg.stretch_long_ns) {
		v->long_count++;
		v->long_ns += len;
		/* the time per state meanwhile (u32 1024 ns units: differences wrap correctly) */
		for (__u32 s = 0; s < WM_NR_STATES; s++)
			v->long_state_ns[s] += (__u64)((__u32)(so->ns[s] >> 10) - so->at_us[s]) << 10;
	}
}

/*
 * A thread seen for the first time: its entry in a slot it claims (or the
 * one the agent seeded meanwhile), written before the slot is published.
 * The slot's `seq` goes on from its last thread's: a reader that copied that
 * thread's entry sees it move.
 */
static __always_inline struct wm_thread *
new_thread(struct task_struct *task, __u32 tid, __u32 tgid, const struct wm_enter *e, __u64 now)
{
	struct wm_thread *fresh;
	__u32 slot;
	int r;

	/* past sched_process_exit (its record is sent): an exiting thread that
	 * still sleeps or wakes in do_exit() is not measured again */
	if (BPF_CORE_READ(task, flags) & WM_PF_EXITING)
		return NULL;
	r = claim_thread_slot(tid);
	if (r < 0)
		return NULL;
	slot = r & ~WM_THREAD_SLOT_NEW;
	fresh = bpf_map_lookup_elem(&threads, &slot);
	if (!(r & WM_THREAD_SLOT_NEW))
		return fresh; /* the agent's, published meanwhile */
	if (!fresh) {
		set_slot_id(slot, 0);
		return NULL;
	}
	write_begin(fresh);
	__builtin_memset(&fresh->waking, 0, sizeof(fresh->waking));
	__builtin_memset(&fresh->d, 0, sizeof(fresh->d));
	__builtin_memset(fresh->homes, 0, sizeof(fresh->homes));
	/* rows in use have `ns` (a free row's key is written when it is taken) */
	fresh->rows.gen = (__u32)now;
	for (int i = 0; i < WM_GIL_ROWS; i++)
		fresh->rows.gil[i].ns = 0;
	for (int i = 0; i < WM_FUTEX_ROWS; i++)
		fresh->rows.futex[i].ns = 0;
	for (int i = 0; i < WM_PREEMPT_ROWS; i++)
		fresh->rows.preempt[i].ns = 0;
	fresh->d.state = e->to;
	fresh->d.since = now;
	fresh->d.start = now;
	fresh->d.tgid = tgid;
	fresh->d.syscall = e->syscall;
	fresh->d.gil_holder = e->gil_holder;
	fresh->d.futex_addr = e->futex_addr;
	fresh->d.futex_kind = e->futex_kind;
	fresh->d.stack.native = -1;
	fresh->d.holder.native = -1;
	fresh->d.waker_stack.native = -1;
	if (cfg.translate_pids) {
		fresh->d.ns_tid = ns_nr(BPF_CORE_READ(task, thread_pid));
		fresh->d.ns_tgid = ns_nr(BPF_CORE_READ(task, group_leader, thread_pid));
	} else {
		fresh->d.ns_tid = tid;
		fresh->d.ns_tgid = tgid;
	}
	write_end(fresh);
	set_slot_id(slot, tid);
	return fresh;
}

/*
 * What a thread that leaves the CPU without being runnable is blocked in.
 * At sched_switch `prev` is still `current` (no call to get it), so its saved user registers are
 * those of the syscall in flight: orig_ax is the syscall number and ax still
 * holds -ENOSYS until the syscall returns. Anything else (a page fault, a
 * kernel-internal wait) is io_wait when uninterruptible, other otherwise.
 */
static __always_inline __u32 blocked_state(struct task_struct *prev, __u32 task_state, __s32 *syscall, __u64 *futex_word)
{
	struct pt_regs *regs = wm_current_regs(prev);
	long nr, ax;

	if (!regs)
		return WM_STATE_OTHER;
	nr = WM_REG(regs, orig_ax);
	ax = WM_REG(regs, ax);

	if (nr >= 0 && nr < WM_MAX_SYSCALLS && ax == -WM_ENOSYS) {
		*syscall = nr;
		/* futex(2) and futex_wait(2) take the word's address first */
		if (nr == WM_NR_FUTEX || nr == WM_NR_FUTEX_WAIT)
			*futex_word = WM_REG(regs, di);
		return cfg.syscall_state[nr & (WM_MAX_SYSCALLS - 1)];
	}
	*syscall = -1;
	return (task_state & WM_TASK_UNINTERRUPTIBLE) ? WM_STATE_IO_WAIT : WM_STATE_OTHER;
}

/*
 * A runnable thread that leaves the CPU without being preempted, inside
 * sched_yield(2): it gave the CPU away (a spin-then-yield wait strategy); the
 * time until it runs again is `yield`, not a wait for a CPU. Like
 * blocked_state(), the syscall in flight is read from the saved registers.
 */
static __always_inline bool yielding(struct task_struct *prev)
{
	struct pt_regs *regs = wm_current_regs(prev);

	return regs && WM_REG(regs, orig_ax) == WM_NR_SCHED_YIELD && (long)WM_REG(regs, ax) == -WM_ENOSYS;
}

/* A switch-out, as on_switch() worked it out, for switched_out() to apply. */
struct wm_out {
	struct wm_enter e;
	__u64 holder_tstate; /* entering gil_wait: the holder's thread state (0: unknown) */
	__u64 now;
	__u32 tid, tgid;
	struct wm_stack_ref own; /* out: the thread's stack as it left the CPU */
};

/*
 * A switch's working structs, beside the BPF stack rather than on it: the
 * verifier's 512 bytes are for the deepest call chain of a program (the hook,
 * switched_out(), a slot claim, a stack walk), on every kernel (issue 53:
 * 528 bytes was refused). One per CPU, used by sched_switch alone, which runs
 * with interrupts off and never nests (the CPU clock's sampler, which may
 * interrupt it in NMI, has its own).
 */
struct wm_switch_work {
	struct wm_out o;            /* prev's switch-out */
	struct wm_enter in;         /* next's switch-in */
	struct wm_closed c;         /* the interval a transition closed */
	struct wm_stretch_closed so; /* the stretch a switch-out closed */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_switch_work);
} switch_work SEC(".maps");

/*
 * A switch-out's stacks (bpf/stacks.bpf.h): the thread's own as it leaves the
 * CPU, and the Python stack of the GIL holder it is about to wait behind, into
 * `w->o`. A function of its own, called from the hook beside switched_out()
 * rather than from it: a stack walk's frames (wm_native_stack(), its steps)
 * then stand on the hook's frame alone, not on switched_out()'s too, and the
 * deepest call chain keeps its margin inside the verifier's 512 bytes on
 * every kernel (issue 53: 528 was refused).
 */
WM_PTR_ARGS_FN int switch_stacks(struct wm_switch_work *w)
{
	struct wm_out *o;
	struct wm_thread *t;
	__u32 tid, tgid;
	__s32 native;
	__u32 site;
	__u64 now;

	if (!w)
		return 0;
	o = &w->o;
	tid = o->tid;
	tgid = o->tgid;
	now = o->now;
	t = find_thread(tid);
	if (!t)
		return 0;
	/* racy reads of the thread's own fields: only this thread's
	 * switch-out and wakeups write them, and a stale value only
	 * takes or skips one stack */
	if (!stacks_all) {
		/* none: a wait that began now is not charged to a stack
		 * taken before the agent asked for all of them again */
		o->e.stack.native = -1;
		o->e.stack.py = 0;
		o->e.new_stack = true;
	} else {
		/* the last stack is reused only for a block made from the same
		 * call within the interval: another wait takes its own (never a
		 * stack left from an earlier, different wait) */
		site = entry_site(wm_current_task());
		if (now - t->d.stack_at >= cfg.stack_interval_ns || !site || t->d.stack_site != site) {
			own_stacks(tgid, tid, &o->e.stack);
			o->e.new_stack = true;
			o->e.stack_site = site;
			o->own = o->e.stack;
		} else {
			o->own = t->d.stack;
		}
	}
	/* the holder's native stack: sampled in its own context during this hold */
	native = o->e.gil_holder ? holder_wanted(tgid, o->holder_tstate, o->e.gil_switch, now) : -1;

	if ((cfg.stacks & WM_STACKS_PYTHON) && o->e.gil_holder && o->holder_tstate &&
	    (t->d.holder_of != o->e.gil_holder || now - t->d.holder_at >= cfg.stack_interval_ns ||
	     (native >= 0 && t->d.holder.native < 0))) {
		o->e.blamed.native = native;
		o->e.blamed.py = wm_py_stack(tgid, o->holder_tstate);
		o->e.new_blamed = true;
	}
	return 0;
}

/*
 * Apply a switch-out (its stacks taken by switch_stacks()): the thread's
 * transition, the charge of the interval it closed and the stretch it ended. A global function: the
 * verifier checks it once, with `w` unknown, rather than once for every way
 * the caller worked `w->o` out (that product made the program's verification
 * take a second and most of the agent's start).
 */
WM_PTR_ARGS_FN int switched_out(struct wm_switch_work *w)
{
	struct wm_out *o;
	struct wm_thread *t;
	__u32 tid, tgid;
	__u64 now;

	if (!w)
		return 0;
	o = &w->o;
	tid = o->tid;
	tgid = o->tgid;
	now = o->now;
	t = find_thread(tid);
	if (!t) {
		/* prev is `current` at sched_switch */
		new_thread(wm_current_task(), tid, tgid, &o->e, now);
		return 0;
	}
	/* only a block in a syscall can close a stretch (wait_key) */
	w->so.wait = 0;
	if (transition(t, &o->e, now, true, false, &w->c, o->e.syscall >= 0 ? &w->so : NULL)) {
		charge(t, &w->c, tid, o->e.to, now);
		if (w->so.wait)
			record_stretch(&w->so, tid, w->c.gen, w->c.tgid, now);
	}
	return 0;
}

/* What `prev`, leaving the CPU, enters: worked out here into `w->o`, applied by switched_out(). */
static __always_inline void switch_out(bool preempt, struct task_struct *prev, __u64 now, struct wm_switch_work *w)
{
	struct wm_out *o = &w->o;
	struct wm_enter *e = &o->e;
	__u32 tgid = prev->tgid;
	__u32 tid = prev->pid;
	__u32 task_state = get_task_state(prev);

	__builtin_memset(o, 0, sizeof(*o));
	e->syscall = -1;
	e->stack.native = -1;
	e->blamed.native = -1;
	o->own.native = -1;
	o->now = now;
	o->tid = tid;
	o->tgid = tgid;
	if (preempt || task_state == WM_TASK_RUNNING)
		e->to = task_throttled(prev)	      ? WM_STATE_THROTTLED :
			!preempt && yielding(prev) ? WM_STATE_YIELD :
						 WM_STATE_RUNQUEUE;
	else
		e->to = blocked_state(prev, task_state, &e->syscall, &e->futex_addr);
	/* GIL words and parked addresses exist only in Python processes: a
	 * futex wait of any other process costs no hash lookup */
	if (e->to == WM_STATE_FUTEX_WAIT && e->futex_addr && in_bitmap(&py_bits, tgid)) {
		struct wm_gil_key key = { .tgid = tgid, .uaddr = e->futex_addr };
		struct wm_gil *gil = bpf_map_lookup_elem(&gil_words, &key);

		if (gil) {
			e->to = WM_STATE_GIL_WAIT;
			e->gil_holder = gil_holder(gil, &o->holder_tstate);
			e->gil_switch = o->holder_tstate >> 48;
			o->holder_tstate &= WM_USER_ADDR_MASK;
			/* itself: the GIL is in flight to another thread (its waker, below) */
			if (e->gil_holder && holder_is(prev, e->gil_holder)) {
				e->gil_holder = 0;
				o->holder_tstate = 0;
			}
		} else {
			/* parked in CPython's parking lot: the semaphore it sleeps on
			 * is its own; what it waits for is the address it parked on */
			__u64 *on = bpf_map_lookup_elem(&parked, &tid);

			if (on && *on) {
				e->futex_addr = *on;
				e->futex_kind = WM_FUTEX_PARKED;
			}
		}
	}
	if (e->to != WM_STATE_FUTEX_WAIT && e->to != WM_STATE_GIL_WAIT)
		e->futex_addr = 0;
	if (cfg.stacks)
		switch_stacks(w);
	switched_out(w);
}

static __noinline void switch_in(struct task_struct *next, struct task_struct *prev, struct wm_switch_work *w, __u64 now)
{
	__u32 tgid = next->tgid;
	__u32 tid = next->pid;
	struct wm_enter *e = &w->in;
	struct wm_thread *t;

	__builtin_memset(e, 0, sizeof(*e));
	e->to = WM_STATE_RUNNING;
	e->syscall = -1;
	t = find_thread(tid);
	if (!t) {
		new_thread(next, tid, tgid, e, now);
		return;
	}
	if (!transition(t, e, now, false, false, &w->c, NULL))
		return;
	if (w->c.state == WM_STATE_RUNQUEUE)
		charge_runqueue(t, &w->c, tid, prev, &w->o.own, now);
	else
		charge(t, &w->c, tid, e->to, now);
}

static __always_inline int on_switch(void *ctx, bool preempt, struct task_struct *prev,
				     struct task_struct *next)
{
	bool out = prev->pid && is_watched(prev->tgid);
	bool in = next->pid && is_watched(next->tgid);
	struct wm_switch_work *w;
	__u32 zero = 0;
	__u64 now;

	if (!out && !in)
		return 0;
	w = bpf_map_lookup_elem(&switch_work, &zero);
	if (!w)
		return 0;
	/* prev's stack as it left the CPU: the preemptor's, for next's run-queue wait */
	w->o.own.native = -1;
	w->o.own.py = 0;
	/* prev and next are on this CPU's run queue, whose lock is held */
	now = rq_now(out ? prev : next);
	if (out)
		switch_out(preempt, prev, now, w);
	if (in)
		switch_in(next, prev, w, now);
	return 0;
}

/*
 * Who wakes a thread (sched_waking, in the waker's context): an interrupt
 * (wake_context(): a timer, a device, the network's softirq), told as such;
 * else `current`, a task of this process or another, named by its TID and
 * process. Its wake is a futex wake (the waker a GIL or futex wait is charged
 * to) only while it is inside a futex(2) call (FUTEX_WAKE and friends), or
 * exiting (the kernel's futex wake of the thread's clear_child_tid word,
 * which pthread_join waits on): a timer's or a signal's wakeup of a futex
 * wait is its timeout.
 */
static __always_inline int on_waking(void *ctx, struct task_struct *p, bool irq_count)
{
	struct task_struct *cur;
	struct pt_regs *regs;
	struct wm_thread *t;
	__u32 waker, state, cur_tgid, how;
	bool same, futex;
	__u64 word;
	long nr;

	if (!is_watched(p->tgid))
		return 0;
	t = find_thread(p->pid);
	if (!t)
		return 0;
	how = irq_count ? wake_context() : WM_WAKE_TASK;
	cur = wm_current_task();
	waker = WM_CUR(cur, pid);
	futex = false;
	regs = NULL;
	if (how == WM_WAKE_TASK) {
		regs = wm_current_regs(cur);
		nr = regs ? WM_REG(regs, orig_ax) : 0;
		/* without the preempt count: a task interrupted outside a system call
		 * (in user mode), or the idle task, woke no one itself */
		if (!irq_count && (!waker || nr == -1))
			how = WM_WAKE_IRQ;
	}
	if (how != WM_WAKE_TASK) {
		*(volatile __u64 *)&t->waking.word = (__u64)how << WM_WAKING_CTX_SHIFT;
		return 0;
	}
	if (!waker) /* the idle task, outside an interrupt: told of nothing */
		return 0;
	cur_tgid = WM_CUR(cur, tgid);
	same = cur_tgid == p->tgid;
	if (regs)
		futex = (nr == WM_NR_FUTEX || nr == WM_NR_FUTEX_WAKE || nr == WM_NR_FUTEX_REQUEUE) &&
			(long)WM_REG(regs, ax) == -WM_ENOSYS;
	/* an exiting thread wakes its joiner through CLONE_CHILD_CLEARTID */
	if (!futex && same && (WM_CUR(cur, flags) & WM_PF_EXITING))
		futex = true;
	word = waker | (same ? WM_EARLY_SAME_PROCESS : 0) | (futex ? 1ULL << WM_WAKING_FUTEX_BIT : 0);
	t->waking.by_tgid = cur_tgid;
	t->waking.task = (__u64)cur;
	/* racy: the thread may be switching out this instant (a stale state
	 * only takes or skips one stack, or one hold start); its wakeup, after
	 * that switch-out, decides what the word means (told_by_waking) */
	state = t->d.state;
	/* the waker's stack as it wakes the thread (it is `current`), at most
	 * once per interval per (thread, waker): a futex wait's futex waker, or
	 * any other wait's waker, of any process (the agent names another
	 * process's stack with that process: WM_BLAMED_PROCESS_BIT) */
	if (cfg.stacks && stacks_all && state != WM_STATE_GIL_WAIT && is_blocked(state) &&
	    (state != WM_STATE_FUTEX_WAIT || futex)) {
		__u64 now = bpf_ktime_get_ns();

		__u32 site = entry_site(cur);

		/* reused only for the same waker waking from the same call */
		if (t->d.waker_of != waker || now - t->d.waker_at >= cfg.stack_interval_ns || !site || t->d.waker_site != site) {
			own_stacks(cur_tgid, waker, &t->waking.stack);
			t->waking.stack_at = now;
			t->waking.site = site;
			word |= 1ULL << WM_WAKING_STACK_BIT;
		}
	}
	/* a GIL release: since when the releaser held it (racy reads of its
	 * entry; `took_switch` is checked against what the waiter read) */
	if (state == WM_STATE_GIL_WAIT && same && futex) {
		struct wm_thread *w = find_thread(waker);

		if (w && w->d.took_at) {
			t->waking.took_at = w->d.took_at;
			word |= WM_WAKING_TOOK | ((__u64)w->d.took_switch << WM_WAKING_SWITCH_SHIFT);
		}
	}
	/* published last: the wakeup that takes it reads the fields above
	 * (x86-64 keeps stores in order; the barrier keeps the compiler's) */
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&t->waking.word = word;
	return 0;
}

/* A new process whose parent is watched is watched too (--all, sidecars). */
static __always_inline bool follow_fork(struct task_struct *p, __u32 tgid)
{
	__u32 one = 1;
	__u32 parent;

	if (!cfg.follow_forks || p->pid != tgid)
		return false;
	if (p->flags & WM_PF_KTHREAD)
		return false;
	parent = p->real_parent->tgid;
	if (!is_watched(parent))
		return false;
	bpf_map_update_elem(&watched, &tgid, &one, BPF_NOEXIST);
	set_watched(tgid);
	return true;
}

static __always_inline int on_wakeup(struct task_struct *p, bool is_new)
{
	__u32 tgid = p->tgid;
	struct wm_enter e = { .to = WM_STATE_RUNQUEUE, .syscall = -1 };
	struct wm_closed c;
	struct wm_thread *t;
	__u32 tid;
	__u64 now;

	if (!is_watched(tgid) && !(is_new && follow_fork(p, tgid)))
		return 0;
	tid = p->pid;
	/* under the lock of the run queue p was put on */
	now = rq_now(p);
	t = find_thread(tid);
	if (!t) {
		new_thread(p, tid, tgid, &e, now);
		return 0;
	}
	if (transition(t, &e, now, false, true, &c, NULL))
		charge(t, &c, tid, e.to, now);
	return 0;
}

/*
 * A thread's exit closes its last interval in `d`, a copy of its entry's data
 * (the exit record's, in the ring buffer: no copy on the BPF stack).
 * The entry itself is not written: sched_process_exit runs preemptible, and a
 * write preempted half-way would keep its `seq` odd for as long, and the
 * agent's copies torn (they came out "unsettled" by the dozen under the unit
 * tests' load). Only the exiting thread writes its data, so the copy is whole.
 */
static __always_inline void close_at_exit(struct wm_thread_data *d, __u64 now)
{
	/* the state in a register, bounded there: an older verifier (6.1) does
	 * not carry a bound checked on a value reloaded from memory */
	__u32 state = d->state;

	barrier_var(state);
	if (now > d->since && state < WM_NR_STATES) {
		d->ns[state] += now - d->since;
		d->since = now;
	}
	/* as a transition leaves them (its blocked state's fields are over) */
	d->syscall = -1;
	d->gil_holder = 0;
	d->futex_addr = 0;
	d->futex_kind = 0;
	d->waker = 0;
}

static __always_inline int on_exit(struct task_struct *p)
{
	__u32 tgid = p->tgid;
	struct wm_closed c;
	struct wm_thread *t;
	struct wm_exit *rec;
	__u32 tid, slot;
	__u64 now;

	if (!is_watched(tgid))
		return 0;
	/* the last thread of its process (sched_process_exit fires after
	 * signal->live is decremented): the process is no longer watched. A child
	 * followed at fork that exits before the agent's discovery would keep its
	 * `watched` entry, and a later process reusing its PID would be watched. */
	if (p->signal->live.counter == 0) {
		tid = tgid;
		bpf_map_delete_elem(&watched, &tid);
		clear_watched(tgid);
	}
	tid = p->pid;
	t = find_thread_at(tid, &slot);
	if (!t)
		return 0;
	now = bpf_ktime_get_ns();
	/* the interval it closes, charged to the maps, not its rows: the entry is not written (above) */
	closing(&t->d, &c);
	charge(NULL, &c, tid, c.state, now);
	rows_to_maps(t, tid, c.gen);
	/* reserved after the calls above: a verifier before 6.x refuses a
	 * reservation held across a call to another function */
	rec = bpf_ringbuf_reserve(&exits, sizeof(*rec), 0);
	if (rec) {
		__builtin_memcpy(&rec->t, &t->d, sizeof(rec->t));
		close_at_exit(&rec->t, now);
		rec->tid = tid;
		rec->_pad = 0;
		rec->end = now;
		rec->fsbase = p->thread.fsbase;
		BPF_CORE_READ_STR_INTO(&rec->comm, p, comm);
		/* no wakeup: the agent drains the ring on its own tick (a wakeup
		 * per exit would cost a system call per exit under churn) */
		bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	} else {
		count_loss(WM_STAT_EXIT_RINGBUF_FULL);
	}
	set_slot_id(slot, 0);
	/* a thread that exits parked never returns from the wait */
	bpf_map_delete_elem(&parked, &tid);
	return 0;
}

/*
 * Typed BTF tracepoints. No raw_tp fallback: tp_btf (Linux 5.5) is older than
 * the ring buffer (5.8), which every variant would need, so a kernel that
 * could load a raw_tp variant always loads this one. Their arguments are
 * trusted BTF pointers: fields are read directly, with CO-RE relocations and
 * no helper call.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(ctx, preempt, prev, next);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct *p)
{
	return on_wakeup(p, false);
}

/* two of it: the agent loads the first where the kernel's symbols name the
 * per-CPU preempt count (CONFIG_KALLSYMS_ALL, as Debian builds it; its load
 * fails without), else the second (probes/kernel.rs) */
SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct *p)
{
	return on_waking(ctx, p, true);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_noirq_btf, struct task_struct *p)
{
	return on_waking(ctx, p, false);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_btf, struct task_struct *p)
{
	return on_wakeup(p, true);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct *p)
{
	return on_exit(p);
}

/*
 * Host <-> namespace IDs of every task visible in the agent's PID namespace.
 * BPF sees host IDs; a user in a container names namespace IDs.
 */
SEC("iter/task")
int task_ids(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct wm_task_ids ids = {};

	if (!task)
		return 0;
	ids.tid = task->pid;
	ids.tgid = task->tgid;
	ids.ns_tid = ns_nr(task->thread_pid);
	ids.ns_tgid = ns_nr(task->group_leader->thread_pid);
	ids.fsbase = task->thread.fsbase;
	if (ids.ns_tid)
		bpf_seq_write(ctx->meta->seq, &ids, sizeof(ids));
	return 0;
}
