// SPDX-License-Identifier: MIT
//! `latmon-view view SOURCE`: the full-screen live view (ratatui on
//! crossterm: any Linux terminal, Windows Terminal and conhost).
//!
//! [`Live`] is the model (pure: fed with the receiver's events and keys,
//! unit-tested below); [`run`] is the I/O edge: a reader thread turns the
//! source into byte chunks, the main thread decodes them, handles keys and
//! draws at most 10 times a second.

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use crossterm::event::{self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{execute, terminal};
use latmon_core::hist::Hist;
use latmon_core::receiver::{shown, ByteSource, Got};
use latmon_core::summary::{AlertRecord, ProbeReport};
use latmon_core::text::fmt_ns;
use latmon_core::wire::{Event, FrameDecoder, LinkStats, Tracker};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row as TRow, Sparkline, Table, TableState};
use ratatui::Frame;

/// Points of percentile history kept per row (3 minutes at 1 s intervals).
pub const HISTORY: usize = 180;
/// Alert records kept (newest first), across probes.
pub const ALERTS_KEPT: usize = 64;
/// Rows kept: one per probe id, and ids are below the wire's MAX_PROBES.
const MAX_ROWS: usize = latmon_core::wire::MAX_PROBES;
/// Filter text kept (typed by the technician).
const FILTER_MAX: usize = 32;

/// The table's sort column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortCol {
    P99,
    P50,
    Max,
    Events,
    Name,
}

impl SortCol {
    fn next(self) -> SortCol {
        match self {
            SortCol::P99 => SortCol::P50,
            SortCol::P50 => SortCol::Max,
            SortCol::Max => SortCol::Events,
            SortCol::Events => SortCol::Name,
            SortCol::Name => SortCol::P99,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            SortCol::P99 => "p99",
            SortCol::P50 => "p50",
            SortCol::Max => "max",
            SortCol::Events => "events/s",
            SortCol::Name => "name",
        }
    }
}

/// One probe or series.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: u16,
    pub report: ProbeReport,
    /// Per interval, oldest first.
    pub p50: VecDeque<u64>,
    pub p99: VecDeque<u64>,
    pub max: VecDeque<u64>,
}

/// The link and agent facts of the header.
#[derive(Debug, Clone, Default)]
pub struct Header {
    pub board: String,
    pub kernel: String,
    pub version: String,
    pub uptime_ns: u64,
    pub interval_ns: u64,
    pub seq: u64,
    pub last: bool,
    pub link: LinkStats,
    pub summaries_lost: u64,
    pub restarts: u64,
    pub budget_bps: u32,
    pub used_bps: u32,
    pub step: u8,
    pub bpf_cpu_ppm: Option<u32>,
    pub agent_drops: u64,
}

/// What a key asks of the loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
}

#[derive(Debug, Clone)]
pub struct Live {
    pub source: String,
    pub header: Header,
    rows: Vec<Option<Row>>,
    /// Cumulative histograms since start, by id (the selected row's plot).
    totals: Vec<Option<Hist>>,
    pub alerts: VecDeque<AlertRecord>,
    pub alerts_seen: u64,
    pub sort: SortCol,
    pub reverse: bool,
    pub filter: String,
    pub editing_filter: bool,
    pub help: bool,
    /// The screen is frozen on this copy of the model (data still arrives).
    pub paused: Option<Box<Live>>,
    /// Selected row, as its probe id (stays on the probe when rows re-sort).
    pub selected: Option<u16>,
}

impl Live {
    pub fn new(source: &str) -> Self {
        Live {
            source: source.into(),
            header: Header::default(),
            rows: Vec::new(),
            totals: Vec::new(),
            alerts: VecDeque::with_capacity(ALERTS_KEPT),
            alerts_seen: 0,
            sort: SortCol::P99,
            reverse: false,
            filter: String::new(),
            editing_filter: false,
            help: false,
            paused: None,
            selected: None,
        }
    }

