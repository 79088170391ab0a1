//! A measurement session: the processes being watched and the sched probe,
//! turned into per-thread samples with user-visible IDs and names.
//!
//! `target.rs` adds, discovers and reaps the watched processes; `sample.rs`
//! reads the probe's maps into per-thread samples; `resolve.rs` turns the
//! holder, waker and preemptor ids of those maps into TIDs; `lifetime.rs`
//! forgets what belongs to threads that are gone. Which blame entries move out
//! of the kernel, and what each waiter's blame is, is the model's
//! (`model::ledger`): the session reads and takes around it.
use std::collections::BTreeMap;

use anyhow::{Context, Result};

use crate::clock::monotonic_ns;
use crate::error::usage;
use crate::model::labels::sanitize;
use crate::model::loss::{Lost, Probe, Reason};
use crate::probes::gil::GilProbe;
use crate::probes::pypark::Parks;
use crate::probes::sched::{SchedOptions, SchedProbe};
use crate::probes::{self};
use crate::procfs;

mod lifetime;
mod resolve;
mod sample;
mod stacks;
mod target;
mod timeline;

pub use target::Target;

/// Sweep the blame maps at drains of exits (probes/sweep.rs); off, they are
/// read whole at each drain (the path kept for kernels that refuse the sweep).
const SWEEP: bool = true;

pub struct SessionOptions {
    pub btf: Option<std::path::PathBuf>,
    pub max_threads: u32,
    pub max_procs: u32,
    /// size of the exit ring buffer (a power of 2)
    pub exit_buffer_bytes: u32,
    /// watch the children a watched process forks (`run --all`)
    pub follow_forks: bool,
    /// attach the precise GIL probe (uprobes) to Python targets with symbols
    pub gil_uprobes: bool,
    /// attach the parking-lot probe to Python 3.13+ targets
    pub lock_uprobes: bool,
    /// wait stacks to take
    pub stacks: crate::stacks::Options,
    /// a stretch away from a wait this long is a stall (model::stretches)
    pub stall_ns: u64,
    /// the timeline's ring buffer in bytes (a power of 2); 0: no timeline (`attach --trace`)
    pub timeline_bytes: u32,
}

/// Threads sampled at one moment, grouped by process (the model's: the exporter reads it).
pub use crate::model::partition::Snapshot;

pub struct Session {
    probe: SchedProbe,
    /// what the running kernel offers the probes
    kernel: probes::kernel::Kernel,
    translate: bool,
    self_pid: u32,
    pidns_ino: u64,
    targets: BTreeMap<u64, Target>,
    next_id: u64,
    gil_uprobes: bool,
    lock_uprobes: bool,
    max_threads: u32,
    /// precise GIL probes, by target id
    gil_probes: std::collections::HashMap<u64, GilProbe>,
    /// what Python 3.13+ threads park on
    parks: Parks,
    /// cleaning the maps by thread lifetime
    lifetime: lifetime::Lifetime,
    /// the blame moved out of the kernel, and what to move next
    ledger: crate::model::ledger::Ledger,
    /// wait stacks (None: off)
    stacks: Option<stacks::StackState>,
    /// the probe sweeps the blame maps at drains of exits (probes/sweep.rs);
    /// false after a failed sweep: the maps are read whole instead
    sweeps: bool,
}

impl Session {
    pub fn start(opts: &SessionOptions) -> Result<Session> {
        probes::preflight(opts.btf.as_deref())?;
        // below the floor: one line naming the kernel and what it lacks (exit 2); above it, once,
        // what this kernel's missing features degrade (a warning where every measurement changes)
        let kernel = probes::kernel::Kernel::probe().map_err(|e| usage!("{e}"))?;
        let (warn, info) = kernel.summary();
        if let Some(line) = warn {
            log::warn!("{line}");
        }
        if let Some(line) = info {
            log::info!("{line}");
        }
        let pidns_ino = procfs::self_pidns_ino().context("failed to read /proc/self/ns/pid")?;
        let translate = pidns_ino != procfs::INIT_PIDNS_INO;
        let probe = SchedProbe::load(&SchedOptions {
            max_threads: opts.max_threads,
            max_procs: opts.max_procs,
            exit_buffer_bytes: opts.exit_buffer_bytes,
            btf: opts.btf.clone(),
            follow_forks: opts.follow_forks,
            pidns_ino,
            translate_pids: translate,
            stacks: opts.stacks.mode(),
            stack_interval_ns: opts.stacks.interval_ns,
            holder_sample_hz: if opts.stacks.native && opts.stacks.python { opts.stacks.holder_hz } else { 0 },
            stall_ns: opts.stall_ns,
            timeline_bytes: opts.timeline_bytes,
            bpf_loop: kernel.has(probes::kernel::Feature::BpfLoop),
            irq_context: kernel.has(probes::kernel::Feature::IrqContext),
        })?;
        let mut session = Session {
            kernel,
            sweeps: SWEEP && probe.sweeps(),
            probe,
            translate,
            self_pid: std::process::id(),
            pidns_ino,
            targets: BTreeMap::new(),
            next_id: 1,
            gil_uprobes: opts.gil_uprobes,
            lock_uprobes: opts.lock_uprobes,
            max_threads: opts.max_threads,
            gil_probes: Default::default(),
            parks: Default::default(),
            lifetime: Default::default(),
            ledger: Default::default(),
            stacks: match opts.stacks.enabled() {
                true => Some(stacks::StackState::new(opts.stacks, crate::stacks::debuginfod::Debuginfod::from_env()?)),
                false => None,
            },
        };
        session.keep_stacks(opts.stacks.keep);
        Ok(session)
    }

