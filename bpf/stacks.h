/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * stacks: the kernel/user ABI of waitmeter's wait stacks.
 *
 * A wait is explained by the code on both sides: where the thread that waited
 * was stopped (its stack when it left the CPU: role `victim`) and what the
 * thread it waited behind was running (role `holder` for a GIL wait, `waker`
 * for a futex wait, `preemptor` for a run-queue wait). The sched probe takes
 * the stacks at those moments (bpf/stacks.bpf.h) and, when the wait ends,
 * adds its nanoseconds to `wait_stacks` under both stacks. Native user stacks
 * are walked by frame pointers and, through code built without them, by the
 * unwind rows user space made from the object's `.eh_frame` (`unwind_rows`,
 * `unwind_procs`); Python stacks are read from the
 * interpreter's frames (code object + instruction per frame) and symbolised
 * in user space (agent/src/stacks/). See docs/probes/stacks.md.
 */
#ifndef WAITMETER_STACKS_H
#define WAITMETER_STACKS_H

enum wm_stack_limits {
	/* deepest Python stack read (frames beyond are cut; the stack is marked truncated) */
	WM_PY_MAX_FRAMES = 64,
	/* native frames kept per stack (the kernel's default perf_event_max_stack) */
	WM_NATIVE_MAX_FRAMES = 127,
	/* default map sizes; the agent resizes them before load */
	WM_DEFAULT_MAX_NATIVE_STACKS = 16384,
	WM_DEFAULT_MAX_PY_STACKS = 16384,
	WM_DEFAULT_MAX_WAIT_STACKS = 65536,
	WM_DEFAULT_MAX_PY_THREADS = 16384,
	WM_DEFAULT_MAX_HOLDERS = 1024,       /* holder_samples: GIL holders waited behind (LRU) */
	WM_DEFAULT_MAX_PY_PROCS = 1024,
	/* an offset the walker does not use */
	WM_NO_OFFSET = 0xffffffff,
};

/* Whose stack a `wait_stacks` entry is. The order is ABI. */
enum wm_role {
	WM_ROLE_VICTIM = 0,    /* the thread that waited, where it was stopped */
	WM_ROLE_HOLDER = 1,    /* the GIL holder when the victim began to wait */
	WM_ROLE_WAKER = 2,     /* the thread whose futex wake ended the wait, as it woke it */
	WM_ROLE_PREEMPTOR = 3, /* the thread of the same process that had the CPU */
	/* the thread itself on the CPU, sampled by the CPU clock while it had
	 * not blocked in any of its waits for a quarter of the stall objective
	 * (busy in a long stretch: what kept it from its home); state running,
	 * blamed 0, each sample charged one clock period */
	WM_ROLE_BUSY = 4,
	WM_NR_ROLES = 5,
};

/* A native stack (`native_stacks`, keyed by the low 31 bits of its hash):
 * return addresses, leaf first (the leaf is the instruction itself). */
struct wm_native_stack {
	__u32 depth;      /* frames used */
	__u32 check;      /* the hash's high 32 bits: another stack in the same key is a collision */
	__u64 ips[WM_NATIVE_MAX_FRAMES];
};

/* Walking code built without frame pointers: user space gives each process the
 * code mappings of such objects and each object's rows (formats::cfi, from
 * `.eh_frame`), in one array shared by every process that maps the object. */
enum wm_unwind_limits {
	WM_UNWIND_MAX_MAPS = 32,          /* unwound code mappings per process */
	WM_JAVA_METHOD_BIT = 63,          /* WM_JAVA_METHOD, for user space */
	WM_DEFAULT_UNWIND_ROWS = 262144,  /* rows of all objects (resized before load) */
	WM_UNWIND_SEARCH_STEPS = 24,      /* binary search steps: up to 2^24 rows an object */
};

/* How to step out of the code at a row's address. */
enum wm_unwind_kind {
	WM_UNWIND_STOP = 0,   /* no caller found from here: the walk ends */
	WM_UNWIND_SP = 1,     /* CFA = rsp + cfa_off */
	WM_UNWIND_FP = 2,     /* CFA = rbp + cfa_off */
};

/* From `pc` (the object's link-time address) to the next row's: the return
 * address is at CFA - 8; with `fp_saved`, the caller's rbp at CFA + fp_at. */
struct wm_unwind_row {
	__u32 pc;
	__s32 cfa_off;
	__s16 fp_at;
	__u8 kind;        /* enum wm_unwind_kind */
	__u8 fp_saved;
};

/* One code mapping of an unwound object: address - bias = link-time address;
 * its rows are unwind_rows[first, first + count). */
struct wm_unwind_map {
	__u64 start;
	__u64 end;
	__u64 bias;
	__u32 first;
	__u32 count;
};

struct wm_unwind_proc {
	__u32 n;          /* maps used */
	__u32 _pad;
	/* a JVM's interpreter code, [interp_start, interp_end) (0, 0: none): a frame
	 * there is recorded as the Method* it runs, tagged WM_JAVA_METHOD */
	__u64 interp_start;
	__u64 interp_end;
	struct wm_unwind_map maps[WM_UNWIND_MAX_MAPS];
};

