//! "clock syscalls:": a thread read the clock with real syscalls (clock_gettime, gettimeofday,
//! time) at a high rate, and they took a share of its time: what the vDSO answers in ~25 ns in
//! user space cost a kernel entry each (the syscall probe).
use std::fmt;

use serde::Serialize;

use super::super::environment::Environment;
use super::super::evidence::{human_rate, ThreadRef};
use super::super::serial::{rounded, seconds};
use super::super::ThreadRow;
use super::rows::{present, row_ref};
use super::{Claim, Context};
use crate::model::partition::secs;
use crate::model::state::State;

/// Clock reads by syscall are a finding from this rate (per second of the thread's time) ...
pub const CLOCK_SYSCALL_RATE: f64 = 1000.0;
/// ... when the time inside them is this share of the thread's running time or more.
pub const CLOCK_SYSCALL_SHARE: f64 = 0.05;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClockSyscalls {
    pub thread: ThreadRef,
    /// the calls, per second of the thread's time in the window, and the time inside them
    pub calls: u64,
    #[serde(serialize_with = "rounded")]
    pub per_s: f64,
    #[serde(rename = "kernel_s", serialize_with = "seconds")]
    pub kernel_ns: u64,
    #[serde(rename = "running_s", serialize_with = "seconds")]
    pub running_ns: u64,
    /// the machine's clock source, and whether the vDSO can read it (None: not known)
    pub clocksource: Option<String>,
    pub vdso: Option<bool>,
}

/// A thread that read the clock through real syscalls often enough for them to cost a share
/// of its running time (the syscall probe's counts; none without it).
fn clock_syscalls(r: &ThreadRow, env: Option<&Environment>, window_ns: u64) -> Option<ClockSyscalls> {
    if !present(r, window_ns) {
        return None;
    }
    let (calls, kernel_ns) = crate::model::syscalls::clock_reads(&r.syscalls);
    let per_s = calls as f64 / secs(r.times.total()).max(1e-9);
    let running_ns = r.times.get(State::Running);
    (per_s >= CLOCK_SYSCALL_RATE && kernel_ns as f64 >= CLOCK_SYSCALL_SHARE * running_ns as f64).then(|| ClockSyscalls {
        thread: row_ref(r),
        calls,
        per_s,
        kernel_ns,
        running_ns,
        clocksource: env.and_then(|e| e.clocksource.clone()),
        vdso: env.and_then(|e| e.clock_vdso),
    })
}

pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    let env = cx.report.environment.as_ref();
    cx.rows.iter().filter_map(|r| clock_syscalls(r, env, cx.window_ns)).map(|c| -> Box<dyn Claim> { Box::new(c) }).collect()
}

impl Claim for ClockSyscalls {
    fn kind(&self) -> &'static str {
        "clock_syscalls"
    }
    fn explains_ns(&self) -> u64 {
        self.kernel_ns
    }
}

impl fmt::Display for ClockSyscalls {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let ClockSyscalls { thread, calls, per_s, kernel_ns, running_ns, clocksource, vdso } = self;
        let why = match (clocksource, vdso) {
            (Some(cs), Some(false)) => format!(
                "the kernel reads time from {cs}, which the vDSO cannot use, so every clock read is a system call (about 1 µs instead of 25 ns); expected tsc (dmesg: look for 'clocksource' and 'TSC unstable')"
            ),
            (Some(cs), Some(true)) => format!(
                "the clock source ({cs}) is one the vDSO reads in user space, so this code makes the syscall itself (syscall(2), a static or old C library, a seccomp filter or a runtime that bypasses the vDSO): call clock_gettime through the C library"
            ),
            _ => "either the clock source is one the vDSO cannot read or this code bypasses the vDSO".to_string(),
        };
        write!(
            f,
            "clock syscalls: thread {} read the clock with {} system calls ({}/s), {:.2} s inside them, {:.0}% of its {:.2} s running: {why}",
            thread.or_a_thread(),
            human_rate(*calls as f64),
            human_rate(*per_s),
            secs(*kernel_ns),
            100.0 * *kernel_ns as f64 / (*running_ns).max(1) as f64,
            secs(*running_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::report::fixtures::*;

    #[test]
    fn clock_reads_by_syscall_are_a_finding_that_names_the_cause() {
        use crate::model::syscalls::SyscallCount;
        use crate::report::environment::{vdso_capable, Environment};
        let env = |cs: &str| Environment { clocksource: Some(cs.into()), clock_vdso: Some(vdso_capable(cs)), ..Default::default() };
        // 2M clock_gettime syscalls in 10 s, 0.9 s inside them, of 4 s running; sleeps the rest
        let reader = |calls: u64, ns: u64| ThreadRow {
            syscalls: vec![SyscallCount { nr: 228, calls, ns }, SyscallCount { nr: 0, calls: 10, ns: 5 * S }],
            ..row(1, "reader", &[(State::Running, 4 * S), (State::Sleep, 6 * S)])
        };
        let report = |r: ThreadRow, cs: &str| {
            let mut p = ProcessReport::new(1, "svc".into(), None, 10 * S, None, vec![r]).with_environment(env(cs));
            p.cpu_limit_cores = 4.0;
            p
        };
        // the clock source the vDSO cannot read: said once, in the thread's finding
        let f = all_findings(&report(reader(2_000_000, 900_000_000), "hpet"));
        assert_eq!(kinds(&f), ["clock_syscalls"], "{f:?}");
        let line = f[0].to_string();
        assert!(line.starts_with("clock syscalls: thread reader (1) read the clock with 2.0M system calls (200k/s), 0.90 s inside them, 22% of its 4.00 s running: the kernel reads time from hpet"), "{line}");
        assert_eq!(f[0].explains_ns, 900_000_000);
        // tsc: the code bypasses the vDSO
        let f = all_findings(&report(reader(2_000_000, 900_000_000), "tsc"));
        assert!(
            f[0].to_string().contains("the clock source (tsc) is one the vDSO reads in user space, so this code makes the syscall itself"),
            "{}",
            f[0]
        );
        // a few clock syscalls a second, or cheap ones, are nothing
        assert_eq!(kinds(&all_findings(&report(reader(5_000, 100_000_000), "tsc"))), ["healthy"]);
        assert_eq!(kinds(&all_findings(&report(reader(2_000_000, 100_000_000), "tsc"))), ["healthy"]);
        // the read(2) time of the thread is not a clock read
        assert_eq!(crate::model::syscalls::clock_reads(&reader(1, 1).syscalls), (1, 1));
    }
}
