//! What waitmeter reads of an executable or a libpython to find CPython in
//! it, with positioned reads (`pread`), never the whole file:
//!
//! - every candidate: the ELF header, the program and section header tables,
//!   the section names, and `_PyRuntime` looked up through `.gnu.hash` (a few
//!   words; a scan of `.dynsym` for a file without one), or a `.PyRuntime`
//!   section. A file with neither is not Python: done, a few kilobytes read.
//! - a file with a runtime: `Py_Version` (3.11+), `.symtab` and `.strtab`
//!   (take_gil/drop_gil, for `--gil-probe uprobe`) and, for 3.8–3.10 that do not
//!   export `Py_Version`, `.rodata` (the `PY_VERSION` string).
//!
//! Each read is capped (`elf::MAX_*`, `MAX_RODATA`) and so is the total of one
//! file (`MAX_FILE_READ`). Results are cached per file (device, inode, size,
//! mtime): under `run --all` an executable is parsed once, not once per process.
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};

use anyhow::{bail, Context, Result};

use super::elf::{self, Elf};
use super::{find_any_version_string, find_version_string, is_gil_function, minor_from_name, unmeasured_from_name, GilFunction};

/// `.rodata` scanned for the version string (libpython3.10's is 0.9 MB).
const MAX_RODATA: u64 = 16 << 20;
/// Everything read of one file.
const MAX_FILE_READ: u64 = 64 << 20;
/// The function a CPython 3.13+ thread sleeps in when it parks (see bpf/pypark.bpf.c).
pub const PARK: &str = "_PySemaphore_Wait";
/// Files remembered; the cache starts over when full.
const MAX_CACHED: usize = 4096;

/// An open file read by ranges, counting what it reads and refusing more than `MAX_FILE_READ`.
pub struct FileSource {
    file: File,
    size: u64,
    read: Cell<u64>,
}

impl FileSource {
    pub fn new(file: File, size: u64) -> FileSource {
        FileSource { file, size, read: Cell::new(0) }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.get()
    }
}

impl elf::Source for FileSource {
    fn size(&self) -> u64 {
        self.size
    }

    fn bytes(&self, offset: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        if offset.checked_add(len as u64).is_none_or(|end| end > self.size) {
            bail!("{len} bytes at {offset:#x}: past the end of the file");
        }
        let total = self.read.get() + len as u64;
        if total > MAX_FILE_READ {
            bail!("more than {MAX_FILE_READ} bytes read of one file");
        }
        self.read.set(total);
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, offset).with_context(|| format!("failed to read {len} bytes at {offset:#x}"))?;
        Ok(Cow::Owned(buf))
    }
}

/// What a file says about the CPython runtime in it (before it is loaded anywhere).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binary {
    /// ET_EXEC: loaded at its link addresses (no bias)
    pub exec: bool,
    /// lowest PT_LOAD address, page-aligned
    pub load_base: u64,
    /// link address of `_PyRuntime`
    pub runtime: u64,
    /// link address of `Py_Version` (3.11+)
    pub py_version: Option<u64>,
    /// the `PY_VERSION` string ("3.9.18") of a file without `Py_Version`
    pub version_string: Option<String>,
    /// the file has a `.symtab`
    pub symtab: bool,
    /// take_gil/drop_gil and clones, from .symtab (empty when stripped)
    pub gil_functions: Vec<GilFunction>,
    /// file offset of `_PySemaphore_Wait` (3.13+, exported), for the pypark probe
    pub park: Option<u64>,
    /// link-time address of `PyCode_Type` (every code object's type), when exported
    pub code_type: Option<u64>,
    /// a CPython whose GIL waitmeter does not measure (2.x, 3.0–3.7), with where its GIL's
    /// futex words are (empty: its symbols do not say)
    pub unmeasured: Option<Vec<GilWords>>,
}

/// Where an unmeasured interpreter's GIL lives (link addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GilWords {
    /// a static object: 3.2–3.6's `gil_cond`, `gil_mutex`, `switch_cond`, `switch_mutex`;
    /// 3.7's `_PyRuntime` (its GIL is in `ceval.gil`)
    Static { addr: u64, size: u64 },
    /// a static pointer to the lock: 2.x's `interpreter_lock`
    Pointer { addr: u64 },
}

