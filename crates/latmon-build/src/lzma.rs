// SPDX-License-Identifier: MIT
//! A decoder of LZMA streams (`xz --format=lzma`: the .lzma header, then
//! LZMA1 data), as the algorithm's specification (LZMA SDK, LzmaSpec)
//! gives it, for the one stream build.rs packs the BPF objects into
//! (latmon's `bpf::PACK`, written by [`crate::Pack`]). LZMA finds the objects' shared parts (BTF types,
//! each family's CO-RE and no-BTF builds, the tp_btf and raw_tp copies of
//! a program) across the whole pack, which deflate's 32 KiB window cannot:
//! 50 KB for what deflate made 113 KB of, for ~3 KB of code here.
//!
//! Only a prefix is decoded (the objects before the one wanted and that
//! one): the output is its own dictionary, so memory is that prefix, and
//! a distance past its start is an error, never a read out of bounds.

/// Why a stream does not decode.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// The 13-byte header is missing or its properties are out of range.
    Header,
    /// The data ended before `n` bytes were decoded.
    Truncated,
    /// A match reaches before the start of the output, a repeat comes
    /// first, or the range coder's first byte is not 0.
    Corrupt,
}

const PROB_INIT: u16 = 1024;
/// At most this much output is reserved before decoding (16 MiB).
const PREALLOCATE_MAX: usize = 16 << 20;
/// Probability bits (11) and the adaptation shift (5).
const BITS: u32 = 11;
const MOVE: u32 = 5;

struct RangeDecoder<'a> {
    src: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
    /// Read past the end of `src` (the bytes read as 0).
    overrun: bool,
}

impl<'a> RangeDecoder<'a> {
    fn new(src: &'a [u8]) -> Result<Self, Error> {
        if src.len() < 5 || src[0] != 0 {
            return Err(Error::Corrupt);
        }
        let code = u32::from_be_bytes([src[1], src[2], src[3], src[4]]);
        if code == u32::MAX {
            return Err(Error::Corrupt);
        }
        Ok(RangeDecoder { src, pos: 5, range: u32::MAX, code, overrun: false })
    }

    fn normalize(&mut self) {
        if self.range < 1 << 24 {
            let b = match self.src.get(self.pos) {
                Some(&b) => b,
                None => {
                    self.overrun = true;
                    0
                }
            };
            self.pos += 1;
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(b);
        }
    }

    fn bit(&mut self, p: &mut u16) -> u32 {
        let bound = (self.range >> BITS) * u32::from(*p);
        let b = if self.code < bound {
            self.range = bound;
            *p += ((1 << BITS) - *p) >> MOVE;
            0
        } else {
            self.range -= bound;
            self.code -= bound;
            *p -= *p >> MOVE;
            1
        };
        self.normalize();
        b
    }

    fn direct(&mut self, n: u32) -> u32 {
        let mut v = 0;
        for _ in 0..n {
            self.range >>= 1;
            let b = u32::from(self.code >= self.range);
            if b == 1 {
                self.code -= self.range;
            }
            v = (v << 1) | b;
            self.normalize();
        }
        v
    }

    /// A `bits`-bit symbol, most significant bit first (`probs`: 1 << bits).
    fn tree(&mut self, probs: &mut [u16], bits: u32) -> u32 {
        let mut m = 1;
        for _ in 0..bits {
            m = (m << 1) | self.bit(&mut probs[m as usize]);
        }
        m - (1 << bits)
    }

    /// A `bits`-bit symbol, least significant bit first.
    fn reverse(&mut self, probs: &mut [u16], bits: u32) -> u32 {
        let (mut m, mut v) = (1, 0);
        for i in 0..bits {
            let b = self.bit(&mut probs[m as usize]);
            m = (m << 1) | b;
            v |= b << i;
        }
        v
    }
}

