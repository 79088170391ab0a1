//! Bursts: the worst second of each thread in each state, and its longest stretch mostly in
//! it, so a 2-second stall inside a 10-second window is not averaged away.
//!
//! Threads are sampled every `PEAK_STEP_NS`; a peak is the worst run of `PEAK_STEPS`
//! consecutive steps (a sliding second: a stall that straddles two seconds of a fixed grid
//! is not halved), a stretch the longest run of steps at least `STRETCH_SHARE` in the state.
use std::collections::{HashMap, VecDeque};

use super::partition::{ThreadSample, Times};
use super::state::{State, NR_STATES};

/// An interval counts toward a stretch when the thread spent this share of it in the state.
pub const STRETCH_SHARE: f64 = 0.5;
/// How often threads are sampled for peaks, and how many steps make a peak's interval.
pub const PEAK_STEP_NS: u64 = 250_000_000;
pub const PEAK_STEPS: usize = 4;

/// The worst interval of one thread in one state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Peak {
    /// time in the state within the interval, and the interval's length
    pub ns: u64,
    pub len_ns: u64,
    /// when the interval began, after the window opened
    pub at_ns: u64,
    /// the longest run of consecutive intervals with `STRETCH_SHARE` or more in the state
    pub stretch_ns: u64,
}

impl Peak {
    pub fn share(&self) -> f64 {
        if self.len_ns == 0 {
            0.0
        } else {
            self.ns as f64 / self.len_ns as f64
        }
    }
}

/// A thread's worst intervals, by state (index: `State::index`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peaks(pub [Peak; NR_STATES]);

impl Peaks {
    pub fn get(&self, s: State) -> &Peak {
        &self.0[s.index()]
    }
}

#[derive(Default)]
struct Track {
    peaks: Peaks,
    /// the current run of steps at `STRETCH_SHARE` or more, per state
    run_ns: [u64; NR_STATES],
    last: Option<ThreadSample>,
    /// the last `PEAK_STEPS` steps: (start after the window opened, length, time per state)
    steps: VecDeque<(u64, u64, Times)>,
}

/// Follows every thread from one sample to the next (one interval each time).
#[derive(Default)]
pub struct PeakTracker {
    threads: HashMap<(u32, u64), Track>,
}

impl PeakTracker {
    /// One step of thread `s`, from its previous sample (or its start) to this one; `t0` is
    /// when the window opened.
    pub fn add(&mut self, s: &ThreadSample, t0: u64) {
        let track = self.threads.entry((s.host_tid, s.start_ns)).or_default();
        let (times, from) = match &track.last {
            Some(prev) => (s.times.since(&prev.times), prev.at_ns),
            None => (s.times, s.start_ns.max(t0)),
        };
        track.last = Some(s.clone());
        interval(track, &times, from.saturating_sub(t0), s.at_ns.saturating_sub(from));
    }

    /// The worst intervals of thread `host_tid` started at `start_ns` (None: never sampled).
    pub fn of(&self, host_tid: u32, start_ns: u64) -> Option<Peaks> {
        self.threads.get(&(host_tid, start_ns)).map(|t| t.peaks.clone())
    }
}

fn interval(track: &mut Track, times: &Times, at_ns: u64, len_ns: u64) {
    if len_ns == 0 {
        return;
    }
    for s in State::ALL {
        let i = s.index();
        let ns = times.get(s).min(len_ns);
        track.run_ns[i] = if ns as f64 >= STRETCH_SHARE * len_ns as f64 { track.run_ns[i] + len_ns } else { 0 };
        track.peaks.0[i].stretch_ns = track.peaks.0[i].stretch_ns.max(track.run_ns[i]);
    }
    track.steps.push_back((at_ns, len_ns, *times));
    if track.steps.len() > PEAK_STEPS {
        track.steps.pop_front();
    }
    if track.steps.len() < PEAK_STEPS {
        return;
    }
    // the last PEAK_STEPS steps as one interval
    let start = track.steps[0].0;
    let len: u64 = track.steps.iter().map(|(_, l, _)| *l).sum();
    for s in State::ALL {
        let i = s.index();
        let ns = track.steps.iter().map(|(_, l, t)| t.get(s).min(*l)).sum::<u64>();
        let p = &mut track.peaks.0[i];
        // the worst share; a tie keeps the first
        if ns > 0 && (ns as u128 * p.len_ns as u128 > p.ns as u128 * len as u128 || p.len_ns == 0) {
            *p = Peak { ns, len_ns: len, at_ns: start, stretch_ns: p.stretch_ns };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn sample(at: u64, gil: u64, running: u64) -> ThreadSample {
        let mut t = Times::default();
        t.0[State::GilWait.index()] = gil;
        t.0[State::Running.index()] = running;
        crate::model::partition::test_sample(1, t, at)
    }

    #[test]
    fn a_stall_that_straddles_two_seconds_is_one_peak() {
        let mut p = PeakTracker::default();
        // forty quarter-second steps: 10% GIL wait each, but all of steps 10..=15 (1.5 s from 2.5 s)
        let q = PEAK_STEP_NS;
        let (mut gil, mut run) = (0, 0);
        for i in 1..=40u64 {
            let g = if (11..=16).contains(&i) { q } else { q / 10 };
            gil += g;
            run += q - g;
            p.add(&sample(i * q, gil, run), 0);
        }
        let peaks = p.of(1, 0).unwrap();
        let g = peaks.get(State::GilWait);
        assert_eq!((g.share(), g.at_ns, g.len_ns, g.stretch_ns), (1.0, 10 * q, 4 * q, 6 * q));
        let r = peaks.get(State::Running);
        assert_eq!((r.share(), r.at_ns, r.stretch_ns), (0.9, 0, 24 * q));
        assert_eq!(*peaks.get(State::Sleep), Peak::default());
    }

    #[test]
    fn the_first_step_starts_at_the_window_or_the_thread_and_a_new_thread_is_apart() {
        let mut p = PeakTracker::default();
        let q = PEAK_STEP_NS;
        for i in 1..=4u64 {
            let mut s = sample(2 * S + i * q, i * q / 2, i * q / 2);
            s.start_ns = 2 * S;
            p.add(&s, S);
        }
        let g = *p.of(1, 2 * S).unwrap().get(State::GilWait);
        assert_eq!((g.at_ns, g.len_ns, g.share()), (S, 4 * q, 0.5));
        assert_eq!(p.of(1, 0), None);
        // fewer than PEAK_STEPS steps: no peak yet
        let mut p = PeakTracker::default();
        p.add(&sample(q, q, 0), 0);
        assert_eq!(p.of(1, 0).unwrap().get(State::GilWait).len_ns, 0);
    }
}
