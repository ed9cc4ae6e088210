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
//! Bounds: per series at most [`MAX_POINTS`] points are drawn (each the
//! worst of the intervals it covers); at most [`MAX_ALERT_ROWS`] alert
//! records are listed (the rest counted); probes are bounded by the wire's
//! MAX_PROBES.

use std::fmt::Write as _;
use std::io::Read;

use anyhow::{anyhow, Context, Result};
use latmon_core::hist::Hist;
use latmon_core::summary::AlertRecord;
use latmon_core::text::fmt_ns;
use latmon_core::wire::{Event, FrameDecoder, Hello, LinkStats, Tracker, MAX_PROBES, STATUS_COST_MEASURED};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Points drawn per time series.
pub const MAX_POINTS: usize = 1500;
/// Alert records listed in the table.
pub const MAX_ALERT_ROWS: usize = 500;
/// Alert records kept for the timeline.
pub const MAX_ALERTS_KEPT: usize = 20_000;

/// One probe's intervals.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Seconds since the agent started, per interval.
    pub t_s: Vec<f64>,
    pub p50_ns: Vec<u64>,
    pub p99_ns: Vec<u64>,
    pub max_ns: Vec<u64>,
    pub events: u64,
}

/// A sample of the agent's and the link's state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Health {
    pub t_s: f64,
    pub bpf_cpu_percent: Option<f64>,
    pub used_bps: u32,
    pub budget_bps: u32,
    pub crc_errors: u64,
    pub resyncs: u64,
    pub summaries_lost: u64,
    pub agent_drops: u64,
}

#[derive(Debug, Default)]
pub struct Capture {
    pub hello: Option<Hello>,
    pub series: Vec<Series>,
    pub totals: Vec<Option<Hist>>,
    pub names: Vec<String>,
    pub alerts: Vec<AlertRecord>,
    pub alerts_seen: u64,
    pub health: Vec<Health>,
    pub link: LinkStats,
    pub summaries: u64,
    pub summaries_lost: u64,
    pub restarts: u64,
}

impl Capture {
    /// Read a whole capture (any bytes: bad frames are counted, not fatal).
    pub fn read(mut r: impl Read) -> Result<Capture> {
        let mut c = Capture::default();
        let mut dec = FrameDecoder::new();
        let mut t = Tracker::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = r.read(&mut buf).context("read capture")?;
            if n == 0 {
                break;
            }
            dec.feed(&buf[..n], &mut |f| {
                if let Ok(f) = f {
                    let ev = t.on_frame(f);
                    c.on_event(&ev, &t);
                }
            });
            // The decoder's counters are read between chunks (feed holds it).
            if let Some(h) = c.health.last_mut() {
                h.crc_errors = dec.stats.crc_errors;
                h.resyncs = dec.stats.resyncs;
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

    fn on_event(&mut self, ev: &Event, t: &Tracker) {
        let start = t.hello.as_ref().map_or(0, |h| h.start_ns);
        match ev {
            Event::Summary { report, ids, .. } => {
                let ts = report.time_ns.saturating_sub(start) as f64 / 1e9;
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
                    s.t_s.push(ts);
                    s.p50_ns.push(p.p50_ns);
                    s.p99_ns.push(p.p99_ns);
                    s.max_ns.push(p.max_ns);
                    s.events += p.count;
                    self.totals[i] = t.totals(id).cloned();
                    self.names[i].clone_from(&p.name);
                }
                let mut h = self.health.last().copied().unwrap_or_default();
                h.t_s = ts;
                h.summaries_lost = t.summaries_lost;
                if let Some(st) = &t.status {
                    h.bpf_cpu_percent =
                        (st.flags & STATUS_COST_MEASURED != 0).then(|| f64::from(st.bpf_cpu_ppm) / 10_000.0);
                    h.used_bps = st.link.used_bps;
                    h.budget_bps = st.link.budget_bps;
                    h.agent_drops = st.frames_dropped;
                }
                self.health.push(h);
            }
            Event::Alert(a) => {
                self.alerts_seen += 1;
                if self.alerts.len() < MAX_ALERTS_KEPT {
                    let mut a = a.clone();
                    a.time_ns = a.time_ns.saturating_sub(start);
                    self.alerts.push(a);
                }
            }
            _ => {}
        }
    }
}

/// Text for HTML (element content and attribute values): [`plain`],
/// HTML-escaped.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in plain(s).chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A string from the board as text: control characters (C0, DEL, C1)
/// and bidi overrides (a name rendered reversed) as `\u{..}`. Chart text
/// (captions, legends) takes this: plotters' SVG backend HTML-escapes
/// what it draws itself.
fn plain(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || latmon_core::json::needs_escape(c) {
            let _ = write!(o, "\\u{{{:x}}}", c as u32);
        } else {
            o.push(c);
        }
    }
    o
}

