// SPDX-License-Identifier: MIT
//! Interval summaries: what every sink renders. Pure (no I/O).
//!
//! Probes deliver cumulative histograms; a summary holds, per probe, the
//! interval delta (count, percentiles, buckets) beside the totals since start.

use std::fmt::Write as _;

use serde::Serialize;

use crate::hist::Hist;

/// Static facts about an attached probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeInfo {
    pub name: String,
    /// Family: runq, syscall, kfunc, ...
    pub kind: String,
    /// Mechanism actually used: tp_btf, raw_tp, tracepoint, fentry, kprobe, uprobe.
    pub attach: String,
    /// Design detail worth knowing when reading numbers (e.g. "switch-only").
    pub mode: String,
    /// Which build of the BPF object runs: "co-re" (relocated against the
    /// kernel's BTF or btf_path) or "no-btf" (for kernels without BTF).
    pub btf_mode: String,
}

/// A configured probe that did not attach: what outputs with fixed
/// per-probe addressing (Modbus) need to keep its place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedProbe {
    /// Index in the configured probe list (config order).
    pub position: usize,
    pub name: String,
    /// Family: runq, syscall, kfunc, ...
    pub kind: String,
    /// Why it is not running (the attach error).
    pub why: String,
}

/// One probe's line in an interval summary (the JSON contract's field names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    pub name: String,
    pub kind: String,
    pub attach: String,
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
}

/// A latency above a probe's threshold, as the kernel reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlertRecord {
    /// Probe name (as in `ProbeReport::name`).
    pub probe: String,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cpu: u32,
    pub latency_ns: u64,
    /// CLOCK_MONOTONIC when the slow event ended.
    pub time_ns: u64,
}

/// One interval (the JSON output is one of these per line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IntervalReport {
    pub seq: u64,
    /// CLOCK_MONOTONIC at the end of the interval (the clock BPF stamps use).
    pub time_ns: u64,
    pub interval_ns: u64,
    /// True for the summary flushed at exit (its interval may be short).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub last: bool,
    pub probes: Vec<ProbeReport>,
    /// Alert records that arrived during the interval (bounded per interval
    /// by the kernel's rate limit; the per-probe `alerts` counts are exact).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alert_records: Vec<AlertRecord>,
}

impl ProbeReport {
    /// Build from the cumulative snapshots at the start and end of an interval.
    pub fn new(info: &ProbeInfo, prev: &Hist, cur: &Hist) -> Self {
        let d = cur.delta(prev);
        let p = d.percentiles();
        ProbeReport {
            name: info.name.clone(),
            kind: info.kind.clone(),
            attach: info.attach.clone(),
            count: d.count,
            total_count: cur.count,
            min_ns: d.min_ns,
            max_ns: d.max_ns,
            mean_ns: d.mean_ns(),
            p50_ns: p.p50_ns,
            p90_ns: p.p90_ns,
            p99_ns: p.p99_ns,
            p999_ns: p.p999_ns,
            buckets: d.nonzero_buckets().map(|(lo, hi, c)| [lo, hi, c]).collect(),
            drops: d.drops,
            total_drops: cur.drops,
            alerts: d.alerts,
            total_alerts: cur.alerts,
            alerts_dropped: d.alerts_dropped,
            total_alerts_dropped: cur.alerts_dropped,
        }
    }
}

/// `123ns`, `4.56us`, `7.89ms`, `1.23s` (ASCII only: serial terminals).
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => format!("{:.2}us", v / 1e3),
        1_000_000..=999_999_999 => format!("{:.2}ms", v / 1e6),
        _ => format!("{:.2}s", v / 1e9),
    }
}

const BAR_WIDTH: usize = 40;

