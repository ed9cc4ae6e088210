// SPDX-License-Identifier: MIT
//! Live tests of the `cycle` family (root, this kernel): a 1 kHz
//! SCHED_FIFO loop (tests/fixtures/lm_cycle.c) logs its own releases,
//! wakeups and done times and injects known misses (busy overruns, page
//! faults it counts with getrusage, write + fdatasync, long overruns).
//! latmon must count its cycles and misses, find its period, send a miss
//! record per miss (matched by release time) whose parts sum to the
//! latency and name what the fixture did, and an overrun record before
//! each long overrun ends. The same check must fail when the execution is
//! charged to the wrong task (LATMON_CYCLE_MUTATE=1).

use crate::common;

use std::collections::HashMap;
use std::process::Command;

use common::*;

const PERIOD_NS: u64 = 1_000_000;
/// Cycles before latmon judges misses (its period needs
/// CYCLE_PERIOD_MIN_STEPS releases) and the fixture's first release.
const SETTLE: usize = 12;

/// tests/fixtures/lm_cycle.c.
pub(crate) fn lm_cycle() -> &'static std::path::Path {
    compile_fixture("lm_cycle", "lm_cycle", &["-O2"])
}

/// One cycle as the fixture logged it.
#[derive(Debug, Clone)]
struct Row {
    kind: char,
    release: u64,
    wake: u64,
    done: u64,
    faults: u64,
    /// `nest` rows: the loop's last clock read before the sleep call
    /// minus its timer's expiry (negative: the timer still ahead).
    call_vs_expiry: i64,
}

impl Row {
    fn missed(&self) -> bool {
        self.done - self.release > PERIOD_NS
    }
    fn exec(&self) -> u64 {
        self.done.saturating_sub(self.wake)
    }
}

/// A fixture row for a failure message, its times in us from `origin`.
fn row_from(r: &Row, origin: u64) -> String {
    let us = |t: u64| (t as i64 - origin as i64) / 1000;
    format!("kind {} release {:+} wake {:+} done {:+} us", r.kind, us(r.release), us(r.wake), us(r.done))
}

/// Run the fixture for `cycles` under a cycle probe (with `env`, and the
/// fixture's extra `args`): its rows and latmon's JSON lines.
fn run(cycles: usize, env: &[(&str, &str)], args: &[&str]) -> (Vec<Row>, Vec<serde_json::Value>) {
    run_fixture(&[&cycles.to_string(), "1000", "25", "100", "3000"], env, args)
}

/// [`run`] with the fixture's first five arguments (CYCLES PERIOD_US
/// EVERY WARMUP PAGES) given.
fn run_fixture(head: &[&str], env: &[(&str, &str)], args: &[&str]) -> (Vec<Row>, Vec<serde_json::Value>) {
    run_fixture_with(head, env, args, |_| {})
}

/// [`run_fixture`], `during` called with the fixture's pid while it runs.
fn run_fixture_with(
    head: &[&str],
    env: &[(&str, &str)],
    args: &[&str],
    during: impl FnOnce(u32),
) -> (Vec<Row>, Vec<serde_json::Value>) {
    let bin = lm_cycle();
    let file = std::env::temp_dir().join(format!("latmon-cycle-io-{}", std::process::id()));
    // A timerfd loop is followed on request only (the read() program).
    let probe = if args.contains(&"timerfd") { "cycle,comm=lm_cycle,timerfd=true" } else { "cycle,comm=lm_cycle" };
    let child = start_run_env(&["--probe", probe, "--interval", "1s", "--format", "json"], env);
    let fixture = Command::new(bin)
        .args(head)
        .arg(&file)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("lm_cycle");
    during(fixture.id());
    let out = fixture.wait_with_output().expect("lm_cycle");
    let _ = std::fs::remove_file(&file);
    let (status, json) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    assert!(out.status.success(), "lm_cycle: {}", String::from_utf8_lossy(&out.stderr));
    let rows = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with("done"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            Row {
                kind: f[1].chars().next().unwrap(),
                release: n(2),
                wake: n(3),
                done: n(4),
                faults: n(5),
                call_vs_expiry: f.get(6).map_or(0, |v| v.parse().unwrap()),
            }
        })
        .collect();
    (rows, json_lines(&json))
}

/// What the check measured.
#[derive(Debug, Default)]
struct Figures {
    cycles: u64,
    unseen: u64,
    period_ns: u64,
    misses: u64,
    fixture_misses: u64,
    matched: usize,
    spurious: usize,
    busy_running: f64,
    faults_found: f64,
    io_blocked: f64,
    overruns_in_time: usize,
    long_overruns: usize,
}

