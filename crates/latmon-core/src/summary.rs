// SPDX-License-Identifier: MIT
//! Interval summaries: what every sink renders. Pure (no I/O).
//!
//! Probes deliver cumulative histograms; a summary holds, per probe, the
//! interval delta (count, percentiles, buckets) beside the totals since start.

use std::fmt::Write as _;

use serde::Serialize;

use crate::hist::{Hist, BUCKETS};
use crate::ident::{AttachSaid, BtfMode, Family, KindSaid, Mechanism, Wait};
use crate::text::{push_clean, wrap_pieces_into, Ns};

/// Static facts about an attached probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeInfo {
    pub name: String,
    pub kind: Family,
    /// Mechanism actually used (the rung of the attach ladder that won).
    pub attach: Mechanism,
    /// Design detail worth knowing when reading numbers (e.g. "switch-only").
    pub mode: String,
    /// Which build of the BPF object runs.
    pub btf_mode: BtfMode,
    /// A series that waits, or its family's waits line (reports carry it
    /// as `wait` / `waits`).
    #[serde(skip)]
    pub wait: Wait,
}

/// A configured probe that did not attach: what outputs with fixed
/// per-probe addressing (Modbus) need to keep its place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedProbe {
    /// Index in the configured probe list (config order).
    pub position: usize,
    pub name: String,
    pub kind: Family,
    /// Why it is not running (the attach error).
    pub why: String,
}

/// Whether a probe still runs. Serialized as its description.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProbeState {
    /// Attached and counting.
    #[default]
    Running,
    /// Detached by the agent: latmon's own cost exceeded `overhead_budget`
    /// (this probe was the most expensive). Its counts stay frozen.
    DetachedOverBudget,
}

impl ProbeState {
    /// The words used in text, JSON and Prometheus labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeState::Running => "running",
            ProbeState::DetachedOverBudget => "detached: over budget",
        }
    }
}

impl Serialize for ProbeState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One probe's line in an interval summary (the JSON contract's field names).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProbeReport {
    pub name: String,
    /// Family and mechanism: known ones as types, a word this build does
    /// not know (a newer sender's Hello) kept as said. JSON writes the
    /// word either way.
    pub kind: KindSaid,
    pub attach: AttachSaid,
    /// A series of calls whose purpose is to wait (`Wait::Series`): not in
    /// its family line, summed in the family's waits line.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub wait: bool,
    /// The family's waits line, `FAMILY:waits` (`Wait::Sum`): its counts
    /// and histogram are the sum of the family's wait series.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waits: bool,
    pub count: u64,
    pub total_count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// Non-empty interval buckets as `[lo_ns, hi_ns, count]`, `hi` exclusive.
    pub buckets: Vec<[u64; 3]>,
    /// Events lost in this interval / since start.
    pub drops: u64,
    pub total_drops: u64,
    /// Threshold alerts in this interval / since start.
    pub alerts: u64,
    pub total_alerts: u64,
    /// Alerts whose records were dropped (rate limit, full buffer) in
    /// this interval / since start; counted in `alerts` too.
    pub alerts_dropped: u64,
    pub total_alerts_dropped: u64,
    /// `running` or `detached: over budget` (see [`ProbeState`]).
    pub state: ProbeState,
    /// latmon's own cost (docs/agent.md): runs of this probe's BPF programs
    /// (one per kernel event it hooks) and the time spent in them, in this
    /// interval and since the probe started. Programs shared by several
    /// probes are split by their event counts. All 0 when BPF statistics
    /// are unavailable.
    pub bpf_runs: u64,
    pub bpf_run_time_ns: u64,
    pub total_bpf_runs: u64,
    pub total_bpf_run_time_ns: u64,
    /// Runs of the probe's BPF programs the kernel skipped (its
    /// `recursion_misses`; see `Cost::missed` in src/cost.rs): events the
    /// probe never saw, in this interval / since start. Counted without
    /// run-time statistics too; always 0 on kernels that do not count.
    pub bpf_missed: u64,
    pub total_bpf_missed: u64,
    /// `bpf_run_time_ns / bpf_runs`: BPF time per hooked event.
    pub bpf_ns_per_event: u64,
    /// `bpf_runs` per second of the interval.
    pub events_per_s: u64,
    /// BPF time as a share of the machine's CPU capacity over the
    /// interval: `bpf_run_time_ns / (interval_ns * online CPUs) * 100`.
    pub bpf_cpu_percent: f64,
    /// timer, chain, runq with an anatomy: what the interval's alerted
    /// time was spent on, over all its alerts (records sent or refused by
    /// the token bucket); absent for other probes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert_causes: Option<crate::causes::CauseSummary>,
    /// The family's own data (extra.rs: cycle counts and missed time,
    /// lock counts, ...); None for families that have none. Its JSON keys
    /// are the probe line's own (`cycle`, `miss_causes`, `lock`).
    #[serde(flatten)]
    pub extra: Option<crate::extra::ProbeExtra>,
    /// The probe's alert threshold (0: none): the agent's spec, or what
    /// the sender's Hello said (revision 9). Text shows it beside the
    /// probe's words; not in JSON (the contract's fields unchanged).
    #[serde(skip)]
    pub threshold_ns: u64,
    /// Text outputs show this probe's histogram under the table (the
    /// spec's `hist=true`, inherited by a family's series). A display
    /// choice, not a measurement: not in JSON, not on the wire.
    #[serde(skip)]
    pub hist: bool,
}

