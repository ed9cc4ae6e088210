// SPDX-License-Identifier: MIT
//! The messages and their postcard shapes (docs/wire-format.md, Messages).

use std::fmt;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, SerializeTuple};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::cycle::{CycleOut, WireCycle};
use super::status::Status;
pub(crate) use super::thresholds::HelloTail;
pub use super::thresholds::ProbeThreshold;
use super::WireCertificate;
use crate::anatomy::{Cause, CauseKind, OwnerFrom, Policy};
use crate::bpf::limits::{HIST_MAX_LOG2, HIST_SUB_BITS};
use crate::hist::{Hist, BUCKETS};
use crate::summary::AlertRecord;
use crate::text::truncate;

/// How a probe's histogram buckets map to nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketScheme {
    /// 0 = log-linear (hist.rs): one bucket per value below 2^sub_bits, then
    /// 2^sub_bits linear buckets per power of two up to 2^max_log2.
    pub family: u8,
    pub sub_bits: u8,
    pub max_log2: u8,
}

impl BucketScheme {
    /// The scheme this build of latmon uses (from bpf/latmon.h).
    pub const LATMON: BucketScheme =
        BucketScheme { family: 0, sub_bits: HIST_SUB_BITS as u8, max_log2: HIST_MAX_LOG2 as u8 };
}

/// One row of the probe table in Hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeDesc {
    /// Index used by Summary, Alert and Status (position in the agent's list).
    pub id: u16,
    pub name: String,
    pub kind: String,
    pub attach: String,
    pub mode: String,
    pub scheme: BucketScheme,
}

/// Who is talking: sent first and repeated periodically so a receiver that
/// joins late can name probes. A long probe table spans several Hello
/// frames (each carries a part of `probes`; `probe_count` is the total).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol_revision: u8,
    pub latmon_version: String,
    pub board: String,
    pub kernel: String,
    pub boot_id: u32,
    /// CLOCK_MONOTONIC when the agent started counting.
    pub start_ns: u64,
    pub interval_ns: u64,
    pub probe_count: u16,
    pub probes: Vec<ProbeDesc>,
    /// The alert threshold of each of `probes` that has one, by id
    /// (revision 9). Sent only when not empty (no byte otherwise: a Hello
    /// without thresholds is the revision 8 bytes); an older receiver
    /// stops reading before it.
    pub thresholds: Vec<ProbeThreshold>,
    /// The observer-effect certificate stored for the agent's config
    /// (revision 11), after `thresholds` (then sent even when empty:
    /// postcard is positional). Sent only when there is one (no byte
    /// otherwise: such a Hello is the revision 9 bytes); an older
    /// receiver stops reading before it. Left out of JSON when None (a
    /// `latmon decode` hello line keeps its older shape).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub certificate: Option<WireCertificate>,
}

/// Borrowed twin of [`Hello`] (same bytes) used to pack probe table parts.
#[derive(Serialize)]
pub(crate) struct HelloRef<'a> {
    pub(crate) protocol_revision: u8,
    pub(crate) latmon_version: &'a str,
    pub(crate) board: &'a str,
    pub(crate) kernel: &'a str,
    pub(crate) boot_id: u32,
    pub(crate) start_ns: u64,
    pub(crate) interval_ns: u64,
    pub(crate) probe_count: u16,
    pub(crate) probes: &'a [ProbeDesc],
    pub(crate) tail: HelloTail<'a>,
}

/// One probe's cumulative state in a Summary, for the bucket range
/// `first_bucket..end_bucket` (the whole range `0..BUCKETS` unless the probe
/// had to be split over several frames).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeCounts {
    pub id: u16,
    pub count: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub drops: u64,
    pub alerts: u64,
    pub first_bucket: u16,
    pub end_bucket: u16,
    /// Non-zero buckets in the range: (bucket index, cumulative count),
    /// ascending. On the wire each index is a gap from the previous one.
    pub buckets: Vec<(u16, u64)>,
}

/// Cumulative counts of every probe (or a part of them) at one instant: a
/// keyframe. On a budgeted link the agent keyframes a rolling part of the
/// probes each interval and sends [`Delta`]s for the rest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Summary {
    pub seq: u64,
    pub boot_id: u32,
    /// CLOCK_MONOTONIC at the end of the interval.
    pub time_ns: u64,
    /// The agent's final summary (flushed at exit).
    pub last: bool,
    pub probes: Vec<ProbeCounts>,
    /// Revision 3: wire bucket merge (0: full resolution; 1, 2, 3: 4, 2, 1
    /// buckets per power of two, see [`coarsen`]).
    pub merge: u8,
    /// Revision 3: the seq of this link's previous summary (0: not said;
    /// older senders, where a seq gap means summaries were lost).
    pub base_seq: u64,
}

