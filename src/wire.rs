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

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, SerializeTuple};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::bpf::limits::{HIST_MAX_LOG2, HIST_SUB_BITS};
use crate::hist::{Hist, BUCKETS};
use crate::summary::{AlertRecord, IntervalReport, ProbeInfo, ProbeReport};

/// The version byte that starts every payload. Bumped only for incompatible
/// changes; compatible growth appends fields (see [`PROTOCOL_REVISION`]).
pub const PROTOCOL_VERSION: u8 = 1;
/// Compatible revision within [`PROTOCOL_VERSION`], carried in Hello:
/// incremented whenever fields are appended to a message.
/// Revision 1 appended `flags`, `bpf_cpu_ppm` and `detached` to Status;
/// revision 2 appended `missed`.
pub const PROTOCOL_REVISION: u8 = 2;
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
const FRAME_OVERHEAD: usize = 2 + 4;
/// Zero bytes appended when a body is shorter than the receiver's message:
/// fields appended by a later revision then read as 0 / empty / None.
const TRAILING_DEFAULT_PAD: usize = 64;
/// Longest probe name/kind/attach/mode string put in Hello (bytes).
pub const MAX_NAME_LEN: usize = 96;
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
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Summary,
            3 => Kind::Alert,
            4 => Kind::Status,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "hello",
            Kind::Summary => "summary",
            Kind::Alert => "alert",
            Kind::Status => "status",
        }
    }
}

// ---------------------------------------------------------------- messages

/// How a probe's histogram buckets map to nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketScheme {
    /// 0 = log-linear (hist.rs): one bucket per value below 2^sub_bits, then
    /// 2^sub_bits linear buckets per power of two up to 2^max_log2.
    pub family: u8,
    pub sub_bits: u8,
    pub max_log2: u8,
}

impl BucketScheme {
    /// The scheme this build of latmon uses (from bpf/latmon.h).
    pub const LATMON: BucketScheme =
        BucketScheme { family: 0, sub_bits: HIST_SUB_BITS as u8, max_log2: HIST_MAX_LOG2 as u8 };
}

/// One row of the probe table in Hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeDesc {
    /// Index used by Summary, Alert and Status (position in the agent's list).
    pub id: u16,
    pub name: String,
    pub kind: String,
    pub attach: String,
    pub mode: String,
    pub scheme: BucketScheme,
}

/// Who is talking: sent first and repeated periodically so a receiver that
/// joins late can name probes. A long probe table spans several Hello
/// frames (each carries a part of `probes`; `probe_count` is the total).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol_revision: u8,
    pub latmon_version: String,
    pub board: String,
    pub kernel: String,
    pub boot_id: u32,
    /// CLOCK_MONOTONIC when the agent started counting.
    pub start_ns: u64,
    pub interval_ns: u64,
    pub probe_count: u16,
    pub probes: Vec<ProbeDesc>,
}

/// Borrowed twin of [`Hello`] (same bytes) used to pack probe table parts.
#[derive(Serialize)]
struct HelloRef<'a> {
    protocol_revision: u8,
    latmon_version: &'a str,
    board: &'a str,
    kernel: &'a str,
    boot_id: u32,
    start_ns: u64,
    interval_ns: u64,
    probe_count: u16,
    probes: &'a [ProbeDesc],
}

/// One probe's cumulative state in a Summary, for the bucket range
/// `first_bucket..end_bucket` (the whole range `0..BUCKETS` unless the probe
/// had to be split over several frames).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeCounts {
    pub id: u16,
    pub count: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub drops: u64,
    pub alerts: u64,
    pub first_bucket: u16,
    pub end_bucket: u16,
    /// Non-zero buckets in the range: (bucket index, cumulative count),
    /// ascending. On the wire each index is a gap from the previous one.
    pub buckets: Vec<(u16, u64)>,
}

/// Cumulative counts of every probe (or a part of them) at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub seq: u64,
    pub boot_id: u32,
    /// CLOCK_MONOTONIC at the end of the interval.
    pub time_ns: u64,
    /// The agent's final summary (flushed at exit).
    pub last: bool,
    pub probes: Vec<ProbeCounts>,
}

/// A latency above a probe's threshold (mirrors `summary::AlertRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    pub boot_id: u32,
    pub probe: u16,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cpu: u32,
    pub latency_ns: u64,
    pub time_ns: u64,
}

#[derive(Serialize)]
struct AlertRef<'a> {
    boot_id: u32,
    probe: u16,
    pid: u32,
    tid: u32,
    comm: &'a str,
    cpu: u32,
    latency_ns: u64,
    time_ns: u64,
}

/// Per-probe health in Status. Cost fields are 0 when unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeHealth {
    pub id: u16,
    /// Failed map reads since start.
    pub read_errors: u64,
    /// Runs of the probe's BPF programs and the time spent in them since it
    /// started (latmon's own cost; shared programs split by events; 0: not
    /// measured).
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// A probe whose BPF programs the kernel skipped, in Status (revision 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeMissed {
    pub id: u16,
    /// Runs of the probe's programs the kernel skipped since it started
    /// (`recursion_misses`): events the probe never saw.
    pub missed: u64,
}

/// `Status::flags`: the agent is over its `overhead_budget` this interval.
pub const STATUS_OVER_BUDGET: u32 = 1 << 0;
/// `Status::flags`: a probe was detached over budget (latmon runs degraded).
pub const STATUS_DEGRADED: u32 = 1 << 1;
/// `Status::flags`: BPF run-time statistics are on (the cost fields mean
/// something).
pub const STATUS_COST_MEASURED: u32 = 1 << 2;

/// Agent and link health, sent with every Hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub boot_id: u32,
    pub time_ns: u64,
    /// Last summary sequence number sent.
    pub seq: u64,
    pub uptime_ns: u64,
    /// Frames (records) this output's queue dropped since start, and bytes.
    pub frames_dropped: u64,
    pub bytes_dropped: u64,
    /// Connected clients (socket outputs; 0 otherwise).
    pub clients: u32,
    pub probes: Vec<ProbeHealth>,
    /// Revision 1: `STATUS_*` bits (over budget, degraded, cost measured).
    pub flags: u32,
    /// Revision 1: CPU share of all of latmon's BPF programs over the last
    /// interval, parts per million of the machine's CPU capacity.
    pub bpf_cpu_ppm: u32,
    /// Revision 1: ids of probes detached over budget.
    pub detached: Vec<u16>,
    /// Revision 2: the probes of this part (ids within its `probes`) whose
    /// programs the kernel skipped, by id; only those with misses.
    pub missed: Vec<ProbeMissed>,
}

#[derive(Serialize)]
struct StatusRef<'a> {
    boot_id: u32,
    time_ns: u64,
    seq: u64,
    uptime_ns: u64,
    frames_dropped: u64,
    bytes_dropped: u64,
    clients: u32,
    probes: &'a [ProbeHealth],
    flags: u32,
    bpf_cpu_ppm: u32,
    detached: &'a [u16],
    missed: &'a [ProbeMissed],
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Summary(Summary),
    Alert(Alert),
    Status(Status),
    /// A kind this receiver does not know (a newer sender); skipped.
    Unknown { kind: u8, len: usize },
}

// ------------------------------------------------- ProbeCounts (de)serialize

