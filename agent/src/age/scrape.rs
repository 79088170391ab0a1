//! Polling one metric of the application's Prometheus endpoint (plain HTTP).
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::exposition::{self, Reading};
use crate::model::age::AgeSample;

/// Prometheus' own default scrape timeout: an application starved of its GIL
/// serves /metrics slowly.
const TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY: usize = 16 << 20;

/// `http://host:port/path` -> (host:port, path).
pub fn parse_url(url: &str) -> Result<(String, String)> {
    let rest = url.strip_prefix("http://").context("only http:// URLs are supported (put a local port-forward in front of https)")?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if hostport.is_empty() {
        bail!("no host in {url}");
    }
    let hostport = if hostport.contains(':') && !hostport.ends_with(']') { hostport.to_string() } else { format!("{hostport}:80") };
    Ok((hostport, path.to_string()))
}

/// GET the URL; the body of a 200 response.
pub fn get(url: &str) -> Result<String> {
    let (hostport, path) = parse_url(url)?;
    let addr = hostport.to_socket_addrs().with_context(|| format!("cannot resolve {hostport}"))?.next().context("no address")?;
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).with_context(|| format!("cannot connect to {hostport}"))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {hostport}\r\nAccept: text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1\r\nConnection: close\r\nUser-Agent: waitmeter\r\n\r\n"
    )?;
    let mut raw = vec![];
    s.take(MAX_BODY as u64).read_to_end(&mut raw).context("reading the response")?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").context("no HTTP header end")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("HTTP status `{status}`");
    }
    let body = &raw[split + 4..];
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked"));
    let body = if chunked { waitmeter_formats::http::dechunk(body, MAX_BODY).context("bad chunked encoding")? } else { body.to_vec() };
    String::from_utf8(body).context("the body is not UTF-8")
}

/// The age metric of one process, polled from its endpoint.
pub struct AgeScraper {
    pub url: String,
    pub metric: String,
    pub labels: BTreeMap<String, String>,
    previous: Option<Reading>,
    pub samples: Vec<AgeSample>,
    /// the histogram/summary state at the start of the window (for quantiles)
    pub window_start: Option<Reading>,
    pub last: Option<Reading>,
    last_error: Option<String>,
    pub errors: u64,
}

impl AgeScraper {
    pub fn new(url: &str, metric: &str, labels: BTreeMap<String, String>) -> Result<AgeScraper> {
        parse_url(url)?;
        Ok(AgeScraper {
            url: url.to_string(),
            metric: metric.to_string(),
            labels,
            previous: None,
            samples: vec![],
            window_start: None,
            last: None,
            last_error: None,
            errors: 0,
        })
    }

    /// Poll once, here and now.
    #[cfg(test)]
    pub fn poll(&mut self, now_ns: u64) {
        let got = fetch(&self.url, &self.metric, &self.labels);
        self.record(now_ns, got);
    }

    /// Keep a reading; an error is logged once (until it changes) and counted.
    pub fn record(&mut self, now_ns: u64, got: Result<Reading, String>) {
        match got {
            Ok(r) => {
                if self.last_error.take().is_some() {
                    log::warn!("age source {} is back", self.url);
                }
                if let Some(age) = sample_of(self.previous.as_ref(), &r) {
                    self.samples.push(AgeSample { at_ns: now_ns, age_s: age });
                }
                if self.window_start.is_none() {
                    self.window_start = Some(r.clone());
                }
                self.previous = Some(r.clone());
                self.last = Some(r);
                if self.samples.len() > 3600 {
                    self.samples.drain(..self.samples.len() - 3600);
                }
            }
            Err(e) => {
                self.errors += 1;
                if self.last_error.as_deref() != Some(e.as_str()) {
                    log::warn!("age source {} ({}): {e}; retrying every second", self.url, self.metric);
                    self.last_error = Some(e);
                }
            }
        }
    }
}

/// GET the endpoint and read the metric.
pub fn fetch(url: &str, metric: &str, labels: &BTreeMap<String, String>) -> Result<Reading, String> {
    get(url).map_err(|e| format!("{e:#}")).and_then(|body| exposition::read(&body, metric, labels).map_err(|e| e.to_string()))
}

/// The age a reading stands for: a gauge's value, a gauge histogram's mean
/// now; for a histogram or a summary the mean of the observations since the
/// previous reading.
pub fn sample_of(previous: Option<&Reading>, r: &Reading) -> Option<f64> {
    let age = match (previous, r) {
        (_, Reading::Value(v)) => Some(*v),
        (_, Reading::GaugeHistogram { sum, count, .. }) => (*count > 0.0).then(|| sum / count),
        (Some(Reading::Histogram { sum: s0, count: c0, .. }), Reading::Histogram { sum, count, .. })
        | (Some(Reading::Summary { sum: s0, count: c0, .. }), Reading::Summary { sum, count, .. }) => {
            let dc = count - c0;
            (dc > 0.0).then(|| (sum - s0) / dc)
        }
        _ => None,
    };
    age.filter(|a| a.is_finite())
}

