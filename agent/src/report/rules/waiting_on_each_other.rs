//! "waiting on each other:": processes measured together (`attach --children`) spent their time
//! blocked until another of them woke them, whatever the wait (a lock's release across shared
//! memory, a latch set by a signal, a pipe or socket written, a futex): a database's backends
//! queued on one row's lock, workers taking turns on a shared-memory lock. No single process'
//! report can say it: each sees only that it slept, and who woke it (`family.rs`).
//!
//! Which of them waited on each other is `model::each_other`'s rule: woken by the others for a
//! share of their time, waking them in turn, by processes that wake one another (not waiting
//! for work: a database's WAL writer, a pool's collector; not a server and its clients).
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, human_rate, per_second};
use super::super::family::{Family, Member};
use super::super::serial::{ratio, seconds};
use super::{Claim, Context};
use crate::model::each_other;
use crate::model::partition::secs;
use crate::model::state::State;

/// The members and wakers a finding names.
const NAMED: usize = 6;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WaitingOnEachOther {
    /// how many processes took turns, and the first few, most waiting first
    pub count: usize,
    pub processes: Vec<Process>,
    /// their waits ended by another of them, summed, and its share of the time they were present
    #[serde(rename = "waited_s", serialize_with = "seconds")]
    pub waited_ns: u64,
    #[serde(serialize_with = "ratio")]
    pub share: f64,
    /// how many of those waits there were, each ended by one of them waking another (the rate
    /// the turns passed: a release that wakes every waiter, of whom one gets its turn, counts
    /// each), when the waits' stacks counted them
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wakeups: Option<u64>,
    /// the same a second of the window
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wakeups_per_s: Option<f64>,
    /// the blocked state most of those waits were in, and the code they waited in there (the
    /// site most of them name)
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_in: Option<String>,
    /// the code the wakers ran as they woke them (the site most of them name): what let go
    #[serde(skip_serializing_if = "Option::is_none")]
    pub woken_from: Option<String>,
    /// the members whose wakeups ended the most of those waits (who held, then let go), with
    /// their share of them
    pub wakers: Vec<Process>,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
}

/// A process as the finding names it, with its share: of its threads' time spent waiting (a
/// waiter), or of the others' waits it ended (a waker).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    #[serde(serialize_with = "ratio")]
    pub share: f64,
}

/// The finding of the report's family, when it was measured.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    cx.report.family.as_ref().and_then(of).map(|o| -> Box<dyn Claim> { Box::new(o) }).into_iter().collect()
}

