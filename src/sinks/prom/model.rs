// SPDX-License-Identifier: MIT
//! What one scrape shows: a line per probe (or per family's folded
//! series), filled on the agent thread into buffers it keeps, with the
//! cause labels each line admits (bounded per line).

use std::fmt::Write as _;

use latmon_core::causes::{CauseId, CauseSummary};
use latmon_core::cycle::{Rule, RuleCounts};
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::session::Tick;
use latmon_core::summary::ProbeState;
use latmon_core::text::push_clean;

use crate::sinks::link::LinkStats;

/// Label suffix of the line a family's folded series are summed into.
pub const FOLDED: &str = "folded";

/// Causes per line shown in `latmon_probe_alerted_cause_ratio`.
pub const TOP_CAUSES: usize = 3;
/// Task names per line that may appear as `cause` labels (docs/prometheus.md).
pub const TASK_NAMES_MAX: usize = 8;
/// The `cause` label of every other task.
pub const OTHER_TASKS: &str = "other tasks";

/// One line of the exposition: a probe, or the sum of a family's series
/// past the limit.
#[derive(Clone, Debug, Default)]
pub struct Line {
    pub probe: String,
    pub kind: String,
    pub attach: String,
    /// Cumulative since the probe started (drops and alerts in it too).
    pub hist: Hist,
    pub bpf_missed: u64,
    pub read_errors: u64,
    pub bpf_runs: u64,
    pub bpf_run_ns: u64,
    pub up: bool,
    pub detached: bool,
    pub bpf_ns_per_event: u64,
    pub events_per_s: u64,
    pub bpf_cpu_percent: f64,
    /// A family line: how many of its series are folded (None: not a
    /// family with series).
    pub folded: Option<u32>,
    /// timer, chain, runq with an anatomy: the last interval's alerted
    /// time by cause (`has_causes`; kept, not dropped, between intervals).
    pub causes: CauseSummary,
    pub has_causes: bool,
    /// The `cause` label of each of `causes`' first [`TOP_CAUSES`] (see
    /// [`Line::label_causes`]).
    pub cause_labels: Vec<String>,
    /// The alert threshold (ns; 0: none): a folded line's series share
    /// their family's.
    pub threshold_ns: u64,
    /// lock: its waits' inversions since the probe started (None: not a
    /// lock line).
    pub lock: Option<LockLine>,
    /// cycle: misses since the probe started (None: not a cycle probe).
    pub misses: Option<u64>,
    /// cycle: its threads' RT sleep rules broken since the probe started
    /// (None: not a cycle probe).
    pub rules: Option<RuleLine>,
    /// cycle: the last interval's missed time by cause
    /// (`has_miss_causes`), and the `cause` label of each of the first
    /// [`TOP_CAUSES`] (task names admitted as for `causes`, from the same
    /// per-line set).
    pub miss_causes: CauseSummary,
    pub has_miss_causes: bool,
    pub miss_cause_labels: Vec<String>,
}

impl Line {
    /// An empty line named `probe` (`probe:suffix` when `suffix` is set).
    fn reset(&mut self, probe: &str, suffix: &str, kind: &str, attach: &str) {
        copy_str(&mut self.probe, probe);
        if !suffix.is_empty() {
            self.probe.push(':');
            self.probe.push_str(suffix);
        }
        copy_str(&mut self.kind, kind);
        copy_str(&mut self.attach, attach);
        self.hist = Hist::default();
        (self.bpf_missed, self.read_errors, self.bpf_runs, self.bpf_run_ns) = (0, 0, 0, 0);
        (self.up, self.detached, self.bpf_ns_per_event, self.events_per_s, self.bpf_cpu_percent) =
            (true, false, 0, 0, 0.0);
        self.folded = None;
        self.threshold_ns = 0;
        self.has_causes = false;
        self.misses = None;
        self.rules = None;
        self.lock = None;
        self.has_miss_causes = false;
    }