/// A match length less 2: 3 bits (per position state), 3 more, or 8.
struct LenDecoder {
    choice: u16,
    choice2: u16,
    low: [[u16; 8]; 16],
    mid: [[u16; 8]; 16],
    high: [u16; 256],
}

impl LenDecoder {
    fn new() -> Self {
        LenDecoder {
            choice: PROB_INIT,
            choice2: PROB_INIT,
            low: [[PROB_INIT; 8]; 16],
            mid: [[PROB_INIT; 8]; 16],
            high: [PROB_INIT; 256],
        }
    }

    fn decode(&mut self, rc: &mut RangeDecoder, pos_state: usize) -> u32 {
        if rc.bit(&mut self.choice) == 0 {
            return rc.tree(&mut self.low[pos_state], 3);
        }
        if rc.bit(&mut self.choice2) == 0 {
            return 8 + rc.tree(&mut self.mid[pos_state], 3);
        }
        16 + rc.tree(&mut self.high, 8)
    }
}

/// The first `n` bytes the .lzma stream `src` decodes to (fewer only if
/// its end marker comes first).
pub fn decode_prefix(src: &[u8], n: usize) -> Result<Vec<u8>, Error> {
    let props = *src.first().ok_or(Error::Header)?;
    if props >= 9 * 5 * 5 || src.len() < 13 {
        return Err(Error::Header);
    }
    let (lc, lp, pb) = (u32::from(props % 9), u32::from(props / 9 % 5), u32::from(props / 45));
    let mut rc = RangeDecoder::new(&src[13..])?;
    let mut lit = vec![PROB_INIT; 0x300 << (lc + lp)];
    let mut is_match = [PROB_INIT; 12 << 4];
    let mut is_rep0_long = [PROB_INIT; 12 << 4];
    let (mut is_rep, mut is_rep_g0, mut is_rep_g1, mut is_rep_g2) =
        ([PROB_INIT; 12], [PROB_INIT; 12], [PROB_INIT; 12], [PROB_INIT; 12]);
    let mut pos_slot = [[PROB_INIT; 64]; 4];
    // Distances of slots 4..14: reverse trees of 1..5 bits side by side.
    let mut pos_special = [PROB_INIT; 1 + 128 - 14];
    let mut align = [PROB_INIT; 16];
    let (mut len_dec, mut rep_len_dec) = (LenDecoder::new(), LenDecoder::new());
    // The pack's size where the caller passes it (latmon's bpf::PACK); a
    // larger n (the whole stream) grows as it decodes.
    let mut out: Vec<u8> = Vec::with_capacity(n.min(PREALLOCATE_MAX));
    let (mut state, mut rep) = (0usize, [0u32; 4]);
    let pb_mask = (1usize << pb) - 1;
    let lp_mask = (1usize << lp) - 1;
    while out.len() < n {
        if rc.overrun {
            return Err(Error::Truncated);
        }
        let pos_state = out.len() & pb_mask;
        if rc.bit(&mut is_match[(state << 4) + pos_state]) == 0 {
            let prev = u32::from(out.last().copied().unwrap_or(0));
            let at = 0x300 * (((out.len() & lp_mask) << lc) + (prev >> (8 - lc)) as usize);
            let probs = &mut lit[at..at + 0x300];
            let mut sym = 1u32;
            if state >= 7 {
                let mut matched = u32::from(back(&out, rep[0])?);
                while sym < 0x100 {
                    let mb = (matched >> 7) & 1;
                    matched <<= 1;
                    let b = rc.bit(&mut probs[(((1 + mb) << 8) + sym) as usize]);
                    sym = (sym << 1) | b;
                    if mb != b {
                        break;
                    }
                }
            }
            while sym < 0x100 {
                sym = (sym << 1) | rc.bit(&mut probs[sym as usize]);
            }
            out.push((sym - 0x100) as u8);
            state = match state {
                0..=3 => 0,
                4..=9 => state - 3,
                _ => state - 6,
            };
            continue;
        }
        let len;
        if rc.bit(&mut is_rep[state]) != 0 {
            if out.is_empty() {
                return Err(Error::Corrupt);
            }
            if rc.bit(&mut is_rep_g0[state]) == 0 {
                if rc.bit(&mut is_rep0_long[(state << 4) + pos_state]) == 0 {
                    state = if state < 7 { 9 } else { 11 };
                    out.push(back(&out, rep[0])?);
                    continue;
                }
            } else {
                let dist;
                if rc.bit(&mut is_rep_g1[state]) == 0 {
                    dist = rep[1];
                } else {
                    if rc.bit(&mut is_rep_g2[state]) == 0 {
                        dist = rep[2];
                    } else {
                        dist = rep[3];
                        rep[3] = rep[2];
                    }
                    rep[2] = rep[1];
                }
                rep[1] = rep[0];
                rep[0] = dist;
            }
            len = rep_len_dec.decode(&mut rc, pos_state);
            state = if state < 7 { 8 } else { 11 };
        } else {
            rep = [0, rep[0], rep[1], rep[2]];
            len = len_dec.decode(&mut rc, pos_state);
            state = if state < 7 { 7 } else { 10 };
            let slot = rc.tree(&mut pos_slot[len.min(3) as usize], 6);
            rep[0] = if slot < 4 {
                slot
            } else {
                let bits = (slot >> 1) - 1;
                let base = (2 | (slot & 1)) << bits;
                if slot < 14 {
                    base + rc.reverse(&mut pos_special[(base - slot) as usize..], bits)
                } else {
                    base + (rc.direct(bits - 4) << 4) + rc.reverse(&mut align, 4)
                }
            };
            if rep[0] == u32::MAX {
                // The end marker.
                break;
            }
        }
        for _ in 0..len + 2 {
            if out.len() == n {
                break;
            }
            out.push(back(&out, rep[0])?);
        }
    }
    if rc.overrun {
        return Err(Error::Truncated);
    }
    Ok(out)
}

