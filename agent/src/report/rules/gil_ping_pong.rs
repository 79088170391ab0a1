//! "GIL ping-pong:": threads that take the GIL thousands of times a second for microseconds
//! each (busy-polling event loops, tight loops of tiny GIL-releasing calls): their GIL waits
//! are not work kept waiting.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, human_rate, ThreadRef};
use super::super::serial::{rounded, seconds};
use super::super::ThreadRow;
use super::rows::{present, row_ref, share_of};
use super::{Claim, Context, Repeat, IDLE_NAMED};
use crate::model::partition::secs;
use crate::model::state::State;

/// A thread busy-polls the GIL when it went to wait for it this often (per second of its time) ...
pub const POLL_RATE: f64 = 500.0;
/// ... ran this little between two waits on average ...
pub const POLL_HOLD_NS: u64 = 1_000_000;
/// ... ran at least this share of its time, and waited for the GIL or a CPU at least
/// `POLL_WAIT_SHARE` of it (on a busy machine pollers queue for a CPU more than for the GIL).
pub const POLL_RUNNING_SHARE: f64 = 0.20;
pub const POLL_WAIT_SHARE: f64 = 0.10;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GilPingPong {
    /// how many threads, and the first few, most hand-offs first
    pub count: usize,
    pub threads: Vec<ThreadRef>,
    /// the times they went to wait for the GIL, per second of the window (summed)
    #[serde(serialize_with = "rounded")]
    pub handoffs_per_s: f64,
    /// their mean time on the CPU between two waits for the GIL
    #[serde(rename = "mean_hold_s", serialize_with = "seconds")]
    pub mean_hold_ns: u64,
    /// their summed GIL wait and running time (what their polling cost)
    #[serde(rename = "gil_wait_s", serialize_with = "seconds")]
    pub gil_wait_ns: u64,
    #[serde(rename = "running_s", serialize_with = "seconds")]
    pub running_ns: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    /// every one of the threads (their own GIL-wait and run-queue lines are this line's)
    #[serde(skip)]
    pub tids: Vec<u32>,
}

/// The threads that busy-poll the GIL (`POLL_RATE`, `POLL_HOLD_NS`, `POLL_RUNNING_SHARE`,
/// `POLL_WAIT_SHARE`): taking it thousands of times a second for microseconds, running much of
/// their time: their GIL waits are the price of their polling, not work kept waiting.
pub fn pollers(rows: &[ThreadRow], window_ns: u64) -> Vec<&ThreadRow> {
    rows.iter()
        .filter(|r| {
            let running = r.times.get(State::Running);
            present(r, window_ns)
                && r.gil_waits as f64 >= POLL_RATE * secs(r.times.total())
                && running / r.gil_waits.max(1) <= POLL_HOLD_NS
                && share_of(r, State::Running) >= POLL_RUNNING_SHARE
                && share_of(r, State::GilWait) + share_of(r, State::Runqueue) >= POLL_WAIT_SHARE
        })
        .collect()
}

/// GIL ping-pong: the busy-polling threads, in one finding.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let mut pollers = pollers(cx.rows, cx.window_ns);
    if pollers.is_empty() {
        return vec![];
    }
    pollers.sort_by_key(|r| (std::cmp::Reverse(r.gil_waits), r.tid));
    let waits: u64 = pollers.iter().map(|r| r.gil_waits).sum();
    let running_ns: u64 = pollers.iter().map(|r| r.times.get(State::Running)).sum();
    vec![Box::new(GilPingPong {
        count: pollers.len(),
        threads: pollers.iter().take(IDLE_NAMED).map(|r| row_ref(r)).collect(),
        handoffs_per_s: waits as f64 / secs(cx.window_ns).max(1e-9),
        mean_hold_ns: running_ns / waits.max(1),
        gil_wait_ns: pollers.iter().map(|r| r.times.get(State::GilWait)).sum(),
        running_ns,
        window_ns: cx.window_ns,
        tids: pollers.iter().map(|r| r.tid).collect(),
    })]
}

impl Claim for GilPingPong {
    fn kind(&self) -> &'static str {
        "gil_ping_pong"
    }
    fn explains_ns(&self) -> u64 {
        self.gil_wait_ns
    }
    fn precedence(&self) -> u8 {
        5
    }
    /// The pollers' own GIL-wait and run-queue lines.
    fn repeats(&self) -> Vec<Repeat> {
        self.tids.iter().map(|tid| Repeat { tid: Some(*tid), states: &[State::GilWait, State::Runqueue] }).collect()
    }
}

