// SPDX-License-Identifier: MIT
//! A gzip member as the zlib stream that zlib's `uncompress()` reads: gzip
//! (a host tool everywhere, Yocto included) deflates, the zlib that libbpf
//! already links inflates, and no deflate code is built.

use crate::error::Error;

/// A gzip member (RFC 1952) as a zlib stream (RFC 1950) of the same
/// deflate data: zlib header, the deflate blocks, Adler-32 of `raw`.
pub fn zlib_of_gzip(gz: &[u8], raw: &[u8]) -> Result<Vec<u8>, Error> {
    let bad = |why: &str| Error::Gzip(why.to_string());
    if gz.len() < 18 || gz[..3] != [0x1f, 0x8b, 8] {
        return Err(bad("not a deflate gzip member"));
    }
    // FLG bits: FEXTRA 4 (a length, then that many bytes), FNAME 8 and
    // FCOMMENT 16 (zero-terminated), FHCRC 2 (two bytes).
    let flags = gz[3];
    let mut at = 10;
    if flags & 4 != 0 {
        at += 2 + usize::from(u16::from_le_bytes([gz[at], gz[at + 1]]));
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            at += gz
                .get(at..)
                .and_then(|r| r.iter().position(|&b| b == 0))
                .ok_or_else(|| bad("unterminated header field"))?
                + 1;
        }
    }
    if flags & 2 != 0 {
        at += 2;
    }
    let deflate = gz.get(at..gz.len() - 8).ok_or_else(|| bad("short gzip member"))?;
    let isize = u32::from_le_bytes(gz[gz.len() - 4..].try_into().unwrap());
    if isize as usize != raw.len() & 0xffff_ffff {
        return Err(Error::Gzip(format!("gzip says {isize} bytes, the object has {}", raw.len())));
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in raw {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    // CMF 0x78: deflate, 32 KiB window; FLG 0xda: level 9, check bits.
    let mut z = vec![0x78, 0xda];
    z.extend_from_slice(deflate);
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    Ok(z)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf abc | gzip -9 -n`.
    const ABC_GZ: [u8; 23] = [
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x4b, 0x4c, 0x4a, 0x06, 0x00, 0xc2, 0x41, 0x24,
        0x35, 0x03, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn the_deflate_data_is_rewrapped_with_adler32() {
        let z = zlib_of_gzip(&ABC_GZ, b"abc").unwrap();
        // zlib.compress(b"abc", 9) in Python: the same deflate block.
        assert_eq!(z, [0x78, 0xda, 0x4b, 0x4c, 0x4a, 0x06, 0x00, 0x02, 0x4d, 0x01, 0x27]);
    }

    #[test]
    fn header_fields_are_skipped() {
        // FNAME set: "a.o\0" after the fixed header.
        let mut named = ABC_GZ[..10].to_vec();
        named[3] = 8;
        named.extend_from_slice(b"a.o\0");
        named.extend_from_slice(&ABC_GZ[10..]);
        assert_eq!(zlib_of_gzip(&named, b"abc"), zlib_of_gzip(&ABC_GZ, b"abc"));
    }

    #[test]
    fn a_member_of_another_object_or_no_member_is_an_error() {
        assert!(matches!(zlib_of_gzip(&ABC_GZ, b"abcd"), Err(Error::Gzip(w)) if w.contains("gzip says 3 bytes")));
        assert!(zlib_of_gzip(b"\x1f\x8b\x08", b"").is_err());
        let mut unterminated = ABC_GZ.to_vec();
        unterminated[3] = 8;
        unterminated[10..].fill(1);
        assert!(zlib_of_gzip(&unterminated, b"abc").is_err());
    }
}
