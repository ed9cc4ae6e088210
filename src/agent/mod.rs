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

use std::fs::File;
use std::os::fd::RawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{SigSet, Signal};

use crate::config::{Config, ProbeSpec};
use crate::cost::{self, BudgetWatch, Cost, CostTable, StatsGuard};
use crate::hist::Hist;
use crate::privs;
use crate::probes::{self, Probe, ProbeError};
use crate::sinks::{Session, Sink, Tick};
use crate::summary::{FailedProbe, IntervalReport, ProbeInfo, ProbeReport, ProbeState};

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns() uses.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// The thread that collects the signals (the one that blocked them first).
static AGENT_TID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Runs only in a thread that had the signals unblocked for a moment: the
/// serialport crate waits with `ppoll(.., empty mask)`, unblocking every
/// signal in the serial and Modbus RTU threads while they wait. Without a
/// handler a SIGINT, SIGTERM or SIGHUP landing there killed latmon (no final
/// summary; a reload became a crash). Hand it to the agent thread instead,
/// where it is blocked and collected by sigtimedwait.
extern "C" fn forward_to_agent(sig: libc::c_int) {
    // SAFETY: getpid/tgkill are async-signal-safe syscalls; errno is
    // saved and restored around them.
    unsafe {
        let errno = *libc::__errno_location();
        libc::syscall(libc::SYS_tgkill, libc::getpid(), AGENT_TID.load(std::sync::atomic::Ordering::Relaxed), sig);
        *libc::__errno_location() = errno;
    }
}

/// Block SIGINT, SIGTERM and SIGHUP in this thread (call before any thread
/// is spawned, so all inherit it); the agent collects them synchronously
/// with sigtimedwait. A thread that unblocks them anyway (see
/// `forward_to_agent`) forwards them here. Idempotent.
pub fn block_signals() -> Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set.thread_block().context("blocking SIGINT/SIGTERM/SIGHUP")?;
    let _ = AGENT_TID.compare_exchange(
        0,
        nix::unistd::gettid().as_raw(),
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
    );
    let forward = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(forward_to_agent),
        nix::sys::signal::SaFlags::SA_RESTART,
        SigSet::all(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only makes async-signal-safe syscalls.
        unsafe { nix::sys::signal::sigaction(sig, &forward) }.context("installing the signal forwarder")?;
    }
    Ok(set)
}

/// Sleep until `deadline` or a signal of `set`; the signal, if one came.
fn wait_signal(set: &SigSet, deadline: Instant) -> Option<i32> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ts = libc::timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
        // SAFETY: set and ts are valid for the call; info may be null.
        let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if sig > 0 {
            return Some(sig);
        }
        // EAGAIN: timeout; EINTR: another signal; both re-check the deadline.
    }
}

// ------------------------------------------------------------- systemd

/// sd_notify(3) without libsystemd: datagrams to `$NOTIFY_SOCKET` (a path,
/// or `@name` in the abstract namespace). Connected at start, so it keeps
/// working after the privilege drop.
pub struct Notifier {
    sock: Option<UnixDatagram>,
    /// Half of `$WATCHDOG_USEC` when the watchdog is on for this process.
    pub watchdog: Option<Duration>,
}

