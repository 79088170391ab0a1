//! Stretches: how long a thread was kept from the wait it came back to.
//!
//! The sched probe (docs/probes/sched.md) histograms, per thread and per wait it
//! blocks in (a syscall, with the futex word for a futex), every stretch from the
//! end of one block in that wait to the start of the next. A thread that waits
//! for work in one place, its **home** (an event loop's `epoll_wait`, a worker's
//! queue, a server's `accept`), serves what arrives only from there: its
//! stretches away from home are the delays of what arrived meanwhile. The home
//! is the wait the thread spent most time blocked in, whatever the runtime: no
//! name is looked at.
use super::state::NR_STATES;

/// Bucket unit, ns (ABI: WM_STRETCH_UNIT_NS): octaves of it fall on 2^k ms.
pub const UNIT_NS: u64 = 15_625;
/// Octaves above the unit, and buckets per octave (ABI: WM_STRETCH_OCTAVES, WM_STRETCH_SUB).
pub const OCTAVES: usize = 26;
pub const SUB: usize = 4;
/// Buckets (ABI: WM_STRETCH_BUCKETS): below a unit, then `SUB` per octave; the last used one
/// (`OCTAVES * SUB`) counts everything longer too.
pub const BUCKETS: usize = 108;
/// A wait's key: syscall << KEY_SHIFT | futex word's block (ABI: WM_STRETCH_KEY_SHIFT).
pub const KEY_SHIFT: u32 = 48;
/// Futex words in one block of this many bytes are one wait (ABI: WM_STRETCH_WORD_BLOCK): a
/// glibc condition variable sleeps on two adjacent words (`__g_signals[2]`), its two groups of
/// waiters, in turn; a wider block would take in the mutex beside it (V8's task queues).
pub const WORD_BLOCK: u64 = 8;
/// The default objective of a stretch: one longer is a stall. asyncio's `slow_callback_duration`,
/// the time at which its debug mode warns that a callback blocked the event loop; `attach
/// --age-slo` sets another.
pub const STALL_OBJECTIVE_NS: u64 = 100_000_000;
/// A wait is a thread's home when it spent at least this share of its blocked time in it.
pub const HOME_SHARE: f64 = 0.5;

/// The wait a thread blocked in: a syscall, and for a futex its word (or the address a
/// CPython 3.13+ thread parked on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaitKey(pub u64);

impl WaitKey {
    /// The key of a wait in `syscall` (on futex `word`); the probe builds them (tests do here).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn new(syscall: u32, word: u64) -> WaitKey {
        WaitKey((u64::from(syscall) << KEY_SHIFT) | (word & ((1 << KEY_SHIFT) - 1) & !(WORD_BLOCK - 1)))
    }
    /// The futex word `addr` (or a parked address) is in this wait's block.
    pub fn holds(self, addr: u64) -> bool {
        self.is_futex() && crate::model::blame::address(addr) & !(WORD_BLOCK - 1) == self.word()
    }
    pub fn syscall(self) -> u32 {
        (self.0 >> KEY_SHIFT) as u32
    }
    /// The futex word's block (0: not a futex wait).
    pub fn word(self) -> u64 {
        self.0 & ((1 << KEY_SHIFT) - 1)
    }
    /// The syscall's name ("epoll_wait", "futex"), or its number.
    pub fn name(self) -> String {
        super::syscalls::name(self.syscall())
    }
    /// A futex wait (on `word`).
    pub fn is_futex(self) -> bool {
        matches!(self.syscall(), 202 | 449 | 455)
    }
}

/// A thread's stretches away from one wait, cumulative or over a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hist {
    pub count: u64,
    pub ns: u64,
    /// the longest (over a window: exact when the longest since it was first seen came in the
    /// window, else the upper bound of the window's top bucket)
    pub max_ns: u64,
    /// time blocked in the wait itself before each stretch (its idle time)
    pub wait_ns: u64,
    /// stretches of at least the stall objective (`long_ns` over `long_count`), and the
    /// thread's time per state during them
    pub long_count: u64,
    pub long_ns: u64,
    pub long_state_ns: [u64; NR_STATES],
    pub buckets: [u32; BUCKETS],
}

impl Default for Hist {
    fn default() -> Self {
        Hist { count: 0, ns: 0, max_ns: 0, wait_ns: 0, long_count: 0, long_ns: 0, long_state_ns: [0; NR_STATES], buckets: [0; BUCKETS] }
    }
}

