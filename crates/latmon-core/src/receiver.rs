// SPDX-License-Identifier: MIT
//! The receiver's model, the technician's side of a link: `latmon view` (a
//! live terminal screen) and `latmon decode` (JSON lines). Rendering and
//! JSON shaping are pure functions with unit tests; `run_view` /
//! `run_decode` are the loops, over a [`ByteSource`] and a writer the
//! binary passes in (src/board_view/source.rs on the board,
//! crates/latmon-view/src/source.rs on a laptop).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::summary::{IntervalReport, Named, ProbeReport};
use crate::table::{SortBy, Table};
use crate::text::fmt_ns;
use crate::wire::{Event, FrameDecoder, FrameError, Hello, LinkStats, Status, Tracker};

// ------------------------------------------------------------------ sources

/// What one read of a [`ByteSource`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Got {
    /// Bytes in the buffer.
    Data(usize),
    /// Nothing within the source's read wait (or reconnecting).
    Idle,
    /// A new stream began (reconnected): restart the frame decoder.
    Restart,
    /// The source ended (end of file, connection closed without `follow`).
    End,
}

/// Bytes from the other end of a link (a SOURCE word opened by the binary).
pub trait ByteSource {
    /// The source as the screen names it.
    fn name(&self) -> &str;
    /// Wait a bounded time (a fraction of a second) for bytes.
    fn read(&mut self, buf: &mut [u8]) -> Got;
}

// ------------------------------------------------------------------ decode

#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    #[serde(rename = "type")]
    ty: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Serialize)]
struct SummaryLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    boot_id: u32,
    /// From a keyframe (cumulative) or a delta frame.
    keyframe: bool,
    /// Wire bucket merge (0: full resolution).
    merge: u8,
    /// Probes whose totals here are lower bounds (a delta was lost; exact
    /// again at their next keyframe).
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    inexact: &'a [String],
    #[serde(flatten)]
    report: &'a IntervalReport,
}

#[derive(Serialize)]
struct LostLine {
    #[serde(rename = "type")]
    ty: &'static str,
    /// The last summary received before the loss, and the one the next
    /// summary built on: the intervals after the first through the second
    /// are lost (their counts are in the next keyframes).
    after_seq: u64,
    through_seq: u64,
}

#[derive(Serialize)]
struct BadLine<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    reason: &'static str,
    error: &'a str,
}

/// A Loops frame: its listing goes out with the interval's summary
/// line (`loops`, as the agent's JSON), this line says it arrived.
#[derive(Serialize)]
struct LoopsLine {
    #[serde(rename = "type")]
    ty: &'static str,
    boot_id: u32,
    seq: u64,
    /// The last part of the interval's listing.
    complete: bool,
}

#[derive(Serialize)]
struct UnknownLine {
    #[serde(rename = "type")]
    ty: &'static str,
    kind: u8,
}

/// One JSON line (no newline) for a decoded frame or a discarded
/// fragment. Summaries carry the field names of `latmon run --format json`
/// plus `type` and `boot_id`.
pub fn json_line(r: &Result<Event, FrameError>) -> String {
    let res = match r {
        Ok(Event::Hello(h)) => crate::json::to_string(&Tagged::<Hello> { ty: "hello", body: h }),
        Ok(Event::Summary { boot_id, report, ids, keyframe, merge, inexact }) => {
            let names: Vec<String> = ids
                .iter()
                .zip(&report.probes)
                .filter(|(id, _)| inexact.contains(id))
                .map(|(_, p)| p.name.clone())
                .collect();
            crate::json::to_string(&SummaryLine {
                ty: "summary",
                boot_id: *boot_id,
                keyframe: *keyframe,
                merge: *merge,
                inexact: &names,
                report,
            })
        }
        Ok(Event::Request(r)) => crate::json::to_string(&Tagged::<crate::wire::Request> { ty: "request", body: r }),
        Ok(Event::Alert(a)) => crate::json::to_string(&Tagged::<Named> { ty: "alert", body: &a.named() }),
        Ok(Event::Status(s)) => crate::json::to_string(&Tagged::<Status> { ty: "status", body: s }),
        Ok(Event::Loops { boot_id, seq, complete }) => {
            crate::json::to_string(&LoopsLine { ty: "loops", boot_id: *boot_id, seq: *seq, complete: *complete })
        }
        Ok(Event::Unknown { kind }) => crate::json::to_string(&UnknownLine { ty: "unknown", kind: *kind }),
        Err(e) => crate::json::to_string(&BadLine { ty: "bad_frame", reason: e.reason(), error: &e.to_string() }),
    };
    res.unwrap_or_else(|e| format!("{{\"type\":\"error\",\"error\":{:?}}}", e.to_string()))
}

/// One line of link statistics for stderr.
pub fn link_line(s: &LinkStats, t: &Tracker) -> String {
    format!(
        "link: {} bytes, {} frames good, {} CRC errors, {} resyncs, {} other errors, {} unknown kinds, {} summaries lost, {} summaries ({} deltas), {} probes with inexact totals{}{}",
        s.bytes,
        s.frames_good,
        s.crc_errors,
        s.resyncs,
        s.errors() - s.crc_errors,
        s.unknown_kinds,
        t.summaries_lost,
        t.summaries,
        t.deltas,
        t.inexact_probes(),
        if t.seq_jumps > 0 { format!(", {} seq jumps", t.seq_jumps) } else { String::new() },
        budget_words(t).map_or(String::new(), |w| format!(", {w}"))
    ) + &match dropped_words(t) {
        w if w.is_empty() => w,
        w => format!(", {w}"),
    } + &ignored_line(t)
}

