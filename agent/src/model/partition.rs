//! Partition arithmetic: per-state nanoseconds of a thread, windows, ratios.
use std::collections::BTreeMap;

use super::blame::GONE;
use super::state::{State, NR_STATES};

/// Threads sampled at one moment, grouped by process.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub at_ns: u64,
    /// target id -> its live threads
    pub live: BTreeMap<u64, Vec<ThreadSample>>,
    /// target id -> threads that exited since the previous snapshot
    pub exited: BTreeMap<u64, Vec<ThreadSample>>,
}

/// Nanoseconds per state, indexed by `State::index()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Times(pub [u64; NR_STATES]);

/// The least share of its time a thread must run or wait for its wait ratio to be shown.
pub const RATIO_FLOOR: f64 = 0.01;

impl Times {
    /// Closed per-state time plus the open interval of the current state, as of `at`.
    /// `state` is the raw ABI value; an unknown one is charged to `other`.
    pub fn at(closed: [u64; NR_STATES], state: u32, since: u64, at: u64) -> Times {
        let mut t = Times(closed);
        let s = State::from_index(state as usize).unwrap_or(State::Other);
        t.0[s.index()] += at.saturating_sub(since);
        t
    }

    pub fn get(&self, s: State) -> u64 {
        self.0[s.index()]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// runqueue + throttled + gil_wait
    pub fn waiting(&self) -> u64 {
        State::ALL.iter().filter(|s| s.is_waiting()).map(|s| self.get(*s)).sum()
    }

    /// waiting / (waiting + running); `None` when the thread neither ran nor waited.
    pub fn wait_ratio(&self) -> Option<f64> {
        let w = self.waiting();
        let denom = w + self.get(State::Running);
        (denom > 0).then(|| w as f64 / denom as f64)
    }

    /// `wait_ratio` where it means something: `None` also when running + waiting is below
    /// `RATIO_FLOOR` of the thread's time (an idle thread that woke a few times: a ratio of
    /// microseconds, 0.99 or 0.01 by chance).
    pub fn wait_ratio_shown(&self) -> Option<f64> {
        let active = self.waiting() + self.get(State::Running);
        (active as f64 >= RATIO_FLOOR * self.total() as f64).then(|| self.wait_ratio()).flatten()
    }

    /// Per-state difference `self - earlier` (a window between two samples).
    pub fn since(&self, earlier: &Times) -> Times {
        let mut d = Times::default();
        for i in 0..NR_STATES {
            d.0[i] = self.0[i].saturating_sub(earlier.0[i]);
        }
        d
    }

    pub fn add(&mut self, other: &Times) {
        for i in 0..NR_STATES {
            self.0[i] += other.0[i];
        }
    }
}

pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// One thread as measured: who it is and where its time went.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadSample {
    /// TID as the user sees it (in the agent's PID namespace)
    pub tid: u32,
    /// TID as the kernel sees it (initial PID namespace)
    pub host_tid: u32,
    /// PID (TGID) as the user sees it
    pub pid: u32,
    /// OS thread name (comm); untrusted text
    pub comm: String,
    /// Python thread name (`threading.Thread.name`) when known; untrusted text
    pub py_name: Option<String>,
    /// CLOCK_MONOTONIC ns when the thread entered the measurement
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns of the sample, or of the thread's exit
    pub at_ns: u64,
    pub exited: bool,
    pub times: Times,
    /// gil_wait per holder: holder TID (user-visible; 0 = not known) -> ns
    pub gil_by_holder: std::collections::BTreeMap<u32, u64>,
    /// GIL hold times (only with the precise GIL probe)
    pub gil_hold: Option<super::hist::HoldHist>,
    /// closed futex waits, by word and waker
    pub futex: Vec<super::blame::FutexWait>,
    /// run-queue wait by what had the CPU meanwhile -> ns
    pub runqueue_by: std::collections::BTreeMap<super::blame::Preemptor, u64>,
    /// closed waits of a blocked state other than the GIL's by what woke them -> ns (a wait
    /// the probe saw no wakeup of is in none)
    pub woken_by: std::collections::BTreeMap<(State, super::blame::Waker), u64>,
    /// times it gave the CPU away with sched_yield(2) (each began a `yield` stretch)
    pub yields: u64,
    /// times it went to wait for the GIL (each wait ends with the GIL handed to it, or a
    /// CPython timeout that waits again)
    pub gil_waits: u64,
}

impl ThreadSample {
    /// The name people know the thread by: its Python name, else its comm.
    pub fn name(&self) -> &str {
        self.py_name.as_deref().unwrap_or(&self.comm)
    }

