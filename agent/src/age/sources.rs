//! The age sources of a command, polled from its loop: the endpoint scraper
//! and the client socket, with their samples kept per process and thread.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use anyhow::Result;

use super::scrape::{self, AgeScraper};
use super::socket::AgeSocket;
use crate::cli::AgeArgs;
use crate::model::age::{summarize, AgeSample, AgeSummary};
use crate::report::AgeReport;

/// Samples kept per series (an hour at one a second).
const KEEP: usize = 3600;
const SCRAPE_EVERY_NS: u64 = 1_000_000_000;

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
                let s = AgeScraper::new(url, metric, args.age_labels.clone().unwrap_or_default())
                    .map_err(|e| crate::usage!("bad --age-url {url}: {e:#}"))?;
                let s = Arc::new(Mutex::new(s));
                let poller = Arc::clone(&s);
                std::thread::Builder::new().name("age-scrape".into()).spawn(move || loop {
                    let (url, metric, labels) = {
                        let g = poller.lock().expect("age scraper lock");
                        (g.url.clone(), g.metric.clone(), g.labels.clone())
                    };
                    let started = crate::probes::sched::monotonic_ns();
                    let got = scrape::fetch(&url, &metric, &labels);
                    let now = crate::probes::sched::monotonic_ns();
                    poller.lock().expect("age scraper lock").record(now, got);
                    // once a second, or right away when the endpoint took longer than that
                    let next = started + SCRAPE_EVERY_NS;
                    if now < next {
                        std::thread::sleep(std::time::Duration::from_nanos(next - now));
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
            return Some(AgeReport { source: "endpoint", summary, p50_s, p99_s });
        }
        let mut all: Vec<AgeSample> =
            self.client.iter().filter(|((p, _), _)| *p == pid).flat_map(|(_, q)| q.iter().filter(|x| x.at_ns >= t0).copied()).collect();
        all.sort_by_key(|s| s.at_ns);
        Some(AgeReport { source: "client", summary: summarize(&all)?, p50_s: None, p99_s: None })
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
    pub fn errors(&self) -> (u64, u64) {
        (self.scraper.as_ref().map_or(0, |s| s.lock().expect("age scraper lock").errors), self.socket.as_ref().map_or(0, |s| s.malformed))
    }
}
