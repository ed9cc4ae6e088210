// SPDX-License-Identifier: MIT
//! `--output prom://[HOST]:PORT[,series=N]`: Prometheus metrics served over
//! HTTP at `GET /metrics` by one small blocking server thread, in the
//! format the scraper asks for (content negotiation on `Accept`):
//!
//! - the protobuf exposition (`application/vnd.google.protobuf;
//!   proto=io.prometheus.client.MetricFamily; encoding=delimited`, what a
//!   Prometheus started with `--enable-feature=native-histograms` asks for
//!   first): every histogram both as a *native* histogram of schema 3
//!   (src/promhist.rs: latmon's buckets mapped onto 8 per power of two, no
//!   resolution lost to the scrape) and with the classic `le` buckets;
//! - the text format (version 0.0.4, which every Prometheus-compatible
//!   scraper reads) to everyone else: classic `le` buckets only.
//!
//! Every interval the agent thread copies what it shows into a snapshot
//! whose buffers it keeps (no allocation once grown) and swaps it into the
//! slot the server thread renders from, taking the lock only if it is free:
//! a scrape in progress never delays the agent (that interval's update is
//! skipped and counted, the next one lands). The server thread renders each
//! scrape in the format asked for. It serves up to [`HTTP_CLIENTS_MAX`]
//! connections at once from one poll loop (non-blocking sockets), each
//! closed at [`REQUEST_DEADLINE`] after it was accepted: a slow, silent or
//! malicious client holds one slot for at most that long, and a newcomer
//! displaces the oldest connection that has not finished its request.
//! Hand-written rather than an HTTP crate: the endpoint is one GET; the
//! small blocking crates (tiny_http) start a thread per waiting
//! connection with no deadline on the request head, and the async ones
//! (hyper) do not fit the 1.5 MiB static binary.
//!
//! Classic histograms: `latmon_latency_seconds` with cumulative `le`
//! buckets at powers of two of nanoseconds, 2^8 ns (256 ns) to 2^36 ns
//! (68.7 s), plus `+Inf`: 30 series per probe line, whatever the data. Each
//! is an exact sum of latmon's log-linear buckets (every power of two is a
//! bucket edge). As latmon's buckets are `[lo, hi)`, a latency of exactly
//! 2^k ns counts in the next bound up. Counts and sums are cumulative since
//! the probe started (Prometheus derives rates).
//!
//! Series bound: a family (syscall: up to 127 series) shows its first
//! `series` series (default [`SERIES_PER_FAMILY`], in the order latmon
//! found them, which never changes) as lines of their own; the rest are
//! summed into one line `probe="FAMILY:folded"` and counted in
//! `latmon_series_folded`. See docs/prometheus.md for every metric and
//! the series count per probe.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latmon_core::causes::{CauseId, CauseSummary};
use latmon_core::hist::{bucket_index, Hist};
use latmon_core::summary::ProbeState;
use latmon_core::text::push_clean;
use prost::Message as _;

use super::link::{LinkStats, Sink};
use super::prom_pb as pb;
use crate::bpf::limits::HIST_MAX_LOG2;
use crate::promhist::{self, SPAN};
use latmon_core::session::Tick;

/// The SINK prefix.
pub const SCHEME: &str = "prom://";
/// Smallest `le` bound: 2^8 ns = 256 ns.
pub const LE_MIN_LOG2: usize = 8;
/// Largest finite `le` bound: 2^36 ns = 68.7 s (latmon's last bucket edge).
pub const LE_MAX_LOG2: usize = HIST_MAX_LOG2;
/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of the protobuf format.
pub const CONTENT_TYPE_PROTOBUF: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";
/// Series of one family shown as lines of their own by default (`series=`).
pub const SERIES_PER_FAMILY: u32 = 16;
/// Largest `series=` accepted.
pub const SERIES_PER_FAMILY_MAX: u32 = 512;
/// Label suffix of the line a family's folded series are summed into.
pub const FOLDED: &str = "folded";
/// Connections served at once; at the limit a newcomer displaces the
/// oldest one still sending its request head ([`displaced`]).
pub const HTTP_CLIENTS_MAX: usize = 8;
/// A connection's whole life, from accept to the last byte of the answer
/// (the request head's read included): a slow or silent client is closed
/// then, whatever it sends. Half Prometheus' default scrape timeout (10 s).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Refused connections are logged at most this often.
const REFUSE_LOG_PERIOD: Duration = Duration::from_secs(10);
/// How often the server thread looks at its stop flag.
const ACCEPT_POLL_MS: u16 = 200;
/// Longest request head read.
const MAX_REQUEST: usize = 8 * 1024;

/// `HOST:PORT`, `:PORT` (127.0.0.1) or `localhost:PORT`; IP literals only
/// (no name service: the product binary is static).
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim_end_matches('/');
    let bad = || format!("{SCHEME}{s}: expected {SCHEME}[HOST]:PORT with HOST an IP address (default 127.0.0.1)");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = match host {
        "" | "localhost" => "127.0.0.1",
        h => h.trim_start_matches('[').trim_end_matches(']'),
    };
    let ip: std::net::IpAddr = host.parse().map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, port))
}

/// `ADDR[,series=N]`: the address and the series shown per family.
pub fn parse_word(word: &str) -> Result<(SocketAddr, u32), String> {
    let mut parts = word.split(',');
    let addr = parse_addr(parts.next().unwrap_or(""))?;
    let mut series = SERIES_PER_FAMILY;
    for opt in parts {
        let bad = || format!("{SCHEME}{word}: option {opt:?}: expected series=N with N 0..={SERIES_PER_FAMILY_MAX}");
        let n = opt.strip_prefix("series=").ok_or_else(bad)?;
        series = n.parse().ok().filter(|&n| n <= SERIES_PER_FAMILY_MAX).ok_or_else(bad)?;
    }
    Ok((addr, series))
}

/// The format a request's `Accept` header asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Protobuf,
}

/// Content negotiation: protobuf when `Accept` offers the delimited
/// `io.prometheus.client.MetricFamily` stream with a quality at least that
/// of any text type latmon serves (`text/plain`, `text/*`, `*/*`); text
/// otherwise (no header, OpenMetrics only, `q=0`, ...).
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else { return Format::Text };
    let (mut pb_q, mut text_q) = (0.0f64, 0.0f64);
    for range in accept.split(',') {
        let mut params = range.split(';').map(str::trim);
        let media = params.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut proto, mut delimited) = (1.0f64, false, false);
        for p in params {
            let Some((k, v)) = p.split_once('=') else { continue };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = v.parse().unwrap_or(0.0),
                "proto" => proto = v == "io.prometheus.client.MetricFamily",
                "encoding" => delimited = v == "delimited",
                _ => {}
            }
        }
        match media.as_str() {
            "application/vnd.google.protobuf" if proto && delimited => pb_q = pb_q.max(q),
            "text/plain" | "text/*" | "*/*" => text_q = text_q.max(q),
            _ => {}
        }
    }
    if pb_q > 0.0 && pb_q >= text_q {
        Format::Protobuf
    } else {
        Format::Text
    }
}

/// One line of the exposition: a probe, or the sum of a family's series
/// past the limit.
#[derive(Clone, Debug, Default)]
pub struct Line {
    pub probe: String,
    pub kind: String,
    pub attach: String,
    /// Cumulative since the probe started (drops and alerts in it too).
    pub hist: Hist,
    pub bpf_missed: u64,
    pub read_errors: u64,
    pub bpf_runs: u64,
    pub bpf_run_ns: u64,
    pub up: bool,
    pub detached: bool,
    pub bpf_ns_per_event: u64,
    pub events_per_s: u64,
    pub bpf_cpu_percent: f64,
    /// A family line: how many of its series are folded (None: not a
    /// family with series).
    pub folded: Option<u32>,
    /// timer, chain, runq with an anatomy: the last interval's alerted
    /// time by cause (`has_causes`; kept, not dropped, between intervals).
    pub causes: CauseSummary,
    pub has_causes: bool,
    /// The `cause` label of each of `causes`' first [`TOP_CAUSES`] (see
    /// [`Line::label_causes`]).
    pub cause_labels: Vec<String>,
}

