//! Pushing wait profiles to Pyroscope (`waitmeter run --pyroscope-url`):
//! the Connect call `POST {url}/push.v1.PusherService/Push` with a
//! `push.v1.PushRequest` (waitmeter_formats::pyroscope), over HTTP or HTTPS,
//! from a thread of its own so that a slow or unreachable server never holds
//! up the main loop. Requests wait in a queue of `QUEUE` at most; one that
//! does not fit, or that the server does not take, is counted by result
//! (`waitmeter_profile_pushes_total`) and not retried: the next interval
//! brings a new profile, as Pyroscope's own SDKs do.
//!
//! The server's answer is untrusted input: the head and the start of an
//! error body are read under one deadline and bounded.
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine;
use rustls::pki_types::ServerName;
use waitmeter_formats::http as wire;

use crate::http_client::{self as client, Deadline, Failure};
use waitmeter_formats::pyroscope::{self, PUSH_PATH};

/// Pushes waiting to be sent; more are dropped (counted).
pub const QUEUE: usize = 2;
/// Connect, send and read the answer, all within this.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The start of an error answer's body kept for the log.
const MAX_ERROR_BODY: usize = 1024;
/// The profile name: `__name__`, the first part of the profile type id
/// (`waitmeter_wait:wait:nanoseconds:wait:nanoseconds`).
pub const PROFILE_NAME: &str = "waitmeter_wait";

/// What became of a push: the `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// a 4xx other than 429: the request is wrong (labels, size): not worth sending again
    Rejected,
    /// 429 or 5xx: the server could not take it now
    Failed,
    /// no connection, TLS failure, timeout or an answer that is not HTTP
    Unreachable,
    /// the queue was full: the server is slower than the interval
    QueueFull,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [Outcome::Ok, Outcome::Rejected, Outcome::Failed, Outcome::Unreachable, Outcome::QueueFull];
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Rejected => "rejected",
            Outcome::Failed => "failed",
            Outcome::Unreachable => "unreachable",
            Outcome::QueueFull => "queue_full",
        }
    }
}

/// Where and how to push, checked once at start.
#[derive(Clone)]
pub struct Target {
    pub url: String,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    hostport: String,
    host: String,
    path: String,
    headers: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("url", &self.url).field("path", &self.path).finish()
    }
}

/// Credentials and trust for a push target.
#[derive(Default)]
pub struct Access<'a> {
    pub tenant: Option<&'a str>,
    pub user: Option<&'a str>,
    pub password_file: Option<&'a Path>,
    pub ca_file: Option<&'a Path>,
}

impl Target {
    /// `http[s]://host[:port][/prefix]`.
    pub fn parse(url: &str, access: &Access) -> Result<Target> {
        let base = client::BaseUrl::parse(url).map_err(|e| match e {
            client::UrlError::Authority(e, true) => anyhow::anyhow!("{e}: use --pyroscope-user and --pyroscope-password-file"),
            e => anyhow::anyhow!("{e}"),
        })?;
        let tls = base.tls;
        let mut headers = vec![
            ("Content-Type", pyroscope::CONTENT_TYPE.to_string()),
            ("Connect-Protocol-Version", "1".into()),
            ("User-Agent", format!("waitmeter/{}", env!("CARGO_PKG_VERSION"))),
        ];
        if let Some(t) = access.tenant {
            if t.is_empty() || t.bytes().any(|b| b <= b' ' || b >= 0x7f) {
                bail!("--pyroscope-tenant must be printable ASCII without spaces");
            }
            headers.push(("X-Scope-OrgID", t.to_string()));
        }
        if let Some(user) = access.user {
            let file = access.password_file.context("--pyroscope-user needs --pyroscope-password-file")?;
            let password = std::fs::read_to_string(file).with_context(|| format!("cannot read the password file {}", file.display()))?;
            let pair = format!("{user}:{}", password.trim_end_matches(['\r', '\n']));
            headers.push(("Authorization", format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))));
            if !tls {
                log::warn!("--pyroscope-user sends a password over plain http: use an https:// URL");
            }
        }
        let tls = if tls {
            let server = crate::tls::server_name(&base.name)?;
            Some((crate::tls::client_config(access.ca_file, "--pyroscope-ca-file")?, server))
        } else {
            if access.ca_file.is_some() {
                bail!("--pyroscope-ca-file is for https:// URLs");
            }
            None
        };
        Ok(Target {
            url: url.to_string(),
            tls,
            path: format!("{}{PUSH_PATH}", base.prefix),
            hostport: base.hostport,
            host: base.host,
            headers,
        })
    }
}

