//! Polling one metric of the application's Prometheus endpoint (plain HTTP).
//!
//! The endpoint is the application's, reachable on the network: its answer
//! is hostile input. One poll is one GET under one deadline (connect, request
//! and the whole response), with a bounded head and body; every failure is a
//! [`PollError`] with a [`Reason`], never a panic. The request asks for the
//! metric's samples only (`?name[]=`), so that an application serving its
//! /metrics while holding its GIL renders a few lines, not all of them.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Result};
use thiserror::Error;
use waitmeter_formats::http::{self as wire, HeadError};

use super::exposition::{self, BadLine, ExpositionError, Reading};
use crate::http_client::{self as client, Deadline, Failure, Framing};
use crate::model::age::AgeSample;

/// The largest body read (decoded). A filtered answer is a few hundred bytes;
/// an endpoint that ignores the filter sends everything.
pub const MAX_BODY: usize = 16 << 20;

/// OpenMetrics 1.0 first (the only text format with exemplars, and an `# EOF`
/// that shows the body is whole), then the Prometheus text formats; metric
/// and label names as the application wrote them (`escaping=allow-utf-8`:
/// without it client_golang turns `app.lag` into `app_lag`, which may be
/// another metric). No compression.
pub const ACCEPT: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
application/openmetrics-text;version=0.0.1;q=0.5,\
text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,\
text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// The samples a metric of any type may have. `name[]` filters by sample
/// name in prometheus_client (and client_java), so each is asked for;
/// `_created` is never a value and is left out.
const SUFFIXES: [&str; 7] = ["", "_total", "_sum", "_count", "_bucket", "_gsum", "_gcount"];

