//! The session's side of wait stacks: telling the probe how to walk each
//! Python target's frames and which thread state is whose, and moving the
//! waits charged to stacks out of the kernel into per-target stores, with
//! their threads named as the rest of the report names them. The naming and
//! the store are `crate::stacks`' and `model::stacks`'.
use std::collections::{BTreeMap, HashMap, HashSet};

use super::resolve::HolderResolver;
use super::{Session, Target};
use crate::clock::monotonic_ns;
use crate::model::ledger::{incarnation, Incarnation};
use crate::model::loss::{Lost, Probe, Reason};
use crate::model::partition::ThreadSample;
use crate::model::stacks::{Key, Lengths, Role, WaitStacks};
use crate::model::state::State;
use crate::probes::stacks::{RawWait, BLAMED_PROCESS};
use crate::python::layout::GilLocation;
use crate::stacks::unwind::{self, Unwind};
use crate::stacks::{python, Join, Namer, Options};

/// How often the thread states of a Python target are re-read.
const TSTATES_EVERY_NS: u64 = 1_000_000_000;

/// Wait stacks of a session.
pub(super) struct StackState {
    pub(super) opts: Options,
    namer: Namer,
    /// target id -> wait time by stack
    stores: HashMap<u64, WaitStacks>,
    /// target id -> how to read its Python frames, its thread states as
    /// last written (host TID -> PyThreadState), and when
    py: HashMap<u64, (python::Target, HashMap<u32, u64>, u64)>,
    /// drained waits whose thread was no longer known (exported as a loss)
    unattributed: u64,
    /// threads that exited since the last drain, (host TID, incarnation) ->
    /// (target id, TID): their waits are in the kernel map until it
    exits_since_drain: HashMap<Incarnation, (u64, u32)>,
    /// drained waits of threads not known yet (one that exited after this
    /// sample read the exits): tried again at the next drain, then lost
    pending: Vec<(RawWait, u64, Lengths)>,
    /// the unwind tables of code without frame pointers (made at the first target), and
    /// target id -> when its mappings were last read for them, and its JVM interpreter's code
    /// as last given
    unwind: Option<Unwind>,
    unwound: HashMap<u64, (u64, Option<(u64, u64)>)>,
    /// processes not measured whose stacks were named (wakers of another process): what the
    /// namer keeps of each is forgotten once it exits
    strangers: HashSet<u32>,
}

impl StackState {
    /// `debuginfod`: where stripped objects' debug files come from, besides the system.
    pub(super) fn new(opts: Options, debuginfod: Option<crate::stacks::debuginfod::Debuginfod>) -> StackState {
        let mut namer = Namer::default();
        namer.native.debuginfod = debuginfod;
        StackState {
            opts,
            namer,
            stores: HashMap::new(),
            py: HashMap::new(),
            unattributed: 0,
            exits_since_drain: HashMap::new(),
            pending: vec![],
            unwind: None,
            unwound: HashMap::new(),
            strangers: HashSet::new(),
        }
    }
}

/// Each thread of samples by target, as a drained wait names it (its
/// incarnation), with its target id and TID in the agent's namespace.
fn whose_threads(by_target: &BTreeMap<u64, Vec<ThreadSample>>) -> impl Iterator<Item = (Incarnation, (u64, u32))> + '_ {
    by_target.iter().flat_map(|(id, v)| v.iter().map(move |s| (incarnation(s.host_tid, s.start_ns), (*id, s.tid))))
}

/// How the frames of a target's interpreter are read, when its version is known.
fn py_target(t: &Target) -> Option<python::Target> {
    let p = t.python.as_ref()?;
    let l = p.layout?;
    let layout = p.frames?;
    let (interp_head, interp_next) = match l.gil {
        GilLocation::PerInterpreter { head, next, .. } => (head, next),
        // 3.8–3.11: `interpreters.head`; `next` is the first field of PyInterpreterState
        GilLocation::Runtime { .. } => (l.objects?.interp_head, 0),
    };
    Some(python::Target { minor: l.minor, layout, code_type: p.code_type, interp_head: p.runtime.checked_add(interp_head)?, interp_next })
}