/// Serialize one probe entry from any source of (index, count) pairs.
fn ser_probe<S: Serializer, I: Iterator<Item = (u16, u64)> + Clone>(
    s: S,
    head: [u64; 7],
    first: u16,
    end: u16,
    n: usize,
    buckets: I,
) -> Result<S::Ok, S::Error> {
    struct Seq<I>(u16, usize, I);
    impl<I: Iterator<Item = (u16, u64)> + Clone> Serialize for Seq<I> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(self.1))?;
            let mut next = self.0;
            for (i, c) in self.2.clone() {
                seq.serialize_element(&(i.wrapping_sub(next), c))?;
                next = i.wrapping_add(1);
            }
            seq.end()
        }
    }
    let mut t = s.serialize_tuple(10)?;
    t.serialize_element(&(head[0] as u16))?;
    for v in &head[1..] {
        t.serialize_element(v)?;
    }
    t.serialize_element(&first)?;
    t.serialize_element(&end)?;
    t.serialize_element(&Seq(first, n, buckets))?;
    t.end()
}

impl Serialize for ProbeCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ser_probe(
            s,
            [self.id as u64, self.count, self.sum_ns, self.min_ns, self.max_ns, self.drops, self.alerts],
            self.first_bucket,
            self.end_bucket,
            self.buckets.len(),
            self.buckets.iter().copied(),
        )
    }
}

impl<'de> Deserialize<'de> for ProbeCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProbeCounts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a probe entry")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<ProbeCounts, A::Error> {
                let missing = || de::Error::custom("probe entry too short");
                let id: u16 = a.next_element()?.ok_or_else(missing)?;
                let mut head = [0u64; 6];
                for h in head.iter_mut() {
                    *h = a.next_element()?.ok_or_else(missing)?;
                }
                let first: u16 = a.next_element()?.ok_or_else(missing)?;
                let end: u16 = a.next_element()?.ok_or_else(missing)?;
                if first > end || end as usize > BUCKETS {
                    return Err(de::Error::custom("bucket range outside the histogram"));
                }
                let buckets = a.next_element_seed(BucketsSeed { first, end })?.ok_or_else(missing)?;
                Ok(ProbeCounts {
                    id,
                    count: head[0],
                    sum_ns: head[1],
                    min_ns: head[2],
                    max_ns: head[3],
                    drops: head[4],
                    alerts: head[5],
                    first_bucket: first,
                    end_bucket: end,
                    buckets,
                })
            }
        }
        d.deserialize_tuple(10, V)
    }
}

/// Reads the gap-coded bucket list, checking every index stays in range.
struct BucketsSeed {
    first: u16,
    end: u16,
}

impl<'de> DeserializeSeed<'de> for BucketsSeed {
    type Value = Vec<(u16, u64)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BucketsSeed {
    type Value = Vec<(u16, u64)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("sparse buckets")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let room = (self.end - self.first) as usize;
        let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(room));
        let mut next = self.first as u32;
        while let Some((gap, c)) = a.next_element::<(u16, u64)>()? {
            let i = next + gap as u32;
            if i >= self.end as u32 {
                return Err(de::Error::custom("bucket index outside the entry's range"));
            }
            v.push((i as u16, c));
            next = i + 1;
        }
        Ok(v)
    }
}

// ------------------------------------------------------------------ errors

/// Why the encoder could not produce a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// A single item (one probe description, one alert) exceeds [`MAX_PAYLOAD`].
    TooLarge { kind: Kind },
    /// postcard refused the value (a bug: every message type is serializable).
    Serialize(postcard::Error),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { kind } => write!(f, "{} item does not fit one frame", kind.name()),
            Self::Serialize(e) => write!(f, "serializing: {e}"),
        }
    }
}

impl std::error::Error for EncodeError {}

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

// ----------------------------------------------------------------- encoder

/// LEB128 length of a postcard varint.
pub const fn varint_len(v: u64) -> usize {
    if v == 0 {
        1
    } else {
        (64 - v.leading_zeros() as usize).div_ceil(7)
    }
}

/// One planned summary entry: probe `probe`, buckets `first..end`.
#[derive(Clone, Copy, Debug)]
struct Part {
    probe: u16,
    first: u16,
    end: u16,
}

struct PartsRef<'a> {
    parts: &'a [Part],
    hists: &'a [Hist],
}

impl Serialize for PartsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.parts.len()))?;
        for p in self.parts {
            seq.serialize_element(&PartRef { part: *p, hist: &self.hists[p.probe as usize] })?;
        }
        seq.end()
    }
}

struct PartRef<'a> {
    part: Part,
    hist: &'a Hist,
}

impl Serialize for PartRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (h, p) = (self.hist, self.part);
        let range = p.first as usize..p.end as usize;
        let it = h.slots[range.clone()]
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(move |(i, &c)| ((i + p.first as usize) as u16, c));
        let n = h.slots[range].iter().filter(|&&c| c > 0).count();
        ser_probe(s, [p.probe as u64, h.count, h.sum_ns, h.min_ns, h.max_ns, h.drops, h.alerts], p.first, p.end, n, it)
    }
}

#[derive(Serialize)]
struct SummaryRef<'a> {
    seq: u64,
    boot_id: u32,
    time_ns: u64,
    last: bool,
    probes: PartsRef<'a>,
}

/// Summary fields besides the histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryHeader {
    pub seq: u64,
    pub boot_id: u32,
    pub time_ns: u64,
    pub last: bool,
}

/// Builds frames into buffers allocated once. Every method calls `out` once
/// per finished frame (delimiter included) and returns the frame count.
pub struct Encoder {
    payload: Box<[u8]>,
    frame: Box<[u8]>,
    plan: Vec<Part>,
    budget: usize,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    pub fn new() -> Self {
        Self::with_budget(PAYLOAD_BUDGET)
    }

    /// An encoder packing payloads of up to `payload_budget` bytes
    /// (clamped to `FRAME_OVERHEAD + 64 ..= MAX_PAYLOAD`).
    pub fn with_budget(payload_budget: usize) -> Self {
        Encoder {
            payload: vec![0; MAX_PAYLOAD].into_boxed_slice(),
            frame: vec![0; MAX_ENCODED].into_boxed_slice(),
            plan: Vec::with_capacity(64),
            budget: payload_budget.clamp(FRAME_OVERHEAD + 64, MAX_PAYLOAD),
        }
    }

    /// Serialize `body` behind the version and kind bytes within `limit`
    /// payload bytes; the payload length, or None when it does not fit.
    fn put<T: Serialize + ?Sized>(&mut self, kind: Kind, body: &T, limit: usize) -> Result<Option<usize>, EncodeError> {
        self.payload[0] = PROTOCOL_VERSION;
        self.payload[1] = kind as u8;
        let room = &mut self.payload[2..limit - 4];
        match postcard::to_slice(body, room) {
            Ok(b) => Ok(Some(2 + b.len())),
            Err(postcard::Error::SerializeBufferFull) => Ok(None),
            Err(e) => Err(EncodeError::Serialize(e)),
        }
    }

    /// CRC, COBS and delimiter around `payload[..n]`; hands the frame to `out`.
    fn seal(&mut self, n: usize, out: &mut dyn FnMut(&[u8])) {
        let crc = crate::crc32::hash(&self.payload[..n]);
        self.payload[n..n + 4].copy_from_slice(&crc.to_le_bytes());
        let len = cobs::encode(&self.payload[..n + 4], &mut self.frame);
        self.frame[len] = DELIMITER;
        out(&self.frame[..=len]);
    }

