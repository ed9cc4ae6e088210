// SPDX-License-Identifier: MIT
//! The fixed-memory receiver: what a supervisor on a microcontroller keeps
//! of a latmon link, without std or an allocator (crates/latmon-supervisor).
//!
//! Per series (a probe id of the sender's table): its name, the totals
//! since start (count, alerts, drops) and the latest interval's count,
//! p50, p99 and max, computed while the frame is decoded (no histogram is
//! kept: 272 buckets of 8 bytes per series would not fit a small MCU).
//! The latest alert records go to a bounded ring. Capacities are const
//! generics: `SERIES` series, names of at most `NAME` bytes (longer names
//! are cut at a character boundary), `ALERTS` records. A series beyond
//! `SERIES` is not tracked: its entries are counted
//! ([`FixedTracker::over_capacity`]) and its id remembered in a 1 024-bit
//! set ([`FixedTracker::series_over_capacity`]); the series that are kept
//! stay exact. Nothing a sender says makes it panic or grow.
//!
//! The rules are the desktop receiver's (`Tracker`, docs/wire-format.md):
//! the same framing ([`FrameSplitter`]), the same seq accounting
//! ([`SeqCount`]), the same keyframe/delta application, so the totals and
//! the `lost` count equal `latmon decode`'s on the same bytes (tests/pure,
//! tests/live/supervisor.rs). A body is read in two passes over the frame
//! buffer: the first checks that the whole body is its kind's message
//! exactly as the desktop decoder reads it (the same postcard reads in the
//! same order, so one accepts what the other accepts), the second applies
//! it; nothing of a bad frame is applied.
//!
//! Per-frame stack: the reader and the entry state are a few hundred bytes
//! (measured for the firmware's whole receive path in its README).
//! Percentiles use integer arithmetic (the std `Hist::quantile` uses
//! floats); they can differ from `latmon decode`'s by a rank's rounding.

mod delta;
mod read;

use heapless::{Deque, String as HString, Vec as HVec};

use read::{
    check, read_alert, read_entry, skip_list, summary_head, DescIn, EntryHead, HelloHead, LoopsHead, Quant, Rd, Res,
    StatusHead,
};

use super::{
    FrameFault, FrameSplitter, Kind, LinkStats, RawFrame, SeqCount, SeqTick, WireCertificate, MAX_PROBES,
    ROLLED_MODE_PREFIX, SPLITTER_BUF,
};
use crate::bpf::limits::{HIST_MAX_LOG2, HIST_SUB_BITS};
use crate::hist::BUCKETS;

/// Split entries (a probe continued in the next frame of the same seq)
/// assembled at once. A sender has at most one open at a time (the entry
/// that did not fit the rest of a frame); when more are open (lost
/// continuations), the oldest is dropped, counted as `partial_dropped`.
pub const PENDING: usize = 4;

/// Bytes of an alert record's task name kept.
pub const COMM_LEN: usize = 16;

/// Totals since the sender started (one boot id).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: u64,
    pub alerts: u64,
    pub drops: u64,
}

/// The latest interval a series was reported in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interval {
    /// Summary seq.
    pub seq: u64,
    /// Events in the interval (since the last snapshot).
    pub count: u64,
    /// From a keyframe (cumulative Summary): `p50_ns`, `p99_ns` and
    /// `max_ns` are since start (the interval's buckets need the previous
    /// histogram, which is not kept); from a Delta: the interval's.
    pub keyframe: bool,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// One series as the receiver keeps it.
#[derive(Debug, Clone)]
pub struct Series<const NAME: usize> {
    pub id: u16,
    /// As the sender's Hello named it (empty until one did: show `#id`).
    pub name: HString<NAME>,
    /// What was last reported (a delta applied to a lost state is shown,
    /// marked `inexact`, but not kept as the state).
    pub shown: Totals,
    pub interval: Interval,
    /// The shown totals are lower bounds (a delta was lost) until the
    /// series' next keyframe.
    pub inexact: bool,
    /// The committed state deltas apply to, as of `seen_seq`.
    base: Totals,
    has_base: bool,
    seen_seq: u64,
    scheme_ok: bool,
    rolled: bool,
    reported: bool,
}

