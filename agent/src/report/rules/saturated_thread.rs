//! "head-of-line:": a thread running or runnable nearly all of the window while its process
//! had CPU to spare: one thread is the limit, and what it serves queues behind it.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{CpuUse, ThreadRef};
use super::super::serial::seconds;
use super::rows::{busy_ns, row_ref};
use super::{Claim, Context};
use crate::model::partition::secs;
use crate::model::state::State;

/// A thread is saturated when it was running or runnable at least this share of its time...
pub const SATURATED_SHARE: f64 = 0.90;
/// ... less than this share of it waiting for a CPU or the quota (else the CPU is the
/// limit, and the run-queue or quota findings say so) ...
pub const SATURATED_QUEUED_SHARE: f64 = 0.25;
/// ... it existed at least this share of the window ...
pub const SATURATED_PRESENCE: f64 = 0.5;
/// ... and its process left at least this many of the cores it may use unused.
pub const SPARE_CORES: f64 = 0.5;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SaturatedThread {
    pub thread: ThreadRef,
    /// running, in the run queue or throttled
    #[serde(rename = "busy_s", serialize_with = "seconds")]
    pub busy_ns: u64,
    #[serde(rename = "running_s", serialize_with = "seconds")]
    pub running_ns: u64,
    #[serde(rename = "total_s", serialize_with = "seconds")]
    pub total_ns: u64,
    pub cpu: CpuUse,
}

/// Single-thread bottlenecks: threads busy nearly all of their time while the process
/// had cores to spare (its quota, affinity and the machine's CPUs bound what it may use);
/// a busy thread is not one of its own when it is the GIL holder a finding before names.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let cpu = cx.cpu;
    let spare = cpu.used_cores + SPARE_CORES <= cpu.limit_cores;
    let window = cx.window_ns as f64;
    let gil_holders: Vec<u32> = cx.found.iter().filter_map(|c| c.gil_holder()).collect();
    cx.rows
        .iter()
        .filter(|r| {
            let total = r.times.total();
            let queued = r.times.get(State::Runqueue) + r.times.get(State::Throttled);
            spare
                && total as f64 >= SATURATED_PRESENCE * window
                && busy_ns(r) as f64 >= SATURATED_SHARE * total as f64
                && (queued as f64) < SATURATED_QUEUED_SHARE * total as f64
        })
        .filter(|r| !gil_holders.contains(&r.tid))
        .map(|r| -> Box<dyn Claim> {
            Box::new(SaturatedThread {
                thread: row_ref(r),
                busy_ns: busy_ns(r),
                running_ns: r.times.get(State::Running),
                total_ns: r.times.total(),
                cpu,
            })
        })
        .collect()
}

impl Claim for SaturatedThread {
    fn kind(&self) -> &'static str {
        "saturated_thread"
    }
    fn explains_ns(&self) -> u64 {
        self.busy_ns
    }
    fn precedence(&self) -> u8 {
        1
    }
    fn explains_age(&self) -> bool {
        true
    }
    fn names(&self) -> Option<(u32, Option<State>)> {
        Some((self.thread.tid, None))
    }
}

impl fmt::Display for SaturatedThread {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let SaturatedThread { thread, busy_ns, running_ns, total_ns, cpu } = self;
        let pct = |ns: u64| 100.0 * ns as f64 / (*total_ns).max(1) as f64;
        let queued = busy_ns.saturating_sub(*running_ns);
        let split =
            if pct(queued) >= 1.0 { format!(" (running {:.0}%, runnable {:.0}%)", pct(*running_ns), pct(queued)) } else { String::new() };
        write!(
            f,
            "head-of-line: thread {} was busy {:.0}% of {:.1} s{split} while the process used {cpu}: one thread is the limit, and everything it serves queues behind it. Spread its work over more threads or make each item cheaper",
            thread.or_a_thread(),
            pct(*busy_ns),
            secs(*total_ns),
        )
    }
}
