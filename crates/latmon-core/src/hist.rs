// SPDX-License-Identifier: MIT
//! Log-linear latency histograms: bucket maths, CPU merge, interval deltas and
//! percentiles. Pure (no I/O); mirrors `bpf/bits.bpf.h`.
//!
//! Values below 2^SUB_BITS ns get one bucket each; every higher power of two
//! is split into 2^SUB_BITS linear sub-buckets, so a bucket is at most 12.5 %
//! of its lower bound wide. Values from 2^MAX_LOG2 ns (68.7 s) up share the
//! last bucket; the exact min/max/sum kept beside the buckets bound every
//! percentile.

use crate::bpf::limits::{HIST_BUCKETS, HIST_MAX_LOG2, HIST_SUBS, HIST_SUB_BITS};

/// Number of buckets (`LATMON_HIST_BUCKETS`).
pub const BUCKETS: usize = HIST_BUCKETS;

/// Bucket of a latency in ns; the twin of `latmon_bucket()` in bits.bpf.h.
pub const fn bucket_index(v: u64) -> usize {
    if v < HIST_SUBS as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros() as usize;
    if msb >= HIST_MAX_LOG2 {
        return BUCKETS - 1;
    }
    ((msb - HIST_SUB_BITS + 1) << HIST_SUB_BITS) + ((v >> (msb - HIST_SUB_BITS)) as usize & (HIST_SUBS - 1))
}

/// `[lo, hi)` in ns of bucket `i`. The last bucket is open-ended; its `hi` is
/// reported as `u64::MAX`.
pub const fn bucket_bounds(i: usize) -> (u64, u64) {
    if i < HIST_SUBS {
        return (i as u64, i as u64 + 1);
    }
    let group = i >> HIST_SUB_BITS; // 1 => msb == SUB_BITS
    let sub = (i & (HIST_SUBS - 1)) as u64;
    let msb = group + HIST_SUB_BITS - 1;
    let width = 1u64 << (msb - HIST_SUB_BITS);
    let lo = (1u64 << msb) + sub * width;
    if i == BUCKETS - 1 {
        (lo, u64::MAX)
    } else {
        (lo, lo + width)
    }
}

/// A histogram with exact count, sum, min and max. All values in ns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hist {
    pub count: u64,
    pub sum_ns: u64,
    /// Meaningful only when `count > 0`.
    pub min_ns: u64,
    pub max_ns: u64,
    /// Events lost (full stamp map, clock going backwards, ...).
    pub drops: u64,
    /// Events above the probe's alert threshold.
    pub alerts: u64,
    /// Alert records that never reached user space (the kernel's rate
    /// limit, a full alert buffer or queue); `alerts` still counts them.
    pub alerts_dropped: u64,
    pub slots: [u64; BUCKETS],
}

impl Default for Hist {
    fn default() -> Self {
        Self { count: 0, sum_ns: 0, min_ns: 0, max_ns: 0, drops: 0, alerts: 0, alerts_dropped: 0, slots: [0; BUCKETS] }
    }
}

/// Percentiles reported for every interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
}

impl Hist {
    /// Add one value (the Rust twin of `latmon_hist_record()`; used by tests
    /// and by user-space-side aggregation).
    pub fn record(&mut self, v: u64) {
        if self.count == 0 || v < self.min_ns {
            self.min_ns = v;
        }
        self.max_ns = self.max_ns.max(v);
        self.count += 1;
        self.sum_ns = self.sum_ns.wrapping_add(v);
        self.slots[bucket_index(v)] += 1;
    }

    /// Fold another histogram (another CPU's) into this one.
    pub fn merge(&mut self, o: &Hist) {
        if o.count > 0 {
            self.min_ns = if self.count == 0 { o.min_ns } else { self.min_ns.min(o.min_ns) };
            self.max_ns = self.max_ns.max(o.max_ns);
        }
        self.count += o.count;
        self.sum_ns = self.sum_ns.wrapping_add(o.sum_ns);
        self.drops += o.drops;
        self.alerts += o.alerts;
        self.alerts_dropped += o.alerts_dropped;
        for (a, b) in self.slots.iter_mut().zip(o.slots.iter()) {
            *a += b;
        }
    }

