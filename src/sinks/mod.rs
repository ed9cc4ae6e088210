// SPDX-License-Identifier: MIT
//! Where summaries go: stdout, serial lines, TCP/Unix listeners, UDP,
//! files — several at once. Every output renders on the agent's thread
//! (text, JSON or wire frames, into buffers allocated once) and hands the
//! bytes to its own writer thread through a bounded [`queue::Queue`]: a
//! slow, blocked or unplugged link never delays aggregation; what does not
//! fit is dropped, counted, reported in Status frames and logged.

pub mod budget;
pub mod modbus;
pub mod net;
pub mod prom;
pub mod prom_pb;
pub mod queue;
pub mod serial;
pub mod source;
pub mod spec;

use std::io::{self, Write};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latmon_core::session::Tick;
use latmon_core::summary::{IntervalReport, ProbeState};
use latmon_core::table::{TextRender, TextStyle};
use latmon_core::wire::{self, Encoder, Hello, ProbeHealth, ProbeMissed, Status, SummaryHeader};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};

use crate::config::Format;
use queue::{Pop, Queue};
use spec::{Endpoint, LinkSpec};

/// An output link's trouble since start (the Prometheus output shows
/// every output's as `latmon_output_dropped_total` and
/// `latmon_output_errors_total`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Records (frames, lines) dropped: the link was slower than the
    /// summaries, or down.
    pub dropped: u64,
    /// Damaged or malformed requests received (Modbus).
    pub errors: u64,
}

