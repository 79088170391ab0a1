//! Reading the probe's maps into per-thread samples each window: exits, live
//! threads, GIL, futex and run-queue blame, GIL holds, throttles, names.
use std::collections::{BTreeMap, HashMap, HashSet};

use super::resolve::HolderResolver;
use super::{Session, Target};
use crate::clock::monotonic_ns;
use crate::model::blame::{FutexWait, Preemptor, Waker, GONE};
use crate::model::hist::HoldHist;
use crate::model::labels::sanitize;
use crate::model::ledger::{incarnation, ByWaiter, Entries, Incarnation};
use crate::model::partition::ThreadSample;
use crate::model::state::State;
use crate::procfs;
use crate::python;

/// Throttled stretches kept per target (for the signature).
const THROTTLE_KEEP: usize = 4096;

/// How often Python thread names are re-read.
const NAMES_EVERY_NS: u64 = 1_000_000_000;

impl Session {
    /// Final samples of threads that exited since the last call, by target.
    /// Call often enough that the exit ring buffer does not fill.
    pub fn exits(&mut self) -> BTreeMap<u64, Vec<ThreadSample>> {
        let exits = self.probe.drain_exits();
        self.collect_throttles();
        let mut out: BTreeMap<u64, Vec<ThreadSample>> = BTreeMap::new();
        if exits.is_empty() {
            return out;
        }
        let gone: HashSet<Incarnation> = exits.iter().map(|(_, _, s)| incarnation(s.host_tid, s.start_ns)).collect();
        let exited: HashSet<u32> = gone.iter().map(|w| w.0).collect();
        // the exited threads' blame entries, and those of live threads they
        // woke or preempted, moved out of the kernel in one run; else read
        // from the whole maps
        let swept = if self.sweeps {
            let python = self.targets.values().any(|t| t.python.is_some());
            match self.probe.sweep(python) {
                Ok(swept) => Some(self.ledger.swept(swept, &gone)),
                Err(e) => {
                    log::warn!("{e:#}: reading the blame maps whole at each drain of exits from now on");
                    self.sweeps = false;
                    None
                }
            }
        } else {
            None
        };
        let swept_out = swept.is_some();
        let blame = match swept {
            Some(kernel) => self.blame_from(kernel, Some(&gone)),
            None => self.blame(Some(&gone)),
        };
        let mut resolver = HolderResolver::default();
        for (host_pid, fsbase, s) in &exits {
            if let Some(id) = self.by_host_pid(*host_pid).map(|t| t.id) {
                self.targets.get_mut(&id).expect("found").fsbase_tids.insert(*fsbase, s.tid);
            }
        }
        for (host_pid, _, mut s) in exits {
            let who = incarnation(s.host_tid, s.start_ns);
            if let Some(t) = self.by_host_pid(host_pid) {
                s.py_name = t.names.get(&s.tid).cloned();
                s.gil_by_holder = resolver.resolve(self, t, blame.waits.gil.get(&who).map(Vec::as_slice).unwrap_or(&[]), None);
                s.gil_hold = blame.holds.get(&s.host_tid).copied();
                self.attach_waits(t, &mut s, &blame, &mut resolver);
                out.entry(t.id).or_default().push(s);
            }
        }
        self.note_exits_for_stacks(&out);
        // swept: their entries are out of the kernel already
        let none = Entries::default();
        self.forget_threads(&gone, if swept_out { &none } else { &blame.kernel });
        if !swept_out {
            let probe = &self.probe;
            self.ledger.counterparts_gone(&blame.kernel, exited, &gone, |pick| probe.take_blame(pick));
        }
        out
    }

    /// Throttled stretches reported by the probe, kept with their target.
    fn collect_throttles(&mut self) {
        let mut resolver = HolderResolver::default();
        for (host_tid, host_tgid, start, end) in self.probe.drain_throttles() {
            let Some(id) = self.by_host_pid(host_tgid).map(|t| t.id) else { continue };
            let tid = resolver.ns_tid(self, host_tid);
            let t = self.targets.get_mut(&id).expect("found");
            t.throttles.push_back((tid, crate::model::throttle::Stretch { start, end }));
            while t.throttles.len() > THROTTLE_KEEP {
                t.throttles.pop_front();
            }
        }
    }

