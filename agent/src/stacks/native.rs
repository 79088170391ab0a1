//! Naming native addresses: the mapping an address falls in
//! (/proc/PID/maps), the object file there (opened through the target's
//! root, so right inside containers), and the function symbol covering it
//! (.symtab, else .dynsym). A stripped object names its frames
//! `[file+offset]` (as perf does), never guessed. Files and their
//! symbol tables are hostile input (`formats::elf` bounds every read) and are
//! cached by path, the maps per process.
use std::collections::HashMap;
use std::sync::Arc;

use crate::model::stacks::Frame;
use crate::python::binary::FileSource;
use crate::python::{parse_maps, Mapping};
use waitmeter_formats::elf::Elf;

/// Function symbols kept per object (libpython has ~12k, a big C++ program more).
const MAX_FUNCTIONS: usize = 1 << 20;
/// Objects whose symbols are kept.
const MAX_OBJECTS: usize = 256;
/// How long a process' maps are trusted before an address outside them makes us re-read.
const MAPS_TTL_NS: u64 = 1_000_000_000;

/// The functions of one object, by link-time address.
#[derive(Default)]
struct Symbols {
    /// (start, end, name), sorted by start
    funcs: Vec<(u64, u64, String)>,
    /// executable sections: (file offset, size, address)
    sections: Vec<(u64, u64, u64)>,
}

impl Symbols {
    fn load(path: &std::path::Path) -> Option<Symbols> {
        let file = std::fs::File::open(path).ok()?;
        let size = file.metadata().ok()?.len();
        let src = FileSource::new(file, size);
        let elf = Elf::parse(&src).ok()?;
        let mut funcs: Vec<(u64, u64, String)> =
            elf.functions(MAX_FUNCTIONS).into_iter().map(|s| (s.value, s.value.saturating_add(s.size), s.name)).collect();
        funcs.sort_unstable();
        // SHT_PROGBITS with SHF_EXECINSTR: where code lies in the file
        let sections = elf.sections.iter().filter(|s| s.kind == 1 && s.addr != 0).map(|s| (s.offset, s.size, s.addr)).collect();
        Some(Symbols { funcs, sections })
    }

    /// The link-time address of file offset `off`.
    fn address(&self, off: u64) -> Option<u64> {
        self.sections.iter().find(|(o, size, _)| off >= *o && off - o < *size).map(|(o, _, addr)| addr + (off - o))
    }

    fn function(&self, addr: u64) -> Option<&str> {
        let i = self.funcs.partition_point(|f| f.0 <= addr).checked_sub(1)?;
        let (start, end, name) = &self.funcs[i];
        (addr >= *start && addr < *end).then_some(name.as_str())
    }
}

#[derive(Default)]
pub struct Native {
    /// pid -> (its file mappings, when read)
    maps: HashMap<u32, (Vec<Mapping>, u64)>,
    /// object path (as the target names it) -> its symbols (None: unreadable)
    objects: HashMap<(u32, String), Option<Arc<Symbols>>>,
}

impl Native {
    fn mapping(&mut self, pid: u32, ip: u64, now: u64) -> Option<Mapping> {
        let find = |maps: &[Mapping]| maps.iter().find(|m| ip >= m.start && ip < m.end).cloned();
        if let Some((maps, at)) = self.maps.get(&pid) {
            if let Some(m) = find(maps) {
                return Some(m);
            }
            if now.saturating_sub(*at) < MAPS_TTL_NS {
                return None;
            }
        }
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let maps = parse_maps(&text);
        let m = find(&maps);
        self.maps.insert(pid, (maps, now));
        m
    }

    fn symbols(&mut self, pid: u32, path: &str) -> Option<Arc<Symbols>> {
        if self.objects.len() >= MAX_OBJECTS {
            self.objects.clear();
        }
        self.objects
            .entry((pid, path.to_string()))
            .or_insert_with(|| Symbols::load(&crate::python::target_path(pid, path)).map(Arc::new))
            .clone()
    }

    /// Name the frames of a native stack of process `pid` (return addresses,
    /// leaf first; the leaf is the instruction itself).
    pub fn frames(&mut self, pid: u32, ips: &[u64], now: u64) -> Vec<Frame> {
        ips.iter()
            .enumerate()
            .map(|(i, ip)| {
                // a return address is the instruction after the call
                let ip = if i == 0 { *ip } else { ip.saturating_sub(1) };
                self.frame(pid, ip, now)
            })
            .collect()
    }

    fn frame(&mut self, pid: u32, ip: u64, now: u64) -> Frame {
        let Some(m) = self.mapping(pid, ip, now) else {
            return Frame::unknown(format!("[unknown] {ip:#x}"));
        };
        let off = ip - m.start + m.offset;
        let name = self.symbols(pid, &m.path).and_then(|s| s.address(off).and_then(|a| s.function(a).map(str::to_string)));
        match name {
            Some(n) => Frame::native(crate::model::stacks::clean(&n), m.path.clone()),
            // the object and the offset, as perf prints a frame without a symbol
            None => {
                let base = m.path.rsplit('/').next().unwrap_or(&m.path);
                Frame::native(crate::model::stacks::clean(&format!("[{base}+{off:#x}]")), m.path.clone())
            }
        }
    }

    /// Forget a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
        self.objects.retain(|(p, _), _| *p != pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn marker_function_for_symbols() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_a_function_of_this_test_binary() {
        let ip = marker_function_for_symbols as *const () as u64 + 1;
        let mut n = Native::default();
        let f = n.frames(std::process::id(), &[ip], crate::clock::monotonic_ns());
        assert!(f[0].function.contains("marker_function_for_symbols"), "{:?}", f[0]);
        let unknown = n.frames(std::process::id(), &[8], crate::clock::monotonic_ns());
        assert!(unknown[0].function.starts_with("[unknown]"), "{:?}", unknown[0]);
    }
}