    /// Add probe `i`'s state: its histogram merged, counters and rates
    /// summed, up only if all are, detached if any is.
    fn add(&mut self, t: &Tick<'_>, i: usize) {
        let rp = t.report.probes.get(i);
        self.hist.merge(&t.totals[i]);
        self.bpf_missed += rp.map_or(0, |p| p.total_bpf_missed);
        self.read_errors += t.read_errors.get(i).copied().unwrap_or(0);
        self.bpf_runs += rp.map_or(0, |p| p.total_bpf_runs);
        self.bpf_run_ns += rp.map_or(0, |p| p.total_bpf_run_time_ns);
        self.up &= rp.is_some_and(|p| p.state == ProbeState::Running);
        self.detached |= rp.is_some_and(|p| p.state == ProbeState::DetachedOverBudget);
        self.bpf_ns_per_event += rp.map_or(0, |p| p.bpf_ns_per_event);
        self.events_per_s += rp.map_or(0, |p| p.events_per_s);
        self.bpf_cpu_percent += rp.map_or(0.0, |p| p.bpf_cpu_percent);
        self.threshold_ns = self.threshold_ns.max(rp.map_or(0, |p| p.threshold_ns));
        // Only probes with one alert id tally causes (never a folded
        // line's series): the line's own.
        if let Some(c) = rp.and_then(|p| p.alert_causes.as_ref()) {
            self.causes.copy_from(c);
            self.has_causes = true;
        }
        if let Some(x) = rp.and_then(|p| p.extra.as_ref()) {
            self.add_extra(x);
        }
    }

    /// A family's own data (core extra.rs) summed into this line: the
    /// scrape's one match on it.
    fn add_extra(&mut self, x: &ProbeExtra) {
        match x {
            ProbeExtra::Cycle(c) => {
                let n = &c.counts;
                self.misses = Some(self.misses.unwrap_or(0) + n.total_misses);
                let r = self.rules.get_or_insert_with(RuleLine::default);
                for (sum, n) in r.counts.0.iter_mut().zip(n.total_rule_counts.0) {
                    *sum += n;
                }
                r.records_lost += n.total_rule_records_lost;
                self.miss_causes.copy_from(&c.miss_causes);
                self.has_miss_causes = true;
            }
            ProbeExtra::Lock(c) => {
                let l = self.lock.get_or_insert_with(LockLine::default);
                l.inversions += c.total_inversions;
                l.inversion_ns += c.total_inversion_ns;
                if let Some(n) = c.total_owners_refused {
                    l.owners_refused = Some(l.owners_refused.unwrap_or(0) + n);
                }
            }
        }
    }
}

/// A lock line's counters since start (a folded line's: its series' sum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockLine {
    pub inversions: u64,
    pub inversion_ns: u64,
    /// The family line only: owners named but not followed.
    pub owners_refused: Option<u64>,
}

/// A cycle line's RT sleep rules broken since start, per rule, and the
/// rule records lost on the way (the counts have them all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleLine {
    pub counts: RuleCounts,
    pub records_lost: u64,
}

impl RuleLine {
    /// Every rule's word (its `rule` label) and count, zeros included.
    pub fn per_rule(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Rule::ALL.into_iter().map(|r| (r.word(), self.counts.get(r)))
    }
}

/// A line's task names admitted into `cause` labels, by probe line name
/// (at most [`TASK_NAMES_MAX`] each).
type TaskNames = Vec<(String, Vec<String>)>;

impl Line {
    /// The `cause` label of each top cause. A task's is its name alone (a
    /// pid would make every fork a new series): the first
    /// [`TASK_NAMES_MAX`] names this line showed keep theirs for good, any
    /// other is `other tasks`. So whatever the board's processes call
    /// themselves, a line's task labels are at most `TASK_NAMES_MAX + 1`.
    fn label_causes(&mut self, names: &mut TaskNames) {
        let k = match names.iter().position(|(p, _)| *p == self.probe) {
            Some(k) => k,
            None => {
                names.push((self.probe.clone(), Vec::new()));
                names.len() - 1
            }
        };
        let admitted = &mut names[k].1;
        if self.has_causes {
            label_top(&self.causes, &mut self.cause_labels, admitted);
        }
        if self.has_miss_causes {
            label_top(&self.miss_causes, &mut self.miss_cause_labels, admitted);
        }
    }
}