/// A destination for interval summaries.
pub trait Sink: Send {
    fn name(&self) -> &str;
    /// Render and queue; never waits for I/O.
    fn emit(&mut self, t: &Tick<'_>);
    /// Flush what is queued (waiting at most `timeout`) and stop.
    fn close(&mut self, timeout: Duration);
    /// This output's link trouble since start; None when it has no link
    /// of its own to report on.
    fn link_stats(&self) -> Option<LinkStats> {
        None
    }
    /// Output `index` (named `name`) reports `stats`: called for every
    /// reporting output before each `emit`. Ignored unless the output
    /// shows them.
    fn see_link(&mut self, _index: usize, _name: &str, _stats: LinkStats) {}
}

/// Show every output's link stats to every other output (before `emit`).
pub fn share_link_stats(sinks: &mut [Box<dyn Sink>]) {
    for k in 0..sinks.len() {
        let Some(st) = sinks[k].link_stats() else { continue };
        let (before, rest) = sinks.split_at_mut(k);
        let Some((me, after)) = rest.split_first_mut() else { continue };
        for s in before.iter_mut().chain(after.iter_mut()) {
            s.see_link(k, me.name(), st);
        }
    }
}

/// Hello (and Status) go out at least this often...
pub const HELLO_PERIOD_NS: u64 = 10_000_000_000;
/// ...and at least every this many summaries.
pub const HELLO_EVERY_SUMMARIES: u32 = 32;
/// Queue capacity of outputs other than serial lines.
pub const QUEUE_BYTES: usize = 256 * 1024;
/// Serial outputs queue about this much link time (more is stale data)...
const SERIAL_QUEUE_TIME: Duration = Duration::from_secs(2);
/// ...but at least this much: on a slow line (9600/19200 baud) the table
/// rows of the series born in the first seconds (~120 rows, ~5 KB) come at
/// once and must not be dropped; the budget, not the queue, paces the line.
const SERIAL_QUEUE_MIN_BYTES: usize = 16 * 1024;
/// A serial driver's own transmit buffer (Linux's UART and pty buffers
/// hold about a page): what may still be ahead of the queue at exit.
const SERIAL_DRIVER_BYTES: usize = 4096;
/// Margin of a serial output's exit flush over what its line needs.
const SERIAL_FLUSH_MARGIN: Duration = Duration::from_secs(1);

/// How long a serial output at `line_bps` bytes per second may flush at
/// exit, with `queued` bytes queued and a queue of `cap` bytes: what the
/// line needs for them and the driver's buffer ahead of them, plus a
/// margin, never less than `floor`; bounded by a full queue and driver
/// buffer (22.4 s at 9600 baud, 11.7 s at 19200, 3.4 s at 115200 8N1).
pub fn serial_flush_time(line_bps: u64, queued: usize, cap: usize, floor: Duration) -> Duration {
    let line = line_bps.max(1) as f64;
    let need = (queued.min(cap) + SERIAL_DRIVER_BYTES) as f64 / line;
    floor.max(Duration::from_secs_f64(need) + SERIAL_FLUSH_MARGIN)
}

/// How often a vanished serial device is looked for again.
pub const REOPEN_PERIOD: Duration = Duration::from_secs(1);
/// Drop reports in the log at most this often per output.
const DROP_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Open an output from its SINK word; `global` is `--format` (or the
/// config's `format`) when given. Network addresses are bound and files
/// opened now, so mistakes fail at startup; a serial device that is absent
/// is only reported: it is opened as soon as it appears.
pub fn open(word: &str, global: Option<Format>) -> Result<Box<dyn Sink>, String> {
    open_with(word, global, TextStyle::default())
}

/// [`open`] with what its text shows (`--sort`, `--hist`; CR LF on a
/// serial line is set here, whatever `text` says).
pub fn open_with(word: &str, global: Option<Format>, text: TextStyle) -> Result<Box<dyn Sink>, String> {
    if spec::is_modbus(word) {
        // A register map for PLCs: no format, its own server.
        return modbus::open(word);
    }
    if let Some(addr) = word.strip_prefix(prom::SCHEME) {
        return prom::open(addr).map(|s| Box::new(s) as Box<dyn Sink>);
    }
    let spec = LinkSpec::parse(word).map_err(|e| e.to_string())?;
    let format = spec.effective_format(global);
    let name = spec.endpoint.to_string();
    let frames = format == Format::Frames;
    let serial_text = matches!(spec.endpoint, Endpoint::Serial(_)) && format == Format::Text;
    let cap = match &spec.endpoint {
        Endpoint::Serial(s) => {
            (s.baud as usize / 10 * SERIAL_QUEUE_TIME.as_secs() as usize).clamp(SERIAL_QUEUE_MIN_BYTES, QUEUE_BYTES)
        }
        _ => QUEUE_BYTES,
    };
    let q = Arc::new(Queue::new(cap));
    let line_bps = match &spec.endpoint {
        Endpoint::Serial(s) => Some(s.bytes_per_s() as u64),
        _ => None,
    };
    let max_clients = spec.clients.unwrap_or(spec::STREAM_DEFAULT_CLIENTS);
    let writer: Box<dyn FnOnce(&Queue) + Send> = match spec.endpoint.clone() {
        Endpoint::Stdio => {
            let n = name.clone();
            Box::new(move |q: &Queue| stream_writer(q, &n, frames, Some(Box::new(io::stdout())), None, None))
        }
        Endpoint::File(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| format!("output {word}: {e}"))?;
            let n = name.clone();
            // A second handle to cut a failed write back off the file.
            let undo = f.try_clone().map_err(|e| format!("output {word}: {e}"))?;
            Box::new(move |q: &Queue| stream_writer(q, &n, frames, Some(Box::new(f)), None, Some(undo)))
        }
        Endpoint::Serial(s) => {
            // Opened by the writer thread right away, and again whenever it
            // fails: an absent device is reported, never fatal.
            let n = name.clone();
            let (qr, nr) = (q.clone(), name.clone());
            let open = move || {
                serial::open(&s, Duration::from_secs(1)).map(|p| {
                    // Receivers may ask for the table over the same line.
                    if frames {
                        serial::watch_requests(&p, qr.clone(), &nr);
                    }
                    Box::new(p) as Box<dyn Write + Send>
                })
            };
            Box::new(move |q: &Queue| stream_writer(q, &n, frames, None, Some(Box::new(open)), None))
        }
        Endpoint::Tcp(addr) => {
            let l = net::Listener::bind_tcp(&addr).map_err(|e| format!("output {word}: listen: {e}"))?;
            log::info!("output {name}: listening on {}, at most {max_clients} clients", l.local_addr());
            let n = name.clone();
            Box::new(move |q: &Queue| net::serve(q, &n, l, frames, max_clients))
        }
        Endpoint::Unix(path) => {
            let l = net::Listener::bind_unix(&path).map_err(|e| format!("output {word}: listen: {e}"))?;
            let n = name.clone();
            Box::new(move |q: &Queue| net::serve(q, &n, l, frames, max_clients))
        }
        Endpoint::Udp(addr) => {
            let s = net::udp_to(&addr).map_err(|e| format!("output {word}: {e}"))?;
            let n = name.clone();
            Box::new(move |q: &Queue| net::send_udp(q, &n, s))
        }
    };
    let render = match format {
        Format::Text => Render::Text(Box::new(TextRender::new(TextStyle { crlf: serial_text, ..text }))),
        Format::Json => Render::Json(Vec::with_capacity(16 * 1024)),
        Format::Frames => {
            let mut f = Box::<FrameRender>::default();
            f.budget = spec.budget_bps().map(|b| Box::new(budget::BudgetedFrames::new(b)));
            if let Some(b) = spec.budget_bps() {
                log::info!(
                    "output {name}: budget {b} B/s (delta summaries, keyframes at least every {} s)",
                    budget::KEYFRAME_MAX_NS / 1_000_000_000
                );
            }
            Render::Frames(f)
        }
    };
    let (thread, done) = spawn_writer(&name, q.clone(), writer).map_err(|e| format!("output {word}: {e}"))?;
    Ok(Box::new(Output {
        name,
        render,
        q,
        thread: Some(thread),
        done,
        dropped_logged: 0,
        last_drop_log: None,
        line_bps,
    }))
}

/// Open every output of a config (`latmon run`): as [`open_with`] each,
/// refusing the config when an output writes the file or device of an
/// earlier one ([`shared_target`]). Two listening on one address fail as the second
/// bind does ("Address already in use").
pub fn open_all(words: &[String], global: Option<Format>, text: TextStyle) -> Result<Vec<Box<dyn Sink>>, String> {
    // Before any output opens: a refused config creates no file.
    if let Some(e) = (0..words.len()).find_map(|i| shared_target(words, i)) {
        return Err(e);
    }
    words.iter().map(|w| open_with(w, global, text)).collect()
}

/// What `latmon check` does for a config's outputs: what [`open_all`]
/// would refuse, each output's verdict. Every listening address stays
/// bound until all are checked, so two outputs on one address clash as
/// they do in `run`.
pub fn check_all(words: &[String], global: Option<Format>) -> Vec<Result<Option<String>, String>> {
    let mut held = Vec::new();
    (0..words.len())
        .map(|i| match shared_target(words, i) {
            Some(e) => Err(e),
            None => check(&words[i], global, &mut held),
        })
        .collect()
}

/// The file, device or socket path an output writes (canonical: a
/// symlink or `./x` names its target), with what it is; None for outputs
/// without one (stdout, network).
fn target_of(word: &str) -> Option<(&'static str, std::path::PathBuf)> {
    let (what, path) = if spec::is_modbus(word) {
        match spec::ModbusSpec::parse(word).ok()?.transport {
            spec::ModbusTransport::Rtu(s) => ("device", s.path),
            spec::ModbusTransport::Tcp(_) => return None,
        }
    } else if word.starts_with(prom::SCHEME) {
        return None;
    } else {
        match LinkSpec::parse(word).ok()?.endpoint {
            Endpoint::File(p) => ("file", p),
            Endpoint::Serial(s) => ("device", s.path),
            Endpoint::Unix(p) => ("socket", p),
            Endpoint::Stdio | Endpoint::Tcp(_) | Endpoint::Udp(_) => return None,
        }
    };
    let mut p = std::path::PathBuf::from(&path);
    // A dangling symlink names the file it would create (links of links
    // followed a few deep).
    for _ in 0..8 {
        let Ok(to) = std::fs::read_link(&p) else { break };
        p = p.parent().unwrap_or(std::path::Path::new("")).join(to);
    }
    let p = p.as_path();
    let canonical = std::fs::canonicalize(p).ok().or_else(|| {
        // Not there yet: its directory's canonical path and its name.
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
    });
    Some((what, canonical.unwrap_or_else(|| p.to_path_buf())))
}

/// Output `i` writes the file, device or socket of an earlier output:
/// the error that refuses it (each record would go out twice, the two
/// streams interleaved; a second socket would take the first's path).
pub fn shared_target(words: &[String], i: usize) -> Option<String> {
    let (what, mine) = target_of(&words[i])?;
    let j = (0..i).find(|&j| target_of(&words[j]).is_some_and(|(_, t)| t == mine))?;
    Some(format!(
        "output {}: the same {what} as output {} ({}): every record would be written twice",
        words[i],
        j + 1,
        words[j]
    ))
}

/// What `latmon check` does for an output: everything [`open`] would do
/// that can fail - parse the word (with the parsers `open` uses), bind
/// the listening address (held in `held`, so that a later output on the
/// same address fails as in `run`), check the file's or socket's
/// directory - without starting a thread, creating a file or taking a
/// socket path from a running latmon. A serial device that is absent is
/// not an error (run waits for it either); the returned note says so.
pub fn check(
    word: &str,
    global: Option<Format>,
    held: &mut Vec<std::net::TcpListener>,
) -> Result<Option<String>, String> {
    let mut bind = |addr: &str| {
        std::net::TcpListener::bind(addr)
            .map(|l| held.push(l))
            .map_err(|e| format!("output {word}: listen on {addr}: {e}"))
    };
    if spec::is_modbus(word) {
        let m = spec::ModbusSpec::parse(word).map_err(|e| e.to_string())?;
        return match m.transport {
            spec::ModbusTransport::Tcp(t) => bind(&t.addr).map(|()| None),
            spec::ModbusTransport::Rtu(s) => Ok(serial_note(&s.path)),
        };
    }
    if let Some(addr) = word.strip_prefix(prom::SCHEME) {
        let (sa, _) = prom::parse_word(addr)?;
        return bind(&sa.to_string()).map(|()| None);
    }
    let spec = LinkSpec::parse(word).map_err(|e| e.to_string())?;
    let _ = spec.effective_format(global);
    match &spec.endpoint {
        Endpoint::Stdio => Ok(None),
        Endpoint::Serial(s) => Ok(serial_note(&s.path)),
        Endpoint::Tcp(addr) => bind(addr).map(|()| None),
        Endpoint::Udp(addr) => net::udp_to(addr).map(|_| None).map_err(|e| format!("output {word}: {e}")),
        Endpoint::Unix(path) => {
            dir_writable(path).map_err(|e| format!("output {word}: {e}"))?;
            match std::fs::symlink_metadata(path) {
                Ok(m) if !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
                    Err(format!("output {word}: {path} exists and is not a socket"))
                }
                _ => Ok(None),
            }
        }
        Endpoint::File(path) => match std::fs::metadata(path) {
            // Appending to an existing file: open it as run would (no
            // truncation; nothing is written).
            Ok(_) => std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map(|_| None)
                .map_err(|e| format!("output {word}: {e}")),
            Err(_) => dir_writable(path).map(|()| None).map_err(|e| format!("output {word}: {e}")),
        },
    }
}

