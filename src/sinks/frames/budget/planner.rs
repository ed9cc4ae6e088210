// SPDX-License-Identifier: MIT
//! What a budgeted link sends, measured: the wire entries (a probe each,
//! or a family's `other` roll-up), the keyframe sizes, the plan's cost one
//! step up or down, and the table the receiver is told. The pacer decides
//! from these; `super` renders the frames.

use latmon_core::hist::Hist;
use latmon_core::session::Tick;
use latmon_core::wire::{
    self, coarsen, varint_len, Hello, LinkHealth, ProbeDesc, MAX_MERGE, MAX_PROBES, ROLLED_MODE_PREFIX,
};

use super::pacer::{Change, DownCost, Pacer, DEBT_REPAY_NS, HELLO_MAX_PERIOD_NS, HELLO_SHARE_PERCENT, ROLLUP_KEEP};

/// Wire id of the `FAMILY:other` entry of the `k`-th family: counted down
/// from the top of the id space, so it never meets an agent probe id.
pub fn other_id(k: usize) -> u16 {
    (MAX_PROBES - 1 - k) as u16
}

/// Serialized size of one keyframe entry (upper bound, as the encoder
/// plans it).
pub fn entry_bytes(id: u16, h: &Hist) -> usize {
    let mut n = varint_len(id as u64)
        + [h.count, h.sum_ns, h.min_ns, h.max_ns, h.drops, h.alerts].iter().map(|&v| varint_len(v)).sum::<usize>()
        + 6;
    let mut next = 0;
    for (i, &c) in h.slots.iter().enumerate() {
        if c > 0 {
            n += varint_len((i - next) as u64) + varint_len(c);
            next = i + 1;
        }
    }
    n
}

/// [`entry_bytes`] of `h` as it would travel at bucket merge `merge`
/// (each group of 2^merge buckets summed into its upper index, as
/// [`coarsen`] does), without building the coarse copy.
pub fn entry_bytes_at(id: u16, h: &Hist, merge: u8) -> usize {
    let mut n = varint_len(id as u64)
        + [h.count, h.sum_ns, h.min_ns, h.max_ns, h.drops, h.alerts].iter().map(|&v| varint_len(v)).sum::<usize>()
        + 6;
    let width = 1usize << merge.min(MAX_MERGE);
    let mut next = 0;
    for (g, chunk) in h.slots.chunks(width).enumerate() {
        let c: u64 = chunk.iter().sum();
        if c > 0 {
            let i = (g * width + chunk.len() - 1).min(h.slots.len() - 1);
            n += varint_len((i - next) as u64) + varint_len(c);
            next = i + 1;
        }
    }
    n
}

/// A family with its series rolled up: its `other` wire entry and members.
pub(super) struct Family {
    pub(super) head: usize,
    pub(super) other: u16,
    pub(super) members: Vec<usize>,
}

/// The budgeted rendering state of one frames output.
pub struct BudgetedFrames {
    pub pacer: Pacer,
    /// The probe count and boot id the plan is built for.
    pub(super) probes: usize,
    pub(super) boot_id: u32,
    /// Wire entries: id per entry; the probe of an entry (usize::MAX for a
    /// family's `other`); which entry each probe feeds.
    pub(super) ids: Vec<u16>,
    pub(super) src: Vec<usize>,
    pub(super) entry_of: Vec<usize>,
    pub(super) families: Vec<Family>,
    /// The last cumulative state sent per entry (coarsened), and scratch
    /// for this interval's key/delta histograms.
    pub(super) sent: Vec<Hist>,
    pub(super) wire: Vec<Hist>,
    pub(super) keys: Vec<u16>,
    pub(super) key_ids: Vec<u16>,
    /// Entries never sent yet (their receiver state is zero), and the ids
    /// of those this delta sends for the first time.
    pub(super) fresh: Vec<bool>,
    pub(super) born_ids: Vec<u16>,
    pub(super) deltas: Vec<u16>,
    pub(super) cursor: usize,
    /// Agent intervals seen, link seq of the last summary and its time.
    pub(super) ticks: u64,
    pub(super) base_seq: u64,
    pub(super) last_sent_ns: u64,
    /// The full Hello last sent, and table rows not yet announced.
    pub(super) last_full_hello_ns: Option<u64>,
    /// The whole table (built when it changes).
    pub(super) hello: Option<Hello>,
    pub(super) hello_bytes: usize,
    pub(super) announced: usize,
    pub(super) force_keys: bool,
    /// Entries owed a keyframe, and the delta bytes of the last summary.
    pub(super) key_backlog: usize,
    pub(super) last_delta_bytes: usize,
    /// The session has family series (a roll-up can help).
    pub(super) has_series: bool,
    /// What keyframing every entry costs (bytes), as of the last summary.
    pub(super) full_key_bytes: u64,
    pub hello_requested: bool,
    /// `wire` holds this interval's fill for the current entries and plan
    /// (`fit_summary` filled it; `summary` need not again). Cleared at
    /// every render and by every step.
    pub(super) wire_filled: bool,
    /// A step down was taken: the plan's measure, not the table's size,
    /// decides the roll-up from then on.
    pub(super) stepped_down: bool,
    /// The plan (merge, rolled, stride) last announced in Status.
    pub(super) last_plan: (u8, bool, u32),
    /// Rows changed (a roll-up): a table update with them is due.
    pub(super) table_changed: bool,
    /// The next summary keyframes every entry whatever the credit (after
    /// a step down that a delta cannot express); its debt is planned.
    pub(super) keys_all: bool,
    /// Alert records shed per probe; scratch for the fair share (records
    /// per probe this interval; (rank, turn) order of the records); the
    /// probe that goes first next interval.
    pub(super) shed: Vec<u64>,
    pub(super) alert_seen: Vec<u32>,
    pub(super) alert_order: Vec<(u64, u32, u16)>,
    pub(super) alert_turn: usize,
}

