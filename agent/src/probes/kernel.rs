//! What the running kernel offers the probes, probed once before they load: the floor below which
//! waitmeter refuses in one line, and the features whose absence selects a fallback variant of a
//! program (as libbpf-tools' `probe_tp_btf()` and `libbpf_probe_bpf_helper()` choose at load time).
//!
//! The floor is the BPF ring buffer (Linux 5.8), the last of what every program needs: BTF-typed
//! tracepoints (5.5), `bpf_probe_read_kernel()` (5.5), global functions (5.6), task iterators (5.8).
//! Debian 11's 5.10 is the oldest kernel tested (tests/kernels). Above the floor:
//! - `bpf_loop()` (5.17): the sched probe's main object, whose native stack walker's steps and
//!   unwind-table search run in it, and whose sweep empties the blame maps. Without it the legacy
//!   object (bpf/core_fixes.bpf.h), built from the same source for what 5.10 has (no callbacks, no
//!   atomics but add, the current task and its registers read with helpers): native stacks are
//!   walked by frame pointers alone, in a bounded loop (code built without them shows its first
//!   frame only), and the blame maps are read whole.
//! - task local storage (usable from tracing programs from 5.13): `--syscalls on` only.
//! - the per-CPU preempt count named in the kernel's symbols (`CONFIG_KALLSYMS_ALL`, which
//!   Debian's kernels have): a wakeup from interrupt context (the network's softirq, a timer, a
//!   device) is told apart from the task it interrupted. Without it (a typed per-CPU symbol
//!   fails the program's load) the probe tells an interrupt only where it interrupted a task
//!   outside a system call.
//!
//! `WAITMETER_KERNEL_WITHOUT=bpf_loop,task_storage,irq_context` makes the agent act as if the kernel lacked
//! them (and `ringbuf`, as if it were below the floor): how the fallbacks and the refusal are
//! tested on a kernel that has everything.
use std::collections::BTreeSet;

use libbpf_rs::libbpf_sys;
use serde::Serialize;

/// A feature above the floor, whose absence degrades something.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    BpfLoop,
    TaskStorage,
    IrqContext,
}

impl Feature {
    pub const ALL: [Feature; 3] = [Feature::BpfLoop, Feature::TaskStorage, Feature::IrqContext];

    pub fn name(self) -> &'static str {
        match self {
            Feature::BpfLoop => "bpf_loop",
            Feature::TaskStorage => "task_storage",
            Feature::IrqContext => "irq_context",
        }
    }

    /// What brings it: a Linux version, or a build option.
    pub fn needs(self) -> &'static str {
        match self {
            Feature::BpfLoop => "Linux 5.17",
            Feature::TaskStorage => "Linux 5.11",
            Feature::IrqContext => "a kernel built with CONFIG_KALLSYMS_ALL",
        }
    }

    /// Whether its absence changes every measurement, and so is said on stderr at every start.
    /// The others are in the report's environment, the `waitmeter_kernel_feature` metric and the
    /// log at `-v`: task local storage is needed by `--syscalls on` alone, which refuses without
    /// it in a line of its own; the interrupt context changes only the waker of a wait an
    /// interrupt ended while it interrupted a system call.
    pub fn warns(self) -> bool {
        matches!(self, Feature::BpfLoop)
    }

    /// What waitmeter does without it.
    pub fn without(self) -> &'static str {
        match self {
            Feature::BpfLoop => {
                "the legacy probes: native stacks are walked by frame pointers only (code built without them shows its first frame), and the blame maps are read whole"
            }
            Feature::TaskStorage => "--syscalls on is not available",
            Feature::IrqContext => {
                "a wakeup from an interrupt is told apart only where it interrupted a task outside a system call; one that interrupted a system call is charged to that task"
            }
        }
    }
}

/// The running kernel as the probes see it.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    /// `uname -r`
    pub release: String,
    /// the features above the floor it has
    pub features: BTreeSet<Feature>,
}

impl Kernel {
    /// Probe the running kernel (a few tiny program loads, ~1 ms each). `Err`: below the floor,
    /// one line naming the kernel and what it lacks.
    pub fn probe() -> Result<Kernel, String> {
        let release = release();
        let without = forced_off();
        let helper = |id| {
            // SAFETY: a probe load of a two-instruction program; no pointer is kept.
            unsafe { libbpf_sys::libbpf_probe_bpf_helper(libbpf_sys::BPF_PROG_TYPE_RAW_TRACEPOINT, id, std::ptr::null()) == 1 }
        };
        // SAFETY: a probe creation of a map; no pointer is kept.
        let map = |t| unsafe { libbpf_sys::libbpf_probe_bpf_map_type(t, std::ptr::null()) == 1 };
        if without.contains("ringbuf") || !map(libbpf_sys::BPF_MAP_TYPE_RINGBUF) {
            return Err(below_floor(&release, "the BPF ring buffer (Linux 5.8)"));
        }
        let mut features = BTreeSet::new();
        if helper(libbpf_sys::BPF_FUNC_loop) {
            features.insert(Feature::BpfLoop);
        }
        if map(libbpf_sys::BPF_MAP_TYPE_TASK_STORAGE) {
            features.insert(Feature::TaskStorage);
        }
        if preempt_count_named() {
            features.insert(Feature::IrqContext);
        }
        features.retain(|f| !without.contains(f.name()));
        Ok(Kernel { release, features })
    }

