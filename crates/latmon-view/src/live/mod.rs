// SPDX-License-Identifier: MIT
//! `latmon-view view SOURCE`: the full-screen live view (ratatui on
//! crossterm: any Linux terminal, Windows Terminal and conhost).
//!
//! Three parts, as ratatui's examples cut them: [`Live`] here is the
//! model (pure: fed with the receiver's events and keys, unit-tested
//! below); `ui` draws it (a function of the model and a frame);
//! `run` is the I/O edge: a reader thread turns the source into byte
//! chunks, the main thread decodes them, handles keys and draws at most
//! 10 times a second, and a guard restores the terminal on every way out.

mod run;
mod ui;

pub use run::run;

use std::collections::VecDeque;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use latmon_core::hist::Hist;
use latmon_core::loops::Loop;
use latmon_core::receiver::shown;
use latmon_core::summary::{AlertRecord, ProbeReport};
use latmon_core::table::{Rest, NO_LINE};
use latmon_core::wire::{Event, LinkStats, ReceivedAlert, Tracker};

/// Points of percentile history kept per row (3 minutes at 1 s intervals).
pub const HISTORY: usize = 180;
/// Alert records kept (newest first), across probes.
pub const ALERTS_KEPT: usize = 64;
/// Cycle records (misses, overruns, slow responses) kept per probe,
/// newest first: the selected cycle row shows them, whatever other
/// probes' alerts flood the shared list.
pub const MISSES_KEPT: usize = 16;
/// Probes whose cycle records are kept; a new one beyond this takes the
/// place of the one quiet longest (a board runs a few cycle probes).
pub const MISS_PROBES: usize = 16;
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
    /// The board's observer-effect certificate line (Hello revision 11;
    /// numbers only, nothing of the board's to escape). None: it has none.
    pub certificate: Option<String>,
}

/// One cycle probe's latest records (the records name their family
/// probe: `cycle`, not `cycle:wakeup`).
#[derive(Debug, Clone)]
pub struct MissLog {
    pub probe: String,
    /// Records of this probe received, by event.
    pub misses: u64,
    pub overruns: u64,
    pub responses: u64,
    /// `alerts_seen` at the last record (which log is quiet longest).
    last: u64,
    /// At most MISSES_KEPT, newest first.
    pub recs: VecDeque<AlertRecord>,
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
    pub alerts: VecDeque<ReceivedAlert>,
    pub alerts_seen: u64,
    /// Cycle records by probe (at most MISS_PROBES).
    pub misses: Vec<MissLog>,
    pub sort: SortCol,
    pub reverse: bool,
    pub filter: String,
    pub editing_filter: bool,
    pub help: bool,
    /// The screen is frozen on this copy of the model (data still arrives).
    pub paused: Option<Box<Live>>,
    /// Selected row, as its probe id (stays on the probe when rows re-sort).
    pub selected: Option<u16>,
    /// Families shown with all their series (by the family line's id);
    /// the others show their worst series and the rest summed.
    pub unfolded: Vec<u16>,
    /// The agent's loops (Loops frames, revision 12) as of the summary
    /// of `loops_seq`: kept when a later summary comes without them (its
    /// Loops frame lost), and the screen says how old they are. Bounded
    /// by the tracker (loops::LISTED, the rest in `loops_unlisted`).
    pub loops: Vec<Loop>,
    pub loops_unlisted: u32,
    pub loops_seq: u64,
}

/// A watched loop the agent counted a miss of since it started.
pub fn missed(l: &Loop) -> bool {
    l.watched && l.cycle.is_some_and(|c| c.total_misses > 0)
}

/// A top-level line with its series, sorted, and its sort key: the
/// worst of them.
struct Group<'a> {
    top: &'a Row,
    key: u64,
    series: Vec<&'a Row>,
}

