// SPDX-License-Identifier: MIT
//! Top causes of a probe's alerted time per interval (pure model, no
//! I/O): "90 % of late time this interval: task hog". The kernel keeps a
//! bounded table per alert id (bpf/causes.bpf.h, limits in bpf/latmon.h)
//! that every alert adds its anatomy to, whether its record was sent or
//! refused; this module turns two reads of it into the interval's causes,
//! largest first.
//!
//! A cause is kind + id ([`CauseId`]); names (a task's comm, an IRQ's
//! action names) are filled in by the I/O edge that reads the table.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, SerializeStruct, Serializer};

use crate::anatomy::{BlockedOn, Cause, CauseKind, SOFTIRQ_NAMES};
use crate::bpf::limits::{
    CAUSE_IRQ, CAUSE_IRQ_REST, CAUSE_OTHER, CAUSE_SLOTS, CAUSE_SOFTIRQ, CAUSE_TASK, CAUSE_TASK_REST,
    CAUSE_TIMER_IRQ_DELAY,
};
use crate::text::{keep_piece, push_clean, Ns};

/// What a tally entry is about (the kernel's key: kind << 32 | id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CauseId {
    /// Another task held the waiting CPU (its thread id).
    Task { pid: u32 },
    /// Tasks beyond an anatomy's per-record limit.
    TaskRest,
    /// A hard-IRQ handler.
    Irq { irq: u32 },
    /// IRQs beyond the per-record limit.
    IrqRest,
    /// A softirq vector.
    Softirq { vector: u32 },
    /// timer: intended expiry -> the expiry handled.
    TimerIrqDelay,
    /// The remainder (scheduler, unaccounted; all of an alert without an
    /// anatomy).
    Other,
    /// cycle: the loop's own time on a CPU (a missed cycle's part; no
    /// kernel tally has it).
    Running,
    /// cycle: a voluntary sleep inside the cycle, by what it slept on
    /// (`BlockedOn::code`).
    Blocked { on: u32 },
    /// cycle: page faults taken in the cycle (their timed part).
    PageFaults,
    /// cycle: a release that passed while the thread was stopped.
    Stopped,
    /// cycle: a release that had passed when the loop asked to sleep.
    Backlog,
    /// A kind this build does not know.
    Unknown { kind: u32, id: u32 },
}

/// Kind numbers of the cycle's execution parts, as the wire's cause kinds
/// (wire/messages.rs `cause_kind`): after bpf/latmon.h's LATMON_CAUSE_*,
/// which no kernel tally uses for them.
pub const CAUSE_RUNNING: usize = 8;
pub const CAUSE_BLOCKED: usize = 9;
pub const CAUSE_PAGE_FAULTS: usize = 10;
/// The release -> run gap of a cycle when not the timer's (wire kinds 13,
/// 14; after the lock's 11 and 12).
pub const CAUSE_STOPPED: usize = 13;
pub const CAUSE_BACKLOG: usize = 14;

impl CauseId {
    /// From a kernel key; None for 0 (an entry never used).
    pub fn from_key(key: u64) -> Option<CauseId> {
        let (kind, id) = ((key >> 32) as u32 as usize, key as u32);
        Some(match kind {
            0 if id == 0 => return None,
            CAUSE_TASK => CauseId::Task { pid: id },
            CAUSE_TASK_REST => CauseId::TaskRest,
            CAUSE_IRQ => CauseId::Irq { irq: id },
            CAUSE_IRQ_REST => CauseId::IrqRest,
            CAUSE_SOFTIRQ => CauseId::Softirq { vector: id },
            CAUSE_TIMER_IRQ_DELAY => CauseId::TimerIrqDelay,
            CAUSE_OTHER => CauseId::Other,
            CAUSE_RUNNING => CauseId::Running,
            CAUSE_BLOCKED => CauseId::Blocked { on: id },
            CAUSE_PAGE_FAULTS => CauseId::PageFaults,
            CAUSE_STOPPED => CauseId::Stopped,
            CAUSE_BACKLOG => CauseId::Backlog,
            _ => CauseId::Unknown { kind: kind as u32, id },
        })
    }

