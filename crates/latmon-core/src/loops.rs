// SPDX-License-Identifier: MIT
//! The board's control loops as discovery finds them with no
//! configuration (issue 42): which user threads run at a real-time
//! policy (and the SCHED_OTHER threads of their processes), whether each
//! is periodic or sporadic, its period and where the period comes from.
//!
//! Pure: the agent's `discover` module reads /proc and hands each scan's
//! [`Seen`] threads here; [`Loops`] keeps what every thread showed and
//! says what it is. Every quantity is bounded: [`TRACKED`] threads
//! followed, [`LISTED`] loops in a report, the rest counted.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::anatomy::Policy;

/// Threads discovery follows at once; more are counted (`untracked`),
/// not followed, until a followed one leaves.
pub const TRACKED: usize = 256;
/// Loops an interval lists (periodic RT loops first, then by tid); the
/// rest are counted in `loops_unlisted`.
pub const LISTED: usize = 32;
/// Absolute expiries kept per thread: the period is the greatest common
/// divisor of their steps.
const EXPIRIES: usize = 8;
/// Scans kept per thread for a rate-inferred period.
const RATES: usize = 8;
/// Waits kept per thread: a thread's kind is its most frequent wait.
const WAITS: usize = 16;
/// A period below this is no control loop's (a gcd that small means the
/// expiries are on no grid).
const MIN_PERIOD_NS: u64 = 10_000;
/// And above this neither (a scan every interval could not follow it).
const MAX_PERIOD_NS: u64 = 10_000_000_000;
/// A relative sleeper is periodic when every scan's rate is within this
/// part (1/N) of the window's: 5 %.
const RATE_JITTER_DIV: u64 = 20;

/// What a thread was blocked in when a scan looked (its syscall, from
/// /proc/TID/syscall, and that syscall's arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// On a CPU, or not in a syscall: nothing learnt.
    Running,
    /// An absolute timer sleep (clock_nanosleep TIMER_ABSTIME) to this
    /// expiry, on the sleep's own clock (steps are what count).
    AbsSleep { expiry_ns: u64 },
    /// A relative sleep (nanosleep, clock_nanosleep without
    /// TIMER_ABSTIME).
    RelSleep,
    /// A read() of a timerfd; its it_interval (0: a one-shot timer).
    Timerfd { interval_ns: u64 },
    /// sched_yield (a SCHED_DEADLINE job's end).
    Yield,
    /// Any other wait: a pipe, a socket, a futex, poll: woken by
    /// something else, never a period of its own.
    Other,
}

/// One thread as a scan saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub policy: Policy,
    /// rt_priority (1..99 for FIFO and RR, 0 otherwise).
    pub prio: u32,
    /// SCHED_DEADLINE's period (sched_getattr); 0 otherwise.
    pub dl_period_ns: u64,
    /// Voluntary context switches since the thread started: read only
    /// for a relative sleeper (None otherwise: /proc/TID/status is the
    /// dearest file discovery would read).
    pub vcsw: Option<u64>,
    /// CLOCK_MONOTONIC when it was read.
    pub time_ns: u64,
    pub wait: Wait,
}

