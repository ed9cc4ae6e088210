// SPDX-License-Identifier: MIT
//! Live tests of the cycle probe's RT sleep rules (bpf/cycle_rules.bpf.h,
//! root, this kernel), against fixtures that log what they did:
//! - tests/fixtures/lm_cycle.c `rules`: an absolute CLOCK_MONOTONIC loop
//!   that in turn sleeps relative (clock_nanosleep, nanosleep), sleeps on
//!   CLOCK_REALTIME and writes + fdatasyncs (counting its own voluntary
//!   context switches around it): `total_rule_counts` must equal its
//!   counts, and so must what a real Prometheus scraped
//!   (`latmon_cycle_rule_violations_total`) and what mbpoll reads from the
//!   probe's Modbus counter block; without injections every count is 0.
//! - tests/fixtures/lm_lock.c: the high loop blocked on ctrl_mutex held by
//!   the low thread is woken by the low one's unlock, once per inversion:
//!   `woken_by_lower` counts each; with PTHREAD_PRIO_INHERIT it stays 0.
//!   Under a `lock` probe too, every Modbus counter block (the rules, the
//!   lock lines' inversions) reads what the last JSON report says.
//!
//! The mutation (LATMON_CYCLE_MUTATE=rules: every timer sleep judged
//! relative, every futex wait not PI) must fail the zero and PI checks.

use crate::common;

use std::process::Command;

use common::prometheus::{free_port, http_get, Prometheus};
use common::*;

const RULES: [&str; 4] = ["woken_by_lower", "sleep_other", "sleep_relative", "sleep_realtime_clock"];

/// The cycle probe's `total_rule_counts` in the last report, in RULES'
/// order.
fn rule_totals(lines: &[serde_json::Value], probe: &str) -> Result<[u64; 4], String> {
    let p = last_probe(lines, probe).ok_or(format!("no {probe} line"))?;
    let c = &p["cycle"]["total_rule_counts"];
    let mut out = [0; 4];
    for (o, k) in out.iter_mut().zip(RULES) {
        *o = c[k].as_u64().ok_or(format!("no total_rule_counts.{k}: {p}"))?;
    }
    Ok(out)
}

/// The rule records of the run.
fn rule_records(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["event"] == "rule")
        .collect()
}

/// What lm_cycle `rules` did: (relative sleeps, realtime sleeps, the
/// sleeps of its write + fdatasync).
type Did = [u64; 3];

/// Run lm_cycle `rules` (`every`: its injection step, None: no
/// injection) under a cycle probe with `env`: what it did, and latmon's
/// JSON lines.
fn run_cycle(every: Option<u64>, env: &[(&str, &str)]) -> (Did, Vec<serde_json::Value>) {
    run_cycle_with(every, env, &[], &|| {}, &|_, _| {})
}

/// [`run_cycle`] with more of latmon's arguments (`outputs`), `before`
/// called once latmon runs and `after` once the fixture is done, with
/// what it did, while latmon still runs.
fn run_cycle_with(
    every: Option<u64>,
    env: &[(&str, &str)],
    outputs: &[&str],
    before: &dyn Fn(),
    after: &dyn Fn(&std::process::Child, Did),
) -> (Did, Vec<serde_json::Value>) {
    // The first injection is at cycle WARMUP: none beyond the run.
    let (every, warmup) = every.map_or(("1".into(), "1000000"), |e| (e.to_string(), "20"));
    let file = scratch("rules", "io");
    let args = ["--probe", "cycle,comm=lm_cycle", "--interval", "1s", "--format", "json"];
    let child = start_run_env(&[&args[..], outputs].concat(), env);
    before();
    let out = Command::new(crate::cycle::lm_cycle())
        .args(["2000", "1000", &every, warmup, "0"])
        .arg(&file)
        .arg("rules")
        .output()
        .expect("lm_cycle");
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "lm_cycle: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let done = text.lines().find(|l| l.starts_with("done")).unwrap_or_else(|| panic!("no done line: {text}"));
    let field = |k: &str| -> u64 {
        let w = done.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap_or_else(|| panic!("{k} in {done}"));
        w.parse().unwrap()
    };
    let did = [field("relative="), field("realtime="), field("sleeps=")];
    after(&child, did);
    let (status, json) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    (did, json_lines(&json))
}

/// latmon's counts against what the fixture did (none: every count 0).
fn check_sleeps(did: Did, lines: &[serde_json::Value]) -> Result<[u64; 4], String> {
    let got = rule_totals(lines, "cycle")?;
    let want = [0, did[2], did[0], did[1]];
    if got != want {
        return Err(format!("total_rule_counts {got:?} (order {RULES:?}), the fixture did {want:?}"));
    }
    Ok(got)
}

