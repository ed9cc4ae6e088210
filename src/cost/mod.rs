// SPDX-License-Identifier: MIT
//! latmon's own cost: BPF run-time statistics of its programs, split per
//! probe, and the overhead budget that detaches the most expensive probe.
//!
//! The kernel counts, per BPF program, how often it ran (`run_cnt`) and the
//! time spent in it (`run_time_ns`) while run-time statistics are enabled.
//! latmon enables them with `bpf(BPF_ENABLE_STATS)` for as long as it holds
//! the returned fd (a reference count: the global sysctl
//! `kernel.bpf_stats_enabled` is not touched; the kernel drops the count
//! when the fd closes, also when latmon dies). The counts include the
//! statistics' own two clock reads (~20 ns per run on the x86 development VM).
//!
//! Definitions (docs/agent.md):
//! - an *event* is one run of one of the probe's BPF programs (one kernel
//!   event it hooks: a sched_switch, a function entry, ...), whether or not
//!   it ends in the histogram (filters reject most events of a filtered
//!   probe, but the program still runs);
//! - *ns/event* = run time / runs over the interval;
//! - *CPU share* = run time / (interval wall time × online CPUs): the part
//!   of the whole machine's CPU capacity latmon's BPF took.
//!
//! This module is the pure model: [`CostTable`] (attribution of program
//! counters to probes, fed by a reader function) and [`BudgetWatch`], with
//! unit tests. The syscalls (`BPF_ENABLE_STATS`, the program counters,
//! online CPUs) are in `stats`.

mod stats;

pub use stats::{enable_stats, online_cpus, prog_stats, StatsGuard};

use std::io;
use std::os::fd::RawFd;

use latmon_core::ident::Mechanism;
use serde::Serialize;

use crate::rtkernel::KernelVersion;

/// Program runs and the time spent in them, and runs the kernel skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    pub runs: u64,
    pub run_time_ns: u64,
    /// The kernel's `recursion_misses`: times a program was due to run and
    /// was skipped, each an event it did not see. Counted with or without
    /// run-time statistics: for tp_btf/raw_tp since 6.2 (a program already
    /// running on that CPU), for kprobe and classic tracepoint programs
    /// since 6.7 (any BPF program or BPF map syscall holding the CPU's
    /// `bpf_prog_active`, see docs/probes.md); 0 on older kernels.
    pub missed: u64,
}

/// The first kernel that counts the runs it skips of kprobe, uprobe and
/// classic-tracepoint programs (`trace_call_bpf`: while the CPU's
/// `bpf_prog_active` is raised, by another program or by a BPF map
/// syscall of any process, latmon's own reads included).
pub const SKIPS_COUNTED_SINCE: KernelVersion = KernelVersion::new(6, 7, 0);

/// Whether `kernel` skips some of a probe's programs for map syscalls
/// without counting it: it is attached by `attach`, and `syscall_tps` says
/// it hooks classic syscall tracepoints besides (the cycle and lock
/// families). Its `missed` then reads 0 whatever those programs missed
/// (seen: one futex wait of 99 on the 6.1 rt-arm64 board, where latmon
/// shares the one CPU with the watched threads).
pub fn skips_uncounted(kernel: KernelVersion, attach: Mechanism, syscall_tps: bool) -> bool {
    let skippable = syscall_tps || matches!(attach, Mechanism::Tracepoint | Mechanism::Kprobe | Mechanism::Uprobe);
    skippable && kernel < SKIPS_COUNTED_SINCE
}

impl Cost {
    pub fn add(&mut self, o: Cost) {
        self.runs = self.runs.saturating_add(o.runs);
        self.run_time_ns = self.run_time_ns.saturating_add(o.run_time_ns);
        self.missed = self.missed.saturating_add(o.missed);
    }

    /// BPF time per event (0 when nothing ran).
    pub fn ns_per_event(&self) -> u64 {
        self.run_time_ns.checked_div(self.runs).unwrap_or(0)
    }

    /// Events per second over `wall_ns`.
    pub fn events_per_s(&self, wall_ns: u64) -> u64 {
        if wall_ns == 0 {
            return 0;
        }
        (self.runs as u128 * 1_000_000_000 / wall_ns as u128) as u64
    }

    /// Percent of the machine's CPU capacity (`cpus` CPUs) over `wall_ns`.
    pub fn cpu_percent(&self, wall_ns: u64, cpus: u32) -> f64 {
        cpu_percent(self.run_time_ns, wall_ns, cpus)
    }
}

