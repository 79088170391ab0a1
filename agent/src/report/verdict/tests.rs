//! The verdict's lines of hand-built windows: the victims named, their culprits, the all-clear.
use super::*;
use crate::model::blame::Preemptor;
use crate::report::evidence::Culprit;
use crate::report::fixtures::{age, all_findings, cgroup, lines, row, starving};
use crate::report::Throttling;

fn findings_of(rows: Vec<ThreadRow>, window_ns: u64) -> Vec<String> {
    lines(&ProcessReport::new(1, "p".into(), None, window_ns, None, rows))
}

#[test]
fn run_queue_victim_is_named() {
    let rows = [row(11, "spin-a", &[(State::Running, 5_000_000_000), (State::Runqueue, 5_000_000_000)])];
    let f = findings_of(rows.to_vec(), 10_000_000_000);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].starts_with("run-queue saturation: thread spin-a (11) spent 5.0 s of 10.0 s waiting for a CPU (run queue) (50%)"),
        "{}",
        f[0]
    );
    assert!(f[0].contains("wait ratio 0.50"));
}

#[test]
fn wakers_beyond_the_kept_ones_read_as_exited_threads() {
    let r = thread_ref(crate::model::blame::GONE, &[]);
    assert_eq!(r.name.as_deref(), Some("exited threads"));
    assert_eq!(Culprit::Thread(r).short(), "exited threads");
}

#[test]
fn run_queue_names_the_preemptor_and_futex_names_the_waker() {
    let mut a = row(11, "spin-a", &[(State::Running, 5_000_000_000), (State::Runqueue, 5_000_000_000)]);
    a.runqueue_by.insert(Preemptor::Process { pid: 99, comm: "hog".into() }, 4_800_000_000);
    a.runqueue_by.insert(Preemptor::Idle, 200_000_000);
    let mut w = row(12, "waiter", &[(State::FutexWait, 9_000_000_000), (State::Running, 1_000_000_000)]);
    w.futex.push(crate::model::blame::FutexWait { addr: 0x10, waker: 13, ns: 8_000_000_000 });
    w.futex.push(crate::model::blame::FutexWait { addr: 0x10, waker: 0, ns: 1_000_000_000 });
    let f = findings_of(vec![a, w, row(13, "holder", &[(State::Sleep, 10_000_000_000)])], 10_000_000_000);
    assert!(f.iter().any(|l| l.contains("spin-a (11)") && l.contains("mostly behind pid 99 (hog) (96%)")), "{f:?}");
    assert!(f.iter().any(|l| l.contains("waiter (12)") && l.contains("woken by holder (13) 89% of the time")), "{f:?}");
}

#[test]
fn convoy_and_throttling_are_reported() {
    let rows: Vec<ThreadRow> = (1..=4)
        .map(|i| {
            let mut r = row(
                i,
                &format!("w{i}"),
                &[(State::FutexWait, 3_000_000_000), (State::Running, 1_000_000_000), (State::Throttled, 500_000_000)],
            );
            r.futex.push(crate::model::blame::FutexWait { addr: 0xabc, waker: if i == 4 { 1 } else { i + 1 }, ns: 3_000_000_000 });
            r
        })
        .collect();
    let cg = cgroup(Some(0.2));
    let th = Throttling { stretches: 40, concentration: Some(0.97), signature: true, period_s: 0.1 };
    let r = ProcessReport::new(1, "p".into(), None, 4_500_000_000, None, rows).with_cgroup(Some(cg), Some(th));
    // the convoy explains more wall time than the throttling
    assert!(lines(&r)[0].starts_with("lock convoy on futex 0xabc: 4 threads waited 12.0 s in total"), "{:?}", lines(&r));
    assert!(
        lines(&r)[1].starts_with(
            "CPU quota throttling: the cgroup /svc (quota 0.20 cores) was throttled in 40 periods, 2.00 s; its threads lost 2.00 s"
        ),
        "{:?}",
        lines(&r)
    );
    assert!(lines(&r)[1].contains("40 throttled stretches ended on the 100 ms CFS period boundary"), "{:?}", lines(&r));
}

#[test]
fn gil_victim_names_the_holder() {
    let mut victim = row(11, "ingest", &[(State::GilWait, 9_000_000_000), (State::Running, 1_000_000_000)]);
    victim.gil_by_holder.insert(12, 8_100_000_000);
    victim.gil_by_holder.insert(0, 900_000_000);
    let rows = [victim, row(12, "processor", &[(State::Running, 10_000_000_000)])];
    // no age source: starvation, said as likely; its own GIL-wait line among all findings
    let f = findings_of(rows.to_vec(), 10_000_000_000);
    assert!(
        f[0].starts_with(
            "GIL starvation (likely: no age source): thread ingest (11) lost 9.0 s of 10.0 s waiting for the GIL held by processor (12)"
        ),
        "{}",
        f[0]
    );
    let mut r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, rows.to_vec());
    r.cpu_limit_cores = 4.0;
    let all: Vec<String> = all_findings(&r).iter().map(ToString::to_string).collect();
    assert!(
        all.iter()
            .any(|l| l.contains("ingest (11) spent 9.0 s of 10.0 s waiting for the Python GIL (90%), 90% of it behind processor (12)")),
        "{all:?}"
    );
}

