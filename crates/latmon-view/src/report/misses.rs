// SPDX-License-Identifier: MIT
//! The report's miss timeline for `cycle` probes (docs/probes.md,
//! "cycle"): per probe its misses and overruns over time (one chart, the
//! deadline drawn across it), the top causes of its missed time, and a
//! table of the records, each with the line the agent prints (`miss
//! 1.62ms of 1.00ms: running 1500 us, ...`).
//!
//! Bounded whatever the capture's length: [`MAX_MISS_PROBES`] probes
//! apart (records of further ones are counted), per probe two envelopes
//! of [`MISS_BUCKETS`] points and at most [`MAX_CAUSE_LABELS`] cause
//! labels (the rest summed as `other causes`), and the
//! [`MAX_MISS_ROWS`] worst records for the table.

use std::fmt::Write as _;

use anyhow::Result;
use latmon_core::anatomy::{Cause, CauseKind, SOFTIRQ_NAMES};
use latmon_core::cycle::CycleEvent;
use latmon_core::text::fmt_ns;
use latmon_core::wire::ReceivedAlert;
use plotters::prelude::*;

use super::charts::{e, legend, svg, time_axis, Key, Mark, FONT, LEGEND_WIDE, LIGHT_LINES};
use super::model::{cell, detail, esc, plain, Envelope, Worst};

/// Cycle probes drawn apart.
pub const MAX_MISS_PROBES: usize = 8;
/// Points per probe and event of the timeline (a 1000 px chart).
pub const MISS_BUCKETS: usize = 256;
/// Cause labels tallied per probe; further labels add to `other causes`.
pub const MAX_CAUSE_LABELS: usize = 32;
/// Causes named in a probe's summary line.
const TOP_CAUSES: usize = 5;
/// Records in the table: the worst (longest), in time order.
pub const MAX_MISS_ROWS: usize = 200;
/// Threads whose records are tallied apart (the loops section sets them
/// beside the agent's counts of each loop); further threads' are in the
/// totals only.
pub const MAX_TALLIED_TIDS: usize = 64;

/// One cycle probe's records.
#[derive(Debug)]
pub struct MissProbe {
    pub probe: String,
    pub misses: u64,
    pub overruns: u64,
    pub responses: u64,
    /// The latest record's deadline (release -> deadline), ns.
    pub deadline_ns: u64,
    /// Latency (ns) against seconds since start, per event.
    miss_marks: Envelope<1>,
    overrun_marks: Envelope<1>,
    /// The misses' parts by label, ns (at most MAX_CAUSE_LABELS), and
    /// what further labels had.
    causes: Vec<(String, u64)>,
    causes_rest: u64,
    /// The misses' latencies summed (what the causes share).
    missed_ns: u64,
}

/// The cycle records of a capture.
#[derive(Debug)]
pub struct Misses {
    pub probes: Vec<MissProbe>,
    /// Records of probes beyond MAX_MISS_PROBES.
    pub unshown: u64,
    rows: Worst,
    /// Miss and overrun records of every cycle probe (those past the
    /// probe bound too): what crossed the link.
    pub miss_records: u64,
    pub overrun_records: u64,
    /// (tid, miss records, overrun records) of the first
    /// MAX_TALLIED_TIDS threads.
    by_tid: Vec<(u32, u64, u64)>,
}

impl Default for Misses {
    fn default() -> Self {
        Misses {
            probes: Vec::new(),
            unshown: 0,
            rows: Worst::new(MAX_MISS_ROWS),
            miss_records: 0,
            overrun_records: 0,
            by_tid: Vec::new(),
        }
    }
}

