//! Unwind tables for the objects of a target built without frame pointers.
//!
//! The probe walks a native stack by frame pointers (`bpf/stacks.bpf.h`). Most distributions
//! build their C library, libstdc++ and their own `python3` without them: a walk that enters
//! such code at a wait (every futex wait's leaf is in the C library) used to end there, so a
//! JVM's or a C program's waits read `pthread_cond_wait (libc.so.6)` and nothing above. Here
//! each such object's `.eh_frame` becomes a table of rows (`formats::cfi`), given to the probe
//! once per file whichever processes map it, and each process gets the list of its code
//! mappings of those objects; the probe's walk steps through them by the rows and through the
//! rest by frame pointers, as the OpenTelemetry profiler does.
//!
//! An object "keeps frame pointers" when most of its functions set their CFA by rbp: it needs
//! no table (HotSpot's libjvm, a `-fno-omit-frame-pointer` build). The rows live in one kernel
//! array, appended to and never moved: what does not fit is counted (`unwind_no_room`) and
//! said once, as are code mappings past the probe's per-process bound (`unwind_maps_full`).
//! Files are the target's (hostile): `formats::cfi` bounds what it reads.
use std::collections::HashMap;

use super::native::{file_id, FileId};
use crate::probes::stacks::{UnwindMap, UNWIND_MAX_MAPS};
use crate::python::binary::FileSource;
use waitmeter_formats::cfi::{self, Row};
use waitmeter_formats::elf::Elf;
use waitmeter_formats::gopclntab::{self, Pclntab};

/// Rows of one object at most (the C library has ~28k, libstdc++ ~30k).
const MAX_OBJECT_ROWS: usize = 1 << 21;
/// `.eh_frame` bytes read at most from one object.
const MAX_EH_FRAME: u64 = 64 << 20;
/// Objects known (those placed and those that need no table).
const MAX_OBJECTS: usize = 4096;
/// How often a process's mappings are read again (for objects it loaded since).
pub const REFRESH_NS: u64 = 10_000_000_000;

/// Where an object's rows are in the kernel array, and its link-time address less its file
/// offset (of its code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placed {
    first: u32,
    count: u32,
    delta: u64,
}

/// Why an object gets no table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Skip {
    /// it keeps frame pointers, or has no `.eh_frame`: the frame-pointer walk is all it takes
    NotNeeded,
    /// its file or its table could not be read
    Unreadable,
    /// no room left in the kernel array
    NoRoom,
}

pub struct Unwind {
    capacity: u32,
    next: u32,
    objects: HashMap<FileId, Result<Placed, Skip>>,
    /// pid -> the mappings last given
    procs: HashMap<u32, Vec<UnwindMap>>,
    /// objects left without a table for want of room, and code mappings past the bound
    no_room: u64,
    maps_full: u64,
    said_no_room: bool,
    said_maps_full: bool,
}

/// An object's table: None when it needs none.
fn table(path: &std::path::Path) -> anyhow::Result<Option<(Vec<Row>, u64)>> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let src = FileSource::new(file, size);
    let elf = Elf::parse(&src)?;
    let go = go_table(&elf)?;
    let eh = match elf.section(".eh_frame").cloned() {
        Some(eh) => Some(cfi::parse(&elf.section_data(&eh, MAX_EH_FRAME)?, eh.addr, MAX_OBJECT_ROWS)?),
        None => None,
    };
    let rows = match (go, eh) {
        // Go's assembly need not keep a frame pointer however the rest is built: its table always
        (Some(go), eh) => with_go(go.rows, eh.map(|t| t.rows).unwrap_or_default()),
        (None, Some(t)) if !t.keeps_frame_pointers() && !t.rows.is_empty() => t.rows,
        (None, _) => return Ok(None),
    };
    // the probe keeps a row's address in 32 bits
    if rows.last().is_some_and(|r| r.pc > u64::from(u32::MAX)) {
        anyhow::bail!("code past 4 GiB of link-time addresses");
    }
    // code sections: link-time address less file offset, one for the object's code segment
    let text = elf.section(".text").filter(|s| s.addr != 0).ok_or_else(|| anyhow::anyhow!("no .text section"))?;
    Ok(Some((rows, text.addr.wrapping_sub(text.offset))))
}

