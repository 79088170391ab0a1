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
    fn victim(&self) -> Option<&ThreadTime> {
        Some(&self.victim)
    }
    fn explains_age(&self) -> bool {
        true
    }
}

impl fmt::Display for CpuQuota {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        waiting(f, "CPU quota", &self.victim, "", self.wait_ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn cpu_quota_of_a_thread() {
        let f = findings_of(vec![row(1, "w", &[(State::Running, 5 * S), (State::Throttled, 5 * S)])], 10 * S, 4.0, None);
        let kind = CpuQuota { victim: time(1, "w", State::Throttled, 5 * S, 10 * S), wait_ratio: 0.5 };
        assert_eq!(f.len(), 1);
        check(&f[0], kind, 5 * S, "CPU quota: thread w (1) spent 5.0 s of 10.0 s throttled by its cgroup's CPU quota (50%), wait ratio 0.50: it had work and could not do it");
    }
}
