//! The demangler on symbol names of the target's files (its ELF symbol tables:
//! whatever bytes a hostile file names its functions with).
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::demangle::{demangle, MAX_OUTPUT};

fuzz_target!(|data: &[u8]| {
    let name = String::from_utf8_lossy(data);
    // as a mangled name, and as one led by the prefixes that make it parsed
    for n in [name.to_string(), format!("_Z{name}"), format!("_ZN{name}"), format!("_R{name}")] {
        if let Some(d) = demangle(&n) {
            assert!(d.len() <= MAX_OUTPUT);
        }
    }
});
