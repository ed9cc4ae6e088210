// SPDX-License-Identifier: MIT
//! The decoder: a byte stream of any read sizes into frames; CRC after
//! COBS, resynchronising at the next delimiter after any damage.

use std::fmt;

use serde::Serialize;

use super::*;

/// Why bytes between two delimiters were not a good frame. The decoder
/// reports the error and resynchronises at the next delimiter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The first fragment of a stream did not decode: the receiver joined
    /// mid-frame (not counted as damage).
    Joined { len: usize },
    /// More than [`MAX_ENCODED`] bytes without a delimiter.
    Oversize { len: usize },
    /// The COBS structure is broken (a code byte points past the delimiter).
    Cobs { len: usize },
    /// Shorter than version, kind and CRC.
    Short { len: usize },
    /// The CRC-32 does not match the payload.
    Crc { len: usize, expected: u32, actual: u32 },
    /// The version byte is not [`PROTOCOL_VERSION`].
    Version { version: u8 },
    /// The body is not a valid message of the kind it claims.
    Body { kind: Kind, why: String },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Joined { len } => write!(f, "partial frame at stream start ({len} bytes)"),
            Self::Oversize { len } => write!(f, "no delimiter within {len} bytes"),
            Self::Cobs { len } => write!(f, "broken COBS encoding ({len} bytes)"),
            Self::Short { len } => write!(f, "frame too short ({len} bytes)"),
            Self::Crc { len, expected, actual } => {
                write!(f, "CRC mismatch ({len} bytes): frame says {expected:08x}, computed {actual:08x}")
            }
            Self::Version { version } => write!(f, "unsupported protocol version {version}"),
            Self::Body { kind, why } => write!(f, "bad {} body: {why}", kind.name()),
        }
    }
}

impl std::error::Error for FrameError {}

impl FrameError {
    /// Short machine-readable reason (JSON output, counters).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Joined { .. } => "joined",
            Self::Oversize { .. } => "oversize",
            Self::Cobs { .. } => "cobs",
            Self::Short { .. } => "short",
            Self::Crc { .. } => "crc",
            Self::Version { .. } => "version",
            Self::Body { .. } => "body",
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

/// Turns a byte stream (any read sizes) into frames. Never panics on input.
pub struct FrameDecoder {
    buf: Box<[u8]>,
    len: usize,
    overflow: usize,
    /// No delimiter seen yet: the first fragment may be a partial frame.
    at_start: bool,
    pub stats: LinkStats,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    pub fn new() -> Self {
        FrameDecoder {
            buf: vec![0; MAX_ENCODED].into_boxed_slice(),
            len: 0,
            overflow: 0,
            at_start: true,
            stats: LinkStats::default(),
        }
    }

    /// A new stream begins (reconnected): forget a partial frame and judge
    /// the first fragment leniently again. Statistics are kept.
    pub fn restart(&mut self) {
        self.len = 0;
        self.overflow = 0;
        self.at_start = true;
    }

    /// Feed bytes; `out` gets every complete frame or the reason a fragment
    /// between delimiters was discarded.
    pub fn feed(&mut self, mut input: &[u8], out: &mut dyn FnMut(Result<Frame, FrameError>)) {
        self.stats.bytes += input.len() as u64;
        while !input.is_empty() {
            let (chunk, delim) = match input.iter().position(|&b| b == DELIMITER) {
                Some(p) => (&input[..p], true),
                None => (input, false),
            };
            let room = self.buf.len() - self.len;
            if self.overflow > 0 || chunk.len() > room {
                self.overflow += self.len + chunk.len();
                self.len = 0;
            } else {
                self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
                self.len += chunk.len();
            }
            if delim {
                self.end_fragment(out);
                input = &input[chunk.len() + 1..];
            } else {
                input = &[];
            }
        }
    }

