// SPDX-License-Identifier: MIT
//! `cycle` (bpf/cycle.bpf.c): the cycles of a periodic thread, release ->
//! done. The family line is the response time; its series `NAME:wakeup`
//! (release -> running) and `NAME:exec` (running -> done). Misses,
//! overruns and slow responses come as alert records with their causes;
//! cycles, misses, overruns and the period as the probe's counts.
//!
//! tp_btf only: the accounting needs trusted task pointers.

use std::mem::{size_of, MaybeUninit};

use latmon_core::anatomy::{Anatomy, BlockedOn, Cause, CauseKind, Policy};
use latmon_core::cycle::{CycleCounts, CycleEvent, CycleMark, Doing, Rule, RuleCounts, RuleMark, Waker};
use latmon_core::extra::ProbeExtra;
use latmon_core::hist::Hist;
use latmon_core::ident::BtfMode;
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use super::alerts::{decode_alert, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts};
use super::common::LoadError;
use super::series::{Family, Role, Slot, Source};
use super::{attach_in_order, ladder, libbpf_error, set_comm, threshold_ns, Owned, Probe, ProbeError};
use super::{PerCpuHist, ReadError};
use crate::bpf::cycle::{CycleSkel, CycleSkelBuilder};
use crate::bpf::limits::{
    ANAT_IRQS, ANAT_TASKS, CS_EXEC, CS_RESPONSE, CS_WAKEUP, CYCLE_DOING_BLOCKED, CYCLE_DOING_RUNNABLE,
    CYCLE_DOING_RUNNING, CYCLE_LATE_BACKLOG, CYCLE_LATE_STOPPED, CYCLE_MISS, CYCLE_OVERRUN, CYCLE_RULE,
    CYCLE_RULE_ALERT_ID, RULE_WOKEN_BY_LOWER, SOFTIRQ_VECS,
};
use crate::bpf::shared::types::{
    latmon_alert_cycle, latmon_anatomy, latmon_cycle_record, latmon_cycle_stats, latmon_lock_record,
};
use crate::config::{ProbeKind, ProbeSpec};

// SAFETY: #[repr(C)] structs of integers generated from bpf/latmon.h.
unsafe impl plain::Plain for latmon_cycle_record {}
unsafe impl plain::Plain for latmon_cycle_stats {}
const _: () = assert!(
    size_of::<latmon_alert_cycle>()
        == super::alerts::ALERT_RECORD_BYTES
            + super::alerts::ANATOMY_BYTES
            + size_of::<latmon_cycle_record>()
            + size_of::<latmon_lock_record>()
);

/// Test builds only (feature `test-hooks`): `LATMON_CYCLE_MUTATE=1` charges the loop's own execution
/// to other tasks (bpf/cycle.bpf.c `cfg.mutate`), the wrong attribution
/// the live test must catch; `=rules` judges every timer sleep relative
/// and every futex wait not PI (bpf/cycle_rules.bpf.h).
#[cfg(feature = "test-hooks")]
pub const MUTATE_ENV: &str = "LATMON_CYCLE_MUTATE";

/// Test builds only: `LATMON_AUTO_MUTATE=1` gives each watched loop the
/// counts of another watched thread, the wrong attribution the loop-zoo
/// test must catch.
#[cfg(feature = "test-hooks")]
pub const AUTO_MUTATE_ENV: &str = "LATMON_AUTO_MUTATE";

/// Programs in attach order: a thread's exit and exec first (an entry made
/// before them would never be freed), the interrupt exits before their
/// entries, the consumers (switch, migrate) before the producers (waking,
/// the sleeps).
const PROGRAMS: [&str; 14] = [
    "cycle_exit",
    "cycle_exec",
    "cycle_irq_exit",
    "cycle_softirq_exit",
    "cycle_hrtimer_expire_exit",
    "cycle_irq_entry",
    "cycle_softirq_entry",
    "cycle_switch",
    "cycle_migrate",
    "cycle_waking",
    "cycle_hrtimer_expire",
    "cycle_clock_nanosleep_exit",
    "cycle_nanosleep_exit",
    "cycle_clock_nanosleep",
];
/// Attached after PROGRAMS.
const NANOSLEEP: &str = "cycle_nanosleep";
/// Attached last, with `timerfd=true` only: it runs on every read() on
/// the machine (about 75 ns each here, docs/probes.md "cycle").
const TIMERFD_READ: &str = "cycle_read";

