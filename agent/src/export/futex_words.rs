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
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::partition::ThreadSample;

/// Labelled futex words per process.
pub const MAX_WORDS: usize = 10;
/// Wait a word must have had before it gets its own label.
pub const ADMIT_NS: u64 = 10_000_000;

/// A thread incarnation: (target, host TID, start).
type ThreadId = (u64, u32, u64);

#[derive(Default)]
pub struct FutexWords {
    /// (target, addr) -> wait of exited threads
    folded: HashMap<(u64, u64), u64>,
    /// (target, addr) -> the word's total when it got its label
    admitted: HashMap<(u64, u64), u64>,
    /// (thread, addr) -> its wait on the word at the previous scrape
    previous: HashMap<(ThreadId, u64), u64>,
    /// (target, addr) -> threads that waited on it and exited since the previous scrape
    exited_waiters: HashMap<(u64, u64), HashSet<ThreadId>>,
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
    /// waiter of every word it waited on since the previous scrape.
    pub fn fold_exit(&mut self, target: u64, s: &ThreadSample) {
        let id = (target, s.host_tid, s.start_ns);
        for (addr, ns) in per_word(s) {
            *self.folded.entry((target, addr)).or_default() += ns;
            let before = self.previous.remove(&(id, addr)).unwrap_or(0);
            if ns > before {
                self.exited_waiters.entry((target, addr)).or_default().insert(id);
            }
        }
        self.previous.retain(|(t, _), _| *t != id);
    }

    pub fn forget(&mut self, target: u64) {
        self.folded.retain(|k, _| k.0 != target);
        self.admitted.retain(|k, _| k.0 != target);
        self.previous.retain(|k, _| k.0 .0 != target);
        self.exited_waiters.retain(|k, _| k.0 != target);
    }

    /// The series at this scrape, from the live threads' cumulative waits.
    pub fn render<'a>(&mut self, live: impl Iterator<Item = (u64, &'a ThreadSample)>) -> WordSeries {
        let mut totals: BTreeMap<(u64, u64), u64> = self.folded.iter().map(|(k, v)| (*k, *v)).collect();
        let mut waiters: HashMap<(u64, u64), HashSet<ThreadId>> = std::mem::take(&mut self.exited_waiters);
        for (target, s) in live {
            let id = (target, s.host_tid, s.start_ns);
            for (addr, ns) in per_word(s) {
                *totals.entry((target, addr)).or_default() += ns;
                let before = self.previous.insert((id, addr), ns).unwrap_or(0);
                if ns > before {
                    waiters.entry((target, addr)).or_default().insert(id);
                }
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
        let mut who: BTreeMap<(u64, String), HashSet<ThreadId>> = BTreeMap::new();
        for ((target, addr), ns) in &totals {
            let (label, value) = match self.admitted.get(&(*target, *addr)) {
                Some(at) => {
                    // its wait before admission stays in "other"
                    *seconds.entry((*target, "other".to_string())).or_default() += at;
                    (format!("{addr:#x}"), *ns)
                }
                None => ("other".to_string(), *ns),
            };
            *seconds.entry((*target, label.clone())).or_default() += value;
            if let Some(w) = waiters.get(&(*target, *addr)) {
                who.entry((*target, label)).or_default().extend(w.iter().copied());
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
        }
    }

    fn get<T: Copy>(v: &[(u64, String, T)], label: &str) -> Option<T> {
        v.iter().find(|s| s.1 == label).map(|s| s.2)
    }

    #[test]
    fn words_get_labels_past_the_threshold_and_other_never_decreases() {
        let mut w = FutexWords::default();
        let a = [thread(1, &[(0x10, 5_000_000)]), thread(2, &[(0x10, 4_000_000)])];
        let r = w.render(a.iter().map(|s| (1, s)));
        assert_eq!(get(&r.seconds, "other"), Some(0.009));
        assert_eq!(get(&r.waiters, "other"), Some(2));
        // 0x10 crosses 10 ms: labelled with its full total; other keeps the 9 ms
        let b = [thread(1, &[(0x10, 8_000_000)]), thread(2, &[(0x10, 4_000_000)])];
        let r = w.render(b.iter().map(|s| (1, s)));
        assert_eq!(get(&r.seconds, "0x10"), Some(0.012));
        assert_eq!(get(&r.seconds, "other"), Some(0.012));
        // only thread 1 waited since the previous scrape
        assert_eq!(get(&r.waiters, "0x10"), Some(1));
        // thread 1 exits with more wait: folded, still a waiter at the next scrape
        w.fold_exit(1, &thread(1, &[(0x10, 9_000_000)]));
        let c = [thread(2, &[(0x10, 4_000_000)])];
        let r = w.render(c.iter().map(|s| (1, s)));
        assert_eq!(get(&r.seconds, "0x10"), Some(0.013));
        assert_eq!(get(&r.waiters, "0x10"), Some(1));
        let r = w.render(c.iter().map(|s| (1, s)));
        assert_eq!(get(&r.waiters, "0x10"), Some(0));
        w.forget(1);
        assert!(w.render(std::iter::empty()).seconds.is_empty());
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
