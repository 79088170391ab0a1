//! Where the names of the node's pods come from (`--pods`): a `v1.PodList`
//! fetched by a thread of its own, every `--pods-refresh` and sooner (at most
//! every `SOONEST`) when a process turns up in a container the last list did not
//! name. A scrape only reads the last list: a slow, stuck or hostile server
//! delays names, never a scrape. Every fetch is counted by its result
//! (`waitmeter_pod_list_fetches_total`); a failed one keeps the last list.
//!
//! - `api`: the API server, from inside the cluster (the service account's
//!   token and CA, `KUBERNETES_SERVICE_HOST`/`_PORT`), the pods of one node
//!   (`fieldSelector=spec.nodeName=<--node-name>`): RBAC `list` on `pods`.
//! - a URL: anything that answers a PodList, e.g. the kubelet's
//!   `https://<node>:10250/pods` (its authorizer asks for `nodes/proxy`).
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustls::pki_types::ServerName;
use waitmeter_formats::http as wire;

use super::pods::{self, PodNames};
use crate::http_client::{self as client, Deadline, Failure};

/// A fresh list at the refresh interval (`--pods-refresh`), or this soon after
/// the last when a container was not in it.
pub const SOONEST: Duration = Duration::from_secs(5);
/// One fetch, connect to last byte.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest list taken (a node's 110 pods are about 1 MiB).
pub const MAX_BODY: usize = 64 << 20;
/// Containers remembered as asked for (then forgotten all at once).
const MAX_ASKED: usize = 4096;

/// The service account's files in a pod.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How a fetch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetched {
    Ok,
    /// no connection (refused, unreachable, no such host, TLS failed)
    Unreachable,
    /// no whole answer within `TIMEOUT`
    Timeout,
    /// 401 or 403: the token is missing, expired or lacks the right
    Forbidden,
    /// another status than 200
    HttpStatus,
    /// an answer over `MAX_BODY`
    TooLarge,
    /// not well-formed HTTP, or not a PodList
    BadResponse,
}

impl Fetched {
    pub const ALL: [Fetched; 7] = [
        Fetched::Ok,
        Fetched::Unreachable,
        Fetched::Timeout,
        Fetched::Forbidden,
        Fetched::HttpStatus,
        Fetched::TooLarge,
        Fetched::BadResponse,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fetched::Ok => "ok",
            Fetched::Unreachable => "unreachable",
            Fetched::Timeout => "timeout",
            Fetched::Forbidden => "forbidden",
            Fetched::HttpStatus => "http_status",
            Fetched::TooLarge => "too_large",
            Fetched::BadResponse => "bad_response",
        }
    }
}

/// Where to fetch the list, checked once at start.
pub struct Source {
    /// as the log shows it
    pub url: String,
    hostport: String,
    host: String,
    /// path and query
    path: String,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// a bearer token, read again for every fetch (service account tokens rotate)
    token_file: Option<PathBuf>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source").field("url", &self.url).field("path", &self.path).finish()
    }
}

/// A node name as Kubernetes writes it (a DNS subdomain).
fn node_name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 253 && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

