//! Naming native addresses: the mapping an address falls in
//! (/proc/PID/maps), the object file there (opened through the target's
//! root, so right inside containers), and the function symbol covering it
//! (.symtab, else .dynsym, a Go executable's own function table, the separate
//! debug file its build ID names and the MiniDebugInfo packed in it),
//! C++ and Rust names demangled (`formats::demangle`).
//! An object without either names its frames
//! `[file+offset]` (as perf does), never guessed. Files and their
//! symbol tables are hostile input (`formats::elf` bounds every read). An
//! object's symbols are parsed once per file (device, inode, size, mtime),
//! whichever processes map it (under `run --all`, libc and libpython once, not
//! once per process), and the least recently used go first; the maps are kept
//! per process. Addresses in no file are code a JIT generated: `jit.rs` names
//! them from the runtime's perf map.
use std::collections::HashMap;
use std::sync::Arc;

use crate::model::stacks::Frame;
use crate::probes::stacks::JAVA_METHOD;
use crate::python::binary::FileSource;
use crate::python::{parse_maps, Mapping};
use waitmeter_formats::elf::Elf;
use waitmeter_formats::gopclntab;

/// Function symbols kept per object (libpython has ~12k, a big C++ program more).
const MAX_FUNCTIONS: usize = 1 << 20;
/// Objects whose symbols are kept.
const MAX_OBJECTS: usize = 256;
/// (process, path) pairs whose file identity is kept (a stat each to find again).
const MAX_FILES: usize = 4096;
/// How long a process' maps are trusted before an address outside them makes us re-read.
const MAPS_TTL_NS: u64 = 1_000_000_000;

/// The functions of one object, by link-time address.
#[derive(Default)]
struct Symbols {
    /// (start, end, name), sorted by start
    funcs: Vec<(u64, u64, String)>,
    /// executable sections: (file offset, size, address)
    sections: Vec<(u64, u64, u64)>,
    /// the build ID a debuginfod server is being asked for (the symbols are read again once
    /// it answered)
    pending: Option<Vec<u8>>,
    /// a Go executable: its main module's path, when its build information says it (its
    /// functions outside it and package `main` are the standard library's and its
    /// dependencies': `go_own`)
    go: Option<Option<String>>,
}

impl Symbols {
    /// The symbols of the object at `path` (through process `pid`'s root). A stripped object's
    /// functions come from its separate debug file too, by build ID, as the process's system has
    /// it (`/usr/lib/debug/.build-id/`, what Debian's `-dbg` and `-dbgsym` packages install).
    fn load(pid: u32, path: &std::path::Path, debuginfod: Option<&super::debuginfod::Debuginfod>) -> Option<Symbols> {
        let file = std::fs::File::open(path).ok()?;
        let size = file.metadata().ok()?.len();
        let src = FileSource::new(file, size);
        let elf = Elf::parse(&src).ok()?;
        let mut funcs = ranges(&elf);
        let mut pending = None;
        // a stripped Go executable still has the runtime's own table of its functions (and no
        // debug file of its own to look for)
        let go = if elf.has_symtab() { vec![] } else { go_functions(&elf, path) };
        let is_go = !go.is_empty();
        funcs.extend(go);
        if !elf.has_symtab() && !is_go {
            // the separate debug file has every function; MiniDebugInfo only when there is none
            // (unpacking it is the dearer read, and it holds a subset). The system's first, then
            // a debuginfod server's (cached; asked for in the background when it is not)
            let id = elf.build_id();
            let mut debug = id.as_deref().map(|id| debug_functions(pid, id)).unwrap_or_default();
            if let (true, Some(d), Some(id)) = (debug.is_empty(), debuginfod, id.as_deref()) {
                match d.debug_file(id) {
                    Some(p) => debug = file_functions(&p, id),
                    None if !d.settled(id) => pending = Some(id.to_vec()),
                    None => {}
                }
            }
            if debug.is_empty() {
                funcs.extend(mini_functions(&elf, path));
            }
            funcs.extend(debug);
        }
        // aliases at one address, across the object and its debug file: the name a reader knows
        let rank = |name: &str| waitmeter_formats::elf::alias_rank(name);
        funcs.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| rank(&a.2).cmp(&rank(&b.2))).then_with(|| a.2.cmp(&b.2)));
        funcs.dedup_by_key(|f| f.0);
        // SHT_PROGBITS with SHF_EXECINSTR: where code lies in the file
        let sections = elf.sections.iter().filter(|s| s.kind == 1 && s.addr != 0).map(|s| (s.offset, s.size, s.addr)).collect();
        let go = gopclntab::SECTIONS.iter().find_map(|n| elf.section(n)).map(|_| {
            let info = elf.section(".go.buildinfo").cloned()?;
            waitmeter_formats::gobuild::main_module(&elf.section_data(&info, 1 << 20).ok()?)
        });
        Some(Symbols { funcs, sections, pending, go })
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

    /// Whether function `name` of this object is a library's that lives in it: a Go executable's
    /// function that is not the application's own (`go_own`).
    fn library(&self, name: &str) -> bool {
        self.go.as_ref().is_some_and(|module| !go_own(name, module.as_deref()))
    }
}

