//! The opt-in precise GIL probe (`bpf/gil.bpf.c`, `bpf/gil.h`,
//! `docs/probes/gil.md`): uprobes on CPython's take_gil/drop_gil clones of one
//! process, for GIL hold times per thread.
use std::collections::HashMap;
use std::mem::{size_of, MaybeUninit};
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use crate::model::hist::{HoldHist, BUCKETS};
use crate::python::GilFunction;

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/gil.skel.rs"));
}
use skel::types::{wm_gil_hold, wm_gil_limits, wm_gil_stat};
use skel::{GilSkel, GilSkelBuilder};

const _: () = assert!(BUCKETS == wm_gil_limits::WM_GIL_HOLD_BUCKETS.0 as usize);

/// Fields drop in order: links before the object.
pub struct GilProbe {
    links: Vec<Link>,
    skel: GilSkel<'static>,
}

impl GilProbe {
    /// Attach to process `pid` (agent namespace): a uretprobe on every
    /// take_gil clone and a uprobe on every drop_gil clone of `binary`.
    pub fn attach(pid: u32, binary: &Path, functions: &[GilFunction], max_threads: u32) -> Result<GilProbe> {
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = GilSkelBuilder::default().open(storage).context("failed to open the gil BPF object")?;
        open.maps.held_since.set_max_entries(max_threads)?;
        open.maps.holds.set_max_entries(max_threads)?;
        let skel = open.load().context("failed to load the gil BPF object")?;
        let mut links = vec![];
        for f in functions {
            let (prog, ret) = if f.take { (&skel.progs.take_gil_exit, true) } else { (&skel.progs.drop_gil_enter, false) };
            let link = prog
                .attach_uprobe(ret, pid as i32, binary, f.file_offset as usize)
                .with_context(|| format!("failed to attach a uprobe to {} in {}", f.name, binary.display()))?;
            links.push(link);
        }
        Ok(GilProbe { links, skel })
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
                Some((tid, HoldHist { count: h.count, sum_ns: h.sum_ns, buckets: h.buckets }))
            })
            .collect()
    }

    /// Forget the hold histograms of these threads (gone).
    pub fn forget(&self, host_tids: &[u32]) {
        for tid in host_tids {
            let _ = self.skel.maps.holds.delete(&tid.to_ne_bytes());
        }
    }

    /// Holds that could not be recorded (map full).
    pub fn lost(&self) -> u64 {
        let key = wm_gil_stat::WM_GIL_STAT_HOLDS_MAP_FULL.0;
        self.skel
            .maps
            .gil_stats
            .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
            .ok()
            .flatten()
            .map(|v| v.iter().filter_map(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?))).sum())
            .unwrap_or(0)
    }
}
