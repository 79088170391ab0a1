//! A minimal ELF64 little-endian reader: what finding CPython's runtime needs
//! (file type, load segments, sections by name, symbols from .dynsym and
//! .symtab). The file comes from the target and is hostile: every offset is
//! computed with checked arithmetic and every read is bounds-checked, so a
//! crafted header yields an error or fewer symbols, never a panic or a read
//! outside the file (fuzzed by `agent/fuzz`, target `elf`).
//!
//! The bytes come from a [`Source`] by range, never as a whole: the agent
//! reads only the header, the section and program header tables, the names
//! of the sections and what it asks for next (a symbol through `.gnu.hash`, a
//! symbol table, a section), each request capped (`MAX_*`). A 200 MB
//! executable that is not Python costs a few kilobytes. A byte slice is a
//! `Source` too (tests, the fuzzer).
use std::borrow::Cow;

use anyhow::{bail, Context, Result};

pub const ET_EXEC: u16 = 2;
const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const SHT_GNU_HASH: u32 = 0x6fff_fff6;
const SHN_UNDEF: u16 = 0;
const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const SHDR_SIZE: usize = 64;
const SYM_SIZE: usize = 24;

/// The program header table read (at most 65535 entries of at least 56 bytes).
pub const MAX_PHDRS: u64 = 1 << 20;
/// The section header table read (65535 entries of 64 bytes fit).
pub const MAX_SHDRS: u64 = 4 << 20;
/// Section names read (`.shstrtab`); names past it are empty.
pub const MAX_SECTION_NAMES: u64 = 1 << 20;
/// Each symbol table and each string table read; symbols past it are not seen
/// (libpython's `.symtab` is ~0.4 MB, Node.js' 2.6 MB).
pub const MAX_SYMBOL_TABLE: u64 = 16 << 20;
/// Steps of one `.gnu.hash` chain walk.
const MAX_CHAIN: usize = 1 << 16;

/// Longest symbol name read (C++ and Rust names can be long; a missing
/// terminator must not make every lookup scan to the end of the file).
const MAX_NAME: usize = 4096;
/// Longest section name kept (".PyRuntime"): 65535 sections of long names stay small.
const MAX_SECTION_NAME: usize = 256;
/// Symbols returned by one `symbols()` call: a crafted table of a million
/// distinct matching names must not become a million strings.
pub const MAX_MATCHES: usize = 1024;

/// The bytes of an ELF file, by range.
pub trait Source {
    /// The size of the file.
    fn size(&self) -> u64;
    /// `len` bytes at `offset`: all of them, or an error (past the end, I/O).
    fn bytes(&self, offset: u64, len: usize) -> Result<Cow<'_, [u8]>>;
}

impl Source for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn bytes(&self, offset: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        let start = usize::try_from(offset).context("offset out of range")?;
        let end = start.checked_add(len).context("range out of range")?;
        self.get(start..end).map(Cow::Borrowed).context("range past the end of the file")
    }
}

/// `len` bytes at `offset` of `src`, refused when longer than `cap` or past
/// the end of the file (before anything is allocated).
fn fetch<S: Source + ?Sized>(src: &S, offset: u64, len: u64, cap: u64) -> Result<Cow<'_, [u8]>> {
    if len > cap {
        bail!("{len} bytes at {offset:#x}: more than the {cap} read at most");
    }
    if offset.checked_add(len).is_none_or(|end| end > src.size()) {
        bail!("{len} bytes at {offset:#x}: past the end of the file");
    }
    src.bytes(offset, usize::try_from(len).context("length out of range")?)
}

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

impl Section {
    /// The virtual address `vaddr` as an offset in the file, when it lies in this section.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        if self.addr == 0 || self.kind == SHT_NOBITS || vaddr < self.addr || vaddr >= self.addr.checked_add(self.size)? {
            return None;
        }
        (vaddr - self.addr).checked_add(self.offset)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub value: u64,
    pub size: u64,
}

pub struct Elf<'s, S: Source + ?Sized> {
    src: &'s S,
    pub kind: u16,
    pub sections: Vec<Section>,
    /// lowest PT_LOAD virtual address, page-aligned down
    pub load_base: u64,
}

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

