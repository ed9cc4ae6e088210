// SPDX-License-Identifier: MIT
//! The agent: attach probes, read them every interval, measure latmon's own
//! BPF cost and hold it to `overhead_budget`, hand summaries to the sinks;
//! drop privileges once attached; SIGHUP reloads the config, SIGINT/SIGTERM
//! (or `duration`) stop cleanly; systemd readiness and watchdog.
//!
//! The per-interval path ([`Agent::tick`]) allocates nothing once warmed
//! up (tests/alloc_free.rs counts): map reads into pre-sized buffers,
//! reports rebuilt in place, cost sampled into fixed tables. Allocation
//! happens only on events: alert records, a detach, a reload.
//!
//! Here: the agent's state and its start. `tick` is one interval, `reload`
//! a SIGHUP (its plan a pure function), `run` the main loop, `signals` and
//! `notify` the process's edges (sigtimedwait, sd_notify).

mod notify;
mod reload;
mod run;
mod signals;
mod tick;

pub use notify::Notifier;
pub use reload::{plan_reload, restart_needed, ReloadStep};
pub use run::{enable_cost_stats, run, run_with, RunOptions};
pub use signals::block_signals;

use std::fs::File;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::bail;
use crate::error::Result;
use latmon_core::hist::Hist;
use latmon_core::session::Session;
use latmon_core::summary::{FailedProbe, IntervalReport, ProbeInfo, ProbeReport, ProbeState};

use crate::config::{Config, ProbeSpec};
use crate::cost::{self, BudgetWatch, Cost, CostTable, StatsGuard};
use crate::privs;
use crate::probes::{self, Probe};

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns() uses.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

// ------------------------------------------------------------- the agent

/// One configured probe: running, or detached with its counts frozen.
struct Slot {
    spec: ProbeSpec,
    info: ProbeInfo,
    probe: Option<Box<dyn Probe>>,
    state: ProbeState,
    prev: Hist,
    cur: Hist,
    total_cost: Cost,
    read_errors: u64,
    progs: Vec<RawFd>,
    /// Series probes this (multi-series family) slot has added; they are
    /// appended to the list (ids never move).
    series: usize,
}

impl Slot {
    fn new(spec: ProbeSpec, probe: Box<dyn Probe>) -> Slot {
        let info = probe.info().clone();
        let progs = probe.bpf_programs();
        log::info!("probe {}: {} via {} ({})", info.name, info.kind, info.attach, info.mode);
        Slot {
            spec,
            info,
            probe: Some(probe),
            state: ProbeState::Running,
            prev: Hist::default(),
            cur: Hist::default(),
            total_cost: Cost::default(),
            read_errors: 0,
            progs,
            series: 0,
        }
    }
}

/// The running agent (probes, cost, budget, report buffers).
pub struct Agent {
    cfg: Config,
    /// The certificate stored for `cfg` as Hello carries it: read at
    /// start and at each reload, not at every new series' replan.
    certificate: Option<latmon_core::wire::WireCertificate>,
    slots: Vec<Slot>,
    session: Session,
    report: IntervalReport,
    totals: Vec<Hist>,
    read_errors: Vec<u64>,
    stats: Option<StatsGuard>,
    costs: CostTable,
    cost_now: Vec<Cost>,
    budget_costs: Vec<Option<Cost>>,
    budget: BudgetWatch,
    cpus: u32,
    seq: u64,
    last_ns: u64,
    start_ns: u64,
    generation: u64,
    rss: Option<File>,
    page_size: u64,
    /// The process's page faults (minor + major) at the last interval.
    faults_before: u64,
    /// False once privileges are dropped: no new probe can be loaded.
    privileged: bool,
    /// A BPF statistics read failed (logged once).
    cost_read_failed: bool,
    /// Configured probes that are not running (attach failed).
    failed: Vec<FailedProbe>,
    /// Loop discovery's worker (None: it could not start; logged).
    discovery: Option<crate::discover::Discovery>,
    /// The discovery scan the report holds.
    discovery_seen: u64,
}

