//! "head-of-line:": a thread running or runnable nearly all of the window while its process
//! had CPU to spare: one thread is the limit, and what it serves queues behind it.
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::{CpuUse, ThreadRef};
use super::super::serial::seconds;
use super::super::ThreadRow;
use super::rows::{busy_ns, row_ref};
use super::{Claim, Context};
use crate::model::blame::Preemptor;
use crate::model::partition::secs;
use crate::model::stacks::WaitStacks;
use crate::model::state::State;

/// A thread is saturated when it was running or runnable at least this share of its time...
pub const SATURATED_SHARE: f64 = 0.90;
/// ... less than this share of it waiting for a CPU or the quota (else the CPU is the
/// limit, and the run-queue or quota findings say so) ...
pub const SATURATED_QUEUED_SHARE: f64 = 0.25;
/// ... it existed at least this share of the window ...
pub const SATURATED_PRESENCE: f64 = 0.5;
/// ... and its process left at least this many of the cores it may use unused.
pub const SPARE_CORES: f64 = 0.5;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SaturatedThread {
    pub thread: ThreadRef,
    /// running, in the run queue or throttled
    #[serde(rename = "busy_s", serialize_with = "seconds")]
    pub busy_ns: u64,
    #[serde(rename = "running_s", serialize_with = "seconds")]
    pub running_ns: u64,
    #[serde(rename = "total_s", serialize_with = "seconds")]
    pub total_ns: u64,
    pub cpu: CpuUse,
}

/// Single-thread bottlenecks: threads busy nearly all of their time while the process
/// had cores to spare (its quota, affinity and the machine's CPUs bound what it may use);
/// a busy thread is not one of its own when it is the GIL holder a finding before names.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let cpu = cx.cpu;
    let spare = cpu.used_cores + SPARE_CORES <= cpu.limit_cores;
    let window = cx.window_ns as f64;
    let gil_holders: Vec<u32> = cx.found.iter().filter_map(|c| c.gil_holder()).collect();
    cx.rows
        .iter()
        .filter(|r| {
            let total = r.times.total();
            let queued = r.times.get(State::Runqueue) + r.times.get(State::Throttled);
            spare
                && total as f64 >= SATURATED_PRESENCE * window
                && busy_ns(r) as f64 >= SATURATED_SHARE * total as f64
                && (queued as f64) < SATURATED_QUEUED_SHARE * total as f64
        })
        .filter(|r| !gil_holders.contains(&r.tid) && waited_for(r, cx))
        .map(|r| -> Box<dyn Claim> {
            Box::new(SaturatedThread {
                thread: row_ref(r),
                busy_ns: busy_ns(r),
                running_ns: r.times.get(State::Running),
                total_ns: r.times.total(),
                cpu,
            })
        })
        .collect()
}

impl Claim for SaturatedThread {
    fn kind(&self) -> &'static str {
        "saturated_thread"
    }
    fn explains_ns(&self) -> u64 {
        self.busy_ns
    }
    fn precedence(&self) -> u8 {
        1
    }
    fn explains_age(&self) -> bool {
        true
    }
    fn names(&self) -> Option<(u32, Option<State>)> {
        Some((self.thread.tid, None))
    }
    /// What it ran (its CPU clock samples while busy).
    fn code(&self, stacks: &WaitStacks, _switch_ns: u64) -> Option<Code> {
        code::busy(&self.thread, stacks)
    }
}

/// Others waited behind thread `tid` (for the GIL it held, a futex it woke them from, a CPU it
/// had) this long in the window, summed.
fn waited_on(tid: u32, rows: &[ThreadRow]) -> u64 {
    rows.iter()
        .filter(|r| r.tid != tid)
        .map(|r| {
            r.gil_by_holder.get(&tid).copied().unwrap_or(0)
                + r.futex_by_waker().get(&tid).copied().unwrap_or(0)
                + r.runqueue_by.get(&Preemptor::Thread(tid)).copied().unwrap_or(0)
        })
        .sum()
}

/// Something waits on a busy thread: the application's age is bad, or it serves input (it has a
/// home wait it comes back to: what arrives queues while it is busy), or other threads waited
/// behind it. A thread that computes on its own with nothing queued behind it (a batch loop on
/// a free-threaded interpreter) is no head-of-line limit.
fn waited_for(r: &ThreadRow, cx: &Context) -> bool {
    cx.bad_age
        || r.stretches.as_ref().is_some_and(|s| s.home.is_some())
        || waited_on(r.tid, cx.rows) as f64 >= super::idle_threads::IDLE_BLAME_SHARE * cx.window_ns as f64
}