#[test]
fn lock_waiter_is_reported_as_blocked_not_waiting() {
    let rows = [row(12, "locker", &[(State::FutexWait, 9_500_000_000), (State::Running, 500_000_000)])];
    let f = findings_of(rows.to_vec(), 10_000_000_000);
    assert!(f[0].starts_with("healthy: "), "{f:?}"); // blocked is not waiting: maybe idle
    assert!(f[1].starts_with("idle: 1 thread (locker)"), "{f:?}"); // it hardly ran, nobody waited on it
                                                                   // one that ran 15% of its time is listed
    let rows = [row(12, "locker", &[(State::FutexWait, 8_500_000_000), (State::Running, 1_500_000_000)])];
    let f = findings_of(rows.to_vec(), 10_000_000_000);
    assert!(f[1].contains("blocked on a lock or condition (futex) (85%)"), "{f:?}");
}

#[test]
fn gil_starvation_needs_rising_age() {
    let r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, starving()).with_age(Some(age(0.1, 6.2, true)));
    let f = &lines(&r)[0];
    assert!(f.starts_with("GIL starvation: thread ingest (11) lost 9.4 s of 10.0 s waiting for the GIL held by processor (12), 1% behind a holder not resolved (hand-offs too fast to follow); message age grew 6.1 s (to 6.2 s; mean 3.15 s, max 6.20 s); CPU 1.1 of"), "{f}");
    assert!(f.ends_with("this is waiting, not working. Move processor to its own process"), "{f}");
    // the same waits with a flat age: a GIL-wait finding, not starvation, and not healthy
    let flat = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, starving()).with_age(Some(age(0.1, 0.1, false)));
    assert!(lines(&flat).iter().all(|l| !l.starts_with("GIL starvation") && !l.starts_with("healthy")), "{:?}", lines(&flat));
    assert!(lines(&flat).iter().any(|l| l.starts_with("GIL wait: thread ingest")), "{:?}", lines(&flat));
}

#[test]
fn age_rising_while_the_cpu_is_idle() {
    let rows = vec![row(1, "worker", &[(State::IoWait, 9_000_000_000), (State::Running, 1_000_000_000)])];
    let mut r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, rows);
    r.cpu_limit_cores = 4.0;
    let r = r.with_age(Some(age(1.0, 9.0, true)));
    assert!(
        lines(&r)[0].starts_with(
            "age rising while the CPU is idle: message age grew 8.0 s (to 9.0 s; mean 5.00 s, max 9.00 s) in 10.0 s; CPU 0.1 of 4 cores"
        ),
        "{:?}",
        lines(&r)
    );
    assert!(lines(&r)[0].contains("the longest wait: thread worker (1), 9.0 s blocked on I/O"), "{:?}", lines(&r));
}

#[test]
fn healthy_with_flat_age_and_no_false_alarm() {
    let rows = vec![row(1, "ingest", &[(State::IoWait, 9_000_000_000), (State::Running, 900_000_000), (State::GilWait, 100_000_000)])];
    let r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, rows).with_age(Some(age(0.01, 0.012, false)));
    assert!(
        lines(&r)[0].starts_with("healthy: age flat at 0.01 s (mean 0.01 s, max 0.01 s, objective 0.12 s); no thread waited"),
        "{:?}",
        lines(&r)
    );
    assert!(lines(&r)[1..].iter().all(|l| !l.contains("GIL")), "{:?}", lines(&r));
}

#[test]
fn healthy_process_gets_one_all_clear() {
    let rows = [
        row(1, "main", &[(State::Sleep, 10_000_000_000)]),
        row(2, "worker", &[(State::Running, 5_000_000_000), (State::Runqueue, 100_000_000), (State::Sleep, 4_900_000_000)]),
    ];
    let f = findings_of(rows.to_vec(), 10_000_000_000);
    assert_eq!(f.len(), 1);
    assert!(f[0].starts_with("healthy: no age source; no thread waited"), "{}", f[0]);
    assert!(findings_of(vec![], 1_000_000_000).is_empty());
    // a helper thread that lived 5 ms, half of it queued, is no finding
    let rows = vec![
        row(1, "main", &[(State::Sleep, 10_000_000_000)]),
        row(3, "helper", &[(State::Running, 2_500_000), (State::Runqueue, 2_500_000)]),
    ];
    let f = findings_of(rows, 10_000_000_000);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].starts_with("healthy:"));
}
