//! The scheduler probe family (`bpf/sched.bpf.c`, `bpf/sched.h`,
//! `docs/probes/sched.md`): loads it, hands it its configuration, attaches the
//! BTF tracepoints and the task iterator, and reads its maps.
use std::cell::RefCell;
use std::io::Read;
use std::mem::{size_of, MaybeUninit};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};

use crate::clock::monotonic_ns;
use crate::model::loss::{Lost, Probe, Reason};
use crate::model::partition::{ThreadSample, Times};
use crate::model::state::{State, NR_STATES};
use crate::model::stretches::{self, WaitKey};
use crate::model::syscalls;

use super::batch;
use super::thread_table::{self, Copied, Seed, ThreadTable};
use super::{Mapped, Owned};

use super::abi::{as_bytes, from_bytes, skel, Plain};
use skel::types::{
    wm_blame_key, wm_exit, wm_futex_key, wm_futex_kind, wm_gil, wm_gil_key, wm_limits, wm_preempt, wm_preempt_key, wm_span, wm_stat,
    wm_state, wm_stretch, wm_stretch_key, wm_stretch_limits, wm_task_ids, wm_thread_data, wm_throttle,
};
use skel::{SchedSkel, SchedSkelBuilder};

// The state enum is ABI: the model's discriminants must be the kernel's.
const _: () = {
    assert!(State::Running as u32 == wm_state::WM_STATE_RUNNING.0);
    assert!(State::Runqueue as u32 == wm_state::WM_STATE_RUNQUEUE.0);
    assert!(State::Throttled as u32 == wm_state::WM_STATE_THROTTLED.0);
    assert!(State::GilWait as u32 == wm_state::WM_STATE_GIL_WAIT.0);
    assert!(State::FutexWait as u32 == wm_state::WM_STATE_FUTEX_WAIT.0);
    assert!(State::IoWait as u32 == wm_state::WM_STATE_IO_WAIT.0);
    assert!(State::Sleep as u32 == wm_state::WM_STATE_SLEEP.0);
    assert!(State::Other as u32 == wm_state::WM_STATE_OTHER.0);
    assert!(State::Yield as u32 == wm_state::WM_STATE_YIELD.0);
    assert!(NR_STATES == wm_state::WM_NR_STATES.0 as usize);
    assert!(syscalls::MAX_SYSCALLS == wm_limits::WM_MAX_SYSCALLS.0 as usize);
    assert!(stretches::UNIT_NS == wm_stretch_limits::WM_STRETCH_UNIT_NS.0 as u64);
    assert!(stretches::OCTAVES == wm_stretch_limits::WM_STRETCH_OCTAVES.0 as usize);
    assert!(stretches::SUB == wm_stretch_limits::WM_STRETCH_SUB.0 as usize);
    assert!(stretches::BUCKETS == wm_stretch_limits::WM_STRETCH_BUCKETS.0 as usize);
    assert!(stretches::KEY_SHIFT == wm_stretch_limits::WM_STRETCH_KEY_SHIFT.0);
    assert!(stretches::WORD_BLOCK == wm_stretch_limits::WM_STRETCH_WORD_BLOCK.0 as u64);
};

/// A GIL holder id with this bit is a host TID: the thread of the process whose
/// release woke the waiter, when the GIL was free as the waiter went to sleep.
pub const WAKER_HOLDER: u64 = 1 << wm_limits::WM_HOLDER_WAKER_BIT.0;
pub const DEFAULT_MAX_THREADS: u32 = wm_limits::WM_DEFAULT_MAX_THREADS.0;
pub const DEFAULT_MAX_PROCS: u32 = wm_limits::WM_DEFAULT_MAX_PROCS.0;

/// How long a read copies a thread's entry again before it takes the last copy as it is.
const SETTLE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(2);

/// Why events were lost, as exported in the `reason` label.
pub const LOSS_REASONS: [(u32, Reason); 9] = [
    (wm_stat::WM_STAT_THREAD_MAP_FULL.0, Reason::ThreadMapFull),
    (wm_stat::WM_STAT_EXIT_RINGBUF_FULL.0, Reason::ExitRingbufFull),
    (wm_stat::WM_STAT_BLAME_MAP_FULL.0, Reason::BlameMapFull),
    (wm_stat::WM_STAT_FUTEX_MAP_FULL.0, Reason::FutexMapFull),
    (wm_stat::WM_STAT_PREEMPT_MAP_FULL.0, Reason::PreemptMapFull),
    (wm_stat::WM_STAT_THROTTLE_RINGBUF_FULL.0, Reason::ThrottleRingbufFull),
    (wm_stat::WM_STAT_STRETCH_MAP_FULL.0, Reason::StretchMapFull),
    (wm_stat::WM_STAT_BLAME_TAKEN.0, Reason::BlameTaken),
    (wm_stat::WM_STAT_SPAN_RINGBUF_FULL.0, Reason::SpanRingbufFull),
];

pub use crate::model::ledger::{
    incarnation, Comm, Entries, FutexEntry, FutexKey, GilEntry, GilKey, Incarnation, Pick, PreemptEntry, PreemptKey,
};
/// A throttled stretch: (host TID, host TGID, start, end).
pub type ThrottleRecord = (u32, u32, u64, u64);

pub struct SchedOptions {
    pub max_threads: u32,
    pub max_procs: u32,
    /// size of the `exits` ring buffer in bytes (a power of 2 pages)
    pub exit_buffer_bytes: u32,
    pub btf: Option<PathBuf>,
    pub follow_forks: bool,
    /// inode of the agent's PID namespace
    pub pidns_ino: u64,
    /// the agent runs in a PID namespace other than the initial one
    pub translate_pids: bool,
    /// wait stacks to take (`wm_stacks_mode` bits; 0: none) and how often a
    /// thread takes its own (bpf/stacks.bpf.h)
    pub stacks: u8,
    pub stack_interval_ns: u64,
    /// CPU-clock samples a second per CPU for the GIL holders' native
    /// stacks (bpf/holder_samples.bpf.h; 0: none)
    pub holder_sample_hz: u32,
    /// a stretch away from a wait this long is a stall: the probe keeps its states (0: none)
    pub stall_ns: u64,
    /// size of the timeline's `spans` ring buffer in bytes (a power of 2 pages); 0: no timeline
    /// (bpf/timeline.h)
    pub timeline_bytes: u32,
    /// the kernel has bpf_loop() (probes/kernel.rs): the main object, whose stack walker's steps
    /// and sweep run in it; without it the legacy object (bpf/core_fixes.bpf.h: a bounded
    /// frame-pointer walk, no sweep, and nothing newer than Linux 5.10 asks for)
    pub bpf_loop: bool,
    /// the kernel's symbols name the per-CPU preempt count (probes/kernel.rs): sched_waking
    /// tells wakeups from interrupt context apart by it
    pub irq_context: bool,
}

