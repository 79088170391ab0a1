//! HTTP/1.x message heads from the network: the requests waitmeter's
//! endpoint receives and the responses of the application endpoints it polls
//! for the age. Strict where leniency is a smuggling or exhaustion risk (no
//! obsolete line folding, no whitespace before a header's colon, bounded size
//! and header count), lenient where clients differ harmlessly (bare `\n` line
//! ends, case of header names).
use thiserror::Error;

/// Longest request or response head accepted (Go's net/http allows 1 MiB;
/// a scrape request is a few hundred bytes).
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header fields in one head.
pub const MAX_HEADERS: usize = 64;

#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
pub enum HeadError {
    #[error("the head is larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("malformed {0}")]
    Malformed(&'static str),
    #[error("not HTTP/1.x")]
    Version,
}

/// A parsed request head; every `&str` borrows from the input.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    /// the path of the request target, without the query
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// the `x` of HTTP/1.x
    pub minor: u8,
    pub headers: Vec<(&'a str, &'a str)>,
}

/// A parsed response head.
#[derive(Debug, PartialEq, Eq)]
pub struct Response<'a> {
    pub status: u16,
    pub reason: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
}

/// Where the head in `buf` ends: the index just past its blank line, once
/// it has arrived. Bare `\n` line ends are accepted (RFC 9112 §2.2).
pub fn head_end(buf: &[u8]) -> Option<usize> {
    HeadScanner::default().feed(buf)
}

/// `head_end` for a head that arrives in pieces: each call scans only what
/// is new since the last complete line (a head trickled byte by byte costs
/// linear time, not quadratic).
#[derive(Debug, Default)]
pub struct HeadScanner {
    line_start: usize,
}

impl HeadScanner {
    /// `buf` is everything received so far (it only grows between calls).
    pub fn feed(&mut self, buf: &[u8]) -> Option<usize> {
        while let Some(nl) = buf.get(self.line_start..)?.iter().position(|b| *b == b'\n') {
            let line_end = self.line_start + nl;
            let line = &buf[self.line_start..line_end];
            self.line_start = line_end + 1;
            if line.is_empty() || line == b"\r" {
                return Some(line_end + 1);
            }
        }
        None
    }
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// Lines of a head (without the blank line that ends it), `\r` trimmed.
fn lines(head: &[u8]) -> Result<Vec<&str>, HeadError> {
    if head.len() > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| HeadError::Malformed("bytes (not UTF-8)"))?;
    let mut out = vec![];
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            break;
        }
        // bare CR and other control characters are a request-smuggling vector
        if line.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(HeadError::Malformed("control character"));
        }
        out.push(line);
    }
    if out.is_empty() {
        return Err(HeadError::Malformed("empty head"));
    }
    Ok(out)
}

fn headers<'a>(lines: &[&'a str]) -> Result<Vec<(&'a str, &'a str)>, HeadError> {
    if lines.len() > MAX_HEADERS {
        return Err(HeadError::TooManyHeaders);
    }
    lines
        .iter()
        .map(|l| {
            if l.starts_with([' ', '\t']) {
                return Err(HeadError::Malformed("header (obsolete line folding)"));
            }
            let (name, value) = l.split_once(':').ok_or(HeadError::Malformed("header (no colon)"))?;
            if !is_token(name) {
                return Err(HeadError::Malformed("header name"));
            }
            Ok((name, value.trim_matches([' ', '\t'])))
        })
        .collect()
}

fn minor_version(v: &str) -> Result<u8, HeadError> {
    match v.strip_prefix("HTTP/1.") {
        Some(m) if m.len() == 1 && m.as_bytes()[0].is_ascii_digit() => Ok(m.as_bytes()[0] - b'0'),
        _ if v.starts_with("HTTP/") => Err(HeadError::Version),
        _ => Err(HeadError::Malformed("version")),
    }
}

/// Parse a request head (what `head_end` delimits, or a prefix of it).
pub fn parse_request(head: &[u8]) -> Result<Request<'_>, HeadError> {
    let lines = lines(head)?;
    let mut parts = lines[0].split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(HeadError::Malformed("request line"));
    };
    if !is_token(method) {
        return Err(HeadError::Malformed("method"));
    }
    let minor = minor_version(version)?;
    // origin-form (/path?query), or absolute-form (http://host/path?query)
    let origin = match target.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
            rest.find('/').map_or("/", |i| &rest[i..])
        }
        _ if target.starts_with('/') => target,
        _ if target == "*" => target,
        _ => return Err(HeadError::Malformed("request target")),
    };
    if origin.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err(HeadError::Malformed("request target"));
    }
    let (path, query) = match origin.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (origin, None),
    };
    Ok(Request { method, path, query, minor, headers: headers(&lines[1..])? })
}

