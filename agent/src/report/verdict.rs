//! Findings in plain words from a window's rows. Pure rules, unit-tested.
//! (The joined-age verdict engine builds on these.)
use super::ThreadRow;
use crate::model::partition::secs;
use crate::model::state::State;

/// A thread is reported when this share of its time was involuntary waiting.
pub const WAITING_SHARE: f64 = 0.20;
/// ... or this share was blocked on one kind of resource.
pub const BLOCKED_SHARE: f64 = 0.50;

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
    let total: u64 = r.gil_by_holder.values().sum();
    let Some((tid, ns)) = r.gil_by_holder.iter().filter(|(t, _)| **t != 0).max_by_key(|(_, ns)| **ns) else {
        return String::new();
    };
    if total == 0 {
        return String::new();
    }
    let name = rows.iter().find(|x| x.tid == *tid).map(|x| x.name.as_str()).unwrap_or("a thread");
    format!(", {:.0}% of it behind {name} ({tid})", 100.0 * *ns as f64 / total as f64)
}

pub fn findings(rows: &[ThreadRow], window_s: f64) -> Vec<String> {
    let mut out = vec![];
    for r in rows {
        let total = r.times.total();
        if total == 0 {
            continue;
        }
        let share = |s: State| r.times.get(s) as f64 / total as f64;
        // involuntary waits first: those are what no work meter sees
        let worst_wait = State::ALL.into_iter().filter(|s| s.is_waiting()).max_by_key(|s| r.times.get(*s));
        if let Some(s) = worst_wait {
            if r.times.waiting() as f64 / total as f64 >= WAITING_SHARE && r.times.get(s) > 0 {
                let behind = if s == State::GilWait { gil_culprit(r, rows) } else { String::new() };
                out.push(format!(
                    "thread {} ({}) spent {:.1} s of {:.1} s {} ({:.0}%){behind}, wait ratio {:.2}: it had work and could not do it",
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
            out.push(format!(
                "thread {} ({}) spent {:.1} s of {:.1} s {} ({:.0}%): idle or contended; see who wakes it",
                r.name,
                r.tid,
                secs(r.times.get(s)),
                secs(total),
                what(s),
                100.0 * share(s)
            ));
        }
    }
    if out.is_empty() && !rows.is_empty() {
        out.push(format!(
            "no thread waited for a CPU, quota or the GIL for {:.0}% or more of its time in {:.1} s",
            100.0 * WAITING_SHARE,
            window_s
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::partition::Times;

    fn row(tid: u32, name: &str, pairs: &[(State, u64)]) -> ThreadRow {
        let mut t = Times::default();
        for (s, ns) in pairs {
            t.0[s.index()] = *ns;
        }
        ThreadRow { tid, name: name.into(), comm: name.into(), times: t, existed_ns: t.total(), exited: false, gil_by_holder: Default::default(), gil_hold: None }
    }

    #[test]
    fn run_queue_victim_is_named() {
        let rows = [row(11, "spin-a", &[(State::Running, 5_000_000_000), (State::Runqueue, 5_000_000_000)])];
        let f = findings(&rows, 10.0);
        assert_eq!(f.len(), 1);
        assert!(f[0].contains("spin-a (11) spent 5.0 s of 10.0 s waiting for a CPU (run queue) (50%)"), "{}", f[0]);
        assert!(f[0].contains("wait ratio 0.50"));
    }

    #[test]
    fn gil_victim_names_the_holder() {
        let mut victim = row(11, "ingest", &[(State::GilWait, 9_000_000_000), (State::Running, 1_000_000_000)]);
        victim.gil_by_holder.insert(12, 8_100_000_000);
        victim.gil_by_holder.insert(0, 900_000_000);
        let rows = [victim, row(12, "processor", &[(State::Running, 10_000_000_000)])];
        let f = findings(&rows, 10.0);
        assert!(f[0].contains("ingest (11) spent 9.0 s of 10.0 s waiting for the Python GIL (90%), 90% of it behind processor (12)"), "{}", f[0]);
    }

    #[test]
    fn lock_waiter_is_reported_as_blocked_not_waiting() {
        let rows = [row(12, "locker", &[(State::FutexWait, 9_500_000_000), (State::Running, 500_000_000)])];
        let f = findings(&rows, 10.0);
        assert!(f[0].contains("blocked on a lock or condition (futex) (95%)"), "{}", f[0]);
    }

    #[test]
    fn healthy_process_gets_one_all_clear() {
        let rows = [
            row(1, "main", &[(State::Sleep, 10_000_000_000)]),
            row(2, "busy", &[(State::Running, 9_900_000_000), (State::Runqueue, 100_000_000)]),
        ];
        let f = findings(&rows, 10.0);
        assert_eq!(f.len(), 1);
        assert!(f[0].starts_with("no thread waited"), "{}", f[0]);
        assert!(findings(&[], 1.0).is_empty());
    }
}
