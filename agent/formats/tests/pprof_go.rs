//! The pprof encoder against the real consumer: `go tool pprof` reads a
//! profile of three known stacks and gives back their sample types, labels,
//! frames and values. Skipped (out loud) only when Go is not installed.
use std::path::{Path, PathBuf};
use std::process::Command;

use waitmeter_formats::pprof::{Builder, Frame};

/// A file in the temp directory, removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn go() -> Option<PathBuf> {
    let candidates = [PathBuf::from("/usr/local/go/bin/go"), PathBuf::from("go")];
    candidates.into_iter().find(|g| Command::new(g).arg("version").output().is_ok_and(|o| o.status.success()))
}

fn pprof(go: &Path, args: &[&str], file: &Path) -> String {
    let out = Command::new(go).args(["tool", "pprof"]).args(args).arg(file).output().expect("run go tool pprof");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "go tool pprof {args:?} failed: {}\n{stderr}", out.status);
    format!("{stdout}\n{stderr}")
}

/// Three stacks (leaf first) of two threads and a GIL holder, in nanoseconds:
/// worker-1 waited 3 s for the GIL in take_gil (in two pieces that must
/// merge), worker-2 1.5 s on a futex, and main held the GIL in compute for 2 s.
fn profile() -> Builder {
    let mut b = Builder::new(&[("samples", "count"), ("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
    b.set_time(1_700_000_000_000_000_000, 10_000_000_000);
    b.add_comment("waitmeter pprof_go test");
    b.set_default_sample_type("wait");
    let py = |function, line| Frame { function, filename: "app.py", line, start_line: 1, ..Frame::default() };
    let take_gil = b.location(&Frame {
        function: "take_gil",
        system_name: "take_gil",
        filename: "Python/ceval_gil.c",
        line: 331,
        start_line: 290,
        address: 0x5a_1000,
    });
    let futex = b.location(&Frame { function: "futex_wait", filename: "lock.c", line: 12, ..Frame::default() });
    let (worker, main, compute) = (b.location(&py("worker", 20)), b.location(&py("main", 40)), b.location(&py("compute", 30)));
    let w1 = [("thread", "worker-1"), ("state", "gil"), ("role", "victim")];
    b.add_sample(&[take_gil, worker, main], &[1, 1_000_000_000], &w1);
    b.add_sample(&[take_gil, worker, main], &[2, 2_000_000_000], &w1);
    b.add_sample(&[futex, worker, main], &[1, 1_500_000_000], &[("thread", "worker-2"), ("state", "futex"), ("role", "victim")]);
    b.add_sample(&[compute, main], &[4, 2_000_000_000], &[("thread", "main"), ("state", "running"), ("role", "holder")]);
    assert_eq!(b.samples(), 3);
    b
}

#[test]
fn go_tool_pprof_reads_the_profile() {
    let Some(go) = go() else {
        waitmeter_formats::testing::skip("go is not installed (looked for /usr/local/go/bin/go and go on PATH)");
        return;
    };
    let file = TempFile(std::env::temp_dir().join(format!("waitmeter-pprof-go-{}.pb.gz", std::process::id())));
    std::fs::write(&file.0, profile().encode_gzip()).expect("write the profile");

    let raw = pprof(&go, &["-raw"], &file.0);
    assert!(raw.contains("PeriodType: wait nanoseconds"), "{raw}");
    // the sample types, `wait` the default
    assert!(raw.contains("samples/count wait/nanoseconds[dflt]"), "sample types: {raw}");
    // the merged sample: 3 samples, 3 s
    assert!(raw.contains("3 3000000000: 1 3 4 "), "merged sample: {raw}");
    assert!(raw.contains("1 1500000000: 2 3 4 "), "futex sample: {raw}");
    assert!(raw.contains("4 2000000000: 5 4 "), "holder sample: {raw}");
    for label in
        ["thread:[worker-1]", "thread:[worker-2]", "thread:[main]", "state:[gil]", "state:[futex]", "role:[victim]", "role:[holder]"]
    {
        assert!(raw.contains(label), "label {label}: {raw}");
    }
    // id: address, function, file:line:column, start line
    assert!(raw.contains("1: 0x5a1000 M=1 take_gil Python/ceval_gil.c:331:0 s=290"), "leaf frame: {raw}");
    assert!(raw.contains("5: 0x0 M=1 compute app.py:30:0 s=1"), "holder frame: {raw}");

    let top = pprof(&go, &["-top", "-sample_index=wait"], &file.0);
    assert!(top.contains("Type: wait"), "{top}");
    assert!(top.contains("of 6.50s total"), "total: {top}");
    // the first row after the header is the function with the most flat wait
    let first = top.lines().skip_while(|l| !l.trim_start().starts_with("flat")).nth(1).unwrap_or_default();
    let cols: Vec<&str> = first.split_whitespace().collect();
    assert_eq!((cols.first().copied(), cols.last().copied()), (Some("3s"), Some("take_gil")), "top row {first:?}: {top}");

    let tags = pprof(&go, &["-tags", "-sample_index=wait"], &file.0);
    for want in ["thread: Total 6.50s", "3s (46.15%): worker-1", "2s (30.77%): main", "1.50s (23.08%): worker-2"] {
        assert!(tags.contains(want), "{want}: {tags}");
    }
    let comments = pprof(&go, &["-comments"], &file.0);
    assert!(comments.contains("waitmeter pprof_go test"), "{comments}");
}
