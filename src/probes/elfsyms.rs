// SPDX-License-Identifier: MIT
//! The data symbol an address of a process lies in: its mappings
//! (/proc/PID/maps) say which ELF file is loaded where, that file's symbol
//! table (.symtab, else .dynsym) which object covers the address. A
//! global `pthread_mutex_t ctrl_mutex` is found even in .bss past the
//! file-backed pages: an address is matched against each file's load
//! bias (where its first PT_LOAD segment went), not against the mapping
//! it falls in. ELF64 and ELF32, little-endian (x86_64, aarch64, armv7).
//! Off the BPF path: once per new lock series.

use std::collections::HashMap;

const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_OBJECT: u8 = 1;
const STT_TLS: u8 = 6;

/// An ELF file's data objects (vaddr, size, name) and its first loaded
/// segment's vaddr.
#[derive(Debug, Default)]
struct Objects {
    first_load: u64,
    syms: Vec<(u64, u64, String)>,
}

/// Files larger than this are not read for symbols: a process may map
/// any file (a database, a frame buffer), and a library's image with its
/// symbol table is far smaller.
const MAX_FILE: u64 = 256 << 20;
/// Files whose symbols are kept at once; beyond it the cache starts over.
const MAX_FILES: usize = 64;

// Offsets come from the file: every sum is checked (None: not an ELF we
// can read), never wrapped or panicking.
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// A word of the file's class: 8 bytes in ELF64, 4 in ELF32.
fn word_at(b: &[u8], at: usize, wide: bool) -> Option<u64> {
    if wide {
        u64_at(b, at)
    } else {
        u32_at(b, at).map(u64::from)
    }
}

fn name_at(b: &[u8], at: usize) -> Option<String> {
    let tail = b.get(at..)?;
    let end = tail.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&tail[..end]).ok().map(str::to_string)
}

/// The data objects of an ELF image (None: not a little-endian ELF).
fn objects(b: &[u8]) -> Option<Objects> {
    if b.get(..4)? != b"\x7fELF" || *b.get(5)? != 1 {
        return None;
    }
    let wide = *b.get(4)? == 2;
    let w = |at: usize| word_at(b, at, wide);
    let (phoff, shoff) = if wide { (w(0x20)?, w(0x28)?) } else { (w(0x1c)?, w(0x20)?) };
    let at = if wide { 0x36 } else { 0x2a };
    let (phentsize, phnum, shentsize, shnum) = (
        u16_at(b, at)? as usize,
        u16_at(b, at + 2)? as usize,
        u16_at(b, at + 4)? as usize,
        u16_at(b, at + 6)? as usize,
    );
    let mut out = Objects { first_load: u64::MAX, syms: Vec::new() };
    for i in 0..phnum {
        let ph = usize::try_from(phoff).ok()?.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(b, ph)? == PT_LOAD {
            let vaddr =
                if wide { u64_at(b, ph.checked_add(0x10)?)? } else { u64::from(u32_at(b, ph.checked_add(8)?)?) };
            out.first_load = out.first_load.min(vaddr);
        }
    }
    // Section header fields: type at 4; offset, size, link by class.
    let sh = |i: usize| usize::try_from(shoff).ok()?.checked_add(i.checked_mul(shentsize)?);
    let field = |s: usize, wide_at: usize, narrow_at: usize| {
        word_at(b, s.checked_add(if wide { wide_at } else { narrow_at })?, wide)
    };
    let mut tables = Vec::new();
    for i in 0..shnum {
        let s = sh(i)?;
        let kind = u32_at(b, s.checked_add(4)?)?;
        if kind == SHT_SYMTAB || kind == SHT_DYNSYM {
            let link = u32_at(b, s.checked_add(if wide { 0x28 } else { 0x18 })?)? as usize;
            tables.push((kind, field(s, 0x18, 0x10)?, field(s, 0x20, 0x14)?, link));
        }
    }
    // .symtab names file-local statics too; .dynsym is what a stripped
    // file keeps.
    tables.sort_by_key(|t| t.0 != SHT_SYMTAB);
    let (_, off, size, link) = *tables.first()?;
    let str_sh = sh(link)?;
    let str_off = usize::try_from(field(str_sh, 0x18, 0x10)?).ok()?;
    let entsize = if wide { 24 } else { 16 };
    let (off, size) = (usize::try_from(off).ok()?, usize::try_from(size).ok()?);
    // Entries within the file only (`size` is the file's word).
    for e in (off..off.saturating_add(size).min(b.len())).step_by(entsize) {
        let name = u32_at(b, e)? as usize;
        let (value, sz, info) = if wide {
            (u64_at(b, e.checked_add(8)?)?, u64_at(b, e.checked_add(16)?)?, *b.get(e.checked_add(4)?)?)
        } else {
            (
                u64::from(u32_at(b, e.checked_add(4)?)?),
                u64::from(u32_at(b, e.checked_add(8)?)?),
                *b.get(e.checked_add(12)?)?,
            )
        };
        let kind = info & 0xf;
        if (kind == STT_OBJECT || kind == STT_TLS) && sz > 0 && value > 0 {
            if let Some(n) = name_at(b, str_off.checked_add(name)?).filter(|n| !n.is_empty()) {
                out.syms.push((value, sz, n));
            }
        }
    }
    Some(out)
}