    /// Take one event of the receiver, with the receiver's state after it.
    pub fn on_event(&mut self, ev: &Event, t: &Tracker, link: &LinkStats) {
        let h = &mut self.header;
        if let Some(hello) = &t.hello {
            h.board = shown(&hello.board).into_owned();
            h.kernel = shown(&hello.kernel).into_owned();
            h.version = shown(&hello.latmon_version).into_owned();
            // The agent's interval (a late joiner's first summary covers
            // everything since start: its length is not the interval).
            h.interval_ns = hello.interval_ns;
        }
        h.link = *link;
        h.summaries_lost = t.summaries_lost;
        h.restarts = t.restarts;
        if let Some(st) = &t.status {
            h.budget_bps = st.link.budget_bps;
            h.used_bps = st.link.used_bps;
            h.step = st.link.step;
            h.agent_drops = st.frames_dropped;
            h.bpf_cpu_ppm = (st.flags & latmon_core::wire::STATUS_COST_MEASURED != 0).then_some(st.bpf_cpu_ppm);
        }
        match ev {
            Event::Summary { report, ids, .. } => {
                h.seq = report.seq;
                h.last = report.last;
                if t.hello.is_none() && report.interval_ns > 0 {
                    h.interval_ns = report.interval_ns;
                }
                if let Some(hello) = &t.hello {
                    h.uptime_ns = report.time_ns.saturating_sub(hello.start_ns);
                }
                for (p, &id) in report.probes.iter().zip(ids) {
                    let i = id as usize;
                    if i >= MAX_ROWS {
                        continue; // the tracker ignores these ids already
                    }
                    if self.rows.len() <= i {
                        self.rows.resize(i + 1, None);
                        self.totals.resize(i + 1, None);
                    }
                    let row = self.rows[i].get_or_insert_with(|| Row {
                        id,
                        report: p.clone(),
                        p50: VecDeque::with_capacity(HISTORY),
                        p99: VecDeque::with_capacity(HISTORY),
                        max: VecDeque::with_capacity(HISTORY),
                    });
                    row.report.clone_from(p);
                    for (q, v) in [(&mut row.p50, p.p50_ns), (&mut row.p99, p.p99_ns), (&mut row.max, p.max_ns)] {
                        if q.len() == HISTORY {
                            q.pop_front();
                        }
                        q.push_back(v);
                    }
                    self.totals[i] = t.totals(id).cloned();
                }
                if self.selected.is_none() {
                    self.selected = self.order().first().copied();
                }
            }
            Event::Alert(a) => {
                self.alerts_seen += 1;
                if self.alerts.len() == ALERTS_KEPT {
                    self.alerts.pop_back();
                }
                self.alerts.push_front(a.clone());
            }
            _ => {}
        }
        if let Some(p) = &mut self.paused {
            // Link counters keep moving while paused: they say the link lives.
            p.header.link = *link;
        }
    }

    pub fn row(&self, id: u16) -> Option<&Row> {
        self.rows.get(id as usize).and_then(Option::as_ref)
    }

    pub fn totals(&self, id: u16) -> Option<&Hist> {
        self.totals.get(id as usize).and_then(Option::as_ref)
    }

