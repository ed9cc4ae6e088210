// SPDX-License-Identifier: MIT
//! Live tests of the `lock` family on the futex2 syscalls (root, this
//! kernel): tests/fixtures/lm_futex2.c makes N blocking `futex_wait`
//! (futex2) and M blocking `futex_waitv` waits, each woken by its waker
//! thread after a known delay, and logs every call. latmon must count
//! exactly N waits in `lmfx:futex2_word` and M in `lmfx:waitv_word` (the
//! first waiter's word), name the waker thread as every record's owner,
//! and have each series' max within 20 % of the fixture's longest wait of
//! that kind. With `LATMON_LOCK_MUTATE=waitv` (the second waiter's word
//! taken) the check must fail. A kernel without one of the syscalls: the
//! fixture says so (ENOSYS) and `latmon check` must not list it among the
//! probe's followed syscalls (the probe still runs on futex).

use crate::common;

use std::process::Command;

use common::*;

/// Every wait sends a record: the fixture's are 1-2 ms.
const THRESHOLD_NS: u64 = 500_000;
const PROBE: &str = "lock,comm=lmfx_wait,name=lmfx,threshold=500us";
/// N futex_wait and M futex_waitv waits: below the alert burst (32 per
/// series), so every wait's record comes through.
const WAITS: usize = 25;

/// tests/fixtures/lm_futex2.c.
fn lm_futex2() -> &'static std::path::Path {
    compile_fixture("lm_futex2", "lm_futex2", &["-O2", "-pthread"])
}

/// What the fixture logged (CLOCK_MONOTONIC ns).
#[derive(Debug, Default)]
struct Fixture {
    waker: u32,
    /// Per kind ('F' futex_wait, 'V' futex_waitv): (start, end) per call.
    waits: [Vec<(u64, u64)>; 2],
    /// The syscalls the kernel refused with ENOSYS.
    nosys: Vec<String>,
}

/// One syscall's expectations: its fixture kind, its series, its name.
struct Kind {
    idx: usize,
    series: &'static str,
    syscall: &'static str,
}

const KINDS: [Kind; 2] = [
    Kind { idx: 0, series: "lmfx:futex2_word", syscall: "futex_wait" },
    Kind { idx: 1, series: "lmfx:waitv_word", syscall: "futex_waitv" },
];

fn run(env: &[(&str, &str)]) -> (Fixture, Vec<serde_json::Value>) {
    let child = start_run_env(&["--probe", PROBE, "--interval", "1s", "--format", "json"], env);
    let n = WAITS.to_string();
    // It lingers past latmon's next interval: a series is named from the
    // live process's maps.
    let out = Command::new(lm_futex2()).args([&n, &n, "1500"]).output().expect("lm_futex2");
    let (status, json) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    assert!(out.status.success(), "lm_futex2: {}", String::from_utf8_lossy(&out.stderr));
    let mut fx = Fixture::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        match f.first() {
            Some(&"tids") => fx.waker = n(2) as u32,
            Some(&"F") => fx.waits[0].push((n(1), n(2))),
            Some(&"V") => fx.waits[1].push((n(1), n(2))),
            Some(&"nosys") => fx.nosys.push(f[1].to_string()),
            _ => {}
        }
    }
    (fx, json_lines(&json))
}

/// A series' total count and its largest max over the run.
fn series(lines: &[serde_json::Value], name: &str) -> (u64, u64) {
    let probes =
        || lines.iter().flat_map(|l| l["probes"].as_array().into_iter().flatten()).filter(|p| p["name"] == name);
    let count = probes().filter_map(|p| p["total_count"].as_u64()).max().unwrap_or(0);
    let max = probes().filter_map(|p| p["max_ns"].as_u64()).max().unwrap_or(0);
    (count, max)
}