/// The bucket of a stretch `ns` long (as the probe computes it).
pub fn bucket(ns: u64) -> usize {
    let v = ns / UNIT_NS;
    if v == 0 {
        return 0;
    }
    let o = 63 - v.leading_zeros() as usize;
    if o >= OCTAVES {
        return OCTAVES * SUB;
    }
    1 + o * SUB + (((v - (1 << o)) << 2) >> o) as usize
}

/// Bounds of bucket k, ns: [lower, upper).
pub fn bounds_ns(k: usize) -> (f64, f64) {
    if k == 0 {
        return (0.0, UNIT_NS as f64);
    }
    let k = k.min(OCTAVES * SUB);
    let (o, sub) = ((k - 1) / SUB, (k - 1) % SUB);
    // in units; the first two octaves are whole units (1; 2 and 3: sub-buckets 0 and 2)
    let base = (1u64 << o) as f64;
    let lo = base * (1.0 + sub as f64 / SUB as f64);
    let width = (base / SUB as f64).max(1.0);
    (lo * UNIT_NS as f64, (lo + width) * UNIT_NS as f64)
}

impl Hist {
    /// Stretches of these lengths, each after `wait_ns` at home; those of at least `objective_ns`
    /// spent in `state` (for tests: what the probe would have histogrammed).
    #[cfg(test)]
    pub fn of(lengths_ns: &[u64], wait_ns: u64, objective_ns: u64, state: super::state::State) -> Hist {
        let mut h = Hist::default();
        for &ns in lengths_ns {
            h.count += 1;
            h.ns += ns;
            h.max_ns = h.max_ns.max(ns);
            h.wait_ns += wait_ns;
            h.buckets[bucket(ns)] += 1;
            if ns >= objective_ns {
                h.long_count += 1;
                h.long_ns += ns;
                h.long_state_ns[state as usize] += ns;
            }
        }
        h
    }

    /// This window's part: `self` less an earlier reading of the same thread and wait.
    pub fn since(&self, before: &Hist) -> Hist {
        let mut d = Hist {
            count: self.count.saturating_sub(before.count),
            ns: self.ns.saturating_sub(before.ns),
            max_ns: 0,
            wait_ns: self.wait_ns.saturating_sub(before.wait_ns),
            long_count: self.long_count.saturating_sub(before.long_count),
            long_ns: self.long_ns.saturating_sub(before.long_ns),
            ..Hist::default()
        };
        for (i, s) in d.long_state_ns.iter_mut().enumerate() {
            *s = self.long_state_ns[i].saturating_sub(before.long_state_ns[i]);
        }
        for (i, b) in d.buckets.iter_mut().enumerate() {
            *b = self.buckets[i].saturating_sub(before.buckets[i]);
        }
        d.max_ns = if self.max_ns > before.max_ns {
            self.max_ns
        } else {
            // the longest came before: the window's top bucket bounds its longest
            d.buckets.iter().rposition(|n| *n > 0).map_or(0, |k| (bounds_ns(k).1 as u64).min(self.max_ns))
        };
        d
    }

    /// Add another window or thread of the same wait.
    pub fn add(&mut self, o: &Hist) {
        self.count += o.count;
        self.ns += o.ns;
        self.max_ns = self.max_ns.max(o.max_ns);
        self.wait_ns += o.wait_ns;
        self.long_count += o.long_count;
        self.long_ns += o.long_ns;
        for (i, s) in self.long_state_ns.iter_mut().enumerate() {
            *s += o.long_state_ns[i];
        }
        for (i, b) in self.buckets.iter_mut().enumerate() {
            *b += o.buckets[i];
        }
    }

    /// Quantile `q` of the stretches at least `from_ns` long (0: all), ns: linear within its
    /// bucket, never above the longest.
    pub fn quantile_ns(&self, q: f64, from_ns: u64) -> Option<u64> {
        let first = if from_ns == 0 { 0 } else { bucket(from_ns) };
        let total: u64 = self.buckets[first..].iter().map(|b| u64::from(*b)).sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut seen = 0.0;
        for (k, n) in self.buckets.iter().enumerate().skip(first) {
            let n = f64::from(*n);
            if n == 0.0 || seen + n < rank {
                seen += n;
                continue;
            }
            let (mut lo, mut hi) = bounds_ns(k);
            lo = lo.max(from_ns as f64);
            if self.max_ns > 0 {
                hi = hi.min(self.max_ns as f64).max(lo);
            }
            let f = ((rank - seen) / n).clamp(0.0, 1.0);
            return Some((lo + f * (hi - lo)).round() as u64);
        }
        Some(self.max_ns)
    }

