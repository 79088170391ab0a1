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

/// Counted under this number: any number out of range (ABI: WM_SYS_NR_OTHER of bpf/syscalls.h).
pub const NR_OTHER: u32 = 512;

/// Clock reads that the vDSO answers in user space when it can read the clock source: as
/// syscalls, each costs a kernel entry (about 1 µs with an HPET or ACPI PM timer instead of 25 ns).
#[cfg(target_arch = "x86_64")]
pub const CLOCK_READS: &[u32] = &[228 /* clock_gettime */, 96 /* gettimeofday */, 201 /* time */];

/// A syscall's name: "syscall_N" for a number the table does not know, "other" for the bucket
/// of numbers out of range.
pub fn name(nr: u32) -> String {
    if nr == NR_OTHER {
        return "other".to_string();
    }
    match super::syscall_names::NAMES.binary_search_by_key(&nr, |(n, _)| *n) {
        Ok(i) => super::syscall_names::NAMES[i].1.to_string(),
        Err(_) => format!("syscall_{nr}"),
    }
}

/// One thread's calls of one syscall in the window: how many returned, and the time from entry
/// to return summed (in the kernel, blocked time included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallCount {
    pub nr: u32,
    pub calls: u64,
    pub ns: u64,
}

/// The syscalls of the watched threads, as of the probe's last reading: host TID -> its
/// syscalls, most calls first. The probe's counts are cumulative per thread, so the latest
/// reading of a thread is its total; a thread that is gone keeps its last reading.
#[derive(Debug, Default)]
pub struct Tally {
    by_tid: std::collections::HashMap<u32, std::collections::BTreeMap<u32, SyscallCount>>,
}

impl Tally {
    /// Note one reading: (host TID, number, calls, ns) each, cumulative.
    pub fn note(&mut self, reading: impl IntoIterator<Item = (u32, u32, u64, u64)>) {
        for (tid, nr, calls, ns) in reading {
            self.by_tid.entry(tid).or_default().insert(nr, SyscallCount { nr, calls, ns });
        }
    }

    /// A thread's syscalls, most calls first (then most time, then by number).
    pub fn of(&self, host_tid: u32) -> Vec<SyscallCount> {
        let mut v: Vec<SyscallCount> = self.by_tid.get(&host_tid).map(|m| m.values().copied().collect()).unwrap_or_default();
        v.sort_by_key(|c| (std::cmp::Reverse(c.calls), std::cmp::Reverse(c.ns), c.nr));
        v
    }
}

/// Of a thread's syscalls, the clock reads (`CLOCK_READS`) summed: (calls, ns).
pub fn clock_reads(counts: &[SyscallCount]) -> (u64, u64) {
    counts.iter().filter(|c| CLOCK_READS.contains(&c.nr)).fold((0, 0), |(n, t), c| (n + c.calls, t + c.ns))
}

/// The bucket a syscall is counted in by the metrics: a clock read by its own number, the
/// rest `NR_OTHER` (a bounded `syscall` label: four values).
pub fn metric_bucket(nr: u32) -> u32 {
    if CLOCK_READS.contains(&nr) {
        nr
    } else {
        NR_OTHER
    }
}

/// Per watched process (by session target id), its threads' syscalls since it was watched, in
/// the metric's buckets (`metric_bucket`): monotonic counters, whatever threads come and go.
#[derive(Debug, Default)]
pub struct ProcessTotals {
    /// the final counts of threads that are gone, folded
    folded: std::collections::BTreeMap<(u64, u32), u64>,
    /// folded plus the live threads' counts, as of the last update
    current: std::collections::BTreeMap<(u64, u32), u64>,
}