    /// Frames for `n` items, as many per frame as fit the budget; `body`
    /// serializes a message holding the items of a range within a payload
    /// limit (None: does not fit). An item too big for the budget gets a
    /// frame of its own, up to [`MAX_PAYLOAD`].
    fn pack<F>(&mut self, kind: Kind, n: usize, mut body: F, out: &mut dyn FnMut(&[u8])) -> Result<usize, EncodeError>
    where
        F: FnMut(&mut Self, Range<usize>, usize) -> Result<Option<usize>, EncodeError>,
    {
        let budget = self.budget;
        let mut frames = 0;
        let mut start = 0;
        loop {
            let mut end = (start + 1).min(n);
            let len = match body(self, start..end, budget)? {
                Some(_) => {
                    while end < n && body(self, start..end + 1, budget)?.is_some() {
                        end += 1;
                    }
                    body(self, start..end, budget)?
                }
                None => body(self, start..end, MAX_PAYLOAD)?,
            };
            let len = len.ok_or(EncodeError::TooLarge { kind })?;
            self.seal(len, out);
            frames += 1;
            start = end;
            if start >= n {
                return Ok(frames);
            }
        }
    }

    /// Hello frames carrying the whole probe table.
    pub fn hello(&mut self, h: &Hello, out: &mut dyn FnMut(&[u8])) -> Result<usize, EncodeError> {
        self.pack(
            Kind::Hello,
            h.probes.len(),
            |e, r, limit| {
                let body = HelloRef {
                    protocol_revision: h.protocol_revision,
                    latmon_version: &h.latmon_version,
                    board: &h.board,
                    kernel: &h.kernel,
                    boot_id: h.boot_id,
                    start_ns: h.start_ns,
                    interval_ns: h.interval_ns,
                    probe_count: h.probe_count,
                    probes: &h.probes[r],
                };
                e.put(Kind::Hello, &body, limit)
            },
            out,
        )
    }

    /// Status frames (the per-probe list split when long).
    pub fn status(&mut self, s: &Status, out: &mut dyn FnMut(&[u8])) -> Result<usize, EncodeError> {
        self.pack(
            Kind::Status,
            s.probes.len(),
            |e, r, limit| {
                // The misses of this part's probes (`missed` is by id).
                let missed = match (s.probes.get(r.start), r.end.checked_sub(1).and_then(|l| s.probes.get(l))) {
                    (Some(first), Some(last)) if !r.is_empty() => {
                        let lo = s.missed.partition_point(|m| m.id < first.id);
                        let hi = s.missed.partition_point(|m| m.id <= last.id);
                        &s.missed[lo..hi.max(lo)]
                    }
                    _ => &s.missed[..0],
                };
                let body = StatusRef {
                    boot_id: s.boot_id,
                    time_ns: s.time_ns,
                    seq: s.seq,
                    uptime_ns: s.uptime_ns,
                    frames_dropped: s.frames_dropped,
                    bytes_dropped: s.bytes_dropped,
                    clients: s.clients,
                    probes: &s.probes[r],
                    flags: s.flags,
                    bpf_cpu_ppm: s.bpf_cpu_ppm,
                    detached: &s.detached,
                    missed,
                };
                e.put(Kind::Status, &body, limit)
            },
            out,
        )
    }

    /// One Alert frame for an alert record of probe `probe`.
    pub fn alert(
        &mut self,
        boot_id: u32,
        probe: u16,
        a: &AlertRecord,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        let body = AlertRef {
            boot_id,
            probe,
            pid: a.pid,
            tid: a.tid,
            comm: truncate(&a.comm, 64),
            cpu: a.cpu,
            latency_ns: a.latency_ns,
            time_ns: a.time_ns,
        };
        let n = self.put(Kind::Alert, &body, MAX_PAYLOAD)?.ok_or(EncodeError::TooLarge { kind: Kind::Alert })?;
        self.seal(n, out);
        Ok(1)
    }

    /// Summary frames for the cumulative histograms `hists` (probe id =
    /// index). Probes are packed into as few frames as the budget allows; a
    /// probe whose buckets do not fit the rest of a frame continues in the
    /// next one (same seq, next bucket range). Allocation-free once the
    /// plan vector has grown to the number of probes.
    pub fn summary(&mut self, h: SummaryHeader, hists: &[Hist], out: &mut dyn FnMut(&[u8])) -> Result<usize, EncodeError> {
        // Upper bounds of the serialized sizes (exact except the marked +1s).
        let frame_head = FRAME_OVERHEAD
            + varint_len(h.seq)
            + varint_len(h.boot_id as u64)
            + varint_len(h.time_ns)
            + 1
            + 3; // entry count (<= 3 bytes)
        let budget = self.budget;
        let mut frames = 0;
        let mut used = frame_head;
        self.plan.clear();
        for (id, hist) in hists.iter().enumerate() {
            let id = id as u16;
            let entry_head = varint_len(id as u64)
                + [hist.count, hist.sum_ns, hist.min_ns, hist.max_ns, hist.drops, hist.alerts]
                    .iter()
                    .map(|&v| varint_len(v))
                    .sum::<usize>()
                + 2 + 2 + 2; // first, end, bucket count (<= 2 bytes each)
            let mut first = 0usize;
            loop {
                // As many of the remaining buckets as fit the frame; at least
                // one when the frame is empty.
                let mut size = entry_head;
                let mut next = first;
                let mut end = BUCKETS;
                let mut added = 0;
                for (i, &c) in hist.slots.iter().enumerate().skip(first) {
                    if c == 0 {
                        continue;
                    }
                    let b = varint_len((i - next) as u64) + varint_len(c);
                    if used + size + b > budget && !(self.plan.is_empty() && added == 0) {
                        end = i;
                        break;
                    }
                    size += b;
                    next = i + 1;
                    added += 1;
                }
                let no_room = used + entry_head > budget || (added == 0 && end < BUCKETS);
                if no_room && !self.plan.is_empty() {
                    frames += self.flush_summary(h, hists, out)?;
                    used = frame_head;
                    continue;
                }
                self.plan.push(Part { probe: id, first: first as u16, end: end as u16 });
                used += size;
                if end == BUCKETS {
                    break;
                }
                frames += self.flush_summary(h, hists, out)?;
                used = frame_head;
                first = end;
            }
        }
        if !self.plan.is_empty() || frames == 0 {
            frames += self.flush_summary(h, hists, out)?;
        }
        Ok(frames)
    }

