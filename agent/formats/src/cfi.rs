//! Call frame information (`.eh_frame`) of x86-64 objects, as a table of unwind rows: for each
//! address range, where the caller's frame is (the CFA, as the stack pointer or the frame pointer
//! plus an offset), and where this function saved the caller's frame pointer (`rbp`). The return
//! address is at CFA - 8 on x86-64, always.
//!
//! It is how a walker steps through code built without frame pointers (Debian's and most
//! distributions' C library, libstdc++, a stripped `python3`), as the OpenTelemetry profiler
//! and perf's DWARF mode do. The agent turns an object's table into BPF rows (`agent/src/stacks/
//! unwind.rs`); this module only reads the bytes, which are the target's (hostile).
//!
//! Format: the LSB's "Exception Frames" and DWARF 4 §6.4. Read: CIEs and FDEs (32- and 64-bit
//! lengths), the `z`, `R`, `P`, `L`, `S` augmentations, pointer encodings absolute and
//! pc-relative (what x86-64 toolchains write), every call frame instruction. A rule this table
//! cannot express (a CFA by expression, as PLT entries have; a register other than rsp or rbp;
//! an undefined return address, as `_start` and a thread's first frame say) is a `Stop` row:
//! the walk ends there rather than guess. Bounded: rows, instructions, the remember stack.
use anyhow::{bail, Context, Result};

/// DWARF register numbers on x86-64.
const RBP: u64 = 6;
const RSP: u64 = 7;
const RA: u64 = 16;

/// `DW_CFA_remember_state` depth kept (compilers use one or two).
const MAX_REMEMBERED: usize = 16;

/// Where the caller's frame begins (the CFA): a register plus an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cfa {
    /// rsp + offset
    Sp(i32),
    /// rbp + offset
    Fp(i32),
}

/// How to step out of the code at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The caller is not found from here (no FDE, or a rule this table does not express).
    Stop,
    /// The CFA; the return address is at CFA - 8; `fp_at`: the caller's rbp is at CFA +
    /// this (None: rbp still holds it).
    Step { cfa: Cfa, fp_at: Option<i32> },
}

/// A rule from `pc` (a link-time address) to the next row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub pc: u64,
    pub rule: Rule,
}

/// An object's unwind table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// sorted by pc, one per pc, adjacent rows differ
    pub rows: Vec<Row>,
    /// functions described
    pub fdes: usize,
    /// of them, those whose CFA is the frame pointer somewhere (they keep frame pointers)
    pub fp_fdes: usize,
}

impl Table {
    /// Whether most of the object's functions keep a frame pointer: a frame-pointer walk
    /// through it works without the table.
    pub fn keeps_frame_pointers(&self) -> bool {
        self.fdes > 0 && self.fp_fdes * 2 >= self.fdes
    }

    /// The rule at link-time address `pc`.
    pub fn rule(&self, pc: u64) -> Rule {
        match self.rows.partition_point(|r| r.pc <= pc).checked_sub(1) {
            Some(i) => self.rows[i].rule,
            None => Rule::Stop,
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.data.len()).context("truncated")?;
        let b = &self.data[self.pos..end];
        self.pos = end;
        Ok(b)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into()?))
    }
    fn uleb(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!("LEB128 number too long")
    }
    fn sleb(&mut self) -> Result<i64> {
        let mut v = 0i64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift >= 64 {
                bail!("LEB128 number too long");
            }
            v |= i64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Ok(v);
            }
        }
    }
    fn cstr(&mut self) -> Result<&'a [u8]> {
        let rest = &self.data[self.pos..];
        let n = rest.iter().position(|b| *b == 0).context("unterminated string")?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }
    /// A pointer in encoding `enc` (DW_EH_PE_*); `base` is the section's address.
    fn pointer(&mut self, enc: u8, base: u64) -> Result<u64> {
        if enc == 0xff {
            bail!("omitted pointer");
        }
        let here = base.wrapping_add(self.pos as u64);
        let v = match enc & 0x0f {
            0x00 => self.u64()?,
            0x01 => self.uleb()?,
            0x02 => u64::from(self.u16()?),
            0x03 => u64::from(self.u32()?),
            0x04 => self.u64()?,
            0x09 => self.sleb()? as u64,
            0x0a => self.u16()? as i16 as u64,
            0x0b => self.u32()? as i32 as u64,
            0x0c => self.u64()?,
            f => bail!("pointer format {f:#x}"),
        };
        match enc & 0x70 {
            0x00 => Ok(v),
            0x10 => Ok(v.wrapping_add(here)),
            a => bail!("pointer application {a:#x}"),
        }
    }
}

