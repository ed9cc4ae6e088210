// SPDX-License-Identifier: MIT
//! Live tests of outlier anatomy (root, this kernel): known interference
//! is injected on the CPU of a periodic loop, and every late wakeup must
//! name it, with the sizes the interferer measured itself. They fail when
//! the attribution is wrong: a cause missing, named after the wrong task,
//! sized off its own measurement, or parts that do not sum to the latency.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;

/// One anatomy test at a time (they pin to the same CPU).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The CPU the loop and its interferer share (the last one).
fn test_cpu() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
}

fn now_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn gettid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::gettid() as u32 }
}

/// The calling thread: `policy` (SCHED_FIFO, SCHED_OTHER) at `prio`
/// (FIFO) or nice `prio` (OTHER), timer slack 1 ns.
fn set_sched(policy: i32, prio: i32) {
    // SAFETY: plain syscalls on valid pointers.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_TIMERSLACK, 1usize), 0);
        let rt = if policy == libc::SCHED_FIFO { prio } else { 0 };
        let p = libc::sched_param { sched_priority: rt };
        assert_eq!(
            libc::sched_setscheduler(0, policy, &p),
            0,
            "sched_setscheduler: {}",
            std::io::Error::last_os_error()
        );
        if policy == libc::SCHED_OTHER {
            assert_eq!(libc::setpriority(libc::PRIO_PROCESS, 0, prio), 0);
        }
    }
}

fn sleep_until(t_ns: u64) {
    let ts = libc::timespec { tv_sec: (t_ns / 1_000_000_000) as i64, tv_nsec: (t_ns % 1_000_000_000) as i64 };
    // SAFETY: valid pointer; EINTR just ends the sleep early.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// A loop thread named `comm` on the test CPU: `cycles` periods of 1 ms
/// (absolute deadlines) at `policy`/`prio`.
fn periodic_loop(comm: &str, policy: i32, prio: i32, cycles: u32) -> std::thread::JoinHandle<()> {
    let cpu = test_cpu();
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            pin_to_cpu(cpu);
            set_sched(policy, prio);
            let mut next = now_ns();
            for _ in 0..cycles {
                next += 1_000_000;
                sleep_until(next);
            }
        })
        .unwrap()
}

/// Bursts of CPU time [start, end] a hog measured itself (CLOCK_MONOTONIC,
/// the clock of BPF's ktime), and its thread id.
struct Hog {
    tid: u32,
    bursts: Vec<(u64, u64)>,
}

/// A SCHED_FIFO hog at `prio`, pinned to the test CPU: every 20 ms a busy
/// burst of 300..500 us (varying), until `stop`.
fn fifo_hog(comm: &str, prio: i32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Hog> {
    let cpu = test_cpu();
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            pin_to_cpu(cpu);
            set_sched(libc::SCHED_FIFO, prio);
            let mut hog = Hog { tid: gettid(), bursts: Vec::new() };
            // Off the loop's 1 ms grid, so bursts start anywhere in a period.
            let mut next = now_ns() + 10_333_000;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                sleep_until(next);
                let len = 300_000 + (i * 37_000) % 200_000;
                let start = now_ns();
                let mut end = start;
                while end - start < len {
                    end = now_ns();
                }
                hog.bursts.push((start, end));
                // 137 us later each time: bursts drift across the loop's period.
                next += 20_137_000;
                i += 1;
            }
            hog
        })
        .unwrap()
}

/// Alert records of probe `probe` about thread `comm`.
fn alerts_of(lines: &[serde_json::Value], probe: &str, comm: &str) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter_map(|l| l["alert_records"].as_array())
        .flatten()
        .filter(|r| r["probe"] == probe && r["comm"] == comm)
        .cloned()
        .collect()
}

/// Every record's parts sum to its latency exactly; their ns.
fn assert_parts_sum(r: &serde_json::Value) -> Vec<&serde_json::Value> {
    let causes: Vec<&serde_json::Value> =
        r["causes"].as_array().unwrap_or_else(|| panic!("no causes in {r}")).iter().collect();
    let sum: u64 = causes.iter().map(|c| u(c, "ns")).sum();
    assert_eq!(sum, u(r, "latency_ns"), "parts must sum to latency_ns: {r}");
    assert!(r["cpu_woken"].is_u64() && r["cpu_ran"].is_u64(), "{r}");
    causes
}

