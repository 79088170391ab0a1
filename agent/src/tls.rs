//! TLS for the agent's connections: a TCP connection, plain or under TLS, as one
//! `Read + Write` (the endpoint's server side, `export/http.rs`; the clients: the Pyroscope
//! push, `export/push.rs`, and the debuginfod fetch, `stacks/debuginfod.rs`), and the client
//! configuration that trusts the system's CA certificates or a file of them.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ConnectionCommon, SideData};

/// Where a system keeps its CA certificates (Debian/Ubuntu/Alpine, Fedora/RHEL, others).
const SYSTEM_CAS: [&str; 3] = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// The name TLS checks a server's certificate against: its host (an IP address or a DNS name).
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(host.to_string()).with_context(|| format!("`{host}` is not a host name TLS can check"))
}

/// A TLS client trusting `ca_file`, or the system's CA certificates (`flag`: the option that
/// gives others, for the error).
pub fn client_config(ca_file: Option<&Path>, flag: &str) -> Result<Arc<rustls::ClientConfig>> {
    let path: PathBuf = match ca_file {
        Some(p) => p.to_path_buf(),
        None => SYSTEM_CAS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .with_context(|| format!("no CA certificates found (looked for {}): give them with {flag}", SYSTEM_CAS.join(", ")))?,
    };
    let pem = std::fs::read(&path).with_context(|| format!("cannot read the CA certificates {}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.with_context(|| format!("{} is not PEM certificates", path.display()))?;
        // a system bundle may hold a certificate rustls does not take: skip it
        let _ = roots.add(c);
    }
    if roots.is_empty() {
        bail!("{} has no CA certificate", path.display());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS set-up")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// `C`: `rustls::ServerConnection` or `rustls::ClientConnection`.
pub enum Conn<C> {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<C, TcpStream>>),
}

impl<C, S> Read for Conn<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl<C, S> Write for Conn<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

impl<C, S> crate::http_client::Stream for Conn<C>
where
    C: DerefMut + Deref<Target = ConnectionCommon<S>>,
    S: SideData,
{
    fn socket(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }
}
