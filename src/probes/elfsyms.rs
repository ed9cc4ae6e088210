// SPDX-License-Identifier: MIT
//! The data symbol an address of a process lies in: its mappings
//! (/proc/PID/maps) say which ELF file is loaded where, that file's symbol
//! table (.symtab, else .dynsym) which object covers the address. A
//! global `pthread_mutex_t ctrl_mutex` is found even in .bss past the
//! file-backed pages: an address is matched against the image whose load
//! base (its mapping of file offset 0) is the closest below it, with that
//! file's load bias (where its first PT_LOAD segment went). ELF64 and
//! ELF32, little-endian (x86_64, aarch64, armv7).
//!
//! Bounded (issue 40): one file per lookup, the one mapped there, opened
//! through /proc/PID/map_files (the inode the process runs, not whatever
//! its path names now: an OTA update renames a new binary over it; a path
//! with a space is no path to split); only its ELF header, program and
//! section headers and one symbol table with its strings are read, with
//! positioned reads of at most [`MAX_LOOKUP_BYTES`] in all; parsed files
//! are kept by (dev, inode), [`MAX_FILES`] of them and [`MAX_CACHE_BYTES`]
//! of symbols at most. It runs on a worker thread (src/probes/symworker.rs),
//! never on the agent's interval.

use std::collections::HashMap;
use std::os::unix::fs::{FileExt, MetadataExt};

const PT_LOAD: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_OBJECT: u8 = 1;
const STT_TLS: u8 = 6;

/// Bytes one lookup reads at most: headers, one symbol table and its
/// strings (a library with 300 000 symbols fits; past it the lookup
/// gives up and the lock keeps its address).
pub(crate) const MAX_LOOKUP_BYTES: u64 = 16 << 20;
/// Program or section header tables larger than this are not an ELF we
/// read (a real one has tens of entries of 32..64 bytes).
const MAX_HEADERS: u64 = 256 << 10;
/// Files whose symbols are kept at once; beyond it the cache starts over.
pub(crate) const MAX_FILES: usize = 64;
/// Bytes of kept symbols (names and addresses) in all; beyond it the
/// cache starts over.
pub(crate) const MAX_CACHE_BYTES: usize = 8 << 20;

/// Where bytes of a file come from: positioned reads within a budget.
pub(crate) trait ReadAt {
    /// `len` bytes at `off`, or None (short, failed).
    fn read_at(&self, off: u64, len: u64) -> Option<Vec<u8>>;
}

impl ReadAt for std::fs::File {
    fn read_at(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        let mut b = vec![0u8; usize::try_from(len).ok()?];
        self.read_exact_at(&mut b, off).ok()?;
        Some(b)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        let s = usize::try_from(off).ok()?;
        Some(self.get(s..s.checked_add(usize::try_from(len).ok()?)?)?.to_vec())
    }
}

/// A file with a byte budget: each read is charged, none past it.
struct Budgeted<'a, R: ReadAt + ?Sized> {
    file: &'a R,
    left: std::cell::Cell<u64>,
}

impl<R: ReadAt + ?Sized> Budgeted<'_, R> {
    fn read(&self, off: u64, len: u64) -> Option<Vec<u8>> {
        let left = self.left.get().checked_sub(len)?;
        self.left.set(left);
        self.file.read_at(off, len)
    }
}

/// An ELF file's data objects and its first loaded segment's vaddr.
/// Names in one string (`names[at..at + len]`): a few bytes per symbol
/// beside its name, counted against [`MAX_CACHE_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Objects {
    first_load: u64,
    syms: Vec<(u64, u64, u32, u32)>,
    names: String,
}

impl Objects {
    fn bytes(&self) -> usize {
        self.syms.len() * std::mem::size_of::<(u64, u64, u32, u32)>() + self.names.len()
    }

    /// The object covering `vaddr`.
    fn covering(&self, vaddr: u64) -> Option<&str> {
        let &(_, _, at, len) = self.syms.iter().find(|(v, sz, _, _)| vaddr >= *v && vaddr - v < *sz)?;
        self.names.get(at as usize..(at + len) as usize)
    }
}

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

/// The raw bytes of a NUL-terminated name (escaped for labels later).
fn name_at(b: &[u8], at: usize) -> Option<&[u8]> {
    let tail = b.get(at..)?;
    Some(&tail[..tail.iter().position(|&c| c == 0)?])
}

