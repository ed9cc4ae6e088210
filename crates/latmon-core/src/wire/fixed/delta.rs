// SPDX-License-Identifier: MIT
//! The fixed-memory receiver's Delta application (kind 5, revision 3):
//! an interval's changes applied on top of the state as of `base_seq`,
//! by the desktop receiver's rules (`Tracker::on_delta`), id by id over
//! the Delta's range.

use super::read::{delta_head, DeltaHead, EntryHead, Quant, Rd, Res};
use super::{Applied, FixedTracker, Interval, Totals};
use crate::hist::BUCKETS;
use crate::wire::MAX_PROBES;

/// The state of the id a Delta's entries are at.
#[derive(Default)]
struct AtId {
    got: Option<(EntryHead, Quant)>,
    partial: bool,
    broken: bool,
}

impl<const SERIES: usize, const NAME: usize, const ALERTS: usize> FixedTracker<SERIES, NAME, ALERTS> {
    pub(super) fn on_delta(&mut self, b: &[u8]) -> Res<Applied> {
        let d = delta_head(b)?;
        self.new_boot(d.boot_id);
        self.tick(d.seq, d.base_seq);
        self.deltas += 1;
        let end = (d.end_id as usize).min(MAX_PROBES);
        let first = (d.first_id as usize).min(end);
        let mut r = Rd(d.entries);
        let n = r.len()?;
        let mut id = first;
        let mut at = AtId::default();
        let mut blocked = false; // an entry at or beyond `end` stops the walk
        let mut reported = 0u16;
        for _ in 0..n {
            let (e, part) = self.entry(d.seq, &mut r)?;
            if blocked || e.id as usize >= end {
                blocked = true;
                continue;
            }
            while id < e.id as usize {
                reported += self.delta_id(&d, id as u16, core::mem::take(&mut at)) as u16;
                id += 1;
            }
            if (e.id as usize) < id {
                continue; // out of order: ignored
            }
            let Some(i) = self.slot(e.id) else { continue };
            if !self.series[i].scheme_ok {
                self.scheme_mismatch += 1;
                continue;
            }
            let ends = e.end as usize == BUCKETS;
            at.got = self.assemble(d.seq, &e, part);
            at.partial = !ends && at.got.is_none();
            at.broken = ends && at.got.is_none();
        }
        while id < end {
            reported += self.delta_id(&d, id as u16, core::mem::take(&mut at)) as u16;
            id += 1;
        }
        Ok(Applied::Summary { seq: d.seq, keyframe: false, entries: reported })
    }

    /// Apply a Delta to one id of its range (the desktop receiver's rules,
    /// `Tracker::on_delta`); true when the id was reported.
    fn delta_id(&mut self, d: &DeltaHead<'_>, id: u16, at: AtId) -> bool {
        if at.partial {
            return false; // continues in the next frame
        }
        if at.broken {
            if let Some(i) = self.slot(id) {
                if !self.series[i].inexact {
                    self.series[i].inexact = true;
                    self.deltas_unusable += 1;
                }
            }
            return false;
        }
        let found = self.find(id);
        if d.keyed.contains(id) && found.is_none_or(|i| self.series[i].seen_seq != d.seq) {
            // Its keyframe in this summary was lost: behind until the next.
            let Some(i) = self.slot(id) else { return false };
            let s = &mut self.series[i];
            let newly = !s.inexact && s.has_base;
            s.inexact = true;
            self.deltas_unusable += newly as u64;
            return false;
        }
        if at.got.is_none() && found.is_none_or(|i| !self.series[i].has_base) {
            return false; // quiet, and no state to keep up to date
        }
        let Some(i) = self.slot(id) else { return false };
        if d.born.contains(id) {
            let s = &mut self.series[i];
            if !s.has_base && !s.inexact {
                s.base = Totals::default();
                s.has_base = true;
                s.seen_seq = d.base_seq;
            }
        }
        let s = &mut self.series[i];
        if at.got.is_none() && s.rolled {
            return false; // carried by its family's `other` entry now
        }
        if s.seen_seq == d.seq {
            return false; // keyframed in this summary already
        }
        let applies = !s.inexact && s.has_base && s.seen_seq == d.base_seq;
        let prev = if s.has_base { s.base } else { Totals::default() };
        let (delta, (p50, p99), max) = match &at.got {
            Some((h, q)) => (Totals { count: h.count, alerts: h.alerts, drops: h.drops }, q.finish(h), h.max_ns),
            None => (Totals::default(), (0, 0), 0),
        };
        let cur = Totals {
            count: prev.count.wrapping_add(delta.count),
            alerts: prev.alerts.wrapping_add(delta.alerts),
            drops: prev.drops.wrapping_add(delta.drops),
        };
        s.interval =
            Interval { seq: d.seq, count: delta.count, keyframe: false, p50_ns: p50, p99_ns: p99, max_ns: max };
        s.shown = cur;
        s.reported = true;
        if applies {
            s.base = cur;
            s.seen_seq = d.seq;
        } else {
            s.inexact = true;
            self.deltas_unusable += 1;
        }
        true
    }
}