/// The agent's own state for an interval: its cost and the overhead
/// budget. `over_budget` and `degraded` are what a status bit (Modbus)
/// or an alarm should show.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentStatus {
    /// BPF run-time statistics are on (BPF_ENABLE_STATS) and read.
    pub cost_measured: bool,
    /// CPUs the CPU shares are relative to.
    pub online_cpus: u32,
    /// All of latmon's BPF programs this interval (each program once).
    pub bpf_run_time_ns: u64,
    pub bpf_cpu_percent: f64,
    /// The interval exceeded `overhead_budget`.
    pub over_budget: bool,
    /// Consecutive intervals over budget so far (the count that reaching
    /// `overhead_budget.intervals` detaches a probe).
    pub over_budget_intervals: u32,
    /// At least one probe was detached over budget: latmon runs degraded.
    pub degraded: bool,
    /// Probes detached over budget since start (or the last reload).
    pub detached: u32,
    /// latmon's resident set size (bytes) at the end of the interval.
    pub rss_bytes: u64,
    /// Page faults (minor and major) of latmon's threads this interval,
    /// those of populating new locked memory included: 0 in steady state
    /// (no new series, nothing allocated; docs/agent.md).
    pub page_faults: u64,
    /// Loop discovery's CPU time in its last scan (its own thread).
    pub discovery_cpu_ns: u64,
    /// Loop discovery's scans since start, and CLOCK_MONOTONIC when the
    /// one `loops` comes from began (0: none yet): what a reader dates
    /// the listing by (a busy host may hold a scan back).
    pub discovery_scans: u64,
    pub discovery_at_ns: u64,
    /// Periodic RT loops `cycle,auto` leaves unwatched: past its bound
    /// (LATMON_CYCLE_AUTO), or timerfd loops when the read program could
    /// not attach.
    pub loops_unwatched: u32,
}

/// A latency above a probe's threshold, as the kernel reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertRecord {
    /// The probe's place in the report's list (`IntervalReport::probes`,
    /// `Session::probes`, the wire's probe id): what outputs key on. The
    /// agent stamps it as it drains a probe's records; a receiver takes
    /// the frame's. Outputs name it (JSON `probe`, the ALERT line) from
    /// their probe list: see [`Named`].
    pub id: crate::ident::ProbeId,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cpu: u32,
    pub latency_ns: u64,
    /// CLOCK_MONOTONIC when the slow event ended.
    pub time_ns: u64,
    /// What delayed it (timer, chain, runq): JSON `cpu_woken`, `cpu_ran`,
    /// `causes`; absent when the record carries none.
    pub anatomy: Option<crate::anatomy::Anatomy>,
    /// cycle: the miss, overrun or slow response this record is (JSON
    /// `event`, `release_ns`, `deadline_ns`, `done_ns`, `doing`,
    /// `migrations`); absent for other families.
    pub cycle: Option<crate::cycle::CycleMark>,
}

impl AlertRecord {
    /// A cycle rule's record: a moment, not a latency (its `latency_ns`
    /// is 0). Screens print `rule` where others print the latency.
    pub fn is_rule(&self) -> bool {
        self.cycle.as_ref().is_some_and(|c| c.rule.is_some())
    }
}

/// A record with its probe's name, as JSON writes it: the name comes
/// from the output's probe list (the report's row, the sender's Hello)
/// at the moment of writing, never from the record.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub name: &'a str,
    pub record: &'a AlertRecord,
}

/// By hand, not derived: the anatomy's fields sit beside the others
/// (serde's `flatten` would do it with a buffering serializer, larger).
impl Serialize for Named<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let r = self.record;
        let mut st = ser.serialize_map(None)?;
        st.serialize_entry("probe", self.name)?;
        st.serialize_entry("pid", &r.pid)?;
        st.serialize_entry("tid", &r.tid)?;
        st.serialize_entry("comm", &r.comm)?;
        st.serialize_entry("cpu", &r.cpu)?;
        st.serialize_entry("latency_ns", &r.latency_ns)?;
        st.serialize_entry("time_ns", &r.time_ns)?;
        if let Some(c) = &r.cycle {
            c.serialize_fields(&mut st)?;
        }
        if let Some(a) = &r.anatomy {
            st.serialize_entry("cpu_woken", &a.cpu_woken)?;
            st.serialize_entry("cpu_ran", &a.cpu_ran)?;
            st.serialize_entry("causes", &a.causes)?;
        }
        st.end()
    }
}

