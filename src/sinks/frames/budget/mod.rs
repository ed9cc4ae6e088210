// SPDX-License-Identifier: MIT
//! A frames output with a byte budget (serial lines by default; any output
//! with `,budget=`): delta summaries with rolling keyframes, incremental
//! probe-table updates, and the declared degradation order when the budget
//! is still too small (docs/wire-format.md, "Budgeted links"):
//!
//! 1. coarser wire buckets (8 → 4 → 2 → 1 per power of two),
//! 2. roll-up of quiet series into one `FAMILY:other` entry per family,
//! 3. a longer summary interval for this link only.
//!
//! [`Pacer`] is the pure plan (token bucket, keyframe period, steps);
//! [`BudgetedFrames`] applies it to the agent's cumulative histograms. Every
//! buffer is sized when the probe set changes, never per interval.
//!
//! [`pacer`] is the pure plan, [`planner`] its measures over the wire
//! entries; this file renders an interval's frames with them.

mod pacer;
mod planner;
#[cfg(test)]
mod tests;

pub use pacer::*;
pub use planner::{entry_bytes, entry_bytes_at, other_id, BudgetedFrames};

use latmon_core::session::Tick;
#[cfg(test)]
use latmon_core::summary::AlertRecord;
use latmon_core::wire::{Encoder, Entries, LinkHeader, LinkHealth, SummaryHeader, MAX_PROBES};

use crate::sinks::queue::Queue;

/// What renders a Status frame (the link's health, its records shed per
/// probe) into the caller's encoder and buffers.
pub type StatusFn<'a> = dyn FnMut(&Tick<'_>, &mut Encoder, &mut Vec<u8>, &mut Vec<usize>, LinkHealth, &[u64]) + 'a;

impl BudgetedFrames {
    /// A probe was renamed: the whole table goes again at once.
    pub fn renamed(&mut self) {
        self.hello = None;
        self.hello_requested = true;
    }