fn ns_of(causes: &serde_json::Value, kind: &str, on: Option<&str>) -> u64 {
    causes
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == kind && on.is_none_or(|o| c["on"] == o))
        .map(|c| c["ns"].as_u64().unwrap())
        .sum()
}

/// The acceptance numbers over `rows` and latmon's `lines`.
fn check(rows: &[Row], lines: &[serde_json::Value]) -> Result<Figures, String> {
    let mut f = Figures::default();
    let p = last_probe(lines, "cycle").ok_or("no cycle line")?;
    let c = &p["cycle"];
    f.cycles = c["total_cycles"].as_u64().ok_or("no cycles")?;
    f.period_ns = c["period_ns"].as_u64().unwrap_or(0);
    f.unseen = c["total_unseen"].as_u64().unwrap_or(0);
    f.misses = c["total_misses"].as_u64().unwrap_or(0);
    let judged = &rows[SETTLE..];
    f.fixture_misses = judged.iter().filter(|r| r.missed()).count() as u64;
    let recs: Vec<&serde_json::Value> = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["probe"] == "cycle")
        .collect();
    let miss_recs: HashMap<u64, &serde_json::Value> =
        recs.iter().filter(|r| r["event"] == "miss").map(|r| (r["release_ns"].as_u64().unwrap(), *r)).collect();
    let by_release: HashMap<u64, &Row> = rows.iter().map(|r| (r.release, r)).collect();
    let mut problems = Vec::new();
    if f.cycles < rows.len() as u64 - 2 {
        problems.push(format!("cycles {} of the fixture's {}", f.cycles, rows.len()));
    }
    // Cycles whose release no wakeup or switch event showed (caught at the
    // sleep's return): on this host only the VM agent's context hides them
    // (docs/probes.md, "Unseen releases"); a few per thousand.
    if f.unseen * 50 > f.cycles {
        problems.push(format!("{} of {} cycles unseen (more than 2 %)", f.unseen, f.cycles));
    }
    if f.period_ns.abs_diff(PERIOD_NS) * 100 > PERIOD_NS {
        problems.push(format!("period_ns {} not within 1 % of {PERIOD_NS}", f.period_ns));
    }
    if f.misses.abs_diff(f.fixture_misses) > 2 {
        problems.push(format!("misses {} vs the fixture's {}", f.misses, f.fixture_misses));
    }
    // Every miss record: its parts sum to its latency, done - release.
    for r in miss_recs.values() {
        let lat = r["latency_ns"].as_u64().unwrap();
        let sum: u64 = r["causes"].as_array().unwrap().iter().map(|c| c["ns"].as_u64().unwrap()).sum();
        let span = r["done_ns"].as_u64().unwrap() - r["release_ns"].as_u64().unwrap();
        if sum != lat || span != lat {
            problems.push(format!("parts {sum} / span {span} != latency {lat}: {r}"));
        }
        if !by_release.get(&r["release_ns"].as_u64().unwrap()).is_some_and(|row| row.missed()) {
            f.spurious += 1;
        }
    }
    let (mut busy, mut faults, mut io) = ((0u64, 0u64), (0u64, 0u64), (0u64, 0u64));
    for row in judged.iter().filter(|r| r.missed()) {
        let Some(r) = miss_recs.get(&row.release) else { continue };
        f.matched += 1;
        let causes = &r["causes"];
        match row.kind {
            'b' => {
                busy.0 += ns_of(causes, "running", None);
                busy.1 += row.exec();
            }
            'f' => {
                let n = causes
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["kind"] == "page_faults")
                    .map_or(0, |c| c["count"].as_u64().unwrap());
                faults.0 += n;
                faults.1 += row.faults;
            }
            'i' => {
                io.0 += ns_of(causes, "blocked", Some("io"));
                io.1 += row.exec();
            }
            _ => {}
        }
    }
    let share = |(a, b): (u64, u64)| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    (f.busy_running, f.faults_found, f.io_blocked) = (share(busy), share(faults), share(io));
    if (f.matched as u64) * 100 < f.fixture_misses * 95 {
        problems.push(format!("{} of {} fixture misses have a record", f.matched, f.fixture_misses));
    }
    if f.spurious as u64 * 100 > f.fixture_misses.max(50) * 2 {
        problems.push(format!("{} spurious miss records", f.spurious));
    }
    if busy.1 == 0 || f.busy_running < 0.8 {
        problems.push(format!("busy misses: running is {:.3} of their execution", f.busy_running));
    }
    if faults.1 == 0 || f.faults_found < 0.9 {
        problems.push(format!("page-fault misses: {:.3} of the faults found", f.faults_found));
    }
    if io.1 == 0 || f.io_blocked < 0.5 {
        problems.push(format!("I/O misses: blocked/io is {:.3} of their execution", f.io_blocked));
    }
    // Each long overrun: an overrun record, sent before it ended.
    let overruns: Vec<&&serde_json::Value> = recs.iter().filter(|r| r["event"] == "overrun").collect();
    for row in judged.iter().filter(|r| r.kind == 'l') {
        f.long_overruns += 1;
        let early = overruns.iter().any(|o| {
            o["release_ns"].as_u64() == Some(row.release) && o["time_ns"].as_u64().is_some_and(|t| t < row.done)
        });
        f.overruns_in_time += usize::from(early);
    }
    if f.long_overruns == 0 || f.overruns_in_time < f.long_overruns {
        problems.push(format!("{} of {} long overruns reported in time", f.overruns_in_time, f.long_overruns));
    }
    if problems.is_empty() {
        Ok(f)
    } else {
        Err(format!("{}\n{f:?}", problems.join("\n")))
    }
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_loops_misses_are_counted_and_each_explains_itself() {
    let _s = serial();
    let (rows, lines) = run(5_200, &[], &[]);
    match check(&rows, &lines) {
        Ok(f) => eprintln!("cycle figures: {f:?}"),
        Err(e) => panic!("{e}"),
    }
    // The mutation: the loop's execution charged to other tasks must fail.
    if !test_hooks("LATMON_CYCLE_MUTATE=1") {
        return;
    }
    let (rows, lines) = run(1_500, &[("LATMON_CYCLE_MUTATE", "1")], &[]);
    match check(&rows, &lines) {
        Ok(f) => panic!("the check passed with the execution charged to the wrong task: {f:?}"),
        Err(e) => {
            eprintln!("mutation caught: {e}");
            assert!(e.contains("busy misses: running"), "{e}");
        }
    }
}

