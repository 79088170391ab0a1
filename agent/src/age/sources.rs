//! The age sources of a command, polled from its loop: the endpoint scraper
//! and the client socket, with their samples kept per process and thread.
use std::collections::{HashMap, VecDeque};

use anyhow::Result;

use super::scrape::{self, AgeScraper};
use super::socket::AgeSocket;
use crate::cli::AgeArgs;
use crate::model::age::{summarize, AgeSample, AgeSummary};
use crate::report::AgeReport;

/// Samples kept per series (an hour at one a second).
const KEEP: usize = 3600;
const SCRAPE_EVERY_NS: u64 = 1_000_000_000;

#[derive(Default)]
pub struct AgeSources {
    scraper: Option<AgeScraper>,
    socket: Option<AgeSocket>,
    next_scrape: u64,
    /// (pid, tid) -> client samples
    client: HashMap<(u32, u32), VecDeque<AgeSample>>,
}

impl AgeSources {
    pub fn new(args: &AgeArgs) -> Result<AgeSources> {
        let scraper = match (&args.age_url, &args.age_metric) {
            (Some(url), Some(metric)) => Some(
                AgeScraper::new(url, metric, args.age_labels.clone().unwrap_or_default())
                    .map_err(|e| crate::usage!("bad --age-url {url}: {e:#}"))?,
            ),
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

    /// Poll the endpoint (at most once a second) and drain the socket.
    pub fn poll(&mut self, now_ns: u64) {
        if let Some(s) = &mut self.scraper {
            if now_ns >= self.next_scrape {
                self.next_scrape = now_ns + SCRAPE_EVERY_NS;
                s.poll(now_ns);
                if s.samples.len() > KEEP {
                    s.samples.drain(..s.samples.len() - KEEP);
                }
            }
        }
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
        self.scraper.as_ref()?.samples.last().map(|s| s.age_s)
    }

    /// Latest client age per (pid, tid).
    pub fn latest_threads(&self) -> Vec<(u32, u32, f64)> {
        self.client.iter().filter_map(|((p, t), q)| Some((*p, *t, q.back()?.age_s))).collect()
    }

    /// Errors of the endpoint and malformed datagrams, for the self-metrics.
    pub fn errors(&self) -> (u64, u64) {
        (self.scraper.as_ref().map_or(0, |s| s.errors), self.socket.as_ref().map_or(0, |s| s.malformed))
    }
}
