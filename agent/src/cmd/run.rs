//! `waitmeter run`: watch processes continuously, serve /metrics and wait
//! profiles, push profiles to Pyroscope.
use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use anyhow::Result;

use super::{install_stop_handler, session_options, stop_requested};
use crate::age::sources::AgeSources;
use crate::cli::RunArgs;
use crate::clock::monotonic_ns;
use crate::export::http;
use crate::export::prometheus::{AgeExport, AgentStatus, CgroupInfo, Exporter, ProcessInfo, EXITED_RETENTION_NS, WINDOW_STEP_NS};
use crate::export::push::{self, Pusher, PROFILE_NAME};
use crate::export::recorder::{Captures, Proc, Pull, Recorder};
use crate::export::web::Web;
use crate::probes::sched::{HOLDER_SAMPLER, VARIANT};
use crate::probes::syscalls::{SyscallProbe, SYSCALL_HOOKS};
use crate::session::{Session, Snapshot};

/// The hooks the sched probe attaches; each has a `waitmeter_probe_attached` series.
const SCHED_HOOKS: [&str; 5] = ["sched_switch", "sched_wakeup", "sched_waking", "sched_wakeup_new", "sched_process_exit"];
/// How often exits are drained and processes checked. The exit ring buffer's
/// records wake nobody: at 100 ms the default 4 MiB ring holds 140k exits/s.
const TICK: Duration = Duration::from_millis(100);
const DISCOVER_EVERY_NS: u64 = 1_000_000_000;
/// How often wait stacks are drained from the kernel (its map holds 65,536).
const STACKS_EVERY_NS: u64 = 2_000_000_000;
/// ... or sooner once this many threads exited since (each left a few
/// entries in the kernel's wait-stack map, 65,536 entries)
const STACK_DRAIN_EXITS: usize = 8192;

/// Where pushed profiles go, and what they carry.
struct Pushing {
    pusher: Pusher,
    every_ns: u64,
    next_ns: u64,
    service: Option<String>,
    labels: Vec<(String, String)>,
    recorder: Recorder,
}

