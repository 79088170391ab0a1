//! `waitmeter_futex_word_*`: futex wait of a process by word (the lock or
//! condition's address), with a bounded label set whose counters only grow.
//!
//! A word gets its own `futex` label once it has `ADMIT_NS` of wait, up to
//! `MAX_WORDS` words per process (a process has as many futex words as it has
//! locks, so labelling every word would be unbounded). The other words are
//! summed as `futex="other"`. When a word is admitted its past wait stays in
//! "other" too (frozen at the admission value), so "other" never decreases;
//! the labelled series starts at the word's full total, and since `rate()`
//! only uses differences, rates of all series add up to the true rate.
//!
//! `waitmeter_futex_word_waiters` counts the distinct threads that waited on
//! the word within the agent's last window (boundaries of the agent's clock,
//! not scrapes), so every scraper sees the same count.
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::partition::ThreadSample;

/// Labelled futex words per process.
pub const MAX_WORDS: usize = 10;
/// Wait a word must have had before it gets its own label.
pub const ADMIT_NS: u64 = 10_000_000;

/// Words of exited threads kept apart per process; the rest of their wait is
/// summed into "other" (a process can wait on a new word every second for days).
pub const MAX_FOLDED_WORDS: usize = 1024;

/// A thread incarnation: (target, host TID, start).
type ThreadId = (u64, u32, u64);

#[derive(Default)]
pub struct FutexWords {
    /// (target, addr) -> wait of exited threads
    folded: HashMap<(u64, u64), u64>,
    /// target -> wait of exited threads on words beyond MAX_FOLDED_WORDS
    folded_other: HashMap<u64, u64>,
    /// (target, addr) -> the word's total when it got its label
    admitted: HashMap<(u64, u64), u64>,
    /// (thread, addr) -> its wait on the word at the last window boundary
    at_boundary: HashMap<(ThreadId, u64), u64>,
    /// (target, addr) -> threads that exited having waited on it since the last boundary
    exited_waiters: HashMap<(u64, u64), HashSet<ThreadId>>,
    /// (target, addr) -> thread -> the last boundary by which it had waited on the word
    last_wait: HashMap<(u64, u64), HashMap<ThreadId, u64>>,
}

/// One rendered series: (target, `futex` label, value).
pub struct WordSeries {
    pub seconds: Vec<(u64, String, f64)>,
    pub waiters: Vec<(u64, String, i64)>,
}

fn per_word(s: &ThreadSample) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    for w in &s.futex {
        *out.entry(w.addr).or_insert(0) += w.ns;
    }
    out
}

impl FutexWords {
    /// An exited thread's final waits: kept in the totals, and it counts as a
    /// waiter of every word it waited on since the last boundary (from the next one).
    pub fn fold_exit(&mut self, target: u64, s: &ThreadSample) {
        let id = (target, s.host_tid, s.start_ns);
        let mut kept = self.folded.keys().filter(|k| k.0 == target).count();
        for (addr, ns) in per_word(s) {
            let key = (target, addr);
            if self.folded.contains_key(&key) || self.admitted.contains_key(&key) || kept < MAX_FOLDED_WORDS {
                kept += usize::from(!self.folded.contains_key(&key));
                *self.folded.entry(key).or_default() += ns;
            } else {
                *self.folded_other.entry(target).or_default() += ns;
            }
            let before = self.at_boundary.remove(&(id, addr)).unwrap_or(0);
            if ns > before {
                self.exited_waiters.entry(key).or_default().insert(id);
            }
        }
    }

    pub fn forget(&mut self, target: u64) {
        self.folded.retain(|k, _| k.0 != target);
        self.folded_other.remove(&target);
        self.admitted.retain(|k, _| k.0 != target);
        self.at_boundary.retain(|k, _| k.0 .0 != target);
        self.exited_waiters.retain(|k, _| k.0 != target);
        self.last_wait.retain(|k, _| k.0 != target);
    }

