// SPDX-License-Identifier: MIT
//! latmon's buckets as a Prometheus native histogram of schema 3 (8
//! buckets per power of two), in seconds. Pure (no I/O).
//!
//! The two schemes are *not* the same, so this is a mapping, not a
//! relabelling:
//!
//! - Schema-3 bucket `i` is `(2^((i-1)/8), 2^(i/8)]` seconds: its edges grow
//!   geometrically inside a power of two and are upper-inclusive.
//! - latmon's buckets (crates/latmon-core/src/hist.rs) are `[lo, hi)` integer nanoseconds: one
//!   per value below 16 ns, then 8 *linear* sub-buckets per power of two of
//!   nanoseconds. A power of two of nanoseconds is not one of seconds
//!   (1 ns = 2^-29.897 s), so not even the octave edges line up.
//!
//! Every bounded latmon bucket `[lo, hi)` overlaps at most 3
//! schema-3 buckets (a latmon bucket is at most 12.5 % wide, a schema-3
//! bucket 9.05 %: it can cover one whole and two partial ones). Its count
//! is split over them in proportion to the *integer nanoseconds* of
//! `[lo, hi)` each one holds - latmon's own model of a bucket (the uniform
//! spread its percentiles interpolate with, crates/latmon-core/src/hist.rs `quantile`):
//!
//! - buckets 1..15 hold one integer each (1..15 ns): the whole count goes
//!   to the schema-3 bucket of that value; the split is exact there;
//! - bucket 0 holds only 0 ns: it is the native zero bucket (threshold
//!   [`ZERO_THRESHOLD_S`], below 1 ns);
//! - the open last bucket (`[2^36 ns, inf)`) goes whole to the schema-3
//!   bucket of 2^36 ns, as its true spread is unknown.
//!
//! The split of a count `c` is done with integers, one part after the
//! other, each rounded to the nearest (`share = round(rest * w / w_left)`,
//! `rest -= share`, `w_left -= w`; the last part takes the rest), so that
//! (by construction, and checked in the unit tests):
//! - the parts sum to `c` exactly: the native histogram's count, zero
//!   count plus buckets, equals latmon's count (and `+Inf` of the classic
//!   buckets), always;
//! - every part is non-decreasing in `c`: `round(c * f)` and
//!   `c - round(c * f)` both are for `0 <= f <= 1`, and each later part is
//!   the same step applied to the rest; so as latmon's cumulative counts
//!   grow, no schema-3 bucket ever shrinks (Prometheus would read a
//!   shrinking bucket as a counter reset).
//!
//! Percentiles: Prometheus' estimate falls in the schema-3 bucket where
//! latmon's own piecewise-uniform model reaches the rank (their cumulative
//! counts agree at every schema-3 edge, to rounding), so it is within one
//! schema-3 bucket (9.05 %) of latmon's unclamped interpolation; latmon
//! additionally clamps to its exact min and max, which Prometheus does not
//! have.

use latmon_core::hist::{bucket_bounds, Hist, BUCKETS};

use crate::bpf::limits::HIST_MAX_LOG2;

/// Prometheus native histogram schema: 2^3 = 8 buckets per power of two.
pub const SCHEMA: i32 = 3;
/// Zero bucket width in seconds (2^-128, the Go client's default): below
/// latmon's 1 ns resolution, so it holds exactly latmon's bucket 0 (0 ns).
/// Non-zero also marks the histogram as native to Prometheus while it is
/// still empty.
pub const ZERO_THRESHOLD_S: f64 = 2.938_735_877_055_719e-39;
/// Schema-3 index of 1 ns (the lowest latmon value above 0).
pub const INDEX_MIN: i32 = -239;
/// Schema-3 index of 2^36 ns (latmon's open last bucket).
pub const INDEX_MAX: i32 = 49;
/// Schema-3 buckets latmon's range covers.
pub const SPAN: usize = (INDEX_MAX - INDEX_MIN + 1) as usize;

/// One schema-3 bucket's part of a latmon bucket: its index and the
/// integer nanoseconds of the latmon bucket it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Part {
    index: i32,
    weight: u64,
}

/// The fixed latmon -> schema-3 table (computed once per output).
pub struct Map {
    /// Per latmon bucket: up to 3 parts; `parts[b][k].weight == 0` ends it.
    parts: Vec<[Part; 3]>,
}