    /// The kind's number (bpf/latmon.h's LATMON_CAUSE_*; Modbus register).
    pub fn code(self) -> u16 {
        (match self {
            CauseId::Task { .. } => CAUSE_TASK,
            CauseId::TaskRest => CAUSE_TASK_REST,
            CauseId::Irq { .. } => CAUSE_IRQ,
            CauseId::IrqRest => CAUSE_IRQ_REST,
            CauseId::Softirq { .. } => CAUSE_SOFTIRQ,
            CauseId::TimerIrqDelay => CAUSE_TIMER_IRQ_DELAY,
            CauseId::Other => CAUSE_OTHER,
            CauseId::Running => CAUSE_RUNNING,
            CauseId::Blocked { .. } => CAUSE_BLOCKED,
            CauseId::PageFaults => CAUSE_PAGE_FAULTS,
            CauseId::Stopped => CAUSE_STOPPED,
            CauseId::Backlog => CAUSE_BACKLOG,
            CauseId::Unknown { kind, .. } => kind.min(u32::from(u16::MAX)) as usize,
        }) as u16
    }

    /// The id within the kind: thread id, IRQ number, vector, what a
    /// blocked cycle slept on; else 0.
    pub fn id(self) -> u32 {
        match self {
            CauseId::Task { pid } => pid,
            CauseId::Blocked { on } => on,
            CauseId::Irq { irq } => irq,
            CauseId::Softirq { vector } => vector,
            CauseId::Unknown { id, .. } => id,
            _ => 0,
        }
    }

    /// The JSON/Prometheus word of the kind (as in alert records' causes).
    pub fn word(self) -> &'static str {
        match self {
            CauseId::Task { .. } | CauseId::TaskRest => "task",
            CauseId::Irq { .. } | CauseId::IrqRest => "irq",
            CauseId::Softirq { .. } => "softirq",
            CauseId::TimerIrqDelay => "timer_irq_delay",
            CauseId::Other => "other",
            CauseId::Running => "running",
            CauseId::Blocked { .. } => "blocked",
            CauseId::PageFaults => "page_faults",
            CauseId::Stopped => "stopped",
            CauseId::Backlog => "backlog",
            CauseId::Unknown { .. } => "unknown",
        }
    }
}

/// One read of a kernel tally (struct latmon_cause_tally): cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TallyRead {
    pub alerts: u64,
    pub alerted_ns: u64,
    pub folded_ns: u64,
    pub folded_parts: u64,
    /// (key, ns) per entry.
    pub slots: [(u64, u64); CAUSE_SLOTS],
}

/// One cause of an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopCause {
    pub id: CauseId,
    /// A task's comm or an IRQ's action names (the edge fills it; may be
    /// empty: a task gone, an IRQ not in /proc/interrupts).
    pub name: String,
    pub ns: u64,
}

/// The causes of a probe's alerted time in one interval (JSON
/// `alert_causes`). `causes`' ns plus `folded_ns` sum to `alerted_ns`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CauseSummary {
    /// Alerts in the interval, their records sent or refused.
    pub alerts: u64,
    /// The sum of their latencies.
    pub alerted_ns: u64,
    /// Largest first (ties: by id), at most CAUSE_SLOTS, none zero.
    pub causes: Vec<TopCause>,
    /// Time of causes that found no entry in the kernel's table, and how
    /// many alert parts that was.
    pub folded_ns: u64,
    pub folded_parts: u64,
    /// Since the probe started: alerts and alerted time (Prometheus
    /// counters).
    pub total_alerts: u64,
    pub total_alerted_ns: u64,
}

