//! Prometheus exposition of the session, built at scrape time from fresh map
//! reads, encoded by the official `prometheus-client` crate.
use std::collections::{BTreeMap, HashMap};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::catalogue::{self, Kind, Metric};
use super::futex_words::FutexWords;
use crate::model::blame::Preemptor;
use crate::model::hist::HoldHist;
use crate::model::labels::{sanitize, LabelBook};
use crate::model::partition::{secs, ThreadSample, Times};
use crate::model::state::State;
use crate::session::Snapshot;

/// How long the series of an exited process are still served.
pub const EXITED_RETENTION_NS: u64 = 300 * 1_000_000_000;

/// One `waitmeter_thread_seconds_total` series family (without `state`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct SeriesKey {
    target: u64,
    thread: String,
    tid: Option<u32>,
}

/// Per-process facts for labels.
#[derive(Clone, Debug)]
pub struct ProcessInfo {
    /// session target id
    pub id: u64,
    pub pid: u32,
    pub comm: String,
    pub alive: bool,
    /// CPUs it may use: its cgroup's CFS quota, else the online CPUs
    pub cpu_limit_cores: f64,
}

/// A cgroup of the watched processes, read at scrape time.
#[derive(Clone, Debug)]
pub struct CgroupInfo {
    pub path: String,
    pub stat: crate::cgroup::CpuStat,
    pub quota_cores: Option<f64>,
}

/// Age inputs at scrape time.
#[derive(Clone, Debug, Default)]
pub struct AgeExport {
    /// (pid, latest age) from the endpoint
    pub process: Option<(u32, f64)>,
    /// (pid, tid, latest age) from waitmeter_client
    pub threads: Vec<(u32, u32, f64)>,
    /// endpoint poll errors (by reason), client records not taken (by reason)
    pub errors: Option<crate::age::sources::AgeErrors>,
}

/// Self-metric inputs.
#[derive(Clone, Debug, Default)]
pub struct AgentStatus {
    pub attached: Vec<String>,
    pub expected: Vec<&'static str>,
    pub variant: &'static str,
    /// (probe, reason, events)
    pub lost: Vec<(&'static str, &'static str, u64)>,
    /// the endpoint's answers by status code
    pub http_codes: Vec<(u16, u64)>,
    /// the endpoint's connections closed without an answer, by reason
    pub http_drops: Vec<(&'static str, u64)>,
}

/// A thread's cumulative numbers, summed into the series they label: the
/// exited threads' (kept across scrapes), or those plus the live ones.
#[derive(Clone, Debug, Default)]
struct Totals {
    times: BTreeMap<SeriesKey, Times>,
    /// (waiter series, holder label) -> GIL wait ns
    gil: BTreeMap<(SeriesKey, String), u64>,
    holds: BTreeMap<SeriesKey, HoldHist>,
    /// (waiter series, waker label) -> futex wait ns
    futex: BTreeMap<(SeriesKey, String), u64>,
    /// (waiter series, preemptor label) -> run-queue ns
    runqueue: BTreeMap<(SeriesKey, String), u64>,
}

impl Totals {
    fn forget(&mut self, target: u64) {
        self.times.retain(|k, _| k.target != target);
        self.gil.retain(|k, _| k.0.target != target);
        self.holds.retain(|k, _| k.target != target);
        self.futex.retain(|k, _| k.0.target != target);
        self.runqueue.retain(|k, _| k.0.target != target);
    }
}

/// Keeps counters monotonic across thread exits: exited threads' final times
/// are folded into their series, and every thread keeps its first label.
pub struct Exporter {
    max_labels: usize,
    tid_labels: bool,
    books: HashMap<u64, LabelBook>,
    /// (target, host TID, start) -> label
    thread_labels: HashMap<(u64, u32, u64), String>,
    /// exited threads' numbers
    folded: Totals,
    /// per target: bounded labels for preempting processes
    preemptor_books: HashMap<u64, LabelBook>,
    /// futex wait by word, for waitmeter_futex_word_*
    words: FutexWords,
    /// each series' times at the previous scrape (for the wait ratio)
    previous: BTreeMap<SeriesKey, Times>,
    /// (target, TID) -> thread label, for naming GIL holders (also after they exit)
    tid_labels_by_target: HashMap<(u64, u32), String>,
}

impl Exporter {
    pub fn new(max_labels: usize, tid_labels: bool) -> Self {
        Exporter {
            max_labels,
            tid_labels,
            books: HashMap::new(),
            thread_labels: HashMap::new(),
            folded: Totals::default(),
            preemptor_books: HashMap::new(),
            words: FutexWords::default(),
            previous: BTreeMap::new(),
            tid_labels_by_target: HashMap::new(),
        }
    }