impl fmt::Display for GilPingPong {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let GilPingPong { count, threads, handoffs_per_s, mean_hold_ns, gil_wait_ns, running_ns, window_ns, .. } = self;
        let hold = if *mean_hold_ns < 1_000_000 {
            format!("{:.0} µs", *mean_hold_ns as f64 / 1e3)
        } else {
            format!("{:.1} ms", *mean_hold_ns as f64 / 1e6)
        };
        write!(
            f,
            "GIL ping-pong: {count} thread{} ({}) {} the GIL over {}/s in {hold} holds, {:.1} s waiting for it and {:.2} CPU spent in {:.1} s: threads that take the GIL only to give it up again (busy-polling event loops: `await asyncio.sleep(0)` or `queue.empty()` in a loop; or a tight loop of tiny calls that release it), not work kept waiting. Make them block until there is work (an awaited queue or event, a memory stream); pinning the process to one CPU trades these GIL waits for run-queue waits",
            if *count == 1 { "" } else { "s" },
            and_more(threads.iter().map(ThreadRef::or_a_thread).collect(), *count),
            if *count == 1 { "took" } else { "hand" },
            human_rate(*handoffs_per_s),
            secs(*gil_wait_ns),
            *running_ns as f64 / (*window_ns).max(1) as f64,
            secs(*window_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    /// A thread that went to wait for the GIL `waits` times in 10 s, running `running_s`.
    fn poller(tid: u32, waits: u64, running_ns: u64) -> ThreadRow {
        let mut r = row(tid, &format!("portal-{tid}"), &[(State::Running, running_ns), (State::GilWait, 10 * S - running_ns)]);
        r.gil_waits = waits;
        r.gil_by_holder.insert(0, 10 * S - running_ns);
        r
    }

    #[test]
    fn busy_polling_threads_are_gil_ping_pong_and_not_threads_with_work() {
        // three event-loop threads each taking the GIL 20k times a second for ~20 µs
        let rows = vec![poller(1, 200_000, 4 * S), poller(2, 180_000, 4 * S), poller(3, 160_000, 3 * S)];
        let shown = findings_of(rows.clone(), 10 * S, 4.0, None);
        assert_eq!(kinds(&shown), ["gil_ping_pong"]);
        let pong = GilPingPong {
            count: 3,
            threads: vec![named(1, "portal-1"), named(2, "portal-2"), named(3, "portal-3")],
            handoffs_per_s: 54_000.0,
            mean_hold_ns: 11 * S / 540_000,
            gil_wait_ns: 19 * S,
            running_ns: 11 * S,
            window_ns: 10 * S,
            tids: vec![1, 2, 3],
        };
        check(&shown[0], pong, 19 * S, "GIL ping-pong: 3 threads (portal-1 (1), portal-2 (2), portal-3 (3)) hand the GIL over 54k/s in 20 µs holds, 19.0 s waiting for it and 1.10 CPU spent in 10.0 s: threads that take the GIL only to give it up again (busy-polling event loops: `await asyncio.sleep(0)` or `queue.empty()` in a loop; or a tight loop of tiny calls that release it), not work kept waiting. Make them block until there is work (an awaited queue or event, a memory stream); pinning the process to one CPU trades these GIL waits for run-queue waits");
        // not starvation either, with no age source or a rising one
        assert!(!kinds(&findings_of(rows.clone(), 10 * S, 4.0, Some((1.0, 5.0, true)))).contains(&"gil_starvation".to_string()));
        // the controls: a thread starved behind a long holder goes to wait often but hardly runs;
        // a worker that takes the GIL for milliseconds at a time is not polling
        let mut starved = row(4, "ingest", &[(State::GilWait, 9_900_000_000), (State::Running, 100_000_000)]);
        starved.gil_waits = 2_330;
        starved.gil_by_holder.insert(5, 9_900_000_000);
        let worker = poller(6, 3_000, 5 * S);
        let f = findings_of(vec![starved, worker, row(5, "processor", &[(State::Running, 10 * S)])], 10 * S, 4.0, None);
        assert!(!kinds(&f).contains(&"gil_ping_pong".to_string()), "{:?}", kinds(&f));
        assert_eq!(kinds(&f)[0], "gil_starvation");
    }
}
