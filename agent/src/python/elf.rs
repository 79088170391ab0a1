//! A minimal ELF64 little-endian reader: what finding CPython's runtime needs
//! (file type, load segments, sections by name, symbols from .dynsym and
//! .symtab). Bounds-checked everywhere: the file comes from the target.
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

fn u16_at(d: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(d: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(d: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(o..o + 8)?.try_into().ok()?))
}

fn cstr(d: &[u8], o: usize) -> Option<&str> {
    let s = d.get(o..)?;
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
                u64_at(data, 32)? as usize, // e_phoff
                u64_at(data, 40)? as usize, // e_shoff
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
            let o = phoff + i * phentsize;
            if u32_at(data, o) == Some(PT_LOAD) {
                load_base = load_base.min(u64_at(data, o + 16).context("truncated program header")?);
            }
        }
        let load_base = if load_base == u64::MAX { 0 } else { load_base & !0xfff };
        let mut raw = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let o = shoff + i * shentsize;
            let sh = || -> Option<_> {
                Some((
                    u32_at(data, o)?,
                    u32_at(data, o + 4)?,
                    u64_at(data, o + 16)?,
                    u64_at(data, o + 24)?,
                    u64_at(data, o + 32)?,
                    u32_at(data, o + 40)?,
                    u64_at(data, o + 56)?,
                ))
            };
            raw.push(sh().context("truncated section header")?);
        }
        let names_off = raw.get(shstrndx).map(|s| s.3 as usize).unwrap_or(0);
        let sections = raw
            .into_iter()
            .map(|(name, kind, addr, offset, size, link, entsize)| Section {
                name: cstr(data, names_off + name as usize).unwrap_or("").to_string(),
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
        for tab in self.sections.iter().filter(|s| s.kind == SHT_SYMTAB || s.kind == SHT_DYNSYM) {
            let Some(strtab) = self.sections.get(tab.link as usize) else { continue };
            let ent = if tab.entsize == 0 { 24 } else { tab.entsize as usize };
            let count = tab.size as usize / ent;
            for i in 0..count {
                let o = tab.offset as usize + i * ent;
                let (Some(name), Some(shndx), Some(value), Some(size)) =
                    (u32_at(self.data, o), u16_at(self.data, o + 6), u64_at(self.data, o + 8), u64_at(self.data, o + 16))
                else {
                    break;
                };
                if shndx == SHN_UNDEF || name == 0 {
                    continue;
                }
                let Some(n) = cstr(self.data, strtab.offset as usize + name as usize) else { continue };
                if want(n) && !out.iter().any(|s: &Symbol| s.name == n && s.value == value) {
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

    #[test]
    fn rejects_garbage() {
        assert!(Elf::parse(b"nope").is_err());
        assert!(Elf::parse(b"\x7fELF\x01\x01").is_err());
        let mut truncated = b"\x7fELF\x02\x01".to_vec();
        truncated.resize(20, 0);
        assert!(Elf::parse(&truncated).is_err());
    }
}
