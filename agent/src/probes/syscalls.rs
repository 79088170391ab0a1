//! The syscall probe (`bpf/syscalls.bpf.c`, `bpf/syscalls.h`,
//! `docs/probes/syscalls.md`): per thread of a watched process, the calls and
//! the time of each syscall. It shares the sched probe's `watched_bits`, so
//! it watches what the session watches; its own object, so that it can be
//! left out (`run` takes it only with `--syscalls`).
use std::os::fd::AsFd;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};

use super::abi::{from_bytes, Plain};
use super::sched::SchedProbe;
use super::Owned;
use crate::model::loss::{Lost, Probe, Reason};

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/syscalls.skel.rs"));
}
use skel::types::{wm_sys_count, wm_sys_key, wm_sys_stat};

// SAFETY: the generated #[repr(C)] structs of integers (bpf/syscalls.h).
unsafe impl Plain for wm_sys_key {}
// SAFETY: as above.
unsafe impl Plain for wm_sys_count {}
use skel::{SyscallsSkel, SyscallsSkelBuilder};

/// The loaded and attached probe.
pub struct SyscallProbe {
    /// only held: dropping them detaches
    _links: Vec<Link>,
    skel: Owned<SyscallsSkel<'static>>,
}

/// The hooks, as the `probe` label of waitmeter_probe_attached names them.
pub const SYSCALL_HOOKS: [&str; 2] = ["sys_enter", "sys_exit"];

/// One reading of a count, cumulative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub host_tgid: u32,
    pub host_tid: u32,
    pub nr: u32,
    pub calls: u64,
    pub ns: u64,
}

impl SyscallProbe {
    /// Load and attach; `max_entries` sizes the (thread, syscall) map. A kernel without task local
    /// storage (before 5.11: Debian 11's 5.10) is refused before anything loads.
    pub fn load(sched: &SchedProbe, kernel: &super::kernel::Kernel, max_entries: u32) -> Result<SyscallProbe> {
        if !kernel.has(super::kernel::Feature::TaskStorage) {
            anyhow::bail!(
                "kernel {} has no task local storage for BPF (Linux 5.11), which the syscall probe keeps its calls in",
                kernel.release
            );
        }
        let skel = Owned::open(|memory| {
            let mut open = SyscallsSkelBuilder::default().open(memory).context("failed to open the syscalls BPF object")?;
            let shared = sched.watched_bits_map();
            open.maps.watched_bits.reuse_fd(shared.as_fd()).context("failed to share the sched probe's watched_bits map")?;
            open.maps.syscall_counts.set_max_entries(max_entries)?;
            super::ask_verifier_stats(open.open_object_mut());
            open.load().context("failed to load the syscalls BPF object (needs task local storage, Linux 5.11+)")
        })?;
        let links = vec![
            skel.progs.sys_enter_btf.attach().context("failed to attach tp_btf/sys_enter")?,
            skel.progs.sys_exit_btf.attach().context("failed to attach tp_btf/sys_exit")?,
        ];
        Ok(SyscallProbe { _links: links, skel })
    }

    /// Every count, as of now.
    pub fn read(&self) -> Vec<Reading> {
        let map = &self.skel.maps.syscall_counts;
        map.keys()
            .filter_map(|k| {
                let key = from_bytes::<wm_sys_key>(&k)?;
                let v = from_bytes::<wm_sys_count>(&map.lookup(&k, MapFlags::ANY).ok()??)?;
                Some(Reading { host_tgid: v.tgid, host_tid: key.tid, nr: key.nr, calls: v.calls, ns: v.ns })
            })
            .collect()
    }

    /// Delete the counts of these threads (host TIDs): they are gone, and the
    /// reading just taken is their last. Only the thread itself writes its
    /// counts, so nothing is lost by deleting them after it exits.
    pub fn forget(&self, tids: &[u32]) {
        let map = &self.skel.maps.syscall_counts;
        let gone: Vec<Vec<u8>> = map.keys().filter(|k| from_bytes::<wm_sys_key>(k).is_some_and(|key| tids.contains(&key.tid))).collect();
        for k in gone {
            let _ = map.delete(&k);
        }
    }

    /// Entries in the (thread, syscall) map now.
    pub fn entries(&self) -> usize {
        self.skel.maps.syscall_counts.keys().count()
    }

    /// Calls not counted: (reason, count).
    pub fn lost(&self) -> [Lost; 2] {
        let stats = &self.skel.maps.sys_stats;
        [
            Lost::new(Probe::Syscalls, Reason::SyscallMapFull, super::percpu_sum(stats, wm_sys_stat::WM_SYS_STAT_MAP_FULL.0)),
            Lost::new(Probe::Syscalls, Reason::TaskStorageFailed, super::percpu_sum(stats, wm_sys_stat::WM_SYS_STAT_NO_STORAGE.0)),
        ]
    }
}
