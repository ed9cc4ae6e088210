// SPDX-License-Identifier: MIT
//! `syscall[:NAME]`: per-syscall latency, sys_enter -> sys_exit of a task
//! (bpf/syscall.bpf.c). `syscall` reports the family line (all syscalls
//! the filter admits) plus a series per syscall seen (`syscall:read`);
//! `syscall:NAME` measures that one syscall only.
//!
//! Attach ladder: tp_btf -> raw_tp (CO-RE build) -> tracepoint: the no-BTF
//! build, sys_enter's `id` at the offset its tracefs format gives. Without
//! kernel BTF only the last runs. Where creating task storage under the
//! rq lock is unsafe (PREEMPT_RT before the fix of CVE-2024-58070,
//! src/rtkernel.rs) tp_btf is refused: raw_tp runs.
//!
//! `threshold=`: a syscall slower than it becomes an alert record about the
//! task that made it (every build; ring buffer or perf buffer), named after
//! the syscall's series.

use std::any::Any;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

use latmon_core::hist::Hist;
use latmon_core::ident::{self, Mechanism};
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapMut, OpenObject};

use super::alerts::{decode_alert, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts};
use super::common::LoadError;
use super::common::{
    attach_in_order, ladder, ladder_for, libbpf_error, set_comm, set_tp_field, threshold_ns, tracefs_format, Owned,
    Probe, ProbeError,
};
use super::series::{Family, Role, Slot, Source};
use super::PerCpuHist;
use super::ReadError;
use crate::bpf::limits::{SYSCALL_FUTEX_WAIT, SYSCALL_IDS, SYSCALL_SLOTS};
use crate::bpf::syscall::{SyscallSkel, SyscallSkelBuilder};
use crate::bpf::syscall_nobtf::{SyscallNobtfSkel, SyscallNobtfSkelBuilder};
use crate::config::ProbeSpec;
use crate::tpformat::LONG_SIZES;

use super::sysnames::{entries, name, number, TABLE};

/// The series label of futex's wait ops (bpf/syscall.bpf.c counts them
/// under `SYSCALL_FUTEX_WAIT`).
pub const FUTEX_WAIT_LABEL: &str = "futex(wait)";
// The pseudo id indexes `quiet_id` and `sc_slot_of` like a syscall's.
const _: () = assert!(SYSCALL_FUTEX_WAIT < SYSCALL_IDS);

/// Calls whose purpose is to wait: for time, for a peer, for a signal,
/// for a child. Their latency is the caller's timeout or its peer's pace,
/// not the system's service time (docs/probes.md, "Waits", says why each
/// is here). Names of every architecture latmon builds for; the `_time64`
/// twins are 32-bit ARM's. A call that blocks on the way to doing work
/// (read, write, fsync, a PI futex lock, io_getevents) is not here: its
/// time is latency, however long it sleeps.
pub const WAIT_CALLS: &[&str] = &[
    "nanosleep",
    "clock_nanosleep",
    "clock_nanosleep_time64",
    "poll",
    "ppoll",
    "ppoll_time64",
    "select",
    "_newselect",
    "pselect6",
    "pselect6_time64",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "rt_sigtimedwait",
    "rt_sigtimedwait_time64",
    "rt_sigsuspend",
    "sigsuspend",
    "pause",
    "wait4",
    "waitid",
    FUTEX_WAIT_LABEL,
    "futex_wait",
    "futex_waitv",
    "accept",
    "accept4",
    "msgrcv",
    "mq_timedreceive",
    "mq_timedreceive_time64",
];

/// Whether the series `label` is a wait (see [`WAIT_CALLS`]).
pub fn is_wait(label: &str) -> bool {
    WAIT_CALLS.contains(&label)
}

/// The series label of syscall `nr`: its name, or the number if unknown.
fn label(nr: u32) -> String {
    if nr as usize == SYSCALL_FUTEX_WAIT {
        return FUTEX_WAIT_LABEL.to_string();
    }
    name(nr).map_or_else(|| nr.to_string(), str::to_string)
}

/// Ids whose calls wait: what `quiet_id` in the BPF object marks so they
/// do not alert.
fn wait_ids() -> impl Iterator<Item = usize> {
    entries(TABLE)
        .filter(|(_, n)| is_wait(n))
        .map(|(nr, _)| nr as usize)
        .chain([SYSCALL_FUTEX_WAIT])
        .filter(|&i| i < SYSCALL_IDS)
}

