// SPDX-License-Identifier: MIT
//! `latmon certify`: what latmon costs a real-time thread on this board,
//! measured. A SCHED_FIFO thread of latmon's own sleeps to absolute 1 ms
//! deadlines (cyclictest's method; its latency: actual wake − programmed)
//! through interleaved epochs of three states - `none` (nothing attached),
//! `empty` (the probes attached, each program returning at its gate,
//! bpf/gate.bpf.h) and `full` (the probes run, the cycle family watching
//! the measuring thread, and the maps read each second as the agent
//! does). Only `none` needs a detach: empty and full differ by a map
//! write, which adds no RCU wait. The maths is `model`; this is the I/O
//! edge: the thread, the attach and detach, the gate, the CPU counters.

pub mod gate;
pub mod model;
pub mod store;

use std::collections::HashSet;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use latmon_core::hist::Hist;
use latmon_core::summary::AlertRecord;

use crate::agent::monotonic_ns;
use crate::bail;
use crate::config::ProbeSpec;
use crate::cost;
use crate::error::{Context, Result};
use crate::probes::{self, Probe};
use gate::Gates;
use model::{Epoch, Sample, State, Step};
use store::{Certificate, CpuShare, CycleResponse};

/// The measuring thread's name (its comm: the cycle probe's filter).
pub const THREAD: &str = "lm-certify";
/// Its period.
const PERIOD_NS: u64 = 1_000_000;
/// Its SCHED_FIFO priority (cyclictest's usual -p 80).
const PRIORITY: i32 = 80;

/// How a certificate is made.
#[derive(Debug, Clone)]
pub struct Options {
    /// Measured time (the epochs; attach and detach come on top).
    pub duration: Duration,
    pub epoch: Duration,
    /// Left out at the start of each epoch (the transition's wake).
    pub settle: Duration,
    /// Half the window of an attach or detach spike.
    pub spike_window: Duration,
    /// The probes of the empty and full states (the cycle probe on the
    /// measuring thread is added).
    pub probes: Vec<ProbeSpec>,
}

impl Options {
    pub fn new(duration: Duration, probes: Vec<ProbeSpec>) -> Self {
        Options {
            duration,
            epoch: Duration::from_secs(2),
            settle: Duration::from_millis(500),
            spike_window: Duration::from_millis(500),
            probes,
        }
    }
}

/// The measuring thread, running.
struct Meter {
    stop: Arc<AtomicBool>,
    tid: Arc<AtomicU32>,
    handle: std::thread::JoinHandle<std::io::Result<Vec<Sample>>>,
}

fn sleep_until(t_ns: u64) {
    // SAFETY: all-zero is a valid timespec (musl's has padding on some
    // targets, so no struct literal).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    ts.tv_sec = (t_ns / 1_000_000_000) as _;
    ts.tv_nsec = (t_ns % 1_000_000_000) as _;
    // SAFETY: ts is valid; no remainder is asked for (absolute sleep).
    while unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) }
        == libc::EINTR
    {}
}

/// Start the measuring thread: `capacity` samples are reserved up front,
/// so it does not allocate while it measures.
fn start_meter(capacity: usize) -> Result<Meter> {
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU32::new(0));
    let (s, t) = (stop.clone(), tid.clone());
    let handle = std::thread::Builder::new().name(THREAD.into()).spawn(move || {
        t.store(nix::unistd::gettid().as_raw() as u32, Ordering::Release);
        // SAFETY: sched_param is plain data; all-zero is valid (musl's
        // struct has extra fields, so no struct literal).
        let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
        param.sched_priority = PRIORITY;
        // The raw syscall: musl's sched_setscheduler() is a stub that
        // always fails with ENOSYS (src/hygiene.rs).
        // SAFETY: 0 is the calling thread; param is valid.
        if unsafe {
            libc::syscall(
                libc::SYS_sched_setscheduler,
                0 as libc::pid_t,
                libc::SCHED_FIFO,
                &param as *const libc::sched_param,
            )
        } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        let mut out = Vec::with_capacity(capacity);
        let mut next = monotonic_ns();
        while !s.load(Ordering::Relaxed) {
            next += PERIOD_NS;
            sleep_until(next);
            let now = monotonic_ns();
            if out.len() < out.capacity() {
                out.push(Sample { at_ns: next, late_ns: now.saturating_sub(next) });
            }
            // Deadlines already past are skipped, as cyclictest does.
            while next + PERIOD_NS < now {
                next += PERIOD_NS;
            }
        }
        Ok(out)
    })?;
    while tid.load(Ordering::Acquire) == 0 && !handle.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(Meter { stop, tid, handle })
}

/// CPU time of this process's threads but `skip` (ns), from schedstat.
fn threads_cpu_ns(skip: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0 };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) != Some(skip))
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// Run time and runs of every distinct program of `probes`.
fn bpf_run(probes: &[Box<dyn Probe>]) -> (u64, u64) {
    let mut seen = HashSet::new();
    let mut t = (0, 0);
    for fd in probes.iter().flat_map(|p| p.bpf_programs()) {
        if let Ok(s) = cost::prog_stats(fd) {
            if seen.insert(s.id) {
                t = (t.0 + s.run_time_ns, t.1 + s.runs);
            }
        }
    }
    t
}