struct Cycles {
    alerts: Alerts,
    reader: PerCpuHist,
    /// The counts last read (cumulative), for the interval's deltas.
    last: CycleCounts,
    /// Without `timerfd=true`: the hint still to give if no thread is
    /// entered (see `TimerfdHint`).
    hint: Option<TimerfdHint>,
    /// The object's .bss `cycle_retired` (the counts of the threads that
    /// left), mapped; valid while `_skel` lives (the kernel adds to it:
    /// volatile reads).
    retired: *const latmon_cycle_stats,
    /// The live threads' counts at the last read, and at the one before
    /// (a watched loop's interval; `cycle,auto`). At most CYCLE_THREADS.
    threads: Vec<ThreadRead>,
    threads_before: Vec<ThreadRead>,
    /// `cycle,auto` only.
    auto: Option<AutoWatch>,
    _links: Vec<Link>,
    _skel: Owned<CycleSkel<'static>>,
}

/// One watched thread's cumulative counts, as last read.
#[derive(Debug, Clone, Copy)]
struct ThreadRead {
    tid: u32,
    period_ns: u64,
    cycles: u64,
    misses: u64,
    overruns: u64,
    rules: u64,
}

/// `cycle,auto`: the loops handed to the BPF side (bpf/cycle_state.bpf.h
/// `cycle_auto`).
#[derive(Default)]
struct AutoWatch {
    /// The thread ids handed to cycle_auto, sorted (the BPF side deletes
    /// a thread's id when it exits or execs: one of these may be gone).
    tids: Vec<u32>,
    /// When the discovery scan of the last listing handed over began.
    scan_at_ns: u64,
    /// Scratch: the ids to watch now, sorted.
    want: Vec<u32>,
    /// cycle_read, attached once a timerfd loop is to be watched.
    read: Option<Link>,
    /// Its attach failed (said once): timerfd loops are not listed.
    read_failed: bool,
}

impl Cycles {
    /// cycle_read, attached for a watched timerfd loop (not before: it
    /// runs on every read() on the machine). Whether it is.
    fn timerfd_read(&mut self) -> bool {
        let Some(a) = self.auto.as_mut() else { return false };
        if a.read.is_none() && !a.read_failed {
            match super::attach_in_order(self._skel.object(), &[TIMERFD_READ]) {
                Ok(mut l) => a.read = l.pop(),
                Err(e) => {
                    a.read_failed = true;
                    log::warn!("cycle,auto: timerfd loops are not watched: {e}");
                }
            }
        }
        a.read.is_some()
    }
}