/// futex and futex_time64 on this architecture (-1: none).
fn futex_numbers() -> (i32, i32) {
    let nr = |n: &str| number(n).map_or(-1, |v| v as i32);
    (nr("futex"), nr("futex_time64"))
}

/// Programs per mechanism, in attach order: the switch hook that parks a
/// blocked task's stamp must run before any stamp exists; sys_exit before
/// sys_enter so no stamp waits for a missing exit program. The tid-hash
/// builds first hook sched_process_exit, which deletes an exiting task's
/// stamp (bpf/syscall.bpf.c: otherwise every exit leaves one behind).
fn programs(mech: Mechanism) -> &'static [&'static str] {
    match mech {
        Mechanism::TpBtf => &["sc_switch_btf", "sc_exit_btf", "sc_enter_btf"],
        Mechanism::RawTp => &["sc_task_exit_raw", "sc_switch_raw", "sc_exit_raw", "sc_enter_raw"],
        _ => &["sc_task_exit_tp", "sc_switch_tp", "sc_exit_tp", "sc_enter_tp"],
    }
}

fn mode(mech: Mechanism) -> String {
    match mech {
        Mechanism::TpBtf => "per-cpu stamp, task-storage park".into(),
        Mechanism::RawTp => "per-cpu stamp, tid-hash park".into(),
        _ => format!("per-cpu stamp, tid-hash park, {}", super::common::TP_LAYOUT),
    }
}

struct Syscalls {
    /// Alert records of syscalls above the threshold (one is set); ids
    /// are histogram slots.
    alerts: Alerts,
    reader: PerCpuHist,
    /// The object's .bss `sc_slot_id[SYSCALL_SLOTS]`, mapped; valid while
    /// `_skel` lives.
    slot_ids: *const u32,
    /// `syscall:NAME`: the one syscall is the family line, no series.
    single: bool,
    progs: Vec<RawFd>,
    // Field order is drop order: detach before the object goes away.
    _links: Vec<Link>,
    _skel: Box<dyn Any>,
}

impl Source for Syscalls {
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        self.progs.clone()
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
        let role = if self.single { Role::Family } else { Role::Part };
        out.push(Slot { key: 0, label: "overflow".into(), role });
        for slot in 1..SYSCALL_SLOTS {
            // SAFETY: bss points to the mapped .bss of the live object; the
            // kernel writes it concurrently, hence the volatile read.
            let id = unsafe { std::ptr::read_volatile(self.slot_ids.add(slot)) };
            if id != 0 {
                let label = label(id - 1);
                let role = if role == Role::Part && is_wait(&label) { Role::Wait } else { role };
                out.push(Slot { key: slot as u64, label, role });
            }
        }
        Ok(())
    }

    /// A slot's histogram with its alert records lost on the way (token
    /// bucket, full buffer, full queue).
    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
        let reader = &mut self.reader;
        self.alerts.read(key as u32, out, |o| reader.read(key as u32, o))
    }

    fn drain_alerts(&mut self, key: u64, out: &mut Vec<AlertRecord>) {
        self.alerts.drain(key as u32, out);
    }

    fn flush_alerts(&mut self) {
        self.alerts.flush();
    }
}

pub fn open(spec: &ProbeSpec, only: Option<&str>) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    let filter_id = match only {
        None => -1,
        Some(n) => match number(n) {
            Some(nr) if (nr as usize) < SYSCALL_IDS => nr as i32,
            Some(nr) => {
                return Err(ProbeError::Spec { probe, why: format!("syscall number {nr} is beyond {SYSCALL_IDS}") })
            }
            None => {
                return Err(ProbeError::Spec {
                    probe,
                    why: format!("no syscall named {n:?} on {}", std::env::consts::ARCH),
                })
            }
        },
    };
    let core = super::common::kernel_btf_present();
    let ringbuf = want_ringbuf();
    let storage = super::common::task_storage(&probe)?;
    let (l, mech) = ladder(&probe, &ladder_for(spec), |mech| match mech {
        Mechanism::Tracepoint => load_tp(spec, filter_id, ringbuf),
        _ if !core => Err(super::common::needs_btf(ident::Family::Syscall)),
        // tp_btf parks in task storage at sched_switch (rq lock held):
        // raw_tp's tid hash instead.
        Mechanism::TpBtf if !storage.safe => Err(super::common::task_storage_refused(&storage)),
        _ => load_core(spec, filter_id, mech, ringbuf),
    })?;
    let mut mode = mode(mech);
    if !storage.safe && mech == Mechanism::RawTp {
        mode += &super::common::storage_rung_skipped(&probe, &storage, mech);
    }
    mode += &super::common::alert_mode(threshold_ns(spec), ringbuf);
    let info = ProbeInfo {
        name: probe,
        kind: ident::Family::Syscall,
        attach: mech,
        mode,
        btf_mode: super::common::tp_family_build(mech),
        wait: Default::default(),
    };
    let source = Syscalls {
        alerts: l.alerts,
        reader: l.reader,
        slot_ids: l.slot_ids,
        single: only.is_some(),
        progs: l.progs,
        _links: l.links,
        _skel: l.skel,
    };
    Ok(Box::new(Family::new(info, Box::new(source))))
}

