//! CPython internals per version, as data: where the GIL is, its fields, and
//! the objects thread names are read through. With the frame and thread-state
//! table of `waitmeter_formats::pyframe` (which this reads a thread's id from),
//! the only places in waitmeter that know CPython versions: each offset is
//! kept once, and the BPF side is told every one it reads (`wm_gil`). Values
//! measured on x86-64 glibc builds (see docs/python-support.md and
//! ../shared/reference/cpython-gil.md). 3.13 and later describe themselves
//! (`debug_offsets`): only what their table does not give is here.

use super::debug_offsets::DebugOffsets;

/// Where the GIL struct (`struct _gil_runtime_state`) lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GilLocation {
    /// One global GIL embedded in `_PyRuntime` (3.8–3.11): `&_PyRuntime + offset`.
    Runtime { offset: u64 },
    /// One GIL per interpreter (3.12+): walk `*(_PyRuntime + head)` through
    /// `interp + next`; each interpreter's GIL is `*(interp + gil_ptr)`.
    PerInterpreter { head: u64, next: u64, gil_ptr: u64 },
}

/// The field of a `PyThreadState` that identifies its OS thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HolderId {
    /// `native_thread_id`: the TID as seen in the target's PID namespace (3.11+)
    NativeThreadId { offset: u64 },
    /// `thread_id`: `pthread_self()`, on x86-64 glibc the thread's FS base (3.8–3.10)
    PthreadT { offset: u64 },
}

/// How the attributes of a Python-class instance (a `threading.Thread`) are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceDict {
    /// a dict pointer at the type's `tp_dictoffset` (3.8–3.10)
    DictOffset,
    /// managed: dict pointer at obj-24, values pointer at obj-32 (3.11)
    Managed311,
    /// managed: obj-24 holds a dict pointer, or `values - 1` (odd) (3.12)
    Tagged312,
    /// dict pointer at obj-24, else values inline at obj + tp_basicsize (3.13)
    Inline313,
}

/// Object layouts needed to read thread names (`threading._active`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Objects {
    /// `_PyRuntime.interpreters.head`
    pub interp_head: u64,
    /// the modules dict (`sys.modules`) in `PyInterpreterState`
    pub interp_modules: u64,
    /// dict keys object: the 3.11 format (log2 sizes, kinds) or the 3.8 one
    pub keys_v311: bool,
    /// where `values[]` starts in a split dict's values object
    pub values_offset: u64,
    /// sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject)
    pub ascii_size: u64,
    pub compact_size: u64,
    /// ints carry `lv_tag` (3.12+) instead of a signed `ob_size`
    pub long_tagged: bool,
    pub instance_dict: InstanceDict,
    /// `PyHeapTypeObject.ht_cached_keys`: the shared keys of instances
    pub ht_cached_keys: u64,
    /// `ob_type` in an object; `tp_basicsize`, `tp_flags`, `tp_dictoffset` in a type;
    /// `md_dict` in a module; `ma_keys`, `ma_values` in a dict
    pub ob_type: u64,
    pub tp_basicsize: u64,
    pub tp_flags: u64,
    pub tp_dictoffset: u64,
    pub md_dict: u64,
    pub ma_keys: u64,
    pub ma_values: u64,
    /// `Py_TPFLAGS_MANAGED_DICT` (3.11+), `Py_TPFLAGS_INLINE_VALUES` (3.13+)
    pub managed_dict_flag: u64,
    pub inline_values_flag: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    pub free_threaded: bool,
    pub gil: GilLocation,
    /// offsets within the GIL struct
    pub enabled: Option<u64>,
    pub last_holder: u64,
    pub locked: u64,
    /// `unsigned long switch_number`: counts changes of holder (a hold from the next)
    pub switch_number: u64,
    pub cond: u64,
    pub mutex: u64,
    pub holder_id: HolderId,
    /// `None`: thread names are not read (free-threaded builds)
    pub objects: Option<Objects>,
}

