/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * pypark: the kernel/user ABI of the CPython parking-lot probe (3.13+).
 *
 * A thread that blocks on a PyMutex (the per-object locks of free-threaded
 * builds, threading.Lock from 3.14), an event or a once-flag parks in
 * CPython's parking lot: it sleeps on a semaphore of its own, in a wait entry
 * queued in the lot under the address it waits on. The probe notes that
 * address per thread for the sched probe, which charges the futex wait to it
 * (and to the thread that woke it).
 */
#ifndef WAITMETER_PYPARK_H
#define WAITMETER_PYPARK_H

enum wm_park_limits {
	/* default size of the `parked` map (host TID -> address); resized with --max-threads */
	WM_DEFAULT_MAX_PARKED = 16384,
};

/* Where a parked thread's `struct wait_entry` (Python/parking_lot.c, the same
 * in 3.13-3.15) keeps, relative to the semaphore `_PySemaphore_Wait` is given,
 * the address parked on and the entry's list node (agent/src/python/layout.rs). */
struct wm_park_config {
	__s32 off_addr;   /* uintptr_t addr */
	__s32 off_node;   /* struct llist_node node: { next, prev } */
};

enum wm_park_stat {
	WM_PARK_STAT_MAP_FULL = 0, /* a park could not be noted: its wait counts as a plain futex wait */
	WM_PARK_NR_STATS = 1,
};

#endif /* WAITMETER_PYPARK_H */
