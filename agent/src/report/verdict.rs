//! Findings in plain words from a window's rows. Pure rules, unit-tested.
//! (The joined-age verdict engine builds on these.)
use super::{ProcessReport, ThreadRow};
use crate::model::blame::{Preemptor, CONVOY_SHARE, CONVOY_WAITERS};
use crate::model::partition::secs;
use crate::model::state::State;

/// A thread is reported when this share of its time was involuntary waiting.
pub const WAITING_SHARE: f64 = 0.20;
/// ... or this share was blocked on one kind of resource.
pub const BLOCKED_SHARE: f64 = 0.50;
/// ... and only threads that existed for at least this share of the window
/// (short-lived helpers' few milliseconds are noise, not findings).
pub const MIN_PRESENCE: f64 = 0.10;

fn present(r: &ThreadRow, window_ns: u64) -> bool {
    r.times.total() as f64 >= MIN_PRESENCE * window_ns as f64
}

fn what(state: State) -> &'static str {
    match state {
        State::Runqueue => "waiting for a CPU (run queue)",
        State::Throttled => "throttled by its cgroup's CPU quota",
        State::GilWait => "waiting for the Python GIL",
        State::FutexWait => "blocked on a lock or condition (futex)",
        State::IoWait => "blocked on I/O",
        State::Sleep => "asleep",
        State::Other => "blocked (other)",
        State::Running => "running",
    }
}

/// ", 97% of it behind processor (4243)": the thread that held the GIL longest meanwhile.
fn gil_culprit(r: &ThreadRow, rows: &[ThreadRow]) -> String {
    let Some((tid, share)) = r.top_gil_holder() else { return String::new() };
    let name = rows.iter().find(|x| x.tid == tid).map(|x| x.name.as_str()).unwrap_or("a thread");
    format!(", {:.0}% of it behind {name} ({tid})", 100.0 * share)
}

/// ", mostly behind spin-b (4243) (97%)": what had the CPU while the thread waited.
fn runqueue_culprit(r: &ThreadRow, rows: &[ThreadRow]) -> String {
    let Some((who, share)) = r.top_preemptor() else { return String::new() };
    let name = match who {
        Preemptor::Thread(tid) => format!("{} ({tid})", rows.iter().find(|x| x.tid == *tid).map(|x| x.name.as_str()).unwrap_or("a thread")),
        other => other.key(),
    };
    format!(", mostly behind {name} ({:.0}%)", 100.0 * share)
}

/// GIL starvation needs the victim's GIL wait to be at least this share of its time.
pub const GIL_STARVATION_SHARE: f64 = 0.5;
/// "The CPU is idle": the process used less than this share of the CPUs it may use.
pub const IDLE_CPU_SHARE: f64 = 0.5;

fn age_growth(report: &ProcessReport) -> String {
    match &report.age {
        Some(a) => format!("; message age grew {:.1} s (to {:.1} s)", a.summary.growth_s, a.summary.last_s),
        None => String::new(),
    }
}

fn age_rising(report: &ProcessReport) -> bool {
    report.age.as_ref().is_some_and(|a| a.summary.rising) || report.threads.iter().any(|t| t.age.as_ref().is_some_and(|a| a.rising))
}

fn cpu_use(report: &ProcessReport) -> String {
    format!("CPU {:.1} of {} cores", report.cpu_used_cores(), fmt_cores(report.cpu_limit_cores))
}

fn fmt_cores(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{c:.0}")
    } else {
        format!("{c:.2}")
    }
}

