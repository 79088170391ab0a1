//! The watched processes: attaching, discovering (`run --all`), reaping,
//! finding the Python in them, and seeding their threads' first states.
use std::collections::HashMap;

use anyhow::Result;

use super::Session;
use crate::clock::monotonic_ns;
use crate::model::labels::sanitize;
use crate::model::syscalls::initial_state;
use crate::probes::gil::GilProbe;
use crate::probes::sched::GilSpec;
use crate::procfs;
use crate::python::{self, layout::HolderId, Python};

/// A watched process.
#[derive(Clone, Debug)]
pub struct Target {
    /// unique for the session: a reused PID is a new target
    pub id: u64,
    /// PID in the agent's namespace
    pub pid: u32,
    pub host_pid: u32,
    pub comm: String,
    pub(super) starttime: u64,
    /// CLOCK_MONOTONIC ns at which the agent noticed it had exited
    pub exited_ns: Option<u64>,
    /// the CPython interpreter in it, if any
    pub python: Option<Python>,
    /// it lives in the agent's PID namespace (its thread ids are ours)
    pub(super) same_pidns: bool,
    /// Python thread names by TID, and when they were read
    pub(super) names: std::collections::HashMap<u32, String>,
    pub(super) names_at: u64,
    /// the container its cgroup names (read once: a process does not change containers)
    pub placement: crate::identity::Placement,
    /// its CPU cgroup, and the cgroup's counters when the target was attached
    pub cgroup: Option<crate::cgroup::Cgroup>,
    pub cgroup_start: Option<crate::cgroup::CpuStat>,
    /// throttled stretches (TID, stretch), the most recent THROTTLE_KEEP
    pub throttles: std::collections::VecDeque<(u32, crate::model::throttle::Stretch)>,
    /// FS base (pthread_t) -> TID of every thread seen, exited ones included:
    /// names GIL holders of 3.8–3.10 after they are gone
    pub(super) fsbase_tids: std::collections::HashMap<u64, u32>,
}

/// Host IDs of a process' threads: (host TGID, [(host TID, ns TID)]).
type HostIds = (u32, Vec<(u32, u32)>);

impl Session {
    /// The newest target with this host PID (an exited one keeps its PID
    /// until it is forgotten; a new process reusing it is a newer target).
    pub(super) fn by_host_pid(&self, host_pid: u32) -> Option<&Target> {
        self.targets.values().rev().find(|t| t.host_pid == host_pid)
    }

    /// ns TID -> (host TID, host TGID) for every task of the agent's namespace.
    pub(super) fn ns_to_host(&self) -> Result<HashMap<u32, (u32, u32)>> {
        Ok(self.probe.task_ids()?.into_iter().map(|t| (t.ns_tid, (t.tid, t.tgid))).collect())
    }

    pub(super) fn host_ids(&self, pid: u32, map: Option<&HashMap<u32, (u32, u32)>>) -> Option<HostIds> {
        let tids = procfs::tasks(pid);
        match map {
            None => Some((pid, tids.into_iter().map(|t| (t, t)).collect())),
            Some(m) => {
                let (_, host_tgid) = *m.get(&pid)?;
                Some((host_tgid, tids.into_iter().filter_map(|t| Some((m.get(&t)?.0, t))).collect()))
            }
        }
    }

    /// Seed the threads of a process with their current state.
    pub(super) fn seed(&self, pid: u32, ids: &HostIds, gil_words: &[u64]) {
        let (host_tgid, tids) = ids;
        let states: Vec<_> = tids
            .iter()
            .filter_map(|(host_tid, tid)| {
                let st = procfs::task_stat(pid, *tid)?;
                let sc = procfs::task_syscall(pid, *tid).map(|s| (s.nr, s.arg0));
                Some((*host_tid, *tid, initial_state(st.state, sc, |a| gil_words.contains(&a))))
            })
            .collect();
        let now = monotonic_ns();
        for (host_tid, tid, state) in states {
            self.probe.seed_thread(host_tid, *host_tgid, tid, pid, state, now);
        }
    }

    /// Find CPython in the process and register its GILs' futex words.
    pub(super) fn find_python(&self, pid: u32, host_pid: u32) -> (Option<Python>, Vec<u64>) {
        self.register_python(pid, host_pid, python::detect(pid))
    }

