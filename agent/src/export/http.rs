//! The HTTP endpoint of `waitmeter run`: `/metrics`, `/healthz`, wait
//! profiles at `/debug/pprof/wait?seconds=N`, the kept timeline at
//! `/debug/timeline?seconds=N` (`timeline.rs`) and a landing page, HTTP/1.1
//! with optional TLS and basic auth (`web.rs`). Hand-written, not a web
//! framework: every limit below is ours to set and test, with no async runtime.
//!
//! It is reachable by anyone on the pod network, so it is built to keep
//! answering scrapes whatever other clients do:
//! - a thread per connection (at most `MAX_CONNECTIONS`): a slow client never
//!   holds up another;
//! - a deadline for the whole request head, TLS handshake included, counted
//!   from accept (Go's `ReadHeaderTimeout`), and one for writing the response;
//!   a reaper closes a connection at its deadline however it trickles;
//! - with every slot taken, the connection that has waited longest for its
//!   head is closed to make room (slow-loris clients are always the oldest);
//!   when every slot is busy answering, the new one gets a 503 with `Retry-After`;
//! - the exposition is rendered by the thread that owns the probes (the map
//!   reads happen at scrape time) and cached for a second: a burst of scrapes
//!   costs one render, and concurrent scrapes wait for the same one;
//! - every answer and every connection closed without one is counted
//!   (`waitmeter_http_requests_total`, `waitmeter_http_connections_dropped_total`).
//!
//! A profile request holds its connection for the `seconds` it asks for (its
//! response deadline moves by as much); at most `recorder::MAX_CAPTURES` are
//! recorded at once, another gets 429 with `Retry-After`. At most
//! `MAX_PROFILE_REQUESTS` connections wait for a profile at once: one more is
//! answered 429 at once, without asking the main loop, so that profile
//! requests can never take the capacity scrapes need. A waiting profile
//! request watches its socket: when the client hangs up, its recording stops
//! and its slot is free (`client_gone`). Likewise at most `MAX_AUTH_WAITING`
//! requests wait for a bcrypt check; more are answered 429 at once.
//!
//! `/healthz` answers 200 while the main loop beats and keeps up with the scrapes, 503 once it
//! has not beaten for `STALLED_AFTER` or a scrape has waited for it longer than `SCRAPE_LATE`
//! (the loop beats, but something holds it up): the chart's liveness probe uses it. It is not
//! behind basic auth (kubelet probes carry no credentials); it says nothing but "ok".
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Result;
use flate2::write::GzEncoder;
use waitmeter_formats::http::{self as head, HeadError, HeadScanner, MAX_HEAD};

use super::recorder::{Pull, DEFAULT_SECONDS, MAX_CAPTURES, MAX_SECONDS};
use super::web::{Auth, Web, WebConfig};
use crate::error::usage;

mod timeline;
pub use timeline::{Format, Look};

/// Default listen address of `waitmeter run`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9747";
/// Connections open at once (each has a thread while it lasts).
pub const MAX_CONNECTIONS: usize = 256;
/// From accept to the end of the request head, TLS handshake included.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// From the end of the head to the last byte of the response.
pub const RESPONSE_DEADLINE: Duration = Duration::from_secs(30);
/// Profile requests waiting for their profile at once (recording, or waiting
/// for the main loop to say it is busy); one more is answered 429 at once.
pub const MAX_PROFILE_REQUESTS: usize = 2 * MAX_CAPTURES;
/// How often a waiting profile request looks whether its client is still there.
const GONE_CHECK: Duration = Duration::from_millis(200);
/// How long a scrape waits for the main loop to render.
const RENDER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a render is served again.
pub const RENDER_CACHE: Duration = Duration::from_secs(1);
/// `/healthz` fails when the main loop has not beaten for this long.
pub const STALLED_AFTER: Duration = Duration::from_secs(15);
/// `/healthz` fails when a scrape has waited for the main loop this long (a scrape's render takes
/// it tens of ms; Prometheus gives up after its scrape timeout, 10 s by default).
pub const SCRAPE_LATE: Duration = Duration::from_secs(5);
const REAP_EVERY: Duration = Duration::from_millis(100);
const CONN_STACK: usize = 256 * 1024;

/// A scrape waiting for its exposition text (OpenMetrics).
pub struct Scrape {
    pub reply: mpsc::SyncSender<String>,
}

/// Why a connection was closed without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// the request head (or the TLS handshake) was not complete by `HEAD_DEADLINE`
    HeadTimeout,
    /// closed to make room for a new connection
    Evicted,
    /// every slot was busy answering: answered 503 at once
    OverLimit,
    /// the response was not written by `RESPONSE_DEADLINE`
    WriteTimeout,
    /// the TLS handshake failed (no certificate, wrong CA, plain HTTP on a TLS port…)
    Tls,
    /// the client of a profile request hung up before the profile was ready: its recording stopped
    ClientGone,
}

