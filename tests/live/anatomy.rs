// SPDX-License-Identifier: MIT
//! Live tests of outlier anatomy (root, this kernel): known interference
//! is injected on the CPU of a periodic loop, and every late wakeup must
//! name it, with the sizes the interferer measured itself. They fail when
//! the attribution is wrong: a cause missing, named after the wrong task,
//! sized off its own measurement, or parts that do not sum to the latency.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

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
/// (absolute deadlines) at `policy`/`prio`. Returns each cycle's deadline
/// and when the loop ran after it (its own clock readings).
fn periodic_loop(comm: &str, policy: i32, prio: i32, cycles: u32) -> std::thread::JoinHandle<Vec<(u64, u64)>> {
    periodic_loop_on(test_cpu(), comm, policy, prio, cycles)
}

/// The same on `cpu`.
fn periodic_loop_on(
    cpu: usize,
    comm: &str,
    policy: i32,
    prio: i32,
    cycles: u32,
) -> std::thread::JoinHandle<Vec<(u64, u64)>> {
    loop_thread(cpu, comm, policy, prio, cycles)
}

fn loop_thread(
    cpu: usize,
    comm: &str,
    policy: i32,
    prio: i32,
    cycles: u32,
) -> std::thread::JoinHandle<Vec<(u64, u64)>> {
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            pin_to_cpu(cpu);
            set_sched(policy, prio);
            let mut next = now_ns();
            let mut deadlines = Vec::with_capacity(cycles as usize);
            for _ in 0..cycles {
                next += 1_000_000;
                sleep_until(next);
                deadlines.push((next, now_ns()));
            }
            deadlines
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
    fifo_hog_on(test_cpu(), comm, prio, stop)
}

/// The same on `cpu`.
fn fifo_hog_on(cpu: usize, comm: &str, prio: i32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Hog> {
    // 137 us later each time: bursts drift across the loop's period.
    fifo_hog_every(cpu, comm, prio, 20_137_000, stop, false)
}

/// [`fifo_hog_on`] with a burst every `period_ns`.
fn fifo_hog_every(
    cpu: usize,
    comm: &str,
    prio: i32,
    period_ns: u64,
    stop: Arc<AtomicBool>,
    rename: bool,
) -> std::thread::JoinHandle<Hog> {
    let comm = comm.to_string();
    std::thread::Builder::new()
        .name(comm.clone())
        .spawn(move || {
            pin_to_cpu(cpu);
            set_sched(libc::SCHED_FIFO, prio);
            let mut hog = Hog { tid: gettid(), bursts: Vec::new() };
            // Off the loop's 1 ms grid, so bursts start anywhere in a period.
            let mut next = now_ns() + 10_333_000;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if rename {
                    // A new name every burst (what a hostile or careless
                    // task can do): `COMM-N`, cut to the kernel's 15 bytes.
                    let name = std::ffi::CString::new(format!("{comm}-{i}").into_bytes()).unwrap();
                    // SAFETY: a valid NUL-terminated string; the kernel copies 16 bytes at most.
                    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                }
                sleep_until(next);
                let len = 300_000 + (i * 37_000) % 200_000;
                let start = now_ns();
                let mut end = start;
                while end - start < len {
                    end = now_ns();
                }
                hog.bursts.push((start, end));
                next += period_ns;
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
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_fifo_hog_on_the_loops_cpu_is_named_with_the_time_it_measured() {
    hog_case("timer", &[], "tp_btf");
}

/// The same through `chain`: its end-to-end line's alerts carry the
/// anatomy of the timer wakeup.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn chain_alerts_name_the_fifo_hog_too() {
    hog_case("chain", &[], "tp_btf");
}

/// And through `runq`: the wait from the wakeup to running.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_alerts_name_the_fifo_hog_too() {
    hog_case("runq", &[], "tp_btf");
}

/// runq's raw_tp rung (pid hash, untrusted task pointers) carries the
/// same anatomy.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_raw_tp_alerts_name_the_fifo_hog_too() {
    hog_case("runq", &[("LATMON_SKIP_ATTACH", "tp_btf")], "raw_tp");
}

/// And runq's no-BTF build, as on a kernel without BTF: the hog named
/// from sched_switch's record (pid, comm, priority) and its policy read
/// from the thread.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_no_btf_alerts_name_the_fifo_hog_too() {
    hog_case("runq", &[("LATMON_FORCE_NO_BTF", "1")], "tracepoint");
}