/// One line of the table, in screen order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// A probe: a family line (`depth` 0) or a series under it (1).
    Probe { id: u16, depth: u8 },
    /// The series of family `of` not listed, summed (a folded family).
    Rest { of: u16, rest: Rest },
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
            misses: Vec::new(),
            sort: SortCol::P99,
            reverse: false,
            filter: String::new(),
            editing_filter: false,
            help: false,
            paused: None,
            selected: None,
            unfolded: Vec::new(),
            loops: Vec::new(),
            loops_unlisted: 0,
            loops_seq: 0,
        }
    }

    /// Take one event of the receiver, with the receiver's state after it.
    pub fn on_event(&mut self, ev: &Event, t: &Tracker, link: &LinkStats) {
        let h = &mut self.header;
        if let Some(hello) = &t.hello {
            h.board = shown(&hello.board).into_owned();
            h.kernel = shown(&hello.kernel).into_owned();
            h.version = shown(&hello.latmon_version).into_owned();
            h.certificate = hello.certificate.as_ref().map(|c| c.line());
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
                // The tracker hands loops out only with the summary of
                // their own seq: none here means this interval's listing
                // was lost (or the agent lists none), not that the loops
                // went away; the last listing stays, dated.
                if !report.loops.is_empty() || report.loops_unlisted > 0 {
                    self.loops.clone_from(&report.loops);
                    self.loops_unlisted = report.loops_unlisted;
                    self.loops_seq = report.seq;
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
                // A rule record is no cycle's end: not logged with misses.
                if let Some(c) = a.record.cycle.as_ref().filter(|c| c.rule.is_none()) {
                    self.log_miss(a, c.event);
                }
            }
            _ => {}
        }
        if let Some(p) = &mut self.paused {
            // Link counters keep moving while paused: they say the link lives.
            p.header.link = *link;
        }
    }

    fn log_miss(&mut self, a: &ReceivedAlert, event: latmon_core::cycle::CycleEvent) {
        use latmon_core::cycle::CycleEvent;
        let at = match self.misses.iter().position(|l| l.probe == a.probe) {
            Some(i) => i,
            None => {
                let log = MissLog {
                    probe: a.probe.clone(),
                    misses: 0,
                    overruns: 0,
                    responses: 0,
                    last: 0,
                    recs: VecDeque::with_capacity(MISSES_KEPT),
                };
                if self.misses.len() < MISS_PROBES {
                    self.misses.push(log);
                    self.misses.len() - 1
                } else {
                    let (i, _) = self.misses.iter().enumerate().min_by_key(|(_, l)| l.last).unwrap_or((0, &log));
                    self.misses[i] = log;
                    i
                }
            }
        };
        let log = &mut self.misses[at];
        match event {
            CycleEvent::Miss => log.misses += 1,
            CycleEvent::Overrun => log.overruns += 1,
            CycleEvent::Response => log.responses += 1,
            CycleEvent::Rule => {}
        }
        log.last = self.alerts_seen;
        if log.recs.len() == MISSES_KEPT {
            log.recs.pop_back();
        }
        log.recs.push_front(a.record.clone());
    }

    /// The loops block's lines within `room` screen lines: loops that
    /// missed (since start, as the agent counts them) first, then the
    /// agent's order (periodic RT first); and how many more are not
    /// shown (listed past the room, and those the agent did not list).
    /// When they do not all fit, one line of the room says how many more.
    pub fn loop_lines(&self, room: usize) -> (Vec<&Loop>, u64) {
        let mut v: Vec<&Loop> = self.loops.iter().collect();
        // Stable: the agent's order within each part.
        v.sort_by_key(|l| !missed(l));
        let unlisted = u64::from(self.loops_unlisted);
        let fit = if v.len() as u64 + unlisted > room as u64 { room.saturating_sub(1) } else { v.len() };
        let more = (v.len() - fit.min(v.len())) as u64 + unlisted;
        v.truncate(fit);
        (v, more)
    }

    /// The loops listing is older than the latest summary (a later
    /// listing was lost): its seq, to say so.
    pub fn loops_stale(&self) -> Option<u64> {
        (!self.loops.is_empty() && self.loops_seq != self.header.seq).then_some(self.loops_seq)
    }

    /// The cycle records of the probe named `probe` (a family line).
    pub fn misses_of(&self, probe: &str) -> Option<&MissLog> {
        self.misses.iter().find(|l| l.probe == probe)
    }

    pub fn row(&self, id: u16) -> Option<&Row> {
        self.rows.get(id as usize).and_then(Option::as_ref)
    }

    pub fn totals(&self, id: u16) -> Option<&Hist> {
        self.totals.get(id as usize).and_then(Option::as_ref)
    }

    /// Ids of the probe rows shown, in table order (what selection moves
    /// over).
    pub fn order(&self) -> Vec<u16> {
        self.lines()
            .into_iter()
            .filter_map(|l| match l {
                Shown::Probe { id, .. } => Some(id),
                Shown::Rest { .. } => None,
            })
            .collect()
    }

    /// The table's lines in screen order, grouped as `latmon run`'s table
    /// groups them (core table.rs: a series under its family, a wait
    /// series under its family's waits line, right after the family):
    /// families ordered by their worst (the sort column over the family
    /// line and its series), series by the column within their family;
    /// a folded family shows its worst series and the rest summed. The
    /// filter keeps the rows whose name or kind has it, and their family
    /// line.
    pub fn lines(&self) -> Vec<Shown> {
        let reports: Vec<Option<ProbeReport>> =
            self.rows.iter().map(|r| r.as_ref().map(|r| r.report.clone())).collect();
        let mut table = latmon_core::table::Table::default();
        let (parent, waits_of) = table.shape(reports.as_slice());
        let f = self.filter.to_ascii_lowercase();
        let wanted = |r: &Row| {
            f.is_empty() || r.report.name.to_ascii_lowercase().contains(&f) || r.report.kind.as_str().contains(&f)
        };
        let key = |r: &Row| match self.sort {
            SortCol::P99 => r.report.p99_ns,
            SortCol::P50 => r.report.p50_ns,
            SortCol::Max => r.report.max_ns,
            SortCol::Events => self.rate(&r.report),
            SortCol::Name => 0,
        };
        // Worst first, as in `latmon run`'s table; ties (and the name
        // column) by name, A first.
        let cmp = |a: (&Row, u64), b: (&Row, u64)| {
            let o = b.1.cmp(&a.1).then_with(|| a.0.report.name.cmp(&b.0.report.name));
            if self.reverse {
                o.reverse()
            } else {
                o
            }
        };
        // A group: a top-level line and its series (sorted), its key the
        // worst of them.
        let group = |top: usize| -> Option<Group<'_>> {
            let t = self.rows[top].as_ref()?;
            let mut series: Vec<&Row> =
                (0..parent.len()).filter(|&i| parent[i] == top).filter_map(|i| self.rows[i].as_ref()).collect();
            series.retain(|r| wanted(r));
            if series.is_empty() && !wanted(t) {
                return None;
            }
            series.sort_by(|a, b| cmp((a, key(a)), (b, key(b))));
            let worst = series.iter().map(|r| key(r)).chain([key(t)]);
            let key = if self.sort == SortCol::Name {
                0
            } else if self.reverse {
                worst.min().unwrap_or(0)
            } else {
                worst.max().unwrap_or(0)
            };
            Some(Group { top: t, key, series })
        };
        let followers: Vec<usize> = waits_of.iter().copied().filter(|&w| w != NO_LINE).collect();
        // Each family with its waits line, which moves with it.
        let mut groups: Vec<(Group, Option<Group>)> = (0..parent.len())
            .filter(|&i| parent[i] == NO_LINE && !followers.contains(&i))
            .filter_map(|i| Some((group(i)?, waits_of.get(i).copied().filter(|&w| w != NO_LINE).and_then(group))))
            .collect();
        groups.sort_by(|a, b| cmp((a.0.top, a.0.key), (b.0.top, b.0.key)));
        let mut out = Vec::new();
        let mut push = |t: &Row, series: &[&Row]| {
            out.push(Shown::Probe { id: t.id, depth: 0 });
            let open = self.unfolded.contains(&t.id) || !f.is_empty();
            let listed = if open { series.len() } else { series.len().min(1) };
            for r in &series[..listed] {
                out.push(Shown::Probe { id: r.id, depth: 1 });
            }
            if listed < series.len() {
                let mut rest = Rest::default();
                for r in &series[listed..] {
                    rest.add(&r.report);
                }
                out.push(Shown::Rest { of: t.id, rest });
            }
        };
        for (fam, waits) in &groups {
            push(fam.top, &fam.series);
            if let Some(w) = waits {
                push(w.top, &w.series);
            }
        }
        out
    }

    /// The family line a row belongs to (itself for a family line).
    fn family_of(&self, id: u16) -> u16 {
        let mut at = None;
        for l in self.lines() {
            match l {
                Shown::Probe { id: i, depth: 0 } => at = Some(i),
                Shown::Probe { id: i, .. } if i == id => return at.unwrap_or(id),
                _ => {}
            }
            if at == Some(id) {
                return id;
            }
        }
        id
    }

    /// Folds or unfolds the family of the selected row (selection moves
    /// to the family line when its series fold away).
    fn toggle_fold(&mut self) {
        let Some(sel) = self.shown().selected else { return };
        let fam = self.shown().family_of(sel);
        match self.unfolded.iter().position(|&i| i == fam) {
            Some(at) => {
                self.unfolded.remove(at);
                if !self.shown().order().contains(&sel) {
                    self.selected = Some(fam);
                }
            }
            None => self.unfolded.push(fam),
        }
    }

    /// Events per second in the row's last interval.
    pub fn rate(&self, p: &ProbeReport) -> u64 {
        self.rate_of(p.count)
    }

    /// Events per second of `count` events in an interval.
    pub fn rate_of(&self, count: u64) -> u64 {
        if self.header.interval_ns == 0 {
            return count;
        }
        (u128::from(count) * 1_000_000_000 / u128::from(self.header.interval_ns)) as u64
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
            KeyCode::Enter | KeyCode::Char('o') => self.toggle_fold(),
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
        let unfolded = self.unfolded.clone();
        if let Some(p) = &mut self.paused {
            (p.sort, p.reverse, p.filter, p.editing_filter, p.help, p.selected, p.unfolded) =
                (sort, reverse, filter, editing, help, selected, unfolded);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use latmon_core::wire::{BucketScheme, Encoder, Frame, FrameDecoder, Hello, ProbeDesc, SummaryHeader};

    use ratatui::style::Modifier;

    use super::ui::{draw, hist_lines, name_cell, sparkline};

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
            thresholds: Vec::new(),
            certificate: None,
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

    /// A model fed with named probes (name, kind, mode as Hello carries
    /// it, values each interval) through the real encoder and tracker.
    fn fed_named(probes: &[(&str, &str, &str, &[u64])]) -> Live {
        let mut h = hello(&probes.iter().map(|p| p.0).collect::<Vec<_>>());
        for (d, p) in h.probes.iter_mut().zip(probes) {
            (d.kind, d.mode) = (p.1.into(), p.2.into());
        }
        let mut t = Tracker::new();
        let mut live = Live::new("tcp://board");
        let ev = t.on_frame(Frame::Hello(h));
        live.on_event(&ev, &t, &LinkStats::default());
        let mut hs: Vec<Hist> = vec![Hist::default(); probes.len()];
        for seq in 1..=2u64 {
            for (h, p) in hs.iter_mut().zip(probes) {
                for &v in p.3 {
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

    /// The default set under load: runq, syscall with busy series and
    /// waits, irq with several lines.
    fn default_set() -> Live {
        let w = latmon_core::wire::WAIT_MODE_PREFIX;
        let ws = latmon_core::wire::WAITS_MODE_PREFIX;
        let mut v: Vec<(String, &str, String, Vec<u64>)> = vec![
            ("runq".into(), "runq", String::new(), vec![20_000; 10]),
            ("syscall".into(), "syscall", String::new(), vec![5_000_000, 3_000, 3_000]),
            ("irq".into(), "irq", String::new(), vec![4_000; 5]),
            ("syscall:waits".into(), "syscall", ws.into(), vec![1_000_000_000, 500_000_000]),
            ("syscall:ppoll".into(), "syscall", w.into(), vec![1_000_000_000]),
            ("syscall:clock_nanosleep".into(), "syscall", w.into(), vec![500_000_000]),
        ];
        for i in 0..12u64 {
            v.push((format!("syscall:s{i}"), "syscall", String::new(), vec![1_000 + i * 100]));
            v.push((format!("irq:{i}"), "irq", String::new(), vec![2_000 + i * 1_000]));
        }
        v.push(("syscall:write".into(), "syscall", String::new(), vec![5_000_000]));
        let refs: Vec<(&str, &str, &str, &[u64])> =
            v.iter().map(|(n, k, m, vals)| (n.as_str(), *k, m.as_str(), vals.as_slice())).collect();
        fed_named(&refs)
    }

    fn names_of(l: &Live) -> Vec<String> {
        l.lines().iter().map(|&x| name_cell(l, x)).collect()
    }

    #[test]
    fn families_group_their_series_waits_apart_and_fold() {
        let mut l = default_set();
        let id = |l: &Live, n: &str| l.rows.iter().flatten().find(|r| r.report.name == n).unwrap().id;
        assert!(l.row(id(&l, "syscall:ppoll")).unwrap().report.wait, "the wait flag came over the wire");
        assert!(l.row(id(&l, "syscall:waits")).unwrap().report.waits);
        assert!(!l.row(id(&l, "syscall:write")).unwrap().report.wait);
        // Families by their worst p99 (syscall's write 5 ms, then runq
        // 20 us, then irq), the waits line right after its family; each
        // family's worst series under it and the rest summed.
        assert_eq!(
            names_of(&l),
            [
                "syscall",
                "  write",
                "  +12 more",
                "syscall:waits",
                "  ppoll",
                "  +1 more",
                "runq",
                "irq",
                "  11",
                "  +11 more"
            ]
        );
        let Shown::Rest { rest, .. } = l.lines()[2] else { panic!() };
        assert_eq!((rest.series, rest.count), (12, 12), "the rest of syscall's series, summed");
        // Unfold syscall (selected: its write line), fold it again.
        l.selected = Some(id(&l, "syscall:write"));
        l.on_key(key('o'));
        let n = names_of(&l);
        assert_eq!(n.len(), 10 - 1 + 12, "{n:?}");
        assert!(n[..14].iter().all(|x| !x.contains("ppoll")), "waits never among the family's series: {n:?}");
        l.on_key(key('o'));
        assert_eq!(names_of(&l).len(), 10);
        // Sorting orders within families too: by events, syscall's busiest
        // series first.
        l.on_key(key('s'));
        l.on_key(key('s'));
        l.on_key(key('s'));
        assert_eq!(l.sort, SortCol::Events);
        assert_eq!(names_of(&l)[0], "runq", "10 events an interval: the busiest family");
    }

    #[test]
    fn every_family_line_is_on_the_screen_at_80x24_and_100x30() {
        let l = default_set();
        for (w, h) in [(80u16, 24u16), (100, 30)] {
            let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
            term.draw(|f| draw(f, &l, Some(Duration::from_millis(200)), Instant::now(), "")).unwrap();
            let buf = term.backend().buffer().clone();
            let text: String =
                (0..h).map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>() + "\n").collect();
            for fam in ["syscall ", "syscall:waits", "runq ", "irq ", "+12 more", "histogram of"] {
                assert!(text.contains(fam), "{fam:?} missing at {w}x{h}:\n{text}");
            }
        }
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
            let record = AlertRecord {
                id: latmon_core::ident::ProbeId::NONE,
                pid: 1,
                tid: 1,
                comm: "c".into(),
                cpu: 0,
                latency_ns: i,
                time_ns: i,
                anatomy: None,
                cycle: None,
            };
            l.on_event(&Event::Alert(ReceivedAlert { probe: "p0".into(), record }), &t, &LinkStats::default());
        }
        assert_eq!(l.alerts.len(), ALERTS_KEPT);
        assert_eq!(l.alerts[0].record.latency_ns, ALERTS_KEPT as u64 + 9, "newest first");
        let mut q: VecDeque<u64> = (0..HISTORY as u64 * 2).collect();
        q.truncate(HISTORY);
        assert_eq!(sparkline(&q, 10).chars().count(), 10);
        assert_eq!(sparkline(&VecDeque::from(vec![5, 5]), 4), "  ▁▁");
    }

    /// A cycle probe's miss (with its parts) and overrun, as the agent
    /// makes them.
    fn cycle_records() -> [AlertRecord; 2] {
        use latmon_core::anatomy::{Anatomy, BlockedOn, Cause, CauseKind};
        use latmon_core::cycle::{CycleEvent, CycleMark, Doing};
        let parts = vec![
            Cause { kind: CauseKind::Running, ns: 1_500_000 },
            Cause { kind: CauseKind::Blocked { on: BlockedOn::Io, syscall: "fdatasync".into() }, ns: 60_000 },
            Cause { kind: CauseKind::PageFaults { count: 7 }, ns: 0 },
        ];
        let mark = |event, done_ns, doing| CycleMark {
            event,
            release_ns: 10_000_000,
            deadline_ns: 11_000_000,
            done_ns,
            doing,
            migrations: 0,
            rule: None,
        };
        let rec = |latency_ns, anatomy, cycle| AlertRecord {
            id: latmon_core::ident::ProbeId::NONE,
            pid: 1234,
            tid: 1240,
            comm: "ctrl_loop".into(),
            cpu: 1,
            latency_ns,
            time_ns: 11_620_000,
            anatomy,
            cycle: Some(cycle),
        };
        [
            rec(
                1_620_000,
                Some(Anatomy::from_parts(1_620_000, 1, 1, parts)),
                mark(CycleEvent::Miss, Some(11_620_000), None),
            ),
            rec(
                1_000_000,
                None,
                mark(CycleEvent::Overrun, None, Some(Doing::Runnable { comm: "hog\x1b[2J".into(), pid: 4242 })),
            ),
        ]
    }

    #[test]
    fn a_cycle_rows_misses_show_with_their_causes_whatever_else_alerts() {
        let mut l = fed_named(&[
            ("cycle", "cycle", "", &[1_100_000; 20]),
            ("cycle:wakeup", "cycle", "", &[20_000; 20]),
            ("cycle:exec", "cycle", "", &[1_000_000; 20]),
            ("runq", "runq", "", &[2_000_000; 20]),
        ]);
        // The records cross the wire (revision 8) as the agent sends them.
        let mut t = Tracker::new();
        t.on_frame(Frame::Hello(hello(&["cycle", "cycle:wakeup", "cycle:exec", "runq"])));
        let mut bytes = Vec::new();
        let mut enc = Encoder::new();
        for r in cycle_records() {
            enc.alert(7, 0, &r, &mut |f| bytes.extend_from_slice(f)).unwrap();
        }
        // Then a flood of another probe's alerts: more than the shared list keeps.
        let flood = AlertRecord { anatomy: None, cycle: None, ..cycle_records()[1].clone() };
        for _ in 0..ALERTS_KEPT + 5 {
            enc.alert(7, 3, &flood, &mut |f| bytes.extend_from_slice(f)).unwrap();
        }
        FrameDecoder::new().feed(&bytes, &mut |r| {
            let ev = t.on_frame(r.unwrap());
            l.on_event(&ev, &t, &LinkStats::default());
        });
        assert!(l.alerts.iter().all(|a| a.probe == "runq"), "the cycle records left the shared list");
        let log = l.misses_of("cycle").unwrap();
        assert_eq!((log.misses, log.overruns, log.recs.len()), (1, 1, 2));
        // Selected: a series of the cycle family (the records name the family).
        let exec = l.rows.iter().flatten().find(|r| r.report.name == "cycle:exec").unwrap().id;
        l.selected = Some(exec);
        l.unfolded.push(0);
        for (w, h) in [(120u16, 40u16), (80, 24)] {
            let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
            term.draw(|f| draw(f, &l, Some(Duration::from_millis(200)), Instant::now(), "")).unwrap();
            let buf = term.backend().buffer().clone();
            let text: String =
                (0..h).map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>() + "\n").collect();
            assert!(text.contains("misses of cycle: 1 misses, 1 overruns"), "{w}x{h}:\n{text}");
            assert!(!text.contains('\x1b'), "{text}");
            let (miss, overrun) = if w >= 120 {
                (
                    "ctrl_loop[1240] cpu 1  miss 1.62ms of 1.00ms: running 1500 us, blocked on io in fdatasync 60 us,",
                    "ctrl_loop[1240] cpu 1  overrun 1.00ms of 1.00ms, runnable behind hog?[2J[4242]",
                )
            } else {
                (
                    "ctrl_loop[1240] cpu 1  miss 1.62ms of 1.00ms: running 1500 us, ~",
                    "cpu 1  overrun 1.00ms of 1.00ms, r",
                )
            };
            assert!(text.contains(miss) && text.contains(overrun), "{w}x{h}:\n{text}");
        }
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

    /// Hello revision 11: the board's certificate is a fourth header line.
    #[test]
    fn the_boards_certificate_is_a_header_line() {
        let mut l = fed(&[&[1_000; 50], &[900_000, 5_000]]);
        let mut t = Tracker::new();
        let h = Hello {
            certificate: Some(latmon_core::wire::WireCertificate {
                verdict: latmon_core::wire::CERT_PASS,
                duration_s: 60,
                made_at_unix: 1_796_601_600,
                shift_p999_ns: 800,
                ci95_lo_ns: -1_200,
                ci95_hi_ns: 2_900,
                ..Default::default()
            }),
            ..hello(&["p0", "p1"])
        };
        let ev = t.on_frame(Frame::Hello(h));
        l.on_event(&ev, &t, &LinkStats::default());
        let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
        term.draw(|f| draw(f, &l, Some(Duration::from_millis(200)), Instant::now(), "")).unwrap();
        let buf = term.backend().buffer().clone();
        let line3: String = (0..80).map(|x| buf[(x, 3)].symbol().to_string()).collect();
        assert_eq!(line3.trim_end(), "certified: p99.9 +0.8 us [-1.2, 2.9] (pass, 60 s, 2026-12-07)");
    }

    /// A loop as the agent lists it: watched with these counts (cycles
    /// and misses this interval, misses and overruns since start), or
    /// not watched (`None`: sporadic, SCHED_OTHER).
    fn a_loop(tid: u32, comm: &str, counts: Option<(u64, u64, u64, u64)>) -> Loop {
        use latmon_core::anatomy::Policy;
        use latmon_core::loops::{LoopClass, LoopCycles, PeriodSource};
        Loop {
            tid,
            pid: 410,
            comm: comm.into(),
            policy: if counts.is_some() { Policy::Fifo } else { Policy::Other },
            prio: if counts.is_some() { 80 } else { 0 },
            rt: counts.is_some(),
            class: if counts.is_some() { LoopClass::Periodic } else { LoopClass::Sporadic },
            period_ns: if counts.is_some() { 1_000_000 } else { 0 },
            period_source: if counts.is_some() { PeriodSource::AbsTimer } else { PeriodSource::None },
            jitter_ns: 0,
            watched: counts.is_some(),
            cycle: counts.map(|(cycles, misses, total_misses, total_overruns)| LoopCycles {
                period_ns: 1_000_000,
                cycles,
                total_cycles: cycles * 5,
                misses,
                total_misses,
                total_overruns,
                total_rules: 0,
            }),
        }
    }

    /// A cycle family and runq fed three intervals through the real
    /// encoder, decoder and tracker; the agent's Loops frames (before
    /// their summary, same seq and boot id) with the intervals in
    /// `listed`; no alert record at all.
    fn fed_loops(loops: &[Loop], unlisted: u32, listed: &[u64]) -> (Live, Tracker, Vec<Hist>) {
        let mut h = hello(&["cycle", "runq"]);
        h.probes[0].kind = "cycle".into();
        let mut t = Tracker::new();
        let mut live = Live::new("serial:x");
        let ev = t.on_frame(Frame::Hello(h));
        live.on_event(&ev, &t, &LinkStats::default());
        let mut hs = vec![Hist::default(); 2];
        for seq in 1..=3 {
            feed_interval(&mut live, &mut t, &mut hs, seq, listed.contains(&seq).then_some((loops, unlisted)));
        }
        (live, t, hs)
    }

    fn feed_interval(live: &mut Live, t: &mut Tracker, hs: &mut [Hist], seq: u64, loops: Option<(&[Loop], u32)>) {
        for h in hs.iter_mut() {
            h.record(900_000);
        }
        let time_ns = seq * 1_000_000_000;
        let mut bytes = Vec::new();
        let mut enc = Encoder::new();
        if let Some((l, unlisted)) = loops {
            enc.loops((7, seq, time_ns), l, (unlisted, 0), &mut |f| bytes.extend_from_slice(f)).unwrap();
        }
        enc.summary(SummaryHeader { seq, boot_id: 7, time_ns, last: false }, hs, &mut |f| bytes.extend_from_slice(f))
            .unwrap();
        FrameDecoder::new().feed(&bytes, &mut |r| {
            let ev = t.on_frame(r.unwrap());
            live.on_event(&ev, t, &LinkStats::default());
        });
    }

    /// The screen's text and each cell's style, at `w`x`h`.
    fn screen(l: &Live, w: u16, h: u16) -> (Vec<String>, ratatui::buffer::Buffer) {
        let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, l, Some(Duration::from_millis(200)), Instant::now(), "")).unwrap();
        let buf = term.backend().buffer().clone();
        let text = (0..h).map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>()).collect();
        (text, buf)
    }

    /// Issue 42 item 3: the loops block comes first, with the agent's own
    /// counts (3 misses this interval, 12 since start) where no miss
    /// record crossed the link; a hostile name escaped; the loop that
    /// missed stands out; a later summary without its Loops frame keeps
    /// the listing and dates it.
    #[test]
    fn the_loops_block_leads_with_the_agents_counts_and_escapes_names() {
        let loops = [
            a_loop(412, "ctl_loop", Some((1_000, 3, 12, 1))),
            a_loop(415, "ev\x1b[2J\nx", None),
            a_loop(420, "io_loop", Some((250, 0, 0, 0))),
        ];
        let (mut l, mut t, mut hs) = fed_loops(&loops, 0, &[1, 2, 3]);
        assert_eq!(l.alerts_seen, 0, "no record crossed the link");
        assert_eq!((l.loops.len(), l.loops_seq), (3, 3));
        let (text, buf) = screen(&l, 80, 24);
        let all = text.join("\n");
        let row = |needle: &str| {
            text.iter().position(|r| r.contains(needle)).unwrap_or_else(|| panic!("no {needle:?}:\n{all}"))
        };
        assert_eq!(row(" loops: 2 periodic, 1 sporadic (the agent's counts) ─"), 3, "right under the header:\n{all}");
        assert!(row("MISS/TOTAL") < row("PROBE"), "the loops first:\n{all}");
        let ctl = &text[row("ctl_loop")];
        assert_eq!(
            ctl.trim_end(),
            " ctl_loop              412 fifo 80    1.00ms abs_timer   1000       3/12       1",
            "{all}"
        );
        assert!(text[row("io_loop")].contains("  250        0/0       0"), "{all}");
        assert!(text[row("sporadic  ")].contains(" ev\\u{1b}[2J\\u{a}x "), "escaped: {all}");
        assert!(!all.contains('\x1b'), "{all:?}");
        // The miss of this interval stands out; the quiet loop does not.
        let style = |y: usize| buf[(2, y as u16)].modifier;
        assert!(style(row("ctl_loop")).contains(Modifier::BOLD | Modifier::REVERSED), "{:?}", style(row("ctl_loop")));
        assert!(!style(row("io_loop")).contains(Modifier::BOLD));
        assert!(!all.contains("as of seq"), "{all}");
        // Interval 4's Loops frame lost: the listing of seq 3 stays, dated.
        feed_interval(&mut l, &mut t, &mut hs, 4, None);
        assert_eq!(l.header.seq, 4);
        let all = screen(&l, 80, 24).0.join("\n");
        assert!(all.contains("loops as of seq 3") && all.contains("3/12"), "{all}");
    }

    /// Many loops: the block stays within a third of the body, the loops
    /// that missed first, the rest counted (with those the agent did not
    /// list); every family line still on the screen.
    #[test]
    fn many_loops_are_bounded_and_the_ones_that_missed_come_first() {
        let mut loops: Vec<Loop> =
            (0..20).map(|i| a_loop(500 + i, &format!("quiet{i}"), Some((1_000, 0, 0, 0)))).collect();
        loops.push(a_loop(900, "late_missed", Some((1_000, 0, 7, 2))));
        let (l, _, _) = fed_loops(&loops, 5, &[3]);
        let (lines, more) = l.loop_lines(4);
        assert_eq!(lines.iter().map(|l| l.tid).collect::<Vec<_>>(), [900, 500, 501], "the missed loop first");
        assert_eq!(more, 21 - 3 + 5);
        let (text, buf) = screen(&l, 80, 24);
        let all = text.join("\n");
        let row = |needle: &str| {
            text.iter().position(|r| r.contains(needle)).unwrap_or_else(|| panic!("no {needle:?}:\n{all}"))
        };
        assert!(row("PROBE") <= 3 + 20 / 3 + 1, "the loops block within a third of the body:\n{all}");
        assert!(text[row("late_missed")].contains("0/7       2"), "{all}");
        assert!(buf[(2, row("late_missed") as u16)].modifier.contains(Modifier::BOLD));
        assert!(all.contains("+23 more loops (5 past the agent's list bound)"), "{all}");
        for fam in ["cycle ", "runq "] {
            assert!(all.contains(fam), "{fam:?}:\n{all}");
        }
        // No loops listed: no block.
        let (none, _, _) = fed_loops(&[], 0, &[]);
        assert!(!screen(&none, 80, 24).0.join("\n").contains("loops:"));
    }
}
