//! The agent side of `waitmeter_client`: a Unix datagram socket receiving
//! (pid, tid, age, timestamp) records. Non-blocking; drained every tick.
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Wire format (little-endian), shared with clients/python/waitmeter_client:
/// magic "WMA1", pid u32, tid u32, age f64 (s), timestamp f64 (Unix s).
pub const MAGIC: &[u8; 4] = b"WMA1";
pub const RECORD_LEN: usize = 28;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgeRecord {
    pub pid: u32,
    pub tid: u32,
    pub age_s: f64,
    pub sent_unix_s: f64,
}

pub fn decode(b: &[u8]) -> Option<AgeRecord> {
    if b.len() != RECORD_LEN || &b[..4] != MAGIC {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let f64_at = |o: usize| f64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let r = AgeRecord { pid: u32_at(4), tid: u32_at(8), age_s: f64_at(12), sent_unix_s: f64_at(20) };
    r.age_s.is_finite().then_some(r)
}

pub struct AgeSocket {
    sock: UnixDatagram,
    path: PathBuf,
    /// datagrams that were not age records
    pub malformed: u64,
}

impl AgeSocket {
    /// Bind `path` (replacing a stale socket file), world-writable so that an
    /// application running as another user (another container) can send.
    pub fn bind(path: &Path) -> Result<AgeSocket> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
        }
        let _ = std::fs::remove_file(path);
        let sock = UnixDatagram::bind(path).with_context(|| format!("failed to bind the age socket {}", path.display()))?;
        sock.set_nonblocking(true)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(AgeSocket { sock, path: path.to_path_buf(), malformed: 0 })
    }

    /// Every record waiting in the socket.
    pub fn drain(&mut self) -> Vec<AgeRecord> {
        let mut out = vec![];
        let mut buf = [0u8; 64];
        while let Ok(n) = self.sock.recv(&mut buf) {
            match decode(&buf[..n]) {
                Some(r) => out.push(r),
                None => self.malformed += 1,
            }
        }
        out
    }
}

impl Drop for AgeSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, tid: u32, age: f64) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(pid.to_le_bytes());
        b.extend(tid.to_le_bytes());
        b.extend(age.to_le_bytes());
        b.extend(1.7e9f64.to_le_bytes());
        b
    }

    #[test]
    fn decodes_records_and_rejects_junk() {
        assert_eq!(decode(&record(7, 8, 1.5)), Some(AgeRecord { pid: 7, tid: 8, age_s: 1.5, sent_unix_s: 1.7e9 }));
        assert_eq!(decode(b"WMA1"), None);
        assert_eq!(decode(&record(7, 8, f64::NAN)), None);
        let mut bad = record(1, 2, 3.0);
        bad[0] = b'X';
        assert_eq!(decode(&bad), None);
    }

    #[test]
    fn receives_without_blocking() {
        let dir = std::env::temp_dir().join(format!("wm-age-test-{}", std::process::id()));
        let path = dir.join("age.sock");
        let mut s = AgeSocket::bind(&path).unwrap();
        assert!(s.drain().is_empty());
        let c = UnixDatagram::unbound().unwrap();
        c.send_to(&record(1, 2, 0.25), &path).unwrap();
        c.send_to(b"junk", &path).unwrap();
        let got = s.drain();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].age_s, 0.25);
        assert_eq!(s.malformed, 1);
        drop(s);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(dir);
    }
}