#[test]
fn a_fifo_hog_on_the_loops_cpu_is_named_with_the_time_it_measured() {
    hog_case("timer");
}

/// The same through `chain`: its end-to-end line's alerts carry the
/// anatomy of the timer wakeup.
#[test]
fn chain_alerts_name_the_fifo_hog_too() {
    hog_case("chain");
}

/// And through `runq`: the wait from the wakeup to running.
#[test]
fn runq_alerts_name_the_fifo_hog_too() {
    hog_case("runq");
}

fn hog_case(family: &str) {
    let _s = serial();
    let (loop_comm, hog_comm) = ("lm-anat-loop", "lm-anat-hog");
    let spec = format!("{family},comm={loop_comm},threshold=100us");
    let child = start_run(&["--probe", &spec, "--interval", "60m", "--format", "json"]);
    let stop_hog = Arc::new(AtomicBool::new(false));
    let hog = fifo_hog(hog_comm, 60, Arc::clone(&stop_hog));
    // 2.5 s: ~125 bursts, ~125 alerts, within the token bucket's
    // ALERT_BURST + ALERT_RATE x seconds.
    periodic_loop(loop_comm, libc::SCHED_FIFO, 50, 2_500).join().unwrap();
    stop_hog.store(true, Ordering::Relaxed);
    let hog = hog.join().unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let recs = alerts_of(&lines, family, loop_comm);
    let (mut checked, mut worst, mut late_irq, mut stalled, mut outranked) = (0, 0i64, 0, 0, 0);
    let (mut expiry_late, mut off) = (0, 0);
    for r in &recs {
        let causes = assert_parts_sum(r);
        let (lat, end) = (u(r, "latency_ns"), u(r, "time_ns"));
        let start = end.saturating_sub(lat);
        let overlap: u64 = hog.bursts.iter().map(|&(bs, be)| be.min(end).saturating_sub(bs.max(start))).sum();
        if overlap < 50_000 {
            continue;
        }
        // A timer interrupt more than 1 ms late for a FIFO thread with 1 ns
        // of slack: on this shared VM, the host did not run the vCPU (seen
        // up to 20 ms under load). Then the hog's own clock readings are
        // off by as much: such records are counted, not checked.
        let delay: u64 = causes.iter().filter(|c| c["kind"] == "timer_irq_delay").map(|c| u(c, "ns")).sum();
        if delay > 1_000_000 {
            stalled += 1;
            continue;
        }
        // The hog is named, with its policy and priority, and is the
        // largest cause - unless other tasks of this shared machine held
        // the CPU longer in the same wait (a kworker in a non-preemptible
        // stretch was seen): those are counted and must stay few. A timer
        // interrupt that came late is before the wakeup and not compared.
        let Some(&top) = causes.iter().find(|c| c["kind"] == "task" && c["pid"].as_u64() == Some(u64::from(hog.tid)))
        else {
            // The expiry itself was handled only after the burst (seen
            // now and then: the timer's handling deferred while the hog
            // ran); then the wait after the wakeup had no hog in it, and
            // the delay must cover the overlap. Counted; must stay few.
            assert!(delay + 20_000 >= overlap, "the hog must be named (overlap {overlap} ns): {r}");
            expiry_late += 1;
            continue;
        };
        assert_eq!(
            (top["comm"].as_str(), top["policy"].as_str(), top["prio"].as_u64()),
            (Some(hog_comm), Some("fifo"), Some(60)),
            "{r}"
        );
        let first = *causes.iter().find(|c| c["kind"] != "timer_irq_delay").unwrap();
        late_irq += usize::from(causes[0]["kind"] == "timer_irq_delay");
        if first["pid"] != top["pid"] {
            eprintln!("hog not the largest cause: {r}");
            outranked += 1;
        }
        // Its time within 10 % (or 20 us) of what it measured itself. The
        // hog measures wall time: interrupts of the wait that ran inside
        // its burst are in its measurement but are causes of their own
        // (irq, softirq); those that ran outside it are not. So the hog's
        // share lies between the overlap less those interrupts and the
        // overlap, each within the tolerance.
        let interrupts: u64 =
            causes.iter().filter(|c| c["kind"] == "irq" || c["kind"] == "softirq").map(|c| u(c, "ns")).sum();
        let allowed = (overlap / 10).max(20_000) as i64;
        let hog_ns = u(top, "ns") as i64;
        let (lo, hi) = (overlap.saturating_sub(interrupts) as i64, overlap as i64);
        let err = if hog_ns < lo { lo - hog_ns } else { (hog_ns - hi).max(0) };
        // This shared VM stalls now and then (host load): the hog's time
        // around its burst can grow by a stall it did not measure. A few
        // records may miss the tolerance, none by more than 3 times it.
        assert!(
            err <= 3 * allowed,
            "hog {hog_ns} ns vs measured overlap {overlap} ns ({interrupts} ns of interrupts in the wait, allowed \
             {allowed}): {r}"
        );
        if err > allowed {
            eprintln!("hog outside the tolerance: {r}");
            off += 1;
        }
        worst = worst.max((hog_ns - overlap as i64).abs());
        checked += 1;
    }
    eprintln!(
        "FIGURES anatomy fifo hog ({family}): {} bursts, {} alert records, {checked} overlapping a burst checked ({late_irq} with \
         a larger timer_irq_delay, {outranked} with another task larger, {expiry_late} expiries handled after the burst, {off} outside the tolerance, \
         {stalled} skipped: vCPU stalled), worst |hog \
         ns - measured overlap| {worst} ns",
        hog.bursts.len(),
        recs.len()
    );
    assert!(checked >= 20, "{checked} alerts checked");
    assert!(off * 10 <= checked, "{off} of {checked} hog times outside 10 % (or 20 us) of the measured overlap");
    assert!(expiry_late * 5 <= checked, "{expiry_late} expiries handled after the burst, {checked} checked");
    assert!(outranked * 10 <= checked, "the hog must be the largest cause of nearly all: {outranked} of {checked} not");
}

