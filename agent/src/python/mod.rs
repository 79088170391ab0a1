//! Everything waitmeter knows about CPython: finding the interpreter in a
//! process, its version and build, and its GILs. Version knowledge is data,
//! in `layout`; nothing outside this module matches on versions.
pub use waitmeter_formats::elf;
pub mod binary;
pub use waitmeter_formats::debug_offsets;
#[cfg(test)]
pub mod fixtures;
pub mod layout;
pub mod memory;
pub mod names;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use binary::Binary;
use debug_offsets::DebugOffsets;
use layout::{GilLocation, HolderId, Layout};
use memory::{at, Memory, Process};

/// Interpreters walked per process (a cyclic list ends at the first repeat).
const MAX_INTERPRETERS: usize = 256;

/// A `take_gil`/`drop_gil` function (or a compiler clone of one) in the binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GilFunction {
    pub name: String,
    /// offset in the file, as uprobes want it
    pub file_offset: u64,
    /// take_gil (else drop_gil)
    pub take: bool,
}

/// `take_gil`, `drop_gil` and their clones (`.constprop.0`, `.isra.0`,
/// `.part.0`, `.lto_priv.0`, chained); not the `.cold` fragments.
pub fn is_gil_function(name: &str) -> Option<bool> {
    let (take, rest) = if let Some(r) = name.strip_prefix("take_gil") { (true, r) } else { (false, name.strip_prefix("drop_gil")?) };
    let mut parts = rest.split('.').skip(1);
    if rest.is_empty() {
        return Some(take);
    }
    if !rest.starts_with('.') {
        return None;
    }
    loop {
        match (parts.next(), parts.next()) {
            (None, _) => return Some(take),
            (Some("constprop" | "isra" | "part" | "lto_priv"), Some(n)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {}
            _ => return None,
        }
    }
}

/// A CPython interpreter found in a process.
#[derive(Clone, Debug)]
pub struct Python {
    /// "3.11.7"
    pub version: String,
    pub free_threaded: bool,
    /// the file that holds `_PyRuntime`, as the target names it
    pub binary: PathBuf,
    /// that file has a `.symtab` (local symbols such as `take_gil`)
    pub symtab: bool,
    /// the layout of this interpreter; `None`: a version waitmeter does not
    /// know, or debug offsets it could not trust (`layout_error` says why)
    pub layout: Option<Layout>,
    pub layout_error: Option<String>,
    /// runtime address of `_PyRuntime`
    pub runtime: u64,
    /// GIL structs (one per interpreter with its own GIL); empty if unknown
    pub gils: Vec<u64>,
    /// the GIL is in use (always on default builds; 3.13t: only when enabled)
    pub gil_enabled: bool,
    /// take_gil/drop_gil and clones, from .symtab (empty when stripped)
    pub gil_functions: Vec<GilFunction>,
    /// file offset of `_PySemaphore_Wait` in `binary` (3.13+), where threads park
    pub park: Option<u64>,
    /// the path the agent opened `binary` by (through /proc/PID/...), for uprobes
    pub opened: PathBuf,
    /// how its frames and code objects are laid out (None: not known)
    pub frames: Option<waitmeter_formats::pyframe::FrameLayout>,
    /// runtime address of `PyCode_Type`
    pub code_type: Option<u64>,
    /// an interpreter whose GIL is not measured (2.x, 3.0–3.7): the address ranges its GIL's
    /// futex words lie in, when its symbols tell (the verdict names waits on them as the GIL's)
    pub unmeasured_gil: Vec<(u64, u64)>,
}

impl Python {
    /// `enabled`, `disabled` (free-threaded build running without it) or
    /// `unknown` (a version whose layout waitmeter does not have).
    pub fn gil_state(&self) -> &'static str {
        match (self.layout, self.gil_enabled) {
            (None, _) => "unknown",
            (Some(_), true) => "enabled",
            (Some(_), false) => "disabled",
        }
    }
}

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: String,
    /// mapped executable (its code runs from here)
    pub exec: bool,
}

pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let range = f.next()?;
            let perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path = f.collect::<Vec<_>>().join(" ");
            let (start, end) = range.split_once('-')?;
            let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
            path.starts_with('/').then_some(Mapping { start, end, offset, path, exec: perms.contains('x') })
        })
        .collect()
}

