//! Wait stacks, named: the code on both sides of a wait (docs/probes/stacks.md).
//! A stack is a list of frames, leaf first; a wait's time is charged to the
//! stack of the thread that waited (role victim) and to the stack of who it
//! waited behind (holder, waker, preemptor). Here: the frames, the bounded
//! store of charged time, and the one-line "site" a verdict names.
use std::collections::HashMap;
use std::sync::Arc;

use super::state::State;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Python,
    Native,
    /// code a JIT generated (a JVM's compiled method or stub, a JavaScript function), named by
    /// the runtime's perf map
    Jit,
    /// an address or code object that could not be named
    Unknown,
}

/// One frame. Python: qualified name, source file, line; native: symbol,
/// the object file, no line.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    pub kind: Kind,
    pub function: String,
    pub file: String,
    pub line: u32,
    /// native code of a library that lives in the program's own file: a Go executable's standard
    /// library and dependencies (its own code is its main module's, `stacks/native.rs`)
    pub library: bool,
}

impl Frame {
    pub fn python(function: String, file: String, line: u32) -> Frame {
        Frame { kind: Kind::Python, function, file, line, library: false }
    }

    pub fn native(function: String, file: String) -> Frame {
        Frame { kind: Kind::Native, function, file, line: 0, library: false }
    }

    /// A native frame of a library linked into the program's own file (`library`).
    pub fn native_library(function: String, file: String) -> Frame {
        Frame { library: true, ..Frame::native(function, file) }
    }

    pub fn jit(function: String) -> Frame {
        Frame { kind: Kind::Jit, function, file: String::new(), line: 0, library: false }
    }

    pub fn unknown(what: String) -> Frame {
        Frame { kind: Kind::Unknown, function: what, file: String::new(), line: 0, library: false }
    }

    /// Code of the standard library, an installed package or the runtime
    /// (not the application's own).
    pub fn is_library(&self) -> bool {
        let f = &self.file;
        match self.kind {
            Kind::Python => {
                f.contains("/lib/python3") && !f.contains("/site-packages/") && !f.contains("/dist-packages/")
                    || f.contains("/site-packages/")
                    || f.contains("/dist-packages/")
                    || f.starts_with("<frozen")
            }
            Kind::Native => self.library || is_system_object(f),
            Kind::Jit => is_runtime_jit(&self.function),
            Kind::Unknown => true,
        }
    }

    /// The name a person knows a Python frame by: `json.dumps` for `dumps`
    /// in .../lib/python3.X/json/__init__.py, `module.Class.method` for
    /// library code, the bare qualified name for the application's own.
    pub fn display_name(&self) -> String {
        match (self.kind, module_of(&self.file)) {
            (Kind::Python, Some(m)) if self.is_library() => format!("{m}.{}", self.function),
            _ => self.function.clone(),
        }
    }

    /// `name (file:line)` with the file's base name.
    pub fn display_at(&self) -> String {
        let base = self.file.rsplit('/').next().unwrap_or(&self.file);
        match self.kind {
            Kind::Python => format!("{} ({base}:{})", self.display_name(), self.line),
            Kind::Native if !base.is_empty() => format!("{} ({base})", self.function),
            _ => self.function.clone(),
        }
    }
}

/// Shared objects of the C library, the loader and the interpreter's own
/// machinery, which are where every thread blocks and never the answer.
fn is_system_object(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    // the C runtime, CPython's, HotSpot's (libjvm and the JDK's own native libraries, which run
    // below every Java thread as python3 runs below every Python one)
    ["libc.so", "libc-", "libpthread", "ld-linux", "libstdc++", "libgcc_s", "libm.so", "libpython", "[vdso]", "libjvm.so"]
        .iter()
        .any(|p| base.starts_with(p))
        || base.starts_with("python3")
        || path.contains("/lib/jvm/")
}

/// Generated code of a runtime that is no function of anyone's: the JVM's interpreter and stubs,
/// V8's builtins and handlers.
const RUNTIME_STUBS: [&str; 10] =
    ["Interpreter", "StubRoutines", "Stub", "Builtin", "BytecodeHandler", "RegExp", "Handler", "I2C", "C2I", "JVM"];

/// A frame that names no function a reader would call: a runtime's stub, an address. `managed`:
/// the stack runs a runtime's generated code, whose generated code built into its executable (V8's
/// `Builtins_CEntry_…` trampolines) is named by the symbol table as its stubs are by the perf map;
/// the runtime's C++ (`InterpreterRuntime::monitorexit`, a namespaced name) is a call.
fn is_stub(f: &Frame, managed: bool) -> bool {
    let generated = f.kind == Kind::Jit || managed && f.kind == Kind::Native && !f.function.contains("::");
    f.kind == Kind::Unknown || f.function.starts_with('[') || generated && is_runtime_stub(&f.function)
}

/// Whether a JIT's name is one of its runtime's stubs (`StubRoutines (1)`, `Interpreter`).
pub fn is_runtime_stub(name: &str) -> bool {
    RUNTIME_STUBS.iter().any(|p| name.starts_with(p))
}

/// Generated code that is the runtime's rather than the application's: the JVM's interpreter,
/// stubs and the JDK's own classes; V8's builtins, bytecode handlers and Node.js's internals.
fn is_runtime_jit(name: &str) -> bool {
    // V8 marks a function's tier before its name (`JS:*f`, `LazyCompile:~f`), the JVM a return type
    let bare = name.split_once(':').filter(|(tier, _)| !tier.contains(' ')).map_or(name, |(_, rest)| rest);
    let bare = bare.trim_start_matches(['*', '~', '^', '+']);
    let jdk = ["java.", "javax.", "jdk.", "sun.", "com.sun.", "Ljava/", "Ljdk/", "Lsun/", "node:", "internal/"];
    is_runtime_stub(name)
        || name.split_whitespace().any(|w| jdk.iter().any(|p| w.starts_with(p)))
        || jdk.iter().any(|p| bare.starts_with(p))
}

/// The module of a library file: `json` for .../lib/python3.12/json/__init__.py,
/// `requests.sessions` for .../site-packages/requests/sessions.py.
pub fn module_of(file: &str) -> Option<String> {
    let rest = if let Some(i) = file.find("/site-packages/").or_else(|| file.find("/dist-packages/")) {
        &file[i + "/site-packages/".len()..]
    } else {
        // past ".../lib/python3.X/"
        let i = file.find("/lib/python3")?;
        let after = &file[i + "/lib/".len()..];
        &after[after.find('/')? + 1..]
    };
    let rest = rest.strip_suffix(".py")?;
    let rest = rest.strip_suffix("/__init__").unwrap_or(rest);
    (!rest.is_empty()).then(|| rest.replace('/', "."))
}