#[test]
fn a_sched_other_competitor_is_named() {
    let _s = serial();
    let (loop_comm, comp_comm) = ("lm-anat-oloop", "lm-anat-comp");
    let spec = format!("timer,comm={loop_comm},threshold=100us");
    let child = start_run(&["--probe", &spec, "--interval", "60m", "--format", "json"]);
    let stop_comp = Arc::new(AtomicBool::new(false));
    let cpu = test_cpu();
    let st = Arc::clone(&stop_comp);
    // A busy SCHED_OTHER task at nice -10 against a nice 10 loop: the
    // loop's wakeups wait for it.
    let comp = std::thread::Builder::new()
        .name(comp_comm.into())
        .spawn(move || {
            pin_to_cpu(cpu);
            set_sched(libc::SCHED_OTHER, -10);
            let tid = gettid();
            while !st.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            tid
        })
        .unwrap();
    periodic_loop(loop_comm, libc::SCHED_OTHER, 10, 2_000).join().unwrap();
    stop_comp.store(true, Ordering::Relaxed);
    let comp_tid = comp.join().unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let recs = alerts_of(&lines, "timer", loop_comm);
    let (mut named, mut present, mut others, mut waited) = (0, 0, 0, 0);
    let (mut waited_ns, mut comp_ns) = (0u64, 0u64);
    for r in &recs {
        let causes = assert_parts_sum(r);
        // A loop held off the CPU before it armed its timer (preempted in
        // its own cycle) arms it past its expiry: the expiry is handled at
        // once, late, and the record is that timer_irq_delay. The wakeup
        // waits this test is about are the others.
        let delay: u64 = causes.iter().filter(|c| c["kind"] == "timer_irq_delay").map(|c| u(c, "ns")).sum();
        if delay * 2 >= u(r, "latency_ns") {
            continue;
        }
        waited += 1;
        let comp = causes.iter().find(|c| c["kind"] == "task" && c["pid"].as_u64() == Some(u64::from(comp_tid)));
        waited_ns += u(r, "latency_ns") - delay;
        if let Some(c) = comp {
            present += 1;
            comp_ns += u(c, "ns");
            assert_eq!(
                (c["comm"].as_str(), c["policy"].as_str(), c["prio"].as_i64()),
                (Some(comp_comm), Some("other"), Some(-10)),
                "{r}"
            );
            if causes[0]["pid"] == c["pid"] {
                named += 1;
                continue;
            }
        }
        if others < 8 {
            eprintln!("competitor not the largest cause: {r}");
            others += 1;
        }
    }
    eprintln!(
        "FIGURES anatomy sched_other competitor: {} alert records, {waited} of them waits after the wakeup, {present} \
         naming the competitor, {named} with it largest",
        recs.len()
    );
    // This machine is shared (other builds, terminals): their tasks are
    // causes too. The competitor must still be named in most waits.
    assert!(waited >= 10, "the competitor should delay the loop's wakeups: {waited} of {} alerts", recs.len());
    assert!(present * 10 >= waited * 7, "the competitor must be named in most waits: {present} of {waited}");
    assert!(named * 10 >= waited * 4, "the competitor must often be the largest cause: {named} of {waited}");
    // And it holds most of their time (what the switch charges it, not
    // only the interrupts that caught it running).
    eprintln!("FIGURES anatomy sched_other competitor: {comp_ns} of {waited_ns} ns waited charged to it");
    assert!(comp_ns * 2 >= waited_ns, "the competitor's share: {comp_ns} of {waited_ns} ns");
}