/// The members that waited on each other (`model::each_other::waiting`), when three or more did.
pub fn of(family: &Family) -> Option<WaitingOnEachOther> {
    let by_pid = |pid: u32| family.members.iter().find(|m| m.pid == pid);
    let measured: Vec<each_other::Process> =
        family.members.iter().map(|m| each_other::Process { pid: m.pid, thread_ns: m.thread_ns, woken_by: m.woken_by.clone() }).collect();
    let set = each_other::waiting(&measured);
    if set.is_empty() {
        return None;
    }
    let mut waiting: Vec<&Member> = set.iter().filter_map(|p| by_pid(*p)).collect();
    let waited: u64 = waiting.iter().map(|m| m.woken_by_family_ns).sum();
    let present: u64 = waiting.iter().map(|m| m.thread_ns).sum();
    waiting.sort_by(|a, b| b.woken_by_family_ns.cmp(&a.woken_by_family_ns).then(a.pid.cmp(&b.pid)));
    let mut wakers: std::collections::BTreeMap<u32, u64> = Default::default();
    for m in &waiting {
        for (pid, ns) in &m.woken_by {
            *wakers.entry(*pid).or_default() += ns;
        }
    }
    let mut wakers: Vec<(u32, u64)> = wakers.into_iter().collect();
    wakers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mode = |f: &dyn Fn(&Member) -> Option<String>| {
        let mut n: std::collections::BTreeMap<String, u64> = Default::default();
        for m in &waiting {
            if let Some(k) = f(m) {
                *n.entry(k).or_default() += m.woken_by_family_ns;
            }
        }
        n.into_iter().max_by_key(|(k, ns)| (*ns, std::cmp::Reverse(k.clone()))).map(|(k, _)| k)
    };
    let state = mode(&|m| m.woken_state.map(|s| s.name().to_string()))
        .and_then(|name| State::ALL.into_iter().find(|s| s.name() == name))
        .unwrap_or(State::Other);
    let wakeups: Option<u64> = waiting.iter().map(|m| m.wakeups).sum();
    Some(WaitingOnEachOther {
        wakeups,
        wakeups_per_s: wakeups.and_then(|n| per_second(n, family.window_ns)),
        count: waiting.len(),
        processes: waiting
            .iter()
            .take(NAMED)
            .map(|m| Process { pid: m.pid, comm: m.comm.clone(), share: m.woken_by_family_ns as f64 / m.thread_ns.max(1) as f64 })
            .collect(),
        waited_ns: waited,
        share: waited as f64 / present.max(1) as f64,
        state,
        waited_in: mode(&|m| m.waited_in.clone()),
        woken_from: mode(&|m| m.woken_from.clone()),
        wakers: wakers
            .iter()
            .take(3)
            .filter_map(|(pid, ns)| Some(Process { pid: *pid, comm: by_pid(*pid)?.comm.clone(), share: *ns as f64 / waited.max(1) as f64 }))
            .collect(),
        window_ns: family.window_ns,
    })
}

impl Claim for WaitingOnEachOther {
    fn kind(&self) -> &'static str {
        "waiting_on_each_other"
    }
    fn explains_ns(&self) -> u64 {
        self.waited_ns
    }
    fn precedence(&self) -> u8 {
        1
    }
    fn explains_age(&self) -> bool {
        true
    }
}

impl fmt::Display for WaitingOnEachOther {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let WaitingOnEachOther {
            count,
            processes,
            share,
            wakeups,
            wakeups_per_s,
            state,
            waited_in,
            woken_from,
            wakers,
            window_ns,
            waited_ns,
        } = self;
        let names = processes.iter().map(|p| format!("{} ({}) {:.0}%", p.comm, p.pid, 100.0 * p.share)).collect();
        let woke: Vec<String> = wakers.iter().map(|w| format!("{} ({}) {:.0}%", w.comm, w.pid, 100.0 * w.share)).collect();
        write!(
            f,
            "waiting on each other: {count} processes were blocked {:.0}% of their time in the {:.1} s until another of them woke them ({}, mostly): they take turns on something one holds while the others wait (a lock across processes: a database's row or table lock, a shared-memory lock, a hand-off through a pipe or a signal): {}. Woken mostly by {}",
            100.0 * share,
            secs(*window_ns),
            state.name(),
            and_more(names, *count),
            woke.join(", "),
        )?;
        if let (Some(n), Some(rate)) = (wakeups.filter(|n| *n > 0), wakeups_per_s) {
            write!(
                f,
                "; woken by one another {}/s, after a wait of {:.1} ms on average",
                human_rate(*rate),
                *waited_ns as f64 / n as f64 / 1e6
            )?;
        }
        if let Some(site) = waited_in {
            write!(f, ". They waited in `{site}`")?;
        }
        if let Some(site) = woken_from {
            write!(f, "; the wakers woke them from `{site}`")?;
        }
        write!(f, ". Find what they queue on where they wait (a database server's own view of its waits names the lock); hold it for less, or spread the work over more of it")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::blame;
    use crate::report::fixtures::{row, S};
    use crate::report::ProcessReport;
    use std::collections::BTreeMap;

