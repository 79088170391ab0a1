//! Hand-built windows for the report's unit tests, and what the rules' tests use
//! (`use crate::report::fixtures::*`).
pub use super::evidence::{AgeFacts, Behind, CpuUse, Culprit, ThreadRef, ThreadTime};
pub use super::finding::Finding;
pub use super::rules::rows::{SPREAD_FACTOR, SPREAD_SLACK_S};
pub use super::rules::Claim;
use super::{AgeReport, CgroupReport, PythonInfo, Throttling};
pub use super::{ProcessReport, ThreadRow};
use crate::model::age::AgeSummary;
pub use crate::model::blame::{FutexWait, Preemptor};
use crate::model::partition::Times;
pub use crate::model::state::State;

pub const S: u64 = 1_000_000_000;

/// The verdict of a report, as the text report and the JSON `verdict` print it.
pub fn lines(r: &ProcessReport) -> Vec<String> {
    findings(r).iter().map(ToString::to_string).collect()
}

/// Every finding of the window, ranked: the JSON `findings` (and the verdict with `-v`).
pub fn all_findings(r: &ProcessReport) -> Vec<Finding> {
    super::verdict::analyse(r).all
}

/// The verdict as shown.
pub fn findings(r: &ProcessReport) -> Vec<Finding> {
    super::verdict::analyse(r).shown
}

/// A thread of `name` with these nanoseconds per state, present all its window.
pub fn row(tid: u32, name: &str, pairs: &[(State, u64)]) -> ThreadRow {
    let mut t = Times::default();
    for (s, ns) in pairs {
        t.0[s.index()] = *ns;
    }
    ThreadRow { tid, name: name.into(), comm: name.into(), times: t, existed_ns: t.total(), ..Default::default() }
}

/// An endpoint age that went from `first` to `last` seconds.
pub fn age(first: f64, last: f64, rising: bool) -> AgeReport {
    let summary = AgeSummary {
        samples: 10,
        first_s: first,
        last_s: last,
        max_s: last.max(first),
        mean_s: (first + last) / 2.0,
        median_s: (first + last) / 2.0,
        growth_s: last - first,
        slope: (last - first) / 10.0,
        rising,
    };
    AgeReport { source: "endpoint", summary, p50_s: None, p99_s: None, skipped_lines: None, failed_polls: None }
}

/// The cgroup /svc, throttled in 40 of 45 periods for 2 s.
pub fn cgroup(quota_cores: Option<f64>) -> CgroupReport {
    CgroupReport { path: "/svc".into(), quota_cores, period_s: Some(0.1), throttled_s: 2.0, nr_throttled: 40, nr_periods: 45 }
}

/// ingest waits for the GIL 94% of its time, 99% of that behind processor.
pub fn starving() -> Vec<ThreadRow> {
    let mut victim = row(11, "ingest", &[(State::GilWait, 9_400_000_000), (State::Running, 600_000_000)]);
    victim.gil_by_holder.insert(12, 9_300_000_000);
    victim.gil_by_holder.insert(0, 100_000_000);
    vec![victim, row(12, "processor", &[(State::Running, 9_900_000_000), (State::GilWait, 100_000_000)])]
}

/// A causal chain: ingest waits on a lock (futex 0x7f10) that worker releases 93% of the time,
/// and worker waits for the GIL 60% of its time, behind processor.
pub fn chain() -> Vec<ThreadRow> {
    let mut ingest = row(
        11,
        "ingest",
        &[(State::FutexWait, 4_500_000_000), (State::IoWait, 3 * S), (State::Running, 1_500_000_000), (State::GilWait, S)],
    );
    ingest.futex.push(FutexWait { addr: 0x7f10, waker: 12, ns: 4_200_000_000 });
    ingest.futex.push(FutexWait { addr: 0x7f10, waker: 0, ns: 300_000_000 });
    ingest.gil_by_holder.insert(13, S);
    let mut worker = row(12, "worker", &[(State::GilWait, 6 * S), (State::Running, 3 * S), (State::FutexWait, S)]);
    worker.gil_by_holder.insert(13, 5_500_000_000);
    worker.gil_by_holder.insert(0, 500_000_000);
    vec![ingest, worker, row(13, "processor", &[(State::Running, 9_500_000_000), (State::GilWait, 500_000_000)])]
}