/// Quantile `q` of a histogram's observations between two readings (of a
/// gauge histogram: now), by linear interpolation within the bucket (as
/// Prometheus' histogram_quantile). Buckets are sorted by bound.
pub fn histogram_quantile(start: Option<&Reading>, end: &Reading, q: f64) -> Option<f64> {
    let none: &[(f64, f64)] = &[];
    let (buckets, base) = match (start, end) {
        (_, Reading::GaugeHistogram { buckets, .. }) => (buckets, none),
        (Some(Reading::Histogram { buckets: b, .. }), Reading::Histogram { buckets, .. }) => (buckets, b.as_slice()),
        (_, Reading::Histogram { buckets, .. }) => (buckets, none),
        _ => return None,
    };
    // both sorted: one walk subtracts the start's count of the same bound
    let mut j = 0;
    let delta: Vec<(f64, f64)> = buckets
        .iter()
        .map(|(le, c)| {
            while j < base.len() && base[j].0 < *le {
                j += 1;
            }
            let c0 = if j < base.len() && base[j].0 == *le { base[j].1 } else { 0.0 };
            (*le, c - c0)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in &delta {
        if *c >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let width = c - prev.1;
            return Some(if width > 0.0 { prev.0 + (le - prev.0) * (rank - prev.1) / width } else { *le });
        }
        prev = (*le, *c);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse_url("http://127.0.0.1:8000/metrics").unwrap(), ("127.0.0.1:8000".into(), "/metrics".into()));
        assert_eq!(parse_url("http://app").unwrap(), ("app:80".into(), "/metrics".into()));
        assert!(parse_url("https://x/metrics").is_err());
        assert!(parse_url("ftp://x").is_err());
        assert!(parse_url("http:///x").is_err());
    }

    #[test]
    fn samples_from_each_kind() {
        assert_eq!(sample_of(None, &Reading::Value(2.0)), Some(2.0));
        assert_eq!(sample_of(None, &Reading::Value(f64::NAN)), None);
        let h0 = Reading::Histogram { sum: 10.0, count: 10.0, buckets: vec![(1.0, 10.0), (f64::INFINITY, 10.0)] };
        let h1 = Reading::Histogram { sum: 40.0, count: 20.0, buckets: vec![(1.0, 10.0), (f64::INFINITY, 20.0)] };
        assert_eq!(sample_of(None, &h1), None); // no window yet
        assert_eq!(sample_of(Some(&h0), &h1), Some(3.0));
        assert_eq!(sample_of(Some(&h1), &h1), None); // no new observations
        let s0 = Reading::Summary { sum: 1.0, count: 1.0, quantiles: vec![] };
        let s1 = Reading::Summary { sum: 3.0, count: 2.0, quantiles: vec![] };
        assert_eq!(sample_of(Some(&s0), &s1), Some(2.0));
        // a gauge histogram is the distribution now
        let g = Reading::GaugeHistogram { sum: 12.5, count: 5.0, buckets: vec![(1.0, 2.0), (f64::INFINITY, 5.0)] };
        assert_eq!(sample_of(None, &g), Some(2.5));
        assert_eq!(sample_of(Some(&g), &g), Some(2.5));
    }

    #[test]
    fn quantiles_from_bucket_deltas() {
        let h0 = Reading::Histogram { sum: 0.0, count: 0.0, buckets: vec![(0.1, 0.0), (1.0, 0.0), (f64::INFINITY, 0.0)] };
        let h1 = Reading::Histogram { sum: 0.0, count: 100.0, buckets: vec![(0.1, 50.0), (1.0, 90.0), (f64::INFINITY, 100.0)] };
        assert!((histogram_quantile(Some(&h0), &h1, 0.5).unwrap() - 0.1).abs() < 1e-12);
        assert!((histogram_quantile(Some(&h0), &h1, 0.7).unwrap() - 0.55).abs() < 1e-12);
        assert_eq!(histogram_quantile(Some(&h0), &h1, 0.99), Some(1.0)); // in +Inf: the last finite bound
        assert_eq!(histogram_quantile(Some(&h1), &h1, 0.5), None);
        // the start's counts are those of the same bound
        let h1 = Reading::Histogram { sum: 0.0, count: 100.0, buckets: vec![(0.1, 50.0), (0.2, 55.0), (1.0, 90.0), (f64::INFINITY, 100.0)] };
        let h2 = Reading::Histogram { sum: 0.0, count: 110.0, buckets: vec![(0.1, 50.0), (1.0, 100.0), (f64::INFINITY, 110.0)] };
        assert!((histogram_quantile(Some(&h1), &h2, 0.5).unwrap() - 0.55).abs() < 1e-12);
        let g = Reading::GaugeHistogram { sum: 0.0, count: 4.0, buckets: vec![(1.0, 2.0), (2.0, 4.0), (f64::INFINITY, 4.0)] };
        assert_eq!(histogram_quantile(Some(&h0), &g, 0.5), Some(1.0));
        assert_eq!(histogram_quantile(None, &Reading::Value(1.0), 0.5), None);
    }

    #[test]
    fn an_unreachable_endpoint_is_counted_not_fatal() {
        let mut s = AgeScraper::new("http://127.0.0.1:1/metrics", "x", BTreeMap::new()).unwrap();
        s.poll(0);
        s.poll(1);
        assert_eq!(s.errors, 2);
        assert!(s.samples.is_empty());
    }
}