/// The `cause` labels of `causes`' first [`TOP_CAUSES`] into `labels`,
/// task names admitted into `admitted` (see [`Line::label_causes`]).
fn label_top(causes: &CauseSummary, labels: &mut Vec<String>, admitted: &mut Vec<String>) {
    labels.resize_with(causes.causes.len().min(TOP_CAUSES), String::new);
    for (c, label) in causes.causes.iter().zip(labels.iter_mut()) {
        label.clear();
        if !matches!(c.id, CauseId::Task { .. }) {
            c.label_into(label);
            continue;
        }
        push_clean(label, if c.name.is_empty() { "?" } else { &c.name });
        if !admitted.iter().any(|a| a.as_str() == label.as_str()) {
            if admitted.len() < TASK_NAMES_MAX {
                admitted.push(label.clone());
            } else {
                label.clear();
                label.push_str(OTHER_TASKS);
            }
        }
    }
}

/// What one scrape shows (filled on the agent thread, rendered on the
/// server thread).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub kernel: String,
    pub board: String,
    pub boot_id: u32,
    pub uptime_ns: u64,
    pub interval_ns: u64,
    pub seq: u64,
    pub bpf_cpu_percent: f64,
    pub cost_measured: bool,
    pub online_cpus: u32,
    pub over_budget: bool,
    pub over_budget_intervals: u32,
    pub degraded: bool,
    pub rss_bytes: u64,
    /// The observer-effect certificate the agent announces (as Hello
    /// revision 11 carries it); None: none stored for its config.
    pub certificate: Option<latmon_core::wire::WireCertificate>,
    /// `lines[..n]` are in use (the rest keep their buffers).
    pub lines: Vec<Line>,
    pub n: usize,
    /// The watched loops with a cycle counted (`cycle,auto`): at most
    /// LATMON_CYCLE_AUTO; `loops[..n_loops]` in use.
    pub loops: Vec<LoopLine>,
    pub n_loops: usize,
    /// The other outputs' link trouble, by output position (None: an
    /// output without a link to report on).
    pub links: Vec<(String, Option<LinkStats>)>,
}

/// One watched loop's counts since it was found (JSON `loops[].cycle`),
/// labelled `loop` (its thread's name) and `tid`.
#[derive(Clone, Debug, Default)]
pub struct LoopLine {
    pub name: String,
    pub tid: String,
    pub period_ns: u64,
    pub cycles: u64,
    pub misses: u64,
    pub overruns: u64,
}

/// Scratch of `Snapshot::fill`, kept between intervals (sized to the
/// probe count; grows only when a family finds a new series).
#[derive(Default)]
pub(super) struct Grouping {
    /// Per probe: the line it is shown on.
    line: Vec<usize>,
    /// Per probe: its family line's probe index, or `usize::MAX`.
    family: Vec<usize>,
    /// Per family probe: series seen so far, and its folded line.
    series: Vec<u32>,
    folded_line: Vec<usize>,
    /// Task names admitted into `cause` labels (kept for the output's
    /// life: a label once shown stays the same series).
    task_names: TaskNames,
}

const NONE: usize = usize::MAX;

/// `i` is a series of `j`: same kind and named `NAME_OF_J:LABEL`.
fn is_series_of(t: &Tick<'_>, i: usize, j: usize) -> bool {
    let (a, b) = (&t.session.probes[i], &t.session.probes[j]);
    a.kind == b.kind
        && a.name.len() > b.name.len() + 1
        && a.name.starts_with(&b.name)
        && a.name.as_bytes()[b.name.len()] == b':'
}