    /// Register the GILs' futex words of what `python::detect` found in the
    /// process (one warning when it cannot be measured as Python).
    fn register_python(&self, pid: u32, host_pid: u32, detected: Result<Option<Python>>) -> (Option<Python>, Vec<u64>) {
        let py = match detected {
            Ok(py) => py,
            Err(e) => {
                log::warn!("process {pid}: cannot tell whether it runs Python ({e:#}); measuring it without GIL states");
                None
            }
        };
        let Some(p) = &py else { return (None, vec![]) };
        let Some(l) = p.layout else {
            match &p.layout_error {
                Some(why) => log::warn!(
                    "process {pid} runs Python {} whose layout cannot be trusted ({why}): measuring it without GIL states (GIL waits count as futex_wait)",
                    p.version
                ),
                None => log::warn!(
                    "process {pid} runs CPython {}, whose GIL waitmeter does not measure (it measures {}): its GIL waits count as futex_wait{}",
                    p.version,
                    python::MEASURED,
                    if p.unmeasured_gil.is_empty() {
                        ", and a lock convoy the verdict names may be the GIL"
                    } else {
                        ", and the verdict names waits on the GIL's futex words as the GIL's"
                    }
                ),
            }
            return (py, vec![]);
        };
        let off_holder_id = match l.holder_id {
            HolderId::NativeThreadId { offset } | HolderId::PthreadT { offset } => offset as u32,
        };
        let mut words = vec![];
        for gil in &p.gils {
            let w = l.futex_words(*gil);
            let spec = GilSpec {
                gil: *gil,
                off_locked: l.locked as u32,
                off_last_holder: l.last_holder as u32,
                off_holder_id,
                off_switch_number: l.switch_number as u32,
            };
            if let Err(e) = self.probe.add_gil(host_pid, &w, spec) {
                log::warn!("process {pid}: {e:#}; GIL waits count as futex_wait");
                return (py, vec![]);
            }
            words.extend(w);
        }
        (py, words)
    }

    pub(super) fn add_target(&mut self, pid: u32, stat: procfs::TaskStat, ids: HostIds) -> Result<()> {
        let host_pid = ids.0;
        let (py, gil_words) = self.find_python(pid, host_pid);
        self.seed(pid, &ids, &gil_words);
        self.probe.watch(host_pid)?;
        // threads created between the first scan and the watch: seed them too
        // (an entry the probe created meanwhile is kept)
        let map = if self.translate { self.ns_to_host().ok() } else { None };
        if let Some(again) = self.host_ids(pid, map.as_ref()) {
            self.seed(pid, &again, &gil_words);
        }
        log::debug!("watching PID {pid} (host PID {host_pid}, {} threads)", ids.1.len());
        let id = self.next_id;
        self.next_id += 1;
        let cgroup = crate::cgroup::of_process(pid);
        let mut placement = crate::identity::container::of_process(pid).unwrap_or_default();
        // its `cgroup` label joins the waitmeter_cgroup_* series: their path, the CPU cgroup's
        if let Some(c) = &cgroup {
            placement.cgroup = c.path.clone();
        }
        self.targets.insert(
            id,
            Target {
                id,
                pid,
                host_pid,
                comm: sanitize(&stat.comm),
                starttime: stat.starttime,
                exited_ns: None,
                python: py,
                same_pidns: procfs::pidns_ino(pid) == Some(self.pidns_ino),
                names: Default::default(),
                names_at: 0,
                fsbase_tids: Default::default(),
                placement,
                cgroup_start: cgroup.as_ref().and_then(|c| c.stat()),
                cgroup,
                throttles: Default::default(),
            },
        );
        self.python_probes(id);
        self.stacks_added(id);
        Ok(())
    }

    /// A target whose interpreter was not up when it was attached (`attach --
    /// COMMAND` stops it at its exec: before the dynamic loader maps a shared
    /// libpython, before the interpreter makes its GIL): look again. True when
    /// there is nothing more to look for (its GIL is known, it cannot be
    /// measured as Python, or it is gone).
    pub fn python_late(&mut self, id: u64) -> bool {
        let Some(t) = self.targets.get(&id) else { return true };
        if t.exited_ns.is_some() || t.python.as_ref().is_some_and(|p| !p.gils.is_empty()) {
            return true;
        }
        let (pid, host_pid) = (t.pid, t.host_pid);
        let detected = python::detect(pid);
        // not up yet (quietly): no interpreter mapped, or one that has not made its GIL
        if matches!(&detected, Ok(None)) || matches!(&detected, Ok(Some(p)) if p.gils.is_empty() && p.layout.is_some()) {
            return false;
        }
        // up, or never measurable (a version or a process it cannot read: said once)
        let (py, _) = self.register_python(pid, host_pid, detected);
        if let Some(p) = py.as_ref().filter(|p| !p.gils.is_empty()) {
            log::info!("process {pid}: Python {} is up", p.version);
        }
        self.targets.get_mut(&id).expect("found").python = py;
        self.python_probes(id);
        self.stacks_added(id);
        true
    }

