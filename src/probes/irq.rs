// SPDX-License-Identifier: MIT
//! `irq` and `softirq` (bpf/irq.bpf.c): hard interrupt handler durations per
//! IRQ number (`irq:36 virtio1-req.0`), the threaded path per IRQ where IRQ
//! threads exist (`irq:36 virtio1-req.0 thread`: hardirq entry -> thread
//! running, in two stages `... thread:hardirq`: hardirq entry -> the
//! thread's wakeup, and `... thread:wakeup`: wakeup -> running), and softirq
//! durations per vector (`softirq:NET_RX`).
//!
//! Attach ladder: tp_btf -> raw_tp (CO-RE build) -> tracepoint: the no-BTF
//! build, `irq` and `vec` at the offsets the tracefs formats give (no
//! threaded path). Without kernel BTF only the last runs.
//!
//! `threshold=`: handlers, threaded paths end to end and softirqs above it
//! become alert records (every build), named after their series.

use std::any::Any;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;

use latmon_core::hist::Hist;
use latmon_core::ident::Mechanism;
use latmon_core::summary::{AlertRecord, ProbeInfo};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, MapMut, OpenObject};

use super::alerts::{decode_alert, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts};
use super::common::LoadError;
use super::common::{
    attach_in_order, ladder, ladder_for, libbpf_error, set_tp_field, threshold_ns, tracefs_format, Owned, Probe,
    ProbeError,
};
use super::series::{Family as FamilyProbe, Role, Slot, Source};
use super::PerCpuHist;
use super::ReadError;
use crate::bpf::irq::{IrqSkel, IrqSkelBuilder};
use crate::bpf::irq_nobtf::{IrqNobtfSkel, IrqNobtfSkelBuilder};
use crate::bpf::limits::{IRQ_KIND_HANDLER, IRQ_KIND_THREAD, IRQ_KIND_THREAD_HARDIRQ, IRQ_KIND_THREAD_WAKEUP};
use crate::bpf::shared::types::latmon_irq_key;
use crate::config::ProbeSpec;
use crate::tpformat::PID_SIZES;

// SAFETY: a #[repr(C)] pair of u32s generated from latmon.h.
unsafe impl plain::Plain for latmon_irq_key {}
const _: () = assert!(std::mem::size_of::<latmon_irq_key>() == 8, "alert_id builds the key as two u32s");

/// The kernel's softirq vector names (`softirq_to_name`, stable since 4.5).
use latmon_core::anatomy::SOFTIRQ_NAMES;

/// Which half of bpf/irq.bpf.c a probe runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Irq,
    Softirq,
}

impl Family {
    /// The probe family this half measures.
    fn ident(self) -> latmon_core::ident::Family {
        match self {
            Family::Irq => latmon_core::ident::Family::Irq,
            Family::Softirq => latmon_core::ident::Family::Softirq,
        }
    }
}

/// Whether the `irq` probe attaches the threaded-path programs (they run on
/// every wakeup and context switch, so only where they can see something).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadPath {
    Off,
    /// When IRQ threads (`irq/N-name` kernel threads) exist at start.
    IfThreadsExist,
    /// Always (tests: proves the programs load and attach here).
    On,
}

/// Programs in attach order for a family, mechanism and thread path (its
/// stamps in a tid hash: `hash`). The switch program goes before the
/// waking program that creates stamps; with the hash, the exit program
/// that deletes them goes first.
fn programs(family: Family, mech: Mechanism, threads: bool, hash: bool) -> Vec<&'static str> {
    let btf = mech == Mechanism::TpBtf;
    match family {
        Family::Irq if btf && threads && hash => vec![
            "irq_thread_exit_btf",
            "irq_thread_switch_btf",
            "irq_thread_waking_btf",
            "irq_exit_btf",
            "irq_entry_btf",
        ],
        Family::Softirq if mech == Mechanism::Tracepoint => vec!["softirq_exit_tp", "softirq_entry_tp"],
        Family::Irq if mech == Mechanism::Tracepoint => vec!["irq_exit_tp", "irq_entry_tp"],
        Family::Softirq if btf => vec!["softirq_exit_btf", "softirq_entry_btf"],
        Family::Softirq => vec!["softirq_exit_raw", "softirq_entry_raw"],
        Family::Irq if btf && threads => {
            vec!["irq_thread_switch_btf", "irq_thread_waking_btf", "irq_exit_btf", "irq_entry_btf"]
        }
        Family::Irq if btf => vec!["irq_exit_btf", "irq_entry_btf"],
        Family::Irq => vec!["irq_exit_raw", "irq_entry_raw"],
    }
}