    /// Stretches at least `ns` long, counted from the buckets (those of the bucket `ns` falls in
    /// are counted in proportion).
    pub fn count_over(&self, ns: u64) -> f64 {
        let k = bucket(ns);
        let (lo, hi) = bounds_ns(k);
        let part = if hi > lo { ((hi - ns as f64) / (hi - lo)).clamp(0.0, 1.0) } else { 1.0 };
        f64::from(self.buckets[k]) * part + self.buckets[k + 1..].iter().map(|b| f64::from(*b)).sum::<f64>()
    }

    /// Cumulative counts at the upper bounds `le_ns` (each a bucket boundary; a bound inside a
    /// bucket counts the bucket in proportion): for a Prometheus histogram.
    pub fn cumulative(&self, le_ns: &[u64]) -> Vec<f64> {
        le_ns.iter().map(|le| self.count as f64 - self.count_over(*le)).collect()
    }
}

/// A thread's stretches over the window: per wait, the home first (when it has one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadStretches {
    /// the wait it spent most of its blocked time in, when that is at least `HOME_SHARE` of it
    pub home: Option<WaitKey>,
    pub waits: Vec<(WaitKey, Hist)>,
    /// the objective its stalls (`Hist::long_count`) were counted against, ns
    pub objective_ns: u64,
}

impl ThreadStretches {
    /// From the waits' histograms of one thread over the window.
    pub fn new(mut waits: Vec<(WaitKey, Hist)>, objective_ns: u64) -> ThreadStretches {
        waits.retain(|(_, h)| h.count > 0);
        waits.sort_by_key(|(k, h)| (std::cmp::Reverse(h.wait_ns), *k));
        let blocked: u64 = waits.iter().map(|(_, h)| h.wait_ns).sum();
        let home = waits.first().filter(|(_, h)| h.wait_ns > 0 && h.wait_ns as f64 >= HOME_SHARE * blocked as f64).map(|(k, _)| *k);
        ThreadStretches { home, waits, objective_ns }
    }

    /// Not `locks`' blocks (futex words whose waiters take turns: `lock_blocks`): a lock is where
    /// a thread waits in the middle of its work, never its home, however long it waited there.
    /// The home is chosen again among its other waits.
    pub fn without_locks(self, locks: &std::collections::BTreeSet<u64>) -> ThreadStretches {
        match self.home {
            Some(h) if h.is_futex() && locks.contains(&h.word()) => {
                let waits: Vec<(WaitKey, Hist)> =
                    self.waits.iter().filter(|(k, _)| !(k.is_futex() && locks.contains(&k.word()))).cloned().collect();
                let home = ThreadStretches::new(waits, self.objective_ns).home;
                ThreadStretches { home, ..self }
            }
            _ => self,
        }
    }

    /// The home wait's stretches.
    pub fn at_home(&self) -> Option<(WaitKey, &Hist)> {
        let home = self.home?;
        self.waits.iter().find(|(k, _)| *k == home).map(|(k, h)| (*k, h))
    }
}

/// The futex blocks (`WORD_BLOCK`) that are locks: threads take turns on them, so nearly all the
/// waits on one (`LOCK_TURNS_SHARE`) were ended by a thread that waits on it too. A queue is fed
/// from outside: its producer wakes its consumers without waiting where they wait (a CPython
/// `SimpleQueue`'s workers also wake each other, handing the next item on, but the producer's
/// wakes are a part: an eighth when it submits bursts of eight).
/// `waits`: per thread (TID), its futex waits.
pub fn lock_blocks<'a>(waits: impl Iterator<Item = (u32, &'a [FutexWaitOf])>) -> std::collections::BTreeSet<u64> {
    let block = |w: u64| crate::model::blame::address(w) & !(WORD_BLOCK - 1);
    let waits: Vec<(u32, &[FutexWaitOf])> = waits.collect();
    let mut waiters: std::collections::BTreeMap<u64, std::collections::BTreeSet<u32>> = Default::default();
    for (tid, ws) in &waits {
        for (word, _, _) in ws.iter() {
            waiters.entry(block(*word)).or_default().insert(*tid);
        }
    }
    // per block: the wait ended by a thread's wake, and the part of it by a fellow waiter
    let mut woken: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for (tid, ws) in &waits {
        for (word, waker, ns) in ws.iter().filter(|(_, w, _)| *w != 0 && *w != *tid) {
            let b = block(*word);
            let e = woken.entry(b).or_default();
            e.0 += ns;
            if waiters.get(&b).is_some_and(|s| s.contains(waker)) {
                e.1 += ns;
            }
        }
    }
    woken.into_iter().filter(|(_, (all, turns))| *all > 0 && *turns as f64 >= LOCK_TURNS_SHARE * *all as f64).map(|(b, _)| b).collect()
}