    /// The uprobes of a Python target: GIL holds (`--gil-probe uprobe`), parking-lot waits.
    fn python_probes(&mut self, id: u64) {
        let Some(t) = self.targets.get(&id) else { return };
        let (pid, host_pid, py) = (t.pid, t.host_pid, t.python.as_ref());
        if let Some(p) = py.filter(|p| self.gil_uprobes && !p.gils.is_empty()) {
            if p.gil_functions.is_empty() {
                log::warn!(
                    "process {pid}: {} has no take_gil/drop_gil symbols (stripped): --gil-probe uprobe is not possible, using the futex method",
                    p.binary.display()
                );
            } else {
                match GilProbe::attach(pid, &p.opened, &p.gil_functions, self.max_threads) {
                    Ok(g) => {
                        log::info!("process {pid}: {} GIL uprobes attached", g.attached());
                        self.gil_probes.insert(id, g);
                    }
                    Err(e) => log::warn!("process {pid}: {e:#}; using the futex method"),
                }
            }
        }
        if let Some((p, offset)) = py.as_ref().filter(|_| self.lock_uprobes).and_then(|p| Some((p, p.park?))) {
            // a failure costs only the lock addresses: waits stay plain futex waits
            match self.parks.attach(&self.probe, id, pid, &p.opened, offset) {
                Ok(()) => {
                    // its futex waits are looked up in `parked` from now on
                    self.probe.mark_python(host_pid);
                    log::debug!("process {pid}: parking-lot uprobes attached")
                }
                Err(e) => log::warn!("process {pid}: {e:#}; its lock waits are charged to futex words, not to the locks"),
            }
        }
    }

    /// `run --all`: watch every user-space process of the namespace not yet
    /// watched (new ones since the last call). Returns how many were added.
    pub fn discover(&mut self) -> Result<usize> {
        self.discover_matching(&|_, _| true)
    }

    /// `discover`, of the processes `select` takes (PID, its stat).
    pub fn discover_matching(&mut self, select: &dyn Fn(u32, &procfs::TaskStat) -> bool) -> Result<usize> {
        let known: std::collections::HashSet<u32> = self.targets.values().filter(|t| t.exited_ns.is_none()).map(|t| t.pid).collect();
        let new: Vec<u32> = procfs::pids().into_iter().filter(|p| *p != self.self_pid && !known.contains(p)).collect();
        if new.is_empty() {
            return Ok(0);
        }
        let map = if self.translate { Some(self.ns_to_host()?) } else { None };
        let mut added = 0;
        for pid in new {
            let Some(stat) = procfs::process_stat(pid) else { continue };
            if stat.is_kernel_thread() || matches!(stat.state, 'Z' | 'X') || !select(pid, &stat) {
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
            let alive = procfs::process_stat(t.pid).is_some_and(|s| s.starttime == t.starttime && !matches!(s.state, 'Z' | 'X'));
            if !alive {
                t.exited_ns = Some(now);
                self.gil_probes.remove(&t.id);
                self.parks.detach(t.id);
                self.probe.unwatch(t.host_pid);
                self.probe.remove_gils(t.host_pid);
                gone.push(t.clone());
            }
        }
        for t in &gone {
            self.stacks_removed(t);
        }
        gone
    }

    /// Drop exited targets that exited before `before_ns`.
    pub fn forget_exited(&mut self, before_ns: u64) -> Vec<Target> {
        let old: Vec<u64> = self.targets.values().filter(|t| t.exited_ns.is_some_and(|e| e < before_ns)).map(|t| t.id).collect();
        for id in &old {
            self.stacks_forget(*id);
        }
        old.iter().filter_map(|h| self.targets.remove(h)).collect()
    }
}
