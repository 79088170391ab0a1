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
];

/// The oldest and newest minor versions whose tables are known.
const OLDEST: u32 = 13;
const NEWEST: u32 = 15;

/// Bytes to read at `_PyRuntime` for every table known.
pub const READ_LEN: usize = 8 + 8 * 40;

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
        };
        o.check(get("runtime_state.size")?, get("interpreter_state.size")?, get("thread_state.size")?)?;
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

    /// The minor version (14 for 3.14.7).
    pub fn minor(&self) -> u32 {
        (self.version >> 16) & 0xff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first READ_LEN bytes of `_PyRuntime`, recorded from a running interpreter.
    fn recorded(name: &str) -> Vec<u8> {
        let path = format!("{}/testdata/debug_offsets/{name}.bin", env!("CARGO_MANIFEST_DIR"));
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
