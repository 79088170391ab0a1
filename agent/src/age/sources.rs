//! The age sources of a command, polled from its loop: the endpoint scraper
//! and the client socket, with their samples kept per process and thread.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::scrape::{self, AgeScraper, Reason};
use super::socket::AgeSocket;
use crate::cli::AgeArgs;
use crate::model::age::{summarize, AgeReport, AgeSample, AgeSummary};

/// Samples kept per series (an hour at one a second).
const KEEP: usize = 3600;

/// The errors of the age sources, for the self-metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgeErrors {
    /// failed polls of the endpoint
    pub endpoint: u64,
    /// malformed datagrams on the client socket
    pub client: u64,
    /// the endpoint's failed polls and skipped lines by reason, every reason
    /// (empty without --age-url)
    pub scrape: Vec<(&'static str, u64)>,
}

/// The endpoint is polled from a thread of its own: an application starved
/// of its GIL serves its own /metrics slowly, and the agent's loop must not wait.
#[derive(Default)]
pub struct AgeSources {
    scraper: Option<Arc<Mutex<AgeScraper>>>,
    socket: Option<AgeSocket>,
    /// (pid, tid) -> client samples
    client: HashMap<(u32, u32), VecDeque<AgeSample>>,
}

impl AgeSources {
    pub fn new(args: &AgeArgs) -> Result<AgeSources> {
        let scraper = match (&args.age_url, &args.age_metric) {
            (Some(url), Some(metric)) => {
                let (interval, timeout) = (Duration::from_secs_f64(args.age_interval), Duration::from_secs_f64(args.age_timeout));
                let s = AgeScraper::new(url, metric, args.age_labels.clone().unwrap_or_default(), interval, timeout)
                    .map_err(|e| crate::usage!("bad --age-url {url}: {e:#}"))?;
                let (endpoint, metric, labels, timeout) = (s.endpoint.clone(), s.metric.clone(), s.labels.clone(), s.timeout);
                let s = Arc::new(Mutex::new(s));
                let poller = Arc::clone(&s);
                std::thread::Builder::new().name("age-scrape".into()).spawn(move || loop {
                    let started = Instant::now();
                    let got = scrape::poll(&endpoint, &metric, &labels, timeout);
                    poller.lock().expect("age scraper lock").record(crate::clock::monotonic_ns(), got);
                    // every interval, or right away when the poll took longer than that
                    if let Some(rest) = interval.checked_sub(started.elapsed()) {
                        std::thread::sleep(rest);
                    }
                })?;
                Some(s)
            }
            _ => None,
        };
        let socket = match &args.age_socket {
            Some(p) => Some(AgeSocket::bind(p).map_err(|e| crate::usage!("{e:#}: pick a writable --age-socket path"))?),
            None => None,
        };
        Ok(AgeSources { scraper, socket, ..Default::default() })
    }

    pub fn any(&self) -> bool {
        self.scraper.is_some() || self.socket.is_some()
    }

    /// Drain the socket (the endpoint is polled by its own thread).
    pub fn poll(&mut self, now_ns: u64) {
        if let Some(sock) = &mut self.socket {
            for r in sock.drain() {
                let q = self.client.entry((r.pid, r.tid)).or_default();
                q.push_back(AgeSample { at_ns: now_ns, age_s: r.age_s });
                if q.len() > KEEP {
                    q.pop_front();
                }
            }
        }
    }

    /// The process' age over the window from `t0`: the endpoint's, else the
    /// client samples of all its threads.
    pub fn process(&self, pid: u32, t0: u64) -> Option<AgeReport> {
        if let Some(s) = &self.scraper {
            let s = s.lock().expect("age scraper lock");
            let samples: Vec<AgeSample> = s.samples.iter().filter(|x| x.at_ns >= t0).copied().collect();
            let summary = summarize(&samples)?;
            let (p50_s, p99_s) = match &s.last {
                Some(last) => (
                    scrape::histogram_quantile(s.window_start.as_ref(), last, 0.5),
                    scrape::histogram_quantile(s.window_start.as_ref(), last, 0.99),
                ),
                None => (None, None),
            };
            let (skipped_lines, failed_polls) = (Some(s.count(Reason::BadLine)), Some(s.errors));
            return Some(AgeReport { source: "endpoint", summary, p50_s, p99_s, skipped_lines, failed_polls });
        }
        let mut all: Vec<AgeSample> =
            self.client.iter().filter(|((p, _), _)| *p == pid).flat_map(|(_, q)| q.iter().filter(|x| x.at_ns >= t0).copied()).collect();
        all.sort_by_key(|s| s.at_ns);
        Some(AgeReport { source: "client", summary: summarize(&all)?, p50_s: None, p99_s: None, skipped_lines: None, failed_polls: None })
    }

    /// One thread's age over the window from `t0` (client samples).
    pub fn thread(&self, pid: u32, tid: u32, t0: u64) -> Option<AgeSummary> {
        let q = self.client.get(&(pid, tid))?;
        let v: Vec<AgeSample> = q.iter().filter(|x| x.at_ns >= t0).copied().collect();
        summarize(&v)
    }

    /// Latest age of a process (endpoint) for the gauge.
    pub fn latest_process(&self) -> Option<f64> {
        self.scraper.as_ref()?.lock().expect("age scraper lock").samples.last().map(|s| s.age_s)
    }

    /// Latest client age per (pid, tid).
    pub fn latest_threads(&self) -> Vec<(u32, u32, f64)> {
        self.client.iter().filter_map(|((p, t), q)| Some((*p, *t, q.back()?.age_s))).collect()
    }

    /// Errors of the endpoint and malformed datagrams, for the self-metrics.
    pub fn errors(&self) -> AgeErrors {
        let scraper = self.scraper.as_ref().map(|s| s.lock().expect("age scraper lock"));
        AgeErrors {
            endpoint: scraper.as_ref().map_or(0, |s| s.errors),
            client: self.socket.as_ref().map_or(0, |s| s.malformed),
            scrape: scraper.as_ref().map_or(vec![], |s| s.by_reason()),
        }
    }
}