impl<const NAME: usize> Series<NAME> {
    fn new(id: u16) -> Self {
        Series {
            id,
            name: HString::new(),
            shown: Totals::default(),
            interval: Interval::default(),
            inexact: false,
            base: Totals::default(),
            has_base: false,
            seen_seq: 0,
            scheme_ok: true,
            rolled: false,
            reported: false,
        }
    }

    /// Reported at least once (has totals to show).
    pub fn reported(&self) -> bool {
        self.reported
    }

    /// The committed state deltas apply to (the desktop `Tracker::totals`),
    /// None before the series' first snapshot.
    pub fn committed(&self) -> Option<Totals> {
        self.has_base.then_some(self.base)
    }

    fn forget_state(&mut self) {
        self.has_base = false;
        self.seen_seq = 0;
        self.inexact = false;
    }
}

/// An alert record as kept in the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertRec {
    pub probe: u16,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub latency_ns: u64,
    pub time_ns: u64,
    pub comm: HString<COMM_LEN>,
    /// A cycle record's event (docs/wire-format.md, Alert revision 8):
    /// 0 not one, 1 miss, 2 overrun, 3 response; `latency_ns` is then
    /// release -> done (an overrun's: release -> when it was caught).
    pub event: u8,
}

/// What a frame did to the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Hello,
    /// A Summary (keyframe) or Delta frame: `entries` series reported.
    Summary {
        seq: u64,
        keyframe: bool,
        entries: u16,
    },
    Alert,
    Status,
    /// A Request, or a kind this receiver does not know (skipped).
    Other,
}

/// What the receiver made of one fragment of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A good frame, applied.
    Frame(Applied),
    /// Bytes the framing discarded.
    Fault(FrameFault),
    /// A checked frame whose body is not its kind's message (kind byte).
    BadBody(u8),
    /// A summary frame of another seq than `seq` (the last one applied)
    /// is about to be applied: `seq` is complete as far as this link
    /// goes. (The last seq of a stream has no successor: a receiver that
    /// reports per summary also reports when the line goes quiet.)
    SummaryDone { seq: u64 },
}

/// A split entry being assembled.
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u16,
    seq: u64,
    next: u16,
    quant: Quant,
}

/// The fixed-memory receiver state (see the module). Feed it checked
/// frames ([`FixedReceiver`] does the framing).
pub struct FixedTracker<const SERIES: usize, const NAME: usize, const ALERTS: usize> {
    series: HVec<Series<NAME>, SERIES>,
    pending: HVec<Pending, PENDING>,
    pub alerts: Deque<AlertRec, ALERTS>,
    /// Alert records pushed out of the ring by newer ones.
    pub alerts_overwritten: u64,
    refused: [u32; MAX_PROBES / 32],
    boot_id: Option<u32>,
    hello_boot: Option<u32>,
    pub seq: SeqCount,
    /// Entries (Hello rows, summary entries) of series beyond `SERIES`.
    pub over_capacity: u64,
    /// Probe entries dropped because the other parts of a split probe
    /// were lost.
    pub partial_dropped: u64,
    /// Times the sender restarted (new boot id, or seq going back).
    pub restarts: u64,
    /// Entries skipped because the bucket scheme is not latmon's.
    pub scheme_mismatch: u64,
    /// Entries ignored because their id is `MAX_PROBES` or more.
    pub ignored_entries: u64,
    /// Delta entries that arrived without the state they apply to.
    pub deltas_unusable: u64,
    pub deltas: u64,
    /// The sender's observer-effect certificate, as its latest Hello
    /// carried it (revision 11); None: it has none, or an older sender.
    /// Forgotten with the sender's boot.
    pub certificate: Option<WireCertificate>,
}

impl<const SERIES: usize, const NAME: usize, const ALERTS: usize> Default for FixedTracker<SERIES, NAME, ALERTS> {
    fn default() -> Self {
        Self::new()
    }
}

