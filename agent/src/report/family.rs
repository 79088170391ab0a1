//! A process and the processes it started, measured together (`attach --children`): how many
//! CPUs they wanted against the CPUs they may use. A `multiprocessing.Pool(4)` on 2 CPUs wants
//! 4 and gets 2: each worker waits half its time in the run queue behind its siblings, which
//! no single process' report can say ("4 processes on 2 CPUs: 2× oversubscribed").
use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use super::serial::seconds;
use super::ProcessReport;
use crate::model::blame::{Preemptor, Waker};
use crate::model::stacks::Role;
use crate::model::state::State;

/// A thread runnable (running, queued, throttled) at least this share of the time it existed
/// is CPU-bound: the time it waited for a CPU is CPU it wanted. A thread that blocks most of its
/// time wanted the CPU it ran; its run-queue wait is latency after each wakeup, which grows with
/// what the others run, not demand of its own (a Pool's parent on 3.14: 0.11 CPU run, 0.3 queued
/// behind the workers, up to 0.5 on a loaded machine: counted as a fifth busy process).
pub const CPU_BOUND_SHARE: f64 = 0.5;

/// One process of the family, as its report sums its threads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Member {
    pub pid: u32,
    pub comm: String,
    /// the CPU time it wanted: of its CPU-bound threads (`CPU_BOUND_SHARE`) the time they were
    /// running, in the run queue or throttled; of the others the time they ran
    #[serde(rename = "demand_s", serialize_with = "seconds")]
    pub demand_ns: u64,
    #[serde(rename = "running_s", serialize_with = "seconds")]
    pub running_ns: u64,
    #[serde(rename = "runqueue_s", serialize_with = "seconds")]
    pub runqueue_ns: u64,
    /// of the run-queue wait, behind a thread of the family (its own threads included)
    #[serde(rename = "runqueue_behind_family_s", serialize_with = "seconds")]
    pub runqueue_family_ns: u64,
    /// the process was in the window this long (it may have started or exited in it)
    #[serde(rename = "present_s", serialize_with = "seconds")]
    pub present_ns: u64,
    /// its threads' waits (blocked, not on the GIL) that another member ended by waking them
    /// (a lock's release, a latch set, a pipe written, a signal), summed over its threads
    #[serde(rename = "woken_by_family_s", serialize_with = "seconds")]
    pub woken_by_family_ns: u64,
    /// the same by the member that woke them: PID -> ns
    #[serde(skip)]
    pub woken_by: BTreeMap<u32, u64>,
    /// how many of those waits there were: the others' wakeups of it (counted with the waits'
    /// stacks; none without them)
    #[serde(rename = "woken_by_family", skip_serializing_if = "Option::is_none")]
    pub wakeups: Option<u64>,
    /// its threads' time in the window, summed (what `woken_by_family_ns` is a share of)
    #[serde(skip)]
    pub thread_ns: u64,
    /// the blocked state that most of those waits were in, and the code its threads waited in
    /// there (the top site of their own stacks in that state), when named
    #[serde(skip_serializing_if = "Option::is_none")]
    pub woken_state: Option<State>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_in: Option<String>,
    /// the code the other members ran as they woke its threads from those waits (the top site of
    /// their stacks at the wakeups), when named
    #[serde(skip_serializing_if = "Option::is_none")]
    pub woken_from: Option<String>,
}

/// What gathers the processes of a [`Family`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gathered {
    /// the process and those it started (`--children`): they share its CPUs
    Children,
    /// the processes asked for (`-p A -p B`), which need not share their CPUs: no
    /// `oversubscribed` is judged of them
    Pids,
}

/// The family of a process: itself and the processes it started, with the CPUs it may use; or
/// the processes asked for together (`attach -p A -p B`), on the first one's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Family {
    /// what gathered them
    pub of: Gathered,
    /// the CPUs the first process may use (quota, cpuset and affinity; its children inherit them)
    pub cpus: f64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    /// itself first, then the others by PID
    pub members: Vec<Member>,
}

impl Family {
    /// `root`'s family from the reports of it and of the processes it started.
    pub fn of(root: &ProcessReport, others: &[&ProcessReport]) -> Family {
        let pids: HashSet<u32> = std::iter::once(root.pid).chain(others.iter().map(|r| r.pid)).collect();
        let mut members: Vec<Member> = others.iter().map(|r| member(r, &pids)).collect();
        members.sort_by_key(|m| m.pid);
        members.insert(0, member(root, &pids));
        Family { of: Gathered::Children, cpus: root.cpu_limit_cores, window_ns: root.duration_ns, members }
    }

