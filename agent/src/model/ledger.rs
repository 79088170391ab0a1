//! The blame ledger: who made each waiter wait, as the kernel's blame maps
//! hold it and as it was moved out of them. Pure: it is handed what the maps
//! held (a reading, a sweep, what a take returned) and the threads alive, and
//! says which entries to move out and what each waiter's blame is; the session
//! does the reading and the taking (`session/sample.rs`, `session/lifetime.rs`).
//!
//! A waiter's blame entries grow with its counterparts: a thread that joins
//! workers gets a futex entry per worker that woke it, a thread one run-queue
//! entry per process that ever had its CPU, a GIL waiter one per holder. The
//! kernel maps would hold them as long as the waiter lives. So entries that
//! stopped growing are moved out of the kernel and **settled** here, added
//! back to every view of their waiter: the maps hold what is active, the
//! numbers stay cumulative. An entry that becomes active again is created
//! anew by the kernel and adds to the settled one. Entries are moved out when
//! - their value did not change since the previous pass and their waiter
//!   lives ([`Ledger::pass`]: the counterpart exited, or stopped making it wait);
//! - their counterpart (the waker, or what had the CPU) exited, at that drain
//!   of exits or the one before ([`Ledger::counterparts_gone`]; the wait a
//!   thread ended as it exited is charged when its waiter next runs, which can
//!   be after that drain read the maps);
//! - the probe's sweep moved them ([`Ledger::swept`]: the entries of exited
//!   waiters, final, and those of live waiters whose counterpart exited).
//!
//! Per waiter, at most [`KEEP`] counterparts of each kind keep their identity;
//! the wait behind the others is merged into one counterpart, [`GONE`] (the
//! GIL's "unknown holder", 0, for GIL waits): still counted, no longer named.
//! A waiter's sum is the same before and after its entries move or merge.
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use super::blame::GONE;

/// A thread incarnation as the blame maps key it: (host TID, (u32)start).
/// The start tells a thread from a later one reusing its TID.
pub type Incarnation = (u32, u32);

/// The incarnation of a thread that started at `start_ns`.
pub fn incarnation(host_tid: u32, start_ns: u64) -> Incarnation {
    (host_tid, start_ns as u32)
}

/// A task's `comm` as the kernel keeps it (up to 15 bytes, NUL-padded): a
/// copy, not an allocation, for every run-queue blame entry read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Comm(pub [u8; 16]);

impl Comm {
    /// The first 15 bytes of `name`.
    pub fn new(name: &str) -> Comm {
        let mut c = [0u8; 16];
        let n = name.len().min(15);
        c[..n].copy_from_slice(&name.as_bytes()[..n]);
        Comm(c)
    }

    /// As text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        let n = self.0.iter().position(|c| *c == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..n]).into_owned()
    }
}

/// A GIL wait's key: the waiter and the holder's id (its pthread_t; 0: unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GilKey {
    pub waiter: Incarnation,
    pub holder: u64,
}

/// A futex wait's key: the waiter, the waker's host TID (0: none, a timeout
/// or a signal) and the word (with `model::blame::PARKED` if parked on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FutexKey {
    pub waiter: Incarnation,
    pub waker: u32,
    pub word: u64,
}

/// Who kept a thread from running: in the run queue (`state` the run queue's), the thread
/// (host TID, 0: the CPU was idle) and process (host TGID) that had the CPU; in a blocked
/// state, what woke it: a task (`ctx` 0: a thread of the waiter's process by its TID, another
/// process by its TGID) or an interrupt (`ctx` 1 softirq, 2 hard interrupt; no TID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PreemptKey {
    pub waiter: Incarnation,
    pub by_tid: u32,
    pub by_tgid: u32,
    /// the state the wait was in (`model::state::State` as the probe numbers it)
    pub state: u16,
    /// what woke it (ABI enum wm_wake_ctx): 0 a task
    pub ctx: u16,
}

/// GIL waits charged to a holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GilEntry {
    pub key: GilKey,
    pub ns: u64,
}

/// Futex waits charged to a waker and a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutexEntry {
    pub key: FutexKey,
    pub ns: u64,
}

/// Run-queue waits charged to what had the CPU, with its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreemptEntry {
    pub key: PreemptKey,
    pub comm: Comm,
    pub ns: u64,
}

/// Blame entries of the three kinds: a reading of the kernel's maps, what a
/// take or a sweep moved out of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entries {
    pub gil: Vec<GilEntry>,
    pub futex: Vec<FutexEntry>,
    pub preempt: Vec<PreemptEntry>,
}