/// One interval (the JSON output is one of these per line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IntervalReport {
    pub seq: u64,
    /// CLOCK_MONOTONIC at the end of the interval (the clock BPF stamps use).
    pub time_ns: u64,
    pub interval_ns: u64,
    /// True for the summary flushed at exit (its interval may be short).
    pub last: bool,
    pub probes: Vec<ProbeReport>,
    /// Alert records that arrived during the interval (bounded per interval
    /// by the kernel's rate limit; the per-probe `alerts` counts are exact).
    /// Each record's id is its row in `probes`.
    pub alert_records: Vec<AlertRecord>,
    /// The board's control loops, as loop discovery found them (JSON
    /// `loops`; bounded by `loops::LISTED`, the rest in `loops_unlisted`).
    /// Empty from frames.
    pub loops: Vec<crate::loops::Loop>,
    pub loops_unlisted: u32,
    /// The agent's own cost and budget state (default when decoded from
    /// frames).
    pub agent: AgentStatus,
}

/// By hand, not derived: each alert record is written with its row's
/// name (`Named`). Field order and omissions as the derived form had
/// (`last` only when true, `alert_records` only when some).
impl Serialize for IntervalReport {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        self.serialize_keeping(ser, self.alert_records.len())
    }
}

impl IntervalReport {
    /// The JSON form with the first `keep` alert records only; the rest
    /// are counted in `alert_records_cut` (written when some are: a line
    /// that cuts nothing is the derived form, byte for byte). The JSON
    /// output bounds its lines with it (crate::json::report_line).
    pub fn serialize_keeping<S: serde::Serializer>(&self, ser: S, keep: usize) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Records<'a>(&'a IntervalReport, usize);
        impl Serialize for Records<'_> {
            fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                let r = self.0;
                ser.collect_seq(r.alert_records[..self.1].iter().map(|a| Named { name: r.probe_name(a.id), record: a }))
            }
        }
        let keep = keep.min(self.alert_records.len());
        let mut st = ser.serialize_map(None)?;
        st.serialize_entry("seq", &self.seq)?;
        st.serialize_entry("time_ns", &self.time_ns)?;
        st.serialize_entry("interval_ns", &self.interval_ns)?;
        if self.last {
            st.serialize_entry("last", &self.last)?;
        }
        if !self.loops.is_empty() || self.loops_unlisted > 0 {
            st.serialize_entry("loops", &self.loops)?;
        }
        if self.loops_unlisted > 0 {
            st.serialize_entry("loops_unlisted", &self.loops_unlisted)?;
        }
        st.serialize_entry("probes", &self.probes)?;
        if keep > 0 {
            st.serialize_entry("alert_records", &Records(self, keep))?;
        }
        if keep < self.alert_records.len() {
            st.serialize_entry("alert_records_cut", &(self.alert_records.len() - keep))?;
        }
        st.serialize_entry("agent", &self.agent)?;
        st.end()
    }

    /// The name of row `id`, for a record's text and JSON; empty for an
    /// id no row has (a record is always drained into its own row's id,
    /// so this is a bug's trace, not a case outputs meet).
    pub fn probe_name(&self, id: crate::ident::ProbeId) -> &str {
        self.probes.get(id.index()).map_or("", |p| p.name.as_str())
    }

    /// What a single "over budget" status bit shows: over budget now, or
    /// running degraded because a probe was detached over budget.
    pub fn over_budget_alarm(&self) -> bool {
        self.agent.over_budget || self.agent.degraded
    }
}

impl ProbeReport {
    /// Build from the cumulative snapshots at the start and end of an interval.
    pub fn new(info: &ProbeInfo, prev: &Hist, cur: &Hist) -> Self {
        let mut r = Self::labelled(&info.name, info.kind.as_str(), info.attach.as_str(), prev, cur);
        r.set_wait(info.wait);
        r
    }

    /// [`ProbeReport::new`] for a row labelled with words, not types: a
    /// receiver's, from what a sender's Hello said.
    pub fn labelled(name: &str, kind: &str, attach: &str, prev: &Hist, cur: &Hist) -> Self {
        let mut r = ProbeReport::empty();
        r.fill_labelled(name, kind, attach, prev, cur);
        r
    }

    /// A report with no name and no counts (to be filled).
    pub fn empty() -> Self {
        ProbeReport::default()
    }

    /// Rebuild in place from the cumulative snapshots at the start and end
    /// of an interval. Reuses the strings and the bucket list: no
    /// allocation once they have grown to their working size. Cost and
    /// state are left as they are (the agent sets them).
    pub fn fill(&mut self, info: &ProbeInfo, prev: &Hist, cur: &Hist) {
        self.fill_labelled(&info.name, info.kind.as_str(), info.attach.as_str(), prev, cur);
        self.set_wait(info.wait);
    }

    /// The report's `wait` / `waits` flags from a probe's role.
    pub fn set_wait(&mut self, w: Wait) {
        self.wait = w == Wait::Series;
        self.waits = w == Wait::Sum;
    }

