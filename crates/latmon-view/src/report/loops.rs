// SPDX-License-Identifier: MIT
//! The report's loops section: the board's loops as the agent listed
//! them (Loops frames, revision 12) with each watched loop's cycles,
//! misses and overruns since the agent started, as the agent counted
//! them. Until revision 12 a report counted only the miss records that
//! crossed the link (22 where the agent counted 3 899): the records are
//! what reached the capture, the counts what happened.
//!
//! Bounded: two listings (the first and the last of the capture, for
//! its span), each of at most `loops::LISTED` loops (the tracker's bound).

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

/// The capture's first and last listing.
#[derive(Debug, Default)]
pub struct Loops {
    pub first: Option<Listing>,
    pub last: Option<Listing>,
    /// Summaries that came with a listing.
    pub listings: u64,
}

impl Loops {
    /// A summary's loops, when it came with them (the tracker gives them
    /// only to the summary of their own seq: none when the interval's
    /// Loops frame was lost, and the last listing stays).
    pub fn offer(&mut self, boot_id: u32, r: &IntervalReport, t: f64) {
        if r.loops.is_empty() && r.loops_unlisted == 0 {
            return;
        }
        self.listings += 1;
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

    /// The agent's since-start counts of a loop of the last listing
    /// minus those of the first (same agent run, same thread): what it
    /// counted over the capture. None without two listings of one run,
    /// or when the loop was not watched in both.
    pub fn over_capture(&self, l: &Loop) -> Option<LoopCycles> {
        let (first, last) = (self.first.as_ref()?, self.last.as_ref()?);
        if first.seq == last.seq || first.boot_id != last.boot_id {
            return None;
        }
        let a = first.loops.iter().find(|f| f.tid == l.tid && f.pid == l.pid)?.cycle?;
        let b = l.cycle?;
        // A count that went down is another run's (or another thread
        // with a reused tid): no difference rather than a wrong one.
        if b.total_cycles < a.total_cycles || b.total_misses < a.total_misses || b.total_overruns < a.total_overruns {
            return None;
        }
        Some(LoopCycles {
            period_ns: b.period_ns,
            cycles: 0,
            total_cycles: b.total_cycles - a.total_cycles,
            misses: 0,
            total_misses: b.total_misses - a.total_misses,
            total_overruns: b.total_overruns - a.total_overruns,
            total_rules: b.total_rules.saturating_sub(a.total_rules),
        })
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
        match &self.first {
            Some(f) if f.seq != last.seq && f.boot_id == last.boot_id => {
                let _ = write!(
                    o,
                    " &quot;Over the capture&quot; is the last listing minus the first (summary {}, {:.0} s).",
                    f.seq, f.t
                );
            }
            Some(f) if f.boot_id != last.boot_id => {
                o.push_str(" The agent restarted during the capture: its counts started again, so none are given over the capture.");
            }
            _ => {}
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
            let over = match self.over_capture(l).filter(|_| l.watched) {
                Some(d) => {
                    format!("{} cycles, {} misses, {} overruns", d.total_cycles, d.total_misses, d.total_overruns)
                }
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
                    if self.first.as_ref().is_some_and(|f| f.seq > 1) {
                        ", and the capture may have started after the agent"
                    } else {
                        ""
                    }
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
        assert!(row.contains("<td>4000 cycles, 8 misses, 0 overruns</td><td class=\"num\">3</td>"), "{row}");
        assert!(sec.contains("last listing minus the first (summary 1, 1 s)"), "{sec}");
        // The sporadic loop: no counts; its name escaped one way.
        let row = sec.lines().find(|l| l.contains("sporadic</td>")).unwrap_or_else(|| panic!("{sec}"));
        assert!(row.contains("<td>&lt;script&gt;x\\u{1b}[2J</td>"), "{row}");
        assert!(row.contains("<td class=\"num\">-</td><td class=\"num\">-</td>"), "{row}");
        assert!(!page.contains("<script") && !page.contains('\x1b'));
        // A capture without Loops frames (an older agent) has no section.
        let old = Capture::read(&super::super::tests::capture()[..]).unwrap();
        assert!(!html(&old, "cap.bin").unwrap().contains("<h2>loops</h2>"));
    }

    /// Listings of two agent runs (a restart) or of one summary give no
    /// difference; a count that went down gives none either.
    #[test]
    fn no_difference_over_the_capture_across_a_restart() {
        let report = |seq| IntervalReport { seq, loops: listing(seq, "x"), ..Default::default() };
        let mut l = Loops::default();
        l.offer(7, &report(1), 1.0);
        let ctl = |l: &Loops| l.last.as_ref().unwrap().loops[0].clone();
        assert_eq!(l.over_capture(&ctl(&l)), None, "one listing");
        l.offer(7, &report(3), 3.0);
        assert_eq!(l.over_capture(&ctl(&l)).map(|d| d.total_misses), Some(4));
        l.offer(8, &report(4), 4.0);
        assert_eq!(l.over_capture(&ctl(&l)), None, "another run");
        let mut l = Loops::default();
        l.offer(7, &report(3), 3.0);
        l.offer(7, &report(2), 4.0);
        assert_eq!(l.over_capture(&ctl(&l)), None, "counts went down");
        let mut page = String::new();
        l.offer(7, &IntervalReport { seq: 5, ..Default::default() }, 5.0);
        assert_eq!(l.last.as_ref().unwrap().seq, 2, "a summary without loops keeps the last listing");
        l.html(&mut page, &Misses::default());
        assert!(page.contains("6 misses counted by the agent; 0 records crossed the link."), "{page}");
    }
}