impl Line {
    /// An empty line named `probe` (`probe:suffix` when `suffix` is set).
    fn reset(&mut self, probe: &str, suffix: &str, kind: &str, attach: &str) {
        copy_str(&mut self.probe, probe);
        if !suffix.is_empty() {
            self.probe.push(':');
            self.probe.push_str(suffix);
        }
        copy_str(&mut self.kind, kind);
        copy_str(&mut self.attach, attach);
        self.hist = Hist::default();
        (self.bpf_missed, self.read_errors, self.bpf_runs, self.bpf_run_ns) = (0, 0, 0, 0);
        (self.up, self.detached, self.bpf_ns_per_event, self.events_per_s, self.bpf_cpu_percent) =
            (true, false, 0, 0, 0.0);
        self.folded = None;
        self.has_causes = false;
    }

    /// Add probe `i`'s state: its histogram merged, counters and rates
    /// summed, up only if all are, detached if any is.
    fn add(&mut self, t: &Tick<'_>, i: usize) {
        let rp = t.report.probes.get(i);
        self.hist.merge(&t.totals[i]);
        self.bpf_missed += rp.map_or(0, |p| p.total_bpf_missed);
        self.read_errors += t.read_errors.get(i).copied().unwrap_or(0);
        self.bpf_runs += rp.map_or(0, |p| p.total_bpf_runs);
        self.bpf_run_ns += rp.map_or(0, |p| p.total_bpf_run_time_ns);
        self.up &= rp.is_some_and(|p| p.state == ProbeState::Running);
        self.detached |= rp.is_some_and(|p| p.state == ProbeState::DetachedOverBudget);
        self.bpf_ns_per_event += rp.map_or(0, |p| p.bpf_ns_per_event);
        self.events_per_s += rp.map_or(0, |p| p.events_per_s);
        self.bpf_cpu_percent += rp.map_or(0.0, |p| p.bpf_cpu_percent);
        // Only probes with one alert id tally causes (never a folded
        // line's series): the line's own.
        if let Some(c) = rp.and_then(|p| p.alert_causes.as_ref()) {
            self.causes.copy_from(c);
            self.has_causes = true;
        }
    }
}

/// A line's task names admitted into `cause` labels, by probe line name
/// (at most [`TASK_NAMES_MAX`] each).
type TaskNames = Vec<(String, Vec<String>)>;

impl Line {
    /// The `cause` label of each top cause. A task's is its name alone (a
    /// pid would make every fork a new series): the first
    /// [`TASK_NAMES_MAX`] names this line showed keep theirs for good, any
    /// other is `other tasks`. So whatever the board's processes call
    /// themselves, a line's task labels are at most `TASK_NAMES_MAX + 1`.
    fn label_causes(&mut self, names: &mut TaskNames) {
        let k = match names.iter().position(|(p, _)| *p == self.probe) {
            Some(k) => k,
            None => {
                names.push((self.probe.clone(), Vec::new()));
                names.len() - 1
            }
        };
        let admitted = &mut names[k].1;
        self.cause_labels.resize_with(self.causes.causes.len().min(TOP_CAUSES), String::new);
        for (c, label) in self.causes.causes.iter().zip(self.cause_labels.iter_mut()) {
            label.clear();
            if !matches!(c.id, CauseId::Task { .. }) {
                c.label_into(label);
                continue;
            }
            push_clean(label, if c.name.is_empty() { "?" } else { &c.name });
            if !admitted.iter().any(|a| a.as_str() == label.as_str()) {
                if admitted.len() < TASK_NAMES_MAX {
                    admitted.push(label.clone());
                } else {
                    label.clear();
                    label.push_str(OTHER_TASKS);
                }
            }
        }
    }
}

/// What one scrape shows (filled on the agent thread, rendered on the
/// server thread).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub kernel: String,
    pub board: String,
    pub boot_id: u32,
    pub uptime_ns: u64,
    pub interval_ns: u64,
    pub seq: u64,
    pub bpf_cpu_percent: f64,
    pub cost_measured: bool,
    pub online_cpus: u32,
    pub over_budget: bool,
    pub over_budget_intervals: u32,
    pub degraded: bool,
    pub rss_bytes: u64,
    /// `lines[..n]` are in use (the rest keep their buffers).
    pub lines: Vec<Line>,
    pub n: usize,
    /// The other outputs' link trouble, by output position (None: an
    /// output without a link to report on).
    pub links: Vec<(String, Option<LinkStats>)>,
}

/// Scratch of `Snapshot::fill`, kept between intervals (sized to the
/// probe count; grows only when a family finds a new series).
#[derive(Default)]
struct Grouping {
    /// Per probe: the line it is shown on.
    line: Vec<usize>,
    /// Per probe: its family line's probe index, or `usize::MAX`.
    family: Vec<usize>,
    /// Per family probe: series seen so far, and its folded line.
    series: Vec<u32>,
    folded_line: Vec<usize>,
    /// Task names admitted into `cause` labels (kept for the output's
    /// life: a label once shown stays the same series).
    task_names: TaskNames,
}

const NONE: usize = usize::MAX;

/// `i` is a series of `j`: same kind and named `NAME_OF_J:LABEL`.
fn is_series_of(t: &Tick<'_>, i: usize, j: usize) -> bool {
    let (a, b) = (&t.session.probes[i], &t.session.probes[j]);
    a.kind == b.kind
        && a.name.len() > b.name.len() + 1
        && a.name.starts_with(&b.name)
        && a.name.as_bytes()[b.name.len()] == b':'
}

impl Snapshot {
    fn line(&mut self) -> &mut Line {
        if self.n == self.lines.len() {
            self.lines.push(Line::default());
        }
        self.n += 1;
        &mut self.lines[self.n - 1]
    }

    /// Copy one interval's state in, folding each family's series past
    /// `limit` into one line. No allocation once the buffers have grown.
    fn fill(&mut self, t: &Tick<'_>, limit: u32, g: &mut Grouping) {
        let r = t.report;
        let a = &r.agent;
        let ses = t.session;
        copy_str(&mut self.kernel, &ses.kernel);
        copy_str(&mut self.board, &ses.board);
        self.boot_id = ses.boot_id;
        self.uptime_ns = r.time_ns.saturating_sub(ses.start_ns);
        self.interval_ns = r.interval_ns;
        self.seq = r.seq;
        self.bpf_cpu_percent = a.bpf_cpu_percent;
        self.cost_measured = a.cost_measured;
        self.online_cpus = a.online_cpus;
        self.over_budget = a.over_budget;
        self.over_budget_intervals = a.over_budget_intervals;
        self.degraded = a.degraded;
        self.rss_bytes = a.rss_bytes;
        self.n = 0;
        let n = t.totals.len().min(ses.probes.len());
        for v in [&mut g.line, &mut g.family, &mut g.folded_line] {
            v.clear();
            v.resize(n, NONE);
        }
        g.series.clear();
        g.series.resize(n, 0);
        for i in 0..n {
            let fam = (0..i).find(|&j| g.family[j] == NONE && is_series_of(t, i, j)).unwrap_or(NONE);
            g.family[i] = fam;
            let p = &ses.probes[i];
            let folded = fam != NONE && {
                g.series[fam] += 1;
                g.series[fam] > limit
            };
            if fam != NONE {
                let fl = g.line[fam];
                self.lines[fl].folded = Some(g.series[fam].saturating_sub(limit));
            }
            if !folded {
                g.line[i] = self.n;
                self.line().reset(&p.name, "", p.kind.as_str(), p.attach.as_str());
            } else if g.folded_line[fam] == NONE {
                // The first series past the limit starts the folded line.
                g.folded_line[fam] = self.n;
                let fname = &ses.probes[fam].name;
                self.line().reset(fname, FOLDED, p.kind.as_str(), p.attach.as_str());
            }
            let at = if folded { g.folded_line[fam] } else { g.line[i] };
            self.lines[at].add(t, i);
        }
        for l in self.lines[..self.n].iter_mut().filter(|l| l.has_causes) {
            l.label_causes(&mut g.task_names);
        }
    }

