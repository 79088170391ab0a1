//! The age sources of a command, polled from its loop: the endpoint scraper
//! and the client socket, with their samples kept per process and thread.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;

use super::scrape::{self, AgeScraper, Reason};
use super::senders::{Proc, Senders};
use super::socket::{AgeSocket, Received, Rejected};
use super::AgeConfig;
use crate::model::age::{summarize, AgeReport, AgeSample, AgeSummary};

/// Samples kept per series (an hour at one a second).
const KEEP: usize = 3600;
/// Threads whose client samples are kept at once unless `--age-max-threads`
/// says otherwise: a record of one thread more is dropped and counted
/// (`state_full`), unless an exited thread makes room.
pub const DEFAULT_MAX_CLIENT_THREADS: usize = 4096;
/// How long the samples of a thread that has exited are kept, for the report
/// of a window it was part of (`attach`); the gauge drops it at once.
const EXITED_KEEP_NS: u64 = 300 * 1_000_000_000;
/// How often the threads of the client samples are looked up in /proc.
const PRUNE_EVERY_NS: u64 = 1_000_000_000;

pub use crate::model::age::AgeErrors;

/// One thread's client samples.
#[derive(Debug, Default)]
struct ClientSeries {
    samples: VecDeque<AgeSample>,
    /// when the thread was first found gone
    exited_ns: Option<u64>,
}

/// The client samples by (pid, tid) of the agent's namespace, for at most
/// `max` threads; threads that exited are forgotten.
#[derive(Debug, Default)]
struct ClientAges {
    max: usize,
    series: HashMap<(u32, u32), ClientSeries>,
    /// threads found gone, in that order (entries of threads seen again since are stale)
    exited: VecDeque<(u64, (u32, u32))>,
}

impl ClientAges {
    fn add(&mut self, pid: u32, tid: u32, sample: AgeSample) -> Result<(), Rejected> {
        if !self.series.contains_key(&(pid, tid)) && self.series.len() >= self.max {
            self.evict_exited()?;
        }
        let s = self.series.entry((pid, tid)).or_default();
        s.exited_ns = None;
        s.samples.push_back(sample);
        if s.samples.len() > KEEP {
            s.samples.pop_front();
        }
        Ok(())
    }

    /// Forget the thread that exited first, to make room.
    fn evict_exited(&mut self) -> Result<(), Rejected> {
        while let Some((at, key)) = self.exited.pop_front() {
            if self.series.get(&key).is_some_and(|s| s.exited_ns == Some(at)) {
                self.series.remove(&key);
                return Ok(());
            }
        }
        Err(Rejected::StateFull)
    }

    /// Note the threads that are gone (`tasks`: a process' live TIDs), and
    /// forget those gone for longer than `EXITED_KEEP_NS`.
    fn prune(&mut self, now_ns: u64, tasks: impl Fn(u32) -> Vec<u32>) {
        let pids: HashSet<u32> = self.series.keys().map(|(p, _)| *p).collect();
        let live: HashMap<u32, HashSet<u32>> = pids.into_iter().map(|p| (p, tasks(p).into_iter().collect())).collect();
        let mut newly = vec![];
        for (key, s) in self.series.iter_mut() {
            if live[&key.0].contains(&key.1) {
                s.exited_ns = None;
            } else if s.exited_ns.is_none() {
                s.exited_ns = Some(now_ns);
                newly.push(*key);
            }
        }
        newly.sort_unstable();
        self.exited.extend(newly.into_iter().map(|k| (now_ns, k)));
        self.series.retain(|_, s| s.exited_ns.is_none_or(|at| now_ns.saturating_sub(at) < EXITED_KEEP_NS));
        self.exited.retain(|(at, k)| self.series.get(k).is_some_and(|s| s.exited_ns == Some(*at)));
    }
}

/// The endpoint is polled from a thread of its own: an application starved
/// of its GIL serves its own /metrics slowly, and the agent's loop must not wait.
#[derive(Default)]
pub struct AgeSources {
    scraper: Option<Arc<Mutex<AgeScraper>>>,
    socket: Option<AgeSocket>,
    senders: Senders,
    client: ClientAges,
    /// client records not taken, by `Rejected::index`
    rejected: [u64; Rejected::ALL.len()],
    next_prune_ns: u64,
}