/// Copy `s` into a bounded string, cut at a character boundary.
fn bounded<const N: usize>(s: &str) -> HString<N> {
    let mut cut = s.len().min(N);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut h = HString::new();
    let _ = h.push_str(&s[..cut]);
    h
}

impl<const SERIES: usize, const NAME: usize, const ALERTS: usize> FixedTracker<SERIES, NAME, ALERTS> {
    pub const fn new() -> Self {
        FixedTracker {
            series: HVec::new(),
            pending: HVec::new(),
            alerts: Deque::new(),
            alerts_overwritten: 0,
            refused: [0; MAX_PROBES / 32],
            boot_id: None,
            hello_boot: None,
            seq: SeqCount { last_seq: None, summaries_lost: 0, seq_jumps: 0, last_lost: None, summaries: 0 },
            over_capacity: 0,
            partial_dropped: 0,
            restarts: 0,
            scheme_mismatch: 0,
            ignored_entries: 0,
            deltas_unusable: 0,
            deltas: 0,
            certificate: None,
        }
    }

    /// The series kept, ascending by id.
    pub fn series(&self) -> &[Series<NAME>] {
        &self.series
    }

    /// The series of probe `id`, if kept.
    pub fn get(&self, id: u16) -> Option<&Series<NAME>> {
        self.find(id).map(|i| &self.series[i])
    }

    /// Series (distinct ids) not tracked for want of capacity.
    pub fn series_over_capacity(&self) -> u32 {
        self.refused.iter().map(|w| w.count_ones()).sum()
    }

    /// Summaries lost (as `latmon decode` counts them).
    pub fn lost(&self) -> u64 {
        self.seq.summaries_lost
    }

    fn find(&self, id: u16) -> Option<usize> {
        self.series.binary_search_by_key(&id, |s| s.id).ok()
    }

    /// The series of `id`, made if there is room (else counted).
    fn slot(&mut self, id: u16) -> Option<usize> {
        match self.series.binary_search_by_key(&id, |s| s.id) {
            Ok(i) => Some(i),
            Err(i) => {
                if self.series.insert(i, Series::new(id)).is_ok() {
                    Some(i)
                } else {
                    self.over_capacity += 1;
                    if let Some(w) = self.refused.get_mut(id as usize / 32) {
                        *w |= 1 << (id % 32);
                    }
                    None
                }
            }
        }
    }

    fn new_boot(&mut self, boot_id: u32) {
        if self.boot_id.is_some_and(|b| b != boot_id) {
            self.restarts += 1;
            self.seq.new_boot();
            self.pending.clear();
            for s in self.series.iter_mut() {
                s.forget_state();
            }
            if self.hello_boot.is_some_and(|b| b != boot_id) {
                self.hello_boot = None;
                self.certificate = None;
                for s in self.series.iter_mut() {
                    s.name.clear();
                    s.rolled = false;
                }
            }
        }
        self.boot_id = Some(boot_id);
    }

    fn tick(&mut self, seq: u64, base_seq: u64) {
        if self.seq.tick(seq, base_seq) == SeqTick::Restart {
            self.restarts += 1;
            self.pending.clear();
            for s in self.series.iter_mut() {
                s.forget_state();
            }
        }
    }

    /// Apply one checked frame. `Err`: its body is not its kind's message
    /// (nothing applied; the framing counts it as a body error).
    pub fn on_frame(&mut self, raw: &RawFrame<'_>) -> Res<Applied> {
        let Some(kind) = raw.kind() else { return Ok(Applied::Other) };
        // Pass 1 over the body (then, if it ended early, over the padded
        // body): the whole message is read as the desktop decoder reads it.
        let b = match check(kind, raw.body) {
            Err(postcard::Error::DeserializeUnexpectedEnd) => {
                check(kind, raw.padded)?;
                raw.padded
            }
            r => {
                r?;
                raw.body
            }
        };
        // Pass 2: apply (cannot fail: the same reads succeeded).
        Ok(match kind {
            Kind::Hello => self.on_hello(b)?,
            Kind::Summary => self.on_summary(b)?,
            Kind::Delta => self.on_delta(b)?,
            Kind::Alert => self.on_alert(b)?,
            Kind::Status => {
                let h: StatusHead = Rd(b).get()?;
                self.new_boot(h.boot_id);
                Applied::Status
            }
            // The loops are not kept here yet: the supervisor watches
            // probes (docs/supervisor.md); read and checked, their boot id
            // taken as the desktop Tracker takes it, the rest skipped.
            Kind::Loops => {
                let h: LoopsHead = Rd(b).get()?;
                self.new_boot(h.boot_id);
                Applied::Other
            }
            Kind::Request => Applied::Other,
        })
    }