    /// The role the `wait` / `waits` flags say.
    pub fn wait_role(&self) -> Wait {
        match (self.wait, self.waits) {
            (true, _) => Wait::Series,
            (false, true) => Wait::Sum,
            (false, false) => Wait::No,
        }
    }

    /// [`ProbeReport::fill`] with the labels as words (see `labelled`).
    pub fn fill_labelled(&mut self, name: &str, kind: &str, attach: &str, prev: &Hist, cur: &Hist) {
        let d = cur.delta(prev);
        let p = d.percentiles();
        if self.name != name {
            self.name.clear();
            self.name.push_str(name);
        }
        self.kind.set_word(kind);
        self.attach.set_word(attach);
        self.count = d.count;
        self.total_count = cur.count;
        self.min_ns = d.min_ns;
        self.max_ns = d.max_ns;
        // A sender's sum that went backwards (a keyframe after a reset)
        // wraps the delta's sum; a mean lies within [min, max] whatever.
        self.mean_ns = if d.count == 0 { 0 } else { d.mean_ns().clamp(d.min_ns, d.max_ns.max(d.min_ns)) };
        self.p50_ns = p.p50_ns;
        self.p90_ns = p.p90_ns;
        self.p99_ns = p.p99_ns;
        self.p999_ns = p.p999_ns;
        self.buckets.clear();
        // Room for every bucket at once: no reallocation as more fill up.
        self.buckets.reserve(BUCKETS);
        self.buckets.extend(d.nonzero_buckets().map(|(lo, hi, c)| [lo, hi, c]));
        self.drops = d.drops;
        self.total_drops = cur.drops;
        self.alerts = d.alerts;
        self.total_alerts = cur.alerts;
        self.alerts_dropped = d.alerts_dropped;
        self.total_alerts_dropped = cur.alerts_dropped;
    }
}

const BAR_WIDTH: usize = 40;

/// Interval buckets folded into power-of-two rows `[2^k, 2^(k+1))`
/// (`(lo, hi inclusive, count)`), without allocating.
fn rows(buckets: &[[u64; 3]]) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
    let mut it = buckets.iter().peekable();
    std::iter::from_fn(move || {
        let row_of = |lo: u64| -> (u64, u64) {
            if lo == 0 {
                return (0, 1);
            }
            let k = 63 - lo.leading_zeros();
            (1u64 << k, (1u64 << k).saturating_mul(2).saturating_sub(1))
        };
        let &[lo, _, c] = it.next()?;
        let (row_lo, row_hi) = row_of(lo);
        let mut n = c;
        while let Some(&&[lo2, _, c2]) = it.peek() {
            if row_of(lo2).0 != row_lo {
                break;
            }
            n += c2;
            it.next();
        }
        Some((row_lo, row_hi, n))
    })
}

/// bcc-style text: a power-of-two histogram (the log-linear sub-buckets
/// folded per power of two for a readable screen) and percentile lines,
/// for every probe (what `latmon run --hist` shows under its table).
pub fn render_text(r: &IntervalReport) -> String {
    let mut s = String::new();
    render_text_into(&mut s, r);
    s
}

/// [`render_text`] appended to `s`: no allocation once `s` has room.
pub fn render_text_into(s: &mut String, r: &IntervalReport) {
    render_header_into(s, r);
    for p in &r.probes {
        render_hist_into(s, p, r.agent.cost_measured);
    }
    render_alerts_into(s, r, usize::MAX, usize::MAX);
}

/// The interval's first lines: seq, latmon's own cost, budget state.
pub fn render_header_into(s: &mut String, r: &IntervalReport) {
    let _ = writeln!(s, "--- seq {}{}  interval {}", r.seq, if r.last { " (final)" } else { "" }, Ns(r.interval_ns));
    let a = &r.agent;
    if a.cost_measured {
        let _ = write!(
            s,
            "latmon cost: BPF {:.3}% of {} CPUs ({} this interval)",
            a.bpf_cpu_percent,
            a.online_cpus,
            Ns(a.bpf_run_time_ns)
        );
        if a.rss_bytes > 0 {
            let _ = write!(s, "  rss {} KiB", a.rss_bytes / 1024);
        }
        s.push('\n');
    }
    if a.over_budget {
        let _ = writeln!(s, "OVER BUDGET: {} consecutive interval(s) over overhead_budget", a.over_budget_intervals);
    }
    if a.degraded {
        let _ = writeln!(s, "DEGRADED: {} probe(s) detached over budget", a.detached);
    }
}

