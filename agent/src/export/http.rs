//! A minimal HTTP/1.1 endpoint for `/metrics`. The exposition is rendered by
//! the thread that owns the probes (scrape-time map reads): each scrape is a
//! request on a channel, answered with the text.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::Result;

use crate::usage;

/// Default listen address of `waitmeter run`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9747";
const MAX_CONNECTIONS: usize = 16;
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_REQUEST: usize = 16 * 1024;

/// A scrape waiting for its exposition text.
pub struct Scrape {
    pub reply: mpsc::SyncSender<String>,
}

/// Bind `addr` and serve in the background; returns the bound address.
pub fn serve(addr: &str, scrapes: mpsc::Sender<Scrape>) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| usage!("cannot listen on {addr}: {e}: pick a free address with --listen ADDR:PORT"))?;
    let bound = listener.local_addr()?;
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("http".into()).spawn(move || {
        for conn in listener.incoming() {
            let Ok(stream) = conn else { continue };
            if busy.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                continue; // dropped: the client sees a reset and retries
            }
            busy.fetch_add(1, Ordering::Relaxed);
            let busy = Arc::clone(&busy);
            let scrapes = scrapes.clone();
            let _ = std::thread::Builder::new().name("http-conn".into()).spawn(move || {
                if let Err(e) = handle(stream, &scrapes) {
                    log::debug!("http connection: {e}");
                }
                busy.fetch_sub(1, Ordering::Relaxed);
            });
        }
    })?;
    Ok(bound)
}

/// The request line's method and path, and whether OpenMetrics is accepted.
pub fn parse_request(head: &str) -> Option<(&str, &str, bool)> {
    let mut lines = head.lines();
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?;
    let path = first.next()?;
    let openmetrics = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("accept:") && l.contains("application/openmetrics-text")
    });
    Some((method, path.split('?').next().unwrap_or(path), openmetrics))
}

fn handle(mut stream: TcpStream, scrapes: &mpsc::Sender<Scrape>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let (status, ctype, body) = match parse_request(&head) {
        Some(("GET", "/metrics", om)) => {
            let (tx, rx) = mpsc::sync_channel(1);
            let text = scrapes.send(Scrape { reply: tx }).ok().and_then(|_| rx.recv_timeout(IO_TIMEOUT).ok());
            match text {
                Some(t) if om => ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", t),
                Some(t) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", super::prometheus::to_text_004(&t)),
                None => ("503 Service Unavailable", "text/plain", "waitmeter is shutting down\n".to_string()),
            }
        }
        Some(("GET", "/", _)) => (
            "200 OK",
            "text/html; charset=utf-8",
            "<html><body><h1>waitmeter</h1><p><a href=\"/metrics\">/metrics</a></p></body></html>\n".to_string(),
        ),
        Some(("GET", _, _)) => ("404 Not Found", "text/plain", "not found: try /metrics\n".to_string()),
        Some(_) => ("405 Method Not Allowed", "text/plain", "only GET\n".to_string()),
        None => ("400 Bad Request", "text/plain", "bad request\n".to_string()),
    };
    write!(stream, "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_lines() {
        assert_eq!(parse_request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Some(("GET", "/metrics", false)));
        assert_eq!(
            parse_request("GET /metrics?x=1 HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n"),
            Some(("GET", "/metrics", true))
        );
        assert_eq!(parse_request("POST / HTTP/1.1\r\n\r\n").map(|r| r.0), Some("POST"));
        assert_eq!(parse_request(""), None);
        assert_eq!(parse_request("GET\r\n"), None);
    }
}
