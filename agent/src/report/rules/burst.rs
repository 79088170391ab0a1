//! "burst:": a thread's worst interval was nearly all waiting, though its window share was
//! below the thresholds (a stall the window's average hides).
use std::fmt;

use serde::Serialize;

use super::super::evidence::{what, ThreadRef};
use super::super::serial::{ratio, seconds, state_name};
use super::super::ThreadRow;
use super::rows::{present, row_ref, share_of};
use super::{Claim, Context, WAITING_SHARE};
use crate::model::partition::secs;
use crate::model::state::State;

/// A worst interval this much in a waiting state is a burst (when the window's share is not a
/// finding already).
pub const BURST_SHARE: f64 = 0.8;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Burst {
    pub thread: ThreadRef,
    #[serde(serialize_with = "state_name")]
    pub state: State,
    /// the worst interval: its share in `state`, when it began, its length
    #[serde(serialize_with = "ratio")]
    pub share: f64,
    #[serde(rename = "at_s", serialize_with = "seconds")]
    pub at_ns: u64,
    #[serde(rename = "interval_s", serialize_with = "seconds")]
    pub interval_ns: u64,
    /// the longest run of intervals at least half in `state`
    #[serde(rename = "stretch_s", serialize_with = "seconds")]
    pub stretch_ns: u64,
    /// the thread's share of the whole window in `state`
    #[serde(serialize_with = "ratio")]
    pub window_share: f64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
}

/// The worst waiting interval of a thread, when it was nearly all waiting though the window's
/// share was below `WAITING_SHARE`.
pub fn burst(r: &ThreadRow, window_ns: u64) -> Option<Burst> {
    let peaks = r.peaks.as_ref()?;
    if !present(r, window_ns) {
        return None;
    }
    [State::GilWait, State::Runqueue, State::Throttled]
        .into_iter()
        .map(|s| (s, peaks.get(s)))
        .filter(|(s, p)| p.share() >= BURST_SHARE && share_of(r, *s) < WAITING_SHARE)
        .max_by_key(|(_, p)| (p.stretch_ns, p.ns))
        .map(|(state, p)| Burst {
            thread: row_ref(r),
            state,
            share: p.share(),
            at_ns: p.at_ns,
            interval_ns: p.len_ns,
            stretch_ns: p.stretch_ns,
            window_share: share_of(r, state),
            window_ns,
        })
}

/// A stall inside the window, unless a finding before names that thread's wait in that state
/// already (or the thread as saturated).
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let named: Vec<(u32, Option<State>)> = cx.found.iter().filter_map(|c| c.names()).collect();
    cx.rows
        .iter()
        .filter(|r| !named.contains(&(r.tid, None)))
        .filter_map(|r| burst(r, cx.window_ns).filter(|b| !named.contains(&(r.tid, Some(b.state)))))
        .map(|b| -> Box<dyn Claim> { Box::new(b) })
        .collect()
}

impl Claim for Burst {
    fn kind(&self) -> &'static str {
        "burst"
    }
    /// The stretch, or the worst interval's time in the state when longer.
    fn explains_ns(&self) -> u64 {
        self.stretch_ns.max((self.share * self.interval_ns as f64) as u64)
    }
}

impl fmt::Display for Burst {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let Burst { thread, state, share, at_ns, interval_ns, stretch_ns, window_share, window_ns } = self;
        let stretch =
            if *stretch_ns > *interval_ns { format!(" ({:.1} s in a row at half or more)", secs(*stretch_ns)) } else { String::new() };
        write!(
            f,
            "burst: thread {} was {} {:.0}% of the {:.1} s at {:.1} s{stretch}, though {:.0}% of the {:.1} s window: a stall the window's average hides",
            thread.or_a_thread(),
            what(*state),
            100.0 * share,
            secs(*interval_ns),
            secs(*at_ns),
            100.0 * window_share,
            secs(*window_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::report::fixtures::*;
    use crate::report::rules::blocked::Blocked;

    #[test]
    fn a_stall_the_window_hides_is_a_burst_and_not_idle() {
        use crate::model::peaks::{Peak, Peaks};
        let with_peak = |mut r: ThreadRow, s: State, share: f64, stretch: u64| {
            let mut p = Peaks::default();
            p.0[s.index()] = Peak { ns: (share * S as f64) as u64, len_ns: S, at_ns: 3 * S, stretch_ns: stretch };
            r.peaks = Some(p);
            r
        };
        // 1.5 s of GIL wait in 10 s, all in a row; the rest of the time it blocks on I/O
        let ingest = row(2, "ingest", &[(State::GilWait, 3 * S / 2), (State::IoWait, 8 * S), (State::Running, S / 2)]);
        let f = every_finding_of(vec![with_peak(ingest.clone(), State::GilWait, 0.99, 3 * S / 2)], 10 * S);
        assert_eq!(kinds(&f), ["burst", "blocked"], "{f:?}");
        assert_eq!(
            f[0].to_string(),
            "burst: thread ingest (2) was waiting for the Python GIL 99% of the 1.0 s at 3.0 s (1.5 s in a row at half or more), though 15% of the 10.0 s window: a stall the window's average hides"
        );
        assert_eq!(f[0].explains_ns, 3 * S / 2);
        assert!(matches!(f[1].claim.get::<Blocked>(), Some(Blocked { idle: false, .. })), "a thread with a burst is not idle: {:?}", f[1]);
        // controls: a worst second below BURST_SHARE; a wait the window already reports
        let f = every_finding_of(vec![with_peak(ingest, State::GilWait, 0.6, 0)], 10 * S);
        assert!(!kinds(&f).contains(&"burst".to_string()), "{f:?}");
        let waiting = row(3, "w", &[(State::GilWait, 5 * S), (State::Running, 5 * S)]);
        let f = every_finding_of(vec![with_peak(waiting, State::GilWait, 1.0, 2 * S)], 10 * S);
        assert_eq!(kinds(&f), ["gil_wait"], "{f:?}");
        // the burst is still said beside a GIL contention its wait is part of
        let mut ingest = with_peak(ingest_row(), State::GilWait, 0.99, 3 * S / 2);
        ingest.gil_by_holder.insert(9, 3 * S / 2);
        let mut other = row(4, "main", &[(State::GilWait, S), (State::IoWait, 9 * S)]);
        other.gil_by_holder.insert(9, S);
        let f = every_finding_of(vec![ingest, other, row(9, "batch", &[(State::Running, 10 * S)])], 10 * S);
        assert!(kinds(&f).contains(&"gil_contention".to_string()) && kinds(&f).contains(&"burst".to_string()), "{f:?}");
    }

    fn ingest_row() -> ThreadRow {
        row(2, "ingest", &[(State::GilWait, 3 * S / 2), (State::IoWait, 8 * S), (State::Running, S / 2)])
    }
}
