/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * stacks: taking the stacks of a wait's two sides, and charging the wait to
 * them. Included by bpf/sched.bpf.c, which calls these at the moments that
 * matter (ABI and the why: bpf/stacks.h, docs/probes/stacks.md):
 *
 *   switch-out of a watched thread   its own stack (native + Python): the
 *                                    victim side of whatever wait follows;
 *                                    entering a GIL wait also the holder's
 *                                    Python stack, read through its thread state
 *   futex wake of a watched thread   the waker's stack (it is `current`)
 *   end of any wait                  wait_stacks[(victim, blamed, state, role, stack)] += ns;
 *                                    the end of a GIL hold (sched.bpf.c: the
 *                                    waiter's streak): its length, on the holder's
 *
 * Taking a stack costs a few microseconds, so each thread takes its own at
 * most once per `cfg.stack_interval_ns` and reuses the last one meanwhile
 * (a thread that blocks thousands of times a second blocks in few places).
 * Off (`cfg.stacks` == 0), every call below is dead code the verifier drops.
 * Uses sched.bpf.c's `count_in`: included after it.
 */
#ifndef WAITMETER_STACKS_BPF_H
#define WAITMETER_STACKS_BPF_H

#include "stacks.h"

/* native user stacks, deduplicated, keyed by the low 31 bits of their hash */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_NATIVE_STACKS);
	__type(key, __u32);
	__type(value, struct wm_native_stack);
} native_stacks SEC(".maps");

/* the native stack being walked (too big for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_native_stack);
} native_scratch SEC(".maps");

/* the unwind rows of objects built without frame pointers (set by the agent) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WM_DEFAULT_UNWIND_ROWS);
	__type(key, __u32);
	__type(value, struct wm_unwind_row);
} unwind_rows SEC(".maps");

/* host TGID -> its code mappings of such objects (set by the agent) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PY_PROCS);
	__type(key, __u32);
	__type(value, struct wm_unwind_proc);
} unwind_procs SEC(".maps");

/* Python stacks, keyed by a hash of (TGID, frames) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PY_STACKS);
	__type(key, __u64);
	__type(value, struct wm_py_stack);
} py_stacks SEC(".maps");

/* host TGID -> how to walk its Python frames (set by the agent) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PY_PROCS);
	__type(key, __u32);
	__type(value, struct wm_py_walk);
} py_walk SEC(".maps");

/* host TID -> its PyThreadState (set by the agent from the interpreter's thread list) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_PY_THREADS);
	__type(key, __u32);
	__type(value, __u64);
} py_tstates SEC(".maps");

/* (victim, blamed, state, role, stack) -> its waits */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WM_DEFAULT_MAX_WAIT_STACKS);
	__type(key, struct wm_wait_stack_key);
	__type(value, struct wm_wait_stack_val);
} wait_stacks SEC(".maps");

/* the Python stack being read (too big for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wm_py_stack);
} py_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WM_STACK_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stack_stats SEC(".maps");

static __always_inline void stack_loss(enum wm_stack_stat stat)
{
	count_in(&stack_stats, stat);
}

static __always_inline __u64 py_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0x100000001b3ULL;
	return h ^ (h >> 29);
}

/*
 * Where `current` entered the kernel, in 32 bits: its user return address,
 * stack pointer and system call (-1 outside one). Two blocks of a thread
 * with the same value were made from the same call, and the second may
 * reuse the first's stack; a block from another caller takes its own (a
 * database backend's pg_sleep and its read of the client's socket sleep in
 * the same epoll_wait, called from frames at other depths: one charged to
 * the other's stack was a stack left from an earlier wait). 0: unknown.
 */
static __always_inline __u32 entry_site(struct task_struct *task)
{
	struct pt_regs *regs = wm_current_regs(task);
	__u64 h;

	if (!regs)
		return 0;
	h = py_mix(py_mix(py_mix(0xcbf29ce484222325ULL, WM_REG(regs, ip)), WM_REG(regs, sp)), WM_REG(regs, orig_ax));
	return (__u32)(h >> 32) ^ (__u32)h;
}

