// SPDX-License-Identifier: MIT
//! The Prometheus output's unit tests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use latmon_core::causes::{CauseId, CauseSummary};
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::{BtfMode, Family, Mechanism};
use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};
use prost::Message as _;

use super::expose::*;
use super::hist::{self as promhist, SPAN};
use super::http::*;
use super::model::*;
use super::*;
use latmon_core::session::Session;

#[test]
fn addresses() {
    assert_eq!(parse_addr(":9477").unwrap(), "127.0.0.1:9477".parse().unwrap());
    assert_eq!(parse_addr("localhost:1").unwrap(), "127.0.0.1:1".parse().unwrap());
    assert_eq!(parse_addr("0.0.0.0:9477").unwrap(), "0.0.0.0:9477".parse().unwrap());
    assert_eq!(parse_addr("[::1]:9477").unwrap(), "[::1]:9477".parse().unwrap());
    for bad in ["", "9477", "host:9477", "1.2.3.4:x", "1.2.3.4:70000"] {
        assert!(parse_addr(bad).is_err(), "{bad}");
    }
}

#[test]
fn histogram_buckets_are_cumulative_and_exact() {
    let mut h = Hist::default();
    for v in [100u64, 255, 256, 1_000, 1_023, 1_024, 5_000_000, 100_000_000_000] {
        h.record(v);
    }
    let info = ProbeInfo {
        name: "a\"b".into(),
        kind: Family::Runq,
        attach: Mechanism::TpBtf,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 1,
        start_ns: 0,
        interval_ns: 1,
        probes: vec![info.clone()],
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let report = IntervalReport {
        seq: 3,
        time_ns: 2_000_000_000,
        interval_ns: 1_000_000_000,
        probes: vec![ProbeReport::new(&info, &Hist::default(), &h)],
        ..Default::default()
    };
    let totals = [h];
    let mut s = String::new();
    render(&mut s, &Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] });
    let bucket = |le: &str| -> u64 {
        let key =
            format!("latmon_latency_seconds_bucket{{probe=\"a\\\"b\",kind=\"runq\",attach=\"tp_btf\",le=\"{le}\"}} ");
        let line = s.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("{key} in {s}"));
        line[key.len()..].parse().unwrap()
    };
    assert_eq!(bucket("0.000000256"), 2, "100 and 255 ns; 256 ns is in the next bound");
    assert_eq!(bucket("0.000001024"), 5);
    assert_eq!(bucket("0.000002048"), 6);
    assert_eq!(bucket("0.008388608"), 7);
    assert_eq!(bucket("68.719476736"), 7);
    assert_eq!(bucket("+Inf"), 8);
    let les = s.lines().filter(|l| l.starts_with("latmon_latency_seconds_bucket")).count();
    assert_eq!(les, LE_MAX_LOG2 - LE_MIN_LOG2 + 2);
    assert!(s.contains("latmon_latency_seconds_count{probe=\"a\\\"b\",kind=\"runq\",attach=\"tp_btf\"} 8"));
    assert!(s.contains("latmon_summaries_total 3"));
}

