// SPDX-License-Identifier: MIT
//! The new probe families through the CLI: `check` plans them, the built-in
//! default runs them, family series follow the JSON contract.

use crate::common;

use common::*;

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_plans_every_rt_family_on_this_kernel() {
    let out = latmon()
        .args(["check", "--json", "--probe", "syscall", "--probe", "syscall:nanosleep,name=ns", "--probe", "irq"])
        .args(["--probe", "softirq", "--probe", "timer", "--probe", "chain,comm=ctrl", "--probe", "cycle,comm=ctrl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plans = v["probes"].as_array().unwrap();
    assert_eq!(plans.len(), 7);
    for p in plans {
        assert_eq!((p["ok"].as_bool(), p["attach"].as_str()), (Some(true), Some("tp_btf")), "{p}");
    }
    // cycle without kernel types: refused with the reason.
    let out = latmon()
        .env("LATMON_FORCE_NO_BTF", "1")
        .args(["check", "--json", "--probe", "cycle,comm=ctrl"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["probes"][0];
    assert_eq!(p["ok"].as_bool(), Some(false), "{p}");
    assert!(p["error"].as_str().unwrap().contains("cycle needs tp_btf"), "{p}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_default_runs_runq_syscall_irq_and_cycle_auto_with_series() {
    let child = start_run_env(&["--interval", "200ms", "--format", "json"], &[]);
    // Some syscalls of our own, so the syscall family has series.
    for _ in 0..100 {
        let _ = std::fs::metadata("/proc/self");
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (status, out) = stop(child);
    assert!(status.success());
    let lines = json_lines(&out);
    let last = lines.last().unwrap()["probes"].as_array().unwrap();
    let names: Vec<&str> = last.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for family in ["runq", "syscall", "irq", "cycle"] {
        assert!(names.contains(&family), "{family} in the default: {names:?}");
    }
    let statx =
        last.iter().find(|p| p["name"].as_str().unwrap().starts_with("syscall:")).expect("at least one syscall series");
    assert_eq!((statx["kind"].as_str(), statx["attach"].as_str()), (Some("syscall"), Some("tp_btf")));
    // Series are appended behind the configured probes, so that no
    // probe's position (its id on the wire) ever moves.
    assert_eq!(names[..4], ["runq", "syscall", "irq", "cycle"], "{names:?}");
    assert!(names[4..].iter().all(|n| ["syscall:", "irq:", "cycle:"].iter().any(|f| n.starts_with(f))), "{names:?}");
    let cycle = last.iter().find(|p| p["name"] == "cycle").unwrap();
    assert_eq!((cycle["kind"].as_str(), cycle["attach"].as_str()), (Some("cycle"), Some("tp_btf")), "{cycle}");
    // Every entry carries the contract's fields.
    for p in last {
        for k in ["name", "kind", "attach", "count", "total_count", "p50_ns", "p999_ns", "buckets", "drops", "alerts"] {
            assert!(!p[k].is_null(), "{k} missing in {p}");
        }
    }
}