impl CauseSummary {
    /// The interval between reads `prev` and `cur` of one tally. Reuses
    /// the cause list and its names' buffers (names are cleared: the edge
    /// fills them). An entry's growth since `prev` belongs to the cause
    /// `cur` names (the kernel frees an entry only after a whole epoch
    /// without additions, so the read before saw its old cause's all).
    pub fn fill(&mut self, prev: &TallyRead, cur: &TallyRead) {
        self.alerts = cur.alerts.saturating_sub(prev.alerts);
        self.alerted_ns = cur.alerted_ns.saturating_sub(prev.alerted_ns);
        self.folded_ns = cur.folded_ns.saturating_sub(prev.folded_ns);
        self.folded_parts = cur.folded_parts.saturating_sub(prev.folded_parts);
        (self.total_alerts, self.total_alerted_ns) = (cur.alerts, cur.alerted_ns);
        let mut n = 0;
        for (&(key, ns), &(_, was)) in cur.slots.iter().zip(&prev.slots) {
            let (Some(id), d) = (CauseId::from_key(key), ns.saturating_sub(was)) else { continue };
            if d == 0 {
                continue;
            }
            // Two CPUs may have claimed two entries for one new cause.
            if let Some(c) = self.causes[..n].iter_mut().find(|c| c.id == id) {
                c.ns += d;
                continue;
            }
            if n == self.causes.len() {
                self.causes.push(TopCause { id, name: String::new(), ns: d });
            } else {
                let c = &mut self.causes[n];
                (c.id, c.ns) = (id, d);
                c.name.clear();
            }
            n += 1;
        }
        self.causes.truncate(n);
        self.causes.sort_unstable_by(|a, b| b.ns.cmp(&a.ns).then(a.id.cmp(&b.id)));
    }

    /// `self = o`, reusing the cause list and its names' buffers.
    pub fn copy_from(&mut self, o: &CauseSummary) {
        (self.alerts, self.alerted_ns, self.folded_ns, self.folded_parts) =
            (o.alerts, o.alerted_ns, o.folded_ns, o.folded_parts);
        (self.total_alerts, self.total_alerted_ns) = (o.total_alerts, o.total_alerted_ns);
        self.causes.truncate(o.causes.len());
        for (i, c) in o.causes.iter().enumerate() {
            match self.causes.get_mut(i) {
                Some(d) => {
                    (d.id, d.ns) = (c.id, c.ns);
                    d.name.clear();
                    d.name.push_str(&c.name);
                }
                None => self.causes.push(c.clone()),
            }
        }
    }

    /// The largest cause, if any time was alerted.
    pub fn top(&self) -> Option<&TopCause> {
        self.causes.first()
    }

    /// `ns` as a share of the alerted time (0..1).
    pub fn share(&self, ns: u64) -> f64 {
        if self.alerted_ns == 0 {
            0.0
        } else {
            ns as f64 / self.alerted_ns as f64
        }
    }

    /// `ns` as a share of the alerted time in 0.01 % (0..=10000; Modbus).
    pub fn share_basis_points(&self, ns: u64) -> u16 {
        if self.alerted_ns == 0 {
            return 0;
        }
        (u128::from(ns.min(self.alerted_ns)) * 10_000 / u128::from(self.alerted_ns)) as u16
    }

    /// `alerted 812 us in 3 alerts: 91.2% hog[4242], 5.0% other, ...`
    /// (the first `max` causes; printable ASCII only).
    pub fn render_into(&self, s: &mut String, max: usize) {
        s.push_str("alerted ");
        self.render_line_into(s, max, usize::MAX);
    }

    /// [`render_into`](Self::render_into) for one terminal line: without
    /// the word "alerted" (`812 us in 3 alerts: 91.2% hog[4242], ...`), and
    /// only whole causes, within `width` bytes from `s`'s length on entry.
    /// A cause that does not fit ends the list with `~`, so a technician
    /// reads `45.8% other` or nothing, never `45.8% ot`.
    pub fn render_line_into(&self, s: &mut String, max: usize, width: usize) {
        let start = s.len();
        let _ = write!(s, "{} in {} alerts:", Ns(self.alerted_ns), self.alerts);
        self.causes_into(s, start, max, width);
    }

    /// A cycle probe's missed time, as [`render_into`](Self::render_into)
    /// says alerted time: `missed 2.72ms in 2 misses: 47.8% hog[4242], ...`.
    pub fn render_misses_into(&self, s: &mut String, max: usize) {
        let start = s.len();
        let _ = write!(s, "missed {} in {} misses:", Ns(self.alerted_ns), self.alerts);
        self.causes_into(s, start, max, usize::MAX);
    }

