//! Interpreted Java frames, named by the method they run.
//!
//! HotSpot's perf map names compiled methods; every interpreted frame runs the same template
//! interpreter, which the map can only call `Interpreter`. A method that holds a lock but is
//! called too rarely to be compiled (a `synchronized` order book matched twenty times a second)
//! was a column of `Interpreter` frames. The probe records an interpreted frame as the
//! `Method*` its frame holds (`bpf/stacks.bpf.h`, tagged `WM_JAVA_METHOD`), inside the
//! interpreter's code range this module gives it; this module reads the method's class and name
//! from the JVM's memory by the layout libjvm describes (`formats::hotspot`: VMStructs).
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

/// libjvm's globals in process `pid`, when it maps one.
fn globals(pid: u32) -> anyhow::Result<Option<Globals>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let Some(m) =
        crate::python::parse_maps(&text).into_iter().find(|m| m.exec && m.path.rsplit('/').next().is_some_and(|b| b == "libjvm.so"))
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
        let l = match globals(pid) {
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

    /// Forget a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.names.retain(|(p, _), _| *p != pid);
    }
}
