// SPDX-License-Identifier: MIT
//! Live tests of the families' PREEMPT_RT mode (docs/probes.md, "PREEMPT_RT
//! and task storage"): where creating task storage under the rq lock is
//! unsafe (CVE-2024-58070), timer and chain keep their per-task state in
//! preallocated tid hashes (bpf/task_slot.bpf.h), irq's threaded path too,
//! and runq and syscall run raw_tp. This kernel is not PREEMPT_RT:
//! LATMON_RT_TASK_STORAGE=unsafe forces that mode.
//!
//! The workload is its own ground truth: threads sleeping to absolute
//! CLOCK_MONOTONIC deadlines (the clock of bpf_ktime_get_ns) write down
//! each deadline and when they were back in user space. With a 1 us
//! threshold every wakeup is an alert record, and a record's time minus
//! its latency is the stamp the hash carried - the intended expiry - so
//! every cycle must be found: its deadline, within the few microseconds
//! between the program's two clock reads, by its thread, before the
//! thread saw itself awake. The hash must hold each thread while it lives
//! and nothing once it exited. Mutation: LATMON_RT_HASH_MUTATE=1 keys new
//! entries by the waker instead of the woken thread, and must fail.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;

const ENV_UNSAFE: (&str, &str) = ("LATMON_RT_TASK_STORAGE", "unsafe");
const THREADS: usize = 4;
const CYCLES: usize = 40;
/// 4 threads at 20 Hz: 80 alerts a second, below the token bucket's 100
/// (bpf/latmon.h LATMON_ALERT_RATE), so every wakeup becomes a record.
const PERIOD_NS: u64 = 50_000_000;

/// One sleep of a workload thread, CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, Copy)]
struct Cycle {
    deadline: u64,
    /// Before the sleep: past the deadline, the kernel completes the
    /// sleep without a timer (an overrun: no event to measure).
    before: u64,
    /// Back in user space after it.
    woke: u64,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `THREADS` threads named `comm`, phases spread over the period, each
/// `CYCLES` absolute sleeps (timer slack 1 ns, as a real-time thread's).
/// `during` runs once every thread has slept once, while they still run
/// (given their tids). Returns each thread's cycles by tid, after all
/// have exited.
fn sleepers(comm: &str, during: impl FnOnce(&[u32])) -> BTreeMap<u32, Vec<Cycle>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let start = now_ns() + PERIOD_NS;
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let tx = tx.clone();
            std::thread::Builder::new()
                .name(comm.into())
                .spawn(move || {
                    // SAFETY: plain prctl and clock calls on valid pointers.
                    let tid = unsafe {
                        assert_eq!(libc::prctl(libc::PR_SET_TIMERSLACK, 1usize), 0);
                        libc::gettid() as u32
                    };
                    let mut cycles = Vec::with_capacity(CYCLES);
                    let mut deadline = start + i as u64 * PERIOD_NS / THREADS as u64;
                    for n in 0..CYCLES {
                        let before = now_ns();
                        let ts = libc::timespec {
                            tv_sec: (deadline / 1_000_000_000) as _,
                            tv_nsec: (deadline % 1_000_000_000) as _,
                        };
                        // SAFETY: a valid timespec.
                        let rc = unsafe {
                            libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut())
                        };
                        assert_eq!(rc, 0);
                        cycles.push(Cycle { deadline, before, woke: now_ns() });
                        if n == 0 {
                            tx.send(tid).unwrap();
                        }
                        deadline += PERIOD_NS;
                    }
                    (tid, cycles)
                })
                .unwrap()
        })
        .collect();
    drop(tx);
    let tids: Vec<u32> = rx.iter().take(THREADS).collect();
    during(&tids);
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The keys (thread ids) of the map whose name starts with `prefix`
/// among those process `pid` holds (bpftool; kernel map names keep 15
/// characters).
fn hash_tids(pid: u32, prefix: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().map_while(Result::ok) {
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()))
            .unwrap_or_default();
        ids.extend(info.lines().find_map(|l| l.strip_prefix("map_id:")).and_then(|v| v.trim().parse::<u64>().ok()));
    }
    let bpftool = |args: &[&str]| -> serde_json::Value {
        let out = std::process::Command::new("bpftool").args(args).output().expect("bpftool");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bpftool {args:?}: {e}"))
    };
    let id = ids
        .iter()
        .find(|id| {
            let show = bpftool(&["map", "show", "id", &id.to_string(), "--json"]);
            show["name"].as_str() == Some(&prefix[..prefix.len().min(15)])
        })
        .unwrap_or_else(|| panic!("latmon ({pid}) holds no map {prefix}"));
    let dump = bpftool(&["map", "dump", "id", &id.to_string(), "--json"]);
    dump.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            // "key": ["0x2a", "0x00", ...], the __u32 in this host's order.
            let bytes: Vec<u8> = e["key"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
                .collect();
            u32::from_ne_bytes(bytes[..4].try_into().unwrap())
        })
        .collect()
}

