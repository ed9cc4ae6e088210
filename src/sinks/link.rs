// SPDX-License-Identifier: MIT
//! What every output shares: the [`Sink`] interface, link statistics, the
//! periods and sizes all outputs keep to, and how an output thread starts.
//! A leaf: the outputs import it, it imports none of them.

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

use latmon_core::session::Tick;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};

/// An output link's trouble since start (the Prometheus output shows
/// every output's as `latmon_output_dropped_total` and
/// `latmon_output_errors_total`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Records (frames, lines) dropped: the link was slower than the
    /// summaries, or down.
    pub dropped: u64,
    /// Damaged or malformed requests received (Modbus).
    pub errors: u64,
}

/// A destination for interval summaries.
pub trait Sink: Send {
    fn name(&self) -> &str;
    /// Render and queue; never waits for I/O.
    fn emit(&mut self, t: &Tick<'_>);
    /// Flush what is queued (waiting at most `timeout`) and stop.
    fn close(&mut self, timeout: Duration);
    /// This output's link trouble since start; None when it has no link
    /// of its own to report on.
    fn link_stats(&self) -> Option<LinkStats> {
        None
    }
    /// Output `index` (named `name`) reports `stats`: called for every
    /// reporting output before each `emit`. Ignored unless the output
    /// shows them.
    fn see_link(&mut self, _index: usize, _name: &str, _stats: LinkStats) {}
}

/// Show every output's link stats to every other output (before `emit`).
pub fn share_link_stats(sinks: &mut [Box<dyn Sink>]) {
    for k in 0..sinks.len() {
        let Some(st) = sinks[k].link_stats() else { continue };
        let (before, rest) = sinks.split_at_mut(k);
        let Some((me, after)) = rest.split_first_mut() else { continue };
        for s in before.iter_mut().chain(after.iter_mut()) {
            s.see_link(k, me.name(), st);
        }
    }
}

/// Hello (and Status) go out at least this often...
pub const HELLO_PERIOD_NS: u64 = 10_000_000_000;
/// ...and at least every this many summaries.
pub const HELLO_EVERY_SUMMARIES: u32 = 32;
/// Queue capacity of outputs other than serial lines.
pub const QUEUE_BYTES: usize = 256 * 1024;

/// How often a vanished serial device is looked for again.
pub const REOPEN_PERIOD: Duration = Duration::from_secs(1);

/// Start an output thread with SIGINT/SIGTERM/SIGHUP blocked (the agent
/// collects them synchronously; an output thread must never be the thread
/// they hit). The name is cut to the kernel's 15 bytes.
pub fn spawn_blocked(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGINT);
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGHUP);
    let old = stop.thread_swap_mask(SigmaskHow::SIG_BLOCK).map_err(io::Error::from)?;
    let res = std::thread::Builder::new().name(name.chars().take(15).collect()).spawn(f);
    let _ = old.thread_set_mask();
    res
}
