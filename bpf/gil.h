/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * gil: the kernel/user ABI of the opt-in precise GIL probe (uprobes on
 * CPython's take_gil/drop_gil), which measures how long each thread holds
 * the GIL. GIL *waits* are measured by the sched probe in every mode.
 */
#ifndef WAITMETER_GIL_H
#define WAITMETER_GIL_H

enum wm_gil_limits {
	/* bucket k counts holds of [2^(k-1), 2^k) ns (the last: everything longer) */
	WM_GIL_HOLD_BUCKETS = 40,
	WM_DEFAULT_MAX_GIL_THREADS = 16384,
};

enum wm_gil_stat {
	WM_GIL_STAT_HOLDS_MAP_FULL = 0, /* a hold could not be recorded: raise --max-threads */
	WM_GIL_NR_STATS = 1,
};

/* Per thread (host TID) in the `holds` map. */
struct wm_gil_hold {
	__u64 count;
	__u64 sum_ns;
	/* the longest hold (only its own thread writes the entry) */
	__u64 max_ns;
	__u64 buckets[WM_GIL_HOLD_BUCKETS];
};

#endif /* WAITMETER_GIL_H */