/// Longest function or file name kept (C++ and Rust symbols run long).
pub const MAX_NAME: usize = 256;

/// A printable, bounded name read from a target (its memory or its files).
pub fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).take(MAX_NAME).collect()
}

/// A stack, leaf first.
pub type Stack = Arc<[Frame]>;

/// Whose stack a wait is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// the thread that waited, where it was stopped
    Victim,
    /// the GIL holder when the wait began
    Holder,
    /// the thread whose futex wake ended the wait
    Waker,
    /// the thread of the same process that had the CPU
    Preemptor,
    /// the thread itself on the CPU while busy in a long stretch away from its waits (sampled by
    /// the CPU clock: what kept it from its home)
    Busy,
}

impl Role {
    /// The `role` label of profiles.
    pub fn label(self) -> &'static str {
        match self {
            Role::Victim => "victim",
            Role::Holder => "holder",
            Role::Waker => "waker",
            Role::Preemptor => "preemptor",
            Role::Busy => "busy",
        }
    }
}

/// Time charged to one stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// the thread that waited (TID in the agent's namespace)
    pub victim: u32,
    /// who it waited behind (TID; 0 unknown, or none for sleeps and I/O)
    pub blamed: u32,
    pub state: State,
    pub role: Role,
    pub stack: Stack,
}

/// Distinct (victim, blamed, state, role, stack) entries kept per process.
pub const MAX_ENTRIES: usize = 20_000;

/// Buckets of wait lengths (bpf/stacks.h `WM_WAIT_BUCKETS`): bucket 0 below
/// 1 ms, bucket i in [2^(i-1), 2^i) ms, the last from 256 ms.
pub const WAIT_BUCKETS: usize = 10;

/// How many waits an entry had, and how long each was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lengths {
    pub waits: u64,
    /// the lengths summed
    pub sum_ns: u64,
    pub max_ns: u64,
    pub buckets: [u64; WAIT_BUCKETS],
}

impl Lengths {
    pub fn add(&mut self, o: &Lengths) {
        self.waits += o.waits;
        self.sum_ns += o.sum_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
    }

    /// (upper bound in seconds, count in that bucket) for a Prometheus
    /// histogram: 1 ms, 2 ms, ... 256 ms, then +Inf. Counts are per bucket,
    /// not cumulative. (A bucket's upper bound is exclusive at nanosecond
    /// precision where Prometheus' `le` is inclusive: a hold of exactly
    /// 1.000000 ms is counted above `le="0.001"`.)
    pub fn prometheus_buckets(&self) -> Vec<(f64, u64)> {
        let mut out: Vec<(f64, u64)> = (0..WAIT_BUCKETS - 1).map(|i| ((1u64 << i) as f64 / 1e3, self.buckets[i])).collect();
        out.push((f64::INFINITY, self.buckets[WAIT_BUCKETS - 1]));
        out
    }

    /// The bounds of bucket `i`, ns (the last ends at the longest wait).
    fn bounds(&self, i: usize) -> (f64, f64) {
        let lo = if i == 0 { 0.0 } else { (1u64 << (i - 1)) as f64 * 1e6 };
        let hi = if i + 1 == WAIT_BUCKETS { (self.max_ns as f64).max(lo) } else { (1u64 << i) as f64 * 1e6 };
        (lo, hi.min((self.max_ns as f64).max(lo)))
    }

    /// The `q` quantile of the lengths, ns, interpolated linearly within its
    /// bucket and never above the longest wait.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0.0;
        for (i, n) in self.buckets.iter().enumerate() {
            let n = *n as f64;
            if n > 0.0 && seen + n >= rank {
                let (lo, hi) = self.bounds(i);
                return Some(lo + (hi - lo) * ((rank - seen) / n).clamp(0.0, 1.0));
            }
            seen += n;
        }
        Some(self.max_ns as f64)
    }

    /// Waits of at least `ns` (interpolated within the bucket `ns` falls in).
    pub fn at_least(&self, ns: f64) -> f64 {
        (0..WAIT_BUCKETS)
            .map(|i| {
                let (lo, hi) = self.bounds(i);
                let n = self.buckets[i] as f64;
                if lo >= ns {
                    n
                } else if hi <= ns || hi <= lo {
                    0.0
                } else {
                    n * (hi - ns) / (hi - lo)
                }
            })
            .sum()
    }
}

/// Wait time by stack, for one process.
#[derive(Clone, Debug, Default)]
pub struct WaitStacks {
    pub ns: HashMap<Key, u64>,
    /// the waits' lengths of the GIL holders' entries (role holder)
    pub lengths: HashMap<Key, Lengths>,
    /// how many waits the victims' entries (role victim) were charged
    pub waits: HashMap<Key, u64>,
    /// time of entries beyond MAX_ENTRIES (counted, not kept)
    pub dropped_ns: u64,
}

/// Where a GIL holder was while others waited behind it, with the lengths
/// of those waits: each at least as long as the hold it sat behind
/// (`gil_holds_by_function`).
#[derive(Clone, Debug, PartialEq)]
pub struct HoldSite {
    /// the holder (TID), and its code (`site_of`)
    pub holder: u32,
    pub site: String,
    /// time others waited behind it there
    pub ns: u64,
    pub lengths: Lengths,
}

/// Where a thread was, in one line, and the share of the time it was there.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub text: String,
    pub share: f64,
    pub ns: u64,
    /// the C function (of an extension or the interpreter's callees) with the
    /// most of this site's time, and its share of that time
    pub in_c: Option<(String, f64)>,
}

impl WaitStacks {
    pub fn add(&mut self, k: Key, ns: u64) {
        if let Some(v) = self.ns.get_mut(&k) {
            *v += ns;
        } else if self.ns.len() < MAX_ENTRIES {
            self.ns.insert(k, ns);
        } else {
            self.dropped_ns += ns;
        }
    }

