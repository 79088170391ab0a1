//! The agent side of `waitmeter_client`: a Unix datagram socket receiving
//! (pid, tid, age, timestamp) records. The kernel attaches each datagram's
//! sender credentials (`SO_PASSCRED`): its PID in the agent's PID namespace,
//! which `senders` checks against the PID the record claims. Non-blocking;
//! drained every tick.
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use anyhow::Result;

/// Wire format (little-endian), shared with clients/python/waitmeter_client:
/// magic "WMA1", pid u32, tid u32, age f64 (s), timestamp f64 (Unix s).
pub const MAGIC: &[u8; 4] = b"WMA1";
pub const RECORD_LEN: usize = 28;

/// Permissions of the socket file unless `--age-socket-mode` says otherwise:
/// the agent's user and the socket's group may send, nobody else.
pub const DEFAULT_MODE: u32 = 0o660;

/// Datagrams read per drain at most: a flood waits for the next tick instead
/// of holding the agent's loop.
pub const MAX_DRAIN: usize = 32_768;

/// Where and how the socket is bound.
#[derive(Clone, Debug, PartialEq)]
pub struct SocketConfig {
    pub path: PathBuf,
    /// permission bits of the socket file (who may send)
    pub mode: u32,
    /// group of the socket file (None: the agent's)
    pub group: Option<u32>,
    /// threads whose samples are kept at once
    pub max_threads: usize,
}

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
    Some(AgeRecord { pid: u32_at(4), tid: u32_at(8), age_s: f64_at(12), sent_unix_s: f64_at(20) })
}

/// Why a datagram was not taken: the `reason` label of
/// `waitmeter_age_client_rejected_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// not a 28-byte record with the magic
    Malformed,
    /// an age that is no age: below 0, above `MAX_AGE_S` (a week), NaN or infinite
    OutOfRange,
    /// no sender credentials, or a sender outside the agent's PID namespace (PID 0)
    NoCredentials,
    /// the record claims a process other than the one that sent it
    WrongPid,
    /// the record's thread is not a thread of the sender's process
    UnknownThread,
    /// the sender exited before the record was read: nothing left to check it against
    SenderExited,
    /// a thread more than the state holds (`SocketConfig::max_threads`)
    StateFull,
}