/// The directory `path` would be created in exists and is writable.
fn dir_writable(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!("directory {} does not exist", dir.display()));
    }
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).map_err(|e| format!("directory {}: {e}", dir.display()))
}

fn serial_note(path: &str) -> Option<String> {
    (!std::path::Path::new(path).exists()).then(|| format!("{path} is absent now; latmon run opens it when it appears"))
}

/// Start a writer thread with the agent's signals blocked.
fn spawn_writer(
    name: &str,
    q: Arc<Queue>,
    writer: Box<dyn FnOnce(&Queue) + Send>,
) -> io::Result<(JoinHandle<()>, mpsc::Receiver<()>)> {
    let (tx, rx) = mpsc::channel();
    let thread = spawn_blocked(&format!("latmon-out {name}"), move || {
        writer(&q);
        let _ = tx.send(());
    })?;
    Ok((thread, rx))
}

/// Start an output thread with SIGINT/SIGTERM/SIGHUP blocked (the agent
/// collects them synchronously; an output thread must never be the thread
/// they hit). The name is cut to the kernel's 15 bytes.
pub(crate) fn spawn_blocked(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGHUP);
    let old = stop.thread_swap_mask(SigmaskHow::SIG_BLOCK).map_err(io::Error::from)?;
    let res = std::thread::Builder::new().name(name.chars().take(15).collect()).spawn(f);
    let _ = old.thread_set_mask();
    res
}

