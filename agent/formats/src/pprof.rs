//! pprof profiles (`perftools.profiles.Profile`, `proto/profile.proto` of
//! github.com/google/pprof), encoded by hand: the few messages waitmeter
//! writes do not justify a protobuf code generator in the build.
//!
//! A [`Builder`] keeps the string table (index 0 is `""`, as the format
//! requires), deduplicates functions and locations, and merges samples with
//! the same stack and labels (values summed), so a profile of a long window
//! is as small as one of a short window. Each location has one `Line` (one
//! function: waitmeter symbolises no inlined frames) and no mapping.
//!
//! What goes in comes from the target processes (function, file and thread
//! names) and is hostile: every string is cut to [`MAX_STRING`] bytes, and
//! every table is bounded (below). What does not fit is counted
//! ([`Builder::dropped`]) and stands in the profile as a placeholder
//! (`[waitmeter: ...]` frames) rather than vanishing, so a flame graph of a
//! full profile still adds up where it can. The bounds keep the encoded
//! profile under Pyroscope's default `validation.max-profile-size-bytes` (4
//! MiB, uncompressed) and its sample count under
//! `validation.max-profile-stacktrace-samples` (16000)
//! (`pkg/validation/limits.go` of github.com/grafana/pyroscope).
use std::collections::HashMap;
use std::io::Write;

/// Longest string kept (function and file names, label keys and values,
/// comments), in bytes; longer ones are cut on a char boundary.
pub const MAX_STRING: usize = 256;
/// Most distinct strings (the `""` at index 0 included).
pub const MAX_STRINGS: usize = 16_384;
/// Most distinct locations; functions are at most as many.
pub const MAX_LOCATIONS: usize = 16_384;
/// Most distinct samples (stack + labels).
pub const MAX_SAMPLES: usize = 8_192;
/// Deepest stack kept: deeper ones keep their `MAX_DEPTH - 1` innermost
/// frames (where the thread waited) under a `[waitmeter: frames cut]` root.
/// waitmeter's stacks are at most 127 native + 64 Python frames.
pub const MAX_DEPTH: usize = 256;
/// Most labels per sample.
pub const MAX_LABELS: usize = 16;
/// Most comments.
pub const MAX_COMMENTS: usize = 32;
/// Upper bound of the encoded size: each string, function, location and
/// sample is charged its largest encoding when added, and one that would
/// pass this is dropped. 1 MiB below Pyroscope's 4 MiB default.
pub const MAX_ENCODED: usize = 3 << 20;

/// The placeholders' names.
const STRINGS_FULL: &str = "[waitmeter: string table full]";
const LOCATIONS_FULL: &str = "[waitmeter: location table full]";
const FRAMES_CUT: &str = "[waitmeter: frames cut]";

/// The largest encodings, for [`MAX_ENCODED`]: a tag and a varint take at
/// most 11 bytes, a length prefix at most 3 for what fits the bounds here.
const FUNCTION_COST: usize = 5 * 11 + 4;
const LOCATION_COST: usize = 2 * 11 + (2 * 11 + 3) + 4;
/// location ids fit 3 varint bytes (ids are below 2^21)
fn sample_cost(depth: usize, values: usize, labels: usize) -> usize {
    4 + (3 + 3 * depth) + (3 + 10 * values) + labels * (2 * 11 + 3)
}

/// One frame of a stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame<'a> {
    /// human-readable name (`Function.name`)
    pub function: &'a str,
    /// name as the system knows it, e.g. mangled (`Function.system_name`);
    /// "": the same as `function` (what Go's runtime writes)
    pub system_name: &'a str,
    pub filename: &'a str,
    /// line of the call site in `filename`; 0: unknown
    pub line: i64,
    /// first line of the function; 0: unknown
    pub start_line: i64,
    /// instruction address; 0: none (Python frames)
    pub address: u64,
}

