// SPDX-License-Identifier: MIT
//! Socket outputs. `tcp://` and `unix:` listen and push the stream to every
//! connected client with non-blocking writes and a bounded buffer per
//! client: a client that falls too far behind, stalls or dies is
//! disconnected without delaying the agent or the other clients. At most
//! `clients=N` (default 8) are served; at the limit a newcomer displaces
//! the client furthest behind, or is refused when every client is caught
//! up (see [`displaced`]). `udp://` sends one datagram per record.

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::queue::{Pop, Queue};

/// A client more than this many bytes behind is disconnected.
pub const CLIENT_BACKLOG_MAX: usize = 256 * 1024;
/// A client that accepted no byte for this long, with data waiting, is
/// disconnected.
pub const CLIENT_STALL_MAX: Duration = Duration::from_secs(5);
/// Kernel send buffer per client: keeps memory per client bounded.
const CLIENT_SNDBUF: usize = 64 * 1024;

pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, String),
}

enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(b),
            Conn::Unix(s) => s.write(b),
        }
    }
}

struct Client {
    conn: Conn,
    peer: String,
    buf: Vec<u8>,
    off: usize,
    last_progress: Instant,
}

impl Client {
    fn pending(&self) -> usize {
        self.buf.len() - self.off
    }
}

impl Listener {
    /// Bind now, so a bad address or a port in use fails at startup.
    pub fn bind_tcp(addr: &str) -> io::Result<Listener> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(Listener::Tcp(l))
    }

    pub fn bind_unix(path: &str) -> io::Result<Listener> {
        // A socket file left by an earlier run would make bind fail.
        if let Ok(m) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if m.file_type().is_socket() {
                let _ = std::fs::remove_file(path);
            }
        }
        let l = UnixListener::bind(path)?;
        l.set_nonblocking(true)?;
        Ok(Listener::Unix(l, path.to_string()))
    }

    /// The bound address (tcp port 0 resolves to the real port).
    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix(_, p) => p.clone(),
        }
    }

    fn accept(&self) -> io::Result<Option<(Conn, String)>> {
        let res = match self {
            Listener::Tcp(l) => l.accept().map(|(s, a)| {
                let _ = s.set_nodelay(true);
                let _ = nix::sys::socket::setsockopt(&s.as_fd(), nix::sys::socket::sockopt::SndBuf, &CLIENT_SNDBUF);
                (s.set_nonblocking(true).map(|()| Conn::Tcp(s)), a.to_string())
            }),
            Listener::Unix(l, p) => l.accept().map(|(s, _)| {
                let _ = nix::sys::socket::setsockopt(&s.as_fd(), nix::sys::socket::sockopt::SndBuf, &CLIENT_SNDBUF);
                (s.set_nonblocking(true).map(|()| Conn::Unix(s)), p.clone())
            }),
        };
        match res {
            Ok((Ok(c), peer)) => Ok(Some((c, peer))),
            Ok((Err(e), _)) => Err(e),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(&*p);
        }
    }
}

/// Refused connections are logged as warnings at most this often.
const REFUSE_LOG_PERIOD: Duration = Duration::from_secs(10);

/// At the client limit, which client a newcomer displaces (by position),
/// given each client's bytes waiting for it, oldest connection first: the
/// one furthest behind (of equals, the newest: established clients keep
/// their slots). None when every client is caught up: then the newcomer is
/// refused. So a
/// client that reads what it is sent keeps its slot; one that does not
/// read holds a slot only until someone else wants it (and in any case
/// only until [`CLIENT_BACKLOG_MAX`] or [`CLIENT_STALL_MAX`]).
pub fn displaced(pending: impl Iterator<Item = usize>) -> Option<usize> {
    pending.enumerate().filter(|&(_, p)| p > 0).max_by_key(|&(i, p)| (p, i)).map(|(i, _)| i)
}