    /// The causes after a line's head (which starts at `start`).
    fn causes_into(&self, s: &mut String, start: usize, max: usize, width: usize) {
        let shown = self.causes.len().min(max);
        for (i, c) in self.causes.iter().take(max).enumerate() {
            let before = s.len();
            s.push_str(if i == 0 { " " } else { ", " });
            let _ = write!(s, "{:.1}% ", self.share(c.ns) * 100.0);
            c.label_into(s);
            let more = i + 1 < shown || self.folded_ns > 0;
            if !keep_piece(s, start, before, width, more, if i == 0 { " ~" } else { ", ~" }) {
                return;
            }
        }
        if self.folded_ns > 0 {
            let before = s.len();
            let _ = write!(s, "; folded {:.1}% ({} parts)", self.share(self.folded_ns) * 100.0, self.folded_parts);
            keep_piece(s, start, before, width, false, "; ~");
        }
    }
}

/// Distinct causes a cycle probe's missed time is summed by per interval;
/// the rest is folded (`folded_ns`, `folded_parts`). As the kernel's
/// tables for alerts.
pub const MISS_CAUSES_MAX: usize = CAUSE_SLOTS;

impl CauseSummary {
    /// Start an interval of a cycle probe's missed time: the interval's
    /// sums cleared, the totals kept, the cause list's buffers kept.
    pub fn begin_misses(&mut self) {
        (self.alerts, self.alerted_ns, self.folded_ns, self.folded_parts) = (0, 0, 0, 0);
        self.causes.clear();
    }

    /// Add one missed cycle (its record's release -> done time and the
    /// parts that sum to it) to the interval: each part to its cause by
    /// identity (a task by thread id, an IRQ by number, a sleep by what it
    /// slept on), at most [`MISS_CAUSES_MAX`] causes, the rest folded. A
    /// record without parts counts as `other`. Keep the list sorted with
    /// [`end_misses`](Self::end_misses).
    pub fn add_miss(&mut self, latency_ns: u64, parts: &[Cause]) {
        self.alerts += 1;
        self.alerted_ns = self.alerted_ns.saturating_add(latency_ns);
        self.total_alerts += 1;
        self.total_alerted_ns = self.total_alerted_ns.saturating_add(latency_ns);
        if parts.is_empty() {
            self.add_part(CauseId::Other, "", latency_ns);
        }
        for p in parts {
            let (id, name) = match &p.kind {
                CauseKind::Task { comm, pid, .. } => (CauseId::Task { pid: *pid }, comm.as_str()),
                CauseKind::TaskRest => (CauseId::TaskRest, ""),
                CauseKind::Irq { irq, name } => (CauseId::Irq { irq: *irq }, name.as_str()),
                CauseKind::IrqRest => (CauseId::IrqRest, ""),
                CauseKind::Softirq { vector } => (CauseId::Softirq { vector: *vector }, ""),
                CauseKind::TimerIrqDelay => (CauseId::TimerIrqDelay, ""),
                CauseKind::Running => (CauseId::Running, ""),
                CauseKind::Blocked { on, syscall } => (CauseId::Blocked { on: on.code() }, syscall.as_str()),
                CauseKind::PageFaults { .. } => (CauseId::PageFaults, ""),
                CauseKind::Stopped => (CauseId::Stopped, ""),
                CauseKind::Backlog => (CauseId::Backlog, ""),
                // The owner's own time is a task's; an inversion's, each
                // preempter's own (as the wire carries it), the folded
                // rest the other tasks'.
                CauseKind::Owner { owner } => (CauseId::Task { pid: owner.tid }, owner.comm.as_str()),
                CauseKind::Inversion { preempted_by, .. } => {
                    let mut named = 0u64;
                    for q in preempted_by {
                        self.add_part(CauseId::Task { pid: q.pid }, &q.comm, q.ns);
                        named = named.saturating_add(q.ns);
                    }
                    self.add_part(CauseId::TaskRest, "", p.ns.saturating_sub(named));
                    continue;
                }
                CauseKind::Unknown { code } => (CauseId::Unknown { kind: u32::from(*code), id: 0 }, ""),
                CauseKind::Other => (CauseId::Other, ""),
            };
            self.add_part(id, name, p.ns);
        }
    }

