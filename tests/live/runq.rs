// SPDX-License-Identifier: MIT
//! Live tests of the runq probe on this kernel (root): real BPF programs,
//! a real pipe ping-pong workload, numbers read back through the CLI.

use crate::common;

use common::*;

const ROUND_TRIPS: usize = 2000;

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_counts_ping_pong_wakeups_filtered_by_comm() {
    ping_pong_case("lm-pingpong", &[], "tp_btf");
}

/// The raw_tp fallback (pid-keyed hash) measures the same workload.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_raw_tp_fallback_counts_ping_pong_wakeups() {
    ping_pong_case("lm-pingraw", &[("LATMON_SKIP_ATTACH", "tp_btf")], "raw_tp");
}

/// The no-BTF build (classic tracepoints, record layout from tracefs
/// format files), as on a kernel without BTF.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_no_btf_tracepoint_build_counts_ping_pong_wakeups() {
    ping_pong_case("lm-pingtp", &[("LATMON_FORCE_NO_BTF", "1")], "tracepoint");
}

/// CO-RE (tp_btf) and the no-BTF tracepoint build side by side in one run,
/// on the same workload and window: they must count the same events.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_tracepoint_build_agrees_with_co_re_on_the_same_workload() {
    let comm = "lm-pingboth";
    let core = format!("runq,comm={comm},name=core");
    let tp = format!("runq,comm={comm},attach=tracepoint,name=tp");
    let child = start_run_env(&["--probe", &core, "--probe", &tp, "--interval", "500ms", "--format", "json"], &[]);
    pipe_ping_pong(comm, ROUND_TRIPS);
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let last = |name: &str| {
        lines.last().unwrap()["probes"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned().unwrap()
    };
    let (c, t) = (last("core"), last("tp"));
    assert_eq!((c["attach"].as_str(), t["attach"].as_str()), (Some("tp_btf"), Some("tracepoint")));
    let (nc, nt) = (u(&c, "total_count"), u(&t, "total_count"));
    eprintln!("runq on {ROUND_TRIPS} ping-pong round trips: CO-RE tp_btf {nc}, no-BTF tracepoint {nt}");
    assert!(nc >= 2 * ROUND_TRIPS as u64 && nt >= 2 * ROUND_TRIPS as u64, "core {nc}, tracepoint {nt}");
    // Only the stamp of a task preempted while going to sleep differs (the
    // tracepoint's prev_state says runnable, task->__state does not).
    assert!(nc.abs_diff(nt) <= nc / 50 + 10, "core {nc} vs tracepoint {nt} events on the same workload");
    assert_eq!((u(&c, "total_drops"), u(&t, "total_drops")), (0, 0));
}

/// pid= without task structs: the tracepoint build learns the process's
/// threads at their switch-outs. Our own threads count; the same comm
/// under another process's pid does not.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_tracepoint_pid_filter_admits_only_that_process() {
    let comm = "lm-pingpid";
    let me = format!("runq,comm={comm},pid={},attach=tracepoint,name=mine", std::process::id());
    let other = format!("runq,comm={comm},pid=1,attach=tracepoint,name=init");
    let child = start_run_env(&["--probe", &me, "--probe", &other, "--interval", "500ms", "--format", "json"], &[]);
    pipe_ping_pong(comm, ROUND_TRIPS);
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let total = |name: &str| {
        u(
            lines.last().unwrap()["probes"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap(),
            "total_count",
        )
    };
    // Each thread's first wakeup may precede its first switch-out.
    assert!(
        total("mine") >= 2 * ROUND_TRIPS as u64 - 2,
        "pid filter counted {} of >= {}",
        total("mine"),
        2 * ROUND_TRIPS
    );
    assert_eq!(total("init"), 0, "no thread named {comm} belongs to pid 1");
}

