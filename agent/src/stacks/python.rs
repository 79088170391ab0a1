//! Naming Python frames: a frame as the probe read it is a code object
//! address and an instruction field; here the code object's qualified name,
//! file and line table are read from the target's memory (cached per code
//! object) and the line of the instruction computed
//! (`formats::pyframe::line_for`). Also the other direction the probe needs:
//! which `PyThreadState` belongs to which thread (the interpreters' thread
//! lists), so that a thread's own frames can be found when it blocks.
//!
//! Everything read is hostile: reads are bounded by a `Budget`, lengths are
//! capped, and a code object that does not read as one (freed, or a racy
//! read of a running thread's frames) names its frame `[unknown code]`.
use std::collections::HashMap;

use anyhow::{bail, ensure, Result};
use waitmeter_formats::pyframe::{self, FrameLayout};

use crate::model::stacks::{clean, Frame, MAX_NAME};
use crate::probes::stacks::{RawPyStack, Walk, NO_OFFSET};
use crate::python::memory::{at, Budget, Memory, Process};
use crate::python::names::{compact_str_state, decode_str};

/// Code objects named per process before the cache starts over.
const MAX_CODES: usize = 50_000;
/// Longest line table read.
const MAX_LINETABLE: u64 = 1 << 20;
/// Thread states walked per interpreter.
const MAX_THREADS: usize = 100_000;
/// Reads of one walk of the thread lists: a few per thread state.
const MAX_THREAD_READS: u64 = 4 * (MAX_THREADS as u64 + 256);

/// What naming frames and finding thread states of one process needs.
#[derive(Clone, Debug)]
pub struct Target {
    pub minor: u32,
    pub layout: FrameLayout,
    /// runtime address of `PyCode_Type`: a code object's `ob_type` (None: not checked)
    pub code_type: Option<u64>,
    /// `&_PyRuntime.interpreters.head`, and `PyInterpreterState.next`
    pub interp_head: u64,
    pub interp_next: u64,
}

impl Target {
    /// How the BPF walker goes through this interpreter's frames.
    pub fn walk(&self) -> Walk {
        let l = &self.layout;
        let off = |o: Option<u64>| o.and_then(|o| u32::try_from(o).ok()).unwrap_or(NO_OFFSET);
        Walk {
            tstate_frame: l.tstate_frame as u32,
            cframe_current: off(l.cframe_current_frame),
            previous: l.previous as u32,
            code: l.code as u32,
            instr: l.instr as u32,
            owner: off(l.owner),
            skip_owner_min: l.skip_owner_min.map_or(256, u32::from),
            code_mask: !l.code_tag_mask,
        }
    }

    /// The thread states of every interpreter: (PyThreadState address, the
    /// id it names its thread by: native_thread_id on 3.11+, else pthread_t).
    pub fn thread_states(&self, mem: &dyn Memory) -> Result<Vec<(u64, u64)>> {
        let l = &self.layout;
        let m = Budget::new(mem, MAX_THREAD_READS, 64 << 20);
        let mut out = vec![];
        for interp in crate::python::interpreters(&m, self.interp_head, self.interp_next)? {
            let mut ts = m.read_ptr(at(interp, l.interp_threads_head)?)?;
            for _ in 0..MAX_THREADS {
                if ts == 0 {
                    break;
                }
                let id = match l.tstate_native_thread_id {
                    Some(o) => m.read_u64(at(ts, o)?)? & 0xffff_ffff,
                    None => m.read_u64(at(ts, l.tstate_thread_id)?)?,
                };
                out.push((ts, id));
                ts = m.read_ptr(at(ts, l.tstate_next)?)?;
            }
        }
        ensure!(!m.exhausted(), "the thread lists are longer than waitmeter walks");
        Ok(out)
    }
}

/// What a code object says of itself.
#[derive(Clone, Debug)]
struct Code {
    name: String,
    file: String,
    firstlineno: i32,
    linetable: Vec<u8>,
    /// code units of its bytecode (3.11+)
    units: u64,
}

/// Named code objects, per process.
#[derive(Default)]
pub struct Codes {
    cache: HashMap<(u32, u64), Option<Code>>,
}

impl Codes {
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// The frames of a Python stack of process `pid`, innermost first.
    pub fn frames(&mut self, pid: u32, t: &Target, raw: &RawPyStack) -> Vec<Frame> {
        if self.cache.len() >= MAX_CODES {
            self.cache.clear();
        }
        let mem = Process::new(pid);
        let mut out: Vec<Frame> = raw
            .frames
            .iter()
            // shim frames (not Python code) come with code 0
            .filter(|(code, _)| *code != 0)
            .map(|(code, instr)| {
                let c = self.cache.entry((pid, *code)).or_insert_with(|| read_code(&mem, t, *code).ok()).clone();
                match c {
                    Some(c) => {
                        let line = t
                            .layout
                            .line_instr(*code, c.units, *instr)
                            .and_then(|i| pyframe::line_for(t.minor, &c.linetable, c.firstlineno, i))
                            .unwrap_or(c.firstlineno);
                        Frame::python(c.name, c.file, u32::try_from(line).unwrap_or(0))
                    }
                    None => Frame::unknown(format!("[unknown code {code:#x}]")),
                }
            })
            .collect();
        if raw.truncated {
            out.push(Frame::unknown("[truncated]".into()));
        }
        out
    }
}

fn read_code(mem: &dyn Memory, t: &Target, code: u64) -> Result<Code> {
    let l = &t.layout;
    let m = Budget::new(mem, 16, 2 * MAX_LINETABLE);
    if let Some(ty) = t.code_type {
        ensure!(m.read_ptr(at(code, l.ob_type)?)? == ty, "{code:#x} is not a code object");
    }
    let units = if l.co_code_adaptive.is_some() { m.read_u64(at(code, l.ob_size)?)? } else { 0 };
    let name_obj = m.read_ptr(at(code, l.co_qualname.unwrap_or(l.co_name))?)?;
    let file_obj = m.read_ptr(at(code, l.co_filename)?)?;
    let firstlineno = m.read_u32(at(code, l.co_firstlineno)?)? as i32;
    let table_obj = m.read_ptr(at(code, l.co_linetable)?)?;
    let name = read_str(&m, l, name_obj)?;
    let file = read_str(&m, l, file_obj)?;
    let len = m.read_u64(at(table_obj, l.ob_size)?)?;
    let linetable = m.read_bytes(at(table_obj, l.ob_sval)?, len, MAX_LINETABLE)?;
    ensure!(firstlineno >= 0, "code object {code:#x}: negative first line");
    Ok(Code { name: clean(&name), file: clean(&file), firstlineno, linetable, units })
}

/// A `str` object: compact, ASCII or UCS-1/2/4.
fn read_str(m: &dyn Memory, l: &FrameLayout, o: u64) -> Result<String> {
    let len = m.read_u64(at(o, l.str_length)?)?;
    let state = m.read_u32(at(o, l.str_state)?)?;
    let Some((kind, ascii)) = compact_str_state(state, l.str_kind_shift) else {
        bail!("{o:#x}: not a compact str");
    };
    let len = len.min(MAX_NAME as u64 * 4);
    let data = at(o, if ascii { l.str_ascii_data } else { l.str_compact_data })?;
    let buf = m.read_bytes(data, len * u64::from(kind), MAX_NAME as u64 * 16)?;
    Ok(decode_str(&buf, kind))
}