    fn on_hello(&mut self, b: &[u8]) -> Res<Applied> {
        let mut r = Rd(b);
        let h: HelloHead = r.get()?;
        self.new_boot(h.boot_id);
        let n = r.len()?;
        for _ in 0..n {
            let d: DescIn = r.get()?;
            if d.id as usize >= MAX_PROBES {
                self.ignored_entries += 1;
                continue;
            }
            let Some(i) = self.slot(d.id) else { continue };
            let s = &mut self.series[i];
            s.scheme_ok = (d.family, d.sub_bits as usize, d.max_log2 as usize) == (0, HIST_SUB_BITS, HIST_MAX_LOG2);
            s.name = bounded(d.name);
            s.rolled = d.mode.starts_with(ROLLED_MODE_PREFIX);
        }
        skip_list::<(u16, u64)>(&mut r)?;
        self.certificate = r.get()?;
        self.hello_boot = Some(h.boot_id);
        Ok(Applied::Hello)
    }

    fn on_alert(&mut self, b: &[u8]) -> Res<Applied> {
        let (a, cycle) = read_alert(b)?;
        self.new_boot(a.boot_id);
        if self.alerts.is_full() {
            self.alerts.pop_front();
            self.alerts_overwritten += 1;
        }
        let _ = self.alerts.push_back(AlertRec {
            probe: a.probe,
            pid: a.pid,
            tid: a.tid,
            cpu: a.cpu,
            latency_ns: a.latency_ns,
            time_ns: a.time_ns,
            comm: bounded(a.comm),
            event: cycle.event,
        });
        Ok(Applied::Alert)
    }

    /// The open split entry `h` continues (same id and seq, the next
    /// bucket range), if any.
    fn continues(&self, seq: u64, h: &EntryHead) -> Option<usize> {
        self.pending.iter().position(|p| p.id == h.id && p.seq == seq && p.next == h.first)
    }

    /// One part of a (possibly split) entry, its percentiles run on from
    /// the parts before it ([`Self::entry`]): the whole entry's head and
    /// percentiles when this part completes it.
    fn assemble(&mut self, seq: u64, h: &EntryHead, quant: Quant) -> Option<(EntryHead, Quant)> {
        let open = self.pending.iter().position(|p| p.id == h.id);
        match open.map(|i| self.pending.swap_remove(i)) {
            Some(p) if p.seq == seq && p.next == h.first => {}
            stale => {
                if stale.is_some() {
                    self.partial_dropped += 1;
                }
                if h.first != 0 {
                    // The earlier parts of this probe were lost.
                    self.partial_dropped += 1;
                    return None;
                }
            }
        }
        if (h.end as usize) < BUCKETS {
            if self.pending.is_full() {
                self.pending.remove(0);
                self.partial_dropped += 1;
            }
            let _ = self.pending.push(Pending { id: h.id, seq, next: h.end, quant });
            return None;
        }
        Some((*h, quant))
    }

    /// Read one entry of summary `seq`, its percentiles computed as the
    /// buckets go by, on from an open split part it continues.
    fn entry(&self, seq: u64, r: &mut Rd<'_>) -> Res<(EntryHead, Quant)> {
        let mut run: Option<Quant> = None;
        let h = read_entry(r, |h, i, c| {
            let q =
                run.get_or_insert_with(|| self.continues(seq, h).map_or(Quant::default(), |k| self.pending[k].quant));
            q.bucket(h, i, c);
        })?;
        let q = run.unwrap_or_else(|| self.continues(seq, &h).map_or(Quant::default(), |k| self.pending[k].quant));
        Ok((h, q))
    }

