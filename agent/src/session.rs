//! A measurement session: the processes being watched and the sched probe,
//! turned into per-thread samples with user-visible IDs and names.
use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};

use crate::model::labels::sanitize;
use crate::model::partition::ThreadSample;
use crate::model::state::initial_state;
use crate::probes::sched::{monotonic_ns, SchedOptions, SchedProbe};
use crate::probes::{self};
use crate::procfs;
use crate::usage;

pub struct SessionOptions {
    pub btf: Option<std::path::PathBuf>,
    pub max_threads: u32,
    pub max_procs: u32,
    /// watch the children a watched process forks (`run --all`)
    pub follow_forks: bool,
}

/// A watched process.
#[derive(Clone, Debug)]
pub struct Target {
    /// unique for the session: a reused PID is a new target
    pub id: u64,
    /// PID in the agent's namespace
    pub pid: u32,
    pub host_pid: u32,
    pub comm: String,
    starttime: u64,
    pub attached_ns: u64,
    /// CLOCK_MONOTONIC ns at which the agent noticed it had exited
    pub exited_ns: Option<u64>,
}

/// Threads sampled at one moment, grouped by process.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub at_ns: u64,
    /// target id -> its live threads
    pub live: BTreeMap<u64, Vec<ThreadSample>>,
    /// target id -> threads that exited since the previous snapshot
    pub exited: BTreeMap<u64, Vec<ThreadSample>>,
}

pub struct Session {
    probe: SchedProbe,
    translate: bool,
    self_pid: u32,
    targets: BTreeMap<u64, Target>,
    next_id: u64,
}

/// Host IDs of a process' threads: (host TGID, [(host TID, ns TID)]).
type HostIds = (u32, Vec<(u32, u32)>);

impl Session {
    pub fn start(opts: &SessionOptions) -> Result<Session> {
        probes::preflight(opts.btf.as_deref())?;
        let pidns_ino = procfs::self_pidns_ino().context("failed to read /proc/self/ns/pid")?;
        let translate = pidns_ino != procfs::INIT_PIDNS_INO;
        let probe = SchedProbe::load(&SchedOptions {
            max_threads: opts.max_threads,
            max_procs: opts.max_procs,
            btf: opts.btf.clone(),
            follow_forks: opts.follow_forks,
            pidns_ino,
            translate_pids: translate,
        })?;
        Ok(Session { probe, translate, self_pid: std::process::id(), targets: BTreeMap::new(), next_id: 1 })
    }