/// `family` with `env` (the rung forced) must attach via `attach`, and
/// its records carry anatomies there.
fn hog_case(family: &str, env: &[(&str, &str)], attach: &str) {
    let _s = serial();
    let (loop_comm, hog_comm) = ("lm-anat-loop", "lm-anat-hog");
    let spec = format!("{family},comm={loop_comm},threshold=100us");
    let child = start_run_env(&["--probe", &spec, "--interval", "60m", "--format", "json"], env);
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
    let p = last_probe(&lines, family).expect("the probe's line");
    assert_eq!(p["attach"], attach, "{p}");
    let recs = alerts_of(&lines, family, loop_comm);
    let (mut checked, mut worst, mut late_irq, mut stalled, mut outranked) = (0, 0i64, 0, 0, 0);
    let (mut expiry_late, mut off, mut stall_added) = (0, 0, 0);
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
        // A late timer interrupt (the host's, on this VM) is charged to
        // timer_irq_delay first, for as much of the hog's burst as it
        // covered: that much of the overlap is not the hog's either.
        let (lo, hi) = (overlap.saturating_sub(interrupts + delay) as i64, overlap as i64);
        let err = if hog_ns < lo { lo - hog_ns } else { (hog_ns - hi).max(0) };
        // This shared VM stalls now and then (host load): the hog's time
        // around its burst can grow by a stall it did not measure (the
        // host held the vCPU between the hog's switch-in and its first
        // clock read: seen as 0.16-0.6 ms more than measured, in 1 of ~45
        // records, on an idle VM). A few records may miss the tolerance;
        // none by more than 3 times it, but for at most 1 in 20 that
        // exceed it (a stall only adds).
        if hog_ns > hi + 3 * allowed {
            eprintln!("hog above 3x the tolerance (a vCPU stall?): {r}");
            stall_added += 1;
        } else {
            assert!(
                err <= 3 * allowed,
                "hog {hog_ns} ns vs measured overlap {overlap} ns ({interrupts} ns of interrupts in the wait, \
                 {delay} ns timer_irq_delay, allowed {allowed}): {r}"
            );
        }
        if err > allowed {
            eprintln!("hog outside the tolerance: {r}");
            off += 1;
        }
        worst = worst.max((hog_ns - overlap as i64).abs());
        checked += 1;
    }
    eprintln!(
        "FIGURES anatomy fifo hog ({family}, {attach}): {} bursts, {} alert records, {checked} overlapping a burst checked ({late_irq} with \
         a larger timer_irq_delay, {outranked} with another task larger, {expiry_late} expiries handled after the burst, {off} outside the tolerance \
         ({stall_added} above 3x), {stalled} skipped: vCPU stalled), worst |hog \
         ns - measured overlap| {worst} ns",
        hog.bursts.len(),
        recs.len()
    );
    assert_tally_matches_records(&lines, family, &recs, hog.tid);
    assert!(checked >= 20, "{checked} alerts checked");
    assert!(off * 10 <= checked, "{off} of {checked} hog times outside 10 % (or 20 us) of the measured overlap");
    assert!(stall_added * 20 <= checked, "{stall_added} of {checked} hog times above 3x the tolerance");
    assert!(expiry_late * 5 <= checked, "{expiry_late} expiries handled after the burst, {checked} checked");
    assert!(outranked * 10 <= checked, "the hog must be the largest cause of nearly all: {outranked} of {checked} not");
}

/// Thread `tid`'s ns among `causes` (a JSON array of causes).
fn task_ns(causes: &serde_json::Value, tid: u32) -> u64 {
    let of = |c: &&serde_json::Value| c["kind"] == "task" && c["pid"].as_u64() == Some(u64::from(tid));
    causes.as_array().map_or(0, |a| a.iter().filter(of).map(|c| u(c, "ns")).sum())
}

/// A JSON top cause as Modbus registers 25 and 26-27 code it
/// (docs/modbus-map.md): its kind and its id.
fn modbus_cause(c: &serde_json::Value) -> (u64, u64) {
    const SOFTIRQS: [&str; 10] =
        ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"];
    let rest = c["rest"] == true;
    match c["kind"].as_str() {
        Some("task") if rest => (2, 0),
        Some("task") => (1, u(c, "pid")),
        Some("irq") if rest => (4, 0),
        Some("irq") => (3, u(c, "irq")),
        Some("softirq") => {
            (5, SOFTIRQS.iter().position(|v| c["vector"] == *v).unwrap_or_else(|| panic!("vector of {c}")) as u64)
        }
        Some("timer_irq_delay") => (6, 0),
        Some("other") => (7, 0),
        _ => panic!("a top cause Modbus has no code for: {c}"),
    }
}

/// The probe `name` of an interval.
fn probe_of<'a>(line: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    line["probes"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name} in {line}"))
}

/// One interval (the whole run): its `alert_causes` tally every alert,
/// and with no record refused they are the records' causes summed,
/// exactly: the hog's time, and the top cause.
fn assert_tally_matches_records(lines: &[serde_json::Value], family: &str, recs: &[serde_json::Value], hog: u32) {
    assert_eq!(lines.len(), 1, "one interval");
    let p = probe_of(&lines[0], family);
    let c = &p["alert_causes"];
    let (tally_hog, rec_hog) =
        (task_ns(&c["causes"], hog), recs.iter().map(|r| task_ns(&r["causes"], hog)).sum::<u64>());
    let rec_ns: u64 = recs.iter().map(|r| u(r, "latency_ns")).sum();
    let parts: u64 = c["causes"].as_array().unwrap().iter().map(|x| u(x, "ns")).sum::<u64>() + u(c, "folded_ns");
    eprintln!(
        "FIGURES top causes ({family}): {} alerts, {} ns alerted, hog {tally_hog} ns (records: {} of them, {rec_ns} ns, \
         hog {rec_hog} ns), top {}",
        u(c, "alerts"),
        u(c, "alerted_ns"),
        recs.len(),
        c["causes"][0]
    );
    assert_eq!(u(c, "alerts"), u(p, "total_alerts"), "every alert tallied: {c}");
    assert_eq!(parts, u(c, "alerted_ns"), "the causes sum to the alerted time: {c}");
    let refused = u(p, "total_alerts_dropped");
    assert_eq!(recs.len() as u64 + refused, u(c, "alerts"), "records + refused = alerts: {p}");
    // ~125 hog bursts stay within the token bucket. A host that withholds
    // this VM's vCPU makes alerts of its own (timer_irq_delay, seen at 93 %
    // of 909 alerts in 2.5 s beside BitBake): then some records are
    // refused, and the tally holds more than the records. The records'
    // attribution was checked one by one above; the refused-records test
    // checks the tally against the hog's own measurement.
    if refused > 0 {
        eprintln!("FIGURES top causes ({family}): {refused} records refused (a stalled vCPU's alerts); tally checked to hold the records");
        assert!(
            u(c, "alerted_ns") >= rec_ns && tally_hog >= rec_hog && tally_hog > 0,
            "the tally holds the records: {c}"
        );
        return;
    }
    assert_eq!(u(c, "alerted_ns"), rec_ns, "{c}");
    assert_eq!(tally_hog, rec_hog, "the tally's hog time is the records': {c}");
    // The top cause is the records' largest, summed: the hog, unless a
    // task of another test on this shared machine held the CPU longer, or
    // this VM's host delivered the timer interrupts late (timer_irq_delay;
    // seen at 88 % of the alerted time beside a compile). A cause is its
    // kind and id (pid, IRQ, vector, or the folded rest of its kind).
    let id = |x: &serde_json::Value| format!("{}/{}/{}/{}/{}", x["kind"], x["pid"], x["irq"], x["vector"], x["rest"]);
    let mut by_cause = std::collections::BTreeMap::<String, u64>::new();
    for cause in recs.iter().filter_map(|r| r["causes"].as_array()).flatten() {
        *by_cause.entry(id(cause)).or_default() += u(cause, "ns");
    }
    let (largest, &largest_ns) = by_cause.iter().max_by_key(|e| *e.1).expect("causes in the records");
    let top = &c["causes"][0];
    assert_eq!((id(top), u(top, "ns")), (largest.clone(), largest_ns), "{c}");
    let share = top["share"].as_f64().unwrap();
    assert!((share - largest_ns as f64 / u(c, "alerted_ns") as f64).abs() < 1e-4, "{c}");
    assert!(tally_hog > 0 && task_ns(&c["causes"], hog) == tally_hog, "the hog is named: {c}");
}

