// SPDX-License-Identifier: MIT
//! `latmon-view report CAPTURE -o report.html`: a frames capture (the
//! `file:` output, or a saved serial log: the same bytes) as one
//! self-contained HTML file with inline SVG charts (plotters' SVG
//! backend), no script and no network: per probe the histogram since
//! start on a log latency axis and p50/p99/max per interval; the alert
//! timeline and each record; latmon's own cost and the link's health over
//! time; the board, kernel and probe configuration the capture came from.
//!
//! [`Capture`] gathers the frames (pure, unit-tested); [`html`] renders it.
//!
//! A capture of a shift (8 h at 115200 baud: hundreds of MB) is read as a
//! stream, and what is kept does not grow with its length:
//! - per series and for the agent's health an [`Envelope`]: at most
//!   [`SERIES_BUCKETS`] / [`HEALTH_BUCKETS`] buckets of consecutive
//!   intervals, each the min and max of what it covers (a spike of one
//!   interval survives any downsampling); series are bounded by the
//!   wire's MAX_PROBES;
//! - alerts: per probe an envelope of [`ALERT_BUCKETS`] (at most
//!   [`MAX_ALERT_PROBES`] probes drawn apart, the rest as one), and the
//!   [`MAX_ALERT_ROWS`] worst records for the table;
//! - per series its histogram since start (the tracker's, fixed size).
//!
//! Reading is linear in the capture (a bucket merge halves the buckets, so
//! each interval is merged O(1) times amortised). Memory: per series its
//! envelope (18 KiB) and histogram (2 KiB) beside the tracker's state; the
//! alert table's records. The HTML: per series with events two charts of
//! at most [`SERIES_BUCKETS`] points per line (~30 KB), plus the alert
//! timeline (at most 13 × [`ALERT_BUCKETS`] points) and table: 4 MB for
//! the 140 series of the default probes under load (README's figures);
//! the wire's MAX_PROBES (1024) series would be ~30 MB.

use std::fmt::Write as _;
use std::io::Read;

use anyhow::{anyhow, Context, Result};
use latmon_core::hist::Hist;
use latmon_core::text::fmt_ns;
use latmon_core::wire::{
    Event, FrameDecoder, Hello, LinkStats, ReceivedAlert, Tracker, MAX_PROBES, STATUS_COST_MEASURED,
};
use plotters::prelude::{BLUE, GREEN, MAGENTA, RED};

mod charts;
mod loops;
mod misses;
mod model;

use charts::{alerts_svg, health_svg, hist_svg, pct_svg};
use model::{
    cell, detail, esc, hv, plain, Envelope, Series, Worst, ALERT_BUCKETS, HEALTH_BUCKETS, MAX_ALERT_PROBES,
    MAX_ALERT_ROWS,
};

#[derive(Debug)]
pub struct Capture {
    pub hello: Option<Hello>,
    pub series: Vec<Series>,
    pub totals: Vec<Option<Hist>>,
    pub names: Vec<String>,
    /// Per probe name (the first [`MAX_ALERT_PROBES`]; then `other
    /// probes`), the alerts' latency (ns) against seconds since start.
    pub alert_marks: Vec<(String, Envelope<1>)>,
    worst: Worst,
    pub alerts_seen: u64,
    /// The cycle probes' misses and overruns ([`misses`]).
    pub misses: misses::Misses,
    /// The agent's loops and its counts of them: the capture's first
    /// and last listing ([`loops`]).
    pub loops: loops::Loops,
    pub health: Envelope<{ hv::N }>,
    /// Seconds since start of the first and last summary.
    pub span: Option<(f64, f64)>,
    pub link: LinkStats,
    pub summaries: u64,
    pub summaries_lost: u64,
    pub restarts: u64,
}

impl Default for Capture {
    fn default() -> Self {
        Capture {
            hello: None,
            series: Vec::new(),
            totals: Vec::new(),
            names: Vec::new(),
            alert_marks: Vec::new(),
            worst: Worst::new(MAX_ALERT_ROWS),
            alerts_seen: 0,
            misses: misses::Misses::default(),
            loops: loops::Loops::default(),
            health: Envelope::new(HEALTH_BUCKETS),
            span: None,
            link: LinkStats::default(),
            summaries: 0,
            summaries_lost: 0,
            restarts: 0,
        }
    }
}