/// Issue 40: a miss record is built at the loop's sleep entry; a timer
/// interrupt on the loop's CPU runs the overrun check (hrtimer_expire_entry)
/// inside that program, and the kernel does not keep a tp_btf program
/// from nesting in another. The fixture (`nest`) arms a timer to expire
/// as it calls its sleep after a miss, sweeping the call across the 3 us
/// before the expiry, and logs where the call fell. Every miss record
/// must stay its own (latency = done - release, exactly), and no overrun
/// record may come at or after its cycle's done. Before the fix, the
/// overrun built inside the miss's program overwrote its one per-CPU
/// scratch record: misses went out with the overrun's latency and time,
/// and an overrun went out for a finished cycle.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_miss_record_stays_its_own_when_a_timer_interrupt_meets_its_done() {
    let _s = serial();
    let (rows, lines) = run_fixture(&["6000", "1000", "20", "20", "0"], &[], &["nest"]);
    let recs: Vec<&serde_json::Value> = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["probe"] == "cycle")
        .collect();
    let done_of: HashMap<u64, u64> = recs
        .iter()
        .filter(|r| r["event"] == "miss")
        .map(|r| (r["release_ns"].as_u64().unwrap(), r["done_ns"].as_u64().unwrap()))
        .collect();
    // The fixture's truth: the cycles whose timer was still ahead when the
    // loop called its sleep (its interrupt came in the kernel's sleep
    // entry or later).
    let injected = rows.iter().filter(|r| r.kind == 'x').count();
    let ahead = rows.iter().filter(|r| r.kind == 'x' && r.call_vs_expiry < 0).count();
    let mut bad = Vec::new();
    let mut misses = 0;
    for r in recs.iter().filter(|r| r["event"] == "miss") {
        misses += 1;
        let span = r["done_ns"].as_u64().unwrap() - r["release_ns"].as_u64().unwrap();
        if r["latency_ns"].as_u64() != Some(span) {
            bad.push(format!("miss latency {} != done - release {span}: {r}", r["latency_ns"]));
        }
    }
    let mut late = 0;
    for o in recs.iter().filter(|r| r["event"] == "overrun") {
        let done = done_of.get(&o["release_ns"].as_u64().unwrap());
        if done.is_some_and(|d| o["time_ns"].as_u64().unwrap() >= *d) {
            late += 1;
            bad.push(format!("overrun sent at or after its cycle's done {done:?}: {o}"));
        }
    }
    eprintln!(
        "nest: {injected} injected misses, {ahead} with the timer ahead at the sleep call; {misses} miss records, \
         {} overrun records, {late} after their done, {} bad",
        recs.iter().filter(|r| r["event"] == "overrun").count(),
        bad.len()
    );
    assert!(ahead >= 50, "the fixture met its timer in only {ahead} of {injected} sleep calls");
    assert!(misses >= 100, "{misses} miss records");
    assert!(
        bad.is_empty(),
        "{} records not their own:\n{}",
        bad.len(),
        bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// A loop on CLOCK_REALTIME absolute sleeps: its releases are put on
/// CLOCK_MONOTONIC with the kernel's own offset for that clock, so its
/// period and misses are found as a monotonic loop's. (Its log is on
/// CLOCK_REALTIME: records are not matched by release time here.)
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_realtime_loops_period_and_misses_are_found() {
    let _s = serial();
    let (rows, lines) = run(1_500, &[], &["realtime"]);
    let p = last_probe(&lines, "cycle").expect("no cycle line");
    let c = &p["cycle"];
    let cycles = c["total_cycles"].as_u64().unwrap();
    let period = c["period_ns"].as_u64().unwrap_or(0);
    let misses = c["total_misses"].as_u64().unwrap();
    let fixture = rows[SETTLE..].iter().filter(|r| r.missed()).count() as u64;
    eprintln!("realtime loop: cycles {cycles}, period_ns {period}, misses {misses} (fixture {fixture})");
    assert!(cycles >= rows.len() as u64 - 2, "cycles {cycles} of the fixture's {}", rows.len());
    assert!(period.abs_diff(PERIOD_NS) * 100 <= PERIOD_NS, "period_ns {period}");
    assert!(fixture > 0, "the fixture injected no miss");
    assert!(misses.abs_diff(fixture) <= 2, "misses {misses} vs the fixture's {fixture}");
}

/// Issue 40 item 4: a loop that goes from 1 kHz to 100 Hz with 3 ms of
/// work a cycle was judged against 1 ms forever (every 100 Hz cycle a
/// miss, the loop's own count 0). The period follows the loop's steps:
/// its misses are the loop's own (judged by the loop against the period
/// it runs at), and period_ns moves from 1 ms to 10 ms in the JSON.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_loops_new_rate_becomes_its_period() {
    let _s = serial();
    // 1000 cycles of 1 ms (1 s), then 400 of 10 ms (4 s): fixture kind w.
    let (rows, lines) = run_fixture(&["1400", "1000", "100000", "1000", "0"], &[], &["rate"]);
    let p = last_probe(&lines, "cycle").expect("no cycle line");
    let c = &p["cycle"];
    let cycles = c["total_cycles"].as_u64().unwrap();
    let misses = c["total_misses"].as_u64().unwrap();
    let period = c["period_ns"].as_u64().unwrap_or(0);
    let own = |r: &Row| if r.kind == 'w' { PERIOD_NS * 10 } else { PERIOD_NS };
    let fixture = rows[SETTLE..].iter().filter(|r| r.done - r.release > own(r)).count() as u64;
    let slow = rows.iter().filter(|r| r.kind == 'w').count();
    let periods: Vec<u64> = lines
        .iter()
        .filter_map(|l| l["probes"].as_array()?.iter().find(|p| p["name"] == "cycle")?["cycle"]["period_ns"].as_u64())
        .collect();
    eprintln!(
        "rate change: cycles {cycles} ({slow} at 100 Hz), misses {misses} (fixture {fixture}), period_ns per interval {periods:?}"
    );
    assert!(cycles >= rows.len() as u64 - 2, "cycles {cycles} of the fixture's {}", rows.len());
    assert!(misses.abs_diff(fixture) <= 2, "misses {misses} vs the loop's own {fixture} ({slow} cycles at 100 Hz)");
    assert!(periods.iter().any(|p| p.abs_diff(PERIOD_NS) * 100 <= PERIOD_NS), "period_ns never 1 ms: {periods:?}");
    assert!(period.abs_diff(PERIOD_NS * 10) * 100 <= PERIOD_NS * 10, "period_ns {period} at the end, not 10 ms");
}