    pub fn probe(&self) -> &SchedProbe {
        &self.probe
    }

    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.targets.values()
    }

    pub fn target_by_pid(&self, pid: u32) -> Option<&Target> {
        self.targets.values().find(|t| t.pid == pid)
    }

    /// The newest target with this host PID (an exited one keeps its PID
    /// until it is forgotten; a new process reusing it is a newer target).
    fn by_host_pid(&self, host_pid: u32) -> Option<&Target> {
        self.targets.values().rev().find(|t| t.host_pid == host_pid)
    }

    /// ns TID -> (host TID, host TGID) for every task of the agent's namespace.
    fn ns_to_host(&self) -> Result<HashMap<u32, (u32, u32)>> {
        Ok(self.probe.task_ids()?.into_iter().map(|t| (t.ns_tid, (t.tid, t.tgid))).collect())
    }

    fn host_ids(&self, pid: u32, map: Option<&HashMap<u32, (u32, u32)>>) -> Option<HostIds> {
        let tids = procfs::tasks(pid);
        match map {
            None => Some((pid, tids.into_iter().map(|t| (t, t)).collect())),
            Some(m) => {
                let (_, host_tgid) = *m.get(&pid)?;
                Some((host_tgid, tids.into_iter().filter_map(|t| Some((m.get(&t)?.0, t))).collect()))
            }
        }
    }

    /// Seed the threads of a process with their current state and watch it.
    fn seed(&self, pid: u32, ids: &HostIds) {
        let (host_tgid, tids) = ids;
        let states: Vec<_> = tids
            .iter()
            .filter_map(|(host_tid, tid)| {
                let st = procfs::task_stat(pid, *tid)?;
                Some((*host_tid, *tid, initial_state(st.state, procfs::task_syscall(pid, *tid))))
            })
            .collect();
        let now = monotonic_ns();
        for (host_tid, tid, state) in states {
            self.probe.seed_thread(host_tid, *host_tgid, tid, pid, state, now);
        }
    }

    /// Start watching process `pid` (a PID of the agent's namespace).
    pub fn attach(&mut self, pid: u32) -> Result<()> {
        let stat = procfs::process_stat(pid).ok_or_else(|| {
            usage!("no process with PID {pid}: check it with `ps -p {pid}` (inside a container, use the container's PIDs)")
        })?;
        if matches!(stat.state, 'Z' | 'X') {
            return Err(usage!("process {pid} ({}) has already exited (zombie): nothing to measure", sanitize(&stat.comm)));
        }
        if stat.is_kernel_thread() {
            return Err(usage!("PID {pid} is a kernel thread ({}): waitmeter measures user-space processes", sanitize(&stat.comm)));
        }
        let map = if self.translate { Some(self.ns_to_host()?) } else { None };
        let ids = self
            .host_ids(pid, map.as_ref())
            .ok_or_else(|| usage!("process {pid} exited before it could be watched"))?;
        self.add_target(pid, stat, ids)
    }

    fn add_target(&mut self, pid: u32, stat: procfs::TaskStat, ids: HostIds) -> Result<()> {
        let host_pid = ids.0;
        self.seed(pid, &ids);
        self.probe.watch(host_pid)?;
        // threads created between the first scan and the watch: seed them too
        // (an entry the probe created meanwhile is kept)
        let map = if self.translate { self.ns_to_host().ok() } else { None };
        if let Some(again) = self.host_ids(pid, map.as_ref()) {
            self.seed(pid, &again);
        }
        log::debug!("watching PID {pid} (host PID {host_pid}, {} threads)", ids.1.len());
        let id = self.next_id;
        self.next_id += 1;
        self.targets.insert(
            id,
            Target {
                id,
                pid,
                host_pid,
                comm: sanitize(&stat.comm),
                starttime: stat.starttime,
                attached_ns: monotonic_ns(),
                exited_ns: None,
            },
        );
        Ok(())
    }

    /// `run --all`: watch every user-space process of the namespace not yet
    /// watched (new ones since the last call). Returns how many were added.
    pub fn discover(&mut self) -> Result<usize> {
        let known: std::collections::HashSet<u32> =
            self.targets.values().filter(|t| t.exited_ns.is_none()).map(|t| t.pid).collect();
        let new: Vec<u32> = procfs::pids()
            .into_iter()
            .filter(|p| *p != self.self_pid && !known.contains(p))
            .collect();
        if new.is_empty() {
            return Ok(0);
        }
        let map = if self.translate { Some(self.ns_to_host()?) } else { None };
        let mut added = 0;
        for pid in new {
            let Some(stat) = procfs::process_stat(pid) else { continue };
            if stat.is_kernel_thread() || matches!(stat.state, 'Z' | 'X') {
                continue;
            }
            let Some(ids) = self.host_ids(pid, map.as_ref()) else { continue };
            self.add_target(pid, stat, ids)?;
            added += 1;
        }
        Ok(added)
    }

    /// Notice processes that exited (or whose PID was reused); returns them.
    pub fn reap(&mut self) -> Vec<Target> {
        let now = monotonic_ns();
        let mut gone = vec![];
        for t in self.targets.values_mut().filter(|t| t.exited_ns.is_none()) {
            let alive = procfs::process_stat(t.pid)
                .is_some_and(|s| s.starttime == t.starttime && !matches!(s.state, 'Z' | 'X'));
            if !alive {
                t.exited_ns = Some(now);
                self.probe.unwatch(t.host_pid);
                gone.push(t.clone());
            }
        }
        gone
    }

    /// Drop exited targets that exited before `before_ns`.
    pub fn forget_exited(&mut self, before_ns: u64) -> Vec<Target> {
        let old: Vec<u64> = self
            .targets
            .values()
            .filter(|t| t.exited_ns.is_some_and(|e| e < before_ns))
            .map(|t| t.id)
            .collect();
        old.iter().filter_map(|h| self.targets.remove(h)).collect()
    }

    /// Final samples of threads that exited since the last call, by host PID.
    /// Call often enough that the exit ring buffer does not fill.
    pub fn exits(&mut self) -> BTreeMap<u64, Vec<ThreadSample>> {
        let mut out: BTreeMap<u64, Vec<ThreadSample>> = BTreeMap::new();
        for (host_pid, s) in self.probe.drain_exits() {
            if let Some(t) = self.by_host_pid(host_pid) {
                out.entry(t.id).or_default().push(s);
            }
        }
        out
    }

    /// Every live watched thread sampled now, by host PID, with its name.
    pub fn live(&mut self) -> BTreeMap<u64, Vec<ThreadSample>> {
        let mut out: BTreeMap<u64, Vec<ThreadSample>> = BTreeMap::new();
        let watched: std::collections::HashSet<u32> = self.probe.watched().into_iter().collect();
        for (host_pid, mut s) in self.probe.live_threads() {
            match self.by_host_pid(host_pid) {
                Some(t) if t.exited_ns.is_none() => {
                    s.comm = procfs::task_comm(t.pid, s.tid).map(|c| sanitize(&c)).unwrap_or_else(|| "?".into());
                    out.entry(t.id).or_default().push(s);
                }
                Some(_) | None if !watched.contains(&host_pid) => {
                    // left over from a process that is gone
                    self.probe.forget_thread(s.host_tid);
                }
                _ => {}
            }
        }
        out
    }

    /// Exited threads first (so none is missed between the two), then live ones.
    pub fn sample(&mut self) -> Snapshot {
        let exited = self.exits();
        let live = self.live();
        Snapshot { at_ns: monotonic_ns(), live, exited }
    }
}