/// A cause's label for the tally: the agent's words without the time
/// (`running`, `blocked on io in fdatasync`, `irq 36 virtio1`,
/// `hog[4242]`; page faults all together).
fn label(c: &Cause) -> String {
    match &c.kind {
        CauseKind::Task { comm, pid, .. } => format!("{comm}[{pid}]"),
        CauseKind::TaskRest => "other tasks".into(),
        CauseKind::Irq { irq, name } if name.is_empty() => format!("irq {irq}"),
        CauseKind::Irq { irq, name } => format!("irq {irq} {name}"),
        CauseKind::IrqRest => "other irqs".into(),
        CauseKind::Softirq { vector } => match SOFTIRQ_NAMES.get(*vector as usize) {
            Some(n) => format!("softirq {n}"),
            None => format!("softirq vec{vector}"),
        },
        CauseKind::TimerIrqDelay => "timer irq delay".into(),
        CauseKind::Running => "running".into(),
        CauseKind::Blocked { on, syscall } if syscall.is_empty() => format!("blocked on {}", on.word()),
        CauseKind::Blocked { on, syscall } => format!("blocked on {} in {syscall}", on.word()),
        CauseKind::PageFaults { .. } => "page faults".into(),
        CauseKind::Stopped => "stopped".into(),
        CauseKind::Backlog => "backlog".into(),
        CauseKind::Owner { owner } => format!("held by {}[{}]", owner.comm, owner.tid),
        CauseKind::Inversion { owner, .. } => format!("inversion behind {}[{}]", owner.comm, owner.tid),
        CauseKind::Unknown { code } => format!("cause#{code}"),
        CauseKind::Other => "other".into(),
    }
}

impl Misses {
    /// Offer a record (those without a cycle half are not this module's)
    /// whose time since start is `time_ns`.
    pub fn offer(&mut self, got: &ReceivedAlert, time_ns: u64) {
        let a = &got.record;
        // A rule record is no cycle's end: not a miss, overrun or response.
        let Some(c) = a.cycle.as_ref().filter(|c| c.rule.is_none()) else { return };
        let (m, r) = (u64::from(c.event == CycleEvent::Miss), u64::from(c.event == CycleEvent::Overrun));
        self.miss_records += m;
        self.overrun_records += r;
        match self.by_tid.iter().position(|t| t.0 == a.tid) {
            Some(i) => (self.by_tid[i].1, self.by_tid[i].2) = (self.by_tid[i].1 + m, self.by_tid[i].2 + r),
            None if self.by_tid.len() < MAX_TALLIED_TIDS => self.by_tid.push((a.tid, m, r)),
            None => {}
        }
        let at = match self.probes.iter().position(|p| p.probe == got.probe) {
            Some(i) => i,
            None if self.probes.len() < MAX_MISS_PROBES => {
                self.probes.push(MissProbe {
                    probe: got.probe.clone(),
                    misses: 0,
                    overruns: 0,
                    responses: 0,
                    deadline_ns: 0,
                    miss_marks: Envelope::new(MISS_BUCKETS),
                    overrun_marks: Envelope::new(MISS_BUCKETS),
                    causes: Vec::new(),
                    causes_rest: 0,
                    missed_ns: 0,
                });
                self.probes.len() - 1
            }
            None => {
                self.unshown += 1;
                return;
            }
        };
        let p = &mut self.probes[at];
        p.deadline_ns = c.deadline_ns.saturating_sub(c.release_ns);
        let t = time_ns as f64 / 1e9;
        match c.event {
            CycleEvent::Miss => {
                p.misses += 1;
                p.miss_marks.push(t, [a.latency_ns as f64]);
                p.missed_ns = p.missed_ns.saturating_add(a.latency_ns);
                for cause in a.anatomy.iter().flat_map(|an| &an.causes) {
                    let l = label(cause);
                    match p.causes.iter().position(|(n, _)| *n == l) {
                        Some(i) => p.causes[i].1 = p.causes[i].1.saturating_add(cause.ns),
                        None if p.causes.len() < MAX_CAUSE_LABELS => p.causes.push((l, cause.ns)),
                        None => p.causes_rest = p.causes_rest.saturating_add(cause.ns),
                    }
                }
            }
            CycleEvent::Overrun => {
                p.overruns += 1;
                p.overrun_marks.push(t, [a.latency_ns as f64]);
            }
            CycleEvent::Response => p.responses += 1,
            CycleEvent::Rule => {}
        }
        self.rows.offer(got, time_ns);
    }

    /// The miss and overrun records of thread `tid` in the capture (None:
    /// past the tally's bound, not known).
    pub fn records_of(&self, tid: u32) -> Option<(u64, u64)> {
        match self.by_tid.iter().find(|t| t.0 == tid) {
            Some(t) => Some((t.1, t.2)),
            None if self.by_tid.len() < MAX_TALLIED_TIDS => Some((0, 0)),
            None => None,
        }
    }

