/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sched: the kernel/user ABI of waitmeter's scheduler probes.
 *
 * Defined once, here. The agent gets these types from the generated skeleton
 * (agent/src/probes/sched.rs uses `sched::types::*`); never mirror them by hand.
 * Constants are enums so that they reach BTF.
 */
#ifndef WAITMETER_SCHED_H
#define WAITMETER_SCHED_H

#include "stacks.h"

/* The time model of docs/architecture.md: every thread is in exactly one of
 * these states at any instant. The order is ABI: arrays are indexed by it. */
enum wm_state {
	WM_STATE_RUNNING = 0,    /* on a CPU */
	WM_STATE_RUNQUEUE = 1,   /* runnable, not on a CPU */
	WM_STATE_THROTTLED = 2,  /* runnable, cgroup CFS quota exhausted */
	WM_STATE_GIL_WAIT = 3,   /* blocked on a CPython GIL futex word */
	WM_STATE_FUTEX_WAIT = 4, /* blocked on any other futex */
	WM_STATE_IO_WAIT = 5,    /* blocked in an I/O syscall or in D state */
	WM_STATE_SLEEP = 6,      /* nanosleep, pause, sigsuspend, ... */
	WM_STATE_OTHER = 7,      /* any other blocked state */
	WM_STATE_YIELD = 8,      /* runnable after giving the CPU away with sched_yield(2) */
	WM_NR_STATES = 9,
};

enum wm_limits {
	/* syscall numbers below this are classified; higher ones are `other` */
	WM_MAX_SYSCALLS = 512,
	/* default map sizes; the agent resizes them before load */
	WM_DEFAULT_MAX_THREADS = 16384,
	WM_DEFAULT_MAX_PROCS = 4096,
	WM_EXIT_RINGBUF_BYTES = 262144, /* the agent sets --exit-buffer-kib (default 4 MiB) */
	WM_COMM_LEN = 16,
	/* deepest PID-namespace nesting searched when translating PIDs */
	WM_MAX_PIDNS_LEVELS = 8,
	/* words of the watched-TGID bitmap: PID_MAX_LIMIT (4M) / 64 */
	WM_WATCH_WORDS = 65536,
	/* GIL futex words (3 per GIL) and (waiter, holder) blame pairs */
	WM_DEFAULT_MAX_GIL_WORDS = 1024,
	WM_DEFAULT_MAX_BLAME = 16384,
	/* (waiter, waker, futex) and (waiter, preemptor) pairs */
	WM_DEFAULT_MAX_FUTEX_BLAME = 16384,
	WM_DEFAULT_MAX_PREEMPT_BLAME = 16384,
	WM_THROTTLE_RINGBUF_BYTES = 262144,
	/* a GIL holder id with this bit set is a host TID: the thread whose
	 * release woke the waiter (the GIL was free when it went to sleep) */
	WM_HOLDER_WAKER_BIT = 63,
	/* a wait stack's `blamed` (stacks.h) with this bit set is the host TGID
	 * of the waker's process, another than the waiter's: the waker's stack
	 * is that process's */
	WM_BLAMED_PROCESS_BIT = 32,
	/* in `wm_waking.word`, above the waker's TID (below PID_MAX_LIMIT, 2^22):
	 * it is a thread of the waiter's process */
	WM_EARLY_WAKER_TID = 0x3fffffff,
	WM_EARLY_SAME_PROCESS = 0x80000000,
};

/* more bits of `wm_waking.word` */
enum wm_waking_bits {
	WM_WAKING_TOOK = 0x40000000,  /* above WM_EARLY_WAKER_TID, below WM_EARLY_SAME_PROCESS */
	WM_WAKING_SWITCH_SHIFT = 32,  /* bits 32..47: the releaser's `took_switch` */
	WM_WAKING_STACK_BIT = 48,     /* `stack` is the waker's, taken at `stack_at` */
	/* the waker was inside a futex(2) call (FUTEX_WAKE and friends), or
	 * exiting (the kernel's wake of its clear_child_tid word, which
	 * pthread_join waits on): a futex wake, which GIL and futex waits are
	 * charged to (a wakeup by a timer or a signal is not) */
	WM_WAKING_FUTEX_BIT = 49,
	WM_WAKING_CTX_SHIFT = 50,     /* bits 50..51: enum wm_wake_ctx */
};

/* What woke a thread's wait (`wm_waking.word`, `wm_preempt_key.ctx`):
 * a task, or an interrupt, which is charged to no task (the one it
 * interrupted had nothing to do with it) */