impl BudgetedFrames {
    pub fn new(budget_bps: u32) -> Self {
        BudgetedFrames {
            pacer: Pacer::new(budget_bps as u64),
            probes: 0,
            boot_id: 0,
            ids: Vec::new(),
            src: Vec::new(),
            entry_of: Vec::new(),
            families: Vec::new(),
            sent: Vec::new(),
            wire: Vec::new(),
            keys: Vec::new(),
            key_ids: Vec::new(),
            fresh: Vec::new(),
            born_ids: Vec::new(),
            deltas: Vec::new(),
            cursor: 0,
            ticks: 0,
            base_seq: 0,
            last_sent_ns: 0,
            last_full_hello_ns: None,
            hello: None,
            hello_bytes: 0,
            announced: 0,
            stepped_down: false,
            wire_filled: false,
            force_keys: false,
            key_backlog: 0,
            last_delta_bytes: 0,
            has_series: false,
            full_key_bytes: 0,
            hello_requested: false,
            last_plan: (0, false, 1),
            keys_all: false,
            table_changed: false,
            shed: Vec::new(),
            alert_seen: Vec::new(),
            alert_order: Vec::new(),
            alert_turn: 0,
        }
    }

    /// Series rolled up into `other` entries.
    pub fn rolled(&self) -> usize {
        self.families.iter().map(|f| f.members.len()).sum()
    }

    pub fn health(&self, interval_ns: u64) -> LinkHealth {
        self.pacer.health(interval_ns, self.rolled())
    }

    /// (Re)build the wire entries for the session's probes (allocates: at
    /// start, when series are born, when the roll-up starts).
    pub(super) fn replan(&mut self, t: &Tick<'_>) {
        let n = t.session.probes.len();
        if t.session.boot_id != self.boot_id || n < self.probes {
            // A new session: start over (the receiver does too).
            *self = BudgetedFrames { pacer: Pacer::new(self.pacer.budget_bps), ..BudgetedFrames::new(0) };
            self.boot_id = t.session.boot_id;
        }
        // New series of a rolled-up family join its `other`.
        for p in self.probes..n {
            if let Some(f) = self.families.iter_mut().find(|f| is_series_of(t, p, f.head)) {
                f.members.push(p);
            }
        }
        self.probes = n;
        self.hello = None;
        // Series are appended after their family, each named HEAD:LABEL.
        self.has_series = (0..n).any(|p| (0..p).any(|h| is_series_of(t, p, h)));
        self.rebuild_entries();
    }