pub use crate::model::stretches::StretchRecord;

pub struct SchedProbe {
    ringbuf: RingBuffer<'static>,
    exits: Rc<RefCell<Vec<wm_exit>>>,
    throttles: Rc<RefCell<Vec<wm_throttle>>>,
    /// the timeline's spans read since the last `drain_spans` (empty when it is off)
    spans: Rc<RefCell<Vec<wm_span>>>,
    links: Vec<(String, Link)>,
    /// the holder sampler's CPU clocks, one per CPU (empty: off, or failed)
    samplers: Vec<Link>,
    skel: Owned<SchedSkel<'static>>,
    /// `watched_bits`, shared with the kernel (mmap of the array map)
    bits: Bitmap,
    /// `py_bits`: the processes whose futex waits may be GIL waits or parked
    py_bits: Bitmap,
    /// threads user space could not seed because `threads` was full
    seed_lost: std::cell::Cell<u64>,
    /// entries still being written through every try to copy them (`read_slot`)
    unsettled: std::cell::Cell<u64>,
    /// `threads` and `thread_ids`, mapped (probes/thread_table.rs)
    table: ThreadTable,
    /// `sweep_out`, mapped (probes/sweep.rs)
    sweep_out: super::sweep::SweepOut,
    /// the `sweep` program is loaded
    sweeps: bool,
}

/// A bitmap of processes shared with the kernel (an mmap'd array of
/// `WM_WATCH_WORDS` u64s, bpf/watched.bpf.h): bit TGID. Both sides change it
/// with atomic operations only.
struct Bitmap(Mapped);

impl Bitmap {
    fn new(map: &libbpf_rs::MapMut<'_>, what: &str) -> Result<Bitmap> {
        Ok(Bitmap(Mapped::new(map, wm_limits::WM_WATCH_WORDS.0 as usize * size_of::<u64>(), what)?))
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `WM_WATCH_WORDS` u64s, page-aligned, and lives
        // as long as `self`; the kernel and this agent change it atomically only.
        unsafe { std::slice::from_raw_parts(self.0.ptr().as_ptr().cast::<AtomicU64>(), wm_limits::WM_WATCH_WORDS.0 as usize) }
    }

    fn bit(&self, host_tgid: u32) -> Result<(&AtomicU64, u64)> {
        let word = self.words().get(host_tgid as usize / 64).with_context(|| format!("PID {host_tgid} is above PID_MAX_LIMIT"))?;
        Ok((word, 1u64 << (host_tgid % 64)))
    }

    fn set(&self, host_tgid: u32) -> Result<()> {
        let (word, mask) = self.bit(host_tgid)?;
        word.fetch_or(mask, Ordering::SeqCst);
        Ok(())
    }

    fn clear(&self, host_tgid: u32) {
        if let Ok((word, mask)) = self.bit(host_tgid) {
            word.fetch_and(!mask, Ordering::SeqCst);
        }
    }
}

/// The `probe` label of the holder sampler's CPU clocks.
pub const HOLDER_SAMPLER: &str = "holder_sampler";

/// The hook variant in use (the `variant` label of waitmeter_probe_attached).
pub const VARIANT: &str = "tp_btf";

/// Host and namespace IDs of one task.
pub type TaskIds = wm_task_ids;

/// A live thread as the kernel has it now.
pub struct LiveThread {
    pub host_tgid: u32,
    pub sample: ThreadSample,
    /// in gil_wait now: the holder id recorded at its switch-out
    pub gil_holder: Option<u64>,
    /// the state it is in now, since when (CLOCK_MONOTONIC ns): its open interval
    pub state: State,
    pub since: u64,
}

/// How the probe finds a GIL's holder (offsets within CPython structs).
#[derive(Clone, Copy, Debug)]
pub struct GilSpec {
    pub gil: u64,
    pub off_locked: u32,
    pub off_last_holder: u32,
    pub off_holder_id: u32,
    pub off_switch_number: u32,
}

/// A futex blame key's address as the model has it: a parking-lot address
/// carries `model::blame::PARKED`.
pub(super) fn word(k: &wm_futex_key) -> u64 {
    if k.kind == wm_futex_kind::WM_FUTEX_PARKED.0 {
        k.addr | crate::model::blame::PARKED
    } else {
        k.addr
    }
}

fn open_and_load(opts: &SchedOptions, sweep: bool) -> Result<Owned<SchedSkel<'static>>> {
    Owned::open(|memory| open_and_load_in(memory, opts, sweep))
}