/*
 * The Python stack of the thread whose PyThreadState is `tstate`, in the
 * address space of `current` (the same process): stored in `py_stacks`,
 * returned as its key (0: none). Reads of another running thread's frames
 * (the GIL holder's) may race with it; user space checks every code object
 * it is given and marks what does not check out as unknown.
 *
 * A global function: the verifier checks it once, not at every call site.
 * Shim frames (owner >= skip_owner_min) are kept with code 0, which user
 * space drops: one path through the loop keeps the verifier's work small.
 */
__noinline __u64 wm_py_stack(__u32 tgid, __u64 tstate)
{
	struct wm_py_walk *w = bpf_map_lookup_elem(&py_walk, &tgid);
	struct wm_py_stack *s;
	__u64 frame = 0, h;
	__u32 zero = 0, n = 0;
	int err;

	if (!w || !tstate)
		return 0;
	s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!s)
		return 0;
	if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(tstate + w->tstate_frame)))
		return 0;
	if (w->cframe_current != WM_NO_OFFSET && frame &&
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + w->cframe_current)))
		return 0;
	h = 0xcbf29ce484222325ULL ^ tgid;
	s->truncated = 0;
	for (n = 0; n < WM_PY_MAX_FRAMES && frame; n++) {
		__u64 code = 0, instr = 0, prev = 0;
		__u8 owner = 0;

		if (w->owner != WM_NO_OFFSET)
			bpf_probe_read_user(&owner, 1, (void *)(frame + w->owner));
		if (bpf_probe_read_user(&code, sizeof(code), (void *)(frame + w->code)) ||
		    bpf_probe_read_user(&instr, sizeof(instr), (void *)(frame + w->instr)) ||
		    bpf_probe_read_user(&prev, sizeof(prev), (void *)(frame + w->previous))) {
			s->truncated = 1;
			break;
		}
		if (owner >= w->skip_owner_min)
			code = 0;
		code &= w->code_mask;
		s->frames[n].code = code;
		s->frames[n].instr = instr;
		h = py_mix(py_mix(h, code), instr);
		frame = prev;
	}
	if (frame)
		s->truncated = 1;
	if (!n)
		return 0;
	s->depth = n;
	h = py_mix(h, n) | 1;
	err = map_err(bpf_map_update_elem(&py_stacks, &h, s, BPF_NOEXIST));
	if (err && err != -17 /* EEXIST: seen before */) {
		stack_loss(WM_STACK_STAT_PY_MAP_FULL);
		return 0;
	}
	return h;
}

/* A walk in progress: the registers of the frame being left. */
struct wm_walk {
	__u64 ip, sp, bp;
	__u64 h;
	struct wm_native_stack *out;
	struct wm_unwind_proc *proc;
};

/* A binary search for the last row at or before `pc` in [lo, hi). */
struct wm_search {
	__u32 lo, hi, pc;
};

static long search_step(__u32 i, void *data)
{
	struct wm_search *s = data;
	struct wm_unwind_row *row;
	__u32 mid;

	if (s->lo + 1 >= s->hi)
		return 1;
	mid = s->lo + (s->hi - s->lo) / 2;
	row = bpf_map_lookup_elem(&unwind_rows, &mid);
	if (!row)
		return 1;
	if (row->pc <= s->pc)
		s->lo = mid;
	else
		s->hi = mid;
	return 0;
}

/*
 * One frame: record `ip`, then find the caller's registers. In an unwound
 * object its row says where the CFA is (and the caller's rbp); elsewhere the
 * frame pointer does (the caller's rbp at rbp, the return address above it),
 * as the kernel's walk does. A return address is the instruction after a
 * call: the caller's code is looked up at ip - 1.
 */
