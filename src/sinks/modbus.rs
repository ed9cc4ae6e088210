// SPDX-License-Identifier: MIT
//! Modbus outputs: a read-only register image (crate::modbus_map,
//! docs/modbus-map.md) served to PLCs over Modbus TCP
//! (`modbus-tcp://HOST:PORT`) or Modbus RTU on a serial line
//! (`modbus-rtu:serial:/dev/ttyX@19200`).
//!
//! The agent thread builds each interval's image off to the side and swaps
//! it in with one pointer store under a mutex that readers also hold only
//! to clone the pointer: a multi-register read is answered from one image,
//! never from two intervals, and the agent never waits for a client.
//!
//! Frames are parsed, checked (RTU CRC) and answered, exceptions included,
//! by the `rmodbus` crate. This module only delimits them: Modbus TCP by
//! the MBAP length field, RTU by the silent interval between frames.
//! Requests are answered from server threads: one poll loop for every TCP
//! client, one thread per serial line.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use rmodbus::consts::ModbusFunction;
use rmodbus::server::{ModbusFrame, Read as FrameRead};
use rmodbus::{ErrorKind, ModbusProto};

use super::link::{LinkStats, Sink, REOPEN_PERIOD};
use super::spec::{ModbusSpec, ModbusTcpSpec, ModbusTransport, SerialSpec};
use crate::modbus_map::{AgentStatus, Image, MapError};
use latmon_core::session::Tick;

/// The longest Modbus TCP ADU: 7-byte MBAP header + 253-byte PDU.
pub const TCP_ADU_MAX: usize = 260;
/// The longest Modbus RTU ADU: address + 253-byte PDU + CRC.
pub const RTU_ADU_MAX: usize = 256;
/// A TCP client whose unread responses exceed this is disconnected.
const CLIENT_OUT_MAX: usize = 16 * 1024;
/// Server threads look at the stop flag at least this often.
const TICK: Duration = Duration::from_millis(100);
/// Rejected connections are logged as warnings at most this often.
const REJECT_LOG_PERIOD: Duration = Duration::from_secs(10);
/// At the client limit, a new connection displaces the client whose last
/// complete request is the oldest, if that is at least this long ago; if
/// every client asked something more recently, the newcomer is refused. A
/// PLC polling once a second is never displaced; a client polling every
/// 12 s holds its slot only while nobody else wants one.
pub const DISPLACE_IDLE: Duration = Duration::from_secs(2);

/// What the agent thread and a server thread share.
#[derive(Default)]
struct Shared {
    image: Mutex<Arc<Image>>,
    stop: AtomicBool,
    /// Malformed or damaged requests (bad MBAP header, broken PDU, CRC).
    bad_requests: AtomicU64,
    /// RTU: the serial device failed or could not be opened.
    link_failed: AtomicBool,
}

