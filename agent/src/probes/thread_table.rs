//! The thread table (`bpf/thread_table.bpf.h`), as the agent sees it: the `threads` array of
//! entries and the `thread_ids` array of slot groups, both mapped into the agent. It reads an
//! entry in place under its `seq` (no system call), seeds a thread the BPF side has not seen, and
//! frees the slot of a thread that is gone, with the claiming protocol of the BPF side.
use std::mem::size_of;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::abi::skel::types::{wm_thread, wm_thread_data, wm_thread_group, wm_thread_rows, wm_thread_table};
use super::abi::Plain;
use super::Mapped;

const GROUP: usize = wm_thread_table::WM_THREAD_GROUP_SLOTS.0 as usize;
const PROBE_GROUPS: usize = wm_thread_table::WM_THREAD_PROBE_GROUPS.0 as usize;
const CLAIMED: u32 = wm_thread_table::WM_THREAD_CLAIMED.0;
/// Copies a read makes back to back before it yields between copies (`ThreadTable::read`).
const FAST_TRIES: usize = 256;

const _: () = assert!(size_of::<wm_thread_group>() == GROUP * size_of::<u32>());
// the kernel lays an array's values out 8 bytes apart at least
const _: () = assert!(size_of::<wm_thread>() % 8 == 0);

// an entry's data and rows are copied a word at a time (`copy_words`)
const _: () = assert!(size_of::<wm_thread_data>() % 8 == 0 && std::mem::align_of::<wm_thread_data>() == 8);
const _: () = assert!(size_of::<wm_thread_rows>() % 8 == 0 && std::mem::align_of::<wm_thread_rows>() == 8);

/// A copy of `*from`, shared with a writer, one aligned 8-byte load after another: each load a
/// plain `mov`, which x86-64 keeps in order with the loads of `seq` around it. (A copy of the
/// whole struct may become a string or vector copy, whose loads the CPU need not keep in order:
/// under the unit tests' load such copies came out torn between two equal reads of `seq`.)
///
/// # Safety
/// `from` is valid for reads of a `T` and 8-byte aligned, and `T`'s size is a multiple of 8.
unsafe fn copy_words<T: Plain + Default>(from: *const T) -> T {
    let mut out = T::default();
    let (src, dst) = (from.cast::<u64>(), std::ptr::addr_of_mut!(out).cast::<u64>());
    for i in 0..size_of::<T>() / 8 {
        // SAFETY: in bounds of both (the size is a multiple of 8, asserted above for the two
        // parts read); any bits are a valid T (plain integers).
        unsafe { dst.add(i).write(std::ptr::read_volatile(src.add(i))) };
    }
    out
}

/// The groups of a table sized for `max_threads`: a power of 2, at least one.
pub fn groups_for(max_threads: u32) -> u32 {
    (max_threads as usize).div_ceil(GROUP).max(1).next_power_of_two() as u32
}

/// The slots of a table of `groups` groups (the `threads` array's entries).
pub fn slots_for(groups: u32) -> u32 {
    groups * GROUP as u32
}

/// What a read of one slot found: its data, or its blame rows.
#[derive(Debug)]
pub enum Copied<T = wm_thread_data> {
    /// the slot holds no thread, or another thread, now
    Gone,
    /// a copy no write overlapped
    Settled(T),
    /// still being written through every try: the last copy, maybe torn
    Unsettled(T),
}

/// What seeding a thread did.
#[derive(Debug, PartialEq, Eq)]
pub enum Seed {
    Added,
    /// the BPF side has (or is writing) its entry already
    Exists,
    /// no free slot in its groups
    Full,
}

