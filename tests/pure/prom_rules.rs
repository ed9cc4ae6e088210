// SPDX-License-Identifier: MIT
//! The fleet rules (docs/prometheus-rules.yml) pass `promtool check
//! rules` and `promtool test rules` on the synthetic series of
//! tests/prometheus/rules-test.yml; and the unit tests catch a broken
//! rule (mutants of the rules file must fail them). The text exposition
//! with what a live run rarely shows (a folded family, link counters)
//! passes `promtool check metrics`.

use std::path::{Path, PathBuf};
use std::process::Command;

use latmon::sinks::prom::{render_text, snapshot};
use latmon::sinks::LinkStats;
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::{BtfMode, Family, Mechanism};
use latmon_core::session::{Session, Tick};
use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};

use crate::common;
use common::promtool_check_metrics;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// `promtool ARGS`: (success, what it said).
fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh)");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn rules_pass_promtool_check_and_their_unit_tests() {
    let rules = repo("docs/prometheus-rules.yml");
    let (ok, said) = promtool(&["check", "rules", rules.to_str().unwrap()]);
    eprintln!("FIGURES promtool check rules: {}", said.trim());
    assert!(ok && said.contains("SUCCESS: 12 rules found"), "{said}");
    let tests = repo("tests/prometheus/rules-test.yml");
    let (ok, said) = promtool(&["test", "rules", tests.to_str().unwrap()]);
    eprintln!("FIGURES promtool test rules: {}", said.trim());
    assert!(ok && said.contains("SUCCESS"), "{said}");
}