/// 16-bit input registers `from..from + count` read with mbpoll in one
/// request (one image), as unsigned values.
fn mbpoll_registers(port: u16, from: u16, count: u16) -> Vec<u64> {
    let out = std::process::Command::new("mbpoll")
        .args(["-m", "tcp", "-p", &port.to_string(), "-t", "3", "-0", "-1", "-r", &from.to_string()])
        .args(["-c", &count.to_string(), "127.0.0.1"])
        .output()
        .expect("mbpoll (apt-get install mbpoll)");
    let text = String::from_utf8_lossy(&out.stdout);
    (from..from + count)
        .map(|r| {
            let v: i64 = text
                .lines()
                .find_map(|l| {
                    l.trim().strip_prefix(&format!("[{r}]:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
                })
                .unwrap_or_else(|| panic!("mbpoll register {r}: {text} {}", String::from_utf8_lossy(&out.stderr)));
            (v as u64) & 0xFFFF
        })
        .collect()
}

/// Bursts every 1.137 ms against a 1 ms loop: ~300 alerts a second, three
/// times what the token bucket lets through. Every alert still counts in
/// the interval's causes: the tally's hog time is what the hog measured
/// of the loop's waits (its bursts from each deadline they cover to their
/// end), far more than the delivered records hold; and the same top
/// cause reads in JSON, in Modbus (mbpoll) and in a real Prometheus.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn refused_records_still_count_in_the_intervals_top_causes() {
    use common::prometheus::{free_port, Prometheus};
    let _s = serial();
    let (loop_comm, hog_comm) = ("lm-anat-rloop", "lm-anat-rhog");
    let threshold_ns = 50_000;
    let spec = format!("timer,comm={loop_comm},threshold=50us");
    let (mb, pp) = (free_port(), free_port());
    let (modbus, prom) = (format!("modbus-tcp://127.0.0.1:{mb}"), format!("prom://127.0.0.1:{pp}"));
    let args = ["--probe", &spec, "--interval", "500ms", "--format", "json", "--output", "-", "--output", &modbus];
    let child = start_run(&[&args[..], &["--output", &prom]].concat());
    let server = Prometheus::start("causes", &format!("127.0.0.1:{pp}"), false);
    // Its first scrape comes seconds after it is ready (target discovery).
    server.wait_for("up{job=\"latmon\"}", 1.0);
    let stop_hog = Arc::new(AtomicBool::new(false));
    let hog = fifo_hog_every(test_cpu(), hog_comm, 60, 1_137_000, Arc::clone(&stop_hog), false);
    let lp = periodic_loop(loop_comm, libc::SCHED_FIFO, 50, 4_000);
    // Mid-run: the header's top cause, and the JSON interval it shows.
    std::thread::sleep(std::time::Duration::from_millis(2_600));
    let w = mbpoll_registers(mb, 0, 32);
    let mid = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let seq = w[8] << 48 | w[9] << 32 | w[10] << 16 | w[11];
    let deadlines = lp.join().unwrap();
    stop_hog.store(true, Ordering::Relaxed);
    let hog = hog.join().unwrap();
    // Quiet intervals for the scrapes to catch up (the counter is final).
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let so_far = json_lines(&stdout_so_far(&child));
    let alerted_s =
        so_far.iter().map(|l| u(&probe_of(l, "timer")["alert_causes"], "alerted_ns")).sum::<u64>() as f64 / 1e9;
    let scraped = server.scalar("latmon_probe_alerted_seconds_total{probe=\"timer\"}", None);
    // Ranks 1..3 as Prometheus held them mid-run, at three scrapes 1 s apart
    // (its latest sample at each instant).
    let ratios: Vec<Vec<serde_json::Value>> = [mid - 2.0, mid - 1.0, mid]
        .iter()
        .map(|&t| server.query("latmon_probe_alerted_cause_ratio{probe=\"timer\"}", Some(t)))
        .collect();
    if ratios.iter().any(Vec::is_empty) {
        eprintln!("Prometheus at {mid}: {:?}", server.query("{__name__=~\"latmon_probe_alert.*\"}", Some(mid)));
    }
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);

    // Modbus mirrors JSON's interval `seq`: its top cause, id, alerted
    // time and share. Which cause that is, is the JSON check's below: a
    // single interval may be topped by this VM's host delaying the timer
    // interrupt (CI: timer_irq_delay 58.7 %, the hog 38.5 %), so the
    // attribution is judged over the run's busy intervals, not one.
    let at = lines.iter().find(|l| u(l, "seq") == seq).unwrap_or_else(|| panic!("interval {seq} in JSON"));
    let c = &probe_of(at, "timer")["alert_causes"];
    let top = &c["causes"][0];
    eprintln!("FIGURES top causes, Modbus header 24..31 of seq {seq}: {:?}; JSON: {c}", &w[24..32]);
    assert_eq!(w[24], 0, "block 0 alerted most");
    assert_eq!((w[25], w[26] << 16 | w[27]), modbus_cause(top), "Modbus's top cause is JSON's: {top}");
    assert_eq!(w[28] << 16 | w[29], u(c, "alerted_ns").div_ceil(1_000), "alerted us: {c}");
    assert_eq!(w[30], u(top, "ns") * 10_000 / u(c, "alerted_ns"), "share in 0.01 %: {c}");

    // Prometheus: the same counter, and the hog ranked first of the tasks
    // in at least two of the three scrapes.
    eprintln!("FIGURES top causes, Prometheus: alerted {scraped:?} s (JSON {alerted_s} s), rank 1: {ratios:?}");
    assert!(scraped.is_some_and(|v| (v - alerted_s).abs() <= 1e-6 * alerted_s.max(1.0)), "{scraped:?} vs {alerted_s}");
    // A task's label is its name (no pid: docs/prometheus.md).
    let hog_label = hog_comm;
    // As in JSON below: the hog the first task among the ranks.
    let hog_first = ratios
        .iter()
        .filter(|ratio| {
            let first_task = ratio
                .iter()
                .filter(|r| r["metric"]["cause_kind"] == "task")
                .min_by_key(|r| r["metric"]["rank"].as_str().unwrap_or("9").to_string());
            first_task.is_some_and(|r| r["metric"]["cause"] == hog_label)
        })
        .count();
    assert!(hog_first >= 2, "{hog_label} the first task among the ranks in {hog_first} of 3 scrapes: {ratios:?}");

    // JSON: per interval, the hog on top; over the run, every alert.
    let (mut alerts, mut alerted, mut tally_hog, mut on_top, mut busy) = (0, 0, 0, 0, 0);
    let mut on_top_all = 0;
    let mut not_tasks = 0u64;
    for l in &lines {
        let c = &probe_of(l, "timer")["alert_causes"];
        let parts: u64 = c["causes"].as_array().unwrap().iter().map(|x| u(x, "ns")).sum::<u64>() + u(c, "folded_ns");
        assert_eq!(parts, u(c, "alerted_ns"), "the causes sum to the alerted time: {c}");
        not_tasks +=
            c["causes"].as_array().unwrap().iter().filter(|x| x["kind"] != "task").map(|x| u(x, "ns")).sum::<u64>();
        (alerts, alerted, tally_hog) =
            (alerts + u(c, "alerts"), alerted + u(c, "alerted_ns"), tally_hog + task_ns(&c["causes"], hog.tid));
        if u(c, "alerts") >= 20 {
            busy += 1;
            // The hog ahead of every other task, with most of the tasks'
            // late time. Not necessarily ahead of everything: an interval
            // in which this VM's host delayed the timer interrupt is
            // rightly topped by timer_irq_delay (seen: 7 of 9 busy
            // intervals with the hog on top overall).
            let tasks: Vec<&serde_json::Value> =
                c["causes"].as_array().unwrap().iter().filter(|x| x["kind"] == "task").collect();
            let task_total: u64 = tasks.iter().map(|x| u(x, "ns")).sum();
            on_top += usize::from(
                tasks.first().is_some_and(|t| t["pid"].as_u64() == Some(u64::from(hog.tid)))
                    && task_ns(&c["causes"], hog.tid) * 2 > task_total,
            );
            on_top_all += usize::from(c["causes"][0]["pid"].as_u64() == Some(u64::from(hog.tid)));
        }
    }
    let p = probe_of(lines.last().unwrap(), "timer");
    let recs = alerts_of(&lines, "timer", loop_comm);
    let rec_hog: u64 = recs.iter().map(|r| task_ns(&r["causes"], hog.tid)).sum();
    let rec_ns: u64 = recs.iter().map(|r| u(r, "latency_ns")).sum();
    // What the hog and the loop measured: the hog's bursts within each
    // of the loop's late cycles (deadline -> the loop running), the way
    // the hog case compares each record.
    let mut expected = 0u64;
    for &(d, ran) in deadlines.iter().filter(|&&(d, ran)| ran.saturating_sub(d) > threshold_ns) {
        let from = hog.bursts.partition_point(|&(_, be)| be <= d);
        expected += hog.bursts[from..]
            .iter()
            .take_while(|&&(bs, _)| bs < ran)
            .map(|&(bs, be)| be.min(ran).saturating_sub(bs.max(d)))
            .sum::<u64>();
    }
    eprintln!(
        "FIGURES top causes with refused records: {} bursts, {alerts} alerts tallied ({} ns), {} records ({rec_ns} ns) + {} \
         refused; hog: {tally_hog} ns tallied, {rec_hog} ns in the records, {expected} ns measured by the hog, {not_tasks} ns non-task causes; hog \
         first among tasks in {on_top} and on top of all causes in {on_top_all} of {busy} intervals with 20+ alerts",
        hog.bursts.len(),
        alerted,
        recs.len(),
        u(p, "total_alerts_dropped")
    );
    assert_eq!(alerts, u(p, "total_alerts"), "every alert tallied, refused records included");
    assert_eq!(recs.len() as u64 + u(p, "total_alerts_dropped"), alerts, "records + refused = alerts");
    assert!(u(p, "total_alerts_dropped") * 2 >= alerts, "most records refused: {p}");
    assert!(alerted > rec_ns && tally_hog > rec_hog, "the tally holds the refused records' time too");
    // As in hog_case: a late timer interrupt (this VM's host), a device
    // interrupt or a softirq that ran inside the hog's burst is charged to
    // that cause, not to the hog, so the hog's tally may fall short of its
    // measured bursts by the run's non-task causes (CI: 353.9 of 394.0 ms
    // with timer_irq_delay 10.5 % of an interval's late time); never above
    // them by more than the tolerance.
    let (lo, hi) = ((expected as f64 * 0.90 - not_tasks as f64).max(0.0), expected as f64 * 1.10);
    assert!(
        (lo..=hi).contains(&(tally_hog as f64)),
        "hog {tally_hog} ns tallied vs {expected} ns measured ({not_tasks} ns of non-task causes): outside {lo:.0}..={hi:.0}"
    );
    assert!(busy >= 4 && on_top * 10 >= busy * 9, "the hog first among tasks in {on_top} of {busy} busy intervals");
}

