//! The `_Py_DebugOffsets` reader on tables of any shape: they are read from
//! the memory of the processes waitmeter attaches to. Seeds: the tables
//! recorded from real interpreters (`agent/formats/testdata/debug_offsets`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::debug_offsets::DebugOffsets;

fuzz_target!(|data: &[u8]| {
    if let Ok(o) = DebugOffsets::parse(data) {
        // what the agent derives from an accepted table (agent/src/python/layout.rs)
        let _ = (o.minor(), o.free_threaded);
        let _ = o.interp_gil.checked_add(o.interp_gil_locked);
    }
});
