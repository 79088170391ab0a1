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
    /// where compiled code is and how a compiled frame's method is found (None: the tables lack a
    /// field of it: compiled frames stay unnamed without a perf map)
    pub code_cache: Option<CodeCacheLayout>,
}

/// The code cache, as the tables describe it: `CodeCache::_heaps` (a `GrowableArray<CodeHeap*>*`),
/// each heap's memory (a `VirtualSpace`), its segment map and segment size, the block header
/// before each blob, and the blob's name, code range and (an `nmethod`'s) `Method*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodeCacheLayout {
    /// the address of `CodeCache::_heaps` (a static)
    pub heaps: u64,
    /// `GrowableArrayBase::_len`, `GrowableArray<int>::_data` (the same for every element type)
    pub array_len: u64,
    pub array_data: u64,
    pub heap_memory: u64,
    pub heap_segmap: u64,
    pub heap_log2_segment_size: u64,
    pub space_low: u64,
    pub space_high: u64,
    /// `HeapBlock::_header` + `HeapBlock::Header::_used`, and `sizeof(HeapBlock)`: the blob follows it
    pub block_used: u64,
    pub block_size: u64,
    pub blob_name: u64,
    pub blob_code_begin: u64,
    pub blob_code_end: u64,
    /// `CompiledMethod::_method` (JDK 8 to 22) or `nmethod::_method` (later)
    pub nmethod_method: u64,
    /// how the methods inlined at an address are read (None: the tables lack a field of it: a
    /// compiled frame is named by its compilation's method alone)
    pub inlining: Option<InliningLayout>,
}

