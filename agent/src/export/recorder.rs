//! Wait stacks recorded over a span of time, for the profiles of `waitmeter
//! run` (docs/profiles.md): one recorder per profile pulled at
//! `/debug/pprof/wait?seconds=N`, from the request to its deadline, and one
//! for the Pyroscope push, emptied at every push. The main loop feeds every
//! recorder the stacks it drains; nothing is kept when nobody records.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use waitmeter_formats::pprof::Builder;

use super::profile::{pprof_of, Part};
use crate::model::stacks::{Role, WaitStacks};

/// Distinct entries one recorder keeps over all its processes (a profile
/// holds at most `pprof::MAX_SAMPLES` samples: more would be cut anyway).
pub const MAX_RECORDED: usize = 20_000;
/// Profiles recorded for pulls at once; another request is refused (429).
pub const MAX_CAPTURES: usize = 4;
/// The longest profile a pull may ask for, and the default (Go's `net/http/pprof`'s).
pub const MAX_SECONDS: u64 = 300;
pub const DEFAULT_SECONDS: u64 = 30;

/// A watched process as a profile labels it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub comm: String,
    /// its pod's `namespace`, `pod`, `container` when known (`identity::Identity::pod_labels`)
    pub pod: Vec<(&'static str, String)>,
    /// the service its pod names (`identity::pods::Names::service_name`)
    pub service: Option<String>,
}

/// The wait stacks of several processes since `start`.
#[derive(Debug)]
pub struct Recorder {
    pub start_unix_ns: i64,
    pub start_ns: u64,
    /// target id -> the process, its stacks
    stores: HashMap<u64, (Proc, WaitStacks)>,
    entries: usize,
    /// time of entries that did not fit (counted, not kept)
    pub dropped_ns: u64,
}

impl Recorder {
    pub fn new(start_ns: u64, start_unix_ns: i64) -> Recorder {
        Recorder { start_unix_ns, start_ns, stores: HashMap::new(), entries: 0, dropped_ns: 0 }
    }

    /// Add a process' stacks drained since the last call.
    pub fn add(&mut self, target: u64, proc: &Proc, w: &WaitStacks) {
        let (known, mine) = self.stores.entry(target).or_insert_with(|| (proc.clone(), WaitStacks::default()));
        // its pod's names may come after its first stacks
        if known != proc {
            *known = proc.clone();
        }
        for (k, ns) in &w.ns {
            if let Some(v) = mine.ns.get_mut(k) {
                *v += ns;
            } else if self.entries < MAX_RECORDED {
                mine.ns.insert(k.clone(), *ns);
                self.entries += 1;
            } else {
                self.dropped_ns += ns;
            }
        }
        self.dropped_ns += w.dropped_ns;
    }

    /// The processes recorded, by target id.
    pub fn processes(&self) -> impl Iterator<Item = (u64, &Proc)> {
        self.stores.iter().map(|(id, (p, _))| (*id, p))
    }

    /// The profile of what was recorded until `end_ns`: of every process
    /// (`only`: of one target), labelled with `pid` and `comm` when `per_process`.
    /// `thread(target, tid)` is a thread's label (bounded as the metrics');
    /// threads it does not know are `other`.
    pub fn pprof(&self, end_ns: u64, only: Option<u64>, per_process: bool, thread: impl Fn(u64, u32) -> Option<String>) -> Builder {
        let mut ids: Vec<u64> = self.stores.keys().copied().filter(|id| only.is_none_or(|o| o == *id)).collect();
        ids.sort_unstable();
        let names: Vec<HashMap<u32, String>> = ids
            .iter()
            .map(|id| {
                let mut m = HashMap::new();
                for k in self.stores[id].1.ns.keys() {
                    for tid in [k.victim, if k.role == Role::Victim { 0 } else { k.blamed }] {
                        if tid != 0 && !m.contains_key(&tid) {
                            m.insert(tid, thread(*id, tid).unwrap_or_else(|| "other".into()));
                        }
                    }
                }
                m
            })
            .collect();
        let parts: Vec<Part> = ids
            .iter()
            .zip(&names)
            .map(|(id, names)| {
                let (p, stacks) = &self.stores[id];
                let mut labels = vec![];
                if per_process {
                    labels.extend([("pid", p.pid.to_string()), ("comm", p.comm.clone())]);
                    labels.extend(p.pod.iter().cloned());
                }
                Part { stacks, names, labels }
            })
            .collect();
        pprof_of(&parts, self.start_unix_ns, end_ns.saturating_sub(self.start_ns) as i64)
    }
}

/// What a pull asked for, and where its answer goes.
pub struct Pull {
    pub seconds: u64,
    /// only this process (its PID as the agent sees it)
    pub pid: Option<u32>,
    /// the gzipped profile, or why there is none
    pub reply: SyncSender<Result<Vec<u8>, String>>,
    /// set by the endpoint when the client went away: the recording stops
    pub cancelled: Arc<AtomicBool>,
}