/// What a rung's load gives.
struct Loaded {
    alerts: Alerts,
    reader: PerCpuHist,
    slot_ids: *const u32,
    progs: Vec<RawFd>,
    links: Vec<Link>,
    skel: Box<dyn Any>,
}

/// The maps of a loaded object of either build, and its `sc_slot_id`.
struct Maps<'a> {
    hist: &'a MapMut<'a>,
    alerts: AlertMaps<'a>,
    slot_ids: Option<*const u32>,
}

/// A loaded object of either build (`maps` names its maps): its readers
/// and, when a threshold is set, the alert reader.
fn loaded<S: Skel<'static> + 'static>(
    skel: Owned<S>,
    maps: fn(&S) -> Maps<'_>,
    spec: &ProbeSpec,
    ringbuf: bool,
    links: Vec<Link>,
) -> Result<Loaded, LoadError> {
    let m = maps(&skel);
    let reader = PerCpuHist::new(m.hist).map_err(LoadError::from)?;
    let alerts =
        Alerts::new(m.alerts, spec.threshold.is_some(), ringbuf, None, decode_alert).map_err(LoadError::from)?;
    let slot_ids = m.slot_ids.ok_or_else(|| LoadError::Object("no .bss".into()))?;
    let progs = super::common::loaded_prog_fds(skel.object());
    Ok(Loaded { alerts, reader, slot_ids, progs, links, skel: Box::new(skel) })
}

/// Marks the waits that must not alert: all of them, unless the spec
/// says `waits=alert` or names one syscall (`syscall:ppoll` asks for it).
fn quiet_waits(quiet: &mut [u8; SYSCALL_IDS], spec: &ProbeSpec, filter_id: i32) {
    quiet.fill(0);
    if spec.alert_waits || filter_id >= 0 {
        return;
    }
    for i in wait_ids() {
        quiet[i] = 1;
    }
}

/// The knobs both builds' rodata name alike, filled from the spec. The
/// CO-RE and no-BTF skeletons are distinct generated types, which a
/// generic cannot name: one body, stamped per build.
macro_rules! set_knobs {
    ($ro:expr, $spec:expr, $filter_id:expr, $ringbuf:expr) => {{
        let ro = &mut *$ro;
        ro.cfg.filter_id = $filter_id;
        ro.cfg.filter_pid = $spec.pid.unwrap_or(0);
        set_comm(&mut ro.cfg.filter_comm, $spec.comm.as_deref());
        ro.cfg.threshold_ns = threshold_ns($spec);
        ro.cfg.common = super::common::common_config($ringbuf, false, false);
        quiet_waits(&mut ro.cfg.quiet_id, $spec, $filter_id);
    }};
}

/// The maps of a loaded object of build `$skel` (named alike in both).
macro_rules! maps_of {
    ($skel:ident) => {{
        let maps: for<'a> fn(&'a $skel<'static>) -> Maps<'a> = |s| Maps {
            hist: &s.maps.sc_hist,
            alerts: AlertMaps { drops: &s.maps.alert_drops, ring: &s.maps.alerts, perf: &s.maps.alerts_perf },
            slot_ids: s.maps.bss_data.as_deref().map(|b| b.sc_slot_id.as_ptr()),
        };
        maps
    }};
}