/// How a register is found in the caller (the rules this table keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Saved {
    Same,
    At(i64),
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    cfa_reg: u64,
    cfa_off: i64,
    cfa_expr: bool,
    rbp: Saved,
    ra: Saved,
}

impl State {
    fn rule(&self) -> Rule {
        if self.cfa_expr || self.ra != Saved::At(-8) {
            return Rule::Stop;
        }
        let Ok(off) = i32::try_from(self.cfa_off) else { return Rule::Stop };
        let cfa = match self.cfa_reg {
            RSP => Cfa::Sp(off),
            RBP => Cfa::Fp(off),
            _ => return Rule::Stop,
        };
        let fp_at = match self.rbp {
            Saved::Same => None,
            Saved::At(n) => match i32::try_from(n) {
                Ok(n) => Some(n),
                Err(_) => return Rule::Stop,
            },
            Saved::Other => return Rule::Stop,
        };
        Rule::Step { cfa, fp_at }
    }
}

struct Cie<'a> {
    code_align: u64,
    data_align: i64,
    ra_reg: u64,
    fde_enc: u8,
    has_aug_data: bool,
    initial: &'a [u8],
}

fn parse_cie(data: &[u8]) -> Result<Cie<'_>> {
    let mut r = Reader { data, pos: 0 };
    let version = r.u8()?;
    if !matches!(version, 1 | 3 | 4) {
        bail!("CIE version {version}");
    }
    let aug = r.cstr()?;
    if aug.windows(2).any(|w| w == b"eh") {
        r.u64()?;
    }
    if version == 4 {
        // address size, segment size
        r.bytes(2)?;
    }
    let code_align = r.uleb()?;
    let data_align = r.sleb()?;
    let ra_reg = if version == 1 { u64::from(r.u8()?) } else { r.uleb()? };
    let mut fde_enc = 0u8;
    let has_aug_data = aug.first() == Some(&b'z');
    if has_aug_data {
        let len = usize::try_from(r.uleb()?)?;
        let end = r.pos.checked_add(len).filter(|e| *e <= data.len()).context("CIE augmentation too long")?;
        for c in &aug[1..] {
            match c {
                b'R' => fde_enc = r.u8()?,
                b'P' => {
                    let enc = r.u8()?;
                    r.pointer(enc & 0x7f, 0)?;
                }
                b'L' => {
                    r.u8()?;
                }
                b'S' | b'B' | b'G' => {}
                _ => break,
            }
        }
        r.pos = end;
    }
    Ok(Cie { code_align, data_align, ra_reg, fde_enc, has_aug_data, initial: &data[r.pos..] })
}