impl Serialize for Summary {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let head = (self.seq, self.boot_id, self.time_ns, self.last);
        ser_summary(s, head, &self.probes, (self.merge, self.base_seq))
    }
}

/// A Summary body, owned or from the encoder's borrowed parts: `head` is
/// (seq, boot_id, time_ns, last), `link` the revision 3 (merge, base_seq),
/// left out when both are 0 (a receiver reads them as 0, and a revision 2
/// summary keeps its bytes).
pub(crate) fn ser_summary<S: Serializer, P: Serialize + ?Sized>(
    s: S,
    head: (u64, u32, u64, bool),
    probes: &P,
    link: (u8, u64),
) -> Result<S::Ok, S::Error> {
    let mut t = s.serialize_tuple(7)?;
    t.serialize_element(&head.0)?;
    t.serialize_element(&head.1)?;
    t.serialize_element(&head.2)?;
    t.serialize_element(&head.3)?;
    t.serialize_element(probes)?;
    if link != (0, 0) {
        t.serialize_element(&link.0)?;
        t.serialize_element(&link.1)?;
    }
    t.end()
}

/// What changed in one interval (kind 5, revision 3), for the probes with
/// ids `first_id..end_id`: each entry's count, sum, drops, alerts and
/// buckets are the interval's, min/max the interval's extremes (exact when
/// they moved the cumulative ones). A probe of the range without an entry
/// had no events. Applies on top of the state as of `base_seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub seq: u64,
    /// The seq of this link's previous summary: the state this applies to.
    pub base_seq: u64,
    pub boot_id: u32,
    pub time_ns: u64,
    pub last: bool,
    pub merge: u8,
    pub first_id: u16,
    pub end_id: u16,
    pub probes: Vec<ProbeCounts>,
    /// Ids of the range keyframed in this summary (their Summary frames
    /// carry them): if one did not arrive, that probe's state is behind.
    pub keyed: Vec<u16>,
    /// Ids of the range that are new entries (series born since the last
    /// summary): their state before this delta is zero.
    pub born: Vec<u16>,
}

/// A receiver asks the agent for something (kind 6, revision 3; sent
/// towards the agent on a two-way link such as a serial line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// [`REQUEST_HELLO`]: send the whole probe table now.
    pub what: u8,
}

/// `Request::what`: the full Hello (probe table) and a Status.
pub const REQUEST_HELLO: u8 = 1;

/// Merge wire buckets in place: with `merge` m, the counts of each group of
/// 2^m neighbouring sub-buckets of a power of two are carried at the
/// group's highest index (so percentiles read from them are upper bounds;
/// an older receiver still reads a valid histogram). Totals are unchanged.
pub fn coarsen(h: &mut Hist, merge: u8) {
    let mask = (1usize << merge.min(MAX_MERGE)) - 1;
    if mask == 0 {
        return;
    }
    for i in 0..BUCKETS {
        let j = (i | mask).min(BUCKETS - 1);
        if j != i && h.slots[i] != 0 {
            h.slots[j] += h.slots[i];
            h.slots[i] = 0;
        }
    }
}

/// Coarsest merge: one bucket per power of two (sub_bits 3 = 8 buckets).
pub const MAX_MERGE: u8 = 3;

/// A latency above a probe's threshold (mirrors `summary::AlertRecord`).
/// Revision 5 appends the anatomy (`cpu_woken`, `cpu_ran`, `causes`),
/// sent only when `causes` is not empty or a cycle half follows: an alert
/// without one keeps its older bytes, and an older sender's alert reads
/// as having none. Revision 8 appends the cycle half (`cycle`), sent
/// only for a cycle record ([`super::cycle`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    pub boot_id: u32,
    pub probe: u16,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cpu: u32,
    pub latency_ns: u64,
    pub time_ns: u64,
    pub cpu_woken: u32,
    pub cpu_ran: u32,
    /// At most `anatomy::MAX_CAUSES` (a receiver refuses more).
    pub causes: Vec<WireCause>,
    /// All zero: not a cycle record.
    pub cycle: WireCycle,
}

