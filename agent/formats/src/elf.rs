//! A minimal ELF64 little-endian reader: what finding CPython's runtime needs
//! (file type, load segments, sections by name, symbols from .dynsym and
//! .symtab). The file comes from the target and is hostile: every offset is
//! computed with checked arithmetic and every read is bounds-checked, so a
//! crafted header yields an error or fewer symbols, never a panic or a read
//! outside the file (fuzzed by `agent/fuzz`, target `elf`).
use anyhow::{bail, Context, Result};

pub const ET_EXEC: u16 = 2;
const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub kind: u32,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub entsize: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub value: u64,
    pub size: u64,
}

pub struct Elf<'a> {
    data: &'a [u8],
    pub kind: u16,
    pub sections: Vec<Section>,
    /// lowest PT_LOAD virtual address, page-aligned down
    pub load_base: u64,
}

/// Longest symbol or section name read (C++ and Rust names can be long; a
/// missing terminator must not make every lookup scan to the end of the file).
const MAX_NAME: usize = 4096;

fn bytes_at<const N: usize>(d: &[u8], o: usize) -> Option<[u8; N]> {
    d.get(o..o.checked_add(N)?)?.try_into().ok()
}
fn u16_at(d: &[u8], o: usize) -> Option<u16> {
    bytes_at(d, o).map(u16::from_le_bytes)
}
fn u32_at(d: &[u8], o: usize) -> Option<u32> {
    bytes_at(d, o).map(u32::from_le_bytes)
}
fn u64_at(d: &[u8], o: usize) -> Option<u64> {
    bytes_at(d, o).map(u64::from_le_bytes)
}

/// `base + index * stride + field`, or None on overflow.
fn at(base: u64, index: usize, stride: usize, field: usize) -> Option<usize> {
    usize::try_from(base).ok()?.checked_add(index.checked_mul(stride)?)?.checked_add(field)
}

fn cstr(d: &[u8], o: usize) -> Option<&str> {
    let s = d.get(o..)?;
    let s = &s[..s.len().min(MAX_NAME)];
    let end = s.iter().position(|b| *b == 0)?;
    std::str::from_utf8(&s[..end]).ok()
}