    fn on_summary(&mut self, b: &[u8]) -> Res<Applied> {
        let mut r = Rd(b);
        let head = summary_head(b)?;
        self.new_boot(head.boot_id);
        self.tick(head.seq, head.base_seq);
        // seq, boot_id, time_ns, last
        r.get::<u64>()?;
        r.get::<u32>()?;
        r.get::<u64>()?;
        r.get::<bool>()?;
        let n = r.len()?;
        let mut entries = 0u16;
        for _ in 0..n {
            let (e, part) = self.entry(head.seq, &mut r)?;
            if e.id as usize >= MAX_PROBES {
                self.ignored_entries += 1;
                continue;
            }
            let Some(i) = self.slot(e.id) else { continue };
            if !self.series[i].scheme_ok {
                self.pending.retain(|p| p.id != e.id);
                self.scheme_mismatch += 1;
                continue;
            }
            let Some((h, q)) = self.assemble(head.seq, &e, part) else { continue };
            let (p50, p99) = q.finish(&h);
            let Some(i) = self.find(h.id) else { continue };
            let s = &mut self.series[i];
            let prev = if s.has_base { s.base.count } else { 0 };
            let t = Totals { count: h.count, alerts: h.alerts, drops: h.drops };
            s.interval = Interval {
                seq: head.seq,
                count: h.count.saturating_sub(prev),
                keyframe: true,
                p50_ns: p50,
                p99_ns: p99,
                max_ns: h.max_ns,
            };
            s.base = t;
            s.shown = t;
            s.has_base = true;
            s.seen_seq = head.seq;
            s.inexact = false;
            s.reported = true;
            entries = entries.saturating_add(1);
        }
        Ok(Applied::Summary { seq: head.seq, keyframe: true, entries })
    }
}

/// Framing and the fixed-memory tracker together: what a supervisor's
/// UART loop feeds bytes to. `SERIES` series, `NAME`-byte names, `ALERTS`
/// alert records; the frame buffer is [`SPLITTER_BUF`] bytes.
pub struct FixedReceiver<const SERIES: usize, const NAME: usize, const ALERTS: usize> {
    split: FrameSplitter<SPLITTER_BUF>,
    pub stats: LinkStats,
    pub tracker: FixedTracker<SERIES, NAME, ALERTS>,
}

impl<const SERIES: usize, const NAME: usize, const ALERTS: usize> Default for FixedReceiver<SERIES, NAME, ALERTS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const SERIES: usize, const NAME: usize, const ALERTS: usize> FixedReceiver<SERIES, NAME, ALERTS> {
    pub const fn new() -> Self {
        FixedReceiver { split: FrameSplitter::new(), stats: LinkStats::ZERO, tracker: FixedTracker::new() }
    }

    /// A new stream begins (the line was reopened).
    pub fn restart(&mut self) {
        self.split.restart();
    }