/// The futex words condvar waiters sleep on, `pthread_cond_t.__g_signals[2]`:
/// at 40 and 44 in glibc 2.25–2.40, at 32 and 36 since glibc 2.41 dropped
/// `__g_refs` (measured: Debian sid's 3.14.10 on glibc 2.43 waits on
/// gil+68). All four are registered, whatever the target's glibc: in either
/// layout nothing else sleeps on the other pair while the interpreter runs
/// (2.25–2.40 keep `__g1_orig_size` and `__wrefs` there, the latter waited on
/// only by `pthread_cond_destroy`; 2.41+ leave them unused).
pub const GLIBC_COND_SIGNALS: [u64; 4] = [32, 36, 40, 44];
/// `pthread_mutex_t.__lock`: the futex word of a contended mutex.
pub const GLIBC_MUTEX_LOCK: u64 = 0;

/// How a 3.8-3.12 thread state names its thread, from the frame table
/// (`waitmeter_formats::pyframe`, the one place the thread-state offsets are kept):
/// `native_thread_id` where it has one (3.11+), else the `pthread_t`.
const fn holder_id(minor: u32) -> HolderId {
    let f = &waitmeter_formats::pyframe::MEASURED[(minor - 8) as usize];
    assert!(f.minor == minor && !f.free_threaded, "the frame table is 3.8-3.12 in order");
    match f.tstate_native_thread_id {
        Some(offset) => HolderId::NativeThreadId { offset },
        None => HolderId::PthreadT { offset: f.tstate_thread_id },
    }
}

const fn default_build(minor: u32, gil: GilLocation, objects: Objects) -> Layout {
    let holder_id = holder_id(minor);
    Layout {
        minor,
        free_threaded: false,
        gil,
        enabled: None,
        last_holder: 8,
        locked: 16,
        switch_number: 24,
        cond: 32,
        mutex: 80,
        holder_id,
        objects: Some(objects),
    }
}

/// Measured with tests/helpers/measure_cpython.py on the pyenv builds and Debian's 3.11.
const fn objects(minor: u32) -> Objects {
    let (interp_head, interp_modules, ht_cached_keys) = match minor {
        8 => (0x20, 56, 872),
        9 => (0x20, 856, 864),
        10 => (0x20, 856, 872),
        11 => (0x28, 888, 872),
        12 => (0x28, 944, 880),
        _ => (0x278, 7656, 880),
    };
    Objects {
        interp_head,
        interp_modules,
        keys_v311: minor >= 11,
        values_offset: if minor >= 13 { 8 } else { 0 },
        ascii_size: if minor >= 12 { 40 } else { 48 },
        compact_size: if minor >= 12 { 56 } else { 72 },
        long_tagged: minor >= 12,
        instance_dict: match minor {
            8..=10 => InstanceDict::DictOffset,
            11 => InstanceDict::Managed311,
            12 => InstanceDict::Tagged312,
            _ => InstanceDict::Inline313,
        },
        ht_cached_keys,
        // the same on every default build of 3.8-3.15
        ob_type: 8,
        tp_basicsize: 32,
        tp_flags: 168,
        tp_dictoffset: 288,
        md_dict: 16,
        ma_keys: 32,
        ma_values: 40,
        managed_dict_flag: 1 << 4,
        inline_values_flag: 1 << 2,
    }
}

/// A parked thread's wait entry (`struct wait_entry` of Python/parking_lot.c,
/// 3.13–3.15: `park_arg`, `addr`, the `_PySemaphore` — a glibc `sem_t`, 32
/// bytes — then the list `node`), as offsets from the semaphore, which is
/// what `_PySemaphore_Wait` is given (bpf/pypark.bpf.c). A build whose entry
/// differs fails the probe's check of the node's links: its waits stay plain
/// futex waits, never charged to a wrong address.
pub struct ParkEntry {
    pub addr: i32,
    pub node: i32,
}

