// SPDX-License-Identifier: MIT
//! The observer-effect certificate's maths, pure: the epoch schedule, the
//! percentiles of each state, the shift of p99.9 with its bootstrap
//! confidence interval (a seeded RNG: the same samples give the same
//! interval), the spike windows around attach and detach, and the
//! verdict. The I/O edge (src/certify/mod.rs) measures and hands the
//! samples here.

use serde::{Deserialize, Serialize};

/// What latmon has on the hooks during an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Nothing attached.
    None,
    /// The same programs attached, each returning at its gate.
    Empty,
    /// The programs run, the agent reads their maps.
    Full,
}

impl State {
    pub const ALL: [State; 3] = [State::None, State::Empty, State::Full];

    pub fn as_str(self) -> &'static str {
        match self {
            State::None => "none",
            State::Empty => "empty",
            State::Full => "full",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Programs attached in this state.
    pub fn attached(self) -> bool {
        self != State::None
    }
}

/// The p99.9 shift allowed whatever the noise: 2 µs.
pub const GOAL_FLOOR_NS: u64 = 2_000;

/// How the states are interleaved, in words (the docs and every
/// certificate say it).
pub const INTERLEAVING: &str = "rounds of one epoch per state, the order rotated each round \
(none,empty,full / empty,full,none / full,none,empty), so that drift over the run hits every state alike; \
the first settle_ns of each epoch is left out of its state's figures";

/// The epochs of a run: `rounds` rounds of one epoch per state, round r
/// in the order [none, empty, full] rotated left by r.
pub fn schedule(rounds: u32) -> Vec<State> {
    (0..rounds as usize).flat_map(|r| (0..3).map(move |i| State::ALL[(i + r) % 3])).collect()
}

/// Rounds that fit `duration_ns` with epochs of `epoch_ns` (at least one).
pub fn rounds_for(duration_ns: u64, epoch_ns: u64) -> u32 {
    u32::try_from((duration_ns / epoch_ns.max(1) / 3).max(1)).unwrap_or(u32::MAX)
}

/// What the edge does between two epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Attach,
    Detach,
    /// Only the gate changes (or nothing: the same state again).
    Gate,
}

/// The step from `from` (None: before the first epoch) to `to` (None:
/// after the last).
pub fn step(from: Option<State>, to: Option<State>) -> Step {
    let on = |s: Option<State>| s.is_some_and(State::attached);
    match (on(from), on(to)) {
        (false, true) => Step::Attach,
        (true, false) => Step::Detach,
        _ => Step::Gate,
    }
}

/// One wakeup of the measuring thread: when it was programmed and how
/// late it woke (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at_ns: u64,
    pub late_ns: u64,
}

/// One epoch as it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    pub state: State,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The latencies of each state (indexed as `State::ALL`), one block per
/// epoch: the samples programmed in it past its first `settle_ns`.
/// `samples` must be in time order (the measuring thread's order).
pub fn by_state(samples: &[Sample], epochs: &[Epoch], settle_ns: u64) -> [Vec<Vec<u64>>; 3] {
    let mut out: [Vec<Vec<u64>>; 3] = Default::default();
    for e in epochs {
        let from = e.start_ns.saturating_add(settle_ns);
        let lo = samples.partition_point(|s| s.at_ns < from);
        let hi = samples.partition_point(|s| s.at_ns < e.end_ns).max(lo);
        out[e.state.index()].push(samples[lo..hi].iter().map(|s| s.late_ns).collect());
    }
    out
}

