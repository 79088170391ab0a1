//! Who made a thread wait: futex wakers and addresses, run-queue preemptors, the waker of
//! every other wait.
//! Pure aggregation over the probe's blame records.
use std::collections::BTreeMap;

/// The waker (or the preempting thread and process) standing for the
/// counterparts of one waiter beyond the number kept by name: threads and
/// processes that made it wait and have since exited or gone quiet.
pub const GONE: u32 = u32::MAX;

/// Bit 63 of a futex wait's `addr`: the address is not the futex word but
/// what a CPython 3.13+ thread parked on in the interpreter's parking lot (a
/// `PyMutex`: a free-threaded build's per-object lock, a `threading.Lock`;
/// an event, a once-flag), noted by the pypark probe. The thread slept on a
/// semaphore of its own; the address names what it waited for. User-space
/// addresses never have the bit, so it cannot collide with a futex word.
pub const PARKED: u64 = 1 << 63;

/// The address of a futex wait's `addr`, without the `PARKED` bit.
pub fn address(addr: u64) -> u64 {
    addr & !PARKED
}

/// Whether a futex wait's `addr` is a CPython parking-lot address.
pub fn is_parked(addr: u64) -> bool {
    addr & PARKED != 0
}

/// A closed futex wait of a thread: on which word, ended by whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FutexWait {
    /// the futex word, or with `PARKED` set what the thread parked on
    pub addr: u64,
    /// TID (agent namespace) of the thread whose FUTEX_WAKE ended the wait; 0 = none (timeout, signal)
    pub waker: u32,
    pub ns: u64,
}

/// What had the CPU while a thread waited in the run queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Preemptor {
    /// a thread of the same process (TID)
    Thread(u32),
    /// another process (PID in the agent's namespace, or the host's when not visible) and its name
    Process { pid: u32, comm: String },
    /// the CPU was idle (the wait was the wakeup itself)
    Idle,
}

impl Preemptor {
    /// What had the CPU for the waits merged past the preemptors kept by name
    /// (`GONE` in the probe's records).
    pub fn merged() -> Preemptor {
        Preemptor::Process { pid: 0, comm: "other".into() }
    }

    /// Whether this is [`Preemptor::merged`].
    pub fn is_merged(&self) -> bool {
        matches!(self, Preemptor::Process { pid: 0, comm } if comm == "other")
    }

    /// JSON key / label: "1234" for a thread of the process, "pid 42 (nginx)", "idle".
    pub fn key(&self) -> String {
        match self {
            Preemptor::Thread(t) => t.to_string(),
            Preemptor::Process { pid, comm } => format!("pid {pid} ({comm})"),
            Preemptor::Idle => "idle".to_string(),
        }
    }
}

/// What woke a thread's wait, whatever the wait (a socket, a pipe, a signal, a timer, a
/// futex): the task that was running the wakeup, or an interrupt, which is charged to no task.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Waker {
    /// a thread of the same process (TID)
    Thread(u32),
    /// another process (PID in the agent's namespace, or the host's when not visible) and
    /// its name; a kernel thread is one (`kworker/…`)
    Process { pid: u32, comm: String },
    /// a softirq: the network's receive path, timer wheels, block I/O completions
    Softirq,
    /// a hard interrupt: a high-resolution timer (a sleep's or a timeout's end), a device
    Interrupt,
}

impl Waker {
    /// What woke the waits merged past the wakers kept by name.
    pub fn merged() -> Waker {
        Waker::Process { pid: 0, comm: "other".into() }
    }

    /// Whether this is [`Waker::merged`].
    pub fn is_merged(&self) -> bool {
        matches!(self, Waker::Process { pid: 0, comm } if comm == "other")
    }

    /// JSON key / label: "1234" for a thread of the process, "pid 42 (nginx)", "softirq",
    /// "interrupt".
    pub fn key(&self) -> String {
        match self {
            Waker::Thread(t) => t.to_string(),
            Waker::Process { pid, comm } => format!("pid {pid} ({comm})"),
            Waker::Softirq => "softirq".to_string(),
            Waker::Interrupt => "interrupt".to_string(),
        }
    }
}