/// The protobuf exposition of `t`'s family `name`, decoded.
fn protobuf_family(t: &Tick<'_>, name: &str) -> Option<pb::MetricFamily> {
    let mut pb_out = Vec::new();
    let mut counts = [0u64; SPAN];
    render_protobuf(&mut pb_out, &snapshot(t, SERIES_PER_FAMILY), &promhist::Map::new(), &mut counts);
    let mut buf = &pb_out[..];
    let mut found = None;
    while !buf.is_empty() {
        let f = pb::MetricFamily::decode_length_delimited(&mut buf).unwrap();
        if f.name.as_deref() == Some(name) {
            found = Some(f);
        }
    }
    found
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

/// A session of `names` (kind from the name's first word) with `v`
/// ns recorded `k + 1` times in the k-th probe.
fn tick_of(names: &[&str], v: u64) -> (Session, IntervalReport, Vec<Hist>) {
    let probes: Vec<ProbeInfo> = names.iter().map(|n| info(n, n.split(':').next().unwrap())).collect();
    let totals: Vec<Hist> = (0..names.len())
        .map(|k| {
            let mut h = Hist::default();
            for _ in 0..=k {
                h.record(v);
            }
            h.drops = 1;
            h
        })
        .collect();
    let report = IntervalReport {
        seq: 1,
        probes: probes.iter().zip(&totals).map(|(p, h)| ProbeReport::new(p, &Hist::default(), h)).collect(),
        ..Default::default()
    };
    let session = Session {
        board: "b".into(),
        kernel: "k".into(),
        boot_id: 1,
        start_ns: 0,
        interval_ns: 1,
        probes,
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    (session, report, totals)
}

#[test]
fn alerted_time_and_its_top_causes_per_line() {
    use latmon_core::causes::{CauseId, TopCause};
    let (session, mut report, totals) = tick_of(&["timer", "runq", "syscall"], 1_000);
    let cause = |id, name: &str, ns| TopCause { id, name: name.into(), ns };
    report.probes[0].alert_causes = Some(CauseSummary {
        alerts: 4,
        alerted_ns: 1_000_000,
        causes: vec![
            cause(CauseId::Task { pid: 4242 }, "hog\"x", 900_000),
            cause(CauseId::Irq { irq: 36 }, "virtio1", 60_000),
            cause(CauseId::Softirq { vector: 3 }, "", 30_000),
            cause(CauseId::Other, "", 10_000),
        ],
        total_alerts: 9,
        total_alerted_ns: 2_500_000_000,
        ..Default::default()
    });
    // A probe with a tally but no alert this interval: its counter only.
    report.probes[1].alert_causes = Some(CauseSummary { total_alerted_ns: 7, ..Default::default() });
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
    let mut text = String::new();
    render(&mut text, &t);
    let l = "probe=\"timer\",kind=\"timer\",attach=\"tp_btf\"";
    for want in [
        format!("latmon_probe_alerted_seconds_total{{{l}}} 2.5\n"),
        "latmon_probe_alerted_seconds_total{probe=\"runq\",kind=\"runq\",attach=\"tp_btf\"} 0.000000007\n".into(),
        format!("latmon_probe_alerted_cause_ratio{{{l},rank=\"1\",cause_kind=\"task\",cause=\"hog\\\"x\"}} 0.9\n"),
        format!(
            "latmon_probe_alerted_cause_ratio{{{l},rank=\"2\",cause_kind=\"irq\",cause=\"irq 36 virtio1\"}} 0.06\n"
        ),
        format!(
            "latmon_probe_alerted_cause_ratio{{{l},rank=\"3\",cause_kind=\"softirq\",cause=\"softirq NET_RX\"}} 0.03\n"
        ),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    assert_eq!(text.matches("latmon_probe_alerted_cause_ratio{").count(), 3, "the top 3 only: {text}");
    assert!(!text.contains("latmon_probe_alerted_seconds_total{probe=\"syscall\""), "no tally, no line: {text}");
    // Protobuf: the same samples, labels included.
    let f = protobuf_family(&t, "latmon_probe_alerted_cause_ratio").expect("the ratio family in protobuf");
    assert_eq!(f.metric.len(), 3);
    let m = &f.metric[0];
    let label = |k: &str| m.label.iter().find(|p| p.name.as_deref() == Some(k)).and_then(|p| p.value.clone());
    assert_eq!((label("rank").as_deref(), label("cause").as_deref()), (Some("1"), Some("hog\"x")));
    assert_eq!(m.gauge.as_ref().and_then(|g| g.value), Some(0.9));
}

/// A probe's alert threshold is a gauge in seconds, labelled (escaped)
/// as the probe's other metrics; probes without one have no sample, and
/// without any the family is absent.
#[test]
fn the_threshold_is_a_gauge_of_the_probes_with_one() {
    let (session, mut report, totals) = tick_of(&["timer", "runq:a\"b", "syscall"], 1_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
    let mut text = String::new();
    render(&mut text, &t);
    assert!(!text.contains("latmon_probe_threshold_seconds"), "{text}");
    report.probes[0].threshold_ns = 500_000;
    report.probes[1].threshold_ns = 2_000_000;
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
    text.clear();
    render(&mut text, &t);
    for want in [
        "latmon_probe_threshold_seconds{probe=\"timer\",kind=\"timer\",attach=\"tp_btf\"} 0.0005\n",
        "latmon_probe_threshold_seconds{probe=\"runq:a\\\"b\",kind=\"runq\",attach=\"tp_btf\"} 0.002\n",
        "# TYPE latmon_probe_threshold_seconds gauge\n",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    assert_eq!(text.matches("latmon_probe_threshold_seconds{").count(), 2, "{text}");
}

/// The stored certificate (Hello revision 11's) as gauges, only when
/// there is one: a board without has no such series rather than a 0.
#[test]
fn the_certificate_is_gauges_only_with_one() {
    let (mut session, report, totals) = tick_of(&["timer"], 1_000);
    let mut text = String::new();
    render(&mut text, &Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] });
    assert!(!text.contains("latmon_certificate"), "{text}");
    session.certificate = Some(latmon_core::wire::WireCertificate {
        verdict: latmon_core::wire::CERT_FAIL,
        flags: latmon_core::wire::CERT_OTHER_KERNEL,
        shift_p999_ns: -1_500,
        ..Default::default()
    });
    text.clear();
    render(&mut text, &Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] });
    for want in [
        "\nlatmon_certificate_pass 0\n",
        "\nlatmon_certificate_shift_p999_seconds -0.0000015\n",
        "\nlatmon_certificate_other_kernel 1\n",
        "# TYPE latmon_certificate_pass gauge\n",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
}

/// A cycle line: its misses since start as a counter and the interval's
/// missed time by cause (labels escaped), in text and protobuf alike;
/// other lines have neither.
#[test]
fn a_cycle_lines_misses_and_the_causes_of_its_missed_time() {
    use latmon_core::causes::TopCause;
    use latmon_core::cycle::CycleCounts;
    let (session, mut report, totals) = tick_of(&["cycle", "timer"], 1_000);
    ProbeExtra::cycle_in(&mut report.probes[0].extra).counts =
        CycleCounts { misses: 2, total_misses: 17, ..Default::default() };
    let mut miss = CauseSummary::default();
    miss.begin_misses();
    miss.add_miss(1_000_000, &[]);
    miss.causes = vec![
        TopCause { id: CauseId::Running, name: String::new(), ns: 700_000 },
        TopCause { id: CauseId::Task { pid: 9 }, name: "lo\\g\"er".into(), ns: 200_000 },
        TopCause { id: CauseId::Blocked { on: 1 }, name: "fdatasync".into(), ns: 50_000 },
        TopCause { id: CauseId::Other, name: String::new(), ns: 50_000 },
    ];
    ProbeExtra::cycle_in(&mut report.probes[0].extra).miss_causes = miss;
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
    let mut text = String::new();
    render(&mut text, &t);
    let l = "probe=\"cycle\",kind=\"cycle\",attach=\"tp_btf\"";
    for want in [
        "# TYPE latmon_cycle_misses_total counter\n".to_string(),
        format!("latmon_cycle_misses_total{{{l}}} 17\n"),
        "# TYPE latmon_cycle_miss_cause_ratio gauge\n".to_string(),
        format!("latmon_cycle_miss_cause_ratio{{{l},rank=\"1\",cause_kind=\"running\",cause=\"running\"}} 0.7\n"),
        format!("latmon_cycle_miss_cause_ratio{{{l},rank=\"2\",cause_kind=\"task\",cause=\"lo\\\\g\\\"er\"}} 0.2\n"),
        format!(
            "latmon_cycle_miss_cause_ratio{{{l},rank=\"3\",cause_kind=\"blocked\",cause=\"blocked io fdatasync\"}} 0.05\n"
        ),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    assert_eq!(text.matches("latmon_cycle_miss_cause_ratio{").count(), 3, "the top 3 only: {text}");
    assert!(!text.contains("latmon_cycle_misses_total{probe=\"timer\""), "not a cycle probe: {text}");
    assert!(!text.contains("latmon_probe_alerted_cause_ratio"), "missed time is not alerted time: {text}");
    let mut pb_out = Vec::new();
    let map = promhist::Map::new();
    let mut counts = [0u64; SPAN];
    render_protobuf(&mut pb_out, &snapshot(&t, SERIES_PER_FAMILY), &map, &mut counts);
    let mut buf = &pb_out[..];
    let (mut misses, mut ratio) = (None, None);
    while !buf.is_empty() {
        let f = pb::MetricFamily::decode_length_delimited(&mut buf).unwrap();
        match f.name.as_deref() {
            Some("latmon_cycle_misses_total") => misses = Some(f),
            Some("latmon_cycle_miss_cause_ratio") => ratio = Some(f),
            _ => {}
        }
    }
    let misses = misses.expect("the misses family in protobuf");
    assert_eq!(misses.r#type, Some(pb::MetricType::Counter as i32));
    assert_eq!(misses.metric[0].counter.as_ref().and_then(|c| c.value), Some(17.0));
    let ratio = ratio.expect("the ratio family in protobuf");
    let m = &ratio.metric[1];
    let label = |k: &str| m.label.iter().find(|p| p.name.as_deref() == Some(k)).and_then(|p| p.value.clone());
    assert_eq!((label("cause_kind").as_deref(), label("cause").as_deref()), (Some("task"), Some("lo\\g\"er")));
}

/// Watched loops (`cycle,auto`): their misses, cycles, overruns and
/// period, labelled by the loop's name (escaped) and tid, beside the
/// cycle line's own sample; a loop not watched, or with no cycle yet,
/// has none; in text and protobuf alike.
#[test]
fn watched_loops_have_their_own_cycle_counters() {
    use latmon_core::anatomy::Policy;
    use latmon_core::loops::{Loop, LoopClass, LoopCycles, PeriodSource};
    let (session, mut report, totals) = tick_of(&["cycle"], 1_000);
    ProbeExtra::cycle_in(&mut report.probes[0].extra).counts.total_misses = 9;
    let lp = |tid: u32, comm: &str, watched: bool, cycle: Option<LoopCycles>| Loop {
        tid,
        pid: 40,
        comm: comm.into(),
        policy: Policy::Fifo,
        prio: 50,
        rt: true,
        class: LoopClass::Periodic,
        period_ns: 1_000_000,
        period_source: PeriodSource::AbsTimer,
        jitter_ns: 0,
        watched,
        cycle,
    };
    let c = LoopCycles {
        period_ns: 1_000_000,
        cycles: 1000,
        total_cycles: 5000,
        misses: 1,
        total_misses: 7,
        total_overruns: 2,
        total_rules: 0,
    };
    report.loops =
        vec![lp(41, "ctrl\"x", true, Some(c)), lp(42, "waiting", true, None), lp(43, "unwatched", false, Some(c))];
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] };
    let mut text = String::new();
    render(&mut text, &t);
    let l = "loop=\"ctrl\\\"x\",tid=\"41\"";
    for want in [
        "latmon_cycle_misses_total{probe=\"cycle\",kind=\"cycle\",attach=\"tp_btf\"} 9\n".to_string(),
        format!("latmon_cycle_misses_total{{{l}}} 7\n"),
        format!("latmon_cycle_cycles_total{{{l}}} 5000\n"),
        format!("latmon_cycle_overruns_total{{{l}}} 2\n"),
        "# TYPE latmon_cycle_period_seconds gauge\n".to_string(),
        format!("latmon_cycle_period_seconds{{{l}}} 0.001\n"),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    assert!(!text.contains("tid=\"42\"") && !text.contains("tid=\"43\""), "{text}");
    let misses = protobuf_family(&t, "latmon_cycle_misses_total").expect("the misses family in protobuf");
    let m = &misses.metric[1];
    let label = |k: &str| m.label.iter().find(|p| p.name.as_deref() == Some(k)).and_then(|p| p.value.clone());
    assert_eq!((label("loop").as_deref(), label("tid").as_deref()), (Some("ctrl\"x"), Some("41")));
    assert_eq!(m.counter.as_ref().and_then(|c| c.value), Some(7.0));
}

/// A cycle line: its RT sleep rules broken since start, one series per
/// rule with zeros (so rate() has a series before the first violation),
/// the probe label escaped, and its rule records lost; in text and
/// protobuf alike; other lines have none.
#[test]
fn a_cycle_lines_rule_counters_name_every_rule() {
    use latmon_core::cycle::{CycleCounts, RuleCounts};
    let (session, mut report, totals) = tick_of(&["cycle:a\"b", "timer"], 1_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
    let mut text = String::new();
    render(&mut text, &t);
    assert!(!text.contains("latmon_cycle_rule"), "no cycle counts, no rule families: {text}");
    ProbeExtra::cycle_in(&mut report.probes[0].extra).counts = CycleCounts {
        rule_counts: RuleCounts([0, 1, 2, 0]),
        total_rule_counts: RuleCounts([0, 150, 100, 49]),
        total_rule_records_lost: 3,
        ..Default::default()
    };
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
    text.clear();
    render(&mut text, &t);
    let l = "probe=\"cycle:a\\\"b\",kind=\"cycle\",attach=\"tp_btf\"";
    for want in [
        "# TYPE latmon_cycle_rule_violations_total counter\n".to_string(),
        format!("latmon_cycle_rule_violations_total{{{l},rule=\"woken_by_lower\"}} 0\n"),
        format!("latmon_cycle_rule_violations_total{{{l},rule=\"sleep_other\"}} 150\n"),
        format!("latmon_cycle_rule_violations_total{{{l},rule=\"sleep_relative\"}} 100\n"),
        format!("latmon_cycle_rule_violations_total{{{l},rule=\"sleep_realtime_clock\"}} 49\n"),
        "# TYPE latmon_cycle_rule_records_lost_total counter\n".to_string(),
        format!("latmon_cycle_rule_records_lost_total{{{l}}} 3\n"),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    assert_eq!(text.matches("latmon_cycle_rule_violations_total{").count(), 4, "4 rules, 1 line: {text}");
    assert!(!text.contains("rule_violations_total{probe=\"timer\""), "not a cycle probe: {text}");
    let mut pb_out = Vec::new();
    let mut counts = [0u64; SPAN];
    render_protobuf(&mut pb_out, &snapshot(&t, SERIES_PER_FAMILY), &promhist::Map::new(), &mut counts);
    let mut buf = &pb_out[..];
    let mut got = Vec::new();
    while !buf.is_empty() {
        let f = pb::MetricFamily::decode_length_delimited(&mut buf).unwrap();
        if f.name.as_deref() != Some("latmon_cycle_rule_violations_total") {
            continue;
        }
        assert_eq!(f.r#type, Some(pb::MetricType::Counter as i32));
        for m in &f.metric {
            let label = |k: &str| m.label.iter().find(|p| p.name.as_deref() == Some(k)).and_then(|p| p.value.clone());
            let v = m.counter.as_ref().and_then(|c| c.value);
            got.push((label("probe").unwrap_or_default(), label("rule").unwrap_or_default(), v));
        }
    }
    let want: Vec<_> = [("woken_by_lower", 0.0), ("sleep_other", 150.0), ("sleep_relative", 100.0)]
        .into_iter()
        .chain([("sleep_realtime_clock", 49.0)])
        .map(|(r, v)| ("cycle:a\"b".to_string(), r.to_string(), Some(v)))
        .collect();
    assert_eq!(got, want, "protobuf: the probe label unescaped, every rule");
}

/// Lock lines: inversions since start as counters, in count and time; the
/// family line alone carries the owners it could not follow; other lines
/// have none of them, and without a lock probe the families are absent.
#[test]
fn lock_lines_count_inversions_and_the_family_its_refused_owners() {
    use latmon_core::lock::LockCounts;
    let (session, mut report, totals) = tick_of(&["lock", "lock:ctrl\"m", "timer"], 1_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
    let mut text = String::new();
    render(&mut text, &t);
    assert!(!text.contains("latmon_lock_"), "no lock counts, no lock families: {text}");
    let counts = |inv, ns| LockCounts { total_inversions: inv, total_inversion_ns: ns, ..Default::default() };
    report.probes[0].extra =
        Some(ProbeExtra::Lock(LockCounts { total_owners_refused: Some(4), ..counts(99, 150_000_000) }));
    report.probes[1].extra = Some(ProbeExtra::Lock(counts(97, 148_000_000)));
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
    text.clear();
    render(&mut text, &t);
    let (f, s) =
        ("probe=\"lock\",kind=\"lock\",attach=\"tp_btf\"", "probe=\"lock:ctrl\\\"m\",kind=\"lock\",attach=\"tp_btf\"");
    for want in [
        "# TYPE latmon_lock_inversions_total counter\n".to_string(),
        format!("latmon_lock_inversions_total{{{f}}} 99\n"),
        format!("latmon_lock_inversions_total{{{s}}} 97\n"),
        format!("latmon_lock_inversion_seconds_total{{{f}}} 0.15\n"),
        format!("latmon_lock_inversion_seconds_total{{{s}}} 0.148\n"),
        format!("latmon_lock_owners_refused_total{{{f}}} 4\n"),
    ] {
        assert!(text.contains(&want), "{want} in {text}");
    }
    assert_eq!(text.matches("latmon_lock_owners_refused_total{").count(), 1, "the family line only: {text}");
    assert!(!text.contains("latmon_lock_inversions_total{probe=\"timer\""), "not a lock probe: {text}");
}

/// A task renaming itself every interval (or a fork storm) cannot
/// grow the fleet's series: task labels carry no pid, and past
/// TASK_NAMES_MAX names per line the rest read `other tasks`.
#[test]
fn task_names_in_cause_labels_are_bounded_whatever_tasks_call_themselves() {
    use latmon_core::causes::TopCause;
    let (session, mut report, totals) = tick_of(&["timer"], 1_000);
    let (mut snap, mut g) = (Snapshot::default(), Grouping::default());
    let mut labels = std::collections::BTreeSet::new();
    for k in 0..100u32 {
        let task = |pid, name: String, ns| TopCause { id: CauseId::Task { pid }, name, ns };
        report.probes[0].alert_causes = Some(CauseSummary {
            alerts: 1,
            alerted_ns: 100,
            causes: vec![task(1000 + k, format!("ren{k}"), 90), task(7, "ctrl".into(), 10)],
            ..Default::default()
        });
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] };
        snap.fill(&t, SERIES_PER_FAMILY, &mut g);
        let mut text = String::new();
        render_text(&mut text, &snap);
        for l in text.lines().filter(|l| l.starts_with("latmon_probe_alerted_cause_ratio{")) {
            labels.insert(l.split("cause=\"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_string());
        }
    }
    let want: std::collections::BTreeSet<String> =
        (0..7).map(|k| format!("ren{k}")).chain(["ctrl".into(), OTHER_TASKS.into()]).collect();
    assert_eq!(labels, want, "the first {TASK_NAMES_MAX} names, then `other tasks`");
}

/// At the connection limit a newcomer displaces the oldest connection
/// still sending its request head, never one being answered.
#[test]
fn a_newcomer_displaces_the_oldest_connection_still_reading() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    assert_eq!(displaced([(at(5), false), (at(1), true), (at(2), false)].into_iter()), Some(2));
    assert_eq!(displaced([(at(5), true), (at(1), true)].into_iter()), None, "answers are never cut");
    assert_eq!(displaced(std::iter::empty()), None);
}

#[test]
fn accept_header_negotiation() {
    // What Prometheus 2.42 sends with --enable-feature=native-histograms.
    let prom = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    assert_eq!(negotiate(Some(prom)), Format::Protobuf);
    // Without it (and everyone else).
    assert_eq!(negotiate(Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")), Format::Text);
    assert_eq!(negotiate(None), Format::Text);
    assert_eq!(negotiate(Some("text/plain")), Format::Text);
    assert_eq!(negotiate(Some("*/*")), Format::Text);
    // Protobuf only when it is the delimited MetricFamily stream, q > 0,
    // and not below the text types.
    assert_eq!(
        negotiate(Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text")),
        Format::Text
    );
    assert_eq!(negotiate(Some("application/vnd.google.protobuf;encoding=delimited")), Format::Text);
    assert_eq!(
        negotiate(Some(
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; q=0"
        )),
        Format::Text
    );
    assert_eq!(negotiate(Some("text/plain;q=0.9, application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5")), Format::Text);
    assert_eq!(
        negotiate(Some(
            "Application/Vnd.Google.Protobuf; proto=\"io.prometheus.client.MetricFamily\"; encoding=delimited"
        )),
        Format::Protobuf
    );
    assert_eq!(header("GET /metrics HTTP/1.1\r\nHost: x\r\naccept: a/b\r\n", "Accept"), Some("a/b"));
    assert_eq!(header("GET /metrics HTTP/1.1\r\nHost: x\r\n", "Accept"), None);
}

#[test]
fn sink_options() {
    assert_eq!(parse_word(":9477").unwrap().1, SERIES_PER_FAMILY);
    assert_eq!(parse_word(":9477,series=4").unwrap().1, 4);
    assert_eq!(parse_word(":9477,series=0").unwrap().1, 0);
    for bad in [":9477,series=", ":9477,series=513", ":9477,series=-1", ":9477,x=1", ":9477,"] {
        let e = parse_word(bad).unwrap_err();
        assert!(e.contains("series=N"), "{bad}: {e}");
    }
}

#[test]
fn a_family_past_its_series_limit_folds_the_rest_into_one_counted_line() {
    // The family "syscall" with 6 series, a probe of another kind with a
    // colon in its name, and a probe after the series.
    let names = [
        "syscall",
        "syscall:read",
        "runq:x",
        "syscall:write",
        "syscall:a",
        "syscall:b",
        "syscall:c",
        "syscall:d",
        "runq",
    ];
    let (session, report, totals) = tick_of(&names, 5_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0, 0, 0, 0, 0, 0, 0] };
    let snap = snapshot(&t, 3);
    let shown: Vec<&str> = snap.lines().iter().map(|l| l.probe.as_str()).collect();
    assert_eq!(shown, ["syscall", "syscall:read", "runq:x", "syscall:write", "syscall:a", "syscall:folded", "runq"]);
    let folded = &snap.lines()[5];
    // syscall:b, :c, :d are probes 5, 6, 7: 6 + 7 + 8 events.
    assert_eq!((folded.hist.count, folded.hist.drops, folded.kind.as_str()), (21, 3, "syscall"));
    assert_eq!(folded.hist.slots.iter().sum::<u64>(), 21);
    assert_eq!(snap.lines()[0].folded, Some(3));
    assert!(snap.lines()[1..].iter().all(|l| l.folded.is_none()));
    let mut text = String::new();
    render_text(&mut text, &snap);
    assert!(text.contains("latmon_series_folded{probe=\"syscall\",kind=\"syscall\",attach=\"tp_btf\"} 3"), "{text}");
    assert!(
        text.contains("latmon_latency_seconds_count{probe=\"syscall:folded\",kind=\"syscall\",attach=\"tp_btf\"} 21")
    );
    assert!(text.contains("latmon_probe_drops_total{probe=\"syscall:folded\",kind=\"syscall\",attach=\"tp_btf\"} 3"));
    // The bound: 128 series of one family show as limit + 2 lines.
    let many: Vec<String> =
        std::iter::once("syscall".to_string()).chain((0..127).map(|k| format!("syscall:s{k}"))).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let (session, report, totals) = tick_of(&refs, 1_000);
    let errs = vec![0u64; refs.len()];
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &errs };
    let snap = snapshot(&t, SERIES_PER_FAMILY);
    assert_eq!(snap.lines().len(), SERIES_PER_FAMILY as usize + 2);
    assert_eq!(snap.lines()[0].folded, Some(127 - SERIES_PER_FAMILY));
    let all: u64 = totals[1..].iter().map(|h| h.count).sum();
    assert_eq!(snap.lines()[1..].iter().map(|l| l.hist.count).sum::<u64>(), all, "nothing lost in the fold");
    // Under the limit nothing is folded; a family says so (0).
    let (session, report, totals) = tick_of(&["syscall", "syscall:read"], 1_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
    let mut text = String::new();
    render(&mut text, &t);
    assert!(text.contains("latmon_series_folded{probe=\"syscall\",kind=\"syscall\",attach=\"tp_btf\"} 0"), "{text}");
}

#[test]
fn the_snapshot_is_reused_without_allocating_new_lines() {
    let (session, report, totals) = tick_of(&["runq", "syscall", "syscall:read"], 1_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
    let (mut snap, mut g) = (Snapshot::default(), Grouping::default());
    snap.fill(&t, 16, &mut g);
    let cap = (snap.lines.capacity(), snap.lines[2].probe.capacity());
    snap.fill(&t, 16, &mut g);
    assert_eq!((snap.lines.capacity(), snap.lines[2].probe.capacity()), cap);
    assert_eq!(snap.lines().len(), 3);
}

#[test]
fn protobuf_has_the_same_metrics_with_native_and_classic_buckets() {
    let mut h = Hist::default();
    for v in [0u64, 3, 100, 1_000, 1_024, 5_000_000, 100_000_000_000] {
        h.record(v);
    }
    let (session, mut report, _) = tick_of(&["runq"], 1);
    report.agent.degraded = true;
    let totals = [h.clone()];
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[2] };
    let snap = snapshot(&t, SERIES_PER_FAMILY);
    let mut text = String::new();
    render_text(&mut text, &snap);
    let (map, mut counts) = (promhist::Map::new(), Box::new([0u64; SPAN]));
    let mut buf = Vec::new();
    render_protobuf(&mut buf, &snap, &map, &mut counts);
    let mut rd = &buf[..];
    let mut fams = Vec::new();
    while !rd.is_empty() {
        fams.push(pb::MetricFamily::decode_length_delimited(&mut rd).expect("a delimited MetricFamily"));
    }
    // The same families, in the same order, as the text's TYPE lines.
    let text_names: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
    let pb_names: Vec<&str> = fams.iter().map(|f| f.name.as_deref().unwrap()).collect();
    assert_eq!(pb_names, text_names);
    let fam = |n: &str| fams.iter().find(|f| f.name.as_deref() == Some(n)).unwrap();
    assert_eq!(fam("latmon_degraded").metric[0].gauge.as_ref().unwrap().value, Some(1.0));
    let re = &fam("latmon_probe_read_errors_total");
    assert_eq!(re.r#type, Some(pb::MetricType::Counter as i32));
    assert_eq!(re.metric[0].counter.as_ref().unwrap().value, Some(2.0));
    let labels: Vec<(String, String)> =
        re.metric[0].label.iter().map(|p| (p.name.clone().unwrap(), p.value.clone().unwrap())).collect();
    assert_eq!(
        labels,
        [("probe".into(), "runq".into()), ("kind".into(), "runq".into()), ("attach".into(), "tp_btf".into())]
    );
    let hist = fam("latmon_latency_seconds").metric[0].histogram.clone().unwrap();
    assert_eq!((hist.sample_count, hist.schema, hist.zero_count), (Some(7), Some(3), Some(1)));
    assert!(hist.zero_threshold.unwrap() > 0.0 && hist.zero_threshold.unwrap() < 1e-9);
    // Classic buckets as in the text (without +Inf, which is implied).
    assert_eq!(hist.bucket.len(), LE_MAX_LOG2 - LE_MIN_LOG2 + 1);
    for b in &hist.bucket {
        let le = format!("le=\"{}\"}} {}", b.upper_bound.unwrap(), b.cumulative_count.unwrap());
        assert!(
            text.lines().any(|l| l.starts_with("latmon_latency_seconds_bucket{probe=\"runq\"") && l.ends_with(&le)),
            "{le}"
        );
    }
    // Native buckets: decode spans and deltas back into counts.
    let mut got = vec![];
    let (mut idx, mut count) = (0i32, 0i64);
    let mut d = hist.positive_delta.iter();
    for (k, s) in hist.positive_span.iter().enumerate() {
        idx += s.offset.unwrap() + if k == 0 { 0 } else { 1 };
        for j in 0..s.length.unwrap() {
            count += d.next().unwrap();
            got.push((idx + j as i32, count as u64));
        }
        idx += s.length.unwrap() as i32 - 1;
    }
    assert!(d.next().is_none());
    counts.fill(0);
    assert_eq!(map.fill(&h, &mut counts), 1);
    let want: Vec<(i32, u64)> =
        (0..SPAN).filter(|&k| counts[k] > 0).map(|k| (k as i32 + promhist::INDEX_MIN, counts[k])).collect();
    assert_eq!(want.iter().map(|w| w.1).sum::<u64>(), 6, "every non-zero event in a native bucket");
    assert_eq!(got, want);
}

/// A sink that reports link stats (as a queue-based output does).
struct Reporting(LinkStats);

impl Sink for Reporting {
    fn name(&self) -> &str {
        "serial:/dev/ttyS1@115200"
    }
    fn emit(&mut self, _: &Tick<'_>) {}
    fn close(&mut self, _: Duration) {}
    fn link_stats(&self) -> Option<LinkStats> {
        Some(self.0)
    }
}

#[test]
fn every_outputs_link_trouble_is_shown() {
    let (session, report, totals) = tick_of(&["runq"], 1_000);
    let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] };
    let mut sinks: Vec<Box<dyn Sink>> = vec![
        Box::new(Reporting(LinkStats { dropped: 7, errors: 0 })),
        Box::new(open("127.0.0.1:0").unwrap()),
        Box::new(Reporting(LinkStats { dropped: 0, errors: 3 })),
    ];
    let addr = {
        // The Prom sink, to read what it published.
        let p: &dyn Sink = &*sinks[1];
        p.name().trim_start_matches(SCHEME).to_string()
    };
    for _ in 0..3 {
        crate::sinks::share_link_stats(&mut sinks);
        for s in sinks.iter_mut() {
            s.emit(&t);
        }
    }
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    for s in sinks.iter_mut() {
        s.close(Duration::from_secs(1));
    }
    assert!(text.contains("latmon_output_dropped_total{output=\"serial:/dev/ttyS1@115200\"} 7"), "{text}");
    assert!(text.contains("latmon_output_errors_total{output=\"serial:/dev/ttyS1@115200\"} 3"), "{text}");
    assert_eq!(
        text.matches("latmon_output_dropped_total{").count(),
        2,
        "two outputs with links; not the Prometheus one"
    );
}
