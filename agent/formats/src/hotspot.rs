//! HotSpot's own description of its data structures (VMStructs), read from a running JVM's
//! memory, and what waitmeter reads with it: the interpreter's code range, and the name of the
//! Java method an interpreted frame runs (`fixengine.OrderBook.match`).
//!
//! A JVM's perf map names its compiled methods, but interpreted frames all run the same code
//! (the template interpreter): the map can only call them `Interpreter`. The method is in the
//! frame: HotSpot's x86-64 interpreter keeps the `Method*` at fp - 3 words
//! (`frame::interpreter_frame_method_offset`, JDK 8 to 21). From a `Method*`, the name is
//! `Method::_constMethod` → `ConstMethod::_constants` (the class's constant pool) and
//! `ConstMethod::_name_index` (the method's name, a `Symbol*` in that pool) and
//! `ConstantPool::_pool_holder` → `Klass::_name` (the class). Every offset comes from the
//! tables libjvm exports for the serviceability agent (`gHotSpotVMStructs`, `gHotSpotVMTypes`
//! and the entry layouts beside them), as async-profiler and the OpenTelemetry profiler read
//! them: nothing is assumed of a JDK's build but the frame slot above.
//!
//! Everything read is the target's (hostile): a read that fails, a string past its bound or not
//! UTF-8, a name with characters no class or method has, is `None`, never a guess.
use anyhow::{bail, Context, Result};

/// The target's memory.
pub trait Memory {
    /// Fill `buf` from address `addr`; false when any of it cannot be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Entries of a VMStructs table read at most (JDK 17 has ~2,900 fields, ~700 types).
const MAX_ENTRIES: usize = 16384;
/// Longest type or field name compared (the longest are ~60 bytes).
const MAX_NAME: usize = 128;
/// Longest class or method name kept (a Symbol is at most 65,535 bytes).
pub const MAX_SYMBOL: usize = 1024;
/// Where x86-64 HotSpot's interpreter keeps a frame's `Method*`, from its frame pointer.
pub const INTERPRETER_FRAME_METHOD: i64 = -3 * 8;

/// The addresses in the target of libjvm's exported globals that describe the tables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Globals {
    /// `gHotSpotVMStructs`, `gHotSpotVMTypes`: each holds the address of its table
    pub structs: u64,
    pub types: u64,
    /// `gHotSpotVMStructEntry{TypeName,FieldName,IsStatic,Offset,Address}Offset`, `...ArrayStride`
    pub struct_type_name: u64,
    pub struct_field_name: u64,
    pub struct_is_static: u64,
    pub struct_offset: u64,
    pub struct_address: u64,
    pub struct_stride: u64,
    /// `gHotSpotVMTypeEntry{TypeName,Size}Offset`, `...ArrayStride`
    pub type_type_name: u64,
    pub type_size: u64,
    pub type_stride: u64,
}

impl Globals {
    /// The exported symbols the globals are, by name (resolve each to its address in the target).
    pub const SYMBOLS: [&'static str; 11] = [
        "gHotSpotVMStructs",
        "gHotSpotVMTypes",
        "gHotSpotVMStructEntryTypeNameOffset",
        "gHotSpotVMStructEntryFieldNameOffset",
        "gHotSpotVMStructEntryIsStaticOffset",
        "gHotSpotVMStructEntryOffsetOffset",
        "gHotSpotVMStructEntryAddressOffset",
        "gHotSpotVMStructEntryArrayStride",
        "gHotSpotVMTypeEntryTypeNameOffset",
        "gHotSpotVMTypeEntrySizeOffset",
        "gHotSpotVMTypeEntryArrayStride",
    ];

    /// From the addresses of `SYMBOLS`, in that order.
    pub fn from_addresses(a: [u64; 11]) -> Globals {
        Globals {
            structs: a[0],
            types: a[1],
            struct_type_name: a[2],
            struct_field_name: a[3],
            struct_is_static: a[4],
            struct_offset: a[5],
            struct_address: a[6],
            struct_stride: a[7],
            type_type_name: a[8],
            type_size: a[9],
            type_stride: a[10],
        }
    }
}

/// The offsets and sizes waitmeter reads a method's name and the interpreter's range with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub method_const_method: u64,
    pub const_method_constants: u64,
    pub const_method_name_index: u64,
    pub constant_pool_holder: u64,
    /// `sizeof(ConstantPool)`: the pool's slots follow it, 8 bytes each
    pub constant_pool_size: u64,
    pub klass_name: u64,
    pub symbol_length: u64,
    pub symbol_body: u64,
    /// the address of `AbstractInterpreter::_code` (a static: a `StubQueue*`)
    pub interpreter_code: u64,
    pub stub_queue_buffer: u64,
    pub stub_queue_limit: u64,
}

