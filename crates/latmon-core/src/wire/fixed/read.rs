// SPDX-License-Identifier: MIT
//! The postcard reads of the fixed-memory receiver: a body checked as the
//! desktop decoder reads it (pass 1, [`check`]) and the heads and entries
//! the tracker applies (pass 2), borrowed from the frame buffer, nothing
//! copied or kept.

use serde::Deserialize;

use super::super::{Kind, WireCertificate, MAX_ALERT_NAME_LEN};
use crate::bpf::limits::ANAT_MAX_CAUSES;
use crate::hist::{bucket_bounds, BUCKETS};

pub(super) type Res<T> = postcard::Result<T>;

/// The postcard reads of one body, in wire order.
pub(super) struct Rd<'a>(pub(super) &'a [u8]);

impl<'a> Rd<'a> {
    pub(super) fn get<T: Deserialize<'a>>(&mut self) -> Res<T> {
        let (v, rest) = postcard::take_from_bytes::<T>(self.0)?;
        self.0 = rest;
        Ok(v)
    }
    pub(super) fn len(&mut self) -> Res<usize> {
        self.get::<usize>()
    }
}

pub(super) fn custom() -> postcard::Error {
    postcard::Error::SerdeDeCustom
}

/// The head of a probe entry (ProbeCounts without its buckets).
#[derive(Debug, Clone, Copy)]
pub(super) struct EntryHead {
    pub(super) id: u16,
    pub(super) count: u64,
    pub(super) min_ns: u64,
    pub(super) max_ns: u64,
    pub(super) drops: u64,
    pub(super) alerts: u64,
    pub(super) first: u16,
    pub(super) end: u16,
}

/// Read one ProbeCounts, calling `bucket` per (index, count), with the
/// desktop decoder's checks in its order.
pub(super) fn read_entry<'a>(r: &mut Rd<'a>, mut bucket: impl FnMut(&EntryHead, u16, u64)) -> Res<EntryHead> {
    let id: u16 = r.get()?;
    let count: u64 = r.get()?;
    let _sum_ns: u64 = r.get()?;
    let min_ns: u64 = r.get()?;
    let max_ns: u64 = r.get()?;
    let drops: u64 = r.get()?;
    let alerts: u64 = r.get()?;
    let first: u16 = r.get()?;
    let end: u16 = r.get()?;
    if first > end || end as usize > BUCKETS {
        return Err(custom());
    }
    let h = EntryHead { id, count, min_ns, max_ns, drops, alerts, first, end };
    let n = r.len()?;
    let mut next = first as u32;
    for _ in 0..n {
        let gap: u16 = r.get()?;
        let c: u64 = r.get()?;
        let i = next + gap as u32;
        if i >= end as u32 {
            return Err(custom());
        }
        bucket(&h, i as u16, c);
        next = i + 1;
    }
    Ok(h)
}

/// p50 and p99 found while the buckets stream by (ascending).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Quant {
    pub(super) below: u64,
    pub(super) p50: Option<u64>,
    pub(super) p99: Option<u64>,
}

/// Rank of quantile num/100 of `count` events (at least 1).
pub(super) fn rank(count: u64, num: u64) -> u64 {
    (((count as u128 * num as u128).div_ceil(100)) as u64).max(1)
}

impl Quant {
    pub(super) fn bucket(&mut self, h: &EntryHead, i: u16, c: u64) {
        if c == 0 || h.count == 0 {
            return;
        }
        let (below, (lo, hi)) = (self.below, bucket_bounds(i as usize));
        let at = |num: u64| -> Option<u64> {
            let r = rank(h.count, num);
            if r >= h.count || below.saturating_add(c) < r {
                return None; // the top rank is the exact max; or not yet
            }
            let hi = hi.min(h.max_ns.saturating_add(1)).max(lo + 1);
            let k2 = 2 * (r - below) as u128 - 1; // (rank - below - 0.5) * 2
            let v = lo as u128 + (hi - lo) as u128 * k2 / (2 * c as u128);
            // Not clamp(): a sender may claim min > max (clamp panics).
            Some((v.min(u64::MAX as u128) as u64).max(h.min_ns).min(h.max_ns))
        };
        self.p50 = self.p50.or_else(|| at(50));
        self.p99 = self.p99.or_else(|| at(99));
        self.below = below.saturating_add(c);
    }

    /// (p50, p99): the top rank, or ranks beyond the buckets, are the max.
    pub(super) fn finish(&self, h: &EntryHead) -> (u64, u64) {
        if h.count == 0 {
            return (0, 0);
        }
        (self.p50.unwrap_or(h.max_ns), self.p99.unwrap_or(h.max_ns))
    }
}

