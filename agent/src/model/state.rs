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
}

pub const NR_STATES: usize = 8;

impl State {
    /// All states, in ABI order (index == discriminant).
    pub const ALL: [State; NR_STATES] =
        [State::Running, State::Runqueue, State::Throttled, State::GilWait, State::FutexWait, State::IoWait, State::Sleep, State::Other];

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
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }

    /// Involuntary waiting: the thread had work and could not do it.
    pub const fn is_waiting(self) -> bool {
        matches!(self, State::Runqueue | State::Throttled | State::GilWait)
    }

    pub fn from_index(i: usize) -> Option<State> {
        State::ALL.get(i).copied()
    }
}

/// The state of a thread that already existed when the window opened, from
/// `/proc/PID/task/TID/stat` (state letter) and `/proc/PID/task/TID/syscall`.
///
/// `R` is running or runnable (procfs does not tell them apart): counted as
/// running until the first context switch tells the truth, which is at most
/// one scheduler time slice later.
/// `gil_word` says whether a futex address is a GIL's (then the thread is in `gil_wait`).
pub fn initial_state(stat_state: char, syscall: Option<(u32, u64)>, gil_word: impl Fn(u64) -> bool) -> State {
    match stat_state {
        'R' => State::Running,
        'S' | 'D' | 'I' => match syscall {
            Some((nr, arg0)) => match crate::model::syscalls::syscall_state(nr) {
                State::FutexWait if gil_word(arg0) => State::GilWait,
                s => s,
            },
            None if stat_state == 'D' => State::IoWait,
            None => State::Other,
        },
        _ => State::Other,
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

    #[test]
    fn initial_state_from_procfs() {
        let no_gil = |_| false;
        assert_eq!(initial_state('R', None, no_gil), State::Running);
        assert_eq!(initial_state('S', Some((0, 3)), no_gil), State::IoWait); // read
        assert_eq!(initial_state('S', Some((202, 0x1000)), no_gil), State::FutexWait); // futex
        assert_eq!(initial_state('S', Some((202, 0x1000)), |a| a == 0x1000), State::GilWait);
        assert_eq!(initial_state('S', Some((0, 0x1000)), |a| a == 0x1000), State::IoWait);
        assert_eq!(initial_state('S', Some((230, 0)), no_gil), State::Sleep); // clock_nanosleep
        assert_eq!(initial_state('D', None, no_gil), State::IoWait);
        assert_eq!(initial_state('S', None, no_gil), State::Other);
        assert_eq!(initial_state('T', Some((0, 0)), no_gil), State::Other);
    }
}