impl Seen {
    /// A real-time policy: what makes a thread a loop candidate.
    pub fn rt(&self) -> bool {
        matches!(self.policy, Policy::Fifo | Policy::Rr | Policy::Deadline)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopClass {
    Periodic,
    Sporadic,
    /// Not seen waiting often enough yet to say.
    Unknown,
}

/// Where a period comes from: the first three are exact (the kernel
/// holds them), the others inferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeriodSource {
    /// The timerfd's it_interval (/proc/PID/fdinfo).
    Timerfd,
    /// The greatest common step of successive absolute expiries.
    AbsTimer,
    /// The SCHED_DEADLINE period (sched_getattr).
    Deadline,
    /// A relative sleeper's voluntary sleeps per second over the last
    /// scans (a mean: `jitter_ns` bounds how far one scan's was off).
    Relative,
    /// A watched relative sleeper's period as the cycle family finds it
    /// in its release-to-release steps: the fullest 1 % bin (a mode, not
    /// a mean: skipped releases and late wakeups fall in other bins).
    /// `jitter_ns` is the bin's width.
    Median,
    /// No period (sporadic, or not yet known).
    None,
}

impl PeriodSource {
    pub fn word(self) -> &'static str {
        match self {
            PeriodSource::Timerfd => "timerfd",
            PeriodSource::AbsTimer => "abs_timer",
            PeriodSource::Deadline => "deadline",
            PeriodSource::Relative => "relative",
            PeriodSource::Median => "median",
            PeriodSource::None => "none",
        }
    }
}

/// A loop as an interval lists it (JSON `loops`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Loop {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    #[serde(serialize_with = "policy_word")]
    pub policy: Policy,
    pub prio: u32,
    /// A real-time policy (FIFO, RR, DEADLINE); false for a SCHED_OTHER
    /// thread listed because its process has an RT thread.
    pub rt: bool,
    pub class: LoopClass,
    pub period_ns: u64,
    pub period_source: PeriodSource,
    /// Inferred periods: how far one scan's figure was from it (0 when
    /// exact).
    pub jitter_ns: u64,
    /// A cycle probe follows it (`cycle,auto`: [`watch_periodic_rt`]).
    pub watched: bool,
    /// Its cycles as the cycle family counts them, once watched and its
    /// first timer sleep seen (None: not watched, or no cycle yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle: Option<LoopCycles>,
}

/// A watched loop's cycles: the cycle family's counts of its thread
/// (bpf/cycle.bpf.c, per thread), the interval's and since it entered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LoopCycles {
    /// The period the family judges it against (detected from its
    /// releases; 0: not yet).
    pub period_ns: u64,
    pub cycles: u64,
    pub total_cycles: u64,
    pub misses: u64,
    pub total_misses: u64,
    pub total_overruns: u64,
    /// RT sleep rules it broke since it entered (all rules; the probe's
    /// `cycle` object has them by rule).
    pub total_rules: u64,
}

/// `cycle,auto`: mark the loops to watch - every periodic RT loop, in
/// list order (RT periodic first, highest priority first), at most `max`
/// (LATMON_CYCLE_AUTO) - and clear the rest's mark and counts. Returns
/// the periodic RT loops left unwatched for want of room.
pub fn watch_periodic_rt(loops: &mut [Loop], max: usize) -> u32 {
    let mut taken = 0;
    let mut left = 0;
    for l in loops.iter_mut() {
        l.watched = l.rt && l.periodic() && taken < max;
        if l.watched {
            taken += 1;
        } else {
            l.cycle = None;
            left += u32::from(l.rt && l.periodic());
        }
    }
    left
}

fn policy_word<S: serde::Serializer>(p: &Policy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.word())
}

impl Loop {
    pub fn periodic(&self) -> bool {
        self.class == LoopClass::Periodic
    }

    /// A watched relative sleeper takes the cycle family's period (its
    /// release steps' fullest bin) over discovery's rate, a mean that a
    /// skipped release lengthens (read 5.11 ms for a 5 ms loop on a busy
    /// host). Exact sources keep theirs.
    pub fn adopt_cycle_period(&mut self) {
        let Some(c) = self.cycle.filter(|c| c.period_ns > 0) else { return };
        if matches!(self.period_source, PeriodSource::Relative | PeriodSource::Median) {
            self.period_ns = c.period_ns;
            self.period_source = PeriodSource::Median;
            self.jitter_ns = c.period_ns / 100;
        }
    }
}

/// Loop lines a text interval shows (the JSON line lists [`LISTED`]).
pub const SHOWN: usize = 8;