pub const PARK_ENTRY: ParkEntry = ParkEntry { addr: -8, node: 32 };

pub const LAYOUTS: &[Layout] = &[
    default_build(8, GilLocation::Runtime { offset: 0x480 }, objects(8)),
    default_build(9, GilLocation::Runtime { offset: 0x160 }, objects(9)),
    default_build(10, GilLocation::Runtime { offset: 0x160 }, objects(10)),
    default_build(11, GilLocation::Runtime { offset: 0x168 }, objects(11)),
    default_build(12, GilLocation::PerInterpreter { head: 0x28, next: 0x0, gil_ptr: 0x180 }, objects(12)),
];

/// The layout of CPython 3.`minor` (3.8–3.12, measured by hand); `None`:
/// a version without a table (3.13 and later read `_Py_DebugOffsets`).
pub fn layout(minor: u32, free_threaded: bool) -> Option<Layout> {
    LAYOUTS.iter().find(|l| l.minor == minor && l.free_threaded == free_threaded).copied()
}

/// The layout of a 3.13+ interpreter from its own debug offsets: where its
/// GILs are, how a thread state names its thread, and what object layout
/// thread names need. The GIL struct's fields that the table does not give
/// (`switch_number`, `cond`, `mutex`) are placed relative to `locked`, whose place `parse`
/// checked (16 bytes in on a default build, 24 on a free-threaded one, whose
/// first field is `int enabled`).
pub fn from_debug_offsets(o: &DebugOffsets) -> Layout {
    let shift = if o.free_threaded { 8 } else { 0 };
    Layout {
        minor: o.minor(),
        free_threaded: o.free_threaded,
        gil: GilLocation::PerInterpreter { head: o.interpreters_head, next: o.interp_next, gil_ptr: o.interp_ceval_gil },
        enabled: o.free_threaded.then_some(0),
        last_holder: 8 + shift,
        locked: 16 + shift,
        switch_number: 24 + shift,
        cond: 32 + shift,
        mutex: 80 + shift,
        holder_id: HolderId::NativeThreadId { offset: o.tstate_native_thread_id },
        // names are read on default builds of the versions whose object layout is measured
        objects: debug_objects(o.minor()).filter(|_| !o.free_threaded).map(|x| Objects {
            interp_head: o.interpreters_head,
            interp_modules: o.interp_modules,
            ..x
        }),
    }
}

/// Object layouts of 3.13+ beyond what the debug offsets give (measured with
/// tests/helpers/measure_cpython.py); `None`: thread names are not read.
pub fn debug_objects(minor: u32) -> Option<Objects> {
    match minor {
        // 3.14: the same dicts, inline values and heap types as 3.13 (measured on 3.14.7)
        13 | 14 => Some(objects(13)),
        // 3.15: `ht_cached_keys` 8 bytes later (measured on 3.15.0rc2)
        15 => Some(Objects { ht_cached_keys: 888, ..objects(13) }),
        _ => None,
    }
}

impl Layout {
    /// The futex words a thread waiting for this GIL sleeps on: the condition
    /// variable's two signal words and the GIL mutex. `gil` comes from
    /// `gil_addresses`, which keeps only GILs where `checked_futex_words` is `Some`.
    pub fn futex_words(&self, gil: u64) -> [u64; 5] {
        let c = gil + self.cond;
        let s = GLIBC_COND_SIGNALS;
        [c + s[0], c + s[1], c + s[2], c + s[3], gil + self.mutex + GLIBC_MUTEX_LOCK]
    }

