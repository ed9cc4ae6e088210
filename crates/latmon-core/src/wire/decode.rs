// SPDX-License-Identifier: MIT
//! The decoder: a byte stream of any read sizes into frames; CRC after
//! COBS, resynchronising at the next delimiter after any damage.

use std::fmt;

use super::*;

/// Why bytes between two delimiters were not a good frame. The decoder
/// reports the error and resynchronises at the next delimiter. The
/// framing's faults are [`FrameFault`]'s (the no_std receiver's), one
/// variant each; `Body` is the message's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    Joined {
        len: usize,
    },
    Oversize {
        len: usize,
    },
    Cobs {
        len: usize,
    },
    Short {
        len: usize,
    },
    Crc {
        len: usize,
        expected: u32,
        actual: u32,
    },
    Version {
        version: u8,
    },
    /// The body is not a valid message of the kind it claims.
    Body {
        kind: Kind,
        why: String,
    },
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

impl From<FrameFault> for FrameError {
    fn from(f: FrameFault) -> Self {
        match f {
            FrameFault::Joined { len } => Self::Joined { len },
            FrameFault::Oversize { len } => Self::Oversize { len },
            FrameFault::Cobs { len } => Self::Cobs { len },
            FrameFault::Short { len } => Self::Short { len },
            FrameFault::Crc { len, expected, actual } => Self::Crc { len, expected, actual },
            FrameFault::Version { version } => Self::Version { version },
        }
    }
}

/// Turns a byte stream (any read sizes) into frames. Never panics on input.
/// The framing is the no_std receiver's ([`FrameSplitter`]): both split,
/// check and count the same bytes the same way.
pub struct FrameDecoder {
    split: Box<FrameSplitter<SPLITTER_BUF>>,
    pub stats: LinkStats,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    pub fn new() -> Self {
        FrameDecoder { split: Box::default(), stats: LinkStats::default() }
    }

    /// A new stream begins (reconnected): forget a partial frame and judge
    /// the first fragment leniently again. Statistics are kept.
    pub fn restart(&mut self) {
        self.split.restart();
    }

    /// Feed bytes; `out` gets every complete frame or the reason a fragment
    /// between delimiters was discarded.
    pub fn feed(&mut self, input: &[u8], out: &mut dyn FnMut(Result<Frame, FrameError>)) {
        self.split.feed(&mut self.stats, input, |r| match r {
            Err(fault) => {
                out(Err(fault.into()));
                false
            }
            Ok(raw) => match decode_body(raw.kind, raw.len, raw.body, raw.padded) {
                Ok(f) => {
                    out(Ok(f));
                    true
                }
                Err(_) if raw.at_start => {
                    out(Err(FrameError::Joined { len: raw.len }));
                    false
                }
                Err(e) => {
                    out(Err(e));
                    false
                }
            },
        })
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
    let (kind, body) = check_payload(p)?;
    let mut padded = Vec::with_capacity(body.len() + TRAILING_DEFAULT_PAD);
    padded.extend_from_slice(body);
    padded.resize(body.len() + TRAILING_DEFAULT_PAD, 0);
    decode_body(kind, p.len(), body, &padded)
}

/// Decode a checked body of kind byte `kind` (payload length `len`).
fn decode_body(kind: u8, len: usize, body: &[u8], padded: &[u8]) -> Result<Frame, FrameError> {
    let Some(kind) = Kind::from_byte(kind) else {
        return Ok(Frame::Unknown { kind, len });
    };
    let bad = |e: postcard::Error| FrameError::Body { kind, why: e.to_string() };
    Ok(match kind {
        Kind::Hello => Frame::Hello(owned(body, padded).map_err(bad)?),
        Kind::Summary => Frame::Summary(owned(body, padded).map_err(bad)?),
        Kind::Alert => {
            let a: Alert = owned(body, padded).map_err(bad)?;
            if a.causes.len() > crate::anatomy::MAX_CAUSES {
                return Err(FrameError::Body {
                    kind,
                    why: format!("{} causes in an alert, at most {}", a.causes.len(), crate::anatomy::MAX_CAUSES),
                });
            }
            let names = a.causes.iter().map(|c| c.name.len()).chain([a.comm.len(), a.cycle.doing_name.len()]);
            let longest = names.max().unwrap_or(0);
            if longest > super::MAX_ALERT_NAME_LEN {
                return Err(FrameError::Body {
                    kind,
                    why: format!("a {longest}-byte name in an alert, at most {}", super::MAX_ALERT_NAME_LEN),
                });
            }
            Frame::Alert(a)
        }
        Kind::Status => Frame::Status(owned(body, padded).map_err(bad)?),
        Kind::Delta => Frame::Delta(owned(body, padded).map_err(bad)?),
        Kind::Request => Frame::Request(owned(body, padded).map_err(bad)?),
        Kind::Loops => {
            let l: LoopList = owned(body, padded).map_err(bad)?;
            let longest = l.loops.iter().map(|w| w.comm.len()).max().unwrap_or(0);
            if longest > super::MAX_ALERT_NAME_LEN {
                return Err(FrameError::Body {
                    kind,
                    why: format!("a {longest}-byte loop name, at most {}", super::MAX_ALERT_NAME_LEN),
                });
            }
            Frame::Loops(l)
        }
    })
}

/// An owned message from a body ([`body_of`]: trailing bytes ignored, a
/// short body read with zeros appended).
fn owned<T: serde::de::DeserializeOwned>(body: &[u8], padded: &[u8]) -> postcard::Result<T> {
    body_of(body, padded).map(|(v, _)| v)
}