/// `busy_ns` as a percent of `cpus` CPUs over `wall_ns`.
pub fn cpu_percent(busy_ns: u64, wall_ns: u64, cpus: u32) -> f64 {
    if wall_ns == 0 || cpus == 0 {
        return 0.0;
    }
    busy_ns as f64 * 100.0 / (wall_ns as f64 * f64::from(cpus))
}

/// One program's identity and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgStats {
    pub id: u32,
    pub runs: u64,
    pub run_time_ns: u64,
    pub missed: u64,
}

#[derive(Debug, Clone)]
struct Slot {
    id: u32,
    fd: RawFd,
    /// Counters at the last sample (None: not sampled yet).
    last: Option<Cost>,
    /// Change over the last interval.
    delta: Cost,
    /// Probes using this program, and the sum of their events (scratch).
    owners: u32,
    weight: u64,
}

/// The programs of all running probes, sampled once per interval, their
/// deltas attributed to probes. A program shared by several probes (the
/// kfunc/ufunc set's kprobe/uprobe programs) is split among them in
/// proportion to their interval event counts (evenly when none counted).
#[derive(Debug, Default)]
pub struct CostTable {
    slots: Vec<Slot>,
    /// Per probe: indexes into `slots`.
    probes: Vec<Vec<usize>>,
    /// Failed samples since start.
    pub errors: u64,
}

impl CostTable {
    /// Rebuild for a new probe set: `probes[i]` are probe i's program fds
    /// (empty for a probe that is not running). Programs seen before keep
    /// their last counters, so no interval is lost across a change.
    /// Allocates (called at start, on reload and on detach only).
    /// `read`: a program's counters ([`prog_stats`], or a test's).
    pub fn rebuild_with(&mut self, probes: &[Vec<RawFd>], mut read: impl FnMut(RawFd) -> io::Result<ProgStats>) {
        let old = std::mem::take(&mut self.slots);
        self.probes.clear();
        for fds in probes {
            let mut mine = Vec::with_capacity(fds.len());
            for &fd in fds {
                let now = match read(fd) {
                    Ok(s) => s,
                    Err(e) => {
                        log::warn!("BPF statistics: program fd {fd}: {e}");
                        continue;
                    }
                };
                let id = now.id;
                let at = match self.slots.iter().position(|s| s.id == id) {
                    Some(i) => i,
                    None => {
                        // A new program counts from now.
                        let last = old.iter().find(|s| s.id == id).and_then(|s| s.last).or(Some(Cost {
                            runs: now.runs,
                            run_time_ns: now.run_time_ns,
                            missed: now.missed,
                        }));
                        self.slots.push(Slot { id, fd, last, delta: Cost::default(), owners: 0, weight: 0 });
                        self.slots.len() - 1
                    }
                };
                if !mine.contains(&at) {
                    mine.push(at);
                }
            }
            self.probes.push(mine);
        }
    }

    /// Read every program's counters; deltas since the previous sample.
    /// Returns the cost of all programs (each counted once) and how many
    /// programs could not be read. No allocation.
    pub fn sample_with(&mut self, mut read: impl FnMut(RawFd) -> io::Result<ProgStats>) -> (Cost, usize) {
        let mut all = Cost::default();
        let mut failed = 0;
        for s in &mut self.slots {
            match read(s.fd) {
                Ok(p) => {
                    let now = Cost { runs: p.runs, run_time_ns: p.run_time_ns, missed: p.missed };
                    s.delta = match s.last {
                        Some(l) => Cost {
                            runs: now.runs.saturating_sub(l.runs),
                            run_time_ns: now.run_time_ns.saturating_sub(l.run_time_ns),
                            missed: now.missed.saturating_sub(l.missed),
                        },
                        None => Cost::default(),
                    };
                    s.last = Some(now);
                }
                Err(_) => {
                    self.errors += 1;
                    failed += 1;
                    s.delta = Cost::default();
                }
            }
            all.add(s.delta);
        }
        (all, failed)
    }

    /// Set program deltas directly (tests).
    #[cfg(test)]
    fn set_delta(&mut self, id: u32, d: Cost) {
        if let Some(s) = self.slots.iter_mut().find(|s| s.id == id) {
            s.delta = d;
        }
    }

