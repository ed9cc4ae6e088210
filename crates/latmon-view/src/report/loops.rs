// SPDX-License-Identifier: MIT
//! The report's loops section: the board's loops as the agent listed
//! them (Loops frames, revision 12) with each watched loop's cycles,
//! misses and overruns since the agent started, as the agent counted
//! them. Until revision 12 a report counted only the miss records that
//! crossed the link (22 where the agent counted 3 899): the records are
//! what reached the capture, the counts what happened.
//!
//! Bounded: two listings (the first and the last of the capture, for
//! its span), each of at most `loops::LISTED` loops (the tracker's
//! bound), and the first counts of at most [`MAX_BASES`] loops.

use std::fmt::Write as _;

use latmon_core::anatomy::Policy;
use latmon_core::loops::{Loop, LoopClass, LoopCycles};
use latmon_core::summary::IntervalReport;
use latmon_core::text::fmt_ns;

use super::misses::Misses;
use super::model::cell;

/// One listing: the loops of the summary of `seq`.
#[derive(Debug, Clone)]
pub struct Listing {
    pub boot_id: u32,
    pub seq: u64,
    /// Seconds since the agent started.
    pub t: f64,
    pub loops: Vec<Loop>,
    /// Loops past the agent's list bound.
    pub unlisted: u32,
    /// Periodic RT loops the cycle family could not watch.
    pub unwatched: u32,
}

/// Loops whose first counts are kept (a loop's baseline for "over the
/// capture"): the list bound twice over, for loops that come and go.
pub const MAX_BASES: usize = 2 * latmon_core::loops::LISTED;

/// A loop's counts in the first listing that counted it.
#[derive(Debug, Clone, Copy)]
struct Base {
    tid: u32,
    pid: u32,
    seq: u64,
    c: LoopCycles,
}

/// The capture's first and last listing, and each loop's first counts.
#[derive(Debug, Default)]
pub struct Loops {
    pub first: Option<Listing>,
    pub last: Option<Listing>,
    /// Summaries that came with a listing.
    pub listings: u64,
    /// The capture's first summary (boot id, seq), listing or not: a
    /// capture that starts at seq 1 starts with the agent, and the
    /// agent's since-start counts are the capture's.
    start: Option<(u32, u64)>,
    /// At most MAX_BASES, of the agent run of `last` (a restart's counts
    /// start again: the older run's are dropped).
    bases: Vec<Base>,
}

impl Loops {
    /// A summary's loops, when it came with them (the tracker gives them
    /// only to the summary of their own seq: none when the interval's
    /// Loops frame was lost, and the last listing stays).
    pub fn offer(&mut self, boot_id: u32, r: &IntervalReport, t: f64) {
        self.start.get_or_insert((boot_id, r.seq));
        if r.loops.is_empty() && r.loops_unlisted == 0 {
            return;
        }
        self.listings += 1;
        if self.last.as_ref().is_some_and(|l| l.boot_id != boot_id) {
            self.bases.clear();
        }
        for l in r.loops.iter().filter(|l| l.watched) {
            let Some(c) = l.cycle else { continue };
            if self.bases.len() < MAX_BASES && !self.bases.iter().any(|b| b.tid == l.tid && b.pid == l.pid) {
                self.bases.push(Base { tid: l.tid, pid: l.pid, seq: r.seq, c });
            }
        }
        let fill = |l: &mut Listing| {
            (l.boot_id, l.seq, l.t, l.unlisted, l.unwatched) =
                (boot_id, r.seq, t, r.loops_unlisted, r.agent.loops_unwatched);
            l.loops.clone_from(&r.loops);
        };
        let empty = || Listing { boot_id, seq: 0, t: 0.0, loops: Vec::new(), unlisted: 0, unwatched: 0 };
        if self.first.is_none() {
            fill(self.first.insert(empty()));
        }
        // In place: a listing every interval of a shift allocates
        // nothing here once the loops are known.
        fill(self.last.get_or_insert_with(empty));
    }