fn u64_at(mem: &dyn Memory, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read(addr, &mut b).then(|| u64::from_le_bytes(b))
}

fn u32_at(mem: &dyn Memory, addr: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    mem.read(addr, &mut b).then(|| u32::from_le_bytes(b))
}

fn u16_at(mem: &dyn Memory, addr: u64) -> Option<u16> {
    let mut b = [0u8; 2];
    mem.read(addr, &mut b).then(|| u16::from_le_bytes(b))
}

/// A NUL-terminated string of at most `MAX_NAME` bytes (None: longer, unreadable, not UTF-8).
fn c_string(mem: &dyn Memory, addr: u64) -> Option<String> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 32];
    while out.len() < MAX_NAME {
        let at = addr.checked_add(out.len() as u64)?;
        // a string may end just before unmapped memory: read by smaller steps when a chunk fails
        if !mem.read(at, &mut chunk) {
            let mut b = [0u8; 1];
            if !mem.read(at, &mut b) {
                return None;
            }
            if b[0] == 0 {
                return String::from_utf8(out).ok();
            }
            out.push(b[0]);
            continue;
        }
        if let Some(n) = chunk.iter().position(|c| *c == 0) {
            out.extend_from_slice(&chunk[..n]);
            return String::from_utf8(out).ok();
        }
        out.extend_from_slice(&chunk);
    }
    None
}

/// The layout, from the tables the globals describe.
pub fn layout(mem: &dyn Memory, g: &Globals) -> Result<Layout> {
    let word = |a: u64, what: &str| u64_at(mem, a).with_context(|| format!("cannot read {what}"));
    let structs = word(g.structs, "gHotSpotVMStructs")?;
    let (tn, fname, st, off, addr, stride) = (
        word(g.struct_type_name, "the struct entry's type name offset")?,
        word(g.struct_field_name, "the struct entry's field name offset")?,
        word(g.struct_is_static, "the struct entry's is-static offset")?,
        word(g.struct_offset, "the struct entry's offset offset")?,
        word(g.struct_address, "the struct entry's address offset")?,
        word(g.struct_stride, "the struct entries' stride")?,
    );
    if stride == 0 || stride > 4096 || [tn, fname, st, off, addr].iter().any(|o| *o >= stride) {
        bail!("implausible VMStructs entry layout (stride {stride})");
    }
    let wanted: [(&str, &str); 10] = [
        ("Method", "_constMethod"),
        ("ConstMethod", "_constants"),
        ("ConstMethod", "_name_index"),
        ("ConstantPool", "_pool_holder"),
        ("Klass", "_name"),
        ("Symbol", "_length"),
        ("Symbol", "_body"),
        ("AbstractInterpreter", "_code"),
        ("StubQueue", "_stub_buffer"),
        ("StubQueue", "_buffer_limit"),
    ];
    let mut found = [None::<u64>; 10];
    for i in 0..MAX_ENTRIES as u64 {
        let e =
            structs.checked_add(i.checked_mul(stride).context("table past the address space")?).context("table past the address space")?;
        let type_ptr = word(e + tn, "a struct entry")?;
        if type_ptr == 0 {
            break; // the table's end
        }
        let field_ptr = word(e + fname, "a struct entry")?;
        let (Some(ty), Some(field)) = (c_string(mem, type_ptr), c_string(mem, field_ptr)) else { continue };
        let Some(k) = wanted.iter().position(|(t, f)| *t == ty && *f == field) else { continue };
        let is_static = u32_at(mem, e + st).context("cannot read a struct entry")? != 0;
        found[k] = Some(if is_static { word(e + addr, "a static field's address")? } else { word(e + off, "a field's offset")? });
    }
    let size = type_size(mem, g, "ConstantPool")?;
    let get = |k: usize| found[k].with_context(|| format!("VMStructs has no {}::{}", wanted[k].0, wanted[k].1));
    let l = Layout {
        method_const_method: get(0)?,
        const_method_constants: get(1)?,
        const_method_name_index: get(2)?,
        constant_pool_holder: get(3)?,
        constant_pool_size: size,
        klass_name: get(4)?,
        symbol_length: get(5)?,
        symbol_body: get(6)?,
        interpreter_code: get(7)?,
        stub_queue_buffer: get(8)?,
        stub_queue_limit: get(9)?,
    };
    // field offsets of objects are small; anything else is not a HotSpot table
    let offsets = [
        l.method_const_method,
        l.const_method_constants,
        l.const_method_name_index,
        l.constant_pool_holder,
        l.constant_pool_size,
        l.klass_name,
        l.symbol_length,
        l.symbol_body,
        l.stub_queue_buffer,
        l.stub_queue_limit,
    ];
    if offsets.iter().any(|o| *o > 4096) {
        bail!("implausible VMStructs offsets");
    }
    Ok(l)
}