/// A probe id list (Delta's `keyed`, `born`), read lazily: `contains`
/// walks it (at most a few hundred varints) instead of keeping it.
#[derive(Clone, Copy)]
pub(super) struct IdList<'a>(&'a [u8]);

impl<'a> IdList<'a> {
    /// Check the list and return it and the bytes after it.
    pub(super) fn read(r: &mut Rd<'a>) -> Res<IdList<'a>> {
        let start = r.0;
        let n = r.len()?;
        for _ in 0..n {
            r.get::<u16>()?;
        }
        Ok(IdList(start))
    }
    pub(super) fn contains(self, id: u16) -> bool {
        let mut r = Rd(self.0);
        let Ok(n) = r.len() else { return false };
        (0..n).any(|_| r.get::<u16>().is_ok_and(|v| v == id))
    }
}

#[derive(Deserialize)]
#[allow(dead_code)] // read to check the body, as the desktop decoder does
pub(super) struct HelloHead<'a> {
    pub(super) protocol_revision: u8,
    pub(super) latmon_version: &'a str,
    pub(super) board: &'a str,
    pub(super) kernel: &'a str,
    pub(super) boot_id: u32,
    pub(super) start_ns: u64,
    pub(super) interval_ns: u64,
    pub(super) probe_count: u16,
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct DescIn<'a> {
    pub(super) id: u16,
    pub(super) name: &'a str,
    pub(super) kind: &'a str,
    pub(super) attach: &'a str,
    pub(super) mode: &'a str,
    pub(super) family: u8,
    pub(super) sub_bits: u8,
    pub(super) max_log2: u8,
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct AlertHead<'a> {
    pub(super) boot_id: u32,
    pub(super) probe: u16,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) comm: &'a str,
    pub(super) cpu: u32,
    pub(super) latency_ns: u64,
    pub(super) time_ns: u64,
    pub(super) cpu_woken: u32,
    pub(super) cpu_ran: u32,
}

/// The cycle half of an Alert (revision 8; all zero: not a cycle record).
#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct CycleIn<'a> {
    pub(super) event: u8,
    pub(super) release_ns: u64,
    pub(super) deadline_ns: u64,
    pub(super) done_ns: Option<u64>,
    pub(super) doing: u8,
    pub(super) doing_id: u32,
    pub(super) doing_name: &'a str,
    pub(super) migrations: u64,
}

/// A whole Alert body with the desktop decoder's bounds (in its order,
/// after the reads): at most ANAT_MAX_CAUSES causes, no name over
/// MAX_ALERT_NAME_LEN bytes. Its head and cycle half; the causes are
/// checked, not kept.
pub(super) fn read_alert(b: &[u8]) -> Res<(AlertHead<'_>, CycleIn<'_>)> {
    let mut r = Rd(b);
    let head: AlertHead = r.get()?;
    let n = r.len()?;
    let mut longest = head.comm.len();
    for _ in 0..n {
        longest = longest.max(r.get::<CauseIn>()?.name.len());
    }
    let cycle: CycleIn = r.get()?;
    if n > ANAT_MAX_CAUSES || longest.max(cycle.doing_name.len()) > MAX_ALERT_NAME_LEN {
        return Err(custom());
    }
    Ok((head, cycle))
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct CauseIn<'a> {
    pub(super) kind: u8,
    pub(super) id: u32,
    pub(super) policy: u8,
    pub(super) prio: i32,
    pub(super) name: &'a str,
    pub(super) ns: u64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct StatusHead {
    pub(super) boot_id: u32,
    pub(super) time_ns: u64,
    pub(super) seq: u64,
    pub(super) uptime_ns: u64,
    pub(super) frames_dropped: u64,
    pub(super) bytes_dropped: u64,
    pub(super) clients: u32,
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct HealthIn {
    pub(super) id: u16,
    pub(super) read_errors: u64,
    pub(super) run_count: u64,
    pub(super) run_time_ns: u64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct LinkIn {
    pub(super) budget_bps: u32,
    pub(super) used_bps: u32,
    pub(super) step: u8,
    pub(super) merge: u8,
    pub(super) rolled: u16,
    pub(super) interval_ms: u32,
    pub(super) keyframe_ms: u32,
    pub(super) alerts_shed: u64,
    pub(super) intervals_folded: u64,
}

/// Read a list of `T` (checking each element).
pub(super) fn skip_list<'a, T: Deserialize<'a>>(r: &mut Rd<'a>) -> Res<usize> {
    let n = r.len()?;
    for _ in 0..n {
        r.get::<T>()?;
    }
    Ok(n)
}

/// Read the entries of a Summary or Delta without applying them.
pub(super) fn skip_entries(r: &mut Rd<'_>) -> Res<()> {
    let n = r.len()?;
    for _ in 0..n {
        read_entry(r, |_, _, _| {})?;
    }
    Ok(())
}

/// The header of a Summary (kind 2).
pub(super) struct SummaryHead {
    pub(super) seq: u64,
    pub(super) boot_id: u32,
    pub(super) base_seq: u64,
}

/// The header of a Delta (kind 5) and where its entries and lists are.
pub(super) struct DeltaHead<'a> {
    pub(super) seq: u64,
    pub(super) base_seq: u64,
    pub(super) boot_id: u32,
    pub(super) first_id: u16,
    pub(super) end_id: u16,
    pub(super) entries: &'a [u8],
    pub(super) keyed: IdList<'a>,
    pub(super) born: IdList<'a>,
}

pub(super) fn summary_head(b: &[u8]) -> Res<SummaryHead> {
    let mut r = Rd(b);
    let seq: u64 = r.get()?;
    let boot_id: u32 = r.get()?;
    r.get::<u64>()?; // time_ns
    r.get::<bool>()?; // last
    skip_entries(&mut r)?;
    r.get::<u8>()?; // merge
    let base_seq: u64 = r.get()?;
    Ok(SummaryHead { seq, boot_id, base_seq })
}

pub(super) fn delta_head(b: &[u8]) -> Res<DeltaHead<'_>> {
    let mut r = Rd(b);
    let seq: u64 = r.get()?;
    let base_seq: u64 = r.get()?;
    let boot_id: u32 = r.get()?;
    r.get::<u64>()?; // time_ns
    r.get::<bool>()?; // last
    r.get::<u8>()?; // merge
    let first_id: u16 = r.get()?;
    let end_id: u16 = r.get()?;
    let entries = r.0;
    skip_entries(&mut r)?;
    let keyed = IdList::read(&mut r)?;
    let born = IdList::read(&mut r)?;
    Ok(DeltaHead { seq, base_seq, boot_id, first_id, end_id, entries, keyed, born })
}

/// A Loops frame's head (kind 7, revision 12; `wire::LoopList`).
#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct LoopsHead {
    pub(super) boot_id: u32,
    pub(super) seq: u64,
    pub(super) time_ns: u64,
    pub(super) listed: u16,
    pub(super) first: u16,
    pub(super) unlisted: u32,
    pub(super) unwatched: u32,
}