/// The Go runtime's function table of a Go executable (`.gopclntab`; `.data.rel.ro.gopclntab` in
/// a position-independent one) as unwind rows; None when it has none.
fn go_table<S: waitmeter_formats::elf::Source + ?Sized>(elf: &Elf<'_, S>) -> anyhow::Result<Option<cfi::Table>> {
    let Some(sec) = gopclntab::SECTIONS.iter().find_map(|n| elf.section(n)).cloned() else { return Ok(None) };
    let text = elf.section(".text").map_or(0, |t| t.addr);
    let data = elf.section_data(&sec, MAX_EH_FRAME)?;
    Ok(Some(Pclntab::parse(&data, text)?.unwind(MAX_OBJECT_ROWS)?))
}

/// Go's rows where its functions are, and the `.eh_frame` rows elsewhere (an executable linked
/// with C code through cgo): sorted by address, adjacent rows differing.
fn with_go(go: Vec<Row>, eh: Vec<Row>) -> Vec<Row> {
    let (Some(lo), Some(hi)) = (go.first().map(|r| r.pc), go.last().map(|r| r.pc)) else { return eh };
    // the rule in force at `hi` before Go's rows: where C code follows Go's
    let after = eh.iter().take_while(|r| r.pc <= hi).last().map(|r| r.rule);
    let mut rows: Vec<Row> = eh.iter().filter(|r| r.pc < lo).copied().collect();
    rows.extend(go);
    if let (Some(rule), Some(last)) = (after, rows.last_mut()) {
        last.rule = rule; // Go's last row: the Stop at the end of its code
    }
    rows.extend(eh.into_iter().filter(|r| r.pc > hi));
    rows.dedup_by(|b, a| a.rule == b.rule);
    rows
}

impl Unwind {
    /// Rows of at most `capacity` in all (the kernel array's size).
    pub fn new(capacity: u32) -> Unwind {
        Unwind {
            capacity,
            next: 0,
            objects: HashMap::new(),
            procs: HashMap::new(),
            no_room: 0,
            maps_full: 0,
            said_no_room: false,
            said_maps_full: false,
        }
    }

    fn object(&mut self, target: &std::path::Path, put: &mut dyn FnMut(u32, &[Row]) -> anyhow::Result<()>) -> Option<Placed> {
        let id = file_id(target)?;
        if let Some(known) = self.objects.get(&id) {
            return known.ok();
        }
        if self.objects.len() >= MAX_OBJECTS {
            // those without rows are cheap to find again; placed ones keep their rows
            self.objects.retain(|_, v| v.is_ok());
        }
        let placed = match table(target) {
            Ok(None) => Err(Skip::NotNeeded),
            Err(e) => {
                log::debug!("{}: no unwind table: {e:#}", target.display());
                Err(Skip::Unreadable)
            }
            Ok(Some((rows, delta))) => {
                let count = u32::try_from(rows.len()).unwrap_or(u32::MAX);
                match self.next.checked_add(count).filter(|end| *end <= self.capacity) {
                    None => {
                        self.no_room += 1;
                        if !self.said_no_room {
                            self.said_no_room = true;
                            log::warn!(
                                "{}: its {count} unwind rows do not fit ({} of {} used): stacks stop where they enter its code \
                                 (counted as reason=\"unwind_no_room\")",
                                target.display(),
                                self.next,
                                self.capacity
                            );
                        }
                        Err(Skip::NoRoom)
                    }
                    Some(end) => match put(self.next, &rows) {
                        Ok(()) => {
                            let p = Placed { first: self.next, count, delta };
                            self.next = end;
                            Ok(p)
                        }
                        Err(e) => {
                            log::warn!("{}: its unwind rows were not written: {e:#}", target.display());
                            Err(Skip::Unreadable)
                        }
                    },
                }
            }
        };
        self.objects.insert(id, placed);
        placed.ok()
    }