/// Are there IRQ threads (forced threading on PREEMPT_RT or `threadirqs`,
/// or drivers with threaded handlers)? Their comm is `irq/N-name`.
pub fn irq_threads_exist() -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with("irq/")))
}

struct Irqs {
    /// Alert records above the threshold (one is set). Ids: a softirq's
    /// vector, or what `irq_alert_id` gave an (irq, kind) pair.
    alerts: Alerts,
    /// irq_alert_id, and the ids found there so far (they never change).
    alert_ids: MapHandle,
    alert_id_of: HashMap<u64, u32>,
    family: Family,
    /// Reader of irq_hist (keyed by latmon_irq_key) or softirq_hist.
    reader: PerCpuHist,
    /// irq_hist, for its keys.
    irq_hist: MapHandle,
    /// The object's .bss `irq_lost`, mapped; valid while `_skel` lives.
    lost: *const u64,
    names: HashMap<u32, String>,
    progs: Vec<RawFd>,
    // Field order is drop order: detach before the object goes away.
    _links: Vec<Link>,
    _skel: Box<dyn Any>,
}

impl Irqs {
    fn irq_label(&mut self, irq: u32) -> String {
        if !self.names.contains_key(&irq) {
            // A new IRQ: reread the names (drivers come and go).
            self.names = crate::procfs::interrupt_names();
        }
        match self.names.get(&irq) {
            Some(n) => format!("{irq} {n}"),
            None => irq.to_string(),
        }
    }
}

fn irq_key(key: u64) -> latmon_irq_key {
    latmon_irq_key { irq: key as u32, kind: (key >> 32) as u32 }
}

/// A slot's histogram: softirq_hist by vector, irq_hist by (irq, kind).
fn read_hist(reader: &mut PerCpuHist, family: Family, key: u64, out: &mut Hist) -> Result<(), ReadError> {
    match family {
        Family::Softirq => reader.read(key as u32, out),
        Family::Irq => reader.read_key(&irq_key(key), out),
    }
}

impl Irqs {
    fn read_hist(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
        read_hist(&mut self.reader, self.family, key, out)
    }

    /// Whether a slot's alerts become records: softirqs, handlers and
    /// threaded paths end to end; the threaded path's stages only count.
    fn sends_records(&self, key: u64) -> bool {
        self.family == Family::Softirq || matches!(irq_key(key).kind as usize, IRQ_KIND_HANDLER | IRQ_KIND_THREAD)
    }

    /// The alert id of a slot that sends records, without a map lookup:
    /// softirq vectors always; a pair once `alert_id` found its id.
    fn known_alert_id(&self, key: u64) -> Option<u32> {
        match self.family {
            Family::Softirq => Some(key as u32),
            Family::Irq => self.alert_id_of.get(&key).copied(),
        }
    }

    /// The alert id of a slot that sends records, if it has one: an
    /// (irq, kind) pair once its first alert gave it one (a map lookup
    /// until then).
    fn alert_id(&mut self, key: u64) -> Option<u32> {
        if let Some(id) = self.known_alert_id(key) {
            return Some(id);
        }
        let k = irq_key(key);
        let mut bytes = [0u8; 8]; // struct latmon_irq_key: irq, kind
        bytes[..4].copy_from_slice(&k.irq.to_ne_bytes());
        bytes[4..].copy_from_slice(&k.kind.to_ne_bytes());
        let raw = self.alert_ids.lookup(&bytes, MapFlags::ANY).ok()??;
        let id = u32::from_ne_bytes(raw.get(..4)?.try_into().ok()?);
        self.alert_id_of.insert(key, id);
        Some(id)
    }
}

