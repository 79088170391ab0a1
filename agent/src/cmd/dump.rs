//! `waitmeter dump`: a short window of `attach`, then each thread as it is now.
use std::collections::BTreeMap;

use anyhow::Result;
use clap::{Args, FromArgMatches};

use super::{attach, emit};
use crate::cli::{AgeArgs, AttachArgs, DumpArgs, Output};
use crate::report::dump::{Dump, Now};

pub fn dump(args: &DumpArgs) -> Result<()> {
    // no age source: clap's defaults for the age options, none given
    let no_age = AgeArgs::augment_args(clap::Command::new("dump")).get_matches_from(["dump"]);
    let window = AttachArgs {
        pid: vec![args.pid],
        duration: args.window,
        // no live view meanwhile
        output: Output::Json,
        interval: args.window,
        profile: None,
        trace: None,
        html: args.html.clone(),
        timeline_buffer_kib: crate::cli::DEFAULT_TIMELINE_BUFFER_KIB,
        age_slo: None,
        // dump shows threads alive now, each by its TID
        each_thread: true,
        children: false,
        probe: args.probe.clone(),
        age: AgeArgs::from_arg_matches(&no_age)?,
        pods: args.pods.clone(),
        command: vec![],
    };
    let measured = attach::measure(&window, false)?;
    let report = measured.reports.first().expect("one report per PID");
    let now: BTreeMap<u32, Now> = crate::procfs::tasks(args.pid).into_iter().map(|tid| (tid, now(args.pid, tid))).collect();
    let d = Dump::new(report, &now);
    match args.output {
        Output::Json => emit(&format!("{}\n", d.json())),
        Output::Text => emit(&d.text()),
    }
    if report.exited_after_ns.is_some() {
        return Err(crate::error::usage!("process {} exited during the window: what it did until then is above", args.pid));
    }
    Ok(())
}

/// A thread as /proc shows it now.
fn now(pid: u32, tid: u32) -> Now {
    let state = crate::procfs::task_stat(pid, tid).map(|s| s.state.to_string()).unwrap_or_else(|| "?".into());
    // the syscall it is in, unless it runs (then /proc says "running")
    let sc = if state == "R" { None } else { crate::procfs::task_syscall(pid, tid) };
    let syscall = sc.map(|s| crate::model::syscalls::name(s.nr));
    let futex_word = sc.filter(|_| syscall.as_deref() == Some("futex")).map(|s| format!("{:#x}", s.arg0));
    Now { state, syscall, futex_word, wchan: crate::procfs::task_wchan(pid, tid) }
}
