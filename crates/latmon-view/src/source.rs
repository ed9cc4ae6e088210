// SPDX-License-Identifier: MIT
//! SOURCE words on a laptop (Linux or Windows): `-` stdin, `file:PATH`,
//! `serial:PORT[@BAUD]` (`/dev/ttyUSB0`, `COM3`), `tcp://HOST:PORT`
//! (connects), `udp://HOST:PORT` (binds). The same words as the board's
//! `latmon view` (src/sinks/spec.rs), without `unix:` and serial options.
//! Serial ports and (with `follow`) connections are reopened once a
//! second after they go away: an unplugged adapter comes back by itself.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use latmon_core::receiver::{ByteSource, Got};
use latmon_core::wire::{encode_to_vec, Frame, Request, REQUEST_HELLO};

/// How long one read waits before reporting `Idle`.
pub const READ_WAIT: Duration = Duration::from_millis(250);
/// How often a closed port or connection is tried again.
pub const REOPEN_PERIOD: Duration = Duration::from_secs(1);
/// The default serial speed (as the board's `serial:` output).
const DEFAULT_BAUD: u32 = 115_200;

/// A parsed SOURCE word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Word {
    Stdin,
    File(String),
    Serial { port: String, baud: u32 },
    Tcp(String),
    Udp(String),
}

impl Word {
    pub fn parse(w: &str) -> Result<Word, String> {
        let bad = |why: &str| format!("source {w:?}: {why}");
        if w == "-" {
            return Ok(Word::Stdin);
        }
        if let Some(p) = w.strip_prefix("file:") {
            return if p.is_empty() { Err(bad("expected file:PATH")) } else { Ok(Word::File(p.into())) };
        }
        if let Some(rest) = w.strip_prefix("serial:") {
            let (port, baud) = match rest.rsplit_once('@') {
                Some((p, b)) => (p, b.parse::<u32>().map_err(|_| bad("baud rate must be a number"))?),
                None => (rest, DEFAULT_BAUD),
            };
            if port.is_empty() {
                return Err(bad("expected serial:PORT[@BAUD] (serial:/dev/ttyUSB0@115200, serial:COM3)"));
            }
            if !(50..=4_000_000).contains(&baud) {
                return Err(bad("baud rate must be in 50..4000000"));
            }
            return Ok(Word::Serial { port: port.into(), baud });
        }
        for (prefix, make) in [("tcp://", Word::Tcp as fn(String) -> Word), ("udp://", Word::Udp)] {
            if let Some(a) = w.strip_prefix(prefix) {
                if !a.contains(':') {
                    return Err(bad("expected HOST:PORT"));
                }
                return Ok(make(a.into()));
            }
        }
        Err(bad("expected -, file:PATH, serial:PORT[@BAUD], tcp://HOST:PORT or udp://HOST:PORT"))
    }

    /// A file or stdin: a replay that ends.
    pub fn is_replay(&self) -> bool {
        matches!(self, Word::Stdin | Word::File(_))
    }
}

enum Kind {
    /// Stdin is read by a thread (there is no portable poll on it).
    Stdin(Receiver<io::Result<Vec<u8>>>, Vec<u8>),
    File(File),
    Tcp(String, Option<TcpStream>),
    Udp(UdpSocket),
    Serial(String, u32, Option<Box<dyn serialport::SerialPort>>),
}

pub struct Source {
    name: String,
    kind: Kind,
    follow: bool,
    next_try: Instant,
    /// The last problem, said once on stderr (not once per retry).
    last_err: String,
    /// Whether to say problems on stderr (not while a full screen is drawn).
    quiet: bool,
}

/// Open a SOURCE word; with `follow`, closed TCP connections are reopened
/// (serial ports always are).
pub fn open(word: &str, follow: bool, quiet: bool) -> Result<Source, String> {
    let w = Word::parse(word)?;
    let name = word.to_string();
    let kind = match w {
        Word::Stdin => {
            let (tx, rx) = mpsc::sync_channel(16);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 8192];
                loop {
                    let r = io::stdin().lock().read(&mut buf).map(|n| buf[..n].to_vec());
                    let end = !matches!(&r, Ok(v) if !v.is_empty());
                    if tx.send(r).is_err() || end {
                        break;
                    }
                }
            });
            Kind::Stdin(rx, Vec::new())
        }
        Word::File(p) => Kind::File(File::open(&p).map_err(|e| format!("source {word}: {e}"))?),
        Word::Tcp(a) => {
            let s = match connect_tcp(&a) {
                Ok(s) => Some(s),
                Err(_) if follow => None,
                Err(e) => return Err(format!("source {word}: connect: {e}")),
            };
            Kind::Tcp(a, s)
        }
        Word::Udp(a) => {
            let s = UdpSocket::bind(&a).map_err(|e| format!("source {word}: bind: {e}"))?;
            s.set_read_timeout(Some(READ_WAIT)).map_err(|e| e.to_string())?;
            Kind::Udp(s)
        }
        Word::Serial { port, baud } => {
            let p = open_serial(&port, baud).ok();
            Kind::Serial(port, baud, p)
        }
    };
    Ok(Source { name, kind, follow, next_try: Instant::now() + REOPEN_PERIOD, last_err: String::new(), quiet })
}

