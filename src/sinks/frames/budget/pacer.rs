// SPDX-License-Identifier: MIT
//! The pure budget plan of one link: token bucket, keyframe period,
//! degradation steps and their hysteresis. No frames, no I/O: the
//! planner measures, the pacer decides.

use latmon_core::wire::{LinkHealth, Step, MAX_MERGE, USE_WINDOW_NS};

/// Every probe's cumulative state goes out at least this often.
pub const KEYFRAME_MAX_NS: u64 = 60_000_000_000;
/// ...and, on a roomy link, not more often than this.
pub const KEYFRAME_MIN_NS: u64 = 10_000_000_000;
/// Alerts may use this share of the budget before they are shed (counted).
pub const ALERT_SHARE_PERCENT: u64 = 25;
/// The plan uses at most this share of the budget (Hello, Status and
/// estimate errors live in the rest).
pub const PLAN_PERCENT: u64 = 85;
/// Series of a family kept by the roll-up (the busiest, by interval count).
pub const ROLLUP_KEEP: usize = 8;
/// Longest link interval, in agent intervals.
pub const MAX_STRIDE: u32 = 64;
/// Link summaries between two steps up (the estimate settles).
pub(super) const STEP_SETTLE_TICKS: u32 = 3;
/// A step down waits for this many link summaries in a row that fit...
pub const DOWN_SETTLE_TICKS: u32 = 20;
/// ...at most this many, after steps down that did not hold.
pub const MAX_DOWN_SETTLE_TICKS: u32 = 640;
/// ...with the lower step's estimated cost within this share of the plan
/// (a step up is taken above 100 %: the band between is the hysteresis).
pub const DOWN_FIT_PERCENT: u64 = 60;
/// A plan this far over its room (percent) takes a longer interval in
/// one go (a power of two as large as the excess), not by doubling.
pub const FAR_OVER_PERCENT: u64 = 150;
/// A debt (the start-up table, a full keyframe) is planned to be repaid
/// within this time.
pub const DEBT_REPAY_NS: u64 = 30_000_000_000;
/// The credit a link may save up: this much time of its budget.
pub(super) const CREDIT_CAP_NS: u64 = 2_000_000_000;
/// The full Hello of a budgeted link goes out at least this often, and
/// not more often than its bytes fit [`HELLO_SHARE_PERCENT`] of the budget.
pub const HELLO_MAX_PERIOD_NS: u64 = 300_000_000_000;
pub const HELLO_SHARE_PERCENT: u64 = 5;

/// What [`Pacer::adapt`] did to the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// A degradation step (or a coarser merge / longer interval) taken.
    Up,
    /// Back down one step: the load fell.
    Down,
}

/// What the plan would cost one step down (the caller's estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownCost {
    /// The deltas, in percent of what they cost now.
    pub delta_pct: u64,
    /// Keyframing every entry (bytes).
    pub key_bytes: u64,
    /// Sent once on the way down (a full keyframe, the whole table).
    pub once_bytes: u64,
    /// The deltas at the coarsest buckets, percent of now: when even they
    /// would not fit, the series count is what overflows (roll up now).
    pub coarsest_pct: u64,
}

impl DownCost {
    /// A step down that costs what now costs (a test's plain case).
    pub const SAME: DownCost = DownCost { delta_pct: 100, key_bytes: 0, once_bytes: 0, coarsest_pct: 100 };
}

/// The pure budget plan of one link.
#[derive(Debug, Clone)]
pub struct Pacer {
    pub budget_bps: u64,
    /// Bytes the link may still send now (negative: in debt).
    pub(super) credit: i64,
    pub(super) alert_credit: i64,
    pub(super) last_ns: Option<u64>,
    pub merge: u8,
    pub rolled: bool,
    /// Agent intervals per link summary.
    pub stride: u32,
    pub keyframe_ns: u64,
    /// Accumulated keyframe work (entries × ns) not yet sent.
    pub(super) key_acc: u128,
    pub(super) win_start_ns: u64,
    pub(super) win_bytes: u64,
    pub used_bps: u64,
    pub alerts_shed: u64,
    pub folded: u64,
    pub(super) since_change: u32,
    /// Link summaries in a row whose plan fitted.
    pub(super) fit_streak: u32,
    /// The next summary is the first after a change: not measured.
    pub(super) skip_measure: bool,
    /// `folded` at the last adapt; link summaries since the last step down.
    pub(super) folded_at_adapt: u64,
    pub(super) since_down: u32,
    /// `folded` at the last adapt (any fold), and the fit streak a step
    /// down needs now (doubles when a step down did not hold).
    pub(super) folded_at_adapt_any: u64,
    pub(super) down_settle: u32,
    /// The credit right after the last link summary, and its bytes.
    pub(super) after_last: i64,
    pub(super) last_summary_bytes: u64,
    /// Smoothed summary bytes per second (deltas and keys).
    pub(super) delta_bps: u64,
    pub(super) alert_bps: u64,
    pub(super) win_alert_bytes: u64,
}

