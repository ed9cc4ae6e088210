// SPDX-License-Identifier: MIT
//! The agent loop: attach probes, read them every interval, hand summaries
//! to the sinks, stop cleanly on SIGINT/SIGTERM or after `duration`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{SigSet, Signal};

use crate::config::Config;
use crate::hist::Hist;
use crate::probes::{self, Probe};
use crate::sinks::Sink;
use crate::summary::{IntervalReport, ProbeReport};

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns() uses.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// Block SIGINT/SIGTERM in this thread (before any thread is spawned, so all
/// inherit it); the loop collects them synchronously with sigtimedwait.
fn block_stop_signals() -> Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("blocking SIGINT/SIGTERM")?;
    Ok(set)
}

/// Sleep until `deadline` or a stop signal; true when a signal arrived.
fn wait_for_stop(set: &SigSet, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ts = libc::timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
        // SAFETY: set and ts are valid for the call; info may be null.
        let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if sig > 0 {
            log::info!("signal {sig}: stopping");
            return true;
        }
        // EAGAIN: timeout; EINTR: another signal; both re-check the deadline.
    }
}

struct Running {
    probe: Box<dyn Probe>,
    prev: Hist,
    cur: Hist,
    /// Series probes this one has added (listed right behind it).
    series: usize,
}

impl Running {
    fn new(probe: Box<dyn Probe>) -> Self {
        Running { probe, prev: Hist::default(), cur: Hist::default(), series: 0 }
    }
}

/// Multi-series families (syscall per syscall, irq per IRQ, ...) add a probe
/// per series the first interval it has data; it is listed, and read, right
/// behind its family's earlier series.
fn add_new_series(running: &mut Vec<Running>) {
    let mut i = 0;
    while i < running.len() {
        let born = running[i].probe.new_series();
        let at = i + 1 + running[i].series;
        running[i].series += born.len();
        let next = at + born.len();
        running.splice(at..at, born.into_iter().map(Running::new));
        i = next;
    }
}

/// Run the agent until stopped. Returns an error only when nothing can run.
pub fn run(cfg: &Config, sinks: &mut [Box<dyn Sink>]) -> Result<()> {
    let stop_set = block_stop_signals()?;
    require_bpf_privilege()?;
    probes::route_libbpf_logs();
    probes::ensure_tracefs();

    let mut running = Vec::with_capacity(cfg.probes.len());
    for opened in probes::open_all(&cfg.probes) {
        match opened {
            Ok(p) => {
                let i = p.info();
                log::info!("probe {}: {} via {} ({})", i.name, i.kind, i.attach, i.mode);
                running.push(Running::new(p));
            }
            Err(e) => eprintln!("latmon: {e}"),
        }
    }
    if running.is_empty() {
        bail!("no probe could attach; nothing to monitor");
    }

    let start = Instant::now();
    let end = cfg.duration.map(|d| start + d);
    let mut seq = 0u64;
    let mut last_ns = monotonic_ns();
    let mut next = start + cfg.interval;
    let mut report = IntervalReport {
        seq: 0,
        time_ns: 0,
        interval_ns: 0,
        last: false,
        probes: Vec::new(),
        alert_records: Vec::new(),
    };
    loop {
        let deadline = end.map_or(next, |e| e.min(next));
        let stopped = wait_for_stop(&stop_set, deadline);
        let finished = stopped || end.is_some_and(|e| Instant::now() >= e);

        let now_ns = monotonic_ns();
        seq += 1;
        report.seq = seq;
        report.time_ns = now_ns;
        report.interval_ns = now_ns - last_ns;
        report.last = finished;
        report.probes.clear();
        report.alert_records.clear();
        add_new_series(&mut running);
        for r in running.iter_mut() {
            r.probe.drain_alerts(&mut report.alert_records);
            if let Err(e) = r.probe.read(&mut r.cur) {
                // Keep the previous snapshot: the next good read covers the gap.
                log::warn!("{e}");
                r.cur = r.prev.clone();
            }
            report.probes.push(ProbeReport::new(r.probe.info(), &r.prev, &r.cur));
            std::mem::swap(&mut r.prev, &mut r.cur);
        }
        for s in sinks.iter_mut() {
            if let Err(e) = s.emit(&report) {
                log::warn!("sink {}: {e}", s.name());
            }
        }
        last_ns = now_ns;
        if finished {
            break;
        }
        // Absolute deadlines: intervals do not drift with processing time;
        // after a stall, skip to the next future tick instead of bursting.
        next += cfg.interval;
        let now = Instant::now();
        if next <= now {
            let behind = now.duration_since(next).as_nanos() / cfg.interval.as_nanos().max(1) + 1;
            next += cfg.interval * behind as u32;
        }
    }
    // Probes drop here: links destroyed, programs unloaded.
    drop(running);
    Ok(())
}

/// Fail early, with the reason, when this process cannot load BPF at all:
/// root, or CAP_BPF + CAP_PERFMON (kernel >= 5.8), or CAP_SYS_ADMIN.
pub fn require_bpf_privilege() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    let has = |c: u32| cap_eff & (1 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    bail!(
        "latmon must run as root (or with CAP_BPF and CAP_PERFMON): running as uid {} without them",
        nix::unistd::geteuid()
    )
}

/// Parse a `--interval`-style value for clap.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    crate::config::parse_duration(s).map_err(|e| e.to_string())
}