fn open_and_load_in(storage: &'static mut MaybeUninit<OpenObject>, opts: &SchedOptions, sweep: bool) -> Result<SchedSkel<'static>> {
    let mut builder = SchedSkelBuilder::default();
    if let Some(btf) = &opts.btf {
        builder.obj_builder.btf_custom_path(btf).context("failed to set the BTF path")?;
    }
    let mut open = {
        // the object this kernel loads: the main one, or the legacy one without bpf_loop()
        let _one = super::abi::skel::OPENING.lock().unwrap_or_else(|e| e.into_inner());
        super::abi::skel::LEGACY.store(!opts.bpf_loop, std::sync::atomic::Ordering::SeqCst);
        builder.open(storage).context("failed to open the sched BPF object")?
    };
    // the legacy object's claims of thread slots take a lock in it (bpf/thread_table.bpf.h)
    if opts.bpf_loop {
        open.maps.slot_locks.set_autocreate(false)?;
    }
    let groups = thread_table::groups_for(opts.max_threads);
    {
        let rodata = open.maps.rodata_data.as_deref_mut().context("sched BPF object has no .rodata")?;
        rodata.cfg.syscall_state = syscalls::table();
        rodata.cfg.pidns_ino = opts.pidns_ino;
        rodata.cfg.translate_pids = opts.translate_pids as u8;
        rodata.cfg.follow_forks = opts.follow_forks as u8;
        rodata.cfg.stacks = opts.stacks;
        rodata.cfg.timeline = (opts.timeline_bytes > 0) as u8;
        rodata.cfg.stack_interval_ns = opts.stack_interval_ns;
        rodata.cfg.stretch_long_ns = opts.stall_ns;
        rodata.cfg.thread_group_mask = groups - 1;
        rodata.cfg.sample_period_ns = if opts.holder_sample_hz > 0 { 1_000_000_000 / u64::from(opts.holder_sample_hz) } else { 0 };
    }
    open.maps.py_tstates.set_max_entries(opts.max_threads)?;
    open.maps.threads.set_max_entries(thread_table::slots_for(groups))?;
    open.maps.thread_ids.set_max_entries(groups)?;
    open.maps.parked.set_max_entries(opts.max_threads)?;
    open.maps.busy.set_max_entries(opts.max_threads)?;
    // a thread's last few waits each (most threads have one or two)
    open.maps.stretches.set_max_entries(opts.max_threads.saturating_mul(2))?;
    open.maps.watched.set_max_entries(opts.max_procs)?;
    open.maps.unwind_procs.set_max_entries(opts.max_procs)?;
    // the unwind rows are an array (all of it allocated): none when no native stack is taken
    if opts.stacks & super::stacks::MODE_NATIVE == 0 {
        open.maps.unwind_rows.set_max_entries(1)?;
    } else {
        open.maps.unwind_rows.set_max_entries(super::stacks::UNWIND_ROWS)?;
    }
    open.maps.exits.set_max_entries(opts.exit_buffer_bytes)?;
    if opts.timeline_bytes > 0 {
        open.maps.spans.set_max_entries(opts.timeline_bytes)?;
    }
    open.progs.sweep.set_autoload(sweep);
    open.progs.sched_waking_btf.set_autoload(opts.irq_context);
    open.progs.sched_waking_noirq_btf.set_autoload(!opts.irq_context);
    super::ask_verifier_stats(open.open_object_mut());
    open.load().map_err(anyhow::Error::from)
}

impl SchedProbe {
    /// Load and attach. Nothing is watched until `watch()`.
    pub fn load(opts: &SchedOptions) -> Result<SchedProbe> {
        // the sweep is an optimisation: a kernel that refuses its program
        // gets the probes without it (the blame maps are read whole instead)
        // (and the legacy object, for a kernel without bpf_loop, has none)
        let first = match opts.bpf_loop {
            true => Some(open_and_load(opts, true)),
            false => None,
        };
        let (mut skel, sweeps) = match first {
            Some(Ok(skel)) => (skel, true),
            first => {
                if let Some(Err(e)) = first {
                    log::info!("the blame maps are read whole at each drain of exits: the sweep program did not load ({e:#})");
                }
                let skel = open_and_load(opts, false)
                    .context("failed to load the scheduler probes; rerun with -vv for libbpf's log and the verifier's")?;
                (skel, false)
            }
        };
        let suffix = "_btf";
        let mut links = Vec::new();
        for prog in skel.object().progs_mut() {
            let name = prog.name().to_string_lossy().to_string();
            if !name.ends_with(suffix) || !prog.autoload() {
                continue;
            }
            let link = prog.attach().with_context(|| format!("failed to attach {name}"))?;
            // sched_waking's variant without the preempt count is sched_waking
            links.push((name.trim_end_matches(suffix).trim_end_matches("_noirq").to_string(), link));
        }
        let mut rb = RingBufferBuilder::new();
        let exits = collect_into::<wm_exit>(&mut rb, &skel.maps.exits)?;
        let throttles = collect_into::<wm_throttle>(&mut rb, &skel.maps.throttles)?;
        let spans = collect_into::<wm_span>(&mut rb, &skel.maps.spans)?;
        let ringbuf = rb.build().context("failed to set up the exit ring buffer")?;
        let bits = Bitmap::new(&skel.maps.watched_bits, "the watched bitmap")?;
        let py_bits = Bitmap::new(&skel.maps.py_bits, "the Python bitmap")?;
        let sweep_out = super::sweep::SweepOut::map(&skel.maps.sweep_out)?;
        let locks = (!opts.bpf_loop).then_some(&skel.maps.slot_locks);
        let table = ThreadTable::map(&skel.maps.thread_ids, &skel.maps.threads, locks)?;
        let mut samplers = vec![];
        if opts.holder_sample_hz > 0 {
            // without it the holders' stacks are their Python frames: worth a warning, not an exit
            match super::cpu_clock::attach(&mut skel.progs.sample_holder, opts.holder_sample_hz) {
                Ok(l) => samplers = l,
                Err(e) => log::warn!(
                    "no native frames for GIL holders: {e:#} (needs CAP_PERFMON or CAP_SYS_ADMIN; --holder-sample-hz 0 to not try)"
                ),
            }
        }
        Ok(SchedProbe {
            ringbuf,
            exits,
            throttles,
            spans,
            links,
            samplers,
            skel,
            bits,
            py_bits,
            seed_lost: Default::default(),
            unsettled: Default::default(),
            table,
            sweep_out,
            sweeps,
        })
    }

    /// The `parked` map (host TID -> address parked on), which the pypark
    /// probe's uprobes write and this probe reads.
    pub fn parked_map(&self) -> &libbpf_rs::MapMut<'_> {
        &self.skel.maps.parked
    }

    /// The `watched_bits` map (bit TGID set = watched), which every probe
    /// that filters by process shares with this one (bpf/watched.bpf.h).
    pub fn watched_bits_map(&self) -> &libbpf_rs::MapMut<'_> {
        &self.skel.maps.watched_bits
    }

    /// The maps of the wait stacks (bpf/stacks.bpf.h), which live in this
    /// probe's object: `probes::stacks` reads and configures them.
    pub(crate) fn stack_maps(&self) -> super::stacks::Maps<'_> {
        let m = &self.skel.maps;
        super::stacks::Maps {
            native: &m.native_stacks,
            py: &m.py_stacks,
            walk: &m.py_walk,
            tstates: &m.py_tstates,
            waits: &m.wait_stacks,
            stats: &m.stack_stats,
            unwind_rows: &m.unwind_rows,
            unwind_procs: &m.unwind_procs,
        }
    }

    /// Take and charge every wait stack (true), or only what GIL holders
    /// held (`stacks_all` in bpf/sched.bpf.c).
    pub fn set_stacks_all(&mut self, all: bool) {
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: a u32 of the mmap'd .bss, which the BPF side only reads;
            // volatile, so that the store is not elided.
            unsafe { std::ptr::write_volatile(&mut bss.stacks_all, all as u32) };
        }
    }

    /// Whether the blame maps can be swept at drains of exits (probes/sweep.rs).
    pub fn sweeps(&self) -> bool {
        self.sweeps
    }

    /// The sweep's program and output (probes/sweep.rs).
    pub(super) fn sweep_prog(&self) -> &libbpf_rs::ProgramMut<'_> {
        &self.skel.progs.sweep
    }

    pub(super) fn sweep_out(&self) -> &super::sweep::SweepOut {
        &self.sweep_out
    }

    /// Attached hooks (tracepoint names).
    pub fn attached(&self) -> Vec<String> {
        let mut v: Vec<String> = self.links.iter().map(|(n, _)| n.clone()).collect();
        if !self.samplers.is_empty() {
            v.push(HOLDER_SAMPLER.to_string());
        }
        v
    }

    pub fn watch(&self, host_tgid: u32) -> Result<()> {
        self.skel
            .maps
            .watched
            .update(&host_tgid.to_ne_bytes(), &1u32.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("failed to watch process {host_tgid} (more than --max-processes?)"))?;
        self.bits.set(host_tgid)
    }

    pub fn unwatch(&self, host_tgid: u32) {
        self.bits.clear(host_tgid);
        self.py_bits.clear(host_tgid);
        let _ = self.skel.maps.watched.delete(&host_tgid.to_ne_bytes());
    }

    /// Process `host_tgid` runs Python: the switch-out of its threads looks
    /// their futex words up among GIL words and parked addresses (other
    /// processes' futex waits skip both lookups).
    pub fn mark_python(&self, host_tgid: u32) {
        let _ = self.py_bits.set(host_tgid);
    }

    /// Host TGIDs in the watched map (the BPF side adds forked children).
    pub fn watched(&self) -> Vec<u32> {
        self.skel.maps.watched.keys().filter_map(|k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?))).collect()
    }

    /// Start measuring a thread in `state` as of `now` (a thread that existed
    /// before the probe saw it). An entry the BPF side created first wins.
    pub fn seed_thread(&self, host_tid: u32, host_tgid: u32, ns_tid: u32, ns_tgid: u32, state: State, now: u64) {
        let d = wm_thread_data {
            state: state as u32,
            since: now,
            start: now,
            tgid: host_tgid,
            syscall: -1,
            ns_tid,
            ns_tgid,
            stack: super::stacks::NO_STACK,
            holder: super::stacks::NO_STACK,
            waker_stack: super::stacks::NO_STACK,
            ..Default::default()
        };
        match self.table.seed(host_tid, &d) {
            Seed::Added | Seed::Exists => {}
            Seed::Full => {
                log::debug!("failed to seed thread {host_tid}: no free slot in its groups of the thread table");
                self.seed_lost.set(self.seed_lost.get() + 1);
            }
        }
    }

    /// Forget a thread that is gone (its exit record was lost or it exited
    /// before being seen): its entry, if it is still that incarnation.
    pub fn forget_thread(&self, who: Incarnation) {
        self.table.forget(who.0, |t| incarnation(who.0, t.start) == who);
    }

    /// Take every blame row of thread `host_tid` with a key no wait has: its waits go to the
    /// maps from now on (a test of the maps' protocols). The thread must be blocked.
    #[cfg(test)]
    pub(super) fn fill_rows(&self, host_tid: u32) {
        let mut rows = skel::types::wm_thread_rows::default();
        for (i, r) in rows.gil.iter_mut().enumerate() {
            (r.holder, r.ns) = (u64::MAX - i as u64, 1);
        }
        for (i, r) in rows.futex.iter_mut().enumerate() {
            (r.waker, r.addr, r.ns) = (u32::MAX - i as u32, u64::MAX, 1);
        }
        for (i, r) in rows.preempt.iter_mut().enumerate() {
            (r.by_tid, r.by_tgid, r.ns) = (u32::MAX - i as u32, u32::MAX, 1);
        }
        self.table.write_rows(host_tid, &rows);
    }

    /// One consistent copy of thread `host_tid`'s entry, or None when it has none.
    #[cfg(test)]
    pub(super) fn read_thread(&self, host_tid: u32) -> Option<wm_thread_data> {
        self.read_slot(self.table.find(host_tid)?, host_tid)
    }

    /// The entry in `slot`, of thread `tid`: a copy no write overlapped (`ThreadTable::read`).
    /// An entry still being written after `SETTLE_PATIENCE` of copies is taken as last copied and
    /// counted (`thread_unsettled`); None when the slot is freed meanwhile (the thread exited:
    /// its final record tells the rest).
    fn read_slot(&self, slot: usize, tid: u32) -> Option<wm_thread_data> {
        match self.table.read(slot, tid, SETTLE_PATIENCE) {
            Copied::Settled(d) => Some(d),
            Copied::Unsettled(d) => {
                self.unsettled.set(self.unsettled.get() + 1);
                Some(d)
            }
            Copied::Gone => None,
        }
    }

    /// Recognise waits on these futex words of process `host_tgid` as GIL waits.
    pub fn add_gil(&self, host_tgid: u32, words: &[u64], spec: GilSpec) -> Result<()> {
        // the probe reads the three fields in one (struct wm_gil_head)
        if spec.off_locked != spec.off_last_holder + 8 || spec.off_switch_number != spec.off_last_holder + 16 {
            anyhow::bail!(
                "the GIL of process {host_tgid} has `locked` at {} and `switch_number` at {}, not right after `last_holder` at {} as every known CPython",
                spec.off_locked,
                spec.off_switch_number,
                spec.off_last_holder
            );
        }
        self.py_bits.set(host_tgid)?;
        let v = wm_gil { gil: spec.gil, off_head: spec.off_last_holder, off_holder_id: spec.off_holder_id };
        for w in words {
            let k = wm_gil_key { tgid: host_tgid, uaddr: *w, ..Default::default() };
            self.skel
                .maps
                .gil_words
                .update(as_bytes(&k), as_bytes(&v), MapFlags::ANY)
                .with_context(|| format!("failed to register the GIL of process {host_tgid}"))?;
        }
        Ok(())
    }

    pub fn remove_gils(&self, host_tgid: u32) {
        let map = &self.skel.maps.gil_words;
        let keys: Vec<Vec<u8>> = map.keys().filter(|k| from_bytes::<wm_gil_key>(k).is_some_and(|k| k.tgid == host_tgid)).collect();
        for k in keys {
            let _ = map.delete(&k);
        }
    }

    /// Every blame entry the kernel holds: closed GIL waits charged to their
    /// holder, futex waits to their waker, run-queue waits to what had the CPU.
    pub fn blame(&self) -> Entries {
        let m = &self.skel.maps;
        Entries {
            gil: entries::<wm_blame_key, u64>(&m.gil_blame).into_iter().map(|(k, ns)| gil_entry(&k, ns)).collect(),
            futex: entries::<wm_futex_key, u64>(&m.futex_blame).into_iter().map(|(k, ns)| futex_entry(&k, ns)).collect(),
            preempt: entries::<wm_preempt_key, wm_preempt>(&m.preempt_blame).into_iter().map(|(k, v)| preempt_entry(&k, &v)).collect(),
        }
    }

    /// The blame in live threads' rows (struct wm_thread_rows), as entries of the kinds the maps
    /// hold: no key is in both while its thread lives. Read after the maps: a thread that exits
    /// meanwhile moves its rows into them, and is missed by both readings rather than counted
    /// twice (its exit record's drain finds them).
    pub fn blame_rows(&self) -> Entries {
        let mut out = Entries::default();
        for (slot, tid) in self.table.published() {
            let rows = match self.table.read_rows(slot, tid, SETTLE_PATIENCE) {
                Copied::Settled(r) => r,
                Copied::Unsettled(r) => {
                    self.unsettled.set(self.unsettled.get() + 1);
                    r
                }
                Copied::Gone => continue,
            };
            let gen = rows.gen;
            out.gil
                .extend(rows.gil.iter().take_while(|r| r.ns != 0).map(|r| gil_entry(&wm_blame_key { tid, gen, holder: r.holder }, r.ns)));
            out.futex.extend(
                rows.futex
                    .iter()
                    .take_while(|r| r.ns != 0)
                    .map(|r| futex_entry(&wm_futex_key { tid, gen, waker: r.waker, addr: r.addr, kind: r.kind }, r.ns)),
            );
            out.preempt.extend(rows.preempt.iter().take_while(|r| r.ns != 0).map(|r| {
                let key = wm_preempt_key { tid, gen, by_tid: r.by_tid, by_tgid: r.by_tgid, state: r.state, ctx: r.ctx };
                preempt_entry(&key, &wm_preempt { ns: r.ns, comm: r.comm })
            }));
        }
        out
    }

    /// Read what the ring buffers (exits, throttled stretches, the timeline's spans) hold into
    /// their vectors, for the drains to take.
    fn consume_rings(&self) {
        if let Err(e) = self.ringbuf.consume() {
            log::warn!("failed to read the ring buffers: {e}");
        }
    }

    /// The timeline's spans closed since the last call (bpf/timeline.h), as the kernel sent them:
    /// (host TID, host TGID, state, start, end, culprit, culprit's host TGID).
    pub fn drain_spans(&mut self) -> Vec<crate::model::timeline::RawSpan> {
        self.consume_rings();
        self.spans
            .borrow_mut()
            .drain(..)
            .filter_map(|s| {
                Some(crate::model::timeline::RawSpan {
                    host_tid: s.tid,
                    host_tgid: s.tgid,
                    state: crate::model::state::State::from_index(s.state as usize)?,
                    start: s.start,
                    end: s.end,
                    culprit: s.culprit,
                    by_tgid: s.by_tgid,
                })
            })
            .collect()
    }

    /// Throttled stretches that ended since the last call (drained with the exits).
    pub fn drain_throttles(&mut self) -> Vec<ThrottleRecord> {
        self.throttles.borrow_mut().drain(..).map(|t| (t.tid, t.tgid, t.start, t.end)).collect()
    }

    /// Move the blame entries whose keys `pick` chooses out of the kernel
    /// maps; a key that is not there is skipped. With the sweep program, it
    /// takes them (`probes::sweep`: a wait charged to one as it goes is in a
    /// new entry, or counted lost); else each is looked up and deleted in one
    /// system call, and a wait charged between the two is lost uncounted.
    pub fn take_blame(&self, pick: &Pick) -> Entries {
        if self.sweeps() {
            match self.take(pick) {
                Ok(taken) => return taken,
                Err(e) => log::warn!("{e:#}: taking blame entries with a lookup-and-delete each"),
            }
        }
        fn take<K: Plain, V: Plain, R>(map: &libbpf_rs::MapMut, keys: impl Iterator<Item = K>, rec: impl Fn(K, V) -> R) -> Vec<R> {
            keys.filter_map(|k| Some(rec(k, from_bytes::<V>(&map.lookup_and_delete(as_bytes(&k)).ok()??)?))).collect()
        }
        let m = &self.skel.maps;
        Entries {
            gil: take::<wm_blame_key, u64, _>(&m.gil_blame, pick.gil.iter().map(gil_key), |k, ns| gil_entry(&k, ns)),
            futex: take::<wm_futex_key, u64, _>(&m.futex_blame, pick.futex.iter().map(futex_key), |k, ns| futex_entry(&k, ns)),
            preempt: take::<wm_preempt_key, wm_preempt, _>(&m.preempt_blame, pick.preempt.iter().map(preempt_key), |k, v| {
                preempt_entry(&k, &v)
            }),
        }
    }

    /// Drop these blame entries (read from the maps before): those of
    /// waiters that exited, whose values are final. Returns how many were
    /// deleted.
    pub fn delete_blame(&self, e: &Entries) -> usize {
        let m = &self.skel.maps;
        let g: Vec<wm_blame_key> = e.gil.iter().map(|e| gil_key(&e.key)).collect();
        let f: Vec<wm_futex_key> = e.futex.iter().map(|e| futex_key(&e.key)).collect();
        let p: Vec<wm_preempt_key> = e.preempt.iter().map(|e| preempt_key(&e.key)).collect();
        batch::delete(&m.gil_blame, &g) + batch::delete(&m.futex_blame, &f) + batch::delete(&m.preempt_blame, &p)
    }

    /// Entries in each kernel map that grows with threads: (map, entries).
    pub fn occupancy(&self) -> Vec<(&'static str, usize)> {
        let m = &self.skel.maps;
        vec![
            ("threads", self.table.len()),
            ("gil_blame", batch::count::<wm_blame_key, u64>(&m.gil_blame)),
            ("futex_blame", batch::count::<wm_futex_key, u64>(&m.futex_blame)),
            ("preempt_blame", batch::count::<wm_preempt_key, wm_preempt>(&m.preempt_blame)),
            ("watched", batch::count::<u32, u32>(&m.watched)),
            ("gil_words", batch::count::<wm_gil_key, wm_gil>(&m.gil_words)),
            ("stretches", batch::count::<wm_stretch_key, wm_stretch>(&m.stretches)),
        ]
    }

    /// Every thread's stretches away from each of its waits, cumulative.
    pub fn stretches(&self) -> Vec<StretchRecord> {
        batch::dump::<wm_stretch_key, wm_stretch>(&self.skel.maps.stretches, MapFlags::ANY)
            .into_iter()
            .map(|(k, v)| {
                let mut h = stretches::Hist {
                    count: v.count,
                    ns: v.ns,
                    max_ns: v.max_ns,
                    wait_ns: v.wait_ns,
                    long_count: v.long_count,
                    long_ns: v.long_ns,
                    long_state_ns: v.long_state_ns,
                    ..Default::default()
                };
                h.buckets = v.buckets;
                ((k.tid, k.gen, WaitKey(k.wait)), h)
            })
            .collect()
    }

    /// Delete these entries of the stretches map: their threads are gone, and the reading just
    /// taken is their last (only the thread itself writes its entries).
    pub fn forget_stretches(&self, gone: &[(u32, u32, WaitKey)]) -> usize {
        let keys: Vec<wm_stretch_key> = gone.iter().map(|(tid, gen, w)| wm_stretch_key { tid: *tid, gen: *gen, wait: w.0 }).collect();
        batch::delete(&self.skel.maps.stretches, &keys)
    }

    /// One consistent copy of every entry, read in place.
    fn all_threads(&self) -> Vec<(u32, wm_thread_data)> {
        self.table.published().filter_map(|(slot, tid)| Some((tid, self.read_slot(slot, tid)?))).collect()
    }

    /// Every live watched thread, sampled now. `comm` is left empty for the
    /// caller to fill from /proc.
    pub fn live_threads(&self) -> Vec<LiveThread> {
        let entries = self.all_threads();
        let now = monotonic_ns();
        let mut out = Vec::with_capacity(entries.len());
        for (host_tid, t) in entries {
            out.push(LiveThread {
                host_tgid: t.tgid,
                sample: ThreadSample {
                    tid: t.ns_tid,
                    host_tid,
                    pid: t.ns_tgid,
                    comm: String::new(),
                    py_name: None,
                    start_ns: t.start,
                    at_ns: now,
                    exited: false,
                    times: Times::at(t.ns, t.state, t.since, now),
                    gil_by_holder: Default::default(),
                    gil_hold: None,
                    futex: vec![],
                    runqueue_by: Default::default(),
                    woken_by: Default::default(),
                    yields: t.nr_yields,
                    gil_waits: t.nr_gil_waits,
                },
                gil_holder: (t.state == State::GilWait as u32).then_some(t.gil_holder),
                state: State::from_index(t.state as usize).unwrap_or(State::Running),
                since: t.since,
            });
        }
        out
    }

    /// Final samples of the threads that exited since the last call:
    /// (host TGID, FS base, sample).
    pub fn drain_exits(&mut self) -> Vec<(u32, u64, ThreadSample)> {
        self.consume_rings();
        self.exits
            .borrow_mut()
            .drain(..)
            .map(|r| {
                let comm = crate::model::labels::sanitize(&String::from_utf8_lossy(
                    r.comm.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect::<Vec<_>>().as_slice(),
                ));
                (
                    r.t.tgid,
                    r.fsbase,
                    ThreadSample {
                        tid: r.t.ns_tid,
                        host_tid: r.tid,
                        pid: r.t.ns_tgid,
                        comm,
                        py_name: None,
                        start_ns: r.t.start,
                        at_ns: r.end,
                        exited: true,
                        times: Times::at(r.t.ns, r.t.state, r.t.since, r.end),
                        gil_by_holder: Default::default(),
                        gil_hold: None,
                        futex: vec![],
                        runqueue_by: Default::default(),
                        woken_by: Default::default(),
                        yields: r.t.nr_yields,
                        gil_waits: r.t.nr_gil_waits,
                    },
                )
            })
            .collect()
    }

    /// Events lost in the kernel so far (counts summed over CPUs).
    pub fn lost(&self) -> Vec<Lost> {
        LOSS_REASONS
            .iter()
            .map(|(idx, reason)| {
                let per_cpu = self.skel.maps.stats.lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY);
                let total = per_cpu.ok().flatten().map(|v| v.iter().filter_map(|b| from_bytes::<u64>(b)).sum()).unwrap_or(0);
                let user = if *idx == wm_stat::WM_STAT_THREAD_MAP_FULL.0 { self.seed_lost.get() } else { 0 };
                Lost::new(Probe::Sched, *reason, total + user)
            })
            .chain([Lost::new(Probe::Sched, Reason::ThreadUnsettled, self.unsettled.get())])
            .collect()
    }

    /// Host <-> namespace IDs (and FS base) of every task in the agent's PID namespace.
    pub fn task_ids(&self) -> Result<Vec<TaskIds>> {
        let link = self.skel.progs.task_ids.attach().context("failed to attach the task iterator")?;
        let mut it = libbpf_rs::Iter::new(&link).context("failed to create the task iterator")?;
        let mut buf = Vec::new();
        it.read_to_end(&mut buf).context("failed to read the task iterator")?;
        Ok(buf.chunks_exact(size_of::<TaskIds>()).filter_map(from_bytes::<TaskIds>).collect())
    }
}