    /// Ids of the rows shown, in table order (filter, sort column, direction).
    pub fn order(&self) -> Vec<u16> {
        let f = self.filter.to_ascii_lowercase();
        let mut v: Vec<&Row> = self
            .rows
            .iter()
            .flatten()
            .filter(|r| f.is_empty() || r.report.name.to_ascii_lowercase().contains(&f) || r.report.kind.contains(&f))
            .collect();
        let key = |r: &Row| match self.sort {
            SortCol::P99 => r.report.p99_ns,
            SortCol::P50 => r.report.p50_ns,
            SortCol::Max => r.report.max_ns,
            SortCol::Events => self.rate(&r.report),
            SortCol::Name => 0,
        };
        if self.sort == SortCol::Name {
            v.sort_by(|a, b| a.report.name.cmp(&b.report.name));
        } else {
            // Worst first, as in `latmon run`'s table; ties by name.
            v.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.report.name.cmp(&b.report.name)));
        }
        if self.reverse {
            v.reverse();
        }
        v.into_iter().map(|r| r.id).collect()
    }

    /// Events per second in the row's last interval.
    pub fn rate(&self, p: &ProbeReport) -> u64 {
        if self.header.interval_ns == 0 {
            return p.count;
        }
        (u128::from(p.count) * 1_000_000_000 / u128::from(self.header.interval_ns)) as u64
    }

    fn move_selection(&mut self, by: isize) {
        let order = self.shown().order();
        if order.is_empty() {
            return;
        }
        let at = self.selected.and_then(|s| order.iter().position(|&i| i == s)).unwrap_or(0) as isize;
        let to = (at + by).clamp(0, order.len() as isize - 1) as usize;
        self.selected = Some(order[to]);
    }

    /// What the screen shows: the frozen copy while paused.
    pub fn shown(&self) -> &Live {
        self.paused.as_deref().unwrap_or(self)
    }

    pub fn on_key(&mut self, k: KeyEvent) -> Action {
        if k.kind == KeyEventKind::Release {
            return Action::None;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if self.editing_filter {
            match k.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if c.is_ascii_graphic() && self.filter.len() < FILTER_MAX => self.filter.push(c),
                _ => {}
            }
            self.sync_paused();
            return Action::None;
        }
        if self.help {
            self.help = false;
            if !matches!(k.code, KeyCode::Char('q')) {
                return Action::None;
            }
        }
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('S') | KeyCode::Char('r') => self.reverse = !self.reverse,
            KeyCode::Char('/') | KeyCode::Char('f') => self.editing_filter = true,
            KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => self.help = true,
            KeyCode::Char(' ') | KeyCode::Char('p') => {
                self.paused = match self.paused.take() {
                    Some(_) => None,
                    None => {
                        let mut copy = self.clone();
                        copy.paused = None;
                        Some(Box::new(copy))
                    }
                }
            }
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home => self.move_selection(-(MAX_ROWS as isize)),
            KeyCode::End => self.move_selection(MAX_ROWS as isize),
            _ => {}
        }
        self.sync_paused();
        Action::None
    }

    /// Sorting, filtering and selecting work on the frozen copy too.
    fn sync_paused(&mut self) {
        let (sort, reverse, filter, editing, help, selected) =
            (self.sort, self.reverse, self.filter.clone(), self.editing_filter, self.help, self.selected);
        if let Some(p) = &mut self.paused {
            (p.sort, p.reverse, p.filter, p.editing_filter, p.help, p.selected) =
                (sort, reverse, filter, editing, help, selected);
        }
    }
}

/// `values` as a text sparkline of `width` cells (the newest at the right),
/// on a log scale: latencies span decades.
pub fn sparkline(values: &VecDeque<u64>, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let take = values.len().min(width);
    let vals: Vec<u64> = values.iter().skip(values.len() - take).copied().collect();
    let lg = |v: u64| ((v.max(1)) as f64).log2();
    let (lo, hi) = vals.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(lg(v)), hi.max(lg(v))));
    let mut s = String::with_capacity(width * 3);
    for _ in take..width {
        s.push(' ');
    }
    for &v in &vals {
        let k = if hi - lo < 1e-9 { 0 } else { (((lg(v) - lo) / (hi - lo)) * 7.0).round() as usize };
        s.push(BARS[k.min(7)]);
    }
    s
}