/// Open the probes of `specs`; failures are printed, skipped and returned
/// (outputs with a fixed layout per configured probe, such as the Modbus
/// register map, keep a block for them).
fn open_slots(specs: &[ProbeSpec]) -> (Vec<Slot>, Vec<FailedProbe>) {
    let mut slots = Vec::with_capacity(specs.len());
    let mut failed = Vec::new();
    for (position, (spec, opened)) in specs.iter().zip(probes::open_all(specs)).enumerate() {
        match opened {
            Ok(p) => {
                let i = p.info();
                log::info!("probe {}: {} via {}, {} build ({})", i.name, i.kind, i.attach, i.btf_mode, i.mode);
                slots.push(Slot::new(spec.clone(), p));
            }
            Err(e) => {
                eprintln!("latmon: {e}");
                failed.push(failed_probe(position, spec, &e));
            }
        }
    }
    (slots, failed)
}

/// Say at start which probes this kernel can skip for a map syscall
/// without counting it (docs/probes.md, "Runs the kernel skips"): their
/// `missed` is then no measure of what they missed.
fn warn_uncounted_skips(slots: &[Slot]) {
    let Some(kernel) = probes::kernel_version_here() else { return };
    for s in slots.iter().filter(|s| cost::skips_uncounted(kernel, s.info.attach, s.spec.kind.syscall_tracepoints())) {
        log::warn!(
            "probe {}: kernel {kernel} does not count the runs it skips of kprobe, uprobe and classic-tracepoint \
             programs (counted since {}), which this probe has: a BPF map syscall on the CPU (latmon's own reads \
             included) skips them, so its `missed` reads 0 whatever they missed. Keep latmon on housekeeping CPUs, \
             away from the watched threads (docs/probes.md)",
            s.info.name,
            cost::SKIPS_COUNTED_SINCE
        );
    }
}

/// Loop discovery's worker, scanning every interval. Test builds:
/// `LATMON_LOOPS_MUTATE=1` calls every FIFO thread periodic, the wrong
/// discovery the loop-zoo test must catch.
fn start_discovery(interval: &Duration) -> Option<crate::discover::Discovery> {
    #[cfg(feature = "test-hooks")]
    let mutate = std::env::var_os("LATMON_LOOPS_MUTATE").is_some();
    #[cfg(not(feature = "test-hooks"))]
    let mutate = false;
    match crate::discover::Discovery::start(*interval, mutate) {
        Ok(d) => Some(d),
        Err(e) => {
            log::warn!("loop discovery could not start: {e}; no loops are listed");
            None
        }
    }
}

fn failed_probe(position: usize, spec: &ProbeSpec, e: &dyn std::fmt::Display) -> FailedProbe {
    FailedProbe { position, name: spec.name.clone(), kind: spec.kind.family(), why: e.to_string() }
}

impl Agent {
    /// Open and attach every probe of `cfg`. `stats`: the BPF statistics
    /// guard (None: cost is not measured). Errors only when nothing runs.
    pub fn start(cfg: Config, stats: Option<StatsGuard>) -> Result<Agent> {
        let (slots, failed) = open_slots(&cfg.probes);
        if slots.is_empty() {
            bail!("no probe could attach; nothing to monitor");
        }
        log::info!("running: {} of {} probes attached", slots.len(), cfg.probes.len());
        warn_uncounted_skips(&slots);
        let now = monotonic_ns();
        let cfg_interval = cfg.interval;
        // SAFETY: sysconf has no preconditions.
        let page_size = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mut a = Agent {
            session: session(&cfg, now, 0, Vec::new(), Vec::new()),
            certificate: certificate_of(&cfg),
            cfg,
            slots,
            report: IntervalReport::default(),
            totals: Vec::new(),
            read_errors: Vec::new(),
            stats,
            costs: CostTable::default(),
            cost_now: Vec::new(),
            budget_costs: Vec::new(),
            budget: BudgetWatch::default(),
            cpus: cost::online_cpus(),
            seq: 0,
            last_ns: now,
            start_ns: now,
            generation: 0,
            rss: File::open("/proc/self/statm").ok(),
            page_size,
            faults_before: crate::hygiene::page_faults(),
            privileged: true,
            cost_read_failed: false,
            failed,
            discovery: start_discovery(&cfg_interval),
            discovery_seen: 0,
        };
        a.replan();
        Ok(a)
    }