/// 2^(j/8) for j = 0..8: schema 3's bounds inside a power of two. Literal
/// (what `exp2` gives, correctly rounded) so that the product needs no
/// libm: the native x86_64 build links nothing but libc
/// (tests/cli/contract.rs `libbpf_libelf_and_zlib_are_linked_statically`).
const OCTAVE: [f64; 8] = [
    1.0,
    1.090_507_732_665_257_7,
    1.189_207_115_002_721,
    1.296_839_554_651_009_6,
    std::f64::consts::SQRT_2,
    1.542_210_825_407_940_7,
    1.681_792_830_507_429,
    1.834_008_086_409_342_4,
];

/// Upper bound of schema-3 bucket `i`, in nanoseconds: 1e9 * 2^(i/8).
/// The power of two is exact (powi) and so is the factor for `i % 8 == 0`,
/// so octave edges of seconds (1 s, 0.5 s, ...) are exact.
pub fn upper_ns(i: i32) -> f64 {
    1e9 * 2f64.powi(i.div_euclid(8)) * OCTAVE[i.rem_euclid(8) as usize]
}

/// Upper bound of schema-3 bucket `i` in seconds (its `le`).
pub fn upper_s(i: i32) -> f64 {
    upper_ns(i) / 1e9
}

/// Schema-3 bucket of `n` ns, n >= 1: the smallest `i` with `n <= upper(i)`.
pub fn index_of_ns(n: u64) -> i32 {
    let v = n as f64;
    // 2^30 ns is about 1 s (index 0): a guess within 9 of the answer.
    let msb = 63 - n.max(1).leading_zeros() as i32;
    let mut i = 8 * (msb - 30);
    while v > upper_ns(i) {
        i += 1;
    }
    while v <= upper_ns(i - 1) {
        i -= 1;
    }
    i
}

/// Integers n <= x, for x >= 0 (truncation is the floor there).
fn ints_upto(x: f64) -> u64 {
    x as u64
}

impl Default for Map {
    fn default() -> Self {
        Self::new()
    }
}

impl Map {
    pub fn new() -> Map {
        let mut parts = vec![[Part::default(); 3]; BUCKETS];
        for (b, p) in parts.iter_mut().enumerate().skip(1) {
            let (lo, hi) = bucket_bounds(b);
            if b == BUCKETS - 1 {
                p[0] = Part { index: index_of_ns(1u64 << HIST_MAX_LOG2), weight: 1 };
                continue;
            }
            let (first, last) = (index_of_ns(lo), index_of_ns(hi - 1));
            assert!(last - first < 3, "latmon bucket {b} [{lo},{hi}) spans more than 3 schema-3 buckets");
            for (k, i) in (first..=last).enumerate() {
                // Integers of [lo, hi) in (upper(i-1), upper(i)].
                let top = ints_upto(upper_ns(i)).min(hi - 1);
                let bottom = ints_upto(upper_ns(i - 1)).max(lo - 1);
                p[k] = Part { index: i, weight: top.saturating_sub(bottom) };
            }
        }
        Map { parts }
    }

    /// Add latmon histogram `h`'s buckets to `out`, indexed by
    /// `index - INDEX_MIN` (`SPAN` entries, zeroed by the caller); returns
    /// the zero bucket's count.
    pub fn fill(&self, h: &Hist, out: &mut [u64; SPAN]) -> u64 {
        for (b, &c) in h.slots.iter().enumerate().skip(1) {
            if c == 0 {
                continue;
            }
            let parts = &self.parts[b];
            let mut left: u64 = parts.iter().map(|p| p.weight).sum();
            let mut rest = c;
            for p in parts.iter().take_while(|p| p.weight > 0) {
                let share = if p.weight == left {
                    rest
                } else {
                    let (r, w, l) = (u128::from(rest), u128::from(p.weight), u128::from(left));
                    ((r * w + l / 2) / l) as u64
                };
                out[(p.index - INDEX_MIN) as usize] += share;
                rest -= share;
                left -= p.weight;
            }
        }
        h.slots[0]
    }
}

/// The sparse form Prometheus' protobuf exposition wants: spans of
/// consecutive buckets `(offset, length)` (the first offset is the first
/// index, later ones the gap since the previous span) and each bucket's
/// count as the difference to the previous bucket's. Empty buckets are
/// left out (a gap starts a new span).
pub fn sparse(counts: &[u64; SPAN], spans: &mut Vec<(i32, u32)>, deltas: &mut Vec<i64>) {
    spans.clear();
    deltas.clear();
    let mut prev_count = 0i64;
    let mut prev_index: Option<i32> = None;
    for (k, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let i = k as i32 + INDEX_MIN;
        match (prev_index, spans.last_mut()) {
            (Some(p), Some(last)) if p + 1 == i => last.1 += 1,
            (Some(p), _) => spans.push((i - p - 1, 1)),
            (None, _) => spans.push((i, 1)),
        }
        // Counts fit i64: they are event counts of one boot.
        let c = c as i64;
        deltas.push(c - prev_count);
        prev_count = c;
        prev_index = Some(i);
    }
}

