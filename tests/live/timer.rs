// SPDX-License-Identifier: MIT
//! Live tests of the timer and chain probes on this kernel (root): a thread
//! with its own comm runs a 1 kHz clock_nanosleep(TIMER_ABSTIME) loop, the
//! shape of a real-time control loop.

use crate::common;

use common::*;

const CYCLES: u64 = 1000;

/// In a thread named `comm`: `CYCLES` periods of 1 ms on CLOCK_MONOTONIC
/// with absolute deadlines, timer slack 1 ns (as a SCHED_FIFO thread would
/// have; SCHED_OTHER defaults to 50 us).
fn control_loop(comm: &str) {
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(|| {
            // SAFETY: plain prctl and clock calls on valid pointers.
            unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_TIMERSLACK, 1usize), 0);
                let mut next = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut next);
                for _ in 0..CYCLES {
                    next.tv_nsec += 1_000_000;
                    if next.tv_nsec >= 1_000_000_000 {
                        next.tv_nsec -= 1_000_000_000;
                        next.tv_sec += 1;
                    }
                    let rc =
                        libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &next, std::ptr::null_mut());
                    assert_eq!(rc, 0);
                }
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

/// One sample per cycle - except that a cycle whose deadline passed before
/// the kernel armed its timer (the thread was held off the CPU for a whole
/// period on its way into clock_nanosleep) completes without a timer
/// expiry or wakeup, so there is nothing to measure (bpf/timer.bpf.c). On
/// an idle machine that never happens; on this shared 2-CPU VM with the
/// other tests running, up to 3 in 2000 cycles were seen. Allow 1 %.
fn assert_within_overruns(count: u64, p: &serde_json::Value) {
    assert!(count <= CYCLES && count * 100 >= CYCLES * 99, "{count} samples for {CYCLES} cycles: {p}");
    assert_eq!(u(p, "total_drops"), 0, "{p}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_1khz_clock_nanosleep_loop_gives_one_sample_per_cycle() {
    let _s = serial();
    let child = start_run(&["--probe", "timer,comm=lm-tick", "--interval", "500ms", "--format", "json"]);
    control_loop("lm-tick");
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let p = expect_last_probe(&lines, "timer");
    assert_eq!((p["kind"].as_str(), p["attach"].as_str()), (Some("timer"), Some("tp_btf")));
    assert_within_overruns(u(p, "total_count"), p);
    // Plausible: more than nothing, less than the period. Even a loaded VM
    // wakes a 1 kHz loop within a millisecond at the median.
    let busiest = lines
        .iter()
        .filter_map(|l| l["probes"].as_array().unwrap().iter().find(|p| p["name"] == "timer"))
        .max_by_key(|p| u(p, "count"))
        .unwrap();
    let p50 = u(busiest, "p50_ns");
    assert!((500..1_000_000).contains(&p50), "implausible timer latency p50 {p50} ns: {busiest}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn other_threads_and_other_sleeps_are_not_counted() {
    let _s = serial();
    let child = start_run(&["--probe", "timer,comm=lm-nobody", "--interval", "300ms", "--format", "json"]);
    control_loop("lm-someone");
    let (status, out) = stop(child);
    assert!(status.success());
    assert_eq!(u(expect_last_probe(&json_lines(&out), "timer"), "total_count"), 0);
}

/// The chain splits each timer wakeup into stages; per event the stages
/// add up to the end-to-end latency, so the sums (count x mean, up to the
/// integer division of the mean) agree. One interval for the whole run:
/// user space reads the slots one after another, so an interval boundary
/// can fall between an event's stages.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn chain_stages_add_up_to_the_end_to_end_latency() {
    let _s = serial();
    let child = start_run(&["--probe", "chain,comm=lm-chain", "--interval", "60m", "--format", "json"]);
    control_loop("lm-chain");
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let total = expect_last_probe(&lines, "chain");
    let timer = expect_last_probe(&lines, "chain:timer");
    let wakeup = expect_last_probe(&lines, "chain:wakeup");
    assert!(
        lines.iter().all(|l| l["probes"].as_array().unwrap().iter().all(|p| p["name"] != "chain:irq")),
        "no IRQ wakes a sleeping timer loop"
    );
    let n = u(total, "total_count");
    assert_within_overruns(n, total);
    assert_eq!(u(timer, "total_count"), n, "{timer}");
    assert_eq!(u(wakeup, "total_count"), n, "{wakeup}");
    for l in &lines {
        let find = |n: &str| l["probes"].as_array().unwrap().iter().find(|p| p["name"] == n).cloned();
        let (Some(t), Some(a), Some(b)) = (find("chain"), find("chain:timer"), find("chain:wakeup")) else { continue };
        let n = u(&t, "count");
        assert_eq!((u(&a, "count"), u(&b, "count")), (n, n), "every event has both stages");
        if n == 0 {
            continue;
        }
        let (mt, ma, mb) = (u(&t, "mean_ns"), u(&a, "mean_ns"), u(&b, "mean_ns"));
        // sum = n * mean + r with 0 <= r < n, for each of the three.
        // So floor(S/n) of the total is the stages' floors summed, or one more.
        assert!(ma + mb <= mt && mt <= ma + mb + 1, "stage means {ma} + {mb} vs end to end {mt}");
    }
}

/// chain with a response function: lm-target's control loop sleeps to
/// each 1 ms deadline, then its lm_cycle spins 200 us - the application's
/// response. Every event gets both response stages; per event the stages
/// still add up (event -> wakeup + wakeup -> running + running -> return
/// = event -> return), and the response stage holds the function's own
/// duration (lm_cycle measures itself) plus the return path from
/// clock_nanosleep into it.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn chain_response_stage_ends_at_the_functions_return() {
    let _s = serial();
    let target = lm_target();
    let spec = format!("chain,comm=lm-target,response={}:lm_cycle", target.display());
    let child = start_run(&["--probe", &spec, "--interval", "60m", "--format", "json"]);
    let out = std::process::Command::new(target).args(["cycle", "300", "1000", "200"]).output().unwrap();
    assert!(out.status.success(), "lm-target: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let own: Vec<u64> = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("self_ns="))
        .map(|v| v.split(',').map(|d| d.parse().unwrap()).collect())
        .unwrap_or_default();
    assert_eq!(own.len(), 300, "{text}");
    let late: u64 = text.split_whitespace().find_map(|w| w.strip_prefix("over_1ms=")).unwrap().parse().unwrap();
    let slept: u64 = text.split_whitespace().find_map(|w| w.strip_prefix("slept=")).unwrap().parse().unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let l = lines.last().unwrap();
    let find = |n: &str| {
        l["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no {n} in {l}"))
    };
    let (total, timer, wakeup, resp, to_resp) =
        (find("chain"), find("chain:timer"), find("chain:wakeup"), find("chain:response"), find("chain:to-response"));
    let n = u(&total, "count");
    eprintln!(
        "FIGURES chain events {n} for 300 cycles, {late} deadlines already past at sleep, {slept} cycles left the CPU"
    );
    // Every cycle that blocked was woken by its timer (`slept`, from the
    // thread's voluntary context switches); a timer that fires before the
    // thread has left the CPU is an event too. Under load a few blocking
    // sleeps show no traced hrtimer_expire_entry for their sleeper at all
    // (debug counters in the expiry program: e.g. 2992 expiries for 2997
    // blocking sleeps of 3000) - lost before any latmon logic; allow 3 %.
    assert!(
        n <= 300 && n * 100 >= slept * 97,
        "{n} events for {slept} blocking sleeps of 300 cycles ({late} deadlines past at sleep): {total}"
    );
    for p in [&timer, &wakeup, &resp, &to_resp] {
        assert_eq!(u(p, "count"), n, "every event has every stage: {p}");
    }
    assert_eq!(u(&resp, "drops"), 0, "every cycle's lm_cycle returned before the next deadline: {resp}");
    // Sums: n x mean + r, 0 <= r < n, for each series.
    let (mt, ma, mb, mr, me) = (
        u(&total, "mean_ns"),
        u(&timer, "mean_ns"),
        u(&wakeup, "mean_ns"),
        u(&resp, "mean_ns"),
        u(&to_resp, "mean_ns"),
    );
    assert!(ma + mb <= mt && mt <= ma + mb + 1, "stage means {ma} + {mb} vs event -> running {mt}");
    assert!(ma + mb + mr <= me && me <= ma + mb + mr + 2, "stage means {ma} + {mb} + {mr} vs event -> response {me}");
    // The response holds lm_cycle's own duration, and little more.
    let (own_min, own_max) = (*own.iter().min().unwrap(), *own.iter().max().unwrap());
    eprintln!(
        "FIGURES chain response: n {n} response mean {mr} min {} max {} (lm_cycle itself {own_min}..{own_max})",
        u(&resp, "min_ns"),
        u(&resp, "max_ns")
    );
    assert!(u(&resp, "min_ns") >= own_min, "a response shorter than the function itself: {resp}");
    assert!(u(&resp, "max_ns") >= own_max, "{resp}");
    assert!(mr < own_max + 500_000, "response mean {mr} far above the function's own {own_max}: {resp}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn check_names_the_response_function_and_a_missing_one_clearly() {
    let _s = serial();
    let spec = format!("chain,comm=lm-target,response={}:lm_cycle", lm_target().display());
    let out = latmon().args(["check", "--probe", &spec]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("response: uretprobe") && text.contains(":lm_cycle"), "{text}");

    let spec = format!("chain,comm=lm-target,response={}:no_such_symbol_xyz", lm_target().display());
    let out = latmon().args(["check", "--probe", &spec]).output().unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("response function no_such_symbol_xyz not found in"), "{all}");
    let out = latmon().args(["check", "--probe", "chain,comm=x,response=/nonexistent/ctrl:cycle"]).output().unwrap();
    let all = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && all.contains("response: binary /nonexistent/ctrl: No such file"), "{all}");
}

