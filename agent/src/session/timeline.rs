//! The timeline's spans (`attach --trace`), named as the agent's namespace names them: each
//! thread by its TID, and who it waited behind by theirs (model/timeline.rs has the rest). The
//! ring has the intervals that closed; each thread's open one (a thread asleep or blocked to the
//! end of the window, or through all of it) is read from the thread table.
use std::collections::BTreeMap;

use super::resolve::HolderResolver;
use super::Session;
use crate::model::state::State;
use crate::model::timeline::{Behind, Span};

impl Session {
    /// The spans the probe closed since the last call, by process (its PID in the agent's
    /// namespace): (TID, span), each thread's in time order. Spans of processes the session no
    /// longer knows are dropped (their report is closed).
    pub fn drain_spans(&mut self) -> BTreeMap<u32, Vec<(u32, Span)>> {
        let raw = self.probe.drain_spans();
        let mut r = HolderResolver::default();
        let mut out: BTreeMap<u32, Vec<(u32, Span)>> = BTreeMap::new();
        for s in raw {
            let Some(t) = self.by_host_pid(s.host_tgid) else { continue };
            let behind = match s.state {
                State::GilWait => Some(r.holder_tid(self, t, s.culprit)).filter(|x| *x != 0).map(Behind::Thread),
                State::FutexWait => (s.culprit != 0).then(|| Behind::Thread(r.ns_tid(self, s.culprit as u32))),
                State::Runqueue if s.culprit == 0 => Some(Behind::Idle),
                State::Runqueue if s.by_tgid == s.host_tgid => Some(Behind::Thread(r.ns_tid(self, s.culprit as u32))),
                State::Runqueue => Some(Behind::Process(r.ns_tid(self, s.by_tgid))),
                _ => None,
            };
            let tid = r.ns_tid(self, s.host_tid);
            out.entry(t.pid).or_default().push((tid, Span { start: s.start, end: s.end, state: s.state, behind }));
        }
        out
    }

    /// Each live watched thread's open interval, from when it began to now, by process: (TID,
    /// span). A GIL wait says who holds the GIL; who ends a futex wait or a queueing is not
    /// known before it ends.
    pub fn open_spans(&mut self) -> BTreeMap<u32, Vec<(u32, Span)>> {
        let now = crate::clock::monotonic_ns();
        let mut r = HolderResolver::default();
        let mut out: BTreeMap<u32, Vec<(u32, Span)>> = BTreeMap::new();
        for lt in self.probe.live_threads() {
            let Some(t) = self.by_host_pid(lt.host_tgid).filter(|t| t.exited_ns.is_none()) else { continue };
            let behind = match lt.gil_holder {
                Some(h) if lt.state == State::GilWait => Some(r.holder_tid(self, t, h)).filter(|x| *x != 0).map(Behind::Thread),
                _ => None,
            };
            let span = Span { start: lt.since, end: now, state: lt.state, behind };
            out.entry(t.pid).or_default().push((lt.sample.tid, span));
        }
        out
    }
}
