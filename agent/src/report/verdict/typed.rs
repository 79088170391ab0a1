//! The findings together: their ranking, the cap, the culprits beside them.
use super::*;
use crate::report::fixtures::*;
use crate::report::rules::age_rising::AgeRisingCpuIdle;
use crate::report::rules::gil_wait::GilWait;
use crate::report::rules::run_queue::RunQueueSaturation;

#[test]
fn a_throttled_releaser_or_gil_holder_is_named_in_the_finding() {
    // a convoy whose releasers w2 and w3 were throttled 30% and 10% of their time
    let rows: Vec<ThreadRow> = (1..=3)
        .map(|i| {
            let throttled = [0, 3 * S / 2, S / 2][i as usize - 1];
            let mut r =
                row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, 2 * S - throttled), (State::Throttled, throttled)]);
            r.futex.push(FutexWait { addr: 0xabc, waker: if i == 3 { 2 } else { i + 1 }, ns: 3 * S });
            r
        })
        .collect();
    let f = every_finding_of(rows, 5 * S);
    assert_eq!(kinds(&f)[0], "lock_convoy");
    // w2 only: w3's 10% is below OFF_CPU_SHARE
    assert_eq!(
        f[0].culprits_off_cpu,
        [OffCpu { thread: named(2, "w2"), throttled_ns: 3 * S / 2, runqueue_ns: 0, share: 0.3 }],
        "{:?}",
        f[0]
    );
    assert!(
        f[0].to_string().ends_with("they take turns on one lock. Kept off the CPU itself: w2 (2) 30% of its time (throttled 1.50 s): a holder that cannot run keeps every thread behind it waiting"),
        "{}",
        f[0]
    );
    // the GIL holder throttled and queued
    let mut rows = starving();
    rows[1].times = row(12, "processor", &[(State::Running, 6 * S), (State::Throttled, 3 * S), (State::Runqueue, S)]).times;
    let f = every_finding_of(rows, 10 * S);
    let gil = f.iter().find(|f| matches!(f.claim.get::<GilWait>(), Some(GilWait { .. }))).unwrap();
    assert_eq!(gil.culprits_off_cpu.len(), 1);
    assert!(
        gil.to_string().contains("Kept off the CPU itself: processor (12) 40% of its time (throttled 3.00 s, queued for a CPU 1.00 s)"),
        "{gil}"
    );
    // the control: a holder that ran all the time
    let f = every_finding_of(starving(), 10 * S);
    assert!(f.iter().all(|f| f.culprits_off_cpu.is_empty()), "{f:?}");
}

#[test]
fn ranking_puts_the_binding_limit_first() {
    // by the wall time explained; a headline before a per-thread line that explains as much
    let mut rows = starving();
    rows.extend((1..=3).map(|i| {
        let mut r = row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, S), (State::Throttled, S)]);
        r.futex.push(FutexWait { addr: 0xabc, waker: if i == 3 { 1 } else { i + 1 }, ns: 3 * S });
        r
    }));
    let mut r = ProcessReport::new(1, "svc".into(), None, 5 * S, None, rows);
    r.cpu_limit_cores = 4.0;
    let r = r.with_cgroup(Some(cgroup(Some(3.0))), None).with_age(Some(age(0.1, 6.2, true)));
    // the lines the headlines say already after them
    let every = ["gil_starvation", "lock_convoy", "cpu_quota_throttling", "gil_wait", "cpu_quota", "cpu_quota", "cpu_quota"];
    assert_eq!(kinds(&all_findings(&r)), every);
    // as shown: no line that repeats a headline (the starving thread's GIL wait, the
    // throttled cgroup's threads, the convoy's waiters)
    assert_eq!(kinds(&findings(&r)), ["gil_starvation", "lock_convoy", "cpu_quota_throttling"]);
    // the age is quoted beside every finding: in the headline's own words, else after it
    let shown = findings(&r);
    assert!(shown.iter().all(|f| f.to_string().contains("message age grew 6.1 s (to 6.2 s; mean 3.15 s, max 6.20 s)")), "{shown:?}");
    // a convoy explains more than the idle-CPU finding that points at one wait of it
    let mut rows: Vec<ThreadRow> = (1..=3)
        .map(|i| {
            let mut r = row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, S)]);
            r.futex.push(FutexWait { addr: 0xabc, waker: if i == 3 { 1 } else { i + 1 }, ns: 3 * S });
            r
        })
        .collect();
    rows.push(row(4, "worker", &[(State::IoWait, 4 * S)]));
    let f = findings_of(rows, 4 * S, 4.0, Some((1.0, 9.0, true)));
    assert_eq!(kinds(&f), ["lock_convoy", "age_rising_cpu_idle", "idle_threads"]);
    // the longest wait is not the idle worker's
    assert!(
        matches!(f[1].claim.get::<AgeRisingCpuIdle>(), Some(AgeRisingCpuIdle { longest_wait: Some(w), .. }) if w.thread.tid != 4),
        "{:?}",
        f[1]
    );
    // "healthy" leads the blocked threads it comes with
    let f = findings_of(vec![row(1, "reader", &[(State::IoWait, 9 * S), (State::Running, S)])], 10 * S, 4.0, None);
    assert_eq!(kinds(&f), ["healthy", "blocked"]);
}

#[test]
fn the_verdict_is_capped_at_eight_lines_unless_all_are_asked_for() {
    // twelve threads, each waiting for a CPU a different share of its time
    let rows: Vec<ThreadRow> = (1..=12)
        .map(|i| {
            row(i, &format!("w{i}"), &[(State::Runqueue, (10 + i as u64) * S / 4), (State::Running, 10 * S - (10 + i as u64) * S / 4)])
        })
        .collect();
    let r = ProcessReport::new(1, "svc".into(), None, 10 * S, None, rows).with_verdict(crate::report::VerdictOptions::default());
    let mut r = r;
    r.cpu_limit_cores = 1.0;
    let shown = findings(&r);
    assert_eq!(shown.len(), MAX_LINES, "{shown:?}");
    assert_eq!(shown[7].to_string(), "… and 5 more findings; -v lists them");
    // the most time explained first
    assert!(
        matches!(shown[0].claim.get::<RunQueueSaturation>(), Some(RunQueueSaturation { victim, .. }) if victim.thread.tid == 12),
        "{:?}",
        shown[0]
    );
    let all = findings(&r.with_verdict(crate::report::VerdictOptions { all: true, age_slo_s: None }));
    assert_eq!(all.len(), 12);
}
