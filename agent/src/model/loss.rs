//! Events the probes could not record, by probe and reason: the labels of
//! `waitmeter_bpf_events_lost_total`, `attach`'s `events_lost` and the remedy said with them.
//! One enum each, matched exhaustively, so a new or renamed reason cannot lose its label or its
//! remedy (docs/runbook.md#waitmeterEventsLost).

/// The probe that lost events (the `probe` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    Sched,
    Stacks,
    Gil,
    Pypark,
    Syscalls,
}

impl Probe {
    pub const fn label(self) -> &'static str {
        match self {
            Probe::Sched => "sched",
            Probe::Stacks => "stacks",
            Probe::Gil => "gil",
            Probe::Pypark => "pypark",
            Probe::Syscalls => "syscalls",
        }
    }
}

/// Why (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    ThreadMapFull,
    ExitRingbufFull,
    BlameMapFull,
    FutexMapFull,
    PreemptMapFull,
    ThrottleRingbufFull,
    StretchMapFull,
    BlameTaken,
    HoldsMapFull,
    ParkedMapFull,
    NativeStackFailed,
    PyStackMapFull,
    WaitStackMapFull,
    ThreadGone,
    PerfMapRefused,
    PerfMapBadLine,
    UnwindNoRoom,
    UnwindMapsFull,
    DebuginfodRefused,
    DebuginfodFailed,
    SyscallMapFull,
    TaskStorageFailed,
    ThreadUnsettled,
    SpanRingbufFull,
}

impl Reason {
    /// Counted in user space as code is named (a perf map's, a debug file's, an unwind table's):
    /// what it costs is a name or a frame anywhere in the run's stacks, not an event of a window.
    pub const fn of_naming(self) -> bool {
        matches!(
            self,
            Reason::PerfMapRefused
                | Reason::PerfMapBadLine
                | Reason::DebuginfodRefused
                | Reason::DebuginfodFailed
                | Reason::UnwindNoRoom
                | Reason::UnwindMapsFull
        )
    }

    pub const fn label(self) -> &'static str {
        match self {
            Reason::ThreadMapFull => "thread_map_full",
            Reason::ExitRingbufFull => "exit_ringbuf_full",
            Reason::BlameMapFull => "blame_map_full",
            Reason::FutexMapFull => "futex_map_full",
            Reason::PreemptMapFull => "preempt_map_full",
            Reason::ThrottleRingbufFull => "throttle_ringbuf_full",
            Reason::StretchMapFull => "stretch_map_full",
            Reason::BlameTaken => "blame_taken",
            Reason::HoldsMapFull => "holds_map_full",
            Reason::ParkedMapFull => "parked_map_full",
            Reason::NativeStackFailed => "native_stack_failed",
            Reason::PyStackMapFull => "py_stack_map_full",
            Reason::WaitStackMapFull => "wait_stack_map_full",
            Reason::ThreadGone => "thread_gone",
            Reason::PerfMapRefused => "perf_map_refused",
            Reason::PerfMapBadLine => "perf_map_bad_line",
            Reason::UnwindNoRoom => "unwind_no_room",
            Reason::UnwindMapsFull => "unwind_maps_full",
            Reason::DebuginfodRefused => "debuginfod_refused",
            Reason::DebuginfodFailed => "debuginfod_failed",
            Reason::SyscallMapFull => "syscall_map_full",
            Reason::TaskStorageFailed => "task_storage_failed",
            Reason::ThreadUnsettled => "thread_unsettled",
            Reason::SpanRingbufFull => "span_ringbuf_full",
        }
    }

    /// What to do about it, said with the count.
    pub const fn remedy(self) -> &'static str {
        match self {
            Reason::ExitRingbufFull => "raise --exit-buffer-kib (thread exits came faster than they were read)",
            Reason::ThrottleRingbufFull => "throttled stretches came faster than they were read",
            Reason::SpanRingbufFull => {
                "the timeline's spans came faster than they were read: its drawing has gaps there (raise --timeline-buffer-kib)"
            }
            Reason::ThreadMapFull | Reason::HoldsMapFull | Reason::ParkedMapFull | Reason::SyscallMapFull | Reason::StretchMapFull => {
                "raise --max-threads"
            }
            Reason::BlameMapFull | Reason::FutexMapFull | Reason::PreemptMapFull => {
                "more waiter/culprit pairs at once than the blame maps hold"
            }
            Reason::WaitStackMapFull | Reason::PyStackMapFull => {
                "more distinct wait stacks than the stack maps hold: raise --stack-interval"
            }
            Reason::NativeStackFailed => {
                "native stack walks failed (the stack map full or its hash bucket taken): those waits have no native stack"
            }
            Reason::BlameTaken => {
                "waits charged to a blame entry in the instant the agent took it (a race the probe resolves unless the map is full)"
            }
            Reason::ThreadGone => "waits drained after their thread was no longer known to the session (threads that exit quickly)",
            Reason::TaskStorageFailed => "the kernel refused the per-task storage: some syscalls were not counted",
            Reason::ThreadUnsettled => {
                "a thread's entry was being written through 2 ms of copies: the last copy was used as it was, and may mix two moments"
            }
            Reason::PerfMapRefused => {
                "a JIT's perf map was not read (not a regular file, not the process's user's, or past 256 MiB): its frames stay unnamed"
            }
            Reason::DebuginfodRefused => {
                "a debuginfod server's answer was not the debug file asked for (another build ID, not ELF, too large, malformed): deleted, the object's internal functions stay unnamed"
            }
            Reason::DebuginfodFailed => {
                "no debuginfod server in DEBUGINFOD_URLS had a stripped object's debug file, or none answered: its internal functions stay unnamed"
            }
            Reason::UnwindNoRoom => {
                "objects built without frame pointers whose unwind rows did not fit the probe's array: stacks stop where they enter their code"
            }
            Reason::UnwindMapsFull => {
                "code mappings without frame pointers past the 32 a process's walk reads by table: stacks stop where they enter their code"
            }
            Reason::PerfMapBadLine => {
                "lines of a JIT's perf map were malformed or past its bound of ranges, and skipped: their code stays unnamed"
            }
        }
    }
}

