//! The agent's one HTTP/1.1 client: the age endpoint's poll (`age/scrape.rs`),
//! the Pyroscope push (`export/push.rs`) and the debuginfod fetch
//! (`stacks/debuginfod.rs`) connect, send and read the answer through it, under
//! one deadline for the whole exchange.
//!
//! Hand-written, not a client crate, for one reason: the answer comes from a
//! server that may be hostile or stuck, so every read is bounded in time (the
//! deadline's rest, not a timeout per read: a server trickling a byte at a time
//! cannot stretch it) and in size (the head, a chunk-size line, the body), and
//! parsed by `waitmeter_formats::http`, which is fuzzed.
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use waitmeter_formats::http as wire;

/// The longest chunk-size line of a chunked body.
const MAX_CHUNK_LINE: usize = 1024;

/// When an exchange must be over.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Deadline {
        Deadline { at: Instant::now() + timeout }
    }

    /// The time left, if any.
    pub fn left(&self) -> Option<Duration> {
        self.at.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }
}

/// Why an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// no address took the connection (or the request could not be sent)
    Connect(String),
    /// the deadline passed while at this stage
    Timeout(&'static str),
    /// a head or body over its bound
    TooLarge(String),
    /// not an answer: closed early, malformed, a read failed
    Bad(String),
}

/// A server's base URL, `http[s]://host[:port][/prefix]` (the Pyroscope push's, a debuginfod
/// server's): requests go to paths under the prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    pub tls: bool,
    /// the authority as written, for the Host header
    pub host: String,
    /// the host alone (brackets off an IPv6 address), for TLS to check
    pub name: String,
    /// `host:port` to connect to
    pub hostport: String,
    /// the path prefix, without a trailing slash ("" for none)
    pub prefix: String,
}

/// Why a base URL is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UrlError {
    Scheme,
    Characters,
    QueryOrFragment,
    /// the authority's (`waitmeter_formats::http::authority`), and whether it held credentials
    Authority(String, bool),
}

impl std::fmt::Display for UrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UrlError::Scheme => write!(f, "the URL must start with http:// or https://"),
            UrlError::Characters => write!(f, "the URL has a space or a non-ASCII or control character: percent-encode it"),
            UrlError::QueryOrFragment => write!(f, "the URL may have a path prefix but no query or fragment"),
            UrlError::Authority(e, _) => write!(f, "{e}"),
        }
    }
}

impl BaseUrl {
    pub fn parse(url: &str) -> Result<BaseUrl, UrlError> {
        let (tls, rest) = match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => (false, rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("https") => (true, rest),
            _ => return Err(UrlError::Scheme),
        };
        if url.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(UrlError::Characters);
        }
        if rest.contains(['?', '#']) {
            return Err(UrlError::QueryOrFragment);
        }
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) =
            wire::authority(authority, if tls { 443 } else { 80 }).map_err(|e| UrlError::Authority(e, authority.contains('@')))?;
        Ok(BaseUrl {
            tls,
            host: authority.to_string(),
            name: host.trim_start_matches('[').trim_end_matches(']').to_string(),
            hostport: format!("{host}:{port}"),
            prefix: prefix.to_string(),
        })
    }
}

/// A connection an exchange runs over: plain TCP, or TLS over it.
pub trait Stream: Read + Write {
    /// The socket under it, whose timeouts bound each read and write.
    fn socket(&self) -> &TcpStream;
}

impl Stream for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Connect to `hostport`, trying each of its addresses with the time left.
/// Name resolution has the system resolver's own timeouts (an IP address has none).
pub fn connect(hostport: &str, deadline: &Deadline) -> Result<TcpStream, Failure> {
    let addrs: Vec<SocketAddr> = hostport.to_socket_addrs().map_err(|e| Failure::Connect(format!("{hostport}: {e}")))?.collect();
    let mut last = format!("{hostport}: no address");
    for addr in addrs {
        let t = deadline.left().ok_or(Failure::Timeout("connecting"))?;
        match TcpStream::connect_timeout(&addr, t) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) if timed_out(&e) => return Err(Failure::Timeout("connecting")),
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(Failure::Connect(last))
}

/// Bound the next reads and writes by the time left.
fn bound(s: &impl Stream, deadline: &Deadline, stage: &'static str) -> Result<(), Failure> {
    let d = deadline.left().ok_or(Failure::Timeout(stage))?;
    let sock = s.socket();
    sock.set_read_timeout(Some(d)).and_then(|()| sock.set_write_timeout(Some(d))).map_err(|e| Failure::Connect(format!("{stage}: {e}")))
}