enum wm_wake_ctx {
	WM_WAKE_TASK = 0,    /* a task in process context: its TID, its process */
	WM_WAKE_SOFTIRQ = 1, /* a softirq: the network's receive, timer wheels, block I/O completions */
	WM_WAKE_HARDIRQ = 2, /* a hard interrupt or an NMI: a high-resolution timer, a device */
	WM_WAKE_IRQ = 3,     /* an interrupt, which kind not told (no preempt count to read) */
};

/*
 * Stretches (docs/probes/sched.md): the time from a thread's wake from a
 * wait (a syscall it blocked in, with the futex word for a futex) to its
 * next block in that same wait: how long it was kept from it. A thread that
 * waits for work in one place (an event loop in epoll_wait, a worker on its
 * queue's futex) serves what arrives only there: its stretches are the
 * delays of what arrived meanwhile. Which of its waits is its home is
 * decided in user space (most time blocked in it); the kernel keeps the
 * last WM_HOME_SLOTS waits of each thread and histograms every stretch.
 */
enum wm_stretch_limits {
	WM_HOME_SLOTS = 3,
	/* bucket unit: 1 ms / 64, so that octaves of it fall on 2^k ms */
	WM_STRETCH_UNIT_NS = 15625,
	WM_STRETCH_OCTAVES = 26,     /* units 1 .. 2^26 (17.5 min) */
	WM_STRETCH_SUB = 4,          /* buckets per octave */
	WM_STRETCH_BUCKETS = 108,    /* 1 (below a unit) + OCTAVES * SUB, + 3 unused (alignment) */
	WM_STRETCH_KEY_SHIFT = 48,   /* a wait's key: syscall << 48 | futex word's 8-byte block */
	/* futex words in one 8-byte block are one wait: a glibc condition
	 * variable sleeps on two words (its two groups of waiters) in turn */
	WM_STRETCH_WORD_BLOCK = 8,
	WM_DEFAULT_MAX_STRETCHES = 32768,
};

/* Index of the per-CPU `stats` array: every loss is counted here and
 * exported as waitmeter_bpf_events_lost_total{probe="sched",reason}. */
enum wm_stat {
	WM_STAT_THREAD_MAP_FULL = 0, /* an event of a watched thread found no room in `threads` */
	WM_STAT_EXIT_RINGBUF_FULL = 1, /* a thread's final record did not fit in `exits` */
	WM_STAT_BLAME_MAP_FULL = 2, /* a GIL wait could not be charged to its holder */
	WM_STAT_FUTEX_MAP_FULL = 3, /* a futex wait could not be charged to its waker */
	WM_STAT_PREEMPT_MAP_FULL = 4, /* a run-queue wait could not be charged to its preemptor */
	WM_STAT_THROTTLE_RINGBUF_FULL = 5, /* a throttled stretch was not reported */
	WM_STAT_STRETCH_MAP_FULL = 6, /* a stretch of a thread kept from a wait was not histogrammed */
	WM_STAT_BLAME_TAKEN = 7, /* a wait charged to a blame entry the agent was taking, and no new one made */
	WM_STAT_SPAN_RINGBUF_FULL = 8, /* a span of the timeline did not fit in `spans` (bpf/timeline.h) */
	WM_NR_STATS = 9,
};

/* One of the last waits a thread blocked in (a stretch's end and start). */
struct wm_home_slot {
	__u64 key;      /* syscall << WM_STRETCH_KEY_SHIFT | futex word; 0: free */
	__u64 entered;  /* when it last blocked in it */
	__u64 left;     /* when that wait ended; 0: blocked in it now */
	__u64 waited;   /* time blocked in it so far: the slot that waited least is the one reused */
	__u32 at_us[WM_NR_STATES]; /* its `ns` at `left`, in 1024 ns units (differences wrap correctly) */
	__u32 _pad;
};

/* What the probe knows of one watched thread: the value of the `threads` map
 * (within its `seq`) and the body of its final record.
 * Invariant: sum(ns) == since - start, and the fields of a blocked state
 * (syscall, gil_holder, futex_addr, waker) are set only while in it. */