/// Check one syscall's waits: Ok(its figures line), Err(what is wrong).
fn check(fx: &Fixture, lines: &[serde_json::Value], k: &Kind) -> Result<String, String> {
    let waits = &fx.waits[k.idx];
    let longest = waits.iter().map(|(a, b)| b - a).max().unwrap_or(0);
    let above = waits.iter().filter(|(a, b)| b - a > THRESHOLD_NS).count();
    let (count, max) = series(lines, k.series);
    let mut problems = Vec::new();
    if waits.len() < WAITS {
        problems.push(format!("the fixture made {} {} waits, not {WAITS}", waits.len(), k.syscall));
    }
    if count != waits.len() as u64 {
        problems.push(format!("{} counted {count} waits, the fixture made {}", k.series, waits.len()));
    }
    if max.abs_diff(longest) * 5 > longest {
        problems.push(format!("{} max {max} ns vs the fixture's longest {longest} ns", k.series));
    }
    let records: Vec<&serde_json::Value> = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["probe"] == k.series)
        .collect();
    let by_waker = records
        .iter()
        .filter(|r| {
            r["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["kind"] == "owner" && c["owner"]["from"] == "waker" && c["owner"]["tid"] == fx.waker)
        })
        .count();
    // The fixture's waits above the threshold, less its clock's way in
    // and out of the call, are latmon's records.
    if records.is_empty() || records.len() + 1 < above || records.len() > waits.len() || by_waker != records.len() {
        problems.push(format!(
            "{}: {} records ({above} fixture waits above the threshold), {by_waker} name the waker {}",
            k.series,
            records.len(),
            fx.waker
        ));
    }
    let figures = format!(
        "FIGURES lock {}: {count} of {} waits counted, max {max} ns vs the fixture's longest {longest} ns ({:+.1} %), \
         {by_waker} of {} records name the waker",
        k.syscall,
        waits.len(),
        (max as f64 / longest.max(1) as f64 - 1.0) * 100.0,
        records.len()
    );
    if problems.is_empty() {
        Ok(figures)
    } else {
        Err(format!("{figures}\n{}", problems.join("\n")))
    }
}

/// The syscalls `latmon check` says the probe follows on this kernel
/// (its mode: `..., syscalls futex+futex_wait+futex_waitv`).
fn followed_syscalls() -> Vec<String> {
    let out = latmon().args(["check", "--probe", PROBE, "--json"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let p = v["probes"].as_array().and_then(|a| a.first()).cloned().unwrap_or_default();
    let mode = p["mode"].as_str().unwrap_or_else(|| panic!("no mode: {p}"));
    let list = mode.split("syscalls ").nth(1).unwrap_or_else(|| panic!("mode names no syscalls: {mode}"));
    list.split(',').next().unwrap_or("").split('+').map(str::to_string).collect()
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn futex2_wait_and_waitv_waits_are_counted_and_name_their_waker() {
    let _s = serial();
    let followed = followed_syscalls();
    eprintln!("lock follows: {followed:?}");
    assert_eq!(followed.first().map(String::as_str), Some("futex"), "{followed:?}");
    let (fx, lines) = run(&[]);
    let mut checked = 0;
    for k in &KINDS {
        if fx.nosys.iter().any(|s| s == k.syscall) {
            // This kernel lacks it: latmon must say so, not pretend.
            eprintln!("this kernel has no {}: checking that latmon does not list it", k.syscall);
            assert!(!followed.iter().any(|s| s == k.syscall), "{} listed as followed: {followed:?}", k.syscall);
            assert_eq!(series(&lines, k.series).0, 0);
            continue;
        }
        assert!(followed.iter().any(|s| s == k.syscall), "{} ran but is not followed: {followed:?}", k.syscall);
        match check(&fx, &lines, k) {
            Ok(f) => eprintln!("{f}"),
            Err(e) => panic!("{e}"),
        }
        checked += 1;
    }
    // The mutation: futex_waitv's second waiter's word as its series.
    if fx.nosys.iter().all(|s| s != "futex_waitv") && test_hooks("LATMON_LOCK_MUTATE=waitv") {
        let (fx, lines) = run(&[("LATMON_LOCK_MUTATE", "waitv")]);
        match check(&fx, &lines, &KINDS[1]) {
            Ok(f) => panic!("the check passed with the second waiter's word as the series: {f}"),
            Err(e) => eprintln!("mutation caught: {}", e.lines().nth(1).unwrap_or("")),
        }
    }
    eprintln!("FIGURES lock futex2: {checked} of 2 syscalls checked on this kernel");
}
