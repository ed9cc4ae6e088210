// SPDX-License-Identifier: MIT
//! `timer` and `chain` (bpf/timer.bpf.c).
//!
//! `timer`: intended hrtimer expiry -> the sleeping task running, for tasks
//! sleeping on high-resolution timers (clock_nanosleep), one series.
//!
//! `chain`: for a named thread, every wakeup caused by a timer or a hard
//! interrupt handler, in stages named by the event that starts them:
//! `chain:timer` (intended expiry -> wakeup), `chain:irq` (hardirq entry ->
//! wakeup in the handler), `chain:irq-thread` (hardirq entry -> wakeup by a
//! kernel thread the IRQ woke: PREEMPT_RT's IRQ threads), `chain:wakeup` (wakeup -> running); the family line `chain` is
//! end to end, and per event the stages add up to it exactly. With
//! `response=/path:SYMBOL`, two more: `chain:response` (running -> the
//! first return of SYMBOL) and `chain:to-response` (event -> that return).

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use super::alerts::{decode_alert_anat, keep_alert_buffer, want_ringbuf, AlertMaps, Alerts};
use super::common::LoadError;
use super::common::{attach_in_order, ladder, libbpf_error, set_comm, threshold_ns, Owned, Probe, ProbeError};
use super::series::{Family, Role, Slot, Source};
use super::PerCpuHist;
use super::ReadError;
use libbpf_rs::UprobeOpts;

use latmon_core::causes::CauseSummary;
use latmon_core::hist::Hist;
use latmon_core::ident::BtfMode;
use latmon_core::summary::{AlertRecord, ProbeInfo};

use crate::bpf::limits::{
    TS_CHAIN, TS_CHAIN_IRQ, TS_CHAIN_IRQ_THREAD, TS_CHAIN_RESPONSE, TS_CHAIN_RUN, TS_CHAIN_TIMER, TS_CHAIN_TO_RESPONSE,
    TS_TIMER,
};
use crate::bpf::timer::{TimerSkel, TimerSkelBuilder};
use crate::config::{ProbeKind, ProbeSpec, UserFunc};

/// Programs in attach order: with tid-hash slots (`hash`) the exit program
/// that deletes them first, then the consumer (sched_switch) before the
/// stamp producers, the hrtimer program last; the anatomy's (exits before
/// entries) when anatomies are accounted. chain's hardirq programs do the
/// anatomy's hardirq accounting too: every interrupt runs two programs of
/// this object, not four (docs/probes.md, "Gate and cost").
fn programs(chain: bool, anatomy: bool, hash: bool) -> Vec<&'static str> {
    let mut p = if hash { vec!["timer_task_exit_btf"] } else { Vec::new() };
    p.extend(["timer_switch_btf", "timer_waking_btf"]);
    if chain {
        p.extend(["chain_irq_exit_btf", "chain_irq_entry_btf"]);
    }
    if anatomy {
        let hardirq = !chain;
        p.extend(
            ["anat_irq_exit_btf", "anat_softirq_exit_btf", "anat_irq_entry_btf", "anat_softirq_entry_btf"]
                .into_iter()
                .filter(|n| hardirq || !n.starts_with("anat_irq_")),
        );
    }
    p.push("timer_expire_btf");
    p
}

type Loaded = (Owned<TimerSkel<'static>>, Vec<Link>);

/// Field order is drop order: the alert feed stops before the object goes.
struct Timers {
    /// Alert records of the end-to-end series (a threshold is set).
    alerts: Alerts,
    reader: PerCpuHist,
    /// chain: a response function closes the chain.
    response: bool,
    // Field order is drop order: detach before the object goes away.
    _links: Vec<Link>,
    _skel: Owned<TimerSkel<'static>>,
}

/// `timer`: one series.
struct Timer {
    info: ProbeInfo,
    t: Timers,
}

impl Probe for Timer {
    fn info(&self) -> &ProbeInfo {
        &self.info
    }

    fn read(&mut self, out: &mut Hist) -> Result<(), ProbeError> {
        self.t.read_series(TS_TIMER as u32, out).map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }

    fn drain_alerts(&mut self, out: &mut Vec<AlertRecord>) {
        self.t.drain(TS_TIMER as u32, out);
    }

    fn causes(&mut self, out: &mut Option<CauseSummary>) -> Result<(), ProbeError> {
        self.t
            .alerts
            .causes(TS_TIMER as u32, out)
            .map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }

    fn flush_alerts(&mut self) {
        self.t.flush();
    }

    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::common::loaded_prog_fds(self.t._skel.object())
    }
}

