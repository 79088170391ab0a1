//! The wait-stack maps (`bpf/stacks.bpf.h`, `bpf/stacks.h`,
//! `docs/probes/stacks.md`). The code that takes the stacks runs inside the
//! sched probe's programs, at the moments a wait begins and ends, so the maps
//! live in the sched object; this module configures them (how to walk each
//! process' Python frames, which thread state is whose) and moves what they
//! hold out: waits charged to stacks, and the stacks themselves, raw
//! (addresses and code objects), for the stacks room (agent/src/stacks) to name.
use std::collections::HashMap;

use libbpf_rs::{MapCore, MapFlags, MapMut};

use super::abi::skel::types::{
    wm_native_stack, wm_py_stack, wm_py_walk, wm_role, wm_stack_limits, wm_stack_ref, wm_stack_stat, wm_stacks_mode, wm_unwind_kind,
    wm_unwind_limits, wm_unwind_map, wm_unwind_proc, wm_unwind_row, wm_wait_stack_key, wm_wait_stack_val,
};
use super::abi::{as_bytes, from_bytes};
use crate::model::loss::Reason;
use crate::model::stacks::{Lengths, Role};
use crate::model::state::State;

/// A stack reference that names no stack.
pub const NO_STACK: wm_stack_ref = wm_stack_ref { native: -1, _pad: 0, py: 0 };

pub const MODE_NATIVE: u8 = wm_stacks_mode::WM_STACKS_NATIVE.0 as u8;
pub const MODE_PYTHON: u8 = wm_stacks_mode::WM_STACKS_PYTHON.0 as u8;
pub const PY_MAX_FRAMES: usize = wm_stack_limits::WM_PY_MAX_FRAMES.0 as usize;
/// An offset the BPF walker does not use.
pub const NO_OFFSET: u32 = wm_stack_limits::WM_NO_OFFSET.0;

/// Why stack events were lost, as exported in the `reason` label.
pub const LOSS_REASONS: [(u32, Reason); 3] = [
    (wm_stack_stat::WM_STACK_STAT_NATIVE_FAILED.0, Reason::NativeStackFailed),
    (wm_stack_stat::WM_STACK_STAT_PY_MAP_FULL.0, Reason::PyStackMapFull),
    (wm_stack_stat::WM_STACK_STAT_WAIT_MAP_FULL.0, Reason::WaitStackMapFull),
];

/// The role of a `wait_stacks` key.
fn role_from_abi(r: u8) -> Option<Role> {
    Some(match u32::from(r) {
        x if x == wm_role::WM_ROLE_VICTIM.0 => Role::Victim,
        x if x == wm_role::WM_ROLE_HOLDER.0 => Role::Holder,
        x if x == wm_role::WM_ROLE_WAKER.0 => Role::Waker,
        x if x == wm_role::WM_ROLE_PREEMPTOR.0 => Role::Preemptor,
        x if x == wm_role::WM_ROLE_BUSY.0 => Role::Busy,
        _ => return None,
    })
}

/// How to walk a process' Python frames in BPF (`struct wm_py_walk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    pub tstate_frame: u32,
    pub cframe_current: u32,
    pub previous: u32,
    pub code: u32,
    pub instr: u32,
    pub owner: u32,
    pub skip_owner_min: u32,
    pub code_mask: u64,
}

/// The tag of a native stack's entry that is an interpreted Java frame's `Method*`.
pub const JAVA_METHOD: u64 = 1 << wm_unwind_limits::WM_JAVA_METHOD_BIT.0;

/// Code mappings of a process the probe walks by table, at most.
pub const UNWIND_MAX_MAPS: usize = wm_unwind_limits::WM_UNWIND_MAX_MAPS.0 as usize;

/// One code mapping whose object is walked by its unwind rows (`struct wm_unwind_map`):
/// address - `bias` is the object's link-time address; its rows are [first, first + count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindMap {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub first: u32,
    pub count: u32,
}

/// A row as the probe keeps it: a rule it cannot keep (an offset past 16 bits) is a stop.
fn unwind_row(r: &waitmeter_formats::cfi::Row) -> wm_unwind_row {
    use waitmeter_formats::cfi::{Cfa, Rule};
    let stop = wm_unwind_row { pc: r.pc as u32, kind: wm_unwind_kind::WM_UNWIND_STOP.0 as u8, ..Default::default() };
    let Rule::Step { cfa, fp_at } = r.rule else { return stop };
    let (kind, cfa_off) = match cfa {
        Cfa::Sp(o) => (wm_unwind_kind::WM_UNWIND_SP, o),
        Cfa::Fp(o) => (wm_unwind_kind::WM_UNWIND_FP, o),
    };
    let Ok(fp) = i16::try_from(fp_at.unwrap_or(0)) else { return stop };
    wm_unwind_row { pc: r.pc as u32, cfa_off, fp_at: fp, kind: kind.0 as u8, fp_saved: u8::from(fp_at.is_some()) }
}