/// Send the request's parts.
pub fn send(s: &mut impl Stream, parts: &[&[u8]], deadline: &Deadline) -> Result<(), Failure> {
    let stage = "sending the request";
    bound(s, deadline, stage)?;
    let sent = parts.iter().try_for_each(|p| s.write_all(p)).and_then(|()| s.flush());
    sent.map_err(|e| if timed_out(&e) { Failure::Timeout(stage) } else { Failure::Connect(format!("{stage}: {e}")) })
}

/// An answer as read so far: its bytes, the head's among them.
pub struct Answer {
    buf: Vec<u8>,
    /// where the head ends (the body starts)
    head_end: usize,
}

impl Answer {
    /// The head, for `wire::parse_response`.
    pub fn head(&self) -> &[u8] {
        &self.buf[..self.head_end]
    }
}

/// One read, the deadline's rest at most: Ok(0) at the end of the connection.
fn read_some(s: &mut impl Stream, piece: &mut [u8], deadline: &Deadline, stage: &'static str) -> Result<usize, Failure> {
    loop {
        bound(s, deadline, stage)?;
        match s.read(piece) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if timed_out(&e) => return Err(Failure::Timeout(stage)),
            Err(e) => return Err(Failure::Bad(format!("{stage}: {e}"))),
        }
    }
}

/// Read until the answer's head is whole (`wire::MAX_HEAD` bytes at most).
pub fn read_head(s: &mut impl Stream, deadline: &Deadline) -> Result<Answer, Failure> {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut piece = vec![0u8; 64 * 1024];
    let mut scanner = wire::HeadScanner::default();
    loop {
        if let Some(head_end) = scanner.feed(&buf) {
            return Ok(Answer { buf, head_end });
        }
        if buf.len() > wire::MAX_HEAD {
            return Err(Failure::TooLarge(format!("a response head over {} bytes", wire::MAX_HEAD)));
        }
        let n = read_some(s, &mut piece, deadline, "waiting for the response head")?;
        if n == 0 {
            return Err(Failure::Bad(format!("the connection closed after {} bytes, before a whole head", buf.len())));
        }
        buf.extend_from_slice(&piece[..n]);
    }
}

/// How a body ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Framing {
    Length(usize),
    Chunked,
    /// at the end of the connection
    Close,
}

/// Why an answer's body cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// a Content-Encoding other than identity, a Transfer-Encoding other than chunked
    Encoding(String),
    /// a malformed or contradictory Content-Length
    Bad(String),
    /// a Content-Length over the bound
    TooLarge(String),
}

/// What is printable of text from the network (a header, a reason phrase), for a message.
pub fn printable(s: &str) -> String {
    s.chars().take(80).map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// How the body of an answer with these headers ends (identity encoding asked for; a body of
/// `max` bytes at most).
pub fn framing(headers: &[(&str, &str)], max: usize) -> Result<Framing, FramingError> {
    if let Some(ce) = wire::header(headers, "content-encoding").filter(|v| !v.eq_ignore_ascii_case("identity")) {
        return Err(FramingError::Encoding(format!("Content-Encoding: {} (identity was asked for)", printable(ce))));
    }
    if let Some(te) = wire::header(headers, "transfer-encoding") {
        return if te.eq_ignore_ascii_case("chunked") {
            Ok(Framing::Chunked)
        } else {
            Err(FramingError::Encoding(format!("Transfer-Encoding: {}", printable(te))))
        };
    }
    let mut length = None;
    for (_, v) in headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case("content-length")) {
        let n = (!v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit()))
            .then(|| v.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| FramingError::Bad(format!("Content-Length: {}", printable(v))))?;
        if length.is_some_and(|l| l != n) {
            return Err(FramingError::Bad("two different Content-Lengths".into()));
        }
        length = Some(n);
    }
    match length {
        Some(n) if n > max as u64 => Err(FramingError::TooLarge(format!("a body of {n} bytes (at most {max})"))),
        Some(n) => Ok(Framing::Length(n as usize)),
        None => Ok(Framing::Close),
    }
}