/// `libpython3.11.so.1.0` -> (11, false); `libpython3.13t.so` -> (13, true).
pub fn minor_from_name(name: &str) -> Option<(u32, bool)> {
    let base = name.rsplit('/').next()?;
    let rest = base.strip_prefix("libpython3.").or_else(|| base.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let minor = digits.parse().ok()?;
    let ft = rest[digits.len()..].starts_with('t');
    Some((minor, ft))
}

/// A CPython waitmeter does not measure the GIL of, by its file name: `libpython2.7.so.1.0`,
/// `python2.7`, `libpython3.6m.so.1.0`, `python3.7m` -> (major, minor); 2.x and 3.0–3.7 only.
pub fn unmeasured_from_name(name: &str) -> Option<(u32, u32)> {
    let base = name.rsplit('/').next()?;
    let rest = base.strip_prefix("libpython").or_else(|| base.strip_prefix("python"))?;
    let (major, rest) = rest.split_once('.')?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let (major, minor): (u32, u32) = (major.parse().ok()?, digits.parse().ok()?);
    (major == 2 || (major == 3 && minor <= 7)).then_some((major, minor))
}

/// The CPython versions whose GIL waitmeter measures, as the warnings and the verdict say them.
pub const MEASURED: &str = "CPython 3.8 and later";

/// "3.9.18" from PY_VERSION_HEX (0x030912f0).
pub fn version_from_hex(hex: u32) -> (u32, u32, u32) {
    (hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff)
}

/// Find the `PY_VERSION` string ("3.9.18") of minor `minor` in a binary: a
/// string "3.<minor>.<digits>" ending in NUL (or a "+" suffix), not preceded by a
/// digit or dot. The linker merges it into longer strings that end the same
/// way (".../Python-3.9.18"), so it need not start at a NUL.
pub fn find_version_string(data: &[u8], minor: u32) -> Option<String> {
    find_any_version_string(data, 3, minor)
}

/// `find_version_string` of any major version ("2.7.18").
pub fn find_any_version_string(data: &[u8], major: u32, minor: u32) -> Option<String> {
    let needle = format!("{major}.{minor}.");
    let n = needle.as_bytes();
    let mut i = 0;
    while let Some(pos) = data.get(i..)?.windows(n.len()).position(|w| w == n) {
        let at = i + pos;
        let tail = &data[at + n.len()..];
        let digits = tail.iter().take_while(|b| b.is_ascii_digit()).count();
        let before_ok = at == 0 || !(data[at - 1].is_ascii_digit() || data[at - 1] == b'.');
        let after = tail.get(digits).copied();
        if before_ok && digits > 0 && digits <= 2 && matches!(after, Some(0) | Some(b'+')) {
            return Some(format!("{major}.{minor}.{}", std::str::from_utf8(&tail[..digits]).ok()?));
        }
        i = at + 1;
    }
    None
}

pub(crate) fn target_path(pid: u32, path: &str) -> PathBuf {
    // through the target's root: right inside containers too
    PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// Find CPython in process `pid` (a PID of the agent's namespace).
/// `Ok(None)`: not a Python process. Reads a few kilobytes of each candidate
/// file (see `binary`), once per file.
pub fn detect(pid: u32) -> Result<Option<Python>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).with_context(|| format!("failed to read /proc/{pid}/maps"))?;
    let maps = parse_maps(&maps);
    let exe_link = std::fs::read_link(format!("/proc/{pid}/exe"));
    // what could not be read for lack of permission (reported when no interpreter was found)
    let mut denied: Option<String> = match &exe_link {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(format!("/proc/{pid}/exe: {e}")),
        _ => None,
    };
    let exe = exe_link.ok().map(|p| p.to_string_lossy().to_string());
    // libpython first (a shared build's executable has no _PyRuntime), then the executable
    let mut candidates: Vec<String> = vec![];
    for m in &maps {
        let base = Path::new(&m.path).file_name().and_then(|n| n.to_str()).unwrap_or("");
        if base.starts_with("libpython") && !candidates.contains(&m.path) {
            candidates.push(m.path.clone());
        }
    }
    let exe = exe.map(|e| e.trim_end_matches(" (deleted)").to_string());
    if let Some(e) = &exe {
        if !candidates.contains(e) {
            candidates.push(e.clone());
        }
    }
    for path in candidates {
        // the file as the target names it, through its root (containers); else the
        // kernel's own handle on it: a process in a chroot names files by paths of the
        // host's root (/proc/PID/exe, or the mapping's /proc/PID/map_files entry)
        let mut opened = target_path(pid, &path);
        let kind = |e: &anyhow::Error| e.downcast_ref::<std::io::Error>().map(|e| e.kind());
        let bin = match binary::inspect(&opened, &path) {
            // a directory on the way the agent's user may not enter (/root): the kernel's
            // handle on the executable bypasses it
            Err(e) if kind(&e) == Some(std::io::ErrorKind::PermissionDenied) && exe.as_ref() == Some(&path) => {
                opened = format!("/proc/{pid}/exe").into();
                binary::inspect(&opened, &path)
            }
            Err(e) if kind(&e) == Some(std::io::ErrorKind::NotFound) => {
                opened = match maps.iter().find(|m| m.path == path) {
                    Some(m) if exe.as_ref() != Some(&path) => format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end),
                    _ => format!("/proc/{pid}/exe"),
                }
                .into();
                binary::inspect(&opened, &path)
            }
            other => other,
        };
        let bin = match bin {
            Ok(Some(bin)) => bin,
            Ok(None) => continue,
            Err(e) => {
                log::debug!("process {pid}: {e:#}");
                if kind(&e) == Some(std::io::ErrorKind::PermissionDenied) {
                    denied.get_or_insert_with(|| format!("{path}: permission denied"));
                }
                continue;
            }
        };
        let Some(start) = maps.iter().filter(|m| m.path == path).filter_map(|m| m.start.checked_sub(m.offset)).min() else { continue };
        // modular on purpose: a library linked above the address it was loaded at has a "negative" bias
        let bias = if bin.exec { 0 } else { start.wrapping_sub(bin.load_base) };
        let runtime = bias.wrapping_add(bin.runtime);
        return Ok(Some(describe(&Process::new(pid), &path, opened, &bin, bias, runtime)?));
    }
    match denied {
        Some(what) => {
            let why = if crate::procfs::self_cap_eff().is_some_and(|c| c & (1 << crate::procfs::CAP_SYS_PTRACE) != 0) {
                "the agent's user cannot reach that file (a directory on the way it may not enter, such as /root): \
                 run waitmeter as root, or the interpreter from a directory others can enter"
            } else {
                "reading a process of another user needs CAP_SYS_PTRACE: run as root or grant it \
                 (sudo setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep $(command -v waitmeter))"
            };
            anyhow::bail!("cannot read {what}: {why}")
        }
        None => Ok(None),
    }
}