    pub(super) fn rebuild_entries(&mut self) {
        let n = self.probes;
        let old: Vec<(u16, Hist)> = self.ids.iter().copied().zip(self.sent.drain(..)).collect();
        self.ids.clear();
        self.src.clear();
        self.entry_of.clear();
        self.entry_of.resize(n, usize::MAX);
        let rolled: Vec<bool> = (0..n).map(|p| self.families.iter().any(|f| f.members.contains(&p))).collect();
        for p in (0..n).filter(|&p| !rolled[p]) {
            self.entry_of[p] = self.ids.len();
            self.ids.push(p as u16);
            self.src.push(p);
        }
        for f in &self.families {
            for &m in &f.members {
                self.entry_of[m] = self.ids.len();
            }
            self.ids.push(f.other);
            self.src.push(usize::MAX);
        }
        // Keep what was sent for entries that stay; new ones start at 0
        // (the receiver's state for an id it never saw).
        self.sent = self
            .ids
            .iter()
            .map(|id| old.iter().find(|(o, _)| o == id).map_or_else(Hist::default, |(_, h)| h.clone()))
            .collect();
        self.wire.resize_with(self.ids.len(), Hist::default);
        self.keys = Vec::with_capacity(self.ids.len());
        self.key_ids = Vec::with_capacity(self.ids.len());
        self.born_ids = Vec::with_capacity(self.ids.len());
        let old_fresh: Vec<(u16, bool)> = old.iter().map(|(id, _)| *id).zip(self.fresh.iter().copied()).collect();
        self.fresh =
            self.ids.iter().map(|id| old_fresh.iter().find(|(o, _)| o == id).is_none_or(|(_, f)| *f)).collect();
        self.deltas = Vec::with_capacity(self.ids.len());
    }

    /// Start the roll-up: per family, keep the busiest [`ROLLUP_KEEP`]
    /// series of the last interval, the rest feed `FAMILY:other`.
    pub(super) fn roll_up(&mut self, t: &Tick<'_>) {
        let n = t.session.probes.len();
        let heads: Vec<usize> = (0..n).filter(|&h| (0..n).any(|p| is_series_of(t, p, h))).collect();
        for (k, &head) in heads.iter().enumerate() {
            let mut series: Vec<usize> = (0..n).filter(|&p| is_series_of(t, p, head)).collect();
            if series.len() <= ROLLUP_KEEP {
                continue;
            }
            series.sort_by_key(|&p| std::cmp::Reverse(t.report.probes.get(p).map_or(0, |r| r.count)));
            let members = series.split_off(ROLLUP_KEEP);
            self.families.push(Family { head, other: other_id(k), members });
        }
        self.rebuild_entries();
        self.hello = None;
        // The `other` entries are new: their first deltas count from zero.
    }

    /// Table rows besides the agent's probes: the `other` entries, and the
    /// rolled series marked as such.
    pub(super) fn extra_rows(families: &[Family], t: &Tick<'_>, rows: &mut Vec<ProbeDesc>) {
        for f in families {
            let head = &t.session.probes[f.head];
            let name = format!("{}:other", head.name);
            rows.push(ProbeDesc {
                id: f.other,
                name: name.clone(),
                kind: head.kind.as_str().into(),
                attach: head.attach.as_str().into(),
                mode: format!("sum of {} rolled-up series", f.members.len()),
                scheme: wire::BucketScheme::LATMON,
            });
            for &m in &f.members {
                let p = &t.session.probes[m];
                rows.push(ProbeDesc {
                    id: m as u16,
                    name: p.name.clone(),
                    kind: p.kind.as_str().into(),
                    attach: p.attach.as_str().into(),
                    mode: format!("{ROLLED_MODE_PREFIX}{name}"),
                    scheme: wire::BucketScheme::LATMON,
                });
            }
        }
    }

    /// The whole table (agent probes, `other` entries).
    pub(super) fn full_hello_of(families: &[Family], t: &Tick<'_>) -> Hello {
        let mut h = t.session.hello();
        let mut extra = Vec::new();
        Self::extra_rows(families, t, &mut extra);
        for row in extra {
            match h.probes.iter_mut().find(|p| p.id == row.id) {
                Some(p) => *p = row,
                None => h.probes.push(row),
            }
        }
        h.probes.sort_by_key(|p| p.id);
        // Rolled rows replace the agent's own rows of those series.
        h.probe_count = h.probes.len().min(u16::MAX as usize) as u16;
        h
    }

