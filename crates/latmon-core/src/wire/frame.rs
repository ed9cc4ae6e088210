// SPDX-License-Identifier: MIT
//! Framing without std or an allocator: a byte stream of any read sizes
//! into checked payloads (COBS, CRC-32, version), in one fixed buffer, and
//! the summary sequence accounting. Shared by the desktop receivers
//! ([`super::FrameDecoder`], [`super::Tracker`], std) and the fixed-memory
//! one ([`super::FixedTracker`], any target), so the two split, check and
//! count the same bytes the same way.

use serde::{Deserialize, Serialize};

use super::{Kind, DELIMITER, FRAME_OVERHEAD, MAX_ENCODED, MAX_SEQ_GAP, PROTOCOL_VERSION, TRAILING_DEFAULT_PAD};

/// Why bytes between two delimiters were not a frame, as far as framing
/// can tell (a body that is not its kind's message is the caller's verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFault {
    /// The first fragment of a stream did not decode: the receiver joined
    /// mid-frame (not counted as damage).
    Joined { len: usize },
    /// More than the buffer's encoded bytes without a delimiter.
    Oversize { len: usize },
    /// The COBS structure is broken (a code byte points past the delimiter).
    Cobs { len: usize },
    /// Shorter than version, kind and CRC.
    Short { len: usize },
    /// The CRC-32 does not match the payload.
    Crc { len: usize, expected: u32, actual: u32 },
    /// The version byte is not [`PROTOCOL_VERSION`].
    Version { version: u8 },
}

impl FrameFault {
    /// Short machine-readable reason (JSON output, counters).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Joined { .. } => "joined",
            Self::Oversize { .. } => "oversize",
            Self::Cobs { .. } => "cobs",
            Self::Short { .. } => "short",
            Self::Crc { .. } => "crc",
            Self::Version { .. } => "version",
        }
    }
}

/// Link quality as the receiver saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    pub bytes: u64,
    pub frames_good: u64,
    /// Good frames of a kind this receiver does not know (skipped).
    pub unknown_kinds: u64,
    pub crc_errors: u64,
    pub cobs_errors: u64,
    pub short_frames: u64,
    pub oversize: u64,
    pub version_mismatch: u64,
    pub body_errors: u64,
    /// Times the decoder discarded bytes and restarted at the next
    /// delimiter (every damaged frame, plus a partial frame at join).
    pub resyncs: u64,
}

impl LinkStats {
    /// Nothing seen yet (`Default`, usable in a `const fn`).
    pub const ZERO: LinkStats = LinkStats {
        bytes: 0,
        frames_good: 0,
        unknown_kinds: 0,
        crc_errors: 0,
        cobs_errors: 0,
        short_frames: 0,
        oversize: 0,
        version_mismatch: 0,
        body_errors: 0,
        resyncs: 0,
    };

    /// Damaged frames (every error except a partial frame at join).
    pub fn errors(&self) -> u64 {
        self.crc_errors
            + self.cobs_errors
            + self.short_frames
            + self.oversize
            + self.version_mismatch
            + self.body_errors
    }
}

/// A payload that passed COBS, CRC and version: its kind byte and body.
#[derive(Debug, Clone, Copy)]
pub struct RawFrame<'a> {
    /// The kind byte ([`Kind`] when known).
    pub kind: u8,
    /// The body as sent (between the kind byte and the CRC).
    pub body: &'a [u8],
    /// The body followed by [`TRAILING_DEFAULT_PAD`] zero bytes: an older
    /// sender's shorter body reads its missing trailing fields as zero.
    pub padded: &'a [u8],
    /// Payload length (version, kind, body, CRC).
    pub len: usize,
    /// The first fragment of the stream: a failure means the receiver
    /// joined mid-frame (report [`FrameFault::Joined`], not damage).
    pub at_start: bool,
}

impl<'a> RawFrame<'a> {
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_byte(self.kind)
    }

    /// postcard-decode the body: trailing bytes (fields a newer revision
    /// appended) are ignored; a body that ends early (an older revision)
    /// reads its missing trailing fields as zero / empty / None. Returns
    /// the value and the bytes it was read from (the body or the padded
    /// body), for a second pass over the same bytes.
    pub fn decode<T: Deserialize<'a>>(&self) -> postcard::Result<(T, &'a [u8])> {
        body_of(self.body, self.padded)
    }
}