/// One probe's bcc-style block: its line with the interval and total
/// counts, its cost (with run-time statistics), the histogram and the
/// percentiles.
pub fn render_hist_into(s: &mut String, p: &ProbeReport, cost_measured: bool) {
    push_clean(s, &p.name);
    s.push_str(" [");
    push_clean(s, p.kind.as_str());
    s.push_str(" via ");
    push_clean(s, p.attach.as_str());
    if p.threshold_ns > 0 {
        let _ = write!(s, ", threshold {}", Ns(p.threshold_ns));
    }
    let _ = write!(
        s,
        "]  count {}  total {}  drops {}/{}  alerts {}/{}",
        p.count, p.total_count, p.drops, p.total_drops, p.alerts, p.total_alerts
    );
    if p.total_alerts_dropped > 0 {
        let _ = write!(s, " (records dropped {}/{})", p.alerts_dropped, p.total_alerts_dropped);
    }
    if p.total_bpf_missed > 0 {
        // Events the kernel never let the probe see: shown only when
        // there are some, like records dropped.
        let _ = write!(s, "  MISSED {}/{}", p.bpf_missed, p.total_bpf_missed);
    }
    s.push('\n');
    if p.state != ProbeState::Running {
        let _ = writeln!(s, "  DETACHED ({}): counts frozen", p.state.as_str());
    } else if cost_measured && (p.total_bpf_runs > 0 || p.total_count == 0) {
        // A series of a family (events, yet no program runs of its
        // own) has its cost on the family line.
        let _ = writeln!(
            s,
            "  cost: BPF {} ns/event  {} events/s  {:.3}% CPU",
            p.bpf_ns_per_event, p.events_per_s, p.bpf_cpu_percent
        );
    }
    if let Some(c) = p.alert_causes.as_ref().filter(|c| c.alerts > 0) {
        // The interval's late time by cause: what a dashboard shows.
        s.push_str("  ");
        c.render_into(s, 3);
        s.push('\n');
    }
    if let Some(x) = &p.extra {
        // The family's own lines (a cycle probe's missed time by cause).
        x.render_text_into(s);
    }
    if p.count == 0 {
        let _ = writeln!(s, "  (no events)");
        return;
    }
    let peak = rows(&p.buckets).map(|r| r.2).max().unwrap_or(1).max(1);
    let _ = writeln!(s, "  {:>26} : {:<9} distribution", "nsecs", "count");
    for (lo, hi, c) in rows(&p.buckets) {
        let stars = (c as u128 * BAR_WIDTH as u128).div_ceil(peak as u128) as usize;
        let _ = write!(s, "  {:>12} -> {:<11} : {:<9} |", lo, hi, c);
        for i in 0..BAR_WIDTH {
            s.push(if i < stars { '*' } else { ' ' });
        }
        s.push_str("|\n");
    }
    let _ = writeln!(
        s,
        "  min {}  mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        Ns(p.min_ns),
        Ns(p.mean_ns),
        Ns(p.p50_ns),
        Ns(p.p90_ns),
        Ns(p.p99_ns),
        Ns(p.p999_ns),
        Ns(p.max_ns)
    );
}

/// The interval's alert records, at most `max` of them (then a line with
/// how many more), and how many records the kernel dropped.
pub fn render_alerts_into(s: &mut String, r: &IntervalReport, max: usize, width: usize) {
    let dropped: u64 = r.probes.iter().map(|p| p.alerts_dropped).sum();
    if r.alert_records.is_empty() && dropped == 0 {
        return;
    }
    // Not "above threshold": a cycle probe's misses, overruns and rule
    // breaks are records without one (issue 42).
    let _ = write!(s, "alerts: {} records this interval", r.alert_records.len());
    if dropped > 0 {
        let _ = write!(s, " ({dropped} more, records dropped)");
    }
    s.push('\n');
    for rec in r.alert_records.iter().take(max) {
        let a = Named { name: r.probe_name(rec.id), record: rec };
        render_alert_line_into(s, a, width);
        s.push('\n');
        if rec.anatomy.as_ref().is_some_and(|an| an.is_lock_wait()) {
            // A lock wait's owner and inversion do not fit one 80-column
            // line beside the lock's name: up to three lines, at whole pieces.
            let mut full = String::new();
            if render_detail_into(&mut full, a, usize::MAX) {
                wrap_pieces_into(s, &full, "    ", width, 3);
            }
            continue;
        }
        let at = s.len();
        s.push_str("    ");
        if render_detail_into(s, a, width.saturating_sub(4)) {
            s.push('\n');
        } else {
            s.truncate(at);
        }
    }
    if r.alert_records.len() > max {
        let _ = writeln!(s, "  ... {} more alert records (frames carry them all)", r.alert_records.len() - max);
    }
}