/// A Python process with every block of the report filled: GIL starvation behind a
/// holder that is throttled, a futex waiter, a precise GIL probe, an age source.
pub fn full_report() -> ProcessReport {
    let mut ingest = row(11, "ingest", &[(State::GilWait, 9_400_000_000), (State::Running, 400_000_000), (State::Runqueue, 200_000_000)]);
    ingest.gil_by_holder.insert(12, 9_300_000_000);
    ingest.gil_by_holder.insert(0, 100_000_000);
    ingest.runqueue_by.insert(Preemptor::Thread(12), 150_000_000);
    ingest.runqueue_by.insert(Preemptor::Process { pid: 99, comm: "hog".into() }, 50_000_000);
    ingest.age = Some(AgeSummary {
        samples: 3,
        first_s: 0.1,
        last_s: 6.2,
        max_s: 6.2,
        mean_s: 3.1,
        median_s: 3.1,
        growth_s: 6.1,
        slope: 0.61,
        rising: true,
    });
    let mut processor =
        row(12, "processor", &[(State::Running, 9_000_000_000), (State::Throttled, 500_000_000), (State::Sleep, 500_000_000)]);
    let mut hold = crate::model::hist::HoldHist { count: 4, sum_ns: 80_000_000, ..Default::default() };
    hold.buckets[25] = 3;
    hold.buckets[27] = 1;
    processor.gil_hold = Some(hold);
    let mut waiter = row(13, "waiter", &[(State::FutexWait, 6 * S), (State::IoWait, 2 * S), (State::Other, S), (State::Running, S)]);
    waiter.futex.push(FutexWait { addr: 0x7f00_0010, waker: 12, ns: 5 * S });
    waiter.futex.push(FutexWait { addr: 0x7f00_0010, waker: 0, ns: S });
    waiter.exited = true;
    let python = PythonInfo {
        version: "3.11.7".into(),
        gil: "enabled",
        gil_probe: "uprobe",
        lock_probe: "none",
        free_threaded: false,
        binary: "/usr/lib/libpython3.11.so.1.0".into(),
        symbols: true,
        switch_interval_us: Some(5000),
        unmeasured_gil: vec![],
    };
    let rows = [waiter, processor, ingest].map(|t| ThreadRow { comm: "python3.11".into(), ..t });
    let mut r = ProcessReport::new(1234, "python3.11".into(), Some(python), 10 * S, None, rows.to_vec());
    r.cpu_limit_cores = 4.0;
    let cgroup = CgroupReport { throttled_s: 0.5, nr_throttled: 7, nr_periods: 100, ..cgroup(Some(2.5)) };
    let throttling = Throttling { stretches: 7, concentration: Some(0.9), signature: true, period_s: 0.1 };
    let summary = AgeSummary {
        samples: 10,
        first_s: 0.1,
        last_s: 6.2,
        max_s: 6.2,
        mean_s: 3.15,
        median_s: 3.15,
        growth_s: 6.1,
        slope: 0.61,
        rising: true,
    };
    let age = AgeReport { source: "endpoint", summary, p50_s: Some(3.0), p99_s: Some(6.0), skipped_lines: Some(0), failed_polls: Some(1) };
    r.with_cgroup(Some(cgroup), Some(throttling)).with_age(Some(age))
}

/// `WAITMETER_BLESS=1 cargo test`: rewrite the pinned report `name` in report/testdata with what
/// the code renders now (then review the diff and commit it).
pub fn bless(name: &str, text: &str) {
    if std::env::var_os("WAITMETER_BLESS").is_some() {
        let path = std::path::Path::new(&crate::manifest_dir()).join("src/report/testdata").join(name);
        std::fs::write(&path, text).expect("write the pinned report");
    }
}

/// A thread as a finding names it (`None`: not one of the report's).
pub fn thread(tid: u32, name: Option<&str>) -> ThreadRef {
    ThreadRef { tid, name: name.map(Into::into), folded: 0 }
}

pub fn named(tid: u32, name: &str) -> ThreadRef {
    ThreadRef { tid, name: Some(name.into()), folded: 0 }
}

pub fn time(tid: u32, name: &str, state: State, ns: u64, total_ns: u64) -> ThreadTime {
    ThreadTime { thread: named(tid, name), state, ns, total_ns }
}

/// Behind thread `tid` named `name` for `share` of a wait.
pub fn behind(tid: u32, name: &str, share: f64) -> Option<Behind> {
    Some(Behind { culprit: Culprit::Thread(named(tid, name)), share })
}

/// The age facts of the fixture `age(from, to, rising)` under the default (spread) objective.
pub fn facts(from: f64, to: f64, rising: bool) -> AgeFacts {
    let mid = (from + to) / 2.0;
    AgeFacts {
        growth_s: to - from,
        last_s: to,
        max_s: to.max(from),
        mean_s: mid,
        slope: (to - from) / 10.0,
        rising,
        objective_s: SPREAD_FACTOR * mid + SPREAD_SLACK_S,
        objective: "spread",
        over_objective: to.max(from) > SPREAD_FACTOR * mid + SPREAD_SLACK_S,
    }
}

/// The findings of `rows` over a window, with an age going `(from, to, rising)`.
pub fn findings_of(rows: Vec<ThreadRow>, window_ns: u64, limit: f64, ages: Option<(f64, f64, bool)>) -> Vec<Finding> {
    let mut r = ProcessReport::new(1, "svc".into(), None, window_ns, None, rows);
    r.cpu_limit_cores = limit;
    findings(&r.with_age(ages.map(|(from, to, rising)| age(from, to, rising))))
}

/// Every finding of `rows`, as the JSON `findings` lists them.
pub fn every_finding_of(rows: Vec<ThreadRow>, window_ns: u64) -> Vec<Finding> {
    let mut r = ProcessReport::new(1, "svc".into(), None, window_ns, None, rows);
    r.cpu_limit_cores = 4.0;
    all_findings(&r)
}

/// `f` is `kind`, explains `explains_ns` and reads `text`.
pub fn check(f: &Finding, kind: impl Claim, explains_ns: u64, text: &str) {
    assert_eq!(*f, Finding { claim: Box::new(kind), explains_ns, code: None, age: None, culprits_off_cpu: vec![] });
    assert_eq!(f.to_string(), text);
}

/// The JSON `kind` of each finding, in order.
pub fn kinds(f: &[Finding]) -> Vec<String> {
    f.iter().map(|f| serde_json::to_value(f).unwrap()["kind"].as_str().unwrap().to_string()).collect()
}
