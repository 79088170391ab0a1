// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * gil (opt-in, --gil-probe uprobe): GIL hold times per thread.
 *
 * uretprobe on every take_gil* clone: the thread now holds the GIL;
 * uprobe on every drop_gil* clone: it releases it -> log2 histogram.
 * Attached to one process at a time; about 2 us per hit (a uprobe pair per
 * GIL acquisition), which is why it is not the default. See docs/probes/gil.md.
 */
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "gil.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct wm_gil_hold _wm_gil_hold = {};
enum wm_gil_limits _wm_gil_limits = WM_GIL_HOLD_BUCKETS;
enum wm_gil_stat _wm_gil_stat = WM_GIL_STAT_HOLDS_MAP_FULL;

/* host TID -> CLOCK_MONOTONIC ns it acquired the GIL */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_GIL_THREADS);
	__type(key, __u32);
	__type(value, __u64);
} held_since SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_GIL_THREADS);
	__type(key, __u32);
	__type(value, struct wm_gil_hold);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WM_GIL_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} gil_stats SEC(".maps");

SEC("uretprobe")
int BPF_URETPROBE(take_gil_exit)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&held_since, &tid, &now, BPF_ANY);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(drop_gil_enter)
{
	static const struct wm_gil_hold zero = {};
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *since = bpf_map_lookup_elem(&held_since, &tid);
	struct wm_gil_hold *h;
	__u64 delta;
	__u32 bucket;

	if (!since)
		return 0; /* held since before the probe was attached */
	delta = bpf_ktime_get_ns() - *since;
	bpf_map_delete_elem(&held_since, &tid);
	h = bpf_map_lookup_elem(&holds, &tid);
	if (!h) {
		bpf_map_update_elem(&holds, &tid, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&holds, &tid);
		if (!h) {
			__u32 key = WM_GIL_STAT_HOLDS_MAP_FULL;
			__u64 *lost = bpf_map_lookup_elem(&gil_stats, &key);

			if (lost)
				*lost += 1;
			return 0;
		}
	}
	bucket = delta ? 64 - __builtin_clzll(delta) : 0;
	if (bucket >= WM_GIL_HOLD_BUCKETS)
		bucket = WM_GIL_HOLD_BUCKETS - 1;
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum_ns, delta);
	__sync_fetch_and_add(&h->buckets[bucket], 1);
	/* drop_gil runs on the holder's thread: no other writer of this entry's max */
	if (delta > h->max_ns)
		h->max_ns = delta;
	return 0;
}