/// The counts a real Prometheus scraped from latmon, by rule (RULES'
/// order; None: no such series).
fn scraped_rules(server: &Prometheus) -> [Option<u64>; 4] {
    RULES.map(|r| {
        let q = format!("latmon_cycle_rule_violations_total{{probe=\"cycle\",rule=\"{r}\"}}");
        server.scalar(&q, None).map(|v| v as u64)
    })
}

/// The fixture's counts in rule order (sleep_other, sleep_relative,
/// sleep_realtime_clock from what lm_cycle did).
fn wanted(did: Did) -> [u64; 4] {
    [0, did[2], did[0], did[1]]
}

/// Counter block 0 (the cycle probe's, docs/modbus-map.md) read with
/// mbpoll once it holds `want` (the interval after the fixture's last
/// rule), or what it held last.
fn modbus_rules(port: u16, want: [u64; 4]) -> Vec<u32> {
    let read = || mbpoll_u32s(port, 64_000, 5).unwrap_or_else(|e| panic!("{e}"));
    let want: Vec<u32> = want.iter().map(|&n| n as u32).collect();
    poll_until(std::time::Duration::from_secs(10), || Some(read()).filter(|r| r[..4] == want[..])).unwrap_or_else(read)
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn sleep_rules_count_what_the_loop_did() {
    let _s = serial();
    // The same counts read by a real Prometheus scraping latmon and by
    // mbpoll from its Modbus map, once the fixture is done.
    let (pp, mb) = (free_port(), free_port());
    let (prom, modbus) = (format!("prom://127.0.0.1:{pp}"), format!("modbus-tcp://127.0.0.1:{mb}"));
    let server = Prometheus::start("rules", &format!("127.0.0.1:{pp}"), false);
    let outputs = ["--output", "-", "--output", &prom, "--output", &modbus];
    // What Prometheus scraped, read while latmon still runs: once it has
    // stopped, the next scrape (1 s) marks its series stale and a query
    // finds none (this assertion failed twice in a row that way on a
    // loaded host, the JSON and Modbus counts agreeing).
    let seen = std::sync::Mutex::new(([None; 4], Vec::new(), None));
    let lost_q = "latmon_cycle_rule_records_lost_total{probe=\"cycle\"}";
    let (did, lines) = run_cycle_with(
        Some(10),
        &[],
        &outputs,
        // Its first scrape comes seconds after it is ready (discovery).
        &|| server.wait_for("up{job=\"latmon\"}", 1.0),
        &|_, did| {
            let want = wanted(did);
            let got = poll_until(std::time::Duration::from_secs(30), || {
                let got = scraped_rules(&server);
                (got == want.map(Some)).then_some(got)
            });
            *seen.lock().unwrap() =
                (got.unwrap_or_else(|| scraped_rules(&server)), modbus_rules(mb, want), server.scalar(lost_q, None));
            // The exposition with the rule families passes promtool's lint.
            let (status, body) = http_get(&format!("127.0.0.1:{pp}"), "/metrics").expect("latmon's /metrics");
            assert_eq!(status, 200, "{body}");
            assert_eq!(body.matches("latmon_cycle_rule_violations_total{").count(), 4, "{body}");
            promtool_check_metrics(&body);
        },
    );
    assert!(did[0] >= 80 && did[1] >= 40 && did[2] >= 40, "the fixture did too little: {did:?}");
    match check_sleeps(did, &lines) {
        Ok(got) => eprintln!("FIGURES rules: total_rule_counts {got:?} (order {RULES:?}), the fixture {did:?}"),
        Err(e) => panic!("{e}"),
    }
    let json = rule_totals(&lines, "cycle").unwrap_or_else(|e| panic!("{e}"));
    let (scraped, regs, scraped_lost) = seen.into_inner().unwrap();
    let lost = last_probe(&lines, "cycle").and_then(|p| p["cycle"]["total_rule_records_lost"].as_u64());
    eprintln!("FIGURES rules: Prometheus scraped {scraped:?}, Modbus 64000.. {regs:?}, JSON {json:?} lost {lost:?}");
    assert_eq!(scraped, json.map(Some), "latmon_cycle_rule_violations_total vs JSON total_rule_counts");
    let json32: Vec<u32> = json.iter().chain(&[lost.unwrap_or(u64::MAX)]).map(|&n| n as u32).collect();
    assert_eq!(regs, json32, "Modbus counter block 0 vs JSON total_rule_counts, total_rule_records_lost");
    assert_eq!(scraped_lost, lost.map(|n| n as f64), "records lost, scraped");
    // Each rule broken has its record (at most one per 100 ms), naming
    // the syscall it slept in.
    let recs = rule_records(&lines);
    for (rule, syscalls) in [
        ("sleep_relative", &["clock_nanosleep", "nanosleep"][..]),
        ("sleep_realtime_clock", &["clock_nanosleep"][..]),
        ("sleep_other", &["fdatasync", "write"][..]),
    ] {
        let n = recs.iter().filter(|r| r["rule"] == rule && r["comm"] == "lm_cycle").count();
        assert!(n >= 5, "{n} {rule} records: {:?}", recs.first());
        assert!(
            recs.iter().any(|r| r["rule"] == rule && syscalls.iter().any(|s| r["syscall"] == *s)),
            "no {rule} record in {syscalls:?}: {:?}",
            recs.iter().find(|r| r["rule"] == rule)
        );
    }
    let lost = last_probe(&lines, "cycle").and_then(|p| p["cycle"]["total_rule_records_lost"].as_u64());
    eprintln!("FIGURES rules: {} rule records over 2 s, {lost:?} lost", recs.len());
    // About 4 rules x 10 records/s: well within their 100/s bucket.
    assert_eq!(lost, Some(0), "rule records lost");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn an_absolute_monotonic_loop_breaks_no_rule() {
    let _s = serial();
    let (did, lines) = run_cycle(None, &[]);
    assert_eq!(did, [0, 0, 0]);
    match check_sleeps(did, &lines) {
        Ok(got) => eprintln!("FIGURES rules, absolute loop: total_rule_counts {got:?}"),
        Err(e) => panic!("{e}"),
    }
    assert!(rule_records(&lines).is_empty(), "{:?}", rule_records(&lines).first());
    // The mutation: every timer sleep judged relative must fail.
    if !test_hooks("LATMON_CYCLE_MUTATE=rules") {
        return;
    }
    let (did, lines) = run_cycle(None, &[("LATMON_CYCLE_MUTATE", "rules")]);
    match check_sleeps(did, &lines) {
        Ok(got) => panic!("the zero check passed with every sleep judged relative: {got:?}"),
        Err(e) => eprintln!("mutation caught: {e}"),
    }
}

/// Run lm_lock (`pi`: PTHREAD_PRIO_INHERIT) under a cycle probe with
/// `env`: the high and low thread ids, the high thread's waits that
/// blocked (longer than 50 us; uncontended ones take about 1 us), and
/// latmon's JSON lines.
fn run_lock(pi: bool, env: &[(&str, &str)]) -> (u32, u32, u64, Vec<serde_json::Value>) {
    run_lock_with(pi, env, &[], &|| {})
}

/// [`run_lock`] with more of latmon's arguments (`more`), `after` called
/// once the fixture is done, while latmon still runs.
fn run_lock_with(
    pi: bool,
    env: &[(&str, &str)],
    more: &[&str],
    after: &dyn Fn(),
) -> (u32, u32, u64, Vec<serde_json::Value>) {
    let cpu = std::thread::available_parallelism().map_or(0, |n| n.get() - 1).to_string();
    let args = ["--probe", "cycle,comm=lm_lock", "--interval", "1s", "--format", "json"];
    let child = start_run_env(&[&args[..], more].concat(), env);
    let mut args = vec!["2000", "20", cpu.as_str()];
    if pi {
        args.push("pi");
    }
    let out = Command::new(crate::lock::lm_lock()).args(&args).output().expect("lm_lock");
    after();
    let (status, json) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    assert!(out.status.success(), "lm_lock: {}", String::from_utf8_lossy(&out.stderr));
    let (mut high, mut low, mut blocked) = (0, 0, 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
        if line.starts_with("tids ") {
            (high, low) = (f[0] as u32, f[1] as u32);
        } else if line.starts_with("H ") && f[1] - f[0] > 50_000 {
            blocked += 1;
        }
    }
    (high, low, blocked, json_lines(&json))
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn woken_by_lower_counts_each_inversion() {
    let _s = serial();
    // A lock probe too, and the Modbus map read with mbpoll once the
    // fixture is done and two intervals later (the counts are final).
    let mb = free_port();
    let modbus = format!("modbus-tcp://127.0.0.1:{mb}");
    let more = ["--probe", "lock,comm=lm_lock", "--output", "-", "--output", &modbus];
    let regs = std::sync::Mutex::new(Vec::new());
    let (high, low, blocked, lines) = run_lock_with(false, &[], &more, &|| {
        std::thread::sleep(std::time::Duration::from_millis(2_500));
        let n = mbpoll_input_register(mb, 2) as u16;
        let blocks = mbpoll_u32s(mb, 64_000, 5 * n).unwrap_or_else(|e| panic!("{e}"));
        *regs.lock().unwrap() = blocks;
    });
    let got = rule_totals(&lines, "cycle").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("FIGURES rules, lock: woken_by_lower {} for {blocked} blocked waits of the high loop", got[0]);
    assert!(blocked >= 50, "the fixture blocked {blocked} times, expected ~95");
    assert_eq!(got[0], blocked, "woken_by_lower vs the high loop's blocked waits");
    check_modbus_counters(&lines, &regs.into_inner().unwrap());
    let rec = rule_records(&lines)
        .into_iter()
        .find(|r| r["rule"] == "woken_by_lower")
        .unwrap_or_else(|| panic!("no woken_by_lower record"));
    eprintln!("a woken_by_lower record: {rec}");
    assert_eq!((&rec["tid"], &rec["syscall"]), (&high.into(), &"futex".into()), "{rec}");
    let w = &rec["waker"];
    assert_eq!((&w["tid"], &w["policy"], &w["prio"]), (&low.into(), &"fifo".into(), &10.into()), "{rec}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn woken_by_lower_stays_zero_with_priority_inheritance() {
    let _s = serial();
    let (_, _, blocked, lines) = run_lock(true, &[]);
    let got = rule_totals(&lines, "cycle").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("FIGURES rules, lock PI: woken_by_lower {} for {blocked} blocked waits of the high loop", got[0]);
    assert!(blocked >= 50, "the fixture blocked {blocked} times under PI, expected ~95");
    assert_eq!(got[0], 0, "woken_by_lower under PI");
    // The mutation: PI waits judged as plain ones must count (the kernel
    // deboosts the owner before it wakes the waiter).
    if !test_hooks("LATMON_CYCLE_MUTATE=rules") {
        return;
    }
    let (_, _, blocked, lines) = run_lock(true, &[("LATMON_CYCLE_MUTATE", "rules")]);
    let got = rule_totals(&lines, "cycle").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("mutation: woken_by_lower {} for {blocked} blocked PI waits", got[0]);
    assert!(got[0] > 0, "the mutation went unseen: woken_by_lower 0 with PI waits judged as plain ones");
}

/// Modbus counter blocks (`regs`: 5 u32 per probe block, in block order)
/// against the last JSON report: the cycle probe's rule counts, and each
/// lock line's inversions, inversion µs, owners refused (the family line)
/// and owned; the lock series with inversions among them.
fn check_modbus_counters(lines: &[serde_json::Value], regs: &[u32]) {
    let probes = lines.last().and_then(|l| l["probes"].as_array()).expect("a last report");
    assert_eq!(regs.len(), 5 * probes.len(), "a counter block per probe block: {probes:?}");
    let mut locks = Vec::new();
    for (p, r) in probes.iter().zip(regs.chunks(5)) {
        let want: Vec<u64> = if p["cycle"].is_object() {
            let c = &p["cycle"];
            RULES.iter().map(|k| u(&c["total_rule_counts"], k)).chain([u(c, "total_rule_records_lost")]).collect()
        } else if p["lock"].is_object() {
            let l = &p["lock"];
            let refused = l["total_owners_refused"].as_u64().unwrap_or(0);
            locks.push((p["name"].clone(), r.to_vec()));
            vec![u(l, "total_inversions"), u(l, "total_inversion_ns").div_ceil(1_000), refused, u(l, "total_owned"), 0]
        } else {
            vec![0; 5]
        };
        let want: Vec<u32> = want.iter().map(|&n| n as u32).collect();
        assert_eq!(r, &want[..], "Modbus counter block of {} vs JSON: {p}", p["name"]);
    }
    eprintln!(
        "FIGURES rules, lock: Modbus counter blocks of the lock lines (inversions, us, refused, owned, 0): {locks:?}"
    );
    let family = locks.first().expect("the lock family line");
    assert!(family.1[0] >= 50, "inversions of the non-PI fixture in Modbus: {locks:?}");
    assert!(
        locks.iter().any(|(n, r)| n.as_str().is_some_and(|n| n.ends_with(":ctrl_mutex")) && r[0] == family.1[0]),
        "ctrl_mutex's series holds the family's inversions: {locks:?}"
    );
}
