// SPDX-License-Identifier: MIT
//! Issue 42: with no configuration, latmon lists the board's control
//! loops. The loop zoo (tests/fixtures/lm_loops.c) runs every kind of
//! loop in one process and logs each thread's tid, policy, period and
//! how the period is known; latmon's JSON `loops` must say the same:
//! exact periods for the absolute, timerfd and deadline loops, the
//! relative one within 1 %, the pipe-woken thread never periodic, the
//! SCHED_OTHER loop listed and not RT, no kernel thread, the loops gone
//! once the process is.

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};

use crate::common::{
    compile_fixture, json_lines, latmon, poll_until, scratch, start_run_env, stdout_so_far, stop, test_hooks,
    READY_WITHIN,
};

fn lm_loops() -> &'static std::path::Path {
    compile_fixture("lm_loops", "lm_loops", &["-O2", "-pthread"])
}

/// A thread of the zoo as it logged itself.
#[derive(Debug, Clone)]
struct Truth {
    name: String,
    tid: u64,
    policy: String,
    class: String,
    period_ns: u64,
    source: String,
}

/// The fixture's `loop` lines by tid, its `period_change_at_ns` if any.
fn truth(out: &str) -> (BTreeMap<u64, Truth>, Option<u64>) {
    let mut t = BTreeMap::new();
    let mut change = None;
    for l in out.lines().filter(|l| l.starts_with("loop ")) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let field = |k: &str| f.iter().position(|x| *x == k).map(|i| f[i + 1]).unwrap_or_else(|| panic!("{k} in {l}"));
        let row = Truth {
            name: f[1].to_string(),
            tid: field("tid").parse().unwrap(),
            policy: field("policy").to_string(),
            class: field("class").to_string(),
            period_ns: field("period_ns").parse().unwrap(),
            source: field("period_source").to_string(),
        };
        if let Some(i) = f.iter().position(|x| *x == "period_change_at_ns") {
            change = Some(f[i + 1].parse().unwrap());
        }
        t.insert(row.tid, row);
    }
    (t, change)
}

/// Pids that are kernel threads now (PF_KTHREAD in /proc/PID/stat).
fn kernel_pids() -> HashSet<u64> {
    let mut k = HashSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(rest) = stat.rsplit_once(')').map(|x| x.1) else { continue };
        let flags: u64 = rest.split_whitespace().nth(6).and_then(|f| f.parse().ok()).unwrap_or(0);
        if flags & 0x0020_0000 != 0 {
            k.insert(pid);
        }
    }
    k
}

/// Run the zoo for `secs` with `args` beside a default latmon (no
/// config, no --probe), until latmon lists a scan begun after the zoo
/// exited. The zoo's output, latmon's JSON lines and when the zoo
/// exited.
fn run(secs: u32, args: &[&str], env: &[(&str, &str)]) -> (String, Vec<serde_json::Value>, u64) {
    run_out(secs, args, env, &[])
}