/// The data objects of the file at `path` as process `pid` sees it (its
/// root: a container's), unless it is not a readable ELF within MAX_FILE.
fn read_objects(pid: u32, path: &str) -> Option<Objects> {
    use std::io::Read;
    let f = std::fs::File::open(format!("/proc/{pid}/root{path}")).ok()?;
    if f.metadata().ok()?.len() > MAX_FILE {
        return None;
    }
    let mut b = Vec::new();
    f.take(MAX_FILE).read_to_end(&mut b).ok()?;
    objects(&b)
}

/// The object of `objs` covering `vaddr`.
fn covering(objs: &Objects, vaddr: u64) -> Option<&str> {
    objs.syms.iter().find(|(v, sz, _)| vaddr >= *v && vaddr - v < *sz).map(|(_, _, n)| n.as_str())
}

/// Names addresses of processes; files parsed once.
#[derive(Default)]
pub(crate) struct SymbolNames {
    files: HashMap<String, Option<Objects>>,
}

impl SymbolNames {
    /// The data symbol process `pid`'s address `addr` lies in, or None.
    pub(crate) fn name(&mut self, pid: u32, addr: u64) -> Option<String> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        // Each file's mapping of file offset 0: where its image starts.
        let mut seen = Vec::new();
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let (range, _perms, offset, _dev, _inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let Some(path) = f.next().filter(|p| p.starts_with('/')) else { continue };
            if u64::from_str_radix(offset, 16).ok()? != 0 || seen.contains(&path) {
                continue;
            }
            seen.push(path);
            let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
            if self.files.len() >= MAX_FILES && !self.files.contains_key(path) {
                self.files.clear();
            }
            let objs = self.files.entry(path.to_string()).or_insert_with(|| read_objects(pid, path));
            let Some(objs) = objs else { continue };
            let bias = start.wrapping_sub(objs.first_load & !0xfff);
            if let Some(n) = covering(objs, addr.wrapping_sub(bias)) {
                return Some(n.to_string());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_an_elf() {
        assert!(objects(b"\x7fELF").is_none());
        assert!(objects(&[0u8; 64]).is_none());
        // Offsets near usize::MAX in an ELF header: None, no overflow.
        let mut wild = vec![0u8; 0x40];
        wild[..6].copy_from_slice(b"\x7fELF\x02\x01");
        wild[0x20..0x30].fill(0xff);
        wild[0x36..0x3e].copy_from_slice(&[0x38, 0, 2, 0, 0x40, 0, 3, 0]);
        assert!(objects(&wild).is_none());
        // A process's mappings name no symbol at address 0 (the naming
        // itself is proven live, on tests/fixtures/lm_lock.c's mutex).
        assert_eq!(SymbolNames::default().name(std::process::id(), 0), None);
    }
}