    /// Multi-series families (syscall per syscall, irq per IRQ, ...) add a
    /// probe per series the first interval it has data. It is appended to
    /// the list, so it is read after its family, and every probe keeps its
    /// position - its id on the wire, where receivers keep cumulative
    /// counts per id (inserting it behind its family shifted the ids of the
    /// probes after it, and a receiver then labelled them with the names
    /// of others). Allocates only when a series appears.
    ///
    /// At most `wire::MAX_PROBES` probes and series in all (the ids a
    /// receiver tracks): a series beyond is not reported on a line of its
    /// own (its events stay in its family's line), and a warning says so.
    fn add_new_series(&mut self) {
        let mut new: Vec<Slot> = Vec::new();
        let total = self.slots.len();
        let mut renamed = false;
        for slot in &mut self.slots {
            // A series named late (a lock's symbol): same id, new name in
            // the session every output announces.
            if let Some(name) = slot.probe.as_mut().and_then(|p| p.rename()) {
                slot.info.name.clone_from(&name);
                slot.spec.name = name;
                renamed = true;
            }
            let mut born = match &mut slot.probe {
                Some(p) => p.new_series(),
                None => Vec::new(),
            };
            let room = latmon_core::wire::MAX_PROBES.saturating_sub(total + new.len());
            if born.len() > room {
                log::warn!(
                    "probe {}: {} new series not reported on their own: {} probes and series in all at most (their events count in {})",
                    slot.info.name,
                    born.len() - room,
                    latmon_core::wire::MAX_PROBES,
                    slot.info.name
                );
                born.truncate(room);
            }
            slot.series += born.len();
            for p in born {
                let mut s = slot.spec.clone();
                s.name.clone_from(&p.info().name);
                new.push(Slot::new(s, p));
            }
        }
        if !new.is_empty() || renamed {
            self.slots.extend(new);
            self.replan();
        }
    }

    /// Rebuild everything sized by the probe set (allocates: start, reload
    /// and detach only).
    fn replan(&mut self) {
        let n = self.slots.len();
        let thresholds = self.slots.iter().map(|s| s.spec.threshold.map_or(0, |t| t.as_nanos() as u64)).collect();
        self.session = session(
            &self.cfg,
            self.start_ns,
            self.generation,
            self.slots.iter().map(|s| s.info.clone()).collect(),
            thresholds,
        );
        self.session.failed.clone_from(&self.failed);
        self.session.certificate = self.certificate;
        self.report.probes.resize_with(n, ProbeReport::empty);
        self.totals.resize_with(n, Hist::default);
        for (t, s) in self.totals.iter_mut().zip(&self.slots) {
            t.clone_from(&s.prev);
        }
        self.read_errors.clear();
        self.read_errors.extend(self.slots.iter().map(|s| s.read_errors));
        self.cost_now = vec![Cost::default(); n];
        self.budget_costs = vec![None; n];
        // Sampled with or without run-time statistics: the kernel's miss
        // counts need none.
        let progs: Vec<Vec<RawFd>> =
            self.slots.iter().map(|s| if s.probe.is_some() { s.progs.clone() } else { Vec::new() }).collect();
        self.costs.rebuild(&progs);
        log::debug!("cost: {} BPF programs sampled", self.costs.programs());
    }

