/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The thread table: every watched thread's entry (struct wm_thread), found
 * by its TID without a helper call. A hash map's lookup is a helper call
 * (~55 ns here, docs/performance.md) and a watched switch made two of them,
 * a wakeup and a waking one each; an array's lookup the verifier inlines.
 *
 * `threads` is an array of entries by slot, and `thread_ids` an array of
 * groups of sixteen slots (one cache line): the TID each slot holds (0: free;
 * TID | WM_THREAD_CLAIMED: its claimer is writing the entry). A thread's
 * slot is its home slot, its TID's low bits, when that is free as it comes
 * (consecutive TIDs, as a process makes its threads, take consecutive
 * slots), else one in the home slot's group or the next
 * WM_THREAD_PROBE_GROUPS - 1 groups; a thread with no free slot in any of
 * them is counted lost (`thread_map_full`), as a full hash map was.
 *
 * Who writes: a thread's own transitions claim its slot, write its entry and
 * release it at its exit; the kernel runs them one after another (struct
 * wm_thread), so two claims of one TID race only with the agent's seeding of
 * a thread it found in /proc (agent/src/probes/thread_table.rs, the same
 * protocol). Both arrays are mapped into the agent, which reads entries in
 * place under their `seq`.
 */
#ifndef WAITMETER_THREAD_TABLE_BPF_H
#define WAITMETER_THREAD_TABLE_BPF_H

#include "sched.h"

/* slot -> the thread's entry; sized by the agent before load (a power of 2
 * groups of WM_THREAD_GROUP_SLOTS) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, WM_DEFAULT_MAX_THREADS);
	__type(key, __u32);
	__type(value, struct wm_thread);
} threads SEC(".maps");

/* group -> the TIDs of its slots */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, WM_DEFAULT_MAX_THREADS / WM_THREAD_GROUP_SLOTS);
	__type(key, __u32);
	__type(value, struct wm_thread_group);
} thread_ids SEC(".maps");

/*
 * The legacy object's claims (core_fixes.bpf.h: no compare-and-exchange
 * before 5.12): a slot is claimed under a lock, its key made in `slot_locks`
 * (an insertion that fails when the key exists: the hash map's bucket lock
 * serialises them), the id checked and set, and the key deleted. The agent
 * claims under the same lock there. Unused by the main object.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} slot_locks SEC(".maps");

/* Set the id at `at` (slot `slot`'s) from 0 to `claimed`: true when this
 * call did (a full barrier either way it succeeds). */
static __always_inline bool claim_id(__u32 *at, __u32 slot, __u32 claimed)
{
	if (WM_LEGACY) {
		__u8 one = 1;
		bool won = false;

		if (bpf_map_update_elem(&slot_locks, &slot, &one, BPF_NOEXIST))
			return false;
		if (!*(volatile __u32 *)at) {
			*(volatile __u32 *)at = claimed;
			won = true;
		}
		bpf_map_delete_elem(&slot_locks, &slot);
		return won;
	}
	return __sync_val_compare_and_swap(at, 0, claimed) == 0;
}

/* no slot: thread_slot_of() excepts none */
#define WM_NO_SLOT 0xffffffffU

/* TID `tid`'s home slot: its low bits (consecutive TIDs, as a process makes
 * its threads, take consecutive slots) */
static __always_inline __u32 home_slot(__u32 tid)
{
	return tid & ((cfg.thread_group_mask + 1) * WM_THREAD_GROUP_SLOTS - 1);
}

/* Where slot `slot`'s id is (NULL when out of range). */
static __always_inline __u32 *slot_id_at(__u32 slot)
{
	__u32 group = slot / WM_THREAD_GROUP_SLOTS;
	struct wm_thread_group *g = bpf_map_lookup_elem(&thread_ids, &group);

	return g ? &g->tid[slot % WM_THREAD_GROUP_SLOTS] : NULL;
}

/* The `k`th group of TID `tid`'s probe order: its home slot's group, then the next ones. */
static __always_inline struct wm_thread_group *probe_group(__u32 tid, __u32 k, __u32 *group)
{
	*group = (home_slot(tid) / WM_THREAD_GROUP_SLOTS + k) & cfg.thread_group_mask;
	return bpf_map_lookup_elem(&thread_ids, group);
}

/*
 * The first slot of TID `tid`'s groups but `except`, in probe order, whose
 * id is `a` or `b`; -1 none. A global function: the verifier checks it once, and its
 * caller goes on with one unknown slot, not with one path per slot it could
 * be.
 */