    /// The code mappings of process `pid` (a PID of the agent's namespace) whose objects are
    /// unwound by table, each new object's rows written with `put(first, rows)`. None when they
    /// are those last given (nothing to write).
    pub fn refresh(&mut self, pid: u32, put: &mut dyn FnMut(u32, &[Row]) -> anyhow::Result<()>) -> Option<Vec<UnwindMap>> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let mut out = vec![];
        let mut over = 0u64;
        for m in crate::python::parse_maps(&text).into_iter().filter(|m| m.exec) {
            let Some(p) = self.object(&crate::python::target_path(pid, &m.path), put) else { continue };
            if out.len() >= UNWIND_MAX_MAPS {
                over += 1;
                continue;
            }
            let bias = m.start.wrapping_sub(m.offset).wrapping_sub(p.delta);
            out.push(UnwindMap { start: m.start, end: m.end, bias, first: p.first, count: p.count });
        }
        if self.procs.get(&pid) == Some(&out) {
            return None;
        }
        if over > 0 {
            self.maps_full += over;
            if !self.said_maps_full {
                self.said_maps_full = true;
                log::warn!(
                    "process {pid}: {over} code mappings without frame pointers past the {UNWIND_MAX_MAPS} the probe walks by table: \
                     stacks stop where they enter them (counted as reason=\"unwind_maps_full\")"
                );
            }
        }
        self.procs.insert(pid, out.clone());
        Some(out)
    }

    /// The code mappings last given for process `pid`.
    pub fn given(&self, pid: u32) -> Vec<UnwindMap> {
        self.procs.get(&pid).cloned().unwrap_or_default()
    }

    /// Forget a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Objects left without a table for want of room, and code mappings past the probe's bound.
    pub fn lost(&self) -> (u64, u64) {
        (self.no_room, self.maps_full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go executable keeps frame pointers but its assembly need not: it is unwound by the Go
    /// runtime's own table, every function of it; where C code of its own follows Go's (cgo), the
    /// `.eh_frame` rows stand.
    #[test]
    fn a_go_executable_is_unwound_by_its_function_table() {
        let go = waitmeter_formats::testing::go_toolchain();
        let (rows, _) = table(&go).unwrap().expect("a Go executable gets a table");
        assert!(rows.len() > 10_000 && rows.windows(2).all(|w| w[0].pc < w[1].pc && w[0].rule != w[1].rule), "{}", rows.len());

        use waitmeter_formats::cfi::{Cfa, Rule};
        let sp = |n| Rule::Step { cfa: Cfa::Sp(n), fp_at: None };
        let row = |pc, rule| Row { pc, rule };
        let go_rows = vec![row(0x2000, sp(8)), row(0x2004, sp(0x20)), row(0x2100, Rule::Stop)];
        let c_rows = vec![row(0x1000, sp(8)), row(0x1010, sp(16)), row(0x1100, Rule::Stop), row(0x2000, sp(8)), row(0x2200, sp(8))];
        assert_eq!(
            with_go(go_rows, c_rows),
            [
                row(0x1000, sp(8)),
                row(0x1010, sp(16)),
                row(0x1100, Rule::Stop),
                row(0x2000, sp(8)),
                row(0x2004, sp(0x20)),
                row(0x2100, sp(8))
            ],
            "C's rows before and after Go's, Go's between; the rule in force after Go's code is C's"
        );
    }

    /// This test's own process maps the C library (Debian builds it without frame pointers):
    /// its code mapping gets its rows, placed once however often asked; an array too small
    /// for them is a counted loss, not a partial table.
    #[test]
    fn the_c_library_is_placed_once_and_a_full_array_is_counted() {
        let pid = std::process::id();
        let mut written: Vec<(u32, usize)> = vec![];
        let mut u = Unwind::new(1 << 20);
        let maps = u.refresh(pid, &mut |first, rows| {
            written.push((first, rows.len()));
            Ok(())
        });
        let maps = maps.expect("the first refresh gives the mappings");
        let libc = crate::python::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap())
            .into_iter()
            .find(|m| m.exec && m.path.contains("/libc.so"))
            .expect("the C library's code");
        let m = maps.iter().find(|m| m.start == libc.start).expect("the C library's code is unwound by table");
        // the address of a libc function less the bias is its link-time address, in the rows
        let ip = libc::getpid as *const () as u64;
        assert!(ip >= m.start && ip < m.end);
        let bytes = std::fs::read(&libc.path).unwrap();
        let getpid = Elf::parse(bytes.as_slice()).unwrap().dynamic_symbol("getpid").expect("getpid in .dynsym").value;
        assert_eq!(ip.wrapping_sub(m.bias), getpid, "the bias turns an address into the link-time one");
        assert!(m.count > 1000 && written.iter().any(|(f, n)| *f == m.first && *n == m.count as usize), "{written:?}");
        assert!(u.refresh(pid, &mut |_, _| panic!("written twice")).is_none(), "unchanged: nothing to give");

        let mut small = Unwind::new(100);
        let maps = small.refresh(pid, &mut |_, _| Ok(())).unwrap_or_default();
        assert!(maps.iter().all(|m| m.start != libc.start));
        assert!(small.lost().0 >= 1);
    }
}
