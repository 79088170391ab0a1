//! "healthy:": no thread waited `WAITING_SHARE` of its time or was busy all of it, and the
//! age (if any) is fine.
use std::fmt;

use serde::Serialize;

use super::super::evidence::AgeFacts;
use super::super::serial::seconds;
use super::{Claim, Context, WAITING_SHARE};
use crate::model::partition::secs;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Healthy {
    pub age: Option<AgeFacts>,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    /// the waiting share below which a thread is not reported (`WAITING_SHARE`)
    pub waiting_share: f64,
}

/// When every finding before is quiet (blocked threads may be idle or contended; yielding
/// ones idle by choice), the age is not bad, and there are threads.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let quiet = cx.found.iter().all(|c| c.quiet());
    if quiet && !cx.bad_age && !cx.rows.is_empty() {
        return vec![Box::new(Healthy { age: cx.age.clone(), window_ns: cx.window_ns, waiting_share: WAITING_SHARE })];
    }
    vec![]
}

impl Claim for Healthy {
    fn kind(&self) -> &'static str {
        "healthy"
    }
    fn tier(&self) -> u8 {
        0
    }
    fn precedence(&self) -> u8 {
        0
    }
    fn quotes_age(&self) -> bool {
        true
    }
    fn is_problem(&self) -> bool {
        false
    }
}

impl fmt::Display for Healthy {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let age = match &self.age {
            Some(a) => {
                format!("age flat at {:.2} s (mean {:.2} s, max {:.2} s, objective {:.2} s)", a.last_s, a.mean_s, a.max_s, a.objective_s)
            }
            None => "no age source".to_string(),
        };
        write!(
            f,
            "healthy: {age}; no thread waited for a CPU, quota or the GIL for {:.0}% or more of its time, no serving thread was kept from its home wait for long, and none that others wait on was busy all of the {:.1} s",
            100.0 * self.waiting_share,
            secs(self.window_ns)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::stretches::{Hist, ThreadStretches, WaitKey};
    use crate::report::fixtures::*;
    use crate::report::ThreadRow;

    #[test]
    fn healthy() {
        let f = findings_of(vec![row(1, "main", &[(State::Sleep, 10 * S)])], 10 * S, 4.0, Some((1.0, 1.0, false)));
        let age = Some(facts(1.0, 1.0, false));
        assert_eq!(f.len(), 1);
        let healthy = Healthy { age, window_ns: 10 * S, waiting_share: WAITING_SHARE };
        check(
            &f[0],
            healthy,
            0,
            "healthy: age flat at 1.00 s (mean 1.00 s, max 1.00 s, objective 2.10 s); no thread waited for a CPU, quota or the GIL for 20% or more of its time, no serving thread was kept from its home wait for long, and none that others wait on was busy all of the 10.0 s",
        );
    }

    #[test]
    fn healthy_means_no_wait_no_saturation_and_the_age_within_its_objective() {
        let rows = || vec![row(1, "worker", &[(State::Running, 2 * S), (State::Sleep, 8 * S)])];
        // flat at 1 s: within the spread objective (2 x median + 0.1 s)
        assert_eq!(kinds(&findings_of(rows(), 10 * S, 4.0, Some((1.0, 1.0, false)))), ["healthy"]);
        // the same flat age against --age-slo 0.5: not healthy; the worker is pointed at
        let mut r = ProcessReport::new(1, "svc".into(), None, 10 * S, None, rows()).with_age(Some(age(1.0, 1.0, false)));
        r.cpu_limit_cores = 4.0;
        let slo = r.with_verdict(crate::report::VerdictOptions { all: false, age_slo_s: Some(0.5) });
        let f = findings(&slo);
        assert_eq!(kinds(&f), ["age_rising_cpu_idle"]);
        assert!(f[0].to_string().starts_with("age above its objective while the CPU is idle: message age flat, mean 1.00 s, max 1.00 s, above its 0.50 s objective in 10.0 s"), "{}", f[0]);
        // a spike far above the usual level breaks the spread objective
        let mut spiky = crate::report::fixtures::age(0.02, 0.02, false);
        spiky.summary.max_s = 2.0;
        spiky.summary.median_s = 0.02;
        let mut r = ProcessReport::new(1, "svc".into(), None, 10 * S, None, rows()).with_age(Some(spiky));
        r.cpu_limit_cores = 4.0;
        assert!(!kinds(&findings(&r)).contains(&"healthy".to_string()), "{:?}", findings(&r));
        // a saturated thread is never healthy, age or not, when something waits on it: it serves
        // input (a home wait it comes back to) ...
        let obj = crate::model::stretches::STALL_OBJECTIVE_NS;
        let serving = ThreadRow {
            stretches: Some(ThreadStretches::new(vec![(WaitKey::new(202, 0x10), Hist::of(&[3 * S, 4 * S], S, obj, State::Running))], obj)),
            ..row(1, "busy", &[(State::Running, 10 * S)])
        };
        assert_eq!(kinds(&findings_of(vec![serving], 10 * S, 4.0, Some((0.1, 0.1, false)))), ["saturated_thread"]);
        // ... or the age is bad
        assert_eq!(
            kinds(&findings_of(vec![row(1, "busy", &[(State::Running, 10 * S)])], 10 * S, 4.0, Some((0.1, 3.0, true))))[0],
            "saturated_thread"
        );
        // a busy thread nothing waits on (a batch loop with the GIL off) is no limit
        assert_eq!(
            kinds(&findings_of(vec![row(1, "busy", &[(State::Running, 10 * S)])], 10 * S, 4.0, Some((0.1, 0.1, false)))),
            ["healthy"]
        );
    }
}
