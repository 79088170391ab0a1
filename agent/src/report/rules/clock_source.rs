//! "clock source:": the kernel's clock source is one the vDSO cannot read, so every
//! clock_gettime and gettimeofday is a system call (the doctor check of the environment).
use std::fmt;

use serde::Serialize;

use super::clock_syscalls::ClockSyscalls;
use super::{Claim, Context};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClockSource {
    pub clocksource: String,
}

/// The clock source alone, when no thread's clock syscalls (found before) say it already.
pub fn find(cx: &Context) -> Vec<Box<dyn Claim>> {
    match cx.report.environment.as_ref().filter(|e| e.clock_vdso == Some(false) && cx.found::<ClockSyscalls>().next().is_none()) {
        Some(e) => vec![Box::new(ClockSource { clocksource: e.clocksource.clone().unwrap_or_default() })],
        None => vec![],
    }
}

impl Claim for ClockSource {
    fn kind(&self) -> &'static str {
        "clock_source"
    }
    fn tier(&self) -> u8 {
        2
    }
    fn is_problem(&self) -> bool {
        false
    }
    fn quiet(&self) -> bool {
        true
    }
}

impl fmt::Display for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "clock source: the kernel reads time from {}, which the vDSO cannot use: every clock_gettime and gettimeofday is a system call (about 1 µs instead of 25 ns); expected tsc (dmesg: look for 'clocksource' and 'TSC unstable'; --syscalls on counts the process' clock syscalls)",
            self.clocksource
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::report::fixtures::*;

    #[test]
    fn a_clock_source_the_vdso_cannot_read_is_said_and_tsc_is_not() {
        use crate::report::environment::{vdso_capable, Environment};
        let env = |cs: &str| Environment { clocksource: Some(cs.into()), clock_vdso: Some(vdso_capable(cs)), ..Default::default() };
        let rows = || vec![row(1, "main", &[(State::Running, S), (State::Sleep, 9 * S)])];
        let mut r = ProcessReport::new(1, "svc".into(), None, 10 * S, None, rows()).with_environment(env("hpet"));
        r.cpu_limit_cores = 4.0;
        let f = all_findings(&r);
        assert_eq!(kinds(&f), ["healthy", "clock_source"], "{f:?}");
        assert!(f[1].to_string().starts_with("clock source: the kernel reads time from hpet, which the vDSO cannot use"), "{}", f[1]);
        let r = ProcessReport::new(1, "svc".into(), None, 10 * S, None, rows()).with_environment(env("tsc"));
        assert_eq!(kinds(&all_findings(&r)), ["healthy"]);
    }
}