/// The largest latency programmed within `half_ns` of any of `at` (0:
/// none there). `samples` in time order.
pub fn spike(samples: &[Sample], at: &[u64], half_ns: u64) -> u64 {
    at.iter()
        .map(|&t| {
            let lo = samples.partition_point(|s| s.at_ns < t.saturating_sub(half_ns));
            let hi = samples.partition_point(|s| s.at_ns <= t.saturating_add(half_ns));
            samples[lo..hi].iter().map(|s| s.late_ns).max().unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// The `q` quantile (0 < q <= 1) of sorted values, nearest rank: the
/// smallest value with at least q·n values at or below it (0 when empty).
pub fn quantile_sorted(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The same, reordering `v` in place (linear time, no sort).
pub fn quantile_select(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    *v.select_nth_unstable(rank - 1).1
}

/// One state's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateStats {
    pub samples: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl StateStats {
    pub fn of(values: &[u64]) -> Self {
        let mut v = values.to_vec();
        v.sort_unstable();
        StateStats {
            samples: v.len() as u64,
            p50_ns: quantile_sorted(&v, 0.5),
            p99_ns: quantile_sorted(&v, 0.99),
            p999_ns: quantile_sorted(&v, 0.999),
            max_ns: v.last().copied().unwrap_or(0),
        }
    }
}

/// SplitMix64: small, seeded, good enough to draw resampling indexes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0), by multiply-shift (bias below 2^-32 for
    /// the sample counts here).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// The bootstrap's 95 % interval of quantile(q, a) − quantile(q, b),
/// each side given as blocks (its epochs): `iters` times, each side's
/// blocks resampled with replacement (as many as it has) and pooled; the
/// 2.5th and 97.5th percentiles of the differences. Whole epochs, not
/// single samples: a machine's noise comes in bursts (another process's
/// link step, a host's steal) that fill some epochs' tails and not
/// others', and resampling single samples would take a burst for a
/// difference between the states. (0, 0) when a side has no samples.
pub fn bootstrap_shift_ci(a: &[Vec<u64>], b: &[Vec<u64>], q: f64, iters: u32, seed: u64) -> [i64; 2] {
    let empty = |x: &[Vec<u64>]| x.iter().all(Vec::is_empty);
    if empty(a) || empty(b) || iters == 0 {
        return [0, 0];
    }
    let mut rng = Rng::new(seed);
    let mut pool = Vec::new();
    let mut resample = |blocks: &[Vec<u64>], rng: &mut Rng| {
        pool.clear();
        for _ in 0..blocks.len() {
            pool.extend_from_slice(&blocks[rng.below(blocks.len())]);
        }
        quantile_select(&mut pool, q)
    };
    let mut diffs = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let d = i128::from(resample(a, &mut rng)) - i128::from(resample(b, &mut rng));
        diffs.push(d.clamp(i64::MIN.into(), i64::MAX.into()) as i64);
    }
    diffs.sort_unstable();
    let at = |p: f64| diffs[((p * diffs.len() as f64).floor() as usize).min(diffs.len() - 1)];
    [at(0.025), at(0.975)]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
}

/// The allowed p99.9 shift: the goal floor, or the interval's half-width
/// where noise makes it wider (a shift within the noise cannot be told
/// from none).
pub fn goal_ns(ci95: [i64; 2]) -> u64 {
    let half = (i128::from(ci95[1]) - i128::from(ci95[0])).max(0) / 2;
    GOAL_FLOOR_NS.max(u64::try_from(half).unwrap_or(u64::MAX))
}

pub fn verdict(shift_ns: i64, goal_ns: u64) -> Verdict {
    if i128::from(shift_ns) <= i128::from(goal_ns) {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}

/// The verdict in one sentence.
pub fn verdict_text(v: Verdict, shift_ns: i64, ci95: [i64; 2], goal_ns: u64) -> String {
    let us = |ns: i64| ns as f64 / 1000.0;
    match v {
        Verdict::Pass => format!(
            "PASS: latmon shifts this board's p99.9 wakeup latency by {:.1} us (95 % CI {:.1} .. {:.1} us), \
             within the goal of {:.1} us",
            us(shift_ns),
            us(ci95[0]),
            us(ci95[1]),
            goal_ns as f64 / 1000.0
        ),
        Verdict::Fail => format!(
            "FAIL: latmon shifts this board's p99.9 wakeup latency by {:.1} us (95 % CI {:.1} .. {:.1} us), \
             above the goal of {:.1} us",
            us(shift_ns),
            us(ci95[0]),
            us(ci95[1]),
            goal_ns as f64 / 1000.0
        ),
    }
}

/// Per state, as JSON `states.none|empty|full`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct States {
    pub none: StateStats,
    pub empty: StateStats,
    pub full: StateStats,
}

/// The figures a certificate is made of, from one run's measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub states: States,
    /// p99.9 full − none.
    pub shift_p999_ns: i64,
    pub ci95_ns: [i64; 2],
    pub goal_ns: u64,
    pub verdict: Verdict,
    pub verdict_text: String,
    /// The largest latency within ±`spike_window_ns` of any attach.
    pub attach_spike_ns: u64,
    pub detach_spike_ns: u64,
    pub attaches: u32,
    pub detaches: u32,
    pub spike_window_ns: u64,
}

/// Bootstrap resamples of a certificate.
pub const BOOTSTRAP_ITERS: u32 = 1000;
/// Its seed: a certificate is reproducible from its samples.
pub const BOOTSTRAP_SEED: u64 = 0x6c61_746d_6f6e_3339;

/// Everything a run measured, to figures.
pub fn figures(
    samples: &[Sample],
    epochs: &[Epoch],
    settle_ns: u64,
    attaches: &[u64],
    detaches: &[u64],
    spike_window_ns: u64,
) -> Figures {
    let [none, empty, full] = by_state(samples, epochs, settle_ns);
    let pooled = |b: &[Vec<u64>]| StateStats::of(&b.concat());
    let states = States { none: pooled(&none), empty: pooled(&empty), full: pooled(&full) };
    let shift = i64::try_from(i128::from(states.full.p999_ns) - i128::from(states.none.p999_ns)).unwrap_or(i64::MAX);
    let ci95 = bootstrap_shift_ci(&full, &none, 0.999, BOOTSTRAP_ITERS, BOOTSTRAP_SEED);
    let goal = goal_ns(ci95);
    let v = verdict(shift, goal);
    Figures {
        states,
        shift_p999_ns: shift,
        ci95_ns: ci95,
        goal_ns: goal,
        verdict: v,
        verdict_text: verdict_text(v, shift, ci95, goal),
        attach_spike_ns: spike(samples, attaches, spike_window_ns),
        detach_spike_ns: spike(samples, detaches, spike_window_ns),
        attaches: attaches.len() as u32,
        detaches: detaches.len() as u32,
        spike_window_ns,
    }
}

/// Busy time as a percent of `cpus` CPUs over `wall_ns` (the share of the
/// whole machine, i.e. per CPU on average), rounded to 4 decimals.
pub fn share_percent(busy_ns: u64, wall_ns: u64, cpus: u32) -> f64 {
    if wall_ns == 0 || cpus == 0 {
        return 0.0;
    }
    let p = busy_ns as f64 * 100.0 / (wall_ns as f64 * f64::from(cpus));
    (p * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_rotates_the_order_so_each_state_takes_each_place() {
        use State::*;
        assert_eq!(schedule(3), [None, Empty, Full, Empty, Full, None, Full, None, Empty]);
        let s = schedule(6);
        for st in State::ALL {
            assert_eq!(s.iter().filter(|&&x| x == st).count(), 6);
            for place in 0..3 {
                assert_eq!(s.chunks(3).filter(|r| r[place] == st).count(), 2, "{st:?} at {place}");
            }
        }
        assert_eq!(rounds_for(60_000_000_000, 2_000_000_000), 10);
        assert_eq!(rounds_for(20_000_000_000, 2_000_000_000), 3);
        assert_eq!(rounds_for(1, 2_000_000_000), 1);
    }

    #[test]
    fn only_none_needs_an_attach_or_a_detach() {
        use State::*;
        assert_eq!(step(Option::None, Some(None)), Step::Gate);
        assert_eq!(step(Option::None, Some(Full)), Step::Attach);
        assert_eq!(step(Some(None), Some(Empty)), Step::Attach);
        assert_eq!(step(Some(Empty), Some(Full)), Step::Gate);
        assert_eq!(step(Some(Full), Some(Empty)), Step::Gate);
        assert_eq!(step(Some(Full), Some(None)), Step::Detach);
        assert_eq!(step(Some(Empty), Option::None), Step::Detach);
        assert_eq!(step(Some(None), Option::None), Step::Gate);
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(quantile_sorted(&v, 0.5), 500);
        assert_eq!(quantile_sorted(&v, 0.99), 990);
        assert_eq!(quantile_sorted(&v, 0.999), 999);
        assert_eq!(quantile_sorted(&v, 1.0), 1000);
        assert_eq!(quantile_sorted(&[7], 0.999), 7);
        assert_eq!(quantile_sorted(&[], 0.5), 0);
        let mut shuffled: Vec<u64> = (1..=1000).rev().collect();
        assert_eq!(quantile_select(&mut shuffled, 0.999), 999);
        let s = StateStats::of(&(1..=2000).rev().collect::<Vec<u64>>());
        assert_eq!(s, StateStats { samples: 2000, p50_ns: 1000, p99_ns: 1980, p999_ns: 1998, max_ns: 2000 });
    }

    fn samples(n: u64, late: impl Fn(u64) -> u64) -> Vec<Sample> {
        (0..n).map(|i| Sample { at_ns: i * 1_000_000, late_ns: late(i) }).collect()
    }

    #[test]
    fn a_state_takes_its_epochs_samples_past_the_settle_time() {
        // 10 ms epochs of 1 ms samples, 3 ms settle: 7 samples each.
        let s = samples(30, |i| i);
        let e = |state, i: u64| Epoch { state, start_ns: i * 10_000_000, end_ns: (i + 1) * 10_000_000 };
        let [none, empty, full] =
            by_state(&s, &[e(State::Full, 0), e(State::None, 1), e(State::Empty, 2), e(State::Full, 3)], 3_000_000);
        assert_eq!(full, [vec![3, 4, 5, 6, 7, 8, 9], vec![]]);
        assert_eq!(none, [[13, 14, 15, 16, 17, 18, 19]]);
        assert_eq!(empty, [[23, 24, 25, 26, 27, 28, 29]]);
    }

    #[test]
    fn a_spike_is_the_worst_latency_within_the_window_of_any_transition() {
        let s = samples(100, |i| match i {
            10 => 500,
            49 => 900,
            80 => 10_000,
            _ => 1,
        });
        // Windows ±5 ms around 50 ms and 12 ms: 49 and 10 are in, 80 out.
        assert_eq!(spike(&s, &[50_000_000], 5_000_000), 900);
        assert_eq!(spike(&s, &[12_000_000, 50_000_000], 5_000_000), 900);
        assert_eq!(spike(&s, &[12_000_000], 5_000_000), 500);
        assert_eq!(spike(&s, &[], 5_000_000), 0);
        assert_eq!(spike(&s, &[80_000_000], 0), 10_000);
    }

    #[test]
    fn the_rng_is_seeded_and_uniform_enough() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        assert_eq!((0..8).map(|_| a.next_u64()).collect::<Vec<_>>(), (0..8).map(|_| b.next_u64()).collect::<Vec<_>>());
        let mut r = Rng::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10)] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    /// Latencies with a long tail, as a wakeup's: mostly `base`, one in
    /// 100 up to 50 µs more, spread by a seeded stream.
    fn tail(n: usize, base: u64, seed: u64) -> Vec<u64> {
        let mut r = Rng::new(seed);
        (0..n)
            .map(|_| base + r.below(1000) as u64 + if r.below(100) == 0 { r.below(50_000) as u64 } else { 0 })
            .collect()
    }

    /// `tail`'s latencies in `n` epochs (blocks) of 2000.
    fn epochs_of(n: usize, base: u64, seed: u64) -> Vec<Vec<u64>> {
        (0..n).map(|i| tail(2_000, base, seed * 1000 + i as u64)).collect()
    }

    #[test]
    fn the_interval_covers_no_shift_between_like_samples_and_excludes_zero_for_a_real_one() {
        let none = epochs_of(10, 3_000, 1);
        let same = epochs_of(10, 3_000, 2);
        let ci = bootstrap_shift_ci(&same, &none, 0.999, 400, BOOTSTRAP_SEED);
        assert!(ci[0] <= 0 && 0 <= ci[1], "{ci:?}");
        // Reproducible: the same seed, the same interval.
        assert_eq!(ci, bootstrap_shift_ci(&same, &none, 0.999, 400, BOOTSTRAP_SEED));
        // 20 µs more on every wakeup.
        let slow = epochs_of(10, 23_000, 3);
        let ci = bootstrap_shift_ci(&slow, &none, 0.999, 400, BOOTSTRAP_SEED);
        assert!(ci[0] > 5_000, "{ci:?}");
        assert_eq!(bootstrap_shift_ci(&[], &none, 0.999, 400, 1), [0, 0]);
        assert_eq!(bootstrap_shift_ci(&[vec![]], &none, 0.999, 400, 1), [0, 0]);
    }

    #[test]
    fn a_burst_in_one_epoch_is_not_taken_for_a_shift() {
        // Like states, but one of full's ten epochs met a burst: 30 of
        // its wakeups 200 µs late. Resampling single samples would call
        // that a shift; resampling epochs sees one epoch of ten.
        let none = epochs_of(10, 3_000, 4);
        let mut full = epochs_of(10, 3_000, 5);
        full[6].iter_mut().take(30).for_each(|x| *x += 200_000);
        let ci = bootstrap_shift_ci(&full, &none, 0.999, 400, BOOTSTRAP_SEED);
        assert!(ci[0] <= 0, "{ci:?}");
        let flat = |b: &[Vec<u64>]| b.concat().chunks(1).map(<[u64]>::to_vec).collect::<Vec<_>>();
        let per_sample = bootstrap_shift_ci(&flat(&full), &flat(&none), 0.999, 400, BOOTSTRAP_SEED);
        assert!(per_sample[0] > 0, "single samples: {per_sample:?}");
    }

    #[test]
    fn the_verdict_fails_a_shift_beyond_the_goal_and_the_noise() {
        assert_eq!(goal_ns([-500, 1_500]), GOAL_FLOOR_NS);
        assert_eq!(goal_ns([-10_000, 10_000]), 10_000);
        assert_eq!(verdict(1_999, goal_ns([0, 100])), Verdict::Pass);
        assert_eq!(verdict(2_000, goal_ns([0, 100])), Verdict::Pass);
        assert_eq!(verdict(2_001, goal_ns([0, 100])), Verdict::Fail);
        assert_eq!(verdict(9_000, goal_ns([-10_000, 10_000])), Verdict::Pass);
        assert_eq!(verdict(-50_000, GOAL_FLOOR_NS), Verdict::Pass);
        let t = verdict_text(Verdict::Fail, 21_500, [18_000, 25_000], 3_500);
        assert!(t.starts_with("FAIL") && t.contains("21.5 us") && t.contains("above the goal of 3.5 us"), "{t}");
    }

    #[test]
    fn figures_of_a_run_with_an_observer_in_full_fail_and_without_pass() {
        // 3 rounds of 100 ms epochs, 1 ms samples, 10 ms settle.
        let order = schedule(3);
        let epochs: Vec<Epoch> = order
            .iter()
            .enumerate()
            .map(|(i, &state)| Epoch { state, start_ns: i as u64 * 100_000_000, end_ns: (i as u64 + 1) * 100_000_000 })
            .collect();
        // Wakeups of 2-3 µs, no tail: 270 samples a state make p99.9 their
        // max, which a tail would swing by tens of µs.
        let mut r = Rng::new(9);
        let noise: Vec<u64> = (0..900).map(|_| 2_000 + r.below(1000) as u64).collect();
        let run = |extra: u64| {
            let s: Vec<Sample> = (0..900u64)
                .map(|i| {
                    let state = order[(i / 100) as usize];
                    let late = noise[i as usize] + if state == State::Full { extra } else { 0 };
                    Sample { at_ns: i * 1_000_000, late_ns: late }
                })
                .collect();
            figures(&s, &epochs, 10_000_000, &[100_000_000], &[500_000_000], 20_000_000)
        };
        let clean = run(0);
        assert_eq!(clean.states.none.samples, 270);
        assert_eq!(clean.verdict, Verdict::Pass, "{}", clean.verdict_text);
        let observed = run(60_000);
        assert_eq!(observed.verdict, Verdict::Fail, "{}", observed.verdict_text);
        assert!(observed.shift_p999_ns > 50_000);
        assert!(observed.states.full.p50_ns >= 60_000 && observed.states.empty.p50_ns < 10_000);
        assert_eq!((observed.attaches, observed.detaches), (1, 1));
    }

    #[test]
    fn a_share_is_of_the_whole_machine() {
        assert_eq!(share_percent(10_000_000, 1_000_000_000, 2), 0.5);
        assert_eq!(share_percent(1, 0, 2), 0.0);
    }
}