/// `latmon check --json --probe SPEC`'s plan of the probe (its attach
/// mechanism and mode: the run's JSON carries no mode).
fn plan(spec: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let out = latmon().envs(env.iter().copied()).args(["check", "--json", "--probe", spec]).output().unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    v["probes"][0].clone()
}

/// What one run gave: latmon check's plan, latmon's JSON lines, the
/// workload's cycles, and the hash's thread ids while the workload ran
/// and after it exited.
struct Run {
    plan: serde_json::Value,
    lines: Vec<serde_json::Value>,
    cycles: BTreeMap<u32, Vec<Cycle>>,
    held_during: Vec<u32>,
    held_after: Vec<u32>,
}

/// `latmon run --probe SPEC` (a timer or chain probe on `comm`) in the
/// forced tid-hash mode around the sleepers.
fn run(spec: &str, comm: &str, extra: &[(&str, &str)]) -> Run {
    let mut env = vec![ENV_UNSAFE];
    env.extend_from_slice(extra);
    let plan = plan(spec, &env);
    let child = start_run_env(&["--probe", spec, "--interval", "60m", "--format", "json"], &env);
    let pid = child.id();
    let mut held_during = Vec::new();
    let cycles = sleepers(comm, |_| held_during = hash_tids(pid, "timer_stamp_by_tid"));
    // The threads have exited: sched_process_exit took their entries.
    std::thread::sleep(Duration::from_millis(100));
    let held_after = hash_tids(pid, "timer_stamp_by_tid");
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    Run { plan, lines: json_lines(&out), cycles, held_during, held_after }
}