    fn flush_summary(&mut self, h: SummaryHeader, hists: &[Hist], out: &mut dyn FnMut(&[u8])) -> Result<usize, EncodeError> {
        let plan = std::mem::take(&mut self.plan);
        let body = SummaryRef {
            seq: h.seq,
            boot_id: h.boot_id,
            time_ns: h.time_ns,
            last: h.last,
            probes: PartsRef { parts: &plan, hists },
        };
        let res = self.put(Kind::Summary, &body, MAX_PAYLOAD);
        self.plan = plan;
        self.plan.clear();
        let n = res?.ok_or(EncodeError::TooLarge { kind: Kind::Summary })?;
        self.seal(n, out);
        Ok(1)
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Encode one message into a fresh Vec (tests, tools; not the hot path).
pub fn encode_to_vec(f: &Frame) -> Result<Vec<u8>, EncodeError> {
    let mut enc = Encoder::with_budget(MAX_PAYLOAD);
    let mut v = Vec::new();
    let mut out = |b: &[u8]| v.extend_from_slice(b);
    match f {
        Frame::Hello(h) => enc.hello(h, &mut out)?,
        Frame::Status(s) => enc.status(s, &mut out)?,
        Frame::Alert(a) => {
            let body = AlertRef {
                boot_id: a.boot_id,
                probe: a.probe,
                pid: a.pid,
                tid: a.tid,
                comm: &a.comm,
                cpu: a.cpu,
                latency_ns: a.latency_ns,
                time_ns: a.time_ns,
            };
            let n = enc.put(Kind::Alert, &body, MAX_PAYLOAD)?.ok_or(EncodeError::TooLarge { kind: Kind::Alert })?;
            enc.seal(n, &mut out);
            1
        }
        Frame::Summary(s) => {
            let n = enc.put(Kind::Summary, s, MAX_PAYLOAD)?.ok_or(EncodeError::TooLarge { kind: Kind::Summary })?;
            enc.seal(n, &mut out);
            1
        }
        Frame::Unknown { .. } => 0,
    };
    Ok(v)
}

/// The probe table of a Hello from the agent's probe list (strings
/// truncated to [`MAX_NAME_LEN`] so every row fits a frame).
pub fn probe_table(probes: &[ProbeInfo]) -> Vec<ProbeDesc> {
    probes
        .iter()
        .enumerate()
        .map(|(i, p)| ProbeDesc {
            id: i as u16,
            name: truncate(&p.name, MAX_NAME_LEN).to_string(),
            kind: truncate(&p.kind, MAX_NAME_LEN).to_string(),
            attach: truncate(&p.attach, MAX_NAME_LEN).to_string(),
            mode: truncate(&p.mode, MAX_NAME_LEN).to_string(),
            scheme: BucketScheme::LATMON,
        })
        .collect()
}

/// An identifier for one agent run: changes when the board reboots or the
/// agent restarts, which is when cumulative counts restart from zero.
/// FNV-1a over the kernel's boot id, the agent's start time and pid.
pub fn boot_id(kernel_boot_id: &str, start_ns: u64, pid: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let bytes = kernel_boot_id.bytes().chain(start_ns.to_le_bytes()).chain(pid.to_le_bytes());
    for b in bytes {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

// ----------------------------------------------------------------- decoder

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
        self.crc_errors + self.cobs_errors + self.short_frames + self.oversize + self.version_mismatch + self.body_errors
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
        FrameDecoder { buf: vec![0; MAX_ENCODED].into_boxed_slice(), len: 0, overflow: 0, at_start: true, stats: LinkStats::default() }
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
        Kind::Alert => Frame::Alert(body_of(body).map_err(bad)?),
        Kind::Status => Frame::Status(body_of(body).map_err(bad)?),
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

// ----------------------------------------------------------------- tracker

/// What a received frame means, for display or JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Hello(Hello),
    /// Interval deltas derived from cumulative counts, in the same shape as
    /// `latmon run` produces (`probes` holds those completed by this frame;
    /// `ids` their probe ids, in the same order).
    Summary { boot_id: u32, report: IntervalReport, ids: Vec<u16> },
    Alert(AlertRecord),
    Status(Status),
    Unknown { kind: u8 },
}

#[derive(Default)]
struct Track {
    info: Option<ProbeInfo>,
    scheme_ok: bool,
    /// Last complete cumulative snapshot and its time (None: none yet).
    prev: Option<Box<(Hist, u64)>>,
    /// A snapshot being assembled from split entries: seq, next bucket.
    pending: Option<Box<(u64, u16, Hist)>>,
}

/// Receiver state: the probe table from Hello and the last cumulative
/// histogram per probe, from which every Summary yields interval deltas.
/// Pure; feed it decoded frames in stream order.
#[derive(Default)]
pub struct Tracker {
    pub hello: Option<Hello>,
    boot_id: Option<u32>,
    last_seq: Option<u64>,
    tracks: Vec<Track>,
    /// Summaries never seen (gaps in seq).
    pub summaries_lost: u64,
    /// Probe entries dropped because the other parts of a split probe
    /// were lost.
    pub partial_dropped: u64,
    /// Times the sender restarted (new boot id): counts restart at zero.
    pub restarts: u64,
    /// Probe entries skipped because the bucket scheme is not ours.
    pub scheme_mismatch: u64,
    /// The last Status received.
    pub status: Option<Status>,
    /// Probe entries ignored because their id is `MAX_PROBES` or more.
    pub ignored_entries: u64,
    /// Summaries whose seq jumped ahead by more than [`MAX_SEQ_GAP`]: a
    /// sender's error, not losses.
    pub seq_jumps: u64,
}

impl Tracker {
    pub fn new() -> Self {
        Self::default()
    }

    fn new_boot(&mut self, boot_id: u32) {
        if self.boot_id.is_some_and(|b| b != boot_id) {
            self.restarts += 1;
            self.last_seq = None;
            for t in &mut self.tracks {
                t.prev = None;
                t.pending = None;
            }
            if self.hello.as_ref().is_some_and(|h| h.boot_id != boot_id) {
                self.hello = None;
                for t in &mut self.tracks {
                    t.info = None;
                }
            }
        }
        self.boot_id = Some(boot_id);
    }

    fn track(&mut self, id: u16) -> &mut Track {
        let i = id as usize;
        if self.tracks.len() <= i {
            self.tracks.resize_with(i + 1, || Track { scheme_ok: true, ..Track::default() });
        }
        &mut self.tracks[i]
    }

    /// Name of probe `id` (`#id` until a Hello names it).
    pub fn probe_name(&self, id: u16) -> String {
        self.tracks
            .get(id as usize)
            .and_then(|t| t.info.as_ref())
            .map_or_else(|| format!("#{id}"), |i| i.name.clone())
    }

    /// The cumulative snapshot of probe `id` (for since-start views).
    pub fn totals(&self, id: u16) -> Option<&Hist> {
        self.tracks.get(id as usize).and_then(|t| t.prev.as_deref()).map(|(h, _)| h)
    }

    fn info(&self, id: u16) -> ProbeInfo {
        self.tracks.get(id as usize).and_then(|t| t.info.clone()).unwrap_or_else(|| ProbeInfo {
            name: format!("#{id}"),
            kind: String::new(),
            attach: String::new(),
            mode: String::new(),
            btf_mode: String::new(),
        })
    }

    pub fn on_frame(&mut self, f: Frame) -> Event {
        match f {
            Frame::Hello(mut h) => {
                self.new_boot(h.boot_id);
                // Entries with ids of MAX_PROBES or more are ignored (the
                // spec): neither tracked nor kept in the probe table, so
                // the table holds MAX_PROBES entries at most.
                let sent = h.probes.len();
                h.probes.retain(|d| (d.id as usize) < MAX_PROBES);
                self.ignored_entries += (sent - h.probes.len()) as u64;
                for d in &h.probes {
                    let ok = d.scheme == BucketScheme::LATMON;
                    let t = self.track(d.id);
                    t.scheme_ok = ok;
                    t.info = Some(ProbeInfo {
                        name: d.name.clone(),
                        kind: d.kind.clone(),
                        attach: d.attach.clone(),
                        mode: d.mode.clone(),
                        // Not on the wire (yet): Hello predates it.
                        btf_mode: String::new(),
                    });
                }
                // Keep the union of probe table parts.
                match &mut self.hello {
                    Some(old) if old.boot_id == h.boot_id => {
                        let probes = std::mem::take(&mut old.probes);
                        *old = Hello { probes, ..h.clone() };
                        for d in &h.probes {
                            match old.probes.iter_mut().find(|p| p.id == d.id) {
                                Some(p) => *p = d.clone(),
                                None => old.probes.push(d.clone()),
                            }
                        }
                        old.probes.sort_by_key(|p| p.id);
                    }
                    _ => self.hello = Some(h.clone()),
                }
                Event::Hello(h)
            }
            Frame::Summary(s) => self.on_summary(s),
            Frame::Alert(a) => {
                self.new_boot(a.boot_id);
                Event::Alert(AlertRecord {
                    probe: self.probe_name(a.probe),
                    pid: a.pid,
                    tid: a.tid,
                    comm: a.comm,
                    cpu: a.cpu,
                    latency_ns: a.latency_ns,
                    time_ns: a.time_ns,
                })
            }
            Frame::Status(s) => {
                self.new_boot(s.boot_id);
                self.status = Some(s.clone());
                Event::Status(s)
            }
            Frame::Unknown { kind, .. } => Event::Unknown { kind },
        }
    }

    fn on_summary(&mut self, s: Summary) -> Event {
        self.new_boot(s.boot_id);
        match self.last_seq {
            Some(l) if s.seq > l => match s.seq - l - 1 {
                0 => {}
                gap if gap <= MAX_SEQ_GAP => self.summaries_lost += gap,
                _ => self.seq_jumps += 1,
            },
            Some(l) if s.seq < l => {
                // Same boot id but counting again from the start.
                self.restarts += 1;
                for t in &mut self.tracks {
                    t.prev = None;
                    t.pending = None;
                }
            }
            _ => {}
        }
        self.last_seq = Some(s.seq);
        let start_ns = self.hello.as_ref().map(|h| h.start_ns);
        let mut report = IntervalReport {
            seq: s.seq,
            time_ns: s.time_ns,
            interval_ns: 0,
            last: s.last,
            probes: Vec::with_capacity(s.probes.len()),
            alert_records: Vec::new(),
            agent: Default::default(),
        };
        let mut since: Option<u64> = None;
        let mut ids = Vec::with_capacity(s.probes.len());
        for e in s.probes {
            let id = e.id;
            if id as usize >= MAX_PROBES {
                self.ignored_entries += 1;
                continue;
            }
            let t = self.track(id);
            let (scheme_ok, pending) = (t.scheme_ok, t.pending.take());
            if !scheme_ok {
                self.scheme_mismatch += 1;
                continue;
            }
            let mut h = match pending.map(|b| *b) {
                Some((seq, next, h)) if seq == s.seq && next == e.first_bucket => h,
                stale => {
                    if stale.is_some() {
                        self.partial_dropped += 1;
                    }
                    if e.first_bucket != 0 {
                        // The earlier parts of this probe were lost.
                        self.partial_dropped += 1;
                        continue;
                    }
                    Hist::default()
                }
            };
            h.count = e.count;
            h.sum_ns = e.sum_ns;
            h.min_ns = e.min_ns;
            h.max_ns = e.max_ns;
            h.drops = e.drops;
            h.alerts = e.alerts;
            for (i, c) in e.buckets {
                h.slots[i as usize] = c;
            }
            let t = self.track(id);
            if (e.end_bucket as usize) < BUCKETS {
                t.pending = Some(Box::new((s.seq, e.end_bucket, h)));
                continue;
            }
            let (prev, prev_time) = t.prev.take().map_or((Hist::default(), start_ns.unwrap_or(s.time_ns)), |b| *b);
            since = Some(since.map_or(prev_time, |p: u64| p.min(prev_time)));
            let r = ProbeReport::new(&self.info(id), &prev, &h);
            self.track(id).prev = Some(Box::new((h, s.time_ns)));
            report.probes.push(r);
            ids.push(id);
        }
        report.interval_ns = since.map_or(0, |p| s.time_ns.saturating_sub(p));
        Event::Summary { boot_id: s.boot_id, report, ids }
    }
}

// ------------------------------------------------------------------- tests

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> Hist {
        let mut h = Hist::default();
        for &v in values {
            h.record(v);
        }
        h
    }

    fn decode_all(bytes: &[u8]) -> (Vec<Result<Frame, FrameError>>, LinkStats) {
        let mut d = FrameDecoder::new();
        let mut v = Vec::new();
        d.feed(bytes, &mut |r| v.push(r));
        (v, d.stats)
    }

    fn summary_frames(h: SummaryHeader, hists: &[Hist], budget: usize) -> Vec<Vec<u8>> {
        let mut enc = Encoder::with_budget(budget);
        let mut frames = Vec::new();
        enc.summary(h, hists, &mut |f| frames.push(f.to_vec())).unwrap();
        frames
    }

    #[test]
    fn budget_constants() {
        assert_eq!(PAYLOAD_BUDGET, 508);
        assert!(cobs::max_encoding_length(PAYLOAD_BUDGET) < FRAME_BUDGET);
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(u64::MAX), 10);
        for v in [0u64, 1, 127, 128, 300, 16383, 16384, 1 << 35, u64::MAX] {
            assert_eq!(postcard::to_allocvec(&v).unwrap().len(), varint_len(v), "{v}");
        }
    }

    #[test]
    fn summary_round_trip_and_tracker_deltas() {
        let h1 = hist(&[1_000, 300, 2_500]);
        let mut h2 = h1.clone();
        for v in [2_600, 40_000, 7] {
            h2.record(v);
        }
        h2.drops = 2;
        let head = |seq| SummaryHeader { seq, boot_id: 9, time_ns: seq * 1_000_000_000, last: false };
        let mut stream = Vec::new();
        for (seq, h) in [(1, &h1), (2, &h2)] {
            for f in summary_frames(head(seq), &[h.clone(), Hist::default()], PAYLOAD_BUDGET) {
                stream.extend(f);
            }
        }
        let (frames, stats) = decode_all(&stream);
        assert_eq!(stats.frames_good, 2);
        let mut t = Tracker::new();
        let mut reports = Vec::new();
        for f in frames {
            if let Event::Summary { report, .. } = t.on_frame(f.unwrap()) {
                reports.push(report);
            }
        }
        let info = ProbeInfo { name: "#0".into(), kind: String::new(), attach: String::new(), mode: String::new(), btf_mode: String::new() };
        assert_eq!(reports[1].probes[0], ProbeReport::new(&info, &h1, &h2));
        assert_eq!(reports[1].interval_ns, 1_000_000_000);
        assert_eq!(reports[1].probes[1].count, 0);
        assert_eq!(t.totals(0), Some(&h2));
    }

    #[test]
    fn lost_summary_loses_no_counts() {
        let hs: Vec<Hist> = (1..=4u64).map(|k| hist(&(0..k * 10).map(|v| v * 97).collect::<Vec<_>>())).collect();
        let mut t = Tracker::new();
        let mut total = 0;
        for (i, h) in hs.iter().enumerate() {
            if i == 2 {
                continue; // lost on the link
            }
            let head = SummaryHeader { seq: i as u64 + 1, boot_id: 1, time_ns: i as u64, last: false };
            for f in summary_frames(head, std::slice::from_ref(h), PAYLOAD_BUDGET) {
                let (fr, _) = decode_all(&f);
                if let Event::Summary { report, .. } = t.on_frame(fr.into_iter().next().unwrap().unwrap()) {
                    total += report.probes[0].count;
                }
            }
        }
        assert_eq!(total, hs[3].count);
        assert_eq!(t.summaries_lost, 1);
    }

    #[test]
    fn big_probe_splits_over_frames_within_budget() {
        let mut h = Hist::default();
        for i in 0..BUCKETS {
            let (lo, _) = crate::hist::bucket_bounds(i);
            h.slots[i] = 1 << 40;
            h.count += 1 << 40;
            h.max_ns = lo;
        }
        h.sum_ns = u64::MAX;
        let frames =
            summary_frames(SummaryHeader { seq: 1, boot_id: u32::MAX, time_ns: u64::MAX, last: true }, &[h.clone(), h.clone()], PAYLOAD_BUDGET);
        assert!(frames.len() > 2);
        for f in &frames {
            assert!(f.len() <= FRAME_BUDGET, "{}", f.len());
        }
        let mut t = Tracker::new();
        let mut done = 0;
        for f in frames.concat().split_inclusive(|&b| b == 0) {
            let (fr, _) = decode_all(f);
            if let Event::Summary { report, .. } = t.on_frame(fr.into_iter().next().unwrap().unwrap()) {
                done += report.probes.len();
            }
        }
        assert_eq!(done, 2);
        assert_eq!(t.totals(0), Some(&h));
        assert_eq!(t.totals(1), Some(&h));
    }

    #[test]
    fn lost_part_of_split_probe_skips_only_that_snapshot() {
        let mut h = Hist::default();
        for i in 0..BUCKETS {
            h.slots[i] = 1_000_000 + i as u64;
        }
        h.count = h.slots.iter().sum();
        let a = summary_frames(SummaryHeader { seq: 1, boot_id: 1, time_ns: 1, last: false }, std::slice::from_ref(&h), PAYLOAD_BUDGET);
        let mut t = Tracker::new();
        for (i, f) in a.iter().enumerate() {
            if i == 1 {
                continue;
            }
            let (fr, _) = decode_all(f);
            t.on_frame(fr.into_iter().next().unwrap().unwrap());
        }
        assert!(t.partial_dropped > 0);
        assert_eq!(t.totals(0), None);
        // The next complete summary restores everything.
        for f in summary_frames(SummaryHeader { seq: 2, boot_id: 1, time_ns: 2, last: false }, std::slice::from_ref(&h), PAYLOAD_BUDGET) {
            let (fr, _) = decode_all(&f);
            t.on_frame(fr.into_iter().next().unwrap().unwrap());
        }
        assert_eq!(t.totals(0), Some(&h));
    }

    #[test]
    fn unknown_kind_is_skipped_and_stream_continues() {
        let mut payload = vec![PROTOCOL_VERSION, 0x7f, 1, 2, 3];
        let crc = crate::crc32::hash(&payload);
        payload.extend(crc.to_le_bytes());
        let mut stream = vec![0; cobs::max_encoding_length(payload.len())];
        let n = cobs::encode(&payload, &mut stream);
        stream.truncate(n);
        stream.push(0);
        let alert = Alert { boot_id: 1, probe: 0, pid: 1, tid: 2, comm: "x".into(), cpu: 0, latency_ns: 5, time_ns: 6 };
        stream.extend(encode_to_vec(&Frame::Alert(alert.clone())).unwrap());
        let (frames, stats) = decode_all(&stream);
        assert_eq!(frames[0], Ok(Frame::Unknown { kind: 0x7f, len: 9 }));
        assert_eq!(frames[1], Ok(Frame::Alert(alert)));
        assert_eq!((stats.unknown_kinds, stats.frames_good, stats.errors()), (1, 1, 0));
    }

    #[test]
    fn appended_fields_are_compatible_both_ways() {
        // An older sender: Status without its last field (probes).
        #[derive(Serialize)]
        struct OldStatus {
            boot_id: u32,
            time_ns: u64,
            seq: u64,
            uptime_ns: u64,
            frames_dropped: u64,
            bytes_dropped: u64,
            clients: u32,
        }
        let old = OldStatus { boot_id: 3, time_ns: 4, seq: 5, uptime_ns: 6, frames_dropped: 7, bytes_dropped: 8, clients: 1 };
        let mut payload = vec![PROTOCOL_VERSION, Kind::Status as u8];
        payload.extend(postcard::to_allocvec(&old).unwrap());
        let newer_extra = payload.clone();
        let crc = crate::crc32::hash(&payload);
        payload.extend(crc.to_le_bytes());
        match decode_payload(&payload).unwrap() {
            Frame::Status(s) => assert_eq!((s.seq, s.clients, s.probes.len()), (5, 1, 0)),
            other => panic!("{other:?}"),
        }
        // A newer sender: a Status with two more fields appended.
        let mut p = newer_extra;
        p.extend([0u8, 42, 0x80, 0x01]); // probes: [], then unknown fields
        let crc = crate::crc32::hash(&p);
        p.extend(crc.to_le_bytes());
        assert!(matches!(decode_payload(&p), Ok(Frame::Status(s)) if s.frames_dropped == 7));
    }

    #[test]
    fn damaged_frames_are_reported_and_neighbours_survive() {
        let a = Alert { boot_id: 1, probe: 0, pid: 10, tid: 11, comm: "ctrl".into(), cpu: 1, latency_ns: 99, time_ns: 5 };
        let f = encode_to_vec(&Frame::Alert(a.clone())).unwrap();
        let mut bad = f.clone();
        bad[3] ^= 0x40;
        let stream = [&f[..], &bad, &[1, 2, 3, 0], &f].concat();
        let (frames, stats) = decode_all(&stream);
        assert_eq!(frames.len(), 4);
        assert!(frames[0].is_ok() && frames[3].is_ok());
        assert!(frames[1].is_err() && frames[2].is_err());
        assert_eq!(stats.frames_good, 2);
        assert_eq!(stats.resyncs, 2);
        assert_eq!(stats.errors(), 2);
        // A receiver joining mid-frame: the partial head is not an error.
        let (frames, stats) = decode_all(&stream[5..]);
        assert!(matches!(frames[0], Err(FrameError::Joined { .. })));
        assert_eq!(stats.errors(), 2);
        assert_eq!(stats.frames_good, 1);
    }

    #[test]
    fn oversize_garbage_resyncs() {
        let a = Alert { boot_id: 1, probe: 0, pid: 1, tid: 1, comm: String::new(), cpu: 0, latency_ns: 1, time_ns: 1 };
        let f = encode_to_vec(&Frame::Alert(a)).unwrap();
        let stream = [&f[..], &vec![0x55; MAX_ENCODED * 2], &[0], &f].concat();
        let mut d = FrameDecoder::new();
        let mut ok = 0;
        for chunk in stream.chunks(7) {
            d.feed(chunk, &mut |r| ok += r.is_ok() as usize);
        }
        assert_eq!(ok, 2);
        assert_eq!(d.stats.oversize, 1);
    }

    /// erfc with relative accuracy ~1e-7 everywhere (Numerical Recipes'
    /// Chebyshev fit), so far-tail bucket counts are not invented.
    fn erfc(x: f64) -> f64 {
        let z = x.abs();
        let t = 1.0 / (1.0 + 0.5 * z);
        let poly = -z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
        let r = t * poly.exp();
        if x >= 0.0 { r } else { 2.0 - r }
    }

    /// Expected cumulative histogram of `n` events drawn from a mixture of
    /// log-normals [(weight, median_ns, sigma)].
    fn model_hist(n: u64, mix: &[(f64, f64, f64)]) -> Hist {
        let cdf = |x: f64| -> f64 {
            if x <= 0.0 {
                return 0.0;
            }
            mix.iter().map(|&(w, med, sig)| w * 0.5 * erfc(-(x.ln() - med.ln()) / (sig * std::f64::consts::SQRT_2))).sum()
        };
        let mut h = Hist::default();
        for i in 0..BUCKETS {
            let (lo, hi) = crate::hist::bucket_bounds(i);
            let hi = if hi == u64::MAX { f64::INFINITY } else { hi as f64 };
            let p = if hi.is_infinite() { 1.0 - cdf(lo as f64) } else { cdf(hi) - cdf(lo as f64) };
            let c = (p * n as f64).round() as u64;
            if c > 0 {
                h.slots[i] = c;
                if h.count == 0 {
                    h.min_ns = lo;
                }
                h.max_ns = hi.min(1e12) as u64 - 1;
                h.count += c;
                h.sum_ns = h.sum_ns.wrapping_add(c * lo);
            }
        }
        h
    }

    /// Eight probes a robot controller would run, with event rates and
    /// latency shapes (body plus a 1 % heavier tail) of a PREEMPT_RT box.
    pub(crate) fn realistic_8(uptime_s: u64) -> Vec<Hist> {
        let probes: [(u64, f64, f64); 8] = [
            (20_000, 4_000.0, 0.8),   // runq
            (1_000, 25_000.0, 0.4),   // timer (1 kHz control loop)
            (5_000, 2_000.0, 0.5),    // irq
            (3_000, 6_000.0, 0.7),    // softirq
            (50_000, 1_500.0, 1.2),   // syscall
            (1_000, 60_000.0, 0.3),   // kfunc:do_nanosleep
            (10_000, 3_000.0, 1.0),   // kfunc:vfs_read
            (1_000, 150_000.0, 0.25), // ufunc: control step
        ];
        probes
            .iter()
            .map(|&(rate, med, sig)| {
                let mut h = model_hist(rate * uptime_s, &[(0.99, med, sig), (0.01, med * 4.0, sig + 0.5)]);
                h.alerts = h.count / 100_000;
                h
            })
            .collect()
    }

    fn sizes(hists: &[Hist]) -> (usize, usize, usize) {
        let head = SummaryHeader { seq: 86_400, boot_id: 0xdead_beef, time_ns: 90_000_000_000_000, last: false };
        let frames = summary_frames(head, hists, PAYLOAD_BUDGET);
        (frames.len(), frames.iter().map(Vec::len).sum(), frames.iter().map(Vec::len).max().unwrap_or(0))
    }

    /// Measured sizes for docs/wire-format.md (run with --nocapture).
    #[test]
    fn eight_probe_summary_sizes() {
        for (label, secs) in [("1 min", 60u64), ("1 h", 3_600), ("24 h", 86_400)] {
            let hs = realistic_8(secs);
            let nz: usize = hs.iter().map(|h| h.slots.iter().filter(|&&c| c > 0).count()).sum();
            let (frames, total, max) = sizes(&hs);
            println!("realistic 8 probes after {label}: {nz} non-zero buckets, {frames} frames, {total} bytes, largest frame {max}");
            assert!(max <= FRAME_BUDGET);
        }
        // Worst case: every bucket of every probe non-zero, huge counts.
        let mut w = Hist::default();
        for (i, s) in w.slots.iter_mut().enumerate() {
            *s = u64::MAX / 1024 - i as u64;
        }
        w.count = u64::MAX;
        w.sum_ns = u64::MAX;
        w.min_ns = 1;
        w.max_ns = u64::MAX;
        w.drops = u64::MAX;
        w.alerts = u64::MAX;
        let (frames, total, max) = sizes(&vec![w; 8]);
        println!("worst 8 probes: {frames} frames, {total} bytes, largest frame {max}");
        assert!(max <= FRAME_BUDGET);
    }

    /// The messages whose bytes docs/wire-format.md lists.
    fn golden() -> Vec<(&'static str, Frame)> {
        let h = hist(&[300, 2_500, 2_600, 40_000]);
        let buckets = h.slots.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (i as u16, c)).collect();
        vec![
            (
                "hello",
                Frame::Hello(Hello {
                    protocol_revision: 0,
                    latmon_version: "0.1.0".into(),
                    board: "arm1".into(),
                    kernel: "6.1.0-rt".into(),
                    boot_id: 0x1234_5678,
                    start_ns: 1_000_000_000,
                    interval_ns: 1_000_000_000,
                    probe_count: 1,
                    probes: vec![ProbeDesc {
                        id: 0,
                        name: "runq".into(),
                        kind: "runq".into(),
                        attach: "tp_btf".into(),
                        mode: String::new(),
                        scheme: BucketScheme::LATMON,
                    }],
                }),
            ),
            (
                "summary",
                Frame::Summary(Summary {
                    seq: 2,
                    boot_id: 0x1234_5678,
                    time_ns: 3_000_000_000,
                    last: false,
                    probes: vec![ProbeCounts {
                        id: 0,
                        count: h.count,
                        sum_ns: h.sum_ns,
                        min_ns: h.min_ns,
                        max_ns: h.max_ns,
                        drops: 0,
                        alerts: 1,
                        first_bucket: 0,
                        end_bucket: BUCKETS as u16,
                        buckets,
                    }],
                }),
            ),
            (
                "alert",
                Frame::Alert(Alert {
                    boot_id: 0x1234_5678,
                    probe: 0,
                    pid: 1234,
                    tid: 1240,
                    comm: "ctrl_loop".into(),
                    cpu: 1,
                    latency_ns: 250_000,
                    time_ns: 2_500_000_000,
                }),
            ),
            (
                "status",
                Frame::Status(Status {
                    boot_id: 0x1234_5678,
                    time_ns: 3_000_000_000,
                    seq: 2,
                    uptime_ns: 2_000_000_000,
                    frames_dropped: 0,
                    bytes_dropped: 0,
                    clients: 1,
                    probes: vec![ProbeHealth { id: 0, read_errors: 0, run_count: 1000, run_time_ns: 92_000 }],
                    flags: STATUS_OVER_BUDGET | STATUS_DEGRADED | STATUS_COST_MEASURED,
                    bpf_cpu_ppm: 12_500,
                    detached: vec![1],
                    missed: vec![ProbeMissed { id: 0, missed: 92 }],
                }),
            ),
        ]
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
    }