    fn key(&mut self, target: u64, s: &ThreadSample) -> SeriesKey {
        let id = (target, s.host_tid, s.start_ns);
        let thread = match self.thread_labels.get(&id) {
            Some(l) => l.clone(),
            None => {
                let book = self.books.entry(target).or_insert_with(|| LabelBook::new(self.max_labels));
                let l = book.label(s.name()).to_string();
                self.thread_labels.insert(id, l.clone());
                l
            }
        };
        self.tid_labels_by_target.insert((target, s.tid), thread.clone());
        SeriesKey { target, thread, tid: self.tid_labels.then_some(s.tid) }
    }

    fn holder_label(&self, target: u64, holder: u32) -> String {
        if holder == 0 {
            return "unknown".to_string();
        }
        self.tid_labels_by_target.get(&(target, holder)).cloned().unwrap_or_else(|| "unknown".to_string())
    }

    /// A waker's thread label; "timeout" when no thread woke the waiter,
    /// "other" for a thread that is not one of the process' (another process).
    fn waker_label(&self, target: u64, waker: u32) -> String {
        if waker == 0 {
            return "timeout".to_string();
        }
        self.tid_labels_by_target.get(&(target, waker)).cloned().unwrap_or_else(|| "other".to_string())
    }

    /// What had the CPU while a thread waited in the run queue: a thread of the
    /// process (its label), "idle", or "process:<comm>" for another process
    /// (bounded per process like thread labels; the rest "other").
    fn preemptor_label(&mut self, target: u64, p: &Preemptor) -> String {
        match p {
            Preemptor::Thread(tid) => self.tid_labels_by_target.get(&(target, *tid)).cloned().unwrap_or_else(|| "other".to_string()),
            Preemptor::Idle => "idle".to_string(),
            Preemptor::Process { comm, .. } => {
                let book = self.preemptor_books.entry(target).or_insert_with(|| LabelBook::new(self.max_labels));
                let label = book.label(&format!("process:{}", sanitize(comm))).to_string();
                label
            }
        }
    }

    /// Add a thread's numbers to the series labelled `k`.
    fn add(&mut self, into: &mut Totals, target: u64, k: &SeriesKey, s: &ThreadSample) {
        into.times.entry(k.clone()).or_default().add(&s.times);
        for (holder, ns) in &s.gil_by_holder {
            *into.gil.entry((k.clone(), self.holder_label(target, *holder))).or_default() += ns;
        }
        if let Some(h) = &s.gil_hold {
            into.holds.entry(k.clone()).or_default().add(h);
        }
        for (waker, ns) in crate::model::blame::by_waker(&s.futex) {
            *into.futex.entry((k.clone(), self.waker_label(target, waker))).or_default() += ns;
        }
        for (p, ns) in &s.runqueue_by {
            *into.runqueue.entry((k.clone(), self.preemptor_label(target, p))).or_default() += ns;
        }
    }

    /// Fold the final samples of exited threads into their series (once each).
    pub fn fold_exits(&mut self, exits: &BTreeMap<u64, Vec<ThreadSample>>) {
        let mut folded = std::mem::take(&mut self.folded);
        for (target, threads) in exits {
            for s in threads {
                let k = self.key(*target, s);
                self.add(&mut folded, *target, &k, s);
                self.words.fold_exit(*target, s);
                self.thread_labels.remove(&(*target, s.host_tid, s.start_ns));
            }
        }
        self.folded = folded;
    }

    /// Forget everything about processes that are no longer served.
    pub fn forget(&mut self, targets: &[u64]) {
        for t in targets {
            self.books.remove(t);
            self.folded.forget(*t);
            self.preemptor_books.remove(t);
            self.words.forget(*t);
            self.thread_labels.retain(|k, _| k.0 != *t);
            self.tid_labels_by_target.retain(|k, _| k.0 != *t);
        }
    }

