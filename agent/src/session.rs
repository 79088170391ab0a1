//! A measurement session: the processes being watched and the sched probe,
//! turned into per-thread samples with user-visible IDs and names.
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::clock::monotonic_ns;
use crate::model::blame::{FutexWait, Preemptor};
use crate::model::labels::sanitize;
use crate::model::partition::ThreadSample;
use crate::model::syscalls::initial_state;
use crate::probes::gil::GilProbe;
use crate::probes::sched::{GilSpec, SchedOptions, SchedProbe};
use crate::probes::{self};
use crate::procfs;
use crate::python::{self, layout::HolderId, Python};
use crate::usage;

pub struct SessionOptions {
    pub btf: Option<std::path::PathBuf>,
    pub max_threads: u32,
    pub max_procs: u32,
    /// watch the children a watched process forks (`run --all`)
    pub follow_forks: bool,
    /// attach the precise GIL probe (uprobes) to Python targets with symbols
    pub gil_uprobes: bool,
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
    /// the CPython interpreter in it, if any
    pub python: Option<Python>,
    /// it lives in the agent's PID namespace (its thread ids are ours)
    same_pidns: bool,
    /// Python thread names by TID, and when they were read
    names: std::collections::HashMap<u32, String>,
    names_at: u64,
    /// its CPU cgroup, and the cgroup's counters when the target was attached
    pub cgroup: Option<crate::cgroup::Cgroup>,
    pub cgroup_start: Option<crate::cgroup::CpuStat>,
    /// throttled stretches (TID, stretch), the most recent THROTTLE_KEEP
    pub throttles: std::collections::VecDeque<(u32, crate::model::throttle::Stretch)>,
    /// FS base (pthread_t) -> TID of every thread seen, exited ones included:
    /// names GIL holders of 3.8–3.10 after they are gone
    fsbase_tids: std::collections::HashMap<u64, u32>,
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
    pidns_ino: u64,
    targets: BTreeMap<u64, Target>,
    next_id: u64,
    gil_uprobes: bool,
    max_threads: u32,
    /// precise GIL probes, by target id
    gil_probes: std::collections::HashMap<u64, GilProbe>,
}

/// Throttled stretches kept per target (for the signature).
const THROTTLE_KEEP: usize = 4096;

