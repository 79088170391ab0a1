//! The sweep of the blame maps at a drain of exits (`bpf/sweep.bpf.h`): the
//! `sweep` program runs once (`BPF_PROG_RUN`) and moves the entries of
//! exited threads out of the kernel into `sweep_out`, read here through its
//! mmap. Under thread
//! churn this replaced, at every drain, three whole-map reads and a
//! lookup-and-delete system call per entry of a live waiter whose waker or
//! preemptor exited (docs/probes/sched.md, "Thread churn").
//!
//! The same program takes the entries the session picks (`take`): their keys
//! are written into `sweep_out`, and it moves them out the way the probes can
//! see (a wait charged to one as it goes is charged to a new entry, or counted
//! lost: `blame_taken`), which a lookup-and-delete from here cannot.
use anyhow::{Context, Result};

use super::Mapped;

use super::abi::skel::types::{wm_sweep_args, wm_sweep_limits, wm_sweep_mode, wm_sweep_out};
use super::sched::{futex_entry, futex_key, gil_entry, gil_key, preempt_entry, preempt_key, Entries, Pick, SchedProbe};
pub use crate::model::ledger::Swept;

/// The `sweep_out` array's value (BPF_F_MMAPABLE, one value), mapped into the agent for
/// reading, and for writing the keys of a take.
pub(super) struct SweepOut(Mapped);

impl SweepOut {
    pub(super) fn map(map: &libbpf_rs::MapMut<'_>) -> Result<SweepOut> {
        Ok(SweepOut(Mapped::new(map, size_of::<wm_sweep_out>(), "the sweep's output")?))
    }

    /// The output of the last run.
    ///
    /// # Safety
    /// No run of the sweep program is under way (runs are made by one thread, one at a time).
    unsafe fn read(&self) -> &wm_sweep_out {
        // SAFETY: the mapping holds one `wm_sweep_out`, page-aligned, for as long as `self`.
        unsafe { self.0.ptr().cast::<wm_sweep_out>().as_ref() }
    }

    /// The input of the next run.
    ///
    /// # Safety
    /// As `read`, and no reference from `read` is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn write(&self) -> &mut wm_sweep_out {
        // SAFETY: as `read`; the caller holds no other reference into the mapping.
        unsafe { self.0.ptr().cast::<wm_sweep_out>().as_mut() }
    }
}

impl SchedProbe {
    /// Move out of the blame maps the entries of the waiters that exited and,
    /// of live waiters, those whose waker or preemptor exited (or is not
    /// watched): one program run per `WM_SWEEP_OUT` entries of a kind.
    /// `gil`: GIL waits too (a Python process is watched).
    pub fn sweep(&self, gil: bool) -> Result<Swept> {
        anyhow::ensure!(self.sweeps(), "the sweep program is not loaded");
        let mut swept = Swept::default();
        // a run stops a map's walk when its output is full; the next goes on
        loop {
            self.run_sweep(wm_sweep_args { gil: gil as u32, mode: wm_sweep_mode::WM_SWEEP_WALK.0 })?;
            // SAFETY: the program has returned: nothing writes the value until the next run.
            let o = unsafe { self.sweep_out().read() };
            let n = |n: u32| (n as usize).min(wm_sweep_limits::WM_SWEEP_OUT.0 as usize);
            swept.exited.gil.extend(o.gil[..n(o.n_gil)].iter().map(|e| gil_entry(&e.k, e.ns)));
            for e in &o.futex[..n(o.n_futex)] {
                let r = futex_entry(&e.k, e.ns);
                if e.waiter_gone != 0 { &mut swept.exited } else { &mut swept.taken }.futex.push(r);
            }
            for e in &o.preempt[..n(o.n_preempt)] {
                let r = preempt_entry(&e.k, &e.v);
                if e.waiter_gone != 0 { &mut swept.exited } else { &mut swept.taken }.preempt.push(r);
            }
            if o.more == 0 {
                break;
            }
        }
        log::debug!(
            "sweep: moved {} gil, {} futex, {} preempt entries of exited waiters; took {} futex, {} preempt of live ones",
            swept.exited.gil.len(),
            swept.exited.futex.len(),
            swept.exited.preempt.len(),
            swept.taken.futex.len(),
            swept.taken.preempt.len()
        );
        Ok(swept)
    }

