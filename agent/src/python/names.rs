//! Python thread names (`threading.Thread.name`), read from the target's
//! memory: `sys.modules["threading"]._active` maps each thread's ident
//! (`pthread_self()`) to its Thread object, whose `_name` is a str.
//! Every read is bounded and checked: the memory belongs to the target.
use std::collections::HashMap;

use anyhow::{bail, Context, Result};

use super::layout::{InstanceDict, Objects};
use super::memory;

const OB_TYPE: u64 = 8;
const TP_BASICSIZE: u64 = 32;
const TP_FLAGS: u64 = 168;
const TP_DICTOFFSET: u64 = 288;
const MD_DICT: u64 = 16;
const MA_KEYS: u64 = 32;
const MA_VALUES: u64 = 40;
const MANAGED_DICT: u64 = 1 << 4;
const INLINE_VALUES: u64 = 1 << 2;
const MAX_ENTRIES: u64 = 1 << 16;
const MAX_NAME: u64 = 256;

struct Reader<'a> {
    pid: u32,
    o: &'a Objects,
}

impl Reader<'_> {
    fn ptr(&self, addr: u64) -> Result<u64> {
        memory::read_u64(self.pid, addr)
    }

    fn u8(&self, addr: u64) -> Result<u8> {
        let mut b = [0u8; 1];
        memory::read(self.pid, addr, &mut b)?;
        Ok(b[0])
    }

    /// (key, value) pointers of a dict's keys object, values from `values` when split.
    fn entries(&self, keys: u64, values: Option<u64>) -> Result<Vec<(u64, u64)>> {
        let (nentries, first, stride, key_at) = if self.o.keys_v311 {
            let log2_index_bytes = self.u8(keys + 9)? as u64;
            let kind = self.u8(keys + 10)?;
            let n = self.ptr(keys + 24)?;
            let general = kind == 0;
            (n, keys + 32 + (1u64 << log2_index_bytes.min(40)), if general { 24 } else { 16 }, if general { 8 } else { 0 })
        } else {
            let size = self.ptr(keys + 8)?;
            let width = match size {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                0x1_0000..=0xffff_ffff => 4,
                _ => 8,
            };
            (self.ptr(keys + 32)?, keys + 40 + size.min(1 << 32) * width, 24, 8)
        };
        if nentries > MAX_ENTRIES {
            bail!("implausible dict of {nentries} entries");
        }
        let mut out = Vec::with_capacity(nentries as usize);
        for i in 0..nentries {
            let e = first + i * stride;
            let key = self.ptr(e + key_at)?;
            if key == 0 {
                continue; // deleted entry
            }
            let value = match values {
                Some(v) => self.ptr(v + self.o.values_offset + i * 8)?,
                None => self.ptr(e + key_at + 8)?,
            };
            out.push((key, value));
        }
        Ok(out)
    }

    fn dict_items(&self, dict: u64) -> Result<Vec<(u64, u64)>> {
        let keys = self.ptr(dict + MA_KEYS)?;
        let values = self.ptr(dict + MA_VALUES)?;
        self.entries(keys, (values != 0).then_some(values))
    }

    fn lookup(&self, items: Vec<(u64, u64)>, name: &str) -> Option<u64> {
        items.into_iter().find(|(k, _)| self.str(*k).is_ok_and(|s| s == name)).map(|(_, v)| v)
    }

    /// A compact str object's text.
    fn str(&self, o: u64) -> Result<String> {
        let len = self.ptr(o + 16)?;
        let mut st = [0u8; 4];
        memory::read(self.pid, o + 32, &mut st)?;
        let state = u32::from_le_bytes(st);
        let kind = (state >> 2) & 7;
        let compact = (state >> 5) & 1 == 1;
        let ascii = (state >> 6) & 1 == 1;
        if !compact || len > MAX_NAME || !matches!(kind, 1 | 2 | 4) {
            bail!("not a compact str");
        }
        let data = if ascii { o + self.o.ascii_size } else { o + self.o.compact_size };
        let mut buf = vec![0u8; (len * kind as u64) as usize];
        memory::read(self.pid, data, &mut buf)?;
        Ok(match kind {
            1 => buf.iter().map(|b| *b as char).collect(),
            2 => buf.chunks_exact(2).filter_map(|c| char::from_u32(u16::from_le_bytes([c[0], c[1]]) as u32)).collect(),
            _ => buf.chunks_exact(4).filter_map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
        })
    }

    /// A non-negative int of up to 64 bits (thread idents).
    fn int(&self, o: u64) -> Result<u64> {
        let raw = self.ptr(o + 16)?;
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
        let mut v: u128 = 0;
        for i in (0..ndigits).rev() {
            let mut d = [0u8; 4];
            memory::read(self.pid, o + 24 + i * 4, &mut d)?;
            v = (v << 30) | (u32::from_le_bytes(d) & 0x3fff_ffff) as u128;
        }
        u64::try_from(v).context("int too large")
    }

    /// An attribute stored in a Python-class instance's dict or values.
    fn attr(&self, obj: u64, name: &str) -> Result<Option<u64>> {
        let ty = self.ptr(obj + OB_TYPE)?;
        let flags = self.ptr(ty + TP_FLAGS)?;
        let from_values = |values: u64| -> Result<Option<u64>> {
            let keys = self.ptr(ty + self.o.ht_cached_keys)?;
            Ok(self.lookup(self.entries(keys, Some(values))?, name))
        };
        match self.o.instance_dict {
            InstanceDict::DictOffset => {
                let off = self.ptr(ty + TP_DICTOFFSET)? as i64;
                if off <= 0 {
                    bail!("no instance dict");
                }
                let dict = self.ptr(obj + off as u64)?;
                if dict == 0 {
                    return Ok(None);
                }
                Ok(self.lookup(self.dict_items(dict)?, name))
            }
            _ if flags & MANAGED_DICT == 0 => bail!("not a managed-dict instance"),
            InstanceDict::Managed311 => {
                let dict = self.ptr(obj - 24)?;
                if dict != 0 {
                    return Ok(self.lookup(self.dict_items(dict)?, name));
                }
                let values = self.ptr(obj - 32)?;
                if values == 0 {
                    return Ok(None);
                }
                from_values(values)
            }
            InstanceDict::Tagged312 => {
                let dv = self.ptr(obj - 24)?;
                if dv & 1 == 1 {
                    // stored as `values - 1` (_PyDictOrValues_SetValues)
                    from_values(dv + 1)
                } else if dv != 0 {
                    Ok(self.lookup(self.dict_items(dv)?, name))
                } else {
                    Ok(None)
                }
            }
            InstanceDict::Inline313 => {
                let dict = self.ptr(obj - 24)?;
                if dict != 0 {
                    return Ok(self.lookup(self.dict_items(dict)?, name));
                }
                if flags & INLINE_VALUES == 0 {
                    return Ok(None);
                }
                let values = obj + self.ptr(ty + TP_BASICSIZE)?;
                if self.u8(values + 3)? == 0 {
                    return Ok(None); // not valid: a dict was materialized
                }
                from_values(values)
            }
        }
    }
}

/// `threading` thread names by ident (`pthread_self()`), read from process `pid`.
pub fn thread_names(pid: u32, runtime: u64, o: &Objects) -> Result<HashMap<u64, String>> {
    let r = Reader { pid, o };
    let interp = r.ptr(runtime + o.interp_head)?;
    let modules = r.ptr(interp + o.interp_modules)?;
    if interp == 0 || modules == 0 {
        bail!("interpreter not initialised");
    }
    let Some(threading) = r.lookup(r.dict_items(modules)?, "threading") else {
        return Ok(HashMap::new()); // threading never imported: only the main thread
    };
    let mdict = r.ptr(threading + MD_DICT)?;
    let active = r.lookup(r.dict_items(mdict)?, "_active").context("threading._active not found")?;
    let mut out = HashMap::new();
    for (k, thread) in r.dict_items(active)? {
        let (Ok(ident), Ok(Some(name))) = (r.int(k), r.attr(thread, "_name")) else { continue };
        if let Ok(name) = r.str(name) {
            out.insert(ident, name);
        }
    }
    Ok(out)
}