/// Add a ring buffer whose records (ABI struct `T`) are pushed onto the returned queue.
/// The builder borrows the map only until `build`: the ring buffer maps the
/// map's memory itself, which holds the map for as long as it lives.
fn collect_into<'m, T: Plain>(rb: &mut RingBufferBuilder<'m, 'static>, map: &'m libbpf_rs::MapMut<'_>) -> Result<Rc<RefCell<Vec<T>>>> {
    let queue = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&queue);
    rb.add(map, move |data: &[u8]| {
        if let Some(rec) = from_bytes::<T>(data) {
            sink.borrow_mut().push(rec);
        }
        0
    })?;
    Ok(queue)
}

/// The preemptor's process name of a run-queue entry.
pub(super) fn comm_of(v: &wm_preempt) -> Comm {
    Comm(v.comm.map(|c| c as u8))
}

/// Every (key, value) of a hash map of ABI structs.
fn entries<K: Plain, V: Plain>(map: &libbpf_rs::MapMut) -> Vec<(K, V)> {
    batch::dump(map, MapFlags::ANY)
}

pub(super) fn gil_key(k: &GilKey) -> wm_blame_key {
    wm_blame_key { tid: k.waiter.0, gen: k.waiter.1, holder: k.holder }
}

/// The kernel's key of a futex blame entry (the inverse of `word`).
pub(super) fn futex_key(k: &FutexKey) -> wm_futex_key {
    let parked = k.word & crate::model::blame::PARKED != 0;
    wm_futex_key {
        tid: k.waiter.0,
        gen: k.waiter.1,
        waker: k.waker,
        addr: k.word & !crate::model::blame::PARKED,
        kind: if parked { wm_futex_kind::WM_FUTEX_PARKED.0 } else { wm_futex_kind::WM_FUTEX_WORD.0 },
    }
}