/// Alert records of the series `name` in every report.
fn records<'a>(lines: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter_map(|l| l["alert_records"].as_array()).flatten().filter(|r| r["probe"] == name).collect()
}

/// Every alert is a record or a counted drop; records name the thread
/// (not whichever task was current) and carry a latency above the
/// threshold; the token bucket bounds them.
fn assert_alerts_accounted(lines: &[serde_json::Value], name: &str, comm: &str, pid: u64, seconds: f64) -> u64 {
    use latmon::bpf::limits::{ALERT_BURST, ALERT_RATE};
    let p = expect_last_probe(lines, name);
    let recs = records(lines, name);
    let (alerts, dropped) = (u(p, "total_alerts"), u(p, "total_alerts_dropped"));
    eprintln!(
        "FIGURES {name}: {} events, {alerts} above the threshold: {} records, {dropped} dropped",
        u(p, "total_count"),
        recs.len()
    );
    assert!(alerts > 0, "{p}");
    assert_eq!(recs.len() as u64 + dropped, alerts, "every alert is a record or a counted drop: {p}");
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let allowed = ALERT_BURST as u64 + (ALERT_RATE as f64 * seconds).ceil() as u64 + cpus;
    assert!(
        recs.len() as u64 >= (ALERT_BURST as u64).min(alerts) && recs.len() as u64 <= allowed,
        "{} records (allowed {allowed})",
        recs.len()
    );
    for r in &recs {
        assert_eq!((r["comm"].as_str(), u(r, "pid")), (Some(comm), pid), "{r}");
        assert!(u(r, "latency_ns") > 1_000, "{r}");
    }
    alerts
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn timer_outliers_become_alert_records_about_the_sleeping_thread() {
    let _s = serial();
    let child = start_run(&["--probe", "timer,comm=lm-alerts,threshold=1us", "--interval", "60m", "--format", "json"]);
    let t0 = std::time::Instant::now();
    control_loop("lm-alerts");
    let secs = t0.elapsed().as_secs_f64() + 0.5;
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let alerts = assert_alerts_accounted(&lines, "timer", "lm-alerts", std::process::id() as u64, secs);
    // A timer wakeup takes more than 1 us to reach the CPU.
    assert_eq!(alerts, u(expect_last_probe(&lines, "timer"), "total_count"));
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn chain_alerts_through_the_perf_buffer_name_the_followed_thread() {
    let _s = serial();
    let target = lm_target();
    let spec = format!("chain,comm=lm-target,threshold=1us,response={}:lm_cycle", target.display());
    let child =
        start_run_env(&["--probe", &spec, "--interval", "60m", "--format", "json"], &[("LATMON_ALERT_BUFFER", "perf")]);
    let t0 = std::time::Instant::now();
    let run = std::process::Command::new(target).args(["cycle", "200", "1000", "100"]).output().unwrap();
    let secs = t0.elapsed().as_secs_f64() + 0.5;
    assert!(run.status.success());
    let pid: u64 = String::from_utf8_lossy(&run.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|v| v.parse().ok())
        .unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    assert_alerts_accounted(&lines, "chain", "lm-target", pid, secs);
    // Every response is more than the 100 us lm_cycle spins.
    let alerts = assert_alerts_accounted(&lines, "chain:to-response", "lm-target", pid, secs);
    assert_eq!(alerts, u(expect_last_probe(&lines, "chain:to-response"), "total_count"));
}