impl Source for Irqs {
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        self.progs.clone()
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
        if self.family == Family::Softirq {
            for (vec, name) in SOFTIRQ_NAMES.iter().enumerate() {
                out.push(Slot { key: vec as u64, label: (*name).into(), role: Role::Part });
            }
            return Ok(());
        }
        let keys: Vec<Vec<u8>> = self.irq_hist.keys().collect();
        for raw in keys {
            let mut k = latmon_irq_key::default();
            plain::copy_from_bytes(&mut k, &raw).map_err(|_| ReadError::Layout {
                map: "irq keys".into(),
                got: raw.len(),
                want: size_of_val(&k),
            })?;
            let base = self.irq_label(k.irq);
            let (label, role) = match k.kind as usize {
                IRQ_KIND_HANDLER => (base, Role::Part),
                IRQ_KIND_THREAD => (format!("{base} thread"), Role::Extra),
                // Stages of the threaded path, named by the event that
                // starts them (as chain's): hardirq entry -> the thread's
                // wakeup, wakeup -> the thread running.
                IRQ_KIND_THREAD_HARDIRQ => (format!("{base} thread:hardirq"), Role::Extra),
                IRQ_KIND_THREAD_WAKEUP => (format!("{base} thread:wakeup"), Role::Extra),
                _ => continue,
            };
            out.push(Slot { key: (k.kind as u64) << 32 | k.irq as u64, label, role });
        }
        Ok(())
    }

    /// A slot's histogram with its alert records lost on the way (token
    /// bucket, full buffer, full queue); a pair that alerted without
    /// getting an alert id (all taken) lost every record.
    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
        if !self.alerts.records() || !self.sends_records(key) {
            // No threshold, or a stage of the threaded path: no records.
            self.read_hist(key, out)?;
            out.alerts_dropped = 0;
            return Ok(());
        }
        if self.known_alert_id(key).is_none() {
            // A pair without an id yet: look one up only once it alerted
            // (every map syscall briefly blinds classic-tracepoint
            // programs on this CPU, see docs/probes.md).
            self.read_hist(key, out)?;
            if out.alerts == 0 {
                out.alerts_dropped = 0;
                return Ok(());
            }
            if self.alert_id(key).is_none() {
                // Every alert id was taken: none of its alerts sent a record.
                out.alerts_dropped = out.alerts;
                return Ok(());
            }
        }
        let id = self.known_alert_id(key).unwrap_or_default();
        let (reader, family) = (&mut self.reader, self.family);
        self.alerts.read(id, out, |o| read_hist(reader, family, key, o))
    }

    /// Records of pairs whose id `read` has seen (it runs before every
    /// drain: the agent refreshes families before draining them).
    fn drain_alerts(&mut self, key: u64, out: &mut Vec<AlertRecord>) {
        if !self.sends_records(key) {
            return;
        }
        if let Some(id) = self.known_alert_id(key) {
            self.alerts.drain(id, out);
        }
    }

    fn flush_alerts(&mut self) {
        self.alerts.flush();
    }

    fn lost(&self) -> u64 {
        // SAFETY: lost points into the mapped .bss of the live object.
        unsafe { std::ptr::read_volatile(self.lost) }
    }
}