    pub fn has(&self, f: Feature) -> bool {
        self.features.contains(&f)
    }

    /// The features it lacks, each with what waitmeter does without it.
    pub fn degraded(&self) -> Vec<String> {
        Feature::ALL.iter().filter(|f| !self.has(**f)).map(|f| degraded(*f)).collect()
    }

    /// One line for the log when anything is degraded: `.0` what changes every measurement (a
    /// warning), `.1` the rest (information).
    pub fn summary(&self) -> (Option<String>, Option<String>) {
        let line = |warns: bool| {
            let d: Vec<String> = Feature::ALL.iter().filter(|f| !self.has(**f) && f.warns() == warns).map(|f| degraded(*f)).collect();
            (!d.is_empty()).then(|| format!("kernel {}: {}", self.release, d.join("; ")))
        };
        (line(true), line(false))
    }
}

fn degraded(f: Feature) -> String {
    format!("no {} ({}): {}", f.name(), f.needs(), f.without())
}

/// Whether the kernel's symbols (`/proc/kallsyms`, addresses shown to root) name the per-CPU
/// preempt count, `__preempt_count` or (6.2 to 6.14) `pcpu_hot`: where they do not, a program
/// that reads it as a typed per-CPU symbol fails to load.
fn preempt_count_named() -> bool {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open("/proc/kallsyms") else { return false };
    std::io::BufReader::new(f).lines().map_while(Result::ok).any(|l| {
        let mut f = l.split_ascii_whitespace();
        let (addr, name) = (f.next().unwrap_or(""), f.nth(1).unwrap_or(""));
        (name == "__preempt_count" || name == "pcpu_hot") && addr.bytes().any(|b| b != b'0')
    })
}

/// The refusal below the floor: the kernel, what it lacks, the floor.
pub fn below_floor(release: &str, lacks: &str) -> String {
    format!(
        "kernel {release} lacks {lacks}: waitmeter needs Linux 5.8 or later with BTF (tested: Debian's 5.10, 6.1 and 6.12, and 6.18; docs/deployment.md): run it on a newer kernel"
    )
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_else(|_| "(unknown)".into())
}

/// The features `WAITMETER_KERNEL_WITHOUT` names (comma-separated).
fn forced_off() -> BTreeSet<String> {
    std::env::var("WAITMETER_KERNEL_WITHOUT")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_lines_name_the_feature_its_kernel_and_the_consequence() {
        let k = Kernel { release: "5.16.0".into(), features: [Feature::TaskStorage, Feature::IrqContext].into() };
        let d = k.degraded();
        assert_eq!(d.len(), 1);
        assert!(d[0].starts_with("no bpf_loop (Linux 5.17): the legacy probes: native stacks are walked by frame pointers only"), "{d:?}");
        assert_eq!(k.summary().0.unwrap().split(": ").next(), Some("kernel 5.16.0"));
        assert_eq!(k.summary().1, None);
        // without the preempt count among the kernel's symbols: what sched_waking tells apart less
        let no_irq = Kernel { release: "6.18".into(), features: [Feature::BpfLoop, Feature::TaskStorage].into() };
        assert_eq!(no_irq.degraded(), ["no irq_context (a kernel built with CONFIG_KALLSYMS_ALL): a wakeup from an interrupt is told apart only where it interrupted a task outside a system call; one that interrupted a system call is charged to that task"]);
        // said at -v, not warned of at every start (a host without CONFIG_KALLSYMS_ALL)
        assert_eq!(no_irq.summary().0, None);
        assert_eq!(no_irq.summary().1.unwrap(), format!("kernel 6.18: {}", no_irq.degraded()[0]));
        let full = Kernel { release: "6.18".into(), features: Feature::ALL.into() };
        assert!(full.degraded().is_empty() && full.summary() == (None, None));
    }

    #[test]
    fn the_refusal_names_the_kernel_what_it_lacks_and_the_floor() {
        let line = below_floor("5.4.0-216-generic", "the BPF ring buffer (Linux 5.8)");
        assert!(line.starts_with("kernel 5.4.0-216-generic lacks the BPF ring buffer (Linux 5.8)"), "{line}");
        assert!(line.contains("Linux 5.8 or later") && !line.contains('\n'));
    }
}