    /// Render one agent interval. `frames` collects (bytes, lens) per group
    /// and hands each group to `q`.
    // The encoder and both frame buffers are borrowed one by one, not as a
    // struct, because `status` writes into the same three between groups.
    #[allow(clippy::too_many_arguments)]
    pub fn render(
        &mut self,
        t: &Tick<'_>,
        q: &Queue,
        enc: &mut Encoder,
        buf: &mut Vec<u8>,
        lens: &mut Vec<usize>,
        flags_changed: bool,
        status: &mut StatusFn<'_>,
    ) {
        let r = t.report;
        self.wire_filled = false;
        self.pacer.refill(r.time_ns);
        if q.take_resync() {
            // The link was (re)opened: whoever listens there now gets the
            // whole table and every probe's cumulative state at once.
            self.force_keys = true;
            self.hello_requested = true;
        }
        let n = t.session.probes.len();
        if n != self.probes || t.session.boot_id != self.boot_id {
            let fresh = t.session.boot_id != self.boot_id || n < self.probes;
            self.replan(t);
            if fresh {
                self.last_full_hello_ns = None;
                self.announced = 0;
            }
        }
        // A summary due this interval that the link cannot take now: the
        // steps first, so their table rows and Status go before it.
        if !r.last && (self.ticks + 1) % self.pacer.stride as u64 == 0 {
            self.fit_summary(t);
        }
        // Hello: the whole table at start, on request and on a timer whose
        // period keeps it within its share; new rows as they appear.
        let hello_period = self.hello_period();
        let full_due =
            self.last_full_hello_ns.is_none_or(|l| r.time_ns.saturating_sub(l) >= hello_period) || self.hello_requested;
        buf.clear();
        lens.clear();
        let group = |buf: &mut Vec<u8>, lens: &mut Vec<usize>, pacer: &mut Pacer| {
            if !lens.is_empty() {
                pacer.charge(buf.len());
                q.push_group(buf, lens);
            }
            buf.clear();
            lens.clear();
        };
        if full_due {
            let hello = self.hello.get_or_insert_with(|| Self::full_hello_of(&self.families, t));
            if let Err(e) = enc.hello(hello, &mut |f| {
                buf.extend_from_slice(f);
                lens.push(f.len());
            }) {
                log::warn!("hello frame: {e}");
            }
            self.hello_bytes = buf.len();
            q.set_hello(buf);
            self.last_full_hello_ns = Some(r.time_ns);
            self.hello_requested = false;
            self.announced = n;
            // The whole table carried every changed row too.
            self.table_changed = false;
            status(t, enc, buf, lens, self.health(t.session.interval_ns), &self.shed);
            group(buf, lens, &mut self.pacer);
        } else if self.announced < n || self.table_changed {
            // Only the new rows: no Hello storm when series are born. After
            // a roll-up, the `other` rows and the rolled series' rows too
            // (not the whole table: the whole table waits for its timer).
            let mut hello = Self::full_hello_of(&self.families, t);
            let from = self.announced as u16;
            let changed = std::mem::take(&mut self.table_changed);
            let families = &self.families;
            let rolled = |id: u16| families.iter().any(|f| f.members.contains(&(id as usize)));
            hello
                .probes
                .retain(|p| (p.id >= from && (p.id as usize) < n) || (changed && (p.id as usize >= n || rolled(p.id))));
            if let Err(e) = enc.hello(&hello, &mut |f| {
                buf.extend_from_slice(f);
                lens.push(f.len());
            }) {
                log::warn!("hello frame: {e}");
            }
            self.announced = n;
            group(buf, lens, &mut self.pacer);
            // Receivers joining later get the whole table.
            let full = self.hello.insert(Self::full_hello_of(&self.families, t));
            let mut tmp = Vec::new();
            let _ = enc.hello(full, &mut |f| tmp.extend_from_slice(f));
            self.hello_bytes = tmp.len();
            q.set_hello(&tmp);
        }
        // A step or the agent's flags changed: say so at once (a full Hello
        // above already carried a Status).
        let plan = (self.pacer.merge, self.pacer.rolled, self.pacer.stride);
        // A flags change waits for credit (under load the agent's
        // over-budget flag may change every interval, and a Status of ~120
        // probes is ~1 KB: at 9600 baud that alone is over the budget); a
        // step is said at once.
        let flags_due = flags_changed && self.pacer.credit() > 0;
        if !full_due && (flags_due || plan != self.last_plan) {
            status(t, enc, buf, lens, self.health(t.session.interval_ns), &self.shed);
            group(buf, lens, &mut self.pacer);
        }
        self.last_plan = plan;
        self.send_alerts(t, enc, buf, lens, q);
        self.ticks += 1;
        if !self.pacer.summary_due(self.ticks, r.last) {
            return;
        }
        let dt = r.time_ns.saturating_sub(if self.last_sent_ns == 0 { t.session.start_ns } else { self.last_sent_ns });
        // The loops before the summary they go with (cumulative counts,
        // like a keyframe: a summary the pacer holds back loses none).
        super::render::loops_into(t, enc, buf, lens);
        group(buf, lens, &mut self.pacer);
        let bytes = self.summary(t, enc, buf, lens, dt);
        self.pacer.summary_sent(bytes);
        q.push_group(buf, lens);
        buf.clear();
        lens.clear();
        // Plan the next ones.
        let full_key: u64 = self.ids.iter().zip(&self.sent).map(|(&id, h)| entry_bytes(id, h) as u64).sum();
        self.full_key_bytes = full_key;
        let hello_bps = (self.hello_bytes as u128 * 1_000_000_000 / hello_period.max(1) as u128) as u64;
        let can_roll = self.families.is_empty() && self.has_series;
        let down = self.down_cost(t, full_key);
        let before = (self.pacer.merge, self.pacer.rolled, self.pacer.stride);
        let change = self.pacer.adapt(full_key, bytes as u64, dt, hello_bps, can_roll, down);
        if change == Change::None {
            return;
        }
        self.changed(t, change, before);
    }

    /// Alerts first, within their share, shared fairly between probes:
    /// the interval's records go in rounds, one per probe with records
    /// left (starting one probe further each interval), so a probe
    /// flooding alerts cannot shed every record of another. What does not
    /// fit is shed and counted per probe (Status `shed`, `link.alerts_shed`).
    fn send_alerts(&mut self, t: &Tick<'_>, enc: &mut Encoder, buf: &mut Vec<u8>, lens: &mut Vec<usize>, q: &Queue) {
        let recs = &t.report.alert_records;
        if recs.is_empty() {
            return;
        }
        let n = t.session.probes.len();
        // Probe of each record (n: an id not in the table), its rank
        // among its probe's records, and the round-robin order.
        self.alert_seen.clear();
        self.alert_seen.resize(n + 1, 0);
        self.alert_order.clear();
        let start = self.alert_turn % (n + 1);
        for (i, a) in recs.iter().enumerate() {
            let p = a.id.index().min(n);
            let rank = self.alert_seen[p];
            self.alert_seen[p] += 1;
            let turn = (p + n + 1 - start) % (n + 1);
            self.alert_order.push(((rank as u64) << 32 | (turn as u64) << 16, i as u32, p as u16));
        }
        self.alert_order.sort_unstable();
        self.alert_turn = self.alert_turn.wrapping_add(1);
        if self.shed.len() < n {
            self.shed.resize(n, 0);
        }
        for k in 0..self.alert_order.len() {
            let (_, i, p) = self.alert_order[k];
            let a = &recs[i as usize];
            let id = if (p as usize) < n { p } else { u16::MAX };
            let ok = enc.alert(t.session.boot_id, id, a, &mut |f| {
                buf.extend_from_slice(f);
                lens.push(f.len());
            });
            if ok.is_err() {
                continue;
            }
            if self.pacer.alert(buf.len()) {
                self.pacer.charge(buf.len());
                q.push_group(buf, lens);
            } else if let Some(s) = self.shed.get_mut(p as usize) {
                *s += 1;
            }
            buf.clear();
            lens.clear();
        }
    }