    /// `running 81.2 %, blocked on io in fdatasync 12.0 %, ...` of the
    /// probe's missed time (HTML-escaped).
    fn top_causes(p: &MissProbe) -> String {
        let mut v: Vec<(&str, u64)> = p.causes.iter().map(|(l, ns)| (l.as_str(), *ns)).collect();
        if p.causes_rest > 0 {
            v.push(("other causes", p.causes_rest));
        }
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let total = p.missed_ns.max(1) as f64;
        let parts: Vec<String> = v
            .iter()
            .filter(|c| c.1 > 0)
            .take(TOP_CAUSES)
            .map(|(l, ns)| format!("{} {:.1} %", esc(l), *ns as f64 * 100.0 / total))
            .collect();
        parts.join(", ")
    }

    /// The section's HTML: per probe its line and chart, then the table.
    /// `span`: seconds since start of the capture's first and last summary.
    pub fn html(&self, o: &mut String, span: (f64, f64)) -> Result<()> {
        for p in &self.probes {
            let _ = writeln!(
                o,
                "<h3>{}</h3>\n<p>{} misses, {} overruns{} (deadline {}).",
                esc(&p.probe),
                p.misses,
                p.overruns,
                if p.responses > 0 { format!(", {} slow responses", p.responses) } else { String::new() },
                fmt_ns(p.deadline_ns)
            );
            let top = Self::top_causes(p);
            if !top.is_empty() {
                let _ = write!(o, " Top causes of missed time: {top}.");
            }
            o.push_str("</p>\n");
            o.push_str(&timeline_svg(p, span)?);
        }
        if self.unshown > 0 {
            let _ = writeln!(
                o,
                "<p>{} records of further cycle probes (past {MAX_MISS_PROBES}) are not drawn.</p>",
                self.unshown
            );
        }
        let rows = self.rows.in_time_order();
        let seen = self.rows.seen;
        if seen > rows.len() as u64 {
            let _ = writeln!(o, "<p>The {} longest of {seen} records, in time order.</p>", rows.len());
        }
        o.push_str("<table id=\"misses\"><tr><th>time (s)</th><th>probe</th><th>task</th><th>cpu</th><th>the record, as the agent prints it</th></tr>\n");
        for got in rows {
            let a = &got.record;
            let _ = writeln!(
                o,
                "<tr><td class=\"num\">{:.6}</td><td>{}</td><td>{}[{}]</td><td class=\"num\">{}</td><td>{}</td></tr>",
                a.time_ns as f64 / 1e9,
                cell(&got.probe),
                cell(&a.comm),
                a.tid,
                a.cpu,
                detail(got)
            );
        }
        o.push_str("</table>\n");
        Ok(())
    }
}