struct wm_thread_data {
	__u32 state;      /* enum wm_state, since `since` */
	__s32 syscall;    /* blocked in this syscall since `since`; -1 if not blocked in one */
	__u64 since;      /* CLOCK_MONOTONIC ns of the last transition */
	__u64 start;      /* CLOCK_MONOTONIC ns the thread entered the window; (u32)start is its incarnation */
	__u64 ns[WM_NR_STATES]; /* closed time per state */
	__u32 tgid;       /* host TGID */
	__u32 ns_tid;     /* TID in the agent's PID namespace (0: not visible) */
	__u32 ns_tgid;    /* TGID in the agent's PID namespace */
	__u32 waker;      /* in futex_wait: host TID of the thread whose FUTEX_WAKE woke it; 0 none yet / timeout */
	__u64 nr_switches; /* times it left the CPU */
	__u64 nr_yields;   /* of those, by sched_yield(2) while runnable */
	__u64 nr_gil_waits; /* of those, into gil_wait: each ends with the GIL handed to it */
	/* in gil_wait: who held the GIL at switch-out (as the process' thread
	 * states name it); when it was free then (a hand-off in flight), the host
	 * TID of the thread of the process whose release woke the waiter, tagged
	 * with WM_HOLDER_WAKER_BIT; 0 unknown */
	__u64 gil_holder;
	__u64 futex_addr;  /* in futex_wait or gil_wait: the futex word (parked: the address parked on) */
	__u16 futex_kind;  /* in futex_wait: enum wm_futex_kind */
	__u16 streak_switch; /* the GIL's switch_number (low bits) when the streak below began */
	/* a GIL hold seen from the waiter: CPython's waiter times out every switch
	 * interval and waits again while the holder does not let go; its GIL waits,
	 * with less than WM_STREAK_GAP_NS of running between them and no switch of
	 * the GIL (its switch_number), until a thread wakes it (the release), are
	 * one hold of at least that long. When the
	 * first of them began, in units of 1024 ns, truncated (differences wrap
	 * correctly for 73 minutes); 0 none. */
	__u32 streak_at;
	/* where the waker entered the kernel when `waker_stack` was taken
	 * (entry_site()): reused for the same waker only from the same call */
	__u32 waker_site;
	/* when its last GIL wait ended by a release (it took the GIL then), in
	 * 1024 ns like `streak_at`, and the GIL's switch_number (low bits) from
	 * then on: the switch_number counts changes of holder, so a waiter that
	 * reads that number finds the GIL still with this thread since then */
	__u32 took_at;
	__u16 took_switch;
	__u16 _pad_took;
	/* in gil_wait, set at its release by the releaser's `took_at` when the
	 * releaser held the GIL since then (its `took_switch` is the number this
	 * waiter read): where the hold began, which a waiter that came late (it
	 * was queued for a CPU meanwhile) did not see; 0 unknown */
	__u32 hold_from;
	/* where the thread entered the kernel when `stack` was taken (stacks.bpf.h
	 * entry_site(): user return address, stack pointer, syscall): a stack is
	 * reused within cfg.stack_interval_ns only for a block made from the same
	 * call (an event loop's poll is not charged the stack of the write it made
	 * before it, nor a backend's sleep that of its wait for its client) */
	__u32 stack_site;
	/* wait stacks (bpf/stacks.bpf.h): the thread's own stack as of its last
	 * switch-out that took one, and the last stacks of the GIL holder and of
	 * the waker it waited behind (one slot each: a thread that alternates GIL
	 * and futex waits must not take both stacks every time) */
	struct wm_stack_ref stack;
	__u64 stack_at;    /* when `stack` was taken */
	struct wm_stack_ref holder;
	__u64 holder_of;   /* whose stack `holder` is: GIL holder id */
	__u64 holder_at;   /* when it was taken */
	struct wm_stack_ref waker_stack;
	__u64 waker_of;    /* whose stack `waker_stack` is: host TID */
	__u64 waker_at;
};

/*
 * What sched_waking tells a thread's next wakeup, without the entry's lock
 * (it is the one program that races with the thread's own transitions: it
 * runs before the wakee has left its CPU). It writes `took_at` and `stack`
 * first and `word` last; the wakeup takes `word` (reads it and writes 0)
 * and then reads the rest. No atomics: the kernel serialises a waking and
 * its wakeup (the thread's pi_lock, then its run queue), and x86-64 keeps
 * stores in order. A thread woken while still on
 * its way to sleep (a fast hand-off on another CPU) keeps the word through
 * that switch-out, for its wakeup; every other transition clears it.
 */
