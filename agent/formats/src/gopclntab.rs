//! The Go runtime's own table of its functions (`.gopclntab`): each function's address range and
//! name, and how far its stack pointer is from the return address at each of its instructions
//! (the "pcsp" table the Go runtime unwinds its own stacks by, in `runtime.gentraceback`).
//!
//! Go code keeps frame pointers, but its assembly does not have to: a leaf declared without a
//! frame (`crypto/sha256`'s `blockSHANI`, `runtime.memmove`) may use `rbp` as a register, and a
//! frame-pointer walk that starts there ends at once. The pcsp table says each function's frame
//! size at every instruction, so a walk by it steps out of any Go function (the OpenTelemetry
//! profiler unwinds Go the same way). The table is read even from a stripped executable (`-ldflags
//! "-s -w"`, as container images ship them): it is the runtime's, so it is always there, and its
//! names name the functions that `.symtab` no longer does.
//!
//! Format (the Go source's `runtime/symtab.go`, `cmd/link/internal/ld/pcln.go`): a header (magic,
//! the instruction size quantum, the pointer size, the function count and the offsets of the
//! name, pc-value and function tables), then a function table of (entry, offset of its `_func`)
//! pairs, one more than there are functions (the last is the end of the code). Read: Go 1.16 and
//! 1.17 (magic 0xfffffffa: absolute entries) and Go 1.18 on (0xfffffff0, 0xfffffff1 from 1.20:
//! entries relative to the start of the code); older layouts are an error. The bytes are the
//! target's (hostile): every read is bounded, every sum checked, and what is made is bounded by
//! the caller's limits.
use anyhow::{bail, Context, Result};

use crate::cfi::{Cfa, Row, Rule, Table};

/// The section's name in an executable, and in a position-independent one.
pub const SECTIONS: [&str; 2] = [".gopclntab", ".data.rel.ro.gopclntab"];

const MAGIC_116: u32 = 0xffff_fffa;
const MAGIC_118: u32 = 0xffff_fff0;
const MAGIC_120: u32 = 0xffff_fff1;

/// A function's name longer than this is cut (Go's longest generic instantiations run to a few
/// hundred bytes).
const MAX_NAME: usize = 1024;
/// Steps of one function's pcsp table read at most (a function has one per change of its frame).
const MAX_STEPS: usize = 1 << 16;

/// A function of the table: its code's link-time range, and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Func {
    pub start: u64,
    pub end: u64,
    pub name: String,
}

/// A parsed header and where its tables lie in the section.
#[derive(Clone, Debug)]
pub struct Pclntab<'a> {
    data: &'a [u8],
    /// Go 1.18 and on: entries relative to `text`, 4-byte function table entries
    relative: bool,
    quantum: u64,
    ptr: usize,
    nfunc: usize,
    text: u64,
    names: usize,
    pctab: usize,
    functab: usize,
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn word_at(d: &[u8], at: usize, ptr: usize) -> Option<u64> {
    match ptr {
        8 => Some(u64::from_le_bytes(d.get(at..at.checked_add(8)?)?.try_into().ok()?)),
        _ => u32_at(d, at).map(u64::from),
    }
}