/// `chain`: the end-to-end line plus its stages.
impl Source for Timers {
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::common::loaded_prog_fds(self._skel.object())
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), ReadError> {
        let stages = [
            (TS_CHAIN, "total", Role::Family),
            (TS_CHAIN_TIMER, "timer", Role::Extra),
            (TS_CHAIN_IRQ, "irq", Role::Extra),
            (TS_CHAIN_IRQ_THREAD, "irq-thread", Role::Extra),
            (TS_CHAIN_RUN, "wakeup", Role::Extra),
            (TS_CHAIN_RESPONSE, "response", Role::Extra),
            (TS_CHAIN_TO_RESPONSE, "to-response", Role::Extra),
        ];
        let n = if self.response { stages.len() } else { 5 };
        for (slot, label, role) in stages.into_iter().take(n) {
            out.push(Slot { key: slot as u64, label: label.into(), role });
        }
        Ok(())
    }

    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), ReadError> {
        self.read_series(key as u32, out)
    }

    fn drain_alerts(&mut self, key: u64, out: &mut Vec<AlertRecord>) {
        self.drain(key as u32, out);
    }

    fn causes(&mut self, out: &mut Option<CauseSummary>) -> Result<(), ReadError> {
        self.alerts.causes(TS_CHAIN as u32, out)
    }

    fn flush_alerts(&mut self) {
        self.flush();
    }
}

impl Timers {
    /// A series' histogram with its alert records lost on the way (token
    /// bucket, full buffer, full queue).
    fn read_series(&mut self, series: u32, out: &mut Hist) -> Result<(), ReadError> {
        let reader = &mut self.reader;
        self.alerts.read(series, out, |o| reader.read(series, o))
    }

    fn flush(&self) {
        self.alerts.flush();
    }

    fn drain(&self, series: u32, out: &mut Vec<AlertRecord>) {
        self.alerts.drain(series, out);
    }
}

pub fn open(spec: &ProbeSpec, chain: bool) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    if !super::common::kernel_btf_present() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: format!("{}; timer needs tp_btf", super::common::no_btf_reason()),
        });
    }
    if let Some(f) = response_of(spec) {
        super::check_binary(&f.binary)
            .map_err(|e| ProbeError::Target { probe: probe.clone(), what: format!("response: {e}") })?;
    }
    let ringbuf = want_ringbuf();
    // Stamps are created in sched_waking: where task storage is unsafe
    // there, in tid hashes.
    let storage = super::common::task_storage(&probe)?;
    let slot = super::common::task_slot(&storage);
    let ((skel, links), mech) = ladder(&probe, &spec.ladder(), |_| load(spec, chain, slot, ringbuf))?;
    let read_err = |why| ProbeError::Read { probe: probe.clone(), why };
    let reader = PerCpuHist::new(&skel.maps.timer_hist).map_err(read_err)?;
    let m = &skel.maps;
    let maps = AlertMaps { drops: &m.alert_drops, ring: &m.alerts, perf: &m.alerts_perf };
    let mut alerts =
        Alerts::new(maps, spec.threshold.is_some(), ringbuf, Some(crate::bpf::limits::TIMER_SERIES), decode_alert_anat)
            .map_err(read_err)?;
    if super::alerts::causes_wanted(spec) {
        alerts = alerts.with_causes(&m.cause_tally, &m.cause_epoch).map_err(read_err)?;
    }
    let response = response_of(spec);
    let t = Timers { alerts, reader, response: response.is_some(), _links: links, _skel: skel };
    let store = if storage.safe { "task-storage".into() } else { super::common::tid_hash_mode(&probe, &storage) };
    let mut mode = match response {
        Some(f) => format!("{store}, response: uretprobe {}:{}", f.binary, f.symbol),
        None => store,
    } + &super::common::alert_mode(threshold_ns(spec), ringbuf);
    if super::alerts::anatomy_wanted(spec) {
        mode += ", anatomy";
    }
    let info = ProbeInfo {
        name: probe,
        kind: spec.kind.family(),
        attach: mech,
        mode,
        btf_mode: BtfMode::CoRe,
        wait: Default::default(),
    };
    if chain {
        Ok(Box::new(Family::new(info, Box::new(t))))
    } else {
        Ok(Box::new(Timer { info, t }))
    }
}

fn response_of(spec: &ProbeSpec) -> Option<&UserFunc> {
    match &spec.kind {
        ProbeKind::Chain { response } => response.as_ref(),
        _ => None,
    }
}