/// Every cycle of the workload is one alert record of `series` with the
/// right stamps, every record one cycle, nothing dropped; the hash held
/// each thread while it ran and none after. The figures, or what failed.
fn check(r: &Run, series: &str, mode: &str) -> Result<String, String> {
    let p = last_probe(&r.lines, series).ok_or_else(|| format!("no {series} in the output"))?;
    let planned = r.plan["mode"].as_str().unwrap_or_default();
    if p["attach"] != "tp_btf" || r.plan["attach"] != "tp_btf" || !planned.starts_with(mode) {
        return Err(format!("{series}: attach {} mode {planned} (expected tp_btf, {mode}...)", p["attach"]));
    }
    let expected: usize = r.cycles.values().flatten().filter(|c| c.before < c.deadline).count();
    let overruns = THREADS * CYCLES - expected;
    let (count, alerts, dropped, drops) =
        (u(p, "total_count"), u(p, "total_alerts"), u(p, "total_alerts_dropped"), u(p, "total_drops"));
    let records: Vec<&serde_json::Value> = r
        .lines
        .iter()
        .filter_map(|l| l["alert_records"].as_array())
        .flatten()
        .filter(|rec| rec["probe"] == series)
        .collect();
    let figures = format!(
        "{series}: {count} events, {alerts} alerts, {} records, {dropped} records dropped, {drops} drops for {expected} \
         cycles ({overruns} overruns); hash held {:?} during, {:?} after",
        records.len(),
        r.held_during,
        r.held_after
    );
    // A cycle may go unseen before any latmon logic: a run of its
    // programs the kernel skipped (counted: total_bpf_missed), or a
    // blocking sleep with no traced expiry, seen under load (timer.rs's
    // chain test: up to 3 %). Seen here: 1 and 2 of 160 (chain, with a
    // build on both CPUs), and one timer run short of the exact count.
    // Every event is a record, every record its cycle's.
    let missed = p["total_bpf_missed"].as_u64().unwrap_or(0);
    let unseen = (expected as u64).saturating_sub(count);
    if count > expected as u64
        || unseen > missed + expected as u64 * 3 / 100
        || alerts != count
        || dropped != 0
        || drops != 0
        || records.len() as u64 != count
    {
        return Err(format!(
            "every cycle one event and one record: {figures}, {missed} runs skipped by the kernel; records by tid {:?}",
            records.iter().fold(BTreeMap::<u64, usize>::new(), |mut m, rec| {
                *m.entry(u(rec, "tid")).or_default() += 1;
                m
            })
        ));
    }
    // Each record: its thread's cycle whose wakeup stamp lies between
    // its deadline and the thread's being back in user space (cycles are
    // 50 ms apart). A fixed 200 us after the deadline was wall time: host
    // steal inside the sched_switch program once put a stamp past it.
    let mut seen: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for rec in &records {
        let tid = u(rec, "tid") as u32;
        let (time, latency) = (u(rec, "time_ns"), u(rec, "latency_ns"));
        let stamp = time - latency;
        let cycle = r
            .cycles
            .get(&tid)
            .and_then(|cs| cs.iter().find(|c| c.deadline <= stamp && stamp <= c.woke))
            .ok_or_else(|| format!("record of tid {tid} stamped {stamp} ns: no deadline of that thread: {rec}"))?;
        if time > cycle.woke || latency > cycle.woke - cycle.deadline {
            return Err(format!("record after its thread woke ({cycle:?}): {rec}"));
        }
        if seen.insert((tid, cycle.deadline), latency).is_some() {
            return Err(format!("two records for one cycle ({cycle:?}): {rec}"));
        }
    }
    let tids: Vec<u32> = r.cycles.keys().copied().collect();
    if !tids.iter().all(|t| r.held_during.contains(t)) || tids.iter().any(|t| r.held_after.contains(t)) {
        return Err(format!("the hash holds each live thread, none that exited (threads {tids:?}): {figures}"));
    }
    let lat: Vec<u64> = seen.values().copied().collect();
    let unmatched: Vec<(u32, usize)> = r
        .cycles
        .iter()
        .flat_map(|(t, cs)| cs.iter().enumerate().map(move |(i, c)| (*t, i, c)))
        .filter(|(t, _, c)| c.before < c.deadline && !seen.contains_key(&(*t, c.deadline)))
        .map(|(t, i, _)| (t, i))
        .collect();
    Ok(format!(
        "{figures}; latency min {} max {} ns; unseen cycles (tid, index) {unmatched:?}, {missed} runs skipped by the \
         kernel",
        lat.iter().min().unwrap(),
        lat.iter().max().unwrap()
    ))
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn timer_in_tid_hashes_counts_every_cycle_with_its_deadline() {
    let _s = serial();
    let r = run("timer,comm=lm-rth-timer,threshold=1us", "lm-rth-timer", &[]);
    match check(&r, "timer", "tid-hash (LATMON_RT_TASK_STORAGE=unsafe)") {
        Ok(f) => eprintln!("FIGURES {f}"),
        Err(e) => panic!("{e}"),
    }
    // The mutation: entries keyed by the waker, not the woken thread.
    if !test_hooks("LATMON_RT_HASH_MUTATE=1") {
        return;
    }
    let r = run("timer,comm=lm-rth-timer,threshold=1us", "lm-rth-timer", &[("LATMON_RT_HASH_MUTATE", "1")]);
    match check(&r, "timer", "tid-hash") {
        Ok(f) => panic!("the check passed with the hash keyed by the waker: {f}"),
        Err(e) => eprintln!("mutation caught: {e}"),
    }
}

/// chain: the same cycles end to end, and per event its timer and wakeup
/// stages (recorded all or nothing from the same stamps).
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn chain_in_tid_hashes_counts_every_cycle_in_every_stage() {
    let _s = serial();
    let r = run("chain,comm=lm-rth-chain,threshold=1us", "lm-rth-chain", &[]);
    match check(&r, "chain", "tid-hash (LATMON_RT_TASK_STORAGE=unsafe)") {
        Ok(f) => eprintln!("FIGURES {f}"),
        Err(e) => panic!("{e}"),
    }
    let total = expect_last_probe(&r.lines, "chain");
    let n = u(total, "total_count");
    for stage in ["chain:timer", "chain:wakeup"] {
        let p = expect_last_probe(&r.lines, stage);
        assert_eq!((u(p, "total_count"), u(p, "total_drops")), (n, 0), "{p}");
    }
    let (mt, ma, mb) = (
        u(total, "mean_ns"),
        u(expect_last_probe(&r.lines, "chain:timer"), "mean_ns"),
        u(expect_last_probe(&r.lines, "chain:wakeup"), "mean_ns"),
    );
    assert!(ma + mb <= mt && mt <= ma + mb + 1, "stage means {ma} + {mb} vs end to end {mt}");
}

/// runq and syscall refuse their tp_btf rung (task storage created under
/// the rq lock) and measure on raw_tp: every clock_nanosleep of the
/// sleepers counted, run-queue waits of their wakeups too.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_and_syscall_skip_tp_btf_and_count_on_raw_tp() {
    let _s = serial();
    let sc = "syscall:clock_nanosleep,comm=lm-rth-raw,name=sc";
    let child = start_run_env(
        &["--probe", "runq,comm=lm-rth-raw", "--probe", sc, "--interval", "60m", "--format", "json"],
        &[ENV_UNSAFE],
    );
    let cycles = sleepers("lm-rth-raw", |_| {});
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let expected = cycles.values().flatten().filter(|c| c.before < c.deadline).count() as u64;
    for (name, spec) in [("runq", "runq,comm=lm-rth-raw"), ("sc", sc)] {
        let p = expect_last_probe(&lines, name);
        assert_eq!(p["attach"], "raw_tp", "{p}");
        assert_eq!(u(p, "total_drops"), 0, "{p}");
        let planned = plan(spec, &[ENV_UNSAFE]);
        let mode = planned["mode"].as_str().unwrap_or_default();
        assert_eq!(planned["attach"], "raw_tp", "{planned}");
        assert!(mode.contains("(tp_btf skipped, LATMON_RT_TASK_STORAGE=unsafe)"), "{mode}");
    }
    // attach=tp_btf pinned: refused with the reason, not loaded.
    let pinned = plan("runq,attach=tp_btf", &[ENV_UNSAFE]);
    let why = pinned["error"].as_str().unwrap_or_default();
    assert!(pinned["ok"] == false && why.contains("creates task storage under the rq lock"), "{pinned}");
    let (runq, sc) =
        (u(expect_last_probe(&lines, "runq"), "total_count"), u(expect_last_probe(&lines, "sc"), "total_count"));
    eprintln!("FIGURES raw_tp: runq {runq} waits, syscall:clock_nanosleep {sc} calls for {} sleeps ({expected} woken by their timer)", THREADS * CYCLES);
    assert_eq!(sc, (THREADS * CYCLES) as u64, "every sleep is one clock_nanosleep");
    assert!(runq >= expected, "each timer wakeup is a run-queue wait: {runq} of {expected}");
}