    fn add_part(&mut self, id: CauseId, name: &str, ns: u64) {
        if ns == 0 {
            return;
        }
        if let Some(c) = self.causes.iter_mut().find(|c| c.id == id) {
            c.ns = c.ns.saturating_add(ns);
            if c.name.is_empty() && !name.is_empty() {
                c.name.push_str(name);
            }
        } else if self.causes.len() < MISS_CAUSES_MAX {
            self.causes.push(TopCause { id, name: name.to_string(), ns });
        } else {
            self.folded_ns = self.folded_ns.saturating_add(ns);
            self.folded_parts += 1;
        }
    }

    /// The interval's causes largest first (ties: by id).
    pub fn end_misses(&mut self) {
        self.causes.sort_unstable_by(|a, b| b.ns.cmp(&a.ns).then(a.id.cmp(&b.id)));
    }
}

/// A cycle probe's [`CauseSummary`] of missed time, in JSON (its probe
/// line's missed-time object, extra.rs): `misses` (the interval's missed
/// cycles that sent a record) and
/// `missed_ns` (their release -> done times summed) instead of alerts.
pub struct MissCausesJson<'a>(pub &'a CauseSummary);

impl Serialize for MissCausesJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut st = ser.serialize_struct("MissCauses", 5)?;
        st.serialize_field("misses", &c.alerts)?;
        st.serialize_field("missed_ns", &c.alerted_ns)?;
        st.serialize_field("causes", &Causes(c))?;
        st.serialize_field("folded_ns", &c.folded_ns)?;
        st.serialize_field("folded_parts", &c.folded_parts)?;
        st.end()
    }
}

impl TopCause {
    /// A short label: `hog[4242]`, `irq 36 virtio1`, `softirq NET_RX`,
    /// `other tasks`, `timer irq delay`, `other` (printable ASCII only).
    pub fn label_into(&self, s: &mut String) {
        match self.id {
            CauseId::Task { pid } => {
                push_clean(s, if self.name.is_empty() { "?" } else { &self.name });
                let _ = write!(s, "[{pid}]");
            }
            CauseId::TaskRest => s.push_str("other tasks"),
            CauseId::Irq { irq } => {
                let _ = write!(s, "irq {irq}");
                if !self.name.is_empty() {
                    s.push(' ');
                    push_clean(s, &self.name);
                }
            }
            CauseId::IrqRest => s.push_str("other irqs"),
            CauseId::Softirq { vector } => {
                s.push_str("softirq ");
                push_vector(s, vector);
            }
            CauseId::TimerIrqDelay => s.push_str("timer irq delay"),
            CauseId::Other => s.push_str("other"),
            CauseId::Running => s.push_str("running"),
            CauseId::Blocked { on } => {
                s.push_str("blocked ");
                s.push_str(BlockedOn::from_code(on).word());
                if !self.name.is_empty() {
                    s.push(' ');
                    push_clean(s, &self.name);
                }
            }
            CauseId::PageFaults => s.push_str("page faults"),
            CauseId::Stopped => s.push_str("stopped"),
            CauseId::Backlog => s.push_str("backlog"),
            CauseId::Unknown { kind, id } => {
                let _ = write!(s, "cause#{kind}:{id}");
            }
        }
    }
}

fn push_vector(s: &mut String, vector: u32) {
    match SOFTIRQ_NAMES.get(vector as usize) {
        Some(n) => s.push_str(n),
        None => {
            let _ = write!(s, "vec{vector}");
        }
    }
}

/// 4 decimals: shares read as 0.9123.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// A cause with its share of the interval's alerted time.
struct Shared<'a>(&'a TopCause, f64);

