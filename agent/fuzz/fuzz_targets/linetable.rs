//! The line-table decoders (`line_for`) on tables of any shape: they are read
//! from the memory of the processes waitmeter attaches to. The input is
//! `firstlineno` (4 bytes LE), `instr` (4 bytes LE), then the table, decoded
//! as every version's format; also instructions across all the table can cover.
//! Seeds: the tables recorded from real interpreters
//! (`agent/formats/testdata/linetables`, unpacked by run.sh).
#![no_main]
use libfuzzer_sys::fuzz_target;
use waitmeter_formats::pyframe::line_for;

fuzz_target!(|data: &[u8]| {
    let Some((head, table)) = data.split_first_chunk::<8>() else { return };
    let firstlineno = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let instr = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    for minor in 7..=16 {
        let _ = line_for(minor, table, firstlineno, instr);
        // ~64 points across all a table can cover (a 3.8 lnotab pair: 255 bytes)
        let reach = u32::try_from(table.len()).unwrap_or(u32::MAX).saturating_mul(128).saturating_add(2);
        for i in (0..reach).step_by(table.len().saturating_mul(2).max(1)) {
            let _ = line_for(minor, table, firstlineno, i);
        }
    }
});
