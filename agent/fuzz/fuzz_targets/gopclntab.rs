//! The Go function table reader on a target's `.gopclntab` (whatever bytes a hostile executable
//! holds there): the first 8 bytes are the address of its code (`.text`), the rest the section.
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::gopclntab::Pclntab;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let text = u64::from_le_bytes(data[..8].try_into().unwrap());
    if let Ok(t) = Pclntab::parse(&data[8..], text) {
        for f in t.functions(4096) {
            assert!(f.start < f.end && !f.name.is_empty());
        }
        if let Ok(u) = t.unwind(4096) {
            assert!(u.rows.len() <= 4096);
            assert!(u.rows.windows(2).all(|w| w[0].pc < w[1].pc && w[0].rule != w[1].rule));
        }
    }
});