    /// How long the thread existed within the measurement.
    pub fn existed_ns(&self) -> u64 {
        self.at_ns.saturating_sub(self.start_ns)
    }

    /// Same thread (TIDs are reused: identity is host TID + start).
    pub fn same_thread(&self, other: &ThreadSample) -> bool {
        self.host_tid == other.host_tid && self.start_ns == other.start_ns
    }
}

/// The part of `cur` that falls after `prev` (the same thread sampled earlier).
impl ThreadSample {
    /// This thread's numbers since `earlier`, an earlier sample of it: times, waits by
    /// holder, waker and preemptor, GIL holds.
    pub fn since(&self, earlier: &ThreadSample) -> ThreadSample {
        let mut d = self.clone();
        d.times = self.times.since(&earlier.times);
        d.yields = self.yields.saturating_sub(earlier.yields);
        d.gil_waits = self.gil_waits.saturating_sub(earlier.gil_waits);
        for (holder, ns) in d.gil_by_holder.iter_mut() {
            *ns = ns.saturating_sub(earlier.gil_by_holder.get(holder).copied().unwrap_or(0));
        }
        let total = |m: &std::collections::BTreeMap<u32, u64>| m.values().sum::<u64>();
        // a wait is charged to its culprit when it ends, while the state's time counts the
        // part before a sample too: a wait open at `earlier` has that part in `earlier`'s time
        // and none of it in `earlier`'s blame, so the split may grow more than the state did.
        // It never explains more than the state's own growth.
        let grew = total(&self.gil_by_holder).saturating_sub(total(&earlier.gil_by_holder)).min(d.times.get(State::GilWait));
        conserve(d.gil_by_holder.iter_mut().map(|(h, ns)| (*h == 0, ns)), grew);
        d.gil_by_holder.retain(|_, ns| *ns > 0);
        d.gil_hold = match (&self.gil_hold, &earlier.gil_hold) {
            (Some(now), Some(then)) => Some(now.since(then)),
            (now, _) => *now,
        };
        let mut before: std::collections::HashMap<(u64, u32), u64> = Default::default();
        for w in &earlier.futex {
            *before.entry((w.addr, w.waker)).or_default() += w.ns;
        }
        for w in d.futex.iter_mut() {
            let left = before.entry((w.addr, w.waker)).or_default();
            let taken = (*left).min(w.ns);
            w.ns -= taken;
            *left -= taken;
        }
        let grew = self
            .futex
            .iter()
            .map(|w| w.ns)
            .sum::<u64>()
            .saturating_sub(earlier.futex.iter().map(|w| w.ns).sum())
            .min(d.times.get(State::FutexWait));
        conserve(d.futex.iter_mut().map(|w| (w.waker == GONE, &mut w.ns)), grew);
        d.futex.retain(|w| w.ns > 0);
        for (p, ns) in d.runqueue_by.iter_mut() {
            *ns = ns.saturating_sub(earlier.runqueue_by.get(p).copied().unwrap_or(0));
        }
        let grew =
            self.runqueue_by.values().sum::<u64>().saturating_sub(earlier.runqueue_by.values().sum()).min(d.times.get(State::Runqueue));
        conserve(d.runqueue_by.iter_mut().map(|(p, ns)| (p.is_merged(), ns)), grew);
        d.runqueue_by.retain(|_, ns| *ns > 0);
        for (k, ns) in d.woken_by.iter_mut() {
            *ns = ns.saturating_sub(earlier.woken_by.get(k).copied().unwrap_or(0));
        }
        let blocked: u64 = State::ALL.iter().filter(|s| s.is_blocked() && **s != State::GilWait).map(|s| d.times.get(*s)).sum();
        let grew = self.woken_by.values().sum::<u64>().saturating_sub(earlier.woken_by.values().sum()).min(blocked);
        conserve(d.woken_by.iter_mut().map(|((_, w), ns)| (w.is_merged(), ns)), grew);
        d.woken_by.retain(|_, ns| *ns > 0);
        d
    }
}

