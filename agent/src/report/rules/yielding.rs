//! "yielding:": threads runnable after sched_yield(2) much of their time (a spin-then-yield
//! wait strategy): idle by choice, not waiting; what their spinning cost in CPU.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, ThreadRef};
use super::super::serial::seconds;
use super::super::ThreadRow;
use super::rows::{present, row_ref, share_of};
use super::{Claim, Context, IDLE_NAMED, WAITING_SHARE};
use crate::model::partition::secs;
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Yielding {
    pub count: usize,
    /// the first few, most yield time first
    pub threads: Vec<ThreadRef>,
    /// their summed `yield` time, and how often they gave the CPU away
    #[serde(rename = "yield_s", serialize_with = "seconds")]
    pub yield_ns: u64,
    pub yields: u64,
    /// their summed running time (the spinning's cost) and the window
    #[serde(rename = "running_s", serialize_with = "seconds")]
    pub running_ns: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
}

/// Threads runnable after sched_yield(2) for `WAITING_SHARE` of their time or more, in one
/// finding: a spin-then-yield wait strategy. Their runnable time is not a wait (they gave the
/// CPU away); the line says so, and what their spinning cost.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let mut yielders: Vec<&ThreadRow> =
        cx.rows.iter().filter(|r| present(r, cx.window_ns) && share_of(r, State::Yield) >= WAITING_SHARE).collect();
    if yielders.is_empty() {
        return vec![];
    }
    yielders.sort_by_key(|r| (std::cmp::Reverse(r.times.get(State::Yield)), r.tid));
    vec![Box::new(Yielding {
        count: yielders.len(),
        threads: yielders.iter().take(IDLE_NAMED).map(|r| row_ref(r)).collect(),
        yield_ns: yielders.iter().map(|r| r.times.get(State::Yield)).sum(),
        yields: yielders.iter().map(|r| r.yields).sum(),
        running_ns: yielders.iter().map(|r| r.times.get(State::Running)).sum(),
        window_ns: cx.window_ns,
    })]
}

impl Claim for Yielding {
    fn kind(&self) -> &'static str {
        "yielding"
    }
    fn tier(&self) -> u8 {
        2
    }
    fn is_problem(&self) -> bool {
        false
    }
    fn quiet(&self) -> bool {
        true
    }
}

impl fmt::Display for Yielding {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let Yielding { count, threads, yield_ns, yields, running_ns, window_ns } = self;
        let (n, them) = if *count == 1 { ("1 thread".to_string(), "it") } else { (format!("{count} threads"), "them") };
        write!(
            f,
            "yielding: {n} ({}) gave the CPU away {yields} times with sched_yield and spent {:.1} s runnable after it: a spin-then-yield wait strategy, idle by choice, not waiting (their spinning used {:.2} CPU; a thread queued behind {them} shows as run-queue wait)",
            and_more(threads.iter().map(|t| t.or_a_thread()).collect(), *count),
            secs(*yield_ns),
            *running_ns as f64 / (*window_ns).max(1) as f64,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::report::fixtures::*;

    #[test]
    fn yielding_threads_are_one_line_and_not_waiting() {
        // three spin-then-yield consumers on one CPU, and (the victim) a thread queued behind them
        let consumer = |tid: u32| {
            let mut r =
                row(tid, &format!("md-consumer-{tid}"), &[(State::Running, S / 10), (State::Yield, 9 * S), (State::Runqueue, S / 10)]);
            r.yields = 40_000;
            r
        };
        let mut pricer = row(9, "pricer", &[(State::Running, 6 * S), (State::Runqueue, 4 * S)]);
        pricer.runqueue_by.insert(crate::model::blame::Preemptor::Thread(1), 4 * S);
        let all = every_finding_of(vec![consumer(1), consumer(2), consumer(3), pricer], 10 * S);
        assert_eq!(kinds(&all), ["run_queue_saturation", "yielding"], "{all:?}");
        let line = all[1].to_string();
        assert!(
            line.starts_with(
                "yielding: 3 threads (md-consumer-1 (1), md-consumer-2 (2), md-consumer-3 (3)) gave the CPU away 120000 times"
            ),
            "{line}"
        );
        assert!(line.contains("27.0 s runnable after it") && line.contains("used 0.03 CPU"), "{line}");
        // alone they are healthy, and not idle: the yield line says what they are
        let alone = every_finding_of(vec![consumer(1), consumer(2), consumer(3)], 10 * S);
        assert_eq!(kinds(&alone), ["healthy", "yielding"], "{alone:?}");
        // the control: the same time in the run queue is waiting
        let spinner = row(4, "spinner", &[(State::Running, S), (State::Runqueue, 9 * S)]);
        assert_eq!(kinds(&every_finding_of(vec![spinner], 10 * S)), ["run_queue_saturation"]);
    }
}
