//! Test fixtures for `python/`: real interpreters on the machine (pyenv's
//! builds, run under a guard that kills them on drop), and hand-built memory
//! images of CPython objects laid out as a version's `Objects` says.
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::layout::{InstanceDict, Objects};
use super::memory::Recorded;

/// The newest pyenv build of 3.`minor` (`$PYENV_ROOT`, else `~/.pyenv`).
pub fn pyenv_python(minor: u32) -> Option<PathBuf> {
    let root =
        std::env::var_os("PYENV_ROOT").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))?;
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let patch = name.strip_prefix(&format!("3.{minor}."))?.parse().ok()?;
            let py = root.join("versions").join(&name).join("bin/python3");
            py.exists().then_some((patch, py))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// CPython 3.`minor`: pyenv's build, else the one `make setup` builds in
/// `.pythons/` (3.14, 3.15).
pub fn python(minor: u32) -> Option<PathBuf> {
    pyenv_python(minor).or_else(|| {
        let built = PathBuf::from(crate::manifest_dir()).join(format!("../.pythons/bin/python3.{minor}"));
        built.exists().then_some(built)
    })
}

/// A recorded image in a file: `wmimage1`, `_PyRuntime`'s address, then
/// regions of (address, length: u64 LE, bytes).
pub fn save_image(path: &std::path::Path, runtime: u64, mem: &Recorded) -> std::io::Result<()> {
    let mut out = b"wmimage1".to_vec();
    out.extend_from_slice(&runtime.to_le_bytes());
    for (addr, bytes) in mem.regions() {
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    std::fs::write(path, out)
}

/// An image saved by `save_image`: (`_PyRuntime`, memory).
pub fn load_image(data: &[u8]) -> (u64, Recorded) {
    let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
    assert_eq!(&data[..8], b"wmimage1");
    let runtime = word(8);
    let (mut mem, mut at) = (Recorded::default(), 16);
    while at < data.len() {
        let (addr, len) = (word(at), word(at + 8) as usize);
        mem.insert(addr, &data[at + 16..at + 16 + len]);
        at += 16 + len;
    }
    (runtime, mem)
}

/// A child process killed (and reaped) on drop.
pub struct Guard(Child);

impl Guard {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `program` and wait for the first line it prints (its readiness
/// signal); `None` when the program is not on this machine.
pub fn spawn_ready(program: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Guard> {
    if !std::path::Path::new(program).exists() {
        return None;
    }
    let mut child = Command::new(program).args(args).envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().ok()?;
    let stdout = child.stdout.take().expect("piped");
    let guard = Guard(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("the child's first line");
    assert!(!line.is_empty(), "{program} exited before it was ready");
    Some(guard)
}

/// A Python script that names threads, starts them, prints `ready` and waits.
pub const NAMED_THREADS: &str = "import threading
ev = threading.Event()
for n in ['ingest', 'processor', 'R\u{fc}hrwerk', '\u{7dda}\u{7a0b}']:
    threading.Thread(target=ev.wait, name=n, daemon=True).start()
print('ready', flush=True)
ev.wait(60)
";

const TP_BASICSIZE: usize = 32;
const TP_FLAGS: usize = 168;
const TP_DICTOFFSET: usize = 288;

/// A memory image under construction: objects placed by a bump allocator,
/// each followed by a gap (a read past an object faults, as it may in a process).
pub struct Image {
    pub mem: Recorded,
    pub o: Objects,
    next: u64,
}

fn put(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

impl Image {
    pub fn new(o: Objects) -> Image {
        Image { mem: Recorded::default(), o, next: 0x7f00_0000_0000 }
    }

    /// Place `pre` then `body`; the address of `body`.
    pub fn alloc_with(&mut self, pre: &[u8], body: &[u8]) -> u64 {
        let addr = self.next + pre.len() as u64;
        self.mem.insert(self.next, &[pre, body].concat());
        self.next = (addr + body.len() as u64 + 64 + 15) & !15;
        addr
    }

    pub fn alloc(&mut self, body: &[u8]) -> u64 {
        self.alloc_with(&[], body)
    }

    /// Overwrite recorded bytes (to corrupt an image).
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        self.mem.insert(addr, bytes);
    }

    pub fn write_u64(&mut self, addr: u64, v: u64) {
        self.write(addr, &v.to_le_bytes());
    }

    /// A compact str: ASCII, latin-1, UCS-2 or UCS-4 as its widest character needs.
    pub fn str(&mut self, s: &str) -> u64 {
        let chars: Vec<u32> = s.chars().map(u32::from).collect();
        let widest = chars.iter().copied().max().unwrap_or(0);
        let (kind, ascii) = match widest {
            0..=0x7f => (1, true),
            0x80..=0xff => (1, false),
            0x100..=0xffff => (2, false),
            _ => (4, false),
        };
        let head = if ascii { self.o.ascii_size } else { self.o.compact_size } as usize;
        let mut b = vec![0u8; head + (chars.len() + 1) * kind];
        put(&mut b, 16, chars.len() as u64);
        let state: u32 = (kind as u32) << 2 | 1 << 5 | u32::from(ascii) << 6;
        b[32..36].copy_from_slice(&state.to_le_bytes());
        for (i, c) in chars.iter().enumerate() {
            b[head + i * kind..][..kind].copy_from_slice(&c.to_le_bytes()[..kind]);
        }
        self.alloc(&b)
    }

    /// A non-negative int (30-bit digits).
    pub fn int(&mut self, v: u64) -> u64 {
        let mut digits = vec![];
        let mut x = v;
        while x != 0 {
            digits.push((x & 0x3fff_ffff) as u32);
            x >>= 30;
        }
        let n = digits.len() as u64;
        let size = if !self.o.long_tagged {
            n
        } else if v == 0 {
            1 // the zero sign
        } else {
            n << 3
        };
        let mut b = vec![0u8; 24 + 4 * digits.len().max(1)];
        put(&mut b, 16, size);
        for (i, d) in digits.iter().enumerate() {
            b[24 + i * 4..][..4].copy_from_slice(&d.to_le_bytes());
        }
        self.alloc(&b)
    }

    /// A dict keys object: `general` (any keys: hash, key, value), unicode
    /// (key, value) or split (keys only, values elsewhere; `values` ignored).
    pub fn keys(&mut self, items: &[(u64, u64)], general: bool, split: bool) -> u64 {
        let n = items.len();
        if self.o.keys_v311 {
            let (kind, stride) = match (general, split) {
                (true, _) => (0u8, 24),
                (false, false) => (1, 16),
                (false, true) => (2, 16),
            };
            let first = 32 + 8; // log2 index bytes 3: 8 bytes of indices
            let mut b = vec![0u8; first + n * stride];
            b[8] = 3;
            b[9] = 3;
            b[10] = kind;
            put(&mut b, 16, 0);
            put(&mut b, 24, n as u64);
            for (i, (k, v)) in items.iter().enumerate() {
                let e = first + i * stride + if general { 8 } else { 0 };
                put(&mut b, e, *k);
                put(&mut b, e + 8, if split { 0 } else { *v });
            }
            self.alloc(&b)
        } else {
            let first = 40 + 8; // dk_size 8: one byte per index
            let mut b = vec![0u8; first + n * 24];
            put(&mut b, 8, 8);
            put(&mut b, 32, n as u64);
            for (i, (k, v)) in items.iter().enumerate() {
                put(&mut b, first + i * 24 + 8, *k);
                put(&mut b, first + i * 24 + 16, if split { 0 } else { *v });
            }
            self.alloc(&b)
        }
    }

    /// A dict with its own (combined) keys.
    pub fn dict(&mut self, items: &[(u64, u64)], general: bool) -> u64 {
        let keys = self.keys(items, general, false);
        let mut b = vec![0u8; 48];
        put(&mut b, 32, keys);
        self.alloc(&b)
    }

    /// A dict of str keys.
    pub fn str_dict(&mut self, items: &[(&str, u64)]) -> u64 {
        let items: Vec<(u64, u64)> = items.iter().map(|(k, v)| (self.str(k), *v)).collect();
        self.dict(&items, !self.o.keys_v311)
    }

    /// A module object with its `__dict__`.
    pub fn module(&mut self, dict: u64) -> u64 {
        let mut b = vec![0u8; 48];
        put(&mut b, 16, dict);
        self.alloc(&b)
    }

    /// A Python class whose instances have the attributes `names` (shared
    /// keys on 3.11+; a dict at `tp_dictoffset` before).
    pub fn class(&mut self, names: &[&str]) -> u64 {
        let keys: Vec<(u64, u64)> = names.iter().map(|n| (self.str(n), 0)).collect();
        let shared = self.keys(&keys, false, true);
        let mut b = vec![0u8; 1024];
        put(&mut b, TP_BASICSIZE, 16);
        let flags = match self.o.instance_dict {
            InstanceDict::DictOffset => 0,
            InstanceDict::Managed311 | InstanceDict::Tagged312 => 1 << 4,
            InstanceDict::Inline313 => 1 << 4 | 1 << 2,
        };
        put(&mut b, TP_FLAGS, flags);
        put(&mut b, TP_DICTOFFSET, if self.o.instance_dict == InstanceDict::DictOffset { 16 } else { 0 });
        put(&mut b, self.o.ht_cached_keys as usize, shared);
        self.alloc(&b)
    }

    /// An instance of `class` (made by `class(names)`) with those attribute values.
    pub fn instance(&mut self, class: u64, names: &[&str], values: &[u64]) -> u64 {
        let mut body = vec![0u8; 16];
        put(&mut body, 8, class);
        let words = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        match self.o.instance_dict {
            InstanceDict::DictOffset => {
                let items: Vec<(&str, u64)> = names.iter().copied().zip(values.iter().copied()).collect();
                let dict = self.str_dict(&items);
                body.resize(24, 0);
                put(&mut body, 16, dict);
                self.alloc(&body)
            }
            InstanceDict::Managed311 => {
                let vals = self.alloc(&words(values));
                let mut pre = vec![0u8; 32];
                put(&mut pre, 0, vals); // obj-32: values; obj-24: dict (none)
                self.alloc_with(&pre, &body)
            }
            InstanceDict::Tagged312 => {
                let vals = self.alloc(&words(values));
                let mut pre = vec![0u8; 32];
                put(&mut pre, 8, vals - 1); // obj-24: values - 1
                self.alloc_with(&pre, &body)
            }
            InstanceDict::Inline313 => {
                // values inline at tp_basicsize: capacity, size, embedded, valid, then values[]
                body.extend_from_slice(&[values.len() as u8, values.len() as u8, 1, 1, 0, 0, 0, 0]);
                body.extend_from_slice(&words(values));
                self.alloc_with(&[0u8; 32], &body)
            }
        }
    }

    /// `_PyRuntime` whose first interpreter's `sys.modules` is `modules`.
    pub fn runtime(&mut self, modules: u64) -> u64 {
        let mut interp = vec![0u8; self.o.interp_modules as usize + 8];
        put(&mut interp, self.o.interp_modules as usize, modules);
        let interp = self.alloc(&interp);
        let mut rt = vec![0u8; self.o.interp_head as usize + 8];
        put(&mut rt, self.o.interp_head as usize, interp);
        self.alloc(&rt)
    }
}

/// Threads as `threading` keeps them: (ident, name).
pub type Threads<'a> = &'a [(u64, &'a str)];

/// An image of a process that imported `threading` and runs `threads`: its
/// `_PyRuntime` address and, per thread, the address of its Thread object.
pub fn threading_image(o: Objects, threads: Threads) -> (Image, u64, Vec<u64>) {
    let mut im = Image::new(o);
    let attrs = ["_target", "_name", "_args", "_daemonic"];
    let class = im.class(&attrs);
    let none = im.alloc(&[0u8; 16]);
    let mut active = vec![];
    let mut objects = vec![];
    for (ident, name) in threads {
        let name = im.str(name);
        let thread = im.instance(class, &attrs, &[none, name, none, none]);
        let ident = im.int(*ident);
        active.push((ident, thread));
        objects.push(thread);
    }
    let active = im.dict(&active, true);
    let limbo = im.dict(&[], true);
    let threading_dict = im.str_dict(&[("__name__", none), ("_limbo", limbo), ("_active", active)]);
    let threading = im.module(threading_dict);
    let sys = im.module(none);
    let modules = im.str_dict(&[("sys", sys), ("builtins", none), ("threading", threading)]);
    let runtime = im.runtime(modules);
    (im, runtime, objects)
}