/// Opens a stream output again after it failed.
type Reopen = Box<dyn FnMut() -> io::Result<Box<dyn Write + Send>> + Send>;

/// Writer for byte streams: stdout, files, serial lines. With `reopen`, a
/// link that fails (USB-serial unplugged) is closed and opened again every
/// [`REOPEN_PERIOD`]; what arrives meanwhile is dropped and counted.
///
/// Only whole records stay: a write that fails (a full disk) may have put
/// part of its records out. A file (`undo`, the same file) is cut back to
/// its length before that write; a stream that cannot be cut starts its
/// next write with a delimiter - frames: 0x00, text and JSON: a newline,
/// so the next record starts a line of its own and only the damaged line
/// is unreadable. The failed write's records are counted dropped.
fn stream_writer(
    q: &Queue,
    name: &str,
    frames: bool,
    mut w: Option<Box<dyn Write + Send>>,
    mut reopen: Option<Reopen>,
    undo: Option<std::fs::File>,
) {
    let (mut data, mut lens, mut pre) = (Vec::new(), Vec::new(), Vec::new());
    // A delimiter first, so a receiver resyncs even after a partial frame
    // (a failed write, an earlier run appending to the same file); after
    // reopening, Hello too, for a receiver that came with the device.
    let delimiter = if frames { wire::DELIMITER } else { b'\n' };
    let mut sync = frames;
    let mut send_hello = false;
    let mut next_try = Instant::now();
    let mut opened_before = w.is_some();
    let mut last_err = String::new();
    let mut warned_write = false;
    loop {
        if w.is_none() && Instant::now() >= next_try {
            if let Some(open) = reopen.as_mut() {
                match open() {
                    Ok(x) => {
                        // Only a first attempt that succeeds comes before
                        // the first Hello is queued; any later open sends it.
                        let late = opened_before || !last_err.is_empty();
                        if late {
                            log::warn!("output {name}: open");
                        } else {
                            log::info!("output {name}: open");
                        }
                        send_hello = frames && late;
                        if send_hello {
                            q.request_resync();
                        }
                        opened_before = true;
                        w = Some(x);
                        sync = frames;
                        last_err.clear();
                    }
                    Err(e) => {
                        if e.to_string() != last_err {
                            log::warn!("output {name}: cannot open ({e}); trying again every {REOPEN_PERIOD:?}");
                            last_err = e.to_string();
                        }
                        next_try = Instant::now() + REOPEN_PERIOD;
                    }
                }
            }
        }
        match q.pop(&mut data, &mut lens, Duration::from_millis(200)) {
            Pop::Closed => return,
            Pop::Empty => continue,
            Pop::Data => {}
        }
        let Some(out) = w.as_mut() else {
            q.note_dropped(lens.len(), data.len());
            continue;
        };
        pre.clear();
        if sync {
            pre.push(delimiter);
        }
        if send_hello {
            q.hello(&mut pre);
        }
        let before = undo.as_ref().and_then(|f| f.metadata().ok()).map(|m| m.len());
        let res = out.write_all(&pre).and_then(|()| out.write_all(&data)).and_then(|()| out.flush());
        match res {
            Ok(()) => {
                sync = false;
                send_hello = false;
                warned_write = false;
            }
            Err(e) => {
                // Part of a record may be out: cut it off, or start the
                // next write with a delimiter, so only this chunk is lost.
                let cut = match (undo.as_ref(), before) {
                    (Some(f), Some(len)) => f.set_len(len).is_ok(),
                    _ => false,
                };
                sync = frames || !cut;
                q.note_dropped(lens.len(), data.len());
                if reopen.is_some() && e.kind() != io::ErrorKind::TimedOut {
                    log::warn!("output {name}: {e}: closing; trying to open again every {REOPEN_PERIOD:?}");
                    w = None;
                    next_try = Instant::now() + REOPEN_PERIOD;
                } else if !warned_write {
                    log::warn!("output {name}: write: {e}");
                    warned_write = true;
                }
            }
        }
        if q.deadline().is_some_and(|d| Instant::now() >= d) {
            return;
        }
    }
}