/// `index * stride + field`, or None on overflow.
fn at(index: usize, stride: usize, field: usize) -> Option<usize> {
    index.checked_mul(stride)?.checked_add(field)
}

fn cstr(d: &[u8], o: usize, max: usize) -> Option<&str> {
    let s = d.get(o..)?;
    let s = &s[..s.len().min(max)];
    let end = s.iter().position(|b| *b == 0)?;
    std::str::from_utf8(&s[..end]).ok()
}

/// A table of `num` entries of `entsize` bytes (at least `min` of them used) at `offset`.
fn table<S: Source + ?Sized>(src: &S, offset: u64, num: usize, entsize: usize, min: usize, cap: u64) -> Result<Cow<'_, [u8]>> {
    if num == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    if entsize < min {
        bail!("header entries of {entsize} bytes, less than {min}");
    }
    fetch(src, offset, (num as u64) * (entsize as u64), cap)
}

/// The GNU symbol hash (`dl_new_hash`).
fn gnu_hash(name: &[u8]) -> u32 {
    name.iter().fold(5381u32, |h, b| h.wrapping_mul(33).wrapping_add(u32::from(*b)))
}

impl<'s, S: Source + ?Sized> Elf<'s, S> {
    /// Read the header, the program and section header tables and the section names.
    pub fn parse(src: &'s S) -> Result<Elf<'s, S>> {
        let head = src.bytes(0, EHDR_SIZE.min(usize::try_from(src.size()).unwrap_or(EHDR_SIZE)))?;
        if head.get(..4) != Some(b"\x7fELF") {
            bail!("not an ELF file");
        }
        if head.get(4) != Some(&2) || head.get(5) != Some(&1) {
            bail!("not a 64-bit little-endian ELF file");
        }
        let hdr = || -> Option<_> {
            Some((
                u16_at(&head, 16)?,
                u64_at(&head, 32)?,          // e_phoff
                u64_at(&head, 40)?,          // e_shoff
                u16_at(&head, 54)? as usize, // e_phentsize
                u16_at(&head, 56)? as usize, // e_phnum
                u16_at(&head, 58)? as usize, // e_shentsize
                u16_at(&head, 60)? as usize, // e_shnum
                u16_at(&head, 62)? as usize, // e_shstrndx
            ))
        };
        let (kind, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx) = hdr().context("truncated ELF header")?;
        let phdrs = table(src, phoff, phnum, phentsize, PHDR_SIZE, MAX_PHDRS).context("bad program header table")?;
        let mut load_base = u64::MAX;
        for i in 0..phnum {
            let o = at(i, phentsize, 0).context("program header offset out of range")?;
            if u32_at(&phdrs, o) == Some(PT_LOAD) {
                let vaddr = o.checked_add(16).and_then(|f| u64_at(&phdrs, f));
                load_base = load_base.min(vaddr.context("truncated program header")?);
            }
        }
        let load_base = if load_base == u64::MAX { 0 } else { load_base & !0xfff };
        let shdrs = table(src, shoff, shnum, shentsize, SHDR_SIZE, MAX_SHDRS).context("bad section header table")?;
        let mut raw = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let f = |field| at(i, shentsize, field);
            let sh = || -> Option<_> {
                Some((
                    u32_at(&shdrs, f(0)?)?,
                    u32_at(&shdrs, f(4)?)?,
                    u64_at(&shdrs, f(16)?)?,
                    u64_at(&shdrs, f(24)?)?,
                    u64_at(&shdrs, f(32)?)?,
                    u32_at(&shdrs, f(40)?)?,
                    u64_at(&shdrs, f(56)?)?,
                ))
            };
            raw.push(sh().context("truncated section header")?);
        }
        // the names; a table that cannot be read leaves every name empty
        let names = raw
            .get(shstrndx)
            .and_then(|s| {
                let len = s.4.min(MAX_SECTION_NAMES).min(src.size().saturating_sub(s.3));
                fetch(src, s.3, len, MAX_SECTION_NAMES).ok()
            })
            .unwrap_or(Cow::Borrowed(&[]));
        let sections = raw
            .into_iter()
            .map(|(name, kind, addr, offset, size, link, entsize)| Section {
                name: cstr(&names, name as usize, MAX_SECTION_NAME).unwrap_or("").to_string(),
                kind,
                addr,
                offset,
                size,
                link,
                entsize,
            })
            .collect();
        Ok(Elf { src, kind, sections, load_base })
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The bytes of a section in the file, at most `cap` of them (the first `cap`).
    pub fn section_data(&self, s: &Section, cap: u64) -> Result<Cow<'s, [u8]>> {
        if s.kind == SHT_NOBITS {
            return Ok(Cow::Borrowed(&[]));
        }
        fetch(self.src, s.offset, s.size.min(cap), cap).with_context(|| format!("cannot read section {:?}", s.name))
    }