#[test]
fn loopback_softirqs_on_the_loops_cpu_are_named_within_what_the_softirq_probe_measured() {
    let _s = serial();
    let loop_comm = "lm-anat-nloop";
    let spec = format!("timer,comm={loop_comm},threshold=15us");
    // The softirq probe in the same agent measures each NET_RX run.
    let child = start_run(&["--probe", &spec, "--probe", "softirq", "--interval", "60m", "--format", "json"]);
    let stop_net = Arc::new(AtomicBool::new(false));
    let cpu = test_cpu();
    let st = Arc::clone(&stop_net);
    // Loopback TCP from the loop's CPU: NET_RX runs there (at the
    // sender's bottom-half enable or irq exit), where the loop waits.
    let net = std::thread::spawn(move || {
        pin_to_cpu(cpu);
        while !st.load(Ordering::Relaxed) {
            loopback_traffic(4 << 20);
        }
    });
    periodic_loop(loop_comm, libc::SCHED_FIFO, 50, 2_000).join().unwrap();
    stop_net.store(true, Ordering::Relaxed);
    net.join().unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let last = lines.last().expect("a report");
    let vec_probe = |name: &str| last["probes"].as_array().unwrap().iter().find(|p| p["name"] == name).cloned();
    let recs = alerts_of(&lines, "timer", loop_comm);
    let (mut seen, mut within_one_run) = (0, 0);
    let mut per_vector = std::collections::BTreeMap::<String, u64>::new();
    for r in &recs {
        for c in assert_parts_sum(r) {
            if c["kind"] != "softirq" {
                continue;
            }
            let vector = c["vector"].as_str().unwrap_or_else(|| panic!("a vector name: {r}")).to_string();
            let p = vec_probe(&format!("softirq:{vector}")).unwrap_or_else(|| panic!("softirq:{vector} measured: {r}"));
            if vector == "NET_RX" {
                seen += 1;
                within_one_run += usize::from(u(c, "ns") <= u(&p, "max_ns"));
            }
            *per_vector.entry(vector).or_default() += u(c, "ns");
        }
    }
    // Plausible sizes: the waits of one thread do not overlap, so what
    // they charge a vector is part of the runs the softirq probe measured
    // (sum = mean x count, +1 ns per run for the mean's rounding).
    for (vector, ns) in &per_vector {
        let p = vec_probe(&format!("softirq:{vector}")).unwrap();
        let measured = (u(&p, "mean_ns") + 1) * u(&p, "count");
        assert!(*ns <= measured, "softirq {vector}: {ns} ns charged to waits, {measured} ns measured in all: {p}");
    }
    eprintln!(
        "FIGURES anatomy loopback softirqs: {} alert records, {seen} naming NET_RX ({within_one_run} within one \
         run's max), ns charged per vector {per_vector:?}",
        recs.len()
    );
    assert!(seen >= 3, "NET_RX must appear among the causes: {seen} of {} records", recs.len());
    // Most waits hold at most one NET_RX run.
    assert!(within_one_run * 10 >= seen * 8, "{within_one_run} of {seen} NET_RX causes within one run's max");
}