impl Capture {
    /// Read a whole capture (any bytes: bad frames are counted, not fatal),
    /// as a stream: memory as the module's header says, whatever its length.
    pub fn read(mut r: impl Read) -> Result<Capture> {
        let mut c = Capture::default();
        let mut dec = FrameDecoder::new();
        let mut t = Tracker::new();
        let mut buf = vec![0u8; 64 << 10];
        let mut link_errs = (0, 0);
        loop {
            let n = r.read(&mut buf).context("read capture")?;
            if n == 0 {
                break;
            }
            dec.feed(&buf[..n], &mut |f| {
                if let Ok(f) = f {
                    let ev = t.on_frame(f);
                    c.on_event(&ev, &t, link_errs);
                }
            });
            // The decoder's counters are read between chunks (feed holds
            // it): the latest summary's bucket takes them.
            link_errs = (dec.stats.crc_errors, dec.stats.resyncs);
            if let Some(h) = c.health.last_mut() {
                h.hi[hv::CRC] = h.hi[hv::CRC].max(link_errs.0 as f64);
                h.hi[hv::RESYNCS] = h.hi[hv::RESYNCS].max(link_errs.1 as f64);
            }
        }
        c.link = dec.stats;
        c.summaries = t.summaries;
        c.summaries_lost = t.summaries_lost;
        c.restarts = t.restarts;
        c.hello = t.hello.clone();
        for (id, name) in c.names.iter_mut().enumerate() {
            if name.is_empty() {
                *name = t.probe_name(id as u16);
            }
        }
        if c.summaries == 0 {
            return Err(anyhow!(
                "no summary in the capture ({} bytes, {} good frames, {} CRC errors): is it a frames capture \
                 (latmon run --output file:PATH or a serial log of --format frames)?",
                c.link.bytes,
                c.link.frames_good,
                c.link.crc_errors
            ));
        }
        Ok(c)
    }

    /// The alert records of the table: the worst [`MAX_ALERT_ROWS`], in
    /// time order.
    pub fn alert_rows(&self) -> Vec<&ReceivedAlert> {
        self.worst.in_time_order()
    }

    fn on_event(&mut self, ev: &Event, t: &Tracker, (crc, resyncs): (u64, u64)) {
        let start = t.hello.as_ref().map_or(0, |h| h.start_ns);
        match ev {
            Event::Summary { report, ids, boot_id, .. } => {
                let ts = report.time_ns.saturating_sub(start) as f64 / 1e9;
                self.span = Some((self.span.map_or(ts, |s| s.0), ts));
                self.loops.offer(*boot_id, report, ts);
                for (p, &id) in report.probes.iter().zip(ids) {
                    let i = id as usize;
                    if i >= MAX_PROBES {
                        continue;
                    }
                    if self.series.len() <= i {
                        self.series.resize(i + 1, Series::default());
                        self.totals.resize(i + 1, None);
                        self.names.resize(i + 1, String::new());
                    }
                    let s = &mut self.series[i];
                    // An interval without events has no percentiles (the
                    // text table's `-`): NaN, skipped when drawn, so a quiet
                    // series' chart does not reach down to 1 ns.
                    let v =
                        if p.count > 0 { [p.p50_ns as f64, p.p99_ns as f64, p.max_ns as f64] } else { [f64::NAN; 3] };
                    s.env.push(ts, v);
                    s.events += p.count;
                    // In place: a summary of hundreds of probes every
                    // second allocates nothing here once they are known.
                    match (&mut self.totals[i], t.totals(id)) {
                        (Some(have), Some(now)) => have.clone_from(now),
                        (slot, now) => *slot = now.cloned(),
                    }
                    if self.names[i] != p.name {
                        self.names[i].clone_from(&p.name);
                    }
                }
                let mut v = [f64::NAN; hv::N];
                v[hv::CRC] = crc as f64;
                v[hv::RESYNCS] = resyncs as f64;
                v[hv::LOST] = t.summaries_lost as f64;
                if let Some(st) = &t.status {
                    if st.flags & STATUS_COST_MEASURED != 0 {
                        v[hv::CPU] = f64::from(st.bpf_cpu_ppm) / 10_000.0;
                    }
                    if st.link.budget_bps > 0 {
                        v[hv::USED] = f64::from(st.link.used_bps);
                        v[hv::BUDGET] = f64::from(st.link.budget_bps);
                    }
                    v[hv::DROPS] = st.frames_dropped as f64;
                } else {
                    v[hv::DROPS] = 0.0;
                }
                self.health.push(ts, v);
            }
            Event::Alert(got) => {
                let a = &got.record;
                self.alerts_seen += 1;
                let time_ns = a.time_ns.saturating_sub(start);
                let k = match self.alert_marks.iter().position(|(n, _)| *n == got.probe) {
                    Some(k) => k,
                    None if self.alert_marks.len() < MAX_ALERT_PROBES => {
                        self.alert_marks.push((got.probe.clone(), Envelope::new(ALERT_BUCKETS)));
                        self.alert_marks.len() - 1
                    }
                    None => {
                        // The rest share one entry, after the named ones.
                        if self.alert_marks.len() == MAX_ALERT_PROBES {
                            self.alert_marks.push((String::new(), Envelope::new(ALERT_BUCKETS)));
                        }
                        MAX_ALERT_PROBES
                    }
                };
                // A rule's record has no latency to plot (its 0 would
                // drag the chart's floor down); the table lists it.
                if !a.is_rule() {
                    self.alert_marks[k].1.push(time_ns as f64 / 1e9, [a.latency_ns as f64]);
                }
                self.worst.offer(got, time_ns);
                self.misses.offer(got, time_ns);
            }
            _ => {}
        }
    }
}

