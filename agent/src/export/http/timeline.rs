//! `/debug/timeline?seconds=N[&pid=P][&format=html|trace]` (`run --timeline-minutes M`): the last
//! `seconds` of the state timeline the run loop keeps (`model::history`), as the one-file page of
//! one process (`format=html`, the default: `pid` may be left out when one process is watched)
//! or as a Chrome trace of every process or of `pid` (`format=trace`). The run loop renders it at
//! once from what it kept; at most `MAX_WAITING` requests wait for it at a time, one more is
//! answered 429 at once (a page of a busy process takes the loop a few hundred ms).
use std::sync::mpsc;

use waitmeter_formats::http as head;

use super::{answer, gzip, query_pairs, Answer, Body, Place, Shared, RENDER_TIMEOUT};

/// Timeline requests waiting for the run loop at once.
pub const MAX_WAITING: usize = 2;

/// What a view is rendered as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// the one-file page (report::html)
    Html,
    /// the Chrome trace-event JSON (report::trace)
    Trace,
}

/// What a timeline request asked for, and where its answer goes: the rendered bytes, or why not
/// (a line for the client).
pub struct Look {
    pub seconds: u64,
    pub pid: Option<u32>,
    pub format: Format,
    pub reply: mpsc::SyncSender<Result<Vec<u8>, String>>,
}

/// `seconds`, `pid`, `format` of the query; `keep_s`: the most a view reaches back.
fn query(q: Option<&str>, keep_s: u64) -> Result<(u64, Option<u32>, Format), String> {
    let (mut seconds, mut pid, mut format) = (keep_s.min(60), None, Format::Html);
    for (k, v) in query_pairs(q) {
        match k {
            "seconds" => {
                seconds = v
                    .parse()
                    .ok()
                    .filter(|s| (1..=keep_s).contains(s))
                    .ok_or(format!("seconds must be a whole number from 1 to {keep_s} (run --timeline-minutes keeps that much)"))?
            }
            "pid" => pid = Some(v.parse().ok().filter(|p| *p > 0).ok_or("pid must be a process ID")?),
            "format" => {
                format = match v {
                    "html" => Format::Html,
                    "trace" => Format::Trace,
                    _ => return Err("format must be html (the page) or trace (Chrome trace-event JSON)".into()),
                }
            }
            _ => {}
        }
    }
    Ok((seconds, pid, format))
}

/// The answer to a timeline request (authorized already).
pub(super) fn timeline(req: &head::Request<'_>, shared: &Shared) -> Answer {
    let Some((looks, keep_s)) = &shared.looks else {
        return answer(404, "no timeline is kept: run waitmeter run with --timeline-minutes N\n");
    };
    let (seconds, pid, format) = match query(req.query, *keep_s) {
        Ok(q) => q,
        Err(why) => return Answer { body: Body::Owned(format!("{why}\n")), ..answer(400, "") },
    };
    let Some(_place) = Place::take(&shared.looking, MAX_WAITING) else {
        let mut a = answer(429, "busy: a timeline is being rendered already: retry\n");
        a.headers.push(("Retry-After", "2".into()));
        return a;
    };
    let (tx, rx) = mpsc::sync_channel(1);
    if looks.lock().expect("look channel lock").send(Look { seconds, pid, format, reply: tx }).is_err() {
        return answer(503, "waitmeter is shutting down\n");
    }
    let body = match rx.recv_timeout(RENDER_TIMEOUT) {
        Ok(Ok(b)) => b,
        Ok(Err(why)) => return Answer { body: Body::Owned(format!("{why}\n")), ..answer(404, "") },
        Err(_) => return answer(503, "waitmeter is busy or shutting down: retry\n"),
    };
    let ctype = match format {
        Format::Html => "text/html; charset=utf-8",
        Format::Trace => "application/json",
    };
    // the page's own policy, as a header too: it loads nothing, and its script reaches nothing
    let mut headers = vec![
        ("Content-Type", ctype.to_string()),
        ("X-Content-Type-Options", "nosniff".into()),
        ("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:".into()),
        ("Vary", "Accept-Encoding".into()),
    ];
    if format == Format::Trace {
        headers.push(("Content-Disposition", "attachment; filename=\"timeline.json\"".into()));
    }
    let wants_gzip = head::quality(req.header("Accept-Encoding").unwrap_or(""), "gzip", Some("*")).is_some_and(|q| q > 0.0);
    let body = if wants_gzip {
        headers.push(("Content-Encoding", "gzip".into()));
        gzip(&body, flate2::Compression::fast())
    } else {
        body
    };
    Answer { code: 200, headers, body: Body::Bytes(body) }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpStream;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::super::{serve, Scrape};
    use super::*;

    #[test]
    fn views_come_from_the_run_loop_and_no_more_than_max_waiting_wait_for_it() {
        let (tx, _rx) = mpsc::channel::<Scrape>();
        let (ltx, lrx) = mpsc::channel::<Look>();
        let ep = serve("127.0.0.1:0", None, tx, None, Some((ltx, 120))).unwrap();
        // a run loop that answers the first view and keeps the rest waiting
        let held = Arc::new(Mutex::new(vec![]));
        let kept = Arc::clone(&held);
        std::thread::spawn(move || {
            for (i, l) in lrx.into_iter().enumerate() {
                if i == 0 {
                    let _ = l.reply.send(Ok(format!("<!doctype html>{} {:?}", l.seconds, l.pid).into_bytes()));
                } else {
                    kept.lock().unwrap().push(l);
                }
            }
        });
        let ask = |q: &str| {
            let mut s = TcpStream::connect(ep.addr).unwrap();
            std::io::Write::write_all(&mut s, format!("GET /debug/timeline{q} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
            s
        };
        let mut out = String::new();
        ask("?seconds=90&pid=7").read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200") && out.contains("text/html") && out.ends_with("<!doctype html>90 Some(7)"), "{out}");
        assert!(out.contains("Content-Security-Policy: default-src 'none'"), "{out}");
        let waiting: Vec<TcpStream> = (0..MAX_WAITING).map(|_| ask("")).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while held.lock().unwrap().len() < MAX_WAITING {
            assert!(Instant::now() < deadline, "the views were not asked for");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut out = String::new();
        ask("?seconds=5").read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 429") && out.contains("Retry-After"), "{out}");
        assert_eq!(held.lock().unwrap().len(), MAX_WAITING);
        let mut out = String::new();
        ask("?seconds=121").read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 400") && out.contains("from 1 to 120"), "{out}");
        drop(waiting);
    }

    #[test]
    fn a_query_is_checked_against_what_is_kept() {
        assert_eq!(query(None, 300), Ok((60, None, Format::Html)));
        assert_eq!(query(None, 30), Ok((30, None, Format::Html)));
        assert_eq!(query(Some("seconds=120&pid=42&format=trace"), 300), Ok((120, Some(42), Format::Trace)));
        assert!(query(Some("seconds=301"), 300).unwrap_err().contains("from 1 to 300"));
        assert!(query(Some("seconds=0"), 300).is_err());
        assert!(query(Some("pid=-1"), 300).is_err());
        assert!(query(Some("format=svg"), 300).unwrap_err().contains("html"));
    }
}
