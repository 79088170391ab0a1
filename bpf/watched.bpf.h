/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The `watched_bits` map, in every BPF object that filters by process: bit
 * `tgid` set = process watched. The first check of every event, so an array
 * (the lookup is inlined by the verifier) rather than a hash. The sched object
 * owns it; user space sets and clears bits with atomic operations on its mmap
 * of the array, and hands its fd to the other objects before load
 * (agent/src/probes/syscalls.rs).
 */
#ifndef WAITMETER_WATCHED_BPF_H
#define WAITMETER_WATCHED_BPF_H

#include "sched.h"

/* a bitmap of processes, bit `tgid`: an array user space maps and sets bits in */
#define WM_PROCESS_BITMAP(name)                          \
	struct {                                         \
		__uint(type, BPF_MAP_TYPE_ARRAY);        \
		__uint(map_flags, BPF_F_MMAPABLE);       \
		__uint(max_entries, WM_WATCH_WORDS);     \
		__type(key, __u32);                      \
		__type(value, __u64);                    \
	} name SEC(".maps")

WM_PROCESS_BITMAP(watched_bits);

/* bit `tgid` of a bitmap of processes (an array of WM_WATCH_WORDS u64s) */
static __always_inline bool in_bitmap(void *bitmap, __u32 tgid)
{
	__u32 word = tgid / 64;
	__u64 *bits = bpf_map_lookup_elem(bitmap, &word);

	return bits && (*bits >> (tgid % 64)) & 1;
}

static __always_inline bool is_watched(__u32 tgid)
{
	return in_bitmap(&watched_bits, tgid);
}

#endif /* WAITMETER_WATCHED_BPF_H */
