//! Who may speak of which thread. A client record claims a PID and a TID of
//! the client's own PID namespace; the kernel says which process sent it, by
//! its PID in the agent's namespace. A record is taken only when the process
//! it claims is its sender: the same PID (same namespace), or the sender's PID
//! in its own nested namespace (the last `NSpid:` field), translated to the
//! agent's; and its TID must be a thread of that process, translated the same
//! way. What /proc says of a sender is cached for a second, for at most
//! `MAX_SENDERS` senders, and read again at most once per drain of the socket.
use std::collections::{HashMap, HashSet};

use super::socket::Rejected;
use crate::procfs;

/// Senders whose /proc facts are cached at once.
pub const MAX_SENDERS: usize = 256;
/// How long a sender's facts are used before /proc is read again (the PID may
/// have been reused).
const FRESH_NS: u64 = 1_000_000_000;

/// What the checks read of /proc (a trait so that they are tested without processes).
pub trait ProcView {
    /// The process' start time (clock ticks after boot): with its PID, its identity.
    fn start(&self, pid: u32) -> Option<u64>;
    /// A task's `NSpid:` (its ID in the agent's PID namespace first, in its own last).
    fn nspid(&self, pid: u32, tid: u32) -> Option<Vec<u32>>;
    /// The process' TIDs in the agent's namespace (empty when it is gone).
    fn tasks(&self, pid: u32) -> Vec<u32>;
}

/// The agent's own /proc.
pub struct Proc;

impl ProcView for Proc {
    fn start(&self, pid: u32) -> Option<u64> {
        procfs::process_stat(pid).map(|s| s.starttime)
    }
    fn nspid(&self, pid: u32, tid: u32) -> Option<Vec<u32>> {
        procfs::task_nspid(pid, tid)
    }
    fn tasks(&self, pid: u32) -> Vec<u32> {
        procfs::tasks(pid)
    }
}

/// One sending process as /proc showed it.
#[derive(Clone, Debug, PartialEq)]
struct Sender {
    /// None: gone (exited) when read
    start: Option<u64>,
    /// its PID in its own namespace (the last NSpid field)
    own_pid: u32,
    /// its PID namespace is below the agent's: it speaks in its own IDs
    nested: bool,
    /// its threads' TIDs in the agent's namespace ...
    tids: HashSet<u32>,
    /// ... and (nested) by their TID in its own namespace
    own_tids: HashMap<u32, u32>,
    read_ns: u64,
    /// the drain in which it was read
    batch: u64,
}

impl Sender {
    /// Read process `pid`; translations of threads already in `known` (the same
    /// process, read before) are kept, the new threads' read.
    fn read(proc: &impl ProcView, pid: u32, known: Option<&Sender>, now_ns: u64, batch: u64) -> Sender {
        let gone =
            Sender { start: None, own_pid: 0, nested: false, tids: HashSet::new(), own_tids: HashMap::new(), read_ns: now_ns, batch };
        let (Some(start), Some(ns)) = (proc.start(pid), proc.nspid(pid, pid)) else { return gone };
        let Some(&own_pid) = ns.last() else { return gone };
        let tids: HashSet<u32> = proc.tasks(pid).into_iter().collect();
        if tids.is_empty() {
            return gone;
        }
        let nested = ns.len() > 1;
        let mut own_tids = HashMap::new();
        if nested {
            let known: HashMap<u32, u32> = match known {
                Some(k) if k.start == Some(start) && k.nested => k.own_tids.iter().map(|(own, agent)| (*agent, *own)).collect(),
                _ => HashMap::new(),
            };
            for &t in &tids {
                let own = known.get(&t).copied().or_else(|| proc.nspid(pid, t)?.last().copied());
                if let Some(own) = own {
                    own_tids.insert(own, t);
                }
            }
        }
        Sender { start: Some(start), own_pid, nested, tids, own_tids, read_ns: now_ns, batch }
    }

    /// The agent's (pid, tid) for a record of `pid`, `tid` sent by this process (`sender`).
    fn claim(&self, sender: u32, pid: u32, tid: u32) -> Result<(u32, u32), Rejected> {
        if self.start.is_none() {
            return Err(Rejected::SenderExited);
        }
        if self.nested && pid == self.own_pid {
            return self.own_tids.get(&tid).map(|t| (sender, *t)).ok_or(Rejected::UnknownThread);
        }
        if pid == sender {
            return if self.tids.contains(&tid) { Ok((sender, tid)) } else { Err(Rejected::UnknownThread) };
        }
        Err(Rejected::WrongPid)
    }
}