impl Source for Cycles {
    fn watch(&mut self, loops: &mut [latmon_core::loops::Loop], scan_at_ns: u64) {
        use latmon_core::loops::{LoopCycles, PeriodSource};
        if self.auto.is_none() {
            return;
        }
        // Before a timerfd loop's id is listed: a reader entered at its
        // timer's expiry whose read is never seen would never be done.
        let timerfd =
            loops.iter().any(|l| l.watched && l.period_source == PeriodSource::Timerfd) && self.timerfd_read();
        for l in loops.iter_mut().filter(|l| l.watched && l.period_source == PeriodSource::Timerfd && !timerfd) {
            l.watched = false;
        }
        let Some(a) = self.auto.as_mut() else { return };
        a.want.clear();
        a.want.extend(loops.iter().filter(|l| l.watched).map(|l| l.tid));
        a.want.sort_unstable();
        if a.want != a.tids {
            let map = &self._skel.maps.cycle_auto;
            for tid in a.tids.iter().filter(|t| a.want.binary_search(t).is_err()) {
                // Gone already (ENOENT) is what is wanted.
                let _ = map.delete(&tid.to_ne_bytes());
            }
            for tid in a.want.iter().filter(|t| a.tids.binary_search(t).is_err()) {
                if let Err(e) = map.update(&tid.to_ne_bytes(), &[1], MapFlags::ANY) {
                    log::warn!("cycle,auto: loop {tid} not watched: {e}");
                }
            }
            std::mem::swap(&mut a.tids, &mut a.want);
        } else if scan_at_ns != a.scan_at_ns {
            // A new scan lists the same ids: put each back (BPF_ANY,
            // idempotent; at most LATMON_CYCLE_AUTO calls a scan). The BPF
            // side deleted the id of a loop that exited; a scan that still
            // lists it saw a thread alive with that id - a new one, when
            // the id was reused within a scan - which is then watched, not
            // lost. (A scan begun before the exit may put a dead id back
            // until the next scan: the window is a scan's length.)
            let map = &self._skel.maps.cycle_auto;
            for tid in &a.tids {
                if let Err(e) = map.update(&tid.to_ne_bytes(), &[1], MapFlags::ANY) {
                    log::warn!("cycle,auto: loop {tid} not watched: {e}");
                }
            }
        }
        a.scan_at_ns = scan_at_ns;
        #[cfg(feature = "test-hooks")]
        let mutate = std::env::var_os(AUTO_MUTATE_ENV).is_some();
        #[cfg(not(feature = "test-hooks"))]
        let mutate = false;
        for l in loops.iter_mut() {
            let mut now = self.threads.iter().position(|t| t.tid == l.tid).filter(|_| l.watched);
            if mutate {
                // The wrong loop's counts: the next thread read.
                now = now.map(|i| (i + 1) % self.threads.len());
            }
            let now = now.map(|i| &self.threads[i]);
            l.cycle = now.map(|t| {
                let b = self.threads_before.iter().find(|b| b.tid == t.tid);
                let (c0, m0) = b.map_or((0, 0), |b| (b.cycles, b.misses));
                LoopCycles {
                    period_ns: t.period_ns,
                    cycles: t.cycles.saturating_sub(c0),
                    total_cycles: t.cycles,
                    misses: t.misses.saturating_sub(m0),
                    total_misses: t.misses,
                    total_overruns: t.overruns,
                    total_rules: t.rules,
                }
            });
            l.adopt_cycle_period();
        }
    }

    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::loaded_prog_fds(self._skel.object())
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
        for (key, label, role) in [
            (CS_RESPONSE, "response", Role::Family),
            (CS_WAKEUP, "wakeup", Role::Extra),
            (CS_EXEC, "exec", Role::Extra),
        ] {
            out.push(Slot { key: key as u64, label: label.into(), role });
        }
        Ok(())
    }

    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
        let reader = &mut self.reader;
        if key == CS_RESPONSE as u64 {
            self.alerts.read(0, out, |o| reader.read(key as u32, o))
        } else {
            reader.read(key as u32, out)
        }
    }

    fn drain_alerts(&mut self, key: u64, out: &mut Vec<AlertRecord>) {
        if key == CS_RESPONSE as u64 {
            self.alerts.drain(0, out);
            self.alerts.drain(CYCLE_RULE_ALERT_ID as u32, out);
        }
    }

    fn flush_alerts(&mut self) {
        self.alerts.flush();
    }

    fn extra(&mut self, key: Option<u64>, out: &mut Option<ProbeExtra>) -> Result<(), ReadError> {
        if key.is_some() {
            // The family line has the counts, its series none.
            *out = None;
            return Ok(());
        }
        // The threads that left first (exit, exec; bpf/cycle_life.bpf.h),
        // then the live ones: a thread leaving between the two reads is
        // counted at the next read, never twice.
        // SAFETY: retired points to the mapped .bss of the live object;
        // the kernel adds to it.
        let gone = unsafe { std::ptr::read_volatile(self.retired) };
        let map = &self._skel.maps.cycle_threads;
        let (mut cycles, mut misses, mut overruns, mut unseen) = (gone.cycles, gone.misses, gone.overruns, gone.unseen);
        // The period of the thread with the most cycles, live or gone.
        let (mut period, mut most) = (gone.period_ns, gone.bin[0].count);
        let mut threads = 0;
        let mut rules = RuleCounts(gone.rules);
        std::mem::swap(&mut self.threads, &mut self.threads_before);
        self.threads.clear();
        for key in map.keys() {
            threads += 1;
            let Some(v) = map.lookup(&key, MapFlags::ANY).map_err(|e| ReadError::libbpf("cycle_threads", &e))? else {
                continue;
            };
            let mut st = latmon_cycle_stats::default();
            let want = size_of::<latmon_cycle_stats>();
            let layout = || ReadError::Layout { map: "cycle_threads".into(), got: v.len(), want };
            plain::copy_from_bytes(&mut st, v.get(..want).ok_or_else(layout)?).map_err(|_| layout())?;
            if let Ok(tid) = <[u8; 4]>::try_from(key.as_slice()) {
                let (period_ns, cycles, misses, overruns) = (st.period_ns, st.cycles, st.misses, st.overruns);
                let rules = st.rules.iter().sum();
                let tid = u32::from_ne_bytes(tid);
                self.threads.push(ThreadRead { tid, period_ns, cycles, misses, overruns, rules });
            }
            cycles += st.cycles;
            misses += st.misses;
            overruns += st.overruns;
            unseen += st.unseen;
            for (sum, n) in rules.0.iter_mut().zip(st.rules) {
                *sum += n;
            }
            // The period of the thread with the most cycles.
            if st.cycles >= most {
                most = st.cycles;
                period = st.period_ns;
            }
        }
        let c = CycleCounts {
            period_ns: period,
            cycles: cycles.saturating_sub(self.last.total_cycles),
            total_cycles: cycles,
            misses: misses.saturating_sub(self.last.total_misses),
            total_misses: misses,
            overruns: overruns.saturating_sub(self.last.total_overruns),
            total_overruns: overruns,
            total_unseen: unseen,
            rule_counts: RuleCounts::between(&self.last.total_rule_counts, &rules),
            total_rule_counts: rules,
            total_rule_records_lost: self.alerts.dropped(CYCLE_RULE_ALERT_ID as u32)?,
        };
        self.last = c.clone();
        ProbeExtra::cycle_in(out).counts = c;
        if threads > 0 {
            self.hint = None;
        } else if let Some(h) = self.hint.as_mut().filter(|h| h.since.elapsed() >= TimerfdHint::AFTER) {
            if h.give() {
                self.hint = None;
            } else {
                // Nothing named yet (the loop may start later): look again.
                h.since = std::time::Instant::now();
            }
        }
        Ok(())
    }
}

