//! Naming code a JIT generated (the JVM's compiled methods and stubs, Node.js's
//! JavaScript functions): the runtime writes what it generated where to a perf
//! map, `/tmp/perf-PID.map` as the process names it (its own PID, in its own
//! mount namespace). The map is read through the process's root
//! (`procfs::open_in_root`: a link cannot lead out of it), only if it is a
//! regular file owned by the process's user or root (perf's own rule), a
//! bounded number of bytes, and again as the runtime appends to it (at most
//! once a second, and only when an address is not in it). A map refused, too
//! large or with malformed lines is said once per process and counted; a JVM or
//! Node.js that writes no map is told, once, what makes it write one.
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;

use waitmeter_formats::perfmap::PerfMap;

/// Code ranges kept per process (a long-running Node.js service writes one line per function
/// compiled; a JVM's code cache holds tens of thousands of methods).
const MAX_ENTRIES: usize = 1 << 20;
/// The most of a map read, in all (bytes).
pub const MAX_BYTES: u64 = 256 << 20;
/// The most read at one look (bytes): a map that grows fast is read in steps.
const READ_STEP: usize = 16 << 20;
/// How often a map is looked at again for what the runtime appended.
const RECHECK_NS: u64 = 1_000_000_000;
/// The bytes of a map's start compared to tell a map appended to from one written anew.
const HEAD: usize = 4096;

/// Why a process' map is not (or no longer) read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// not a regular file (a link, a FIFO, a device, a folder)
    NotAFile,
    /// owned by neither the process's user nor root
    NotOwned,
    /// past `MAX_BYTES`: what came later is not read
    TooLarge,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::NotAFile => "not_a_file",
            Refused::NotOwned => "not_owned",
            Refused::TooLarge => "too_large",
        }
    }

    /// What it means for the process' JIT frames, in a line.
    pub fn said(self) -> String {
        match self {
            Refused::NotAFile | Refused::NotOwned => {
                format!("its JIT's perf map is not read ({}): JIT frames stay unnamed", self.label())
            }
            Refused::TooLarge => format!(
                "its JIT's perf map is larger than the {} MiB read of it (too_large): the code it names in its first {} MiB is named, what it names past them stays unnamed",
                MAX_BYTES >> 20,
                MAX_BYTES >> 20
            ),
        }
    }
}

/// A runtime whose generated code a perf map names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Jvm,
    Node,
}

impl Runtime {
    /// What process `pid` runs, from the files it maps: HotSpot's `libjvm.so`; Node.js's
    /// executable (`node`, `nodejs`) or `libnode.so`.
    pub fn of(pid: u32) -> Option<Runtime> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let bases = || crate::python::parse_maps(&maps).into_iter().map(|m| m.path.rsplit('/').next().unwrap_or("").to_string());
        if bases().any(|b| b == "libjvm.so") {
            return Some(Runtime::Jvm);
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let exe = exe.file_name()?.to_string_lossy().into_owned();
        (exe == "node" || exe == "nodejs" || bases().any(|b| b.starts_with("libnode.so"))).then_some(Runtime::Node)
    }

    fn name(self) -> &'static str {
        match self {
            Runtime::Jvm => "a JVM",
            Runtime::Node => "Node.js",
        }
    }

    fn code(self) -> &'static str {
        match self {
            Runtime::Jvm => "JIT-compiled Java",
            Runtime::Node => "JavaScript",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            Runtime::Jvm => {
                "write one with `jcmd PID Compiler.perfmap` after warm-up (JDK 17+), and start the JVM with -XX:+PreserveFramePointer (docs/probes/stacks.md)"
            }
            Runtime::Node => "start node with --perf-basic-prof (docs/probes/stacks.md)",
        }
    }
}

/// A perf map's name as a reader knows it: the JVM writes a method with its return type and
/// parameters (`void fixengine.Main.work(java.lang.management.ThreadMXBean, long)`), printed
/// as async-profiler and JFR print it (`fixengine.Main.work`); other names (V8's
/// `JS:*crunch file.js:3:20`, the JVM's stubs) stay as written.
pub fn readable(name: &str) -> &str {
    let Some(sig) = name.strip_suffix(')') else { return name };
    let Some((head, _params)) = sig.split_once('(') else { return name };
    match head.split_once(' ') {
        Some((ret, method)) if !ret.is_empty() && !method.is_empty() && !method.contains(' ') && method.contains('.') => method,
        _ => name,
    }
}

/// Whether a JVM keeps frame pointers in compiled code (`-XX:+PreserveFramePointer`), from the
/// options it was started with: `JAVA_TOOL_OPTIONS`, `JDK_JAVA_OPTIONS`, the command line, then
/// `_JAVA_OPTIONS`, the last setting winning (the order HotSpot reads them in). `None` when
/// they cannot be read. Options in an `@argfile` or a `-XX:Flags=` file are not seen.
pub fn jvm_frame_pointers(pid: u32) -> Option<bool> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let environ = crate::procfs::environ(pid)?;
    Some(preserves_frame_pointer(&cmdline, &environ))
}