/// Why a push did not land, for the log.
#[derive(Debug)]
pub struct PushError {
    pub outcome: Outcome,
    pub message: String,
}

type Conn = crate::tls::Conn<rustls::ClientConnection>;

fn unreachable(message: String) -> PushError {
    PushError { outcome: Outcome::Unreachable, message }
}

fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b).chars().take(200).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// POST `body` to the target, within `timeout`.
pub fn post(t: &Target, body: &[u8], timeout: Duration) -> Result<(), PushError> {
    let failed = |f: Failure| match f {
        Failure::Timeout(stage) => unreachable(format!("no answer within {:.1} s ({stage})", timeout.as_secs_f64())),
        Failure::Connect(e) | Failure::TooLarge(e) | Failure::Bad(e) => unreachable(e),
    };
    let deadline = Deadline::after(timeout);
    let sock = client::connect(&t.hostport, &deadline).map_err(failed)?;
    let mut conn = match &t.tls {
        None => Conn::Plain(sock),
        Some((cfg, name)) => {
            let c = rustls::ClientConnection::new(Arc::clone(cfg), name.clone()).map_err(|e| unreachable(format!("TLS: {e}")))?;
            Conn::Tls(Box::new(rustls::StreamOwned::new(c, sock)))
        }
    };
    let mut head = format!("POST {} HTTP/1.1\r\nHost: {}\r\n", t.path, t.host);
    for (n, v) in &t.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()));
    client::send(&mut conn, &[head.as_bytes(), body], &deadline).map_err(failed)?;
    let answer = client::read_head(&mut conn, &deadline).map_err(failed)?;
    let status = wire::parse_response(answer.head()).map_err(|e| unreachable(format!("not an HTTP answer: {e}")))?.status;
    if status == 200 {
        return Ok(());
    }
    // the start of the error body, for the log (Connect: {"code":..., "message":...})
    let text = printable(&client::read_start(&mut conn, answer, MAX_ERROR_BODY, &deadline));
    let outcome = if status == 429 || status >= 500 { Outcome::Failed } else { Outcome::Rejected };
    Err(PushError { outcome, message: format!("HTTP {status}: {text}") })
}

/// Counts by outcome, shared with the metrics.
#[derive(Default)]
pub struct Stats {
    by: [AtomicU64; 5],
}

impl Stats {
    fn count(&self, o: Outcome) {
        self.by[o as usize].fetch_add(1, Ordering::Relaxed);
    }
    /// Pushes by result (every result, zeros included).
    pub fn by_result(&self) -> Vec<(&'static str, u64)> {
        Outcome::ALL.iter().map(|o| (o.name(), self.by[*o as usize].load(Ordering::Relaxed))).collect()
    }
}

/// The pushing thread's end of the queue.
#[derive(Clone)]
pub struct Pusher {
    tx: SyncSender<Vec<u8>>,
    pub stats: Arc<Stats>,
}

impl Pusher {
    /// Start the thread that sends to `target`.
    pub fn start(target: Target) -> Result<Pusher> {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let stats = Arc::new(Stats::default());
        let s = Arc::clone(&stats);
        std::thread::Builder::new().name("pyroscope-push".into()).spawn(move || {
            let mut failing = false;
            for body in rx {
                match post(&target, &body, TIMEOUT) {
                    Ok(()) => {
                        s.count(Outcome::Ok);
                        if failing {
                            log::info!("pushing profiles to {} works again", target.url);
                        }
                        failing = false;
                    }
                    Err(e) => {
                        s.count(e.outcome);
                        // the first failure of a run of them is a warning, the rest debug
                        if failing {
                            log::debug!("pushing profiles to {}: {}", target.url, e.message);
                        } else {
                            log::warn!(
                                "pushing profiles to {} failed: {} (counted in waitmeter_profile_pushes_total)",
                                target.url,
                                e.message
                            );
                        }
                        failing = true;
                    }
                }
            }
        })?;
        Ok(Pusher { tx, stats })
    }