impl Alert {
    /// The record this Alert carries, as the agent made it: its anatomy
    /// and its family's mark (a cycle record's) read back, keyed by the
    /// frame's probe id.
    pub fn into_record(self) -> AlertRecord {
        AlertRecord {
            id: crate::ident::ProbeId(self.probe),
            pid: self.pid,
            tid: self.tid,
            comm: self.comm,
            cpu: self.cpu,
            latency_ns: self.latency_ns,
            time_ns: self.time_ns,
            anatomy: super::anatomy::from_wire(self.cpu_woken, self.cpu_ran, &self.causes),
            cycle: super::cycle::from_wire(&self.cycle),
        }
    }
}

/// One part of an alert's anatomy (revision 5). `kind`: 1 task, 2 the
/// folded rest of the tasks, 3 irq, 4 the folded rest of the IRQs, 5
/// softirq, 6 timer_irq_delay, 7 other; other values are a newer
/// sender's kinds. `id`: the task's pid, the IRQ number or the softirq
/// vector, else 0. `policy`, `prio`: a task's (else 0). `name`: a task's
/// comm or an IRQ's action names (at most 64 bytes), else empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCause {
    pub kind: u8,
    pub id: u32,
    pub policy: u8,
    pub prio: i32,
    pub name: String,
    pub ns: u64,
}

/// `WireCause::kind` values (the list in its description).
pub(super) mod cause_kind {
    pub(crate) const TASK: u8 = 1;
    pub(crate) const TASK_REST: u8 = 2;
    pub(crate) const IRQ: u8 = 3;
    pub(crate) const IRQ_REST: u8 = 4;
    pub(crate) const SOFTIRQ: u8 = 5;
    pub(crate) const TIMER_IRQ_DELAY: u8 = 6;
    pub(crate) const OTHER: u8 = 7;
    /// cycle's execution parts (id: the blocked kind, the fault count;
    /// name: the syscall).
    pub(crate) const RUNNING: u8 = 8;
    pub(crate) const BLOCKED: u8 = 9;
    pub(crate) const PAGE_FAULTS: u8 = 10;
    /// lock's (revision 10): a wait's owner (its own time on a CPU; id its
    /// thread id, policy its SCHED_* in the low nibble and where it was
    /// found in the high one) and an inversion's preempter (id its thread
    /// id; id 0 and no name: the inversion's folded rest).
    pub(crate) const OWNER: u8 = 11;
    pub(crate) const INVERSION: u8 = 12;
    /// cycle's release -> run gap when not the timer's: the thread was
    /// stopped, the loop's backlog. New values of an existing field, no
    /// new revision (nothing appended): an older receiver shows them as
    /// unknown kinds (`cause#13`), as its description allows.
    pub(crate) const STOPPED: u8 = 13;
    pub(crate) const BACKLOG: u8 = 14;
}

/// An owner Cause's `policy` byte: the SCHED_* number in the low nibble
/// (15: not known or larger), where the owner was found in the high one.
pub(super) fn owner_policy_byte(policy: Policy, from: OwnerFrom) -> u8 {
    (from.code() << 4) | policy.code().min(15) as u8
}

/// The inverse of [`owner_policy_byte`].
pub(super) fn owner_policy_of(b: u8) -> (Policy, OwnerFrom) {
    (Policy::from_code(u32::from(b & 15)), OwnerFrom::from_code(b >> 4))
}

/// `WireCause::name`: at most this many bytes (as comm).
pub(super) const CAUSE_NAME_BYTES: usize = super::MAX_ALERT_NAME_LEN;

/// One wire cause: (kind, id, policy, prio, name, ns).
pub(super) type Part<'a> = (u8, u32, u8, i32, &'a str, u64);