impl Rejected {
    pub const ALL: [Rejected; 7] = [
        Rejected::Malformed,
        Rejected::OutOfRange,
        Rejected::NoCredentials,
        Rejected::WrongPid,
        Rejected::UnknownThread,
        Rejected::SenderExited,
        Rejected::StateFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Rejected::Malformed => "malformed",
            Rejected::OutOfRange => "out_of_range",
            Rejected::NoCredentials => "no_credentials",
            Rejected::WrongPid => "wrong_pid",
            Rejected::UnknownThread => "unknown_thread",
            Rejected::SenderExited => "sender_exited",
            Rejected::StateFull => "state_full",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A record and the PID of the process that sent it (the agent's namespace).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Received {
    pub record: AgeRecord,
    pub sender: u32,
}

/// One datagram as read: its bytes, whether it was cut short, and the
/// sender's PID from its credentials (None: none attached).
pub fn classify(bytes: &[u8], truncated: bool, sender: Option<u32>) -> Result<Received, Rejected> {
    let record = decode(bytes).filter(|_| !truncated).ok_or(Rejected::Malformed)?;
    super::sane(record.age_s).ok_or(Rejected::OutOfRange)?;
    match sender {
        Some(pid) if pid != 0 => Ok(Received { record, sender: pid }),
        _ => Err(Rejected::NoCredentials),
    }
}

pub struct AgeSocket {
    sock: UnixDatagram,
    path: PathBuf,
    /// (device, inode) of the socket file it bound: the only file its drop removes
    inode: (u64, u64),
}

/// What is at a path the socket is to be bound at.
#[derive(Debug, PartialEq)]
enum Occupant {
    /// a socket file nobody receives on (left by an agent that died): replaced
    Stale,
    /// a socket a live process receives on
    Live,
    /// a file, a folder, a link, a device…: never touched
    Other(&'static str),
}

fn occupant(path: &Path) -> io::Result<Occupant> {
    let kind = std::fs::symlink_metadata(path)?.file_type();
    if !kind.is_socket() {
        let what = if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_dir() {
            "a folder"
        } else if kind.is_file() {
            "a regular file"
        } else {
            "a special file"
        };
        return Ok(Occupant::Other(what));
    }
    // a datagram socket file accepts a connect while its socket lives (and is refused once it is gone)
    Ok(match UnixDatagram::unbound()?.connect(path) {
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Occupant::Stale,
        _ => Occupant::Live,
    })
}

impl AgeSocket {
    /// Bind `cfg.path`, ask the kernel for every sender's credentials, then
    /// give the file its group and mode. Only a stale socket file (one nobody
    /// receives on) is replaced; anything else at the path is refused, and no
    /// folder is made. Errors are the user's to fix (exit code 2).
    pub fn bind(cfg: &SocketConfig) -> Result<AgeSocket> {
        let path = &cfg.path;
        let shown = path.display();
        let fix = "pick a writable --age-socket path";
        let sock = match UnixDatagram::bind(path) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => match occupant(path) {
                Ok(Occupant::Stale) => {
                    log::info!("replacing the stale socket file {shown} (nobody receives on it)");
                    std::fs::remove_file(path)
                        .map_err(|e| crate::error::usage!("failed to remove the stale socket {shown}: {e}: {fix}"))?;
                    UnixDatagram::bind(path)
                }
                Ok(Occupant::Live) => {
                    return Err(crate::error::usage!(
                        "--age-socket {shown}: a running process receives on that socket (another waitmeter?): stop it or pick another path"
                    ))
                }
                Ok(Occupant::Other(what)) => {
                    return Err(crate::error::usage!(
                        "--age-socket {shown} is {what}, not a socket: waitmeter replaces only a stale socket; pick a path where nothing is"
                    ))
                }
                Err(_) => Err(e),
            },
            other => other,
        };
        let sock = sock.map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => crate::error::usage!(
                "--age-socket {shown}: the folder {} does not exist: create it (a volume shared with the application) or pick another path",
                path.parent().map_or_else(|| ".".into(), |d| d.display().to_string())
            ),
            _ => crate::error::usage!("failed to bind the age socket {shown}: {e}: {fix}"),
        })?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| anyhow::anyhow!("failed to look at the age socket {shown}: {e}"))?;
        // from here on, dropping `s` removes the file (while it is still this socket's)
        let s = AgeSocket { sock, path: path.clone(), inode: (meta.dev(), meta.ino()) };
        s.sock.set_nonblocking(true)?;
        // before anyone may send: every datagram then carries its sender's credentials
        pass_credentials(&s.sock)
            .map_err(|e| anyhow::anyhow!("failed to ask for the age socket's sender credentials (SO_PASSCRED): {e}"))?;
        if let Some(gid) = cfg.group {
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
                crate::error::usage!(
                    "failed to give the age socket {} to group {gid}: {e}: run the agent as root (or with CAP_CHOWN), or drop --age-socket-group",
                    path.display()
                )
            })?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(cfg.mode))
            .map_err(|e| crate::error::usage!("failed to set the mode of the age socket {}: {e}: {fix}", path.display()))?;
        Ok(s)
    }

    /// The datagrams waiting in the socket (at most `MAX_DRAIN`), each a
    /// record with its sender, or why it cannot be one.
    pub fn drain(&mut self) -> Vec<Result<Received, Rejected>> {
        let mut out = vec![];
        // larger than a record: a longer datagram is seen to be longer
        let mut buf = [0u8; 64];
        while out.len() < MAX_DRAIN {
            match recv_with_credentials(&self.sock, &mut buf) {
                Ok((n, truncated, sender)) => out.push(classify(&buf[..n], truncated, sender)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: drained; anything else: tried again next tick
                Err(_) => break,
            }
        }
        out
    }
}

impl Drop for AgeSocket {
    /// Remove the socket file, unless something else has taken its path meanwhile.
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn pass_credentials(sock: &UnixDatagram) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Room for exactly one `SCM_CREDENTIALS` message (CMSG_SPACE(sizeof(struct
/// ucred)) = 32 on Linux), u64-aligned as a `cmsghdr` must be. The kernel puts
/// the credentials first; file descriptors a sender attaches find no room and
/// are released by the kernel, never installed in the agent.
type Control = [u64; 4];

/// One datagram: (length read, cut short, sender PID from SCM_CREDENTIALS).
fn recv_with_credentials(sock: &UnixDatagram, buf: &mut [u8]) -> io::Result<(usize, bool, Option<u32>)> {
    let mut control: Control = [0; 4];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of::<Control>() as _;
    // SAFETY: msg points at live buffers of the lengths it states.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let truncated = msg.msg_flags & libc::MSG_TRUNC != 0;
    let mut sender = None;
    // SAFETY: the kernel filled msg_control up to msg_controllen with whole
    // cmsghdrs; the CMSG_* walk stays inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, kind, len) = ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len as usize);
            let data = libc::CMSG_DATA(c);
            let payload = len.saturating_sub(libc::CMSG_LEN(0) as usize);
            if level == libc::SOL_SOCKET && kind == libc::SCM_CREDENTIALS && payload >= std::mem::size_of::<libc::ucred>() {
                let cred = std::ptr::read_unaligned(data.cast::<libc::ucred>());
                sender = u32::try_from(cred.pid).ok();
            } else if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                // never expected (no room), never kept
                for i in 0..payload / std::mem::size_of::<libc::c_int>() {
                    libc::close(std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i)));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, truncated, sender))
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
        let mut bad = record(1, 2, 3.0);
        bad[0] = b'X';
        assert_eq!(decode(&bad), None);
    }