/// The miss records' causes of kind `kind`, in ns, and every record's
/// (release, timer_irq_delay ns) where that is over 1 ms.
fn causes_of(lines: &[serde_json::Value], kind: &str) -> (Vec<u64>, Vec<(u64, u64)>) {
    let recs: Vec<&serde_json::Value> = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["probe"] == "cycle" && r["event"] == "miss")
        .collect();
    let of = |r: &serde_json::Value, k: &str| ns_of(&r["causes"], k, None);
    let found = recs.iter().map(|r| of(r, kind)).filter(|&ns| ns > 0).collect();
    let late = recs
        .iter()
        .map(|r| (r["release_ns"].as_u64().unwrap_or(0), of(r, "timer_irq_delay")))
        .filter(|&(_, ns)| ns > 1_000_000)
        .collect();
    (found, late)
}

/// Of `late` (release, timer_irq_delay ns over 1 ms), those the timer did
/// not cause by the fixture's own account: its row of that release woke
/// less than that delay after the release, or its release had passed
/// when it slept (a backlog). A row that woke late by the loop's own
/// clock on a release still ahead when it slept was the timer's (a vCPU
/// or interrupt stall on this shared host: seen 1.07 ms once).
fn timer_did_not_cause(rows: &[Row], late: &[(u64, u64)]) -> Vec<(u64, u64)> {
    late.iter()
        .copied()
        .filter(|&(release, ns)| {
            let Some(i) = rows.iter().position(|r| r.release == release) else { return true };
            let backlog = i > 0 && rows[i].release <= rows[i - 1].done;
            backlog || rows[i].wake.saturating_sub(rows[i].release) + 100_000 < ns
        })
        .collect()
}