/// The data objects of an ELF file, reading at most `budget` bytes of it
/// (None: not a little-endian ELF, or its tables are over the budget).
pub(crate) fn objects<R: ReadAt + ?Sized>(file: &R, budget: u64) -> Option<Objects> {
    let f = Budgeted { file, left: std::cell::Cell::new(budget) };
    let h = f.read(0, 0x40).or_else(|| f.read(0, 0x34))?;
    if h.get(..4)? != b"\x7fELF" || *h.get(5)? != 1 {
        return None;
    }
    let wide = *h.get(4)? == 2;
    let (phoff, shoff) = if wide {
        (word_at(&h, 0x20, wide)?, word_at(&h, 0x28, wide)?)
    } else {
        (word_at(&h, 0x1c, wide)?, word_at(&h, 0x20, wide)?)
    };
    let at = if wide { 0x36 } else { 0x2a };
    let (phentsize, phnum, shentsize, shnum) =
        (u16_at(&h, at)? as u64, u16_at(&h, at + 2)? as u64, u16_at(&h, at + 4)? as u64, u16_at(&h, at + 6)? as u64);
    let table = |off: u64, entsize: u64, n: u64| {
        let len = entsize.checked_mul(n)?;
        (len <= MAX_HEADERS).then(|| f.read(off, len)).flatten()
    };
    let ph = table(phoff, phentsize, phnum)?;
    let mut out = Objects { first_load: u64::MAX, ..Default::default() };
    for i in 0..phnum as usize {
        let p = i.checked_mul(phentsize as usize)?;
        if u32_at(&ph, p)? == PT_LOAD {
            let vaddr = if wide { u64_at(&ph, p + 0x10)? } else { u64::from(u32_at(&ph, p + 8)?) };
            out.first_load = out.first_load.min(vaddr);
        }
    }
    let sh = table(shoff, shentsize, shnum)?;
    // Section header fields: type at 4; offset, size, link by class.
    let field = |s: usize, wide_at: usize, narrow_at: usize| {
        word_at(&sh, s.checked_add(if wide { wide_at } else { narrow_at })?, wide)
    };
    let section = |i: usize| -> Option<(u32, u64, u64, usize)> {
        let s = i.checked_mul(shentsize as usize)?;
        let link = u32_at(&sh, s.checked_add(if wide { 0x28 } else { 0x18 })?)? as usize;
        Some((u32_at(&sh, s.checked_add(4)?)?, field(s, 0x18, 0x10)?, field(s, 0x20, 0x14)?, link))
    };
    let mut tables: Vec<_> =
        (0..shnum as usize).filter_map(section).filter(|t| t.0 == SHT_SYMTAB || t.0 == SHT_DYNSYM).collect();
    // .symtab names file-local statics too; .dynsym is what a stripped
    // file keeps.
    tables.sort_by_key(|t| t.0 != SHT_SYMTAB);
    let (_, off, size, link) = *tables.first()?;
    let (_, str_off, str_size, _) = section(link)?;
    let syms = f.read(off, size)?;
    let strs = f.read(str_off, str_size)?;
    let entsize = if wide { 24 } else { 16 };
    // Whole entries only (`size` is the file's word).
    for e in syms.chunks_exact(entsize) {
        let name = u32_at(e, 0)? as usize;
        let (value, sz, info) = if wide {
            (u64_at(e, 8)?, u64_at(e, 16)?, e[4])
        } else {
            (u64::from(u32_at(e, 4)?), u64::from(u32_at(e, 8)?), e[12])
        };
        let kind = info & 0xf;
        if (kind == STT_OBJECT || kind == STT_TLS) && sz > 0 && value > 0 {
            let Some(n) = name_at(&strs, name).filter(|n| !n.is_empty()) else { continue };
            // Kept raw; the label escapes (lock.rs cut_label). Not UTF-8:
            // each byte as a char of its own, escaped there.
            let at = u32::try_from(out.names.len()).ok()?;
            out.names.extend(n.iter().map(|&c| char::from(c)));
            let len = u32::try_from(out.names.len()).ok()? - at;
            out.syms.push((value, sz, at, len));
        }
    }
    Some(out)
}

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// The file's device (major, minor) and inode; (0, 0), 0 when anonymous.
    pub dev: (u32, u32),
    pub inode: u64,
    /// The rest of the line (a path may hold spaces, end in " (deleted)").
    pub path: String,
}

/// Parse one maps line (`start-end perms offset maj:min inode   path`).
pub(crate) fn parse_mapping(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        rest = &t[end..];
        Some(&t[..end]).filter(|f| !f.is_empty())
    };
    let (range, _perms, offset, dev, inode) = (field()?, field()?, field()?, field()?, field()?);
    let (s, e) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    Some(Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: (u32::from_str_radix(maj, 16).ok()?, u32::from_str_radix(min, 16).ok()?),
        inode: inode.parse().ok()?,
        path: rest.trim_start().to_string(),
    })
}

/// The file image `addr` may lie in: of the files mapped from offset 0
/// (their load base), the one with the highest base at or below `addr`
/// (its .data and .bss follow its base). Its mapping of offset 0.
pub(crate) fn image_for(maps: &str, addr: u64) -> Option<Mapping> {
    maps.lines()
        .filter_map(parse_mapping)
        .filter(|m| m.inode != 0 && m.offset == 0 && m.start <= addr)
        .max_by_key(|m| m.start)
}