fn ping_pong_case(comm: &str, env: &[(&str, &str)], attach: &str) {
    let spec = format!("runq,comm={comm}");
    let child = start_run_env(&["--probe", &spec, "--interval", "300ms", "--duration", "3s", "--format", "json"], env);
    pipe_ping_pong(comm, ROUND_TRIPS);
    let (status, out) = finish(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    assert!(lines.len() >= 3, "expected several intervals, got {}", lines.len());

    let mut total = 0;
    let mut seq_prev = 0;
    for l in &lines {
        assert!(u(l, "seq") > seq_prev, "seq must increase");
        seq_prev = u(l, "seq");
        let p = &l["probes"][0];
        assert_eq!(p["name"], "runq", "options are not part of the default name");
        assert_eq!(p["kind"], "runq");
        assert_eq!(p["attach"], attach);
        let count = u(p, "count");
        total += count;
        assert_eq!(u(p, "total_count"), total, "total_count is the running sum of interval counts");
        let bucket_sum: u64 = p["buckets"].as_array().unwrap().iter().map(|b| b[2].as_u64().unwrap()).sum();
        assert_eq!(bucket_sum, count, "buckets add up to the interval count");
        if count > 0 {
            let (p50, p90, p99, p999, max, min) =
                (u(p, "p50_ns"), u(p, "p90_ns"), u(p, "p99_ns"), u(p, "p999_ns"), u(p, "max_ns"), u(p, "min_ns"));
            assert!(min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max, "{p}");
        }
        assert_eq!(u(p, "drops"), 0);
    }
    assert!(
        total >= 2 * ROUND_TRIPS as u64,
        "counted {total} run-queue events for {ROUND_TRIPS} round trips on one CPU (need >= {})",
        2 * ROUND_TRIPS
    );
    // The busiest interval's median wait of a pipe wakeup on one CPU: more
    // than nothing, far less than a scheduler tick storm.
    let busiest = lines.iter().map(|l| &l["probes"][0]).max_by_key(|p| u(p, "count")).unwrap();
    let p50 = u(busiest, "p50_ns");
    assert!((100..5_000_000).contains(&p50), "implausible p50 {p50} ns");
    assert!(u(busiest, "max_ns") >= u(busiest, "p99_ns"));
    assert_eq!(lines.last().unwrap()["last"], true, "the final summary is marked");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn comm_filter_excludes_other_tasks() {
    let child = start_run(&[
        "--probe",
        "runq,comm=lm-nobody-here",
        "--interval",
        "200ms",
        "--duration",
        "1500ms",
        "--format",
        "json",
    ]);
    pipe_ping_pong("lm-other", 500);
    let (status, out) = finish(child);
    assert!(status.success());
    let total: u64 = json_lines(&out).iter().map(|l| u(&l["probes"][0], "count")).sum();
    assert_eq!(total, 0, "no task is named lm-nobody-here");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn sigint_flushes_final_summary_and_detaches() {
    let child = start_run(&["--probe", "runq", "--interval", "10s", "--format", "json"]);
    let ours = prog_ids_of(child.id());
    assert_eq!(ours.len(), 3, "runq runs three programs (wakeup, wakeup_new, switch): {ours:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let (status, out) = finish(child);
    assert!(status.success(), "SIGINT is a clean stop: {status}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "one (final) summary before the first 10 s interval");
    assert_eq!(lines[0]["last"], true);
    assert!(u(&lines[0], "interval_ns") < 5_000_000_000);
    // Links destroyed, programs unloaded: none of its programs remain (the
    // kernel frees programs from a deferred work item: allow it a moment).
    let mut left = Vec::new();
    for _ in 0..50 {
        left = all_prog_ids().into_iter().filter(|id| ours.contains(id)).collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(left.is_empty(), "latmon programs remain loaded: {left:?}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn sigterm_is_a_clean_stop_too() {
    let child = start_run(&["--probe", "runq", "--interval", "10s"]);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let (status, out) = finish(child);
    assert!(status.success());
    assert!(out.contains("(final)"), "text output flushed the final summary: {out}");
    assert!(out.contains("P99.9"), "the final summary is the table: {out}");
}

/// `threshold=`: every wait above it counts in `alerts` and becomes an
/// alert record naming the task that waited (the one switched in, not the
/// one leaving the CPU), rate-limited in the kernel with every refused
/// record counted - in each build.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_waits_above_the_threshold_become_alert_records_in_every_build() {
    use latmon::bpf::limits::{ALERT_BURST, ALERT_RATE};
    for (comm, env, attach) in [
        ("lm-rqa-btf", &[][..], "tp_btf"),
        ("lm-rqa-raw", &[("LATMON_SKIP_ATTACH", "tp_btf")][..], "raw_tp"),
        ("lm-rqa-tp", &[("LATMON_FORCE_NO_BTF", "1")][..], "tracepoint"),
    ] {
        let spec = format!("runq,comm={comm},threshold=1ns");
        let child = start_run_env(&["--probe", &spec, "--interval", "60m", "--format", "json"], env);
        let t0 = std::time::Instant::now();
        pipe_ping_pong(comm, 500);
        let secs = t0.elapsed().as_secs_f64() + 0.5;
        let (status, out) = stop(child);
        assert!(status.success(), "latmon exited with {status}");
        let lines = json_lines(&out);
        let p = lines.last().unwrap()["probes"][0].clone();
        assert_eq!(p["attach"], attach);
        let recs: Vec<&serde_json::Value> = lines
            .iter()
            .filter_map(|l| l["alert_records"].as_array())
            .flatten()
            .filter(|r| r["probe"] == "runq")
            .collect();
        let (count, alerts, dropped) = (u(&p, "total_count"), u(&p, "total_alerts"), u(&p, "total_alerts_dropped"));
        eprintln!(
            "FIGURES runq alerts ({attach}): {count} waits, {alerts} above 1 ns: {} records, {dropped} dropped",
            recs.len()
        );
        assert!(count >= 1000, "{p}");
        assert_eq!(alerts, count, "every wait is longer than 1 ns: {p}");
        assert_eq!(recs.len() as u64 + dropped, alerts, "every alert is a record or a counted drop: {p}");
        let allowed = ALERT_BURST as u64 + (ALERT_RATE as f64 * secs).ceil() as u64 + 2;
        assert!(
            recs.len() as u64 >= ALERT_BURST as u64 && recs.len() as u64 <= allowed,
            "{} records (allowed {allowed})",
            recs.len()
        );
        for r in &recs {
            assert_eq!(r["comm"], comm, "the record names the task that waited: {r}");
            assert!(u(r, "latency_ns") >= 1 && u(r, "tid") > 0, "{r}");
            if attach != "tracepoint" {
                assert_eq!(u(r, "pid"), std::process::id() as u64, "pid is the thread group: {r}");
            }
        }
    }
}
