// SPDX-License-Identifier: MIT
//! The stream outputs: stdout, files, serial lines, TCP/Unix listeners and
//! UDP, in text, JSON or wire frames. Each renders on the agent's thread
//! ([`render`]; with a byte budget, [`budget`]) and hands the bytes to its
//! writer thread (a plain writer here; the sockets' in `super::net`)
//! through a bounded [`Queue`].

pub mod budget;
mod render;

pub use render::status_flags;

use std::io::{self, Write};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use latmon_core::session::Tick;
use latmon_core::table::{TextRender, TextStyle};
use latmon_core::wire;

use super::link::{spawn_blocked, LinkStats, Sink, QUEUE_BYTES, REOPEN_PERIOD};
use super::net;
use super::queue::{Pop, Queue};
use super::serial;
use super::spec::{self, Endpoint, LinkSpec};
use crate::config::Format;
use render::FrameRender;

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

/// Drop reports in the log at most this often per output.
const DROP_LOG_PERIOD: Duration = Duration::from_secs(10);

/// Open a stream output (any SINK word but Modbus and Prometheus): see
/// [`super::open_with`].
pub fn open(word: &str, global: Option<Format>, text: TextStyle) -> Result<Box<dyn Sink>, String> {
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
            Render::Json(buf) => json_line(buf, t, &self.q),
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

/// One JSON line into `q`. Its alert records are cut at
/// [`ALERT_RECORD_BYTES_MAX`](latmon_core::json::ALERT_RECORD_BYTES_MAX)
/// bytes, and further where the line would not fit the queue's free room
/// (a serial line's queue is 2 s of its rate; a slow reader leaves less):
/// a line over the queue was dropped whole,
/// summary and all (issue 40: every interval of a five-family load). The
/// line counts what it cut (`alert_records_cut`).
fn json_line(buf: &mut Vec<u8>, t: &Tick<'_>, q: &Queue) {
    let mut bytes = latmon_core::json::ALERT_RECORD_BYTES_MAX;
    // Each try cuts what the last was over from the records it kept (not
    // from its bound: whole records leave slack under it, and a cut of
    // the slack alone kept the same records, over again); the fourth
    // keeps no record (a summary over the queue alone is dropped and
    // counted).
    for tries in 0.. {
        buf.clear();
        if let Err(e) = latmon_core::json::report_line(buf, t.report, bytes) {
            log::warn!("json: {e}");
        }
        buf.push(b'\n');
        let over = buf.len().saturating_sub(q.capacity().saturating_sub(q.queued_bytes()));
        if over == 0 || bytes == 0 {
            break;
        }
        let kept = latmon_core::json::alert_records_fit(t.report, bytes).1;
        bytes = if tries >= 2 { 0 } else { kept.saturating_sub(over) };
    }
    q.push(buf);
}

impl Drop for Output {
    fn drop(&mut self) {
        self.close(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod flush_tests {
    use super::*;

    /// Issue 40: with 1 us thresholds on five families every JSON line
    /// was over the 256 KiB queue and dropped whole, summary and all. Now
    /// every line goes out, its records cut and counted, in the full
    /// queue and in a serial line's small one.
    #[test]
    fn a_json_line_with_too_many_alert_records_goes_out_cut_and_counted() {
        use latmon_core::summary::{AlertRecord, IntervalReport, ProbeReport};
        let session = latmon_core::session::Session {
            board: "b".into(),
            kernel: "k".into(),
            boot_id: 1,
            start_ns: 0,
            interval_ns: 1_000_000_000,
            probes: Vec::new(),
            failed: Vec::new(),
            thresholds_ns: Vec::new(),
            certificate: None,
        };
        let mut report = IntervalReport { seq: 3, ..Default::default() };
        report.probes.push(ProbeReport { name: "lock:ctrl_mutex".into(), ..ProbeReport::empty() });
        let rec = AlertRecord {
            id: latmon_core::ident::ProbeId::at(0),
            pid: 4242,
            tid: 4243,
            comm: "ctrl_loop".into(),
            cpu: 1,
            latency_ns: 1_234_567,
            time_ns: 5,
            anatomy: None,
            cycle: None,
        };
        report.alert_records = vec![rec; 5_000];
        let tick = Tick { session: &session, report: &report, totals: &[], read_errors: &[] };
        for cap in [QUEUE_BYTES, 4096] {
            let q = Queue::new(cap);
            let mut buf = Vec::new();
            json_line(&mut buf, &tick, &q);
            assert_eq!(q.dropped(), (0, 0), "queue of {cap}: the line went out");
            let (mut out, mut lens) = (Vec::new(), Vec::new());
            assert_eq!(q.pop(&mut out, &mut lens, Duration::ZERO), Pop::Data);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            let kept = v["alert_records"].as_array().map_or(0, Vec::len);
            let cut = v["alert_records_cut"].as_u64().unwrap() as usize;
            assert_eq!((v["seq"].as_u64(), kept + cut), (Some(3), 5_000), "queue of {cap}");
            assert!(out.len() <= cap && kept > 0, "queue of {cap}: {} bytes, {kept} kept", out.len());
        }
    }

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