/// What did not fit, by kind (see the module doc). Strings cut to
/// [`MAX_STRING`] are not lost and are counted apart, in `truncated`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// samples not recorded, with their values: the sample table or the size
    /// budget was full, or the sample was malformed (a value count other than
    /// the sample types', a location id [`Builder::location`] did not give)
    pub samples: u64,
    /// frames cut from stacks deeper than [`MAX_DEPTH`]
    pub frames: u64,
    /// frames that became the `location table full` placeholder
    pub locations: u64,
    /// strings that became the `string table full` placeholder
    pub strings: u64,
    /// labels of a sample beyond [`MAX_LABELS`] or with an empty key or value
    /// (pprof cannot carry an empty string label: string index 0 there reads
    /// as "a numeric label"), and comments beyond [`MAX_COMMENTS`]
    pub labels: u64,
    /// strings cut to [`MAX_STRING`] bytes
    pub truncated: u64,
}

/// Function key: name, system name, file (string indices), start line.
type FunctionKey = (u64, u64, u64, i64);
/// Location key: function id, line, address.
type LocationKey = (u64, i64, u64);
/// Sample key: location ids (leaf first), label (key, value) string indices sorted.
type SampleKey = (Vec<u64>, Vec<(u64, u64)>);

struct Function {
    name: u64,
    system_name: u64,
    filename: u64,
    start_line: i64,
}

struct Location {
    function: u64,
    line: i64,
    address: u64,
}

/// A profile under construction; see the module doc.
pub struct Builder {
    strings: Vec<Box<str>>,
    string_ids: HashMap<Box<str>, u64>,
    functions: Vec<Function>,
    function_ids: HashMap<FunctionKey, u64>,
    locations: Vec<Location>,
    location_ids: HashMap<LocationKey, u64>,
    /// values by sample index (order of arrival)
    samples: Vec<Vec<i64>>,
    /// each sample's key and index (the keys are kept once: stacks are the bulk)
    sample_ids: HashMap<SampleKey, usize>,
    sample_types: Vec<(u64, u64)>,
    period_type: (u64, u64),
    period: i64,
    time_nanos: i64,
    duration_nanos: i64,
    comments: Vec<u64>,
    default_sample_type: u64,
    /// the upper bound of the encoded size so far
    cost: usize,
    dropped: Dropped,
}

impl Builder {
    /// A profile whose samples have one value per `(type, unit)` of
    /// `sample_types` (e.g. `[("wait", "nanoseconds")]`), taken every
    /// `period` events of `period_type`.
    pub fn new(sample_types: &[(&str, &str)], period_type: (&str, &str), period: i64) -> Builder {
        let mut b = Builder {
            strings: vec!["".into()],
            string_ids: HashMap::from([("".into(), 0)]),
            functions: vec![],
            function_ids: HashMap::new(),
            locations: vec![],
            location_ids: HashMap::new(),
            samples: vec![],
            sample_ids: HashMap::new(),
            sample_types: vec![],
            period_type: (0, 0),
            period,
            time_nanos: 0,
            duration_nanos: 0,
            comments: vec![],
            default_sample_type: 0,
            cost: 64,
            dropped: Dropped::default(),
        };
        // a handful from the agent, not from targets: no bound but the strings'
        b.sample_types = sample_types.iter().map(|(t, u)| (b.string(t), b.string(u))).collect();
        b.cost += b.sample_types.len() * 25;
        b.period_type = (b.string(period_type.0), b.string(period_type.1));
        b
    }

    /// When the profile's window began (ns since the Unix epoch) and how long it was.
    pub fn set_time(&mut self, time_nanos: i64, duration_nanos: i64) {
        self.time_nanos = time_nanos;
        self.duration_nanos = duration_nanos;
    }

    /// A free-text comment (`pprof -comments` shows them).
    pub fn add_comment(&mut self, s: &str) {
        if self.comments.len() >= MAX_COMMENTS {
            self.dropped.labels += 1;
            return;
        }
        let i = self.string(s);
        self.comments.push(i);
        self.cost += 11;
    }

    /// The sample type viewers show first (pprof's default is the last one).
    pub fn set_default_sample_type(&mut self, name: &str) {
        self.default_sample_type = self.string(name);
    }