/// One loop of a Loops frame (`wire::WireLoop`; its cycle counts as the
/// seven u64 of `wire::WireLoopCycles`, in order).
#[derive(Deserialize)]
#[allow(dead_code)]
pub(super) struct LoopIn<'a> {
    pub(super) tid: u32,
    pub(super) pid: u32,
    pub(super) comm: &'a str,
    pub(super) policy: u32,
    pub(super) prio: u32,
    pub(super) rt: bool,
    pub(super) class: u8,
    pub(super) period_ns: u64,
    pub(super) period_source: u8,
    pub(super) jitter_ns: u64,
    pub(super) watched: bool,
    pub(super) cycle: Option<[u64; 7]>,
}

/// Pass 1: is `b` the whole message of `kind`, as the desktop decoder
/// reads it (trailing bytes ignored)?
pub(super) fn check(kind: Kind, b: &[u8]) -> Res<()> {
    let mut r = Rd(b);
    match kind {
        Kind::Hello => {
            r.get::<HelloHead>()?;
            skip_list::<DescIn>(&mut r)?;
            // Revision 9's thresholds (id, threshold_ns): unused here,
            // read so that a Hello is refused exactly when the desktop
            // decoder refuses it; so is revision 11's certificate.
            skip_list::<(u16, u64)>(&mut r)?;
            r.get::<Option<WireCertificate>>()?;
        }
        Kind::Summary => {
            summary_head(b)?;
        }
        Kind::Delta => {
            delta_head(b)?;
        }
        Kind::Alert => {
            read_alert(b)?;
        }
        Kind::Loops => {
            r.get::<LoopsHead>()?;
            for _ in 0..r.len()? {
                // A name longer than an alert's is refused, as the
                // desktop decoder refuses it.
                if r.get::<LoopIn>()?.comm.len() > MAX_ALERT_NAME_LEN {
                    return Err(custom());
                }
            }
        }
        Kind::Status => {
            r.get::<StatusHead>()?;
            skip_list::<HealthIn>(&mut r)?;
            r.get::<u32>()?; // flags
            r.get::<u32>()?; // bpf_cpu_ppm
            skip_list::<u16>(&mut r)?; // detached
            skip_list::<(u16, u64)>(&mut r)?; // missed
            r.get::<LinkIn>()?;
            skip_list::<(u16, u64)>(&mut r)?; // shed
            skip_list::<(u16, u64)>(&mut r)?; // dropped
        }
        Kind::Request => {
            r.get::<u8>()?;
        }
    }
    Ok(())
}