/// A FIFO hog that renames itself every burst (~880 names a second) puts
/// at most TASK_NAMES_MAX task names into Prometheus' `cause` labels (the
/// rest read `other tasks`), while JSON names every one it saw.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_renaming_fifo_task_cannot_grow_prometheus_cause_labels() {
    use common::prometheus::{free_port, Prometheus};
    use latmon::sinks::prom::{OTHER_TASKS, TASK_NAMES_MAX};
    let _s = serial();
    let (loop_comm, hog_comm) = ("lm-anat-nloop", "lm-ren");
    let spec = format!("timer,comm={loop_comm},threshold=50us");
    let pp = free_port();
    let prom = format!("prom://127.0.0.1:{pp}");
    let child =
        start_run(&["--probe", &spec, "--interval", "250ms", "--format", "json", "--output", "-", "--output", &prom]);
    let server = Prometheus::start("renaming", &format!("127.0.0.1:{pp}"), false);
    server.wait_for("up{job=\"latmon\"}", 1.0);
    let stop_hog = Arc::new(AtomicBool::new(false));
    let hog = fifo_hog_every(test_cpu(), hog_comm, 60, 1_137_000, Arc::clone(&stop_hog), true);
    let lp = periodic_loop(loop_comm, libc::SCHED_FIFO, 50, 8_000);
    let _ = lp.join().unwrap();
    stop_hog.store(true, Ordering::Relaxed);
    let _ = hog.join().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let series = server.query("last_over_time(latmon_probe_alerted_cause_ratio{cause_kind=\"task\"}[5m])", None);
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let mut labels: Vec<String> =
        series.iter().filter_map(|r| r["metric"]["cause"].as_str().map(str::to_string)).collect();
    labels.sort_unstable();
    labels.dedup();
    let mut in_json: Vec<String> = json_lines(&out)
        .iter()
        .flat_map(|l| probe_of(l, "timer")["alert_causes"]["causes"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["kind"] == "task" && c["comm"].as_str().is_some_and(|n| n.starts_with(hog_comm)))
        .filter_map(|c| c["comm"].as_str().map(str::to_string))
        .collect();
    in_json.sort_unstable();
    in_json.dedup();
    eprintln!(
        "FIGURES renaming hog: {} names in JSON's causes, {} task cause labels in Prometheus ({} series): {labels:?}",
        in_json.len(),
        labels.len(),
        series.len()
    );
    assert!(in_json.len() > TASK_NAMES_MAX, "the hog showed more names than the bound: {in_json:?}");
    let hog_labels = labels.iter().filter(|l| l.starts_with(hog_comm)).count();
    assert!(hog_labels <= TASK_NAMES_MAX, "{hog_labels} of the hog's names in labels: {labels:?}");
    assert!(labels.len() <= TASK_NAMES_MAX + 1, "task labels bounded: {labels:?}");
    assert!(labels.iter().any(|l| l == OTHER_TASKS), "the rest read {OTHER_TASKS:?}: {labels:?}");
    assert!(labels.iter().all(|l| !l.contains('[')), "no pid in a label: {labels:?}");
}

