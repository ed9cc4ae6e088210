// SPDX-License-Identifier: MIT
//! An alert's anatomy on the wire (Alert revision 5): the model's causes
//! (crate::anatomy) as `WireCause`s and back. Pure, no I/O.

use super::messages::{cause_kind as kind, owner_policy_of, wire_parts, WireCause, CAUSE_NAME_BYTES};
use crate::anatomy::{Anatomy, BlockedOn, Cause, CauseKind, LockOwner, Policy, Preempter, MAX_CAUSES};
use crate::text::truncate;

/// The anatomy a decoded Alert carries: None without causes (an older
/// sender, or a family without anatomies). Callers have checked the
/// count against MAX_CAUSES (decode refuses more).
pub fn from_wire(cpu_woken: u32, cpu_ran: u32, causes: &[WireCause]) -> Option<Anatomy> {
    if causes.is_empty() {
        return None;
    }
    let causes = &causes[..causes.len().min(MAX_CAUSES)];
    // A lock wait's owner (revision 10), whom its inversion names too.
    let owner = causes.iter().find(|w| w.kind == kind::OWNER).map(owner_of);
    let mut out: Vec<Cause> = causes
        .iter()
        .filter(|w| w.kind != kind::INVERSION)
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
                kind::STOPPED => CauseKind::Stopped,
                kind::BACKLOG => CauseKind::Backlog,
                kind::OWNER => CauseKind::Owner { owner: owner_of(w) },
                code => CauseKind::Unknown { code },
            },
        })
        .collect();
    // An inversion's preempters travel one cause each (the unnamed one:
    // its folded rest): one model cause again, where the first stood.
    if let Some(at) = causes.iter().position(|w| w.kind == kind::INVERSION) {
        let parts = causes.iter().filter(|w| w.kind == kind::INVERSION);
        let preempted_by = parts
            .clone()
            .filter(|w| w.id != 0 || !w.name.is_empty())
            .map(|w| Preempter {
                comm: w.name.clone(),
                pid: w.id,
                policy: Policy::from_code(w.policy.into()),
                prio: w.prio,
                ns: w.ns,
            })
            .collect();
        let ns = parts.fold(0u64, |s, w| s.saturating_add(w.ns));
        let owner = owner.unwrap_or_else(|| owner_of(&WireCause::default()));
        // Every cause before `at` is a kept one: `at` is its index still.
        out.insert(at, Cause { kind: CauseKind::Inversion { owner, preempted_by }, ns });
    }
    Some(Anatomy { cpu_woken, cpu_ran, causes: out })
}

/// A wire owner cause's owner (its process id is not carried: 0).
fn owner_of(w: &WireCause) -> LockOwner {
    let (policy, from) = owner_policy_of(w.policy);
    LockOwner { comm: w.name.clone(), pid: 0, tid: w.id, policy, prio: w.prio, from }
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

/// `a` with its smallest part (not `other`, not a lock wait's owner: an
/// inversion names it) folded into `other`: what an encoder sends when
/// the whole anatomy does not fit a frame. The parts still sum to the
/// latency. None when nothing is left to fold.
pub fn fold_smallest(a: &Anatomy) -> Option<Anatomy> {
    let (i, _) = a
        .causes
        .iter()
        .enumerate()
        .filter(|(_, c)| !matches!(c.kind, CauseKind::Other | CauseKind::Owner { .. }))
        .min_by_key(|(_, c)| c.ns)?;
    let mut out = a.clone();
    let folded = out.causes.remove(i).ns;
    match out.causes.iter_mut().find(|c| c.kind == CauseKind::Other) {
        Some(o) => o.ns = o.ns.saturating_add(folded),
        None => out.causes.push(Cause { kind: CauseKind::Other, ns: folded }),
    }
    Some(out)
}
