// SPDX-License-Identifier: MIT
//! The compact text of an interval: what `latmon run` prints, what
//! `--format text` sends down a serial line, what `latmon view` shows.
//! One line per probe and per series (name, mechanism, events/s, p50,
//! p99, p99.9, max, alerts, drops, kernel misses); a family's series
//! sorted worst first, the top [`TOP_SERIES`] shown and the rest summed
//! in one line, so the built-in default stays under 40 lines an interval
//! however many syscalls and IRQs are busy. Every table line fits
//! [`WIDTH`] columns (minicom at 80) and is printable ASCII. Histograms in
//! bcc's style follow the table for the probes that ask (`hist=true`) or
//! for all (`--hist`).
//!
//! Pure: the interval report in, lines out, into buffers kept between
//! intervals (no allocation once they have their working size).

use std::fmt::{self, Write as _};

use crate::summary::{
    render_alerts_into, render_header_into, render_hist_into, IntervalReport, ProbeReport, ProbeState,
};
use crate::text::push_clean;

/// Series shown per family; the others are summed in one line.
pub const TOP_SERIES: usize = 10;
/// Widest table line: one short of 80, so that no terminal wraps.
pub const WIDTH: usize = 79;
/// Lines of one text interval (without `--hist`'s histograms): the
/// loops block and the alert records are shown whole, the table shows as
/// many series per family as the rest leaves room for (a serial
/// terminal's 80x40 screen holds one interval).
pub const LINES: usize = 40;
/// Alert records listed under the table (all with `--hist`); the
/// per-probe alert counts are exact either way.
pub const ALERTS_SHOWN: usize = 5;
/// Probes whose interval's late time by cause the compact text shows.
pub const LATE_SHOWN: usize = 3;

const NAME_W: usize = 19;
const VIA_W: usize = 6;
const EVS_W: usize = 6;
const TIME_W: usize = 6;
const COUNT_W: usize = 5;

/// How a family's series are ordered (`--sort`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    /// Worst p99 first (then worst max, most events).
    #[default]
    P99,
    /// Most events first.
    Count,
}

impl SortBy {
    /// The word used on the command line.
    pub fn parse(s: &str) -> Option<SortBy> {
        match s {
            "p99" => Some(SortBy::P99),
            "count" => Some(SortBy::Count),
            _ => None,
        }
    }
}

/// What a text output shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextStyle {
    pub sort: SortBy,
    /// Every probe's histogram under the table (`--hist`), and every
    /// alert record.
    pub hist_all: bool,
    /// CR LF line ends (serial terminals: minicom, screen).
    pub crlf: bool,
}

/// What [`Table`] needs of a list of probe reports: the agent's
/// `IntervalReport::probes`, or a receiver's latest report per probe id
/// (gaps where none arrived yet).
pub trait Rows {
    fn count(&self) -> usize;
    fn row(&self, i: usize) -> Option<&ProbeReport>;
}

impl Rows for [ProbeReport] {
    fn count(&self) -> usize {
        self.len()
    }
    fn row(&self, i: usize) -> Option<&ProbeReport> {
        self.get(i)
    }
}

impl Rows for [Option<ProbeReport>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn row(&self, i: usize) -> Option<&ProbeReport> {
        self.get(i).and_then(Option::as_ref)
    }
}

const NONE: usize = usize::MAX;
/// "No line" in [`Table::shape`].
pub const NO_LINE: usize = NONE;

/// A line of the table as [`Table::walk`] meets it.
enum Line<'r> {
    /// A probe without a family: a family line or a probe of its own.
    Probe(&'r ProbeReport),
    /// A series of its family, in order (worst first); its label is its
    /// name from `label_at`; `shown`: among the top the table shows.
    Series { p: &'r ProbeReport, label_at: usize, shown: bool },
    /// The series ranked [`TOP_SERIES`] and beyond, summed.
    Rest(Rest),
}

/// The series not shown of a family, summed: their events, alerts, drops
/// and kernel misses, and the worst max.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rest {
    pub series: usize,
    pub count: u64,
    pub alerts: u64,
    pub drops: u64,
    pub missed: u64,
    pub max_ns: u64,
}

impl Rest {
    /// Counts `p` in the sums.
    pub fn add(&mut self, p: &ProbeReport) {
        self.series += 1;
        self.count = self.count.saturating_add(p.count);
        self.alerts = self.alerts.saturating_add(p.alerts);
        self.drops = self.drops.saturating_add(p.drops);
        self.missed = self.missed.saturating_add(p.bpf_missed);
        self.max_ns = self.max_ns.max(p.max_ns);
    }
}

/// The table's working memory: which probe is a series of which family,
/// and the order of a family's series.
#[derive(Default)]
pub struct Table {
    /// Per probe: its family's index, or NONE. A wait series' family is
    /// its family's waits line.
    parent: Vec<usize>,
    /// Per family line: the index of its waits line (`FAMILY:waits`),
    /// shown right after the family's series, or NONE.
    waits_of: Vec<usize>,
    /// What `parent` was computed for (names and kinds, hashed).
    fingerprint: u64,
    order: Vec<usize>,
}