/// 24 hogs one after the other (distinct threads), each bursting for
/// 0.6 s: more causes over the run than the kernel's table has entries
/// (LATMON_CAUSE_SLOTS = 16). An entry frees itself once its cause stops,
/// so the late hogs are named, not folded: they are named with as much
/// time as the early ones.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn the_cause_table_frees_entries_of_causes_gone_so_late_hogs_are_named() {
    let _s = serial();
    let loop_comm = "lm-anat-tloop";
    let spec = format!("timer,comm={loop_comm},threshold=50us");
    let child = start_run(&["--probe", &spec, "--interval", "250ms", "--format", "json"]);
    let lp = periodic_loop(loop_comm, libc::SCHED_FIFO, 50, 16_000);
    let mut tids = Vec::new();
    for i in 0..24 {
        let stop = Arc::new(AtomicBool::new(false));
        let hog = fifo_hog_every(test_cpu(), &format!("lm-anat-t{i}"), 60, 3_137_000, Arc::clone(&stop), false);
        std::thread::sleep(std::time::Duration::from_millis(600));
        stop.store(true, Ordering::Relaxed);
        tids.push(hog.join().unwrap().tid);
    }
    lp.join().unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let (mut alerted, mut folded) = (0, 0);
    let mut named = vec![0u64; tids.len()];
    for l in &lines {
        let c = &probe_of(l, "timer")["alert_causes"];
        (alerted, folded) = (alerted + u(c, "alerted_ns"), folded + u(c, "folded_ns"));
        for (n, &tid) in named.iter_mut().zip(&tids) {
            *n += task_ns(&c["causes"], tid);
        }
    }
    eprintln!(
        "FIGURES top causes, 24 hogs in turn: {} intervals, {alerted} ns alerted, {folded} ns folded; per hog ns named: \
         {named:?}",
        lines.len()
    );
    // Every hog is named with a good part of its time (each bursts ~190
    // times, ~0.3 of them in the loop's wait), the last ones too: the 8
    // after the table's 16 entries have been used with at least half the
    // time of the first 8 (a table that never freed its entries names
    // them with none).
    let weakest = named.iter().copied().min().unwrap();
    assert!(weakest >= 2_000_000, "every hog named with its time: {named:?}");
    let (first, last) = (named[..8].iter().sum::<u64>(), named[16..].iter().sum::<u64>());
    assert!(last * 2 >= first, "the last 8 hogs named with {last} ns, the first 8 with {first}: {named:?}");
    // Folded: causes beyond 16 at once. Idle here, nothing; beside BitBake
    // (CI) or stress-ng --fork, the one-off tasks of a fork storm are real
    // causes of their own (each delays a wakeup by tens of us in fork or
    // exit) and fill entries: 12 % and 19-23 % of the alerted time folded,
    // the hogs still named. So the bound is the table's, not an idle
    // machine's.
    assert!(folded * 3 <= alerted, "{folded} of {alerted} ns folded");
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn a_sched_other_competitor_is_named() {
    let _s = serial();
    let (loop_comm, comp_comm) = ("lm-anat-oloop", "lm-anat-comp");
    let spec = format!("timer,comm={loop_comm},threshold=100us");
    // 1 s intervals: ~500 alert records with their causes (~250 KiB) in
    // one interval came near an output queue's 256 KiB, past which an
    // interval is dropped whole (counted).
    let child = start_run(&["--probe", &spec, "--interval", "1s", "--format", "json"]);
    let stop_comp = Arc::new(AtomicBool::new(false));
    let cpu = test_cpu();
    let st = Arc::clone(&stop_comp);
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    // A busy SCHED_OTHER task at nice -10 against a nice 10 loop: the
    // loop's wakeups wait for it.
    let comp = std::thread::Builder::new()
        .name(comp_comm.into())
        .spawn(move || {
            pin_to_cpu(cpu);
            set_sched(libc::SCHED_OTHER, -10);
            tid_tx.send(gettid()).unwrap();
            while !st.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
        .unwrap();
    let comp_tid = tid_rx.recv().unwrap();
    // 50 us a cycle, over four times its share.
    let cycles = competed_loop(loop_comm, 300, 50_000, comp_tid).join().unwrap();
    stop_comp.store(true, Ordering::Relaxed);
    comp.join().unwrap();
    let (status, out) = stop(child);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let recs = alerts_of(&lines, "timer", loop_comm);
    // The truth is the competitor's own run time (its schedstat) from
    // each cycle's arming of the timer to the loop running again, read by
    // the loop on the competitor's CPU (so while the competitor is not
    // running, and exact). A record's wait lies inside that span: the
    // competitor's charge can be no more than its run time there, and no
    // less than that run time minus the part of the span before the wait
    // (the sleep, and the 50 us timer slack of a SCHED_OTHER sleeper),
    // whatever else this machine runs on the CPU. The earlier bound, "the
    // competitor is the largest cause in 40 % of waits", was the
    // scheduler's doing, not latmon's: at load 7 (builds, apt-cache,
    // BitBake's Cooker on the loop's CPU) latmon named the competitor in
    // 296 of 296 waits, rightly, and the other tasks' time put it first in
    // 8 (the FLAKY of issue 40's round).
    const SLACK_NS: u64 = 100_000;
    let (mut waited, mut present, mut within, mut unmatched) = (0, 0, 0, 0);
    let (mut charged, mut ran) = (0u64, 0u64);
    let mut wrong = Vec::new();
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
        if let Some(c) = comp {
            present += 1;
            assert_eq!(
                (c["comm"].as_str(), c["policy"].as_str(), c["prio"].as_i64()),
                (Some(comp_comm), Some("other"), Some(-10)),
                "{r}"
            );
        }
        let got = comp.map_or(0, |c| u(c, "ns"));
        let (end, lat) = (u(r, "time_ns"), u(r, "latency_ns"));
        let Some(c) = cycles.iter().find(|c| c.next <= end - lat + SLACK_NS && end <= c.woke + SLACK_NS) else {
            unmatched += 1;
            continue;
        };
        let comp_ran = c.comp_after - c.comp_before;
        // Outside the wait: the sleep before it, and after it the loop's
        // switch-in to its own clock reading (a loop switched in, then
        // preempted again at once, reads its clock late).
        let outside = (end - lat).saturating_sub(c.armed) + c.woke.saturating_sub(end);
        // And inside it, interrupts, softirqs and a late timer interrupt
        // that came while the competitor ran: the kernel counts them in
        // its run time (no IRQ time accounting), latmon charges them to
        // their own causes (as it should).
        let not_tasks: u64 = causes.iter().filter(|c| c["kind"] != "task").map(|c| u(c, "ns")).sum();
        let low = comp_ran.saturating_sub(outside + not_tasks + SLACK_NS);
        charged += got;
        ran += comp_ran.saturating_sub(outside);
        if (low..=comp_ran + SLACK_NS).contains(&got) {
            within += 1;
        } else if wrong.len() < 5 {
            wrong.push(format!(
                "charged {got} ns, the competitor ran {comp_ran} ns from arming ({outside} ns outside the wait): {r}"
            ));
        }
    }
    eprintln!(
        "FIGURES anatomy sched_other competitor: {} alert records, {waited} of them waits after the wakeup, {present} \
         naming the competitor, {within} charging it within its own run time, {unmatched} matching no cycle; \
         {charged} ns charged of at least {ran} ns it ran in the waits",
        recs.len()
    );
    for w in &wrong {
        eprintln!("competitor's charge out of its own run time: {w}");
    }
    assert!(waited >= 10, "the competitor should delay the loop's wakeups: {waited} of {} alerts", recs.len());
    assert!(present * 10 >= waited * 7, "the competitor must be named in most waits: {present} of {waited}");
    assert!(unmatched * 10 <= waited, "records that match none of the loop's cycles: {unmatched} of {waited}");
    // A tenth may fall outside: this VM's kernel leaves the time its host
    // stole from the vCPU out of a task's run time
    // (PARAVIRT_TIME_ACCOUNTING; 13 s of steal on the test CPU in 4 h),
    // while latmon's clock has it (charged 14.8 ms of a competitor that
    // ran 11.1 ms by its schedstat, once in 297 waits).
    assert!(within * 10 >= waited * 9, "the competitor's charge must be its own run time: {within} of {waited}");
}

/// One cycle of `competed_loop`, CLOCK_MONOTONIC: when the loop armed its
/// timer, the deadline, when it ran again; and the competitor's total run
/// time (schedstat, ns) at arming and at running again.
struct CompetedCycle {
    armed: u64,
    next: u64,
    woke: u64,
    comp_before: u64,
    comp_after: u64,
}

/// A nice 10 SCHED_OTHER loop on the test CPU that sleeps 1 ms from its
/// arming (a loop starved for whole periods skips them: each of its
/// cycles is a timer armed in the future and a wakeup that can wait),
/// reading the competitor `comp_tid`'s run time around each sleep.
///
/// Each cycle busy-waits `work_ns` after its wakeup: a SCHED_OTHER loop
/// whose cycles cost less than its weight's share of the CPU builds up lag
/// under EEVDF and preempts its competitor on most wakeups (at nice 10
/// against -10 the share is 1.1 %, 11 us a period, about what a bare
/// wakeup costs; CI saw 1 wait in 1 000 cycles once, 230 in others), so
/// a loop that is to wait must ask for more than its share.
fn competed_loop(comm: &str, cycles: u32, work_ns: u64, comp_tid: u32) -> std::thread::JoinHandle<Vec<CompetedCycle>> {
    std::thread::Builder::new()
        .name(comm.into())
        .spawn(move || {
            use std::os::unix::fs::FileExt;
            pin_to_cpu(test_cpu());
            set_sched(libc::SCHED_OTHER, 10);
            let stat = std::fs::File::open(format!("/proc/self/task/{comp_tid}/schedstat")).unwrap();
            let run_ns = || {
                let mut buf = [0u8; 128];
                let n = stat.read_at(&mut buf, 0).unwrap();
                let text = std::str::from_utf8(&buf[..n]).unwrap();
                text.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()).unwrap()
            };
            let mut out = Vec::with_capacity(cycles as usize);
            for _ in 0..cycles {
                let comp_before = run_ns();
                let armed = now_ns();
                let next = armed + 1_000_000;
                sleep_until(next);
                let woke = now_ns();
                let comp_after = run_ns();
                out.push(CompetedCycle { armed, next, woke, comp_before, comp_after });
                while now_ns() < woke + work_ns {
                    std::hint::spin_loop();
                }
            }
            out
        })
        .unwrap()
}

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
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
                within_one_run += usize::from(u(c, "ns") <= u(&p, "max_ns") + STAMP_SKEW_NS);
            }
            *per_vector.entry(vector).or_default() += u(c, "ns");
        }
    }
    // Plausible sizes: the waits of one thread do not overlap, so what
    // they charge a vector is part of the runs the softirq probe measured
    // (sum = mean x count, +1 ns per run for the mean's rounding, + the
    // stamps' skew per run).
    for (vector, ns) in &per_vector {
        let p = vec_probe(&format!("softirq:{vector}")).unwrap();
        let measured = (u(&p, "mean_ns") + 1 + STAMP_SKEW_NS) * u(&p, "count");
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

/// A 16 MiB file on the disk the temporary directory is on, written
/// through to it; removed on drop.
struct DiskFile(std::path::PathBuf);

impl DiskFile {
    fn new() -> DiskFile {
        let path = std::env::temp_dir().join(format!("latmon-anat-irq-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        for _ in 0..16 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
        f.sync_all().unwrap();
        DiskFile(path)
    }
}

impl Drop for DiskFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// 4 KiB O_DIRECT reads of `file` (past the page cache, to the disk), one
/// every `gap`, at offsets spread over it, until `stop`: one request, one
/// completion interrupt each, and - with the gap longer than a burst - at
/// most one of them in a wait of the loop.
fn disk_reads(file: &std::path::Path, gap: std::time::Duration, stop: &AtomicBool) -> u64 {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(file).unwrap();
    let blocks = f.metadata().unwrap().len() / 4096;
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a 4 KiB allocation of that layout, freed below; O_DIRECT
    // needs the alignment.
    let buf = unsafe { std::slice::from_raw_parts_mut(std::alloc::alloc_zeroed(layout), 4096) };
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let block = (n.wrapping_mul(2_654_435_761) + 17) % blocks;
        f.read_exact_at(buf, block * 4096).unwrap();
        n += 1;
        std::thread::sleep(gap);
    }
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf.as_mut_ptr(), layout) };
    n
}