impl Dropped {
    pub const ALL: [Dropped; 6] =
        [Dropped::HeadTimeout, Dropped::Evicted, Dropped::OverLimit, Dropped::WriteTimeout, Dropped::Tls, Dropped::ClientGone];
    pub fn name(self) -> &'static str {
        match self {
            Dropped::HeadTimeout => "head_timeout",
            Dropped::Evicted => "evicted",
            Dropped::OverLimit => "over_limit",
            Dropped::WriteTimeout => "write_timeout",
            Dropped::Tls => "tls_handshake",
            Dropped::ClientGone => "client_gone",
        }
    }
}

/// The endpoint's own counters, for the self-metrics.
#[derive(Default)]
pub struct Stats {
    codes: Mutex<BTreeMap<u16, u64>>,
    dropped: [AtomicU64; Dropped::ALL.len()],
}

impl Stats {
    fn answered(&self, code: u16) {
        *self.codes.lock().expect("stats lock").entry(code).or_default() += 1;
    }
    fn dropped(&self, why: Dropped) {
        self.dropped[why as usize].fetch_add(1, Ordering::Relaxed);
    }
    /// Requests answered, by status code.
    pub fn codes(&self) -> Vec<(u16, u64)> {
        self.codes.lock().expect("stats lock").iter().map(|(c, n)| (*c, *n)).collect()
    }
    /// Connections closed without an answer, by reason (every reason, zeros included).
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        Dropped::ALL.iter().map(|d| (d.name(), self.dropped[*d as usize].load(Ordering::Relaxed))).collect()
    }
}

/// The main loop's heartbeat, and the scrape waiting for it.
pub struct Health {
    base: Instant,
    /// nanoseconds from `base` to the last beat
    last_ns: AtomicI64,
    /// nanoseconds from `base` to when the scrape the loop has not answered yet was asked
    /// (`i64::MIN`: none)
    asked_ns: AtomicI64,
}

impl Default for Health {
    fn default() -> Self {
        Health { base: Instant::now(), last_ns: AtomicI64::new(0), asked_ns: AtomicI64::new(i64::MIN) }
    }
}

impl Health {
    fn now_ns(&self) -> i64 {
        i64::try_from(self.base.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }
    /// A scrape is asked of the main loop now (one at a time: `Cache`).
    fn asked(&self) {
        self.asked_ns.store(self.now_ns(), Ordering::Relaxed);
    }
    /// ... and was answered, or given up.
    fn answered(&self) {
        self.asked_ns.store(i64::MIN, Ordering::Relaxed);
    }
    /// How long the scrape asked of the main loop has waited for it (zero: none waits).
    pub fn scrape_waiting(&self) -> Duration {
        match self.asked_ns.load(Ordering::Relaxed) {
            i64::MIN => Duration::ZERO,
            at => Duration::from_nanos(self.now_ns().saturating_sub(at).max(0) as u64),
        }
    }
    /// Called by the main loop every time round.
    pub fn beat(&self) {
        self.last_ns.store(i64::try_from(self.base.elapsed().as_nanos()).unwrap_or(i64::MAX), Ordering::Relaxed);
    }
    /// How long since the last beat.
    pub fn silent_for(&self) -> Duration {
        let now = i64::try_from(self.base.elapsed().as_nanos()).unwrap_or(i64::MAX);
        Duration::from_nanos(now.saturating_sub(self.last_ns.load(Ordering::Relaxed)).max(0) as u64)
    }
}

/// What `serve` returns: the bound address and the shared state the command reads.
pub struct Endpoint {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
    pub health: Arc<Health>,
    pub tls: bool,
    /// the --web.config.file in force, with its reload counts
    pub web: Option<Arc<Web>>,
}

/// A connection's place: its deadline, and a handle to close it from outside.
struct Slot {
    id: u64,
    accepted: Instant,
    deadline: Instant,
    answering: bool,
    sock: TcpStream,
}

#[derive(Default)]
struct Slots {
    inner: Mutex<(u64, Vec<Slot>)>,
}

impl Slots {
    /// A slot for a new connection, closing the oldest one still reading its
    /// head when all are taken; None when every slot is busy answering.
    fn admit(&self, sock: &TcpStream, stats: &Stats) -> Option<u64> {
        let handle = sock.try_clone().ok()?;
        let mut g = self.inner.lock().expect("slots lock");
        if g.1.len() >= MAX_CONNECTIONS {
            let oldest = g.1.iter().enumerate().filter(|(_, s)| !s.answering).min_by_key(|(_, s)| s.accepted).map(|(i, _)| i)?;
            let victim = g.1.swap_remove(oldest);
            let _ = victim.sock.shutdown(Shutdown::Both);
            stats.dropped(Dropped::Evicted);
        }
        g.0 += 1;
        let id = g.0;
        let now = Instant::now();
        g.1.push(Slot { id, accepted: now, deadline: now + HEAD_DEADLINE, answering: false, sock: handle });
        Some(id)
    }

    /// The response may take until `until` (a profile's seconds and the write).
    fn extend(&self, id: u64, until: Instant) {
        if let Some(s) = self.inner.lock().expect("slots lock").1.iter_mut().find(|s| s.id == id) {
            s.deadline = s.deadline.max(until);
        }
    }

