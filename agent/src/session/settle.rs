//! Blame that stopped growing, moved out of the kernel.
//!
//! A waiter's blame entries grow with its counterparts: a thread that joins
//! workers gets a futex entry per worker that woke it, a thread one run-queue
//! entry per process that ever had its CPU, a GIL waiter one per holder. The
//! kernel maps would hold them as long as the waiter lives. So at every pass of
//! the collector, the entries of live waiters whose value did not change since
//! the previous pass (their counterpart exited, or stopped making this thread
//! wait) are moved out (looked up and deleted in one step) and added back to
//! every sample of their waiter: the maps hold what is active, the numbers stay
//! cumulative. An entry that becomes active again is created anew by the
//! kernel and adds to the settled one.
//!
//! Per waiter, at most `KEEP` counterparts of each kind keep their identity;
//! the wait behind the others is merged into one counterpart, [`GONE`] (the
//! GIL's "unknown holder" for GIL waits): still counted, no longer named.
use std::collections::{HashMap, HashSet};

use super::sample::Blame;
use crate::model::blame::GONE;
use crate::probes::sched::{BlamePick, Comm, FutexRecord, GilRecord, Incarnation, PreemptRecord, SchedProbe};

/// Counterparts of each kind kept by name per waiter.
const KEEP: usize = 64;

#[derive(Default)]
pub(super) struct Settle {
    /// the previous pass's kernel entries: key -> value
    prev_gil: HashMap<(Incarnation, u64), u64>,
    prev_futex: HashMap<(Incarnation, u32, u64), u64>,
    prev_preempt: HashMap<(Incarnation, u32, u32), u64>,
    /// waiter -> what was moved out of the kernel for it
    settled: HashMap<Incarnation, Settled>,
    /// wait merged into GONE because a waiter had KEEP counterparts already (ns)
    merged_ns: u64,
    /// host TIDs of the threads that exited at the previous drain of exits
    gone_before: HashSet<u32>,
    /// swept entries of exited waiters whose exit record was not drained
    /// yet: (the sweep that moved them, entries), until it is
    early: HashMap<Incarnation, (u64, Kernel)>,
    /// sweeps so far
    sweeps: u64,
}

/// Sweeps that swept entries wait for their thread's exit record: it was on
/// the ring already (the thread exited between the drain and the sweep),
/// unless it was lost (counted as such).
const EARLY_KEEP_SWEEPS: u64 = 2;

/// Settled wait of one waiter, keyed like the kernel's entries.
#[derive(Default)]
struct Settled {
    /// holder id -> ns
    gil: HashMap<u64, u64>,
    /// (waker host TID, word) -> ns
    futex: HashMap<(u32, u64), u64>,
    /// (by host TID, by host TGID) -> (comm, ns)
    preempt: HashMap<(u32, u32), (Comm, u64)>,
}

/// Add `ns` under `key`, or under `overflow` when `map` already has KEEP
/// keys; `new(merged)` makes the value of a key not there yet.
fn add<K: Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    key: K,
    overflow: K,
    merged: &mut u64,
    ns: u64,
    add: impl Fn(&mut V, u64),
    new: impl FnOnce(bool) -> V,
) {
    let over = map.len() >= KEEP && !map.contains_key(&key);
    if over {
        *merged += ns;
    }
    add(map.entry(if over { overflow } else { key }).or_insert_with(|| new(over)), ns);
}

