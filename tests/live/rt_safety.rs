// SPDX-License-Identifier: MIT
//! Live tests of latmon's harmlessness on the machine it watches
//! (docs/agent.md "RT hygiene", src/rtsafety.rs): `latmon check` gives
//! every PREEMPT_RT hazard a verdict and the path taken, judging the maps
//! it really loaded; latmon's threads take no page fault in steady state
//! (memory locked by default) and run where `check` says, never at an RT
//! policy.

use crate::common;

use common::*;
use serde_json::Value;

fn check_json(args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = latmon().envs(env.iter().copied()).arg("check").args(args).arg("--json").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&text).unwrap()
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_gives_every_rt_hazard_a_verdict_from_what_it_loaded() {
    let v = check_json(&["--probe", "runq", "--probe", "syscall", "--probe", "irq", "--measure", "2s"], &[]);
    let s = &v["rt_safety"];
    eprintln!("FIGURES rt_safety {s:#}");
    for hazard in ["task_storage", "ringbuf", "map_alloc", "percpu"] {
        let h = &s[hazard];
        assert!(h["safe"].is_boolean(), "{hazard}: {s}");
        assert!(!h["verdict"].as_str().unwrap().is_empty() && !h["path"].as_str().unwrap().is_empty(), "{h}");
    }
    // This host is no PREEMPT_RT kernel: every verdict is safe.
    assert_eq!(s["ringbuf"]["verdict"], "safe (not PREEMPT_RT: its lock never sleeps)");
    assert_eq!(s["task_storage"]["safe"], true);
    // The maps were judged: the three probes' (dozens), none allocating.
    let maps = s["map_alloc"]["verdict"].as_str().unwrap();
    let n: u64 = maps.trim_start_matches("safe (").split(' ').next().unwrap().parse().unwrap();
    assert!(n >= 10 && maps.ends_with("maps loaded, every hash preallocated)"), "{maps}");
    // The override is the path's, and says so.
    let perf = check_json(&["--probe", "runq", "--measure", "0s"], &[("LATMON_ALERT_BUFFER", "perf")]);
    assert_eq!(perf["rt_safety"]["ringbuf"]["path"], "perf buffer (LATMON_ALERT_BUFFER=perf)");
    // Where latmon runs, and its steady state: memory locked, no fault
    // while reading the probes (the measurement's second half).
    let p = &v["placement"];
    assert_eq!(p["mlockall"], true, "{p}");
    assert!(p["sched"].as_str().unwrap().starts_with("SCHED_OTHER nice"), "{p}");
    assert!(!p["cpus"].as_array().unwrap().is_empty() && !p["why"].as_str().unwrap().is_empty(), "{p}");
    assert_eq!(u(&v, "steady_page_faults"), 0, "{v}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_agent_takes_no_page_fault_in_steady_state() {
    // The load runs from before latmon starts to after it stops, so its
    // series (read, write, the switches) exist from the first intervals:
    // what follows is steady state, and must fault nothing.
    let stop_load = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop_load.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pipe_ping_pong("lm-pf", 2_000);
            }
        })
    };
    // Series that only the load makes: the machine's other work adds no
    // new one (a new series is growth, not steady state).
    let child =
        start_run(&["--probe", "runq", "--probe", "syscall,comm=lm-pf", "--interval", "250ms", "--format", "json"]);
    // Its own policy: SCHED_OTHER (0), whatever the parent's.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
    let policy: u64 = stat.rsplit(')').next().unwrap().split_whitespace().nth(38).unwrap().parse().unwrap();
    assert_eq!(policy, 0, "SCHED_OTHER: {stat}");
    std::thread::sleep(std::time::Duration::from_secs(4));
    let (status, out) = stop(child);
    stop_load.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    assert!(status.success(), "{out}");
    let lines = json_lines(&out);
    let faults: Vec<(u64, u64)> = lines.iter().map(|l| (u(l, "seq"), u(&l["agent"], "page_faults"))).collect();
    eprintln!("FIGURES page faults per interval (seq, faults): {faults:?}");
    // From the 5th interval (a second in) to the one before the final.
    let steady = &faults[4.min(faults.len())..faults.len().saturating_sub(1)];
    assert!(steady.len() >= 8, "{} intervals: {faults:?}", lines.len());
    assert!(steady.iter().all(|&(_, f)| f == 0), "{faults:?}");
}