/// An unsigned varint (encoding/binary's `Uvarint`, as the runtime's `readvarint` reads a u32):
/// its value and the bytes it took.
fn uvarint(d: &[u8], at: usize) -> Option<(u32, usize)> {
    let mut v: u32 = 0;
    for i in 0..5 {
        let b = *d.get(at.checked_add(i)?)?;
        v |= u32::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

impl<'a> Pclntab<'a> {
    /// The table whose bytes are `data`; `text` is the link-time address of the executable's
    /// code (`.text`), where a Go 1.18+ table's entries begin when its header's own is not
    /// filled in the file (a position-independent executable has it relocated at load).
    pub fn parse(data: &'a [u8], text: u64) -> Result<Pclntab<'a>> {
        let magic = u32_at(data, 0).context("no header")?;
        let (quantum, ptr) = (u64::from(*data.get(6).context("no header")?), usize::from(*data.get(7).context("no header")?));
        if data.get(4..6) != Some(&[0, 0]) || !matches!(quantum, 1 | 2 | 4) || !matches!(ptr, 4 | 8) {
            bail!("not a Go function table (its header's padding, quantum or pointer size)");
        }
        let word = |i: usize| word_at(data, 8 + i * ptr, ptr).context("header cut short");
        let (relative, text, first) = match magic {
            MAGIC_118 | MAGIC_120 => {
                let own = word(2)?;
                (true, if own != 0 { own } else { text }, 3)
            }
            MAGIC_116 => (false, 0, 2),
            m => bail!("a Go function table of a layout not read (magic {m:#x}: before Go 1.16)"),
        };
        let off = |i: usize| -> Result<usize> {
            let v = usize::try_from(word(first + i)?).context("offset")?;
            if v > data.len() {
                bail!("a table past the section");
            }
            Ok(v)
        };
        let nfunc = usize::try_from(word(0)?).context("function count")?;
        let (names, pctab, functab) = (off(0)?, off(3)?, off(4)?);
        let entry = if relative { 8 } else { 2 * ptr };
        // the table holds its count of entries, and one more
        if nfunc.checked_add(1).and_then(|n| n.checked_mul(entry)).and_then(|n| n.checked_add(functab)).is_none_or(|end| end > data.len()) {
            bail!("{nfunc} functions do not fit in the section");
        }
        Ok(Pclntab { data, relative, quantum, ptr, nfunc, text, names, pctab, functab })
    }

    /// How many functions the table says it holds.
    pub fn len(&self) -> usize {
        self.nfunc
    }

    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// Entry `i` of the function table: (the function's link-time entry, its `_func`'s offset).
    fn entry(&self, i: usize) -> Option<(u64, usize)> {
        if self.relative {
            let at = self.functab.checked_add(i.checked_mul(8)?)?;
            let pc = self.text.checked_add(u64::from(u32_at(self.data, at)?))?;
            Some((pc, u32_at(self.data, at + 4)? as usize))
        } else {
            let at = self.functab.checked_add(i.checked_mul(2 * self.ptr)?)?;
            Some((word_at(self.data, at, self.ptr)?, usize::try_from(word_at(self.data, at + self.ptr, self.ptr)?).ok()?))
        }
    }

    /// Function `i`'s `_func`: (its name's offset, its pcsp table's offset).
    fn func(&self, off: usize) -> Option<(u32, u32)> {
        let at = self.functab.checked_add(off)?;
        let base = if self.relative { 4 } else { self.ptr };
        // after the entry: the name's offset, the arguments' size, deferreturn, then pcsp
        Some((u32_at(self.data, at.checked_add(base)?)?, u32_at(self.data, at.checked_add(base + 12)?)?))
    }

    fn name(&self, off: u32) -> Option<String> {
        let start = self.names.checked_add(off as usize)?;
        let rest = self.data.get(start..)?;
        let end = rest.iter().take(MAX_NAME).position(|b| *b == 0).unwrap_or(rest.len().min(MAX_NAME));
        let name = String::from_utf8_lossy(&rest[..end]).into_owned();
        (!name.is_empty()).then_some(name)
    }

    /// The functions, in the table's order (by address), at most `max`; one whose entry or name
    /// cannot be read is left out.
    pub fn functions(&self, max: usize) -> Vec<Func> {
        let mut out = vec![];
        for i in 0..self.nfunc.min(max) {
            let (Some((start, off)), Some((end, _))) = (self.entry(i), self.entry(i + 1)) else { continue };
            let Some(name) = self.func(off).and_then(|(name, _)| self.name(name)) else { continue };
            if end > start {
                out.push(Func { start, end, name });
            }
        }
        out
    }

    /// The unwind table of the functions' code: at each instruction the CFA is the stack pointer
    /// plus the frame's size there plus 8 (the return address is at CFA - 8; Go does not say
    /// where it saved `rbp`, which a walk by these rows does not need); a `Stop` where no
    /// function is. At most `max_rows` rows (more is an error).
    pub fn unwind(&self, max_rows: usize) -> Result<Table> {
        let mut rows: Vec<Row> = vec![];
        let mut funcs = 0usize;
        let push = |rows: &mut Vec<Row>, pc: u64, rule: Rule| {
            // a later row at the same address (the next function's entry) wins
            if rows.last().is_some_and(|r| r.pc == pc) {
                rows.pop();
            }
            if rows.last().is_none_or(|r| r.rule != rule) {
                rows.push(Row { pc, rule });
            }
        };
        for i in 0..self.nfunc {
            let (Some((start, off)), Some((end, _))) = (self.entry(i), self.entry(i + 1)) else { continue };
            if end <= start || rows.last().is_some_and(|r| r.pc > start) {
                continue; // out of order: not a function this table can place
            }
            let Some((_, pcsp)) = self.func(off) else { continue };
            funcs += 1;
            let mut steps: Vec<(u64, i32)> = vec![];
            if pcsp != 0 && self.steps(pcsp as usize, start, end, &mut steps).is_some() {
                for (pc, sp) in steps {
                    let rule = if sp >= 0 { Rule::Step { cfa: Cfa::Sp(sp.saturating_add(8)), fp_at: None } } else { Rule::Stop };
                    push(&mut rows, pc, rule);
                }
            } else {
                push(&mut rows, start, Rule::Stop);
            }
            push(&mut rows, end, Rule::Stop);
            if rows.len() > max_rows {
                bail!("more than {max_rows} unwind rows");
            }
        }
        Ok(Table { rows, fdes: funcs, fp_fdes: 0 })
    }

    /// The pcsp table at `off` of the function in [start, end): each (address, frame size) from
    /// which that size holds, into `out`. None when it runs off its bytes or out of the function.
    fn steps(&self, off: usize, start: u64, end: u64, out: &mut Vec<(u64, i32)>) -> Option<()> {
        let mut at = self.pctab.checked_add(off)?;
        let (mut pc, mut val) = (start, -1i32);
        for i in 0..MAX_STEPS {
            let (uv, n) = uvarint(self.data, at)?;
            if uv == 0 && i > 0 {
                return Some(());
            }
            at = at.checked_add(n)?;
            val = val.checked_add(-((uv & 1) as i32) ^ (uv >> 1) as i32)?;
            let (pcd, n) = uvarint(self.data, at)?;
            at = at.checked_add(n)?;
            let next = pc.checked_add(u64::from(pcd).checked_mul(self.quantum)?)?;
            if next > end {
                return None;
            }
            if next > pc {
                out.push((pc, val));
            }
            pc = next;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.20+ table of two functions at 0x1000 (a frame of 0x18 after one 4-byte
    /// instruction) and 0x1040 (frameless), written as the linker writes one.
    fn table() -> Vec<u8> {
        let mut d = vec![];
        d.extend(MAGIC_120.to_le_bytes());
        d.extend([0, 0, 1, 8]);
        // nfunc, nfiles, textStart, funcname, cu, filetab, pctab, pcln
        let header = 8 + 8 * 8;
        let names = header;
        let name_bytes = b"main.work\0crypto/sha256.blockSHANI\0";
        let pctab = names + name_bytes.len();
        // pcsp of main.work: val -1 -> 0 for 4 bytes, -> 0x18 for 0x3c bytes; end
        // zigzag(+1) = 2, zigzag(+0x18) = 0x30
        let work_sp = [2u8, 4, 0x30, 0x3c, 0];
        // blockSHANI: 0 for 0x20 bytes
        let leaf_sp = [2u8, 0x20, 0];
        let pcln = pctab + 1 + work_sp.len() + leaf_sp.len();
        for v in [2u64, 0, 0 /* textStart: from the caller */, names as u64, 0, 0, pctab as u64, pcln as u64] {
            d.extend(v.to_le_bytes());
        }
        d.extend(name_bytes);
        d.push(0); // pcsp offset 0 is "none"
        d.extend(work_sp);
        d.extend(leaf_sp);
        assert_eq!(d.len(), pcln);
        // the function table: (entryoff, funcoff) × 3, then the two _funcs
        let func0 = 3 * 8;
        let func1 = func0 + 40;
        for (e, f) in [(0u32, func0 as u32), (0x40, func1 as u32), (0x60, 0)] {
            d.extend(e.to_le_bytes());
            d.extend(f.to_le_bytes());
        }
        for (entry, name, pcsp) in [(0u32, 0u32, 1u32), (0x40, 10, 1 + work_sp.len() as u32)] {
            let mut f = vec![0u8; 40];
            f[0..4].copy_from_slice(&entry.to_le_bytes());
            f[4..8].copy_from_slice(&name.to_le_bytes());
            f[16..20].copy_from_slice(&pcsp.to_le_bytes());
            d.extend(f);
        }
        d
    }

    #[test]
    fn functions_and_their_frames_are_read() {
        let d = table();
        let t = Pclntab::parse(&d, 0x40_1000).unwrap();
        assert_eq!(
            t.functions(10),
            [
                Func { start: 0x40_1000, end: 0x40_1040, name: "main.work".into() },
                Func { start: 0x40_1040, end: 0x40_1060, name: "crypto/sha256.blockSHANI".into() },
            ]
        );
        let u = t.unwind(100).unwrap();
        let sp = |n| Rule::Step { cfa: Cfa::Sp(n), fp_at: None };
        assert_eq!(
            u.rows,
            [
                Row { pc: 0x40_1000, rule: sp(8) },
                Row { pc: 0x40_1004, rule: sp(0x20) },
                Row { pc: 0x40_1040, rule: sp(8) },
                Row { pc: 0x40_1060, rule: Rule::Stop },
            ]
        );
        assert_eq!(u.rule(0x40_1050), sp(8), "a frameless leaf: the return address is at the stack pointer");
        assert!(t.unwind(2).is_err(), "a bound on rows");
    }

    #[test]
    fn bounds_and_garbage_are_errors_never_panics() {
        let d = table();
        for cut in 0..d.len() {
            if let Ok(t) = Pclntab::parse(&d[..cut], 0x1000) {
                let _ = t.functions(10);
                let _ = t.unwind(100);
            }
        }
        let mut old = d.clone();
        old[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
        assert!(Pclntab::parse(&old, 0).unwrap_err().to_string().contains("before Go 1.16"));
        let mut huge = d.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Pclntab::parse(&huge, 0).is_err());
    }

    /// The Go toolchain of this machine (`make setup` needs one, to build helm): a real
    /// executable's table names its functions and unwinds every one of them.
    #[test]
    fn a_go_executable_of_this_machine() {
        let go = crate::testing::go_toolchain();
        let bytes = std::fs::read(go).unwrap();
        let elf = crate::elf::Elf::parse(bytes.as_slice()).unwrap();
        let sec = elf.section(".gopclntab").expect("a Go executable has its function table").clone();
        let text = elf.section(".text").unwrap().addr;
        let data = elf.section_data(&sec, 64 << 20).unwrap();
        let t = Pclntab::parse(&data, text).unwrap();
        let funcs = t.functions(usize::MAX);
        assert!(funcs.len() > 1000 && funcs.iter().any(|f| f.name == "main.main"), "{}", funcs.len());
        let u = t.unwind(1 << 22).unwrap();
        eprintln!("{} functions, {} rows", funcs.len(), u.rows.len());
        assert!(u.fdes >= funcs.len() && u.rows.windows(2).all(|w| w[0].pc < w[1].pc && w[0].rule != w[1].rule));
        let main = funcs.iter().find(|f| f.name == "main.main").unwrap();
        assert!(matches!(u.rule(main.start), Rule::Step { cfa: Cfa::Sp(8), .. }), "at entry the return address is at the stack pointer");
    }
}
