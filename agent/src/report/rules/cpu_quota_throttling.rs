//! "CPU quota throttling:": the process' cgroup was throttled in the window.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{growth, AgeFacts};
use super::super::serial::{rounded, seconds};
use super::{Claim, Context, Repeat};
use crate::model::partition::secs;
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuQuotaThrottling {
    pub cgroup: String,
    /// the quota now, in cores; null: none
    pub quota_cores: Option<f64>,
    /// periods throttled and seconds, from the cgroup's cpu.stat
    pub nr_throttled: u64,
    #[serde(serialize_with = "rounded")]
    pub cgroup_throttled_s: f64,
    /// the process' threads' time runnable but throttled
    #[serde(rename = "throttled_s", serialize_with = "seconds")]
    pub throttled_ns: u64,
    /// the throttled stretches end on the CFS period boundary; null: they do not
    pub period_signature: Option<PeriodSignature>,
    pub age: Option<AgeFacts>,
}

/// Throttled stretches that end on the CFS period's beat.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PeriodSignature {
    pub stretches: usize,
    pub period_s: f64,
}

/// Time lost to the cgroup's CPU quota, with the CFS-period signature.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let report = cx.report;
    let throttled_ns: u64 = report.threads.iter().map(|t| t.times.get(State::Throttled)).sum();
    let Some(cg) = report.cgroup.as_ref() else { return vec![] };
    if throttled_ns == 0 && cg.nr_throttled == 0 {
        return vec![];
    }
    let period_signature =
        report.throttling.as_ref().filter(|t| t.signature).map(|t| PeriodSignature { stretches: t.stretches, period_s: t.period_s });
    vec![Box::new(CpuQuotaThrottling {
        cgroup: cg.path.clone(),
        quota_cores: cg.quota_cores,
        nr_throttled: cg.nr_throttled,
        cgroup_throttled_s: cg.throttled_s,
        throttled_ns,
        period_signature,
        age: cx.age.clone(),
    })]
}

impl Claim for CpuQuotaThrottling {
    fn kind(&self) -> &'static str {
        "cpu_quota_throttling"
    }
    fn explains_ns(&self) -> u64 {
        self.throttled_ns
    }
    fn precedence(&self) -> u8 {
        3
    }
    fn quotes_age(&self) -> bool {
        true
    }
    fn explains_age(&self) -> bool {
        true
    }
    /// Every thread's own CPU-quota line.
    fn repeats(&self) -> Vec<Repeat> {
        vec![Repeat { tid: None, states: &[State::Throttled] }]
    }
}

impl fmt::Display for CpuQuotaThrottling {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let CpuQuotaThrottling { cgroup, quota_cores, nr_throttled, cgroup_throttled_s, throttled_ns, period_signature, age } = self;
        let quota = match quota_cores {
            Some(q) => format!("quota {q:.2} cores"),
            None => "no quota now".to_string(),
        };
        write!(
            f,
            "CPU quota throttling: the cgroup {cgroup} ({quota}) was throttled in {nr_throttled} periods, {cgroup_throttled_s:.2} s; its threads lost {:.2} s runnable but throttled",
            secs(*throttled_ns)
        )?;
        if let Some(p) = period_signature {
            write!(
                f,
                "; {} throttled stretches ended on the {:.0} ms CFS period boundary: waits cluster at multiples of the period",
                p.stretches,
                p.period_s * 1e3
            )?;
        }
        write!(f, "{}: raise the quota or lower the parallelism", growth(age))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;
    use crate::report::Throttling;

    #[test]
    fn cpu_quota_throttling() {
        let rows: Vec<ThreadRow> =
            (1..=2).map(|i| row(i, &format!("w{i}"), &[(State::Running, 3 * S), (State::Throttled, 2 * S)])).collect();
        let mut r = ProcessReport::new(1, "svc".into(), None, 5 * S, None, rows);
        r.cpu_limit_cores = 4.0;
        let cg = cgroup(Some(0.5));
        let th = Throttling { stretches: 40, concentration: Some(0.97), signature: true, period_s: 0.1 };
        let r = r.with_cgroup(Some(cg), Some(th));
        let f = all_findings(&r);
        assert_eq!(kinds(&f), ["cpu_quota_throttling", "cpu_quota", "cpu_quota"]);
        assert_eq!(kinds(&findings(&r)), ["cpu_quota_throttling"]);
        let throttling = CpuQuotaThrottling {
            cgroup: "/svc".into(),
            quota_cores: Some(0.5),
            nr_throttled: 40,
            cgroup_throttled_s: 2.0,
            throttled_ns: 4 * S,
            period_signature: Some(PeriodSignature { stretches: 40, period_s: 0.1 }),
            age: None,
        };
        check(&f[0], throttling, 4 * S, "CPU quota throttling: the cgroup /svc (quota 0.50 cores) was throttled in 40 periods, 2.00 s; its threads lost 4.00 s runnable but throttled; 40 throttled stretches ended on the 100 ms CFS period boundary: waits cluster at multiples of the period: raise the quota or lower the parallelism");
    }
}
