// SPDX-License-Identifier: MIT
//! Live tests of a watched thread's life under the `cycle` and `lock`
//! probes (issue 40, root, this kernel), against tests/fixtures/lm_life.c,
//! which logs per loop thread its sleeps (one per release), its futex
//! waits and its own late cycles:
//! - threads that come and go: 80 loop threads one after another, a
//!   controller restarted 70 times: every cycle and wait counted (the
//!   watched sets were never freed at exit: counting stopped at the 64th
//!   thread), and no overrun at a loop's exit;
//! - a dead loop's thread id given to another program, and a loop that
//!   execs another: nothing of the other program counted;
//! - a sleep a signal interrupted (EINTR), slept again to the same
//!   release: one cycle; an invalid futex op (ENOSYS): no wait;
//! - futex waits that only time out, beside a futex-heavy SCHED_OTHER
//!   load on the loop's CPU: no `woken_by_lower` (the timer's interrupt
//!   is no waker).

use crate::common;

use std::process::Command;

use common::*;

/// tests/fixtures/lm_life.c, named `lm-life`: its main thread's comm
/// until it names itself is not the loops' `lm_life`.
fn lm_life() -> &'static std::path::Path {
    compile_fixture("lm_life", "lm-life", &["-O2", "-pthread"])
}

/// One loop (or other program) as the fixture logged it.
#[derive(Debug, Default, Clone)]
struct Loop {
    sleeps: u64,
    waits: u64,
    late: u64,
    eintr: u64,
    tmo: u64,
    woken: u64,
}

#[derive(Debug, Default)]
struct Fixture {
    loops: Vec<Loop>,
    others: Vec<Loop>,
}

impl Fixture {
    /// The cycles a probe counts of the loops: each loop's releases but
    /// its last, whose cycle ends in its exit (neither a cycle nor a miss).
    fn cycles(&self) -> u64 {
        self.loops.iter().map(|l| l.sleeps - 1).sum()
    }
    fn sum(&self, f: impl Fn(&Loop) -> u64) -> u64 {
        self.loops.iter().map(f).sum()
    }
}

/// Run `lm-life ARGS` once per entry of `runs`, one after another, under
/// one latmon with `probes`: what the fixture logged, latmon's JSON lines.
fn run(runs: &[Vec<String>], probes: &[&str]) -> (Fixture, Vec<serde_json::Value>) {
    let mut args = vec![];
    for p in probes {
        args.extend(["--probe", p]);
    }
    args.extend(["--interval", "1s", "--format", "json"]);
    let child = start_run(&args);
    let mut fx = Fixture::default();
    for r in runs {
        let out = Command::new(lm_life()).args(r).output().expect("lm-life");
        assert!(out.status.success(), "lm-life {r:?}: {}", String::from_utf8_lossy(&out.stderr));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let n =
                |k: &str| f.iter().find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse::<u64>().ok()).unwrap_or(0);
            let l = Loop {
                sleeps: n("sleeps"),
                waits: n("waits"),
                late: n("late"),
                eintr: n("eintr"),
                tmo: n("tmo"),
                woken: n("woken"),
            };
            match f.first() {
                Some(&"loop") => fx.loops.push(l),
                Some(&"other") => fx.others.push(l),
                _ => {}
            }
        }
    }
    // The last interval's read must follow the fixture's end.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (status, json) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    (fx, json_lines(&json))
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// What the probes counted: the cycle line's totals and the lock line's
/// waits.
#[derive(Debug, Default)]
struct Counted {
    cycles: u64,
    misses: u64,
    overruns: u64,
    woken_by_lower: u64,
    waits: u64,
    /// Overrun records of a loop blocked in its exit.
    exit_overruns: usize,
    drops: u64,
}

fn counted(lines: &[serde_json::Value]) -> Counted {
    let mut c = Counted::default();
    if let Some(p) = last_probe(lines, "cycle") {
        let y = &p["cycle"];
        c.cycles = y["total_cycles"].as_u64().unwrap_or(0);
        c.misses = y["total_misses"].as_u64().unwrap_or(0);
        c.overruns = y["total_overruns"].as_u64().unwrap_or(0);
        c.woken_by_lower = y["total_rule_counts"]["woken_by_lower"].as_u64().unwrap_or(0);
    }
    let probes = || lines.iter().flat_map(|l| l["probes"].as_array().into_iter().flatten());
    c.waits = probes().filter(|p| p["name"] == "lock").filter_map(|p| p["total_count"].as_u64()).max().unwrap_or(0);
    c.drops = probes().filter_map(|p| p["drops"].as_u64()).sum();
    c.exit_overruns = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .filter(|r| r["event"] == "overrun")
        .filter(|r| r["doing"]["syscall"].as_str().is_some_and(|s| s.starts_with("exit")))
        .count();
    c
}