/// The probes attached, their gates found.
struct Attached {
    probes: Vec<Box<dyn Probe>>,
    gates: Gates,
}

fn attach(specs: &[ProbeSpec]) -> Result<Attached> {
    let mut probes = Vec::new();
    for (spec, r) in specs.iter().zip(probes::open_all(specs)) {
        probes.push(r.with_context(|| format!("probe {}", spec.name))?);
    }
    let progs: Vec<(String, Vec<RawFd>)> =
        probes.iter().zip(specs).map(|(p, s)| (s.name.clone(), p.bpf_programs())).collect();
    let gates = Gates::find(&progs).map_err(crate::error::Error::msg)?;
    Ok(Attached { probes, gates })
}

/// One interval of the agent's reads (histograms, alerts, causes,
/// family data), as `latmon run` does each second.
fn agent_reads(a: &mut Attached, alerts: &mut Vec<AlertRecord>) {
    for p in a.probes.iter_mut() {
        let mut h = Hist::default();
        let _ = p.read(&mut h);
        p.drain_alerts(alerts);
        let _ = p.causes(&mut None);
        let _ = p.extra(&mut None);
    }
    alerts.clear();
}

/// Make a certificate (root: loads BPF). `-v` logs each epoch as it
/// starts (`certify: epoch I/N: STATE`).
pub fn run(opts: &Options) -> Result<Certificate> {
    crate::agent::require_bpf_privilege()?;
    probes::route_libbpf_logs();
    probes::ensure_tracefs();
    let mut specs = opts.probes.clone();
    specs.push(ProbeSpec::parse(&format!("cycle,comm={THREAD},name=certify-cycle"))?);
    let names: Vec<String> = specs.iter().map(|s| s.spec.clone()).collect();
    // The measuring thread's pages stay in memory, as an RT loop's must.
    // SAFETY: plain syscall.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        log::warn!("certify: mlockall: {}", std::io::Error::last_os_error());
    }
    let _stats = cost::enable_stats().context("BPF_ENABLE_STATS")?;
    let epoch_ns = opts.epoch.as_nanos() as u64;
    let settle_ns = opts.settle.as_nanos() as u64;
    let rounds = model::rounds_for(opts.duration.as_nanos() as u64, epoch_ns);
    let order = model::schedule(rounds);
    // Epochs, plus a generous allowance for the attaches between them.
    let capacity = (order.len() as u64 * epoch_ns / PERIOD_NS) as usize + 200_000;
    let meter = start_meter(capacity)?;
    let mut attached: Option<Attached> = None;
    let (mut epochs, mut attaches, mut detaches) = (Vec::new(), Vec::new(), Vec::new());
    let (mut full_wall, mut full_bpf, mut full_runs, mut full_threads) = (0u64, 0u64, 0u64, 0u64);
    let mut cycle = Hist::default();
    let mut alerts = Vec::with_capacity(crate::bpf::limits::ALERT_QUEUE);
    let result = (|| -> Result<()> {
        for (i, &state) in order.iter().enumerate() {
            let prev = i.checked_sub(1).map(|j| order[j]);
            match model::step(prev, Some(state)) {
                Step::Attach => {
                    let a = attach(&specs)?;
                    a.gates.set(state == State::Full)?;
                    attaches.push(monotonic_ns());
                    attached = Some(a);
                }
                // The gate closes first: programs already running see it.
                Step::Detach => {
                    if let Some(a) = attached.take() {
                        a.gates.set(false)?;
                        drop(a);
                        detaches.push(monotonic_ns());
                    }
                }
                Step::Gate => {
                    if let Some(a) = &attached {
                        a.gates.set(state == State::Full)?;
                    }
                }
            }
            log::info!("certify: epoch {}/{}: {}", i + 1, order.len(), state.as_str());
            let start = monotonic_ns();
            let before = match (&attached, state) {
                (Some(a), State::Full) => Some((bpf_run(&a.probes), threads_cpu_ns(meter.tid.load(Ordering::Relaxed)))),
                _ => None,
            };
            let (settled, end) = (start + settle_ns, start + epoch_ns);
            // The cycle probe's view from the settle time on, as the
            // states': its first response after the gate opens spans the
            // time it was closed.
            let mut cycle_from = None;
            loop {
                let now = monotonic_ns();
                if now >= end || meter.handle.is_finished() {
                    break;
                }
                let wake = if now < settled { settled } else { end };
                std::thread::sleep(Duration::from_nanos((wake - now).min(1_000_000_000)));
                if let Some(a) = attached.as_mut() {
                    if state == State::Full && cycle_from.is_none() && monotonic_ns() >= settled {
                        cycle_from = Some(read_cycle(a));
                    }
                    agent_reads(a, &mut alerts);
                }
            }
            let stop = monotonic_ns();
            if let (Some(a), Some(((t0, r0), c0))) = (attached.as_mut(), before) {
                let (t1, r1) = bpf_run(&a.probes);
                full_bpf += t1.saturating_sub(t0);
                full_runs += r1.saturating_sub(r0);
                full_threads += threads_cpu_ns(meter.tid.load(Ordering::Relaxed)).saturating_sub(c0);
                full_wall += stop - start;
                if let Some(h0) = cycle_from {
                    cycle.merge(&read_cycle(a).delta(&h0));
                }
            }
            epochs.push(Epoch { state, start_ns: start, end_ns: stop });
            if meter.handle.is_finished() {
                bail!("the measuring thread stopped");
            }
        }
        if let Some(a) = attached.take() {
            a.gates.set(false)?;
            drop(a);
            detaches.push(monotonic_ns());
        }
        // The last detach's window, measured.
        std::thread::sleep(opts.spike_window);
        Ok(())
    })();
    drop(attached);
    meter.stop.store(true, Ordering::Relaxed);
    let samples = match meter.handle.join() {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => bail!("the measuring thread at SCHED_FIFO {PRIORITY}: {e}"),
        Err(_) => bail!("the measuring thread panicked"),
    };
    result?;
    let figures = model::figures(
        &samples,
        &epochs,
        opts.settle.as_nanos() as u64,
        &attaches,
        &detaches,
        opts.spike_window.as_nanos() as u64,
    );
    let cpus = cost::online_cpus();
    Ok(Certificate {
        version: store::VERSION,
        made_at_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into()),
        duration_ns: order.len() as u64 * epoch_ns,
        epoch_ns,
        settle_ns: opts.settle.as_nanos() as u64,
        rounds,
        interleaving: model::INTERLEAVING.into(),
        measuring_thread: format!(
            "{THREAD}: SCHED_FIFO {PRIORITY}, absolute clock_nanosleep every {} us, not pinned",
            PERIOD_NS / 1000
        ),
        probes: names,
        figures,
        latmon_cpu: CpuShare {
            cpus,
            wall_ns: full_wall,
            bpf_percent: model::share_percent(full_bpf, full_wall, cpus),
            bpf_runs: full_runs,
            threads_percent: model::share_percent(full_threads, full_wall, cpus),
        },
        cycle_response: (cycle.count > 0).then(|| CycleResponse {
            cycles: cycle.count,
            p50_ns: cycle.quantile(0.5),
            p99_ns: cycle.quantile(0.99),
            p999_ns: cycle.quantile(0.999),
            max_ns: cycle.max_ns,
        }),
    })
}