/// A thread enters the watched set at its first timer sleep; a loop that
/// waits in read() of a timerfd never makes one, so without
/// `timerfd=true` (the read program, not attached by default for its
/// cost) the probe would count nothing without saying why. While no
/// thread has entered, every `AFTER` the probe looks for a thread its
/// filter names in a process holding a timerfd (a /proc scan: once per
/// `AFTER` at most, off the BPF path), and says so once.
struct TimerfdHint {
    probe: String,
    comm: Option<String>,
    tid: Option<u32>,
    since: std::time::Instant,
}

impl TimerfdHint {
    /// A timer loop of 0.2 Hz or faster has slept by then.
    const AFTER: std::time::Duration = std::time::Duration::from_secs(5);
    /// Threads named in the hint, at most.
    const NAMED: usize = 4;

    /// Log the hint if a thread fits it; whether one did.
    fn give(&self) -> bool {
        let found = crate::procfs::timerfd_threads(self.comm.as_deref(), self.tid, Self::NAMED);
        if found.is_empty() {
            return false;
        }
        let mut who = String::new();
        for (i, t) in found.iter().enumerate() {
            if i > 0 {
                who.push_str(", ");
            }
            latmon_core::text::push_clean(&mut who, &t.comm);
            who.push_str(&format!("[{}/{}]", t.pid, t.tid));
        }
        // Another user's open files are not readable after the privilege
        // drop: the thread is named as one that may hold a timerfd.
        let holds = if found.iter().all(|t| t.timerfd == Some(true)) {
            "holds"
        } else {
            "holds or may hold (its open files are not readable after the privilege drop)"
        };
        log::warn!(
            "{}: no timer sleep of the watched thread in {} s, and {who} {holds} a timerfd: \
             a loop that waits in read() of a timerfd is followed with timerfd=true (docs/probes.md, cycle)",
            self.probe,
            Self::AFTER.as_secs()
        );
        true
    }
}