    pub fn lines(&self) -> &[Line] {
        &self.lines[..self.n]
    }
}

fn copy_str(to: &mut String, from: &str) {
    to.clear();
    to.push_str(from);
}

/// The Prometheus output: snapshots on the agent thread, renders and
/// serves on its own.
pub struct Prom {
    name: String,
    snap: Snapshot,
    grouping: Grouping,
    series: u32,
    slot: Arc<Mutex<Snapshot>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    local: SocketAddr,
    /// Intervals not published because a scrape held the slot.
    pub skipped: u64,
}

impl Prom {
    /// The address actually bound (port 0 picks a free one).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Bind now (mistakes fail at startup) and start the server thread.
pub fn open(word: &str) -> Result<Prom, String> {
    let (sa, series) = parse_word(word)?;
    let listener = TcpListener::bind(sa).map_err(|e| format!("output {SCHEME}{word}: listen: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let name = format!("{SCHEME}{local}");
    log::info!("output {name}: serving Prometheus metrics at http://{local}/metrics");
    let slot = Arc::new(Mutex::new(Snapshot::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let (sl, st, n) = (Arc::clone(&slot), Arc::clone(&stop), name.clone());
    let thread = super::link::spawn_blocked("latmon-prom", move || serve(&listener, &sl, &st, &n))
        .map_err(|e| format!("output {name}: {e}"))?;
    Ok(Prom {
        name,
        snap: Snapshot::default(),
        grouping: Grouping::default(),
        series,
        slot,
        stop,
        thread: Some(thread),
        local,
        skipped: 0,
    })
}

/// The server thread's buffers.
struct Server {
    map: promhist::Map,
    text: String,
    body: Vec<u8>,
    counts: Box<[u64; SPAN]>,
}

/// One connection: its request head as it arrives, then what of its
/// answer the kernel has not taken yet.
struct Conn {
    s: TcpStream,
    peer: SocketAddr,
    since: Instant,
    req: Vec<u8>,
    out: Vec<u8>,
    off: usize,
    answered: bool,
}

/// What became of a connection after a step.
enum Step {
    Keep,
    Close(&'static str),
}

impl Conn {
    /// Read what arrived; answer once the head is complete (or the
    /// client stopped sending, or the head reached [`MAX_REQUEST`]).
    fn read(&mut self, slot: &Mutex<Snapshot>, sv: &mut Server) -> Step {
        let mut eof = false;
        loop {
            let n = self.req.len();
            if n == MAX_REQUEST {
                break;
            }
            self.req.resize(MAX_REQUEST, 0);
            match self.s.read(&mut self.req[n..]) {
                Ok(0) => {
                    self.req.truncate(n);
                    eof = true;
                    break;
                }
                Ok(k) => self.req.truncate(n + k),
                Err(e) => {
                    self.req.truncate(n);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => break,
                        io::ErrorKind::Interrupted => continue,
                        _ => return Step::Close("read failed"),
                    }
                }
            }
        }
        let r = &self.req;
        let complete = r.windows(4).any(|w| w == b"\r\n\r\n") || r.windows(2).any(|w| w == b"\n\n");
        if !(complete || eof || r.len() == MAX_REQUEST) {
            return Step::Keep;
        }
        if r.is_empty() {
            return Step::Close("closed before a request");
        }
        let (head, with_body) = respond(r, slot, sv);
        self.out.clear();
        self.out.extend_from_slice(head.as_bytes());
        if with_body {
            self.out.extend_from_slice(&sv.body);
        }
        self.answered = true;
        self.write()
    }

    /// Write what the kernel takes of the answer; done: close.
    fn write(&mut self) -> Step {
        while self.off < self.out.len() {
            match self.s.write(&self.out[self.off..]) {
                Ok(0) => return Step::Close("write returned 0"),
                Ok(k) => self.off += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close("write failed"),
            }
        }
        let _ = self.s.shutdown(std::net::Shutdown::Write);
        Step::Close("answered")
    }
}

/// At the connection limit, which connection a newcomer displaces (by
/// position), given each one's (start, answered): the oldest still
/// sending its request head. A client that has not finished a request
/// head of a few hundred bytes within milliseconds is slow or silent; an
/// answer being written is never cut. None when every connection is
/// being answered: the newcomer is refused (they end within the
/// deadline).
pub fn displaced(conns: impl Iterator<Item = (Instant, bool)>) -> Option<usize> {
    conns.enumerate().filter(|(_, (_, answered))| !answered).min_by_key(|&(i, (since, _))| (since, i)).map(|(i, _)| i)
}

/// The server thread: one poll loop over the listener and at most
/// [`HTTP_CLIENTS_MAX`] non-blocking connections, each closed at
/// [`REQUEST_DEADLINE`] whatever it sends. Rendering takes milliseconds
/// and happens here; a client's slowness only ever holds its own slot.
fn serve(l: &TcpListener, slot: &Mutex<Snapshot>, stop: &AtomicBool, name: &str) {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut sv = Server {
        map: promhist::Map::new(),
        text: String::with_capacity(64 * 1024),
        body: Vec::with_capacity(64 * 1024),
        counts: Box::new([0; SPAN]),
    };
    if let Err(e) = l.set_nonblocking(true) {
        log::warn!("output {name}: listener: {e}");
    }
    let mut conns: Vec<Conn> = Vec::with_capacity(HTTP_CLIENTS_MAX);
    let mut revents: Vec<PollFlags> = Vec::with_capacity(HTTP_CLIENTS_MAX + 1);
    let (mut refused, mut last_refuse_log) = (0u64, None::<Instant>);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = conns
            .iter()
            .map(|c| (c.since + REQUEST_DEADLINE).saturating_duration_since(now))
            .fold(Duration::from_millis(ACCEPT_POLL_MS.into()), Duration::min);
        revents.clear();
        {
            let mut fds = Vec::with_capacity(1 + conns.len());
            fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
            for c in &conns {
                fds.push(PollFd::new(c.s.as_fd(), if c.answered { PollFlags::POLLOUT } else { PollFlags::POLLIN }));
            }
            let ms = u16::try_from(wait.as_millis() + 1).unwrap_or(ACCEPT_POLL_MS);
            if nix::poll::poll(&mut fds, PollTimeout::from(ms)).is_err() {
                continue;
            }
            revents.extend(fds.iter().map(|f| f.revents().unwrap_or(PollFlags::empty())));
        }
        let now = Instant::now();
        let mut i = 0;
        conns.retain_mut(|c| {
            i += 1;
            let ev = revents.get(i).copied().unwrap_or(PollFlags::empty());
            let step = if now >= c.since + REQUEST_DEADLINE {
                Step::Close("request deadline passed")
            } else if ev.is_empty() {
                Step::Keep
            } else if c.answered {
                c.write()
            } else {
                c.read(slot, &mut sv)
            };
            match step {
                Step::Keep => true,
                Step::Close(why) => {
                    log::debug!("output {name}: client {}: {why}", c.peer);
                    false
                }
            }
        });
        if !revents.first().is_some_and(|e| e.contains(PollFlags::POLLIN)) {
            continue;
        }
        loop {
            let (s, peer) = match l.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    log::warn!("output {name}: accept: {e}");
                    std::thread::sleep(Duration::from_millis(ACCEPT_POLL_MS.into()));
                    break;
                }
            };
            if conns.len() >= HTTP_CLIENTS_MAX {
                match displaced(conns.iter().map(|c| (c.since, c.answered))) {
                    Some(k) => {
                        let old = conns.remove(k);
                        log::debug!(
                            "output {name}: client {} (no request after {:.1?}) makes room for {peer}",
                            old.peer,
                            old.since.elapsed()
                        );
                    }
                    None => {
                        refused += 1;
                        if last_refuse_log.is_none_or(|t: Instant| t.elapsed() >= REFUSE_LOG_PERIOD) {
                            log::warn!("output {name}: connection from {peer} refused: {HTTP_CLIENTS_MAX} answers being written ({refused} refused so far)");
                            last_refuse_log = Some(Instant::now());
                        }
                        continue;
                    }
                }
            }
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            conns.push(Conn {
                s,
                peer,
                since: Instant::now(),
                req: Vec::with_capacity(MAX_REQUEST),
                out: Vec::new(),
                off: 0,
                answered: false,
            });
        }
    }
}

/// The value of header `name` (case-insensitive) in a request head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The answer to request head `req`: the response head, with the body in
/// `sv.body`; false: send no body (HEAD).
fn respond(req: &[u8], slot: &Mutex<Snapshot>, sv: &mut Server) -> (String, bool) {
    let head = String::from_utf8_lossy(req);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let body = &mut sv.body;
    body.clear();
    let (status, ctype): (&str, &str) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let format = negotiate(header(&head, "accept"));
            if let Ok(s) = slot.lock() {
                match format {
                    Format::Text => {
                        sv.text.clear();
                        render_text(&mut sv.text, &s);
                        body.extend_from_slice(sv.text.as_bytes());
                    }
                    Format::Protobuf => render_protobuf(body, &s, &sv.map, &mut sv.counts),
                }
            }
            ("200 OK", if format == Format::Protobuf { CONTENT_TYPE_PROTOBUF } else { CONTENT_TYPE })
        }
        ("GET" | "HEAD", "/") => {
            body.extend_from_slice(b"latmon: Prometheus metrics at /metrics\n");
            ("200 OK", "text/plain; charset=utf-8")
        }
        ("GET" | "HEAD", _) => {
            body.extend_from_slice(b"not found: latmon serves /metrics\n");
            ("404 Not Found", "text/plain; charset=utf-8")
        }
        _ => {
            body.extend_from_slice(b"only GET /metrics\n");
            ("405 Method Not Allowed", "text/plain; charset=utf-8")
        }
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    (head, method != "HEAD")
}

/// A label value, escaped as the text format requires.
struct Esc<'a>(&'a str);