/// The cycle probe's (the last) cumulative response histogram.
fn read_cycle(a: &mut Attached) -> Hist {
    let mut h = Hist::default();
    if let Some(p) = a.probes.last_mut() {
        let _ = p.read(&mut h);
    }
    h
}

/// A certificate in words.
pub fn print_text(c: &Certificate, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let us = |ns: u64| ns as f64 / 1000.0;
    let f = &c.figures;
    writeln!(out, "certificate  {} on kernel {}", f.verdict_text, c.kernel)?;
    writeln!(
        out,
        "method       {}; {} rounds of {:.1} s epochs: {}",
        c.measuring_thread,
        c.rounds,
        c.epoch_ns as f64 / 1e9,
        c.interleaving
    )?;
    writeln!(out, "state        samples     p50 us     p99 us   p99.9 us     max us")?;
    for (name, s) in [("none", &f.states.none), ("empty", &f.states.empty), ("full", &f.states.full)] {
        writeln!(
            out,
            "  {name:<10} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            s.samples,
            us(s.p50_ns),
            us(s.p99_ns),
            us(s.p999_ns),
            us(s.max_ns)
        )?;
    }
    writeln!(
        out,
        "shift p99.9  full - none {:.1} us, 95 % CI [{:.1}, {:.1}] us, goal <= {:.1} us",
        f.shift_p999_ns as f64 / 1000.0,
        f.ci95_ns[0] as f64 / 1000.0,
        f.ci95_ns[1] as f64 / 1000.0,
        us(f.goal_ns)
    )?;
    writeln!(
        out,
        "spikes       worst within {:.1} s of {} attaches {:.1} us, of {} detaches {:.1} us",
        f.spike_window_ns as f64 / 1e9,
        f.attaches,
        us(f.attach_spike_ns),
        f.detaches,
        us(f.detach_spike_ns)
    )?;
    let cpu = &c.latmon_cpu;
    writeln!(
        out,
        "latmon cpu   full epochs: BPF {:.4} %, threads {:.4} % of each of {} CPUs",
        cpu.bpf_percent, cpu.threads_percent, cpu.cpus
    )?;
    if let Some(r) = &c.cycle_response {
        writeln!(
            out,
            "cycle        the loop's response (release -> done) in full: p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us over {} cycles",
            us(r.p50_ns),
            us(r.p99_ns),
            us(r.p999_ns),
            us(r.max_ns),
            r.cycles
        )?;
    }
    Ok(())
}