/// The findings, most important first. Each names the kind of problem first
/// ("GIL starvation:", "CPU quota throttling:", "run-queue saturation:",
/// "lock convoy", "age rising while the CPU is idle:", "healthy:").
pub fn findings(report: &ProcessReport) -> Vec<String> {
    let rows = &report.threads;
    let window_s = report.window_s();
    let rising = age_rising(report);
    let mut out = vec![];
    let mut explained = false;

    // GIL starvation: a thread kept from the GIL behind another, while age rises
    // the thread that lost the most time to the GIL, if that was most of its time
    let victim = rows.iter().filter(|r| share_of(r, State::GilWait) >= GIL_STARVATION_SHARE).max_by_key(|r| r.times.get(State::GilWait));
    if let (Some(v), true) = (victim, rising) {
        let culprit = v.top_gil_holder().and_then(|(tid, _)| rows.iter().find(|x| x.tid == tid));
        let behind = culprit.map(|c| format!(" held by {} ({})", c.name, c.tid)).unwrap_or_default();
        let fix = culprit
            .map(|c| format!(" Move {} to its own process", c.name))
            .unwrap_or_else(|| " Move the GIL-heavy work to its own process".into());
        out.push(format!(
            "GIL starvation: thread {} ({}) lost {:.1} s of {:.1} s waiting for the GIL{behind}{}; {}: this is waiting, not working.{fix}",
            v.name,
            v.tid,
            secs(v.times.get(State::GilWait)),
            secs(v.times.total()),
            age_growth(report),
            cpu_use(report),
        ));
        explained = true;
    }
    let throttled = throttling(report);
    explained |= !throttled.is_empty();
    out.extend(throttled);
    out.extend(convoys(report));

    for r in rows {
        let total = r.times.total();
        if total == 0 || !present(r, report.duration_ns) {
            continue;
        }
        let share = |s: State| r.times.get(s) as f64 / total as f64;
        // involuntary waits first: those are what no work meter sees
        let worst_wait = State::ALL.into_iter().filter(|s| s.is_waiting()).max_by_key(|s| r.times.get(*s));
        if let Some(s) = worst_wait {
            if r.times.waiting() as f64 / total as f64 >= WAITING_SHARE && r.times.get(s) > 0 {
                let (kind, behind) = match s {
                    State::GilWait => ("GIL wait", gil_culprit(r, rows)),
                    State::Runqueue => ("run-queue saturation", runqueue_culprit(r, rows)),
                    _ => ("CPU quota", String::new()),
                };
                if s == State::Runqueue {
                    explained = true;
                }
                out.push(format!(
                    "{kind}: thread {} ({}) spent {:.1} s of {:.1} s {} ({:.0}%){behind}, wait ratio {:.2}: it had work and could not do it",
                    r.name,
                    r.tid,
                    secs(r.times.get(s)),
                    secs(total),
                    what(s),
                    100.0 * share(s),
                    r.times.wait_ratio().unwrap_or(0.0),
                ));
                continue;
            }
        }
        if let Some(s) = [State::FutexWait, State::IoWait].into_iter().find(|s| share(*s) >= BLOCKED_SHARE) {
            let wakers = if s == State::FutexWait { futex_wakers(r, rows) } else { String::new() };
            out.push(format!(
                "thread {} ({}) spent {:.1} s of {:.1} s {} ({:.0}%){wakers}: idle or contended",
                r.name,
                r.tid,
                secs(r.times.get(s)),
                secs(total),
                what(s),
                100.0 * share(s)
            ));
        }
    }

    let idle_cpu = report.cpu_used_cores() < IDLE_CPU_SHARE * report.cpu_limit_cores;
    if rising && !explained && idle_cpu {
        let worst = rows
            .iter()
            .filter(|r| r.times.total() > 0)
            .flat_map(|r| [State::GilWait, State::FutexWait, State::IoWait, State::Other].into_iter().map(move |s| (r, s)))
            .max_by_key(|(r, s)| r.times.get(*s));
        let hint = worst
            .map(|(r, s)| format!("; the longest wait: thread {} ({}), {:.1} s {}", r.name, r.tid, secs(r.times.get(s)), what(s)))
            .unwrap_or_default();
        out.push(format!(
            "age rising while the CPU is idle: {}{}; {}: the work is waiting for something other than the CPU{hint}",
            age_growth(report).trim_start_matches("; "),
            format_args!(" in {window_s:.1} s"),
            cpu_use(report),
        ));
    }
    // headlines first, then the per-thread lines (a stable sort keeps their order)
    out.sort_by_key(|l| rank(l));
    let waited = rows.iter().any(|r| present(r, report.duration_ns) && r.times.waiting() as f64 / r.times.total() as f64 >= WAITING_SHARE);
    let quiet = out.is_empty() || (!rising && !waited && out.iter().all(|l| l.starts_with("thread ")));
    if quiet && !rows.is_empty() {
        let age = match &report.age {
            Some(a) => format!("age flat at {:.2} s (max {:.2} s)", a.summary.last_s, a.summary.max_s),
            None => "no age source".to_string(),
        };
        out.insert(
            0,
            format!(
                "healthy: {age}; no thread waited for a CPU, quota or the GIL for {:.0}% or more of its time in {window_s:.1} s",
                100.0 * WAITING_SHARE
            ),
        );
    }
    out
}

fn rank(line: &str) -> u8 {
    const ORDER: [&str; 4] = ["GIL starvation", "CPU quota throttling", "age rising while the CPU is idle", "lock convoy"];
    ORDER.iter().position(|p| line.starts_with(p)).map_or(ORDER.len() as u8, |i| i as u8)
}

fn share_of(r: &ThreadRow, s: State) -> f64 {
    let t = r.times.total();
    if t == 0 {
        0.0
    } else {
        r.times.get(s) as f64 / t as f64
    }
}