/// Make the per-key differences of a split of wait (by holder, waker, what
/// had the CPU) add up to what its total grew by. Between two samples a value
/// can move from one key to another: blame settled out of the kernel past the
/// counterparts kept by name is merged into one counterpart (`GONE`, "other",
/// the unknown GIL holder: `model/ledger.rs`), and a holder that exited may
/// no longer resolve. Its old key then shows no growth and its new one the
/// whole value, which the earlier sample counted already. The excess comes off
/// the merged key first (where moved values land), then off the others.
fn conserve<'a>(deltas: impl Iterator<Item = (bool, &'a mut u64)>, grew: u64) {
    let mut deltas: Vec<(bool, &mut u64)> = deltas.collect();
    let sum: u64 = deltas.iter().map(|(_, ns)| **ns).sum();
    let mut excess = sum.saturating_sub(grew);
    if excess == 0 {
        return;
    }
    deltas.sort_by_key(|(merged, _)| !*merged);
    for (_, ns) in deltas {
        let cut = excess.min(*ns);
        *ns -= cut;
        excess -= cut;
        if excess == 0 {
            break;
        }
    }
}

pub fn window(prev: Option<&ThreadSample>, cur: &ThreadSample) -> Times {
    match prev {
        Some(p) if p.same_thread(cur) => cur.times.since(&p.times),
        _ => cur.times,
    }
}