/// Read the body that follows the head, as `framing` says it ends, `max`
/// bytes at most (decoded).
pub fn read_body(s: &mut impl Stream, answer: Answer, framing: Framing, max: usize, deadline: &Deadline) -> Result<Vec<u8>, Failure> {
    let Answer { mut buf, head_end } = answer;
    // a body of known length is read into one allocation of its size (growing by doubling, a large
    // one would cost up to twice its size)
    if let Framing::Length(n) = framing {
        if n <= max {
            buf.reserve_exact((head_end + n).saturating_sub(buf.len()));
        }
    }
    let mut piece = vec![0u8; 64 * 1024];
    let mut chunks = Chunks::default();
    let too_large = || Failure::TooLarge(format!("a body over {max} bytes"));
    loop {
        let body = &buf[head_end..];
        let whole = match framing {
            Framing::Length(n) if n > max => return Err(too_large()),
            Framing::Length(n) => body.len() >= n,
            Framing::Chunked => {
                chunks.advance(body, max)?;
                chunks.done
            }
            Framing::Close if body.len() > max => return Err(too_large()),
            Framing::Close => false,
        };
        if whole {
            break;
        }
        // a chunked body may take twice its decoded size on the wire (tiny chunks)
        if body.len() > 2 * max + MAX_CHUNK_LINE {
            return Err(too_large());
        }
        let n = read_some(s, &mut piece, deadline, "reading the body")?;
        if n == 0 {
            break; // the server closed
        }
        buf.extend_from_slice(&piece[..n]);
    }
    buf.drain(..head_end);
    match framing {
        Framing::Length(n) if buf.len() < n => Err(Failure::Bad(format!("the body ended after {} of {n} bytes", buf.len()))),
        Framing::Length(n) => {
            buf.truncate(n);
            Ok(buf)
        }
        Framing::Chunked => match wire::dechunk_in_place(&mut buf, max) {
            true => Ok(buf),
            false => Err(Failure::Bad("a malformed or incomplete chunked body".into())),
        },
        Framing::Close => Ok(buf),
    }
}

/// Copy a body of `len` bytes (its Content-Length) that follows the head into `out` as it
/// arrives, never holding more than a read's worth: for bodies too large to hold (a debug file).
pub fn copy_body(s: &mut impl Stream, answer: Answer, len: u64, out: &mut dyn Write, deadline: &Deadline) -> Result<(), Failure> {
    let Answer { buf, head_end } = answer;
    let early = &buf[head_end..];
    let first = early.len().min(usize::try_from(len).unwrap_or(usize::MAX));
    let write = |out: &mut dyn Write, b: &[u8]| out.write_all(b).map_err(|e| Failure::Bad(format!("writing the body: {e}")));
    write(out, &early[..first])?;
    let mut left = len - first as u64;
    let mut piece = vec![0u8; 64 * 1024];
    while left > 0 {
        let want = piece.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = read_some(s, &mut piece[..want], deadline, "reading the body")?;
        if n == 0 {
            return Err(Failure::Bad(format!("the body ended after {} of {len} bytes", len - left)));
        }
        write(out, &piece[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// The start of the body, `max` bytes at most, for a log line: what came
/// before the deadline, the end of the connection or an error.
pub fn read_start(s: &mut impl Stream, answer: Answer, max: usize, deadline: &Deadline) -> Vec<u8> {
    let Answer { mut buf, head_end } = answer;
    let mut piece = [0u8; 4096];
    while buf.len() < head_end + max {
        match read_some(s, &mut piece, deadline, "reading the body") {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&piece[..n]),
        }
    }
    buf.drain(..head_end);
    buf.truncate(max);
    buf
}

/// Follows the chunks of a chunked body as they arrive, to know when it is
/// whole without waiting for the connection to close.
#[derive(Default)]
struct Chunks {
    /// offset of the next chunk-size line
    at: usize,
    done: bool,
}

impl Chunks {
    fn advance(&mut self, body: &[u8], max: usize) -> Result<(), Failure> {
        while !self.done {
            let Some(rest) = body.get(self.at..) else { return Ok(()) };
            let window = &rest[..rest.len().min(MAX_CHUNK_LINE)];
            let Some(nl) = window.windows(2).position(|w| w == b"\r\n") else {
                if rest.len() >= MAX_CHUNK_LINE {
                    return Err(Failure::Bad("a chunk-size line too long".into()));
                }
                return Ok(());
            };
            let size = wire::chunk_size(&rest[..nl]).ok_or_else(|| Failure::Bad("a malformed chunk size".into()))?;
            if size == 0 {
                self.done = true;
            } else {
                if size > max {
                    return Err(Failure::TooLarge(format!("a chunk of {size} bytes (the body may have {max} at most)")));
                }
                self.at += nl + 2 + size + 2;
            }
        }
        Ok(())
    }
}