fn name_of(tid: u32, rows: &[ThreadRow]) -> String {
    match rows.iter().find(|x| x.tid == tid) {
        Some(r) => format!("{} ({tid})", r.name),
        None => format!("thread {tid}"),
    }
}

/// ", woken by holder (12) 95% of the time": the thread whose unlock ended most waits.
fn futex_wakers(r: &ThreadRow, rows: &[ThreadRow]) -> String {
    match r.top_waker() {
        Some((0, share)) => format!(", {:.0}% of it ended by a timeout or signal, not a wake-up", 100.0 * share),
        Some((tid, share)) => format!(", woken by {} {:.0}% of the time", name_of(tid, rows), 100.0 * share),
        None => String::new(),
    }
}

/// Many threads queueing on one futex word.
fn convoys(report: &ProcessReport) -> Vec<String> {
    let window = report.duration_ns.max(1) as f64;
    report
        .top_futexes
        .iter()
        .filter(|f| f.waiters.len() >= CONVOY_WAITERS && f.wait_ns as f64 >= CONVOY_SHARE * window)
        .map(|f| {
            let wakers: Vec<String> = f.wakers.iter().take(4).map(|t| name_of(*t, &report.threads)).collect();
            format!(
                "lock convoy on futex {:#x}: {} threads waited {:.1} s in total in {:.1} s, woken by {}: they take turns on one lock",
                f.addr,
                f.waiters.len(),
                secs(f.wait_ns),
                report.window_s(),
                if wakers.is_empty() { "timeouts".to_string() } else { wakers.join(", ") }
            )
        })
        .collect()
}