/// The text outputs' loops block (first, before the families): a
/// count line, then one line per loop within 80 columns, at most
/// [`SHOWN`], the rest counted. Nothing when no loop is listed.
pub fn render_into(s: &mut String, loops: &[Loop], unlisted: u32) {
    use std::fmt::Write;
    if loops.is_empty() && unlisted == 0 {
        return;
    }
    let n = |c: LoopClass| loops.iter().filter(|l| l.class == c).count();
    let _ = write!(s, "loops: {} periodic, {} sporadic", n(LoopClass::Periodic), n(LoopClass::Sporadic));
    if n(LoopClass::Unknown) > 0 {
        let _ = write!(s, ", {} not yet known", n(LoopClass::Unknown));
    }
    if unlisted > 0 {
        let _ = write!(s, " (+{unlisted} past the list's bound of {LISTED})");
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "  {:<15} {:>7} {:<8} {:>8} {:<9} CLASS or CYC MISS/TOTAL",
        "LOOP", "TID", "POLICY", "PERIOD", "FROM"
    );
    for l in loops.iter().take(SHOWN) {
        s.push_str("  ");
        let from = s.len();
        crate::text::push_clean(s, crate::text::truncate(&l.comm, 15));
        let w = s.len() - from;
        s.extend(std::iter::repeat_n(' ', 16 - w.min(15)));
        let policy = if l.rt && l.policy != Policy::Deadline {
            format!("{} {}", l.policy.word(), l.prio)
        } else {
            l.policy.word().to_string()
        };
        let period = if l.period_ns > 0 { crate::text::fmt_ns(l.period_ns) } else { "-".into() };
        let class = match (l.class, l.rt) {
            (LoopClass::Periodic, false) => "periodic, not RT",
            (LoopClass::Periodic, true) if l.watched => "watched, no cycle yet",
            (LoopClass::Periodic, true) => "periodic",
            (LoopClass::Sporadic, _) => "sporadic",
            (LoopClass::Unknown, _) => "not yet known",
        };
        let _ = write!(s, "{:>7} {:<8} {:>8} {:<9} ", l.tid, policy, period, l.period_source.word());
        match l.cycle.filter(|_| l.watched) {
            Some(c) => {
                let _ = write!(s, "{} cyc {}/{} miss", Count(c.cycles), Count(c.misses), Count(c.total_misses));
            }
            None => s.push_str(class),
        }
        if l.jitter_ns > 0 {
            let _ = write!(s, " +-{}", crate::text::Ns(l.jitter_ns));
        }
        s.push('\n');
    }
    if loops.len() > SHOWN {
        let _ = writeln!(s, "  +{} more loops (JSON `loops` lists them)", loops.len() - SHOWN);
    }
}

/// A count in at most 5 characters (the loops block's 80 columns):
/// 12345 -> 12k, 1234567 -> 1234k, u64::MAX -> 1844P.
struct Count(u64);

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (mut n, mut unit) = (self.0, 0);
        while n > 9_999 {
            n /= 1000;
            unit += 1;
        }
        write!(f, "{n}{}", ["", "k", "M", "G", "T", "P", "E"][unit])
    }
}

/// What discovery knows of one thread.
#[derive(Debug, Clone)]
struct Followed {
    seen: Seen,
    expiries: Ring<u64, EXPIRIES>,
    rates: Ring<(u64, u64), RATES>,
    waits: Ring<Wait, WAITS>,
    /// The scan that saw it last.
    scan: u64,
}

/// A fixed ring of the newest `N`.
#[derive(Debug, Clone)]
struct Ring<T, const N: usize> {
    buf: [Option<T>; N],
    next: usize,
}