/// " (name n, name n, ...)": at most 8 probes, then "...".
fn per_probe(w: &mut String, t: &Tracker, counts: impl Iterator<Item = (u16, u64)>) {
    let mut sep = " (";
    for (k, (id, n)) in counts.enumerate() {
        if k == 8 {
            w.push_str(", ...");
            break;
        }
        let _ = write!(w, "{sep}{} {n}", shown(&t.probe_name(id)));
        sep = ", ";
    }
    if sep == ", " {
        w.push(')');
    }
}

/// Alert records the sender counted but lost before any output (its token
/// bucket, kernel buffer or queue), per probe from the last Status; empty
/// when none.
pub fn dropped_words(t: &Tracker) -> String {
    let total: u64 = t.dropped_probes().map(|(_, n)| n).sum();
    if total == 0 {
        return String::new();
    }
    let mut w = format!("{total} alert records dropped before any output");
    per_probe(&mut w, t, t.dropped_probes());
    w
}

/// What the receiver set aside (only when something was), for the link
/// line: probe entries with ids beyond MAX_PROBES, of another bucket
/// scheme, or split entries whose other parts were lost.
fn ignored_line(t: &Tracker) -> String {
    let mut s = String::new();
    for (n, what) in [
        (t.ignored_entries, "entries with ids >= 1024 ignored"),
        (t.scheme_mismatch, "entries of another bucket scheme skipped"),
        (t.partial_dropped, "split entries incomplete"),
    ] {
        if n > 0 {
            let _ = write!(s, ", {n} {what}");
        }
    }
    s
}

/// The link's budget, use and degradation step from the last Status, in
/// words (None: an unlimited output or no Status yet).
pub fn budget_words(t: &Tracker) -> Option<String> {
    let l = t.status.as_ref()?.link;
    if l.budget_bps == 0 {
        return None;
    }
    let step = crate::wire::Step::from_byte(l.step);
    let mut w = format!(
        "budget {} B/s, using {} B/s, keyframes every {:.0} s",
        l.budget_bps,
        l.used_bps,
        f64::from(l.keyframe_ms) / 1000.0
    );
    if step != crate::wire::Step::None {
        let _ = write!(
            w,
            ", DEGRADED step {} ({}): {} buckets per power of two, {} series rolled up, link interval {}",
            l.step,
            step.name(),
            8 >> l.merge.min(3),
            l.rolled,
            fmt_ns(u64::from(l.interval_ms) * 1_000_000)
        );
    }
    if l.alerts_shed > 0 {
        let _ = write!(w, ", {} alerts shed over their share", l.alerts_shed);
        // Per probe (the share is divided fairly; this says whose).
        per_probe(&mut w, t, t.shed_probes());
    }
    if l.intervals_folded > 0 {
        let _ = write!(w, ", {} intervals folded into the next", l.intervals_folded);
    }
    Some(w)
}

/// `latmon decode SOURCE`: a JSON line per frame on `stdout` until the
/// source ends (or `duration` passes); link statistics on `stderr`.
pub fn run_decode(
    src: &mut dyn ByteSource,
    duration: Option<Duration>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> io::Result<LinkStats> {
    let mut dec = FrameDecoder::new();
    let mut tracker = Tracker::new();
    let deadline = duration.map(|d| Instant::now() + d);
    let mut buf = vec![0u8; 8192];
    let mut lines = String::new();
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        match src.read(&mut buf) {
            Got::Data(n) => {
                dec.feed(&buf[..n], &mut |r| {
                    let lost_before = tracker.summaries_lost;
                    let ev = r.map(|f| tracker.on_frame(f));
                    if let (true, Some((after_seq, through_seq))) =
                        (tracker.summaries_lost > lost_before, tracker.last_lost)
                    {
                        let l = LostLine { ty: "lost", after_seq, through_seq };
                        lines.push_str(&crate::json::to_string(&l).unwrap_or_default());
                        lines.push('\n');
                    }
                    lines.push_str(&json_line(&ev));
                    lines.push('\n');
                });
                if !lines.is_empty() {
                    if stdout.write_all(lines.as_bytes()).and_then(|()| stdout.flush()).is_err() {
                        break; // reader went away
                    }
                    lines.clear();
                }
            }
            Got::Idle => {}
            Got::Restart => dec.restart(),
            Got::End => break,
        }
    }
    let _ = writeln!(stderr, "latmon: {}", link_line(&dec.stats, &tracker));
    Ok(dec.stats)
}

// -------------------------------------------------------------------- view