    /// The capture starts with the agent (its first summary is the
    /// agent's first, and the agent did not restart since).
    pub fn starts_with_agent(&self) -> bool {
        matches!((self.start, &self.last), (Some((b, 1)), Some(l)) if l.boot_id == b)
    }

    /// What the agent counted of a loop of the last listing over the
    /// capture, and from which summary (0: the whole capture, which
    /// starts with the agent). Otherwise its since-start counts minus
    /// those of the first listing that counted it. None when it was
    /// counted once only, or a count went down (another run, or a
    /// reused tid): no difference rather than a wrong one.
    pub fn over_capture(&self, l: &Loop) -> Option<(LoopCycles, u64)> {
        let last = self.last.as_ref()?;
        let b = l.cycle.filter(|_| l.watched)?;
        if self.starts_with_agent() {
            return Some((b, 0));
        }
        let base = self.bases.iter().find(|a| a.tid == l.tid && a.pid == l.pid && a.seq < last.seq)?;
        let (a, since) = (base.c, base.seq);
        if b.total_cycles < a.total_cycles || b.total_misses < a.total_misses || b.total_overruns < a.total_overruns {
            return None;
        }
        Some((
            LoopCycles {
                period_ns: b.period_ns,
                cycles: 0,
                total_cycles: b.total_cycles - a.total_cycles,
                misses: 0,
                total_misses: b.total_misses - a.total_misses,
                total_overruns: b.total_overruns - a.total_overruns,
                total_rules: b.total_rules.saturating_sub(a.total_rules),
            },
            since,
        ))
    }