/// Whether a function of a Go executable is the application's own: in package `main`, or in a
/// package of its main module (an import path under the module's path). The rest of the
/// executable is the Go standard library and runtime, and the dependencies, as a Python site
/// counts the standard library and the installed packages as libraries.
fn go_own(name: &str, module: Option<&str>) -> bool {
    // a generic instantiation's type arguments name other packages: the function's own path ends
    // before them
    let base = name.split('[').next().unwrap_or(name);
    let slash = base.rfind('/').map_or(0, |i| i + 1);
    let Some(dot) = base[slash..].find('.') else { return false };
    let pkg = &base[..slash + dot];
    pkg == "main" || module.is_some_and(|m| pkg == m || pkg.strip_prefix(m).is_some_and(|rest| rest.starts_with('/')))
}

/// The functions of the separate debug file of the object with build ID `id`, under process
/// `pid`'s root (opened there: a link cannot lead out of it), if it is there and has that ID.
/// Its addresses are the object's link-time addresses.
fn debug_functions(pid: u32, id: &[u8]) -> Vec<(u64, u64, String)> {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let path = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    let Ok(file) = crate::procfs::open_in_root(pid, &path) else { return vec![] };
    debug_file_functions(file, &path, id)
}

/// The functions of a debug file (of the agent's: a debuginfod server's, cached), if it has
/// build ID `id`.
fn file_functions(path: &std::path::Path, id: &[u8]) -> Vec<(u64, u64, String)> {
    match std::fs::File::open(path) {
        Ok(file) => debug_file_functions(file, &path.display().to_string(), id),
        Err(_) => vec![],
    }
}

fn debug_file_functions(file: std::fs::File, path: &str, id: &[u8]) -> Vec<(u64, u64, String)> {
    let Ok(meta) = file.metadata() else { return vec![] };
    if !meta.is_file() {
        return vec![];
    }
    let src = FileSource::new(file, meta.len());
    let Ok(elf) = Elf::parse(&src) else { return vec![] };
    if elf.build_id().as_deref() != Some(id) {
        log::debug!("{path}: not the debug file of its build ID");
        return vec![];
    }
    ranges(&elf)
}

/// The functions of the MiniDebugInfo packed in a stripped object (`.gnu_debugdata`: Fedora's
/// and RHEL's objects), by link-time address; said once per file when it cannot be read.
fn mini_functions<S: waitmeter_formats::elf::Source + ?Sized>(elf: &Elf<'_, S>, path: &std::path::Path) -> Vec<(u64, u64, String)> {
    let unpacked = match waitmeter_formats::minidebug::of(elf) {
        None => return vec![],
        Some(Ok(bytes)) => bytes,
        Some(Err(e)) => {
            log::warn!("{}: its MiniDebugInfo (.gnu_debugdata) is not read ({e:#}): its internal functions stay unnamed", path.display());
            return vec![];
        }
    };
    match Elf::parse(unpacked.as_slice()) {
        Ok(mini) => ranges(&mini),
        Err(e) => {
            log::warn!(
                "{}: its MiniDebugInfo (.gnu_debugdata) is not an ELF file ({e:#}): its internal functions stay unnamed",
                path.display()
            );
            vec![]
        }
    }
}

