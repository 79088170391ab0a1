//! Python thread names (`threading.Thread.name`), read from the target's
//! memory: `sys.modules["threading"]._active` maps each thread's ident
//! (`pthread_self()`) to its Thread object, whose `_name` is a str.
//! Every read is bounded and checked: the memory belongs to the target.
use std::collections::HashMap;

use anyhow::{bail, Context, Result};

use super::layout::{InstanceDict, Objects};
use super::memory::{at, before, Budget, Memory, Process};

const MAX_ENTRIES: u64 = 1 << 16;
const MAX_NAME: u64 = 256;
/// What one reading of the names may cost: a few reads per module and ~15 per
/// thread, so thousands of threads fit; a crafted structure (every thread's
/// class with 65536 attributes) stops here instead of making billions of reads.
const MAX_READS: u64 = 1 << 18;
const MAX_BYTES: u64 = 64 << 20;

fn le64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o.checked_add(8)?)?.try_into().ok()?))
}

/// A str's `state` word, whose bits from `kind_shift` up are `kind:3`,
/// `compact:1`, `ascii:1` (2 on default builds, 8 on free-threaded ones):
/// (bytes per character, ASCII), or None when it is not a compact str.
pub(crate) fn compact_str_state(state: u32, kind_shift: u32) -> Option<(u32, bool)> {
    let bits = state.checked_shr(kind_shift).unwrap_or(0);
    let kind = bits & 7;
    ((bits >> 3) & 1 == 1 && matches!(kind, 1 | 2 | 4)).then_some((kind, (bits >> 4) & 1 == 1))
}

/// The characters of a compact str, `kind` bytes each (UCS-1, -2, -4).
pub(crate) fn decode_str(buf: &[u8], kind: u32) -> String {
    match kind {
        1 => buf.iter().map(|b| *b as char).collect(),
        2 => buf.chunks_exact(2).filter_map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]).into())).collect(),
        _ => buf.chunks_exact(4).filter_map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
    }
}

struct Reader<'a> {
    m: &'a dyn Memory,
    o: &'a Objects,
}