/// futex_wait per waker: waker TID (0 = timeout) -> ns.
pub fn by_waker(waits: &[FutexWait]) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for w in waits {
        *out.entry(w.waker).or_insert(0) += w.ns;
    }
    out
}

/// One futex word of a process: who waited on it, who woke them.
#[derive(Clone, Debug, PartialEq)]
pub struct TopFutex {
    pub addr: u64,
    pub wait_ns: u64,
    pub waiters: Vec<u32>,
    pub wakers: Vec<u32>,
}

/// The `n` futex words with the most wait in a process: (waiter TID, its waits).
pub fn top_futexes(threads: &[(u32, &[FutexWait])], n: usize) -> Vec<TopFutex> {
    let mut by_addr: BTreeMap<u64, TopFutex> = BTreeMap::new();
    for (tid, waits) in threads {
        for w in *waits {
            let e = by_addr.entry(w.addr).or_insert_with(|| TopFutex { addr: w.addr, wait_ns: 0, waiters: vec![], wakers: vec![] });
            e.wait_ns += w.ns;
            if !e.waiters.contains(tid) {
                e.waiters.push(*tid);
            }
            if w.waker != 0 && !e.wakers.contains(&w.waker) {
                e.wakers.push(w.waker);
            }
        }
    }
    let mut v: Vec<TopFutex> = by_addr.into_values().collect();
    v.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.addr.cmp(&b.addr)));
    v.truncate(n);
    for f in &mut v {
        f.waiters.sort_unstable();
        f.wakers.sort_unstable();
    }
    v
}

/// A lock convoy: at least this many threads waited on one word...
pub const CONVOY_WAITERS: usize = 3;
/// ... for at least this share of the window, summed over them.
pub const CONVOY_SHARE: f64 = 0.5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_wakers_and_addresses() {
        let a = [
            FutexWait { addr: 0x10, waker: 2, ns: 5 },
            FutexWait { addr: 0x10, waker: 3, ns: 7 },
            FutexWait { addr: 0x20, waker: 0, ns: 1 },
        ];
        let b = [FutexWait { addr: 0x10, waker: 1, ns: 9 }];
        assert_eq!(by_waker(&a), BTreeMap::from([(0, 1), (2, 5), (3, 7)]));
        let top = top_futexes(&[(1, &a), (2, &b)], 5);
        assert_eq!(top.len(), 2);
        assert_eq!(top[0], TopFutex { addr: 0x10, wait_ns: 21, waiters: vec![1, 2], wakers: vec![1, 2, 3] });
        assert_eq!(top[1].wakers, Vec::<u32>::new()); // timeouts name no waker
        assert_eq!(top_futexes(&[(1, &a)], 1).len(), 1);
    }

    /// A parked wait on an address is apart from a futex wait on the same
    /// number, and renders as the plain address.
    #[test]
    fn parked_addresses_are_their_own_words() {
        let a = [FutexWait { addr: 0x10 | PARKED, waker: 2, ns: 5 }, FutexWait { addr: 0x10, waker: 2, ns: 7 }];
        let top = top_futexes(&[(1, &a)], 5);
        assert_eq!(top.iter().map(|f| (address(f.addr), is_parked(f.addr))).collect::<Vec<_>>(), [(0x10, false), (0x10, true)]);
        // x86-64 user space ends below 2^47
        assert!(!is_parked(0x7fff_ffff_f000));
    }

    #[test]
    fn preemptor_keys() {
        assert_eq!(Preemptor::Thread(12).key(), "12");
        assert_eq!(Preemptor::Process { pid: 4, comm: "nginx".into() }.key(), "pid 4 (nginx)");
        assert_eq!(Preemptor::Idle.key(), "idle");
        assert_eq!(Waker::Process { pid: 4, comm: "postgres".into() }.key(), "pid 4 (postgres)");
        assert_eq!(Waker::Softirq.key(), "softirq");
        assert!(Waker::merged().is_merged() && !Waker::Interrupt.is_merged());
    }
}