pub fn open(spec: &ProbeSpec, family: Family, threads: ThreadPath) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    if spec.comm.is_some() || spec.pid.is_some() {
        return Err(ProbeError::Spec {
            probe,
            why: "interrupts belong to no task: comm= and pid= do not apply".into(),
        });
    }
    let core = super::common::kernel_btf_present();
    let threads = family == Family::Irq
        && core
        && match threads {
            ThreadPath::Off => false,
            ThreadPath::On => true,
            ThreadPath::IfThreadsExist => irq_threads_exist(),
        };
    let kind = family.ident();
    let ringbuf = want_ringbuf();
    // The thread path creates its stamps in sched_waking: where task
    // storage is unsafe there, in a tid hash.
    let storage = if threads { Some(super::common::task_storage(&probe)?) } else { None };
    let slot = storage.as_ref().map_or(0, super::common::task_slot);
    let (l, mech) = ladder(&probe, &ladder_for(spec), |mech| match mech {
        Mechanism::Tracepoint => load_tp(spec, family, ringbuf),
        _ if !core => Err(super::common::needs_btf(kind)),
        _ => load_core(spec, family, mech, threads, slot, ringbuf),
    })?;
    let mode = match family {
        Family::Irq if threads && mech == Mechanism::TpBtf => match &storage {
            Some(ts) if !ts.safe => {
                format!("per-cpu stamp, irq threads in {}", super::common::tid_hash_mode(&probe, ts))
            }
            _ => "per-cpu stamp, irq threads".to_string(),
        },
        _ if mech == Mechanism::Tracepoint => format!("per-cpu stamp, {}", super::common::TP_LAYOUT),
        _ => "per-cpu stamp".to_string(),
    } + &super::common::alert_mode(threshold_ns(spec), ringbuf);
    let info = ProbeInfo {
        name: probe,
        kind,
        attach: mech,
        mode,
        btf_mode: super::common::tp_family_build(mech),
        wait: Default::default(),
    };
    let source = Irqs {
        alerts: l.alerts,
        alert_ids: l.alert_ids,
        alert_id_of: HashMap::new(),
        family,
        reader: l.reader,
        irq_hist: l.irq_hist,
        lost: l.lost,
        names: HashMap::new(),
        progs: l.progs,
        _links: l.links,
        _skel: l.skel,
    };
    Ok(Box::new(FamilyProbe::new(info, Box::new(source))))
}

/// What a rung's load gives.
struct Loaded {
    alerts: Alerts,
    alert_ids: MapHandle,
    reader: PerCpuHist,
    irq_hist: MapHandle,
    lost: *const u64,
    progs: Vec<RawFd>,
    links: Vec<Link>,
    skel: Box<dyn Any>,
}

/// The maps of a loaded object of either build, and its `irq_lost`.
struct Maps<'a> {
    irq_hist: &'a MapMut<'a>,
    softirq_hist: &'a MapMut<'a>,
    alert_ids: &'a MapMut<'a>,
    alerts: AlertMaps<'a>,
    lost: Option<*const u64>,
}

/// Attach the `wanted` programs of a loaded object of either build
/// (`maps` names its maps) and gather its readers.
fn loaded<S: Skel<'static> + 'static>(
    skel: Owned<S>,
    maps: fn(&S) -> Maps<'_>,
    spec: &ProbeSpec,
    family: Family,
    wanted: &[&str],
    ringbuf: bool,
) -> Result<Loaded, LoadError> {
    let links = attach_in_order(skel.object(), wanted)?;
    let m = maps(&skel);
    let alerts =
        Alerts::new(m.alerts, spec.threshold.is_some(), ringbuf, None, decode_alert).map_err(LoadError::from)?;
    let alert_ids = MapHandle::try_from(m.alert_ids).map_err(|e| libbpf_error("irq_alert_id", &e))?;
    let reader = PerCpuHist::new(match family {
        Family::Irq => m.irq_hist,
        Family::Softirq => m.softirq_hist,
    })
    .map_err(LoadError::from)?;
    let irq_hist = MapHandle::try_from(m.irq_hist).map_err(|e| libbpf_error("irq_hist", &e))?;
    let lost = m.lost.ok_or_else(|| LoadError::Object("no .bss".into()))?;
    let progs = super::common::loaded_prog_fds(skel.object());
    Ok(Loaded { alerts, alert_ids, reader, irq_hist, lost, progs, links, skel: Box::new(skel) })
}

/// The maps of a loaded object of build `$skel` (named alike in both).
/// The CO-RE and no-BTF skeletons are distinct generated types, which a
/// generic cannot name: one body, stamped per build.
macro_rules! maps_of {
    ($skel:ident) => {{
        let maps: for<'a> fn(&'a $skel<'static>) -> Maps<'a> = |s| Maps {
            irq_hist: &s.maps.irq_hist,
            softirq_hist: &s.maps.softirq_hist,
            alert_ids: &s.maps.irq_alert_id,
            alerts: AlertMaps { drops: &s.maps.alert_drops, ring: &s.maps.alerts, perf: &s.maps.alerts_perf },
            lost: s.maps.bss_data.as_deref().map(|b| std::ptr::addr_of!(b.irq_lost)),
        };
        maps
    }};
}