impl std::fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for ch in self.0.chars() {
            match ch {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Seconds from ns, as the exposition's float.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The labels of a sample.
#[derive(Clone, Copy)]
enum Labels<'a> {
    None,
    /// `probe`, `kind`, `attach` of a line.
    Line(&'a Line),
    /// `latmon_info`'s.
    Info(&'a Snapshot),
    /// `output` of a link.
    Output(&'a str),
    /// A line's and its `rank`-th cause (0: the largest): `rank` (1..),
    /// `cause_kind` (task, irq, ...) and `cause` (`hog`, `other tasks`,
    /// `irq 36 virtio1`, `softirq NET_RX`, `other`).
    Cause(&'a Line, usize),
}

/// Causes per line shown in `latmon_probe_alerted_cause_ratio`.
pub const TOP_CAUSES: usize = 3;
/// Task names per line that may appear as `cause` labels (docs/prometheus.md).
pub const TASK_NAMES_MAX: usize = 8;
/// The `cause` label of every other task.
pub const OTHER_TASKS: &str = "other tasks";

/// A cause's label words: (rank, kind, label).
fn cause_labels(l: &Line, rank: usize) -> (String, &'static str, &str) {
    let kind = l.causes.causes.get(rank).map_or("", |c| c.id.word());
    let label = l.cause_labels.get(rank).map_or("", String::as_str);
    ((rank + 1).to_string(), kind, label)
}

/// Where the exposition is written: the text format or protobuf. One
/// description of the metrics (`expose`) drives both.
trait Exposition {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str);
    fn sample(&mut self, labels: Labels<'_>, v: f64);
    fn histogram(&mut self, line: &Line);
}

/// Every metric, in order.
fn expose(s: &Snapshot, out: &mut impl Exposition) {
    use Kind::{Counter, Gauge};
    out.family("latmon_info", Gauge, "latmon version, kernel and board (always 1).");
    out.sample(Labels::Info(s), 1.0);
    out.family("latmon_uptime_seconds", Gauge, "Time since latmon started counting.");
    out.sample(Labels::None, secs(s.uptime_ns));
    out.family("latmon_interval_seconds", Gauge, "Length of the last summary interval.");
    out.sample(Labels::None, secs(s.interval_ns));
    out.family("latmon_summaries_total", Counter, "Summary intervals completed.");
    out.sample(Labels::None, s.seq as f64);

    out.family("latmon_latency_seconds", Kind::Histogram, "Latency measured by each probe since it started.");
    for l in s.lines() {
        out.histogram(l);
    }
    lines(out, s, "latmon_probe_drops_total", Counter, "Events the probe lost (full maps, clock anomalies).", |l| {
        l.hist.drops as f64
    });
    lines(out, s, "latmon_probe_alerts_total", Counter, "Events above the probe's alert threshold.", |l| {
        l.hist.alerts as f64
    });
    lines(
        out,
        s,
        "latmon_probe_alert_records_dropped_total",
        Counter,
        "Alert records that never reached latmon (rate limit, full buffer).",
        |l| l.hist.alerts_dropped as f64,
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_missed_total",
        Counter,
        "Runs of the probe's BPF programs the kernel skipped (recursion_misses): events it never saw.",
        |l| l.bpf_missed as f64,
    );
    lines(out, s, "latmon_probe_read_errors_total", Counter, "Failed reads of the probe's maps.", |l| {
        l.read_errors as f64
    });
    lines(
        out,
        s,
        "latmon_probe_up",
        Gauge,
        "1 while the probe is attached, 0 once detached (see latmon_probe_detached_over_budget).",
        |l| f64::from(u8::from(l.up)),
    );
    lines(
        out,
        s,
        "latmon_probe_detached_over_budget",
        Gauge,
        "1 when latmon detached the probe because its own cost broke overhead_budget.",
        |l| f64::from(u8::from(l.detached)),
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_runs_total",
        Counter,
        "Runs of the probe's BPF programs (kernel events it hooked); latmon's own cost.",
        |l| l.bpf_runs as f64,
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_run_seconds_total",
        Counter,
        "Time spent in the probe's BPF programs; latmon's own cost.",
        |l| secs(l.bpf_run_ns),
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_seconds_per_event",
        Gauge,
        "BPF time per hooked event over the last interval.",
        |l| secs(l.bpf_ns_per_event),
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_events_per_second",
        Gauge,
        "Hooked events per second over the last interval.",
        |l| l.events_per_s as f64,
    );
    lines(
        out,
        s,
        "latmon_probe_bpf_cpu_ratio",
        Gauge,
        "Share of the machine's CPU capacity the probe's BPF took over the last interval (0..1).",
        |l| l.bpf_cpu_percent / 100.0,
    );

    out.family(
        "latmon_bpf_cpu_ratio",
        Gauge,
        "Share of the machine's CPU capacity all of latmon's BPF programs took over the last interval (0..1).",
    );
    out.sample(Labels::None, s.bpf_cpu_percent / 100.0);
    out.family(
        "latmon_cost_measured",
        Gauge,
        "1 when BPF run-time statistics are on and the cost metrics mean something.",
    );
    out.sample(Labels::None, f64::from(u8::from(s.cost_measured)));
    out.family("latmon_online_cpus", Gauge, "CPUs the CPU ratios are relative to.");
    out.sample(Labels::None, f64::from(s.online_cpus));
    out.family("latmon_over_budget", Gauge, "1 when the last interval broke overhead_budget.");
    out.sample(Labels::None, f64::from(u8::from(s.over_budget)));
    out.family("latmon_over_budget_intervals", Gauge, "Consecutive intervals over budget so far.");
    out.sample(Labels::None, f64::from(s.over_budget_intervals));
    out.family("latmon_degraded", Gauge, "1 when a probe was detached over budget.");
    out.sample(Labels::None, f64::from(u8::from(s.degraded)));
    out.family("latmon_resident_memory_bytes", Gauge, "latmon's resident set size.");
    out.sample(Labels::None, s.rss_bytes as f64);
    if s.links.iter().any(|l| l.1.is_some()) {
        out.family(
            "latmon_output_dropped_total",
            Counter,
            "Records (frames, lines) the output dropped since start: its link was slower than the summaries, or down.",
        );
        for (name, st) in &s.links {
            if let Some(st) = st {
                out.sample(Labels::Output(name), st.dropped as f64);
            }
        }
        out.family(
            "latmon_output_errors_total",
            Counter,
            "Damaged or malformed requests the output received since start (Modbus).",
        );
        for (name, st) in &s.links {
            if let Some(st) = st {
                out.sample(Labels::Output(name), st.errors as f64);
            }
        }
    }
    if s.lines().iter().any(|l| l.has_causes) {
        out.family(
            "latmon_probe_alerted_seconds_total",
            Counter,
            "Latency of the probe's alerts summed (records sent or refused), since it started; timer, chain, runq with a threshold.",
        );
        for l in s.lines().iter().filter(|l| l.has_causes) {
            out.sample(Labels::Line(l), secs(l.causes.total_alerted_ns));
        }
        out.family(
            "latmon_probe_alerted_cause_ratio",
            Gauge,
            "Share (0..1) of the last interval's alerted time spent on each of its largest causes (rank 1 the largest).",
        );
        for l in s.lines().iter().filter(|l| l.has_causes) {
            for (rank, c) in l.causes.causes.iter().take(TOP_CAUSES).enumerate() {
                out.sample(Labels::Cause(l, rank), l.causes.share(c.ns));
            }
        }
    }
    if s.lines().iter().any(|l| l.folded.is_some()) {
        out.family(
            "latmon_series_folded",
            Gauge,
            "Series of the family summed into its FAMILY:folded line (beyond the per-family series limit).",
        );
        for l in s.lines() {
            if let Some(n) = l.folded {
                out.sample(Labels::Line(l), f64::from(n));
            }
        }
    }
}

/// A family with one sample per line.
fn lines(
    out: &mut impl Exposition,
    s: &Snapshot,
    name: &'static str,
    kind: Kind,
    help: &'static str,
    v: impl Fn(&Line) -> f64,
) {
    out.family(name, kind, help);
    for l in s.lines() {
        out.sample(Labels::Line(l), v(l));
    }
}

/// The text format into a `String`.
struct Text<'a> {
    s: &'a mut String,
    name: &'static str,
}

impl Text<'_> {
    fn labels(&mut self, labels: Labels<'_>, le: Option<&dyn std::fmt::Display>) {
        let s = &mut *self.s;
        match labels {
            Labels::None => {}
            Labels::Line(l) => {
                let _ =
                    write!(s, "{{probe=\"{}\",kind=\"{}\",attach=\"{}\"", Esc(&l.probe), Esc(&l.kind), Esc(&l.attach));
                if let Some(le) = le {
                    let _ = write!(s, ",le=\"{le}\"");
                }
                s.push('}');
            }
            Labels::Output(o) => {
                let _ = write!(s, "{{output=\"{}\"}}", Esc(o));
            }
            Labels::Cause(l, rank) => {
                let (rank, kind, label) = cause_labels(l, rank);
                let _ = write!(
                    s,
                    "{{probe=\"{}\",kind=\"{}\",attach=\"{}\",rank=\"{rank}\",cause_kind=\"{kind}\",cause=\"{}\"}}",
                    Esc(&l.probe),
                    Esc(&l.kind),
                    Esc(&l.attach),
                    Esc(label)
                );
            }
            Labels::Info(i) => {
                let _ = write!(
                    s,
                    "{{version=\"{}\",kernel=\"{}\",board=\"{}\",boot_id=\"{:08x}\"}}",
                    env!("CARGO_PKG_VERSION"),
                    Esc(&i.kernel),
                    Esc(&i.board),
                    i.boot_id
                );
            }
        }
    }
}

impl Exposition for Text<'_> {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) {
        self.name = name;
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.s, "# HELP {name} {help}");
        let _ = writeln!(self.s, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, labels: Labels<'_>, v: f64) {
        self.s.push_str(self.name);
        self.labels(labels, None);
        let _ = writeln!(self.s, " {v}");
    }

    fn histogram(&mut self, l: &Line) {
        let name = self.name;
        let h = &l.hist;
        let mut cum = 0u64;
        let mut from = 0usize;
        for k in LE_MIN_LOG2..=LE_MAX_LOG2 {
            let upto = bucket_index(1u64 << k);
            cum += h.slots[from..upto].iter().sum::<u64>();
            from = upto;
            let _ = write!(self.s, "{name}_bucket");
            self.labels(Labels::Line(l), Some(&secs(1u64 << k)));
            let _ = writeln!(self.s, " {cum}");
        }
        let _ = write!(self.s, "{name}_bucket");
        self.labels(Labels::Line(l), Some(&"+Inf"));
        let _ = writeln!(self.s, " {}", h.count);
        let _ = write!(self.s, "{name}_sum");
        self.labels(Labels::Line(l), None);
        let _ = writeln!(self.s, " {}", secs(h.sum_ns));
        let _ = write!(self.s, "{name}_count");
        self.labels(Labels::Line(l), None);
        let _ = writeln!(self.s, " {}", h.count);
    }
}

/// The text exposition of a snapshot (appending to `s`).
pub fn render_text(s: &mut String, snap: &Snapshot) {
    expose(snap, &mut Text { s, name: "" });
}

/// The protobuf exposition: `MetricFamily` messages, each encoded
/// length-delimited into `out` when the next one starts.
struct Proto<'a> {
    out: &'a mut Vec<u8>,
    map: &'a promhist::Map,
    counts: &'a mut [u64; SPAN],
    family: Option<pb::MetricFamily>,
    kind: Kind,
}