    #[test]
    fn a_record_needs_a_sender() {
        let r = record(7, 8, 1.5);
        assert_eq!(classify(&r, false, Some(7)).map(|x| x.sender), Ok(7));
        assert_eq!(classify(&r, false, None), Err(Rejected::NoCredentials));
        // PID 0: the sender is not in the agent's PID namespace (or below it)
        assert_eq!(classify(&r, false, Some(0)), Err(Rejected::NoCredentials));
        // malformed first: there is no claim to check
        assert_eq!(classify(b"junk", false, None), Err(Rejected::Malformed));
        assert_eq!(classify(&r, true, Some(7)), Err(Rejected::Malformed));
        // ages that are no ages
        for age in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -1e-9, 1e308, -1e308, crate::age::MAX_AGE_S * 1.001] {
            assert_eq!(classify(&record(7, 8, age), false, Some(7)), Err(Rejected::OutOfRange), "{age}");
        }
        assert!(classify(&record(7, 8, 0.0), false, Some(7)).is_ok());
        assert!(classify(&record(7, 8, crate::age::MAX_AGE_S), false, Some(7)).is_ok());
        let names: Vec<&str> = Rejected::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names, ["malformed", "out_of_range", "no_credentials", "wrong_pid", "unknown_thread", "sender_exited", "state_full"]);
        assert!(Rejected::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }

    #[test]
    fn receives_with_the_senders_credentials_without_blocking() {
        let dir = std::env::temp_dir().join(format!("wm-age-test-{}", std::process::id()));
        let path = dir.join("age.sock");
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = AgeSocket::bind(&SocketConfig { path: path.clone(), mode: DEFAULT_MODE, group: None, max_threads: 1 }).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o660);
        assert!(s.drain().is_empty());
        let c = UnixDatagram::unbound().unwrap();
        let me = std::process::id();
        c.send_to(&record(1, 2, 0.25), &path).unwrap();
        c.send_to(b"junk", &path).unwrap();
        let mut long = record(1, 2, 0.25);
        long.extend([0u8; 100]);
        c.send_to(&long, &path).unwrap();
        let got = s.drain();
        assert_eq!(got.len(), 3, "{got:?}");
        // the kernel attached this process' PID, whatever the record claims
        assert_eq!(got[0], Ok(Received { record: AgeRecord { pid: 1, tid: 2, age_s: 0.25, sent_unix_s: 1.7e9 }, sender: me }));
        assert_eq!(got[1], Err(Rejected::Malformed));
        assert_eq!(got[2], Err(Rejected::Malformed));
        drop(s);
        assert!(!path.exists());
        let _ = std::fs::remove_dir(dir);
    }

    #[test]
    fn binds_only_where_nothing_but_a_stale_socket_is() {
        let dir = std::env::temp_dir().join(format!("wm-age-place-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let cfg = |name: &str| SocketConfig { path: dir.join(name), mode: DEFAULT_MODE, group: None, max_threads: 1 };
        let err = |name: &str| format!("{:#}", AgeSocket::bind(&cfg(name)).err().expect(name));
        // a file, a folder, a link: refused and left as they were
        std::fs::write(dir.join("x.conf"), "keep me").unwrap();
        assert!(err("x.conf").contains("is a regular file, not a socket"));
        assert_eq!(std::fs::read_to_string(dir.join("x.conf")).unwrap(), "keep me");
        std::fs::create_dir(dir.join("d")).unwrap();
        assert!(err("d").contains("is a folder"));
        std::os::unix::fs::symlink(dir.join("x.conf"), dir.join("l")).unwrap();
        assert!(err("l").contains("is a symbolic link"));
        assert!(dir.join("x.conf").exists() && dir.join("d").is_dir());
        // no folder is made
        assert!(err("no/such/age.sock").contains("does not exist"));
        assert!(!dir.join("no").exists());
        // a live socket is not taken over; a stale one is replaced
        let live = AgeSocket::bind(&cfg("age.sock")).unwrap();
        assert!(err("age.sock").contains("a running process receives on that socket"));
        let stale = UnixDatagram::bind(dir.join("stale.sock")).unwrap();
        drop(stale); // the file stays, nobody receives on it
        assert!(dir.join("stale.sock").exists());
        let again = AgeSocket::bind(&cfg("stale.sock")).unwrap();
        // a drop removes only its own socket file: not one that took its path meanwhile
        std::fs::remove_file(dir.join("age.sock")).unwrap();
        std::fs::write(dir.join("age.sock"), "someone else's").unwrap();
        drop(live);
        assert_eq!(std::fs::read_to_string(dir.join("age.sock")).unwrap(), "someone else's");
        drop(again);
        assert!(!dir.join("stale.sock").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