struct wm_waking {
	/* 0: none; else the waker's host TID (WM_EARLY_WAKER_TID), with
	 * WM_EARLY_SAME_PROCESS, WM_WAKING_TOOK (`took_at` is the releaser's
	 * take of the GIL, its `took_switch` at bits WM_WAKING_SWITCH_SHIFT)
	 * bits WM_WAKING_STACK_BIT and WM_WAKING_FUTEX_BIT; or only an
	 * interrupt's enum wm_wake_ctx at WM_WAKING_CTX_SHIFT, with no TID */
	__u64 word;
	__u32 took_at;
	__u32 by_tgid;    /* a task waker's host TGID */
	struct wm_stack_ref stack;
	__u64 stack_at;
	__u32 site;       /* where the waker entered the kernel when `stack` was taken (entry_site()) */
	__u32 _pad;
	__u64 task;       /* a task waker's task_struct, for its process' name in a new row */
};

/*
 * A thread's blame rows: the first counterparts of each kind its waits were
 * charged to (GIL holders, futex wakers and words, what had its CPU), kept in
 * its own entry, so that charging a wait to one of them is a few compares and
 * an add where a blame map's lookup is a helper call. Rows are taken in order
 * and never freed while the thread lives (the rows in use are a prefix, each
 * with `ns` not 0); waits charged to others go to the blame maps. The
 * thread's exit moves its rows into the maps before its exit record, where
 * the agent's drain of exits finds them. User space reads them with the rest
 * of the entry (`seq`): the values only grow in place, so a reading never
 * goes back.
 */
enum wm_blame_rows {
	WM_GIL_ROWS = 4,
	WM_FUTEX_ROWS = 4,
	WM_PREEMPT_ROWS = 4,
};

struct wm_gil_row {
	__u64 holder;     /* as wm_blame_key */
	__u64 ns;
};

struct wm_futex_row {
	__u32 waker;      /* as wm_futex_key */
	__u32 kind;
	__u64 addr;
	__u64 ns;
};

struct wm_preempt_row {
	__u32 by_tid;     /* as wm_preempt_key */
	__u32 by_tgid;
	__u64 ns;
	__u16 state;
	__u16 ctx;
	__u32 _pad;
	char comm[WM_COMM_LEN]; /* as wm_preempt */
};

struct wm_thread_rows {
	__u32 gen;        /* the thread's incarnation, (u32)start: the rows' waiter */
	__u32 _pad;
	struct wm_gil_row gil[WM_GIL_ROWS];
	struct wm_futex_row futex[WM_FUTEX_ROWS];
	struct wm_preempt_row preempt[WM_PREEMPT_ROWS];
};

/* Per watched thread, in its slot of the thread table (`threads`). Only the
 * thread's own transitions (its switches, its wakeup, its exit) write `d`,
 * `homes` and `rows`, and the kernel orders them: a task's switch-out, the
 * wakeup that follows and its switch-in run one after the other (the wakeup
 * waits for the switch-out to finish, `on_cpu`; the switch-in runs under the
 * run queue's lock the wakeup took), and its exit runs as the task itself
 * (and writes no entry: on_exit). So no lock:
 * each write is framed by `seq` (odd while it runs, x86-64 keeps stores in
 * order), and user space takes a copy when two copies in a row are the same
 * with an even `seq` (probes/sched.rs). sched_waking writes only `waking`. */
struct wm_thread {
	__u32 seq;        /* writes begun and ended: odd while one runs */
	__u32 slot;       /* scratch of note_entered() (within a write) */
	/* on the entry's first cache line, which the wakeup that reads it takes anyway */
	struct wm_waking waking;
	struct wm_thread_data d;
	/* its last waits, for its stretches (enum wm_stretch_limits); not in
	 * its final record: the stretches map has what they closed */
	struct wm_home_slot homes[WM_HOME_SLOTS];
	/* the first counterparts its waits were charged to (struct wm_thread_rows) */
	struct wm_thread_rows rows;
};

/*
 * The thread table (bpf/thread_table.bpf.h): `threads` is an array of
 * entries, and `thread_ids` says which thread each slot holds, sixteen slots
 * (one cache line) a group. A thread's slot is its home slot (its TID's low
 * bits) or one in the home slot's group or the next WM_THREAD_PROBE_GROUPS - 1.
 * Both arrays are mapped into the agent, which reads entries and seeds them in
 * place.
 */
enum wm_thread_table {
	WM_THREAD_GROUP_SLOTS = 16,
	WM_THREAD_PROBE_GROUPS = 4,
	/* a slot's id while its claimer writes the entry: TID | this (TIDs are
	 * below PID_MAX_LIMIT, 2^22); 0 is a free slot */
	WM_THREAD_CLAIMED = 0x80000000,
	/* claim_thread_slot()'s result: a slot claimed by this call (write the entry,
	 * then publish it) */
	WM_THREAD_SLOT_NEW = 0x40000000,
};

