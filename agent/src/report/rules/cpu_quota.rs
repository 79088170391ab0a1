//! "CPU quota:": a thread was throttled a large share of its time (its worst involuntary wait).
use std::fmt;

use serde::Serialize;

use super::super::evidence::{waiting, ThreadTime};
use super::super::serial::ratio;
use super::super::ThreadRow;
use super::rows::{time_in, worst_wait};
use super::{Claim, Context};
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuQuota {
    #[serde(flatten)]
    pub victim: ThreadTime,
    #[serde(serialize_with = "ratio")]
    pub wait_ratio: f64,
}

/// The line of a thread whose worst involuntary wait (`WAITING_SHARE`) is the quota.
pub fn of(r: &ThreadRow, _: &Context) -> Option<Box<dyn Claim>> {
    (worst_wait(r)? == State::Throttled).then(|| -> Box<dyn Claim> {
        Box::new(CpuQuota { victim: time_in(r, State::Throttled), wait_ratio: r.times.wait_ratio().unwrap_or(0.0) })
    })
}

impl Claim for CpuQuota {
    fn kind(&self) -> &'static str {
        "cpu_quota"
    }
    fn explains_ns(&self) -> u64 {
        self.victim.ns
    }
    fn precedence(&self) -> u8 {
        6
    }
    fn explains_age(&self) -> bool {
        true
    }
    fn names(&self) -> Option<(u32, Option<State>)> {
        Some((self.victim.thread.tid, Some(self.victim.state)))
    }
    fn line_of(&self) -> Option<(u32, State)> {
        Some((self.victim.thread.tid, self.victim.state))
    }
}

impl fmt::Display for CpuQuota {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        waiting(f, "CPU quota", &self.victim, "", self.wait_ratio)
    }
}