/// A string from the wire as the screen shows it: printable ASCII as is,
/// anything else (ESC and every other control character, DEL, C1 codes,
/// Unicode bidi and format characters, any non-ASCII) as `\u{XX}`. A
/// sender must not be able to retitle, recolour or rewrite the
/// technician's terminal, or draw fake lines with a newline.
pub fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if (' '..='~').contains(&c) {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Alerts kept on screen.
const ALERTS_SHOWN: usize = 8;
/// Columns of an alert or anatomy line on the screen: an alert line with
/// a 12-column probe name and a kernel comm (16 bytes) takes about 100;
/// longer names (a sender's choice, up to 64 bytes each) are cut, ending
/// in `~`. (The plain view may write to a pipe: it has no terminal size.)
pub const ALERT_WIDTH: usize = 120;

/// What the live view shows: the latest interval per probe, recent alerts.
#[derive(Default)]
pub struct View {
    /// Latest interval report per probe, by probe id (position in Hello).
    latest: Vec<Option<ProbeReport>>,
    pub alerts: VecDeque<crate::wire::ReceivedAlert>,
    pub alerts_seen: u64,
    pub seq: u64,
    pub time_ns: u64,
    pub interval_ns: u64,
    pub last: bool,
    /// The agent's loops as of the summary of `loops_seq` (Loops frames,
    /// revision 12): kept when a later summary comes without them (a
    /// lost Loops frame), and said to be older.
    pub loops: Vec<crate::loops::Loop>,
    pub loops_unlisted: u32,
    pub loops_seq: u64,
    /// The table's working memory (kept between screens).
    table: Table,
    /// The terminal's columns and rows, when the screen goes to one: the
    /// table then shows as many series per family as keep every family
    /// line on the screen, and every line is cut to its width.
    pub size: Option<(u16, u16)>,
}

impl View {
    pub fn on_event(&mut self, ev: &Event) {
        match ev {
            Event::Summary { report, ids, .. } => {
                self.seq = report.seq;
                self.time_ns = report.time_ns;
                if report.interval_ns > 0 {
                    self.interval_ns = report.interval_ns;
                }
                self.last = report.last;
                if !report.loops.is_empty() || report.loops_unlisted > 0 {
                    self.loops.clone_from(&report.loops);
                    self.loops_unlisted = report.loops_unlisted;
                    self.loops_seq = report.seq;
                }
                for (p, &id) in report.probes.iter().zip(ids) {
                    let id = id as usize; // < wire::MAX_PROBES
                    if self.latest.len() <= id {
                        self.latest.resize(id + 1, None);
                    }
                    self.latest[id] = Some(p.clone());
                }
            }
            Event::Alert(a) => {
                self.alerts_seen += 1;
                self.alerts.push_front(a.clone());
                self.alerts.truncate(ALERTS_SHOWN);
            }
            _ => {}
        }
    }

    /// The screen as text (ASCII, for any terminal).
    pub fn render(&mut self, source: &str, link: &LinkStats, t: &Tracker, since_frame: Option<Duration>) -> String {
        let mut s = String::new();
        let _ = write!(s, "latmon view  {source}");
        if let Some(h) = &t.hello {
            let board = if h.board.is_empty() { "-" } else { &h.board };
            let _ = write!(
                s,
                "   board {}  kernel {}  latmon {}",
                shown(board),
                shown(&h.kernel),
                shown(&h.latmon_version)
            );
        }
        s.push('\n');
        match &t.hello {
            Some(h) => {
                let up = self.time_ns.saturating_sub(h.start_ns);
                let _ = writeln!(
                    s,
                    "agent up {}  interval {}  seq {}{}  boot {:08x}",
                    fmt_ns(up),
                    fmt_ns(h.interval_ns),
                    self.seq,
                    if self.last { " (final)" } else { "" },
                    h.boot_id
                );
                // Revision 11: the board's observer-effect certificate
                // (numbers only: nothing of the board's to escape).
                if let Some(c) = &h.certificate {
                    let _ = writeln!(s, "{}", c.line());
                }
            }
            None => {
                let _ = writeln!(s, "waiting for Hello (probe names); seq {}", self.seq);
            }
        }
        let ago = since_frame.map_or("never".to_string(), |d| format!("{:.1}s ago", d.as_secs_f64()));
        let (agent_drops, clients) = t.status.as_ref().map_or((0, 0), |st| (st.frames_dropped, st.clients));
        let _ = writeln!(
            s,
            "link  frames ok {}  CRC errors {}  resyncs {}  other errors {}  summaries lost {}{}  last frame {ago}  agent drops {agent_drops}{}{}",
            link.frames_good,
            link.crc_errors,
            link.resyncs,
            link.errors() - link.crc_errors,
            t.summaries_lost,
            if t.seq_jumps > 0 { format!("  seq jumps {}", t.seq_jumps) } else { String::new() },
            if clients > 0 { format!("  clients {clients}") } else { String::new() },
            if t.restarts > 0 { format!("  agent restarts {}", t.restarts) } else { String::new() }
        );
        if let Some(w) = budget_words(t) {
            let _ = writeln!(s, "link  {w}");
        }
        let w = dropped_words(t);
        if !w.is_empty() {
            let _ = writeln!(s, "link  {w}");
        }
        if t.summaries_lost > 0 || t.inexact_probes() > 0 {
            let _ = writeln!(
                s,
                "link  deltas lost: {} runs{}; {} probes with totals behind until their next keyframe",
                t.summaries_lost,
                t.last_lost.map_or(String::new(), |(a, b)| format!(" (last: after seq {a} through {b})")),
                t.inexact_probes()
            );
        }
        if let Some(st) = &t.status {
            if st.flags & crate::wire::STATUS_COST_MEASURED != 0 {
                let _ = write!(s, "agent cost  BPF {:.3}% CPU", f64::from(st.bpf_cpu_ppm) / 10_000.0);
                if st.flags & crate::wire::STATUS_OVER_BUDGET != 0 {
                    s.push_str("  OVER BUDGET");
                }
                if st.flags & crate::wire::STATUS_DEGRADED != 0 {
                    let names: Vec<String> =
                        st.detached.iter().map(|&id| shown(&t.probe_name(id)).into_owned()).collect();
                    let _ = write!(s, "  DEGRADED: detached over budget: {}", names.join(", "));
                }
                s.push('\n');
            }
        }
        let _ = writeln!(s, "{}", "-".repeat(78));
        // The loops first, as `latmon run` prints them: the agent's own
        // counts (revision 12), not the records that crossed the link.
        crate::loops::render_into(&mut s, &self.loops, self.loops_unlisted);
        if !self.loops.is_empty() && self.loops_seq != self.seq {
            let _ = writeln!(s, "  (loops as of seq {}: a later listing was lost)", self.loops_seq);
        }
        // The table of `latmon run` (src/table.rs): a family's worst
        // series and the rest summed, not every series' histogram. Its
        // numbers cover the last interval the link delivered (more than
        // one after lost frames; since start for a late joiner). On a
        // terminal it fits the rows left under the header and above the
        // alerts' separator and head.
        match self.size {
            Some((_, rows)) => {
                let above = s.lines().count();
                let room = usize::from(rows).saturating_sub(above + 3);
                self.table.render_fit_into(&mut s, self.latest.as_slice(), self.interval_ns, SortBy::P99, room);
            }
            None => self.table.render_into(&mut s, self.latest.as_slice(), self.interval_ns, SortBy::P99),
        }
        // Kernel-skipped runs of the probes' programs (Status revision 2,
        // since start): the table's SKIP column has the agent's interval
        // counts only.
        if let Some(st) = t.status.as_ref().filter(|st| !st.missed.is_empty()) {
            s.push_str("MISSED since start (runs the kernel skipped):");
            for m in &st.missed {
                let _ = write!(s, " {} {}", shown(&t.probe_name(m.id)), m.missed);
            }
            s.push('\n');
        }
        let _ = writeln!(s, "{}", "-".repeat(78));
        let _ = writeln!(
            s,
            "alerts: {} received{}",
            self.alerts_seen,
            if self.alerts.is_empty() { "" } else { ", newest first" }
        );
        // Each line within ALERT_WIDTH, however long the names a sender
        // chose: `shown` and the anatomy write printable ASCII only, so a
        // byte cut is a character cut.
        let width = ALERT_WIDTH;
        for got in &self.alerts {
            let a = &got.record;
            let start = s.len();
            let _ = write!(
                s,
                "  {:>14.6}s  {:<12} pid {:<7} tid {:<7} {:<16} cpu {:<3} ",
                a.time_ns as f64 / 1e9,
                shown(&got.probe),
                a.pid,
                a.tid,
                shown(&a.comm),
                a.cpu,
            );
            // A cycle rule's record is a moment, not a latency (its line
            // below says which rule): "latency 0ns" read as a measurement.
            if a.is_rule() {
                s.push_str("rule broken");
            } else {
                let _ = write!(s, "latency {}", fmt_ns(a.latency_ns));
            }
            if s.len() - start > width {
                s.truncate(start + width - 1);
                s.push('~');
            }
            s.push('\n');
            // A cycle record's line as the agent prints it (`miss 1.62ms
            // of 1.00ms: running ...`), else the anatomy's.
            let at = s.len();
            s.push_str("    ");
            if crate::summary::render_detail_into(&mut s, got.named(), width - 4) {
                s.push('\n');
            } else {
                s.truncate(at);
            }
        }
        if let Some((cols, rows)) = self.size {
            s = fit_screen(&s, usize::from(cols), usize::from(rows));
        }
        s
    }
}

/// `screen` within `cols` x `rows`: each line cut to `cols - 1` columns
/// (`~` marking a cut; a terminal wraps a line that fills its last
/// column) and the lines past `rows - 1` left out (the last row stays
/// empty, so that the screen does not scroll). The screen is ASCII
/// (`shown` and the table write nothing else): a byte is a column.
pub fn fit_screen(screen: &str, cols: usize, rows: usize) -> String {
    let w = cols.saturating_sub(1).max(2);
    let mut out = String::with_capacity(screen.len());
    for line in screen.lines().take(rows.saturating_sub(1).max(1)) {
        if line.len() > w {
            out.push_str(line.get(..w - 1).unwrap_or(line));
            out.push('~');
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// `latmon view SOURCE`: redraws on every summary (at most 10 times a
/// second) and once a second while idle. Connections are re-established;
/// a file or stdin ends the view after drawing the last screen. `tty`:
/// `stdout` is a terminal (the screen is cleared before each draw);
/// `replay`: the source is a file or stdin (without a terminal, only the
/// last screen is drawn).
pub fn run_view(
    src: &mut dyn ByteSource,
    tty: bool,
    replay: bool,
    duration: Option<Duration>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> io::Result<()> {
    run_view_sized(src, tty, replay, duration, stdout, stderr, &|| None)
}

/// [`run_view`] on a terminal of the size `size` says (asked before each
/// screen: the terminal may be resized): see [`View::size`].
pub fn run_view_sized(
    src: &mut dyn ByteSource,
    tty: bool,
    replay: bool,
    duration: Option<Duration>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    size: &dyn Fn() -> Option<(u16, u16)>,
) -> io::Result<()> {
    let name = src.name().to_string();
    let mut dec = FrameDecoder::new();
    let mut tracker = Tracker::new();
    let mut view = View::default();
    // Files and stdin are replays: without a terminal, only the last screen.
    let replay = replay && !tty;
    let deadline = duration.map(|d| Instant::now() + d);
    let mut buf = vec![0u8; 8192];
    let mut last_frame: Option<Instant> = None;
    let mut last_draw: Option<Instant> = None;
    let mut dirty = true;
    let draw = |out: &mut dyn Write,
                view: &mut View,
                dec: &FrameDecoder,
                tracker: &Tracker,
                last_frame: Option<Instant>|
     -> io::Result<()> {
        view.size = if tty { size() } else { None };
        let screen = view.render(&name, &dec.stats, tracker, last_frame.map(|t| t.elapsed()));
        if tty {
            out.write_all(b"\x1b[H\x1b[2J")?;
            out.write_all(screen.replace('\n', "\r\n").as_bytes())?;
        } else {
            out.write_all(screen.as_bytes())?;
            out.write_all(b"\n")?;
        }
        out.flush()
    };
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        match src.read(&mut buf) {
            Got::Data(n) => {
                dec.feed(&buf[..n], &mut |r| {
                    if let Ok(f) = r {
                        last_frame = Some(Instant::now());
                        let ev = tracker.on_frame(f);
                        view.on_event(&ev);
                        dirty = true;
                    }
                });
            }
            Got::Idle => {}
            Got::Restart => dec.restart(),
            Got::End => break,
        }
        let since = last_draw.map(|t| t.elapsed());
        let min_gap = if tty { Duration::from_millis(100) } else { Duration::from_secs(1) };
        let due = since.is_none_or(|d| (dirty && d >= min_gap) || d >= Duration::from_secs(1));
        if due && !replay {
            if draw(stdout, &mut view, &dec, &tracker, last_frame).is_err() {
                return Ok(());
            }
            last_draw = Some(Instant::now());
            dirty = false;
        }
    }
    let _ = draw(stdout, &mut view, &dec, &tracker, last_frame);
    let _ = writeln!(stderr, "latmon: {}", link_line(&dec.stats, &tracker));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::Hist;
    use crate::wire::{Alert, BucketScheme, Frame, ProbeDesc};

    fn hello() -> Hello {
        Hello {
            protocol_revision: 0,
            latmon_version: "0.1.0".into(),
            board: "arm1".into(),
            kernel: "6.18".into(),
            boot_id: 7,
            start_ns: 1_000,
            interval_ns: 1_000_000_000,
            probe_count: 1,
            probes: vec![ProbeDesc {
                id: 0,
                name: "runq".into(),
                kind: "runq".into(),
                attach: "tp_btf".into(),
                mode: String::new(),
                scheme: BucketScheme::LATMON,
            }],
            thresholds: Vec::new(),
            certificate: None,
        }
    }

    fn summary_event(t: &mut Tracker, seq: u64, values: &[u64], prev: &mut Hist) -> Event {
        for &v in values {
            prev.record(v);
        }
        let mut enc = crate::wire::Encoder::new();
        let mut frames = Vec::new();
        enc.summary(
            crate::wire::SummaryHeader { seq, boot_id: 7, time_ns: 1_000 + seq * 1_000_000_000, last: false },
            std::slice::from_ref(prev),
            &mut |f| frames.push(f.to_vec()),
        )
        .unwrap();
        let mut d = FrameDecoder::new();
        let mut ev = None;
        d.feed(&frames.concat(), &mut |r| ev = Some(t.on_frame(r.unwrap())));
        ev.unwrap()
    }

    /// The board's plain view on a terminal under load: every family line
    /// (and the waits line) on the screen at 80x24 and 100x30, no line
    /// wider than the terminal, the screen never taller.
    #[test]
    fn a_terminal_screen_keeps_every_family_line() {
        let mut names: Vec<(String, &str, &str)> = vec![
            ("runq".into(), "runq", ""),
            ("syscall".into(), "syscall", ""),
            ("irq".into(), "irq", ""),
            ("syscall:waits".into(), "syscall", crate::wire::WAITS_MODE_PREFIX),
        ];
        for i in 0..20 {
            names.push((format!("syscall:s{i}"), "syscall", ""));
            names.push((format!("syscall:w{i}"), "syscall", crate::wire::WAIT_MODE_PREFIX));
            names.push((format!("irq:{i} a-rather-long-irq-action-name"), "irq", ""));
        }
        let mut h = hello();
        h.probes = names
            .iter()
            .enumerate()
            .map(|(i, (n, k, m))| ProbeDesc {
                id: i as u16,
                name: n.clone(),
                kind: (*k).into(),
                attach: "tp_btf".into(),
                mode: (*m).into(),
                scheme: BucketScheme::LATMON,
            })
            .collect();
        h.probe_count = names.len() as u16;
        // Revision 11: the certificate's header line fits too.
        h.certificate = Some(crate::wire::WireCertificate {
            verdict: crate::wire::CERT_PASS,
            duration_s: 60,
            made_at_unix: 1_796_601_600,
            shift_p999_ns: 800,
            ci95_lo_ns: -1_200,
            ci95_hi_ns: 2_900,
            ..Default::default()
        });
        let mut t = Tracker::new();
        let mut v = View::default();
        v.on_event(&t.on_frame(Frame::Hello(h)));
        let hs: Vec<Hist> = (0..names.len() as u64)
            .map(|i| {
                let mut h = Hist::default();
                h.record(1_000 + i * 1_000);
                h
            })
            .collect();
        let mut bytes = Vec::new();
        crate::wire::Encoder::new()
            .summary(
                crate::wire::SummaryHeader { seq: 1, boot_id: 7, time_ns: 2_000_000_000, last: false },
                &hs,
                &mut |f| bytes.extend_from_slice(f),
            )
            .unwrap();
        FrameDecoder::new().feed(&bytes, &mut |r| v.on_event(&t.on_frame(r.unwrap())));
        for a in 0..12 {
            v.on_event(&Event::Alert(crate::wire::ReceivedAlert {
                probe: "syscall:s3".into(),
                record: crate::summary::AlertRecord {
                    id: crate::ident::ProbeId::NONE,
                    pid: a,
                    tid: a,
                    comm: "ctrl".into(),
                    cpu: 0,
                    latency_ns: 9_000_000,
                    time_ns: 5,
                    anatomy: None,
                    cycle: None,
                },
            }));
        }
        let link = LinkStats::default();
        for (cols, rows) in [(80u16, 24u16), (100, 30)] {
            v.size = Some((cols, rows));
            let screen = v.render("tcp://board:7777", &link, &t, Some(Duration::from_millis(100)));
            assert!(screen.lines().count() < usize::from(rows), "{cols}x{rows}:\n{screen}");
            assert!(screen.lines().all(|l| l.len() < usize::from(cols)), "{cols}x{rows}:\n{screen}");
            assert!(
                screen.lines().any(|l| l == "certified: p99.9 +0.8 us [-1.2, 2.9] (pass, 60 s, 2026-12-07)"),
                "{screen}"
            );
            let firsts: Vec<&str> = screen.lines().filter_map(|l| l.split(' ').next()).collect();
            for fam in ["runq", "syscall", "syscall:waits", "irq"] {
                assert!(firsts.contains(&fam), "{fam} at {cols}x{rows}:\n{screen}");
            }
            let after = |head: &str| {
                let ls: Vec<&str> = screen.lines().collect();
                let at = ls.iter().position(|l| l.split(' ').next() == Some(head)).unwrap();
                ls[at + 1].split_whitespace().next().unwrap_or("").to_string()
            };
            assert_eq!((after("syscall"), after("syscall:waits")), ("s19".into(), "w19".into()), "{screen}");
        }
        // Without a terminal, the whole table (ten series per family).
        v.size = None;
        let screen = v.render("tcp://board:7777", &link, &t, None);
        assert_eq!(screen.matches("more series").count(), 3, "{screen}");
        assert!(screen.lines().count() > 40);
    }

    #[test]
    fn screen_shows_percentiles_bars_link_and_alerts() {
        let mut t = Tracker::new();
        let mut v = View::default();
        let ev = t.on_frame(Frame::Hello(hello()));
        v.on_event(&ev);
        let mut h = Hist::default();
        summary_event(&mut t, 1, &[1_000, 2_000], &mut h);
        let ev = summary_event(&mut t, 2, &[3_000, 3_100, 3_200, 900_000], &mut h);
        v.on_event(&ev);
        let ev = t.on_frame(Frame::Alert(Alert {
            boot_id: 7,
            probe: 0,
            pid: 42,
            tid: 43,
            comm: "ctrl_loop".into(),
            cpu: 1,
            latency_ns: 900_000,
            time_ns: 5,
            cpu_woken: 1,
            cpu_ran: 1,
            causes: vec![
                crate::wire::WireCause { kind: 1, id: 4242, policy: 1, prio: 90, name: "hog".into(), ns: 860_000 },
                crate::wire::WireCause { kind: 7, id: 0, policy: 0, prio: 0, name: String::new(), ns: 40_000 },
            ],
            ..Default::default()
        }));
        v.on_event(&ev);
        let link = LinkStats { frames_good: 4, crc_errors: 2, resyncs: 3, ..LinkStats::default() };
        let s = v.render("serial:/dev/ttyUSB0@115200", &link, &t, Some(Duration::from_millis(300)));
        assert!(!s.contains("MISSED"), "{s}");
        assert!(s.contains("\n    late 900 us: hog[4242] FIFO/90 860 us, other 40 us\n"), "{s}");
        let ev = t.on_frame(Frame::Status(crate::wire::Status {
            boot_id: 7,
            time_ns: 0,
            seq: 2,
            uptime_ns: 0,
            frames_dropped: 0,
            bytes_dropped: 0,
            clients: 0,
            probes: Vec::new(),
            flags: 0,
            bpf_cpu_ppm: 0,
            detached: Vec::new(),
            missed: vec![crate::wire::ProbeMissed { id: 0, missed: 92 }],
            link: Default::default(),
            shed: Vec::new(),
            dropped: Vec::new(),
        }));
        v.on_event(&ev);
        let s = v.render("serial:/dev/ttyUSB0@115200", &link, &t, Some(Duration::from_millis(300)));
        assert!(s.contains("\nMISSED since start (runs the kernel skipped): runq 92\n"), "{s}");
        // The table of `latmon run`: 4 events in the last 1 s interval.
        let row = s.lines().find(|l| l.starts_with("runq ")).unwrap_or_else(|| panic!("{s}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[..3], ["runq", "tp_btf", "4"], "{s}");
        assert!(cols.len() == 10 && cols[6].ends_with("us"), "max: {s}");
        for needle in [
            "board arm1",
            "P99.9",
            "frames ok 4  CRC errors 2  resyncs 3",
            "last frame 0.3s ago",
            "ctrl_loop",
            "latency 900.00us",
            "seq 2",
        ] {
            assert!(s.contains(needle), "{needle:?} missing in\n{s}");
        }
        assert!(s.is_ascii());
    }

    /// A cycle rule's record is a moment: its line says `rule broken` and
    /// which rule, never `latency 0ns` (seen on the screen of a cycle
    /// probe watching lm_cycle's fdatasync).
    #[test]
    fn a_rule_record_says_rule_broken_not_a_zero_latency() {
        let mut t = Tracker::new();
        let mut v = View::default();
        v.on_event(&t.on_frame(Frame::Hello(hello())));
        let mut a = alert_of("ctrl_loop");
        a.latency_ns = 0;
        a.cycle = crate::wire::WireCycle {
            event: crate::wire::cycle::event::RULE,
            doing_id: 1,
            doing_name: "fdatasync".into(),
            ..Default::default()
        };
        v.on_event(&t.on_frame(Frame::Alert(a)));
        let s = v.render("file:c.bin", &LinkStats::default(), &t, None);
        assert!(s.contains("ctrl_loop        cpu 0   rule broken\n    rule sleep_other in fdatasync\n"), "{s}");
        assert!(!s.contains("latency 0ns"), "{s}");
    }

    /// The screen leads with the agent's loops and their since-start
    /// misses (12, not the 0 miss records that crossed the link), a
    /// hostile loop name escaped; a later summary whose Loops frame was
    /// lost keeps the listing and says how old it is.
    #[test]
    fn the_view_leads_with_the_agents_loops_and_their_own_counts() {
        let mut t = Tracker::new();
        let mut v = View::default();
        v.on_event(&t.on_frame(Frame::Hello(hello())));
        let mut l = crate::wire::tests::golden_loops();
        (l.boot_id, l.seq) = (7, 1);
        l.loops[1].comm = "evil[2J
x"
        .into();
        v.on_event(&t.on_frame(Frame::Loops(l)));
        let mut hist = Hist::default();
        v.on_event(&summary_event(&mut t, 1, &[1_000, 2_000], &mut hist));
        let s = v.render("tcp://x", &LinkStats::default(), &t, None);
        let at = |needle: &str| s.find(needle).unwrap_or_else(|| panic!("no {needle:?} in\n{s}"));
        assert!(at("loops: 1 periodic, 1 sporadic") < at("NAME   "), "{s}");
        assert!(s.contains("ctl_loop            412 fifo 80    1.00ms abs_timer 1000 cyc 3/12 miss\n"), "{s}");
        assert!(s.contains("evil?[2J?x"), "{s}");
        assert!(s.chars().all(|c| c == '\n' || (' '..='~').contains(&c)), "{s:?}");
        assert!(!s.contains("as of seq"), "{s}");
        v.on_event(&summary_event(&mut t, 2, &[1_000], &mut hist));
        let s = v.render("tcp://x", &LinkStats::default(), &t, None);
        assert!(s.contains("3/12 miss") && s.contains("(loops as of seq 1: a later listing was lost)"), "{s}");
    }

    /// An alert of probe 0 about task 1 named `comm`, without anatomy.
    fn alert_of(comm: &str) -> Alert {
        Alert {
            boot_id: 7,
            probe: 0,
            pid: 1,
            tid: 1,
            comm: comm.into(),
            cpu: 0,
            latency_ns: 5,
            time_ns: 5,
            cpu_woken: 0,
            cpu_ran: 0,
            causes: vec![],
            ..Default::default()
        }
    }

    /// Wire strings (board, kernel, probe names, kind, attach, comm) reach
    /// the terminal with no control character: no ESC, BEL, CR, C1 CSI,
    /// newline of their own or bidi override.
    #[test]
    fn escape_sequences_from_the_wire_never_reach_the_terminal() {
        let evil = "\x1b]0;pwned\x07\x1b[31mred\r\nfake line\u{9b}2J\u{202e}\x7f";
        let mut t = Tracker::new();
        let mut v = View::default();
        let mut h = hello();
        h.board = evil.into();
        h.kernel = evil.into();
        h.latmon_version = evil.into();
        h.probes[0].name = evil.into();
        h.probes[0].kind = evil.into();
        h.probes[0].attach = evil.into();
        v.on_event(&t.on_frame(Frame::Hello(h)));
        let mut hist = Hist::default();
        v.on_event(&summary_event(&mut t, 1, &[1_000, 2_000], &mut hist));
        v.on_event(&t.on_frame(Frame::Alert(alert_of(evil))));
        let s = v.render("tcp://x", &LinkStats::default(), &t, None);
        assert!(
            s.chars().all(|c| c == '\n' || (' '..='~').contains(&c)),
            "raw control or non-ASCII characters in\n{s:?}"
        );
        assert!(s.contains("\\u{1b}]0;pwned\\u{7}"), "shown escaped: {s}");
        assert!(!s.lines().any(|l| l.starts_with("fake line")), "a wire newline starts no line of its own");
        assert_eq!(shown("ctrl_loop"), "ctrl_loop");
    }

    /// `view --plain`: alert and anatomy lines fit ALERT_WIDTH whatever
    /// the names (a 1 058-column line before).
    #[test]
    fn alert_and_anatomy_lines_fit_the_width_with_long_names() {
        use crate::anatomy::{Anatomy, Cause, CauseKind, Policy};
        let long = "n".repeat(400);
        let mut t = Tracker::new();
        let mut v = View::default();
        let mut h = hello();
        h.probes[0].name = long.clone();
        v.on_event(&t.on_frame(Frame::Hello(h)));
        let mut hist = Hist::default();
        v.on_event(&summary_event(&mut t, 1, &[1_000, 2_000], &mut hist));
        let task = |i: u32| Cause {
            kind: CauseKind::Task { comm: format!("{long}{i}"), pid: i, policy: Policy::Fifo, prio: 50 },
            ns: 100,
        };
        let an = Anatomy { cpu_woken: 0, cpu_ran: 1, causes: (0..8).map(task).collect() };
        let causes = crate::wire::anatomy::to_wire(&an);
        v.on_event(&t.on_frame(Frame::Alert(Alert { latency_ns: 800, cpu_ran: 1, causes, ..alert_of(&long) })));
        let s = v.render("tcp://x", &LinkStats::default(), &t, None);
        let alert = s.lines().position(|l| l.starts_with("alerts: ")).unwrap();
        let lines: Vec<&str> = s.lines().skip(alert + 1).collect();
        assert_eq!(lines.len(), 2, "the alert and its anatomy: {s}");
        for l in lines {
            assert!(l.len() <= ALERT_WIDTH, "{} columns: {l}", l.len());
        }
    }

    /// `latmon view`: a cycle record received over a link shows as the
    /// agent's text output shows it (the same second line), its names
    /// cut to ALERT_WIDTH as every alert line.
    #[test]
    fn cycle_records_show_as_the_agent_prints_them() {
        let mut t = Tracker::new();
        let mut v = View::default();
        v.on_event(&t.on_frame(Frame::Hello(hello())));
        for a in [crate::wire::tests::golden_cycle_alert(), crate::wire::tests::golden_overrun_alert()] {
            v.on_event(&t.on_frame(Frame::Alert(Alert { boot_id: 7, probe: 0, ..a })));
        }
        let s = v.render("tcp://x", &LinkStats::default(), &t, None);
        // The agent's text for the same records (summary.rs).
        // Row 0 named as the Hello names probe 0, the records' id.
        let report = crate::summary::IntervalReport {
            probes: vec![crate::summary::ProbeReport {
                name: v.alerts[0].probe.clone(),
                ..crate::summary::ProbeReport::empty()
            }],
            alert_records: v.alerts.iter().map(|a| a.record.clone()).collect(),
            ..Default::default()
        };
        let mut agent = String::new();
        crate::summary::render_alerts_into(&mut agent, &report, 8, ALERT_WIDTH);
        let details = |text: &str| -> Vec<String> {
            text.lines().filter(|l| l.starts_with("    ") && !l.starts_with("     ")).map(String::from).collect()
        };
        assert_eq!(
            details(&s),
            [
                "    overrun 1.00ms of 1.00ms, runnable behind hog[4242], 1 migrations",
                "    miss 1.62ms of 1.00ms: running 1500 us, blocked on io in fdatasync 60 us, 7 page faults, other 60 us",
            ],
            "{s}"
        );
        assert_eq!(details(&s), details(&agent), "{agent}");
    }

    /// `decode`'s JSON lines: a comm holding C1 (CSI, OSC), DEL or a bidi
    /// override is written escaped (`\u009b`), and reads back the same.
    #[test]
    fn json_lines_escape_what_a_terminal_would_obey() {
        let evil = "x\u{9b}2J\u{9d}0;t\u{7}\u{7f}\u{202e}gol\u{2066}";
        let mut t = Tracker::new();
        let mut h = hello();
        h.board = evil.into();
        let hello_line = json_line(&Ok(t.on_frame(Frame::Hello(h))));
        let alert_line = json_line(&Ok(t.on_frame(Frame::Alert(alert_of(evil)))));
        for (line, key) in [(&hello_line, "board"), (&alert_line, "comm")] {
            assert!(!line.chars().any(|c| c.is_control() || crate::json::needs_escape(c)), "raw in {line:?}");
            assert!(line.contains("\\u009b2J\\u009d0;t\\u0007\\u007f\\u202egol\\u2066"), "{line}");
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v[key].as_str(), Some(evil), "{key} reads back the same: {line}");
        }
    }

    /// What the receiver set aside is said on the link line, not dropped
    /// silently.
    #[test]
    fn link_line_names_what_was_set_aside() {
        let mut t = Tracker::new();
        let mut h = hello();
        h.probes[0].id = 5000;
        t.on_frame(Frame::Hello(h));
        let l = link_line(&LinkStats::default(), &t);
        assert!(l.ends_with("0 probes with inexact totals, 1 entries with ids >= 1024 ignored"), "{l}");
        assert!(!link_line(&LinkStats::default(), &Tracker::new()).contains("ignored"));
    }

    #[test]
    fn screen_and_decode_show_the_budget_the_step_and_losses() {
        let mut t = Tracker::new();
        let mut v = View::default();
        t.on_frame(Frame::Hello(hello()));
        t.on_frame(Frame::Status(crate::wire::Status {
            boot_id: 7,
            time_ns: 0,
            seq: 2,
            uptime_ns: 0,
            frames_dropped: 0,
            bytes_dropped: 0,
            clients: 0,
            probes: Vec::new(),
            flags: 0,
            bpf_cpu_ppm: 0,
            detached: Vec::new(),
            missed: Vec::new(),
            link: crate::wire::LinkHealth {
                budget_bps: 480,
                used_bps: 410,
                step: 2,
                merge: 3,
                rolled: 31,
                interval_ms: 1_000,
                keyframe_ms: 60_000,
                alerts_shed: 5,
                intervals_folded: 0,
            },
            shed: vec![crate::wire::ProbeShed { id: 0, alerts_shed: 5 }],
            dropped: vec![crate::wire::ProbeDropped { id: 0, alerts_dropped: 7 }],
        }));
        let s = v.render("serial:/dev/ttyS1@9600", &LinkStats::default(), &t, None);
        for needle in [
            "budget 480 B/s, using 410 B/s, keyframes every 60 s",
            "DEGRADED step 2 (roll-up): 1 buckets per power of two, 31 series rolled up",
            "5 alerts shed over their share (runq 5)",
            "7 alert records dropped before any output (runq 7)",
        ] {
            assert!(s.contains(needle), "{needle:?} missing in\n{s}");
        }
        let line = link_line(&LinkStats::default(), &t);
        assert!(line.contains("budget 480 B/s"), "{line}");
        assert!(line.contains(", 7 alert records dropped before any output (runq 7)"), "{line}");
        // A delta whose base never arrived: reported, totals marked inexact.
        let d = crate::wire::Delta {
            seq: 9,
            base_seq: 8,
            boot_id: 7,
            time_ns: 9_000_000_000,
            last: false,
            merge: 0,
            first_id: 0,
            end_id: 1,
            probes: Vec::new(),
            keyed: Vec::new(),
            born: Vec::new(),
        };
        let mut h = Hist::default();
        summary_event(&mut t, 1, &[1_000], &mut h);
        let ev = t.on_frame(Frame::Delta(crate::wire::Delta {
            probes: vec![crate::wire::ProbeCounts {
                id: 0,
                count: 1,
                sum_ns: 500,
                min_ns: 500,
                max_ns: 500,
                drops: 0,
                alerts: 0,
                first_bucket: 0,
                end_bucket: crate::hist::BUCKETS as u16,
                buckets: vec![(crate::hist::bucket_index(500) as u16, 1)],
            }],
            ..d
        }));
        let line: serde_json::Value = serde_json::from_str(&json_line(&Ok(ev))).unwrap();
        assert_eq!(line["keyframe"], false);
        assert_eq!(line["inexact"][0], "runq", "{line}");
        assert_eq!(t.summaries_lost, 1);
        let s = v.render("serial:/dev/ttyS1@9600", &LinkStats::default(), &t, None);
        assert!(s.contains("deltas lost: 1 runs (last: after seq 1 through 8); 1 probes with totals behind"), "{s}");
    }

    #[test]
    fn json_lines_use_run_field_names() {
        let mut t = Tracker::new();
        let line = json_line(&Ok(t.on_frame(Frame::Hello(hello()))));
        assert!(line.starts_with("{\"type\":\"hello\""), "{line}");
        let mut h = Hist::default();
        let ev = summary_event(&mut t, 1, &[500, 600], &mut h);
        let v: serde_json::Value = serde_json::from_str(&json_line(&Ok(ev))).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["interval_ns"], 1_000_000_000u64);
        let p = &v["probes"][0];
        for k in crate::summary::PROBE_JSON_KEYS {
            assert!(p.get(k).is_some(), "{k} missing in {p}");
        }
        assert_eq!(p["name"], "runq");
        assert_eq!(p["count"], 2);
        let bad: serde_json::Value =
            serde_json::from_str(&json_line(&Err(FrameError::Crc { len: 9, expected: 1, actual: 2 }))).unwrap();
        assert_eq!(bad["type"], "bad_frame");
        assert_eq!(bad["reason"], "crc");
    }
}
