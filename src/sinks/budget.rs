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

use latmon_core::hist::Hist;
#[cfg(test)]
use latmon_core::hist::BUCKETS;
#[cfg(test)]
use latmon_core::summary::AlertRecord;
use latmon_core::wire::{
    self, coarsen, varint_len, Encoder, Entries, Hello, LinkHeader, LinkHealth, ProbeDesc, Step, SummaryHeader,
    MAX_MERGE, MAX_PROBES, USE_WINDOW_NS,
};

use super::queue::Queue;
use super::Tick;

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
const STEP_SETTLE_TICKS: u32 = 3;
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
const CREDIT_CAP_NS: u64 = 2_000_000_000;
/// The full Hello of a budgeted link goes out at least this often, and
/// not more often than its bytes fit [`HELLO_SHARE_PERCENT`] of the budget.
pub const HELLO_MAX_PERIOD_NS: u64 = 300_000_000_000;
pub const HELLO_SHARE_PERCENT: u64 = 5;
/// `ProbeDesc::mode` of a series that is rolled up (a table update says so).
use latmon_core::wire::ROLLED_MODE_PREFIX;

/// Wire id of the `FAMILY:other` entry of the `k`-th family: counted down
/// from the top of the id space, so it never meets an agent probe id.
pub fn other_id(k: usize) -> u16 {
    (MAX_PROBES - 1 - k) as u16
}

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
    credit: i64,
    alert_credit: i64,
    last_ns: Option<u64>,
    pub merge: u8,
    pub rolled: bool,
    /// Agent intervals per link summary.
    pub stride: u32,
    pub keyframe_ns: u64,
    /// Accumulated keyframe work (entries × ns) not yet sent.
    key_acc: u128,
    win_start_ns: u64,
    win_bytes: u64,
    pub used_bps: u64,
    pub alerts_shed: u64,
    pub folded: u64,
    since_change: u32,
    /// Link summaries in a row whose plan fitted.
    fit_streak: u32,
    /// The next summary is the first after a change: not measured.
    skip_measure: bool,
    /// `folded` at the last adapt; link summaries since the last step down.
    folded_at_adapt: u64,
    since_down: u32,
    /// `folded` at the last adapt (any fold), and the fit streak a step
    /// down needs now (doubles when a step down did not hold).
    folded_at_adapt_any: u64,
    down_settle: u32,
    /// The credit right after the last link summary, and its bytes.
    after_last: i64,
    last_summary_bytes: u64,
    /// Smoothed summary bytes per second (deltas and keys).
    delta_bps: u64,
    alert_bps: u64,
    win_alert_bytes: u64,
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
    fn down_need(&self, d: DownCost) -> u64 {
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
struct Family {
    head: usize,
    other: u16,
    members: Vec<usize>,
}

/// What renders a Status frame (the link's health, its records shed per
/// probe) into the caller's encoder and buffers.
pub type StatusFn<'a> = dyn FnMut(&Tick<'_>, &mut Encoder, &mut Vec<u8>, &mut Vec<usize>, LinkHealth, &[u64]) + 'a;