pub(super) fn preempt_key(k: &PreemptKey) -> wm_preempt_key {
    wm_preempt_key { tid: k.waiter.0, gen: k.waiter.1, by_tid: k.by_tid, by_tgid: k.by_tgid, state: k.state, ctx: k.ctx }
}

/// The blame entries as read, taken or swept (the inverses of the keys above).
pub(super) fn gil_entry(k: &wm_blame_key, ns: u64) -> GilEntry {
    GilEntry { key: GilKey { waiter: (k.tid, k.gen), holder: k.holder }, ns }
}

pub(super) fn futex_entry(k: &wm_futex_key, ns: u64) -> FutexEntry {
    FutexEntry { key: FutexKey { waiter: (k.tid, k.gen), waker: k.waker, word: word(k) }, ns }
}

pub(super) fn preempt_entry(k: &wm_preempt_key, v: &wm_preempt) -> PreemptEntry {
    PreemptEntry {
        key: PreemptKey { waiter: (k.tid, k.gen), by_tid: k.by_tid, by_tgid: k.by_tgid, state: k.state, ctx: k.ctx },
        comm: comm_of(v),
        ns: v.ns,
    }
}

/// A sched probe for unit tests on the real kernel (None, with a line on
/// stderr, without root and BTF). Nothing is watched.
#[cfg(test)]
pub(super) fn test_probe() -> Option<SchedProbe> {
    test_probe_with(0)
}