    /// The same waits with every victim and culprit TID passed through `to` (threads folded
    /// into one row: `report::fold`), entries that meet merged.
    pub fn remap(&mut self, to: impl Fn(u32) -> u32) {
        let key = |k: Key| Key { victim: to(k.victim), blamed: if k.blamed == 0 { 0 } else { to(k.blamed) }, ..k };
        let mut ns: HashMap<Key, u64> = HashMap::with_capacity(self.ns.len());
        for (k, v) in self.ns.drain() {
            *ns.entry(key(k)).or_default() += v;
        }
        let mut lengths: HashMap<Key, Lengths> = HashMap::with_capacity(self.lengths.len());
        for (k, l) in self.lengths.drain() {
            lengths.entry(key(k)).or_default().add(&l);
        }
        let mut waits: HashMap<Key, u64> = HashMap::with_capacity(self.waits.len());
        for (k, n) in self.waits.drain() {
            *waits.entry(key(k)).or_default() += n;
        }
        self.ns = ns;
        self.lengths = lengths;
        self.waits = waits;
    }

    /// `add`, with the waits' lengths (kept for GIL holders' entries) or their number (a
    /// victim's entries).
    pub fn add_waits(&mut self, k: Key, ns: u64, l: &Lengths) {
        if self.ns.contains_key(&k) || self.ns.len() < MAX_ENTRIES {
            if k.role == Role::Holder && k.state == State::GilWait {
                self.lengths.entry(k.clone()).or_default().add(l);
            } else if k.role == Role::Victim && l.waits > 0 {
                *self.waits.entry(k.clone()).or_default() += l.waits;
            }
        }
        self.add(k, ns);
    }

    /// How many waits of `victims` in `state` ended behind the blamed that `behind` accepts (a
    /// family's hand-offs: each a wakeup by another of them).
    pub fn waits_behind(&self, victims: &[u32], state: State, behind: impl Fn(u32) -> bool) -> u64 {
        self.waits.iter().filter(|(k, _)| victims.contains(&k.victim) && k.state == state && behind(k.blamed)).map(|(_, n)| n).sum()
    }

    /// The GIL holders' code by the time others waited behind it, with the
    /// lengths of those waits, most first (`victim`: only waits of that thread).
    pub fn holds_by_site(&self, victim: Option<u32>) -> Vec<HoldSite> {
        let mut by: HashMap<(u32, String), (u64, Lengths)> = HashMap::new();
        for (k, l) in self.lengths.iter().filter(|(k, _)| victim.is_none_or(|v| k.victim == v)) {
            let e = by.entry((k.blamed, site_parts(&k.stack).0)).or_default();
            e.0 += self.ns.get(k).copied().unwrap_or(0);
            e.1.add(l);
        }
        let mut v: Vec<HoldSite> = by.into_iter().map(|((holder, site), (ns, lengths))| HoldSite { holder, site, ns, lengths }).collect();
        v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| (a.holder, &a.site).cmp(&(b.holder, &b.site))));
        v
    }

    /// The entries of one side of the waits of `victim` in `state` (behind
    /// `blamed` when given).
    pub fn select(&self, victim: u32, state: State, role: Role, blamed: Option<u32>) -> impl Iterator<Item = (&Key, u64)> {
        self.ns
            .iter()
            .filter(move |(k, _)| k.victim == victim && k.state == state && k.role == role && blamed.is_none_or(|b| k.blamed == b))
            .map(|(k, ns)| (k, *ns))
    }

    /// The site (`site_of`) with the most time among those entries, and its share.
    pub fn top_site(&self, victim: u32, state: State, role: Role, blamed: Option<u32>) -> Option<Site> {
        top(by_site_in_c(self.select(victim, state, role, blamed)))
    }

    /// The top site of `victim`'s own waits in `state` among those with at most `max_ns` of it, its
    /// share of `max_ns`: the waits of a thread's stretches away from its home wait hold at most
    /// their time in `state`, so a site with more (its home wait's, in the same state) is not
    /// theirs. None when none is named.
    pub fn top_site_within(&self, victim: u32, state: State, max_ns: u64) -> Option<Site> {
        let sites = by_site_in_c(self.select(victim, state, Role::Victim, None));
        let (text, ns, c) = sites.into_iter().find(|s| s.1 <= max_ns)?;
        if text == UNNAMED || max_ns == 0 {
            return None;
        }
        let in_c = c.filter(|_| ns > 0).map(|(f, c_ns)| (f, c_ns as f64 / ns as f64));
        Some(Site { text, share: (ns as f64 / max_ns as f64).min(1.0), ns, in_c })
    }

    /// The top site of one side of the waits of several threads (a convoy's waiters, a pool's
    /// GIL waiters; behind `blamed` when given).
    pub fn top_site_of(&self, victims: &[u32], state: State, role: Role, blamed: Option<u32>) -> Option<Site> {
        self.top_site_behind(victims, state, role, |b| blamed.is_none_or(|x| b == x))
    }

    /// `top_site_of`, behind the blamed that `behind` accepts (a family's wakers: another
    /// process's waker is blamed by its PID).
    pub fn top_site_behind(&self, victims: &[u32], state: State, role: Role, behind: impl Fn(u32) -> bool) -> Option<Site> {
        top(by_site_in_c(self.select_behind(victims, state, role, behind)))
    }

    /// The entries of several threads' waits in `state`, one side (`role`), behind the blamed that
    /// `behind` accepts.
    pub fn select_behind<'a>(
        &'a self,
        victims: &'a [u32],
        state: State,
        role: Role,
        behind: impl Fn(u32) -> bool + 'a,
    ) -> impl Iterator<Item = (&'a Key, u64)> + 'a {
        self.ns
            .iter()
            .filter(move |(k, _)| victims.contains(&k.victim) && k.state == state && k.role == role && behind(k.blamed))
            .map(|(k, ns)| (k, *ns))
    }
}

/// Whether a wait was made between units of work: its stack holds no code of the application's,
/// every frame named and the libraries' or the runtime's (a Go runtime's thread parked in its
/// scheduler, `runtime.notesleep ← runtime.stopm ← runtime.findRunnable ← runtime.schedule`; a
/// pool's worker on its queue, `LinkedBlockingQueue.take ← ThreadPoolExecutor.getTask`). A wait for
/// a lock is made in the middle of the work that takes it: the application's caller is on the
/// stack. A stack with a frame no symbol names says neither.
pub fn between_work(stack: &[Frame]) -> bool {
    !stack.is_empty() && stack.iter().all(|f| f.kind != Kind::Unknown && !f.function.starts_with('[') && f.is_library())
}

