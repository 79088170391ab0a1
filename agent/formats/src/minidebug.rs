//! MiniDebugInfo: the `.gnu_debugdata` section Fedora, RHEL and their container images put in
//! their stripped objects, an xz-compressed ELF file holding the symbol table of the functions
//! that `.dynsym` does not export (GDB and perf read it; docs: GDB's "MiniDebugInfo").
//!
//! The section is the target's, so hostile input: at most [`MAX_COMPRESSED`] bytes are read,
//! the decoder (liblzma) runs under a memory limit of [`MEMLIMIT`] (a stream header asking for a
//! larger dictionary is refused), and the output stops at [`MAX_UNPACKED`] bytes (an xz bomb
//! expands no further).
use anyhow::{bail, Context, Result};
use xz2::stream::{Action, Status, Stream};

use crate::elf::{Elf, Source};

/// The most of a `.gnu_debugdata` section read (bytes).
pub const MAX_COMPRESSED: u64 = 16 << 20;
/// The largest ELF file it may unpack to (bytes).
pub const MAX_UNPACKED: usize = 64 << 20;
/// liblzma's memory limit for decoding (bytes).
pub const MEMLIMIT: u64 = 64 << 20;

/// The ELF file in `elf`'s `.gnu_debugdata`, unpacked; none when it has none.
pub fn of<S: Source + ?Sized>(elf: &Elf<'_, S>) -> Option<Result<Vec<u8>>> {
    let section = elf.section(".gnu_debugdata")?;
    Some(elf.section_data(section, MAX_COMPRESSED).and_then(|xz| unpack(&xz)))
}

/// An xz stream unpacked, within the bounds.
pub fn unpack(xz: &[u8]) -> Result<Vec<u8>> {
    let mut stream = Stream::new_stream_decoder(MEMLIMIT, 0).context("liblzma refused to start a decoder")?;
    let mut out: Vec<u8> = Vec::with_capacity((xz.len() * 4).min(MAX_UNPACKED));
    let mut input = xz;
    loop {
        if out.len() >= MAX_UNPACKED {
            bail!("unpacks to more than {MAX_UNPACKED} bytes");
        }
        if out.len() == out.capacity() {
            out.reserve_exact(out.len().max(4096).min(MAX_UNPACKED - out.len()));
        }
        let before = stream.total_in();
        let status =
            stream.process_vec(input, &mut out, Action::Finish).context("not a well-formed xz stream (or past the memory limit)")?;
        let used = (stream.total_in() - before) as usize;
        input = &input[used.min(input.len())..];
        match status {
            Status::StreamEnd => return Ok(out),
            Status::Ok | Status::GetCheck => {}
            // no progress with room to write: the input ended before the stream did
            Status::MemNeeded => bail!("needs more than {MEMLIMIT} bytes of memory to unpack"),
        }
        if used == 0 && out.len() < out.capacity() {
            bail!("the xz stream is cut short");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xz(data: &[u8], preset: u32) -> Vec<u8> {
        let mut s = Stream::new_easy_encoder(preset, xz2::stream::Check::Crc64).unwrap();
        let mut out = Vec::with_capacity(data.len() + 4096);
        s.process_vec(data, &mut out, Action::Finish).unwrap();
        out
    }

    #[test]
    fn unpacks_what_xz_packs() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i * 2654435761).to_le_bytes()).collect();
        assert_eq!(unpack(&xz(&data, 6)).unwrap(), data);
    }

    #[test]
    fn hostile_streams_are_refused_within_bounds() {
        // a bomb: 80 MiB of zeros packs to a few KiB, and unpacks no further than the bound
        let zeros = vec![0u8; MAX_UNPACKED + (16 << 20)];
        let bomb = xz(&zeros, 6);
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        match unpack(&bomb) {
            Ok(v) => panic!("unpacked {} bytes", v.len()),
            Err(e) => assert!(format!("{e:#}").contains("more than"), "{e:#}"),
        }
        // a stream whose dictionary (xz -9: 64 MiB) needs more memory than the limit
        let e = format!("{:#}", unpack(&xz(b"small", 9)).map(|v| v.len()).unwrap_err());
        assert!(e.contains("memory limit"), "{e}");
        // cut short, garbage, empty
        let good = xz(b"an ELF file, say", 6);
        assert!(unpack(&good[..good.len() - 5]).is_err());
        assert!(unpack(b"not xz at all").is_err());
        assert!(unpack(b"").is_err());
    }
}