/// The writer thread of a listening output, serving `max_clients` at once.
pub fn serve(q: &Queue, name: &str, listener: Listener, frames: bool, max_clients: usize) {
    let mut clients: Vec<Client> = Vec::new();
    let (mut data, mut lens) = (Vec::new(), Vec::new());
    let mut closing = false;
    let mut last_refuse_log: Option<Instant> = None;
    let mut refused = 0u64;
    loop {
        let popped = if closing { Pop::Closed } else { q.pop(&mut data, &mut lens, Duration::from_millis(20)) };
        loop {
            match listener.accept() {
                Ok(Some((conn, peer))) => {
                    if clients.len() >= max_clients {
                        match displaced(clients.iter().map(Client::pending)) {
                            Some(i) => {
                                // remove, not swap_remove: the order stays the connection order.
                                let old = clients.remove(i);
                                log::info!(
                                    "output {name}: client {} ({} bytes behind) makes room for {peer}",
                                    old.peer,
                                    old.pending()
                                );
                            }
                            None => {
                                refused += 1;
                                if last_refuse_log.is_none_or(|t| t.elapsed() >= REFUSE_LOG_PERIOD) {
                                    log::warn!("output {name}: connection from {peer} refused: {max_clients} clients, all caught up ({refused} refused so far)");
                                    last_refuse_log = Some(Instant::now());
                                }
                                drop(conn);
                                continue;
                            }
                        }
                    }
                    log::info!("output {name}: client {peer} connected");
                    let mut buf = Vec::with_capacity(4096);
                    if frames {
                        // Resync the client's decoder, then name the probes.
                        buf.push(latmon_core::wire::DELIMITER);
                        q.hello(&mut buf);
                    }
                    clients.push(Client { conn, peer, buf, off: 0, last_progress: Instant::now() });
                }
                Ok(None) => break,
                Err(e) => {
                    log::debug!("output {name}: accept: {e}");
                    break;
                }
            }
        }
        if popped == Pop::Data {
            clients.retain_mut(|c| {
                if c.pending() + data.len() > CLIENT_BACKLOG_MAX {
                    log::warn!("output {name}: client {} is {} bytes behind: disconnected", c.peer, c.pending());
                    return false;
                }
                if c.off > 0 && c.off >= c.buf.len() / 2 {
                    c.buf.drain(..c.off);
                    c.off = 0;
                }
                c.buf.extend_from_slice(&data);
                true
            });
        }
        let now = Instant::now();
        clients.retain_mut(|c| {
            while c.pending() > 0 {
                match c.conn.write(&c.buf[c.off..]) {
                    Ok(0) => {
                        log::info!("output {name}: client {} closed", c.peer);
                        return false;
                    }
                    Ok(n) => {
                        c.off += n;
                        c.last_progress = now;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::info!("output {name}: client {}: {e}: disconnected", c.peer);
                        return false;
                    }
                }
            }
            if c.pending() == 0 {
                c.buf.clear();
                c.off = 0;
                c.last_progress = now;
            } else if now.duration_since(c.last_progress) > CLIENT_STALL_MAX {
                log::warn!(
                    "output {name}: client {} accepted nothing for {:?}: disconnected",
                    c.peer,
                    CLIENT_STALL_MAX
                );
                return false;
            }
            true
        });
        q.clients.store(clients.len() as u32, std::sync::atomic::Ordering::Relaxed);
        if popped == Pop::Closed {
            closing = true;
            let flushed = clients.iter().all(|c| c.pending() == 0);
            if flushed || q.deadline().is_none_or(|d| Instant::now() >= d) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The writer thread of a `udp://` output: one datagram per record.
pub fn send_udp(q: &Queue, name: &str, sock: UdpSocket) {
    let (mut data, mut lens) = (Vec::new(), Vec::new());
    let mut warned = false;
    loop {
        match q.pop(&mut data, &mut lens, Duration::from_millis(200)) {
            Pop::Closed => return,
            Pop::Empty => continue,
            Pop::Data => {}
        }
        let mut at = 0;
        for &n in &lens {
            let rec = &data[at..at + n];
            at += n;
            match sock.send(rec) {
                Ok(_) => warned = false,
                // Nobody listening (ICMP port unreachable) is normal for UDP.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) => {
                    q.note_dropped(1, n);
                    if !warned {
                        log::warn!("output {name}: send: {e}");
                        warned = true;
                    }
                }
            }
        }
    }
}

/// A UDP socket connected to `addr` (for outputs).
pub fn udp_to(addr: &str) -> io::Result<UdpSocket> {
    let target = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing"))?;
    let local = if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(local)?;
    s.connect(target)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newcomers_displace_the_client_furthest_behind_never_a_reader() {
        assert_eq!(displaced([0, 4096, 0, 70_000, 12].into_iter()), Some(3));
        assert_eq!(displaced([0, 0, 0].into_iter()), None, "everyone caught up: the newcomer is refused");
        assert_eq!(displaced([5, 5, 0].into_iter()), Some(1), "ties: the newer client");
        assert_eq!(displaced(std::iter::empty()), None);
    }
}
