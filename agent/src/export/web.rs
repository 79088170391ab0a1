//! `--web.config.file`: TLS, client certificates and basic auth for the
//! endpoint, configured in the format of the Prometheus exporter toolkit
//! (docs/deployment.md, "Securing the endpoint"), so that the file written
//! for node_exporter works here unchanged. The file and the files it names are
//! read again when they change (certificate rotation), at most once a second.
//! A reload fails closed: a change that does not load (an empty or truncated
//! file, a parse error, a missing certificate) or that would weaken the
//! endpoint (TLS off, client certificates no longer required, basic auth off)
//! is refused with an error in the log and a count in
//! `waitmeter_web_config_reloads_total{result}`; the last good configuration
//! stays until the agent is restarted with the weaker one.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;

/// The file, as the exporter toolkit defines it. Unknown keys are errors (the
/// toolkit parses strictly too): a typo must not silently turn TLS off.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    cert: Option<String>,
    key: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_ca: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// HTTP/2 is not served (scrapes are HTTP/1.1); accepted for compatibility
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// Response headers the toolkit lets a config set (security headers only:
/// nothing that changes the meaning of a response).
const SETTABLE_HEADERS: &[&str] = &[
    "Cache-Control",
    "Content-Security-Policy",
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
];

/// How strongly a configuration guards the endpoint, component by component:
/// a reload may keep or raise each, never lower one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientCerts {
    None,
    IfGiven,
    Required,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strength {
    pub tls: bool,
    pub client_certs: ClientCerts,
    pub basic_auth: bool,
}

impl Strength {
    /// What `new` would turn off that `self` has (empty: not weaker).
    pub fn lost_in(&self, new: &Strength) -> Vec<&'static str> {
        let mut lost = vec![];
        if self.tls && !new.tls {
            lost.push("TLS");
        }
        if new.client_certs < self.client_certs {
            lost.push("client certificate verification");
        }
        if self.basic_auth && !new.basic_auth {
            lost.push("basic auth");
        }
        lost
    }
}

/// A loaded configuration.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// user -> bcrypt hash
    users: HashMap<String, String>,
    pub headers: Vec<(String, String)>,
    /// the files it was read from, with their modification times
    files: Vec<(PathBuf, Option<SystemTime>)>,
    strength: Strength,
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// PEM text from an inline value or a file (relative to the config's folder).
fn pem(inline: &Option<String>, file: &Option<PathBuf>, dir: &Path, what: &str, files: &mut Vec<PathBuf>) -> Result<Option<Vec<u8>>> {
    match (inline, file) {
        (Some(_), Some(_)) => bail!("give {what} inline or as a file, not both"),
        (Some(text), None) => Ok(Some(text.as_bytes().to_vec())),
        (None, Some(f)) => {
            let path = dir.join(f);
            let data = std::fs::read(&path).with_context(|| format!("failed to read {what} {}", path.display()))?;
            files.push(path);
            Ok(Some(data))
        }
        (None, None) => Ok(None),
    }
}

fn version(name: &str) -> Result<&'static rustls::SupportedProtocolVersion> {
    match name {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS10" | "TLS11" => bail!("{name} is not supported (it is deprecated, RFC 8996): use TLS12 or TLS13"),
        other => bail!("unknown TLS version {other:?}: use TLS12 or TLS13"),
    }
}

/// Go's curve names -> the provider's key exchange groups.
fn curve(name: &str) -> Result<&'static dyn rustls::crypto::SupportedKxGroup> {
    match name {
        "X25519" => Ok(provider::kx_group::X25519),
        "CurveP256" => Ok(provider::kx_group::SECP256R1),
        "CurveP384" => Ok(provider::kx_group::SECP384R1),
        other => bail!("curve {other:?} is not supported: use X25519, CurveP256 or CurveP384"),
    }
}

fn client_auth(t: &TlsFile) -> &str {
    t.client_auth_type.as_deref().unwrap_or("NoClientCert")
}