impl Table {
    /// Series are named `FAMILY:LABEL` with the family's kind (see
    /// probes::series); the config refuses other probes named so.
    fn link(&mut self, rows: &(impl Rows + ?Sized)) {
        let n = rows.count();
        let mut fp: u64 = 0xcbf2_9ce4_8422_2325 ^ n as u64;
        for i in 0..n {
            let (name, kind) = rows.row(i).map_or(("", ""), |p| (p.name.as_str(), p.kind.as_str()));
            for b in name.bytes().chain([0]).chain(kind.bytes()).chain([1]) {
                fp = (fp ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        if fp == self.fingerprint && self.parent.len() == n {
            return;
        }
        self.fingerprint = fp;
        self.parent.clear();
        self.parent.resize(n, NONE);
        self.order.reserve(n);
        for i in 0..n {
            let Some(p) = rows.row(i) else { continue };
            let mut best = NONE;
            for j in 0..n {
                let Some(f) = rows.row(j) else { continue };
                let is_family = j != i
                    && f.kind == p.kind
                    && p.name.len() > f.name.len() + 1
                    && p.name.starts_with(f.name.as_str())
                    && p.name.as_bytes()[f.name.len()] == b':';
                if is_family && (best == NONE || rows.row(best).is_some_and(|b| b.name.len() < f.name.len())) {
                    best = j;
                }
            }
            self.parent[i] = best;
        }
        // A family of a family is not a family: only top-level lines
        // have series.
        for i in 0..n {
            let f = self.parent[i];
            if f != NONE && self.parent[f] != NONE {
                self.parent[i] = NONE;
            }
        }
        // Waits: a waits line is a line of its own, placed after its
        // family's series; a wait series sits under it, never among its
        // family's series (a timeout is not a latency).
        self.waits_of.clear();
        self.waits_of.resize(n, NONE);
        for w in 0..n {
            let Some(wl) = rows.row(w).filter(|p| p.waits) else { continue };
            self.parent[w] = NONE;
            let fam = wl.name.strip_suffix(":waits").unwrap_or("");
            if let Some(f) = (0..n).find(|&j| rows.row(j).is_some_and(|f| f.name == fam && f.kind == wl.kind)) {
                if self.parent[f] == NONE && self.waits_of[f] == NONE {
                    self.waits_of[f] = w;
                }
            }
            for i in 0..n {
                let Some(p) = rows.row(i).filter(|p| p.wait && p.kind == wl.kind) else { continue };
                if p.name.len() > fam.len() + 1 && p.name.starts_with(fam) && p.name.as_bytes()[fam.len()] == b':' {
                    self.parent[i] = w;
                }
            }
        }
        // A wait series whose waits line has not arrived is a line of its
        // own until it does.
        for i in 0..n {
            let f = self.parent[i];
            if f != NONE && rows.row(i).is_some_and(|p| p.wait) && !rows.row(f).is_some_and(|f| f.waits) {
                self.parent[i] = NONE;
            }
        }
    }

    /// The table's shape for a screen that draws its own rows (the
    /// laptop's live view): per row, the index of the line it sits under
    /// ([`NO_LINE`] for a top-level line), and per family line, the index
    /// of its waits line, shown right after it ([`NO_LINE`]: none).
    pub fn shape(&mut self, rows: &(impl Rows + ?Sized)) -> (&[usize], &[usize]) {
        self.link(rows);
        (&self.parent, &self.waits_of)
    }

    /// Whether row `w` is a waits line shown after its family.
    fn follows_family(&self, w: usize) -> bool {
        self.waits_of.contains(&w)
    }

    /// The series of family `f` into `self.order`, worst first.
    fn sort_series(&mut self, rows: &(impl Rows + ?Sized), f: usize, by: SortBy) {
        self.order.clear();
        self.order.extend((0..self.parent.len()).filter(|&i| self.parent[i] == f && rows.row(i).is_some()));
        let get = |i: usize| rows.row(i).expect("filtered above");
        // Unstable sorts do not allocate; the name makes the order total.
        self.order.sort_unstable_by(|&a, &b| {
            let (a, b) = (get(a), get(b));
            let key = match by {
                SortBy::P99 => (b.p99_ns, b.max_ns, b.count).cmp(&(a.p99_ns, a.max_ns, a.count)),
                SortBy::Count => (b.count, b.p99_ns, b.max_ns).cmp(&(a.count, a.p99_ns, a.max_ns)),
            };
            key.then_with(|| a.name.cmp(&b.name))
        });
    }

    /// Every line of the table in order: each family (or probe without
    /// series), then its series sorted (all of them: `shown` says which
    /// are shown), then the rest's sums when there is a rest.
    /// `top`: the series shown per family, the others summed.
    fn walk<'r, R: Rows + ?Sized>(&mut self, rows: &'r R, by: SortBy, top: usize, mut f: impl FnMut(Line<'r>)) {
        self.link(rows);
        for fi in 0..self.parent.len() {
            if self.parent[fi] != NONE || self.follows_family(fi) {
                continue;
            }
            self.block(rows, fi, by, top, &mut f);
            let w = self.waits_of[fi];
            if w != NONE {
                self.block(rows, w, by, top, &mut f);
            }
        }
    }

    /// One top-level line and its series (sorted, `top` shown).
    fn block<'r, R: Rows + ?Sized>(
        &mut self,
        rows: &'r R,
        fi: usize,
        by: SortBy,
        top: usize,
        f: &mut impl FnMut(Line<'r>),
    ) {
        let Some(fam) = rows.row(fi) else { return };
        f(Line::Probe(fam));
        // A waits line's series are named after the family, not after it.
        let label_at = if fam.waits { fam.name.len() - "waits".len() } else { fam.name.len() + 1 };
        self.sort_series(rows, fi, by);
        let mut rest = Rest::default();
        for (rank, &i) in self.order.iter().enumerate() {
            let p = rows.row(i).expect("sorted rows exist");
            f(Line::Series { p, label_at, shown: rank < top });
            if rank >= top {
                rest.add(p);
            }
        }
        if rest.series > 0 {
            f(Line::Rest(rest));
        }
    }

    /// Lines [`Table::render_into`] writes with `top` series per family.
    fn lines_for<R: Rows + ?Sized>(&mut self, rows: &R, top: usize) -> usize {
        self.link(rows);
        let n = self.parent.len();
        let mut lines = 1; // column heads
        for fi in (0..n).filter(|&i| rows.row(i).is_some()) {
            if self.parent[fi] != NONE {
                continue;
            }
            let series = (0..n).filter(|&i| self.parent[i] == fi && rows.row(i).is_some()).count();
            lines += 1 + series.min(top) + usize::from(series > top);
        }
        lines
    }

    /// [`Table::render_into`] within `max_lines` lines (a screen's
    /// height): the most series per family, up to [`TOP_SERIES`], that
    /// keep every family line, waits line and rest line on it; at least
    /// every top-level line and its rest line, whatever the height.
    /// Returns the series shown per family.
    pub fn render_fit_into(
        &mut self,
        s: &mut String,
        rows: &(impl Rows + ?Sized),
        interval_ns: u64,
        by: SortBy,
        max_lines: usize,
    ) -> usize {
        let top = (0..=TOP_SERIES).rev().find(|&t| self.lines_for(rows, t) <= max_lines).unwrap_or(0);
        self.render_top_into(s, rows, interval_ns, by, top);
        top
    }

    /// The column heads and one line per probe and shown series (and a
    /// rest line per family with more), each ending in `\n`, appended to
    /// `s`. `interval_ns` turns counts into events/s.
    pub fn render_into(&mut self, s: &mut String, rows: &(impl Rows + ?Sized), interval_ns: u64, by: SortBy) {
        self.render_top_into(s, rows, interval_ns, by, TOP_SERIES);
    }

    fn render_top_into(
        &mut self,
        s: &mut String,
        rows: &(impl Rows + ?Sized),
        interval_ns: u64,
        by: SortBy,
        top: usize,
    ) {
        let _ = writeln!(
            s,
            "{:<NAME_W$} {:<VIA_W$} {:>EVS_W$} {:>TIME_W$} {:>TIME_W$} {:>TIME_W$} {:>TIME_W$} {:>COUNT_W$} {:>COUNT_W$} {:>COUNT_W$}",
            "NAME", "VIA", "EV/S", "P50", "P99", "P99.9", "MAX", "ALERT", "DROP", "SKIP"
        );
        self.walk(rows, by, top, |l| match l {
            Line::Probe(p) => probe_line(s, p, None, interval_ns),
            Line::Series { p, label_at, shown: true, .. } => probe_line(s, p, Some(label_at), interval_ns),
            Line::Series { .. } => {}
            Line::Rest(r) => rest_line(s, &r, interval_ns),
        });
    }

    /// Every probe in the table's order (series after their family, all
    /// of them, sorted), e.g. to print their histograms below it.
    pub fn for_each<'r, R: Rows + ?Sized>(&mut self, rows: &'r R, by: SortBy, mut each: impl FnMut(&'r ProbeReport)) {
        self.walk(rows, by, TOP_SERIES, |l| match l {
            Line::Probe(p) | Line::Series { p, .. } => each(p),
            Line::Rest(_) => {}
        });
    }

    /// The series of family `f` beyond the top [`TOP_SERIES`], summed
    /// (after [`Table::render_into`] or on its own).
    pub fn rest_of(&mut self, rows: &(impl Rows + ?Sized), f: usize, by: SortBy) -> Rest {
        self.link(rows);
        self.sort_series(rows, f, by);
        let mut rest = Rest::default();
        for &i in self.order.iter().skip(TOP_SERIES) {
            rest.add(rows.row(i).expect("sorted rows exist"));
        }
        rest
    }
}

/// A string of at most 16 bytes on the stack, for padded columns.
struct Small {
    buf: [u8; 16],
    len: usize,
}

impl Small {
    fn new() -> Self {
        Small { buf: [0; 16], len: 0 }
    }
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }
}

impl fmt::Write for Small {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// `v` with three significant digits: `9.99`, `12.3`, `123` (the caller
/// has scaled it into [1, 999.5)).
fn three_digits(b: &mut Small, v: f64) -> fmt::Result {
    if v < 9.995 {
        write!(b, "{v:.2}")
    } else if v < 99.95 {
        write!(b, "{v:.1}")
    } else {
        write!(b, "{v:.0}")
    }
}

/// A latency in at most 6 characters, units scaled: `850ns`, `12.3us`,
/// `1.20ms`, `2.00s`; `-` for none (no events).
#[derive(Clone, Copy, Debug)]
pub struct Time(pub Option<u64>);

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(ns) = self.0 else { return f.pad("-") };
        let mut b = Small::new();
        if ns < 1_000 {
            write!(b, "{ns}ns")?;
        } else {
            let mut v = ns as f64 / 1e3;
            let mut unit = 0;
            const UNITS: [&str; 3] = ["us", "ms", "s"];
            while v >= 999.5 && unit + 1 < UNITS.len() {
                v /= 1e3;
                unit += 1;
            }
            if v >= 999.5 {
                b.write_str(">999s")?;
            } else {
                three_digits(&mut b, v)?;
                b.write_str(UNITS[unit])?;
            }
        }
        f.pad(b.as_str())
    }
}

/// A count in at most 5 characters: `9999`, `12.3k`, `456k`, `7.89M`.
#[derive(Clone, Copy, Debug)]
pub struct Count(pub u64);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let mut b = Small::new();
        if n < 10_000 {
            write!(b, "{n}")?;
        } else {
            let mut v = n as f64 / 1e3;
            let mut unit = 0;
            const UNITS: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
            while v >= 999.5 && unit + 1 < UNITS.len() {
                v /= 1e3;
                unit += 1;
            }
            three_digits(&mut b, v)?;
            b.write_str(UNITS[unit])?;
        }
        f.pad(b.as_str())
    }
}