impl<'a> Elf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Elf<'a>> {
        if data.get(..4) != Some(b"\x7fELF") {
            bail!("not an ELF file");
        }
        if data.get(4) != Some(&2) || data.get(5) != Some(&1) {
            bail!("not a 64-bit little-endian ELF file");
        }
        let hdr = || -> Option<_> {
            Some((
                u16_at(data, 16)?,
                u64_at(data, 32)?,          // e_phoff
                u64_at(data, 40)?,          // e_shoff
                u16_at(data, 54)? as usize, // e_phentsize
                u16_at(data, 56)? as usize, // e_phnum
                u16_at(data, 58)? as usize, // e_shentsize
                u16_at(data, 60)? as usize, // e_shnum
                u16_at(data, 62)? as usize, // e_shstrndx
            ))
        };
        let (kind, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx) = hdr().context("truncated ELF header")?;
        let mut load_base = u64::MAX;
        for i in 0..phnum {
            let o = at(phoff, i, phentsize, 0).context("program header offset out of range")?;
            if u32_at(data, o) == Some(PT_LOAD) {
                let vaddr = o.checked_add(16).and_then(|f| u64_at(data, f));
                load_base = load_base.min(vaddr.context("truncated program header")?);
            }
        }
        let load_base = if load_base == u64::MAX { 0 } else { load_base & !0xfff };
        let mut raw = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let f = |field| at(shoff, i, shentsize, field);
            let sh = || -> Option<_> {
                Some((
                    u32_at(data, f(0)?)?,
                    u32_at(data, f(4)?)?,
                    u64_at(data, f(16)?)?,
                    u64_at(data, f(24)?)?,
                    u64_at(data, f(32)?)?,
                    u32_at(data, f(40)?)?,
                    u64_at(data, f(56)?)?,
                ))
            };
            raw.push(sh().context("truncated section header")?);
        }
        let names_off = raw.get(shstrndx).map_or(0, |s| s.3);
        let sections = raw
            .into_iter()
            .map(|(name, kind, addr, offset, size, link, entsize)| Section {
                name: at(names_off, 0, 0, name as usize).and_then(|o| cstr(data, o)).unwrap_or("").to_string(),
                kind,
                addr,
                offset,
                size,
                link,
                entsize,
            })
            .collect();
        Ok(Elf { data, kind, sections, load_base })
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// Defined symbols of .dynsym and .symtab (whichever exist) that `want` accepts.
    pub fn symbols(&self, want: impl Fn(&str) -> bool) -> Vec<Symbol> {
        let mut out = vec![];
        // (name, value) seen: .dynsym and .symtab repeat each other, and a crafted
        // table can repeat one entry a million times (a list scan would be quadratic)
        let mut seen = std::collections::HashSet::new();
        for tab in self.sections.iter().filter(|s| s.kind == SHT_SYMTAB || s.kind == SHT_DYNSYM) {
            let Some(strtab) = self.sections.get(tab.link as usize) else { continue };
            // an entry is at least 24 bytes; a smaller claimed size is a corrupt table
            let Ok(ent) = usize::try_from(if tab.entsize == 0 { 24 } else { tab.entsize }) else { continue };
            if ent < 24 {
                continue;
            }
            // entries past the end of the file are not read (the loop stops at the first)
            let count = usize::try_from(tab.size).unwrap_or(usize::MAX) / ent;
            for i in 0..count {
                let f = |field| at(tab.offset, i, ent, field);
                let read =
                    || Some((u32_at(self.data, f(0)?)?, u16_at(self.data, f(6)?)?, u64_at(self.data, f(8)?)?, u64_at(self.data, f(16)?)?));
                let Some((name, shndx, value, size)) = read() else { break };
                if shndx == SHN_UNDEF || name == 0 {
                    continue;
                }
                let Some(n) = at(strtab.offset, 0, 0, name as usize).and_then(|o| cstr(self.data, o)) else { continue };
                if want(n) && seen.insert((n, value)) {
                    out.push(Symbol { name: n.to_string(), value, size });
                }
            }
        }
        out
    }

    pub fn symbol(&self, name: &str) -> Option<Symbol> {
        self.symbols(|n| n == name).into_iter().next()
    }

    pub fn has_symtab(&self) -> bool {
        self.sections.iter().any(|s| s.kind == SHT_SYMTAB)
    }

    /// The bytes of the file (for version-string scans).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_executable() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let elf = Elf::parse(&data).unwrap();
        assert!(elf.kind == 3 || elf.kind == ET_EXEC);
        assert!(elf.section(".text").is_some());
        // a symbol the Rust test harness always has
        assert!(elf.symbols(|n| n == "main").iter().any(|s| s.value != 0));
    }

    /// A valid header whose offsets and counts point past the end of the
    /// address space: every sum must be checked, nothing may panic.
    #[test]
    fn offsets_that_overflow_are_errors() {
        let mut h = vec![0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[32..40].copy_from_slice(&u64::MAX.to_le_bytes()); // e_phoff
        h[40..48].copy_from_slice(&(u64::MAX - 8).to_le_bytes()); // e_shoff
        h[54..56].copy_from_slice(&0xffffu16.to_le_bytes());
        h[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
        h[58..60].copy_from_slice(&0xffffu16.to_le_bytes());
        h[60..62].copy_from_slice(&0xffffu16.to_le_bytes());
        assert!(Elf::parse(&h).is_err());
        // no program headers, one section header whose table offset overflows
        let mut h = h.clone();
        h[32..40].copy_from_slice(&0u64.to_le_bytes());
        h[56..58].copy_from_slice(&0u16.to_le_bytes());
        h[40..48].copy_from_slice(&64u64.to_le_bytes());
        h[58..60].copy_from_slice(&64u16.to_le_bytes());
        h[60..62].copy_from_slice(&1u16.to_le_bytes());
        let mut sh = vec![0u8; 64];
        sh[4..8].copy_from_slice(&SHT_SYMTAB.to_le_bytes());
        sh[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes()); // sh_offset
        sh[32..40].copy_from_slice(&u64::MAX.to_le_bytes()); // sh_size
        h.extend_from_slice(&sh);
        let elf = Elf::parse(&h).unwrap();
        assert!(elf.symbols(|_| true).is_empty());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Elf::parse(b"nope").is_err());
        assert!(Elf::parse(b"\x7fELF\x01\x01").is_err());
        let mut truncated = b"\x7fELF\x02\x01".to_vec();
        truncated.resize(20, 0);
        assert!(Elf::parse(&truncated).is_err());
    }
}
