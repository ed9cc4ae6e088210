// SPDX-License-Identifier: MIT
//! `runq`: run-queue latency (wakeup or preemption -> running), as
//! libbpf-tools' runqlat defines it. See bpf/runq.bpf.c for the designs.
//!
//! Attach ladder: tp_btf (task storage) -> raw_tp (pid hash), both of the
//! CO-RE build, -> tracepoint: the no-BTF build (pid hash), reading the
//! sched_wakeup(_new) and sched_switch records at the offsets their tracefs
//! format files give. Without kernel BTF only the last runs.

use std::any::Any;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use super::alerts::{alert_feed, want_ringbuf, AlertFeed, PerCpuArray, ReadDrops};
use super::{
    ladder, ladder_for, libbpf_error, set_comm, set_tp_field, tracefs_format, Owned, PerCpuHist, Probe, ProbeError,
    ReadHist,
};
use crate::bpf::runq::{types, RunqSkelBuilder};
use crate::bpf::runq_nobtf::{types as nobtf_types, RunqNobtfSkelBuilder};
use crate::config::ProbeSpec;
use crate::hist::Hist;
use crate::ident::{Family, Mechanism};
use crate::summary::{AlertRecord, ProbeInfo};

mod core_types {
    use crate::bpf::runq::types;
    crate::probes::alerts::alert_types!(types);
    crate::probes::alerts::anatomy_types!(types);
}
mod nobtf_alert_types {
    use crate::bpf::runq_nobtf::types;
    crate::probes::alerts::alert_types!(types);
}
use crate::tpformat::{COMM_SIZES, LONG_SIZES, PID_SIZES};

/// TASK_REPORT_MAX since 4.14, when sched_switch's print fmt does not say.
const DEFAULT_REPORT_MAX: u64 = 0x100;

/// The start-stamp store each attach mechanism uses (see bpf/runq.bpf.c).
fn mode(mech: Mechanism) -> String {
    match mech {
        Mechanism::TpBtf => "task-storage".into(),
        Mechanism::RawTp => "pid-hash".into(),
        _ => format!("pid-hash, {}", super::TP_LAYOUT),
    }
}

/// Does program `name` belong to mechanism `mech`? The anatomy's
/// programs (tp_btf) only load when anatomies are accounted (`anatomy`).
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
    alerts: Option<AlertFeed>,
    alert_drops: Box<dyn ReadDrops>,
    reader: Box<dyn ReadHist>,
    progs: Vec<RawFd>,
    _links: Vec<Link>,
    _skel: Box<dyn Any>,
}

/// A loaded object of either build (`types`: that build's generated
/// types): its readers, the alert reader when a threshold is set, and the
/// attached programs of `mech`.
macro_rules! loaded {
    ($skel:expr, $spec:expr, $ringbuf:expr, $types:ident, $mech:expr, $anatomy:expr, $decode:expr) => {{
        let skel = $skel;
        let reader = PerCpuHist::<$types::latmon_hist>::new(&skel.maps.runq_hist)?;
        let alert_drops = PerCpuArray::<$types::latmon_alert_drops>::new(&skel.maps.alert_drops)?;
        let alerts = alert_feed!(skel, $spec, $ringbuf, $types, 1, $decode)?;
        let (progs, links) = attach_progs(skel.object(), $mech, $anatomy)?;
        Ok(Loaded {
            alerts,
            alert_drops: Box::new(alert_drops),
            reader: Box::new(reader),
            progs,
            _links: links,
            _skel: Box::new(skel),
        })
    }};
}

pub fn open(spec: &ProbeSpec) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    let core = super::kernel_btf_present();
    let ringbuf = want_ringbuf();
    let (l, mech) = ladder(&probe, &ladder_for(spec), |mech| match mech {
        Mechanism::Tracepoint => load_tp(spec, ringbuf),
        _ if !core => Err(super::needs_btf(Family::Runq)),
        _ => load_core(spec, mech, ringbuf),
    })?;
    let mut mode = mode(mech);
    if let Some(thr) = spec.threshold {
        let via = if ringbuf { "ringbuf" } else { "perf buffer" };
        mode += &format!(", alerts above {} via {via}", crate::summary::fmt_ns(thr.as_nanos() as u64));
        if mech == Mechanism::TpBtf && super::alerts::anatomy_wanted(spec) {
            mode += ", anatomy";
        }
    }
    Ok(Box::new(Runq {
        info: ProbeInfo { name: probe, kind: Family::Runq, attach: mech, mode, btf_mode: super::tp_family_build(mech) },
        l,
    }))
}