enum Render {
    Text(Box<TextRender>),
    Json(Vec<u8>),
    Frames(Box<FrameRender>),
}

/// Wire-frame rendering state of one output.
#[derive(Default)]
struct FrameRender {
    enc: Encoder,
    buf: Vec<u8>,
    lens: Vec<usize>,
    hello: Option<Hello>,
    status: Option<Status>,
    last_hello_ns: Option<u64>,
    since_hello: u32,
    /// Flags of the last Status sent: a change (over budget, a probe
    /// detached) sends a Status at once.
    last_flags: u32,
    /// A byte budget: delta summaries, keyframes, degradation steps.
    budget: Option<Box<budget::BudgetedFrames>>,
}

/// The `wire::STATUS_*` bits of an interval.
pub fn status_flags(r: &IntervalReport) -> u32 {
    let a = &r.agent;
    let mut f = 0;
    if a.over_budget {
        f |= wire::STATUS_OVER_BUDGET;
    }
    if a.degraded {
        f |= wire::STATUS_DEGRADED;
    }
    if a.cost_measured {
        f |= wire::STATUS_COST_MEASURED;
    }
    f
}

/// Status frames for this interval into `buf`/`lens` (the agent's and
/// the link's health); `slot` keeps the message between intervals.
// The encoder and both frame buffers are borrowed one by one, as in
// `BudgetedFrames::render`, whose `status` callback this is.
#[allow(clippy::too_many_arguments)]
fn status_into(
    slot: &mut Option<Status>,
    t: &Tick<'_>,
    q: &Queue,
    enc: &mut Encoder,
    buf: &mut Vec<u8>,
    lens: &mut Vec<usize>,
    link: wire::LinkHealth,
    shed: &[u64],
) -> u32 {
    let (dropped, dropped_bytes) = q.dropped();
    let s = slot.get_or_insert_with(|| Status {
        boot_id: 0,
        time_ns: 0,
        seq: 0,
        uptime_ns: 0,
        frames_dropped: 0,
        bytes_dropped: 0,
        clients: 0,
        probes: Vec::with_capacity(t.session.probes.len()),
        flags: 0,
        bpf_cpu_ppm: 0,
        detached: Vec::with_capacity(t.session.probes.len()),
        missed: Vec::with_capacity(t.session.probes.len()),
        link: wire::LinkHealth::default(),
        shed: Vec::with_capacity(t.session.probes.len()),
        dropped: Vec::with_capacity(t.session.probes.len()),
    });
    s.boot_id = t.session.boot_id;
    s.time_ns = t.report.time_ns;
    s.seq = t.report.seq;
    s.uptime_ns = t.report.time_ns.saturating_sub(t.session.start_ns);
    s.frames_dropped = dropped;
    s.bytes_dropped = dropped_bytes;
    s.clients = q.clients();
    s.probes.clear();
    s.probes.extend(t.read_errors.iter().enumerate().map(|(i, &e)| {
        let p = t.report.probes.get(i);
        ProbeHealth {
            id: i as u16,
            read_errors: e,
            run_count: p.map_or(0, |p| p.total_bpf_runs),
            run_time_ns: p.map_or(0, |p| p.total_bpf_run_time_ns),
        }
    }));
    s.flags = status_flags(t.report);
    s.bpf_cpu_ppm = (t.report.agent.bpf_cpu_percent * 10_000.0).round().clamp(0.0, u32::MAX as f64) as u32;
    s.detached.clear();
    s.detached.extend(
        t.report
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state == ProbeState::DetachedOverBudget)
            .map(|(i, _)| i as u16),
    );
    // Ids ascending, as the encoder's split by part expects.
    s.missed.clear();
    s.missed.extend(
        t.report
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.total_bpf_missed > 0)
            .map(|(i, p)| ProbeMissed { id: i as u16, missed: p.total_bpf_missed }),
    );
    s.link = link;
    s.shed.clear();
    s.shed.extend(
        shed.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| wire::ProbeShed { id: i as u16, alerts_shed: n }),
    );
    // Records lost before any output (token bucket, kernel buffer, agent
    // queue): the summaries on the wire do not carry them.
    s.dropped.clear();
    s.dropped.extend(
        t.report
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.total_alerts_dropped > 0)
            .map(|(i, p)| wire::ProbeDropped { id: i as u16, alerts_dropped: p.total_alerts_dropped }),
    );
    if let Err(e) = enc.status(s, &mut |f| {
        buf.extend_from_slice(f);
        lens.push(f.len());
    }) {
        log::warn!("status frame: {e}");
    }
    s.flags
}

