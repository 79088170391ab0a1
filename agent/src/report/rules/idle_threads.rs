//! "idle:": threads blocked or asleep nearly all the window that nobody waited on, in one line
//! of the shown verdict (every finding: each one's own `blocked` line, `idle: true`).
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, ThreadRef};
use super::super::ThreadRow;
use super::burst::burst;
use super::rows::{present, row_ref, share_of};
use super::unmeasured_gil;
use super::{Claim, Context, IDLE_NAMED, WAITING_SHARE};
use crate::model::state::State;

/// A thread that ran less than this share of its time, waited for no CPU, quota or
/// GIL, and that nobody waited on, is idle.
pub const IDLE_RUNNING_SHARE: f64 = 0.10;
/// "Nobody waited on it": the waits of threads that are not idle charged to it stay under this
/// share of the window...
pub const IDLE_BLAME_SHARE: f64 = 0.05;
/// ... counting a futex wait only of a waiter that ran at least this share of its time (one
/// with work, waiting for a lock; a thread that hardly runs and is woken by others waits for
/// work from them: a JIT compiler thread, a consumer).
pub const WAITER_WITH_WORK_SHARE: f64 = 0.20;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IdleThreads {
    pub count: usize,
    /// the first few, by TID
    pub threads: Vec<ThreadRef>,
}

/// Threads that blocked for want of work: each ran less than `IDLE_RUNNING_SHARE` of its time,
/// waited for no CPU, quota or GIL, did not wait together with others (`Claim::together`: a lock
/// convoy, found before; or on an unmeasured interpreter's GIL), had no burst, and the threads
/// that are not idle themselves waited on it (as the GIL's holder, or the futex's waker of a
/// waiter with work: `WAITER_WITH_WORK_SHARE`) for less than `IDLE_BLAME_SHARE` of the window. A
/// JVM's GC, compiler and VM threads, a pool's spare workers, a server's readers with nothing to
/// read. (Being the preemptor of a queued thread is not being waited on: the run-queue finding
/// names it.)
pub fn idle(cx: &Context) -> BTreeSet<u32> {
    let (rows, window_ns) = (cx.rows, cx.window_ns);
    let mut together: Vec<u32> = cx.found.iter().flat_map(|c| c.together().to_vec()).collect();
    together.extend(unmeasured_gil::mostly(cx.report));
    let candidates: BTreeSet<u32> = rows
        .iter()
        .filter(|r| {
            r.times.total() > 0
                && (share_of(r, State::Running) < IDLE_RUNNING_SHARE || waits_at_home(r))
                && (r.times.waiting() as f64) < WAITING_SHARE * r.times.total() as f64
                && share_of(r, State::Yield) < WAITING_SHARE
                && !together.contains(&r.tid)
                && burst(r, window_ns).is_none()
        })
        .map(|r| r.tid)
        .collect();
    let mut waited_on: BTreeMap<u32, u64> = Default::default();
    for r in rows.iter().filter(|r| !candidates.contains(&r.tid)) {
        let holders = r.gil_by_holder.iter().map(|(t, ns)| (*t, *ns));
        let wakers = if share_of(r, State::Running) >= WAITER_WITH_WORK_SHARE { r.futex_by_waker() } else { Default::default() };
        for (tid, ns) in holders.chain(wakers).filter(|(t, _)| *t != 0 && *t != r.tid) {
            *waited_on.entry(tid).or_default() += ns;
        }
    }
    candidates.into_iter().filter(|tid| (waited_on.get(tid).copied().unwrap_or(0) as f64) < IDLE_BLAME_SHARE * window_ns as f64).collect()
}

/// A thread that spent most of its blocked time in its home wait, the one place it waits for
/// work (`model::stretches`): a loop in its poll, a pool's worker on its queue, whatever it ran
/// in between.
pub fn waits_at_home(r: &ThreadRow) -> bool {
    let blocked: u64 = [State::FutexWait, State::IoWait, State::Sleep, State::Other].into_iter().map(|s| r.times.get(s)).sum();
    r.stretches.as_ref().and_then(|s| s.at_home()).is_some_and(|(_, h)| h.wait_ns > 0 && 2 * h.wait_ns >= blocked)
}

/// The futex word `addr` is where thread `r` waits for work: its home wait.
pub fn home_word(r: &ThreadRow, addr: u64) -> bool {
    r.stretches.as_ref().and_then(|s| s.home).is_some_and(|k| k.holds(addr))
}

/// The idle threads of the window present in it, in one line.
pub fn summary(cx: &Context) -> IdleThreads {
    let idle = cx.idle();
    let rows: Vec<&ThreadRow> = cx.rows.iter().filter(|r| present(r, cx.window_ns) && idle.contains(&r.tid)).collect();
    IdleThreads { count: rows.len(), threads: rows.iter().take(IDLE_NAMED).map(|r| row_ref(r)).collect() }
}

impl Claim for IdleThreads {
    fn kind(&self) -> &'static str {
        "idle_threads"
    }
    fn tier(&self) -> u8 {
        3
    }
    fn precedence(&self) -> u8 {
        7
    }
    fn is_problem(&self) -> bool {
        false
    }
}

impl fmt::Display for IdleThreads {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let IdleThreads { count, threads } = self;
        let names = threads.iter().map(|t| t.name.clone().unwrap_or_else(|| t.tid.to_string())).collect();
        let (n, were, them) =
            if *count == 1 { ("1 thread".to_string(), "was", "it") } else { (format!("{count} threads"), "were", "them") };
        write!(
            f,
            "idle: {n} ({}) {were} blocked or asleep nearly all the window, and no thread waited on {them}; -v lists {them}",
            and_more(names, *count)
        )
    }
}