/// The wire causes of a model cause: one, except an inversion's, which
/// travels as one `inversion` cause per preempter it names (each with its
/// own time) and one without a name for the folded rest; the parts still
/// sum and a receiver sees every preempter's share (the owner is the
/// record's `owner` cause). Alloc-free.
pub(super) fn wire_parts(c: &Cause) -> impl Iterator<Item = Part<'_>> {
    let (whole, named, rest) = match &c.kind {
        CauseKind::Inversion { preempted_by, .. } => {
            let named: u64 = preempted_by.iter().map(|p| p.ns).sum();
            (None, preempted_by.as_slice(), c.ns.saturating_sub(named))
        }
        _ => {
            let (kind, id, policy, prio, name) = cause_parts(c);
            (Some((kind, id, policy, prio, name, c.ns)), &[][..], 0)
        }
    };
    let rest =
        (whole.is_none() && (rest > 0 || named.is_empty())).then_some((cause_kind::INVERSION, 0, 0, 0, "", rest));
    whole
        .into_iter()
        .chain(
            named
                .iter()
                .map(|p| (cause_kind::INVERSION, p.pid, p.policy.code().min(255) as u8, p.prio, p.comm.as_str(), p.ns)),
        )
        .chain(rest)
}

/// How many wire causes `causes` make (see [`wire_parts`]).
pub(crate) fn wire_count(causes: &[Cause]) -> usize {
    causes.iter().map(|c| wire_parts(c).count()).sum()
}

/// (kind, id, policy, prio, name) of a model cause other than an
/// inversion (see [`wire_parts`]).
fn cause_parts(c: &Cause) -> (u8, u32, u8, i32, &str) {
    match &c.kind {
        CauseKind::Task { comm, pid, policy, prio } => {
            (cause_kind::TASK, *pid, policy.code().min(255) as u8, *prio, comm)
        }
        CauseKind::TaskRest => (cause_kind::TASK_REST, 0, 0, 0, ""),
        CauseKind::Irq { irq, name } => (cause_kind::IRQ, *irq, 0, 0, name),
        CauseKind::IrqRest => (cause_kind::IRQ_REST, 0, 0, 0, ""),
        CauseKind::Softirq { vector } => (cause_kind::SOFTIRQ, *vector, 0, 0, ""),
        CauseKind::TimerIrqDelay => (cause_kind::TIMER_IRQ_DELAY, 0, 0, 0, ""),
        CauseKind::Running => (cause_kind::RUNNING, 0, 0, 0, ""),
        CauseKind::Blocked { on, syscall } => (cause_kind::BLOCKED, on.code(), 0, 0, syscall),
        CauseKind::PageFaults { count } => (cause_kind::PAGE_FAULTS, *count, 0, 0, ""),
        CauseKind::Stopped => (cause_kind::STOPPED, 0, 0, 0, ""),
        CauseKind::Backlog => (cause_kind::BACKLOG, 0, 0, 0, ""),
        CauseKind::Owner { owner: o } => {
            (cause_kind::OWNER, o.tid, owner_policy_byte(o.policy, o.from), o.prio, &o.comm)
        }
        // Expanded by wire_parts; never reached from there.
        CauseKind::Inversion { .. } => (cause_kind::INVERSION, 0, 0, 0, ""),
        CauseKind::Unknown { code } => (*code, 0, 0, 0, ""),
        CauseKind::Other => (cause_kind::OTHER, 0, 0, 0, ""),
    }
}

/// A wire part of a model cause serialized as a `WireCause`, without
/// building one.
struct PartRef<'a>(Part<'a>);

impl Serialize for PartRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (kind, id, policy, prio, name, ns) = self.0;
        let mut t = s.serialize_tuple(6)?;
        t.serialize_element(&kind)?;
        t.serialize_element(&id)?;
        t.serialize_element(&policy)?;
        t.serialize_element(&prio)?;
        t.serialize_element(truncate(name, CAUSE_NAME_BYTES))?;
        t.serialize_element(&ns)?;
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
            Causes::Model(c) => {
                // postcard needs the length first: an inversion is several.
                let mut seq = s.serialize_seq(Some(wire_count(c)))?;
                for part in c.iter().flat_map(wire_parts) {
                    seq.serialize_element(&PartRef(part))?;
                }
                seq.end()
            }
            Causes::Wire(c) => c.serialize(s),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct AlertRef<'a> {
    pub(crate) boot_id: u32,
    pub(crate) probe: u16,
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) comm: &'a str,
    pub(crate) cpu: u32,
    pub(crate) latency_ns: u64,
    pub(crate) time_ns: u64,
    pub(crate) trailing: Trailing<'a>,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Summary(Summary),
    Alert(Alert),
    Status(Status),
    Delta(Delta),
    Request(Request),
    Loops(super::LoopList),
    /// A kind this receiver does not know (a newer sender); skipped.
    Unknown {
        kind: u8,
        len: usize,
    },
}

// ------------------------------------------------- ProbeCounts (de)serialize