/// Unwind rows of all objects built without frame pointers (12 bytes each, 16 in the array: 8 MiB
/// of map memory, allocated at load), twice the probe's default: a server that maps many such objects needs more (Debian's
/// PostgreSQL 15 and its libraries: ICU's 58,426 rows did not fit after 212,005 of 262,144).
pub const UNWIND_ROWS: u32 = 1 << 19;

/// A wait stack's `blamed` with this bit: the host TGID of a waker of another process than the
/// waiter's, whose stack (role waker) is that process's (bpf/stacks.h).
pub const BLAMED_PROCESS: u64 = 1 << super::abi::skel::types::wm_limits::WM_BLAMED_PROCESS_BIT.0;

/// A wait charged to a stack, as the kernel keyed it (host IDs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawWait {
    pub tid: u32,
    pub gen: u32,
    /// GIL holder id (as the thread state names it), or a host TID; 0 unknown
    pub blamed: u64,
    pub state: State,
    pub role: Role,
    pub native: Option<u32>,
    pub py: Option<u64>,
}

/// A Python stack as read: (code object, raw instruction field), innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawPyStack {
    pub frames: Vec<(u64, u64)>,
    pub truncated: bool,
}

/// The maps, borrowed from the sched probe.
pub struct Maps<'a> {
    pub native: &'a MapMut<'a>,
    pub py: &'a MapMut<'a>,
    pub walk: &'a MapMut<'a>,
    pub tstates: &'a MapMut<'a>,
    pub waits: &'a MapMut<'a>,
    pub stats: &'a MapMut<'a>,
    pub unwind_rows: &'a MapMut<'a>,
    pub unwind_procs: &'a MapMut<'a>,
}

/// Delete every entry of a map.
fn empty(m: &MapMut) {
    for k in m.keys().collect::<Vec<_>>() {
        let _ = m.delete(&k);
    }
}

