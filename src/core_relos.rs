// SPDX-License-Identifier: MIT
//! How many bytes of CO-RE relocation records a BPF object file carries
//! (the `core_relo_len` of its `.BTF.ext` header). libbpf needs kernel BTF
//! to load an object exactly when this is non-zero (or when a program type
//! needs BTF), so the no-BTF builds must have 0. Used by build.rs, which
//! refuses to embed a no-BTF object with relocations, and by the tests.
//! Self-contained (std only): build.rs includes this file with `#[path]`.

/// `core_relo_len` of the object's `.BTF.ext` (0 when it has none).
/// Little-endian ELF64 only: what clang emits for BPF on our targets.
pub fn core_relo_bytes(obj: &[u8]) -> Result<u32, String> {
    let u16_at = |off: usize| -> Result<u16, String> {
        obj.get(off..off + 2).map(|b| u16::from_le_bytes([b[0], b[1]])).ok_or_else(|| format!("truncated at {off}"))
    };
    let u32_at = |off: usize| -> Result<u32, String> {
        obj.get(off..off + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| format!("truncated at {off}"))
    };
    let u64_at = |off: usize| -> Result<usize, String> {
        obj.get(off..off + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or_else(|| format!("truncated at {off}"))
    };
    if obj.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF file".into());
    }
    if obj.get(4..6) != Some([2u8, 1].as_slice()) {
        return Err("not a little-endian ELF64 file".into());
    }
    let shoff = u64_at(0x28)?;
    let (shentsize, shnum, shstrndx) = (u16_at(0x3a)? as usize, u16_at(0x3c)? as usize, u16_at(0x3e)? as usize);
    // (name offset, file offset, size) of section i.
    let section = |i: usize| -> Result<(usize, usize, usize), String> {
        let h = shoff + i * shentsize;
        Ok((u32_at(h)? as usize, u64_at(h + 24)?, u64_at(h + 32)?))
    };
    let strtab = section(shstrndx)?.1;
    for i in 0..shnum {
        let (name, off, size) = section(i)?;
        let name_at = obj.get(strtab + name..).ok_or("section name out of range")?;
        if !name_at.starts_with(b".BTF.ext\0") {
            continue;
        }
        let ext = obj.get(off..off + size).ok_or(".BTF.ext out of range")?;
        // struct btf_ext_header: magic u16, version u8, flags u8, hdr_len
        // u32, func_info off/len, line_info off/len, then (hdr_len >= 32)
        // core_relo off/len.
        if ext.get(..2) != Some([0x9f, 0xeb].as_slice()) {
            return Err(".BTF.ext has a bad magic".into());
        }
        let hdr_len = u32_at(off + 4)?;
        if hdr_len < 32 {
            return Ok(0); // written before CO-RE existed
        }
        if ext.len() < 32 {
            return Err(".BTF.ext shorter than its header".into());
        }
        return u32_at(off + 28);
    }
    Ok(0)
}