impl Pacer {
    pub fn new(budget_bps: u64) -> Self {
        let budget_bps = budget_bps.max(1);
        // Start with a full bucket: the first Hello and keyframe go at once.
        let cap = (budget_bps as u128 * CREDIT_CAP_NS as u128 / 1_000_000_000) as i64;
        Pacer {
            budget_bps,
            credit: cap,
            alert_credit: cap * ALERT_SHARE_PERCENT as i64 / 100,
            last_ns: None,
            merge: 0,
            rolled: false,
            stride: 1,
            keyframe_ns: KEYFRAME_MIN_NS,
            key_acc: 0,
            win_start_ns: 0,
            win_bytes: 0,
            used_bps: 0,
            alerts_shed: 0,
            folded: 0,
            // The first summary may take a step at once.
            since_change: STEP_SETTLE_TICKS,
            fit_streak: 0,
            skip_measure: false,
            folded_at_adapt: 0,
            since_down: u32::MAX,
            folded_at_adapt_any: 0,
            down_settle: DOWN_SETTLE_TICKS,
            after_last: 0,
            last_summary_bytes: 0,
            delta_bps: 0,
            alert_bps: 0,
            win_alert_bytes: 0,
        }
    }

    /// The link's current degradation step.
    pub fn step(&self) -> Step {
        if self.stride > 1 {
            Step::LongerInterval
        } else if self.rolled {
            Step::RollUp
        } else if self.merge > 0 {
            Step::CoarseBuckets
        } else {
            Step::None
        }
    }

    /// Time passes: credit accrues at the budget.
    pub fn refill(&mut self, now_ns: u64) {
        let dt = self.last_ns.map_or(0, |l| now_ns.saturating_sub(l));
        self.last_ns = Some(now_ns);
        let cap = (self.budget_bps as u128 * CREDIT_CAP_NS as u128 / 1_000_000_000) as i64;
        let add = (self.budget_bps as u128 * dt as u128 / 1_000_000_000).min(i64::MAX as u128) as i64;
        self.credit = self.credit.saturating_add(add).min(cap.max(1));
        let acap = cap * ALERT_SHARE_PERCENT as i64 / 100;
        self.alert_credit = self.alert_credit.saturating_add(add * ALERT_SHARE_PERCENT as i64 / 100).min(acap.max(1));
        if self.win_start_ns == 0 {
            self.win_start_ns = now_ns;
        }
        let w = now_ns.saturating_sub(self.win_start_ns);
        if w >= USE_WINDOW_NS {
            self.used_bps = (self.win_bytes as u128 * 1_000_000_000 / w as u128) as u64;
            self.alert_bps = (self.win_alert_bytes as u128 * 1_000_000_000 / w as u128) as u64;
            self.win_start_ns = now_ns;
            self.win_bytes = 0;
            self.win_alert_bytes = 0;
        } else if w >= 1_000_000_000 && self.used_bps == 0 {
            // Before the first whole window: what it used so far.
            self.used_bps = (self.win_bytes as u128 * 1_000_000_000 / w as u128) as u64;
        }
    }

    /// Bytes the link may still send now (negative: in debt).
    pub fn credit(&self) -> i64 {
        self.credit
    }

    /// Bytes queued for the link (any kind).
    pub fn charge(&mut self, bytes: usize) {
        self.credit = self.credit.saturating_sub(bytes as i64);
        self.win_bytes += bytes as u64;
    }

    /// Whether an alert frame of `bytes` may go (within the alerts' share;
    /// alerts go before this interval's summary). The caller charges it.
    pub fn alert(&mut self, bytes: usize) -> bool {
        if self.alert_credit < bytes as i64 {
            self.alerts_shed += 1;
            return false;
        }
        self.alert_credit -= bytes as i64;
        self.win_alert_bytes += bytes as u64;
        true
    }

    /// Whether this agent interval ends a link summary: every `stride`-th,
    /// and only while the link is not in debt (else it is folded into the
    /// next one: its counts travel in the next delta).
    pub fn summary_due(&mut self, tick: u64, last: bool) -> bool {
        if last {
            return true;
        }
        if tick % self.stride as u64 != 0 {
            return false;
        }
        // In debt, a summary still goes while the debt is being repaid
        // (the credit now, less what the last summary cost, is above what
        // it was after that one): the plan counts the debt, so folding is
        // for a debt that grows.
        if self.credit < 0 && self.credit.saturating_sub(self.last_summary_bytes as i64) < self.after_last {
            self.folded += 1;
            return false;
        }
        true
    }