/* A group of slots of the thread table: the ids of their threads. */
struct wm_thread_group {
	__u32 tid[WM_THREAD_GROUP_SLOTS];
};

/* A thread's final record, sent on the `exits` ring buffer at its exit;
 * its slot of `threads` is freed at the same moment. */
struct wm_exit {
	__u32 tid;        /* host TID */
	__u32 _pad;
	__u64 end;        /* CLOCK_MONOTONIC ns of the exit */
	__u64 fsbase;     /* x86-64 FS base: pthread_self() of a glibc thread */
	struct wm_thread_data t;
	char comm[WM_COMM_LEN];
};

/* One record per task of the `task_ids` iterator: host <-> namespace IDs. */
struct wm_task_ids {
	__u32 tid;
	__u32 tgid;
	__u32 ns_tid;
	__u32 ns_tgid;
	__u64 fsbase; /* x86-64 FS base: pthread_self() of a glibc thread */
};

/* A futex word of a CPython GIL, keyed by process: `gil_words` map. */
struct wm_gil_key {
	__u32 tgid;       /* host TGID */
	__u32 _pad;
	__u64 uaddr;      /* the futex word (user address) */
};

/* How to find who holds that GIL (offsets from agent/src/python/layout.rs). */
struct wm_gil {
	__u64 gil;             /* address of struct _gil_runtime_state */
	__u32 off_head;        /* of its `last_holder`, `locked` and `switch_number` (struct wm_gil_head) */
	__u32 off_holder_id;   /* in PyThreadState: native_thread_id or thread_id */
};

/* What the address of a futex wait names. */
enum wm_futex_kind {
	WM_FUTEX_WORD = 0,   /* the futex word itself */
	/* CPython 3.13+ parking lot: the address the thread parked on (a PyMutex,
	 * a threading.Lock, an event), not the semaphore it sleeps on (bpf/pypark.bpf.c) */
	WM_FUTEX_PARKED = 1,
};

/* Futex wait of a thread charged to its waker and address: `futex_blame`, value ns. */
struct wm_futex_key {
	__u32 tid;        /* waiter, host TID */
	__u32 waker;      /* host TID; 0 = not woken by a futex wake (timeout, signal) */
	__u64 addr;       /* the futex word, or what `kind` says */
	__u32 gen;        /* the waiter's incarnation: (u32)start */
	__u32 kind;       /* enum wm_futex_kind */
};

/* Run-queue wait of a thread charged to the task that ran on its CPU before it. */
/*
 * Who kept a thread from running: in the run queue (`state` WM_STATE_RUNQUEUE),
 * the task that had the CPU; in a blocked state other than the GIL's, the
 * task or interrupt that woke it (its waker, whatever the wait: a socket, a
 * pipe, a signal, a timer, a futex too). `preempt_blame`, and the thread's
 * own rows (struct wm_preempt_row).
 */
struct wm_preempt_key {
	__u32 tid;        /* waiter, host TID */
	__u32 by_tid;     /* host TID of the task that had the CPU or woke it (its TGID if of another process); 0 = idle, or an interrupt */
	__u32 by_tgid;
	__u32 gen;        /* the waiter's incarnation: (u32)start */
	__u16 state;      /* enum wm_state: the wait it ended */
	__u16 ctx;        /* enum wm_wake_ctx (0 in the run queue) */
};

struct wm_preempt {
	__u64 ns;
	char comm[WM_COMM_LEN]; /* of the process (group leader) that had the CPU or woke it */
};

/* A thread's stretches away from one wait: `stretches` map, cumulative. */
struct wm_stretch_key {
	__u32 tid;        /* host TID */
	__u32 gen;        /* its incarnation: (u32)start */
	__u64 wait;       /* syscall << WM_STRETCH_KEY_SHIFT | futex word (parked: the address parked on) */
};

struct wm_stretch {
	__u32 tgid;       /* host TGID */
	__u32 _pad;
	__u64 count;      /* stretches closed (the thread blocked in the wait again) */
	__u64 ns;         /* their sum */
	__u64 max_ns;     /* the longest */
	__u64 wait_ns;    /* time blocked in the wait itself before each (its idle time) */
	/* the stretches of at least cfg.stretch_long_ns (stalls), and the
	 * thread's time in each state during them */
	__u64 long_count;
	__u64 long_ns;
	__u64 long_state_ns[WM_NR_STATES];
	/* bucket 0: below a unit; 1 + octave * SUB + sub: units [2^o (1 + sub/4), 2^o (1 + (sub+1)/4));
	 * the last counts everything longer too */
	__u32 buckets[WM_STRETCH_BUCKETS];
};

