//! The perf-map parser on the maps a JIT writes in the target's /tmp (its
//! process writes them; a hostile one writes what it likes).
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::perfmap::PerfMap;

fuzz_target!(|data: &[u8]| {
    // in two reads, as the agent reads a map that grows
    let mut m = PerfMap::default();
    let cut = data.len() / 2;
    let used = m.add(&data[..cut], 64);
    m.add(&data[used..], 64);
    assert!(m.len() <= 65);
    for addr in [0u64, 1, 0x1000, 0x7f00_0000_0000, u64::MAX] {
        if let Some(n) = m.name(addr) {
            assert!(n.len() <= waitmeter_formats::perfmap::MAX_NAME);
        }
    }
});