/// [`run`] with more `--output`s beside stdout's JSON.
fn run_out(secs: u32, args: &[&str], env: &[(&str, &str)], outputs: &[&str]) -> (String, Vec<serde_json::Value>, u64) {
    let bin = lm_loops();
    let mut run_args = vec!["--interval", "1s", "--format", "json"];
    if !outputs.is_empty() {
        run_args.extend(["--output", "-"]);
        run_args.extend(outputs.iter().flat_map(|o| ["--output", o]));
    }
    let child = start_run_env(&run_args, env);
    let out = Command::new(bin)
        .arg(secs.to_string())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("lm_loops");
    assert!(out.status.success(), "lm_loops: {}", String::from_utf8_lossy(&out.stderr));
    // latmon goes on until a line lists a scan begun after the zoo
    // exited: the scan that must have forgotten it (by latmon's own
    // stamps; the limit is a hang guard only).
    let exited_ns = now_ns();
    let after = |l: &serde_json::Value| l["agent"]["discovery_at_ns"].as_u64().is_some_and(|t| t > exited_ns);
    let seen = poll_until(READY_WITHIN, || json_lines(&stdout_so_far(&child)).iter().any(after).then_some(()));
    let (status, json) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    assert!(seen.is_some(), "no discovery scan began after the zoo exited, in {READY_WITHIN:?}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), json_lines(&json), exited_ns)
}

/// CLOCK_MONOTONIC, the clock of latmon's stamps and the zoo's.
fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The discovery scan a line lists, and when it began.
fn scan_of(l: &serde_json::Value) -> (u64, u64) {
    let a = &l["agent"];
    (a["discovery_scans"].as_u64().unwrap_or(0), a["discovery_at_ns"].as_u64().unwrap_or(0))
}

/// The loops of every line, as (line index, loop).
fn listed(lines: &[serde_json::Value]) -> impl Iterator<Item = (usize, &serde_json::Value)> {
    lines.iter().enumerate().flat_map(|(i, l)| l["loops"].as_array().into_iter().flatten().map(move |x| (i, x)))
}

/// The zoo against the listing. Err: what is wrong.
fn check(out: &str, lines: &[serde_json::Value], exited_ns: u64, kernel: &HashSet<u64>) -> Result<String, String> {
    let (truth, _) = truth(out);
    if truth.is_empty() {
        return Err(format!("no loop lines from lm_loops: {out}"));
    }
    let mut said = Vec::new();
    for (_, l) in listed(lines) {
        let pid = l["pid"].as_u64().unwrap();
        if kernel.contains(&pid) {
            return Err(format!("a kernel thread listed: {l}"));
        }
    }
    // The sporadic threads first: a periodic one misjudged says less.
    let mut order: Vec<&Truth> = truth.values().collect();
    order.sort_by_key(|t| t.class != "sporadic");
    for t in order {
        let of_tid: Vec<&serde_json::Value> =
            listed(lines).filter(|(_, l)| l["tid"].as_u64() == Some(t.tid)).map(|x| x.1).collect();
        // Never periodic, in any interval.
        if t.class == "sporadic" {
            if let Some(l) = of_tid.iter().find(|l| l["class"] == "periodic") {
                return Err(format!("{} (sporadic) called periodic: {l}", t.name));
            }
            said.push(format!("{}: never periodic in {} listings", t.name, of_tid.len()));
            continue;
        }
        // The last listing while the zoo ran.
        let Some(l) = of_tid.last() else { return Err(format!("{} ({}) never listed", t.name, t.tid)) };
        let (period, source) = (l["period_ns"].as_u64().unwrap(), l["period_source"].as_str().unwrap());
        if l["class"] != "periodic" {
            return Err(format!("{} not periodic: {l}", t.name));
        }
        // A watched relative loop's period is the cycle family's
        // (`median`, its release steps' fullest bin).
        if source != t.source && !(t.source == "relative" && source == "median") {
            return Err(format!("{}: period source {source}, the zoo's {}: {l}", t.name, t.source));
        }
        let exact = t.source != "relative";
        let off = period.abs_diff(t.period_ns);
        if (exact && off != 0) || off * 100 > t.period_ns {
            return Err(format!("{}: period {period} ns, the zoo's {} ns", t.name, t.period_ns));
        }
        let rt = t.policy != "SCHED_OTHER";
        if l["rt"].as_bool() != Some(rt) {
            return Err(format!("{}: rt {} for {}: {l}", t.name, l["rt"], t.policy));
        }
        said.push(format!("{}: {period} ns ({source}; zoo {} ns)", t.name, t.period_ns));
    }
    // Forgotten once gone: a line from a scan begun after the zoo
    // exited lists none of its threads.
    for l in lines.iter().filter(|l| scan_of(l).1 > exited_ns) {
        if let Some(x) =
            l["loops"].as_array().into_iter().flatten().find(|x| truth.contains_key(&x["tid"].as_u64().unwrap()))
        {
            return Err(format!("{} still listed by a scan after the zoo exited", x["comm"]));
        }
    }
    Ok(said.join("; "))
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_loop_zoo_is_found_with_no_configuration() {
    let kernel = kernel_pids();
    let (out, lines, exited) = run(10, &["seed=7"], &[]);
    match check(&out, &lines, exited, &kernel) {
        Ok(s) => eprintln!("zoo found: {s}"),
        Err(e) => panic!("{e}\nzoo: {out}"),
    }
    // Discovery's own cost, as latmon measured it (its thread's CPU time).
    let cpu: Vec<u64> = lines.iter().filter_map(|l| l["agent"]["discovery_cpu_ns"].as_u64()).collect();
    assert!(cpu.iter().any(|&c| c > 0), "discovery_cpu_ns never measured: {cpu:?}");
    eprintln!("discovery CPU per 1 s scan (ns): {cpu:?}");
    // The mutation: a discovery that calls every FIFO thread periodic.
    if !test_hooks("LATMON_LOOPS_MUTATE=1") {
        return;
    }
    let (out, lines, exited) = run(6, &["seed=7"], &[("LATMON_LOOPS_MUTATE", "1")]);
    match check(&out, &lines, exited, &kernel) {
        Ok(s) => panic!("the check passed with every FIFO thread called periodic: {s}"),
        Err(e) => {
            eprintln!("mutation caught: {e}");
            assert!(e.contains("called periodic"), "{e}");
        }
    }
}

/// A period change (1 ms -> 2 ms at mid-run) is found within the scans
/// that follow a known loop again (FOLLOW_EVERY, src/discover.rs: 4),
/// counted in discovery's own scans from the first begun after the zoo's
/// own change time; 50 short-lived RT threads a second stay within the
/// listing's bound and are gone once the zoo is.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_period_change_is_followed_and_short_lived_threads_stay_bounded() {
    const FOLLOW_EVERY: u64 = 4;
    let (out, lines, exited) = run(12, &["seed=3", "change", "churn=50"], &[]);
    let (truth, change) = truth(&out);
    let change = change.expect("period_change_at_ns from lm_loops with `change`");
    let abs = truth.values().find(|t| t.name == "zoo_abs1ms").expect("zoo_abs1ms").tid;
    let lists_2ms = |l: &serde_json::Value| {
        l["loops"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x| x["tid"].as_u64() == Some(abs) && x["period_ns"] == 2_000_000)
    };
    // Lines from scans begun after the change and before the zoo's end.
    let after: Vec<&serde_json::Value> = lines.iter().filter(|l| (change..exited).contains(&scan_of(l).1)).collect();
    let first = after.first().map(|l| scan_of(l).0).expect("a discovery scan between the change and the zoo's end");
    // One of scans first .. first + FOLLOW_EVERY - 1 followed the loop.
    let by = first + FOLLOW_EVERY - 1;
    match after.iter().find(|l| lists_2ms(l)) {
        Some(l) if scan_of(l).0 <= by => {
            eprintln!("period change found at scan {} (the change's first: {first})", scan_of(l).0)
        }
        Some(l) => panic!("period change found at scan {}, after scan {by}", scan_of(l).0),
        None if after.iter().any(|l| scan_of(l).0 >= by) => panic!("period change not found by scan {by}"),
        None => panic!(
            "the zoo ended before scan {by}: scans {:?} after the change",
            after.iter().map(|l| scan_of(l).0).collect::<Vec<_>>()
        ),
    }
    let started: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("churn started "))
        .and_then(|v| v.trim().parse().ok())
        .expect("churn started N");
    assert!(started > 0, "the zoo started no churn thread");
    let churn: HashSet<u64> =
        listed(&lines).filter(|(_, l)| l["comm"] == "zoo_churn").map(|(_, l)| l["tid"].as_u64().unwrap()).collect();
    for l in &lines {
        let n = l["loops"].as_array().map_or(0, |a| a.len());
        assert!(n <= 32, "{n} loops listed, over the bound of 32");
    }
    for l in lines.iter().filter(|l| scan_of(l).1 > exited) {
        let left = l["loops"].as_array().into_iter().flatten().any(|x| x["comm"] == "zoo_churn");
        assert!(!left, "churn threads listed by a scan after the zoo exited: {l}");
    }
    eprintln!("churn: {started} threads started, {} seen by discovery", churn.len());
}