/// Attach the loaded programs of `mech`; their fds and links.
fn attach_progs(obj: &libbpf_rs::Object, mech: Mechanism, anatomy: bool) -> Result<(Vec<RawFd>, Vec<Link>), String> {
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

fn threshold_ns(spec: &ProbeSpec) -> u64 {
    spec.threshold.map_or(0, |t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
}

fn load_core(spec: &ProbeSpec, mech: Mechanism, ringbuf: bool) -> Result<Loaded, String> {
    // Anatomies need tp_btf (trusted task pointers, task storage).
    let anatomy = mech == Mechanism::TpBtf && super::alerts::anatomy_wanted(spec);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open =
            RunqSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or("no rodata")?;
        ro.filter_tgid = spec.pid.unwrap_or(0);
        set_comm(&mut ro.filter_comm, spec.comm.as_deref());
        ro.threshold_ns = threshold_ns(spec);
        ro.use_ringbuf = ringbuf;
        ro.anatomy = anatomy;
        crate::probes::alerts::keep_alert_buffer!(open, ringbuf)?;
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(wants(mech, &name, anatomy));
        }
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    loaded!(
        skel,
        spec,
        ringbuf,
        types,
        mech,
        anatomy,
        super::alerts::decode_alert_anat::<types::latmon_alert, types::latmon_anatomy>
    )
}

/// The no-BTF build: classic tracepoints, fields where tracefs says.
fn load_tp(spec: &ProbeSpec, ringbuf: bool) -> Result<Loaded, String> {
    let fmt = |event: &str| tracefs_format("sched", event).map_err(|e| e.to_string());
    let (wakeup, wakeup_new, switch) = (fmt("sched_wakeup")?, fmt("sched_wakeup_new")?, fmt("sched_switch")?);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<_, String> {
        let mut open = RunqNobtfSkelBuilder::default()
            .open_opts(super::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or("no rodata")?;
        ro.filter_tgid = spec.pid.unwrap_or(0);
        set_comm(&mut ro.filter_comm, spec.comm.as_deref());
        ro.threshold_ns = threshold_ns(spec);
        ro.use_ringbuf = ringbuf;
        set_tp_field!(ro.switch_next_comm, &switch, "next_comm", COMM_SIZES);
        let w = (
            set_tp_field!(ro.wakeup_pid, &wakeup, "pid", PID_SIZES),
            set_tp_field!(ro.wakeup_comm, &wakeup, "comm", COMM_SIZES),
        );
        set_tp_field!(ro.wakeup_new_pid, &wakeup_new, "pid", PID_SIZES);
        set_tp_field!(ro.wakeup_new_comm, &wakeup_new, "comm", COMM_SIZES);
        let sw = [
            set_tp_field!(ro.switch_prev_pid, &switch, "prev_pid", PID_SIZES),
            set_tp_field!(ro.switch_prev_comm, &switch, "prev_comm", COMM_SIZES),
            set_tp_field!(ro.switch_prev_state, &switch, "prev_state", LONG_SIZES),
            set_tp_field!(ro.switch_next_pid, &switch, "next_pid", PID_SIZES),
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
        crate::probes::alerts::keep_alert_buffer!(open, ringbuf)?;
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    loaded!(
        skel,
        spec,
        ringbuf,
        nobtf_types,
        Mechanism::Tracepoint,
        false,
        super::alerts::decode_alert::<nobtf_types::latmon_alert>
    )
}

impl Probe for Runq {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn bpf_programs(&self) -> Vec<RawFd> {
        self.l.progs.clone()
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        let err = |why| ProbeError::Read { probe: self.info.name.clone(), why };
        // Records refused are counted after their event (BPF counts the
        // alert, then sends or drops the record): reading the drops first
        // keeps every counted drop's event in the histogram read after.
        let mut dropped = self.l.alert_drops.total(0).map_err(err)?;
        if let Some(feed) = &self.l.alerts {
            dropped += feed.queue_dropped(0);
        }
        self.l.reader.read(0, out).map_err(err)?;
        out.alerts_dropped = dropped;
        Ok(())
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        if let Some(feed) = &self.l.alerts {
            feed.drain(0, out);
        }
    }

    fn flush_alerts(&mut self) {
        if let Some(feed) = &self.l.alerts {
            feed.flush();
        }
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
        assert_eq!(mode(Tracepoint), "pid-hash, layout from tracefs format");
        assert_eq!(mode(TpBtf), "task-storage");
    }
}
