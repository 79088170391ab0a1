//! Java frames, named by the method they run: interpreted ones by the `Method*` in their frame,
//! compiled ones by the code cache's nmethod that holds their address.
//!
//! HotSpot's perf map names compiled methods; every interpreted frame runs the same template
//! interpreter, which the map can only call `Interpreter`. A method that holds a lock but is
//! called too rarely to be compiled (a `synchronized` order book matched twenty times a second)
//! was a column of `Interpreter` frames. The probe records an interpreted frame as the
//! `Method*` its frame holds (`bpf/stacks.bpf.h`, tagged `WM_JAVA_METHOD`), inside the
//! interpreter's code range this module gives it; this module reads the method's class and name
//! from the JVM's memory by the layout libjvm describes (`formats::hotspot`: VMStructs).
//!
//! Compiled frames are named by a perf map when the JVM writes one (`jit.rs`); without one (the
//! default), by the code cache, as HotSpot finds the blob of an address itself: the code heap
//! that holds it, its segment map walked back to the block's start, the `nmethod` there and its
//! `Method*`, and the methods the compiler inlined at that address, from the nmethod's own debug
//! information (its `PcDesc` there and the scopes it describes), as HotSpot names them in a
//! stack trace: a `synchronized` method inlined into its caller is a frame of its own.
//!
//! Per process: libjvm's exported tables found once (its `.dynsym`, through the process's root),
//! the layout read once, each method's name once (a bounded cache). A JVM whose tables cannot be
//! read is said once, and its interpreted frames stay `Interpreter`.
use std::collections::HashMap;

use crate::python::binary::FileSource;
use crate::python::memory::{Memory as _, Process};
use waitmeter_formats::elf::Elf;
use waitmeter_formats::hotspot::{self, Globals, Layout};

/// Method names kept per agent (cleared when full).
const MAX_NAMES: usize = 1 << 16;

struct Mem(Process);

impl hotspot::Memory for Mem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.read(addr, buf).is_ok()
    }
}

#[derive(Default)]
pub struct Hotspot {
    /// pid -> its JVM's layout (None: not a HotSpot JVM, or its tables could not be read)
    procs: HashMap<u32, Option<Layout>>,
    /// (pid, Method*) -> its name
    names: HashMap<(u32, u64), Option<String>>,
}

/// libjvm's globals in process `pid` (its `/proc/PID/maps` as `text`), when it maps one.
fn globals(pid: u32, text: &str) -> anyhow::Result<Option<Globals>> {
    let Some(m) =
        crate::python::parse_maps(text).into_iter().find(|m| m.exec && m.path.rsplit('/').next().is_some_and(|b| b == "libjvm.so"))
    else {
        return Ok(None);
    };
    let file = std::fs::File::open(crate::python::target_path(pid, &m.path))?;
    let size = file.metadata()?.len();
    let src = FileSource::new(file, size);
    let elf = Elf::parse(&src)?;
    let text = elf.section(".text").filter(|s| s.addr != 0).ok_or_else(|| anyhow::anyhow!("{}: no .text section", m.path))?;
    // the object's load bias: its code mapping less the code's link-time place in the file
    let bias = m.start.wrapping_sub(m.offset).wrapping_sub(text.addr.wrapping_sub(text.offset));
    let mut a = [0u64; 11];
    for (slot, name) in a.iter_mut().zip(Globals::SYMBOLS) {
        let s = elf.dynamic_symbol(name).ok_or_else(|| anyhow::anyhow!("{}: no {name} (not HotSpot, or too old)", m.path))?;
        *slot = s.value.wrapping_add(bias);
    }
    Ok(Some(Globals::from_addresses(a)))
}

impl Hotspot {
    fn layout(&mut self, pid: u32) -> Option<Layout> {
        if let Some(l) = self.procs.get(&pid) {
            return *l;
        }
        // maps that cannot be read say nothing of a JVM (the Python check has said so already)
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            self.procs.insert(pid, None);
            return None;
        };
        let l = match globals(pid, &text) {
            Ok(None) => None,
            Ok(Some(g)) => match hotspot::layout(&Mem(Process::new(pid)), &g) {
                Ok(l) => Some(l),
                Err(e) => {
                    log::warn!("process {pid}: its JVM's structures are not read ({e:#}): interpreted Java frames stay `Interpreter`");
                    None
                }
            },
            Err(e) => {
                log::warn!("process {pid}: its JVM's libjvm is not read ({e:#}): interpreted Java frames stay `Interpreter`");
                None
            }
        };
        self.procs.insert(pid, l);
        l
    }

    /// The interpreter's code of process `pid` (a PID of the agent's namespace), when it is a
    /// HotSpot JVM whose structures are read.
    pub fn interpreter(&mut self, pid: u32) -> Option<(u64, u64)> {
        let l = self.layout(pid)?;
        hotspot::interpreter(&Mem(Process::new(pid)), &l)
    }

    /// The name of the Java method `method` (a `Method*`) in process `pid`.
    pub fn method(&mut self, pid: u32, method: u64) -> Option<String> {
        if let Some(n) = self.names.get(&(pid, method)) {
            return n.clone();
        }
        let l = self.layout(pid)?;
        if self.names.len() >= MAX_NAMES {
            self.names.clear();
        }
        let name = hotspot::method_name(&Mem(Process::new(pid)), &l, method);
        self.names.insert((pid, method), name.clone());
        name
    }

    /// The names of the compiled Java methods running at `pc` in process `pid`, innermost first (those
    /// inlined there, then the compilation's), or of the runtime's stub there, found in the JVM's
    /// code cache (`formats::hotspot::code_blob`): what a perf map would say, without one, and the
    /// inlined methods it cannot say. None when `pid` is no HotSpot JVM whose tables are read, or `pc` is in no
    /// blob of its code cache.
    pub fn compiled(&mut self, pid: u32, pc: u64) -> Option<Vec<String>> {
        let l = self.layout(pid)?;
        match hotspot::code_blob(&Mem(Process::new(pid)), &l, pc)? {
            hotspot::Blob::Methods(methods) => {
                let names: Vec<String> = methods.into_iter().filter_map(|m| self.method(pid, m)).collect();
                (!names.is_empty()).then_some(names)
            }
            // the runtime's own code, as its perf map names it, marked as the JVM's where the name
            // does not say so (`monitorexit_nofpu Runtime1 stub`): a stub, passed over in a site
            hotspot::Blob::Stub(name) if crate::model::stacks::is_runtime_stub(&name) => Some(vec![name]),
            hotspot::Blob::Stub(name) => Some(vec![format!("JVM {name}")]),
        }
    }

    /// Whether process `pid` is a HotSpot JVM whose code cache is read (its compiled frames are
    /// named without a perf map).
    pub fn reads_code_cache(&mut self, pid: u32) -> bool {
        self.layout(pid).is_some_and(|l| l.code_cache.is_some())
    }

    /// Forget a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.names.retain(|(p, _), _| *p != pid);
    }
}