static long walk_step(__u32 i, void *data)
{
	struct wm_walk *w = data;
	struct wm_unwind_proc *proc = w->proc;
	struct wm_unwind_row *row = 0;
	__u64 at = i ? w->ip - 1 : w->ip, ra = 0, cfa;
	__u32 n = w->out->depth;

	__u64 rec = w->ip;

	if (n >= WM_NATIVE_MAX_FRAMES)
		return 1;
	/* an interpreted Java frame: the method it runs is the frame's name */
	if (proc && at >= proc->interp_start && at < proc->interp_end) {
		__u64 method = 0;

		if (!bpf_probe_read_user(&method, sizeof(method), (void *)(w->bp + WM_JAVA_METHOD_AT)) && method &&
		    method < 0x800000000000ULL)
			rec = method | WM_JAVA_METHOD;
	}
	w->out->ips[n] = rec;
	w->out->depth = n + 1;
	w->h = py_mix(w->h, rec);
	if (proc) {
		for (int j = 0; j < WM_UNWIND_MAX_MAPS; j++) {
			struct wm_unwind_map *m = &proc->maps[j];
			__u64 pc;

			if (j >= proc->n)
				break;
			if (at < m->start || at >= m->end)
				continue;
			pc = at - m->bias;
			if (pc > 0xffffffffULL || !m->count)
				return 1;
			struct wm_search s = { .lo = m->first, .hi = m->first + m->count, .pc = pc };

#if !WM_LEGACY
			bpf_loop(WM_UNWIND_SEARCH_STEPS, search_step, &s, 0);
#endif
			row = bpf_map_lookup_elem(&unwind_rows, &s.lo);
			if (!row || row->pc > pc || row->kind == WM_UNWIND_STOP)
				return 1;
			break;
		}
	}
	if (row) {
		cfa = (row->kind == WM_UNWIND_FP ? w->bp : w->sp) + (__s64)row->cfa_off;
		if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
			return 1;
		if (row->fp_saved && bpf_probe_read_user(&w->bp, sizeof(w->bp), (void *)(cfa + (__s64)row->fp_at)))
			return 1;
		w->sp = cfa;
	} else {
		__u64 frame[2];

		/* a frame lies above the one it called */
		if (!w->bp || w->bp < w->sp || (w->bp & 7))
			return 1;
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->bp))
			return 1;
		w->sp = w->bp + 16;
		w->bp = frame[0];
		ra = frame[1];
	}
	/* a return address in user space's code, never at 0 */
	if (ra < 4096 || ra >= 0x800000000000ULL)
		return 1;
	w->ip = ra;
	return 0;
}

/*
 * The native user stack of `current`, from the registers it entered the
 * kernel with: stored in `native_stacks`, returned as its key (negative:
 * none; a kernel thread has none, and is no loss). A global function: the
 * verifier checks it once. Its steps run in bpf_loop() where the kernel has
 * it (`cfg.bpf_loop`, probed by the agent), else in a bounded loop.
 */
__noinline int wm_native_stack(__u32 tgid)
{
	struct task_struct *task = wm_current_task();
	struct wm_walk w = {};
	struct wm_native_stack *e;
	struct pt_regs *regs;
	__u32 zero = 0, key;
	int err;

	if (!WM_CUR(task, mm))
		return -1;
	regs = wm_current_regs(task);
	if (!regs)
		return -1;
	w.out = bpf_map_lookup_elem(&native_scratch, &zero);
	if (!w.out)
		return -1;
	w.ip = WM_REG(regs, ip);
	w.sp = WM_REG(regs, sp);
	w.bp = WM_REG(regs, bp);
	if (w.ip < 4096 || w.ip >= 0x800000000000ULL)
		return -1;
	w.proc = bpf_map_lookup_elem(&unwind_procs, &tgid);
	w.h = 0xcbf29ce484222325ULL ^ tgid;
	w.out->depth = 0;
#if WM_LEGACY
	/* a kernel without bpf_loop (before 5.17): frame pointers only (the
	 * unwind tables' search needs bpf_loop), in a bounded loop the
	 * verifier walks once per frame */
	w.proc = NULL;
	for (__u32 i = 0; i < WM_NATIVE_MAX_FRAMES; i++)
		if (walk_step(i, &w))
			break;
#else
	bpf_loop(WM_NATIVE_MAX_FRAMES, walk_step, &w, 0);
#endif
	if (!w.out->depth)
		return -1;
	w.h = py_mix(w.h, w.out->depth);
	w.out->check = w.h >> 32;
	key = w.h & 0x7fffffff;
	err = map_err(bpf_map_update_elem(&native_stacks, &key, w.out, BPF_NOEXIST));
	if (err == -17 /* EEXIST */) {
		e = bpf_map_lookup_elem(&native_stacks, &key);
		if (e && e->check == w.out->check && e->depth == w.out->depth)
			return key;
	}
	if (err) {
		stack_loss(WM_STACK_STAT_NATIVE_FAILED);
		return -1;
	}
	return key;
}