/// A thread with nothing measured yet, for tests of the model: TID `tid` (host TID the same),
/// PID 1, started at 0.
#[cfg(test)]
pub fn test_sample(tid: u32, times: Times, at_ns: u64) -> ThreadSample {
    ThreadSample {
        tid,
        host_tid: tid,
        pid: 1,
        comm: "t".into(),
        py_name: None,
        start_ns: 0,
        at_ns,
        exited: false,
        times,
        gil_by_holder: Default::default(),
        gil_hold: None,
        futex: vec![],
        runqueue_by: Default::default(),
        woken_by: Default::default(),
        yields: 0,
        gil_waits: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(times: [u64; NR_STATES], start: u64, at: u64) -> ThreadSample {
        ThreadSample { tid: 7, host_tid: 70, start_ns: start, ..test_sample(7, Times(times), at) }
    }

    #[test]
    fn open_interval_goes_to_current_state() {
        let t = Times::at([10, 0, 0, 0, 0, 0, 0, 0, 0], State::Sleep as u32, 100, 150);
        assert_eq!(t.get(State::Running), 10);
        assert_eq!(t.get(State::Sleep), 50);
        assert_eq!(t.total(), 60);
        // a clock that did not move adds nothing, never underflows
        assert_eq!(Times::at([1; NR_STATES], 0, 200, 100).total(), NR_STATES as u64);
        // an unknown ABI state is charged to other
        assert_eq!(Times::at([0; NR_STATES], 99, 0, 5).get(State::Other), 5);
    }

    #[test]
    fn an_idle_threads_wait_ratio_is_not_shown() {
        let mut t = Times::default();
        t.0[State::Sleep.index()] = 10_000_000_000;
        t.0[State::Running.index()] = 1_000_000;
        t.0[State::Runqueue.index()] = 50_000_000;
        // 51 ms active of 10.05 s: 0.5%, below the floor
        assert!(t.wait_ratio().unwrap() > 0.9);
        assert_eq!(t.wait_ratio_shown(), None);
        // 2% active: shown
        t.0[State::Running.index()] = 150_000_000;
        assert_eq!(t.wait_ratio_shown(), t.wait_ratio());
        assert_eq!(Times::default().wait_ratio_shown(), None);
    }

    #[test]
    fn wait_ratio_is_waiting_over_waiting_plus_running() {
        let mut t = Times::default();
        assert_eq!(t.wait_ratio(), None);
        t.0[State::Running.index()] = 2;
        t.0[State::Runqueue.index()] = 1;
        t.0[State::Throttled.index()] = 1;
        t.0[State::GilWait.index()] = 4;
        t.0[State::Sleep.index()] = 100; // idle time does not count
        t.0[State::Yield.index()] = 50; // nor runnable time after a sched_yield
        assert_eq!(t.waiting(), 6);
        assert_eq!(t.wait_ratio(), Some(0.75));
    }

    #[test]
    fn window_subtracts_only_the_same_thread() {
        let a = sample([100, 0, 0, 0, 0, 0, 0, 0, 0], 0, 100);
        let b = sample([150, 20, 0, 0, 0, 0, 0, 0, 0], 0, 170);
        assert_eq!(window(Some(&a), &b).0, [50, 20, 0, 0, 0, 0, 0, 0, 0]);
        // a reused TID is a new thread: its window is all of it
        let c = ThreadSample { start_ns: 120, ..b.clone() };
        assert_eq!(window(Some(&a), &c), c.times);
        assert_eq!(window(None, &b), b.times);
    }

    #[test]
    fn a_sample_since_an_earlier_one_has_only_what_came_after() {
        use crate::model::blame::{FutexWait, Preemptor};
        let mut a = sample([100, 10, 0, 5, 0, 0, 0, 0, 0], 0, 100);
        a.gil_by_holder.insert(9, 5);
        a.futex.push(FutexWait { addr: 0x10, waker: 9, ns: 7 });
        a.runqueue_by.insert(Preemptor::Idle, 10);
        let mut b = sample([150, 30, 0, 5, 4, 0, 0, 0, 0], 0, 170);
        b.gil_by_holder.insert(9, 5);
        b.futex.push(FutexWait { addr: 0x10, waker: 9, ns: 11 });
        b.runqueue_by.insert(Preemptor::Idle, 30);
        let d = b.since(&a);
        assert_eq!(d.times.0, [50, 20, 0, 0, 4, 0, 0, 0, 0]);
        assert!(d.gil_by_holder.is_empty());
        assert_eq!(d.futex, [FutexWait { addr: 0x10, waker: 9, ns: 4 }]);
        assert_eq!(d.runqueue_by.get(&Preemptor::Idle), Some(&20));
    }

    #[test]
    fn wait_that_moved_to_the_merged_counterpart_between_samples_counts_once() {
        use crate::model::blame::{FutexWait, Preemptor, GONE};
        // earlier: 30 behind thread 5, 10 behind 6, 4 behind holder 9, 7 woken by 8
        let mut a = sample([100, 40, 0, 11, 4, 0, 0, 0, 0], 0, 100);
        a.runqueue_by.insert(Preemptor::Thread(5), 30);
        a.runqueue_by.insert(Preemptor::Thread(6), 10);
        a.gil_by_holder.insert(9, 4);
        a.futex.push(FutexWait { addr: 0x10, waker: 8, ns: 7 });
        // now: 5, holder 9 and waker 8 exited and were merged (30 + 2 more, 4, 7 + 1
        // more), 6 grew by 3, holder 3 and waker 2 appeared with 1 each
        let mut b = sample([150, 46, 0, 13, 6, 0, 0, 0, 0], 0, 171);
        b.runqueue_by.insert(Preemptor::merged(), 32);
        b.runqueue_by.insert(Preemptor::Thread(6), 13);
        b.runqueue_by.insert(Preemptor::Thread(7), 1);
        b.gil_by_holder.insert(0, 4);
        b.gil_by_holder.insert(3, 1);
        b.futex.push(FutexWait { addr: 0, waker: GONE, ns: 8 });
        b.futex.push(FutexWait { addr: 0x10, waker: 2, ns: 1 });
        let d = b.since(&a);
        assert_eq!(d.runqueue_by.values().sum::<u64>(), 6, "{:?}", d.runqueue_by);
        assert_eq!(d.runqueue_by.get(&Preemptor::merged()), Some(&2));
        assert_eq!(d.runqueue_by.get(&Preemptor::Thread(6)), Some(&3));
        assert_eq!(d.gil_by_holder, [(3, 1)].into_iter().collect());
        assert_eq!(d.futex, [FutexWait { addr: 0, waker: GONE, ns: 1 }, FutexWait { addr: 0x10, waker: 2, ns: 1 }]);
        // blame never exceeds the state time it splits when the earlier did not
        assert!(d.runqueue_by.values().sum::<u64>() <= d.times.0[1]);
    }

    #[test]
    fn a_wait_open_at_the_earlier_sample_is_not_blamed_past_the_states_growth() {
        use crate::model::blame::{FutexWait, Preemptor};
        // earlier: in the run queue for 20 (open: in its time, not yet charged), a GIL wait
        // open for 30, a futex wait open for 8
        let a = sample([100, 20, 0, 30, 8, 0, 0, 0, 0], 0, 160);
        // now: those waits ended, 25, 35 and 10 long, and were charged whole
        let mut b = sample([150, 25, 0, 35, 10, 0, 0, 0, 0], 0, 220);
        b.runqueue_by.insert(Preemptor::Thread(5), 25);
        b.gil_by_holder.insert(9, 35);
        b.futex.push(FutexWait { addr: 0x10, waker: 8, ns: 10 });
        let d = b.since(&a);
        // the label's window holds 5, 5 and 2 of those waits, and no more blame than that
        assert_eq!(d.runqueue_by.get(&Preemptor::Thread(5)), Some(&5));
        assert_eq!(d.gil_by_holder.get(&9), Some(&5));
        assert_eq!(d.futex.iter().map(|w| w.ns).sum::<u64>(), 2);
    }
}