/// Every cycle and wait of the loops, none of anything else, no overrun
/// at an exit (any overrun is one of the loops' own late cycles).
fn check_counts(what: &str, fx: &Fixture, c: &Counted) {
    eprintln!(
        "{what}: fixture {} loops, cycles {} waits {} late {}; counted {c:?}",
        fx.loops.len(),
        fx.cycles(),
        fx.sum(|l| l.waits),
        fx.sum(|l| l.late)
    );
    let mut bad = vec![];
    if c.cycles != fx.cycles() {
        bad.push(format!("cycles {} of the loops' {}", c.cycles, fx.cycles()));
    }
    if c.waits != fx.sum(|l| l.waits) {
        bad.push(format!("waits {} of the loops' {}", c.waits, fx.sum(|l| l.waits)));
    }
    if c.exit_overruns > 0 || c.overruns > fx.sum(|l| l.late) {
        bad.push(format!(
            "{} overruns ({} of a loop in its exit), the loops were late {} times",
            c.overruns,
            c.exit_overruns,
            fx.sum(|l| l.late)
        ));
    }
    assert!(bad.is_empty(), "{what}: {}", bad.join("; "));
}

const PROBES: [&str; 2] = ["cycle,comm=lm_life", "lock,comm=lm_life"];

/// 80 loop threads one after another (50 releases each): more than the
/// 64 the probes hold at once, never more than one alive.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn loop_threads_one_after_another_are_all_counted() {
    let _s = serial();
    let (fx, lines) = run(&[args(&["seq", "80", "50"])], &PROBES);
    assert_eq!(fx.loops.len(), 80, "the fixture's loops");
    check_counts("80 threads", &fx, &counted(&lines));
}

/// A controller process restarted 70 times (5 releases each), then a run
/// of 2 000: every run counted, the last one whole.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_controller_restarted_70_times_is_seen_every_time() {
    let _s = serial();
    let mut runs = vec![args(&["one", "5"]); 70];
    runs.push(args(&["one", "2000"]));
    let (fx, lines) = run(&runs, &PROBES);
    assert_eq!(fx.loops.len(), 71, "the fixture's runs");
    check_counts("70 restarts + 2000", &fx, &counted(&lines));
}

/// A dead loop's thread id given to another program (clone3 set_tid),
/// and a loop that execs another program (the same thread id, another
/// image): only the loop's own cycles and waits are counted.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn another_program_on_a_dead_or_execd_loops_tid_is_not_followed() {
    let _s = serial();
    for mode in ["reuse", "exec"] {
        let (fx, lines) = run(&[args(&[mode, "300"])], &PROBES);
        assert_eq!((fx.loops.len(), fx.others.len()), (1, 1), "{mode}: the fixture's loop and other program");
        check_counts(mode, &fx, &counted(&lines));
    }
}

/// A loop whose sleep a signal interrupts (EINTR, its handler running
/// past the release) and that sleeps again to the same release: one
/// cycle per release, as many as the loop's sleeps.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_sleep_a_signal_interrupted_is_one_release() {
    let _s = serial();
    let (fx, lines) = run(&[args(&["sig", "1000"])], &PROBES[..1]);
    let c = counted(&lines);
    eprintln!("sig: {} EINTR, cycles {} of {}", fx.sum(|l| l.eintr), c.cycles, fx.cycles());
    assert!(fx.sum(|l| l.eintr) >= 200, "the fixture's sleeps were interrupted {} times", fx.sum(|l| l.eintr));
    assert_eq!(c.cycles, fx.cycles(), "cycles of a loop with {} interrupted sleeps", fx.sum(|l| l.eintr));
}

/// futex(0x200 | FUTEX_WAIT) is no command (ENOSYS): no wait.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn an_invalid_futex_op_is_no_wait() {
    let _s = serial();
    let (fx, lines) = run(&[args(&["badop", "500"])], &PROBES[1..]);
    let c = counted(&lines);
    eprintln!("badop: waits {} of the loop's {}", c.waits, fx.sum(|l| l.waits));
    assert_eq!(c.waits, fx.sum(|l| l.waits), "waits counted");
}

/// A FIFO loop whose futex waits all time out (its hrtimer wakes it),
/// beside two SCHED_OTHER threads in a futex ping-pong on its CPU: the
/// timer's interrupt lands in their futex calls, yet no task woke the
/// loop: `woken_by_lower` at most 1 % of the timeouts.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_futex_timeout_is_no_wakeup_by_a_lower_task() {
    let _s = serial();
    let (fx, lines) = run(&[args(&["tmo", "3000"])], &PROBES[..1]);
    let c = counted(&lines);
    let (tmo, woken) = (fx.sum(|l| l.tmo), fx.sum(|l| l.woken));
    eprintln!("tmo: {tmo} waits timed out, {woken} woken; woken_by_lower {}", c.woken_by_lower);
    assert!(tmo >= 2900, "the fixture's waits timed out {tmo} times");
    assert!(c.woken_by_lower * 100 <= tmo, "woken_by_lower {} of {tmo} timed-out waits", c.woken_by_lower);
}
