//! Reading one metric out of an application's exposition: the Prometheus text
//! format 0.0.4 (and its UTF-8 extension of Prometheus 3: quoted metric and
//! label names) and OpenMetrics 1.0 text.
//!
//! A line parser ([`parse_line`]) gives every line its meaning: `# TYPE`,
//! `# HELP`, `# UNIT`, `# EOF`, other comments, blank, or a sample (name,
//! labels, value, optional timestamp, optional exemplar `# {labels} value
//! [timestamp]`). [`scan`] reads one metric with it: a gauge's (or counter's)
//! value, a histogram's or gauge histogram's sum, count and buckets, or a
//! summary's sum, count and quantiles. `_created` samples are never values.
//! A malformed line is skipped and counted ([`Scan::bad_lines`]); it never
//! loses the rest of the exposition.
//!
//! Input is hostile (the application's endpoint is on the network): no
//! panics, one pass, time linear in the input (sorting the buckets aside),
//! and allocation bounded by a small multiple of it (the bucket and quantile
//! lists, and 8 bytes per label of the line being read).
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum ExpositionError {
    #[error("metric {0} not found in the exposition")]
    Missing(String),
    #[error("metric {name} is a {kind} without {part} samples")]
    Incomplete { name: String, kind: &'static str, part: &'static str },
}

/// The metric's current state.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// a gauge, counter (its `_total`), untyped or unknown value
    Value(f64),
    /// cumulative histogram: sum, count, (upper bound, cumulative count) sorted by bound
    Histogram { sum: f64, count: f64, buckets: Vec<(f64, f64)> },
    /// gauge histogram (`_gsum`/`_gcount`): the distribution now, not a cumulative one
    GaugeHistogram { sum: f64, count: f64, buckets: Vec<(f64, f64)> },
    /// summary: sum, count, (quantile, value) sorted by quantile
    Summary { sum: f64, count: f64, quantiles: Vec<(f64, f64)> },
}

/// A metric type of `# TYPE` (both formats' words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    /// 0.0.4 `untyped`
    Untyped,
    /// OpenMetrics `unknown`
    Unknown,
    Info,
    StateSet,
}

impl Kind {
    fn from_word(w: &str) -> Option<Kind> {
        Some(match w {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "gaugehistogram" => Kind::GaugeHistogram,
            "summary" => Kind::Summary,
            "untyped" => Kind::Untyped,
            "unknown" => Kind::Unknown,
            "info" => Kind::Info,
            "stateset" => Kind::StateSet,
            _ => return None,
        })
    }
}

/// One line of an exposition.
#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    /// empty or blanks only
    Blank,
    /// a `#` line that is none of the below (0.0.4 comments)
    Comment,
    Type {
        name: Cow<'a, str>,
        kind: Kind,
    },
    Help {
        name: Cow<'a, str>,
    },
    Unit {
        name: Cow<'a, str>,
    },
    /// OpenMetrics' end marker
    Eof,
    Sample(Sample<'a>),
}

/// A sample line. Its labels are validated when parsed and read on demand
/// ([`Sample::labels`]), so that a line of a metric nobody asked for costs no
/// allocation.
#[derive(Debug, PartialEq)]
pub struct Sample<'a> {
    pub name: Cow<'a, str>,
    /// the text between the braces (validated), "" without braces
    label_text: &'a str,
    pub value: f64,
    /// milliseconds (0.0.4) or seconds (OpenMetrics): kept as written
    pub timestamp: Option<f64>,
    pub exemplar: Option<Exemplar<'a>>,
}

#[derive(Debug, PartialEq)]
pub struct Exemplar<'a> {
    label_text: &'a str,
    pub value: f64,
    pub timestamp: Option<f64>,
}

impl<'a> Sample<'a> {
    /// The labels, in order, unescaped (a quoted metric name in the braces is not one).
    pub fn labels(&self) -> Labels<'a> {
        Labels { cur: Cur::new(self.label_text) }
    }

    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<Cow<'a, str>> {
        self.labels().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

impl<'a> Exemplar<'a> {
    pub fn labels(&self) -> Labels<'a> {
        Labels { cur: Cur::new(self.label_text) }
    }
}

/// The labels of a validated label set.
pub struct Labels<'a> {
    cur: Cur<'a>,
}

impl<'a> Iterator for Labels<'a> {
    type Item = (Cow<'a, str>, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.cur.blanks();
            self.cur.eat(b',');
            self.cur.blanks();
            if self.cur.at_end() {
                return None;
            }
            match item(&mut self.cur).ok()? {
                Item::Label(k, v) => return Some((k, v)),
                Item::Name(_) => continue,
            }
        }
    }
}

/// A cursor over one line. Every position it stops at is an ASCII byte or
/// the end, so every slice it takes is valid UTF-8.
#[derive(Clone, Debug)]
struct Cur<'a> {
    s: &'a str,
    i: usize,
}