/// The size of a type by its VMTypes entry.
fn type_size(mem: &dyn Memory, g: &Globals, name: &str) -> Result<u64> {
    let word = |a: u64| u64_at(mem, a).context("cannot read VMTypes");
    let (types, tn, sz, stride) = (word(g.types)?, word(g.type_type_name)?, word(g.type_size)?, word(g.type_stride)?);
    if stride == 0 || stride > 4096 || tn >= stride || sz >= stride {
        bail!("implausible VMTypes entry layout (stride {stride})");
    }
    for i in 0..MAX_ENTRIES as u64 {
        let e =
            types.checked_add(i.checked_mul(stride).context("table past the address space")?).context("table past the address space")?;
        let p = word(e + tn)?;
        if p == 0 {
            break;
        }
        if c_string(mem, p).as_deref() == Some(name) {
            return word(e + sz);
        }
    }
    bail!("VMTypes has no {name}")
}

/// The interpreter's code: [start, end).
pub fn interpreter(mem: &dyn Memory, l: &Layout) -> Option<(u64, u64)> {
    let queue = u64_at(mem, l.interpreter_code)?;
    if queue == 0 {
        return None;
    }
    let start = u64_at(mem, queue.checked_add(l.stub_queue_buffer)?)?;
    let len = u32_at(mem, queue.checked_add(l.stub_queue_limit)?)? as i32;
    // the interpreter is a few hundred KiB of code
    if start == 0 || len <= 0 || len > 64 << 20 {
        return None;
    }
    Some((start, start.checked_add(len as u64)?))
}

/// A `Symbol`'s text (None: unreadable, empty, longer than `MAX_SYMBOL`, not UTF-8).
fn symbol(mem: &dyn Memory, l: &Layout, sym: u64) -> Option<String> {
    if sym == 0 {
        return None;
    }
    let len = u16_at(mem, sym.checked_add(l.symbol_length)?)? as usize;
    if len == 0 || len > MAX_SYMBOL {
        return None;
    }
    let mut b = vec![0u8; len];
    mem.read(sym.checked_add(l.symbol_body)?, &mut b).then_some(())?;
    String::from_utf8(b).ok()
}

/// Whether `s` could be a class's binary name or a method's name (what the JVM's class file
/// checks allow, roughly: no control characters, no `;` `[` in a method, none of `.`).
fn plausible(s: &str, class: bool) -> bool {
    !s.is_empty()
        && s.chars().all(|c| !c.is_control() && c != ';' && c != '[' && (class || (c != '/' && c != '.')))
        && (!class || !s.contains('.'))
}

