//! Holder, waker and preemptor ids as the probe records them (host TIDs,
//! pthread_t, a target's own-namespace TIDs) turned into TIDs of the agent's
//! namespace.
use std::collections::{BTreeMap, HashMap};

use super::{Session, Target};
use crate::model::ledger::GilEntry;
use crate::probes::sched::WAKER_HOLDER;
use crate::procfs;
use crate::python::{self, layout::HolderId};

/// Turns the holder ids the probe records into TIDs of the agent's namespace,
/// building each mapping once per sample and only when needed.
#[derive(Default)]
pub(super) struct HolderResolver {
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
    pub(super) fn ns_tid(&mut self, session: &Session, host: u32) -> u32 {
        if !session.translate {
            return host;
        }
        let map = self
            .host_ns
            .get_or_insert_with(|| session.probe.task_ids().unwrap_or_default().into_iter().map(|x| (x.tid, x.ns_tid)).collect());
        map.get(&host).copied().unwrap_or(host)
    }

    pub(super) fn holder_tid(&mut self, session: &Session, t: &Target, id: u64) -> u32 {
        if id == 0 {
            return 0;
        }
        // resolved at the hand-off: the host TID of the thread whose release woke the waiter
        if id & WAKER_HOLDER != 0 {
            return self.ns_tid(session, id as u32);
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
    pub(super) fn resolve(&mut self, session: &Session, t: &Target, closed: &[GilEntry], open: Option<(u64, u64)>) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        let closed_total: u64 = closed.iter().map(|e| e.ns).sum();
        for e in closed {
            *out.entry(self.holder_tid(session, t, e.key.holder)).or_insert(0) += e.ns;
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
