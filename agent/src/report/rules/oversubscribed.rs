//! "oversubscribed:": a process and the processes it started (`attach --children`) wanted more
//! CPUs than they may use, and waited for them behind each other (`family.rs`).
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, cores};
use super::super::family::{Family, Gathered, Member};
use super::super::serial::{ratio, rounded, seconds};
use super::{Claim, Context};
use crate::model::partition::secs;

/// A process wanting at least half a CPU over the window is one of the busy ones (a pool's
/// parent that hands out tasks and collects results wants about a tenth: the CPU its threads ran).
pub const BUSY_CORES: f64 = 0.5;
/// The busy processes want at least this many times the CPUs they may use.
pub const OVER_FACTOR: f64 = 1.25;
/// They waited for a CPU at least this share of the time they wanted one.
pub const RUNQUEUE_SHARE: f64 = 0.2;
/// At least this share of that wait was behind the family itself (else a neighbour took the
/// CPUs: not the family's own oversubscription).
pub const FAMILY_SHARE: f64 = 0.5;
/// The members a finding names.
const NAMED: usize = 6;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Oversubscribed {
    /// how many processes were busy, and the first few, most demand first
    pub count: usize,
    pub processes: Vec<ProcessDemand>,
    /// the CPUs they may use, and the CPUs they wanted (running, queued, throttled)
    #[serde(serialize_with = "rounded")]
    pub cpus: f64,
    #[serde(serialize_with = "rounded")]
    pub demand_cores: f64,
    /// their summed run-queue wait, its share of their demand, and the share of that wait
    /// behind the family itself
    #[serde(rename = "runqueue_s", serialize_with = "seconds")]
    pub runqueue_ns: u64,
    #[serde(serialize_with = "ratio")]
    pub runqueue_share: f64,
    #[serde(serialize_with = "ratio")]
    pub behind_family_share: f64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
}

/// A busy member as a finding names it: its PID, name and the CPUs it wanted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessDemand {
    pub pid: u32,
    pub comm: String,
    #[serde(serialize_with = "rounded")]
    pub cores: f64,
}

/// The oversubscription of the report's family, when it was measured.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    cx.report.family.as_ref().and_then(of).map(|o| -> Box<dyn Claim> { Box::new(o) }).into_iter().collect()
}

/// "N processes on M CPUs: k× oversubscribed", when the busy members want more CPUs than
/// there are and wait for them behind each other.
pub fn of(family: &Family) -> Option<Oversubscribed> {
    // processes asked for together need not share their CPUs
    if family.of != Gathered::Children || family.window_ns == 0 || family.cpus <= 0.0 {
        return None;
    }
    let window = family.window_ns as f64;
    let mut busy: Vec<&Member> = family.members.iter().filter(|m| m.demand_ns as f64 >= BUSY_CORES * window).collect();
    let demand: u64 = busy.iter().map(|m| m.demand_ns).sum();
    let runqueue: u64 = busy.iter().map(|m| m.runqueue_ns).sum();
    let behind_family: u64 = busy.iter().map(|m| m.runqueue_family_ns).sum();
    let demand_cores = demand as f64 / window;
    if (busy.len() as f64) <= family.cpus
        || demand_cores < OVER_FACTOR * family.cpus
        || (runqueue as f64) < RUNQUEUE_SHARE * demand as f64
        || (behind_family as f64) < FAMILY_SHARE * runqueue as f64
    {
        return None;
    }
    busy.sort_by(|a, b| b.demand_ns.cmp(&a.demand_ns).then(a.pid.cmp(&b.pid)));
    Some(Oversubscribed {
        count: busy.len(),
        processes: busy
            .iter()
            .take(NAMED)
            .map(|m| ProcessDemand { pid: m.pid, comm: m.comm.clone(), cores: m.demand_ns as f64 / window })
            .collect(),
        cpus: family.cpus,
        demand_cores,
        runqueue_ns: runqueue,
        runqueue_share: runqueue as f64 / demand as f64,
        behind_family_share: behind_family as f64 / runqueue as f64,
        window_ns: family.window_ns,
    })
}

impl Claim for Oversubscribed {
    fn kind(&self) -> &'static str {
        "oversubscribed"
    }
    fn explains_ns(&self) -> u64 {
        self.runqueue_ns
    }
    fn precedence(&self) -> u8 {
        1
    }
    fn explains_age(&self) -> bool {
        true
    }
}

impl fmt::Display for Oversubscribed {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let Oversubscribed { count, processes, cpus, demand_cores, runqueue_share, behind_family_share, window_ns, .. } = self;
        let names = processes.iter().map(|p| format!("{} ({}) {:.2} CPU", p.comm, p.pid, p.cores)).collect();
        write!(
            f,
            "oversubscribed: {count} processes on {} CPU{} want {demand_cores:.1} CPUs: {:.1}× oversubscribed; they waited {:.0}% of that time for a CPU ({:.0}% of it behind each other) in {:.1} s: {}. Size the pool or worker count to the CPUs it may use ({}: `len(os.sched_getaffinity(0))`, within the cgroup's quota), or give it more CPUs",
            cores(*cpus),
            if *cpus == 1.0 { "" } else { "s" },
            demand_cores / cpus,
            100.0 * runqueue_share,
            100.0 * behind_family_share,
            secs(*window_ns),
            and_more(names, *count),
            cores(*cpus),
        )
    }
}