    /// Attribute the sampled deltas: `events[i]` is probe i's event count
    /// this interval (a weight), `out[i]` receives its cost. No allocation.
    pub fn split(&mut self, events: impl Fn(usize) -> u64, out: &mut [Cost]) {
        for s in &mut self.slots {
            s.owners = 0;
            s.weight = 0;
        }
        for (i, mine) in self.probes.iter().enumerate() {
            for &at in mine {
                self.slots[at].owners += 1;
                self.slots[at].weight += events(i);
            }
        }
        for (i, mine) in self.probes.iter().enumerate() {
            let mut c = Cost::default();
            for &at in mine {
                let s = &self.slots[at];
                let (num, den) = if s.owners <= 1 {
                    (1, 1)
                } else if s.weight == 0 {
                    (1, u64::from(s.owners))
                } else {
                    (events(i), s.weight)
                };
                c.add(Cost {
                    runs: scale(s.delta.runs, num, den),
                    run_time_ns: scale(s.delta.run_time_ns, num, den),
                    missed: scale(s.delta.missed, num, den),
                });
            }
            if let Some(o) = out.get_mut(i) {
                *o = c;
            }
        }
    }

    /// Whether probe i has programs whose cost is split with other probes.
    pub fn shared(&self, i: usize) -> bool {
        self.probes
            .get(i)
            .is_some_and(|m| m.iter().any(|&at| self.probes.iter().filter(|o| o.contains(&at)).count() > 1))
    }

    /// Distinct programs sampled.
    pub fn programs(&self) -> usize {
        self.slots.len()
    }
}

fn scale(v: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return 0;
    }
    (v as u128 * num as u128 / den as u128) as u64
}

/// `overhead_budget`: limits on latmon's own BPF cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// All of latmon's BPF programs together, percent of the machine's CPU
    /// capacity (see [`cpu_percent`]).
    pub cpu_percent: Option<f64>,
    /// Any one probe's BPF time per event.
    pub ns_per_event: Option<u64>,
    /// Consecutive intervals over budget before a probe is detached.
    pub intervals: u32,
}

/// A probe's ns/event counts against the budget only with at least this
/// many runs in the interval: a rarely hit probe's cold-cache runs cost
/// nothing worth detaching it for.
pub const MIN_RUNS_FOR_NS_BUDGET: u64 = 100;

/// Which limit an interval broke, with the numbers (for the log).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Breach {
    Cpu { percent: f64, limit: f64 },
    NsPerEvent { probe: usize, ns: u64, limit: u64 },
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Breach::Cpu { percent, limit } => write!(f, "BPF CPU share {percent:.3}% > budget {limit}%"),
            Breach::NsPerEvent { ns, limit, .. } => write!(f, "{ns} ns/event > budget {limit} ns"),
        }
    }
}

/// The outcome of one interval's check.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Verdict {
    /// The interval broke the budget.
    pub breach: Option<Breach>,
    /// Consecutive intervals over budget, this one included.
    pub streak: u32,
    /// Detach this probe now (the streak reached `intervals`).
    pub detach: Option<usize>,
}

/// Counts consecutive intervals over budget and picks the probe to detach.
#[derive(Debug, Default, Clone)]
pub struct BudgetWatch {
    streak: u32,
}

