//! The attach report: per-thread partition of one process over the window,
//! with a plain-words verdict; rendered as text (live and final) or JSON.
pub mod json;
pub mod text;
pub mod verdict;

use std::collections::BTreeMap;

use crate::model::partition::{secs, ThreadSample, Times};

/// One thread over the report's window.
#[derive(Clone, Debug)]
pub struct ThreadRow {
    pub tid: u32,
    /// Python thread name when known (GIL issue), else the OS comm
    pub name: String,
    pub comm: String,
    pub times: Times,
    /// how long the thread existed within the window
    pub existed_ns: u64,
    pub exited: bool,
    /// gil_wait per holder TID (0: not known)
    pub gil_by_holder: BTreeMap<u32, u64>,
    /// GIL hold times (precise GIL probe only)
    pub gil_hold: Option<crate::model::hist::HoldHist>,
}

impl ThreadRow {
    /// A row for `times` of thread `s` over a window it existed in for `existed_ns`.
    pub fn from_sample(s: &ThreadSample, times: Times, existed_ns: u64) -> ThreadRow {
        ThreadRow {
            tid: s.tid,
            name: s.name().to_string(),
            comm: s.comm.clone(),
            times,
            existed_ns,
            exited: s.exited,
            gil_by_holder: s.gil_by_holder.clone(),
            gil_hold: s.gil_hold,
        }
    }
}

/// The interpreter of a Python target, as reported (the JSON `python` block).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PythonInfo {
    pub version: String,
    /// enabled / disabled (free-threaded build without the GIL) / unknown (unsupported version)
    pub gil: &'static str,
    /// futex: GIL waits recognised by futex word at switch-out; uprobe: also
    /// hold times from take_gil/drop_gil uprobes; none: not measured
    pub gil_probe: &'static str,
    pub free_threaded: bool,
    /// the file holding _PyRuntime, as the target names it
    pub binary: String,
    /// that file has a symbol table (.symtab)
    pub symbols: bool,
}

/// One process over the report's window.
#[derive(Clone, Debug)]
pub struct ProcessReport {
    pub pid: u32,
    pub comm: String,
    pub python: Option<PythonInfo>,
    pub duration_ns: u64,
    /// seconds after the window opened at which the process exited
    pub exited_after_ns: Option<u64>,
    pub threads: Vec<ThreadRow>,
    pub verdict: Vec<String>,
}

impl ProcessReport {
    /// Rows sorted by TID; the verdict derived from them.
    pub fn new(
        pid: u32,
        comm: String,
        python: Option<PythonInfo>,
        duration_ns: u64,
        exited_after_ns: Option<u64>,
        mut threads: Vec<ThreadRow>,
    ) -> Self {
        threads.sort_by_key(|t| (t.tid, t.exited));
        let verdict = verdict::findings(&threads, secs(duration_ns));
        ProcessReport { pid, comm, python, duration_ns, exited_after_ns, threads, verdict }
    }
}