/// A histogram as text lines, one per power of two (as bcc's tools print
/// it), `bar` cells wide: "  8us..16us  ######  1234".
pub fn hist_lines(h: &Hist, bar: usize, max_lines: usize) -> Vec<String> {
    let mut pow: Vec<(u64, u64)> = Vec::new(); // (lower bound, count)
    for (lo, _hi, c) in h.nonzero_buckets() {
        let p2 = if lo == 0 { 0 } else { 1u64 << (63 - lo.leading_zeros()) };
        match pow.last_mut() {
            Some((l, n)) if *l == p2 => *n += c,
            _ => pow.push((p2, c)),
        }
    }
    // Keep the busiest stretch when the plot does not fit.
    while pow.len() > max_lines.max(1) {
        if pow[0].1 <= pow[pow.len() - 1].1 {
            pow.remove(0);
        } else {
            pow.pop();
        }
    }
    let top = pow.iter().map(|p| p.1).max().unwrap_or(1).max(1);
    pow.iter()
        .map(|&(lo, c)| {
            let hi = if lo == 0 { 1 } else { lo.saturating_mul(2) };
            let n = ((c as f64 / top as f64) * bar as f64).ceil() as usize;
            format!(
                "{:>8}..{:<8} |{}{}| {c}",
                fmt_ns(lo),
                fmt_ns(hi),
                "#".repeat(n.min(bar)),
                " ".repeat(bar - n.min(bar))
            )
        })
        .collect()
}

/// When nothing arrived for this long, the header says so.
fn stale_after(interval_ns: u64) -> Duration {
    Duration::from_nanos(interval_ns.saturating_mul(2)).max(Duration::from_secs(2))
}

/// Draw the whole screen.
pub fn draw(f: &mut Frame, live: &Live, since_frame: Option<Duration>, started: Instant, problem: &str) {
    let m = live.shown();
    let area = f.area();
    let [head, body, foot] =
        Layout::vertical([Constraint::Length(3), Constraint::Min(4), Constraint::Length(1)]).areas(area);
    draw_header(f, head, m, since_frame, started, problem, live.paused.is_some());
    let order = m.order();
    let detail = m.selected.filter(|id| order.contains(id));
    let (table_area, detail_area) = if detail.is_some() && body.height >= 12 {
        let [t, d] = Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(body);
        (t, Some(d))
    } else {
        (body, None)
    };
    draw_table(f, table_area, m, &order);
    if let (Some(id), Some(d)) = (detail, detail_area) {
        draw_detail(f, d, m, id);
    }
    let keys = if m.editing_filter {
        format!("filter: {}_   (Enter: keep, Esc: clear)", m.filter)
    } else {
        format!(
            "q quit  s sort ({}{})  r reverse  / filter{}  space {}  arrows select  ? help",
            m.sort.word(),
            if m.reverse { ", reversed" } else { "" },
            if m.filter.is_empty() { String::new() } else { format!(" [{}]", m.filter) },
            if live.paused.is_some() { "resume" } else { "pause" }
        )
    };
    f.render_widget(Paragraph::new(keys).style(Style::default().add_modifier(Modifier::REVERSED)), foot);
    if m.help {
        draw_help(f, area);
    }
}