/// The whole report.
pub fn html(c: &Capture, capture_name: &str) -> Result<String> {
    let mut o = String::with_capacity(256 << 10);
    let h = c.hello.as_ref();
    // The board's name from its Hello (the config's `board`, else the
    // host name); an older agent's capture or one without a Hello names
    // none, and the report says which.
    let board = match h {
        Some(h) if !h.board.is_empty() => esc(&h.board),
        Some(_) => "(unnamed: the agent sent no board name)".to_string(),
        None => "(unnamed: the capture has no Hello frame)".to_string(),
    };
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    let _ = writeln!(o, "<title>latmon report: {board}</title>");
    o.push_str(
        "<style>body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}\
         td,th{border:1px solid #bbb;padding:2px 8px;text-align:left}th{background:#eee}\
         section.probe{border-top:2px solid #888;margin-top:1.5em}section.probe svg{margin-right:1em}\
         .num{text-align:right}tr.missed td{background:#fdd}</style>\n</head><body>\n",
    );
    let _ = writeln!(o, "<h1>latmon report: {board}</h1>");
    o.push_str("<table id=\"facts\">\n");
    let mut fact = |k: &str, v: String| {
        let _ = writeln!(o, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    fact("capture", esc(capture_name));
    if let Some(h) = h {
        fact("board", board.clone());
        fact("kernel", esc(&h.kernel));
        fact("latmon", esc(&h.latmon_version));
        fact("boot id", format!("{:08x}", h.boot_id));
        fact("interval", fmt_ns(h.interval_ns));
        // Hello revision 11: what latmon costs on that board. The line
        // holds only numbers; escaped anyway, as every fact from the board.
        if let Some(cert) = &h.certificate {
            fact("certificate", esc(&cert.line()));
        }
    } else {
        fact("board", board.clone());
    }
    let (t0, t1) = c.span.unwrap_or((0.0, 0.0));
    let span = t1 - t0;
    fact(
        "summaries",
        format!(
            "{} over {span:.0} s{}, {} lost, {} agent restarts",
            c.summaries,
            match span {
                s if s >= 5400.0 => format!(" ({:.1} h)", s / 3600.0),
                s if s >= 120.0 => format!(" ({:.0} min)", s / 60.0),
                _ => String::new(),
            },
            c.summaries_lost,
            c.restarts
        ),
    );
    fact(
        "link",
        format!(
            "{} bytes, {} good frames, {} CRC errors, {} resyncs, {} other errors",
            c.link.bytes,
            c.link.frames_good,
            c.link.crc_errors,
            c.link.resyncs,
            c.link.errors() - c.link.crc_errors
        ),
    );
    fact("alerts", format!("{} records", c.alerts_seen));
    o.push_str("</table>\n");
    o.push_str("<h2>latmon's cost and the link</h2>\n");
    o.push_str(&health_svg(&c.health, c.span, "agent cost: BPF CPU %", &[("BPF CPU %", BLUE, hv::CPU)])?);
    if c.health.buckets().iter().any(|b| b.hi[hv::BUDGET] > 0.0) {
        o.push_str(&health_svg(
            &c.health,
            c.span,
            "link: bytes/s used and budget",
            &[("used B/s", BLUE, hv::USED), ("budget B/s", RED, hv::BUDGET)],
        )?);
    } else {
        // A flat 0 B/s line would read as "nothing sent".
        o.push_str(
            "<p>The captured output has no byte budget (a file or socket output without <code>budget=</code>): \
             the agent does not measure its link use. Its bytes are in the facts above.</p>\n",
        );
    }
    o.push_str(&health_svg(
        &c.health,
        c.span,
        "link health (cumulative)",
        &[
            ("CRC errors", RED, hv::CRC),
            ("resyncs", MAGENTA, hv::RESYNCS),
            ("summaries lost", BLUE, hv::LOST),
            ("agent frames dropped", GREEN, hv::DROPS),
        ],
    )?);
    o.push_str("<h2>alerts</h2>\n");
    if c.alerts_seen == 0 {
        o.push_str("<p>No alert records in the capture.</p>\n");
    } else {
        o.push_str(&alerts_svg(&c.alert_marks, c.alerts_seen, (t0, t1))?);
        let rows = c.alert_rows();
        if c.alerts_seen > rows.len() as u64 {
            let _ = writeln!(o, "<p>The {} worst of {} records, in time order.</p>", rows.len(), c.alerts_seen);
        }
        o.push_str("<table id=\"alerts\"><tr><th>time (s)</th><th>probe</th><th>latency</th><th>pid</th><th>tid</th><th>comm</th><th>cpu</th><th>what delayed it</th></tr>\n");
        for got in rows {
            let a = &got.record;
            // What delayed it, as the agent prints it (a cycle record's
            // `miss 1.62ms of 1.00ms: ...`, else the anatomy's line); the
            // row's names escaped one way (model::detail).
            let _ = writeln!(
                o,
                "<tr><td class=\"num\">{:.6}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                a.time_ns as f64 / 1e9,
                cell(&got.probe),
                if a.is_rule() { "rule".into() } else { fmt_ns(a.latency_ns) },
                a.pid,
                a.tid,
                cell(&a.comm),
                a.cpu,
                detail(got)
            );
        }
        o.push_str("</table>\n");
    }
    if c.loops.last.is_some() {
        // The agent's counts before the records: they are complete.
        o.push_str("<h2>loops</h2>\n");
        c.loops.html(&mut o, &c.misses);
    }
    if !c.misses.probes.is_empty() || c.misses.unshown > 0 {
        o.push_str("<h2>cycle misses</h2>\n");
        c.misses.html(&mut o, (t0, t1))?;
    }
    o.push_str("<h2>probes</h2>\n");
    let mut quiet = Vec::new();
    for (id, s) in c.series.iter().enumerate() {
        let name = esc(&c.names[id]);
        let Some(tot) = c.totals[id].as_ref().filter(|t| t.count > 0) else {
            if !s.env.is_empty() {
                quiet.push(name);
            }
            continue;
        };
        let p = tot.percentiles();
        let _ = writeln!(
            o,
            "<section class=\"probe\" id=\"probe-{id}\"><h3>{name}</h3>\n<p>{} events since start: p50 {}, p99 {}, p99.9 {}, max {}</p>",
            tot.count,
            fmt_ns(p.p50_ns),
            fmt_ns(p.p99_ns),
            fmt_ns(p.p999_ns),
            fmt_ns(tot.max_ns)
        );
        // Chart captions: plain text (the SVG backend escapes it).
        let caption = plain(&c.names[id]);
        o.push_str(&hist_svg(&caption, tot)?);
        o.push_str(&pct_svg(&caption, s, (t0, t1))?);
        o.push_str("</section>\n");
    }
    if !quiet.is_empty() {
        let _ = writeln!(o, "<p id=\"quiet\">No events: {}.</p>", quiet.join(", "));
    }
    if let Some(h) = h {
        o.push_str("<h2>configuration</h2>\n<details><summary>the probes and series of the Hello frame</summary>\n<table id=\"config\"><tr><th>id</th><th>probe</th><th>family</th><th>attach</th><th>mode</th></tr>\n");
        for p in &h.probes {
            let _ = writeln!(
                o,
                "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                p.id,
                esc(&p.name),
                esc(p.kind.as_str()),
                esc(p.attach.as_str()),
                esc(&p.mode)
            );
        }
        o.push_str("</table></details>\n");
    }
    o.push_str("<p><small>latmon-view report</small></p>\n</body></html>\n");
    Ok(o)
}

#[cfg(test)]
pub(super) mod tests {
    use latmon_core::summary::AlertRecord;
    use latmon_core::wire::{encode_to_vec, Alert, BucketScheme, Encoder, Frame, ProbeDesc, SummaryHeader};

    use super::*;

    pub(super) fn capture() -> Vec<u8> {
        capture_named(["runq", "idle"], "ctl<script>")
    }

    fn capture_named(names: [&str; 2], comm: &str) -> Vec<u8> {
        let hello = Hello {
            protocol_revision: 0,
            latmon_version: "0.1.0".into(),
            board: "arm<1>".into(),
            kernel: "6.18".into(),
            boot_id: 7,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: 2,
            probes: names
                .iter()
                .enumerate()
                .map(|(i, n)| ProbeDesc {
                    id: i as u16,
                    name: (*n).into(),
                    kind: "runq".into(),
                    attach: "tp_btf".into(),
                    mode: String::new(),
                    scheme: BucketScheme::LATMON,
                })
                .collect(),
            thresholds: Vec::new(),
            // Hello revision 11: the board's certificate, a fact row.
            certificate: Some(latmon_core::wire::WireCertificate {
                verdict: latmon_core::wire::CERT_FAIL,
                duration_s: 60,
                made_at_unix: 1_796_601_600,
                shift_p999_ns: 12_300,
                ci95_lo_ns: 9_000,
                ci95_hi_ns: 15_000,
                ..Default::default()
            }),
        };
        let mut bytes = encode_to_vec(&Frame::Hello(hello)).unwrap();
        let mut hs = vec![Hist::default(); 2];
        let mut enc = Encoder::new();
        for seq in 1..=5u64 {
            for v in [2_000, 3_000, 40_000 * seq] {
                hs[0].record(v);
            }
            enc.summary(
                SummaryHeader { seq, boot_id: 7, time_ns: seq * 1_000_000_000, last: seq == 5 },
                &hs,
                &mut |f| bytes.extend_from_slice(f),
            )
            .unwrap();
        }
        let a = Alert {
            boot_id: 7,
            probe: 0,
            pid: 4,
            tid: 5,
            comm: comm.into(),
            cpu: 1,
            latency_ns: 200_000,
            time_ns: 3_000_000_000,
            cpu_woken: 1,
            cpu_ran: 1,
            causes: Vec::new(),
            ..Default::default()
        };
        bytes.extend(encode_to_vec(&Frame::Alert(a)).unwrap());
        bytes.extend([0x55, 0x12, 0x00]); // damage: counted, not fatal
        bytes
    }

    /// A cycle rule's record is listed as `rule`, never as a 0 ns latency,
    /// and left out of the latency chart.
    #[test]
    fn a_rule_record_is_a_rule_in_the_table_not_a_zero_latency() {
        let mut bytes = capture();
        let a = Alert {
            boot_id: 7,
            probe: 0,
            pid: 4,
            tid: 5,
            comm: "loop".into(),
            cpu: 1,
            latency_ns: 0,
            time_ns: 4_000_000_000,
            cpu_woken: 0,
            cpu_ran: 0,
            causes: Vec::new(),
            cycle: latmon_core::wire::WireCycle {
                event: latmon_core::wire::cycle::event::RULE,
                doing_id: 1,
                doing_name: "fdatasync".into(),
                ..Default::default()
            },
        };
        bytes.extend(encode_to_vec(&Frame::Alert(a)).unwrap());
        let c = Capture::read(bytes.as_slice()).unwrap();
        assert_eq!(c.alerts_seen, 2);
        let h = html(&c, "cap.bin").unwrap();
        let row = h.lines().find(|l| l.contains("rule sleep_other in fdatasync")).unwrap_or_else(|| panic!("{h}"));
        assert!(row.contains("<td class=\"num\">rule</td>") && !row.contains("0ns"), "{row}");
    }

    #[test]
    fn a_capture_becomes_series_totals_and_alerts() {
        let c = Capture::read(capture().as_slice()).unwrap();
        assert_eq!(c.summaries, 5);
        let ts: Vec<f64> = c.series[0].env.buckets().iter().map(|b| b.t0).collect();
        assert_eq!(ts, [1.0, 2.0, 3.0, 4.0, 5.0], "one bucket per interval while they fit");
        assert!(c.series[0].env.buckets()[4].hi[2] >= 200_000.0, "the last interval's max");
        assert_eq!(c.span, Some((1.0, 5.0)));
        assert!(
            c.series[1].env.buckets().iter().all(|b| b.hi.iter().all(|v| v.is_nan())),
            "intervals without events have no percentiles (not 0 ns)"
        );
        assert_eq!(c.totals[0].as_ref().unwrap().count, 15);
        assert_eq!((c.alerts_seen, c.alert_rows().len()), (1, 1));
        assert_eq!(c.alert_rows()[0].record.time_ns, 3_000_000_000, "time since the agent started");
        assert!(c.link.errors() > 0, "the damaged tail is counted");
        assert!(Capture::read(&b"not a capture"[..]).unwrap_err().to_string().contains("no summary"));
    }

    #[test]
    fn the_html_has_charts_per_probe_and_escapes_wire_strings() {
        let c = Capture::read(capture().as_slice()).unwrap();
        let h = html(&c, "cap.bin").unwrap();
        let runq = &h[h.find("id=\"probe-0\"").unwrap()..];
        let runq = &runq[..runq.find("</section>").unwrap()];
        assert_eq!(runq.matches("<svg").count(), 2, "histogram and percentiles");
        assert!(runq.contains("<rect"), "histogram bars");
        assert!(runq.contains("<polyline"), "percentile lines");
        assert!(!h.contains("id=\"probe-1\""), "a probe without events gets no charts");
        assert!(h.contains("No events: idle."));
        assert!(h.contains("arm&lt;1&gt;") && h.contains("ctl&lt;script&gt;"));
        assert!(h.contains(
            "<tr><th>certificate</th><td>certified: p99.9 +12.3 us [9.0, 15.0] (fail, 60 s, 2026-12-07)</td></tr>"
        ));
        assert!(!h.contains("<script") && !h.contains("src=") && !h.contains("href="), "self-contained, no script");
    }

    /// The heading names the board; a capture whose agent sent no name
    /// says so instead of a bare `-`.
    #[test]
    fn the_report_names_the_board_or_says_why_not() {
        let mut c = Capture::read(capture().as_slice()).unwrap();
        assert!(html(&c, "cap.bin").unwrap().contains("<h1>latmon report: arm&lt;1&gt;</h1>"));
        c.hello.as_mut().unwrap().board.clear();
        let h = html(&c, "cap.bin").unwrap();
        assert!(h.contains("<h1>latmon report: (unnamed: the agent sent no board name)</h1>"), "{h:.600}");
        c.hello = None;
        assert!(html(&c, "cap.bin").unwrap().contains("(unnamed: the capture has no Hello frame)"));
    }

    /// Names with HTML, bidi overrides and raw controls: escaped once
    /// wherever they land (table cells, chart captions, legends).
    #[test]
    fn hostile_names_are_escaped_once_in_cells_captions_and_legends() {
        let probe = "p<b>\u{202e}lor\u{7}";
        let c = Capture::read(capture_named([probe, "idle"], "c\u{0}\u{1b}[31m\u{2067}x").as_slice()).unwrap();
        let h = html(&c, "cap.bin").unwrap();
        let raw: Vec<char> =
            h.chars().filter(|&c| (c.is_control() && c != '\n') || latmon_core::json::needs_escape(c)).collect();
        assert!(raw.is_empty(), "raw controls or bidi overrides in the HTML: {raw:?}");
        assert!(!h.contains("&amp;lt;"), "escaped twice somewhere");
        let section = &h[h.find("id=\"probe-0\"").unwrap()..];
        let section = &section[..section.find("</section>").unwrap()];
        let shown = "p&lt;b&gt;\\u{202e}lor\\u{7}";
        assert_eq!(section.matches(shown).count(), 3, "heading and both captions: {section:.2000}");
        assert!(h.contains("c\\u{0}\\u{1b}[31m\\u{2067}x"), "the alert's comm in its cell");
        let chart = &h[h.find("alerts: ").unwrap()..];
        assert!(chart[..chart.find("</svg>").unwrap()].contains(shown), "the alert chart's legend");
    }

    /// However many samples, the buckets stay within the cap, cover every
    /// sample once, and a spike of one sample survives as some bucket's
    /// max (and a dip as some bucket's min).
    #[test]
    fn envelopes_stay_bounded_and_keep_spikes_and_dips() {
        for n in [0u64, 1, 7, 16, 17, 1000, 100_003] {
            let mut e = Envelope::<2>::new(16);
            for i in 0..n {
                let v = if i == n / 3 { 1e9 } else { (i % 7) as f64 };
                let w = if i == n / 2 { -5.0 } else { f64::NAN };
                e.push(i as f64, [v, w]);
            }
            assert!(e.buckets().len() <= 16, "{n}: {} buckets", e.buckets().len());
            assert_eq!(e.samples(), n, "{n}: every sample in one bucket");
            if n > 16 {
                assert!(e.buckets().len() > 8, "{n}: at least half the cap is used");
            }
            if n > 0 {
                assert!(e.buckets().iter().any(|b| b.hi[0] == 1e9), "{n}: the spike");
                assert!(e.buckets().iter().any(|b| b.lo[1] == -5.0), "{n}: the dip, NaN samples skipped");
                assert!(e.buckets().windows(2).all(|w| w[0].t1 < w[1].t0), "{n}: in time order, apart");
                assert_eq!((e.buckets()[0].t0, e.buckets().last().unwrap().t1), (0.0, (n - 1) as f64));
            }
        }
    }

    /// The table keeps the worst MAX_ALERT_ROWS records (of equal latency
    /// the earlier), listed in time order.
    #[test]
    fn the_alert_table_keeps_the_worst_in_time_order() {
        let rec = |t: u64, lat: u64| ReceivedAlert {
            probe: "runq".into(),
            record: AlertRecord {
                id: latmon_core::ident::ProbeId::NONE,
                pid: 1,
                tid: 1,
                comm: "c".into(),
                cpu: 0,
                latency_ns: lat,
                time_ns: t,
                anatomy: None,
                cycle: None,
            },
        };
        let mut w = Worst::new(MAX_ALERT_ROWS);
        let n = 3 * MAX_ALERT_ROWS as u64;
        for t in 0..n {
            // Latencies 0..n in a scrambled order (7919 is prime to n).
            let lat = (t * 7919) % n;
            w.offer(&rec(t, lat), t);
        }
        // A tie with the least kept: the earlier stays.
        w.offer(&rec(n, n - MAX_ALERT_ROWS as u64), n);
        let rows = w.in_time_order();
        assert_eq!(rows.len(), MAX_ALERT_ROWS);
        assert!(rows.windows(2).all(|p| p[0].record.time_ns < p[1].record.time_ns));
        let least = rows.iter().map(|r| r.record.latency_ns).min().unwrap();
        assert_eq!(least, n - MAX_ALERT_ROWS as u64, "exactly the worst");
        assert!(rows.iter().all(|r| r.record.time_ns != n), "of two equal the earlier stays");
    }
}