type Bad = &'static str;

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Cur { s, i: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.i += 1;
        }
        hit
    }

    /// Skip spaces and tabs; how many.
    fn blanks(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
        self.i - start
    }

    /// Up to the next blank or the end.
    fn token(&mut self) -> &'a str {
        let start = self.i;
        while !matches!(self.peek(), None | Some(b' ' | b'\t')) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    /// `[first][rest]*` of ASCII classes.
    fn ident(&mut self, first: fn(u8) -> bool, rest: fn(u8) -> bool) -> Option<&'a str> {
        let start = self.i;
        if !self.peek().is_some_and(first) {
            return None;
        }
        self.i += 1;
        while self.peek().is_some_and(rest) {
            self.i += 1;
        }
        Some(&self.s[start..self.i])
    }

    /// A double-quoted string at the cursor, unescaped: `\\`, `\"` and `\n`;
    /// any other escaped character is kept with its backslash (as Prometheus does).
    fn quoted(&mut self) -> Result<Cow<'a, str>, Bad> {
        if !self.eat(b'"') {
            return Err("expected a quoted string");
        }
        let start = self.i;
        let bytes = self.s.as_bytes();
        // the common case: no escapes, borrow
        while let Some(&b) = bytes.get(self.i) {
            match b {
                b'"' => {
                    let out = &self.s[start..self.i];
                    self.i += 1;
                    return Ok(Cow::Borrowed(out));
                }
                b'\\' => break,
                _ => self.i += 1,
            }
        }
        let mut out = String::with_capacity(self.i - start + 16);
        out.push_str(&self.s[start..self.i]);
        loop {
            // copy up to the next backslash or quote in one piece
            let run = self.i;
            while bytes.get(self.i).is_some_and(|b| *b != b'\\' && *b != b'"') {
                self.i += 1;
            }
            out.push_str(&self.s[run..self.i]);
            match bytes.get(self.i) {
                None => return Err("unterminated quoted string"),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(_) => {
                    // a backslash
                    self.i += 1;
                    match bytes.get(self.i) {
                        None => return Err("unterminated quoted string"),
                        Some(b'\\') => out.push('\\'),
                        Some(b'"') => out.push('"'),
                        Some(b'n') => out.push('\n'),
                        Some(_) => {
                            out.push('\\');
                            continue; // the escaped character is copied with the next run
                        }
                    }
                    self.i += 1;
                }
            }
        }
    }
}

fn metric_first(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}
fn metric_rest(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}
fn label_first(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}
fn label_rest(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// A metric name: legacy (`[a-zA-Z_:][a-zA-Z0-9_:]*`) or quoted UTF-8.
fn metric_name<'a>(cur: &mut Cur<'a>) -> Result<Cow<'a, str>, Bad> {
    if cur.peek() == Some(b'"') {
        let n = cur.quoted()?;
        return if n.is_empty() { Err("empty metric name") } else { Ok(n) };
    }
    cur.ident(metric_first, metric_rest).map(Cow::Borrowed).ok_or("bad metric name")
}

/// A number as Go's ParseFloat reads it for these formats (decimal, `+Inf`,
/// `-Inf`, `NaN`, any case).
fn number(tok: &str) -> Option<f64> {
    tok.parse::<f64>().ok()
}

enum Item<'a> {
    /// a quoted string without `=`: the metric name (first item only)
    Name(Cow<'a, str>),
    Label(Cow<'a, str>, Cow<'a, str>),
}

/// One item of a label set: `name="value"`, `"name"="value"`, or `"metric name"`.
fn item<'a>(cur: &mut Cur<'a>) -> Result<Item<'a>, Bad> {
    let quoted_key = cur.peek() == Some(b'"');
    let key = if quoted_key { cur.quoted()? } else { Cow::Borrowed(cur.ident(label_first, label_rest).ok_or("bad label name")?) };
    cur.blanks();
    if cur.eat(b'=') {
        cur.blanks();
        let value = cur.quoted().map_err(|e| if e == "expected a quoted string" { "label value not quoted" } else { e })?;
        if key.is_empty() {
            return Err("empty label name");
        }
        return Ok(Item::Label(key, value));
    }
    if quoted_key {
        return Ok(Item::Name(key));
    }
    Err("expected = after a label name")
}

/// A label set at `{`: (the quoted metric name in it, the text inside the braces).
/// Checks the syntax and that no label name repeats.
fn label_set<'a>(cur: &mut Cur<'a>, name_allowed: bool) -> Result<(Option<Cow<'a, str>>, &'a str), Bad> {
    if !cur.eat(b'{') {
        return Err("expected {");
    }
    let start = cur.i;
    let mut name = None;
    // label names seen, hashed: a repeat is found by sorting (8 bytes a label, n log n)
    let mut seen: Vec<u64> = vec![];
    let mut first = true;
    loop {
        cur.blanks();
        if cur.peek() == Some(b'}') {
            break;
        }
        match item(cur)? {
            Item::Name(n) if first && name_allowed => {
                if n.is_empty() {
                    return Err("empty metric name");
                }
                name = Some(n);
            }
            Item::Name(_) => return Err("a quoted metric name out of place"),
            Item::Label(k, _) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                k.hash(&mut h);
                seen.push(h.finish());
            }
        }
        first = false;
        cur.blanks();
        if cur.eat(b',') {
            continue;
        }
        if cur.peek() == Some(b'}') {
            break;
        }
        return Err("expected , or } in the labels");
    }
    let inner = &cur.s[start..cur.i];
    cur.i += 1; // '}'
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err("a label name repeats");
    }
    Ok((name, inner))
}

/// `# {labels} value [timestamp]`, at the `#`.
fn exemplar<'a>(cur: &mut Cur<'a>) -> Result<Exemplar<'a>, Bad> {
    cur.eat(b'#');
    if cur.blanks() == 0 {
        return Err("expected a blank after the exemplar's #");
    }
    let (_, label_text) = label_set(cur, false).map_err(|e| if e == "expected {" { "expected the exemplar's labels" } else { e })?;
    if cur.blanks() == 0 {
        return Err("expected the exemplar's value");
    }
    let value = number(cur.token()).ok_or("bad exemplar value")?;
    cur.blanks();
    let timestamp = if cur.at_end() { None } else { Some(number(cur.token()).ok_or("bad exemplar timestamp")?) };
    cur.blanks();
    if !cur.at_end() {
        return Err("text after the exemplar");
    }
    Ok(Exemplar { label_text, value, timestamp })
}