/// An IRQ's smp_affinity_list, set for the test and restored after it.
struct IrqAffinity {
    irq: u32,
    was: String,
}

impl IrqAffinity {
    /// Delivered to one CPU: that one if it is a single CPU already,
    /// else `cpu` (smp_affinity_list set; restored on drop).
    fn one_cpu(irq: u32, cpu: usize) -> (IrqAffinity, usize) {
        let path = format!("/proc/irq/{irq}/smp_affinity_list");
        let was = std::fs::read_to_string(&path).unwrap().trim().to_string();
        let aff = IrqAffinity { irq, was };
        if let Ok(now) = aff.effective().parse::<usize>() {
            return (aff, now);
        }
        std::fs::write(&path, cpu.to_string())
            .unwrap_or_else(|e| panic!("IRQ {irq}: setting smp_affinity_list to {cpu} (was {}): {e}", aff.was));
        assert_eq!(aff.effective(), cpu.to_string(), "IRQ {irq} must be delivered to CPU {cpu} now");
        (aff, cpu)
    }

    /// The CPUs the IRQ is delivered to now.
    fn effective(&self) -> String {
        std::fs::read_to_string(format!("/proc/irq/{}/effective_affinity_list", self.irq))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

impl Drop for IrqAffinity {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("/proc/irq/{}/smp_affinity_list", self.irq), &self.was);
    }
}