fn draw_header(
    f: &mut Frame,
    area: Rect,
    m: &Live,
    since_frame: Option<Duration>,
    started: Instant,
    problem: &str,
    paused: bool,
) {
    let h = &m.header;
    let board = if h.board.is_empty() { "-" } else { &h.board };
    let mut l1 = vec![Span::styled("latmon-view  ", Style::default().add_modifier(Modifier::BOLD))];
    l1.push(Span::raw(format!(
        "seq {}{}  up {}  board {board}  kernel {}  latmon {}  interval {}",
        h.seq,
        if h.last { " (final)" } else { "" },
        fmt_ns(h.uptime_ns),
        if h.kernel.is_empty() { "-" } else { &h.kernel },
        if h.version.is_empty() { "-" } else { &h.version },
        fmt_ns(h.interval_ns),
    )));
    let budget = if h.budget_bps > 0 {
        format!(
            "  budget {}% of {} B/s{}",
            u64::from(h.used_bps) * 100 / u64::from(h.budget_bps),
            h.budget_bps,
            if h.step > 0 { format!(" DEGRADED step {}", h.step) } else { String::new() }
        )
    } else {
        String::new()
    };
    let l2 = format!(
        "link  frames {}  CRC errors {}  resyncs {}  summaries lost {}  agent drops {}{}{}{}",
        h.link.frames_good,
        h.link.crc_errors,
        h.link.resyncs,
        h.summaries_lost,
        h.agent_drops,
        budget,
        h.bpf_cpu_ppm.map_or(String::new(), |p| format!("  agent BPF {:.3}% CPU", f64::from(p) / 10_000.0)),
        if h.restarts > 0 { format!("  restarts {}", h.restarts) } else { String::new() }
    );
    let stale = stale_after(h.interval_ns);
    let l3 = match since_frame {
        None => Line::from(Span::styled(
            format!(
                "waiting for data from {} ({} s){}",
                shown(&m.source),
                started.elapsed().as_secs(),
                if problem.is_empty() { String::new() } else { format!(": {problem}") }
            ),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Some(d) if d >= stale => Line::from(Span::styled(
            format!(
                "NO DATA for {} s from {}{}",
                d.as_secs(),
                shown(&m.source),
                if problem.is_empty() { String::new() } else { format!(": {problem}") }
            ),
            Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        )),
        Some(d) => Line::from(format!(
            "receiving  last frame {:.1} s ago  alerts {}{}  from {}",
            d.as_secs_f64(),
            m.alerts_seen,
            if paused { "  PAUSED" } else { "" },
            shown(&m.source)
        )),
    };
    f.render_widget(Paragraph::new(vec![Line::from(l1), Line::from(l2), l3]), area);
}

fn draw_table(f: &mut Frame, area: Rect, m: &Live, order: &[u16]) {
    let wide = area.width >= 110;
    let name_w =
        order.iter().filter_map(|&id| m.row(id)).map(|r| shown(&r.report.name).len()).max().unwrap_or(8).clamp(8, 24)
            as u16;
    let mut cols: Vec<(&str, u16)> = vec![("PROBE", name_w), ("MECH", 8), ("EV/S", 7), ("P50", 9), ("P99", 9)];
    if wide {
        cols.push(("P99.9", 9));
    }
    cols.extend([("MAX", 9), ("ALERT", 5)]);
    if wide {
        cols.push(("DROPS", 6));
    }
    // What is left (column gaps and the selection mark too) is the trend's.
    let used: u16 = cols.iter().map(|c| c.1 + 1).sum::<u16>() + 1;
    let spark_w = area.width.saturating_sub(used).clamp(4, 90);
    cols.push(("P99 TREND", spark_w));
    let heads: Vec<&str> = cols.iter().map(|c| c.0).collect();
    let widths: Vec<Constraint> = cols.iter().map(|c| Constraint::Length(c.1)).collect();
    let spark_w = spark_w as usize;
    let rows: Vec<TRow> = order
        .iter()
        .filter_map(|&id| m.row(id))
        .map(|r| {
            let p = &r.report;
            let mut cells = vec![
                shown(&p.name).into_owned(),
                shown(&p.attach).into_owned(),
                m.rate(p).to_string(),
                fmt_ns(p.p50_ns),
                fmt_ns(p.p99_ns),
            ];
            if wide {
                cells.push(fmt_ns(p.p999_ns));
            }
            cells.extend([fmt_ns(p.max_ns), p.alerts.to_string()]);
            if wide {
                cells.push(p.drops.to_string());
            }
            cells.push(sparkline(&r.p99, spark_w));
            TRow::new(cells)
        })
        .collect();
    let title = format!(
        " {} probes/series, sorted by {}{} ",
        order.len(),
        m.sort.word(),
        if m.filter.is_empty() { String::new() } else { format!(", filter \"{}\"", m.filter) }
    );
    let table = Table::new(rows, widths)
        .header(TRow::new(heads).style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)))
        .block(Block::default().borders(Borders::TOP).title(title))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol(">");
    let mut state = TableState::default().with_selected(m.selected.and_then(|s| order.iter().position(|&i| i == s)));
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_detail(f: &mut Frame, area: Rect, m: &Live, id: u16) {
    let Some(r) = m.row(id) else { return };
    let name = shown(&r.report.name).into_owned();
    let [left, right] = Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
    // Histogram since start (the interval's when the totals are unknown).
    let hist_block = Block::default().borders(Borders::ALL).title(format!(" histogram of {name} (since start) "));
    let inner = hist_block.inner(left);
    let bar = (inner.width as usize).saturating_sub(32).clamp(4, 40);
    let lines: Vec<Line> = match m.totals(id) {
        Some(h) if h.count > 0 => hist_lines(h, bar, inner.height as usize).into_iter().map(Line::from).collect(),
        _ => vec![Line::from("no events yet")],
    };
    f.render_widget(Paragraph::new(lines).block(hist_block), left);
    let [spark, alerts] = Layout::vertical([Constraint::Length(5), Constraint::Min(2)]).areas(right);
    let p = &r.report;
    let sblock = Block::default().borders(Borders::ALL).title(format!(
        " p99 history: {}  (p50 {}, max {}) ",
        fmt_ns(p.p99_ns),
        fmt_ns(p.p50_ns),
        fmt_ns(p.max_ns)
    ));
    let w = sblock.inner(spark).width as usize;
    let data: Vec<u64> = r.p99.iter().skip(r.p99.len().saturating_sub(w)).copied().collect();
    f.render_widget(Sparkline::default().block(sblock).data(&data), spark);
    let mine: Vec<Line> = m
        .alerts
        .iter()
        .filter(|a| a.probe == r.report.name)
        .take(alerts.height.saturating_sub(2) as usize)
        .flat_map(|a| {
            let head = Line::from(format!(
                "{:>12.3}s {} pid {} {} cpu {} {}",
                a.time_ns as f64 / 1e9,
                fmt_ns(a.latency_ns),
                a.pid,
                shown(&a.comm),
                a.cpu,
                shown(&a.probe)
            ));
            // Its anatomy (what delayed it), when the record has one.
            let why = a.anatomy.as_ref().map(|an| Line::from(format!("    {}", an.render(a.latency_ns))));
            std::iter::once(head).chain(why)
        })
        .take(alerts.height.saturating_sub(2) as usize)
        .collect();
    let ablock = Block::default().borders(Borders::ALL).title(format!(" latest alerts of {name} "));
    let body = if mine.is_empty() { vec![Line::from("none")] } else { mine };
    f.render_widget(Paragraph::new(body).block(ablock), alerts);
}

fn draw_help(f: &mut Frame, area: Rect) {
    let text = [
        "latmon-view keys",
        "",
        "  up/down, j/k, PgUp/PgDn   select a row (its histogram,",
        "                            p99 history and alerts below)",
        "  s                         next sort column (p99, p50, max,",
        "                            events/s, name)",
        "  r or S                    reverse the order",
        "  / or f                    filter rows by name (Enter keeps,",
        "                            Esc clears)",
        "  space or p                pause/resume the screen",
        "  ? or h                    this help (any key closes it)",
        "  q, Esc, Ctrl-C            quit",
    ];
    let w = 62.min(area.width);
    let h = (text.len() as u16 + 2).min(area.height);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    f.render_widget(Clear, r);
    let lines: Vec<Line> = text.iter().map(|&l| Line::from(l)).collect();
    f.render_widget(Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" help ")), r);
}