    /// A delimiter arrived: judge the fragment before it.
    fn end_fragment(&mut self, out: &mut dyn FnMut(Result<Frame, FrameError>)) {
        let at_start = std::mem::replace(&mut self.at_start, false);
        if self.overflow > 0 {
            let len = std::mem::take(&mut self.overflow);
            self.len = 0;
            self.stats.resyncs += 1;
            if at_start {
                return out(Err(FrameError::Joined { len }));
            }
            self.stats.oversize += 1;
            return out(Err(FrameError::Oversize { len }));
        }
        let n = std::mem::take(&mut self.len);
        if n == 0 {
            return; // back-to-back delimiters: an idle line or a flush
        }
        let res = decode_fragment(&mut self.buf[..n]);
        match &res {
            Ok(Frame::Unknown { .. }) => self.stats.unknown_kinds += 1,
            Ok(_) => self.stats.frames_good += 1,
            Err(e) => {
                self.stats.resyncs += 1;
                if at_start {
                    return out(Err(FrameError::Joined { len: n }));
                }
                match e {
                    FrameError::Cobs { .. } => self.stats.cobs_errors += 1,
                    FrameError::Short { .. } => self.stats.short_frames += 1,
                    FrameError::Crc { .. } => self.stats.crc_errors += 1,
                    FrameError::Version { .. } => self.stats.version_mismatch += 1,
                    FrameError::Body { .. } => self.stats.body_errors += 1,
                    FrameError::Oversize { .. } => self.stats.oversize += 1,
                    FrameError::Joined { .. } => {}
                }
            }
        }
        out(res)
    }
}

/// Decode one COBS fragment (delimiter excluded), in place.
pub fn decode_fragment(buf: &mut [u8]) -> Result<Frame, FrameError> {
    let enc_len = buf.len();
    let n = cobs::decode_in_place(buf).map_err(|_| FrameError::Cobs { len: enc_len })?;
    decode_payload(&buf[..n])
}

/// Decode a COBS-decoded payload: CRC, version, kind, body.
pub fn decode_payload(p: &[u8]) -> Result<Frame, FrameError> {
    if p.len() < FRAME_OVERHEAD {
        return Err(FrameError::Short { len: p.len() });
    }
    let (data, crc) = p.split_at(p.len() - 4);
    let expected = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let actual = crate::crc32::hash(data);
    if expected != actual {
        return Err(FrameError::Crc { len: p.len(), expected, actual });
    }
    if data[0] != PROTOCOL_VERSION {
        return Err(FrameError::Version { version: data[0] });
    }
    let body = &data[2..];
    let Some(kind) = Kind::from_byte(data[1]) else {
        return Ok(Frame::Unknown { kind: data[1], len: p.len() });
    };
    let bad = |e: postcard::Error| FrameError::Body { kind, why: e.to_string() };
    Ok(match kind {
        Kind::Hello => Frame::Hello(body_of(body).map_err(bad)?),
        Kind::Summary => Frame::Summary(body_of(body).map_err(bad)?),
        Kind::Alert => {
            let a: Alert = body_of(body).map_err(bad)?;
            if a.causes.len() > crate::anatomy::MAX_CAUSES {
                return Err(FrameError::Body {
                    kind,
                    why: format!("{} causes in an alert, at most {}", a.causes.len(), crate::anatomy::MAX_CAUSES),
                });
            }
            let longest = a.causes.iter().map(|c| c.name.len()).chain([a.comm.len()]).max().unwrap_or(0);
            if longest > super::MAX_ALERT_NAME_LEN {
                return Err(FrameError::Body {
                    kind,
                    why: format!("a {longest}-byte name in an alert, at most {}", super::MAX_ALERT_NAME_LEN),
                });
            }
            Frame::Alert(a)
        }
        Kind::Status => Frame::Status(body_of(body).map_err(bad)?),
        Kind::Delta => Frame::Delta(body_of(body).map_err(bad)?),
        Kind::Request => Frame::Request(body_of(body).map_err(bad)?),
    })
}

/// postcard-decode a body: trailing bytes (fields a newer revision
/// appended) are ignored; a body that ends early (an older revision) reads
/// its missing trailing fields as zero / empty / None.
fn body_of<T: serde::de::DeserializeOwned>(body: &[u8]) -> postcard::Result<T> {
    match postcard::take_from_bytes::<T>(body) {
        Err(postcard::Error::DeserializeUnexpectedEnd) => {
            let mut padded = Vec::with_capacity(body.len() + TRAILING_DEFAULT_PAD);
            padded.extend_from_slice(body);
            padded.resize(body.len() + TRAILING_DEFAULT_PAD, 0);
            postcard::take_from_bytes::<T>(&padded).map(|(v, _)| v)
        }
        r => r.map(|(v, _)| v),
    }
}
