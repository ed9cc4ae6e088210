// SPDX-License-Identifier: MIT
//! Live tests of the syscall probe on this kernel (root): a thread with its
//! own comm makes known syscalls; latmon must count each exactly, in the
//! right series and the right buckets.

use crate::common;

use common::*;

const SLEEPS: u64 = 100;
const GETPPIDS: u64 = 5000;

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
    let child = start_run_env(&["--probe", &one, "--probe", &all, "--interval", "500ms", "--format", "json"], env);
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
    assert!(lines.iter().all(|l| l["probes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| !p["name"].as_str().unwrap().starts_with("syscall:nanosleep:"))));

    // The family: a series per syscall, named from this arch's table.
    let ns = last_probe(&lines, "sys:nanosleep").expect("series sys:nanosleep");
    assert_eq!(u(ns, "total_count"), SLEEPS, "{ns}");
    let gp = last_probe(&lines, "sys:getppid").expect("series sys:getppid");
    assert_eq!(u(gp, "total_count"), GETPPIDS, "getppid never blocks: the per-CPU fast path; {gp}");
    let fam = last_probe(&lines, "sys").expect("family line");
    assert!(u(fam, "total_count") >= GETPPIDS, "the family line sums its series: {fam}");
    // nanosleep waits: in the waits line, not in the family line.
    assert_eq!(ns["wait"].as_bool(), Some(true), "{ns}");
    let waits = last_probe(&lines, "sys:waits").expect("waits line");
    assert!(u(waits, "total_count") >= SLEEPS, "{waits}");

    // The right buckets: a 1 ms nanosleep takes at least 1 ms (the kernel
    // never wakes it early) and, on any sane machine, well under 50 ms.
    for l in &lines {
        for p in
            l["probes"].as_array().unwrap().iter().filter(|p| p["name"] == "syscall:nanosleep" && u(p, "count") > 0)
        {
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
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn nanosleep_calls_land_in_their_series_and_buckets_exactly() {
    nanosleep_case(&[], "tp_btf");
}

/// The raw_tp fallback (tid-keyed park) counts the same.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn raw_tp_fallback_counts_the_same() {
    nanosleep_case(&[("LATMON_SKIP_ATTACH", "tp_btf")], "raw_tp");
}

/// The no-BTF build (classic tracepoints, sys_enter's `id` at the offset
/// its tracefs format gives), as on a kernel without BTF, counts the same.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn no_btf_tracepoint_build_counts_the_same() {
    nanosleep_case(&[("LATMON_FORCE_NO_BTF", "1")], "tracepoint");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn unknown_syscall_name_is_reported_and_others_keep_running() {
    let out = latmon()
        .args([
            "run",
            "--probe",
            "syscall:no_such_call",
            "--probe",
            "syscall:getppid",
            "--duration",
            "300ms",
            "--format",
            "json",
        ])
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
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn slow_syscalls_become_alert_records_named_after_their_series() {
    const SLOW: u64 = 20;
    for (comm, env, attach) in [
        ("lm-sca-btf", &[][..], "tp_btf"),
        ("lm-sca-raw", &[("LATMON_SKIP_ATTACH", "tp_btf")][..], "raw_tp"),
        ("lm-sca-tp", &[("LATMON_FORCE_NO_BTF", "1")][..], "tracepoint"),
        ("lm-sca-perf", &[("LATMON_ALERT_BUFFER", "perf")][..], "tp_btf"),
    ] {
        // `check` names the buffer the records travel through.
        let plan = latmon()
            .args(["check", "--json", "--measure", "0s", "--probe", "syscall,threshold=1ms"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
        let via = if comm.ends_with("perf") { "via perf buffer" } else { "via ringbuf" };
        assert!(plan["probes"][0]["mode"].as_str().unwrap().contains(via), "{plan}");
        let one = format!("syscall:nanosleep,comm={comm},threshold=1ms");
        // nanosleep waits: its records come with waits=alert only.
        let all = format!("syscall,comm={comm},threshold=1ms,name=sys,waits=alert");
        let child = start_run_env(&["--probe", &one, "--probe", &all, "--interval", "60m", "--format", "json"], env);
        let (tid, slow_by_clock) = std::thread::Builder::new()
            .name(comm.into())
            .spawn(|| {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: 2_000_000 };
                for _ in 0..SLOW {
                    // SAFETY: valid timespec, no remainder pointer.
                    assert_eq!(unsafe { libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, 0usize) }, 0);
                }
                // Each call bracketed by the thread's own clock: a call
                // preempted past 1 ms on a busy host is slow by that
                // truth too (a neighbour's storm made one 2.2 ms).
                let mut slow = 0u64;
                for _ in 0..GETPPIDS {
                    let t0 = std::time::Instant::now();
                    // SAFETY: no arguments.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                    slow += u64::from(t0.elapsed() >= std::time::Duration::from_millis(1));
                }
                (nix::unistd::gettid().as_raw() as u64, slow)
            })
            .unwrap()
            .join()
            .unwrap();
        let (status, out) = stop(child);
        assert!(status.success(), "latmon exited with {status}");
        let lines = json_lines(&out);
        let records = |probe: &str| -> Vec<serde_json::Value> {
            lines
                .iter()
                .filter_map(|l| l["alert_records"].as_array())
                .flatten()
                .filter(|r| r["probe"] == probe)
                .cloned()
                .collect()
        };
        for name in ["syscall:nanosleep", "sys:nanosleep"] {
            let p = last_probe(&lines, name).unwrap_or_else(|| panic!("{name} reported"));
            assert_eq!(p["attach"], attach);
            assert_eq!(
                (u(p, "total_count"), u(p, "total_alerts"), u(p, "total_alerts_dropped")),
                (SLOW, SLOW, 0),
                "{p}"
            );
            let recs = records(name);
            eprintln!("FIGURES syscall alerts ({comm}, {attach}): {name}: {} records of {SLOW} slow calls", recs.len());
            assert_eq!(
                recs.len() as u64,
                SLOW,
                "every 2 ms nanosleep above 1 ms is a record (under the burst): {recs:?}"
            );
            for r in &recs {
                assert_eq!(
                    (r["comm"].as_str(), u(r, "tid"), u(r, "pid")),
                    (Some(comm), tid, std::process::id() as u64),
                    "{r}"
                );
                assert!((2_000_000..50_000_000).contains(&u(r, "latency_ns")), "{r}");
            }
        }
        let gp = last_probe(&lines, "sys:getppid").expect("series sys:getppid");
        assert_eq!(u(gp, "total_count"), GETPPIDS, "{gp}");
        // latmon times a call from its entry to its exit, inside the
        // thread's bracket: no more slow calls than the bracket saw.
        let slow = u(gp, "total_alerts");
        assert!(
            slow <= slow_by_clock,
            "{slow} getppid alerts, {slow_by_clock} calls over 1 ms by the thread's clock: {gp}"
        );
        assert_eq!(records("sys:getppid").len() as u64, slow, "each slow getppid a record of its series");
        assert!(records("sys").is_empty(), "records name the series");
        // The thread's own start-up and exit calls (mmap, rt_sigprocmask,
        // munmap, ...) can also pass 1 ms on a loaded machine, preempted
        // mid-call: each such call is a record of its own series, from
        // this thread, and the family's alert count is all of them.
        let others: Vec<serde_json::Value> = lines
            .iter()
            .filter_map(|l| l["alert_records"].as_array())
            .flatten()
            .filter(|r| r["probe"].as_str().is_some_and(|p| p.starts_with("sys:") && p != "sys:nanosleep"))
            .cloned()
            .collect();
        for r in &others {
            assert_eq!((r["comm"].as_str(), u(r, "tid")), (Some(comm), tid), "{r}");
            assert!(u(r, "latency_ns") >= 1_000_000, "{r}");
        }
        // The family line counts the alerts of its other series, the waits
        // line those of its wait series (nanosleep and any other wait).
        let waits = |r: &serde_json::Value| {
            last_probe(&lines, r["probe"].as_str().unwrap()).is_some_and(|p| p["wait"].as_bool() == Some(true))
        };
        let other_waits = others.iter().filter(|r| waits(r)).count() as u64;
        let fam = last_probe(&lines, "sys").unwrap();
        assert_eq!(u(fam, "total_alerts"), others.len() as u64 - other_waits, "{fam}: other slow calls {others:?}");
        let wl = last_probe(&lines, "sys:waits").unwrap();
        assert_eq!(u(wl, "total_alerts"), SLOW + other_waits, "{wl}: other slow calls {others:?}");
    }
}

/// Entries now in the tid-keyed park hash(es) of latmon process `pid`
/// (`sc_parked_by_tid`; BPF object names keep 15 bytes).
fn parked_entries(pid: u32) -> usize {
    let mut n = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().map_while(Result::ok) {
        if std::fs::read_link(fd.path()).unwrap_or_default().to_string_lossy() != "anon_inode:bpf-map" {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()))
            .unwrap_or_default();
        let Some(id) = info.lines().find_map(|l| l.strip_prefix("map_id:")).map(|v| v.trim().to_string()) else {
            continue;
        };
        let show =
            std::process::Command::new("bpftool").args(["-j", "map", "show", "id", &id]).output().expect("bpftool");
        let show: serde_json::Value = serde_json::from_slice(&show.stdout).expect("bpftool JSON");
        if show["name"] != "sc_parked_by_ti" {
            continue;
        }
        let dump =
            std::process::Command::new("bpftool").args(["-j", "map", "dump", "id", &id]).output().expect("bpftool");
        let dump: serde_json::Value = serde_json::from_slice(&dump.stdout).expect("bpftool JSON");
        n += dump.as_array().map_or(0, Vec::len);
    }
    n
}

/// Threads named `comm` of this process in state `state` (from /proc).
fn threads_in_state(comm: &str, state: char) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map_while(Result::ok)
        .filter(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // "tid (comm) S ...": comm may hold spaces, the last ')' ends it.
            stat.rsplit_once(") ")
                .is_some_and(|(head, rest)| head.ends_with(&format!("({comm}")) && rest.starts_with(state))
        })
        .count()
}

/// `n` threads named `comm`, each blocked in one readv(2) of a shared pipe
/// until `release` writes a byte per thread (readv: a syscall nothing else
/// here makes, whereas std or libc may read(2) once at a thread's start).
/// Returns (write end, handles).
fn blocked_readers(comm: &str, n: usize) -> (std::os::fd::OwnedFd, Vec<std::thread::JoinHandle<()>>) {
    use std::os::fd::AsRawFd;
    let (r, w) = nix::unistd::pipe().unwrap();
    let r = std::sync::Arc::new(r);
    let handles = (0..n)
        .map(|_| {
            let r = std::sync::Arc::clone(&r);
            std::thread::Builder::new()
                .name(comm.into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut b = [0u8; 1];
                    let iov = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: 1 };
                    // SAFETY: a valid fd and one iovec of a 1-byte buffer.
                    let got =
                        unsafe { libc::syscall(libc::SYS_readv, r.as_raw_fd(), &iov as *const libc::iovec, 1usize) };
                    assert_eq!(got, 1);
                })
                .unwrap()
        })
        .collect();
    // Every reader asleep in its read (S) before anything else happens.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while threads_in_state(comm, 'S') < n {
        assert!(std::time::Instant::now() < deadline, "{n} readers named {comm} never all blocked");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (w, handles)
}