/// The line under a record's ALERT line, within `width` bytes: a cycle
/// record's head and parts (`miss 1.62ms of 1.00ms: running 1500 us,
/// ...`; an overrun's `overrun 1.00ms of 1.00ms, runnable behind
/// hog[4242]`), else its anatomy (`late 512 us: hog[4242] FIFO/90 460
/// us, ...`). False, nothing written, when the record has neither. The
/// agent's text output, `latmon view`, `latmon-view` and its report all
/// show a record with this line. Printable ASCII only (names are
/// cleaned), so a byte cut is a character cut: an overlong line ends in
/// `~`.
pub fn render_detail_into(s: &mut String, named: Named<'_>, width: usize) -> bool {
    let (a, name) = (named.record, named.name);
    let start = s.len();
    match (&a.anatomy, &a.cycle) {
        (Some(an), Some(c)) => {
            c.render_head_into(s, a.latency_ns);
            s.push(':');
            an.render_parts_into(s, start, width);
        }
        (None, Some(c)) => c.render_head_into(s, a.latency_ns),
        (Some(an), None) if an.is_lock_wait() => {
            // lock: `wait 1.52ms on ctrl_mutex: inversion ...`, the lock
            // being the series the record is of (`NAME:LOCK`).
            let _ = write!(s, "wait {} on ", Ns(a.latency_ns));
            push_clean(s, name.rsplit_once(':').map_or(name, |(_, lock)| lock));
            s.push(':');
            an.render_parts_into(s, start, width);
        }
        (Some(an), None) => an.render_line_into(s, a.latency_ns, width),
        (None, None) => return false,
    }
    if s.len() - start > width {
        s.truncate(start + width.saturating_sub(1));
        s.push('~');
    }
    true
}

/// `  ALERT ctrl  2.10ms  at 12.000000s  cpu 1  ctrl_loop[10] tid 11`
/// within `width` bytes: what was late, by how much and when first (the
/// time in microseconds, as dmesg prints it), then where and who; `tid`
/// only when it is not the process's main thread. A long probe name is
/// cut (`~`) to make room, down to [`ALERT_NAME_MIN`] characters; if the
/// line is still too long (pid_max pids, thousands of CPUs), its end is cut.
pub fn render_alert_line_into(s: &mut String, named: Named<'_>, width: usize) {
    let a = named.record;
    let start = s.len();
    s.push_str("  ALERT ");
    let name_at = s.len();
    push_clean(s, named.name);
    let name_end = s.len();
    // A cycle rule's record is a moment, not a latency: `rule`, not `0ns`
    // (the detail line below names the rule).
    if a.is_rule() {
        s.push_str("  rule");
    } else {
        let _ = write!(s, "  {}", Ns(a.latency_ns));
    }
    let _ = write!(s, "  at {}.{:06}s  cpu {}  ", a.time_ns / 1_000_000_000, a.time_ns % 1_000_000_000 / 1000, a.cpu);
    push_clean(s, &a.comm);
    let _ = write!(s, "[{}]", a.pid);
    if a.tid != a.pid {
        let _ = write!(s, " tid {}", a.tid);
    }
    let over = (s.len() - start).saturating_sub(width);
    let name_len = name_end - name_at;
    if over > 0 && name_len > ALERT_NAME_MIN {
        // push_clean writes printable ASCII only: a byte cut is a
        // character cut.
        let keep = name_len.saturating_sub(over + 1).max(ALERT_NAME_MIN - 1);
        s.replace_range(name_at + keep..name_end, "~");
    }
    if s.len() - start > width {
        s.truncate(start + width.saturating_sub(1));
        s.push('~');
    }
}

/// A probe name cut to fit an ALERT line keeps at least this many
/// characters (the `~` included).
pub const ALERT_NAME_MIN: usize = 12;