/// The name of the method `method` (a `Method*`) as profilers print it: the class's name with
/// dots, then the method's (`fixengine.OrderBook.match`, `java.lang.Thread.run`).
pub fn method_name(mem: &dyn Memory, l: &Layout, method: u64) -> Option<String> {
    if method == 0 || method & 7 != 0 {
        return None;
    }
    let cm = u64_at(mem, method.checked_add(l.method_const_method)?)?;
    if cm == 0 || cm & 7 != 0 {
        return None;
    }
    let cp = u64_at(mem, cm.checked_add(l.const_method_constants)?)?;
    let index = u16_at(mem, cm.checked_add(l.const_method_name_index)?)?;
    if cp == 0 || cp & 7 != 0 || index == 0 {
        return None;
    }
    let slot = cp.checked_add(l.constant_pool_size)?.checked_add(u64::from(index) * 8)?;
    let name = symbol(mem, l, u64_at(mem, slot)?)?;
    let holder = u64_at(mem, cp.checked_add(l.constant_pool_holder)?)?;
    let class = symbol(mem, l, u64_at(mem, holder.checked_add(l.klass_name)?)?)?;
    if !plausible(&name, false) || !plausible(&class, true) {
        return None;
    }
    Some(format!("{}.{name}", class.replace('/', ".")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A sparse memory of writes at addresses.
    #[derive(Default)]
    pub struct Sparse(BTreeMap<u64, u8>);

    impl Sparse {
        fn put(&mut self, addr: u64, bytes: &[u8]) {
            for (i, b) in bytes.iter().enumerate() {
                self.0.insert(addr + i as u64, *b);
            }
        }
        fn word(&mut self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }
        fn cstr(&mut self, addr: u64, s: &str) {
            self.put(addr, s.as_bytes());
            self.put(addr + s.len() as u64, &[0]);
        }
    }

    impl Memory for Sparse {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            for (i, b) in buf.iter_mut().enumerate() {
                match self.0.get(&(addr + i as u64)) {
                    Some(v) => *b = *v,
                    None => return false,
                }
            }
            true
        }
    }

    /// A JVM's tables and one method, laid out as HotSpot lays them out (entry layouts included).
    fn jvm() -> (Sparse, Globals, u64) {
        let mut m = Sparse::default();
        let g = Globals::from_addresses([0x1000, 0x1008, 0x1010, 0x1018, 0x1020, 0x1028, 0x1030, 0x1038, 0x1040, 0x1048, 0x1050]);
        // struct entries: typeName 0, fieldName 8, typeString 16, isStatic 24, offset 32, address 40; stride 48
        for (a, v) in [(0x1010, 0), (0x1018, 8), (0x1020, 24), (0x1028, 32), (0x1030, 40), (0x1038, 48)] {
            m.word(a, v);
        }
        // type entries: typeName 0, size 32; stride 40
        for (a, v) in [(0x1040, 0), (0x1048, 32), (0x1050, 40)] {
            m.word(a, v);
        }
        m.word(0x1000, 0x2000);
        m.word(0x1008, 0x3000);
        let fields: [(&str, &str, bool, u64); 11] = [
            ("Thread", "_tlab", false, 0x99),
            ("Method", "_constMethod", false, 8),
            ("ConstMethod", "_constants", false, 8),
            ("ConstMethod", "_name_index", false, 34),
            ("ConstantPool", "_pool_holder", false, 24),
            ("Klass", "_name", false, 16),
            ("Symbol", "_length", false, 4),
            ("Symbol", "_body", false, 6),
            ("AbstractInterpreter", "_code", true, 0x9000),
            ("StubQueue", "_stub_buffer", false, 8),
            ("StubQueue", "_buffer_limit", false, 16),
        ];
        let mut strings = 0x10000u64;
        for (i, (t, f, st, v)) in fields.iter().enumerate() {
            let e = 0x2000 + i as u64 * 48;
            m.cstr(strings, t);
            m.word(e, strings);
            strings += 64;
            m.cstr(strings, f);
            m.word(e + 8, strings);
            strings += 64;
            m.put(e + 24, &u32::from(*st).to_le_bytes());
            m.word(e + 32, if *st { 0 } else { *v });
            m.word(e + 40, if *st { *v } else { 0 });
        }
        m.word(0x2000 + 11 * 48, 0);
        m.cstr(strings, "ConstantPool");
        m.word(0x3000, strings);
        m.word(0x3000 + 32, 72);
        m.word(0x3000 + 40, 0);
        // the interpreter: StubQueue at 0xa000, code at 0x7f00_0000 for 0x40000
        m.word(0x9000, 0xa000);
        m.word(0xa008, 0x7f00_0000);
        m.put(0xa010, &0x40000u32.to_le_bytes());
        // Method 0x5000 -> ConstMethod 0x5100 -> pool 0x6000 (holder 0x7000), name index 3
        m.word(0x5008, 0x5100);
        m.word(0x5108, 0x6000);
        m.put(0x5100 + 34, &3u16.to_le_bytes());
        m.word(0x6000 + 24, 0x7000);
        m.word(0x6000 + 72 + 3 * 8, 0x8000);
        m.word(0x7000 + 16, 0x8100);
        let sym = |m: &mut Sparse, at: u64, s: &str| {
            m.put(at + 4, &(s.len() as u16).to_le_bytes());
            m.put(at + 6, s.as_bytes());
        };
        sym(&mut m, 0x8000, "match");
        sym(&mut m, 0x8100, "fixengine/OrderBook");
        (m, g, 0x5000)
    }

    #[test]
    fn an_interpreted_methods_name_and_the_interpreters_range() {
        let (m, g, method) = jvm();
        let l = layout(&m, &g).unwrap();
        assert_eq!((l.const_method_name_index, l.constant_pool_size, l.interpreter_code), (34, 72, 0x9000));
        assert_eq!(interpreter(&m, &l), Some((0x7f00_0000, 0x7f04_0000)));
        assert_eq!(method_name(&m, &l, method).as_deref(), Some("fixengine.OrderBook.match"));
        assert_eq!(method_name(&m, &l, method + 8), None, "not a method");
        assert_eq!(method_name(&m, &l, 0), None);
    }

    #[test]
    fn hostile_memory_is_none_or_an_error() {
        let (mut m, g, method) = jvm();
        let l = layout(&m, &g).unwrap();
        // a class name with a character no class has
        m.put(0x8100 + 6, b"fix;ngine");
        assert_eq!(method_name(&m, &l, method), None);
        // a symbol longer than the bound
        m.put(0x8000 + 4, &60000u16.to_le_bytes());
        assert_eq!(method_name(&m, &l, method), None);
        // a table without the fields
        let (mut m, g, _) = jvm();
        m.word(0x2000 + 48, 0);
        assert!(layout(&m, &g).is_err());
        // an implausible stride
        let (mut m, g, _) = jvm();
        m.word(0x1038, 1 << 20);
        assert!(layout(&m, &g).is_err());
        assert!(layout(&Sparse::default(), &g).is_err());
    }
}