    /// Before a summary: when what it would carry at this plan (its
    /// deltas, estimated from the totals) is more than the link can take
    /// now ([`Pacer::summary_room`]), step up at once - as often as that
    /// takes, each step said in the log and the next Status - instead of
    /// sending it and folding the intervals that repay it. (Measured at
    /// 9600 baud with the default probes before: the first summary after
    /// the start-up table was a 19 KB delta of ~120 series, 40 s of the
    /// budget in one go; nothing else then crossed for 30 s.) Only the
    /// merge and the roll-up make this summary smaller; a longer link
    /// interval is for the plan (`adapt`).
    pub(super) fn fit_summary(&mut self, t: &Tick<'_>) {
        if self.families.is_empty() && self.has_series && !self.stepped_down {
            // The table (until a step down says the deltas fit): when it
            // alone is more than a quarter of
            // what the link carries in DEBT_REPAY_NS, the deltas of that
            // many series will not fit either (a row is ~50 bytes, a
            // series' delta 15-30 bytes an interval): roll up before it
            // goes, so it goes once, with its rolled rows (rolling up
            // after it re-sends every rolled row: measured 8 KB and then
            // 7.4 KB of table at 9600 baud, 33 s of that budget). Checked
            // as series are born, before their rows go. A later step down
            // un-rolls if the deltas fit after all, and ends this check.
            let repay = (self.pacer.budget_bps as u128 * DEBT_REPAY_NS as u128 / 1_000_000_000) as u64;
            if Self::table_bytes(t) > repay / 4 {
                let before = (self.pacer.merge, self.pacer.rolled, self.pacer.stride);
                while !self.pacer.rolled && self.pacer.step_up(false, true, 1) {}
                self.changed(t, Change::Up, before);
            }
        }
        for _ in 0..=MAX_MERGE + 1 {
            self.fill_wire(t);
            self.wire_filled = true;
            let room = self.pacer.summary_room();
            let merge = self.pacer.merge;
            if self.delta_bytes_at(merge) <= room || (merge >= MAX_MERGE && !self.families.is_empty()) {
                return;
            }
            let can_roll = self.families.is_empty() && self.has_series;
            let coarse_fits = self.delta_bytes_at(MAX_MERGE) <= room;
            if !can_roll && merge >= MAX_MERGE {
                return;
            }
            let before = (self.pacer.merge, self.pacer.rolled, self.pacer.stride);
            if !self.pacer.step_up(coarse_fits, can_roll, 1) {
                return;
            }
            self.changed(t, Change::Up, before);
        }
    }

    /// About the bytes of the whole table (the rows' strings and their
    /// few fixed bytes; frame overhead aside).
    pub(super) fn table_bytes(t: &Tick<'_>) -> u64 {
        let row = |p: &latmon_core::summary::ProbeInfo| {
            (p.name.len() + p.kind.as_str().len() + p.attach.as_str().len() + p.mode.len() + 8) as u64
        };
        t.session.probes.iter().map(row).sum()
    }

    /// Bytes of this interval's deltas at bucket merge `merge` (`wire`
    /// filled by [`Self::fill_wire`]; no allocation).
    pub(super) fn delta_bytes_at(&self, merge: u8) -> u64 {
        self.ids
            .iter()
            .zip(self.wire.iter().zip(&self.sent))
            .map(|(&id, (w, s))| {
                let d = w.delta(s);
                if d.count > 0 || d.drops > 0 || d.alerts > 0 {
                    entry_bytes_at(id, &d, merge) as u64
                } else {
                    0
                }
            })
            .sum()
    }

    /// A step was taken (`before`: the plan before it): roll up or un-roll
    /// the entries, keyframe what a delta cannot express, say so.
    pub(super) fn changed(&mut self, t: &Tick<'_>, change: Change, before: (u8, bool, u32)) {
        self.stepped_down |= change == Change::Down;
        self.wire_filled = false;
        if self.pacer.rolled && self.families.is_empty() {
            self.roll_up(t);
            self.table_changed = true; // its changed rows at the next interval
        }
        if !self.pacer.rolled && !self.families.is_empty() {
            // Un-roll: every series its own entry again, the whole table
            // (rows no longer marked rolled), and every entry keyframed
            // (the receiver's state of those series is from before).
            self.families.clear();
            self.rebuild_entries();
            self.hello = None;
            self.last_full_hello_ns = None;
            self.keys_all = true;
        }
        if self.pacer.merge < before.0 {
            // Finer buckets than the receiver holds: only a keyframe of
            // every entry can refine them (a delta cannot split a bucket).
            self.keys_all = true;
        }
        let step = self.pacer.step();
        log::warn!(
            "output budget {} B/s: {} degradation step {} ({}; merge {}, {} series rolled up, link interval {} agent intervals)",
            self.pacer.budget_bps,
            if change == Change::Up { "taking" } else { "the load fell: back down to" },
            step as u8,
            step.name(),
            self.pacer.merge,
            self.rolled(),
            self.pacer.stride
        );
        // Coarsen what was sent so deltas stay consistent with it.
        for h in &mut self.sent {
            coarsen(h, self.pacer.merge);
        }
    }

