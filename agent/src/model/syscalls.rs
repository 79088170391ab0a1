//! Which state a thread blocked in a given syscall is in (x86-64 numbers).
//!
//! The BPF side receives this table as read-only config (`syscall_state[]`),
//! so the classification is defined once, here, and unit-tested.
use super::state::State;

/// Syscalls numbered at or above this are classified `other` (ABI: WM_MAX_SYSCALLS).
pub const MAX_SYSCALLS: usize = 512;

/// (number, name, state): every syscall that is not `other`.
#[cfg(target_arch = "x86_64")]
pub const CLASSIFIED: &[(u32, &str, State)] = &[
    // futexes: locks, condition variables, semaphores
    (202, "futex", State::FutexWait),
    (449, "futex_waitv", State::FutexWait),
    (455, "futex_wait", State::FutexWait),
    // sleeping
    (34, "pause", State::Sleep),
    (35, "nanosleep", State::Sleep),
    (230, "clock_nanosleep", State::Sleep),
    (130, "rt_sigsuspend", State::Sleep),
    (128, "rt_sigtimedwait", State::Sleep),
    // I/O: files, sockets, pipes, multiplexers
    (0, "read", State::IoWait),
    (1, "write", State::IoWait),
    (2, "open", State::IoWait),
    (3, "close", State::IoWait),
    (4, "stat", State::IoWait),
    (5, "fstat", State::IoWait),
    (6, "lstat", State::IoWait),
    (7, "poll", State::IoWait),
    (16, "ioctl", State::IoWait),
    (17, "pread64", State::IoWait),
    (18, "pwrite64", State::IoWait),
    (19, "readv", State::IoWait),
    (20, "writev", State::IoWait),
    (23, "select", State::IoWait),
    (26, "msync", State::IoWait),
    (40, "sendfile", State::IoWait),
    (42, "connect", State::IoWait),
    (43, "accept", State::IoWait),
    (44, "sendto", State::IoWait),
    (45, "recvfrom", State::IoWait),
    (46, "sendmsg", State::IoWait),
    (47, "recvmsg", State::IoWait),
    (74, "fsync", State::IoWait),
    (75, "fdatasync", State::IoWait),
    (162, "sync", State::IoWait),
    (208, "io_getevents", State::IoWait),
    (217, "getdents64", State::IoWait),
    (232, "epoll_wait", State::IoWait),
    (242, "mq_timedsend", State::IoWait),
    (243, "mq_timedreceive", State::IoWait),
    (257, "openat", State::IoWait),
    (262, "newfstatat", State::IoWait),
    (270, "pselect6", State::IoWait),
    (271, "ppoll", State::IoWait),
    (275, "splice", State::IoWait),
    (276, "tee", State::IoWait),
    (277, "sync_file_range", State::IoWait),
    (278, "vmsplice", State::IoWait),
    (281, "epoll_pwait", State::IoWait),
    (288, "accept4", State::IoWait),
    (295, "preadv", State::IoWait),
    (296, "pwritev", State::IoWait),
    (299, "recvmmsg", State::IoWait),
    (306, "syncfs", State::IoWait),
    (307, "sendmmsg", State::IoWait),
    (326, "copy_file_range", State::IoWait),
    (327, "preadv2", State::IoWait),
    (328, "pwritev2", State::IoWait),
    (332, "statx", State::IoWait),
    (333, "io_pgetevents", State::IoWait),
    (426, "io_uring_enter", State::IoWait),
    (437, "openat2", State::IoWait),
    (441, "epoll_pwait2", State::IoWait),
];

/// The state of a thread blocked in syscall `nr`.
pub fn syscall_state(nr: u32) -> State {
    CLASSIFIED.iter().find(|(n, _, _)| *n == nr).map(|(_, _, s)| *s).unwrap_or(State::Other)
}

/// The table handed to BPF: index = syscall number, value = state discriminant.
pub fn table() -> [u8; MAX_SYSCALLS] {
    let mut t = [State::Other as u8; MAX_SYSCALLS];
    for (nr, _, state) in CLASSIFIED {
        t[*nr as usize] = *state as u8;
    }
    t
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
            Some((nr, arg0)) => match syscall_state(nr) {
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
    use std::collections::HashSet;

    #[test]
    fn numbers_and_names_are_unique_and_in_range() {
        let nrs: HashSet<_> = CLASSIFIED.iter().map(|c| c.0).collect();
        let names: HashSet<_> = CLASSIFIED.iter().map(|c| c.1).collect();
        assert_eq!(nrs.len(), CLASSIFIED.len());
        assert_eq!(names.len(), CLASSIFIED.len());
        assert!(CLASSIFIED.iter().all(|c| (c.0 as usize) < MAX_SYSCALLS));
    }

    #[test]
    fn blocked_states_only() {
        // a blocked thread is never classified as running, runnable or GIL (the
        // GIL is recognised by futex address, not by syscall number)
        for (_, name, s) in CLASSIFIED {
            assert!(!matches!(s, State::Running | State::Runqueue | State::Throttled | State::GilWait), "{name}");
        }
    }

    #[test]
    fn table_matches_lookup() {
        let t = table();
        for nr in 0..MAX_SYSCALLS as u32 {
            assert_eq!(t[nr as usize], syscall_state(nr) as u8, "syscall {nr}");
        }
        assert_eq!(syscall_state(202), State::FutexWait);
        assert_eq!(syscall_state(0), State::IoWait);
        assert_eq!(syscall_state(35), State::Sleep);
        assert_eq!(syscall_state(61), State::Other); // wait4
        assert_eq!(syscall_state(10_000), State::Other);
    }
}