/// Prometheus 2.42's `histogram_quantile` on a native histogram of
/// positive buckets (promql/quantile.go: the bucket where the rank falls,
/// linear inside it; the zero bucket spans [0, threshold]). For tests and
/// the docs' figures; seconds.
pub fn prometheus_quantile(q: f64, zero: u64, counts: &[u64; SPAN]) -> f64 {
    let total: u64 = zero + counts.iter().sum::<u64>();
    if total == 0 {
        return f64::NAN;
    }
    let rank = q * total as f64;
    let mut below = zero as f64;
    if below >= rank {
        return ZERO_THRESHOLD_S * rank / zero as f64;
    }
    for (k, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let i = k as i32 + INDEX_MIN;
        if below + c as f64 >= rank {
            let (lo, hi) = (upper_s(i - 1), upper_s(i));
            return lo + (hi - lo) * ((rank - below) / c as f64);
        }
        below += c as f64;
    }
    upper_s(INDEX_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(h: &Hist) -> (u64, Box<[u64; SPAN]>) {
        let map = Map::new();
        let mut out = Box::new([0u64; SPAN]);
        let zero = map.fill(h, &mut out);
        (zero, out)
    }

    #[test]
    fn octave_table_is_exp2() {
        for (j, &f) in OCTAVE.iter().enumerate() {
            let e = (j as f64 / 8.0).exp2();
            assert!((f - e).abs() <= e * f64::EPSILON, "2^({j}/8): {f} vs {e}");
        }
    }

    #[test]
    fn index_range_and_edges() {
        assert_eq!(index_of_ns(1), INDEX_MIN);
        assert_eq!(index_of_ns(1 << HIST_MAX_LOG2), INDEX_MAX);
        // Octave edges of seconds are exact and upper-inclusive.
        assert_eq!(index_of_ns(1_000_000_000), 0);
        assert_eq!(index_of_ns(1_000_000_001), 1);
        assert_eq!(index_of_ns(500_000_000), -8);
        assert_eq!(index_of_ns(1_953_125), -72); // 2^-9 s
        for n in [1u64, 2, 7, 15, 16, 999, 1_000, 65_537, 1_000_000, 123_456_789, 1 << 35] {
            let i = index_of_ns(n);
            assert!(upper_ns(i - 1) < n as f64 && n as f64 <= upper_ns(i), "{n} in bucket {i}");
        }
    }

    #[test]
    fn every_latmon_bucket_splits_into_at_most_3_parts_covering_it_exactly() {
        let map = Map::new();
        for b in 1..BUCKETS - 1 {
            let (lo, hi) = bucket_bounds(b);
            let w: u64 = map.parts[b].iter().map(|p| p.weight).sum();
            assert_eq!(w, hi - lo, "bucket {b} [{lo},{hi})");
            // Each part's index holds the integers it claims.
            for p in map.parts[b].iter().filter(|p| p.weight > 0) {
                assert!(upper_ns(p.index) >= lo as f64 && upper_ns(p.index - 1) < (hi - 1) as f64, "bucket {b}: {p:?}");
            }
        }
        // The low linear part: one integer per bucket, whole to its bucket.
        for b in 1..16usize {
            assert_eq!(map.parts[b][0], Part { index: index_of_ns(b as u64), weight: 1 });
            assert_eq!(map.parts[b][1].weight, 0);
        }
    }

    #[test]
    fn the_counts_agree_exactly() {
        let mut h = Hist::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            h.record(x >> (x % 64));
        }
        for v in [0u64, 0, 1, 15, 16, 17, 1 << 36, u64::MAX] {
            h.record(v);
        }
        let (zero, out) = native(&h);
        assert!(zero >= 2 && zero == h.slots[0], "0 ns is the zero bucket: {zero}");
        assert_eq!(zero + out.iter().sum::<u64>(), h.count);
        // Every value's schema-3 bucket gets it when its latmon bucket
        // holds one integer (exact below 16 ns).
        let mut small = Hist::default();
        for v in 1..16u64 {
            small.record(v);
        }
        let (_, o) = native(&small);
        for v in 1..16u64 {
            let k = (index_of_ns(v) - INDEX_MIN) as usize;
            let same = (1..16u64).filter(|&w| index_of_ns(w) == index_of_ns(v)).count() as u64;
            assert_eq!(o[k], same, "{v} ns");
        }
    }

    #[test]
    fn no_native_bucket_shrinks_as_latmon_counts_grow() {
        let map = Map::new();
        let mut h = Hist::default();
        let mut before = Box::new([0u64; SPAN]);
        let mut x = 88_172_645_463_325_252u64;
        for step in 0..3_000u64 {
            // Grow a few buckets that split three ways, by 1 and in bursts.
            for b in [8 * 3, 8 * 20 + 1, 8 * 20 + 2, 8 * 29] {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                h.slots[b] += if step % 7 == 0 { x % 1_000 } else { 1 };
            }
            let mut now = Box::new([0u64; SPAN]);
            map.fill(&h, &mut now);
            for k in 0..SPAN {
                assert!(now[k] >= before[k], "bucket {} shrank at step {step}", k as i32 + INDEX_MIN);
            }
            assert_eq!(now.iter().sum::<u64>(), h.slots.iter().sum::<u64>());
            before = now;
        }
        assert!(map.parts[8 * 3].iter().filter(|p| p.weight > 0).count() >= 2, "the test covers a split bucket");
    }

    #[test]
    fn a_lone_event_goes_to_the_part_holding_most_of_its_bucket() {
        let map = Map::new();
        for v in [100u64, 1_024, 1_100, 777_777] {
            let b = latmon_core::hist::bucket_index(v);
            let best = map.parts[b].iter().max_by_key(|p| p.weight).unwrap().index;
            let mut h = Hist::default();
            h.record(v);
            let (_, out) = native(&h);
            assert_eq!(out[(best - INDEX_MIN) as usize], 1, "{v} ns: {:?}", map.parts[b]);
        }
    }

    #[test]
    fn sparse_spans_and_deltas() {
        let mut c = [0u64; SPAN];
        let at = |i: i32| (i - INDEX_MIN) as usize;
        c[at(-100)] = 3;
        c[at(-99)] = 5;
        c[at(-96)] = 2;
        let (mut spans, mut deltas) = (Vec::new(), Vec::new());
        sparse(&c, &mut spans, &mut deltas);
        assert_eq!(spans, vec![(-100, 2), (2, 1)]);
        assert_eq!(deltas, vec![3, 2, -3]);
        sparse(&[0; SPAN], &mut spans, &mut deltas);
        assert!(spans.is_empty() && deltas.is_empty());
    }

    #[test]
    fn prometheus_quantiles_stay_within_a_bucket_of_latmons() {
        // Spread workloads (uniform, log-uniform) and point masses of known
        // durations: the estimate Prometheus makes from the native buckets
        // against latmon's own percentile of the same data.
        let mut cases: Vec<(String, Hist)> = Vec::new();
        let mut uni = Hist::default();
        for v in 1..=20_000u64 {
            uni.record(v * 50);
        }
        cases.push(("uniform 50ns..1ms".into(), uni));
        let mut lu = Hist::default();
        for k in 0..20_000u64 {
            lu.record((1_000.0 * (k as f64 / 20_000.0 * 13.0).exp2()) as u64);
        }
        cases.push(("log-uniform 1us..8ms".into(), lu));
        for (a, b) in [(20_000u64, 200_000u64), (1_060_000, 3_100_000), (250_000, 251_000)] {
            let mut h = Hist::default();
            for k in 0..1_000u64 {
                h.record(if k % 10 == 9 { b + k } else { a + k });
            }
            cases.push((format!("{a}ns x900 + {b}ns x100"), h));
        }
        for (what, h) in &cases {
            let (zero, out) = native(h);
            for q in [0.5, 0.9, 0.99] {
                let ours = h.quantile(q) as f64 / 1e9;
                let theirs = prometheus_quantile(q, zero, &out);
                let err = (theirs - ours).abs() / ours;
                assert!(err <= 0.125, "{what} q{q}: prometheus {theirs} latmon {ours} ({:.1} %)", err * 100.0);
            }
        }
        // And classic power-of-two buckets would not: the point mass case.
        let h = &cases[2].1;
        let p99 = h.quantile(0.99) as f64;
        // Rank 990 of 1000: 90 into the 100 events of le (2^17, 2^18] ns.
        let classic = 131_072.0 + 131_072.0 * 0.9;
        assert!((classic - p99) / p99 > 0.2, "classic {classic} vs {p99}");
    }
}