    /// The section's HTML (nothing without a listing); `records`: the
    /// cycle records that crossed the link, to set beside the counts.
    pub fn html(&self, o: &mut String, records: &Misses) {
        let Some(last) = &self.last else { return };
        let n = |c: LoopClass| last.loops.iter().filter(|l| l.class == c).count();
        let _ = write!(
            o,
            "<p>The agent's loops as of summary {} ({:.0} s): {} periodic, {} sporadic",
            last.seq,
            last.t,
            n(LoopClass::Periodic),
            n(LoopClass::Sporadic)
        );
        if n(LoopClass::Unknown) > 0 {
            let _ = write!(o, ", {} not yet known", n(LoopClass::Unknown));
        }
        if last.unlisted > 0 {
            let _ = write!(o, "; {} more past the agent's list bound (not listed here)", last.unlisted);
        }
        if last.unwatched > 0 {
            let _ = write!(o, "; {} periodic RT loops the agent could not watch", last.unwatched);
        }
        o.push_str(
            ". Cycles, misses and overruns are the agent's own counts since it started (the cycle family's, \
             per thread), not the records in this capture.",
        );
        if self.starts_with_agent() {
            o.push_str(" The capture starts with the agent (its summary 1): over the capture is since start.");
        } else if self.start.is_some_and(|(b, _)| b != last.boot_id) {
            o.push_str(
                " The agent restarted during the capture and its counts started again: over the capture is a \
                 loop's counts in the last listing minus those of the first listing of the new run that counted it.",
            );
        } else {
            o.push_str(
                " The capture starts after the agent did: over the capture is a loop's counts in the last listing \
                 minus those of the first listing that counted it.",
            );
        }
        o.push_str("</p>\n");
        o.push_str(
            "<table id=\"loops\"><tr><th>loop</th><th>tid</th><th>pid</th><th>policy</th><th>class</th>\
             <th>period (source)</th><th>cycles</th><th>misses</th><th>overruns</th><th>rule breaks</th>\
             <th>over the capture</th><th>miss records in the capture</th></tr>\n",
        );
        for l in &last.loops {
            let policy = if l.rt && l.policy != Policy::Deadline {
                format!("{} {}", l.policy.word(), l.prio)
            } else {
                l.policy.word().to_string()
            };
            let class = match (l.class, l.rt, l.watched) {
                (LoopClass::Periodic, true, true) if l.cycle.is_none() => "periodic, watched, no cycle yet",
                (LoopClass::Periodic, true, true) => "periodic, watched",
                (LoopClass::Periodic, true, false) => "periodic, not watched",
                (LoopClass::Periodic, false, _) => "periodic, not RT",
                (LoopClass::Sporadic, ..) => "sporadic",
                (LoopClass::Unknown, ..) => "not yet known",
            };
            let period = if l.period_ns > 0 {
                let jitter = if l.jitter_ns > 0 { format!(" &plusmn;{}", fmt_ns(l.jitter_ns)) } else { String::new() };
                format!("{}{jitter} ({})", fmt_ns(l.period_ns), l.period_source.word())
            } else {
                "-".into()
            };
            let c = l.cycle.filter(|_| l.watched);
            let missed = c.is_some_and(|c| c.total_misses > 0);
            let num = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            let over = match self.over_capture(l) {
                Some((d, since)) => format!(
                    "{} cycles, {} misses, {} overruns{}",
                    d.total_cycles,
                    d.total_misses,
                    d.total_overruns,
                    if since > 0 { format!(" (since summary {since})") } else { String::new() }
                ),
                None => "-".into(),
            };
            let recs = records.records_of(l.tid).map_or("-".into(), |(m, _)| m.to_string());
            let _ = writeln!(
                o,
                "<tr{}><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{policy}</td><td>{class}</td>\
                 <td>{period}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td>{over}</td><td class=\"num\">{recs}</td></tr>",
                if missed { " class=\"missed\"" } else { "" },
                cell(&l.comm),
                l.tid,
                l.pid,
                num(c.map(|c| c.total_cycles)),
                num(c.map(|c| c.total_misses)),
                num(c.map(|c| c.total_overruns)),
                num(c.map(|c| c.total_rules)),
            );
        }
        o.push_str("</table>\n");
        // The agent's misses beside the records: plainly, when they differ.
        let watched = last.loops.iter().filter(|l| l.watched).filter_map(|l| l.cycle);
        let agent: u64 = watched.map(|c| c.total_misses).fold(0, u64::saturating_add);
        let got = records.miss_records;
        if last.loops.iter().any(|l| l.watched) {
            let line = if agent == got {
                format!("{agent} misses counted by the agent; as many records crossed the link.")
            } else {
                format!(
                    "<strong>{agent} misses counted by the agent; {got} records crossed the link.</strong> The \
                     records are what reached this capture (the agent sends them within its limits, a lost frame \
                     loses its records{}); the counts are the agent's own, cumulative, and lose nothing.",
                    if !self.starts_with_agent() { ", and the capture may have started after the agent" } else { "" }
                )
            };
            let _ = writeln!(o, "<p id=\"loops-vs-records\">{line}</p>");
        }
    }
}

#[cfg(test)]
mod tests {
    use latmon_core::anatomy::Policy;
    use latmon_core::cycle::{CycleEvent, CycleMark};
    use latmon_core::hist::Hist;
    use latmon_core::loops::{Loop, LoopClass, LoopCycles, PeriodSource};
    use latmon_core::summary::{AlertRecord, IntervalReport};
    use latmon_core::wire::{encode_to_vec, BucketScheme, Encoder, Frame, Hello, ProbeDesc, SummaryHeader};

    use super::super::{html, Capture};
    use super::*;

