// SPDX-License-Identifier: MIT
//! Probe families: loading BPF objects, the attach ladder, reading the
//! per-CPU histogram maps. This is an I/O edge; the maths lives in `hist`.

pub mod alerts;
pub mod common;
pub mod cycle;
mod elfsyms;
pub mod features;
pub mod func;
pub mod irq;
pub mod lock;
mod lock_cycle;
mod percpu;
pub mod runq;
pub mod series;
mod symworker;
pub mod syscall;
mod sysnames;
mod tallies;
pub mod timer;

pub use common::*;
pub(crate) use percpu::{PerCpu, PerCpuHist, ReadError};

use crate::config::{ProbeKind, ProbeSpec};

/// Open, load and attach every probe; one result per spec, in order. Families
/// may serve several specs from one BPF object, hence all at once.
pub fn open_all(specs: &[ProbeSpec]) -> Vec<Result<Box<dyn Probe>, ProbeError>> {
    let mut out: Vec<Option<Result<Box<dyn Probe>, ProbeError>>> = specs.iter().map(|_| None).collect();
    // kfunc and ufunc specs share one BPF object (bpf/func.bpf.c).
    let func_at: Vec<usize> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.kind, ProbeKind::Kfunc(_) | ProbeKind::Ufunc { .. }))
        .map(|(i, _)| i)
        .collect();
    if !func_at.is_empty() {
        let func_specs: Vec<&ProbeSpec> = func_at.iter().map(|&i| &specs[i]).collect();
        for (&i, r) in func_at.iter().zip(func::open_set(&func_specs)) {
            out[i] = Some(r);
        }
    }
    // A cycle probe takes a lock probe's waits into its misses when one
    // runs (bpf/lock_cycle.bpf.h); none: no map work at its releases.
    let lock_join = lock_cycle::lock_loaded() || specs.iter().any(|s| matches!(s.kind, ProbeKind::Lock));
    let cycle_join = lock_cycle::cycle_loaded() || specs.iter().any(|s| matches!(s.kind, ProbeKind::Cycle { .. }));
    out.into_iter()
        .zip(specs)
        .map(|(done, spec)| {
            done.unwrap_or_else(|| match &spec.kind {
                ProbeKind::Runq => runq::open(spec),
                ProbeKind::Syscall(name) => syscall::open(spec, name.as_deref()),
                ProbeKind::Irq => irq::open(spec, irq::Family::Irq, irq::ThreadPath::IfThreadsExist),
                ProbeKind::Softirq => irq::open(spec, irq::Family::Softirq, irq::ThreadPath::Off),
                ProbeKind::Timer => timer::open(spec, false),
                ProbeKind::Chain { .. } => timer::open(spec, true),
                ProbeKind::Cycle { .. } => cycle::open(spec, lock_join),
                ProbeKind::Lock => lock::open(spec, cycle_join),
                other => Err(ProbeError::Unsupported { probe: spec.name.clone(), kind: other.family() }),
            })
        })
        .collect()
}