    /// The futex words, or `None` when a GIL address read from the target is
    /// so high that they would wrap (each word is 4 bytes).
    pub fn checked_futex_words(&self, gil: u64) -> Option<[u64; 5]> {
        let c = gil.checked_add(self.cond)?;
        let mut words = [0u64; 5];
        for (w, s) in words.iter_mut().zip(GLIBC_COND_SIGNALS) {
            *w = c.checked_add(s)?;
        }
        words[4] = gil.checked_add(self.mutex + GLIBC_MUTEX_LOCK)?;
        words.iter().all(|w| w.checked_add(4).is_some()).then_some(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_version_has_one_layout() {
        for minor in 8..=12 {
            assert!(layout(minor, false).is_some(), "3.{minor}");
        }
        assert!(layout(7, false).is_none());
        assert!(layout(13, false).is_none()); // read from the interpreter
        assert!(layout(12, true).is_none());
    }

    #[test]
    fn futex_words_match_the_measured_ones() {
        // measured with bpftrace on sys_enter_futex (reference cpython-gil.md §2):
        // waiters sleep on gil+72/76 (glibc 2.36), gil+64/68 with glibc 2.41+
        // (Debian sid, 2.43: gil+68); the mutex is gil+80; free-threaded builds add 8
        let b = 0x1000;
        assert_eq!(layout(11, false).unwrap().futex_words(b), [b + 64, b + 68, b + 72, b + 76, b + 80]);
        assert_eq!(recorded("3.14.7t").futex_words(b), [b + 72, b + 76, b + 80, b + 84, b + 88]);
        assert_eq!(recorded("3.14.7").futex_words(b), [b + 64, b + 68, b + 72, b + 76, b + 80]);
        for l in LAYOUTS {
            assert_eq!(l.checked_futex_words(0x1000), Some(l.futex_words(0x1000)));
            assert_eq!(l.checked_futex_words(u64::MAX - 64), None);
        }
    }

    fn recorded(name: &str) -> Layout {
        let path = format!("{}/formats/testdata/debug_offsets/{name}.bin", crate::manifest_dir());
        from_debug_offsets(&DebugOffsets::parse(&std::fs::read(path).unwrap()).unwrap())
    }

    #[test]
    fn the_313_table_read_from_the_interpreter_is_the_one_measured_by_hand() {
        let l = recorded("3.13.0");
        assert_eq!(l.gil, GilLocation::PerInterpreter { head: 0x278, next: 0x1c60, gil_ptr: 0x10 });
        assert_eq!(l.holder_id, HolderId::NativeThreadId { offset: 0xa0 });
        assert_eq!(l.objects, Some(objects(13)));
        assert_eq!((l.last_holder, l.locked, l.switch_number, l.cond, l.mutex, l.enabled), (8, 16, 24, 32, 80, None));
        let t = recorded("3.14.7t");
        assert_eq!((t.last_holder, t.locked, t.switch_number, t.cond, t.mutex, t.enabled, t.objects), (16, 24, 32, 40, 88, Some(0), None));
    }

    /// The sched probe reads `last_holder`, `locked` and `switch_number` in one read
    /// (bpf/sched.bpf.c, `struct wm_gil_head`) and registers no GIL laid out otherwise.
    #[test]
    fn every_layout_keeps_the_gil_head_in_one_piece() {
        let recorded = ["3.13.0", "3.14.7", "3.14.7t", "3.15.0rc2"].map(recorded);
        for l in LAYOUTS.iter().chain(&recorded) {
            assert_eq!((l.locked, l.switch_number), (l.last_holder + 8, l.last_holder + 16), "3.{} {l:?}", l.minor);
        }
    }

    #[test]
    fn recorded_gil_addresses() {
        // &_PyRuntime + offset, from gdb on the pyenv builds
        let at = |minor| match layout(minor, false).unwrap().gil {
            GilLocation::Runtime { offset } => offset,
            other => panic!("3.{minor}: {other:?}"),
        };
        assert_eq!(at(8), 0x480);
        assert_eq!(at(9), 0x160);
        assert_eq!(at(10), 0x160);
        assert_eq!(at(11), 0x168);
        assert!(matches!(layout(12, false).unwrap().gil, GilLocation::PerInterpreter { gil_ptr: 0x180, .. }));
    }
}