impl Settle {
    /// Move the entries of live waiters (`live`) that did not change since the
    /// previous pass out of the kernel; `kernel` is what this sample read.
    pub(super) fn pass(&mut self, probe: &SchedProbe, kernel: &Kernel, live: &HashSet<Incarnation>) {
        let mut pick = BlamePick::default();
        let gil: HashMap<_, _> = kernel.gil.iter().map(|(w, h, ns)| ((*w, *h), *ns)).collect();
        let futex: HashMap<_, _> = kernel.futex.iter().map(|(w, by, addr, ns)| ((*w, *by, *addr), *ns)).collect();
        let preempt: HashMap<_, _> = kernel.preempt.iter().map(|(w, by, tgid, _, ns)| ((*w, *by, *tgid), *ns)).collect();
        pick.gil = quiet(&gil, &self.prev_gil, live, |k| k.0);
        pick.futex = quiet(&futex, &self.prev_futex, live, |k| k.0);
        pick.preempt = quiet(&preempt, &self.prev_preempt, live, |k| k.0);
        let (g, f, p) = if pick.gil.is_empty() && pick.futex.is_empty() && pick.preempt.is_empty() {
            Default::default()
        } else {
            probe.take_blame(&pick)
        };
        self.prev_gil = gil.into_iter().filter(|(k, _)| !pick.gil.contains(k)).collect();
        self.prev_futex = futex.into_iter().filter(|(k, _)| !pick.futex.contains(k)).collect();
        self.prev_preempt = preempt.into_iter().filter(|(k, _)| !pick.preempt.contains(k)).collect();
        self.fold(g, f, p);
    }

    /// At a drain of exits: move out of the kernel the entries of live
    /// waiters whose counterpart (the waker, or what had the CPU) exited at
    /// this drain or the previous one: they stop growing, and under thread
    /// churn (a thread joining thousands of short-lived workers, each of which
    /// wakes it once) they would fill the maps long before the quiet pass. The
    /// previous drain's too: the wait a thread ended as it exited is charged
    /// when its waiter next runs, which can be after that drain read the maps.
    /// `kernel` is what this drain read; `waiters_gone` exited themselves
    /// (their entries are deleted).
    pub(super) fn counterparts_gone(
        &mut self,
        probe: &SchedProbe,
        kernel: &Kernel,
        exited: HashSet<u32>,
        waiters_gone: &HashSet<Incarnation>,
    ) {
        let before = std::mem::replace(&mut self.gone_before, exited);
        let gone = |tid: &u32| *tid != 0 && *tid != GONE && (self.gone_before.contains(tid) || before.contains(tid));
        let pick = BlamePick {
            gil: Default::default(),
            futex: kernel.futex.iter().filter(|r| gone(&r.1) && !waiters_gone.contains(&r.0)).map(|r| (r.0, r.1, r.2)).collect(),
            preempt: kernel.preempt.iter().filter(|r| gone(&r.1) && !waiters_gone.contains(&r.0)).map(|r| (r.0, r.1, r.2)).collect(),
        };
        if pick.futex.is_empty() && pick.preempt.is_empty() {
            return;
        }
        let (g, f, p) = probe.take_blame(&pick);
        self.prev_futex.retain(|k, _| !pick.futex.contains(k));
        self.prev_preempt.retain(|k, _| !pick.preempt.contains(k));
        self.fold(g, f, p);
    }