fn pair(name: &str, value: &str) -> pb::LabelPair {
    pb::LabelPair { name: Some(name.into()), value: Some(value.into()) }
}

fn labels_pb(labels: Labels<'_>) -> Vec<pb::LabelPair> {
    match labels {
        Labels::None => Vec::new(),
        Labels::Line(l) => vec![pair("probe", &l.probe), pair("kind", &l.kind), pair("attach", &l.attach)],
        Labels::Output(o) => vec![pair("output", o)],
        Labels::Cause(l, rank) => {
            let (rank, kind, label) = cause_labels(l, rank);
            vec![
                pair("probe", &l.probe),
                pair("kind", &l.kind),
                pair("attach", &l.attach),
                pair("rank", &rank),
                pair("cause_kind", kind),
                pair("cause", label),
            ]
        }
        Labels::Info(i) => vec![
            pair("version", env!("CARGO_PKG_VERSION")),
            pair("kernel", &i.kernel),
            pair("board", &i.board),
            pair("boot_id", &format!("{:08x}", i.boot_id)),
        ],
    }
}

impl Proto<'_> {
    fn flush(&mut self) {
        if let Some(f) = self.family.take() {
            // A family without samples is left out (the text format shows
            // its HELP/TYPE lines alone).
            if !f.metric.is_empty() {
                // Encoding into a Vec cannot run out of room.
                let _ = f.encode_length_delimited(self.out);
            }
        }
    }

    fn push(&mut self, m: pb::Metric) {
        if let Some(f) = self.family.as_mut() {
            f.metric.push(m);
        }
    }
}

