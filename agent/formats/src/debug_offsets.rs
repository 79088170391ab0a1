//! `_Py_DebugOffsets`: the table CPython 3.13+ keeps at the very start of
//! `_PyRuntime` for out-of-process tools ("xdebugpy", `PY_VERSION_HEX`, then
//! the offsets of the runtime, interpreter and thread states, frames, code
//! objects...). waitmeter takes every offset it gives from there, so a patch
//! release that moves a field (3.14.5 moved fields of `PyInterpreterState`)
//! changes nothing here.
//!
//! The table is a flat run of u64 after the 8-byte cookie; which field is
//! where depends on the minor version and is data below (`FIELDS`, with the
//! version that added each), from
//! `Include/internal/pycore_debug_offsets.h` (3.14+) and `pycore_runtime.h`
//! (3.13). What is read comes from the target's memory: every value is
//! checked for plausibility (sizes, offsets within them, the GIL fields where
//! the GIL struct puts them) before it is used.
use anyhow::{bail, ensure, Context, Result};

/// The cookie (`_Py_Debug_Cookie`).
pub const COOKIE: &[u8; 8] = b"xdebugpy";

/// The fields of the table up to those waitmeter reads, in order, each with
/// the minor version that added it: a version's table is the fields added up
/// to it (each release so far only inserted fields). The cookie is not listed:
/// field i of a version's table is at 8 + 8 i.
const FIELDS: &[(&str, u32)] = &[
    ("version", 13),
    ("free_threaded", 13),
    ("runtime_state.size", 13),
    ("runtime_state.finalizing", 13),
    ("runtime_state.interpreters_head", 13),
    ("interpreter_state.size", 13),
    ("interpreter_state.id", 13),
    ("interpreter_state.next", 13),
    ("interpreter_state.threads_head", 13),
    ("interpreter_state.threads_main", 14),
    ("interpreter_state.gc", 13),
    ("interpreter_state.imports_modules", 13),
    ("interpreter_state.sysdict", 13),
    ("interpreter_state.builtins", 13),
    ("interpreter_state.ceval_gil", 13),
    ("interpreter_state.gil_runtime_state", 13),
    ("interpreter_state.gil_runtime_state_enabled", 13),
    ("interpreter_state.gil_runtime_state_locked", 13),
    ("interpreter_state.gil_runtime_state_holder", 13),
    ("interpreter_state.code_object_generation", 14),
    ("interpreter_state.tlbc_generation", 14),
    ("thread_state.size", 13),
    ("thread_state.prev", 13),
    ("thread_state.next", 13),
    ("thread_state.interp", 13),
    ("thread_state.current_frame", 13),
    ("thread_state.base_frame", 15),
    ("thread_state.last_profiled_frame", 15),
    ("thread_state.last_profiled_frame_seq", 15),
    ("thread_state.thread_id", 13),
    ("thread_state.native_thread_id", 13),
    ("thread_state.datastack_chunk", 13),
    ("thread_state.status", 13),
    ("thread_state.holds_gil", 15),
    ("thread_state.gil_requested", 15),
    ("thread_state.current_exception", 15),
    ("thread_state.exc_state", 15),
    ("err_stackitem.exc_value", 15),
    // `_PyInterpreterFrame`; `tlbc_index` is 0 on default builds
    ("interpreter_frame.size", 13),
    ("interpreter_frame.previous", 13),
    ("interpreter_frame.executable", 13),
    ("interpreter_frame.instr_ptr", 13),
    ("interpreter_frame.localsplus", 13),
    ("interpreter_frame.owner", 13),
    ("interpreter_frame.stackpointer", 14),
    ("interpreter_frame.tlbc_index", 14),
    // `PyCodeObject`; `co_tlbc` is 0 on default builds
    ("code_object.size", 13),
    ("code_object.filename", 13),
    ("code_object.name", 13),
    ("code_object.qualname", 13),
    ("code_object.linetable", 13),
    ("code_object.firstlineno", 13),
    ("code_object.argcount", 13),
    ("code_object.localsplusnames", 13),
    ("code_object.localspluskinds", 13),
    ("code_object.co_code_adaptive", 13),
    ("code_object.co_tlbc", 14),
    ("pyobject.size", 13),
    ("pyobject.ob_type", 13),
    ("type_object.size", 13),
    ("type_object.tp_name", 13),
    ("type_object.tp_repr", 13),
    ("type_object.tp_flags", 13),
    ("type_object.tp_basicsize", 15),
    ("type_object.tp_dictoffset", 15),
    ("heap_type_object.size", 15),
    ("heap_type_object.ht_cached_keys", 15),
    ("tuple_object.size", 13),
    ("tuple_object.ob_item", 13),
    ("tuple_object.ob_size", 13),
    ("list_object.size", 13),
    ("list_object.ob_item", 13),
    ("list_object.ob_size", 13),
    ("set_object.size", 14),
    ("set_object.used", 14),
    ("set_object.table", 14),
    ("set_object.mask", 14),
    ("dict_object.size", 13),
    ("dict_object.ma_keys", 13),
    ("dict_object.ma_values", 13),
    ("float_object.size", 13),
    ("float_object.ob_fval", 13),
    ("long_object.size", 13),
    ("long_object.lv_tag", 13),
    ("long_object.ob_digit", 13),
    ("bytes_object.size", 13),
    ("bytes_object.ob_size", 13),
    ("bytes_object.ob_sval", 13),
    ("unicode_object.size", 13),
    ("unicode_object.state", 13),
    ("unicode_object.length", 13),
    ("unicode_object.asciiobject_size", 13),
    ("unicode_object.compactunicodeobject_size", 15),
];