/// Events per second of `count` events over `interval_ns` (none for an
/// unknown interval).
fn per_s(count: u64, interval_ns: u64) -> Option<u64> {
    // Rounded to nearest: one event in an interval a hair over 1 s is 1/s.
    let i = u128::from(interval_ns);
    (interval_ns > 0).then(|| ((u128::from(count) * 1_000_000_000 + i / 2) / i).min(u128::from(u64::MAX)) as u64)
}

/// `text` (cleaned) cut to `w` characters, `~` marking a cut, padded.
fn cell(s: &mut String, text: &str, w: usize) {
    let start = s.len();
    push_clean(s, text);
    if s.len() - start > w {
        s.truncate(start + w - 1);
        s.push('~');
    }
    while s.len() - start < w {
        s.push(' ');
    }
}

/// One probe's line; a series (`label_at`: where its label starts in
/// its name) indented under its family, its mechanism left to the family.
fn probe_line(s: &mut String, p: &ProbeReport, label_at: Option<usize>, interval_ns: u64) {
    match label_at {
        Some(at) => {
            s.push_str("  ");
            cell(s, p.name.get(at..).unwrap_or(&p.name), NAME_W - 2);
            s.push(' ');
            cell(s, "", VIA_W);
        }
        None => {
            cell(s, &p.name, NAME_W);
            s.push(' ');
            // "tracepoint" is the one mechanism longer than the column.
            cell(s, if p.attach.as_str() == "tracepoint" { "tp" } else { p.attach.as_str() }, VIA_W);
        }
    }
    if p.state != ProbeState::Running {
        let _ = write!(s, " {}: counts frozen", p.state.as_str());
        end_line(s);
        return;
    }
    let some = |v: u64| Time((p.count > 0).then_some(v));
    let evs = per_s(p.count, interval_ns);
    let _ = write!(
        s,
        " {:>EVS_W$} {:>TIME_W$} {:>TIME_W$} {:>TIME_W$} {:>TIME_W$} {:>COUNT_W$} {:>COUNT_W$} {:>COUNT_W$}",
        EvS(evs),
        some(p.p50_ns),
        some(p.p99_ns),
        some(p.p999_ns),
        some(p.max_ns),
        Count(p.alerts),
        Count(p.drops),
        Count(p.bpf_missed)
    );
    end_line(s);
}