/// A futex wait of a thread: (word, waker TID, ns).
pub type FutexWaitOf = (u64, u32, u64);

/// A futex is a lock when at least this share of the waits a thread's wake ended there were
/// ended by a thread that waits there too (a lock's holder that never waits on it makes it look
/// like a queue: its waiters' lines then say so as waits at home).
pub const LOCK_TURNS_SHARE: f64 = 0.95;

/// Readings of the probe over a window: the first of each (thread, incarnation, wait) is the
/// baseline, the last its end; threads that exit are read before their entries are deleted.
#[derive(Debug, Default)]
pub struct Tally {
    /// the objective the probe counts stalls against
    pub objective_ns: u64,
    base: std::collections::HashMap<(u32, u32, WaitKey), Hist>,
    last: std::collections::HashMap<(u32, u32, WaitKey), Hist>,
}

impl Tally {
    pub fn new(objective_ns: u64) -> Tally {
        Tally { objective_ns, ..Default::default() }
    }

    /// The window opens: what the probe holds now is its baseline.
    pub fn open(&mut self, reading: impl IntoIterator<Item = ((u32, u32, WaitKey), Hist)>) {
        self.base = reading.into_iter().collect();
    }

    /// A reading (cumulative), by (host TID, incarnation, wait).
    pub fn note(&mut self, reading: impl IntoIterator<Item = ((u32, u32, WaitKey), Hist)>) {
        self.last.extend(reading);
    }

    /// A thread's stretches over the window (None: it closed none).
    pub fn of(&self, (host_tid, gen): (u32, u32)) -> Option<ThreadStretches> {
        let waits: Vec<(WaitKey, Hist)> = self
            .last
            .iter()
            .filter(|((t, g, _), _)| *t == host_tid && *g == gen)
            .map(|(k, h)| (k.2, self.base.get(k).map_or_else(|| h.clone(), |b| h.since(b))))
            .collect();
        let s = ThreadStretches::new(waits, self.objective_ns);
        (!s.waits.is_empty()).then_some(s)
    }
}