/// irq's threaded path in tid hashes passes the verifier and attaches
/// (this host has IRQ threads, ACPI's, that seldom fire: the boards drive
/// it, tests/board/verify.py); `latmon check` names the verdict, and an
/// override that is neither word fails the probe naming it.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn irq_threads_load_in_tid_hashes_and_a_bad_override_is_named() {
    let _s = serial();
    if !latmon::probes::irq::irq_threads_exist() {
        eprintln!("no IRQ threads here: the irq part is skipped");
    } else {
        let out =
            latmon().env(ENV_UNSAFE.0, ENV_UNSAFE.1).args(["check", "--probe", "irq", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let p = &v["probes"][0];
        assert!(out.status.success() && p["ok"] == true, "{v}");
        assert_eq!(p["attach"], "tp_btf", "{p}");
        let mode = p["mode"].as_str().unwrap();
        assert!(mode.contains("irq threads in tid-hash (LATMON_RT_TASK_STORAGE=unsafe)"), "{mode}");
        assert!(v["task_storage"].as_str().unwrap().starts_with("unsafe (LATMON_RT_TASK_STORAGE=unsafe)"), "{v}");
    }
    let out = latmon().args(["check", "--json", "--probe", "timer"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["task_storage"], "safe (not PREEMPT_RT)", "this host's kernel: {v}");
    let out = latmon().env(ENV_UNSAFE.0, "maybe").args(["check", "--probe", "timer"]).output().unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("LATMON_RT_TASK_STORAGE=\"maybe\": expected \"unsafe\" or \"safe\""), "{all}");
}