/// Parse a response head.
pub fn parse_response(head: &[u8]) -> Result<Response<'_>, HeadError> {
    let lines = lines(head)?;
    let mut parts = lines[0].splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(HeadError::Malformed("status line"));
    };
    minor_version(version)?;
    let status = match code.as_bytes() {
        [a, b, c] if code.bytes().all(|d| d.is_ascii_digit()) && *a != b'0' => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return Err(HeadError::Malformed("status code")),
    };
    Ok(Response { status, reason: parts.next().unwrap_or(""), headers: headers(&lines[1..])? })
}

/// The first value of header `name` (case-insensitive).
pub fn header<'a>(headers: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
}

impl<'a> Request<'a> {
    pub fn header(&self, name: &str) -> Option<&'a str> {
        header(&self.headers, name)
    }
}

/// The quality (0..=1) a comma-separated preference list (`Accept`,
/// `Accept-Encoding`) gives `item`; `item` matches an entry equal to it
/// (case-insensitive, parameters other than `q` ignored), else the wildcard
/// `wildcard` when given. None when the list does not mention it.
pub fn quality(list: &str, item: &str, wildcard: Option<&str>) -> Option<f32> {
    let mut exact = None;
    let mut wild = None;
    for entry in list.split(',') {
        let mut params = entry.split(';');
        let name = params.next().unwrap_or("").trim();
        let q = params
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                (k.trim().eq_ignore_ascii_case("q")).then(|| v.trim().parse::<f32>().ok())?
            })
            .next()
            .filter(|q| (0.0..=1.0).contains(q))
            .unwrap_or(1.0);
        if name.eq_ignore_ascii_case(item) {
            exact = Some(exact.map_or(q, |e: f32| e.max(q)));
        } else if wildcard.is_some_and(|w| name == w) {
            wild = Some(q);
        }
    }
    exact.or(wild)
}

/// The size a chunk-size line gives (hex digits, then `;` extensions that
/// are ignored); None when it is malformed or larger than 16 hex digits.
pub fn chunk_size(line: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(line).ok()?.split(';').next()?.trim();
    if text.is_empty() || text.len() > 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    usize::from_str_radix(text, 16).ok()
}

/// Decode a `Transfer-Encoding: chunked` body; None when it is malformed,
/// truncated, or would decode to more than `max` bytes.
pub fn dechunk(body: &[u8], max: usize) -> Option<Vec<u8>> {
    let mut out = body.to_vec();
    dechunk_in_place(&mut out, max).then_some(out)
}

/// Decode a `Transfer-Encoding: chunked` body in its own buffer (each chunk
/// moved down over the framing before it: a body costs its wire size once,
/// not twice); false, the buffer's content unspecified, when it is
/// malformed, truncated, or would decode to more than `max` bytes.
pub fn dechunk_in_place(buf: &mut Vec<u8>, max: usize) -> bool {
    let (mut read, mut write) = (0usize, 0usize);
    loop {
        let Some(nl) = buf[read..].windows(2).position(|w| w == b"\r\n") else { return false };
        let Some(size) = chunk_size(&buf[read..read + nl]) else { return false };
        read += nl + 2;
        if size == 0 {
            buf.truncate(write);
            return true;
        }
        let (Some(total), Some(end)) = (write.checked_add(size), read.checked_add(size)) else { return false };
        if total > max || buf.get(end..end.saturating_add(2)) != Some(&b"\r\n"[..]) {
            return false;
        }
        buf.copy_within(read..end, write);
        write = total;
        read = end + 2;
    }
}

