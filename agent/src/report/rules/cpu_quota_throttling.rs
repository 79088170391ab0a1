//! "CPU quota throttling:": the process' cgroup was throttled in the window.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, growth, AgeFacts, ThreadTime};
use super::super::serial::{ratio, rounded, seconds};
use super::rows::row_ref;
use super::{Claim, Context, Repeat};
use crate::model::partition::secs;
use crate::model::stacks::Role;
use crate::model::state::State;
use crate::runtime::Go;

/// How many of the threads that lost the most to the quota the line names.
const NAMED: usize = 3;

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
    /// how many threads lost time to it, and those that lost the most, most first
    pub count: usize,
    pub threads: Vec<ThreadTime>,
    /// the code the throttled threads were running when the quota ran out (their stacks at the
    /// throttle, the site with the most of it), and its share; null: no stacks
    pub site: Option<String>,
    #[serde(serialize_with = "ratio")]
    pub site_share: f64,
    /// a Go process: the runtime's facts its remedy is said by (null: not Go)
    pub go: Option<Go>,
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
    let mut lost: Vec<ThreadTime> = report
        .threads
        .iter()
        .filter(|t| t.times.get(State::Throttled) > 0)
        .map(|t| ThreadTime { thread: row_ref(t), state: State::Throttled, ns: t.times.get(State::Throttled), total_ns: t.existed_ns })
        .collect();
    lost.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.thread.tid.cmp(&b.thread.tid)));
    let tids: Vec<u32> = lost.iter().map(|t| t.thread.tid).collect();
    let site = report.stacks.as_ref().and_then(|st| st.top_site_of(&tids, State::Throttled, Role::Victim, None));
    let count = lost.len();
    lost.truncate(NAMED);
    vec![Box::new(CpuQuotaThrottling {
        cgroup: cg.path.clone(),
        quota_cores: cg.quota_cores,
        nr_throttled: cg.nr_throttled,
        cgroup_throttled_s: cg.throttled_s,
        throttled_ns,
        period_signature,
        age: cx.age.clone(),
        count,
        threads: lost,
        site_share: site.as_ref().map_or(0.0, |s| s.share),
        site: site.map(|s| s.text),
        go: report.environment.as_ref().and_then(|e| e.go.clone()),
    })]
}