/// Events/s as a [`Count`], `-` for an unknown interval.
struct EvS(Option<u64>);

impl fmt::Display for EvS {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => Count(n).fmt(f),
            None => f.pad("-"),
        }
    }
}

fn rest_line(s: &mut String, r: &Rest, interval_ns: u64) {
    let start = s.len();
    let _ = write!(s, "  +{} more series", r.series);
    let w = s.len() - start;
    if w < NAME_W {
        s.extend(std::iter::repeat_n(' ', NAME_W - w));
    }
    s.push(' ');
    cell(s, "", VIA_W);
    let none = Time(None);
    let _ = write!(
        s,
        " {:>EVS_W$} {:>TIME_W$} {:>TIME_W$} {:>TIME_W$} {:>TIME_W$} {:>COUNT_W$} {:>COUNT_W$} {:>COUNT_W$}",
        EvS(per_s(r.count, interval_ns)),
        none,
        none,
        none,
        Time((r.count > 0).then_some(r.max_ns)),
        Count(r.alerts),
        Count(r.drops),
        Count(r.missed)
    );
    end_line(s);
}

/// Ends a table line: trailing blanks dropped, `\n`.
fn end_line(s: &mut String) {
    let t = s.trim_end_matches(' ').len();
    s.truncate(t);
    s.push('\n');
}

/// A text output's renderer: header, table, the histograms asked for,
/// alert records; its buffers are kept between intervals.
pub struct TextRender {
    pub style: TextStyle,
    table: Table,
    /// The interval's text with `\n` line ends.
    lf: String,
    /// ... with CR LF (serial lines).
    crlf: String,
    /// What goes under the table (late time, alert records, totals),
    /// rendered first to know the table's room.
    tail: String,
}

impl TextRender {
    pub fn new(style: TextStyle) -> Self {
        TextRender {
            style,
            table: Table::default(),
            lf: String::with_capacity(16 * 1024),
            crlf: String::with_capacity(if style.crlf { 16 * 1024 } else { 0 }),
            tail: String::with_capacity(4 * 1024),
        }
    }

    /// The text of one interval: within [`LINES`] lines unless
    /// histograms are asked for (the table gives up series first).
    pub fn render(&mut self, r: &IntervalReport) -> &str {
        let style = self.style;
        let hist = |p: &ProbeReport| style.hist_all || p.hist;
        let t = &mut self.tail;
        t.clear();
        render_late_time_into(t, r.probes.as_slice(), hist);
        render_alerts_into(t, r, if style.hist_all { usize::MAX } else { ALERTS_SHOWN }, WIDTH);
        if r.last {
            render_run_totals_into(t, r);
        }
        // What a JSON line of this interval leaves out (it says so too).
        let kept = crate::json::alert_records_within(r, crate::json::ALERT_RECORD_BYTES_MAX);
        if kept < r.alert_records.len() {
            let _ = writeln!(
                t,
                "  alert_records_cut: {} (a JSON line carries {} KiB of records: the first {kept})",
                r.alert_records.len() - kept,
                crate::json::ALERT_RECORD_BYTES_MAX / 1024
            );
        }
        let s = &mut self.lf;
        s.clear();
        render_header_into(s, r);
        crate::loops::render_into(s, &r.loops, r.loops_unlisted);
        if r.probes.iter().any(hist) {
            self.table.render_into(s, r.probes.as_slice(), r.interval_ns, style.sort);
        } else {
            let used = s.matches('\n').count() + self.tail.matches('\n').count();
            let room = LINES.saturating_sub(used);
            self.table.render_fit_into(s, r.probes.as_slice(), r.interval_ns, style.sort, room);
        }
        let measured = r.agent.cost_measured;
        self.table.for_each(r.probes.as_slice(), style.sort, |p| {
            if hist(p) {
                render_hist_into(s, p, measured);
            }
        });
        s.push_str(&self.tail);
        if !style.crlf {
            return &self.lf;
        }
        self.crlf.clear();
        to_crlf(&mut self.crlf, &self.lf);
        &self.crlf
    }
}

/// Family lines the exit summary's totals show, at most.
pub const TOTALS_SHOWN: usize = 12;

/// The exit summary's totals since start (the final interval alone may
/// be a fraction of a second with nothing in it): one line per probe
/// that is not a series, at most [`TOTALS_SHOWN`], within [`WIDTH`]: its
/// events, alerts and drops; a cycle probe's cycles, misses and
/// overruns. A watched loop's own totals are in the loops block.
pub fn render_run_totals_into(s: &mut String, r: &IntervalReport) {
    // A series is named `FAMILY:LABEL` after its family (a kfunc's own
    // name has a ':' too).
    let series = |i: usize| {
        let p = &r.probes[i];
        r.probes[..i].iter().any(|f| {
            p.name.len() > f.name.len() + 1 && p.name.starts_with(&f.name) && p.name.as_bytes()[f.name.len()] == b':'
        })
    };
    let families: Vec<&ProbeReport> = (0..r.probes.len()).filter(|&i| !series(i)).map(|i| &r.probes[i]).collect();
    if families.is_empty() {
        return;
    }
    s.push_str("since start:\n");
    for p in families.iter().take(TOTALS_SHOWN) {
        let at = s.len();
        s.push_str("  ");
        push_clean(s, crate::text::truncate(&p.name, NAME_W));
        let w = s.len() - at;
        s.extend(std::iter::repeat_n(' ', (2 + NAME_W + 1).saturating_sub(w)));
        match p.extra.as_ref() {
            Some(crate::extra::ProbeExtra::Cycle(c)) => {
                let n = &c.counts;
                let _ = write!(s, "{} cycles, {} missed, {} overran", n.total_cycles, n.total_misses, n.total_overruns);
            }
            _ => {
                let _ = write!(s, "{} events, {} alerts", p.total_count, p.total_alerts);
            }
        }
        if p.total_drops > 0 {
            let _ = write!(s, ", {} dropped", p.total_drops);
        }
        s.push('\n');
    }
    if families.len() > TOTALS_SHOWN {
        let _ = writeln!(s, "  +{} more probes (JSON `total_*`)", families.len() - TOTALS_SHOWN);
    }
}

/// `src`'s `\n` line ends as CR LF, appended to `dst`.
pub fn to_crlf(dst: &mut String, src: &str) {
    for line in src.split_inclusive('\n') {
        dst.push_str(line.strip_suffix('\n').unwrap_or(line));
        if line.ends_with('\n') {
            dst.push_str("\r\n");
        }
    }
}