/// Run the call frame instructions `ins` from `state` at `loc`, pushing a row before each
/// advance. `initial`: the CIE's state (for DW_CFA_restore). Returns the last location.
#[allow(clippy::too_many_arguments)]
fn run(
    ins: &[u8],
    cie: &Cie,
    base: u64,
    mut loc: u64,
    state: &mut State,
    initial: Option<&State>,
    rows: &mut Vec<(u64, Rule)>,
    max_rows: usize,
) -> Result<u64> {
    let mut r = Reader { data: ins, pos: 0 };
    let mut remembered: Vec<State> = vec![];
    let ca = cie.code_align;
    let da = cie.data_align;
    let advance = |loc: &mut u64, delta: u64, state: &State, rows: &mut Vec<(u64, Rule)>| -> Result<()> {
        if rows.len() >= max_rows {
            bail!("more than {max_rows} unwind rows");
        }
        rows.push((*loc, state.rule()));
        *loc = loc.wrapping_add(delta.wrapping_mul(ca));
        Ok(())
    };
    let set = |state: &mut State, reg: u64, v: Saved| {
        if reg == RBP {
            state.rbp = v;
        } else if reg == cie.ra_reg || reg == RA {
            state.ra = v;
        }
    };
    let restore = |state: &mut State, reg: u64| {
        let Some(init) = initial else { return };
        if reg == RBP {
            state.rbp = init.rbp;
        } else if reg == cie.ra_reg || reg == RA {
            state.ra = init.ra;
        }
    };
    while r.pos < ins.len() {
        let op = r.u8()?;
        match op >> 6 {
            1 => advance(&mut loc, u64::from(op & 0x3f), state, rows)?,
            2 => {
                let off = r.uleb()? as i64;
                set(state, u64::from(op & 0x3f), Saved::At(off.wrapping_mul(da)));
            }
            3 => restore(state, u64::from(op & 0x3f)),
            _ => match op {
                0x00 => {}
                0x01 => {
                    let to = r.pointer(cie.fde_enc, base)?;
                    if rows.len() >= max_rows {
                        bail!("more than {max_rows} unwind rows");
                    }
                    rows.push((loc, state.rule()));
                    loc = to;
                }
                0x02 => {
                    let d = u64::from(r.u8()?);
                    advance(&mut loc, d, state, rows)?
                }
                0x03 => {
                    let d = u64::from(r.u16()?);
                    advance(&mut loc, d, state, rows)?
                }
                0x04 => {
                    let d = u64::from(r.u32()?);
                    advance(&mut loc, d, state, rows)?
                }
                0x05 => {
                    let reg = r.uleb()?;
                    let off = r.uleb()? as i64;
                    set(state, reg, Saved::At(off.wrapping_mul(da)));
                }
                0x06 => {
                    let reg = r.uleb()?;
                    restore(state, reg);
                }
                0x07 | 0x08 => {
                    let reg = r.uleb()?;
                    set(state, reg, if op == 0x08 { Saved::Same } else { Saved::Other });
                }
                0x09 => {
                    let reg = r.uleb()?;
                    r.uleb()?;
                    set(state, reg, Saved::Other);
                }
                0x0a => {
                    if remembered.len() >= MAX_REMEMBERED {
                        bail!("remember_state nested too deep");
                    }
                    remembered.push(*state);
                }
                // the CFA too, as GCC's and LLVM's unwinders restore it: GCC's epilogues rely on it
                // (`.cfi_remember_state`, the pops, `ret`, `.cfi_restore_state`)
                0x0b => *state = remembered.pop().context("restore_state without remember_state")?,
                0x0c => {
                    state.cfa_reg = r.uleb()?;
                    state.cfa_off = r.uleb()? as i64;
                    state.cfa_expr = false;
                }
                0x0d => {
                    state.cfa_reg = r.uleb()?;
                    state.cfa_expr = false;
                }
                0x0e => state.cfa_off = r.uleb()? as i64,
                0x0f => {
                    let n = usize::try_from(r.uleb()?)?;
                    r.bytes(n)?;
                    state.cfa_expr = true;
                }
                0x10 | 0x16 => {
                    let reg = r.uleb()?;
                    let n = usize::try_from(r.uleb()?)?;
                    r.bytes(n)?;
                    set(state, reg, Saved::Other);
                }
                0x11 => {
                    let reg = r.uleb()?;
                    let off = r.sleb()?;
                    set(state, reg, Saved::At(off.wrapping_mul(da)));
                }
                0x12 => {
                    state.cfa_reg = r.uleb()?;
                    state.cfa_off = r.sleb()?.wrapping_mul(da);
                    state.cfa_expr = false;
                }
                0x13 => state.cfa_off = r.sleb()?.wrapping_mul(da),
                0x14 | 0x15 => {
                    let reg = r.uleb()?;
                    if op == 0x14 {
                        r.uleb()?;
                    } else {
                        r.sleb()?;
                    }
                    set(state, reg, Saved::Other);
                }
                0x2e => {
                    r.uleb()?;
                }
                0x2f => {
                    let reg = r.uleb()?;
                    let off = r.uleb()? as i64;
                    set(state, reg, Saved::At(off.wrapping_neg().wrapping_mul(da)));
                }
                _ => bail!("call frame instruction {op:#x}"),
            },
        }
    }
    Ok(loc)
}