    /// The processes asked for together, the first as `first`.
    pub fn asked(first: &ProcessReport, others: &[&ProcessReport]) -> Family {
        Family { of: Gathered::Pids, ..Family::of(first, others) }
    }
}

fn member(r: &ProcessReport, family: &HashSet<u32>) -> Member {
    let mut m = Member {
        pid: r.pid,
        comm: r.comm.clone(),
        demand_ns: 0,
        running_ns: 0,
        runqueue_ns: 0,
        runqueue_family_ns: 0,
        present_ns: r.exited_after_ns.unwrap_or(r.duration_ns),
        woken_by_family_ns: 0,
        woken_by: BTreeMap::new(),
        wakeups: None,
        thread_ns: r.threads.iter().map(|t| t.existed_ns).sum(),
        woken_state: None,
        waited_in: None,
        woken_from: None,
    };
    let mut by_state: BTreeMap<State, u64> = BTreeMap::new();
    for t in &r.threads {
        for ((state, waker), ns) in &t.woken_by {
            if let Waker::Process { pid, .. } = waker {
                if *pid != r.pid && family.contains(pid) {
                    *m.woken_by.entry(*pid).or_default() += ns;
                    *by_state.entry(*state).or_default() += ns;
                    m.woken_by_family_ns += ns;
                }
            }
        }
        let running = t.times.get(State::Running);
        let runqueue = t.times.get(State::Runqueue);
        let runnable = running + runqueue + t.times.get(State::Throttled);
        m.running_ns += running;
        m.runqueue_ns += runqueue;
        m.demand_ns += if runnable as f64 >= CPU_BOUND_SHARE * t.existed_ns as f64 { runnable } else { running };
        m.runqueue_family_ns += t
            .runqueue_by
            .iter()
            .filter(|(by, _)| match by {
                Preemptor::Thread(_) => true,
                Preemptor::Process { pid, .. } => family.contains(pid),
                Preemptor::Idle => false,
            })
            .map(|(_, ns)| ns)
            .sum::<u64>();
    }
    // another member woke them (a PID is no TID of another process)
    let by_family = |by: u32| by != r.pid && family.contains(&by);
    let woken_state = by_state.iter().max_by_key(|(s, ns)| (**ns, std::cmp::Reverse(**s))).map(|(s, _)| *s);
    m.woken_state = woken_state;
    if let Some(stacks) = r.stacks.as_ref() {
        let tids: Vec<u32> = r.threads.iter().map(|t| t.tid).collect();
        m.wakeups = Some(by_state.keys().map(|state| stacks.waits_behind(&tids, *state, by_family)).sum());
        if let Some(state) = woken_state {
            m.waited_in = stacks.top_site_of(&tids, state, Role::Victim, None).map(|s| s.text);
            m.woken_from = stacks.top_site_behind(&tids, state, Role::Waker, by_family).map(|s| s.text);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{row, S};
    use crate::report::rules::oversubscribed::{self, Oversubscribed};
    use std::collections::BTreeMap;

    /// A process of one thread over a 10 s window: running and waiting for a CPU behind `by`.
    fn process(pid: u32, running: u64, runqueue: u64, by: Preemptor) -> ProcessReport {
        let mut t =
            row(pid, "MainThread", &[(State::Running, running), (State::Runqueue, runqueue), (State::Sleep, 10 * S - running - runqueue)]);
        t.runqueue_by = BTreeMap::from([(by, runqueue)]);
        let mut r = ProcessReport::new(pid, "python3".into(), None, 10 * S, None, vec![t]);
        r.cpu_limit_cores = 2.0;
        r
    }

    fn sibling(pid: u32) -> Preemptor {
        Preemptor::Process { pid, comm: "python3".into() }
    }

    #[test]
    fn four_busy_processes_on_two_cpus_are_twice_oversubscribed() {
        // the pool's parent hands out tasks and collects results (it runs a hundredth of a
        // CPU and is queued behind the workers after its wakeups: not one of the busy); four
        // workers each run 5 s and wait 5 s behind each other
        let parent = process(100, S / 10, 3 * S, sibling(101));
        let workers: Vec<ProcessReport> =
            (101..105).map(|p| process(p, 5 * S, 49 * S / 10, sibling(if p == 104 { 101 } else { p + 1 }))).collect();
        let f = Family::of(&parent, &workers.iter().collect::<Vec<_>>());
        assert_eq!(f.members.iter().map(|m| m.pid).collect::<Vec<_>>(), [100, 101, 102, 103, 104]);
        assert_eq!(f.members[0].demand_ns, S / 10, "a thread that sleeps most of its time wanted what it ran");
        let Some(Oversubscribed { count, processes, cpus, demand_cores, runqueue_share, behind_family_share, .. }) = oversubscribed::of(&f)
        else {
            panic!("{:?}", oversubscribed::of(&f));
        };
        assert_eq!((count, processes.len(), cpus), (4, 4, 2.0));
        assert!((demand_cores - 3.96).abs() < 1e-9, "{demand_cores}");
        assert!((runqueue_share - 19.6 / 39.6).abs() < 1e-9 && behind_family_share == 1.0);
        let line =
            Oversubscribed { count, processes, cpus, demand_cores, runqueue_ns: 0, runqueue_share, behind_family_share, window_ns: 10 * S }
                .to_string();
        assert!(line.starts_with("oversubscribed: 4 processes on 2 CPUs want 4.0 CPUs: 2.0× oversubscribed"), "{line}");
    }

    #[test]
    fn processes_asked_for_together_are_not_judged_oversubscribed() {
        // the busy workers of the first test, asked for by PID: they need not share CPUs
        let workers: Vec<ProcessReport> =
            (101..105).map(|p| process(p, 5 * S, 49 * S / 10, sibling(if p == 104 { 101 } else { p + 1 }))).collect();
        let others: Vec<&ProcessReport> = workers[1..].iter().collect();
        assert!(oversubscribed::of(&Family::of(&workers[0], &others)).is_some());
        let asked = Family::asked(&workers[0], &others);
        assert_eq!((asked.of, asked.members.len()), (Gathered::Pids, 4));
        assert_eq!(oversubscribed::of(&asked), None);
    }

    #[test]
    fn a_parent_queued_behind_its_workers_is_not_one_of_the_busy() {
        // the parent's threads wake for every result and wait behind the workers each time:
        // 2.2 s running and 4.4 s queued of 10 s (0.66 CPU by running + queued) yet runnable
        // only a third of each thread's time: it wanted the 0.22 CPU it ran
        let mut parent = process(100, S, 2 * S, sibling(101));
        parent.threads.push(row(
            99,
            "Thread-1",
            &[(State::Running, 12 * S / 10), (State::Runqueue, 24 * S / 10), (State::Sleep, 64 * S / 10)],
        ));
        let workers: Vec<ProcessReport> = (101..105).map(|p| process(p, 5 * S, 5 * S, sibling(101))).collect();
        let f = Family::of(&parent, &workers.iter().collect::<Vec<_>>());
        assert_eq!(f.members[0].demand_ns, 22 * S / 10);
        let Some(Oversubscribed { count, .. }) = oversubscribed::of(&f) else { panic!() };
        assert_eq!(count, 4);
        // a CPU-bound thread's wait is demand, however short its runs: two of them queued
        // 60% of the time want a CPU each
        let busy: Vec<ProcessReport> = (101..104).map(|p| process(p, 4 * S, 6 * S, sibling(101))).collect();
        let f = Family::of(&process(100, 0, 0, Preemptor::Idle), &busy.iter().collect::<Vec<_>>());
        assert!(f.members[1..].iter().all(|m| m.demand_ns == 10 * S));
    }

    #[test]
    fn what_fits_or_waits_behind_a_neighbour_is_not_oversubscribed() {
        let parent = process(100, S / 10, 0, Preemptor::Idle);
        // control: two busy workers on two CPUs hardly wait
        let two: Vec<ProcessReport> = (101..103).map(|p| process(p, 9 * S, S / 10, sibling(100))).collect();
        assert_eq!(oversubscribed::of(&Family::of(&parent, &two.iter().collect::<Vec<_>>())), None);
        // four workers that wait behind another program (a neighbour), not behind each other
        let four: Vec<ProcessReport> = (101..105).map(|p| process(p, 5 * S, 49 * S / 10, sibling(999))).collect();
        assert_eq!(oversubscribed::of(&Family::of(&parent, &four.iter().collect::<Vec<_>>())), None);
        // four light workers (a tenth of a CPU each) on two CPUs
        let light: Vec<ProcessReport> = (101..105).map(|p| process(p, S / 2, S / 2, sibling(101))).collect();
        assert_eq!(oversubscribed::of(&Family::of(&parent, &light.iter().collect::<Vec<_>>())), None);
    }
}