impl Snapshot {
    fn line(&mut self) -> &mut Line {
        if self.n == self.lines.len() {
            self.lines.push(Line::default());
        }
        self.n += 1;
        &mut self.lines[self.n - 1]
    }

    /// Copy one interval's state in, folding each family's series past
    /// `limit` into one line. No allocation once the buffers have grown.
    pub(super) fn fill(&mut self, t: &Tick<'_>, limit: u32, g: &mut Grouping) {
        let r = t.report;
        let a = &r.agent;
        let ses = t.session;
        copy_str(&mut self.kernel, &ses.kernel);
        copy_str(&mut self.board, &ses.board);
        self.boot_id = ses.boot_id;
        self.uptime_ns = r.time_ns.saturating_sub(ses.start_ns);
        self.interval_ns = r.interval_ns;
        self.seq = r.seq;
        self.bpf_cpu_percent = a.bpf_cpu_percent;
        self.cost_measured = a.cost_measured;
        self.online_cpus = a.online_cpus;
        self.over_budget = a.over_budget;
        self.over_budget_intervals = a.over_budget_intervals;
        self.degraded = a.degraded;
        self.rss_bytes = a.rss_bytes;
        self.certificate = ses.certificate;
        self.n = 0;
        let n = t.totals.len().min(ses.probes.len());
        for v in [&mut g.line, &mut g.family, &mut g.folded_line] {
            v.clear();
            v.resize(n, NONE);
        }
        g.series.clear();
        g.series.resize(n, 0);
        for i in 0..n {
            let fam = (0..i).find(|&j| g.family[j] == NONE && is_series_of(t, i, j)).unwrap_or(NONE);
            g.family[i] = fam;
            let p = &ses.probes[i];
            let folded = fam != NONE && {
                g.series[fam] += 1;
                g.series[fam] > limit
            };
            if fam != NONE {
                let fl = g.line[fam];
                self.lines[fl].folded = Some(g.series[fam].saturating_sub(limit));
            }
            if !folded {
                g.line[i] = self.n;
                self.line().reset(&p.name, "", p.kind.as_str(), p.attach.as_str());
            } else if g.folded_line[fam] == NONE {
                // The first series past the limit starts the folded line.
                g.folded_line[fam] = self.n;
                let fname = &ses.probes[fam].name;
                self.line().reset(fname, FOLDED, p.kind.as_str(), p.attach.as_str());
            }
            let at = if folded { g.folded_line[fam] } else { g.line[i] };
            self.lines[at].add(t, i);
        }
        for l in self.lines[..self.n].iter_mut().filter(|l| l.has_causes || l.has_miss_causes) {
            l.label_causes(&mut g.task_names);
        }
        self.n_loops = 0;
        for (l, c) in r.loops.iter().filter(|l| l.watched).filter_map(|l| Some((l, l.cycle?))) {
            if self.n_loops == self.loops.len() {
                self.loops.push(LoopLine::default());
            }
            let x = &mut self.loops[self.n_loops];
            self.n_loops += 1;
            copy_str(&mut x.name, &l.comm);
            x.tid.clear();
            let _ = write!(x.tid, "{}", l.tid);
            (x.period_ns, x.cycles, x.misses, x.overruns) =
                (c.period_ns, c.total_cycles, c.total_misses, c.total_overruns);
        }
    }

    pub fn loops(&self) -> &[LoopLine] {
        &self.loops[..self.n_loops]
    }

    pub fn lines(&self) -> &[Line] {
        &self.lines[..self.n]
    }
}

pub(super) fn copy_str(to: &mut String, from: &str) {
    to.clear();
    to.push_str(from);
}

/// Fill a fresh snapshot from one interval (tests, and `render`).
pub fn snapshot(t: &Tick<'_>, series: u32) -> Snapshot {
    let mut s = Snapshot::default();
    s.fill(t, series, &mut Grouping::default());
    s
}
