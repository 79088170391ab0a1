//! The ELF reader on files of any shape: it runs as root on the executables
//! and libraries of the processes it attaches to. Seeds: real interpreters
//! and libpython builds (see `fuzz/run.sh`) and the committed corpus.
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::elf::Elf;

fuzz_target!(|data: &[u8]| {
    if let Ok(elf) = Elf::parse(data) {
        // what finding the CPython runtime does with a file
        let _ = elf.section(".PyRuntime");
        let _ = elf.symbol("_PyRuntime");
        let _ = elf.symbols(|n| n.starts_with("take_gil") || n.starts_with("drop_gil"));
        let _ = elf.has_symtab();
    }
});
