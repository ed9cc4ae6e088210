// SPDX-License-Identifier: MIT
//! `runq`: run-queue latency (wakeup or preemption -> running), as
//! libbpf-tools' runqlat defines it. See bpf/runq.bpf.c for the designs.
//!
//! Attach ladder: tp_btf (task storage) -> raw_tp (pid hash), both of the
//! CO-RE build, -> tracepoint: the no-BTF build (pid hash), reading the
//! sched_wakeup(_new) and sched_switch records at the offsets their tracefs
//! format files give. Without kernel BTF only the last runs. Where creating
//! task storage under the rq lock is unsafe (PREEMPT_RT before the fix of
//! CVE-2024-58070, src/rtkernel.rs) tp_btf is refused: raw_tp runs.
//!
//! Anatomies (a threshold is set) on every rung: each loads its own
//! irq/softirq programs beside its sched ones (bpf/anatomy.bpf.h); the
//! no-BTF build reads prev's priority, the wakeup's target CPU, the IRQ
//! number and the softirq vector at the offsets tracefs gives too.

use std::any::Any;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use latmon_core::causes::CauseSummary;
use latmon_core::hist::Hist;
use latmon_core::ident::{Family, Mechanism};
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapMut, OpenObject};

use super::alerts::{decode_alert_anat, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts, DecodeAlert};
use super::common::LoadError;
use super::common::{
    ladder, ladder_for, libbpf_error, set_comm, set_tp_field, threshold_ns, tracefs_format, Owned, Probe, ProbeError,
};
use super::PerCpuHist;
use crate::bpf::runq::{RunqSkel, RunqSkelBuilder};
use crate::bpf::runq_nobtf::{RunqNobtfSkel, RunqNobtfSkelBuilder};
use crate::config::ProbeSpec;
use crate::tpformat::{COMM_SIZES, LONG_SIZES, PID_SIZES};

/// TASK_REPORT_MAX since 4.14, when sched_switch's print fmt does not say.
const DEFAULT_REPORT_MAX: u64 = 0x100;

/// The start-stamp store each attach mechanism uses (see bpf/runq.bpf.c).
fn mode(mech: Mechanism) -> String {
    match mech {
        Mechanism::TpBtf => "task-storage".into(),
        Mechanism::RawTp => "pid-hash".into(),
        _ => format!("pid-hash, {}", super::common::TP_LAYOUT),
    }
}

/// Does program `name` belong to mechanism `mech`? The anatomy's
/// programs only load when anatomies are accounted (`anatomy`).
fn wants(mech: Mechanism, name: &str, anatomy: bool) -> bool {
    (anatomy || !name.contains("_anat_"))
        && name.ends_with(match mech {
            Mechanism::TpBtf => "_btf",
            Mechanism::RawTp => "_raw",
            _ => "_tp",
        })
}

pub struct Runq {
    info: ProbeInfo,
    l: Loaded,
}

/// What a rung's load gives. Field order is drop order: the alert reader
/// stops and the links detach before the object goes away.
struct Loaded {
    /// Alert records of waits above the threshold (one is set).
    alerts: Alerts,
    reader: PerCpuHist,
    progs: Vec<RawFd>,
    _links: Vec<Link>,
    _skel: Box<dyn Any>,
}

/// The maps of a loaded object of either build.
struct Maps<'a> {
    hist: &'a MapMut<'a>,
    alerts: AlertMaps<'a>,
    /// `cause_tally` and `cause_epoch` (every build's: bpf/causes.bpf.h).
    causes: Option<(&'a MapMut<'a>, &'a MapMut<'a>)>,
}

/// A loaded object of either build (`maps` names its maps): its readers,
/// the alert reader when a threshold is set, and the attached programs of
/// `mech`.
fn loaded<S: Skel<'static> + 'static>(
    skel: Owned<S>,
    maps: fn(&S) -> Maps<'_>,
    spec: &ProbeSpec,
    ringbuf: bool,
    mech: Mechanism,
    anatomy: bool,
    decode: DecodeAlert,
) -> Result<Loaded, LoadError> {
    let m = maps(&skel);
    let reader = PerCpuHist::new(m.hist).map_err(LoadError::from)?;
    let mut alerts = Alerts::new(m.alerts, spec.threshold.is_some(), ringbuf, None, decode).map_err(LoadError::from)?;
    if let (true, Some((tally, epoch))) = (anatomy && super::alerts::causes_wanted(spec), m.causes) {
        alerts = alerts.with_causes(tally, epoch).map_err(LoadError::from)?;
    }
    let (progs, links) = attach_progs(skel.object(), mech, anatomy)?;
    Ok(Loaded { alerts, reader, progs, _links: links, _skel: Box::new(skel) })
}