    /// What happened between the cumulative snapshots `prev` and `self`.
    ///
    /// Counts, sum and buckets are exact. Min and max are exact when the
    /// cumulative extreme moved during the interval; otherwise they are the
    /// bounds of the lowest/highest non-empty bucket, clamped to the
    /// cumulative extremes (so within one bucket, 12.5 %, of the truth and
    /// never beyond the exact all-time max).
    pub fn delta(&self, prev: &Hist) -> Hist {
        let mut d = Hist {
            count: self.count.saturating_sub(prev.count),
            sum_ns: self.sum_ns.wrapping_sub(prev.sum_ns),
            drops: self.drops.saturating_sub(prev.drops),
            alerts: self.alerts.saturating_sub(prev.alerts),
            alerts_dropped: self.alerts_dropped.saturating_sub(prev.alerts_dropped),
            ..Hist::default()
        };
        for (i, s) in d.slots.iter_mut().enumerate() {
            *s = self.slots[i].saturating_sub(prev.slots[i]);
        }
        if d.count == 0 {
            return d;
        }
        let first = d.slots.iter().position(|&c| c > 0);
        let last = d.slots.iter().rposition(|&c| c > 0);
        let max_exact = prev.count == 0 || self.max_ns > prev.max_ns;
        let min_exact = prev.count == 0 || self.min_ns < prev.min_ns;
        d.max_ns = if max_exact {
            self.max_ns
        } else {
            last.map_or(self.max_ns, |i| bucket_bounds(i).1.saturating_sub(1).min(self.max_ns))
        };
        d.min_ns =
            if min_exact { self.min_ns } else { first.map_or(self.min_ns, |i| bucket_bounds(i).0.max(self.min_ns)) };
        // A single event is both the min and the max.
        if d.count == 1 && max_exact {
            d.min_ns = d.max_ns;
        } else if d.count == 1 && min_exact {
            d.max_ns = d.min_ns;
        }
        d.min_ns = d.min_ns.min(d.max_ns);
        d
    }

