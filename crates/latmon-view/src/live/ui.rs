// SPDX-License-Identifier: MIT
//! Drawing the live view: the model ([`Live`]) onto a ratatui frame.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use latmon_core::hist::Hist;
use latmon_core::receiver::shown;
use latmon_core::summary::{render_detail_into, Named};
use latmon_core::text::fmt_ns;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row as TRow, Sparkline, Table, TableState};
use ratatui::Frame;

use latmon_core::anatomy::Policy;
use latmon_core::loops::{Loop, LoopClass};

use super::{missed, Live, MissLog, Row, Shown, SortCol};

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

/// Lines the detail pane needs to say something (a few histogram rows).
const DETAIL_MIN: u16 = 7;

/// Draw the whole screen.
pub fn draw(f: &mut Frame, live: &Live, since_frame: Option<Duration>, started: Instant, problem: &str) {
    let m = live.shown();
    let area = f.area();
    // A fourth header line for the board's certificate, when it has one.
    let head_h = 3 + u16::from(m.header.certificate.is_some());
    let [head, body, foot] =
        Layout::vertical([Constraint::Length(head_h), Constraint::Min(4), Constraint::Length(1)]).areas(area);
    draw_header(f, head, m, since_frame, started, problem, live.paused.is_some());
    // The agent's loops first, above the probes (as `latmon run` and
    // `latmon view` print them): at most a third of the body, so the
    // table keeps its room; the rest of the loops counted.
    let loops_h = loops_height(m, body.height);
    let [loops_area, body] = Layout::vertical([Constraint::Length(loops_h), Constraint::Min(0)]).areas(body);
    if loops_h > 0 {
        draw_loops(f, loops_area, m);
    }
    let lines = m.lines();
    let detail = m.selected.filter(|id| {
        lines.contains(&Shown::Probe { id: *id, depth: 0 }) || lines.contains(&Shown::Probe { id: *id, depth: 1 })
    });
    // The table first: every line of it (border and heads too) before the
    // detail takes half the body; the detail only with room for a plot.
    let table_h = (lines.len() as u16 + 2).max(body.height / 2).min(body.height);
    let (table_area, detail_area) = if detail.is_some() && body.height.saturating_sub(table_h) >= DETAIL_MIN {
        let [t, d] = Layout::vertical([Constraint::Length(table_h), Constraint::Min(DETAIL_MIN)]).areas(body);
        (t, Some(d))
    } else {
        (body, None)
    };
    draw_table(f, table_area, m, &lines);
    if let (Some(id), Some(d)) = (detail, detail_area) {
        draw_detail(f, d, m, id);
    }
    let keys = if m.editing_filter {
        format!("filter: {}_   (Enter: keep, Esc: clear)", m.filter)
    } else {
        format!(
            "q quit  s sort ({}{})  r rev  / filter{}  o fold  space {}  ? help",
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

/// Lines the loops block takes of a body `body_h` lines high: its title
/// line, the column heads and a line per loop (or the "+N more" line),
/// at most a third of the body; none when the agent listed no loop.
fn loops_height(m: &Live, body_h: u16) -> u16 {
    if m.loops.is_empty() && m.loops_unlisted == 0 {
        return 0;
    }
    let more = u16::from(m.loops_unlisted > 0);
    let need = 2 + (m.loops.len() as u16).saturating_add(more);
    need.min(body_h / 3).max(1)
}

/// The loops block's columns: name (`w` wide), tid, policy, period and
/// its source, then the agent's counts of a watched loop.
fn loops_head(w: usize) -> String {
    format!(
        " {:<w$} {:>7} {:<8} {:>8} {:<9} {:>6} {:>10} {:>7}",
        "LOOP", "TID", "POLICY", "PERIOD", "FROM", "CYCLES", "MISS/TOTAL", "OVERRUN"
    )
}

/// One loop's line: a watched loop's cycles and misses this interval,
/// its misses and overruns since start (the agent's counts: the cycle
/// family's per thread, not the records that crossed the link); another
/// loop's class instead. The name is the board's: escaped ([`shown`]),
/// cut to `w` with `~`.
pub(super) fn loop_line(l: &Loop, w: usize) -> String {
    let name = shown(&l.comm);
    let name = if name.len() > w { format!("{}~", &name[..w.saturating_sub(1)]) } else { name.into_owned() };
    let policy = if l.rt && l.policy != Policy::Deadline {
        format!("{} {}", l.policy.word(), l.prio)
    } else {
        l.policy.word().to_string()
    };
    let period = if l.period_ns > 0 { fmt_ns(l.period_ns) } else { "-".into() };
    let mut s = format!(" {name:<w$} {:>7} {policy:<8} {period:>8} {:<9} ", l.tid, l.period_source.word());
    match l.cycle.filter(|_| l.watched) {
        Some(c) => {
            let miss = format!("{}/{}", count(c.misses), count(c.total_misses));
            s.push_str(&format!("{:>6} {miss:>10} {:>7}", count(c.cycles), count(c.total_overruns)));
        }
        None => s.push_str(match (l.class, l.rt) {
            (LoopClass::Periodic, false) => "periodic, not RT: not watched",
            (LoopClass::Periodic, true) if l.watched => "watched, no cycle yet",
            (LoopClass::Periodic, true) => "periodic, not watched (past the agent's bound)",
            (LoopClass::Sporadic, _) => "sporadic",
            (LoopClass::Unknown, _) => "not yet known",
        }),
    }
    s
}

/// A count in at most 5 characters (the loops block's 80 columns):
/// 12345 -> 12k, u64::MAX -> 18446P.
fn count(n: u64) -> String {
    let (mut n, mut unit) = (n, 0);
    while n > 9_999 {
        n /= 1000;
        unit += 1;
    }
    format!("{n}{}", ["", "k", "M", "G", "T", "P", "E"][unit])
}

fn draw_loops(f: &mut Frame, area: Rect, m: &Live) {
    let n = |c: LoopClass| m.loops.iter().filter(|l| l.class == c).count();
    let mut title = format!(" loops: {} periodic, {} sporadic", n(LoopClass::Periodic), n(LoopClass::Sporadic));
    if n(LoopClass::Unknown) > 0 {
        title.push_str(&format!(", {} not yet known", n(LoopClass::Unknown)));
    }
    title.push_str(" (the agent's counts");
    if let Some(seq) = m.loops_stale() {
        // A later listing was lost: these counts are that old.
        title.push_str(&format!(", loops as of seq {seq}"));
    }
    title.push_str(") ");
    let block = Block::default().borders(Borders::TOP).title(title);
    let inner = block.inner(area);
    // The name as wide as the longest (8 to 31), within what the other
    // columns leave.
    let longest = m.loops.iter().map(|l| shown(&l.comm).len()).max().unwrap_or(0);
    let w = longest.min((inner.width as usize).saturating_sub(63)).clamp(8, 31);
    let mut lines =
        vec![Line::styled(loops_head(w), Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))];
    let (shown_loops, more) = m.loop_lines((inner.height as usize).saturating_sub(1));
    for l in shown_loops {
        // A loop that missed stands out as the screen's alarms do: this
        // interval's misses reversed, misses since start bold.
        let style = match l.cycle.filter(|_| l.watched) {
            Some(c) if c.misses > 0 => Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED),
            _ if missed(l) => Style::default().add_modifier(Modifier::BOLD),
            _ => Style::default(),
        };
        lines.push(Line::styled(loop_line(l, w), style));
    }
    if more > 0 {
        let unlisted = if m.loops_unlisted > 0 {
            format!(" ({} past the agent's list bound)", m.loops_unlisted)
        } else {
            String::new()
        };
        lines
            .push(Line::styled(format!(" +{more} more loops{unlisted}"), Style::default().add_modifier(Modifier::DIM)));
    }
    f.render_widget(Paragraph::new(lines).block(block), area);
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
    let mut lines = vec![Line::from(l1), Line::from(l2), l3];
    if let Some(c) = &h.certificate {
        lines.push(Line::from(c.clone()));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// The name cell of a table line: a family line's name, a series' label
/// after its family's name, indented.
pub(super) fn name_cell(m: &Live, l: Shown) -> String {
    match l {
        Shown::Probe { id, depth: 0 } => m.row(id).map_or_else(String::new, |r| shown(&r.report.name).into_owned()),
        Shown::Probe { id, .. } => m.row(id).map_or_else(String::new, |r| {
            let n = &r.report.name;
            format!("  {}", shown(n.split_once(':').map_or(n.as_str(), |(_, l)| l)))
        }),
        Shown::Rest { rest, .. } => format!("  +{} more", rest.series),
    }
}

fn draw_table(f: &mut Frame, area: Rect, m: &Live, lines: &[Shown]) {
    let wide = area.width >= 110;
    let name_w = lines.iter().map(|&l| name_cell(m, l).len()).max().unwrap_or(8).clamp(8, 24) as u16;
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
    let rows: Vec<TRow> = lines
        .iter()
        .filter_map(|&l| {
            let Shown::Probe { id, depth } = l else {
                let Shown::Rest { rest, .. } = l else { unreachable!() };
                let mut cells = vec![name_cell(m, l), String::new(), m.rate_of(rest.count).to_string()];
                cells.extend([String::new(), String::new()]);
                if wide {
                    cells.push(String::new());
                }
                cells.extend([if rest.count > 0 { fmt_ns(rest.max_ns) } else { "-".into() }, rest.alerts.to_string()]);
                if wide {
                    cells.push(rest.drops.to_string());
                }
                return Some(TRow::new(cells).style(Style::default().add_modifier(Modifier::DIM)));
            };
            let r = m.row(id)?;
            let p = &r.report;
            let mut cells = vec![
                name_cell(m, l),
                if depth == 0 { shown(p.attach.as_str()).into_owned() } else { String::new() },
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
            let style = if depth == 0 { Style::default().add_modifier(Modifier::BOLD) } else { Style::default() };
            Some(TRow::new(cells).style(style))
        })
        .collect();
    let order = if m.sort == SortCol::Name {
        "families and series by name".to_string()
    } else {
        format!("families by their worst {}, series by {0}", m.sort.word())
    };
    let title = format!(
        " {} probes/series, {order}{} ",
        m.order().len(),
        if m.filter.is_empty() { String::new() } else { format!(", filter \"{}\"", m.filter) }
    );
    let table = Table::new(rows, widths)
        .header(TRow::new(heads).style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)))
        .block(Block::default().borders(Borders::TOP).title(title))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol(">");
    let at = |s: u16| lines.iter().position(|l| matches!(l, Shown::Probe { id, .. } if *id == s));
    let mut state = TableState::default().with_selected(m.selected.and_then(at));
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_detail(f: &mut Frame, area: Rect, m: &Live, id: u16) {
    let Some(r) = m.row(id) else { return };
    // A cycle probe's row (its family line or a series: the records name
    // the family): its misses, full width, under smaller plots.
    let fam = m.row(m.family_of(id)).map_or(r.report.name.as_str(), |f| f.report.name.as_str());
    match m.misses_of(fam) {
        Some(log) => {
            let [plots, misses] = Layout::vertical([Constraint::Percentage(40), Constraint::Min(3)]).areas(area);
            draw_plots(f, plots, m, r, false);
            draw_misses(f, misses, log);
        }
        None => draw_plots(f, area, m, r, true),
    }
}

/// The selected row's histogram, p99 history and (`alerts`) its latest
/// alerts.
fn draw_plots(f: &mut Frame, area: Rect, m: &Live, r: &Row, alerts: bool) {
    let id = r.id;
    let name = shown(&r.report.name).into_owned();
    let [left, right] = Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
    // Histogram since start (the interval's when the totals are unknown).
    let threshold = match r.report.threshold_ns {
        0 => String::new(),
        ns => format!(", threshold {}", fmt_ns(ns)),
    };
    let hist_block =
        Block::default().borders(Borders::ALL).title(format!(" histogram of {name} (since start{threshold}) "));
    let inner = hist_block.inner(left);
    let bar = (inner.width as usize).saturating_sub(32).clamp(4, 40);
    let lines: Vec<Line> = match m.totals(id) {
        Some(h) if h.count > 0 => hist_lines(h, bar, inner.height as usize).into_iter().map(Line::from).collect(),
        _ => vec![Line::from("no events yet")],
    };
    f.render_widget(Paragraph::new(lines).block(hist_block), left);
    let spark_h = if alerts { Constraint::Length(5) } else { Constraint::Min(3) };
    let rest = if alerts { Constraint::Min(2) } else { Constraint::Length(0) };
    let [spark, alerts_area] = Layout::vertical([spark_h, rest]).areas(right);
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
    if !alerts {
        return;
    }
    let room = alerts_area.height.saturating_sub(2) as usize;
    let width = alerts_area.width.saturating_sub(6) as usize;
    let mine: Vec<Line> = m
        .alerts
        .iter()
        .filter(|got| alert_of_row(&r.report.name, &got.probe))
        .take(room)
        .flat_map(|got| {
            let a = &got.record;
            let head = Line::from(format!(
                "{:>12.3}s {} pid {} {} cpu {} {}",
                a.time_ns as f64 / 1e9,
                if a.is_rule() { "rule".into() } else { fmt_ns(a.latency_ns) },
                a.pid,
                shown(&a.comm),
                a.cpu,
                shown(&got.probe)
            ));
            // What delayed it, as the agent prints it, when the record says.
            let mut why = String::from("    ");
            let why = render_detail_into(&mut why, got.named(), width).then(|| Line::from(why));
            std::iter::once(head).chain(why)
        })
        .take(room)
        .collect();
    let ablock = Block::default().borders(Borders::ALL).title(format!(" latest alerts of {name} "));
    let body = if mine.is_empty() { vec![Line::from("none")] } else { mine };
    f.render_widget(Paragraph::new(body).block(ablock), alerts_area);
}

/// A record of `probe` belongs under row `row`: its own, or of a series
/// of the row's family (`lock:ctrl_mutex` under `lock`). A family's ALERT
/// count sums its series' records, which name their series: the `lock`
/// row counted 16 and listed "none" (issue 40).
fn alert_of_row(row: &str, probe: &str) -> bool {
    probe == row || probe.strip_prefix(row).is_some_and(|rest| rest.starts_with(':'))
}

/// A cycle probe's latest misses, overruns and slow responses, newest
/// first, one line each: when, who, then the line the agent prints
/// (`miss 1.62ms of 1.00ms: running 1500 us, ...`), cut to the width at
/// a part's end.
fn draw_misses(f: &mut Frame, area: Rect, log: &MissLog) {
    let block = Block::default().borders(Borders::ALL).title(format!(
        " misses of {}: {} misses, {} overruns{} received, newest first ",
        shown(&log.probe),
        log.misses,
        log.overruns,
        if log.responses > 0 { format!(", {} slow responses", log.responses) } else { String::new() }
    ));
    let inner = block.inner(area);
    let width = inner.width as usize;
    let lines: Vec<Line> = log
        .recs
        .iter()
        .take(inner.height as usize)
        .map(|a| {
            let mut s = format!("{:>11.6}s {}[{}] cpu {}  ", a.time_ns as f64 / 1e9, shown(&a.comm), a.tid, a.cpu);
            let room = width.saturating_sub(s.len());
            if !render_detail_into(&mut s, Named { name: &log.probe, record: a }, room) {
                s.push_str(&fmt_ns(a.latency_ns));
            }
            Line::from(s)
        })
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
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
        "  o or Enter                show all series of the selected",
        "                            row's family, or fold them again",
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

#[cfg(test)]
mod tests {
    use super::alert_of_row;

    #[test]
    fn a_family_row_lists_its_series_records() {
        assert!(alert_of_row("lock", "lock"));
        assert!(alert_of_row("lock", "lock:ctrl_mutex"), "the family's series");
        assert!(alert_of_row("lock:ctrl_mutex", "lock:ctrl_mutex"));
        assert!(!alert_of_row("lock:ctrl_mutex", "lock:other"));
        assert!(!alert_of_row("lock", "lockd"), "another probe");
        assert!(!alert_of_row("lock:a", "lock"), "a series lists its own only");
    }
}