pub fn open(spec: &ProbeSpec) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    let core = super::common::kernel_btf_present();
    let ringbuf = want_ringbuf();
    let storage = super::common::task_storage(&probe)?;
    let (l, mech) = ladder(&probe, &ladder_for(spec), |mech| match mech {
        Mechanism::Tracepoint => load_tp(spec, ringbuf),
        _ if !core => Err(super::common::needs_btf(Family::Runq)),
        // sched_wakeup runs under the rq lock: raw_tp's pid hash instead.
        Mechanism::TpBtf if !storage.safe => Err(super::common::task_storage_refused(&storage)),
        _ => load_core(spec, mech, ringbuf),
    })?;
    let mut mode = mode(mech);
    if !storage.safe && mech == Mechanism::RawTp {
        mode += &super::common::storage_rung_skipped(&probe, &storage, mech);
    }
    mode += &super::common::alert_mode(threshold_ns(spec), ringbuf);
    if super::alerts::anatomy_wanted(spec) {
        mode += ", anatomy";
    }
    Ok(Box::new(Runq {
        info: ProbeInfo {
            name: probe,
            kind: Family::Runq,
            attach: mech,
            mode,
            btf_mode: super::common::tp_family_build(mech),
            wait: Default::default(),
        },
        l,
    }))
}

/// Attach the loaded programs of `mech`; their fds and links.
fn attach_progs(obj: &libbpf_rs::Object, mech: Mechanism, anatomy: bool) -> Result<(Vec<RawFd>, Vec<Link>), LoadError> {
    let (mut fds, mut links) = (Vec::new(), Vec::new());
    for prog in obj.progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        if wants(mech, &name, anatomy) {
            fds.push(prog.as_fd().as_raw_fd());
            links.push(prog.attach().map_err(|e| libbpf_error(&format!("attach {name}"), &e))?);
        }
    }
    Ok((fds, links))
}

/// The maps of a loaded object of build `$skel` (named alike in both).
macro_rules! maps_of {
    ($skel:ident) => {{
        let maps: for<'a> fn(&'a $skel<'static>) -> Maps<'a> = |s| Maps {
            hist: &s.maps.runq_hist,
            alerts: AlertMaps { drops: &s.maps.alert_drops, ring: &s.maps.alerts, perf: &s.maps.alerts_perf },
            causes: Some((&s.maps.cause_tally, &s.maps.cause_epoch)),
        };
        maps
    }};
}

/// The knobs both builds' rodata name alike, filled from the spec. The
/// CO-RE and no-BTF skeletons are distinct generated types, which a
/// generic cannot name: one body, stamped per build.
macro_rules! set_knobs {
    ($ro:expr, $spec:expr, $ringbuf:expr, $anatomy:expr) => {{
        let ro = &mut *$ro;
        ro.cfg.threshold_ns = threshold_ns($spec);
        ro.cfg.filter_tgid = $spec.pid.unwrap_or(0);
        set_comm(&mut ro.cfg.filter_comm, $spec.comm.as_deref());
        ro.cfg.common =
            super::common::common_config($ringbuf, $anatomy, $anatomy && super::alerts::causes_wanted($spec));
    }};
}

fn load_core(spec: &ProbeSpec, mech: Mechanism, ringbuf: bool) -> Result<Loaded, LoadError> {
    let anatomy = super::alerts::anatomy_wanted(spec);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = RunqSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        set_knobs!(ro, spec, ringbuf, anatomy);
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(wants(mech, &name, anatomy));
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let maps = maps_of!(RunqSkel);
    loaded(skel, maps, spec, ringbuf, mech, anatomy, decode_alert_anat)
}