/// `# TYPE`, `# HELP`, `# UNIT`, `# EOF` or another comment, at the `#`.
fn comment<'a>(cur: &mut Cur<'a>) -> Result<Line<'a>, Bad> {
    cur.eat(b'#');
    cur.blanks();
    let word = cur.ident(|b| b.is_ascii_uppercase(), |b| b.is_ascii_uppercase());
    let line_end = |cur: &mut Cur<'a>| {
        cur.blanks();
        cur.at_end()
    };
    match word {
        Some("EOF") if line_end(cur) => Ok(Line::Eof),
        Some(w @ ("TYPE" | "HELP" | "UNIT")) if cur.peek().is_some_and(|b| b == b' ' || b == b'\t') => {
            cur.blanks();
            let name = metric_name(cur)?;
            let blank = cur.blanks() > 0;
            match w {
                "TYPE" => {
                    if !blank {
                        return Err("expected a type after the name");
                    }
                    let kind = Kind::from_word(cur.token()).ok_or("unknown metric type")?;
                    if !line_end(cur) {
                        return Err("text after the type");
                    }
                    Ok(Line::Type { name, kind })
                }
                "HELP" if blank || cur.at_end() => Ok(Line::Help { name }),
                "UNIT" if blank || cur.at_end() => Ok(Line::Unit { name }),
                _ => Err("expected a blank after the name"),
            }
        }
        Some("TYPE" | "HELP" | "UNIT") => Err("expected a metric name"),
        _ => Ok(Line::Comment),
    }
}

/// The meaning of one line (without its `\n`; a trailing `\r` is a blank).
pub fn parse_line(line: &str) -> Result<Line<'_>, Bad> {
    let mut cur = Cur::new(line.trim_end_matches([' ', '\t', '\r']));
    cur.blanks();
    match cur.peek() {
        None => return Ok(Line::Blank),
        Some(b'#') => return comment(&mut cur),
        _ => {}
    }
    let (name, label_text) = if cur.peek() == Some(b'{') {
        match label_set(&mut cur, true)? {
            (Some(n), text) => (n, text),
            (None, _) => return Err("no metric name"),
        }
    } else {
        let n = Cow::Borrowed(cur.ident(metric_first, metric_rest).ok_or("bad metric name")?);
        let after_name = cur.i;
        cur.blanks();
        if cur.peek() == Some(b'{') {
            match label_set(&mut cur, true)? {
                (Some(_), _) => return Err("two metric names"),
                (None, text) => (n, text),
            }
        } else {
            cur.i = after_name;
            (n, "")
        }
    };
    if cur.blanks() == 0 {
        return Err(if cur.at_end() { "no value" } else { "expected a blank before the value" });
    }
    let value = number(cur.token()).ok_or("bad value")?;
    cur.blanks();
    let mut timestamp = None;
    if !cur.at_end() && cur.peek() != Some(b'#') {
        timestamp = Some(number(cur.token()).ok_or("bad timestamp")?);
        cur.blanks();
    }
    let exemplar = match cur.peek() {
        None => None,
        Some(b'#') => Some(exemplar(&mut cur)?),
        Some(_) => return Err("text after the sample"),
    };
    Ok(Line::Sample(Sample { name, label_text, value, timestamp, exemplar }))
}

/// A line that was skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct BadLine {
    /// 1-based
    pub line: usize,
    pub why: &'static str,
    /// its first 120 characters
    pub text: String,
}

/// What reading one metric found.
#[derive(Debug, PartialEq)]
pub struct Scan {
    pub reading: Result<Reading, ExpositionError>,
    /// malformed lines skipped (anywhere, not only the metric's)
    pub bad_lines: u64,
    pub first_bad: Option<BadLine>,
}

/// The metric's samples, as they are found.
#[derive(Default)]
struct Found {
    any: bool,
    /// `name` itself: every sample, and those without a `quantile` label
    exact: Option<f64>,
    exact_plain: Option<f64>,
    total: Option<f64>,
    info: Option<f64>,
    sum: Option<f64>,
    count: Option<f64>,
    gsum: Option<f64>,
    gcount: Option<f64>,
    buckets: Vec<(f64, f64)>,
    quantiles: Vec<(f64, f64)>,
}

fn add(to: &mut Option<f64>, v: f64) {
    *to = Some(to.unwrap_or(0.0) + v);
}

impl Found {
    fn sample(&mut self, name: &str, want: &BTreeMap<String, String>, s: &Sample<'_>) {
        let Some(suffix) = s.name.strip_prefix(name) else { return };
        if !matches!(suffix, "" | "_total" | "_info" | "_sum" | "_count" | "_gsum" | "_gcount" | "_bucket") {
            return; // _created among others: never a value
        }
        if !want.iter().all(|(k, v)| s.label(k).is_some_and(|l| l == v.as_str())) {
            return;
        }
        let v = s.value;
        self.any = true;
        match suffix {
            "" => {
                add(&mut self.exact, v);
                match s.label("quantile") {
                    Some(q) => {
                        if let Some(q) = number(&q).filter(|q| !q.is_nan()) {
                            self.quantiles.push((q, v));
                        }
                    }
                    None => add(&mut self.exact_plain, v),
                }
            }
            "_total" => add(&mut self.total, v),
            "_info" => add(&mut self.info, v),
            "_sum" => add(&mut self.sum, v),
            "_count" => add(&mut self.count, v),
            "_gsum" => add(&mut self.gsum, v),
            "_gcount" => add(&mut self.gcount, v),
            _ => {
                if let Some(le) = s.label("le").and_then(|l| number(&l)).filter(|l| !l.is_nan()) {
                    self.buckets.push((le, v));
                }
            }
        }
    }