fn preserves_frame_pointer(cmdline: &[u8], environ: &[u8]) -> bool {
    let env = |name: &str| -> Vec<String> {
        let prefix = format!("{name}=");
        environ
            .split(|b| *b == 0)
            .filter_map(|v| v.strip_prefix(prefix.as_bytes()))
            .flat_map(|v| String::from_utf8_lossy(v).split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    // the launcher's options: up to `-jar`, `-m` or the main class (what follows is the program's)
    let mut args: Vec<String> = vec![];
    let mut words = cmdline.split(|b| *b == 0).skip(1).map(|a| String::from_utf8_lossy(a).into_owned());
    while let Some(a) = words.next() {
        if matches!(a.as_str(), "-jar" | "-m" | "--module") || !a.starts_with('-') {
            break;
        }
        if matches!(
            a.as_str(),
            "-cp"
                | "-classpath"
                | "--class-path"
                | "-p"
                | "--module-path"
                | "--add-modules"
                | "--add-opens"
                | "--add-exports"
                | "--add-reads"
                | "--patch-module"
                | "--upgrade-module-path"
                | "--limit-modules"
        ) {
            words.next();
        }
        args.push(a);
    }
    let mut on = false;
    for a in env("JAVA_TOOL_OPTIONS").iter().chain(&env("JDK_JAVA_OPTIONS")).chain(&args).chain(&env("_JAVA_OPTIONS")) {
        match a.as_str() {
            "-XX:+PreserveFramePointer" => on = true,
            "-XX:-PreserveFramePointer" => on = false,
            _ => {}
        }
    }
    on
}

/// One process's map as read so far.
#[derive(Default)]
struct Map {
    map: PerfMap,
    /// the file read (device, inode): another file there starts over
    file: Option<(u64, u64)>,
    /// bytes taken (whole lines)
    taken: u64,
    /// the first bytes taken: a map written anew in place (the JVM's `Compiler.perfmap`
    /// truncates and writes it again) no longer starts with them
    head: Vec<u8>,
    /// when last looked at
    checked_at: u64,
    refused: Option<Refused>,
    /// the map was found at least once
    found: bool,
    /// said that the runtime writes no map (once)
    told: bool,
    /// its generated code is named without a map (a JVM whose code cache is read): no map is
    /// asked for
    needless: bool,
}

#[derive(Default)]
pub struct Jit {
    maps: HashMap<u32, Map>,
    /// maps refused, by reason (counted once per process and reason)
    refused: HashMap<Refused, u64>,
    /// lines skipped (malformed, or past the bound of ranges), in all maps
    bad_lines: u64,
}

impl Jit {
    /// The name of the generated code at `ip` in process `pid`, if its perf map has it.
    pub fn name(&mut self, pid: u32, ip: u64, now: u64) -> Option<String> {
        let m = self.maps.entry(pid).or_default();
        if let Some(n) = m.map.name(ip) {
            return Some(n.to_string());
        }
        if m.checked_at != 0 && now.saturating_sub(m.checked_at) < RECHECK_NS {
            return None;
        }
        m.checked_at = now.max(1);
        let bad_before = m.map.bad_lines + m.map.over_bound;
        let refused_before = m.refused;
        read_more(pid, m);
        self.bad_lines += (m.map.bad_lines + m.map.over_bound).saturating_sub(bad_before);
        if m.refused != refused_before {
            if let Some(r) = m.refused {
                *self.refused.entry(r).or_default() += 1;
                log::warn!("process {pid}: {}", r.said());
            }
        }
        if !m.told {
            m.told = true;
            let rt = Runtime::of(pid);
            if !m.found && !m.needless {
                if let Some(rt) = rt {
                    log::warn!("process {pid} ({}) writes no perf map: its {} frames stay unnamed; {}", rt.name(), rt.code(), rt.remedy());
                }
            }
            if rt == Some(Runtime::Jvm) && jvm_frame_pointers(pid) == Some(false) {
                log::warn!(
                    "process {pid} (a JVM) runs without -XX:+PreserveFramePointer: its stacks stop at the first JIT-compiled Java frame, \
                     and the methods that called it stay unseen; start it with -XX:+PreserveFramePointer (in JAVA_TOOL_OPTIONS in a pod; \
                     docs/probes/stacks.md)"
                );
            }
        }
        m.map.name(ip).map(str::to_string)
    }

    /// Process `pid`'s generated code is named without a perf map (a JVM whose code cache is
    /// read): its runtime is not told to write one.
    pub fn needless(&mut self, pid: u32) {
        self.maps.entry(pid).or_default().needless = true;
    }

    /// Process `pid` is not one measured (a waker of another process, whose stack is named): what
    /// its runtime lacks is not told, the remedies being for the processes asked for.
    pub fn quiet(&mut self, pid: u32) {
        self.maps.entry(pid).or_default().told = true;
    }

    /// Whether process `pid` has a perf map (found at least once).
    #[cfg(test)]
    pub fn has_map(&self, pid: u32) -> bool {
        self.maps.get(&pid).is_some_and(|m| m.found)
    }

    /// Maps refused (once per process and reason), and lines skipped (malformed, or past the
    /// bound of ranges), so far.
    pub fn lost(&self) -> (u64, u64) {
        (self.refused.values().sum(), self.bad_lines)
    }

    /// Maps refused by reason, and malformed lines skipped, so far.
    #[cfg(test)]
    pub fn losses(&self) -> (Vec<(&'static str, u64)>, u64) {
        let mut refused: Vec<_> = self.refused.iter().map(|(r, n)| (r.label(), *n)).collect();
        refused.sort_unstable();
        (refused, self.bad_lines)
    }

    /// Forget a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }
}

/// Read what was appended to the map since, within the bounds.
fn read_more(pid: u32, m: &mut Map) {
    let Some(own) = crate::procfs::own_pid(pid) else { return };
    let mut file = match crate::procfs::open_in_root(pid, &format!("/tmp/perf-{own}.map")) {
        Ok(f) => f,
        // a link where the map should be (O_NOFOLLOW)
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            m.found = true;
            m.refused = Some(Refused::NotAFile);
            return;
        }
        Err(_) => return,
    };
    let Ok(meta) = file.metadata() else { return };
    m.found = true;
    if !meta.file_type().is_file() {
        m.refused = Some(Refused::NotAFile);
        return;
    }
    let owner = crate::procfs::uid(pid);
    if meta.uid() != 0 && Some(meta.uid()) != owner {
        m.refused = Some(Refused::NotOwned);
        return;
    }
    let id = (meta.dev(), meta.ino());
    if m.file != Some(id) || meta.len() < m.taken || !starts_with(&mut file, &m.head) {
        // another file, or the runtime wrote it anew (jcmd Compiler.perfmap): start over
        *m = Map { file: Some(id), checked_at: m.checked_at, found: true, told: m.told, ..Default::default() };
    }
    m.refused = None;
    let end = meta.len().min(MAX_BYTES);
    if meta.len() > MAX_BYTES {
        m.refused = Some(Refused::TooLarge);
    }
    if end <= m.taken || file.seek(SeekFrom::Start(m.taken)).is_err() {
        return;
    }
    let want = ((end - m.taken) as usize).min(READ_STEP);
    let mut buf = Vec::with_capacity(want);
    if file.take(want as u64).read_to_end(&mut buf).is_err() {
        return;
    }
    let used = m.map.add(&buf, MAX_ENTRIES);
    if m.head.len() < HEAD {
        let more = (HEAD - m.head.len()).min(used);
        m.head.extend_from_slice(&buf[..more]);
    }
    m.taken += used as u64;
}

/// Whether the file begins with `head`.
fn starts_with(file: &mut std::fs::File, head: &[u8]) -> bool {
    let mut now = vec![0u8; head.len()];
    file.seek(SeekFrom::Start(0)).is_ok() && file.read_exact(&mut now).is_ok() && now == head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jvm_keeps_frame_pointers_by_the_last_setting_it_reads() {
        let on = |cmd: &str, env: &str| preserves_frame_pointer(cmd.replace(' ', "\0").as_bytes(), env.replace('|', "\0").as_bytes());
        assert!(!on("java -jar app.jar", "PATH=/bin"));
        assert!(on("java -XX:+PreserveFramePointer -jar app.jar", ""));
        assert!(on("java -jar app.jar", "JAVA_TOOL_OPTIONS=-Xmx1g -XX:+PreserveFramePointer|HOME=/"));
        assert!(!on("java -XX:-PreserveFramePointer -jar app.jar", "JAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer"));
        assert!(on("java -XX:-PreserveFramePointer -jar app.jar", "_JAVA_OPTIONS=-XX:+PreserveFramePointer"));
        assert!(on("java -jar app.jar", "JDK_JAVA_OPTIONS=-XX:+PreserveFramePointer"));
        assert!(!on("java -jar app.jar", "XJAVA_TOOL_OPTIONS=-XX:+PreserveFramePointer"));
        // the program's own arguments, after the jar or the main class, are not the JVM's
        assert!(!on("java -jar app.jar -XX:+PreserveFramePointer", ""));
        assert!(!on("java -cp lib/* com.example.Main -XX:+PreserveFramePointer", ""));
        assert!(on("java -cp lib/* -XX:+PreserveFramePointer com.example.Main", ""));
    }

    #[test]
    fn jvm_signatures_read_as_profilers_print_them() {
        assert_eq!(readable("void fixengine.Main.work(java.lang.management.ThreadMXBean, long)"), "fixengine.Main.work");
        assert_eq!(readable("java.lang.Object[] java.util.ArrayList.toArray()"), "java.util.ArrayList.toArray");
        assert_eq!(readable("void fixengine.Main$1.fromApp(quickfix.Message, quickfix.SessionID)"), "fixengine.Main$1.fromApp");
        for keep in [
            "Interpreter",
            "StubRoutines (1)",
            "I2C/C2I adapters",
            "JS:*crunchTheLedger [eval]:2:25",
            "monitorenter Runtime1 stub",
            "f(x)",
            "a b c(d)",
        ] {
            assert_eq!(readable(keep), keep);
        }
    }

    /// A child whose perf map is written as the runtimes write it, appended to, then written
    /// anew: named each time; a link, a FIFO or another user's file there is refused.
    #[test]
    fn names_code_from_the_map_the_process_writes() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            waitmeter_formats::testing::skip("a map of another user needs root to make");
            return;
        }
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "1000 100 Interpreter\n2000 40 JS:*handler /srv/app.js:3:1\n").unwrap();
        let mut jit = Jit::default();
        let now = 10_000_000_000;
        assert_eq!(jit.name(pid, 0x2010, now).as_deref(), Some("JS:*handler /srv/app.js:3:1"));
        assert_eq!(jit.name(pid, 0x1000, now).as_deref(), Some("Interpreter"));
        assert!(jit.has_map(pid));
        // appended to (the same start, longer): the new lines are read
        std::fs::write(&path, "1000 100 Interpreter\n2000 40 JS:*handler /srv/app.js:3:1\n3000 10 JS:*later /srv/app.js:9:1\n").unwrap();
        assert_eq!(jit.name(pid, 0x3004, now + 1), None, "not looked at again within a second");
        assert_eq!(jit.name(pid, 0x3004, now + RECHECK_NS).as_deref(), Some("JS:*later /srv/app.js:9:1"));
        // written anew (truncated, other code, longer): read from the start again
        std::fs::write(&path, "1000 100 Interpreter\n2000 40 JS:*other /srv/app.js:5:1\n3000 10 JS:*later /srv/app.js:9:1\n4000 8 x\n")
            .unwrap();
        assert_eq!(jit.name(pid, 0x4000, now + 2 * RECHECK_NS).as_deref(), Some("x"));
        assert_eq!(jit.name(pid, 0x2000, now + 2 * RECHECK_NS).as_deref(), Some("JS:*other /srv/app.js:5:1"));
        assert_eq!(jit.losses(), (vec![], 0));
        // malformed lines: skipped, counted, the good ones still read
        std::fs::write(&path, "1000 100 Interpreter\nnot a line\n5000 zz bad size\n6000 10 y\n").unwrap();
        assert_eq!(jit.name(pid, 0x6000, now + 3 * RECHECK_NS).as_deref(), Some("y"));
        assert_eq!(jit.lost(), (0, 2));
        // past the bound (a sparse file): what its first MAX_BYTES name is named, the map counted
        // as refused (too_large), and said so without claiming that nothing was read
        std::fs::write(&path, "7000 10 early\n").unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(MAX_BYTES + 4096).unwrap();
        let mut big = Jit::default();
        assert_eq!(big.name(pid, 0x7000, now).as_deref(), Some("early"));
        assert_eq!(big.losses().0, [("too_large", 1)]);
        let said = Refused::TooLarge.said();
        assert!(said.contains("first 256 MiB is named") && !said.contains("not read"), "{said}");
        // a link planted where the map is, a FIFO, a file of another user: refused, counted
        // once per process and reason, nothing read
        let refused = |jit: &mut Jit| {
            assert_eq!(jit.name(pid, 0x1000, now), None);
            assert_eq!(jit.name(pid, 0x1000, now + 2 * RECHECK_NS), None);
            assert!(jit.has_map(pid));
            assert_eq!(jit.lost(), (1, 0), "what the session exports (perf_map_refused, perf_map_bad_line)");
            jit.losses().0
        };
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        assert_eq!(refused(&mut Jit::default()), [("not_a_file", 1)]);
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.clone()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(refused(&mut Jit::default()), [("not_a_file", 1)], "a FIFO opens without blocking, and is refused");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "1000 100 Interpreter\n").unwrap();
        std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
        assert_eq!(refused(&mut Jit::default()), [("not_owned", 1)]);
        std::fs::remove_file(&path).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