impl BudgetWatch {
    /// `costs[i]`: probe i's cost this interval, `None` when it does not
    /// run. `total`: all programs (shared ones once).
    pub fn check(&mut self, b: &Budget, costs: &[Option<Cost>], total: Cost, wall_ns: u64, cpus: u32) -> Verdict {
        let mut breach = None;
        // The most expensive probe breaking the ns/event limit.
        if let Some(limit) = b.ns_per_event {
            let worst = costs
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.map(|c| (i, c)))
                .filter(|(_, c)| c.runs >= MIN_RUNS_FOR_NS_BUDGET && c.ns_per_event() > limit)
                .max_by_key(|(_, c)| c.run_time_ns);
            if let Some((i, c)) = worst {
                breach = Some(Breach::NsPerEvent { probe: i, ns: c.ns_per_event(), limit });
            }
        }
        if breach.is_none() {
            if let Some(limit) = b.cpu_percent {
                let percent = total.cpu_percent(wall_ns, cpus);
                if percent > limit {
                    breach = Some(Breach::Cpu { percent, limit });
                }
            }
        }
        let Some(br) = breach else {
            self.streak = 0;
            return Verdict::default();
        };
        self.streak += 1;
        let mut v = Verdict { breach: Some(br), streak: self.streak, detach: None };
        if self.streak >= b.intervals.max(1) {
            v.detach = match br {
                Breach::NsPerEvent { probe, .. } => Some(probe),
                Breach::Cpu { .. } => costs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| c.map(|c| (i, c)))
                    .max_by_key(|(_, c)| c.run_time_ns)
                    .map(|(i, _)| i),
            };
            self.streak = 0;
        }
        v
    }

    pub fn streak(&self) -> u32 {
        self.streak
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtkernel::v;

    #[test]
    fn map_syscall_skips_go_uncounted_before_6_7_for_the_hooks_they_skip() {
        let (old, new) = (v(6, 1, 176), v(6, 7, 0));
        for m in [Mechanism::Tracepoint, Mechanism::Kprobe, Mechanism::Uprobe] {
            assert!(skips_uncounted(old, m, false) && !skips_uncounted(new, m, false), "{m}");
        }
        // tp_btf, raw_tp and fentry have a per-program guard that map
        // syscalls never raise: only the families' syscall tracepoints.
        for m in [Mechanism::TpBtf, Mechanism::RawTp, Mechanism::Fentry] {
            assert!(!skips_uncounted(old, m, false), "{m}");
            assert!(skips_uncounted(old, m, true) && !skips_uncounted(v(6, 18, 0), m, true), "{m}");
        }
    }

    fn table(owners: &[&[u32]]) -> CostTable {
        // Fake slots by id; fds are never used by split().
        let mut t = CostTable::default();
        for mine in owners {
            let mut v = Vec::new();
            for &id in *mine {
                let at = match t.slots.iter().position(|s| s.id == id) {
                    Some(i) => i,
                    None => {
                        t.slots.push(Slot { id, fd: -1, last: None, delta: Cost::default(), owners: 0, weight: 0 });
                        t.slots.len() - 1
                    }
                };
                v.push(at);
            }
            t.probes.push(v);
        }
        t
    }

    #[test]
    fn samples_are_deltas_of_the_counters_across_rebuilds_and_failures_count() {
        use std::cell::{Cell, RefCell};
        // fd 0 is program 10, fd 1 program 11: (runs, run time).
        let counters = RefCell::new([(100u64, 5_000u64), (50, 9_000)]);
        let fail_fd1 = Cell::new(false);
        let read = |fd: RawFd| -> io::Result<ProgStats> {
            if fd == 1 && fail_fd1.get() {
                return Err(io::Error::from_raw_os_error(9));
            }
            let (runs, run_time_ns) = counters.borrow()[fd as usize];
            Ok(ProgStats { id: 10 + fd as u32, runs, run_time_ns, missed: 0 })
        };
        let bump = |fd: usize, runs: u64, ns: u64| {
            let mut c = counters.borrow_mut();
            c[fd].0 += runs;
            c[fd].1 += ns;
        };
        let mut t = CostTable::default();
        // Probe 2 shares both programs.
        t.rebuild_with(&[vec![0], vec![1], vec![0, 1]], read);
        assert_eq!(t.programs(), 2);
        assert!(t.shared(0) && t.shared(2));
        // New programs count from the rebuild, not from their load.
        bump(0, 1_000, 90_000);
        bump(1, 10, 1_000);
        assert_eq!(t.sample_with(read), (Cost { runs: 1_010, run_time_ns: 91_000, missed: 0 }, 0));
        // A rebuild (a reload) keeps the last counters: the runs between
        // the last sample and the rebuild are in the next sample.
        bump(0, 7, 700);
        t.rebuild_with(&[vec![0]], read);
        assert!(!t.shared(0));
        assert_eq!(t.sample_with(read).0, Cost { runs: 7, run_time_ns: 700, missed: 0 });
        // A program that cannot be read counts as a failure, costs 0.
        t.rebuild_with(&[vec![0], vec![1]], read);
        fail_fd1.set(true);
        bump(0, 1, 100);
        bump(1, 1, 100);
        assert_eq!(t.sample_with(read), (Cost { runs: 1, run_time_ns: 100, missed: 0 }, 1));
        assert_eq!(t.errors, 1);
    }

    #[test]
    fn own_programs_are_exact_shared_ones_split_by_events() {
        // Probe 0 owns program 1; probes 1 and 2 share programs 2 and 3.
        let mut t = table(&[&[1], &[2, 3], &[2, 3]]);
        t.set_delta(1, Cost { runs: 1000, run_time_ns: 90_000, ..Default::default() });
        t.set_delta(2, Cost { runs: 400, run_time_ns: 40_000, missed: 40 });
        t.set_delta(3, Cost { runs: 400, run_time_ns: 20_000, ..Default::default() });
        let events = [5u64, 300, 100];
        let mut out = [Cost::default(); 3];
        t.split(|i| events[i], &mut out);
        assert_eq!(out[0], Cost { runs: 1000, run_time_ns: 90_000, ..Default::default() });
        assert_eq!(out[1], Cost { runs: 600, run_time_ns: 45_000, missed: 30 }, "misses split like runs");
        assert_eq!(out[2], Cost { runs: 200, run_time_ns: 15_000, missed: 10 });
        assert!(t.shared(1) && t.shared(2) && !t.shared(0));
        // No events at all: an even split.
        t.split(|_| 0, &mut out);
        assert_eq!(out[1], Cost { runs: 400, run_time_ns: 30_000, missed: 20 });
        assert_eq!(out[0].ns_per_event(), 90);
    }

    #[test]
    fn derived_figures() {
        let c = Cost { runs: 2_000, run_time_ns: 100_000, ..Default::default() };
        assert_eq!(c.ns_per_event(), 50);
        assert_eq!(c.events_per_s(500_000_000), 4_000);
        // 100 us over 1 s on 2 CPUs = 0.005 %.
        assert!((c.cpu_percent(1_000_000_000, 2) - 0.005).abs() < 1e-12);
        assert_eq!(Cost::default().ns_per_event(), 0);
        assert_eq!(c.events_per_s(0), 0);
        assert_eq!(cpu_percent(5, 0, 2), 0.0);
    }

    fn c(runs: u64, ns: u64) -> Option<Cost> {
        Some(Cost { runs, run_time_ns: ns, ..Default::default() })
    }

    #[test]
    fn budget_detaches_the_most_expensive_after_n_intervals() {
        let b = Budget { cpu_percent: Some(1.0), ns_per_event: None, intervals: 3 };
        let mut w = BudgetWatch::default();
        let wall = 1_000_000_000;
        // 30 ms of BPF per second on 2 CPUs = 1.5 %.
        let costs = [c(1000, 10_000_000), None, c(1000, 20_000_000)];
        let total = Cost { runs: 2000, run_time_ns: 30_000_000, ..Default::default() };
        let v1 = w.check(&b, &costs, total, wall, 2);
        assert!(matches!(v1.breach, Some(Breach::Cpu { .. })) && v1.streak == 1 && v1.detach.is_none());
        assert_eq!(w.check(&b, &costs, total, wall, 2).detach, None);
        let v3 = w.check(&b, &costs, total, wall, 2);
        assert_eq!(v3.detach, Some(2), "the probe with the most BPF time goes");
        assert_eq!(w.streak(), 0, "a fresh count after a detach");
        // An interval within budget resets the streak.
        w.check(&b, &costs, total, wall, 2);
        w.check(&b, &costs, Cost { runs: 1, run_time_ns: 1, ..Default::default() }, wall, 2);
        assert_eq!(w.streak(), 0);
        assert_eq!(w.check(&b, &costs, Cost::default(), wall, 2), Verdict::default());
    }

    #[test]
    fn ns_per_event_budget_names_the_worst_busy_probe() {
        let b = Budget { cpu_percent: None, ns_per_event: Some(500), intervals: 1 };
        let mut w = BudgetWatch::default();
        // Probe 0: 900 ns/event but only 10 runs (ignored); probe 1: 600
        // ns/event; probe 2: 700 ns/event with more total time.
        let costs = [c(10, 9_000), c(1_000, 600_000), c(2_000, 1_400_000), c(5_000, 100_000)];
        let v = w.check(&b, &costs, Cost::default(), 1_000_000_000, 2);
        assert_eq!(v.breach, Some(Breach::NsPerEvent { probe: 2, ns: 700, limit: 500 }));
        assert_eq!(v.detach, Some(2));
        let ok = [c(10, 9_000), None, None, c(5_000, 100_000)];
        assert_eq!(w.check(&b, &ok, Cost::default(), 1_000_000_000, 2).breach, None);
    }
}
