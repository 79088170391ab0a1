//! `waitmeter attach`: one window, a report per process.
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;

use super::launch::Launched;
use super::{emit, install_stop_handler, python_info, session_options, stop_requested};
use crate::age::sources::AgeSources;
use crate::cli::{AttachArgs, Output};
use crate::clock::monotonic_ns;
use crate::error::usage;
use crate::model::ledger::{incarnation, Incarnation};
use crate::model::partition::{secs, window, ThreadSample};
use crate::model::throttle::Stretch;
use crate::model::timeline::Timeline;
use crate::probes::syscalls::SyscallProbe;
use crate::report::{json, text, verdict, CgroupReport, ProcessReport, PythonInfo, ThreadRow, Throttling, VerdictOptions};
use crate::session::{Session, SessionOptions, Target};

/// How long a command's interpreter is looked for after its start (a shared
/// libpython is mapped and the GIL made within milliseconds; a shell script
/// may exec Python later).
const PYTHON_WAIT_NS: u64 = 10_000_000_000;

/// A window measured: a report per process, and the command launched for it.
pub struct Measured {
    pub reports: Vec<ProcessReport>,
    launched: Option<Launched>,
    /// the processes asked for (not those found with --children)
    roots: Vec<u32>,
    /// those of them that exited while the probes loaded, before the window opened
    gone_before: Vec<u32>,
}

/// `all_findings`: the verdict lists every finding (`-v`).
pub fn attach(args: &AttachArgs, all_findings: bool) -> Result<()> {
    let color =
        args.output == Output::Text && args.command.is_empty() && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let Measured { reports, launched, roots, gone_before } = measure(args, all_findings)?;
    for (i, report) in reports.iter().enumerate() {
        // the verdict is drawn once, for whichever renderer
        let v = verdict::analyse(report);
        match args.output {
            // several processes (asked for, or found with --children): one object per line (JSON
            // Lines), also when one asked for exited before the window opened
            Output::Json if reports.len() > 1 || args.pid.len() > 1 => emit(&format!("{}\n", json::render_line(report, &v))),
            Output::Json => emit(&format!("{}\n", json::render(report, &v))),
            Output::Text => {
                let sep = if i > 0 { "\n" } else { "" };
                emit(&format!("{sep}{}", text::report_fit(report, &v, color, terminal_width().unwrap_or(text::FULL_WIDTH))))
            }
        }
    }
    if let Some(l) = launched {
        // its exit code is ours (the probes detached as the process exited)
        std::process::exit(l.wait()?);
    }
    // a child that exits is part of what was measured; a process asked for that exits is not
    let gone: Vec<String> = reports
        .iter()
        .filter(|r| roots.contains(&r.pid))
        .filter_map(|r| r.exited_after_ns.map(|e| format!("process {} exited {:.1} s", r.pid, secs(e))))
        .collect();
    // what was asked for and is gone: before the window (no report), then during it
    let mut said: Vec<String> =
        gone_before.iter().map(|pid| format!("process {pid} exited before the window opened: no report of it")).collect();
    if !gone.is_empty() {
        said.push(format!("{} into the {:.1} s window: the report covers the time it ran", gone.join(", "), args.duration));
    }
    if !said.is_empty() {
        return Err(usage!("{}", said.join("; ")));
    }
    Ok(())
}

/// One process of the window.
struct Watched {
    target: Target,
    python: Option<PythonInfo>,
    cpu_at_start: HashMap<u32, (u64, u64)>,
    exited_at: Option<u64>,
    /// found with --children: the process asked for that it descends from
    root: Option<u32>,
}

/// How often `--children` looks for new processes during the window.
const CHILDREN_EVERY_NS: u64 = 250_000_000;

