//! perf's JIT symbol maps (`/tmp/perf-PID.map`): one line per piece of
//! generated code, `START SIZE NAME`, START and SIZE in hexadecimal (with or
//! without `0x`), NAME the rest of the line. The JVM writes them
//! (`jcmd PID Compiler.perfmap`, `-XX:+DumpPerfMapAtExit`), Node.js with
//! `--perf-basic-prof`, and others (the .NET runtime, LuaJIT, perf-map-agent).
//!
//! The file is the target's, so hostile input: lines are parsed one by one
//! and a bad one is counted and skipped, names are cut at [`MAX_NAME`] bytes,
//! entries are capped at the caller's bound, and the parse is linear in the
//! input. Code is freed and its addresses reused as a JIT runs: a later line
//! overrides the earlier ones it overlaps, as perf reads the file.
use std::collections::BTreeMap;

/// The longest name kept (bytes; cut at a character boundary).
pub const MAX_NAME: usize = 512;

/// A map: code ranges by start, without overlaps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerfMap {
    /// start -> (end, name)
    ranges: BTreeMap<u64, (u64, String)>,
    /// lines that were not `START SIZE NAME`, or an empty or overflowing range
    pub bad_lines: u64,
    /// lines left out because the map held its bound of entries
    pub over_bound: u64,
}

impl PerfMap {
    /// Add the complete lines of `text` (a trailing line without its newline
    /// is left for the next call: the writer may be in the middle of it).
    /// Returns the bytes consumed. At most `max_entries` ranges are kept.
    pub fn add(&mut self, text: &[u8], max_entries: usize) -> usize {
        let mut used = 0;
        for line in text.split_inclusive(|b| *b == b'\n') {
            if !line.ends_with(b"\n") {
                break;
            }
            used += line.len();
            let line = &line[..line.len() - 1];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            match parse_line(line) {
                Some((start, end, name)) if self.ranges.len() < max_entries || self.ranges.contains_key(&start) => {
                    self.insert(start, end, name)
                }
                Some(_) => self.over_bound += 1,
                None => self.bad_lines += 1,
            }
        }
        used
    }

    /// Insert [start, end), cutting what it overlaps.
    fn insert(&mut self, start: u64, end: u64, name: String) {
        // a range that begins before `start` and runs into it keeps its head
        if let Some((&s, &(e, _))) = self.ranges.range(..start).next_back() {
            if e > start {
                let (_, n) = self.ranges.remove(&s).expect("found");
                self.ranges.insert(s, (start, n.clone()));
                if e > end {
                    // it ran past the new one too: its tail stays
                    self.ranges.insert(end, (e, n));
                }
            }
        }
        // ranges that begin inside go, but a tail past `end` stays
        let inside: Vec<u64> = self.ranges.range(start..end).map(|(s, _)| *s).collect();
        for s in inside {
            let (e, n) = self.ranges.remove(&s).expect("found");
            if e > end {
                self.ranges.insert(end, (e, n));
            }
        }
        self.ranges.insert(start, (end, name));
    }

    /// The name of the code at `addr`.
    pub fn name(&self, addr: u64) -> Option<&str> {
        let (_, (end, name)) = self.ranges.range(..=addr).next_back()?;
        (addr < *end).then_some(name.as_str())
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

fn hex(field: &[u8]) -> Option<u64> {
    let digits = field.strip_prefix(b"0x").or_else(|| field.strip_prefix(b"0X")).unwrap_or(field);
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// `START SIZE NAME` -> (start, end, name).
fn parse_line(line: &[u8]) -> Option<(u64, u64, String)> {
    let mut fields = line.splitn(3, |b| *b == b' ');
    let start = hex(fields.next()?)?;
    let size = hex(fields.next()?)?;
    let name = fields.next()?;
    let end = start.checked_add(size).filter(|_| size > 0)?;
    let name = String::from_utf8_lossy(name);
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    let mut cut = name.len().min(MAX_NAME);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    Some((start, end, name[..cut].to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_the_jvm_and_node() {
        let mut m = PerfMap::default();
        let text = b"0x00007f0a1c000000 0x0000000000000180 Interpreter\n\
7f0a1c0a4a40 1e0 void com.example.Orders.fromApp(quickfix.Message)\n\
3d8f2e0a4e0 3c JS:*handler /srv/app/server.js:12:20\n\
bogus line\n\
10 0 zero-size\n\
ffffffffffffffff 2 overflows\n\
20 10\n\
30 10 partial";
        let used = m.add(text, 100);
        assert_eq!(used, text.len() - b"30 10 partial".len(), "the unfinished line is left");
        assert_eq!(m.len(), 3);
        assert_eq!(m.bad_lines, 4);
        assert_eq!(m.name(0x7f0a1c000000), Some("Interpreter"));
        assert_eq!(m.name(0x7f0a1c00017f), Some("Interpreter"));
        assert_eq!(m.name(0x7f0a1c000180), None);
        assert_eq!(m.name(0x7f0a1c0a4a41), Some("void com.example.Orders.fromApp(quickfix.Message)"));
        assert_eq!(m.name(0x3d8f2e0a4e0 + 0x3b), Some("JS:*handler /srv/app/server.js:12:20"));
        assert_eq!(m.name(1), None);
        // the rest of the partial line comes
        let used = m.add(b"30 10 partial\n", 100);
        assert_eq!(used, 14);
        assert_eq!(m.name(0x35), Some("partial"));
    }

    #[test]
    fn later_code_overrides_what_it_overlaps() {
        let mut m = PerfMap::default();
        m.add(b"100 100 old\n180 10 inner\n", 10);
        assert_eq!((m.name(0x150), m.name(0x185), m.name(0x195)), (Some("old"), Some("inner"), Some("old")));
        m.add(b"80 100 new\n", 10);
        assert_eq!(
            (m.name(0x80), m.name(0x17f), m.name(0x185), m.name(0x195), m.name(0x1ff)),
            (Some("new"), Some("new"), Some("inner"), Some("old"), Some("old"))
        );
        m.add(b"0 1000 all\n", 10);
        assert_eq!((m.len(), m.name(0x185)), (1, Some("all")));
    }

    #[test]
    fn bounded() {
        let mut m = PerfMap::default();
        let text: String = (0..50).map(|i| format!("{:x} 10 f{i}\n", i * 0x10)).collect();
        m.add(text.as_bytes(), 20);
        assert_eq!((m.len(), m.over_bound), (20, 30));
        let long = format!("0 10 {}\n", "é".repeat(400));
        let mut m = PerfMap::default();
        m.add(long.as_bytes(), 1);
        assert!(m.name(0).unwrap().len() <= MAX_NAME);
    }
}