fn tls_config(t: &TlsFile, dir: &Path, files: &mut Vec<PathBuf>) -> Result<rustls::ServerConfig> {
    if t.client_allowed_sans.is_some() {
        bail!("client_allowed_sans is not supported: issue client certificates from a CA of their own (client_ca_file)");
    }
    let certs = pem(&t.cert, &t.cert_file, dir, "certificate", files)?.context("tls_server_config needs cert_file (or cert)")?;
    let key = pem(&t.key, &t.key_file, dir, "private key", files)?.context("tls_server_config needs key_file (or key)")?;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&certs).collect::<Result<_, _>>().context("failed to parse the certificate PEM")?;
    if certs.is_empty() {
        bail!("no certificate in the certificate PEM");
    }
    let key = PrivateKeyDer::from_pem_slice(&key).context("failed to parse the private key PEM")?;

    let mut suites = provider::default_provider();
    if let Some(names) = &t.cipher_suites {
        // as in Go, the list selects TLS 1.2 suites; TLS 1.3 suites are not configurable
        for n in names {
            if !suites.cipher_suites.iter().any(|s| format!("{:?}", s.suite()) == *n) {
                let known: Vec<String> = suites
                    .cipher_suites
                    .iter()
                    .filter(|s| s.version() == &rustls::version::TLS12)
                    .map(|s| format!("{:?}", s.suite()))
                    .collect();
                bail!("cipher suite {n:?} is not supported; supported: {}", known.join(", "));
            }
        }
        suites.cipher_suites.retain(|s| s.version() != &rustls::version::TLS12 || names.iter().any(|n| format!("{:?}", s.suite()) == *n));
    }
    if let Some(curves) = &t.curve_preferences {
        suites.kx_groups = curves.iter().map(|c| curve(c)).collect::<Result<_>>()?;
    }
    let min = version(t.min_version.as_deref().unwrap_or("TLS12"))?;
    let max = version(t.max_version.as_deref().unwrap_or("TLS13"))?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [&rustls::version::TLS12, &rustls::version::TLS13]
        .into_iter()
        .filter(|v| (u16::from(min.version)..=u16::from(max.version)).contains(&u16::from(v.version)))
        .collect();
    if versions.is_empty() {
        bail!("min_version is above max_version");
    }
    let provider = Arc::new(suites);
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .context("no cipher suite left for the TLS versions allowed")?;

    let auth = client_auth(t);
    let builder = match auth {
        "NoClientCert" => {
            if t.client_ca_file.is_some() || t.client_ca.is_some() {
                bail!("client_ca_file is set but client_auth_type is NoClientCert: set client_auth_type to RequireAndVerifyClientCert");
            }
            builder.with_no_client_auth()
        }
        "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {
            let ca = pem(&t.client_ca, &t.client_ca_file, dir, "client CA", files)?
                .with_context(|| format!("client_auth_type {auth} needs client_ca_file"))?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca) {
                roots.add(c.context("failed to parse the client CA PEM")?).context("failed to add the client CA")?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
            let v = if auth == "VerifyClientCertIfGiven" { v.allow_unauthenticated() } else { v };
            builder.with_client_cert_verifier(v.build().context("failed to set up client certificate verification")?)
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            bail!("client_auth_type {auth} (a client certificate without verification) is not supported: use RequireAndVerifyClientCert with client_ca_file")
        }
        other => bail!("unknown client_auth_type {other:?}: use NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"),
    };
    let mut cfg = builder.with_single_cert(certs, key).context("the certificate does not go with the private key")?;
    cfg.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