/// The oldest and newest minor versions whose tables are known.
const OLDEST: u32 = 13;
const NEWEST: u32 = 15;

/// Bytes to read at `_PyRuntime` for every table known: the cookie and the
/// longest field list (3.15's, 93 fields through `unicode_object`).
pub const READ_LEN: usize = 8 + 8 * 93;

/// What waitmeter takes from the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugOffsets {
    /// PY_VERSION_HEX
    pub version: u32,
    pub free_threaded: bool,
    /// `_PyRuntime.interpreters.head`
    pub interpreters_head: u64,
    /// in `PyInterpreterState`
    pub interp_next: u64,
    pub interp_threads_head: u64,
    pub interp_modules: u64,
    /// `ceval.gil`: the pointer to the GIL the interpreter uses
    pub interp_ceval_gil: u64,
    /// `_gil`: the interpreter's own GIL struct, and its fields (absolute in the interpreter)
    pub interp_gil: u64,
    pub interp_gil_locked: u64,
    pub interp_gil_holder: u64,
    /// `enabled` within the GIL struct (free-threaded builds; CPython gives
    /// this one relative to the struct, the other GIL fields relative to the interpreter)
    pub interp_gil_enabled: Option<u64>,
    /// in `PyThreadState`
    pub tstate_next: u64,
    pub tstate_native_thread_id: u64,
    /// 3.15+: set while the thread holds the GIL / waits in `take_gil`
    pub tstate_holds_gil: Option<u64>,
    pub tstate_gil_requested: Option<u64>,
    /// `thread_id` (the thread's `pthread_t`) and `current_frame` (its
    /// innermost `_PyInterpreterFrame*`) in `PyThreadState`
    pub tstate_thread_id: u64,
    pub tstate_current_frame: u64,
    /// in `_PyInterpreterFrame`: `previous`, `f_executable` (a `PyObject*`
    /// on 3.13, a tagged `_PyStackRef` on 3.14+), `instr_ptr`, `owner` (a char)
    pub frame_previous: u64,
    pub frame_executable: u64,
    pub frame_instr_ptr: u64,
    pub frame_owner: u64,
    /// `tlbc_index` (an int32): which thread-local copy of the bytecode
    /// `instr_ptr` points into (free-threaded 3.14+; `None` elsewhere)
    pub frame_tlbc_index: Option<u64>,
    /// in `PyCodeObject`: the `str` fields, `co_linetable` (bytes),
    /// `co_firstlineno` (an int), where the bytecode starts
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    pub code_adaptive: u64,
    /// `co_tlbc`: the `_PyCodeArray*` of thread-local bytecode copies
    /// (free-threaded 3.14+; `None` elsewhere)
    pub code_tlbc: Option<u64>,
    /// `ob_type` in every object (8 on default builds, 24 on free-threaded ones)
    pub ob_type: u64,
    /// `ob_size` and `ob_sval` in `PyBytesObject`; `ob_size` is where every
    /// `PyVarObject` (code objects too) keeps its size
    pub bytes_ob_size: u64,
    pub bytes_ob_sval: u64,
    /// in `PyASCIIObject`: `state` (the bit field), `length`; and where the
    /// characters of a compact ASCII `str` start (`sizeof(PyASCIIObject)`)
    pub unicode_state: u64,
    pub unicode_length: u64,
    pub unicode_ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`, where a compact non-ASCII `str`'s
    /// characters start (3.15+ give it; `None` on 3.13-3.14)
    pub unicode_compact_size: Option<u64>,
}

impl DebugOffsets {
    /// Parse the table from the bytes at `_PyRuntime` (at least the cookie,
    /// the version and the fields of that version). A newer minor than the
    /// newest known is read as that one, and accepted only if every check holds.
    pub fn parse(bytes: &[u8]) -> Result<DebugOffsets> {
        ensure!(bytes.len() >= 16, "_Py_DebugOffsets: {} bytes read, the header needs 16", bytes.len());
        ensure!(&bytes[..8] == COOKIE, "_Py_DebugOffsets: no \"xdebugpy\" cookie at the start of _PyRuntime");
        let version = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let (major, minor) = (version >> 24, (version >> 16) & 0xff);
        ensure!(major == 3 && version >> 32 == 0, "_Py_DebugOffsets: version {version:#x} is not CPython 3");
        ensure!(minor as u32 >= OLDEST, "_Py_DebugOffsets: CPython 3.{minor} has no debug offsets (3.13 and later have)");
        // a newer minor is read as the newest known, and kept only if every check holds
        let table = (minor as u32).min(NEWEST);
        let names: Vec<&str> = FIELDS.iter().filter(|f| f.1 <= table).map(|f| f.0).collect();
        let get = |name: &str| -> Result<u64> {
            let i = names.iter().position(|n| *n == name).with_context(|| format!("{name}: not in the 3.{table} table"))?;
            let at = 8 + 8 * i;
            let b = bytes
                .get(at..at + 8)
                .with_context(|| format!("_Py_DebugOffsets: truncated: {} bytes read, {name} is at {at}", bytes.len()))?;
            Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let opt = |name: &str| if names.contains(&name) { get(name).map(Some) } else { Ok(None) };
        let free_threaded = match get("free_threaded")? {
            0 => false,
            1 => true,
            v => bail!("_Py_DebugOffsets: free_threaded is {v}, not 0 or 1"),
        };
        let o = DebugOffsets {
            version: version as u32,
            free_threaded,
            interpreters_head: get("runtime_state.interpreters_head")?,
            interp_next: get("interpreter_state.next")?,
            interp_threads_head: get("interpreter_state.threads_head")?,
            interp_modules: get("interpreter_state.imports_modules")?,
            interp_ceval_gil: get("interpreter_state.ceval_gil")?,
            interp_gil: get("interpreter_state.gil_runtime_state")?,
            interp_gil_locked: get("interpreter_state.gil_runtime_state_locked")?,
            interp_gil_holder: get("interpreter_state.gil_runtime_state_holder")?,
            interp_gil_enabled: if free_threaded { Some(get("interpreter_state.gil_runtime_state_enabled")?) } else { None },
            tstate_next: get("thread_state.next")?,
            tstate_native_thread_id: get("thread_state.native_thread_id")?,
            tstate_holds_gil: opt("thread_state.holds_gil")?,
            tstate_gil_requested: opt("thread_state.gil_requested")?,
            tstate_thread_id: get("thread_state.thread_id")?,
            tstate_current_frame: get("thread_state.current_frame")?,
            frame_previous: get("interpreter_frame.previous")?,
            frame_executable: get("interpreter_frame.executable")?,
            frame_instr_ptr: get("interpreter_frame.instr_ptr")?,
            frame_owner: get("interpreter_frame.owner")?,
            // the thread-local bytecode fields are 0 on default builds
            frame_tlbc_index: if free_threaded { opt("interpreter_frame.tlbc_index")? } else { None },
            code_filename: get("code_object.filename")?,
            code_name: get("code_object.name")?,
            code_qualname: get("code_object.qualname")?,
            code_linetable: get("code_object.linetable")?,
            code_firstlineno: get("code_object.firstlineno")?,
            code_adaptive: get("code_object.co_code_adaptive")?,
            code_tlbc: if free_threaded { opt("code_object.co_tlbc")? } else { None },
            ob_type: get("pyobject.ob_type")?,
            bytes_ob_size: get("bytes_object.ob_size")?,
            bytes_ob_sval: get("bytes_object.ob_sval")?,
            unicode_state: get("unicode_object.state")?,
            unicode_length: get("unicode_object.length")?,
            unicode_ascii_size: get("unicode_object.asciiobject_size")?,
            unicode_compact_size: opt("unicode_object.compactunicodeobject_size")?,
        };
        o.check(get("runtime_state.size")?, get("interpreter_state.size")?, get("thread_state.size")?)?;
        o.check_objects(Sizes {
            frame: get("interpreter_frame.size")?,
            code: get("code_object.size")?,
            object: get("pyobject.size")?,
            bytes: get("bytes_object.size")?,
            unicode: get("unicode_object.size")?,
        })?;
        Ok(o)
    }

    /// Sizes within reason, every offset inside its struct, and the GIL
    /// struct laid out as waitmeter knows it (`locked` 16 bytes after its
    /// start on a default build, 24 on a free-threaded one; `last_holder` 8
    /// before `locked`): else the table is not what this version's field list says.
    fn check(&self, runtime_size: u64, interp_size: u64, tstate_size: u64) -> Result<()> {
        ensure!((64..=64 << 20).contains(&runtime_size), "_Py_DebugOffsets: implausible _PyRuntimeState size {runtime_size}");
        ensure!((64..=64 << 20).contains(&interp_size), "_Py_DebugOffsets: implausible PyInterpreterState size {interp_size}");
        ensure!((64..=1 << 20).contains(&tstate_size), "_Py_DebugOffsets: implausible PyThreadState size {tstate_size}");
        ensure!(self.interpreters_head.saturating_add(8) <= runtime_size, "_Py_DebugOffsets: interpreters.head outside _PyRuntimeState");
        for (name, off, size) in [
            ("next", self.interp_next, interp_size),
            ("threads.head", self.interp_threads_head, interp_size),
            ("imports.modules", self.interp_modules, interp_size),
            ("ceval.gil", self.interp_ceval_gil, interp_size),
            ("_gil.last_holder", self.interp_gil_holder, interp_size),
            ("tstate next", self.tstate_next, tstate_size),
            ("native_thread_id", self.tstate_native_thread_id, tstate_size),
            ("thread_id", self.tstate_thread_id, tstate_size),
            ("current_frame", self.tstate_current_frame, tstate_size),
        ] {
            ensure!(off.saturating_add(8) <= size, "_Py_DebugOffsets: {name} at {off} is outside its struct ({size} bytes)");
        }
        for (name, off) in [("holds_gil", self.tstate_holds_gil), ("gil_requested", self.tstate_gil_requested)] {
            if let Some(off) = off {
                ensure!(off.saturating_add(4) <= tstate_size, "_Py_DebugOffsets: {name} at {off} is outside PyThreadState");
            }
        }
        let want = if self.free_threaded { 24 } else { 16 };
        ensure!(
            self.interp_gil_locked.checked_sub(self.interp_gil) == Some(want),
            "_Py_DebugOffsets: the GIL's `locked` is {:?} bytes into it, not {want}: a GIL struct waitmeter does not know",
            self.interp_gil_locked.checked_sub(self.interp_gil)
        );
        ensure!(
            self.interp_gil_locked.checked_sub(self.interp_gil_holder) == Some(8),
            "_Py_DebugOffsets: the GIL's `last_holder` is not 8 bytes before `locked`"
        );
        if let Some(e) = self.interp_gil_enabled {
            ensure!(e == 0, "_Py_DebugOffsets: the GIL's `enabled` is {e} bytes into it, not its first field");
        }
        Ok(())
    }

    /// The frame, code, object, bytes and str offsets inside the sizes the
    /// table gives for those structs, the sizes within reason, and the
    /// structs shaped as every version so far has them (`ob_type` the last
    /// word of the object header, the bytes' characters after their size,
    /// an ASCII `str`'s characters after its header): a table read with the
    /// wrong field list fails here instead of sending the walker astray.
    fn check_objects(&self, s: Sizes) -> Result<()> {
        ensure!((32..=1024).contains(&s.frame), "_Py_DebugOffsets: implausible _PyInterpreterFrame size {}", s.frame);
        ensure!((64..=4096).contains(&s.code), "_Py_DebugOffsets: implausible PyCodeObject size {}", s.code);
        ensure!((16..=64).contains(&s.object), "_Py_DebugOffsets: implausible PyObject size {}", s.object);
        ensure!((s.object..=256).contains(&s.bytes), "_Py_DebugOffsets: implausible PyBytesObject size {}", s.bytes);
        ensure!((s.object..=256).contains(&s.unicode), "_Py_DebugOffsets: implausible PyUnicodeObject size {}", s.unicode);
        let tlbc = [("tlbc_index", self.frame_tlbc_index, 4, s.frame), ("co_tlbc", self.code_tlbc, 8, s.code)];
        for (name, off, len, size) in [
            ("frame previous", Some(self.frame_previous), 8, s.frame),
            ("f_executable", Some(self.frame_executable), 8, s.frame),
            ("instr_ptr", Some(self.frame_instr_ptr), 8, s.frame),
            ("owner", Some(self.frame_owner), 1, s.frame),
            ("co_filename", Some(self.code_filename), 8, s.code),
            ("co_name", Some(self.code_name), 8, s.code),
            ("co_qualname", Some(self.code_qualname), 8, s.code),
            ("co_linetable", Some(self.code_linetable), 8, s.code),
            ("co_firstlineno", Some(self.code_firstlineno), 4, s.code),
            // the bytecode is the code object's trailing array: at least one code unit is in its size
            ("co_code_adaptive", Some(self.code_adaptive), 2, s.code),
            ("bytes ob_sval", Some(self.bytes_ob_sval), 1, s.bytes),
            ("str length", Some(self.unicode_length), 8, s.unicode),
            ("str state", Some(self.unicode_state), 4, s.unicode),
        ]
        .into_iter()
        .chain(tlbc)
        {
            if let Some(off) = off {
                ensure!(off.saturating_add(len) <= size, "_Py_DebugOffsets: {name} at {off} is outside its struct ({size} bytes)");
            }
        }
        ensure!(
            self.ob_type.checked_add(8) == Some(s.object),
            "_Py_DebugOffsets: ob_type at {} is not the last word of a {}-byte object header",
            self.ob_type,
            s.object
        );
        ensure!(
            self.bytes_ob_size == s.object && self.bytes_ob_sval >= s.object.saturating_add(8),
            "_Py_DebugOffsets: the bytes' ob_size at {} and ob_sval at {} do not follow a {}-byte object header",
            self.bytes_ob_size,
            self.bytes_ob_sval,
            s.object
        );
        let compact = self.unicode_compact_size.unwrap_or(self.unicode_ascii_size);
        ensure!(
            self.unicode_length >= s.object
                && self.unicode_state.saturating_add(4) <= self.unicode_ascii_size
                && self.unicode_ascii_size <= compact
                && compact <= s.unicode,
            "_Py_DebugOffsets: a str laid out as length {}, state {}, header {}, compact header {compact} in {} bytes",
            self.unicode_length,
            self.unicode_state,
            self.unicode_ascii_size,
            s.unicode
        );
        Ok(())
    }

    /// The minor version (14 for 3.14.7).
    pub fn minor(&self) -> u32 {
        (self.version >> 16) & 0xff
    }
}

/// The sizes of the structs whose offsets `check_objects` checks.
struct Sizes {
    frame: u64,
    code: u64,
    object: u64,
    bytes: u64,
    unicode: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first READ_LEN bytes of `_PyRuntime`, recorded from a running interpreter.
    fn recorded(name: &str) -> Vec<u8> {
        let path = format!("{}/testdata/debug_offsets/{name}.bin", crate::manifest_dir());
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn every_recorded_interpreter_parses_with_its_gil_where_the_struct_puts_it() {
        for (name, minor, ft, gil_requested) in
            [("3.13.0", 13, false, false), ("3.14.7", 14, false, false), ("3.14.7t", 14, true, false), ("3.15.0rc2", 15, false, true)]
        {
            let o = DebugOffsets::parse(&recorded(name)).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert_eq!((o.minor(), o.free_threaded), (minor, ft), "{name}");
            assert_eq!(o.interp_gil_locked - o.interp_gil, if ft { 24 } else { 16 }, "{name}");
            assert_eq!(o.tstate_gil_requested.is_some(), gil_requested, "{name}");
            assert_eq!(o.interp_gil_enabled.is_some(), ft, "{name}");
        }
    }

    #[test]
    fn recorded_313_agrees_with_the_measured_table() {
        // the hand-measured 3.13.0 layout (reference cpython-gil.md): head 0x278, next 0x1c60, gil_ptr 0x10, native_thread_id 0xa0
        let o = DebugOffsets::parse(&recorded("3.13.0")).unwrap();
        assert_eq!((o.interpreters_head, o.interp_next, o.interp_ceval_gil, o.tstate_native_thread_id), (0x278, 0x1c60, 0x10, 0xa0));
        assert_eq!(o.interp_modules, 7656);
    }

    #[test]
    fn corrupted_or_truncated_tables_are_refused_with_the_reason() {
        let good = recorded("3.14.7");
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(format!("{:#}", DebugOffsets::parse(&bad).unwrap_err()).contains("cookie"));
        for len in [0, 8, 15, 16, 100, 8 + 8 * 20] {
            let e = DebugOffsets::parse(&good[..len]).unwrap_err();
            let text = format!("{e:#}");
            assert!(text.contains("truncated") || text.contains("header"), "{len}: {text}");
        }
        // a table shifted by one field (an unknown field inserted): the GIL check catches it
        let mut shifted = good.clone();
        shifted.splice(8 * 12..8 * 12, [0u8; 8]);
        assert!(DebugOffsets::parse(&shifted).is_err());
        // free_threaded neither 0 nor 1
        let mut ft = good.clone();
        ft[16] = 7;
        assert!(format!("{:#}", DebugOffsets::parse(&ft).unwrap_err()).contains("free_threaded"));
        // 3.12 has no table
        let mut old = good.clone();
        old[8..16].copy_from_slice(&0x030c01f0u64.to_le_bytes());
        assert!(format!("{:#}", DebugOffsets::parse(&old).unwrap_err()).contains("no debug offsets"));
    }

    /// Where a field of a version's table is in its bytes.
    fn at(minor: u32, name: &str) -> usize {
        8 + 8 * FIELDS.iter().filter(|f| f.1 <= minor).position(|f| f.0 == name).unwrap_or_else(|| panic!("{name}"))
    }

    #[test]
    fn the_frame_code_and_object_fields_are_read_where_each_version_puts_them() {
        // 3.13: the frame follows the 9 thread-state fields; 3.14 adds threads_main and two
        // generations before them; 3.15 7 thread-state fields and err_stackitem
        assert_eq!((at(13, "interpreter_frame.size"), at(14, "interpreter_frame.size"), at(15, "interpreter_frame.size")), (224, 248, 312));
        assert_eq!(at(15, "unicode_object.compactunicodeobject_size") + 8, READ_LEN, "READ_LEN ends with 3.15's table");
        for (name, minor, ft) in [("3.13.0", 13, false), ("3.14.7", 14, false), ("3.14.7t", 14, true), ("3.15.0rc2", 15, false)] {
            let o = DebugOffsets::parse(&recorded(name)).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert_eq!((o.frame_tlbc_index.is_some(), o.code_tlbc.is_some()), (ft, ft), "{name}: thread-local bytecode");
            assert_eq!(o.unicode_compact_size.is_some(), minor >= 15, "{name}");
            // the object header: 16 bytes, 32 on free-threaded builds
            assert_eq!((o.ob_type, o.bytes_ob_size), if ft { (24, 32) } else { (8, 16) }, "{name}");
            assert_eq!((o.frame_previous, o.frame_executable, o.frame_instr_ptr), (8, 0, 56), "{name}");
        }
    }

    #[test]
    fn frame_and_object_offsets_outside_their_structs_are_refused() {
        for (field, what) in [
            ("interpreter_frame.size", "_PyInterpreterFrame size"),
            ("interpreter_frame.owner", "owner"),
            ("interpreter_frame.instr_ptr", "instr_ptr"),
            ("code_object.co_code_adaptive", "co_code_adaptive"),
            ("code_object.firstlineno", "co_firstlineno"),
            ("pyobject.ob_type", "ob_type"),
            ("bytes_object.ob_sval", "ob_sval"),
            ("unicode_object.state", "str"),
        ] {
            let mut b = recorded("3.14.7");
            let i = at(14, field);
            b[i..i + 8].copy_from_slice(&100_000u64.to_le_bytes());
            let e = format!("{:#}", DebugOffsets::parse(&b).unwrap_err());
            assert!(e.contains(what), "{field}: {e}");
        }
        // thread-local bytecode fields are checked on free-threaded builds (ignored, 0, on default ones)
        let mut b = recorded("3.14.7t");
        let i = at(14, "code_object.co_tlbc");
        b[i..i + 8].copy_from_slice(&4096u64.to_le_bytes());
        assert!(format!("{:#}", DebugOffsets::parse(&b).unwrap_err()).contains("co_tlbc"));
        // 3.15's table read with 3.14's field list: its GIL and thread fields still look
        // plausible, the sizes and offsets of its frames and objects do not
        let mut b = recorded("3.15.0rc2");
        b[8..16].copy_from_slice(&0x030e07f0u64.to_le_bytes());
        let e = format!("{:#}", DebugOffsets::parse(&b).unwrap_err());
        assert!(e.contains("implausible") || e.contains("outside"), "{e}");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let good = recorded("3.15.0rc2");
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for round in 0..20_000 {
            let mut b = good.clone();
            for _ in 0..1 + round % 8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % b.len();
                b[i] = (x >> 32) as u8;
            }
            b.truncate((x as usize >> 8) % (b.len() + 1));
            let _ = DebugOffsets::parse(&b);
        }
    }
}