impl FrameRender {
    fn status_frames(&mut self, t: &Tick<'_>, q: &Queue) {
        self.last_flags = status_into(
            &mut self.status,
            t,
            q,
            &mut self.enc,
            &mut self.buf,
            &mut self.lens,
            wire::LinkHealth::default(),
            &[],
        );
    }

    /// New rows of a grown table: a Hello with only them (receivers keep
    /// the union by id); the whole table is what late joiners get.
    fn table_update(&mut self, t: &Tick<'_>, q: &Queue) {
        let full = t.session.hello();
        let old = self.hello.as_ref().map_or(0, |h| h.probe_count as usize);
        let mut update = full.clone();
        update.probes.drain(..old.min(update.probes.len()));
        self.buf.clear();
        self.lens.clear();
        let (buf, lens) = (&mut self.buf, &mut self.lens);
        if let Err(e) = self.enc.hello(&update, &mut |f| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        }) {
            log::warn!("hello frame: {e}");
        }
        q.push_group(&self.buf, &self.lens);
        self.buf.clear();
        self.lens.clear();
        let (buf, lens) = (&mut self.buf, &mut self.lens);
        let _ = self.enc.hello(&full, &mut |f| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        });
        q.set_hello(&self.buf);
        self.hello = Some(full);
    }

    fn render(&mut self, t: &Tick<'_>, q: &Queue) {
        // Room for the largest summary these probes can produce (every
        // bucket non-zero, 10-byte varints), so that histograms filling up
        // over hours never make the buffers grow mid-run.
        let n = t.totals.len().max(1);
        let want = n * (latmon_core::hist::BUCKETS * 11 + 256) + 4096;
        if self.buf.capacity() < want {
            self.buf.reserve(want - self.buf.len());
            self.lens.reserve(n * (want / wire::FRAME_BUDGET + 8));
        }
        let r = t.report;
        if let Some(b) = self.budget.as_deref_mut() {
            let flags_changed = status_flags(r) != self.last_flags;
            let (status, last_flags) = (&mut self.status, &mut self.last_flags);
            b.render(
                t,
                q,
                &mut self.enc,
                &mut self.buf,
                &mut self.lens,
                flags_changed,
                &mut |t, enc, buf, lens, link, shed| {
                    *last_flags = status_into(status, t, q, enc, buf, lens, link, shed);
                },
            );
            if r.last {
                let link = b.health(t.session.interval_ns);
                self.buf.clear();
                self.lens.clear();
                self.last_flags =
                    status_into(&mut self.status, t, q, &mut self.enc, &mut self.buf, &mut self.lens, link, b.shed());
                q.push_group(&self.buf, &self.lens);
            }
            return;
        }
        // A reload that changed the probe table is a new session (new
        // boot id): announce it at once. A table that grew within the
        // session (a family's new series, appended with new ids) sends
        // only the new rows (no Hello storm); the whole table follows on
        // the timer.
        let new_session = self
            .hello
            .as_ref()
            .is_some_and(|h| h.boot_id != t.session.boot_id || h.probe_count as usize > t.session.probes.len());
        if new_session {
            self.hello = None;
        }
        if q.take_resync() {
            // The link was (re)opened or a receiver asked: the whole table now.
            self.hello = None;
        }
        let grown = self.hello.as_ref().is_some_and(|h| (h.probe_count as usize) < t.session.probes.len());
        if grown {
            self.table_update(t, q);
        }
        let due = self.last_hello_ns.is_none_or(|l| r.time_ns.saturating_sub(l) >= HELLO_PERIOD_NS)
            || self.since_hello >= HELLO_EVERY_SUMMARIES
            || new_session
            || self.hello.is_none();
        if due {
            let first = self.hello.is_none();
            let hello = self.hello.get_or_insert_with(|| t.session.hello());
            self.buf.clear();
            self.lens.clear();
            let (buf, lens) = (&mut self.buf, &mut self.lens);
            if let Err(e) = self.enc.hello(hello, &mut |f| {
                buf.extend_from_slice(f);
                lens.push(f.len());
            }) {
                log::warn!("hello frame: {e}");
            }
            if first {
                q.set_hello(&self.buf);
            }
            self.status_frames(t, q);
            q.push_group(&self.buf, &self.lens);
            self.last_hello_ns = Some(r.time_ns);
            self.since_hello = 0;
        } else if status_flags(r) != self.last_flags {
            // Budget state changed: never wait for the next Hello to say so.
            self.buf.clear();
            self.lens.clear();
            self.status_frames(t, q);
            q.push_group(&self.buf, &self.lens);
        }
        for a in &r.alert_records {
            let id = t.session.probes.iter().position(|p| p.name == a.probe).map_or(u16::MAX, |i| i as u16);
            self.buf.clear();
            self.lens.clear();
            let (buf, lens) = (&mut self.buf, &mut self.lens);
            if self
                .enc
                .alert(t.session.boot_id, id, a, &mut |f| {
                    buf.extend_from_slice(f);
                    lens.push(f.len());
                })
                .is_ok()
            {
                q.push_group(&self.buf, &self.lens);
            }
        }
        // A summary goes whole or not at all: half of one is wasted link time.
        self.buf.clear();
        self.lens.clear();
        let h = SummaryHeader { seq: r.seq, boot_id: t.session.boot_id, time_ns: r.time_ns, last: r.last };
        let (buf, lens) = (&mut self.buf, &mut self.lens);
        match self.enc.summary(h, t.totals, &mut |f| {
            buf.extend_from_slice(f);
            lens.push(f.len());
        }) {
            Ok(_) => {
                q.push_group(&self.buf, &self.lens);
            }
            Err(e) => log::warn!("summary frame: {e}"),
        }
        self.since_hello += 1;
        if r.last {
            self.buf.clear();
            self.lens.clear();
            self.status_frames(t, q);
            q.push_group(&self.buf, &self.lens);
        }
    }
}