/// The senders seen lately, by their PID in the agent's namespace.
#[derive(Default)]
pub struct Senders {
    by_pid: HashMap<u32, Sender>,
    batch: u64,
}

impl Senders {
    /// A new drain of the socket begins: a sender whose record does not check
    /// out is read again, once per drain (a thread started since, a PID reused).
    pub fn next_batch(&mut self) {
        self.batch += 1;
    }

    /// The agent's (pid, tid) that a record claiming `pid`, `tid` speaks of,
    /// when `sender` (the kernel's word, 0: not visible) may speak of it.
    pub fn resolve(&mut self, proc: &impl ProcView, sender: u32, pid: u32, tid: u32, now_ns: u64) -> Result<(u32, u32), Rejected> {
        if sender == 0 {
            return Err(Rejected::NoCredentials);
        }
        let batch = self.batch;
        let verdict = match self.by_pid.get(&sender) {
            Some(s) if now_ns.saturating_sub(s.read_ns) < FRESH_NS => s.claim(sender, pid, tid),
            _ => return self.read(proc, sender, now_ns).claim(sender, pid, tid),
        };
        match verdict {
            Err(_) if self.by_pid.get(&sender).is_some_and(|s| s.batch != batch) => self.read(proc, sender, now_ns).claim(sender, pid, tid),
            v => v,
        }
    }

    /// Read a sender again (making room when the cache is full).
    fn read(&mut self, proc: &impl ProcView, pid: u32, now_ns: u64) -> &Sender {
        let s = Sender::read(proc, pid, self.by_pid.get(&pid), now_ns, self.batch);
        if !self.by_pid.contains_key(&pid) && self.by_pid.len() >= MAX_SENDERS {
            self.by_pid.retain(|_, s| now_ns.saturating_sub(s.read_ns) < FRESH_NS);
            if self.by_pid.len() >= MAX_SENDERS {
                let oldest = self.by_pid.iter().min_by_key(|(_, s)| s.read_ns).map(|(p, _)| *p);
                self.by_pid.remove(&oldest.expect("the cache is full"));
            }
        }
        self.by_pid.insert(pid, s);
        &self.by_pid[&pid]
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.by_pid.len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A process' tasks: (TID in the agent's namespace, NSpid).
    type Tasks = Vec<(u32, Vec<u32>)>;

    /// Processes as /proc would show them: pid -> (start, tasks).
    #[derive(Default)]
    struct FakeProc {
        procs: HashMap<u32, (u64, Tasks)>,
        reads: Cell<usize>,
    }

    impl FakeProc {
        fn with(mut self, pid: u32, start: u64, tasks: &[&[u32]]) -> Self {
            self.procs.insert(pid, (start, tasks.iter().map(|ns| (ns[0], ns.to_vec())).collect()));
            self
        }
    }

