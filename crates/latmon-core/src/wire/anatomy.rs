// SPDX-License-Identifier: MIT
//! An alert's anatomy on the wire (Alert revision 5): the model's causes
//! (crate::anatomy) as `WireCause`s and back. Pure, no I/O.

use serde::ser::{Serialize, SerializeTuple, Serializer};

use super::messages::WireCause;
use crate::anatomy::{Anatomy, Cause, CauseKind, Policy, MAX_CAUSES};

const TASK: u8 = 1;
const TASK_REST: u8 = 2;
const IRQ: u8 = 3;
const IRQ_REST: u8 = 4;
const SOFTIRQ: u8 = 5;
const TIMER_IRQ_DELAY: u8 = 6;
const OTHER: u8 = 7;

/// Names on the wire: at most this many bytes (as comm).
const NAME_BYTES: usize = super::MAX_ALERT_NAME_LEN;

/// (kind, id, policy, prio, name) of a model cause.
fn parts(c: &Cause) -> (u8, u32, u8, i32, &str) {
    match &c.kind {
        CauseKind::Task { comm, pid, policy, prio } => (TASK, *pid, policy.code().min(255) as u8, *prio, comm),
        CauseKind::TaskRest => (TASK_REST, 0, 0, 0, ""),
        CauseKind::Irq { irq, name } => (IRQ, *irq, 0, 0, name),
        CauseKind::IrqRest => (IRQ_REST, 0, 0, 0, ""),
        CauseKind::Softirq { vector } => (SOFTIRQ, *vector, 0, 0, ""),
        CauseKind::TimerIrqDelay => (TIMER_IRQ_DELAY, 0, 0, 0, ""),
        CauseKind::Unknown { code } => (*code, 0, 0, 0, ""),
        CauseKind::Other => (OTHER, 0, 0, 0, ""),
    }
}

/// A model cause serialized as a `WireCause`, without building one.
pub(crate) struct CauseRef<'a>(pub(crate) &'a Cause);

impl Serialize for CauseRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (kind, id, policy, prio, name) = parts(self.0);
        let mut t = s.serialize_tuple(6)?;
        t.serialize_element(&kind)?;
        t.serialize_element(&id)?;
        t.serialize_element(&policy)?;
        t.serialize_element(&prio)?;
        t.serialize_element(super::encode::truncate(name, NAME_BYTES))?;
        t.serialize_element(&self.0.ns)?;
        t.end()
    }
}

/// The causes of an Alert being encoded: the model's, or a decoded frame's.
#[derive(Clone, Copy)]
pub(crate) enum Causes<'a> {
    Model(&'a [Cause]),
    Wire(&'a [WireCause]),
}

impl Causes<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Causes::Model(c) => c.is_empty(),
            Causes::Wire(c) => c.is_empty(),
        }
    }
}

impl Serialize for Causes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Causes::Model(c) => s.collect_seq(c.iter().map(CauseRef)),
            Causes::Wire(c) => c.serialize(s),
        }
    }
}

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
                TASK => CauseKind::Task {
                    comm: w.name.clone(),
                    pid: w.id,
                    policy: Policy::from_code(w.policy.into()),
                    prio: w.prio,
                },
                TASK_REST => CauseKind::TaskRest,
                IRQ => CauseKind::Irq { irq: w.id, name: w.name.clone() },
                IRQ_REST => CauseKind::IrqRest,
                SOFTIRQ => CauseKind::Softirq { vector: w.id },
                TIMER_IRQ_DELAY => CauseKind::TimerIrqDelay,
                OTHER => CauseKind::Other,
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
        .map(|c| {
            let (kind, id, policy, prio, name) = parts(c);
            WireCause { kind, id, policy, prio, name: super::encode::truncate(name, NAME_BYTES).into(), ns: c.ns }
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