    /// A process of one thread over a 10 s window, blocked in `state` for `woken` ns in all,
    /// woken by each of `by` in equal parts, asleep the rest of the time.
    fn process(pid: u32, state: State, woken: u64, by: &[u32]) -> ProcessReport {
        let mut t = row(pid, "postgres", &[(State::Running, S), (state, woken), (State::Sleep, 9 * S - woken)]);
        t.woken_by = by
            .iter()
            .map(|p| ((state, blame::Waker::Process { pid: *p, comm: "postgres".into() }), woken / by.len() as u64))
            .collect::<BTreeMap<_, _>>();
        ProcessReport::new(pid, "postgres".into(), None, 10 * S, None, vec![t])
    }

    fn family(root: ProcessReport, others: &[ProcessReport]) -> Family {
        Family::of(&root, &others.iter().collect::<Vec<_>>())
    }

    #[test]
    fn backends_that_wake_each_other_wait_on_each_other() {
        // four backends, each woken by the three others for 6 s of its 10; the postmaster idle
        let backends: Vec<ProcessReport> =
            (101..105).map(|p| process(p, State::IoWait, 6 * S, &(101..105).filter(|o| *o != p).collect::<Vec<_>>())).collect();
        let f = family(process(100, State::IoWait, 0, &[]), &backends);
        let w = of(&f).expect("found");
        assert_eq!((w.count, w.state), (4, State::IoWait));
        assert!((w.share - 0.6).abs() < 1e-9, "{}", w.share);
        assert_eq!(w.waited_ns, 24 * S);
        assert!(w.processes.iter().all(|p| (101..105).contains(&p.pid)) && w.wakers.iter().all(|p| (101..105).contains(&p.pid)));
        let line = w.to_string();
        assert!(line.starts_with("waiting on each other: 4 processes were blocked 60% of their time in the 10.0 s"), "{line}");
        // without the waits' stacks nothing counted the wakeups: no rate is made up
        assert_eq!((w.wakeups, w.wakeups_per_s), (None, None));
        assert!(!line.contains("woken by one another"), "{line}");
    }

    #[test]
    fn the_finding_names_where_they_waited_and_what_the_wakers_ran_across_processes() {
        use crate::model::stacks::{Frame, Key, Role, WaitStacks};
        let frames = |names: &[&str]| -> crate::model::stacks::Stack {
            names.iter().map(|n| Frame::native((*n).into(), "/usr/lib/postgresql/15/bin/postgres".into())).collect()
        };
        let lock = frames(&["WaitLatch", "ProcSleep", "LockAcquireExtended"]);
        let commit = frames(&["ProcLockWakeup", "LockReleaseAll", "CommitTransactionCommand"]);
        let stranger = frames(&["kill_from_outside"]);
        let mut backends: Vec<ProcessReport> =
            (101..105).map(|p| process(p, State::IoWait, 6 * S, &(101..105).filter(|o| *o != p).collect::<Vec<_>>())).collect();
        for r in &mut backends {
            let mut w = WaitStacks::default();
            let key = |blamed, role, stack: &crate::model::stacks::Stack| Key {
                victim: r.pid,
                blamed,
                state: State::IoWait,
                role,
                stack: stack.clone(),
            };
            // each woken 600 times by the others (its 6 s of waits: 10 ms each)
            let woke = if r.pid == 101 { 102 } else { 101 };
            w.add_waits(key(woke, Role::Victim, &lock), 6 * S, &crate::model::stacks::Lengths { waits: 600, ..Default::default() });
            // the wakers are other backends (by PID); a process outside the family is not one
            // of them, however much it woke
            w.add(key(if r.pid == 101 { 102 } else { 101 }, Role::Waker, &commit), 3 * S);
            w.add(key(999, Role::Waker, &stranger), 5 * S);
            r.stacks = Some(w);
        }
        let w = of(&family(process(100, State::IoWait, 0, &[]), &backends)).expect("found");
        assert_eq!(w.waited_in.as_deref(), Some("WaitLatch (postgres) ← ProcSleep ← LockAcquireExtended"));
        assert_eq!(w.woken_from.as_deref(), Some("ProcLockWakeup (postgres) ← LockReleaseAll ← CommitTransactionCommand"));
        assert_eq!((w.wakeups, w.wakeups_per_s), (Some(2400), Some(240.0)));
        let line = w.to_string();
        assert!(line.contains("; woken by one another 240/s, after a wait of 10.0 ms on average."), "{line}");
        assert!(
            line.contains(
                "They waited in `WaitLatch (postgres) ← ProcSleep ← LockAcquireExtended`; the wakers woke them from `ProcLockWakeup"
            ),
            "{line}"
        );
    }