impl Source {
    /// The source `--pods` names: "off", "auto" (the API server when in a pod with a node
    /// name and a service account, else none), "api", or a URL.
    pub fn choose(
        pods: &str,
        node: Option<&str>,
        token_file: Option<&Path>,
        ca_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Source>> {
        let node_needed = || node.context("--pods api needs --node-name (or NODE_NAME): the node whose pods to list");
        match pods {
            "off" => Ok(None),
            "auto" => {
                let in_cluster = env("KUBERNETES_SERVICE_HOST").is_some();
                let token = Path::new(SA_DIR).join("token").exists();
                match node {
                    Some(n) if in_cluster && token => Source::api(n, env).map(Some),
                    Some(_) if in_cluster => {
                        log::warn!("--pods auto: no service account token at {SA_DIR}: containers go without pod names (the chart's podNames mounts it)");
                        Ok(None)
                    }
                    _ => Ok(None),
                }
            }
            "api" => Source::api(node_needed()?, env).map(Some),
            url if url.contains("://") => Source::url(url, token_file, ca_file).map(Some),
            other => bail!("--pods `{other}`: give auto, api, off or an http(s):// URL of a pod list"),
        }
    }

    /// The API server seen from inside the cluster, the pods of `node`.
    pub fn api(node: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Source> {
        if !node_name_ok(node) {
            bail!("--node-name `{node}` is not a Kubernetes node name (lowercase letters, digits, '-' and '.')");
        }
        let (Some(host), Some(port)) = (env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT")) else {
            bail!("--pods api needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set in every pod): run it in the cluster, or give --pods a URL");
        };
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        let url = format!("https://{host}:{port}/api/v1/pods?fieldSelector=spec.nodeName%3D{node}");
        let sa = Path::new(SA_DIR);
        Source::url(&url, Some(&sa.join("token")), Some(&sa.join("ca.crt")))
    }

    /// Any URL that answers a PodList; a token only over https.
    pub fn url(url: &str, token_file: Option<&Path>, ca_file: Option<&Path>) -> Result<Source> {
        // BaseUrl takes no query: split it off and check it alone
        let (base_part, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        if query.is_some_and(|q| q.bytes().any(|b| b <= b' ' || b >= 0x7f || b == b'#')) {
            bail!("--pods `{url}`: the query has a space, '#' or a non-ASCII character: percent-encode it");
        }
        let base = client::BaseUrl::parse(base_part).map_err(|e| anyhow::anyhow!("--pods `{url}`: {e}"))?;
        let tls = if base.tls {
            let name = crate::tls::server_name(&base.name)?;
            Some((crate::tls::client_config(ca_file, "--pods-ca-file")?, name))
        } else {
            if token_file.is_some() {
                bail!("--pods `{url}`: a token is sent only over https: give an https:// URL");
            }
            if ca_file.is_some() {
                bail!("--pods-ca-file is for https:// URLs");
            }
            None
        };
        if let Some(f) = token_file {
            read_token(f)?;
        }
        let path = match query {
            Some(q) => format!("{}?{q}", if base.prefix.is_empty() { "/" } else { &base.prefix }),
            None if base.prefix.is_empty() => "/".to_string(),
            None => base.prefix.clone(),
        };
        Ok(Source {
            url: url.to_string(),
            hostport: base.hostport,
            host: base.host,
            path,
            tls,
            token_file: token_file.map(Path::to_path_buf),
        })
    }

    /// GET the list, within `timeout`.
    pub fn fetch(&self, timeout: Duration) -> std::result::Result<PodNames, (Fetched, String)> {
        let failed = |f: Failure| match f {
            Failure::Connect(e) => (Fetched::Unreachable, e),
            Failure::Timeout(stage) => (Fetched::Timeout, format!("no answer within {:.0} s ({stage})", timeout.as_secs_f64())),
            Failure::TooLarge(e) => (Fetched::TooLarge, e),
            Failure::Bad(e) => (Fetched::BadResponse, e),
        };
        let mut head =
            format!("GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nAccept-Encoding: identity\r\n", self.path, self.host);
        head.push_str(&format!("User-Agent: waitmeter/{}\r\nConnection: close\r\n", env!("CARGO_PKG_VERSION")));
        if let Some(f) = &self.token_file {
            let token = read_token(f).map_err(|e| (Fetched::Forbidden, format!("{e:#}")))?;
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        let deadline = Deadline::after(timeout);
        let sock = client::connect(&self.hostport, &deadline).map_err(failed)?;
        let mut conn = match &self.tls {
            None => crate::tls::Conn::Plain(sock),
            Some((cfg, name)) => {
                let c = rustls::ClientConnection::new(Arc::clone(cfg), name.clone())
                    .map_err(|e| (Fetched::Unreachable, format!("TLS: {e}")))?;
                crate::tls::Conn::Tls(Box::new(rustls::StreamOwned::new(c, sock)))
            }
        };
        client::send(&mut conn, &[head.as_bytes()], &deadline).map_err(failed)?;
        let answer = client::read_head(&mut conn, &deadline).map_err(failed)?;
        let r = wire::parse_response(answer.head()).map_err(|e| (Fetched::BadResponse, format!("its head: {e}")))?;
        match r.status {
            200 => {}
            401 | 403 => {
                return Err((Fetched::Forbidden, format!("HTTP {}: the token lacks `list` on pods (see the chart's RBAC)", r.status)))
            }
            s => return Err((Fetched::HttpStatus, format!("HTTP {s}"))),
        }
        let framing = client::framing(&r.headers, MAX_BODY).map_err(|e| match e {
            client::FramingError::TooLarge(e) => (Fetched::TooLarge, e),
            client::FramingError::Encoding(e) | client::FramingError::Bad(e) => (Fetched::BadResponse, e),
        })?;
        let body = client::read_body(&mut conn, answer, framing, MAX_BODY, &deadline).map_err(failed)?;
        pods::parse(&body).map_err(|e| (Fetched::BadResponse, e))
    }
}

/// A bearer token file's token: one line of printable ASCII.
fn read_token(f: &Path) -> Result<String> {
    let t = std::fs::read_to_string(f).with_context(|| format!("cannot read the token file {}", f.display()))?;
    let t = t.trim();
    if t.is_empty() || t.len() > 16 * 1024 || t.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        bail!("the token file {} does not hold one token of printable ASCII", f.display());
    }
    Ok(t.to_string())
}

/// Fetches by result, and entries of the lists skipped as malformed.
#[derive(Default)]
pub struct Stats {
    by: [AtomicU64; Fetched::ALL.len()],
    skipped: AtomicU64,
}

impl Stats {
    pub fn by_result(&self) -> Vec<(&'static str, u64)> {
        Fetched::ALL.iter().map(|r| (r.name(), self.by[*r as usize].load(Ordering::Relaxed))).collect()
    }

    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}

/// The last list and what became of the fetches, shared with the scrapes.
pub struct Directory {
    names: Mutex<Arc<PodNames>>,
    pub stats: Stats,
    want: SyncSender<()>,
    /// containers asked for already
    asked: Mutex<HashSet<String>>,
}

impl Directory {
    /// The last list (empty before the first one).
    pub fn names(&self) -> Arc<PodNames> {
        Arc::clone(&self.names.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The last list, waiting up to `patience` for the first fetch to end when none has yet
    /// (`attach` and `dump`, whose window may be shorter than a fetch).
    pub fn names_within(&self, patience: Duration) -> Arc<PodNames> {
        let deadline = Instant::now() + patience;
        while self.stats.by.iter().all(|n| n.load(Ordering::Relaxed) == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.names()
    }

    /// A container of a pod the last list did not name: fetch again soon, once per container
    /// (one the API server never names costs one early fetch, not one every `SOONEST`).
    pub fn ask(&self, container_id: &str) {
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if asked.len() >= MAX_ASKED {
            asked.clear();
        }
        if asked.insert(container_id.to_string()) {
            match self.want.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
    }

    /// Start fetching from `source` in a thread of its own.
    pub fn start(source: Source, refresh: Duration) -> Result<Arc<Directory>> {
        let soonest = SOONEST.min(refresh);
        let (want, asked) = mpsc::sync_channel(1);
        let dir = Arc::new(Directory {
            names: Mutex::new(Arc::new(PodNames::default())),
            stats: Stats::default(),
            want,
            asked: Mutex::new(HashSet::new()),
        });
        let shared = Arc::clone(&dir);
        std::thread::Builder::new().name("waitmeter-pods".into()).spawn(move || {
            let mut failing: Option<Fetched> = None;
            // a list past the bounds is said once (its drops count at every fetch)
            let mut said_dropped = false;
            loop {
                let started = Instant::now();
                match source.fetch(TIMEOUT) {
                    Ok(list) => {
                        shared.stats.by[Fetched::Ok as usize].fetch_add(1, Ordering::Relaxed);
                        shared.stats.skipped.fetch_add(list.skipped + list.dropped, Ordering::Relaxed);
                        if failing.take().is_some() || shared.stats.by[Fetched::Ok as usize].load(Ordering::Relaxed) == 1 {
                            log::info!("the pod list from {}: {} pods, {} containers", source.url, list.pods(), list.containers());
                        }
                        if list.dropped > 0 && !std::mem::replace(&mut said_dropped, true) {
                            log::warn!(
                                "the pod list from {} names more than waitmeter keeps ({} pods, {} containers, {} a pod): {} entries dropped, their containers unnamed; point --pods at this node's pods only",
                                source.url,
                                super::pods::MAX_PODS,
                                super::pods::MAX_CONTAINERS,
                                super::pods::MAX_STATUSES_PER_POD,
                                list.dropped
                            );
                        }
                        *shared.names.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(list);
                    }
                    Err((r, why)) => {
                        shared.stats.by[r as usize].fetch_add(1, Ordering::Relaxed);
                        // said once per kind of failure, not at every fetch
                        if failing != Some(r) {
                            log::warn!(
                                "cannot read the pod list from {}: {why}; series keep their container_id without pod names (counted in waitmeter_pod_list_fetches_total{{result=\"{}\"}})",
                                source.url,
                                r.name()
                            );
                            failing = Some(r);
                        }
                    }
                }
                // the next fetch: at the refresh interval, or at `soonest` when asked meanwhile
                let mut asked_for = false;
                loop {
                    let since = started.elapsed();
                    if since >= refresh || (asked_for && since >= soonest) {
                        break;
                    }
                    let wait = if asked_for { soonest - since } else { refresh - since };
                    match asked.recv_timeout(wait) {
                        Ok(()) => asked_for = true,
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            }
        })?;
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A server that answers one request with `answer` (None: never answers) and hands back the
    /// request it read.
    fn serve(answer: Option<Vec<u8>>) -> (String, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", l.local_addr().unwrap());
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = vec![];
            let mut b = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&b[..n]),
                }
            }
            match answer {
                Some(a) => {
                    let _ = s.write_all(&a);
                }
                None => std::thread::sleep(Duration::from_millis(800)),
            }
            String::from_utf8_lossy(&got).into_owned()
        });
        (url, h)
    }

    fn answer(status: &str, body: &str) -> Vec<u8> {
        format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[test]
    fn every_answer_has_its_result() {
        let list = r#"{"kind":"PodList","items":[{"metadata":{"name":"p","namespace":"n","uid":"u"},"status":{"containerStatuses":[{"name":"c","containerID":"containerd://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]}}]}"#;
        let (url, h) = serve(Some(answer("200 OK", list)));
        let got = Source::url(&url, None, None).unwrap().fetch(Duration::from_secs(5)).unwrap();
        assert_eq!(got.container(&"a".repeat(64)).map(|n| n.container.as_str()), Some("c"));
        let req = h.join().unwrap();
        assert!(req.starts_with("GET /api/v1/pods?fieldSelector=spec.nodeName%3Dn1 HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("Accept: application/json\r\n") && !req.contains("Authorization"), "{req}");
        let chunked = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{list}\r\n0\r\n\r\n", list.len());
        let cases: [(Option<Vec<u8>>, Option<Fetched>); 7] = [
            (Some(chunked.into_bytes()), None),
            (Some(answer("403 Forbidden", "{}")), Some(Fetched::Forbidden)),
            (Some(answer("401 Unauthorized", "")), Some(Fetched::Forbidden)),
            (Some(answer("500 Internal Server Error", "")), Some(Fetched::HttpStatus)),
            (Some(answer("200 OK", "<html>not a pod list</html>")), Some(Fetched::BadResponse)),
            (Some(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n".to_vec()), Some(Fetched::TooLarge)),
            (None, Some(Fetched::Timeout)),
        ];
        for (a, want) in cases {
            let (url, h) = serve(a);
            let got = Source::url(&url, None, None).unwrap().fetch(Duration::from_millis(400));
            assert_eq!(got.as_ref().err().map(|e| e.0), want, "{:?}", got.err());
            h.join().unwrap();
        }
        // nobody listening
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/pods", l.local_addr().unwrap());
        drop(l);
        assert_eq!(Source::url(&url, None, None).unwrap().fetch(Duration::from_secs(2)).unwrap_err().0, Fetched::Unreachable);
    }

    #[test]
    fn sources() {
        let env = |k: &str| match k {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
            "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
            _ => None,
        };
        // no service account here: the token is read at start, and its absence said
        let e = Source::api("node-1", &env).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(e.contains("token file") || e.contains("CA certificates"), "{e}");
        assert!(Source::api("Node_1", &env).is_err());
        assert!(Source::api("node-1", &|_| None).unwrap_err().to_string().contains("KUBERNETES_SERVICE_HOST"));
        assert!(Source::choose("off", Some("n"), None, None, &env).unwrap().is_none());
        // auto: not in a pod here (no service account), so none, quietly
        assert!(Source::choose("auto", Some("n"), None, None, &env).unwrap().is_none());
        assert!(Source::choose("api", None, None, None, &env).unwrap_err().to_string().contains("--node-name"));
        assert!(Source::choose("kubelet", None, None, None, &env).unwrap_err().to_string().contains("auto, api, off"));
        assert!(Source::choose("http://127.0.0.1:1/pods", None, None, None, &env).unwrap().is_some());
        let s = Source::url("http://127.0.0.1:8080/pods", None, None).unwrap();
        assert_eq!((s.hostport.as_str(), s.path.as_str(), s.host.as_str()), ("127.0.0.1:8080", "/pods", "127.0.0.1:8080"));
        let s = Source::url("http://k:1/api/v1/pods?fieldSelector=spec.nodeName%3Dn", None, None).unwrap();
        assert_eq!(s.path, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn");
        assert_eq!(Source::url("http://k:1", None, None).unwrap().path, "/");
        // a token never goes over plain http
        let tok = std::env::temp_dir().join(format!("waitmeter-token-{}", std::process::id()));
        std::fs::write(&tok, "abc\n").unwrap();
        assert!(Source::url("http://k:1/pods", Some(&tok), None).unwrap_err().to_string().contains("https"));
        std::fs::write(&tok, "two words\n").unwrap();
        assert!(read_token(&tok).is_err());
        std::fs::remove_file(&tok).unwrap();
        for bad in ["k:1/pods", "ftp://k/pods", "http://k/a b", "http://k/pods?a b", "http://k/pods?a#b"] {
            assert!(Source::url(bad, None, None).is_err(), "{bad}");
        }
    }
}