struct Output {
    name: String,
    render: Render,
    q: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
    dropped_logged: u64,
    last_drop_log: Option<Instant>,
    /// A serial line's rate (bytes per second): its exit flush waits as
    /// long as the line needs (see [`serial_flush_time`]).
    line_bps: Option<u64>,
}

impl Output {
    fn log_drops(&mut self, closing: bool) {
        let (d, b) = self.q.dropped();
        if d == self.dropped_logged {
            return;
        }
        if closing || self.last_drop_log.is_none_or(|t| t.elapsed() >= DROP_LOG_PERIOD) {
            log::warn!(
                "output {}: {d} records ({b} bytes) dropped since start: the link is slower than the summaries, or down",
                self.name
            );
            self.dropped_logged = d;
            self.last_drop_log = Some(Instant::now());
        }
    }
}

impl Sink for Output {
    fn name(&self) -> &str {
        &self.name
    }

    fn link_stats(&self) -> Option<LinkStats> {
        Some(LinkStats { dropped: self.q.dropped().0, errors: 0 })
    }

    fn emit(&mut self, t: &Tick<'_>) {
        match &mut self.render {
            // Both render into buffers kept between intervals: no
            // allocation once they have grown to their working size.
            Render::Text(r) => {
                self.q.push(r.render(t.report).as_bytes());
            }
            Render::Json(buf) => {
                buf.clear();
                if let Err(e) = latmon_core::json::to_writer(&mut *buf, t.report) {
                    log::warn!("json: {e}");
                }
                buf.push(b'\n');
                self.q.push(buf);
            }
            Render::Frames(f) => f.render(t, &self.q),
        }
        self.log_drops(false);
    }

    fn close(&mut self, timeout: Duration) {
        let Some(thread) = self.thread.take() else { return };
        let timeout = match self.line_bps {
            Some(l) => serial_flush_time(l, self.q.queued_bytes(), self.q.capacity(), timeout),
            None => timeout,
        };
        self.q.close(Instant::now() + timeout);
        if self.done.recv_timeout(timeout + Duration::from_millis(100)).is_ok() {
            let _ = thread.join();
        } else {
            log::warn!("output {}: not flushed within {timeout:?}; giving up", self.name);
        }
        self.log_drops(true);
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.close(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod flush_tests {
    use super::*;

    #[test]
    fn a_serial_exit_flush_waits_what_its_line_needs_within_a_bound() {
        let floor = Duration::from_secs(2);
        // An empty queue: the floor (the driver's buffer drains within it
        // at 115200 baud).
        assert_eq!(serial_flush_time(11_520, 0, 23_040, floor), floor);
        // 9600 baud, 1 500 B queued: (1 500 + 4 096) / 960 + 1 = 6.8 s.
        let t = serial_flush_time(960, 1_500, 4_096, floor);
        assert!(t > Duration::from_millis(6_800) && t < Duration::from_millis(6_900), "{t:?}");
        // Bounded by a full queue whatever is claimed queued.
        let max = serial_flush_time(960, usize::MAX, 4_096, floor);
        assert!(max < Duration::from_millis(9_600), "{max:?}");
        assert_eq!(max, serial_flush_time(960, 4_096, 4_096, floor));
    }
}

#[cfg(test)]
mod whole_record_tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A file whose writes fail while `full` is set, as a full disk's do:
    /// the first call takes half of what it is given, the next fails.
    struct FullDisk {
        f: std::fs::File,
        full: Arc<AtomicBool>,
        took_half: bool,
    }

    impl Write for FullDisk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if !self.full.load(Ordering::SeqCst) {
                return self.f.write(b);
            }
            if self.took_half || b.len() < 2 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.took_half = true;
            self.f.write(&b[..b.len() / 2])
        }
        fn flush(&mut self) -> io::Result<()> {
            self.f.flush()
        }
    }