    /// A window boundary (super::prometheus::WINDOW_STEP_NS): who waited on
    /// each word since the previous one, from the live threads' cumulative waits.
    pub fn window<'a>(&mut self, now: u64, live: impl Iterator<Item = (u64, &'a ThreadSample)>) {
        let mut next = HashMap::new();
        for (target, s) in live {
            let id = (target, s.host_tid, s.start_ns);
            for (addr, ns) in per_word(s) {
                if ns > self.at_boundary.get(&(id, addr)).copied().unwrap_or(0) {
                    self.last_wait.entry((target, addr)).or_default().insert(id, now);
                }
                next.insert((id, addr), ns);
            }
        }
        // threads gone without an exit record leave nothing behind
        self.at_boundary = next;
        for (word, ids) in std::mem::take(&mut self.exited_waiters) {
            let w = self.last_wait.entry(word).or_default();
            w.extend(ids.into_iter().map(|id| (id, now)));
        }
        let oldest = now.saturating_sub(super::prometheus::WINDOW_SPAN_NS);
        self.last_wait.retain(|_, w| {
            w.retain(|_, at| *at > oldest);
            crate::shrink::shrink(w);
            !w.is_empty()
        });
        crate::shrink::shrink(&mut self.last_wait);
    }

    /// Entries held (for tests of boundedness).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.folded.len() + self.admitted.len() + self.at_boundary.len() + self.last_wait.values().map(HashMap::len).sum::<usize>()
    }

    /// The series at this scrape, from the live threads' cumulative waits.
    pub fn render<'a>(&mut self, live: impl Iterator<Item = (u64, &'a ThreadSample)>) -> WordSeries {
        let mut totals: BTreeMap<(u64, u64), u64> = self.folded.iter().map(|(k, v)| (*k, *v)).collect();
        for (target, s) in live {
            for (addr, ns) in per_word(s) {
                *totals.entry((target, addr)).or_default() += ns;
            }
        }
        // admit the words with the most wait first
        let mut count: HashMap<u64, usize> = HashMap::new();
        for k in self.admitted.keys() {
            *count.entry(k.0).or_default() += 1;
        }
        let mut candidates: Vec<(&(u64, u64), &u64)> =
            totals.iter().filter(|(k, ns)| **ns >= ADMIT_NS && !self.admitted.contains_key(k)).collect();
        candidates.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (k, ns) in candidates {
            let n = count.entry(k.0).or_default();
            if *n < MAX_WORDS {
                *n += 1;
                self.admitted.insert(*k, *ns);
            }
        }
        let mut seconds: BTreeMap<(u64, String), u64> = BTreeMap::new();
        for (target, ns) in &self.folded_other {
            *seconds.entry((*target, "other".to_string())).or_default() += ns;
        }
        let mut who: BTreeMap<(u64, String), HashSet<ThreadId>> = BTreeMap::new();
        for ((target, addr), ns) in &totals {
            let (label, value) = match self.admitted.get(&(*target, *addr)) {
                Some(at) => {
                    // its wait before admission stays in "other"
                    *seconds.entry((*target, "other".to_string())).or_default() += at;
                    (format!("{:#x}", crate::model::blame::address(*addr)), *ns)
                }
                None => ("other".to_string(), *ns),
            };
            *seconds.entry((*target, label.clone())).or_default() += value;
            if let Some(w) = self.last_wait.get(&(*target, *addr)) {
                who.entry((*target, label)).or_default().extend(w.keys().copied());
            }
        }
        WordSeries {
            waiters: seconds.keys().map(|k| (k.0, k.1.clone(), who.get(k).map_or(0, |w| w.len() as i64))).collect(),
            seconds: seconds.into_iter().map(|((t, l), ns)| (t, l, ns as f64 / 1e9)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::blame::FutexWait;
    use crate::model::partition::Times;

    fn thread(host_tid: u32, waits: &[(u64, u64)]) -> ThreadSample {
        ThreadSample {
            tid: host_tid,
            host_tid,
            pid: 1,
            comm: "t".into(),
            py_name: None,
            start_ns: 7,
            at_ns: 0,
            exited: false,
            times: Times::default(),
            gil_by_holder: Default::default(),
            gil_hold: None,
            futex: waits.iter().map(|(addr, ns)| FutexWait { addr: *addr, waker: 0, ns: *ns }).collect(),
            runqueue_by: Default::default(),
            woken_by: Default::default(),
            yields: 0,
            gil_waits: 0,
        }
    }

    fn get<T: Copy>(v: &[(u64, String, T)], label: &str) -> Option<T> {
        v.iter().find(|s| s.1 == label).map(|s| s.2)
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn words_get_labels_past_the_threshold_and_other_never_decreases() {
        let mut w = FutexWords::default();
        let a = [thread(1, &[(0x10, 5_000_000)]), thread(2, &[(0x10, 4_000_000)])];
        let r = w.render(a.iter().map(|s| (1, s)));
        assert_eq!(get(&r.seconds, "other"), Some(0.009));
        // 0x10 crosses 10 ms: labelled with its full total; other keeps the 9 ms
        let b = [thread(1, &[(0x10, 8_000_000)]), thread(2, &[(0x10, 4_000_000)])];
        let r = w.render(b.iter().map(|s| (1, s)));
        assert_eq!(get(&r.seconds, "0x10"), Some(0.012));
        assert_eq!(get(&r.seconds, "other"), Some(0.012));
        // thread 1 exits with more wait: folded
        w.fold_exit(1, &thread(1, &[(0x10, 9_000_000)]));
        let c = [thread(2, &[(0x10, 4_000_000)])];
        let r = w.render(c.iter().map(|s| (1, s)));
        assert_eq!(get(&r.seconds, "0x10"), Some(0.013));
        w.forget(1);
        assert!(w.render(std::iter::empty()).seconds.is_empty());
    }

    #[test]
    fn waiters_are_counted_over_the_agents_window_not_between_scrapes() {
        let mut w = FutexWords::default();
        let a = [thread(1, &[(0x10, 20_000_000)]), thread(2, &[(0x10, 4_000_000)])];
        w.window(100 * S, a.iter().map(|s| (1, s)));
        // any number of scrapes between two boundaries see the same count
        for _ in 0..3 {
            let r = w.render(a.iter().map(|s| (1, s)));
            assert_eq!(get(&r.waiters, "0x10"), Some(2));
        }
        // only thread 1 waits from now on; thread 2 still counts until its wait is a span old
        let b = [thread(1, &[(0x10, 30_000_000)]), thread(2, &[(0x10, 4_000_000)])];
        w.window(150 * S, b.iter().map(|s| (1, s)));
        assert_eq!(get(&w.render(b.iter().map(|s| (1, s))).waiters, "0x10"), Some(2));
        w.window(165 * S, b.iter().map(|s| (1, s)));
        assert_eq!(get(&w.render(b.iter().map(|s| (1, s))).waiters, "0x10"), Some(1));
        // an exited waiter counts from the next boundary, for a span
        w.fold_exit(1, &thread(3, &[(0x10, 1_000_000)]));
        assert_eq!(get(&w.render(b.iter().map(|s| (1, s))).waiters, "0x10"), Some(1));
        w.window(170 * S, b.iter().map(|s| (1, s)));
        assert_eq!(get(&w.render(b.iter().map(|s| (1, s))).waiters, "0x10"), Some(2));
        w.window(300 * S, b.iter().map(|s| (1, s)));
        assert_eq!(get(&w.render(b.iter().map(|s| (1, s))).waiters, "0x10"), Some(0));
    }

    #[test]
    fn folded_words_are_bounded_and_their_wait_kept_in_other() {
        let mut w = FutexWords::default();
        let n = MAX_FOLDED_WORDS as u64 + 500;
        for i in 0..n {
            let mut t = thread(i as u32, &[(0x1000 + i * 8, 1_000)]);
            t.start_ns = i;
            w.fold_exit(1, &t);
            w.window(i * S, std::iter::empty());
        }
        assert!(w.len() <= MAX_FOLDED_WORDS + 100, "{} entries", w.len());
        let r = w.render(std::iter::empty());
        assert_eq!(get(&r.seconds, "other"), Some(n as f64 * 1e-6));
    }

    #[test]
    fn at_most_max_words_labelled_per_process_biggest_first() {
        let mut w = FutexWords::default();
        let waits: Vec<(u64, u64)> = (0..(MAX_WORDS as u64 + 3)).map(|i| (0x100 + i, ADMIT_NS * (i + 1))).collect();
        let t = [thread(1, &waits)];
        let r = w.render(t.iter().map(|s| (1, s)));
        assert_eq!(r.seconds.len(), MAX_WORDS + 1, "{:?}", r.seconds.iter().map(|s| &s.1).collect::<Vec<_>>());
        // the three smallest stayed in other
        assert!(get(&r.seconds, "0x100").is_none() && get(&r.seconds, "0x10c").is_some());
    }
}