/// An nmethod's debug information, as the tables describe it: its `PcDesc`s (an address of its
/// code, and where the scopes at it are described) and the scopes (each a method, the one it was
/// inlined into next), in HotSpot's compressed stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InliningLayout {
    /// `CompiledMethod::_scopes_data_begin` (an address)
    pub scopes_data_begin: u64,
    /// `nmethod::_metadata_offset`, `_scopes_pcs_offset`, `_dependencies_offset` (ints, from the
    /// nmethod's start): the metadata (the scopes' methods), the `PcDesc`s, and their end
    pub metadata_offset: u64,
    pub scopes_pcs_offset: u64,
    pub dependencies_offset: u64,
    /// `sizeof(PcDesc)`, `PcDesc::_pc_offset`, `PcDesc::_scope_decode_offset`
    pub pc_desc_size: u64,
    pub pc_desc_pc_offset: u64,
    pub pc_desc_scope_offset: u64,
    /// the byte the stream's encoding never uses (UNSIGNED5: 1 from JDK 20 on, none before: 0)
    pub excluded: u8,
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
    let code: [(&str, &str); 22] = [
        ("CodeCache", "_heaps"),
        ("GrowableArrayBase", "_len"),
        ("GrowableArray<int>", "_data"),
        ("CodeHeap", "_memory"),
        ("CodeHeap", "_segmap"),
        ("CodeHeap", "_log2_segment_size"),
        ("VirtualSpace", "_low"),
        ("VirtualSpace", "_high"),
        ("HeapBlock", "_header"),
        ("HeapBlock::Header", "_used"),
        ("CodeBlob", "_name"),
        ("CodeBlob", "_code_begin"),
        ("CodeBlob", "_code_end"),
        ("CompiledMethod", "_method"),
        ("nmethod", "_method"),
        ("CompiledMethod", "_scopes_data_begin"),
        ("nmethod", "_metadata_offset"),
        ("nmethod", "_scopes_pcs_offset"),
        ("nmethod", "_dependencies_offset"),
        ("PcDesc", "_pc_offset"),
        ("PcDesc", "_scope_decode_offset"),
        ("Abstract_VM_Version", "_vm_major_version"),
    ];
    let mut found = [None::<u64>; 10];
    let mut code_found = [None::<u64>; 22];
    for i in 0..MAX_ENTRIES as u64 {
        let e =
            structs.checked_add(i.checked_mul(stride).context("table past the address space")?).context("table past the address space")?;
        let type_ptr = word(e + tn, "a struct entry")?;
        if type_ptr == 0 {
            break; // the table's end
        }
        let field_ptr = word(e + fname, "a struct entry")?;
        let (Some(ty), Some(field)) = (c_string(mem, type_ptr), c_string(mem, field_ptr)) else { continue };
        let slot = match (wanted.iter().position(|(t, f)| *t == ty && *f == field), code.iter().position(|(t, f)| *t == ty && *f == field))
        {
            (Some(k), _) => &mut found[k],
            (None, Some(k)) => &mut code_found[k],
            (None, None) => continue,
        };
        let is_static = u32_at(mem, e + st).context("cannot read a struct entry")? != 0;
        *slot = Some(if is_static { word(e + addr, "a static field's address")? } else { word(e + off, "a field's offset")? });
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
        code_cache: code_cache(mem, g, &code_found),
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

/// The code cache's layout from its fields (`layout`'s `code` order), when every one is there and
/// plausible.
fn code_cache(mem: &dyn Memory, g: &Globals, f: &[Option<u64>; 22]) -> Option<CodeCacheLayout> {
    let c = CodeCacheLayout {
        heaps: f[0]?,
        array_len: f[1]?,
        array_data: f[2]?,
        heap_memory: f[3]?,
        heap_segmap: f[4]?,
        heap_log2_segment_size: f[5]?,
        space_low: f[6]?,
        space_high: f[7]?,
        block_used: f[8]?.checked_add(f[9]?)?,
        block_size: type_size(mem, g, "HeapBlock").ok()?,
        blob_name: f[10]?,
        blob_code_begin: f[11]?,
        blob_code_end: f[12]?,
        nmethod_method: f[13].or(f[14])?,
        inlining: inlining(mem, g, f),
    };
    let offsets = [
        c.array_len,
        c.array_data,
        c.heap_memory,
        c.heap_segmap,
        c.heap_log2_segment_size,
        c.space_low,
        c.space_high,
        c.block_used,
        c.block_size,
        c.blob_name,
        c.blob_code_begin,
        c.blob_code_end,
        c.nmethod_method,
    ];
    (c.heaps != 0 && offsets.iter().all(|o| *o <= 4096)).then_some(c)
}

/// How an nmethod's inlined methods are read, when every field is there and plausible.
fn inlining(mem: &dyn Memory, g: &Globals, f: &[Option<u64>; 22]) -> Option<InliningLayout> {
    let major = u32_at(mem, f[21]?)?;
    let l = InliningLayout {
        scopes_data_begin: f[15]?,
        metadata_offset: f[16]?,
        scopes_pcs_offset: f[17]?,
        dependencies_offset: f[18]?,
        pc_desc_size: type_size(mem, g, "PcDesc").ok()?,
        pc_desc_pc_offset: f[19]?,
        pc_desc_scope_offset: f[20]?,
        excluded: u8::from(major >= 20),
    };
    let offsets = [l.scopes_data_begin, l.metadata_offset, l.scopes_pcs_offset, l.dependencies_offset];
    let desc_ok =
        (8..=64).contains(&l.pc_desc_size) && l.pc_desc_pc_offset + 4 <= l.pc_desc_size && l.pc_desc_scope_offset + 4 <= l.pc_desc_size;
    ((6..=64).contains(&major) && offsets.iter().all(|o| *o <= 4096) && desc_ok).then_some(l)
}

/// `PcDesc`s of an nmethod read at most, and the bytes of its scopes' stream.
const MAX_PC_DESCS: u64 = 1 << 16;
const MAX_SCOPES_BYTES: u64 = 4 << 20;
/// Methods inlined into one another at an address, followed at most.
const MAX_INLINED: usize = 32;

/// One unsigned int of HotSpot's compressed stream (UNSIGNED5, Pack200's: up to five bytes, each
/// below `excluded + 191` (JDK 20 on; 192 before) the last, the others six bits more), from `pos`.
fn read_u5(data: &[u8], pos: &mut usize, excluded: u8) -> Option<u64> {
    let x = u64::from(excluded);
    let low = 256 - 64 - x;
    let mut sum = 0u64;
    for i in 0..5 {
        let b = u64::from(*data.get(*pos + i)?);
        if b < x {
            return None;
        }
        sum += (b - x) << (6 * i);
        if b < x + low || i == 4 {
            *pos += i + 1;
            return Some(sum);
        }
    }
    None
}

/// The methods at `pc` of the nmethod `blob`, innermost first: those the compiler inlined there,
/// from the scopes its `PcDesc` at `pc + 1` describes (the return address of a call that can
/// reach a safepoint has one of its own). None when there is no such description (the nmethod's
/// method is then all that is said) or it does not read as HotSpot writes it.
fn inlined_at(mem: &dyn Memory, c: &CodeCacheLayout, blob: u64, pc: u64) -> Option<Vec<u64>> {
    let i = c.inlining?;
    let int_at = |off: u64| -> Option<u64> { u32_at(mem, blob.checked_add(off)?).map(u64::from) };
    let code_begin = u64_at(mem, blob.checked_add(c.blob_code_begin)?)?;
    let (pcs, end) = (int_at(i.scopes_pcs_offset)?, int_at(i.dependencies_offset)?);
    let count = end.checked_sub(pcs)? / i.pc_desc_size;
    if count == 0 || count > MAX_PC_DESCS {
        return None;
    }
    let mut table = vec![0u8; (count * i.pc_desc_size) as usize];
    mem.read(blob.checked_add(pcs)?, &mut table).then_some(())?;
    let int = |b: &[u8], at: u64| -> Option<u32> { Some(u32::from_le_bytes(b.get(at as usize..at as usize + 4)?.try_into().ok()?)) };
    let want = pc.checked_sub(code_begin)?;
    // the description of the return address after `pc` (a call's, which the walk asks for by the
    // byte before it), and no other: the next description of another address may be of another
    // inlined method (an address without one is named by the compilation's method alone)
    let desc = table
        .chunks_exact(i.pc_desc_size as usize)
        .find(|d| int(d, i.pc_desc_pc_offset).is_some_and(|o| i64::from(o as i32) == want as i64 + 1))?;
    let mut decode = u64::from(int(desc, i.pc_desc_scope_offset)?);
    let data_begin = u64_at(mem, blob.checked_add(i.scopes_data_begin)?)?;
    let data_len = blob.checked_add(pcs)?.checked_sub(data_begin)?;
    if decode == 0 || data_len == 0 || data_len > MAX_SCOPES_BYTES {
        return None;
    }
    let mut data = vec![0u8; data_len as usize];
    mem.read(data_begin, &mut data).then_some(())?;
    let mut methods = vec![];
    // a scope: the offset of the one it was inlined into (0: none), its method's index among the
    // nmethod's metadata (from 1), its bytecode index, then what a reader of locals needs
    while decode != 0 && methods.len() < MAX_INLINED {
        let mut pos = usize::try_from(decode).ok()?;
        let sender = read_u5(&data, &mut pos, i.excluded)?;
        let index = read_u5(&data, &mut pos, i.excluded)?;
        if index == 0 || index > MAX_PC_DESCS || sender >= data_len {
            return None;
        }
        let method = u64_at(mem, blob.checked_add(int_at(i.metadata_offset)?)?.checked_add((index - 1) * 8)?)?;
        if method == 0 || method & 7 != 0 {
            return None;
        }
        methods.push(method);
        decode = sender;
    }
    (decode == 0 && !methods.is_empty()).then_some(methods)
}

/// Code heaps read at most (HotSpot has at most three: non-nmethods, profiled, non-profiled).
const MAX_HEAPS: i32 = 8;
/// Steps back through a code heap's segment map at most, to the start of the block holding an
/// address (each step goes back up to 254 segments: a 64 MiB blob of 64-byte segments is ~4k).
const MAX_SEGMAP_STEPS: usize = 1 << 14;

/// What holds an address of the code cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blob {
    /// a compiled method (an `nmethod`, or the wrapper of a native method): the `Method*`s running
    /// at the address, innermost first: those inlined there, then the compilation's own
    Methods(Vec<u64>),
    /// the runtime's own code, by the name HotSpot gives it (`StubRoutines (1)`, `Interpreter`,
    /// `I2C/C2I adapters`), as its perf map names it
    Stub(String),
}