fn open_serial(port: &str, baud: u32) -> serialport::Result<Box<dyn serialport::SerialPort>> {
    let mut p = serialport::new(port, baud).timeout(READ_WAIT).open()?;
    // Bytes a previous user left in the driver are not ours to decode.
    let _ = p.clear(serialport::ClearBuffer::Input);
    // Ask the agent for its whole probe table now (a Request frame;
    // agents of revision 2 or older skip it).
    let _ = p.write_all(&encode_to_vec(&Frame::Request(Request { what: REQUEST_HELLO })).unwrap_or_default());
    Ok(p)
}

fn connect_tcp(a: &str) -> io::Result<TcpStream> {
    let s = TcpStream::connect(a)?;
    s.set_read_timeout(Some(READ_WAIT))?;
    Ok(s)
}

fn idle(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

impl Source {
    fn note(&mut self, what: &str, e: &dyn std::fmt::Display) {
        let msg = format!("{what}: {e}");
        if msg != self.last_err {
            if !self.quiet {
                eprintln!("latmon-view: source {}: {msg}", self.name);
            }
            self.last_err = msg;
        }
    }

    /// The last problem with the source (for the screen), if any.
    pub fn problem(&self) -> &str {
        &self.last_err
    }

    /// Wait until a reopen is due (at most READ_WAIT); true when it is.
    fn retry_due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next_try {
            std::thread::sleep(READ_WAIT.min(self.next_try - now));
            return false;
        }
        self.next_try = now + REOPEN_PERIOD;
        true
    }
}

impl ByteSource for Source {
    fn name(&self) -> &str {
        &self.name
    }

    fn read(&mut self, buf: &mut [u8]) -> Got {
        match &mut self.kind {
            Kind::Stdin(rx, pending) => {
                if pending.is_empty() {
                    match rx.recv_timeout(READ_WAIT) {
                        Ok(Ok(v)) if !v.is_empty() => *pending = v,
                        Ok(_) | Err(RecvTimeoutError::Disconnected) => return Got::End,
                        Err(RecvTimeoutError::Timeout) => return Got::Idle,
                    }
                }
                let n = pending.len().min(buf.len());
                buf[..n].copy_from_slice(&pending[..n]);
                pending.drain(..n);
                Got::Data(n)
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
            Kind::Tcp(a, slot) => {
                let Some(s) = slot else {
                    let a = a.clone();
                    if !self.retry_due() {
                        return Got::Idle;
                    }
                    return match connect_tcp(&a) {
                        Ok(s) => {
                            if let Kind::Tcp(_, slot) = &mut self.kind {
                                *slot = Some(s);
                            }
                            self.last_err.clear();
                            Got::Restart
                        }
                        Err(e) => {
                            self.note("connect", &e);
                            Got::Idle
                        }
                    };
                };
                match s.read(buf) {
                    Ok(n) if n > 0 => Got::Data(n),
                    Err(e) if idle(&e) => Got::Idle,
                    other => {
                        *slot = None;
                        if let Err(e) = other {
                            self.note("read", &e);
                        } else {
                            self.note("read", &"connection closed");
                        }
                        if !self.follow {
                            return Got::End;
                        }
                        self.next_try = Instant::now() + REOPEN_PERIOD;
                        Got::Idle
                    }
                }
            }
            Kind::Serial(port, baud, slot) => {
                let Some(p) = slot else {
                    let (port, baud) = (port.clone(), *baud);
                    if !self.retry_due() {
                        return Got::Idle;
                    }
                    return match open_serial(&port, baud) {
                        Ok(p) => {
                            if let Kind::Serial(_, _, slot) = &mut self.kind {
                                *slot = Some(p);
                            }
                            self.last_err.clear();
                            Got::Restart
                        }
                        Err(e) => {
                            self.note("open", &e);
                            Got::Idle
                        }
                    };
                };
                match p.read(buf) {
                    Ok(n) if n > 0 => Got::Data(n),
                    Ok(_) => Got::Idle,
                    Err(e) if idle(&e) => Got::Idle,
                    Err(e) => {
                        // Unplugged (EIO on Linux, a gone handle on Windows).
                        *slot = None;
                        self.note("read", &e);
                        self.next_try = Instant::now() + REOPEN_PERIOD;
                        Got::Idle
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_and_bad_words_say_why() {
        assert_eq!(Word::parse("serial:COM3").unwrap(), Word::Serial { port: "COM3".into(), baud: 115_200 });
        assert_eq!(
            Word::parse("serial:/dev/ttyUSB0@9600").unwrap(),
            Word::Serial { port: "/dev/ttyUSB0".into(), baud: 9600 }
        );
        assert_eq!(Word::parse("tcp://10.0.0.2:7070").unwrap(), Word::Tcp("10.0.0.2:7070".into()));
        assert_eq!(Word::parse("file:cap.bin").unwrap(), Word::File("cap.bin".into()));
        assert!(Word::parse("-").unwrap().is_replay());
        for (w, why) in [
            ("serial:", "expected serial:PORT"),
            ("serial:COM3@fast", "baud rate must be a number"),
            ("serial:COM3@10", "50..4000000"),
            ("tcp://host", "HOST:PORT"),
            ("modbus:x", "expected -, file:PATH"),
            ("file:", "file:PATH"),
        ] {
            let e = Word::parse(w).unwrap_err();
            assert!(e.contains(why) && e.contains(w), "{w}: {e}");
        }
    }
}