pub struct ThreadTable {
    /// the memory of `ids` and `entries`: the arrays mapped (None in the unit tests, which lend
    /// their own)
    _mapped: Option<(Mapped, Mapped)>,
    ids: NonNull<AtomicU32>,
    entries: NonNull<wm_thread>,
    groups: usize,
    /// the legacy object's lock of slots being claimed (`slot_locks` in bpf/thread_table.bpf.h: no
    /// compare-and-exchange in BPF before Linux 5.12); None: claims are compare-and-exchanges
    locks: Option<libbpf_rs::MapHandle>,
}

impl ThreadTable {
    /// Map the two arrays of a table, as sized before load (`groups_for`).
    /// `locks`: the legacy object's `slot_locks`, under which its claims are made.
    pub fn map(ids: &libbpf_rs::MapMut<'_>, entries: &libbpf_rs::MapMut<'_>, locks: Option<&libbpf_rs::MapMut<'_>>) -> Result<ThreadTable> {
        use libbpf_rs::MapCore;
        let groups = ids.max_entries() as usize;
        assert!(groups.is_power_of_two(), "the thread table has a power of 2 groups");
        assert_eq!(entries.max_entries() as usize, groups * GROUP, "the thread table has GROUP slots a group");
        let ids = Mapped::new(ids, groups * size_of::<wm_thread_group>(), "the thread table's ids")?;
        let entries = Mapped::new(entries, groups * GROUP * size_of::<wm_thread>(), "the thread table")?;
        let (i, e) = (ids.ptr().cast(), entries.ptr().cast());
        let locks = locks.map(libbpf_rs::MapHandle::try_from).transpose().context("failed to open the thread table's locks")?;
        Ok(ThreadTable { _mapped: Some((ids, entries)), ids: i, entries: e, groups, locks })
    }

    fn ids(&self) -> &[AtomicU32] {
        // SAFETY: `ids` holds `groups` groups of GROUP u32s, aligned, and lives as long as
        // `self`; both sides change the ids with atomic or aligned 32-bit stores only.
        unsafe { std::slice::from_raw_parts(self.ids.as_ptr(), self.groups * GROUP) }
    }

    fn entry(&self, slot: usize) -> *mut wm_thread {
        assert!(slot < self.groups * GROUP);
        // SAFETY: in bounds (slot < groups * GROUP entries).
        unsafe { self.entries.as_ptr().add(slot) }
    }

    /// `tid`'s home slot: its low bits (`home_slot()` in bpf/thread_table.bpf.h).
    fn home(&self, tid: u32) -> usize {
        tid as usize & (self.groups * GROUP - 1)
    }