    /// `<!-- golden: NAME PART -->` followed by a fenced block of hex bytes.
    fn spec_vector(doc: &str, name: &str, part: &str) -> Vec<u8> {
        let tag = format!("<!-- golden: {name} {part} -->");
        let at = doc.find(&tag).unwrap_or_else(|| panic!("docs/wire-format.md lacks {tag}"));
        let rest = &doc[at + tag.len()..];
        let open = rest.find("```").unwrap();
        let body_start = open + rest[open..].find('\n').unwrap() + 1;
        let close = body_start + rest[body_start..].find("```").unwrap();
        rest[body_start..close]
            .split_whitespace()
            .map(|t| u8::from_str_radix(t, 16).unwrap_or_else(|_| panic!("bad hex {t:?} in {tag}")))
            .collect()
    }

    /// Print the vectors (to refresh the spec after a deliberate change):
    /// cargo test --lib print_golden -- --ignored --nocapture
    #[test]
    #[ignore]
    fn print_golden() {
        for (name, f) in golden() {
            let frame = encode_to_vec(&f).unwrap();
            let mut p = frame[..frame.len() - 1].to_vec();
            let n = cobs::decode_in_place(&mut p).unwrap();
            println!("{name} payload ({n} bytes):\n{}\n{name} frame ({} bytes):\n{}\n", hex(&p[..n]), frame.len(), hex(&frame));
        }
    }

