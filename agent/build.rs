//! Builds one BPF object and its Rust skeleton per `bpf/<probe>.bpf.c`, and the sched probe's legacy object.
use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// Probe families; each has `bpf/<stem>.bpf.c`, `bpf/<stem>.h` and `src/probes/<stem>.rs`.
const PROBES: &[&str] = &["sched", "gil", "pypark", "syscalls"];

/// Probe families built twice: also as the legacy object (`-DWM_LEGACY=1`, bpf/core_fixes.bpf.h),
/// for kernels without bpf_loop() (Linux 5.10-5.16).
const LEGACY: &[&str] = &["sched"];

/// The skeleton's call that names the object's bytes, rewritten to let the agent choose them.
const SKEL_DATA: &str = "ObjectSkeletonConfigBuilder::new(&DATA)";

/// Build `<stem>`'s legacy object, `<out>/legacy/<stem>.o`, and make the main skeleton open either:
/// the two objects' skeletons must be alike but for their bytes (the same maps, programs and
/// globals at the same offsets), or the build fails; the main skeleton then asks
/// `object_bytes(&DATA)` (defined beside its `include!`) which bytes to open.
fn legacy_object(stem: &str, src: &Path, skel: &Path, out: &Path, clang: &str, args: Vec<String>) {
    let dir = out.join("legacy");
    std::fs::create_dir_all(&dir).expect("OUT_DIR is writable");
    let obj = dir.join(format!("{stem}.o"));
    let legacy_skel = dir.join(format!("{stem}.skel.rs"));
    SkeletonBuilder::new()
        .source(src)
        .obj(&obj)
        .clang(clang)
        .clang_args(args)
        .build_and_generate(&legacy_skel)
        .unwrap_or_else(|e| panic!("failed to build bpf/{stem}.bpf.c with WM_LEGACY=1: {e:#}"));
    let main = std::fs::read_to_string(skel).expect("the skeleton was written");
    let legacy = std::fs::read_to_string(&legacy_skel).expect("the skeleton was written");
    // what the skeleton relies on: the maps and programs it names (in any order: the maps are
    // listed as the object first uses them), and the layout of the globals and of waitmeter's own
    // types (the other kernel types each object uses differ, and are not shared)
    fn shape(s: &str) -> Vec<String> {
        let (mut out, mut block): (Vec<String>, Option<String>) = (vec![], None);
        for line in s.split("static DATA").next().unwrap_or_default().lines().map(str::trim) {
            if let Some(b) = &mut block {
                b.push_str(line);
                b.push('\n');
                if line == "}" {
                    out.extend(block.take());
                }
            } else if line.starts_with(".map(") || line.starts_with(".prog(") {
                out.push(line.trim_end_matches(';').to_string());
            } else if let Some(name) = line.strip_prefix("pub struct ") {
                let name = name.split([' ', '{', '<']).next().unwrap_or_default();
                if name.starts_with("wm_") || ["rodata", "bss", "data"].contains(&name) {
                    block = Some(format!("{line}\n"));
                }
            }
        }
        out.sort_unstable();
        out
    }
    if shape(&main) != shape(&legacy) {
        panic!(
            "bpf/{stem}.bpf.c: its legacy object (WM_LEGACY=1) differs from the main one in its maps, programs or globals \
             (compare {} with {}): keep `WM_LEGACY` inside function bodies",
            skel.display(),
            legacy_skel.display()
        );
    }
    if main.matches(SKEL_DATA).count() != 1 {
        panic!("libbpf-cargo's skeleton no longer opens `{SKEL_DATA}` once: agent/build.rs must learn its new form");
    }
    std::fs::write(skel, main.replace(SKEL_DATA, "ObjectSkeletonConfigBuilder::new(super::object_bytes(&DATA))"))
        .expect("the skeleton is writable");
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("..");
    let bpf = root.join("bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86",
        other => panic!("waitmeter has no pinned vmlinux.h for {other} yet"),
    };
    // clang-19 handles CO-RE bit-field reads that crash clang 14; WAITMETER_CLANG overrides.
    let clang = env::var("WAITMETER_CLANG").unwrap_or_else(|_| "clang-19".to_string());
    let args = |legacy: bool| {
        let mut a: Vec<String> = vec![
            "-O2".into(),
            // v3: atomic OR for the watched bitmap (kernel 5.12+; the legacy object uses add only)
            "-mcpu=v3".into(),
            "-g".into(),
            "-Wall".into(),
            "-Werror".into(),
            format!("-I{}", bpf.display()),
            format!("-I{}", bpf.join("vmlinux").join(arch).display()),
            "-idirafter".into(),
            "/usr/include/x86_64-linux-gnu".into(),
        ];
        if legacy {
            // bpf/core_fixes.bpf.h: the object for kernels without bpf_loop(); the callbacks it
            // leaves out are defined, unused
            a.extend(["-DWM_LEGACY=1".into(), "-Wno-unused-function".into()]);
        }
        a
    };
    for stem in PROBES {
        let src = bpf.join(format!("{stem}.bpf.c"));
        let skel = out.join(format!("{stem}.skel.rs"));
        SkeletonBuilder::new()
            .source(&src)
            .clang(&clang)
            .clang_args(args(false))
            .build_and_generate(&skel)
            .unwrap_or_else(|e| panic!("failed to build bpf/{stem}.bpf.c: {e:#}"));
        if LEGACY.contains(stem) {
            legacy_object(stem, &src, &skel, &out, &clang, args(true));
        }
        println!("cargo:rerun-if-changed={}", src.display());
        println!("cargo:rerun-if-changed={}", bpf.join(format!("{stem}.h")).display());
        println!("cargo:rerun-if-changed={}", bpf.join("vmlinux").join(arch).join("vmlinux.h").display());
    }
    // every header the objects include, and the folder itself (a header added or removed)
    println!("cargo:rerun-if-changed={}", bpf.display());
    for entry in std::fs::read_dir(&bpf).expect("bpf/ is readable").flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "h") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-env-changed=WAITMETER_CLANG");
}
