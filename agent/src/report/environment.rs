//! The facts of the machine and the process that decide waits, read once per report (by
//! `procfs::sched_facts`): the clock source (whether the vDSO can serve clock_gettime without a syscall), the CPUs the
//! process may use, the CPUs isolated from the scheduler.
use serde::Serialize;

/// Clock sources the x86-64 and arm64 vDSOs read in user space; with any other
/// (`hpet`, `acpi_pm`, `jiffies`) clock_gettime and gettimeofday enter the kernel.
pub const VDSO_CLOCKSOURCES: [&str; 4] = ["tsc", "kvm-clock", "hyperv_clocksource_tsc_page", "arch_sys_counter"];

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Environment {
    /// /sys/devices/system/clocksource/clocksource0/current_clocksource; null: unreadable
    pub clocksource: Option<String>,
    /// the vDSO serves clock reads from it (`VDSO_CLOCKSOURCES`); null: unknown
    pub clock_vdso: Option<bool>,
    /// the CPUs the process may run on (its main thread's Cpus_allowed_list: affinity within its cpuset)
    pub cpus_allowed: Option<String>,
    /// CPUs isolated from the scheduler's load balancing (isolcpus=); null or "" when none
    pub isolated_cpus: Option<String>,
    /// CPUs without the scheduler tick (nohz_full=)
    pub nohz_full: Option<String>,
    /// the running kernel as the probes were loaded for it; null: not known to the report
    pub kernel: Option<KernelFacts>,
    /// a Go process' runtime: its toolchain's version and the GOMAXPROCS it was started with;
    /// null: not a Go executable (or not readable)
    pub go: Option<crate::runtime::Go>,
}

/// The running kernel: its release, the features above waitmeter's floor it has, and what the
/// ones it lacks degrade (agent/src/probes/kernel.rs).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KernelFacts {
    pub release: String,
    pub features: Vec<String>,
    pub degraded: Vec<String>,
}

impl Environment {
    /// The report's environment from what `procfs::sched_facts` read (the report reads nothing).
    pub fn of(f: crate::procfs::SchedFacts) -> Environment {
        Environment {
            clock_vdso: f.clocksource.as_deref().map(vdso_capable),
            clocksource: f.clocksource,
            cpus_allowed: f.cpus_allowed,
            isolated_cpus: f.isolated_cpus,
            nohz_full: f.nohz_full,
            kernel: None,
            go: None,
        }
    }

    /// With a Go process' runtime facts.
    pub fn with_go(mut self, go: Option<crate::runtime::Go>) -> Environment {
        self.go = go;
        self
    }

    /// With the running kernel's facts.
    pub fn with_kernel(mut self, k: KernelFacts) -> Environment {
        self.kernel = Some(k);
        self
    }
}

/// The vDSO reads this clock source in user space.
pub fn vdso_capable(clocksource: &str) -> bool {
    VDSO_CLOCKSOURCES.contains(&clocksource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_and_process_are_read() {
        let e = Environment::of(crate::procfs::sched_facts(std::process::id()));
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let mine = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
        assert_eq!(e.cpus_allowed.as_deref(), Some(mine));
        assert!(mine.chars().all(|c| c.is_ascii_digit() || c == ',' || c == '-'), "{mine}");
        if let Some(cs) = &e.clocksource {
            assert_eq!(e.clock_vdso, Some(vdso_capable(cs)));
        }
        assert_eq!(crate::procfs::sched_facts(u32::MAX).cpus_allowed, None);
    }

    #[test]
    fn hpet_and_acpi_pm_are_not_read_by_the_vdso() {
        assert!(vdso_capable("tsc") && vdso_capable("kvm-clock"));
        assert!(!vdso_capable("hpet") && !vdso_capable("acpi_pm") && !vdso_capable("jiffies"));
    }
}