/* The stacks of `current` (thread `tid` of `tgid`): native and Python. */
static __always_inline void own_stacks(__u32 tgid, __u32 tid, struct wm_stack_ref *out)
{
	__u64 *tstate;

	out->native = -1;
	out->py = 0;
	if (cfg.stacks & WM_STACKS_NATIVE)
		out->native = wm_native_stack(tgid);
	if (cfg.stacks & WM_STACKS_PYTHON) {
		tstate = bpf_map_lookup_elem(&py_tstates, &tid);
		if (tstate)
			out->py = wm_py_stack(tgid, *tstate);
	}
}

static __always_inline bool has_stack(const struct wm_stack_ref *s)
{
	return s->native >= 0 || s->py;
}

/* The bucket of a wait of `delta` ns (see WM_WAIT_BUCKETS). */
static __always_inline __u32 wait_bucket(__u64 delta)
{
	__u64 ms = delta / 1000000;
	__u32 b = 0;

#pragma unroll
	for (int i = 0; i < WM_WAIT_BUCKETS - 1; i++)
		if (ms >= (1ULL << i))
			b = i + 1;
	return b < WM_WAIT_BUCKETS ? b : WM_WAIT_BUCKETS - 1;
}

/* `delta` ns of wait charged to `key`, and with `len` one hold of that
 * length (0: none), or (`one`, a victim's entry) one wait; false: the map is
 * full. */
static __always_inline bool add_wait(struct wm_wait_stack_key *key, __u64 delta, __u64 len, bool one)
{
	__u32 bucket, us;

	struct wm_wait_stack_val *v = bpf_map_lookup_elem(&wait_stacks, key);

	if (!v) {
		struct wm_wait_stack_val init = {};

		/* a racing insert of the same key wins: then add to it */
		if (bpf_map_update_elem(&wait_stacks, key, &init, BPF_NOEXIST) && !bpf_map_lookup_elem(&wait_stacks, key))
			return false;
		v = bpf_map_lookup_elem(&wait_stacks, key);
		if (!v)
			return false;
	}
	__sync_fetch_and_add(&v->ns, delta);
	if (one)
		__sync_fetch_and_add(&v->waits, 1);
	if (!len)
		return true;
	bucket = wait_bucket(len);
	us = len / 1000 > 0xffffffffULL ? 0xffffffff : len / 1000;
	__sync_fetch_and_add(&v->waits, 1);
	__sync_fetch_and_add(&v->held_ns, len);
	if (bucket < WM_WAIT_BUCKETS)
		__sync_fetch_and_add(&v->buckets[bucket], 1);
	if (us > v->max_us) /* racy: a lost update only loses a maximum */
		v->max_us = us;
	return true;
}

/*
 * A wait of thread `tid` (incarnation `gen`) in `state` that lasted `delta`
 * ns, behind `blamed`: charged to the victim's stack and, when there is one,
 * to the blamed thread's (`role`), with the hold it ended (`hold_ns`, 0 none).
 */
static __always_inline void charge_stacks(__u32 tid, __u32 gen, __u32 state, __u64 blamed, const struct wm_stack_ref *victim,
					  __u32 role, const struct wm_stack_ref *culprit, __u64 delta, __u64 hold_ns)
{
	struct wm_wait_stack_key key = { .tid = tid, .gen = gen, .blamed = blamed, .state = state };

	if (!cfg.stacks || !delta)
		return;
	if (has_stack(victim) && stacks_all) {
		key.role = WM_ROLE_VICTIM;
		key.native = victim->native;
		key.py = victim->py;
		if (!add_wait(&key, delta, 0, true))
			stack_loss(WM_STACK_STAT_WAIT_MAP_FULL);
	}
	if (culprit && has_stack(culprit) && (stacks_all || (state == WM_STATE_GIL_WAIT && role == WM_ROLE_HOLDER))) {
		key.role = role;
		key.native = culprit->native;
		key.py = culprit->py;
		if (!add_wait(&key, delta, hold_ns, false))
			stack_loss(WM_STACK_STAT_WAIT_MAP_FULL);
	}
}

#endif /* WAITMETER_STACKS_BPF_H */