impl AgeSources {
    pub fn new(cfg: &AgeConfig) -> Result<AgeSources> {
        let scraper = match &cfg.endpoint {
            Some(e) => {
                let (url, interval) = (&e.url, e.interval);
                let s = AgeScraper::new(url, &e.metric, e.labels.clone(), interval, e.timeout)
                    .map_err(|e| crate::error::usage!("bad --age-url {url}: {e:#}"))?;
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
            None => None,
        };
        let socket = cfg.socket.as_ref().map(AgeSocket::bind).transpose()?;
        let client = ClientAges { max: cfg.socket.as_ref().map_or(0, |s| s.max_threads), ..Default::default() };
        Ok(AgeSources { scraper, socket, client, ..Default::default() })
    }

    pub fn any(&self) -> bool {
        self.scraper.is_some() || self.socket.is_some()
    }

    /// Drain the socket (the endpoint is polled by its own thread): keep the
    /// records whose sender may speak of their thread, count the others; and
    /// every second, let go of the threads that have exited.
    pub fn poll(&mut self, now_ns: u64) {
        let Some(sock) = &mut self.socket else { return };
        self.senders.next_batch();
        for got in sock.drain() {
            let (why, record) = match got {
                Err(why) => (why, None),
                Ok(r) => {
                    let taken = self
                        .senders
                        .resolve(&Proc, r.sender, r.record.pid, r.record.tid, now_ns)
                        .and_then(|(pid, tid)| self.client.add(pid, tid, AgeSample { at_ns: now_ns, age_s: r.record.age_s }));
                    match taken {
                        Ok(()) => continue,
                        Err(why) => (why, Some(r)),
                    }
                }
            };
            self.reject(why, record);
        }
        if now_ns >= self.next_prune_ns {
            self.next_prune_ns = now_ns + PRUNE_EVERY_NS;
            self.client.prune(now_ns, crate::procfs::tasks);
        }
    }

    /// Count a record not taken; the first of each reason is also a warning.
    fn reject(&mut self, why: Rejected, record: Option<Received>) {
        let n = &mut self.rejected[why.index()];
        if *n == 0 {
            let from = match record {
                Some(r) => format!(": PID {} sent it for PID {} thread {}", r.sender, r.record.pid, r.record.tid),
                None => String::new(),
            };
            log::warn!(
                "an age record on the client socket was not taken ({}{from}); such records are counted in \
                 waitmeter_age_client_rejected_total (docs/age.md)",
                explain(why)
            );
        }
        *n += 1;
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
                    scrape::histogram_quantile(s.window_start.as_ref(), last, 0.5).and_then(super::sane),
                    scrape::histogram_quantile(s.window_start.as_ref(), last, 0.99).and_then(super::sane),
                ),
                None => (None, None),
            };
            let (skipped_lines, failed_polls) = (Some(s.count(Reason::BadLine)), Some(s.errors));
            return Some(AgeReport { source: "endpoint", summary, p50_s, p99_s, skipped_lines, failed_polls });
        }
        let mut all: Vec<AgeSample> = self
            .client
            .series
            .iter()
            .filter(|((p, _), _)| *p == pid)
            .flat_map(|(_, s)| s.samples.iter().filter(|x| x.at_ns >= t0).copied())
            .collect();
        all.sort_by_key(|s| s.at_ns);
        Some(AgeReport { source: "client", summary: summarize(&all)?, p50_s: None, p99_s: None, skipped_lines: None, failed_polls: None })
    }

    /// One thread's age over the window from `t0` (client samples).
    pub fn thread(&self, pid: u32, tid: u32, t0: u64) -> Option<AgeSummary> {
        let s = self.client.series.get(&(pid, tid))?;
        let v: Vec<AgeSample> = s.samples.iter().filter(|x| x.at_ns >= t0).copied().collect();
        summarize(&v)
    }

    /// Latest age of a process (endpoint) for the gauge.
    pub fn latest_process(&self) -> Option<f64> {
        self.scraper.as_ref()?.lock().expect("age scraper lock").samples.last().map(|s| s.age_s)
    }

    /// Latest client age per (pid, tid) of the live threads.
    pub fn latest_threads(&self) -> Vec<(u32, u32, f64)> {
        self.client
            .series
            .iter()
            .filter(|(_, s)| s.exited_ns.is_none())
            .filter_map(|((p, t), s)| Some((*p, *t, s.samples.back()?.age_s)))
            .collect()
    }

    /// Errors of the endpoint, client records not taken, for the self-metrics.
    pub fn errors(&self) -> AgeErrors {
        let scraper = self.scraper.as_ref().map(|s| s.lock().expect("age scraper lock"));
        AgeErrors {
            endpoint: scraper.as_ref().map_or(0, |s| s.errors),
            client: self.rejected[Rejected::Malformed.index()],
            scrape: scraper.as_ref().map_or(vec![], |s| s.by_reason()),
            rejected: match self.socket {
                Some(_) => Rejected::ALL.iter().map(|r| (r.name(), self.rejected[r.index()])).collect(),
                None => vec![],
            },
        }
    }
}