impl Session {
    /// A new target: tell the probe how to walk its Python frames, and which
    /// thread state is whose (now, not at the first sample: waits from the
    /// start have Python frames).
    pub(super) fn stacks_added(&mut self, id: u64) {
        let Some(mut st) = self.stacks.take() else { return };
        if st.opts.native {
            self.refresh_unwind(&mut st, Some(id));
        }
        if let Some((t, pt)) = self.targets.get(&id).filter(|_| st.opts.python).and_then(|t| Some((t, py_target(t)?))) {
            match self.probe.stack_maps().set_walk(t.host_pid, &pt.walk()) {
                Ok(()) => {
                    st.py.insert(id, (pt, HashMap::new(), 0));
                    self.refresh_tstates(&mut st);
                }
                Err(e) => log::warn!("process {}: cannot read its Python stacks: {e:#}", t.pid),
            }
        }
        self.stacks = Some(st);
    }

    /// A target that is gone.
    pub(super) fn stacks_removed(&mut self, t: &Target) {
        let Some(st) = self.stacks.as_mut() else { return };
        let tstates = st.py.remove(&t.id).map(|(_, tstates, _)| tstates).unwrap_or_default();
        self.probe.stack_maps().remove(t.host_pid, tstates.into_keys());
        if let Some(u) = st.unwind.as_mut() {
            u.forget(t.pid);
        }
        st.unwound.remove(&t.id);
        st.namer.forget(t.pid);
    }

    /// Give the probe the code mappings of targets (`only`: that one, now; else each not read
    /// for `unwind::REFRESH_NS`) whose objects it walks by table, writing new objects' rows.
    fn refresh_unwind(&mut self, st: &mut StackState, only: Option<u64>) {
        let now = monotonic_ns();
        let maps = self.probe.stack_maps();
        let u = st.unwind.get_or_insert_with(|| Unwind::new(maps.unwind_capacity()));
        let ids: Vec<u64> = match only {
            Some(id) => vec![id],
            None => self
                .targets
                .iter()
                .filter(|(id, t)| {
                    t.exited_ns.is_none() && st.unwound.get(id).is_none_or(|(at, _)| now.saturating_sub(*at) >= unwind::REFRESH_NS)
                })
                .map(|(id, _)| *id)
                .collect(),
        };
        for id in ids {
            let Some(t) = self.targets.get(&id).filter(|t| t.exited_ns.is_none()) else { continue };
            let changed = u.refresh(t.pid, &mut |first, rows| maps.put_rows(first, rows));
            // a JVM: its interpreter's frames are recorded as the methods they run
            let interp = st.namer.native.hotspot.interpreter(t.pid);
            let before = st.unwound.insert(id, (now, interp)).and_then(|(_, i)| i);
            if changed.is_some() || interp != before {
                let m = changed.unwrap_or_else(|| u.given(t.pid));
                log::debug!("process {}: {} code mappings without frame pointers walked by table, interpreter {interp:x?}", t.pid, m.len());
                if let Err(e) = maps.set_unwind(t.host_pid, &m, interp) {
                    log::warn!("process {}: its code without frame pointers is not walked: {e:#}", t.pid);
                }
            }
        }
    }

    /// Re-read which thread state is whose in Python targets (threads come and go).
    fn refresh_tstates(&mut self, st: &mut StackState) {
        let now = monotonic_ns();
        let stale: Vec<u64> = st.py.iter().filter(|(_, v)| now.saturating_sub(v.2) >= TSTATES_EVERY_NS).map(|(id, _)| *id).collect();
        if stale.is_empty() {
            return;
        }
        let tasks = self.probe.task_ids().unwrap_or_default();
        for id in stale {
            let Some(t) = self.targets.get(&id).filter(|t| t.exited_ns.is_none()) else { continue };
            let Some((pt, before, at)) = st.py.get_mut(&id) else { continue };
            *at = now;
            let mine: Vec<_> = tasks.iter().filter(|x| x.tgid == t.host_pid).collect();
            // the id a thread state names its thread by -> host TID
            let by_id: HashMap<u64, u32> = if pt.layout.tstate_native_thread_id.is_some() {
                if t.same_pidns {
                    mine.iter().map(|x| (x.ns_tid as u64, x.tid)).collect()
                } else {
                    mine.iter().filter_map(|x| Some((*crate::procfs::task_nspid(t.pid, x.ns_tid)?.last()? as u64, x.tid))).collect()
                }
            } else {
                mine.iter().map(|x| (x.fsbase, x.tid)).collect()
            };
            match pt.thread_states(&crate::python::memory::Process::new(t.pid)) {
                Ok(states) => {
                    let now_states: HashMap<u32, u64> = states.into_iter().filter_map(|(ts, tid)| Some((*by_id.get(&tid)?, ts))).collect();
                    self.probe.stack_maps().set_tstates(before, &now_states);
                    *before = now_states;
                }
                Err(e) => log::debug!("process {}: cannot read its thread states: {e:#}", t.pid),
            }
        }
    }