impl Shared {
    fn current(&self) -> Arc<Image> {
        Arc::clone(&self.image.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn bad(&self) {
        self.bad_requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// A Modbus output.
pub struct ModbusOutput {
    name: String,
    shared: Arc<Shared>,
    /// The image swapped out last time, rebuilt next time when no reader
    /// holds it any more (no allocation per interval).
    spare: Option<Arc<Image>>,
    /// Agent-wide status the Tick does not carry yet (over budget).
    pub agent: AgentStatus,
    thread: Option<JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

/// Open a Modbus output from its SINK word (see [`ModbusSpec`]). A TCP
/// address is bound now, so a mistake fails at startup; a serial device
/// that is absent is reported and opened as soon as it appears.
pub fn open(word: &str) -> Result<Box<dyn Sink>, String> {
    let spec = ModbusSpec::parse(word).map_err(|e| e.to_string())?;
    let name = spec.to_string();
    let shared = Arc::new(Shared::default());
    *shared.image.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(Image::empty(0));
    let sh = Arc::clone(&shared);
    let n = name.clone();
    let server: Box<dyn FnOnce() + Send> = match spec.transport {
        ModbusTransport::Tcp(t) => {
            let l = TcpListener::bind(&t.addr).map_err(|e| format!("output {word}: listen: {e}"))?;
            l.set_nonblocking(true).map_err(|e| format!("output {word}: {e}"))?;
            let local = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            log::info!(
                "output {name}: Modbus TCP on {local}, unit {}, at most {} clients, idle timeout {:?}{}",
                spec.unit.map_or("any".to_string(), |u| u.to_string()),
                t.max_clients,
                t.idle,
                if t.allow.is_empty() { String::new() } else { format!(", clients from {} only", fmt_allow(&t)) }
            );
            let unit = spec.unit;
            Box::new(move || serve_tcp(&n, l, &t, unit, &sh))
        }
        ModbusTransport::Rtu(s) => {
            let unit = spec.unit.unwrap_or(1);
            log::info!("output {name}: Modbus RTU unit {unit}, {:?} parity, {} stop bits", s.parity, s.stop_bits);
            Box::new(move || serve_rtu(&n, &s, unit, &sh))
        }
    };
    let (thread, done) = spawn_server(&name, server).map_err(|e| format!("output {word}: {e}"))?;
    Ok(Box::new(ModbusOutput { name, shared, spare: None, agent: AgentStatus::default(), thread: Some(thread), done }))
}

fn fmt_allow(t: &ModbusTcpSpec) -> String {
    t.allow.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
}

/// Start a server thread with SIGINT/SIGTERM blocked (the agent collects
/// them synchronously; a server thread must never be the one they hit).
fn spawn_server(name: &str, f: Box<dyn FnOnce() + Send>) -> io::Result<(JoinHandle<()>, mpsc::Receiver<()>)> {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    let old = stop.thread_swap_mask(SigmaskHow::SIG_BLOCK).map_err(io::Error::from)?;
    let (tx, rx) = mpsc::channel();
    let res =
        std::thread::Builder::new().name(format!("latmon-mb {name}").chars().take(15).collect()).spawn(move || {
            f();
            let _ = tx.send(());
        });
    let _ = old.thread_set_mask();
    Ok((res?, rx))
}

impl Sink for ModbusOutput {
    fn name(&self) -> &str {
        &self.name
    }

    fn link_stats(&self) -> Option<LinkStats> {
        Some(LinkStats { dropped: 0, errors: self.shared.bad_requests.load(Ordering::Relaxed) })
    }

    fn emit(&mut self, t: &Tick<'_>) {
        self.agent.over_budget = t.report.over_budget_alarm();
        self.agent.bad_requests = self.shared.bad_requests.load(Ordering::Relaxed);
        self.agent.link_failed = self.shared.link_failed.load(Ordering::Relaxed);
        let mut next = self.spare.take().unwrap_or_default();
        if Arc::get_mut(&mut next).is_none() {
            // A reader still holds it: build into a fresh one.
            next = Arc::default();
        }
        if let Some(img) = Arc::get_mut(&mut next) {
            img.build(t, &self.agent);
        }
        let old = std::mem::replace(&mut *self.shared.image.lock().unwrap_or_else(|e| e.into_inner()), next);
        self.spare = Some(old);
    }

    fn close(&mut self, timeout: Duration) {
        let Some(thread) = self.thread.take() else { return };
        self.shared.stop.store(true, Ordering::Relaxed);
        if self.done.recv_timeout(timeout.max(TICK * 3)).is_ok() {
            let _ = thread.join();
        } else {
            log::warn!("output {}: server did not stop within {timeout:?}", self.name);
        }
    }
}

impl Drop for ModbusOutput {
    fn drop(&mut self) {
        self.close(Duration::from_millis(500));
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unanswered {
    /// Not for this unit, or a broadcast read: silence is the answer.
    NotForUs,
    /// Too short, bad length or CRC: dropped (rmodbus's verdict).
    Malformed(ErrorKind),
}

/// Answer one complete request ADU from `image` into `resp` (with MBAP
/// header or CRC as `proto` wants). Reads of input (FC04) and holding
/// (FC03) registers are served from the same image; every write function
/// and every function without data here (coils, discrete inputs) gets
/// exception 01, unknown functions 01 (rmodbus), addresses past the map 02,
/// quantities of 0 or above 125 03.
fn answer(
    adu: &[u8],
    proto: ModbusProto,
    unit: Option<u8>,
    image: &Image,
    resp: &mut Vec<u8>,
) -> Result<(), Unanswered> {
    let tcp = proto == ModbusProto::TcpUdp;
    if adu.get(if tcp { 7 } else { 1 }).is_some_and(|&fc| fc >= 0x80) {
        return refuse_exception_code(adu, tcp, unit, resp);
    }
    // On TCP without a configured unit: whatever unit id the client uses.
    let unit_id = unit.unwrap_or_else(|| adu.get(6).copied().unwrap_or(0));
    // Unit 0 is a broadcast on serial lines only.
    let broadcast: &[u8] = if tcp { &[] } else { &[0] };
    let mut frame = ModbusFrame::new(unit_id, adu, proto, resp).with_broadcast_units(broadcast);
    frame.parse().map_err(Unanswered::Malformed)?;
    let write = matches!(
        frame.func,
        ModbusFunction::SetCoil
            | ModbusFunction::SetHolding
            | ModbusFunction::SetCoilsBulk
            | ModbusFunction::SetHoldingsBulk
    );
    let refused =
        frame.processing_required && matches!(frame.func, ModbusFunction::GetCoils | ModbusFunction::GetDiscretes);
    if write || refused {
        // Read-only map: the function is refused before its data is checked.
        frame.error = None;
        frame.set_modbus_error_if_unset(&ErrorKind::IllegalFunction).map_err(Unanswered::Malformed)?;
    } else if frame.processing_required {
        let result = match frame.get_external_read() {
            Ok(FrameRead::Words(w)) => match image.read(w.address, w.count) {
                Ok(regs) => {
                    for (out, r) in w.buf.chunks_exact_mut(2).zip(regs) {
                        out.copy_from_slice(&r.to_be_bytes());
                    }
                    Ok(())
                }
                Err(MapError::ZeroCount) => Err(ErrorKind::IllegalDataValue),
                Err(_) => Err(ErrorKind::IllegalDataAddress),
            },
            Ok(FrameRead::Bits(_)) => Err(ErrorKind::IllegalFunction),
            Err(e) => Err(e),
        };
        frame.process_external_read(result).map_err(Unanswered::Malformed)?;
    }
    if !frame.response_required {
        return Err(Unanswered::NotForUs);
    }
    frame.finalize_response().map_err(Unanswered::Malformed)
}

/// A request whose function code is 0x80 or more (the codes of exception
/// responses: no function has one). rmodbus would answer with function
/// byte fc + 0x80, wrapped (0x84 -> `04 01`, a malformed reply; an
/// overflow panic in a debug build): answer exception 01 with the
/// function byte as received (its exception bit is already set).
fn refuse_exception_code(adu: &[u8], tcp: bool, unit: Option<u8>, resp: &mut Vec<u8>) -> Result<(), Unanswered> {
    resp.clear();
    let illegal_function = 0x01;
    if tcp {
        // MBAP header checked by the caller; the PDU is at least the byte.
        let (Some(&unit_id), Some(&fc)) = (adu.get(6), adu.get(7)) else {
            return Err(Unanswered::Malformed(ErrorKind::FrameBroken));
        };
        if unit.is_some_and(|u| u != unit_id) {
            return Err(Unanswered::NotForUs);
        }
        resp.extend_from_slice(&[adu[0], adu[1], 0, 0, 0, 3, unit_id, fc, illegal_function]);
        return Ok(());
    }
    if adu.len() < 4 {
        return Err(Unanswered::Malformed(ErrorKind::FrameBroken));
    }
    let (body, crc) = adu.split_at(adu.len() - 2);
    if crc16(body) != u16::from_le_bytes([crc[0], crc[1]]) {
        return Err(Unanswered::Malformed(ErrorKind::FrameCRCError));
    }
    // Unit 0 (broadcast) and other units get no reply on a serial line.
    if unit.is_none_or(|u| u != body[0]) {
        return Err(Unanswered::NotForUs);
    }
    resp.extend_from_slice(&[body[0], body[1], illegal_function]);
    let c = crc16(resp);
    resp.extend_from_slice(&c.to_le_bytes());
    Ok(())
}

/// The Modbus RTU CRC (CRC-16/MODBUS: reflected 0x8005, init 0xFFFF),
/// sent low byte first.
fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0xFFFFu16;
    for &b in data {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
        }
    }
    crc
}

struct Client {
    stream: TcpStream,
    peer: SocketAddr,
    buf: Vec<u8>,
    out: Vec<u8>,
    last_request: Instant,
}

enum Verdict {
    Keep,
    Close(&'static str),
}

impl Client {
    /// Read what arrived, answer every complete request.
    fn serve(&mut self, unit: Option<u8>, shared: &Shared, resp: &mut Vec<u8>) -> Verdict {
        let mut tmp = [0u8; 1024];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(0) => return Verdict::Close("closed by client"),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Verdict::Close("read error"),
            }
            if self.buf.len() > 4 * TCP_ADU_MAX {
                break;
            }
        }
        let mut image: Option<Arc<Image>> = None;
        let mut at = 0;
        // MBAP header: transaction id (2), protocol id (2, 0 = Modbus),
        // length (2, of what follows: unit id + PDU), unit id (1).
        while self.buf.len() - at >= 7 {
            let b = &self.buf[at..];
            let length = u16::from_be_bytes([b[4], b[5]]) as usize;
            if b[2] != 0 || b[3] != 0 || !(2..=TCP_ADU_MAX - 6).contains(&length) {
                // The stream cannot be resynchronised past a bad header.
                shared.bad();
                return Verdict::Close("malformed MBAP header");
            }
            if b.len() < 6 + length {
                break;
            }
            let adu = &b[..6 + length];
            self.last_request = Instant::now();
            let img = image.get_or_insert_with(|| shared.current());
            match answer(adu, ModbusProto::TcpUdp, unit, img, resp) {
                Ok(()) => self.out.extend_from_slice(resp),
                Err(Unanswered::NotForUs) => {}
                Err(Unanswered::Malformed(e)) => {
                    shared.bad();
                    log::debug!("modbus: {}: request dropped: {e:?}", self.peer);
                }
            }
            at += 6 + length;
        }
        self.buf.drain(..at);
        self.flush()
    }

    fn flush(&mut self) -> Verdict {
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => return Verdict::Close("closed"),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Verdict::Close("write error"),
            }
        }
        if self.out.len() > CLIENT_OUT_MAX {
            return Verdict::Close("not reading its responses");
        }
        Verdict::Keep
    }
}

/// At the client limit: which client a newcomer displaces (by position),
/// given each client's last complete request (connection time before the
/// first): the one idle longest, if idle for `min_idle` at least.
fn displaced(last_requests: impl Iterator<Item = Instant>, now: Instant, min_idle: Duration) -> Option<usize> {
    last_requests
        .map(|t| now.saturating_duration_since(t))
        .enumerate()
        .filter(|&(_, idle)| idle >= min_idle)
        .max_by_key(|&(_, idle)| idle)
        .map(|(i, _)| i)
}

/// The Modbus TCP server thread: one poll loop for the listener and every
/// client, non-blocking sockets throughout.
fn serve_tcp(name: &str, listener: TcpListener, spec: &ModbusTcpSpec, unit: Option<u8>, shared: &Shared) {
    let mut clients: Vec<Client> = Vec::new();
    let mut resp = Vec::with_capacity(TCP_ADU_MAX);
    let mut revents: Vec<PollFlags> = Vec::new();
    let mut last_reject_log: Option<Instant> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        revents.clear();
        {
            let mut fds = Vec::with_capacity(1 + clients.len());
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            for c in &clients {
                let want = if c.out.is_empty() { PollFlags::POLLIN } else { PollFlags::POLLIN | PollFlags::POLLOUT };
                fds.push(PollFd::new(c.stream.as_fd(), want));
            }
            let timeout = PollTimeout::try_from(TICK).unwrap_or(PollTimeout::NONE);
            if let Err(e) = nix::poll::poll(&mut fds, timeout) {
                if e != nix::errno::Errno::EINTR {
                    log::warn!("output {name}: poll: {e}");
                    std::thread::sleep(TICK);
                }
                continue;
            }
            revents.extend(fds.iter().map(|f| f.revents().unwrap_or(PollFlags::empty())));
        }
        let now = Instant::now();
        // Clients first (indices match `revents`), then new connections.
        let mut i = 0;
        clients.retain_mut(|c| {
            i += 1;
            let ev = revents.get(i).copied().unwrap_or(PollFlags::empty());
            let mut verdict = if ev.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                c.serve(unit, shared, &mut resp)
            } else if ev.contains(PollFlags::POLLOUT) {
                c.flush()
            } else {
                Verdict::Keep
            };
            // Bytes that never complete a request do not keep a client.
            if matches!(verdict, Verdict::Keep) && now.saturating_duration_since(c.last_request) > spec.idle {
                verdict = Verdict::Close("idle");
            }
            match verdict {
                Verdict::Keep => true,
                Verdict::Close(why) => {
                    log::debug!("output {name}: client {}: {why}: disconnected", c.peer);
                    false
                }
            }
        });
        if revents.first().is_some_and(|e| e.contains(PollFlags::POLLIN)) {
            loop {
                let (stream, peer) = match listener.accept() {
                    Ok(x) => x,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        log::warn!("output {name}: accept: {e}");
                        std::thread::sleep(TICK);
                        break;
                    }
                };
                let mut why = if !spec.allow.is_empty() && !spec.allow.iter().any(|n| n.contains(peer.ip())) {
                    Some("not in the allowlist")
                } else {
                    None
                };
                if why.is_none() && clients.len() >= spec.max_clients {
                    match displaced(clients.iter().map(|c| c.last_request), Instant::now(), DISPLACE_IDLE) {
                        Some(i) => {
                            let old = clients.remove(i);
                            log::info!(
                                "output {name}: client {} (no request for {:.1?}) makes room for {peer}",
                                old.peer,
                                old.last_request.elapsed()
                            );
                        }
                        None => why = Some("too many clients, each asked within the last 2 s"),
                    }
                }
                if let Some(why) = why {
                    if last_reject_log.is_none_or(|t| t.elapsed() >= REJECT_LOG_PERIOD) {
                        log::warn!("output {name}: connection from {peer} refused: {why}");
                        last_reject_log = Some(Instant::now());
                    } else {
                        log::debug!("output {name}: connection from {peer} refused: {why}");
                    }
                    drop(stream);
                    continue;
                }
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let _ = stream.set_nodelay(true);
                log::debug!("output {name}: client {peer} connected");
                clients.push(Client {
                    stream,
                    peer,
                    buf: Vec::with_capacity(2 * TCP_ADU_MAX),
                    out: Vec::new(),
                    last_request: Instant::now(),
                });
            }
        }
    }
}

