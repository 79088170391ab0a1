//! `waitmeter run`: watch processes continuously and serve /metrics.
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use anyhow::Result;

use super::{install_stop_handler, session_options, stop_requested};
use crate::age::sources::AgeSources;
use crate::cli::RunArgs;
use crate::clock::monotonic_ns;
use crate::export::http;
use crate::export::prometheus::{AgeExport, AgentStatus, CgroupInfo, Exporter, ProcessInfo, EXITED_RETENTION_NS, WINDOW_STEP_NS};
use crate::export::web::Web;
use crate::probes::sched::VARIANT;
use crate::session::Session;

/// The hooks the sched probe attaches; each has a `waitmeter_probe_attached` series.
const SCHED_HOOKS: [&str; 5] = ["sched_switch", "sched_wakeup", "sched_waking", "sched_wakeup_new", "sched_process_exit"];
/// How often exits are drained and processes checked.
const TICK: Duration = Duration::from_millis(250);
const DISCOVER_EVERY_NS: u64 = 1_000_000_000;

pub fn run(args: &RunArgs) -> Result<()> {
    install_stop_handler();
    let age = args.age.config()?;
    if age.endpoint.is_some() && (args.all || args.pid.len() != 1) {
        return Err(crate::usage!(
            "--age-url joins the age of one process with its threads: give exactly one --pid (or use --age-socket, which is per thread)"
        ));
    }
    let mut ages = AgeSources::new(&age)?;
    let web = match &args.web_config_file {
        Some(path) => Some(
            Web::load(path).map_err(|e| crate::usage!("{e:#}: fix the file (format: docs/deployment.md, \"Securing the endpoint\")"))?,
        ),
        None => None,
    };
    // bind first: a taken port fails before any probe is loaded
    let (tx, rx) = mpsc::channel::<http::Scrape>();
    let endpoint = http::serve(&args.listen, web, tx)?;
    let addr = endpoint.addr;
    let scheme = if endpoint.tls { "https" } else { "http" };
    // no profiles are served yet (issue 14): no stacks unless asked for, and those dropped
    let mut session = Session::start(&session_options(&args.probe, args.all, crate::cli::Stacks::None, false))?;
    for pid in &args.pid {
        session.attach(*pid)?;
    }
    if args.all {
        session.discover()?;
    }
    let attached = session.probe().attached();
    let variant = VARIANT;
    crate::say!(
        "waitmeter: serving {scheme}://{addr}/metrics for {} process(es){}; probes: {} ({variant})",
        session.targets().count(),
        if args.all { " and every new one" } else { "" },
        attached.join(", ")
    );
    let mut exporter = Exporter::new(args.max_thread_labels, args.tid_labels);
    let mut next_discover = monotonic_ns() + DISCOVER_EVERY_NS;
    let mut next_window = monotonic_ns();
    let mut warned_all_gone = false;
    let online = crate::report::online_cpus();
    while !stop_requested() {
        endpoint.health.beat();
        match rx.recv_timeout(TICK) {
            Ok(scrape) => {
                let snap = session.sample();
                exporter.fold_exits(&snap.exited);
                let procs: Vec<ProcessInfo> = session
                    .targets()
                    .map(|t| ProcessInfo {
                        id: t.id,
                        pid: t.pid,
                        comm: t.comm.clone(),
                        alive: t.exited_ns.is_none(),
                        cpu_limit_cores: t.cgroup.as_ref().and_then(|c| c.quota()?.cores()).map_or(online, |q| q.min(online)),
                    })
                    .collect();
                let mut lost = session.probe().lost();
                lost.extend(session.python_lost());
                lost.extend(session.stacks_lost());
                let status = AgentStatus {
                    attached: attached.clone(),
                    expected: SCHED_HOOKS.to_vec(),
                    variant,
                    lost,
                    maps: session.map_entries(),
                    http_codes: endpoint.stats.codes(),
                    http_drops: endpoint.stats.drops(),
                };
                let mut cgroups: Vec<CgroupInfo> = vec![];
                for t in session.targets().filter(|t| t.exited_ns.is_none()) {
                    let Some(cg) = &t.cgroup else { continue };
                    if cgroups.iter().any(|c| c.path == cg.path) {
                        continue;
                    }
                    if let Some(stat) = cg.stat() {
                        cgroups.push(CgroupInfo { path: cg.path.clone(), stat, quota_cores: cg.quota().and_then(|q| q.cores()) });
                    }
                }
                let age_export = AgeExport {
                    process: ages.latest_process().and_then(|a| Some((*args.pid.first()?, a))),
                    threads: ages.latest_threads(),
                    errors: ages.any().then(|| ages.errors()),
                };
                let _ = scrape.reply.send(exporter.render(&procs, &cgroups, &age_export, &snap, &status));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let now = monotonic_ns();
        if now >= next_window {
            // the agent's own window, whoever scrapes and however often
            while next_window <= now {
                next_window += WINDOW_STEP_NS;
            }
            let snap = session.sample();
            exporter.fold_exits(&snap.exited);
            exporter.window(now, &snap);
        } else {
            let exits = session.exits();
            exporter.fold_exits(&exits);
        }
        ages.poll(now);
        if now >= next_discover {
            next_discover = now + DISCOVER_EVERY_NS;
            for t in session.reap() {
                log::info!("process {} ({}) exited", t.pid, t.comm);
            }
            if args.all {
                if let Err(e) = session.discover() {
                    log::warn!("failed to look for new processes: {e:#}");
                }
            } else if !warned_all_gone && session.targets().all(|t| t.exited_ns.is_some()) {
                log::warn!(
                    "every watched process has exited; still serving their last numbers for {} s",
                    EXITED_RETENTION_NS / 1_000_000_000
                );
                warned_all_gone = true;
            }
            let gone: Vec<u64> = session.forget_exited(now.saturating_sub(EXITED_RETENTION_NS)).iter().map(|t| t.id).collect();
            exporter.forget(&gone);
        }
    }
    Ok(())
}
