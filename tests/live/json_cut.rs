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
    let out = Command::new("stress-ng")
        .args(["--fork", "2", "--futex", "2", "--timer", "2", "--io", "1", "--timeout", "10s", "--quiet"])
        .output()
        .expect("stress-ng");
    assert!(out.status.success(), "stress-ng: {}", String::from_utf8_lossy(&out.stderr));
    let (status, json) = stop(latmon);
    assert!(status.success(), "latmon exited with {status}");
    let longest = json.lines().map(str::len).max().unwrap_or(0);
    let lines = json_lines(&json);
    let seqs: Vec<u64> = lines.iter().map(|l| u(l, "seq")).collect();
    let cut: Vec<u64> = lines.iter().map(|l| l["alert_records_cut"].as_u64().unwrap_or(0)).collect();
    let kept: Vec<usize> = lines.iter().map(|l| l["alert_records"].as_array().map_or(0, Vec::len)).collect();
    eprintln!("seqs {seqs:?}\nrecords kept {kept:?}\nrecords cut {cut:?}\nlongest line {longest} bytes");
    assert!(seqs.len() >= 10, "a line per second of the 10 s load: {seqs:?}");
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every interval, from the first");
    assert!(lines.last().unwrap()["last"] == true, "the final summary too");
    assert!(cut.iter().any(|&c| c > 0), "the storm is over the bound: some records cut");
    assert!(longest < 256 * 1024, "each line fits the queue: {longest} bytes");
}