impl Entries {
    pub fn is_empty(&self) -> bool {
        self.gil.is_empty() && self.futex.is_empty() && self.preempt.is_empty()
    }

    /// The entries whose waiter `keep` says.
    pub fn of(&self, keep: impl Fn(&Incarnation) -> bool) -> Entries {
        Entries {
            gil: self.gil.iter().filter(|e| keep(&e.key.waiter)).copied().collect(),
            futex: self.futex.iter().filter(|e| keep(&e.key.waiter)).copied().collect(),
            preempt: self.preempt.iter().filter(|e| keep(&e.key.waiter)).copied().collect(),
        }
    }

    fn extend(&mut self, other: Entries) {
        self.gil.extend(other.gil);
        self.futex.extend(other.futex);
        self.preempt.extend(other.preempt);
    }
}

/// The keys of blame entries to move out of the kernel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pick {
    pub gil: HashSet<GilKey>,
    pub futex: HashSet<FutexKey>,
    pub preempt: HashSet<PreemptKey>,
}

impl Pick {
    pub fn is_empty(&self) -> bool {
        self.gil.is_empty() && self.futex.is_empty() && self.preempt.is_empty()
    }
}

/// What a sweep of the blame maps moved out of the kernel: the entries of
/// waiters that exited (final), and those of live waiters whose waker or
/// preemptor is not a watched thread any more (taken).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Swept {
    pub exited: Entries,
    pub taken: Entries,
}

/// Each waiter's blame: the kernel's entries and the settled ones (settled
/// entries carry the key they were settled under: a merged counterpart is
/// [`GONE`], the GIL's unknown holder 0).
#[derive(Debug, Default)]
pub struct ByWaiter {
    pub gil: HashMap<Incarnation, Vec<GilEntry>>,
    pub futex: HashMap<Incarnation, Vec<FutexEntry>>,
    pub preempt: HashMap<Incarnation, Vec<PreemptEntry>>,
}

impl ByWaiter {
    /// Waiters with entries.
    pub fn waiters(&self) -> impl Iterator<Item = &Incarnation> {
        self.gil.keys().chain(self.futex.keys()).chain(self.preempt.keys())
    }

    /// A waiter's GIL, futex and run-queue blame, summed (ns).
    #[cfg(test)]
    pub fn totals(&self, w: &Incarnation) -> (u64, u64, u64) {
        (
            self.gil.get(w).into_iter().flatten().map(|e| e.ns).sum(),
            self.futex.get(w).into_iter().flatten().map(|e| e.ns).sum(),
            self.preempt.get(w).into_iter().flatten().map(|e| e.ns).sum(),
        )
    }
}

/// Counterparts of each kind kept by name per waiter.
pub const KEEP: usize = 64;

/// Sweeps that swept entries wait for their thread's exit record: it was on
/// the ring already (the thread exited between the drain and the sweep),
/// unless it was lost (counted as such).
const EARLY_KEEP_SWEEPS: u64 = 2;

#[derive(Default)]
pub struct Ledger {
    /// the previous pass's kernel entries: key -> value
    prev_gil: HashMap<GilKey, u64>,
    prev_futex: HashMap<FutexKey, u64>,
    prev_preempt: HashMap<PreemptKey, u64>,
    /// waiter -> what was moved out of the kernel for it
    settled: HashMap<Incarnation, Settled>,
    /// wait merged into GONE because a waiter had KEEP counterparts already (ns)
    merged_ns: u64,
    /// host TIDs of the threads that exited at the previous drain of exits
    gone_before: HashSet<u32>,
    /// swept entries of exited waiters whose exit record was not drained
    /// yet: (the sweep that moved them, entries), until it is
    early: HashMap<Incarnation, (u64, Entries)>,
    /// sweeps so far
    sweeps: u64,
}

/// Settled wait of one waiter, keyed like the kernel's entries.
#[derive(Default)]
struct Settled {
    /// holder id -> ns
    gil: HashMap<u64, u64>,
    /// (waker host TID, word) -> ns
    futex: HashMap<(u32, u64), u64>,
    /// (by host TID, by host TGID, state, ctx) -> (comm, ns)
    preempt: HashMap<(u32, u32, u16, u16), (Comm, u64)>,
}