    /// Three JSON records, the second written while the disk is full:
    /// what the file holds, and the records counted dropped.
    fn write_three(cut: bool) -> (String, u64) {
        let dir = std::env::temp_dir().join(format!("latmon-whole-{}-{cut}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("out.json");
        let _ = std::fs::remove_file(&path);
        // Appending, as a file output opens its file.
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let undo = cut.then(|| f.try_clone().unwrap());
        let full = Arc::new(AtomicBool::new(false));
        let w = FullDisk { f, full: Arc::clone(&full), took_half: false };
        let q = Arc::new(Queue::new(QUEUE_BYTES));
        let qw = Arc::clone(&q);
        let t = std::thread::spawn(move || stream_writer(&qw, "file:t", false, Some(Box::new(w)), None, undo));
        let len = || std::fs::metadata(&path).map_or(0, |m| m.len());
        let wait = |done: &dyn Fn() -> bool| {
            let until = Instant::now() + Duration::from_secs(5);
            while !done() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        q.push(b"{\"seq\":1,\"probes\":[]}\n");
        wait(&|| len() > 0);
        full.store(true, Ordering::SeqCst);
        q.push(b"{\"seq\":2,\"probes\":[\"a long record the disk cuts\"]}\n");
        wait(&|| q.dropped().0 > 0);
        full.store(false, Ordering::SeqCst);
        q.push(b"{\"seq\":3,\"probes\":[]}\n");
        q.close(Instant::now() + Duration::from_secs(2));
        t.join().unwrap();
        let body = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (body, q.dropped().0)
    }

    #[test]
    fn a_failed_write_leaves_only_whole_records_and_counts_the_lost_one() {
        // A file: the partial record is cut off.
        let (body, dropped) = write_three(true);
        assert_eq!(body, "{\"seq\":1,\"probes\":[]}\n{\"seq\":3,\"probes\":[]}\n");
        assert_eq!(dropped, 1);
        // A stream that cannot be cut: the next record starts a line.
        let (body, dropped) = write_three(false);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 3, "{body}");
        assert_eq!((lines[0], lines[2]), ("{\"seq\":1,\"probes\":[]}", "{\"seq\":3,\"probes\":[]}"));
        assert!(serde_json::from_str::<serde_json::Value>(lines[1]).is_err(), "only the cut line is damaged");
        assert_eq!(dropped, 1);
    }
}

#[cfg(test)]
mod clash_tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn two_outputs_on_one_address_file_or_device_are_refused_by_check_and_run() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("latmon-clash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.json");
        let link = dir.join("link.json");
        let _ = std::os::unix::fs::symlink(&f, &link);
        let cases = [
            (
                words(&[&format!("prom://127.0.0.1:{port},series=4"), &format!("modbus-tcp://127.0.0.1:{port}")]),
                "Address already in use",
            ),
            (
                words(&[&format!("tcp://127.0.0.1:{port}"), &format!("prom://127.0.0.1:{port}")]),
                "Address already in use",
            ),
            (
                words(&[&format!("file:{}", f.display()), &format!("file:{},format=text", link.display())]),
                "the same file as output 1",
            ),
            (
                words(&["serial:/dev/ttyLATMON-ABSENT", "modbus-rtu:serial:/dev/ttyLATMON-ABSENT@19200"]),
                "the same device as output 1",
            ),
            (
                words(&["unix:/tmp/latmon-clash.sock", "unix:/tmp/latmon-clash.sock,format=json"]),
                "the same socket as output 1",
            ),
        ];
        for (w, needle) in &cases {
            let v = check_all(w, None);
            assert!(v[0].is_ok(), "{w:?}: {v:?}");
            let e = v[1].as_ref().unwrap_err();
            assert!(e.contains(needle) && e.contains(&w[1]), "check {w:?}: {e}");
            let e = open_all(w, None, TextStyle::default()).err().unwrap_or_default();
            assert!(e.contains(needle), "run {w:?}: {e}");
        }
        assert!(!f.exists(), "a refused config created no file");
        // Port 0 never clashes; stdout twice is not a file.
        assert!(check_all(&words(&["prom://127.0.0.1:0", "prom://127.0.0.1:0,series=2", "-", "-"]), None)
            .iter()
            .all(Result::is_ok));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
