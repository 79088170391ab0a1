//! The CPython parking-lot probe (`bpf/pypark.bpf.c`, `bpf/pypark.h`,
//! `docs/probes/pypark.md`): a uprobe and a uretprobe on `_PySemaphore_Wait`
//! of each Python 3.13+ target, noting per thread the address it parked on in
//! the sched probe's `parked` map, so that the sched probe charges the wait to
//! that address (a `PyMutex`, a `threading.Lock`, an event) instead of the
//! thread's own semaphore. One BPF object for the session, loaded at the
//! first target that needs it; links per target.
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore};

use super::sched::SchedProbe;
use super::Owned;
use crate::python::layout::PARK_ENTRY;

mod skel {
    #![allow(clippy::all, dead_code, unused_imports, non_camel_case_types, non_snake_case)]
    include!(concat!(env!("OUT_DIR"), "/pypark.skel.rs"));
}
use skel::types::wm_park_stat;
use skel::{PyparkSkel, PyparkSkelBuilder};

/// The loaded object.
struct Loaded {
    skel: Owned<PyparkSkel<'static>>,
}

impl Loaded {
    fn load(sched: &SchedProbe) -> Result<Loaded> {
        let skel = Owned::open(|memory| {
            let mut open = PyparkSkelBuilder::default().open(memory).context("failed to open the pypark BPF object")?;
            {
                let rodata = open.maps.rodata_data.as_deref_mut().context("pypark BPF object has no .rodata")?;
                rodata.cfg.off_addr = PARK_ENTRY.addr;
                rodata.cfg.off_node = PARK_ENTRY.node;
            }
            let shared = sched.parked_map();
            open.maps.parked.set_max_entries(shared.info().context("failed to read the parked map's info")?.info.max_entries)?;
            open.maps.parked.reuse_fd(shared.as_fd()).context("failed to share the sched probe's parked map")?;
            super::ask_verifier_stats(open.open_object_mut());
            open.load().context("failed to load the pypark BPF object")
        })?;
        Ok(Loaded { skel })
    }
}

/// The parking-lot probe of a session: its object and every target's links.
#[derive(Default)]
pub struct Parks {
    /// target id -> its uprobe and uretprobe (dropped before the object: declared first)
    links: HashMap<u64, [Link; 2]>,
    loaded: Option<Loaded>,
}

impl Parks {
    /// Attach to process `pid` (agent namespace): `_PySemaphore_Wait` at
    /// `file_offset` in `binary` (a path the agent can open, through /proc).
    pub fn attach(&mut self, sched: &SchedProbe, target: u64, pid: u32, binary: &Path, file_offset: u64) -> Result<()> {
        let l = match &mut self.loaded {
            Some(l) => l,
            None => self.loaded.insert(Loaded::load(sched)?),
        };
        let at = |prog: &libbpf_rs::ProgramMut, ret: bool| {
            prog.attach_uprobe(ret, pid as i32, binary, file_offset as usize)
                .with_context(|| format!("failed to attach a uprobe to {} in {}", crate::python::binary::PARK, binary.display()))
        };
        let links = [at(&l.skel.progs.sema_wait_enter, false)?, at(&l.skel.progs.sema_wait_exit, true)?];
        self.links.insert(target, links);
        Ok(())
    }

    /// Detach from a target (it exited).
    pub fn detach(&mut self, target: u64) {
        self.links.remove(&target);
    }

    pub fn attached(&self, target: u64) -> bool {
        self.links.contains_key(&target)
    }

    /// Parks that could not be noted (the map was full): their waits count as plain futex waits.
    pub fn lost(&self) -> u64 {
        self.loaded.as_ref().map_or(0, |l| super::percpu_sum(&l.skel.maps.park_stats, wm_park_stat::WM_PARK_STAT_MAP_FULL.0))
    }
}