/// The functions of a Go executable from the Go runtime's own table (`.gopclntab`), which a
/// stripped one keeps (`-ldflags "-s -w"`); none for any other object. Said once per file when
/// it cannot be read.
fn go_functions<S: waitmeter_formats::elf::Source + ?Sized>(elf: &Elf<'_, S>, path: &std::path::Path) -> Vec<(u64, u64, String)> {
    let Some(sec) = gopclntab::SECTIONS.iter().find_map(|n| elf.section(n)).cloned() else { return vec![] };
    let text = elf.section(".text").map_or(0, |t| t.addr);
    let read = elf.section_data(&sec, 64 << 20).and_then(|data| {
        let t = gopclntab::Pclntab::parse(&data, text)?;
        Ok(t.functions(MAX_FUNCTIONS).into_iter().map(|f| (f.start, f.end, f.name)).collect())
    });
    read.unwrap_or_else(|e| {
        log::warn!("{}: its Go function table (.gopclntab) is not read ({e:#}): its functions stay unnamed", path.display());
        vec![]
    })
}

/// An object's functions as (start, end, name), by link-time address.
fn ranges<S: waitmeter_formats::elf::Source + ?Sized>(elf: &Elf<'_, S>) -> Vec<(u64, u64, String)> {
    elf.functions(MAX_FUNCTIONS).into_iter().map(|s| (s.value, s.value.saturating_add(s.size), s.name)).collect()
}

/// A file's identity: device, inode, size and modification time (a file replaced in place is
/// another file).
pub(super) type FileId = (u64, u64, u64, i64);

pub(super) fn file_id(path: &std::path::Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime()))
}