    /// A link summary of `bytes` was queued.
    pub fn summary_sent(&mut self, bytes: usize) {
        self.charge(bytes);
        self.after_last = self.credit;
        self.last_summary_bytes = bytes as u64;
    }

    /// How many of `entries` wire entries get a keyframe in a link
    /// summary covering `dt_ns`: each one once per `keyframe_ns`.
    pub fn keys_due(&mut self, entries: usize, dt_ns: u64) -> usize {
        self.key_acc += entries as u128 * dt_ns as u128;
        let k = (self.key_acc / self.keyframe_ns.max(1) as u128) as usize;
        self.key_acc -= k as u128 * self.keyframe_ns.max(1) as u128;
        k.min(entries)
    }

    /// After a link summary: `full_key_bytes` (what keyframing every entry
    /// would cost now), `summary_bytes` just sent over `dt_ns`, and the
    /// Hello's cost per second. Sets the keyframe period; takes the next
    /// degradation step when the plan does not fit, and steps back down
    /// when it fits with room to spare for long enough. `can_roll`: the
    /// link has series to roll up; `down_pct`: what the plan would cost one
    /// step down (the caller's estimate; its one-off bytes are repaid
    /// within [`DEBT_REPAY_NS`] like any debt).
    ///
    /// The plan counts what it owes: a debt (the whole table at start, a
    /// full keyframe after a step down) is repaid within
    /// [`DEBT_REPAY_NS`] out of the same budget, so it pushes the plan up
    /// a step rather than folding intervals for long.
    ///
    /// Going up, a plan far over its room (the series count overflows: no
    /// bucket merge can make ~100 entries fit 9600 baud) takes the roll-up
    /// at once, with the coarsest buckets, and then as long a link
    /// interval as the excess says; a plan a little over takes one bucket
    /// merge at a time. Steps are still declared in order: a later step
    /// includes the earlier ones.
    pub fn adapt(
        &mut self,
        full_key_bytes: u64,
        summary_bytes: u64,
        dt_ns: u64,
        hello_bps: u64,
        can_roll: bool,
        down: DownCost,
    ) -> Change {
        self.since_change = self.since_change.saturating_add(1);
        let dt = dt_ns.max(1) as u128;
        let now_bps = (summary_bytes as u128 * 1_000_000_000 / dt) as u64;
        // Keys are part of the summary bytes: estimate the deltas alone as
        // what is left after the keys' average share.
        let key_bps_now = (full_key_bytes as u128 * 1_000_000_000 / self.keyframe_ns.max(1) as u128) as u64;
        let delta_now = now_bps.saturating_sub(key_bps_now);
        // The first summary after a change carries one-off costs (new
        // `other` entries counting from zero, a full keyframe): not a
        // measure of the new plan.
        if std::mem::take(&mut self.skip_measure) {
            // (The estimate is 0 until the next summary measures it.)
        } else {
            self.delta_bps = if self.delta_bps == 0 { delta_now } else { (self.delta_bps * 3 + delta_now) / 4 };
        }
        let debt_bps = ((-self.credit).max(0) as u128 * 1_000_000_000 / DEBT_REPAY_NS as u128) as u64;
        let plan = self.budget_bps * PLAN_PERCENT / 100;
        let plan = plan
            .saturating_sub(self.alert_bps.min(self.budget_bps * ALERT_SHARE_PERCENT / 100))
            .saturating_sub(hello_bps)
            .saturating_sub(debt_bps);
        let room = plan.saturating_sub(self.delta_bps);
        let period = if room == 0 {
            KEYFRAME_MAX_NS
        } else {
            (full_key_bytes as u128 * 1_000_000_000 / room as u128).min(u64::MAX as u128) as u64
        };
        self.keyframe_ns = period.clamp(KEYFRAME_MIN_NS, KEYFRAME_MAX_NS);
        // What the plan needs at the longest keyframe period.
        let need = self.delta_bps + (full_key_bytes as u128 * 1_000_000_000 / KEYFRAME_MAX_NS as u128) as u64;
        // Intervals folded since the last summary: the plan did not fit
        // in fact (whatever the estimate says). A step, not more folding;
        // except while a step down's one-off cost (planned) is repaid.
        self.since_down = self.since_down.saturating_add(1);
        let folding = self.folded >= self.folded_at_adapt + 2 && self.since_down > DOWN_SETTLE_TICKS;
        self.folded_at_adapt = self.folded;
        if self.folded > self.folded_at_adapt_any {
            // Any fold starts the fit streak again (a step down needs a
            // clean run).
            self.fit_streak = 0;
        }
        self.folded_at_adapt_any = self.folded;
        if need > plan || folding {
            self.fit_streak = 0;
            if self.since_change < STEP_SETTLE_TICKS {
                return Change::None;
            }
            let over_pct = need.saturating_mul(100) / plan.max(1);
            let far = over_pct >= FAR_OVER_PERCENT;
            // Would the coarsest buckets fit? If not, bucket merges are not
            // the answer: the series count is.
            let coarse_fits = self.delta_bps.saturating_mul(down.coarsest_pct) / 100 + (need - self.delta_bps) <= plan;
            let coarse_fits = coarse_fits && !(folding && need <= plan && self.merge >= 1);
            let factor = if far { over_pct.div_ceil(100).next_power_of_two() as u32 } else { 2 };
            return if self.step_up(coarse_fits, can_roll, factor) { Change::Up } else { Change::None };
        }
        // It fits: one step down once it has fitted for long enough with
        // the lower step's estimated cost well inside the plan (the band
        // between DOWN_FIT_PERCENT and 100 % is the hysteresis).
        self.fit_streak = self.fit_streak.saturating_add(1);
        if self.step() == Step::None
            || self.fit_streak < self.down_settle
            || self.credit < 0
            || self.down_need(down) > plan * DOWN_FIT_PERCENT / 100
        {
            return Change::None;
        }
        if self.stride > 1 {
            self.stride /= 2;
        } else if self.rolled {
            self.rolled = false;
        } else {
            self.merge -= 1;
        }
        self.since_change = 0;
        self.fit_streak = 0;
        self.delta_bps = 0;
        self.skip_measure = true;
        self.since_down = 0;
        Change::Down
    }

