// SPDX-License-Identifier: MIT
//! The receiver: probe table and last cumulative snapshot per probe, from
//! which every Summary yields interval deltas.

use super::*;
use crate::hist::{Hist, BUCKETS};
use crate::ident::{AttachSaid, KindSaid};
use crate::summary::{AlertRecord, IntervalReport, Named, ProbeReport};

/// What a received frame means, for display or JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Hello(Hello),
    /// Interval deltas derived from cumulative counts, in the same shape as
    /// `latmon run` produces (`probes` holds those completed by this frame;
    /// `ids` their probe ids, in the same order).
    /// `keyframe`: from a Summary (cumulative) frame, else from a Delta;
    /// `merge`: the wire bucket merge; `inexact`: ids (of `ids`) whose
    /// totals are lower bounds, an earlier delta having been lost (exact
    /// again at their next keyframe).
    Summary {
        boot_id: u32,
        report: IntervalReport,
        ids: Vec<u16>,
        keyframe: bool,
        merge: u8,
        inexact: Vec<u16>,
    },
    Alert(ReceivedAlert),
    Status(Status),
    /// A receiver's request (seen when reading the agent's side of a link).
    Request(Request),
    /// A part of an interval's loops (kind 7); `complete` when it was the
    /// last part: the listing goes with that interval's summary.
    Loops {
        boot_id: u32,
        seq: u64,
        complete: bool,
    },
    Unknown {
        kind: u8,
    },
}

/// An alert record as a receiver got it, its wire probe id resolved to
/// the sender's name for it once, on arrival. Receivers keep records
/// longer than a sender's probe table lasts (an agent restarted with
/// another configuration reuses ids), so they key records by this name;
/// a record whose id no Hello named is `#ID`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedAlert {
    pub probe: String,
    pub record: AlertRecord,
}

impl ReceivedAlert {
    /// The record with its name, for text and JSON.
    pub fn named(&self) -> Named<'_> {
        Named { name: &self.probe, record: &self.record }
    }
}

/// A probe as a sender's Hello described it: its words, the family and
/// mechanism parsed once (a word this build does not know kept as said),
/// and the wait role and roll-up its mode's prefixes say, read here and
/// nowhere after.
#[derive(Debug, Clone)]
struct Described {
    name: String,
    kind: KindSaid,
    attach: AttachSaid,
    /// The wait role the mode's prefix says ([`wait_of_mode`]).
    wait: crate::ident::Wait,
    /// Alert threshold (Hello `thresholds`, revision 9); 0: none known.
    threshold_ns: u64,
    /// A series the sender's link rolled up into its family's `other`
    /// entry ([`ROLLED_MODE_PREFIX`]): no longer carried on its own.
    rolled: bool,
}

#[derive(Default)]
pub(super) struct Track {
    info: Option<Described>,
    scheme_ok: bool,
    /// Last complete cumulative snapshot and its time (None: none yet).
    prev: Option<Box<(Hist, u64)>>,
    /// A snapshot being assembled from split entries: seq, next bucket.
    pending: Option<Box<(u64, u16, Hist)>>,
    /// The seq `prev` is the state as of (0: none).
    seen_seq: u64,
    /// A delta could not be applied (its base was lost): `prev` is behind
    /// until the next keyframe of this probe.
    stale: bool,
    /// Alert records of this probe the sender's link shed (Status `shed`).
    alerts_shed: u64,
    /// Alert records of this probe lost before any output (Status
    /// `dropped`; the wire's summaries do not carry them).
    alerts_dropped: u64,
}