/// The unwind table of an `.eh_frame` section whose bytes are `data`, loaded at link-time
/// address `addr`; at most `max_rows` rows (more is an error: the object is not unwound).
/// An FDE that cannot be read is left out (its code is a `Stop`); a section whose entries
/// cannot be delimited is an error.
pub fn parse(data: &[u8], addr: u64, max_rows: usize) -> Result<Table> {
    let mut raw: Vec<(u64, Rule)> = vec![];
    // (start, end) of each FDE read: a Stop at its end unless another begins there
    let mut ends: Vec<u64> = vec![];
    let (mut fdes, mut fp_fdes) = (0usize, 0usize);
    let mut pos = 0usize;
    while pos < data.len() {
        let mut r = Reader { data, pos };
        let mut len = u64::from(r.u32()?);
        if len == 0 {
            break; // the terminator
        }
        if len == 0xffff_ffff {
            len = r.u64()?;
        }
        let body = r.pos;
        let end =
            usize::try_from(len).ok().and_then(|l| body.checked_add(l)).filter(|e| *e <= data.len()).context("entry past the section")?;
        pos = end;
        // the entry's own bytes only: a length too short for its fields ends it
        let mut r = Reader { data: &data[..end], pos: body };
        let Ok(id) = r.u32() else { continue };
        if id == 0 {
            continue; // a CIE: read by the FDEs that name it
        }
        // the CIE pointer is relative to its own position
        let Some(cie_at) = (body as u64).checked_sub(u64::from(id)).and_then(|c| usize::try_from(c).ok()) else { continue };
        let Some(cie) = cie_body(data, cie_at).and_then(|b| parse_cie(b).ok()) else { continue };
        let fde = &data[r.pos..end];
        let mut fr = Reader { data: fde, pos: 0 };
        let fbase = addr.wrapping_add(r.pos as u64);
        let Ok(start) = fr.pointer(cie.fde_enc, fbase) else { continue };
        let Ok(range) = fr.pointer(cie.fde_enc & 0x0f, 0) else { continue };
        if cie.has_aug_data {
            let Ok(n) = fr.uleb() else { continue };
            let Some(skip) = usize::try_from(n).ok().filter(|n| fr.pos.saturating_add(*n) <= fde.len()) else { continue };
            fr.pos += skip;
        }
        let Some(stop) = start.checked_add(range) else { continue };
        if range == 0 {
            continue;
        }
        let mut state = State { cfa_reg: RSP, cfa_off: 8, cfa_expr: false, rbp: Saved::Same, ra: Saved::At(-8) };
        let mark = raw.len();
        if run(cie.initial, &cie, 0, start, &mut state, None, &mut raw, max_rows).is_err() {
            raw.truncate(mark);
            continue;
        }
        // the CIE's instructions make no rows of their own
        raw.truncate(mark);
        let initial = state;
        let ins = &fde[fr.pos..];
        let fbase_ins = fbase.wrapping_add(fr.pos as u64);
        match run(ins, &cie, fbase_ins, start, &mut state, Some(&initial), &mut raw, max_rows) {
            Ok(last) => {
                if raw.len() >= max_rows {
                    bail!("more than {max_rows} unwind rows");
                }
                // the state after the last instruction holds from where they left off
                raw.push((last, state.rule()));
                // rows past the FDE's end are not its
                let kept: Vec<(u64, Rule)> = raw.drain(mark..).filter(|(pc, _)| *pc >= start && *pc < stop).collect();
                if kept.iter().any(|(_, r)| matches!(r, Rule::Step { cfa: Cfa::Fp(_), .. })) {
                    fp_fdes += 1;
                }
                raw.extend(kept);
                fdes += 1;
                ends.push(stop);
            }
            Err(e) if e.to_string().starts_with("more than") => return Err(e),
            Err(_) => raw.truncate(mark),
        }
    }
    // FDEs may come in any order: sort by pc (stable), the later row at one pc wins (an
    // advance by 0 leaves the earlier state no byte)
    raw.sort_by_key(|(pc, _)| *pc);
    let mut rows: Vec<Row> = Vec::with_capacity(raw.len() + ends.len());
    ends.sort_unstable();
    let mut e = 0;
    for (pc, rule) in raw {
        // a Stop at each FDE end before this pc that no row covers
        while e < ends.len() && ends[e] <= pc {
            if rows.last().is_some_and(|r| r.pc < ends[e]) {
                rows.push(Row { pc: ends[e], rule: Rule::Stop });
            }
            e += 1;
        }
        if let Some(last) = rows.last_mut() {
            if last.pc == pc {
                // and an FDE's end yields to the function that starts there
                last.rule = rule;
                continue;
            }
        }
        rows.push(Row { pc, rule });
    }
    while e < ends.len() {
        if rows.last().is_some_and(|r| r.pc < ends[e]) {
            rows.push(Row { pc: ends[e], rule: Rule::Stop });
        }
        e += 1;
    }
    rows.dedup_by(|b, a| a.rule == b.rule);
    Ok(Table { rows, fdes, fp_fdes })
}

