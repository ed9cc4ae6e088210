// SPDX-License-Identifier: MIT
//! `irq` and `softirq` (bpf/irq.bpf.c): hard interrupt handler durations per
//! IRQ number (`irq:36 virtio1-req.0`), the threaded path per IRQ where IRQ
//! threads exist (`irq:36 virtio1-req.0 thread`: hardirq entry -> thread
//! running, in two stages `... thread:hardirq`: hardirq entry -> the
//! thread's wakeup, and `... thread:wakeup`: wakeup -> running), and softirq
//! durations per vector (`softirq:NET_RX`).

use std::collections::HashMap;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, OpenObject};

use super::series::{Family as FamilyProbe, Role, Slot, Source};
use super::{attach_in_order, ladder, libbpf_error, Owned, PerCpuHist, Probe, ProbeError};
use crate::bpf::irq::{types, IrqSkel, IrqSkelBuilder};
use crate::bpf::limits::{
    IRQ_KIND_HANDLER, IRQ_KIND_THREAD, IRQ_KIND_THREAD_HARDIRQ, IRQ_KIND_THREAD_WAKEUP, SOFTIRQ_VECS,
};
use crate::config::ProbeSpec;
use crate::hist::Hist;
use crate::summary::ProbeInfo;

// SAFETY: a #[repr(C)] pair of u32s generated from latmon.h.
unsafe impl plain::Plain for types::latmon_irq_key {}

/// The kernel's softirq vector names (`softirq_to_name`, stable since 4.5).
pub const SOFTIRQ_NAMES: [&str; SOFTIRQ_VECS] =
    ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"];

/// Which half of bpf/irq.bpf.c a probe runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Irq,
    Softirq,
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

/// Programs in attach order for a family, mechanism and thread path. The
/// switch program goes before the waking program that creates stamps.
fn programs(family: Family, mech: &str, threads: bool) -> Vec<&'static str> {
    let btf = mech == "tp_btf";
    match family {
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

/// IRQ number -> action names, from the text of /proc/interrupts. Per line:
/// `N:`, one count per CPU, the chip, the hardware IRQ and trigger
/// (`5-edge` on x86, `27 Level` on a GIC), then the action names.
pub fn parse_interrupts(text: &str) -> HashMap<u32, String> {
    let mut lines = text.lines();
    let ncpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut names = HashMap::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else { continue };
        let Ok(irq) = irq.trim().parse::<u32>() else { continue };
        let mut fields = rest.split_whitespace().skip(ncpus).skip(1).peekable(); // counts, chip
        // The hardware IRQ: `5-edge`, or `27` followed by `Level`/`Edge`.
        if let Some(hw) = fields.peek() {
            let digits = hw.split('-').next().unwrap_or("");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                let joined = hw.contains('-');
                fields.next();
                if !joined && fields.peek().is_some_and(|t| matches!(*t, "Level" | "Edge")) {
                    fields.next();
                }
            }
        }
        let name = fields.collect::<Vec<_>>().join(" ");
        if !name.is_empty() {
            names.insert(irq, name);
        }
    }
    names
}

struct Irqs {
    family: Family,
    /// Reader of irq_hist (keyed by latmon_irq_key) or softirq_hist.
    reader: PerCpuHist<types::latmon_hist>,
    bss: *const types::bss,
    names: HashMap<u32, String>,
    // Field order is drop order: detach before the object goes away.
    _links: Vec<Link>,
    skel: Owned<IrqSkel<'static>>,
}

impl Irqs {
    fn irq_label(&mut self, irq: u32) -> String {
        if !self.names.contains_key(&irq) {
            // A new IRQ: reread the names (drivers come and go).
            self.names = std::fs::read_to_string("/proc/interrupts").map(|t| parse_interrupts(&t)).unwrap_or_default();
        }
        match self.names.get(&irq) {
            Some(n) => format!("{irq} {n}"),
            None => irq.to_string(),
        }
    }
}

fn irq_key(key: u64) -> types::latmon_irq_key {
    types::latmon_irq_key { irq: key as u32, kind: (key >> 32) as u32 }
}

impl Source for Irqs {
    fn bpf_programs(&self) -> Vec<std::os::fd::RawFd> {
        super::loaded_prog_fds(self.skel.object())
    }

    fn candidates(&mut self, out: &mut Vec<Slot>) -> Result<(), String> {
        if self.family == Family::Softirq {
            for (vec, name) in SOFTIRQ_NAMES.iter().enumerate() {
                out.push(Slot { key: vec as u64, label: (*name).into(), role: Role::Part });
            }
            return Ok(());
        }
        let keys: Vec<Vec<u8>> = self.skel.maps.irq_hist.keys().collect();
        for raw in keys {
            let mut k = types::latmon_irq_key::default();
            plain::copy_from_bytes(&mut k, &raw).map_err(|e| format!("irq key: {e:?}"))?;
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

    fn read(&mut self, key: u64, out: &mut Hist) -> Result<(), String> {
        match self.family {
            Family::Softirq => self.reader.read(key as u32, out),
            Family::Irq => self.reader.read_key(&irq_key(key), out),
        }
    }

    fn lost(&self) -> u64 {
        // SAFETY: bss points to the mapped .bss of the live object.
        unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.bss).irq_lost)) }
    }
}