/// Indices of at most MAX_POINTS points, each the worst (highest `by`) of
/// its stretch of intervals.
fn thin(by: &[u64]) -> Vec<usize> {
    if by.len() <= MAX_POINTS {
        return (0..by.len()).collect();
    }
    let per = by.len().div_ceil(MAX_POINTS);
    (0..by.len()).step_by(per).map(|s| (s..(s + per).min(by.len())).max_by_key(|&i| by[i]).unwrap_or(s)).collect()
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn svg(w: u32, h: u32, f: impl FnOnce(&Area) -> Result<()>) -> Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("svg: {e}"))?;
        f(&root)?;
        root.present().map_err(|e| anyhow!("svg: {e}"))?;
    }
    Ok(s)
}

fn e<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|x| anyhow!("chart: {x}"))
}

const FONT: (&str, u32) = ("sans-serif", 13);

/// The histogram since start, bars on a log latency axis.
fn hist_svg(name: &str, h: &Hist) -> Result<String> {
    let buckets: Vec<(u64, u64, u64)> = h.nonzero_buckets().collect();
    let lo = buckets.first().map_or(1, |b| b.0.max(1)) as f64;
    let hi = buckets.last().map_or(10, |b| b.1) as f64;
    let top = buckets.iter().map(|b| b.2).max().unwrap_or(1) as f64;
    svg(620, 260, |root| {
        let mut c = e(ChartBuilder::on(root)
            .caption(format!("{name}: histogram since start ({} events)", h.count), FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), (0.8f64..top * 2.0).log_scale()))?;
        e(c.configure_mesh()
            .x_desc("latency")
            .y_desc("events")
            .x_label_formatter(&|v| fmt_ns(*v as u64))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style(FONT)
            .draw())?;
        e(c.draw_series(
            buckets
                .iter()
                .map(|&(l, h, n)| Rectangle::new([(l.max(1) as f64, 0.8), (h as f64, n as f64)], BLUE.filled())),
        ))?;
        Ok(())
    })
}

