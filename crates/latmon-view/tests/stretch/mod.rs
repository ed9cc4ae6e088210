// SPDX-License-Identifier: MIT
//! A long capture from a short real one: the real capture's intervals,
//! status and alert frames replayed in order, again and again, with times
//! and sequence numbers advancing, until the capture spans the asked
//! duration. The histograms keep accumulating (a keyframe of all probes,
//! then per interval the deltas and one probe's keyframe in turn, as a
//! budgeted link sends them), so a reader sees one agent run of that
//! length, not restarts.
//!
//! Shared by examples/stretch_capture.rs (the report's scale figures) and
//! tests/report_scale.rs (`#[path]`/`mod`, no library crate).

use std::io::{Read, Write};

use latmon_core::hist::Hist;
use latmon_core::wire::{
    encode_to_vec, Encoder, Entries, Event, Frame, FrameDecoder, Hello, LinkHeader, SummaryHeader, Tracker,
};

/// What the base capture holds, in stream order.
enum Item {
    /// One interval: time since the first summary (ns) and each probe's
    /// events of that interval (only probes that had some).
    Interval {
        at_ns: u64,
        deltas: Vec<(u16, Hist)>,
    },
    Status(latmon_core::wire::Status),
    Alert(latmon_core::wire::Alert),
}

/// What was written.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stretched {
    pub bytes: u64,
    pub summaries: u64,
    pub alerts: u64,
    pub span_s: u64,
}

/// Read the base capture `input` (a frames capture of one agent run) and
/// write a capture of at least `secs` seconds to `out`.
pub fn stretch(mut input: impl Read, secs: u64, out: &mut impl Write) -> Result<Stretched, String> {
    let mut raw = Vec::new();
    input.read_to_end(&mut raw).map_err(|e| format!("read the base capture: {e}"))?;
    let mut dec = FrameDecoder::new();
    let mut t = Tracker::new();
    let mut items = Vec::new();
    let mut prev: Vec<Option<Hist>> = Vec::new();
    let mut first_ns = None;
    let mut last_interval: Option<usize> = None;
    dec.feed(&raw, &mut |f| {
        let Ok(f) = f else { return };
        let keep = match &f {
            Frame::Status(s) => Some(Item::Status(s.clone())),
            Frame::Alert(a) => Some(Item::Alert(a.clone())),
            _ => None,
        };
        if let Event::Summary { report, ids, .. } = t.on_frame(f) {
            let at = report.time_ns - *first_ns.get_or_insert(report.time_ns);
            let mut deltas = Vec::new();
            for &id in &ids {
                let Some(now) = t.totals(id) else { continue };
                let i = id as usize;
                if prev.len() <= i {
                    prev.resize(i + 1, None);
                }
                let d = prev[i].as_ref().map_or_else(|| now.clone(), |p| now.delta(p));
                if d.count > 0 || d.drops > 0 {
                    deltas.push((id, d));
                }
                prev[i] = Some(now.clone());
            }
            // A summary of many probes comes in several frames, each its
            // event: one interval still.
            match last_interval.and_then(|k| items.get_mut(k)) {
                Some(Item::Interval { at_ns, deltas: d }) if *at_ns == at => d.extend(deltas),
                _ => {
                    last_interval = Some(items.len());
                    items.push(Item::Interval { at_ns: at, deltas });
                }
            }
        }
        if let Some(k) = keep {
            items.push(k);
        }
    });
    let hello: Hello = t.hello.clone().ok_or("the base capture has no Hello frame")?;
    let interval_ns = hello.interval_ns.max(1);
    let last_at =
        items.iter().rev().find_map(|i| if let Item::Interval { at_ns, .. } = i { Some(*at_ns) } else { None });
    let Some(last_at) = last_at else { return Err("the base capture has no summary".into()) };
    // One pass of the base capture, and the time the next one starts at.
    let loop_ns = last_at + interval_ns;
    let first = first_ns.unwrap_or(hello.start_ns);
    let want_ns = secs.saturating_mul(1_000_000_000);
    let mut w = Stretched::default();
    let mut put = |b: &[u8], w: &mut Stretched| -> Result<(), String> {
        w.bytes += b.len() as u64;
        out.write_all(b).map_err(|e| format!("write: {e}"))
    };
    put(&encode_to_vec(&Frame::Hello(hello.clone())).map_err(|e| format!("{e:?}"))?, &mut w)?;
    let n = hello.probes.iter().map(|p| p.id as usize + 1).max().unwrap_or(0).max(prev.len());
    let ids: Vec<u16> = (0..n as u16).collect();
    let mut acc = vec![Hist::default(); n];
    let mut wire = vec![Hist::default(); n];
    let mut enc = Encoder::new();
    let (mut seq, mut pass, mut cursor) = (0u64, 0u64, 0usize);
    'all: loop {
        let shift = pass * loop_ns;
        for it in &items {
            match it {
                Item::Interval { at_ns, deltas } => {
                    let at = shift + at_ns;
                    if at > want_ns {
                        break 'all;
                    }
                    for h in wire.iter_mut() {
                        *h = Hist::default();
                    }
                    for (id, d) in deltas {
                        acc[*id as usize].merge(d);
                        wire[*id as usize].clone_from(d);
                    }
                    seq += 1;
                    let h = SummaryHeader { seq, boot_id: hello.boot_id, time_ns: first + at, last: false };
                    let mut frames = Vec::new();
                    let mut sink = |f: &[u8]| frames.extend_from_slice(f);
                    let e = |e| format!("{e:?}");
                    if seq == 1 {
                        enc.summary(h, &acc, &mut sink).map_err(e)?;
                    } else {
                        // As a budgeted link sends it (src/sinks/frames/budget/):
                        // the interval's deltas, and one probe's cumulative
                        // keyframe in turn.
                        let link = LinkHeader { merge: 0, base_seq: seq - 1 };
                        let key = [cursor as u16];
                        cursor = (cursor + 1) % n.max(1);
                        enc.keyframe(h, link, Entries::select(&acc, &ids, &key), &mut sink).map_err(e)?;
                        let changed: Vec<u16> = deltas.iter().map(|d| d.0).filter(|&i| i != key[0]).collect();
                        enc.delta(h, link, Entries::select(&wire, &ids, &changed), n as u16, &key, &[], &mut sink)
                            .map_err(e)?;
                    }
                    put(&frames, &mut w)?;
                    w.summaries += 1;
                    w.span_s = at / 1_000_000_000;
                }
                Item::Status(s) => {
                    put(&encode_to_vec(&Frame::Status(s.clone())).map_err(|e| format!("{e:?}"))?, &mut w)?
                }
                Item::Alert(a) => {
                    let mut a = a.clone();
                    a.time_ns += shift;
                    put(&encode_to_vec(&Frame::Alert(a)).map_err(|e| format!("{e:?}"))?, &mut w)?;
                    w.alerts += 1;
                }
            }
        }
        pass += 1;
    }
    Ok(w)
}