__noinline int thread_slot_of(__u32 tid, __u32 a, __u32 b, __u32 except)
{
	for (__u32 k = 0; k < WM_THREAD_PROBE_GROUPS; k++) {
		__u32 group;
		struct wm_thread_group *g = probe_group(tid, k, &group);

		if (!g)
			return -1;
		for (__u32 i = 0; i < WM_THREAD_GROUP_SLOTS; i++) {
			__u32 id = *(volatile __u32 *)&g->tid[i];

			if ((id == a || id == b) && group * WM_THREAD_GROUP_SLOTS + i != except)
				return (int)(group * WM_THREAD_GROUP_SLOTS + i);
		}
	}
	return -1;
}

/*
 * Thread `tid`'s entry and its slot, NULL when it has none (or its claimer is
 * writing it). Most threads are in their home slot: one inlined lookup and a
 * compare, no call (a call and its return cost tens of ns on this CPU's
 * mitigations, docs/performance.md); the others are found by
 * thread_slot_of().
 */
static __always_inline struct wm_thread *find_thread_at(__u32 tid, __u32 *slot)
{
	__u32 *id;
	int s;

	*slot = home_slot(tid);
	id = slot_id_at(*slot);
	if (id && *(volatile __u32 *)id == tid)
		return bpf_map_lookup_elem(&threads, slot);
	s = thread_slot_of(tid, tid, tid, WM_NO_SLOT);
	if (s < 0)
		return NULL;
	*slot = s;
	return bpf_map_lookup_elem(&threads, slot);
}

static __always_inline struct wm_thread *find_thread(__u32 tid)
{
	__u32 slot;

	return find_thread_at(tid, &slot);
}

/* Set slot `slot`'s id: publish its entry (the TID), or free it (0). The
 * entry's stores come first (x86-64 keeps stores in order). */
static __always_inline void set_slot_id(__u32 slot, __u32 id)
{
	__u32 *at = slot_id_at(slot);

	if (!at)
		return;
	asm volatile("" ::: "memory");
	*(volatile __u32 *)at = id;
}

/* The id of slot `slot` now (0 when out of range). */
static __always_inline __u32 slot_id(__u32 slot)
{
	__u32 *at = slot_id_at(slot);

	return at ? *(volatile __u32 *)at : 0;
}

/* A free slot of the `k`th group of `tid`, claimed (its id set to `claimed`
 * by compare-and-exchange: a full barrier); -1 none. */
__noinline int claim_in_group(__u32 tid, __u32 k, __u32 claimed)
{
	__u32 group;
	struct wm_thread_group *g = probe_group(tid, k, &group);

	if (!g)
		return -1;
	for (__u32 i = 0; i < WM_THREAD_GROUP_SLOTS; i++)
		if (!*(volatile __u32 *)&g->tid[i] && claim_id(&g->tid[i], group * WM_THREAD_GROUP_SLOTS + i, claimed))
			return (int)(group * WM_THREAD_GROUP_SLOTS + i);
	return -1;
}

/*
 * A slot for thread `tid`, which find_thread() did not find: the slot of the
 * entry the agent published meanwhile, or a free slot claimed for it, with
 * WM_THREAD_SLOT_NEW (the caller writes the entry, then publishes it with
 * set_slot_id()). -1 when the agent is writing its entry now, or when none of
 * its groups has a free slot (counted lost).
 *
 * Of two claims of one TID (this one and the agent's seeding), a claim that
 * sees the other yields: after its claim (a full barrier, as on the agent's
 * side) each looks again, so at least one of them sees the other, and one
 * entry at most is published. When both see the other, both yield: the
 * thread's next event claims a slot again.
 */
__noinline int claim_thread_slot(__u32 tid)
{
	__u32 claimed = WM_THREAD_CLAIMED | tid;
	/* published meanwhile (use it), or being written by the agent (skip) */
	int s = thread_slot_of(tid, tid, claimed, WM_NO_SLOT);

	if (s >= 0)
		return slot_id((__u32)s) == tid ? s : -1;
	/* its home slot if free, else the first free slot of its groups */
	{
		__u32 home = home_slot(tid), *at = slot_id_at(home);

		if (at && !*(volatile __u32 *)at && claim_id(at, home, claimed))
			s = (int)home;
	}
	for (__u32 k = 0; k < WM_THREAD_PROBE_GROUPS && s < 0; k++) {
		s = claim_in_group(tid, k, claimed);
	}
	if (s < 0) {
		count_loss(WM_STAT_THREAD_MAP_FULL);
		return -1;
	}
	/* another claim of the same TID (the agent's) seen: this one yields */
	if (thread_slot_of(tid, tid, claimed, (__u32)s) >= 0) {
		set_slot_id((__u32)s, 0);
		return thread_slot_of(tid, tid, tid, WM_NO_SLOT);
	}
	return s | WM_THREAD_SLOT_NEW;
}

#endif /* WAITMETER_THREAD_TABLE_BPF_H */