    /// The exposition text for this scrape. `snap.exited` must already be folded.
    pub fn render(
        &mut self,
        procs: &[ProcessInfo],
        cgroups: &[CgroupInfo],
        ages: &AgeExport,
        snap: &Snapshot,
        status: &AgentStatus,
    ) -> String {
        let mut totals = self.folded.clone();
        // labels first, so that holders are named whatever the order of threads
        let keyed: Vec<(u64, SeriesKey, &ThreadSample)> =
            snap.live.iter().flat_map(|(t, threads)| threads.iter().map(move |s| (*t, s))).map(|(t, s)| (t, self.key(t, s), s)).collect();
        for (target, k, s) in keyed {
            self.add(&mut totals, target, &k, s);
        }
        let Totals { times: series, gil, holds, futex, runqueue } = totals;
        let mut futex_seconds = vec![];
        let words = self.words.render(snap.live.iter().flat_map(|(t, threads)| threads.iter().map(move |s| (*t, s))));
        let by_id: HashMap<u64, &ProcessInfo> = procs.iter().map(|p| (p.id, p)).collect();
        let mut gil_holds = vec![];
        for (k, h) in &holds {
            let Some(p) = by_id.get(&k.target) else { continue };
            gil_holds.push((series_labels(p, k, false, &[]), *h));
        }
        let mut gil_seconds = vec![];
        for ((k, holder), ns) in &gil {
            let Some(p) = by_id.get(&k.target) else { continue };
            gil_seconds.push((series_labels(p, k, false, &[("holder", holder)]), secs(*ns)));
        }
        let mut runqueue_seconds = vec![];
        for ((k, preemptor), ns) in &runqueue {
            let Some(p) = by_id.get(&k.target) else { continue };
            runqueue_seconds.push((series_labels(p, k, false, &[("preemptor", preemptor)]), secs(*ns)));
        }
        for ((k, waker), ns) in &futex {
            let Some(p) = by_id.get(&k.target) else { continue };
            futex_seconds.push((series_labels(p, k, false, &[("waker", waker)]), secs(*ns)));
        }
        let word_labels = |target: u64, futex: &str| {
            let p = by_id.get(&target)?;
            Some(vec![("pid".to_string(), p.pid.to_string()), ("futex".to_string(), futex.to_string())])
        };
        let futex_word_seconds = words.seconds.iter().filter_map(|(t, f, v)| Some((word_labels(*t, f)?, *v))).collect();
        let futex_word_waiters = words.waiters.iter().filter_map(|(t, f, v)| Some((word_labels(*t, f)?, *v))).collect();
        let cpu_limit =
            procs.iter().filter(|p| p.alive).map(|p| (vec![("pid".to_string(), p.pid.to_string())], p.cpu_limit_cores)).collect();
        let cg = |c: &CgroupInfo| vec![("cgroup".to_string(), c.path.clone())];
        let cgroup_throttled = cgroups.iter().map(|c| (cg(c), c.stat.throttled_ns as f64 / 1e9)).collect();
        let cgroup_throttled_periods = cgroups.iter().map(|c| (cg(c), c.stat.nr_throttled as f64)).collect();
        let cgroup_periods = cgroups.iter().map(|c| (cg(c), c.stat.nr_periods as f64)).collect();
        let cgroup_quota = cgroups.iter().filter_map(|c| Some((cg(c), c.quota_cores?))).collect();
        let mut wait_ratio = vec![];
        for (k, t) in &series {
            let Some(p) = by_id.get(&k.target) else { continue };
            let window = match self.previous.get(k) {
                Some(prev) => t.since(prev),
                None => *t,
            };
            if let Some(r) = window.wait_ratio() {
                wait_ratio.push((series_labels(p, k, false, &[]), r));
            }
        }
        self.previous = series.clone();
        let mut app_age = vec![];
        if let Some((pid, age)) = ages.process {
            app_age.push((vec![("pid".to_string(), pid.to_string())], age));
        }
        for (pid, tid, age) in &ages.threads {
            let Some(p) = procs.iter().find(|p| p.pid == *pid) else { continue };
            let thread = self.tid_labels_by_target.get(&(p.id, *tid)).cloned().unwrap_or_else(|| "unknown".to_string());
            app_age.push((vec![("pid".to_string(), pid.to_string()), ("thread".to_string(), thread)], *age));
        }
        let age_errors = match &ages.errors {
            Some(e) => vec![
                (vec![("source".to_string(), "endpoint".to_string())], e.endpoint as f64),
                (vec![("source".to_string(), "client".to_string())], e.client as f64),
            ],
            None => vec![],
        };
        let by_reason = |counts: &[(&'static str, u64)]| -> Vec<(Labels, f64)> {
            counts.iter().map(|(r, n)| (vec![("reason".to_string(), r.to_string())], *n as f64)).collect()
        };
        let age_scrape_errors = ages.errors.as_ref().map_or(vec![], |e| by_reason(&e.scrape));
        let age_client_rejected = ages.errors.as_ref().map_or(vec![], |e| by_reason(&e.rejected));
        let mut thread_seconds = vec![];
        for (k, t) in &series {
            let Some(p) = by_id.get(&k.target) else { continue };
            for st in State::ALL {
                thread_seconds.push((series_labels(p, k, true, &[("state", st.name())]), secs(t.get(st))));
            }
        }
        let live_threads: usize = snap.live.values().map(Vec::len).sum();
        let attached = status
            .expected
            .iter()
            .map(|p| {
                let on = status.attached.iter().any(|a| a == p);
                (vec![("probe".to_string(), p.to_string()), ("variant".to_string(), status.variant.to_string())], on as i64)
            })
            .collect();
        let lost = status
            .lost
            .iter()
            .map(|(probe, reason, n)| {
                (vec![("probe".to_string(), probe.to_string()), ("reason".to_string(), reason.to_string())], *n as f64)
            })
            .collect();
        let http_requests = status.http_codes.iter().map(|(c, n)| (vec![("code".to_string(), c.to_string())], *n as f64)).collect();
        let http_dropped = status.http_drops.iter().map(|(r, n)| (vec![("reason".to_string(), r.to_string())], *n as f64)).collect();
        let exposition = Exposition {
            thread_seconds,
            gil_seconds,
            gil_holds,
            runqueue_seconds,
            futex_seconds,
            futex_word_seconds,
            futex_word_waiters,
            cgroup_throttled,
            cgroup_throttled_periods,
            cgroup_periods,
            cgroup_quota,
            cpu_limit,
            wait_ratio,
            app_age,
            age_scrape_errors,
            age_errors,
            age_client_rejected,
            watched_processes: procs.iter().filter(|p| p.alive).count() as i64,
            watched_threads: live_threads as i64,
            lost,
            attached,
            http_requests,
            http_dropped,
        };
        let mut registry = Registry::default();
        registry.register_collector(Box::new(exposition));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encoding to a String cannot fail");
        out
    }
}

/// `pid`, `comm` (if asked), `thread`, then `extra`, then `tid` when TID labels are on.
fn series_labels(p: &ProcessInfo, k: &SeriesKey, comm: bool, extra: &[(&str, &str)]) -> Labels {
    let mut labels = vec![("pid".to_string(), p.pid.to_string())];
    if comm {
        labels.push(("comm".to_string(), p.comm.clone()));
    }
    labels.push(("thread".to_string(), k.thread.clone()));
    labels.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    if let Some(tid) = k.tid {
        labels.push(("tid".to_string(), tid.to_string()));
    }
    labels
}

/// The classic Prometheus text format (0.0.4) from the OpenMetrics text the
/// encoder writes, for clients that do not ask for OpenMetrics (curl, promtool,
/// older scrapers): counter families are named with their `_total` suffix,
/// and the `# UNIT` and `# EOF` lines, which 0.0.4 does not have, are dropped.
pub fn to_text_004(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].into_iter().find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) { format!("{name}_total") } else { name.to_string() };
                out.push_str(&format!("{prefix}{name} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

type Labels = Vec<(String, String)>;

#[derive(Debug)]
struct Exposition {
    thread_seconds: Vec<(Labels, f64)>,
    gil_seconds: Vec<(Labels, f64)>,
    gil_holds: Vec<(Labels, HoldHist)>,
    runqueue_seconds: Vec<(Labels, f64)>,
    futex_seconds: Vec<(Labels, f64)>,
    futex_word_seconds: Vec<(Labels, f64)>,
    futex_word_waiters: Vec<(Labels, i64)>,
    cgroup_throttled: Vec<(Labels, f64)>,
    cgroup_throttled_periods: Vec<(Labels, f64)>,
    cgroup_periods: Vec<(Labels, f64)>,
    cgroup_quota: Vec<(Labels, f64)>,
    cpu_limit: Vec<(Labels, f64)>,
    wait_ratio: Vec<(Labels, f64)>,
    app_age: Vec<(Labels, f64)>,
    age_scrape_errors: Vec<(Labels, f64)>,
    age_errors: Vec<(Labels, f64)>,
    age_client_rejected: Vec<(Labels, f64)>,
    watched_processes: i64,
    watched_threads: i64,
    lost: Vec<(Labels, f64)>,
    attached: Vec<(Labels, i64)>,
    http_requests: Vec<(Labels, f64)>,
    http_dropped: Vec<(Labels, f64)>,
}

fn descriptor<'a>(
    enc: &'a mut DescriptorEncoder,
    m: &'a Metric,
    unit: &'a Option<Unit>,
) -> Result<prometheus_client::encoding::MetricEncoder<'a>, std::fmt::Error> {
    let ty = match m.kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
        Kind::Histogram => MetricType::Histogram,
    };
    enc.encode_descriptor(m.base, m.help, unit.as_ref(), ty)
}

