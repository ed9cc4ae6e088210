// SPDX-License-Identifier: MIT
//! Names for what the alert records and the kernel's cause tallies carry
//! as numbers: task comms the records named, IRQ names from
//! /proc/interrupts, and the per-interval read of the cause tallies.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use latmon_core::anatomy::CauseKind;
use latmon_core::causes::{CauseId, CauseSummary, TallyRead};
use latmon_core::summary::AlertRecord;
use libbpf_rs::MapCore;

use super::ReadError;
use crate::bpf::shared::types::latmon_cause_tally;

/// How often /proc/interrupts is read again when an anatomy names an IRQ
/// whose name is not known yet (a device that came later).
const IRQ_NAMES_REFRESH: Duration = Duration::from_secs(1);

/// Thread id -> comm, as alert records' anatomies named them: a tally's
/// task that has exited keeps its name. Bounded: emptied when full.
#[derive(Default)]
pub(crate) struct TaskComms(std::collections::HashMap<u32, String>);

/// Tasks [`TaskComms`] holds at most.
const TASK_COMMS: usize = 1024;

impl TaskComms {
    pub(super) fn note(&mut self, rec: &AlertRecord) {
        let Some(a) = &rec.anatomy else { return };
        for c in &a.causes {
            let CauseKind::Task { comm, pid, .. } = &c.kind else { continue };
            if self.0.get(pid) == Some(comm) {
                continue;
            }
            if self.0.len() >= TASK_COMMS {
                self.0.clear();
            }
            self.0.insert(*pid, comm.clone());
        }
    }
}

/// IRQ number -> name for anatomies, from /proc/interrupts, read again
/// (at most every IRQ_NAMES_REFRESH) when a number is not known.
#[derive(Default)]
pub(super) struct IrqNames {
    names: std::collections::HashMap<u32, String>,
    read_at: Option<std::time::Instant>,
}

impl IrqNames {
    pub(super) fn name(&mut self, rec: &mut AlertRecord) {
        let Some(a) = rec.anatomy.as_mut() else { return };
        for c in &mut a.causes {
            let CauseKind::Irq { irq, name } = &mut c.kind else { continue };
            if let Some(n) = self.get(*irq) {
                name.clone_from(n);
            }
        }
    }

    /// IRQ `irq`'s name, /proc/interrupts read again if it is new.
    fn get(&mut self, irq: u32) -> Option<&String> {
        if !self.names.contains_key(&irq) && self.read_at.is_none_or(|t| t.elapsed() >= IRQ_NAMES_REFRESH) {
            self.names = crate::procfs::interrupt_names();
            self.read_at = Some(std::time::Instant::now());
        }
        self.names.get(&irq)
    }
}

/// The kernel's cause tallies of an object (bpf/causes.bpf.h: `cause_tally`
/// and `cause_epoch`, one entry per alert id) and the last read of each,
/// for the interval's top causes. Names are resolved here, at the edge:
/// tasks as the records' anatomies named them, else from /proc/TID/comm
/// (empty: a task no record named, gone), IRQs from /proc/interrupts.
pub(crate) struct CauseTallies {
    tally: RawFd,
    epoch: RawFd,
    prev: Vec<TallyRead>,
    epochs: Vec<u64>,
    raw: latmon_cause_tally,
    irq_names: IrqNames,
    /// Comms the records named (tasks that may have exited since).
    comms: Option<Arc<Mutex<TaskComms>>>,
    path: String,
}

impl CauseTallies {
    /// `tally` and `epoch` must outlive the reader (both live in the
    /// probe's skeleton).
    pub(super) fn new(
        tally: &dyn MapCore,
        epoch: &dyn MapCore,
        comms: Option<Arc<Mutex<TaskComms>>>,
    ) -> Result<Self, ReadError> {
        if tally.value_size() as usize != size_of::<latmon_cause_tally>() {
            return Err(ReadError::Layout {
                map: "cause_tally".into(),
                got: tally.value_size() as usize,
                want: size_of::<latmon_cause_tally>(),
            });
        }
        let ids = tally.max_entries() as usize;
        Ok(CauseTallies {
            tally: tally.as_fd().as_raw_fd(),
            epoch: epoch.as_fd().as_raw_fd(),
            prev: vec![TallyRead::default(); ids],
            epochs: vec![0; ids],
            raw: latmon_cause_tally::default(),
            irq_names: IrqNames::default(),
            comms,
            path: String::with_capacity(32),
        })
    }

    /// The causes of id `id`'s alerted time since the last call. The
    /// epoch moves first: an entry this read sees in use stays its
    /// cause's until the next read has seen it (bpf/causes.bpf.h).
    pub(super) fn read(&mut self, id: u32, out: &mut CauseSummary) -> Result<(), ReadError> {
        let i = id as usize;
        let (Some(epoch), Some(prev)) = (self.epochs.get_mut(i), self.prev.get_mut(i)) else {
            return Err(ReadError::Map { map: "cause_tally".into(), why: format!("no alert id {id}") });
        };
        *epoch += 1;
        // SAFETY: key and value are the map's u32 and u64; raw is the
        // map's value type (size checked in new()).
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_update_elem(
                self.epoch,
                (&id as *const u32).cast(),
                (epoch as *const u64).cast(),
                0,
            )
        };
        if rc != 0 {
            return Err(ReadError::last_os("cause_epoch"));
        }
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_elem(
                self.tally,
                (&id as *const u32).cast(),
                (&mut self.raw as *mut latmon_cause_tally).cast(),
            )
        };
        if rc != 0 {
            return Err(ReadError::last_os("cause_tally"));
        }
        let r = &self.raw;
        let mut cur = TallyRead {
            alerts: r.alerts,
            alerted_ns: r.alerted_ns,
            folded_ns: r.folded_ns,
            folded_parts: r.folded_parts,
            ..Default::default()
        };
        for (d, e) in cur.slots.iter_mut().zip(&r.slot) {
            *d = (e.key, e.ns);
        }
        out.fill(prev, &cur);
        *prev = cur;
        for c in &mut out.causes {
            match c.id {
                CauseId::Task { pid } => {
                    // As the kernel named it at the alert, else as it is now.
                    let known = self
                        .comms
                        .as_ref()
                        .and_then(|m| m.lock().ok())
                        .and_then(|m| m.0.get(&pid).map(|n| c.name.push_str(n)));
                    if known.is_none() {
                        task_comm(&mut self.path, pid, &mut c.name);
                    }
                }
                CauseId::Irq { irq } => {
                    if let Some(n) = self.irq_names.get(irq) {
                        c.name.push_str(n);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Thread `tid`'s comm into `name` (nothing when it is gone); `path` is
/// scratch.
fn task_comm(path: &mut String, tid: u32, name: &mut String) {
    use std::fmt::Write as _;
    use std::io::Read as _;
    path.clear();
    let _ = write!(path, "/proc/{tid}/comm");
    let mut buf = [0u8; 64];
    let Ok(mut f) = std::fs::File::open(&*path) else { return };
    let n = f.read(&mut buf).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    name.push_str(text.trim_end_matches('\n'));
}