/// A reading of the kernel's stretches map: (host TID, incarnation, wait) and its histogram,
/// cumulative.
pub type StretchRecord = ((u32, u32, WaitKey), Hist);

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(lens_ms: &[f64]) -> Hist {
        let mut h = Hist::default();
        for l in lens_ms {
            let ns = (l * 1e6) as u64;
            h.count += 1;
            h.ns += ns;
            h.max_ns = h.max_ns.max(ns);
            h.buckets[bucket(ns)] += 1;
        }
        h
    }

    #[test]
    fn octaves_fall_on_powers_of_two_milliseconds() {
        for k in 0..20u32 {
            let ms = 1u64 << k;
            let b = bucket(ms * 1_000_000);
            assert_eq!(bounds_ns(b).0 as u64, ms * 1_000_000, "{ms} ms starts a bucket");
            assert_eq!(bucket(ms * 1_000_000 - 1), b - 1);
        }
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(UNIT_NS - 1), 0);
        assert_eq!(bucket(UNIT_NS), 1);
        assert_eq!(bucket(u64::MAX), OCTAVES * SUB);
        // every bucket's bounds hold what it counts
        for ns in [15_625u64, 31_250, 40_000, 1_000_000, 1_300_000, 150_000_000, 270_000_000, 9_000_000_000] {
            let (lo, hi) = bounds_ns(bucket(ns));
            assert!(lo <= ns as f64 && (ns as f64) < hi, "{ns} in [{lo}, {hi})");
        }
    }

    #[test]
    fn quantiles_come_within_a_quarter_octave() {
        let mut lens = vec![2.0; 180];
        lens.extend([150.0, 160.0, 170.0, 200.0, 210.0, 230.0, 240.0, 250.0, 260.0, 270.0]);
        let h = hist(&lens);
        let p50 = h.quantile_ns(0.5, 0).unwrap() as f64 / 1e6;
        assert!((2.0..=2.5).contains(&p50), "p50 {p50}");
        assert_eq!(h.quantile_ns(1.0, 0), Some(270_000_000));
        // of the stalls only (100 ms and more): their middle, within a sub-bucket (~20%)
        let stall_p50 = h.quantile_ns(0.5, 100_000_000).unwrap() as f64 / 1e6;
        assert!((180.0..=256.0).contains(&stall_p50), "stall p50 {stall_p50}");
        let over = h.count_over(100_000_000);
        assert!((over - 10.0).abs() < 1e-9, "{over}");
    }

    #[test]
    fn a_window_is_the_difference_and_its_max_is_honest() {
        let before = hist(&[500.0, 3.0]);
        let mut after = before.clone();
        after.add(&hist(&[40.0, 41.0]));
        let d = after.since(&before);
        assert_eq!(d.count, 2);
        // the 500 ms came before the window: the window's top bucket bounds its longest
        assert!(d.max_ns >= 41_000_000 && d.max_ns < 50_000_000, "{}", d.max_ns);
        let mut later = after.clone();
        later.add(&hist(&[900.0]));
        assert_eq!(later.since(&before).max_ns, 900_000_000);
    }

    #[test]
    fn the_home_is_where_the_thread_waited_most() {
        let mut poll = hist(&[1.0; 10]);
        poll.wait_ns = 9_000_000_000;
        let mut lock = hist(&[5.0; 10]);
        lock.wait_ns = 500_000_000;
        let s = ThreadStretches::new(vec![(WaitKey::new(202, 0x1000), lock.clone()), (WaitKey::new(232, 0), poll)], STALL_OBJECTIVE_NS);
        assert_eq!(s.home, Some(WaitKey::new(232, 0)));
        assert_eq!(s.at_home().unwrap().0.name(), "epoll_wait");
        // no wait holds most of the blocked time: no home
        let mut other = lock.clone();
        other.wait_ns = 600_000_000;
        let s = ThreadStretches::new(
            vec![(WaitKey::new(202, 0x1000), lock), (WaitKey::new(0, 0), other.clone()), (WaitKey::new(7, 0), other)],
            STALL_OBJECTIVE_NS,
        );
        assert_eq!(s.home, None);
        let k = WaitKey::new(202, 0x7f00_dead_beef);
        assert_eq!((k.syscall(), k.word(), k.is_futex()), (202, 0x7f00_dead_bee8, true));
        // the two words of a glibc condition variable are one wait
        assert!(k.holds(0x7f00_dead_beec) && k.holds(0x7f00_dead_bee8) && !k.holds(0x7f00_dead_bef0));
    }

    #[test]
    fn a_lock_is_never_a_home() {
        // ingest waits on a lock that worker releases and waits on too; workers 3 and 4 wait on
        // their queue, which the dispatcher (1) fills without waiting there
        let lock = 0x5000u64;
        let s = 1_000_000_000;
        // workers 3 and 4 also wake each other (a SimpleQueue), but the dispatcher's wakes are half
        let waits: Vec<(u32, Vec<FutexWaitOf>)> = vec![
            (10, vec![(lock + 4, 11, s)]),
            (11, vec![(lock, 10, s / 10)]),
            (3, vec![(0x9000, 1, s), (0x9000, 4, s)]),
            (4, vec![(0x9004, 1, s), (0x9004, 3, s)]),
        ];
        let locks = lock_blocks(waits.iter().map(|(t, w)| (*t, w.as_slice())));
        assert_eq!(locks.into_iter().collect::<Vec<_>>(), vec![lock]);
        let mut on_lock = Hist::of(&[1_000_000; 10], 2_000_000_000, STALL_OBJECTIVE_NS, super::super::state::State::Running);
        on_lock.wait_ns = 2_000_000_000;
        let mut recv = Hist::of(&[1_000_000; 10], 1_000_000, STALL_OBJECTIVE_NS, super::super::state::State::Running);
        recv.wait_ns = 10_000_000;
        let ingest = ThreadStretches::new(vec![(WaitKey::new(202, lock), on_lock), (WaitKey::new(45, 0), recv)], STALL_OBJECTIVE_NS);
        assert_eq!(ingest.home, Some(WaitKey::new(202, lock)));
        let locks = lock_blocks(waits.iter().map(|(t, w)| (*t, w.as_slice())));
        assert_eq!(ingest.without_locks(&locks).home, Some(WaitKey::new(45, 0)));
    }

    #[test]
    fn cumulative_counts_at_bucket_bounds_are_exact() {
        let h = hist(&[0.5, 0.9, 1.5, 3.0, 150.0, 300.0]);
        let le: Vec<u64> = [1u64, 2, 4, 128, 256, 512].iter().map(|ms| ms * 1_000_000).collect();
        assert_eq!(h.cumulative(&le), vec![2.0, 3.0, 4.0, 4.0, 5.0, 6.0]);
    }
}