/// postcard-decode `body`, or `padded` (the body and zeros) when the body
/// ends early; see [`RawFrame::decode`].
pub fn body_of<'a, T: Deserialize<'a>>(body: &'a [u8], padded: &'a [u8]) -> postcard::Result<(T, &'a [u8])> {
    match postcard::take_from_bytes::<T>(body) {
        Err(postcard::Error::DeserializeUnexpectedEnd) => {
            postcard::take_from_bytes::<T>(padded).map(|(v, _)| (v, padded))
        }
        r => r.map(|(v, _)| (v, body)),
    }
}

/// Check a COBS-decoded payload's length, CRC and version: its kind byte
/// and body.
pub fn check_payload(p: &[u8]) -> Result<(u8, &[u8]), FrameFault> {
    if p.len() < FRAME_OVERHEAD {
        return Err(FrameFault::Short { len: p.len() });
    }
    let (data, crc) = p.split_at(p.len() - 4);
    let expected = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let actual = crate::crc32::hash(data);
    if expected != actual {
        return Err(FrameFault::Crc { len: p.len(), expected, actual });
    }
    if data[0] != PROTOCOL_VERSION {
        return Err(FrameFault::Version { version: data[0] });
    }
    Ok((data[1], &data[2..]))
}

/// [`FrameSplitter`]'s buffer for the whole receiver limit: [`MAX_ENCODED`]
/// bytes of a frame and the zero padding behind its body (4 178 bytes).
pub const SPLITTER_BUF: usize = MAX_ENCODED + TRAILING_DEFAULT_PAD;

/// Splits a byte stream (any read sizes) at delimiters into checked
/// payloads, decoding COBS in place in one buffer of `N` bytes: fragments
/// of up to `N - TRAILING_DEFAULT_PAD` encoded bytes (the rest of the
/// buffer holds the zero padding of a short body); a longer one is
/// discarded as oversize. [`SPLITTER_BUF`] keeps the spec's receiver
/// limit (payloads of 4 096 bytes). Never panics on input; no allocation.
pub struct FrameSplitter<const N: usize> {
    buf: [u8; N],
    len: usize,
    overflow: usize,
    /// A delimiter was seen: the fragment is not the stream's first, which
    /// may be a partial frame. (False at start, so a splitter in a
    /// `static` is all zeros: .bss, not a flash copy in .data.)
    past_start: bool,
}

impl<const N: usize> Default for FrameSplitter<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> FrameSplitter<N> {
    /// Encoded bytes a fragment may have.
    const ROOM: usize = {
        assert!(N > TRAILING_DEFAULT_PAD + FRAME_OVERHEAD, "FrameSplitter buffer too small");
        N - TRAILING_DEFAULT_PAD
    };

    pub const fn new() -> Self {
        FrameSplitter { buf: [0; N], len: 0, overflow: 0, past_start: false }
    }

    /// A new stream begins (reconnected): forget a partial frame and judge
    /// the first fragment leniently again.
    pub fn restart(&mut self) {
        self.len = 0;
        self.overflow = 0;
        self.past_start = false;
    }