    /// Every blame entry and GIL hold histogram, by waiter, read once: the
    /// kernel's entries and those moved out of it (`model::ledger`). By waiter
    /// only for the waiters in `only` when given (the kernel's entries are
    /// all read: under thread churn, the exits' are a few among many).
    /// With every waiter (`only` None), the blame in live threads' own rows too, read after the
    /// maps (`SchedProbe::blame_rows`); the exits' (`only`) is all in the maps.
    fn blame(&self, only: Option<&HashSet<Incarnation>>) -> Blame {
        let kernel = self.probe.blame();
        let rows = if only.is_none() { self.probe.blame_rows() } else { Entries::default() };
        self.blame_with(kernel, rows, only)
    }

    /// The same, from kernel entries read (or swept) already.
    fn blame_from(&self, kernel: Entries, only: Option<&HashSet<Incarnation>>) -> Blame {
        self.blame_with(kernel, Entries::default(), only)
    }

    /// `kernel`, the maps' entries, is what the ledger may take entries from; `rows` are seen,
    /// never taken (they go into the maps when their thread exits).
    fn blame_with(&self, kernel: Entries, rows: Entries, only: Option<&HashSet<Incarnation>>) -> Blame {
        let waits = self.ledger.view(&[&kernel, &rows], only);
        Blame { kernel, waits, holds: self.gil_probes.values().flat_map(|g| g.holds()).collect() }
    }

    /// Fill a sample's futex waits (by word and waker) and run-queue waits (by
    /// what had the CPU), with IDs of the agent's namespace.
    fn attach_waits(&self, t: &Target, s: &mut ThreadSample, waits: &Blame, r: &mut HolderResolver) {
        let who = incarnation(s.host_tid, s.start_ns);
        if let Some(entries) = waits.waits.futex.get(&who) {
            s.futex = entries
                .iter()
                .map(|e| FutexWait { addr: e.key.word, waker: if e.key.waker == 0 { 0 } else { r.ns_tid(self, e.key.waker) }, ns: e.ns })
                .collect();
        }
        if let Some(entries) = waits.waits.preempt.get(&who) {
            for e in entries {
                let (by_tid, by_tgid) = (e.key.by_tid, e.key.by_tgid);
                // a blocked state's: what woke it
                if let Some(state) = State::from_index(usize::from(e.key.state)).filter(|s| s.is_blocked()) {
                    let waker = match e.key.ctx {
                        1 => Waker::Softirq,
                        2 | 3 => Waker::Interrupt,
                        _ if by_tid == GONE => Waker::merged(),
                        _ if by_tgid == t.host_pid => Waker::Thread(r.ns_tid(self, by_tid)),
                        _ => Waker::Process { pid: r.ns_tid(self, by_tgid), comm: sanitize(&e.comm.text()) },
                    };
                    *s.woken_by.entry((state, waker)).or_insert(0) += e.ns;
                    continue;
                }
                let who = if by_tid == 0 {
                    Preemptor::Idle
                } else if by_tid == GONE {
                    Preemptor::merged()
                } else if by_tgid == t.host_pid {
                    Preemptor::Thread(r.ns_tid(self, by_tid))
                } else {
                    Preemptor::Process { pid: r.ns_tid(self, by_tgid), comm: sanitize(&e.comm.text()) }
                };
                *s.runqueue_by.entry(who).or_insert(0) += e.ns;
            }
        }
    }

    /// Re-read whether free-threaded targets run with the GIL: an extension
    /// that needs it switches it on at run time.
    fn refresh_gil_enabled(&mut self) {
        for t in self.targets.values_mut().filter(|t| t.exited_ns.is_none()) {
            let Some(p) = t.python.as_mut().filter(|p| p.layout.is_some_and(|l| l.enabled.is_some())) else { continue };
            let now = python::gil_enabled(&python::memory::Process::new(t.pid), p.layout.as_ref(), &p.gils);
            if now != p.gil_enabled {
                log::info!("process {}: the GIL is now {}", t.pid, if now { "enabled" } else { "disabled" });
                p.gil_enabled = now;
            }
        }
    }

