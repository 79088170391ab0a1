// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What each BPF primitive the sched probe is made of costs on this machine:
 * one tp_btf program per primitive on sys_enter, each doing that one thing
 * for the bench's own process only (its other runs return after a compare).
 * primitives.py attaches them one at a time and times a loop of getppid(2)
 * with and without; a program's figure less the `empty` program's is the
 * primitive's cost. bench/bench.py's `primitives` scenario prints the table;
 * docs/performance.md explains the per-event costs of docs/probes/ with it.
 *
 * No headers: the few types and helpers used are declared here.
 *   clang -target bpf -O2 -g -c primitives.bpf.c   (bench/harness.py builds it)
 */
typedef unsigned int __u32;
typedef unsigned long long __u64;
#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* the helpers, by their numbers (include/uapi/linux/bpf.h) */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_spin_lock)(void *lock) = (void *)93;
static long (*bpf_spin_unlock)(void *lock) = (void *)94;
static __u32 (*bpf_get_prandom_u32)(void) = (void *)7;
static void *(*bpf_task_storage_get)(void *map, void *task, void *value, __u64 flags) = (void *)156;
static void *(*bpf_get_current_task_btf)(void) = (void *)158;
static void *(*bpf_task_pt_regs)(void *task) = (void *)175;

struct bpf_spin_lock {
	__u32 val;
};

/* a per-thread entry the size of the sched probe's (bpf/sched.h: struct wm_thread) */
struct entry {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 d[65];
};

struct {
	__uint(type, 1 /* BPF_MAP_TYPE_HASH */);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct entry);
} by_tid SEC(".maps");

struct {
	__uint(type, 2 /* BPF_MAP_TYPE_ARRAY */);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct entry);
} by_slot SEC(".maps");

struct {
	__uint(type, 6 /* BPF_MAP_TYPE_PERCPU_ARRAY */);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct entry);
} scratch SEC(".maps");

struct {
	__uint(type, 29 /* BPF_MAP_TYPE_TASK_STORAGE */);
	__uint(map_flags, 1 /* BPF_F_NO_PREALLOC */);
	__type(key, int);
	__type(value, struct entry);
} per_task SEC(".maps");

/* set by primitives.py before the load: the bench's own process */
const volatile __u32 target_tgid = 0;
__u64 sink = 0;

/* only the bench's own process, as the sched probe's bit test keeps others out */
#define MINE(tid)                                     \
	__u64 id_ = bpf_get_current_pid_tgid();       \
	__u32 tid __attribute__((unused)) = (__u32)id_; \
	if ((id_ >> 32) != target_tgid)               \
		return 0;

SEC("tp_btf/sys_enter")
int empty(void *ctx)
{
	MINE(tid);
	sink += tid;
	return 0;
}

/* a helper call that does next to nothing */
SEC("tp_btf/sys_enter")
int helper_call(void *ctx)
{
	MINE(tid);
	sink += bpf_get_prandom_u32();
	return 0;
}

SEC("tp_btf/sys_enter")
int ktime(void *ctx)
{
	MINE(tid);
	sink += bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sys_enter")
int current_task(void *ctx)
{
	MINE(tid);
	if (bpf_get_current_task_btf())
		sink++;
	return 0;
}

SEC("tp_btf/sys_enter")
int task_pt_regs(void *ctx)
{
	MINE(tid);
	if (bpf_task_pt_regs(bpf_get_current_task_btf()))
		sink++;
	return 0;
}

/* the sched probe's per-thread entry: a hash lookup by TID */
SEC("tp_btf/sys_enter")
int hash_lookup(void *ctx)
{
	MINE(tid);
	struct entry *e = bpf_map_lookup_elem(&by_tid, &tid);

	if (e)
		e->d[0]++;
	return 0;
}

SEC("tp_btf/sys_enter")
int hash_lookup_locked(void *ctx)
{
	MINE(tid);
	struct entry *e = bpf_map_lookup_elem(&by_tid, &tid);

	if (e) {
		bpf_spin_lock(&e->lock);
		e->d[0]++;
		bpf_spin_unlock(&e->lock);
	}
	return 0;
}

/* an array lookup (the verifier inlines it) */
SEC("tp_btf/sys_enter")
int array_lookup(void *ctx)
{
	MINE(tid);
	__u32 slot = tid & 4095;
	struct entry *e = bpf_map_lookup_elem(&by_slot, &slot);

	if (e)
		e->d[0]++;
	return 0;
}

SEC("tp_btf/sys_enter")
int percpu_scratch(void *ctx)
{
	MINE(tid);
	__u32 zero = 0;
	struct entry *e = bpf_map_lookup_elem(&scratch, &zero);

	if (e)
		e->d[0]++;
	return 0;
}

SEC("tp_btf/sys_enter")
int task_storage(void *ctx)
{
	MINE(tid);
	struct entry *e = bpf_task_storage_get(&per_task, bpf_get_current_task_btf(), 0, 1 /* F_CREATE */);

	if (e)
		e->d[0]++;
	return 0;
}

SEC("tp_btf/sys_enter")
int atomic_add(void *ctx)
{
	MINE(tid);
	__u32 slot = tid & 4095;
	struct entry *e = bpf_map_lookup_elem(&by_slot, &slot);

	if (e)
		__sync_fetch_and_add(&e->d[1], 3);
	return 0;
}

/*
 * The scheduler's own clock, read where the sched probe's tracepoints find it:
 * the task's run queue (task->se.cfs_rq->rq->clock, CO-RE: the types below
 * are relocated against the kernel's BTF). Less current_task's figure, it is
 * what the loads cost: at sched_switch and sched_wakeup the task is an
 * argument. (The per-CPU `runqueues` symbol is not found by this kernel.)
 */
struct rq {
	__u64 clock;
} __attribute__((preserve_access_index));
struct cfs_rq {
	struct rq *rq;
} __attribute__((preserve_access_index));
struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));
struct task_struct {
	struct sched_entity se;
} __attribute__((preserve_access_index));

SEC("tp_btf/sys_enter")
int rq_clock(void *ctx)
{
	MINE(tid);
	struct task_struct *t = bpf_get_current_task_btf();

	sink += t->se.cfs_rq->rq->clock;
	return 0;
}
