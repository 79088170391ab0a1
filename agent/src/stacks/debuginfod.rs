//! Debug files from a debuginfod server, for stripped objects the system has none for.
//!
//! When `DEBUGINFOD_URLS` names servers (space-separated, as elfutils, gdb and perf read it), a
//! stripped object whose build ID has no local debug file (`/usr/lib/debug/.build-id/`) is asked
//! for, `GET URL/buildid/HEX/debuginfo`, by one background thread: never on the naming path,
//! which uses the file once it is there (its frames are named again then). Files are cached as
//! elfutils caches them, `$DEBUGINFOD_CACHE_PATH` or `$XDG_CACHE_HOME/debuginfod_client` or
//! `~/.cache/debuginfod_client`, at `HEX/debuginfo`, so the agent, gdb and perf share them.
//!
//! The server is not trusted: an answer must be 200 with a Content-Length under the bound
//! (`MAX_FILE`), is streamed to a temporary file beside its place (never held in memory), must be
//! an ELF file with the build ID asked for, and only then is renamed into place; anything else is
//! deleted and counted (`debuginfod_refused`), an unreachable server or a missing file counted
//! apart (`debuginfod_failed`). Each build ID is asked for once per run. A download the agent
//! leaves unfinished (it exits) is deleted as it exits; one a killed agent left behind is deleted
//! by the next fetch of that build ID, once older than a fetch may take.
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rustls::pki_types::ServerName;
use waitmeter_formats::elf::Elf;
use waitmeter_formats::http as wire;

use crate::http_client::{self as client, Deadline, Failure};
use crate::python::binary::FileSource;

/// The largest debug file taken (libjvm's is ~250 MiB; the C library's ~5 MiB).
const MAX_FILE: u64 = 512 << 20;
/// One fetch's time, all of it.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Build IDs waiting to be asked for.
const QUEUE: usize = 256;

/// One server: `http[s]://host[:port][/prefix]`.
#[derive(Clone)]
struct Server {
    url: String,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    hostport: String,
    host: String,
    prefix: String,
}

fn server(url: &str) -> Result<Server> {
    let base = client::BaseUrl::parse(url).map_err(|e| anyhow::anyhow!("`{url}`: {e}"))?;
    let tls = match base.tls {
        true => {
            Some((crate::tls::client_config(None, "the system's CA certificates (ca-certificates)")?, crate::tls::server_name(&base.name)?))
        }
        false => None,
    };
    Ok(Server { url: url.to_string(), tls, hostport: base.hostport, host: base.host, prefix: base.prefix })
}

/// Where elfutils keeps its debuginfod cache, from the environment it reads.
fn cache_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    set("DEBUGINFOD_CACHE_PATH")
        .map(PathBuf::from)
        .or_else(|| set("XDG_CACHE_HOME").map(|x| Path::new(&x).join("debuginfod_client")))
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".cache/debuginfod_client")))
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fetch {
    Pending,
    Done,
    Failed,
}

struct Shared {
    fetches: Mutex<HashMap<Vec<u8>, Fetch>>,
    refused: AtomicU64,
    failed: AtomicU64,
    /// the temporary file being written now, and whether the agent is done (no more are made)
    writing: Mutex<(Option<PathBuf>, bool)>,
}

pub struct Debuginfod {
    cache: PathBuf,
    queue: SyncSender<Vec<u8>>,
    shared: Arc<Shared>,
}

impl Debuginfod {
    /// From `DEBUGINFOD_URLS` and the cache variables (None: no server named). A URL that is
    /// not one is an error, as is a cache directory that cannot be made.
    pub fn from_env() -> Result<Option<Debuginfod>> {
        Debuginfod::new(&|k| std::env::var(k).ok())
    }

    fn new(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Debuginfod>> {
        let Some(urls) = env("DEBUGINFOD_URLS").filter(|u| !u.trim().is_empty()) else { return Ok(None) };
        let servers = urls.split_whitespace().map(server).collect::<Result<Vec<_>>>().context("DEBUGINFOD_URLS")?;
        let cache = cache_dir(env).context("no debuginfod cache directory: set DEBUGINFOD_CACHE_PATH")?;
        std::fs::create_dir_all(&cache).with_context(|| format!("cannot make the debuginfod cache {}", cache.display()))?;
        let shared = Arc::new(Shared {
            fetches: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            writing: Mutex::new((None, false)),
        });
        let (queue, ids) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let (dir, sh) = (cache.clone(), Arc::clone(&shared));
        std::thread::Builder::new()
            .name("debuginfod".into())
            .spawn(move || {
                for id in ids {
                    if sh.writing.lock().unwrap_or_else(|e| e.into_inner()).1 {
                        break;
                    }
                    let outcome = fetch_any(&servers, &dir, &id, &sh);
                    sh.fetches.lock().unwrap_or_else(|e| e.into_inner()).insert(id, outcome);
                }
            })
            .context("cannot start the debuginfod thread")?;
        log::info!("debuginfod: debug files of stripped objects from {} (cached in {})", urls.trim(), cache.display());
        Ok(Some(Debuginfod { cache, queue, shared }))
    }

    fn path(&self, id: &[u8]) -> PathBuf {
        self.cache.join(hex(id)).join("debuginfo")
    }

    /// The cached debug file of build ID `id`, when there is one; else it is asked for, once,
    /// in the background.
    pub fn debug_file(&self, id: &[u8]) -> Option<PathBuf> {
        let p = self.path(id);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            return Some(p);
        }
        let mut f = self.shared.fetches.lock().unwrap_or_else(|e| e.into_inner());
        if !f.contains_key(id) {
            match self.queue.try_send(id.to_vec()) {
                Ok(()) => {
                    f.insert(id.to_vec(), Fetch::Pending);
                }
                Err(_) => log::debug!("debuginfod: the queue is full; {} is asked for later", hex(id)),
            }
        }
        None
    }