impl Serialize for Shared<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("kind", c.id.word())?;
        match c.id {
            CauseId::Task { pid } => {
                m.serialize_entry("pid", &pid)?;
                m.serialize_entry("comm", &c.name)?;
            }
            CauseId::TaskRest | CauseId::IrqRest => m.serialize_entry("rest", &true)?,
            CauseId::Irq { irq } => {
                m.serialize_entry("irq", &irq)?;
                m.serialize_entry("name", &c.name)?;
            }
            CauseId::Softirq { vector } => {
                let mut v = String::new();
                push_vector(&mut v, vector);
                m.serialize_entry("vector", &v)?;
            }
            CauseId::Unknown { kind, id } => {
                m.serialize_entry("code", &kind)?;
                m.serialize_entry("id", &id)?;
            }
            CauseId::Blocked { on } => {
                m.serialize_entry("on", BlockedOn::from_code(on).word())?;
                m.serialize_entry("syscall", &c.name)?;
            }
            CauseId::TimerIrqDelay
            | CauseId::Other
            | CauseId::Running
            | CauseId::PageFaults
            | CauseId::Stopped
            | CauseId::Backlog => {}
        }
        m.serialize_entry("ns", &c.ns)?;
        m.serialize_entry("share", &round4(self.1))?;
        m.end()
    }
}

struct Causes<'a>(&'a CauseSummary);

impl Serialize for Causes<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_seq(self.0.causes.iter().map(|c| Shared(c, self.0.share(c.ns))))
    }
}