    /// One step up, in the declared order: a bucket merge while the
    /// coarsest buckets would fit (`coarse_fits`) or nothing can be rolled
    /// up, then the roll-up (with the coarsest buckets), then a link
    /// interval `factor` times as long. False when no step is left.
    pub fn step_up(&mut self, coarse_fits: bool, can_roll: bool, factor: u32) -> bool {
        if self.merge < MAX_MERGE && (coarse_fits || !can_roll) {
            self.merge += 1;
        } else if can_roll && !self.rolled {
            self.merge = MAX_MERGE;
            self.rolled = true;
        } else if self.stride < MAX_STRIDE {
            self.merge = MAX_MERGE;
            // Deltas per second fall about as the interval grows.
            self.stride = (self.stride.saturating_mul(factor.max(2))).min(MAX_STRIDE);
        } else if self.merge < MAX_MERGE {
            self.merge = MAX_MERGE;
        } else {
            return false;
        }
        if self.since_down <= self.down_settle.saturating_mul(2) {
            // Up again soon after a step down: the next step down waits
            // twice as long (the hysteresis backs off; no flapping).
            self.down_settle = self.down_settle.saturating_mul(2).min(MAX_DOWN_SETTLE_TICKS);
        }
        self.since_change = 0;
        self.delta_bps = 0;
        self.skip_measure = true;
        true
    }

    /// The most one summary may carry now: the credit, and as much again
    /// as the credit cap (one burst, repaid at once by the next interval).
    pub fn summary_room(&self) -> u64 {
        let cap = (self.budget_bps as u128 * CREDIT_CAP_NS as u128 / 1_000_000_000) as u64;
        (self.credit.max(0) as u64).saturating_add(cap.max(1))
    }

    /// What the plan would need one step down: its deltas, its keys at
    /// the longest period, its one-off bytes over the repayment time.
    pub(super) fn down_need(&self, d: DownCost) -> u64 {
        let per_s = |b: u64, ns: u64| (b as u128 * 1_000_000_000 / ns as u128) as u64;
        (self.delta_bps.saturating_mul(d.delta_pct) / 100)
            .saturating_add(per_s(d.key_bytes, KEYFRAME_MAX_NS))
            .saturating_add(per_s(d.once_bytes, DEBT_REPAY_NS))
    }

    pub fn health(&self, interval_ns: u64, rolled: usize) -> LinkHealth {
        LinkHealth {
            budget_bps: self.budget_bps.min(u32::MAX as u64) as u32,
            used_bps: self.used_bps.min(u32::MAX as u64) as u32,
            step: self.step() as u8,
            merge: self.merge,
            rolled: rolled.min(u16::MAX as usize) as u16,
            interval_ms: (interval_ns.saturating_mul(self.stride as u64) / 1_000_000).min(u32::MAX as u64) as u32,
            keyframe_ms: (self.keyframe_ns / 1_000_000).min(u32::MAX as u64) as u32,
            alerts_shed: self.alerts_shed,
            intervals_folded: self.folded,
        }
    }
}