    /// Move the entries of `pick` out of the blame maps (the keys not there are skipped), as
    /// `sweep` takes those of live waiters: one run per `WM_SWEEP_OUT` keys of a kind.
    pub(super) fn take(&self, pick: &Pick) -> Result<Entries> {
        anyhow::ensure!(self.sweeps(), "the sweep program is not loaded");
        let per = wm_sweep_limits::WM_SWEEP_OUT.0 as usize;
        let gil: Vec<_> = pick.gil.iter().map(gil_key).collect();
        let futex: Vec<_> = pick.futex.iter().map(futex_key).collect();
        let preempt: Vec<_> = pick.preempt.iter().map(preempt_key).collect();
        let mut out = Entries::default();
        let runs = gil.len().max(futex.len()).max(preempt.len()).div_ceil(per);
        for run in 0..runs {
            let chunk = |n: usize| (run * per).min(n)..((run + 1) * per).min(n);
            let (g, f, p) = (&gil[chunk(gil.len())], &futex[chunk(futex.len())], &preempt[chunk(preempt.len())]);
            {
                // SAFETY: no run is under way (runs are made by this thread, one at a time).
                let o = unsafe { self.sweep_out().write() };
                o.n_gil = g.len() as u32;
                o.n_futex = f.len() as u32;
                o.n_preempt = p.len() as u32;
                g.iter().zip(o.gil.iter_mut()).for_each(|(k, e)| e.k = *k);
                f.iter().zip(o.futex.iter_mut()).for_each(|(k, e)| e.k = *k);
                p.iter().zip(o.preempt.iter_mut()).for_each(|(k, e)| e.k = *k);
            }
            self.run_sweep(wm_sweep_args { gil: 0, mode: wm_sweep_mode::WM_SWEEP_TAKE.0 })?;
            // SAFETY: the program has returned: nothing writes the value until the next run.
            let o = unsafe { self.sweep_out().read() };
            let n = |n: u32, asked: usize| (n as usize).min(asked);
            out.gil.extend(o.gil[..n(o.n_gil, g.len())].iter().map(|e| gil_entry(&e.k, e.ns)));
            out.futex.extend(o.futex[..n(o.n_futex, f.len())].iter().map(|e| futex_entry(&e.k, e.ns)));
            out.preempt.extend(o.preempt[..n(o.n_preempt, p.len())].iter().map(|e| preempt_entry(&e.k, &e.v)));
        }
        Ok(out)
    }