/// The silent interval that ends an RTU frame (3.5 character times; a
/// fixed 1.75 ms above 19200 baud, as the serial line spec says), rounded
/// up to the millisecond the tty timeout can express, at least 2 ms.
pub fn rtu_gap(baud: u32) -> Duration {
    let us = if baud > 19_200 { 1_750 } else { 38_500_000u64.div_ceil(baud.max(1) as u64) };
    Duration::from_millis(us.div_ceil(1_000).max(2))
}

/// The Modbus RTU server thread of one serial line.
fn serve_rtu(name: &str, spec: &SerialSpec, unit: u8, shared: &Shared) {
    let gap = rtu_gap(spec.baud);
    // A frame whose bytes straggle in (USB-serial latency) is waited for
    // this long before it is judged incomplete.
    let char_us = 11_000_000u64 / spec.baud.max(1) as u64;
    let assemble_max = Duration::from_millis(50) + Duration::from_micros(char_us * RTU_ADU_MAX as u64);
    let mut port: Option<serialport::TTYPort> = None;
    let mut next_try = Instant::now();
    let mut last_err = String::new();
    let mut buf: Vec<u8> = Vec::with_capacity(2 * RTU_ADU_MAX);
    let mut resp = Vec::with_capacity(RTU_ADU_MAX);
    let mut first_byte = Instant::now();
    let mut tmp = [0u8; 512];
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(p) = port.as_mut() else {
            if Instant::now() >= next_try {
                match super::serial::open(spec, gap) {
                    Ok(p) => {
                        if last_err.is_empty() {
                            log::info!("output {name}: open");
                        } else {
                            log::warn!("output {name}: open");
                        }
                        last_err.clear();
                        buf.clear();
                        port = Some(p);
                        continue;
                    }
                    Err(e) => {
                        shared.link_failed.store(true, Ordering::Relaxed);
                        if e.to_string() != last_err {
                            log::warn!("output {name}: cannot open ({e}); trying again every {REOPEN_PERIOD:?}");
                            last_err = e.to_string();
                        }
                        next_try = Instant::now() + REOPEN_PERIOD;
                    }
                }
            }
            std::thread::sleep(
                TICK.min(next_try.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)),
            );
            continue;
        };
        let _ = serialport::SerialPort::set_timeout(p, gap);
        match p.read(&mut tmp) {
            Ok(n) if n > 0 => {
                if buf.is_empty() {
                    first_byte = Instant::now();
                }
                if buf.len() + n > 2 * RTU_ADU_MAX {
                    // Noise or a stuck line: no request is this long.
                    shared.bad();
                    buf.clear();
                } else {
                    buf.extend_from_slice(&tmp[..n]);
                }
                continue;
            }
            // Nothing although poll said readable: take it as silence, but
            // never spin on it.
            Ok(_) => std::thread::sleep(gap),
            Err(e) if e.kind() == io::ErrorKind::TimedOut || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::warn!("output {name}: {e}: closing; trying to open again every {REOPEN_PERIOD:?}");
                shared.link_failed.store(true, Ordering::Relaxed);
                last_err = e.to_string();
                port = None;
                next_try = Instant::now() + REOPEN_PERIOD;
                continue;
            }
        }
        // Silence on the line: what has arrived is a frame.
        if buf.is_empty() {
            continue;
        }
        let image = shared.current();
        match answer(&buf, ModbusProto::Rtu, Some(unit), &image, &mut resp) {
            Ok(()) => {
                let _ = serialport::SerialPort::set_timeout(p, Duration::from_secs(1));
                if let Err(e) = p.write_all(&resp).and_then(|()| p.flush()) {
                    log::warn!("output {name}: write: {e}");
                    shared.link_failed.store(true, Ordering::Relaxed);
                }
            }
            Err(Unanswered::NotForUs) => {}
            Err(Unanswered::Malformed(ErrorKind::FrameBroken))
                if buf.len() < RTU_ADU_MAX && first_byte.elapsed() < assemble_max =>
            {
                // Too short so far: the rest may still come.
                continue;
            }
            Err(Unanswered::Malformed(e)) => {
                shared.bad();
                log::debug!("output {name}: {} byte request dropped: {e:?}", buf.len());
            }
        }
        buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rmodbus::client::ModbusRequest;

    fn image() -> Image {
        Image::empty(1)
    }

    fn tcp(pdu: &[u8], unit: u8) -> Vec<u8> {
        let mut v = vec![0x12, 0x34, 0, 0];
        v.extend_from_slice(&(pdu.len() as u16 + 1).to_be_bytes());
        v.push(unit);
        v.extend_from_slice(pdu);
        v
    }

    fn ask_tcp(pdu: &[u8], unit: Option<u8>) -> Result<Vec<u8>, Unanswered> {
        let mut r = Vec::new();
        answer(&tcp(pdu, 9), ModbusProto::TcpUdp, unit, &image(), &mut r).map(|()| r)
    }

    #[test]
    fn tcp_reads_both_tables() {
        for fc in [3u8, 4] {
            let r = ask_tcp(&[fc, 0, 0, 0, 2], None).unwrap();
            assert_eq!(r, [0x12, 0x34, 0, 0, 0, 7, 9, fc, 4, 0x4C, 0x4D, 0, 1]);
        }
        let r = ask_tcp(&[4, 0, 71, 0, 1], None).unwrap();
        assert_eq!(&r[7..], &[4, 2, 0, 0], "last register of block 0");
    }

    #[test]
    fn tcp_exceptions() {
        let exc = |pdu: &[u8]| ask_tcp(pdu, None).unwrap_or_else(|e| panic!("{pdu:?}: {e:?}"))[7..].to_vec();
        assert_eq!(exc(&[4, 0, 72, 0, 1]), [0x84, 2], "past the end");
        assert_eq!(exc(&[3, 0xFF, 0xFF, 0, 2]), [0x83, 2], "address wraps");
        assert_eq!(exc(&[3, 0, 0, 0, 126]), [0x83, 3], "more than 125");
        assert_eq!(exc(&[3, 0, 0, 0, 0]), [0x83, 3], "zero registers");
        assert_eq!(exc(&[6, 0, 0, 0, 1]), [0x86, 1]);
        assert_eq!(exc(&[5, 0, 0, 0xFF, 0]), [0x85, 1]);
        assert_eq!(exc(&[0x10, 0, 0, 0, 1, 2, 0, 1]), [0x90, 1]);
        assert_eq!(exc(&[0x10, 0, 0, 0, 124, 2, 0, 1]), [0x90, 1], "a write is refused before its quantity is checked");
        assert_eq!(exc(&[0x0F, 0, 0, 0, 1, 1, 1]), [0x8F, 1]);
        assert_eq!(exc(&[0x16, 0, 0, 0, 0, 0, 0]), [0x96, 1], "mask write");
        assert_eq!(exc(&[0x17, 0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 0]), [0x97, 1], "read/write multiple");
        assert_eq!(exc(&[1, 0, 0, 0, 8]), [0x81, 1], "no coils");
        assert_eq!(exc(&[2, 0, 0, 0, 8]), [0x82, 1], "no discrete inputs");
        assert_eq!(exc(&[8, 0, 0, 0x12, 0x34]), [0x88, 1], "unknown function (diagnostics)");
        assert!(
            matches!(ask_tcp(&[0x2B, 0x0E, 1, 0], None), Err(Unanswered::Malformed(_))),
            "rmodbus drops requests shorter than 6 bytes after the MBAP length field"
        );
    }

    /// Function codes 0x80..=0xFF (exception codes, no function) get
    /// exception 01 with their own function byte, not fc + 0x80 wrapped.
    #[test]
    fn function_codes_with_the_exception_bit_get_exception_01() {
        for fc in [0x80u8, 0x83, 0x84, 0x90, 0xAB, 0xFF] {
            let r = ask_tcp(&[fc, 0, 0, 0, 1], None).unwrap_or_else(|e| panic!("{fc:#x}: {e:?}"));
            assert_eq!(r, [0x12, 0x34, 0, 0, 0, 3, 9, fc, 1], "{fc:#x}");
            assert_eq!(ask_tcp(&[fc, 0, 0, 0, 1], Some(17)), Err(Unanswered::NotForUs));
            assert_eq!(ask_tcp(&[fc], None).map(|r| r[7..].to_vec()), Ok(vec![fc, 1]), "a bare function byte");
            // RTU, CRC checked by rmodbus's client side.
            let mut req = vec![1, fc, 0, 0, 0, 1];
            req.extend_from_slice(&crc16(&req).to_le_bytes());
            let mut r = Vec::new();
            answer(&req, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
            assert_eq!(&r[..3], &[1, fc, 1]);
            assert_eq!(&r[3..], &crc16(&r[..3]).to_le_bytes());
            let mut damaged = req.clone();
            damaged[2] ^= 1;
            assert_eq!(
                answer(&damaged, ModbusProto::Rtu, Some(1), &image(), &mut r),
                Err(Unanswered::Malformed(ErrorKind::FrameCRCError))
            );
            req[0] = 0;
            let n = req.len();
            let c = crc16(&req[..n - 2]);
            req[n - 2..].copy_from_slice(&c.to_le_bytes());
            assert_eq!(
                answer(&req, ModbusProto::Rtu, Some(1), &image(), &mut r),
                Err(Unanswered::NotForUs),
                "broadcast"
            );
        }
        // Our CRC is the one rmodbus checks.
        let mut req = Vec::new();
        ModbusRequest::new(1, ModbusProto::Rtu).generate_get_inputs(0, 2, &mut req).unwrap();
        assert_eq!(&req[req.len() - 2..], &crc16(&req[..req.len() - 2]).to_le_bytes());
    }

    #[test]
    fn tcp_units_and_malformed() {
        assert_eq!(ask_tcp(&[3, 0, 0, 0, 1], Some(17)), Err(Unanswered::NotForUs), "other unit");
        let mut r = Vec::new();
        answer(&tcp(&[3, 0, 0, 0, 1], 17), ModbusProto::TcpUdp, Some(17), &image(), &mut r).unwrap();
        assert_eq!(r[6], 17);
        assert!(matches!(ask_tcp(&[3, 0, 0], None), Err(Unanswered::Malformed(_))), "short PDU");
        let mut bad_proto = tcp(&[3, 0, 0, 0, 1], 1);
        bad_proto[3] = 1;
        assert!(matches!(
            answer(&bad_proto, ModbusProto::TcpUdp, None, &image(), &mut r),
            Err(Unanswered::Malformed(_))
        ));
        // Garbage of every short length: dropped, never a panic.
        for n in 0..12 {
            let g: Vec<u8> = (0..n).map(|i| (i * 37 + 5) as u8).collect();
            let _ = answer(&g, ModbusProto::TcpUdp, None, &image(), &mut r);
            let _ = answer(&g, ModbusProto::Rtu, Some(1), &image(), &mut r);
        }
    }

    #[test]
    fn rtu_crc_units_broadcast() {
        // Requests built and responses checked by rmodbus's client side.
        let mut mreq = ModbusRequest::new(1, ModbusProto::Rtu);
        let mut req = Vec::new();
        mreq.generate_get_inputs(0, 2, &mut req).unwrap();
        let mut r = Vec::new();
        answer(&req, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
        let mut vals = Vec::new();
        mreq.parse_u16(&r, &mut vals).unwrap();
        assert_eq!(vals, [0x4C4D, 1]);
        let mut damaged = req.clone();
        damaged[3] ^= 1;
        assert_eq!(
            answer(&damaged, ModbusProto::Rtu, Some(1), &image(), &mut r),
            Err(Unanswered::Malformed(ErrorKind::FrameCRCError))
        );
        assert_eq!(
            answer(&req[..5], ModbusProto::Rtu, Some(1), &image(), &mut r),
            Err(Unanswered::Malformed(ErrorKind::FrameBroken))
        );
        assert_eq!(
            answer(&req, ModbusProto::Rtu, Some(2), &image(), &mut r),
            Err(Unanswered::NotForUs),
            "another slave's request"
        );
        let mut bcast = Vec::new();
        ModbusRequest::new(0, ModbusProto::Rtu).generate_set_holding(0, 1, &mut bcast).unwrap();
        assert_eq!(
            answer(&bcast, ModbusProto::Rtu, Some(1), &image(), &mut r),
            Err(Unanswered::NotForUs),
            "broadcast: no reply"
        );
        let mut w = Vec::new();
        mreq.generate_set_holding(0, 1, &mut w).unwrap();
        answer(&w, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
        assert_eq!(mreq.parse_ok(&r), Err(ErrorKind::IllegalFunction));
        mreq.generate_get_holdings(200, 1, &mut w).unwrap();
        answer(&w, ModbusProto::Rtu, Some(1), &image(), &mut r).unwrap();
        assert_eq!(mreq.parse_ok(&r), Err(ErrorKind::IllegalDataAddress));
    }

    #[test]
    fn newcomers_displace_the_client_idle_longest_never_a_busy_one() {
        let now = Instant::now();
        let ago = |ms: u64| now - Duration::from_millis(ms);
        // A 1 Hz PLC (asked 0.9 s ago) and slow clients of 12 s.
        assert_eq!(displaced([ago(900), ago(5_000), ago(11_000), ago(2_500)].into_iter(), now, DISPLACE_IDLE), Some(2));
        // Everyone asked within 2 s: nobody is displaced.
        assert_eq!(displaced([ago(900), ago(1_999), ago(10)].into_iter(), now, DISPLACE_IDLE), None);
        assert_eq!(displaced(std::iter::empty(), now, DISPLACE_IDLE), None);
    }

    #[test]
    fn gaps() {
        assert_eq!(rtu_gap(9600), Duration::from_millis(5));
        assert_eq!(rtu_gap(19_200), Duration::from_millis(3));
        assert_eq!(rtu_gap(115_200), Duration::from_millis(2));
    }
}
