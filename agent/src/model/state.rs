//! The time-state taxonomy of the design, in one enum.
//!
//! The discriminants are the kernel/user ABI (`enum wm_state` in `bpf/sched.h`);
//! `probes::sched` asserts at compile time that they agree.
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum State {
    /// on a CPU
    Running = 0,
    /// runnable, not on a CPU, cgroup not throttled
    Runqueue = 1,
    /// runnable, but the cgroup's CFS quota is exhausted
    Throttled = 2,
    /// blocked waiting for a CPython GIL
    GilWait = 3,
    /// blocked on any other user-space futex
    FutexWait = 4,
    /// blocked in an I/O syscall or in uninterruptible (disk) wait
    IoWait = 5,
    /// blocked in nanosleep, pause and similar
    Sleep = 6,
    /// any other blocked state
    Other = 7,
    /// runnable after giving the CPU away with sched_yield(2) (a spin-then-yield
    /// wait strategy): idle by choice, not waiting
    Yield = 8,
}

pub const NR_STATES: usize = 9;

impl State {
    /// All states, in ABI order (index == discriminant).
    pub const ALL: [State; NR_STATES] = [
        State::Running,
        State::Runqueue,
        State::Throttled,
        State::GilWait,
        State::FutexWait,
        State::IoWait,
        State::Sleep,
        State::Other,
        State::Yield,
    ];

    /// The stable name used in JSON keys and the `state` label.
    pub const fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Runqueue => "runqueue",
            State::Throttled => "throttled",
            State::GilWait => "gil_wait",
            State::FutexWait => "futex_wait",
            State::IoWait => "io_wait",
            State::Sleep => "sleep",
            State::Other => "other",
            State::Yield => "yield",
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Involuntary waiting: the thread had work and could not do it.
    pub const fn is_waiting(self) -> bool {
        matches!(self, State::Runqueue | State::Throttled | State::GilWait)
    }

    /// Blocked: off the run queue until something wakes it (the probe's `is_blocked`).
    pub const fn is_blocked(self) -> bool {
        matches!(self, State::GilWait | State::FutexWait | State::IoWait | State::Sleep | State::Other)
    }

    pub fn from_index(i: usize) -> Option<State> {
        State::ALL.get(i).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_index_order() {
        for (i, s) in State::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
            assert_eq!(State::from_index(i), Some(*s));
        }
        assert_eq!(State::from_index(NR_STATES), None);
    }

    #[test]
    fn waiting_is_runqueue_throttled_gil() {
        let waiting: Vec<_> = State::ALL.iter().filter(|s| s.is_waiting()).map(|s| s.name()).collect();
        assert_eq!(waiting, ["runqueue", "throttled", "gil_wait"]);
    }
}