/// bcc-style text: a power-of-two histogram (the log-linear sub-buckets
/// folded per power of two for a readable screen) and percentile lines.
pub fn render_text(r: &IntervalReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "--- seq {}{}  interval {}",
        r.seq,
        if r.last { " (final)" } else { "" },
        fmt_ns(r.interval_ns)
    );
    for p in &r.probes {
        let _ = write!(
            s,
            "{} [{} via {}]  count {}  total {}  drops {}/{}  alerts {}/{}",
            p.name, p.kind, p.attach, p.count, p.total_count, p.drops, p.total_drops, p.alerts, p.total_alerts
        );
        if p.total_alerts_dropped > 0 {
            let _ = write!(s, " (records dropped {}/{})", p.alerts_dropped, p.total_alerts_dropped);
        }
        s.push('\n');
        if p.count == 0 {
            let _ = writeln!(s, "  (no events)");
            continue;
        }
        // Fold into power-of-two rows [2^k, 2^(k+1)).
        let mut rows: Vec<(u64, u64, u64)> = Vec::new();
        for &[lo, _hi, c] in &p.buckets {
            let k = if lo == 0 { 0 } else { 63 - lo.leading_zeros() };
            let row_lo = if lo == 0 { 0 } else { 1u64 << k };
            let row_hi = if lo == 0 { 1 } else { (1u64 << k).saturating_mul(2).saturating_sub(1) };
            match rows.last_mut() {
                Some(last) if last.0 == row_lo => last.2 += c,
                _ => rows.push((row_lo, row_hi, c)),
            }
        }
        let peak = rows.iter().map(|r| r.2).max().unwrap_or(1).max(1);
        let _ = writeln!(s, "  {:>26} : {:<9} distribution", "nsecs", "count");
        for (lo, hi, c) in rows {
            let stars = ((c as u128 * BAR_WIDTH as u128 + peak as u128 - 1) / peak as u128) as usize;
            let _ = writeln!(
                s,
                "  {:>12} -> {:<11} : {:<9} |{:<width$}|",
                lo,
                hi,
                c,
                "*".repeat(stars.min(BAR_WIDTH)),
                width = BAR_WIDTH
            );
        }
        let _ = writeln!(
            s,
            "  min {}  mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            fmt_ns(p.min_ns),
            fmt_ns(p.mean_ns),
            fmt_ns(p.p50_ns),
            fmt_ns(p.p90_ns),
            fmt_ns(p.p99_ns),
            fmt_ns(p.p999_ns),
            fmt_ns(p.max_ns)
        );
    }
    if !r.alert_records.is_empty() {
        let _ = writeln!(s, "alerts: {} above threshold", r.alert_records.len());
        for a in &r.alert_records {
            let _ = writeln!(
                s,
                "  ALERT {}  latency {}  pid {} tid {} ({})  cpu {}  at {}.{:09}s",
                a.probe,
                fmt_ns(a.latency_ns),
                a.pid,
                a.tid,
                a.comm,
                a.cpu,
                a.time_ns / 1_000_000_000,
                a.time_ns % 1_000_000_000
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ProbeInfo {
        ProbeInfo {
            name: "runq".into(),
            kind: "runq".into(),
            attach: "tp_btf".into(),
            mode: "switch-only".into(),
            btf_mode: "co-re".into(),
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
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for k in ["seq", "time_ns", "interval_ns", "probes"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        let p = &v["probes"][0];
        for k in [
            "name", "kind", "attach", "count", "total_count", "min_ns", "max_ns", "mean_ns", "p50_ns", "p90_ns",
            "p99_ns", "p999_ns", "buckets", "drops", "alerts",
        ] {
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
        };
        let t = render_text(&r);
        assert!(t.contains("(final)"));
        assert!(t.contains("2048 -> 4095"), "{t}");
        assert!(t.contains("|****************************************|"), "{t}");
        assert!(t.contains("p99.9"));
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_500), "1.50us");
        assert_eq!(fmt_ns(2_000_000_000), "2.00s");
        assert!(!t.contains("ALERT"), "no alert section without records: {t}");
    }

    #[test]
    fn text_shows_alert_records_and_dropped_counts() {
        let (prev, mut cur) = sample();
        cur.alerts = 5;
        cur.alerts_dropped = 2;
        let rec = AlertRecord {
            probe: "ctrl".into(),
            pid: 10,
            tid: 11,
            comm: "ctrl_loop".into(),
            cpu: 1,
            latency_ns: 2_100_000,
            time_ns: 12_000_000_345,
        };
        let r = IntervalReport {
            seq: 2,
            time_ns: 0,
            interval_ns: 1_000_000_000,
            last: false,
            probes: vec![ProbeReport::new(&info(), &prev, &cur)],
            alert_records: vec![rec.clone(), rec],
        };
        let t = render_text(&r);
        assert!(t.contains("alerts 5/5 (records dropped 2/2)"), "{t}");
        assert!(t.contains("alerts: 2 above threshold"), "{t}");
        assert!(
            t.contains("  ALERT ctrl  latency 2.10ms  pid 10 tid 11 (ctrl_loop)  cpu 1  at 12.000000345s"),
            "{t}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["alert_records"][0]["latency_ns"], 2_100_000);
        assert_eq!(v["probes"][0]["alerts_dropped"], 2);
    }
}