/// How often Python thread names are re-read.
const NAMES_EVERY_NS: u64 = 1_000_000_000;

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
        Ok(Session {
            probe,
            translate,
            self_pid: std::process::id(),
            pidns_ino,
            targets: BTreeMap::new(),
            next_id: 1,
            gil_uprobes: opts.gil_uprobes,
            max_threads: opts.max_threads,
            gil_probes: Default::default(),
        })
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

    /// Seed the threads of a process with their current state.
    fn seed(&self, pid: u32, ids: &HostIds, gil_words: &[u64]) {
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
        let ids = self.host_ids(pid, map.as_ref()).ok_or_else(|| usage!("process {pid} exited before it could be watched"))?;
        self.add_target(pid, stat, ids)
    }

    /// Find CPython in the process and register its GILs' futex words.
    fn find_python(&self, pid: u32, host_pid: u32) -> (Option<Python>, Vec<u64>) {
        let py = match python::detect(pid) {
            Ok(py) => py,
            Err(e) => {
                log::warn!("process {pid}: cannot tell whether it runs Python ({e:#}); measuring it without GIL states");
                None
            }
        };
        let Some(p) = &py else { return (None, vec![]) };
        let Some(l) = p.layout else {
            log::warn!("process {pid} runs Python {}, which waitmeter does not know (3.8–3.13): GIL waits count as futex_wait", p.version);
            return (py, vec![]);
        };
        let off_holder_id = match l.holder_id {
            HolderId::NativeThreadId { offset } | HolderId::PthreadT { offset } => offset as u32,
        };
        let mut words = vec![];
        for gil in &p.gils {
            let w = l.futex_words(*gil);
            let spec = GilSpec { gil: *gil, off_locked: l.locked as u32, off_last_holder: l.last_holder as u32, off_holder_id };
            if let Err(e) = self.probe.add_gil(host_pid, &w, spec) {
                log::warn!("process {pid}: {e:#}; GIL waits count as futex_wait");
                return (py, vec![]);
            }
            words.extend(w);
        }
        (py, words)
    }

    fn add_target(&mut self, pid: u32, stat: procfs::TaskStat, ids: HostIds) -> Result<()> {
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
        if let Some(p) = py.as_ref().filter(|p| self.gil_uprobes && !p.gils.is_empty()) {
            if p.gil_functions.is_empty() {
                log::warn!(
                    "process {pid}: {} has no take_gil/drop_gil symbols (stripped): --gil-probe uprobe is not possible, using the futex method",
                    p.binary.display()
                );
            } else {
                let path = PathBuf::from(format!("/proc/{pid}/root{}", p.binary.display()));
                match GilProbe::attach(pid, &path, &p.gil_functions, self.max_threads) {
                    Ok(g) => {
                        log::info!("process {pid}: {} GIL uprobes attached", g.attached());
                        self.gil_probes.insert(id, g);
                    }
                    Err(e) => log::warn!("process {pid}: {e:#}; using the futex method"),
                }
            }
        }
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
                python: py,
                same_pidns: procfs::pidns_ino(pid) == Some(self.pidns_ino),
                names: Default::default(),
                names_at: 0,
                fsbase_tids: Default::default(),
                cgroup_start: cgroup.as_ref().and_then(|c| c.stat()),
                cgroup,
                throttles: Default::default(),
            },
        );
        Ok(())
    }

    /// `run --all`: watch every user-space process of the namespace not yet
    /// watched (new ones since the last call). Returns how many were added.
    pub fn discover(&mut self) -> Result<usize> {
        let known: std::collections::HashSet<u32> = self.targets.values().filter(|t| t.exited_ns.is_none()).map(|t| t.pid).collect();
        let new: Vec<u32> = procfs::pids().into_iter().filter(|p| *p != self.self_pid && !known.contains(p)).collect();
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
            let alive = procfs::process_stat(t.pid).is_some_and(|s| s.starttime == t.starttime && !matches!(s.state, 'Z' | 'X'));
            if !alive {
                t.exited_ns = Some(now);
                self.gil_probes.remove(&t.id);
                self.probe.unwatch(t.host_pid);
                self.probe.remove_gils(t.host_pid);
                gone.push(t.clone());
            }
        }
        gone
    }

    /// Drop exited targets that exited before `before_ns`.
    pub fn forget_exited(&mut self, before_ns: u64) -> Vec<Target> {
        let old: Vec<u64> = self.targets.values().filter(|t| t.exited_ns.is_some_and(|e| e < before_ns)).map(|t| t.id).collect();
        old.iter().filter_map(|h| self.targets.remove(h)).collect()
    }

    /// Final samples of threads that exited since the last call, by target.
    /// Call often enough that the exit ring buffer does not fill.
    pub fn exits(&mut self) -> BTreeMap<u64, Vec<ThreadSample>> {
        let exits = self.probe.drain_exits();
        self.collect_throttles();
        let mut out: BTreeMap<u64, Vec<ThreadSample>> = BTreeMap::new();
        if exits.is_empty() {
            return out;
        }
        let blame = self.blame_by_thread();
        let holds = self.gil_holds();
        let waits = self.waits_by_thread();
        let mut resolver = HolderResolver::default();
        let mut gone = vec![];
        for (host_pid, fsbase, s) in &exits {
            if let Some(id) = self.by_host_pid(*host_pid).map(|t| t.id) {
                self.targets.get_mut(&id).expect("found").fsbase_tids.insert(*fsbase, s.tid);
            }
        }
        for (host_pid, _, mut s) in exits {
            gone.push(s.host_tid);
            if let Some(t) = self.by_host_pid(host_pid) {
                s.py_name = t.names.get(&s.tid).cloned();
                s.gil_by_holder = resolver.resolve(self, t, blame.get(&s.host_tid).map(Vec::as_slice).unwrap_or(&[]), None);
                s.gil_hold = holds.get(&s.host_tid).copied();
                self.attach_waits(t, &mut s, &waits, &mut resolver);
                out.entry(t.id).or_default().push(s);
            }
        }
        self.probe.forget_blame(&gone);
        out
    }

    /// Throttled stretches reported by the probe, kept with their target.
    fn collect_throttles(&mut self) {
        let mut resolver = HolderResolver::default();
        for (host_tid, host_tgid, start, end) in self.probe.drain_throttles() {
            let Some(id) = self.by_host_pid(host_tgid).map(|t| t.id) else { continue };
            let tid = resolver.ns_tid(self, host_tid);
            let t = self.targets.get_mut(&id).expect("found");
            t.throttles.push_back((tid, crate::model::throttle::Stretch { start, end }));
            while t.throttles.len() > THROTTLE_KEEP {
                t.throttles.pop_front();
            }
        }
    }

    /// Futex and run-queue blame records, by waiter host TID.
    fn waits_by_thread(&self) -> Waits {
        let mut w = Waits::default();
        for r in self.probe.futex_blame() {
            w.futex.entry(r.0).or_default().push(r);
        }
        for r in self.probe.preempt_blame() {
            w.preempt.entry(r.0).or_default().push(r);
        }
        w
    }

    /// Fill a sample's futex waits (by word and waker) and run-queue waits (by
    /// what had the CPU), with IDs of the agent's namespace.
    fn attach_waits(&self, t: &Target, s: &mut ThreadSample, waits: &Waits, r: &mut HolderResolver) {
        if let Some(recs) = waits.futex.get(&s.host_tid) {
            s.futex = recs
                .iter()
                .map(|(_, waker, addr, ns)| FutexWait { addr: *addr, waker: if *waker == 0 { 0 } else { r.ns_tid(self, *waker) }, ns: *ns })
                .collect();
        }
        if let Some(recs) = waits.preempt.get(&s.host_tid) {
            for (_, by_tid, by_tgid, comm, ns) in recs {
                let who = if *by_tid == 0 {
                    Preemptor::Idle
                } else if *by_tgid == t.host_pid {
                    Preemptor::Thread(r.ns_tid(self, *by_tid))
                } else {
                    Preemptor::Process { pid: r.ns_tid(self, *by_tgid), comm: sanitize(comm) }
                };
                *s.runqueue_by.entry(who).or_insert(0) += ns;
            }
        }
    }

    /// GIL hold histograms of every precise GIL probe, by host TID.
    fn gil_holds(&self) -> std::collections::HashMap<u32, crate::model::hist::HoldHist> {
        self.gil_probes.values().flat_map(|g| g.holds()).collect()
    }

    /// How GIL waits of a target are measured: futex, uprobe (futex plus
    /// hold times), or none.
    pub fn gil_probe_name(&self, t: &Target) -> &'static str {
        match &t.python {
            Some(p) if !p.gils.is_empty() && self.gil_probes.contains_key(&t.id) => "uprobe",
            Some(p) if !p.gils.is_empty() => "futex",
            _ => "none",
        }
    }

    /// Holds the precise GIL probes could not record.
    pub fn gil_holds_lost(&self) -> u64 {
        self.gil_probes.values().map(|g| g.lost()).sum()
    }

    /// GIL blame of the probe's map, by waiter host TID: [(holder id, ns)].
    fn blame_by_thread(&self) -> std::collections::HashMap<u32, Vec<(u64, u64)>> {
        let mut by: std::collections::HashMap<u32, Vec<(u64, u64)>> = Default::default();
        for (tid, holder, ns) in self.probe.gil_blame() {
            by.entry(tid).or_default().push((holder, ns));
        }
        by
    }

    /// Re-read the Python thread names of targets whose names are older than
    /// a second (threads come and go, and are renamed).
    fn refresh_names(&mut self) {
        let now = monotonic_ns();
        let stale: Vec<u64> = self
            .targets
            .values()
            .filter(|t| t.exited_ns.is_none() && t.python.as_ref().is_some_and(|p| p.layout.is_some_and(|l| l.objects.is_some())))
            .filter(|t| now.saturating_sub(t.names_at) >= NAMES_EVERY_NS)
            .map(|t| t.id)
            .collect();
        if stale.is_empty() {
            return;
        }
        let ids = self.probe.task_ids().unwrap_or_default();
        for id in stale {
            let Some(t) = self.targets.get_mut(&id) else { continue };
            t.fsbase_tids.extend(ids.iter().filter(|x| x.ns_tgid == t.pid).map(|x| (x.fsbase, x.ns_tid)));
            let p = t.python.as_ref().expect("filtered on python");
            let objects = p.layout.and_then(|l| l.objects).expect("filtered on objects");
            t.names_at = now;
            match python::names::thread_names(t.pid, p.runtime, &objects) {
                Ok(by_ident) => {
                    // ident is pthread_self(), which is the thread's FS base on x86-64 glibc
                    t.names = ids
                        .iter()
                        .filter(|x| x.ns_tgid == t.pid)
                        .filter_map(|x| Some((x.ns_tid, sanitize(by_ident.get(&x.fsbase)?))))
                        .collect();
                }
                Err(e) => log::debug!("process {}: cannot read Python thread names: {e:#}", t.pid),
            }
        }
    }

    /// Every live watched thread sampled now, by target, with its name and
    /// its GIL wait per holder.
    pub fn live(&mut self) -> BTreeMap<u64, Vec<ThreadSample>> {
        self.refresh_names();
        let mut out: BTreeMap<u64, Vec<ThreadSample>> = BTreeMap::new();
        let watched: std::collections::HashSet<u32> = self.probe.watched().into_iter().collect();
        let blame = self.blame_by_thread();
        let holds = self.gil_holds();
        let waits = self.waits_by_thread();
        let mut resolver = HolderResolver::default();
        for lt in self.probe.live_threads() {
            let mut s = lt.sample;
            match self.by_host_pid(lt.host_tgid) {
                Some(t) if t.exited_ns.is_none() => {
                    s.comm = procfs::task_comm(t.pid, s.tid).map(|c| sanitize(&c)).unwrap_or_else(|| "?".into());
                    s.py_name = t.names.get(&s.tid).cloned();
                    if t.python.is_some() {
                        let open = lt.gil_holder.map(|h| (h, s.times.get(crate::model::state::State::GilWait)));
                        let closed = blame.get(&s.host_tid).map(Vec::as_slice).unwrap_or(&[]);
                        s.gil_by_holder = resolver.resolve(self, t, closed, open);
                        s.gil_hold = holds.get(&s.host_tid).copied();
                    }
                    self.attach_waits(t, &mut s, &waits, &mut resolver);
                    out.entry(t.id).or_default().push(s);
                }
                Some(_) | None if !watched.contains(&lt.host_tgid) => {
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

/// Turns the holder ids the probe records into TIDs of the agent's namespace,
/// building each mapping once per sample and only when needed.
/// Futex and run-queue blame records of one sample, by waiter host TID.
#[derive(Default)]
struct Waits {
    futex: HashMap<u32, Vec<crate::probes::sched::FutexRecord>>,
    preempt: HashMap<u32, Vec<crate::probes::sched::PreemptRecord>>,
}

#[derive(Default)]
struct HolderResolver {
    /// host TID -> TID in the agent's namespace (read once per sample, when needed)
    host_ns: Option<HashMap<u32, u32>>,
    /// FS base -> TID, per target (CPython 3.8–3.10: pthread_t)
    fsbase: std::collections::HashMap<u64, std::collections::HashMap<u64, u32>>,
    /// TID in the target's own namespace -> TID in ours, per target
    nstid: std::collections::HashMap<u64, std::collections::HashMap<u64, u32>>,
}

impl HolderResolver {
    /// A host TID (or TGID) as the agent's namespace names it; the host's
    /// when the task is not visible there (or already gone).
    fn ns_tid(&mut self, session: &Session, host: u32) -> u32 {
        if !session.translate {
            return host;
        }
        let map = self
            .host_ns
            .get_or_insert_with(|| session.probe.task_ids().unwrap_or_default().into_iter().map(|x| (x.tid, x.ns_tid)).collect());
        map.get(&host).copied().unwrap_or(host)
    }

    fn holder_tid(&mut self, session: &Session, t: &Target, id: u64) -> u32 {
        if id == 0 {
            return 0;
        }
        match t.python.as_ref().and_then(python::holder_id) {
            Some(HolderId::NativeThreadId { .. }) if t.same_pidns => id as u32,
            Some(HolderId::NativeThreadId { .. }) => {
                let map = self.nstid.entry(t.id).or_insert_with(|| {
                    procfs::tasks(t.pid)
                        .into_iter()
                        .filter_map(|tid| Some((*procfs::task_nspid(t.pid, tid)?.last()? as u64, tid)))
                        .collect()
                });
                map.get(&id).copied().unwrap_or(0)
            }
            Some(HolderId::PthreadT { .. }) => {
                if let Some(tid) = t.fsbase_tids.get(&id) {
                    return *tid;
                }
                // a thread not seen yet: read the live ones (once per sample)
                let map = self.fsbase.entry(t.id).or_insert_with(|| {
                    session
                        .probe
                        .task_ids()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|x| x.ns_tgid == t.pid)
                        .map(|x| (x.fsbase, x.ns_tid))
                        .collect()
                });
                map.get(&id).copied().unwrap_or(0)
            }
            None => 0,
        }
    }

    /// holder TID -> ns, from closed waits and the open one.
    fn resolve(&mut self, session: &Session, t: &Target, closed: &[(u64, u64)], open: Option<(u64, u64)>) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        let closed_total: u64 = closed.iter().map(|c| c.1).sum();
        for (id, ns) in closed {
            *out.entry(self.holder_tid(session, t, *id)).or_insert(0) += ns;
        }
        // the open wait: the part of gil_wait not yet closed into the map
        if let Some((id, gil_total)) = open {
            let open_ns = gil_total.saturating_sub(closed_total);
            if open_ns > 0 {
                *out.entry(self.holder_tid(session, t, id)).or_insert(0) += open_ns;
            }
        }
        out
    }
}