/// The byte `dist + 1` back from the end of `out`.
fn back(out: &[u8], dist: u32) -> Result<u8, Error> {
    let d = usize::try_from(dist).map_err(|_| Error::Corrupt)?;
    out.len().checked_sub(d + 1).map(|i| out[i]).ok_or(Error::Corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf 'latmon latmon latmon BPF BPF BPF' | xz --format=lzma -9e`
    const SMALL: &[u8] = &[
        0x5d, 0x00, 0x00, 0x00, 0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x36, 0x18, 0x4a, 0xef,
        0x8d, 0xbd, 0xa1, 0xa0, 0x48, 0xff, 0xa6, 0x06, 0x77, 0x7d, 0x6d, 0xf3, 0x37, 0xff, 0xff, 0xf4, 0xec, 0xc0,
        0x00,
    ];

    #[test]
    fn a_small_stream_decodes_whole_and_as_prefixes() {
        let want = b"latmon latmon latmon BPF BPF BPF";
        assert_eq!(decode_prefix(SMALL, 1000).unwrap(), want);
        for n in 0..want.len() {
            assert_eq!(decode_prefix(SMALL, n).unwrap(), want[..n], "prefix {n}");
        }
    }

    #[test]
    fn bad_streams_are_errors() {
        assert_eq!(decode_prefix(&[], 1), Err(Error::Header));
        assert_eq!(decode_prefix(&[225; 20], 1), Err(Error::Header));
        assert_eq!(decode_prefix(&SMALL[..20], 100), Err(Error::Truncated));
        let mut bad = SMALL.to_vec();
        bad[13] = 1;
        assert_eq!(decode_prefix(&bad, 10), Err(Error::Corrupt));
        // Every corruption of a byte decodes to something else or fails;
        // none reads out of bounds or panics.
        for i in 13..SMALL.len() {
            let mut s = SMALL.to_vec();
            s[i] ^= 0x55;
            let _ = decode_prefix(&s, 64);
        }
    }
}