/// The site of stacks no frame of which is named.
pub const UNNAMED: &str = "[unknown]";

/// The first of `by_site_in_c`'s sites, with its share of all of them; none when it is
/// [`UNNAMED`] (a finding names no code rather than the next site, a small share).
fn top(sites: Vec<SiteTime>) -> Option<Site> {
    let total: u64 = sites.iter().map(|s| s.1).sum();
    let (text, ns, c) = sites.into_iter().next()?;
    if text == UNNAMED {
        return None;
    }
    let in_c = c.filter(|_| ns > 0).map(|(f, c_ns)| (f, c_ns as f64 / ns as f64));
    (total > 0).then(|| Site { text, share: ns as f64 / total as f64, ns, in_c })
}

/// A site, its time, and the C function with the most of it (and that time).
type SiteTime = (String, u64, Option<(String, u64)>);

/// Time by site (`site_parts`' first part), most first, with the C function
/// that had the most of each site's time (and that time).
fn by_site_in_c<'a>(entries: impl Iterator<Item = (&'a Key, u64)>) -> Vec<SiteTime> {
    let mut by: HashMap<String, (u64, HashMap<String, u64>)> = HashMap::new();
    for (k, ns) in entries {
        let (site, c) = site_parts(&k.stack);
        let e = by.entry(site).or_default();
        e.0 += ns;
        if let Some(c) = c {
            *e.1.entry(c).or_default() += ns;
        }
    }
    let mut v: Vec<SiteTime> = by
        .into_iter()
        .map(|(site, (ns, cs))| (site, ns, cs.into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// A stack in one line, as a verdict names it: the application's innermost
/// frame and the library call it was in (`json.dumps ← processor (svc.py:52)`),
/// led by the native function when the thread was in a C function of an
/// extension or program (`encoder_listencode_list in json.dumps ← ...`).
pub fn site_of(stack: &[Frame]) -> String {
    match site_parts(stack) {
        (p, Some(c)) => format!("{c} in {p}"),
        (p, None) => p,
    }
}

/// The frame of a Python stack (innermost first) that a verdict names: the application's
/// innermost; but never the program's entry point (the outermost frame, a script that only
/// starts a library's server: `uvicorn`'s `<module>`) when library frames run above it: then the
/// innermost frame, where the thread was (`EpollSelector.select ← BaseEventLoop._run_once`).
fn app_frame(py: &[&Frame]) -> Option<usize> {
    match py.iter().position(|f| !f.is_library()) {
        Some(i) if i > 0 && i + 1 == py.len() => Some(1),
        other => other,
    }
}

/// Frames of the program a native site names at most: its innermost and the callers that say what
/// it was doing (`WaitEventSetWait ← WaitLatch ← ProcSleep ← LockAcquireExtended`: the third and
/// fourth say it waited for a lock, where the first two are the wait every such sleep goes through).
const SITE_FRAMES: usize = 4;

/// `site_of` in two: the site without its leading C function (the Python
/// site, or a native stack's), and that C function (a verdict groups by the
/// first and names the second inside it).
pub fn site_parts(stack: &[Frame]) -> (String, Option<String>) {
    let py: Vec<&Frame> = stack.iter().filter(|f| f.kind == Kind::Python).collect();
    // the application's code generated by a runtime (a JVM's method, a JavaScript function) on the
    // stack: native code is then the runtime's (V8's C++ and builtins in the `node` executable,
    // HotSpot's), whatever object holds it; the application's frame is its generated code
    let managed = py.is_empty() && stack.iter().any(|f| f.kind == Kind::Jit && !f.is_library());
    let own = |f: &Frame| !f.is_library() && if managed { f.kind == Kind::Jit } else { matches!(f.kind, Kind::Native | Kind::Jit) };
    let native_leaf = stack.iter().take_while(|f| f.kind != Kind::Python).find(|f| own(f));
    let py_part = match app_frame(&py) {
        // the application's own frame, and the library function it called
        Some(0) => Some(py[0].display_at()),
        Some(i) => Some(format!("{} ← {}", py[i - 1].display_name(), py[i].display_at())),
        None => py.first().map(|f| f.display_at()),
    };
    match (native_leaf, py_part) {
        (Some(n), Some(p)) => (p, Some(c_function(&n.function).to_string())),
        (None, Some(p)) => (p, None),
        (Some(n), None) => {
            // a native stack: the innermost frame of the program and the callers that say what it
            // was doing, led by the library function it was in (`pthread_mutex_lock ← take (prog)
            // ← append_record`, as a Python site names the library call); a runtime's stubs are no
            // call, and a frame no symbol names is passed over
            let i = stack.iter().position(|f| std::ptr::eq(f, n)).unwrap_or(0);
            let mut names = vec![n.display_at()];
            let mut callers = stack[i + 1..].iter().filter(|f| !is_stub(f, managed));
            if let Some(first) = callers.by_ref().find(|f| own(f)) {
                names.push(first.function.clone());
                names.extend(callers.take_while(|f| own(f)).take(SITE_FRAMES - 2).map(|f| f.function.clone()));
            }
            let call = stack[..i].iter().rev().find(|f| !is_stub(f, managed));
            let site = match call {
                Some(call) => format!("{} ← {}", c_function(&call.function), names.join(" ← ")),
                None => names.join(" ← "),
            };
            // where the runtime's own code ran inside that call (V8's C++ serializing a string for
            // `JSON.stringify`), as a Python site names its C function
            // (a Go executable's own library code it ran inside its standard library's call:
            // `crypto/sha256.block` for `crypto/sha256.Sum256`)
            let leaf = stack.first().filter(|f| {
                f.kind == Kind::Native && (managed && !is_system_object(&f.file) && !is_stub(f, true) || !managed && f.library)
            });
            let inner = leaf.filter(|f| call.is_none_or(|c| !std::ptr::eq(*f, c))).map(|f| c_function(&f.function).to_string());
            (site, inner)
        }
        // a runtime's stack whose generated code is all its libraries' (a JVM pool's worker waiting
        // for a task, `Unsafe_Park ← java.util.concurrent.ForkJoinPool.managedBlock ← …`; a monitor
        // released in a JDK method a handler was compiled into): the runtime call it was in and its
        // innermost generated frames, where it was, not the C library's function alone
        (None, None) if stack.iter().any(|f| f.kind == Kind::Jit && !is_stub(f, true)) => {
            let i = stack.iter().position(|f| f.kind == Kind::Jit && !is_stub(f, true)).unwrap_or(0);
            let mut names = vec![stack[i].function.clone()];
            names.extend(
                stack[i + 1..]
                    .iter()
                    .filter(|f| !is_stub(f, true))
                    .take_while(|f| f.kind == Kind::Jit)
                    .take(SITE_FRAMES - 2)
                    .map(|f| f.function.clone()),
            );
            match stack[..i].iter().rev().find(|f| !is_stub(f, true)) {
                Some(call) => (format!("{} ← {}", c_function(&call.function), names.join(" ← ")), None),
                None => (names.join(" ← "), None),
            }
        }
        // a stack all in the libraries linked into the program's own file (a Go runtime's idle
        // thread: `runtime.futex ← runtime.futexsleep ← runtime.notesleep ← runtime.stopm`): its
        // innermost frames, as a program's own are named
        (None, None) if stack.first().is_some_and(|f| f.library) => {
            let mut names = vec![stack[0].display_at()];
            names.extend(stack[1..].iter().take_while(|f| f.library).take(SITE_FRAMES - 1).map(|f| f.function.clone()));
            (names.join(" ← "), None)
        }
        // code no symbol names (generated by a JIT that writes no perf map): one site, as perf
        // prints such frames, never an address (each would be a site of its own)
        (None, None) if stack.first().is_none_or(|f| f.kind == Kind::Unknown) => (UNNAMED.into(), None),
        (None, None) => (stack.first().map(|f| f.display_at()).unwrap_or_default(), None),
    }
}

/// A C function as its source names it: without the suffixes of the
/// compiler's clones and split parts (`save.constprop.0`, `encoder_listencode_obj.isra.0`,
/// `take_gil.lto_priv.0`, `main.cold`).
pub fn c_function(symbol: &str) -> &str {
    match symbol.find('.') {
        Some(i)
            if i > 0
                && [".constprop.", ".isra.", ".part.", ".lto_priv.", ".cold", ".localalias"].iter().any(|p| symbol[i..].starts_with(p)) =>
        {
            &symbol[..i]
        }
        _ => symbol,
    }
}

/// The function a stack is known by, for a metric label: the library call
/// the application was in (`json.dumps`), else the application's innermost
/// function, else the program's innermost native function; no file or line
/// (they would split one function's series).
pub fn site_function(stack: &[Frame]) -> String {
    let py: Vec<&Frame> = stack.iter().filter(|f| f.kind == Kind::Python).collect();
    if let Some(f) = match app_frame(&py) {
        Some(0) => Some(py[0]),
        Some(i) => Some(py[i - 1]),
        None => py.first().copied(),
    } {
        return f.display_name();
    }
    stack
        .iter()
        .find(|f| f.kind == Kind::Native && !f.is_library())
        .or_else(|| stack.first())
        .map_or_else(|| "unknown".to_string(), |f| f.function.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(f: &str, file: &str, line: u32) -> Frame {
        Frame::python(f.into(), file.into(), line)
    }

    #[test]
    fn a_runtimes_stack_of_library_code_is_named_by_its_innermost_generated_frames() {
        let libc = |f: &str| Frame::native(f.into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into());
        let jvm = |f: &str| Frame::native(f.into(), "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so".into());
        let waiting = [
            libc("__futex_abstimed_wait_common"),
            libc("pthread_cond_wait"),
            jvm("Parker::park"),
            jvm("Unsafe_Park"),
            Frame::jit("JVM monitorexit_nofpu Runtime1 stub".into()),
            Frame::jit("java.util.concurrent.ForkJoinPool.managedBlock".into()),
            Frame::jit("java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await".into()),
            Frame::jit("StubRoutines (1)".into()),
            Frame::jit("java.util.concurrent.LinkedBlockingQueue.take".into()),
            Frame::jit("java.util.concurrent.ThreadPoolExecutor.getTask".into()),
            jvm("JavaCalls::call_helper"),
        ];
        assert_eq!(
            site_of(&waiting),
            "Unsafe_Park ← java.util.concurrent.ForkJoinPool.managedBlock ← java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await ← java.util.concurrent.LinkedBlockingQueue.take"
        );
        // with the application's frame on it, the application's frame leads as before
        let mut locked = waiting[..4].to_vec();
        locked.push(Frame::jit("Pool.reprice".into()));
        assert_eq!(site_of(&locked), "Unsafe_Park ← Pool.reprice");
    }

    /// Waits between units of work hold no application code; a lock's wait holds its caller; an
    /// unnamed frame says neither.
    #[test]
    fn a_wait_between_units_of_work_holds_no_application_code() {
        let lib = |f: &str| Frame::native_library(f.into(), "/srv/gohttp".into());
        let idle = [lib("runtime.futex.abi0"), lib("runtime.notesleep"), lib("runtime.stopm"), lib("runtime.schedule")];
        assert!(between_work(&idle));
        let lock = [lib("runtime.futex.abi0"), lib("sync.(*Mutex).lockSlow"), Frame::native("main.handler".into(), "/srv/gohttp".into())];
        assert!(!between_work(&lock));
        let queue = [
            Frame::native("__futex_abstimed_wait_common".into(), "/lib/x86_64-linux-gnu/libc.so.6".into()),
            Frame::jit("Ljava/util/concurrent/LinkedBlockingQueue;::take".into()),
        ];
        assert!(between_work(&queue));
        let unnamed = [queue[0].clone(), Frame::unknown("[unknown] 0x7f00".into())];
        assert!(!between_work(&unnamed) && !between_work(&[]));
    }

    /// A Go executable's site names its own function and the standard library's call it was in
    /// (with the code it ran there), as a Python site does; a stack of the runtime alone, its
    /// innermost frames.
    #[test]
    fn a_go_site_names_the_application_and_the_standard_librarys_call() {
        let lib = |f: &str| Frame::native_library(f.into(), "/srv/gohttp".into());
        let own = |f: &str| Frame::native(f.into(), "/srv/gohttp".into());
        let hashing = [
            lib("crypto/internal/fips140/sha256.blockSHANI.abi0"),
            lib("crypto/internal/fips140/sha256.block"),
            lib("crypto/internal/fips140/sha256.(*Digest).Write"),
            lib("crypto/sha256.Sum256"),
            own("main.handler"),
            lib("net/http.HandlerFunc.ServeHTTP"),
            lib("net/http.(*conn).serve"),
            lib("runtime.goexit.abi0"),
        ];
        assert_eq!(
            site_parts(&hashing),
            (
                "crypto/sha256.Sum256 ← main.handler (gohttp)".to_string(),
                Some("crypto/internal/fips140/sha256.blockSHANI.abi0".to_string())
            )
        );
        let idle = [
            lib("runtime.futex.abi0"),
            lib("runtime.futexsleep"),
            lib("runtime.notesleep"),
            lib("runtime.stopm"),
            lib("runtime.findRunnable"),
            lib("runtime.schedule"),
        ];
        assert_eq!(
            site_parts(&idle),
            ("runtime.futex.abi0 (gohttp) ← runtime.futexsleep ← runtime.notesleep ← runtime.stopm".to_string(), None)
        );
        assert!(idle.iter().all(Frame::is_library) && !own("main.handler").is_library());
    }

    #[test]
    fn a_site_is_never_the_programs_entry_point() {
        let lib = "/usr/lib/python3.12/site-packages";
        let stack = vec![
            py("EpollSelector.select", "/usr/lib/python3.12/selectors.py", 468),
            py("BaseEventLoop._run_once", "/usr/lib/python3.12/asyncio/base_events.py", 1898),
            py("BaseEventLoop.run_forever", "/usr/lib/python3.12/asyncio/base_events.py", 618),
            py("Command.__call__", &format!("{lib}/click/core.py"), 1157),
            py("<module>", "/usr/local/bin/uvicorn", 8),
        ];
        let site = site_of(&stack);
        assert!(
            site.starts_with("selectors.EpollSelector.select ← asyncio.base_events.BaseEventLoop._run_once") || site.contains("_run_once"),
            "{site}"
        );
        assert!(!site.contains("<module>"), "{site}");
        // an application frame inside: it is the site, as before
        let mut inner = stack.clone();
        inner.insert(0, py("render_report", "/srv/app.py", 12));
        inner.insert(0, py("dumps", "/usr/lib/python3.12/json/__init__.py", 231));
        assert!(site_of(&inner).ends_with("render_report (app.py:12)"), "{}", site_of(&inner));
    }

    #[test]
    fn library_modules_are_named_as_imported() {
        assert_eq!(module_of("/usr/lib/python3.12/json/__init__.py").as_deref(), Some("json"));
        assert_eq!(module_of("/root/.pyenv/versions/3.11.9/lib/python3.11/json/encoder.py").as_deref(), Some("json.encoder"));
        assert_eq!(module_of("/venv/lib/python3.11/site-packages/requests/sessions.py").as_deref(), Some("requests.sessions"));
        assert_eq!(module_of("/srv/app/service.py"), None);
    }

    #[test]
    fn a_site_is_the_library_call_the_application_was_in() {
        let lib = "/usr/lib/python3.12/json/__init__.py";
        let enc = "/usr/lib/python3.12/json/encoder.py";
        let stack = vec![
            py("JSONEncoder.iterencode", enc, 258),
            py("JSONEncoder.encode", enc, 200),
            py("dumps", lib, 231),
            py("processor", "/srv/service.py", 52),
            py("Thread.run", "/usr/lib/python3.12/threading.py", 1010),
        ];
        assert_eq!(site_of(&stack), "json.dumps ← processor (service.py:52)");
        let own = vec![py("spin", "/srv/service.py", 40), py("processor", "/srv/service.py", 55)];
        assert_eq!(site_of(&own), "spin (service.py:40)");
        let mut with_c =
            vec![Frame::native("encoder_listencode_list".into(), "/usr/lib/python3.12/lib-dynload/_json.cpython-312.so".into())];
        with_c.extend(stack);
        assert_eq!(site_of(&with_c), "encoder_listencode_list in json.dumps ← processor (service.py:52)");
        let c = vec![
            Frame::native("__lll_lock_wait".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            Frame::native("append_record".into(), "/srv/convoy".into()),
            Frame::native("worker".into(), "/srv/convoy".into()),
        ];
        assert_eq!(site_of(&c), "__lll_lock_wait ← append_record (convoy) ← worker", "the library call, the program's frames in it");
        let program_only = [c[1].clone(), c[2].clone()];
        assert_eq!(site_of(&program_only), "append_record (convoy) ← worker", "the program's own code, and its caller");
        let through_stubs = [
            Frame::native("ObjectSynchronizer::enter".into(), "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so".into()),
            Frame::jit("StubRoutines (1)".into()),
            Frame::jit("fixengine.OrderBook.match".into()),
            Frame::jit("fixengine.Main.fromApp".into()),
        ];
        assert_eq!(
            site_of(&through_stubs),
            "ObjectSynchronizer::enter ← fixengine.OrderBook.match ← fixengine.Main.fromApp",
            "a runtime's stub is no call"
        );
        assert_eq!(site_function(&with_c), "json.dumps");
        assert_eq!(c_function("save.constprop.0"), "save");
        assert_eq!(c_function("encoder_listencode_obj.isra.0"), "encoder_listencode_obj");
        assert_eq!(c_function("take_gil.lto_priv.0"), "take_gil");
        assert_eq!(c_function("main.cold"), "main");
        assert_eq!(c_function("[_json.so+0x20]"), "[_json.so+0x20]");
        assert_eq!(c_function("std::vec.foo"), "std::vec.foo");
        assert_eq!(site_function(&own), "spin");
        assert_eq!(site_function(&c), "append_record");
        assert_eq!(site_function(&[]), "unknown");
    }

    #[test]
    fn the_store_is_bounded_and_counts_what_it_drops() {
        let mut w = WaitStacks::default();
        let stack: Stack = vec![Frame::unknown("?".into())].into();
        for i in 0..MAX_ENTRIES as u32 + 10 {
            w.add(Key { victim: i, blamed: 0, state: State::Sleep, role: Role::Victim, stack: stack.clone() }, 5);
        }
        assert_eq!(w.ns.len(), MAX_ENTRIES);
        assert_eq!(w.dropped_ns, 50);
    }

    #[test]
    fn length_quantiles_interpolate_within_buckets() {
        let mut l = Lengths { waits: 100, max_ns: 75_000_000, ..Default::default() };
        // 100 waits between 64 and 75 ms (bucket 7: [64, 128) ms, cut at the longest)
        l.buckets[7] = 100;
        let p50 = l.quantile(0.5).unwrap() / 1e6;
        let p99 = l.quantile(0.99).unwrap() / 1e6;
        assert!((69.0..=70.0).contains(&p50) && (74.0..=75.0).contains(&p99), "{p50} {p99}");
        assert_eq!(l.at_least(10e6), 100.0);
        assert_eq!(l.at_least(80e6), 0.0);
        let mut short = Lengths { waits: 10, max_ns: 5_200_000, ..Default::default() };
        short.buckets[4] = 10; // [8, 16) ms cut at 5.2 ms: lo is 8 ms > max
        assert!(short.quantile(0.5).unwrap() <= 8e6);
        let mut five = Lengths { waits: 10, max_ns: 5_200_000, ..Default::default() };
        five.buckets[3] = 10; // [4, 8) ms, cut at 5.2
        assert!(five.quantile(0.99).unwrap() <= 5.2e6 && five.quantile(0.5).unwrap() >= 4e6);
        assert_eq!(five.at_least(10e6), 0.0);
        assert!(Lengths::default().quantile(0.5).is_none());
    }

    #[test]
    fn length_buckets_are_prometheus_buckets_in_seconds() {
        let mut l = Lengths { waits: 3, sum_ns: 400_500_000, max_ns: 300_000_000, ..Default::default() };
        l.buckets[0] = 1; // < 1 ms
        l.buckets[7] = 1; // [64, 128) ms
        l.buckets[9] = 1; // >= 256 ms
        let b = l.prometheus_buckets();
        assert_eq!(b.len(), WAIT_BUCKETS);
        assert_eq!(b[0], (0.001, 1));
        assert_eq!(b[7], (0.128, 1));
        assert_eq!(b[8], (0.256, 0));
        assert_eq!(b[9], (f64::INFINITY, 1));
        let mut two = l.clone();
        two.add(&l);
        assert_eq!((two.waits, two.sum_ns, two.max_ns), (6, 801_000_000, 300_000_000));
    }

    #[test]
    fn holds_by_site_merge_a_holders_entries() {
        let mut w = WaitStacks::default();
        let a: Stack = vec![py("dumps", "/usr/lib/python3.12/json/__init__.py", 231), py("work", "/srv/s.py", 9)].into();
        let b: Stack = vec![py("spin", "/srv/s.py", 20)].into();
        let l = |bucket: usize, n: u64| {
            let mut l = Lengths { waits: n, max_ns: 1u64 << bucket << 20, ..Default::default() };
            l.buckets[bucket] = n;
            l
        };
        for victim in [1, 3] {
            w.add_waits(Key { victim, blamed: 2, state: State::GilWait, role: Role::Holder, stack: a.clone() }, 700, &l(7, 10));
            w.add_waits(Key { victim, blamed: 2, state: State::GilWait, role: Role::Holder, stack: b.clone() }, 300, &l(3, 60));
        }
        w.add_waits(Key { victim: 1, blamed: 2, state: State::GilWait, role: Role::Victim, stack: b.clone() }, 1000, &l(3, 60));
        let h = w.holds_by_site(None);
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].site.as_str(), h[0].ns, h[0].lengths.waits), ("json.dumps ← work (s.py:9)", 1400, 20));
        assert_eq!((h[1].ns, h[1].lengths.waits), (600, 120));
        assert_eq!(w.holds_by_site(Some(3))[0].ns, 700);
    }

    #[test]
    fn top_site_shares() {
        let mut w = WaitStacks::default();
        let a: Stack = vec![py("dumps", "/usr/lib/python3.12/json/__init__.py", 231), py("work", "/srv/s.py", 9)].into();
        let b: Stack = vec![py("spin", "/srv/s.py", 20)].into();
        let k = |s: &Stack| Key { victim: 1, blamed: 2, state: State::GilWait, role: Role::Holder, stack: s.clone() };
        w.add(k(&a), 750);
        w.add(k(&b), 250);
        let top = w.top_site(1, State::GilWait, Role::Holder, Some(2)).unwrap();
        assert_eq!(top.text, "json.dumps ← work (s.py:9)");
        assert!((top.share - 0.75).abs() < 1e-9);
        assert!(w.top_site(1, State::GilWait, Role::Holder, Some(3)).is_none());
    }

    /// A stall's own waits: the top site with no more of the state than the stalls had in it,
    /// not the home wait's (an event loop's poll, in the same state, with more).
    #[test]
    fn a_stalls_own_site_is_within_its_time() {
        let mut w = WaitStacks::default();
        let poll: Stack = vec![py("EpollSelector.select", "/usr/lib/python3.12/selectors.py", 468), py("serve", "/srv/app.py", 5)].into();
        let handler: Stack = vec![py("fetch_daily_report", "/srv/app.py", 21)].into();
        let k = |s: &Stack| Key { victim: 1, blamed: 0, state: State::IoWait, role: Role::Victim, stack: s.clone() };
        w.add(k(&poll), 3_400);
        w.add(k(&handler), 1_050);
        assert_eq!(w.top_site(1, State::IoWait, Role::Victim, None).unwrap().text, "selectors.EpollSelector.select ← serve (app.py:5)");
        let own = w.top_site_within(1, State::IoWait, 1_300).unwrap();
        assert_eq!(own.text, "fetch_daily_report (app.py:21)");
        assert!((own.share - 1_050.0 / 1_300.0).abs() < 1e-9);
        assert!(w.top_site_within(1, State::IoWait, 1_000).is_none(), "no site fits: none named");
    }

    /// Generated code is the program's unless it is the runtime's own; a stack of it is sited
    /// like a native one: the program's innermost function and its caller.
    /// Code no symbol or map names is one site, `[unknown]`, never an address, and a finding
    /// names no code when it is the top site (rather than the next, a small share).
    #[test]
    fn unnamed_code_is_one_site_that_no_finding_names() {
        let unknown = |ip: u64| Frame::unknown(format!("[unknown] {ip:#x}"));
        let libjvm = |f: &str| Frame::native(f.into(), "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so".into());
        let a: Stack = vec![unknown(0x7f00_0000_1000), unknown(0x7f00_0000_2000), libjvm("JavaCalls::call_helper")].into();
        let b: Stack = vec![unknown(0x7f00_0000_3000), libjvm("JavaCalls::call_helper")].into();
        assert_eq!(site_parts(&a), (UNNAMED.to_string(), None));
        assert_eq!(site_parts(&b), (UNNAMED.to_string(), None));
        let named: Stack =
            vec![Frame::jit("fixengine.Main.work".into()), unknown(0x7f00_0000_4000), libjvm("JavaCalls::call_helper")].into();
        assert_eq!(site_parts(&named).0, "fixengine.Main.work", "the JVM's own frames are the runtime's, never the caller named");
        let mut w = WaitStacks::default();
        let key = |stack: &Stack| Key { victim: 1, blamed: 0, state: State::Running, role: Role::Busy, stack: stack.clone() };
        w.add(key(&a), 600);
        w.add(key(&b), 300);
        w.add(key(&named), 100);
        assert!(w.top_site(1, State::Running, Role::Busy, None).is_none());
        w.add(key(&named), 1000);
        let top = w.top_site(1, State::Running, Role::Busy, None).unwrap();
        assert_eq!((top.text.as_str(), top.share), ("fixengine.Main.work", 0.55));
    }

    #[test]
    fn jit_frames_are_sited_like_the_programs_code() {
        let node = [
            Frame::jit("JS:*crunchTheLedger [eval]:2:25".into()),
            Frame::jit("JS:^again [eval]:9:16".into()),
            Frame::jit("JS:^processImmediate node:internal/timers:438:28".into()),
            Frame::native("Builtins_JSEntry".into(), "/usr/bin/node".into()),
        ];
        assert_eq!(site_of(&node), "JS:*crunchTheLedger [eval]:2:25 ← JS:^again [eval]:9:16");
        assert!(node[2].is_library(), "Node.js's internals");
        let jvm = [
            Frame::jit("Interpreter".into()),
            Frame::jit("StubRoutines (1)".into()),
            Frame::jit("com.example.Orders.fromApp".into()),
            Frame::jit("java.lang.Thread.run".into()),
        ];
        assert!(jvm[0].is_library() && jvm[1].is_library() && jvm[3].is_library());
        assert!(!jvm[2].is_library());
        assert_eq!(site_of(&jvm), "com.example.Orders.fromApp");
    }

    #[test]
    fn a_runtimes_native_code_is_the_call_the_application_made_not_its_code() {
        // V8's C++ and builtins live in the `node` executable (no system object): with the
        // application's JavaScript on the stack they are the runtime's, and the site is the
        // JavaScript function that called into them, the builtin it called and the C++ it was in
        let node = "/usr/bin/node";
        let stack = [
            Frame::native("v8::internal::JsonStringifier::SerializeString".into(), node.into()),
            Frame::native("v8::internal::JsonStringifier::Serialize_".into(), node.into()),
            Frame::native("v8::internal::Builtin_JsonStringify".into(), node.into()),
            Frame::native("Builtins_CEntry_Return1_ArgvOnStack_BuiltinExit".into(), node.into()),
            Frame::jit("JS:^renderReport /srv/app.js:3:22".into()),
            Frame::jit("JS:^ /srv/app.js:4:19".into()),
            Frame::jit("JS:^emit node:events:471:44".into()),
            Frame::native("Builtins_JSEntry".into(), node.into()),
            Frame::native("uv_run".into(), node.into()),
        ];
        assert_eq!(
            site_parts(&stack),
            (
                "v8::internal::Builtin_JsonStringify ← JS:^renderReport /srv/app.js:3:22 ← JS:^ /srv/app.js:4:19".into(),
                Some("v8::internal::JsonStringifier::SerializeString".into())
            )
        );
        // a JVM: the runtime's C++ the method called is the call, its interpreter no call
        let libjvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
        let jvm = [
            Frame::native("ObjectMonitor::ExitEpilog".into(), libjvm.into()),
            Frame::native("InterpreterRuntime::monitorexit".into(), libjvm.into()),
            Frame::jit("Interpreter".into()),
            Frame::jit("fixengine.Main$OrderBook.match".into()),
            Frame::jit("fixengine.Main$1.fromApp".into()),
        ];
        assert_eq!(
            site_parts(&jvm),
            ("InterpreterRuntime::monitorexit ← fixengine.Main$OrderBook.match ← fixengine.Main$1.fromApp".into(), None)
        );
        // without the application's code, the same executable is the program's own code
        assert_eq!(site_of(&stack[7..]), "Builtins_JSEntry (node) ← uv_run");
    }

    #[test]
    fn a_native_site_reaches_the_callers_that_say_what_was_waited_for() {
        // PostgreSQL's lock wait: the latch every sleep goes through, then the lock; frames no
        // symbol names (static functions of a stripped binary) are passed over
        let pg = "/usr/lib/postgresql/15/bin/postgres";
        let frames = |names: &[&str]| -> Vec<Frame> {
            let mut v = vec![Frame::native("epoll_wait".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into())];
            v.extend(names.iter().map(|n| Frame::native((*n).into(), pg.into())));
            v.push(Frame::native("__libc_start_main".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into()));
            v
        };
        let lock = frames(&[
            "WaitEventSetWait",
            "WaitLatch",
            "ProcSleep",
            "[postgres+0x45d95c]",
            "LockAcquireExtended",
            "XactLockTableWait",
            "main",
        ]);
        assert_eq!(site_of(&lock), "epoll_wait ← WaitEventSetWait (postgres) ← WaitLatch ← ProcSleep ← LockAcquireExtended");
        let sleep = frames(&["WaitEventSetWait", "WaitLatch", "pg_sleep", "ExecInterpExpr", "main"]);
        assert_eq!(site_of(&sleep), "epoll_wait ← WaitEventSetWait (postgres) ← WaitLatch ← pg_sleep ← ExecInterpExpr");
        // a short program: its frames up to the C library's thread start
        let c = vec![
            Frame::native("pthread_mutex_lock".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            Frame::native("take".into(), "/srv/prog".into()),
            Frame::native("append_record".into(), "/srv/prog".into()),
            Frame::native("start_thread".into(), "/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
            Frame::native("worker".into(), "/srv/prog".into()),
        ];
        assert_eq!(site_of(&c), "pthread_mutex_lock ← take (prog) ← append_record");
    }
}