    /// Feed received bytes; `on` sees the tracker after every frame it
    /// applied, and every fragment the framing discarded.
    pub fn feed(&mut self, input: &[u8], mut on: impl FnMut(&FixedTracker<SERIES, NAME, ALERTS>, Received)) {
        let tracker = &mut self.tracker;
        self.split.feed(&mut self.stats, input, |r| match r {
            Err(fault) => {
                on(tracker, Received::Fault(fault));
                false
            }
            Ok(raw) => {
                // Summary and Delta bodies start with their seq.
                if let (Some(Kind::Summary | Kind::Delta), Some(last)) = (raw.kind(), tracker.seq.last_seq) {
                    if postcard::take_from_bytes::<u64>(raw.body).is_ok_and(|(seq, _)| seq != last) {
                        on(tracker, Received::SummaryDone { seq: last });
                    }
                }
                match tracker.on_frame(&raw) {
                    Ok(a) => {
                        on(tracker, Received::Frame(a));
                        true
                    }
                    Err(_) if raw.at_start => {
                        on(tracker, Received::Fault(FrameFault::Joined { len: raw.len }));
                        false
                    }
                    Err(_) => {
                        on(tracker, Received::BadBody(raw.kind));
                        false
                    }
                }
            }
        });
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::hist::Hist;
    use crate::wire::{BucketScheme, Encoder, Entries, Hello, LinkHeader, ProbeDesc, SummaryHeader, DELIMITER};

    fn hello(n: usize) -> Hello {
        Hello {
            protocol_revision: crate::wire::PROTOCOL_REVISION,
            latmon_version: "0.1.0".into(),
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 9,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: n as u16,
            probes: (0..n)
                .map(|i| ProbeDesc {
                    id: i as u16,
                    name: format!("p{i}"),
                    kind: "k".into(),
                    attach: "a".into(),
                    mode: String::new(),
                    scheme: BucketScheme::LATMON,
                })
                .collect(),
            thresholds: Vec::new(),
            certificate: None,
        }
    }

    /// Frames of a Hello and one keyframe of `hists`, with `enc`.
    fn stream(enc: &mut Encoder, hists: &[Hist]) -> Vec<u8> {
        let mut out = vec![DELIMITER];
        let mut push = |f: &[u8]| out.extend_from_slice(f);
        enc.hello(&hello(hists.len()), &mut push).unwrap();
        let head = SummaryHeader { seq: 1, boot_id: 9, time_ns: 1, last: false };
        enc.keyframe(head, LinkHeader::default(), Entries::all(hists), &mut push).unwrap();
        out
    }

    #[test]
    fn series_beyond_capacity_are_counted_and_the_rest_kept_exact() {
        let hists: Vec<Hist> = (0..6u64)
            .map(|i| {
                let mut h = Hist::default();
                (0..10 + i).for_each(|v| h.record(1000 * v));
                h
            })
            .collect();
        let mut r = FixedReceiver::<4, 8, 2>::new();
        r.feed(&stream(&mut Encoder::new(), &hists), |_, _| {});
        let t = &r.tracker;
        assert_eq!((t.series().len(), t.series_over_capacity()), (4, 2));
        assert!(t.over_capacity >= 2);
        for (i, s) in t.series().iter().enumerate() {
            assert_eq!((s.id, s.shown.count, s.name.as_str()), (i as u16, 10 + i as u64, format!("p{i}").as_str()));
        }
    }

    #[test]
    fn split_entries_assemble_with_percentiles_as_the_histogram_says() {
        // Many buckets and a small frame budget: the entry spans frames.
        let mut h = Hist::default();
        (0..5000u64).for_each(|v| h.record(v * v % 9_999_991 + 17));
        let mut enc = Encoder::with_budget(96);
        let bytes = stream(&mut enc, std::slice::from_ref(&h));
        let mut r = FixedReceiver::<2, 8, 2>::new();
        r.feed(&bytes, |_, _| {});
        assert!(r.stats.frames_good > 3, "the entry was split: {:?}", r.stats);
        let s = &r.tracker.series()[0];
        assert_eq!((s.shown.count, s.interval.max_ns, r.tracker.partial_dropped), (h.count, h.max_ns, 0));
        let close = |got: u64, want: u64| got.abs_diff(want) <= 1 + want / 1_000_000;
        let p = h.percentiles();
        assert!(close(s.interval.p50_ns, p.p50_ns), "p50 {} vs {}", s.interval.p50_ns, p.p50_ns);
        assert!(close(s.interval.p99_ns, p.p99_ns), "p99 {} vs {}", s.interval.p99_ns, p.p99_ns);
    }

    #[test]
    fn garbage_never_panics_and_is_judged_as_the_desktop_decoder_judges_it() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut bytes = Vec::new();
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(if x % 9 == 0 { 0 } else { x as u8 });
        }
        let mut r = FixedReceiver::<8, 8, 2>::new();
        let mut dec = crate::wire::FrameDecoder::new();
        for chunk in bytes.chunks(37) {
            r.feed(chunk, |_, _| {});
            dec.feed(chunk, &mut |_| {});
        }
        assert_eq!(r.stats, dec.stats);
    }
}