/// Issue 40 item 8: a 5 s SIGSTOP read "miss 5.00s: timer irq delay
/// 5.00s", and each of the ~5000 catch-up cycles after it a timer irq
/// delay too. The stopped release is `stopped`, the catch-up `backlog`:
/// no timer_irq_delay over 1 ms (the timer was never late).
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_stopped_loops_gap_is_stopped_and_its_catch_up_backlog() {
    let _s = serial();
    let (rows, lines) = run_fixture_with(&["8000", "1000", "100000", "100", "0"], &[], &["catchup"], |pid| {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
        std::thread::sleep(std::time::Duration::from_secs(5));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    });
    // The fixture's truth: its releases that had passed when it slept
    // (its previous done), and its longest release -> wake gap.
    let backlog = rows.windows(2).filter(|w| w[1].release <= w[0].done).count();
    let gap = rows.iter().map(|r| r.wake.saturating_sub(r.release)).max().unwrap_or(0);
    let (stopped, late) = causes_of(&lines, "stopped");
    let (backlogged, _) = causes_of(&lines, "backlog");
    let wakeups = lines
        .last()
        .and_then(|l| l["probes"].as_array()?.iter().find(|p| p["name"] == "cycle:wakeup"))
        .and_then(|p| p["total_count"].as_u64())
        .unwrap_or(0);
    let c = &last_probe(&lines, "cycle").expect("no cycle line")["cycle"];
    let cycles = c["total_cycles"].as_u64().unwrap_or(0);
    eprintln!(
        "stop: fixture backlog {backlog} cycles, longest gap {gap} ns; probe cycles {cycles}, wakeups {wakeups}, \
         stopped causes {stopped:?}, {} backlog causes, timer_irq_delay over 1 ms {late:?}",
        backlogged.len()
    );
    assert!(gap > 4_000_000_000 && backlog > 4000, "the fixture was not stopped 5 s: gap {gap}, backlog {backlog}");
    let late = timer_did_not_cause(&rows, &late);
    assert!(late.is_empty(), "timer_irq_delay over 1 ms the timer did not cause: {late:?}");
    assert!(stopped.iter().any(|&ns| ns > 4_000_000_000), "no stopped cause of the stop: {stopped:?}");
    assert!(!backlogged.is_empty(), "no backlog cause");
    // A backlog release (or the stopped one) is no wakeup.
    assert!(
        wakeups <= cycles.saturating_sub(backlog as u64) + 2,
        "cycle:wakeup counted {wakeups} of {cycles} cycles, {backlog} of them backlog"
    );
}