impl ProcessTotals {
    /// Take a reading: (target, host TID, number, calls) each, cumulative per thread. The counts
    /// of threads for which `live` is false are final: they are folded, and their TIDs
    /// returned for the probe to delete (after which they are never read again).
    pub fn update(&mut self, reading: impl IntoIterator<Item = (u64, u32, u32, u64)>, live: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut current = self.folded.clone();
        let mut gone = vec![];
        for (target, tid, nr, calls) in reading {
            let key = (target, metric_bucket(nr));
            if live(tid) {
                *current.entry(key).or_default() += calls;
            } else {
                *self.folded.entry(key).or_default() += calls;
                *current.entry(key).or_default() += calls;
                gone.push(tid);
            }
        }
        // a counter never goes back (a thread read twice while exiting, a reading short of one)
        for (k, was) in &self.current {
            let v = current.entry(*k).or_default();
            *v = (*v).max(*was);
        }
        self.current = current;
        gone.sort_unstable();
        gone.dedup();
        gone
    }

    /// (target, bucket's name, calls) of every series.
    pub fn series(&self) -> Vec<(u64, String, u64)> {
        self.current.iter().map(|((t, nr), n)| (*t, name(*nr), *n)).collect()
    }

    /// Forget a process that is gone.
    pub fn forget(&mut self, target: u64) {
        self.folded.retain(|k, _| k.0 != target);
        self.current.retain(|k, _| k.0 != target);
    }
}

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
        // the classification's names are the kernel's
        assert!(CLASSIFIED.iter().all(|c| name(c.0) == c.1), "a classified syscall is misnamed");
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

    #[test]
    fn names_are_the_kernels_and_the_table_is_sorted() {
        let names = crate::model::syscall_names::NAMES;
        assert!(names.windows(2).all(|w| w[0].0 < w[1].0), "NAMES must be ascending for the binary search");
        assert_eq!(name(0), "read");
        assert_eq!(name(228), "clock_gettime");
        assert_eq!(name(96), "gettimeofday");
        assert_eq!(name(455), "futex_wait");
        assert_eq!(name(511), "syscall_511");
        assert_eq!(name(NR_OTHER), "other");
        assert_eq!(NR_OTHER as usize, MAX_SYSCALLS);
    }

    #[test]
    fn a_tally_keeps_the_last_cumulative_reading_and_sorts_by_calls() {
        let mut t = Tally::default();
        t.note([(7, 228, 10, 1_000), (7, 0, 3, 9_000_000)]);
        t.note([(7, 228, 25, 2_500), (8, 1, 1, 10)]);
        assert_eq!(t.of(7), [SyscallCount { nr: 228, calls: 25, ns: 2_500 }, SyscallCount { nr: 0, calls: 3, ns: 9_000_000 }]);
        assert_eq!(t.of(8).len(), 1);
        assert!(t.of(9).is_empty());
        assert_eq!(clock_reads(&t.of(7)), (25, 2_500));
        let both = [SyscallCount { nr: 96, calls: 4, ns: 40 }, SyscallCount { nr: 228, calls: 6, ns: 60 }];
        assert_eq!(clock_reads(&both), (10, 100));
    }

    #[test]
    fn process_totals_fold_exited_threads_and_never_go_back() {
        let mut t = ProcessTotals::default();
        // thread 7 of target 1 reads the clock; thread 8 reads files
        let gone = t.update([(1, 7, 228, 100), (1, 8, 0, 5), (1, 8, 1, 2)], |_| true);
        assert!(gone.is_empty());
        assert_eq!(t.series(), [(1, "clock_gettime".to_string(), 100), (1, "other".to_string(), 7)]);
        // 8 exits after more reads: folded, returned to be deleted
        let gone = t.update([(1, 7, 228, 150), (1, 8, 0, 9), (1, 8, 1, 2)], |tid| tid == 7);
        assert_eq!(gone, [8]);
        assert_eq!(t.series(), [(1, "clock_gettime".to_string(), 150), (1, "other".to_string(), 11)]);
        // deleted: no longer read, still counted
        t.update([(1, 7, 228, 160)], |_| true);
        assert_eq!(t.series(), [(1, "clock_gettime".to_string(), 160), (1, "other".to_string(), 11)]);
        // a reading that lacks a live thread's entry (deleted by mistake) does not go back
        t.update([], |_| true);
        assert_eq!(t.series()[0].2, 160);
        t.forget(1);
        assert!(t.series().is_empty());
        assert_eq!(metric_bucket(96), 96);
        assert_eq!(metric_bucket(0), NR_OTHER);
    }
}