    /// At a drain of exits, when the probe sweeps (`probes::sweep`): move out
    /// of the kernel the entries of the waiters that exited (final: those of
    /// `waiters`, this drain's, are returned; those of waiters whose exit
    /// record is still on its way are kept for it) and, like
    /// `counterparts_gone`, those of live waiters whose waker or preemptor
    /// exited (settled here). Err: the sweep failed and moved nothing.
    pub(super) fn sweep(&mut self, probe: &SchedProbe, waiters: &HashSet<Incarnation>, gil: bool) -> anyhow::Result<Kernel> {
        let swept = probe.sweep(gil)?;
        if !swept.futex_taken.is_empty() || !swept.preempt_taken.is_empty() {
            let f: HashSet<_> = swept.futex_taken.iter().map(|r| (r.0, r.1, r.2)).collect();
            let p: HashSet<_> = swept.preempt_taken.iter().map(|r| (r.0, r.1, r.2)).collect();
            self.prev_futex.retain(|k, _| !f.contains(k));
            self.prev_preempt.retain(|k, _| !p.contains(k));
        }
        self.fold(vec![], swept.futex_taken, swept.preempt_taken);
        // the exited waiters' entries: this drain's, and those kept for it
        self.sweeps += 1;
        let now = self.sweeps;
        let mut out = Kernel::default();
        for w in waiters {
            if let Some((_, k)) = self.early.remove(w) {
                out.gil.extend(k.gil);
                out.futex.extend(k.futex);
                out.preempt.extend(k.preempt);
            }
        }
        // the others' exit records are still on their way: kept for them
        fn keep(early: &mut HashMap<Incarnation, (u64, Kernel)>, w: Incarnation, now: u64) -> &mut Kernel {
            &mut early.entry(w).or_insert_with(|| (now, Kernel::default())).1
        }
        for r in swept.gil {
            if waiters.contains(&r.0) { &mut out.gil } else { &mut keep(&mut self.early, r.0, now).gil }.push(r);
        }
        for r in swept.futex {
            if waiters.contains(&r.0) { &mut out.futex } else { &mut keep(&mut self.early, r.0, now).futex }.push(r);
        }
        for r in swept.preempt {
            if waiters.contains(&r.0) { &mut out.preempt } else { &mut keep(&mut self.early, r.0, now).preempt }.push(r);
        }
        // kept too long: the exit record was lost (counted), or the thread was forgotten
        let before = self.early.len();
        self.early.retain(|_, (at, _)| now - *at < EARLY_KEEP_SWEEPS);
        crate::shrink::shrink(&mut self.early);
        if self.early.len() < before {
            log::debug!("dropped the swept blame of {} threads whose exit record never came", before - self.early.len());
        }
        Ok(out)
    }

    fn fold(&mut self, gil: Vec<GilRecord>, futex: Vec<FutexRecord>, preempt: Vec<PreemptRecord>) {
        let m = &mut self.merged_ns;
        for (w, holder, ns) in gil {
            add(&mut self.settled.entry(w).or_default().gil, holder, 0, m, ns, |v, ns| *v += ns, |_| 0);
        }
        for (w, waker, addr, ns) in futex {
            add(&mut self.settled.entry(w).or_default().futex, (waker, addr), (GONE, 0), m, ns, |v, ns| *v += ns, |_| 0);
        }
        for (w, by, tgid, comm, ns) in preempt {
            let name = |merged: bool| (if merged { Comm::new("other") } else { comm }, 0);
            add(&mut self.settled.entry(w).or_default().preempt, (by, tgid), (GONE, GONE), m, ns, |v, ns| v.1 += ns, name);
        }
    }

    /// Add the settled entries to a sample's blame records (only those of
    /// the waiters in `only` when given).
    pub(super) fn add_to(&self, b: &mut Blame, only: Option<&HashSet<Incarnation>>) {
        let settled: Box<dyn Iterator<Item = (&Incarnation, &Settled)>> = match only {
            Some(o) if o.len() < self.settled.len() => Box::new(o.iter().filter_map(|w| Some((w, self.settled.get(w)?)))),
            Some(o) => Box::new(self.settled.iter().filter(|(w, _)| o.contains(w))),
            None => Box::new(self.settled.iter()),
        };
        for (w, s) in settled {
            b.gil.entry(*w).or_default().extend(s.gil.iter().map(|(h, ns)| (*h, *ns)));
            if !s.futex.is_empty() {
                b.futex.entry(*w).or_default().extend(s.futex.iter().map(|((by, addr), ns)| (*w, *by, *addr, *ns)));
            }
            if !s.preempt.is_empty() {
                b.preempt.entry(*w).or_default().extend(s.preempt.iter().map(|((by, tgid), (comm, ns))| (*w, *by, *tgid, *comm, *ns)));
            }
        }
    }

    /// Forget the settled entries of waiters that are gone.
    pub(super) fn forget(&mut self, gone: impl Fn(&Incarnation) -> bool) {
        self.settled.retain(|w, _| !gone(w));
        // under churn it held the workers gone without an exit record until the collector
        crate::shrink::shrink(&mut self.settled);
    }