    /// Sorted by bound, the counts of equal bounds (several series) summed.
    fn merged(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut out: Vec<(f64, f64)> = Vec::with_capacity(v.len());
        for (k, c) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 += c,
                _ => out.push((k, c)),
            }
        }
        out
    }

    fn reading(self, name: &str, kind: Option<Kind>) -> Result<Reading, ExpositionError> {
        if !self.any {
            return Err(ExpositionError::Missing(name.to_string()));
        }
        let incomplete = |kind: &'static str, part: &'static str| ExpositionError::Incomplete { name: name.to_string(), kind, part };
        let missing = || ExpositionError::Missing(name.to_string());
        let hist = |sum: Option<f64>, count: Option<f64>, buckets: Vec<(f64, f64)>, gauge: bool| -> Result<Reading, ExpositionError> {
            let (k, s, c) = if gauge { ("gauge histogram", "_gsum", "_gcount") } else { ("histogram", "_sum", "_count") };
            let sum = sum.ok_or_else(|| incomplete(k, s))?;
            let count = count.ok_or_else(|| incomplete(k, c))?;
            let buckets = Found::merged(buckets);
            Ok(if gauge { Reading::GaugeHistogram { sum, count, buckets } } else { Reading::Histogram { sum, count, buckets } })
        };
        match kind {
            Some(Kind::Counter) => self.total.or(self.exact).map(Reading::Value).ok_or_else(missing),
            Some(Kind::Gauge | Kind::Untyped | Kind::Unknown | Kind::StateSet) => self.exact.map(Reading::Value).ok_or_else(missing),
            Some(Kind::Info) => self.info.or(self.exact).map(Reading::Value).ok_or_else(missing),
            // the 0.0.4 text of a gauge histogram says `histogram` and has _gsum/_gcount
            Some(Kind::Histogram) if self.sum.is_none() && self.gsum.is_some() => hist(self.gsum, self.gcount, self.buckets, true),
            Some(Kind::Histogram) => hist(self.sum, self.count, self.buckets, false),
            Some(Kind::GaugeHistogram) => hist(self.gsum, self.gcount, self.buckets, true),
            Some(Kind::Summary) => Ok(Reading::Summary {
                sum: self.sum.ok_or_else(|| incomplete("summary", "_sum"))?,
                count: self.count.ok_or_else(|| incomplete("summary", "_count"))?,
                quantiles: Found::merged(self.quantiles),
            }),
            // no # TYPE: what the samples say
            None => {
                if let Some(v) = self.exact_plain.or(self.total) {
                    Ok(Reading::Value(v))
                } else if !self.buckets.is_empty() && self.sum.is_none() && self.gsum.is_some() {
                    hist(self.gsum, self.gcount, self.buckets, true)
                } else if !self.buckets.is_empty() {
                    hist(self.sum, self.count, self.buckets, false)
                } else if self.sum.is_some() || self.count.is_some() || !self.quantiles.is_empty() {
                    Ok(Reading::Summary {
                        sum: self.sum.ok_or_else(|| incomplete("summary", "_sum"))?,
                        count: self.count.ok_or_else(|| incomplete("summary", "_count"))?,
                        quantiles: Found::merged(self.quantiles),
                    })
                } else {
                    Err(missing())
                }
            }
        }
    }
}

/// Read metric `name` (the series having every label of `want`; several are
/// summed) from `lines` (each `Err` is a line that was not UTF-8).
fn scan_lines<'a>(lines: impl Iterator<Item = Result<&'a str, ()>>, name: &str, want: &BTreeMap<String, String>) -> Scan {
    let mut found = Found::default();
    let mut kind = None;
    let mut bad_lines = 0;
    let mut first_bad = None;
    let mut eof = false;
    for (i, line) in lines.enumerate() {
        let parsed = match line {
            Err(()) => Err("not UTF-8"),
            Ok(l) if eof => match parse_line(l) {
                Ok(Line::Blank) => Ok(Line::Blank),
                _ => Err("after # EOF"),
            },
            Ok(l) => parse_line(l),
        };
        match parsed {
            Err(why) => {
                bad_lines += 1;
                if first_bad.is_none() {
                    let text = line.map(|l| l.chars().take(120).collect()).unwrap_or_default();
                    first_bad = Some(BadLine { line: i + 1, why, text });
                }
            }
            Ok(Line::Type { name: n, kind: k }) if n == name => {
                if kind.is_some() {
                    bad_lines += 1;
                    first_bad.get_or_insert_with(|| BadLine {
                        line: i + 1,
                        why: "a second # TYPE",
                        text: line.unwrap_or("").chars().take(120).collect(),
                    });
                } else {
                    kind = Some(k);
                }
            }
            Ok(Line::Eof) => eof = true,
            Ok(Line::Sample(s)) => found.sample(name, want, &s),
            Ok(_) => {}
        }
    }
    Scan { reading: found.reading(name, kind), bad_lines, first_bad }
}

/// Read metric `name` from an exposition; see [`Scan`].
pub fn scan(text: &str, name: &str, want: &BTreeMap<String, String>) -> Scan {
    scan_lines(text.split('\n').map(Ok), name, want)
}

