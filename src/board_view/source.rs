// SPDX-License-Identifier: MIT
//! Byte sources for `latmon view` and `latmon decode`: the SINK words read
//! from the other end (`-` stdin, `serial:` a tty, `tcp://` and `unix:`
//! connect, `udp://` binds, `file:` reads to the end).

use std::fs::File;
use std::io::{self, Read};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serialport::TTYPort;

use crate::sinks::link::REOPEN_PERIOD;
use crate::sinks::serial;
use crate::sinks::spec::{Endpoint, LinkSpec, SpecError};

/// How long one read waits before reporting `Idle` (views redraw then).
pub const READ_WAIT: Duration = Duration::from_millis(250);

/// What one read produced (the receiver's loops are in latmon-core).
use latmon_core::receiver::Got;

enum Kind {
    Stdin,
    File(File),
    Tcp(String, Option<TcpStream>),
    Unix(String, Option<UnixStream>),
    Serial(crate::sinks::spec::SerialSpec, Option<TTYPort>),
    Udp(UdpSocket),
}

pub struct Source {
    name: String,
    kind: Kind,
    /// Reconnect when a connection closes (views) instead of ending.
    follow: bool,
    next_try: Instant,
    last_err: String,
}

/// Why a SOURCE word could not be opened.
#[derive(Debug)]
pub enum SourceError {
    /// The word does not parse.
    Spec(SpecError),
    /// The word has an option only outputs take (`clients=`).
    OutputOption { word: String },
    /// Opening, connecting or binding failed (`what`: `""`, `connect: `,
    /// `bind: `).
    Io { word: String, what: &'static str, err: std::io::Error },
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Spec(e) => e.fmt(f),
            SourceError::OutputOption { word } => write!(f, "source {word}: clients= is an option of outputs"),
            SourceError::Io { word, what, err } => write!(f, "source {word}: {what}{err}"),
        }
    }
}

impl std::error::Error for SourceError {}

/// Open a SOURCE word. With `follow`, closed connections are reopened;
/// serial lines are always reopened (unplugging is normal for them).
pub fn open(word: &str, follow: bool) -> Result<Source, SourceError> {
    let spec = LinkSpec::parse(word).map_err(SourceError::Spec)?;
    if spec.clients.is_some() {
        return Err(SourceError::OutputOption { word: word.into() });
    }
    let io = |what: &'static str| move |err: std::io::Error| SourceError::Io { word: word.into(), what, err };
    let name = spec.endpoint.to_string();
    let kind = match spec.endpoint {
        Endpoint::Stdio => Kind::Stdin,
        Endpoint::File(p) => Kind::File(File::open(&p).map_err(io(""))?),
        Endpoint::Tcp(a) => {
            let s = match connect_tcp(&a) {
                Ok(s) => Some(s),
                Err(e) if follow => {
                    log::warn!("source {name}: {e}; retrying");
                    None
                }
                Err(e) => return Err(io("connect: ")(e)),
            };
            Kind::Tcp(a, s)
        }
        Endpoint::Unix(p) => {
            let s = match connect_unix(&p) {
                Ok(s) => Some(s),
                Err(e) if follow => {
                    log::warn!("source {name}: {e}; retrying");
                    None
                }
                Err(e) => return Err(io("connect: ")(e)),
            };
            Kind::Unix(p, s)
        }
        Endpoint::Serial(s) => {
            let port = match serial::open(&s, READ_WAIT) {
                Ok(mut p) => {
                    ask_for_table(&mut p);
                    Some(p)
                }
                Err(e) => {
                    log::warn!("source {name}: cannot open now ({e}); trying again every {REOPEN_PERIOD:?}");
                    None
                }
            };
            Kind::Serial(s, port)
        }
        Endpoint::Udp(a) => {
            let s = UdpSocket::bind(&a).map_err(io("bind: "))?;
            s.set_read_timeout(Some(READ_WAIT)).map_err(io("bind: "))?;
            Kind::Udp(s)
        }
    };
    Ok(Source { name, kind, follow, next_try: Instant::now() + REOPEN_PERIOD, last_err: String::new() })
}

/// Ask the agent on the other end for the whole probe table (a Request
/// frame; agents of revision 2 or older skip it).
fn ask_for_table(p: &mut TTYPort) {
    use std::io::Write;
    let _ = p.write_all(&serial::hello_request());
}

fn connect_tcp(a: &str) -> io::Result<TcpStream> {
    let s = TcpStream::connect(a)?;
    s.set_read_timeout(Some(READ_WAIT))?;
    Ok(s)
}

fn connect_unix(p: &str) -> io::Result<UnixStream> {
    let s = UnixStream::connect(p)?;
    s.set_read_timeout(Some(READ_WAIT))?;
    Ok(s)
}