/* A stretch of time a thread spent throttled, on the `throttles` ring buffer. */
struct wm_throttle {
	__u32 tid;        /* host TID */
	__u32 tgid;       /* host TGID */
	__u64 start;      /* CLOCK_MONOTONIC ns */
	__u64 end;
};

/* GIL wait of a thread charged to the holder: `gil_blame` map, value ns. */
struct wm_blame_key {
	__u32 tid;        /* waiter, host TID */
	__u32 gen;        /* the waiter's incarnation: (u32)start */
	__u64 holder;     /* the holder's id as its thread state names it; 0 unknown */
};

/*
 * The sweep of the blame maps at a drain of exits (bpf/sweep.bpf.h): the
 * agent runs the `sweep` program and reads what it moved out of the maps in
 * `sweep_out`.
 */
enum wm_sweep_limits {
	WM_SWEEP_OUT = 4096,        /* entries of each kind one run moves out (a power of 2) */
};

/*
 * The value of a blame entry the agent is taking (`ns`, or `wm_preempt.ns`):
 * a program that adds a wait to it sees this bit in what its atomic add
 * returns, and charges the wait to a new entry instead (the taker deletes
 * the old one). No wait is that long.
 */
enum wm_sweep_bits {
	WM_BLAME_TAKEN_BIT = 63,
};
#define WM_BLAME_TAKEN (1ULL << WM_BLAME_TAKEN_BIT)

enum wm_sweep_mode {
	WM_SWEEP_WALK = 0, /* walk the blame maps for entries of exited threads */
	WM_SWEEP_TAKE = 1, /* take the entries whose keys the agent wrote into `sweep_out` */
};

/* The sweep's input (its context). */
struct wm_sweep_args {
	__u32 gil;        /* walk gil_blame too (a Python target is watched) */
	__u32 mode;       /* enum wm_sweep_mode */
};

/* Each moved entry, and whether its waiter exited (else: its counterpart). */
struct wm_swept_gil {
	struct wm_blame_key k;
	__u64 ns;            /* the waiter exited: all of them */
};

struct wm_swept_futex {
	struct wm_futex_key k;
	__u64 ns;
	__u32 waiter_gone;
	__u32 _pad;
};

struct wm_swept_preempt {
	struct wm_preempt_key k;
	struct wm_preempt v;
	__u32 waiter_gone;
	__u32 _pad;
};

struct wm_sweep_out {
	__u32 n_gil;
	__u32 n_futex;
	__u32 n_preempt;
	__u32 more;       /* an output was full: run again */
	struct wm_swept_gil gil[WM_SWEEP_OUT];
	struct wm_swept_futex futex[WM_SWEEP_OUT];
	struct wm_swept_preempt preempt[WM_SWEEP_OUT];
};

/* Which stacks a wait is charged to (`stacks` of the configuration). */
enum wm_stacks_mode {
	WM_STACKS_NATIVE = 1, /* native user stacks (frame pointers) */
	WM_STACKS_PYTHON = 2, /* Python frames of processes with a `py_walk` entry */
};

/* Read-only configuration, set by the agent before load. */
struct wm_sched_config {
	__u64 pidns_ino;     /* inode of the agent's PID namespace */
	__u8 translate_pids; /* agent is not in the initial PID namespace */
	__u8 follow_forks;   /* watch children of watched processes at fork */
	__u8 stacks;         /* enum wm_stacks_mode bits; 0: no wait stacks */
	__u8 timeline;       /* a span per closed interval into `spans` (bpf/timeline.h) */
	__u8 _pad[4];
	__u8 syscall_state[WM_MAX_SYSCALLS]; /* enum wm_state of a thread blocked in syscall nr */
	__u64 stack_interval_ns; /* a thread takes its own stack at most this often */
	__u64 stretch_long_ns;   /* a stretch this long is a stall (its states are kept) */
	__u64 sample_period_ns;  /* the CPU clock's period (holder_samples.bpf.h); 0: no clock */
	__u32 thread_group_mask; /* groups of `thread_ids` - 1 (a power of 2); thread_table.bpf.h */
	__u32 _pad2;
};

#endif /* WAITMETER_SCHED_H */
