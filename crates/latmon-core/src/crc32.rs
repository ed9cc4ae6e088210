// SPDX-License-Identifier: MIT
//! CRC-32 (IEEE 802.3, as zlib/PNG/Ethernet: reflected 0xEDB88320, initial
//! and final XOR 0xFFFFFFFF) for the wire frames. One 1 KiB table built at
//! compile time: frames are a few hundred bytes, so a byte-at-a-time loop is
//! ample, and it keeps the static binaries small (crc32fast carried 24 KiB of
//! tables plus per-CPU variants).

const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC-32 of `data` (same value as `crc32fast::hash` and zlib's `crc32`).
pub fn hash(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::hash;

    #[test]
    fn check_values() {
        assert_eq!(hash(b""), 0);
        assert_eq!(hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(hash(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
        assert_eq!(hash(&[0u8; 32]), 0x190A_55AD);
    }
}