impl Reader<'_> {
    /// The pointer at `base + off`.
    fn ptr(&self, base: u64, off: u64) -> Result<u64> {
        self.m.read_ptr(at(base, off)?)
    }

    /// (key, value) pointers of a dict's keys object, values from `values` when split.
    fn entries(&self, keys: u64, values: Option<u64>) -> Result<Vec<(u64, u64)>> {
        let (nentries, first, stride, key_at) = if self.o.keys_v311 {
            let log2_index_bytes = self.m.read_u8(at(keys, 9)?)?;
            let kind = self.m.read_u8(at(keys, 10)?)?;
            let n = self.m.read_u64(at(keys, 24)?)?;
            if log2_index_bytes > 40 {
                bail!("implausible dict index of 2^{log2_index_bytes} bytes");
            }
            let general = kind == 0;
            (n, at(at(keys, 32)?, 1 << log2_index_bytes)?, if general { 24 } else { 16 }, if general { 8 } else { 0 })
        } else {
            let size = self.m.read_u64(at(keys, 8)?)?;
            let width = match size {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                0x1_0000..=0xffff_ffff => 4,
                _ => 8,
            };
            if size > 1 << 32 {
                bail!("implausible dict of {size} slots");
            }
            (self.m.read_u64(at(keys, 32)?)?, at(at(keys, 40)?, size * width)?, 24, 8)
        };
        if nentries > MAX_ENTRIES {
            bail!("implausible dict of {nentries} entries");
        }
        // the entry table (and a split dict's values) in one read each
        let table = self.m.read_bytes(first, nentries * stride, MAX_ENTRIES * 24)?;
        let values = match values {
            Some(v) => Some(self.m.read_bytes(at(v, self.o.values_offset)?, nentries * 8, MAX_ENTRIES * 8)?),
            None => None,
        };
        let mut out = Vec::with_capacity(nentries as usize);
        for i in 0..nentries as usize {
            let e = i * stride as usize + key_at;
            let Some(key) = le64(&table, e) else { break };
            if key == 0 {
                continue; // deleted entry
            }
            let value = match &values {
                Some(v) => le64(v, i * 8),
                None => le64(&table, e + 8),
            };
            let Some(value) = value else { break };
            out.push((key, value));
        }
        Ok(out)
    }

    fn dict_items(&self, dict: u64) -> Result<Vec<(u64, u64)>> {
        let keys = self.ptr(dict, self.o.ma_keys)?;
        let values = self.ptr(dict, self.o.ma_values)?;
        self.entries(keys, (values != 0).then_some(values))
    }

    fn lookup(&self, items: Vec<(u64, u64)>, name: &str) -> Option<u64> {
        items.into_iter().find(|(k, _)| self.str(*k).is_ok_and(|s| s == name)).map(|(_, v)| v)
    }

    /// A compact str object's text.
    fn str(&self, o: u64) -> Result<String> {
        // length @16, hash @24, state @32
        let head = self.m.read_bytes(at(o, 16)?, 20, 20)?;
        let len = le64(&head, 0).context("short str header")?;
        let state = u32::from_le_bytes(head[16..20].try_into()?);
        let Some((kind, ascii)) = compact_str_state(state, 2).filter(|_| len <= MAX_NAME) else {
            bail!("not a compact str");
        };
        let data = at(o, if ascii { self.o.ascii_size } else { self.o.compact_size })?;
        let buf = self.m.read_bytes(data, len * kind as u64, MAX_NAME * 4)?;
        Ok(decode_str(&buf, kind))
    }

    /// A non-negative int of up to 64 bits (thread idents).
    fn int(&self, o: u64) -> Result<u64> {
        let raw = self.m.read_u64(at(o, 16)?)?;
        let ndigits = if self.o.long_tagged {
            if raw & 3 == 2 {
                bail!("negative int");
            }
            raw >> 3
        } else {
            if (raw as i64) < 0 {
                bail!("negative int");
            }
            raw
        };
        if ndigits > 3 {
            bail!("int too large");
        }
        let digits = self.m.read_bytes(at(o, 24)?, ndigits * 4, 12)?;
        let v = digits
            .chunks_exact(4)
            .rev()
            .fold(0u128, |v, d| (v << 30) | (u32::from_le_bytes([d[0], d[1], d[2], d[3]]) & 0x3fff_ffff) as u128);
        u64::try_from(v).context("int too large")
    }

    /// An attribute stored in a Python-class instance's dict or values.
    fn attr(&self, obj: u64, name: &str) -> Result<Option<u64>> {
        let ty = self.ptr(obj, self.o.ob_type)?;
        let flags = self.ptr(ty, self.o.tp_flags)?;
        let from_values = |values: u64| -> Result<Option<u64>> {
            let keys = self.ptr(ty, self.o.ht_cached_keys)?;
            Ok(self.lookup(self.entries(keys, Some(values))?, name))
        };
        match self.o.instance_dict {
            InstanceDict::DictOffset => {
                let off = self.ptr(ty, self.o.tp_dictoffset)? as i64;
                if off <= 0 {
                    bail!("no instance dict");
                }
                let dict = self.ptr(obj, off as u64)?;
                if dict == 0 {
                    return Ok(None);
                }
                Ok(self.lookup(self.dict_items(dict)?, name))
            }
            _ if flags & self.o.managed_dict_flag == 0 => bail!("not a managed-dict instance"),
            InstanceDict::Managed311 => {
                let dict = self.m.read_ptr(before(obj, 24)?)?;
                if dict != 0 {
                    return Ok(self.lookup(self.dict_items(dict)?, name));
                }
                let values = self.m.read_ptr(before(obj, 32)?)?;
                if values == 0 {
                    return Ok(None);
                }
                from_values(values)
            }
            InstanceDict::Tagged312 => {
                let dv = self.m.read_ptr(before(obj, 24)?)?;
                if dv & 1 == 1 {
                    // stored as `values - 1` (_PyDictOrValues_SetValues)
                    from_values(at(dv, 1)?)
                } else if dv != 0 {
                    Ok(self.lookup(self.dict_items(dv)?, name))
                } else {
                    Ok(None)
                }
            }
            InstanceDict::Inline313 => {
                let dict = self.m.read_ptr(before(obj, 24)?)?;
                if dict != 0 {
                    return Ok(self.lookup(self.dict_items(dict)?, name));
                }
                if flags & self.o.inline_values_flag == 0 {
                    return Ok(None);
                }
                let values = at(obj, self.ptr(ty, self.o.tp_basicsize)?)?;
                if self.m.read_u8(at(values, 3)?)? == 0 {
                    return Ok(None); // not valid: a dict was materialized
                }
                from_values(values)
            }
        }
    }
}

