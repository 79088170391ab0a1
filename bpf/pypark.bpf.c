// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pypark: what a CPython 3.13+ thread parks on.
 *
 * uprobe on _PySemaphore_Wait(sema, ...): when `sema` is the semaphore of a
 * parking-lot wait entry, the thread is about to sleep until another thread
 * unparks the entry's address -> parked[tid] = that address;
 * uretprobe on it: the thread is back -> the entry goes.
 *
 * Why the semaphore and not _PyParkingLot_Park: LTO builds (Debian's) inline
 * or clone the lot's functions into their callers, so the exported
 * _PyParkingLot_Park is not what runs; _PySemaphore_Wait is called, not
 * inlined, by every build seen. A semaphore also waited on outside the lot
 * (_PyRawMutex) is told apart by the wait entry's list node: an entry queued
 * in the lot is on a circular list, so its neighbours point back at it.
 *
 * The sched probe (bpf/sched.bpf.c, which owns `parked`; user space hands its
 * fd to this object before load) reads the entry when the thread leaves the
 * CPU in a futex wait. A thread sleeps on its semaphore only after PyMutex's
 * spinning failed, so uncontended locks cost nothing; a sleep costs one uprobe
 * and one uretprobe. See docs/probes/pypark.md.
 */
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "pypark.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile struct wm_park_config cfg = {};

enum wm_park_stat _wm_park_stat = WM_PARK_STAT_MAP_FULL;

/* host TID -> the address it parks on: the sched probe's map, shared */
#include "parked.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WM_PARK_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} park_stats SEC(".maps");

/* The address a wait entry around `sema` is parked on; 0 if `sema` is not in
 * a queued wait entry (either neighbour of its node must point back at it). */
static __always_inline __u64 parked_address(__u64 sema)
{
	__u64 node = sema + cfg.off_node, links[2] = {}, back = 0, addr = 0;

	if (bpf_probe_read_user(links, sizeof(links), (void *)node))
		return 0;
	/* links[0] = next, whose prev (8 bytes in) is us; links[1] = prev, whose next is us */
	if (!(links[0] && !bpf_probe_read_user(&back, sizeof(back), (void *)(links[0] + 8)) && back == node) &&
	    !(links[1] && !bpf_probe_read_user(&back, sizeof(back), (void *)links[1]) && back == node))
		return 0;
	if (bpf_probe_read_user(&addr, sizeof(addr), (void *)(sema + cfg.off_addr)))
		return 0;
	return addr;
}

SEC("uprobe")
int BPF_UPROBE(sema_wait_enter, void *sema)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 addr = parked_address((__u64)sema);

	if (!addr)
		return 0;
	if (bpf_map_update_elem(&parked, &tid, &addr, BPF_ANY)) {
		__u32 key = WM_PARK_STAT_MAP_FULL;
		__u64 *lost = bpf_map_lookup_elem(&park_stats, &key);

		if (lost)
			*lost += 1;
	}
	return 0;
}

SEC("uretprobe")
int BPF_URETPROBE(sema_wait_exit)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&parked, &tid);
	return 0;
}