impl<T: Copy, const N: usize> Ring<T, N> {
    fn new() -> Self {
        Ring { buf: [None; N], next: 0 }
    }
    fn push(&mut self, v: T) {
        self.buf[self.next] = Some(v);
        self.next = (self.next + 1) % N;
    }
    /// Oldest first.
    fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..N).filter_map(move |i| self.buf[(self.next + i) % N])
    }
    fn newest(&self) -> Option<T> {
        self.buf[(self.next + N - 1) % N]
    }
    fn clear(&mut self) {
        self.buf = [None; N];
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Every thread discovery follows, by tid.
#[derive(Debug, Default)]
pub struct Loops {
    threads: BTreeMap<u32, Followed>,
    scan: u64,
    /// Candidates seen this scan that found no room (over [`TRACKED`]).
    pub untracked: u32,
    /// Test builds' mutation (a discovery that calls every FIFO thread
    /// periodic, period 1 ms): the fixture test must fail on it.
    pub mutate_fifo_periodic: bool,
}

impl Loops {
    /// `mutate_fifo_periodic`: test builds' wrong discovery (see the field).
    pub fn new(mutate_fifo_periodic: bool) -> Loops {
        Loops { mutate_fifo_periodic, ..Default::default() }
    }

    /// One scan: every candidate thread seen (RT threads and the
    /// SCHED_OTHER threads of their processes). A thread not in it has
    /// left (or stopped being a candidate) and is forgotten.
    pub fn scan(&mut self, seen: impl IntoIterator<Item = Seen>) {
        self.scan += 1;
        self.untracked = 0;
        for s in seen {
            let scan = self.scan;
            if !self.threads.contains_key(&s.tid) {
                if self.threads.len() >= TRACKED {
                    self.untracked += 1;
                    continue;
                }
                let f =
                    Followed { seen: s.clone(), expiries: Ring::new(), rates: Ring::new(), waits: Ring::new(), scan };
                self.threads.insert(s.tid, f);
            }
            let Some(f) = self.threads.get_mut(&s.tid) else { continue };
            // A tid reused by another process is another thread.
            if f.seen.pid != s.pid {
                *f = Followed { seen: s.clone(), expiries: Ring::new(), rates: Ring::new(), waits: Ring::new(), scan };
            }
            f.follow(s, scan);
        }
        let scan = self.scan;
        self.threads.retain(|_, f| f.scan == scan);
    }

    /// Successive absolute expiries of thread `tid` read between scans:
    /// discovery follows a sleeper past each release to its next sleep,
    /// so each step is one release (or a skipped one). Equal steps off
    /// the period so far are a new period: the expiries restart from
    /// them (a 1 ms loop gone to 2 ms keeps a 1 ms common step forever
    /// otherwise).
    pub fn followed(&mut self, tid: u32, expiries: &[u64]) {
        let Some(f) = self.threads.get_mut(&tid) else { return };
        let steps: Vec<u64> = expiries.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        let same = steps.len() >= 2 && steps.iter().all(|&s| s == steps[0]);
        if same && steps[0] != f.abs_period() && (MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&steps[0]) {
            f.expiries.clear();
        }
        for &e in expiries {
            f.add_expiry(e);
        }
    }

    /// The period the expiries of `tid` give so far (0: none yet).
    pub fn abs_period(&self, tid: u32) -> u64 {
        self.threads.get(&tid).map_or(0, |f| f.abs_period())
    }

    /// Every followed thread as a loop: periodic RT loops first (by
    /// priority, highest first), then the others, each group by tid.
    pub fn list(&self) -> Vec<Loop> {
        let mut v: Vec<Loop> = self.threads.values().map(|f| f.judge(self.mutate_fifo_periodic)).collect();
        v.sort_by_key(|l| (!(l.rt && l.periodic()), l.class, std::cmp::Reverse(l.prio), l.tid));
        v
    }

    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

impl Followed {
    fn follow(&mut self, s: Seen, scan: u64) {
        self.scan = scan;
        if let Wait::AbsSleep { expiry_ns } = s.wait {
            self.add_expiry(expiry_ns);
        }
        if !matches!(s.wait, Wait::Running) {
            self.waits.push(s.wait);
        }
        // The vcsw count restarts only with a new thread (handled above).
        // A scan that did not read it breaks the run of rates.
        match s.vcsw {
            Some(c) => self.rates.push((s.time_ns, c)),
            None => self.rates.clear(),
        }
        self.seen = s;
    }

    fn add_expiry(&mut self, e: u64) {
        if self.expiries.newest() == Some(e) {
            return;
        }
        // A step that is no multiple of the period so far: the loop
        // changed its period or its grid. Start again from this expiry
        // (the one before it is on the old grid).
        if let Some(last) = self.expiries.newest() {
            let p = self.abs_period();
            if p != 0 && e.abs_diff(last) % p != 0 {
                self.expiries.clear();
            }
        }
        self.expiries.push(e);
    }

    /// The greatest common step of the expiries kept (0: fewer than two
    /// steps, or no grid).
    fn abs_period(&self) -> u64 {
        let mut prev = None;
        let (mut g, mut steps) = (0u64, 0);
        for e in self.expiries.iter() {
            if let Some(p) = prev {
                g = gcd(g, e.abs_diff(p));
                steps += 1;
            }
            prev = Some(e);
        }
        if steps >= 2 && (MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&g) {
            g
        } else {
            0
        }
    }

    /// The most frequent wait kind of the last ones seen.
    fn usual_wait(&self) -> Option<Wait> {
        let kind = |w: &Wait| match w {
            Wait::Running => 0,
            Wait::AbsSleep { .. } => 1,
            Wait::RelSleep => 2,
            Wait::Timerfd { .. } => 3,
            Wait::Yield => 4,
            Wait::Other => 5,
        };
        let mut n = [0u32; 6];
        for w in self.waits.iter() {
            n[kind(&w)] += 1;
        }
        let best = (1..6).max_by_key(|&k| (n[k], std::cmp::Reverse(k)))?;
        if n[best] == 0 {
            return None;
        }
        // The newest of that kind (a timerfd's interval as it is now).
        self.waits.iter().filter(|w| kind(w) == best).last()
    }

    /// A relative sleeper's period from its voluntary sleeps per second
    /// over the scans kept, and how far one scan's figure was from it.
    fn rate_period(&self) -> Option<(u64, u64)> {
        let r: Vec<(u64, u64)> = self.rates.iter().collect();
        if r.len() < 3 {
            return None;
        }
        let (t0, c0) = r[0];
        let (t1, c1) = r[r.len() - 1];
        if c1 <= c0 || t1 <= t0 {
            return None;
        }
        let period = (t1 - t0) / (c1 - c0);
        let mut jitter = 0;
        for w in r.windows(2) {
            let (dt, dc) = (w[1].0.saturating_sub(w[0].0), w[1].1.saturating_sub(w[0].1));
            let p = dt.checked_div(dc).unwrap_or(u64::MAX);
            jitter = jitter.max(p.abs_diff(period));
        }
        Some((period, jitter))
    }

    fn judge(&self, mutate: bool) -> Loop {
        let s = &self.seen;
        let mut l = Loop {
            tid: s.tid,
            pid: s.pid,
            comm: s.comm.clone(),
            policy: s.policy,
            prio: s.prio,
            rt: s.rt(),
            class: LoopClass::Unknown,
            period_ns: 0,
            period_source: PeriodSource::None,
            jitter_ns: 0,
            watched: false,
            cycle: None,
        };
        let periodic = |l: &mut Loop, p: u64, src, jitter| {
            l.class = LoopClass::Periodic;
            l.period_ns = p;
            l.period_source = src;
            l.jitter_ns = jitter;
        };
        if s.policy == Policy::Deadline && s.dl_period_ns > 0 {
            periodic(&mut l, s.dl_period_ns, PeriodSource::Deadline, 0);
            return l;
        }
        match self.usual_wait() {
            Some(Wait::Timerfd { interval_ns }) if interval_ns > 0 => {
                periodic(&mut l, interval_ns, PeriodSource::Timerfd, 0)
            }
            Some(Wait::AbsSleep { .. }) => match self.abs_period() {
                // Three expiries on no common grid: absolute sleeps to
                // times of its own choosing (a waker's random gaps).
                0 if self.expiries.iter().count() >= 3 => l.class = LoopClass::Sporadic,
                0 => {}
                p => periodic(&mut l, p, PeriodSource::AbsTimer, 0),
            },
            Some(Wait::RelSleep) => match self.rate_period() {
                Some((p, j)) if j <= p / RATE_JITTER_DIV && (MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&p) => {
                    periodic(&mut l, p, PeriodSource::Relative, j)
                }
                Some(_) => l.class = LoopClass::Sporadic,
                None => {}
            },
            // A one-shot timerfd, a yield outside SCHED_DEADLINE, a pipe,
            // a socket, a futex: woken by something else.
            Some(_) => l.class = LoopClass::Sporadic,
            None => {}
        }
        if mutate && s.policy == Policy::Fifo && !l.periodic() {
            let p = self.rate_period().map_or(1_000_000, |r| r.0);
            periodic(&mut l, p, PeriodSource::Relative, 0);
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(tid: u32, policy: Policy, t: u64, vcsw: u64, wait: Wait) -> Seen {
        let vcsw = (wait == Wait::RelSleep).then_some(vcsw);
        Seen { tid, pid: 100, comm: format!("t{tid}"), policy, prio: 10, dl_period_ns: 0, vcsw, time_ns: t, wait }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn absolute_expiries_give_the_exact_period_and_follow_a_change() {
        let mut l = Loops::default();
        let base = 7_123_456;
        // Scans a second apart, each seeing an expiry some periods on
        // (k = 997, 1003, 1009: no common factor).
        for (i, k) in [0u64, 997, 2000, 3009].iter().enumerate() {
            l.scan([seen(1, Policy::Fifo, i as u64 * S, 0, Wait::AbsSleep { expiry_ns: base + k * 1_000_000 })]);
        }
        let v = l.list();
        assert_eq!(
            (v[0].class, v[0].period_ns, v[0].period_source),
            (LoopClass::Periodic, 1_000_000, PeriodSource::AbsTimer)
        );
        // 1 ms -> 1.5 ms: a step no multiple of 1 ms restarts the steps.
        let b2 = base + 3009 * 1_000_000 + 500_000;
        l.followed(1, &[b2]);
        assert_eq!(l.abs_period(1), 0, "one step of the new grid is not yet a period");
        l.followed(1, &[b2 + 1_500_000, b2 + 3_000_000]);
        assert_eq!(l.abs_period(1), 1_500_000);
        // 1.5 ms -> 3 ms, on the same grid: two equal consecutive steps.
        let b3 = b2 + 3_000_000;
        l.followed(1, &[b3, b3 + 3_000_000, b3 + 6_000_000]);
        assert_eq!(l.abs_period(1), 3_000_000);
        // A skipped release (one step of two periods) is no change.
        l.followed(1, &[b3 + 12_000_000, b3 + 15_000_000]);
        assert_eq!(l.abs_period(1), 3_000_000);
    }

    #[test]
    fn expiries_on_no_grid_give_no_period() {
        let mut l = Loops::default();
        for (i, e) in [1_000_003u64, 2_000_010, 3_000_029].iter().enumerate() {
            l.scan([seen(1, Policy::Fifo, i as u64 * S, 0, Wait::AbsSleep { expiry_ns: *e })]);
        }
        assert_eq!(l.list()[0].period_ns, 0);
        assert_eq!(l.list()[0].class, LoopClass::Sporadic);
    }

    #[test]
    fn a_relative_sleeper_is_periodic_by_its_rate_and_an_irregular_one_is_not() {
        let mut l = Loops::default();
        for i in 0..5u64 {
            // 200 sleeps a second, 199..201 per scan.
            let c = i * 200 + if i % 2 == 1 { 1 } else { 0 };
            let w = [
                seen(1, Policy::Fifo, i * S, c, Wait::RelSleep),
                seen(2, Policy::Fifo, i * S, i * i * 100, Wait::RelSleep),
            ];
            l.scan(w);
        }
        let v = l.list();
        let a = v.iter().find(|x| x.tid == 1).unwrap();
        assert_eq!((a.class, a.period_source), (LoopClass::Periodic, PeriodSource::Relative));
        assert!(a.period_ns.abs_diff(5_000_000) < 50_000, "{}", a.period_ns);
        let b = v.iter().find(|x| x.tid == 2).unwrap();
        assert_eq!(b.class, LoopClass::Sporadic);
    }

    #[test]
    fn timerfd_deadline_and_other_waits_are_classed_by_what_the_kernel_holds() {
        let mut l = Loops::default();
        let mut dl = seen(3, Policy::Deadline, 0, 0, Wait::Yield);
        dl.dl_period_ns = 10_000_000;
        l.scan([
            seen(1, Policy::Rr, 0, 0, Wait::Timerfd { interval_ns: 2_000_000 }),
            seen(2, Policy::Fifo, 0, 0, Wait::Other),
            dl,
            seen(4, Policy::Fifo, 0, 0, Wait::Running),
        ]);
        let v = l.list();
        let by = |t: u32| v.iter().find(|x| x.tid == t).unwrap();
        assert_eq!((by(1).period_ns, by(1).period_source), (2_000_000, PeriodSource::Timerfd));
        assert_eq!(by(2).class, LoopClass::Sporadic);
        assert_eq!((by(3).period_ns, by(3).period_source), (10_000_000, PeriodSource::Deadline));
        assert_eq!(by(4).class, LoopClass::Unknown);
        // Periodic RT loops first.
        assert!(v[..2].iter().all(|x| x.periodic()), "{v:?}");
    }

    #[test]
    fn a_thread_gone_is_forgotten_and_a_reused_tid_starts_again() {
        let mut l = Loops::default();
        l.scan([seen(1, Policy::Fifo, 0, 0, Wait::Timerfd { interval_ns: 2_000_000 })]);
        l.scan([seen(2, Policy::Fifo, S, 0, Wait::Other)]);
        assert_eq!(l.list().iter().map(|x| x.tid).collect::<Vec<_>>(), vec![2]);
        let mut other = seen(2, Policy::Fifo, 2 * S, 0, Wait::Timerfd { interval_ns: 1_000_000 });
        other.pid = 200;
        l.scan([other]);
        assert_eq!(l.list()[0].period_source, PeriodSource::Timerfd, "the old thread's waits are not the new one's");
    }

    #[test]
    fn followed_threads_are_bounded_and_the_rest_counted() {
        let mut l = Loops::default();
        l.scan((0..TRACKED as u32 + 10).map(|t| seen(t, Policy::Fifo, 0, 0, Wait::Other)));
        assert_eq!((l.len(), l.untracked), (TRACKED, 10));
    }

    #[test]
    fn the_text_block_fits_80_columns_and_cleans_names() {
        let mut l = Loops::default();
        let mut hostile = seen(1, Policy::Fifo, 0, 0, Wait::Timerfd { interval_ns: 2_000_000 });
        hostile.comm = "\x1b[2Jname_longer_than_15".into();
        hostile.prio = 99;
        let more = (2..12).map(|t| seen(t, Policy::Rr, 0, 0, Wait::Other));
        l.scan(std::iter::once(hostile).chain(more));
        let mut s = String::new();
        render_into(&mut s, &l.list(), 3);
        assert!(s.lines().all(|x| x.len() <= 80), "{s}");
        assert!(!s.contains('\x1b'), "{s}");
        assert!(s.starts_with("loops: 1 periodic, 10 sporadic (+3 past the list's bound of 32)\n"), "{s}");
        assert!(s.contains("  ?[2Jname_longer       1 fifo 99    2.00ms timerfd   periodic\n"), "{s}");
        assert!(s.ends_with("  +3 more loops (JSON `loops` lists them)\n"), "{s}");
        let mut empty = String::new();
        render_into(&mut empty, &[], 0);
        assert!(empty.is_empty());
    }

    #[test]
    fn periodic_rt_loops_are_watched_up_to_the_bound_and_show_their_cycles() {
        let mut l = Loops::default();
        let tfd = |t| seen(t, Policy::Fifo, 0, 0, Wait::Timerfd { interval_ns: 1_000_000 });
        let mut other = tfd(9);
        other.policy = Policy::Other;
        l.scan((1..=4).map(tfd).chain([other, seen(8, Policy::Fifo, 0, 0, Wait::Other)]));
        let mut v = l.list();
        v[0].cycle = Some(LoopCycles::default());
        v[5].cycle = Some(LoopCycles::default());
        assert_eq!(watch_periodic_rt(&mut v, 3), 1, "the fourth periodic RT loop is left for want of room");
        let watched: Vec<u32> = v.iter().filter(|x| x.watched).map(|x| x.tid).collect();
        assert_eq!(watched, vec![1, 2, 3], "{v:?}");
        assert!(v.iter().filter(|x| !x.watched).all(|x| x.cycle.is_none()), "{v:?}");
        let worst = u64::MAX;
        v[0].cycle =
            Some(LoopCycles { cycles: 99_999, misses: worst, total_misses: 123_456_789, ..LoopCycles::default() });
        v[1].cycle = Some(LoopCycles { cycles: 1000, misses: 3, total_misses: 41, ..LoopCycles::default() });
        v[2].cycle = None;
        let mut s = String::new();
        render_into(&mut s, &v, 0);
        assert!(s.lines().all(|x| x.len() <= 80), "{s}");
        assert!(s.contains("  t1                    1 fifo 10    1.00ms timerfd   99k cyc 18E/123M miss\n"), "{s}");
        assert!(s.contains("  t2                    2 fifo 10    1.00ms timerfd   1000 cyc 3/41 miss\n"), "{s}");
        assert!(s.contains("timerfd   watched, no cycle yet\n"), "{s}");
        assert!(s.contains("  t4                    4 fifo 10    1.00ms timerfd   periodic\n"), "{s}");
    }

    #[test]
    fn a_watched_relative_loop_takes_the_cycle_familys_period_and_exact_ones_keep_theirs() {
        let mut l = Loops::default();
        l.scan([seen(1, Policy::Fifo, 0, 0, Wait::Timerfd { interval_ns: 2_000_000 })]);
        let mut tfd = l.list().remove(0);
        let mut rel = tfd.clone();
        (rel.period_ns, rel.period_source, rel.jitter_ns) = (5_113_211, PeriodSource::Relative, 90_000);
        for x in [&mut tfd, &mut rel] {
            x.adopt_cycle_period();
            assert_ne!(x.period_source, PeriodSource::Median, "no cycle yet: {x:?}");
            x.cycle = Some(LoopCycles { period_ns: 5_000_013, ..LoopCycles::default() });
            x.adopt_cycle_period();
        }
        assert_eq!((tfd.period_ns, tfd.period_source), (2_000_000, PeriodSource::Timerfd));
        assert_eq!((rel.period_ns, rel.period_source, rel.jitter_ns), (5_000_013, PeriodSource::Median, 50_000));
    }

    #[test]
    fn the_mutation_calls_a_sporadic_fifo_thread_periodic() {
        let mut l = Loops::new(true);
        l.scan([seen(2, Policy::Fifo, 0, 0, Wait::Other)]);
        assert!(l.list()[0].periodic());
    }
}
