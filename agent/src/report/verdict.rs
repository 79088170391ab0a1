//! The verdict: the rules (`rules/`, one file per kind of finding) run once per report in their
//! order; their findings ranked by the wall time they explain, with what is said beside each
//! (the code, the age, the culprits kept off the CPU); and the verdict as shown: idle threads
//! summarised, lines that repeat a headline left out, the lines capped (docs/verdicts.md).
use super::finding::{Finding, OffCpu};
use super::rules::idle_threads::{self, IdleThreads};
use super::rules::more::More;
use super::rules::rows::{off_cpu_share, row_of, thread_ref};
use super::rules::{unmeasured_gil, Claim, Context, Repeat};
use super::{ProcessReport, ThreadRow};
use crate::model::state::State;

// what others name as the verdict's (each rule's own thresholds are in its file)
pub use super::rules::rows::{gil_holder, preemptor, waker};
pub use super::rules::MIN_PRESENCE;

/// The verdict's lines unless all findings are asked for (`-v`).
pub const MAX_LINES: usize = 8;
/// A culprit thread (a GIL holder, a lock's releasers, a waker) counts as kept off the CPU
/// when it was throttled or queued for a CPU this share of its time or more.
pub const OFF_CPU_SHARE: f64 = 0.20;

/// A report's verdict, drawn once: what the JSON and the text report render.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// every finding of the window, ranked (`rank`): the JSON `findings`
    pub all: Vec<Finding>,
    /// the verdict as shown (`shown`): the text report's verdict and the JSON `verdict`
    pub shown: Vec<Finding>,
}

/// The verdict of `report`: its rules run once (`rules::ORDER`).
pub fn analyse(report: &ProcessReport) -> Verdict {
    let cx = Context::new(report).run();
    let mut claims = cx.found.clone();
    // a thread's own line that a headline says already comes after the headlines of its tier
    let repeats: Vec<Repeat> = claims.iter().flat_map(|c| c.repeats()).collect();
    let repeated = |c: &dyn Claim| c.line_of().is_some_and(|line| repeats.iter().any(|r| r.covers(line)));
    claims.sort_by(|a, b| {
        let (a, b) = (a.as_ref(), b.as_ref());
        a.tier().cmp(&b.tier()).then(repeated(a).cmp(&repeated(b))).then(rank(a, b))
    });
    let all: Vec<Finding> = claims.into_iter().map(|c| beside(c, &cx)).collect();
    let shown = if report.verdict.all { all.clone() } else { shown(&all, &cx) };
    Verdict { all, shown }
}

/// The finding of `claim`, with what is said beside it: the code of both sides (stacks taken),
/// the age (a problem that does not quote it itself), the culprits kept off the CPU.
fn beside(claim: Box<dyn Claim>, cx: &Context) -> Finding {
    let report = cx.report;
    let mut f = Finding::new(claim);
    if let Some(s) = &report.stacks {
        f.code = f.claim.code(s, report.python.as_ref().map_or(5_000_000, |p| p.switch_ns()));
    }
    if f.claim.is_problem() && !f.claim.quotes_age() {
        f.age = cx.age.clone();
    }
    f.culprits_off_cpu = culprits_off_cpu(&f.claim.culprits(), cx.rows);
    f
}

/// The threads a finding's victims waited behind that were themselves throttled or queued
/// (`OFF_CPU_SHARE`): the link between a wait and the CPU limit behind it.
fn culprits_off_cpu(tids: &[u32], rows: &[ThreadRow]) -> Vec<OffCpu> {
    tids.iter()
        .filter_map(|tid| row_of(*tid, rows))
        .filter_map(|r| {
            let (throttled_ns, runqueue_ns) = (r.times.get(State::Throttled), r.times.get(State::Runqueue));
            let share = off_cpu_share(r);
            (share >= OFF_CPU_SHARE).then(|| OffCpu { thread: thread_ref(r.tid, rows), throttled_ns, runqueue_ns, share })
        })
        .collect()
}

/// The verdict's order: "healthy" first; then the findings of lost or busy time by the wall
/// time they explain, most first (a process-wide headline before a per-thread line that
/// explains as much); then blocked threads (blocked is not waiting: maybe idle, maybe
/// contended), by their blocked time; the idle line last (`Claim::tier`, `Claim::precedence`).
/// Findings ranked alike keep the order of their rules.
fn rank(a: &dyn Claim, b: &dyn Claim) -> std::cmp::Ordering {
    a.tier().cmp(&b.tier()).then(b.explains_ns().cmp(&a.explains_ns())).then(a.precedence().cmp(&b.precedence()))
}

/// The verdict as shown unless every finding is asked for: idle threads in one line, no line
/// that repeats a headline (`Claim::repeats`: the starving thread's GIL wait, a convoy's
/// waiters, a throttled cgroup's threads, the busy-polling threads), and at most `MAX_LINES`
/// lines, the rest counted.
fn shown(all: &[Finding], cx: &Context) -> Vec<Finding> {
    let mut repeats: Vec<Repeat> = all.iter().flat_map(|f| f.claim.repeats()).collect();
    // waits mostly on an unmeasured interpreter's GIL, a finding or not: not lock waits
    let on_gil = unmeasured_gil::mostly(cx.report).into_iter();
    repeats.extend(on_gil.map(|tid| Repeat { tid: Some(tid), states: &[State::FutexWait, State::IoWait] }));
    let repeated = |f: &Finding| f.claim.line_of().is_some_and(|line| repeats.iter().any(|r| r.covers(line)));
    let (idle, mut shown): (Vec<Finding>, Vec<Finding>) = all.iter().filter(|f| !repeated(f)).cloned().partition(|f| f.claim.idle());
    if !idle.is_empty() {
        shown.push(Finding::from(idle_threads::summary(cx)));
    }
    if shown.len() > MAX_LINES {
        let idle_line = shown.iter().position(|f| f.claim.is::<IdleThreads>()).map(|i| shown.remove(i));
        let keep = MAX_LINES - 1 - usize::from(idle_line.is_some());
        let more = shown.len() - keep;
        shown.truncate(keep);
        shown.push(Finding::from(More { findings: more }));
        shown.extend(idle_line);
    }
    shown
}

#[cfg(test)]
mod pins;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod typed;