    #[test]
    fn golden_vectors_match_spec_byte_for_byte() {
        let doc = include_str!("../docs/wire-format.md");
        for (name, f) in golden() {
            let frame = encode_to_vec(&f).unwrap();
            assert_eq!(hex(&frame), hex(&spec_vector(doc, name, "frame")), "{name} frame");
            let mut p = frame[..frame.len() - 1].to_vec();
            let n = cobs::decode_in_place(&mut p).unwrap();
            assert_eq!(hex(&p[..n]), hex(&spec_vector(doc, name, "payload")), "{name} payload");
            // And the spec's bytes decode to the value.
            let (frames, stats) = decode_all(&spec_vector(doc, name, "frame"));
            assert_eq!(frames, vec![Ok(f.clone())], "{name}");
            assert_eq!(stats.frames_good, 1);
        }
        // The agent's borrowed, budgeted encoders produce the same bytes.
        let g = golden();
        let mut enc = Encoder::new();
        let mut v = Vec::new();
        if let Frame::Summary(s) = &g[1].1 {
            let h = hist(&[300, 2_500, 2_600, 40_000]);
            let mut h = h;
            h.alerts = 1;
            enc.summary(SummaryHeader { seq: s.seq, boot_id: s.boot_id, time_ns: s.time_ns, last: s.last }, &[h], &mut |b| {
                v.extend_from_slice(b)
            })
            .unwrap();
            assert_eq!(hex(&v), hex(&spec_vector(doc, "summary", "frame")));
        }
        v.clear();
        if let Frame::Alert(a) = &g[2].1 {
            let rec = AlertRecord {
                probe: "runq".into(),
                pid: a.pid,
                tid: a.tid,
                comm: a.comm.clone(),
                cpu: a.cpu,
                latency_ns: a.latency_ns,
                time_ns: a.time_ns,
            };
            enc.alert(a.boot_id, a.probe, &rec, &mut |b| v.extend_from_slice(b)).unwrap();
            assert_eq!(hex(&v), hex(&spec_vector(doc, "alert", "frame")));
        }
    }