    /// Move the waits charged to stacks out of the kernel into the targets'
    /// stores, naming their stacks and threads. `live` and `exited` are this
    /// sample's threads by target: the waits' threads are among them.
    pub(super) fn collect_stacks(&mut self, live: &BTreeMap<u64, Vec<ThreadSample>>, exited: &BTreeMap<u64, Vec<ThreadSample>>) {
        let Some(mut st) = self.stacks.take() else { return };
        self.refresh_tstates(&mut st);
        if st.opts.native {
            self.refresh_unwind(&mut st, None);
        }
        let maps = self.probe.stack_maps();
        let retried = st.pending.len();
        let mut drained = std::mem::take(&mut st.pending);
        drained.extend(maps.drain_waits());
        if !st.opts.keep {
            // only the GIL holds by function (a metric) are named
            drained.retain(|(w, _, l)| w.state == State::GilWait && w.role == Role::Holder && l.waits > 0);
        }
        let mut whose: HashMap<Incarnation, (u64, u32)> = std::mem::take(&mut st.exits_since_drain);
        whose.extend(whose_threads(live).chain(whose_threads(exited)));
        // a busy sample's thread by TID alone: any incarnation known (exited since the last
        // drain too), the live one first
        let mut by_tid: HashMap<u32, (u64, u32)> = whose.iter().map(|((tid, _), v)| (*tid, *v)).collect();
        by_tid.extend(whose_threads(live).map(|((tid, _), v)| (tid, v)));
        let mut resolver = HolderResolver::default();
        let now = monotonic_ns();
        for (i, (w, ns, lengths)) in drained.into_iter().enumerate() {
            // a busy sample names its thread by TID alone (gen 0)
            let found = whose
                .get(&(w.tid, w.gen))
                .copied()
                .or_else(|| (w.gen == 0 && w.role == Role::Busy).then(|| by_tid.get(&w.tid).copied()).flatten());
            let Some((id, victim)) = found else {
                if i < retried {
                    st.unattributed += 1;
                } else {
                    st.pending.push((w, ns, lengths));
                }
                continue;
            };
            let Some(t) = self.targets.get(&id) else { continue };
            // who it waited behind: a thread of its process, or (a waker of another process) that
            // process, by its PID (a PID is no TID of another process: one numbering)
            let blamed = match (w.state, w.blamed) {
                (_, 0) => 0,
                (State::GilWait, h) => resolver.holder_tid(self, t, h),
                (_, host) => resolver.ns_tid(self, host as u32),
            };
            // the stack's own process: the victim's, or a waker's of another process (named with
            // that process's objects, and its Python frames when it is watched too)
            let (pid, pt) = if w.role == Role::Waker && w.blamed & BLAMED_PROCESS != 0 {
                let target = self.target_by_pid(blamed);
                if target.is_none() && st.strangers.insert(blamed) {
                    st.namer.native.jit.quiet(blamed);
                }
                (blamed, target.and_then(|o| st.py.get(&o.id)).map(|v| &v.0))
            } else {
                (t.pid, st.py.get(&id).map(|v| &v.0))
            };
            // a GIL holder's native frames were sampled while it ran (bpf/holder_samples.bpf.h)
            let join = if w.role == Role::Holder { Join::EvalLoop } else { Join::Interpreter };
            let stack = st.namer.stack(&maps, pid, pt, w.native, w.py, join, now);
            st.stores.entry(id).or_default().add_waits(Key { victim, blamed, state: w.state, role: w.role, stack }, ns, &lengths);
        }
        let StackState { strangers, namer, .. } = &mut st;
        strangers.retain(|pid| {
            let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
            if !alive {
                namer.forget(*pid);
            }
            alive
        });
        if st.opts.keep {
            let (native_named, py_named) = st.namer.named();
            let (n, p) = maps.trim(native_named, py_named);
            st.namer.trimmed(n, p);
        } else {
            // nothing else reads them
            maps.empty();
            st.namer.trimmed(true, true);
        }
        self.stacks = Some(st);
    }