fn describe(mem: &dyn Memory, path: &str, opened: PathBuf, bin: &Binary, bias: u64, runtime: u64) -> Result<Python> {
    if let Some(words) = &bin.unmeasured {
        return Ok(describe_unmeasured(mem, path, opened, bin, bias, words));
    }
    let from_name = minor_from_name(path);
    // 3.11+ export Py_Version = PY_VERSION_HEX
    let hex = bin.py_version.and_then(|v| mem.read_u32(bias.wrapping_add(v)).ok());
    let (minor, version) = match hex {
        Some(h) if h >> 24 == 3 => {
            let (_, minor, micro) = version_from_hex(h);
            (minor, format!("3.{minor}.{micro}"))
        }
        _ => {
            let minor = from_name.map(|f| f.0).context("cannot tell the Python version: no Py_Version and no version in the file name")?;
            (minor, bin.version_string.clone().unwrap_or_else(|| format!("3.{minor}")))
        }
    };
    // 3.13+: _Py_DebugOffsets at the start of _PyRuntime describes the interpreter
    let mut free_threaded = from_name.is_some_and(|f| f.1);
    let mut frames = None;
    let (layout, layout_error) = if minor >= 13 {
        let len = debug_offsets::READ_LEN as u64;
        match mem.read_bytes(runtime, len, len).and_then(|b| DebugOffsets::parse(&b)) {
            Ok(o) if o.minor() == minor => {
                free_threaded = o.free_threaded;
                frames = Some(waitmeter_formats::pyframe::frame_layout_from(&o));
                (Some(layout::from_debug_offsets(&o)), None)
            }
            Ok(o) => (None, Some(format!("its debug offsets say 3.{}, its Py_Version 3.{minor}", o.minor()))),
            Err(e) => (None, Some(format!("{e:#}"))),
        }
    } else {
        frames = waitmeter_formats::pyframe::frame_layout(minor, free_threaded);
        (layout::layout(minor, free_threaded), None)
    };
    let gils = match &layout {
        Some(l) => gil_addresses(mem, runtime, l).unwrap_or_default(),
        None => vec![],
    };
    let gil_enabled = gil_enabled(mem, layout.as_ref(), &gils);
    Ok(Python {
        frames,
        code_type: bin.code_type.map(|v| bias.wrapping_add(v)),
        version,
        gil_functions: bin.gil_functions.clone(),
        park: bin.park,
        opened,
        free_threaded,
        binary: PathBuf::from(path),
        symtab: bin.symtab,
        layout,
        layout_error,
        runtime,
        gils,
        gil_enabled,
        unmeasured_gil: vec![],
    })
}

