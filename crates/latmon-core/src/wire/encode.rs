// SPDX-License-Identifier: MIT
//! The encoder: messages into CRC-checked COBS frames within a payload
//! budget, from buffers allocated once.

use std::fmt;
use std::ops::Range;

use serde::Serialize;

use super::cycle::CycleOut;
use super::summary_body::{DeltaRef, Part, PartsRef, SummaryRef};
use super::*;
use crate::anatomy::Anatomy;
use crate::hist::{Hist, BUCKETS};
use crate::summary::{AlertRecord, ProbeInfo};
use crate::text::truncate;

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

/// What one packing run produces: keyframes, or deltas covering the ids
/// `0..cover_end`.
#[derive(Clone, Copy)]
struct Head<'k> {
    kind: Kind,
    h: SummaryHeader,
    link: LinkHeader,
    cover_end: u16,
    /// Delta: the ids keyframed in this summary, and the new entries
    /// (ascending).
    keyed: &'k [u16],
    born: &'k [u16],
}

/// Builds frames into buffers allocated once. Every method calls `out` once
/// per finished frame (delimiter included) and returns the frame count.
pub struct Encoder {
    /// Fixed-capacity buffers (`heapless`), filled to their capacity once.
    payload: Box<heapless::Vec<u8, MAX_PAYLOAD>>,
    frame: Box<heapless::Vec<u8, MAX_ENCODED>>,
    plan: Vec<Part>,
    budget: usize,
    /// Delta packing: the first id the next frame covers.
    cover_from: u16,
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
        let mut payload = Box::<heapless::Vec<u8, MAX_PAYLOAD>>::default();
        let _ = payload.resize(MAX_PAYLOAD, 0);
        let mut frame = Box::<heapless::Vec<u8, MAX_ENCODED>>::default();
        let _ = frame.resize(MAX_ENCODED, 0);
        Encoder {
            payload,
            frame,
            plan: Vec::with_capacity(64),
            budget: payload_budget.clamp(FRAME_OVERHEAD + 64, MAX_PAYLOAD),
            cover_from: 0,
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
        let len = cobs::encode(&self.payload[..n + 4], &mut self.frame[..]);
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
                    probes: &h.probes[r.clone()],
                    // Every part carries the certificate: a receiver that
                    // sees only a table update still has it, and the tracker
                    // keeps the latest part's header.
                    tail: HelloTail {
                        thresholds: of_ids(&h.thresholds, &h.probes[r], |p| p.id, |t| t.id),
                        certificate: h.certificate.as_ref(),
                    },
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
                // The misses, sheds and drops of this part's probes (by id).
                let part = &s.probes[r.clone()];
                let missed = of_part(&s.missed, part, |m| m.id);
                let shed = of_part(&s.shed, part, |m| m.id);
                let dropped = of_part(&s.dropped, part, |m| m.id);
                let body = StatusRef {
                    boot_id: s.boot_id,
                    time_ns: s.time_ns,
                    seq: s.seq,
                    uptime_ns: s.uptime_ns,
                    frames_dropped: s.frames_dropped,
                    bytes_dropped: s.bytes_dropped,
                    clients: s.clients,
                    probes: part,
                    flags: s.flags,
                    bpf_cpu_ppm: s.bpf_cpu_ppm,
                    detached: &s.detached,
                    missed,
                    link: TrailingLink(&s.link, shed, dropped),
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
        fn body<'a>(boot_id: u32, probe: u16, a: &'a AlertRecord, an: Option<&'a Anatomy>) -> AlertRef<'a> {
            AlertRef {
                boot_id,
                probe,
                pid: a.pid,
                tid: a.tid,
                comm: truncate(&a.comm, super::MAX_ALERT_NAME_LEN),
                cpu: a.cpu,
                latency_ns: a.latency_ns,
                time_ns: a.time_ns,
                trailing: Trailing {
                    cpu_woken: an.map_or(0, |x| x.cpu_woken),
                    cpu_ran: an.map_or(0, |x| x.cpu_ran),
                    causes: Causes::Model(an.map_or(&[], |x| &x.causes)),
                    cycle: a.cycle.as_ref().map(CycleOut::Model),
                },
            }
        }
        let budget = self.budget;
        // More wire causes than a receiver takes (an inversion travels as
        // one per preempter, wire_parts): the smallest parts go into
        // `other` first.
        let too_many = |x: &Anatomy| super::messages::wire_count(&x.causes) > crate::anatomy::MAX_CAUSES;
        let mut folded: Option<Anatomy> = None;
        while folded.as_ref().or(a.anatomy.as_ref()).is_some_and(too_many) {
            let Some(f) = folded.as_ref().or(a.anatomy.as_ref()).and_then(super::anatomy::fold_smallest) else {
                break;
            };
            folded = Some(f);
        }
        let mut n = self.put(Kind::Alert, &body(boot_id, probe, a, folded.as_ref().or(a.anatomy.as_ref())), budget)?;
        // An anatomy too large for the frame budget (long names, many
        // parts): its smallest parts go into `other` until it fits (rare;
        // allocates). Without an anatomy an alert always fits.
        while n.is_none() {
            let Some(f) = folded.as_ref().or(a.anatomy.as_ref()).and_then(super::anatomy::fold_smallest) else {
                break;
            };
            n = self.put(Kind::Alert, &body(boot_id, probe, a, Some(&f)), budget)?;
            folded = Some(f);
        }
        if n.is_none() {
            n = self.put(Kind::Alert, &body(boot_id, probe, a, folded.as_ref().or(a.anatomy.as_ref())), MAX_PAYLOAD)?;
        }
        let n = n.ok_or(EncodeError::TooLarge { kind: Kind::Alert })?;
        self.seal(n, out);
        Ok(1)
    }

    /// Summary frames for the cumulative histograms `hists` (probe id =
    /// index). Probes are packed into as few frames as the budget allows; a
    /// probe whose buckets do not fit the rest of a frame continues in the
    /// next one (same seq, next bucket range). Allocation-free once the
    /// plan vector has grown to the number of probes.
    pub fn summary(
        &mut self,
        h: SummaryHeader,
        hists: &[Hist],
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        self.entries(
            Head { kind: Kind::Summary, h, link: LinkHeader::default(), cover_end: 0, keyed: &[], born: &[] },
            Entries::all(hists),
            out,
        )
    }

    /// Keyframe (Summary) frames of a budgeted link: the cumulative state
    /// of `entries`, already coarsened to `link.merge`.
    pub fn keyframe(
        &mut self,
        h: SummaryHeader,
        link: LinkHeader,
        entries: Entries<'_>,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        self.entries(Head { kind: Kind::Summary, h, link, cover_end: 0, keyed: &[], born: &[] }, entries, out)
    }

    /// Delta frames: the interval histograms `entries` (ascending ids),
    /// the frames together covering ids `0..cover_end` (at least one frame,
    /// so a receiver learns of an interval without events too); `keyed`:
    /// the ids sent as keyframes in this summary (ascending).
    #[allow(clippy::too_many_arguments)]
    pub fn delta(
        &mut self,
        h: SummaryHeader,
        link: LinkHeader,
        entries: Entries<'_>,
        cover_end: u16,
        keyed: &[u16],
        born: &[u16],
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        self.cover_from = 0;
        self.entries(Head { kind: Kind::Delta, h, link, cover_end, keyed, born }, entries, out)
    }

    fn entries(
        &mut self,
        head: Head<'_>,
        entries: Entries<'_>,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        let h = head.h;
        // Upper bounds of the serialized sizes (exact except the marked +1s).
        let mut frame_head =
            FRAME_OVERHEAD + varint_len(h.seq) + varint_len(h.boot_id as u64) + varint_len(h.time_ns) + 1 + 3; // entry count (<= 3 bytes)
        match head.kind {
            Kind::Delta => {
                frame_head +=
                    varint_len(head.link.base_seq) + 1 + 3 + 3 + 3 + 3 + 3 * (head.keyed.len() + head.born.len())
            }
            _ if head.link != LinkHeader::default() => frame_head += 1 + varint_len(head.link.base_seq),
            _ => {}
        }
        let budget = self.budget;
        let mut frames = 0;
        let mut used = frame_head;
        self.plan.clear();
        for k in 0..entries.len() {
            let (id, hist) = entries.get(k);
            let entry_head = varint_len(id as u64)
                + [hist.count, hist.sum_ns, hist.min_ns, hist.max_ns, hist.drops, hist.alerts]
                    .iter()
                    .map(|&v| varint_len(v))
                    .sum::<usize>()
                + 2
                + 2
                + 2; // first, end, bucket count (<= 2 bytes each)
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
                    frames += self.flush_summary(head, entries, false, out)?;
                    used = frame_head;
                    continue;
                }
                self.plan.push(Part { entry: k as u16, first: first as u16, end: end as u16 });
                used += size;
                if end == BUCKETS {
                    break;
                }
                frames += self.flush_summary(head, entries, false, out)?;
                used = frame_head;
                first = end;
            }
        }
        if !self.plan.is_empty() || frames == 0 || (head.kind == Kind::Delta && self.cover_from < head.cover_end) {
            frames += self.flush_summary(head, entries, true, out)?;
        }
        Ok(frames)
    }

    fn flush_summary(
        &mut self,
        head: Head<'_>,
        entries: Entries<'_>,
        final_frame: bool,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        let plan = std::mem::take(&mut self.plan);
        let h = head.h;
        let probes = PartsRef { parts: &plan, entries };
        let res = match head.kind {
            Kind::Delta => {
                // Ids up to the last entry (or, when it continues in the
                // next frame, before it); the final frame up to cover_end.
                let (last_id, complete) = plan
                    .last()
                    .map_or((None, true), |p| (Some(entries.get(p.entry as usize).0), p.end as usize == BUCKETS));
                let end_id = match (final_frame, last_id) {
                    (true, _) | (_, None) => head.cover_end.max(last_id.map_or(0, |i| i.saturating_add(1))),
                    (false, Some(i)) => i.saturating_add(1),
                };
                let first_id = self.cover_from.min(end_id);
                let lo = head.keyed.partition_point(|&k| k < first_id);
                let hi = head.keyed.partition_point(|&k| k < end_id).max(lo);
                let blo = head.born.partition_point(|&k| k < first_id);
                let bhi = head.born.partition_point(|&k| k < end_id).max(blo);
                let body = DeltaRef {
                    born: &head.born[blo..bhi],
                    keyed: &head.keyed[lo..hi],
                    seq: h.seq,
                    base_seq: head.link.base_seq,
                    boot_id: h.boot_id,
                    time_ns: h.time_ns,
                    last: h.last,
                    merge: head.link.merge,
                    first_id,
                    end_id,
                    probes,
                };
                self.cover_from = match last_id {
                    Some(i) if !complete => i,
                    _ => end_id,
                };
                self.put(Kind::Delta, &body, MAX_PAYLOAD)
            }
            _ => {
                let body = SummaryRef {
                    seq: h.seq,
                    boot_id: h.boot_id,
                    time_ns: h.time_ns,
                    last: h.last,
                    probes,
                    link: head.link,
                };
                self.put(Kind::Summary, &body, MAX_PAYLOAD)
            }
        };
        self.plan = plan;
        self.plan.clear();
        let n = res?.ok_or(EncodeError::TooLarge { kind: head.kind })?;
        self.seal(n, out);
        Ok(1)
    }

    /// Loops frames for one interval (the list split when long; none
    /// when there is no loop). `head` is (boot_id, seq, time_ns),
    /// `counts` (unlisted, unwatched).
    pub fn loops(
        &mut self,
        head: (u32, u64, u64),
        loops: &[crate::loops::Loop],
        counts: (u32, u32),
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, EncodeError> {
        if loops.is_empty() && counts == (0, 0) {
            return Ok(0);
        }
        self.pack(
            Kind::Loops,
            loops.len(),
            |e, r, limit| {
                let body = super::loops::LoopListRef {
                    boot_id: head.0,
                    seq: head.1,
                    time_ns: head.2,
                    listed: loops.len().min(u16::MAX as usize) as u16,
                    first: r.start as u16,
                    unlisted: counts.0,
                    unwatched: counts.1,
                    loops: super::loops::LoopsPart(&loops[r]),
                };
                e.put(Kind::Loops, &body, limit)
            },
            out,
        )
    }

    /// One Request frame (receiver side).
    pub fn request(&mut self, r: &Request, out: &mut dyn FnMut(&[u8])) -> Result<usize, EncodeError> {
        let n = self.put(Kind::Request, r, MAX_PAYLOAD)?.ok_or(EncodeError::TooLarge { kind: Kind::Request })?;
        self.seal(n, out);
        Ok(1)
    }
}

