// SPDX-License-Identifier: MIT
//! systemd readiness, status and watchdog (sd_notify(3)).

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// sd_notify(3) without libsystemd: datagrams to `$NOTIFY_SOCKET` (a path,
/// or `@name` in the abstract namespace). Connected at start, so it keeps
/// working after the privilege drop.
pub struct Notifier {
    sock: Option<UnixDatagram>,
    /// Half of `$WATCHDOG_USEC` when the watchdog is on for this process.
    pub watchdog: Option<Duration>,
}

impl Notifier {
    pub fn from_env() -> Notifier {
        let sock = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let s = UnixDatagram::unbound().ok()?;
            let bytes = path.as_encoded_bytes();
            let res = if let Some(name) = bytes.strip_prefix(b"@") {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name).and_then(|a| s.connect_addr(&a))
            } else {
                s.connect(&path)
            };
            match res {
                Ok(()) => Some(s),
                Err(e) => {
                    log::warn!("NOTIFY_SOCKET {}: {e}", path.to_string_lossy());
                    None
                }
            }
        });
        let for_us = std::env::var("WATCHDOG_PID").map_or(true, |p| p.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us && sock.is_some())
            .map(|u| Duration::from_micros(u / 2));
        Notifier { sock, watchdog }
    }

    /// Send one notification (e.g. `READY=1`); failures are only logged.
    pub fn send(&self, msg: &str) {
        if let Some(s) = &self.sock {
            if let Err(e) = s.send(msg.as_bytes()) {
                log::debug!("NOTIFY_SOCKET: {e}");
            }
        }
    }
}