    pub fn probe(&self) -> &SchedProbe {
        &self.probe
    }

    /// The running kernel's features, as the probes were loaded for them.
    pub fn kernel(&self) -> &probes::kernel::Kernel {
        &self.kernel
    }

    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.targets.values()
    }

    pub fn target_by_pid(&self, pid: u32) -> Option<&Target> {
        self.targets.values().find(|t| t.pid == pid)
    }

    /// Process `pid` (a PID of the agent's namespace) can be watched: it is there, alive, and
    /// not a kernel thread. Checked before the probes load too, so a wrong PID fails at once.
    pub fn check(pid: u32) -> Result<procfs::TaskStat> {
        let stat = procfs::process_stat(pid).ok_or_else(|| {
            usage!("no process with PID {pid}: check it with `ps -p {pid}` (inside a container, use the container's PIDs)")
        })?;
        if matches!(stat.state, 'Z' | 'X') {
            return Err(usage!("process {pid} ({}) has already exited (zombie): nothing to measure", sanitize(&stat.comm)));
        }
        if stat.is_kernel_thread() {
            return Err(usage!("PID {pid} is a kernel thread ({}): waitmeter measures user-space processes", sanitize(&stat.comm)));
        }
        Ok(stat)
    }

    /// Start watching process `pid` (a PID of the agent's namespace).
    pub fn attach(&mut self, pid: u32) -> Result<()> {
        let stat = Self::check(pid)?;
        let map = if self.translate { Some(self.ns_to_host()?) } else { None };
        let ids = self.host_ids(pid, map.as_ref()).ok_or_else(|| usage!("process {pid} exited before it could be watched"))?;
        self.add_target(pid, stat, ids)
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

    /// Entries of the kernel maps that grow with threads: (probe, map, entries).
    pub fn map_entries(&self) -> Vec<(&'static str, &'static str, usize)> {
        let mut out: Vec<_> = self.probe.occupancy().into_iter().map(|(m, n)| ("sched", m, n)).collect();
        out.push(("gil", "holds", self.gil_probes.values().map(|g| g.tids().len()).sum()));
        out
    }

    /// Every event lost so far, by every probe of the session.
    pub fn lost(&self) -> Vec<Lost> {
        let mut lost = self.probe.lost();
        lost.extend(self.python_lost());
        lost.extend(self.stacks_lost());
        lost
    }

    /// Events lost by the Python probes.
    fn python_lost(&self) -> [Lost; 2] {
        [
            Lost::new(Probe::Gil, Reason::HoldsMapFull, self.gil_probes.values().map(|g| g.lost()).sum()),
            Lost::new(Probe::Pypark, Reason::ParkedMapFull, self.parks.lost()),
        ]
    }

    /// Whether the waits of a target's threads in CPython's parking lot are
    /// charged to the address they parked on.
    pub fn parks_attached(&self, t: &Target) -> bool {
        self.parks.attached(t.id)
    }

    /// Exited threads first (so none is missed between the two), then live ones. The snapshot's
    /// time is the moment its live samples describe (their open intervals end there), taken
    /// before the stacks are collected: a window measured between two snapshots is then what its
    /// rows cover. Stamped after the stacks, a window whose first collection was slow (symbols
    /// read, under an emulated CPU 0.14-0.5 s) was that much shorter than its rows, and every
    /// thread's states summed to more than the window (tests/kernels: the pinned pair).
    pub fn sample(&mut self) -> Snapshot {
        let exited = self.exits();
        let live = self.live();
        let at_ns = live.values().flatten().map(|s| s.at_ns).max().unwrap_or_else(monotonic_ns);
        self.collect_stacks(&live, &exited);
        Snapshot { at_ns, live, exited }
    }
}