/// The zoo's rows of `kind` (`miss` or `near`): `KIND NAME RELEASE_NS
/// DONE_NS injected|natural`, as (name, release).
fn rows_of(out: &str, kind: &str) -> Vec<(String, u64)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&kind)).then(|| (f[1].to_string(), f[2].parse().unwrap()))
        })
        .collect()
}

/// Issue 42 item 2: `latmon run` with no configuration watches every
/// periodic RT loop it finds (`cycle,auto` in the default set), and no
/// other thread. The misses injected into zoo_abs1ms and zoo_tfd2ms
/// (every 40th cycle after 3 s), and any natural ones, are counted per
/// loop as the zoo counted them (+-2, and up to the zoo's near misses:
/// cycles done within 50 us of the deadline by its stamp, taken before
/// the sleep syscall latmon takes for done), over the span latmon watched the
/// loop by its own stamps: releases after the line that first lists it
/// watched (the tick that hands it to the BPF side) up to the last line
/// carrying its counts. The timerfd loop's reads are its releases and
/// break no sleep rule; the relative sleeper breaks one every cycle (the
/// rule check can fail). Mutation: each loop given another loop's counts
/// must fail the check.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_default_watches_the_periodic_rt_loops_and_counts_their_misses() {
    let args = ["seed=5", "miss=40", "warmup_ms=3000", "rows"];
    // Beside the JSON, two frames links: an unlimited one and one with a
    // serial line's budget (2 000 B/s: deltas, keyframes, loops charged).
    let (full, paced) = (scratch("loops-frames", "full.bin"), scratch("loops-frames", "paced.bin"));
    // And a real Prometheus scraping latmon every second.
    let prom_at = format!("127.0.0.1:{}", crate::common::prometheus::free_port());
    let prom = crate::common::prometheus::Prometheus::start("loops", &prom_at, false);
    let outs = [
        format!("file:{},format=frames", full.display()),
        format!("file:{},format=frames,budget=2000B/s", paced.display()),
        format!("prom://{prom_at}"),
    ];
    let (out, lines, _) = run_out(10, &args, &[], &[&outs[0], &outs[1], &outs[2]]);
    match check_watched(&out, &lines) {
        Ok(s) => eprintln!("watched with no configuration: {s}"),
        Err(e) => panic!("{e}\nzoo: {out}"),
    }
    // Receivers show the agent's loops and counts (Loops frames, wire
    // revision 12), not the miss records that crossed the link.
    for (name, cap) in [("unlimited", &full), ("2000 B/s", &paced)] {
        match check_received(&lines, cap) {
            Ok(s) => eprintln!("{name} link: {s}"),
            Err(e) => panic!("{name} link: {e}"),
        }
    }
    match check_scraped(&lines, &prom) {
        Ok(s) => eprintln!("Prometheus: {s}"),
        Err(e) => panic!("Prometheus: {e}\nlog: {}", prom.log()),
    }
    if !test_hooks("LATMON_AUTO_MUTATE=1") {
        return;
    }
    let (out, lines, _) = run(8, &args, &[("LATMON_AUTO_MUTATE", "1")]);
    match check_watched(&out, &lines) {
        Ok(s) => panic!("the check passed with each loop given another's counts: {s}"),
        Err(e) => eprintln!("mutation caught: {e}"),
    }
}