/// `threading` thread names by ident (`pthread_self()`), read from process `pid`.
pub fn thread_names(pid: u32, runtime: u64, o: &Objects) -> Result<HashMap<u64, String>> {
    read_thread_names(&Process::new(pid), runtime, o)
}

/// The same from any memory (a recorded image in tests). At most
/// `MAX_READS` reads and `MAX_BYTES` bytes: past them, the names found so far.
pub fn read_thread_names(mem: &dyn Memory, runtime: u64, o: &Objects) -> Result<HashMap<u64, String>> {
    let budget = Budget::new(mem, MAX_READS, MAX_BYTES);
    let r = Reader { m: &budget, o };
    let interp = r.ptr(runtime, o.interp_head)?;
    let modules = if interp == 0 { 0 } else { r.ptr(interp, o.interp_modules)? };
    if modules == 0 {
        bail!("interpreter not initialised");
    }
    let Some(threading) = r.lookup(r.dict_items(modules)?, "threading") else {
        return Ok(HashMap::new()); // threading never imported: only the main thread
    };
    let mdict = r.ptr(threading, o.md_dict)?;
    let active = r.lookup(r.dict_items(mdict)?, "_active").context("threading._active not found")?;
    let mut out = HashMap::new();
    for (k, thread) in r.dict_items(active)? {
        if budget.exhausted() {
            log::debug!("thread names: read budget exhausted after {} names", out.len());
            break;
        }
        let (Ok(ident), Ok(Some(name))) = (r.int(k), r.attr(thread, "_name")) else { continue };
        if let Ok(name) = r.str(name) {
            out.insert(ident, name);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::python::fixtures::{self, threading_image};
    use crate::python::layout::LAYOUTS;
    use crate::python::memory::{Recorded, Recorder};

    const THREADS: &[(u64, &str)] = &[
        (0x7f3a_1c00_0740, "MainThread"),
        (0x7f3a_1b5f_f6c0, "ingest"),
        (0x7f3a_1adf_e6c0, "R\u{fc}hrwerk"),    // latin-1, not ASCII
        (0x7f3a_1a5f_d6c0, "\u{7dda}\u{7a0b}"), // UCS-2
        (1, "\u{1f9f5}"),                       // UCS-4
        (0, "zero"),
        (u64::MAX, "three digits"),
    ];

    /// Versions whose thread names are read, from their real interpreters.
    const MINORS: std::ops::RangeInclusive<u32> = 8..=15;

    /// 3.8–3.12 from the table; 3.13+ from the debug offsets recorded from the interpreter.
    fn objects(minor: u32) -> Objects {
        let recorded = match minor {
            13 => "3.13.0",
            14 => "3.14.7",
            15 => "3.15.0rc2",
            _ => return crate::python::layout::layout(minor, false).and_then(|l| l.objects).unwrap(),
        };
        let path = format!("{}/formats/testdata/debug_offsets/{recorded}.bin", crate::manifest_dir());
        let o = crate::python::debug_offsets::DebugOffsets::parse(&std::fs::read(path).unwrap()).unwrap();
        crate::python::layout::from_debug_offsets(&o).objects.unwrap()
    }

    fn expected(threads: &[(u64, &str)]) -> HashMap<u64, String> {
        threads.iter().map(|(i, n)| (*i, n.to_string())).collect()
    }

    /// Every version's object layout, on an image built by hand from it:
    /// sys.modules -> threading -> _active -> Thread -> _name.
    #[test]
    fn names_from_hand_built_images_of_every_version() {
        for o in LAYOUTS.iter().filter_map(|l| l.objects).chain((13..=15).filter_map(crate::python::layout::debug_objects)) {
            let (im, runtime, _) = threading_image(o, THREADS);
            assert_eq!(read_thread_names(&im.mem, runtime, &o).unwrap(), expected(THREADS), "{o:?}");
        }
    }

    #[test]
    fn no_threading_module_no_names() {
        let o = objects(12);
        let mut im = fixtures::Image::new(o);
        let none = im.alloc(&[0; 16]);
        let modules = im.str_dict(&[("sys", none)]);
        let runtime = im.runtime(modules);
        assert!(read_thread_names(&im.mem, runtime, &o).unwrap().is_empty());
        // an interpreter not initialised yet
        let runtime = im.runtime(0);
        assert!(read_thread_names(&im.mem, runtime, &o).is_err());
    }

    /// A `_PyRuntime` address near the top of the address space: adding the
    /// interpreter offset must be an error, not a wrap to a low address that
    /// happens to hold the real pointer.
    #[test]
    fn a_runtime_that_wraps_is_an_error() {
        for minor in [11, 12] {
            let o = objects(minor);
            let (mut im, runtime, _) = threading_image(o, THREADS);
            let interp = im.mem.read_ptr(runtime + o.interp_head).unwrap();
            im.write_u64(0x8, interp);
            let wraps = 0x8u64.wrapping_sub(o.interp_head);
            assert_eq!(wraps.wrapping_add(o.interp_head), 0x8);
            assert!(read_thread_names(&im.mem, wraps, &o).is_err(), "3.{minor}");
            assert!(read_thread_names(&im.mem, u64::MAX, &o).is_err());
            assert!(read_thread_names(&im.mem, 0, &o).is_err());
        }
    }

    /// Hostile thread entries are skipped, the others named.
    #[test]
    fn hostile_threads_are_skipped() {
        for minor in [11, 12] {
            let o = objects(minor);
            let (mut im, runtime, objs) = threading_image(o, &THREADS[..2]);
            let names = |im: &fixtures::Image| read_thread_names(&im.mem, runtime, &o).unwrap();
            // a name whose length says 10 but whose text ends after 4 bytes
            let short = im.str("abcd");
            im.write_u64(short + 16, 10);
            // a name of u64::MAX characters
            let huge = im.str("abcd");
            im.write_u64(huge + 16, u64::MAX);
            // a Thread whose _name is the Thread itself (not a str)
            let attrs = ["_target", "_name", "_args", "_daemonic"];
            let class = im.mem.read_ptr(objs[0] + 8).unwrap();
            let truncated = im.instance(class, &attrs, &[0, short, 0, 0]);
            let enormous = im.instance(class, &attrs, &[0, huge, 0, 0]);
            let selfish = im.instance(class, &attrs, &[0, 0, 0, 0]);
            let self_name = match minor {
                11 => im.mem.read_ptr(selfish - 32).unwrap(),
                _ => im.mem.read_ptr(selfish - 24).unwrap() + 1,
            };
            im.write_u64(self_name + 8, selfish);
            // a Thread at address 8: its managed dict pointer (obj - 24) would
            // wrap to the top of the address space, where a real dict pointer waits
            let named = im.mem.read_bytes(objs[1] - 32, 16, 16).unwrap();
            im.write(8u64.wrapping_sub(32), &named);
            im.write(8, &im.mem.read_bytes(objs[1], 16, 16).unwrap());
            // an ident of four 30-bit digits (too large), then a negative one
            let big = im.int(1);
            im.write_u64(big + 16, if o.long_tagged { 4 << 3 } else { 4 });
            let negative = im.int(5);
            im.write_u64(negative + 16, if o.long_tagged { 1 << 3 | 2 } else { u64::MAX });
            let mut entries = vec![];
            for (ident, thread) in [(7, truncated), (8, enormous), (9, selfish), (10, 8), (0, objs[0])] {
                entries.push((im.int(ident), thread));
            }
            entries.push((big, objs[0]));
            entries.push((negative, objs[0]));
            entries.push((im.int(0x7f3a_1b5f_f6c0), objs[1]));
            let active = im.dict(&entries, true);
            set_active(&mut im, runtime, active);
            assert_eq!(names(&im), expected(&[(0, "MainThread"), (0x7f3a_1b5f_f6c0, "ingest")]), "3.{minor}");
        }
    }

    /// `sys.modules` of an image.
    fn modules_of(im: &fixtures::Image, runtime: u64) -> u64 {
        im.mem.read_ptr(im.mem.read_ptr(runtime + im.o.interp_head).unwrap() + im.o.interp_modules).unwrap()
    }

    /// Point `threading._active` of an image at another dict.
    fn set_active(im: &mut fixtures::Image, runtime: u64, active: u64) {
        let (m, o) = (&im.mem, &im.o);
        let r = Reader { m, o };
        let threading = r.lookup(r.dict_items(modules_of(im, runtime)).unwrap(), "threading").unwrap();
        let mdict = m.read_ptr(threading + o.md_dict).unwrap();
        // the value slot of "_active" in that combined, str-keyed dict
        let keys = m.read_ptr(mdict + o.ma_keys).unwrap();
        let (first, stride) = if o.keys_v311 { (keys + 40, 16) } else { (keys + 56, 24) };
        let key = (0..).map(|i| first + i * stride).find(|k| r.str(m.read_ptr(*k).unwrap()).is_ok_and(|s| s == "_active")).unwrap();
        im.write_u64(key + 8, active);
    }

    /// Sizes and counts read from the target are bounded before use.
    #[test]
    fn huge_dicts_are_errors() {
        let o = objects(12);
        let (mut im, runtime, _) = threading_image(o, THREADS);
        let modules = modules_of(&im, runtime);
        let keys = im.mem.read_ptr(modules + o.ma_keys).unwrap();
        let good = im.mem.read_bytes(keys, 32, 32).unwrap();
        im.write_u64(keys + 24, 1 << 40); // dk_nentries
        assert!(read_thread_names(&im.mem, runtime, &o).is_err());
        im.write(keys, &good);
        im.write(keys + 9, &[200]); // dk_log2_index_bytes
        assert!(read_thread_names(&im.mem, runtime, &o).is_err());
        im.write(keys, &good);
        im.write_u64(modules + o.ma_keys, u64::MAX - 8); // a keys pointer whose fields wrap
        assert!(read_thread_names(&im.mem, runtime, &o).is_err());
        im.write_u64(modules + o.ma_keys, modules); // a dict that is its own keys object
        assert!(read_thread_names(&im.mem, runtime, &o).map_or(true, |n| n.is_empty()));
        // 3.8's keys format: a dk_size that would push the entries past 2^64
        let o = objects(10);
        let (mut im, runtime, _) = threading_image(o, THREADS);
        let keys = im.mem.read_ptr(modules_of(&im, runtime) + o.ma_keys).unwrap();
        im.write_u64(keys + 8, u64::MAX / 2);
        assert!(read_thread_names(&im.mem, runtime, &o).is_err());
    }

    /// Counts reads (to check the budget).
    struct Counting<'a>(&'a dyn Memory, Cell<u64>);

    impl Memory for Counting<'_> {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
            self.1.set(self.1.get() + 1);
            self.0.read(addr, buf)
        }
    }

    /// 65536 threads whose class has 65536 attributes, none of them `_name`:
    /// billions of reads without a budget; with it, at most `MAX_READS`.
    #[test]
    fn a_quadratic_structure_stops_at_the_budget() {
        let o = objects(12);
        let (mut im, runtime, objs) = threading_image(o, &THREADS[..1]);
        let nope = im.str("_nope");
        let n = MAX_ENTRIES as usize;
        let keys = im.keys(&vec![(nope, 0); n], false, true);
        let class = im.mem.read_ptr(objs[0] + 8).unwrap();
        im.write_u64(class + o.ht_cached_keys, keys);
        let values = im.alloc(&vec![0u8; n * 8]);
        im.write_u64(objs[0] - 24, values - 1);
        let ident = im.int(42);
        let active = im.dict(&vec![(ident, objs[0]); n], true);
        set_active(&mut im, runtime, active);
        let counted = Counting(&im.mem, Cell::new(0));
        assert!(read_thread_names(&counted, runtime, &o).unwrap().is_empty());
        assert!(counted.1.get() <= MAX_READS, "{}", counted.1.get());
    }

    const NAMED: [&str; 5] = ["MainThread", "R\u{fc}hrwerk", "ingest", "processor", "\u{7dda}\u{7a0b}"];

    fn sorted(names: &HashMap<u64, String>) -> Vec<&str> {
        let mut v: Vec<&str> = names.values().map(String::as_str).collect();
        v.sort();
        v
    }

    /// Images recorded from the interpreters (pyenv's, and 3.14 and 3.15 built by `make setup`) running
    /// `fixtures::NAMED_THREADS` (committed in `testdata/`; rewritten by
    /// `WAITMETER_RECORD_FIXTURES=1 cargo test names_recorded_from_real_interpreters`).
    #[test]
    fn names_from_images_recorded_from_real_interpreters() {
        let dir = std::path::Path::new(&crate::manifest_dir()).join("src/python/testdata");
        for minor in MINORS {
            let data = std::fs::read(dir.join(format!("threads-3.{minor}.img"))).unwrap();
            let (runtime, image) = fixtures::load_image(&data);
            assert_eq!(sorted(&read_thread_names(&image, runtime, &objects(minor)).unwrap()), NAMED, "3.{minor}");
        }
    }

    /// Real interpreters, recorded: the names read live are the names the
    /// program gave its threads, and the recorded image (every read, replayed)
    /// gives the same answer without the process.
    #[test]
    fn names_recorded_from_real_interpreters() {
        if unsafe { libc::geteuid() } != 0 {
            waitmeter_formats::testing::skip("reading another process' memory needs root here");
            return;
        }
        let mut ran = 0;
        for minor in MINORS {
            let Some(py) = fixtures::python(minor) else {
                waitmeter_formats::testing::skip(&format!("3.{minor}: no pyenv or .pythons build here"));
                continue;
            };
            let child = fixtures::spawn_ready(py.to_str().unwrap(), &["-c", fixtures::NAMED_THREADS], &[]).unwrap();
            let p = crate::python::detect(child.pid()).unwrap().expect("a Python process");
            let o = p.layout.and_then(|l| l.objects).unwrap();
            let live = Process::new(child.pid());
            let rec = Recorder { inner: &live, image: RefCell::new(Recorded::default()) };
            let names = read_thread_names(&rec, p.runtime, &o).unwrap();
            drop(child);
            assert_eq!(sorted(&names), NAMED, "3.{minor}");
            let image = rec.image.into_inner();
            let bytes: usize = image.regions().map(|(_, b)| b.len()).sum();
            eprintln!("3.{minor}: {} regions, {bytes} bytes recorded", image.regions().count());
            assert_eq!(read_thread_names(&image, p.runtime, &o).unwrap(), names, "3.{minor} replayed");
            if std::env::var_os("WAITMETER_RECORD_FIXTURES").is_some() {
                let dir = std::path::Path::new(&crate::manifest_dir()).join("src/python/testdata");
                std::fs::create_dir_all(&dir).unwrap();
                fixtures::save_image(&dir.join(format!("threads-3.{minor}.img")), p.runtime, &image).unwrap();
            }
            ran += 1;
        }
        assert!(ran > 0, "no pyenv interpreter to record");
    }
}