    /// The location id of a frame, for [`Builder::add_sample`]. Frames with
    /// the same function, system name, file and start line share a Function;
    /// with the same Function, line and address, a Location (and its id).
    pub fn location(&mut self, f: &Frame) -> u64 {
        let name = self.string(f.function);
        let system_name = if f.system_name.is_empty() { name } else { self.string(f.system_name) };
        let key = (name, system_name, self.string(f.filename), f.start_line);
        let function = self.function_ids.get(&key).copied();
        if let Some(&id) = function.and_then(|function| self.location_ids.get(&(function, f.line, f.address))) {
            return id;
        }
        // a new Function comes with a new Location: there are never more Functions
        let cost = LOCATION_COST + if function.is_none() { FUNCTION_COST } else { 0 };
        if self.locations.len() >= MAX_LOCATIONS || !self.charge(cost) {
            return self.full_location();
        }
        let function = function.unwrap_or_else(|| self.push_function(key));
        self.push_location((function, f.line, f.address))
    }

    /// Add `values` (one per sample type) to the sample of this stack
    /// (location ids from [`Builder::location`], leaf first) and these string
    /// labels; a sample with the same stack and labels (in any order) gets
    /// them summed. See [`Dropped`] for what is not recorded.
    pub fn add_sample(&mut self, locations: &[u64], values: &[i64], labels: &[(&str, &str)]) {
        if values.len() != self.sample_types.len() || locations.iter().any(|&id| id == 0 || id > self.locations.len() as u64) {
            self.dropped.samples += 1;
            return;
        }
        let mut stack: Vec<u64> = if locations.len() > MAX_DEPTH {
            self.dropped.frames += (locations.len() - (MAX_DEPTH - 1)) as u64;
            let mut s = locations[..MAX_DEPTH - 1].to_vec();
            s.push(self.placeholder_location(FRAMES_CUT));
            s
        } else {
            locations.to_vec()
        };
        stack.shrink_to_fit();
        // string index 0 ("") in a label's value reads as "a numeric label"
        let usable = labels.iter().filter(|(k, v)| !k.is_empty() && !v.is_empty());
        let kept: Vec<&(&str, &str)> = usable.take(MAX_LABELS).collect();
        self.dropped.labels += (labels.len() - kept.len()) as u64;
        let mut label_ids: Vec<(u64, u64)> = kept.into_iter().map(|(k, v)| (self.string(k), self.string(v))).collect();
        label_ids.sort_unstable();
        let key = (stack, label_ids);
        if let Some(&i) = self.sample_ids.get(&key) {
            for (sum, v) in self.samples[i].iter_mut().zip(values) {
                *sum = sum.saturating_add(*v);
            }
            return;
        }
        if self.samples.len() >= MAX_SAMPLES || !self.charge(sample_cost(key.0.len(), values.len(), key.1.len())) {
            self.dropped.samples += 1;
            return;
        }
        self.sample_ids.insert(key, self.samples.len());
        self.samples.push(values.to_vec());
    }

    /// What did not fit so far.
    pub fn dropped(&self) -> Dropped {
        self.dropped
    }