    /// The slots of `tid`'s groups, in probe order: its home slot's group, then the next ones.
    fn probe_order(&self, tid: u32) -> impl Iterator<Item = usize> + '_ {
        let (mask, home_group) = (self.groups - 1, self.home(tid) / GROUP);
        (0..PROBE_GROUPS).flat_map(move |k| {
            let group = (home_group + k) & mask;
            (0..GROUP).map(move |i| group * GROUP + i)
        })
    }

    /// The slot that holds `tid`'s published entry.
    pub fn find(&self, tid: u32) -> Option<usize> {
        let ids = self.ids();
        self.probe_order(tid).find(|&s| ids[s].load(Ordering::Acquire) == tid)
    }

    /// Every slot with a published entry: (slot, TID).
    pub fn published(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.ids().iter().enumerate().filter_map(|(s, id)| {
            let id = id.load(Ordering::Acquire);
            (id != 0 && id & CLAIMED == 0).then_some((s, id))
        })
    }

    /// The entry of `tid` in `slot`, copied in place: a copy between two reads of the same even
    /// `seq`, with the slot still `tid`'s after it (the BPF side frames each write with `seq`,
    /// odd meanwhile, and x86-64 makes its stores visible in order; a slot freed and claimed
    /// again moves `seq` on). Copies again for up to `patience`: a write takes well under a
    /// microsecond, but its CPU may be taken from it half-way (a virtual CPU the host
    /// deschedules), so past the first few hundred tries the reader yields between tries.
    pub fn read(&self, slot: usize, tid: u32, patience: Duration) -> Copied {
        // SAFETY: `e` points to an entry of the mapping (`entry`).
        self.read_part(slot, tid, patience, |e| unsafe { std::ptr::addr_of!((*e).d) })
    }

    /// The blame rows of `tid`'s entry in `slot`, copied in place as `read` copies its data.
    pub fn read_rows(&self, slot: usize, tid: u32, patience: Duration) -> Copied<wm_thread_rows> {
        // SAFETY: `e` points to an entry of the mapping (`entry`).
        self.read_part(slot, tid, patience, |e| unsafe { std::ptr::addr_of!((*e).rows) })
    }

    fn read_part<T: Plain + Default>(
        &self,
        slot: usize,
        tid: u32,
        patience: Duration,
        part: impl Fn(*const wm_thread) -> *const T,
    ) -> Copied<T> {
        let ids = self.ids();
        let e = self.entry(slot);
        let mut last = None;
        let start = Instant::now();
        for tries in 0usize.. {
            if tries >= FAST_TRIES && (tries % FAST_TRIES == 0 && start.elapsed() >= patience) {
                break;
            }
            if ids[slot].load(Ordering::Acquire) != tid {
                return Copied::Gone;
            }
            // SAFETY: `e` points into the mapping; the fields are plain integers, and a copy
            // that a write overlapped is detected below and not used as settled.
            let seq = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*e).seq)) };
            fence(Ordering::Acquire);
            let d = unsafe { copy_words(part(e.cast_const())) };
            fence(Ordering::Acquire);
            let again = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*e).seq)) };
            if ids[slot].load(Ordering::Acquire) != tid {
                return Copied::Gone;
            }
            if seq % 2 == 0 && seq == again {
                return Copied::Settled(d);
            }
            last = Some(d);
            if tries < FAST_TRIES {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        last.map_or(Copied::Gone, Copied::Unsettled)
    }

    /// Start an entry for `tid` with data `d`, unless the BPF side has one: a free slot of its
    /// groups claimed (compare-and-exchange, as the BPF side does), the entry written under
    /// `seq`, then published. A claim that sees another claim of the same TID after its own
    /// yields (claim_thread_slot() in bpf/thread_table.bpf.h): one entry at most, and when both
    /// yield the thread's next event makes it.
    pub fn seed(&self, tid: u32, d: &wm_thread_data) -> Seed {
        let ids = self.ids();
        let claimed = CLAIMED | tid;
        if self.probe_order(tid).any(|s| matches!(ids[s].load(Ordering::Acquire), id if id == tid || id == claimed)) {
            return Seed::Exists;
        }
        // its home slot if free, else the first free slot of its groups
        let claim = |s: usize| self.claim(s, claimed);
        let home = self.home(tid);
        let Some(slot) = Some(home).filter(|&s| claim(s)).or_else(|| self.probe_order(tid).find(|&s| claim(s))) else {
            return Seed::Full;
        };
        // another claim of the same TID seen (the BPF side's): this one yields
        let other = self.probe_order(tid).any(|s| s != slot && matches!(ids[s].load(Ordering::SeqCst), id if id == tid || id == claimed));
        if other {
            ids[slot].store(0, Ordering::SeqCst);
            return Seed::Exists;
        }
        let e = self.entry(slot);
        // SAFETY: the slot is claimed by this call: no BPF program writes its entry (they find
        // published slots only) and readers skip it; its fields are plain integers.
        unsafe {
            let seq = std::ptr::read_volatile(std::ptr::addr_of!((*e).seq));
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).seq), seq.wrapping_add(1) | 1);
            fence(Ordering::Release);
            std::ptr::write_bytes(std::ptr::addr_of_mut!((*e).waking), 0, 1);
            std::ptr::write_bytes(std::ptr::addr_of_mut!((*e).homes), 0, 1);
            std::ptr::write_bytes(std::ptr::addr_of_mut!((*e).rows), 0, 1);
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).rows.gen), d.start as u32);
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).d), *d);
            fence(Ordering::Release);
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).seq), (seq.wrapping_add(1) | 1).wrapping_add(1));
        }
        ids[slot].store(tid, Ordering::Release);
        Seed::Added
    }

    /// Set slot `slot`'s id from 0 to `claimed`: true when this call did. Under the slot's lock
    /// where the BPF side claims under it (`claim_id()` in bpf/thread_table.bpf.h).
    fn claim(&self, slot: usize, claimed: u32) -> bool {
        let id = &self.ids()[slot];
        let Some(locks) = &self.locks else {
            return id.compare_exchange(0, claimed, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        };
        use libbpf_rs::{MapCore, MapFlags};
        let key = (slot as u32).to_ne_bytes();
        if id.load(Ordering::SeqCst) != 0 || locks.update(&key, &[1], MapFlags::NO_EXIST).is_err() {
            return false;
        }
        let won = id.compare_exchange(0, claimed, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        let _ = locks.delete(&key);
        won
    }

    /// Free the slot of `tid` if `gone` says its entry is of the thread that is gone (not of a
    /// later thread with its TID).
    pub fn forget(&self, tid: u32, gone: impl Fn(&wm_thread_data) -> bool) {
        let Some(slot) = self.find(tid) else { return };
        if let Copied::Settled(d) | Copied::Unsettled(d) = self.read(slot, tid, Duration::from_millis(2)) {
            if gone(&d) {
                let _ = self.ids()[slot].compare_exchange(tid, 0, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
    }

    /// Overwrite the blame rows of `tid`'s entry (a test's: a thread whose waits are charged to
    /// the maps, its rows taken by keys no wait has). Call it while the thread is blocked.
    #[cfg(test)]
    pub fn write_rows(&self, tid: u32, rows: &wm_thread_rows) {
        let slot = self.find(tid).expect("the thread has an entry");
        let e = self.entry(slot);
        // SAFETY: `e` points into the mapping; its only writer, the thread's next transition,
        // waits for the blocked thread's wakeup, which the caller makes after this.
        unsafe {
            let seq = std::ptr::read_volatile(std::ptr::addr_of!((*e).seq));
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).seq), seq.wrapping_add(1));
            fence(Ordering::Release);
            let gen = std::ptr::read_volatile(std::ptr::addr_of!((*e).rows.gen));
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).rows), wm_thread_rows { gen, ..*rows });
            fence(Ordering::Release);
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*e).seq), seq.wrapping_add(2));
        }
    }

    /// Published entries now.
    pub fn len(&self) -> usize {
        self.published().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// A table in memory of its own: what the mapping would be.
    struct Lent {
        table: ThreadTable,
        _ids: Vec<AtomicU32>,
        _entries: Vec<wm_thread>,
    }

    // SAFETY: the table's pointers are into the two vectors it lives with; it is shared
    // across threads only as `&`, and changes ids atomically (entries: of claimed slots only).
    unsafe impl Send for Lent {}
    unsafe impl Sync for Lent {}

    fn table(groups: u32) -> Lent {
        let mut ids: Vec<AtomicU32> = (0..slots_for(groups)).map(|_| AtomicU32::new(0)).collect();
        let mut entries = vec![wm_thread::default(); slots_for(groups) as usize];
        let table = ThreadTable {
            _mapped: None,
            ids: NonNull::new(ids.as_mut_ptr()).unwrap(),
            entries: NonNull::new(entries.as_mut_ptr()).unwrap(),
            groups: groups as usize,
            locks: None,
        };
        Lent { table, _ids: ids, _entries: entries }
    }

    fn data(start: u64) -> wm_thread_data {
        wm_thread_data { start, since: start, ..Default::default() }
    }

    #[test]
    fn sizes_are_powers_of_two_groups() {
        assert_eq!(groups_for(0), 1);
        assert_eq!(groups_for(16), 1);
        assert_eq!(groups_for(17), 2);
        assert_eq!(groups_for(16384), 1024);
        assert_eq!(groups_for(20000), 2048);
        assert_eq!(slots_for(1024), 16384);
    }

    /// A seeded thread is found and read back; a second seed of it changes nothing; a forget
    /// of another incarnation keeps it, of its own frees the slot, and `seq` moves on.
    #[test]
    fn seed_find_read_forget() {
        let t = table(4);
        let t = &t.table;
        assert_eq!(t.seed(7, &data(100)), Seed::Added);
        assert_eq!(t.seed(7, &data(200)), Seed::Exists);
        let slot = t.find(7).expect("seeded");
        assert_eq!(slot, 7, "in its home slot");
        match t.read(slot, 7, Duration::ZERO) {
            Copied::Settled(d) => assert_eq!(d.start, 100),
            other => panic!("{other:?}"),
        }
        assert!(matches!(t.read(slot, 8, Duration::ZERO), Copied::Gone), "another TID's read");
        t.forget(7, |d| d.start == 200);
        assert_eq!(t.find(7), Some(slot), "a later incarnation is not forgotten");
        t.forget(7, |d| d.start == 100);
        assert_eq!(t.find(7), None);
        assert_eq!(t.len(), 0);
        // SAFETY: in bounds; nothing writes meanwhile.
        assert_eq!(unsafe { (*t.entry(slot)).seq }, 2, "one write, framed");
    }

    /// TIDs of one home group fill it and spill into the next groups; past all of them, Full.
    #[test]
    fn a_full_home_group_spills_then_fills() {
        let t = table(4);
        let t = &t.table;
        // TIDs 64, 128, ... all have home slot 0 (4 groups of 16 slots)
        let tids: Vec<u32> = (1..=(PROBE_GROUPS * GROUP) as u32).map(|i| i * 64).collect();
        for &tid in &tids {
            assert_eq!(t.seed(tid, &data(u64::from(tid))), Seed::Added, "{tid}");
        }
        assert_eq!(t.seed(64 * 1000, &data(1)), Seed::Full);
        for &tid in &tids {
            let slot = t.find(tid).expect("found");
            assert!(matches!(t.read(slot, tid, Duration::ZERO), Copied::Settled(d) if d.start == u64::from(tid)));
        }
        assert_eq!(t.published().count(), tids.len());
    }

    /// Threads seed the same TIDs at once, as the agent's seeding and a thread's own first
    /// event may: no TID ever has two entries, and a TID whose racing claims all yielded gets
    /// its entry from the next claim.
    #[test]
    fn racing_seeds_of_one_tid_publish_one_entry() {
        let lent = Arc::new(table(64));
        let racers = 4;
        let barrier = Arc::new(Barrier::new(racers));
        let handles: Vec<_> = (0..racers)
            .map(|r| {
                let (lent, barrier) = (Arc::clone(&lent), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    let mut added = 0;
                    for tid in 1..=512u32 {
                        barrier.wait();
                        added += u32::from(lent.table.seed(tid, &data(r as u64 + 1)) == Seed::Added);
                    }
                    added
                })
            })
            .collect();
        let added: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let t = &lent.table;
        let held = |tid: u32| t.ids().iter().filter(|id| id.load(Ordering::SeqCst) & !CLAIMED == tid).count();
        for tid in 1..=512u32 {
            assert!(held(tid) <= 1, "TID {tid} holds {} slots", held(tid));
        }
        assert_eq!(added as usize, (1..=512u32).filter(|&tid| held(tid) == 1).count());
        eprintln!("{added} of 512 TIDs added by the racing seeds");
        for tid in 1..=512u32 {
            let again = t.seed(tid, &data(9));
            assert_eq!(held(tid), 1, "TID {tid} after a later seed ({again:?})");
        }
    }
}