/// The same, with the timeline's ring of `timeline_bytes` (0: off).
#[cfg(test)]
pub(super) fn test_probe_with(timeline_bytes: u32) -> Option<SchedProbe> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        waitmeter_formats::testing::skip("loading the sched probe needs root and BTF");
        return None;
    }
    let pidns_ino = crate::procfs::self_pidns_ino().expect("own PID namespace");
    let probe = SchedProbe::load(&SchedOptions {
        max_threads: 1024,
        max_procs: 16,
        exit_buffer_bytes: 1 << 18,
        btf: None,
        follow_forks: false,
        pidns_ino,
        translate_pids: pidns_ino != crate::procfs::INIT_PIDNS_INO,
        stacks: 0,
        stack_interval_ns: 0,
        stall_ns: 0,
        holder_sample_hz: 0,
        timeline_bytes,
        bpf_loop: super::kernel::Kernel::probe().expect("a kernel above the floor").has(super::kernel::Feature::BpfLoop),
        irq_context: super::kernel::Kernel::probe().expect("a kernel above the floor").has(super::kernel::Feature::IrqContext),
    })
    .expect("load the sched probe");
    Some(probe)
}

/// Held by every unit test that watches this process: each one's threads would be watched by
/// the others' probes too, their waits charged in the others' maps (the sweep's race test counts
/// an uncounted loss when another test's entries churn its map's elements), and its storm would
/// slow their events. They take turns.
#[cfg(test)]
pub(super) fn own_process() -> std::sync::MutexGuard<'static, ()> {
    static WATCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    WATCHING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The blame maps, for tests that fill them by hand.
