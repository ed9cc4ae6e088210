// SPDX-License-Identifier: MIT
//! `timer` and `chain` (bpf/timer.bpf.c).
//!
//! `timer`: intended hrtimer expiry -> the sleeping task running, for tasks
//! sleeping on high-resolution timers (clock_nanosleep), one series.
//!
//! `chain`: for a named thread, every wakeup caused by a timer or a hard
//! interrupt handler, in stages named by the event that starts them:
//! `chain:timer` (intended expiry -> wakeup), `chain:irq` (hardirq entry ->
//! wakeup), `chain:wakeup` (wakeup -> running); the family line `chain` is
//! end to end, and per event the stages add up to it exactly.

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use super::series::{Family, Role, Slot, Source};
use super::{attach_in_order, ladder, libbpf_error, set_comm, Owned, PerCpuHist, Probe, ProbeError};
use crate::bpf::limits::{TS_CHAIN, TS_CHAIN_IRQ, TS_CHAIN_RUN, TS_CHAIN_TIMER, TS_TIMER};
use crate::bpf::timer::{types, TimerSkel, TimerSkelBuilder};
use crate::config::ProbeSpec;
use crate::hist::Hist;
use crate::summary::ProbeInfo;

/// Programs in attach order: the consumer (sched_switch) before the stamp
/// producers, the hrtimer program last.
fn programs(chain: bool) -> Vec<&'static str> {
    let mut p = vec!["timer_switch_btf", "timer_waking_btf"];
    if chain {
        p.extend(["chain_irq_exit_btf", "chain_irq_entry_btf"]);
    }
    p.push("timer_expire_btf");
    p
}

type Loaded = (Owned<TimerSkel<'static>>, Vec<Link>);

struct Timers {
    reader: PerCpuHist<types::latmon_hist>,
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
        self.t.reader.read(TS_TIMER as u32, out).map_err(|why| ProbeError::Read { probe: self.info.name.clone(), why })
    }

    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::loaded_prog_fds(self.t._skel.object())
    }
}

/// `chain`: the end-to-end line plus its stages.
impl Source for Timers {
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::loaded_prog_fds(self._skel.object())
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), String> {
        for (slot, label, role) in [
            (TS_CHAIN, "total", Role::Family),
            (TS_CHAIN_TIMER, "timer", Role::Extra),
            (TS_CHAIN_IRQ, "irq", Role::Extra),
            (TS_CHAIN_RUN, "wakeup", Role::Extra),
        ] {
            out.push(Slot { key: slot as u64, label: label.into(), role });
        }
        Ok(())
    }

    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), String> {
        self.reader.read(key as u32, out)
    }
}

pub fn open(spec: &ProbeSpec, chain: bool) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    if !super::kernel_btf_present() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: format!("{}; timer needs tp_btf", super::no_btf_reason()),
        });
    }
    let ((skel, links), mech) = ladder(&probe, &["tp_btf"], |_| load(spec, chain))?;
    let reader = PerCpuHist::new(&skel.maps.timer_hist).map_err(|why| ProbeError::Read { probe: probe.clone(), why })?;
    let t = Timers { reader, _links: links, _skel: skel };
    let kind = if chain { "chain" } else { "timer" };
    let info = ProbeInfo { name: probe, kind: kind.into(), attach: mech.into(), mode: "task-storage".into(), btf_mode: "co-re".into() };
    if chain {
        Ok(Box::new(Family::new(info, Box::new(t))))
    } else {
        Ok(Box::new(Timer { info, t }))
    }
}

fn load(spec: &ProbeSpec, chain: bool) -> Result<Loaded, String> {
    let wanted = programs(chain);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = TimerSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or("no rodata")?;
        ro.filter_pid = spec.pid.unwrap_or(0);
        set_comm(&mut ro.filter_comm, spec.comm.as_deref());
        ro.threshold_ns = spec.threshold.map_or(0, |t| t.as_nanos() as u64);
        ro.chain = chain;
        super::autoload_only(open.open_object_mut(), &wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let links = attach_in_order(skel.object(), &wanted)?;
    Ok((skel, links))
}
