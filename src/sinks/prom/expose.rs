// SPDX-License-Identifier: MIT
//! Every metric, described once: the text and protobuf formats each
//! implement [`Exposition`] and [`expose`] drives them in order.

use crate::bpf::limits::HIST_MAX_LOG2;

use super::model::{Line, LoopLine, Snapshot, TOP_CAUSES};

/// Smallest `le` bound: 2^8 ns = 256 ns.
pub const LE_MIN_LOG2: usize = 8;
/// Largest finite `le` bound: 2^36 ns = 68.7 s (latmon's last bucket edge).
pub const LE_MAX_LOG2: usize = HIST_MAX_LOG2;

/// Seconds from ns, as the exposition's float.
pub(super) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The labels of a sample.
#[derive(Clone, Copy)]
pub(super) enum Labels<'a> {
    None,
    /// `probe`, `kind`, `attach` of a line.
    Line(&'a Line),
    /// `latmon_info`'s.
    Info(&'a Snapshot),
    /// `output` of a link.
    Output(&'a str),
    /// A line's and its `rank`-th cause (0: the largest): `rank` (1..),
    /// `cause_kind` (task, irq, ...) and `cause` (`hog`, `other tasks`,
    /// `irq 36 virtio1`, `softirq NET_RX`, `other`).
    Cause(&'a Line, usize),
    /// The same of a cycle line's missed time (`miss_causes`).
    MissCause(&'a Line, usize),
    /// A line's and `rule` (an RT sleep rule's JSON word).
    Rule(&'a Line, &'static str),
    /// A watched loop's: `loop` (its thread's name) and `tid`.
    Loop(&'a LoopLine),
}

/// A cause's label words: (rank, kind, label); of the missed time's
/// causes when `miss`, else of the alerted time's.
pub(super) fn cause_labels(l: &Line, rank: usize, miss: bool) -> (String, &'static str, &str) {
    let (causes, labels) = if miss { (&l.miss_causes, &l.miss_cause_labels) } else { (&l.causes, &l.cause_labels) };
    let kind = causes.causes.get(rank).map_or("", |c| c.id.word());
    let label = labels.get(rank).map_or("", String::as_str);
    ((rank + 1).to_string(), kind, label)
}

/// Where the exposition is written: the text format or protobuf. One
/// description of the metrics (`expose`) drives both.
pub(super) trait Exposition {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str);
    fn sample(&mut self, labels: Labels<'_>, v: f64);
    fn histogram(&mut self, line: &Line);
}

/// A per-loop metric: its name, type, help and value.
type LoopMetric = (&'static str, Kind, &'static str, fn(&LoopLine) -> f64);

/// Every metric, in order. `dyn`, not generic: one copy for both formats
/// (1.9 KB less of the aarch64 binary than one per format).
pub(super) fn expose(s: &Snapshot, out: &mut dyn Exposition) {
    use Kind::{Counter, Gauge};
    out.family("latmon_info", Gauge, "latmon version, kernel and board (always 1).");
    out.sample(Labels::Info(s), 1.0);
    out.family("latmon_uptime_seconds", Gauge, "Time since latmon started counting.");
    out.sample(Labels::None, secs(s.uptime_ns));
    out.family("latmon_interval_seconds", Gauge, "Length of the last summary interval.");
    out.sample(Labels::None, secs(s.interval_ns));
    out.family("latmon_summaries_total", Counter, "Summary intervals completed.");
    out.sample(Labels::None, s.seq as f64);

    out.family("latmon_latency_seconds", Kind::Histogram, "Latency measured by each probe since it started.");
    for l in s.lines() {
        out.histogram(l);
    }
    lines(out, s, "latmon_probe_drops_total", Counter, "Events the probe lost (full maps, clock anomalies).", &|l| {
        l.hist.drops as f64
    });
    lines(out, s, "latmon_probe_alerts_total", Counter, "Events above the probe's alert threshold.", &|l| {
        l.hist.alerts as f64
    });
    lines(
        out,
        s,
        "latmon_probe_alert_records_dropped_total",
        Counter,
        "Alert records that never reached latmon (rate limit, full buffer).",
        &|l| l.hist.alerts_dropped as f64,
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_missed_total",
        Counter,
        "Runs of the probe's BPF programs the kernel skipped (recursion_misses): events it never saw.",
        &|l| l.bpf_missed as f64,
    );
    lines(out, s, "latmon_probe_read_errors_total", Counter, "Failed reads of the probe's maps.", &|l| {
        l.read_errors as f64
    });
    lines(
        out,
        s,
        "latmon_probe_up",
        Gauge,
        "1 while the probe is attached, 0 once detached (see latmon_probe_detached_over_budget).",
        &|l| f64::from(u8::from(l.up)),
    );
    lines(
        out,
        s,
        "latmon_probe_detached_over_budget",
        Gauge,
        "1 when latmon detached the probe because its own cost broke overhead_budget.",
        &|l| f64::from(u8::from(l.detached)),
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_runs_total",
        Counter,
        "Runs of the probe's BPF programs (kernel events it hooked); latmon's own cost.",
        &|l| l.bpf_runs as f64,
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_run_seconds_total",
        Counter,
        "Time spent in the probe's BPF programs; latmon's own cost.",
        &|l| secs(l.bpf_run_ns),
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_seconds_per_event",
        Gauge,
        "BPF time per hooked event over the last interval.",
        &|l| secs(l.bpf_ns_per_event),
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_events_per_second",
        Gauge,
        "Hooked events per second over the last interval.",
        &|l| l.events_per_s as f64,
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_cpu_ratio",
        Gauge,
        "Share of the machine's CPU capacity the probe's BPF took over the last interval (0..1).",
        &|l| l.bpf_cpu_percent / 100.0,
    );

    out.family(
        "latmon_bpf_cpu_ratio",
        Gauge,
        "Share of the machine's CPU capacity all of latmon's BPF programs took over the last interval (0..1).",
    );
    out.sample(Labels::None, s.bpf_cpu_percent / 100.0);
    out.family(
        "latmon_cost_measured",
        Gauge,
        "1 when BPF run-time statistics are on and the cost metrics mean something.",
    );
    out.sample(Labels::None, f64::from(u8::from(s.cost_measured)));
    out.family("latmon_online_cpus", Gauge, "CPUs the CPU ratios are relative to.");
    out.sample(Labels::None, f64::from(s.online_cpus));
    out.family("latmon_over_budget", Gauge, "1 when the last interval broke overhead_budget.");
    out.sample(Labels::None, f64::from(u8::from(s.over_budget)));
    out.family("latmon_over_budget_intervals", Gauge, "Consecutive intervals over budget so far.");
    out.sample(Labels::None, f64::from(s.over_budget_intervals));
    out.family("latmon_degraded", Gauge, "1 when a probe was detached over budget.");
    out.sample(Labels::None, f64::from(u8::from(s.degraded)));
    out.family("latmon_resident_memory_bytes", Gauge, "latmon's resident set size.");
    out.sample(Labels::None, s.rss_bytes as f64);
    // Only with a certificate: a board without one has no such series (an
    // absent series, not a 0 that reads as "failed").
    if let Some(c) = &s.certificate {
        out.family(
            "latmon_certificate_pass",
            Gauge,
            "1 when the stored latmon certify certificate passed (its p99.9 shift within the goal), else 0.",
        );
        out.sample(Labels::None, f64::from(u8::from(c.verdict == latmon_core::wire::CERT_PASS)));
        out.family(
            "latmon_certificate_shift_p999_seconds",
            Gauge,
            "The certificate's p99.9 wakeup latency shift with latmon attached (may be negative: noise).",
        );
        out.sample(Labels::None, c.shift_p999_ns as f64 / 1e9);
        out.family(
            "latmon_certificate_other_kernel",
            Gauge,
            "1 when the certificate was made on another kernel release than the running one.",
        );
        out.sample(Labels::None, f64::from(u8::from(c.other_kernel())));
    }
    if s.links.iter().any(|l| l.1.is_some()) {
        out.family(
            "latmon_output_dropped_total",
            Counter,
            "Records (frames, lines) the output dropped since start: its link too slow, or down.",
        );
        for (name, st) in &s.links {
            if let Some(st) = st {
                out.sample(Labels::Output(name), st.dropped as f64);
            }
        }
        out.family(
            "latmon_output_errors_total",
            Counter,
            "Damaged or malformed requests the output received since start (Modbus).",
        );
        for (name, st) in &s.links {
            if let Some(st) = st {
                out.sample(Labels::Output(name), st.errors as f64);
            }
        }
    }
    if s.lines().iter().any(|l| l.has_causes) {
        out.family(
            "latmon_probe_alerted_seconds_total",
            Counter,
            "Latency of the probe's alerts summed (records sent or refused), since it started.",
        );
        for l in s.lines().iter().filter(|l| l.has_causes) {
            out.sample(Labels::Line(l), secs(l.causes.total_alerted_ns));
        }
        out.family(
            "latmon_probe_alerted_cause_ratio",
            Gauge,
            "Share (0..1) of the last interval's alerted time spent on each of its largest causes (rank 1 the largest).",
        );
        for l in s.lines().iter().filter(|l| l.has_causes) {
            for (rank, c) in l.causes.causes.iter().take(TOP_CAUSES).enumerate() {
                out.sample(Labels::Cause(l, rank), l.causes.share(c.ns));
            }
        }
    }
    if s.lines().iter().any(|l| l.misses.is_some()) || !s.loops().is_empty() {
        // Per probe line ({probe, kind, attach}: a cycle,auto line sums its
        // loops) and per watched loop ({loop, tid}): sum one or the other.
        out.family(
            "latmon_cycle_misses_total",
            Counter,
            "Cycles done after their deadline (release + deadline): per cycle probe since it started, per watched loop since it was found.",
        );
        for l in s.lines() {
            if let Some(n) = l.misses {
                out.sample(Labels::Line(l), n as f64);
            }
        }
        for x in s.loops() {
            out.sample(Labels::Loop(x), x.misses as f64);
        }
    }
    let loops: [LoopMetric; 3] = [
        ("latmon_cycle_cycles_total", Counter, "Cycles of the watched loop since it was found.", |x| x.cycles as f64),
        (
            "latmon_cycle_overruns_total",
            Counter,
            "Cycles of the watched loop still running at their deadline, since it was found.",
            |x| x.overruns as f64,
        ),
        (
            "latmon_cycle_period_seconds",
            Gauge,
            "The watched loop's period, detected from its releases (0: not yet).",
            |x| secs(x.period_ns),
        ),
    ];
    for (name, kind, help, v) in loops {
        if !s.loops().is_empty() {
            out.family(name, kind, help);
            for x in s.loops() {
                out.sample(Labels::Loop(x), v(x));
            }
        }
    }
    if s.lines().iter().any(|l| l.rules.is_some()) {
        // Every rule of every cycle line, zeros included: rate() needs the
        // series before its first violation.
        out.family("latmon_cycle_rule_violations_total", Counter, "RT sleep rules broken by the watched threads.");
        for l in s.lines() {
            if let Some(r) = l.rules {
                for (word, n) in r.per_rule() {
                    out.sample(Labels::Rule(l, word), n as f64);
                }
            }
        }
    }
    some_lines(out, s, "latmon_cycle_rule_records_lost_total", Counter, "Rule records lost (counted above).", &|l| {
        l.rules.map(|r| r.records_lost as f64)
    });
    some_lines(
        out,
        s,
        "latmon_lock_inversions_total",
        Counter,
        "Lock waits lengthened by a priority inversion, since start.",
        &|l| l.lock.map(|k| k.inversions as f64),
    );
    some_lines(out, s, "latmon_lock_inversion_seconds_total", Counter, "Their inversions' time, summed.", &|l| {
        l.lock.map(|k| secs(k.inversion_ns))
    });
    some_lines(
        out,
        s,
        "latmon_lock_owners_refused_total",
        Counter,
        "Lock owners named but not followed: their waits name no inversion.",
        &|l| l.lock.and_then(|k| k.owners_refused).map(|n| n as f64),
    );
    if s.lines().iter().any(|l| l.has_miss_causes) {
        out.family(
            "latmon_cycle_miss_cause_ratio",
            Gauge,
            "Share (0..1) of the last interval's missed time spent on each of its largest causes (rank 1 the largest).",
        );
        for l in s.lines().iter().filter(|l| l.has_miss_causes) {
            for (rank, c) in l.miss_causes.causes.iter().take(TOP_CAUSES).enumerate() {
                out.sample(Labels::MissCause(l, rank), l.miss_causes.share(c.ns));
            }
        }
    }
    some_lines(
        out,
        s,
        "latmon_probe_threshold_seconds",
        Gauge,
        "The probe's alert threshold: latencies above it count in latmon_probe_alerts_total.",
        &|l| (l.threshold_ns > 0).then(|| secs(l.threshold_ns)),
    );
    some_lines(
        out,
        s,
        "latmon_series_folded",
        Gauge,
        "Series of the family summed into its FAMILY:folded line (over the series limit).",
        &|l| l.folded.map(f64::from),
    );
}

/// A family with one sample per line. Not generic (`dyn`): one copy of
/// it for all the families and both formats (the aarch64 binary's size).
fn lines(
    out: &mut dyn Exposition,
    s: &Snapshot,
    name: &'static str,
    kind: Kind,
    help: &'static str,
    v: &dyn Fn(&Line) -> f64,
) {
    out.family(name, kind, help);
    for l in s.lines() {
        out.sample(Labels::Line(l), v(l));
    }
}

/// A family with a sample for each line `v` has one for, if any has.
fn some_lines(
    out: &mut dyn Exposition,
    s: &Snapshot,
    name: &'static str,
    kind: Kind,
    help: &'static str,
    v: &dyn Fn(&Line) -> Option<f64>,
) {
    if s.lines().iter().all(|l| v(l).is_none()) {
        return;
    }
    out.family(name, kind, help);
    for l in s.lines() {
        if let Some(x) = v(l) {
            out.sample(Labels::Line(l), x);
        }
    }
}
