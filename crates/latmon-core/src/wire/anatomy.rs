// SPDX-License-Identifier: MIT
//! An alert's anatomy on the wire (Alert revision 5): the model's causes
//! (crate::anatomy) as `WireCause`s and back. Pure, no I/O.

use super::messages::{cause_kind as kind, wire_parts, WireCause, CAUSE_NAME_BYTES};
use crate::anatomy::{Anatomy, BlockedOn, Cause, CauseKind, Policy, MAX_CAUSES};
use crate::text::truncate;

/// The anatomy a decoded Alert carries: None without causes (an older
/// sender, or a family without anatomies). Callers have checked the
/// count against MAX_CAUSES (decode refuses more).
pub fn from_wire(cpu_woken: u32, cpu_ran: u32, causes: &[WireCause]) -> Option<Anatomy> {
    if causes.is_empty() {
        return None;
    }
    let causes = causes
        .iter()
        .take(MAX_CAUSES)
        .map(|w| Cause {
            ns: w.ns,
            kind: match w.kind {
                kind::TASK => CauseKind::Task {
                    comm: w.name.clone(),
                    pid: w.id,
                    policy: Policy::from_code(w.policy.into()),
                    prio: w.prio,
                },
                kind::TASK_REST => CauseKind::TaskRest,
                kind::IRQ => CauseKind::Irq { irq: w.id, name: w.name.clone() },
                kind::IRQ_REST => CauseKind::IrqRest,
                kind::SOFTIRQ => CauseKind::Softirq { vector: w.id },
                kind::TIMER_IRQ_DELAY => CauseKind::TimerIrqDelay,
                kind::OTHER => CauseKind::Other,
                kind::RUNNING => CauseKind::Running,
                kind::BLOCKED => CauseKind::Blocked { on: BlockedOn::from_code(w.id), syscall: w.name.clone() },
                kind::PAGE_FAULTS => CauseKind::PageFaults { count: w.id },
                code => CauseKind::Unknown { code },
            },
        })
        .collect();
    Some(Anatomy { cpu_woken, cpu_ran, causes })
}

/// The model's causes as owned wire causes (tests, tools).
pub fn to_wire(a: &Anatomy) -> Vec<WireCause> {
    a.causes
        .iter()
        .flat_map(wire_parts)
        .map(|(kind, id, policy, prio, name, ns)| WireCause {
            kind,
            id,
            policy,
            prio,
            name: truncate(name, CAUSE_NAME_BYTES).into(),
            ns,
        })
        .collect()
}

/// `a` with its smallest part (not `other`) folded into `other`: what an
/// encoder sends when the whole anatomy does not fit a frame. The parts
/// still sum to the latency. None when nothing is left to fold.
pub fn fold_smallest(a: &Anatomy) -> Option<Anatomy> {
    let (i, _) = a.causes.iter().enumerate().filter(|(_, c)| c.kind != CauseKind::Other).min_by_key(|(_, c)| c.ns)?;
    let mut out = a.clone();
    let folded = out.causes.remove(i).ns;
    match out.causes.iter_mut().find(|c| c.kind == CauseKind::Other) {
        Some(o) => o.ns = o.ns.saturating_add(folded),
        None => out.causes.push(Cause { kind: CauseKind::Other, ns: folded }),
    }
    Some(out)
}
