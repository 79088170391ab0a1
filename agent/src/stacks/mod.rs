//! Wait stacks, named: the room that turns what the stack probe took (native
//! return addresses, Python code objects with instruction offsets) into
//! frames, and keeps the wait time charged to them per process
//! (`model::stacks::WaitStacks`). The session hands it the drained waits with
//! their threads resolved (session/stacks.rs); reports, the verdict and the
//! profiles read the store. See docs/probes/stacks.md.
pub mod debuginfod;
pub mod hotspot;
pub mod jit;
pub mod native;
pub mod python;
pub mod unwind;

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::stacks::{Frame, Kind, Stack};
use crate::probes::stacks::{Maps, RawPyStack};

/// What to take, and how often a thread takes its own stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub native: bool,
    pub python: bool,
    pub interval_ns: u64,
    /// CPU-clock samples a second per CPU for the GIL holders' native stacks (0: none)
    pub holder_hz: u32,
    /// name and keep what is drained (false: only the GIL holders' entries
    /// that ended holds; the rest is dropped and the kernel's stack maps are
    /// emptied every sample)
    pub keep: bool,
}

impl Options {
    pub fn enabled(&self) -> bool {
        self.native || self.python
    }

    /// The `wm_stacks_mode` bits of the sched probe's configuration.
    pub fn mode(&self) -> u8 {
        let mut m = 0;
        if self.native {
            m |= crate::probes::stacks::MODE_NATIVE;
        }
        if self.python {
            m |= crate::probes::stacks::MODE_PYTHON;
        }
        m
    }
}

/// Native frames as named, and the names' generation (`Native::generation`).
type Named = (u64, Arc<[Frame]>);

/// A stack's two halves as named: native frames, Python frames.
type Halves = (Option<Arc<[Frame]>>, Option<Arc<[Frame]>>, Join);

/// Named stacks, cached by what the kernel keys them by. Bounded: emptied
/// with the kernel's maps (`trim`).
#[derive(Default)]
pub struct Namer {
    pub native: native::Native,
    pub python: python::Codes,
    /// (pid, native stack id) -> frames, named at `native.generation`
    natives: HashMap<(u32, u32), Named>,
    /// Python stack key -> frames (the key hashes the TGID in)
    pys: HashMap<u64, Arc<[Frame]>>,
    /// (native frames, Python frames) -> the stack, shared by every wait charged to it
    stacks: HashMap<Halves, Stack>,
}

impl Namer {
    /// The stack of one wait of process `pid`: its native frames up to the
    /// interpreter (`join`), then its Python frames (or the whole native stack
    /// of a process without Python).
    #[allow(clippy::too_many_arguments)]
    pub fn stack(
        &mut self,
        maps: &Maps,
        pid: u32,
        py_target: Option<&python::Target>,
        native: Option<u32>,
        py: Option<u64>,
        join: Join,
        now: u64,
    ) -> Stack {
        let n = native.map(|id| {
            // named again once an object's symbols were read again (its debug file came)
            if let Some((_, f)) = self.natives.get(&(pid, id)).filter(|(g, _)| *g == self.native.generation) {
                return f.clone();
            }
            let frames: Arc<[Frame]> = match maps.native_stack(id) {
                Some(ips) => self.native.frames(pid, &ips, now).into(),
                None => vec![Frame::unknown("[stack lost]".into())].into(),
            };
            self.natives.insert((pid, id), (self.native.generation, frames.clone()));
            frames
        });
        let p = py.map(|key| {
            if let Some(f) = self.pys.get(&key) {
                return f.clone();
            }
            let frames: Arc<[Frame]> = match (maps.py_stack(key), py_target) {
                (Some(raw), Some(t)) => self.python.frames(pid, t, &raw).into(),
                (Some(RawPyStack { frames, .. }), None) => frames.iter().map(|(c, _)| Frame::unknown(format!("[code {c:#x}]"))).collect(),
                (None, _) => vec![Frame::unknown("[stack lost]".into())].into(),
            };
            self.pys.insert(key, frames.clone());
            frames
        });
        self.stacks.entry((n.clone(), p.clone(), join)).or_insert_with(|| compose(n.as_deref(), p.as_deref(), join)).clone()
    }

    /// Stacks named since the kernel's maps were last emptied: (native, Python).
    pub fn named(&self) -> (usize, usize) {
        (self.natives.len(), self.pys.len())
    }

