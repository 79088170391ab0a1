//! The VMStructs reader on a JVM's memory (whatever a hostile process holds there): the input
//! is the memory, mapped at 0x10000; its first 11 words are the globals' addresses, the next one
//! a Method* to name, the next an address of compiled code to look up in the code cache.
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::hotspot::{code_blob, interpreter, layout, method_name, Blob, Globals, Memory, MAX_SYMBOL};

struct Image<'a>(&'a [u8]);

const BASE: u64 = 0x10000;

impl Memory for Image<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(off) = addr.checked_sub(BASE).and_then(|o| usize::try_from(o).ok()) else { return false };
        match off.checked_add(buf.len()).and_then(|end| self.0.get(off..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 104 {
        return;
    }
    let word = |i: usize| u64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
    let mut a = [0u64; 11];
    for (i, slot) in a.iter_mut().enumerate() {
        *slot = word(i);
    }
    let mem = Image(data);
    if let Ok(l) = layout(&mem, &Globals::from_addresses(a)) {
        if let Some((s, e)) = interpreter(&mem, &l) {
            assert!(s < e);
        }
        if let Some(n) = method_name(&mem, &l, word(11)) {
            assert!(n.len() <= 2 * MAX_SYMBOL + 1);
        }
        if let Some(Blob::Methods(m)) = code_blob(&mem, &l, word(12)) {
            assert!(!m.is_empty() && m.len() <= 33);
        }
    }
});