/// The budgeted rendering state of one frames output.
pub struct BudgetedFrames {
    pub pacer: Pacer,
    /// The probe count and boot id the plan is built for.
    probes: usize,
    boot_id: u32,
    /// Wire entries: id per entry; the probe of an entry (usize::MAX for a
    /// family's `other`); which entry each probe feeds.
    ids: Vec<u16>,
    src: Vec<usize>,
    entry_of: Vec<usize>,
    families: Vec<Family>,
    /// The last cumulative state sent per entry (coarsened), and scratch
    /// for this interval's key/delta histograms.
    sent: Vec<Hist>,
    wire: Vec<Hist>,
    keys: Vec<u16>,
    key_ids: Vec<u16>,
    /// Entries never sent yet (their receiver state is zero), and the ids
    /// of those this delta sends for the first time.
    fresh: Vec<bool>,
    born_ids: Vec<u16>,
    deltas: Vec<u16>,
    cursor: usize,
    /// Agent intervals seen, link seq of the last summary and its time.
    ticks: u64,
    base_seq: u64,
    last_sent_ns: u64,
    /// The full Hello last sent, and table rows not yet announced.
    last_full_hello_ns: Option<u64>,
    /// The whole table (built when it changes).
    hello: Option<Hello>,
    hello_bytes: usize,
    announced: usize,
    force_keys: bool,
    /// Entries owed a keyframe, and the delta bytes of the last summary.
    key_backlog: usize,
    last_delta_bytes: usize,
    /// The session has family series (a roll-up can help).
    has_series: bool,
    /// What keyframing every entry costs (bytes), as of the last summary.
    full_key_bytes: u64,
    pub hello_requested: bool,
    /// `wire` holds this interval's fill for the current entries and plan
    /// (`fit_summary` filled it; `summary` need not again). Cleared at
    /// every render and by every step.
    wire_filled: bool,
    /// A step down was taken: the plan's measure, not the table's size,
    /// decides the roll-up from then on.
    stepped_down: bool,
    /// The plan (merge, rolled, stride) last announced in Status.
    last_plan: (u8, bool, u32),
    /// Rows changed (a roll-up): a table update with them is due.
    table_changed: bool,
    /// The next summary keyframes every entry whatever the credit (after
    /// a step down that a delta cannot express); its debt is planned.
    keys_all: bool,
    /// Alert records shed per probe; scratch for the fair share (records
    /// per probe this interval; (rank, turn) order of the records); the
    /// probe that goes first next interval.
    shed: Vec<u64>,
    alert_seen: Vec<u32>,
    alert_order: Vec<(u64, u32, u16)>,
    alert_turn: usize,
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
    fn replan(&mut self, t: &Tick<'_>) {
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

    fn rebuild_entries(&mut self) {
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
    fn roll_up(&mut self, t: &Tick<'_>) {
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
    fn extra_rows(families: &[Family], t: &Tick<'_>, rows: &mut Vec<ProbeDesc>) {
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
    fn full_hello_of(families: &[Family], t: &Tick<'_>) -> Hello {
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
            hello.probes.retain(|p| {
                (p.id >= from && (p.id as usize) < n)
                    || (changed && (p.id as usize >= n || p.mode.starts_with(ROLLED_MODE_PREFIX)))
            });
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
    fn fit_summary(&mut self, t: &Tick<'_>) {
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
    fn table_bytes(t: &Tick<'_>) -> u64 {
        let row = |p: &latmon_core::summary::ProbeInfo| {
            (p.name.len() + p.kind.as_str().len() + p.attach.as_str().len() + p.mode.len() + 8) as u64
        };
        t.session.probes.iter().map(row).sum()
    }

    /// Bytes of this interval's deltas at bucket merge `merge` (`wire`
    /// filled by [`Self::fill_wire`]; no allocation).
    fn delta_bytes_at(&self, merge: u8) -> u64 {
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
    fn changed(&mut self, t: &Tick<'_>, change: Change, before: (u8, bool, u32)) {
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
    fn down_cost(&self, t: &Tick<'_>, full_key: u64) -> DownCost {
        let d = self.down_cost_only(t, full_key);
        DownCost { coarsest_pct: self.coarsest_pct(), ..d }
    }

    /// The last delta's entries at the coarsest buckets, percent of their
    /// size as sent.
    fn coarsest_pct(&self) -> u64 {
        let (mut now, mut coarse) = (0u64, 0u64);
        for &e in &self.deltas {
            let (id, h) = (self.ids[e as usize], &self.wire[e as usize]);
            now += entry_bytes_at(id, h, self.pacer.merge) as u64;
            coarse += entry_bytes_at(id, h, MAX_MERGE) as u64;
        }
        (coarse * 100).checked_div(now).unwrap_or(100)
    }

    fn down_cost_only(&self, t: &Tick<'_>, full_key: u64) -> DownCost {
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
        // Probe of each record (n: a name not in the table), its rank
        // among its probe's records, and the round-robin order.
        self.alert_seen.clear();
        self.alert_seen.resize(n + 1, 0);
        self.alert_order.clear();
        let start = self.alert_turn % (n + 1);
        for (i, a) in recs.iter().enumerate() {
            let p = t.session.probes.iter().position(|p| p.name == a.probe).unwrap_or(n);
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

    /// Alert records shed per probe id since start.
    pub fn shed(&self) -> &[u64] {
        &self.shed
    }

    fn hello_period(&self) -> u64 {
        let share = self.pacer.budget_bps * HELLO_SHARE_PERCENT / 100;
        let p = (self.hello_bytes as u128 * 1_000_000_000 / share.max(1) as u128).min(u64::MAX as u128) as u64;
        p.clamp(super::HELLO_PERIOD_NS, HELLO_MAX_PERIOD_NS)
    }

    /// This interval's cumulative state per entry into `wire`, coarsened
    /// to the link's bucket merge.
    fn fill_wire(&mut self, t: &Tick<'_>) {
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

/// Whether probe `p` is a series of the family probe `head`: same kind,
/// named `HEAD:LABEL`, appended after it.
fn is_series_of(t: &Tick<'_>, p: usize, head: usize) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_follows_the_budget_and_folds_when_in_debt() {
        let mut p = Pacer::new(1000);
        p.refill(0);
        p.refill(1_000_000_000);
        assert!(p.summary_due(1, false));
        p.charge(5000);
        p.refill(2_000_000_000);
        assert!(!p.summary_due(2, false), "in debt: folded into the next");
        assert_eq!(p.folded, 1);
        p.refill(4_000_000_000);
        assert!(p.summary_due(3, false));
        assert!(p.summary_due(4, true), "the final summary always goes");
        // A debt being repaid (the start-up table): summaries keep going
        // as long as the debt shrinks; one that grows it folds.
        let mut p = Pacer::new(1000);
        p.refill(0);
        p.charge(5_400);
        p.summary_sent(600);
        p.refill(1_000_000_000);
        assert!(p.credit() < 0);
        assert!(p.summary_due(1, false), "in debt, repaying: still sent");
        p.summary_sent(3_000);
        p.refill(2_000_000_000);
        assert!(!p.summary_due(2, false), "a summary that grows the debt folds");
    }

    #[test]
    fn keyframes_cover_every_entry_once_per_period() {
        let mut p = Pacer::new(1000);
        p.keyframe_ns = 10_000_000_000;
        let total: usize = (0..100).map(|_| p.keys_due(7, 1_000_000_000)).sum();
        assert_eq!(total, 70, "7 entries, 100 s, one key per entry per 10 s");
    }

    #[test]
    fn steps_are_taken_in_the_declared_order() {
        // A little over: one bucket merge at a time, then the roll-up,
        // then longer intervals.
        let mut p = Pacer::new(480);
        let mut seen = vec![p.step()];
        let mut merges = vec![];
        for _ in 0..60 {
            if p.adapt(0, 450, 1_000_000_000, 10, true, DownCost { coarsest_pct: 50, ..DownCost::SAME }) != Change::None
            {
                seen.push(p.step());
                merges.push(p.merge);
            }
        }
        seen.dedup();
        assert_eq!(seen, [Step::None, Step::CoarseBuckets, Step::RollUp, Step::LongerInterval]);
        assert_eq!(&merges[..3], [1, 2, 3], "one merge at a time");
        assert!(p.stride > 1);
        // Far over (a series count no merge can fit): the roll-up at once,
        // with the coarsest buckets (step 2 includes step 1), then an
        // interval as long as the excess says.
        let mut p = Pacer::new(480);
        assert_eq!(
            p.adapt(200_000, 5_000, 1_000_000_000, 10, true, DownCost::SAME),
            Change::Up,
            "at the first summary"
        );
        assert_eq!((p.step(), p.merge, p.stride), (Step::RollUp, MAX_MERGE, 1));
        for _ in 0..3 {
            p.adapt(200_000, 5_000, 1_000_000_000, 10, false, DownCost::SAME);
        }
        assert_eq!(p.step(), Step::LongerInterval);
        assert!(p.stride >= 16, "5 000 B/s into ~400: {}", p.stride);
        // A link with room stays at full resolution, keyframes within 60 s.
        let mut q = Pacer::new(5_760);
        for _ in 0..20 {
            assert_eq!(q.adapt(30_000, 1_500, 1_000_000_000, 50, true, DownCost::SAME), Change::None);
        }
        assert_eq!(q.step(), Step::None);
        assert!(q.keyframe_ns <= KEYFRAME_MAX_NS && q.keyframe_ns >= KEYFRAME_MIN_NS);
    }

    #[test]
    fn a_debt_counts_in_the_plan() {
        // The same load fits an even link, not one paying off a table.
        let mut even = Pacer::new(480);
        assert_eq!(even.adapt(3_000, 600, 1_000_000_000, 10, true, DownCost::SAME), Change::None);
        let mut owing = Pacer::new(480);
        owing.charge(6_000);
        assert_eq!(owing.adapt(3_000, 600, 1_000_000_000, 10, true, DownCost::SAME), Change::Up);
    }

    #[test]
    fn steps_go_back_down_with_hysteresis() {
        let mut p = Pacer::new(480);
        // (No keyframe bytes: what the plan needs is the deltas alone.)
        for _ in 0..10 {
            p.adapt(0, 5_000, 1_000_000_000, 10, true, DownCost::SAME);
        }
        assert_eq!(p.step(), Step::LongerInterval);
        let top = (p.merge, p.rolled, p.stride);
        // Load just inside the plan, but a step down would not fit with
        // room to spare: it stays (no flapping).
        p.refill(0);
        for i in 0..100 {
            let c = p.adapt(0, 300, 1_000_000_000, 10, true, DownCost { delta_pct: 200, ..DownCost::SAME });
            assert_eq!(c, Change::None, "at {i}: {p:?}");
        }
        assert_eq!((p.merge, p.rolled, p.stride), top);
        // The load falls: down one step per DOWN_SETTLE_TICKS summaries,
        // in the reverse order, to full resolution.
        let mut downs = vec![];
        for i in 0..2_000 {
            match p.adapt(0, 60, 1_000_000_000, 10, true, DownCost { delta_pct: 130, ..DownCost::SAME }) {
                Change::Down => downs.push((i, p.step(), p.merge, p.stride)),
                Change::Up => panic!("up at {i}"),
                Change::None => {}
            }
        }
        assert_eq!(p.step(), Step::None, "{downs:?}");
        assert!(downs.windows(2).all(|w| w[1].0 - w[0].0 >= DOWN_SETTLE_TICKS as usize), "{downs:?}");
        assert!(downs.windows(2).all(|w| w[1].1 <= w[0].1), "reverse order: {downs:?}");
    }

    #[test]
    fn many_series_fit_9600_and_19200_by_rolling_up() {
        // ~110 series (the default probes under load) on 480 and 960 B/s:
        // the whole run, start-up table and final summary included, within
        // the budget, by roll-up and a longer interval rather than folding.
        for budget in [480u32, 960] {
            let r = simulate(budget, 110, 300, 0, 4);
            let bps = r.bytes as u64 / r.secs;
            eprintln!(
                "{budget} B/s, 110 series: {bps} B/s, steps {:?}, plans {:?}, {} folded",
                r.steps, r.plans, r.folded
            );
            assert!(bps <= budget as u64, "{bps} B/s over the {budget} B/s budget");
            assert!(r.steps.contains(&Step::RollUp) || r.steps.contains(&Step::LongerInterval), "{:?}", r.steps);
            // Steps are first taken in the declared order.
            let first = |s: Step| r.steps.iter().position(|&x| x == s).unwrap_or(usize::MAX);
            assert!(first(Step::CoarseBuckets) < first(Step::RollUp), "{:?}", r.steps);
            assert!(r.plans.len() <= 10, "no flapping: {:?}", r.plans);
            assert!(r.folded <= r.secs / 10, "{} intervals folded in {} s", r.folded, r.secs);
            assert!(r.final_exact);
        }
    }

    #[test]
    fn series_born_at_once_never_burst_a_slow_link() {
        // The agent's start: ~120 series seen in the first 2 s (the
        // default probes under load), on 480 B/s. Before, the table went
        // first, summaries folded while it was repaid, and the first one
        // after was a delta of every series at full resolution (19 KB
        // measured live: 40 s of the budget); then nothing for ~30 s.
        let budget = 480u64;
        let r = simulate_load(budget as u32, 120, 120, 0, 6, 2, &|_| 100);
        let table_s = 3; // the start-up table: a debt, planned
        let worst = r.per_s.iter().skip(table_s).copied().max().unwrap_or(0) as u64;
        let table: usize = r.per_s.iter().take(table_s).sum();
        // The longest run of seconds without a byte after the table.
        let gap = r.per_s.iter().skip(table_s).fold((0u64, 0u64), |(run, max), &b| {
            let run = if b == 0 { run + 1 } else { 0 };
            (run, max.max(run))
        });
        eprintln!("120 series born in 2 s, 480 B/s: per second {:?}; steps {:?}", r.per_s, r.steps);
        // One summary carries at most the credit and the cap again
        // (Pacer::summary_room: 4 s of budget).
        assert!(worst <= 4 * budget, "{worst} B in one second after the table");
        assert!(r.steps.contains(&Step::RollUp), "{:?}", r.steps);
        // Silence only while the table's debt is repaid (a few seconds of
        // margin), not again for a summary's.
        let repay_s = (table as u64).div_ceil(budget) + 4;
        assert!(gap.1 <= repay_s, "{} s without a byte (table {table} B: {repay_s} s): {:?}", gap.1, r.per_s);
        assert!(r.final_exact);
    }

    #[test]
    fn a_probe_flooding_alerts_cannot_shed_every_record_of_another() {
        // Two probes on a 9600-baud budget: "flood" sends 50 alert records
        // an interval, "rare" one, listed after the flood's (as the agent
        // drains them probe by probe).
        let session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 9,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probes: vec![info("flood", "timer"), info("rare", "irq")],
            failed: Vec::new(),
        };
        let totals = vec![Hist::default(); 2];
        let q = Queue::new(1 << 24);
        let mut f = BudgetedFrames::new(480);
        let mut enc = Encoder::new();
        let (mut buf, mut lens) = (Vec::new(), Vec::new());
        let mut status_slot = None;
        let mut dec = FrameDecoder::new();
        let (mut data, mut dlens) = (Vec::new(), Vec::new());
        let mut got = [0u64; 2];
        let mut shed_status = Vec::new();
        let rec = |probe: &str, i: u64| AlertRecord {
            probe: probe.into(),
            pid: 1,
            tid: 1,
            comm: "task".into(),
            cpu: 0,
            latency_ns: 5_000 + i,
            time_ns: i,
            anatomy: None,
            cycle: None,
        };
        let secs = 30;
        for seq in 1..=secs {
            let mut alert_records: Vec<AlertRecord> = (0..50).map(|i| rec("flood", seq * 100 + i)).collect();
            alert_records.push(rec("rare", seq));
            let report = IntervalReport {
                seq,
                time_ns: seq * 1_000_000_000,
                interval_ns: 1_000_000_000,
                last: seq == secs,
                probes: (0..2).map(|p| ProbeReport::new(&session.probes[p], &totals[p], &totals[p])).collect(),
                alert_records,
                agent: Default::default(),
            };
            let tick = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
            f.render(&tick, &q, &mut enc, &mut buf, &mut lens, false, &mut |t, enc, buf, lens, link, shed| {
                super::super::status_into(&mut status_slot, t, &q, enc, buf, lens, link, shed);
            });
            if report.last {
                // The final Status (as FrameRender sends after the summary).
                let (mut b, mut l) = (Vec::new(), Vec::new());
                let link = f.health(1_000_000_000);
                super::super::status_into(&mut status_slot, &tick, &q, &mut enc, &mut b, &mut l, link, f.shed());
                q.push_group(&b, &l);
            }
            if q.pop(&mut data, &mut dlens, std::time::Duration::ZERO) == Pop::Data {
                dec.feed(&data, &mut |r| match r.expect("clean frames") {
                    latmon_core::wire::Frame::Alert(a) => got[a.probe as usize] += 1,
                    latmon_core::wire::Frame::Status(s) => shed_status = s.shed,
                    _ => {}
                });
            }
        }
        let sent = 51 * secs;
        let shed = f.shed().to_vec();
        eprintln!("records over the link {got:?}, shed per probe {shed:?}, link-wide {}", f.pacer.alerts_shed);
        assert!(got[1] >= secs * 9 / 10, "the rare probe's records arrive: {got:?}");
        assert!(got[0] > 0 && shed[0] > 0, "the flood's share is what is left: {got:?} {shed:?}");
        assert_eq!(got[0] + got[1] + shed[0] + shed[1], sent, "every record sent or shed, per probe");
        assert_eq!(shed[0] + shed[1], f.pacer.alerts_shed);
        // A Status says whose records were shed.
        let st: Vec<(u16, u64)> = shed_status.iter().map(|m| (m.id, m.alerts_shed)).collect();
        assert!(st.iter().any(|&(id, n)| id == 0 && n > 0), "{st:?}");
    }

    #[test]
    fn the_load_falls_and_the_link_steps_back_down() {
        let r = simulate_load(960, 60, 900, 0, 5, 60, &|s| if s <= 200 { 100 } else { 3 });
        eprintln!("plans {:?}, steps {:?}", r.plans, r.steps);
        let top = *r.steps.iter().max().unwrap();
        assert!(top >= Step::RollUp, "{:?}", r.steps);
        let down = |w: &[(u8, bool, u32)]| w[1].2 < w[0].2 || (w[0].1 && !w[1].1) || w[1].0 < w[0].0;
        assert!(r.plans.windows(2).any(down), "a step back down: {:?}", r.plans);
        // A step down that does not hold makes the next wait twice as long.
        assert!(r.plans.len() <= 16, "no flapping: {:?}", r.plans);
        assert!(r.final_exact);
        // Under a steady load the plan only goes up.
        let r = simulate(480, 110, 600, 0, 6);
        assert!(r.plans.len() <= 10, "{:?}", r.plans);
    }

    #[test]
    fn alerts_are_shed_beyond_their_share_and_counted() {
        let mut f = BudgetedFrames::new(1000);
        f.pacer.refill(0);
        f.pacer.refill(2_000_000_000);
        let a = AlertRecord {
            probe: "p".into(),
            pid: 1,
            tid: 1,
            comm: "c".into(),
            cpu: 0,
            latency_ns: 1,
            time_ns: 1,
            anatomy: None,
            cycle: None,
        };
        let sent = (0..100).filter(|_| f.alert_ok(&a)).count();
        assert!(sent > 0 && sent < 100, "{sent}");
        assert_eq!(f.pacer.alerts_shed, 100 - sent as u64);
    }

    #[test]
    fn entry_bytes_matches_the_encoder() {
        let mut h = Hist::default();
        for v in [5u64, 300, 2_500, 2_600, 40_000, 1 << 30] {
            h.record(v);
        }
        let mut enc = Encoder::new();
        let mut frame = Vec::new();
        let ids = [3u16];
        enc.keyframe(
            SummaryHeader { seq: 1, boot_id: 1, time_ns: 1, last: false },
            LinkHeader::default(),
            Entries::select(std::slice::from_ref(&h), &ids, &[0]),
            &mut |f| frame.extend_from_slice(f),
        )
        .unwrap();
        let est = entry_bytes(3, &h);
        assert_eq!(entry_bytes_at(3, &h, 0), est);
        for merge in 1..=MAX_MERGE {
            let mut c = h.clone();
            coarsen(&mut c, merge);
            assert_eq!(entry_bytes_at(3, &h, merge), entry_bytes(3, &c), "merge {merge}");
        }
        // The frame: est plus header, CRC, COBS; the estimate is an upper bound of the entry.
        assert!(frame.len() > est && frame.len() < est + 30, "{} vs {est}", frame.len());
        let _ = BUCKETS;
    }

    use latmon_core::ident::{BtfMode, Family, Mechanism};
    use latmon_core::session::Session;
    use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};
    use latmon_core::wire::{Event, FixedReceiver, FixedTracker, FrameDecoder, Tracker, MAX_PROBES};

    use crate::sinks::queue::Pop;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn info(name: &str, kind: &str) -> ProbeInfo {
        ProbeInfo {
            name: name.into(),
            kind: Family::parse(kind).unwrap(),
            attach: Mechanism::TpBtf,
            mode: String::new(),
            btf_mode: BtfMode::CoRe,
            wait: Default::default(),
        }
    }

    #[test]
    fn a_familys_waits_line_is_never_rolled_up() {
        let mut probes = vec![info("runq", "runq"), info("syscall", "syscall")];
        probes.push(ProbeInfo { wait: latmon_core::ident::Wait::Sum, ..info("syscall:waits", "syscall") });
        for k in 0..3 * ROLLUP_KEEP {
            probes.push(info(&format!("syscall:s{k}"), "syscall"));
        }
        let session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 7,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probes,
            failed: Vec::new(),
        };
        let n = session.probes.len();
        let zero = Hist::default();
        // The waits line the quietest of all: a roll-up by events would
        // take it first.
        let totals: Vec<Hist> = (0..n)
            .map(|p| {
                let mut h = Hist::default();
                for _ in 0..if p == 2 { 0 } else { 10 + p } {
                    h.record(1_000);
                }
                h
            })
            .collect();
        let report = IntervalReport {
            seq: 1,
            time_ns: 1_000_000_000,
            interval_ns: 1_000_000_000,
            last: false,
            probes: (0..n).map(|p| ProbeReport::new(&session.probes[p], &zero, &totals[p])).collect(),
            alert_records: Vec::new(),
            agent: Default::default(),
        };
        let tick = Tick { session: &session, report: &report, totals: &totals, read_errors: &vec![0; n] };
        let mut f = BudgetedFrames::new(480);
        f.replan(&tick);
        f.roll_up(&tick);
        assert_eq!(f.families.len(), 1, "syscall's series rolled up");
        assert_eq!(f.rolled(), 3 * ROLLUP_KEEP - ROLLUP_KEEP, "the quiet series, not the waits line");
        assert!(f.families.iter().all(|fam| !fam.members.contains(&2)), "the waits line keeps its entry");
        assert!(f.ids.contains(&2));
    }

    /// What one simulated run saw.
    struct Run {
        keyframe_checks: usize,
        delta_checks: usize,
        lost_runs: u64,
        steps: Vec<Step>,
        /// Every (merge, rolled, stride) the link went through.
        plans: Vec<(u8, bool, u32)>,
        bytes: usize,
        /// Bytes queued in each second (index: second - 1).
        per_s: Vec<usize>,
        secs: u64,
        final_exact: bool,
        folded: u64,
    }

    /// An agent with runq, a syscall family (its head sums the series) and
    /// `series` series born over the first minute, busy for `secs`
    /// one-second intervals, rendered by a budgeted frames output and
    /// read back by a Tracker, with `drop_pct` % of frames lost. Checks
    /// at every keyframe entry that the receiver's totals are the agent's
    /// (coarsened to the wire merge; `other` entries against the sum of
    /// their members), and at every delta entry without a loss behind it.
    fn simulate(budget_bps: u32, series: usize, secs: u64, drop_pct: u64, seed: u64) -> Run {
        simulate_load(budget_bps, series, secs, drop_pct, seed, 60, &|_| 100)
    }

    /// [`simulate`] with the events of second `s` scaled to `load(s)` %.
    fn simulate_load(
        budget_bps: u32,
        series: usize,
        secs: u64,
        drop_pct: u64,
        seed: u64,
        born_in_s: u64,
        load: &dyn Fn(u64) -> u64,
    ) -> Run {
        let mut rng = Rng(seed);
        let mut session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 7,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probes: vec![info("runq", "runq"), info("syscall", "syscall")],
            failed: Vec::new(),
        };
        let mut totals = vec![Hist::default(); 2];
        let mut prev = totals.clone();
        let q = Queue::new(1 << 24);
        let mut f = BudgetedFrames::new(budget_bps);
        let mut enc = Encoder::new();
        let (mut buf, mut lens) = (Vec::new(), Vec::new());
        let mut status_slot = None;
        let mut dec = FrameDecoder::new();
        let mut tracker = Tracker::new();
        let mut fixed = Box::new(FixedReceiver::<{ MAX_PROBES }, 16, 4>::new());
        let mut history: std::collections::BTreeMap<u64, Vec<Hist>> = Default::default();
        let mut run = Run {
            keyframe_checks: 0,
            delta_checks: 0,
            lost_runs: 0,
            steps: vec![Step::None],
            plans: vec![(0, false, 1)],
            bytes: 0,
            per_s: vec![0; secs as usize],
            secs,
            final_exact: false,
            folded: 0,
        };
        let (mut data, mut dlens) = (Vec::new(), Vec::new());
        for seq in 1..=secs {
            // Series are born over the first `born_in_s` seconds.
            let want = 2 + (series * seq.min(born_in_s) as usize) / born_in_s.max(1) as usize;
            while session.probes.len() < want {
                let k = session.probes.len() - 2;
                session.probes.push(info(&format!("syscall:s{k}"), "syscall"));
                totals.push(Hist::default());
                prev.push(Hist::default());
            }
            prev.clone_from(&totals);
            let pct = load(seq);
            for _ in 0..2_000 * pct / 100 {
                totals[0].record(500 + rng.next() % 200_000);
            }
            let n = totals.len();
            for p in 2..n {
                // A few busy series, most quiet.
                let events = if p < 6 { 300 * pct / 100 } else { rng.next() % (1 + 3 * pct / 100) };
                for _ in 0..events {
                    let v = 200 + rng.next() % (1 << (8 + p % 20));
                    totals[p].record(v);
                    totals[1].record(v);
                }
            }
            let report = IntervalReport {
                seq,
                time_ns: seq * 1_000_000_000,
                interval_ns: 1_000_000_000,
                last: seq == secs,
                probes: (0..n).map(|p| ProbeReport::new(&session.probes[p], &prev[p], &totals[p])).collect(),
                alert_records: Vec::new(),
                agent: Default::default(),
            };
            history.insert(seq, totals.clone());
            let tick = Tick { session: &session, report: &report, totals: &totals, read_errors: &vec![0; n] };
            // The families as this interval's frames carry them (a step
            // after the summary changes them for the next).
            let mut fams: Vec<(u16, Vec<usize>)> = f.families.iter().map(|x| (x.other, x.members.clone())).collect();
            let probes_before = f.probes;
            f.render(&tick, &q, &mut enc, &mut buf, &mut lens, false, &mut |t, enc, buf, lens, link, shed| {
                super::super::status_into(&mut status_slot, t, &q, enc, buf, lens, link, shed);
            });
            // Series born this interval joined `other` before the frames.
            if let Some(fam) = fams.first_mut() {
                for p in probes_before.max(2)..n {
                    if !fam.1.contains(&p) {
                        fam.1.push(p);
                    }
                }
            }
            if run.steps.last() != Some(&f.pacer.step()) {
                run.steps.push(f.pacer.step());
            }
            let plan = (f.pacer.merge, f.pacer.rolled, f.pacer.stride);
            if run.plans.last() != Some(&plan) {
                run.plans.push(plan);
            }
            if q.pop(&mut data, &mut dlens, std::time::Duration::ZERO) != Pop::Data {
                continue; // folded into the next summary
            }
            run.bytes += data.len();
            run.per_s[seq as usize - 1] += data.len();
            let mut at = 0;
            for &l in &dlens {
                let frame = &data[at..at + l];
                at += l;
                // Losses stop 70 s before the end: every probe gets a
                // keyframe (period <= 60 s) after its last loss.
                if drop_pct > 0 && seq + 70 < secs && rng.next() % 100 < drop_pct {
                    continue;
                }
                // The no_std receiver reads the same bytes to the same
                // committed totals, losses and inexact probes.
                fixed.feed(frame, |_, _| {});
                dec.feed(frame, &mut |r| {
                    let ev = tracker.on_frame(r.expect("clean frames"));
                    let Event::Summary { report, ids, keyframe, merge, inexact, .. } = ev else { return };
                    let agent = &history[&report.seq];
                    for (p, &id) in report.probes.iter().zip(&ids) {
                        if inexact.contains(&id) {
                            continue;
                        }
                        let mut want = Hist::default();
                        match fams.iter().find(|fam| fam.0 == id) {
                            Some(fam) => fam.1.iter().for_each(|&m| want.merge(&agent[m])),
                            None => want.clone_from(&agent[id as usize]),
                        }
                        coarsen(&mut want, merge);
                        let got = tracker.totals(id).expect("a snapshot");
                        assert_eq!(
                            (p.total_count, got.count, got.sum_ns, got.min_ns, got.max_ns),
                            (want.count, want.count, want.sum_ns, want.min_ns, want.max_ns),
                            "seq {} id {id}",
                            report.seq
                        );
                        // Coarsening composes: the receiver's buckets (from
                        // finer earlier frames) agree at this frame's merge.
                        let mut g = got.clone();
                        coarsen(&mut g, merge);
                        assert_eq!(g.slots, want.slots, "seq {} id {id}: buckets", report.seq);
                        if keyframe {
                            run.keyframe_checks += 1;
                        } else {
                            run.delta_checks += 1;
                        }
                    }
                });
            }
        }
        assert_fixed_agrees(&fixed.tracker, &tracker);
        run.lost_runs = tracker.summaries_lost + tracker.deltas_unusable;
        run.folded = f.pacer.folded;
        // The final summary is a whole keyframe: every total exact again.
        run.final_exact = tracker.inexact_probes() == 0
            && (0..totals.len()).all(|p| {
                let e = f.entry_of[p];
                let id = f.ids[e];
                let got = tracker.totals(id);
                got.is_some_and(|g| {
                    let mut want = Hist::default();
                    match f.families.iter().find(|fam| fam.other == id) {
                        Some(fam) => fam.members.iter().for_each(|&m| want.merge(&totals[m])),
                        None => want.clone_from(&totals[p]),
                    }
                    coarsen(&mut want, f.pacer.merge);
                    let ok = g.count == want.count && g.sum_ns == want.sum_ns && g.slots == want.slots;
                    if !ok {
                        eprintln!("probe {p} id {id}: {} vs {}", g.count, want.count);
                    }
                    ok
                })
            });
        run
    }

    /// The fixed-memory receiver (latmon-core's no_std one) holds what
    /// the desktop Tracker holds: committed totals per probe, inexact
    /// probes, summaries lost.
    fn assert_fixed_agrees(fixed: &FixedTracker<{ MAX_PROBES }, 16, 4>, tracker: &Tracker) {
        assert_eq!(fixed.lost(), tracker.summaries_lost, "summaries lost");
        assert_eq!(fixed.deltas_unusable, tracker.deltas_unusable, "deltas unusable");
        for id in 0..MAX_PROBES as u16 {
            let want = tracker.totals(id).map(|h| (h.count, h.alerts, h.drops));
            let s = fixed.get(id);
            let got = s.and_then(|s| s.committed()).map(|t| (t.count, t.alerts, t.drops));
            assert_eq!(got, want, "id {id}: committed totals");
            assert_eq!(s.is_some_and(|s| s.inexact), tracker.is_inexact(id), "id {id}: inexact");
        }
    }

    #[test]
    fn deltas_and_keyframes_reconstruct_the_agents_totals() {
        let r = simulate(5_760, 40, 300, 0, 1);
        assert!(
            r.keyframe_checks > 100 && r.delta_checks > 1_000,
            "{} keys, {} deltas checked",
            r.keyframe_checks,
            r.delta_checks
        );
        assert_eq!(r.lost_runs, 0);
        assert!(r.final_exact);
        assert_eq!(r.steps, [Step::None], "115200 baud has room for this");
        let bps = r.bytes as u64 / r.secs;
        assert!(bps <= 5_760, "{bps} B/s over the 5760 B/s budget");
    }

    #[test]
    fn lost_frames_cost_resolution_until_the_next_keyframe_only() {
        let r = simulate(5_760, 40, 300, 1, 2);
        assert!(r.lost_runs > 0, "1 % of frames lost: some deltas missing, reported");
        assert!(r.keyframe_checks > 100, "totals exact at keyframes: {}", r.keyframe_checks);
        assert!(r.final_exact, "and exact at the end");
    }

    #[test]
    fn a_small_budget_degrades_in_order_and_stays_exact() {
        let r = simulate(480, 60, 400, 0, 3);
        assert!(r.steps.len() > 1, "{:?}", r.steps);
        assert!(r.steps.windows(2).all(|w| w[0] < w[1]), "declared order: {:?}", r.steps);
        let bps = r.bytes as u64 / r.secs;
        assert!(bps <= 480 * 11 / 10, "{bps} B/s over the 480 B/s budget");
        assert!(r.final_exact);
        eprintln!("9600 baud model: steps {:?}, {bps} B/s", r.steps);
    }

    /// A probe of a modelled configuration: events per second, latency
    /// median (ns) and spread, and its series (0: not a family).
    struct ModelProbe {
        rate: u64,
        median: f64,
        sigma: f64,
        series: usize,
    }

    const fn mp(rate: u64, median: f64, sigma: f64, series: usize) -> ModelProbe {
        ModelProbe { rate, median, sigma, series }
    }

    /// The modelled probe sets: the default (runq, syscall, irq) and the
    /// real boards' configs (board-configs/), on a busy controller.
    fn model_sets() -> Vec<(&'static str, Vec<ModelProbe>)> {
        let runq = mp(20_000, 4_000.0, 0.8, 0);
        let runq_ctrl = || mp(1_000, 3_000.0, 0.6, 0);
        let irq = || mp(5_000, 2_000.0, 0.5, 12);
        let timer_ctrl = || mp(1_000, 25_000.0, 0.4, 0);
        let kfunc = || mp(1_000, 60_000.0, 0.3, 0);
        vec![
            ("default (runq, syscall, irq)", vec![mp(20_000, 4_000.0, 0.8, 0), mp(50_000, 1_500.0, 1.2, 40), irq()]),
            ("beaglebone-black", vec![runq, runq_ctrl(), kfunc(), irq(), mp(3_000, 2_000.0, 1.0, 10)]),
            ("imx8mp", vec![mp(20_000, 4_000.0, 0.8, 0), runq_ctrl(), kfunc(), timer_ctrl(), irq()]),
            ("raspberrypi4-64-rt", vec![mp(20_000, 4_000.0, 0.8, 0), runq_ctrl(), kfunc(), timer_ctrl(), irq()]),
            ("x86_64-generic", vec![mp(20_000, 4_000.0, 0.8, 0), runq_ctrl(), kfunc(), timer_ctrl(), irq()]),
        ]
    }

    /// Histograms of a probe set after `secs` of events: (per probe id,
    /// family head of each series or usize::MAX).
    fn model_hists(set: &[ModelProbe], secs: u64) -> (Vec<Hist>, Vec<usize>) {
        let mut hists = Vec::new();
        let mut heads = Vec::new();
        let mut series = Vec::new();
        for p in set {
            let mix = |m: f64| [(0.99, m, p.sigma), (0.01, m * 4.0, p.sigma + 0.5)];
            if p.series == 0 {
                hists.push(latmon_core::wire::tests::model_hist(p.rate * secs, &mix(p.median)));
                heads.push(usize::MAX);
                continue;
            }
            // Zipf-like shares: a few busy series, a long quiet tail.
            let norm: f64 = (1..=p.series).map(|k| 1.0 / k as f64).sum();
            let head = hists.len();
            let mut sum = Hist::default();
            let mut mine = Vec::new();
            for k in 1..=p.series {
                let n = (p.rate as f64 * secs as f64 / k as f64 / norm).round() as u64;
                let h = latmon_core::wire::tests::model_hist(n, &mix(p.median * (1 + k % 5) as f64));
                sum.merge(&h);
                mine.push(h);
            }
            hists.push(sum);
            heads.push(usize::MAX);
            for h in mine {
                series.push((head, h));
            }
        }
        for (head, h) in series {
            hists.push(h);
            heads.push(head);
        }
        (hists, heads)
    }

    fn delta_bytes(hists: &[Hist], ids: &[u16]) -> usize {
        let sel: Vec<u16> = (0..hists.len() as u16).filter(|&i| hists[i as usize].count > 0).collect();
        let mut enc = Encoder::new();
        let mut n = 0;
        let h = SummaryHeader { seq: 86_400, boot_id: 0xdead_beef, time_ns: 90_000_000_000_000, last: false };
        let cover = ids.iter().map(|&i| i + 1).max().unwrap_or(0);
        enc.delta(
            h,
            LinkHeader { merge: 0, base_seq: 86_399 },
            Entries::select(hists, ids, &sel),
            cover,
            &[],
            &[],
            &mut |f| n += f.len(),
        )
        .unwrap();
        n
    }

    /// Wire entries under the plan: coarsened, families rolled up.
    fn planned(hists: &[Hist], heads: &[usize], merge: u8, rolled: bool, interval: &[Hist]) -> (Vec<Hist>, Vec<u16>) {
        let mut out: Vec<Hist> = Vec::new();
        let mut ids = Vec::new();
        let mut others: Vec<(usize, Hist)> = Vec::new();
        let mut kept: std::collections::HashMap<usize, usize> = Default::default();
        for (p, h) in hists.iter().enumerate() {
            let head = heads[p];
            if rolled && head != usize::MAX {
                let k = kept.entry(head).or_default();
                // Series are in share order: the first ROLLUP_KEEP are the busiest.
                if *k >= ROLLUP_KEEP || interval[p].count == 0 {
                    match others.iter_mut().find(|(hd, _)| *hd == head) {
                        Some((_, o)) => o.merge(h),
                        None => others.push((head, h.clone())),
                    }
                    continue;
                }
                *k += 1;
            }
            out.push(h.clone());
            ids.push(p as u16);
        }
        for (k, (_, o)) in others.into_iter().enumerate() {
            out.push(o);
            ids.push(other_id(k));
        }
        for h in &mut out {
            coarsen(h, merge);
        }
        (out, ids)
    }

    /// Bytes per second of the current cumulative encoding (a Summary of
    /// every probe each second, Hello and Status every 10 s).
    fn current_bps(hists: &[Hist], hello_bytes: usize) -> u64 {
        let mut enc = Encoder::new();
        let mut n = 0;
        let h = SummaryHeader { seq: 86_400, boot_id: 0xdead_beef, time_ns: 90_000_000_000_000, last: false };
        enc.summary(h, hists, &mut |f| n += f.len()).unwrap();
        (n + (hello_bytes + 70) / 10) as u64
    }

    /// The budgeted plan for a probe set after `secs` of uptime: settles
    /// the Pacer on the modelled sizes; (bytes per second, step, merge,
    /// keyframe period s, link interval s).
    fn budgeted_bps(set: &[ModelProbe], secs: u64, budget: u64, hello_bytes: usize) -> (u64, Step, u8, u64, u32) {
        let (cum, heads) = model_hists(set, secs);
        let has_families = heads.iter().any(|&h| h != usize::MAX);
        let mut p = Pacer::new(budget);
        let hello_period = ((hello_bytes as u128 * 1_000_000_000 / (budget * HELLO_SHARE_PERCENT / 100).max(1) as u128)
            as u64)
            .clamp(super::super::HELLO_PERIOD_NS, HELLO_MAX_PERIOD_NS);
        let hello_bps = (hello_bytes as u64 + 70) * 1_000_000_000 / hello_period;
        let mut quiet = 0;
        let mut bps = 0;
        for _ in 0..100 {
            let (interval, _) = model_hists(set, p.stride as u64);
            let (keys, _) = planned(&cum, &heads, p.merge, p.rolled, &interval);
            let (deltas, ids) = planned(&interval, &heads, p.merge, p.rolled, &interval);
            let (_, key_ids) = planned(&cum, &heads, p.merge, p.rolled, &interval);
            let full_key: u64 = keys.iter().zip(&key_ids).map(|(h, &id)| entry_bytes(id, h) as u64).sum();
            let d = delta_bytes(&deltas, &ids) as u64;
            let now_b: u64 = deltas.iter().zip(&ids).map(|(h, &id)| entry_bytes(id, h) as u64).sum();
            let coarse_b: u64 = deltas.iter().zip(&ids).map(|(h, &id)| entry_bytes_at(id, h, MAX_MERGE) as u64).sum();
            let coarsest_pct = (coarse_b * 100).checked_div(now_b).unwrap_or(100);
            let dt = p.stride as u64 * 1_000_000_000;
            let per_tick = d + (full_key as u128 * dt as u128 / p.keyframe_ns as u128) as u64;
            bps = (per_tick as u128 * 1_000_000_000 / dt as u128) as u64 + hello_bps;
            if p.adapt(
                full_key,
                per_tick,
                dt,
                hello_bps,
                has_families,
                DownCost { delta_pct: 200, coarsest_pct, ..DownCost::SAME },
            ) != Change::None
            {
                quiet = 0;
            } else {
                quiet += 1;
                if quiet > STEP_SETTLE_TICKS + 2 {
                    break;
                }
            }
        }
        (bps, p.step(), p.merge, p.keyframe_ns / 1_000_000_000, p.stride)
    }

    /// The bytes-per-second table of docs/wire-format.md (modelled; run
    /// with --nocapture to print it). Every cell fits its budget.
    #[test]
    fn bytes_per_second_model_table() {
        let bauds: [(u64, u64); 4] = [(9_600, 480), (19_200, 960), (115_200, 5_760), (1_000_000, 50_000)];
        println!("| probe set | uptime | current (cumulative) B/s | 9600 (480 B/s) | 19200 (960 B/s) | 115200 (5 760 B/s) | 1 000 000 (50 000 B/s) |");
        println!("|---|---|---|---|---|---|---|");
        for (name, set) in model_sets() {
            let (one, _) = model_hists(&set, 1);
            // Hello: about 40 bytes a row.
            let hello_bytes = 60 + 40 * one.len();
            for (label, secs) in [("1 min", 60u64), ("1 h", 3_600), ("24 h", 86_400)] {
                let (cum, _) = model_hists(&set, secs);
                let cur = current_bps(&cum, hello_bytes);
                let mut row = format!("| {name} | {label} | {cur} |");
                for (_, budget) in bauds {
                    let (bps, step, merge, key_s, stride) = budgeted_bps(&set, secs, budget, hello_bytes);
                    assert!(bps <= budget, "{name} {label} at {budget} B/s: {bps} B/s");
                    let how = match step {
                        Step::None => format!("keys {key_s} s"),
                        Step::CoarseBuckets => format!("step 1 (merge {merge}), keys {key_s} s"),
                        Step::RollUp => format!("step 2 (merge {merge}, roll-up), keys {key_s} s"),
                        Step::LongerInterval => {
                            format!("step 3 (merge {merge}, roll-up, {stride} s interval), keys {key_s} s")
                        }
                    };
                    row.push_str(&format!(" {bps} ({how}) |"));
                }
                println!("{row}");
            }
        }
    }
}