/// The processes of `roots`' families the session does not watch yet, watched now (`--children`).
fn find_children(session: &mut Session, roots: &[u32], watched: &mut Vec<Watched>) -> Result<()> {
    let known: std::collections::HashSet<u32> = watched.iter().filter(|w| w.exited_at.is_none()).map(|w| w.target.pid).collect();
    session.discover_matching(&|pid, _| !known.contains(&pid) && crate::procfs::ancestor_in(pid, roots).is_some())?;
    let new: Vec<Target> = session.targets().filter(|t| t.exited_ns.is_none() && !known.contains(&t.pid)).cloned().collect();
    for target in new {
        let Some(root) = crate::procfs::ancestor_in(target.pid, roots) else { continue };
        let python = python_info(session, &target);
        let cpu_at_start = crate::procfs::thread_cpu_ns(target.pid);
        log::debug!("--children: watching PID {} ({}), started by PID {root}", target.pid, target.comm);
        watched.push(Watched { target, python, cpu_at_start, exited_at: None, root: Some(root) });
    }
    Ok(())
}

/// Measures one window of `args`' targets (`args.output` only says whether a live view may be
/// drawn meanwhile): their reports, not yet rendered.
pub fn measure(args: &AttachArgs, all_findings: bool) -> Result<Measured> {
    install_stop_handler();
    let age = args.age.config()?;
    if args.pid.len() > 1 && age.endpoint.is_some() {
        return Err(usage!(
            "--age-url joins the age of one process with its threads: give one --pid (or use --age-socket, which is per thread)"
        ));
    }
    // fail before measuring, not after, when the profile cannot be written
    let profile_file = match &args.profile {
        Some(p) if args.probe.stacks == crate::cli::Stacks::None => {
            return Err(usage!("--profile {} needs stacks: drop --stacks none", p.display()));
        }
        Some(p) => Some(crate::outfile::OutFile::create(p, "--profile")?),
        None => None,
    };
    if args.pid.len() > 1 && args.html.is_some() {
        return Err(usage!("--html draws one process' window: give one --pid (--trace takes several)"));
    }
    let trace_file = args.trace.as_ref().map(|p| crate::outfile::OutFile::create(p, "--trace")).transpose()?;
    let html_file = args.html.as_ref().map(|p| crate::outfile::OutFile::create(p, "--html")).transpose()?;
    let timeline = trace_file.is_some() || html_file.is_some();
    let timeline_bytes = if timeline { args.timeline_buffer_kib * 1024 } else { 0 };
    // --children: a watched process' new processes are watched from their fork on
    // a stretch over the objective is a stall: the probe keeps what the thread did meanwhile
    let stall_ns = args.age_slo.map_or(crate::model::stretches::STALL_OBJECTIVE_NS, |s| (s * 1e9) as u64);
    // a wrong PID fails now, not after the probes have loaded
    for pid in &args.pid {
        Session::check(*pid)?;
    }
    // the pod list is fetched while the window runs
    let pods = super::pod_names(&args.pods)?;
    let mut session = Session::start(&SessionOptions { stall_ns, timeline_bytes, ..session_options(&args.probe, args.children, true) })?;
    // each thread's syscalls, when asked (--syscalls on: a probe on every syscall of the
    // machine, docs/probes/syscalls.md). Loaded before the target is watched: the window
    // starts when everything is in place
    let syscall_probe = match args.probe.syscalls {
        Some(crate::cli::Syscalls::On) => Some(
            SyscallProbe::load(session.probe(), session.kernel(), args.probe.max_threads.saturating_mul(8).max(32_768))
                .map_err(|e| usage!("{e:#}: run without --syscalls on"))?,
        ),
        _ => None,
    };
    // a command: started stopped at its exec, watched before it runs its first instruction
    let mut launched = match args.pid.is_empty() {
        false => None,
        true => Some(Launched::start(&args.command)?),
    };
    let mut seen = std::collections::HashSet::new();
    let mut pids: Vec<u32> = args.pid.iter().copied().filter(|p| seen.insert(*p)).collect();
    if let Some(l) = &launched {
        pids = vec![l.pid()];
    }
    // a process that exits while the probes load (it was there before): with others, they are
    // measured without it; alone, there is nothing to measure
    let mut gone_before = vec![];
    for pid in &pids {
        if let Err(e) = session.attach(*pid) {
            if launched.is_some() || Session::check(*pid).is_ok() {
                return Err(e);
            }
            if pids.len() == 1 {
                return Err(usage!("process {pid} exited while the probes loaded, before the window opened: nothing to measure"));
            }
            log::warn!("process {pid} exited while the probes loaded, before the window opened: the report is of the others");
            gone_before.push(*pid);
        }
    }
    pids.retain(|p| !gone_before.contains(p));
    // --children: the processes they have now are watched before the window opens, like them
    if args.children {
        session.discover_matching(&|pid, _| crate::procfs::ancestor_in(pid, &pids).is_some())?;
    }
    let mut syscalls = crate::model::syscalls::Tally::default();
    let mut stretches = crate::model::stretches::Tally::new(stall_ns);
    // The window opens now, with everything in place: what the threads did since they were
    // seeded (while the agent attached its probes and read symbols, competing for the CPU) is
    // a baseline, subtracted from every row
    let base = session.sample();
    stretches.open(session.probe().stretches());
    // --trace: each process' timeline from here (what came before is the baseline's)
    let mut timelines: BTreeMap<u32, Timeline> = BTreeMap::new();
    if timeline {
        session.drain_spans();
    }
    let lost_at_start = session.lost();
    let t0 = base.at_ns;
    let online = crate::procfs::online_cpus();
    let base: HashMap<u32, ThreadSample> = base.live.into_values().flatten().map(|s| (s.host_tid, s)).collect();
    // per process: user and kernel CPU time of the threads at the start (the split of `running`)
    let mut watched: Vec<Watched> = pids
        .iter()
        .map(|pid| {
            let target = session.target_by_pid(*pid).cloned().expect("attached target is known");
            let python = python_info(&session, &target);
            Watched { target, python, cpu_at_start: crate::procfs::thread_cpu_ns(*pid), exited_at: None, root: None }
        })
        .collect();
    let roots = pids.clone();
    if args.children {
        // those found above, and any started since
        find_children(&mut session, &roots, &mut watched)?;
    }
    let mut next_children = monotonic_ns() + CHILDREN_EVERY_NS;
    if let Some(l) = launched.as_mut() {
        l.release()?;
    }
    // a command's interpreter comes up after its start: looked for until it is, for a while
    let mut python_pending = launched.is_some();
    // the wall-clock time of t0 (the profile's and the report's start)
    let unix_now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    let start_unix_ns = unix_now_ns - monotonic_ns().saturating_sub(t0) as i64;
    // one line when measuring starts (scripts can wait for it)
    let who: Vec<String> = watched.iter().map(|w| format!("PID {} ({})", w.target.pid, w.target.comm)).collect();
    match &launched {
        Some(_) => crate::error::say!("waitmeter: watching {} until it exits", who.join(", ")),
        None => crate::error::say!("waitmeter: watching {} for {} s", who.join(", "), args.duration),
    }
    let window_ns = if launched.is_some() { u64::MAX / 4 } else { (args.duration * 1e9) as u64 };
    let tick_ns = (args.interval * 1e9) as u64;
    // a command writes to the terminal itself: no live table over it
    let live_view = args.output == Output::Text && std::io::stdout().is_terminal() && launched.is_none();
    let color = live_view && std::env::var_os("NO_COLOR").is_none();

    let mut exited: Vec<ThreadSample> = vec![];
    let mut last: HashMap<u32, ThreadSample> = base.clone();
    let mut live: Vec<ThreadSample> = vec![];
    let mut drawn_lines = 0usize;
    // sampled every PEAK_STEP_NS for the bursts (model::peaks), drawn every --interval
    let step_ns = crate::model::peaks::PEAK_STEP_NS.min(tick_ns);
    let mut next_step = t0 + step_ns;
    let mut next_tick = t0 + tick_ns;
    let mut exits_since_tick: Vec<ThreadSample> = vec![];
    let mut ages = AgeSources::new(&age)?;
    let mut peaks = crate::model::peaks::PeakTracker::default();
    for s in base.values() {
        peaks.add(s, t0);
    }
    let plain_lines = args.output == Output::Text && !live_view && launched.is_none();
    let all_gone = |w: &[Watched]| w.iter().all(|w| w.exited_at.is_some());
    let mut end;
    loop {
        let deadline = (t0 + window_ns).min(next_step);
        while monotonic_ns() < deadline && !stop_requested() && !all_gone(&watched) {
            std::thread::sleep(Duration::from_millis(50).min(Duration::from_nanos(deadline.saturating_sub(monotonic_ns()))));
            ages.poll(monotonic_ns());
            if args.children && monotonic_ns() >= next_children {
                next_children = monotonic_ns() + CHILDREN_EVERY_NS;
                find_children(&mut session, &roots, &mut watched)?;
            }
            for t in session.reap() {
                if let Some(w) = watched.iter_mut().find(|w| w.target.id == t.id) {
                    w.exited_at = t.exited_ns;
                }
            }
            if python_pending {
                let w = &mut watched[0];
                let up = session.python_late(w.target.id);
                if up {
                    w.python = session.target_by_pid(w.target.pid).and_then(|t| python_info(&session, t));
                }
                python_pending = !up && monotonic_ns() < t0 + PYTHON_WAIT_NS;
            }
        }
        let snap = session.sample();
        end = snap.at_ns;
        if timeline {
            add_spans(&mut session, &mut timelines, t0);
        }
        let new_exits: Vec<ThreadSample> = snap.exited.into_values().flatten().collect();
        live = snap.live.into_values().flatten().collect();
        for s in live.iter().chain(new_exits.iter()) {
            peaks.add(s, t0);
        }
        // the counts are cumulative: read when threads exit (theirs are final, then deleted
        // from the map) and at the end
        if let (Some(p), false) = (&syscall_probe, new_exits.is_empty()) {
            let reading = p.read();
            let alive: std::collections::HashSet<u32> = live.iter().map(|s| s.host_tid).collect();
            let gone: Vec<u32> = reading.iter().map(|r| r.host_tid).filter(|t| !alive.contains(t)).collect();
            syscalls.note(reading.into_iter().map(|r| (r.host_tid, r.nr, r.calls, r.ns)));
            p.forget(&gone);
        }
        // the stretches too: those of exited threads are read once more, then deleted
        if !new_exits.is_empty() {
            let reading = session.probe().stretches();
            let alive: std::collections::HashSet<Incarnation> = live.iter().map(|s| incarnation(s.host_tid, s.start_ns)).collect();
            let gone: Vec<_> = reading.iter().map(|(k, _)| *k).filter(|(t, g, _)| !alive.contains(&(*t, *g))).collect();
            stretches.note(reading);
            session.probe().forget_stretches(&gone);
        }
        exits_since_tick.extend(new_exits.iter().cloned());
        exited.extend(new_exits);
        let done = all_gone(&watched) || stop_requested() || snap.at_ns >= t0 + window_ns;
        next_step += step_ns;
        if snap.at_ns < next_tick && !done {
            continue;
        }
        let new_exits = std::mem::take(&mut exits_since_tick);
        if live_view || plain_lines {
            let mut frame = String::new();
            for w in &watched {
                // the last interval: each thread's change since the previous tick
                let rows: Vec<ThreadRow> = live
                    .iter()
                    .chain(new_exits.iter())
                    .filter(|s| s.pid == w.target.pid)
                    .map(|s| {
                        let d = window(last.get(&s.host_tid), s);
                        ThreadRow::from_sample(s, d, d.total())
                    })
                    .collect();
                let r =
                    ProcessReport::new(w.target.pid, w.target.comm.clone(), w.python.clone(), tick_ns, None, rows).with_online_cpus(online);
                let r = if args.each_thread { r } else { r.with_short_lived_folded() };
                let age = ages.process(w.target.pid, t0);
                let at_s = secs(snap.at_ns.saturating_sub(t0));
                if plain_lines {
                    emit(&format!("{}\n", text::tick_line(&r, at_s, age.as_ref(), watched.len() > 1)));
                }
                if live_view {
                    let width = terminal_width().unwrap_or(text::FULL_WIDTH);
                    frame.push_str(&text::tick_frame(&r, at_s, args.duration, args.interval, age.as_ref(), color, width));
                }
            }
            if live_view {
                let erase = if drawn_lines > 0 { format!("\x1b[{drawn_lines}A\x1b[J") } else { String::new() };
                drawn_lines = frame.lines().count();
                emit(&format!("{erase}{frame}"));
            }
        }
        last = live.iter().map(|s| (s.host_tid, s.clone())).collect();
        next_tick += tick_ns;
        if done {
            break;
        }
    }
    if live_view && drawn_lines > 0 {
        emit(&format!("\x1b[{drawn_lines}A\x1b[J"));
    }

    if let Some(p) = &syscall_probe {
        syscalls.note(p.read().into_iter().map(|r| (r.host_tid, r.nr, r.calls, r.ns)));
        for l in p.lost().into_iter().filter(|l| l.count > 0) {
            log::warn!("{} syscalls were not counted ({}): {}", l.count, l.reason.label(), l.reason.remedy());
        }
    }
    stretches.note(session.probe().stretches());
    let lost: Vec<_> = session.lost().into_iter().map(|l| l.since(&lost_at_start)).collect();
    for l in lost.iter().filter(|l| l.count > 0) {
        log::warn!(
            "{} {} events were lost ({}): the numbers are incomplete; {}",
            l.count,
            l.probe.label(),
            l.reason.label(),
            l.reason.remedy()
        );
    }
    // the names of the targets' pods: the last list, or the first one within 2 s
    let pod_list = pods.as_ref().map(|d| d.names_within(std::time::Duration::from_secs(2))).unwrap_or_default();
    if timeline {
        // each thread's open interval too (one asleep to the end, or through the whole window),
        // read before the last spans are drained: a thread that moved on in between has its
        // closed span, then the open one from its end (off by the µs between the two reads)
        let open = session.open_spans();
        add_spans(&mut session, &mut timelines, t0);
        for (pid, spans) in open {
            let t = timelines.entry(pid).or_insert_with(|| Timeline::recording(t0));
            for (tid, s) in spans {
                t.add_open(tid, s);
            }
        }
    }
    let mut reports = vec![];
    for w in &watched {
        let pid = w.target.pid;
        let end = w.exited_at.unwrap_or(end);
        let cpu_at_end = crate::procfs::thread_cpu_ns(pid);
        let split = |s: &ThreadSample| {
            let end = cpu_at_end.get(&s.tid).filter(|_| !s.exited)?;
            // a thread that started in the window counts from zero
            let start = if s.start_ns > t0 { (0, 0) } else { *w.cpu_at_start.get(&s.tid)? };
            Some((end.0.saturating_sub(start.0), end.1.saturating_sub(start.1)))
        };
        let rows: Vec<ThreadRow> = live
            .iter()
            .chain(exited.iter())
            .filter(|s| s.pid == pid)
            .map(|s| {
                // since the baseline (a thread that started in the window: all of it)
                let d = match base.get(&s.host_tid).filter(|b| b.same_thread(s)) {
                    Some(b) => s.since(b),
                    None => s.clone(),
                };
                let existed = d.times.total();
                ThreadRow {
                    cpu_split: split(s),
                    syscalls: syscalls.of(s.host_tid),
                    stretches: stretches.of(incarnation(s.host_tid, s.start_ns)),
                    age: ages.thread(pid, s.tid, t0),
                    peaks: peaks.of(s.host_tid, s.start_ns),
                    ..ThreadRow::from_sample(&d, d.times, existed)
                }
            })
            .collect();
        let target = session.targets().find(|t| t.id == w.target.id).cloned().unwrap_or_else(|| w.target.clone());
        // as of the end: a free-threaded build's GIL can be switched on meanwhile (what can no
        // longer be read of a process that exited is as it was)
        let python = match (python_info(&session, &target), w.python.clone()) {
            (Some(mut now), Some(before)) => {
                now.switch_interval_us = now.switch_interval_us.or(before.switch_interval_us);
                Some(now)
            }
            (now, _) => now,
        };
        let report = ProcessReport::new(
            target.pid,
            target.comm.clone(),
            python,
            end.saturating_sub(t0),
            w.exited_at.map(|e| e.saturating_sub(t0)),
            rows,
        )
        .with_online_cpus(online)
        .with_allowed_cpus(crate::procfs::allowed_cpus(target.pid))
        .with_start(start_unix_ns)
        .with_container(crate::identity::Identity::resolve(&target.placement, &pod_list).describe())
        .with_environment(super::environment(&session, target.pid))
        .with_verdict(VerdictOptions { all: all_findings, age_slo_s: args.age_slo });
        let report = match &target.cgroup {
            Some(cg) => {
                let quota = cg.quota();
                let delta = match (cg.stat(), target.cgroup_start) {
                    (Some(now), Some(start)) => now.since(&start),
                    _ => Default::default(),
                };
                let stretches: Vec<Stretch> = target.throttles.iter().filter(|(_, s)| s.end >= t0).map(|(_, s)| *s).collect();
                let throttling = Throttling::of(&stretches, quota.map(|q| q.period_us * 1000));
                report.with_cgroup(Some(CgroupReport::of(cg.path.clone(), quota, delta)), Some(throttling))
            }
            None => report,
        };
        // the endpoint's age is the service's: its process' (not each child's, with --children)
        let own_age = if w.root.is_some() && age.endpoint.is_some() { None } else { ages.process(target.pid, t0) };
        let report = report.with_age(own_age).with_stacks(session.wait_stacks(target.id)).with_events_lost(lost.clone());
        // short-lived threads folded by role, their wait stacks with them
        let report = if args.each_thread { report } else { report.with_short_lived_folded() };
        reports.push(report);
    }
    // the probes detach: a launched command runs on unwatched
    drop(session);
    if args.children {
        // each process asked for weighs its family's CPU demand against its CPUs
        let family: Vec<_> = watched
            .iter()
            .zip(&reports)
            .filter(|(w, _)| w.root.is_none())
            .map(|(w, r)| {
                let others: Vec<&ProcessReport> =
                    watched.iter().zip(&reports).filter(|(c, _)| c.root == Some(w.target.pid)).map(|(_, c)| c).collect();
                crate::report::family::Family::of(r, &others)
            })
            .collect();
        let mut family = family.into_iter();
        reports = watched.iter().zip(reports).map(|(w, r)| if w.root.is_none() { r.with_family(family.next()) } else { r }).collect();
    } else if reports.len() > 1 {
        // several processes asked for: whether they waited on each other, on the first's report
        let others: Vec<&ProcessReport> = reports[1..].iter().collect();
        let group = crate::report::family::Family::asked(&reports[0], &others);
        reports[0].family = Some(group);
    }
    // one profile of every process measured (several -p, --children: each sample labelled with its own)
    if let Some(file) = profile_file {
        let builder = crate::export::profile::of_reports(&reports, start_unix_ns, end.saturating_sub(t0) as i64);
        let dropped = builder.dropped();
        if dropped != Default::default() {
            log::warn!("the profile is full: {dropped:?} left out");
        }
        file.commit(&builder.encode_gzip())?;
    }
    if timeline {
        let verdicts: Vec<_> = reports.iter().map(verdict::analyse).collect();
        let mut each: Vec<_> = reports
            .iter()
            .zip(&verdicts)
            .map(|(r, v)| {
                let mut t = timelines.remove(&r.pid).unwrap_or_else(|| Timeline::recording(t0));
                t.close(t0 + r.duration_ns);
                (r, v, t)
            })
            .collect();
        // the page is of the process asked for (its children have their own reports); it folds
        // its own copy only when the trace needs the timeline too
        if let (Some(file), Some((r, v, t))) = (html_file, each.first_mut()) {
            let t = if trace_file.is_some() { t.clone() } else { std::mem::take(t) };
            file.commit(crate::report::html::render(r, v, t).as_bytes())?;
        }
        if let Some(file) = trace_file {
            file.commit(crate::report::trace::render(&mut each).as_bytes())?;
        }
    }
    Ok(Measured { reports, launched, roots, gone_before })
}

/// The spans the probe closed since the last call, into each process' timeline (`--trace`).
fn add_spans(session: &mut Session, timelines: &mut BTreeMap<u32, Timeline>, t0: u64) {
    for (pid, spans) in session.drain_spans() {
        let t = timelines.entry(pid).or_insert_with(|| Timeline::recording(t0));
        for (tid, s) in spans {
            t.add(tid, s);
        }
    }
}

/// The terminal's width in columns (stdout), when it is one.
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize; a zeroed one is valid.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(ws.ws_col as usize)
}
