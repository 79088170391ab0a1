//! A CPU-clock timer on every online CPU that runs a `perf_event` BPF
//! program in whatever thread has the CPU: how the GIL holder's native stack
//! is taken in its own context (bpf/holder_samples.bpf.h).
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::{Link, ProgramMut};

/// `struct perf_event_attr` up to `config1` (PERF_ATTR_SIZE_VER0, which every
/// kernel with BPF accepts); the fields after `sample_period` stay 0.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// CPUs in a kernel CPU list ("0-3,6,8-9"); None if malformed.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = vec![];
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if b < a || b - a > 65_536 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

fn open(cpu: u32, period_ns: u64) -> std::io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period: period_ns,
        ..Default::default()
    };
    // SAFETY: perf_event_open reads `attr` (valid, sized by its `size`) and
    // returns a new file descriptor or -1; no other memory is touched.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attach `prog` to a CPU clock ticking `hz` times a second on every online
/// CPU. The links own the events: dropping them stops the timers.
pub fn attach(prog: &mut ProgramMut, hz: u32) -> Result<Vec<Link>> {
    if hz == 0 {
        bail!("the sampling rate is 0");
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").context("failed to read /sys/devices/system/cpu/online")?;
    let cpus = parse_cpu_list(&online).with_context(|| format!("cannot parse the online CPUs {online:?}"))?;
    let mut links = Vec::with_capacity(cpus.len());
    for cpu in cpus {
        let fd = open(cpu, 1_000_000_000 / u64::from(hz)).with_context(|| format!("perf_event_open of a CPU clock on CPU {cpu}"))?;
        // libbpf takes the descriptor over: the link closes it
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        match prog.attach_perf_event(raw) {
            Ok(l) => links.push(l),
            Err(e) => {
                // SAFETY: not taken over on failure: still ours to close.
                drop(unsafe { OwnedFd::from_raw_fd(raw) });
                return Err(e).with_context(|| format!("failed to attach the holder sampler on CPU {cpu}"));
            }
        }
    }
    Ok(links)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list("0-4294967295"), None);
        assert_eq!(size_of::<PerfEventAttr>(), 64);
    }
}
