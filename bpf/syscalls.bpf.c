// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * syscalls: per thread of a watched process, the calls and the time of each
 * syscall it makes.
 *
 *   sys_enter  -> note (number, time) in the task's local storage
 *   sys_exit   -> syscall_counts[(tid, number)] += (1, now - entry)
 *
 * Task local storage, not a TID-keyed hash, for the call in flight: it goes
 * with the task (no entry of an exited thread is left behind, whatever the
 * churn), and only the thread itself touches its own. The counts are
 * cumulative; user space reads them and deletes the entries of threads that
 * are gone (agent/src/probes/syscalls.rs).
 *
 * Cost: for every syscall on the machine, the tracepoint and a bit test of
 * `watched_bits` (shared with the sched object) on entry and on return; for a
 * watched thread, two task-storage lookups and one hash update. Opt-in for
 * `run` for that reason; see docs/probes/syscalls.md and bench/.
 */
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "syscalls.h"
#include "watched.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* keep the ABI types in BTF so the skeleton exports them */
struct wm_sys_key _wm_sys_key = {};
struct wm_sys_count _wm_sys_count = {};
enum wm_sys_stat _wm_sys_stat = WM_SYS_STAT_MAP_FULL;
enum wm_sys_limits _wm_sys_limits = WM_SYS_NR_OTHER;

/* the call a task is in: its number and when it entered (0: none noted) */
struct wm_sys_inflight {
	__u64 at;
	__u32 nr;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct wm_sys_inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_SYSCALL_COUNTS);
	__type(key, struct wm_sys_key);
	__type(value, struct wm_sys_count);
} syscall_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WM_SYS_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} sys_stats SEC(".maps");

static __always_inline void count_loss(enum wm_sys_stat stat)
{
	__u32 key = stat;
	__u64 *val = bpf_map_lookup_elem(&sys_stats, &key);

	if (val)
		*val += 1;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id)
{
	struct wm_sys_inflight *f;

	if (!is_watched(bpf_get_current_pid_tgid() >> 32))
		return 0;
	f = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!f) {
		count_loss(WM_SYS_STAT_NO_STORAGE);
		return 0;
	}
	f->at = bpf_ktime_get_ns();
	f->nr = id >= 0 && id < WM_SYS_NR_OTHER ? (__u32)id : WM_SYS_NR_OTHER;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct wm_sys_inflight *f;
	struct wm_sys_count *c, one = {};
	struct wm_sys_key key = {};

	if (!is_watched(pid_tgid >> 32))
		return 0;
	f = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	/* no entry noted: the call began before the process was watched */
	if (!f || !f->at)
		return 0;
	one.calls = 1;
	one.tgid = pid_tgid >> 32;
	one.ns = bpf_ktime_get_ns() - f->at;
	f->at = 0;
	key.tid = (__u32)pid_tgid;
	key.nr = f->nr;
	/* only this thread writes its keys; user space only reads and deletes */
	c = bpf_map_lookup_elem(&syscall_counts, &key);
	if (c) {
		c->calls += 1;
		c->ns += one.ns;
		return 0;
	}
	if (bpf_map_update_elem(&syscall_counts, &key, &one, BPF_NOEXIST))
		count_loss(WM_SYS_STAT_MAP_FULL);
	return 0;
}
