// SPDX-License-Identifier: MIT
//! Summary (kind 2) and Delta (kind 5) bodies serialized from borrowed
//! histogram parts, so the encoder packs frames without copying a count.

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use super::{ser_probe, ser_summary};
use crate::hist::Hist;

#[derive(Clone, Copy, Debug)]
pub(super) struct Part {
    /// Position in the [`Entries`].
    pub(super) entry: u16,
    pub(super) first: u16,
    pub(super) end: u16,
}

/// The histograms a summary carries: all of `hists` (wire id = index), or
/// the entries `sel` of `hists` with the wire ids `ids[sel[k]]`.
#[derive(Clone, Copy)]
pub struct Entries<'a> {
    hists: &'a [Hist],
    ids: Option<&'a [u16]>,
    sel: Option<&'a [u16]>,
}

impl<'a> Entries<'a> {
    /// Every histogram, its index its id.
    pub fn all(hists: &'a [Hist]) -> Self {
        Entries { hists, ids: None, sel: None }
    }

    /// The histograms `hists[sel[k]]`, with wire ids `ids[sel[k]]`
    /// (`ids.len() == hists.len()`; `sel` ascending by id).
    pub fn select(hists: &'a [Hist], ids: &'a [u16], sel: &'a [u16]) -> Self {
        Entries { hists, ids: Some(ids), sel: Some(sel) }
    }

    pub fn len(&self) -> usize {
        self.sel.map_or(self.hists.len(), <[u16]>::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wire id and histogram of entry `k`.
    pub(super) fn get(&self, k: usize) -> (u16, &'a Hist) {
        let i = self.sel.map_or(k, |s| s[k] as usize);
        (self.ids.map_or(i as u16, |ids| ids[i]), &self.hists[i])
    }
}

pub(super) struct PartsRef<'a> {
    pub(super) parts: &'a [Part],
    pub(super) entries: Entries<'a>,
}

impl Serialize for PartsRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.parts.len()))?;
        for p in self.parts {
            let (id, hist) = self.entries.get(p.entry as usize);
            seq.serialize_element(&PartRef { id, part: *p, hist })?;
        }
        seq.end()
    }
}

struct PartRef<'a> {
    id: u16,
    part: Part,
    hist: &'a Hist,
}

impl Serialize for PartRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (h, p) = (self.hist, self.part);
        let range = p.first as usize..p.end as usize;
        let it = h.slots[range.clone()]
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(move |(i, &c)| ((i + p.first as usize) as u16, c));
        let n = h.slots[range].iter().filter(|&&c| c > 0).count();
        ser_probe(s, [self.id as u64, h.count, h.sum_ns, h.min_ns, h.max_ns, h.drops, h.alerts], p.first, p.end, n, it)
    }
}

/// Summary (kind 2) body from borrowed parts (the bytes of [`Summary`](super::Summary)).
pub(super) struct SummaryRef<'a> {
    pub(super) seq: u64,
    pub(super) boot_id: u32,
    pub(super) time_ns: u64,
    pub(super) last: bool,
    pub(super) probes: PartsRef<'a>,
    pub(super) link: LinkHeader,
}

impl Serialize for SummaryRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let head = (self.seq, self.boot_id, self.time_ns, self.last);
        ser_summary(s, head, &self.probes, (self.link.merge, self.link.base_seq))
    }
}

/// Delta (kind 5) body from borrowed parts.
#[derive(Serialize)]
pub(super) struct DeltaRef<'a> {
    pub(super) seq: u64,
    pub(super) base_seq: u64,
    pub(super) boot_id: u32,
    pub(super) time_ns: u64,
    pub(super) last: bool,
    pub(super) merge: u8,
    pub(super) first_id: u16,
    pub(super) end_id: u16,
    pub(super) probes: PartsRef<'a>,
    pub(super) keyed: &'a [u16],
    pub(super) born: &'a [u16],
}

/// Summary fields besides the histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryHeader {
    pub seq: u64,
    pub boot_id: u32,
    pub time_ns: u64,
    pub last: bool,
}

/// The revision 3 summary fields of a budgeted link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkHeader {
    /// Wire bucket merge of the histograms (they are already coarsened).
    pub merge: u8,
    /// Seq of this link's previous summary.
    pub base_seq: u64,
}