#[cfg(test)]
pub(super) fn test_blame_maps(p: &SchedProbe) -> [&libbpf_rs::MapMut<'_>; 3] {
    [&p.skel.maps.gil_blame, &p.skel.maps.futex_blame, &p.skel.maps.preempt_blame]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    /// Threads of this process passing tokens around a ring (each pass a
    /// futex wake and a context switch on both sides), after `pause` each.
    struct TokenRing {
        stop: Arc<AtomicBool>,
        txs: Vec<mpsc::Sender<u64>>,
        workers: Vec<std::thread::JoinHandle<()>>,
    }

    impl TokenRing {
        /// `threads` in the ring, a token given to each of `tokens` (their places).
        fn start(threads: usize, tokens: &[usize], pause: Duration) -> TokenRing {
            let stop = Arc::new(AtomicBool::new(false));
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<u64>()).unzip();
            let mut workers = vec![];
            for (i, rx) in rxs.into_iter().enumerate() {
                let next = txs[(i + 1) % threads].clone();
                let stop = Arc::clone(&stop);
                workers.push(std::thread::spawn(move || {
                    while let Ok(n) = rx.recv_timeout(Duration::from_millis(100)) {
                        if !pause.is_zero() {
                            std::thread::sleep(pause);
                        }
                        if stop.load(Ordering::Relaxed) || next.send(n + 1).is_err() {
                            break;
                        }
                    }
                }));
            }
            for &at in tokens {
                txs[at].send(0).expect("give a token");
            }
            TokenRing { stop, txs, workers }
        }

        fn stop(self) {
            self.stop.store(true, Ordering::Relaxed);
            drop(self.txs);
            for w in self.workers {
                w.join().expect("ring thread");
            }
        }
    }

    /// What must hold of every copy of a `threads` entry (bpf/sched.h).
    fn disagreement(t: &wm_thread_data) -> Option<String> {
        let closed: u64 = t.ns.iter().sum();
        let state = State::from_index(t.state as usize)?;
        let blocked = !matches!(state, State::Running | State::Runqueue | State::Throttled | State::Yield);
        let why = if t.since < t.start || closed != t.since - t.start {
            "sum(ns) != since - start"
        } else if t.gil_holder != 0 && state != State::GilWait {
            "a GIL holder outside gil_wait"
        } else if t.futex_addr != 0 && !matches!(state, State::FutexWait | State::GilWait) {
            "a futex word outside futex_wait/gil_wait"
        } else if t.waker != 0 && !matches!(state, State::FutexWait | State::GilWait) {
            "a waker outside futex_wait/gil_wait"
        } else if t.syscall >= 0 && !blocked {
            "a syscall while runnable"
        } else {
            return None;
        };
        Some(format!("{why}: {t:?}"))
    }

    /// Threads of this process pass a token around as fast as they can (each
    /// pass is a futex wake and a context switch on both sides) while the
    /// entries are read back, one by one and the whole map at once; no copy
    /// may have fields that disagree.
    #[test]
    fn reads_are_never_torn_under_a_write_storm() {
        let Some(probe) = test_probe() else { return };
        let _turn = own_process();
        let me = std::process::id();
        probe.watch(me).expect("watch this process");
        let ring = TokenRing::start(6, &[0, 3], Duration::ZERO);
        let (mut reads, mut whole, mut bad) = (0u64, 0u64, vec![]);
        let deadline = Instant::now() + Duration::from_secs(4);
        while Instant::now() < deadline {
            let tids: Vec<u32> = probe.table.published().map(|(_, tid)| tid).collect();
            let one_by_one = tids.iter().filter_map(|&tid| probe.read_thread(tid)).collect::<Vec<_>>();
            let at_once = probe.all_threads().into_iter().map(|(_, t)| t).collect::<Vec<_>>();
            whole += at_once.len() as u64;
            for t in one_by_one.iter().chain(&at_once) {
                reads += 1;
                if let Some(why) = disagreement(t) {
                    bad.push(why);
                }
            }
        }
        let switches: u64 = probe.all_threads().into_iter().map(|(_, t)| t.nr_switches).sum::<u64>();
        ring.stop();
        probe.unwatch(me);
        eprintln!(
            "{reads} reads ({whole} of the whole map), {switches} context switches, {} torn, {} unsettled",
            bad.len(),
            probe.unsettled.get()
        );
        assert!(switches > 20_000, "the storm did not storm: {switches} switches");
        assert!(reads > 20_000 && whole > 10_000, "too few reads: {reads}, {whole} of the whole map");
        assert!(bad.is_empty(), "{} of {reads} copies disagree, e.g. {}", bad.len(), bad[0]);
    }

    /// The timeline's spans are the partition's intervals: threads that pass tokens around a
    /// ring and exit leave spans that, per state, add up to their final records' times to the
    /// nanosecond, each span ending where the thread's next one starts; with the timeline off,
    /// none come.
    #[test]
    fn a_threads_spans_add_up_to_its_partition() {
        let Some(mut off) = test_probe() else { return };
        let mut probe = test_probe_with(1 << 22).expect("loaded once already");
        let _turn = own_process();
        let me = std::process::id();
        probe.watch(me).expect("watch this process");
        off.watch(me).expect("watch this process");
        let ring = TokenRing::start(3, &[0], Duration::from_micros(200));
        let mut spans = vec![];
        let mut exits = vec![];
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            spans.extend(probe.drain_spans());
        }
        ring.stop();
        std::thread::sleep(Duration::from_millis(50));
        exits.extend(probe.drain_exits());
        spans.extend(probe.drain_spans());
        let none = off.drain_spans();
        probe.unwatch(me);
        off.unwatch(me);
        assert!(none.is_empty(), "{} spans with the timeline off", none.len());
        let ring_exits: Vec<&ThreadSample> = exits.iter().map(|(_, _, s)| s).filter(|s| s.times.total() > 0).collect();
        assert!(ring_exits.len() >= 3, "{} exits", ring_exits.len());
        let lost = probe.lost().into_iter().find(|l| l.reason == Reason::SpanRingbufFull).map_or(0, |l| l.count);
        assert_eq!(lost, 0);
        let mut checked = 0;
        for s in ring_exits {
            let mine: Vec<_> = spans.iter().filter(|x| x.host_tid == s.host_tid).collect();
            for w in mine.windows(2) {
                assert_eq!(w[0].end, w[1].start, "a gap or an overlap between spans: {:?}", w);
            }
            for state in State::ALL {
                let sum: u64 = mine.iter().filter(|x| x.state == state).map(|x| x.end - x.start).sum();
                assert_eq!(sum, s.times.get(state), "thread {} in {}: {} spans", s.host_tid, state.name(), mine.len());
            }
            checked += mine.len();
        }
        assert!(checked > 1000, "{checked} spans");
    }

    /// A switch's time is the run queue's clock carried over to CLOCK_MONOTONIC
    /// (bpf/rq_clock.bpf.h). A thread sleeps 3 ms between two reads of its own
    /// CLOCK_MONOTONIC and then spins: its entry, read while it runs, says
    /// since when, which must fall between the sleep's end and the second
    /// read (a spin that lost the CPU meanwhile, by its own count of switches,
    /// is not counted). Two other threads pass a token every 100 µs meanwhile,
    /// so many switch-ins find their run queue's offset already taken (up to
    /// 1 ms before) rather than taking it.
    #[test]
    fn a_switch_is_stamped_on_clock_monotonic() {
        let Some(probe) = test_probe() else { return };
        let _turn = own_process();
        let me = std::process::id();
        probe.watch(me).expect("watch this process");
        let ring = TokenRing::start(2, &[0], Duration::from_micros(100));
        let (tx, rx) = mpsc::channel::<(u32, u64, u64)>();
        let (kept_tx, kept_rx) = mpsc::channel::<bool>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            let switches = || {
                // SAFETY: a zeroed rusage is valid; RUSAGE_THREAD fills it for this thread.
                let mut u: libc::rusage = unsafe { std::mem::zeroed() };
                unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
                u.ru_nvcsw + u.ru_nivcsw
            };
            while go_rx.recv().is_ok() {
                let t0 = monotonic_ns();
                std::thread::sleep(Duration::from_millis(3));
                let t1 = monotonic_ns();
                let before = switches();
                tx.send((tid, t0, t1)).expect("say when");
                let spin = Instant::now();
                while spin.elapsed() < Duration::from_millis(4) {
                    std::hint::spin_loop();
                }
                // no switch since t1: the entry read meanwhile is this switch-in's
                kept_tx.send(switches() == before).expect("say if it kept the CPU");
            }
        });
        // a switch-in stamped a few µs off (the clock's update before the
        // tracepoint, the offset's age) is fine; a clock that is not
        // CLOCK_MONOTONIC is off by far more
        const SLACK_NS: i64 = 50_000;
        let (mut seen, mut skipped) = (vec![], vec![]);
        for _ in 0..400 {
            if seen.len() >= 20 {
                break;
            }
            go_tx.send(()).expect("go");
            let (tid, t0, t1) = rx.recv().expect("when");
            let t = probe.read_thread(tid);
            let kept = kept_rx.recv().expect("kept");
            match t {
                Some(t) if kept && t.state == State::Running as u32 => {
                    seen.push((t.since as i64 - (t0 + 3_000_000) as i64, t1 as i64 - t.since as i64));
                }
                Some(t) => skipped.push((kept, t.state)), // switched meanwhile: `since` is another switch's
                None => skipped.push((kept, u32::MAX)),
            }
        }
        drop(go_tx);
        sleeper.join().expect("sleeper");
        ring.stop();
        probe.unwatch(me);
        eprintln!("(since - sleep's end, second read - since) in ns: {seen:?}; {} skipped", skipped.len());
        let off: Vec<_> = seen.iter().filter(|(after_end, before_read)| *after_end < -SLACK_NS || *before_read < -SLACK_NS).collect();
        assert!(off.is_empty(), "{} of {} switch-ins stamped outside the thread's own clock's bounds: {off:?}", off.len(), seen.len());
        assert!(seen.len() >= 20, "too few switch-ins read while running: {}", seen.len());
    }
}
