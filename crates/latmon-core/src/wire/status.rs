// SPDX-License-Identifier: MIT
//! Status (kind 4): the agent's and one link's health, and the borrowed
//! shape the encoder writes it from (docs/wire-format.md, Status).

use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize, Serializer};

/// Per-probe health in Status. Cost fields are 0 when unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeHealth {
    pub id: u16,
    /// Failed map reads since start.
    pub read_errors: u64,
    /// Runs of the probe's BPF programs and the time spent in them since it
    /// started (latmon's own cost; shared programs split by events; 0: not
    /// measured).
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// A probe whose BPF programs the kernel skipped, in Status (revision 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeMissed {
    pub id: u16,
    /// Runs of the probe's programs the kernel skipped since it started
    /// (`recursion_misses`): events the probe never saw.
    pub missed: u64,
}

/// `Status::flags`: the agent is over its `overhead_budget` this interval.
pub const STATUS_OVER_BUDGET: u32 = 1 << 0;
/// `Status::flags`: a probe was detached over budget (latmon runs degraded).
pub const STATUS_DEGRADED: u32 = 1 << 1;
/// `Status::flags`: BPF run-time statistics are on (the cost fields mean
/// something).
pub const STATUS_COST_MEASURED: u32 = 1 << 2;

/// Agent and link health, sent with every Hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub boot_id: u32,
    pub time_ns: u64,
    /// Last summary sequence number sent.
    pub seq: u64,
    pub uptime_ns: u64,
    /// Frames (records) this output's queue dropped since start, and bytes.
    pub frames_dropped: u64,
    pub bytes_dropped: u64,
    /// Connected clients (socket outputs; 0 otherwise).
    pub clients: u32,
    pub probes: Vec<ProbeHealth>,
    /// Revision 1: `STATUS_*` bits (over budget, degraded, cost measured).
    pub flags: u32,
    /// Revision 1: CPU share of all of latmon's BPF programs over the last
    /// interval, parts per million of the machine's CPU capacity.
    pub bpf_cpu_ppm: u32,
    /// Revision 1: ids of probes detached over budget.
    pub detached: Vec<u16>,
    /// Revision 2: the probes of this part (ids within its `probes`) whose
    /// programs the kernel skipped, by id; only those with misses.
    pub missed: Vec<ProbeMissed>,
    /// Revision 3: this output's byte budget and how it fits it.
    pub link: LinkHealth,
    /// Revision 4: alert records this link shed over the alerts' share,
    /// per probe since start (ids within this part's `probes`, ascending;
    /// only those with some; sums to `link.alerts_shed` over the parts,
    /// less records of an unknown probe).
    pub shed: Vec<ProbeShed>,
    /// Revision 6: alert records lost before any output, per probe since
    /// start: refused by the probe's token bucket, the kernel buffer full,
    /// the agent's queue full (the JSON summary's `total_alerts_dropped`).
    /// Ids within this part's `probes`, ascending; only those with some.
    /// With `shed`, a receiver accounts for every alert the sender counted:
    /// alerts = records received + shed + dropped.
    pub dropped: Vec<ProbeDropped>,
}

/// Alert records of one probe a budgeted link shed (Status, revision 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeShed {
    pub id: u16,
    pub alerts_shed: u64,
}

/// Alert records of one probe lost before any output (Status, revision 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeDropped {
    pub id: u16,
    pub alerts_dropped: u64,
}

/// The degradation steps of a budgeted link, in the order they are taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Step {
    /// Full resolution, the agent's interval.
    #[default]
    None = 0,
    /// Coarser wire buckets (`LinkHealth::merge`).
    CoarseBuckets = 1,
    /// Quiet series rolled up into `FAMILY:other` (and coarse buckets).
    RollUp = 2,
    /// This link's summaries cover several agent intervals (and the above).
    LongerInterval = 3,
}

impl Step {
    pub fn from_byte(b: u8) -> Step {
        match b {
            0 => Step::None,
            1 => Step::CoarseBuckets,
            2 => Step::RollUp,
            _ => Step::LongerInterval,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Step::None => "none",
            Step::CoarseBuckets => "coarse buckets",
            Step::RollUp => "roll-up",
            Step::LongerInterval => "longer interval",
        }
    }
}

/// A link's budget and use, in Status (revision 3). All zero: unlimited
/// output, nothing to say (left out on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkHealth {
    /// Bytes per second this output may use (0: unlimited).
    pub budget_bps: u32,
    /// Bytes per second it queued over the last [`USE_WINDOW_NS`].
    pub used_bps: u32,
    /// [`Step`] as a byte.
    pub step: u8,
    /// Wire bucket merge (see [`coarsen`](super::coarsen)).
    pub merge: u8,
    /// Series rolled up into `FAMILY:other` entries.
    pub rolled: u16,
    /// This link's summary interval (agent intervals per summary times the
    /// agent's interval), milliseconds.
    pub interval_ms: u32,
    /// Every probe's cumulative state goes out at least this often, ms.
    pub keyframe_ms: u32,
    /// Alert records not sent because alerts used up their share of the
    /// budget, since start.
    pub alerts_shed: u64,
    /// Agent intervals whose summary was folded into the next one (budget
    /// credit exhausted), since start: their counts are in the next delta.
    pub intervals_folded: u64,
}

/// The window over which `LinkHealth::used_bps` is measured.
pub const USE_WINDOW_NS: u64 = 10_000_000_000;

/// Serializes as nothing when all zero and nothing shed or dropped
/// (revision 2 bytes unchanged), the link alone when nothing was shed or
/// dropped (revision 3 bytes unchanged), the link and the per-probe shed
/// counts when nothing was dropped (revision 4 bytes unchanged), else all
/// three (revision 6).
pub(crate) struct TrailingLink<'a>(
    pub(crate) &'a LinkHealth,
    pub(crate) &'a [ProbeShed],
    pub(crate) &'a [ProbeDropped],
);

impl Serialize for TrailingLink<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (link, shed, dropped) = (self.0, self.1, self.2);
        if !dropped.is_empty() {
            let mut t = s.serialize_tuple(3)?;
            t.serialize_element(link)?;
            t.serialize_element(shed)?;
            t.serialize_element(dropped)?;
            t.end()
        } else if !shed.is_empty() {
            let mut t = s.serialize_tuple(2)?;
            t.serialize_element(link)?;
            t.serialize_element(shed)?;
            t.end()
        } else if *link != LinkHealth::default() {
            link.serialize(s)
        } else {
            s.serialize_tuple(0)?.end()
        }
    }
}

#[derive(Serialize)]
pub(crate) struct StatusRef<'a> {
    pub(crate) boot_id: u32,
    pub(crate) time_ns: u64,
    pub(crate) seq: u64,
    pub(crate) uptime_ns: u64,
    pub(crate) frames_dropped: u64,
    pub(crate) bytes_dropped: u64,
    pub(crate) clients: u32,
    pub(crate) probes: &'a [ProbeHealth],
    pub(crate) flags: u32,
    pub(crate) bpf_cpu_ppm: u32,
    pub(crate) detached: &'a [u16],
    pub(crate) missed: &'a [ProbeMissed],
    pub(crate) link: TrailingLink<'a>,
}