/// Time lost to the cgroup's CPU quota, with the CFS-period signature.
fn throttling(report: &ProcessReport) -> Vec<String> {
    let throttled: u64 = report.threads.iter().map(|t| t.times.get(State::Throttled)).sum();
    let Some(cg) = &report.cgroup else { return vec![] };
    if throttled == 0 && cg.nr_throttled == 0 {
        return vec![];
    }
    let quota = match cg.quota_cores {
        Some(q) => format!("quota {q:.2} cores"),
        None => "no quota now".to_string(),
    };
    let mut line = format!(
        "CPU quota throttling: the cgroup {} ({quota}) was throttled in {} periods, {:.2} s; its threads lost {:.2} s runnable but throttled",
        cg.path,
        cg.nr_throttled,
        cg.throttled_s,
        secs(throttled)
    );
    if let Some(t) = report.throttling.as_ref().filter(|t| t.signature) {
        line.push_str(&format!(
            "; {} throttled stretches ended on the {:.0} ms CFS period boundary: waits cluster at multiples of the period",
            t.stretches,
            t.period_s * 1e3
        ));
    }
    line.push_str(&age_growth(report));
    line.push_str(": raise the quota or lower the parallelism");
    vec![line]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::age::AgeReport;
    use crate::model::partition::Times;
    use crate::report::{CgroupReport, Throttling};

    fn row(tid: u32, name: &str, pairs: &[(State, u64)]) -> ThreadRow {
        let mut t = Times::default();
        for (s, ns) in pairs {
            t.0[s.index()] = *ns;
        }
        ThreadRow { tid, name: name.into(), comm: name.into(), times: t, existed_ns: t.total(), ..Default::default() }
    }

    fn findings_of(rows: Vec<ThreadRow>, window_ns: u64) -> Vec<String> {
        ProcessReport::new(1, "p".into(), None, window_ns, None, rows).verdict
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
        let cg = CgroupReport {
            path: "/svc".into(),
            quota_cores: Some(0.2),
            period_s: Some(0.1),
            throttled_s: 2.0,
            nr_throttled: 40,
            nr_periods: 45,
        };
        let th = Throttling { stretches: 40, concentration: Some(0.97), signature: true, period_s: 0.1 };
        let r = ProcessReport::new(1, "p".into(), None, 4_500_000_000, None, rows).with_cgroup(Some(cg), Some(th));
        assert!(
            r.verdict[0].starts_with(
                "CPU quota throttling: the cgroup /svc (quota 0.20 cores) was throttled in 40 periods, 2.00 s; its threads lost 2.00 s"
            ),
            "{:?}",
            r.verdict
        );
        assert!(r.verdict[0].contains("40 throttled stretches ended on the 100 ms CFS period boundary"), "{:?}", r.verdict);
        assert!(r.verdict[1].starts_with("lock convoy on futex 0xabc: 4 threads waited 12.0 s in total"), "{:?}", r.verdict);
    }

    #[test]
    fn gil_victim_names_the_holder() {
        let mut victim = row(11, "ingest", &[(State::GilWait, 9_000_000_000), (State::Running, 1_000_000_000)]);
        victim.gil_by_holder.insert(12, 8_100_000_000);
        victim.gil_by_holder.insert(0, 900_000_000);
        let rows = [victim, row(12, "processor", &[(State::Running, 10_000_000_000)])];
        let f = findings_of(rows.to_vec(), 10_000_000_000);
        assert!(
            f[0].contains("ingest (11) spent 9.0 s of 10.0 s waiting for the Python GIL (90%), 90% of it behind processor (12)"),
            "{}",
            f[0]
        );
    }

    #[test]
    fn lock_waiter_is_reported_as_blocked_not_waiting() {
        let rows = [row(12, "locker", &[(State::FutexWait, 9_500_000_000), (State::Running, 500_000_000)])];
        let f = findings_of(rows.to_vec(), 10_000_000_000);
        assert!(f[0].starts_with("healthy: "), "{f:?}"); // blocked is not waiting: maybe idle
        assert!(f[1].contains("blocked on a lock or condition (futex) (95%)"), "{f:?}");
    }

    fn age(first: f64, last: f64, rising: bool) -> AgeReport {
        let summary = crate::model::age::AgeSummary {
            samples: 10,
            first_s: first,
            last_s: last,
            max_s: last.max(first),
            mean_s: (first + last) / 2.0,
            growth_s: last - first,
            slope: (last - first) / 10.0,
            rising,
        };
        AgeReport { source: "endpoint", summary, p50_s: None, p99_s: None, skipped_lines: None, failed_polls: None }
    }

    fn starving() -> Vec<ThreadRow> {
        let mut victim = row(11, "ingest", &[(State::GilWait, 9_400_000_000), (State::Running, 600_000_000)]);
        victim.gil_by_holder.insert(12, 9_300_000_000);
        vec![victim, row(12, "processor", &[(State::Running, 9_900_000_000), (State::GilWait, 100_000_000)])]
    }

    #[test]
    fn gil_starvation_needs_rising_age() {
        let r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, starving()).with_age(Some(age(0.1, 6.2, true)));
        let f = &r.verdict[0];
        assert!(f.starts_with("GIL starvation: thread ingest (11) lost 9.4 s of 10.0 s waiting for the GIL held by processor (12); message age grew 6.1 s (to 6.2 s); CPU 1.1 of"), "{f}");
        assert!(f.ends_with("this is waiting, not working. Move processor to its own process"), "{f}");
        // the same waits with a flat age: a GIL-wait finding, not starvation, and not healthy
        let flat = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, starving()).with_age(Some(age(0.1, 0.1, false)));
        assert!(flat.verdict.iter().all(|l| !l.starts_with("GIL starvation") && !l.starts_with("healthy")), "{:?}", flat.verdict);
        assert!(flat.verdict.iter().any(|l| l.starts_with("GIL wait: thread ingest")), "{:?}", flat.verdict);
    }

    #[test]
    fn age_rising_while_the_cpu_is_idle() {
        let rows = vec![row(1, "worker", &[(State::IoWait, 9_000_000_000), (State::Running, 1_000_000_000)])];
        let mut r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, rows);
        r.cpu_limit_cores = 4.0;
        let r = r.with_age(Some(age(1.0, 9.0, true)));
        assert!(
            r.verdict[0].starts_with("age rising while the CPU is idle: message age grew 8.0 s (to 9.0 s) in 10.0 s; CPU 0.1 of 4 cores"),
            "{:?}",
            r.verdict
        );
        assert!(r.verdict[0].contains("the longest wait: thread worker (1), 9.0 s blocked on I/O"), "{:?}", r.verdict);
    }

    #[test]
    fn healthy_with_flat_age_and_no_false_alarm() {
        let rows = vec![row(1, "ingest", &[(State::IoWait, 9_000_000_000), (State::Running, 900_000_000), (State::GilWait, 100_000_000)])];
        let r = ProcessReport::new(1, "svc".into(), None, 10_000_000_000, None, rows).with_age(Some(age(0.01, 0.012, false)));
        assert!(r.verdict[0].starts_with("healthy: age flat at 0.01 s (max 0.01 s); no thread waited"), "{:?}", r.verdict);
        assert!(r.verdict[1..].iter().all(|l| !l.contains("GIL")), "{:?}", r.verdict);
    }

    #[test]
    fn healthy_process_gets_one_all_clear() {
        let rows = [
            row(1, "main", &[(State::Sleep, 10_000_000_000)]),
            row(2, "busy", &[(State::Running, 9_900_000_000), (State::Runqueue, 100_000_000)]),
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
}