    /// Mean in ns (0 when empty).
    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count).unwrap_or(0)
    }

    /// Value at quantile `q` (0..=1) (std: float rounding; the no_std
    /// receiver has its integer twin, `wire::fixed`): the rank's bucket, interpolated
    /// linearly inside it, clamped to [min, max]. 0 when empty.
    #[cfg(feature = "std")]
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        if rank >= self.count {
            return self.max_ns; // the top rank is the exact max
        }
        let mut below = 0u64;
        for (i, &c) in self.slots.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if below + c >= rank {
                let (lo, hi) = bucket_bounds(i);
                let hi = hi.min(self.max_ns.saturating_add(1)).max(lo + 1);
                let k = (rank - below) as f64 - 0.5;
                let v = lo + ((hi - lo) as f64 * k / c as f64) as u64;
                // Not clamp(): a sender may claim min > max (clamp panics).
                return v.max(self.min_ns).min(self.max_ns);
            }
            below += c;
        }
        // Buckets hold fewer events than count (cannot happen with kernel
        // data; keep the promise of never exceeding max).
        self.max_ns
    }

    #[cfg(feature = "std")]
    pub fn percentiles(&self) -> Percentiles {
        Percentiles {
            p50_ns: self.quantile(0.50),
            p90_ns: self.quantile(0.90),
            p99_ns: self.quantile(0.99),
            p999_ns: self.quantile(0.999),
        }
    }

    /// Non-empty buckets as `(lo_ns, hi_ns, count)`, `hi` exclusive; the
    /// open last bucket reports the exact max + 1 as its upper bound.
    pub fn nonzero_buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.slots.iter().enumerate().filter(|(_, &c)| c > 0).map(move |(i, &c)| {
            let (lo, hi) = bucket_bounds(i);
            let hi = if hi == u64::MAX { self.max_ns.saturating_add(1).max(lo + 1) } else { hi };
            (lo, hi, c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        for v in 0..HIST_SUBS as u64 {
            assert_eq!(bucket_index(v), v as usize);
            assert_eq!(bucket_bounds(v as usize), (v, v + 1));
        }
    }

    #[test]
    fn boundaries_of_every_bucket() {
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_bounds(i);
            assert_eq!(bucket_index(lo), i, "lo of {i}");
            if hi != u64::MAX {
                assert_eq!(bucket_index(hi - 1), i, "hi-1 of {i}");
                assert_eq!(bucket_index(hi), i + 1, "hi of {i}");
            }
        }
        // Powers of two start a new group.
        assert_eq!(bucket_index(8), 8);
        assert_eq!(bucket_index(15), 15);
        assert_eq!(bucket_index(16), 16);
        assert_eq!(bucket_index(17), 16);
        assert_eq!(bucket_index(18), 17);
        assert_eq!(bucket_index(1 << 20), 8 * 18);
    }

    #[test]
    fn bucket_width_within_12_5_percent() {
        for i in HIST_SUBS..BUCKETS - 1 {
            let (lo, hi) = bucket_bounds(i);
            assert!((hi - lo) * 8 <= lo, "bucket {i}: [{lo},{hi})");
        }
    }

    #[test]
    fn covers_beyond_ten_seconds_and_clamps_the_largest() {
        let ten_s = 10_000_000_000u64;
        let i = bucket_index(ten_s);
        assert!(i < BUCKETS - 1);
        let (lo, hi) = bucket_bounds(i);
        assert!(lo <= ten_s && ten_s < hi);
        assert_eq!(bucket_index(1 << HIST_MAX_LOG2), BUCKETS - 1);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_index((1 << HIST_MAX_LOG2) - 1), BUCKETS - 1);
    }

    // Quantiles are std-only (floats; the fixed receiver has its own).
    #[cfg(feature = "std")]
    #[test]
    fn empty_histogram() {
        let h = Hist::default();
        assert_eq!(h.percentiles(), Percentiles::default());
        assert_eq!(h.mean_ns(), 0);
        assert_eq!(h.nonzero_buckets().count(), 0);
        let d = h.delta(&Hist::default());
        assert_eq!(d, Hist::default());
    }

    #[cfg(feature = "std")]
    #[test]
    fn percentiles_within_bucket_error_and_ordered() {
        let mut h = Hist::default();
        for v in 1..=10_000u64 {
            h.record(v * 100); // 100 ns .. 1 ms uniform
        }
        let p = h.percentiles();
        for (got, want) in [(p.p50_ns, 500_000.0), (p.p90_ns, 900_000.0), (p.p99_ns, 990_000.0)] {
            let err = (got as f64 - want).abs() / want;
            assert!(err <= 0.125, "got {got} want {want}");
        }
        assert!(p.p50_ns <= p.p90_ns && p.p90_ns <= p.p99_ns && p.p99_ns <= p.p999_ns);
        assert!(p.p999_ns <= h.max_ns);
        assert_eq!(h.quantile(1.0), 1_000_000);
        assert_eq!(h.quantile(0.0), 100);
    }

    #[cfg(feature = "std")]
    #[test]
    fn percentile_never_beyond_exact_max() {
        let mut h = Hist::default();
        h.record(1_000_001); // lone value in a wide bucket
        assert_eq!(h.quantile(0.999), 1_000_001);
        let mut big = Hist::default();
        big.record(u64::MAX / 2);
        assert_eq!(big.quantile(0.5), u64::MAX / 2);
        assert_eq!(big.nonzero_buckets().next().unwrap().1, u64::MAX / 2 + 1);
    }

    /// A receiver's histogram comes from the wire: min > max must give
    /// some answer (never above max), not a panic.
    #[cfg(feature = "std")]
    #[test]
    fn inconsistent_min_above_max_does_not_panic() {
        let mut h = Hist::default();
        for v in [1_000u64, 2_000, 3_000, 4_000] {
            h.record(v);
        }
        h.min_ns = 9_000;
        h.max_ns = 10;
        let p = h.percentiles();
        assert!(p.p50_ns <= 10 && p.p90_ns <= 10, "{p:?}");
        assert_eq!(h.quantile(1.0), 10);
    }

    #[test]
    fn merge_cpus() {
        let (mut a, mut b, mut all) = (Hist::default(), Hist::default(), Hist::default());
        for v in [5u64, 900, 70_000] {
            a.record(v);
            all.record(v);
        }
        for v in [3u64, 1_000_000] {
            b.record(v);
            all.record(v);
        }
        b.drops = 2;
        all.drops = 2;
        let mut m = Hist::default();
        m.merge(&a);
        m.merge(&Hist::default()); // an idle CPU must not reset min
        m.merge(&b);
        assert_eq!(m, all);
        assert_eq!(m.min_ns, 3);
        assert_eq!(m.max_ns, 1_000_000);
    }

    #[test]
    fn delta_between_snapshots() {
        let mut t0 = Hist::default();
        for v in [100u64, 200, 5_000] {
            t0.record(v);
        }
        t0.drops = 1;
        let mut t1 = t0.clone();
        for v in [150u64, 160] {
            t1.record(v);
        }
        t1.drops = 4;
        let d = t1.delta(&t0);
        assert_eq!(d.count, 2);
        assert_eq!(d.sum_ns, 310);
        assert_eq!(d.drops, 3);
        assert_eq!(d.slots.iter().sum::<u64>(), 2);
        // max did not move: bounded by the top bucket of the interval.
        let (_, hi160) = bucket_bounds(bucket_index(160));
        assert!(d.max_ns >= 160 && d.max_ns < hi160, "{}", d.max_ns);
        let (lo150, _) = bucket_bounds(bucket_index(150));
        assert!(d.min_ns >= lo150 && d.min_ns <= 150, "{}", d.min_ns);
        // A new maximum in the interval is exact.
        let mut t2 = t1.clone();
        t2.record(9_999);
        let d2 = t2.delta(&t1);
        assert_eq!((d2.count, d2.max_ns, d2.min_ns), (1, 9_999, 9_999));
        // No events: empty delta.
        assert_eq!(t2.delta(&t2).count, 0);
        // First snapshot: delta from nothing is the snapshot itself.
        assert_eq!(t0.delta(&Hist::default()), t0);
    }
}