#[test]
fn the_rule_tests_catch_a_broken_rule() {
    let rules = std::fs::read_to_string(repo("docs/prometheus-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(repo("tests/prometheus/rules-test.yml")).unwrap();
    let dir = std::env::temp_dir().join(format!("latmon-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules-test.yml"), tests.replace("../../docs/prometheus-rules.yml", "mutant.yml")).unwrap();
    let mutants = [
        ("the deadline", "{kind=\"timer\"} > 0.001", "{kind=\"timer\"} > 0.002"),
        ("the timer's 5 min", "> 0.001\n        for: 5m", "> 0.001\n        for: 1m"),
        ("the degraded state", "latmon_degraded == 1", "latmon_degraded == 0"),
        (
            "kernel-skipped runs",
            "increase(latmon_probe_bpf_missed_total[5m]) > 0",
            "increase(latmon_probe_bpf_missed_total[30m]) > 0",
        ),
        ("link errors", "or increase(latmon_output_errors_total[10m]) > 0", ""),
        (
            "the classic quantile branch",
            "sum by (job, instance, probe, kind, attach, le) (rate(latmon_latency_seconds_bucket[1m])))",
            "sum by (job, instance, probe, kind, attach, le) (rate(latmon_latency_seconds_bucket[1m]))) * 2",
        ),
    ];
    for (what, from, to) in mutants {
        assert!(rules.contains(from), "mutant {what}: {from:?} not in the rules");
        std::fs::write(dir.join("mutant.yml"), rules.replacen(from, to, 1)).unwrap();
        let (ok, said) = promtool(&["test", "rules", dir.join("rules-test.yml").to_str().unwrap()]);
        assert!(!ok && said.contains("FAILED"), "a broken rule ({what}) passed the tests: {said}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folded_family_and_link_counters_pass_promtool_check_metrics() {
    let info = |name: &str| ProbeInfo {
        name: name.into(),
        kind: Family::Syscall,
        attach: Mechanism::RawTp,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    let probes: Vec<ProbeInfo> =
        std::iter::once(info("sys")).chain((0..40).map(|k| info(&format!("sys:call{k}")))).collect();
    let totals: Vec<Hist> = (0..probes.len())
        .map(|k| {
            let mut h = Hist::default();
            for v in 0..50u64 {
                h.record(1_000 + v * 997 * (k as u64 + 1));
            }
            h
        })
        .collect();
    let report = IntervalReport {
        seq: 9,
        probes: probes.iter().zip(&totals).map(|(p, h)| ProbeReport::new(p, &Hist::default(), h)).collect(),
        ..Default::default()
    };
    let session = Session {
        board: "b".into(),
        kernel: "6.18".into(),
        boot_id: 7,
        start_ns: 0,
        interval_ns: 1,
        probes,
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let errors = vec![0u64; totals.len()];
    let mut snap = snapshot(&Tick { session: &session, report: &report, totals: &totals, read_errors: &errors }, 16);
    snap.links = vec![
        ("serial:/dev/ttyS1@115200".into(), Some(LinkStats { dropped: 4, errors: 0 })),
        (String::new(), None),
        ("modbus-tcp://0.0.0.0:502".into(), Some(LinkStats { dropped: 0, errors: 2 })),
    ];
    let mut text = String::new();
    render_text(&mut text, &snap);
    assert!(text.contains("latmon_series_folded{probe=\"sys\",kind=\"syscall\",attach=\"raw_tp\"} 24"), "{text}");
    assert!(text.contains("latmon_output_errors_total{output=\"modbus-tcp://0.0.0.0:502\"} 2"));
    promtool_check_metrics(&text);
    let lines = text.lines().filter(|l| l.starts_with("latmon_latency_seconds_count{")).count();
    assert_eq!(lines, 18, "family line + 16 series + folded");
}

/// A cycle probe's misses and the causes of its missed time, with what a
/// board may name its tasks (quotes, backslashes), pass `promtool check
/// metrics`: counter and gauge families well formed, labels escaped.
#[test]
fn a_cycle_probes_misses_and_their_causes_pass_promtool_check_metrics() {
    use latmon_core::anatomy::{BlockedOn, Cause, CauseKind, Policy};
    use latmon_core::causes::CauseSummary;
    use latmon_core::cycle::CycleCounts;
    let info = ProbeInfo {
        name: "ctl\"loop\\1".into(),
        kind: Family::Cycle,
        attach: Mechanism::TpBtf,
        mode: String::new(),
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    let mut h = Hist::default();
    for v in 0..1000u64 {
        h.record(900_000 + v * 1_000);
    }
    let mut report =
        IntervalReport { seq: 3, probes: vec![ProbeReport::new(&info, &Hist::default(), &h)], ..Default::default() };
    ProbeExtra::cycle_in(&mut report.probes[0].extra).counts = CycleCounts {
        period_ns: 1_000_000,
        cycles: 1000,
        total_cycles: 3000,
        misses: 2,
        total_misses: 5,
        ..Default::default()
    };
    let mut miss = CauseSummary::default();
    miss.begin_misses();
    let hog = CauseKind::Task { comm: "h\"o\\g".into(), pid: 4242, policy: Policy::Fifo, prio: 90 };
    miss.add_miss(
        1_620_000,
        &[
            Cause { kind: CauseKind::Running, ns: 1_200_000 },
            Cause { kind: hog.clone(), ns: 300_000 },
            Cause { kind: CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, ns: 120_000 },
        ],
    );
    miss.add_miss(1_100_000, &[Cause { kind: hog, ns: 1_000_000 }, Cause { kind: CauseKind::Other, ns: 100_000 }]);
    miss.end_misses();
    ProbeExtra::cycle_in(&mut report.probes[0].extra).miss_causes = miss;
    let session = Session {
        board: "b".into(),
        kernel: "6.18".into(),
        boot_id: 7,
        start_ns: 0,
        interval_ns: 1,
        probes: vec![info],
        failed: Vec::new(),
        thresholds_ns: Vec::new(),
        certificate: None,
    };
    let totals = [h];
    let snap = snapshot(&Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] }, 16);
    let mut text = String::new();
    render_text(&mut text, &snap);
    let l = r#"probe="ctl\"loop\\1",kind="cycle",attach="tp_btf""#;
    assert!(text.contains(&format!("latmon_cycle_misses_total{{{l}}} 5\n")), "{text}");
    // The hog's 1.3 ms of the 2.72 ms missed (its two parts merged by thread id).
    let share = 1_300_000f64 / 2_720_000f64;
    let want =
        format!("latmon_cycle_miss_cause_ratio{{{l},rank=\"1\",cause_kind=\"task\",cause=\"h\\\"o\\\\g\"}} {share}\n");
    assert!(text.contains(&want), "{want} in {text}");
    promtool_check_metrics(&text);
}