/// The body of the CIE whose length field is at `at` (after the length, the id included).
fn cie_body(data: &[u8], at: usize) -> Option<&[u8]> {
    let mut r = Reader { data, pos: at };
    let mut len = u64::from(r.u32().ok()?);
    if len == 0xffff_ffff {
        len = r.u64().ok()?;
    }
    let end = usize::try_from(len).ok().and_then(|l| r.pos.checked_add(l)).filter(|e| *e <= data.len())?;
    let mut r = Reader { data: &data[..end], pos: r.pos };
    (r.u32().ok()? == 0).then(|| &data[r.pos..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An .eh_frame as GCC writes one: a CIE `zR` (pcrel|sdata4), CFA rsp+8, RA at CFA-8.
    fn cie() -> Vec<u8> {
        let mut b = vec![];
        let body: Vec<u8> = [
            &0u32.to_le_bytes()[..],
            &[1],
            b"zR\0",
            &[1],          // code align 1
            &[0x78],       // data align -8
            &[16],         // RA register
            &[1, 0x1b],    // augmentation: R = pcrel|sdata4
            &[0x0c, 7, 8], // def_cfa rsp+8
            &[0x90, 1],    // offset r16 (RA) at cfa-8
            &[0, 0],       // padding
        ]
        .concat();
        b.extend((body.len() as u32).to_le_bytes());
        b.extend(body);
        b
    }

    fn fde(section: &mut Vec<u8>, addr: u64, start: u64, len: u32, ins: &[u8]) {
        let at = section.len();
        let mut body = vec![];
        body.extend(((at + 4) as u32).to_le_bytes()); // back to the CIE at 0
        let field = addr + (at + 8) as u64;
        body.extend(((start as i64 - field as i64) as i32).to_le_bytes());
        body.extend(len.to_le_bytes());
        body.push(0); // augmentation data length
        body.extend(ins);
        section.extend((body.len() as u32).to_le_bytes());
        section.extend(body);
    }

    #[test]
    fn a_frame_pointer_function_and_a_leaf_without_one() {
        let addr = 0x2000;
        let mut s = cie();
        // push rbp; mov rbp,rsp; ... leave; ret
        fde(&mut s, addr, 0x1000, 0x40, &[0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x40 | 0x30, 0x0c, 7, 8]);
        // sub rsp,0x18 ... add rsp,0x18; ret
        fde(&mut s, addr, 0x1040, 0x20, &[0x44, 0x0e, 32, 0x50 | 0x0a, 0x0e, 8]);
        s.extend(0u32.to_le_bytes());
        let t = parse(&s, addr, 1000).unwrap();
        assert_eq!((t.fdes, t.fp_fdes), (2, 1));
        assert_eq!(t.rule(0x1000), Rule::Step { cfa: Cfa::Sp(8), fp_at: None });
        assert_eq!(t.rule(0x1001), Rule::Step { cfa: Cfa::Sp(16), fp_at: Some(-16) });
        assert_eq!(t.rule(0x1004), Rule::Step { cfa: Cfa::Fp(16), fp_at: Some(-16) });
        assert_eq!(t.rule(0x1034), Rule::Step { cfa: Cfa::Sp(8), fp_at: Some(-16) });
        assert_eq!(t.rule(0x1044), Rule::Step { cfa: Cfa::Sp(32), fp_at: None });
        assert_eq!(t.rule(0x105e), Rule::Step { cfa: Cfa::Sp(8), fp_at: None });
        assert_eq!(t.rule(0x1060), Rule::Stop);
        assert_eq!(t.rule(0xfff), Rule::Stop);
        assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc && w[0].rule != w[1].rule));
    }

    #[test]
    fn rules_it_cannot_express_stop_the_walk() {
        let addr = 0;
        let mut s = cie();
        // a CFA by expression (a PLT entry), then an undefined return address (_start)
        fde(&mut s, addr, 0x100, 0x10, &[0x0f, 2, 0x77, 8]);
        fde(&mut s, addr, 0x200, 0x10, &[0x07, 16]);
        let t = parse(&s, addr, 100).unwrap();
        assert_eq!(t.rule(0x104), Rule::Stop);
        assert_eq!(t.rule(0x204), Rule::Stop);
    }

    #[test]
    fn restore_state_restores_the_cfa_too() {
        let addr = 0;
        let mut s = cie();
        // push rbx (cfa 16); remember; the epilogue's pop (cfa 8); ret; restore: cfa 16 again
        fde(&mut s, addr, 0x10, 0x20, &[0x41, 0x0e, 16, 0x0a, 0x41, 0x0e, 8, 0x41, 0x0b]);
        let t = parse(&s, addr, 100).unwrap();
        assert_eq!(t.rule(0x12), Rule::Step { cfa: Cfa::Sp(8), fp_at: None });
        assert_eq!(t.rule(0x13), Rule::Step { cfa: Cfa::Sp(16), fp_at: None });
    }

    #[test]
    fn bounds_and_garbage_are_errors_or_stops_never_panics() {
        let mut s = cie();
        fde(&mut s, 0, 0x10, 0x20, &[0x41; 64]);
        assert!(parse(&s, 0, 10).is_err(), "past max_rows");
        assert!(parse(&[0xff, 0xff, 0xff, 0xff, 1], 0, 10).is_err());
        assert!(parse(&[8, 0, 0, 0, 1, 0, 0, 0], 0, 10).is_err());
        assert!(parse(&[4, 0, 0, 0, 9, 9, 9, 9], 0, 10).unwrap().rows.is_empty(), "an FDE naming no CIE");
        assert!(parse(&[2, 0, 0, 0, 9, 9, 0, 0, 0, 0], 0, 10).unwrap().rows.is_empty(), "an entry too short for its id");
        let mut bad = cie();
        fde(&mut bad, 0, 0x10, 0x20, &[0x0b]);
        assert_eq!(parse(&bad, 0, 10).unwrap().fdes, 0, "restore_state without remember_state");
    }

    #[test]
    fn the_c_library_of_this_machine_omits_frame_pointers() {
        let bytes = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").expect("Debian's C library");
        let elf = crate::elf::Elf::parse(bytes.as_slice()).unwrap();
        let sec = elf.section(".eh_frame").unwrap().clone();
        let data = elf.section_data(&sec, 64 << 20).unwrap();
        let t = parse(&data, sec.addr, 1 << 22).unwrap();
        assert!(t.fdes > 1000 && !t.keeps_frame_pointers(), "{} FDEs, {} with rbp", t.fdes, t.fp_fdes);
        assert!(t.rows.len() > t.fdes, "{} rows", t.rows.len());
    }
}