/// Keys every probe object of a JSON summary carries: the agent's and
/// `latmon decode`'s (receiver.rs) tests check the same set.
#[cfg(test)]
pub(crate) const PROBE_JSON_KEYS: [&str; 15] = [
    "name",
    "kind",
    "attach",
    "count",
    "total_count",
    "min_ns",
    "max_ns",
    "mean_ns",
    "p50_ns",
    "p90_ns",
    "p99_ns",
    "p999_ns",
    "buckets",
    "drops",
    "alerts",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_mean_stays_within_its_min_and_max_when_the_sum_went_backwards() {
        let mut prev = Hist::default();
        for v in [1_000, 2_000] {
            prev.record(v);
        }
        let mut cur = prev.clone();
        cur.record(3_000);
        cur.sum_ns = 10; // below prev's: the delta's sum wraps
        let r = ProbeReport::new(&info(), &prev, &cur);
        assert!(r.min_ns <= r.mean_ns && r.mean_ns <= r.max_ns, "mean {} in [{}, {}]", r.mean_ns, r.min_ns, r.max_ns);
    }

    fn info() -> ProbeInfo {
        ProbeInfo {
            name: "runq".into(),
            kind: Family::Runq,
            attach: Mechanism::TpBtf,
            mode: "switch-only".into(),
            btf_mode: BtfMode::CoRe,
            wait: Default::default(),
        }
    }

    fn sample() -> (Hist, Hist) {
        let mut prev = Hist::default();
        prev.record(1_000);
        let mut cur = prev.clone();
        for v in [300u64, 2_500, 2_600, 40_000] {
            cur.record(v);
        }
        cur.drops = 3;
        (prev, cur)
    }

    #[test]
    fn report_covers_the_interval_and_totals() {
        let (prev, cur) = sample();
        let r = ProbeReport::new(&info(), &prev, &cur);
        assert_eq!((r.count, r.total_count, r.drops, r.total_drops), (4, 5, 3, 3));
        assert_eq!(r.buckets.iter().map(|b| b[2]).sum::<u64>(), 4);
        assert_eq!(r.min_ns, 300);
        assert_eq!(r.max_ns, 40_000);
        assert!(r.min_ns <= r.p50_ns && r.p50_ns <= r.p99_ns && r.p99_ns <= r.max_ns);
    }

    #[test]
    fn json_has_every_contract_field() {
        let (prev, cur) = sample();
        let r = IntervalReport {
            seq: 7,
            time_ns: 1,
            interval_ns: 1_000_000_000,
            last: false,
            probes: vec![ProbeReport::new(&info(), &prev, &cur)],
            alert_records: Vec::new(),
            agent: AgentStatus::default(),
            loops: Vec::new(),
            loops_unlisted: 0,
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for k in ["seq", "time_ns", "interval_ns", "probes"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        let p = &v["probes"][0];
        for k in PROBE_JSON_KEYS {
            assert!(p.get(k).is_some(), "{k}");
        }
        assert_eq!(p["buckets"][0].as_array().unwrap().len(), 3);
    }

    #[test]
    fn text_has_histogram_and_percentiles() {
        let (prev, cur) = sample();
        let r = IntervalReport {
            seq: 1,
            time_ns: 0,
            interval_ns: 1_000_000_000,
            last: true,
            probes: vec![ProbeReport::new(&info(), &prev, &cur)],
            alert_records: Vec::new(),
            agent: AgentStatus::default(),
            loops: Vec::new(),
            loops_unlisted: 0,
        };
        let t = render_text(&r);
        assert!(t.contains("(final)"));
        assert!(t.contains("2048 -> 4095"), "{t}");
        assert!(t.contains("|****************************************|"), "{t}");
        assert!(t.contains("p99.9"));
        assert!(!t.contains("ALERT"), "no alert section without records: {t}");
    }

    #[test]
    fn cost_lines_belong_to_probes_with_programs_not_to_series() {
        let (prev, cur) = sample();
        let mut family = ProbeReport::new(&info(), &prev, &cur);
        (family.bpf_runs, family.total_bpf_runs, family.bpf_ns_per_event) = (9, 9, 120);
        let series = ProbeReport::new(&ProbeInfo { name: "runq:x".into(), ..info() }, &prev, &cur);
        let mut idle =
            ProbeReport::new(&ProbeInfo { name: "idle".into(), ..info() }, &Hist::default(), &Hist::default());
        idle.total_count = 0;
        let r = IntervalReport {
            loops: Vec::new(),
            loops_unlisted: 0,
            seq: 1,
            time_ns: 0,
            interval_ns: 1_000_000_000,
            last: false,
            probes: vec![family, series, idle],
            alert_records: Vec::new(),
            agent: AgentStatus { cost_measured: true, ..AgentStatus::default() },
        };
        let t = render_text(&r);
        // The family's, and the idle probe's (0 events is a true 0 cost).
        assert_eq!(t.matches("  cost: BPF").count(), 2, "{t}");
        assert!(t.contains("cost: BPF 120 ns/event"), "{t}");
    }

    #[test]
    fn text_shows_alert_records_and_dropped_counts() {
        let (prev, mut cur) = sample();
        cur.alerts = 5;
        cur.alerts_dropped = 2;
        let rec = AlertRecord {
            id: crate::ident::ProbeId(1),
            pid: 10,
            tid: 11,
            comm: "ctrl_loop".into(),
            cpu: 1,
            latency_ns: 2_100_000,
            time_ns: 12_000_000_345,
            anatomy: None,
            cycle: None,
        };
        let mut probe = ProbeReport::new(&info(), &prev, &cur);
        probe.name = "ctrl".into();
        probe.alert_causes = Some(crate::causes::CauseSummary {
            alerts: 5,
            alerted_ns: 4_000_000,
            causes: vec![crate::causes::TopCause {
                id: crate::causes::CauseId::Task { pid: 4242 },
                name: "hog".into(),
                ns: 3_600_000,
            }],
            folded_ns: 400_000,
            folded_parts: 2,
            ..Default::default()
        });
        let r = IntervalReport {
            loops: Vec::new(),
            loops_unlisted: 0,
            seq: 2,
            time_ns: 0,
            interval_ns: 1_000_000_000,
            last: false,
            // The records name row 1, not row 0: outputs name a record
            // by its id's row.
            probes: vec![ProbeReport { name: "other".into(), ..ProbeReport::new(&info(), &prev, &prev) }, probe],
            alert_records: vec![rec.clone(), {
                use crate::anatomy::{Anatomy, Cause, CauseKind, Policy};
                let hog = CauseKind::Task { comm: "hog".into(), pid: 4242, policy: Policy::Fifo, prio: 90 };
                let irq = CauseKind::Irq { irq: 36, name: "virtio1".into() };
                let parts = vec![Cause { kind: irq, ns: 30_000 }, Cause { kind: hog, ns: 2_000_000 }];
                AlertRecord { anatomy: Some(Anatomy::from_parts(2_100_000, 1, 0, parts)), ..rec }
            }],
            agent: AgentStatus::default(),
        };
        let t = render_text(&r);
        assert!(
            t.contains(
                "ctrl_loop[10] tid 11\n    late 2100 us: hog[4242] FIFO/90 2000 us, irq 36 virtio1 30 us, other 70 us; \
                 woken on cpu 1, ran on cpu 0\n"
            ),
            "{t}"
        );
        assert!(t.contains("alerts 5/5 (records dropped 2/2)"), "{t}");
        assert!(t.contains("\n  alerted 4.00ms in 5 alerts: 90.0% hog[4242]; folded 10.0% (2 parts)\n"), "{t}");
        assert!(t.contains("alerts: 2 records this interval"), "{t}");
        assert!(t.contains("  ALERT ctrl  2.10ms  at 12.000000s  cpu 1  ctrl_loop[10] tid 11\n"), "{t}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["alert_records"][0]["latency_ns"], 2_100_000);
        assert_eq!(
            (&v["alert_records"][0]["probe"], &v["alert_records"][1]["probe"]),
            (&"ctrl".into(), &"ctrl".into())
        );
        // No anatomy: no anatomy keys; with one, they sum to latency_ns.
        assert!(v["alert_records"][0].get("causes").is_none() && v["alert_records"][0].get("cpu_woken").is_none());
        let a = &v["alert_records"][1];
        assert_eq!((a["cpu_woken"].as_u64(), a["cpu_ran"].as_u64()), (Some(1), Some(0)));
        let sum: u64 = a["causes"].as_array().unwrap().iter().map(|c| c["ns"].as_u64().unwrap()).sum();
        assert_eq!(sum, 2_100_000);
        assert_eq!(a["causes"][0]["comm"], "hog");
        assert_eq!(v["probes"][1]["alerts_dropped"], 2);
        assert_eq!(v["probes"][1]["alert_causes"]["causes"][0]["share"], 0.9);
        assert_eq!(v["probes"][1]["alert_causes"]["folded_parts"], 2);
        assert!(!t.contains("MISSED"), "no kernel misses, no word about them: {t}");
    }

    #[test]
    fn kernel_misses_show_in_text_and_json() {
        let (prev, cur) = sample();
        let mut p = ProbeReport::new(&info(), &prev, &cur);
        (p.bpf_missed, p.total_bpf_missed) = (92, 300);
        let r = IntervalReport {
            seq: 2,
            time_ns: 0,
            interval_ns: 1_000_000_000,
            last: false,
            probes: vec![p],
            alert_records: Vec::new(),
            agent: AgentStatus::default(),
            loops: Vec::new(),
            loops_unlisted: 0,
        };
        assert!(render_text(&r).contains("  MISSED 92/300\n"), "{}", render_text(&r));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (v["probes"][0]["bpf_missed"].as_u64(), v["probes"][0]["total_bpf_missed"].as_u64()),
            (Some(92), Some(300))
        );
    }

    #[test]
    fn an_alert_records_anatomy_uses_the_documented_json_names() {
        use crate::anatomy::{Anatomy, Cause, CauseKind, Policy};
        let task = |comm: &str, pid: u32, ns: u64| Cause {
            kind: CauseKind::Task { comm: comm.into(), pid, policy: Policy::Fifo, prio: 90 },
            ns,
        };
        let a = Anatomy::from_parts(
            100_000,
            1,
            2,
            vec![
                task("hog", 7, 40_000),
                Cause { kind: CauseKind::Irq { irq: 36, name: "virtio1-req.0".into() }, ns: 30_000 },
                Cause { kind: CauseKind::Softirq { vector: 3 }, ns: 20_000 },
                Cause { kind: CauseKind::TimerIrqDelay, ns: 5_000 },
            ],
        );
        let rec = AlertRecord {
            id: crate::ident::ProbeId(0),
            pid: 1,
            tid: 1,
            comm: "ctrl".into(),
            cpu: 2,
            latency_ns: 100_000,
            time_ns: 1,
            anatomy: Some(a),
            cycle: None,
        };
        let v = serde_json::to_value(Named { name: "timer", record: &rec }).unwrap();
        assert_eq!(v["probe"], "timer");
        assert_eq!((v["cpu_woken"].as_u64(), v["cpu_ran"].as_u64()), (Some(1), Some(2)));
        let c = &v["causes"];
        assert_eq!(
            c[0],
            serde_json::json!({"kind": "task", "comm": "hog", "pid": 7, "policy": "fifo", "prio": 90, "ns": 40000})
        );
        assert_eq!(c[1], serde_json::json!({"kind": "irq", "irq": 36, "name": "virtio1-req.0", "ns": 30000}));
        assert_eq!(c[2], serde_json::json!({"kind": "softirq", "vector": "NET_RX", "ns": 20000}));
        assert_eq!(c[3], serde_json::json!({"kind": "timer_irq_delay", "ns": 5000}));
        assert_eq!(c[4], serde_json::json!({"kind": "other", "ns": 5000}));
    }
}