/// Why a poll failed or a line was skipped: the `reason` label of
/// `waitmeter_age_scrape_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Connect,
    Timeout,
    HttpStatus,
    TooLarge,
    Encoding,
    BadResponse,
    MetricMissing,
    /// the metric read, but its value is no age: below 0, above `MAX_AGE_S`, NaN or infinite
    OutOfRange,
    /// a skipped line (the others count polls)
    BadLine,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::Connect,
        Reason::Timeout,
        Reason::HttpStatus,
        Reason::TooLarge,
        Reason::Encoding,
        Reason::BadResponse,
        Reason::MetricMissing,
        Reason::OutOfRange,
        Reason::BadLine,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::Connect => "connect",
            Reason::Timeout => "timeout",
            Reason::HttpStatus => "http_status",
            Reason::TooLarge => "too_large",
            Reason::Encoding => "encoding",
            Reason::BadResponse => "bad_response",
            Reason::MetricMissing => "metric_missing",
            Reason::OutOfRange => "out_of_range",
            Reason::BadLine => "bad_line",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum PollError {
    #[error("cannot connect to {0}")]
    Connect(String),
    #[error("no complete answer within the {0:.3?} deadline ({1})")]
    Timeout(Duration, &'static str),
    #[error("HTTP status {0}")]
    Status(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Encoding(String),
    #[error("not a well-formed HTTP response: {0}")]
    BadResponse(String),
    #[error(transparent)]
    Metric(#[from] ExpositionError),
}

impl PollError {
    pub fn reason(&self) -> Reason {
        match self {
            PollError::Connect(_) => Reason::Connect,
            PollError::Timeout(..) => Reason::Timeout,
            PollError::Status(_) => Reason::HttpStatus,
            PollError::TooLarge(_) => Reason::TooLarge,
            PollError::Encoding(_) => Reason::Encoding,
            PollError::BadResponse(_) => Reason::BadResponse,
            PollError::Metric(_) => Reason::MetricMissing,
        }
    }
}

/// Where to poll and what to send: parsed once, from `--age-url`.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    pub url: String,
    /// to connect to: `host:port`
    pub hostport: String,
    /// the Host header: the authority as written
    pub host: String,
    /// the request target: the URL's path and query, and the name filter
    pub target: String,
}

/// Percent-encode all but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `name[]=metric&name[]=metric_total&...`, URL-encoded.
pub fn name_filter(metric: &str) -> String {
    SUFFIXES.iter().map(|s| format!("name%5B%5D={}", percent_encode(&format!("{metric}{s}")))).collect::<Vec<_>>().join("&")
}

impl Endpoint {
    /// `http://host[:port][/path][?query]` for `metric`.
    pub fn parse(url: &str, metric: &str) -> Result<Endpoint> {
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            _ => bail!("only http:// URLs are supported (put a local port-forward in front of https)"),
        };
        if url.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            bail!("the URL has a space or a non-ASCII or control character: percent-encode it");
        }
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/metrics{}", &rest[i..])),
            None => (rest, "/metrics".to_string()),
        };
        let (host, port) = wire::authority(authority, 80).map_err(|e| anyhow::anyhow!("{e}: {url}"))?;
        let sep = match path.find('?') {
            None => "?",
            Some(_) if path.ends_with(['?', '&']) => "",
            Some(_) => "&",
        };
        Ok(Endpoint {
            url: url.to_string(),
            hostport: format!("{host}:{port}"),
            host: authority.to_string(),
            target: format!("{path}{sep}{}", name_filter(metric)),
        })
    }

    fn request(&self) -> String {
        format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: {ACCEPT}\r\nAccept-Encoding: identity\r\nConnection: close\r\nUser-Agent: waitmeter/{}\r\n\r\n",
            self.target,
            self.host,
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// The head: status 200, an encoding we read, and how the body ends.
fn check_head(head: &[u8]) -> Result<Framing, PollError> {
    let r = wire::parse_response(head).map_err(|e| match e {
        HeadError::TooLarge | HeadError::TooManyHeaders => PollError::TooLarge(format!("response head: {e}")),
        e => PollError::BadResponse(format!("its head: {e}")),
    })?;
    if r.status != 200 {
        return Err(PollError::Status(format!("{} {}", r.status, client::printable(r.reason))));
    }
    client::framing(&r.headers, MAX_BODY).map_err(|e| match e {
        client::FramingError::Encoding(e) => PollError::Encoding(e),
        client::FramingError::Bad(e) => PollError::BadResponse(e),
        client::FramingError::TooLarge(e) => PollError::TooLarge(e),
    })
}

/// GET the endpoint; the body of its 200 answer, whole, within `timeout`.
pub fn get(ep: &Endpoint, timeout: Duration) -> Result<Vec<u8>, PollError> {
    let failed = |f: Failure| match f {
        Failure::Connect(e) => PollError::Connect(e),
        Failure::Timeout(stage) => PollError::Timeout(timeout, stage),
        Failure::TooLarge(e) => PollError::TooLarge(e),
        Failure::Bad(e) => PollError::BadResponse(e),
    };
    let deadline = Deadline::after(timeout);
    let mut s = client::connect(&ep.hostport, &deadline).map_err(failed)?;
    client::send(&mut s, &[ep.request().as_bytes()], &deadline).map_err(failed)?;
    let answer = client::read_head(&mut s, &deadline).map_err(failed)?;
    let framing = check_head(answer.head())?;
    client::read_body(&mut s, answer, framing, MAX_BODY, &deadline).map_err(failed)
}

/// The outcome of one poll.
#[derive(Debug, PartialEq)]
pub struct Poll {
    pub reading: Result<Reading, PollError>,
    /// malformed lines skipped in a body that was read
    pub bad_lines: u64,
    pub first_bad: Option<BadLine>,
}

/// GET the endpoint and read the metric.
pub fn poll(ep: &Endpoint, metric: &str, labels: &BTreeMap<String, String>, timeout: Duration) -> Poll {
    match get(ep, timeout) {
        Err(e) => Poll { reading: Err(e), bad_lines: 0, first_bad: None },
        Ok(body) => {
            let scan = exposition::scan_bytes(&body, metric, labels);
            Poll { reading: scan.reading.map_err(PollError::from), bad_lines: scan.bad_lines, first_bad: scan.first_bad }
        }
    }
}

/// The age metric of one process, polled from its endpoint.
pub struct AgeScraper {
    pub endpoint: Endpoint,
    pub metric: String,
    pub labels: BTreeMap<String, String>,
    pub interval: Duration,
    pub timeout: Duration,
    previous: Option<Reading>,
    pub samples: Vec<AgeSample>,
    /// the histogram/summary state at the start of the window (for quantiles)
    pub window_start: Option<Reading>,
    pub last: Option<Reading>,
    /// what was last warned about: the reason of the failing polls, where the
    /// first bad line was (not their texts, which may change every poll)
    last_error: Option<Reason>,
    last_bad: Option<(usize, &'static str)>,
    /// failed polls
    pub errors: u64,
    /// by [`Reason`]: failed polls, and skipped lines (`BadLine`)
    by_reason: [u64; Reason::ALL.len()],
}

impl AgeScraper {
    pub fn new(url: &str, metric: &str, labels: BTreeMap<String, String>, interval: Duration, timeout: Duration) -> Result<AgeScraper> {
        Ok(AgeScraper {
            endpoint: Endpoint::parse(url, metric)?,
            metric: metric.to_string(),
            labels,
            interval,
            timeout,
            previous: None,
            samples: vec![],
            window_start: None,
            last: None,
            last_error: None,
            last_bad: None,
            errors: 0,
            by_reason: [0; Reason::ALL.len()],
        })
    }

    /// Poll once, here and now.
    #[cfg(test)]
    pub fn poll(&mut self, now_ns: u64) {
        let got = poll(&self.endpoint, &self.metric, &self.labels, self.timeout);
        self.record(now_ns, got);
    }

    /// (reason, count) for every reason.
    pub fn by_reason(&self) -> Vec<(&'static str, u64)> {
        Reason::ALL.iter().map(|r| (r.name(), self.by_reason[r.index()])).collect()
    }

    pub fn count(&self, r: Reason) -> u64 {
        self.by_reason[r.index()]
    }

    /// Keep a reading; a failure or a skipped line is counted, and logged
    /// once until its reason (or the bad line's place) changes.
    pub fn record(&mut self, now_ns: u64, got: Poll) {
        if got.bad_lines > 0 {
            self.by_reason[Reason::BadLine.index()] += got.bad_lines;
            if let Some(b) = got.first_bad.filter(|b| self.last_bad != Some((b.line, b.why))) {
                log::warn!(
                    "age source {}: skipped {} malformed line(s) of its exposition, the first line {}: {}: {:?}",
                    self.endpoint.url,
                    got.bad_lines,
                    b.line,
                    b.why,
                    b.text
                );
                self.last_bad = Some((b.line, b.why));
            }
        }
        match got.reading {
            Ok(r) => {
                let age = sample_of(self.previous.as_ref(), &r);
                match age.map(|a| (a, super::sane(a))) {
                    Some((a, None)) => self.failed(
                        Reason::OutOfRange,
                        &format!("its age {a:e} s is no age (outside 0 s to a week, or not a number): not taken"),
                    ),
                    Some((_, Some(age))) => {
                        if self.last_error.take().is_some() {
                            log::warn!("age source {} is back", self.endpoint.url);
                        }
                        self.samples.push(AgeSample { at_ns: now_ns, age_s: age });
                    }
                    None => {}
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
            Err(e) => self.failed(e.reason(), &e.to_string()),
        }
    }

    /// Count a poll that gave no age; warn once until its reason changes.
    fn failed(&mut self, why: Reason, what: &str) {
        self.errors += 1;
        self.by_reason[why.index()] += 1;
        if self.last_error != Some(why) {
            log::warn!("age source {} ({}): {what}; retrying every {:?}", self.endpoint.url, self.metric, self.interval);
            self.last_error = Some(why);
        }
    }
}

/// The age a reading stands for: a gauge's value, a gauge histogram's mean
/// now; for a histogram or a summary the mean of the observations since the
/// previous reading.
pub fn sample_of(previous: Option<&Reading>, r: &Reading) -> Option<f64> {
    // (a NaN count is a sample too: one that is no age, counted as such by `record`)
    let new = |n: f64| n > 0.0 || n.is_nan();
    match (previous, r) {
        (_, Reading::Value(v)) => Some(*v),
        (_, Reading::GaugeHistogram { sum, count, .. }) => new(*count).then(|| sum / count),
        (Some(Reading::Histogram { sum: s0, count: c0, .. }), Reading::Histogram { sum, count, .. })
        | (Some(Reading::Summary { sum: s0, count: c0, .. }), Reading::Summary { sum, count, .. }) => {
            let dc = count - c0;
            new(dc).then(|| (sum - s0) / dc)
        }
        _ => None,
    }
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
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Instant;

    const T: Duration = Duration::from_secs(5);

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn urls_and_the_name_filter() {
        let f = "name%5B%5D=lag&name%5B%5D=lag_total&name%5B%5D=lag_sum&name%5B%5D=lag_count&name%5B%5D=lag_bucket&name%5B%5D=lag_gsum&name%5B%5D=lag_gcount";
        assert_eq!(name_filter("lag"), f);
        let e = Endpoint::parse("http://127.0.0.1:8000/metrics", "lag").unwrap();
        assert_eq!((e.hostport.as_str(), e.host.as_str(), e.target.clone()), ("127.0.0.1:8000", "127.0.0.1:8000", format!("/metrics?{f}")));
        let e = Endpoint::parse("http://app", "lag").unwrap();
        assert_eq!((e.hostport.as_str(), e.host.as_str(), e.target.clone()), ("app:80", "app", format!("/metrics?{f}")));
        // a query of its own: the filter is appended to it
        assert_eq!(Endpoint::parse("http://a:1/m?x=1", "lag").unwrap().target, format!("/m?x=1&{f}"));
        assert_eq!(Endpoint::parse("http://a:1/m?", "lag").unwrap().target, format!("/m?{f}"));
        assert_eq!(Endpoint::parse("http://a:1?x=1#frag", "lag").unwrap().target, format!("/metrics?x=1&{f}"));
        assert_eq!(Endpoint::parse("HTTP://[::1]:9/m", "lag").unwrap().hostport, "[::1]:9");
        assert_eq!(Endpoint::parse("http://[::1]/m", "lag").unwrap().hostport, "[::1]:80");
        // UTF-8 and reserved characters of metric names are percent-encoded
        assert!(name_filter("app.lag:sé").starts_with("name%5B%5D=app.lag%3As%C3%A9&name%5B%5D=app.lag%3As%C3%A9_total&"));
        for bad in [
            "https://x/metrics",
            "ftp://x",
            "http:///x",
            "http://:80/m",
            "http://a:b/m",
            "http://a:0/m",
            "http://a:99999/m",
            "http://u:p@a/m",
            "http://a/m x",
            "http://a/m\r\nX: y",
            "http://a/é",
        ] {
            assert!(Endpoint::parse(bad, "lag").is_err(), "{bad}");
        }
    }

    /// A one-connection server: answers with `response` after reading the
    /// request head; the head it got comes back on the channel.
    fn serve(response: Vec<u8>) -> (String, mpsc::Receiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = vec![];
            let mut b = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&req).into_owned());
            let _ = c.write_all(&response);
        });
        (url, rx)
    }

    fn poll_once(response: &[u8], metric: &str) -> Poll {
        let (url, _) = serve(response.to_vec());
        poll(&Endpoint::parse(&url, metric).unwrap(), metric, &none(), T)
    }

    fn ok(body: &str) -> Vec<u8> {
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[test]
    fn the_request_asks_for_the_metric_only() {
        let (url, rx) = serve(ok("lag 1\n"));
        let got = poll(&Endpoint::parse(&url, "lag").unwrap(), "lag", &none(), T);
        assert_eq!(got.reading, Ok(Reading::Value(1.0)));
        let req = rx.recv().unwrap();
        let first = req.lines().next().unwrap();
        assert_eq!(first, format!("GET /metrics?{} HTTP/1.1", name_filter("lag")));
        assert!(req.contains(&format!("\r\nAccept: {ACCEPT}\r\n")), "{req}");
        assert!(req.contains("\r\nConnection: close\r\n") && req.contains("\r\nAccept-Encoding: identity\r\n"), "{req}");
        let head = wire::parse_request(req.as_bytes()).unwrap();
        assert_eq!(head.header("host"), Some(url.trim_start_matches("http://").trim_end_matches("/metrics")));
    }

    #[test]
    fn bodies_of_every_framing() {
        assert_eq!(poll_once(&ok("# TYPE lag gauge\nlag 2.5\n# EOF\n"), "lag").reading, Ok(Reading::Value(2.5)));
        // the bytes past Content-Length are not read as the body
        assert_eq!(poll_once(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nlag 3\nlag 4\n", "lag").reading, Ok(Reading::Value(3.0)));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nlag \r\n2;x=y\r\n7\n\r\n0\r\n\r\n";
        assert_eq!(poll_once(chunked, "lag").reading, Ok(Reading::Value(7.0)));
        // no length: until the server closes; bare LF line ends in the head
        assert_eq!(poll_once(b"HTTP/1.0 200 OK\nContent-Type: text/plain\n\nlag 8\n", "lag").reading, Ok(Reading::Value(8.0)));
        // a body that is not all UTF-8, and a malformed line: those lines are skipped
        let p = poll_once(b"HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\nbad\xff 1\nlag 5\nlag{\n", "lag");
        assert_eq!((p.reading, p.bad_lines), (Ok(Reading::Value(5.0)), 2));
    }

    #[test]
    fn every_failure_has_its_reason() {
        let reason = |resp: &[u8]| poll_once(resp, "lag").reading.unwrap_err().reason();
        assert_eq!(reason(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"), Reason::HttpStatus);
        assert_eq!(reason(b"HTTP/1.1 500 \x1b[31m\r\n\r\n"), Reason::BadResponse); // control character in the head
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc"), Reason::Encoding);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), Reason::Encoding);
        assert_eq!(reason(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1).as_bytes()), Reason::TooLarge);
        assert_eq!(reason(format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(wire::MAX_HEAD)).as_bytes()), Reason::TooLarge);
        assert_eq!(reason(format!("HTTP/1.1 200 OK\r\n{}\r\n", "X: y\r\n".repeat(100)).as_bytes()), Reason::TooLarge);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffff\r\n"), Reason::TooLarge);
        assert_eq!(reason(b"<html>hello</html>\r\n\r\n"), Reason::BadResponse);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nlag 1\n"), Reason::BadResponse);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"), Reason::BadResponse);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"), Reason::BadResponse);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), Reason::BadResponse);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nlag 1\r\n"), Reason::BadResponse);
        assert_eq!(reason(b"HTTP/1.1 200 OK\r\n"), Reason::BadResponse);
        assert_eq!(reason(b""), Reason::BadResponse);
        assert_eq!(reason(&ok("other 1\n")), Reason::MetricMissing);
        // nothing listens there
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        drop(l);
        let p = poll(&Endpoint::parse(&url, "lag").unwrap(), "lag", &none(), T);
        assert_eq!(p.reading.unwrap_err().reason(), Reason::Connect);
    }

    /// A server that trickles its answer one byte at a time, `every` apart,
    /// until the client goes away: in the head, or in the body.
    fn trickle(response: &'static [u8], every: Duration) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", l.local_addr().unwrap());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { return };
                std::thread::spawn(move || {
                    let mut bytes = response.iter().cycle();
                    loop {
                        if c.write_all(&[*bytes.next().unwrap()]).is_err() {
                            return;
                        }
                        std::thread::sleep(every);
                    }
                });
            }
        });
        url
    }

    #[test]
    fn a_trickling_endpoint_is_cut_off_at_the_deadline() {
        for resp in [&b"HTTP/1.1 200 OK\r\nX-Slow: "[..], &b"HTTP/1.1 200 OK\r\n\r\nlag 1\nlag 1\nlag 1\n"[..]] {
            let resp: &'static [u8] = Box::leak(resp.to_vec().into_boxed_slice());
            let ep = Endpoint::parse(&trickle(resp, Duration::from_millis(20)), "lag").unwrap();
            let t = Instant::now();
            let p = poll(&ep, "lag", &none(), Duration::from_millis(600));
            let took = t.elapsed();
            assert_eq!(p.reading.as_ref().unwrap_err().reason(), Reason::Timeout, "{:?}", p.reading);
            assert!(took >= Duration::from_millis(600) && took < Duration::from_millis(900), "{took:?}");
        }
    }

    #[test]
    fn an_unreachable_endpoint_is_counted_not_fatal() {
        let mut s = AgeScraper::new("http://127.0.0.1:1/metrics", "x", BTreeMap::new(), Duration::from_secs(1), T).unwrap();
        s.poll(0);
        s.poll(1);
        assert_eq!(s.errors, 2);
        assert_eq!(s.count(Reason::Connect), 2);
        assert!(s.samples.is_empty());
    }

    #[test]
    fn reasons_are_counted_and_bad_lines_apart_from_polls() {
        let mut s = AgeScraper::new("http://127.0.0.1:1/metrics", "x", BTreeMap::new(), Duration::from_secs(1), T).unwrap();
        s.record(1, Poll { reading: Ok(Reading::Value(2.0)), bad_lines: 3, first_bad: None });
        s.record(2, Poll { reading: Err(PollError::Timeout(T, "x")), bad_lines: 0, first_bad: None });
        s.record(3, Poll { reading: Err(PollError::Metric(ExpositionError::Missing("x".into()))), bad_lines: 1, first_bad: None });
        assert_eq!(s.errors, 2);
        let by: BTreeMap<_, _> = s.by_reason().into_iter().collect();
        assert_eq!((by["bad_line"], by["timeout"], by["metric_missing"], by["connect"]), (4, 1, 1, 0));
        assert_eq!(by.len(), Reason::ALL.len());
        assert_eq!(s.samples, vec![AgeSample { at_ns: 1, age_s: 2.0 }]);
    }

    #[test]
    fn ages_that_are_no_ages_are_counted_not_taken() {
        let mut s = AgeScraper::new("http://127.0.0.1:1/metrics", "x", BTreeMap::new(), Duration::from_secs(1), T).unwrap();
        let bad = [1e308, -1.9, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, crate::age::MAX_AGE_S + 1.0];
        for (i, v) in bad.iter().enumerate() {
            s.record(i as u64, Poll { reading: Ok(Reading::Value(*v)), bad_lines: 0, first_bad: None });
        }
        // a histogram whose sum went NaN between two readings
        let h = |sum, count| Reading::Histogram { sum, count, buckets: vec![(f64::INFINITY, count)] };
        s.record(10, Poll { reading: Ok(h(1.0, 1.0)), bad_lines: 0, first_bad: None });
        s.record(11, Poll { reading: Ok(h(f64::NAN, 2.0)), bad_lines: 0, first_bad: None });
        s.record(12, Poll { reading: Ok(Reading::Value(0.25)), bad_lines: 0, first_bad: None });
        assert_eq!(s.count(Reason::OutOfRange), bad.len() as u64 + 1);
        assert_eq!(s.errors, bad.len() as u64 + 1);
        assert_eq!(s.samples, vec![AgeSample { at_ns: 12, age_s: 0.25 }]);
    }

    #[test]
    fn samples_from_each_kind() {
        assert_eq!(sample_of(None, &Reading::Value(2.0)), Some(2.0));
        assert!(sample_of(None, &Reading::Value(f64::NAN)).is_some_and(f64::is_nan)); // counted by `record`
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
        let h1 =
            Reading::Histogram { sum: 0.0, count: 100.0, buckets: vec![(0.1, 50.0), (0.2, 55.0), (1.0, 90.0), (f64::INFINITY, 100.0)] };
        let h2 = Reading::Histogram { sum: 0.0, count: 110.0, buckets: vec![(0.1, 50.0), (1.0, 100.0), (f64::INFINITY, 110.0)] };
        assert!((histogram_quantile(Some(&h1), &h2, 0.5).unwrap() - 0.55).abs() < 1e-12);
        let g = Reading::GaugeHistogram { sum: 0.0, count: 4.0, buckets: vec![(1.0, 2.0), (2.0, 4.0), (f64::INFINITY, 4.0)] };
        assert_eq!(histogram_quantile(Some(&h0), &g, 0.5), Some(1.0));
        assert_eq!(histogram_quantile(None, &Reading::Value(1.0), 0.5), None);
    }
}