    /// Queue a push request (a full queue drops it, counted).
    pub fn send(&self, body: Vec<u8>) {
        match self.tx.try_send(body) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => self.stats.count(Outcome::QueueFull),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Instant;

    fn target(url: &str) -> Target {
        Target::parse(url, &Access::default()).unwrap()
    }

    #[test]
    fn urls() {
        let t = target("http://pyroscope:4040");
        assert_eq!((t.hostport.as_str(), t.path.as_str(), t.host.as_str()), ("pyroscope:4040", PUSH_PATH, "pyroscope:4040"));
        let t = target("http://gw/prefix/");
        assert_eq!((t.hostport.as_str(), t.path.as_str()), ("gw:80", "/prefix/push.v1.PusherService/Push"));
        for bad in ["pyroscope:4040", "ftp://x", "http://u:p@x", "http://x:0", "http://x:99999", "http://:1", "http://x/a?b", "http://x y"]
        {
            assert!(Target::parse(bad, &Access::default()).is_err(), "{bad}");
        }
        let a = Access { ca_file: Some(Path::new("/x.pem")), ..Default::default() };
        assert!(Target::parse("http://x", &a).unwrap_err().to_string().contains("https"));
        let a = Access { user: Some("u"), ..Default::default() };
        assert!(Target::parse("https://x", &a).unwrap_err().to_string().contains("password-file"));
    }

    /// A server that answers one request with `answer` and hands back what it read.
    fn serve(answer: &'static [u8]) -> (String, std::thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = vec![];
            let mut b = [0u8; 4096];
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            while let Ok(n) = s.read(&mut b) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&b[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(b"BODY") {
                    break;
                }
            }
            let _ = s.write_all(answer);
            got
        });
        (url, h)
    }

    #[test]
    fn outcomes_by_status() {
        let cases: [(&'static [u8], Option<Outcome>); 5] = [
            (b"HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n", None),
            (
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 40\r\n\r\n{\"code\":\"invalid_argument\",\"message\":\"x\"}",
                Some(Outcome::Rejected),
            ),
            (b"HTTP/1.1 429 Too Many\r\nContent-Length: 0\r\n\r\n", Some(Outcome::Failed)),
            (b"HTTP/1.1 503 Unavailable\r\n\r\n", Some(Outcome::Failed)),
            (b"garbage\r\n\r\n", Some(Outcome::Unreachable)),
        ];
        for (answer, want) in cases {
            let (url, h) = serve(answer);
            let got = post(&target(&url), b"BODY", Duration::from_secs(5));
            assert_eq!(got.as_ref().err().map(|e| e.outcome), want, "{got:?}");
            let req = String::from_utf8(h.join().unwrap()).unwrap();
            assert!(req.starts_with("POST /push.v1.PusherService/Push HTTP/1.1\r\n"), "{req}");
            assert!(req.contains("Content-Type: application/proto\r\n") && req.contains("Content-Length: 4\r\n"), "{req}");
        }
    }

    #[test]
    fn a_silent_server_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let t0 = Instant::now();
        let e = post(&target(&url), b"BODY", Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.outcome, Outcome::Unreachable);
        assert!(t0.elapsed() < Duration::from_secs(3));
        drop(l);
        let e = post(&target(&url), b"BODY", Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.outcome, Outcome::Unreachable, "{}", e.message);
    }

    /// A server that answers a byte at a time, each well within the timeout, is cut off at
    /// the deadline of the whole push, not let run a timeout per byte (it held the push
    /// thread for minutes, every later push dropped as the queue filled).
    #[test]
    fn a_trickling_server_is_cut_off_at_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            for b in b"HTTP/1.1 200 OK\r\nX-Pad: ".iter().chain(std::iter::repeat(&b'a')) {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let t0 = Instant::now();
        let e = post(&target(&url), b"BODY", Duration::from_millis(500)).unwrap_err();
        assert_eq!(e.outcome, Outcome::Unreachable, "{}", e.message);
        assert!(t0.elapsed() < Duration::from_secs(2), "cut off after {:?}: {}", t0.elapsed(), e.message);
    }
}
