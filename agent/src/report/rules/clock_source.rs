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
    fn precedence(&self) -> u8 {
        6
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