/// The entries of `all` (ascending by `id`) whose probe is in `part` (a
/// contiguous run of the Status's probes, ascending by id).
fn of_part<'a, T>(all: &'a [T], part: &[ProbeHealth], id: impl Fn(&T) -> u16) -> &'a [T] {
    of_ids(all, part, |p| p.id, id)
}

/// The run of `all` (sorted by id) whose ids lie within the ids of a
/// frame's part (sorted by id).
fn of_ids<'a, T, P>(all: &'a [T], part: &[P], part_id: impl Fn(&P) -> u16, id: impl Fn(&T) -> u16) -> &'a [T] {
    match (part.first(), part.last()) {
        (Some(first), Some(last)) => {
            let lo = all.partition_point(|m| id(m) < part_id(first));
            let hi = all.partition_point(|m| id(m) <= part_id(last));
            &all[lo..hi.max(lo)]
        }
        _ => &all[..0],
    }
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
                trailing: Trailing {
                    cpu_woken: a.cpu_woken,
                    cpu_ran: a.cpu_ran,
                    causes: Causes::Wire(&a.causes),
                    cycle: (a.cycle != WireCycle::default()).then_some(CycleOut::Wire(&a.cycle)),
                },
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
        Frame::Delta(d) => {
            let n = enc.put(Kind::Delta, d, MAX_PAYLOAD)?.ok_or(EncodeError::TooLarge { kind: Kind::Delta })?;
            enc.seal(n, &mut out);
            1
        }
        Frame::Request(r) => enc.request(r, &mut out)?,
        Frame::Loops(l) => {
            let n = enc.put(Kind::Loops, l, MAX_PAYLOAD)?.ok_or(EncodeError::TooLarge { kind: Kind::Loops })?;
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
            kind: truncate(p.kind.as_str(), MAX_NAME_LEN).to_string(),
            attach: truncate(p.attach.as_str(), MAX_NAME_LEN).to_string(),
            mode: desc_mode(p),
            scheme: BucketScheme::LATMON,
        })
        .collect()
}

/// A probe's `mode` as Hello carries it: its wait role's prefix (revision
/// 7) in front, so a cut at [`MAX_NAME_LEN`] takes the words, not the role.
fn desc_mode(p: &ProbeInfo) -> String {
    let prefix = match p.wait {
        crate::ident::Wait::No => "",
        crate::ident::Wait::Series => super::WAIT_MODE_PREFIX,
        crate::ident::Wait::Sum => super::WAITS_MODE_PREFIX,
    };
    let mut m = String::with_capacity(prefix.len() + p.mode.len());
    m.push_str(prefix);
    m.push_str(&p.mode);
    truncate(&m, MAX_NAME_LEN).to_string()
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