impl Notifier {
    pub fn from_env() -> Notifier {
        let sock = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let s = UnixDatagram::unbound().ok()?;
            let bytes = path.as_encoded_bytes();
            let res = if let Some(name) = bytes.strip_prefix(b"@") {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name).and_then(|a| s.connect_addr(&a))
            } else {
                s.connect(&path)
            };
            match res {
                Ok(()) => Some(s),
                Err(e) => {
                    log::warn!("NOTIFY_SOCKET {}: {e}", path.to_string_lossy());
                    None
                }
            }
        });
        let for_us = std::env::var("WATCHDOG_PID").map_or(true, |p| p.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us && sock.is_some())
            .map(|u| Duration::from_micros(u / 2));
        Notifier { sock, watchdog }
    }

    /// Send one notification (e.g. `READY=1`); failures are only logged.
    pub fn send(&self, msg: &str) {
        if let Some(s) = &self.sock {
            if let Err(e) = s.send(msg.as_bytes()) {
                log::debug!("NOTIFY_SOCKET: {e}");
            }
        }
    }
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
    /// False once privileges are dropped: no new probe can be loaded.
    privileged: bool,
    /// A BPF statistics read failed (logged once).
    cost_read_failed: bool,
    /// Configured probes that are not running (attach failed).
    failed: Vec<FailedProbe>,
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
        let now = monotonic_ns();
        // SAFETY: sysconf has no preconditions.
        let page_size = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let mut a = Agent {
            session: session(&cfg, now, 0, Vec::new()),
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
            privileged: true,
            cost_read_failed: false,
            failed,
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
        for slot in &mut self.slots {
            let mut born = match &mut slot.probe {
                Some(p) => p.new_series(),
                None => Vec::new(),
            };
            let room = crate::wire::MAX_PROBES.saturating_sub(total + new.len());
            if born.len() > room {
                log::warn!(
                    "probe {}: {} new series not reported on their own: {} probes and series in all at most (their events count in {})",
                    slot.info.name,
                    born.len() - room,
                    crate::wire::MAX_PROBES,
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
        if !new.is_empty() {
            self.slots.extend(new);
            self.replan();
        }
    }

    /// Rebuild everything sized by the probe set (allocates: start, reload
    /// and detach only).
    fn replan(&mut self) {
        let n = self.slots.len();
        self.session =
            session(&self.cfg, self.start_ns, self.generation, self.slots.iter().map(|s| s.info.clone()).collect());
        self.session.failed.clone_from(&self.failed);
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
        let held = privs::drop_to(id, keep).map_err(anyhow::Error::msg)?;
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

    /// One interval: read every probe, measure cost, apply the budget, and
    /// hand the summary to every sink. `last`: the final summary.
    pub fn tick(&mut self, last: bool, sinks: &mut [Box<dyn Sink>]) {
        self.add_new_series();
        let now_ns = monotonic_ns();
        self.seq += 1;
        let wall = now_ns.saturating_sub(self.last_ns);
        let r = &mut self.report;
        r.seq = self.seq;
        r.time_ns = now_ns;
        r.interval_ns = wall;
        r.last = last;
        r.alert_records.clear();
        for (i, s) in self.slots.iter_mut().enumerate() {
            match &mut s.probe {
                Some(p) => {
                    if last {
                        p.flush_alerts();
                    }
                    p.drain_alerts(&mut r.alert_records);
                    if let Err(e) = p.read(&mut s.cur) {
                        // Keep the previous snapshot: the next good read covers the gap.
                        log::warn!("{e}");
                        s.read_errors += 1;
                        s.cur.clone_from(&s.prev);
                    }
                }
                None => s.cur.clone_from(&s.prev),
            }
            r.probes[i].fill(&s.info, &s.prev, &s.cur);
            r.probes[i].state = s.state;
            // Series carry their family's spec (add_new_series).
            r.probes[i].hist = s.spec.hist;
            self.read_errors[i] = s.read_errors;
        }
        self.measure_cost(wall);
        self.apply_budget(wall);
        for (i, s) in self.slots.iter_mut().enumerate() {
            std::mem::swap(&mut s.prev, &mut s.cur);
            self.totals[i].clone_from(&s.prev);
        }
        self.report.agent.rss_bytes = self.rss_bytes();
        let tick =
            Tick { session: &self.session, report: &self.report, totals: &self.totals, read_errors: &self.read_errors };
        crate::sinks::share_link_stats(sinks);
        for s in sinks.iter_mut() {
            s.emit(&tick);
        }
        self.last_ns = now_ns;
    }

    /// Per probe: its programs' runs, time (with run-time statistics on)
    /// and the runs the kernel skipped (always).
    fn measure_cost(&mut self, wall: u64) {
        let a = &mut self.report.agent;
        a.online_cpus = self.cpus;
        a.cost_measured = self.stats.is_some();
        let (all, failed) = self.costs.sample();
        if failed > 0 {
            // Seen once per run at most in the log; the interval's cost
            // is then partial (or none), and says so.
            if !self.cost_read_failed {
                log::warn!(
                    "BPF statistics: {failed} of {} programs unreadable (bpf_prog_get_info_by_fd); their cost and kernel misses are not counted",
                    self.costs.programs()
                );
                self.cost_read_failed = true;
            }
            if failed == self.costs.programs() {
                a.cost_measured = false;
            }
        }
        let probes = &self.report.probes;
        self.costs.split(|i| probes.get(i).map_or(0, |p| p.count + p.drops), &mut self.cost_now);
        let measured = self.stats.is_some();
        if measured {
            a.bpf_run_time_ns = all.run_time_ns;
            a.bpf_cpu_percent = round4(all.cpu_percent(wall, self.cpus));
        }
        for (i, s) in self.slots.iter_mut().enumerate() {
            let mut c = if s.probe.is_some() { self.cost_now[i] } else { Cost::default() };
            if c.missed > 0 && s.total_cost.missed == 0 {
                log::warn!(
                    "probe {}: the kernel skipped {} runs of its BPF programs (recursion_misses): events it did not \
                     measure, reported as `missed`. Kprobe and classic-tracepoint programs are skipped while a BPF map \
                     syscall (any process's, latmon's own reads included) or another BPF program holds their CPU; \
                     tp_btf/raw_tp (kernel BTF) are not affected by map syscalls (docs/probes.md)",
                    s.info.name,
                    c.missed
                );
            }
            if !measured {
                c = Cost { missed: c.missed, ..Cost::default() };
            }
            s.total_cost.add(c);
            let p = &mut self.report.probes[i];
            p.bpf_missed = c.missed;
            p.total_bpf_missed = s.total_cost.missed;
            p.bpf_runs = c.runs;
            p.bpf_run_time_ns = c.run_time_ns;
            p.total_bpf_runs = s.total_cost.runs;
            p.total_bpf_run_time_ns = s.total_cost.run_time_ns;
            p.bpf_ns_per_event = c.ns_per_event();
            p.events_per_s = c.events_per_s(wall);
            p.bpf_cpu_percent = round4(c.cpu_percent(wall, self.cpus));
            self.budget_costs[i] = s.probe.is_some().then_some(c);
        }
    }

    fn apply_budget(&mut self, wall: u64) {
        let Some(b) = self.cfg.overhead_budget else { return };
        if self.stats.is_none() {
            return;
        }
        let total = Cost { run_time_ns: self.report.agent.bpf_run_time_ns, ..Default::default() };
        let v = self.budget.check(&b, &self.budget_costs, total, wall, self.cpus);
        let a = &mut self.report.agent;
        a.over_budget = v.breach.is_some();
        a.over_budget_intervals = v.streak;
        if let Some(br) = v.breach {
            let who = match br {
                cost::Breach::NsPerEvent { probe, .. } => format!("probe {}: ", self.slots[probe].info.name),
                cost::Breach::Cpu { .. } => String::new(),
            };
            log::warn!("over budget ({}/{} intervals): {who}{br}", v.streak, b.intervals);
            if let Some(i) = v.detach {
                self.detach(i, &br.to_string());
            }
        }
    }

    /// Detach probe `i` over budget: links destroyed, programs unloaded,
    /// its counts frozen and still reported.
    fn detach(&mut self, i: usize, why: &str) {
        let s = &mut self.slots[i];
        let cost = self.cost_now[i];
        log::warn!(
            "probe {}: DETACHED over budget ({why}; its BPF: {} ns/event, {} runs this interval)",
            s.info.name,
            cost.ns_per_event(),
            cost.runs
        );
        s.probe = None;
        s.progs.clear();
        s.state = ProbeState::DetachedOverBudget;
        self.report.probes[i].state = s.state;
        self.report.agent.degraded = true;
        self.report.agent.detached =
            self.slots.iter().filter(|s| s.state == ProbeState::DetachedOverBudget).count() as u32;
        let progs: Vec<Vec<RawFd>> =
            self.slots.iter().map(|s| if s.probe.is_some() { s.progs.clone() } else { Vec::new() }).collect();
        self.costs.rebuild(&progs);
        if self.slots.iter().all(|s| s.probe.is_none()) {
            log::error!(
                "every probe is detached over budget: latmon measures nothing now (raise overhead_budget and reload)"
            );
        }
    }

    /// Whether any probe still runs.
    pub fn any_running(&self) -> bool {
        self.slots.iter().any(|s| s.probe.is_some())
    }

    fn rss_bytes(&self) -> u64 {
        let Some(f) = &self.rss else { return 0 };
        let mut buf = [0u8; 128];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        // statm: size resident shared ... (pages)
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
        text.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).map_or(0, |p| p * self.page_size)
    }

    /// SIGHUP: apply a new configuration. Probes whose spec is unchanged
    /// keep running with their cumulative counts; new specs are opened
    /// (not possible once privileges are dropped: reported); removed ones
    /// are detached. Interval and budget take effect; settings that need a
    /// restart (outputs, user, CPUs, scheduling) are reported if changed.
    pub fn reload(&mut self, new: Config) {
        for (key, changed) in [
            ("outputs", new.outputs != self.cfg.outputs),
            ("format", new.format != self.cfg.format),
            ("user/group", new.user != self.cfg.user || new.group != self.cfg.group),
            ("housekeeping_cpus", new.housekeeping_cpus != self.cfg.housekeeping_cpus),
            ("sched/nice", new.sched != self.cfg.sched || new.nice != self.cfg.nice),
            ("mlockall", new.mlockall != self.cfg.mlockall),
            ("btf_path", new.btf_path != self.cfg.btf_path),
        ] {
            if changed {
                log::warn!("reload: {key} changed: takes effect only after a restart");
            }
        }
        let mut old: Vec<Option<Slot>> = std::mem::take(&mut self.slots).into_iter().map(Some).collect();
        let mut next: Vec<Option<Slot>> = Vec::with_capacity(new.probes.len());
        let mut to_open: Vec<(usize, ProbeSpec, Option<Slot>)> = Vec::new();
        for spec in &new.probes {
            let found = old.iter_mut().find(|o| o.as_ref().is_some_and(|s| &s.spec == spec)).and_then(Option::take);
            match found {
                Some(s) if s.probe.is_some() => next.push(Some(s)),
                // Detached over budget: a reload is a fresh chance (if we
                // still may load programs), counts kept.
                Some(s) if self.privileged => {
                    to_open.push((next.len(), spec.clone(), Some(s)));
                    next.push(None);
                }
                Some(s) => next.push(Some(s)),
                None if self.privileged => {
                    to_open.push((next.len(), spec.clone(), None));
                    next.push(None);
                }
                None => {
                    eprintln!(
                        "latmon: reload: probe {} not started: privileges were dropped (user = {:?}); restart latmon to add probes",
                        spec.name,
                        self.cfg.user.as_deref().unwrap_or("")
                    );
                    next.push(None);
                }
            }
        }
        self.failed.clear();
        if !to_open.is_empty() {
            let specs: Vec<ProbeSpec> = to_open.iter().map(|(_, s, _)| s.clone()).collect();
            for ((at, spec, kept), opened) in to_open.into_iter().zip(probes::open_all(&specs)) {
                match (opened, kept) {
                    (Ok(p), Some(mut s)) => {
                        log::info!("reload: probe {} attached again; counts continue", spec.name);
                        let fresh = Slot::new(spec, p);
                        s.info = fresh.info;
                        s.progs = fresh.progs;
                        s.state = ProbeState::Running;
                        // The new programs count from zero: read on top of
                        // the frozen cumulative histogram.
                        let base = s.prev.clone();
                        s.probe = fresh.probe.map(|inner| Box::new(Continued { inner, base }) as Box<dyn Probe>);
                        next[at] = Some(s);
                    }
                    (Ok(p), None) => {
                        log::info!("reload: probe {} added", spec.name);
                        next[at] = Some(Slot::new(spec, p));
                    }
                    (Err(e), kept) => {
                        eprintln!("latmon: reload: {e}");
                        if kept.is_none() {
                            self.failed.push(failed_probe(at, &spec, &e));
                        }
                        next[at] = kept;
                    }
                }
            }
        }
        for s in old.into_iter().flatten() {
            log::info!("reload: probe {} removed (detached)", s.info.name);
            drop(s);
        }
        self.slots = next.into_iter().flatten().collect();
        if self.slots.is_empty() {
            log::error!("reload: no probe runs now: latmon measures nothing until the next reload");
        }
        self.cfg = new;
        self.cpus = cost::online_cpus();
        self.budget = BudgetWatch::default();
        self.report.agent.degraded = self.slots.iter().any(|s| s.state == ProbeState::DetachedOverBudget);
        self.report.agent.detached =
            self.slots.iter().filter(|s| s.state == ProbeState::DetachedOverBudget).count() as u32;
        self.report.agent.over_budget = false;
        self.report.agent.over_budget_intervals = 0;
        self.generation += 1;
        self.report.probes.clear();
        self.replan();
        log::info!(
            "reload: {} probes ({} running)",
            self.slots.len(),
            self.slots.iter().filter(|s| s.probe.is_some()).count()
        );
    }
}

/// A re-attached probe: its new BPF maps count from zero, its counts so
/// far are the base every read adds.
struct Continued {
    inner: Box<dyn Probe>,
    base: Hist,
}

impl Probe for Continued {
    fn info(&self) -> &ProbeInfo {
        self.inner.info()
    }
    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        self.inner.read(out)?;
        out.merge(&self.base);
        Ok(())
    }
    fn flush_alerts(&mut self) {
        self.inner.flush_alerts()
    }

    fn drain_alerts(&mut self, out: &mut Vec<crate::summary::AlertRecord>) {
        self.inner.drain_alerts(out)
    }
    fn bpf_programs(&self) -> Vec<RawFd> {
        self.inner.bpf_programs()
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Knobs of [`run_with`] beyond the config.
#[derive(Default)]
pub struct RunOptions<'a> {
    /// Re-read the configuration on SIGHUP (None: SIGHUP is logged and
    /// ignored).
    pub reload: Option<&'a dyn Fn() -> Result<Config>>,
    /// Drop to this identity once every probe is attached.
    pub drop_to: Option<privs::Identity>,
}

/// How long outputs may take to flush at exit.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// Run the agent until stopped. Returns an error only when nothing can run.
/// Outputs are flushed and closed before returning.
pub fn run(cfg: &Config, sinks: &mut [Box<dyn Sink>]) -> Result<()> {
    run_with(cfg, sinks, RunOptions::default())
}

/// [`run`] with SIGHUP reloads and the privilege drop.
pub fn run_with(cfg: &Config, sinks: &mut [Box<dyn Sink>], opts: RunOptions<'_>) -> Result<()> {
    let notify = Notifier::from_env();
    let res = run_loop(cfg, sinks, &opts, &notify);
    notify.send("STOPPING=1");
    for s in sinks.iter_mut() {
        s.close(FLUSH_AT_EXIT);
    }
    res
}

/// Turn on BPF run-time statistics for as long as the guard lives.
pub fn enable_cost_stats() -> Option<StatsGuard> {
    match cost::enable_stats() {
        Ok(g) => Some(g),
        Err(e) => {
            log::warn!("BPF run-time statistics unavailable (BPF_ENABLE_STATS: {e}; needs CAP_SYS_ADMIN and kernel >= 5.8): latmon's own cost is not measured");
            None
        }
    }
}

fn run_loop(cfg: &Config, sinks: &mut [Box<dyn Sink>], opts: &RunOptions<'_>, notify: &Notifier) -> Result<()> {
    let sigs = block_signals()?;
    require_bpf_privilege()?;
    probes::route_libbpf_logs();
    probes::ensure_tracefs();
    let stats = enable_cost_stats();
    let mut agent = Agent::start(cfg.clone(), stats)?;
    if let Some(id) = &opts.drop_to {
        agent.drop_privileges(id)?;
    }
    notify.send(&format!("READY=1\nSTATUS=monitoring {} probes\nMAINPID={}", agent.slots.len(), std::process::id()));

    let start = Instant::now();
    let end = cfg.duration.map(|d| start + d);
    let mut interval = agent.cfg.interval;
    let mut next = start + interval;
    let mut next_wd = notify.watchdog.map(|p| start + p);
    let mut was_degraded = false;
    loop {
        let mut deadline = end.map_or(next, |e| e.min(next));
        if let Some(w) = next_wd {
            deadline = deadline.min(w);
        }
        let sig = wait_signal(&sigs, deadline);
        let now = Instant::now();
        if let (Some(w), Some(p)) = (next_wd, notify.watchdog) {
            if now >= w {
                notify.send("WATCHDOG=1");
                next_wd = Some(now + p);
            }
        }
        if sig == Some(libc::SIGHUP) {
            match opts.reload {
                Some(reload) => {
                    notify.send("RELOADING=1");
                    match reload() {
                        Ok(new) => {
                            log::info!("SIGHUP: configuration reloaded");
                            agent.reload(new);
                            interval = agent.cfg.interval;
                            next = Instant::now() + interval;
                        }
                        Err(e) => eprintln!("latmon: SIGHUP: reload failed, keeping the running configuration: {e:#}"),
                    }
                    notify.send("READY=1");
                }
                None => log::warn!("SIGHUP: no configuration file to reload"),
            }
            continue;
        }
        if let Some(s) = sig {
            log::info!("signal {s}: stopping");
        }
        let finished = sig.is_some() || end.is_some_and(|e| now >= e);
        if !finished && now < next {
            continue; // a watchdog wake-up
        }
        agent.tick(finished, sinks);
        let degraded = agent.report.agent.degraded;
        if degraded != was_degraded {
            notify.send(if degraded {
                "STATUS=degraded: a probe was detached over overhead_budget"
            } else {
                "STATUS=monitoring"
            });
            was_degraded = degraded;
        }
        if finished {
            break;
        }
        // Absolute deadlines: intervals do not drift with processing time;
        // after a stall, skip to the next future tick instead of bursting.
        next += interval;
        let now = Instant::now();
        if next <= now {
            let behind = now.duration_since(next).as_nanos() / interval.as_nanos().max(1) + 1;
            next += interval * behind as u32;
        }
    }
    // Probes drop here: links destroyed, programs unloaded.
    drop(agent);
    Ok(())
}

/// The facts every output announces (Hello frames). `generation` counts
/// reloads: a new probe table is a new session (new boot id).
fn session(cfg: &Config, start_ns: u64, generation: u64, probes: Vec<ProbeInfo>) -> Session {
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let kernel_boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    Session {
        board: cfg.board.clone().unwrap_or_default(),
        kernel,
        boot_id: crate::wire::boot_id(kernel_boot_id.trim(), start_ns.wrapping_add(generation), std::process::id()),
        start_ns,
        interval_ns: cfg.interval.as_nanos() as u64,
        probes,
        failed: Vec::new(),
    }
}

/// `latmon check`'s self-measurement: each probe's BPF cost over `d`
/// (BPF statistics on, probes attached, whatever the machine does
/// meanwhile). Returns per probe `(cost, events counted)`, the wall time
/// and online CPUs; Err when statistics cannot be enabled.
pub fn measure(probes: &mut [Box<dyn Probe>], d: Duration) -> Result<(Vec<Cost>, u64, u32), String> {
    let _guard = cost::enable_stats().map_err(|e| format!("BPF_ENABLE_STATS: {e}"))?;
    let mut table = CostTable::default();
    let progs: Vec<Vec<RawFd>> = probes.iter().map(|p| p.bpf_programs()).collect();
    table.rebuild(&progs);
    let mut before = vec![Hist::default(); probes.len()];
    for (p, h) in probes.iter_mut().zip(before.iter_mut()) {
        let _ = p.read(h);
    }
    table.sample();
    let t0 = monotonic_ns();
    std::thread::sleep(d);
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
    Ok((out, wall, cost::online_cpus()))
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