    /// The head is in: the response deadline starts. False when the slot was
    /// closed meanwhile (evicted or timed out).
    fn answering(&self, id: u64) -> bool {
        let mut g = self.inner.lock().expect("slots lock");
        match g.1.iter_mut().find(|s| s.id == id) {
            Some(s) => {
                s.answering = true;
                s.deadline = Instant::now() + RESPONSE_DEADLINE;
                true
            }
            None => false,
        }
    }

    /// Whether the client of a connection has hung up (or reset it): a FIN
    /// seen by the kernel, as Go's server treats a read of EOF while it answers.
    fn peer_gone(&self, id: u64) -> bool {
        let g = self.inner.lock().expect("slots lock");
        let Some(s) = g.1.iter().find(|s| s.id == id) else { return true };
        let mut pfd = libc::pollfd { fd: s.sock.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// The connection is done; true when it still had its slot.
    fn release(&self, id: u64) -> bool {
        let mut g = self.inner.lock().expect("slots lock");
        let before = g.1.len();
        g.1.retain(|s| s.id != id);
        g.1.len() != before
    }

    /// Close every connection past its deadline.
    fn reap(&self, stats: &Stats) {
        let now = Instant::now();
        let mut g = self.inner.lock().expect("slots lock");
        g.1.retain(|s| {
            if s.deadline > now {
                return true;
            }
            let _ = s.sock.shutdown(Shutdown::Both);
            stats.dropped(if s.answering { Dropped::WriteTimeout } else { Dropped::HeadTimeout });
            false
        });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().unwrap().1.len()
    }
}

/// One render of the exposition, in the forms clients ask for (made on demand).
struct Rendered {
    openmetrics: String,
    text: OnceLock<String>,
    /// gzip of (openmetrics, text)
    gzip: [OnceLock<Vec<u8>>; 2],
}

impl Rendered {
    fn body(&self, openmetrics: bool, gzip: bool) -> &[u8] {
        let plain = if openmetrics { &self.openmetrics } else { self.text.get_or_init(|| super::encode::to_text_004(&self.openmetrics)) };
        if !gzip {
            return plain.as_bytes();
        }
        self.gzip[usize::from(!openmetrics)].get_or_init(|| self::gzip(plain.as_bytes(), flate2::Compression::default()))
    }
}

/// The latest render and when it was made, and whether a scrape is rendering now.
#[derive(Default)]
struct CacheState {
    latest: Option<(Instant, Arc<Rendered>)>,
    rendering: bool,
}

/// Renders shared between concurrent scrapes and cached for `RENDER_CACHE`.
#[derive(Default)]
struct Cache {
    state: Mutex<CacheState>,
    done: Condvar,
}

impl Cache {
    fn get(&self, scrapes: &Mutex<mpsc::Sender<Scrape>>, health: &Health) -> Option<Arc<Rendered>> {
        let give_up = Instant::now() + RENDER_TIMEOUT;
        let mut st = self.state.lock().expect("cache lock");
        loop {
            if let Some((at, r)) = &st.latest {
                if at.elapsed() < RENDER_CACHE {
                    return Some(Arc::clone(r));
                }
            }
            if !st.rendering {
                break;
            }
            // another scrape is rendering: wait for its result
            let left = give_up.checked_duration_since(Instant::now())?;
            st = self.done.wait_timeout(st, left).expect("cache lock").0;
        }
        st.rendering = true;
        drop(st);
        let (tx, rx) = mpsc::sync_channel(1);
        health.asked();
        let sent = scrapes.lock().expect("scrape channel lock").send(Scrape { reply: tx }).is_ok();
        let text = if sent { rx.recv_timeout(RENDER_TIMEOUT).ok() } else { None };
        health.answered();
        let mut st = self.state.lock().expect("cache lock");
        st.rendering = false;
        let out = text.map(|t| Arc::new(Rendered { openmetrics: t, text: OnceLock::new(), gzip: Default::default() }));
        if let Some(r) = &out {
            st.latest = Some((Instant::now(), Arc::clone(r)));
        }
        self.done.notify_all();
        out
    }
}

struct Shared {
    scrapes: Mutex<mpsc::Sender<Scrape>>,
    /// None: stacks are off, no profiles
    pulls: Option<Mutex<mpsc::Sender<Pull>>>,
    /// profile requests waiting for their profile now
    profiling: AtomicUsize,
    /// None: no timeline is kept; else where views are asked for, and how far back they reach (s)
    looks: Option<(Mutex<mpsc::Sender<Look>>, u64)>,
    /// timeline requests waiting for their view now
    looking: AtomicUsize,
    cache: Cache,
    web: Option<Arc<Web>>,
    stats: Arc<Stats>,
    health: Arc<Health>,
    slots: Slots,
}

/// Bind `addr` and serve in the background; wait profiles are asked of
/// `pulls` (None: they are not served), timeline views of `looks` with how far back they reach
/// in seconds (None: no timeline is kept).
pub fn serve(
    addr: &str,
    web: Option<Web>,
    scrapes: mpsc::Sender<Scrape>,
    pulls: Option<mpsc::Sender<Pull>>,
    looks: Option<(mpsc::Sender<Look>, u64)>,
) -> Result<Endpoint> {
    let listener =
        TcpListener::bind(addr).map_err(|e| usage!("cannot listen on {addr}: {e}: pick a free address with --listen ADDR:PORT"))?;
    let bound = listener.local_addr()?;
    let tls = web.as_ref().is_some_and(|w| w.current().tls.is_some());
    let shared = Arc::new(Shared {
        scrapes: Mutex::new(scrapes),
        pulls: pulls.map(Mutex::new),
        profiling: AtomicUsize::new(0),
        looks: looks.map(|(tx, keep_s)| (Mutex::new(tx), keep_s)),
        looking: AtomicUsize::new(0),
        cache: Cache::default(),
        web: web.map(Arc::new),
        stats: Arc::default(),
        health: Arc::default(),
        slots: Slots::default(),
    });
    let reaper = Arc::clone(&shared);
    std::thread::Builder::new().name("http-reaper".into()).spawn(move || loop {
        std::thread::sleep(REAP_EVERY);
        reaper.slots.reap(&reaper.stats);
    })?;
    let acceptor = Arc::clone(&shared);
    std::thread::Builder::new().name("http".into()).spawn(move || accept_loop(listener, acceptor))?;
    Ok(Endpoint { addr: bound, stats: Arc::clone(&shared.stats), health: Arc::clone(&shared.health), tls, web: shared.web.clone() })
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning
                log::debug!("accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // backstops for the reaper: no single read or write blocks longer than the longest deadline
        let _ = stream.set_read_timeout(Some(RESPONSE_DEADLINE));
        let _ = stream.set_write_timeout(Some(RESPONSE_DEADLINE));
        let Some(id) = shared.slots.admit(&stream, &shared.stats) else {
            refuse(stream, &shared);
            continue;
        };
        let conn_shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new().name("http-conn".into()).stack_size(CONN_STACK).spawn(move || {
            connection(stream, id, &conn_shared);
        });
        if spawned.is_err() {
            shared.slots.release(id);
            shared.stats.dropped(Dropped::OverLimit);
        }
    }
}

/// Every slot is busy answering: a 503 written from the accept thread (a
/// short plain-text write into an empty socket buffer never blocks).
fn refuse(mut stream: TcpStream, shared: &Shared) {
    shared.stats.dropped(Dropped::OverLimit);
    let tls = shared.web.as_ref().is_some_and(|w| w.current().tls.is_some());
    if !tls {
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 32\r\nConnection: close\r\n\r\ntoo many connections: retry soon\n"[..].as_ref());
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A plain or TLS connection of the endpoint.
type Conn = crate::tls::Conn<rustls::ServerConnection>;

fn connection(stream: TcpStream, id: u64, shared: &Shared) {
    let cfg = shared.web.as_deref().map(Web::current);
    let result = serve_one(stream, id, shared, cfg.as_deref());
    let had_slot = shared.slots.release(id);
    if let Err(e) = result {
        // a connection the reaper or an eviction closed was counted there
        if had_slot && e.tls {
            shared.stats.dropped(Dropped::Tls);
        }
        log::debug!("http connection: {}", e.io);
    }
}

struct ConnError {
    io: std::io::Error,
    tls: bool,
}

impl From<std::io::Error> for ConnError {
    fn from(io: std::io::Error) -> Self {
        ConnError { io, tls: false }
    }
}

/// A response about to be written.
struct Answer {
    code: u16,
    headers: Vec<(&'static str, String)>,
    body: Body,
}

/// What an answer sends: fixed text, text made for it, or one form of the
/// shared render (held by its `Arc`, not copied per scrape).
enum Body {
    Static(&'static str),
    Owned(String),
    Bytes(Vec<u8>),
    Render { render: Arc<Rendered>, openmetrics: bool, gzip: bool },
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Static(s) => s.as_bytes(),
            Body::Owned(s) => s.as_bytes(),
            Body::Bytes(b) => b,
            Body::Render { render, openmetrics, gzip } => render.body(*openmetrics, *gzip),
        }
    }
}

fn answer(code: u16, body: &'static str) -> Answer {
    Answer { code, headers: vec![("Content-Type", "text/plain; charset=utf-8".into())], body: Body::Static(body) }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

fn serve_one(stream: TcpStream, id: u64, shared: &Shared, cfg: Option<&WebConfig>) -> Result<(), ConnError> {
    let mut conn = match cfg.and_then(|c| c.tls.clone()) {
        Some(tls) => {
            let mut sc = rustls::ServerConnection::new(tls).map_err(|e| ConnError { io: std::io::Error::other(e), tls: true })?;
            let mut sock = stream;
            while sc.is_handshaking() {
                sc.complete_io(&mut sock).map_err(|io| ConnError { io, tls: true })?;
            }
            Conn::Tls(Box::new(rustls::StreamOwned::new(sc, sock)))
        }
        None => Conn::Plain(stream),
    };
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut scanner = HeadScanner::default();
    let end = loop {
        if let Some(end) = scanner.feed(&buf) {
            break Some(end);
        }
        if buf.len() > MAX_HEAD {
            break None;
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Ok(()); // the client went away
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if !shared.slots.answering(id) {
        return Ok(());
    }
    // (answer, HEAD, the request was whole: nothing more is coming from the client)
    let (ans, head_only, whole) = match end {
        None => (answer(431, "request head too large\n"), false, false),
        Some(end) => match head::parse_request(&buf[..end]) {
            Ok(req) => {
                let Some(ans) = route(&req, id, shared, cfg) else {
                    shared.stats.dropped(Dropped::ClientGone);
                    return Ok(());
                };
                // a GET or HEAD has no body: its head is all the client sends
                let whole = (req.method == "GET" || req.method == "HEAD") && end == buf.len();
                (ans, req.method == "HEAD", whole)
            }
            Err(HeadError::Version) => (answer(505, "HTTP/1.x only\n"), false, false),
            Err(HeadError::TooLarge | HeadError::TooManyHeaders) => (answer(431, "request head too large\n"), false, false),
            Err(e) => {
                log::debug!("bad request: {e}");
                (answer(400, "bad request\n"), false, false)
            }
        },
    };
    shared.stats.answered(ans.code);
    let mut out = format!("HTTP/1.1 {} {}\r\n", ans.code, reason(ans.code));
    for (name, value) in ans
        .headers
        .iter()
        .map(|(n, v)| (*n, v.as_str()))
        .chain(cfg.iter().flat_map(|c| c.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()))))
    {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = ans.body.bytes();
    out.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()));
    conn.write_all(out.as_bytes())?;
    if !head_only {
        conn.write_all(body)?;
    }
    conn.flush()?;
    let sock = match &mut conn {
        Conn::Tls(s) => {
            s.conn.send_close_notify();
            let _ = s.conn.complete_io(&mut s.sock);
            &mut s.sock
        }
        Conn::Plain(s) => s,
    };
    if ans.code >= 400 && !whole {
        linger(sock);
    }
    Ok(())
}

/// After an error answer the client may still be sending (a head too large,
/// a body we did not read): closing with unread data would reset the
/// connection and could discard the answer before the client reads it. Stop
/// sending, then read and drop what comes, for a short bounded while. Not
/// after a whole GET (a 401, 404 or 429): nothing is left unread, and the
/// slot is free at once.
fn linger(sock: &mut TcpStream) {
    let _ = sock.shutdown(Shutdown::Write);
    let _ = sock.set_read_timeout(Some(Duration::from_millis(500)));
    let until = Instant::now() + Duration::from_millis(500);
    let mut sink = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    while left > 0 && Instant::now() < until {
        match sock.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

const LANDING: &str = "<!doctype html><html><head><title>waitmeter</title></head><body><h1>waitmeter</h1>\
<p><a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a> &middot; \
<a href=\"/debug/pprof/wait?seconds=10\">/debug/pprof/wait?seconds=10</a> (a wait profile, pprof) &middot; \
<a href=\"/debug/timeline?seconds=60\">/debug/timeline?seconds=60</a> (the last minute's timeline, with run --timeline-minutes)</p></body></html>\n";

/// A query's `key=value` pairs (a key without `=` has an empty value).
fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query.unwrap_or("").split('&').filter(|p| !p.is_empty()).map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// A place among the requests of one kind waiting now (at most `max`), given back when dropped;
/// None: every place is taken.
struct Place<'a>(&'a AtomicUsize);

impl<'a> Place<'a> {
    fn take(waiting: &'a AtomicUsize, max: usize) -> Option<Place<'a>> {
        if waiting.fetch_add(1, Ordering::AcqRel) >= max {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Place(waiting))
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `bytes` gzipped.
fn gzip(bytes: &[u8], level: flate2::Compression) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(bytes.len() / 4), level);
    enc.write_all(bytes).expect("writing to a Vec cannot fail");
    enc.finish().expect("writing to a Vec cannot fail")
}

/// `seconds` and `pid` of a profile request's query.
fn profile_query(query: Option<&str>) -> Result<(u64, Option<u32>), &'static str> {
    let (mut seconds, mut pid) = (DEFAULT_SECONDS, None);
    for (k, v) in query_pairs(query) {
        match k {
            "seconds" => {
                seconds =
                    v.parse().ok().filter(|s| (1..=MAX_SECONDS).contains(s)).ok_or("seconds must be a whole number from 1 to 300\n")?
            }
            "pid" => pid = Some(v.parse().ok().filter(|p| *p > 0).ok_or("pid must be a process ID\n")?),
            _ => {}
        }
    }
    Ok((seconds, pid))
}

/// A wait profile of the next `seconds`: recorded by the main loop, which
/// answers when they are over. None: the client hung up meanwhile (the
/// recording is stopped).
fn profile(req: &head::Request<'_>, id: u64, shared: &Shared) -> Option<Answer> {
    let Some(pulls) = &shared.pulls else {
        return Some(answer(404, "no wait profiles: waitmeter runs with --stacks none\n"));
    };
    let (seconds, pid) = match profile_query(req.query) {
        Ok(q) => q,
        Err(why) => return Some(answer(400, why)),
    };
    let busy = |why: String| {
        let mut a = Answer { body: Body::Owned(format!("{why}\n")), ..answer(429, "") };
        a.headers.push(("Retry-After", "5".into()));
        a
    };
    // a place among the profile requests waiting now, or 429 at once
    let Some(_place) = Place::take(&shared.profiling, MAX_PROFILE_REQUESTS) else {
        return Some(busy(format!("busy: {MAX_PROFILE_REQUESTS} profile requests are open already: retry")));
    };
    let wait = Duration::from_secs(seconds) + RENDER_TIMEOUT;
    let give_up = Instant::now() + wait;
    shared.slots.extend(id, give_up + RESPONSE_DEADLINE);
    let (tx, rx) = mpsc::sync_channel(1);
    let cancelled = Arc::new(AtomicBool::new(false));
    if pulls.lock().expect("pull channel lock").send(Pull { seconds, pid, reply: tx, cancelled: Arc::clone(&cancelled) }).is_err() {
        return Some(answer(503, "waitmeter is shutting down\n"));
    }
    let got = loop {
        let left = give_up.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(GONE_CHECK)) {
            Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => {
                if shared.slots.peer_gone(id) {
                    cancelled.store(true, Ordering::Relaxed);
                    return None;
                }
            }
            got => break got,
        }
    };
    Some(match got {
        Ok(Ok(gz)) => Answer {
            code: 200,
            headers: vec![
                ("Content-Type", "application/octet-stream".into()),
                ("Content-Disposition", "attachment; filename=\"wait.pb.gz\"".into()),
                ("X-Content-Type-Options", "nosniff".into()),
            ],
            body: Body::Bytes(gz),
        },
        Ok(Err(why)) if why.starts_with("busy") => busy(why),
        Ok(Err(why)) => Answer { body: Body::Owned(format!("{why}\n")), ..answer(404, "") },
        Err(_) => {
            cancelled.store(true, Ordering::Relaxed);
            answer(503, "waitmeter is busy or shutting down: retry\n")
        }
    })
}

/// The answer to a request; None when there is none to give (the client of a profile request hung up).
fn route(req: &head::Request<'_>, id: u64, shared: &Shared, cfg: Option<&WebConfig>) -> Option<Answer> {
    if req.method != "GET" && req.method != "HEAD" {
        let mut a = answer(405, "only GET and HEAD\n");
        a.headers.push(("Allow", "GET, HEAD".into()));
        return Some(a);
    }
    if req.path == "/debug/pprof/wait" {
        if let Some(denied) = authorize(req, shared, cfg) {
            return Some(denied);
        }
        return profile(req, id, shared);
    }
    if req.path == "/debug/timeline" {
        if let Some(denied) = authorize(req, shared, cfg) {
            return Some(denied);
        }
        return Some(timeline::timeline(req, shared));
    }
    Some(answer_to(req, shared, cfg))
}

/// None when the request may go on; else the answer that refuses it.
fn authorize(req: &head::Request<'_>, shared: &Shared, cfg: Option<&WebConfig>) -> Option<Answer> {
    let (Some(web), Some(cfg)) = (&shared.web, cfg) else { return None };
    match web.check(cfg, req.header("Authorization")) {
        Auth::Ok => None,
        Auth::Denied => {
            let mut a = answer(401, "unauthorized\n");
            a.headers.push(("WWW-Authenticate", "Basic realm=\"waitmeter\", charset=\"UTF-8\"".into()));
            Some(a)
        }
        Auth::Busy => {
            let mut a = answer(429, "too many authentication attempts at once: retry\n");
            a.headers.push(("Retry-After", "1".into()));
            Some(a)
        }
    }
}

/// Every other request: /healthz, /metrics, the landing page.
fn answer_to(req: &head::Request<'_>, shared: &Shared, cfg: Option<&WebConfig>) -> Answer {
    if req.path == "/healthz" {
        let (silent, waiting) = (shared.health.silent_for(), shared.health.scrape_waiting());
        let why = if silent >= STALLED_AFTER {
            format!("the main loop has not run for {:.0} s", silent.as_secs_f64())
        } else if waiting >= SCRAPE_LATE {
            format!("the main loop is not keeping up: a scrape has waited {:.0} s for it", waiting.as_secs_f64())
        } else {
            return answer(200, "ok\n");
        };
        log::warn!("/healthz: {why}");
        return Answer { body: Body::Owned(format!("{why}\n")), ..answer(503, "") };
    }
    if let Some(denied) = authorize(req, shared, cfg) {
        return denied;
    }
    match req.path {
        "/metrics" => {
            let Some(rendered) = shared.cache.get(&shared.scrapes, &shared.health) else {
                let mut a = answer(503, "waitmeter is busy or shutting down: retry\n");
                a.headers.push(("Retry-After", "1".into()));
                return a;
            };
            let accept = req.header("Accept").unwrap_or("");
            let om_q = head::quality(accept, "application/openmetrics-text", None).unwrap_or(0.0);
            let openmetrics = om_q > 0.0 && om_q >= head::quality(accept, "text/plain", Some("*/*")).unwrap_or(0.0);
            let gzip = head::quality(req.header("Accept-Encoding").unwrap_or(""), "gzip", Some("*")).is_some_and(|q| q > 0.0);
            let ctype = if openmetrics {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            };
            let mut headers = vec![("Content-Type", ctype.to_string()), ("Vary", "Accept, Accept-Encoding".into())];
            if gzip {
                headers.push(("Content-Encoding", "gzip".into()));
            }
            Answer { code: 200, headers, body: Body::Render { render: rendered, openmetrics, gzip } }
        }
        "/" => Answer { headers: vec![("Content-Type", "text/html; charset=utf-8".into())], ..answer(200, LANDING) },
        _ => answer(404, "not found: try /metrics\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endpoint whose "main loop" answers every scrape with `text`, counting renders.
    fn endpoint(web: Option<Web>) -> (Endpoint, Arc<AtomicU64>) {
        let (tx, rx) = mpsc::channel::<Scrape>();
        let ep = serve("127.0.0.1:0", web, tx, None, None).unwrap();
        let renders = Arc::new(AtomicU64::new(0));
        let (r, health) = (Arc::clone(&renders), Arc::clone(&ep.health));
        std::thread::spawn(move || loop {
            health.beat();
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(s) => {
                    r.fetch_add(1, Ordering::Relaxed);
                    let _ = s.reply.send("# TYPE x counter\nx_total 1\n# EOF\n".into());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        });
        (ep, renders)
    }

    fn request(addr: SocketAddr, raw: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        let mut out = vec![];
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn profile_queries() {
        assert_eq!(profile_query(None), Ok((DEFAULT_SECONDS, None)));
        assert_eq!(profile_query(Some("seconds=14")), Ok((14, None)));
        assert_eq!(profile_query(Some("seconds=5&pid=42&debug=1")), Ok((5, Some(42))));
        assert_eq!(profile_query(Some("&&seconds=300&")), Ok((300, None)));
        for bad in ["seconds=0", "seconds=301", "seconds=-1", "seconds=", "seconds=1e3", "pid=0", "pid=x", "seconds=99999999999999999999"] {
            assert!(profile_query(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn profiles_need_stacks_and_a_main_loop() {
        let (ep, _) = endpoint(None);
        let r = request(ep.addr, "GET /debug/pprof/wait?seconds=1 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404") && r.contains("--stacks none"), "{r}");
        // a main loop that answers every pull at once, and one that is busy
        let (tx, _rx) = mpsc::channel::<Scrape>();
        let (ptx, prx) = mpsc::channel::<Pull>();
        let ep = serve("127.0.0.1:0", None, tx, Some(ptx), None).unwrap();
        std::thread::spawn(move || {
            for (i, p) in prx.into_iter().enumerate() {
                let _ = p.reply.send(if i == 0 { Ok(vec![0x1f, 0x8b, p.seconds as u8]) } else { Err("busy: retry".into()) });
            }
        });
        let r = request(ep.addr, "GET /debug/pprof/wait?seconds=7 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200") && r.contains("application/octet-stream") && r.ends_with("\x1f\u{fffd}\x07"), "{r:?}");
        let r = request(ep.addr, "GET /debug/pprof/wait HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 429") && r.contains("Retry-After: 5"), "{r}");
        let r = request(ep.addr, "GET /debug/pprof/wait?seconds=0 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    }

    #[test]
    fn profile_requests_are_bounded_and_stop_when_their_client_goes() {
        // a main loop that records every pull and never answers
        let (tx, _rx) = mpsc::channel::<Scrape>();
        let (ptx, prx) = mpsc::channel::<Pull>();
        let ep = serve("127.0.0.1:0", None, tx, Some(ptx), None).unwrap();
        let pulls = Arc::new(Mutex::new(vec![]));
        let kept = Arc::clone(&pulls);
        std::thread::spawn(move || {
            for p in prx {
                kept.lock().unwrap().push(p);
            }
        });
        let ask = |seconds: u32| {
            let mut s = TcpStream::connect(ep.addr).unwrap();
            s.write_all(format!("GET /debug/pprof/wait?seconds={seconds} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
            s
        };
        let waiting: Vec<TcpStream> = (0..MAX_PROFILE_REQUESTS).map(|_| ask(300)).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while pulls.lock().unwrap().len() < MAX_PROFILE_REQUESTS {
            assert!(Instant::now() < deadline, "the pulls did not reach the main loop");
            std::thread::sleep(Duration::from_millis(10));
        }
        // one more: 429 at once, the main loop not asked
        let t0 = Instant::now();
        let mut out = String::new();
        ask(1).read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 429") && out.contains("profile requests are open already"), "{out}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(pulls.lock().unwrap().len(), MAX_PROFILE_REQUESTS);
        // the clients hang up: their recordings are cancelled, their places free
        drop(waiting);
        while ep.stats.drops()[Dropped::ClientGone as usize].1 < MAX_PROFILE_REQUESTS as u64 {
            assert!(Instant::now() < deadline, "{:?}", ep.stats.drops());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(pulls.lock().unwrap().iter().all(|p| p.cancelled.load(Ordering::Relaxed)));
        let _late = ask(300);
        while pulls.lock().unwrap().len() < MAX_PROFILE_REQUESTS + 1 {
            assert!(Instant::now() < deadline, "a place did not come free");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn routes_methods_and_formats() {
        let (ep, renders) = endpoint(None);
        let a = ep.addr;
        let r = request(a, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("text/plain; version=0.0.4") && r.contains("# TYPE x_total counter"),
            "{r}"
        );
        let r = request(a, "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n");
        assert!(r.contains("application/openmetrics-text") && r.ends_with("# EOF\n"), "{r}");
        // HEAD: the same headers, no body
        let r = request(a, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200") && r.contains("Content-Length: ") && r.ends_with("\r\n\r\n"), "{r}");
        let r = request(a, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405") && r.contains("Allow: GET, HEAD\r\n"), "{r}");
        assert!(request(a, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(request(a, "GARBAGE\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert!(request(a, "GET / HTTP/2.0\r\n\r\n").starts_with("HTTP/1.1 505"));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD + 10));
        assert!(request(a, &big).starts_with("HTTP/1.1 431"));
        assert!(request(a, "GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
        // three scrapes within the cache time cost one render
        assert_eq!(renders.load(Ordering::Relaxed), 1, "cached renders");
        let codes = ep.stats.codes();
        assert!(codes.contains(&(200, 4)) && codes.contains(&(405, 1)) && codes.contains(&(431, 1)), "{codes:?}");
    }

    #[test]
    fn gzip_when_asked() {
        let (ep, _) = endpoint(None);
        let mut s = TcpStream::connect(ep.addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n").unwrap();
        let mut out = vec![];
        s.read_to_end(&mut out).unwrap();
        let end = head::head_end(&out).unwrap();
        assert!(String::from_utf8_lossy(&out[..end]).contains("Content-Encoding: gzip"));
        let mut text = String::new();
        flate2::read::GzDecoder::new(&out[end..]).read_to_string(&mut text).unwrap();
        assert!(text.contains("x_total 1"), "{text}");
        // gzip;q=0 is a refusal
        let r = request(ep.addr, "GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip;q=0\r\n\r\n");
        assert!(!r.contains("Content-Encoding"), "{r}");
    }

    #[test]
    fn a_silent_main_loop_fails_healthz() {
        let (ep, _) = endpoint(None);
        assert!(request(ep.addr, "GET /healthz HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nok\n"));
        // the main loop's last beat long ago (the test loop beats again within 50 ms: stop it first)
        let (tx, _rx) = mpsc::channel::<Scrape>();
        let ep = serve("127.0.0.1:0", None, tx, None, None).unwrap();
        ep.health.last_ns.store(-(STALLED_AFTER.as_nanos() as i64) - 1_000_000_000, Ordering::Relaxed);
        let r = request(ep.addr, "GET /healthz HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 503") && r.contains("has not run for 16 s"), "{r}");
        ep.health.beat();
        assert!(request(ep.addr, "HEAD /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn a_loop_that_beats_but_keeps_a_scrape_waiting_fails_healthz() {
        let (tx, rx) = mpsc::channel::<Scrape>();
        let ep = serve("127.0.0.1:0", None, tx, None, None).unwrap();
        ep.health.beat();
        // a real scrape, asked of a loop that never answers it
        let addr = ep.addr;
        let scrape = std::thread::spawn(move || request(addr, "GET /metrics HTTP/1.1\r\n\r\n"));
        let asked = rx.recv_timeout(Duration::from_secs(5)).expect("the scrape reaches the loop");
        assert!(request(ep.addr, "GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"), "it has not waited long yet");
        // ... as if it had waited 6 s (the loop still beats)
        ep.health.asked_ns.store(ep.health.now_ns() - 6_000_000_000, Ordering::Relaxed);
        ep.health.beat();
        let r = request(ep.addr, "GET /healthz HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 503") && r.contains("not keeping up: a scrape has waited 6 s"), "{r}");
        // answered: healthy again
        asked.reply.send("# EOF\n".into()).unwrap();
        assert!(scrape.join().unwrap().starts_with("HTTP/1.1 200"));
        assert!(request(ep.addr, "GET /healthz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn slots_evict_the_oldest_head_and_refuse_when_all_answer() {
        let stats = Stats::default();
        let slots = Slots::default();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut keep = vec![];
        let mut ids = vec![];
        for _ in 0..MAX_CONNECTIONS {
            keep.push(TcpStream::connect(addr).unwrap());
            let (s, _) = listener.accept().unwrap();
            ids.push(slots.admit(&s, &stats).unwrap());
            keep.push(s);
        }
        assert_eq!(slots.len(), MAX_CONNECTIONS);
        let (_c, (s, _)) = (TcpStream::connect(addr).unwrap(), listener.accept().unwrap());
        let new = slots.admit(&s, &stats).unwrap();
        assert_eq!(slots.len(), MAX_CONNECTIONS);
        assert!(!slots.answering(ids[0]), "the oldest was evicted");
        assert_eq!(stats.drops()[Dropped::Evicted as usize], ("evicted", 1));
        for id in ids.iter().skip(1).chain([&new]) {
            assert!(slots.answering(*id));
        }
        let (_c2, (s2, _)) = (TcpStream::connect(addr).unwrap(), listener.accept().unwrap());
        assert!(slots.admit(&s2, &stats).is_none(), "all busy answering");
        assert!(slots.release(new) && !slots.release(new));
    }
}
