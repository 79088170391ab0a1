//! The call frame information reader on a target's `.eh_frame` (whatever bytes a hostile
//! object holds there): the first 8 bytes are the section's address, the rest its bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::cfi::{parse, Rule};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let addr = u64::from_le_bytes(data[..8].try_into().unwrap());
    if let Ok(t) = parse(&data[8..], addr, 4096) {
        assert!(t.rows.len() <= 4096 + t.fdes);
        assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc && w[0].rule != w[1].rule));
        assert!(t.fp_fdes <= t.fdes);
        let _ = t.rows.first().map(|r| t.rule(r.pc)).unwrap_or(Rule::Stop);
    }
});