    /// Feed bytes. `out` gets every payload that passed COBS, CRC and
    /// version, and returns whether its body was good (known kinds: it
    /// decoded as its message; unknown kinds: true); or it gets the fault
    /// of a discarded fragment (its return value is then ignored). `stats`
    /// counts both.
    pub fn feed<F>(&mut self, stats: &mut LinkStats, mut input: &[u8], mut out: F)
    where
        F: FnMut(Result<RawFrame<'_>, FrameFault>) -> bool,
    {
        stats.bytes += input.len() as u64;
        while !input.is_empty() {
            let (chunk, delim) = match input.iter().position(|&b| b == DELIMITER) {
                Some(p) => (&input[..p], true),
                None => (input, false),
            };
            if self.overflow > 0 || chunk.len() > Self::ROOM - self.len {
                self.overflow += self.len + chunk.len();
                self.len = 0;
            } else {
                self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
                self.len += chunk.len();
            }
            if delim {
                self.end_fragment(stats, &mut out);
                input = &input[chunk.len() + 1..];
            } else {
                input = &[];
            }
        }
    }

    /// A delimiter arrived: judge the fragment before it.
    fn end_fragment<F>(&mut self, stats: &mut LinkStats, out: &mut F)
    where
        F: FnMut(Result<RawFrame<'_>, FrameFault>) -> bool,
    {
        let at_start = !core::mem::replace(&mut self.past_start, true);
        if self.overflow > 0 {
            let len = core::mem::take(&mut self.overflow);
            self.len = 0;
            stats.resyncs += 1;
            if at_start {
                out(Err(FrameFault::Joined { len }));
                return;
            }
            stats.oversize += 1;
            out(Err(FrameFault::Oversize { len }));
            return;
        }
        let n = core::mem::take(&mut self.len);
        if n == 0 {
            return; // back-to-back delimiters: an idle line or a flush
        }
        let checked = match cobs::decode_in_place(&mut self.buf[..n]) {
            Ok(p) => check_payload(&self.buf[..p]).map(|(kind, body)| (kind, body.len(), p)),
            Err(_) => Err(FrameFault::Cobs { len: n }),
        };
        let (kind, body_len, p) = match checked {
            Ok(k) => k,
            Err(fault) => {
                stats.resyncs += 1;
                if at_start {
                    out(Err(FrameFault::Joined { len: n }));
                    return;
                }
                match fault {
                    FrameFault::Cobs { .. } => stats.cobs_errors += 1,
                    FrameFault::Short { .. } => stats.short_frames += 1,
                    FrameFault::Crc { .. } => stats.crc_errors += 1,
                    FrameFault::Version { .. } => stats.version_mismatch += 1,
                    FrameFault::Oversize { .. } => stats.oversize += 1,
                    FrameFault::Joined { .. } => {}
                }
                out(Err(fault));
                return;
            }
        };
        // The CRC is checked: its bytes and what follows become the
        // padding (p <= n - 1 <= ROOM - 1, so the padding fits in N).
        let end = 2 + body_len;
        self.buf[end..end + TRAILING_DEFAULT_PAD].fill(0);
        let raw = RawFrame {
            kind,
            body: &self.buf[2..end],
            padded: &self.buf[2..end + TRAILING_DEFAULT_PAD],
            len: p,
            at_start,
        };
        let known = raw.kind().is_some();
        if out(Ok(raw)) {
            if known {
                stats.frames_good += 1;
            } else {
                stats.unknown_kinds += 1;
            }
        } else {
            stats.resyncs += 1;
            if !at_start {
                stats.body_errors += 1;
            }
        }
    }
}

/// What a summary frame's seq means to the receiver ([`SeqCount::tick`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqTick {
    /// Another frame of the summary seen last.
    Same,
    /// The seq went back within one boot id: the sender counts from the
    /// start again (drop every snapshot).
    Restart,
    /// A new summary (losses before it counted).
    Next,
}

/// The summary sequence accounting of a receiver: which summaries were
/// lost, and which seqs are not to be believed. The rule of
/// docs/wire-format.md ("gaps = summaries lost", revision 3's `base_seq`),
/// in one place for every receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqCount {
    pub last_seq: Option<u64>,
    /// Summaries never seen (gaps in seq; runs of a revision 3 sender).
    pub summaries_lost: u64,
    /// Summaries whose seq jumped ahead by more than [`MAX_SEQ_GAP`]: a
    /// sender's error, not losses.
    pub seq_jumps: u64,
    /// The last run of lost summaries: (last seq received before, seq that
    /// the next summary built on).
    pub last_lost: Option<(u64, u64)>,
    /// Summaries (kind 2 and 5) received.
    pub summaries: u64,
}

impl SeqCount {
    /// A frame of summary `seq` arrived: count what was lost before it.
    /// `base_seq` (revision 3) names the summary it builds on; without it
    /// a gap in seq is the loss.
    pub fn tick(&mut self, seq: u64, base_seq: u64) -> SeqTick {
        let mut tick = SeqTick::Next;
        match self.last_seq {
            Some(l) if seq == l => return SeqTick::Same,
            Some(l) if seq < l => tick = SeqTick::Restart,
            Some(l) if base_seq != 0 && base_seq > l => {
                self.summaries_lost += 1;
                self.last_lost = Some((l, base_seq));
            }
            Some(l) if base_seq == 0 && seq > l + 1 => match seq - l - 1 {
                gap if gap <= MAX_SEQ_GAP => self.summaries_lost += gap,
                _ => self.seq_jumps += 1,
            },
            _ => {}
        }
        self.last_seq = Some(seq);
        self.summaries += 1;
        tick
    }

    /// The sender restarted (new boot id): no summary seen of this one.
    pub fn new_boot(&mut self) {
        self.last_seq = None;
    }
}