pub fn open(spec: &ProbeSpec, lock_join: bool) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    if !super::kernel_btf_present() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: format!("{}; cycle needs tp_btf", super::no_btf_reason()),
        });
    }
    if !super::features::percpu_lookup() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: "cycle needs bpf_map_lookup_percpu_elem (kernel 5.19)".into(),
        });
    }
    let ringbuf = want_ringbuf();
    let ((skel, links), mech) = ladder(&probe, &spec.ladder(), |_| load(spec, ringbuf, lock_join))?;
    super::lock_cycle::cycle_is_loaded();
    let read_err = |why| ProbeError::Read { probe: probe.clone(), why };
    let reader = PerCpuHist::new(&skel.maps.cycle_hist).map_err(read_err)?;
    let m = &skel.maps;
    let maps = AlertMaps { drops: &m.alert_drops, ring: &m.alerts, perf: &m.alerts_perf };
    let alerts = Alerts::new(maps, true, ringbuf, None, decode_alert_cycle).map_err(read_err)?;
    let following_timerfd =
        matches!(spec.kind, ProbeKind::Cycle { timerfd: true, .. } | ProbeKind::Cycle { auto: true, .. });
    let auto = matches!(spec.kind, ProbeKind::Cycle { auto: true, .. }).then(AutoWatch::default);
    let hint = (!following_timerfd).then(|| TimerfdHint {
        probe: probe.clone(),
        comm: spec.comm.clone(),
        tid: spec.pid,
        since: std::time::Instant::now(),
    });
    let retired = skel.maps.bss_data.as_deref().map(|b| std::ptr::addr_of!(b.cycle_retired)).ok_or_else(|| {
        ProbeError::Read { probe: probe.clone(), why: ReadError::Layout { map: ".bss".into(), got: 0, want: 1 } }
    })?;
    let c = Cycles {
        alerts,
        reader,
        last: CycleCounts::default(),
        hint,
        retired,
        threads: Vec::with_capacity(crate::bpf::limits::CYCLE_THREADS),
        threads_before: Vec::with_capacity(crate::bpf::limits::CYCLE_THREADS),
        auto,
        _links: links,
        _skel: skel,
    };
    let mode = format!(
        "thread-hash, records via {}{}{}",
        if ringbuf { "ringbuf" } else { "perf buffer" },
        match &spec.kind {
            ProbeKind::Cycle { period: Some(p), .. } =>
                format!(", period {}", latmon_core::text::fmt_ns(p.as_nanos() as u64)),
            ProbeKind::Cycle { auto: true, .. } => ", the periodic RT loops found, each its period".into(),
            _ => ", period detected".into(),
        },
        if lock_join { ", lock waits from the lock probe" } else { "" }
    );
    let info = ProbeInfo {
        name: probe,
        kind: spec.kind.family(),
        attach: mech,
        mode,
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    Ok(Box::new(Family::new(info, Box::new(c))))
}