impl Exposition for Proto<'_> {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) {
        self.flush();
        self.kind = kind;
        let t = match kind {
            Kind::Counter => pb::MetricType::Counter,
            Kind::Gauge => pb::MetricType::Gauge,
            Kind::Histogram => pb::MetricType::Histogram,
        };
        self.family = Some(pb::MetricFamily {
            name: Some(name.into()),
            help: Some(help.into()),
            r#type: Some(t as i32),
            metric: Vec::new(),
        });
    }

    fn sample(&mut self, labels: Labels<'_>, v: f64) {
        let mut m = pb::Metric { label: labels_pb(labels), ..Default::default() };
        match self.kind {
            Kind::Counter => m.counter = Some(pb::Counter { value: Some(v) }),
            _ => m.gauge = Some(pb::Gauge { value: Some(v) }),
        }
        self.push(m);
    }

    fn histogram(&mut self, l: &Line) {
        let h = &l.hist;
        let mut bucket = Vec::with_capacity(LE_MAX_LOG2 - LE_MIN_LOG2 + 1);
        let (mut cum, mut from) = (0u64, 0usize);
        for k in LE_MIN_LOG2..=LE_MAX_LOG2 {
            let upto = bucket_index(1u64 << k);
            cum += h.slots[from..upto].iter().sum::<u64>();
            from = upto;
            bucket.push(pb::Bucket { cumulative_count: Some(cum), upper_bound: Some(secs(1u64 << k)) });
        }
        self.counts.fill(0);
        let zero = self.map.fill(h, self.counts);
        let (mut spans, mut deltas) = (Vec::new(), Vec::new());
        promhist::sparse(self.counts, &mut spans, &mut deltas);
        // The native count is the buckets' sum (latmon's count in any
        // consistent read): a Prometheus that validates native histograms
        // rejects a count that differs from its buckets.
        let n = zero + self.counts.iter().sum::<u64>();
        let hist = pb::Histogram {
            sample_count: Some(n),
            sample_sum: Some(secs(h.sum_ns)),
            bucket,
            schema: Some(promhist::SCHEMA),
            zero_threshold: Some(promhist::ZERO_THRESHOLD_S),
            zero_count: Some(zero),
            positive_span: spans
                .into_iter()
                .map(|(o, n)| pb::BucketSpan { offset: Some(o), length: Some(n) })
                .collect(),
            positive_delta: deltas,
        };
        self.push(pb::Metric { label: labels_pb(Labels::Line(l)), histogram: Some(hist), ..Default::default() });
    }
}

/// The protobuf exposition of a snapshot (appending to `out`).
pub fn render_protobuf(out: &mut Vec<u8>, snap: &Snapshot, map: &promhist::Map, counts: &mut [u64; SPAN]) {
    let mut p = Proto { out, map, counts, family: None, kind: Kind::Gauge };
    expose(snap, &mut p);
    p.flush();
}

/// Fill a fresh snapshot from one interval (tests, and `render`).
pub fn snapshot(t: &Tick<'_>, series: u32) -> Snapshot {
    let mut s = Snapshot::default();
    s.fill(t, series, &mut Grouping::default());
    s
}

/// The text exposition for one interval (appending to `s`).
pub fn render(s: &mut String, t: &Tick<'_>) {
    render_text(s, &snapshot(t, SERIES_PER_FAMILY));
}

impl Sink for Prom {
    fn name(&self) -> &str {
        &self.name
    }

    fn emit(&mut self, t: &Tick<'_>) {
        self.snap.fill(t, self.series, &mut self.grouping);
        match self.slot.try_lock() {
            Ok(mut s) => {
                std::mem::swap(&mut *s, &mut self.snap);
                // Link stats arrive between emits (`see_link`) into the
                // snapshot the agent holds: carry them over.
                let (from, to) = (&s.links, &mut self.snap.links);
                to.resize_with(from.len(), || (String::new(), None));
                for ((tn, ts), (fnm, fs)) in to.iter_mut().zip(from) {
                    if tn != fnm {
                        copy_str(tn, fnm);
                    }
                    *ts = *fs;
                }
            }
            Err(_) => self.skipped += 1,
        }
    }

    fn see_link(&mut self, index: usize, name: &str, stats: LinkStats) {
        let links = &mut self.snap.links;
        if links.len() <= index {
            links.resize_with(index + 1, || (String::new(), None));
        }
        let (n, s) = &mut links[index];
        if n != name {
            copy_str(n, name);
        }
        *s = Some(stats);
    }