impl WebConfig {
    /// Read and check the file and everything it names. An empty file is a
    /// configuration (plain HTTP, no auth) at start; on a reload it is refused
    /// (`reload`: a file being rewritten is often empty for a moment).
    pub fn load(path: &Path, reload: bool) -> Result<WebConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("failed to read {}", path.display()))?;
        let file: File = if text.trim().is_empty() {
            if reload {
                bail!("the file is empty");
            }
            File::default()
        } else {
            serde_norway::from_str(&text).context("failed to parse it as YAML in the exporter toolkit's web-config format")?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut files = vec![path.to_path_buf()];
        let client_certs = match file.tls_server_config.as_ref().map(client_auth) {
            Some("RequireAndVerifyClientCert") => ClientCerts::Required,
            Some("VerifyClientCertIfGiven") => ClientCerts::IfGiven,
            _ => ClientCerts::None,
        };
        let tls = match &file.tls_server_config {
            Some(t) => Some(Arc::new(tls_config(t, dir, &mut files)?)),
            None => None,
        };
        let mut users = HashMap::new();
        for (user, hash) in file.basic_auth_users.unwrap_or_default() {
            if user.contains(':') {
                bail!("basic_auth_users: user {user:?} contains ':'");
            }
            // parse the hash now: a typo must fail at start, not at every scrape
            bcrypt::verify("", &hash).with_context(|| format!("basic_auth_users: the password of {user:?} is not a bcrypt hash (make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"))?;
            users.insert(user, hash);
        }
        let mut headers = vec![];
        for (name, value) in file.http_server_config.and_then(|h| h.headers).unwrap_or_default() {
            let Some(canonical) = SETTABLE_HEADERS.iter().find(|h| h.eq_ignore_ascii_case(&name)) else {
                bail!("http_server_config.headers: {name} cannot be set; these can: {}", SETTABLE_HEADERS.join(", "));
            };
            if value.bytes().any(|b| b < 0x20 || b == 0x7f) {
                bail!("http_server_config.headers: the value of {name} has a control character");
            }
            headers.push((canonical.to_string(), value));
        }
        let files = files
            .into_iter()
            .map(|p| {
                let m = mtime(&p);
                (p, m)
            })
            .collect();
        let strength = Strength { tls: tls.is_some(), client_certs, basic_auth: !users.is_empty() };
        Ok(WebConfig { tls, users, headers, files, strength })
    }

    pub fn needs_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// A configured user's hash, the `pick`-th in name order (modulo their number).
    fn stand_in(&self, pick: u64) -> &str {
        let mut names: Vec<&String> = self.users.keys().collect();
        names.sort_unstable();
        names.get((pick % names.len().max(1) as u64) as usize).map_or("", |n| self.users[*n].as_str())
    }

    /// The files it was read from, with their modification times now.
    fn files_now(&self) -> Vec<(PathBuf, Option<SystemTime>)> {
        self.files.iter().map(|(p, _)| (p.clone(), mtime(p))).collect()
    }
}

/// What became of a reload: the `result` label of `waitmeter_web_config_reloads_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// the changed files loaded and are in force
    Ok,
    /// they did not load (empty, unreadable, malformed): the last good configuration stays
    Failed,
    /// they loaded but would turn TLS, client certificates or basic auth off: refused
    RefusedWeaker,
}

impl Reload {
    pub const ALL: [Reload; 3] = [Reload::Ok, Reload::Failed, Reload::RefusedWeaker];
    pub fn name(self) -> &'static str {
        match self {
            Reload::Ok => "ok",
            Reload::Failed => "failed",
            Reload::RefusedWeaker => "refused_weaker",
        }
    }
}

/// The configuration in force, reloaded when its files change, and the
/// basic-auth checks (bcrypt is slow on purpose: successes are cached, and
/// at most one check runs at a time so that failed attempts cost one core at most).
pub struct Web {
    path: PathBuf,
    state: Mutex<State>,
    reloads: [AtomicU64; Reload::ALL.len()],
    /// keyed hashes of credentials that passed
    verified: Mutex<HashSet<u64>>,
    keys: RandomState,
    bcrypt_one_at_a_time: Mutex<()>,
    /// checks waiting for (or holding) `bcrypt_one_at_a_time`
    auth_waiting: std::sync::atomic::AtomicUsize,
}

/// The configuration in force, when its files were last looked at, and the
/// modification times last tried (a refused change is tried once, not every second).
struct State {
    cfg: Arc<WebConfig>,
    checked: Instant,
    tried: Vec<(PathBuf, Option<SystemTime>)>,
}

const RECHECK: Duration = Duration::from_secs(1);
const MAX_CACHED: usize = 64;

pub enum Auth {
    Ok,
    /// no or wrong credentials
    Denied,
    /// `MAX_AUTH_WAITING` checks are waiting already: not checked, retry
    Busy,
}

/// Credentials waiting for a bcrypt check at once; more are not checked (429):
/// a flood of wrong passwords cannot hold every connection of the endpoint.
pub const MAX_AUTH_WAITING: usize = 8;