    /// Note the threads that exited (drained between two drains of the wait
    /// stacks): the next drain attributes their waits.
    pub(super) fn note_exits_for_stacks(&mut self, exited: &BTreeMap<u64, Vec<ThreadSample>>) {
        if let Some(st) = self.stacks.as_mut() {
            st.exits_since_drain.extend(whose_threads(exited));
        }
    }

    /// Threads that exited since the wait stacks were last drained: under
    /// thread churn, drain them sooner than every few seconds (each exited
    /// thread left a few entries in the kernel map, which would fill).
    pub fn exits_since_stack_drain(&self) -> usize {
        self.stacks.as_ref().map_or(0, |st| st.exits_since_drain.len())
    }

    /// Drop the store of a target that is forgotten.
    pub(super) fn stacks_forget(&mut self, id: u64) {
        if let Some(st) = self.stacks.as_mut() {
            st.stores.remove(&id);
        }
    }

    /// Whether drained stacks are named and kept (`run` keeps them while a
    /// profile is being recorded; otherwise only the GIL holders' entries
    /// that ended holds are, for `waitmeter_gil_function_hold_seconds`).
    pub fn keep_stacks(&mut self, keep: bool) {
        if let Some(st) = self.stacks.as_mut() {
            st.opts.keep = keep;
            // and the kernel takes them (bpf/sched.bpf.c, `stacks_all`)
            self.probe.set_stacks_all(keep);
        }
    }

    /// The wait stacks kept since the last call, by target, emptying the
    /// stores (for a command that records them elsewhere).
    pub fn take_wait_stacks(&mut self) -> HashMap<u64, WaitStacks> {
        self.stacks.as_mut().map(|st| std::mem::take(&mut st.stores)).unwrap_or_default()
    }

    /// The wait stacks of a target so far (None: stacks are off).
    pub fn wait_stacks(&self, target_id: u64) -> Option<WaitStacks> {
        let st = self.stacks.as_ref()?;
        Some(st.stores.get(&target_id).cloned().unwrap_or_default())
    }

    /// Stack events lost: in the kernel, and waits drained after their
    /// thread was forgotten (`thread_gone`).
    pub(super) fn stacks_lost(&self) -> Vec<Lost> {
        let Some(st) = &self.stacks else { return vec![] };
        let mut lost: Vec<_> = self.probe.stack_maps().lost().into_iter().map(|(r, n)| Lost::new(Probe::Stacks, r, n)).collect();
        lost.push(Lost::new(Probe::Stacks, Reason::ThreadGone, st.unattributed));
        // counted in user space too: the JITs' perf maps that were not read, and their lines skipped
        let (refused, bad_lines) = st.namer.native.jit.lost();
        lost.push(Lost::new(Probe::Stacks, Reason::PerfMapRefused, refused));
        lost.push(Lost::new(Probe::Stacks, Reason::PerfMapBadLine, bad_lines));
        // debug files a debuginfod server did not give, and code without frame pointers the
        // probe does not walk by table
        let (refused, failed) = st.namer.native.debuginfod.as_ref().map_or((0, 0), |d| d.lost());
        lost.push(Lost::new(Probe::Stacks, Reason::DebuginfodRefused, refused));
        lost.push(Lost::new(Probe::Stacks, Reason::DebuginfodFailed, failed));
        let (no_room, maps_full) = st.unwind.as_ref().map_or((0, 0), |u| u.lost());
        lost.push(Lost::new(Probe::Stacks, Reason::UnwindNoRoom, no_room));
        lost.push(Lost::new(Probe::Stacks, Reason::UnwindMapsFull, maps_full));
        lost
    }
}