impl fmt::Display for SaturatedThread {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let SaturatedThread { thread, busy_ns, running_ns, total_ns, cpu } = self;
        let pct = |ns: u64| 100.0 * ns as f64 / (*total_ns).max(1) as f64;
        let queued = busy_ns.saturating_sub(*running_ns);
        let split =
            if pct(queued) >= 1.0 { format!(" (running {:.0}%, runnable {:.0}%)", pct(*running_ns), pct(queued)) } else { String::new() };
        write!(
            f,
            "head-of-line: thread {} was busy {:.0}% of {:.1} s{split} while the process used {cpu}: one thread is the limit, and everything it serves queues behind it. Spread its work over more threads or make each item cheaper",
            thread.or_a_thread(),
            pct(*busy_ns),
            secs(*total_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;
    use crate::report::rules::blocked::Blocked;

    #[test]
    fn a_busy_thread_with_cpu_to_spare_is_the_head_of_line_and_comes_first() {
        // one processing thread busy all the window (a little queued), 27 idle JVM threads, a
        // session thread that waited on it, on 2 cores
        let mut rows = vec![row(
            40,
            "QFJ Message Pro",
            &[(State::Running, 9_700_000_000), (State::Runqueue, 200_000_000), (State::FutexWait, 100_000_000)],
        )];
        rows.extend((1..=27).map(|i| row(i, &format!("GC Thread#{i}"), &[(State::FutexWait, 10 * S)])));
        let mut session = row(50, "session-1", &[(State::FutexWait, 8 * S), (State::Running, 2 * S)]);
        session.futex.push(FutexWait { addr: 0x50, waker: 40, ns: 8 * S });
        rows.push(session);
        let mut r = ProcessReport::new(1, "java".into(), None, 10 * S, None, rows);
        r.cpu_limit_cores = 2.0;
        let shown = findings(&r);
        let sat = SaturatedThread {
            thread: named(40, "QFJ Message Pro"),
            busy_ns: 9_900_000_000,
            running_ns: 9_700_000_000,
            total_ns: 10 * S,
            cpu: CpuUse { used_cores: 1.17, limit_cores: 2.0 },
        };
        check(&shown[0], sat, 9_900_000_000, "head-of-line: thread QFJ Message Pro (40) was busy 99% of 10.0 s (running 97%, runnable 2%) while the process used CPU 1.2 of 2 cores: one thread is the limit, and everything it serves queues behind it. Spread its work over more threads or make each item cheaper");
        // the session thread woken by the busy thread is listed; the 27 idle threads are one line
        assert_eq!(kinds(&shown), ["saturated_thread", "blocked", "idle_threads"]);
        assert_eq!(shown[2].to_string(), "idle: 27 threads (GC Thread#1, GC Thread#2, GC Thread#3, GC Thread#4, 23 more) were blocked or asleep nearly all the window, and no thread waited on them; -v lists them");
        // -v: every thread its own line, the idle ones marked so
        let every = findings(&r.clone().with_verdict(crate::report::VerdictOptions { all: true, age_slo_s: None }));
        assert_eq!(every.len(), 29);
        assert_eq!(every.iter().filter(|f| matches!(f.claim.get::<Blocked>(), Some(Blocked { idle: true, .. }))).count(), 27);
        // no CPU to spare (1 core): the CPU, not the thread, is the limit
        let mut one = r.clone();
        one.cpu_limit_cores = 1.0;
        assert!(!kinds(&findings(&one)).contains(&"saturated_thread".to_string()), "{:?}", kinds(&findings(&one)));
        // a thread half queued is the run queue's finding, not a head-of-line
        let queued = findings_of(vec![row(1, "w", &[(State::Running, 6 * S), (State::Runqueue, 4 * S)])], 10 * S, 4.0, None);
        assert_eq!(kinds(&queued), ["run_queue_saturation"]);
        // nor is the GIL holder a GIL finding already names
        let f = findings_of(starving(), 10 * S, 4.0, None);
        assert_eq!(kinds(&f), ["gil_starvation"]);
    }
}
