//! The opt-in precise GIL probe (`bpf/gil.bpf.c`, `bpf/gil.h`,
//! `docs/probes/gil.md`): uprobes on CPython's take_gil/drop_gil clones of one
//! process, for GIL hold times per thread.
use std::collections::HashMap;
use std::mem::size_of;
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};

use super::Owned;

use crate::model::hist::{HoldHist, BUCKETS};
use crate::python::GilFunction;

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/gil.skel.rs"));
}
use skel::types::{wm_gil_hold, wm_gil_limits, wm_gil_stat};
use skel::{GilSkel, GilSkelBuilder};

const _: () = assert!(BUCKETS == wm_gil_limits::WM_GIL_HOLD_BUCKETS.0 as usize);

pub struct GilProbe {
    links: Vec<Link>,
    skel: Owned<GilSkel<'static>>,
}

impl GilProbe {
    /// Attach to process `pid` (agent namespace): a uretprobe on every
    /// take_gil clone and a uprobe on every drop_gil clone of `binary`.
    pub fn attach(pid: u32, binary: &Path, functions: &[GilFunction], max_threads: u32) -> Result<GilProbe> {
        let skel = Owned::open(|memory| {
            let mut open = GilSkelBuilder::default().open(memory).context("failed to open the gil BPF object")?;
            open.maps.held_since.set_max_entries(max_threads)?;
            open.maps.holds.set_max_entries(max_threads)?;
            super::ask_verifier_stats(open.open_object_mut());
            open.load().context("failed to load the gil BPF object")
        })?;
        let mut probe = GilProbe { links: vec![], skel };
        for f in functions {
            let (prog, ret) = if f.take { (&probe.skel.progs.take_gil_exit, true) } else { (&probe.skel.progs.drop_gil_enter, false) };
            let link = prog
                .attach_uprobe(ret, pid as i32, binary, f.file_offset as usize)
                .with_context(|| format!("failed to attach a uprobe to {} in {}", f.name, binary.display()))?;
            probe.links.push(link);
        }
        Ok(probe)
    }

    pub fn attached(&self) -> usize {
        self.links.len()
    }

    /// Hold histograms so far, by host TID.
    pub fn holds(&self) -> HashMap<u32, HoldHist> {
        let map = &self.skel.maps.holds;
        map.keys()
            .filter_map(|k| {
                let tid = u32::from_ne_bytes(k.get(..4)?.try_into().ok()?);
                let v = map.lookup(&k, MapFlags::ANY).ok()??;
                if v.len() < size_of::<wm_gil_hold>() {
                    return None;
                }
                // SAFETY: size checked; plain ABI struct.
                let h: wm_gil_hold = unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
                Some((tid, HoldHist { count: h.count, sum_ns: h.sum_ns, max_ns: h.max_ns, buckets: h.buckets }))
            })
            .collect()
    }

    /// The host TIDs with a hold histogram.
    pub fn tids(&self) -> Vec<u32> {
        self.skel.maps.holds.keys().filter_map(|k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?))).collect()
    }

    /// Forget threads (they exited): their histograms and any hold in progress.
    pub fn forget(&self, host_tids: &[u32]) {
        for tid in host_tids {
            let key = tid.to_ne_bytes();
            // absent is fine: a thread that never held the GIL under the probe
            let _ = self.skel.maps.holds.delete(&key);
            let _ = self.skel.maps.held_since.delete(&key);
        }
    }

    /// Holds that could not be recorded (map full).
    pub fn lost(&self) -> u64 {
        super::percpu_sum(&self.skel.maps.gil_stats, wm_gil_stat::WM_GIL_STAT_HOLDS_MAP_FULL.0)
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    use super::*;
    use crate::python::fixtures;

    /// The test binary's allocator: the system one, counting per thread the
    /// bytes allocated and not freed, so a test can see what its own thread
    /// leaks while other tests run.
    struct Counting;

    thread_local! {
        static LIVE: Cell<i64> = const { Cell::new(0) };
    }

    fn count(delta: i64) {
        let _ = LIVE.try_with(|l| l.set(l.get() + delta));
    }

    // SAFETY: forwards to `System` unchanged; the count touches a
    // const-initialised thread local without a destructor (no allocation).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                count(layout.size() as i64);
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                count(layout.size() as i64);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.dealloc(ptr, layout) };
            count(-(layout.size() as i64));
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                count(new_size as i64 - layout.size() as i64);
            }
            p
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    fn rss_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").trim().parse().unwrap()
    }

    fn state(pid: u32) -> char {
        crate::procfs::process_stat(pid).map_or('?', |s| s.state)
    }

    /// Until `done` (checked every 10 ms, for at most 10 s).
    fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    /// Attach and drop the probe 100 times on a real Python: neither the heap
    /// this thread allocated nor the RSS grows with the count (before the
    /// storage was owned, each attach leaked it: 8 bytes each); `tids` and
    /// `forget` see and clear the holds map.
    #[test]
    fn attach_and_drop_leave_nothing_behind() {
        if unsafe { libc::geteuid() } != 0 {
            waitmeter_formats::testing::skip("attaching uprobes needs root");
            return;
        }
        let Some(py) = fixtures::pyenv_python(12) else {
            waitmeter_formats::testing::skip("no pyenv 3.12 (with take_gil in .symtab) here");
            return;
        };
        // the main thread drops and takes the GIL around every short sleep
        let script = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(0.001)";
        let child = fixtures::spawn_ready(py.to_str().unwrap(), &["-c", script], &[]).unwrap();
        let pid = child.pid();
        let p = crate::python::detect(pid).unwrap().expect("a Python process");
        assert!(!p.gil_functions.is_empty());
        let binary = std::path::PathBuf::from(format!("/proc/{pid}/root{}", p.binary.display()));
        let attach = || GilProbe::attach(pid, &binary, &p.gil_functions, 1024).unwrap();

        let g = attach();
        assert_eq!(g.attached(), p.gil_functions.len());
        until("a GIL hold of the main thread", || g.tids().contains(&pid));
        assert!(g.holds()[&pid].count > 0);
        // stopped, the thread cannot record another hold meanwhile
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        until("the Python process to stop", || state(pid) == 'T');
        g.forget(&[pid, 0x7fff_fff0]);
        assert!(!g.tids().contains(&pid));
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        drop(g);

        for _ in 0..5 {
            drop(attach()); // first-use allocations (libbpf-rs, the kernel's BTF) settle
        }
        let (rss0, heap0) = (rss_kb(), LIVE.with(Cell::get));
        const N: usize = 100;
        for _ in 0..N {
            drop(attach());
        }
        let (rss1, heap1) = (rss_kb(), LIVE.with(Cell::get));
        eprintln!("{N} attach/drop: RSS {rss0} -> {rss1} kB, this thread's live heap {heap0} -> {heap1} bytes");
        assert!(heap1 - heap0 < N as i64, "the heap grew {} bytes in {N} attach/drop", heap1 - heap0);
        // RSS is the whole test binary's, which other tests share while this runs: printed, not asserted
        drop(child);
    }
}