    /// Re-read the Python thread names of targets whose names are older than
    /// a second (threads come and go, and are renamed).
    fn refresh_names(&mut self) {
        let now = monotonic_ns();
        let stale: Vec<u64> = self
            .targets
            .values()
            .filter(|t| t.exited_ns.is_none() && t.python.as_ref().is_some_and(|p| p.layout.is_some_and(|l| l.objects.is_some())))
            .filter(|t| now.saturating_sub(t.names_at) >= NAMES_EVERY_NS)
            .map(|t| t.id)
            .collect();
        if stale.is_empty() {
            return;
        }
        let ids = self.probe.task_ids().unwrap_or_default();
        for id in stale {
            let Some(t) = self.targets.get_mut(&id) else { continue };
            t.fsbase_tids.extend(ids.iter().filter(|x| x.ns_tgid == t.pid).map(|x| (x.fsbase, x.ns_tid)));
            let p = t.python.as_ref().expect("filtered on python");
            let objects = p.layout.and_then(|l| l.objects).expect("filtered on objects");
            t.names_at = now;
            match python::names::thread_names(t.pid, p.runtime, &objects) {
                Ok(by_ident) => {
                    // ident is pthread_self(), which is the thread's FS base on x86-64 glibc
                    t.names = ids
                        .iter()
                        .filter(|x| x.ns_tgid == t.pid)
                        .filter_map(|x| Some((x.ns_tid, sanitize(by_ident.get(&x.fsbase)?))))
                        .collect();
                }
                Err(e) => log::debug!("process {}: cannot read Python thread names: {e:#}", t.pid),
            }
        }
    }

    /// Every live watched thread sampled now, by target, with its name and
    /// its GIL wait per holder.
    pub fn live(&mut self) -> BTreeMap<u64, Vec<ThreadSample>> {
        self.refresh_names();
        self.refresh_gil_enabled();
        let mut out: BTreeMap<u64, Vec<ThreadSample>> = BTreeMap::new();
        let watched: std::collections::HashSet<u32> = self.probe.watched().into_iter().collect();
        let blame = self.blame(None);
        let mut resolver = HolderResolver::default();
        let mut seen = HashSet::new();
        let mut vanished = vec![];
        for lt in self.probe.live_threads() {
            let mut s = lt.sample;
            let who = incarnation(s.host_tid, s.start_ns);
            seen.insert(who);
            match self.by_host_pid(lt.host_tgid) {
                Some(t) if t.exited_ns.is_none() => {
                    match procfs::task_comm(t.pid, s.tid) {
                        Some(c) => s.comm = sanitize(&c),
                        None => {
                            // gone without an exit record, or exiting now
                            s.comm = "?".into();
                            vanished.push(who);
                        }
                    }
                    s.py_name = t.names.get(&s.tid).cloned();
                    if t.python.is_some() {
                        let open = lt.gil_holder.map(|h| (h, s.times.get(crate::model::state::State::GilWait)));
                        let closed = blame.waits.gil.get(&who).map(Vec::as_slice).unwrap_or(&[]);
                        s.gil_by_holder = resolver.resolve(self, t, closed, open);
                        s.gil_hold = blame.holds.get(&s.host_tid).copied();
                    }
                    self.attach_waits(t, &mut s, &blame, &mut resolver);
                    out.entry(t.id).or_default().push(s);
                }
                Some(_) | None if !watched.contains(&lt.host_tgid) => {
                    // left over from a process that is gone
                    self.probe.forget_thread(who);
                }
                _ => {}
            }
        }
        self.lifetime.vanished.extend(vanished);
        self.collect_garbage(&out, &seen, &blame);
        out
    }
}

/// The blame entries and GIL holds of one sample.
pub(super) struct Blame {
    /// the kernel's entries as read (or swept)
    pub(super) kernel: Entries,
    /// by waiter: the kernel's entries and the settled ones
    pub(super) waits: ByWaiter,
    /// GIL hold histograms (precise probe), by host TID
    pub(super) holds: HashMap<u32, HoldHist>,
}