/// What the reader thread sends.
enum Chunk {
    Data(Vec<u8>),
    Restart,
    End,
    Problem(String),
}

/// The full-screen loop. Restores the terminal on every way out.
pub fn run(mut src: crate::source::Source, duration: Option<Duration>) -> Result<()> {
    let name = src.name().to_string();
    let (tx, rx) = mpsc::sync_channel::<Chunk>(64);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        let mut said = String::new();
        loop {
            let msg = match src.read(&mut buf) {
                Got::Data(n) => Chunk::Data(buf[..n].to_vec()),
                Got::Restart => Chunk::Restart,
                Got::End => Chunk::End,
                Got::Idle if src.problem() != said => {
                    said = src.problem().to_string();
                    Chunk::Problem(said.clone())
                }
                Got::Idle => continue,
            };
            let end = matches!(msg, Chunk::End);
            if tx.send(msg).is_err() || end {
                break;
            }
        }
    });
    terminal::enable_raw_mode()?;
    let mut out = io::stdout();
    execute!(out, terminal::EnterAlternateScreen)?;
    let res = ui_loop(&name, &rx, duration);
    let _ = terminal::disable_raw_mode();
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen);
    res
}

fn ui_loop(name: &str, rx: &mpsc::Receiver<Chunk>, duration: Option<Duration>) -> Result<()> {
    let mut term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stdout()))?;
    term.clear()?;
    let started = Instant::now();
    let deadline = duration.map(|d| started + d);
    let mut dec = FrameDecoder::new();
    let mut tracker = Tracker::new();
    let mut live = Live::new(name);
    let mut last_frame: Option<Instant> = None;
    let mut problem = String::new();
    let mut ended = false;
    let mut dirty = true;
    let mut last_draw = Instant::now() - Duration::from_secs(10);
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
        // Bytes first (never more than what arrived), then keys.
        while let Ok(c) = rx.try_recv() {
            match c {
                Chunk::Data(b) => dec.feed(&b, &mut |r| {
                    if let Ok(f) = r {
                        last_frame = Some(Instant::now());
                        let ev = tracker.on_frame(f);
                        live.on_event(&ev, &tracker, &LinkStats::default());
                    }
                }),
                Chunk::Restart => dec.restart(),
                Chunk::End => ended = true,
                Chunk::Problem(p) => problem = p,
            }
            live.header.link = dec.stats;
            if let Some(p) = &mut live.paused {
                p.header.link = dec.stats;
            }
            dirty = true;
        }
        if last_frame.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            problem.clear();
        }
        if event::poll(Duration::from_millis(50))? {
            match event::read()? {
                TermEvent::Key(k) => {
                    if live.on_key(k) == Action::Quit {
                        return Ok(());
                    }
                    dirty = true;
                }
                TermEvent::Resize(..) => {
                    term.autoresize()?;
                    dirty = true;
                }
                _ => {}
            }
        }
        let gap = last_draw.elapsed();
        if (dirty && gap >= Duration::from_millis(100)) || gap >= Duration::from_secs(1) {
            let since = last_frame.map(|t| t.elapsed());
            let shown_problem = if ended { "source ended" } else { problem.as_str() };
            term.draw(|f| draw(f, &live, since, started, shown_problem))?;
            last_draw = Instant::now();
            dirty = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use latmon_core::wire::{BucketScheme, Encoder, Frame, Hello, ProbeDesc, SummaryHeader};

    use super::*;

    fn hello(names: &[&str]) -> Hello {
        Hello {
            protocol_revision: 0,
            latmon_version: "0.1.0".into(),
            board: "arm1".into(),
            kernel: "6.18".into(),
            boot_id: 7,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probe_count: names.len() as u16,
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
        }
    }

    /// A model fed through the real encoder, decoder and tracker.
    fn fed(values: &[&[u64]]) -> Live {
        let names: Vec<String> = (0..values.len()).map(|i| format!("p{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut t = Tracker::new();
        let mut live = Live::new("serial:x");
        let ev = t.on_frame(Frame::Hello(hello(&names)));
        live.on_event(&ev, &t, &LinkStats::default());
        let mut hs: Vec<Hist> = vec![Hist::default(); values.len()];
        for seq in 1..=3u64 {
            for (h, vs) in hs.iter_mut().zip(values) {
                for &v in *vs {
                    h.record(v);
                }
            }
            let mut frames = Vec::new();
            Encoder::new()
                .summary(SummaryHeader { seq, boot_id: 7, time_ns: seq * 1_000_000_000, last: false }, &hs, &mut |f| {
                    frames.push(f.to_vec())
                })
                .unwrap();
            let mut d = FrameDecoder::new();
            d.feed(&frames.concat(), &mut |r| {
                let ev = t.on_frame(r.unwrap());
                live.on_event(&ev, &t, &LinkStats::default());
            });
        }
        live
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    #[test]
    fn rows_sort_by_the_chosen_column_and_filter() {
        let mut l = fed(&[&[1_000; 50], &[900_000, 5_000], &[20_000; 3]]);
        assert_eq!(l.order(), [1, 2, 0], "worst p99 first");
        assert_eq!(l.row(1).unwrap().p99.len(), 3, "one history point per interval");
        l.on_key(key('s')); // p50
        assert_eq!(l.order(), [2, 1, 0]);
        l.on_key(key('s')); // max
        l.on_key(key('s')); // events/s
        assert_eq!(l.order(), [0, 2, 1]);
        l.on_key(key('r'));
        assert_eq!(l.order(), [1, 2, 0]);
        l.on_key(key('/'));
        for c in "p2".chars() {
            l.on_key(key(c));
        }
        l.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(l.order(), [2]);
        assert_eq!(l.on_key(key('q')), Action::Quit);
    }

    #[test]
    fn pause_freezes_the_screen_and_selection_follows_keys() {
        let mut l = fed(&[&[1_000; 5], &[2_000; 5]]);
        assert_eq!(l.selected, Some(1), "the worst row is selected first");
        l.on_key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
        assert_eq!(l.selected, Some(0));
        l.on_key(key(' '));
        let seq = l.shown().header.seq;
        l.header.seq += 5; // what on_event does with new data
        assert_eq!(l.shown().header.seq, seq, "paused: the frozen copy is shown");
        l.on_key(key(' '));
        assert_eq!(l.shown().header.seq, seq + 5);
    }

    #[test]
    fn history_and_alerts_are_bounded() {
        let mut l = fed(&[&[1_000]]);
        let t = Tracker::new();
        for i in 0..(ALERTS_KEPT as u64 + 10) {
            let a = AlertRecord {
                probe: "p0".into(),
                pid: 1,
                tid: 1,
                comm: "c".into(),
                cpu: 0,
                latency_ns: i,
                time_ns: i,
                anatomy: None,
                cycle: None,
            };
            l.on_event(&Event::Alert(a), &t, &LinkStats::default());
        }
        assert_eq!(l.alerts.len(), ALERTS_KEPT);
        assert_eq!(l.alerts[0].latency_ns, ALERTS_KEPT as u64 + 9, "newest first");
        let mut q: VecDeque<u64> = (0..HISTORY as u64 * 2).collect();
        q.truncate(HISTORY);
        assert_eq!(sparkline(&q, 10).chars().count(), 10);
        assert_eq!(sparkline(&VecDeque::from(vec![5, 5]), 4), "  ▁▁");
    }

    #[test]
    fn histogram_lines_are_powers_of_two_and_fit() {
        let mut h = Hist::default();
        for v in [1_100, 1_200, 3_000, 3_500, 3_900, 1_000_000] {
            h.record(v);
        }
        let lines = hist_lines(&h, 10, 20);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[1].contains("|##########| 3"), "{lines:?}");
        assert_eq!(hist_lines(&h, 10, 2).len(), 2);
    }

    #[test]
    fn the_screen_draws_at_80x24_with_header_rows_and_the_histogram() {
        let l = fed(&[&[1_000; 50], &[900_000, 5_000]]);
        let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
        term.draw(|f| draw(f, &l, Some(Duration::from_millis(200)), Instant::now(), "")).unwrap();
        let buf = term.backend().buffer().clone();
        let text: String =
            (0..24).map(|y| (0..80).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>() + "\n").collect();
        for needle in ["board arm1", "kernel 6.18", "PROBE", "P99 TREND", "p1 ", "p0 ", "histogram of p1", "q quit"] {
            assert!(text.contains(needle), "{needle:?} missing in\n{text}");
        }
        let stale = Instant::now();
        term.draw(|f| draw(f, &l, Some(Duration::from_secs(7)), stale, "open: gone")).unwrap();
        let buf = term.backend().buffer().clone();
        let line2: String = (0..80).map(|x| buf[(x, 2)].symbol().to_string()).collect();
        assert!(line2.starts_with("NO DATA for 7 s from serial:x: open: gone"), "{line2}");
    }
}
