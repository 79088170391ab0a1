//! "GIL (not measured):": threads of a CPython whose GIL waitmeter does not measure (2.x,
//! 3.0–3.7) waited on its GIL's futex words: GIL contention, not a lock convoy.
use std::fmt;

use serde::Serialize;

use super::super::evidence::{and_more, ThreadRef};
use super::super::serial::seconds;
use super::super::{ProcessReport, ThreadRow};
use super::rows::thread_ref;
use super::{Claim, Context, IDLE_NAMED, WAITING_SHARE};
use crate::model::blame;
use crate::model::partition::secs;
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnmeasuredGil {
    pub version: String,
    /// how many threads waited, and the first few, most wait first
    pub count: usize,
    pub threads: Vec<ThreadRef>,
    #[serde(rename = "wait_s", serialize_with = "seconds")]
    pub wait_ns: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
}

/// The version of a CPython whose GIL waitmeter does not measure, and the address ranges of its
/// GIL's futex words (empty: its symbols do not say).
pub fn unmeasured_python(report: &ProcessReport) -> Option<(&str, &[(u64, u64)])> {
    report.python.as_ref().filter(|p| p.gil == "unknown").map(|p| (p.version.as_str(), p.unmeasured_gil.as_slice()))
}

/// The futex word `addr` is the GIL of an interpreter waitmeter does not measure.
pub fn on_unmeasured_gil(report: &ProcessReport, addr: u64) -> bool {
    let a = blame::address(addr);
    !blame::is_parked(addr) && unmeasured_python(report).is_some_and(|(_, r)| r.iter().any(|(lo, hi)| (*lo..*hi).contains(&a)))
}

/// Thread `r`'s futex wait on the GIL words of an interpreter waitmeter does not measure.
fn unmeasured_gil_ns(report: &ProcessReport, r: &ThreadRow) -> u64 {
    r.futex.iter().filter(|w| on_unmeasured_gil(report, w.addr)).map(|w| w.ns).sum()
}

/// The threads whose futex wait was mostly on an unmeasured interpreter's GIL, whether their
/// waits add up to a finding or not: not idle, and their own blocked lines would repeat the
/// GIL contention as lock waits.
pub fn mostly(report: &ProcessReport) -> Vec<u32> {
    report
        .threads
        .iter()
        .filter(|r| {
            let on = unmeasured_gil_ns(report, r);
            on > 0 && 2 * on >= r.times.get(State::FutexWait)
        })
        .map(|r| r.tid)
        .collect()
}

/// Waits on the GIL of an interpreter waitmeter does not measure (2.x, 3.0–3.7), when they add up
/// to `WAITING_SHARE` of the window: GIL contention said as such, never as a lock convoy.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let report = cx.report;
    let Some((version, _)) = unmeasured_python(report) else { return vec![] };
    let mut by_thread: std::collections::BTreeMap<u32, u64> = Default::default();
    for r in &report.threads {
        let ns = unmeasured_gil_ns(report, r);
        if ns > 0 {
            *by_thread.entry(r.tid).or_default() += ns;
        }
    }
    let wait_ns: u64 = by_thread.values().sum();
    if (wait_ns as f64) < WAITING_SHARE * report.duration_ns as f64 {
        return vec![];
    }
    let mut waiters: Vec<(u32, u64)> = by_thread.into_iter().collect();
    waiters.sort_by_key(|(tid, ns)| (std::cmp::Reverse(*ns), *tid));
    vec![Box::new(UnmeasuredGil {
        version: version.to_string(),
        count: waiters.len(),
        threads: waiters.iter().take(IDLE_NAMED).map(|(tid, _)| thread_ref(*tid, &report.threads)).collect(),
        wait_ns,
        window_ns: report.duration_ns,
    })]
}

