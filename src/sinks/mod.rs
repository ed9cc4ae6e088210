// SPDX-License-Identifier: MIT
//! Where summaries go: stdout, serial lines, TCP/Unix listeners, UDP,
//! files, Modbus, Prometheus - several at once. Every output renders on the
//! agent's thread (text, JSON, wire frames, registers, an exposition, into
//! buffers allocated once) and hands the bytes to its own writer thread
//! through a bounded [`queue::Queue`] (or a shared image): a slow, blocked
//! or unplugged link never delays aggregation; what does not fit is
//! dropped, counted, reported in Status frames and logged.
//!
//! One module per output ([`frames`], [`modbus`], [`prom`], [`serial`],
//! [`net`]), each owning its model and its I/O; what they share is in the
//! leaf [`link`]. This file only dispatches a SINK word to its output.

pub mod frames;
pub mod link;
pub mod modbus;
pub mod net;
pub mod prom;
pub mod queue;
pub mod serial;
pub mod spec;

pub use link::{share_link_stats, LinkStats, Sink, HELLO_EVERY_SUMMARIES, HELLO_PERIOD_NS, QUEUE_BYTES, REOPEN_PERIOD};

use latmon_core::table::TextStyle;

use crate::config::Format;
use spec::{Endpoint, LinkSpec};

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
    frames::open(word, global, text)
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
