//! Cleaning by the thread's lifetime, not by a record that can be lost.
//!
//! The kernel forgets a thread's `threads` entry at its exit, and the exit
//! record lets user space forget its blame entries and GIL holds. An exit
//! record can be lost (ring buffer full), and a thread can exit before it is
//! seeded: then nothing would ever forget its entries. Every `GC_EVERY_NS`
//! the entries that belong to no live thread are found, and forgotten if they
//! still belong to none at the next pass (by then any exit record that was on
//! its way has been read and folded). Blame keys carry the thread's
//! incarnation, so a thread reusing a TID never inherits them.
use std::collections::{BTreeMap, HashSet};

use super::sample::Blame;
use super::Session;
use crate::clock::monotonic_ns;
use crate::model::ledger::{Entries, Incarnation};
use crate::model::partition::ThreadSample;

/// How often entries without a live thread are looked for.
const GC_EVERY_NS: u64 = 5_000_000_000;

#[derive(Default)]
pub(super) struct Lifetime {
    /// threads whose `threads` entry is there but whose task is not (since the last pass)
    pub(super) vanished: HashSet<Incarnation>,
    /// the previous pass's suspects
    ghosts: HashSet<Incarnation>,
    orphans: HashSet<Incarnation>,
    orphan_holds: HashSet<u32>,
    next_ns: u64,
}

impl Session {
    /// Forget the blame entries and GIL holds of threads that exited (their
    /// final samples are taken from `kernel`, read after their exit records:
    /// it holds every entry they will ever have).
    pub(super) fn forget_threads(&mut self, gone: &HashSet<Incarnation>, kernel: &Entries) {
        if gone.is_empty() {
            return;
        }
        self.delete_blame_of(kernel, gone);
        self.ledger.forget(|w| gone.contains(w));
        self.forget_holds(&gone.iter().map(|w| w.0).collect::<Vec<u32>>());
    }

    /// Delete the kernel's blame entries of these waiters, as `kernel` (this
    /// sample's reading) has them: waiters that are gone get no new entries.
    fn delete_blame_of(&self, kernel: &Entries, gone: &HashSet<Incarnation>) -> usize {
        self.probe.delete_blame(&kernel.of(|w| gone.contains(w)))
    }

    /// Forget the GIL hold histograms of these threads, in every precise GIL probe.
    fn forget_holds(&self, host_tids: &[u32]) {
        for g in self.gil_probes.values() {
            g.forget(host_tids);
        }
    }

    /// At most every GC_EVERY_NS: forget the entries that belonged to no live
    /// thread at this pass and the previous one. `live` and `blame` are what
    /// this sample read; `seen` the incarnations of every `threads` entry.
    pub(super) fn collect_garbage(&mut self, live: &BTreeMap<u64, Vec<ThreadSample>>, seen: &HashSet<Incarnation>, blame: &Blame) {
        let now = monotonic_ns();
        if now < self.lifetime.next_ns {
            return;
        }
        self.lifetime.next_ns = now + GC_EVERY_NS;
        let probe = &self.probe;
        self.ledger.pass(&blame.kernel, seen, |pick| probe.take_blame(pick));
        let lt = &mut self.lifetime;
        // entries of threads that are gone from /proc
        let vanished = std::mem::take(&mut lt.vanished);
        let ghosts: Vec<Incarnation> = vanished.intersection(&lt.ghosts).copied().collect();
        lt.ghosts = vanished;
        for w in &ghosts {
            self.probe.forget_thread(*w);
        }
        // blame of incarnations without an entry
        let lt = &mut self.lifetime;
        let orphans: HashSet<Incarnation> =
            blame.waits.waiters().chain(self.ledger.waiters()).filter(|w| !seen.contains(w)).copied().collect();
        let dead: HashSet<Incarnation> = orphans.intersection(&lt.orphans).copied().collect();
        lt.orphans = orphans;
        let live_tids: HashSet<u32> = seen.iter().map(|w| w.0).collect();
        let orphan_holds: HashSet<u32> = blame.holds.keys().filter(|t| !live_tids.contains(t)).copied().collect();
        let dead_holds: Vec<u32> = orphan_holds.intersection(&lt.orphan_holds).copied().collect();
        lt.orphan_holds = orphan_holds;
        let mut collected = ghosts.len() as u64;
        if !dead.is_empty() {
            collected += self.delete_blame_of(&blame.kernel, &dead) as u64;
            self.ledger.forget(|w| dead.contains(w));
        }
        if !dead_holds.is_empty() {
            self.forget_holds(&dead_holds);
            collected += dead_holds.len() as u64;
        }
        // pthread_t -> TID of exited threads: kept while a GIL blame record still names it
        let holders: HashSet<u64> = blame.waits.gil.values().flatten().map(|e| e.key.holder).collect();
        for t in self.targets.values_mut() {
            let alive: HashSet<u32> = live.get(&t.id).into_iter().flatten().map(|s| s.tid).collect();
            t.fsbase_tids.retain(|fsbase, tid| alive.contains(tid) || holders.contains(fsbase));
            crate::shrink::shrink(&mut t.fsbase_tids);
        }
        if collected > 0 {
            log::debug!("forgot {collected} map entries of threads gone without an exit record");
        }
        let (settled, merged_ns) = self.ledger.entries();
        log::debug!("{settled} blame entries settled in user space ({merged_ns} ns of them merged into the exited/other counterpart)");
        release_freed_memory();
    }
}

/// Give the heap memory freed by forgetting back to the system, so the
/// agent's RSS follows what it holds instead of staying at its peak after a
/// burst of threads (glibc keeps freed memory in its arenas otherwise).
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