    /// Distinct samples recorded so far.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// The profile, as protobuf.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.cost.min(MAX_ENCODED));
        let mut msg = Vec::new();
        for &(t, u) in &self.sample_types {
            msg.clear();
            put_int(&mut msg, 1, t as i64);
            put_int(&mut msg, 2, u as i64);
            put_bytes(&mut out, 1, &msg);
        }
        let mut packed = Vec::new();
        let mut order: Vec<(&SampleKey, usize)> = self.sample_ids.iter().map(|(k, &i)| (k, i)).collect();
        order.sort_unstable_by_key(|&(_, i)| i);
        for ((stack, labels), i) in order {
            msg.clear();
            packed.clear();
            stack.iter().for_each(|&id| put_varint(&mut packed, id));
            put_packed(&mut msg, 1, &packed);
            packed.clear();
            self.samples[i].iter().for_each(|&v| put_varint(&mut packed, v as u64));
            put_packed(&mut msg, 2, &packed);
            for &(k, v) in labels {
                packed.clear();
                put_int(&mut packed, 1, k as i64);
                put_int(&mut packed, 2, v as i64);
                put_bytes(&mut msg, 3, &packed);
            }
            put_bytes(&mut out, 2, &msg);
        }
        for (i, l) in self.locations.iter().enumerate() {
            msg.clear();
            packed.clear();
            put_int(&mut msg, 1, i as i64 + 1);
            put_int(&mut msg, 3, l.address as i64);
            put_int(&mut packed, 1, l.function as i64);
            put_int(&mut packed, 2, l.line);
            put_bytes(&mut msg, 4, &packed);
            put_bytes(&mut out, 4, &msg);
        }
        for (i, f) in self.functions.iter().enumerate() {
            msg.clear();
            put_int(&mut msg, 1, i as i64 + 1);
            put_int(&mut msg, 2, f.name as i64);
            put_int(&mut msg, 3, f.system_name as i64);
            put_int(&mut msg, 4, f.filename as i64);
            put_int(&mut msg, 5, f.start_line);
            put_bytes(&mut out, 5, &msg);
        }
        for s in &self.strings {
            // string 0 ("") too: the table is positional
            put_bytes(&mut out, 6, s.as_bytes());
        }
        put_int(&mut out, 9, self.time_nanos);
        put_int(&mut out, 10, self.duration_nanos);
        msg.clear();
        put_int(&mut msg, 1, self.period_type.0 as i64);
        put_int(&mut msg, 2, self.period_type.1 as i64);
        put_bytes(&mut out, 11, &msg);
        put_int(&mut out, 12, self.period);
        packed.clear();
        self.comments.iter().for_each(|&c| put_varint(&mut packed, c));
        put_packed(&mut out, 13, &packed);
        put_int(&mut out, 14, self.default_sample_type as i64);
        out
    }

    /// The profile, as gzipped protobuf: what pprof files and Pyroscope's
    /// push carry (`profile.proto`: "the serialized proto must be gzip-compressed").
    pub fn encode_gzip(&self) -> Vec<u8> {
        let raw = self.encode();
        let mut gz = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), flate2::Compression::default());
        gz.write_all(&raw).expect("writing to a Vec cannot fail");
        gz.finish().expect("writing to a Vec cannot fail")
    }

    /// Adds `n` bytes to the size bound, unless that passes [`MAX_ENCODED`].
    fn charge(&mut self, n: usize) -> bool {
        if self.cost + n > MAX_ENCODED {
            return false;
        }
        self.cost += n;
        true
    }

    /// The index of `s` (cut to [`MAX_STRING`]) in the string table; the
    /// `string table full` placeholder's when it does not fit.
    fn string(&mut self, s: &str) -> u64 {
        let s = if s.len() > MAX_STRING {
            self.dropped.truncated += 1;
            let mut end = MAX_STRING;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            &s[..end]
        } else {
            s
        };
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        if self.strings.len() >= MAX_STRINGS || !self.charge(s.len() + 3) {
            self.dropped.strings += 1;
            return self.placeholder_string(STRINGS_FULL);
        }
        self.push_string(s)
    }

    /// Interns a placeholder: past the bounds (at most 3 such strings, a
    /// few dozen bytes).
    fn placeholder_string(&mut self, s: &'static str) -> u64 {
        match self.string_ids.get(s) {
            Some(&i) => i,
            None => self.push_string(s),
        }
    }

    fn push_string(&mut self, s: &str) -> u64 {
        let i = self.strings.len() as u64;
        self.strings.push(s.into());
        self.string_ids.insert(s.into(), i);
        i
    }

    fn push_function(&mut self, key: FunctionKey) -> u64 {
        self.functions.push(Function { name: key.0, system_name: key.1, filename: key.2, start_line: key.3 });
        let id = self.functions.len() as u64;
        self.function_ids.insert(key, id);
        id
    }

    fn push_location(&mut self, key: LocationKey) -> u64 {
        self.locations.push(Location { function: key.0, line: key.1, address: key.2 });
        let id = self.locations.len() as u64;
        self.location_ids.insert(key, id);
        id
    }

    fn full_location(&mut self) -> u64 {
        self.dropped.locations += 1;
        self.placeholder_location(LOCATIONS_FULL)
    }

    /// The location of a placeholder frame: past the bounds (at most 2 such
    /// locations and functions).
    fn placeholder_location(&mut self, name: &'static str) -> u64 {
        let name = self.placeholder_string(name);
        let key = (name, 0, 0, 0);
        let function = match self.function_ids.get(&key) {
            Some(&id) => id,
            None => self.push_function(key),
        };
        match self.location_ids.get(&(function, 0, 0)) {
            Some(&id) => id,
            None => self.push_location((function, 0, 0)),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint field (int64, uint64: two's complement for negatives); zero,
/// the default, is left out as proto3 does.
fn put_int(out: &mut Vec<u8>, field: u32, v: i64) {
    if v != 0 {
        put_varint(out, u64::from(field) << 3);
        put_varint(out, v as u64);
    }
}

/// A packed repeated field; none, the default, is left out.
fn put_packed(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    if !b.is_empty() {
        put_bytes(out, field, b);
    }
}

/// A length-delimited field (string, bytes, message, packed repeated).
pub(crate) fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    put_varint(out, u64::from(field) << 3 | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Read;

    /// A field as read: its number and either a varint or the bytes of a
    /// length-delimited field (fixed-width fields fail the test: nothing
    /// here writes them).
    #[derive(Debug, PartialEq)]
    pub enum Value<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
    }

    fn varint(b: &[u8], at: &mut usize) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = b[*at];
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
        }
        panic!("varint longer than 10 bytes");
    }

    /// The fields of a message, in order.
    pub fn fields(b: &[u8]) -> Vec<(u32, Value<'_>)> {
        let mut at = 0;
        let mut out = vec![];
        while at < b.len() {
            let tag = varint(b, &mut at);
            let field = (tag >> 3) as u32;
            assert_ne!(field, 0, "field number 0");
            match tag & 7 {
                0 => out.push((field, Value::Varint(varint(b, &mut at)))),
                2 => {
                    let n = varint(b, &mut at) as usize;
                    out.push((field, Value::Bytes(&b[at..at + n])));
                    at += n;
                }
                w => panic!("wire type {w} of field {field}"),
            }
        }
        out
    }

    pub fn bytes_of<'a>(f: &[(u32, Value<'a>)], n: u32) -> Vec<&'a [u8]> {
        f.iter()
            .filter(|(k, _)| *k == n)
            .map(|(_, v)| match v {
                Value::Bytes(b) => *b,
                v => panic!("field {n}: {v:?} is not length-delimited"),
            })
            .collect()
    }

    fn int_of(f: &[(u32, Value)], n: u32) -> i64 {
        f.iter()
            .filter(|(k, _)| *k == n)
            .map(|(_, v)| match v {
                Value::Varint(x) => *x as i64,
                v => panic!("field {n}: {v:?} is not a varint"),
            })
            .next_back()
            .unwrap_or(0)
    }

    fn packed(b: &[u8]) -> Vec<u64> {
        let mut at = 0;
        let mut out = vec![];
        while at < b.len() {
            out.push(varint(b, &mut at));
        }
        out
    }

    fn packed_of(f: &[(u32, Value)], n: u32) -> Vec<u64> {
        bytes_of(f, n).into_iter().flat_map(packed).collect()
    }

    /// A sample as read back: function names leaf first, values, labels.
    type DecodedSample = (Vec<String>, Vec<i64>, Vec<(String, String)>);

    /// A profile as read back, by names rather than ids.
    #[derive(Debug)]
    struct Decoded {
        strings: Vec<String>,
        sample_types: Vec<(String, String)>,
        samples: Vec<DecodedSample>,
        period_type: (String, String),
        period: i64,
        time: (i64, i64),
        comments: Vec<String>,
        default_sample_type: String,
        functions: usize,
        locations: usize,
        /// (function name, file, line, start line, address) by location id - 1
        frames: Vec<(String, String, i64, i64, u64)>,
    }

    fn decode(b: &[u8]) -> Decoded {
        let p = fields(b);
        let strings: Vec<String> = bytes_of(&p, 6).into_iter().map(|s| String::from_utf8(s.to_vec()).unwrap()).collect();
        assert_eq!(strings[0], "", "string 0 must be empty");
        let s = |i: i64| strings[i as usize].clone();
        let pair = |b: &[u8]| {
            let f = fields(b);
            (s(int_of(&f, 1)), s(int_of(&f, 2)))
        };
        let functions: Vec<Vec<(u32, Value)>> = bytes_of(&p, 5).into_iter().map(fields).collect();
        for (i, f) in functions.iter().enumerate() {
            assert_eq!(int_of(f, 1), i as i64 + 1, "function ids are 1..");
        }
        let mut frames = vec![];
        for (i, l) in bytes_of(&p, 4).into_iter().map(fields).enumerate() {
            assert_eq!(int_of(&l, 1), i as i64 + 1, "location ids are 1..");
            let lines = bytes_of(&l, 4);
            assert_eq!(lines.len(), 1, "one Line per location");
            let line = fields(lines[0]);
            let f = &functions[int_of(&line, 1) as usize - 1];
            frames.push((s(int_of(f, 2)), s(int_of(f, 4)), int_of(&line, 2), int_of(f, 5), int_of(&l, 3) as u64));
        }
        let samples = bytes_of(&p, 2)
            .into_iter()
            .map(|b| {
                let f = fields(b);
                let stack = packed_of(&f, 1).iter().map(|&id| frames[id as usize - 1].0.clone()).collect();
                let values = packed_of(&f, 2).iter().map(|&v| v as i64).collect();
                let labels = bytes_of(&f, 3).into_iter().map(pair).collect();
                (stack, values, labels)
            })
            .collect();
        Decoded {
            sample_types: bytes_of(&p, 1).into_iter().map(pair).collect(),
            samples,
            period_type: pair(bytes_of(&p, 11)[0]),
            period: int_of(&p, 12),
            time: (int_of(&p, 9), int_of(&p, 10)),
            comments: packed_of(&p, 13).iter().map(|&i| s(i as i64)).collect(),
            default_sample_type: s(int_of(&p, 14)),
            functions: functions.len(),
            locations: frames.len(),
            frames,
            strings,
        }
    }

    fn frame(function: &str) -> Frame<'_> {
        Frame { function, filename: "app.py", line: 10, start_line: 5, ..Frame::default() }
    }

    #[test]
    fn round_trip() {
        let mut b = Builder::new(&[("samples", "count"), ("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        b.set_time(1_700_000_000_000_000_000, 10_000_000_000);
        b.add_comment("waitmeter test");
        b.set_default_sample_type("wait");
        let leaf = b.location(&Frame {
            function: "take_gil",
            system_name: "take_gil",
            filename: "ceval_gil.c",
            line: 300,
            start_line: 280,
            address: 0x4a_5000,
        });
        let mid = b.location(&frame("worker"));
        let root = b.location(&frame("main"));
        assert_eq!((leaf, mid, root), (1, 2, 3));
        // the same frame again: the same location; another line: another location, same function
        assert_eq!(b.location(&frame("worker")), mid);
        let other_line = b.location(&Frame { line: 11, ..frame("worker") });
        assert_eq!(other_line, 4);
        b.add_sample(&[leaf, mid, root], &[1, 500], &[("thread", "w-1"), ("state", "gil")]);
        // the same stack and labels in another order: merged
        b.add_sample(&[leaf, mid, root], &[2, 700], &[("state", "gil"), ("thread", "w-1")]);
        // another label value, another stack: two more samples
        b.add_sample(&[leaf, mid, root], &[1, 50], &[("thread", "w-2"), ("state", "gil")]);
        b.add_sample(&[other_line, root], &[1, 9], &[]);
        assert_eq!(b.samples(), 3);
        assert_eq!(b.dropped(), Dropped::default());

        let d = decode(&b.encode());
        assert_eq!(d.sample_types, [("samples".into(), "count".into()), ("wait".into(), "nanoseconds".into())]);
        assert_eq!(d.period_type, ("wait".into(), "nanoseconds".into()));
        assert_eq!((d.period, d.time), (1, (1_700_000_000_000_000_000, 10_000_000_000)));
        assert_eq!(d.comments, ["waitmeter test"]);
        assert_eq!(d.default_sample_type, "wait");
        assert_eq!((d.functions, d.locations), (3, 4));
        assert_eq!(d.frames[0], ("take_gil".into(), "ceval_gil.c".into(), 300, 280, 0x4a_5000));
        assert_eq!(d.frames[3], ("worker".into(), "app.py".into(), 11, 5, 0));
        let l = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let st = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(d.samples.len(), 3);
        assert_eq!(d.samples[0].0, st(&["take_gil", "worker", "main"]));
        assert_eq!(d.samples[0].1, [3, 1200]);
        let mut labels0 = d.samples[0].2.clone();
        labels0.sort();
        assert_eq!(labels0, l(&[("state", "gil"), ("thread", "w-1")]));
        assert_eq!(d.samples[1].1, [1, 50]);
        assert_eq!(d.samples[2], (st(&["worker", "main"]), vec![1, 9], vec![]));
        // each string once
        let mut sorted = d.strings.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), d.strings.len());

        // gzip: the same bytes inside
        let gz = b.encode_gzip();
        assert_eq!(&gz[..2], [0x1f, 0x8b]);
        let mut raw = vec![];
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        assert_eq!(raw, b.encode());
    }

    #[test]
    fn values_saturate_and_negative_values_survive() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let a = b.location(&frame("a"));
        b.add_sample(&[a], &[i64::MAX - 1], &[]);
        b.add_sample(&[a], &[5], &[]);
        let c = b.location(&frame("c"));
        b.add_sample(&[c], &[-3], &[]);
        let d = decode(&b.encode());
        assert_eq!(d.samples[0].1, [i64::MAX]);
        assert_eq!(d.samples[1].1, [-3]);
    }

    #[test]
    fn long_strings_are_cut_on_a_char_boundary() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        // 255 ASCII bytes then a 3-byte char across the limit
        let long = format!("{}€tail", "x".repeat(MAX_STRING - 1));
        let id = b.location(&Frame { function: &long, filename: &long, ..Frame::default() });
        b.add_sample(&[id], &[1], &[("thread", &long)]);
        assert_eq!(b.dropped().truncated, 3);
        let d = decode(&b.encode());
        assert_eq!(d.samples[0].0[0], "x".repeat(MAX_STRING - 1));
        assert_eq!(d.samples[0].2[0].1, "x".repeat(MAX_STRING - 1));
        assert!(d.strings.iter().all(|s| s.len() <= MAX_STRING));
    }

    #[test]
    fn malformed_samples_are_dropped_and_counted() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let a = b.location(&frame("a"));
        b.add_sample(&[a], &[1, 2], &[]); // two values, one sample type
        b.add_sample(&[a + 1], &[1], &[]); // an id location() did not give
        b.add_sample(&[0], &[1], &[]);
        assert_eq!(b.dropped().samples, 3);
        assert_eq!(b.samples(), 0);
        assert!(decode(&b.encode()).samples.is_empty());
    }

    #[test]
    fn deep_stacks_keep_their_leaves_under_a_marker() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let names: Vec<String> = (0..MAX_DEPTH + 10).map(|i| format!("f{i}")).collect();
        let stack: Vec<u64> = names.iter().map(|n| b.location(&frame(n))).collect();
        b.add_sample(&stack, &[7], &[]);
        assert_eq!(b.dropped().frames, 11);
        let d = decode(&b.encode());
        let s = &d.samples[0].0;
        assert_eq!(s.len(), MAX_DEPTH);
        assert_eq!(s[0], "f0");
        assert_eq!(s[MAX_DEPTH - 2], format!("f{}", MAX_DEPTH - 2));
        assert_eq!(s[MAX_DEPTH - 1], FRAMES_CUT);
    }

    #[test]
    fn labels_per_sample_and_comments_are_bounded() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let a = b.location(&frame("a"));
        let keys: Vec<String> = (0..MAX_LABELS + 4).map(|i| format!("k{i}")).collect();
        let labels: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        b.add_sample(&[a], &[1], &labels);
        for _ in 0..MAX_COMMENTS + 1 {
            b.add_comment("c");
        }
        assert_eq!(b.dropped().labels, 5);
        let d = decode(&b.encode());
        assert_eq!(d.samples[0].2.len(), MAX_LABELS);
        assert_eq!(d.comments.len(), MAX_COMMENTS);
    }

    #[test]
    fn empty_labels_are_dropped_and_counted() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let a = b.location(&frame("a"));
        b.add_sample(&[a], &[1], &[("thread", ""), ("", "x"), ("state", "gil")]);
        b.add_sample(&[a], &[2], &[("state", "gil")]);
        assert_eq!(b.dropped().labels, 2);
        let d = decode(&b.encode());
        assert_eq!(d.samples.len(), 1, "the same sample once the empty labels are gone");
        assert_eq!(d.samples[0].1, [3]);
        assert_eq!(d.samples[0].2, [("state".to_string(), "gil".to_string())]);
    }

    #[test]
    fn samples_are_bounded() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let a = b.location(&frame("a"));
        let values: Vec<String> = (0..MAX_SAMPLES + 5).map(|i| i.to_string()).collect();
        for v in &values {
            b.add_sample(&[a], &[1], &[("thread", v)]);
        }
        // an existing sample still takes values when the table is full
        b.add_sample(&[a], &[1], &[("thread", "0")]);
        assert_eq!(b.samples(), MAX_SAMPLES);
        assert_eq!(b.dropped().samples, 5);
        let d = decode(&b.encode());
        assert_eq!(d.samples.len(), MAX_SAMPLES);
        assert_eq!(d.samples[0].1, [2]);
    }

    #[test]
    fn locations_and_strings_are_bounded() {
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        // distinct lines of one function: only locations grow
        let ids: Vec<u64> = (0..MAX_LOCATIONS as i64 + 10).map(|line| b.location(&Frame { line, ..frame("f") })).collect();
        assert_eq!(b.dropped().locations, 10, "the placeholder takes the 10 that do not fit");
        assert_eq!(ids[MAX_LOCATIONS], ids[MAX_LOCATIONS + 9], "one placeholder for all");
        b.add_sample(&[ids[MAX_LOCATIONS + 5]], &[3], &[]);
        let d = decode(&b.encode());
        assert_eq!(d.locations, MAX_LOCATIONS + 1);
        assert_eq!(d.samples[0].0, [LOCATIONS_FULL]);
        assert_eq!(d.samples[0].1, [3]);

        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let a = b.location(&frame("a"));
        let values: Vec<String> = (0..MAX_STRINGS).map(|i| format!("v{i}")).collect();
        for v in values.iter().take(MAX_SAMPLES) {
            b.add_sample(&[a], &[1], &[("thread", v)]);
        }
        let ids: Vec<u64> = values.iter().map(|v| b.location(&frame(v))).collect();
        let d = b.dropped();
        assert!(d.strings > 0, "{d:?}");
        let decoded = decode(&b.encode());
        assert!(decoded.strings.len() <= MAX_STRINGS + 3);
        assert_eq!(decoded.frames[*ids.last().unwrap() as usize - 1].0, STRINGS_FULL);
    }

    #[test]
    fn the_encoded_size_is_bounded() {
        // the worst the bounds allow: long distinct names, deep distinct stacks, many labels
        let mut b = Builder::new(&[("wait", "nanoseconds")], ("wait", "nanoseconds"), 1);
        let names: Vec<String> = (0..MAX_LOCATIONS).map(|i| format!("{i:0>width$}", width = MAX_STRING)).collect();
        let ids: Vec<u64> = names
            .iter()
            .map(|n| {
                b.location(&Frame { function: n, filename: n, line: 1 << 40, start_line: 1 << 40, address: u64::MAX, ..Frame::default() })
            })
            .collect();
        let label_values: Vec<String> = (0..MAX_LABELS).map(|i| format!("{i:x>width$}", width = MAX_STRING)).collect();
        let labels: Vec<(&str, &str)> = label_values.iter().map(|v| (v.as_str(), v.as_str())).collect();
        for i in 0..MAX_SAMPLES {
            let stack: Vec<u64> = (0..MAX_DEPTH).map(|j| ids[(i * 7 + j) % ids.len()]).collect();
            b.add_sample(&stack, &[i64::MIN], &labels);
        }
        let d = b.dropped();
        assert!(d.samples > 0 && d.strings > 0, "{d:?}");
        let len = b.encode().len();
        assert!(len <= MAX_ENCODED, "{len} bytes");
        assert!(len > MAX_ENCODED / 2, "{len} bytes: the bound is far from tight");
    }
}