/// The symbols (.symtab) of an unmeasured interpreter's GIL.
const OLD_GIL_STATICS: [&str; 4] = ["gil_cond", "gil_mutex", "switch_cond", "switch_mutex"];
const OLD_GIL_POINTER: &str = "interpreter_lock";

/// An interpreter older than 3.8 (named so, or exporting the C API without `_PyRuntime`): its
/// version string and GIL words. `None`: not such a CPython.
fn read_unmeasured<S: elf::Source + ?Sized>(elf: &Elf<S>, name: &str, runtime: Option<&elf::Symbol>) -> Option<Binary> {
    let named = unmeasured_from_name(name);
    if named.is_none() && (runtime.is_some() || elf.dynamic_symbol("Py_Initialize").is_none()) {
        return None;
    }
    let rodata = elf.section(".rodata").and_then(|s| elf.section_data(s, MAX_RODATA).ok());
    let candidates: Vec<(u32, u32)> = match named {
        Some(v) => vec![v],
        None => std::iter::once((2, 7)).chain((0..=7).map(|m| (3, m))).collect(),
    };
    let version_string = rodata.and_then(|d| candidates.iter().find_map(|(major, minor)| find_any_version_string(&d, *major, *minor)));
    let mut words: Vec<GilWords> = match runtime {
        Some(r) if r.size > 0 => vec![GilWords::Static { addr: r.value, size: r.size }],
        _ => vec![],
    };
    for sym in elf.symtab_symbols(|n| OLD_GIL_STATICS.contains(&n) || n == OLD_GIL_POINTER) {
        words.push(if sym.name == OLD_GIL_POINTER {
            GilWords::Pointer { addr: sym.value }
        } else {
            GilWords::Static { addr: sym.value, size: sym.size.max(8) }
        });
    }
    Some(Binary {
        park: None,
        code_type: None,
        exec: elf.kind == elf::ET_EXEC,
        load_base: elf.load_base,
        runtime: 0,
        py_version: None,
        version_string,
        symtab: elf.has_symtab(),
        gil_functions: vec![],
        unmeasured: Some(words),
    })
}

/// A file's identity (device, inode, size, mtime s, ns) and the minor version its name says.
type Key = (u64, u64, u64, i64, i64, Option<u32>);

static CACHE: LazyLock<Mutex<HashMap<Key, Option<Arc<Binary>>>>> = LazyLock::new(Default::default);

