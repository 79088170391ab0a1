//! A TCP connection, plain or under TLS, as one `Read + Write`: the
//! endpoint's server side (`http.rs`) and the Pyroscope push's client side
//! (`push.rs`).
use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::{Deref, DerefMut};

use rustls::{ConnectionCommon, SideData};

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