/// The no_std build's own tests (`cargo test -p latmon-core
/// --no-default-features --lib`, run by scripts/test.sh): the spec's golden
/// frames (docs/wire-format.md), read by the receiver exactly as the
/// firmware links it, without the std encoder the tests above use.
#[cfg(test)]
mod spec_tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::wire::DELIMITER;

    /// The bytes of `<!-- golden: NAME frame -->`'s fenced hex block.
    fn spec_frame(name: &str) -> Vec<u8> {
        let doc = include_str!("../../../../../docs/wire-format.md");
        let tag = std::format!("<!-- golden: {name} frame -->");
        let rest = &doc[doc.find(&tag).unwrap_or_else(|| panic!("docs/wire-format.md lacks {tag}")) + tag.len()..];
        let body = &rest[rest.find("```").unwrap() + 3..];
        let body = &body[body.find('\n').unwrap() + 1..];
        body[..body.find("```").unwrap()]
            .split_whitespace()
            .map(|t| u8::from_str_radix(t, 16).unwrap_or_else(|_| panic!("bad hex {t:?} in {tag}")))
            .collect()
    }

    #[test]
    fn the_specs_golden_frames_read_as_the_spec_says() {
        let mut bytes = std::vec![DELIMITER];
        for name in ["hello", "summary", "alert", "alert-anatomy", "alert-cycle", "alert-overrun"] {
            bytes.extend(spec_frame(name));
        }
        // Revision 11: a Hello with a certificate is read, its summary kept.
        bytes.extend(spec_frame("hello-certificate"));
        let mut r = FixedReceiver::<4, 16, 4>::new();
        let mut seen = Vec::new();
        // Byte by byte, as a UART interrupt hands them over.
        for b in &bytes {
            r.feed(core::slice::from_ref(b), |_, got| seen.push(got));
        }
        assert_eq!((r.stats.frames_good, r.stats.errors()), (7, 0), "{:?}", r.stats);
        let t = &r.tracker;
        let c = t.certificate.expect("the certificate of the revision 11 Hello");
        assert_eq!(
            (c.verdict, c.shift_p999_ns, c.ci95_lo_ns, c.duration_s),
            (super::super::CERT_PASS, 800, -1_200, 60)
        );
        assert_eq!(t.series().len(), 1);
        let s = &t.series()[0];
        // The golden summary: runq's 4 events (300 ns, 2.5 µs, 2.6 µs, 40 µs), 1 alert.
        assert_eq!((s.id, s.name.as_str()), (0, "runq"));
        assert_eq!(s.shown, Totals { count: 4, alerts: 1, drops: 0 });
        assert_eq!((s.interval.seq, s.interval.count, s.interval.max_ns), (2, 4, 40_000));
        // The rank-2 value (2.5 µs) lies in its bucket; p99 is the 40 µs one's.
        let (lo, hi) = crate::hist::bucket_bounds(crate::hist::bucket_index(2_500));
        assert!((lo..hi).contains(&s.interval.p50_ns), "p50 {}", s.interval.p50_ns);
        assert_eq!(s.interval.p99_ns, 40_000);
        let recs: Vec<(u32, u64, &str, u8)> =
            t.alerts.iter().map(|a| (a.tid, a.latency_ns, a.comm.as_str(), a.event)).collect();
        // The cycle records (revision 8): a miss (1) and an overrun (2).
        assert_eq!(
            recs[..],
            [
                (1240, 250_000, "ctrl_loop", 0),
                (1240, 512_000, "ctrl_loop", 0),
                (1240, 1_620_000, "ctrl_loop", 1),
                (1240, 1_000_000, "ctrl_loop", 2)
            ]
        );
        assert_eq!((t.lost(), t.over_capacity, t.alerts_overwritten), (0, 0, 0));
    }
}