    /// ctl_loop (tid 412) as the agent lists it at summary `seq`: 1000
    /// cycles an interval, misses since start 2 + 2 * seq, one overrun;
    /// and a sporadic loop named `comm`.
    fn listing(seq: u64, comm: &str) -> Vec<Loop> {
        let ctl = Loop {
            tid: 412,
            pid: 410,
            comm: "ctl_loop".into(),
            policy: Policy::Fifo,
            prio: 80,
            rt: true,
            class: LoopClass::Periodic,
            period_ns: 1_000_000,
            period_source: PeriodSource::AbsTimer,
            jitter_ns: 0,
            watched: true,
            cycle: Some(LoopCycles {
                period_ns: 1_000_000,
                cycles: 1_000,
                total_cycles: 1_000 * seq,
                misses: 2,
                total_misses: 2 + 2 * seq,
                total_overruns: 1,
                total_rules: 0,
            }),
        };
        let other = Loop {
            tid: 415,
            comm: comm.into(),
            policy: Policy::Other,
            prio: 0,
            rt: false,
            class: LoopClass::Sporadic,
            period_ns: 0,
            period_source: PeriodSource::None,
            watched: false,
            cycle: None,
            ..ctl.clone()
        };
        vec![ctl, other]
    }

    /// Five summaries of a cycle probe, each after its Loops frames but
    /// the 4th's (lost); three miss records of ctl_loop crossed the link.
    fn capture(comm: &str) -> Vec<u8> {
        let hello = Hello {
            protocol_revision: latmon_core::wire::PROTOCOL_REVISION,
            latmon_version: "0.1.0".into(),
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 7,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: 1,
            probes: vec![ProbeDesc {
                id: 0,
                name: "cycle".into(),
                kind: "cycle".into(),
                attach: "tp_btf".into(),
                mode: String::new(),
                scheme: BucketScheme::LATMON,
            }],
            thresholds: Vec::new(),
            certificate: None,
        };
        let mut bytes = encode_to_vec(&Frame::Hello(hello)).unwrap();
        let mut hs = vec![Hist::default()];
        let mut enc = Encoder::new();
        let mut out = |f: &[u8]| bytes.extend_from_slice(f);
        for seq in 1..=5u64 {
            let time_ns = seq * 1_000_000_000;
            hs[0].record(900_000);
            if seq <= 3 {
                let release = time_ns - 500_000_000;
                let rec = AlertRecord {
                    id: latmon_core::ident::ProbeId::NONE,
                    pid: 410,
                    tid: 412,
                    comm: "ctl_loop".into(),
                    cpu: 1,
                    latency_ns: 1_500_000,
                    time_ns: release + 1_500_000,
                    anatomy: None,
                    cycle: Some(CycleMark {
                        event: CycleEvent::Miss,
                        release_ns: release,
                        deadline_ns: release + 1_000_000,
                        done_ns: Some(release + 1_500_000),
                        doing: None,
                        migrations: 0,
                        rule: None,
                    }),
                };
                enc.alert(7, 0, &rec, &mut out).unwrap();
            }
            if seq != 4 {
                enc.loops((7, seq, time_ns), &listing(seq, comm), (0, 0), &mut out).unwrap();
            }
            enc.summary(SummaryHeader { seq, boot_id: 7, time_ns, last: seq == 5 }, &hs, &mut out).unwrap();
        }
        bytes
    }

