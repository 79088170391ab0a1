//! `waitmeter run`: watch processes continuously, serve /metrics and wait
//! profiles, push profiles to Pyroscope, keep the last minutes' timeline (`timeline.rs`).
use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use anyhow::Result;

use super::{install_stop_handler, pod_names, session_options, stop_requested, timeline};
use crate::age::sources::AgeSources;
use crate::cli::RunArgs;
use crate::clock::monotonic_ns;
use crate::export::http;
use crate::export::prometheus::{AgeExport, AgentStatus, CgroupInfo, Exporter, ProcessInfo, EXITED_RETENTION_NS, WINDOW_STEP_NS};
use crate::export::push::{self, Pusher, PROFILE_NAME};
use crate::export::recorder::{Captures, Proc, Pull, Recorder};
use crate::export::web::Web;
use crate::identity::source::Directory;
use crate::identity::Identity;
use crate::model::history::{History, MAX_KEPT_CELLS};
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
        return Err(crate::error::usage!("--pyroscope-url pushes wait profiles, which need stacks: drop --stacks none"));
    }
    let access = push::Access {
        tenant: args.pyroscope_tenant.as_deref(),
        user: args.pyroscope_user.as_deref(),
        password_file: args.pyroscope_password_file.as_deref(),
        ca_file: args.pyroscope_ca_file.as_deref(),
    };
    let target = push::Target::parse(url, &access).map_err(|e| crate::error::usage!("--pyroscope-url {url}: {e:#}"))?;
    let mut labels = vec![];
    for l in &args.pyroscope_labels {
        let Some((n, v)) = l.split_once('=') else {
            return Err(crate::error::usage!("--pyroscope-label {l:?}: write it as NAME=VALUE"));
        };
        if matches!(n, "__name__" | "service_name" | "pid" | "comm") {
            return Err(crate::error::usage!(
                "--pyroscope-label {n}: waitmeter sets that label itself (--pyroscope-service for service_name)"
            ));
        }
        labels.push((n.to_string(), v.to_string()));
    }
    // every series' labels, checked now rather than refused at every push
    let service = args.pyroscope_service.clone();
    let mut all: Vec<(&str, &str)> =
        vec![("__name__", PROFILE_NAME), ("service_name", service.as_deref().unwrap_or("x")), ("pid", "1"), ("comm", "x")];
    all.extend(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    waitmeter_formats::pyroscope::check_labels(&all)
        .map_err(|e| crate::error::usage!("the pushed profiles' labels: {e}: fix --pyroscope-label or --pyroscope-service"))?;
    let pusher = Pusher::start(target)?;
    let now = monotonic_ns();
    let every_ns = args.pyroscope_interval * 1_000_000_000;
    Ok(Some(Pushing { pusher, every_ns, next_ns: now + every_ns, service, labels, recorder: Recorder::new(now, unix_ns()) }))
}