    #[test]
    fn absurd_probe_ids_are_ignored_not_allocated() {
        let mut t = Tracker::new();
        let s = Summary {
            seq: 1,
            boot_id: 1,
            time_ns: 1,
            last: false,
            probes: vec![ProbeCounts {
                id: u16::MAX,
                count: 1,
                sum_ns: 1,
                min_ns: 1,
                max_ns: 1,
                drops: 0,
                alerts: 0,
                first_bucket: 0,
                end_bucket: BUCKETS as u16,
                buckets: vec![(1, 1)],
            }],
        };
        match t.on_frame(Frame::Summary(s)) {
            Event::Summary { report, ids, .. } => assert!(report.probes.is_empty() && ids.is_empty()),
            e => panic!("{e:?}"),
        }
        assert_eq!(t.ignored_entries, 1);
        assert!(t.tracks.len() <= 1);
    }

    fn probe_desc(id: u16, name: &str) -> ProbeDesc {
        ProbeDesc { id, name: name.into(), kind: "runq".into(), attach: "tp_btf".into(), mode: String::new(), scheme: BucketScheme::LATMON }
    }

    fn hello_with(boot_id: u32, probes: Vec<ProbeDesc>) -> Hello {
        Hello {
            protocol_revision: PROTOCOL_REVISION,
            latmon_version: "0.1.0".into(),
            board: String::new(),
            kernel: String::new(),
            boot_id,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: probes.len() as u16,
            probes,
        }
    }

