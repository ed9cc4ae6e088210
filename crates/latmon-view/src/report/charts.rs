// SPDX-License-Identifier: MIT
//! The report's charts: inline SVG drawn with plotters' SVG backend from
//! what the [`Capture`](super::Capture) kept (histograms, percentile and health envelopes,
//! the alert and miss timelines). Chart text takes [`plain`]: the
//! backend HTML-escapes what it draws itself.

use anyhow::{anyhow, Result};
use latmon_core::hist::Hist;
use latmon_core::text::fmt_ns;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::model::{hv, plain, Envelope, Series, MAX_ALERT_PROBES};

/// Minor grid lines between two labels: plotters' default (10) is ~130
/// SVG lines, most of a small chart's bytes, times every probe.
pub(super) const LIGHT_LINES: usize = 2;

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

pub(super) fn svg(w: u32, h: u32, f: impl FnOnce(&Area) -> Result<()>) -> Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("svg: {e}"))?;
        f(&root)?;
        root.present().map_err(|e| anyhow!("svg: {e}"))?;
    }
    Ok(s)
}

pub(super) fn e<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|x| anyhow!("chart: {x}"))
}

pub(super) const FONT: (&str, u32) = ("sans-serif", 13);

/// The histogram since start, bars on a log latency axis.
pub(super) fn hist_svg(name: &str, h: &Hist) -> Result<String> {
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
            .max_light_lines(LIGHT_LINES)
            .x_desc("latency")
            .x_labels(6)
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

/// Room right of a plot for its legend (px): the legend is drawn there,
/// never over data.
pub(super) const LEGEND_SMALL: u32 = 70;
pub(super) const LEGEND_WIDE: u32 = 200;

/// A legend entry: its label and colour, drawn as its chart draws it.
pub(super) struct Key {
    pub(super) label: String,
    pub(super) colour: RGBAColor,
    pub(super) mark: Mark,
}

/// How a legend entry's data is drawn.
#[derive(Clone, Copy)]
pub(super) enum Mark {
    /// A line (percentiles, health, the deadline).
    Line,
    /// Points (alerts, misses).
    Dot,
    /// Triangles (overruns).
    Triangle,
}

/// The legend in the room right of the plot (`width` px, the chart's
/// `margin_right`): never over data, however the data lies.
pub(super) fn legend(root: &Area, keys: &[Key], width: u32) -> Result<()> {
    let (w, _) = root.dim_in_pixel();
    let x = w.saturating_sub(width) as i32 + 8;
    for (k, key) in keys.iter().enumerate() {
        let y = 40 + 18 * k as i32;
        match key.mark {
            Mark::Dot => e(root.draw(&Circle::new((x + 8, y), 3, key.colour.filled())))?,
            Mark::Triangle => e(root.draw(&TriangleMarker::new((x + 8, y), 5, key.colour.filled())))?,
            Mark::Line => e(root.draw(&PathElement::new(vec![(x, y), (x + 16, y)], key.colour.stroke_width(2))))?,
        }
        e(root.draw(&Text::new(key.label.clone(), (x + 22, y - 7), FONT)))?;
    }
    Ok(())
}

/// At most `n` characters, `…` marking a cut.
pub(super) fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}

/// A chart point: time, value.
pub(super) type Point = (f64, f64);

/// The polygon around a value's envelope (its min forward, its max back),
/// and the polyline of its max: a band where buckets cover many intervals,
/// a line where they cover one. NaN-free points only.
pub(super) fn band(bs: &[(f64, f64, f64)]) -> (Vec<Point>, Vec<Point>) {
    let ok: Vec<&(f64, f64, f64)> = bs.iter().filter(|b| b.1.is_finite() && b.2.is_finite()).collect();
    let mut poly: Vec<(f64, f64)> = ok.iter().map(|b| (b.0, b.1)).collect();
    poly.extend(ok.iter().rev().map(|b| (b.0, b.2)));
    (poly, ok.iter().map(|b| (b.0, b.2)).collect())
}

/// A value for a log axis (0 ns drawn at 1 ns); NaN stays NaN (f64::max
/// would make it 1).
pub(super) fn at_least_1(v: f64) -> f64 {
    if v.is_nan() {
        v
    } else {
        v.max(1.0)
    }
}

/// What one point stands for, for a caption: nothing while each is one
/// sample.
pub(super) fn per_note(per: u64, what: &str) -> String {
    if per > 1 {
        format!(" (each point the min..max of {per} {what})")
    } else {
        String::new()
    }
}

/// The time axis of a span of seconds: minutes past 20 minutes, hours
/// past 5 hours (a shift in seconds reads badly). Returns the divisor and
/// the axis description.
pub(super) fn time_axis(span: f64) -> (f64, &'static str) {
    if span > 5.0 * 3600.0 {
        (3600.0, "hours since the agent started")
    } else if span > 20.0 * 60.0 {
        (60.0, "minutes since the agent started")
    } else {
        (1.0, "seconds since the agent started")
    }
}