    /// Each defined, named symbol of one table: `f(name, st_info, value,
    /// size)`, until `f` returns false. Reads bounded as `section_data` bounds them.
    fn each_symbol(&self, tab: &Section, mut f: impl FnMut(&str, u8, u64, u64) -> bool) {
        let Some(strtab) = self.sections.get(tab.link as usize) else { return };
        // an entry is at least 24 bytes; a smaller claimed size is a corrupt table
        let Some(ent) = usize::try_from(if tab.entsize == 0 { SYM_SIZE as u64 } else { tab.entsize }).ok().filter(|e| *e >= SYM_SIZE)
        else {
            return;
        };
        // each read up to MAX_SYMBOL_TABLE
        let (Ok(entries), Ok(strings)) = (self.section_data(tab, MAX_SYMBOL_TABLE), self.section_data(strtab, MAX_SYMBOL_TABLE)) else {
            return;
        };
        for i in 0..entries.len() / ent {
            let at = |field| at(i, ent, field);
            let read = || {
                Some((
                    u32_at(&entries, at(0)?)?,
                    *entries.get(at(4)?)?,
                    u16_at(&entries, at(6)?)?,
                    u64_at(&entries, at(8)?)?,
                    u64_at(&entries, at(16)?)?,
                ))
            };
            let Some((name, info, shndx, value, size)) = read() else { break };
            if shndx == SHN_UNDEF || name == 0 {
                continue;
            }
            let Some(n) = cstr(&strings, name as usize, MAX_NAME) else { continue };
            if !f(n, info, value, size) {
                return;
            }
        }
    }

    /// Defined symbols of one table that `want` accepts, added to `out` unless seen.
    fn collect(
        &self,
        tab: &Section,
        want: &impl Fn(&str) -> bool,
        out: &mut Vec<Symbol>,
        seen: &mut std::collections::HashSet<(String, u64)>,
    ) {
        self.each_symbol(tab, |n, _, value, size| {
            // (name, value) seen: .dynsym and .symtab repeat each other, and a crafted
            // table can repeat one entry a million times (a list scan would be quadratic)
            if want(n) && seen.insert((n.to_string(), value)) {
                out.push(Symbol { name: n.to_string(), value, size });
            }
            out.len() < MAX_MATCHES
        });
    }

    fn symbols_of(&self, kinds: &[u32], want: impl Fn(&str) -> bool) -> Vec<Symbol> {
        let mut out = vec![];
        let mut seen = std::collections::HashSet::new();
        for tab in self.sections.iter().filter(|s| kinds.contains(&s.kind)) {
            if out.len() >= MAX_MATCHES {
                break;
            }
            self.collect(tab, &want, &mut out, &mut seen);
        }
        out
    }

    /// Defined symbols of .dynsym and .symtab (whichever exist) that `want`
    /// accepts, at most `MAX_MATCHES`.
    pub fn symbols(&self, want: impl Fn(&str) -> bool) -> Vec<Symbol> {
        self.symbols_of(&[SHT_SYMTAB, SHT_DYNSYM], want)
    }

    /// Defined symbols of .symtab (local ones included) that `want` accepts.
    pub fn symtab_symbols(&self, want: impl Fn(&str) -> bool) -> Vec<Symbol> {
        self.symbols_of(&[SHT_SYMTAB], want)
    }