    /// Hello entries with ids of MAX_PROBES or more are ignored (the
    /// spec), not kept: many such Hellos leave the probe table bounded.
    #[test]
    fn hello_entries_with_huge_ids_are_not_kept() {
        let mut t = Tracker::new();
        for round in 0..50u16 {
            let probes = (0..100u16).map(|i| probe_desc(MAX_PROBES as u16 + round * 100 + i, "x")).chain([probe_desc(round % 3, "ok")]).collect();
            t.on_frame(Frame::Hello(hello_with(5, probes)));
        }
        let h = t.hello.as_ref().unwrap();
        assert_eq!(h.probes.iter().map(|p| p.id).collect::<Vec<_>>(), [0, 1, 2], "only ids below MAX_PROBES are kept");
        assert_eq!(t.ignored_entries, 50 * 100);
        // The first Hello of a boot too.
        let mut t = Tracker::new();
        t.on_frame(Frame::Hello(hello_with(6, vec![probe_desc(u16::MAX, "big"), probe_desc(0, "a")])));
        assert_eq!(t.hello.as_ref().unwrap().probes.len(), 1);
    }

    fn summary_seq(seq: u64) -> Frame {
        Frame::Summary(Summary { seq, boot_id: 1, time_ns: seq, last: false, probes: Vec::new() })
    }

    /// A wild seq is no loss of 1.8e19 summaries, and u64::MAX does not
    /// overflow.
    #[test]
    fn wild_seq_jumps_are_not_counted_as_lost() {
        let mut t = Tracker::new();
        t.on_frame(summary_seq(1));
        t.on_frame(summary_seq(4));
        assert_eq!(t.summaries_lost, 2);
        t.on_frame(summary_seq(u64::MAX - 7));
        assert_eq!((t.summaries_lost, t.seq_jumps), (2, 1));
        t.on_frame(summary_seq(u64::MAX));
        assert_eq!(t.summaries_lost, 8);
        t.on_frame(summary_seq(u64::MAX));
        t.on_frame(summary_seq(3));
        assert_eq!((t.summaries_lost, t.seq_jumps, t.restarts), (8, 1, 1));
        t.on_frame(summary_seq(3 + MAX_SEQ_GAP + 1));
        assert_eq!((t.summaries_lost, t.seq_jumps), (8 + MAX_SEQ_GAP, 1), "the largest believed gap");
    }

    #[test]
    fn boot_ids_differ_per_run() {
        let k = "4a0f8d1e-0000-4000-8000-000000000001";
        assert_ne!(boot_id(k, 1, 100), boot_id(k, 2, 100));
        assert_ne!(boot_id(k, 1, 100), boot_id(k, 1, 101));
        assert_eq!(boot_id(k, 1, 100), boot_id(k, 1, 100));
    }
}