    #[test]
    fn backends_asked_for_by_pid_wait_on_each_other_the_first_among_them() {
        // `attach -p` of the four backends: no postmaster, the first report is a backend's
        let backends: Vec<ProcessReport> =
            (101..105).map(|p| process(p, State::IoWait, 6 * S, &(101..105).filter(|o| *o != p).collect::<Vec<_>>())).collect();
        let w = of(&Family::asked(&backends[0], &backends[1..].iter().collect::<Vec<_>>())).expect("found");
        assert_eq!(w.count, 4);
        assert!(w.processes.iter().any(|p| p.pid == 101), "{:?}", w.processes);
    }

    #[test]
    fn a_writer_woken_with_work_is_not_one_of_them() {
        // the same backends, and a writer they wake for 9 s of its 10 that wakes none of them
        let mut all: Vec<ProcessReport> =
            (101..105).map(|p| process(p, State::IoWait, 6 * S, &(101..105).filter(|o| *o != p).collect::<Vec<_>>())).collect();
        all.push(process(200, State::IoWait, 9 * S, &[101, 102, 103, 104]));
        let w = of(&family(process(100, State::IoWait, 0, &[]), &all)).expect("found");
        assert_eq!(w.count, 4);
        assert!(w.processes.iter().all(|p| p.pid != 200), "{:?}", w.processes);
    }

    #[test]
    fn consumers_fed_by_one_producer_and_short_waits_are_not_waiting_on_each_other() {
        // a producer wakes four consumers with work 9 s of their 10; none wakes another
        let consumers: Vec<ProcessReport> = (101..105).map(|p| process(p, State::FutexWait, 9 * S, &[100])).collect();
        assert_eq!(of(&family(process(100, State::Sleep, 0, &[]), &consumers)), None);
        // backends that wake each other for a tenth of their time (below each_other::SHARE)
        let light: Vec<ProcessReport> =
            (101..105).map(|p| process(p, State::IoWait, S, &(101..105).filter(|o| *o != p).collect::<Vec<_>>())).collect();
        assert_eq!(of(&family(process(100, State::IoWait, 0, &[]), &light)), None);
        // one pair is not enough when only one of them wakes the other
        let pair = [process(101, State::IoWait, 6 * S, &[102]), process(102, State::IoWait, 6 * S, &[103])];
        assert_eq!(of(&family(process(100, State::IoWait, 0, &[]), &pair)), None);
    }

    #[test]
    fn a_server_woken_by_its_clients_requests_and_waking_them_with_answers_is_not() {
        // `attach -p` of a server and four clients: each pair wakes each other, the clients never
        // one another
        let mut star: Vec<ProcessReport> = (101..105).map(|p| process(p, State::IoWait, 8 * S, &[100])).collect();
        let server = process(100, State::IoWait, 9 * S, &[101, 102, 103, 104]);
        assert_eq!(of(&Family::asked(&server, &star.iter().collect::<Vec<_>>())), None);
        // nor are two processes alone, which wake each other as a client and its server do
        star.truncate(1);
        assert_eq!(of(&Family::asked(&process(100, State::IoWait, 9 * S, &[101]), &star.iter().collect::<Vec<_>>())), None);
    }
}