fn nanos(d: Option<std::time::Duration>) -> u64 {
    d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn load(spec: &ProbeSpec, ringbuf: bool, lock_join: bool) -> Result<(Owned<CycleSkel<'static>>, Vec<Link>), LoadError> {
    let (period, deadline, timerfd, auto) = match &spec.kind {
        ProbeKind::Cycle { period, deadline, timerfd, auto } => (nanos(*period), nanos(*deadline), *timerfd, *auto),
        _ => (0, 0, false, false),
    };
    let nr = |name: &str| super::sysnames::number(name).map_or(-1, |n| n as i32);
    let mut wanted: Vec<&str> = PROGRAMS.to_vec();
    wanted.push(NANOSLEEP);
    if timerfd {
        wanted.push(TIMERFD_READ);
    }
    // cycle,auto loads cycle_read and attaches it later, for a watched
    // timerfd loop only (Cycles::timerfd_read).
    let mut loaded = wanted.clone();
    if auto && !timerfd {
        loaded.push(TIMERFD_READ);
    }
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open =
            CycleSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        ro.cfg.period_ns = period;
        ro.cfg.deadline_ns = if deadline > 0 { deadline } else { period };
        ro.cfg.threshold_ns = threshold_ns(spec);
        ro.cfg.filter_tid = spec.pid.unwrap_or(0);
        #[cfg(feature = "test-hooks")]
        {
            ro.cfg.mutate = match std::env::var(MUTATE_ENV).as_deref() {
                Ok("1") => 1,
                Ok("rules") => 2,
                _ => 0,
            };
        }
        ro.cfg.timerfd = u32::from(timerfd);
        ro.cfg.auto_watch = u32::from(auto);
        ro.cfg.lock_join = u32::from(lock_join);
        set_comm(&mut ro.cfg.filter_comm, spec.comm.as_deref());
        ro.cfg.nr_futex = nr("futex");
        ro.cfg.nr_futex_waitv = nr("futex_waitv");
        ro.cfg.nr_nanosleep = nr("nanosleep");
        ro.cfg.nr_clock_nanosleep = nr("clock_nanosleep");
        ro.cfg.common = super::common::common_config(ringbuf, true, false);
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        super::lock_cycle::share(&mut open.maps.lock_cycle)?;
        super::autoload_only(open.open_object_mut(), &loaded);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let links = attach_in_order(skel.object(), &wanted)?;
    Ok((skel, links))
}

/// The record of a miss, overrun or slow response (struct
/// latmon_alert_cycle): the alert, its anatomy and its cycle half.
pub(crate) fn decode_alert_cycle(data: &[u8], ids: usize) -> Option<(usize, AlertRecord)> {
    let (id, mut rec) = decode_alert(data, ids)?;
    let at = super::alerts::ALERT_RECORD_BYTES;
    let mut anat = latmon_anatomy::default();
    plain::copy_from_bytes(&mut anat, data.get(at..at + super::alerts::ANATOMY_BYTES)?).ok()?;
    let at = at + super::alerts::ANATOMY_BYTES;
    let mut c = latmon_cycle_record::default();
    plain::copy_from_bytes(&mut c, data.get(at..at + size_of::<latmon_cycle_record>())?).ok()?;
    let at = at + size_of::<latmon_cycle_record>();
    let mut lock = latmon_lock_record::default();
    plain::copy_from_bytes(&mut lock, data.get(at..at + size_of::<latmon_lock_record>())?).ok()?;
    let sys = |nr: i32| u32::try_from(nr).ok().and_then(super::sysnames::name).unwrap_or("").to_string();
    if c.event as usize == CYCLE_RULE {
        let rule = Rule::from_code(c.rule)?;
        let waker = (c.rule as usize == RULE_WOKEN_BY_LOWER).then(|| Waker {
            comm: comm_text(&c.waker_comm),
            pid: c.waker_pid,
            tid: c.waker_tid,
            policy: Policy::from_code(c.waker_policy),
            prio: c.waker_prio,
        });
        rec.cycle = Some(CycleMark {
            event: CycleEvent::Rule,
            release_ns: c.release_ns,
            deadline_ns: 0,
            done_ns: None,
            doing: None,
            migrations: 0,
            rule: Some(RuleMark { rule, syscall: sys(c.rule_syscall), waker }),
        });
        return Some((id, rec));
    }
    let event = match c.event as usize {
        CYCLE_MISS => CycleEvent::Miss,
        CYCLE_OVERRUN => CycleEvent::Overrun,
        _ => CycleEvent::Response,
    };
    let doing = match c.doing as usize {
        _ if event != CycleEvent::Overrun => None,
        CYCLE_DOING_RUNNING => Some(Doing::Running),
        CYCLE_DOING_RUNNABLE => Some(Doing::Runnable { comm: comm_text(&c.doing_comm), pid: c.doing_pid }),
        CYCLE_DOING_BLOCKED => {
            Some(Doing::Blocked { on: BlockedOn::from_code(c.doing_on), syscall: sys(c.doing_syscall) })
        }
        _ => None,
    };
    rec.cycle = Some(CycleMark {
        event,
        release_ns: c.release_ns,
        deadline_ns: c.deadline_ns,
        done_ns: (event != CycleEvent::Overrun).then_some(c.done_ns),
        doing,
        migrations: c.exec.migrations,
        rule: None,
    });
    // An overrun is unfinished: its parts are not known yet.
    if event != CycleEvent::Overrun {
        let mut parts = Vec::with_capacity(ANAT_TASKS + ANAT_IRQS + SOFTIRQ_VECS + 8);
        super::alerts::anatomy_parts(&anat, &mut parts);
        // The release -> run gap is the timer's only when the kernel
        // says nothing else made it (bpf/latmon.h LATMON_CYCLE_LATE_*).
        let late = match c.late as usize {
            CYCLE_LATE_STOPPED => Some(CauseKind::Stopped),
            CYCLE_LATE_BACKLOG => Some(CauseKind::Backlog),
            _ => None,
        };
        if let Some(kind) = late {
            for p in parts.iter_mut().filter(|p| p.kind == CauseKind::TimerIrqDelay) {
                p.kind = kind.clone();
            }
        }
        parts.push(Cause { kind: CauseKind::Running, ns: c.exec.running_ns });
        for (k, b) in c.exec.blocked.iter().enumerate() {
            let on = BlockedOn::from_code(k as u32);
            let mut ns = b.ns;
            if on == BlockedOn::Futex {
                ns -= lock_parts(&lock, ns, &mut parts);
            }
            if ns > 0 {
                parts.push(Cause { kind: CauseKind::Blocked { on, syscall: sys(b.syscall) }, ns });
            }
        }
        let count = u32::try_from(c.exec.fault_count).unwrap_or(u32::MAX);
        parts.push(Cause { kind: CauseKind::PageFaults { count }, ns: c.exec.fault_ns });
        rec.anatomy = Some(Anatomy::from_parts(rec.latency_ns, anat.cpu_woken, anat.cpu_ran, parts));
    }
    Some((id, rec))
}

/// The lock wait inside a cycle (the lock probe's, bpf/lock_cycle.bpf.h)
/// out of the cycle's `futex_ns` blocked on futexes: the inversion that
/// held its owner off, then the owner's own time, each at most what is
/// left of `futex_ns` (the wait may have begun before the loop blocked).
/// Returns the ns carved; the rest stays `blocked futex`.
fn lock_parts(lock: &latmon_lock_record, futex_ns: u64, parts: &mut Vec<Cause>) -> u64 {
    let Some(w) = super::lock_cycle::WaitOwner::of(lock) else { return 0 };
    let inversion = w.inversion_ns.min(futex_ns);
    let owner = lock.owner_run_ns.min(futex_ns - inversion);
    if inversion > 0 {
        parts.push(Cause { ns: inversion, ..w.inversion() });
    }
    // Zero too: the owner is named whenever the wait is known.
    parts.push(Cause { kind: CauseKind::Owner { owner: w.owner }, ns: owner });
    inversion + owner
}

fn comm_text(comm: &[i8]) -> String {
    let bytes: Vec<u8> = comm.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_record_decodes_with_parts_that_sum_to_its_latency() {
        let mut r = latmon_alert_cycle::default();
        r.alert.latency_ns = 1_620_000;
        r.alert.tid = 7;
        r.anat.timer_irq_delay_ns = 5_000;
        r.anat.task[0].ns = 100_000;
        r.anat.task[0].pid = 99;
        r.cycle.event = CYCLE_MISS as u32;
        r.cycle.release_ns = 1_000_000;
        r.cycle.deadline_ns = 2_000_000;
        r.cycle.done_ns = 2_620_000;
        r.cycle.exec.running_ns = 1_500_000;
        r.cycle.exec.fault_count = 12;
        r.cycle.exec.blocked[1].ns = 10_000;
        r.cycle.exec.blocked[1].syscall = -1;
        // SAFETY: a plain struct viewed as bytes.
        let bytes = unsafe { plain::as_bytes(&r) };
        let (_, rec) = decode_alert_cycle(bytes, 1).unwrap();
        let a = rec.anatomy.unwrap();
        assert!(a.sums_to(1_620_000), "{a:?}");
        assert_eq!(a.causes[0], Cause { kind: CauseKind::Running, ns: 1_500_000 });
        assert!(a.causes.iter().any(|c| c.kind == CauseKind::PageFaults { count: 12 }));
        assert!(a.causes.iter().any(|c| matches!(&c.kind, CauseKind::Blocked { on: BlockedOn::Io, .. })));
        let m = rec.cycle.unwrap();
        assert_eq!((m.event, m.done_ns, m.deadline_ns), (CycleEvent::Miss, Some(2_620_000), 2_000_000));
        // A short record is refused, not a panic.
        assert!(decode_alert_cycle(&bytes[..bytes.len() - 1], 1).is_none());
    }

    /// The release -> run gap is named by what the kernel says made it:
    /// a stop or a backlog, not `timer_irq_delay` (issue 40 item 8).
    #[test]
    fn a_late_release_gap_is_named_stopped_or_backlog() {
        for (late, kind) in [(CYCLE_LATE_STOPPED, CauseKind::Stopped), (CYCLE_LATE_BACKLOG, CauseKind::Backlog)] {
            let mut r = latmon_alert_cycle::default();
            r.alert.latency_ns = 5_001_000_000;
            r.anat.timer_irq_delay_ns = 5_000_000_000;
            r.cycle.event = CYCLE_MISS as u32;
            r.cycle.late = late as u32;
            r.cycle.exec.running_ns = 1_000_000;
            // SAFETY: a plain struct viewed as bytes.
            let bytes = unsafe { plain::as_bytes(&r) };
            let a = decode_alert_cycle(bytes, 1).unwrap().1.anatomy.unwrap();
            assert!(a.sums_to(5_001_000_000), "{a:?}");
            assert!(a.causes.iter().any(|c| c.kind == kind && c.ns == 5_000_000_000), "{a:?}");
            assert!(!a.causes.iter().any(|c| c.kind == CauseKind::TimerIrqDelay && c.ns > 0), "{a:?}");
        }
    }

    /// A miss whose loop blocked on a mutex the lock probe followed: the
    /// futex part becomes the inversion (its preempter's share), the
    /// owner's own time and the rest of the block; the parts still sum.
    #[test]
    fn a_miss_blocked_on_a_followed_lock_names_its_inversion_and_owner() {
        let mut r = latmon_alert_cycle::default();
        r.alert.latency_ns = 2_400_000;
        r.cycle.event = CYCLE_MISS as u32;
        r.cycle.release_ns = 1_000_000;
        r.cycle.exec.running_ns = 100_000;
        r.cycle.exec.blocked[0].ns = 2_300_000;
        r.cycle.exec.blocked[0].syscall = -1;
        r.lock.owner_from = crate::bpf::limits::LOCK_OWNER_GLIBC as u32;
        (r.lock.owner_tid, r.lock.owner_tgid, r.lock.owner_policy, r.lock.owner_prio) = (812, 800, 1, 10);
        r.lock.owner_comm[..5].copy_from_slice(&[b'c' as i8, b'f' as i8, b'l' as i8, b'o' as i8, b'w' as i8]);
        r.lock.owner_run_ns = 200_000;
        r.lock.pre[0] = crate::bpf::shared::types::latmon_lock_task {
            pid: 813,
            policy: 1,
            prio: 50,
            ns: 2_000_000,
            inv_ns: 1_900_000,
            ..Default::default()
        };
        // SAFETY: a plain struct viewed as bytes.
        let (_, rec) = decode_alert_cycle(unsafe { plain::as_bytes(&r) }, 1).unwrap();
        let a = rec.anatomy.unwrap();
        assert!(a.sums_to(2_400_000), "{a:?}");
        let inv = a.causes.iter().find(|c| matches!(c.kind, CauseKind::Inversion { .. })).expect("inversion");
        let CauseKind::Inversion { owner, preempted_by } = &inv.kind else { unreachable!() };
        assert_eq!((inv.ns, owner.tid, owner.comm.as_str(), preempted_by[0].pid), (1_900_000, 812, "cflow", 813));
        assert!(a.causes.iter().any(|c| matches!(c.kind, CauseKind::Owner { .. }) && c.ns == 200_000), "{a:?}");
        let rest = a.causes.iter().find(|c| matches!(c.kind, CauseKind::Blocked { on: BlockedOn::Futex, .. }));
        assert_eq!(rest.map(|c| c.ns), Some(200_000), "{a:?}");
        // An inversion longer than the block is cut to it: the sum holds.
        r.cycle.exec.blocked[0].ns = 1_000_000;
        r.alert.latency_ns = 1_100_000;
        // SAFETY: as above.
        let (_, rec) = decode_alert_cycle(unsafe { plain::as_bytes(&r) }, 1).unwrap();
        let a = rec.anatomy.unwrap();
        assert!(a.sums_to(1_100_000), "{a:?}");
        assert_eq!(
            a.causes.iter().find(|c| matches!(c.kind, CauseKind::Inversion { .. })).map(|c| c.ns),
            Some(1_000_000)
        );
        assert!(!a.causes.iter().any(|c| matches!(c.kind, CauseKind::Blocked { .. })), "{a:?}");
    }

    #[test]
    fn a_rule_record_decodes_with_its_rule_syscall_and_waker() {
        let mut r = latmon_alert_cycle::default();
        r.alert.probe_id = CYCLE_RULE_ALERT_ID as u32;
        r.alert.tid = 7;
        r.cycle.event = CYCLE_RULE as u32;
        r.cycle.rule = RULE_WOKEN_BY_LOWER as u32;
        r.cycle.rule_syscall = super::super::sysnames::number("futex").map_or(-1, |n| n as i32);
        r.cycle.waker_tid = 9;
        r.cycle.waker_policy = 1;
        r.cycle.waker_prio = 10;
        r.cycle.waker_comm[..3].copy_from_slice(&[b'l' as i8, b'o' as i8, b'w' as i8]);
        // SAFETY: a plain struct viewed as bytes.
        let bytes = unsafe { plain::as_bytes(&r) };
        let (id, rec) = decode_alert_cycle(bytes, 2).unwrap();
        assert_eq!(id, CYCLE_RULE_ALERT_ID);
        assert!(rec.anatomy.is_none());
        let m = rec.cycle.unwrap();
        assert_eq!(m.event, CycleEvent::Rule);
        let rule = m.rule.unwrap();
        assert_eq!((rule.rule, rule.syscall.as_str()), (Rule::WokenByLower, "futex"));
        let w = rule.waker.unwrap();
        assert_eq!((w.comm.as_str(), w.tid, w.policy, w.prio), ("low", 9, Policy::Fifo, 10));
        // A rule this agent does not know is refused, not a panic.
        r.cycle.rule = 9;
        // SAFETY: as above.
        assert!(decode_alert_cycle(unsafe { plain::as_bytes(&r) }, 2).is_none());
    }
}
