// SPDX-License-Identifier: MIT
//! What latmon reads and edits in the BPF objects clang writes: the section
//! table, `.BTF` and `.BTF.ext`. Little-endian ELF64 only: clang
//! `-target bpf` writes it on every host latmon builds on. Offsets never
//! move: edits zero bytes in place.

use std::collections::BTreeSet;

use crate::error::Error;

/// `.BTF` and `.BTF.ext` headers start with this magic (`BTF_MAGIC`).
const BTF_MAGIC: u16 = 0xeb9f;

fn bytes<const N: usize>(d: &[u8], at: usize) -> Result<[u8; N], Error> {
    d.get(at..at.checked_add(N).ok_or(Error::Truncated("offset"))?)
        .map(|b| b.try_into().expect("N bytes"))
        .ok_or(Error::Truncated("field"))
}

pub(crate) fn u16_at(d: &[u8], at: usize) -> Result<u16, Error> {
    bytes(d, at).map(u16::from_le_bytes)
}

pub(crate) fn u32_at(d: &[u8], at: usize) -> Result<u32, Error> {
    bytes(d, at).map(u32::from_le_bytes)
}

fn usize_at(d: &[u8], at: usize) -> Result<usize, Error> {
    bytes(d, at).map(|b| u64::from_le_bytes(b) as usize)
}

/// File offset and size of the section named `name`, if there is one.
pub fn section(d: &[u8], name: &str) -> Result<Option<(usize, usize)>, Error> {
    if d.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err(Error::NotElf64Le);
    }
    let shoff = usize_at(d, 0x28)?;
    let shentsize = usize::from(u16_at(d, 0x3a)?);
    let shnum = usize::from(u16_at(d, 0x3c)?);
    let shstrndx = usize::from(u16_at(d, 0x3e)?);
    // Elf64_Shdr: sh_name u32 at 0, sh_offset u64 at 0x18, sh_size at 0x20.
    let header = |i: usize| -> Result<(usize, usize, usize), Error> {
        let h = shoff + i * shentsize;
        Ok((u32_at(d, h)? as usize, usize_at(d, h + 0x18)?, usize_at(d, h + 0x20)?))
    };
    let names = header(shstrndx)?.1;
    for i in 0..shnum {
        let (n, off, size) = header(i)?;
        let at = d.get(names + n..).ok_or(Error::Truncated("section name"))?;
        if at.strip_prefix(name.as_bytes()).is_some_and(|rest| rest.first() == Some(&0)) {
            return Ok(Some((off, size)));
        }
    }
    Ok(None)
}

/// How many bytes of CO-RE relocation records the object carries (the
/// `core_relo_len` of its `.BTF.ext` header; 0 without one). libbpf needs
/// kernel BTF to load an object exactly when this is not 0 (or when a
/// program type needs BTF), so the no-BTF builds must have 0.
pub fn core_relo_bytes(obj: &[u8]) -> Result<u32, Error> {
    let Some((off, size)) = section(obj, ".BTF.ext")? else { return Ok(0) };
    let ext = obj.get(off..off + size).ok_or(Error::Truncated(".BTF.ext"))?;
    // struct btf_ext_header: magic u16, version u8, flags u8, hdr_len
    // u32, func_info off/len, line_info off/len, then (hdr_len >= 32)
    // core_relo off/len.
    if u16_at(ext, 0)? != BTF_MAGIC {
        return Err(Error::BadMagic(".BTF.ext"));
    }
    if u32_at(ext, 4)? < 32 {
        return Ok(0); // written before CO-RE existed
    }
    if ext.len() < 32 {
        return Err(Error::Truncated(".BTF.ext header"));
    }
    u32_at(ext, 28)
}