/// The no-BTF build: classic tracepoints, fields where tracefs says.
fn load_tp(spec: &ProbeSpec, ringbuf: bool) -> Result<Loaded, LoadError> {
    let fmt = |event: &str| tracefs_format("sched", event).map_err(LoadError::from);
    let (wakeup, wakeup_new, switch) = (fmt("sched_wakeup")?, fmt("sched_wakeup_new")?, fmt("sched_switch")?);
    let anatomy = super::alerts::anatomy_wanted(spec);
    // The anatomy's interrupt records, only read when it is accounted.
    let irq_events = if anatomy {
        let fmt = |event: &str| tracefs_format("irq", event).map_err(LoadError::from);
        Some([fmt("irq_handler_entry")?, fmt("irq_handler_exit")?, fmt("softirq_entry")?, fmt("softirq_exit")?])
    } else {
        None
    };
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<_, LoadError> {
        let mut open = RunqNobtfSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        set_knobs!(ro, spec, ringbuf, anatomy);
        if let Some([entry, exit, soft_entry, soft_exit]) = &irq_events {
            let a = [
                set_tp_field(&mut ro.wakeup_cpu, &wakeup, "target_cpu", PID_SIZES)?,
                set_tp_field(&mut ro.wakeup_new_cpu, &wakeup_new, "target_cpu", PID_SIZES)?,
                set_tp_field(&mut ro.switch_prev_prio, &switch, "prev_prio", PID_SIZES)?,
                set_tp_field(&mut ro.irq_entry_irq, entry, "irq", PID_SIZES)?,
                set_tp_field(&mut ro.irq_exit_irq, exit, "irq", PID_SIZES)?,
                set_tp_field(&mut ro.soft_entry_vec, soft_entry, "vec", PID_SIZES)?,
                set_tp_field(&mut ro.soft_exit_vec, soft_exit, "vec", PID_SIZES)?,
            ];
            log::info!(
                "runq: anatomy layout from tracefs: sched_wakeup target_cpu{}, sched_wakeup_new target_cpu{}, \
                 sched_switch prev_prio{}, irq_handler_entry irq{}, irq_handler_exit irq{}, softirq_entry vec{}, \
                 softirq_exit vec{}",
                a[0],
                a[1],
                a[2],
                a[3],
                a[4],
                a[5],
                a[6]
            );
        }
        set_tp_field(&mut ro.switch_next_comm, &switch, "next_comm", COMM_SIZES)?;
        let w = (
            set_tp_field(&mut ro.wakeup_pid, &wakeup, "pid", PID_SIZES)?,
            set_tp_field(&mut ro.wakeup_comm, &wakeup, "comm", COMM_SIZES)?,
        );
        set_tp_field(&mut ro.wakeup_new_pid, &wakeup_new, "pid", PID_SIZES)?;
        set_tp_field(&mut ro.wakeup_new_comm, &wakeup_new, "comm", COMM_SIZES)?;
        let sw = [
            set_tp_field(&mut ro.switch_prev_pid, &switch, "prev_pid", PID_SIZES)?,
            set_tp_field(&mut ro.switch_prev_comm, &switch, "prev_comm", COMM_SIZES)?,
            set_tp_field(&mut ro.switch_prev_state, &switch, "prev_state", LONG_SIZES)?,
            set_tp_field(&mut ro.switch_next_pid, &switch, "next_pid", PID_SIZES)?,
        ];
        ro.report_max = switch.sched_switch_report_max().unwrap_or_else(|| {
            log::warn!("runq: sched_switch's print fmt names no prev_state flags; taking TASK_REPORT_MAX = {DEFAULT_REPORT_MAX:#x}");
            DEFAULT_REPORT_MAX
        });
        log::info!(
            "runq: record layout from tracefs: sched_wakeup pid{} comm{}, sched_switch prev_pid{} prev_comm{} \
             prev_state{} next_pid{}, TASK_REPORT_MAX {:#x}",
            w.0,
            w.1,
            sw[0],
            sw[1],
            sw[2],
            sw[3],
            ro.report_max
        );
        // The pid= thread set only matters with a pid filter.
        if spec.pid.is_none() {
            open.maps.runq_tids.set_max_entries(1).map_err(|e| libbpf_error("runq_tids", &e))?;
        }
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(wants(Mechanism::Tracepoint, &name, anatomy));
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let maps = maps_of!(RunqNobtfSkel);
    loaded(skel, maps, spec, ringbuf, Mechanism::Tracepoint, anatomy, decode_alert_anat)
}

impl Probe for Runq {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn bpf_programs(&self) -> Vec<RawFd> {
        self.l.progs.clone()
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        let l = &mut self.l;
        l.alerts
            .read(0, out, |o| l.reader.read(0, o))
            .map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        self.l.alerts.drain(0, out);
    }

    fn causes(&mut self, out: &mut Option<CauseSummary>) -> Result<(), ProbeError> {
        self.l.alerts.causes(0, out).map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }

    fn flush_alerts(&mut self) {
        self.l.alerts.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_and_modes_per_rung() {
        use Mechanism::{RawTp, TpBtf, Tracepoint};
        assert!(wants(TpBtf, "runq_switch_btf", false) && !wants(TpBtf, "runq_switch_raw", true));
        assert!(wants(RawTp, "runq_wakeup_raw", true) && !wants(RawTp, "runq_wakeup_tp", true));
        assert!(wants(Tracepoint, "runq_wakeup_new_tp", false) && !wants(Tracepoint, "runq_wakeup_new_btf", false));
        assert!(wants(TpBtf, "runq_anat_irq_entry_btf", true) && !wants(TpBtf, "runq_anat_irq_entry_btf", false));
        assert!(wants(RawTp, "runq_anat_softirq_exit_raw", true) && !wants(RawTp, "runq_anat_softirq_exit_raw", false));
        assert!(wants(Tracepoint, "runq_anat_irq_exit_tp", true) && !wants(Tracepoint, "runq_anat_irq_exit_tp", false));
        assert!(!wants(RawTp, "runq_anat_irq_exit_btf", true) && !wants(Tracepoint, "runq_anat_irq_exit_raw", true));
        assert_eq!(mode(Tracepoint), "pid-hash, layout from tracefs format");
        assert_eq!(mode(TpBtf), "task-storage");
    }
}