fn unix_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// A sample of the session, with what the exporter and the recorders need
/// of it: exited threads folded, threads labelled, stretches counted, stacks handed on (the
/// GIL holds by function to the exporter always, the rest to recordings).
fn sample(
    session: &mut Session,
    exporter: &mut crate::export::prometheus::Exporter,
    captures: &mut Captures,
    pushing: Option<&mut Pushing>,
    pods: Option<&Directory>,
    history: Option<&mut History>,
) -> Snapshot {
    session.keep_stacks(!captures.is_empty() || pushing.is_some());
    let snap = session.sample();
    exporter.fold_exits(&snap.exited);
    if let Some(h) = history {
        h.note_exits(&snap.exited);
    }
    exporter.label_threads(&snap);
    exporter.rebalance(crate::clock::monotonic_ns(), &snap);
    // the stretches, read after the exits are folded: a gone thread's reading is its last, and
    // its entries are deleted (the map holds the live threads')
    let gone = exporter.note_stretches(&snap, session.probe().stretches());
    if !gone.is_empty() {
        session.probe().forget_stretches(&gone);
    }
    let stacks = session.take_wait_stacks();
    if !stacks.is_empty() {
        let ids = identities(session, pods);
        let procs: HashMap<u64, Proc> = session
            .targets()
            .map(|t| {
                let id = ids.get(&t.id);
                let pod = id.map(Identity::pod_labels).unwrap_or_default();
                let service = id.and_then(|i| Some(i.names.as_ref()?.service_name.clone()));
                (t.id, Proc { pid: t.pid, comm: t.comm.clone(), pod, service })
            })
            .collect();
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

/// Each watched process' identity from the last pod list; a container of a pod the list does
/// not name asks for a fresh one.
fn identities(session: &Session, pods: Option<&Directory>) -> HashMap<u64, Identity> {
    let list = pods.map(Directory::names).unwrap_or_default();
    let mut out = HashMap::new();
    for t in session.targets() {
        let id = Identity::resolve(&t.placement, &list);
        if let (Some(d), Some(c)) = (pods, id.wants_names()) {
            d.ask(c);
        }
        out.insert(t.id, id);
    }
    out
}

/// Answer the pulls whose seconds are over.
fn answer_pulls(
    due: Vec<(Pull, Recorder)>,
    session: &Session,
    exporter: &crate::export::prometheus::Exporter,
    now: u64,
    renderer: &crate::worker::Worker,
) {
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
        // encoded and compressed off the loop
        renderer.run(move || drop(pull.reply.send(Ok(b.encode_gzip()))));
    }
}

/// Push what was recorded since the last push: one series per process.
fn push_now(ps: &mut Pushing, exporter: &crate::export::prometheus::Exporter, now: u64, renderer: &crate::worker::Worker) {
    let rec = std::mem::replace(&mut ps.recorder, Recorder::new(now, unix_ns()));
    let mut procs: Vec<(u64, Proc)> = rec.processes().map(|(id, p)| (id, p.clone())).collect();
    procs.sort_by_key(|p| p.0);
    let mut profiles = vec![];
    for (id, p) in &procs {
        let b = rec.pprof(now, Some(*id), false, |target, tid| exporter.thread_label(target, tid));
        if b.samples() > 0 {
            profiles.push((p, b));
        }
    }
    if profiles.is_empty() {
        return;
    }
    let labels: Vec<Vec<(String, String)>> = profiles
        .iter()
        .map(|(p, _)| {
            // --pyroscope-service, else the pod's, else the command's
            let service = ps.service.clone().or_else(|| p.service.clone()).unwrap_or_else(|| p.comm.clone());
            let mut l = vec![
                ("__name__".to_string(), PROFILE_NAME.to_string()),
                ("service_name".to_string(), service),
                ("pid".to_string(), p.pid.to_string()),
                ("comm".to_string(), p.comm.clone()),
            ];
            // a --pyroscope-label of the same name wins over the pod's
            l.extend(p.pod.iter().filter(|(k, _)| !ps.labels.iter().any(|(n, _)| n == k)).map(|(k, v)| (k.to_string(), v.clone())));
            l.extend(ps.labels.iter().cloned());
            l
        })
        .collect();
    // encoded, compressed and framed off the loop; sent by the pusher's own thread
    let builders: Vec<_> = profiles.into_iter().map(|(_, b)| b).collect();
    let pusher = ps.pusher.clone();
    let push = move || {
        let gzipped: Vec<Vec<u8>> = builders.iter().map(|b| b.encode_gzip()).collect();
        let pairs: Vec<Vec<(&str, &str)>> = labels.iter().map(|l| l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()).collect();
        let bodies: Vec<[&[u8]; 1]> = gzipped.iter().map(|b| [b.as_slice()]).collect();
        let series: Vec<waitmeter_formats::pyroscope::Series> =
            pairs.iter().zip(&bodies).map(|(labels, b)| waitmeter_formats::pyroscope::Series { labels, profiles: b }).collect();
        pusher.send(waitmeter_formats::pyroscope::push_request(&series));
    };
    renderer.run(push);
}

pub fn run(args: &RunArgs) -> Result<()> {
    // the command line needs one of them; WAITMETER_ALL=false satisfies it without either
    if args.pid.is_empty() && !args.all && args.comm.is_empty() && args.cgroup.is_empty() {
        return Err(crate::error::usage!(
            "nothing to watch: give --pid PID, --comm NAME, --cgroup PATH or --all (WAITMETER_ALL=false in the environment does not count)"
        ));
    }
    let selector = Selector::new(&args.comm, &args.cgroup)?;
    install_stop_handler();
    let age = args.age.config()?;
    if age.endpoint.is_some() && (args.all || selector.is_some() || args.pid.len() != 1) {
        return Err(crate::error::usage!(
            "--age-url joins the age of one process with its threads: give exactly one --pid (or use --age-socket, which is per thread)"
        ));
    }
    let mut ages = AgeSources::new(&age)?;
    let web = match &args.web_config_file {
        Some(path) => Some(
            Web::load(path)
                .map_err(|e| crate::error::usage!("{e:#}: fix the file (format: docs/deployment.md, \"Securing the endpoint\")"))?,
        ),
        None => None,
    };
    // bind first: a taken port fails before any probe is loaded
    let stacks_on = args.probe.stacks != crate::cli::Stacks::None;
    let mut pushing = pushing(&args.push, stacks_on)?;
    let pods = pod_names(&args.pods)?;
    let (tx, rx) = mpsc::channel::<http::Scrape>();
    let (pull_tx, pull_rx) = mpsc::channel::<Pull>();
    // --timeline-minutes: the last minutes of every thread's timeline, kept and served
    let keep_s = args.timeline_minutes.map(|m| m * 60);
    let (look_tx, look_rx) = mpsc::channel::<http::Look>();
    let endpoint = http::serve(&args.listen, web, tx, stacks_on.then_some(pull_tx), keep_s.map(|k| (look_tx, k)))?;
    let addr = endpoint.addr;
    let scheme = if endpoint.tls { "https" } else { "http" };
    // stacks are drained all along and kept only while a profile is recorded
    // --all and --children: new processes of watched ones are watched from their fork on
    let timeline_bytes = if keep_s.is_some() { args.timeline_buffer_kib * 1024 } else { 0 };
    let mut session = Session::start(&crate::session::SessionOptions {
        timeline_bytes,
        ..session_options(&args.probe, args.all || args.children, false)
    })?;
    // the kept window reaches back `keep_s` from any moment: a segment more (10 s) is held
    let mut history = keep_s.map(|k| History::new(k * 1_000_000_000, MAX_KEPT_CELLS));
    // what would hold the loop up is rendered off it: the timeline's views, the pulled profiles
    let renderer = crate::worker::Worker::start("waitmeter-render")?;
    session.keep_stacks(pushing.is_some());
    let mut captures = Captures::default();
    for pid in &args.pid {
        session.attach(*pid)?;
    }
    if args.all {
        session.discover()?;
    }
    if let Some(sel) = &selector {
        session.discover_matching(&|pid, stat| sel.takes(pid, stat))?;
    }
    let descends = |pid: u32, _: &crate::procfs::TaskStat| crate::procfs::ancestor_in(pid, &args.pid).is_some();
    if args.children {
        session.discover_matching(&descends)?;
    }
    // each process' syscalls, only when asked (a probe on every syscall of the machine)
    let syscall_probe = match args.probe.syscalls {
        Some(crate::cli::Syscalls::On) => Some(
            SyscallProbe::load(session.probe(), session.kernel(), args.probe.max_threads.saturating_mul(8).max(32_768))
                .map_err(|e| crate::error::usage!("{e:#}: run without --syscalls on"))?,
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
    crate::error::say!(
        "waitmeter: serving {scheme}://{addr}/metrics{} for {} process(es){}; probes: {} ({variant}){}",
        match (stacks_on, keep_s.is_some()) {
            (true, true) => ", /debug/pprof/wait and /debug/timeline",
            (true, false) => " and /debug/pprof/wait",
            (false, true) => " and /debug/timeline",
            (false, false) => "",
        },
        session.targets().count(),
        match (&selector, args.all) {
            (_, true) => " and every new one".to_string(),
            (Some(sel), _) => format!(" and every new one {sel}"),
            _ => String::new(),
        },
        attached.join(", "),
        args.push.pyroscope_url.as_ref().map(|u| format!("; pushing wait profiles to {u}")).unwrap_or_default()
    );
    let mut exporter = Exporter::new(args.max_thread_labels, args.tid_labels);
    let mut next_discover = monotonic_ns() + DISCOVER_EVERY_NS;
    let mut next_window = monotonic_ns();
    let mut next_stacks = monotonic_ns() + STACKS_EVERY_NS;
    let mut warned_all_gone = false;
    let online = crate::procfs::online_cpus();
    while !stop_requested() {
        endpoint.health.beat();
        match rx.recv_timeout(TICK) {
            Ok(scrape) => {
                let snap = sample(&mut session, &mut exporter, &mut captures, pushing.as_mut(), pods.as_deref(), history.as_mut());
                let mut ids = identities(&session, pods.as_deref());
                let procs: Vec<ProcessInfo> = session
                    .targets()
                    .map(|t| ProcessInfo {
                        identity: ids.remove(&t.id).unwrap_or_default(),
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
                    lost.extend(p.lost());
                    maps.push(("syscalls", "syscall_counts", p.entries()));
                }
                let status = AgentStatus {
                    attached: attached.clone(),
                    expected: expected.clone(),
                    variant,
                    kernel_features: super::kernel_features(session.kernel()),
                    lost,
                    maps,
                    http_codes: endpoint.stats.codes(),
                    http_drops: endpoint.stats.drops(),
                    web_reloads: endpoint.web.as_ref().map(|w| w.reloads()).unwrap_or_default(),
                    pushes: pushing.as_ref().map(|p| p.pusher.stats.by_result()).unwrap_or_default(),
                    syscalls: syscall_totals.series(),
                    pod_lists: pods.as_ref().map(|d| (d.stats.by_result(), d.stats.skipped())),
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
            let snap = sample(&mut session, &mut exporter, &mut captures, pushing.as_mut(), pods.as_deref(), history.as_mut());
            exporter.window(now, &snap);
            if let Some(h) = history.as_mut() {
                timeline::drain_into(&mut session, h);
                h.boundary(now, &snap.live, timeline::spans_lost(&session));
            }
            next_stacks = now + STACKS_EVERY_NS;
        } else if stacks_on && now >= next_stacks {
            sample(&mut session, &mut exporter, &mut captures, pushing.as_mut(), pods.as_deref(), history.as_mut());
            next_stacks = now + STACKS_EVERY_NS;
        } else {
            let exits = session.exits();
            exporter.fold_exits(&exits);
            if let Some(h) = history.as_mut() {
                h.note_exits(&exits);
            }
            if session.exits_since_stack_drain() > STACK_DRAIN_EXITS {
                sample(&mut session, &mut exporter, &mut captures, pushing.as_mut(), pods.as_deref(), history.as_mut());
                next_stacks = now + STACKS_EVERY_NS;
            }
        }
        // profiles: new pulls start from a drained map; due ones and pushes end with one
        while let Ok(pull) = pull_rx.try_recv() {
            if captures.is_empty() && pushing.is_none() {
                sample(&mut session, &mut exporter, &mut captures, None, pods.as_deref(), history.as_mut());
            }
            if let Err(pull) = captures.start(pull, monotonic_ns(), unix_ns()) {
                let _ = pull
                    .reply
                    .send(Err(format!("busy: {} profiles are being recorded already: retry", crate::export::recorder::MAX_CAPTURES)));
            }
            // from now: the kernel takes every wait stack while a profile is recorded
            session.keep_stacks(true);
        }
        captures.drop_cancelled();
        // the timeline: spans every tick (the ring holds about a second of a busy machine's),
        // views when asked
        if let Some(h) = history.as_mut() {
            timeline::drain_into(&mut session, h);
        }
        // one view taken a time round (the endpoint lets two wait): a scrape asked meanwhile is
        // answered before the next
        if let (Some(h), Ok(look)) = (history.as_mut(), look_rx.try_recv()) {
            // each thread's open interval, read before the last spans are drained
            let open = session.open_spans();
            let snap = sample(&mut session, &mut exporter, &mut captures, pushing.as_mut(), pods.as_deref(), Some(&mut *h));
            timeline::drain_into(&mut session, h);
            match timeline::prepare(&look, &session, h, &snap, &open, online, unix_ns()) {
                Ok(view) => renderer.run(move || drop(look.reply.send(view.render()))),
                Err(why) => drop(look.reply.send(Err(why))),
            }
        }
        let due_push = pushing.as_ref().is_some_and(|p| now >= p.next_ns);
        if captures.next_due().is_some_and(|d| d <= now) || due_push {
            sample(&mut session, &mut exporter, &mut captures, pushing.as_mut(), pods.as_deref(), history.as_mut());
            next_stacks = now + STACKS_EVERY_NS;
            answer_pulls(captures.due(now), &session, &exporter, now, &renderer);
            if let Some(ps) = pushing.as_mut().filter(|_| due_push) {
                while ps.next_ns <= now {
                    ps.next_ns += ps.every_ns;
                }
                push_now(ps, &exporter, now, &renderer);
            }
        }
        ages.poll(now);
        if now >= next_discover {
            next_discover = now + DISCOVER_EVERY_NS;
            for t in session.reap() {
                log::info!("process {} ({}) exited", t.pid, t.comm);
            }
            let found = match (&selector, args.all) {
                (_, true) => Some(session.discover()),
                (Some(sel), _) => {
                    Some(session.discover_matching(&|pid, stat| sel.takes(pid, stat) || (args.children && descends(pid, stat))))
                }
                _ if args.children => Some(session.discover_matching(&descends)),
                _ => None,
            };
            if let Some(Err(e)) = &found {
                log::warn!("failed to look for new processes: {e:#}");
            }
            if found.is_none() && !warned_all_gone && session.targets().all(|t| t.exited_ns.is_some()) {
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

/// `run --comm`/`--cgroup`: which processes to watch, now and as they start.
struct Selector {
    /// names as the kernel keeps them (TASK_COMM_LEN: 15 characters)
    comms: Vec<String>,
    /// cgroup v2 paths, without /sys/fs/cgroup and a trailing /
    cgroups: Vec<String>,
}

impl Selector {
    fn new(comms: &[String], cgroups: &[String]) -> Result<Option<Selector>> {
        if comms.is_empty() && cgroups.is_empty() {
            return Ok(None);
        }
        let mut cg = vec![];
        for c in cgroups {
            let path = c.strip_prefix("/sys/fs/cgroup").unwrap_or(c).trim_end_matches('/');
            if !path.starts_with('/') && !path.is_empty() {
                return Err(crate::error::usage!("--cgroup {c}: give the cgroup's path from the root, e.g. /system.slice/app.service"));
            }
            cg.push(path.to_string());
        }
        Ok(Some(Selector { comms: comms.iter().map(|c| c.chars().take(15).collect()).collect(), cgroups: cg }))
    }

    fn takes(&self, pid: u32, stat: &crate::procfs::TaskStat) -> bool {
        (self.comms.is_empty() || self.comms.contains(&stat.comm))
            && (self.cgroups.is_empty() || {
                let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
                self.cgroups.iter().any(|c| in_cgroup(&text, c))
            })
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = vec![];
        if !self.comms.is_empty() {
            parts.push(format!("named {}", self.comms.join(" or ")));
        }
        if !self.cgroups.is_empty() {
            parts.push(format!(
                "in cgroup {}",
                self.cgroups.iter().map(|c| if c.is_empty() { "/" } else { c }).collect::<Vec<_>>().join(" or ")
            ));
        }
        f.write_str(&parts.join(" and "))
    }
}

/// Whether a process whose /proc/PID/cgroup is `text` is in cgroup `root` or below it: its v2
/// path, or under v1 its path in a hierarchy, alone or after the hierarchy's directory
/// (`/cpu/app` for `4:cpu:/app`, as under /sys/fs/cgroup).
fn in_cgroup(text: &str, root: &str) -> bool {
    text.lines().filter_map(|l| l.split_once(':').and_then(|(_, rest)| rest.split_once(':'))).any(|(ctrls, path)| {
        under(path, root)
            || (!ctrls.is_empty() && {
                let dir = ctrls.strip_prefix("name=").unwrap_or(ctrls);
                std::iter::once(dir).chain(dir.split(',')).any(|d| {
                    root.strip_prefix('/').and_then(|r| r.strip_prefix(d)).is_some_and(|rest| rest.is_empty() || under(path, rest))
                })
            })
    })
}

/// Whether cgroup `path` is `root` or below it (whole components: /a is not above /ab).
fn under(path: &str, root: &str) -> bool {
    path == root || root.is_empty() || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_is_under_itself_and_its_parents_by_whole_components() {
        assert!(under("/system.slice/app.service", "/system.slice"));
        assert!(under("/system.slice/app.service", "/system.slice/app.service"));
        assert!(under("/anything", ""));
        assert!(!under("/system.slice/app.service2", "/system.slice/app.service"));
        assert!(!under("/system", "/system.slice"));
        let s = Selector::new(&[], &["/sys/fs/cgroup/system.slice/".into()]).unwrap().unwrap();
        assert_eq!(s.cgroups, ["/system.slice"]);
        assert!(Selector::new(&[], &["system.slice".into()]).is_err());
        let long = Selector::new(&["a-name-longer-than-15".into()], &[]).unwrap().unwrap();
        assert_eq!(long.comms, ["a-name-longer-t"]);
        assert!(Selector::new(&[], &[]).unwrap().is_none());
        // v2, and v1 by path alone or by hierarchy directory and path
        let v2 = "0::/system.slice/app.service\n";
        assert!(in_cgroup(v2, "/system.slice") && !in_cgroup(v2, "/user.slice"));
        let v1 = "9:name=systemd:/\n4:memory:/pods/x\n2:cpu,cpuacct:/wm-test\n0::/\n";
        assert!(in_cgroup(v1, "/wm-test") && in_cgroup(v1, "/cpu/wm-test") && in_cgroup(v1, "/cpu,cpuacct/wm-test"));
        assert!(in_cgroup(v1, "/memory/pods") && !in_cgroup(v1, "/memory/wm-test") && !in_cgroup(v1, "/cpu/other"));
        assert!(!in_cgroup(v1, "/cpuset/wm-test"));
    }
}
