// SPDX-License-Identifier: MIT
//! Live tests of the syscall probe on this kernel (root): a thread with its
//! own comm makes known syscalls; latmon must count each exactly, in the
//! right series and the right buckets.

mod common;

use common::*;

const SLEEPS: u64 = 100;
const GETPPIDS: u64 = 5000;

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("field {k} missing or not a number in {v}"))
}

/// The last report's entry named `name` (totals since start live there).
fn last_probe<'a>(lines: &'a [serde_json::Value], name: &str) -> Option<&'a serde_json::Value> {
    lines.last()?["probes"].as_array()?.iter().find(|p| p["name"] == name)
}

/// In a thread named `comm`: `SLEEPS` raw nanosleep(1 ms) syscalls (not the
/// libc wrapper, which may use clock_nanosleep), then `GETPPIDS` getppid.
fn sleeper(comm: &str) {
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(|| {
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            for _ in 0..SLEEPS {
                // SAFETY: valid timespec, no remainder pointer.
                let rc = unsafe { libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, 0usize) };
                assert_eq!(rc, 0);
            }
            for _ in 0..GETPPIDS {
                // SAFETY: no arguments.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

/// Every non-empty bucket `[lo, hi)` of a series overlaps `[lo_ns, hi_ns)`.
fn buckets_within(p: &serde_json::Value, lo_ns: u64, hi_ns: u64) -> bool {
    p["buckets"].as_array().unwrap().iter().all(|b| b[1].as_u64().unwrap() > lo_ns && b[0].as_u64().unwrap() < hi_ns)
}

fn nanosleep_case(env: &[(&str, &str)], attach: &str) {
    let comm = match attach {
        "tp_btf" => "lm-nsleep",
        "raw_tp" => "lm-nsleep-raw",
        _ => "lm-nsleep-tp",
    };
    let one = format!("syscall:nanosleep,comm={comm}");
    let all = format!("syscall,comm={comm},name=sys");
    let child = start_run_attached(
        &["--probe", &one, "--probe", &all, "--interval", "500ms", "--format", "json"],
        env,
        2,
    );
    sleeper(comm);
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);

    // syscall:NAME - the one syscall is the probe's own line.
    let p = last_probe(&lines, "syscall:nanosleep").expect("syscall:nanosleep reported");
    assert_eq!((p["kind"].as_str(), p["attach"].as_str()), (Some("syscall"), Some(attach)));
    assert_eq!(u(p, "total_count"), SLEEPS, "every nanosleep counted exactly once: {p}");
    assert_eq!(u(p, "total_drops"), 0);
    let interval_sum: u64 = lines
        .iter()
        .filter_map(|l| l["probes"].as_array().unwrap().iter().find(|p| p["name"] == "syscall:nanosleep"))
        .map(|p| u(p, "count"))
        .sum();
    assert_eq!(interval_sum, SLEEPS, "interval counts add up to the total");
    // Not a single getppid leaks into a syscall:NAME probe.
    assert!(lines.iter().all(|l| l["probes"].as_array().unwrap().iter().all(|p| !p["name"].as_str().unwrap().starts_with("syscall:nanosleep:"))));

    // The family: a series per syscall, named from this arch's table.
    let ns = last_probe(&lines, "sys:nanosleep").expect("series sys:nanosleep");
    assert_eq!(u(ns, "total_count"), SLEEPS, "{ns}");
    let gp = last_probe(&lines, "sys:getppid").expect("series sys:getppid");
    assert_eq!(u(gp, "total_count"), GETPPIDS, "getppid never blocks: the per-CPU fast path; {gp}");
    let fam = last_probe(&lines, "sys").expect("family line");
    assert!(u(fam, "total_count") >= SLEEPS + GETPPIDS, "the family line sums its series: {fam}");

    // The right buckets: a 1 ms nanosleep takes at least 1 ms (the kernel
    // never wakes it early) and, on any sane machine, well under 50 ms.
    for l in &lines {
        for p in l["probes"].as_array().unwrap().iter().filter(|p| p["name"] == "syscall:nanosleep" && u(p, "count") > 0) {
            assert!(u(p, "min_ns") >= 1_000_000, "nanosleep(1ms) shorter than 1 ms: {p}");
            assert!(buckets_within(p, 1_000_000, 50_000_000), "buckets outside [1ms, 50ms): {p}");
            let bucket_sum: u64 = p["buckets"].as_array().unwrap().iter().map(|b| b[2].as_u64().unwrap()).sum();
            assert_eq!(bucket_sum, u(p, "count"));
        }
    }
    // getppid: a fraction of a millisecond.
    assert!(u(gp, "p50_ns") < 100_000, "{gp}");
}

#[test]
fn nanosleep_calls_land_in_their_series_and_buckets_exactly() {
    nanosleep_case(&[], "tp_btf");
}

/// The raw_tp fallback (tid-keyed park) counts the same.
#[test]
fn raw_tp_fallback_counts_the_same() {
    nanosleep_case(&[("LATMON_SKIP_ATTACH", "tp_btf")], "raw_tp");
}

/// The no-BTF build (classic tracepoints, sys_enter's `id` at the offset
/// its tracefs format gives), as on a kernel without BTF, counts the same.
#[test]
fn no_btf_tracepoint_build_counts_the_same() {
    nanosleep_case(&[("LATMON_FORCE_NO_BTF", "1")], "tracepoint");
}

#[test]
fn unknown_syscall_name_is_reported_and_others_keep_running() {
    let out = latmon()
        .args(["run", "--probe", "syscall:no_such_call", "--probe", "syscall:getppid", "--duration", "300ms", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no syscall named \"no_such_call\""), "{err}");
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert!(!lines.is_empty() && lines.iter().all(|l| l["probes"][0]["name"] == "syscall:getppid"));
}

/// `threshold=`: a syscall slower than it becomes an alert record about the
/// thread that made it, named after its series (`sys:nanosleep`, or the
/// `syscall:NAME` line itself); fast syscalls raise none - in every build
/// and through the perf buffer fallback.
#[test]
fn slow_syscalls_become_alert_records_named_after_their_series() {
    const SLOW: u64 = 20;
    for (comm, env, attach) in [
        ("lm-sca-btf", &[][..], "tp_btf"),
        ("lm-sca-raw", &[("LATMON_SKIP_ATTACH", "tp_btf")][..], "raw_tp"),
        ("lm-sca-tp", &[("LATMON_FORCE_NO_BTF", "1")][..], "tracepoint"),
        ("lm-sca-perf", &[("LATMON_ALERT_BUFFER", "perf")][..], "tp_btf"),
    ] {
        // `check` names the buffer the records travel through.
        let plan = latmon().args(["check", "--json", "--measure", "0s", "--probe", "syscall,threshold=1ms"]).envs(env.iter().copied()).output().unwrap();
        let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
        let via = if comm.ends_with("perf") { "via perf buffer" } else { "via ringbuf" };
        assert!(plan["probes"][0]["mode"].as_str().unwrap().contains(via), "{plan}");
        let one = format!("syscall:nanosleep,comm={comm},threshold=1ms");
        let all = format!("syscall,comm={comm},threshold=1ms,name=sys");
        let child = start_run_attached(&["--probe", &one, "--probe", &all, "--interval", "60m", "--format", "json"], env, 2);
        let tid = std::thread::Builder::new()
            .name(comm.into())
            .spawn(|| {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: 2_000_000 };
                for _ in 0..SLOW {
                    // SAFETY: valid timespec, no remainder pointer.
                    assert_eq!(unsafe { libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, 0usize) }, 0);
                }
                for _ in 0..GETPPIDS {
                    // SAFETY: no arguments.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                }
                nix::unistd::gettid().as_raw() as u64
            })
            .unwrap()
            .join()
            .unwrap();
        let (status, out) = stop(child);
        assert!(status.success(), "latmon exited with {status}");
        let lines = json_lines(&out);
        let records = |probe: &str| -> Vec<serde_json::Value> {
            lines.iter().filter_map(|l| l["alert_records"].as_array()).flatten().filter(|r| r["probe"] == probe).cloned().collect()
        };
        for name in ["syscall:nanosleep", "sys:nanosleep"] {
            let p = last_probe(&lines, name).unwrap_or_else(|| panic!("{name} reported"));
            assert_eq!(p["attach"], attach);
            assert_eq!((u(p, "total_count"), u(p, "total_alerts"), u(p, "total_alerts_dropped")), (SLOW, SLOW, 0), "{p}");
            let recs = records(name);
            eprintln!("FIGURES syscall alerts ({comm}, {attach}): {name}: {} records of {SLOW} slow calls", recs.len());
            assert_eq!(recs.len() as u64, SLOW, "every 2 ms nanosleep above 1 ms is a record (under the burst): {recs:?}");
            for r in &recs {
                assert_eq!((r["comm"].as_str(), u(r, "tid"), u(r, "pid")), (Some(comm), tid, std::process::id() as u64), "{r}");
                assert!((2_000_000..50_000_000).contains(&u(r, "latency_ns")), "{r}");
            }
        }
        let gp = last_probe(&lines, "sys:getppid").expect("series sys:getppid");
        assert_eq!((u(gp, "total_count"), u(gp, "total_alerts")), (GETPPIDS, 0), "{gp}");
        assert!(records("sys:getppid").is_empty() && records("sys").is_empty(), "fast calls raise no alert; records name the series");
        let fam = last_probe(&lines, "sys").unwrap();
        assert_eq!(u(fam, "total_alerts"), SLOW, "{fam}");
    }
}