    /// Keyframes for a rolling part of the entries, deltas for the rest;
    /// the frames into `buf`/`lens`. Returns the bytes.
    fn summary(&mut self, t: &Tick<'_>, enc: &mut Encoder, buf: &mut Vec<u8>, lens: &mut Vec<usize>, dt: u64) -> usize {
        let r = t.report;
        let merge = self.pacer.merge;
        // Filled once per interval: by fit_summary when it ran with this plan.
        if !std::mem::take(&mut self.wire_filled) {
            self.fill_wire(t);
        }
        let m = self.ids.len();
        // Keyframes owed: each entry once per keyframe period (all of them
        // after a resync), sent from a rolling cursor as far as the credit
        // left after this interval's deltas allows, so a keyframe never
        // bursts past the budget (new entries need none: their first delta
        // counts from zero and says so).
        let due = if self.force_keys { m } else { self.pacer.keys_due(m, dt) };
        self.force_keys = false;
        self.key_backlog = (self.key_backlog + due).min(m);
        let mut allowance = self.pacer.credit() - self.last_delta_bytes as i64;
        if std::mem::take(&mut self.keys_all) {
            allowance = i64::MAX;
            self.key_backlog = m;
        }
        self.keys.clear();
        while self.key_backlog > 0 && m > 0 {
            let e = self.cursor % m;
            let b = entry_bytes(self.ids[e], &self.wire[e]) as i64;
            if b > allowance {
                break;
            }
            allowance -= b;
            self.keys.push(e as u16);
            self.cursor = (self.cursor + 1) % m;
            self.key_backlog -= 1;
        }
        self.keys.sort_unstable_by_key(|&e| self.ids[e as usize]);
        self.deltas.clear();
        self.born_ids.clear();
        for e in 0..m {
            if self.keys.binary_search_by_key(&self.ids[e], |&k| self.ids[k as usize]).is_ok() {
                self.sent[e].clone_from(&self.wire[e]);
                self.fresh[e] = false;
                continue;
            }
            let d = self.wire[e].delta(&self.sent[e]);
            std::mem::swap(&mut self.sent[e], &mut self.wire[e]);
            self.wire[e] = d;
            let w = &self.wire[e];
            if w.count > 0 || w.drops > 0 || w.alerts > 0 {
                self.deltas.push(e as u16);
                if std::mem::take(&mut self.fresh[e]) {
                    self.born_ids.push(self.ids[e]);
                }
            }
        }
        // Deltas by ascending id (entries are in id order: probes, then
        // the `other` ids counted down from the top, so reverse those).
        let ids = &self.ids;
        self.deltas.sort_unstable_by_key(|&e| ids[e as usize]);
        self.born_ids.sort_unstable();
        let h = SummaryHeader { seq: r.seq, boot_id: t.session.boot_id, time_ns: r.time_ns, last: r.last };
        let link = LinkHeader { merge, base_seq: self.base_seq };
        let cover_end = self.ids.iter().map(|&i| i as usize + 1).max().unwrap_or(0).min(MAX_PROBES) as u16;
        let mut out = |f: &[u8]| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        };
        if !self.keys.is_empty() {
            if let Err(e) = enc.keyframe(h, link, Entries::select(&self.sent, &self.ids, &self.keys), &mut out) {
                log::warn!("summary frame: {e}");
            }
        }
        self.key_ids.clear();
        self.key_ids.extend(self.keys.iter().map(|&e| self.ids[e as usize]));
        // Everything keyframed (the first and the final summary): no delta.
        if self.keys.len() < m || m == 0 {
            if let Err(e) = enc.delta(
                h,
                link,
                Entries::select(&self.wire, &self.ids, &self.deltas),
                cover_end,
                &self.key_ids,
                &self.born_ids,
                &mut out,
            ) {
                log::warn!("delta frame: {e}");
            }
        }
        self.base_seq = r.seq;
        self.last_sent_ns = r.time_ns;
        let key_bytes: usize =
            self.keys.iter().map(|&e| entry_bytes(self.ids[e as usize], &self.sent[e as usize])).sum();
        self.last_delta_bytes = buf.len().saturating_sub(key_bytes);
        buf.len()
    }

    /// The alert record check used by `render` (kept for the unit tests).
    #[cfg(test)]
    fn alert_ok(&mut self, a: &AlertRecord) -> bool {
        self.pacer.alert(a.comm.len() + 40)
    }
}