    pub fn symbol(&self, name: &str) -> Option<Symbol> {
        self.symbols(|n| n == name).into_iter().next()
    }

    /// An exported symbol: looked up through `.gnu.hash` (a few small reads)
    /// when the file has one, else by a scan of `.dynsym`.
    pub fn dynamic_symbol(&self, name: &str) -> Option<Symbol> {
        let (index, dynsym) = self.sections.iter().enumerate().find(|(_, s)| s.kind == SHT_DYNSYM)?;
        match self.sections.iter().find(|s| s.kind == SHT_GNU_HASH && s.link as usize == index) {
            Some(hash) => self.gnu_lookup(hash, dynsym, name),
            None => self.symbols_of(&[SHT_DYNSYM], |n| n == name).into_iter().next(),
        }
    }

    /// `u32`/`u64` at `offset` within section `s` (checked against its size).
    fn word<const N: usize>(&self, s: &Section, offset: u64) -> Option<[u8; N]> {
        if offset.checked_add(N as u64)? > s.size {
            return None;
        }
        let b = fetch(self.src, s.offset.checked_add(offset)?, N as u64, N as u64).ok()?;
        b.as_ref().try_into().ok()
    }

    fn gnu_lookup(&self, hash: &Section, dynsym: &Section, name: &str) -> Option<Symbol> {
        let strtab = self.sections.get(dynsym.link as usize)?;
        let h = gnu_hash(name.as_bytes());
        let head: [u8; 16] = self.word(hash, 0)?;
        let field = |i: usize| u64::from(u32_at(&head, i * 4).unwrap_or(0));
        let (nbuckets, symoffset, bloom_size, bloom_shift) = (field(0), field(1), field(2), field(3));
        if nbuckets == 0 || bloom_size == 0 {
            return None;
        }
        let h64 = u64::from(h);
        let bloom = u64::from_le_bytes(self.word(hash, 16 + ((h64 / 64) % bloom_size) * 8)?);
        let shifted = u32::try_from(bloom_shift).ok().and_then(|s| h64.checked_shr(s)).unwrap_or(0);
        let mask = (1u64 << (h64 % 64)) | (1u64 << (shifted % 64));
        if bloom & mask != mask {
            return None; // not in the table: the common case for a file that is not Python
        }
        let buckets = bloom_size.checked_mul(8)?.checked_add(16)?;
        let mut index = u64::from(u32::from_le_bytes(self.word(hash, buckets.checked_add((h64 % nbuckets) * 4)?)?));
        let chains = buckets.checked_add(nbuckets.checked_mul(4)?)?;
        let ent = if dynsym.entsize == 0 { SYM_SIZE as u64 } else { dynsym.entsize };
        if index == 0 || index < symoffset || ent < SYM_SIZE as u64 {
            return None;
        }
        for _ in 0..MAX_CHAIN {
            let chain = u32::from_le_bytes(self.word(hash, chains.checked_add((index - symoffset).checked_mul(4)?)?)?);
            if chain | 1 == h | 1 {
                let sym: [u8; SYM_SIZE] = self.word(dynsym, index.checked_mul(ent)?)?;
                let (st_name, shndx) = (u32_at(&sym, 0)?, u16_at(&sym, 6)?);
                let want = name.len() as u64 + 1;
                if shndx != SHN_UNDEF && u64::from(st_name).checked_add(want)? <= strtab.size {
                    let got = fetch(self.src, strtab.offset.checked_add(u64::from(st_name))?, want, want).ok()?;
                    if got.get(..name.len()) == Some(name.as_bytes()) && got.last() == Some(&0) {
                        return Some(Symbol { name: name.to_string(), value: u64_at(&sym, 8)?, size: u64_at(&sym, 16)? });
                    }
                }
            }
            if chain & 1 == 1 {
                return None;
            }
            index = index.checked_add(1)?;
        }
        None
    }