/// The blob whose code holds `pc`, as HotSpot finds the blob of an address itself
/// (`CodeHeap::find_start`): the heap whose memory holds it, its segment map walked back to the
/// start of the block, the block in use, the blob after it, whose code holds `pc`. An `nmethod` is
/// its `Method*`, anything else its name. None for a free block, a block's header, memory that
/// does not read as the tables say.
pub fn code_blob(mem: &dyn Memory, l: &Layout, pc: u64) -> Option<Blob> {
    let c = l.code_cache?;
    let array = u64_at(mem, c.heaps)?;
    if array == 0 {
        return None;
    }
    let len = u32_at(mem, array.checked_add(c.array_len)?)? as i32;
    let data = u64_at(mem, array.checked_add(c.array_data)?)?;
    if !(1..=MAX_HEAPS).contains(&len) || data == 0 {
        return None;
    }
    for i in 0..len as u64 {
        let heap = u64_at(mem, data.checked_add(i * 8)?)?;
        let memory = heap.checked_add(c.heap_memory)?;
        let (low, high) = (u64_at(mem, memory.checked_add(c.space_low)?)?, u64_at(mem, memory.checked_add(c.space_high)?)?);
        if heap == 0 || pc < low || pc >= high {
            continue;
        }
        let log2 = u32_at(mem, heap.checked_add(c.heap_log2_segment_size)?)?;
        let segmap = u64_at(mem, heap.checked_add(c.heap_segmap)?.checked_add(c.space_low)?)?;
        if !(3..=20).contains(&log2) || segmap == 0 {
            return None;
        }
        let mut segment = (pc - low) >> log2;
        for _ in 0..MAX_SEGMAP_STEPS {
            let mut b = [0u8; 1];
            if !mem.read(segmap.checked_add(segment)?, &mut b) {
                return None;
            }
            match b[0] {
                0xff => return None, // a free segment
                0 => {
                    let block = low.checked_add(segment << log2)?;
                    let mut used = [0u8; 1];
                    if !mem.read(block.checked_add(c.block_used)?, &mut used) || used[0] == 0 {
                        return None;
                    }
                    let blob = block.checked_add(c.block_size)?;
                    let begin = u64_at(mem, blob.checked_add(c.blob_code_begin)?)?;
                    let end = u64_at(mem, blob.checked_add(c.blob_code_end)?)?;
                    let name = c_string(mem, u64_at(mem, blob.checked_add(c.blob_name)?)?)?;
                    if !(begin <= pc && pc < end) || name.is_empty() || name.chars().any(char::is_control) {
                        return None;
                    }
                    if name != "nmethod" && name != "native nmethod" {
                        return Some(Blob::Stub(name));
                    }
                    let method = u64_at(mem, blob.checked_add(c.nmethod_method)?)?;
                    if method == 0 {
                        return None;
                    }
                    // the scopes end in the compilation's own method; any other end is not trusted
                    let methods = inlined_at(mem, &c, blob, pc).filter(|m| m.last() == Some(&method)).unwrap_or_else(|| vec![method]);
                    return Some(Blob::Methods(methods));
                }
                back => segment = segment.checked_sub(u64::from(back))?,
            }
        }
        return None;
    }
    None
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
    // a hidden class (a lambda's) is named with its address (`Pool$$Lambda$256+0x00007f5e0c158428`),
    // which differs from run to run: named without it, as `jstack` prints its frames
    let class = match class.rsplit_once("+0x") {
        Some((head, addr)) if !addr.is_empty() && addr.chars().all(|c| c.is_ascii_hexdigit()) => head,
        _ => &class,
    };
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
        jvm_with(&[])
    }

    /// The same with `more` fields in its tables (type, field, static, offset or address), and
    /// `HeapBlock` among its types.
    fn jvm_with(more: &[(&str, &str, bool, u64)]) -> (Sparse, Globals, u64) {
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
        let mut fields: Vec<(&str, &str, bool, u64)> = vec![
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
        fields.extend_from_slice(more);
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
        m.word(0x2000 + fields.len() as u64 * 48, 0);
        m.cstr(strings, "ConstantPool");
        m.word(0x3000, strings);
        m.word(0x3000 + 32, 72);
        m.cstr(strings + 64, "HeapBlock");
        m.word(0x3000 + 40, strings + 64);
        m.word(0x3000 + 72, 16);
        m.cstr(strings + 128, "PcDesc");
        m.word(0x3000 + 80, strings + 128);
        m.word(0x3000 + 112, 16);
        m.word(0x3000 + 120, 0);
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

    /// JDK 17's code cache fields (offsets as its x86-64 build has them).
    const CODE_CACHE: [(&str, &str, bool, u64); 21] = [
        ("CodeCache", "_heaps", true, 0xb000),
        ("GrowableArrayBase", "_len", false, 0),
        ("GrowableArray<int>", "_data", false, 8),
        ("CodeHeap", "_memory", false, 8),
        ("CodeHeap", "_segmap", false, 120),
        ("CodeHeap", "_log2_segment_size", false, 256),
        ("VirtualSpace", "_low", false, 16),
        ("VirtualSpace", "_high", false, 24),
        ("HeapBlock", "_header", false, 0),
        ("HeapBlock::Header", "_used", false, 8),
        ("CodeBlob", "_name", false, 96),
        ("CodeBlob", "_code_begin", false, 32),
        ("CodeBlob", "_code_end", false, 40),
        ("CompiledMethod", "_method", false, 112),
        ("CompiledMethod", "_scopes_data_begin", false, 120),
        ("nmethod", "_metadata_offset", false, 260),
        ("nmethod", "_scopes_pcs_offset", false, 268),
        ("nmethod", "_dependencies_offset", false, 272),
        ("PcDesc", "_pc_offset", false, 0),
        ("PcDesc", "_scope_decode_offset", false, 4),
        ("Abstract_VM_Version", "_vm_major_version", true, 0xb800),
    ];

    /// Two code heaps (stubs, then nmethods of 64-byte segments at 0x20_0000) with one nmethod of
    /// the fixture's method in the block at segment 4 (code 0x20_0200..0x20_0800), a stub in the
    /// block at segment 40, and free segments after it.
    fn code_cache() -> (Sparse, Layout, u64) {
        let (mut m, g, method) = jvm_with(&CODE_CACHE);
        m.word(0xb000, 0xb100);
        m.put(0xb100, &2u32.to_le_bytes());
        m.word(0xb108, 0xb200);
        m.word(0xb200, 0xc000);
        m.word(0xb208, 0xd000);
        for (heap, low, high, segmap) in [(0xc000u64, 0x10_0000u64, 0x11_0000u64, 0xf000u64), (0xd000, 0x20_0000, 0x24_0000, 0xe000)] {
            m.word(heap + 8 + 16, low);
            m.word(heap + 8 + 24, high);
            m.word(heap + 120 + 16, segmap);
            m.put(heap + 256, &6u32.to_le_bytes());
        }
        // the nmethod's block: segments 4 to 31, each the distance back to 4 or a step of 1
        m.put(0xe000 + 4, &[0]);
        for seg in 5..32u64 {
            m.put(0xe000 + seg, &[if seg % 2 == 0 { 1 } else { (seg - 4) as u8 }]);
        }
        let blob = |m: &mut Sparse, block: u64, name: u64, code: (u64, u64)| {
            m.put(block + 8, &[1]);
            m.word(block + 16 + 96, name);
            m.word(block + 16 + 32, code.0);
            m.word(block + 16 + 40, code.1);
            m.word(block + 16 + 112, method);
        };
        m.cstr(0xf800, "nmethod");
        m.cstr(0xf900, "StubRoutines (2)");
        blob(&mut m, 0x20_0100, 0xf800, (0x20_0200, 0x20_0800));
        m.put(0xe000 + 40, &[0]);
        m.put(0xe000 + 41, &[1]);
        blob(&mut m, 0x20_0a00, 0xf900, (0x20_0a40, 0x20_0a80));
        m.put(0xe000 + 42, &[0xff]);
        // its debug information (JDK 17's encoding): PcDescs at code offsets -1 (the sentinel), 0x100
        // (OrderBook.reprice inlined into the compilation's match) and 0x200 (match alone); the
        // metadata (match, reprice), the scopes' stream before the PcDescs
        m.put(0xb800, &17u32.to_le_bytes());
        let blob = 0x20_0110u64;
        m.put(blob + 260, &0x200u32.to_le_bytes());
        m.put(blob + 268, &0x300u32.to_le_bytes());
        m.put(blob + 272, &0x330u32.to_le_bytes());
        m.word(blob + 120, blob + 0x280);
        m.word(blob + 0x200, method);
        m.word(blob + 0x208, 0x5200);
        for (k, (pc, scope)) in [(-1i32 as u32, 0u32), (0x100, 1), (0x200, 5)].iter().enumerate() {
            m.put(blob + 0x300 + 16 * k as u64, &[0; 16]);
            m.put(blob + 0x300 + 16 * k as u64, &pc.to_le_bytes());
            m.put(blob + 0x300 + 16 * k as u64 + 4, &scope.to_le_bytes());
        }
        // at 1: inlined into the scope at 5, method 2, bci 9; at 5: the outermost, method 1
        m.put(blob + 0x280, &[0; 0x80]);
        m.put(blob + 0x280, &[0, 5, 2, 10, 0, 0, 1, 3, 0]);
        // reprice: another method of the same class (name index 4)
        m.word(0x5208, 0x5300);
        m.word(0x5308, 0x6000);
        m.put(0x5300 + 34, &4u16.to_le_bytes());
        m.word(0x6000 + 72 + 4 * 8, 0x8200);
        m.put(0x8200 + 4, &7u16.to_le_bytes());
        m.put(0x8200 + 6, b"reprice");
        let l = layout(&m, &g).unwrap();
        (m, l, method)
    }

    #[test]
    fn a_compiled_frames_method_is_found_in_the_code_cache() {
        let (m, l, method) = code_cache();
        let c = l.code_cache.expect("the code cache's layout");
        assert_eq!((c.heaps, c.block_used, c.block_size, c.nmethod_method), (0xb000, 8, 16, 112));
        for pc in [0x20_0200, 0x20_0400, 0x20_0437, 0x20_07ff] {
            assert_eq!(code_blob(&m, &l, pc), Some(Blob::Methods(vec![method])), "{pc:#x}");
        }
        // a stub, by its name
        assert_eq!(code_blob(&m, &l, 0x20_0a50), Some(Blob::Stub("StubRoutines (2)".into())));
        // the block's header, not its code; a free segment; past the heaps; a heap whose segment
        // map does not read
        for pc in [0x20_0110, 0x20_0a90, 0x30_0000, 0x10_0400] {
            assert_eq!(code_blob(&m, &l, pc), None, "{pc:#x}");
        }
        // a JVM whose tables lack a field of it: interpreted frames are still named
        let (m, g, method) = jvm_with(&CODE_CACHE[1..]);
        let l = layout(&m, &g).unwrap();
        assert_eq!((l.code_cache, method_name(&m, &l, method).as_deref()), (None, Some("fixengine.OrderBook.match")));
    }

    #[test]
    fn the_methods_inlined_at_an_address_are_read_from_the_nmethods_scopes() {
        let (mut m, l, method) = code_cache();
        let names = |m: &Sparse, pc: u64| -> Vec<String> {
            match code_blob(m, &l, pc) {
                Some(Blob::Methods(ms)) => ms.iter().map(|x| method_name(m, &l, *x).unwrap_or_default()).collect(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(l.code_cache.and_then(|c| c.inlining).map(|i| (i.pc_desc_size, i.excluded)), Some((16, 0)));
        // a call's return address at offset 0x100 (the walk asks for the byte before it)
        assert_eq!(names(&m, 0x20_0200 + 0xff), ["fixengine.OrderBook.reprice", "fixengine.OrderBook.match"]);
        assert_eq!(names(&m, 0x20_0200 + 0x1ff), ["fixengine.OrderBook.match"]);
        // an address with no description of its own (not the next one's: another inlined method's),
        // or past the last: the compilation's
        assert_eq!(names(&m, 0x20_0200 + 0x8), ["fixengine.OrderBook.match"]);
        assert_eq!(names(&m, 0x20_0200 + 0xfe), ["fixengine.OrderBook.match"]);
        assert_eq!(names(&m, 0x20_0200 + 0x300), ["fixengine.OrderBook.match"]);
        // scopes that do not end in the compilation's method, or point past the stream: not trusted
        m.put(0x20_0110 + 0x280 + 6, &[2]);
        assert_eq!(names(&m, 0x20_0200 + 0xff), ["fixengine.OrderBook.match"]);
        let (mut m, _, _) = code_cache();
        m.put(0x20_0110 + 0x280 + 1, &[120]);
        assert_eq!(code_blob(&m, &l, 0x20_0200 + 0xff), Some(Blob::Methods(vec![method])));
    }

    #[test]
    fn hotspots_compressed_ints_before_and_from_jdk_20() {
        // JDK 17: 300 is 236, 1 (192 low codes); JDK 20 on: 237, 2 (no zero byte, 191 low codes)
        for (bytes, excluded, want) in [(&[236u8, 1][..], 0u8, 300u64), (&[237, 2], 1, 300), (&[5], 0, 5), (&[6], 1, 5)] {
            let mut pos = 0;
            assert_eq!((read_u5(bytes, &mut pos, excluded), pos), (Some(want), bytes.len()), "{bytes:?}");
        }
        // an excluded byte, a stream cut short
        assert_eq!(read_u5(&[0], &mut 0, 1), None);
        assert_eq!(read_u5(&[236], &mut 0, 0), None);
        // five bytes at most, whatever the fifth
        let mut pos = 0;
        assert!(read_u5(&[255, 255, 255, 255, 255, 7], &mut pos, 0).is_some() && pos == 5);
    }

    #[test]
    fn a_hostile_code_cache_is_none() {
        // a segment map that steps back past its heap's start, or to a segment it does not have
        let (mut m, l, _) = code_cache();
        m.put(0xe000 + 4, &[9]);
        assert_eq!(code_blob(&m, &l, 0x20_0400), None);
        let (mut m, l, _) = code_cache();
        m.put(0xe000 + 4, &[1]);
        assert_eq!(code_blob(&m, &l, 0x20_0400), None);
        // a block not in use; an implausible segment size; a heap count past the bound
        let (mut m, l, _) = code_cache();
        m.put(0x20_0100 + 8, &[0]);
        assert_eq!(code_blob(&m, &l, 0x20_0400), None);
        let (mut m, l, _) = code_cache();
        m.put(0xd000 + 256, &40u32.to_le_bytes());
        assert_eq!(code_blob(&m, &l, 0x20_0400), None);
        let (mut m, l, _) = code_cache();
        m.put(0xb100, &1000u32.to_le_bytes());
        assert_eq!(code_blob(&m, &l, 0x20_0400), None);
    }

    #[test]
    fn a_hidden_class_is_named_without_its_address() {
        let (mut m, g, method) = jvm();
        let l = layout(&m, &g).unwrap();
        for (class, shown) in [("Pool$$Lambda$256+0x00007f5e0c158428", "Pool$$Lambda$256.match"), ("a/B+0xzz", "a.B+0xzz.match")] {
            m.put(0x8100 + 4, &(class.len() as u16).to_le_bytes());
            m.put(0x8100 + 6, class.as_bytes());
            assert_eq!(method_name(&m, &l, method).as_deref(), Some(shown));
        }
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
