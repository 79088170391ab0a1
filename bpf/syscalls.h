/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * syscalls: the kernel/user ABI of the per-thread syscall counts.
 *
 * For each thread of a watched process and each syscall it made: how many
 * calls returned in the window and the nanoseconds between entry and return
 * (wall time in the kernel, blocked time included). Where the time on the CPU
 * goes (`running` split into user and system), and the rate that gives a
 * clock source away when the vDSO cannot read it (every clock_gettime a syscall).
 */
#ifndef WAITMETER_SYSCALLS_H
#define WAITMETER_SYSCALLS_H

enum wm_sys_limits {
	/* default size of `syscall_counts`; the agent resizes it before load */
	WM_DEFAULT_MAX_SYSCALL_COUNTS = 32768,
	/* numbers at or above this (and negative ones) are counted under this number */
	WM_SYS_NR_OTHER = 512,
};

/* key of `syscall_counts` */
struct wm_sys_key {
	__u32 tid;   /* host TID */
	__u32 nr;    /* syscall number; WM_SYS_NR_OTHER for any number out of range */
};

/* value of `syscall_counts`: cumulative since the thread was first seen in one */
struct wm_sys_count {
	__u64 calls;
	__u64 ns;    /* entry to return, summed */
	__u32 tgid;  /* host TGID of the thread (the process it counts for) */
	__u32 _pad;
};

enum wm_sys_stat {
	WM_SYS_STAT_MAP_FULL = 0, /* a returned call found no room in `syscall_counts` (not counted) */
	WM_SYS_STAT_NO_STORAGE = 1, /* an entry could not be noted (task storage): its call is not counted */
	WM_SYS_NR_STATS = 2,
};

#endif /* WAITMETER_SYSCALLS_H */