/// Add `ns` under `key`, or under `overflow` when `map` already has KEEP
/// keys; `new(merged)` makes the value of a key not there yet.
fn add<K: Eq + Hash, V>(
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

/// The keys of live waiters whose value is the same as at the previous pass.
fn quiet<K: Copy + Eq + Hash>(now: &HashMap<K, u64>, prev: &HashMap<K, u64>, live: impl Fn(&K) -> bool) -> HashSet<K> {
    now.iter().filter(|(k, ns)| prev.get(k) == Some(ns) && live(k)).map(|(k, _)| *k).collect()
}

impl Ledger {
    /// A pass over `kernel` (this sample's reading of the maps): the entries
    /// of live waiters (`live`) that did not change since the previous pass
    /// are handed to `take`, which moves them out of the kernel and returns
    /// what it moved; that is settled.
    pub fn pass(&mut self, kernel: &Entries, live: &HashSet<Incarnation>, take: impl FnOnce(&Pick) -> Entries) {
        let gil: HashMap<_, _> = kernel.gil.iter().map(|e| (e.key, e.ns)).collect();
        let futex: HashMap<_, _> = kernel.futex.iter().map(|e| (e.key, e.ns)).collect();
        let preempt: HashMap<_, _> = kernel.preempt.iter().map(|e| (e.key, e.ns)).collect();
        let pick = Pick {
            gil: quiet(&gil, &self.prev_gil, |k| live.contains(&k.waiter)),
            futex: quiet(&futex, &self.prev_futex, |k| live.contains(&k.waiter)),
            preempt: quiet(&preempt, &self.prev_preempt, |k| live.contains(&k.waiter)),
        };
        self.prev_gil = gil.into_iter().filter(|(k, _)| !pick.gil.contains(k)).collect();
        self.prev_futex = futex.into_iter().filter(|(k, _)| !pick.futex.contains(k)).collect();
        self.prev_preempt = preempt.into_iter().filter(|(k, _)| !pick.preempt.contains(k)).collect();
        if !pick.is_empty() {
            self.settle(take(&pick));
        }
    }

    /// At a drain of exits (without the sweep): the entries in `kernel` (what
    /// this drain read) of live waiters whose counterpart exited at this drain
    /// (`exited`, host TIDs) or the previous one are handed to `take`, and
    /// what it moved is settled. They stop growing, and under thread churn (a
    /// thread joining thousands of short-lived workers, each of which wakes it
    /// once) they would fill the maps long before the quiet pass. The
    /// previous drain's too: the wait a thread ended as it exited is charged
    /// when its waiter next runs, which can be after that drain read the
    /// maps. `waiters_gone` exited themselves (their entries are deleted).
    pub fn counterparts_gone(
        &mut self,
        kernel: &Entries,
        exited: HashSet<u32>,
        waiters_gone: &HashSet<Incarnation>,
        take: impl FnOnce(&Pick) -> Entries,
    ) {
        let before = std::mem::replace(&mut self.gone_before, exited);
        let gone = |tid: u32| tid != 0 && tid != GONE && (self.gone_before.contains(&tid) || before.contains(&tid));
        let pick = Pick {
            gil: Default::default(),
            futex: kernel.futex.iter().filter(|e| gone(e.key.waker) && !waiters_gone.contains(&e.key.waiter)).map(|e| e.key).collect(),
            preempt: kernel.preempt.iter().filter(|e| gone(e.key.by_tid) && !waiters_gone.contains(&e.key.waiter)).map(|e| e.key).collect(),
        };
        if pick.is_empty() {
            return;
        }
        self.prev_futex.retain(|k, _| !pick.futex.contains(k));
        self.prev_preempt.retain(|k, _| !pick.preempt.contains(k));
        self.settle(take(&pick));
    }

    /// At a drain of exits, what the probe's sweep moved out of the kernel:
    /// the entries it took from live waiters are settled; those of the
    /// waiters that exited are final, returned for `waiters` (this drain's
    /// exits) and kept for those whose exit record is still on its way (for
    /// `EARLY_KEEP_SWEEPS` sweeps: past that, the record was lost, counted
    /// as such, or the thread was forgotten).
    pub fn swept(&mut self, swept: Swept, waiters: &HashSet<Incarnation>) -> Entries {
        if !swept.taken.is_empty() {
            let f: HashSet<_> = swept.taken.futex.iter().map(|e| e.key).collect();
            let p: HashSet<_> = swept.taken.preempt.iter().map(|e| e.key).collect();
            let g: HashSet<_> = swept.taken.gil.iter().map(|e| e.key).collect();
            self.prev_gil.retain(|k, _| !g.contains(k));
            self.prev_futex.retain(|k, _| !f.contains(k));
            self.prev_preempt.retain(|k, _| !p.contains(k));
        }
        self.settle(swept.taken);
        self.sweeps += 1;
        let now = self.sweeps;
        // this drain's exited waiters: what an earlier sweep kept for them, and this one's
        let mut out = Entries::default();
        for w in waiters {
            if let Some((_, k)) = self.early.remove(w) {
                out.extend(k);
            }
        }
        // the others' exit records are still on their way: kept for them
        fn keep(early: &mut HashMap<Incarnation, (u64, Entries)>, w: Incarnation, now: u64) -> &mut Entries {
            &mut early.entry(w).or_insert_with(|| (now, Entries::default())).1
        }
        for e in swept.exited.gil {
            if waiters.contains(&e.key.waiter) { &mut out } else { keep(&mut self.early, e.key.waiter, now) }.gil.push(e);
        }
        for e in swept.exited.futex {
            if waiters.contains(&e.key.waiter) { &mut out } else { keep(&mut self.early, e.key.waiter, now) }.futex.push(e);
        }
        for e in swept.exited.preempt {
            if waiters.contains(&e.key.waiter) { &mut out } else { keep(&mut self.early, e.key.waiter, now) }.preempt.push(e);
        }
        let before = self.early.len();
        self.early.retain(|_, (at, _)| now - *at < EARLY_KEEP_SWEEPS);
        crate::shrink::shrink(&mut self.early);
        if self.early.len() < before {
            log::debug!("dropped the swept blame of {} threads whose exit record never came", before - self.early.len());
        }
        out
    }

    /// Settle entries moved out of the kernel: add them to their waiter's.
    pub fn settle(&mut self, taken: Entries) {
        let m = &mut self.merged_ns;
        for e in taken.gil {
            add(&mut self.settled.entry(e.key.waiter).or_default().gil, e.key.holder, 0, m, e.ns, |v, ns| *v += ns, |_| 0);
        }
        for e in taken.futex {
            let s = &mut self.settled.entry(e.key.waiter).or_default().futex;
            add(s, (e.key.waker, e.key.word), (GONE, 0), m, e.ns, |v, ns| *v += ns, |_| 0);
        }
        for e in taken.preempt {
            let name = |merged: bool| (if merged { Comm::new("other") } else { e.comm }, 0);
            let s = &mut self.settled.entry(e.key.waiter).or_default().preempt;
            let (state, ctx) = (e.key.state, e.key.ctx);
            add(s, (e.key.by_tid, e.key.by_tgid, state, ctx), (GONE, GONE, state, 0), m, e.ns, |v, ns| v.1 += ns, name);
        }
    }

    /// Each waiter's blame: the kernel's entries (`kernel`: a reading of the
    /// maps and of the threads' own rows, or what a sweep returned; a key in
    /// two is two entries, which the views add up) and the settled ones; only
    /// of the waiters in `only` when given (the kernel's entries are all read:
    /// under thread churn, the exits' are a few among many).
    pub fn view(&self, kernel: &[&Entries], only: Option<&HashSet<Incarnation>>) -> ByWaiter {
        let mut b = ByWaiter::default();
        let wanted = |w: &Incarnation| only.is_none_or(|o| o.contains(w));
        for k in kernel {
            for e in k.gil.iter().filter(|e| wanted(&e.key.waiter)) {
                b.gil.entry(e.key.waiter).or_default().push(*e);
            }
            for e in k.futex.iter().filter(|e| wanted(&e.key.waiter)) {
                b.futex.entry(e.key.waiter).or_default().push(*e);
            }
            for e in k.preempt.iter().filter(|e| wanted(&e.key.waiter)) {
                b.preempt.entry(e.key.waiter).or_default().push(*e);
            }
        }
        let settled: Box<dyn Iterator<Item = (&Incarnation, &Settled)>> = match only {
            Some(o) if o.len() < self.settled.len() => Box::new(o.iter().filter_map(|w| Some((w, self.settled.get(w)?)))),
            Some(o) => Box::new(self.settled.iter().filter(|(w, _)| o.contains(w))),
            None => Box::new(self.settled.iter()),
        };
        for (&waiter, s) in settled {
            if !s.gil.is_empty() {
                let v = b.gil.entry(waiter).or_default();
                v.extend(s.gil.iter().map(|(&holder, &ns)| GilEntry { key: GilKey { waiter, holder }, ns }));
            }
            if !s.futex.is_empty() {
                let v = b.futex.entry(waiter).or_default();
                v.extend(s.futex.iter().map(|(&(waker, word), &ns)| FutexEntry { key: FutexKey { waiter, waker, word }, ns }));
            }
            if !s.preempt.is_empty() {
                let v = b.preempt.entry(waiter).or_default();
                v.extend(s.preempt.iter().map(|(&(by_tid, by_tgid, state, ctx), &(comm, ns))| PreemptEntry {
                    key: PreemptKey { waiter, by_tid, by_tgid, state, ctx },
                    comm,
                    ns,
                }));
            }
        }
        b
    }

    /// Forget the settled entries of waiters that are gone.
    pub fn forget(&mut self, gone: impl Fn(&Incarnation) -> bool) {
        self.settled.retain(|w, _| !gone(w));
        // under churn it held the workers gone without an exit record until the collector
        crate::shrink::shrink(&mut self.settled);
    }

    /// Waiters with settled entries.
    pub fn waiters(&self) -> impl Iterator<Item = &Incarnation> {
        self.settled.keys()
    }

    /// Settled entries, and the wait merged into GONE for lack of room.
    pub fn entries(&self) -> (usize, u64) {
        (self.settled.values().map(|s| s.gil.len() + s.futex.len() + s.preempt.len()).sum(), self.merged_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's blame maps as the probes keep them: a wait is added to
    /// its entry, or creates it; a take or a delete removes entries whole.
    #[derive(Default)]
    struct Maps {
        gil: HashMap<GilKey, u64>,
        futex: HashMap<FutexKey, u64>,
        preempt: HashMap<PreemptKey, (Comm, u64)>,
    }

    impl Maps {
        fn gil(&mut self, waiter: Incarnation, holder: u64, ns: u64) {
            *self.gil.entry(GilKey { waiter, holder }).or_default() += ns;
        }
        fn futex(&mut self, waiter: Incarnation, waker: u32, word: u64, ns: u64) {
            *self.futex.entry(FutexKey { waiter, waker, word }).or_default() += ns;
        }
        fn preempt(&mut self, waiter: Incarnation, by_tid: u32, by_tgid: u32, comm: &str, ns: u64) {
            self.preempt.entry(PreemptKey { waiter, by_tid, by_tgid, state: 1, ctx: 0 }).or_insert((Comm::new(comm), 0)).1 += ns;
        }
        fn read(&self) -> Entries {
            let mut e = Entries {
                gil: self.gil.iter().map(|(&key, &ns)| GilEntry { key, ns }).collect(),
                futex: self.futex.iter().map(|(&key, &ns)| FutexEntry { key, ns }).collect(),
                preempt: self.preempt.iter().map(|(&key, &(comm, ns))| PreemptEntry { key, comm, ns }).collect(),
            };
            e.gil.sort_by_key(|e| e.key);
            e.futex.sort_by_key(|e| e.key);
            e.preempt.sort_by_key(|e| e.key);
            e
        }
        fn take(&mut self, p: &Pick) -> Entries {
            Entries {
                gil: p.gil.iter().filter_map(|k| Some(GilEntry { key: *k, ns: self.gil.remove(k)? })).collect(),
                futex: p.futex.iter().filter_map(|k| Some(FutexEntry { key: *k, ns: self.futex.remove(k)? })).collect(),
                preempt: p
                    .preempt
                    .iter()
                    .filter_map(|k| self.preempt.remove(k).map(|(comm, ns)| PreemptEntry { key: *k, comm, ns }))
                    .collect(),
            }
        }
        fn delete(&mut self, e: &Entries) {
            e.gil.iter().for_each(|e| _ = self.gil.remove(&e.key));
            e.futex.iter().for_each(|e| _ = self.futex.remove(&e.key));
            e.preempt.iter().for_each(|e| _ = self.preempt.remove(&e.key));
        }
        /// The sweep program: the entries of waiters without a thread, and
        /// those of live waiters whose waker or preemptor has none.
        fn sweep(&mut self, alive: &HashSet<Incarnation>) -> Swept {
            let tids: HashSet<u32> = alive.iter().map(|w| w.0).collect();
            let all = self.read();
            let exited = all.of(|w| !alive.contains(w));
            let other = |t: u32| t != 0 && !tids.contains(&t);
            let taken = Entries {
                gil: vec![],
                futex: all.futex.iter().filter(|e| alive.contains(&e.key.waiter) && other(e.key.waker)).copied().collect(),
                preempt: all.preempt.iter().filter(|e| alive.contains(&e.key.waiter) && other(e.key.by_tid)).copied().collect(),
            };
            self.delete(&exited);
            self.delete(&taken);
            Swept { exited, taken }
        }
        fn len(&self) -> usize {
            self.gil.len() + self.futex.len() + self.preempt.len()
        }
    }

    /// The session's steps around the ledger (`session/sample.rs`,
    /// `lifetime.rs`), with the maps above for the kernel.
    struct Agent {
        ledger: Ledger,
        sweeps: bool,
    }

    impl Agent {
        fn new(sweeps: bool) -> Agent {
            Agent { ledger: Ledger::default(), sweeps }
        }

        /// A drain of exits: the final blame of the threads in `exits`.
        fn drain(&mut self, maps: &mut Maps, exits: &[Incarnation], alive: &HashSet<Incarnation>) -> ByWaiter {
            let gone: HashSet<Incarnation> = exits.iter().copied().collect();
            if exits.is_empty() {
                return ByWaiter::default();
            }
            let view = if self.sweeps {
                let final_ = self.ledger.swept(maps.sweep(alive), &gone);
                self.ledger.view(&[&final_], Some(&gone))
            } else {
                let kernel = maps.read();
                let view = self.ledger.view(&[&kernel], Some(&gone));
                maps.delete(&kernel.of(|w| gone.contains(w)));
                self.ledger.counterparts_gone(&kernel, gone.iter().map(|w| w.0).collect(), &gone, |p| maps.take(p));
                view
            };
            self.ledger.forget(|w| gone.contains(w));
            view
        }

        /// A sample of the live threads, with the collector's quiet pass.
        fn sample(&mut self, maps: &mut Maps, alive: &HashSet<Incarnation>) -> ByWaiter {
            let kernel = maps.read();
            let view = self.ledger.view(&[&kernel], None);
            self.ledger.pass(&kernel, alive, |p| maps.take(p));
            view
        }
    }

    /// Each waiter's (GIL, futex, run-queue) wait as charged.
    #[derive(Default)]
    struct Truth(HashMap<Incarnation, (u64, u64, u64)>);

    impl Truth {
        fn check(&self, view: &ByWaiter, waiters: impl IntoIterator<Item = Incarnation>, when: &str) {
            for w in waiters {
                assert_eq!(view.totals(&w), self.0.get(&w).copied().unwrap_or_default(), "{when}: waiter {w:?}");
            }
        }
    }

    /// A thread joining thousands of short-lived workers: each wakes it
    /// once, was preempted by it, and exits; every third one's wake is
    /// charged after the drain that read its exit (the waiter ran later). At
    /// every drain and sample each waiter's blame is exactly what was
    /// charged to it, the maps hold what is active only, and the ledger keeps
    /// at most KEEP counterparts by name.
    #[test]
    fn a_joiner_under_churn_keeps_its_exact_blame_with_bounded_maps() {
        for sweeps in [false, true] {
            let mut maps = Maps::default();
            let mut agent = Agent::new(sweeps);
            let mut truth = Truth::default();
            let joiner = (10, 1);
            let mut alive = HashSet::from([joiner]);
            let mut late: Vec<(u32, u64)> = vec![];
            for round in 0..400u32 {
                // 5 workers per round
                let workers: Vec<Incarnation> = (0..5).map(|i| (1000 + round * 5 + i, round)).collect();
                alive.extend(workers.iter().copied());
                for (i, w) in workers.iter().enumerate() {
                    let ns = 100 + i as u64;
                    if (w.0 % 3) == 0 {
                        late.push((w.0, ns));
                    } else {
                        maps.futex(joiner, w.0, 0x5000, ns);
                        truth.0.entry(joiner).or_default().1 += ns;
                    }
                    maps.preempt(*w, joiner.0, joiner.0, "joiner", 7);
                    truth.0.entry(*w).or_default().2 += 7;
                    maps.preempt(joiner, w.0, joiner.0, "worker", 3);
                    truth.0.entry(joiner).or_default().2 += 3;
                }
                for w in &workers {
                    alive.remove(w);
                }
                let finals = agent.drain(&mut maps, &workers, &alive);
                truth.check(&finals, workers.iter().copied(), &format!("sweeps={sweeps} round {round}: an exit"));
                // the waits the exited workers ended, charged as the joiner runs
                for (waker, ns) in late.drain(..) {
                    maps.futex(joiner, waker, 0x5000, ns);
                    truth.0.entry(joiner).or_default().1 += ns;
                }
                if round % 10 == 9 {
                    let view = agent.sample(&mut maps, &alive);
                    truth.check(&view, [joiner], &format!("sweeps={sweeps} round {round}: a sample"));
                }
                // a drain (or a sweep) moves a gone counterpart's entries out by the next drain
                assert!(maps.len() <= 4 * 5 + 2, "sweeps={sweeps} round {round}: {} entries in the maps", maps.len());
            }
            let view = agent.sample(&mut maps, &alive);
            truth.check(&view, [joiner], "the end");
            let futex = &view.futex[&joiner];
            assert!(futex.len() <= KEEP + 1 + 10, "{} futex counterparts", futex.len());
            assert!(futex.iter().any(|e| e.key.waker == GONE), "the workers past KEEP are merged");
            let (settled, merged) = agent.ledger.entries();
            assert!(settled <= 2 * (KEEP + 1), "{settled} settled");
            assert!(merged > 0);
            // the joiner exits: nothing of it or its workers is left anywhere
            alive.clear();
            let finals = agent.drain(&mut maps, &[joiner], &alive);
            truth.check(&finals, [joiner], "the joiner's exit");
            assert_eq!(agent.ledger.entries().0, 0);
            assert_eq!(maps.len(), 0);
        }
    }

    /// A settled counterpart past KEEP moves to the merged one (GONE, "other"):
    /// the key changes, the waiter's sum does not, and the named key is gone.
    #[test]
    fn a_relabel_into_the_merged_counterpart_keeps_the_sum() {
        let mut maps = Maps::default();
        let mut agent = Agent::new(false);
        let w = (7, 1);
        let live = HashSet::from([w]);
        for i in 0..KEEP as u32 + 1 {
            maps.futex(w, 100 + i, 0x10, 5);
            maps.preempt(w, 500 + i, 500 + i, &format!("p{i}"), 2);
            maps.gil(w, 0x7f00 + i as u64, 3);
        }
        let first = agent.sample(&mut maps, &live);
        let unchanged = agent.sample(&mut maps, &live); // the quiet pass takes all of them
        assert_eq!(maps.len(), 0);
        let after = agent.sample(&mut maps, &live);
        let n = KEEP as u64 + 1;
        assert_eq!(first.totals(&w), (3 * n, 5 * n, 2 * n));
        assert_eq!(unchanged.totals(&w), first.totals(&w));
        assert_eq!(after.totals(&w), first.totals(&w));
        assert_eq!(after.futex[&w].len(), KEEP + 1);
        let merged = after.futex[&w].iter().filter(|e| e.key.waker == GONE).collect::<Vec<_>>();
        assert_eq!(merged.len(), 1);
        assert_eq!((merged[0].key.word, merged[0].ns), (0, 5));
        let p = after.preempt[&w].iter().find(|e| e.key.by_tid == GONE).expect("merged preemptor");
        assert_eq!((p.key.by_tgid, p.comm.text(), p.ns), (GONE, "other".to_string(), 2));
        assert_eq!(after.gil[&w].iter().find(|e| e.key.holder == 0).map(|e| e.ns), Some(3));
        assert_eq!(agent.ledger.entries(), (3 * (KEEP + 1), 5 + 2 + 3));
        // a counterpart kept by name keeps adding to its own entry, a merged one to the merged
        let named = after.futex[&w].iter().find(|e| e.key.waker != GONE).expect("named").key.waker;
        let merged = (100..101 + KEEP as u32).find(|t| after.futex[&w].iter().all(|e| e.key.waker != *t)).expect("merged");
        maps.futex(w, named, 0x10, 5);
        maps.futex(w, merged, 0x10, 5);
        agent.sample(&mut maps, &live);
        agent.sample(&mut maps, &live);
        let again = agent.sample(&mut maps, &live);
        assert_eq!(maps.len(), 0);
        assert_eq!(again.futex[&w].len(), KEEP + 1);
        assert_eq!(again.futex[&w].iter().find(|e| e.key.waker == named).map(|e| e.ns), Some(10));
        assert_eq!(again.futex[&w].iter().find(|e| e.key.waker == GONE).map(|e| e.ns), Some(10));
    }

    /// A settled entry whose counterpart makes the waiter wait again: the
    /// kernel creates it anew and the view has both, then one.
    #[test]
    fn an_entry_active_again_adds_to_the_settled_one() {
        let mut maps = Maps::default();
        let mut agent = Agent::new(false);
        let w = (3, 9);
        let live = HashSet::from([w]);
        maps.futex(w, 4, 0x20, 50);
        agent.sample(&mut maps, &live);
        agent.sample(&mut maps, &live);
        assert_eq!(maps.len(), 0, "quiet: settled");
        maps.futex(w, 4, 0x20, 20);
        let both = agent.sample(&mut maps, &live);
        assert_eq!(both.futex[&w].iter().map(|e| (e.key.waker, e.ns)).collect::<Vec<_>>(), [(4, 20), (4, 50)]);
        agent.sample(&mut maps, &live);
        let one = agent.sample(&mut maps, &live);
        assert_eq!(one.futex[&w].iter().map(|e| (e.key.waker, e.ns)).collect::<Vec<_>>(), [(4, 70)]);
    }

    /// Only unchanged entries of live waiters are taken by the quiet pass: a
    /// growing one stays, and a waiter gone without an exit record is left
    /// to the collector (its entries are deleted, never settled).
    #[test]
    fn the_quiet_pass_takes_only_unchanged_entries_of_live_waiters() {
        let mut maps = Maps::default();
        let mut agent = Agent::new(false);
        let (a, b) = ((1, 1), (2, 1));
        let live = HashSet::from([a]);
        maps.futex(a, 9, 0x30, 10);
        maps.futex(a, 8, 0x30, 10);
        maps.futex(b, 9, 0x30, 10);
        agent.sample(&mut maps, &live);
        maps.futex(a, 8, 0x30, 1);
        agent.sample(&mut maps, &live);
        let mut left: Vec<FutexKey> = maps.futex.keys().copied().collect();
        left.sort();
        assert_eq!(left, [FutexKey { waiter: a, waker: 8, word: 0x30 }, FutexKey { waiter: b, waker: 9, word: 0x30 }]);
        assert_eq!(agent.ledger.waiters().collect::<Vec<_>>(), [&a]);
    }

    /// A thread reusing an exited thread's TID inherits none of its blame.
    #[test]
    fn a_reused_tid_starts_clean() {
        for sweeps in [false, true] {
            let mut maps = Maps::default();
            let mut agent = Agent::new(sweeps);
            let (old, new) = ((5, 1), (5, 2));
            let mut alive = HashSet::from([old]);
            maps.futex(old, 6, 0x40, 30);
            agent.sample(&mut maps, &alive);
            agent.sample(&mut maps, &alive); // settled
            maps.preempt(old, 6, 6, "six", 4);
            alive = HashSet::from([new]);
            let finals = agent.drain(&mut maps, &[old], &alive);
            assert_eq!(finals.totals(&old), (0, 30, 4), "sweeps={sweeps}");
            maps.futex(new, 6, 0x40, 1);
            let view = agent.sample(&mut maps, &alive);
            assert_eq!(view.totals(&new), (0, 1, 0), "sweeps={sweeps}");
            assert_eq!(view.totals(&old), (0, 0, 0), "sweeps={sweeps}");
        }
    }

    /// A sweep can move the entries of a thread whose exit record is still on
    /// the ring (it exited between the drain and the sweep): they are its
    /// final blame at the next drain, and dropped if the record never comes.
    #[test]
    fn swept_entries_wait_for_their_exit_record() {
        let mut maps = Maps::default();
        let mut agent = Agent::new(true);
        let (a, b, c) = ((1, 1), (2, 1), (3, 1));
        maps.futex(b, 1, 0x50, 40);
        maps.gil(b, 0x99, 6);
        maps.preempt(c, 1, 1, "one", 8);
        // a exits; b and c have exited too, but their records come later (or never)
        let alive = HashSet::from([]);
        let finals = agent.drain(&mut maps, &[a], &alive);
        assert_eq!(finals.totals(&b), (0, 0, 0));
        assert_eq!(maps.len(), 0);
        let finals = agent.drain(&mut maps, &[b], &alive);
        assert_eq!(finals.totals(&b), (6, 40, 0));
        agent.drain(&mut maps, &[a], &alive);
        let finals = agent.drain(&mut maps, &[c], &alive);
        assert_eq!(finals.totals(&c), (0, 0, 0), "kept for two sweeps only");
    }

    /// Without the sweep, the entries whose counterpart exited are moved out
    /// at that drain or the next; a waker that is not a thread (0: a timeout)
    /// and the merged counterpart never are.
    #[test]
    fn counterparts_gone_are_taken_by_the_next_drain() {
        let mut maps = Maps::default();
        let mut agent = Agent::new(false);
        let w = (1, 1);
        let alive = HashSet::from([w]);
        maps.futex(w, 0, 0x60, 1);
        maps.futex(w, GONE, 0x60, 1);
        maps.futex(w, 20, 0x60, 5);
        agent.drain(&mut maps, &[(20, 1)], &alive);
        assert_eq!(maps.futex.len(), 2);
        maps.futex(w, 20, 0x60, 5); // charged after the drain that read 20's exit
        agent.drain(&mut maps, &[(21, 1)], &alive);
        assert_eq!(maps.futex.len(), 2, "taken at the next drain");
        maps.futex(w, 20, 0x60, 5);
        agent.drain(&mut maps, &[(22, 1)], &alive);
        assert_eq!(maps.futex.len(), 3, "two drains later it is the quiet pass's");
        let view = agent.sample(&mut maps, &alive);
        assert_eq!(view.totals(&w), (0, 17, 0));
    }
}