    fn close(&mut self, _timeout: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Prom {
    fn drop(&mut self) {
        self.close(Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use latmon_core::ident::{BtfMode, Family, Mechanism};
    use latmon_core::summary::{IntervalReport, ProbeInfo, ProbeReport};

    use super::*;
    use latmon_core::session::Session;

    #[test]
    fn addresses() {
        assert_eq!(parse_addr(":9477").unwrap(), "127.0.0.1:9477".parse().unwrap());
        assert_eq!(parse_addr("localhost:1").unwrap(), "127.0.0.1:1".parse().unwrap());
        assert_eq!(parse_addr("0.0.0.0:9477").unwrap(), "0.0.0.0:9477".parse().unwrap());
        assert_eq!(parse_addr("[::1]:9477").unwrap(), "[::1]:9477".parse().unwrap());
        for bad in ["", "9477", "host:9477", "1.2.3.4:x", "1.2.3.4:70000"] {
            assert!(parse_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_exact() {
        let mut h = Hist::default();
        for v in [100u64, 255, 256, 1_000, 1_023, 1_024, 5_000_000, 100_000_000_000] {
            h.record(v);
        }
        let info = ProbeInfo {
            name: "a\"b".into(),
            kind: Family::Runq,
            attach: Mechanism::TpBtf,
            mode: String::new(),
            btf_mode: BtfMode::CoRe,
            wait: Default::default(),
        };
        let session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 1,
            start_ns: 0,
            interval_ns: 1,
            probes: vec![info.clone()],
            failed: Vec::new(),
        };
        let report = IntervalReport {
            seq: 3,
            time_ns: 2_000_000_000,
            interval_ns: 1_000_000_000,
            probes: vec![ProbeReport::new(&info, &Hist::default(), &h)],
            ..Default::default()
        };
        let totals = [h];
        let mut s = String::new();
        render(&mut s, &Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] });
        let bucket = |le: &str| -> u64 {
            let key = format!(
                "latmon_latency_seconds_bucket{{probe=\"a\\\"b\",kind=\"runq\",attach=\"tp_btf\",le=\"{le}\"}} "
            );
            let line = s.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("{key} in {s}"));
            line[key.len()..].parse().unwrap()
        };
        assert_eq!(bucket("0.000000256"), 2, "100 and 255 ns; 256 ns is in the next bound");
        assert_eq!(bucket("0.000001024"), 5);
        assert_eq!(bucket("0.000002048"), 6);
        assert_eq!(bucket("0.008388608"), 7);
        assert_eq!(bucket("68.719476736"), 7);
        assert_eq!(bucket("+Inf"), 8);
        let les = s.lines().filter(|l| l.starts_with("latmon_latency_seconds_bucket")).count();
        assert_eq!(les, LE_MAX_LOG2 - LE_MIN_LOG2 + 2);
        assert!(s.contains("latmon_latency_seconds_count{probe=\"a\\\"b\",kind=\"runq\",attach=\"tp_btf\"} 8"));
        assert!(s.contains("latmon_summaries_total 3"));
    }

    fn info(name: &str, kind: &str) -> ProbeInfo {
        ProbeInfo {
            name: name.into(),
            kind: Family::parse(kind).unwrap(),
            attach: Mechanism::TpBtf,
            mode: String::new(),
            btf_mode: BtfMode::CoRe,
            wait: Default::default(),
        }
    }

    /// A session of `names` (kind from the name's first word) with `v`
    /// ns recorded `k + 1` times in the k-th probe.
    fn tick_of(names: &[&str], v: u64) -> (Session, IntervalReport, Vec<Hist>) {
        let probes: Vec<ProbeInfo> = names.iter().map(|n| info(n, n.split(':').next().unwrap())).collect();
        let totals: Vec<Hist> = (0..names.len())
            .map(|k| {
                let mut h = Hist::default();
                for _ in 0..=k {
                    h.record(v);
                }
                h.drops = 1;
                h
            })
            .collect();
        let report = IntervalReport {
            seq: 1,
            probes: probes.iter().zip(&totals).map(|(p, h)| ProbeReport::new(p, &Hist::default(), h)).collect(),
            ..Default::default()
        };
        let session = Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 1,
            start_ns: 0,
            interval_ns: 1,
            probes,
            failed: Vec::new(),
        };
        (session, report, totals)
    }

    #[test]
    fn alerted_time_and_its_top_causes_per_line() {
        use latmon_core::causes::{CauseId, TopCause};
        let (session, mut report, totals) = tick_of(&["timer", "runq", "syscall"], 1_000);
        let cause = |id, name: &str, ns| TopCause { id, name: name.into(), ns };
        report.probes[0].alert_causes = Some(CauseSummary {
            alerts: 4,
            alerted_ns: 1_000_000,
            causes: vec![
                cause(CauseId::Task { pid: 4242 }, "hog\"x", 900_000),
                cause(CauseId::Irq { irq: 36 }, "virtio1", 60_000),
                cause(CauseId::Softirq { vector: 3 }, "", 30_000),
                cause(CauseId::Other, "", 10_000),
            ],
            total_alerts: 9,
            total_alerted_ns: 2_500_000_000,
            ..Default::default()
        });
        // A probe with a tally but no alert this interval: its counter only.
        report.probes[1].alert_causes = Some(CauseSummary { total_alerted_ns: 7, ..Default::default() });
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
        let mut text = String::new();
        render(&mut text, &t);
        let l = "probe=\"timer\",kind=\"timer\",attach=\"tp_btf\"";
        for want in [
            format!("latmon_probe_alerted_seconds_total{{{l}}} 2.5\n"),
            "latmon_probe_alerted_seconds_total{probe=\"runq\",kind=\"runq\",attach=\"tp_btf\"} 0.000000007\n".into(),
            format!("latmon_probe_alerted_cause_ratio{{{l},rank=\"1\",cause_kind=\"task\",cause=\"hog\\\"x\"}} 0.9\n"),
            format!("latmon_probe_alerted_cause_ratio{{{l},rank=\"2\",cause_kind=\"irq\",cause=\"irq 36 virtio1\"}} 0.06\n"),
            format!("latmon_probe_alerted_cause_ratio{{{l},rank=\"3\",cause_kind=\"softirq\",cause=\"softirq NET_RX\"}} 0.03\n"),
        ] {
            assert!(text.contains(&want), "{want} in {text}");
        }
        assert_eq!(text.matches("latmon_probe_alerted_cause_ratio{").count(), 3, "the top 3 only: {text}");
        assert!(!text.contains("latmon_probe_alerted_seconds_total{probe=\"syscall\""), "no tally, no line: {text}");
        // Protobuf: the same samples, labels included.
        let mut pb_out = Vec::new();
        let map = promhist::Map::new();
        let mut counts = [0u64; SPAN];
        render_protobuf(&mut pb_out, &snapshot(&t, SERIES_PER_FAMILY), &map, &mut counts);
        let mut buf = &pb_out[..];
        let mut found = None;
        while !buf.is_empty() {
            let f = pb::MetricFamily::decode_length_delimited(&mut buf).unwrap();
            if f.name.as_deref() == Some("latmon_probe_alerted_cause_ratio") {
                found = Some(f);
            }
        }
        let f = found.expect("the ratio family in protobuf");
        assert_eq!(f.metric.len(), 3);
        let m = &f.metric[0];
        let label = |k: &str| m.label.iter().find(|p| p.name.as_deref() == Some(k)).and_then(|p| p.value.clone());
        assert_eq!((label("rank").as_deref(), label("cause").as_deref()), (Some("1"), Some("hog\"x")));
        assert_eq!(m.gauge.as_ref().and_then(|g| g.value), Some(0.9));
    }

    /// A task renaming itself every interval (or a fork storm) cannot
    /// grow the fleet's series: task labels carry no pid, and past
    /// TASK_NAMES_MAX names per line the rest read `other tasks`.
    #[test]
    fn task_names_in_cause_labels_are_bounded_whatever_tasks_call_themselves() {
        use latmon_core::causes::TopCause;
        let (session, mut report, totals) = tick_of(&["timer"], 1_000);
        let (mut snap, mut g) = (Snapshot::default(), Grouping::default());
        let mut labels = std::collections::BTreeSet::new();
        for k in 0..100u32 {
            let task = |pid, name: String, ns| TopCause { id: CauseId::Task { pid }, name, ns };
            report.probes[0].alert_causes = Some(CauseSummary {
                alerts: 1,
                alerted_ns: 100,
                causes: vec![task(1000 + k, format!("ren{k}"), 90), task(7, "ctrl".into(), 10)],
                ..Default::default()
            });
            let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] };
            snap.fill(&t, SERIES_PER_FAMILY, &mut g);
            let mut text = String::new();
            render_text(&mut text, &snap);
            for l in text.lines().filter(|l| l.starts_with("latmon_probe_alerted_cause_ratio{")) {
                labels.insert(l.split("cause=\"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_string());
            }
        }
        let want: std::collections::BTreeSet<String> =
            (0..7).map(|k| format!("ren{k}")).chain(["ctrl".into(), OTHER_TASKS.into()]).collect();
        assert_eq!(labels, want, "the first {TASK_NAMES_MAX} names, then `other tasks`");
    }

    /// At the connection limit a newcomer displaces the oldest connection
    /// still sending its request head, never one being answered.
    #[test]
    fn a_newcomer_displaces_the_oldest_connection_still_reading() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(displaced([(at(5), false), (at(1), true), (at(2), false)].into_iter()), Some(2));
        assert_eq!(displaced([(at(5), true), (at(1), true)].into_iter()), None, "answers are never cut");
        assert_eq!(displaced(std::iter::empty()), None);
    }

    #[test]
    fn accept_header_negotiation() {
        // What Prometheus 2.42 sends with --enable-feature=native-histograms.
        let prom = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(negotiate(Some(prom)), Format::Protobuf);
        // Without it (and everyone else).
        assert_eq!(negotiate(Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")), Format::Text);
        assert_eq!(negotiate(None), Format::Text);
        assert_eq!(negotiate(Some("text/plain")), Format::Text);
        assert_eq!(negotiate(Some("*/*")), Format::Text);
        // Protobuf only when it is the delimited MetricFamily stream, q > 0,
        // and not below the text types.
        assert_eq!(
            negotiate(Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text")),
            Format::Text
        );
        assert_eq!(negotiate(Some("application/vnd.google.protobuf;encoding=delimited")), Format::Text);
        assert_eq!(
            negotiate(Some(
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; q=0"
            )),
            Format::Text
        );
        assert_eq!(negotiate(Some("text/plain;q=0.9, application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5")), Format::Text);
        assert_eq!(
            negotiate(Some(
                "Application/Vnd.Google.Protobuf; proto=\"io.prometheus.client.MetricFamily\"; encoding=delimited"
            )),
            Format::Protobuf
        );
        assert_eq!(header("GET /metrics HTTP/1.1\r\nHost: x\r\naccept: a/b\r\n", "Accept"), Some("a/b"));
        assert_eq!(header("GET /metrics HTTP/1.1\r\nHost: x\r\n", "Accept"), None);
    }

    #[test]
    fn sink_options() {
        assert_eq!(parse_word(":9477").unwrap().1, SERIES_PER_FAMILY);
        assert_eq!(parse_word(":9477,series=4").unwrap().1, 4);
        assert_eq!(parse_word(":9477,series=0").unwrap().1, 0);
        for bad in [":9477,series=", ":9477,series=513", ":9477,series=-1", ":9477,x=1", ":9477,"] {
            let e = parse_word(bad).unwrap_err();
            assert!(e.contains("series=N"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_family_past_its_series_limit_folds_the_rest_into_one_counted_line() {
        // The family "syscall" with 6 series, a probe of another kind with a
        // colon in its name, and a probe after the series.
        let names = [
            "syscall",
            "syscall:read",
            "runq:x",
            "syscall:write",
            "syscall:a",
            "syscall:b",
            "syscall:c",
            "syscall:d",
            "runq",
        ];
        let (session, report, totals) = tick_of(&names, 5_000);
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0, 0, 0, 0, 0, 0, 0] };
        let snap = snapshot(&t, 3);
        let shown: Vec<&str> = snap.lines().iter().map(|l| l.probe.as_str()).collect();
        assert_eq!(
            shown,
            ["syscall", "syscall:read", "runq:x", "syscall:write", "syscall:a", "syscall:folded", "runq"]
        );
        let folded = &snap.lines()[5];
        // syscall:b, :c, :d are probes 5, 6, 7: 6 + 7 + 8 events.
        assert_eq!((folded.hist.count, folded.hist.drops, folded.kind.as_str()), (21, 3, "syscall"));
        assert_eq!(folded.hist.slots.iter().sum::<u64>(), 21);
        assert_eq!(snap.lines()[0].folded, Some(3));
        assert!(snap.lines()[1..].iter().all(|l| l.folded.is_none()));
        let mut text = String::new();
        render_text(&mut text, &snap);
        assert!(
            text.contains("latmon_series_folded{probe=\"syscall\",kind=\"syscall\",attach=\"tp_btf\"} 3"),
            "{text}"
        );
        assert!(text
            .contains("latmon_latency_seconds_count{probe=\"syscall:folded\",kind=\"syscall\",attach=\"tp_btf\"} 21"));
        assert!(
            text.contains("latmon_probe_drops_total{probe=\"syscall:folded\",kind=\"syscall\",attach=\"tp_btf\"} 3")
        );
        // The bound: 128 series of one family show as limit + 2 lines.
        let many: Vec<String> =
            std::iter::once("syscall".to_string()).chain((0..127).map(|k| format!("syscall:s{k}"))).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let (session, report, totals) = tick_of(&refs, 1_000);
        let errs = vec![0u64; refs.len()];
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &errs };
        let snap = snapshot(&t, SERIES_PER_FAMILY);
        assert_eq!(snap.lines().len(), SERIES_PER_FAMILY as usize + 2);
        assert_eq!(snap.lines()[0].folded, Some(127 - SERIES_PER_FAMILY));
        let all: u64 = totals[1..].iter().map(|h| h.count).sum();
        assert_eq!(snap.lines()[1..].iter().map(|l| l.hist.count).sum::<u64>(), all, "nothing lost in the fold");
        // Under the limit nothing is folded; a family says so (0).
        let (session, report, totals) = tick_of(&["syscall", "syscall:read"], 1_000);
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0] };
        let mut text = String::new();
        render(&mut text, &t);
        assert!(
            text.contains("latmon_series_folded{probe=\"syscall\",kind=\"syscall\",attach=\"tp_btf\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn the_snapshot_is_reused_without_allocating_new_lines() {
        let (session, report, totals) = tick_of(&["runq", "syscall", "syscall:read"], 1_000);
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0, 0, 0] };
        let (mut snap, mut g) = (Snapshot::default(), Grouping::default());
        snap.fill(&t, 16, &mut g);
        let cap = (snap.lines.capacity(), snap.lines[2].probe.capacity());
        snap.fill(&t, 16, &mut g);
        assert_eq!((snap.lines.capacity(), snap.lines[2].probe.capacity()), cap);
        assert_eq!(snap.lines().len(), 3);
    }

    #[test]
    fn protobuf_has_the_same_metrics_with_native_and_classic_buckets() {
        let mut h = Hist::default();
        for v in [0u64, 3, 100, 1_000, 1_024, 5_000_000, 100_000_000_000] {
            h.record(v);
        }
        let (session, mut report, _) = tick_of(&["runq"], 1);
        report.agent.degraded = true;
        let totals = [h.clone()];
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[2] };
        let snap = snapshot(&t, SERIES_PER_FAMILY);
        let mut text = String::new();
        render_text(&mut text, &snap);
        let (map, mut counts) = (promhist::Map::new(), Box::new([0u64; SPAN]));
        let mut buf = Vec::new();
        render_protobuf(&mut buf, &snap, &map, &mut counts);
        let mut rd = &buf[..];
        let mut fams = Vec::new();
        while !rd.is_empty() {
            fams.push(pb::MetricFamily::decode_length_delimited(&mut rd).expect("a delimited MetricFamily"));
        }
        // The same families, in the same order, as the text's TYPE lines.
        let text_names: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
        let pb_names: Vec<&str> = fams.iter().map(|f| f.name.as_deref().unwrap()).collect();
        assert_eq!(pb_names, text_names);
        let fam = |n: &str| fams.iter().find(|f| f.name.as_deref() == Some(n)).unwrap();
        assert_eq!(fam("latmon_degraded").metric[0].gauge.as_ref().unwrap().value, Some(1.0));
        let re = &fam("latmon_probe_read_errors_total");
        assert_eq!(re.r#type, Some(pb::MetricType::Counter as i32));
        assert_eq!(re.metric[0].counter.as_ref().unwrap().value, Some(2.0));
        let labels: Vec<(String, String)> =
            re.metric[0].label.iter().map(|p| (p.name.clone().unwrap(), p.value.clone().unwrap())).collect();
        assert_eq!(
            labels,
            [("probe".into(), "runq".into()), ("kind".into(), "runq".into()), ("attach".into(), "tp_btf".into())]
        );
        let hist = fam("latmon_latency_seconds").metric[0].histogram.clone().unwrap();
        assert_eq!((hist.sample_count, hist.schema, hist.zero_count), (Some(7), Some(3), Some(1)));
        assert!(hist.zero_threshold.unwrap() > 0.0 && hist.zero_threshold.unwrap() < 1e-9);
        // Classic buckets as in the text (without +Inf, which is implied).
        assert_eq!(hist.bucket.len(), LE_MAX_LOG2 - LE_MIN_LOG2 + 1);
        for b in &hist.bucket {
            let le = format!("le=\"{}\"}} {}", b.upper_bound.unwrap(), b.cumulative_count.unwrap());
            assert!(
                text.lines().any(|l| l.starts_with("latmon_latency_seconds_bucket{probe=\"runq\"") && l.ends_with(&le)),
                "{le}"
            );
        }
        // Native buckets: decode spans and deltas back into counts.
        let mut got = vec![];
        let (mut idx, mut count) = (0i32, 0i64);
        let mut d = hist.positive_delta.iter();
        for (k, s) in hist.positive_span.iter().enumerate() {
            idx += s.offset.unwrap() + if k == 0 { 0 } else { 1 };
            for j in 0..s.length.unwrap() {
                count += d.next().unwrap();
                got.push((idx + j as i32, count as u64));
            }
            idx += s.length.unwrap() as i32 - 1;
        }
        assert!(d.next().is_none());
        counts.fill(0);
        assert_eq!(map.fill(&h, &mut counts), 1);
        let want: Vec<(i32, u64)> =
            (0..SPAN).filter(|&k| counts[k] > 0).map(|k| (k as i32 + promhist::INDEX_MIN, counts[k])).collect();
        assert_eq!(want.iter().map(|w| w.1).sum::<u64>(), 6, "every non-zero event in a native bucket");
        assert_eq!(got, want);
    }

    /// A sink that reports link stats (as a queue-based output does).
    struct Reporting(LinkStats);

    impl Sink for Reporting {
        fn name(&self) -> &str {
            "serial:/dev/ttyS1@115200"
        }
        fn emit(&mut self, _: &Tick<'_>) {}
        fn close(&mut self, _: Duration) {}
        fn link_stats(&self) -> Option<LinkStats> {
            Some(self.0)
        }
    }

    #[test]
    fn every_outputs_link_trouble_is_shown() {
        let (session, report, totals) = tick_of(&["runq"], 1_000);
        let t = Tick { session: &session, report: &report, totals: &totals, read_errors: &[0] };
        let mut sinks: Vec<Box<dyn Sink>> = vec![
            Box::new(Reporting(LinkStats { dropped: 7, errors: 0 })),
            Box::new(open("127.0.0.1:0").unwrap()),
            Box::new(Reporting(LinkStats { dropped: 0, errors: 3 })),
        ];
        let addr = {
            // The Prom sink, to read what it published.
            let p: &dyn Sink = &*sinks[1];
            p.name().trim_start_matches(SCHEME).to_string()
        };
        for _ in 0..3 {
            crate::sinks::share_link_stats(&mut sinks);
            for s in sinks.iter_mut() {
                s.emit(&t);
            }
        }
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        for s in sinks.iter_mut() {
            s.close(Duration::from_secs(1));
        }
        assert!(text.contains("latmon_output_dropped_total{output=\"serial:/dev/ttyS1@115200\"} 7"), "{text}");
        assert!(text.contains("latmon_output_errors_total{output=\"serial:/dev/ttyS1@115200\"} 3"), "{text}");
        assert_eq!(
            text.matches("latmon_output_dropped_total{").count(),
            2,
            "two outputs with links; not the Prometheus one"
        );
    }
}
