//! Files the agent writes at a path the user gives (`attach --profile FILE`):
//! written whole or not at all, and never through what is already there.
//! The bytes go to a new file beside the target (created exclusively: no
//! link is followed, nothing is truncated), which is renamed over the
//! target once complete. So a failed run leaves an earlier file as it was, a
//! link planted at the path is replaced rather than followed (a root agent
//! never writes through it), and a folder or device at the path is refused.
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Result;

/// A file being written; `commit` puts it in place, a drop throws it away.
pub struct OutFile {
    path: PathBuf,
    temp: Option<PathBuf>,
    file: std::fs::File,
}

impl OutFile {
    /// Check the path and open the file beside it (errors: the user's to fix, exit code 2;
    /// `flag` names the option in them).
    pub fn create(path: &Path, flag: &str) -> Result<OutFile> {
        let shown = path.display();
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => return Err(crate::error::usage!("{flag} {shown} is a folder: give a file's path")),
            Ok(m) if !m.is_file() && !m.file_type().is_symlink() => {
                return Err(crate::error::usage!("{flag} {shown} is a special file, not a regular one: give a file's path"))
            }
            _ => {}
        }
        let name = path.file_name().ok_or_else(|| crate::error::usage!("{flag} {shown}: give a file's path"))?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let temp = dir.join(format!(".{}.waitmeter-{}.tmp", name.to_string_lossy(), std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)
            .map_err(|e| crate::error::usage!("cannot write {flag} {shown}: {e}: choose a writable path"))?;
        Ok(OutFile { path: path.to_path_buf(), temp: Some(temp), file })
    }

    /// Write `bytes` and put the file at its path.
    pub fn commit(mut self, bytes: &[u8]) -> Result<()> {
        let shown = self.path.display();
        self.file.write_all(bytes).and_then(|_| self.file.sync_all()).map_err(|e| anyhow::anyhow!("failed to write {shown}: {e}"))?;
        let temp = self.temp.take().expect("committed once");
        std::fs::rename(&temp, &self.path).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            anyhow::anyhow!("failed to put {shown} in place: {e}")
        })
    }
}

impl Drop for OutFile {
    fn drop(&mut self) {
        if let Some(t) = &self.temp {
            let _ = std::fs::remove_file(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_whole_or_not_at_all_and_never_through_a_link() {
        let d = std::env::temp_dir().join(format!("wm-outfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        let (target, secret) = (d.join("wait.pb.gz"), d.join("secret"));
        std::fs::write(&target, "earlier").unwrap();
        // dropped before its commit (a failed run): the earlier file stays, no temporary left
        drop(OutFile::create(&target, "--profile").unwrap());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "earlier");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        OutFile::create(&target, "--profile").unwrap().commit(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        // a link at the path is replaced, the file it points at untouched
        std::fs::write(&secret, "root's").unwrap();
        let link = d.join("planted");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        OutFile::create(&link, "--profile").unwrap().commit(b"profile").unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's");
        assert!(!std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        let err = format!("{:#}", OutFile::create(&d, "--profile").err().unwrap());
        assert!(err.contains("is a folder"), "{err}");
        let err = format!("{:#}", OutFile::create(Path::new("/dev/null"), "--profile").err().unwrap());
        assert!(err.contains("special file"), "{err}");
        let err = format!("{:#}", OutFile::create(&d.join("no/such/file"), "--profile").err().unwrap());
        assert!(err.contains("cannot write --profile"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