/// Check the push options and start the pushing thread.
fn pushing(args: &crate::cli::PushArgs, stacks_on: bool) -> Result<Option<Pushing>> {
    let Some(url) = &args.pyroscope_url else { return Ok(None) };
    if !stacks_on {
        return Err(crate::usage!("--pyroscope-url pushes wait profiles, which need stacks: drop --stacks none"));
    }
    let access = push::Access {
        tenant: args.pyroscope_tenant.as_deref(),
        user: args.pyroscope_user.as_deref(),
        password_file: args.pyroscope_password_file.as_deref(),
        ca_file: args.pyroscope_ca_file.as_deref(),
    };
    let target = push::Target::parse(url, &access).map_err(|e| crate::usage!("--pyroscope-url {url}: {e:#}"))?;
    let mut labels = vec![];
    for l in &args.pyroscope_labels {
        let Some((n, v)) = l.split_once('=') else {
            return Err(crate::usage!("--pyroscope-label {l:?}: write it as NAME=VALUE"));
        };
        if matches!(n, "__name__" | "service_name" | "pid" | "comm") {
            return Err(crate::usage!("--pyroscope-label {n}: waitmeter sets that label itself (--pyroscope-service for service_name)"));
        }
        labels.push((n.to_string(), v.to_string()));
    }
    // every series' labels, checked now rather than refused at every push
    let service = args.pyroscope_service.clone();
    let mut all: Vec<(&str, &str)> =
        vec![("__name__", PROFILE_NAME), ("service_name", service.as_deref().unwrap_or("x")), ("pid", "1"), ("comm", "x")];
    all.extend(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    waitmeter_formats::pyroscope::check_labels(&all)
        .map_err(|e| crate::usage!("the pushed profiles' labels: {e}: fix --pyroscope-label or --pyroscope-service"))?;
    let pusher = Pusher::start(target)?;
    let now = monotonic_ns();
    let every_ns = args.pyroscope_interval * 1_000_000_000;
    Ok(Some(Pushing { pusher, every_ns, next_ns: now + every_ns, service, labels, recorder: Recorder::new(now, unix_ns()) }))
}

fn unix_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// A sample of the session, with what the exporter and the recorders need
/// of it: exited threads folded, threads labelled, stacks handed on (the
/// GIL holds by function to the exporter always, the rest to recordings).
fn sample(
    session: &mut Session,
    exporter: &mut crate::export::prometheus::Exporter,
    captures: &mut Captures,
    pushing: Option<&mut Pushing>,
) -> Snapshot {
    session.keep_stacks(!captures.is_empty() || pushing.is_some());
    let snap = session.sample();
    exporter.fold_exits(&snap.exited);
    exporter.label_threads(&snap);
    exporter.rebalance(crate::clock::monotonic_ns(), &snap);
    let stacks = session.take_wait_stacks();
    if !stacks.is_empty() {
        let procs: HashMap<u64, Proc> = session.targets().map(|t| (t.id, Proc { pid: t.pid, comm: t.comm.clone() })).collect();
        let mut pushing = pushing;
        for (id, w) in &stacks {
            exporter.add_gil_holds(*id, w);
            let Some(p) = procs.get(id) else { continue };
            captures.add(*id, p, w);
            if let Some(ps) = pushing.as_deref_mut() {
                ps.recorder.add(*id, p, w);
            }
        }
    }
    snap
}

/// Answer the pulls whose seconds are over.
fn answer_pulls(due: Vec<(Pull, Recorder)>, session: &Session, exporter: &crate::export::prometheus::Exporter, now: u64) {
    for (pull, rec) in due {
        let only = match pull.pid {
            None => None,
            Some(pid) => match session.targets().find(|t| t.pid == pid) {
                Some(t) => Some(t.id),
                None => {
                    let _ = pull.reply.send(Err(format!("process {pid} is not watched")));
                    continue;
                }
            },
        };
        let b = rec.pprof(now, only, true, |target, tid| exporter.thread_label(target, tid));
        let dropped = b.dropped();
        if dropped != Default::default() || rec.dropped_ns > 0 {
            log::debug!("a pulled profile is full: {dropped:?}, {} ns of waiting left out", rec.dropped_ns);
        }
        let _ = pull.reply.send(Ok(b.encode_gzip()));
    }
}

/// Push what was recorded since the last push: one series per process.
fn push_now(ps: &mut Pushing, exporter: &crate::export::prometheus::Exporter, now: u64) {
    let rec = std::mem::replace(&mut ps.recorder, Recorder::new(now, unix_ns()));
    let mut procs: Vec<(u64, Proc)> = rec.processes().map(|(id, p)| (id, p.clone())).collect();
    procs.sort_by_key(|p| p.0);
    let mut profiles = vec![];
    for (id, p) in &procs {
        let b = rec.pprof(now, Some(*id), false, |target, tid| exporter.thread_label(target, tid));
        if b.samples() > 0 {
            profiles.push((p, b.encode_gzip()));
        }
    }
    if profiles.is_empty() {
        return;
    }
    let labels: Vec<Vec<(String, String)>> = profiles
        .iter()
        .map(|(p, _)| {
            let mut l = vec![
                ("__name__".to_string(), PROFILE_NAME.to_string()),
                ("service_name".to_string(), ps.service.clone().unwrap_or_else(|| p.comm.clone())),
                ("pid".to_string(), p.pid.to_string()),
                ("comm".to_string(), p.comm.clone()),
            ];
            l.extend(ps.labels.iter().cloned());
            l
        })
        .collect();
    let pairs: Vec<Vec<(&str, &str)>> = labels.iter().map(|l| l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()).collect();
    let bodies: Vec<[&[u8]; 1]> = profiles.iter().map(|(_, b)| [b.as_slice()]).collect();
    let series: Vec<waitmeter_formats::pyroscope::Series> =
        pairs.iter().zip(&bodies).map(|(labels, b)| waitmeter_formats::pyroscope::Series { labels, profiles: b }).collect();
    ps.pusher.send(waitmeter_formats::pyroscope::push_request(&series));
}

pub fn run(args: &RunArgs) -> Result<()> {
    // the command line needs one of them; WAITMETER_ALL=false satisfies it without either
    if args.pid.is_empty() && !args.all {
        return Err(crate::usage!("nothing to watch: give --pid PID or --all (WAITMETER_ALL=false in the environment does not count)"));
    }
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
    let stacks_on = args.probe.stacks != crate::cli::Stacks::None;
    let mut pushing = pushing(&args.push, stacks_on)?;
    let (tx, rx) = mpsc::channel::<http::Scrape>();
    let (pull_tx, pull_rx) = mpsc::channel::<Pull>();
    let endpoint = http::serve(&args.listen, web, tx, stacks_on.then_some(pull_tx))?;
    let addr = endpoint.addr;
    let scheme = if endpoint.tls { "https" } else { "http" };
    // stacks are drained all along and kept only while a profile is recorded
    let mut session = Session::start(&session_options(&args.probe, args.all, false))?;
    session.keep_stacks(pushing.is_some());
    let mut captures = Captures::default();
    for pid in &args.pid {
        session.attach(*pid)?;
    }
    if args.all {
        session.discover()?;
    }
    // each process' syscalls, only when asked (a probe on every syscall of the machine)
    let syscall_probe = match args.probe.syscalls {
        Some(crate::cli::Syscalls::On) => Some(
            SyscallProbe::load(session.probe(), args.probe.max_threads.saturating_mul(8).max(32_768))
                .map_err(|e| crate::usage!("{e:#}: run without --syscalls on"))?,
        ),
        _ => None,
    };
    let mut syscall_totals = crate::model::syscalls::ProcessTotals::default();
    let mut attached = session.probe().attached();
    let mut expected = SCHED_HOOKS.to_vec();
    if syscall_probe.is_some() {
        attached.extend(SYSCALL_HOOKS.iter().map(|h| h.to_string()));
        expected.extend(SYSCALL_HOOKS);
    }
    if args.probe.stacks == crate::cli::Stacks::All && args.probe.holder_sample_hz > 0 {
        expected.push(HOLDER_SAMPLER);
    }
    let variant = VARIANT;
    crate::say!(
        "waitmeter: serving {scheme}://{addr}/metrics{} for {} process(es){}; probes: {} ({variant}){}",
        if stacks_on { " and /debug/pprof/wait" } else { "" },
        session.targets().count(),
        if args.all { " and every new one" } else { "" },
        attached.join(", "),
        args.push.pyroscope_url.as_ref().map(|u| format!("; pushing wait profiles to {u}")).unwrap_or_default()
    );
    let mut exporter = Exporter::new(args.max_thread_labels, args.tid_labels);
    let mut next_discover = monotonic_ns() + DISCOVER_EVERY_NS;
    let mut next_window = monotonic_ns();
    let mut next_stacks = monotonic_ns() + STACKS_EVERY_NS;
    let mut warned_all_gone = false;
    let online = crate::report::online_cpus();
    while !stop_requested() {
        endpoint.health.beat();
        match rx.recv_timeout(TICK) {
            Ok(scrape) => {
                let snap = sample(&mut session, &mut exporter, &mut captures, pushing.as_mut());
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
                let mut lost = session.lost();
                let mut maps = session.map_entries();
                if let Some(p) = &syscall_probe {
                    let target_of: HashMap<u32, u64> = session.targets().map(|t| (t.host_pid, t.id)).collect();
                    let live: std::collections::HashSet<u32> = snap.live.values().flatten().map(|s| s.host_tid).collect();
                    let reading = p.read().into_iter().filter_map(|r| Some((*target_of.get(&r.host_tgid)?, r.host_tid, r.nr, r.calls)));
                    let gone = syscall_totals.update(reading, |tid| live.contains(&tid));
                    if !gone.is_empty() {
                        p.forget(&gone);
                    }
                    lost.extend(p.lost().map(|(reason, n)| ("syscalls", reason, n)));
                    maps.push(("syscalls", "syscall_counts", p.entries()));
                }
                let status = AgentStatus {
                    attached: attached.clone(),
                    expected: expected.clone(),
                    variant,
                    lost,
                    maps,
                    http_codes: endpoint.stats.codes(),
                    http_drops: endpoint.stats.drops(),
                    pushes: pushing.as_ref().map(|p| p.pusher.stats.by_result()).unwrap_or_default(),
                    syscalls: syscall_totals.series(),
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
            let snap = sample(&mut session, &mut exporter, &mut captures, pushing.as_mut());
            exporter.window(now, &snap);
            next_stacks = now + STACKS_EVERY_NS;
        } else if stacks_on && now >= next_stacks {
            sample(&mut session, &mut exporter, &mut captures, pushing.as_mut());
            next_stacks = now + STACKS_EVERY_NS;
        } else {
            let exits = session.exits();
            exporter.fold_exits(&exits);
            if session.exits_since_stack_drain() > STACK_DRAIN_EXITS {
                sample(&mut session, &mut exporter, &mut captures, pushing.as_mut());
                next_stacks = now + STACKS_EVERY_NS;
            }
        }
        // profiles: new pulls start from a drained map; due ones and pushes end with one
        while let Ok(pull) = pull_rx.try_recv() {
            if captures.is_empty() && pushing.is_none() {
                sample(&mut session, &mut exporter, &mut captures, None);
            }
            if let Err(pull) = captures.start(pull, monotonic_ns(), unix_ns()) {
                let _ = pull
                    .reply
                    .send(Err(format!("busy: {} profiles are being recorded already: retry", crate::export::recorder::MAX_CAPTURES)));
            }
            // from now: the kernel takes every wait stack while a profile is recorded
            session.keep_stacks(true);
        }
        let due_push = pushing.as_ref().is_some_and(|p| now >= p.next_ns);
        if captures.next_due().is_some_and(|d| d <= now) || due_push {
            sample(&mut session, &mut exporter, &mut captures, pushing.as_mut());
            next_stacks = now + STACKS_EVERY_NS;
            answer_pulls(captures.due(now), &session, &exporter, now);
            if let Some(ps) = pushing.as_mut().filter(|_| due_push) {
                while ps.next_ns <= now {
                    ps.next_ns += ps.every_ns;
                }
                push_now(ps, &exporter, now);
            }
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
            for id in &gone {
                syscall_totals.forget(*id);
            }
            exporter.forget(&gone);
        }
    }
    Ok(())
}