/// Host and port of a URL's authority (`host`, `host:port`, `[v6]:port`):
/// the port `default` when absent. Credentials (`user@`) are refused: the
/// caller says where they go instead. Errors are a phrase for a message.
pub fn authority(a: &str, default: u16) -> Result<(&str, u16), String> {
    if a.contains('@') {
        return Err("credentials in the URL are not taken".into());
    }
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (a, None),
    };
    if host.is_empty() || host == "[]" {
        return Err("no host in the URL".into());
    }
    let port = match port {
        None => default,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("bad port `{}` in the URL", p.chars().take(16).collect::<String>())),
        },
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let r = parse_request(b"GET /metrics?name[]=x HTTP/1.1\r\nHost: a:1\r\nAccept:  text/plain \r\n\r\n").unwrap();
        assert_eq!((r.method, r.path, r.query, r.minor), ("GET", "/metrics", Some("name[]=x"), 1));
        assert_eq!(r.header("accept"), Some("text/plain"));
        assert_eq!(r.header("HOST"), Some("a:1"));
        // bare LF line ends, HTTP/1.0, absolute form
        let r = parse_request(b"HEAD http://h:9747/healthz HTTP/1.0\n\n").unwrap();
        assert_eq!((r.method, r.path, r.minor), ("HEAD", "/healthz", 0));
        assert_eq!(parse_request(b"GET http://h HTTP/1.1\r\n\r\n").unwrap().path, "/");
    }

    #[test]
    fn bad_requests_are_errors() {
        for bad in [
            &b""[..],
            b"\r\n",
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics HTTP/1.1 x\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nnocolon\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
            b"GET /\xff HTTP/1.1\r\n\r\n",
            b"GET / FTP/1.0\r\n\r\n",
        ] {
            assert!(parse_request(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_request(b"GET / HTTP/2.0\r\n\r\n"), Err(HeadError::Version));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(MAX_HEADERS + 1));
        assert_eq!(parse_request(many.as_bytes()), Err(HeadError::TooManyHeaders));
        let big = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(parse_request(big.as_bytes()), Err(HeadError::TooLarge));
    }

    #[test]
    fn head_ends() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
        assert_eq!(head_end(b""), None);
        // the same head in pieces
        let full = b"GET / HTTP/1.1\r\nA: b\r\n\r\n";
        let mut sc = HeadScanner::default();
        let ends: Vec<Option<usize>> = (1..=full.len()).map(|n| sc.feed(&full[..n])).collect();
        assert!(ends[..full.len() - 1].iter().all(Option::is_none));
        assert_eq!(ends[full.len() - 1], Some(24));
    }

    #[test]
    fn responses() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n").unwrap();
        assert_eq!((r.status, r.reason), (200, "OK"));
        assert_eq!(header(&r.headers, "content-type"), Some("text/plain"));
        assert_eq!(parse_response(b"HTTP/1.0 503\r\n\r\n").unwrap().status, 503);
        assert!(parse_response(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 +20 OK\r\n\r\n").is_err());
        assert!(parse_response(b"<html>\r\n\r\n").is_err());
    }

    #[test]
    fn qualities() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(quality(prom, "application/openmetrics-text", Some("*/*")), Some(1.0));
        assert_eq!(quality(prom, "text/plain", Some("*/*")), Some(0.5));
        assert_eq!(quality("gzip;q=0, br", "gzip", Some("*")), Some(0.0));
        assert_eq!(quality("deflate, *;q=0.3", "gzip", Some("*")), Some(0.3));
        assert_eq!(quality("deflate", "gzip", Some("*")), None);
        assert_eq!(quality("GZIP;Q=0.8", "gzip", None), Some(0.8));
        assert_eq!(quality("gzip;q=7", "gzip", None), Some(1.0));
    }

    #[test]
    fn chunked_bodies() {
        assert_eq!(dechunk(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 100).unwrap(), b"hello world");
        assert_eq!(dechunk(b"5;ext=1\r\nhello\r\n0\r\n\r\n", 100).unwrap(), b"hello");
        assert_eq!(dechunk(b"zz\r\n", 100), None);
        assert_eq!(dechunk(b"5\r\nhi", 100), None);
        assert_eq!(dechunk(b"5\r\nhelloXX0\r\n\r\n", 100), None);
        assert_eq!(dechunk(b"5\r\nhello\r\n0\r\n\r\n", 4), None);
        // a size near usize::MAX must not overflow
        assert_eq!(dechunk(b"ffffffffffffffff\r\nx\r\n0\r\n\r\n", usize::MAX), None);
        assert_eq!(dechunk(b"fffffffffffffffff\r\nx\r\n", usize::MAX), None);
        assert_eq!(chunk_size(b"1a;name=v"), Some(26));
        assert_eq!(chunk_size(b"+5"), None);
        assert_eq!(chunk_size(b""), None);
    }

    #[test]
    fn authorities() {
        assert_eq!(authority("h", 80), Ok(("h", 80)));
        assert_eq!(authority("h:4040", 80), Ok(("h", 4040)));
        assert_eq!(authority("[::1]:9", 80), Ok(("[::1]", 9)));
        assert_eq!(authority("[::1]", 443), Ok(("[::1]", 443)));
        for bad in ["", ":1", "[]", "h:0", "h:65536", "h:+1", "u:p@h", "h:"] {
            assert!(authority(bad, 80).is_err(), "{bad}");
        }
    }
}