impl Maps<'_> {
    /// Walk the Python frames of process `host_tgid` this way.
    pub fn set_walk(&self, host_tgid: u32, w: &Walk) -> anyhow::Result<()> {
        let v = wm_py_walk {
            tstate_frame: w.tstate_frame,
            cframe_current: w.cframe_current,
            previous: w.previous,
            code: w.code,
            instr: w.instr,
            owner: w.owner,
            skip_owner_min: w.skip_owner_min,
            _pad: 0,
            code_mask: w.code_mask,
        };
        self.walk.update(&host_tgid.to_ne_bytes(), as_bytes(&v), MapFlags::ANY)?;
        Ok(())
    }

    /// Write an object's unwind rows at `first` on (`unwind_rows`): a few batched
    /// system calls (a libc has 28,000 rows: one call each took 0.6 s of `attach`'s start),
    /// row by row where the kernel does not batch arrays (before 5.6).
    pub fn put_rows(&self, first: u32, rows: &[waitmeter_formats::cfi::Row]) -> anyhow::Result<()> {
        const CHUNK: usize = 4096;
        if u32::try_from(rows.len())?.checked_add(first).is_none() {
            anyhow::bail!("row index past 32 bits");
        }
        let mut values = Vec::new();
        for (c, chunk) in rows.chunks(CHUNK).enumerate() {
            let at = first + u32::try_from(c * CHUNK)?;
            let keys: Vec<u8> = (0..chunk.len() as u32).flat_map(|i| (at + i).to_ne_bytes()).collect();
            values.clear();
            for r in chunk {
                values.extend_from_slice(as_bytes(&unwind_row(r)));
            }
            if self.unwind_rows.update_batch(&keys, &values, chunk.len() as u32, MapFlags::ANY, MapFlags::ANY).is_err() {
                for (i, r) in chunk.iter().enumerate() {
                    self.unwind_rows.update(&(at + i as u32).to_ne_bytes(), as_bytes(&unwind_row(r)), MapFlags::ANY)?;
                }
            }
        }
        Ok(())
    }

    /// The rows `unwind_rows` holds.
    pub fn unwind_capacity(&self) -> u32 {
        self.unwind_rows.info().map(|i| i.info.max_entries).unwrap_or(0)
    }

    /// Walk process `host_tgid`'s code in these mappings by their rows, and record a frame in
    /// `interp` (a JVM's interpreter) as the Java method it runs (neither: forget it).
    pub fn set_unwind(&self, host_tgid: u32, maps: &[UnwindMap], interp: Option<(u64, u64)>) -> anyhow::Result<()> {
        if maps.is_empty() && interp.is_none() {
            let _ = self.unwind_procs.delete(&host_tgid.to_ne_bytes());
            return Ok(());
        }
        let mut v = wm_unwind_proc::default();
        for (slot, m) in v.maps.iter_mut().zip(maps) {
            *slot = wm_unwind_map { start: m.start, end: m.end, bias: m.bias, first: m.first, count: m.count };
        }
        v.n = maps.len().min(UNWIND_MAX_MAPS) as u32;
        (v.interp_start, v.interp_end) = interp.unwrap_or((0, 0));
        self.unwind_procs.update(&host_tgid.to_ne_bytes(), as_bytes(&v), MapFlags::ANY)?;
        Ok(())
    }

    /// Forget a process: its walks and the thread states of `host_tids`.
    pub fn remove(&self, host_tgid: u32, host_tids: impl Iterator<Item = u32>) {
        let _ = self.walk.delete(&host_tgid.to_ne_bytes());
        let _ = self.unwind_procs.delete(&host_tgid.to_ne_bytes());
        for t in host_tids {
            let _ = self.tstates.delete(&t.to_ne_bytes());
        }
    }

    /// Make `now` (host TID -> PyThreadState) the thread states of a process
    /// whose previous ones were `before`: new and moved entries are written,
    /// those gone deleted.
    pub fn set_tstates(&self, before: &HashMap<u32, u64>, now: &HashMap<u32, u64>) {
        for (tid, ts) in now {
            if before.get(tid) != Some(ts) {
                if let Err(e) = self.tstates.update(&tid.to_ne_bytes(), &ts.to_ne_bytes(), MapFlags::ANY) {
                    log::debug!("py_tstates: thread {tid}: {e}");
                }
            }
        }
        for tid in before.keys().filter(|t| !now.contains_key(t)) {
            let _ = self.tstates.delete(&tid.to_ne_bytes());
        }
    }

    /// Move every wait charged to stacks out of the kernel: each entry is
    /// looked up and deleted in one step, so time added meanwhile is in the
    /// value taken or in a new entry.
    pub fn drain_waits(&self) -> Vec<(RawWait, u64, Lengths)> {
        let drained = super::batch::drain::<wm_wait_stack_key, wm_wait_stack_val>(self.waits);
        let mut out = Vec::with_capacity(drained.len());
        for (key, v) in drained {
            let lengths = Lengths {
                waits: u64::from(v.waits),
                sum_ns: v.held_ns,
                max_ns: u64::from(v.max_us) * 1000,
                buckets: v.buckets.map(u64::from),
            };
            let (Some(state), Some(role)) = (State::from_index(key.state as usize), role_from_abi(key.role)) else { continue };
            out.push((
                RawWait {
                    tid: key.tid,
                    gen: key.gen,
                    blamed: key.blamed,
                    state,
                    role,
                    native: u32::try_from(key.native).ok(),
                    py: (key.py != 0).then_some(key.py),
                },
                v.ns,
                lengths,
            ));
        }
        out
    }

    /// The return addresses of a native stack, leaf first.
    pub fn native_stack(&self, id: u32) -> Option<Vec<u64>> {
        let v = self.native.lookup(&id.to_ne_bytes(), MapFlags::ANY).ok()??;
        let s = from_bytes::<wm_native_stack>(&v)?;
        let ips = &s.ips[..(s.depth as usize).min(s.ips.len())];
        (!ips.is_empty()).then(|| ips.to_vec())
    }

    /// A Python stack as read by the probe.
    pub fn py_stack(&self, key: u64) -> Option<RawPyStack> {
        let v = self.py.lookup(&key.to_ne_bytes(), MapFlags::ANY).ok()??;
        let s = from_bytes::<wm_py_stack>(&v)?;
        let n = (s.depth as usize).min(PY_MAX_FRAMES);
        Some(RawPyStack { frames: s.frames[..n].iter().map(|f| (f.code, f.instr)).collect(), truncated: s.truncated != 0 })
    }

    /// Empty both stack maps (nothing reads what they hold).
    pub fn empty(&self) {
        empty(self.native);
        empty(self.py);
    }

    /// Empty the stack maps once user space has named more stacks than
    /// three-quarters of their room since they were last emptied (every
    /// stack of the waits drained so far is named; a wait still open whose
    /// stack goes meanwhile is charged to an unknown stack). Returns which
    /// were emptied: (native, python).
    pub fn trim(&self, native_named: usize, py_named: usize) -> (bool, bool) {
        let cap = |m: &MapMut| m.info().map(|i| i.info.max_entries as usize).unwrap_or(usize::MAX);
        let native = native_named.saturating_mul(4) > cap(self.native).saturating_mul(3);
        let py = py_named.saturating_mul(4) > cap(self.py).saturating_mul(3);
        if native {
            empty(self.native);
        }
        if py {
            empty(self.py);
        }
        (native, py)
    }

    /// Stack events lost in the kernel so far: (reason, count summed over CPUs).
    pub fn lost(&self) -> Vec<(Reason, u64)> {
        LOSS_REASONS.iter().map(|(idx, reason)| (*reason, super::percpu_sum(self.stats, *idx))).collect()
    }
}
