// SPDX-License-Identifier: MIT
//! The wire format: postcard messages in CRC-checked, COBS-framed packets.
//! Pure (no I/O). The normative description is `docs/wire-format.md`; its
//! golden vectors are checked byte for byte by the tests below.
//!
//! ```text
//! frame   = COBS(payload) 0x00
//! payload = version:u8  kind:u8  body:postcard  crc:u32 little-endian
//! crc     = CRC-32 (ISO-HDLC, as zlib) over version ‖ kind ‖ body
//! ```
//!
//! Summaries carry *cumulative* histograms (sparse, varint buckets): a lost
//! frame loses no data, the receiver derives interval deltas ([`Tracker`]).
//! The encoder packs probes into frames of at most [`FRAME_BUDGET`] bytes on
//! the wire and never allocates once warmed up; the decoder
//! ([`FrameDecoder`]) takes arbitrary partial reads, checks the CRC after
//! COBS decoding, and resynchronises at the next delimiter after any damage.

#[cfg(feature = "std")]
pub mod anatomy;
mod certificate;
#[cfg(feature = "std")]
pub mod cycle;
#[cfg(feature = "std")]
mod decode;
#[cfg(feature = "std")]
mod encode;
pub mod fixed;
mod frame;
#[cfg(feature = "std")]
pub mod loops;
#[cfg(feature = "std")]
mod messages;
#[cfg(feature = "std")]
mod status;
#[cfg(feature = "std")]
mod summary_body;
#[cfg(feature = "std")]
mod thresholds;
// Feature "testkit": the latmon crate's tests (src/sinks/frames/budget/) reuse
// `model_hist`; its other helpers serve only this crate's tests.
#[cfg(all(any(test, feature = "testkit"), feature = "std"))]
#[cfg_attr(not(test), allow(dead_code, unused_imports))]
#[doc(hidden)]
pub mod tests;
#[cfg(feature = "std")]
mod tracker;

pub use certificate::*;
#[cfg(feature = "std")]
pub use cycle::WireCycle;
#[cfg(feature = "std")]
pub use decode::*;
#[cfg(feature = "std")]
pub use encode::*;
pub use fixed::{Applied, FixedReceiver, FixedTracker, Received};
pub use frame::*;
#[cfg(feature = "std")]
pub use loops::{LoopList, LoopsAssembly, LoopsState, WireLoop, WireLoopCycles};
#[cfg(feature = "std")]
pub use messages::*;
#[cfg(feature = "std")]
pub use status::*;
#[cfg(feature = "std")]
pub use summary_body::{Entries, LinkHeader, SummaryHeader};
#[cfg(feature = "std")]
pub use tracker::*;

/// The version byte that starts every payload. Bumped only for incompatible
/// changes; compatible growth appends fields (see [`PROTOCOL_REVISION`]).
pub const PROTOCOL_VERSION: u8 = 1;
/// Compatible revision within [`PROTOCOL_VERSION`], carried in Hello:
/// incremented whenever fields are appended to a message.
/// Revision 1 appended `flags`, `bpf_cpu_ppm` and `detached` to Status;
/// revision 2 appended `missed`.
/// Revision 3 added Delta and Request, appended `merge` and `base_seq` to
/// Summary and `link` to Status.
/// Revision 4 appended `shed` (alert records shed per probe) to Status.
/// Revision 5 appended the anatomy (`cpu_woken`, `cpu_ran`, `causes`) to
/// Alert.
/// Revision 6 appended `dropped` (alert records lost before any output,
/// per probe) to Status.
/// Revision 7 marks waits in `ProbeDesc::mode` ([`WAIT_MODE_PREFIX`],
/// [`WAITS_MODE_PREFIX`]): no byte layout changed.
/// Revision 8 appends a cycle record's own fields to Alert
/// ([`WireCycle`]).
/// Revision 9 appends `thresholds` (each probe's alert threshold, by id)
/// to Hello, sent only when a probe has one.
/// Revision 10 adds Cause kinds 11 (a lock wait's owner) and 12 (a
/// priority inversion's preempter): no byte layout changed; an older
/// receiver shows them as unknown causes, still summing.
/// Revision 11 appends `certificate` (the stored `latmon certify`
/// summary, [`WireCertificate`]) to Hello after `thresholds`, sent only
/// when the board has one: a Hello without keeps its revision 9 bytes.
/// Revision 12 adds Loops (kind 7, [`LoopList`]): the loops discovery
/// lists and each watched loop's since-start counts, before the summary
/// of the same interval; sent only when there are loops.
pub const PROTOCOL_REVISION: u8 = 12;
/// `ProbeDesc::mode` of a series whose calls wait (revision 7): it is
/// not in its family line but in the family's waits line. Older senders
/// never send it; an older receiver shows it as part of the mode's words.
pub const WAIT_MODE_PREFIX: &str = "wait; ";
/// `ProbeDesc::mode` of a family's waits line, `FAMILY:waits` (revision
/// 7): the sum of the family's wait series.
pub const WAITS_MODE_PREFIX: &str = "waits sum; ";