#[derive(Default)]
pub struct Native {
    /// pid -> (its file mappings, when read)
    maps: HashMap<u32, (Vec<Mapping>, u64)>,
    /// (pid, object path as the target names it) -> the file there (None: not there)
    files: HashMap<(u32, String), Option<FileId>>,
    /// a file -> its symbols (None: unreadable) and when last asked for (a count of asks)
    objects: HashMap<FileId, (Option<Arc<Symbols>>, u64)>,
    asks: u64,
    /// code a JIT generated, by the runtime's perf map
    pub jit: super::jit::Jit,
    /// interpreted Java frames, by the JVM's own structures
    pub hotspot: super::hotspot::Hotspot,
    /// debug files from a debuginfod server (`DEBUGINFOD_URLS`)
    pub debuginfod: Option<super::debuginfod::Debuginfod>,
    /// counts the objects read again (a debug file came): frames named before are named again
    pub generation: u64,
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
        if self.files.len() >= MAX_FILES {
            self.files.clear();
        }
        let target = crate::python::target_path(pid, path);
        let id = (*self.files.entry((pid, path.to_string())).or_insert_with(|| file_id(&target)))?;
        self.asks += 1;
        if let Some((symbols, asked)) = self.objects.get_mut(&id) {
            *asked = self.asks;
            // a debug file asked for meanwhile came (or never will): read the object again
            let settled = match (symbols.as_ref().and_then(|s| s.pending.as_deref()), self.debuginfod.as_ref()) {
                (Some(b), Some(d)) => d.settled(b),
                _ => false,
            };
            if !settled {
                return symbols.clone();
            }
            self.objects.remove(&id);
            self.generation += 1;
        }
        if self.objects.len() >= MAX_OBJECTS {
            if let Some(oldest) = self.objects.iter().min_by_key(|(_, (_, asked))| *asked).map(|(id, _)| *id) {
                self.objects.remove(&oldest);
            }
        }
        let symbols = Symbols::load(pid, &target, self.debuginfod.as_ref()).map(Arc::new);
        self.objects.insert(id, (symbols.clone(), self.asks));
        symbols
    }

    /// Name the frames of a native stack of process `pid` (return addresses,
    /// leaf first; the leaf is the instruction itself).
    pub fn frames(&mut self, pid: u32, ips: &[u64], now: u64) -> Vec<Frame> {
        let mut out = Vec::with_capacity(ips.len());
        if self.hotspot.reads_code_cache(pid) {
            self.jit.needless(pid);
        }
        for (i, ip) in ips.iter().enumerate() {
            if ip & JAVA_METHOD != 0 {
                // an interpreted Java frame: the Method* it runs (bpf/stacks.bpf.h)
                let name = self.hotspot.method(pid, ip & !JAVA_METHOD);
                out.push(Frame::jit(crate::model::stacks::clean(name.as_deref().unwrap_or("Interpreter"))));
                continue;
            }
            // a return address is the instruction after the call
            let ip = if i == 0 { *ip } else { ip.saturating_sub(1) };
            self.frame(pid, ip, now, &mut out);
        }
        out
    }

    /// The frame at `ip`, or the frames: a JVM's compiled code is one for each method inlined there.
    fn frame(&mut self, pid: u32, ip: u64, now: u64, out: &mut Vec<Frame>) {
        let Some(m) = self.mapping(pid, ip, now) else {
            // not in a file: generated code. A JVM's code cache says whose it is, and which methods
            // were inlined there (a frame each, innermost first), which a perf map cannot say and no
            // JVM writes unasked; other generated code is named if the runtime writes a perf map
            if let Some(names) = self.hotspot.compiled(pid, ip) {
                out.extend(names.iter().map(|n| Frame::jit(crate::model::stacks::clean(n))));
                return;
            }
            out.push(match self.jit.name(pid, ip, now) {
                Some(name) => Frame::jit(crate::model::stacks::clean(super::jit::readable(&name))),
                None => Frame::unknown(format!("[unknown] {ip:#x}")),
            });
            return;
        };
        let off = ip - m.start + m.offset;
        let symbols = self.symbols(pid, &m.path);
        let name = symbols.as_ref().and_then(|s| s.address(off).and_then(|a| s.function(a).map(str::to_string)));
        out.push(match name {
            Some(n) if symbols.as_ref().is_some_and(|s| s.library(&n)) => {
                Frame::native_library(crate::model::stacks::clean(&n), m.path.clone())
            }
            Some(n) => {
                // C++ and Rust names as a reader knows them
                let n = waitmeter_formats::demangle::demangle(&n).unwrap_or(n);
                Frame::native(crate::model::stacks::clean(&n), m.path.clone())
            }
            // the object and the offset, as perf prints a frame without a symbol
            None => {
                let base = m.path.rsplit('/').next().unwrap_or(&m.path);
                Frame::native(crate::model::stacks::clean(&format!("[{base}+{off:#x}]")), m.path.clone())
            }
        });
    }

    /// Forget a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
        self.jit.forget(pid);
        self.hotspot.forget(pid);
        self.files.retain(|(p, _), _| *p != pid);
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

    /// A Go executable stripped of its symbol table (`-ldflags "-s -w"`, as images ship them) is
    /// named from the Go runtime's own table, as the unstripped one's `.symtab` names it.
    #[test]
    fn a_stripped_go_executable_is_named_from_its_function_table() {
        let go = waitmeter_formats::testing::go_toolchain();
        let dir = std::env::temp_dir().join(format!("wm-go-strip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stripped = dir.join("go");
        let ok = std::process::Command::new("objcopy").arg("--strip-all").arg(&go).arg(&stripped).status().map(|s| s.success());
        assert_eq!(ok.ok(), Some(true), "objcopy --strip-all (binutils)");
        let full = Symbols::load(std::process::id(), &go, None).expect("the Go toolchain's symbols");
        let bare = Symbols::load(std::process::id(), &stripped, None).expect("the stripped copy's");
        std::fs::remove_dir_all(&dir).unwrap();
        let main = full.funcs.iter().find(|f| f.2 == "main.main").expect("main.main in .symtab");
        assert_eq!(bare.function(main.0 + 1), Some("main.main"));
        assert!(bare.funcs.len() * 10 >= full.funcs.len() * 9, "{} of {}", bare.funcs.len(), full.funcs.len());
    }

    /// A Go executable's own code is its main module's and package main's; the standard library,
    /// the runtime and the dependencies are libraries, however their names are shaped.
    #[test]
    fn a_go_functions_owner_is_read_from_its_package_path() {
        let m = Some("example.com/svc");
        for own in [
            "main.handler",
            "main.(*server).ServeHTTP",
            "example.com/svc.Run",
            "example.com/svc/internal/db.(*Pool).Get",
            "main.Map[go.shape.int]",
        ] {
            assert!(go_own(own, m), "{own}");
        }
        for lib in [
            "crypto/sha256.Sum256",
            "runtime.futex.abi0",
            "net/http.(*conn).serve",
            "example.com/svcx.F",
            "github.com/lib/pq.(*conn).Query",
            "type:.eq.main.T",
            "sync.(*Mutex).Lock",
            "slices.Sort[go.shape.[]main.T]",
            "runtime",
        ] {
            assert!(!go_own(lib, m), "{lib}");
        }
        assert!(go_own("main.handler", None) && !go_own("encoding/json.Marshal", None), "no module information: package main");
    }

    /// The same file seen through two processes is parsed once; the least recently used object
    /// goes first when the cache is full.
    #[test]
    fn a_file_mapped_by_two_processes_is_parsed_once() {
        let exe = std::env::current_exe().unwrap().to_string_lossy().into_owned();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let mut n = Native::default();
        let mine = n.symbols(std::process::id(), &exe).expect("this test binary's symbols");
        let theirs = n.symbols(child.id(), &exe).expect("the same file through the child's root");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(Arc::ptr_eq(&mine, &theirs));
        assert_eq!(n.objects.len(), 1);
        // full: the one asked for least recently goes
        n.objects.clear();
        let fake = |i: u64| (u64::MAX, i, 0, 0);
        for i in 0..MAX_OBJECTS as u64 {
            n.asks += 1;
            n.objects.insert(fake(i), (None, n.asks));
        }
        n.objects.get_mut(&fake(0)).unwrap().1 = n.asks + 1; // fake(0) asked for again, last
        n.asks += 1;
        n.symbols(std::process::id(), &exe).unwrap();
        assert_eq!(n.objects.len(), MAX_OBJECTS);
        assert!(n.objects.contains_key(&fake(0)), "asked for last: kept");
        assert!(!n.objects.contains_key(&fake(1)), "the least recently asked for went");
    }

    /// The C library is stripped of `.symtab` (Debian's): its internal functions, such as the
    /// lock-wait path a contended mutex sleeps in, come from its separate debug file
    /// (libc6-dbg) by build ID; without it, only what it exports is named.
    #[test]
    fn a_stripped_library_is_named_from_its_debug_file() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = parse_maps(&maps).into_iter().find(|m| m.path.rsplit('/').next().is_some_and(|b| b.starts_with("libc.so"))).unwrap();
        let n = &mut Native::default();
        let symbols = n.symbols(std::process::id(), &libc.path).expect("the C library's symbols");
        let named = |f: &str| symbols.funcs.iter().any(|(_, _, name)| name == f);
        assert!(named("pthread_mutex_lock"), "exported");
        let id = {
            let file = std::fs::File::open(&libc.path).unwrap();
            let size = file.metadata().unwrap().len();
            let src = FileSource::new(file, size);
            Elf::parse(&src).unwrap().build_id().expect("Debian's libc has a build ID")
        };
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        if !std::path::Path::new(&format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..])).exists() {
            waitmeter_formats::testing::skip("no debug file for the C library (make setup installs libc6-dbg)");
            return;
        }
        assert!(named("__lll_lock_wait"), "internal, from the debug file");
    }
}