/// The file at mapping `m` of process `pid`: the mapped inode itself,
/// through /proc/PID/map_files (needs CAP_SYS_ADMIN or
/// CAP_CHECKPOINT_RESTORE). Without them, the path as the process sees
/// it, only if it is still that inode (else None: a replaced file is
/// never read for another's symbols).
fn open_mapped(pid: u32, m: &Mapping) -> Option<std::fs::File> {
    if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)) {
        return Some(f);
    }
    let f = std::fs::File::open(format!("/proc/{pid}/root{}", m.path)).ok()?;
    let md = f.metadata().ok()?;
    let dev = (libc::major(md.dev()), libc::minor(md.dev()));
    (md.ino() == m.inode && dev == m.dev).then_some(f)
}

/// Names addresses of processes; files parsed once, by (dev, inode).
#[derive(Default)]
pub(crate) struct SymbolNames {
    files: HashMap<((u32, u32), u64), Option<Objects>>,
    bytes: usize,
}

impl SymbolNames {
    /// The data symbol process `pid`'s address `addr` lies in, or None.
    /// Its bytes raw (see [`objects`]).
    pub(crate) fn name(&mut self, pid: u32, addr: u64) -> Option<String> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        let m = image_for(&maps, addr)?;
        let key = (m.dev, m.inode);
        if !self.files.contains_key(&key) {
            let objs = open_mapped(pid, &m).and_then(|f| objects(&f, MAX_LOOKUP_BYTES));
            let size = objs.as_ref().map_or(0, Objects::bytes);
            if self.files.len() >= MAX_FILES || self.bytes + size > MAX_CACHE_BYTES {
                self.files.clear();
                self.bytes = 0;
            }
            self.bytes += size;
            self.files.insert(key, objs);
        }
        let objs = self.files.get(&key)?.as_ref()?;
        let bias = m.start.wrapping_sub(objs.first_load & !0xfff);
        objs.covering(addr.wrapping_sub(bias)).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_an_elf() {
        assert!(objects(&b"\x7fELF"[..], MAX_LOOKUP_BYTES).is_none());
        assert!(objects(&[0u8; 64][..], MAX_LOOKUP_BYTES).is_none());
        // Offsets near usize::MAX in an ELF header: None, no overflow.
        let mut wild = [0u8; 0x40];
        wild[..6].copy_from_slice(b"\x7fELF\x02\x01");
        wild[0x20..0x30].fill(0xff);
        wild[0x36..0x3e].copy_from_slice(&[0x38, 0, 2, 0, 0x40, 0, 3, 0]);
        assert!(objects(&wild[..], MAX_LOOKUP_BYTES).is_none());
        // A process's mappings name no symbol at address 0 (the naming
        // itself is proven live, on tests/fixtures/lm_lock.c's mutex).
        assert_eq!(SymbolNames::default().name(std::process::id(), 0), None);
    }

    /// A library this test maps (libc has data objects: `environ`,
    /// `stdout`; this binary is stripped): parsed within the budget, and
    /// not with a budget smaller than its symbol table (no lookup reads
    /// more).
    #[test]
    fn a_lookup_reads_within_its_budget() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let files = maps.lines().filter_map(parse_mapping).filter(|m| m.inode != 0 && m.offset == 0);
        let Some((path, o)) = files
            .filter_map(|m| Some((m.path.clone(), objects(&std::fs::File::open(&m.path).ok()?, MAX_LOOKUP_BYTES)?)))
            .find(|(_, o)| !o.syms.is_empty())
        else {
            eprintln!("no mapped ELF with data symbols (a static, stripped test binary): nothing to read");
            return;
        };
        assert!(o.bytes() > 0, "{path}");
        let f = std::fs::File::open(&path).unwrap();
        assert!(objects(&f, 4096).is_none(), "{path}: tables over the budget are not read");
    }

    #[test]
    fn maps_lines_with_spaces_and_deleted_files_parse_whole() {
        let maps = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234                       /opt/my app/ctl (deleted)
55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1234                       /opt/my app/ctl (deleted)
55d0c0a04000-55d0c0a06000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--p 00000000 08:02 99 /lib/libc.so.6
";
        let m = image_for(maps, 0x55d0c0a05000).unwrap();
        assert_eq!((m.start, m.dev, m.inode), (0x55d0c0a00000, (0xfd, 1), 1234));
        assert_eq!(m.path, "/opt/my app/ctl (deleted)");
        assert_eq!(image_for(maps, 0x7f0000000800).unwrap().inode, 99);
        assert_eq!(image_for(maps, 0x1000), None, "below every image");
    }
}