/// Issue 40 item 8: a release that passed while the loop still ran (a
/// backlog: its sleep returns at once) inflated cycle:wakeup (p99 714 us
/// against p50 56 us) and read as timer irq delay. Its gap is `backlog`,
/// and no wakeup.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_backlog_release_is_backlog_not_a_wakeup() {
    let _s = serial();
    let (rows, lines) = run_fixture(&["2000", "1000", "25", "100", "3000"], &[], &["catchup"]);
    let backlog = rows.windows(2).filter(|w| w[1].release <= w[0].done).count() as u64;
    let (backlogged, late) = causes_of(&lines, "backlog");
    let probe = |name: &str| {
        lines
            .last()
            .and_then(|l| l["probes"].as_array()?.iter().find(|p| p["name"] == name).cloned())
            .unwrap_or_default()
    };
    let w = probe("cycle:wakeup");
    let cycles = probe("cycle")["cycle"]["total_cycles"].as_u64().unwrap_or(0);
    let wakeups = w["total_count"].as_u64().unwrap_or(0);
    eprintln!(
        "backlog: fixture {backlog} backlog releases of {} cycles; probe cycles {cycles}, wakeups {wakeups} \
         (p50 {} p99 {}), {} backlog causes, timer_irq_delay over 1 ms {late:?}",
        rows.len(),
        w["p50_ns"],
        w["p99_ns"],
        backlogged.len()
    );
    assert!(backlog > 0, "the fixture made no backlog");
    let late = timer_did_not_cause(&rows, &late);
    assert!(late.is_empty(), "timer_irq_delay over 1 ms the timer did not cause: {late:?}");
    assert!(!backlogged.is_empty(), "no backlog cause");
    assert!(
        wakeups.abs_diff(cycles.saturating_sub(backlog)) <= 2,
        "cycle:wakeup counted {wakeups}: {cycles} cycles, {backlog} of them backlog (no wakeup)"
    );
}

/// Issue 40 item 8: a CLOCK_REALTIME step back by 2 s under a loop
/// sleeping on CLOCK_REALTIME absolute read "miss 2.00s: timer irq delay"
/// for a sleep that woke on time by its clock. The release follows the
/// clock: no timer_irq_delay over 1 ms, no miss the loop did not have.
/// The clock is stepped forward again after (restored to within the
/// steps' own time).
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_realtime_clock_step_is_no_timer_delay() {
    let _s = serial();
    use nix::time::{clock_gettime, clock_settime, ClockId};
    fn step(by: i64) {
        let t = clock_gettime(ClockId::CLOCK_REALTIME).expect("clock_gettime");
        let t = nix::sys::time::TimeSpec::new(t.tv_sec() + by, t.tv_nsec());
        clock_settime(ClockId::CLOCK_REALTIME, t).expect("clock_settime");
    }
    /// Steps the clock forward again however the test ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            if self.0 {
                step(2);
            }
        }
    }
    let mut restore = Restore(false);
    // Back 2 s under the running loop; forward again once it is done (a
    // step forward inside one of its sleeps, before that sleep's 2 s have
    // passed, is not covered: see docs/probes.md).
    let (rows, lines) = run_fixture_with(&["4000", "1000", "100000", "100", "0"], &[], &["realtime"], |_| {
        std::thread::sleep(std::time::Duration::from_millis(1500));
        step(-2);
        restore.0 = true;
    });
    drop(restore);
    // On CLOCK_REALTIME: a step inside a cycle moves its done against
    // its release (backward: before it).
    let own = rows[SETTLE..].iter().filter(|r| r.done.saturating_sub(r.release) > PERIOD_NS).count() as u64;
    let (_, late) = causes_of(&lines, "timer_irq_delay");
    // Rows on CLOCK_REALTIME, the records' releases on CLOCK_MONOTONIC: a
    // delay is the timer's if the loop itself woke that late after a
    // release (seen 1.35 and 4.79 ms on this shared host, each one of the
    // loop's own misses); the step's 2 s is not.
    let woke_late =
        |ns: u64| rows.iter().any(|r| r.wake.saturating_sub(r.release) + 100_000 >= ns && ns < 1_000_000_000);
    let late: Vec<(u64, u64)> = late.into_iter().filter(|&(_, ns)| !woke_late(ns)).collect();
    let c = &last_probe(&lines, "cycle").expect("no cycle line")["cycle"];
    let (cycles, misses) = (c["total_cycles"].as_u64().unwrap_or(0), c["total_misses"].as_u64().unwrap_or(0));
    eprintln!(
        "clock step: probe cycles {cycles}, misses {misses} (the loop's own {own}), timer_irq_delay over 1 ms {late:?}"
    );
    assert!(late.is_empty(), "timer_irq_delay over 1 ms the timer did not cause: {late:?}");
    assert!(misses <= own + 2, "misses {misses}, the loop's own {own}");
}