/// One probe's misses (red dots) and overruns (orange triangles) over
/// time, the deadline a line across: each point the worst of its bucket.
fn timeline_svg(p: &MissProbe, (t0, t1): (f64, f64)) -> Result<String> {
    let (div, axis) = time_axis(t1 - t0);
    let all = || p.miss_marks.buckets().iter().chain(p.overrun_marks.buckets());
    let lo = all().map(|b| b.lo[0].max(1.0)).fold(p.deadline_ns.max(1) as f64, f64::min);
    let hi = all().map(|b| b.hi[0].max(1.0)).fold(lo * 1.5, f64::max);
    let per = p.miss_marks.per().max(p.overrun_marks.per());
    let note = if per > 1 { format!(" (each point the worst of up to {per} records)") } else { String::new() };
    let (x0, x1) = (t0.min(0.0) / div, (t1 / div).max(1.0 / div));
    svg(1000, 280, |root| {
        let mut ch = e(ChartBuilder::on(root)
            .caption(format!("{}: misses and overruns over time{note}", plain(&p.probe)), FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .margin_right(LEGEND_WIDE)
            .build_cartesian_2d(x0..x1, (lo * 0.8..hi * 1.25).log_scale()))?;
        e(ch.configure_mesh()
            .max_light_lines(LIGHT_LINES)
            .x_desc(axis)
            .y_desc("release -> done")
            // 1, 2 and 5 of each decade: all nine crowd a log axis's top.
            .y_label_formatter(&|v| {
                let m = *v / 10f64.powf(v.max(1.0).log10().floor());
                if [1.0, 2.0, 5.0].iter().any(|k| (m - k).abs() < 0.05) {
                    fmt_ns(*v as u64)
                } else {
                    String::new()
                }
            })
            .label_style(FONT)
            .draw())?;
        let deadline = RGBAColor(60, 60, 60, 1.0);
        if p.deadline_ns > 0 {
            let d = p.deadline_ns as f64;
            e(ch.draw_series(LineSeries::new([(x0, d), (x1, d)], deadline.stroke_width(1))))?;
        }
        let (miss, overrun) = (RGBAColor(200, 30, 30, 1.0), RGBAColor(230, 140, 0, 1.0));
        e(ch.draw_series(
            p.miss_marks.buckets().iter().map(|b| Circle::new((b.t() / div, b.hi[0].max(1.0)), 3, miss.filled())),
        ))?;
        e(ch.draw_series(
            p.overrun_marks
                .buckets()
                .iter()
                .map(|b| TriangleMarker::new((b.t() / div, b.hi[0].max(1.0)), 5, overrun.filled())),
        ))?;
        let keys = [
            Key { label: format!("misses ({})", p.misses), colour: miss, mark: Mark::Dot },
            Key { label: format!("overruns ({})", p.overruns), colour: overrun, mark: Mark::Triangle },
            Key { label: format!("deadline {}", fmt_ns(p.deadline_ns)), colour: deadline, mark: Mark::Line },
        ];
        legend(root, &keys, LEGEND_WIDE)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use latmon_core::anatomy::{Anatomy, BlockedOn};
    use latmon_core::cycle::{CycleMark, Doing};
    use latmon_core::hist::Hist;
    use latmon_core::summary::AlertRecord;
    use latmon_core::wire::{encode_to_vec, BucketScheme, Encoder, Frame, Hello, ProbeDesc, SummaryHeader};

    use super::super::{html, Capture};
    use super::*;

    /// A miss of `probe` at `t_s` seconds (its parts sum to 1.62 ms) and
    /// an overrun runnable behind a task named `behind`.
    fn records(probe: &str, t_s: u64, behind: &str) -> [ReceivedAlert; 2] {
        let release = t_s * 1_000_000_000;
        let parts = vec![
            Cause { kind: CauseKind::Running, ns: 1_500_000 },
            Cause { kind: CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, ns: 60_000 },
            Cause { kind: CauseKind::PageFaults { count: 7 }, ns: 0 },
        ];
        let mark = |event, done_ns, doing| CycleMark {
            event,
            release_ns: release,
            deadline_ns: release + 1_000_000,
            done_ns,
            doing,
            migrations: 0,
            rule: None,
        };
        let rec = |latency_ns, anatomy, cycle| ReceivedAlert {
            probe: probe.into(),
            record: AlertRecord {
                id: latmon_core::ident::ProbeId::NONE,
                pid: 40,
                tid: 41,
                comm: "ctrl".into(),
                cpu: 1,
                latency_ns,
                time_ns: release + latency_ns,
                anatomy,
                cycle: Some(cycle),
            },
        };
        [
            rec(
                1_620_000,
                Some(Anatomy::from_parts(1_620_000, 1, 1, parts)),
                mark(CycleEvent::Miss, Some(release + 1_620_000), None),
            ),
            rec(
                1_000_000,
                None,
                mark(CycleEvent::Overrun, None, Some(Doing::Runnable { comm: behind.into(), pid: 9 })),
            ),
        ]
    }

    /// A capture of `probes` cycle probes (five summaries), each with a
    /// miss and an overrun per second, as the agent's frames carry them.
    fn capture(probes: usize, behind: &str) -> Vec<u8> {
        let names: Vec<String> = (0..probes).map(|i| format!("cycle{i}")).collect();
        let hello = Hello {
            protocol_revision: latmon_core::wire::PROTOCOL_REVISION,
            latmon_version: "0.1.0".into(),
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 7,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: probes as u16,
            probes: names
                .iter()
                .enumerate()
                .map(|(i, n)| ProbeDesc {
                    id: i as u16,
                    name: n.clone(),
                    kind: "cycle".into(),
                    attach: "tp_btf".into(),
                    mode: String::new(),
                    scheme: BucketScheme::LATMON,
                })
                .collect(),
            thresholds: Vec::new(),
            certificate: None,
        };
        let mut bytes = encode_to_vec(&Frame::Hello(hello)).unwrap();
        let mut hs = vec![Hist::default(); probes];
        let mut enc = Encoder::new();
        let mut out = |f: &[u8]| bytes.extend_from_slice(f);
        for seq in 1..=5u64 {
            for (i, h) in hs.iter_mut().enumerate() {
                h.record(900_000);
                h.record(1_620_000);
                for r in records(&names[i], seq, behind) {
                    enc.alert(7, i as u16, &r.record, &mut out).unwrap();
                }
            }
            let head = SummaryHeader { seq, boot_id: 7, time_ns: seq * 1_000_000_000 + 500_000_000, last: seq == 5 };
            enc.summary(head, &hs, &mut out).unwrap();
        }
        bytes
    }

    #[test]
    fn the_miss_timeline_shows_each_record_with_its_causes_escaped() {
        let c = Capture::read(&capture(2, "hog<script>\x1b[2J")[..]).unwrap();
        let page = html(&c, "cap.bin").unwrap();
        let at = page.find("<h2>cycle misses</h2>").expect("the section");
        let sec = &page[at..page.find("<h2>probes</h2>").unwrap()];
        for p in ["cycle0", "cycle1"] {
            assert!(sec.contains(&format!("<h3>{p}</h3>\n<p>5 misses, 5 overruns (deadline 1.00ms).")), "{sec}");
            assert!(sec.contains(&format!("{p}: misses and overruns over time")), "its chart: {sec}");
        }
        // The misses' top causes: running 1.50 of 1.62 ms, fdatasync 60 us.
        assert!(
            sec.contains("Top causes of missed time: running 92.6 %, blocked on io in fdatasync 3.7 %, other 3.7 %.")
        );
        // Each record with the agent's line; names escaped.
        assert_eq!(sec.matches("<tr><td class=\"num\">").count(), 20, "every record: {sec}");
        assert!(sec.contains(
            "<td>miss 1.62ms of 1.00ms: running 1500 us, blocked on io in fdatasync 60 us, 7 page faults, other 60 us</td>"
        ));
        // One escape style on a row (issue 40: `?` here, `\u{1b}` in cells).
        assert!(
            sec.contains("<td>overrun 1.00ms of 1.00ms, runnable behind hog&lt;script&gt;\\u{1b}[2J[9]</td>"),
            "{sec}"
        );
        assert!(!page.contains("<script") && !page.contains('\x1b'));
        // The alert table says the same of each record.
        assert!(page[..at].contains("miss 1.62ms of 1.00ms: running 1500 us"));
    }

    #[test]
    fn probes_and_rows_past_the_bounds_are_counted_not_kept() {
        let c = Capture::read(&capture(MAX_MISS_PROBES + 2, "hog")[..]).unwrap();
        let m = &c.misses;
        assert_eq!((m.probes.len(), m.unshown), (MAX_MISS_PROBES, 2 * 10));
        assert!(m.probes.iter().all(|p| (p.misses, p.overruns) == (5, 5)));
        let mut many = Misses::default();
        for i in 0..(MAX_MISS_ROWS as u64 + 50) {
            for r in records("cycle", i, "hog") {
                many.offer(&r, i);
            }
        }
        assert_eq!((many.rows.in_time_order().len(), many.rows.seen), (MAX_MISS_ROWS, 2 * (MAX_MISS_ROWS as u64 + 50)));
        assert!(many.probes[0].miss_marks.buckets().len() <= MISS_BUCKETS);
        let mut page = String::new();
        many.html(&mut page, (0.0, 300.0)).unwrap();
        assert!(page.contains(&format!("The {MAX_MISS_ROWS} longest of {} records", 2 * (MAX_MISS_ROWS + 50))));
    }
}