    /// Function symbols (STT_FUNC, defined, of non-zero size) of .symtab
    /// and .dynsym, at most `max`, for naming addresses: (start, size, name).
    pub fn functions(&self, max: usize) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = vec![];
        // value -> its index in `out`: of aliases (one address, several names), the one a reader knows
        let mut seen = std::collections::HashMap::new();
        for tab in self.sections.iter().filter(|s| s.kind == SHT_SYMTAB || s.kind == SHT_DYNSYM) {
            self.each_symbol(tab, |n, info, value, size| {
                // STT_FUNC = 2, STT_GNU_IFUNC = 10
                if size != 0 && matches!(info & 0xf, 2 | 10) {
                    match seen.get(&value) {
                        Some(&i) => {
                            let kept: &mut Symbol = &mut out[i];
                            if alias_rank(n) < alias_rank(&kept.name) {
                                kept.name = n.to_string();
                            }
                        }
                        None => {
                            seen.insert(value, out.len());
                            out.push(Symbol { name: n.to_string(), value, size });
                        }
                    }
                }
                out.len() < max
            });
            if out.len() >= max {
                break;
            }
        }
        out
    }

    pub fn has_symtab(&self) -> bool {
        self.sections.iter().any(|s| s.kind == SHT_SYMTAB)
    }

    /// The GNU build ID (`.note.gnu.build-id`, 1 to 64 bytes), which names the object's
    /// separate debug file (`/usr/lib/debug/.build-id/xx/rest.debug`).
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let s = self.section(".note.gnu.build-id")?;
        let data = self.section_data(s, 1024).ok()?;
        build_id_note(&data)
    }
}

/// Of a function's aliases, the name a reader knows ranks first: not glibc's internal `__GI_`
/// alias, then the fewest leading underscores (`pthread_mutex_lock` before
/// `__pthread_mutex_lock`), then the shortest.
pub fn alias_rank(name: &str) -> (bool, usize, usize) {
    (name.starts_with("__GI_"), name.len() - name.trim_start_matches('_').len(), name.len())
}