fn idle(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

impl latmon_core::receiver::ByteSource for Source {
    fn name(&self) -> &str {
        &self.name
    }

    fn read(&mut self, buf: &mut [u8]) -> Got {
        Source::read(self, buf)
    }
}

impl Source {
    pub fn name(&self) -> &str {
        &self.name
    }

    fn retry_due(&mut self) -> bool {
        if Instant::now() < self.next_try {
            std::thread::sleep(READ_WAIT.min(self.next_try - Instant::now()));
            return false;
        }
        self.next_try = Instant::now() + REOPEN_PERIOD;
        true
    }

    fn note(&mut self, what: &str, e: &io::Error) {
        let msg = format!("{what}: {e}");
        if msg != self.last_err {
            log::warn!("source {}: {msg}", self.name);
            self.last_err = msg;
        }
    }

    pub fn read(&mut self, buf: &mut [u8]) -> Got {
        let follow = self.follow;
        match &mut self.kind {
            Kind::Stdin => {
                let stdin = io::stdin();
                let mut fds = [nix::poll::PollFd::new(stdin.as_fd(), nix::poll::PollFlags::POLLIN)];
                match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(READ_WAIT.as_millis() as u16)) {
                    Ok(0) => Got::Idle,
                    Ok(_) => match stdin.lock().read(buf) {
                        Ok(0) => Got::End,
                        Ok(n) => Got::Data(n),
                        Err(e) if idle(&e) => Got::Idle,
                        Err(_) => Got::End,
                    },
                    Err(nix::errno::Errno::EINTR) => Got::Idle,
                    Err(_) => Got::End,
                }
            }
            Kind::File(f) => match f.read(buf) {
                Ok(0) => Got::End,
                Ok(n) => Got::Data(n),
                Err(e) if idle(&e) => Got::Idle,
                Err(_) => Got::End,
            },
            Kind::Udp(s) => match s.recv(buf) {
                Ok(n) => Got::Data(n),
                Err(e) if idle(&e) => Got::Idle,
                Err(e) => {
                    self.note("receive", &e);
                    Got::Idle
                }
            },
            Kind::Tcp(..) | Kind::Unix(..) => self.read_conn(buf, follow),
            Kind::Serial(..) => self.read_serial(buf),
        }
    }

    fn read_conn(&mut self, buf: &mut [u8], follow: bool) -> Got {
        let res = match &mut self.kind {
            Kind::Tcp(_, Some(s)) => s.read(buf),
            Kind::Unix(_, Some(s)) => s.read(buf),
            _ => {
                // Not connected (follow mode): try again now and then.
                if !self.retry_due() {
                    return Got::Idle;
                }
                let r = match &mut self.kind {
                    Kind::Tcp(a, slot) => connect_tcp(a).map(|s| *slot = Some(s)),
                    Kind::Unix(p, slot) => connect_unix(p).map(|s| *slot = Some(s)),
                    _ => Ok(()),
                };
                return match r {
                    Ok(()) => {
                        log::warn!("source {}: connected", self.name);
                        self.last_err.clear();
                        Got::Restart
                    }
                    Err(e) => {
                        self.note("connect", &e);
                        Got::Idle
                    }
                };
            }
        };
        match res {
            Ok(n) if n > 0 => Got::Data(n),
            Err(e) if idle(&e) => Got::Idle,
            other => {
                if let Err(e) = &other {
                    self.note("read", e);
                }
                if !follow {
                    return Got::End;
                }
                log::warn!("source {}: connection closed; reconnecting", self.name);
                match &mut self.kind {
                    Kind::Tcp(_, s) => *s = None,
                    Kind::Unix(_, s) => *s = None,
                    _ => {}
                }
                self.next_try = Instant::now() + REOPEN_PERIOD;
                Got::Idle
            }
        }
    }

    fn read_serial(&mut self, buf: &mut [u8]) -> Got {
        let Kind::Serial(spec, port) = &mut self.kind else { return Got::End };
        if let Some(p) = port {
            return match p.read(buf) {
                Ok(n) if n > 0 => Got::Data(n),
                Ok(_) => Got::Idle,
                Err(e) if idle(&e) => Got::Idle,
                Err(e) => {
                    *port = None;
                    self.note("read", &e);
                    self.next_try = Instant::now() + REOPEN_PERIOD;
                    Got::Idle
                }
            };
        }
        let spec = spec.clone();
        if !self.retry_due() {
            return Got::Idle;
        }
        match serial::open(&spec, READ_WAIT) {
            Ok(mut p) => {
                ask_for_table(&mut p);
                log::warn!("source {}: open again", self.name);
                self.last_err.clear();
                if let Kind::Serial(_, port) = &mut self.kind {
                    *port = Some(p);
                }
                Got::Restart
            }
            Err(e) => {
                self.note("open", &e);
                Got::Idle
            }
        }
    }
}
