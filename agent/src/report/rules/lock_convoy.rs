//! "lock convoy on futex 0x…:": many threads took turns on one futex word.
use std::fmt;

use serde::Serialize;

use super::super::code::{self, Code};
use super::super::evidence::ThreadRef;
use super::super::serial::{hex, seconds};
use super::super::ThreadRow;
use super::idle_threads::home_word;
use super::rows::thread_ref;
use super::unmeasured_gil::{on_unmeasured_gil, unmeasured_python};
use super::{Claim, Context, Repeat};
use crate::model::blame::{self, CONVOY_SHARE, CONVOY_WAITERS};
use crate::model::partition::secs;
use crate::model::stacks::WaitStacks;
use crate::model::state::State;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockConvoy {
    #[serde(serialize_with = "hex")]
    pub futex: u64,
    pub waiters: Vec<u32>,
    /// the waiters' wait on it, summed
    #[serde(rename = "wait_s", serialize_with = "seconds")]
    pub wait_ns: u64,
    #[serde(rename = "window_s", serialize_with = "seconds")]
    pub window_ns: u64,
    pub wakers: Vec<ThreadRef>,
    /// the process runs a CPython whose GIL waitmeter does not measure, and whose symbols do
    /// not say where its GIL is: its version (this futex may be the GIL)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmeasured_python: Option<String>,
}

/// Many threads queueing on one futex word (`CONVOY_WAITERS`, `CONVOY_SHARE` of the window),
/// not an unmeasured interpreter's GIL (`unmeasured_gil`).
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let report = cx.report;
    let window = cx.window_ns.max(1) as f64;
    // an interpreter whose GIL is not measured and not found: any convoy may be its GIL
    let unknown_gil = unmeasured_python(report).filter(|(_, r)| r.is_empty()).map(|(v, _)| v.to_string());
    report
        .top_futexes
        .iter()
        .filter(|f| !on_unmeasured_gil(report, f.addr))
        .filter_map(|f| {
            // waiting for work is idle, never contention: only the threads that took the lock in
            // the middle of their work (it is not their home wait) and were handed it (a wake
            // ended a wait of theirs on it) queue on it
            let contenders: Vec<&ThreadRow> = f
                .waiters
                .iter()
                .filter_map(|tid| cx.rows.iter().find(|r| r.tid == *tid))
                .filter(|r| !home_word(r, f.addr) && r.futex.iter().any(|w| w.addr == f.addr && w.waker != 0))
                .collect();
            let wait_ns: u64 = contenders.iter().flat_map(|r| r.futex.iter().filter(|w| w.addr == f.addr)).map(|w| w.ns).sum();
            (contenders.len() >= CONVOY_WAITERS && wait_ns as f64 >= CONVOY_SHARE * window)
                .then(|| (f, contenders.iter().map(|r| r.tid).collect::<Vec<u32>>(), wait_ns))
        })
        .map(|(f, waiters, wait_ns)| -> Box<dyn Claim> {
            Box::new(LockConvoy {
                futex: f.addr,
                waiters,
                wait_ns,
                window_ns: cx.window_ns,
                wakers: f.wakers.iter().map(|t| thread_ref(*t, cx.rows)).collect(),
                unmeasured_python: unknown_gil.clone(),
            })
        })
        .collect()
}

impl Claim for LockConvoy {
    fn kind(&self) -> &'static str {
        "lock_convoy"
    }
    fn explains_ns(&self) -> u64 {
        self.wait_ns
    }
    fn precedence(&self) -> u8 {
        5
    }
    /// The waiters' own blocked lines.
    fn repeats(&self) -> Vec<Repeat> {
        self.waiters.iter().map(|tid| Repeat { tid: Some(*tid), states: &[State::FutexWait, State::IoWait] }).collect()
    }
    fn together(&self) -> &[u32] {
        &self.waiters
    }
    /// The lock's releasers.
    fn culprits(&self) -> Vec<u32> {
        self.wakers.iter().map(|t| t.tid).collect()
    }
    fn code(&self, stacks: &WaitStacks, _switch_ns: u64) -> Option<Code> {
        code::convoy(&self.waiters, stacks)
    }
}

impl fmt::Display for LockConvoy {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let LockConvoy { futex, waiters, wait_ns, window_ns, wakers, unmeasured_python } = self;
        let wakers: Vec<String> = wakers.iter().take(4).map(ThreadRef::or_thread_tid).collect();
        let word = if blame::is_parked(*futex) { "CPython lock" } else { "futex" };
        write!(
            f,
            "lock convoy on {word} {:#x}: {} threads waited {:.1} s in total in {:.1} s, woken by {}: they take turns on one lock",
            blame::address(*futex),
            waiters.len(),
            secs(*wait_ns),
            secs(*window_ns),
            if wakers.is_empty() { "timeouts".to_string() } else { wakers.join(", ") }
        )?;
        if let Some(v) = unmeasured_python {
            write!(
                f,
                ", or this is the GIL: waitmeter does not measure the GIL of CPython {v} (it measures {}), and this interpreter's symbols do not say where its GIL is",
                crate::python::MEASURED
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::*;

    #[test]
    fn lock_convoy() {
        let rows: Vec<ThreadRow> = (1..=3)
            .map(|i| {
                let mut r = row(i, &format!("w{i}"), &[(State::FutexWait, 3 * S), (State::Running, S)]);
                r.futex.push(FutexWait { addr: 0xabc, waker: if i == 3 { 99 } else { i + 1 }, ns: 3 * S });
                r
            })
            .collect();
        let f = every_finding_of(rows.clone(), 4 * S);
        assert_eq!(kinds(&f), ["lock_convoy", "blocked", "blocked", "blocked"]);
        // as shown, the convoy's waiters are in its line
        assert_eq!(kinds(&findings_of(rows, 4 * S, 4.0, None)), ["lock_convoy"]);
        let wakers = vec![named(2, "w2"), named(3, "w3"), ThreadRef { tid: 99, name: None, folded: 0 }];
        let convoy = LockConvoy { futex: 0xabc, waiters: vec![1, 2, 3], wait_ns: 9 * S, window_ns: 4 * S, wakers, unmeasured_python: None };
        check(&f[0], convoy, 9 * S, "lock convoy on futex 0xabc: 3 threads waited 9.0 s in total in 4.0 s, woken by w2 (2), w3 (3), thread 99: they take turns on one lock");
    }
}