impl Web {
    pub fn load(path: &Path) -> Result<Web> {
        let cfg = WebConfig::load(path, false).with_context(|| format!("bad --web.config.file {}", path.display()))?;
        let tried = cfg.files.clone();
        Ok(Web {
            path: path.to_path_buf(),
            state: Mutex::new(State { cfg: Arc::new(cfg), checked: Instant::now(), tried }),
            reloads: Default::default(),
            verified: Mutex::default(),
            keys: RandomState::new(),
            bcrypt_one_at_a_time: Mutex::new(()),
            auth_waiting: Default::default(),
        })
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<WebConfig> {
        let mut st = self.state.lock().expect("web config lock");
        if st.checked.elapsed() >= RECHECK {
            st.checked = Instant::now();
            let now = st.cfg.files_now();
            if now != st.tried {
                st.tried = now;
                let result = self.reload(&mut st);
                self.reloads[result as usize].fetch_add(1, Ordering::Relaxed);
            }
        }
        Arc::clone(&st.cfg)
    }

    /// Load the changed files; put them in force only when they load and guard the endpoint as well.
    fn reload(&self, st: &mut State) -> Reload {
        let path = self.path.display();
        let new = match WebConfig::load(&self.path, true) {
            Ok(new) => new,
            Err(e) => {
                log::error!("--web.config.file {path} changed but does not load: {e:#}; keeping the previous configuration");
                return Reload::Failed;
            }
        };
        let lost = st.cfg.strength.lost_in(&new.strength);
        if !lost.is_empty() {
            log::error!(
                "--web.config.file {path} changed to a configuration without {}: refused, keeping the previous one \
                 (a reload never weakens the endpoint; restart waitmeter to serve it that way)",
                lost.join(" or ")
            );
            return Reload::RefusedWeaker;
        }
        log::info!("reloaded --web.config.file {path}");
        st.tried = new.files.clone();
        st.cfg = Arc::new(new);
        self.verified.lock().expect("auth cache lock").clear();
        Reload::Ok
    }

    /// Reloads since start, by result (every result, zeros included).
    pub fn reloads(&self) -> Vec<(&'static str, u64)> {
        Reload::ALL.iter().map(|r| (r.name(), self.reloads[*r as usize].load(Ordering::Relaxed))).collect()
    }

    /// Check an `Authorization` header value against the configuration.
    pub fn check(&self, cfg: &WebConfig, authorization: Option<&str>) -> Auth {
        if !cfg.needs_auth() {
            return Auth::Ok;
        }
        let Some((user, pass)) = authorization.and_then(basic_credentials) else { return Auth::Denied };
        let key = self.keys.hash_one((&user, &pass));
        if self.verified.lock().expect("auth cache lock").contains(&key) {
            return Auth::Ok;
        }
        if self.auth_waiting.fetch_add(1, Ordering::AcqRel) >= MAX_AUTH_WAITING {
            self.auth_waiting.fetch_sub(1, Ordering::AcqRel);
            return Auth::Busy;
        }
        let ok = {
            let _one = self.bcrypt_one_at_a_time.lock().expect("bcrypt lock");
            match cfg.users.get(&user) {
                Some(hash) => bcrypt::verify(&pass, hash).unwrap_or(false),
                None => {
                    // an unknown user costs what a known one does: one check against the hash of
                    // a configured user (picked by the name, so a name always costs the same), its
                    // result thrown away; no user enumeration by timing
                    let _ = bcrypt::verify(&pass, cfg.stand_in(self.keys.hash_one(&user)));
                    false
                }
            }
        };
        self.auth_waiting.fetch_sub(1, Ordering::AcqRel);
        if !ok {
            return Auth::Denied;
        }
        let mut cache = self.verified.lock().expect("auth cache lock");
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(key);
        Auth::Ok
    }
}

/// `Basic base64(user:password)` -> (user, password).
pub fn basic_credentials(value: &str) -> Option<(String, String)> {
    use base64::Engine;
    let (scheme, b64) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") || b64.len() > 4096 {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("waitmeter-web-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn credentials() {
        // "user:pa:ss" (a password may contain ':')
        assert_eq!(basic_credentials("Basic dXNlcjpwYTpzcw=="), Some(("user".into(), "pa:ss".into())));
        assert_eq!(basic_credentials("basic dXNlcjpwYTpzcw=="), Some(("user".into(), "pa:ss".into())));
        assert_eq!(basic_credentials("Bearer abc"), None);
        assert_eq!(basic_credentials("Basic !!!"), None);
        assert_eq!(basic_credentials("Basic dXNlcg=="), None); // no ':'
    }

    #[test]
    fn basic_auth_users_are_checked_and_cached() {
        let d = tmpdir("auth");
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let p = write(&d, "web.yml", &format!("basic_auth_users:\n  prometheus: {hash}\n"));
        let web = Web::load(&p).unwrap();
        let cfg = web.current();
        assert!(cfg.tls.is_none() && cfg.needs_auth());
        use base64::Engine;
        let header = |u: &str, p: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")));
        assert!(matches!(web.check(&cfg, Some(&header("prometheus", "s3cret"))), Auth::Ok));
        assert!(matches!(web.check(&cfg, Some(&header("prometheus", "s3cret"))), Auth::Ok)); // cached
        assert!(matches!(web.check(&cfg, Some(&header("prometheus", "wrong"))), Auth::Denied));
        assert!(matches!(web.check(&cfg, Some(&header("nobody", "s3cret"))), Auth::Denied));
        assert!(matches!(web.check(&cfg, None), Auth::Denied));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A reload is tried when the files' modification times change; force one.
    fn force_reload(web: &Web) -> Arc<WebConfig> {
        {
            let mut st = web.state.lock().unwrap();
            st.checked -= RECHECK;
            st.tried.clear();
        }
        web.current()
    }

    #[test]
    fn a_reload_never_weakens_the_endpoint() {
        let d = tmpdir("reload");
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let auth = format!("basic_auth_users:\n  prometheus: {hash}\n");
        let p = write(&d, "web.yml", &auth);
        let web = Web::load(&p).unwrap();
        let counts = |web: &Web| web.reloads().into_iter().map(|(_, n)| n).collect::<Vec<_>>();
        // emptied, removed, malformed: the last good configuration stays
        for text in ["", "  \n", "basic_auth_users: [\n"] {
            write(&d, "web.yml", text);
            assert!(force_reload(&web).needs_auth(), "{text:?}");
        }
        std::fs::remove_file(&p).unwrap();
        assert!(force_reload(&web).needs_auth());
        assert_eq!(counts(&web), [0, 4, 0]);
        // a valid file without users would turn auth off: refused
        write(&d, "web.yml", "http_server_config:\n  headers:\n    X-Frame-Options: deny\n");
        let cfg = force_reload(&web);
        assert!(cfg.needs_auth() && cfg.headers.is_empty());
        assert_eq!(counts(&web), [0, 4, 1]);
        // a refused change is tried once, not at every check
        web.state.lock().unwrap().checked -= RECHECK;
        web.current();
        assert_eq!(counts(&web), [0, 4, 1]);
        // another user and password: as strong, in force
        let other = bcrypt::hash("n3w", 4).unwrap();
        write(&d, "web.yml", &format!("basic_auth_users:\n  scraper: {other}\n"));
        let cfg = force_reload(&web);
        assert!(cfg.users.contains_key("scraper") && !cfg.users.contains_key("prometheus"));
        assert_eq!(counts(&web), [1, 4, 1]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn strength_is_compared_component_by_component() {
        let s = |tls, client_certs, basic_auth| Strength { tls, client_certs, basic_auth };
        let full = s(true, ClientCerts::Required, true);
        assert!(full.lost_in(&full).is_empty());
        assert_eq!(full.lost_in(&s(false, ClientCerts::None, true)), ["TLS", "client certificate verification"]);
        assert_eq!(full.lost_in(&s(true, ClientCerts::IfGiven, true)), ["client certificate verification"]);
        assert_eq!(full.lost_in(&s(true, ClientCerts::Required, false)), ["basic auth"]);
        // raising is a reload like any other
        assert!(s(false, ClientCerts::None, false).lost_in(&full).is_empty());
    }

    #[test]
    fn an_unknown_user_is_checked_against_a_configured_hash() {
        let d = tmpdir("standin");
        let (a, b) = (bcrypt::hash("x", 4).unwrap(), bcrypt::hash("y", 5).unwrap());
        let p = write(&d, "web.yml", &format!("basic_auth_users:\n  b: {b}\n  a: {a}\n"));
        let cfg = Web::load(&p).unwrap().current();
        assert_eq!([cfg.stand_in(0), cfg.stand_in(1), cfg.stand_in(2)], [a.as_str(), b.as_str(), a.as_str()]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_files_are_one_clear_error() {
        let d = tmpdir("bad");
        let cases = [
            ("tls_server_config:\n  cert_fle: x\n", "unknown field"),
            ("basic_auth_users:\n  a: plaintext\n", "not a bcrypt hash"),
            ("tls_server_config:\n  key_file: k.pem\n", "needs cert_file"),
            ("tls_server_config:\n  cert_file: missing.pem\n  key_file: k.pem\n", "failed to read certificate"),
            ("http_server_config:\n  headers:\n    Content-Type: x\n", "cannot be set"),
            (": : :\n", "YAML"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let p = write(&d, &format!("w{i}.yml"), text);
            let err = format!("{:#}", Web::load(&p).err().unwrap());
            assert!(err.contains(want), "{text:?}: {err}");
        }
        // an empty file is a valid configuration: plain HTTP, no auth
        let p = write(&d, "empty.yml", "");
        assert!(!Web::load(&p).unwrap().current().needs_auth());
        let _ = std::fs::remove_dir_all(&d);
    }
}