impl Serialize for CauseSummary {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut st = ser.serialize_struct("CauseSummary", 5)?;
        st.serialize_field("alerts", &self.alerts)?;
        st.serialize_field("alerted_ns", &self.alerted_ns)?;
        st.serialize_field("causes", &Causes(self))?;
        st.serialize_field("folded_ns", &self.folded_ns)?;
        st.serialize_field("folded_parts", &self.folded_parts)?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: usize, id: u32) -> u64 {
        (kind as u64) << 32 | u64::from(id)
    }

    fn read(alerts: u64, alerted_ns: u64, slots: &[(u64, u64)]) -> TallyRead {
        let mut r = TallyRead { alerts, alerted_ns, ..Default::default() };
        r.slots[..slots.len()].copy_from_slice(slots);
        r
    }

    #[test]
    fn an_interval_is_the_growth_per_cause_largest_first() {
        let prev = read(10, 1_000, &[(key(CAUSE_TASK, 42), 600), (key(CAUSE_OTHER, 0), 400)]);
        let cur =
            read(13, 5_000, &[(key(CAUSE_TASK, 42), 4_200), (key(CAUSE_OTHER, 0), 700), (key(CAUSE_IRQ, 36), 100)]);
        let mut s = CauseSummary::default();
        s.fill(&prev, &cur);
        assert_eq!((s.alerts, s.alerted_ns), (3, 4_000));
        let got: Vec<(CauseId, u64)> = s.causes.iter().map(|c| (c.id, c.ns)).collect();
        assert_eq!(
            got,
            vec![(CauseId::Task { pid: 42 }, 3_600), (CauseId::Other, 300), (CauseId::Irq { irq: 36 }, 100)]
        );
        assert_eq!(s.causes.iter().map(|c| c.ns).sum::<u64>() + s.folded_ns, s.alerted_ns);
        assert_eq!(s.share_basis_points(3_600), 9_000);
        s.causes[0].name = "hog".into();
        let mut t = String::new();
        s.render_into(&mut t, 2);
        assert_eq!(t, "alerted 4.00us in 3 alerts: 90.0% hog[42], 7.5% other");
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["causes"][0],
            serde_json::json!({"kind": "task", "pid": 42, "comm": "hog", "ns": 3600, "share": 0.9})
        );
        assert_eq!(
            v["causes"][2],
            serde_json::json!({"kind": "irq", "irq": 36, "name": "", "ns": 100, "share": 0.025})
        );
        assert_eq!((v["alerts"].as_u64(), v["alerted_ns"].as_u64()), (Some(3), Some(4_000)));
    }

    #[test]
    fn a_terminal_line_holds_whole_causes_within_its_width() {
        // The field case: a FIFO hog and the rest, after "late timer: ".
        let hog = TopCause { id: CauseId::Task { pid: 8705 }, name: "stress-ng-cpu".into(), ns: 392_479_000 };
        let other = TopCause { id: CauseId::Other, name: String::new(), ns: 332_269_000 };
        let mut s =
            CauseSummary { alerts: 25, alerted_ns: 725_478_000, causes: vec![hog, other], ..CauseSummary::default() };
        let width = 79 - "late timer: ".len();
        let mut t = String::new();
        s.render_line_into(&mut t, 3, width);
        assert_eq!(t, "725.48ms in 25 alerts: 54.1% stress-ng-cpu[8705], 45.8% other");
        // Narrower: the cause that does not fit is left out whole, and so is
        // one that would leave no room for the marker.
        t.clear();
        s.render_line_into(&mut t, 3, 55);
        assert_eq!(t, "725.48ms in 25 alerts: 54.1% stress-ng-cpu[8705], ~");
        t.clear();
        s.render_line_into(&mut t, 3, 30);
        assert_eq!(t, "725.48ms in 25 alerts: ~");
        // The folded part is one more piece to fit.
        s.folded_ns = 1_000_000;
        s.folded_parts = 9;
        t.clear();
        s.render_line_into(&mut t, 3, 200);
        assert!(t.ends_with(", 45.8% other; folded 0.1% (9 parts)"), "{t}");
        // Every width from the head's up: within it, ending at a whole
        // piece or the marker.
        let head = "725.48ms in 25 alerts:".len();
        for w in head + 2..120 {
            t.clear();
            s.render_line_into(&mut t, 3, w);
            assert!(t.len() <= w, "{w}: {t:?}");
            assert!(t.ends_with('~') || t.ends_with("other") || t.ends_with("parts)"), "{w}: {t:?}");
        }
    }

    #[test]
    fn a_taken_over_entry_counts_its_growth_for_its_new_cause_and_duplicates_merge() {
        // Entry 0 went from task 42 (stale) to softirq NET_RX: its growth
        // since the last read is NET_RX's. Entries 1 and 2 both hold task
        // 7 (two CPUs claimed at once): merged.
        let prev = read(1, 100, &[(key(CAUSE_TASK, 42), 100)]);
        let cur = read(
            4,
            1_100,
            &[(key(CAUSE_SOFTIRQ, 3), 400), (key(CAUSE_TASK, 7), 250), (key(CAUSE_TASK, 7), 250), (0, 0)],
        );
        let mut s = CauseSummary::default();
        s.fill(&prev, &cur);
        let got: Vec<(CauseId, u64)> = s.causes.iter().map(|c| (c.id, c.ns)).collect();
        assert_eq!(got, vec![(CauseId::Task { pid: 7 }, 500), (CauseId::Softirq { vector: 3 }, 300)]);
        // Reuse: a quieter interval shortens the list and clears names.
        s.causes[0].name = "x".into();
        let cap = s.causes.capacity();
        let later =
            read(5, 1_150, &[(key(CAUSE_SOFTIRQ, 3), 450), (key(CAUSE_TASK, 7), 250), (key(CAUSE_TASK, 7), 250)]);
        s.fill(&cur, &later);
        assert_eq!(s.causes, vec![TopCause { id: CauseId::Softirq { vector: 3 }, name: String::new(), ns: 50 }]);
        assert_eq!(s.causes.capacity(), cap);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["causes"][0]["vector"], "NET_RX");
        // Counters that went backwards (a reloaded probe) saturate.
        s.fill(&later, &TallyRead::default());
        assert_eq!((s.alerts, s.alerted_ns, s.causes.len()), (0, 0, 0));
        assert_eq!(s.share_basis_points(5), 0);
    }

    #[test]
    fn keys_kinds_and_words() {
        assert_eq!(CauseId::from_key(0), None);
        for (kind, id, want, word) in [
            (CAUSE_TASK, 9, CauseId::Task { pid: 9 }, "task"),
            (CAUSE_TASK_REST, 0, CauseId::TaskRest, "task"),
            (CAUSE_IRQ, 36, CauseId::Irq { irq: 36 }, "irq"),
            (CAUSE_IRQ_REST, 0, CauseId::IrqRest, "irq"),
            (CAUSE_SOFTIRQ, 3, CauseId::Softirq { vector: 3 }, "softirq"),
            (CAUSE_TIMER_IRQ_DELAY, 0, CauseId::TimerIrqDelay, "timer_irq_delay"),
            (CAUSE_OTHER, 0, CauseId::Other, "other"),
            (99, 5, CauseId::Unknown { kind: 99, id: 5 }, "unknown"),
        ] {
            let c = CauseId::from_key(key(kind, id)).unwrap();
            assert_eq!((c, c.word(), c.code(), c.id()), (want, word, kind as u16, id));
        }
        // The wire's WireCause kinds are the same numbers.
        assert_eq!((CAUSE_TASK, CAUSE_IRQ, CAUSE_SOFTIRQ, CAUSE_OTHER), (1, 3, 5, 7));
    }

    #[test]
    fn a_cycles_missed_time_sums_its_records_parts_by_cause_and_folds_past_the_bound() {
        use crate::anatomy::{BlockedOn, Cause, CauseKind, Policy};
        let task = |pid: u32, ns: u64| Cause {
            kind: CauseKind::Task { comm: format!("t{pid}"), pid, policy: Policy::Fifo, prio: 50 },
            ns,
        };
        let io = Cause { kind: CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, ns: 300 };
        let mut c = CauseSummary::default();
        c.begin_misses();
        c.add_miss(1_000, &[Cause { kind: CauseKind::Running, ns: 600 }, io.clone(), task(7, 100)]);
        c.add_miss(500, &[Cause { kind: CauseKind::Running, ns: 200 }, io, task(7, 0), task(8, 0)]);
        c.add_miss(50, &[]);
        c.end_misses();
        assert_eq!((c.alerts, c.alerted_ns, c.total_alerts), (3, 1_550, 3));
        let got: Vec<(CauseId, &str, u64)> = c.causes.iter().map(|x| (x.id, x.name.as_str(), x.ns)).collect();
        assert_eq!(
            got,
            [
                (CauseId::Running, "", 800),
                (CauseId::Blocked { on: 1 }, "fdatasync", 600),
                (CauseId::Task { pid: 7 }, "t7", 100),
                (CauseId::Other, "", 50),
            ]
        );
        // Parts sum to the missed time (nothing lost uncounted).
        assert_eq!(c.causes.iter().map(|x| x.ns).sum::<u64>() + c.folded_ns, c.alerted_ns);
        let v = serde_json::to_value(MissCausesJson(&c)).unwrap();
        assert_eq!((v["misses"].as_u64(), v["missed_ns"].as_u64()), (Some(3), Some(1_550)));
        assert_eq!(v["causes"][1]["kind"], "blocked");
        assert_eq!(
            (v["causes"][1]["on"].as_str(), v["causes"][1]["syscall"].as_str()),
            (Some("io"), Some("fdatasync"))
        );
        let mut line = String::new();
        c.causes[1].label_into(&mut line);
        assert_eq!(line, "blocked io fdatasync");
        line.clear();
        c.render_misses_into(&mut line, 2);
        assert_eq!(line, "missed 1.55us in 3 misses: 51.6% running, 38.7% blocked io fdatasync");
        // A new interval keeps the totals only; more causes than the bound fold.
        c.begin_misses();
        let many: Vec<Cause> = (0..MISS_CAUSES_MAX as u32 + 3).map(|p| task(100 + p, 10)).collect();
        c.add_miss(many.len() as u64 * 10, &many);
        c.end_misses();
        assert_eq!((c.alerts, c.total_alerts, c.causes.len()), (1, 4, MISS_CAUSES_MAX));
        assert_eq!((c.folded_ns, c.folded_parts), (30, 3));
        assert_eq!(CauseId::from_key((CAUSE_BLOCKED as u64) << 32 | 1), Some(CauseId::Blocked { on: 1 }));
        // A cycle's gap when not the timer's (issue 40 item 8).
        for (id, code, word) in [(CauseId::Stopped, 13, "stopped"), (CauseId::Backlog, 14, "backlog")] {
            assert_eq!((id.code(), id.word(), CauseId::from_key((code as u64) << 32)), (code, word, Some(id)));
        }
        assert_eq!((CauseId::Running.code(), CauseId::PageFaults.word()), (8, "page_faults"));
    }
}