/// What a rejection means, for the log.
fn explain(why: Rejected) -> &'static str {
    match why {
        Rejected::Malformed => "malformed: not a waitmeter_client record",
        Rejected::OutOfRange => "out_of_range: an age below 0, above a week, NaN or infinite",
        Rejected::NoCredentials => "no_credentials: the sender is not visible in the agent's PID namespace",
        Rejected::WrongPid => "wrong_pid: it claims a process other than its sender",
        Rejected::UnknownThread => "unknown_thread: its thread is not one of the sender's",
        Rejected::SenderExited => "sender_exited: its sender had exited when the agent read it",
        Rejected::StateFull => "state_full: the agent already keeps the ages of --age-max-threads threads",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ns: u64) -> AgeSample {
        AgeSample { at_ns, age_s: 0.5 }
    }

    #[test]
    fn client_state_is_bounded_and_exited_threads_make_room() {
        const MAX: usize = DEFAULT_MAX_CLIENT_THREADS;
        let mut c = ClientAges { max: MAX, ..Default::default() };
        for tid in 0..MAX as u32 {
            c.add(1, tid, sample(0)).unwrap();
        }
        // one thread more: refused; a known thread: still taken
        assert_eq!(c.add(1, 99_999, sample(1)), Err(Rejected::StateFull));
        assert_eq!(c.add(2, 1, sample(1)), Err(Rejected::StateFull));
        assert_eq!(c.add(1, 7, sample(1)), Ok(()));
        assert_eq!(c.series.len(), MAX);
        // threads 10 and 11 exit (10 found first); 12 exits and sends again (PID reuse, or late)
        let live = |gone: Vec<u32>| move |_pid: u32| (0..MAX as u32).filter(|t| !gone.contains(t)).collect::<Vec<u32>>();
        c.prune(100, live(vec![10, 12]));
        c.prune(200, live(vec![10, 11, 12]));
        assert_eq!(c.series.len(), MAX, "kept for the report of the window");
        assert_eq!(c.add(1, 12, sample(250)), Ok(()));
        assert_eq!(c.add(1, 50_000, sample(300)), Ok(()));
        assert!(!c.series.contains_key(&(1, 10)) && c.series.contains_key(&(1, 11)) && c.series.contains_key(&(1, 12)));
        assert_eq!(c.add(1, 50_001, sample(300)), Ok(()));
        assert!(!c.series.contains_key(&(1, 11)));
        assert_eq!(c.add(1, 50_002, sample(300)), Err(Rejected::StateFull));
        assert_eq!(c.series.len(), MAX);
    }

    #[test]
    fn exited_threads_are_forgotten_after_a_while() {
        let mut c = ClientAges { max: 10, ..Default::default() };
        c.add(1, 1, sample(0)).unwrap();
        c.add(1, 2, sample(0)).unwrap();
        c.add(3, 3, sample(0)).unwrap();
        // process 3 and thread 2 are gone
        let tasks = |pid: u32| if pid == 1 { vec![1] } else { vec![] };
        c.prune(10, tasks);
        assert_eq!(c.series[&(1, 2)].exited_ns, Some(10));
        assert_eq!(c.series[&(3, 3)].exited_ns, Some(10));
        assert_eq!(c.series[&(1, 1)].exited_ns, None);
        c.prune(10 + EXITED_KEEP_NS - 1, tasks);
        assert_eq!(c.series.len(), 3);
        c.prune(10 + EXITED_KEEP_NS, tasks);
        assert_eq!(c.series.keys().copied().collect::<Vec<_>>(), vec![(1, 1)]);
        assert!(c.exited.is_empty());
    }

    #[test]
    fn samples_per_thread_are_bounded() {
        let mut c = ClientAges { max: 10, ..Default::default() };
        for i in 0..(KEEP as u64 + 10) {
            c.add(1, 1, sample(i)).unwrap();
        }
        let s = &c.series[&(1, 1)].samples;
        assert_eq!(s.len(), KEEP);
        assert_eq!(s.front().unwrap().at_ns, 10);
    }
}