/// The interval's late time by cause, one line per probe that alerted (at
/// most [`LATE_SHOWN`], in the table's probe order), each within [`WIDTH`]
/// columns, whole causes only: what a technician needs after "late": why. A probe whose
/// histogram block is shown (`shown`) has the line there already.
fn render_late_time_into(s: &mut String, probes: &[ProbeReport], shown: impl Fn(&ProbeReport) -> bool) {
    let late = probes.iter().filter(|p| !shown(p)).filter_map(|p| Some((p, p.alert_causes.as_ref()?)));
    for (p, c) in late.filter(|(_, c)| c.alerts > 0).take(LATE_SHOWN) {
        let start = s.len();
        s.push_str("late ");
        push_clean(s, &p.name);
        s.push_str(": ");
        c.render_line_into(s, 3, WIDTH.saturating_sub(s.len() - start));
        // A probe name too long to leave room for the tally's head is cut:
        // render_line_into and push_clean write printable ASCII only, so a
        // byte cut is a character cut.
        if s.len() - start > WIDTH {
            s.truncate(start + WIDTH - 1);
            s.push('~');
        }
        s.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{AgentStatus, AlertRecord};

    const SEC: u64 = 1_000_000_000;

    fn probe(name: &str, kind: &str, count: u64, p99_ns: u64) -> ProbeReport {
        let mut p = ProbeReport::empty();
        p.name = name.into();
        p.kind = kind.into();
        p.attach = "tp_btf".into();
        p.count = count;
        p.total_count = count;
        p.p50_ns = p99_ns / 4;
        p.p99_ns = p99_ns;
        p.p999_ns = p99_ns + 1;
        p.max_ns = p99_ns * 2;
        p
    }

    fn report(probes: Vec<ProbeReport>) -> IntervalReport {
        IntervalReport { seq: 3, time_ns: 0, interval_ns: SEC, probes, ..IntervalReport::default() }
    }

    /// The id of the row named `name`: what a record of it carries.
    fn row(r: &IntervalReport, name: &str) -> crate::ident::ProbeId {
        crate::ident::ProbeId::at(r.probes.iter().position(|p| p.name == name).expect("a row of that name"))
    }

    fn table(r: &IntervalReport, by: SortBy) -> String {
        let mut s = String::new();
        Table::default().render_into(&mut s, r.probes.as_slice(), r.interval_ns, by);
        s
    }

    /// The label column of each line (series lines are indented).
    fn names(t: &str) -> Vec<&str> {
        t.lines().skip(1).map(|l| l[..NAME_W].trim_end()).collect()
    }

    #[test]
    fn series_sit_under_their_family_worst_p99_first_or_most_events_first() {
        // Series are appended after every family (ids never move), so a
        // family's series need not follow it in the report.
        let r = report(vec![
            probe("syscall", "syscall", 60, 9_000),
            probe("runq", "runq", 500, 4_000),
            probe("syscall:read", "syscall", 50, 2_000),
            probe("syscall:futex", "syscall", 3, 9_000),
            probe("syscall:write", "syscall", 7, 5_000),
            probe("runq2", "runq", 1, 1_000),
        ]);
        let t = table(&r, SortBy::P99);
        assert_eq!(names(&t), ["syscall", "  futex", "  write", "  read", "runq", "runq2"], "{t}");
        let t = table(&r, SortBy::Count);
        assert_eq!(names(&t), ["syscall", "  read", "  write", "  futex", "runq", "runq2"], "{t}");
        // Ties: worst max, then name; the order is total.
        let mut a = probe("irq:b", "irq", 1, 100);
        a.max_ns = 900;
        let r =
            report(vec![probe("irq", "irq", 3, 100), probe("irq:c", "irq", 1, 100), a, probe("irq:a", "irq", 1, 100)]);
        assert_eq!(names(&table(&r, SortBy::P99)), ["irq", "  b", "  a", "  c"]);
        // A probe named like a series of another kind, or without its
        // family, is a line of its own.
        let r = report(vec![probe("syscall:read", "syscall", 1, 10), probe("runq:x", "syscall", 1, 10)]);
        assert_eq!(names(&table(&r, SortBy::P99)), ["syscall:read", "runq:x"]);
    }

    fn wait(name: &str, count: u64, p99_ns: u64) -> ProbeReport {
        let mut p = probe(name, "syscall", count, p99_ns);
        p.wait = !name.ends_with(":waits");
        p.waits = name.ends_with(":waits");
        p
    }

    #[test]
    fn waits_sit_under_their_own_line_after_the_family_never_among_its_worst() {
        // As the agent appends them: the family, irq, then series as they
        // are born (the waits line before its wait series).
        let r = report(vec![
            probe("syscall", "syscall", 60, 9_000),
            probe("irq", "irq", 10, 4_000),
            probe("syscall:write", "syscall", 50, 5_000),
            wait("syscall:waits", 12, 1_000_000_000),
            wait("syscall:ppoll", 2, 1_000_000_000),
            wait("syscall:nanosleep", 10, 500_000_000),
            probe("syscall:read", "syscall", 10, 2_000),
            probe("irq:eth0", "irq", 10, 4_000),
        ]);
        let t = table(&r, SortBy::P99);
        assert_eq!(
            names(&t),
            ["syscall", "  write", "  read", "syscall:waits", "  ppoll", "  nanosleep", "irq", "  eth0"],
            "{t}"
        );
        // Without its waits line (a sender before revision 7 has none, and
        // no flags either), a flagged series is a line of its own.
        let r = report(vec![probe("syscall", "syscall", 1, 1), wait("syscall:ppoll", 1, 1)]);
        assert_eq!(names(&table(&r, SortBy::P99)), ["syscall", "syscall:ppoll"]);
    }

    #[test]
    fn a_fitted_table_keeps_every_family_line_and_shows_what_fits() {
        let mut probes = vec![probe("runq", "runq", 1, 1)];
        for fam in ["syscall", "irq"] {
            probes.push(probe(fam, fam, 100, 5_000));
        }
        probes.push(wait("syscall:waits", 100, 5_000));
        for i in 0..30u64 {
            probes.push(probe(&format!("syscall:s{i}"), "syscall", i, 1_000 + i));
            probes.push(wait(&format!("syscall:w{i}"), i, 1_000 + i));
            probes.push(probe(&format!("irq:{i}"), "irq", i, 1_000 + i));
        }
        let r = report(probes);
        for (rows, top) in [(100, TOP_SERIES), (20, 4), (13, 1), (9, 0), (3, 0)] {
            let mut s = String::new();
            let got = Table::default().render_fit_into(&mut s, r.probes.as_slice(), SEC, SortBy::P99, rows);
            assert_eq!(got, top, "{rows} rows:\n{s}");
            let n = names(&s);
            for fam in ["runq", "syscall", "syscall:waits", "irq"] {
                assert!(n.contains(&fam), "{fam} on a {rows}-row table:\n{s}");
            }
            assert_eq!(n.iter().filter(|l| l.starts_with("  +")).count(), 3, "{s}");
            if top > 0 {
                assert!(s.lines().count() <= rows, "{rows}:\n{s}");
                assert!(n.contains(&"  w29") && n.contains(&"  s29") && !n.contains(&"  w0"), "the worst shown:\n{s}");
            }
        }
    }

    /// The exit summary holds the run's totals, not only its last
    /// (short, often empty) interval: families only (a kfunc's own ':'
    /// is no series), a cycle probe's cycles and misses; none before it.
    #[test]
    fn the_final_interval_adds_the_runs_totals() {
        let mut runq = probe("runq", "runq", 0, 0);
        (runq.total_count, runq.total_alerts, runq.total_drops) = (123_456, 7, 2);
        let mut cycle = probe("cycle", "cycle", 0, 0);
        let c = crate::extra::ProbeExtra::cycle_in(&mut cycle.extra);
        (c.counts.total_cycles, c.counts.total_misses, c.counts.total_overruns) = (8511, 322, 5);
        let probes = vec![runq, probe("kfunc:vfs_read", "kfunc", 3, 10), cycle, probe("cycle:wakeup", "cycle", 9, 1)];
        let mut r = report(probes);
        let mut t = TextRender::new(TextStyle::default());
        assert!(!t.render(&r).contains("since start:"), "only the final interval: {}", t.render(&r));
        r.last = true;
        let out = t.render(&r).to_string();
        let at = out.find("since start:\n").unwrap_or_else(|| panic!("{out}"));
        let block: Vec<&str> = out[at..].lines().skip(1).take_while(|l| l.starts_with("  ")).collect();
        assert_eq!(
            block,
            [
                "  runq                123456 events, 7 alerts, 2 dropped",
                "  kfunc:vfs_read      3 events, 0 alerts",
                "  cycle               8511 cycles, 322 missed, 5 overran",
            ],
            "{out}"
        );
        assert!(block.iter().all(|l| l.len() <= WIDTH), "{out}");
    }

    #[test]
    fn the_top_ten_are_shown_and_the_rest_summed_exactly() {
        let mut probes = vec![probe("syscall", "syscall", 0, 0)];
        for i in 0..25u64 {
            let mut p = probe(&format!("syscall:s{i:02}"), "syscall", 10 + i, 1_000 * (i + 1));
            (p.alerts, p.drops, p.bpf_missed) = (i % 3, i % 5, i % 2);
            probes.push(p);
        }
        // An idle series counts in the rest too (no events, no max).
        probes.push(probe("syscall:idle", "syscall", 0, 0));
        let r = report(probes);
        let t = table(&r, SortBy::P99);
        let shown: Vec<&str> = names(&t)[1..11].to_vec();
        let want: Vec<String> = (15..25).rev().map(|i| format!("  s{i:02}")).collect();
        assert_eq!(shown, want, "{t}");
        // The rest: s00..s14 and idle.
        let rest = &r.probes[1..16];
        let want = Rest {
            series: 16,
            count: rest.iter().map(|p| p.count).sum(),
            alerts: rest.iter().map(|p| p.alerts).sum(),
            drops: rest.iter().map(|p| p.drops).sum(),
            missed: rest.iter().map(|p| p.bpf_missed).sum(),
            max_ns: rest.iter().map(|p| p.max_ns).max().unwrap(),
        };
        assert_eq!(Table::default().rest_of(r.probes.as_slice(), 0, SortBy::P99), want);
        assert_eq!((want.count, want.alerts, want.drops, want.missed, want.max_ns), (255, 15, 30, 7, 30_000));
        let line = t.lines().nth(12).unwrap();
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols, ["+16", "more", "series", "255", "-", "-", "-", "30.0us", "15", "30", "7"], "{t}");
        assert_eq!(t.lines().count(), 1 + 1 + TOP_SERIES + 1, "{t}");
        // Exactly TOP_SERIES series: no rest line.
        let r = report(r.probes[..=TOP_SERIES].to_vec());
        assert!(!table(&r, SortBy::P99).contains("more series"));
    }

    #[test]
    fn the_default_families_stay_under_forty_lines_however_many_series() {
        let mut probes = vec![probe("runq", "runq", 100, 5_000)];
        for fam in ["syscall", "irq"] {
            probes.push(probe(fam, fam, 100, 5_000));
        }
        for i in 0..400u64 {
            let fam = if i % 2 == 0 { "syscall" } else { "irq" };
            probes.push(probe(&format!("{fam}:{i}"), fam, i, i * 37));
        }
        let mut r = report(probes);
        r.agent = AgentStatus { cost_measured: true, online_cpus: 2, rss_bytes: 4 << 20, ..AgentStatus::default() };
        for i in 0..40 {
            r.alert_records.push(AlertRecord {
                id: row(&r, "syscall:2"),
                pid: i,
                tid: i,
                comm: "ctrl".into(),
                cpu: 0,
                latency_ns: 2_000_000,
                time_ns: 5 * SEC,
                anatomy: None,
                cycle: None,
            });
        }
        let mut tr = TextRender::new(TextStyle::default());
        let t = tr.render(&r).to_string();
        // Header 2, column heads 1, runq 1, two families of 1 + 10 + 1,
        // alerts 1 + ALERTS_SHOWN + 1.
        assert_eq!(t.lines().count(), 2 + 1 + 1 + 2 * 12 + 1 + ALERTS_SHOWN + 1, "{t}");
        assert!(t.lines().count() <= 40);
        assert!(t.contains("  ... 35 more alert records"), "{t}");
        assert!(!t.contains("distribution"), "no histogram by default: {t}");
    }

    /// Issue 42: the loops block and two-line cycle records fit the
    /// 40-line interval (53 lines before, captured with the loop zoo):
    /// the table gives up series, never a family line, a loop or a
    /// record.
    #[test]
    fn loops_and_cycle_records_fit_forty_lines_the_table_gives_up_series() {
        use crate::loops::{Loop, LoopClass, LoopCycles, PeriodSource};
        let mut probes = vec![probe("runq", "runq", 10, 1_000)];
        for fam in ["syscall", "irq", "cycle"] {
            probes.push(probe(fam, fam, 100, 5_000));
            for i in 0..12 {
                probes.push(probe(&format!("{fam}:{i}"), fam, i, i * 37));
            }
        }
        let mut r = report(probes);
        r.loops = (0..7)
            .map(|i| Loop {
                tid: 100 + i,
                pid: 100,
                comm: format!("loop{i}"),
                policy: crate::anatomy::Policy::Fifo,
                prio: 40,
                rt: true,
                class: LoopClass::Periodic,
                period_ns: 1_000_000,
                period_source: PeriodSource::AbsTimer,
                jitter_ns: 0,
                watched: true,
                cycle: Some(LoopCycles { cycles: 1000, misses: 3, total_misses: 9, ..LoopCycles::default() }),
            })
            .collect();
        let miss = crate::cycle::CycleMark {
            event: crate::cycle::CycleEvent::Miss,
            release_ns: SEC,
            deadline_ns: SEC + 1_000_000,
            done_ns: Some(SEC + 1_500_000),
            doing: None,
            migrations: 0,
            rule: None,
        };
        for i in 0..20 {
            r.alert_records.push(AlertRecord {
                id: row(&r, "cycle"),
                pid: 100,
                tid: 100 + i,
                comm: "loop".into(),
                cpu: 0,
                latency_ns: 1_500_000,
                time_ns: 5 * SEC,
                anatomy: None,
                cycle: Some(miss.clone()),
            });
        }
        let t = TextRender::new(TextStyle::default()).render(&r).to_string();
        assert!(t.lines().count() <= LINES, "{} lines:\n{t}", t.lines().count());
        assert!(t.lines().all(|l| l.len() <= WIDTH + 1), "{t}");
        for fam in ["runq ", "syscall ", "irq ", "cycle "] {
            assert!(t.lines().any(|l| l.starts_with(fam)), "no {fam} line:\n{t}");
        }
        assert_eq!(t.matches("1000 cyc 3/9 miss").count(), 7, "{t}");
        assert_eq!(t.matches("miss 1.50ms of 1.00ms").count(), ALERTS_SHOWN, "{t}");
        assert!(t.contains("more series"), "the table gave up series: {t}");
    }

    /// Issue 40: what a JSON line of the interval cuts, the text says.
    #[test]
    fn the_text_says_how_many_records_a_json_line_cuts() {
        let mut r = report(vec![probe("syscall", "syscall", 100, 5_000)]);
        let rec = AlertRecord {
            id: row(&r, "syscall"),
            pid: 1,
            tid: 1,
            comm: "ctrl".into(),
            cpu: 0,
            latency_ns: 2_000_000,
            time_ns: 5 * SEC,
            anatomy: None,
            cycle: None,
        };
        r.alert_records = vec![rec; 100];
        let mut tr = TextRender::new(TextStyle::default());
        assert!(!tr.render(&r).contains("alert_records_cut"), "100 records fit a line");
        let more = r.alert_records[0].clone();
        r.alert_records.resize(5_000, more);
        let kept = crate::json::alert_records_within(&r, crate::json::ALERT_RECORD_BYTES_MAX);
        let t = tr.render(&r).to_string();
        assert!(kept < 5_000 && t.contains(&format!("alert_records_cut: {} (", 5_000 - kept)), "{t}");
    }

    #[test]
    fn late_time_by_cause_follows_the_table_cut_to_the_width() {
        use crate::causes::{CauseId, CauseSummary, TopCause};
        let mut r = report(vec![probe("loop", "timer", 1000, 50_000), probe("quiet", "runq", 10, 1_000)]);
        let hog = TopCause { id: CauseId::Task { pid: 4242 }, name: "hog".into(), ns: 9_000_000 };
        let long = TopCause { id: CauseId::Task { pid: 7 }, name: "x".repeat(200), ns: 1_000_000 };
        r.probes[0].alert_causes = Some(CauseSummary {
            alerts: 12,
            alerted_ns: 10_000_000,
            causes: vec![hog, long],
            ..CauseSummary::default()
        });
        // An alert tally of 0 alerts says nothing.
        r.probes[1].alert_causes = Some(CauseSummary::default());
        let t = TextRender::new(TextStyle::default()).render(&r).to_string();
        let late: Vec<&str> = t.lines().filter(|l| l.starts_with("late ")).collect();
        assert_eq!(late.len(), 1, "{t}");
        // The 200-character comm does not fit: the list ends at the last
        // whole cause.
        assert_eq!(late[0], "late loop: 10.00ms in 12 alerts: 90.0% hog[4242], ~", "{t}");
        // With its histogram shown, the probe's block carries the line.
        r.probes[0].hist = true;
        let t = TextRender::new(TextStyle::default()).render(&r).to_string();
        assert!(!t.lines().any(|l| l.starts_with("late ")), "{t}");
        assert!(t.contains("  alerted 10.00ms in 12 alerts: 90.0% hog[4242]"), "{t}");
    }

    #[test]
    fn every_line_fits_79_columns_in_ascii() {
        let long = "ufunc:/opt/robot/bin/a_very_long_controller_binary_name:control_cycle_with_a_long_symbol";
        let mut a = probe(long, "ufunc", u64::MAX, u64::MAX / 2);
        a.attach = "tracepoint".into();
        (a.alerts, a.drops, a.bpf_missed) = (u64::MAX, 123_456_789, 99_999);
        let mut d = probe("detached_probe_with_long_name", "runq", 0, 0);
        d.state = ProbeState::DetachedOverBudget;
        let evil = "syscall:\x1b]0;pwned\x07\u{202e}_and_a_long_tail_too";
        let mut probes = vec![a, d, probe("syscall", "syscall", 5, 10)];
        probes.push(probe(evil, "syscall", 1, 999_999_999_999));
        // Rows for the records below (a record is named by its row).
        probes.push(probe("t", "runq", 1, 10));
        probes.push(probe("cycle", "cycle", 1, 10));
        let mut r = report(probes);
        r.interval_ns = 1;
        // Alert records: the largest values a kernel gives (pid_max 2^22,
        // a 15-character comm, 4096 CPUs, a year of uptime) and a long
        // anatomy, for a long probe name and a short one.
        use crate::anatomy::{Anatomy, Cause, CauseKind, Policy};
        let hog = |pid: u32| Cause {
            kind: CauseKind::Task { comm: "kworker/u16:3-e".into(), pid, policy: Policy::Fifo, prio: 99 },
            ns: 10_000_000 + u64::from(pid),
        };
        let parts: Vec<Cause> = (4_194_000..4_194_006).map(hog).collect();
        for name in [long, "t"] {
            r.alert_records.push(AlertRecord {
                id: row(&r, name),
                pid: 4_194_303,
                tid: 4_194_302,
                comm: "robot_ctrl_loop".into(),
                cpu: 4095,
                latency_ns: 999_000_000,
                time_ns: 31_536_000 * SEC + 999_999_999,
                anatomy: Some(Anatomy::from_parts(999_000_000, 4095, 4094, parts.clone())),
                cycle: None,
            });
        }
        r.alert_records.push(AlertRecord {
            id: row(&r, "cycle"),
            pid: 19_187,
            tid: 19_190,
            comm: "ctrl_loop".into(),
            cpu: 0,
            latency_ns: 2_000_000,
            time_ns: 1_151_910_895_774,
            anatomy: None,
            cycle: None,
        });
        let t = TextRender::new(TextStyle::default()).render(&r).to_string();
        // What a controller gives fits whole.
        assert!(t.contains("\n  ALERT cycle  2.00ms  at 1151.910895s  cpu 0  ctrl_loop[19187] tid 19190\n"), "{t}");
        // Past it, the probe name gives way first, down to 12 characters;
        // then the line's end (here pid and tid); an anatomy keeps its
        // largest parts whole.
        assert!(
            t.contains("\n  ALERT ufunc:/opt/~  999.00ms  at 31536000.999999s  cpu 4095  robot_ctrl_loop~\n"),
            "{t}"
        );
        assert!(t.contains("\n    late 999000 us: kworker/u16:3-e[4194005] FIFO/99 14194 us, +6 more\n"), "{t}");
        for l in t.lines() {
            assert!(l.len() <= WIDTH, "{} columns: {l:?}", l.len());
            assert!(l.bytes().all(|b| (0x20..0x7f).contains(&b)), "{l:?}");
        }
        assert!(t.contains("\nufunc:/opt/robot/b~ tp "), "long names cut with ~, tracepoint as tp: {t}");
        assert!(t.contains("  ?]0;pwned??_and_~"), "control characters never reach the terminal: {t}");
        assert!(t.contains("detached: over budget: counts frozen"), "{t}");
        assert!(t.contains(" >999s "), "{t}");
        assert_eq!(Time(Some(850)).to_string(), "850ns");
        assert_eq!(Time(Some(12_345)).to_string(), "12.3us");
        assert_eq!(Time(Some(1_204_000)).to_string(), "1.20ms");
        assert_eq!(Time(Some(999_960)).to_string(), "1.00ms", "rounding moves to the next unit");
        assert_eq!(Time(Some(99_960)).to_string(), "100us");
        assert_eq!(Time(Some(2 * SEC)).to_string(), "2.00s");
        assert_eq!(Time(None).to_string(), "-");
        assert_eq!(format!("{:>6}", Time(Some(5))), "   5ns");
        assert_eq!(Count(9_999).to_string(), "9999");
        assert_eq!(Count(12_345).to_string(), "12.3k");
        assert_eq!(Count(999_600).to_string(), "1.00M");
        assert_eq!(Count(u64::MAX).to_string(), "18.4E");
        assert_eq!((per_s(1, SEC + 10_000_000), per_s(3, SEC / 2), per_s(1, 0)), (Some(1), Some(6), None));
    }

    #[test]
    fn serial_text_has_crlf_line_ends_and_no_escape_codes() {
        let mut p = probe("runq", "runq", 10, 2_000);
        p.alerts = 1;
        let mut r = report(vec![p]);
        r.alert_records.push(AlertRecord {
            id: row(&r, "runq"),
            pid: 1,
            tid: 2,
            comm: "\x1b[2Jctrl\r\n".into(),
            cpu: 0,
            latency_ns: 2_000,
            time_ns: SEC,
            anatomy: None,
            cycle: None,
        });
        let mut tr = TextRender::new(TextStyle { crlf: true, ..TextStyle::default() });
        let t = tr.render(&r).to_string();
        assert!(t.ends_with("\r\n") && t.matches("\r\n").count() == t.matches('\n').count(), "{t:?}");
        assert!(!t.contains('\x1b') && t.matches('\r').count() == t.matches('\n').count(), "{t:?}");
        assert!(t.contains("  ?[2Jctrl??[1] tid 2"), "{t:?}");
        let lf = TextRender::new(TextStyle::default()).render(&r).to_string();
        assert_eq!(t.replace("\r\n", "\n"), lf, "the same text as on a terminal");
    }

    #[test]
    fn histograms_follow_the_table_for_the_probes_that_ask_or_all() {
        let info = |name: &str, kind: &str| crate::summary::ProbeInfo {
            name: name.into(),
            kind: crate::ident::Family::parse(kind).unwrap(),
            attach: crate::ident::Mechanism::TpBtf,
            mode: String::new(),
            btf_mode: crate::ident::BtfMode::CoRe,
            wait: Default::default(),
        };
        let mut h = crate::hist::Hist::default();
        for v in [300u64, 2_500, 40_000] {
            h.record(v);
        }
        let zero = crate::hist::Hist::default();
        let mut runq = ProbeReport::new(&info("runq", "runq"), &zero, &h);
        runq.hist = true;
        let sys = ProbeReport::new(&info("syscall", "syscall"), &zero, &h);
        let read = ProbeReport::new(&info("syscall:read", "syscall"), &zero, &h);
        let r = report(vec![runq, sys, read]);
        let one = TextRender::new(TextStyle::default()).render(&r).to_string();
        assert_eq!(one.matches("distribution").count(), 1, "{one}");
        assert!(one.contains("runq [runq via tp_btf]  count 3") && one.contains("2048 -> 4095"), "{one}");
        let all = TextRender::new(TextStyle { hist_all: true, ..TextStyle::default() }).render(&r).to_string();
        assert_eq!(all.matches("distribution").count(), 3, "{all}");
        // Below the table, in its order: the family, then its series.
        let at = |n: &str| all.find(n).unwrap_or_else(|| panic!("{n}: {all}"));
        assert!(at("NAME ") < at("runq [runq") && at("syscall [syscall") < at("syscall:read [syscall"), "{all}");
    }
}