/* A native stack's entry that is an interpreted Java frame's Method* (read at
 * fp + WM_JAVA_METHOD_AT, as HotSpot's x86-64 interpreter keeps it), not an address. */
#define WM_JAVA_METHOD (1ULL << 63)
#define WM_JAVA_METHOD_AT (-24)

/* The stacks of one moment: a native stack id and a Python stack key. */
struct wm_stack_ref {
	__s32 native;     /* `native_stacks` key; negative: none */
	__u32 _pad;
	__u64 py;         /* `py_stacks` key; 0: none */
};

/* One Python frame as read: the code object and the raw instruction field
 * (f_lasti on 3.8-3.10, the instruction pointer on 3.11+). */
struct wm_py_frame {
	__u64 code;
	__u64 instr;
};

struct wm_py_stack {
	__u32 depth;      /* frames used */
	__u32 truncated;  /* more frames were beyond WM_PY_MAX_FRAMES, or a read failed */
	struct wm_py_frame frames[WM_PY_MAX_FRAMES]; /* innermost first */
};

/* How to walk a process' Python frames (agent/src/python, per version). */
struct wm_py_walk {
	__u32 tstate_frame;    /* PyThreadState -> frame (3.8-3.10), cframe (3.11-3.12), current_frame (3.13+) */
	__u32 cframe_current;  /* _PyCFrame -> current_frame (3.11-3.12); WM_NO_OFFSET otherwise */
	__u32 previous;        /* frame -> the caller's frame */
	__u32 code;            /* frame -> code object (f_code, f_executable) */
	__u32 instr;           /* frame -> f_lasti / prev_instr / instr_ptr */
	__u32 owner;           /* _PyInterpreterFrame.owner (a char); WM_NO_OFFSET: none */
	__u32 skip_owner_min;  /* frames whose owner is >= this are not Python code (shims): kept with code 0 */
	__u32 _pad;
	__u64 code_mask;       /* clears the tag bits of f_executable (3.14+ _PyStackRef) */
};

/* Wait time charged to a pair of stacks: `wait_stacks`, value `struct wm_wait_stack_val`. */
struct wm_wait_stack_key {
	__u32 tid;        /* the thread that waited, host TID */
	__u32 gen;        /* its incarnation: (u32)start */
	__u64 blamed;     /* who it waited behind: GIL holder id, waker or preemptor host TID (a waker of
			   * another process: its host TGID with sched.h's WM_BLAMED_PROCESS_BIT); 0 unknown */
	__u8 state;       /* enum wm_state of the wait */
	__u8 role;        /* enum wm_role: whose stack `stack` is */
	__u16 _pad;
	__s32 native;     /* the stack: `native_stacks` id, negative none */
	__u64 py;         /* `py_stacks` key, 0 none */
};

/* Hold lengths by power of two of milliseconds: bucket 0 < 1 ms, bucket i in
 * [2^(i-1), 2^i) ms, the last >= 2^(WM_WAIT_BUCKETS-2) ms (256 ms). */
#define WM_WAIT_BUCKETS 10

/* What a pair of stacks was charged: the wait, and on a GIL holder's stack
 * the holds that ended while it was there (as the waiter saw them: from the
 * first wait of its streak to its release; sched.h `streak_at`), by length. */
struct wm_wait_stack_val {
	__u64 ns;
	__u64 held_ns;                    /* the holds' lengths, summed */
	__u32 waits;                      /* holds counted; on a victim's entry, its waits */
	__u32 max_us;                     /* the longest, µs (saturating) */
	__u32 buckets[WM_WAIT_BUCKETS];
};

/* The native stack of a GIL holder, sampled in its own context by a CPU
 * clock (bpf/holder_samples.bpf.h): a waiter's program cannot take another
 * thread's user stack. Keyed by the holder's thread state, which the waiter
 * reads from the GIL and the sampler from `py_tstates`. */
struct wm_holder_key {
	__u32 tgid;
	__u32 _pad;
	__u64 tstate;
};

struct wm_holder_sample {
	__u64 wanted;     /* ns: a waiter last went to sleep behind this holder */
	__u64 at;         /* ns: the last sample */
	__s32 native;     /* `native_stacks` id of the last sample; negative: none */
	__u16 want_switch; /* the GIL's switch_number (low bits) the waiter saw */
	__u16 switch_at;  /* want_switch when the sample was taken: the hold it belongs to */
};

/* Index of the per-CPU `stack_stats` array, exported as
 * waitmeter_bpf_events_lost_total{probe="stacks",reason}. */
enum wm_stack_stat {
	WM_STACK_STAT_NATIVE_FAILED = 0, /* a native stack could not be stored (map full, or another stack has its key) */
	WM_STACK_STAT_PY_MAP_FULL = 1,   /* a Python stack could not be stored */
	WM_STACK_STAT_WAIT_MAP_FULL = 2, /* a wait could not be charged to its stacks */
	WM_STACK_NR_STATS = 3,
};

#endif /* WAITMETER_STACKS_H */