/// Per run of an IRQ handler or softirq, what the waits' causes may hold
/// beyond what the irq or softirq probe measured of it: the two objects'
/// programs stamp the same entry/exit events each with its own clock
/// read, apart by the programs that run between them (40-70 ns per run
/// here, docs/probes.md; an anatomy's entry that names a new task reads
/// its task_struct too: 248 ns more than the softirq probe's one BLOCK
/// run was seen). 2 us per run is ample for that and far below what a
/// wrong attribution moves (a burst's task time, 300-500 us).
const STAMP_SKEW_NS: u64 = 2_000;

#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn device_irqs_on_the_loops_cpu_are_named_within_what_the_irq_probe_measured() {
    device_irq_case("timer", &[], "tp_btf");
}

/// The same through runq's no-BTF build: the IRQ number read from the
/// irq events' records at the offset tracefs gives.
#[test]
#[ignore = "needs root: loads BPF programs (scripts/test.sh runs it)"]
fn runq_no_btf_names_device_irqs_too() {
    device_irq_case("runq", &[("LATMON_FORCE_NO_BTF", "1")], "tracepoint");
}

fn device_irq_case(family: &str, env: &[(&str, &str)], attach: &str) {
    let _s = serial();
    let (loop_comm, hog_comm) = ("lm-anat-iloop", "lm-anat-ihog");
    // The loop runs where the disk's IRQ lands (the last CPU if it lands
    // on several), the reads are submitted from another CPU.
    let file = DiskFile::new();
    let stop_reads = Arc::new(AtomicBool::new(false));
    let reads = |stop: Arc<AtomicBool>, submit_cpu: usize| {
        let path = file.0.clone();
        std::thread::spawn(move || {
            pin_to_cpu(submit_cpu);
            disk_reads(&path, std::time::Duration::from_millis(1), &stop)
        })
    };
    // The disk's IRQ: the line that fires most under these reads.
    let before = irq_counts();
    let r = reads(Arc::clone(&stop_reads), 0);
    std::thread::sleep(std::time::Duration::from_millis(400));
    stop_reads.store(true, Ordering::Relaxed);
    let n = r.join().unwrap();
    let after = irq_counts();
    let (irq, fired) =
        after.iter().map(|(&k, &v)| (k, v - before.get(&k).copied().unwrap_or(0))).max_by_key(|&(_, d)| d).unwrap();
    assert!(fired * 2 >= n, "{n} disk reads, the busiest IRQ {irq} fired {fired} times");
    let (aff, cpu) = IrqAffinity::one_cpu(irq, test_cpu());
    let spec = format!("{family},comm={loop_comm},threshold=100us");
    let child = start_run_env(&["--probe", &spec, "--probe", "irq", "--interval", "60m", "--format", "json"], env);
    // The hog makes the loop's waits long (its bursts), so the disk's
    // completions land in them.
    let stop_hog = Arc::new(AtomicBool::new(false));
    let hog = fifo_hog_on(cpu, hog_comm, 60, Arc::clone(&stop_hog));
    let stop_reads = Arc::new(AtomicBool::new(false));
    let r = reads(Arc::clone(&stop_reads), usize::from(cpu == 0));
    // 5 s: ~250 bursts, a third of them with a completion in the wait.
    periodic_loop_on(cpu, loop_comm, libc::SCHED_FIFO, 50, 5_000).join().unwrap();
    stop_hog.store(true, Ordering::Relaxed);
    stop_reads.store(true, Ordering::Relaxed);
    hog.join().unwrap();
    let n = r.join().unwrap();
    let (status, out) = stop(child);
    drop(aff);
    assert!(status.success(), "latmon exited with {status}");
    let lines = json_lines(&out);
    let names = latmon::procfs::parse_interrupts(&std::fs::read_to_string("/proc/interrupts").unwrap());
    let name = names.get(&irq).cloned().unwrap_or_else(|| panic!("IRQ {irq} has a name in /proc/interrupts"));
    let series = |n: u32| match names.get(&n) {
        Some(name) => format!("irq:{n} {name}"),
        None => format!("irq:{n}"),
    };
    for name in [family, "irq"] {
        assert_eq!(last_probe(&lines, name).expect("the probe's line")["attach"], attach);
    }
    let recs = alerts_of(&lines, family, loop_comm);
    let (mut seen, mut within_one_run) = (0, 0);
    let mut per_irq = std::collections::BTreeMap::<u32, u64>::new();
    for r in &recs {
        for c in assert_parts_sum(r) {
            if c["kind"] != "irq" || c["rest"] == true {
                continue;
            }
            let n = u(c, "irq") as u32;
            // Named: number and the name /proc/interrupts gives it.
            assert_eq!(c["name"].as_str(), names.get(&n).map(String::as_str), "IRQ {n}'s name: {r}");
            let p = last_probe(&lines, &series(n)).unwrap_or_else(|| panic!("{} measured: {r}", series(n)));
            if n == irq {
                seen += 1;
                within_one_run += usize::from(u(c, "ns") <= u(p, "max_ns") + STAMP_SKEW_NS);
            }
            *per_irq.entry(n).or_default() += u(c, "ns");
        }
    }
    // Plausible sizes: the waits of one thread do not overlap, so what
    // they charge an IRQ is part of the handler runs the irq probe
    // measured (sum = mean x count, +1 ns per run for the mean's rounding,
    // + the stamps' skew per run).
    for (n, ns) in &per_irq {
        let p = last_probe(&lines, &series(*n)).unwrap();
        let measured = (u(p, "mean_ns") + 1 + STAMP_SKEW_NS) * u(p, "total_count");
        assert!(*ns <= measured, "IRQ {n}: {ns} ns charged to waits, {measured} ns measured in all: {p}");
    }
    let p = last_probe(&lines, &series(irq)).unwrap();
    eprintln!(
        "FIGURES anatomy device irq ({family}, {attach}): {n} disk reads, IRQ {irq} {name} on CPU {cpu} ({} handler runs, max \
         {} ns, mean {} ns); {} alert records, {seen} naming IRQ {irq} ({within_one_run} within one run's max + \
         {STAMP_SKEW_NS} ns), ns charged per IRQ {per_irq:?}",
        u(p, "total_count"),
        u(p, "max_ns"),
        u(p, "mean_ns"),
        recs.len()
    );
    assert!(seen >= 5, "IRQ {irq} must appear among the causes: {seen} of {} records", recs.len());
    // One read a millisecond, a burst at most 0.5 ms: a wait holds at most
    // one of its completions, save for other disk I/O of this machine.
    assert!(within_one_run * 10 >= seen * 8, "{within_one_run} of {seen} IRQ {irq} causes within one run's max");
}
