//! The ELF reader on files of any shape: it runs as root on the executables
//! and libraries of the processes it attaches to. Seeds: real interpreters
//! and libpython builds (see `fuzz/run.sh`) and the committed corpus.
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::elf::Elf;

fuzz_target!(|data: &[u8]| {
    if let Ok(elf) = Elf::parse(data) {
        // what finding the CPython runtime does with a file (agent/src/python/binary.rs)
        let runtime = elf.dynamic_symbol("_PyRuntime").map(|s| s.value).or_else(|| elf.section(".PyRuntime").map(|s| s.addr));
        let _ = elf.dynamic_symbol("Py_Version");
        if let Some(rodata) = elf.section(".rodata") {
            let _ = elf.section_data(rodata, 1 << 20);
        }
        for sym in elf.symtab_symbols(|n| n.starts_with("take_gil") || n.starts_with("drop_gil")) {
            let _ = elf.sections.iter().find_map(|s| s.file_offset(sym.value));
        }
        let _ = runtime.map(|r| elf.sections.iter().find_map(|s| s.file_offset(r)));
        let _ = elf.symbol("_PyRuntime");
        let _ = elf.has_symtab();
        // a Go executable's build information (agent/src/runtime.rs)
        if let Some(Ok(info)) = elf.section(".go.buildinfo").map(|s| elf.section_data(s, 4096)) {
            if let Some(Some(v)) = waitmeter_formats::gobuild::version(&info) {
                assert!(v.len() <= 128);
                let _ = waitmeter_formats::gobuild::release(&v);
            }
        }
        // a stripped object's MiniDebugInfo (agent/src/stacks/native.rs): unpacked, parsed, its functions
        if let Some(Ok(mini)) = waitmeter_formats::minidebug::of(&elf) {
            if let Ok(inner) = Elf::parse(mini.as_slice()) {
                let _ = inner.functions(1 << 16);
            }
        }
    }
});