    /// Issue 42 item 3: the report gives the agent's own counts of each
    /// loop (12 misses since start, 8 of them over the capture) and says
    /// plainly that only 3 records crossed the link; before the records'
    /// section; a hostile loop name escaped.
    #[test]
    fn the_loops_section_gives_the_agents_counts_beside_the_records() {
        let c = Capture::read(&capture("<script>x\x1b[2J")[..]).unwrap();
        let (first, last) = (c.loops.first.as_ref().unwrap(), c.loops.last.as_ref().unwrap());
        assert_eq!((first.seq, last.seq, c.loops.listings), (1, 5, 4), "the 4th listing lost");
        assert_eq!(c.misses.miss_records, 3);
        let page = html(&c, "cap.bin").unwrap();
        let at = page.find("<h2>loops</h2>").unwrap_or_else(|| panic!("{page}"));
        let sec = &page[at..page.find("<h2>cycle misses</h2>").expect("the records' section after")];
        assert!(sec.contains("12 misses counted by the agent; 3 records crossed the link."), "{sec}");
        let row = sec.lines().find(|l| l.contains("ctl_loop")).unwrap_or_else(|| panic!("{sec}"));
        assert!(row.starts_with("<tr class=\"missed\">"), "stands out: {row}");
        assert!(row.contains("<td>fifo 80</td><td>periodic, watched</td><td>1.00ms (abs_timer)</td>"), "{row}");
        assert!(
            row.contains(
                "<td class=\"num\">5000</td><td class=\"num\">12</td><td class=\"num\">1</td><td class=\"num\">0</td>"
            ),
            "the agent's since-start counts: {row}"
        );
        assert!(row.contains("<td>5000 cycles, 12 misses, 1 overruns</td><td class=\"num\">3</td>"), "{row}");
        assert!(sec.contains("The capture starts with the agent (its summary 1): over the capture is since start."));
        // The sporadic loop: no counts; its name escaped one way.
        let row = sec.lines().find(|l| l.contains("sporadic</td>")).unwrap_or_else(|| panic!("{sec}"));
        assert!(row.contains("<td>&lt;script&gt;x\\u{1b}[2J</td>"), "{row}");
        assert!(row.contains("<td class=\"num\">-</td><td class=\"num\">-</td>"), "{row}");
        assert!(!page.contains("<script") && !page.contains('\x1b'));
        // A capture without Loops frames (an older agent) has no section.
        let old = Capture::read(&super::super::tests::capture()[..]).unwrap();
        assert!(!html(&old, "cap.bin").unwrap().contains("<h2>loops</h2>"));
    }

    /// Over the capture: the since-start counts when the capture starts
    /// with the agent; else the last listing's minus the first that
    /// counted the loop, after a restart of the new run's; none from one
    /// listing or when a count went down.
    #[test]
    fn over_the_capture_is_since_the_first_count_of_the_same_run() {
        let report = |seq| IntervalReport { seq, loops: listing(seq, "x"), ..Default::default() };
        let ctl = |l: &Loops| l.last.as_ref().unwrap().loops[0].clone();
        let misses = |l: &Loops| l.over_capture(&ctl(l)).map(|(d, since)| (d.total_misses, since));
        let mut l = Loops::default();
        l.offer(7, &report(3), 3.0);
        assert_eq!(misses(&l), None, "one listing");
        l.offer(7, &IntervalReport { seq: 4, ..Default::default() }, 4.0);
        l.offer(7, &report(5), 5.0);
        assert_eq!(misses(&l), Some((12 - 8, 3)));
        l.offer(8, &report(6), 6.0);
        assert_eq!(misses(&l), None, "a restart: the new run counted once");
        l.offer(8, &report(7), 7.0);
        assert_eq!(misses(&l), Some((16 - 14, 6)));
        let mut page = String::new();
        l.offer(8, &IntervalReport { seq: 8, ..Default::default() }, 8.0);
        assert_eq!(l.last.as_ref().unwrap().seq, 7, "a summary without loops keeps the last listing");
        l.html(&mut page, &Misses::default());
        assert!(page.contains("The agent restarted during the capture"), "{page}");
        assert!(page.contains("<td>1000 cycles, 2 misses, 0 overruns (since summary 6)</td>"), "{page}");
        assert!(page.contains("16 misses counted by the agent; 0 records crossed the link."), "{page}");
        let mut down = Loops::default();
        down.offer(7, &report(3), 3.0);
        down.offer(7, &report(2), 4.0);
        assert_eq!(misses(&down), None, "counts went down");
        let mut whole = Loops::default();
        whole.offer(7, &IntervalReport { seq: 1, ..Default::default() }, 1.0);
        whole.offer(7, &report(2), 2.0);
        assert_eq!(misses(&whole), Some((6, 0)), "the capture starts with the agent: since start");
    }
}