/// A CPython whose GIL waitmeter does not measure (2.x, 3.0–3.7): its version, and where its
/// GIL's futex words lie (a static lock's symbol; 2.7's `interpreter_lock` points at its lock).
fn describe_unmeasured(mem: &dyn Memory, path: &str, opened: PathBuf, bin: &Binary, bias: u64, words: &[binary::GilWords]) -> Python {
    let version = bin.version_string.clone().unwrap_or_else(|| match unmeasured_from_name(path) {
        Some((major, minor)) => format!("{major}.{minor}"),
        None => "2.x or 3.0–3.7".into(),
    });
    let unmeasured_gil = words
        .iter()
        .filter_map(|w| match *w {
            binary::GilWords::Static { addr, size } => Some((bias.wrapping_add(addr), bias.wrapping_add(addr).saturating_add(size))),
            // a glibc semaphore (or a mutex and condition): 32 bytes hold its futex words
            binary::GilWords::Pointer { addr } => {
                mem.read_u64(bias.wrapping_add(addr)).ok().filter(|p| *p != 0).map(|p| (p, p.saturating_add(96)))
            }
        })
        .collect();
    Python {
        frames: None,
        code_type: None,
        version,
        gil_functions: vec![],
        park: None,
        opened,
        free_threaded: false,
        binary: PathBuf::from(path),
        symtab: bin.symtab,
        layout: None,
        layout_error: None,
        runtime: 0,
        gils: vec![],
        gil_enabled: true,
        unmeasured_gil,
    }
}

/// Whether the GIL is in use: always on a default build; on a free-threaded
/// one, when `_gil.enabled` of any GIL is set (`PYTHON_GIL=1` at start-up, or
/// an extension that needs it at run time: re-read every window).
pub fn gil_enabled(mem: &dyn Memory, layout: Option<&Layout>, gils: &[u64]) -> bool {
    match layout.and_then(|l| l.enabled) {
        Some(off) => gils.iter().any(|g| at(*g, off).and_then(|a| mem.read_u32(a)).is_ok_and(|e| e != 0)),
        None => layout.is_some(),
    }
}

/// The GIL structs of the process: the global one, or one per interpreter.
/// A GIL so high in the address space that its futex words would wrap is left out.
/// `sys.getswitchinterval()` of the interpreter whose GIL is at `gil`, µs:
/// the GIL struct's first field (`interval`, an unsigned long, in every
/// version; docs of ../shared/reference/cpython-gil.md). None when the read
/// fails or the value is not one CPython would hold (0, or over 10 s).
pub fn switch_interval_us(mem: &dyn Memory, gil: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read(gil, &mut b).ok()?;
    let us = u64::from_ne_bytes(b);
    (1..=10_000_000).contains(&us).then_some(us)
}

pub fn gil_addresses(mem: &dyn Memory, runtime: u64, l: &Layout) -> Result<Vec<u64>> {
    match l.gil {
        GilLocation::Runtime { offset } => {
            Ok(Some(at(runtime, offset)?).filter(|g| l.checked_futex_words(*g).is_some()).into_iter().collect())
        }
        GilLocation::PerInterpreter { head, next, gil_ptr } => {
            let mut out = vec![];
            for interp in interpreters(mem, at(runtime, head)?, next)? {
                let gil = mem.read_ptr(at(interp, gil_ptr)?)?;
                if gil != 0 && !out.contains(&gil) && l.checked_futex_words(gil).is_some() {
                    out.push(gil);
                }
            }
            Ok(out)
        }
    }
}

/// The interpreters of a process (`PyInterpreterState*`): the list whose
/// head pointer is at `head` (`&_PyRuntime.interpreters.head`), linked at
/// `next`; at most MAX_INTERPRETERS, and a cycle ends it.
pub fn interpreters(mem: &dyn Memory, head: u64, next: u64) -> Result<Vec<u64>> {
    let mut out = vec![];
    let mut seen = std::collections::HashSet::new();
    let mut interp = mem.read_ptr(head)?;
    for _ in 0..MAX_INTERPRETERS {
        if interp == 0 || !seen.insert(interp) {
            break;
        }
        out.push(interp);
        interp = mem.read_ptr(at(interp, next)?)?;
    }
    Ok(out)
}