pub fn open(spec: &ProbeSpec, family: Family, threads: ThreadPath) -> Result<Box<dyn Probe>, ProbeError> {
    let probe = spec.name.clone();
    if !super::kernel_btf_present() {
        return Err(ProbeError::KernelFeature {
            probe,
            what: "kernel has no BTF (/sys/kernel/btf/vmlinux missing); irq needs CO-RE".into(),
        });
    }
    if spec.comm.is_some() || spec.pid.is_some() {
        return Err(ProbeError::Spec {
            probe,
            why: "interrupts belong to no task: comm= and pid= do not apply".into(),
        });
    }
    let threads = family == Family::Irq
        && match threads {
            ThreadPath::Off => false,
            ThreadPath::On => true,
            ThreadPath::IfThreadsExist => irq_threads_exist(),
        };
    let ((skel, links), mech) = ladder(&probe, &["tp_btf", "raw_tp"], |mech| load(spec, family, mech, threads))?;
    let map = match family {
        Family::Irq => &skel.maps.irq_hist,
        Family::Softirq => &skel.maps.softirq_hist,
    };
    let reader = PerCpuHist::new(map).map_err(|why| ProbeError::Read { probe: probe.clone(), why })?;
    let bss = skel
        .maps
        .bss_data
        .as_deref()
        .map(|b| b as *const types::bss)
        .ok_or_else(|| ProbeError::Read { probe: probe.clone(), why: "no .bss".into() })?;
    let mode = match family {
        Family::Softirq => "per-cpu stamp",
        Family::Irq if threads && mech == "tp_btf" => "per-cpu stamp, irq threads",
        Family::Irq => "per-cpu stamp",
    };
    let kind = match family {
        Family::Irq => "irq",
        Family::Softirq => "softirq",
    };
    let info = ProbeInfo { name: probe, kind: kind.into(), attach: mech.into(), mode: mode.into(), btf_mode: "co-re".into() };
    let source = Irqs { family, reader, bss, names: HashMap::new(), _links: links, skel };
    Ok(Box::new(FamilyProbe::new(info, Box::new(source))))
}

fn load(
    spec: &ProbeSpec,
    family: Family,
    mech: &'static str,
    threads: bool,
) -> Result<(Owned<IrqSkel<'static>>, Vec<Link>), String> {
    let wanted = programs(family, mech, threads);
    let skel = Owned::new(|storage: &'static mut MaybeUninit<OpenObject>| {
        let mut open = IrqSkelBuilder::default().open_opts(super::open_opts(), storage).map_err(|e| libbpf_error("open", &e))?;
        let ro = open.maps.rodata_data.as_deref_mut().ok_or("no rodata")?;
        ro.threshold_ns = spec.threshold.map_or(0, |t| t.as_nanos() as u64);
        super::autoload_only(open.open_object_mut(), &wanted);
        open.load().map_err(|e| libbpf_error("load", &e))
    })?;
    let links = attach_in_order(skel.object(), &wanted)?;
    Ok((skel, links))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_names_on_x86_and_gic_layouts() {
        let x86 = "           CPU0       CPU1       \n \
 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n \
 36:          0     110320 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n \
 40:          3          0 PCI-MSIX-0000:00:04.0   0-edge      eth0, eth0-tx\n\
NMI:          0          0   Non-maskable interrupts\n\
ERR:          0\n";
        let n = parse_interrupts(x86);
        assert_eq!(n.get(&24).map(String::as_str), Some("ACPI:Ged"));
        assert_eq!(n.get(&36).map(String::as_str), Some("virtio1-req.0"));
        assert_eq!(n.get(&40).map(String::as_str), Some("eth0, eth0-tx"));
        assert_eq!(n.len(), 3, "named rows (NMI, ERR) are not IRQ numbers");

        let gic = "           CPU0       CPU1       CPU2       CPU3       \n \
 11:     123456     234567     345678     456789     GICv3  27 Level     arch_timer\n \
 47:          0          0          0          0     GICv3  79 Edge      virtio0\n \
 70:          1          0          0          0  ITS-MSI 16384 Edge      nvme0q0\n";
        let n = parse_interrupts(gic);
        assert_eq!(n.get(&11).map(String::as_str), Some("arch_timer"));
        assert_eq!(n.get(&47).map(String::as_str), Some("virtio0"));
        assert_eq!(n.get(&70).map(String::as_str), Some("nvme0q0"));
    }

    #[test]
    fn program_sets() {
        assert_eq!(programs(Family::Softirq, "raw_tp", false), ["softirq_exit_raw", "softirq_entry_raw"]);
        assert_eq!(programs(Family::Irq, "raw_tp", true), ["irq_exit_raw", "irq_entry_raw"], "no thread path on raw_tp");
        assert_eq!(programs(Family::Irq, "tp_btf", true).len(), 4);
    }
}
