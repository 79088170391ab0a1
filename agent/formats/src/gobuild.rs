//! The Go toolchain's build information, as every Go executable carries it in its `.go.buildinfo`
//! section (the format `debug/buildinfo` reads): a 16-byte header, `\xff Go buildinf:`, the
//! pointer size and a flags byte; from Go 1.18 (flag 2) the version string follows at offset 32,
//! inline, after its length as an unsigned varint. Older executables keep pointers to it instead,
//! which are not followed: they read as Go of unknown version.

/// The header every `.go.buildinfo` section starts with.
pub const MAGIC: &[u8; 14] = b"\xff Go buildinf:";
/// A version string longer than this is not one ("go1.26.0", "devel go1.27-abc123 …").
const MAX_VERSION: u64 = 128;

/// What the section says: `Some(None)` for a Go executable whose version is not inline (before
/// Go 1.18), `Some(Some("go1.26.0"))` from 1.18; `None`: not a Go build information section.
pub fn version(section: &[u8]) -> Option<Option<String>> {
    if section.get(..MAGIC.len())? != MAGIC {
        return None;
    }
    let flags = *section.get(15)?;
    if flags & 2 == 0 {
        return Some(None);
    }
    let (len, used) = uvarint(section.get(32..)?)?;
    if len == 0 || len > MAX_VERSION {
        return Some(None);
    }
    let start = 32usize.checked_add(used)?;
    let bytes = section.get(start..start.checked_add(len as usize)?)?;
    let text = std::str::from_utf8(bytes).ok()?;
    Some(text.chars().all(|c| c.is_ascii_graphic() || c == ' ').then(|| text.to_string()))
}

/// The main module's path, as the section's module information says it (`go version -m`: the
/// `mod` line; Go 1.18 on, after the version string): the application's own code is in its
/// packages (and in package `main`), the rest of a Go executable is the standard library's and its
/// dependencies'. None when the section holds none (a build outside a module, before Go 1.18).
pub fn main_module(section: &[u8]) -> Option<String> {
    if section.get(..MAGIC.len())? != MAGIC || section.get(15)? & 2 == 0 {
        return None;
    }
    let (len, used) = uvarint(section.get(32..)?)?;
    let at = 32usize.checked_add(used)?.checked_add(usize::try_from(len).ok()?)?;
    let (len, used) = uvarint(section.get(at..)?)?;
    let start = at.checked_add(used)?;
    let info = section.get(start..start.checked_add(usize::try_from(len).ok()?.min(MAX_MODINFO))?)?;
    let text = String::from_utf8_lossy(info);
    let path = text.lines().find_map(|l| l.strip_prefix("mod\t"))?.split('\t').next()?.trim();
    (!path.is_empty() && path.len() <= MAX_VERSION as usize * 4 && !path.contains(char::is_whitespace)).then(|| path.to_string())
}

/// Module information read at most (its `dep` lines come after the `mod` line, which is all
/// that is read).
const MAX_MODINFO: usize = 64 << 10;

/// An unsigned LEB128 varint (encoding/binary's `Uvarint`): its value and the bytes it took; at
/// most 10 bytes.
fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The version's release as (major, minor): "go1.26.0" → (1, 26); "devel go1.27-…" → (1, 27).
pub fn release(version: &str) -> Option<(u32, u32)> {
    let at = version.find("go1.")?;
    let rest = &version[at + 2..];
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(flags: u8, version: &[u8]) -> Vec<u8> {
        let mut s = MAGIC.to_vec();
        s.extend([8, flags]);
        s.resize(32, 0);
        s.push(version.len() as u8);
        s.extend(version);
        s.push(0x20); // the module information's length follows
        s
    }

    #[test]
    fn the_main_module_is_read_from_the_module_information() {
        let mut s = section(2, b"go1.26.0");
        s.pop(); // the module information's length, written below
        let info = b"0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6path\texample.com/svc/cmd/svc\nmod\texample.com/svc\t(devel)\t\ndep\tgolang.org/x/net\tv0.30.0\th1:x=\n";
        s.push(info.len() as u8);
        s.extend(info);
        assert_eq!(main_module(&s), Some("example.com/svc".into()));
        assert_eq!(main_module(&section(2, b"go1.26.0")), None, "no module information");
        assert_eq!(main_module(&section(0, b"")), None, "before 1.18");
    }

    #[test]
    fn the_inline_version_is_read() {
        assert_eq!(version(&section(2, b"go1.26.0")), Some(Some("go1.26.0".into())));
        assert_eq!(release("go1.26.0"), Some((1, 26)));
        assert_eq!(release("devel go1.27-4f0d1c2 Mon Dec 7"), Some((1, 27)));
        assert_eq!(release("go1.9"), Some((1, 9)));
        assert_eq!(release("gccgo"), None);
    }

    #[test]
    fn before_1_18_and_hostile_bytes_are_no_version() {
        assert_eq!(version(&section(0, b"")), Some(None));
        assert_eq!(version(b"\xff Go buildin"), None);
        assert_eq!(version(b"not a go binary at all, not at all"), None);
        // a length past the end, an endless varint, bytes that are no version
        let mut long = section(2, b"go1.26.0");
        long[32] = 100;
        assert_eq!(version(&long[..40]), None);
        let mut endless = section(2, b"");
        endless.truncate(32);
        endless.extend([0xff; 12]);
        assert_eq!(version(&endless), None);
        assert_eq!(version(&section(2, b"go1.2\n\x07")), Some(None));
        for n in 0..40 {
            let _ = version(&section(2, b"go1.26.0")[..n]);
            let _ = main_module(&section(2, b"go1.26.0")[..n]);
        }
    }

    /// The toolchain's own build of a test program, when the machine has one: what
    /// `go version -m` says of it.
    #[test]
    fn a_real_go_executable_reads_as_go_version_says() {
        let Ok(go) = std::process::Command::new("go").arg("env").arg("GOROOT").output() else {
            return crate::testing::skip("no go toolchain");
        };
        let root = String::from_utf8_lossy(&go.stdout).trim().to_string();
        let exe = std::path::Path::new(&root).join("bin/go");
        let bytes = std::fs::read(&exe).expect("the go command");
        let elf = crate::elf::Elf::parse(bytes.as_slice()).expect("an ELF file");
        let s = elf.section(".go.buildinfo").expect("a .go.buildinfo section");
        let data = elf.section_data(s, 1 << 16).expect("its bytes");
        let said = std::process::Command::new(&exe).arg("version").output().expect("go version").stdout;
        let v = version(&data).expect("go build information").expect("an inline version");
        assert!(String::from_utf8_lossy(&said).contains(&format!("{v} ")), "{v} against {}", String::from_utf8_lossy(&said));
        // its main module, as `go version -m` says it
        let m = std::process::Command::new(&exe).args(["version", "-m"]).arg(&exe).output().expect("go version -m").stdout;
        let m = String::from_utf8_lossy(&m);
        let said = m.lines().find_map(|l| l.trim().strip_prefix("mod\t")).map(|l| l.split('\t').next().unwrap_or("").to_string());
        assert_eq!(main_module(&data), said, "{m}");
    }
}