/// A loop that blocks in read() on a periodic CLOCK_MONOTONIC timerfd
/// (no sleep syscall): its releases are the timer's expiries (the reader
/// found on the timerfd's wait queue at the expiry, done at its next read
/// of it), so its cycles, period and misses are found as a sleeping
/// loop's, and each miss's record carries the fixture's release.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_timerfd_loops_period_and_misses_are_found() {
    let _s = serial();
    let (rows, lines) = run(1_500, &[], &["timerfd"]);
    let p = last_probe(&lines, "cycle").expect("no cycle line");
    let c = &p["cycle"];
    let cycles = c["total_cycles"].as_u64().unwrap();
    let period = c["period_ns"].as_u64().unwrap_or(0);
    let misses = c["total_misses"].as_u64().unwrap();
    let unseen = c["total_unseen"].as_u64().unwrap_or(0);
    let judged: Vec<&Row> = rows[SETTLE..].iter().filter(|r| r.missed()).collect();
    let fixture = judged.len() as u64;
    let recs: HashMap<u64, (u64, String)> = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["probe"] == "cycle" && r["event"] == "miss")
        .filter_map(|r| Some((r["release_ns"].as_u64()?, (r["done_ns"].as_u64()?, r["causes"].to_string()))))
        .collect();
    let matched = judged.iter().filter(|r| recs.contains_key(&r.release)).count();
    eprintln!(
        "timerfd loop: cycles {cycles} ({unseen} unseen), period_ns {period}, misses {misses} (fixture {fixture}), {matched} records \
         at the fixture's release"
    );
    let at: HashMap<u64, usize> = rows.iter().enumerate().map(|(i, r)| (r.release, i)).collect();
    for r in judged.iter().filter(|r| !recs.contains_key(&r.release)).take(5) {
        let i = at[&r.release];
        eprintln!(
            "  fixture miss without a record: [{}], the row before [{}]",
            row_from(r, r.release),
            row_from(&rows[i.saturating_sub(1)], r.release)
        );
    }
    // Records at a release the fixture does not call a miss. One kind is
    // the same cycle seen one period apart: after an overrun (the row
    // before ran past the record's release) the kernel ran the timerfd's
    // expiry only once the loop blocked in read() (here: ~1 ms late,
    // `timer_irq_delay`, right after some page-fault overruns). The probe
    // releases the cycle at the latest expiry at that callback, the
    // fixture at the latest its read consumed, which the read's return
    // had passed by a few us: a release one period later, the same done.
    let mut shifted = 0u64;
    for (release, (done, causes)) in recs.iter().filter(|(rel, _)| !judged.iter().any(|r| r.release == **rel)) {
        let next = at.get(&(release + PERIOD_NS)).copied().filter(|&i| i > 0);
        let same = next.is_some_and(|i| rows[i - 1].done > *release && rows[i].done.abs_diff(*done) <= 50_000);
        shifted += u64::from(same);
        eprintln!(
            "  record not a fixture miss{}: release {release}, done +{} us, causes {causes}; fixture rows around: {}",
            if same { " (the next row's cycle, after an overrun)" } else { "" },
            done.saturating_sub(*release) / 1000,
            next.map_or("none".into(), |i| format!(
                "[{}] [{}]",
                row_from(&rows[i - 1], *release),
                row_from(&rows[i], *release)
            ))
        );
    }
    assert!(cycles >= rows.len() as u64 - 2, "cycles {cycles} of the fixture's {}", rows.len());
    assert!(period.abs_diff(PERIOD_NS) * 100 <= PERIOD_NS, "period_ns {period}");
    assert!(fixture > 0, "the fixture injected no miss");
    assert!(
        misses.abs_diff(fixture + shifted) <= 2,
        "misses {misses} vs the fixture's {fixture} (+ {shifted} seen a period apart)"
    );
    assert!(matched as u64 * 100 >= fixture * 95, "{matched} of {fixture} misses have a record at their release");
}

/// A timerfd loop watched without `timerfd=true` is not followed (the
/// read program is not attached): the probe says so once, naming the
/// thread that holds the timerfd, rather than counting nothing in
/// silence. After a privilege drop to another user (root's loop's open
/// files unreadable) it names the thread as one that may hold one.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_timerfd_loop_without_timerfd_true_gets_a_hint_naming_it() {
    let _s = serial();
    let (pid, hints) = timerfd_hint_run(&["--probe", "cycle,comm=lm_cycle", "--interval", "1s", "--format", "json"]);
    assert_eq!(hints.len(), 1, "one hint, once: {hints:?}");
    assert!(
        hints[0].contains(&format!("lm_cycle[{pid}/{pid}] holds a timerfd")),
        "the hint names the loop: {}",
        hints[0]
    );
    assert!(hints[0].contains("timerfd=true"), "the hint says what to add: {}", hints[0]);

    let cfg = scratch("cycle-hint", "cycle-hint.toml");
    std::fs::write(
        &cfg,
        "probes = [\"cycle,comm=lm_cycle\"]\ninterval = \"1s\"\nformat = \"json\"\nuser = \"nobody\"\ngroup = \"nogroup\"\n",
    )
    .unwrap();
    let (pid, hints) = timerfd_hint_run(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(hints.len(), 1, "one hint after the privilege drop: {hints:?}");
    assert!(
        hints[0].contains(&format!("lm_cycle[{pid}/{pid}] holds or may hold (its open files are not readable")),
        "after the drop the loop is named as one that may hold a timerfd: {}",
        hints[0]
    );
}

