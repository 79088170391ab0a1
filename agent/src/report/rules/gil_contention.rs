//! "GIL contention:": several threads each waited for the GIL behind the same holder, none long
//! enough for a line of its own (`GIL wait:`, 20% of its time), but together for a large share of
//! the window. A server that hands its requests to a pool: each request waits behind the holder's
//! long holds in whichever thread took it, and per thread the wait looks small.
use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{Behind, Culprit, ThreadTime};
use super::super::serial::{ratio, seconds};
use super::gil_ping_pong::GilPingPong;
use super::gil_starvation::GilStarvation;
use super::gil_wait::GilWait;
use super::rows::{thread_of, thread_ref, time_in};
use super::stall::Stall;
use super::unmeasured_gil::UnmeasuredGil;
use super::{Claim, Context};
use crate::model::partition::secs;
use crate::model::stacks::WaitStacks;
use crate::model::state::State;

/// The threads' GIL wait behind one holder, summed, from this share of the window (a fifth of a
/// thread's time, as a thread's own GIL line needs of its own).
pub const CONTENTION_SHARE: f64 = 0.2;
/// A thread is one of the waiters from this share of its own time behind the GIL's holders.
const WAITER_SHARE: f64 = 0.01;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GilContention {
    /// the GIL's holder most of the waits were behind, and that share of them
    pub holder: Behind,
    /// each waiter's GIL wait behind it, most first
    pub waiters: Vec<ThreadTime>,
    /// their waits summed
    #[serde(rename = "wait_s", serialize_with = "seconds")]
    pub wait_ns: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    /// the share of the window the summed waits make
    #[serde(serialize_with = "ratio")]
    pub share: f64,
}

/// One line when the threads' GIL waits, none said by a GIL line of its own (`GIL wait:`,
/// `GIL starvation:`, a stall, the ping-pong), add up to `CONTENTION_SHARE` of the window:
/// the line of last resort before the process is called healthy. The holder named is the one
/// most of the waits were behind (a pool's holder changes with the request it runs).
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let other_gil_line = cx.found::<GilWait>().next().is_some()
        || cx.found::<GilStarvation>().next().is_some()
        || cx.found::<GilPingPong>().next().is_some()
        || cx.found::<UnmeasuredGil>().next().is_some();
    if other_gil_line {
        return vec![];
    }
    // a stall's GIL wait is said by the stall
    let said: Vec<u32> = cx.found::<Stall>().flat_map(|s| s.threads()).collect();
    let mut waiters: Vec<ThreadTime> = vec![];
    let mut by_holder: BTreeMap<u32, u64> = BTreeMap::new();
    for r in cx.rows.iter().filter(|r| !said.contains(&r.tid) && r.times.total() > 0) {
        let behind: Vec<(u32, u64)> = r.gil_by_holder.iter().filter(|(h, _)| **h != 0 && **h != r.tid).map(|(h, ns)| (*h, *ns)).collect();
        let ns: u64 = behind.iter().map(|(_, ns)| ns).sum();
        if (ns as f64) < WAITER_SHARE * r.times.total() as f64 {
            continue;
        }
        for (h, n) in behind {
            *by_holder.entry(h).or_default() += n;
        }
        waiters.push(ThreadTime { ns, ..time_in(r, State::GilWait) });
    }
    let wait_ns: u64 = waiters.iter().map(|w| w.ns).sum();
    let share = wait_ns as f64 / cx.window_ns.max(1) as f64;
    let Some((&holder, &holder_ns)) = by_holder.iter().max_by_key(|(_, ns)| **ns) else { return vec![] };
    if waiters.len() < 2 || share < CONTENTION_SHARE {
        return vec![];
    }
    waiters.sort_by_key(|w| std::cmp::Reverse(w.ns));
    let holder = Behind { culprit: Culprit::Thread(thread_ref(holder, cx.rows)), share: holder_ns as f64 / wait_ns.max(1) as f64 };
    vec![Box::new(GilContention { holder, waiters, wait_ns, window_ns: cx.window_ns, share })]
}

impl Claim for GilContention {
    fn kind(&self) -> &'static str {
        "gil_contention"
    }
    /// The waiter that waited most (the code of the waits is of its stacks).
    fn victim(&self) -> Option<&ThreadTime> {
        self.waiters.first()
    }
    fn explains_ns(&self) -> u64 {
        self.wait_ns
    }
    /// A headline over threads, not the first waiter's own line.
    fn line_of(&self) -> Option<(u32, State)> {
        None
    }
    /// Nor a line of the first waiter's wait: a burst of it is still said.
    fn names(&self) -> Option<(u32, Option<State>)> {
        None
    }
    fn gil_holder(&self) -> Option<u32> {
        thread_of(&Some(self.holder.clone()))
    }
    fn culprits(&self) -> Vec<u32> {
        self.gil_holder().into_iter().collect()
    }
    /// The holder's code over all the waiters' waits behind it (it is often one of them).
    fn code(&self, stacks: &WaitStacks, switch_ns: u64) -> Option<Code> {
        let Culprit::Thread(holder) = &self.holder.culprit else { return None };
        let waiters: Vec<u32> = self.waiters.iter().map(|w| w.thread.tid).collect();
        code::contention(&waiters, holder, stacks, switch_ns)
    }
}

impl fmt::Display for GilContention {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let each: Vec<String> = self.waiters.iter().take(4).map(|w| format!("{} {:.1} s", w.thread.or_a_thread(), secs(w.ns))).collect();
        let more = self.waiters.len().saturating_sub(4);
        write!(
            f,
            "GIL contention: {} threads waited {:.1} s in all for the Python GIL, {:.0}% of it behind {}, in {:.1} s ({:.0}% of the window): {}{}; none of them 20% of its own time, so no thread's line says it: what they serve waits behind each hold",
            self.waiters.len(),
            secs(self.wait_ns),
            100.0 * self.holder.share,
            self.holder.culprit.long(),
            secs(self.window_ns),
            100.0 * self.share,
            each.join(", "),
            if more > 0 { format!(", {more} more") } else { String::new() },
        )
    }
}