/// Receiver state: the probe table from Hello and the last cumulative
/// histogram per probe, from which every Summary yields interval deltas.
/// Pure; feed it decoded frames in stream order.
#[derive(Default)]
pub struct Tracker {
    pub hello: Option<Hello>,
    boot_id: Option<u32>,
    last_seq: Option<u64>,
    /// time_ns of the last summary, and of the one before.
    last_time_ns: u64,
    prev_time_ns: u64,
    pub(super) tracks: Vec<Track>,
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
    /// Delta entries (or quiet probes of a delta's range) that arrived
    /// without the state they apply to: interval shown, totals inexact.
    pub deltas_unusable: u64,
    /// The last run of lost summaries: (last seq received before, seq
    /// that the next summary built on); `summaries_lost` counts the runs
    /// of a revision 3 sender (each at least one interval).
    pub last_lost: Option<(u64, u64)>,
    /// Summaries (kind 2 and 5) received, and how many were deltas.
    pub summaries: u64,
    pub deltas: u64,
    /// The loops of the latest interval (Loops frames, revision 12).
    pub loops: LoopsAssembly,
    /// The seq whose loops a summary event already carried (a summary
    /// split over several frames carries them once).
    loops_given: u64,
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
                t.seen_seq = 0;
                t.stale = false;
                t.alerts_shed = 0;
                t.alerts_dropped = 0;
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
        self.tracks.get(id as usize).and_then(|t| t.info.as_ref()).map_or_else(|| format!("#{id}"), |i| i.name.clone())
    }

    /// Alert records of probe `id` the sender's link shed, since start.
    pub fn alerts_shed(&self, id: u16) -> u64 {
        self.tracks.get(id as usize).map_or(0, |t| t.alerts_shed)
    }

    /// Alert records of probe `id` lost before any output (the sender's
    /// token bucket, kernel buffer or queue), since start, as of the last
    /// Status.
    pub fn alerts_dropped(&self, id: u16) -> u64 {
        self.tracks.get(id as usize).map_or(0, |t| t.alerts_dropped)
    }

    /// Probes with alert records lost before any output: (id, count), by id.
    pub fn dropped_probes(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.tracks.iter().enumerate().filter(|(_, t)| t.alerts_dropped > 0).map(|(i, t)| (i as u16, t.alerts_dropped))
    }

    /// Probes with alert records shed: (id, count), by id.
    pub fn shed_probes(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.tracks.iter().enumerate().filter(|(_, t)| t.alerts_shed > 0).map(|(i, t)| (i as u16, t.alerts_shed))
    }

    /// The cumulative snapshot of probe `id` (for since-start views).
    pub fn totals(&self, id: u16) -> Option<&Hist> {
        self.tracks.get(id as usize).and_then(|t| t.prev.as_deref()).map(|(h, _)| h)
    }

    /// Probe `id`'s report over `prev..cur`, labelled as its Hello said
    /// (`#id` and no words until one did).
    fn report(&self, id: u16, prev: &Hist, cur: &Hist) -> ProbeReport {
        match self.tracks.get(id as usize).and_then(|t| t.info.as_ref()) {
            Some(d) => {
                let mut r = ProbeReport::labelled(&d.name, d.kind.as_str(), d.attach.as_str(), prev, cur);
                r.set_wait(d.wait);
                r.threshold_ns = d.threshold_ns;
                r
            }
            None => ProbeReport::labelled(&format!("#{id}"), "", "", prev, cur),
        }
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
                    t.info = Some(Described {
                        name: d.name.clone(),
                        kind: KindSaid::parse(&d.kind),
                        attach: AttachSaid::parse(&d.attach),
                        wait: super::wait_of_mode(&d.mode),
                        rolled: d.mode.starts_with(ROLLED_MODE_PREFIX),
                        threshold_ns: 0,
                    });
                }
                // After the rows: a part's thresholds name its own rows.
                for th in &h.thresholds {
                    if let Some(d) = self.tracks.get_mut(th.id as usize).and_then(|t| t.info.as_mut()) {
                        d.threshold_ns = th.threshold_ns;
                    }
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
                Event::Alert(ReceivedAlert { probe: self.probe_name(a.probe), record: a.into_record() })
            }
            Frame::Status(s) => {
                self.new_boot(s.boot_id);
                for m in &s.shed {
                    // Ids beyond the table are ignored, as in Hello.
                    if (m.id as usize) < MAX_PROBES {
                        self.track(m.id).alerts_shed = m.alerts_shed;
                    }
                }
                for m in &s.dropped {
                    if (m.id as usize) < MAX_PROBES {
                        self.track(m.id).alerts_dropped = m.alerts_dropped;
                    }
                }
                self.status = Some(s.clone());
                Event::Status(s)
            }
            Frame::Delta(d) => self.on_delta(d),
            Frame::Request(r) => Event::Request(r),
            Frame::Loops(l) => {
                self.new_boot(l.boot_id);
                let (boot_id, seq) = (l.boot_id, l.seq);
                let complete = self.loops.on_part(l);
                Event::Loops { boot_id, seq, complete }
            }
            Frame::Unknown { kind, .. } => Event::Unknown { kind },
        }
    }

    /// Probes whose totals are behind (a delta was lost; exact again at
    /// their next keyframe).
    pub fn inexact_probes(&self) -> usize {
        self.tracks.iter().filter(|t| t.stale).count()
    }

    /// Whether probe `id`'s totals are behind.
    pub fn is_inexact(&self, id: u16) -> bool {
        self.tracks.get(id as usize).is_some_and(|t| t.stale)
    }

    /// A frame of summary `seq` arrived: count what was lost before it.
    /// `base_seq` (revision 3) names the summary it builds on; without it
    /// a gap in seq is the loss.
    fn on_tick(&mut self, seq: u64, base_seq: u64) {
        // The accounting is the fixed-memory receiver's (SeqCount), over
        // this tracker's public counters.
        let mut c = SeqCount {
            last_seq: self.last_seq,
            summaries_lost: self.summaries_lost,
            seq_jumps: self.seq_jumps,
            last_lost: self.last_lost,
            summaries: self.summaries,
        };
        let tick = c.tick(seq, base_seq);
        self.last_seq = c.last_seq;
        self.summaries_lost = c.summaries_lost;
        self.seq_jumps = c.seq_jumps;
        self.last_lost = c.last_lost;
        self.summaries = c.summaries;
        if tick == SeqTick::Restart {
            // Same boot id but counting again from the start.
            self.restarts += 1;
            for t in &mut self.tracks {
                t.prev = None;
                t.pending = None;
                t.seen_seq = 0;
                t.stale = false;
            }
        }
    }

    /// Assemble one (possibly split) entry; Some when complete.
    fn assemble(&mut self, seq: u64, e: ProbeCounts) -> Option<Hist> {
        let t = self.track(e.id);
        let pending = t.pending.take();
        let mut h = match pending.map(|b| *b) {
            Some((pseq, next, h)) if pseq == seq && next == e.first_bucket => h,
            stale => {
                if stale.is_some() {
                    self.partial_dropped += 1;
                }
                if e.first_bucket != 0 {
                    // The earlier parts of this probe were lost.
                    self.partial_dropped += 1;
                    return None;
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
        if (e.end_bucket as usize) < BUCKETS {
            self.track(e.id).pending = Some(Box::new((seq, e.end_bucket, h)));
            return None;
        }
        Some(h)
    }

    fn on_delta(&mut self, d: Delta) -> Event {
        self.new_boot(d.boot_id);
        let prev_time = self.last_time_ns;
        self.on_tick(d.seq, d.base_seq);
        if self.last_seq == Some(d.seq) && self.last_time_ns != d.time_ns {
            self.last_time_ns = d.time_ns;
            self.prev_time_ns = prev_time;
        }
        self.deltas += 1;
        let start_ns = self.hello.as_ref().map(|h| h.start_ns);
        let mut report = IntervalReport {
            seq: d.seq,
            time_ns: d.time_ns,
            interval_ns: 0,
            last: d.last,
            probes: Vec::new(),
            alert_records: Vec::new(),
            ..Default::default()
        };
        let (mut ids, mut inexact) = (Vec::new(), Vec::new());
        let mut since: Option<u64> = None;
        let end = (d.end_id as usize).min(MAX_PROBES);
        let first = (d.first_id as usize).min(end);
        // Entries by id (ascending on the wire; anything else is ignored).
        let mut entries = d.probes.into_iter().peekable();
        for id in first..end {
            let mut got: Option<Hist> = None;
            let (mut partial, mut broken) = (false, false);
            while let Some(e) = entries.next_if(|e| (e.id as usize) <= id) {
                if e.id as usize != id {
                    continue;
                }
                if !self.track(e.id).scheme_ok {
                    self.scheme_mismatch += 1;
                    continue;
                }
                let ends = e.end_bucket as usize == BUCKETS;
                got = self.assemble(d.seq, e);
                partial = !ends && got.is_none();
                // The last part of an entry whose first parts were lost.
                broken = ends && got.is_none();
            }
            if partial {
                continue; // continues in the next frame
            }
            if broken {
                let t = self.track(id as u16);
                if !t.stale {
                    t.stale = true;
                    self.deltas_unusable += 1;
                }
                continue;
            }
            let keyed = d.keyed.contains(&(id as u16));
            if keyed && self.tracks.get(id).is_none_or(|t| t.seen_seq != d.seq) {
                // Its keyframe in this summary was lost: behind until the next.
                let t = self.track(id as u16);
                let newly = !t.stale && t.prev.is_some();
                t.stale = true;
                self.deltas_unusable += newly as u64;
                continue;
            }
            if got.is_none() && self.tracks.get(id).is_none_or(|t| t.prev.is_none()) {
                continue; // quiet, and no state to keep up to date
            }
            if d.born.contains(&(id as u16)) {
                // A new entry: the sender's state before this delta is
                // zero (a series born since the last summary).
                // As of the previous summary; the first one counts from
                // the agent's start.
                let time = if d.base_seq == 0 || self.prev_time_ns == 0 {
                    start_ns.unwrap_or(self.prev_time_ns)
                } else {
                    self.prev_time_ns
                };
                let seq = d.base_seq;
                let t = self.track(id as u16);
                if t.prev.is_none() && !t.stale {
                    t.prev = Some(Box::new((Hist::default(), time)));
                    t.seen_seq = seq;
                }
            }
            let rolled = self.tracks.get(id).and_then(|t| t.info.as_ref()).is_some_and(|i| i.rolled);
            if got.is_none() && rolled {
                continue; // carried by its family's `other` entry now
            }
            let id16 = id as u16;
            let t = self.track(id16);
            if t.seen_seq == d.seq {
                continue; // keyframed in this summary already
            }
            let delta = got.unwrap_or_default();
            let applies = !t.stale && t.prev.is_some() && t.seen_seq == d.base_seq;
            let (prev, prev_time) =
                t.prev.as_deref().map_or((Hist::default(), start_ns.unwrap_or(d.time_ns)), |(h, t)| (h.clone(), *t));
            let mut cur = prev.clone();
            cur.merge(&delta);
            cur.alerts_dropped = t.alerts_dropped.max(prev.alerts_dropped);
            since = Some(since.map_or(prev_time, |p: u64| p.min(prev_time)));
            let r = self.report(id16, &prev, &cur);
            let t = self.track(id16);
            if applies {
                t.prev = Some(Box::new((cur, d.time_ns)));
                t.seen_seq = d.seq;
            } else {
                t.stale = true;
                self.deltas_unusable += 1;
                inexact.push(id16);
            }
            report.probes.push(r);
            ids.push(id16);
        }
        report.interval_ns = since.map_or(0, |p| d.time_ns.saturating_sub(p));
        self.give_loops(d.boot_id, &mut report);
        Event::Summary { boot_id: d.boot_id, report, ids, keyframe: false, merge: d.merge, inexact }
    }

    fn on_summary(&mut self, s: Summary) -> Event {
        self.new_boot(s.boot_id);
        let prev_time = self.last_time_ns;
        self.on_tick(s.seq, s.base_seq);
        if self.last_time_ns != s.time_ns {
            self.last_time_ns = s.time_ns;
            self.prev_time_ns = prev_time;
        }
        let start_ns = self.hello.as_ref().map(|h| h.start_ns);
        let mut report = IntervalReport {
            seq: s.seq,
            time_ns: s.time_ns,
            interval_ns: 0,
            last: s.last,
            probes: Vec::with_capacity(s.probes.len()),
            alert_records: Vec::new(),
            ..Default::default()
        };
        let mut since: Option<u64> = None;
        let mut ids = Vec::with_capacity(s.probes.len());
        for e in s.probes {
            let id = e.id;
            if id as usize >= MAX_PROBES {
                self.ignored_entries += 1;
                continue;
            }
            if !self.track(id).scheme_ok {
                self.track(id).pending = None;
                self.scheme_mismatch += 1;
                continue;
            }
            let Some(mut h) = self.assemble(s.seq, e) else { continue };
            let t = self.track(id);
            let (prev, prev_time) = t.prev.take().map_or((Hist::default(), start_ns.unwrap_or(s.time_ns)), |b| *b);
            // The summaries carry no record drops: the last Status's count,
            // as of this summary (never going back within a boot).
            h.alerts_dropped = t.alerts_dropped.max(prev.alerts_dropped);
            since = Some(since.map_or(prev_time, |p: u64| p.min(prev_time)));
            let r = self.report(id, &prev, &h);
            let t = self.track(id);
            t.prev = Some(Box::new((h, s.time_ns)));
            t.seen_seq = s.seq;
            t.stale = false;
            report.probes.push(r);
            ids.push(id);
        }
        report.interval_ns = since.map_or(0, |p| s.time_ns.saturating_sub(p));
        self.give_loops(s.boot_id, &mut report);
        Event::Summary { boot_id: s.boot_id, report, ids, keyframe: true, merge: s.merge, inexact: Vec::new() }
    }

    /// The interval's loops (its Loops frames came before its summary)
    /// into the report, once per seq; none when they were lost or are
    /// of another interval (a receiver then shows no loops rather than
    /// an older interval's as this one's).
    fn give_loops(&mut self, boot_id: u32, report: &mut IntervalReport) {
        let Some(l) = self.loops.done.as_ref() else { return };
        if l.boot_id != boot_id || l.seq != report.seq || self.loops_given == report.seq {
            return;
        }
        self.loops_given = report.seq;
        report.loops.clone_from(&l.loops);
        report.loops_unlisted = l.unlisted.saturating_add(l.ignored.min(u32::MAX as u64) as u32);
        report.agent.loops_unwatched = l.unwatched;
    }
}
