//! The Prometheus exposition of one scrape, encoded by the official
//! `prometheus-client` crate from the labelled series `prometheus.rs` builds,
//! in OpenMetrics text or the classic 0.0.4 text.
//!
//! Constant series through one `Collector`, not the crate's stateful families: every value is
//! computed afresh at each scrape from the state `prometheus.rs` keeps (label budgets, baselines,
//! folded exits), which the families would hold a second time. The label names are the
//! catalogue's (`tests/test_prometheus.py` checks a scrape's against `docs/metrics.md`).
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::catalogue::{self, Kind, Metric};
use crate::model::hist::HoldHist;
use crate::model::partition::secs;
use crate::model::stacks::Lengths;
use crate::model::stretches::Hist;

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

pub type Labels = Vec<(String, String)>;

/// Every series of one scrape, labelled; encoded in the catalogue's order.
#[derive(Debug)]
pub struct Exposition {
    pub thread_seconds: Vec<(Labels, f64)>,
    pub gil_seconds: Vec<(Labels, f64)>,
    pub gil_holds: Vec<(Labels, HoldHist)>,
    pub gil_function_holds: Vec<(Labels, Lengths)>,
    pub runqueue_seconds: Vec<(Labels, f64)>,
    pub futex_seconds: Vec<(Labels, f64)>,
    pub futex_word_seconds: Vec<(Labels, f64)>,
    pub futex_word_waiters: Vec<(Labels, i64)>,
    pub woken_by_process: Vec<(Labels, f64)>,
    pub each_other_ratio: Vec<(Labels, f64)>,
    pub cgroup_throttled: Vec<(Labels, f64)>,
    pub cgroup_throttled_periods: Vec<(Labels, f64)>,
    pub cgroup_periods: Vec<(Labels, f64)>,
    pub cgroup_quota: Vec<(Labels, f64)>,
    pub cpu_limit: Vec<(Labels, f64)>,
    pub wait_ratio: Vec<(Labels, f64)>,
    pub process_syscalls: Vec<(Labels, f64)>,
    pub app_age: Vec<(Labels, f64)>,
    pub thread_stretches: Vec<(Labels, Hist)>,
    pub age_scrape_errors: Vec<(Labels, f64)>,
    pub age_errors: Vec<(Labels, f64)>,
    pub age_client_rejected: Vec<(Labels, f64)>,
    pub watched_processes: i64,
    pub watched_threads: i64,
    pub lost: Vec<(Labels, f64)>,
    pub attached: Vec<(Labels, i64)>,
    pub kernel_features: Vec<(Labels, i64)>,
    pub map_entries: Vec<(Labels, i64)>,
    pub http_requests: Vec<(Labels, f64)>,
    pub http_dropped: Vec<(Labels, f64)>,
    pub web_config_reloads: Vec<(Labels, f64)>,
    pub profile_pushes: Vec<(Labels, f64)>,
    pub process_info: Vec<(Labels, i64)>,
    pub pod_list_fetches: Vec<(Labels, f64)>,
    pub pod_list_skipped: Option<f64>,
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

/// Histograms in seconds: `parts` gives a series' (sum ns, count, per-bucket counts by upper bound).
fn histograms<T>(
    enc: &mut DescriptorEncoder,
    m: &Metric,
    series: &[(Labels, T)],
    parts: impl Fn(&T) -> (u64, u64, Vec<(f64, u64)>),
) -> Result<(), std::fmt::Error> {
    let u = unit_of(m);
    let mut me = descriptor(enc, m, &u)?;
    for (labels, h) in series {
        let (sum_ns, count, buckets) = parts(h);
        me.encode_family(labels)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(secs(sum_ns), count, &buckets, None)?;
    }
    Ok(())
}

/// The `le` bounds of `waitmeter_thread_stretch_seconds`, ms: 1 ms to 16.384 s, each a
/// boundary of the probe's buckets (octaves of its unit fall on 2^k ms).
pub const STRETCH_LE_MS: [u64; 15] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/// A stretch histogram's Prometheus buckets: (upper bound in seconds, count in that bucket; not
/// cumulative), then +Inf. Counted from the probe's buckets (a stretch of exactly 2^k ms is
/// counted above `le` 2^k ms: the probe's buckets hold their lower bound), so `_count` is their
/// sum whatever the count field says (a reading taken while the thread was recording one).
pub fn stretch_buckets(h: &Hist) -> Vec<(f64, u64)> {
    let mut h = h.clone();
    h.count = h.buckets.iter().map(|b| u64::from(*b)).sum();
    let le_ns: Vec<u64> = STRETCH_LE_MS.iter().map(|ms| ms * 1_000_000).collect();
    let mut out = Vec::with_capacity(STRETCH_LE_MS.len() + 1);
    let mut below = 0u64;
    for (ms, cumulative) in STRETCH_LE_MS.iter().zip(h.cumulative(&le_ns)) {
        // exact: every bound is a bucket's lower bound
        let c = cumulative.round() as u64;
        out.push((*ms as f64 / 1e3, c.saturating_sub(below)));
        below = below.max(c);
    }
    out.push((f64::INFINITY, h.count.saturating_sub(below)));
    out
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        counters(&mut enc, &catalogue::THREAD_SECONDS, &self.thread_seconds)?;
        counters(&mut enc, &catalogue::GIL_WAIT_SECONDS, &self.gil_seconds)?;
        histograms(&mut enc, &catalogue::GIL_HOLD_SECONDS, &self.gil_holds, |h| (h.sum_ns, h.count, h.prometheus_buckets()))?;
        histograms(&mut enc, &catalogue::GIL_FUNCTION_HOLD_SECONDS, &self.gil_function_holds, |l| {
            (l.sum_ns, l.buckets.iter().sum(), l.prometheus_buckets())
        })?;
        counters(&mut enc, &catalogue::RUNQUEUE_WAIT_SECONDS, &self.runqueue_seconds)?;
        counters(&mut enc, &catalogue::FUTEX_WAIT_SECONDS, &self.futex_seconds)?;
        counters(&mut enc, &catalogue::FUTEX_WORD_WAIT_SECONDS, &self.futex_word_seconds)?;
        gauges(&mut enc, &catalogue::FUTEX_WORD_WAITERS, &self.futex_word_waiters)?;
        counters(&mut enc, &catalogue::WOKEN_BY_PROCESS_SECONDS, &self.woken_by_process)?;
        gauges(&mut enc, &catalogue::PROCESS_WAIT_ON_EACH_OTHER_RATIO, &self.each_other_ratio)?;
        counters(&mut enc, &catalogue::CGROUP_THROTTLED_SECONDS, &self.cgroup_throttled)?;
        counters(&mut enc, &catalogue::CGROUP_THROTTLED_PERIODS, &self.cgroup_throttled_periods)?;
        counters(&mut enc, &catalogue::CGROUP_PERIODS, &self.cgroup_periods)?;
        gauges(&mut enc, &catalogue::CGROUP_QUOTA_CORES, &self.cgroup_quota)?;
        gauges(&mut enc, &catalogue::PROCESS_CPU_LIMIT_CORES, &self.cpu_limit)?;
        gauges(&mut enc, &catalogue::APP_AGE_SECONDS, &self.app_age)?;
        histograms(&mut enc, &catalogue::THREAD_STRETCH_SECONDS, &self.thread_stretches, |h| {
            let buckets = stretch_buckets(h);
            (h.ns, buckets.iter().map(|b| b.1).sum(), buckets)
        })?;
        counters(&mut enc, &catalogue::AGE_SCRAPE_ERRORS, &self.age_scrape_errors)?;
        gauges(&mut enc, &catalogue::THREAD_WAIT_RATIO, &self.wait_ratio)?;
        counters(&mut enc, &catalogue::PROCESS_SYSCALLS, &self.process_syscalls)?;
        counters(&mut enc, &catalogue::AGE_SOURCE_ERRORS, &self.age_errors)?;
        counters(&mut enc, &catalogue::AGE_CLIENT_REJECTED, &self.age_client_rejected)?;
        counters(&mut enc, &catalogue::HTTP_REQUESTS, &self.http_requests)?;
        counters(&mut enc, &catalogue::HTTP_CONNECTIONS_DROPPED, &self.http_dropped)?;
        counters(&mut enc, &catalogue::WEB_CONFIG_RELOADS, &self.web_config_reloads)?;
        counters(&mut enc, &catalogue::PROFILE_PUSHES, &self.profile_pushes)?;
        gauges(&mut enc, &catalogue::PROCESS_INFO, &self.process_info)?;
        if let Some(skipped) = self.pod_list_skipped {
            counters(&mut enc, &catalogue::POD_LIST_FETCHES, &self.pod_list_fetches)?;
            let u = unit_of(&catalogue::POD_LIST_SKIPPED);
            ConstCounter::new(skipped).encode(descriptor(&mut enc, &catalogue::POD_LIST_SKIPPED, &u)?)?;
        }
        for (m, v) in [(&catalogue::WATCHED_PROCESSES, self.watched_processes), (&catalogue::WATCHED_THREADS, self.watched_threads)] {
            let u = unit_of(m);
            ConstGauge::new(v).encode(descriptor(&mut enc, m, &u)?)?;
        }
        counters(&mut enc, &catalogue::EVENTS_LOST, &self.lost)?;
        gauges(&mut enc, &catalogue::BPF_MAP_ENTRIES, &self.map_entries)?;
        gauges(&mut enc, &catalogue::PROBE_ATTACHED, &self.attached)?;
        gauges(&mut enc, &catalogue::KERNEL_FEATURE, &self.kernel_features)?;
        let version = vec![("version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
        gauges(&mut enc, &catalogue::BUILD_INFO, &[(version, 1)])
    }
}

impl Exposition {
    /// The OpenMetrics text of these series.
    pub fn encode(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encoding to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_format_names_counter_families_with_total() {
        let om = "# HELP x_seconds Time.\n# TYPE x_seconds counter\n# UNIT x_seconds seconds\nx_seconds_total{a=\"b\"} 1.5\n# HELP g A gauge.\n# TYPE g gauge\ng 3\n# EOF\n";
        assert_eq!(
            to_text_004(om),
            "# HELP x_seconds_total Time.\n# TYPE x_seconds_total counter\nx_seconds_total{a=\"b\"} 1.5\n# HELP g A gauge.\n# TYPE g gauge\ng 3\n"
        );
    }
}