/// How the holder ids that the probe records name threads in this process.
pub fn holder_id(p: &Python) -> Option<HolderId> {
    p.layout.map(|l| l.holder_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let maps = "7f0000000000-7f0000001000 r--p 00000000 08:01 123 /usr/lib/libpython3.11.so.1.0\n\
                    7f0000001000-7f0000002000 r-xp 00001000 08:01 123 /usr/lib/libpython3.11.so.1.0\n\
                    7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0 [stack]\n\
                    7f0000003000-7f0000004000 r--p 00000000 08:01 9 /tmp/a b.so\n";
        let m = parse_maps(maps);
        assert_eq!(m.len(), 3);
        assert_eq!(
            m[1],
            Mapping {
                start: 0x7f0000001000,
                end: 0x7f0000002000,
                offset: 0x1000,
                path: "/usr/lib/libpython3.11.so.1.0".into(),
                exec: true
            }
        );
        assert_eq!(m[2].path, "/tmp/a b.so");
    }

    #[test]
    fn names_and_versions() {
        assert_eq!(minor_from_name("/usr/lib/libpython3.11.so.1.0"), Some((11, false)));
        assert_eq!(minor_from_name("libpython3.13t.so.1.0"), Some((13, true)));
        assert_eq!(minor_from_name("/usr/bin/python3.9"), Some((9, false)));
        assert_eq!(minor_from_name("/usr/bin/python"), None);
        assert_eq!(unmeasured_from_name("/root/.pyenv/versions/2.7.18/lib/libpython2.7.so.1.0"), Some((2, 7)));
        assert_eq!(unmeasured_from_name("libpython3.6m.so.1.0"), Some((3, 6)));
        assert_eq!(unmeasured_from_name("/usr/bin/python3.7"), Some((3, 7)));
        assert_eq!(unmeasured_from_name("/usr/bin/python3.8"), None);
        assert_eq!(unmeasured_from_name("/usr/bin/python3.11"), None);
        assert_eq!(unmeasured_from_name("/usr/bin/python"), None);
        assert_eq!(unmeasured_from_name("/usr/bin/pythonista"), None);
        assert_eq!(version_from_hex(0x030b07f0), (3, 11, 7));
        assert_eq!(version_from_hex(0x030c01f0), (3, 12, 1));
    }

    #[test]
    fn gil_function_names() {
        for (n, want) in [
            ("take_gil", Some(true)),
            ("drop_gil", Some(false)),
            ("take_gil.constprop.0", Some(true)),
            ("take_gil.lto_priv.0", Some(true)),
            ("drop_gil.isra.0.constprop.1", Some(false)),
            ("take_gil.lto_priv.0.cold", None),
            ("take_gil.cold", None),
            ("take_gilx", None),
            ("_take_gil", None),
            ("take_gil.constprop.", None),
        ] {
            assert_eq!(is_gil_function(n), want, "{n}");
        }
    }

    #[test]
    fn gil_state_words() {
        let mut p = Python {
            frames: None,
            code_type: None,
            version: "3.14.7".into(),
            free_threaded: true,
            binary: "libpython3.14t.so".into(),
            symtab: false,
            layout: Some(layout::from_debug_offsets(
                &DebugOffsets::parse(
                    &std::fs::read(format!("{}/formats/testdata/debug_offsets/3.14.7t.bin", crate::manifest_dir())).unwrap(),
                )
                .unwrap(),
            )),
            layout_error: None,
            runtime: 0,
            gils: vec![0x1000],
            gil_enabled: false,
            unmeasured_gil: vec![],
            gil_functions: vec![],
            park: None,
            opened: "/proc/1/root/libpython3.14t.so".into(),
        };
        // 3.14t as it runs by default: the GIL struct exists, `enabled` is 0
        assert_eq!(p.gil_state(), "disabled");
        p.gil_enabled = true; // PYTHON_GIL=1
        assert_eq!(p.gil_state(), "enabled");
        p.layout = None;
        assert_eq!(p.gil_state(), "unknown");
    }

    #[test]
    fn version_string_scan() {
        let data = b"junk3.10.1x\x00other\x003.10.13\x00more";
        assert_eq!(find_version_string(data, 10).as_deref(), Some("3.10.13"));
        assert_eq!(find_version_string(b"\x003.9.18+\x00", 9).as_deref(), Some("3.9.18"));
        assert_eq!(find_version_string(b"\x003.9.x\x00", 9), None);
        assert_eq!(find_version_string(b"/src/Python-3.8.18\x00", 8).as_deref(), Some("3.8.18"));
        assert_eq!(find_version_string(b"13.8.18\x00", 8), None);
        assert_eq!(find_version_string(b"", 9), None);
        assert_eq!(find_any_version_string(b"\x002.7.18\x00", 2, 7).as_deref(), Some("2.7.18"));
        assert_eq!(find_any_version_string(b"\x0012.7.18\x00", 2, 7), None);
    }
}