    /// One run of the sweep program with `args` as its context.
    fn run_sweep(&self, mut args: wm_sweep_args) -> Result<()> {
        // SAFETY: the program reads its ABI struct from these bytes, and writes none.
        let ctx = unsafe { std::slice::from_raw_parts_mut((&mut args as *mut wm_sweep_args).cast::<u8>(), size_of::<wm_sweep_args>()) };
        let input = libbpf_rs::ProgramInput { context_in: Some(ctx), ..Default::default() };
        let rc = self.sweep_prog().test_run(input).context("failed to run the sweep")?.return_value;
        anyhow::ensure!(rc == 0, "the sweep program found no output buffer");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::abi::as_bytes;
    use super::super::abi::skel::types::wm_preempt;
    use super::super::sched::{futex_key, gil_key, preempt_key, test_blame_maps, test_probe, FutexKey, GilKey, Incarnation, PreemptKey};
    use super::*;
    use crate::model::state::State;
    use libbpf_rs::{MapCore, MapFlags};

    #[test]
    fn a_sweep_moves_the_exited_and_takes_what_names_them_and_nothing_else() {
        let Some(probe) = test_probe() else { return };
        let [gil, futex, preempt] = test_blame_maps(&probe);
        // live threads: TIDs unused by real tasks' entries (nothing is watched)
        let (live, other_live) = (4_000_001u32, 4_000_002u32);
        probe.seed_thread(live, 1, live, 1, State::Running, 1_000);
        probe.seed_thread(other_live, 1, other_live, 1, State::Running, 2_000);
        let live_w: Incarnation = (live, 1_000);
        let stale_w: Incarnation = (live, 999); // an earlier thread with the live one's TID
        let (gone_tid, gone_w) = (4_000_100u32, (4_000_100u32, 7u32));
        let put = |m: &libbpf_rs::MapMut, k: &[u8], v: &[u8]| m.update(k, v, MapFlags::ANY).expect("update");
        let gil_key = |waiter, holder| gil_key(&GilKey { waiter, holder });
        let futex_key = |waiter, waker, word| futex_key(&FutexKey { waiter, waker, word });
        let preempt_key = |waiter, by_tid, by_tgid| preempt_key(&PreemptKey { waiter, by_tid, by_tgid, state: 1, ctx: 0 });
        let mut comm = [b'x' as _; 16];
        comm[15] = 0;
        let pv = |ns: u64| wm_preempt { ns, comm };
        put(gil, as_bytes(&gil_key(gone_w, 0x7f00)), &5u64.to_ne_bytes());
        put(gil, as_bytes(&gil_key(live_w, 0x7f00)), &6u64.to_ne_bytes());
        put(futex, as_bytes(&futex_key(gone_w, other_live, 0x10)), &10u64.to_ne_bytes()); // waiter gone
        put(futex, as_bytes(&futex_key(live_w, gone_tid, 0x20)), &20u64.to_ne_bytes()); // waker gone: taken
        put(futex, as_bytes(&futex_key(live_w, other_live, 0x30)), &30u64.to_ne_bytes()); // both live: stays
        put(futex, as_bytes(&futex_key(live_w, 0, 0x40)), &40u64.to_ne_bytes()); // timeout: stays
        put(preempt, as_bytes(&preempt_key(stale_w, other_live, 1)), as_bytes(&pv(50))); // waiter gone (TID reused)
        put(preempt, as_bytes(&preempt_key(live_w, 0, 0)), as_bytes(&pv(60))); // idle: stays
        put(preempt, as_bytes(&preempt_key(live_w, gone_tid, 1)), as_bytes(&pv(70))); // preemptor gone: taken
                                                                                      // more exited waiters' entries than one run moves: the next run goes on
        let many = wm_sweep_limits::WM_SWEEP_OUT.0 + 100;
        for i in 0..many {
            put(preempt, as_bytes(&preempt_key((4_100_000 + i, 3), other_live, 1)), as_bytes(&pv(1)));
        }

        let s = probe.sweep(false).expect("sweep");
        let futex_of = |e: &Entries| e.futex.iter().map(|e| (e.key.waiter, e.key.waker, e.key.word, e.ns)).collect::<Vec<_>>();
        assert!(s.exited.gil.is_empty(), "gil_blame is walked only when asked");
        assert_eq!(futex_of(&s.exited), vec![(gone_w, other_live, 0x10, 10)]);
        assert_eq!(futex_of(&s.taken), vec![(live_w, gone_tid, 0x20, 20)]);
        assert_eq!(s.taken.preempt.iter().map(|e| (e.key.waiter, e.key.by_tid, e.ns)).collect::<Vec<_>>(), vec![(live_w, gone_tid, 70)]);
        assert_eq!(s.exited.preempt.len(), many as usize + 1);
        assert!(s.exited.preempt.iter().any(|e| e.key.waiter == stale_w && e.ns == 50 && e.comm.text() == "xxxxxxxxxxxxxxx"));
        let s = probe.sweep(true).expect("sweep with GIL waits");
        assert_eq!(s.exited.gil.iter().map(|e| (e.key.waiter, e.key.holder, e.ns)).collect::<Vec<_>>(), vec![(gone_w, 0x7f00, 5)]);
        assert!(s.exited.futex.is_empty() && s.exited.preempt.is_empty() && s.taken.is_empty());
        // what stays: the live waiters' entries that name live threads, idle or no waker
        let left = |m: &libbpf_rs::MapMut| m.keys().count();
        assert_eq!((left(gil), left(futex), left(preempt)), (1, 2, 1));
    }

    /// Threads of this process in a ring, each taking turns (`turn`: receive from its channel, pass
    /// on to the next; false to stop), then parked in an open wait until its sender in `park` is
    /// dropped.
    struct Ring {
        tids: Vec<u32>,
        txs: Vec<std::sync::mpsc::Sender<u64>>,
        workers: Vec<std::thread::JoinHandle<()>>,
        park: std::sync::mpsc::Receiver<std::sync::mpsc::Sender<()>>,
    }

    impl Ring {
        fn start(
            n: usize,
            turn: impl Fn(&std::sync::mpsc::Receiver<u64>, &std::sync::mpsc::Sender<u64>) -> bool + Clone + Send + 'static,
        ) -> Ring {
            use std::sync::mpsc;
            let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel::<u64>()).unzip();
            let (tids_tx, tids) = mpsc::channel::<u32>();
            let (park_tx, park) = mpsc::channel::<mpsc::Sender<()>>();
            let mut workers = vec![];
            for (i, rx) in rxs.into_iter().enumerate() {
                let next = txs[(i + 1) % n].clone();
                let (tids_tx, park_tx, turn) = (tids_tx.clone(), park_tx.clone(), turn.clone());
                workers.push(std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tids_tx.send(unsafe { libc::gettid() } as u32).expect("say the TID");
                    while turn(&rx, &next) {}
                    // parked in an open wait while the maps are read
                    let (tx, wait) = mpsc::channel::<()>();
                    park_tx.send(tx).expect("park");
                    let _ = wait.recv();
                }));
            }
            let tids = (0..n).map(|_| tids.recv().expect("a worker's TID")).collect();
            Ring { tids, txs, workers, park }
        }
    }

    /// Taking the entries of live waiters as fast as the agent can while their waits are
    /// charged loses none: a ring of threads passes tokens (each blocks on a futex its
    /// neighbour wakes), and at the end each thread's futex time in the blame maps (taken, and
    /// left) is its own closed futex time in `threads`, to the nanosecond, or the difference is
    /// counted lost (`blame_taken`, `futex_map_full`).
    #[test]
    fn taking_entries_while_their_waits_are_charged_loses_none() {
        use std::collections::HashMap;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{mpsc, Arc};
        use std::time::{Duration, Instant};
        let Some(probe) = test_probe() else { return };
        let _turn = super::super::sched::own_process();
        probe.watch(std::process::id()).expect("watch this process");
        let stop = Arc::new(AtomicBool::new(false));
        let ring = 4;
        let halt = Arc::clone(&stop);
        let Ring { tids, txs, workers, park } = Ring::start(
            ring,
            move |rx, next| matches!(rx.recv_timeout(Duration::from_millis(100)), Ok(n) if !halt.load(Ordering::Relaxed) && next.send(n + 1).is_ok()),
        );
        // each blocked in its first wait: its rows taken, so that its waits go to the maps
        std::thread::sleep(Duration::from_millis(50));
        for t in &tids {
            probe.fill_rows(*t);
        }
        txs[0].send(0).expect("start the token");
        txs[ring / 2].send(0).expect("a second token");
        let before = probe.lost();
        let mine = |w: &Incarnation| tids.contains(&w.0);
        let mut taken: HashMap<Incarnation, u64> = HashMap::new();
        let (mut takes, mut moved) = (0u64, 0usize);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            let pick =
                Pick { futex: probe.blame().futex.iter().filter(|e| mine(&e.key.waiter)).map(|e| e.key).collect(), ..Default::default() };
            let f = probe.take_blame(&pick).futex;
            moved += f.len();
            for e in f {
                *taken.entry(e.key.waiter).or_default() += e.ns;
            }
            takes += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let parked: Vec<mpsc::Sender<()>> = (0..ring).map(|_| park.recv().expect("a worker parked")).collect();
        std::thread::sleep(Duration::from_millis(50)); // each is in its last wait
        let mut charged = taken.clone();
        for e in probe.blame().futex.into_iter().filter(|e| mine(&e.key.waiter)) {
            *charged.entry(e.key.waiter).or_default() += e.ns;
        }
        let own: HashMap<u32, (u32, u64)> = tids
            .iter()
            .map(|t| {
                let d = probe.read_thread(*t).expect("a worker's entry");
                (*t, (d.start as u32, d.ns[State::FutexWait as usize]))
            })
            .collect();
        let lost: u64 = probe
            .lost()
            .iter()
            .filter(|l| matches!(l.reason, crate::model::loss::Reason::BlameTaken | crate::model::loss::Reason::FutexMapFull))
            .map(|l| l.since(&before).count)
            .sum();
        drop(parked);
        drop(txs);
        for w in workers {
            w.join().expect("worker");
        }
        probe.unwatch(std::process::id());
        eprintln!("{takes} takes moved {moved} entries; lost {lost}; own {own:?}; charged {charged:?}");
        assert!(takes > 100 && moved > 1_000, "too few takes to race: {takes} moved {moved}");
        // (a lookup-and-delete from user space, as without the sweep program, lost ~0.1% of
        // each worker's futex time here, uncounted)
        let mut short = 0;
        for (tid, (gen, ns)) in &own {
            let got = charged.get(&(*tid, *gen)).copied().unwrap_or(0);
            assert!(*ns > 0, "worker {tid} never waited on a futex");
            assert!(got <= *ns, "worker {tid}: {got} ns charged, more than its {ns} ns of futex waits");
            short += ns - got;
        }
        // a wait counted lost is one wait, at most the 100 ms of a recv_timeout
        assert!(short <= lost * 100_000_000, "{short} ns of futex waits not charged, {lost} waits counted lost");
    }

    /// A thread's waits charged to its own rows and to the maps add up to its futex time, to the
    /// nanosecond, while it lives; its exit moves its rows into the maps, where the drain of
    /// exits finds all of it.
    #[test]
    fn a_threads_rows_and_the_maps_hold_its_waits_and_its_exit_moves_the_rows() {
        use std::collections::HashMap;
        use std::sync::mpsc;
        use std::time::Duration;
        let Some(mut probe) = test_probe() else { return };
        let _turn = super::super::sched::own_process();
        probe.watch(std::process::id()).expect("watch this process");
        let ring = 3;
        let Ring { tids, txs, workers, park } = Ring::start(ring, |rx, next| match rx.recv() {
            // the last round: passed on once more, so that every worker stops
            Ok(n) if n >= 3_000 => {
                let _ = next.send(n);
                false
            }
            Ok(n) => next.send(n + 1).is_ok(),
            Err(_) => false,
        });
        txs[0].send(0).expect("start the token");
        let parked: Vec<mpsc::Sender<()>> = (0..ring).map(|_| park.recv().expect("a worker parked")).collect();
        std::thread::sleep(Duration::from_millis(50)); // each is in its last wait
        let sum = |e: &Entries, w: &Incarnation| e.futex.iter().filter(|e| e.key.waiter == *w).map(|e| e.ns).sum::<u64>();
        let maps = probe.blame();
        let rows = probe.blame_rows();
        for t in &tids {
            let d = probe.read_thread(*t).expect("a worker's entry");
            let w = (*t, d.start as u32);
            let own = d.ns[State::FutexWait as usize];
            assert!(sum(&rows, &w) > 0, "worker {t}: no wait in its rows: {rows:?}");
            assert_eq!(sum(&rows, &w) + sum(&maps, &w), own, "worker {t}: rows and maps against its futex time");
        }
        drop(parked);
        drop(txs);
        for w in workers {
            w.join().expect("worker");
        }
        std::thread::sleep(Duration::from_millis(50));
        let exits: HashMap<Incarnation, u64> = probe
            .drain_exits()
            .into_iter()
            .filter(|(_, _, s)| tids.contains(&s.host_tid))
            .map(|(_, _, s)| ((s.host_tid, s.start_ns as u32), s.times.get(State::FutexWait)))
            .collect();
        probe.unwatch(std::process::id());
        assert_eq!(exits.len(), ring, "an exit record per worker: {exits:?}");
        let (maps, rows) = (probe.blame(), probe.blame_rows());
        for (w, own) in &exits {
            assert_eq!(sum(&rows, w), 0, "{w:?}: rows of an exited thread read");
            assert_eq!(sum(&maps, w), *own, "{w:?}: its blame in the maps after its exit against its futex time");
        }
    }
}
