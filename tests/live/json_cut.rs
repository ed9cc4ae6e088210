// SPDX-License-Identifier: MIT
//! Live test of the JSON output under an alert storm (root, this kernel;
//! issue 40 item 5): five families with 1 us thresholds while stress-ng
//! forks, contends futexes, arms timers and does I/O. Their records in an
//! interval ran past the output's 256 KiB queue and each whole line was
//! dropped: stdout stayed empty. Every interval's line must go out (its
//! `seq` one more than the last, none missing up to the final one), each
//! under 256 KiB, its records cut at the documented bound and counted in
//! `alert_records_cut`.

use crate::common;

use std::process::Command;

use common::*;

/// CLOCK_MONOTONIC, the clock of latmon's `time_ns`.
fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

#[test]
#[ignore = "root, live kernel"]
fn every_json_interval_goes_out_under_an_alert_storm_with_its_cut_records_counted() {
    let _g = serial();
    let probes = [
        "syscall,threshold=1us",
        "runq,threshold=1us",
        "timer,threshold=1us",
        "irq,threshold=1us",
        "lock,comm=stress-ng-futex,threshold=1us",
    ];
    let mut args = Vec::new();
    for p in probes {
        args.extend(["--probe", p]);
    }
    args.extend(["--interval", "1s", "--format", "json"]);
    let latmon = start_run(&args);
    let stress_from = now_ns();
    let out = Command::new("stress-ng")
        .args(["--fork", "2", "--futex", "2", "--timer", "2", "--io", "1", "--timeout", "10s", "--quiet"])
        .output()
        .expect("stress-ng");
    assert!(out.status.success(), "stress-ng: {}", String::from_utf8_lossy(&out.stderr));
    let stress_to = now_ns();
    let (status, json) = stop(latmon);
    assert!(status.success(), "latmon exited with {status}");
    let longest = json.lines().map(str::len).max().unwrap_or(0);
    let lines = json_lines(&json);
    let seqs: Vec<u64> = lines.iter().map(|l| u(l, "seq")).collect();
    let cut: Vec<u64> = lines.iter().map(|l| l["alert_records_cut"].as_u64().unwrap_or(0)).collect();
    let kept: Vec<usize> = lines.iter().map(|l| l["alert_records"].as_array().map_or(0, Vec::len)).collect();
    eprintln!("seqs {seqs:?}\nrecords kept {kept:?}\nrecords cut {cut:?}\nlongest line {longest} bytes");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every interval, from the first");
    // The lines cover the whole storm with no gap, by latmon's own
    // stamps (CLOCK_MONOTONIC, the test's clock): each line's interval
    // ends where the one before it did, the first began before the storm
    // and the final one ended after it. Not a count of lines per second:
    // under a CPU storm the agent may skip a tick (src/agent/run.rs) and
    // its next line then covers both (a count once read 9 for 10 s).
    let spans: Vec<(u64, u64)> =
        lines.iter().map(|l| (u(l, "time_ns") - u(l, "interval_ns"), u(l, "time_ns"))).collect();
    for w in spans.windows(2) {
        assert_eq!(w[1].0, w[0].1, "a gap between two lines: {spans:?}");
    }
    assert!(spans[0].0 <= stress_from, "the first line began after the storm did: {spans:?}, storm from {stress_from}");
    assert!(
        spans[spans.len() - 1].1 >= stress_to,
        "the final line ended before the storm did: {spans:?}, to {stress_to}"
    );
    assert!(lines.last().unwrap()["last"] == true, "the final summary too");
    assert!(cut.iter().any(|&c| c > 0), "the storm is over the bound: some records cut");
    assert!(longest < 256 * 1024, "each line fits the queue: {longest} bytes");
}