    /// The facts outputs announce.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The last interval's report.
    pub fn report(&self) -> &IntervalReport {
        &self.report
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Drop to `id` (all probes are attached, every map is open). On old
    /// kernels that need it, CAP_BPF is kept (see privs::needs_bpf_cap).
    pub fn drop_privileges(&mut self, id: &privs::Identity) -> Result<()> {
        let release =
            nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
        let unpriv =
            std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled").unwrap_or_else(|_| "1".into());
        let keep = privs::needs_bpf_cap(&release, &unpriv);
        if self.cfg.mlockall {
            crate::hygiene::mlock_before_drop();
        }
        let held = privs::drop_to(id, keep)?;
        self.privileged = false;
        match keep {
            None => log::info!(
                "privileges dropped: now {}:{} (uid {} gid {}), no capabilities (CapEff {:x} CapBnd {:x}), no_new_privs",
                id.user,
                id.group,
                id.uid,
                id.gid,
                held.cap_eff,
                held.cap_bnd
            ),
            Some(c) => log::warn!(
                "privileges dropped to {}:{} but capability {c} kept: this kernel ({release}, unprivileged_bpf_disabled {}) refuses bpf() on open fds without it",
                id.user,
                id.group,
                unpriv.trim()
            ),
        }
        Ok(())
    }
}

/// The facts every output announces (Hello frames). `generation` counts
/// reloads: a new probe table is a new session (new boot id).
fn session(cfg: &Config, start_ns: u64, generation: u64, probes: Vec<ProbeInfo>, thresholds_ns: Vec<u64>) -> Session {
    let uts = nix::sys::utsname::uname().ok();
    let kernel = uts.as_ref().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let kernel_boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    // Without a configured name the host name names the board: a capture
    // read on a laptop days later (a report, a view) says where it came
    // from. The kernel bounds it (64 bytes, HOST_NAME_MAX).
    let host = uts.map(|u| u.nodename().to_string_lossy().into_owned()).unwrap_or_default();
    Session {
        board: cfg.board.clone().unwrap_or(host),
        kernel,
        boot_id: latmon_core::wire::boot_id(
            kernel_boot_id.trim(),
            start_ns.wrapping_add(generation),
            std::process::id(),
        ),
        start_ns,
        interval_ns: cfg.interval.as_nanos() as u64,
        probes,
        failed: Vec::new(),
        thresholds_ns,
        // Agent::replan sets it (read once per config, not per replan).
        certificate: None,
    }
}

/// The Hello summary of the certificate stored for `cfg` (none when
/// `latmon run` named no path, as in tests, or none is stored there).
pub(crate) fn certificate_of(cfg: &Config) -> Option<latmon_core::wire::WireCertificate> {
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    cfg.certificate.as_deref().and_then(|p| crate::certify::store::announce(p, &kernel))
}

/// `latmon check`'s self-measurement: each probe's BPF cost over `d`
/// (BPF statistics on, probes attached, whatever the machine does
/// meanwhile). The probes are read every 100 ms, as the agent reads them
/// each interval, and the page faults of the second half counted (steady
/// state: 0 with `mlockall`). Returns per probe `(cost, events counted)`,
/// the wall time, online CPUs and those faults; Err (BPF_ENABLE_STATS's)
/// when statistics cannot be enabled.
pub fn measure(probes: &mut [Box<dyn Probe>], d: Duration) -> std::io::Result<(Vec<Cost>, u64, u32, u64)> {
    let _guard = cost::enable_stats()?;
    let mut table = CostTable::default();
    let progs: Vec<Vec<RawFd>> = probes.iter().map(|p| p.bpf_programs()).collect();
    table.rebuild(&progs);
    let mut before = vec![Hist::default(); probes.len()];
    for (p, h) in probes.iter_mut().zip(before.iter_mut()) {
        let _ = p.read(h);
    }
    table.sample();
    let t0 = monotonic_ns();
    let mut scratch = Hist::default();
    let mut faults_from = None;
    let half = d / 2;
    let started = std::time::Instant::now();
    while started.elapsed() < d {
        std::thread::sleep(Duration::from_millis(100).min(d.saturating_sub(started.elapsed())));
        for p in probes.iter_mut() {
            let _ = p.read(&mut scratch);
        }
        if faults_from.is_none() && started.elapsed() >= half {
            faults_from = Some(crate::hygiene::page_faults());
        }
    }
    let steady_faults = crate::hygiene::page_faults().saturating_sub(faults_from.unwrap_or(u64::MAX));
    let (all, _) = table.sample();
    let wall = monotonic_ns().saturating_sub(t0);
    let mut events = vec![0u64; probes.len()];
    for (i, p) in probes.iter_mut().enumerate() {
        let mut h = Hist::default();
        if p.read(&mut h).is_ok() {
            events[i] = h.count.saturating_sub(before[i].count) + h.drops.saturating_sub(before[i].drops);
        }
    }
    let mut out = vec![Cost::default(); probes.len()];
    table.split(|i| events[i], &mut out);
    log::debug!("check: all programs {} runs, {} ns over {wall} ns", all.runs, all.run_time_ns);
    Ok((out, wall, cost::online_cpus(), steady_faults))
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