    /// Waiters with settled entries.
    pub(super) fn waiters(&self) -> impl Iterator<Item = &Incarnation> {
        self.settled.keys()
    }

    /// Settled entries, and the wait merged into GONE for lack of room.
    pub(super) fn entries(&self) -> (usize, u64) {
        (self.settled.values().map(|s| s.gil.len() + s.futex.len() + s.preempt.len()).sum(), self.merged_ns)
    }
}

/// The keys of live waiters whose value is the same as at the previous pass.
fn quiet<K: Copy + Eq + std::hash::Hash>(
    now: &HashMap<K, u64>,
    prev: &HashMap<K, u64>,
    live: &HashSet<Incarnation>,
    waiter: impl Fn(&K) -> Incarnation,
) -> HashSet<K> {
    now.iter().filter(|(k, ns)| prev.get(k) == Some(ns) && live.contains(&waiter(k))).map(|(k, _)| *k).collect()
}

/// The blame entries as the kernel holds them, read once per sample.
#[derive(Default)]
pub(super) struct Kernel {
    pub(super) gil: Vec<GilRecord>,
    pub(super) futex: Vec<FutexRecord>,
    pub(super) preempt: Vec<PreemptRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counterparts_beyond_the_bound_are_merged_and_still_counted() {
        let mut s = Settle::default();
        let w = (7, 1);
        let futex: Vec<FutexRecord> = (0..KEEP as u32 + 10).map(|i| (w, 1000 + i, 0x1000 + i as u64 * 8, 5)).collect();
        let preempt: Vec<PreemptRecord> = (0..KEEP as u32 + 3).map(|i| (w, 5000 + i, 5000 + i, Comm::new(&format!("p{i}")), 2)).collect();
        let gil: Vec<GilRecord> = (0..KEEP as u64 + 1).map(|h| (w, 0x7f00 + h, 3)).collect();
        s.fold(gil, futex, preempt);
        // a counterpart already kept keeps adding to its own entry
        s.fold(vec![(w, 0x7f00, 3)], vec![(w, 1000, 0x1000, 5)], vec![]);
        let mut b = Blame::default();
        s.add_to(&mut b, None);
        let f = &b.futex[&w];
        assert_eq!(f.len(), KEEP + 1);
        assert_eq!(f.iter().map(|r| r.3).sum::<u64>(), 5 * (KEEP as u64 + 11));
        assert_eq!(f.iter().find(|r| r.1 == GONE).map(|r| (r.2, r.3)), Some((0, 50)));
        assert_eq!(f.iter().find(|r| r.1 == 1000).map(|r| r.3), Some(10));
        let p = &b.preempt[&w];
        assert_eq!(p.iter().find(|r| r.1 == GONE).map(|r| (r.2, r.3, r.4)), Some((GONE, Comm::new("other"), 6)));
        assert_eq!(b.gil[&w].iter().find(|r| r.0 == 0).map(|r| r.1), Some(3));
        assert_eq!(b.gil[&w].iter().map(|r| r.1).sum::<u64>(), 3 * (KEEP as u64 + 2));
        assert_eq!(s.entries(), (KEEP + 1 + KEEP + 1 + KEEP + 1, 50 + 6 + 3));
        s.forget(|x| *x == w);
        assert_eq!(s.entries().0, 0);
    }

    #[test]
    fn only_unchanged_entries_of_live_waiters_are_quiet() {
        let live = HashSet::from([(1, 1)]);
        let prev = HashMap::from([(((1, 1), 5u64), 10u64), (((1, 1), 6), 10), (((2, 1), 5), 10)]);
        let now = HashMap::from([(((1, 1), 5u64), 10u64), (((1, 1), 6), 11), (((2, 1), 5), 10), (((1, 1), 7), 1)]);
        assert_eq!(quiet(&now, &prev, &live, |k| k.0), HashSet::from([((1, 1), 5)]));
    }
}