/// The build ID in a section of ELF notes: namesz, descsz and type (u32 each), the name and
/// the descriptor, each padded to 4 bytes; NT_GNU_BUILD_ID (3) named "GNU".
fn build_id_note(data: &[u8]) -> Option<Vec<u8>> {
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0usize;
    while at.checked_add(12)? <= data.len() {
        let (namesz, descsz, kind) = (u32_at(data, at)? as usize, u32_at(data, at + 4)? as usize, u32_at(data, at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let next = desc_at.checked_add(pad(descsz)?)?;
        if kind == 3 && data.get(name_at..name_at.checked_add(namesz)?)? == b"GNU\0" {
            let id = data.get(desc_at..desc_at.checked_add(descsz)?)?;
            return (1..=64).contains(&id.len()).then(|| id.to_vec());
        }
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A source that counts what it is asked for.
    struct Counted<'a>(&'a [u8], Cell<u64>);

    impl Source for Counted<'_> {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn bytes(&self, offset: u64, len: usize) -> Result<Cow<'_, [u8]>> {
            self.1.set(self.1.get() + len as u64);
            self.0.bytes(offset, len)
        }
    }

    #[test]
    fn reads_our_own_executable() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let elf = Elf::parse(&data[..]).unwrap();
        assert!(elf.kind == 3 || elf.kind == ET_EXEC);
        assert!(elf.section(".text").is_some());
        // a symbol the Rust test harness always has
        assert!(elf.symbols(|n| n == "main").iter().any(|s| s.value != 0));
        assert!(elf.symtab_symbols(|n| n == "main").iter().any(|s| s.value != 0));
    }

    /// `.gnu.hash` finds what a scan of `.dynsym` finds, for every exported
    /// symbol of a real library, and nothing for names that are not there.
    #[test]
    fn gnu_hash_lookup_agrees_with_a_scan() {
        let Some(path) = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            crate::testing::skip("no libc.so.6 to read");
            return;
        };
        let data = std::fs::read(path).unwrap();
        let src = Counted(&data, Cell::new(0));
        let elf = Elf::parse(&src).unwrap();
        assert!(elf.sections.iter().any(|s| s.kind == SHT_GNU_HASH), "{path} has no .gnu.hash");
        let all = elf.symbols_of(&[SHT_DYNSYM], |_| true);
        assert!(all.len() > 1000, "{}", all.len());
        for s in &all {
            let found = elf.dynamic_symbol(&s.name).unwrap_or_else(|| panic!("{} not found", s.name));
            // versioned duplicates (memcpy@GLIBC_2.2.5, memcpy@@GLIBC_2.14) share a name
            assert!(all.iter().any(|t| t.name == found.name && t.value == found.value), "{}", s.name);
        }
        let before = src.1.get();
        for absent in ["_PyRuntime", "Py_Version", "take_gil", "", "mallocx"] {
            assert_eq!(elf.dynamic_symbol(absent), None, "{absent}");
        }
        // a miss is a bloom-filter word, or a bucket and a chain: tens of bytes
        assert!(src.1.get() - before < 5 * 64, "{}", src.1.get() - before);
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
        assert!(Elf::parse(&h[..]).is_err());
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
        let elf = Elf::parse(&h[..]).unwrap();
        assert!(elf.symbols(|_| true).is_empty());
        assert!(elf.section_data(&elf.sections[0], 1 << 20).is_err());
    }

    /// Claimed sizes are checked against the file and the caps before
    /// anything is read: a 64-byte file claiming 4 GB of section headers
    /// costs 64 bytes.
    #[test]
    fn claimed_sizes_are_capped() {
        let mut h = vec![0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[40..48].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
        h[58..60].copy_from_slice(&0xffffu16.to_le_bytes()); // e_shentsize
        h[60..62].copy_from_slice(&0xffffu16.to_le_bytes()); // e_shnum
        let src = Counted(&h, Cell::new(0));
        assert!(Elf::parse(&src).is_err());
        assert_eq!(src.1.get(), 64);
        // entries smaller than the ELF64 structs are refused
        h[58..60].copy_from_slice(&8u16.to_le_bytes());
        h[60..62].copy_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&[0; 8]);
        assert!(Elf::parse(&h[..]).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Elf::parse(&b"nope"[..]).is_err());
        assert!(Elf::parse(&b"\x7fELF\x01\x01"[..]).is_err());
        let mut truncated = b"\x7fELF\x02\x01".to_vec();
        truncated.resize(20, 0);
        assert!(Elf::parse(&truncated[..]).is_err());
        assert!(Elf::parse(&b""[..]).is_err());
    }

    #[test]
    fn gnu_hash_of_known_names() {
        // h = h * 33 + c from 5381, computed independently
        assert_eq!(gnu_hash(b""), 0x0000_1505);
        assert_eq!(gnu_hash(b"printf"), 0x156b_2bb8);
        assert_eq!(gnu_hash(b"exit"), 0x7c96_7e3f);
    }

    #[test]
    fn build_id_notes() {
        let note = |name: &[u8], kind: u32, desc: &[u8]| {
            let mut v = vec![];
            v.extend_from_slice(&(name.len() as u32).to_le_bytes());
            v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            v.extend_from_slice(&kind.to_le_bytes());
            v.extend_from_slice(name);
            v.resize(v.len().div_ceil(4) * 4, 0);
            v.extend_from_slice(desc);
            v.resize(v.len().div_ceil(4) * 4, 0);
            v
        };
        let id: Vec<u8> = (1..=20).collect();
        assert_eq!(build_id_note(&note(b"GNU\0", 3, &id)), Some(id.clone()));
        // another note first, then the build ID
        let two = [note(b"GNU\0", 1, &[0; 16]), note(b"GNU\0", 3, &id)].concat();
        assert_eq!(build_id_note(&two), Some(id.clone()));
        assert_eq!(build_id_note(&note(b"Go\0\0", 3, &id)), None, "another vendor's note");
        assert_eq!(build_id_note(&note(b"GNU\0", 3, &[])), None, "empty");
        assert_eq!(build_id_note(&note(b"GNU\0", 3, &[7; 65])), None, "too long");
        let mut lying = note(b"GNU\0", 3, &id);
        lying[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(build_id_note(&lying), None, "a size past the end");
        assert_eq!(build_id_note(&[1, 2, 3]), None);
    }
}