/// The remedy: a Go process' by its GOMAXPROCS (the threads that run Go code at once), when it
/// lets more of them run than the quota's whole CPUs; else the quota or the parallelism.
fn remedy(quota: Option<f64>, go: Option<&Go>) -> String {
    const ANY: &str = "raise the quota or lower the parallelism";
    let (Some(go), Some(q)) = (go, quota) else { return ANY.into() };
    let fits = (q.floor() as u64).max(1);
    let version = go.version.as_deref().unwrap_or("a Go before 1.18");
    // Go 1.25+'s default under a quota
    let follows = (q.ceil() as u64).max(2);
    // the runtime ignores a value that is not a positive number
    match (go.gomaxprocs_env.as_deref().and_then(|g| g.trim().parse::<u64>().ok()).filter(|g| *g > 0), go.default_follows_quota()) {
        (Some(g), _) if g > fits => {
            format!("GOMAXPROCS={g} in its environment lets {g} threads run Go code at once on a quota of {q:.2} CPUs: set GOMAXPROCS={fits}, or raise the quota")
        }
        (Some(g), _) => format!("its GOMAXPROCS={g} fits the quota; the rest runs outside Go's scheduler (cgo calls, system calls that let go of their P, threads Go did not start): raise the quota"),
        (_, Some(true)) if follows > fits => format!(
            "{version}'s default GOMAXPROCS follows the quota rounded up and is at least 2 ({follows}): set GOMAXPROCS={fits} in its environment, or raise the quota"
        ),
        (_, Some(true)) => "its default GOMAXPROCS follows the quota; the rest runs outside Go's scheduler (cgo calls, system calls that let go of their P, threads Go did not start): raise the quota".into(),
        _ => format!(
            "{version}'s default GOMAXPROCS is the CPUs it may run on, not the quota (Go 1.25 and later follow the quota): set GOMAXPROCS={fits} in its environment (or go.uber.org/automaxprocs), or raise the quota"
        ),
    }
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
        let CpuQuotaThrottling {
            cgroup,
            quota_cores,
            nr_throttled,
            cgroup_throttled_s,
            throttled_ns,
            period_signature,
            age,
            count,
            threads,
            site,
            go,
            ..
        } = self;
        let quota = match quota_cores {
            Some(q) => format!("quota {q:.2} cores"),
            None => "no quota now".to_string(),
        };
        write!(
            f,
            "CPU quota throttling: the cgroup {cgroup} ({quota}) was throttled in {nr_throttled} periods, {cgroup_throttled_s:.2} s; its threads lost {:.2} s runnable but throttled",
            secs(*throttled_ns)
        )?;
        if !threads.is_empty() {
            let names = threads.iter().map(|t| format!("{} {:.2} s", t.thread.or_a_thread(), secs(t.ns))).collect();
            write!(f, " ({})", and_more(names, *count))?;
        }
        if let Some(site) = site {
            write!(f, ", running {site} when the quota ran out")?;
        }
        if let Some(p) = period_signature {
            write!(
                f,
                "; {} throttled stretches ended on the {:.0} ms CFS period boundary: waits cluster at multiples of the period",
                p.stretches,
                p.period_s * 1e3
            )?;
        }
        write!(f, "{}: {}", growth(age), remedy(*quota_cores, go.as_ref()))
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
            count: 2,
            threads: (1..=2)
                .map(|i| ThreadTime { thread: named(i, &format!("w{i}")), state: State::Throttled, ns: 2 * S, total_ns: 5 * S })
                .collect(),
            site: None,
            site_share: 0.0,
            go: None,
        };
        check(&f[0], throttling, 4 * S, "CPU quota throttling: the cgroup /svc (quota 0.50 cores) was throttled in 40 periods, 2.00 s; its threads lost 4.00 s runnable but throttled (w1 (1) 2.00 s, w2 (2) 2.00 s); 40 throttled stretches ended on the 100 ms CFS period boundary: waits cluster at multiples of the period: raise the quota or lower the parallelism");
    }

    #[test]
    fn a_go_process_hears_of_gomaxprocs_where_it_lets_more_run_than_the_quota() {
        let go = |v: &str, env: Option<&str>| Go { version: Some(v.into()), gomaxprocs_env: env.map(str::to_string) };
        // Go 1.25+ under half a CPU: its default is 2
        let r = remedy(Some(0.5), Some(&go("go1.26.0", None)));
        assert_eq!(r, "go1.26.0's default GOMAXPROCS follows the quota rounded up and is at least 2 (2): set GOMAXPROCS=1 in its environment, or raise the quota");
        // 2.5 CPUs: rounded up to 3
        assert!(remedy(Some(2.5), Some(&go("go1.25.1", None))).contains("(3): set GOMAXPROCS=2"));
        // a whole quota of 4 is what its default takes: the quota, not GOMAXPROCS
        assert!(
            remedy(Some(4.0), Some(&go("go1.26.0", None))).ends_with("raise the quota")
                && !remedy(Some(4.0), Some(&go("go1.26.0", None))).contains("set GOMAXPROCS")
        );
        // before 1.25 the default is the CPUs it may run on
        assert!(remedy(Some(1.0), Some(&go("go1.24.3", None)))
            .starts_with("go1.24.3's default GOMAXPROCS is the CPUs it may run on, not the quota"));
        // set in its environment: above the quota, or within it
        assert!(remedy(Some(1.0), Some(&go("go1.26.0", Some("8"))))
            .starts_with("GOMAXPROCS=8 in its environment lets 8 threads run Go code at once on a quota of 1.00 CPUs: set GOMAXPROCS=1"));
        assert!(remedy(Some(2.0), Some(&go("go1.26.0", Some("2")))).starts_with("its GOMAXPROCS=2 fits the quota"));
        // a value the runtime ignores (0, not a number) leaves its default
        assert!(remedy(Some(0.5), Some(&go("go1.26.0", Some("0")))).contains("set GOMAXPROCS=1 in its environment"));
        assert!(remedy(Some(0.5), Some(&go("go1.26.0", Some("many")))).starts_with("go1.26.0's default GOMAXPROCS"));
        // no quota (throttled by a parent's), or not Go: as for any process
        assert_eq!(remedy(None, Some(&go("go1.26.0", None))), "raise the quota or lower the parallelism");
        assert_eq!(remedy(Some(0.5), None), "raise the quota or lower the parallelism");
    }
}