impl Claim for UnmeasuredGil {
    fn kind(&self) -> &'static str {
        "unmeasured_gil"
    }
    fn explains_ns(&self) -> u64 {
        self.wait_ns
    }
    fn precedence(&self) -> u8 {
        5
    }
}

impl fmt::Display for UnmeasuredGil {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let UnmeasuredGil { version, count, threads, wait_ns, window_ns } = self;
        write!(
            f,
            "GIL (not measured): {count} thread{} ({}) waited {:.1} s in total in {:.1} s on the GIL of CPython {version}, whose GIL waitmeter does not measure (it measures {}): GIL contention, not a lock convoy; these waits count as futex_wait, with no holder named. Fewer threads running Python code at once (processes for CPU work) is the fix; on {} the GIL's holders are named",
            if *count == 1 { "" } else { "s" },
            and_more(threads.iter().map(ThreadRef::or_thread_tid).collect(), *count),
            secs(*wait_ns),
            secs(*window_ns),
            crate::python::MEASURED,
            crate::python::MEASURED,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    /// Three threads waiting on futex 0x1008 of a Python process whose interpreter's GIL is
    /// `gil` (a measured one: "enabled"), its GIL's words in `ranges`.
    fn old_python(gil: &'static str, ranges: Vec<(u64, u64)>) -> ProcessReport {
        let rows: Vec<ThreadRow> = (1..=3)
            .map(|i| {
                let mut r = row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, S)]);
                r.futex.push(FutexWait { addr: 0x1008, waker: if i == 3 { 1 } else { i + 1 }, ns: 3 * S });
                r
            })
            .collect();
        let python = crate::report::PythonInfo {
            version: "2.7.18".into(),
            gil,
            gil_probe: "none",
            lock_probe: "none",
            free_threaded: false,
            binary: "/usr/lib/libpython2.7.so.1.0".into(),
            symbols: true,
            switch_interval_us: None,
            unmeasured_gil: ranges,
        };
        let mut r = ProcessReport::new(1, "python".into(), Some(python), 4 * S, None, rows);
        r.cpu_limit_cores = 4.0;
        r
    }

    #[test]
    fn an_unmeasured_interpreters_gil_is_said_as_the_gil_and_never_as_a_convoy() {
        let shown = findings(&old_python("unknown", vec![(0x1000, 0x1030)]));
        assert_eq!(kinds(&shown), ["unmeasured_gil"]);
        let gil = UnmeasuredGil {
            version: "2.7.18".into(),
            count: 3,
            threads: vec![named(1, "w1"), named(2, "w2"), named(3, "w3")],
            wait_ns: 9 * S,
            window_ns: 4 * S,
        };
        check(&shown[0], gil, 9 * S, "GIL (not measured): 3 threads (w1 (1), w2 (2), w3 (3)) waited 9.0 s in total in 4.0 s on the GIL of CPython 2.7.18, whose GIL waitmeter does not measure (it measures CPython 3.8 and later): GIL contention, not a lock convoy; these waits count as futex_wait, with no holder named. Fewer threads running Python code at once (processes for CPU work) is the fix; on CPython 3.8 and later the GIL's holders are named");
        // a futex word outside the GIL's: a convoy as ever
        assert_eq!(kinds(&findings(&old_python("unknown", vec![(0x2000, 0x2030)]))), ["lock_convoy"]);
        // symbols that do not say where the GIL is: the convoy, said to be maybe the GIL
        let f = findings(&old_python("unknown", vec![]));
        assert_eq!(kinds(&f), ["lock_convoy"]);
        assert!(f[0].to_string().ends_with("they take turns on one lock, or this is the GIL: waitmeter does not measure the GIL of CPython 2.7.18 (it measures CPython 3.8 and later), and this interpreter's symbols do not say where its GIL is"), "{}", f[0]);
        // a measured interpreter: no caveat
        let f = findings(&old_python("enabled", vec![]));
        assert!(f[0].to_string().ends_with("they take turns on one lock"), "{}", f[0]);
    }
}