/// [`scan`] of a body that may not be UTF-8: a line that is not is skipped
/// and counted like any other malformed line.
pub fn scan_bytes(body: &[u8], name: &str, want: &BTreeMap<String, String>) -> Scan {
    match std::str::from_utf8(body) {
        Ok(text) => scan(text, name, want),
        Err(_) => scan_lines(body.split(|b| *b == b'\n').map(|l| std::str::from_utf8(l).map_err(|_| ())), name, want),
    }
}

/// Read metric `name` (series matching every label in `want`) from `text`,
/// skipping malformed lines ([`scan`] counts them).
pub fn read(text: &str, name: &str, want: &BTreeMap<String, String>) -> Result<Reading, ExpositionError> {
    scan(text, name, want).reading
}

/// `k=v,k2=v2` from --age-labels.
pub fn parse_label_filter(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| format!("`{p}` is not key=value"))?;
            Ok((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    fn want(k: &str, v: &str) -> BTreeMap<String, String> {
        [(k.to_string(), v.to_string())].into()
    }

    fn sample(line: &str) -> Sample<'_> {
        match parse_line(line) {
            Ok(Line::Sample(s)) => s,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    fn labels<'a>(s: &Sample<'a>) -> Vec<(String, String)> {
        s.labels().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const PROM: &str = "# HELP fix_lag_seconds Lag.\n# TYPE fix_lag_seconds gauge\nfix_lag_seconds{session=\"a\"} 1.5\nfix_lag_seconds{session=\"b\"} 7\n\
        # TYPE lat_seconds histogram\nlat_seconds_bucket{le=\"0.1\"} 3\nlat_seconds_bucket{le=\"1\"} 7\nlat_seconds_bucket{le=\"+Inf\"} 8\nlat_seconds_sum 4.5\nlat_seconds_count 8\n\
        # TYPE rpc summary\nrpc{quantile=\"0.5\"} 0.2\nrpc{quantile=\"0.99\"} 1.1\nrpc_sum 30\nrpc_count 100\n";

    #[test]
    fn gauges_with_and_without_label_filters() {
        assert_eq!(read(PROM, "fix_lag_seconds", &want("session", "b")), Ok(Reading::Value(7.0)));
        // without a filter, matching series are summed: ambiguous, so give --age-labels
        assert_eq!(read(PROM, "fix_lag_seconds", &none()), Ok(Reading::Value(8.5)));
    }

    #[test]
    fn histograms_and_summaries() {
        assert_eq!(
            read(PROM, "lat_seconds", &none()),
            Ok(Reading::Histogram { sum: 4.5, count: 8.0, buckets: vec![(0.1, 3.0), (1.0, 7.0), (f64::INFINITY, 8.0)] })
        );
        assert_eq!(read(PROM, "rpc", &none()), Ok(Reading::Summary { sum: 30.0, count: 100.0, quantiles: vec![(0.5, 0.2), (0.99, 1.1)] }));
    }

    #[test]
    fn sample_lines_part_by_part() {
        let s = sample("m 1");
        assert_eq!((s.name.as_ref(), s.value, s.timestamp, labels(&s)), ("m", 1.0, None, vec![]));
        let s = sample("ns:m_x{a=\"1\",b=\"\"} -2.5e-3 1700000000000");
        assert_eq!((s.name.as_ref(), s.value, s.timestamp), ("ns:m_x", -2.5e-3, Some(1.7e12)));
        assert_eq!(labels(&s), pairs(&[("a", "1"), ("b", "")]));
        // 0.0.4: blanks and tabs between tokens, a trailing comma, leading blanks, CRLF
        let s = sample("  m \t{ a = \"1\" , b=\"2\", }\t3\t\r");
        assert_eq!((s.value, labels(&s)), (3.0, pairs(&[("a", "1"), ("b", "2")])));
        assert_eq!(sample("m{} 4").value, 4.0);
        for (text, v) in
            [("+Inf", f64::INFINITY), ("-Inf", f64::NEG_INFINITY), ("inf", f64::INFINITY), ("1e+06", 1e6), (".5", 0.5), ("0", 0.0)]
        {
            assert_eq!(sample(&format!("m {text}")).value, v, "{text}");
        }
        assert!(sample("m NaN").value.is_nan());
    }

    #[test]
    fn label_value_escapes() {
        let s = sample(r#"m{path="C:\\dir\"x\"",nl="a\nb",other="\t\é",utf="ünï ☃"} 1"#);
        assert_eq!(labels(&s), pairs(&[("path", "C:\\dir\"x\""), ("nl", "a\nb"), ("other", "\\t\\é"), ("utf", "ünï ☃")]));
        // a brace, a hash, a comma and a quote inside values are not syntax
        let s = sample(r##"m{a="}", b="# {x=\"y\"} 9", c=","} 2"##);
        assert_eq!((s.value, labels(&s)), (2.0, pairs(&[("a", "}"), ("b", "# {x=\"y\"} 9"), ("c", ",")])));
        assert_eq!(s.exemplar, None);
    }

    #[test]
    fn quoted_utf8_names() {
        // Prometheus 3 / client_golang with escaping=allow-utf-8
        let s = sample(r#"{"my.metric", label="x"} 1"#);
        assert_eq!((s.name.as_ref(), labels(&s)), ("my.metric", pairs(&[("label", "x")])));
        let s = sample(r#"{"app.lag.seconds"} 4.25"#);
        assert_eq!((s.name.as_ref(), s.value, labels(&s)), ("app.lag.seconds", 4.25, vec![]));
        let s = sample(r#"{"my.metric","my.label"="a",b="\"c"} 2 17"#);
        assert_eq!((s.value, s.timestamp, labels(&s)), (2.0, Some(17.0), pairs(&[("my.label", "a"), ("b", "\"c")])));
        let s = sample(r#"legacy{"dotted.label"="v"} 3"#);
        assert_eq!((s.name.as_ref(), labels(&s)), ("legacy", pairs(&[("dotted.label", "v")])));
        let s = sample(r#"{"quote\"and\\slash"} 5"#);
        assert_eq!(s.name, "quote\"and\\slash");
        assert_eq!(parse_line(r#"# TYPE "my.metric" gauge"#), Ok(Line::Type { name: "my.metric".into(), kind: Kind::Gauge }));
        assert_eq!(parse_line(r#"# HELP "my.metric" Doc "string" \n."#), Ok(Line::Help { name: "my.metric".into() }));
        let text = "# TYPE \"my.metric\" gauge\n{\"my.metric\", label=\"x\"} 1\n{\"my.metric\", label=\"y\"} 2\nmy_metric 100\n";
        assert_eq!(read(text, "my.metric", &want("label", "y")), Ok(Reading::Value(2.0)));
        assert_eq!(read(text, "my.metric", &none()), Ok(Reading::Value(3.0)));
        assert_eq!(read(text, "my_metric", &none()), Ok(Reading::Value(100.0)));
    }

    #[test]
    fn exemplars_are_not_values() {
        // the defect: the last } of the line was taken as the end of the labels
        let s = sample(r#"h_bucket{le="1"} 3 # {trace_id="a"} 0.5"#);
        assert_eq!((s.value, s.timestamp), (3.0, None));
        let e = s.exemplar.as_ref().unwrap();
        assert_eq!((e.value, e.timestamp), (0.5, None));
        assert_eq!(e.labels().map(|(k, v)| (k.into_owned(), v.into_owned())).collect::<Vec<_>>(), pairs(&[("trace_id", "a")]));
        // with the sample's and the exemplar's timestamps (OpenMetrics: seconds)
        let s = sample(r#"c_total 42.0 1700000000.5 # {trace_id="second",span="}"} 2.0 1.7954338803104396e+09"#);
        assert_eq!((s.value, s.timestamp), (42.0, Some(1700000000.5)));
        assert_eq!(s.exemplar.as_ref().map(|e| (e.value, e.timestamp)), Some((2.0, Some(1.7954338803104396e9))));
        let s = sample(r#"g{a="1"} 7 # {} 0.25"#);
        assert_eq!((s.value, s.exemplar.as_ref().map(|e| e.value)), (7.0, Some(0.25)));
        let om = "# TYPE h histogram\nh_bucket{le=\"0.5\"} 0\nh_bucket{le=\"1.0\"} 3 # {trace_id=\"a\"} 0.75 1700000000.1\nh_bucket{le=\"+Inf\"} 3\n\
                  h_sum 2.25\nh_count 3\nh_created 1700000000.0\n\
                  # TYPE c counter\nc_total 42.0 # {trace_id=\"b\"} 2.0 1700000000.2\nc_created 1700000000.0\n\
                  # TYPE g gauge\ng 7 # {trace_id=\"c\"} 99\n# EOF\n";
        assert_eq!(
            read(om, "h", &none()),
            Ok(Reading::Histogram { sum: 2.25, count: 3.0, buckets: vec![(0.5, 0.0), (1.0, 3.0), (f64::INFINITY, 3.0)] })
        );
        assert_eq!(read(om, "c", &none()), Ok(Reading::Value(42.0)));
        assert_eq!(read(om, "c_total", &none()), Ok(Reading::Value(42.0)));
        assert_eq!(read(om, "g", &none()), Ok(Reading::Value(7.0)));
        assert_eq!(scan(om, "g", &none()).bad_lines, 0);
    }

    #[test]
    fn metadata_lines() {
        assert_eq!(parse_line("# TYPE x counter"), Ok(Line::Type { name: "x".into(), kind: Kind::Counter }));
        assert_eq!(parse_line("#  TYPE\tx  gaugehistogram "), Ok(Line::Type { name: "x".into(), kind: Kind::GaugeHistogram }));
        assert_eq!(parse_line("# TYPE x unknown"), Ok(Line::Type { name: "x".into(), kind: Kind::Unknown }));
        assert_eq!(parse_line("# HELP x Some help with \\n and \\\\."), Ok(Line::Help { name: "x".into() }));
        assert_eq!(parse_line("# HELP x "), Ok(Line::Help { name: "x".into() }));
        assert_eq!(parse_line("# UNIT x_seconds seconds"), Ok(Line::Unit { name: "x_seconds".into() }));
        assert_eq!(parse_line("# EOF"), Ok(Line::Eof));
        assert_eq!(parse_line("# just a comment"), Ok(Line::Comment));
        assert_eq!(parse_line("#"), Ok(Line::Comment));
        assert_eq!(parse_line("# EOF and more"), Ok(Line::Comment));
        assert_eq!(parse_line("   "), Ok(Line::Blank));
        assert_eq!(parse_line(""), Ok(Line::Blank));
        for bad in ["# TYPE x", "# TYPE x cntr", "# TYPE x gauge extra", "# TYPE", "# TYPE 1x gauge", "# HELP", "# HELP \"unterminated"] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_lines() {
        for bad in [
            "m",
            "m{a=\"1\" 3",
            "m abc",
            "m 1 2 3",
            "m1",
            "m{a=\"1\"}3",
            "m{a=1} 3",
            "m{a=\"1\",,b=\"2\"} 3",
            "m{1a=\"1\"} 3",
            "m{a=\"1\",a=\"2\"} 3",
            "m{\"x\"} 3",
            "{a=\"1\"} 3",
            "{} 3",
            "{\"\"} 3",
            "{\"m\",\"n\"} 3",
            "m{\"x\"=} 3",
            "m{\"\"=\"v\"} 3",
            "m{a=\"1} 3",
            "m{a=\"1\\",
            "m 1 # {a=\"1\"}",
            "m 1 # {a=\"1\"} x",
            "m 1 # a 1",
            "m 1 #{a=\"1\"} 1",
            "m 1 # {a=\"1\"} 1 2 3",
            "m 1 # {\"name\"} 1",
            "<html>oops</html>",
            "1m 2",
            "m 0x10",
            "m 1_000",
            "é 1",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?} parsed as {:?}", parse_line(bad));
        }
    }

    #[test]
    fn a_bad_line_is_skipped_and_counted() {
        let text = "# TYPE lag gauge\nlag{a=\"1\" 3\nlag{a=\"2\"} 5\n\u{7f}garbage\nother{x=\"y\"} not-a-number\n";
        let s = scan(text, "lag", &none());
        assert_eq!(s.reading, Ok(Reading::Value(5.0)));
        assert_eq!(s.bad_lines, 3);
        assert_eq!(s.first_bad, Some(BadLine { line: 2, why: "expected , or } in the labels", text: "lag{a=\"1\" 3".into() }));
        // a broken bucket costs that bucket only
        let h = "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"2\" 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 4\nh_count 3\n";
        let s = scan(h, "h", &none());
        assert_eq!(s.reading, Ok(Reading::Histogram { sum: 4.0, count: 3.0, buckets: vec![(1.0, 1.0), (f64::INFINITY, 3.0)] }));
        assert_eq!(s.bad_lines, 1);
    }

    #[test]
    fn bytes_that_are_not_utf8_cost_their_line() {
        let body = b"lag{a=\"\xff\"} 1\nlag{a=\"2\"} 5\n";
        let s = scan_bytes(body, "lag", &none());
        assert_eq!((s.reading, s.bad_lines), (Ok(Reading::Value(5.0)), 1));
        assert_eq!(s.first_bad.map(|b| (b.line, b.why)), Some((1, "not UTF-8")));
        assert_eq!(scan_bytes(b"lag 2\n", "lag", &none()).reading, Ok(Reading::Value(2.0)));
    }

    #[test]
    fn counters_created_and_type_suffixes() {
        // OpenMetrics: # TYPE of the family, samples with _total and _created
        let om = "# TYPE msgs counter\n# HELP msgs Messages.\nmsgs_total 42.0\nmsgs_created 1.7e9\n# EOF\n";
        assert_eq!(read(om, "msgs", &none()), Ok(Reading::Value(42.0)));
        assert_eq!(read(om, "msgs_total", &none()), Ok(Reading::Value(42.0)));
        // 0.0.4 as prometheus_client writes it: _created as a gauge family of its own
        let text = "# TYPE msgs_total counter\nmsgs_total 42.0\n# TYPE msgs_created gauge\nmsgs_created 1.7e9\n";
        assert_eq!(read(text, "msgs", &none()), Ok(Reading::Value(42.0)));
        assert_eq!(read(text, "msgs_total", &none()), Ok(Reading::Value(42.0)));
        // a gauge is only its own name: other families sharing the prefix are not it
        let g = "# TYPE lag gauge\nlag 3\nlag_created 1.7e9\nlag_total 100\nlag_sum 9\nlagging 5\n";
        assert_eq!(read(g, "lag", &none()), Ok(Reading::Value(3.0)));
        // a histogram's _created is not a part of it
        let h = "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nh_sum 3\nh_created 1.7e9\n";
        assert_eq!(read(h, "h", &none()), Ok(Reading::Histogram { sum: 3.0, count: 2.0, buckets: vec![(f64::INFINITY, 2.0)] }));
        // untyped, the 0.0.4 way
        assert_eq!(read("# TYPE u untyped\nu 5\n", "u", &none()), Ok(Reading::Value(5.0)));
    }

    #[test]
    fn gauge_histograms() {
        let om = "# TYPE q gaugehistogram\nq_bucket{le=\"1.0\"} 2\nq_bucket{le=\"+Inf\"} 5\nq_gcount 5\nq_gsum 12.5\n# EOF\n";
        let want = Reading::GaugeHistogram { sum: 12.5, count: 5.0, buckets: vec![(1.0, 2.0), (f64::INFINITY, 5.0)] };
        assert_eq!(read(om, "q", &none()), Ok(want.clone()));
        // prometheus_client's 0.0.4 text says `histogram` for it
        assert_eq!(read(&om.replace("gaugehistogram", "histogram").replace("# EOF\n", ""), "q", &none()), Ok(want.clone()));
        // and without any # TYPE
        assert_eq!(read("q_bucket{le=\"+Inf\"} 5\nq_bucket{le=\"1\"} 2\nq_gsum 12.5\nq_gcount 5\n", "q", &none()), Ok(want));
    }

    #[test]
    fn without_type_lines_the_samples_decide() {
        let h = "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n";
        assert_eq!(read(h, "h", &none()), Ok(Reading::Histogram { sum: 3.0, count: 2.0, buckets: vec![(1.0, 1.0), (f64::INFINITY, 2.0)] }));
        let s = "s{quantile=\"0.9\"} 1.5\ns_sum 3\ns_count 2\n";
        assert_eq!(read(s, "s", &none()), Ok(Reading::Summary { sum: 3.0, count: 2.0, quantiles: vec![(0.9, 1.5)] }));
        assert_eq!(read("c_total 4\n", "c", &none()), Ok(Reading::Value(4.0)));
    }

    #[test]
    fn buckets_of_several_series_merge_in_order() {
        let h = "# TYPE h histogram\nh_bucket{a=\"1\",le=\"+Inf\"} 2\nh_bucket{a=\"1\",le=\"1\"} 1\nh_bucket{a=\"2\",le=\"1\"} 3\nh_bucket{a=\"2\",le=\"+Inf\"} 4\n\
                 h_sum{a=\"1\"} 1\nh_sum{a=\"2\"} 2\nh_count{a=\"1\"} 2\nh_count{a=\"2\"} 4\n";
        assert_eq!(read(h, "h", &none()), Ok(Reading::Histogram { sum: 3.0, count: 6.0, buckets: vec![(1.0, 4.0), (f64::INFINITY, 6.0)] }));
        assert_eq!(
            read(h, "h", &want("a", "2")),
            Ok(Reading::Histogram { sum: 2.0, count: 4.0, buckets: vec![(1.0, 3.0), (f64::INFINITY, 4.0)] })
        );
    }

    #[test]
    fn openmetrics_and_escapes() {
        let om = "# TYPE lag gauge\n# UNIT lag seconds\nlag{path=\"a\\\"b\",x=\"1\"} 2.5 1700000000.1\n# EOF\n";
        assert_eq!(read(om, "lag", &want("path", "a\"b")), Ok(Reading::Value(2.5)));
        // nothing after # EOF belongs to the exposition
        let s = scan("lag 1\n# EOF\nlag 5\n\n", "lag", &none());
        assert_eq!((s.reading, s.bad_lines), (Ok(Reading::Value(1.0)), 1));
    }

    #[test]
    fn missing_and_incomplete_metrics_are_errors() {
        assert_eq!(read(PROM, "nope", &none()), Err(ExpositionError::Missing("nope".into())));
        assert_eq!(read(PROM, "fix_lag_seconds", &want("session", "c")), Err(ExpositionError::Missing("fix_lag_seconds".into())));
        assert_eq!(read("", "x", &none()), Err(ExpositionError::Missing("x".into())));
        assert_eq!(read("<html>oops</html>\n", "x", &none()), Err(ExpositionError::Missing("x".into())));
        assert_eq!(
            read("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n", "h", &none()),
            Err(ExpositionError::Incomplete { name: "h".into(), kind: "histogram", part: "_count" })
        );
        assert_eq!(read("# TYPE g gauge\ng_sum 1\n", "g", &none()), Err(ExpositionError::Missing("g".into())));
        let s = scan("# TYPE g gauge\n# TYPE g counter\ng 1\n", "g", &none());
        assert_eq!((s.reading, s.bad_lines), (Ok(Reading::Value(1.0)), 1));
    }

    #[test]
    fn hostile_inputs_stay_linear_and_bounded() {
        // a long line of labels, deep runs of escapes and braces, a bucket per line
        let many = format!("m{{{}}} 1\n", (0..100_000).map(|i| format!("l{i}=\"v\"")).collect::<Vec<_>>().join(","));
        assert_eq!(read(&many, "m", &none()), Ok(Reading::Value(1.0)));
        let dup = format!("m{{{}a=\"1\"}} 1\n", (0..50_000).map(|i| format!("l{i}=\"v\",")).collect::<String>()).replace("l7=", "a=");
        assert_eq!(scan(&dup, "m", &none()).bad_lines, 1);
        let escapes = format!("m{{a=\"{}\"}} 1\n", "\\\\\\\"".repeat(200_000));
        assert_eq!(read(&escapes, "m", &none()), Ok(Reading::Value(1.0)));
        let braces = format!("m{} 1\n", "{".repeat(200_000));
        assert_eq!(scan(&braces, "m", &none()).bad_lines, 1);
        let buckets: String = (0..200_000).map(|i| format!("h_bucket{{le=\"{i}\"}} {i}\n")).collect();
        let t = std::time::Instant::now();
        let r = read(&format!("# TYPE h histogram\n{buckets}h_sum 1\nh_count 1\n"), "h", &none());
        assert!(matches!(r, Ok(Reading::Histogram { ref buckets, .. }) if buckets.len() == 200_000));
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
        for junk in ["{", "}", "\"", "# {", "m{\"", "m 1 # {", "#\u{0}", "{\"a\\", "m{a=\"\\"] {
            let _ = scan(junk, "m", &none());
        }
    }

    /// Random lines of the formats' own characters: no panic, and a line
    /// either parses or is counted (the fuzz target does this at length).
    #[test]
    fn random_lines_never_panic() {
        const ALPHABET: &[&str] = &[
            "m", "_total", "_bucket", "le", "{", "}", "\"", "\\", "=", ",", " ", "\t", "#", "# ", "TYPE ", "EOF", "1", "-", ".", "e",
            "+Inf", "NaN", "é", "\n", "\r", "quantile",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let want = want("le", "1");
        for _ in 0..20_000 {
            let n = next() % 24;
            let text: String = (0..n).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]).collect();
            let lines = text.split('\n').filter(|l| parse_line(l).is_err()).count() as u64;
            let s = scan(&text, "m", &want);
            assert!(s.bad_lines >= lines, "{text:?}");
            let _ = scan(&text, "m", &none());
        }
    }

    #[test]
    fn label_filters() {
        assert_eq!(parse_label_filter("a=1, b=\"x\"").unwrap().len(), 2);
        assert!(parse_label_filter("a").is_err());
        assert!(parse_label_filter("").unwrap().is_empty());
    }
}