/// `latmon run ARGS` beside 7 s of a quiet 1 kHz timerfd loop (past the
/// hint's 5 s and the interval read that follows): the loop's pid and
/// latmon's stderr lines that hint at a timerfd.
fn timerfd_hint_run(args: &[&str]) -> (u32, Vec<String>) {
    use std::process::Stdio;
    use std::sync::{Arc, Mutex};
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut cmd = latmon();
    cmd.arg("-v").arg("run").args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    let seen = lines.clone();
    let (agent, _) = spawn_ready(cmd, common::READY_WITHIN, move |l| seen.lock().unwrap().push(l.into()));
    let file = scratch("cycle-hint", "lm_cycle.rows");
    let fixture = Command::new(lm_cycle())
        .args(["7000", "1000", "1000000", "100", "1"])
        .arg(&file)
        .arg("timerfd")
        .stdout(Stdio::null())
        .spawn()
        .expect("lm_cycle");
    let pid = fixture.id();
    let status = fixture.wait_with_output().expect("lm_cycle").status;
    let _ = std::fs::remove_file(&file);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let agent_status = { agent }.wait().unwrap();
    assert!(status.success() && agent_status.success(), "lm_cycle {status}, latmon {agent_status}");
    let lines = lines.lock().unwrap();
    let hints: Vec<String> = lines.iter().filter(|l| l.contains("a timerfd:")).cloned().collect();
    eprintln!("hints: {hints:?}");
    (pid, hints)
}

/// The loop's records over a frames link (wire revision 8): `latmon
/// decode` of a `file:` frames output written beside the JSON output
/// gives every miss and overrun record, field for field, as the agent's
/// JSON has it (event, release, deadline, done, doing, causes).
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_loops_records_cross_a_frames_link_as_the_agent_prints_them() {
    let _s = serial();
    let cap = scratch("cycle-frames", "capture.bin");
    let out_frames = format!("file:{},format=frames", cap.display());
    let file = std::env::temp_dir().join(format!("latmon-cycle-io-frames-{}", std::process::id()));
    let args = ["--probe", "cycle,comm=lm_cycle", "--interval", "1s", "--format", "json", "--output", "-"];
    let child = start_run_env(&[&args[..], &["--output", &out_frames]].concat(), &[]);
    let out = Command::new(lm_cycle()).args(["2000", "1000", "25", "100", "3000"]).arg(&file).output().unwrap();
    let _ = std::fs::remove_file(&file);
    let (status, json) = stop(child);
    assert!(status.success() && out.status.success(), "latmon {status}, lm_cycle {}", out.status);
    let agent: Vec<serde_json::Value> = json_lines(&json)
        .iter()
        .flat_map(|l| l["alert_records"].as_array().cloned().unwrap_or_default())
        .filter(|r| r.get("event").is_some())
        .collect();
    let dec = latmon().arg("decode").arg(format!("file:{}", cap.display())).output().unwrap();
    assert!(dec.status.success(), "decode: {}", String::from_utf8_lossy(&dec.stderr));
    let received: Vec<serde_json::Value> = json_lines(&String::from_utf8_lossy(&dec.stdout))
        .into_iter()
        .filter(|l| l["type"] == "alert" && l.get("event").is_some())
        .map(|mut l| {
            l.as_object_mut().unwrap().remove("type");
            l
        })
        .collect();
    let count = |v: &[serde_json::Value], e: &str| v.iter().filter(|r| r["event"] == e).count();
    println!(
        "cycle over frames: agent {} records ({} misses, {} overruns), received {}",
        agent.len(),
        count(&agent, "miss"),
        count(&agent, "overrun"),
        received.len()
    );
    assert!(count(&agent, "miss") >= 40 && count(&agent, "overrun") >= 5, "the fixture's misses: {}", agent.len());
    assert_eq!(received.len(), agent.len(), "every record crossed the link");
    for (a, r) in agent.iter().zip(&received) {
        assert_eq!(a, r, "a record changed on the link");
    }
}