fn unit_of(m: &Metric) -> Option<Unit> {
    match m.unit {
        Some("seconds") => Some(Unit::Seconds),
        Some(other) => Some(Unit::Other(other.to_string())),
        None => None,
    }
}

fn counters(enc: &mut DescriptorEncoder, m: &Metric, series: &[(Labels, f64)]) -> Result<(), std::fmt::Error> {
    let u = unit_of(m);
    let mut me = descriptor(enc, m, &u)?;
    for (labels, v) in series {
        ConstCounter::new(*v).encode(me.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauges<N>(enc: &mut DescriptorEncoder, m: &Metric, series: &[(Labels, N)]) -> Result<(), std::fmt::Error>
where
    N: prometheus_client::encoding::EncodeGaugeValue + Copy + std::fmt::Debug,
{
    let u = unit_of(m);
    let mut me = descriptor(enc, m, &u)?;
    for (labels, v) in series {
        ConstGauge::new(*v).encode(me.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        counters(&mut enc, &catalogue::THREAD_SECONDS, &self.thread_seconds)?;
        counters(&mut enc, &catalogue::GIL_WAIT_SECONDS, &self.gil_seconds)?;
        let m = &catalogue::GIL_HOLD_SECONDS;
        let u = unit_of(m);
        let mut me = descriptor(&mut enc, m, &u)?;
        for (labels, h) in &self.gil_holds {
            me.encode_family(labels)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                secs(h.sum_ns),
                h.count,
                &h.prometheus_buckets(),
                None,
            )?;
        }
        counters(&mut enc, &catalogue::RUNQUEUE_WAIT_SECONDS, &self.runqueue_seconds)?;
        counters(&mut enc, &catalogue::FUTEX_WAIT_SECONDS, &self.futex_seconds)?;
        counters(&mut enc, &catalogue::FUTEX_WORD_WAIT_SECONDS, &self.futex_word_seconds)?;
        gauges(&mut enc, &catalogue::FUTEX_WORD_WAITERS, &self.futex_word_waiters)?;
        counters(&mut enc, &catalogue::CGROUP_THROTTLED_SECONDS, &self.cgroup_throttled)?;
        counters(&mut enc, &catalogue::CGROUP_THROTTLED_PERIODS, &self.cgroup_throttled_periods)?;
        counters(&mut enc, &catalogue::CGROUP_PERIODS, &self.cgroup_periods)?;
        gauges(&mut enc, &catalogue::CGROUP_QUOTA_CORES, &self.cgroup_quota)?;
        gauges(&mut enc, &catalogue::PROCESS_CPU_LIMIT_CORES, &self.cpu_limit)?;
        gauges(&mut enc, &catalogue::APP_AGE_SECONDS, &self.app_age)?;
        counters(&mut enc, &catalogue::AGE_SCRAPE_ERRORS, &self.age_scrape_errors)?;
        gauges(&mut enc, &catalogue::THREAD_WAIT_RATIO, &self.wait_ratio)?;
        counters(&mut enc, &catalogue::AGE_SOURCE_ERRORS, &self.age_errors)?;
        counters(&mut enc, &catalogue::AGE_CLIENT_REJECTED, &self.age_client_rejected)?;
        counters(&mut enc, &catalogue::HTTP_REQUESTS, &self.http_requests)?;
        counters(&mut enc, &catalogue::HTTP_CONNECTIONS_DROPPED, &self.http_dropped)?;
        for (m, v) in [(&catalogue::WATCHED_PROCESSES, self.watched_processes), (&catalogue::WATCHED_THREADS, self.watched_threads)] {
            let u = unit_of(m);
            ConstGauge::new(v).encode(descriptor(&mut enc, m, &u)?)?;
        }
        counters(&mut enc, &catalogue::EVENTS_LOST, &self.lost)?;
        gauges(&mut enc, &catalogue::PROBE_ATTACHED, &self.attached)?;
        let version = vec![("version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
        gauges(&mut enc, &catalogue::BUILD_INFO, &[(version, 1)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tid: u32, comm: &str, start: u64, running: u64, exited: bool) -> ThreadSample {
        let mut t = Times::default();
        t.0[State::Running.index()] = running;
        ThreadSample {
            tid,
            host_tid: tid + 1000,
            pid: 10,
            comm: comm.into(),
            py_name: None,
            start_ns: start,
            at_ns: start + running,
            exited,
            times: t,
            gil_by_holder: Default::default(),
            gil_hold: None,
            futex: vec![],
            runqueue_by: Default::default(),
        }
    }

    fn value(text: &str, thread: &str, state: &str) -> Option<f64> {
        text.lines()
            .find(|l| {
                l.starts_with("waitmeter_thread_seconds_total{")
                    && l.contains(&format!("thread=\"{thread}\""))
                    && l.contains(&format!("state=\"{state}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    #[test]
    fn same_named_threads_sum_and_exits_stay_counted() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0 }];
        let status = AgentStatus {
            attached: vec!["sched_switch".into()],
            expected: vec!["sched_switch", "sched_wakeup"],
            variant: "tp_btf",
            lost: vec![("sched", "thread_map_full", 3)],
            http_codes: vec![(200, 7), (401, 2)],
            http_drops: vec![("head_timeout", 64), ("evicted", 0)],
        };
        let mut e = Exporter::new(1, false);
        let mut snap = Snapshot::default();
        snap.live.insert(
            1,
            vec![
                sample(1, "worker", 0, 2_000_000_000, false),
                sample(2, "worker", 0, 1_000_000_000, false),
                sample(3, "io\"er", 0, 500_000_000, false),
            ],
        );
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &status);
        assert_eq!(value(&text, "worker", "running"), Some(3.0), "{text}");
        // beyond the bound of 1 distinct name per process: "other"
        assert_eq!(value(&text, "other", "running"), Some(0.5), "{text}");
        assert!(text.contains("waitmeter_bpf_events_lost_total{probe=\"sched\",reason=\"thread_map_full\"} 3"), "{text}");
        assert!(text.contains("waitmeter_probe_attached{probe=\"sched_wakeup\",variant=\"tp_btf\"} 0"), "{text}");
        assert!(text.contains("waitmeter_build_info{version="), "{text}");
        assert!(text.contains("waitmeter_http_requests_total{code=\"401\"} 2"), "{text}");
        assert!(text.contains("waitmeter_http_connections_dropped_total{reason=\"head_timeout\"} 64"), "{text}");
        assert!(text.contains("# TYPE waitmeter_thread_seconds counter"), "{text}");

        // thread 2 exits: its time stays in the "worker" series
        let mut exits = BTreeMap::new();
        exits.insert(1, vec![sample(2, "worker", 0, 1_200_000_000, true)]);
        e.fold_exits(&exits);
        snap.live.insert(1, vec![sample(1, "worker", 0, 2_500_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &status);
        assert_eq!(value(&text, "worker", "running"), Some(3.7), "{text}");
        e.forget(&[1]);
        let text = e.render(&[], &[], &AgeExport::default(), &Snapshot::default(), &status);
        assert_eq!(value(&text, "worker", "running"), None);
    }

    #[test]
    fn classic_text_format_names_counter_families_with_total() {
        let om = "# HELP x_seconds Time.\n# TYPE x_seconds counter\n# UNIT x_seconds seconds\nx_seconds_total{a=\"b\"} 1.5\n# HELP g A gauge.\n# TYPE g gauge\ng 3\n# EOF\n";
        assert_eq!(
            to_text_004(om),
            "# HELP x_seconds_total Time.\n# TYPE x_seconds_total counter\nx_seconds_total{a=\"b\"} 1.5\n# HELP g A gauge.\n# TYPE g gauge\ng 3\n"
        );
    }

    #[test]
    fn gil_wait_is_labelled_with_the_holder_name() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0 }];
        let mut e = Exporter::new(20, false);
        let mut victim = sample(1, "ingest", 0, 100_000_000, false);
        victim.gil_by_holder.insert(2, 900_000_000);
        victim.gil_by_holder.insert(0, 50_000_000);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![victim, sample(2, "processor", 0, 1_000_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert!(text.contains("waitmeter_gil_wait_seconds_total{pid=\"10\",thread=\"ingest\",holder=\"processor\"} 0.9"), "{text}");
        assert!(text.contains("waitmeter_gil_wait_seconds_total{pid=\"10\",thread=\"ingest\",holder=\"unknown\"} 0.05"), "{text}");
    }

    #[test]
    fn runqueue_wait_is_labelled_with_the_preemptor() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0 }];
        let mut e = Exporter::new(2, false);
        let mut victim = sample(1, "ingest", 0, 100_000_000, false);
        victim.runqueue_by.insert(Preemptor::Thread(2), 300_000_000);
        victim.runqueue_by.insert(Preemptor::Idle, 1_000_000);
        victim.runqueue_by.insert(Preemptor::Process { pid: 99, comm: "hog\n".into() }, 500_000_000);
        victim.runqueue_by.insert(Preemptor::Process { pid: 98, comm: "a".into() }, 1_000_000);
        victim.runqueue_by.insert(Preemptor::Process { pid: 97, comm: "b".into() }, 2_000_000);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![victim, sample(2, "spin", 0, 1_000_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        for line in [
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"spin\"} 0.3",
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"idle\"} 0.001",
            // two preempting processes keep their names (the bound is 2), the third is "other"
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"process:a\"} 0.001",
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"process:b\"} 0.002",
            "waitmeter_runqueue_wait_seconds_total{pid=\"10\",thread=\"ingest\",preemptor=\"other\"} 0.5",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
    }

    #[test]
    fn tid_labels_are_opt_in() {
        let procs = [ProcessInfo { id: 1, pid: 10, comm: "svc".into(), alive: true, cpu_limit_cores: 2.0 }];
        let mut e = Exporter::new(20, true);
        let mut snap = Snapshot::default();
        snap.live.insert(1, vec![sample(1, "w", 0, 1_000_000_000, false), sample(2, "w", 0, 1_000_000_000, false)]);
        let text = e.render(&procs, &[], &AgeExport::default(), &snap, &AgentStatus::default());
        assert!(text.contains("tid=\"1\"") && text.contains("tid=\"2\""), "{text}");
    }

    #[test]
    fn age_errors_by_source_and_by_reason() {
        let errors = crate::age::sources::AgeErrors {
            endpoint: 3,
            client: 1,
            scrape: vec![("connect", 0), ("timeout", 3), ("bad_line", 7)],
            rejected: vec![("malformed", 1), ("wrong_pid", 4)],
        };
        let ages = AgeExport { process: Some((10, 2.5)), threads: vec![], errors: Some(errors) };
        let text = Exporter::new(20, false).render(&[], &[], &ages, &Snapshot::default(), &AgentStatus::default());
        for line in [
            "waitmeter_age_scrape_errors_total{reason=\"connect\"} 0.0",
            "waitmeter_age_scrape_errors_total{reason=\"timeout\"} 3.0",
            "waitmeter_age_scrape_errors_total{reason=\"bad_line\"} 7.0",
            "waitmeter_age_source_errors_total{source=\"endpoint\"} 3.0",
            "waitmeter_age_source_errors_total{source=\"client\"} 1.0",
            "waitmeter_age_client_rejected_total{reason=\"malformed\"} 1.0",
            "waitmeter_age_client_rejected_total{reason=\"wrong_pid\"} 4.0",
            "waitmeter_app_age_seconds{pid=\"10\"} 2.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // no age source: no age series
        let text = Exporter::new(20, false).render(&[], &[], &AgeExport::default(), &Snapshot::default(), &AgentStatus::default());
        assert!(!text.contains("waitmeter_age_scrape_errors_total{"), "{text}");
        assert!(!text.contains("waitmeter_age_client_rejected_total{"), "{text}");
    }
}
