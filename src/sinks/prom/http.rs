// SPDX-License-Identifier: MIT
//! The HTTP side: one poll loop serving `GET /metrics` to at most
//! [`HTTP_CLIENTS_MAX`] connections, each closed at [`REQUEST_DEADLINE`],
//! in the format the scraper negotiates.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::hist::{self as promhist, SPAN};
use super::model::Snapshot;
use super::protobuf::render_protobuf;
use super::text::render_text;

/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of the protobuf format.
pub const CONTENT_TYPE_PROTOBUF: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";
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
pub(super) fn serve(l: &TcpListener, slot: &Mutex<Snapshot>, stop: &AtomicBool, name: &str) {
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
pub(super) fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
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
