// SPDX-License-Identifier: MIT
//! `latmon view` and `latmon decode` on the board: latmon-core's screen,
//! JSON lines and loops (crates/latmon-core/src/receiver.rs) over the SOURCE
//! words of [`source`] (the reading side of the SINK words), writing to
//! this process's stdout/stderr.

pub mod source;

use std::io::{self, IsTerminal};
use std::time::Duration;

use crate::error::Result;
use latmon_core::wire::LinkStats;

/// `latmon decode SOURCE`: a JSON line per frame on stdout until the
/// source ends (or `duration` passes); link statistics on stderr.
pub fn run_decode(word: &str, duration: Option<Duration>) -> Result<LinkStats> {
    let mut src = source::open(word, false)?;
    Ok(latmon_core::receiver::run_decode(&mut src, duration, &mut io::stdout().lock(), &mut io::stderr())?)
}

/// `latmon view SOURCE`: the plain screen, redrawn as frames arrive; on a
/// terminal, fitted to its size (every family line on it).
pub fn run_view(word: &str, duration: Option<Duration>) -> Result<()> {
    let mut src = source::open(word, true)?;
    let tty = io::stdout().is_terminal();
    let replay = word == "-" || word.starts_with("file:");
    let size = || {
        let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCGWINSZ writes one winsize into `ws`, which outlives the call.
        let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
        (ok && ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
    };
    let (out, err) = (&mut io::stdout().lock(), &mut io::stderr());
    Ok(latmon_core::receiver::run_view_sized(&mut src, tty, replay, duration, out, err, &size)?)
}