/// The wait role a `ProbeDesc::mode` says (none without a prefix: a
/// sender before revision 7, or a probe that does not wait).
#[cfg(feature = "std")]
pub fn wait_of_mode(mode: &str) -> crate::ident::Wait {
    use crate::ident::Wait;
    if mode.starts_with(WAIT_MODE_PREFIX) {
        Wait::Series
    } else if mode.starts_with(WAITS_MODE_PREFIX) {
        Wait::Sum
    } else {
        Wait::No
    }
}
/// `ProbeDesc::mode` of a series a budgeted link rolled up into its
/// family's `FAMILY:other` entry (sent as a table update): the series is
/// no longer carried on its own.
pub const ROLLED_MODE_PREFIX: &str = "rolled up into ";

/// The frame delimiter.
pub const DELIMITER: u8 = 0x00;
/// Largest frame the encoder produces, on the wire, delimiter included
/// (45 ms at 115200 baud 8N1).
pub const FRAME_BUDGET: usize = 512;
/// Largest payload that still fits [`FRAME_BUDGET`] after COBS (one overhead
/// byte per 254) and the delimiter.
pub const PAYLOAD_BUDGET: usize = payload_budget(FRAME_BUDGET);
/// Largest payload a receiver accepts (room for future, larger frames).
pub const MAX_PAYLOAD: usize = 4096;
/// Largest COBS-encoded frame a receiver buffers before declaring it oversize.
pub const MAX_ENCODED: usize = MAX_PAYLOAD + MAX_PAYLOAD.div_ceil(254) + 1;
/// Version byte, kind byte and CRC-32.
pub(crate) const FRAME_OVERHEAD: usize = 2 + 4;
/// Zero bytes appended when a body is shorter than the receiver's message:
/// fields appended by a later revision then read as 0 / empty / None.
pub const TRAILING_DEFAULT_PAD: usize = 64;
/// Longest probe name/kind/attach/mode string put in Hello (bytes).
pub const MAX_NAME_LEN: usize = 96;
/// Longest comm or cause name in an Alert (bytes; the kernel's is 16, an
/// IRQ's action names from /proc/interrupts are cut to this). A receiver
/// refuses an Alert with a longer one.
pub const MAX_ALERT_NAME_LEN: usize = 64;
/// Probe ids a receiver tracks: `0..MAX_PROBES`. Entries with larger ids
/// are ignored (and counted), so a frame cannot make a receiver allocate
/// state for 65536 probes.
pub const MAX_PROBES: usize = 1024;
/// A seq gap larger than this between two Summaries is not believed to be
/// lost summaries (at the shortest interval, 10 ms, it is almost three
/// hours of them): a wild seq is counted in `Tracker::seq_jumps`, never
/// added to `summaries_lost`.
pub const MAX_SEQ_GAP: u64 = 1 << 20;

const fn payload_budget(frame: usize) -> usize {
    // Largest n with n + ceil(n / 254) + 1 <= frame.
    let mut n = frame;
    while n + n.div_ceil(254) + 1 > frame {
        n -= 1;
    }
    n
}

/// Message kinds (the byte after the version byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Summary = 2,
    Alert = 3,
    Status = 4,
    Delta = 5,
    Request = 6,
    Loops = 7,
}

impl Kind {
    pub(crate) fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Summary,
            3 => Kind::Alert,
            4 => Kind::Status,
            5 => Kind::Delta,
            6 => Kind::Request,
            7 => Kind::Loops,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Summary => "summary",
            Kind::Alert => "alert",
            Kind::Status => "status",
            Kind::Delta => "delta",
            Kind::Request => "request",
            Kind::Loops => "loops",
        }
    }
}

/// LEB128 length of a postcard varint.
pub const fn varint_len(v: u64) -> usize {
    if v == 0 {
        1
    } else {
        (64 - v.leading_zeros() as usize).div_ceil(7)
    }
}