    impl ProcView for FakeProc {
        fn start(&self, pid: u32) -> Option<u64> {
            self.reads.set(self.reads.get() + 1);
            self.procs.get(&pid).map(|p| p.0)
        }
        fn nspid(&self, pid: u32, tid: u32) -> Option<Vec<u32>> {
            self.reads.set(self.reads.get() + 1);
            self.procs.get(&pid)?.1.iter().find(|(t, _)| *t == tid).map(|(_, ns)| ns.clone())
        }
        fn tasks(&self, pid: u32) -> Vec<u32> {
            self.reads.set(self.reads.get() + 1);
            self.procs.get(&pid).map(|p| p.1.iter().map(|(t, _)| *t).collect()).unwrap_or_default()
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn same_namespace_sender_speaks_for_itself_only() {
        let proc = FakeProc::default().with(100, 7, &[&[100], &[101]]).with(200, 9, &[&[200]]);
        let mut s = Senders::default();
        assert_eq!(s.resolve(&proc, 100, 100, 101, 0), Ok((100, 101)));
        assert_eq!(s.resolve(&proc, 100, 100, 100, 0), Ok((100, 100)));
        // another process' PID, another process' thread, no such thread
        assert_eq!(s.resolve(&proc, 100, 200, 200, 0), Err(Rejected::WrongPid));
        assert_eq!(s.resolve(&proc, 100, 100, 200, 0), Err(Rejected::UnknownThread));
        assert_eq!(s.resolve(&proc, 100, 100, 4_000_000, 0), Err(Rejected::UnknownThread));
        assert_eq!(s.resolve(&proc, 0, 100, 100, 0), Err(Rejected::NoCredentials));
        assert_eq!(s.resolve(&proc, 300, 300, 300, 0), Err(Rejected::SenderExited));
    }

    #[test]
    fn nested_sender_is_translated() {
        // PID 4242 is PID 1 of its own namespace; its thread 4250 is 9 there
        let proc = FakeProc::default().with(4242, 7, &[&[4242, 1], &[4250, 9]]).with(5000, 8, &[&[5000, 2]]);
        let mut s = Senders::default();
        assert_eq!(s.resolve(&proc, 4242, 1, 9, 0), Ok((4242, 4250)));
        assert_eq!(s.resolve(&proc, 4242, 1, 1, 0), Ok((4242, 4242)));
        // its namespace's thread IDs only: 4250 is not a TID there
        assert_eq!(s.resolve(&proc, 4242, 1, 4250, 0), Err(Rejected::UnknownThread));
        // the agent's IDs are its own too
        assert_eq!(s.resolve(&proc, 4242, 4242, 4250, 0), Ok((4242, 4250)));
        // PID 2 of its namespace (or of another) is not the sender
        assert_eq!(s.resolve(&proc, 4242, 2, 2, 0), Err(Rejected::WrongPid));
        assert_eq!(s.resolve(&proc, 4242, 5000, 5000, 0), Err(Rejected::WrongPid));
    }

    #[test]
    fn proc_is_read_once_per_drain_and_per_second() {
        let mut proc = FakeProc::default().with(100, 7, &[&[100, 1]]);
        let mut s = Senders::default();
        s.next_batch();
        assert_eq!(s.resolve(&proc, 100, 1, 1, 0), Ok((100, 100)));
        let first = proc.reads.get();
        // a flood of records of threads that do not exist: no more reads in this drain
        for tid in 2..1000 {
            assert_eq!(s.resolve(&proc, 100, 1, tid, 10), Err(Rejected::UnknownThread));
        }
        assert_eq!(proc.reads.get(), first);
        // a thread started since: found in the next drain
        proc = proc.with(100, 7, &[&[100, 1], &[105, 2]]);
        proc.reads.set(first);
        s.next_batch();
        assert_eq!(s.resolve(&proc, 100, 1, 2, 20), Ok((100, 105)));
        // only the new thread's NSpid was read, with the process' identity and task list
        assert_eq!(proc.reads.get(), first + 4);
        // ... and records that check out cost no read until the facts are a second old
        let before = proc.reads.get();
        s.next_batch();
        assert_eq!(s.resolve(&proc, 100, 1, 2, S - 1), Ok((100, 105)));
        assert_eq!(proc.reads.get(), before);
        assert_eq!(s.resolve(&proc, 100, 1, 2, S + 20), Ok((100, 105)));
        assert!(proc.reads.get() > before);
    }

    #[test]
    fn a_reused_pid_is_read_again() {
        let proc = FakeProc::default().with(100, 7, &[&[100, 1], &[101, 2]]);
        let mut s = Senders::default();
        assert_eq!(s.resolve(&proc, 100, 1, 2, 0), Ok((100, 101)));
        // PID 100 is now another process, of another namespace, where 101 is TID 5
        let proc = FakeProc::default().with(100, 8, &[&[100, 3], &[101, 5]]);
        s.next_batch();
        assert_eq!(s.resolve(&proc, 100, 3, 5, 10), Ok((100, 101)));
        assert_eq!(s.resolve(&proc, 100, 1, 2, 10), Err(Rejected::WrongPid));
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut proc = FakeProc::default();
        for pid in 1..=(MAX_SENDERS as u32 + 50) {
            proc = proc.with(pid, 1, &[&[pid]]);
        }
        let mut s = Senders::default();
        for pid in 1..=(MAX_SENDERS as u32 + 50) {
            assert_eq!(s.resolve(&proc, pid, pid, pid, u64::from(pid)), Ok((pid, pid)));
            assert!(s.cached() <= MAX_SENDERS);
        }
        assert_eq!(s.cached(), MAX_SENDERS);
    }
}