/// `latmon decode` of a frames capture: each summary that carries loops
/// carries the agent's JSON `loops` of the same seq, field for field, so
/// the misses since start a receiver shows are the agent's, whatever
/// number of miss records crossed. Err: what is wrong.
fn check_received(lines: &[serde_json::Value], cap: &std::path::Path) -> Result<String, String> {
    let dec = latmon().arg("decode").arg(format!("file:{}", cap.display())).output().unwrap();
    if !dec.status.success() {
        return Err(format!("decode: {}", String::from_utf8_lossy(&dec.stderr)));
    }
    let got = json_lines(&String::from_utf8_lossy(&dec.stdout));
    let agent: BTreeMap<u64, &serde_json::Value> =
        lines.iter().filter_map(|l| Some((l["seq"].as_u64()?, &l["loops"]))).collect();
    let (mut same, mut summaries, mut last_misses) = (0, 0, None);
    for l in got.iter().filter(|l| l["type"] == "summary") {
        summaries += 1;
        let Some(loops) = l.get("loops") else { continue };
        let seq = l["seq"].as_u64().unwrap();
        let Some(want) = agent.get(&seq) else { return Err(format!("seq {seq}: loops the agent never printed")) };
        if loops != *want {
            return Err(format!("seq {seq}: received {loops}\nagent printed {want}"));
        }
        same += 1;
        let misses: u64 = loops.as_array().unwrap().iter().filter_map(|x| x["cycle"]["total_misses"].as_u64()).sum();
        // The largest: the last listings come after the zoo exited (its
        // loops forgotten, no misses left to sum).
        if last_misses.is_none_or(|(_, m)| misses >= m) {
            last_misses = Some((seq, misses));
        }
    }
    let records = got.iter().filter(|l| l["type"] == "alert" && l["event"] == "miss").count();
    let Some((seq, misses)) = last_misses else {
        return Err(format!("no summary of {summaries} carried loops"));
    };
    if misses == 0 {
        return Err(format!("no listing received counted a miss (the last: seq {seq})"));
    }
    Ok(format!(
        "{same} of {summaries} summaries carried the agent's loops; at seq {seq} {misses} misses since start \
         (the agent's), {records} miss records crossed"
    ))
}