fn load_core(spec: &ProbeSpec, filter_id: i32, mech: Mechanism, ringbuf: bool) -> Result<Loaded, LoadError> {
    let wanted = programs(mech);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = SyscallSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        set_knobs!(ro, spec, filter_id, ringbuf);
        (ro.cfg.futex_nr, ro.cfg.futex_time64_nr) = futex_numbers();
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        super::common::autoload_only(open.open_object_mut(), wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let links = attach_in_order(skel.object(), wanted)?;
    loaded(skel, maps_of!(SyscallSkel), spec, ringbuf, links)
}

/// The no-BTF build: classic tracepoints, sys_enter's `id` where tracefs
/// says.
fn load_tp(spec: &ProbeSpec, filter_id: i32, ringbuf: bool) -> Result<Loaded, LoadError> {
    let enter = tracefs_format("raw_syscalls", "sys_enter").map_err(LoadError::from)?;
    let wanted = programs(Mechanism::Tracepoint);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<_, LoadError> {
        let mut open = SyscallNobtfSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        set_knobs!(ro, spec, filter_id, ringbuf);
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        let id = set_tp_field(&mut ro.enter_id, &enter, "id", LONG_SIZES)?;
        log::info!("syscall: record layout from tracefs: sys_enter id{id}");
        super::common::autoload_only(open.open_object_mut(), wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let links = attach_in_order(skel.object(), wanted)?;
    loaded(skel, maps_of!(SyscallNobtfSkel), spec, ringbuf, links)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_this_architecture() {
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(name(35), Some("nanosleep"));
            assert_eq!(name(110), Some("getppid"));
            assert_eq!(name(230), Some("clock_nanosleep"));
            assert_eq!(number("getppid"), Some(110));
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(name(101), Some("nanosleep"));
        assert_eq!(number("42"), Some(42));
        assert_eq!(number("no_such_call"), None);
        assert_eq!(name(100_000), None);
        assert_eq!(label(100_000), "100000");
    }

    #[test]
    fn waits_are_classified_by_purpose() {
        for w in ["nanosleep", "clock_nanosleep", "ppoll", "pselect6", "epoll_pwait2", "rt_sigtimedwait", "wait4"] {
            assert!(is_wait(w), "{w}");
        }
        assert!(is_wait(FUTEX_WAIT_LABEL));
        // Service time, however long it blocks: I/O, a PI lock, futex's
        // wakes and requeues.
        for w in ["read", "write", "fsync", "fdatasync", "futex", "futex_wake", "io_getevents", "ioctl", "getppid"] {
            assert!(!is_wait(w), "{w}");
        }
        assert_eq!(label(SYSCALL_FUTEX_WAIT as u32), FUTEX_WAIT_LABEL);
        // Every wait in this architecture's table is quiet, and nothing else.
        let quiet: Vec<usize> = wait_ids().collect();
        assert!(quiet.contains(&SYSCALL_FUTEX_WAIT));
        #[cfg(target_arch = "x86_64")]
        {
            assert!(
                quiet.contains(&35) && quiet.contains(&230) && !quiet.contains(&202),
                "nanosleep, clock_nanosleep; not futex"
            );
            assert_eq!(futex_numbers(), (202, -1));
        }
    }

    #[test]
    fn the_futex_wait_id_is_above_every_syscall_number() {
        for text in [
            include_str!("../../bpf/syscalls/x86_64.tbl"),
            include_str!("../../bpf/syscalls/aarch64.tbl"),
            include_str!("../../bpf/syscalls/arm.tbl"),
        ] {
            assert!(entries(text).all(|(n, _)| (n as usize) < SYSCALL_FUTEX_WAIT));
        }
    }

    #[test]
    fn every_table_parses_and_fits_the_slot_index() {
        for (arch, text) in [
            ("x86_64", include_str!("../../bpf/syscalls/x86_64.tbl")),
            ("aarch64", include_str!("../../bpf/syscalls/aarch64.tbl")),
            ("arm", include_str!("../../bpf/syscalls/arm.tbl")),
        ] {
            let all: Vec<_> = entries(text).collect();
            assert!(all.len() > 300, "{arch}: {} entries", all.len());
            assert!(all.iter().all(|&(n, s)| (n as usize) < SYSCALL_IDS && !s.is_empty()), "{arch}");
            assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "{arch}: sorted, one name per number");
            assert!(all.iter().any(|&(_, s)| s == "clock_nanosleep"), "{arch}");
        }
    }
}