/// Drops the BTF line info: `.BTF.ext`'s line_info records (instruction ->
/// source line) and the source-line strings only they name in `.BTF`.
/// libbpf passes line info to the kernel only for verifier messages and
/// `bpftool prog dump` source interleaving; loading, CO-RE relocation
/// (`.BTF.ext` core_relo) and func_info do not use it. It is ~20 % of a
/// CO-RE object, and the board binary embeds them all (the 1.5 MiB limit,
/// scripts/build-static.sh). The header's line_info_len becomes 0 (libbpf
/// then reads none) and the bytes are zeroed in place, so no offset moves
/// and the packed object shrinks. An object without `.BTF` or
/// `.BTF.ext` is left as it is.
pub fn drop_line_info(d: &mut [u8]) -> Result<(), Error> {
    let (Some((btf_off, btf_size)), Some((ext_off, ext_size))) = (section(d, ".BTF")?, section(d, ".BTF.ext")?) else {
        return Ok(());
    };
    // .BTF.ext header: magic u16, version u8, flags u8, hdr_len u32,
    // func_info off/len, line_info off/len (offsets after the header).
    if u16_at(d, ext_off)? != BTF_MAGIC {
        return Err(Error::BadMagic(".BTF.ext"));
    }
    let hdr_len = u32_at(d, ext_off + 4)? as usize;
    let li_off = ext_off + hdr_len + u32_at(d, ext_off + 16)? as usize;
    let li_len = u32_at(d, ext_off + 20)? as usize;
    if li_len == 0 {
        return Ok(());
    }
    if li_off + li_len > ext_off + ext_size {
        return Err(Error::Truncated("line_info past .BTF.ext"));
    }
    // The strings the line info names (file names, source lines): per
    // section, sec_name_off u32 and num_info u32, then num_info records
    // of the size the line info starts with: insn_off, file_name_off,
    // line_off, line_col (u32 each).
    let rec = u32_at(d, li_off)? as usize;
    let mut named = BTreeSet::new();
    let mut at = li_off + 4;
    while at + 8 <= li_off + li_len {
        let n = u32_at(d, at + 4)? as usize;
        at += 8;
        for _ in 0..n {
            named.insert(u32_at(d, at + 4)?);
            named.insert(u32_at(d, at + 8)?);
            at += rec;
        }
    }
    // .BTF header: magic, version, flags, hdr_len, type off/len, str off/len.
    if u16_at(d, btf_off)? != BTF_MAGIC {
        return Err(Error::BadMagic(".BTF"));
    }
    let bhdr = u32_at(d, btf_off + 4)? as usize;
    let (type_off, type_len) = (u32_at(d, btf_off + 8)? as usize, u32_at(d, btf_off + 12)? as usize);
    let (str_off, str_len) = (u32_at(d, btf_off + 16)? as usize, u32_at(d, btf_off + 20)? as usize);
    let strs = btf_off + bhdr + str_off;
    if strs + str_len > btf_off + btf_size || btf_off + bhdr + type_off + type_len > btf_off + btf_size {
        return Err(Error::Truncated(".BTF sections past .BTF"));
    }
    let words = |b: &[u8]| b.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect::<Vec<_>>();
    // A string a type or func_info also names stays: types hold name_off
    // words, so keep any string whose offset appears as a word there (an
    // over-approximation: only ever keeps more).
    let types = btf_off + bhdr + type_off;
    let mut used: BTreeSet<u32> = words(&d[types..types + type_len]).into_iter().collect();
    // So does one that func_info or core_relo (section names, access
    // strings) may name: every word of .BTF.ext outside the line info.
    for (a, b) in [(ext_off, li_off), (li_off + li_len, ext_off + ext_size)] {
        used.extend(words(&d[a..b]));
    }
    for &o in named.iter().filter(|o| **o != 0 && !used.contains(o)) {
        let o = strs + o as usize;
        let end = d[o..strs + str_len].iter().position(|&c| c == 0).map_or(strs + str_len, |e| o + e);
        d[o..end].fill(0);
    }
    d[li_off..li_off + li_len].fill(0);
    d[ext_off + 20..ext_off + 24].copy_from_slice(&0u32.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian ELF64 file: the header, then each section's bytes,
    /// then `.shstrtab` and the section headers (index 0 the null one).
    pub(crate) fn object(sections: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut d = vec![0u8; 64];
        d[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        let mut names = vec![0u8];
        let mut placed = Vec::new();
        for (name, body) in sections {
            placed.push((names.len() as u32, d.len() as u64, body.len() as u64));
            names.extend_from_slice(name.as_bytes());
            names.push(0);
            d.extend_from_slice(body);
        }
        let shstrtab = (names.len() as u32, d.len() as u64);
        names.extend_from_slice(b".shstrtab\0");
        let strtab_size = names.len() as u64;
        d.extend_from_slice(&names);
        let shoff = d.len() as u64;
        let mut header = |name: u32, off: u64, size: u64| {
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(&name.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&off.to_le_bytes());
            h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
            d.extend_from_slice(&h);
        };
        header(0, 0, 0);
        for &(n, off, size) in &placed {
            header(n, off, size);
        }
        header(shstrtab.0, shstrtab.1, strtab_size);
        d[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        d[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        d[0x3c..0x3e].copy_from_slice(&(placed.len() as u16 + 2).to_le_bytes());
        d[0x3e..0x40].copy_from_slice(&(placed.len() as u16 + 1).to_le_bytes());
        d
    }

    fn le(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A `.BTF.ext` of hdr_len 32: func_info (8 bytes: rec size, one
    /// word), line_info (given words), core_relo_len `relo`.
    fn btf_ext(line_info: &[u32], relo: u32) -> Vec<u8> {
        let func = le(&[8, 0x11]);
        let li = le(line_info);
        let mut e = vec![0x9f, 0xeb, 1, 0];
        e.extend(le(&[32, 0, func.len() as u32, func.len() as u32, li.len() as u32, 0, relo]));
        e.extend(func);
        e.extend(li);
        e
    }

    /// A `.BTF` whose string section is `strings` and whose one type
    /// word names string `type_name`.
    fn btf(strings: &[u8], type_name: u32) -> Vec<u8> {
        let mut b = vec![0x9f, 0xeb, 1, 0];
        b.extend(le(&[24, 0, 4, 4, strings.len() as u32]));
        b.extend(le(&[type_name]));
        b.extend_from_slice(strings);
        b
    }

    #[test]
    fn sections_are_found_by_their_whole_name() {
        let d = object(&[(".BTF.ext", vec![1, 2]), (".BTF", vec![3])]);
        let (off, size) = section(&d, ".BTF").unwrap().unwrap();
        assert_eq!(&d[off..off + size], [3]);
        assert_eq!(section(&d, ".BT").unwrap(), None, "a prefix of a name is not the name");
        assert_eq!(section(b"\x7fELF\x01\x01", ".BTF"), Err(Error::NotElf64Le));
        assert_eq!(section(&d[..0x30], ".BTF"), Err(Error::Truncated("field")));
    }

    #[test]
    fn core_relocations_are_counted_from_the_ext_header() {
        assert_eq!(core_relo_bytes(&object(&[(".BTF.ext", btf_ext(&[], 48))])), Ok(48));
        assert_eq!(core_relo_bytes(&object(&[(".text", vec![0; 8])])), Ok(0), "no .BTF.ext, nothing to relocate");
        let mut old = btf_ext(&[], 48);
        old[4] = 24; // hdr_len of a .BTF.ext written before CO-RE
        assert_eq!(core_relo_bytes(&object(&[(".BTF.ext", old)])), Ok(0));
        assert_eq!(core_relo_bytes(&object(&[(".BTF.ext", vec![0; 32])])), Err(Error::BadMagic(".BTF.ext")));
        assert_eq!(core_relo_bytes(b"not an object"), Err(Error::NotElf64Le));
    }

    #[test]
    fn line_info_and_the_strings_only_it_names_are_zeroed() {
        // Strings: 1 "a.c" (a file name), 5 "x = 1;" (a source line), 12
        // "map" (a type's name, also named by the line info).
        let strings = b"\0a.c\0x = 1;\0map\0";
        // One section (name 0) with two records of 16 bytes.
        let line_info = [16, 0, 2, 0, 1, 5, 0, 8, 1, 12, 0];
        let mut d = object(&[(".BTF", btf(strings, 12)), (".BTF.ext", btf_ext(&line_info, 0))]);
        let before = d.clone();
        drop_line_info(&mut d).unwrap();
        assert_eq!(d.len(), before.len(), "no offset moves");
        let (b, _) = section(&d, ".BTF").unwrap().unwrap();
        assert_eq!(&d[b + 28..b + 28 + strings.len()], b"\0\0\0\0\0\0\0\0\0\0\0\0map\0");
        let (e, size) = section(&d, ".BTF.ext").unwrap().unwrap();
        assert_eq!(u32_at(&d, e + 20), Ok(0), "line_info_len");
        assert!(d[e + 40..e + size].iter().all(|&b| b == 0), "the records");
        // The header and func_info stay, but for line_info_len.
        let mut kept = before[e..e + 40].to_vec();
        kept[20..24].fill(0);
        assert_eq!(d[e..e + 40], kept[..]);
        // Again: nothing left to drop, nothing changes.
        let once = d.clone();
        drop_line_info(&mut d).unwrap();
        assert_eq!(d, once);
    }

    #[test]
    fn line_info_past_its_section_is_an_error() {
        let mut ext = btf_ext(&[16, 0, 1, 0, 1, 5, 0], 0);
        ext[20] = 200; // line_info_len
        let mut d = object(&[(".BTF", btf(b"\0a\0", 0)), (".BTF.ext", ext)]);
        assert_eq!(drop_line_info(&mut d), Err(Error::Truncated("line_info past .BTF.ext")));
        let mut plain = object(&[(".text", vec![0; 8])]);
        let copy = plain.clone();
        drop_line_info(&mut plain).unwrap();
        assert_eq!(plain, copy, "an object without BTF stays as it is");
    }
}