/// What a real Prometheus scraped of the watched loops: for each loop the
/// agent counted misses of, the largest `latmon_cycle_misses_total`
/// (labels loop, tid) is one of the totals the agent printed for that
/// loop (no wall-clock bound: which interval the last scrape caught is
/// the scheduler's business), and its period is the cycle family's. Err: what
/// is wrong.
fn check_scraped(lines: &[serde_json::Value], prom: &crate::common::prometheus::Prometheus) -> Result<String, String> {
    let mut said = Vec::new();
    let mut totals: BTreeMap<(String, u64), Vec<(u64, u64)>> = BTreeMap::new();
    for (_, x) in listed(lines) {
        if let Some(m) = x["cycle"]["total_misses"].as_u64() {
            let key = (x["comm"].as_str().unwrap().to_string(), x["tid"].as_u64().unwrap());
            totals.entry(key).or_default().push((m, x["cycle"]["period_ns"].as_u64().unwrap()));
        }
    }
    for ((comm, tid), seen) in totals.iter().filter(|(_, v)| v.iter().any(|&(m, _)| m > 0)) {
        let sel = format!("{{loop=\"{comm}\",tid=\"{tid}\"}}");
        let q = format!("max_over_time(latmon_cycle_misses_total{sel}[10m])");
        let Some(got) = prom.scalar(&q, None) else { return Err(format!("{q}: no sample")) };
        if !seen.iter().any(|&(m, _)| m as f64 == got) {
            return Err(format!("{q} = {got}, not one of the agent's totals {seen:?}"));
        }
        let q = format!("max_over_time(latmon_cycle_period_seconds{sel}[10m])");
        let period = prom.scalar(&q, None).unwrap_or(-1.0);
        if !seen.iter().any(|&(_, p)| (p as f64 / 1e9 - period).abs() < 1e-9) {
            return Err(format!("{q} = {period}, not one of the agent's periods {seen:?}"));
        }
        said.push(format!("{comm}[{tid}] {got} misses, period {period} s"));
    }
    if said.is_empty() {
        return Err("no watched loop counted a miss".into());
    }
    Ok(said.join("; "))
}

/// The zoo's loops against their watched counts. Err: what is wrong.
fn check_watched(out: &str, lines: &[serde_json::Value]) -> Result<String, String> {
    let (truth, _) = truth(out);
    let rows = rows_of(out, "miss");
    let near = rows_of(out, "near");
    let of = |tid: u64| -> Vec<(&serde_json::Value, &serde_json::Value)> {
        lines
            .iter()
            .flat_map(|l| l["loops"].as_array().into_iter().flatten().map(move |x| (l, x)))
            .filter(|(_, x)| x["tid"].as_u64() == Some(tid))
            .collect()
    };
    let mut said = Vec::new();
    for t in truth.values() {
        let listed = of(t.tid);
        let watched = listed.iter().filter(|(_, x)| x["watched"] == true).count();
        let periodic_rt = t.class == "periodic" && t.policy != "SCHED_OTHER";
        if !periodic_rt {
            if watched > 0 {
                return Err(format!("{} ({}, {}) watched", t.name, t.class, t.policy));
            }
            continue;
        }
        if watched == 0 {
            return Err(format!("{} ({}) never watched in {} listings", t.name, t.policy, listed.len()));
        }
        if t.policy == "SCHED_DEADLINE" {
            // Its jobs end in sched_yield, no timer sleep: not yet a
            // cycle (issue 42 item 2, open).
            said.push(format!("{}: watched", t.name));
            continue;
        }
        let first = listed.iter().find(|(_, x)| x["watched"] == true).map(|(l, _)| l["time_ns"].as_u64().unwrap());
        let last = listed.iter().rev().find(|(_, x)| x["cycle"].is_object());
        let Some((last_line, last)) = last else { return Err(format!("{}: watched, never a cycle counted", t.name)) };
        let (from, to) = (first.unwrap(), last_line["time_ns"].as_u64().unwrap());
        let c = &last["cycle"];
        let total = c["total_misses"].as_u64().unwrap();
        let count =
            |rows: &[(String, u64)]| rows.iter().filter(|(n, r)| *n == t.name && (from..=to).contains(r)).count();
        let (want, near) = (count(&rows) as u64, count(&near) as u64);
        let rules = c["total_rules"].as_u64().unwrap();
        let line = format!(
            "{}: {} cycles, misses {total} (zoo {want}, {near} near, released in {from}..={to}), period {} ns, rules {rules}",
            t.name, c["total_cycles"], c["period_ns"]
        );
        if t.name == "zoo_abs1ms" || t.name == "zoo_tfd2ms" {
            if want < 10 {
                return Err(format!("{line}: too few misses injected to judge"));
            }
            if total + 2 < want || total > want + near + 2 {
                return Err(format!("{line}: the misses are not the zoo's"));
            }
            if rules != 0 {
                return Err(format!("{line}: an absolute sleep or a timerfd read breaks no rule"));
            }
        }
        if t.name == "zoo_rel5ms" && rules == 0 {
            return Err(format!("{line}: a relative sleep breaks a rule"));
        }
        said.push(line);
    }
    Ok(said.join("; "))
}