/// `slot`: where the thread path's stamps live (cfg.common.task_slot).
fn load_core(
    spec: &ProbeSpec,
    family: Family,
    mech: Mechanism,
    threads: bool,
    slot: u32,
    ringbuf: bool,
) -> Result<Loaded, LoadError> {
    let hash = slot != crate::bpf::limits::TASK_SLOT_STORAGE as u32;
    let wanted = programs(family, mech, threads, hash);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = IrqSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        ro.cfg.common = super::common::common_config(ringbuf, false, false);
        ro.cfg.common.task_slot = slot;
        ro.cfg.threshold_ns = threshold_ns(spec);
        if !hash {
            // Task storage: the hash stays unused.
            open.maps.irq_thread_stamp_by_tid.set_max_entries(1).map_err(|e| libbpf_error("irq_thread_stamp", &e))?;
        }
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        super::common::autoload_only(open.open_object_mut(), &wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let maps = maps_of!(IrqSkel);
    loaded(skel, maps, spec, family, &wanted, ringbuf)
}

/// The no-BTF build: classic tracepoints, `irq` / `vec` where tracefs says.
fn load_tp(spec: &ProbeSpec, family: Family, ringbuf: bool) -> Result<Loaded, LoadError> {
    let fmt = |event: &str| tracefs_format("irq", event).map_err(LoadError::from);
    let events = match family {
        Family::Irq => [fmt("irq_handler_entry")?, fmt("irq_handler_exit")?],
        Family::Softirq => [fmt("softirq_entry")?, fmt("softirq_exit")?],
    };
    let wanted = programs(family, Mechanism::Tracepoint, false, false);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<_, LoadError> {
        let mut open = IrqNobtfSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        ro.cfg.common = super::common::common_config(ringbuf, false, false);
        ro.cfg.threshold_ns = threshold_ns(spec);
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        match family {
            Family::Irq => {
                let e = set_tp_field(&mut ro.entry_irq, &events[0], "irq", PID_SIZES)?;
                let x = set_tp_field(&mut ro.exit_irq, &events[1], "irq", PID_SIZES)?;
                log::info!("irq: record layout from tracefs: irq_handler_entry irq{e}, irq_handler_exit irq{x}");
            }
            Family::Softirq => {
                let e = set_tp_field(&mut ro.soft_entry_vec, &events[0], "vec", PID_SIZES)?;
                let x = set_tp_field(&mut ro.soft_exit_vec, &events[1], "vec", PID_SIZES)?;
                log::info!("softirq: record layout from tracefs: softirq_entry vec{e}, softirq_exit vec{x}");
            }
        }
        super::common::autoload_only(open.open_object_mut(), &wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let maps = maps_of!(IrqNobtfSkel);
    loaded(skel, maps, spec, family, &wanted, ringbuf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_sets() {
        use Mechanism::{RawTp, TpBtf, Tracepoint};
        assert_eq!(programs(Family::Softirq, RawTp, false, false), ["softirq_exit_raw", "softirq_entry_raw"]);
        assert_eq!(
            programs(Family::Irq, RawTp, true, true),
            ["irq_exit_raw", "irq_entry_raw"],
            "no thread path on raw_tp"
        );
        assert_eq!(programs(Family::Irq, TpBtf, true, false).len(), 4);
        // The tid hash: its exit program (deletes entries) first.
        let hash = programs(Family::Irq, TpBtf, true, true);
        assert_eq!((hash.len(), hash[0]), (5, "irq_thread_exit_btf"));
        assert_eq!(programs(Family::Irq, TpBtf, false, true), ["irq_exit_btf", "irq_entry_btf"]);
        assert_eq!(programs(Family::Irq, Tracepoint, true, true), ["irq_exit_tp", "irq_entry_tp"], "no thread path");
        assert_eq!(programs(Family::Softirq, Tracepoint, false, false), ["softirq_exit_tp", "softirq_entry_tp"]);
    }
}