    /// Whether a fetch of `id` asked for earlier has ended (its file is there or never will be).
    pub fn settled(&self, id: &[u8]) -> bool {
        matches!(self.shared.fetches.lock().unwrap_or_else(|e| e.into_inner()).get(id), Some(Fetch::Done | Fetch::Failed))
    }

    /// Answers refused (not the file asked for, too large, malformed), and fetches that failed
    /// (no server had it, or none answered).
    pub fn lost(&self) -> (u64, u64) {
        (self.shared.refused.load(Ordering::Relaxed), self.shared.failed.load(Ordering::Relaxed))
    }
}

impl Drop for Debuginfod {
    /// The download under way, unfinished, is deleted (the thread makes no other).
    fn drop(&mut self) {
        let mut w = self.shared.writing.lock().unwrap_or_else(|e| e.into_inner());
        w.1 = true;
        if let Some(tmp) = w.0.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Ask each server in turn.
fn fetch_any(servers: &[Server], dir: &Path, id: &[u8], sh: &Shared) -> Fetch {
    let h = hex(id);
    for s in servers {
        match fetch(s, dir, id, sh) {
            Ok(()) => {
                log::info!("debuginfod: {}: the debug file of {h}", s.url);
                return Fetch::Done;
            }
            Err(Outcome::Absent(e)) => log::debug!("debuginfod: {}: {h}: {e}", s.url),
            Err(Outcome::Refused(e)) => {
                sh.refused.fetch_add(1, Ordering::Relaxed);
                log::warn!("debuginfod: {}: the answer for {h} is refused: {e}", s.url);
            }
        }
    }
    sh.failed.fetch_add(1, Ordering::Relaxed);
    Fetch::Failed
}

enum Outcome {
    /// not there, or the server did not answer
    Absent(String),
    /// an answer that is not the file asked for
    Refused(String),
}

fn fetch(s: &Server, dir: &Path, id: &[u8], sh: &Shared) -> std::result::Result<(), Outcome> {
    let h = hex(id);
    let failed = |f: Failure| match f {
        Failure::Timeout(stage) => Outcome::Absent(format!("no answer within {} s ({stage})", TIMEOUT.as_secs())),
        Failure::Connect(e) => Outcome::Absent(e),
        Failure::TooLarge(e) | Failure::Bad(e) => Outcome::Refused(e),
    };
    let deadline = Deadline::after(TIMEOUT);
    let sock = client::connect(&s.hostport, &deadline).map_err(failed)?;
    let mut conn = match &s.tls {
        None => crate::tls::Conn::Plain(sock),
        Some((cfg, name)) => {
            let c = rustls::ClientConnection::new(Arc::clone(cfg), name.clone()).map_err(|e| Outcome::Absent(format!("TLS: {e}")))?;
            crate::tls::Conn::Tls(Box::new(rustls::StreamOwned::new(c, sock)))
        }
    };
    let head = format!(
        "GET {}/buildid/{h}/debuginfo HTTP/1.1\r\nHost: {}\r\nUser-Agent: waitmeter/{}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n",
        s.prefix,
        s.host,
        env!("CARGO_PKG_VERSION")
    );
    client::send(&mut conn, &[head.as_bytes()], &deadline).map_err(failed)?;
    let answer = client::read_head(&mut conn, &deadline).map_err(failed)?;
    let len = {
        let r = wire::parse_response(answer.head()).map_err(|e| Outcome::Refused(format!("not an HTTP answer: {e}")))?;
        if r.status == 404 {
            return Err(Outcome::Absent("not there (404)".into()));
        }
        if r.status != 200 {
            return Err(Outcome::Absent(format!("HTTP {}", r.status)));
        }
        if wire::header(&r.headers, "content-encoding").is_some_and(|v| !v.eq_ignore_ascii_case("identity"))
            || wire::header(&r.headers, "transfer-encoding").is_some()
        {
            return Err(Outcome::Refused("an encoded or chunked body (identity with a Content-Length was asked for)".into()));
        }
        let mut length = None;
        for (_, v) in r.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case("content-length")) {
            let n = (v.len() <= 20 && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .then(|| v.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| Outcome::Refused("a malformed Content-Length".into()))?;
            if length.is_some_and(|l| l != n) {
                return Err(Outcome::Refused("two different Content-Lengths".into()));
            }
            length = Some(n);
        }
        match length {
            None => return Err(Outcome::Refused("no Content-Length".into())),
            Some(n) if n > MAX_FILE => return Err(Outcome::Refused(format!("{n} bytes (at most {MAX_FILE})"))),
            Some(n) => n,
        }
    };
    let place = dir.join(&h);
    std::fs::create_dir_all(&place).map_err(|e| Outcome::Absent(format!("cannot make {}: {e}", place.display())))?;
    remove_abandoned(&place);
    let tmp = place.join(format!("{TMP_PREFIX}{}{TMP_SUFFIX}", std::process::id()));
    let kept = (|| {
        let mut out = {
            // made and noted under the lock the agent's exit takes: none is made after it
            let mut w = sh.writing.lock().unwrap_or_else(|e| e.into_inner());
            if w.1 {
                return Err(Outcome::Absent("the agent is exiting".into()));
            }
            let out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Outcome::Absent(format!("cannot write {}: {e}", tmp.display())))?;
            w.0 = Some(tmp.clone());
            out
        };
        client::copy_body(&mut conn, answer, len, &mut out, &deadline).map_err(failed)?;
        out.flush().map_err(|e| Outcome::Absent(format!("cannot write {}: {e}", tmp.display())))?;
        drop(out);
        // the file asked for, or nothing
        let file = std::fs::File::open(&tmp).map_err(|e| Outcome::Absent(e.to_string()))?;
        let src = FileSource::new(file, len);
        let elf = Elf::parse(&src).map_err(|e| Outcome::Refused(format!("not an ELF file: {e:#}")))?;
        if elf.build_id().as_deref() != Some(id) {
            return Err(Outcome::Refused("an ELF file of another build ID".into()));
        }
        std::fs::rename(&tmp, place.join("debuginfo")).map_err(|e| Outcome::Absent(format!("cannot keep it: {e}")))
    })();
    let mut w = sh.writing.lock().unwrap_or_else(|e| e.into_inner());
    if w.0.take().is_some() && kept.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    kept
}

/// A download's temporary file: `.debuginfo.<pid>.tmp` beside its place.
const TMP_PREFIX: &str = ".debuginfo.";
const TMP_SUFFIX: &str = ".tmp";

/// Delete the temporary files in `place` that an agent killed during a download left there: ours
/// by their name, and older than a fetch may take (a live agent's is younger; elfutils names its
/// own otherwise).
fn remove_abandoned(place: &Path) {
    let Ok(entries) = std::fs::read_dir(place) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(TMP_PREFIX)).and_then(|n| n.strip_suffix(TMP_SUFFIX)) else { continue };
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let old = e.metadata().ok().filter(|m| m.is_file()).and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
        if old.is_some_and(|age| age > TIMEOUT) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abandoned_download_is_deleted_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("wm-debuginfod-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = std::time::SystemTime::now() - TIMEOUT - Duration::from_secs(60);
        let make = |name: &str, at: Option<std::time::SystemTime>| {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            if let Some(at) = at {
                f.set_modified(at).unwrap();
            }
        };
        make(".debuginfo.4242.tmp", Some(old)); // a killed agent's: deleted
        make(".debuginfo.4243.tmp", None); // a live agent's, under way: kept
        make(".debuginfo.XyZ123", Some(old)); // elfutils' own temporary name: not ours
        make(".debuginfo.12x.tmp", Some(old)); // not a PID: not ours
        make("debuginfo", Some(old)); // the file itself
        remove_abandoned(&dir);
        let mut left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, [".debuginfo.12x.tmp", ".debuginfo.4243.tmp", ".debuginfo.XyZ123", "debuginfo"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_environment_as_elfutils_reads_it() {
        let env =
            |pairs: &'static [(&'static str, &'static str)]| move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        assert!(Debuginfod::new(&env(&[])).unwrap().is_none());
        assert!(Debuginfod::new(&env(&[("DEBUGINFOD_URLS", "  ")])).unwrap().is_none());
        let err = Debuginfod::new(&env(&[("DEBUGINFOD_URLS", "ftp://x")])).err().unwrap();
        assert!(format!("{err:#}").contains("DEBUGINFOD_URLS") && format!("{err:#}").contains("http://"), "{err:#}");
        assert!(Debuginfod::new(&env(&[("DEBUGINFOD_URLS", "http://user@host/")])).is_err());
        assert_eq!(cache_dir(&env(&[("HOME", "/root")])), Some(PathBuf::from("/root/.cache/debuginfod_client")));
        assert_eq!(cache_dir(&env(&[("HOME", "/root"), ("XDG_CACHE_HOME", "/c")])), Some(PathBuf::from("/c/debuginfod_client")));
        assert_eq!(cache_dir(&env(&[("HOME", "/root"), ("DEBUGINFOD_CACHE_PATH", "/d")])), Some(PathBuf::from("/d")));
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
    }
}