/// Events lost so far (or in a window) by one probe for one reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    pub probe: Probe,
    pub reason: Reason,
    pub count: u64,
}

impl Lost {
    pub const fn new(probe: Probe, reason: Reason, count: u64) -> Lost {
        Lost { probe, reason, count }
    }

    /// How many of `lost` were lost for `reason` (by any probe).
    pub fn of(lost: &[Lost], reason: Reason) -> u64 {
        lost.iter().filter(|l| l.reason == reason).map(|l| l.count).sum()
    }

    /// The same, less what `before` had counted of it (a window's share of a running total). A
    /// loss of naming (`Reason::of_naming`) is the run's, not the window's: it is kept whole, for
    /// the names it cost are in the report whenever the map or file was read (a JIT's perf map is
    /// read at the first stack that needs it, which may be the window's baseline).
    pub fn since(self, before: &[Lost]) -> Lost {
        if self.reason.of_naming() {
            return self;
        }
        let was = before.iter().find(|l| l.probe == self.probe && l.reason == self.reason).map_or(0, |l| l.count);
        Lost { count: self.count.saturating_sub(was), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_counts_what_was_lost_in_it() {
        let before = [Lost::new(Probe::Sched, Reason::ExitRingbufFull, 5), Lost::new(Probe::Stacks, Reason::ThreadGone, 9)];
        assert_eq!(Lost::new(Probe::Sched, Reason::ExitRingbufFull, 12).since(&before).count, 7);
        // another probe's count of the same name is not this one's
        assert_eq!(Lost::new(Probe::Sched, Reason::ThreadGone, 3).since(&before).count, 3);
        // a counter that went back (a probe reloaded) is no negative loss
        assert_eq!(Lost::new(Probe::Stacks, Reason::ThreadGone, 4).since(&before).count, 0);
        // a loss of naming counted before the window (a perf map read for the baseline's stacks) is the run's
        let naming = [Lost::new(Probe::Stacks, Reason::PerfMapBadLine, 1_000_000)];
        assert_eq!(Lost::new(Probe::Stacks, Reason::PerfMapBadLine, 1_000_000).since(&naming).count, 1_000_000);
    }

    #[test]
    fn labels_are_the_exported_names() {
        assert_eq!(Probe::Pypark.label(), "pypark");
        assert_eq!(Reason::StretchMapFull.label(), "stretch_map_full");
        assert!(Reason::StretchMapFull.remedy().contains("--max-threads"));
    }
}
