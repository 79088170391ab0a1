/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * timeline: the kernel/user ABI of waitmeter's state timeline.
 *
 * Opt-in (`attach --trace`, `--html`): every interval a watched thread spent
 * in one state, as the sched probe closes it (the transitions of
 * bpf/sched.bpf.c), with who it was spent behind, goes to the `spans` ring
 * buffer. The partition's counters say how long each state lasted in all;
 * a span says when, and next to what the other threads did. User space
 * folds what is too fine to draw (model/timeline.rs). Off, the programs have
 * no trace of it (a read-only flag the verifier prunes on) and the ring is
 * one page. See docs/probes/timeline.md.
 */
#ifndef WAITMETER_TIMELINE_H
#define WAITMETER_TIMELINE_H

enum wm_timeline_limits {
	/* default size of `spans` with the timeline on; the agent sets --timeline-buffer-kib */
	WM_DEFAULT_SPANS_BYTES = 16777216,
	/* and off */
	WM_SPANS_OFF_BYTES = 4096,
};

/* One interval of one thread in one state. */
struct wm_span {
	__u32 tid;        /* host TID */
	__u32 tgid;       /* host TGID */
	__u64 start;      /* CLOCK_MONOTONIC ns it entered the state */
	__u64 end;        /* and left it */
	/* who it was spent behind: gil_wait, the GIL holder as the sched probe
	 * names it (wm_thread_data.gil_holder); futex_wait, the waker's host
	 * TID (0: a timeout or a signal); runqueue, what had the CPU (a thread
	 * of the same process: its host TID; else its process' host TGID, with
	 * `by_tgid` telling which); else 0 */
	__u64 culprit;
	__u32 by_tgid;    /* runqueue: the host TGID of what had the CPU */
	__u32 state;      /* enum wm_state it left */
};

#endif /* WAITMETER_TIMELINE_H */