fn release(w: std::os::fd::OwnedFd, handles: Vec<std::thread::JoinHandle<()>>) {
    let bytes = vec![b'x'; handles.len()];
    let mut at = 0;
    while at < bytes.len() {
        at += nix::unistd::write(&w, &bytes[at..]).unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// Threads in a blocked syscall while another `STORM_EXITS` threads exit
/// (20 000 `/bin/true` exits in the adversarial run; thread exits are the
/// same `do_exit` and much quicker to make).
const STORM_SLEEPERS: usize = 20;
const STORM_EXITS: usize = 16_000;
/// More threads blocked at once than the park hash holds
/// (LATMON_MAX_STAMPS, bpf/latmon.h).
const MAX_STAMPS: usize = 10_240;
const OVERFLOW: usize = 300;

/// The tid-hash builds (raw_tp; tracepoint, the path of every board
/// without BTF): every exiting task stamps its exit syscall, which never
/// returns. (1) 20 readers blocked while 16 000 threads exit: all 20 are
/// counted (an LRU full of the exits' stale stamps evicted exactly these,
/// the oldest: 0 of 20 seen, drops 0), and no entry outlives its thread.
/// (2) More threads blocked at once than the hash holds: every stamp is
/// counted, in its series or in drops.
fn exit_storm_case(env: &[(&str, &str)], attach: &str, tag: &str) {
    let storm = format!("lm-storm-{tag}");
    let full = format!("lm-full-{tag}");
    let p1 = format!("syscall,comm={storm},name=storm");
    let p2 = format!("syscall,comm={full},name=full");
    let child = start_run_env(&["--probe", &p1, "--probe", &p2, "--interval", "500ms", "--format", "json"], env);
    let pid = child.id();

    // (1) The storm.
    let (w, sleepers) = blocked_readers(&storm, STORM_SLEEPERS);
    let parked_before = parked_entries(pid);
    for _ in 0..STORM_EXITS {
        std::thread::Builder::new().name(storm.clone()).stack_size(64 * 1024).spawn(|| {}).unwrap().join().unwrap();
    }
    let parked_storm = parked_entries(pid);
    release(w, sleepers);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let parked_after_storm = parked_entries(pid);

    // (2) More blocked at once than fit.
    let n = MAX_STAMPS + OVERFLOW;
    let (w, readers) = blocked_readers(&full, n);
    let parked_full = parked_entries(pid);
    release(w, readers);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let parked_end = parked_entries(pid);

    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let readv = |name: &str| last_probe(&lines, name).map_or(0, |p| u(p, "total_count"));
    let drops = |name: &str| last_probe(&lines, name).map_or(0, |p| u(p, "total_drops"));
    eprintln!(
        "FIGURES exit storm ({attach}): {STORM_SLEEPERS} readers blocked, {STORM_EXITS} thread exits: {} of {STORM_SLEEPERS} readv seen, \
         drops {}; park hash entries: {parked_before} with the readers blocked, {parked_storm} after the storm, {parked_after_storm} once they returned; \
         {n} readers blocked at once: {} readv seen + {} drops, {parked_full} entries while blocked, {parked_end} at the end",
        readv("storm:readv"),
        drops("storm"),
        readv("full:readv"),
        drops("full"),
    );
    let p = last_probe(&lines, "storm").expect("family line storm");
    assert_eq!(p["attach"], attach, "{p}");
    assert_eq!(readv("storm:readv"), STORM_SLEEPERS as u64, "every blocked read counted after the storm");
    assert_eq!(drops("storm"), 0);
    assert!(parked_storm <= STORM_SLEEPERS, "exited threads left {parked_storm} stamps in the park hash");
    assert_eq!(parked_after_storm, 0, "no entry outlives its thread");
    // Full: what did not fit is counted, nothing vanishes.
    let (seen, dropped) = (readv("full:readv"), drops("full"));
    assert!(seen <= n as u64 && seen + dropped >= n as u64, "{seen} seen + {dropped} dropped of {n} blocked reads");
    assert!(dropped >= OVERFLOW as u64, "{n} blocked at once in a hash of {MAX_STAMPS}: {dropped} drops");
    assert_eq!(parked_end, 0, "no entry outlives its thread");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn raw_tp_exit_storm_loses_no_blocked_syscall_silently() {
    exit_storm_case(&[("LATMON_SKIP_ATTACH", "tp_btf")], "raw_tp", "raw");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn tracepoint_exit_storm_loses_no_blocked_syscall_silently() {
    exit_storm_case(&[("LATMON_FORCE_NO_BTF", "1")], "tracepoint", "tp");
}

/// What `waiter` does, by series label: (label, calls, waits).
const WAIT_WORK: &[(&str, u64, bool)] = &[
    ("nanosleep", 40, true),
    ("ppoll", 30, true),
    ("futex(wait)", 50, true),
    ("futex", 70, false),
    ("getppid", 3000, false),
    ("fdatasync", 20, false),
];

/// In a thread named `comm`, the calls of [`WAIT_WORK`]: raw nanosleep
/// (1 ms), ppoll on nothing (1 ms), futex FUTEX_WAIT on a word that does
/// not hold the expected value (a wait op that returns at once: its
/// purpose, not its time, makes it a wait), FUTEX_WAKE with no waiter,
/// getppid, and fdatasync of a written file (blocks uninterruptibly on
/// the disk: latency, however long it sleeps).
fn waiter(comm: &str, file: &std::path::Path) {
    let file = file.to_path_buf();
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            let n = |label: &str| WAIT_WORK.iter().find(|w| w.0 == label).unwrap().1;
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            for _ in 0..n("nanosleep") {
                // SAFETY: valid timespec, no remainder pointer.
                assert_eq!(unsafe { libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, 0usize) }, 0);
            }
            for _ in 0..n("ppoll") {
                // SAFETY: no descriptors, a valid timeout, no signal mask.
                let rc = unsafe {
                    libc::syscall(libc::SYS_ppoll, 0usize, 0usize, &ts as *const libc::timespec, 0usize, 8usize)
                };
                assert_eq!(rc, 0);
            }
            let word: u32 = 1;
            for _ in 0..n("futex(wait)") {
                // SAFETY: a valid futex word; it holds 1, not 0: EAGAIN at once.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        &word as *const u32,
                        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                        0u32,
                        0usize,
                    )
                };
                assert_eq!(rc, -1);
            }
            for _ in 0..n("futex") {
                // SAFETY: a valid futex word; nobody waits on it.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        &word as *const u32,
                        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                        1u32,
                    )
                };
                assert_eq!(rc, 0);
            }
            for _ in 0..n("getppid") {
                // SAFETY: no arguments.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
            use std::io::Write;
            let mut f = std::fs::File::create(&file).unwrap();
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            for _ in 0..n("fdatasync") {
                f.write_all(&[7u8; 4096]).unwrap();
                // SAFETY: an open descriptor.
                assert_eq!(unsafe { libc::syscall(libc::SYS_fdatasync, fd) }, 0);
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

/// Waits apart: every wait series says `"wait": true`, the family line
/// counts exactly its other series in every interval, `FAMILY:waits`
/// exactly its wait series; futex's wait ops are a series apart from its
/// other ops; a wait does not alert unless `waits=alert` asks.
fn waits_case(env: &[(&str, &str)], attach: &str) {
    let comm = if attach == "tp_btf" { "lm-waits" } else { "lm-waits-raw" };
    let file = std::env::temp_dir().join(format!("{comm}.dat"));
    let quiet = format!("syscall,comm={comm},name=sys,threshold=300us");
    let loud = format!("syscall,comm={comm},name=loud,threshold=300us,waits=alert");
    let child = start_run_env(&["--probe", &quiet, "--probe", &loud, "--interval", "100ms", "--format", "json"], env);
    waiter(comm, &file);
    let (status, out) = stop(child);
    let _ = std::fs::remove_file(&file);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    for &(label, calls, wait) in WAIT_WORK {
        let p = expect_last_probe(&lines, &format!("sys:{label}"));
        assert_eq!(p["attach"].as_str(), Some(attach), "{p}");
        assert_eq!(u(p, "total_count"), calls, "sys:{label}: every call in its series: {p}");
        assert_eq!(p.get("wait").and_then(|w| w.as_bool()).unwrap_or(false), wait, "sys:{label}'s wait flag: {p}");
    }
    let mut intervals = 0;
    for l in &lines {
        let probes = l["probes"].as_array().unwrap();
        for fam in ["sys", "loud"] {
            let (Some(line), Some(waits)) = (
                probes.iter().find(|p| p["name"] == fam),
                probes.iter().find(|p| p["name"] == format!("{fam}:waits").as_str()),
            ) else {
                continue;
            };
            assert_eq!(waits["waits"].as_bool(), Some(true), "{waits}");
            let prefix = format!("{fam}:");
            let mine = probes.iter().filter(|p| p["name"].as_str().unwrap().starts_with(&prefix));
            let series =
                |wait: bool| mine.clone().filter(move |p| p.get("waits").is_none() && p.get("wait").is_some() == wait);
            let other: u64 = series(false).map(|p| u(p, "count")).sum();
            let waiting: u64 = series(true).map(|p| u(p, "count")).sum();
            assert_eq!(u(line, "count"), other, "{fam}: the family line counts its non-wait series exactly: {l}");
            assert_eq!(u(waits, "count"), waiting, "{fam}:waits counts its wait series exactly: {l}");
            intervals += 1;
        }
    }
    assert!(intervals >= 2, "{intervals} intervals with both lines");
    // nanosleep and ppoll take over 1 ms: above the threshold, yet only
    // `waits=alert` alerts on them.
    let alerts = |name: &str| expect_last_probe(&lines, name)["total_alerts"].as_u64().unwrap();
    assert_eq!((alerts("sys:nanosleep"), alerts("sys:ppoll")), (0, 0), "waits do not alert by default");
    assert_eq!(alerts("loud:nanosleep"), WAIT_WORK[0].1, "waits=alert: every 1 ms nanosleep alerts");
    let records: Vec<&str> = lines
        .iter()
        .flat_map(|l| l["alert_records"].as_array().into_iter().flatten())
        .map(|r| r["probe"].as_str().unwrap())
        .collect();
    assert!(!records.iter().any(|r| *r == "sys:nanosleep" || *r == "sys:ppoll"), "{records:?}");
    assert!(records.contains(&"loud:nanosleep"), "{records:?}");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn waits_are_apart_from_the_family_line_exactly() {
    waits_case(&[], "tp_btf");
}

/// The raw_tp build reads futex's op through the same pt_regs.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn raw_tp_keeps_waits_apart_the_same() {
    waits_case(&[("LATMON_SKIP_ATTACH", "tp_btf")], "raw_tp");
}