/// p50, p99 and max per interval, as min..max envelopes.
pub(super) fn pct_svg(name: &str, s: &Series, (t0, t1): (f64, f64)) -> Result<String> {
    let bs = s.env.buckets();
    let (div, axis) = time_axis(t1 - t0);
    // NaN (intervals without events) stays NaN: out of the range, not drawn.
    let lo = bs.iter().map(|b| at_least_1(b.lo[0])).filter(|v| v.is_finite()).fold(f64::INFINITY, f64::min);
    let lo = if lo.is_finite() { lo } else { 1.0 };
    let hi = bs.iter().map(|b| at_least_1(b.hi[2])).filter(|v| v.is_finite()).fold(lo * 1.5, f64::max);
    svg(620, 260, |root| {
        let mut c = e(ChartBuilder::on(root)
            .caption(format!("{name}: p50 / p99 / max per interval{}", per_note(s.env.per(), "intervals")), FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .margin_right(LEGEND_SMALL)
            .build_cartesian_2d(t0 / div..(t1 / div).max(t0 / div + 1.0 / div), (lo * 0.8..hi * 1.25).log_scale()))?;
        e(c.configure_mesh()
            .max_light_lines(LIGHT_LINES)
            .x_desc(axis)
            .y_label_formatter(&|v| fmt_ns(*v as u64))
            .label_style(FONT)
            .draw())?;
        let mut keys = Vec::new();
        for (k, colour, label) in [(0, GREEN, "p50"), (1, BLUE, "p99"), (2, RED, "max")] {
            let pts: Vec<(f64, f64, f64)> =
                bs.iter().map(|b| (b.t() / div, at_least_1(b.lo[k]), at_least_1(b.hi[k]))).collect();
            let (poly, top) = band(&pts);
            if s.env.per() > 1 {
                e(c.draw_series(std::iter::once(Polygon::new(poly, colour.mix(0.25).filled()))))?;
            }
            e(c.draw_series(LineSeries::new(top, colour)))?;
            keys.push(Key { label: label.into(), colour: colour.to_rgba(), mark: Mark::Line });
        }
        legend(root, &keys, LEGEND_SMALL)?;
        Ok(())
    })
}

/// The alerts as points: time, latency; one colour per probe. Each point
/// the worst of the records its bucket covers.
pub(super) fn alerts_svg(marks: &[(String, Envelope<1>)], seen: u64, (t0, t1): (f64, f64)) -> Result<String> {
    let (div, axis) = time_axis(t1 - t0);
    let all = || marks.iter().flat_map(|(_, e)| e.buckets());
    let lo = all().map(|b| b.lo[0].max(1.0)).fold(f64::INFINITY, f64::min);
    let lo = if lo.is_finite() { lo } else { 1.0 };
    let hi = all().map(|b| b.hi[0].max(1.0)).fold(lo * 1.5, f64::max);
    let per = marks.iter().map(|(_, e)| e.per()).max().unwrap_or(1);
    let note =
        if per > 1 { format!(" (each point the worst of up to {per} records of its probe)") } else { String::new() };
    svg(1000, 300, |root| {
        let mut ch = e(ChartBuilder::on(root)
            .caption(format!("alerts: {seen} records{note}"), FONT)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .margin_right(LEGEND_WIDE)
            .build_cartesian_2d(t0.min(0.0) / div..(t1 / div).max(1.0 / div), (lo * 0.8..hi * 1.25).log_scale()))?;
        e(ch.configure_mesh()
            .max_light_lines(LIGHT_LINES)
            .x_desc(axis)
            .y_desc("latency")
            .y_label_formatter(&|v| fmt_ns(*v as u64))
            .label_style(FONT)
            .draw())?;
        let mut keys = Vec::new();
        for (k, (n, env)) in marks.iter().enumerate() {
            let colour = if k == MAX_ALERT_PROBES { RGBAColor(90, 90, 90, 1.0) } else { Palette99::pick(k).to_rgba() };
            let label = if k == MAX_ALERT_PROBES { "other probes".to_string() } else { short(&plain(n), 24) };
            e(ch.draw_series(
                env.buckets().iter().map(|b| Circle::new((b.t() / div, b.hi[0].max(1.0)), 3, colour.filled())),
            ))?;
            keys.push(Key { label, colour, mark: Mark::Dot });
        }
        legend(root, &keys, LEGEND_WIDE)?;
        Ok(())
    })
}

/// A line of a health chart: label, colour, the value's index ([`hv`]).
pub(super) type HealthLine<'a> = (&'a str, RGBColor, usize);

/// One line chart of the health samples: each line the max of its bucket
/// (counters are cumulative, so that is the bucket's last value).
pub(super) fn health_svg(
    health: &Envelope<{ hv::N }>,
    span: Option<(f64, f64)>,
    title: &str,
    lines: &[HealthLine],
) -> Result<String> {
    let (t0, t1) = span.unwrap_or((0.0, 1.0));
    let (div, axis) = time_axis(t1 - t0);
    let bs = health.buckets();
    let top = bs.iter().flat_map(|b| lines.iter().map(|l| b.hi[l.2])).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let top = if top <= 0.0 { 1.0 } else { top * 1.15 };
    let title = format!("{title}{}", per_note(health.per(), "summaries"));
    svg(1000, 240, |root| {
        let mut ch = e(ChartBuilder::on(root)
            .caption(title, FONT)
            .margin(10)
            .margin_right(LEGEND_WIDE)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(t0 / div..(t1 / div).max(t0 / div + 1.0 / div), 0f64..top))?;
        e(ch.configure_mesh().max_light_lines(LIGHT_LINES).x_desc(axis).label_style(FONT).draw())?;
        for &(_, colour, k) in lines {
            let pts: Vec<(f64, f64)> =
                bs.iter().filter(|b| b.hi[k].is_finite()).map(|b| (b.t() / div, b.hi[k])).collect();
            e(ch.draw_series(LineSeries::new(pts, colour)))?;
        }
        let keys: Vec<Key> =
            lines.iter().map(|l| Key { label: l.0.into(), colour: l.1.to_rgba(), mark: Mark::Line }).collect();
        legend(root, &keys, LEGEND_WIDE)?;
        Ok(())
    })
}