/// p50, p99 and max per interval.
fn pct_svg(name: &str, s: &Series) -> Result<String> {
    let idx = thin(&s.max_ns);
    let t_end = s.t_s.last().copied().unwrap_or(1.0).max(s.t_s.first().copied().unwrap_or(0.0) + 1.0);
    let t0 = s.t_s.first().copied().unwrap_or(0.0);
    let lo = idx.iter().map(|&i| s.p50_ns[i].max(1)).min().unwrap_or(1) as f64;
    let hi = idx.iter().map(|&i| s.max_ns[i].max(1)).max().unwrap_or(10) as f64;
    svg(620, 260, |root| {
        let mut c = e(ChartBuilder::on(root)
            .caption(format!("{name}: p50 / p99 / max per interval"), FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(t0..t_end, (lo * 0.8..hi * 1.25).log_scale()))?;
        e(c.configure_mesh()
            .x_desc("seconds since the agent started")
            .y_label_formatter(&|v| fmt_ns(*v as u64))
            .label_style(FONT)
            .draw())?;
        for (vals, colour, label) in [(&s.p50_ns, GREEN, "p50"), (&s.p99_ns, BLUE, "p99"), (&s.max_ns, RED, "max")] {
            e(c.draw_series(LineSeries::new(idx.iter().map(|&i| (s.t_s[i], vals[i].max(1) as f64)), colour)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
        }
        e(c.configure_series_labels().border_style(BLACK).background_style(WHITE).label_font(FONT).draw())?;
        Ok(())
    })
}

/// Every alert (kept) as a point: time, latency; one colour per probe.
fn alerts_svg(c: &Capture, t_end: f64) -> Result<String> {
    let lo = c.alerts.iter().map(|a| a.latency_ns.max(1)).min().unwrap_or(1) as f64;
    let hi = c.alerts.iter().map(|a| a.latency_ns.max(1)).max().unwrap_or(10) as f64;
    svg(1000, 280, |root| {
        let mut ch = e(ChartBuilder::on(root)
            .caption(format!("alerts: {} records", c.alerts_seen), FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..t_end, (lo * 0.8..hi * 1.25).log_scale()))?;
        e(ch.configure_mesh()
            .x_desc("seconds since the agent started")
            .y_desc("latency")
            .y_label_formatter(&|v| fmt_ns(*v as u64))
            .label_style(FONT)
            .draw())?;
        let mut names: Vec<&str> = c.alerts.iter().map(|a| a.probe.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for (k, n) in names.iter().take(12).enumerate() {
            let colour = Palette99::pick(k).to_rgba();
            e(ch.draw_series(
                c.alerts
                    .iter()
                    .filter(|a| a.probe == *n)
                    .map(|a| Circle::new((a.time_ns as f64 / 1e9, a.latency_ns.max(1) as f64), 3, colour.filled())),
            ))?
            .label(plain(n))
            .legend(move |(x, y)| Circle::new((x + 8, y), 3, colour.filled()));
        }
        e(ch.configure_series_labels().border_style(BLACK).background_style(WHITE).label_font(FONT).draw())?;
        Ok(())
    })
}

/// One line chart of the health samples.
/// A line of a health chart: label, colour, the value of a sample.
type HealthLine<'a> = (&'a str, RGBColor, fn(&Health) -> Option<f64>);

fn health_svg(c: &Capture, title: &str, lines: &[HealthLine]) -> Result<String> {
    let t_end = c.health.last().map_or(1.0, |h| h.t_s.max(1.0));
    let t0 = c.health.first().map_or(0.0, |h| h.t_s.min(t_end - 1.0));
    let top = c.health.iter().flat_map(|h| lines.iter().filter_map(|l| (l.2)(h))).fold(0.0f64, f64::max);
    let top = if top <= 0.0 { 1.0 } else { top * 1.15 };
    let idx = thin(&vec![0; c.health.len()]);
    svg(1000, 240, |root| {
        let mut ch = e(ChartBuilder::on(root)
            .caption(title, FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(t0..t_end, 0f64..top))?;
        e(ch.configure_mesh().x_desc("seconds since the agent started").label_style(FONT).draw())?;
        for &(label, colour, get) in lines {
            let pts: Vec<(f64, f64)> =
                idx.iter().filter_map(|&i| get(&c.health[i]).map(|v| (c.health[i].t_s, v))).collect();
            e(ch.draw_series(LineSeries::new(pts, colour)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
        }
        e(ch.configure_series_labels().border_style(BLACK).background_style(WHITE).label_font(FONT).draw())?;
        Ok(())
    })
}

/// The whole report.
pub fn html(c: &Capture, capture_name: &str) -> Result<String> {
    let mut o = String::with_capacity(256 << 10);
    let h = c.hello.as_ref();
    let board = h.map_or("-".to_string(), |h| if h.board.is_empty() { "-".into() } else { esc(&h.board) });
    o.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    let _ = writeln!(o, "<title>latmon report: {board}</title>");
    o.push_str(
        "<style>body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}\
         td,th{border:1px solid #bbb;padding:2px 8px;text-align:left}th{background:#eee}\
         section.probe{border-top:2px solid #888;margin-top:1.5em}section.probe svg{margin-right:1em}\
         .num{text-align:right}</style>\n</head><body>\n",
    );
    let _ = writeln!(o, "<h1>latmon report: board {board}</h1>");
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
    } else {
        fact("board", "- (the capture has no Hello frame)".into());
    }
    let span = c.health.last().map_or(0.0, |x| x.t_s) - c.health.first().map_or(0.0, |x| x.t_s);
    fact(
        "summaries",
        format!("{} over {span:.0} s, {} lost, {} agent restarts", c.summaries, c.summaries_lost, c.restarts),
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
    o.push_str(&health_svg(c, "agent cost: BPF CPU %", &[("BPF CPU %", BLUE, |h| h.bpf_cpu_percent)])?);
    if c.health.iter().any(|h| h.budget_bps > 0) {
        o.push_str(&health_svg(
            c,
            "link: bytes/s used and budget",
            &[
                ("used B/s", BLUE, |h| Some(f64::from(h.used_bps))),
                ("budget B/s", RED, |h| (h.budget_bps > 0).then_some(f64::from(h.budget_bps))),
            ],
        )?);
    } else {
        // A flat 0 B/s line would read as "nothing sent".
        o.push_str(
            "<p>The captured output has no byte budget (a file or socket output without <code>budget=</code>): \
             the agent does not measure its link use. Its bytes are in the facts above.</p>\n",
        );
    }
    o.push_str(&health_svg(
        c,
        "link health (cumulative)",
        &[
            ("CRC errors", RED, |h| Some(h.crc_errors as f64)),
            ("resyncs", MAGENTA, |h| Some(h.resyncs as f64)),
            ("summaries lost", BLUE, |h| Some(h.summaries_lost as f64)),
            ("agent frames dropped", GREEN, |h| Some(h.agent_drops as f64)),
        ],
    )?);
    o.push_str("<h2>alerts</h2>\n");
    let t_end = c.health.last().map_or(1.0, |x| x.t_s.max(1.0));
    if c.alerts.is_empty() {
        o.push_str("<p>No alert records in the capture.</p>\n");
    } else {
        o.push_str(&alerts_svg(c, t_end)?);
        o.push_str("<table id=\"alerts\"><tr><th>time (s)</th><th>probe</th><th>latency</th><th>pid</th><th>tid</th><th>comm</th><th>cpu</th><th>what delayed it</th></tr>\n");
        for a in c.alerts.iter().take(MAX_ALERT_ROWS) {
            let _ = writeln!(
                o,
                "<tr><td class=\"num\">{:.6}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                a.time_ns as f64 / 1e9,
                esc(&a.probe),
                fmt_ns(a.latency_ns),
                a.pid,
                a.tid,
                esc(&a.comm),
                a.cpu,
                a.anatomy.as_ref().map_or(String::new(), |an| esc(&an.render(a.latency_ns)))
            );
        }
        o.push_str("</table>\n");
        if c.alerts_seen > MAX_ALERT_ROWS as u64 {
            let _ = writeln!(o, "<p>{} more records not listed.</p>", c.alerts_seen - MAX_ALERT_ROWS as u64);
        }
    }
    o.push_str("<h2>probes</h2>\n");
    let mut quiet = Vec::new();
    for (id, s) in c.series.iter().enumerate() {
        let name = esc(&c.names[id]);
        let Some(tot) = c.totals[id].as_ref().filter(|t| t.count > 0) else {
            if !s.t_s.is_empty() {
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
        o.push_str(&pct_svg(&caption, s)?);
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
                esc(&p.kind),
                esc(&p.attach),
                esc(&p.mode)
            );
        }
        o.push_str("</table></details>\n");
    }
    o.push_str("<p><small>latmon-view report</small></p>\n</body></html>\n");
    Ok(o)
}

#[cfg(test)]
mod tests {
    use latmon_core::wire::{encode_to_vec, Alert, BucketScheme, Encoder, Frame, ProbeDesc, SummaryHeader};

    use super::*;

    fn capture() -> Vec<u8> {
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
        };
        bytes.extend(encode_to_vec(&Frame::Alert(a)).unwrap());
        bytes.extend([0x55, 0x12, 0x00]); // damage: counted, not fatal
        bytes
    }

    #[test]
    fn a_capture_becomes_series_totals_and_alerts() {
        let c = Capture::read(capture().as_slice()).unwrap();
        assert_eq!(c.summaries, 5);
        assert_eq!(c.series[0].t_s, [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(c.series[0].max_ns.last().copied().map(|m| m >= 200_000), Some(true));
        assert_eq!(c.totals[0].as_ref().unwrap().count, 15);
        assert_eq!(c.alerts.len(), 1);
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
        assert!(!h.contains("<script") && !h.contains("src=") && !h.contains("href="), "self-contained, no script");
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

    #[test]
    fn long_series_are_thinned_to_their_worst_points() {
        let v: Vec<u64> = (0..10 * MAX_POINTS as u64).map(|i| if i == 12_345 { 1_000_000 } else { i % 7 }).collect();
        let idx = thin(&v);
        assert!(idx.len() <= MAX_POINTS);
        assert!(idx.contains(&12_345), "the spike survives");
    }
}
