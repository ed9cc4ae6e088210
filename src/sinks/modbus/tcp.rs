// SPDX-License-Identifier: MIT
//! Modbus TCP: one poll loop for the listener and every client, requests
//! delimited by the MBAP length field, clients bounded and displaced.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use rmodbus::ModbusProto;

use super::adu::{answer, Shared, Unanswered, TCP_ADU_MAX, TICK};
use super::map::Image;
use crate::sinks::spec::ModbusTcpSpec;

/// A TCP client whose unread responses exceed this is disconnected.
pub(super) const CLIENT_OUT_MAX: usize = 16 * 1024;
/// Rejected connections are logged as warnings at most this often.
pub(super) const REJECT_LOG_PERIOD: Duration = Duration::from_secs(10);
/// At the client limit, a new connection displaces the client whose last
/// complete request is the oldest, if that is at least this long ago; if
/// every client asked something more recently, the newcomer is refused. A
/// PLC polling once a second is never displaced; a client polling every
/// 12 s holds its slot only while nobody else wants one.
pub const DISPLACE_IDLE: Duration = Duration::from_secs(2);

pub(super) struct Client {
    stream: TcpStream,
    peer: SocketAddr,
    buf: Vec<u8>,
    out: Vec<u8>,
    last_request: Instant,
}

pub(super) enum Verdict {
    Keep,
    Close(&'static str),
}

impl Client {
    /// Read what arrived, answer every complete request.
    pub(super) fn serve(&mut self, unit: Option<u8>, shared: &Shared, resp: &mut Vec<u8>) -> Verdict {
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

    pub(super) fn flush(&mut self) -> Verdict {
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
pub(super) fn displaced(
    last_requests: impl Iterator<Item = Instant>,
    now: Instant,
    min_idle: Duration,
) -> Option<usize> {
    last_requests
        .map(|t| now.saturating_duration_since(t))
        .enumerate()
        .filter(|&(_, idle)| idle >= min_idle)
        .max_by_key(|&(_, idle)| idle)
        .map(|(i, _)| i)
}

/// The Modbus TCP server thread: one poll loop for the listener and every
/// client, non-blocking sockets throughout.
pub(super) fn serve_tcp(name: &str, listener: TcpListener, spec: &ModbusTcpSpec, unit: Option<u8>, shared: &Shared) {
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
