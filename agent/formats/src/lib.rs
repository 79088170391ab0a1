//! Parsers of input waitmeter does not control, kept apart from the agent so
//! that they can be fuzzed on their own (`agent/fuzz/`): the ELF files of the
//! processes it attaches to (it runs as root), the `_Py_DebugOffsets` table it
//! reads from their memory, the Python line tables it symbolises their stacks
//! with (and the frame layouts it walks them by), the Prometheus expositions of
//! the applications whose age it reads, the perf maps their JITs write, the call frame information of their objects (`.eh_frame`), a JVM's description of its own structures (VMStructs, read from its memory), the C++ and Rust symbol names of their files and the symbol tables packed in them (MiniDebugInfo), the Go toolchain's build information and the Go runtime's function table (`.gopclntab`) in a Go executable, and the HTTP request heads its
//! endpoint receives. Every read is bounds-checked, every offset sum checked;
//! bad input is an error value, never a panic, and nothing here allocates
//! more than a small multiple of its input.
//!
//! The encoders of the profiles waitmeter sends (pprof, Pyroscope's push
//! request) live here too: their input (function, file and thread names) is
//! the target processes', and they bound what it can make them allocate.
#![forbid(unsafe_code)]

pub mod cfi;
pub mod debug_offsets;
pub mod demangle;
pub mod elf;
pub mod exposition;
pub mod gobuild;
pub mod gopclntab;
pub mod hotspot;
pub mod http;
pub mod minidebug;
pub mod perfmap;
pub mod pprof;
pub mod pyframe;
pub mod pyroscope;
#[doc(hidden)]
pub mod testing;

/// The crate's directory, for its tests' recorded data: as `cargo test` says at run time (a test
/// binary built in another checkout, sharing the target directory, is not rebuilt for this one),
/// else as it was when built.
#[cfg(test)]
pub(crate) fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string())
}