/// Inspect the file at `path` (opened as given: through /proc/PID/root);
/// `name` is the path the target knows it by (for 3.8–3.10 the file name
/// tells the minor version). From the cache when the same file was read
/// before. `Ok(None)`: not a CPython runtime (or not ELF at all).
pub fn inspect(path: &Path, name: &str) -> Result<Option<Arc<Binary>>> {
    // non-blocking: a target can put a FIFO where its libpython was mapped; open must not wait on it
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("failed to open {}", path.display()))?;
    let meta = file.metadata().with_context(|| format!("failed to stat {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let minor = minor_from_name(name).map(|m| m.0);
    let key = (meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec(), minor);
    if let Some(hit) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    let src = FileSource::new(file, meta.size());
    let found = match read(&src, name) {
        Ok(found) => found.map(Arc::new),
        Err(e) => {
            log::debug!("{}: not a CPython runtime: {e:#}", path.display());
            None
        }
    };
    log::debug!(
        "{}: {} of {} bytes read, {}",
        path.display(),
        src.bytes_read(),
        meta.size(),
        if found.is_some() { "a CPython runtime" } else { "no CPython runtime" }
    );
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= MAX_CACHED {
        cache.clear();
    }
    cache.insert(key, found.clone());
    Ok(found)
}

/// What `inspect` reads of an ELF file; `None`: it holds no CPython runtime.
pub fn read<S: elf::Source + ?Sized>(src: &S, name: &str) -> Result<Option<Binary>> {
    let elf = Elf::parse(src)?;
    // exported in .dynsym by every build seen; 3.12+ also name its section
    let runtime_sym = elf.dynamic_symbol("_PyRuntime");
    // 2.x and 3.0–3.7 (3.7 has a `_PyRuntime`, of a layout waitmeter does not read)
    if minor_from_name(name).is_none_or(|(minor, _)| minor <= 7) {
        if let Some(old) = read_unmeasured(&elf, name, runtime_sym.as_ref()) {
            return Ok(Some(old));
        }
    }
    let Some(runtime) = runtime_sym.map(|s| s.value).or_else(|| elf.section(".PyRuntime").map(|s| s.addr)) else {
        return Ok(None);
    };
    let py_version = elf.dynamic_symbol("Py_Version").map(|s| s.value);
    let version_string = match (py_version, minor_from_name(name)) {
        (None, Some((minor, _))) => {
            let rodata = elf.section(".rodata").and_then(|s| elf.section_data(s, MAX_RODATA).ok());
            rodata.and_then(|d| find_version_string(&d, minor))
        }
        _ => None,
    };
    let gil_functions = elf
        .symtab_symbols(|n| is_gil_function(n).is_some())
        .into_iter()
        .filter_map(|sym| {
            let file_offset = elf.sections.iter().find_map(|s| s.file_offset(sym.value))?;
            Some(GilFunction { take: is_gil_function(&sym.name)?, file_offset, name: sym.name })
        })
        .collect();
    // PyAPI_FUNC: exported by every build, stripped or static ones too
    let park = elf.dynamic_symbol(PARK).and_then(|sym| elf.sections.iter().find_map(|s| s.file_offset(sym.value)));
    Ok(Some(Binary {
        park,
        code_type: elf.dynamic_symbol(waitmeter_formats::pyframe::CODE_TYPE_SYMBOL).map(|s| s.value),
        exec: elf.kind == elf::ET_EXEC,
        load_base: elf.load_base,
        runtime,
        py_version,
        version_string,
        symtab: elf.has_symtab(),
        gil_functions,
        unmeasured: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::fixtures;

    fn read_counted(path: &Path) -> (Option<Binary>, u64, u64) {
        let file = File::open(path).unwrap();
        let size = file.metadata().unwrap().len();
        let src = FileSource::new(file, size);
        let found = read(&src, &path.to_string_lossy()).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        (found, src.bytes_read(), size)
    }

    /// Large executables that are not Python: a few kilobytes each (the
    /// headers, the section names, a `.gnu.hash` probe), however large the file.
    #[test]
    fn a_large_non_python_file_costs_kilobytes() {
        let mut seen = 0;
        for path in ["/proc/self/exe", "/usr/local/go/bin/go", "/usr/bin/node", "/usr/bin/prometheus", "/usr/bin/java"] {
            let path = Path::new(path);
            if !path.exists() {
                eprintln!("skipping {}: not on this machine", path.display());
                continue;
            }
            let (found, read, size) = read_counted(path);
            eprintln!("{}: {read} of {size} bytes read", path.display());
            assert_eq!(found, None, "{}", path.display());
            assert!(read <= 16 << 10, "{}: {read} of {size} bytes read", path.display());
            seen += 1;
        }
        assert!(seen >= 1);
    }

    /// A real CPython: its headers, symbol tables (and `.rodata` on 3.8–3.10)
    /// only, a small part of the file; what is found is what the whole file says.
    #[test]
    fn a_real_python_costs_its_symbol_tables() {
        let mut files = vec![];
        for minor in 8..=13 {
            match fixtures::pyenv_python(minor) {
                Some(py) => files.push(py.parent().unwrap().parent().unwrap().join(format!("lib/libpython3.{minor}.so.1.0"))),
                None => waitmeter_formats::testing::skip(&format!("3.{minor}: no pyenv build here")),
            }
        }
        files.push("/usr/bin/python3.11".into());
        for path in files.iter().filter(|p| p.exists()) {
            let path = std::fs::canonicalize(path).unwrap();
            let (found, read, size) = read_counted(&path);
            eprintln!("{}: {read} of {size} bytes read", path.display());
            let found = found.unwrap_or_else(|| panic!("{}: no runtime found", path.display()));
            assert!(read * 8 < size && read < 2 << 20, "{}: {read} of {size} bytes read", path.display());
            // the same answers as from the whole file in memory
            let data = std::fs::read(&path).unwrap();
            assert_eq!(read_bytes_of(&data, &path), found, "{}", path.display());
            let minor = minor_from_name(&path.to_string_lossy()).unwrap().0;
            if minor <= 10 {
                assert!(found.version_string.as_deref().is_some_and(|v| v.starts_with(&format!("3.{minor}."))), "{found:?}");
            } else {
                assert!(found.py_version.is_some(), "{found:?}");
            }
        }
    }

    /// CPython 2.7, 3.6 and 3.7 (pyenv's builds): recognised, with their version string and where
    /// their GIL lives (2.7: the `interpreter_lock` pointer; 3.6: the static locks; 3.7: `_PyRuntime`).
    #[test]
    fn an_interpreter_whose_gil_is_not_measured_is_recognised_with_its_gil_words() {
        let Some(root) = fixtures::pyenv_python(8).and_then(|p| p.parent()?.parent()?.parent().map(Path::to_path_buf)) else {
            waitmeter_formats::testing::skip("no pyenv here");
            return;
        };
        let mut seen = 0;
        for (version, lib) in [("2.7", "libpython2.7.so.1.0"), ("3.6", "libpython3.6m.so.1.0"), ("3.7", "libpython3.7m.so.1.0")] {
            let Some(dir) = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{version}."))))
            else {
                waitmeter_formats::testing::skip(&format!("{version}: no pyenv build here"));
                continue;
            };
            let path = dir.join("lib").join(lib);
            let (found, _, _) = read_counted(&path);
            let found = found.unwrap_or_else(|| panic!("{}: not recognised", path.display()));
            assert!(found.version_string.as_deref().is_some_and(|v| v.starts_with(&format!("{version}."))), "{found:?}");
            let words = found.unmeasured.expect("an unmeasured interpreter");
            let expected = match version {
                "2.7" => words.iter().any(|w| matches!(w, GilWords::Pointer { .. })),
                "3.6" => words.iter().filter(|w| matches!(w, GilWords::Static { size, .. } if *size >= 40)).count() == 4,
                _ => words.iter().any(|w| matches!(w, GilWords::Static { size, .. } if *size >= 1000)),
            };
            assert!(expected, "{version}: {words:?}");
            seen += 1;
        }
        assert!(seen >= 1);
    }

    /// A FIFO where a library was: refused at once, not waited on.
    #[test]
    fn a_fifo_is_not_opened_for_reading() {
        let dir = std::env::temp_dir().join(format!("waitmeter-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("libpython3.12.so.1.0");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = inspect(&fifo, "/usr/lib/libpython3.12.so.1.0").unwrap_err();
        assert!(format!("{err:#}").contains("not a regular file"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn read_bytes_of(data: &[u8], path: &Path) -> Binary {
        read(data, &path.to_string_lossy()).unwrap().unwrap()
    }

    /// End to end, counted by the kernel (this thread's `rchar`): `detect` on
    /// a process that is not Python reads a few kilobytes of its executable,
    /// plus /proc/PID/maps. Fails if detect reads the whole file again.
    #[test]
    fn detect_reads_kilobytes_of_a_non_python_process() {
        let rchar = || {
            let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
            io.lines().find_map(|l| l.strip_prefix("rchar: ")).unwrap().trim().parse::<u64>().unwrap()
        };
        // this test binary (5+ MB): nobody else detects it, so no cache hit
        let size = std::fs::metadata("/proc/self/exe").unwrap().len();
        let before = rchar();
        assert!(crate::python::detect(std::process::id()).unwrap().is_none());
        let read = rchar() - before;
        eprintln!("detect(self): {read} bytes read, executable {size} bytes");
        assert!(read < 128 << 10 && read * 10 < size, "{read} of {size}");
        // a second time: the cache answers, /proc/PID/maps is all that is read
        let before = rchar();
        assert!(crate::python::detect(std::process::id()).unwrap().is_none());
        let again = rchar() - before;
        eprintln!("detect(self) again: {again} bytes read");
        assert!(again < read, "{again} then {read}");
        let Some(node) = fixtures::spawn_ready("/usr/bin/node", &["-e", "console.log('ready'); setTimeout(() => {}, 60000)"], &[]) else {
            waitmeter_formats::testing::skip("node: /usr/bin/node is not here");
            return;
        };
        let size = std::fs::metadata("/usr/bin/node").unwrap().len();
        let before = rchar();
        assert!(crate::python::detect(node.pid()).unwrap().is_none());
        let read = rchar() - before;
        eprintln!("detect(node): {read} bytes read, executable {size} bytes");
        assert!(read < 128 << 10, "{read} of {size}");
    }
}
