//! What the rules read of the rows: a thread's share in a state, its time as evidence, what it
//! waited behind, the age as findings quote it. Shared by the rules and the text report's table.
use super::super::evidence::{AgeFacts, Behind, Culprit, ThreadRef, ThreadTime};
use super::super::{ProcessReport, ThreadRow};
use super::{MIN_PRESENCE, WAITING_SHARE};
use crate::model::blame::{self, Preemptor};
use crate::model::state::State;

/// The default age objective: the window's median age times this, plus `SPREAD_SLACK_S`.
pub const SPREAD_FACTOR: f64 = 2.0;
pub const SPREAD_SLACK_S: f64 = 0.1;

/// The thread existed at least `MIN_PRESENCE` of the window.
pub fn present(r: &ThreadRow, window_ns: u64) -> bool {
    r.times.total() as f64 >= MIN_PRESENCE * window_ns as f64
}

pub fn share_of(r: &ThreadRow, s: State) -> f64 {
    let t = r.times.total();
    if t == 0 {
        0.0
    } else {
        r.times.get(s) as f64 / t as f64
    }
}

/// The share of the thread's time it was off a CPU it wanted: queued or throttled.
pub fn off_cpu_share(r: &ThreadRow) -> f64 {
    share_of(r, State::Runqueue) + share_of(r, State::Throttled)
}

/// Running, in the run queue or throttled: the thread had work.
pub fn busy_ns(r: &ThreadRow) -> u64 {
    r.times.get(State::Running) + r.times.get(State::Runqueue) + r.times.get(State::Throttled)
}

/// The state of a thread's worst involuntary wait, when it waited `WAITING_SHARE` of its time
/// (involuntary waits first: those are what no work meter sees).
pub fn worst_wait(r: &ThreadRow) -> Option<State> {
    let s = State::ALL.into_iter().filter(|s| s.is_waiting()).max_by_key(|s| r.times.get(*s))?;
    (r.times.waiting() as f64 / r.times.total() as f64 >= WAITING_SHARE && r.times.get(s) > 0).then_some(s)
}

/// Thread `tid`, named when it is one of `rows` (or it stands for many exited ones).
pub fn thread_ref(tid: u32, rows: &[ThreadRow]) -> ThreadRef {
    if tid == crate::model::blame::GONE {
        return ThreadRef { tid, name: Some("exited threads".to_string()), folded: 0 };
    }
    match rows.iter().find(|x| x.tid == tid) {
        Some(r) => row_ref(r),
        None => ThreadRef { tid, name: None, folded: 0 },
    }
}

/// The thread (or the folded threads) of row `r`.
pub fn row_ref(r: &ThreadRow) -> ThreadRef {
    ThreadRef { tid: r.tid, name: Some(r.name.clone()), folded: r.folded }
}

/// The row of `tid`: the live thread, else an exited one of that TID.
pub fn row_of(tid: u32, rows: &[ThreadRow]) -> Option<&ThreadRow> {
    rows.iter().find(|r| r.tid == tid && !r.exited).or_else(|| rows.iter().find(|r| r.tid == tid))
}

/// The thread of `r`, and its time in `state`.
pub fn time_in(r: &ThreadRow, state: State) -> ThreadTime {
    ThreadTime { thread: row_ref(r), state, ns: r.times.get(state), total_ns: r.times.total() }
}

/// The known thread that held the GIL longest while `r` waited for it.
pub fn gil_holder(r: &ThreadRow, rows: &[ThreadRow]) -> Option<Behind> {
    r.top_gil_holder().map(|(tid, share)| Behind { culprit: Culprit::Thread(thread_ref(tid, rows)), share })
}

/// The share of `r`'s GIL wait whose holder was not resolved (holder 0).
pub fn gil_unresolved(r: &ThreadRow) -> f64 {
    let all: u64 = r.gil_by_holder.values().sum();
    r.gil_by_holder.get(&0).map_or(0.0, |u| *u as f64 / all.max(1) as f64)
}

/// What had the CPU longest while `r` waited in the run queue.
pub fn preemptor(r: &ThreadRow, rows: &[ThreadRow]) -> Option<Behind> {
    r.top_preemptor().map(|(who, share)| {
        let culprit = match who {
            Preemptor::Thread(tid) => Culprit::Thread(thread_ref(*tid, rows)),
            Preemptor::Process { pid, comm } => Culprit::Process { pid: *pid, comm: comm.clone() },
            Preemptor::Idle => Culprit::Idle,
        };
        Behind { culprit, share }
    })
}

/// The thread whose wake-up ended most of `r`'s futex wait (or the timeouts).
pub fn waker(r: &ThreadRow, rows: &[ThreadRow]) -> Option<Behind> {
    r.top_waker().map(|(tid, share)| {
        let culprit = if tid == 0 { Culprit::Timeout } else { Culprit::Thread(thread_ref(tid, rows)) };
        Behind { culprit, share }
    })
}

/// The thread `b` names, if a thread.
pub fn thread_of(b: &Option<Behind>) -> Option<u32> {
    match b {
        Some(Behind { culprit: Culprit::Thread(t), .. }) => Some(t.tid),
        _ => None,
    }
}

/// The futex word (or parked address) with the most of `waits`, its part of them (ties: the
/// lowest address), and all of them.
pub fn top_word<'a>(waits: impl Iterator<Item = &'a blame::FutexWait>) -> Option<(u64, u64, u64)> {
    let mut on: std::collections::BTreeMap<u64, u64> = Default::default();
    for w in waits {
        *on.entry(w.addr).or_default() += w.ns;
    }
    let all = on.values().sum();
    let (addr, ns) = on.into_iter().max_by_key(|(a, ns)| (*ns, std::cmp::Reverse(*a)))?;
    Some((addr, ns, all))
}

/// The age as the verdict quotes it, judged against `--age-slo` or else the window's spread.
pub fn age_facts(report: &ProcessReport) -> Option<AgeFacts> {
    report.age.as_ref().map(|a| {
        let s = &a.summary;
        let (objective_s, objective) = match report.verdict.age_slo_s {
            Some(slo) => (slo, "slo"),
            None => (SPREAD_FACTOR * s.median_s + SPREAD_SLACK_S, "spread"),
        };
        let top = a.p99_s.map_or(s.max_s, |p99| p99.max(s.max_s));
        AgeFacts {
            growth_s: s.growth_s,
            last_s: s.last_s,
            max_s: s.max_s,
            mean_s: s.mean_s,
            slope: s.slope,
            rising: s.rising,
            objective_s,
            objective,
            over_objective: top > objective_s,
        }
    })
}

/// The age says something is wrong: the process' age rises or breaks its objective,
/// or a thread's own age (`waitmeter_client`) rises.
pub fn age_bad(report: &ProcessReport) -> bool {
    age_facts(report).is_some_and(|a| a.bad()) || report.threads.iter().any(|t| t.age.as_ref().is_some_and(|a| a.rising))
}
