//! "age rising while the CPU is idle:" / "age rising while the process used most of its CPU:"
//! (or "age above its objective …"): a bad age that no finding before explains.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{age_head, age_words, longest, AgeFacts, CpuUse, ThreadTime};
use super::super::serial::seconds;
use super::super::ThreadRow;
use super::rows::{busy_ns, time_in};
use super::{Claim, Context};
use crate::model::partition::secs;
use crate::model::state::State;

/// "The CPU is idle": the process used less than this share of the CPUs it may use.
pub const IDLE_CPU_SHARE: f64 = 0.5;

/// The age is bad and the CPU idles: the work waits for something other than the CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgeRisingCpuIdle {
    pub age: Option<AgeFacts>,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    pub cpu: CpuUse,
    /// the longest GIL, futex, I/O or other wait of a thread
    pub longest_wait: Option<ThreadTime>,
}

/// The age is bad and the process used most of its CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgeRisingCpuBusy {
    pub age: Option<AgeFacts>,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    pub cpu: CpuUse,
    /// the thread that ran most (`wait_s`: its running time)
    pub busiest: Option<ThreadTime>,
    /// the longest GIL, futex, I/O or other wait of a thread that is not idle
    pub longest_wait: Option<ThreadTime>,
}

/// A bad age that no finding before explains (`Claim::explains_age`: starvation, saturation,
/// throttling, the run queue): idle or busy by the CPU the process used, pointing at the
/// longest wait of a thread that is not idle (of any thread when all are).
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    if !cx.bad_age || cx.found.iter().any(|c| c.explains_age()) {
        return vec![];
    }
    let (rows, idle) = (cx.rows, cx.idle());
    let working = |r: &&ThreadRow| !idle.contains(&r.tid);
    let longest = |keep: &dyn Fn(&&ThreadRow) -> bool| {
        rows.iter()
            .filter(|r| r.times.total() > 0)
            .filter(keep)
            .flat_map(|r| [State::GilWait, State::FutexWait, State::IoWait, State::Other].into_iter().map(move |s| (r, s)))
            .filter(|(r, s)| r.times.get(*s) > 0)
            .max_by_key(|(r, s)| r.times.get(*s))
    };
    let longest_wait = longest(&working).or_else(|| longest(&|_| true)).map(|(r, s)| time_in(r, s));
    let (age, window_ns, cpu) = (cx.age.clone(), cx.window_ns, cx.cpu);
    if cx.report.cpu_used_cores() < IDLE_CPU_SHARE * cx.report.cpu_limit_cores {
        vec![Box::new(AgeRisingCpuIdle { age, window_ns, cpu, longest_wait })]
    } else {
        let busiest = rows.iter().filter(|r| r.times.total() > 0).max_by_key(|r| busy_ns(r)).map(|r| time_in(r, State::Running));
        vec![Box::new(AgeRisingCpuBusy { age, window_ns, cpu, busiest, longest_wait })]
    }
}

impl Claim for AgeRisingCpuIdle {
    fn kind(&self) -> &'static str {
        "age_rising_cpu_idle"
    }
    /// The longest wait it points at.
    fn explains_ns(&self) -> u64 {
        self.longest_wait.as_ref().map_or(0, |w| w.ns)
    }
    fn precedence(&self) -> u8 {
        4
    }
    fn quotes_age(&self) -> bool {
        true
    }
}

impl Claim for AgeRisingCpuBusy {
    fn kind(&self) -> &'static str {
        "age_rising_cpu_busy"
    }
    /// The busiest thread's running time.
    fn explains_ns(&self) -> u64 {
        self.busiest.as_ref().map_or(0, |w| w.ns)
    }
    fn precedence(&self) -> u8 {
        4
    }
    fn quotes_age(&self) -> bool {
        true
    }
}

impl fmt::Display for AgeRisingCpuIdle {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let AgeRisingCpuIdle { age, window_ns, cpu, longest_wait } = self;
        write!(
            f,
            "{} while the CPU is idle: {} in {:.1} s; {cpu}: the work is waiting for something other than the CPU{}",
            age_head(age),
            age_words(age),
            secs(*window_ns),
            longest(longest_wait)
        )
    }
}

impl fmt::Display for AgeRisingCpuBusy {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let AgeRisingCpuBusy { age, window_ns, cpu, busiest, longest_wait } = self;
        let busiest = busiest
            .as_ref()
            .map(|b| format!("; the busiest thread: {}, running {:.0}%", b.thread.or_a_thread(), 100.0 * b.share()))
            .unwrap_or_default();
        write!(
            f,
            "{} while the process used most of its CPU: {} in {:.1} s; {cpu}{busiest}{}: give it more CPU or make each item cheaper",
            age_head(age),
            age_words(age),
            secs(*window_ns),
            longest(longest_wait)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn age_rising_while_the_cpu_is_idle() {
        let rows = vec![row(1, "worker", &[(State::IoWait, 9 * S), (State::Running, S)])];
        let f = findings_of(rows, 10 * S, 4.0, Some((1.0, 9.0, true)));
        assert_eq!(kinds(&f), ["age_rising_cpu_idle", "blocked"]);
        let kind = AgeRisingCpuIdle {
            age: Some(facts(1.0, 9.0, true)),
            window_ns: 10 * S,
            cpu: CpuUse { used_cores: 0.1, limit_cores: 4.0 },
            longest_wait: Some(time(1, "worker", State::IoWait, 9 * S, 10 * S)),
        };
        assert_eq!(f[0], Finding { claim: Box::new(kind), explains_ns: 9 * S, code: None, age: None, culprits_off_cpu: vec![] });
    }
}