    /// The kernel emptied its maps (`Maps::trim`): ids will be reused.
    pub fn trimmed(&mut self, native: bool, py: bool) {
        if native {
            self.natives.clear();
        }
        if py {
            self.pys.clear();
        }
        if native || py {
            self.stacks.clear();
            self.python.clear();
        }
    }

    /// Forget a process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.native.forget(pid);
        self.natives.retain(|(p, _), _| *p != pid);
    }
}

/// Whether a native frame is the interpreter's own (where Python frames take over).
fn in_interpreter(f: &Frame) -> bool {
    let base = f.file.rsplit('/').next().unwrap_or("");
    f.kind == Kind::Native && (base.starts_with("libpython3") || base.starts_with("python3"))
}

/// Where a stack's native frames give way to its Python frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Join {
    /// at the interpreter's first frame: a thread stopped where it blocked,
    /// whose frames inside the interpreter are its GIL's and locks' machinery
    Interpreter,
    /// at the evaluation loop: a GIL holder sampled while it runs, whose C
    /// frames are the answer wherever they are (`encoder_listencode_obj` of
    /// `_json` and the `PyUnicode_*` of libpython it calls)
    EvalLoop,
}

/// The interpreter's evaluation loop, where Python frames take over.
fn is_eval_loop(f: &Frame) -> bool {
    in_interpreter(f)
        && ["_PyEval_EvalFrame", "PyEval_EvalFrame", "_PyEval_Vector", "PyEval_EvalCode"].iter().any(|p| f.function.starts_with(p))
}

/// Native frames up to the interpreter (`join`), then the Python frames; a
/// stack without Python frames is the whole native stack. `EvalLoop` without
/// an evaluation-loop frame (no symbols, or a frame-pointer walk that broke
/// off) joins at the interpreter's first frame.
pub fn compose(native: Option<&[Frame]>, py: Option<&[Frame]>, join: Join) -> Stack {
    match (native, py) {
        (Some(n), Some(p)) => {
            let cut = match join {
                Join::EvalLoop => n.iter().position(is_eval_loop),
                Join::Interpreter => None,
            }
            .or_else(|| n.iter().position(in_interpreter))
            .unwrap_or(n.len());
            n[..cut].iter().chain(p.iter()).cloned().collect()
        }
        (Some(n), None) => n.into(),
        (None, Some(p)) => p.into(),
        (None, None) => vec![Frame::unknown("[no stack]".into())].into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_frames_lead_up_to_the_interpreter_then_python() {
        let n = [
            Frame::native("encoder_listencode_list".into(), "/usr/lib/python3.12/lib-dynload/_json.so".into()),
            Frame::native("_PyEval_EvalFrameDefault".into(), "/usr/lib/libpython3.12.so.1.0".into()),
            Frame::native("[unknown] +0x10".into(), "/usr/lib/libpython3.12.so.1.0".into()),
        ];
        let p = [Frame::python("dumps".into(), "/usr/lib/python3.12/json/__init__.py".into(), 231)];
        let s = compose(Some(&n), Some(&p), Join::Interpreter);
        assert_eq!(s.iter().map(|f| f.function.as_str()).collect::<Vec<_>>(), ["encoder_listencode_list", "dumps"]);
        assert_eq!(compose(Some(&n), None, Join::Interpreter).len(), 3);
        assert_eq!(compose(None, None, Join::Interpreter)[0].kind, Kind::Unknown);
        // a holder in libpython's own code called from a C extension
        let lib = "/usr/lib/libpython3.12.so.1.0";
        let held = [
            Frame::native("PyUnicode_FromFormat".into(), lib.into()),
            Frame::native("encoder_listencode_obj".into(), "/usr/lib/python3.12/lib-dynload/_json.so".into()),
            Frame::native("PyObject_Vectorcall".into(), lib.into()),
            Frame::native("_PyEval_EvalFrameDefault".into(), lib.into()),
        ];
        let names = |s: Stack| s.iter().map(|f| f.function.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(compose(Some(&held), Some(&p), Join::EvalLoop)),
            ["PyUnicode_FromFormat", "encoder_listencode_obj", "PyObject_Vectorcall", "dumps"]
        );
        assert_eq!(names(compose(Some(&held), Some(&p), Join::Interpreter)), ["dumps"]);
        // no evaluation loop in the walk: the interpreter's first frame
        assert_eq!(names(compose(Some(&held[1..3]), Some(&p), Join::EvalLoop)), ["encoder_listencode_obj", "dumps"]);
    }
}