/// Serialize one probe entry from any source of (index, count) pairs.
pub(crate) fn ser_probe<S: Serializer, I: Iterator<Item = (u16, u64)> + Clone>(
    s: S,
    head: [u64; 7],
    first: u16,
    end: u16,
    n: usize,
    buckets: I,
) -> Result<S::Ok, S::Error> {
    struct Seq<I>(u16, usize, I);
    impl<I: Iterator<Item = (u16, u64)> + Clone> Serialize for Seq<I> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(self.1))?;
            let mut next = self.0;
            for (i, c) in self.2.clone() {
                seq.serialize_element(&(i.wrapping_sub(next), c))?;
                next = i.wrapping_add(1);
            }
            seq.end()
        }
    }
    let mut t = s.serialize_tuple(10)?;
    t.serialize_element(&(head[0] as u16))?;
    for v in &head[1..] {
        t.serialize_element(v)?;
    }
    t.serialize_element(&first)?;
    t.serialize_element(&end)?;
    t.serialize_element(&Seq(first, n, buckets))?;
    t.end()
}

impl Serialize for ProbeCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ser_probe(
            s,
            [self.id as u64, self.count, self.sum_ns, self.min_ns, self.max_ns, self.drops, self.alerts],
            self.first_bucket,
            self.end_bucket,
            self.buckets.len(),
            self.buckets.iter().copied(),
        )
    }
}

impl<'de> Deserialize<'de> for ProbeCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProbeCounts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a probe entry")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<ProbeCounts, A::Error> {
                let missing = || de::Error::custom("probe entry too short");
                let id: u16 = a.next_element()?.ok_or_else(missing)?;
                let mut head = [0u64; 6];
                for h in head.iter_mut() {
                    *h = a.next_element()?.ok_or_else(missing)?;
                }
                let first: u16 = a.next_element()?.ok_or_else(missing)?;
                let end: u16 = a.next_element()?.ok_or_else(missing)?;
                if first > end || end as usize > BUCKETS {
                    return Err(de::Error::custom("bucket range outside the histogram"));
                }
                let buckets = a.next_element_seed(BucketsSeed { first, end })?.ok_or_else(missing)?;
                Ok(ProbeCounts {
                    id,
                    count: head[0],
                    sum_ns: head[1],
                    min_ns: head[2],
                    max_ns: head[3],
                    drops: head[4],
                    alerts: head[5],
                    first_bucket: first,
                    end_bucket: end,
                    buckets,
                })
            }
        }
        d.deserialize_tuple(10, V)
    }
}

/// Reads the gap-coded bucket list, checking every index stays in range.
struct BucketsSeed {
    first: u16,
    end: u16,
}

impl<'de> DeserializeSeed<'de> for BucketsSeed {
    type Value = Vec<(u16, u64)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BucketsSeed {
    type Value = Vec<(u16, u64)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("sparse buckets")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        let room = (self.end - self.first) as usize;
        let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(room));
        let mut next = self.first as u32;
        while let Some((gap, c)) = a.next_element::<(u16, u64)>()? {
            let i = next + gap as u32;
            if i >= self.end as u32 {
                return Err(de::Error::custom("bucket index outside the entry's range"));
            }
            v.push((i as u16, c));
            next = i + 1;
        }
        Ok(v)
    }
}

/// The fields of an Alert after `time_ns`: the anatomy (revision 5) and
/// the cycle half (revision 8). Nothing without causes or cycle (an
/// alert keeps its revision 0 bytes), the anatomy alone without a cycle
/// (revision 5 bytes), else both.
pub(crate) struct Trailing<'a> {
    pub(crate) cpu_woken: u32,
    pub(crate) cpu_ran: u32,
    pub(crate) causes: Causes<'a>,
    pub(crate) cycle: Option<CycleOut<'a>>,
}

impl Serialize for Trailing<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = match (self.cycle.is_some(), self.causes.is_empty()) {
            (true, _) => 4,
            (false, false) => 3,
            (false, true) => return s.serialize_tuple(0)?.end(),
        };
        let mut t = s.serialize_tuple(n)?;
        t.serialize_element(&self.cpu_woken)?;
        t.serialize_element(&self.cpu_ran)?;
        t.serialize_element(&self.causes)?;
        if let Some(c) = &self.cycle {
            t.serialize_element(c)?;
        }
        t.end()
    }
}