    /// What the plan would cost one step down: half the link interval,
    /// twice the deltas; the roll-up undone, the deltas of the entries
    /// with events this interval unrolled against rolled, the keys of
    /// every series, and once a keyframe of them all and the whole table;
    /// a finer bucket merge, about a third more, and once a keyframe of
    /// every entry (at full resolution: an upper bound).
    pub(super) fn down_cost(&self, t: &Tick<'_>, full_key: u64) -> DownCost {
        let d = self.down_cost_only(t, full_key);
        DownCost { coarsest_pct: self.coarsest_pct(), ..d }
    }

    /// The last delta's entries at the coarsest buckets, percent of their
    /// size as sent.
    pub(super) fn coarsest_pct(&self) -> u64 {
        let (mut now, mut coarse) = (0u64, 0u64);
        for &e in &self.deltas {
            let (id, h) = (self.ids[e as usize], &self.wire[e as usize]);
            now += entry_bytes_at(id, h, self.pacer.merge) as u64;
            coarse += entry_bytes_at(id, h, MAX_MERGE) as u64;
        }
        (coarse * 100).checked_div(now).unwrap_or(100)
    }

    pub(super) fn down_cost_only(&self, t: &Tick<'_>, full_key: u64) -> DownCost {
        let p = &self.pacer;
        if p.stride > 1 {
            return DownCost { delta_pct: 200, key_bytes: full_key, once_bytes: 0, coarsest_pct: 100 };
        }
        let all_keys = |merge: u8| -> u64 {
            t.totals
                .iter()
                .enumerate()
                .map(|(q, h)| entry_bytes_at(q.min(u16::MAX as usize) as u16, h, merge) as u64)
                .sum()
        };
        if !self.families.is_empty() {
            let busy = |q: usize| t.report.probes.get(q).is_some_and(|r| r.count > 0);
            let unrolled = (0..self.probes).filter(|&q| busy(q)).count() as u64;
            let mut rolled = (0..self.probes).filter(|&q| busy(q) && self.src.contains(&q)).count() as u64;
            rolled += self.families.iter().filter(|f| f.members.iter().any(|&m| busy(m))).count() as u64;
            let keys = all_keys(p.merge);
            return DownCost {
                delta_pct: (unrolled * 100 / rolled.max(1)).max(100),
                key_bytes: keys,
                once_bytes: keys + self.hello_bytes as u64,
                coarsest_pct: 100,
            };
        }
        if p.merge > 0 {
            let keys = all_keys(p.merge - 1);
            return DownCost { delta_pct: 200, key_bytes: keys, once_bytes: keys, coarsest_pct: 100 };
        }
        DownCost::SAME
    }

    /// This interval's cumulative state per entry into `wire`, coarsened
    /// to the link's bucket merge.
    pub(super) fn fill_wire(&mut self, t: &Tick<'_>) {
        // This interval's cumulative state per entry, coarsened.
        for w in &mut self.wire {
            *w = Hist::default();
        }
        for (p, tot) in t.totals.iter().enumerate() {
            let Some(&e) = self.entry_of.get(p) else { continue };
            if e == usize::MAX {
                continue;
            }
            if self.src[e] == p {
                self.wire[e].clone_from(tot);
            } else {
                self.wire[e].merge(tot);
            }
        }
        let merge = self.pacer.merge;
        for w in &mut self.wire {
            coarsen(w, merge);
        }
    }

    pub(super) fn hello_period(&self) -> u64 {
        let share = self.pacer.budget_bps * HELLO_SHARE_PERCENT / 100;
        let p = (self.hello_bytes as u128 * 1_000_000_000 / share.max(1) as u128).min(u64::MAX as u128) as u64;
        p.clamp(crate::sinks::link::HELLO_PERIOD_NS, HELLO_MAX_PERIOD_NS)
    }

    /// Alert records shed per probe id since start.
    pub fn shed(&self) -> &[u64] {
        &self.shed
    }
}

/// Whether probe `p` is a series of the family probe `head`: same kind,
/// named `HEAD:LABEL`, appended after it.
pub(super) fn is_series_of(t: &Tick<'_>, p: usize, head: usize) -> bool {
    if p <= head {
        return false;
    }
    let (ps, hs) = (&t.session.probes[p], &t.session.probes[head]);
    ps.kind == hs.kind
        && ps.name.len() > hs.name.len() + 1
        && ps.name.starts_with(hs.name.as_str())
        && ps.name.as_bytes()[hs.name.len()] == b':'
        && !ps.name[hs.name.len() + 1..].contains(':')
        // A family's waits line is a line of the family, not a quiet
        // series: never rolled up (its wait series may be, into `other`).
        && ps.wait != latmon_core::ident::Wait::Sum
}