/// `slot`: where per-task state lives (cfg.common.task_slot).
fn load(spec: &ProbeSpec, chain: bool, slot: u32, ringbuf: bool) -> Result<Loaded, LoadError> {
    let response = response_of(spec);
    let anatomy = super::alerts::anatomy_wanted(spec);
    let hash = slot != crate::bpf::limits::TASK_SLOT_STORAGE as u32;
    let mut wanted = programs(chain, anatomy, hash);
    if response.is_some() {
        wanted.push("chain_response");
    }
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = TimerSkelBuilder::default()
            .open_opts(super::common::open_opts(), storage)
            .map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| LoadError::Object("no rodata".into()))?;
        ro.cfg.threshold_ns = threshold_ns(spec);
        ro.cfg.filter_pid = spec.pid.unwrap_or(0);
        ro.cfg.chain = u32::from(chain);
        ro.cfg.response = u32::from(response.is_some());
        set_comm(&mut ro.cfg.filter_comm, spec.comm.as_deref());
        ro.cfg.common = super::common::common_config(ringbuf, anatomy, super::alerts::causes_wanted(spec));
        ro.cfg.common.task_slot = slot;
        if !hash {
            // Task storage: the hashes stay unused.
            open.maps.timer_stamp_by_tid.set_max_entries(1).map_err(|e| libbpf_error("timer_stamp", &e))?;
            open.maps.chain_carry_by_tid.set_max_entries(1).map_err(|e| libbpf_error("chain_carry", &e))?;
        }
        keep_alert_buffer(&mut open.maps.alerts, &mut open.maps.alerts_perf, ringbuf)?;
        super::common::autoload_only(open.open_object_mut(), &wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let Some(f) = response else {
        let links = attach_in_order(skel.object(), &wanted)?;
        return Ok((skel, links));
    };
    // The uretprobe first (it only closes chains), then the tracepoints.
    // For pid=, only that process's mapping is probed.
    let pid = spec.pid.map_or(-1, |p| p as i32);
    let opts = UprobeOpts { retprobe: true, func_name: Some(f.symbol.clone()), ..Default::default() };
    let ret = skel.progs.chain_response.attach_uprobe_with_opts(pid, &f.binary, 0, opts).map_err(|e| {
        let raw = libbpf_error("attach uretprobe", &e);
        if super::symbol_missing(&raw) {
            LoadError::Target(format!(
                "response function {} not found in {} (no such function in its symbol tables)",
                f.symbol, f.binary
            ))
        } else {
            LoadError::Target(format!("response {}:{}: {raw}", f.binary, f.symbol))
        }
    })?;
    // Links drop in order: the producers detach first, the uretprobe last.
    let mut links = attach_in_order(skel.object(), &programs(chain, anatomy, hash))?;
    links.push(ret);
    Ok((skel, links))
}

#[cfg(test)]
mod tests {
    use super::programs;

    #[test]
    fn chain_accounts_the_anatomys_hardirqs_in_its_own_programs() {
        let timer = programs(false, true, false);
        let chain = programs(true, true, false);
        assert!(timer.contains(&"anat_irq_entry_btf") && timer.contains(&"anat_irq_exit_btf"), "{timer:?}");
        assert!(!chain.iter().any(|p| p.starts_with("anat_irq_")), "{chain:?}");
        assert!(chain.contains(&"chain_irq_entry_btf") && chain.contains(&"anat_softirq_entry_btf"), "{chain:?}");
        // Each exit attaches before its entry (an entry without its exit
        // would leave a handler open).
        for p in [&timer, &chain] {
            for (exit, entry) in [("irq_exit", "irq_entry"), ("softirq_exit", "softirq_entry")] {
                let pos = |w: &str| p.iter().position(|n| n.contains(&format!("_{w}_btf")));
                assert!(matches!((pos(exit), pos(entry)), (Some(a), Some(b)) if a < b), "{p:?}");
            }
        }
        assert!(!programs(true, false, false).iter().any(|p| p.starts_with("anat_")));
    }

    #[test]
    fn tid_hash_slots_are_deleted_at_exit_by_the_first_program_attached() {
        for (chain, anatomy) in [(false, false), (true, true)] {
            let p = programs(chain, anatomy, true);
            assert_eq!(p[0], "timer_task_exit_btf", "{p:?}");
            assert_eq!(&p[1..], programs(chain, anatomy, false), "the rest as with task storage");
        }
    }
}