impl Pull {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// Profiles being recorded for pulls.
#[derive(Default)]
pub struct Captures {
    open: Vec<(Pull, Recorder, u64)>,
}

impl Captures {
    /// Start recording for `pull` (Err: too many at once, refused).
    pub fn start(&mut self, pull: Pull, now_ns: u64, now_unix_ns: i64) -> Result<(), Pull> {
        self.drop_cancelled();
        if pull.is_cancelled() {
            return Ok(());
        }
        if self.open.len() >= MAX_CAPTURES {
            return Err(pull);
        }
        let until = now_ns + pull.seconds * 1_000_000_000;
        self.open.push((pull, Recorder::new(now_ns, now_unix_ns), until));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Stop the recordings whose client went away (their slot is free again).
    pub fn drop_cancelled(&mut self) {
        self.open.retain(|(p, _, _)| !p.is_cancelled());
    }

    /// The earliest deadline.
    pub fn next_due(&self) -> Option<u64> {
        self.open.iter().map(|c| c.2).min()
    }

    pub fn add(&mut self, target: u64, proc: &Proc, w: &WaitStacks) {
        for (_, r, _) in &mut self.open {
            r.add(target, proc, w);
        }
    }

    /// The captures whose time is up, removed.
    pub fn due(&mut self, now_ns: u64) -> Vec<(Pull, Recorder)> {
        self.drop_cancelled();
        let (due, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.open).into_iter().partition(|c| c.2 <= now_ns);
        self.open = open;
        due.into_iter().map(|(p, r, _)| (p, r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::stacks::{Frame, Key, Stack};
    use crate::model::state::State;

    fn stacks(n: u32, ns: u64) -> WaitStacks {
        let mut w = WaitStacks::default();
        for i in 0..n {
            let stack: Stack = vec![Frame::python(format!("f{i}"), "/srv/a.py".into(), i)].into();
            w.add(Key { victim: 7, blamed: 8, state: State::GilWait, role: Role::Holder, stack }, ns);
        }
        w
    }

    #[test]
    fn recorders_merge_and_are_bounded() {
        let p = Proc { pid: 10, comm: "py".into(), ..Default::default() };
        let mut r = Recorder::new(0, 0);
        r.add(1, &p, &stacks(3, 5));
        r.add(1, &p, &stacks(3, 5));
        assert_eq!(r.stores[&1].1.ns.values().sum::<u64>(), 30);
        assert_eq!(r.entries, 3);
        let mut big = Recorder::new(0, 0);
        big.add(2, &p, &stacks(MAX_RECORDED as u32 + 5, 1));
        assert_eq!(big.entries, MAX_RECORDED);
        assert_eq!(big.dropped_ns, 5);
    }

    #[test]
    fn captures_end_at_their_deadline_and_are_limited() {
        let mut c = Captures::default();
        let mut rxs = vec![];
        for s in [1, 2, 3, 4, 5] {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            rxs.push(rx);
            let r = c.start(Pull { seconds: s, pid: None, reply: tx, cancelled: Arc::default() }, 0, 0);
            assert_eq!(r.is_ok(), s <= MAX_CAPTURES as u64, "{s}");
        }
        c.add(1, &Proc { pid: 10, comm: "py".into(), ..Default::default() }, &stacks(2, 3));
        assert_eq!(c.next_due(), Some(1_000_000_000));
        let due = c.due(2_000_000_000);
        assert_eq!(due.iter().map(|d| d.0.seconds).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(due[0].1.stores[&1].1.ns.values().sum::<u64>(), 6);
        assert_eq!(c.open.len(), 2);
        // a recording whose client went away stops, and its slot is free again
        c.open[0].0.cancelled.store(true, Ordering::Relaxed);
        assert_eq!(c.due(2_000_000_000).len(), 0);
        assert_eq!(c.open.len(), 1);
        let (tx, _rx) = std::sync::mpsc::sync_channel(1);
        assert!(c.start(Pull { seconds: 9, pid: None, reply: tx, cancelled: Arc::default() }, 0, 0).is_ok());
        assert_eq!(c.open.len(), 2);
    }

    #[test]
    fn profiles_label_processes_and_bound_thread_names() {
        let mut r = Recorder::new(0, 0);
        r.add(1, &Proc { pid: 10, comm: "api".into(), ..Default::default() }, &stacks(1, 9));
        r.add(2, &Proc { pid: 11, comm: "db".into(), ..Default::default() }, &stacks(1, 4));
        let b = r.pprof(1_000, None, true, |_, tid| (tid == 7).then(|| "ingest".to_string()));
        assert_eq!(b.samples(), 2);
        let text = String::from_utf8_lossy(&b.encode()).into_owned();
        for s in ["api", "db", "ingest", "other", "holder", "comm"] {
            assert!(text.contains(s), "{s} missing");
        }
        assert_eq!(r.pprof(1_000, Some(2), true, |_, _| None).samples(), 1);
    }
}
